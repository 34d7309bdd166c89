/* SPDX-License-Identifier: MIT */
/*
 * lib/radix.c - the radix-tree prefix cache (SGLang's RadixCache).
 *
 * What it owns.  A tree whose edges are runs of token ids and whose nodes
 * hold, for each token, its KV location in a kvs_pool.  The tree holds one
 * pool reference on every page it stores and drops it when it evicts the
 * node.  Matching and insertion work in whole pages: keys are cut to a
 * multiple of page_size, a node's length is a multiple of page_size, and a
 * node's children are told apart by their first page (and the request's
 * extra key: requests with different extra keys never share a node).
 *
 * Data structures.  A node's tokens and locations live in one immutable
 * segment (struct rseg); its children in one immutable array sorted by a
 * 64-bit hash of (extra key, first page) (struct rkids).  Changing either
 * means building a new one, publishing it with one pointer store, and
 * retiring the old one through call_rcu.  Leaves that may be evicted
 * (lock_ref 0, no children) sit in a binary heap ordered by the policy
 * (LRU: last access; LFU: hits, then last access; FIFO: creation; priority:
 * priority, then last access), kept up to date on every change, so
 * eviction never walks the tree.  Time is a logical clock, one tick per
 * match or insert.
 *
 * Concurrency (the library's lock order is in common/common.h).
 * Writers (match, insert, lock, unlock, evict) are serialized by r->wlock.
 * kvs_radix_match_ro() takes no lock: it runs inside an RCU
 * read-side critical section (liburcu, bulletproof flavour: no thread
 * registration), so nothing it can reach is freed under it, and validates
 * its whole walk against a sequence count that the writer makes odd while
 * it changes the tree.  RCU alone would not do: a split gives an existing
 * node a shorter segment before its new parent is published, and a reader
 * that came through the old edge would match the shorter segment at the
 * wrong depth (whatever the order of the stores).  As the
 * SLAB_TYPESAFE_BY_RCU warning says, RCU keeps the
 * memory valid, not the meaning: the reader re-checks with the sequence
 * count and starts over if the tree changed during its walk, so it never
 * returns a torn result.  A reader that has started over RO_TRIES times
 * reads once under wlock instead, so a stream of writes cannot starve it;
 * writers never wait for readers, and keep their write sections short:
 * evicted locations are freed and KV events delivered after the sequence
 * count is even again (still under wlock), so an event callback may call
 * kvs_radix_match_ro() but no writer call.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <urcu-bp.h>

#include "internal.h"
#include "kvslab/radix.h"

struct rseg {
	uint32_t len;
	int32_t *vals;			/* points after keys[] */
	struct rcu_head rcu;
	int32_t keys[];
};

struct kid {
	uint64_t h;
	struct rnode *node;
};

struct rkids {
	uint32_t n;
	struct rcu_head rcu;
	struct kid e[];
};

struct rnode {
	struct rseg *_Atomic seg;
	struct rkids *_Atomic kids;
	/* Writer-only from here on. */
	struct rnode *parent;
	uint64_t extra;
	uint64_t h;			/* hash of (extra, first page): parent's key */
	uint32_t lock_ref;
	int32_t priority;
	uint64_t last_access, hits, created;
	int64_t heap_idx;		/* -1: not in the heap */
	uint64_t last_hash;		/* chained hash of the last page (events) */
	uint64_t gone_parent_hash;	/* evicted: the parent's last_hash */
	struct rnode *gone_next;	/* evicted: the call's list, freed after the write */
	struct rcu_head rcu;
};

struct kvs_radix {
	kvs_pool_t *pool;
	uint32_t ps;
	int policy, disabled;
	kvs_kv_event_cb event_cb;
	void *event_arg;
	void (*free_cb)(void *arg, const int32_t *locs, size_t n);
	void *free_arg;

	pthread_mutex_t wlock;
	_Atomic uint64_t seq;		/* odd while the writer changes the tree */
	struct rnode *root;
	uint64_t clock;
	uint64_t evictable, protected_, total, nnodes;
	struct rnode **heap;
	size_t heap_n, heap_cap;
};

/* ---------------------------------------------------------------- hashing */

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static uint64_t hash_page(uint64_t seed, const int32_t *t, uint32_t n)
{
	uint64_t h = mix64(seed ^ 0x9e3779b97f4a7c15ULL);
	uint32_t i;

	for (i = 0; i < n; i++)
		h = mix64(h ^ ((uint64_t)(uint32_t)t[i] + ((uint64_t)i << 32)));
	return h;
}

/* The key of a child: its first page under its extra key. */
static inline uint64_t child_hash(const struct kvs_radix *r, uint64_t extra, const int32_t *t)
{
	return hash_page(extra, t, r->ps);
}

/* ------------------------------------------------------------ allocation */

static struct rseg *seg_new(uint32_t len, const int32_t *keys, const int32_t *vals)
{
	struct rseg *s = malloc(sizeof(*s) + 2 * (size_t)len * sizeof(int32_t));

	if (!s)
		return NULL;
	s->len = len;
	s->vals = s->keys + len;
	if (len) { /* the root's segment is empty and has no source */
		memcpy(s->keys, keys, len * sizeof(int32_t));
		memcpy(s->vals, vals, len * sizeof(int32_t));
	}
	return s;
}

static void free_seg_cb(struct rcu_head *h)
{
	free(caa_container_of(h, struct rseg, rcu));
}

static void free_kids_cb(struct rcu_head *h)
{
	free(caa_container_of(h, struct rkids, rcu));
}

static void free_node_cb(struct rcu_head *h)
{
	struct rnode *n = caa_container_of(h, struct rnode, rcu);

	free(atomic_load_explicit(&n->seg, memory_order_relaxed));
	free(atomic_load_explicit(&n->kids, memory_order_relaxed));
	free(n);
}

static inline struct rseg *seg_of(const struct rnode *n)
{
	return atomic_load_explicit(&((struct rnode *)n)->seg, memory_order_acquire);
}

static inline struct rkids *kids_of(const struct rnode *n)
{
	return atomic_load_explicit(&((struct rnode *)n)->kids, memory_order_acquire);
}

static inline uint32_t nkids(const struct rnode *n)
{
	struct rkids *k = kids_of(n);

	return k ? k->n : 0;
}

/* Find the child of @n whose first page is @t under @extra.  Safe for
 * readers (under RCU) and the writer. */
static struct rnode *find_child(const struct kvs_radix *r, const struct rnode *n, uint64_t extra,
				const int32_t *t)
{
	struct rkids *k = kids_of(n);
	uint64_t h;
	uint32_t lo = 0, hi;

	if (!k)
		return NULL;
	h = child_hash(r, extra, t);
	hi = k->n;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (k->e[mid].h < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < k->n && k->e[lo].h == h; lo++) {
		struct rnode *c = k->e[lo].node;
		struct rseg *s = seg_of(c);

		if (c->extra == extra && s->len >= r->ps &&
		    memcmp(s->keys, t, r->ps * sizeof(int32_t)) == 0)
			return c;
	}
	return NULL;
}

/* Replace the children array of @n with a copy changed by adding @add (if
 * not NULL), removing @del (if not NULL), or swapping @del for @add. */
static int kids_update(struct rnode *n, struct rnode *add, struct rnode *del)
{
	struct rkids *old = kids_of(n), *nw;
	uint32_t on = old ? old->n : 0, nn = on + (add != NULL) - (del != NULL), i, j = 0;
	bool placed = add == NULL;

	if (nn == 0) {
		atomic_store_explicit(&n->kids, NULL, memory_order_release);
		goto retire;
	}
	nw = malloc(sizeof(*nw) + nn * sizeof(nw->e[0]));
	if (!nw)
		return -1;
	for (i = 0; i < on; i++) {
		if (old->e[i].node == del)
			continue;
		if (!placed && add->h < old->e[i].h) {
			nw->e[j].h = add->h;
			nw->e[j++].node = add;
			placed = true;
		}
		nw->e[j++] = old->e[i];
	}
	if (!placed) {
		nw->e[j].h = add->h;
		nw->e[j++].node = add;
	}
	nw->n = j;
	atomic_store_explicit(&n->kids, nw, memory_order_release);
retire:
	if (old)
		call_rcu(&old->rcu, free_kids_cb);
	return 0;
}

/* ------------------------------------------------------------------ heap */

static bool before(const struct kvs_radix *r, const struct rnode *a, const struct rnode *b)
{
	switch (r->policy) {
	case KVS_EVICT_LFU:
		if (a->hits != b->hits)
			return a->hits < b->hits;
		break;
	case KVS_EVICT_FIFO:
		return a->created < b->created;
	case KVS_EVICT_PRIORITY:
		if (a->priority != b->priority)
			return a->priority < b->priority;
		break;
	default:
		break;
	}
	return a->last_access < b->last_access;
}

static void heap_set(struct kvs_radix *r, size_t i, struct rnode *n)
{
	r->heap[i] = n;
	n->heap_idx = (int64_t)i;
}

static void heap_up(struct kvs_radix *r, size_t i)
{
	struct rnode *n = r->heap[i];

	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (!before(r, n, r->heap[p]))
			break;
		heap_set(r, i, r->heap[p]);
		i = p;
	}
	heap_set(r, i, n);
}

static void heap_down(struct kvs_radix *r, size_t i)
{
	struct rnode *n = r->heap[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= r->heap_n)
			break;
		if (c + 1 < r->heap_n && before(r, r->heap[c + 1], r->heap[c]))
			c++;
		if (!before(r, r->heap[c], n))
			break;
		heap_set(r, i, r->heap[c]);
		i = c;
	}
	heap_set(r, i, n);
}

static int heap_push(struct kvs_radix *r, struct rnode *n)
{
	if (r->heap_n == r->heap_cap) {
		size_t cap = r->heap_cap ? 2 * r->heap_cap : 256;
		struct rnode **h = realloc(r->heap, cap * sizeof(*h));

		if (!h)
			return -1;
		r->heap = h;
		r->heap_cap = cap;
	}
	heap_set(r, r->heap_n++, n);
	heap_up(r, r->heap_n - 1);
	return 0;
}

static void heap_remove(struct kvs_radix *r, struct rnode *n)
{
	size_t i = (size_t)n->heap_idx;
	struct rnode *moved;

	n->heap_idx = -1;
	if (--r->heap_n == i)
		return;
	moved = r->heap[r->heap_n];
	heap_set(r, i, moved);
	heap_down(r, i);
	heap_up(r, (size_t)moved->heap_idx);
}

/* Put @n in the heap or take it out as its evictability says; keep its place
 * right after its key changed. */
static void heap_fix(struct kvs_radix *r, struct rnode *n)
{
	bool want = n != r->root && n->lock_ref == 0 && nkids(n) == 0;

	if (want && n->heap_idx < 0) {
		if (heap_push(r, n) < 0)
			return; /* out of memory: the node is just not evictable yet */
	} else if (!want && n->heap_idx >= 0) {
		heap_remove(r, n);
	} else if (want) {
		heap_down(r, (size_t)n->heap_idx);
		heap_up(r, (size_t)n->heap_idx);
	}
}

/* ---------------------------------------------------------------- events */

/* Chained hashes of the pages of @s after a parent whose last page hashed
 * to @h; emits one event per page when @type is set.  Returns the last. */
static uint64_t chain(struct kvs_radix *r, uint64_t h, uint64_t extra, const struct rseg *s,
		      uint32_t from, uint32_t to, int type)
{
	uint32_t i;

	for (i = from; i < to; i += r->ps) {
		uint64_t nh = hash_page(h ? h : mix64(extra + 1), s->keys + i, r->ps);

		if (type && r->event_cb) {
			kvs_kv_event_t ev = {.type = type,
					     .hash = nh,
					     .parent_hash = h,
					     .tokens = r->ps,
					     .extra_key = extra};

			r->event_cb(r->event_arg, &ev);
		}
		h = nh;
	}
	return h;
}

/* ------------------------------------------------------------ the writer */

static inline void write_begin(struct kvs_radix *r)
{
	uint64_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);

	atomic_store_explicit(&r->seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static inline void write_end(struct kvs_radix *r)
{
	uint64_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);

	atomic_store_explicit(&r->seq, s + 1, memory_order_release);
}

static struct rnode *node_new(struct kvs_radix *r, struct rnode *parent, uint64_t extra,
			      struct rseg *seg)
{
	struct rnode *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	atomic_store_explicit(&n->seg, seg, memory_order_relaxed);
	n->parent = parent;
	n->extra = extra;
	n->h = seg->len ? child_hash(r, extra, seg->keys) : 0;
	n->heap_idx = -1;
	n->created = n->last_access = r->clock;
	r->nnodes++;
	return n;
}

/*
 * Split @c at @m tokens: a new node takes the first @m tokens and becomes
 * @c's parent.  The new node takes @c's lock count and times, as SGLang's
 * _split_node does, so the sizes and the locks on the path stay exact.
 */
static struct rnode *split(struct kvs_radix *r, struct rnode *c, uint32_t m)
{
	struct rseg *old = seg_of(c), *top, *rest;
	struct rnode *n;
	uint64_t old_h;

	top = seg_new(m, old->keys, old->vals);
	rest = seg_new(old->len - m, old->keys + m, old->vals + m);
	n = top && rest ? node_new(r, c->parent, c->extra, top) : NULL;
	if (!n) {
		free(top);
		free(rest);
		return NULL;
	}
	old_h = c->h;
	n->lock_ref = c->lock_ref;
	n->priority = c->priority;
	n->last_access = c->last_access;
	n->hits = c->hits;
	n->created = c->created;
	if (r->event_cb)
		n->last_hash = chain(r, c->parent == r->root ? 0 : c->parent->last_hash, c->extra,
				     top, 0, m, 0);
	/* Publish the new node's children, then the new node in place of @c,
	 * then @c's shorter segment.  No order is safe for a reader on its own:
	 * readers that overlap any of it are sent back by the sequence count. */
	c->h = child_hash(r, c->extra, rest->keys);
	if (kids_update(n, c, NULL) < 0) {
		c->h = old_h;
		free(top);
		free(rest);
		free(n);
		r->nnodes--;
		return NULL;
	}
	/* The parent's entry keeps its hash: @n starts with the same page. */
	if (kids_update(c->parent, n, c) < 0) {
		c->h = old_h;
		free(atomic_load_explicit(&n->kids, memory_order_relaxed));
		free(top);
		free(rest);
		free(n);
		r->nnodes--;
		return NULL;
	}
	c->parent = n;
	atomic_store_explicit(&c->seg, rest, memory_order_release);
	call_rcu(&old->rcu, free_seg_cb);
	return n;
}

static void touch(struct kvs_radix *r, struct rnode *n, int priority)
{
	n->last_access = r->clock;
	n->hits++;
	if (priority > n->priority)
		n->priority = priority;
	if (n->heap_idx >= 0)
		heap_fix(r, n);
}

/* Tokens two keys share, page-aligned down.  Compares 32 bytes a step:
 * keys run to tens of thousands of tokens and this is most of a match. */
static inline uint32_t common_prefix(const int32_t *a, const int32_t *b, uint32_t n, uint32_t ps)
{
	uint32_t i = 0;

	while (i + 8 <= n) {
		uint64_t x[4], y[4];

		memcpy(x, a + i, sizeof(x));
		memcpy(y, b + i, sizeof(y));
		if (((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3])) != 0)
			break;
		i += 8;
	}
	while (i < n && a[i] == b[i])
		i++;
	return i / ps * ps;
}

/* How many leading tokens of @key (of which @left remain) the segment @s
 * matches, in whole pages. */
static inline uint32_t edge_match(const struct kvs_radix *r, const struct rseg *s,
				  const int32_t *key, size_t left)
{
	return common_prefix(s->keys, key, (uint32_t)(left < s->len ? left : s->len), r->ps);
}

/**
 * kvs_radix_attr_init() - defaults: the pool's page size, LRU, enabled, no
 * events.
 * @attr: attributes.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_radix_attr_init(kvs_radix_attr_t *attr)
{
	if (!attr)
		return kvs_fail(EINVAL);
	memset(attr, 0, sizeof(*attr));
	attr->policy = KVS_EVICT_LRU;
	return 0;
}

/**
 * kvs_radix_create() - create an empty prefix cache over @pool.
 * @pool: the KV pool whose locations the tree stores and frees on eviction;
 *        may be NULL when @attr gives free_cb and page_size.
 * @attr: attributes, or NULL for the defaults.
 *
 * Context: MT-Safe.
 * Return: the cache, or NULL with errno EINVAL (page size not the pool's,
 * unknown policy) or ENOMEM.
 */
KVS_EXPORT kvs_radix_t *kvs_radix_create(kvs_pool_t *pool, const kvs_radix_attr_t *attr)
{
	kvs_radix_attr_t defaults;
	struct kvs_radix *r;
	struct rseg *empty;

	if (!attr) {
		kvs_radix_attr_init(&defaults);
		attr = &defaults;
	}
	if ((!pool && (!attr->free_cb || !attr->page_size)) || attr->policy < KVS_EVICT_LRU ||
	    attr->policy > KVS_EVICT_PRIORITY ||
	    (pool && attr->page_size && attr->page_size != kvs_pool_page_size(pool))) {
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	empty = seg_new(0, NULL, NULL);
	if (!r || !empty) {
		free(r);
		free(empty);
		errno = ENOMEM;
		return NULL;
	}
	r->pool = pool;
	r->ps = pool ? kvs_pool_page_size(pool) : attr->page_size;
	r->free_cb = attr->free_cb;
	r->free_arg = attr->free_arg;
	r->policy = attr->policy;
	r->disabled = attr->disabled;
	r->event_cb = attr->event_cb;
	r->event_arg = attr->event_arg;
	pthread_mutex_init(&r->wlock, NULL);
	r->root = node_new(r, NULL, 0, empty);
	if (!r->root) {
		pthread_mutex_destroy(&r->wlock);
		free(empty);
		free(r);
		errno = ENOMEM;
		return NULL;
	}
	r->nnodes = 0; /* the root is not counted */
	r->root->lock_ref = 1; /* never evicted */
	return r;
}

static void free_locs(struct kvs_radix *r, const int32_t *locs, size_t n)
{
	if (r->free_cb)
		r->free_cb(r->free_arg, locs, n);
	else
		kvs_pool_free(r->pool, n, locs);
}

static void free_subtree(struct kvs_radix *r, struct rnode *n)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);
	uint32_t i;

	if (k)
		for (i = 0; i < k->n; i++)
			free_subtree(r, k->e[i].node);
	if (s->len)
		free_locs(r, s->vals, s->len);
	free(s);
	free(k);
	free(n);
}

/**
 * kvs_radix_destroy() - free the tree and every location it holds.
 * @radix: cache, or NULL.
 *
 * Locks held by requests are ignored: their nodes go too.  Waits for
 * concurrent readers' grace period so nothing is freed under them.
 *
 * Context: MT-Unsafe: no other call on @radix may run or follow.
 * Return: 0.
 */
KVS_EXPORT int kvs_radix_destroy(kvs_radix_t *r)
{
	if (!r)
		return 0;
	synchronize_rcu();
	free_subtree(r, r->root);
	rcu_barrier(); /* retired segments and arrays are freed before we return */
	free(r->heap);
	pthread_mutex_destroy(&r->wlock);
	free(r);
	return 0;
}

/**
 * kvs_radix_match() - the longest cached prefix of @key.
 * @radix: cache.
 * @extra_key: the request's extra key (LoRA id, cache salt; 0 for none).
 * @key: token ids.
 * @n: tokens in @key; only whole pages are matched.
 * @locs: receives the locations of the matched tokens (room for @n).
 * @last: receives the node the match ends in (the root when nothing
 *        matched); pass it to kvs_radix_lock().  May be NULL.
 *
 * A match that ends inside a node splits the node there, so that @last
 * covers exactly the matched prefix.  Updates access times and hit counts
 * along the path.
 *
 * Context: MT-Safe (serialized with the other writers).
 * Return: tokens matched (a multiple of the page size), or -1 with errno
 * EINVAL or ENOMEM.
 */
KVS_EXPORT ssize_t kvs_radix_match(kvs_radix_t *r, uint64_t extra, const int32_t *key, size_t n,
				   int32_t *locs, kvs_radix_node_t **last)
{
	struct rnode *node;
	size_t pos = 0;

	if (!r || (!key && n) || (!locs && n))
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	node = r->root;
	if (r->disabled)
		goto out;
	n = n / r->ps * r->ps;
	r->clock++;
	write_begin(r);
	while (pos < n) {
		struct rnode *c = find_child(r, node, extra, key + pos);
		struct rseg *s;
		uint32_t m, len;

		if (!c)
			break;
		s = seg_of(c);
		len = s->len; /* @s is retired by a split: read it before */
		m = edge_match(r, s, key + pos, n - pos);
		if (m < len) {
			struct rnode *top = split(r, c, m);

			if (!top) {
				write_end(r);
				pthread_mutex_unlock(&r->wlock);
				return kvs_fail(ENOMEM);
			}
			c = top;
		}
		memcpy(locs + pos, seg_of(c)->vals, m * sizeof(int32_t));
		pos += m;
		touch(r, c, INT32_MIN);
		node = c;
		if (m < len)
			break;
	}
	write_end(r);
out:
	pthread_mutex_unlock(&r->wlock);
	if (last)
		*last = (kvs_radix_node_t *)node;
	return (ssize_t)pos;
}

/*
 * How many times a lock-free reader starts over before it reads under the
 * writer lock (Linux's read_seqbegin_or_lock does the same after one).
 */
#define RO_TRIES 256

/* One walk of kvs_radix_match_ro(): copies the matched locations. */
static size_t ro_walk(const struct kvs_radix *r, uint64_t extra, const int32_t *key, size_t n,
		      int32_t *locs)
{
	const struct rnode *node = r->root;
	size_t pos = 0;

	while (pos < n) {
		const struct rnode *c = find_child(r, node, extra, key + pos);
		const struct rseg *s;
		uint32_t m;

		if (!c)
			break;
		s = seg_of(c);
		m = edge_match(r, s, key + pos, n - pos);
		memcpy(locs + pos, s->vals, m * sizeof(int32_t));
		pos += m;
		if (m < s->len)
			break;
		node = c;
	}
	return pos;
}

/**
 * kvs_radix_match_ro() - the longest cached prefix, without changing the
 * tree: lock-free, for any number of threads beside the writer.
 * @radix: cache.
 * @extra_key: the request's extra key.
 * @key: token ids.
 * @n: tokens in @key.
 * @locs: receives the matched locations (room for @n).
 *
 * Neither splits nodes nor updates access times.  Runs under an RCU read
 * lock and starts over when a writer changed the tree meanwhile, so the
 * answer is a prefix that was cached, as a whole, at one moment; after
 * RO_TRIES attempts it reads under the writer lock.
 *
 * Context: MT-Safe, lock-free unless writers keep overlapping it; may be
 * called from any thread, including inside an event callback.
 * Return: tokens matched, or -1 with errno EINVAL.
 */
KVS_EXPORT ssize_t kvs_radix_match_ro(kvs_radix_t *r, uint64_t extra, const int32_t *key,
				      size_t n, int32_t *locs)
{
	size_t pos;
	uint64_t s1;
	unsigned int tries = 0;

	if (!r || (!key && n) || (!locs && n))
		return kvs_fail(EINVAL);
	if (r->disabled)
		return 0;
	n = n / r->ps * r->ps;
	rcu_read_lock();
	for (;;) {
		s1 = atomic_load_explicit(&r->seq, memory_order_acquire);
		if (!(s1 & 1)) {
			pos = ro_walk(r, extra, key, n, locs);
			atomic_thread_fence(memory_order_acquire);
			if (atomic_load_explicit(&r->seq, memory_order_relaxed) == s1)
				break;
		}
		/* A write is in progress or overlapped the walk.  Spin
		 * briefly, then let the writer's thread run (it may share our
		 * CPU); a reader that keeps losing to writers reads once under
		 * the writer lock, so that it cannot starve. */
		if (++tries == RO_TRIES) {
			pthread_mutex_lock(&r->wlock);
			pos = ro_walk(r, extra, key, n, locs);
			pthread_mutex_unlock(&r->wlock);
			break;
		}
		if (tries % 16 == 0)
			sched_yield();
		else
			caa_cpu_relax();
	}
	rcu_read_unlock();
	return (ssize_t)pos;
}

/**
 * kvs_radix_insert() - cache @key with its locations.
 * @radix: cache.
 * @extra_key: the request's extra key.
 * @key: token ids.
 * @n: tokens; only whole pages are inserted.
 * @locs: the KV locations of the tokens.  The tree takes over the caller's
 *        reference on the pages of the part it did not hold yet.
 * @priority: the request's priority (kept as the maximum on each node of
 *            the path; used by KVS_EVICT_PRIORITY).
 * @last: receives the node holding the last inserted token (may be NULL).
 *
 * Context: MT-Safe (serialized with the other writers).
 * Return: the number of leading tokens that were already cached: the
 * caller still owns locs[0 .. ret) and frees its duplicates; or -1 with
 * errno EINVAL or ENOMEM (nothing inserted).  A disabled cache keeps nothing
 * and returns the page-aligned length, so the caller frees everything.
 */
KVS_EXPORT ssize_t kvs_radix_insert(kvs_radix_t *r, uint64_t extra, const int32_t *key, size_t n,
				    const int32_t *locs, int priority, kvs_radix_node_t **last)
{
	struct rnode *node, *stored = NULL;
	uint64_t stored_from = 0;
	size_t pos = 0;

	if (!r || (!key && n) || (!locs && n) || n > UINT32_MAX)
		return kvs_fail(EINVAL);
	n = n / r->ps * r->ps;
	pthread_mutex_lock(&r->wlock);
	node = r->root;
	if (r->disabled) {
		pos = n;
		goto out;
	}
	r->clock++;
	write_begin(r);
	while (pos < n) {
		struct rnode *c = find_child(r, node, extra, key + pos);
		struct rseg *s;
		uint32_t m;

		if (!c)
			break;
		s = seg_of(c);
		m = edge_match(r, s, key + pos, n - pos);
		if (m < s->len) {
			c = split(r, c, m);
			if (!c)
				goto nomem;
		}
		touch(r, c, priority);
		pos += m;
		node = c;
	}
	if (pos < n) {
		struct rseg *s = seg_new((uint32_t)(n - pos), key + pos, locs + pos);
		struct rnode *leaf = s ? node_new(r, node, extra, s) : NULL;

		if (!leaf) {
			free(s);
			goto nomem;
		}
		leaf->priority = priority;
		if (kids_update(node, leaf, NULL) < 0) {
			free(s);
			free(leaf);
			r->nnodes--;
			goto nomem;
		}
		if (r->event_cb) {
			stored_from = node == r->root ? 0 : node->last_hash;
			stored = leaf;
			leaf->last_hash = chain(r, stored_from, extra, s, 0, s->len, 0);
		}
		r->evictable += s->len;
		r->total += s->len;
		heap_fix(r, node); /* no longer a leaf */
		heap_fix(r, leaf);
		node = leaf;
		n = pos; /* return what was there before */
	}
	write_end(r);
	if (stored) /* after the write: a callback may call kvs_radix_match_ro() */
		chain(r, stored_from, extra, seg_of(stored), 0, seg_of(stored)->len, KVS_KV_STORED);
out:
	pthread_mutex_unlock(&r->wlock);
	if (last)
		*last = (kvs_radix_node_t *)node;
	return (ssize_t)(r->disabled ? pos : n);
nomem:
	write_end(r);
	pthread_mutex_unlock(&r->wlock);
	return kvs_fail(ENOMEM);
}

/**
 * kvs_radix_lock() - protect @node and its ancestors from eviction.
 * @radix: cache.
 * @node: a node from kvs_radix_match() or kvs_radix_insert().
 *
 * Each lock needs one kvs_radix_unlock().  Keeps evictable and protected
 * token counts exact.
 *
 * Context: MT-Safe (serialized with the other writers).
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_radix_lock(kvs_radix_t *r, kvs_radix_node_t *node)
{
	struct rnode *n = (struct rnode *)node;

	if (!r || !n)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	for (; n && n != r->root; n = n->parent) {
		if (n->lock_ref++ == 0) {
			uint32_t len = seg_of(n)->len;

			r->evictable -= len;
			r->protected_ += len;
			heap_fix(r, n);
		}
	}
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

/**
 * kvs_radix_unlock() - undo one kvs_radix_lock().
 * @radix: cache.
 * @node: the node that was locked.
 *
 * Context: MT-Safe (serialized with the other writers).
 * Return: 0, or -1 with errno EINVAL (NULL, or a node not locked).
 */
KVS_EXPORT int kvs_radix_unlock(kvs_radix_t *r, kvs_radix_node_t *node)
{
	struct rnode *n = (struct rnode *)node, *p;

	if (!r || !n)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	for (p = n; p && p != r->root; p = p->parent) {
		if (p->lock_ref == 0) {
			pthread_mutex_unlock(&r->wlock);
			return kvs_fail(EINVAL);
		}
	}
	for (; n && n != r->root; n = n->parent) {
		if (--n->lock_ref == 0) {
			uint32_t len = seg_of(n)->len;

			r->evictable += len;
			r->protected_ -= len;
			heap_fix(r, n);
		}
	}
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

/**
 * kvs_radix_evict() - evict at least @tokens tokens, if that many are
 * evictable.
 * @radix: cache.
 * @tokens: tokens wanted.
 *
 * Takes the policy's first evictable leaf (lock_ref 0, no children),
 * frees its locations through the pool, and goes on; a parent left
 * childless and unlocked becomes a candidate in turn.
 *
 * Context: MT-Safe (serialized with the other writers).
 * Return: tokens evicted (may be less than asked), or -1 with errno EINVAL.
 */
KVS_EXPORT ssize_t kvs_radix_evict(kvs_radix_t *r, size_t tokens)
{
	size_t done = 0;

	if (!r)
		return kvs_fail(EINVAL);
	struct rnode *gone = NULL, **tail = &gone;

	pthread_mutex_lock(&r->wlock);
	write_begin(r);
	while (done < tokens && r->heap_n > 0) {
		struct rnode *leaf = r->heap[0], *parent = leaf->parent;
		struct rseg *s = seg_of(leaf);

		if (kids_update(parent, NULL, leaf) < 0)
			break;
		heap_remove(r, leaf);
		leaf->gone_parent_hash = parent == r->root ? 0 : parent->last_hash;
		leaf->gone_next = NULL;
		*tail = leaf;
		tail = &leaf->gone_next;
		done += s->len;
		r->evictable -= s->len;
		r->total -= s->len;
		r->nnodes--;
		heap_fix(r, parent);
	}
	write_end(r);
	/* Out of the write section, so readers are not held up by the pool
	 * and a callback may call kvs_radix_match_ro(). */
	while (gone) {
		struct rnode *leaf = gone;
		struct rseg *s = seg_of(leaf);

		gone = leaf->gone_next;
		if (r->event_cb)
			chain(r, leaf->gone_parent_hash, leaf->extra, s, 0, s->len, KVS_KV_REMOVED);
		free_locs(r, s->vals, s->len);
		call_rcu(&leaf->rcu, free_node_cb);
	}
	pthread_mutex_unlock(&r->wlock);
	return (ssize_t)done;
}

#define RADIX_GETTER(fn, field, doc)                                       \
	KVS_EXPORT uint64_t fn(kvs_radix_t *r)                             \
	{                                                                  \
		uint64_t v;                                                \
                                                                           \
		if (!r)                                                    \
			return 0;                                          \
		pthread_mutex_lock(&r->wlock);                             \
		v = r->field;                                              \
		pthread_mutex_unlock(&r->wlock);                           \
		return v;                                                  \
	}

/* kvs_radix_evictable() - tokens in unlocked nodes.  MT-Safe. */
RADIX_GETTER(kvs_radix_evictable, evictable, "")
/* kvs_radix_protected() - tokens in locked nodes.  MT-Safe. */
RADIX_GETTER(kvs_radix_protected, protected_, "")
/* kvs_radix_tokens() - tokens in the tree.  MT-Safe. */
RADIX_GETTER(kvs_radix_tokens, total, "")
/* kvs_radix_nodes() - nodes in the tree, the root not counted.  MT-Safe. */
RADIX_GETTER(kvs_radix_nodes, nnodes, "")

/**
 * kvs_radix_page_size() - tokens per page.
 * @radix: cache.
 *
 * Context: MT-Safe.
 * Return: the page size; 0 for NULL.
 */
KVS_EXPORT uint32_t kvs_radix_page_size(const kvs_radix_t *r)
{
	return r ? r->ps : 0;
}

/**
 * kvs_radix_disabled() - is this a disabled cache (the same API, nothing
 * cached)?
 * @radix: cache.
 *
 * Context: MT-Safe.
 * Return: 1 or 0; 0 for NULL.
 */
KVS_EXPORT int kvs_radix_disabled(const kvs_radix_t *r)
{
	return r ? r->disabled != 0 : 0;
}

/**
 * kvs_radix_root() - the root node (what a match of nothing returns).
 * @radix: cache.
 *
 * Context: MT-Safe.
 * Return: the root; NULL for NULL.
 */
KVS_EXPORT kvs_radix_node_t *kvs_radix_root(kvs_radix_t *r)
{
	return r ? (kvs_radix_node_t *)r->root : NULL;
}

struct vstate {
	uint64_t evictable, protected_, total, nodes, leaves;
	int bad;
};

static void validate_node(struct kvs_radix *r, struct rnode *n, uint32_t parent_lock,
			  struct vstate *v)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);
	uint32_t i;

	if (n != r->root) {
		v->nodes++;
		v->total += s->len;
		if (n->lock_ref)
			v->protected_ += s->len;
		else
			v->evictable += s->len;
		/* Values page-aligned: a page's tokens are consecutive locations. */
		if (s->len == 0 || s->len % r->ps)
			v->bad = 1;
		for (i = 0; r->pool && i < s->len && !v->bad; i++)
			if ((i % r->ps == 0 && s->vals[i] % (int32_t)r->ps) ||
			    (i % r->ps && s->vals[i] != s->vals[i - 1] + 1))
				v->bad = 1;
		/* A locked node has locked ancestors (locks go to the root). */
		if (n->lock_ref > parent_lock)
			v->bad = 1;
		if ((n->heap_idx >= 0) != (n->lock_ref == 0 && !k))
			v->bad = 1;
		if (n->lock_ref == 0 && !k)
			v->leaves++;
		if (n->heap_idx >= 0 && r->heap[n->heap_idx] != n)
			v->bad = 1;
		if (n->h != child_hash(r, n->extra, s->keys))
			v->bad = 1;
	}
	if (!k)
		return;
	for (i = 0; i < k->n && !v->bad; i++) {
		struct rnode *c = k->e[i].node;

		if (c->parent != n || k->e[i].h != c->h || (i && k->e[i - 1].h > k->e[i].h))
			v->bad = 1;
		/* Distinct first pages among siblings (under one extra key). */
		if (i && k->e[i - 1].h == k->e[i].h && k->e[i - 1].node->extra == c->extra &&
		    memcmp(seg_of(k->e[i - 1].node)->keys, seg_of(c)->keys, r->ps * 4) == 0)
			v->bad = 1;
		validate_node(r, c, n == r->root ? UINT32_MAX : n->lock_ref, v);
	}
}

/**
 * kvs_radix_validate() - check the tree's invariants.
 * @radix: cache.
 *
 * evictable + protected == tokens in the tree; a locked node's ancestors
 * are locked at least as often; siblings have distinct first pages; values
 * are page-aligned; the eviction heap holds exactly the unlocked leaves.
 *
 * Context: MT-Safe (serialized with the writers).
 * Return: 0, or -1 with errno EUCLEAN.
 */
KVS_EXPORT int kvs_radix_validate(kvs_radix_t *r)
{
	struct vstate v = {0};
	size_t i;

	if (!r)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	validate_node(r, r->root, UINT32_MAX, &v);
	if (v.evictable != r->evictable || v.protected_ != r->protected_ || v.total != r->total ||
	    v.nodes != r->nnodes || r->evictable + r->protected_ != r->total ||
	    v.leaves != r->heap_n)
		v.bad = 1;
	for (i = 0; i < r->heap_n && !v.bad; i++)
		if ((size_t)r->heap[i]->heap_idx != i ||
		    (i && before(r, r->heap[i], r->heap[(i - 1) / 2])))
			v.bad = 1;
	pthread_mutex_unlock(&r->wlock);
	return v.bad ? kvs_fail(EUCLEAN) : 0;
}
