/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/radix_int.h - what the files of the radix cache share: its
 * structures (a node, its segment and its children; the tree), the
 * accessors readers and the writer use, and the functions one file gives
 * the others.  The design is in lib/cache/radix.c's essay.
 *
 *   radix.c        the tree: children, the writer, create, insert, lock,
 *                  reset, getters and statistics
 *   radix_seg.c    segment memory (the per-tree block cache) and RCU frees
 *   radix_match.c  matching, under wlock and lock-free
 *   radix_check.c  trust at the boundary (an insert's input) and validate
 *   radix_evict.c  eviction: the policy's heap and slab-aware picks
 *   radix_pool.c   the cache's operations for its pool (lib/mem/cacheops.h)
 *
 * One tree core, not built yet.  The tiered cache (lib/cache/hiradix*.c)
 * is a second tree: the same keys cut in pages, children found by a hash of
 * (extra key, first page), splits, LRU/priority eviction of leaves.  What
 * differs is the payload and its life: a radix node holds one segment of
 * device locations; a tiered node holds device locations or a tombstone,
 * host pages, backup/load state and storage keys.  The outline of one core
 * under both, as rax keeps an opaque value per key:
 *  - the core owns nodes (keys in segments, the children array under RCU,
 *    parent, lock_ref, the eviction key) and does match, insert, split,
 *    lock/unlock, leaf eviction and validate, with lock-free readers;
 *  - a payload interface per cache: split(payload, at) -> two payloads,
 *    evictable(payload) (a tiered node in flight is not), evict(payload)
 *    (free device pages, or make a tombstone that keeps host pages), the
 *    pages it holds (for the held map and lib/mem/cacheops.h), and events;
 *  - the tiered tree's node becomes core node + payload; its transfer
 *    controller and L3 engine stay as they are, calling the core.
 * It was left for a later issue: it changes every tiered path at once.
 */
#ifndef KVSLAB_CACHE_RADIX_INT_H
#define KVSLAB_CACHE_RADIX_INT_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <urcu-bp.h>

#include "cache/evict_heap.h"
#include "internal.h"
#include "cache/kvevent.h"
#include "kvslab/radix.h"
#include "kvslab/slab.h"

/* ThreadSanitizer's view of the grace period (lib/internal.h): lib/cache/radix_seg.c. */
extern char rx_rcu_gp;

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
	uint32_t n, cap;		/* entries, and room for them */
	struct {
		uint32_t slab, cnt;
	} e[];
};

#define W_STATS(X) X(matches) X(hit_tokens) X(inserts) X(inserted_tokens) X(splits) \
	X(evictions) X(evicted_tokens) X(resets) X(query_tokens) X(evict_sections) \
	X(evict_section_ns) X(evict_section_max_ns) X(evict_section_cpu_max_ns)

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
	pthread_mutex_t wlock;		/* taken through rx_wlock() */
	_Atomic uint32_t wwait;		/* writers waiting for wlock (rx_wlock()) */
	_Atomic uint32_t wtaken;	/* wlock taken by a writer that waited */
	_Atomic uint64_t seq;		/* odd while the writer changes the tree */
	struct rnode *root;
	uint64_t clock;
	uint64_t evictable, protected_, total, nnodes;
	struct evict_heap heap;
	uint32_t window;		/* slab-aware eviction: leaves weighed; 0: off */
	uint32_t pps;			/* the slab allocator's pages per slab */
	uint32_t *slab_cnt;		/* slab-aware scratch, one per slab, all 0 between calls */
	uint32_t *slab_gone;		/* pages of each slab the eviction under way will free */
	uint32_t *slab_list;		/* slab_hist_of()'s scratch: the slabs a leaf touches */
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


/* Tokens two keys share, page-aligned down.  Compares 256 bytes a step
 * (memcmp's vector compares: 1.25-1.5x the 32-byte loop alone), then 32:
 * keys run to tens of thousands of tokens and this is most of a match. */
static inline uint32_t common_prefix(const int32_t *a, const int32_t *b, uint32_t n, uint32_t ps)
{
	uint32_t i = 0;

	while (i + 64 <= n && memcmp(a + i, b + i, 256) == 0)
		i += 64;
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

/* Bitmap words for one bit per pool page. */
static inline size_t map_words(const struct kvs_radix *r)
{
	return (size_t)((r->cap / r->ps + 63) / 64);
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

static inline void rcu_retire(struct rcu_head *h, void (*cb)(struct rcu_head *))
{
	KVSI_TSAN_RELEASE(&rx_rcu_gp);
	call_rcu(h, cb);
}

/*
 * Take r->wlock, counted in r->wwait while waiting for it, so that a long
 * writer that works in sections (kvs_radix_evict()) can see that another
 * writer waits and let it in between sections (rx_wlock_yield()).
 * Uncontended, one trylock and nothing more.
 */
static inline void rx_wlock(struct kvs_radix *r)
{
	if (pthread_mutex_trylock(&r->wlock) == 0)
		return;
	atomic_fetch_add_explicit(&r->wwait, 1, memory_order_relaxed);
	pthread_mutex_lock(&r->wlock);
	atomic_fetch_sub_explicit(&r->wwait, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&r->wtaken, 1, memory_order_relaxed);
}

/* Release wlock between two sections of a long writer, and if writers
 * were waiting for it, wait until one of them has had it (or none waits
 * any more): a mutex lets the releasing thread take it straight back, and
 * a waiter woken by the release would find it taken again. */
static inline void rx_wlock_yield(struct kvs_radix *r)
{
	uint32_t t0 = atomic_load_explicit(&r->wtaken, memory_order_relaxed);

	pthread_mutex_unlock(&r->wlock);
	while (atomic_load_explicit(&r->wwait, memory_order_relaxed) > 0 &&
	       atomic_load_explicit(&r->wtaken, memory_order_relaxed) == t0)
		sched_yield();
}

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

/* Pages [@p, @p + @np) leave the tree: out of the held map and of any
 * slab-aware count (all 0 but during an eviction's picks). */
static inline void run_gone(struct kvs_radix *r, uint64_t p, uint32_t np)
{
	bits_fill(r->held, p, p + np, false);
	if (r->window)
		for (uint64_t q = p; q < p + np; q = (q / r->pps + 1) * r->pps)
			r->slab_gone[q / r->pps] = 0;
}

/* Find the child of @n whose first page is @t under @extra.  Safe for
 * readers (under RCU) and the writer. */
static inline struct rnode *rx_find_child(const struct kvs_radix *r, const struct rnode *n,
					    uint64_t extra, const int32_t *t)
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

/* Shared between the files of the cache (see each definition). */
int rx_check_insert(struct kvs_radix *r, const int32_t *locs, size_t n);
void rx_evict_finish(struct kvs_radix *r, struct rnode *gone);
bool rx_evict_one(struct kvs_radix *r, struct rnode *leaf, struct rnode ***tail);
void rx_free_kids_cb(struct rcu_head *h);
int rx_kids_update(struct rnode *n, struct rnode *add, struct rnode *del);
void rx_free_locs(struct kvs_radix *r, const int32_t *locs, size_t n);
void rx_free_node_cb(struct rcu_head *h);
void rx_free_seg_cb(struct rcu_head *h);
void rx_heap_fix(struct kvs_radix *r, struct rnode *n);
void rx_lock_path(struct kvs_radix *r, struct rnode *n);
void rx_unlock_path(struct kvs_radix *r, struct rnode *n);
void rx_seg_cache_drain(struct seg_cache *sc);
void rx_seg_free(struct rseg *s);
struct rseg *rx_seg_new(struct seg_cache *sc, uint32_t len, const int32_t *keys,
			    const int32_t *vals);
struct rseg *rx_seg_view(struct rseg *src, uint32_t off, uint32_t len);
void rx_touch(struct kvs_radix *r, struct rnode *n, int priority);
struct rnode *rx_split(struct kvs_radix *r, struct rnode *c, uint32_t m);

/* lib/cache/radix_evict.c: called between two sections of an eviction,
 * without wlock, when set (tests/regression/reg_evict_sections.c). */
extern void (*kvsi_radix_evict_test_hook)(void *arg, kvs_radix_t *radix);
extern void *kvsi_radix_evict_test_arg;
/* Its bounds: leaves and tokens a section, and the time after which a
 * section starts no leaf (SIZE_MAX each and UINT64_MAX: one section). */
extern size_t kvsi_radix_evict_section_leaves, kvsi_radix_evict_section_tokens;
extern uint64_t kvsi_radix_evict_section_ns;

/* lib/cache/radix_pool.c: the operations the cache registers on its pool. */
struct kvsi_cache_ops;
extern const struct kvsi_cache_ops kvsi_radix_cache_ops;

#endif /* KVSLAB_CACHE_RADIX_INT_H */
