/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hiradix.c - the hierarchical radix cache: SGLang HiCache's HiRadixTree
 * over a device pool (L1, kvs_pool_t) and its host pool (L2, kvs_hpool_t).
 *
 * Why a file of its own and not lib/cache/radix.c's nodes with a host value.  The
 * radix cache's readers walk the tree under RCU with no lock, and its nodes
 * carry one value whose pages a reader may copy out at any time.  A node of
 * this tree changes state under its feet in ways an RCU reader would have to
 * re-check at every step (device pages dropped while the node stays, host
 * copies becoming valid when a transfer completes, load back filling device
 * pages in).  This first piece keeps lib/cache/radix.c and its tests untouched and
 * takes one mutex around every call: a single writer, no lock-free readers.
 *
 * Nodes.  A node holds a span of whole pages of tokens: key[len], the device
 * locations locs[len] (meaningful only while on_dev; the array stays
 * allocated so that re-materialising a tombstone allocates nothing), and
 * host[len / page_size], its host pages, or NULL.  States, as the seed
 * names them: on the device (on_dev, maybe host_ok too), a tombstone (not
 * on_dev, host_ok: evicted from the device, backed up on the host).  A node
 * is never in neither.
 *
 * Host copies.  host != NULL and !host_ok: a backup is pending (bt, its
 * batch: queued, in flight, or complete while its parent's copy is not
 * valid yet).  A host copy becomes valid only when its own transfer
 * completed and its parent's copy is valid, so valid copies always form a
 * prefix from the root (the backup invariant); a transfer that fails drops
 * its node's host pages and those of every descendant (whose copies could
 * only be pending).  Completions are taken in by polls (the controller,
 * below), or waited for where a call needs a node settled (a match or
 * insert through a node being loaded, write-back eviction, destroy).
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
 * pool page, kept by set_dev() and the insert and delete of device nodes).
 * Calls taking a node refuse one of another cache (node->tree).
 *
 * Leaf sets, kept as a node changes (leaf_update()), not found by a walk:
 * dheap, the device leaves (on_dev, unlocked, no child on the device), and
 * hheap, the host leaves (tombstones, unlocked, no child), each the shared
 * eviction heap (lib/cache/evict_heap.c, KVS_EVICT_LRU) over a key in the node
 * (dk, hk; idx -1: not in the set).  Both evictions take the top, the least
 * recently used member, in O(log n); a parent that becomes a leaf joins its
 * set, and a member touched (touch()) moves in its heap.  A node is in at
 * most one set (on_dev or not).  Ties cannot happen, so the victim does not
 * depend on the heap's shape: every touch takes a fresh tick of h->clock,
 * and the one copy, split() giving the new parent its child's value, is
 * shared by an ancestor and its descendant, never members of one set
 * together (a device leaf has no device descendant, a host leaf none).
 * Joining a set never allocates: each heap has room for every node, which
 * node_new() reserves before the node exists (failing the call with ENOMEM,
 * as a failed malloc of the node would), so no node misses its set for want
 * of memory.
 *
 * Locking: h->lock, a mutex, around every exported call, at level 2 of the
 * lock order (common/common.h); hostpool and pool calls are made under it
 * (they take only their own, inner locks and never call back).  Waits for
 * transfers happen under it too.  Recursion (validation, usage, dropping a
 * failed copy's subtree, destroy) is as deep as the tree: a key's pages.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/evict_heap.h"
#include "internal.h"
#include "cache/kvevent.h"
#include "kvslab/hiradix.h"
#include "kvslab/storage.h"
#include "kvslab/radix.h"

struct hload;
struct hbatch;

struct kvs_hiradix_node {
	struct kvs_hiradix_node *parent, *child, *prev, *next; /* children list */
	struct kvs_hiradix *tree;	/* the cache it belongs to */
	struct evict_key dk, hk;	/* in the device and host leaf sets */
	struct kvs_hiradix_node *bprev, *bnext;			 /* backups in flight */
	int32_t *key, *locs, *host;
	size_t len;
	struct hbatch *bt;		/* a backup's batch, while one is pending */
	kvs_page_key_t *pkey;		/* with a store: each page's L3 key */
	uint32_t hlock;			/* host pages in use (L3 backup, prefetch anchor) */
	struct hload *ld;
	uint32_t lock_ref, hit_count, nchildren, ndev;
	uint32_t ulock;			/* the caller's share of lock_ref */
	uint64_t access;
	uint64_t hash;			/* chained hash of its last page (events only) */
	bool on_dev, host_ok;
};

/* Host pages of a copy dropped while its transfer is in flight. */
struct orphan {
	struct orphan *next;
	size_t n;
	int32_t *pages;
};

/* One transfer of the controller: the backups (or loads back) merged into
 * one kvs_hpool_backup() (kvs_hpool_load()); h->wq and h->lq, with no
 * transfer, are the queues. */
struct hbatch {
	kvs_hpool_xfer_t *x;
	uint32_t refs;			/* nodes or loads it still serves */
	int state;			/* 0 in flight, 1 complete, -1 failed */
	int seen;			/* take_acks(): the query's answer this poll */
	bool handed;			/* a load transfer the caller holds */
	struct hbatch *next;		/* its ack queue, oldest first */
	struct hbatch *hnext;		/* the handed-out list */
	struct orphan *orphans;		/* freed with it */
};

/* A load back: the chain top .. last, loaded together. */
struct hload {
	struct hbatch *bt;
	struct kvs_hiradix_node *top, *last;
	int32_t *dev, *host;		/* while queued: its pages, top first */
	size_t np;
	struct hload *prev, *next;
};

struct kvs_hiradix {
	pthread_mutex_t lock;
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	kvs_slab_t *slab;		/* the pool's: which pages are held */
	uint64_t cap;			/* the pool's tokens */
	uint64_t *held, *seen;		/* pages on the device nodes hold; an insert's scratch */
	uint32_t ps, policy, threshold;
	uint64_t lb_threshold, clock;
	struct kvs_hiradix_node root;
	struct evict_heap dheap, hheap;	/* the leaf sets */
	size_t nnodes;			/* but the root: room in each heap */
	struct kvs_hiradix_node *backups;
	struct hload *loads;
	struct hbatch wq, lq;		/* the write and load queues */
	struct hbatch *wacks, *lacks;	/* the ack queues */
	struct hbatch *handed, *last_load;
	uint64_t bgen;			/* backups taken out of h->backups */
	kvs_hiradix_usage_t use;	/* the token gauges, kept by acct() */
	uint32_t flags, poll_us;
	kvs_hiradix_agree_cb agree;
	void *agree_arg;
	struct kvev_sink sink;
	pthread_t thread;
	pthread_cond_t wake;
	bool has_thread, stop;
	/* The storage tier (kvs_hiradix_set_store()). */
	kvs_store_t *store;
	kvs_hiradix_l3_attr_t l3;
	struct l3job *l3q, **l3q_tail;	/* backups to the store, oldest first */
	struct pf *pfs, *pfq, **pfq_tail;	/* prefetches: all, and not started */
	uint64_t l3_pending;		/* backups queued or being written */
	uint64_t pf_live;		/* prefetches the thread has not finished */
	pthread_t l3_thread, pf_thread;
	pthread_cond_t l3_wake, pf_wake, l3_idle;
	bool l3_stop;
	uint64_t st[KVS_HIRADIX_STAT__COUNT]; /* the counters; gauges are walked */
};

#define ST(h, n, v) ((h)->st[KVS_HIRADIX_STAT_##n] += (v))

typedef struct kvs_hiradix_node node_t;

static void node_keys(kvs_hiradix_t *h, node_t *x);
static void l3_backup(kvs_hiradix_t *h, node_t *x);
static void l3_stop(kvs_hiradix_t *h);

/* ------------------------------------------------------------ leaf sets */

/* Put @x, whose key in the leaf set @set is @k, in or out of it. */
static void lset(struct evict_heap *set, node_t *x, struct evict_key *k, bool in)
{
	if (in == (k->idx >= 0))
		return;
	if (in) {
		k->last_access = x->access;
		(void)evict_heap_push(set, k); /* cannot fail: node_new() made room */
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
static void touch(kvs_hiradix_t *h, node_t *x)
{
	x->access = ++h->clock;
	x->dk.last_access = x->hk.last_access = x->access;
	if (x->dk.idx >= 0)
		evict_heap_update(&h->dheap, &x->dk);
	if (x->hk.idx >= 0)
		evict_heap_update(&h->hheap, &x->hk);
}

static bool is_dleaf(const kvs_hiradix_t *h, const node_t *x)
{
	return x != &h->root && x->on_dev && x->lock_ref == 0 && x->ndev == 0;
}

static bool is_hleaf(const kvs_hiradix_t *h, const node_t *x)
{
	return x != &h->root && !x->on_dev && x->host_ok && x->lock_ref == 0 &&
	       x->hlock == 0 && x->nchildren == 0;
}

static void leaf_update(kvs_hiradix_t *h, node_t *x)
{
	dset(h, x, is_dleaf(h, x));
	hset(h, x, is_hleaf(h, x));
}

/* Count @x's tokens in the gauges (@s 1) or out of them (-1), around every
 * change of its length, device pages or host pages. */
static void acct(kvs_hiradix_t *h, const node_t *x, int s)
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
static void held_mark(kvs_hiradix_t *h, const node_t *x, bool on)
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

static void set_dev(kvs_hiradix_t *h, node_t *x, bool on)
{
	if (x->on_dev == on)
		return;
	held_mark(h, x, on);
	acct(h, x, -1);
	x->on_dev = on;
	acct(h, x, 1);
	if (on)
		x->parent->ndev++;
	else
		x->parent->ndev--;
	leaf_update(h, x);
	leaf_update(h, x->parent);
}

static void lock_path(kvs_hiradix_t *h, node_t *x, int d)
{
	for (; x; x = x->parent) {
		x->lock_ref = (uint32_t)((int)x->lock_ref + d);
		leaf_update(h, x);
	}
}

/* A lock of the caller's (kvs_hiradix_lock(), the _lock calls): counted in
 * lock_ref and, apart, in ulock, so that an unlock can only undo one. */
static void ulock_path(kvs_hiradix_t *h, node_t *x, int d)
{
	node_t *y;

	for (y = x; y; y = y->parent)
		y->ulock = (uint32_t)((int)y->ulock + d);
	lock_path(h, x, d);
}

/* ------------------------------------------------------------ nodes */

static node_t *node_new(kvs_hiradix_t *h, size_t len)
{
	node_t *x;

	/* Room in each leaf set for one more node, so that joining one
	 * never allocates. */
	if (evict_heap_reserve(&h->dheap, h->nnodes + 1) < 0 ||
	    evict_heap_reserve(&h->hheap, h->nnodes + 1) < 0)
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
		free(x->key);
		free(x->locs);
		free(x->pkey);
		free(x);
		return NULL;
	}
	x->dk.idx = x->hk.idx = -1;
	x->tree = h;
	h->nnodes++;
	return x;
}

static void child_add(node_t *p, node_t *c)
{
	c->parent = p;
	c->prev = NULL;
	c->next = p->child;
	if (p->child)
		p->child->prev = c;
	p->child = c;
	p->nchildren++;
	if (c->on_dev)
		p->ndev++;
}

static void child_del(node_t *p, node_t *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		p->child = c->next;
	if (c->next)
		c->next->prev = c->prev;
	p->nchildren--;
	if (c->on_dev)
		p->ndev--;
}

static void node_free(kvs_hiradix_t *h, node_t *x)
{
	h->nnodes--;
	free(x->key);
	free(x->locs);
	free(x->host);
	free(x->pkey);
	free(x);
}

static node_t *find_child(const kvs_hiradix_t *h, const node_t *x, const int32_t *key)
{
	node_t *c;

	for (c = x->child; c; c = c->next)
		if (memcmp(c->key, key, h->ps * sizeof(int32_t)) == 0)
			return c;
	return NULL;
}

/* Tokens, in whole pages, that @c's key shares with @key[0 .. n). */
static size_t common(const kvs_hiradix_t *h, const node_t *c, const int32_t *key, size_t n)
{
	size_t m = c->len < n ? c->len : n, i;

	for (i = 0; i < m; i++)
		if (c->key[i] != key[i])
			break;
	return i - i % h->ps;
}

static void pages_of(const kvs_hiradix_t *h, const int32_t *locs, size_t len, int32_t *pages)
{
	size_t i;

	for (i = 0; i < len / h->ps; i++)
		pages[i] = locs[i * h->ps] / (int32_t)h->ps;
}

/* ------------------------------------------------------------ events */

/* @x's chained page hash, from its parent's; kept only when events go
 * somewhere. */
static void node_hash(kvs_hiradix_t *h, node_t *x)
{
	if (h->sink.cb)
		x->hash = kvev_chain(&h->sink, x->parent->hash, 0, x->key, 0, (uint32_t)x->len, 0);
}

/* One event of @type per page of @x, on @medium. */
static void node_events(kvs_hiradix_t *h, node_t *x, int type, int medium)
{
	struct kvev_sink s = h->sink;

	if (!s.cb)
		return;
	s.medium = medium;
	kvev_chain(&s, x->parent->hash, 0, x->key, 0, (uint32_t)x->len, type);
}

/* ------------------------------------------------------------ batches */

/*
 * The controller.  A backup or a load back is first queued (h->wq, h->lq:
 * batches with no transfer yet); submit_writes() and submit_loads() start
 * everything queued as one kvs_hpool_backup() or kvs_hpool_load(), whose
 * runs of adjacent pages the host pool merges into single copies, and put
 * the batch at the tail of its ack queue (h->wacks, h->lacks).  Without
 * KVS_HIRADIX_DEFER each call submits what it queued before it returns;
 * with it the queues wait for kvs_hiradix_submit(), a poll, or a call that
 * must wait for one of their copies.
 *
 * take_acks() finds the batches that completed.  Backup batches are taken
 * in order, and only as many as the agree hook allows (the minimum over
 * tensor-parallel ranks), so that every rank marks the same nodes backed
 * up.  A batch's state (0 in flight, 1 done, -1 failed) then drives its
 * nodes: resolve() makes a done node's copy valid once its parent's is
 * (cascading down), drops a failed one's.  A batch is freed when it is
 * resolved, no node or load refers to it (refs) and, for a load handed to
 * the caller, the caller's next poll or submit has come (handed).  Host
 * pages of a copy dropped while its batch is in flight cannot be freed yet
 * (busy in the transfer): they wait on the batch (orphans).
 */

static void bset(kvs_hiradix_t *h, node_t *x, bool in)
{
	if (in) {
		x->bprev = NULL;
		x->bnext = h->backups;
		if (h->backups)
			h->backups->bprev = x;
		h->backups = x;
	} else {
		if (x->bprev)
			x->bprev->bnext = x->bnext;
		else
			h->backups = x->bnext;
		if (x->bnext)
			x->bnext->bprev = x->bprev;
		x->bprev = x->bnext = NULL;
		h->bgen++;
	}
}

static bool queued(const kvs_hiradix_t *h, const struct hbatch *b)
{
	return b == &h->wq || b == &h->lq;
}

static void batch_free(kvs_hiradix_t *h, struct hbatch *b)
{
	struct orphan *o;

	kvs_hpool_xfer_free(b->x); /* seen complete: no wait */
	while ((o = b->orphans)) {
		b->orphans = o->next;
		kvs_hpool_free(h->hp, o->n, o->pages);
		free(o->pages);
		free(o);
	}
	free(b);
}

/* Free @b if nothing needs it any more. */
static void batch_check(kvs_hiradix_t *h, struct hbatch *b)
{
	if (b->refs == 0 && b->state != 0 && !b->handed)
		batch_free(h, b);
}

static void batch_put(kvs_hiradix_t *h, struct hbatch *b)
{
	if (queued(h, b))
		return;
	b->refs--;
	batch_check(h, b);
}

/* Append @b to the ack queue at *@q. */
static void ack_push(struct hbatch **q, struct hbatch *b)
{
	while (*q)
		q = &(*q)->next;
	*q = b;
}

/* Take @b, seen complete or failed, out of the ack queue at *@q. */
static void ack_take(struct hbatch **q, struct hbatch *b, int state)
{
	while (*q != b)
		q = &(*q)->next;
	*q = b->next;
	b->next = NULL;
	b->state = state;
}

/* Wait for @b's transfer (submitted) and take it out of its ack queue. */
static void batch_wait(kvs_hiradix_t *h, struct hbatch *b, bool load)
{
	if (b->state == 0)
		ack_take(load ? &h->lacks : &h->wacks, b,
			 kvs_hpool_xfer_wait(b->x) == 0 ? 1 : -1);
}

/* ------------------------------------------------------------ backups */

static void host_release(kvs_hiradix_t *h, node_t *x)
{
	struct orphan *o;
	size_t np = x->len / h->ps;

	acct(h, x, -1);
	if (x->bt && !queued(h, x->bt) && x->bt->state == 0) {
		/* Still the destination of a copy in flight. */
		o = malloc(sizeof(*o));
		if (o) {
			o->n = np;
			o->pages = x->host;
			o->next = x->bt->orphans;
			x->bt->orphans = o;
			x->host = NULL;
		} else {
			batch_wait(h, x->bt, false);
		}
	}
	if (x->host)
		kvs_hpool_free(h->hp, np, x->host);
	free(x->host);
	x->host = NULL;
	x->host_ok = false;
	acct(h, x, 1);
	leaf_update(h, x);
}

/* Forget @x's backup: its batch is resolved, or its copy dropped. */
static void bx_end(kvs_hiradix_t *h, node_t *x)
{
	struct hbatch *b = x->bt;

	bset(h, x, false);
	x->bt = NULL;
	lock_path(h, x, -1);
	batch_put(h, b);
}

/* @x's host copy failed: drop it and every descendant's (only pending). */
static void drop_host(kvs_hiradix_t *h, node_t *x)
{
	node_t *c;

	for (c = x->child; c; c = c->next)
		if (c->host)
			drop_host(h, c);
	host_release(h, x); /* first: it needs to see the batch */
	if (x->bt)
		bx_end(h, x);
	ST(h, backup_lost, 1);
}

/* @x's copy is complete and its parent's valid: valid now, and so are its
 * children's that completed meanwhile. */
static void make_valid(kvs_hiradix_t *h, node_t *x)
{
	node_t *c;

	bx_end(h, x);
	x->host_ok = true;
	leaf_update(h, x);
	node_events(h, x, KVS_KV_STORED, KVS_MEDIUM_CPU);
	l3_backup(h, x);
	for (c = x->child; c; c = c->next)
		if (c->bt && !queued(h, c->bt) && c->bt->state == 1)
			make_valid(h, c);
}

/* Act on the backups whose batch is resolved. */
static void resolve(kvs_hiradix_t *h)
{
	node_t *x = h->backups, *n;

	while (x) {
		uint64_t gen = h->bgen;
		int s = queued(h, x->bt) ? 0 : x->bt->state;

		n = x->bnext;
		if (s < 0)
			drop_host(h, x);
		else if (s > 0 && (x->parent == &h->root || x->parent->host_ok))
			make_valid(h, x);
		/* Others than x left the list: start again. */
		x = h->bgen - gen > (s != 0) ? h->backups : n;
	}
}

static ssize_t evict_host(kvs_hiradix_t *h, size_t tokens);

/* Queue a backup of @x (on the device, no host copy), its ancestors'
 * first. */
static int backup(kvs_hiradix_t *h, node_t *x)
{
	size_t np = x->len / h->ps;
	int32_t *host;

	if (x->parent != &h->root && !x->parent->host && backup(h, x->parent) < 0)
		return -1;
	host = malloc(np * sizeof(*host));
	if (!host) {
		ST(h, backup_fail, 1);
		errno = ENOMEM;
		return -1;
	}
	if (kvs_hpool_alloc(h->hp, np, host) < 0) {
		if (errno == ENOMEM) {
			evict_host(h, x->len);
			if (kvs_hpool_alloc(h->hp, np, host) == 0)
				goto ok;
		}
		ST(h, backup_fail, 1);
		free(host);
		errno = ENOMEM;
		return -1;
	}
ok:
	acct(h, x, -1);
	x->host = host;
	acct(h, x, 1);
	x->bt = &h->wq;
	bset(h, x, true);
	lock_path(h, x, 1);
	return 0;
}

/* Start every queued backup as one transfer.  A failure drops them all. */
static int submit_writes(kvs_hiradix_t *h)
{
	size_t np = 0, k = 0;
	int32_t *dev = NULL, *host = NULL;
	struct hbatch *b = NULL;
	node_t *x, *n;
	int rc = ENOMEM;

	for (x = h->backups; x; x = x->bnext)
		if (x->bt == &h->wq)
			np += x->len / h->ps;
	if (np == 0)
		return 0;
	b = calloc(1, sizeof(*b));
	dev = malloc(np * sizeof(*dev));
	host = malloc(np * sizeof(*host));
	if (!b || !dev || !host)
		goto fail;
	/* The list is newest first: fill from the end, ancestors first. */
	k = np;
	for (x = h->backups; x; x = x->bnext) {
		if (x->bt != &h->wq)
			continue;
		k -= x->len / h->ps;
		pages_of(h, x->locs, x->len, dev + k);
		memcpy(host + k, x->host, x->len / h->ps * sizeof(*host));
	}
	if (kvs_hpool_backup(h->hp, dev, host, np, &b->x) < 0) {
		rc = errno;
		goto fail;
	}
	for (x = h->backups; x; x = x->bnext)
		if (x->bt == &h->wq) {
			x->bt = b;
			b->refs++;
			ST(h, backups, 1);
			ST(h, backup_tokens, x->len);
		}
	ack_push(&h->wacks, b);
	ST(h, write_batches, 1);
	free(dev);
	free(host);
	return 0;
fail:
	free(b);
	free(dev);
	free(host);
	for (x = h->backups; x; x = n) {
		n = x->bnext;
		if (x->bt == &h->wq) {
			/* Never submitted: not lost, failed. */
			host_release(h, x);
			bx_end(h, x);
			ST(h, backup_fail, 1);
		}
	}
	errno = rc;
	return -1;
}

static void inc_hit(kvs_hiradix_t *h, node_t *x)
{
	if (h->policy == KVS_WRITE_BACK)
		return;
	x->hit_count++;
	if (!x->host && x->hit_count >= h->threshold)
		(void)backup(h, x); /* best effort: the node stays without a copy */
}

/* ------------------------------------------------------------ loads */

static void load_done(kvs_hiradix_t *h, struct hload *ld, bool ok)
{
	node_t *x;

	if (!ok)
		ST(h, load_fail, 1);
	for (x = ld->last;; x = x->parent) {
		x->ld = NULL;
		if (!ok) {
			/* Never claim data not there: tombstones again. */
			kvs_pool_free(h->pool, x->len, x->locs);
			set_dev(h, x, false);
		} else {
			node_events(h, x, KVS_KV_STORED, KVS_MEDIUM_GPU);
		}
		if (x == ld->top)
			break;
	}
	lock_path(h, ld->last, -1);
	if (ld->prev)
		ld->prev->next = ld->next;
	else
		h->loads = ld->next;
	if (ld->next)
		ld->next->prev = ld->prev;
	batch_put(h, ld->bt);
	free(ld->dev);
	free(ld->host);
	free(ld);
}

/* Start every queued load back as one transfer.  A failure undoes them
 * all (their chains are tombstones again). */
static int submit_loads(kvs_hiradix_t *h)
{
	struct hload *ld, *ln;
	size_t np = 0, k = 0;
	int32_t *dev = NULL, *host = NULL;
	struct hbatch *b;
	int rc = ENOMEM;

	for (ld = h->loads; ld; ld = ld->next)
		if (ld->bt == &h->lq)
			np += ld->np;
	if (np == 0)
		return 0;
	b = calloc(1, sizeof(*b));
	dev = malloc(np * sizeof(*dev));
	host = malloc(np * sizeof(*host));
	if (!b || !dev || !host)
		goto fail;
	for (ld = h->loads; ld; ld = ld->next)
		if (ld->bt == &h->lq) {
			memcpy(dev + k, ld->dev, ld->np * sizeof(*dev));
			memcpy(host + k, ld->host, ld->np * sizeof(*host));
			k += ld->np;
		}
	if (kvs_hpool_load(h->hp, dev, host, np, &b->x) < 0) {
		rc = errno;
		goto fail;
	}
	for (ld = h->loads; ld; ld = ld->next)
		if (ld->bt == &h->lq) {
			ld->bt = b;
			b->refs++;
			free(ld->dev);
			free(ld->host);
			ld->dev = ld->host = NULL;
		}
	ack_push(&h->lacks, b);
	h->last_load = b;
	ST(h, load_batches, 1);
	free(dev);
	free(host);
	return 0;
fail:
	free(b);
	free(dev);
	free(host);
	for (ld = h->loads; ld; ld = ln) {
		ln = ld->next;
		if (ld->bt == &h->lq)
			load_done(h, ld, false);
	}
	errno = rc;
	return -1;
}

/* Wait for a load back in flight into @x. */
static void settle_load(kvs_hiradix_t *h, node_t *x)
{
	struct hload *ld = x->ld;

	if (!ld)
		return;
	if (ld->bt == &h->lq && submit_loads(h) < 0)
		return; /* undone: x is a tombstone again */
	batch_wait(h, ld->bt, true);
	load_done(h, ld, ld->bt->state > 0);
}

/* Wait for what is in flight on @x: a load back into it, its backup (and,
 * first, its ancestors'). */
static void settle(kvs_hiradix_t *h, node_t *x)
{
	settle_load(h, x);
	if (!x->bt)
		return;
	if (x->parent != &h->root && x->parent->bt)
		settle(h, x->parent);
	if (x->bt == &h->wq && submit_writes(h) < 0)
		return; /* dropped */
	if (!x->bt)
		return; /* dropped with its parent's */
	batch_wait(h, x->bt, false);
	resolve(h);
}

/* Take in the transfers that completed; backup batches in order, as many
 * as every rank has. */
static void take_acks(kvs_hiradix_t *h, bool caller)
{
	struct hbatch *b, *bn;
	struct hload *ld, *ln;
	uint64_t k = 0;

	for (b = h->lacks; b; b = bn) {
		int r = kvs_hpool_xfer_query(b->x);

		bn = b->next;
		if (r != 0) {
			ack_take(&h->lacks, b, r == 1 ? 1 : -1);
			batch_check(h, b); /* no load left in it */
		}
	}
	for (ld = h->loads; ld; ld = ln) {
		ln = ld->next;
		if (!queued(h, ld->bt) && ld->bt->state != 0)
			load_done(h, ld, ld->bt->state > 0);
	}
	if (h->agree && !caller)
		return; /* the ranks agree in the caller's polls only */
	/* Each batch is queried once: the answer is kept for taking it in. */
	for (b = h->wacks; b && (b->seen = kvs_hpool_xfer_query(b->x)) != 0; b = b->next)
		k++;
	if (h->agree) {
		uint64_t a = h->agree(h->agree_arg, KVS_AGREE_WRITE_ACKS, k);

		k = a < k ? a : k;
	}
	while (k--) {
		b = h->wacks;
		ack_take(&h->wacks, b, b->seen == 1 ? 1 : -1);
		batch_check(h, b); /* every node of it dropped */
	}
	resolve(h);
}

/* Give back the load transfers handed to the caller. */
static void unhand(kvs_hiradix_t *h)
{
	struct hbatch *b;

	while ((b = h->handed)) {
		h->handed = b->hnext;
		b->handed = false;
		batch_check(h, b); /* else freed when taken in or put */
	}
}

/* Hand the load batch just submitted to the caller. */
static kvs_hpool_xfer_t *hand(kvs_hiradix_t *h)
{
	struct hbatch *b = h->last_load;

	h->last_load = NULL;
	if (!b)
		return NULL;
	b->handed = true;
	b->hnext = h->handed;
	h->handed = b;
	return b->x;
}

/* What a caller's call does before returning: submit its copies unless
 * deferred. */
static void flush(kvs_hiradix_t *h)
{
	if (!(h->flags & KVS_HIRADIX_DEFER))
		(void)submit_writes(h);
}

/* A poll: by the caller (@caller), or by an eviction or the thread. */
static void poll_locked(kvs_hiradix_t *h, bool caller)
{
	if (caller)
		unhand(h);
	if (h->flags & KVS_HIRADIX_DEFER)
		(void)submit_writes(h);
	take_acks(h, caller);
}

/* ------------------------------------------------------------ split */

/* Cut @c after @k tokens: parent -> nn (c's first k) -> c (the rest).  A
 * backup or a load in flight on @c is shared: nn joins its batch or its
 * chain, so nothing waits. */
static node_t *split(kvs_hiradix_t *h, node_t *c, size_t k)
{
	node_t *nn = node_new(h, k), *p = c->parent;
	size_t kp = k / h->ps;

	if (!nn)
		return NULL;
	if (c->host) {
		nn->host = malloc(kp * sizeof(int32_t));
		if (!nn->host) {
			node_free(h, nn);
			return NULL;
		}
		memcpy(nn->host, c->host, kp * sizeof(int32_t));
		memmove(c->host, c->host + kp, (c->len - k) / h->ps * sizeof(int32_t));
		nn->host_ok = c->host_ok;
	}
	acct(h, c, -1);
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
	child_del(p, c);
	child_add(p, nn);
	child_add(nn, c);
	acct(h, nn, 1);
	acct(h, c, 1);
	node_hash(h, nn);
	if (c->ld) {
		nn->ld = c->ld;
		if (c->ld->top == c)
			c->ld->top = nn;
	}
	if (c->bt) {
		nn->bt = c->bt;
		if (!queued(h, c->bt))
			c->bt->refs++;
		bset(h, nn, true);
		lock_path(h, nn, 1);
	}
	leaf_update(h, nn);
	leaf_update(h, c);
	return nn;
}

/* Walk @key[0 .. n) from the root, splitting where it ends inside a node;
 * *@pos receives the tokens matched.  A load back in flight on the path is
 * waited for: a match must return locations that hold their data, and an
 * insert must not hang a device node under a chain whose load could still
 * fail.  NULL with errno ENOMEM. */
static node_t *walk(kvs_hiradix_t *h, const int32_t *key, size_t n, size_t *pos)
{
	node_t *x = &h->root, *c;
	size_t p = 0;

	while (p < n && (c = find_child(h, x, key + p))) {
		size_t k = common(h, c, key + p, n - p);

		settle_load(h, c);
		if (k < c->len) {
			c = split(h, c, k);
			if (!c)
				return NULL;
		}
		touch(h, c);
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
		held_mark(h, x, false);
	acct(h, x, -1);
	child_del(p, x);
	leaf_update(h, p);
	node_free(h, x);
}

static ssize_t evict_device(kvs_hiradix_t *h, size_t tokens)
{
	size_t done = 0;
	node_t *x;

	while (done < tokens && (x = lru(&h->dheap, offsetof(node_t, dk)))) {
		if (!x->host_ok && !x->host && h->policy == KVS_WRITE_BACK) {
			/* Write back: copy it out now, then demote it.  A
			 * failed copy leaves no host copy: deleted below. */
			if (backup(h, x) == 0)
				settle(h, x);
		}
		kvs_pool_free(h->pool, x->len, x->locs);
		done += x->len;
		node_events(h, x, KVS_KV_REMOVED, KVS_MEDIUM_GPU);
		if (x->host_ok) {
			set_dev(h, x, false);
			ST(h, tombstoned, 1);
		} else {
			node_delete(h, x); /* no child: none could be a tombstone */
			ST(h, deleted, 1);
		}
	}
	ST(h, evict_device_tokens, done);
	return (ssize_t)done;
}

static ssize_t evict_host(kvs_hiradix_t *h, size_t tokens)
{
	size_t done = 0;
	node_t *x;

	while (done < tokens && (x = lru(&h->hheap, offsetof(node_t, hk)))) {
		done += x->len;
		kvs_hpool_free(h->hp, x->len / h->ps, x->host);
		node_events(h, x, KVS_KV_REMOVED, KVS_MEDIUM_CPU);
		node_delete(h, x);
	}
	ST(h, evict_host_tokens, done);
	return (ssize_t)done;
}

/* ------------------------------------------------------------ storage */

/*
 * The storage tier (kvs_hiradix_set_store()).  Every node then carries its
 * pages' L3 keys (pkey, chained from its parent's last one), computed when
 * the node is made.  Two worker threads do the store's I/O without h->lock:
 *
 * Backups to L3.  A host copy that becomes valid is queued (l3_backup())
 * with its host pages protected (hlock: not a host leaf, so host eviction
 * leaves it) until the backup thread has written it; the host pages of a
 * valid copy never change, so the thread reads them unlocked.
 *
 * Prefetch.  kvs_hiradix_prefetch() finds the deepest node with a valid
 * host copy on the key's path (the anchor, protected by hlock), allocates
 * host pages for the rest of the key and queues an operation; the prefetch
 * thread hashes the pages, asks the store how many it has from the first,
 * gives up below the threshold, and reads them in chunks, publishing the
 * pages done after each (pf->done, under pf->m).  kvs_hiradix_prefetch_done()
 * decides by the policy when to stop, takes the pages done as tombstones
 * under the anchor, and frees the rest; a chunk still being read when it
 * stops is the thread's to free when it ends (pf->inflight), so no call
 * waits for the store.
 */

struct l3job {
	struct l3job *next;
	node_t *x;
	size_t np;
	kvs_page_key_t *keys;
	int32_t *host;
};

struct pf {
	struct pf *next;		/* h->pfs (all) */
	struct pf *qnext;		/* the prefetch thread's queue */
	uint64_t id;
	node_t *anchor;
	kvs_page_key_t prev;		/* the anchor's last key */
	bool has_prev;
	int32_t *tok, *host;		/* np pages of tokens; host pages */
	kvs_page_key_t *keys;
	size_t np;
	uint64_t deadline_ns;
	pthread_mutex_t m;		/* done .. taken */
	size_t done;			/* pages read, from the first */
	size_t taken;			/* pages the tree took (terminated) */
	bool complete;			/* the thread is finished with it */
	bool inflight;			/* the thread is reading a chunk */
	bool terminated;		/* the caller stopped it */
};

static void node_keys(kvs_hiradix_t *h, node_t *x)
{
	const node_t *p = x->parent;

	if (!h->store)
		return;
	(void)kvs_page_hashes(p == &h->root ? NULL : &p->pkey[p->len / h->ps - 1], x->key, x->len,
			      h->ps, x->pkey);
}

static void hlock(kvs_hiradix_t *h, node_t *x, int d)
{
	if (x == &h->root)
		return;
	x->hlock = (uint32_t)((int)x->hlock + d);
	leaf_update(h, x);
}

/* Queue @x's valid host copy for the store (best effort). */
static void l3_backup(kvs_hiradix_t *h, node_t *x)
{
	struct l3job *j;

	if (!h->store || !h->l3.backup)
		return;
	j = calloc(1, sizeof(*j));
	if (!j)
		goto fail;
	j->np = x->len / h->ps;
	j->keys = malloc(j->np * sizeof(*j->keys));
	j->host = malloc(j->np * sizeof(*j->host));
	if (!j->keys || !j->host)
		goto fail;
	memcpy(j->keys, x->pkey, j->np * sizeof(*j->keys));
	memcpy(j->host, x->host, j->np * sizeof(*j->host));
	j->x = x;
	hlock(h, x, 1);
	*h->l3q_tail = j;
	h->l3q_tail = &j->next;
	h->l3_pending++;
	pthread_cond_signal(&h->l3_wake);
	return;
fail:
	if (j) {
		free(j->keys);
		free(j->host);
	}
	free(j);
	ST(h, l3_backup_fail, 1);
}

static void *l3_backup_main(void *arg)
{
	kvs_hiradix_t *h = arg;
	struct l3job *j;
	ssize_t r;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->l3q && !h->l3_stop)
			pthread_cond_wait(&h->l3_wake, &h->lock);
		if (!h->l3q)
			break;
		j = h->l3q;
		h->l3q = j->next;
		if (!h->l3q)
			h->l3q_tail = &h->l3q;
		pthread_mutex_unlock(&h->lock);
		r = kvs_store_set_pages(h->store, j->keys, j->np, h->hp, j->host);
		pthread_mutex_lock(&h->lock);
		if (r == (ssize_t)j->np)
			ST(h, l3_backup_pages, j->np);
		else
			ST(h, l3_backup_fail, 1);
		hlock(h, j->x, -1);
		h->l3_pending--;
		pthread_cond_broadcast(&h->l3_idle);
		free(j->keys);
		free(j->host);
		free(j);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* Free @pf's host pages [from, np) and the op itself. */
static void pf_free(kvs_hiradix_t *h, struct pf *pf, size_t from)
{
	if (pf->np > from)
		kvs_hpool_free(h->hp, pf->np - from, pf->host + from);
	pthread_mutex_destroy(&pf->m);
	free(pf->tok);
	free(pf->host);
	free(pf->keys);
	free(pf);
}

static void *l3_prefetch_main(void *arg)
{
	kvs_hiradix_t *h = arg;
	struct pf *pf;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		size_t hit, at;
		bool stop;

		while (!h->pfq && !h->l3_stop)
			pthread_cond_wait(&h->pf_wake, &h->lock);
		if (!h->pfq)
			break;
		pf = h->pfq;
		h->pfq = pf->qnext;
		if (!h->pfq)
			h->pfq_tail = &h->pfq;
		pthread_mutex_unlock(&h->lock);
		/* Hash, ask, read chunk by chunk while not stopped. */
		hit = 0;
		if (kvs_page_hashes(pf->has_prev ? &pf->prev : NULL, pf->tok, pf->np * h->ps, h->ps,
				    pf->keys) == (ssize_t)pf->np) {
			ssize_t e = kvs_store_exists(h->store, pf->keys, pf->np);

			hit = e > 0 ? (size_t)e : 0;
			if (hit * h->ps < h->l3.prefetch_threshold)
				hit = 0;
		}
		for (at = 0;;) {
			size_t n = hit - at < h->l3.chunk_pages ? hit - at : h->l3.chunk_pages;
			ssize_t got = 0;

			pthread_mutex_lock(&pf->m);
			stop = pf->terminated || n == 0;
			pf->inflight = !stop;
			pthread_mutex_unlock(&pf->m);
			if (stop)
				break;
			got = kvs_store_get_pages(h->store, pf->keys + at, n, h->hp, pf->host + at);
			pthread_mutex_lock(&pf->m);
			pf->inflight = false;
			if (got > 0)
				at += (size_t)got;
			if (!pf->terminated)
				pf->done = at;
			stop = pf->terminated;
			pthread_mutex_unlock(&pf->m);
			if (stop || got != (ssize_t)n)
				break;
		}
		pthread_mutex_lock(&pf->m);
		pf->complete = true;
		stop = pf->terminated;
		pthread_mutex_unlock(&pf->m);
		if (stop)
			pf_free(h, pf, pf->taken); /* the caller gave it up to us */
		pthread_mutex_lock(&h->lock);
		h->pf_live--;
		pthread_cond_broadcast(&h->l3_idle);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static void l3_stop(kvs_hiradix_t *h)
{
	struct l3job *j;
	struct pf *pf;

	if (!h->store)
		return;
	pthread_mutex_lock(&h->lock);
	h->l3_stop = true;
	/* Queued prefetches are not started: stop them here. */
	while ((pf = h->pfq)) {
		bool given_up;

		h->pfq = pf->qnext;
		if (!h->pfq)
			h->pfq_tail = &h->pfq;
		h->pf_live--;
		pthread_mutex_lock(&pf->m);
		pf->complete = true;
		given_up = pf->terminated;
		pthread_mutex_unlock(&pf->m);
		if (given_up)
			pf_free(h, pf, pf->taken); /* the caller gave it up */
	}
	pthread_cond_broadcast(&h->l3_wake);
	pthread_cond_broadcast(&h->pf_wake);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->l3_thread, NULL);
	pthread_join(h->pf_thread, NULL);
	/* Backups the thread did not take; prefetches the caller left. */
	while ((j = h->l3q)) {
		h->l3q = j->next;
		if (!h->l3q)
			h->l3q_tail = &h->l3q;
		hlock(h, j->x, -1);
		free(j->keys);
		free(j->host);
		free(j);
	}
	while ((pf = h->pfs)) {
		h->pfs = pf->next;
		hlock(h, pf->anchor, -1);
		pf_free(h, pf, 0);
	}
	pthread_cond_destroy(&h->l3_wake);
	pthread_cond_destroy(&h->pf_wake);
	pthread_cond_destroy(&h->l3_idle);
}

/**
 * kvs_hiradix_l3_attr_init() - the defaults: best effort, a threshold of
 * 256 tokens, timeout 2000 ms + 100 ms per 1024 tokens capped at 30 s
 * (SGLang's prefetch_timeout_base, _per_ki_token and _max), chunks of 16
 * pages, host copies backed up to the store.
 * @attr: attributes.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hiradix_l3_attr_init(kvs_hiradix_l3_attr_t *attr)
{
	if (!attr) {
		errno = EINVAL;
		return -1;
	}
	memset(attr, 0, sizeof(*attr));
	attr->prefetch_policy = KVS_PREFETCH_BEST_EFFORT;
	attr->prefetch_threshold = 256;
	attr->timeout_base_ms = 2000;
	attr->timeout_per_ktoken_ms = 100;
	attr->timeout_max_ms = 30000;
	attr->chunk_pages = 16;
	attr->backup = 1;
	return 0;
}

/**
 * kvs_hiradix_set_store() - give the cache a storage tier.
 * @h: cache, still empty.
 * @store: the store (kvs_store_open()), whose page_bytes are the host
 *         pool's page bytes; it must outlive the cache.
 * @attr: attributes, or NULL for the defaults.
 *
 * Starts the backup and prefetch threads.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: 0, or -1 with errno EINVAL (a bad attribute, a store of another
 * page size), EBUSY (the cache has nodes, or a store already), ENOTSUP (no
 * SHA-256 in this build), ENOMEM or EAGAIN.
 */
KVS_EXPORT int kvs_hiradix_set_store(kvs_hiradix_t *h, kvs_store_t *store,
				     const kvs_hiradix_l3_attr_t *attr)
{
	kvs_hiradix_l3_attr_t def;
	kvs_page_key_t k;
	int32_t t = 0;
	size_t pb;
	int rc;

	if (!attr) {
		kvs_hiradix_l3_attr_init(&def);
		attr = &def;
	}
	if (!h || !store || attr->prefetch_policy > KVS_PREFETCH_TIMEOUT || attr->chunk_pages == 0) {
		errno = EINVAL;
		return -1;
	}
	if (kvs_page_hash(NULL, &t, 1, &k) < 0)
		return -1;
	pb = kvsi_hpool_page_bytes(h->hp);
	if (pb != kvs_store_page_bytes(store)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	if (h->store || h->use.nodes) {
		pthread_mutex_unlock(&h->lock);
		errno = EBUSY;
		return -1;
	}
	h->l3 = *attr;
	if (pthread_cond_init(&h->l3_wake, NULL) != 0 || pthread_cond_init(&h->pf_wake, NULL) != 0 ||
	    pthread_cond_init(&h->l3_idle, NULL) != 0) {
		pthread_mutex_unlock(&h->lock);
		errno = ENOMEM;
		return -1;
	}
	rc = pthread_create(&h->l3_thread, NULL, l3_backup_main, h);
	if (rc == 0) {
		rc = pthread_create(&h->pf_thread, NULL, l3_prefetch_main, h);
		if (rc != 0) {
			h->l3_stop = true;
			pthread_cond_broadcast(&h->l3_wake);
			pthread_mutex_unlock(&h->lock);
			pthread_join(h->l3_thread, NULL);
			pthread_mutex_lock(&h->lock);
			h->l3_stop = false;
		}
	}
	if (rc != 0) {
		pthread_cond_destroy(&h->l3_wake);
		pthread_cond_destroy(&h->pf_wake);
		pthread_cond_destroy(&h->l3_idle);
		pthread_mutex_unlock(&h->lock);
		errno = rc == EAGAIN ? EAGAIN : ENOMEM;
		return -1;
	}
	h->store = store;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

static struct pf *pf_find(kvs_hiradix_t *h, uint64_t id, struct pf ***link)
{
	struct pf **l;

	for (l = &h->pfs; *l; l = &(*l)->next)
		if ((*l)->id == id) {
			if (link)
				*link = l;
			return *l;
		}
	return NULL;
}

/* Lock @h and find operation @id; NULL, unlocked, with errno EINVAL (no
 * cache, or no store) or ENOENT. */
static struct pf *pf_lookup(kvs_hiradix_t *h, uint64_t id, struct pf ***link)
{
	struct pf *pf;

	if (!h) {
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&h->lock);
	if (!h->store) {
		pthread_mutex_unlock(&h->lock);
		errno = EINVAL;
		return NULL;
	}
	pf = pf_find(h, id, link);
	if (!pf) {
		pthread_mutex_unlock(&h->lock);
		errno = ENOENT;
	}
	return pf;
}

/**
 * kvs_hiradix_prefetch() - start fetching from the store the pages of
 * @key past what the host already has.
 * @h: cache with a store.
 * @id: the caller's name for the operation (a request id), unique among
 *      those in progress.
 * @key: token ids.
 * @n: tokens; only whole pages are fetched.
 *
 * Skipped (0) when fewer than the threshold's tokens are past the host
 * copy, or when the host pool has no room for them even after host
 * eviction.
 *
 * Context: MT-Safe (takes h->lock); never waits for the store.
 * Return: the tokens it will try to fetch, 0 when skipped, or -1 with
 * errno EINVAL (no store, bad arguments), EEXIST (@id in progress) or
 * ENOMEM.
 */
KVS_EXPORT ssize_t kvs_hiradix_prefetch(kvs_hiradix_t *h, uint64_t id, const int32_t *key,
					size_t n)
{
	size_t pos, base = 0, rem, np;
	node_t *x, *z, *y;
	struct pf *pf;
	uint64_t tmo;

	if (!h || (n && !key)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	if (!h->store) {
		pthread_mutex_unlock(&h->lock);
		errno = EINVAL;
		return -1;
	}
	if (pf_find(h, id, NULL)) {
		pthread_mutex_unlock(&h->lock);
		errno = EEXIST;
		return -1;
	}
	n -= n % h->ps;
	x = walk(h, key, n, &pos);
	if (!x) {
		pthread_mutex_unlock(&h->lock);
		errno = ENOMEM;
		return -1;
	}
	for (z = x; z != &h->root && !z->host_ok; z = z->parent)
		;
	for (y = z; y != &h->root; y = y->parent)
		base += y->len;
	rem = n - base;
	if (rem == 0 || rem < h->l3.prefetch_threshold) {
		if (rem)
			ST(h, prefetch_skipped, 1);
		pthread_mutex_unlock(&h->lock);
		return 0;
	}
	np = rem / h->ps;
	pf = calloc(1, sizeof(*pf));
	if (!pf || pthread_mutex_init(&pf->m, NULL) != 0)
		goto nomem;
	pf->tok = malloc(rem * sizeof(int32_t));
	pf->host = malloc(np * sizeof(int32_t));
	pf->keys = malloc(np * sizeof(kvs_page_key_t));
	if (!pf->tok || !pf->host || !pf->keys)
		goto nomem_m;
	if (kvs_hpool_alloc(h->hp, np, pf->host) < 0) {
		evict_host(h, rem);
		if (kvs_hpool_alloc(h->hp, np, pf->host) < 0) {
			ST(h, prefetch_skipped, 1);
			pthread_mutex_destroy(&pf->m);
			free(pf->tok);
			free(pf->host);
			free(pf->keys);
			free(pf);
			pthread_mutex_unlock(&h->lock);
			return 0;
		}
	}
	memcpy(pf->tok, key + base, rem * sizeof(int32_t));
	pf->id = id;
	pf->np = np;
	pf->anchor = z;
	if (z != &h->root) {
		pf->prev = z->pkey[z->len / h->ps - 1];
		pf->has_prev = true;
	}
	tmo = h->l3.timeout_base_ms + (uint64_t)h->l3.timeout_per_ktoken_ms * rem / 1024;
	if (tmo > h->l3.timeout_max_ms)
		tmo = h->l3.timeout_max_ms;
	pf->deadline_ns = kvs_now_ns() + tmo * 1000000ull;
	hlock(h, z, 1);
	pf->next = h->pfs;
	h->pfs = pf;
	*h->pfq_tail = pf;
	h->pfq_tail = &pf->qnext;
	h->pf_live++;
	pthread_cond_signal(&h->pf_wake);
	ST(h, prefetches, 1);
	pthread_mutex_unlock(&h->lock);
	return (ssize_t)rem;
nomem_m:
	pthread_mutex_destroy(&pf->m);
nomem:
	if (pf) {
		free(pf->tok);
		free(pf->host);
		free(pf->keys);
	}
	free(pf);
	pthread_mutex_unlock(&h->lock);
	errno = ENOMEM;
	return -1;
}

/* Hang @pf's first @d pages under its anchor as host-only nodes, where the
 * tree does not have them already; free those of the @d it does not use.
 * Returns the tokens now on the host for the key. */
static size_t pf_insert(kvs_hiradix_t *h, struct pf *pf, size_t d)
{
	size_t pos = 0, end = d * h->ps, pg;
	node_t *x = pf->anchor, *c;

	while (pos < end) {
		c = find_child(h, x, pf->tok + pos);
		if (!c) {
			node_t *nn = node_new(h, end - pos);

			if (!nn)
				break;
			nn->host = malloc((end - pos) / h->ps * sizeof(int32_t));
			if (!nn->host) {
				node_free(h, nn);
				break;
			}
			memcpy(nn->key, pf->tok + pos, (end - pos) * sizeof(int32_t));
			memcpy(nn->host, pf->host + pos / h->ps, (end - pos) / h->ps * sizeof(int32_t));
			memcpy(nn->pkey, pf->keys + pos / h->ps,
			       (end - pos) / h->ps * sizeof(kvs_page_key_t));
			nn->host_ok = true;
			child_add(x, nn);
			acct(h, nn, 1);
			node_hash(h, nn);
			touch(h, nn);
			leaf_update(h, nn);
			leaf_update(h, x);
			node_events(h, nn, KVS_KV_STORED, KVS_MEDIUM_CPU);
			pos = end;
			break;
		}
		{
			size_t k = common(h, c, pf->tok + pos, end - pos);

			if (k < c->len) {
				c = split(h, c, k);
				if (!c)
					break;
			}
		}
		pg = pos / h->ps;
		if (c->host_ok) {
			kvs_hpool_free(h->hp, c->len / h->ps, pf->host + pg);
		} else if (!c->host) {
			/* On the device without a copy: this is its copy. */
			acct(h, c, -1);
			c->host = malloc(c->len / h->ps * sizeof(int32_t));
			if (!c->host) {
				acct(h, c, 1);
				break;
			}
			memcpy(c->host, pf->host + pg, c->len / h->ps * sizeof(int32_t));
			c->host_ok = true;
			acct(h, c, 1);
			leaf_update(h, c);
			node_events(h, c, KVS_KV_STORED, KVS_MEDIUM_CPU);
		} else {
			break; /* a backup pending: nothing may hang below it */
		}
		pos += c->len;
		x = c;
	}
	if (pos < end)
		kvs_hpool_free(h->hp, d - pos / h->ps, pf->host + pos / h->ps);
	return pos < end ? pos : end;
}

/**
 * kvs_hiradix_prefetch_done() - whether a prefetch is over, by the
 * policy; if it is, take its pages into the tree.
 * @h: cache.
 * @id: the operation.
 * @tokens: receives the tokens now on the host thanks to it (may be NULL).
 *
 * KVS_PREFETCH_BEST_EFFORT: over at once, with the pages read so far.
 * KVS_PREFETCH_WAIT_COMPLETE: over when the thread has read every page
 * the store had.  KVS_PREFETCH_TIMEOUT: that, or the deadline passed.
 * Once over, the pages read (the ranks agree on their number with
 * KVS_AGREE_PREFETCH) become host-only nodes under the anchor, the rest of
 * the host pages are freed, and @id is forgotten.
 *
 * Context: MT-Safe (takes h->lock); never waits for the store.
 * Return: 1 over, 0 not yet (call again later), or -1 with errno EINVAL
 * (no store) or ENOENT (no such operation).
 */
KVS_EXPORT int kvs_hiradix_prefetch_done(kvs_hiradix_t *h, uint64_t id, size_t *tokens)
{
	struct pf *pf, **link;
	size_t d, got;
	bool complete;

	pf = pf_lookup(h, id, &link);
	if (!pf)
		return -1;
	pthread_mutex_lock(&pf->m);
	complete = pf->complete;
	d = pf->done;
	pthread_mutex_unlock(&pf->m);
	if (!complete && (h->l3.prefetch_policy == KVS_PREFETCH_WAIT_COMPLETE ||
			  (h->l3.prefetch_policy == KVS_PREFETCH_TIMEOUT &&
			   kvs_now_ns() < pf->deadline_ns))) {
		pthread_mutex_unlock(&h->lock);
		return 0;
	}
	/* Pages [0, d) are final: the thread reads only past pf->done. */
	if (h->agree) {
		uint64_t a = h->agree(h->agree_arg, KVS_AGREE_PREFETCH, (uint64_t)d * h->ps);

		if (a < (uint64_t)d * h->ps)
			d = (size_t)(a / h->ps);
	}
	got = pf_insert(h, pf, d);
	*link = pf->next;
	hlock(h, pf->anchor, -1);
	/* Pages [d, np) and the op: ours if the thread is finished with it,
	 * else the thread's to free when it is. */
	pthread_mutex_lock(&pf->m);
	pf->terminated = true;
	pf->taken = d;
	complete = pf->complete;
	pthread_mutex_unlock(&pf->m);
	if (complete)
		pf_free(h, pf, d);
	ST(h, prefetch_tokens, got);
	if (tokens)
		*tokens = got;
	pthread_mutex_unlock(&h->lock);
	return 1;
}

/**
 * kvs_hiradix_prefetch_revoke() - give up a prefetch: nothing is taken
 * into the tree, its host pages are freed (by the thread, when it is
 * reading one of them).
 * @h: cache.
 * @id: the operation.
 *
 * Context: MT-Safe (takes h->lock); never waits for the store.
 * Return: 0, or -1 with errno EINVAL (no store) or ENOENT.
 */
KVS_EXPORT int kvs_hiradix_prefetch_revoke(kvs_hiradix_t *h, uint64_t id)
{
	struct pf *pf, **link;
	bool complete;

	pf = pf_lookup(h, id, &link);
	if (!pf)
		return -1;
	*link = pf->next;
	hlock(h, pf->anchor, -1);
	pthread_mutex_lock(&pf->m);
	pf->terminated = true;
	pf->taken = 0;
	complete = pf->complete;
	pthread_mutex_unlock(&pf->m);
	if (complete)
		pf_free(h, pf, 0);
	ST(h, prefetch_revoked, 1);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/**
 * kvs_hiradix_l3_wait() - wait until the storage threads are idle: every
 * queued backup to the store written (or failed) and every prefetch read
 * as far as it goes.
 * @h: cache.
 *
 * Context: MT-Safe (takes h->lock); waits for the store.
 * Return: 0, or -1 with errno EINVAL (no store).
 */
KVS_EXPORT int kvs_hiradix_l3_wait(kvs_hiradix_t *h)
{
	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	if (!h->store) {
		pthread_mutex_unlock(&h->lock);
		errno = EINVAL;
		return -1;
	}
	while (h->l3_pending > 0 || h->pf_live > 0)
		pthread_cond_wait(&h->l3_idle, &h->lock);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/* ------------------------------------------------------------ thread */

/* KVS_HIRADIX_THREAD: submit and take in every poll_us, as a scheduler's
 * poll would, so that copies start and complete without the caller. */
static void *thread_main(void *arg)
{
	kvs_hiradix_t *h = arg;
	struct timespec t;

	pthread_mutex_lock(&h->lock);
	while (!h->stop) {
		poll_locked(h, false);
		clock_gettime(CLOCK_MONOTONIC, &t);
		t.tv_nsec += (long)(h->poll_us % 1000000) * 1000;
		t.tv_sec += h->poll_us / 1000000 + t.tv_nsec / 1000000000;
		t.tv_nsec %= 1000000000;
		pthread_cond_timedwait(&h->wake, &h->lock, &t);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static int thread_start(kvs_hiradix_t *h)
{
	pthread_condattr_t ca;
	int rc;

	if (pthread_condattr_init(&ca) != 0) {
		errno = ENOMEM;
		return -1;
	}
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(&h->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (rc != 0) {
		errno = ENOMEM;
		return -1;
	}
	rc = pthread_create(&h->thread, NULL, thread_main, h);
	if (rc != 0) {
		pthread_cond_destroy(&h->wake);
		errno = rc == EAGAIN ? EAGAIN : ENOMEM;
		return -1;
	}
	h->has_thread = true;
	return 0;
}

static void thread_stop(kvs_hiradix_t *h)
{
	if (!h->has_thread)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_signal(&h->wake);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->wake);
	h->has_thread = false;
}

/* ------------------------------------------------------------ API */

/**
 * kvs_hiradix_attr_init() - defaults: write through, selective threshold 2,
 * a load back threshold of 10 tokens (SGLang's load_back_threshold).
 * @attr: attributes.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hiradix_attr_init(kvs_hiradix_attr_t *attr)
{
	if (!attr) {
		errno = EINVAL;
		return -1;
	}
	memset(attr, 0, sizeof(*attr));
	attr->write_policy = KVS_WRITE_THROUGH;
	attr->hit_threshold = 2;
	attr->load_back_threshold = 10;
	attr->poll_us = 1000;
	return 0;
}

/**
 * kvs_hiradix_create() - a hierarchical radix cache over @pool and @hp.
 * @pool: the device pool.
 * @hp: a host pool created over @pool.
 * @attr: attributes, or NULL for the defaults.
 *
 * Context: any thread.
 * Return: the cache, or NULL with errno EINVAL or ENOMEM.
 */
KVS_EXPORT kvs_hiradix_t *kvs_hiradix_create(kvs_pool_t *pool, kvs_hpool_t *hp,
					     const kvs_hiradix_attr_t *attr)
{
	kvs_hiradix_attr_t def;
	kvs_hiradix_t *h;

	if (!attr) {
		kvs_hiradix_attr_init(&def);
		attr = &def;
	}
	if (!pool || !hp || kvs_hpool_pool(hp) != pool || attr->write_policy > KVS_WRITE_BACK ||
	    (attr->write_policy == KVS_WRITE_THROUGH_SELECTIVE && attr->hit_threshold == 0) ||
	    (attr->flags & ~(uint32_t)(KVS_HIRADIX_DEFER | KVS_HIRADIX_THREAD |
				       KVS_HIRADIX_REMAT_HIT | KVS_HIRADIX_QUOTA_CHAIN)) ||
	    ((attr->flags & KVS_HIRADIX_THREAD) && attr->poll_us == 0)) {
		errno = EINVAL;
		return NULL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		errno = ENOMEM;
		return NULL;
	}
	h->l3q_tail = &h->l3q;
	h->pfq_tail = &h->pfq;
	if (pthread_mutex_init(&h->lock, NULL) != 0) {
		free(h);
		errno = ENOMEM;
		return NULL;
	}
	h->pool = pool;
	h->hp = hp;
	h->ps = kvs_pool_page_size(pool);
	h->slab = kvs_pool_slab(pool);
	h->cap = kvs_pool_capacity(pool);
	h->held = calloc((h->cap / h->ps + 63) / 64 + 1, sizeof(uint64_t));
	h->seen = calloc((h->cap / h->ps + 63) / 64 + 1, sizeof(uint64_t));
	if (!h->slab || !h->held || !h->seen) {
		free(h->held);
		free(h->seen);
		pthread_mutex_destroy(&h->lock);
		free(h);
		errno = ENOMEM;
		return NULL;
	}
	h->policy = attr->write_policy;
	h->threshold = attr->write_policy == KVS_WRITE_THROUGH ? 1 : attr->hit_threshold;
	h->lb_threshold = attr->load_back_threshold;
	h->flags = attr->flags;
	h->poll_us = attr->poll_us;
	h->agree = attr->agree;
	h->agree_arg = attr->agree_arg;
	h->sink.cb = attr->event_cb;
	h->sink.arg = attr->event_arg;
	h->sink.ps = h->ps;
	h->root.tree = h;
	h->root.on_dev = true;
	h->root.host_ok = true;
	h->root.dk.idx = h->root.hk.idx = -1;
	evict_heap_init(&h->dheap, KVS_EVICT_LRU);
	evict_heap_init(&h->hheap, KVS_EVICT_LRU);
	if ((h->flags & KVS_HIRADIX_THREAD) && thread_start(h) < 0) {
		pthread_mutex_destroy(&h->lock);
		free(h->held);
		free(h->seen);
		free(h);
		return NULL;
	}
	return h;
}

static void free_tree(kvs_hiradix_t *h, node_t *x)
{
	node_t *c, *n;

	for (c = x->child; c; c = n) {
		n = c->next;
		free_tree(h, c);
	}
	if (x == &h->root)
		return;
	if (x->on_dev)
		kvs_pool_free(h->pool, x->len, x->locs);
	if (x->host)
		kvs_hpool_free(h->hp, x->len / h->ps, x->host);
	node_free(h, x);
}

/**
 * kvs_hiradix_destroy() - wait for every transfer in flight, give every
 * device page back to the pool and every host page to the host pool, and
 * free the cache.
 * @h: cache, or NULL.
 *
 * Context: no other call on @h, now or later.
 * Return: 0.
 */
KVS_EXPORT int kvs_hiradix_destroy(kvs_hiradix_t *h)
{
	struct hbatch *b;

	if (!h)
		return 0;
	thread_stop(h);
	l3_stop(h);
	unhand(h);
	(void)submit_writes(h);
	(void)submit_loads(h);
	h->last_load = NULL;
	while (h->loads)
		settle_load(h, h->loads->last);
	while (h->backups)
		settle(h, h->backups);
	/* Batches whose every node was dropped: wait, then free. */
	while ((b = h->wacks)) {
		batch_wait(h, b, false);
		batch_check(h, b);
	}
	while ((b = h->lacks)) {
		batch_wait(h, b, true);
		batch_check(h, b);
	}
	free_tree(h, &h->root);
	evict_heap_free(&h->dheap);
	evict_heap_free(&h->hheap);
	pthread_mutex_destroy(&h->lock);
	free(h->held);
	free(h->seen);
	free(h);
	return 0;
}

static ssize_t match_impl(kvs_hiradix_t *h, const int32_t *key, size_t n, int32_t *locs,
			  kvs_hiradix_match_t *m, bool lock)
{
	node_t *x, *y, *z, *c;
	size_t pos, dev = 0, hit = 0;

	if (!h || (n && !key)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	n -= n % h->ps;
	x = walk(h, key, n, &pos);
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
			c = find_child(h, c, key + pos);
			memcpy(locs + pos, c->locs, c->len * sizeof(int32_t));
			pos += c->len;
		}
	}
	for (c = y; c != &h->root; c = c->parent)
		dev += c->len;
	if (lock)
		ulock_path(h, x, 1);
	ST(h, matches, 1);
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
	return match_impl(h, key, n, locs, m, false);
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
	return match_impl(h, key, n, locs, m, true);
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

static ssize_t insert_impl(kvs_hiradix_t *h, const int32_t *key, size_t n, const int32_t *locs,
			   kvs_hiradix_node_t **last, bool lock)
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
	x = walk(h, key, n, &pos);
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
		nn = node_new(h, n - pos);
		if (!nn)
			goto nomem;
		memcpy(nn->key, key + pos, (n - pos) * sizeof(int32_t));
		memcpy(nn->locs, locs + pos, (n - pos) * sizeof(int32_t));
	}
	/* Nothing can fail from here on. */
	for (c = &h->root, p = 0; c != x;) {
		c = find_child(h, c, key + p);
		if (c->on_dev) {
			if (!seen_tomb)
				ret += (ssize_t)c->len;
		} else {
			seen_tomb = true;
			memcpy(c->locs, locs + p, c->len * sizeof(int32_t));
			set_dev(h, c, true);
			node_events(h, c, KVS_KV_STORED, KVS_MEDIUM_GPU);
			ST(h, remat_tokens, c->len);
			/* Recomputed, not hit (SGLang's _insert_helper). */
			if (!(h->flags & KVS_HIRADIX_REMAT_HIT)) {
				p += c->len;
				continue;
			}
		}
		p += c->len;
		inc_hit(h, c);
	}
	if (nn) {
		nn->on_dev = true;
		held_mark(h, nn, true);
		touch(h, nn);
		child_add(x, nn);
		acct(h, nn, 1);
		node_hash(h, nn);
		node_keys(h, nn);
		node_events(h, nn, KVS_KV_STORED, KVS_MEDIUM_GPU);
		leaf_update(h, nn);
		leaf_update(h, x);
		inc_hit(h, nn);
		x = nn;
	}
	flush(h);
	if (lock && x != &h->root)
		ulock_path(h, x, 1);
	if (last)
		*last = x == &h->root ? NULL : x;
	ST(h, inserts, 1);
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
	return insert_impl(h, key, n, locs, last, false);
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
	return insert_impl(h, key, n, locs, last, true);
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
	ssize_t r;

	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	poll_locked(h, false);
	r = evict_device(h, tokens);
	pthread_mutex_unlock(&h->lock);
	return r;
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
	ssize_t r;

	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	poll_locked(h, false);
	r = evict_host(h, tokens);
	pthread_mutex_unlock(&h->lock);
	return r;
}

/* Cut the chain of tombstones ending at @node so that it holds its first
 * @want tokens only (top down), splitting a node; the new last node, or
 * NULL with errno ENOMEM. */
static node_t *chain_cut(kvs_hiradix_t *h, node_t *node, size_t total, size_t want)
{
	size_t end = total;
	node_t *y;

	for (y = node;; y = y->parent) {
		size_t start = end - y->len;

		if (start < want)
			return want - start < y->len ? split(h, y, want - start) : y;
		end = start;
	}
}

/**
 * kvs_hiradix_load_back() - bring the tombstones ending at @node back to
 * the device.
 * @h: cache.
 * @node: the last node of a match (kvs_hiradix_match_t.last_node).
 * @quota: the most device tokens the load may take from what the caller
 *         could still use (0: no limit): the chain's tokens plus those of
 *         its anchor's path that the load locks anew (unlocked device
 *         nodes, evictable until now), as SGLang's mem_quota + delta; the
 *         chain's alone with KVS_HIRADIX_QUOTA_CHAIN.
 * @locs: receives the new device locations, top node first (room for
 *        the match's host_hit), or NULL.
 * @xfer: receives the transfer, to wait on per layer with
 *        kvs_hpool_xfer_layer_wait(); NULL when nothing was loaded or
 *        under KVS_HIRADIX_DEFER (kvs_hiradix_submit() starts the load and
 *        hands out the transfer).  It stays valid until the caller's next
 *        kvs_hiradix_poll() or kvs_hiradix_submit(), or kvs_hiradix_destroy().
 *
 * All or nothing: device pages for the whole chain (evicting device leaves
 * if the pool is short), or none.  With an agree hook, the ranks first
 * agree on the tokens to load (KVS_AGREE_LOAD: the hook is called on every
 * call, with the chain's tokens, 0 included); fewer agreed loads the chain's
 * top part only, splitting a node where it ends.  The chain and its anchor
 * stay locked until the copy is seen complete; a copy that fails makes the
 * chain tombstones again.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: the tokens being loaded, 0 when there is nothing to load or it is
 * below the load back threshold or over @quota; or -1 with errno EINVAL,
 * ENOMEM, or the driver's (nothing loaded).
 */
KVS_EXPORT ssize_t kvs_hiradix_load_back(kvs_hiradix_t *h, kvs_hiradix_node_t *node, size_t quota,
					 int32_t *locs, kvs_hpool_xfer_t **xfer)
{
	int32_t *dloc = NULL;
	struct hload *ld = NULL;
	size_t total = 0, p, k, newly = 0;
	node_t *y, *top = NULL;
	int rc;

	if (!h || !node || !xfer || node->tree != h) {
		errno = EINVAL;
		return -1;
	}
	*xfer = NULL;
	pthread_mutex_lock(&h->lock);
	for (y = node; y != &h->root && !y->on_dev; y = y->parent)
		total += y->len;
	if (h->agree) {
		uint64_t a = h->agree(h->agree_arg, KVS_AGREE_LOAD, total);

		if (a < total) {
			a -= a % h->ps;
			if (a == 0) {
				total = 0;
			} else {
				node = chain_cut(h, node, total, a);
				if (!node) {
					rc = ENOMEM;
					goto out;
				}
				total = a;
			}
		}
	}
	/* The anchor's tokens this load would lock anew count against the
	 * quota (SGLang's mem_quota + delta of inc_lock_ref()). */
	if (!(h->flags & KVS_HIRADIX_QUOTA_CHAIN))
		for (y = node; y != &h->root; y = y->parent)
			if (y->on_dev && y->lock_ref == 0)
				newly += y->len;
	if (total == 0 || total < h->lb_threshold || (quota && total + newly > quota)) {
		if (total)
			ST(h, load_skipped, 1);
		pthread_mutex_unlock(&h->lock);
		return 0;
	}
	for (top = node, p = top->len; p < total; p += top->len)
		top = top->parent;
	ld = calloc(1, sizeof(*ld));
	dloc = malloc(total * sizeof(int32_t));
	if (ld) {
		ld->np = total / h->ps;
		ld->dev = malloc(ld->np * sizeof(int32_t));
		ld->host = malloc(ld->np * sizeof(int32_t));
	}
	if (!ld || !dloc || !ld->dev || !ld->host) {
		rc = ENOMEM;
		goto out;
	}
	lock_path(h, node, 1);
	if (kvs_pool_alloc(h->pool, total, dloc) < 0) {
		evict_device(h, total);
		if (kvs_pool_alloc(h->pool, total, dloc) < 0) {
			rc = errno;
			lock_path(h, node, -1);
			goto out;
		}
	}
	/* Top down: the chain's host pages in order. */
	pages_of(h, dloc, total, ld->dev);
	p = total;
	for (y = node; y != top->parent; y = y->parent) {
		p -= y->len;
		k = p / h->ps;
		memcpy(ld->host + k, y->host, y->len / h->ps * sizeof(int32_t));
		memcpy(y->locs, dloc + p, y->len * sizeof(int32_t));
		y->ld = ld;
		set_dev(h, y, true);
	}
	ld->bt = &h->lq;
	ld->top = top;
	ld->last = node;
	ld->next = h->loads;
	if (h->loads)
		h->loads->prev = ld;
	h->loads = ld;
	if (!(h->flags & KVS_HIRADIX_DEFER)) {
		if (submit_loads(h) < 0) {
			/* Undone by submit_loads(): tombstones again. */
			rc = errno;
			ST(h, load_fail, -1);
			ld = NULL;
			goto out;
		}
		*xfer = hand(h);
	}
	ST(h, load_backs, 1);
	ST(h, load_tokens, total);
	if (locs)
		memcpy(locs, dloc, total * sizeof(int32_t));
	free(dloc);
	pthread_mutex_unlock(&h->lock);
	return (ssize_t)total;
out:
	pthread_mutex_unlock(&h->lock);
	if (ld) {
		free(ld->dev);
		free(ld->host);
	}
	free(ld);
	free(dloc);
	errno = rc;
	return -1;
}

/**
 * kvs_hiradix_submit() - start every queued copy: the backups queued since
 * the last submission as one transfer, the loads back as another.
 * @h: cache.
 * @load_xfer: receives the loads' transfer, to wait on per layer with
 *             kvs_hpool_xfer_layer_wait() before the forward pass reads
 *             each layer (NULL: no load was queued), or NULL.  It stays
 *             valid until the caller's next kvs_hiradix_poll() or
 *             kvs_hiradix_submit(), or kvs_hiradix_destroy().
 *
 * Without KVS_HIRADIX_DEFER every call submits its own copies and this
 * finds nothing queued.  A batch that cannot be submitted is undone: its
 * backups are dropped (counted in backup_fail), its loads make their chains
 * tombstones again (load_fail), and the locations kvs_hiradix_load_back()
 * returned for them no longer hold data: the requests that took them must
 * compute those tokens (as after a load whose copy failed).
 *
 * Context: MT-Safe (takes h->lock); never waits.
 * Return: 0, or -1 with errno EINVAL, ENOMEM or the driver's (the other
 * batch is still submitted).
 */
KVS_EXPORT int kvs_hiradix_submit(kvs_hiradix_t *h, kvs_hpool_xfer_t **load_xfer)
{
	int rc = 0, err = 0;

	if (load_xfer)
		*load_xfer = NULL;
	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	unhand(h);
	if (submit_writes(h) < 0) {
		rc = -1;
		err = errno;
	}
	if (submit_loads(h) < 0) {
		rc = -1;
		err = errno;
	}
	if (load_xfer)
		*load_xfer = hand(h);
	else
		h->last_load = NULL;
	pthread_mutex_unlock(&h->lock);
	if (rc)
		errno = err;
	return rc;
}

/**
 * kvs_hiradix_poll() - take in the transfers that completed: host copies
 * become valid (or, failed, are dropped with their descendants'), loads
 * back unlock their chain (or, failed, leave it tombstones).  Under
 * KVS_HIRADIX_DEFER, first submits the queued backups (not the loads:
 * kvs_hiradix_submit() hands out their transfer).
 * @h: cache.
 *
 * Backup batches are taken in submission order; with an agree hook, only
 * as many as every rank has complete (KVS_AGREE_WRITE_ACKS, asked on every
 * call): every rank then marks the same nodes backed up.  The load
 * transfers handed out before this call may be freed by it.
 *
 * Context: MT-Safe (takes h->lock); never waits.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hiradix_poll(kvs_hiradix_t *h)
{
	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	poll_locked(h, true);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/**
 * kvs_hiradix_root() - the root node (locking it is a no-op).
 * @h: cache.
 *
 * Context: any thread.
 * Return: the root, or NULL with errno EINVAL.
 */
KVS_EXPORT kvs_hiradix_node_t *kvs_hiradix_root(kvs_hiradix_t *h)
{
	if (!h) {
		errno = EINVAL;
		return NULL;
	}
	return &h->root;
}

/**
 * kvs_hiradix_pool() - the device pool @h was created over.
 * @h: cache.
 *
 * Context: any thread.
 * Return: the pool, or NULL with errno EINVAL.
 */
KVS_EXPORT kvs_pool_t *kvs_hiradix_pool(const kvs_hiradix_t *h)
{
	if (!h) {
		errno = EINVAL;
		return NULL;
	}
	return h->pool;
}

/**
 * kvs_hiradix_node_info() - the state of @node.
 * @h: cache.
 * @node: a node of @h.
 * @info: receives it.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: 0, or -1 with errno EINVAL (NULL, or a node of another cache).
 */
KVS_EXPORT int kvs_hiradix_node_info(kvs_hiradix_t *h, const kvs_hiradix_node_t *node,
				     kvs_hiradix_node_info_t *info)
{
	if (!h || !node || !info || node->tree != h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	memset(info, 0, sizeof(*info));
	info->tokens = node->len;
	info->on_device = node->on_dev;
	info->on_host = node->host_ok;
	info->backup_pending = node->host && !node->host_ok;
	info->loading = node->ld != NULL;
	info->lock_ref = node->lock_ref;
	info->hit_count = node->hit_count;
	pthread_mutex_unlock(&h->lock);
	return 0;
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

/**
 * kvs_hiradix_usage() - what the cache holds (gauges kept as it changes).
 * @h: cache.
 * @u: receives it.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hiradix_usage(kvs_hiradix_t *h, kvs_hiradix_usage_t *u)
{
	const node_t *x;
	const struct hload *ld;

	if (!h || !u) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	*u = h->use;
	for (x = h->backups; x; x = x->bnext)
		u->backups_pending++;
	for (ld = h->loads; ld; ld = ld->next)
		u->loads_pending++;
	pthread_mutex_unlock(&h->lock);
	return 0;
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
	sum += x->ulock - usum + (x->bt != NULL);
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
		if (!member_ok(&h->dheap, c, &c->dk, is_dleaf(h, c)) ||
		    !member_ok(&h->hheap, c, &c->hk, is_hleaf(h, c)))
			return false;
		v->nn++;
		v->nd += c->dk.idx >= 0;
		v->nh += c->hk.idx >= 0;
		v->nb += c->bt != NULL;
		if (c->prev ? c->prev->next != c : x->child != c)
			return false;
		if (!validate_walk(h, c, v))
			return false;
	}
	return nc == x->nchildren && ndev == x->ndev;
}

/**
 * kvs_hiradix_validate() - check the tree's invariants: device and host
 * copies form prefixes from the root, every node is on the device or a
 * valid tombstone, child counts, locks (each lock_ref the sum of the
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
