/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/radix.c - the radix-tree prefix cache (SGLang's RadixCache).
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
 * segment (struct rseg); a split's two halves point into the old
 * segment's memory (its owner, freed with the last segment over it), so a
 * split copies nothing; owners' memory comes from and goes back to a
 * per-tree cache of blocks (struct seg_cache).  A node's children live in
 * one array sorted by a 64-bit hash of (extra key, first page) (struct
 * rkids), changed in place while it has room (see kid_count()).  Changing
 * a segment, or a full array, means building a new one, publishing it with
 * one pointer store, and retiring the old one through call_rcu.  Every node records its tree, so
 * a handle from another tree is refused.  Leaves that may be evicted
 * (lock_ref 0, no children) sit in the eviction-policy heap
 * (lib/cache/evict_heap.c), kept up to date on every change, so eviction never
 * walks the tree.  Time is a logical clock, one tick per match or insert.
 * KV events and the chained page hashes are lib/cache/kvevent.c's.  Over a pool,
 * the tree keeps a bitmap of the pages it holds (one bit a pool page), so
 * an insert can refuse a page the tree already holds in O(1), and a
 * scratch bitmap of the same size to find a page named twice in one call;
 * both are changed only under wlock.
 *
 * Trust at the API boundary.  An insert checks every location it is
 * handed before it changes anything, a run of consecutive pages at a time
 * (one scan finds the runs): in the pool's range, page-aligned,
 * no page twice, held by the caller (refcount > 0), and, for the pages the
 * tree would take over, not already the tree's.  Node handles are checked
 * to belong to the tree.  kvs_radix_validate() checks the same of the
 * whole tree.
 *
 * Concurrency (the library's lock order is in common/common.h).
 * Writers (match, insert, lock, unlock, evict, reset) are serialized by
 * r->wlock.  kvs_radix_match_ro() takes no lock: it runs inside an RCU
 * read-side critical section (liburcu, bulletproof flavour: no thread
 * registration), so nothing it can reach is freed under it, and validates
 * its whole walk against a sequence count that the writer makes odd while
 * it changes what a reader can see: a split, a new child, an eviction, a
 * reset.  A writer's match or insert that only refreshes access times, hit
 * counts and priorities leaves the count alone: readers never look at
 * those fields (they are the writer's, below the two published pointers),
 * so they do not send readers back.  RCU alone would not do: a split gives
 * an existing node a shorter segment before its new parent is published,
 * and a reader that came through the old edge would match the shorter
 * segment at the wrong depth (whatever the order of the stores).  As the
 * SLAB_TYPESAFE_BY_RCU warning says, RCU keeps the
 * memory valid, not the meaning: the reader re-checks with the sequence
 * count and starts over if the tree changed during its walk, so it never
 * returns a torn result.  A reader that has started over RO_TRIES times
 * leaves its RCU read section and reads once under wlock instead, so a
 * stream of writes cannot starve it and no reader ever waits for wlock
 * inside a read section; writers never wait for readers, and keep their
 * write sections short: evicted locations are freed and KV events
 * delivered after the sequence count is even again (still under wlock),
 * so an event callback may call kvs_radix_match_ro() but no writer call.
 *
 * Slab awareness (kvs_radix_attr_t.slab_aware).  Eviction may look past
 * the heap's top: the first slab_window leaves in the policy's order are
 * found by walking the heap from its root with a small frontier, and each
 * is weighed by the live pages its eviction would leave in the slabs it
 * frees pages in (slab->lock held for the reads, under wlock, which the
 * lock order allows).  What a leaf's eviction frees per slab is counted
 * once and kept on the leaf (struct slab_hist) while the slab's sharing
 * generation stands.  Pages of leaves the same call has already taken
 * are counted as freed (slab_gone), since they go back to the pool only
 * after the write section.  For elastic memory (lib/elastic/elastic.c) the tree
 * also reports the pages of its unlocked nodes, evicts exactly the nodes
 * that hold pages of chosen slabs, and relocates moved pages (compaction)
 * by publishing new segments in one write section.
 *
 * Statistics.  The writer's counters are plain fields changed under wlock;
 * the readers' three are relaxed atomics on a cache line of their own, away
 * from the sequence count every reader loads.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu-bp.h>

#include "cache/evict_heap.h"
#include "internal.h"
#include "cache/kvevent.h"
#include "kvslab/radix.h"
#include "kvslab/slab.h"

struct rseg {
	uint32_t len;
	_Atomic uint32_t refs;		/* an owner's: segments over its data[], itself included */
	uint8_t cls;			/* an owner's size class in its cache, or SEG_BIG */
	struct seg_cache *sc;		/* the cache an owner goes back to, or NULL */
	int32_t *keys, *vals;		/* len each, in owner->data */
	struct rseg *owner;		/* the segment whose data[] holds them (itself, or a split's source) */
	struct rcu_head rcu;
	int32_t data[];			/* an owner's keys, then its locations */
};

/*
 * The segment memory a tree keeps for reuse: owners' blocks of 4 size
 * classes a power of two, from 64 bytes to 64 MiB, on free lists (linked
 * through ->owner), so that inserts reuse what evictions and splits
 * retired rather than fault fresh pages in.  Freed blocks come back from
 * RCU's thread too, hence the lock.  It keeps at most a quarter of the
 * bytes its segments hold, plus 4 MiB; the rest goes back to malloc.
 */
#define SEG_CLASSES 81
#define SEG_BIG 0xff
struct seg_cache {
	pthread_mutex_t lock;
	struct rseg *free[SEG_CLASSES];
	size_t free_bytes, live_bytes;
};

/* A run of consecutive pages among the locations an insert is handed. */
struct prun {
	size_t at;			/* its first token */
	uint64_t first;			/* its first page */
	uint32_t np;			/* its pages */
};

struct kid {
	uint64_t h;
	struct rnode *node;
};

struct rkids {
	uint32_t n, cap;		/* entries, room */
	struct rcu_head rcu;
	struct kid e[];
};

struct rnode {
	/* What readers see: two published pointers, and extra (immutable). */
	struct rseg *_Atomic seg;
	struct rkids *_Atomic kids;
	uint64_t extra;
	/* Writer-only from here on. */
	struct kvs_radix *tree;		/* the tree the node belongs to */
	struct rnode *parent;
	uint64_t h;			/* hash of (extra, first page): parent's key */
	uint32_t lock_ref;
	struct evict_key ek;		/* the policy's view; ek.idx -1: not in the heap */
	uint64_t last_hash;		/* chained hash of the last page (events) */
	uint64_t gone_parent_hash;	/* evicted: the parent's last_hash */
	struct rnode *gone_next;	/* evicted: the call's list, freed after the write */
	struct slab_hist *hist;		/* slab-aware eviction's weights, or NULL */
	struct rcu_head rcu;
};

/*
 * A leaf's pages held only by the tree (count 1), per slab they lie in:
 * what its eviction would free where.  Slab-aware eviction weighs the same
 * leaves again and again, so it keeps this on the node while the pool's
 * sharing generation (kvsi_slab_share_gen()) stands; a split or a
 * relocation drops it.  Writer-only.
 */
struct slab_hist {
	uint64_t gen;
	uint32_t n;
	struct {
		uint32_t slab, cnt;
	} e[];
};

#define W_STATS(X) X(matches) X(hit_tokens) X(inserts) X(inserted_tokens) X(splits) \
	X(evictions) X(evicted_tokens) X(resets)

struct kvs_radix {
	kvs_pool_t *pool;
	kvs_slab_t *slab;		/* the pool's, for page reference counts */
	uint64_t cap;			/* pool capacity in tokens; 0: no pool */
	uint32_t ps;
	int ps_shift;			/* log2(ps), or -1: ps is not a power of two */
	int policy, disabled;
	struct kvev_sink ev;
	void (*free_cb)(void *arg, const int32_t *locs, size_t n);
	void *free_arg;

	struct seg_cache sc;
	pthread_mutex_t wlock;
	_Atomic uint64_t seq;		/* odd while the writer changes the tree */
	struct rnode *root;
	uint64_t clock;
	uint64_t evictable, protected_, total, nnodes;
	struct evict_heap heap;
	uint32_t window;		/* slab-aware eviction: leaves weighed; 0: off */
	uint32_t pps;			/* the slab allocator's pages per slab */
	uint32_t *slab_cnt;		/* slab-aware scratch, one per slab, all 0 between calls */
	uint32_t *slab_gone;		/* pages of each slab the eviction under way will free */
	struct slab_hist *hist_tmp;	/* a leaf's weights when no memory is left to keep them */
	uint64_t *held;			/* pool pages the tree holds (pool only) */
	struct prun *runs;		/* insert's scratch: the runs of pages it is handed */
	size_t nruns, runs_cap;
	struct rnode **path;		/* insert's scratch: the nodes its walk passed */
	size_t path_cap;
	struct kvsi_page_run *fruns;	/* free_locs()'s scratch: the runs it frees */
	size_t fruns_cap;
	uint64_t *seen;			/* insert's scratch, all clear between calls */
	struct {
#define W_FIELD(n) uint64_t n;
		W_STATS(W_FIELD)
#undef W_FIELD
	} st;
	/* Readers' counters, off the line readers read seq from. */
	struct {
		_Alignas(64) _Atomic uint64_t match_ro;
		_Atomic uint64_t retries, fallbacks;
	} rst;
};

static inline struct rnode *ek_node(struct evict_key *k)
{
	return caa_container_of(k, struct rnode, ek);
}

/* The key of a child: its first page under its extra key. */
static inline uint64_t child_hash(const struct kvs_radix *r, uint64_t extra, const int32_t *t)
{
	return kvev_hash_page(extra, t, r->ps);
}

/* ------------------------------------------------------------ allocation */

/* The size class of a block of @b bytes and its size in *@size; SEG_BIG
 * above the largest. */
static unsigned int seg_class(size_t b, size_t *size)
{
	unsigned int e;
	size_t q, m;

	if (b <= 64) {
		*size = 64;
		return 0;
	}
	e = 63u - (unsigned int)__builtin_clzll((unsigned long long)(b - 1)); /* >= 6 */
	q = (size_t)1 << (e - 2);
	m = (b + q - 1) / q; /* 5 .. 8 quarters */
	*size = m * q;
	return e > 25 ? SEG_BIG : 1 + (e - 6) * 4 + (unsigned int)(m - 5);
}

static struct rseg *seg_block(struct seg_cache *sc, size_t b)
{
	struct rseg *s = NULL;
	size_t size;
	unsigned int c = seg_class(b, &size);

	if (!sc || c == SEG_BIG) {
		s = malloc(b);
		if (s) {
			s->cls = SEG_BIG;
			s->sc = NULL;
		}
		return s;
	}
	pthread_mutex_lock(&sc->lock);
	s = sc->free[c];
	if (s) {
		sc->free[c] = s->owner;
		sc->free_bytes -= size;
	}
	sc->live_bytes += size;
	pthread_mutex_unlock(&sc->lock);
	if (!s && !(s = malloc(size))) {
		pthread_mutex_lock(&sc->lock);
		sc->live_bytes -= size;
		pthread_mutex_unlock(&sc->lock);
		return NULL;
	}
	s->cls = (uint8_t)c;
	s->sc = sc;
	return s;
}

/* An owner's block goes back to its cache, or to malloc. */
static void seg_block_free(struct rseg *s)
{
	struct seg_cache *sc = s->sc;
	size_t size;
	bool keep;

	if (!sc) {
		free(s);
		return;
	}
	seg_class(sizeof(*s) + 2 * (size_t)s->len * sizeof(int32_t), &size);
	pthread_mutex_lock(&sc->lock);
	sc->live_bytes -= size;
	keep = sc->free_bytes + size <= sc->live_bytes / 4 + (4u << 20);
	if (keep) {
		s->owner = sc->free[s->cls];
		sc->free[s->cls] = s;
		sc->free_bytes += size;
	}
	pthread_mutex_unlock(&sc->lock);
	if (!keep)
		free(s);
}

/* Give every kept block back to malloc.  No segment may be in flight. */
static void seg_cache_drain(struct seg_cache *sc)
{
	unsigned int c;

	for (c = 0; c < SEG_CLASSES; c++)
		while (sc->free[c]) {
			struct rseg *s = sc->free[c];

			sc->free[c] = s->owner;
			free(s);
		}
	sc->free_bytes = 0;
}

/* A segment owning a copy of @len keys and locations, from @sc (NULL:
 * malloc). */
static struct rseg *seg_new(struct seg_cache *sc, uint32_t len, const int32_t *keys,
			    const int32_t *vals)
{
	struct rseg *s = seg_block(sc, sizeof(*s) + 2 * (size_t)len * sizeof(int32_t));

	if (!s)
		return NULL;
	s->len = len;
	atomic_init(&s->refs, 1);
	s->owner = s;
	s->keys = s->data;
	s->vals = s->data + len;
	if (len) { /* the root's segment is empty and has no source */
		memcpy(s->keys, keys, len * sizeof(int32_t));
		memcpy(s->vals, vals, len * sizeof(int32_t));
	}
	return s;
}

/* A segment of @len tokens from token @off of @src that shares @src's
 * memory: a split copies nothing. */
static struct rseg *seg_view(struct rseg *src, uint32_t off, uint32_t len)
{
	struct rseg *s = malloc(sizeof(*s));

	if (!s)
		return NULL;
	s->len = len;
	s->cls = SEG_BIG;
	s->sc = NULL;
	s->owner = src->owner;
	s->keys = src->keys + off;
	s->vals = src->vals + off;
	atomic_fetch_add_explicit(&s->owner->refs, 1, memory_order_relaxed);
	return s;
}

/* Free @s now (never published, or no reader can reach it); its owner's
 * memory goes with the last segment over it.  Runs on the writer's thread
 * and on RCU's, hence the atomic count. */
static void seg_free(struct rseg *s)
{
	struct rseg *o;

	if (!s)
		return;
	o = s->owner;
	if (s != o)
		free(s);
	if (atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1)
		seg_block_free(o);
}

/* The grace period's sync object for ThreadSanitizer (KVSI_TSAN_RELEASE,
 * internal.h): readers release it as they leave, writers before call_rcu(),
 * the callbacks below acquire it, so that TSan sees a reader's last look at
 * a segment, node or children array ordered before its reuse. */
static char rcu_gp;

static inline void rcu_retire(struct rcu_head *h, void (*cb)(struct rcu_head *))
{
	KVSI_TSAN_RELEASE(&rcu_gp);
	call_rcu(h, cb);
}

static void free_seg_cb(struct rcu_head *h)
{
	KVSI_TSAN_ACQUIRE(&rcu_gp);
	seg_free(caa_container_of(h, struct rseg, rcu));
}

static void free_kids_cb(struct rcu_head *h)
{
	KVSI_TSAN_ACQUIRE(&rcu_gp);
	free(caa_container_of(h, struct rkids, rcu));
}

static void free_node_cb(struct rcu_head *h)
{
	struct rnode *n = caa_container_of(h, struct rnode, rcu);

	KVSI_TSAN_ACQUIRE(&rcu_gp);
	seg_free(atomic_load_explicit(&n->seg, memory_order_relaxed));
	free(atomic_load_explicit(&n->kids, memory_order_relaxed));
	free(n->hist);
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

/*
 * A children array is changed in place, inside a write section, when it
 * has room (kids_update()): a reader may see it half moved, and the
 * sequence count sends it back.  Readers load the entries with relaxed
 * atomics and the count with acquire; the writer stores the entries first
 * and the count last (release), so every entry below the count a reader
 * sees is a node.  A full array is replaced by a copy with room.
 */
static inline uint32_t kid_count(const struct rkids *k)
{
	/* Acquire: an entry added in place is written before the count. */
	return __atomic_load_n(&k->n, __ATOMIC_ACQUIRE);
}

static inline uint64_t kid_h(const struct rkids *k, uint32_t i)
{
	return __atomic_load_n(&k->e[i].h, __ATOMIC_RELAXED);
}

/* Acquire: a node put in place of another (a split) is published by this
 * entry alone, not by the count, and its fields and segment were written
 * before it. */
static inline struct rnode *kid_node(const struct rkids *k, uint32_t i)
{
	return __atomic_load_n(&k->e[i].node, __ATOMIC_ACQUIRE);
}

static inline uint32_t nkids(const struct rnode *n)
{
	struct rkids *k = kids_of(n);

	return k ? kid_count(k) : 0;
}

/* Find the child of @n whose first page is @t under @extra.  Safe for
 * readers (under RCU) and the writer. */
static struct rnode *find_child(const struct kvs_radix *r, const struct rnode *n, uint64_t extra,
				const int32_t *t)
{
	struct rkids *k = kids_of(n);
	uint64_t h;
	uint32_t lo = 0, hi, n0;

	if (!k)
		return NULL;
	h = child_hash(r, extra, t);
	n0 = hi = kid_count(k);
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (kid_h(k, mid) < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n0 && kid_h(k, lo) == h; lo++) {
		struct rnode *c = kid_node(k, lo);
		struct rseg *s = seg_of(c);

		if (c->extra == extra && s->len >= r->ps &&
		    memcmp(s->keys, t, r->ps * sizeof(int32_t)) == 0)
			return c;
	}
	return NULL;
}

/* Entry @i of @k set to (@h, @node), as readers may be looking: the node
 * with release, so that a reader who loads it (kid_node()) sees the node
 * and its segment as they were written before. */
static inline void kid_set(struct rkids *k, uint32_t i, uint64_t h, struct rnode *node)
{
	__atomic_store_n(&k->e[i].h, h, __ATOMIC_RELAXED);
	__atomic_store_n(&k->e[i].node, node, __ATOMIC_RELEASE);
}

/*
 * Change the children array of @n by adding @add (if not NULL), removing
 * @del (if not NULL), or swapping @del for @add.  In place when the array
 * has room, which the caller's write section makes safe: a reader may see
 * entries half moved (each a valid node, the count written last) and is
 * sent back by the sequence count.  Otherwise a copy with twice the room,
 * published with one store, the old one retired through RCU.  A removal
 * never allocates (eviction).  Returns 0 or -1 (ENOMEM, nothing changed).
 */
static int kids_update(struct rnode *n, struct rnode *add, struct rnode *del)
{
	struct rkids *old = kids_of(n), *nw;
	uint32_t on = old ? old->n : 0, nn = on + (add != NULL) - (del != NULL), i, j = 0;
	bool placed = add == NULL;

	if (nn == 0) {
		atomic_store_explicit(&n->kids, NULL, memory_order_release);
		goto retire;
	}
	if (old && del) {
		for (i = 0; i < on && old->e[i].node != del; i++)
			;
		if (!add) {
			for (; i + 1 < on; i++)
				kid_set(old, i, old->e[i + 1].h, old->e[i + 1].node);
			__atomic_store_n(&old->n, on - 1, __ATOMIC_RELEASE);
			return 0;
		}
		if (i < on && old->e[i].h == add->h) { /* a split: same first page */
			__atomic_store_n(&old->e[i].node, add, __ATOMIC_RELEASE);
			return 0;
		}
	} else if (old && add && on < old->cap) {
		for (i = on; i > 0 && old->e[i - 1].h > add->h; i--)
			kid_set(old, i, old->e[i - 1].h, old->e[i - 1].node);
		kid_set(old, i, add->h, add);
		__atomic_store_n(&old->n, on + 1, __ATOMIC_RELEASE);
		return 0;
	}
	nw = malloc(sizeof(*nw) + 2 * (size_t)nn * sizeof(nw->e[0]));
	if (!nw)
		return -1;
	nw->cap = 2 * nn;
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
		rcu_retire(&old->rcu, free_kids_cb);
	return 0;
}

/* ------------------------------------------------------------ the writer */

/*
 * The sequence count readers check their walk against.  Only changes a
 * reader can see go between write_begin() and write_end(): a split, a new
 * child, an eviction, a reset.  Called with wlock held.
 */
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

/* Put @n in the heap or take it out as its evictability says; keep its place
 * right after its key changed. */
static void heap_fix(struct kvs_radix *r, struct rnode *n)
{
	bool want = n != r->root && n->lock_ref == 0 && nkids(n) == 0;

	if (want && n->ek.idx < 0) {
		if (evict_heap_push(&r->heap, &n->ek) < 0)
			return; /* out of memory: the node is just not evictable yet */
	} else if (!want && n->ek.idx >= 0) {
		evict_heap_remove(&r->heap, &n->ek);
	} else if (want) {
		evict_heap_update(&r->heap, &n->ek);
	}
}

static struct rnode *node_new(struct kvs_radix *r, struct rnode *parent, uint64_t extra,
			      struct rseg *seg)
{
	struct rnode *n;

	/* The heap holds at most every node: room for one more now, so that
	 * eviction, which pushes the parents it turns into leaves, never
	 * allocates. */
	if (evict_heap_reserve(&r->heap, r->nnodes + 1) < 0)
		return NULL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	atomic_store_explicit(&n->seg, seg, memory_order_relaxed);
	n->tree = r;
	n->parent = parent;
	n->extra = extra;
	n->h = seg->len ? child_hash(r, extra, seg->keys) : 0;
	n->ek.idx = -1;
	n->ek.created = n->ek.last_access = r->clock;
	r->nnodes++;
	return n;
}

/*
 * Split @c at @m tokens: a new node takes the first @m tokens and becomes
 * @c's parent.  As SGLang's _split_node does, the new node is a fresh node
 * (created now, no hits) that takes @c's lock count and priority, so the
 * sizes and the locks on the path stay exact; and as SGLang's match and
 * insert do (they stamp the child before splitting it), both halves carry
 * this call's access time.  Called with wlock held, inside a write section.
 */
static struct rnode *split(struct kvs_radix *r, struct rnode *c, uint32_t m)
{
	struct rseg *old = seg_of(c), *top, *rest;
	struct rnode *n;
	uint64_t old_h;

	top = seg_view(old, 0, m);
	rest = seg_view(old, m, old->len - m);
	n = top && rest ? node_new(r, c->parent, c->extra, top) : NULL;
	if (!n) {
		seg_free(top);
		seg_free(rest);
		return NULL;
	}
	old_h = c->h;
	n->lock_ref = c->lock_ref;
	n->ek.priority = c->ek.priority;
	if (r->ev.cb)
		n->last_hash = kvev_chain(&r->ev, c->parent == r->root ? 0 : c->parent->last_hash,
					  c->extra, top->keys, 0, m, 0);
	/* Publish the new node's children, then the new node in place of @c,
	 * then @c's shorter segment.  No order is safe for a reader on its own:
	 * readers that overlap any of it are sent back by the sequence count. */
	c->h = child_hash(r, c->extra, rest->keys);
	if (kids_update(n, c, NULL) < 0) {
		c->h = old_h;
		seg_free(top);
		seg_free(rest);
		free(n);
		r->nnodes--;
		return NULL;
	}
	/* The parent's entry keeps its hash: @n starts with the same page. */
	if (kids_update(c->parent, n, c) < 0) {
		c->h = old_h;
		free(atomic_load_explicit(&n->kids, memory_order_relaxed));
		seg_free(top);
		seg_free(rest);
		free(n);
		r->nnodes--;
		return NULL;
	}
	c->parent = n;
	free(c->hist);
	c->hist = NULL;
	atomic_store_explicit(&c->seg, rest, memory_order_release);
	rcu_retire(&old->rcu, free_seg_cb);
	c->ek.last_access = r->clock;
	if (c->ek.idx >= 0)
		evict_heap_update(&r->heap, &c->ek);
	r->st.splits++;
	return n;
}

/* A match or insert passed through @n.  Touches fields no reader reads, so
 * it needs no write section. */
static void touch(struct kvs_radix *r, struct rnode *n, int priority)
{
	n->ek.last_access = r->clock;
	n->ek.hits++;
	if (priority > n->ek.priority)
		n->ek.priority = priority;
	if (n->ek.idx >= 0)
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

/* Lock @n and its ancestors once (the root is never counted).  With wlock. */
static void lock_path(struct kvs_radix *r, struct rnode *n)
{
	for (; n && n != r->root; n = n->parent) {
		if (n->lock_ref++ == 0) {
			uint32_t len = seg_of(n)->len;

			r->evictable -= len;
			r->protected_ += len;
			heap_fix(r, n);
		}
	}
}

/* Is @n a node of @r?  Nodes record their tree; a freed node cannot be
 * told apart, which is why the _lock forms exist. */
static inline bool node_ok(const struct kvs_radix *r, const struct rnode *n)
{
	return n && n->tree == r;
}

/**
 * kvs_radix_attr_init() - defaults: the pool's page size, LRU, enabled, no
 * events, slab-aware eviction over a window of KVS_RADIX_SLAB_WINDOW.
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
	attr->slab_aware = 1;
	return 0;
}

/* Bitmap words for one bit per pool page. */
static inline size_t map_words(const struct kvs_radix *r)
{
	return (size_t)((r->cap / r->ps + 63) / 64);
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
	    attr->slab_window > KVS_RADIX_SLAB_WINDOW_MAX ||
	    (pool && attr->page_size && attr->page_size != kvs_pool_page_size(pool))) {
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	empty = seg_new(NULL, 0, NULL, NULL);
	if (!r || !empty)
		goto nomem;
	pthread_mutex_init(&r->sc.lock, NULL);
	r->pool = pool;
	r->ps = pool ? kvs_pool_page_size(pool) : attr->page_size;
	r->ps_shift = (r->ps & (r->ps - 1)) ? -1 : __builtin_ctz(r->ps);
	if (pool) {
		r->slab = kvs_pool_slab(pool);
		r->cap = kvs_pool_capacity(pool);
		r->held = calloc(map_words(r), sizeof(uint64_t));
		r->seen = calloc(map_words(r), sizeof(uint64_t));
		if (!r->held || !r->seen)
			goto nomem;
		uint64_t nslabs;
		size_t slab_total;

		kvsi_slab_geom(r->slab, &r->pps, &nslabs, &slab_total);
		if (attr->slab_aware) {
			r->window = attr->slab_window ? attr->slab_window : KVS_RADIX_SLAB_WINDOW;
			r->slab_cnt = calloc(nslabs ? nslabs : 1, sizeof(uint32_t));
			r->slab_gone = calloc(nslabs ? nslabs : 1, sizeof(uint32_t));
			r->hist_tmp = malloc(sizeof(*r->hist_tmp) +
					     (nslabs ? nslabs : 1) * sizeof(r->hist_tmp->e[0]));
			if (!r->slab_cnt || !r->slab_gone || !r->hist_tmp)
				goto nomem;
		}
	}
	r->free_cb = attr->free_cb;
	r->free_arg = attr->free_arg;
	r->policy = attr->policy;
	r->disabled = attr->disabled;
	r->ev.cb = attr->event_cb;
	r->ev.arg = attr->event_arg;
	r->ev.ps = r->ps;
	evict_heap_init(&r->heap, r->policy);
	pthread_mutex_init(&r->wlock, NULL);
	r->root = node_new(r, NULL, 0, empty);
	if (!r->root) {
		pthread_mutex_destroy(&r->wlock);
		goto nomem;
	}
	r->nnodes = 0; /* the root is not counted */
	r->root->lock_ref = 1; /* never evicted */
	return r;
nomem:
	if (r) {
		if (empty)
			pthread_mutex_destroy(&r->sc.lock);
		free(r->slab_cnt);
		free(r->slab_gone);
		free(r->hist_tmp);
		free(r->seen);
		free(r->held);
	}
	seg_free(empty);
	free(r);
	errno = ENOMEM;
	return NULL;
}

/* The pool page of location @v (>= 0): a shift for the usual page sizes. */
static inline uint64_t loc_page(const struct kvs_radix *r, int32_t v)
{
	return r->ps_shift >= 0 ? (uint64_t)(uint32_t)v >> r->ps_shift : (uint64_t)(uint32_t)v / r->ps;
}

/* Is location @v the first token of its page? */
static inline bool loc_aligned(const struct kvs_radix *r, int32_t v)
{
	return r->ps_shift >= 0 ? ((uint32_t)v & (r->ps - 1)) == 0 : (uint32_t)v % r->ps == 0;
}

/*
 * The end of the run of consecutive locations that starts at token @k of
 * @locs (@n tokens): the first index after @k whose location is not one
 * more than the one before it (kvsi_run_len(): sixteen a step).  Unsigned,
 * so a wrap is a run too, which the caller's range check refuses.
 */
static inline size_t consec_end(const int32_t *locs, size_t k, size_t n)
{
	return k + kvsi_run_len((const uint32_t *)locs + k, n - k);
}

/*
 * The run of consecutive pages that starts at token *@i of @locs (@n
 * tokens, whole pages, checked): returns its length in pages and its first
 * page in *@first, and moves *@i past it.  The tree's segments hold a few
 * long runs (the slab hands pages out lowest first), so the per-page work
 * below is per run: bitmap words, one call per run.
 */
static inline uint32_t page_run(const struct kvs_radix *r, const int32_t *locs, size_t n,
				size_t *i, uint64_t *first)
{
	size_t k;
	uint32_t np;

	*first = loc_page(r, locs[*i]);
	if (r->ps < 8) {
		/* Whole pages of consecutive tokens: consecutive pages are
		 * consecutive tokens, found sixteen at a time. */
		k = consec_end(locs, *i, n);
		np = (uint32_t)loc_page(r, (int32_t)(k - *i));
	} else {
		int64_t next = (int64_t)locs[*i] + r->ps;

		for (k = *i + r->ps, np = 1; k < n && locs[k] == next; k += r->ps, np++)
			next += r->ps;
	}
	*i = k;
	return np;
}

/* Pages [@p, @p + @np) leave the tree: out of the held map and of any
 * slab-aware count (all 0 but during an eviction's picks). */
static inline void run_gone(struct kvs_radix *r, uint64_t p, uint32_t np)
{
	bits_fill(r->held, p, p + np, false);
	if (r->window)
		for (uint64_t q = p; q < p + np; q = (q / r->pps + 1) * r->pps)
			r->slab_gone[q / r->pps] = 0;
}


/*
 * Give the tree's pages of @locs back.  One read of the locations: their
 * runs of pages leave the held map (run_gone()) and, over a pool, go back
 * to the slab as runs; with no memory for the runs, through the pool,
 * which reads the locations again.  With wlock, outside any write
 * section.
 */
static void free_locs(struct kvs_radix *r, const int32_t *locs, size_t n)
{
	size_t i = 0, nr = 0;
	bool runs = !r->free_cb;

	while (r->held && i < n) {
		uint64_t p;
		uint32_t np = page_run(r, locs, n, &i, &p);

		run_gone(r, p, np);
		if (runs) {
			struct kvsi_page_run *f = kvsi_grow(r->fruns, &r->fruns_cap, nr,
							    sizeof(*r->fruns));

			runs = f != NULL;
			if (f) {
				r->fruns = f;
				r->fruns[nr].first = (uint32_t)p;
				r->fruns[nr++].len = np;
			}
		}
	}
	if (r->free_cb)
		r->free_cb(r->free_arg, locs, n);
	else if (runs)
		kvsi_slab_free_page_runs(r->slab, nr, r->fruns);
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
	seg_free(s);
	free(k);
	free(n->hist);
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
	seg_cache_drain(&r->sc);
	pthread_mutex_destroy(&r->sc.lock);
	evict_heap_free(&r->heap);
	free(r->held);
	free(r->seen);
	free(r->runs);
	free(r->path);
	free(r->fruns);
	free(r->slab_cnt);
	free(r->slab_gone);
	free(r->hist_tmp);
	pthread_mutex_destroy(&r->wlock);
	free(r);
	return 0;
}

/* The walk of kvs_radix_match() and kvs_radix_match_lock(), with wlock
 * held: splits where the match ends inside a node, and refreshes access
 * times (no write section for that).  Returns tokens matched or -1
 * (ENOMEM, the tree unchanged but for earlier splits and access times). */
static ssize_t match_locked(struct kvs_radix *r, uint64_t extra, const int32_t *key, size_t n,
			    int32_t *locs, struct rnode **last)
{
	struct rnode *node = r->root;
	size_t pos = 0;

	*last = node;
	if (r->disabled)
		return 0;
	n = n / r->ps * r->ps;
	r->clock++;
	r->st.matches++;
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
			struct rnode *top;

			write_begin(r);
			top = split(r, c, m);
			write_end(r);
			if (!top) {
				r->st.hit_tokens += pos;
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
	r->st.hit_tokens += pos;
	*last = node;
	return (ssize_t)pos;
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
 * along the path.  Neither @last nor the pages of @locs are protected once
 * the call returns: another thread's kvs_radix_evict() may free them before
 * a kvs_radix_lock().  Unless the calling thread is the only one that
 * evicts, use kvs_radix_match_lock().
 *
 * Context: MT-Safe (takes wlock).
 * Return: tokens matched (a multiple of the page size), or -1 with errno
 * EINVAL or ENOMEM.
 */
KVS_EXPORT ssize_t kvs_radix_match(kvs_radix_t *r, uint64_t extra, const int32_t *key, size_t n,
				   int32_t *locs, kvs_radix_node_t **last)
{
	struct rnode *node;
	ssize_t got;

	if (!r || (!key && n) || (!locs && n))
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	got = match_locked(r, extra, key, n, locs, &node);
	pthread_mutex_unlock(&r->wlock);
	if (got >= 0 && last)
		*last = (kvs_radix_node_t *)node;
	return got;
}

/**
 * kvs_radix_match_lock() - kvs_radix_match() and kvs_radix_lock() of the
 * node it ends in, in one writer section.
 * @radix: cache.
 * @extra_key: the request's extra key.
 * @key: token ids.
 * @n: tokens in @key; only whole pages are matched.
 * @locs: receives the locations of the matched tokens (room for @n).
 * @last: receives the locked node (the root when nothing matched); the
 *        caller gives it back with kvs_radix_unlock().  Not NULL.
 *
 * The matched pages stay in the tree, and their locations valid, until
 * the kvs_radix_unlock().
 *
 * Context: MT-Safe (takes wlock).
 * Return: tokens matched, or -1 with errno EINVAL or ENOMEM (nothing
 * locked).
 */
KVS_EXPORT ssize_t kvs_radix_match_lock(kvs_radix_t *r, uint64_t extra, const int32_t *key,
					size_t n, int32_t *locs, kvs_radix_node_t **last)
{
	struct rnode *node;
	ssize_t got;

	if (!r || (!key && n) || (!locs && n) || !last)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	got = match_locked(r, extra, key, n, locs, &node);
	if (got >= 0)
		lock_path(r, node);
	pthread_mutex_unlock(&r->wlock);
	if (got >= 0)
		*last = (kvs_radix_node_t *)node;
	return got;
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
		if (locs)
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
 * lock and starts over when a writer changed the tree's shape meanwhile
 * (a split, a new child, an eviction, a reset; not a match or insert that
 * only refreshed access times), so the answer is a prefix that was cached,
 * as a whole, at one moment; after RO_TRIES attempts it leaves the read
 * section and reads once under the writer lock.
 *
 * Context: MT-Safe, lock-free unless writers keep overlapping it (never
 * waits for wlock inside its RCU read section); may be called from any
 * thread, including inside an event callback (whose thread holds wlock,
 * so no write can overlap the walk and the first one stands).
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
	atomic_fetch_add_explicit(&r->rst.match_ro, 1, memory_order_relaxed);
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
		atomic_fetch_add_explicit(&r->rst.retries, 1, memory_order_relaxed);
		if (++tries == RO_TRIES) {
			/* Out of the read section first: a writer holding
			 * wlock may be waiting for a grace period. */
			KVSI_TSAN_RELEASE(&rcu_gp);
			rcu_read_unlock();
			atomic_fetch_add_explicit(&r->rst.fallbacks, 1, memory_order_relaxed);
			pthread_mutex_lock(&r->wlock);
			pos = ro_walk(r, extra, key, n, locs);
			pthread_mutex_unlock(&r->wlock);
			return (ssize_t)pos;
		}
		if (tries % 16 == 0)
			sched_yield();
		else
			caa_cpu_relax();
	}
	KVSI_TSAN_RELEASE(&rcu_gp);
	rcu_read_unlock();
	return (ssize_t)pos;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

/* Is a page named twice in @locs (@n tokens, page-aligned)?  Without a
 * pool, on a sorted copy.  Returns 1, 0, or -1 (ENOMEM). */
static int has_dup_page(struct kvs_radix *r, const int32_t *locs, size_t n)
{
	size_t np = n / r->ps, i;
	int32_t *pg;
	int dup = 0;

	if (np < 2)
		return 0;
	pg = malloc(np * sizeof(*pg));
	if (!pg)
		return kvs_fail(ENOMEM);
	for (i = 0; i < np; i++)
		pg[i] = locs[i * r->ps];
	qsort(pg, np, sizeof(*pg), cmp_i32);
	for (i = 1; i < np && !dup; i++)
		dup = pg[i] == pg[i - 1];
	free(pg);
	return dup;
}

/*
 * Check the shape of the locations an insert is handed (@n tokens, whole
 * pages) and cut them into runs of consecutive pages (r->runs): each page's
 * locations one page of the pool in order, all in the pool's range (>= 0,
 * and within an int32_t, without a pool).  A maximal run of consecutive
 * locations must then start a page, with an aligned location, and hold
 * whole pages; so one scan checks everything, with no division a token.
 * Returns 0, or -1 with errno EINVAL or ENOMEM.  With wlock.
 */
static int cut_runs(struct kvs_radix *r, const int32_t *locs, size_t n)
{
	uint64_t limit = r->cap ? r->cap : (uint64_t)INT32_MAX + 1;
	struct prun *nr;
	size_t at = 0;

	r->nruns = 0;
	while (at < n) {
		size_t end = consec_end(locs, at, n), len = end - at;
		int64_t v = locs[at];

		if (v < 0 || (uint64_t)v + len > limit || !loc_aligned(r, (int32_t)at) ||
		    !loc_aligned(r, (int32_t)len) || !loc_aligned(r, (int32_t)v))
			return kvs_fail(EINVAL);
		nr = kvsi_grow(r->runs, &r->runs_cap, r->nruns, sizeof(*r->runs));
		if (!nr)
			return kvs_fail(ENOMEM);
		r->runs = nr;
		r->runs[r->nruns].at = at;
		r->runs[r->nruns].first = loc_page(r, (int32_t)v);
		r->runs[r->nruns++].np = (uint32_t)loc_page(r, (int32_t)len);
		at = end;
	}
	return 0;
}

/* The part of run @k from token @pos on (page-aligned): its first page in
 * *@first, its pages returned (0: the run ends before @pos). */
static inline uint32_t run_from(const struct kvs_radix *r, size_t k, size_t pos, uint64_t *first)
{
	const struct prun *u = &r->runs[k];
	uint64_t skip;

	if (u->at >= pos) {
		*first = u->first;
		return u->np;
	}
	skip = loc_page(r, (int32_t)(pos - u->at));
	*first = u->first + skip;
	return skip < u->np ? u->np - (uint32_t)skip : 0;
}

/*
 * Over a pool, the page checks of an insert, a run at a time (r->runs):
 * every page held by the caller (reference count > 0) and none named twice
 * (the scratch bitmap r->seen, left clear again).  Returns 0 or -1 with
 * errno EINVAL.  With wlock.
 */
static int check_pages(struct kvs_radix *r)
{
	size_t k, done;
	int rc = 0;

	for (k = 0; k < r->nruns; k++) {
		const struct prun *u = &r->runs[k];

		if (!kvsi_slab_run_held(r->slab, (uint32_t)u->first, u->np) ||
		    bits_any(r->seen, u->first, u->first + u->np)) {
			rc = kvs_fail(EINVAL);
			break;
		}
		bits_fill(r->seen, u->first, u->first + u->np, true);
	}
	for (done = k, k = 0; k < done; k++)
		bits_fill(r->seen, r->runs[k].first, r->runs[k].first + r->runs[k].np, false);
	return rc;
}

/*
 * Check what an insert of @n tokens (page-aligned) is handed, before it
 * changes anything: every location in the pool's range (>= 0 without a
 * pool), each page's locations one page of the pool in order, no page
 * twice, every page held by the caller (reference count > 0), and none of
 * the pages the tree would take over already the tree's (that one by
 * insert_locked(), once its walk knows where the new part starts).  Leaves
 * the runs of pages in r->runs for the insert.  With wlock.  Returns 0, or
 * -1 with errno EINVAL or ENOMEM.
 */
static int check_insert(struct kvs_radix *r, const int32_t *locs, size_t n)
{
	int dup;

	if (cut_runs(r, locs, n) < 0)
		return -1;
	if (r->slab) {
		if (check_pages(r) < 0)
			return -1;
	} else {
		dup = has_dup_page(r, locs, n);
		if (dup)
			return dup < 0 ? -1 : kvs_fail(EINVAL);
	}
	return 0;
}

/* The body of kvs_radix_insert() and kvs_radix_insert_lock(), with wlock
 * held and the input checked.  *@last receives the node ending the key.
 * Returns what kvs_radix_insert() returns. */
static ssize_t insert_locked(struct kvs_radix *r, uint64_t extra, const int32_t *key, size_t n,
			     const int32_t *locs, int priority, struct rnode **last)
{
	struct rnode *node = r->root, *stored = NULL;
	uint64_t stored_from = 0;
	size_t pos = 0, i, npath = 0;
	struct rnode **path;
	uint32_t cut = 0;

	*last = node;
	if (r->disabled) {
		/* Nothing was cached, so the tree takes every page over and
		 * drops it at once, as SGLang's caller does; returns 0. */
		if (n)
			free_locs(r, locs, n);
		return 0;
	}
	/* The walk compares and changes nothing: the new part's pages are
	 * checked against the tree's first.  Only its last node may be
	 * split: the key leaves the tree inside it. */
	while (pos < n) {
		struct rnode *c = find_child(r, node, extra, key + pos);

		if (!c)
			break;
		path = kvsi_grow(r->path, &r->path_cap, npath, sizeof(*r->path));
		if (!path)
			return kvs_fail(ENOMEM);
		r->path = path;
		r->path[npath++] = c;
		cut = edge_match(r, seg_of(c), key + pos, n - pos);
		pos += cut;
		if (cut < seg_of(c)->len)
			break;
		cut = 0;
		node = c;
	}
	if (r->held) /* check_insert() left the runs */
		for (i = 0; i < r->nruns; i++) {
			uint64_t p;
			uint32_t np = run_from(r, i, pos, &p);

			if (np && bits_any(r->held, p, p + np))
				return kvs_fail(EINVAL);
		}
	r->clock++;
	for (i = 0; i < npath; i++) {
		struct rnode *c = r->path[i];

		if (i + 1 == npath && cut) {
			write_begin(r);
			c = split(r, c, cut);
			write_end(r);
			if (!c)
				return kvs_fail(ENOMEM);
		}
		touch(r, c, priority);
		node = c;
	}
	if (pos < n) {
		struct rseg *s = seg_new(&r->sc, (uint32_t)(n - pos), key + pos, locs + pos);
		struct rnode *leaf = s ? node_new(r, node, extra, s) : NULL;
		int rc;

		if (!leaf) {
			seg_free(s);
			return kvs_fail(ENOMEM);
		}
		leaf->ek.priority = priority;
		write_begin(r);
		rc = kids_update(node, leaf, NULL);
		write_end(r);
		if (rc < 0) {
			seg_free(s);
			free(leaf);
			r->nnodes--;
			return kvs_fail(ENOMEM);
		}
		if (r->ev.cb) {
			stored_from = node == r->root ? 0 : node->last_hash;
			stored = leaf;
			leaf->last_hash = kvev_chain(&r->ev, stored_from, extra, s->keys, 0, s->len, 0);
		}
		if (r->held) /* check_insert() left the runs */
			for (i = 0; i < r->nruns; i++) {
				uint64_t p;
				uint32_t np = run_from(r, i, pos, &p);

				bits_fill(r->held, p, p + np, true);
			}
		r->evictable += s->len;
		r->total += s->len;
		r->st.inserted_tokens += s->len;
		heap_fix(r, node); /* no longer a leaf */
		heap_fix(r, leaf);
		node = leaf;
	}
	r->st.inserts++;
	if (stored) /* after the write: a callback may call kvs_radix_match_ro() */
		kvev_chain(&r->ev, stored_from, extra, seg_of(stored)->keys, 0, seg_of(stored)->len,
			   KVS_KV_STORED);
	*last = node;
	return (ssize_t)pos;
}

static ssize_t insert_common(struct kvs_radix *r, uint64_t extra, const int32_t *key, size_t n,
			     const int32_t *locs, int priority, kvs_radix_node_t **last, bool lock)
{
	struct rnode *node;
	ssize_t got;

	if (!r || (!key && n) || (!locs && n) || n > UINT32_MAX || (lock && !last))
		return kvs_fail(EINVAL);
	n = n / r->ps * r->ps;
	pthread_mutex_lock(&r->wlock);
	got = check_insert(r, locs, n);
	if (got == 0)
		got = insert_locked(r, extra, key, n, locs, priority, &node);
	if (got >= 0 && lock)
		lock_path(r, node);
	pthread_mutex_unlock(&r->wlock);
	if (got >= 0 && last)
		*last = (kvs_radix_node_t *)node;
	return got;
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
 *        It is not protected once the call returns (see
 *        kvs_radix_insert_lock()).
 *
 * The locations are checked first: in the pool's range, page-aligned, no
 * page twice, every page held by the caller, and none of the pages the
 * tree would take over already in the tree.
 *
 * Context: MT-Safe (takes wlock).
 * Return: the number of leading tokens that were already cached: the
 * caller still owns locs[0 .. ret) and frees its duplicates; or -1 with
 * errno EINVAL or ENOMEM (nothing inserted).  A disabled cache keeps
 * nothing: it frees the (checked) pages it was handed and returns 0.
 */
KVS_EXPORT ssize_t kvs_radix_insert(kvs_radix_t *r, uint64_t extra, const int32_t *key, size_t n,
				    const int32_t *locs, int priority, kvs_radix_node_t **last)
{
	return insert_common(r, extra, key, n, locs, priority, last, false);
}

/**
 * kvs_radix_insert_lock() - kvs_radix_insert() and kvs_radix_lock() of the
 * node ending the key, in one writer section.
 * @radix: cache.
 * @extra_key: the request's extra key.
 * @key: token ids.
 * @n: tokens; only whole pages are inserted.
 * @locs: the KV locations of the tokens, as for kvs_radix_insert().
 * @priority: the request's priority.
 * @last: receives the locked node (the root when no whole page was
 *        given, or the cache is disabled); give it back with
 *        kvs_radix_unlock().  Not NULL.
 *
 * Context: MT-Safe (takes wlock).
 * Return: as kvs_radix_insert(); nothing is locked on failure.
 */
KVS_EXPORT ssize_t kvs_radix_insert_lock(kvs_radix_t *r, uint64_t extra, const int32_t *key,
					 size_t n, const int32_t *locs, int priority,
					 kvs_radix_node_t **last)
{
	return insert_common(r, extra, key, n, locs, priority, last, true);
}

/**
 * kvs_radix_lock() - protect @node and its ancestors from eviction.
 * @radix: cache.
 * @node: a node of @radix from kvs_radix_match() or kvs_radix_insert()
 *        (the root: nothing to do).
 *
 * Each lock needs one kvs_radix_unlock().  Keeps evictable and protected
 * token counts exact.
 *
 * Context: MT-Safe (takes wlock).
 * Return: 0, or -1 with errno EINVAL (NULL, or a node of another tree).
 */
KVS_EXPORT int kvs_radix_lock(kvs_radix_t *r, kvs_radix_node_t *node)
{
	struct rnode *n = (struct rnode *)node;

	if (!r || !n)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	if (!node_ok(r, n)) {
		pthread_mutex_unlock(&r->wlock);
		return kvs_fail(EINVAL);
	}
	lock_path(r, n);
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

/**
 * kvs_radix_unlock() - undo one kvs_radix_lock().
 * @radix: cache.
 * @node: the node that was locked (the root: nothing to do).
 *
 * Context: MT-Safe (takes wlock).
 * Return: 0, or -1 with errno EINVAL (NULL, a node of another tree, or a
 * node not locked).
 */
KVS_EXPORT int kvs_radix_unlock(kvs_radix_t *r, kvs_radix_node_t *node)
{
	struct rnode *n = (struct rnode *)node, *p;

	if (!r || !n)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	if (!node_ok(r, n)) {
		pthread_mutex_unlock(&r->wlock);
		return kvs_fail(EINVAL);
	}
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

/* Take evictable leaf @leaf out of the tree onto the call's list at
 * **@tail.  Inside a write section.  False when its parent's children
 * could not be changed (never for a removal, which is in place). */
static bool evict_one(struct kvs_radix *r, struct rnode *leaf, struct rnode ***tail)
{
	struct rnode *parent = leaf->parent;
	struct rseg *s = seg_of(leaf);

	if (kids_update(parent, NULL, leaf) < 0)
		return false;
	if (leaf->ek.idx >= 0)
		evict_heap_remove(&r->heap, &leaf->ek);
	leaf->gone_parent_hash = parent == r->root ? 0 : parent->last_hash;
	leaf->gone_next = NULL;
	**tail = leaf;
	*tail = &leaf->gone_next;
	r->evictable -= s->len;
	r->total -= s->len;
	r->nnodes--;
	r->st.evictions++;
	r->st.evicted_tokens += s->len;
	heap_fix(r, parent);
	return true;
}

/* Deliver the events of the evicted nodes on @gone, free their locations
 * and retire them.  With wlock, after write_end(): readers are not held
 * up by the pool and a callback may call kvs_radix_match_ro(). */
static void evict_finish(struct kvs_radix *r, struct rnode *gone)
{
	while (gone) {
		struct rnode *leaf = gone;
		struct rseg *s = seg_of(leaf);

		gone = leaf->gone_next;
		if (r->ev.cb)
			kvev_chain(&r->ev, leaf->gone_parent_hash, leaf->extra, s->keys, 0, s->len,
				   KVS_KV_REMOVED);
		free_locs(r, s->vals, s->len);
		leaf->tree = NULL;
		rcu_retire(&leaf->rcu, free_node_cb);
	}
}

/*
 * Run BODY, with sl (a slab), p (a first page) and k (pages) set, for each
 * piece of segment @s's runs of consecutive pages that lies in one slab.
 */
#define SEG_SLAB_PIECES(r, s, BODY)                                                    \
	do {                                                                           \
		size_t i_ = 0;                                                         \
		while (i_ < (s)->len) {                                                \
			uint64_t p_;                                                   \
			uint32_t np_ = page_run((r), (s)->vals, (s)->len, &i_, &p_);   \
			while (np_ > 0) {                                              \
				uint64_t sl = p_ / (r)->pps;                           \
				uint64_t room_ = (sl + 1) * (r)->pps - p_;             \
				uint32_t k = np_ < room_ ? np_ : (uint32_t)room_;      \
				uint64_t p = p_;                                       \
				BODY;                                                  \
				(void)p;                                               \
				p_ += k;                                               \
				np_ -= k;                                              \
			}                                                              \
		}                                                                      \
	} while (0)

/*
 * Leaf @n's pages held by the tree alone, per slab (struct slab_hist): the
 * one kept on the node if the sharing generation still stands, else built
 * (a run of pages at a time) and kept, or, with no memory to keep it,
 * built in r->hist_tmp.  With wlock; r->slab_cnt is all zero before and
 * after.
 */
static const struct slab_hist *slab_hist_of(struct kvs_radix *r, struct rnode *n)
{
	uint64_t gen = kvsi_slab_share_gen(r->slab);
	const struct rseg *s = seg_of(n);
	struct slab_hist *h;
	uint32_t nd = 0;

	if (n->hist && n->hist->gen == gen)
		return n->hist;
	free(n->hist);
	n->hist = NULL;
	SEG_SLAB_PIECES(r, s, {
		uint32_t c = kvsi_slab_run_sole(r->slab, (uint32_t)p, k);

		if (c) {
			nd += r->slab_cnt[sl] == 0;
			r->slab_cnt[sl] += c;
		}
	});
	h = malloc(sizeof(*h) + nd * sizeof(h->e[0]));
	if (h)
		n->hist = h;
	else
		h = r->hist_tmp;
	h->gen = gen;
	h->n = 0;
	SEG_SLAB_PIECES(r, s, {
		if (r->slab_cnt[sl]) {
			h->e[h->n].slab = (uint32_t)sl;
			h->e[h->n++].cnt = r->slab_cnt[sl];
			r->slab_cnt[sl] = 0;
		}
	});
	return h;
}

/*
 * Weigh leaf @n for slab-aware eviction: of the pages its eviction frees
 * (those the tree holds alone, refcount 1), @touched slabs they lie in,
 * and @other live pages left in those slabs once they are freed, not
 * counting the pages of leaves this call has evicted already (they are
 * freed only after the write section: r->slab_gone).  With wlock and
 * slab->lock held.
 */
static const struct slab_hist *slab_weigh(struct kvs_radix *r, struct rnode *n, uint64_t *other,
					  uint64_t *touched)
{
	const struct slab_hist *h = slab_hist_of(r, n);
	uint32_t j;

	*other = 0;
	*touched = h->n;
	for (j = 0; j < h->n; j++)
		*other += kvsi_slab_inuse_locked(r->slab, h->e[j].slab) - r->slab_gone[h->e[j].slab] -
			  h->e[j].cnt;
	return h;
}

/* Count the freeable pages of the leaf being taken (weights @h) in
 * r->slab_gone.  With wlock held. */
static void slab_pending_add(struct kvs_radix *r, const struct slab_hist *h)
{
	uint32_t j;

	for (j = 0; j < h->n; j++)
		r->slab_gone[h->e[j].slab] += h->e[j].cnt;
}


/*
 * The leaf slab-aware eviction takes: of the first r->window leaves in the
 * policy's order (found by walking the heap from its top, a frontier of at
 * most window + 1 entries, O(window^2) comparisons), the one that leaves
 * the fewest other live pages per slab it frees pages in; ties, and
 * leaves that free nothing (every page shared with a request), go by the
 * policy's order.  A leaf that empties every slab it touches wins at once.
 * With wlock held.
 */
static struct rnode *slab_aware_pick(struct kvs_radix *r)
{
	size_t front[KVS_RADIX_SLAB_WINDOW_MAX + 2], nf = 1, j, k;
	struct evict_key **a = r->heap.a;
	struct rnode *best = ek_node(a[0]);
	const struct slab_hist *best_h = NULL;
	uint64_t best_other = 0, best_touched = 0;

	front[0] = 0;
	kvsi_slab_lock(r->slab);
	for (k = 0; k < r->window && nf > 0; k++) {
		size_t at = 0, idx;
		uint64_t other, touched;
		const struct slab_hist *h;

		for (j = 1; j < nf; j++)
			if (evict_before(r->heap.policy, a[front[j]], a[front[at]]))
				at = j;
		idx = front[at];
		front[at] = front[--nf];
		if (2 * idx + 1 < r->heap.n)
			front[nf++] = 2 * idx + 1;
		if (2 * idx + 2 < r->heap.n)
			front[nf++] = 2 * idx + 2;
		h = slab_weigh(r, ek_node(a[idx]), &other, &touched);
		if (touched && (!best_touched || other * best_touched < best_other * touched)) {
			best = ek_node(a[idx]);
			best_h = h;
			best_other = other;
			best_touched = touched;
			if (other == 0)
				break;
		}
	}
	kvsi_slab_unlock(r->slab);
	/* Weights built in r->hist_tmp are the last leaf's: rebuild the
	 * winner's if so (no memory to keep them; seldom). */
	if (best_h == r->hist_tmp)
		best_h = slab_hist_of(r, best);
	if (best_h)
		slab_pending_add(r, best_h);
	return best;
}

/**
 * kvs_radix_evict() - evict at least @tokens tokens, if that many are
 * evictable.
 * @radix: cache.
 * @tokens: tokens wanted.
 *
 * Takes the policy's first evictable leaf (lock_ref 0, no children), or
 * with slab_aware the best of the first slab_window (see
 * kvs_radix_create(3)), frees its locations through the pool, and goes on;
 * a parent left childless and unlocked becomes a candidate in turn.
 *
 * Context: MT-Safe (takes wlock; frees pages under it).
 * Return: tokens evicted (may be less than asked), or -1 with errno EINVAL.
 */
KVS_EXPORT ssize_t kvs_radix_evict(kvs_radix_t *r, size_t tokens)
{
	struct rnode *gone = NULL, **tail = &gone;
	size_t done = 0;

	if (!r)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	if (tokens == 0 || r->heap.n == 0) {
		pthread_mutex_unlock(&r->wlock);
		return 0;
	}
	write_begin(r);
	while (done < tokens && r->heap.n > 0) {
		struct rnode *leaf = r->window ? slab_aware_pick(r) : ek_node(evict_heap_top(&r->heap));
		uint32_t len = seg_of(leaf)->len;

		if (!evict_one(r, leaf, &tail))
			break;
		done += len;
	}
	write_end(r);
	evict_finish(r, gone); /* clears r->slab_gone of the pages it frees */
	pthread_mutex_unlock(&r->wlock);
	return (ssize_t)done;
}

/* ------------------------------------------------- elastic memory's side */

/* Mark the pages of @n's subtree that sit in unlocked nodes. */
static void mark_unlocked(struct kvs_radix *r, struct rnode *n, uint64_t *pages)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);
	uint32_t i;

	if (n != r->root && n->lock_ref == 0)
		for (i = 0; i < s->len; i += r->ps)
			bit_set(pages, (uint64_t)s->vals[i] / r->ps);
	if (k)
		for (i = 0; i < k->n; i++)
			mark_unlocked(r, k->e[i].node, pages);
}

/*
 * kvsi_radix_unlocked_pages() - set, in @pages (one bit a pool page, zeroed
 * by the caller), every page the tree holds in an unlocked node: what
 * evicting the whole evictable tree would drop a reference to.  For
 * kvs_pool_set_limit().  Takes wlock.  0, or -1 with errno EINVAL (no pool).
 */
int kvsi_radix_unlocked_pages(struct kvs_radix *r, uint64_t *pages)
{
	if (!r->pool)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	mark_unlocked(r, r->root, pages);
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

/*
 * kvsi_radix_held_pages() - OR into @pages (one bit a pool page) every page
 * the tree holds, locked or not: one reference each.  For
 * kvs_pool_compact().  Takes wlock.  0, or -1 with errno EINVAL (no pool).
 */
int kvsi_radix_held_pages(struct kvs_radix *r, uint64_t *pages)
{
	size_t i, n;

	if (!r->pool)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	n = map_words(r);
	for (i = 0; i < n; i++)
		pages[i] |= r->held[i];
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

struct doom {
	struct rnode **v;
	size_t n, cap;
	const uint64_t *slabs;
	bool nomem;
};

/* Collect, children first, the unlocked nodes of @n's subtree that hold a
 * page of a slab in d->slabs or descend from one that does. */
static void doom_walk(struct kvs_radix *r, struct rnode *n, bool doomed, struct doom *d)
{
	struct rnode **v;
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);
	uint32_t i;

	if (n != r->root) {
		if (n->lock_ref > 0)
			doomed = false; /* nor can any ancestor go: it is locked too */
		else
			for (i = 0; i < s->len && !doomed; i += r->ps)
				doomed = bit_test(d->slabs, (uint64_t)s->vals[i] / r->ps / r->pps);
	}
	if (k)
		for (i = 0; i < k->n; i++)
			doom_walk(r, k->e[i].node, doomed, d);
	if (!doomed || n == r->root || n->lock_ref > 0)
		return;
	v = kvsi_grow(d->v, &d->cap, d->n, sizeof(*d->v));
	if (!v) {
		d->nomem = true;
		return;
	}
	d->v = v;
	d->v[d->n++] = n;
}

/*
 * kvsi_radix_evict_slabs() - evict every unlocked node holding a page of a
 * slab set in @slabs (one bit a slab of the pool's allocator), with the
 * nodes below it, leaves first: the eviction that empties chosen slabs for
 * kvs_pool_set_limit().  Locked nodes (and so their ancestors) stay.  Takes
 * wlock.  Returns the tokens evicted, or -1 with errno ENOMEM (nothing
 * evicted) or EINVAL (no pool).
 */
long kvsi_radix_evict_slabs(struct kvs_radix *r, const uint64_t *slabs)
{
	struct doom d = {.slabs = slabs};
	struct rnode *gone = NULL, **tail = &gone;
	size_t i, done = 0;

	if (!r->pool)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	doom_walk(r, r->root, false, &d);
	if (d.nomem) {
		pthread_mutex_unlock(&r->wlock);
		free(d.v);
		return kvs_fail(ENOMEM);
	}
	if (d.n) {
		write_begin(r);
		for (i = 0; i < d.n; i++) {
			uint32_t len = seg_of(d.v[i])->len;

			if (evict_one(r, d.v[i], &tail))
				done += len;
		}
		write_end(r);
		evict_finish(r, gone);
	}
	pthread_mutex_unlock(&r->wlock);
	free(d.v);
	return (long)done;
}

struct reloc {
	struct rnode **node;
	struct rseg **seg;
	size_t n, cap;
	const int32_t *newpage;
	bool nomem;
};

/* Build, for every node of @n's subtree holding a moved page, the segment
 * it will have: the same keys, the moved pages' new locations. */
static void reloc_walk(struct kvs_radix *r, struct rnode *n, struct reloc *rl)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n), *ns;
	uint32_t i;
	bool moved = false;

	for (i = 0; i < s->len && !moved; i += r->ps)
		moved = rl->newpage[(uint32_t)s->vals[i] / r->ps] >= 0;
	if (moved && !rl->nomem) {
		if (rl->n == rl->cap) {
			size_t cap = rl->cap ? 2 * rl->cap : 64;
			struct rnode **nv = realloc(rl->node, cap * sizeof(*nv));
			struct rseg **sv;

			if (nv)
				rl->node = nv;
			sv = nv ? realloc(rl->seg, cap * sizeof(*sv)) : NULL;
			if (!sv) {
				rl->nomem = true;
				return;
			}
			rl->seg = sv;
			rl->cap = cap;
		}
		ns = seg_new(&r->sc, s->len, s->keys, s->vals);
		if (!ns) {
			rl->nomem = true;
			return;
		}
		for (i = 0; i < s->len; i++) {
			uint32_t p = (uint32_t)s->vals[i] / r->ps;

			if (rl->newpage[p] >= 0)
				ns->vals[i] = rl->newpage[p] * (int32_t)r->ps + s->vals[i] % (int32_t)r->ps;
		}
		rl->node[rl->n] = n;
		rl->seg[rl->n++] = ns;
	}
	if (k)
		for (i = 0; i < k->n; i++)
			reloc_walk(r, k->e[i].node, rl);
}

/*
 * kvsi_radix_relocate() - compaction's writer section: every node holding
 * a page p with @newpage[p] >= 0 gets a new segment naming page
 * @newpage[p] instead (published with one pointer store, the old one
 * retired through RCU; readers in flight start over on the sequence
 * count), the held map follows, and @inside(@arg) runs under wlock first,
 * so the request table's rows and the pages' reference counts change in
 * the same section.  Takes wlock.  0; or -1 with errno ENOMEM (nothing
 * changed, @inside not called), or @inside's failure (the tree is updated
 * regardless: @inside's side is the caller's to describe).
 */
int kvsi_radix_relocate(struct kvs_radix *r, const int32_t *newpage, int (*inside)(void *arg),
			void *arg)
{
	struct reloc rl = {.newpage = newpage};
	size_t i;
	int rc, err = 0;

	if (!r->pool)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	reloc_walk(r, r->root, &rl);
	if (rl.nomem) {
		pthread_mutex_unlock(&r->wlock);
		for (i = 0; i < rl.n; i++)
			seg_free(rl.seg[i]);
		free(rl.node);
		free(rl.seg);
		return kvs_fail(ENOMEM);
	}
	rc = inside(arg);
	if (rc < 0)
		err = errno;
	write_begin(r);
	for (i = 0; i < rl.n; i++) {
		struct rseg *old = seg_of(rl.node[i]), *ns = rl.seg[i];
		uint32_t j;

		for (j = 0; j < ns->len; j += r->ps) {
			bit_clear(r->held, (uint64_t)old->vals[j] / r->ps);
			bit_set(r->held, (uint64_t)ns->vals[j] / r->ps);
		}
		atomic_store_explicit(&rl.node[i]->seg, ns, memory_order_release);
		free(rl.node[i]->hist);
		rl.node[i]->hist = NULL;
		rcu_retire(&old->rcu, free_seg_cb);
	}
	write_end(r);
	pthread_mutex_unlock(&r->wlock);
	free(rl.node);
	free(rl.seg);
	if (err)
		return kvs_fail(err);
	return 0;
}

/* Free the locations of @n's subtree and retire its nodes: readers that
 * came in before the reset may still walk them.  With wlock. */
static void retire_subtree(struct kvs_radix *r, struct rnode *n)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);
	uint32_t i;

	if (k)
		for (i = 0; i < k->n; i++)
			retire_subtree(r, k->e[i].node);
	free_locs(r, s->vals, s->len);
	n->tree = NULL;
	n->ek.idx = -1;
	rcu_retire(&n->rcu, free_node_cb);
}

/**
 * kvs_radix_reset() - empty the cache.
 * @radix: cache.
 *
 * Frees every location the tree holds (through the pool or free_cb) and
 * emits one KVS_KV_ALL_CLEARED event, as SGLang's reset() does.  Node
 * handles from before the reset are no longer valid.
 *
 * Context: MT-Safe (takes wlock; frees pages under it).
 * Return: 0, or -1 with errno EINVAL or EBUSY (a node is locked; nothing
 * changed).
 */
KVS_EXPORT int kvs_radix_reset(kvs_radix_t *r)
{
	struct rkids *k;
	uint32_t i;

	if (!r)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	if (r->protected_) {
		pthread_mutex_unlock(&r->wlock);
		return kvs_fail(EBUSY);
	}
	k = kids_of(r->root);
	write_begin(r);
	atomic_store_explicit(&r->root->kids, NULL, memory_order_release);
	evict_heap_clear(&r->heap);
	r->evictable = r->total = r->nnodes = 0;
	write_end(r);
	if (k) {
		for (i = 0; i < k->n; i++)
			retire_subtree(r, k->e[i].node);
		rcu_retire(&k->rcu, free_kids_cb);
	}
	r->st.resets++;
	kvev_all_cleared(&r->ev);
	pthread_mutex_unlock(&r->wlock);
	return 0;
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

/**
 * kvs_radix_pool() - the pool the cache was created over.
 * @radix: cache.
 *
 * Context: MT-Safe.
 * Return: the pool; NULL for a cache over free_cb, and for NULL.
 */
KVS_EXPORT kvs_pool_t *kvs_radix_pool(const kvs_radix_t *r)
{
	return r ? r->pool : NULL;
}

struct vstate {
	uint64_t evictable, protected_, total, nodes, leaves;
	uint64_t *mine;			/* pool pages seen so far (pool only) */
	int32_t *pages;			/* without a pool: every page, to sort */
	size_t npages;
	int bad;
};

/* The locations of one node: in range, page-aligned, each page held (by
 * the caller's pool reference count), and no page seen in another node. */
static void validate_vals(struct kvs_radix *r, const struct rseg *s, struct vstate *v)
{
	uint32_t i;

	for (i = 0; i < s->len && !v->bad; i++) {
		int32_t x = s->vals[i];

		if (x < 0 || (r->cap && (uint64_t)x >= r->cap) ||
		    (i % r->ps ? x != s->vals[i - 1] + 1 : x % (int32_t)r->ps != 0)) {
			v->bad = 1;
			break;
		}
		if (i % r->ps)
			continue;
		if (v->mine) {
			uint64_t b = (uint64_t)x / r->ps;

			if (bit_test(v->mine, b) || !bit_test(r->held, b) ||
			    kvs_slab_refcount(r->slab, (uint32_t)b) <= 0)
				v->bad = 1;
			bit_set(v->mine, b);
		} else if (v->pages) {
			v->pages[v->npages++] = x;
		}
	}
}

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
		if (s->len == 0 || s->len % r->ps || n->tree != r)
			v->bad = 1;
		if (!v->bad)
			validate_vals(r, s, v);
		/* A locked node has locked ancestors (locks go to the root). */
		if (n->lock_ref > parent_lock)
			v->bad = 1;
		if ((n->ek.idx >= 0) != (n->lock_ref == 0 && !k))
			v->bad = 1;
		if (n->lock_ref == 0 && !k)
			v->leaves++;
		if (n->ek.idx >= 0 &&
		    ((size_t)n->ek.idx >= r->heap.n || r->heap.a[n->ek.idx] != &n->ek))
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
 * are locked at least as often; siblings have distinct first pages; every
 * location is in the pool's range (>= 0 without a pool) and page-aligned;
 * no page is held by two nodes; over a pool, every page's reference count
 * is > 0 and the tree's map of held pages is exact; the eviction heap holds
 * exactly the unlocked leaves.
 *
 * Context: MT-Safe (takes wlock).
 * Return: 0, or -1 with errno EUCLEAN (an invariant broken), EINVAL or
 * ENOMEM.
 */
KVS_EXPORT int kvs_radix_validate(kvs_radix_t *r)
{
	struct vstate v = {0};
	size_t i;

	if (!r)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	if (r->held)
		v.mine = calloc(map_words(r), sizeof(uint64_t));
	else
		v.pages = malloc((r->total / r->ps + 1) * sizeof(int32_t));
	if (!v.mine && !v.pages) {
		pthread_mutex_unlock(&r->wlock);
		return kvs_fail(ENOMEM);
	}
	validate_node(r, r->root, UINT32_MAX, &v);
	if (v.evictable != r->evictable || v.protected_ != r->protected_ || v.total != r->total ||
	    v.nodes != r->nnodes || r->evictable + r->protected_ != r->total ||
	    v.leaves != r->heap.n || !evict_heap_valid(&r->heap))
		v.bad = 1;
	if (!v.bad && v.mine && memcmp(v.mine, r->held, map_words(r) * sizeof(uint64_t)) != 0)
		v.bad = 1;
	if (!v.bad && v.pages) {
		qsort(v.pages, v.npages, sizeof(int32_t), cmp_i32);
		for (i = 1; i < v.npages && !v.bad; i++)
			if (v.pages[i] == v.pages[i - 1])
				v.bad = 1;
	}
	pthread_mutex_unlock(&r->wlock);
	free(v.mine);
	free(v.pages);
	return v.bad ? kvs_fail(EUCLEAN) : 0;
}

/* ------------------------------------------------------------ statistics */

/* Every counter: the writer's under wlock, the readers' relaxed. */
static void radix_fill(void *obj, uint64_t *v)
{
	struct kvs_radix *r = obj;

	pthread_mutex_lock(&r->wlock);
#define W_GET(n) v[KVS_RADIX_STAT_##n] = r->st.n;
	W_STATS(W_GET)
#undef W_GET
	pthread_mutex_unlock(&r->wlock);
	v[KVS_RADIX_STAT_match_ro] = atomic_load_explicit(&r->rst.match_ro, memory_order_relaxed);
	v[KVS_RADIX_STAT_reader_retries] =
		atomic_load_explicit(&r->rst.retries, memory_order_relaxed);
	v[KVS_RADIX_STAT_reader_fallbacks] =
		atomic_load_explicit(&r->rst.fallbacks, memory_order_relaxed);
}

/* The print's first line (takes wlock for the counts). */
static void radix_header(void *obj, char *line, size_t size)
{
	struct kvs_radix *r = obj;
	uint64_t tokens = kvs_radix_tokens(r), nodes = kvs_radix_nodes(r);

	snprintf(line, size, "radix page_size %u policy %d tokens %llu nodes %llu\n", r->ps,
		 r->policy, (unsigned long long)tokens, (unsigned long long)nodes);
}

/**
 * kvs_radix_stat() - one statistic; kvs_radix_stat_get() reads one by name,
 * kvs_radix_stat_name() names one, kvs_radix_stats_print() prints every one
 * through a callback (a header line, then "name value  # description"
 * lines), all through lib/stats.c.
 * @radix: cache.
 * @item: statistic.
 *
 * Context: MT-Safe (takes wlock: not from an event callback; write_cb is
 * called without it).
 * Return: kvs_radix_stat(): its value, 0 for NULL or an unknown item;
 * kvs_radix_stat_name(): a static string, NULL for an unknown item; the
 * others: 0, or -1 with errno EINVAL (a NULL argument) or ENOENT (no such
 * statistic).
 */
KVSI_STATS_FAMILY(radix, KVS_RADIX_STATS, radix_fill, radix_header, &kvsi_style_desc, NULL, kvs_radix_t,
		  enum kvs_radix_stat);
