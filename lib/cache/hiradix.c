/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hiradix.c - the hierarchical radix cache: SGLang HiCache's HiRadixTree
 * over a device pool (L1, kvs_pool_t) and its host pool (L2, kvs_hpool_t).
 * This file is the tree: its nodes, their leaf sets and locks, match,
 * insert, eviction, validation and the statistics.  The copies between the
 * tiers are lib/cache/hiradix_xfer.c's (the transfer controller), the
 * storage tier (L3) lib/cache/hiradix_l3.c's, the cache's creation,
 * destruction and accessors lib/cache/hiradix_life.c's, what the pool asks
 * of its caches lib/cache/hiradix_pool.c's; lib/cache/hiradix_int.h holds
 * what they share.
 *
 * Why a tree of its own and not lib/cache/radix.c's nodes with a host value.
 * The radix cache's readers walk the tree under RCU with no lock, and its
 * nodes carry one value whose pages a reader may copy out at any time.  A
 * node of this tree changes state under its feet in ways an RCU reader would
 * have to re-check at every step (device pages dropped while the node
 * stays, host copies becoming valid when a transfer completes, load back
 * filling device pages in).  So one mutex is taken around every call: a
 * single writer, no lock-free readers.
 *
 * Nodes.  A node holds a span of whole pages of tokens: key[len], the device
 * locations locs[len] (meaningful only while on_dev; the array stays
 * allocated so that re-materialising a tombstone allocates nothing), and
 * host[len / page_size], its host pages, or NULL.  States, as the seed
 * names them: on the device (on_dev, maybe host_ok too), a tombstone (not
 * on_dev, host_ok: evicted from the device, backed up on the host).  A node
 * is never in neither.  A node's children are a list, and each is found
 * by its extra key and first page in the tree's child table
 * (hr_find_child(), O(1)).
 *
 * Extra keys (SGLang's extra_key: a LoRA adapter, a cache salt).  Every
 * node carries the extra key it was inserted under (extra, its root
 * child's, inherited by split); a walk under one key never enters another
 * key's children, so requests with different extra keys never share a
 * prefix.  The calls without one use 0.
 *
 * Host copies (the controller's essay has the details).  host != NULL and
 * !host_ok: a backup is pending.  Valid copies always form a prefix from
 * the root (the backup invariant); a match or insert through a node being
 * loaded back waits for the load (hr_walk()), a write-back eviction for
 * its node's backup.
 *
 * Events (h->sink, optional): a node keeps the chained hash of its last
 * page, so that its pages' events need no walk to the root.
 *
 * Locks on nodes (lock_ref) count on the node and every ancestor, as
 * SGLang's inc_lock_ref does: a backup in flight locks its node, a load
 * back locks the last node loaded (so the chain and its anchor), the caller
 * locks what its requests use.  The caller's share is counted apart too
 * (ulock), so that its unlock can never undo a lock of the cache's.
 *
 * Pages.  An insert's locations are checked as the radix cache checks
 * them: in the pool's range, held by the caller, none twice, and none the
 * tree would take over already on the device in it (h->held, a bit per
 * pool page, kept by hr_set_dev() and the insert and delete of device nodes).
 * Calls taking a node refuse one of another cache (node->tree).
 *
 * Leaf sets, kept as a node changes (hr_leaf_update()), not found by a walk:
 * dheap, the device leaves (on_dev, unlocked, no child on the device), and
 * hheap, the host leaves (tombstones, unlocked, no child), each the shared
 * eviction heap (lib/cache/evict_heap.c, KVS_EVICT_LRU) over a key in the node
 * (dk, hk; idx -1: not in the set).  Both evictions take the top, the least
 * recently used member, in O(log n); a parent that becomes a leaf joins its
 * set, and a member touched (hr_touch()) moves in its heap.  A node is in at
 * most one set (on_dev or not).  Ties cannot happen, so the victim does not
 * depend on the heap's shape: every touch takes a fresh tick of h->clock,
 * and the one copy, hr_split() giving the new parent its child's value, is
 * shared by an ancestor and its descendant, never members of one set
 * together (a device leaf has no device descendant, a host leaf none).
 * Joining a set never allocates: each heap has room for every node, which
 * hr_node_new() reserves before the node exists (failing the call with ENOMEM,
 * as a failed malloc of the node would), so no node misses its set for want
 * of memory.
 *
 * Locking: h->lock, a mutex, around every exported call, at level 2 of the
 * lock order (common/common.h); hostpool and pool calls are made under it
 * (they take only their own, inner locks and never call back).  It is
 * dropped, and taken again, across every wait for a transfer, every
 * submission of copies and the ranks' agreement callback (the controller's
 * essay): so a call that waits pins what it holds (hr_pin(): counted in
 * lock_ref and, apart, in pin, as the cache's own lock, so no eviction takes
 * it) and looks again after: hr_walk() walks again from the root after a
 * load it waited for, a write-back eviction evicts its node only if it is
 * still a leaf.  Lock order: h->lock, then the pool's and host pool's
 * locks; pf->m (lib/cache/hiradix_l3.c) under h->lock or alone.  Recursion
 * (validation, usage, dropping a failed copy's subtree, destroy) is as deep
 * as the tree: a key's pages.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hiradix_int.h"
#include "kvslab/radix.h"

/* ------------------------------------------------------------ leaf sets */

/* Put @x, whose key in the leaf set @set is @k, in or out of it. */
static void lset(struct evict_heap *set, node_t *x, struct evict_key *k, bool in)
{
	if (in == (k->idx >= 0))
		return;
	if (in) {
		k->last_access = x->access;
		(void)evict_heap_push(set, k); /* cannot fail: hr_node_new() made room */
	} else {
		evict_heap_remove(set, k);
	}
}

static void dset(kvs_hiradix_t *h, node_t *x, bool in)
{
	lset(&h->dheap, x, &x->dk, in);
}

static void hset(kvs_hiradix_t *h, node_t *x, bool in)
{
	lset(&h->hheap, x, &x->hk, in);
}

/* @x is used now: a fresh tick of the clock, and its place in its set. */
void hr_touch(kvs_hiradix_t *h, node_t *x)
{
	x->access = ++h->clock;
	x->dk.last_access = x->hk.last_access = x->access;
	if (x->dk.idx >= 0)
		evict_heap_update(&h->dheap, &x->dk);
	if (x->hk.idx >= 0)
		evict_heap_update(&h->hheap, &x->hk);
}

bool hr_is_dleaf(const kvs_hiradix_t *h, const node_t *x)
{
	return x != &h->root && x->on_dev && x->lock_ref == 0 && x->ndev == 0;
}

static bool is_hleaf(const kvs_hiradix_t *h, const node_t *x)
{
	return x != &h->root && !x->on_dev && x->host_ok && x->lock_ref == 0 &&
	       x->hlock == 0 && x->nchildren == 0;
}

void hr_leaf_update(kvs_hiradix_t *h, node_t *x)
{
	dset(h, x, hr_is_dleaf(h, x));
	hset(h, x, is_hleaf(h, x));
}

/* Count @x's tokens in the gauges (@s 1) or out of them (-1), around every
 * change of its length, device pages or host pages. */
void hr_acct(kvs_hiradix_t *h, const node_t *x, int s)
{
	uint64_t len = (uint64_t)((int64_t)s * (int64_t)x->len);

	h->use.nodes += (uint64_t)(int64_t)s;
	if (x->on_dev)
		h->use.device_tokens += len;
	else
		h->use.tombstone_tokens += len;
	if (x->host)
		h->use.host_tokens += len;
}

/* Mark @x's device pages in h->held (@on) or clear them. */
void hr_held_mark(kvs_hiradix_t *h, const node_t *x, bool on)
{
	size_t i;

	for (i = 0; i < x->len; i += h->ps) {
		uint64_t pg = (uint64_t)(uint32_t)x->locs[i] / h->ps;

		if (on)
			bit_set(h->held, pg);
		else
			bit_clear(h->held, pg);
	}
}

void hr_set_dev(kvs_hiradix_t *h, node_t *x, bool on)
{
	if (x->on_dev == on)
		return;
	hr_held_mark(h, x, on);
	hr_acct(h, x, -1);
	x->on_dev = on;
	hr_acct(h, x, 1);
	if (on)
		x->parent->ndev++;
	else
		x->parent->ndev--;
	hr_leaf_update(h, x);
	hr_leaf_update(h, x->parent);
}

void hr_lock_path(kvs_hiradix_t *h, node_t *x, int d)
{
	for (; x; x = x->parent) {
		x->lock_ref = (uint32_t)((int)x->lock_ref + d);
		hr_leaf_update(h, x);
	}
}

/* A lock of the caller's (kvs_hiradix_lock(), the _lock calls): counted in
 * lock_ref and, apart, in ulock, so that an unlock can only undo one. */
static void ulock_path(kvs_hiradix_t *h, node_t *x, int d)
{
	node_t *y;

	for (y = x; y; y = y->parent)
		y->ulock = (uint32_t)((int)y->ulock + d);
	hr_lock_path(h, x, d);
}

/* ------------------------------------------------------------ nodes */

/*
 * The child table: every node but the root is in one hash table of the
 * tree, under its parent and the hash of its first page (kh), chained
 * through knext, so that a walk finds a child in O(1) however many
 * children its parent has.  It has a bucket per node at least, grown by
 * hr_node_new() before a node exists (as the leaf sets' room), so that
 * adding a child never allocates.
 */
static size_t kt_slot(const kvs_hiradix_t *h, const node_t *p, uint64_t kh)
{
	return (size_t)(kvev_mix64(kh ^ (uint64_t)(uintptr_t)p) & h->kt_mask);
}

/* Room in the child table for @want nodes; -1 (ENOMEM) if not. */
static int kt_reserve(kvs_hiradix_t *h, size_t want)
{
	size_t nb = h->kt ? h->kt_mask + 1 : 0, i, nmask;
	node_t **t, *x, *n;

	if (want <= nb)
		return 0;
	nmask = nb ? 2 * nb - 1 : 63;
	while (want > nmask + 1)
		nmask = 2 * nmask + 1;
	t = calloc(nmask + 1, sizeof(*t));
	if (!t)
		return -1;
	for (i = 0; i < nb; i++)
		for (x = h->kt[i]; x; x = n) {
			size_t j = (size_t)(kvev_mix64(x->kh ^ (uint64_t)(uintptr_t)x->parent) & nmask);

			n = x->knext;
			x->knext = t[j];
			t[j] = x;
		}
	free(h->kt);
	h->kt = t;
	h->kt_mask = nmask;
	return 0;
}

node_t *hr_node_new(kvs_hiradix_t *h, size_t len)
{
	node_t *x;

	/* Room in each leaf set and in the child table for one more node,
	 * so that joining one never allocates. */
	if (evict_heap_reserve(&h->dheap, h->nnodes + 1) < 0 ||
	    evict_heap_reserve(&h->hheap, h->nnodes + 1) < 0 || kt_reserve(h, h->nnodes + 1) < 0)
		return NULL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->key = malloc(len * sizeof(int32_t));
	x->locs = malloc(len * sizeof(int32_t));
	x->len = len;
	if (h->store)
		x->pkey = malloc(len / h->ps * sizeof(kvs_page_key_t));
	if (!x->key || !x->locs || (h->store && !x->pkey)) {
		KVS_FREE_ALL(x->key, x->locs, x->pkey, x);
		return NULL;
	}
	x->dk.idx = x->hk.idx = -1;
	x->tree = h;
	h->nnodes++;
	return x;
}

/* Hang @c (its key set) under @p: in the children list and the child
 * table.  Never allocates. */
void hr_child_add(node_t *p, node_t *c)
{
	kvs_hiradix_t *h = c->tree;
	size_t j;

	c->parent = p;
	DLIST_PUSH(p->child, c);
	p->nchildren++;
	if (c->on_dev)
		p->ndev++;
	c->kh = kvev_hash_page(c->extra, c->key, h->ps);
	j = kt_slot(h, p, c->kh);
	c->knext = h->kt[j];
	h->kt[j] = c;
}

static void hr_child_del(node_t *p, node_t *c)
{
	kvs_hiradix_t *h = c->tree;
	node_t **l = &h->kt[kt_slot(h, p, c->kh)];

	while (*l != c)
		l = &(*l)->knext;
	*l = c->knext;
	c->knext = NULL;
	DLIST_DEL(p->child, c);
	p->nchildren--;
	if (c->on_dev)
		p->ndev--;
}

void hr_node_free(kvs_hiradix_t *h, node_t *x)
{
	h->nnodes--;
	KVS_FREE_ALL(x->key, x->locs, x->host, x->pkey, x->orph, x);
}

/* The child of @x under @extra whose first page is @key's, or NULL. */
node_t *hr_find_child(const kvs_hiradix_t *h, const node_t *x, uint64_t extra, const int32_t *key)
{
	uint64_t kh;
	node_t *c;

	if (!x->child)
		return NULL;
	kh = kvev_hash_page(extra, key, h->ps);
	for (c = h->kt[kt_slot(h, x, kh)]; c; c = c->knext)
		if (c->parent == x && c->kh == kh && c->extra == extra &&
		    memcmp(c->key, key, h->ps * sizeof(int32_t)) == 0)
			return c;
	return NULL;
}

/* Tokens, in whole pages, that @c's key shares with @key[0 .. n). */
size_t hr_common(const kvs_hiradix_t *h, const node_t *c, const int32_t *key, size_t n)
{
	size_t m = c->len < n ? c->len : n, i;

	for (i = 0; i < m; i++)
		if (c->key[i] != key[i])
			break;
	return i - i % h->ps;
}

void hr_pages_of(const kvs_hiradix_t *h, const int32_t *locs, size_t len, int32_t *pages)
{
	size_t i;

	for (i = 0; i < len / h->ps; i++)
		pages[i] = locs[i * h->ps] / (int32_t)h->ps;
}

/* ------------------------------------------------------------ events */

/* @x's chained page hash, from its parent's; kept only when events go
 * somewhere. */
void hr_node_hash(kvs_hiradix_t *h, node_t *x)
{
	if (h->sink.cb)
		x->hash = kvev_chain(&h->sink, x->parent->hash, x->extra, x->key, 0, (uint32_t)x->len,
				     0);
}

/* One event of @type per page of @x, on @medium. */
void hr_node_events(kvs_hiradix_t *h, node_t *x, int type, int medium)
{
	struct kvev_sink s = h->sink;

	if (!s.cb)
		return;
	s.medium = medium;
	kvev_chain(&s, x->parent->hash, x->extra, x->key, 0, (uint32_t)x->len, type);
}

/* ------------------------------------------------------------ split */

/* Cut @c after @k tokens: parent -> nn (c's first k) -> c (the rest).  A
 * backup or a load in flight on @c is shared: nn joins its batch or its
 * chain, so nothing waits. */
node_t *hr_split(kvs_hiradix_t *h, node_t *c, size_t k)
{
	node_t *nn = hr_node_new(h, k), *p = c->parent;
	size_t kp = k / h->ps;

	if (!nn)
		return NULL;
	nn->extra = c->extra;
	if (c->bt) {
		nn->orph = malloc(sizeof(*nn->orph)); /* as hr_backup()'s */
		if (!nn->orph) {
			hr_node_free(h, nn);
			return NULL;
		}
	}
	if (c->host) {
		nn->host = malloc(kp * sizeof(int32_t));
		if (!nn->host) {
			hr_node_free(h, nn);
			return NULL;
		}
		memcpy(nn->host, c->host, kp * sizeof(int32_t));
		memmove(c->host, c->host + kp, (c->len - k) / h->ps * sizeof(int32_t));
		nn->host_ok = c->host_ok;
	}
	hr_acct(h, c, -1);
	memcpy(nn->key, c->key, k * sizeof(int32_t));
	memcpy(nn->locs, c->locs, k * sizeof(int32_t));
	memmove(c->key, c->key + k, (c->len - k) * sizeof(int32_t));
	memmove(c->locs, c->locs + k, (c->len - k) * sizeof(int32_t));
	c->len -= k;
	nn->on_dev = c->on_dev;
	nn->lock_ref = c->lock_ref;
	nn->ulock = c->ulock;
	nn->hit_count = c->hit_count;
	if (c->pkey) {
		memcpy(nn->pkey, c->pkey, kp * sizeof(kvs_page_key_t));
		memmove(c->pkey, c->pkey + kp, c->len / h->ps * sizeof(kvs_page_key_t));
	}
	nn->access = c->access;
	hr_child_del(p, c);
	hr_child_add(p, nn);
	hr_child_add(nn, c);
	hr_acct(h, nn, 1);
	hr_acct(h, c, 1);
	hr_node_hash(h, nn);
	if (c->ld) {
		nn->ld = c->ld;
		if (c->ld->top == c)
			c->ld->top = nn;
	}
	if (c->bt) {
		nn->bt = c->bt;
		if (!hr_queued(h, c->bt))
			c->bt->refs++;
		hr_bset(h, nn, true);
		hr_lock_path(h, nn, 1);
	}
	hr_leaf_update(h, nn);
	hr_leaf_update(h, c);
	return nn;
}

/* Walk @key[0 .. n) from the root, splitting where it ends inside a node;
 * *@pos receives the tokens matched.  A load back in flight on the path is
 * waited for: a match must return locations that hold their data, and an
 * insert must not hang a device node under a chain whose load could still
 * fail.  NULL with errno ENOMEM. */
node_t *hr_walk(kvs_hiradix_t *h, uint64_t extra, const int32_t *key, size_t n, size_t *pos)
{
	node_t *x = &h->root, *c;
	size_t p = 0;

	while (p < n && (c = hr_find_child(h, x, extra, key + p))) {
		size_t k;

		if (c->ld) {
			/* Wait for the load, h->lock dropped: then walk again
			 * (the path may have changed; the nodes touched
			 * again keep their order). */
			hr_pin(h, c, 1);
			hr_settle_load(h, c);
			hr_pin(h, c, -1);
			x = &h->root;
			p = 0;
			continue;
		}
		k = hr_common(h, c, key + p, n - p);
		if (k < c->len) {
			c = hr_split(h, c, k);
			if (!c)
				return NULL;
		}
		hr_touch(h, c);
		p += k;
		x = c;
	}
	*pos = p;
	return x;
}

/* ------------------------------------------------------------ eviction */

/* The least recently used member of the leaf set @set, whose key is at
 * @off in each node, or NULL. */
static node_t *lru(const struct evict_heap *set, size_t off)
{
	struct evict_key *k = evict_heap_top(set);

	return k ? (node_t *)((char *)k - off) : NULL;
}

static void node_delete(kvs_hiradix_t *h, node_t *x)
{
	node_t *p = x->parent;

	dset(h, x, false);
	hset(h, x, false);
	if (x->on_dev)
		hr_held_mark(h, x, false);
	hr_acct(h, x, -1);
	hr_child_del(p, x);
	hr_leaf_update(h, p);
	hr_node_free(h, x);
}

/*
 * Evict the device leaf @x as kvs_hiradix_evict_device() does: a tombstone
 * if it has a valid host copy, else deleted; under KVS_WRITE_BACK a node
 * without a copy is backed up first, h->lock dropped while it waits (x
 * pinned), and evicted only if it is still a device leaf then.  Returns
 * the tokens freed (0: left).
 */
size_t hr_evict_one(kvs_hiradix_t *h, node_t *x)
{
	size_t len = x->len;

	if (!x->host_ok && !x->host && h->policy == KVS_WRITE_BACK) {
		/* Write back: copy it out now, then demote it.  A failed
		 * copy leaves no host copy: deleted below. */
		if (hr_backup(h, x) == 0) {
			hr_pin(h, x, 1);
			hr_settle(h, x);
			hr_pin(h, x, -1);
			if (!hr_is_dleaf(h, x))
				return 0;
		}
	}
	kvs_pool_free(h->pool, x->len, x->locs);
	hr_node_events(h, x, KVS_KV_REMOVED, KVS_MEDIUM_GPU);
	if (x->host_ok) {
		hr_set_dev(h, x, false);
		ST(h, tombstoned, 1);
	} else {
		node_delete(h, x); /* no child: none could be a tombstone */
		ST(h, deleted, 1);
	}
	return len;
}

ssize_t hr_evict_device(kvs_hiradix_t *h, size_t tokens)
{
	size_t done = 0;
	node_t *x;

	while (done < tokens && (x = lru(&h->dheap, offsetof(node_t, dk))))
		done += hr_evict_one(h, x);
	ST(h, evict_device_tokens, done);
	return (ssize_t)done;
}

ssize_t hr_evict_host(kvs_hiradix_t *h, size_t tokens)
{
	size_t done = 0;
	node_t *x;

	while (done < tokens && (x = lru(&h->hheap, offsetof(node_t, hk)))) {
		done += x->len;
		kvs_hpool_free(h->hp, x->len / h->ps, x->host);
		hr_node_events(h, x, KVS_KV_REMOVED, KVS_MEDIUM_CPU);
		node_delete(h, x);
	}
	ST(h, evict_host_tokens, done);
	return (ssize_t)done;
}

/* ------------------------------------------------------------ API */

ssize_t hr_match(kvs_hiradix_t *h, uint64_t extra, const int32_t *key, size_t n, int32_t *locs,
		 kvs_hiradix_match_t *m, bool lock)
{
	node_t *x, *y, *z, *c;
	size_t pos, dev = 0, hit = 0, asked;

	if (!h || (n && !key)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	asked = n;
	n -= n % h->ps;
	x = hr_walk(h, extra, key, n, &pos);
	if (!x) {
		pthread_mutex_unlock(&h->lock);
		errno = ENOMEM;
		return -1;
	}
	for (y = x; y != &h->root && !y->on_dev; y = y->parent)
		hit += y->len;
	for (z = x; z != &h->root && !z->host_ok; z = z->parent)
		;
	/* The device prefix: the path down to y. */
	if (locs) {
		pos = 0;
		for (c = &h->root; c != y;) {
			c = hr_find_child(h, c, extra, key + pos);
			memcpy(locs + pos, c->locs, c->len * sizeof(int32_t));
			pos += c->len;
		}
	}
	for (c = y; c != &h->root; c = c->parent)
		dev += c->len;
	if (lock)
		ulock_path(h, x, 1);
	ST(h, matches, 1);
	ST(h, query_tokens, asked);
	ST(h, match_device_tokens, dev);
	ST(h, match_host_tokens, hit);
	if (m) {
		memset(m, 0, sizeof(*m));
		m->host_hit = hit;
		m->last_device = y;
		m->last_node = x;
		m->last_host = z;
	}
	pthread_mutex_unlock(&h->lock);
	return (ssize_t)dev;
}

/**
 * kvs_hiradix_match() - the longest cached prefix of @key.
 * @h: cache.
 * @key: token ids.
 * @n: tokens; only whole pages match.
 * @locs: receives the device locations of the device-resident prefix
 *        (room for @n), or NULL.
 * @m: receives the host hit length and the last device, last matched and
 *     last host nodes, or NULL.
 *
 * A match ending inside a node splits it (waiting for a transfer in flight
 * on it first); a load back in flight on the path is waited for, so that
 * the device locations returned hold their data (or, the load failed, are
 * not returned).  Hit counts are not changed (kvs_hiradix_insert() does).
 *
 * Context: MT-Safe (takes h->lock); may wait for a transfer.
 * Return: the device-resident prefix length in tokens, or -1 with errno
 * EINVAL or ENOMEM (nothing changed).
 */
KVS_EXPORT ssize_t kvs_hiradix_match(kvs_hiradix_t *h, const int32_t *key, size_t n,
				     int32_t *locs, kvs_hiradix_match_t *m)
{
	return hr_match(h, 0, key, n, locs, m, false);
}

/**
 * kvs_hiradix_match_lock() - kvs_hiradix_match(), and lock the last
 * matched node (m->last_node) before the cache's mutex is released, so
 * that no other thread's eviction comes in between.
 * @h: cache.
 * @key: token ids.
 * @n: tokens.
 * @locs: as for kvs_hiradix_match().
 * @m: receives the match; not NULL: the caller unlocks m->last_node.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: as kvs_hiradix_match(); -1 with errno EINVAL also for a NULL @m.
 */
KVS_EXPORT ssize_t kvs_hiradix_match_lock(kvs_hiradix_t *h, const int32_t *key, size_t n,
					  int32_t *locs, kvs_hiradix_match_t *m)
{
	if (!m) {
		errno = EINVAL;
		return -1;
	}
	return hr_match(h, 0, key, n, locs, m, true);
}

/*
 * Check the locations an insert of @n tokens (whole pages) is handed, as
 * kvs_radix_insert() does, before anything changes: a maximal run of
 * consecutive locations (kvsi_run_len(), unsigned: no overflow) starts a
 * page with an aligned location, holds whole pages and lies in the pool's
 * range (a negative location, read unsigned, lies past it); every page is
 * held by the caller (kvsi_slab_run_held()) and named once (the scratch
 * bitmap h->seen, left clear).  With h->lock.  True if they pass.
 */
static bool locs_ok(kvs_hiradix_t *h, const int32_t *locs, size_t n)
{
	const uint32_t *u = (const uint32_t *)(const void *)locs;
	size_t at = 0, i;
	bool ok = true;

	while (at < n) {
		size_t len = kvsi_run_len(u + at, n - at);
		uint64_t v = u[at], first = v / h->ps, np = len / h->ps;

		if (v % h->ps || len % h->ps || v + len > h->cap ||
		    !kvsi_slab_run_held(h->slab, (uint32_t)first, (uint32_t)np) ||
		    bits_any(h->seen, first, first + np)) {
			ok = false;
			break;
		}
		bits_fill(h->seen, first, first + np, true);
		at += len;
	}
	for (i = 0; i < at; i += h->ps)
		bit_clear(h->seen, (uint64_t)u[i] / h->ps);
	return ok;
}

/* None of the pages of locs[@from .. n), those the tree would take over,
 * is on the device in the tree already (under this key or another). */
static bool locs_new(const kvs_hiradix_t *h, const int32_t *locs, size_t from, size_t n)
{
	size_t i;

	for (i = from; i < n; i += h->ps)
		if (bit_test(h->held, (uint64_t)(uint32_t)locs[i] / h->ps))
			return false;
	return true;
}

ssize_t hr_insert(kvs_hiradix_t *h, uint64_t extra, const int32_t *key, size_t n,
		  const int32_t *locs, kvs_hiradix_node_t **last, bool lock)
{
	node_t *x, *c, *y, *nn = NULL;
	size_t pos, p, dev = 0;
	ssize_t ret = 0;
	bool seen_tomb = false;

	if (!h || (n && (!key || !locs)) || n > UINT32_MAX) {
		errno = EINVAL;
		return -1;
	}
	n -= n % h->ps;
	pthread_mutex_lock(&h->lock);
	if (!locs_ok(h, locs, n)) {
		pthread_mutex_unlock(&h->lock);
		errno = EINVAL;
		return -1;
	}
	x = hr_walk(h, extra, key, n, &pos);
	if (!x)
		goto nomem;
	/* The tree takes over the pages past its device prefix: none may be
	 * its own already. */
	for (y = x; y != &h->root && !y->on_dev; y = y->parent)
		;
	for (; y != &h->root; y = y->parent)
		dev += y->len;
	if (!locs_new(h, locs, dev, n)) {
		pthread_mutex_unlock(&h->lock);
		errno = EINVAL;
		return -1;
	}
	if (pos < n) {
		nn = hr_node_new(h, n - pos);
		if (!nn)
			goto nomem;
		memcpy(nn->key, key + pos, (n - pos) * sizeof(int32_t));
		memcpy(nn->locs, locs + pos, (n - pos) * sizeof(int32_t));
		nn->extra = extra;
	}
	/* Nothing can fail from here on. */
	for (c = &h->root, p = 0; c != x;) {
		c = hr_find_child(h, c, extra, key + p);
		if (c->on_dev) {
			if (!seen_tomb)
				ret += (ssize_t)c->len;
		} else {
			seen_tomb = true;
			memcpy(c->locs, locs + p, c->len * sizeof(int32_t));
			hr_set_dev(h, c, true);
			hr_node_events(h, c, KVS_KV_STORED, KVS_MEDIUM_GPU);
			ST(h, remat_tokens, c->len);
			/* Recomputed, not hit (SGLang's _insert_helper). */
			if (!(h->flags & KVS_HIRADIX_REMAT_HIT)) {
				p += c->len;
				continue;
			}
		}
		p += c->len;
		hr_inc_hit(h, c);
	}
	if (nn) {
		nn->on_dev = true;
		hr_held_mark(h, nn, true);
		hr_touch(h, nn);
		hr_child_add(x, nn);
		hr_acct(h, nn, 1);
		hr_node_hash(h, nn);
		hr_node_keys(h, nn);
		hr_node_events(h, nn, KVS_KV_STORED, KVS_MEDIUM_GPU);
		hr_leaf_update(h, nn);
		hr_leaf_update(h, x);
		hr_inc_hit(h, nn);
		x = nn;
	}
	if (lock && x != &h->root)
		ulock_path(h, x, 1);
	if (last)
		*last = x == &h->root ? NULL : x;
	ST(h, inserts, 1);
	hr_flush(h); /* last: a submission drops h->lock */
	pthread_mutex_unlock(&h->lock);
	return ret;
nomem:
	pthread_mutex_unlock(&h->lock);
	errno = ENOMEM;
	return -1;
}

/**
 * kvs_hiradix_insert() - cache @key with its device locations.
 * @h: cache.
 * @key: token ids.
 * @n: tokens; only whole pages are inserted.
 * @locs: the device locations of the tokens, page-aligned whole pages.  The
 *        tree takes over the caller's reference on the pages past the
 *        device-resident prefix: those re-materialising tombstones on the
 *        path and those of the new node.
 * @last: receives the node holding the last token (may be NULL); not
 *        locked.
 *
 * Every device node on the path (and the new one) counts a hit; a
 * tombstone re-materialised does not (recomputed, as in SGLang's
 * _insert_helper), unless KVS_HIRADIX_REMAT_HIT; under the write
 * through policies a node reaching the threshold without a host copy is
 * backed up (its ancestors first), best effort: a host pool too full or a
 * copy that cannot be submitted leaves the node without a copy.
 *
 * Context: MT-Safe (takes h->lock); may wait for a load back in flight on
 * the path.
 * Return: the leading tokens that were already on the device: the caller
 * still owns locs[0 .. ret) and frees its duplicates; or -1 with errno
 * EINVAL or ENOMEM (nothing inserted; a node may have been split).
 */
KVS_EXPORT ssize_t kvs_hiradix_insert(kvs_hiradix_t *h, const int32_t *key, size_t n,
				      const int32_t *locs, kvs_hiradix_node_t **last)
{
	return hr_insert(h, 0, key, n, locs, last, false);
}

/**
 * kvs_hiradix_insert_lock() - kvs_hiradix_insert(), and lock the node of
 * the last token (*@last) before the cache's mutex is released.
 * @h: cache.
 * @key: token ids.
 * @n: tokens.
 * @locs: as for kvs_hiradix_insert().
 * @last: receives the node, locked (NULL: nothing inserted or locked, @n
 *        below a page); not NULL.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: as kvs_hiradix_insert(); -1 with errno EINVAL also for a NULL
 * @last.
 */
KVS_EXPORT ssize_t kvs_hiradix_insert_lock(kvs_hiradix_t *h, const int32_t *key, size_t n,
					   const int32_t *locs, kvs_hiradix_node_t **last)
{
	if (!last) {
		errno = EINVAL;
		return -1;
	}
	return hr_insert(h, 0, key, n, locs, last, true);
}

/**
 * kvs_hiradix_lock() - protect @node and its ancestors from eviction.
 * @h: cache.
 * @node: a node of @h (the root: nothing to do).
 *
 * Context: MT-Safe (takes h->lock).
 * Return: 0, or -1 with errno EINVAL (NULL, or a node of another cache).
 */
KVS_EXPORT int kvs_hiradix_lock(kvs_hiradix_t *h, kvs_hiradix_node_t *node)
{
	if (!h || !node || node->tree != h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	ulock_path(h, node, 1);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/**
 * kvs_hiradix_unlock() - undo one kvs_hiradix_lock() of @node.
 * @h: cache.
 * @node: a node of @h.
 *
 * Only the caller's locks (kvs_hiradix_lock(), kvs_hiradix_match_lock(),
 * kvs_hiradix_insert_lock()) can be undone: those the cache takes itself
 * (a backup or a load back in flight) are not the caller's.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: 0, or -1 with errno EINVAL (NULL, a node of another cache, or
 * @node not locked by the caller).
 */
KVS_EXPORT int kvs_hiradix_unlock(kvs_hiradix_t *h, kvs_hiradix_node_t *node)
{
	if (!h || !node || node->tree != h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	if (node->ulock == 0) {
		pthread_mutex_unlock(&h->lock);
		errno = EINVAL;
		return -1;
	}
	ulock_path(h, node, -1);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/* The evictions below: poll, then @evict under h->lock. */
static ssize_t evict_locked(kvs_hiradix_t *h, size_t tokens,
			    ssize_t (*evict)(kvs_hiradix_t *, size_t))
{
	ssize_t r;

	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	hr_poll_locked(h, false);
	r = evict(h, tokens);
	pthread_mutex_unlock(&h->lock);
	return r;
}

/**
 * kvs_hiradix_evict_device() - free at least @tokens device tokens if
 * possible, from the least recently used unlocked device leaves: a leaf
 * with a valid host copy becomes a tombstone, one without is deleted (under
 * KVS_WRITE_BACK it is backed up first, waiting for the copy, and becomes a
 * tombstone if the copy succeeded).
 * @h: cache.
 * @tokens: tokens wanted.
 *
 * Context: MT-Safe (takes h->lock); may wait for write-back copies.
 * Return: the tokens freed (possibly fewer or more), or -1 with errno EINVAL.
 */
KVS_EXPORT ssize_t kvs_hiradix_evict_device(kvs_hiradix_t *h, size_t tokens)
{
	return evict_locked(h, tokens, hr_evict_device);
}

/**
 * kvs_hiradix_evict_host() - free at least @tokens of host copies if
 * possible, deleting the least recently used unlocked tombstone leaves.
 * @h: cache.
 * @tokens: tokens wanted.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: the tokens freed, or -1 with errno EINVAL.
 */
KVS_EXPORT ssize_t kvs_hiradix_evict_host(kvs_hiradix_t *h, size_t tokens)
{
	return evict_locked(h, tokens, hr_evict_host);
}

static void usage_walk(const node_t *x, kvs_hiradix_usage_t *u)
{
	const node_t *c;

	for (c = x->child; c; c = c->next) {
		u->nodes++;
		if (c->on_dev)
			u->device_tokens += c->len;
		if (c->host)
			u->host_tokens += c->len;
		if (!c->on_dev)
			u->tombstone_tokens += c->len;
		usage_walk(c, u);
	}
}

struct vstate {
	uint64_t nn, nd, nh, nb;
};

/* @x's key @k is in the leaf set @set iff @want, and in its right place. */
static bool member_ok(const struct evict_heap *set, const node_t *x, const struct evict_key *k,
		      bool want)
{
	if (k->idx < 0)
		return !want;
	return want && (size_t)k->idx < set->n && set->a[k->idx] == k &&
	       k->last_access == x->access;
}

/*
 * @x's locks add up: lock_ref counts the locks on @x and its descendants,
 * so it is the sum of its children's, plus its own: the caller's (ulock
 * less the children's ulock, never negative), its backup's, and the loads
 * back ending at it.  An unbalanced unlock or a count gone below zero
 * breaks the sum.
 */
static bool locks_ok(const kvs_hiradix_t *h, const node_t *x)
{
	uint64_t sum = 0, usum = 0;
	const struct hload *ld;
	const node_t *c;

	for (c = x->child; c; c = c->next) {
		sum += c->lock_ref;
		usum += c->ulock;
	}
	if (usum > x->ulock)
		return false;
	sum += x->ulock - usum + (x->bt != NULL) + x->pin;
	for (ld = h->loads; ld; ld = ld->next)
		sum += ld->last == x;
	return sum == x->lock_ref && x->tree == h;
}

/* Every device page of @x is marked in h->held. */
static bool held_all(const kvs_hiradix_t *h, const node_t *x)
{
	size_t i;

	for (i = 0; i < x->len; i += h->ps)
		if (!bit_test(h->held, (uint64_t)(uint32_t)x->locs[i] / h->ps))
			return false;
	return true;
}

static bool validate_walk(const kvs_hiradix_t *h, const node_t *x, struct vstate *v)
{
	const node_t *c;
	uint32_t nc = 0, ndev = 0;

	if (!locks_ok(h, x))
		return false;

	for (c = x->child; c; c = c->next) {
		nc++;
		ndev += c->on_dev;
		if (c->parent != x || c->len == 0 || c->len % h->ps != 0)
			return false;
		/* Device copies and host copies both form prefixes. */
		if (c->on_dev && !x->on_dev)
			return false;
		if (c->host_ok && !x->host_ok)
			return false;
		if (c->host && !x->host && x != &h->root)
			return false;
		if (!c->on_dev && !c->host_ok)
			return false;
		if (c->host_ok && (!c->host || c->bt))
			return false;
		if (c->host && !c->host_ok && !c->bt)
			return false;
		if (c->bt && c->lock_ref == 0)
			return false;
		if (c->ld && (!c->on_dev || c->lock_ref == 0))
			return false;
		if (c->lock_ref > x->lock_ref && x != &h->root)
			return false;
		if (c->on_dev && !held_all(h, c))
			return false;
		if (!member_ok(&h->dheap, c, &c->dk, hr_is_dleaf(h, c)) ||
		    !member_ok(&h->hheap, c, &c->hk, is_hleaf(h, c)))
			return false;
		v->nn++;
		v->nd += c->dk.idx >= 0;
		v->nh += c->hk.idx >= 0;
		v->nb += c->bt != NULL;
		if (c->prev ? c->prev->next != c : x->child != c)
			return false;
		if (hr_find_child(h, x, c->extra, c->key) != c ||
		    (x != &h->root && c->extra != x->extra))
			return false;
		if (!validate_walk(h, c, v))
			return false;
	}
	return nc == x->nchildren && ndev == x->ndev;
}

/**
 * kvs_hiradix_validate() - check the tree's invariants: device and host
 * copies form prefixes from the root, every node is on the device or a
 * valid tombstone, child counts, every child found by its first page (the
 * child table), locks (each lock_ref the sum of the
 * locks on the node and below: locks_ok()), the pool pages marked as the
 * tree's (exactly the device nodes'), the backup list against the nodes'
 * states, and the leaf sets' heaps: heap order, and every node in a heap
 * iff it is a leaf of that level.
 * @h: cache.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: 0, or -1 with errno EINVAL or EUCLEAN (an invariant broken).
 */
KVS_EXPORT int kvs_hiradix_validate(kvs_hiradix_t *h)
{
	struct vstate v = {0, 0, 0, 0};
	kvs_hiradix_usage_t u;
	const node_t *x;
	uint64_t nb = 0, marked = 0, w;
	bool ok;

	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	ok = validate_walk(h, &h->root, &v);
	/* The gauges kept as nodes change equal a count. */
	memset(&u, 0, sizeof(u));
	usage_walk(&h->root, &u);
	/* h->held marks the device nodes' pages (each checked), no more. */
	for (w = 0; w < (h->cap / h->ps + 63) / 64 + 1; w++)
		marked += (uint64_t)__builtin_popcountll(h->held[w]);
	ok = ok && marked * h->ps == u.device_tokens;
	ok = ok && u.nodes == h->use.nodes && u.device_tokens == h->use.device_tokens &&
	     u.host_tokens == h->use.host_tokens && u.tombstone_tokens == h->use.tombstone_tokens;
	for (x = h->backups; x; x = x->bnext)
		nb++;
	/* Each heap holds exactly its set, in heap order, and has room for
	 * every node (what keeps joining a set from allocating). */
	ok = ok && v.nd == h->dheap.n && v.nh == h->hheap.n && nb == v.nb &&
	     h->root.dk.idx < 0 && h->root.hk.idx < 0 && evict_heap_valid(&h->dheap) &&
	     evict_heap_valid(&h->hheap) && v.nn == h->nnodes && h->dheap.cap >= h->nnodes &&
	     h->hheap.cap >= h->nnodes;
	pthread_mutex_unlock(&h->lock);
	if (!ok) {
		errno = EUCLEAN;
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ statistics */

/* The counters under h->lock, the gauges from kvs_hiradix_usage() (a walk
 * of the tree under the same lock, taken before). */
static void hiradix_fill(void *obj, uint64_t *v)
{
	kvs_hiradix_t *h = obj;
	kvs_hiradix_usage_t u;

	kvs_hiradix_usage(h, &u);
	pthread_mutex_lock(&h->lock);
	memcpy(v, h->st, sizeof(h->st));
	pthread_mutex_unlock(&h->lock);
	v[KVS_HIRADIX_STAT_nodes] = u.nodes;
	v[KVS_HIRADIX_STAT_device_tokens] = u.device_tokens;
	v[KVS_HIRADIX_STAT_host_tokens] = u.host_tokens;
	v[KVS_HIRADIX_STAT_tombstone_tokens] = u.tombstone_tokens;
	v[KVS_HIRADIX_STAT_backups_pending] = u.backups_pending;
	v[KVS_HIRADIX_STAT_loads_pending] = u.loads_pending;
}

static void hiradix_header(void *obj, char *line, size_t size)
{
	static const char *const policies[] = {"write_through", "write_through_selective",
					       "write_back"};
	const kvs_hiradix_t *h = obj;

	snprintf(line, size, "hiradix page_size %u write_policy %s hit_threshold %u\n", h->ps,
		 policies[h->policy], h->threshold);
}

/**
 * kvs_hiradix_stat() - one statistic; kvs_hiradix_stat_get() reads one by
 * name, kvs_hiradix_stat_name() names one, kvs_hiradix_stats_print() prints
 * every one through a callback (a header line, then "name value  kind #
 * description" lines), all through lib/stats.c.
 * @h: cache.
 * @item: statistic.
 *
 * Context: MT-Safe (takes h->lock; the gauges walk the tree; write_cb is
 * called without the lock).
 * Return: kvs_hiradix_stat(): its value, 0 for a NULL cache or an unknown
 * item; kvs_hiradix_stat_name(): a static string, NULL for an unknown item;
 * the others: 0, or -1 with errno EINVAL (a NULL argument) or ENOENT (no
 * such statistic).
 */
KVSI_STATS_FAMILY(hiradix, KVS_HIRADIX_STATS, hiradix_fill, hiradix_header, &kvsi_style_kind, NULL, kvs_hiradix_t,
		  enum kvs_hiradix_stat);
