/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/slab_defs.h - what the slab allocator's files share.
 *
 * The allocator is one object split along its concurrency domains:
 *  - lib/mem/slab.c        the API: creation, allocation, free, shrink, reclaim;
 *  - lib/mem/slab_page.c   the lists and page moves every other part stands on;
 *  - lib/mem/slab_grow.c   growth and release: mapping and unmapping slabs, the
 *                      chunk pool, fences, decay, failure parking and the
 *                      worker thread; driver calls, made with no lock held;
 *  - lib/mem/slab_cpu.c    the per-thread caches (magazines), owner thread only;
 *  - lib/mem/slab_stat.c   statistics and validation, readers of everything.
 * The lock order they follow is written once, in common/common.h.
 */
#ifndef KVSLAB_SLAB_DEFS_H
#define KVSLAB_SLAB_DEFS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "internal.h"
#include "mem/fence.h"
#include "kvslab/slab.h"

#define NBUCKET 64
/* A page's count while kvs_slab_free_bulk() gives it back: not a count. */
#define REF_DYING UINT16_MAX
#define MAX_REF (UINT16_MAX - 1)

/*
 * A slab's state.  UNMAPPED: no memory, in the unmapped bitmap.  BUSY: a
 * thread is mapping or unmapping it with slab->lock dropped; nobody else
 * touches it.  MAPPED: on the empty list, a partial bucket, or full.
 * BROKEN: an unmap (or the undo of a failed map) failed, buffers
 * [bad_lo, bad_hi) may still be mapped; its pages are parked, neither free
 * nor held, until a later unmap succeeds (see slab_grow.c).
 */
enum slab_state { S_UNMAPPED, S_BUSY, S_MAPPED, S_BROKEN };
enum { L_NONE = -3, L_FULL = -2, L_EMPTY = -1 }; /* else a partial bucket */

struct slab_info {
	int64_t prev, next;	/* list links, -1 ends */
	uint32_t inuse;		/* pages not free in the slab */
	uint32_t hint;		/* first bitmap word that may hold a free bit */
	int32_t list;		/* L_* or bucket */
	uint8_t state;
	uint32_t bad_lo, bad_hi;	/* BROKEN: buffers that may be mapped */
	uint64_t empty_seq;	/* empty_gen when it last became empty */
	uint64_t empty_ns;	/* and when */
	struct chunkset *cs;	/* chunks mapped here */
};

/* One chunk per buffer: what backs one slab. */
struct chunkset {
	struct chunkset *next;
	kvs_chunk_t *c[];
};

struct mag {
	struct kvs_slab *owner;
	struct mag *prev, *next;	/* registry, under slab->lock */
	uint64_t drain_seen;
	_Atomic uint32_t count;		/* written by the owner only */
	uint32_t cap;
	/* What the fast paths compare count with: cap, or 0 from when a
	 * drain is asked (drain_gen moved) until the owner flushes; both
	 * written under slab->lock, read by the owner without it. */
	_Atomic uint32_t lim;
	_Atomic uint64_t alloc_fast, free_fast;
	uint32_t pages[];
};

/* The fence that orders an unmap after the device's last use of a slab. */
enum fence_state { F_IDLE, F_BUSY, F_PENDING };

struct kvs_slab {
	kvs_drv_t *drv;
	uint64_t id;			/* never reused: keys the TLS cache */
	uint32_t page_size, pps, nbuf;
	uint64_t bucket_mul;		/* (NBUCKET << 32) / pps */
	uint64_t nslabs, npages;
	size_t *token_bytes, *slab_bytes;
	size_t slab_total;		/* bytes of one slab, all buffers */
	kvs_devptr_t *base;
	size_t max_mapped;
	size_t limit;			/* run-time limit (kvs_pool_set_limit()); SIZE_MAX: none */
	uint32_t min_empty, max_empty, pool_target, magcap;
	uint64_t shrink_quiet, freed_since_grow;
	uint64_t decay_ns;		/* 0: no time-based give-back */
	clockid_t decay_clock;		/* what slab_decay_now() reads */
	uint64_t decay_slack;		/* its resolution when coarse, else 0 */
	unsigned int flags;

	pthread_mutex_t lock;
	struct slab_info *si;
	uint64_t *freebits;
	uint64_t *freewords;		/* bit per freebits word: set when it is not 0 */
	uint64_t *unmapped;		/* bit per slab */
	_Atomic uint16_t *ref;
	_Atomic uint64_t share_gen;	/* moves whenever a held page's count goes past 1 or back */
	int64_t empty_head, empty_tail, bucket_head[NBUCKET];
	uint64_t bucket_mask;
	uint64_t n_empty, n_partial, n_full, n_unmapped, n_busy, n_mapping, n_broken;
	uint64_t inuse_total;		/* pages of mapped slabs not free in them */
	uint64_t free_in_slabs;		/* set bits of mapped slabs */
	size_t bytes_mapped, bytes_charged, bytes_peak;
	struct chunkset *pool;
	uint32_t pool_count;
	struct chunkset *parked;	/* chunks whose release failed, to retry */
	uint64_t n_parked;		/* chunks in them */
	uint64_t nchunks;		/* chunks created and not released */
	uint64_t n_releasing;		/* chunks being released, lock dropped */
	struct mag *mags;
	_Atomic uint64_t drain_gen;
	pthread_key_t key;
	uint64_t stats[KVS_SLAB_STAT__COUNT];	/* lock-protected counters */
	_Atomic uint64_t drv_calls, drv_calls_caller, drv_creates_caller, drv_ns;

	/* Fences (slab_grow.c).  A slab that becomes empty is stamped with
	 * ++empty_gen; a fence records the device's progress after empty_gen
	 * reached fence_cover; once it completes, every slab stamped at or
	 * below fence_done may be unmapped.  The point itself is the fence
	 * module's (mem/fence.h): the engine's streams or its own fence. */
	struct kvsi_fence fence;
	bool fence_inited;
	uint64_t empty_gen, fence_cover, fence_done;
	uint64_t fence_token;
	int fence_state;

	pthread_t worker;
	pthread_cond_t work;		/* wakes the worker */
	pthread_cond_t mapped;		/* a map in flight ended */
	pthread_cond_t fenced;		/* the fence left F_BUSY */
	bool worker_on, stop, worker_asleep, worker_timer;
	uint32_t filling;		/* pool fills in flight */
};

#define ST(s, item) ((s)->stats[KVS_SLAB_STAT_##item])

/* Bring the summary bits of freebits words [@w, @wend) up to date. */
static inline void slab_words_sync(struct kvs_slab *s, uint64_t w, uint64_t wend)
{
	for (; w < wend; w++) {
		if (s->freebits[w])
			bit_set(s->freewords, w);
		else
			bit_clear(s->freewords, w);
	}
}

/* ... of the words of pages [@p, @end), @p < @end. */
static inline void slab_pages_sync(struct kvs_slab *s, uint64_t p, uint64_t end)
{
	slab_words_sync(s, p / 64, (end - 1) / 64 + 1);
}

/* A held page gained or lost a second reference: what the radix cache
 * has learned of which pages are held once is stale (after the count's
 * change, which the release orders before). */
static inline void slab_share_changed(struct kvs_slab *s)
{
	atomic_fetch_add_explicit(&s->share_gen, 1, memory_order_release);
}

/*
 * Counts four at a time.  The bulk paths read and write runs of counts as
 * 64-bit words: still atomic accesses (the __atomic builtins, relaxed, on a
 * may_alias type), so a reader of one count (kvs_slab_refcount(), another
 * thread's CAS on a page it shares) races with nothing, and ThreadSanitizer
 * sees atomics on both sides.  An _Atomic uint16_t is a plain uint16_t in
 * memory on every ABI we build for; the assertion below keeps it so.
 */
typedef uint64_t __attribute__((may_alias, aligned(8))) ref4_t;
#define REF4(v) ((uint64_t)(uint16_t)(v) * 0x0001000100010001ULL)
_Static_assert(sizeof(_Atomic uint16_t) == sizeof(uint16_t), "counts are bare uint16_t");

/* Counts @r[0..3], @r 8-byte aligned. */
static inline uint64_t ref4_load(_Atomic uint16_t *r)
{
	return __atomic_load_n((const ref4_t *)(void *)r, __ATOMIC_RELAXED);
}

static inline void ref4_store(_Atomic uint16_t *r, uint64_t v)
{
	__atomic_store_n((ref4_t *)(void *)r, v, __ATOMIC_RELAXED);
}

/*
 * The helpers below take the array's address once: an atomic access is a
 * compiler barrier, and s->ref would be read again before every one.
 */

/* Set counts [@p, @p + @len) to @v.  Only for pages no one else may
 * touch: free ones just taken, or ones whose last reference is ours. */
static inline void ref_run_set(struct kvs_slab *s, uint64_t p, uint64_t len, uint16_t v)
{
	_Atomic uint16_t *ref = s->ref;
	uint64_t end = p + len;

	for (; p < end && (p & 3); p++)
		atomic_store_explicit(&ref[p], v, memory_order_relaxed);
	for (; p + 16 <= end; p += 16) {
		ref4_store(ref + p, REF4(v));
		ref4_store(ref + p + 4, REF4(v));
		ref4_store(ref + p + 8, REF4(v));
		ref4_store(ref + p + 12, REF4(v));
	}
	for (; p + 4 <= end; p += 4)
		ref4_store(ref + p, REF4(v));
	for (; p < end; p++)
		atomic_store_explicit(&ref[p], v, memory_order_relaxed);
}

/* If counts [@p, @p + @len) all equal @from, set them to @to and return
 * true; else change nothing and return false.  One pass, four at a time.
 * Only for pages no one else may change while they are at @from. */
static inline bool ref_run_swap(struct kvs_slab *s, uint64_t p, uint64_t len, uint16_t from,
				uint16_t to)
{
	_Atomic uint16_t *ref = s->ref;
	uint64_t q = p, end = p + len;

	for (; q < end && (q & 3); q++) {
		if (atomic_load_explicit(&ref[q], memory_order_relaxed) != from)
			goto undo;
		atomic_store_explicit(&ref[q], to, memory_order_relaxed);
	}
	for (; q + 16 <= end; q += 16) {
		if ((ref4_load(ref + q) ^ REF4(from)) | (ref4_load(ref + q + 4) ^ REF4(from)) |
		    (ref4_load(ref + q + 8) ^ REF4(from)) | (ref4_load(ref + q + 12) ^ REF4(from)))
			goto undo;
		ref4_store(ref + q, REF4(to));
		ref4_store(ref + q + 4, REF4(to));
		ref4_store(ref + q + 8, REF4(to));
		ref4_store(ref + q + 12, REF4(to));
	}
	for (; q + 4 <= end; q += 4) {
		if (ref4_load(ref + q) != REF4(from))
			goto undo;
		ref4_store(ref + q, REF4(to));
	}
	for (; q < end; q++) {
		if (atomic_load_explicit(&ref[q], memory_order_relaxed) != from)
			goto undo;
		atomic_store_explicit(&ref[q], to, memory_order_relaxed);
	}
	return true;
undo:
	ref_run_set(s, p, q - p, from);
	return false;
}

extern __thread struct kvsi_tls_mag {
	uint64_t id;
	struct mag *mag;
} kvsi_slab_tls __attribute__((tls_model("initial-exec")));

/*
 * A bulk free's give-back (slab_page.c): the slab whose pages it is giving
 * back (i, its first page), how many so far and the lowest bitmap word of
 * the slab they are in.  Pages go back in any order; the slab is relisted
 * when the give-back leaves it.  Start with SLAB_PUTC_INIT(s): its first
 * page is in no slab (p - first >= pps for every page).
 */
struct slab_putc {
	uint64_t i, first;
	uint32_t cnt, minw;
};
#define SLAB_PUTC_INIT(s) {.i = UINT64_MAX, .first = 0 - (uint64_t)(s)->pps - 1}

/* slab_page.c: lists and page moves, slab->lock held. */
void slab_list_del(struct kvs_slab *s, uint64_t i);
void slab_list_add(struct kvs_slab *s, uint64_t i, int32_t list);
int32_t slab_want_list(struct kvs_slab *s, uint32_t inuse);
void slab_relist(struct kvs_slab *s, uint64_t i);
uint32_t slab_take_many(struct kvs_slab *s, uint64_t i, uint32_t n, uint32_t *out);
void slab_put(struct kvs_slab *s, uint32_t p);
void slab_put_many(struct kvs_slab *s, size_t n, const uint32_t *pages);
uint32_t slab_take_runs(struct kvs_slab *s, uint64_t i, uint32_t n, uint32_t *out, bool hold);
void slab_put_done(struct kvs_slab *s, uint64_t i, uint32_t cnt, uint32_t minw);
int64_t slab_pick(struct kvs_slab *s);
void slab_putc_switch(struct kvs_slab *s, struct slab_putc *c, uint64_t p);
void slab_putc_end(struct kvs_slab *s, struct slab_putc *c);
void slab_putc_run(struct kvs_slab *s, struct slab_putc *c, uint64_t p, uint64_t len, bool whole);

/* Give back page @p through cursor @c if a bulk free left it dying (its
 * last reference dropped by this call), setting its count to 0; a page
 * listed twice finds 0 the second time and is skipped.  Lock held. */
static inline __attribute__((always_inline)) void slab_putc_page(struct kvs_slab *s,
								 struct slab_putc *c, uint64_t p)
{
	_Atomic uint16_t *r = &s->ref[p];
	uint32_t w;

	if (atomic_load_explicit(r, memory_order_relaxed) != REF_DYING)
		return;
	atomic_store_explicit(r, 0, memory_order_relaxed);
	if (unlikely(p - c->first >= s->pps))
		slab_putc_switch(s, c, p);
	bit_set(s->freebits, p);
	bit_set(s->freewords, p / 64);
	c->cnt++;
	w = (uint32_t)((p - c->first) >> 6);
	if (w < c->minw)
		c->minw = w;
}

/* slab_grow.c: growth and release. */
int slab_grow_locked(struct kvs_slab *s);
int slab_claim_locked(struct kvs_slab *s, uint64_t i);
int slab_reclaim_locked(struct kvs_slab *s, bool all, uint64_t *wake_ns);
int slab_release_pool_locked(struct kvs_slab *s);
int slab_reclaim_to_locked(struct kvs_slab *s, size_t cap);
void slab_after_free_locked(struct kvs_slab *s);
int alloc_failed_unlock(struct kvs_slab *s, int err);	/* lib/mem/slab.c */
void slab_after_alloc_locked(struct kvs_slab *s);
uint64_t slab_room_locked(const struct kvs_slab *s);
size_t slab_cap(const struct kvs_slab *s);
int slab_worker_start(struct kvs_slab *s);
void slab_worker_stop(struct kvs_slab *s);
int slab_teardown(struct kvs_slab *s);

/* Drop one reference; 1 when it was the last, 0 when others remain.  The
 * last one leaves @zero behind: 0, or REF_DYING for a bulk free that has yet
 * to give the page back. */
static inline __attribute__((always_inline)) int unref(struct kvs_slab *s, uint32_t p,
						       uint16_t zero)
{
	uint16_t r;

	if (unlikely(p >= s->npages))
		return kvs_fail(EINVAL);
	r = atomic_load_explicit(&s->ref[p], memory_order_relaxed);
	for (;;) {
		if (unlikely(r == 0 || r == REF_DYING))
			return kvs_fail(EINVAL);
		if (r == 1) {
			atomic_store_explicit(&s->ref[p], zero, memory_order_relaxed);
			return 1;
		}
		if (atomic_compare_exchange_weak_explicit(&s->ref[p], &r, r - 1,
							  memory_order_relaxed,
							  memory_order_relaxed)) {
			slab_share_changed(s);
			return 0;
		}
	}
}


/*
 * The clock decay counts with (empty_ns, the decay check, the worker's
 * wake-up): for decay_ms of a second and more, CLOCK_MONOTONIC_COARSE,
 * whose resolution is a tick (1-10 ms, under 1% of the time counted) and
 * whose read costs about 4 ns against 16 for CLOCK_MONOTONIC on the
 * project's VM: a slab that empties and fills again reads it on every
 * bulk alloc + free, an eighth of the pair's time.  Below a second, the
 * precise clock.
 */
static inline uint64_t slab_decay_now(const struct kvs_slab *s)
{
	struct timespec ts;

	clock_gettime(s->decay_clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif /* KVSLAB_SLAB_DEFS_H */
