/* SPDX-License-Identifier: MIT */
/*
 * lib/slab.c - the slab allocator for KV pages (Linux SLUB in spirit).
 *
 * What it owns.  A set of buffers (one virtual reservation each: a layer's K
 * range, its V range, an MLA latent range) carved into slabs.  Slab s covers
 * pages [s * pps, (s + 1) * pps) and, in buffer b, the bytes
 * [s * slab_bytes[b], (s + 1) * slab_bytes[b]), a whole number of driver
 * granules, so one chunk per buffer backs it.  A slab is mapped in every
 * buffer or in none: mapping unwinds on the first failure.
 *
 * Data structures.
 *  - freebits: one bit per page, set when the page is free *in its slab*
 *    (meaningful for mapped slabs only).  A slab allocates its lowest free
 *    page, starting from a per-slab word hint, which keeps the low pages of
 *    a slab busy and the high ones free.
 *  - ref: one 16-bit reference count per page.  0 means free (in a slab or
 *    in a per-thread cache); n > 0 means n holders.
 *  - lists of mapped slabs: an empty list and NBUCKET partial lists bucketed
 *    by fullness, with a bitmap of non-empty buckets, so "the fullest partial
 *    slab" is one find-last-set away.  Full slabs sit on no list.  Unmapped
 *    slabs are a bitmap; the lowest is mapped first.
 *  - a pool of chunk sets (one chunk per buffer) that were created and are
 *    not mapped, so that growth makes no creation call, the expensive one.
 *  - per-thread magazines (the kernel's per-CPU caches): up to `magazine`
 *    free pages a thread may hand out and take back without the lock.
 *
 * Locking.  slab->lock (a mutex) protects the bitmaps, lists, counts, pool
 * and magazine registry.  It is never held across a driver call: a slab
 * being mapped or unmapped is marked BUSY and sits on no list, so nobody
 * else touches it, and the bytes it will map are charged to the limit before
 * the lock is dropped.  A magazine is touched only by its owning thread
 * (fast path, no lock) and, under slab->lock, by that same thread's refill
 * and flush; other threads never read a magazine's pages.  kvs_slab_shrink()
 * therefore cannot empty other threads' caches directly: it bumps drain_gen,
 * and each thread gives its cache back on its next call.  Reference counts
 * are atomics: the last reference of a page may be dropped with a plain
 * store because, as with kref, a new reference may only be taken by someone
 * who already holds one.
 *
 * The worker (KVS_SLAB_F_WORKER) is one persistent thread that keeps
 * min_empty empty slabs mapped ahead of demand, the chunk pool filled, and
 * unmaps empty slabs above max_empty, so that the caller's thread makes no
 * driver call in steady state; the counters say how many it still made.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvslab/slab.h"

#define NBUCKET 64
#define MAX_REF UINT16_MAX

enum slab_state { S_UNMAPPED, S_BUSY, S_MAPPED, S_BROKEN };
enum { L_NONE = -3, L_FULL = -2, L_EMPTY = -1 }; /* else a partial bucket */

struct slab_info {
	int64_t prev, next;	/* list links, -1 ends */
	uint32_t inuse;		/* pages not free in the slab */
	uint32_t hint;		/* first bitmap word that may hold a free bit */
	int32_t list;		/* L_* or bucket */
	uint8_t state;
	struct chunkset *cs;	/* chunks mapped here */
};

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
	_Atomic uint64_t alloc_fast, free_fast;
	uint32_t pages[];
};

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
	uint32_t min_empty, max_empty, pool_target, magcap;
	uint64_t shrink_quiet, freed_since_grow;
	unsigned int flags;

	pthread_mutex_t lock;
	struct slab_info *si;
	uint64_t *freebits;
	uint64_t *unmapped;		/* bit per slab */
	_Atomic uint16_t *ref;
	int64_t empty_head, bucket_head[NBUCKET];
	uint64_t bucket_mask;
	uint64_t n_empty, n_partial, n_full, n_unmapped, n_busy, n_mapping;
	uint64_t inuse_total;		/* pages of mapped slabs not free in them */
	uint64_t free_in_slabs;		/* set bits of mapped slabs */
	size_t bytes_mapped, bytes_charged, bytes_peak;
	struct chunkset *pool;
	uint32_t pool_count;
	struct mag *mags;
	_Atomic uint64_t drain_gen;
	pthread_key_t key;
	uint64_t stats[KVS_SLAB_STAT__COUNT];	/* lock-protected counters */
	_Atomic uint64_t drv_calls, drv_calls_caller, drv_creates_caller, drv_ns;

	pthread_t worker;
	pthread_cond_t work;
	bool worker_on, stop;
};

static _Atomic uint64_t next_slab_id = 1;
static __thread struct {
	uint64_t id;
	struct mag *mag;
} tls_mag __attribute__((tls_model("initial-exec")));
static __thread bool tls_is_worker __attribute__((tls_model("initial-exec")));

#define ST(s, item) ((s)->stats[KVS_SLAB_STAT_##item])

/* ------------------------------------------------------------------ lists */

static int32_t want_list(struct kvs_slab *s, uint32_t inuse)
{
	if (inuse == 0)
		return L_EMPTY;
	if (inuse >= s->pps)
		return L_FULL;
	/* floor(inuse * NBUCKET / pps) without a division on the hot path */
	return (int32_t)(((uint64_t)inuse * s->bucket_mul) >> 32);
}

static int64_t *list_head(struct kvs_slab *s, int32_t list)
{
	return list == L_EMPTY ? &s->empty_head : &s->bucket_head[list];
}

static void list_del(struct kvs_slab *s, uint64_t i)
{
	struct slab_info *x = &s->si[i];

	if (x->list == L_FULL) {
		s->n_full--;
	} else if (x->list != L_NONE) {
		int64_t *head = list_head(s, x->list);

		if (x->prev >= 0)
			s->si[x->prev].next = x->next;
		else
			*head = x->next;
		if (x->next >= 0)
			s->si[x->next].prev = x->prev;
		if (x->list == L_EMPTY)
			s->n_empty--;
		else {
			s->n_partial--;
			if (*head < 0)
				s->bucket_mask &= ~(1ULL << x->list);
		}
	}
	x->list = L_NONE;
	x->prev = x->next = -1;
}

static void list_add(struct kvs_slab *s, uint64_t i, int32_t list)
{
	struct slab_info *x = &s->si[i];
	int64_t *head;

	x->list = list;
	x->prev = x->next = -1;
	if (list == L_FULL) {
		s->n_full++;
		return;
	}
	head = list_head(s, list);
	x->next = *head;
	if (*head >= 0)
		s->si[*head].prev = (int64_t)i;
	*head = (int64_t)i;
	if (list == L_EMPTY) {
		s->n_empty++;
	} else {
		s->n_partial++;
		s->bucket_mask |= 1ULL << list;
	}
}

static void relist(struct kvs_slab *s, uint64_t i)
{
	int32_t want = want_list(s, s->si[i].inuse);

	if (s->si[i].list != want) {
		list_del(s, i);
		list_add(s, i, want);
	}
}

/* ------------------------------------------------------------ page moves */

/* Take up to @n free pages of mapped slab @i, lowest first.  Lock held. */
static uint32_t slab_take_many(struct kvs_slab *s, uint64_t i, uint32_t n, uint32_t *out)
{
	struct slab_info *x = &s->si[i];
	uint64_t first = i * s->pps, end = first + s->pps;
	uint64_t w = (first + (uint64_t)x->hint * 64) / 64, wend = (end + 63) / 64;
	uint32_t got = 0;

	for (; w < wend && got < n; w++) {
		uint64_t bits = s->freebits[w];

		/* A word may be shared with the neighbour slabs: mask them off. */
		if (w * 64 < first)
			bits &= ~0ULL << (first - w * 64);
		if (w * 64 + 64 > end)
			bits &= ~0ULL >> (w * 64 + 64 - end);
		if (bits) {
			uint64_t taken = 0;

			while (bits && got < n) {
				uint64_t b = bits & -bits;

				bits ^= b;
				taken |= b;
				out[got++] = (uint32_t)(w * 64 + (uint64_t)__builtin_ctzll(b));
			}
			s->freebits[w] &= ~taken;
		}
		if (got == n)
			break;
	}
	x->hint = (uint32_t)((w > first / 64 ? w * 64 - first : 0) / 64);
	if (x->hint * 64ULL >= s->pps)
		x->hint = 0;
	x->inuse += got;
	s->inuse_total += got;
	s->free_in_slabs -= got;
	relist(s, i);
	return got;
}

/* Give free page @p back to its slab.  Lock held. */
static void slab_put(struct kvs_slab *s, uint32_t p)
{
	uint64_t i = p / s->pps;
	struct slab_info *x = &s->si[i];
	uint32_t w = (uint32_t)((p - i * s->pps) / 64);

	bit_set(s->freebits, p);
	if (w < x->hint)
		x->hint = w;
	s->freed_since_grow++;
	x->inuse--;
	s->inuse_total--;
	s->free_in_slabs++;
	relist(s, i);
}

/* Give back the pages of @pages whose @last flag is set (all of them when
 * @last is NULL), a run of pages of one slab at a time, so each slab is
 * relisted once per run.  Lock held. */
static void slab_put_many(struct kvs_slab *s, size_t n, const uint32_t *pages,
			  const unsigned char *last)
{
	size_t k = 0;

	while (k < n) {
		uint64_t i, first;
		uint32_t cnt = 0, minw;
		struct slab_info *x;

		if (last && !last[k]) {
			k++;
			continue;
		}
		i = pages[k] / s->pps;
		first = i * s->pps;
		x = &s->si[i];
		minw = x->hint;
		/* Pages of the same slab: one unsigned compare, no division. */
		for (; k < n && ((last && !last[k]) || pages[k] - first < s->pps); k++) {
			uint32_t w;

			if (last && !last[k])
				continue;
			bit_set(s->freebits, pages[k]);
			w = (uint32_t)((pages[k] - first) >> 6);
			if (w < minw)
				minw = w;
			cnt++;
		}
		x->hint = minw;
		s->freed_since_grow += cnt;
		x->inuse -= cnt;
		s->inuse_total -= cnt;
		s->free_in_slabs += cnt;
		relist(s, i);
	}
}

/* The mapped slab to allocate from: fullest partial, else an empty one. */
static int64_t pick_slab(struct kvs_slab *s)
{
	if (s->bucket_mask)
		return s->bucket_head[63 - __builtin_clzll(s->bucket_mask)];
	return s->empty_head;
}

/* ---------------------------------------------------------- driver calls */

#define DRV(s, expr)                                                          \
	({                                                                    \
		uint64_t t0_ = kvs_now_ns();                                  \
		int r_ = (expr);                                              \
		int e_ = errno;                                               \
		atomic_fetch_add_explicit(&(s)->drv_ns, kvs_now_ns() - t0_,   \
					  memory_order_relaxed);              \
		atomic_fetch_add_explicit(&(s)->drv_calls, 1, memory_order_relaxed); \
		if (!tls_is_worker)                                           \
			atomic_fetch_add_explicit(&(s)->drv_calls_caller, 1,  \
						  memory_order_relaxed);      \
		errno = e_;                                                   \
		r_;                                                           \
	})

static void chunkset_release(struct kvs_slab *s, struct chunkset *cs)
{
	uint32_t b;

	for (b = 0; b < s->nbuf; b++)
		if (cs->c[b])
			DRV(s, kvs_drv_chunk_release(s->drv, cs->c[b]));
	free(cs);
}

/* Create one chunk per buffer; no lock held. */
static struct chunkset *chunkset_create(struct kvs_slab *s)
{
	struct chunkset *cs = calloc(1, sizeof(*cs) + s->nbuf * sizeof(cs->c[0]));
	uint32_t b;

	if (!cs) {
		errno = ENOMEM;
		return NULL;
	}
	for (b = 0; b < s->nbuf; b++) {
		if (!tls_is_worker)
			atomic_fetch_add_explicit(&s->drv_creates_caller, 1, memory_order_relaxed);
		if (DRV(s, kvs_drv_chunk_create(s->drv, s->slab_bytes[b], &cs->c[b])) < 0) {
			int e = errno;

			cs->c[b] = NULL;
			chunkset_release(s, cs);
			errno = e;
			return NULL;
		}
	}
	return cs;
}

/* Keep @cs in the pool if there is room, else release it.  Lock held. */
static void pool_put_locked(struct kvs_slab *s, struct chunkset *cs, struct chunkset **rel)
{
	if (s->pool_count < s->pool_target) {
		cs->next = s->pool;
		s->pool = cs;
		s->pool_count++;
	} else {
		cs->next = *rel;
		*rel = cs;
	}
}

static void release_list(struct kvs_slab *s, struct chunkset *rel)
{
	while (rel) {
		struct chunkset *n = rel->next;

		chunkset_release(s, rel);
		rel = n;
	}
}

static void unmap_buffers(struct kvs_slab *s, uint64_t i, uint32_t nb)
{
	uint32_t b;

	for (b = 0; b < nb; b++)
		DRV(s, kvs_drv_unmap(s->drv, s->base[b] + i * s->slab_bytes[b], s->slab_bytes[b]));
}

/*
 * Map slab @i, which the caller marked BUSY and charged to the limit.
 * Called and returns with the lock held; drops it around driver calls.
 * On failure the slab is unmapped again, its chunks pooled, errno set.
 */
static int slab_map_locked(struct kvs_slab *s, uint64_t i)
{
	struct chunkset *cs = s->pool, *rel = NULL;
	uint32_t b = 0;
	int err = 0;

	if (cs) {
		s->pool = cs->next;
		s->pool_count--;
	}
	s->n_mapping++;
	pthread_mutex_unlock(&s->lock);
	if (!cs)
		cs = chunkset_create(s);
	if (!cs) {
		err = errno;
		goto out;
	}
	for (b = 0; b < s->nbuf; b++)
		if (DRV(s, kvs_drv_map(s->drv, s->base[b] + i * s->slab_bytes[b], cs->c[b])) < 0)
			goto unwind;
	for (b = 0; b < s->nbuf; b++)
		if (DRV(s, kvs_drv_set_access(s->drv, s->base[b] + i * s->slab_bytes[b],
					      s->slab_bytes[b], KVS_ACCESS_RW)) < 0) {
			b = s->nbuf;
			goto unwind;
		}
	goto out;
unwind:
	err = errno;
	unmap_buffers(s, i, b);
out:
	pthread_mutex_lock(&s->lock);
	s->n_mapping--;
	if (err) {
		if (cs)
			pool_put_locked(s, cs, &rel);
		s->bytes_charged -= s->slab_total;
		s->si[i].state = S_UNMAPPED;
		bit_set(s->unmapped, i);
		s->n_unmapped++;
		s->n_busy--;
		ST(s, map_fail)++;
		if (rel) {
			pthread_mutex_unlock(&s->lock);
			release_list(s, rel);
			pthread_mutex_lock(&s->lock);
		}
		errno = err;
		return -1;
	}
	s->si[i].cs = cs;
	s->si[i].state = S_MAPPED;
	s->si[i].inuse = 0;
	s->si[i].hint = 0;
	s->n_busy--;
	bits_fill(s->freebits, i * s->pps, (i + 1) * s->pps, true);
	s->free_in_slabs += s->pps;
	s->bytes_mapped += s->slab_total;
	if (s->bytes_mapped > s->bytes_peak)
		s->bytes_peak = s->bytes_mapped;
	ST(s, slab_maps)++;
	s->freed_since_grow = 0;
	list_add(s, i, L_EMPTY);
	return 0;
}

/* Claim unmapped slab @i and map it.  Lock held (dropped inside). */
static int claim_locked(struct kvs_slab *s, uint64_t i)
{
	if (s->max_mapped && s->bytes_charged + s->slab_total > s->max_mapped)
		return kvs_fail(ENOMEM);
	bit_clear(s->unmapped, i);
	s->n_unmapped--;
	s->n_busy++;
	s->si[i].state = S_BUSY;
	s->bytes_charged += s->slab_total;
	return slab_map_locked(s, i);
}

/* Map the lowest unmapped slab.  Lock held (dropped inside). */
static int grow_locked(struct kvs_slab *s)
{
	if (s->n_unmapped == 0)
		return kvs_fail(ENOMEM);
	return claim_locked(s, bits_next_set(s->unmapped, 0, s->nslabs));
}

/* Unmap empty slab @i.  Lock held (dropped inside).  On a driver failure
 * the slab is mapped back if possible, else set aside as broken. */
static int slab_unmap_locked(struct kvs_slab *s, uint64_t i)
{
	struct slab_info *x = &s->si[i];
	struct chunkset *cs = x->cs, *rel = NULL;
	uint32_t b;
	int err = 0;

	list_del(s, i);
	x->state = S_BUSY;
	s->n_busy++;
	bits_fill(s->freebits, i * s->pps, (i + 1) * s->pps, false);
	s->free_in_slabs -= s->pps;
	pthread_mutex_unlock(&s->lock);
	for (b = 0; b < s->nbuf; b++) {
		if (DRV(s, kvs_drv_unmap(s->drv, s->base[b] + i * s->slab_bytes[b],
					 s->slab_bytes[b])) < 0) {
			err = errno;
			break;
		}
	}
	if (err) {
		/* Put the unmapped part back so the slab is whole again. */
		uint32_t k;
		bool ok = true;

		for (k = 0; k < b && ok; k++) {
			kvs_devptr_t a = s->base[k] + i * s->slab_bytes[k];

			ok = DRV(s, kvs_drv_map(s->drv, a, cs->c[k])) == 0 &&
			     DRV(s, kvs_drv_set_access(s->drv, a, s->slab_bytes[k],
						       KVS_ACCESS_RW)) == 0;
		}
		pthread_mutex_lock(&s->lock);
		s->n_busy--;
		if (ok) {
			x->state = S_MAPPED;
			bits_fill(s->freebits, i * s->pps, (i + 1) * s->pps, true);
			s->free_in_slabs += s->pps;
			x->hint = 0;
			list_add(s, i, L_EMPTY);
		} else {
			x->state = S_BROKEN; /* keeps its charge: memory may still be mapped */
		}
		errno = err;
		return -1;
	}
	pthread_mutex_lock(&s->lock);
	x->cs = NULL;
	x->state = S_UNMAPPED;
	bit_set(s->unmapped, i);
	s->n_unmapped++;
	s->n_busy--;
	s->bytes_mapped -= s->slab_total;
	s->bytes_charged -= s->slab_total;
	ST(s, slab_unmaps)++;
	pool_put_locked(s, cs, &rel);
	if (rel) {
		pthread_mutex_unlock(&s->lock);
		release_list(s, rel);
		pthread_mutex_lock(&s->lock);
	}
	return 0;
}

/* Unmap empty slabs while more than @keep are mapped.  Lock held. */
static int shrink_to_locked(struct kvs_slab *s, uint64_t keep)
{
	int rc = 0;

	while (s->n_empty > keep && !(s->flags & KVS_SLAB_F_STATIC)) {
		if (slab_unmap_locked(s, (uint64_t)s->empty_head) < 0) {
			rc = -1;
			break;
		}
	}
	return rc;
}

/* After pages went back: hand surplus empty slabs to the worker or unmap
 * them here.  Lock held. */
static bool shrink_due(const struct kvs_slab *s)
{
	return s->n_empty > s->max_empty && !(s->flags & KVS_SLAB_F_STATIC) &&
	       s->freed_since_grow >= s->shrink_quiet;
}

static void after_free_locked(struct kvs_slab *s)
{
	if (!shrink_due(s))
		return;
	if (s->worker_on)
		pthread_cond_signal(&s->work);
	else
		(void)shrink_to_locked(s, s->min_empty);
}

static void after_alloc_locked(struct kvs_slab *s)
{
	if (s->worker_on && (s->n_empty + s->n_mapping < s->min_empty ||
			     s->pool_count < s->pool_target))
		pthread_cond_signal(&s->work);
}

/* --------------------------------------------------------------- worker */

static void *worker_main(void *arg)
{
	struct kvs_slab *s = arg;

	tls_is_worker = true;
	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		if (s->n_empty + s->n_mapping < s->min_empty && s->n_unmapped > 0 &&
		    !(s->max_mapped && s->bytes_charged + s->slab_total > s->max_mapped)) {
			if (grow_locked(s) < 0)
				goto wait; /* the driver said no: retry when woken */
			continue;
		}
		if (shrink_due(s)) {
			if (shrink_to_locked(s, s->min_empty) < 0)
				goto wait;
			continue;
		}
		if (s->pool_count < s->pool_target) {
			struct chunkset *cs;

			pthread_mutex_unlock(&s->lock);
			cs = chunkset_create(s);
			pthread_mutex_lock(&s->lock);
			if (!cs)
				goto wait;
			cs->next = s->pool;
			s->pool = cs;
			s->pool_count++;
			continue;
		}
wait:
		if (!s->stop)
			pthread_cond_wait(&s->work, &s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ------------------------------------------------------------ magazines */

static void mag_flush_locked(struct kvs_slab *s, struct mag *m, uint32_t keep)
{
	uint32_t n = atomic_load_explicit(&m->count, memory_order_relaxed);

	if (n > keep) {
		slab_put_many(s, n - keep, m->pages + keep, NULL);
		n = keep;
	}
	atomic_store_explicit(&m->count, n, memory_order_relaxed);
	m->drain_seen = atomic_load_explicit(&s->drain_gen, memory_order_relaxed);
}

static void mag_unlink_locked(struct kvs_slab *s, struct mag *m)
{
	if (m->prev)
		m->prev->next = m->next;
	else
		s->mags = m->next;
	if (m->next)
		m->next->prev = m->prev;
}

/* Thread exit: give the cache back. */
static void mag_destructor(void *arg)
{
	struct mag *m = arg;
	struct kvs_slab *s = m->owner;

	pthread_mutex_lock(&s->lock);
	mag_flush_locked(s, m, 0);
	ST(s, alloc_fast) += atomic_load_explicit(&m->alloc_fast, memory_order_relaxed);
	ST(s, free_fast) += atomic_load_explicit(&m->free_fast, memory_order_relaxed);
	mag_unlink_locked(s, m);
	after_free_locked(s);
	pthread_mutex_unlock(&s->lock);
	if (tls_mag.mag == m)
		tls_mag.id = 0;
	free(m);
}

/* This thread's magazine, created on first use; NULL when disabled. */
static __attribute__((noinline, cold)) struct mag *mag_get_slow(struct kvs_slab *s)
{
	struct mag *m;

	if (s->magcap == 0)
		return NULL;
	m = pthread_getspecific(s->key);
	if (!m) {
		m = calloc(1, sizeof(*m) + s->magcap * sizeof(m->pages[0]));
		if (!m)
			return NULL; /* the slow path still works */
		m->owner = s;
		m->cap = s->magcap;
		if (pthread_setspecific(s->key, m) != 0) {
			free(m);
			return NULL;
		}
		pthread_mutex_lock(&s->lock);
		m->drain_seen = atomic_load_explicit(&s->drain_gen, memory_order_relaxed);
		m->next = s->mags;
		if (s->mags)
			s->mags->prev = m;
		s->mags = m;
		pthread_mutex_unlock(&s->lock);
	}
	tls_mag.id = s->id;
	tls_mag.mag = m;
	return m;
}

static inline struct mag *mag_get(struct kvs_slab *s)
{
	if (likely(tls_mag.id == s->id))
		return tls_mag.mag;
	return mag_get_slow(s);
}

static inline bool mag_drain_due(struct kvs_slab *s, struct mag *m)
{
	return unlikely(m->drain_seen != atomic_load_explicit(&s->drain_gen, memory_order_relaxed));
}

/* ------------------------------------------------------------- creation */

/**
 * kvs_slab_attr_init() - fill @attr with the defaults.
 * @attr: attributes.
 *
 * Defaults: page_size 1, one granule per slab, no mapped limit, min_empty 0,
 * max_empty 1, chunk_pool 1, magazine 32, no worker.  nbuffers, token_bytes
 * and capacity_pages must be set by the caller.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_slab_attr_init(kvs_slab_attr_t *attr)
{
	if (!attr)
		return kvs_fail(EINVAL);
	memset(attr, 0, sizeof(*attr));
	attr->page_size = 1;
	attr->slab_granules = 1;
	attr->max_empty = 1;
	attr->chunk_pool = 1;
	attr->magazine = 32;
	return 0;
}

/* Tokens per slab: the least multiple of page_size whose bytes in every
 * buffer are whole granules, scaled to @granules of the smallest buffer. */
static int slab_tokens(const kvs_slab_attr_t *a, size_t gran, uint64_t *out)
{
	uint64_t t = a->page_size, min_tb = UINT64_MAX, k;
	uint32_t b;

	for (b = 0; b < a->nbuffers; b++) {
		uint64_t tb = a->token_bytes[b], need = gran / gcd_u64(gran, tb);

		t = t / gcd_u64(t, need) * need;
		if (t > (1ULL << 32))
			return -1;
		if (tb < min_tb)
			min_tb = tb;
	}
	k = ((uint64_t)a->slab_granules * gran + t * min_tb - 1) / (t * min_tb);
	if (k == 0)
		k = 1;
	if (t * k > (1ULL << 32))
		return -1;
	*out = t * k;
	return 0;
}

/*
 * How many slabs, and the bytes of one in all buffers.  Every product of a
 * caller's number is checked: a slab's bytes in each buffer and in all, the
 * reservation of each buffer, the page count.  With max_mapped, the slabs
 * are as many as fit within it, so that capacity and availability never
 * count a page that could not be mapped.  EINVAL when the budget holds no
 * slab, EOVERFLOW when a size does not fit its type.
 */
static int slab_geometry(const kvs_slab_attr_t *a, uint64_t tokens, uint32_t pps,
			 uint64_t *nslabs, size_t *slab_total)
{
	uint64_t n = a->capacity_pages / pps + (a->capacity_pages % pps != 0);
	size_t total = 0, bytes;
	uint32_t b;

	for (b = 0; b < a->nbuffers; b++) {
		if (__builtin_mul_overflow(tokens, a->token_bytes[b], &bytes) ||
		    __builtin_add_overflow(total, bytes, &total))
			return kvs_fail(EOVERFLOW);
	}
	if (a->max_mapped) {
		uint64_t fit = a->max_mapped / total;

		if (fit == 0)
			return kvs_fail(EINVAL);
		if (fit < n)
			n = fit;
	}
	for (b = 0; b < a->nbuffers; b++) {
		if (__builtin_mul_overflow(tokens, a->token_bytes[b], &bytes) ||
		    __builtin_mul_overflow(bytes, n, &bytes))
			return kvs_fail(EOVERFLOW);
	}
	if (__builtin_mul_overflow(n, (uint64_t)pps, &n) || n > UINT32_MAX)
		return kvs_fail(EINVAL);
	*nslabs = n / pps;
	*slab_total = total;
	return 0;
}

/**
 * kvs_slab_create() - create a slab allocator over new buffers on @drv.
 * @drv: an open driver; it must outlive the allocator.
 * @attr: attributes (page size, buffers' token sizes, capacity, limits).
 *
 * Reserves one virtual range per buffer, big enough for capacity_pages
 * (rounded up to whole slabs); maps nothing unless min_empty or
 * KVS_SLAB_F_STATIC says so.
 *
 * Context: MT-Safe.
 * Return: the allocator, or NULL with errno EINVAL (bad attributes), ENOMEM,
 * or the driver's errno.
 */
KVS_EXPORT kvs_slab_t *kvs_slab_create(kvs_drv_t *drv, const kvs_slab_attr_t *a)
{
	struct kvs_slab *s;
	size_t gran = kvs_drv_granularity(drv);
	uint64_t tokens, words;
	uint32_t b;
	int err = ENOMEM;

	if (!drv || !a || a->page_size == 0 || a->nbuffers == 0 || !a->token_bytes ||
	    a->capacity_pages == 0 || a->slab_granules == 0 || a->max_empty < a->min_empty ||
	    gran == 0) {
		errno = EINVAL;
		return NULL;
	}
	for (b = 0; b < a->nbuffers; b++) {
		if (a->token_bytes[b] == 0) {
			errno = EINVAL;
			return NULL;
		}
	}
	if (slab_tokens(a, gran, &tokens) < 0 || tokens / a->page_size > UINT32_MAX) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		goto err;
	s->drv = drv;
	s->id = atomic_fetch_add(&next_slab_id, 1);
	s->page_size = a->page_size;
	s->pps = (uint32_t)(tokens / a->page_size);
	s->nbuf = a->nbuffers;
	s->bucket_mul = ((uint64_t)NBUCKET << 32) / s->pps;
	if (slab_geometry(a, tokens, s->pps, &s->nslabs, &s->slab_total) < 0) {
		err = errno;
		goto err_free;
	}
	s->npages = s->nslabs * s->pps;
	s->max_mapped = a->max_mapped;
	s->min_empty = a->min_empty;
	s->max_empty = a->max_empty;
	s->shrink_quiet = a->shrink_quiet;
	s->pool_target = a->chunk_pool;
	s->magcap = a->magazine;
	s->flags = a->flags;
	s->token_bytes = calloc(s->nbuf, sizeof(size_t));
	s->slab_bytes = calloc(s->nbuf, sizeof(size_t));
	s->base = calloc(s->nbuf, sizeof(kvs_devptr_t));
	s->si = calloc(s->nslabs, sizeof(*s->si));
	words = (s->npages + 63) / 64;
	s->freebits = calloc(words, sizeof(uint64_t));
	s->unmapped = calloc((s->nslabs + 63) / 64, sizeof(uint64_t));
	s->ref = calloc(s->npages, sizeof(*s->ref));
	if (!s->token_bytes || !s->slab_bytes || !s->base || !s->si || !s->freebits ||
	    !s->unmapped || !s->ref)
		goto err_free;
	for (b = 0; b < s->nbuf; b++) {
		s->token_bytes[b] = a->token_bytes[b];
		s->slab_bytes[b] = tokens * a->token_bytes[b]; /* checked by slab_geometry */
	}
	s->empty_head = -1;
	for (b = 0; b < NBUCKET; b++)
		s->bucket_head[b] = -1;
	for (uint64_t i = 0; i < s->nslabs; i++) {
		s->si[i].prev = s->si[i].next = -1;
		s->si[i].list = L_NONE;
	}
	bits_fill(s->unmapped, 0, s->nslabs, true);
	s->n_unmapped = s->nslabs;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work, NULL);
	if (pthread_key_create(&s->key, mag_destructor) != 0)
		goto err_sync;

	for (b = 0; b < s->nbuf; b++) {
		if (kvs_drv_reserve(drv, s->nslabs * s->slab_bytes[b], &s->base[b]) < 0) {
			err = errno;
			goto err_unreserve;
		}
	}

	pthread_mutex_lock(&s->lock);
	if (s->flags & KVS_SLAB_F_STATIC) {
		/* Everything, or as much as max_mapped allows. */
		while (s->n_unmapped > 0 &&
		       !(s->max_mapped && s->bytes_charged + s->slab_total > s->max_mapped))
			if (grow_locked(s) < 0)
				break;
	} else if (!(s->flags & KVS_SLAB_F_WORKER)) {
		/* Without a worker, the low watermark is mapped here, once. */
		while (s->n_empty < s->min_empty && s->n_unmapped > 0)
			if (grow_locked(s) < 0)
				break;
	}
	if (s->flags & KVS_SLAB_F_STATIC)
		err = s->n_unmapped && !(s->max_mapped && s->bytes_charged + s->slab_total >
							      s->max_mapped)
			      ? errno
			      : 0;
	else if (!(s->flags & KVS_SLAB_F_WORKER))
		err = s->n_empty < s->min_empty && s->n_unmapped ? errno : 0;
	else
		err = 0;
	pthread_mutex_unlock(&s->lock);
	if (err)
		goto err_destroy;
	if (s->flags & KVS_SLAB_F_WORKER) {
		if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
			err = EAGAIN;
			goto err_destroy;
		}
		s->worker_on = true;
		pthread_mutex_lock(&s->lock);
		pthread_cond_signal(&s->work);
		pthread_mutex_unlock(&s->lock);
	}
	return s;

err_destroy:
	kvs_slab_destroy(s);
	errno = err;
	return NULL;
err_unreserve:
	while (b-- > 0)
		kvs_drv_unreserve(drv, s->base[b]);
	pthread_key_delete(s->key);
err_sync:
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->lock);
err_free:
	free(s->token_bytes);
	free(s->slab_bytes);
	free(s->base);
	free(s->si);
	free(s->freebits);
	free(s->unmapped);
	free((void *)s->ref);
	free(s);
err:
	errno = err;
	return NULL;
}

/**
 * kvs_slab_destroy() - unmap everything, release every chunk, free the
 * buffers' ranges and the allocator.
 * @slab: allocator, or NULL.
 *
 * Pages still held are lost with it; their memory is given back.
 *
 * Context: MT-Unsafe: no other call on @slab may run or follow.
 * Return: 0, or -1 with errno when the driver failed to give something back
 * (everything is freed on the library's side regardless).
 */
KVS_EXPORT int kvs_slab_destroy(kvs_slab_t *s)
{
	uint64_t i;
	uint32_t b;
	int err = 0;

	if (!s)
		return 0;
	if (s->worker_on) {
		pthread_mutex_lock(&s->lock);
		s->stop = true;
		pthread_cond_signal(&s->work);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->worker, NULL);
	}
	pthread_key_delete(s->key);
	while (s->mags) {
		struct mag *m = s->mags;

		s->mags = m->next;
		free(m);
	}
	for (i = 0; i < s->nslabs; i++) {
		if (s->si[i].state != S_MAPPED && s->si[i].state != S_BROKEN)
			continue;
		for (b = 0; b < s->nbuf; b++)
			if (kvs_drv_unmap(s->drv, s->base[b] + i * s->slab_bytes[b],
					  s->slab_bytes[b]) < 0 && s->si[i].state == S_MAPPED)
				err = errno;
		if (s->si[i].cs)
			chunkset_release(s, s->si[i].cs);
	}
	release_list(s, s->pool);
	for (b = 0; b < s->nbuf; b++)
		if (kvs_drv_unreserve(s->drv, s->base[b]) < 0)
			err = errno;
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->lock);
	free(s->token_bytes);
	free(s->slab_bytes);
	free(s->base);
	free(s->si);
	free(s->freebits);
	free(s->unmapped);
	free((void *)s->ref);
	free(s);
	if (err)
		return kvs_fail(err);
	return 0;
}

/* ----------------------------------------------------------- allocation */

/* Take @n pages from mapped slabs into @out, growing when short.  Lock held.
 * All or nothing: on failure the pages taken are put back. */
static int take_locked(struct kvs_slab *s, size_t n, uint32_t *out)
{
	size_t got = 0;
	uint64_t room = s->n_unmapped;

	/* Fail at once when even growing cannot give @n: taking pages and
	 * putting them back would cost as much as the allocation. */
	if (s->max_mapped) {
		uint64_t fit = s->bytes_charged >= s->max_mapped
				       ? 0
				       : (s->max_mapped - s->bytes_charged) / s->slab_total;

		if (fit < room)
			room = fit;
	}
	if (n > s->free_in_slabs + room * s->pps)
		return kvs_fail(ENOMEM);

	while (got < n) {
		int64_t i = pick_slab(s);

		if (i < 0) {
			if (grow_locked(s) < 0) {
				int e = errno;

				while (got > 0)
					slab_put(s, out[--got]);
				after_free_locked(s);
				errno = e;
				return -1;
			}
			continue;
		}
		got += slab_take_many(s, (uint64_t)i, (uint32_t)(n - got < UINT32_MAX ? n - got : UINT32_MAX),
				      out + got);
	}
	after_alloc_locked(s);
	return 0;
}

/* An allocation failed: count it, check the watermarks (pages taken and put
 * back may have emptied slabs), unlock, fail with @err.  Lock held. */
static int alloc_failed_unlock(struct kvs_slab *s, int err)
{
	ST(s, alloc_fail)++;
	after_free_locked(s);
	pthread_mutex_unlock(&s->lock);
	return kvs_fail(err);
}

/* Refill the magazine from the slabs and hand out one page. */
static __attribute__((noinline)) int64_t alloc_slow(struct kvs_slab *s, struct mag *m)
{
	uint32_t p;

	pthread_mutex_lock(&s->lock);
	if (m && mag_drain_due(s, m)) {
		mag_flush_locked(s, m, 0);
		after_free_locked(s);
	}
	if (take_locked(s, 1, &p) < 0)
		return alloc_failed_unlock(s, errno);
	ST(s, alloc_slow)++;
	if (m) {
		/* Fill half the magazine from what is already mapped, no growth. */
		uint32_t n = atomic_load_explicit(&m->count, memory_order_relaxed);
		uint32_t want = m->cap / 2;

		while (n < want && s->free_in_slabs > 0) {
			int64_t i = pick_slab(s);

			if (i < 0)
				break;
			n += slab_take_many(s, (uint64_t)i, want - n, m->pages + n);
		}
		atomic_store_explicit(&m->count, n, memory_order_relaxed);
	}
	pthread_mutex_unlock(&s->lock);
	atomic_store_explicit(&s->ref[p], 1, memory_order_relaxed);
	return p;
}

/**
 * kvs_slab_alloc() - allocate one page.
 * @slab: allocator.
 *
 * The page comes with one reference.  The fast path takes it from the
 * calling thread's cache without a lock or a driver call.
 *
 * Context: MT-Safe.
 * Return: the page index, or -1 with errno ENOMEM (capacity, limit or device
 * memory exhausted) or the driver's errno.
 */
KVS_EXPORT int64_t kvs_slab_alloc(kvs_slab_t *s)
{
	struct mag *m;
	uint32_t n, p;

	if (unlikely(!s))
		return kvs_fail(EINVAL);
	m = mag_get(s);
	if (likely(m != NULL)) {
		n = atomic_load_explicit(&m->count, memory_order_relaxed);
		if (likely(n > 0 && !mag_drain_due(s, m))) {
			p = m->pages[n - 1];
			atomic_store_explicit(&m->count, n - 1, memory_order_relaxed);
			atomic_store_explicit(&s->ref[p], 1, memory_order_relaxed);
			atomic_store_explicit(&m->alloc_fast,
					      atomic_load_explicit(&m->alloc_fast,
								   memory_order_relaxed) + 1,
					      memory_order_relaxed);
			return p;
		}
	}
	return alloc_slow(s, m);
}

/* Drop one reference; 1 when it was the last, 0 when others remain. */
static inline __attribute__((always_inline)) int unref(struct kvs_slab *s, uint32_t p)
{
	uint16_t r;

	if (unlikely(p >= s->npages))
		return kvs_fail(EINVAL);
	r = atomic_load_explicit(&s->ref[p], memory_order_relaxed);
	for (;;) {
		if (unlikely(r == 0))
			return kvs_fail(EINVAL);
		if (r == 1) {
			atomic_store_explicit(&s->ref[p], 0, memory_order_relaxed);
			return 1;
		}
		if (atomic_compare_exchange_weak_explicit(&s->ref[p], &r, r - 1,
							  memory_order_relaxed,
							  memory_order_relaxed))
			return 0;
	}
}

static __attribute__((noinline)) void free_slow(struct kvs_slab *s, struct mag *m, uint32_t p)
{
	pthread_mutex_lock(&s->lock);
	ST(s, free_slow)++;
	if (m) {
		/* Keep half, give the rest back, then cache the page. */
		mag_flush_locked(s, m, mag_drain_due(s, m) ? 0 : m->cap / 2);
		if (!mag_drain_due(s, m) && atomic_load_explicit(&m->count, memory_order_relaxed) <
						    m->cap) {
			uint32_t n = atomic_load_explicit(&m->count, memory_order_relaxed);

			m->pages[n] = p;
			atomic_store_explicit(&m->count, n + 1, memory_order_relaxed);
			after_free_locked(s); /* the flush may have emptied slabs */
			pthread_mutex_unlock(&s->lock);
			return;
		}
	}
	slab_put(s, p);
	after_free_locked(s);
	pthread_mutex_unlock(&s->lock);
}

/**
 * kvs_slab_free() - drop one reference to a page; free it at the last.
 * @slab: allocator.
 * @page: a page with at least one reference.
 *
 * Context: MT-Safe.  As with kref, another thread may add a reference to the
 * page only while it holds one itself.
 * Return: 0, or -1 with errno EINVAL (out of range, or already free).
 */
KVS_EXPORT int kvs_slab_free(kvs_slab_t *s, uint32_t page)
{
	struct mag *m;
	int last;

	if (unlikely(!s))
		return kvs_fail(EINVAL);
	last = unref(s, page);
	if (last <= 0)
		return last;
	m = mag_get(s);
	if (likely(m != NULL)) {
		uint32_t n = atomic_load_explicit(&m->count, memory_order_relaxed);

		if (likely(n < m->cap && !mag_drain_due(s, m))) {
			m->pages[n] = page;
			atomic_store_explicit(&m->count, n + 1, memory_order_relaxed);
			atomic_store_explicit(&m->free_fast,
					      atomic_load_explicit(&m->free_fast,
								   memory_order_relaxed) + 1,
					      memory_order_relaxed);
			return 0;
		}
	}
	free_slow(s, m, page);
	return 0;
}

/**
 * kvs_slab_alloc_bulk() - allocate @n pages, all or none.
 * @slab: allocator.
 * @n: pages wanted.
 * @pages: receives @n page indices, each with one reference.
 *
 * Pages come from the fullest slabs first, growing as needed.
 *
 * Context: MT-Safe.
 * Return: @n (as an int), or -1 with errno ENOMEM (nothing is allocated
 * then) or EINVAL.
 */
KVS_EXPORT int kvs_slab_alloc_bulk(kvs_slab_t *s, size_t n, uint32_t *pages)
{
	struct mag *m;
	size_t k;

	if (!s || (!pages && n) || n > INT32_MAX)
		return kvs_fail(EINVAL);
	if (n == 0)
		return 0;
	m = mag_get(s);
	pthread_mutex_lock(&s->lock);
	if (m && mag_drain_due(s, m))
		mag_flush_locked(s, m, 0);
	/* The slabs first (fullest first keeps memory dense), then this
	 * thread's cache for what they cannot give without growing. */
	if (take_locked(s, n, pages) < 0) {
		if (!m || atomic_load_explicit(&m->count, memory_order_relaxed) == 0)
			return alloc_failed_unlock(s, errno);
		mag_flush_locked(s, m, 0);
		if (take_locked(s, n, pages) < 0)
			return alloc_failed_unlock(s, errno);
	}
	ST(s, alloc_slow) += n;
	pthread_mutex_unlock(&s->lock);
	for (k = 0; k < n; k++)
		atomic_store_explicit(&s->ref[pages[k]], 1, memory_order_relaxed);
	return (int)n;
}

/**
 * kvs_slab_free_bulk() - drop one reference to each of @n pages.
 * @slab: allocator.
 * @n: number of entries.
 * @pages: pages; a page may appear several times if it has that many
 *         references.
 *
 * All or nothing: if one entry is invalid, no reference is dropped.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (an entry out of range or free) or
 * ENOMEM.
 */
KVS_EXPORT int kvs_slab_free_bulk(kvs_slab_t *s, size_t n, const uint32_t *pages)
{
	unsigned char lastbuf[512], *last = lastbuf;
	size_t k, nlast = 0;

	if (!s || (!pages && n))
		return kvs_fail(EINVAL);
	if (n == 0)
		return 0;
	if (n > sizeof(lastbuf)) {
		last = malloc(n);
		if (!last)
			return kvs_fail(ENOMEM);
	}
	for (k = 0; k < n; k++) {
		int r = unref(s, pages[k]);

		if (r < 0) {
			/* Undo: give back every reference dropped so far. */
			while (k-- > 0) {
				if (last[k])
					atomic_store_explicit(&s->ref[pages[k]], 1,
							      memory_order_relaxed);
				else
					atomic_fetch_add_explicit(&s->ref[pages[k]], 1,
								  memory_order_relaxed);
			}
			if (last != lastbuf)
				free(last);
			return kvs_fail(EINVAL);
		}
		last[k] = (unsigned char)r;
		nlast += (size_t)r;
	}
	if (nlast) {
		pthread_mutex_lock(&s->lock);
		slab_put_many(s, n, pages, last);
		ST(s, free_slow) += nlast;
		after_free_locked(s);
		pthread_mutex_unlock(&s->lock);
	}
	if (last != lastbuf)
		free(last);
	return 0;
}

/* First run of @n available pages, or UINT64_MAX.  Lock held. */
static uint64_t find_run(struct kvs_slab *s, size_t n)
{
	uint64_t p = 0, start = 0, run = 0;

	while (p < s->npages) {
		uint64_t i = p / s->pps;

		if (p % s->pps == 0 && s->si[i].state != S_MAPPED) {
			if (s->si[i].state == S_UNMAPPED) {
				run += s->pps;
			} else {
				run = 0;
				start = p + s->pps;
			}
			p += s->pps;
		} else if (p % 64 == 0 && p + 64 <= (i + 1) * s->pps &&
			   s->freebits[p / 64] == ~0ULL) {
			run += 64;
			p += 64;
		} else {
			if (bit_test(s->freebits, p)) {
				run++;
			} else {
				run = 0;
				start = p + 1;
			}
			p++;
		}
		if (run >= n)
			return start;
	}
	return UINT64_MAX;
}

/**
 * kvs_slab_alloc_contig() - allocate @n pages with consecutive indices.
 * @slab: allocator.
 * @n: pages wanted (>= 1).
 * @first: receives the first page; pages *first .. *first + n - 1 each get
 *         one reference.
 *
 * Slabs the run needs are mapped.  The calling thread's cache is given back
 * first; other threads' caches are not searched.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno ENOMEM (no such run, or the limit) or EINVAL.
 */
KVS_EXPORT int kvs_slab_alloc_contig(kvs_slab_t *s, size_t n, uint32_t *first)
{
	struct mag *m;
	uint64_t start = UINT64_MAX, p;
	int tries;

	if (!s || !first || n == 0)
		return kvs_fail(EINVAL);
	m = mag_get(s);
	pthread_mutex_lock(&s->lock);
	if (m)
		mag_flush_locked(s, m, 0);
	for (tries = 0; tries < 8; tries++) {
		uint64_t i, last;
		bool ready = true;

		start = find_run(s, n);
		if (start == UINT64_MAX)
			break;
		last = (start + n - 1) / s->pps;
		for (i = start / s->pps; i <= last; i++) {
			if (s->si[i].state == S_UNMAPPED) {
				ready = false;
				if (claim_locked(s, i) < 0)
					return alloc_failed_unlock(s, errno);
			}
		}
		if (ready)
			break;
		start = UINT64_MAX; /* the lock was dropped: search again */
	}
	if (start == UINT64_MAX)
		return alloc_failed_unlock(s, ENOMEM);
	for (p = start; p < start + n; p++) {
		uint64_t i = p / s->pps;

		bit_clear(s->freebits, p);
		s->si[i].inuse++;
		s->inuse_total++;
		s->free_in_slabs--;
		if (p + 1 == start + n || (p + 1) % s->pps == 0)
			relist(s, i);
	}
	ST(s, alloc_slow) += n;
	after_alloc_locked(s);
	pthread_mutex_unlock(&s->lock);
	for (p = start; p < start + n; p++)
		atomic_store_explicit(&s->ref[p], 1, memory_order_relaxed);
	*first = (uint32_t)start;
	return 0;
}

/**
 * kvs_slab_ref() - add a reference to a held page.
 * @slab: allocator.
 * @page: a page the caller holds a reference to.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (out of range or free) or EOVERFLOW
 * (65535 references already).
 */
KVS_EXPORT int kvs_slab_ref(kvs_slab_t *s, uint32_t page)
{
	uint16_t r;

	if (!s || page >= s->npages)
		return kvs_fail(EINVAL);
	r = atomic_load_explicit(&s->ref[page], memory_order_relaxed);
	do {
		if (r == 0)
			return kvs_fail(EINVAL);
		if (r == MAX_REF)
			return kvs_fail(EOVERFLOW);
	} while (!atomic_compare_exchange_weak_explicit(&s->ref[page], &r, r + 1,
							 memory_order_relaxed,
							 memory_order_relaxed));
	return 0;
}

/**
 * kvs_slab_refcount() - a page's reference count.
 * @slab: allocator.
 * @page: page index.
 *
 * Context: MT-Safe (the answer may be stale at once).
 * Return: the count (0: free), or -1 with errno EINVAL (out of range).
 */
KVS_EXPORT int kvs_slab_refcount(kvs_slab_t *s, uint32_t page)
{
	if (!s || page >= s->npages)
		return kvs_fail(EINVAL);
	return atomic_load_explicit(&s->ref[page], memory_order_relaxed);
}

/**
 * kvs_slab_flush() - give the calling thread's cached pages back.
 * @slab: allocator.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_slab_flush(kvs_slab_t *s)
{
	struct mag *m;

	if (!s)
		return kvs_fail(EINVAL);
	m = mag_get(s);
	if (!m)
		return 0;
	pthread_mutex_lock(&s->lock);
	mag_flush_locked(s, m, 0);
	after_free_locked(s);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/**
 * kvs_slab_shrink() - unmap empty slabs down to min_empty and release the
 * chunk pool.
 * @slab: allocator.
 *
 * The calling thread's cache is given back first; every other thread gives
 * its cache back on its next call into @slab (their pages cannot be moved
 * from here without a lock on the fast path).
 *
 * Context: MT-Safe; makes driver calls on the calling thread.
 * Return: 0, or -1 with errno from the driver (the allocator stays
 * consistent; a slab that failed to unmap stays mapped).
 */
KVS_EXPORT int kvs_slab_shrink(kvs_slab_t *s)
{
	struct chunkset *rel;
	struct mag *m;
	int rc;

	if (!s)
		return kvs_fail(EINVAL);
	m = mag_get(s);
	pthread_mutex_lock(&s->lock);
	atomic_fetch_add_explicit(&s->drain_gen, 1, memory_order_relaxed);
	if (m)
		mag_flush_locked(s, m, 0);
	rc = shrink_to_locked(s, s->min_empty);
	rel = s->pool;
	s->pool = NULL;
	s->pool_count = 0;
	pthread_mutex_unlock(&s->lock);
	release_list(s, rel);
	return rc;
}

static uint64_t cached_locked(struct kvs_slab *s)
{
	uint64_t n = 0;
	struct mag *m;

	for (m = s->mags; m; m = m->next)
		n += atomic_load_explicit(&m->count, memory_order_relaxed);
	return n;
}

/**
 * kvs_slab_validate() - check every invariant of the allocator.
 * @slab: allocator.
 *
 * Recounts from scratch: each page is exactly one of free in a mapped slab,
 * cached by one thread, or held (refcount > 0); lists, counts and bytes agree
 * with the recount; mapped bytes are within the limit.
 *
 * Context: MT-Unsafe: no other thread may use @slab meanwhile.
 * Return: 0, or -1 with errno EUCLEAN (an invariant is broken) or ENOMEM.
 */
KVS_EXPORT int kvs_slab_validate(kvs_slab_t *s)
{
	uint64_t i, p, n_empty = 0, n_partial = 0, n_full = 0, n_unmapped = 0, mapped = 0;
	uint64_t busy = 0;
	uint64_t free_bits = 0, inuse = 0, *seen;
	struct mag *m;
	int bad = 0;

	if (!s)
		return kvs_fail(EINVAL);
	seen = calloc((s->npages + 63) / 64, sizeof(uint64_t));
	if (!seen)
		return kvs_fail(ENOMEM);
	pthread_mutex_lock(&s->lock);
	for (m = s->mags; m; m = m->next) {
		uint32_t k, n = atomic_load_explicit(&m->count, memory_order_relaxed);

		for (k = 0; k < n; k++) {
			p = m->pages[k];
			if (p >= s->npages || bit_test(seen, p) || bit_test(s->freebits, p) ||
			    atomic_load_explicit(&s->ref[p], memory_order_relaxed) != 0 ||
			    s->si[p / s->pps].state != S_MAPPED)
				bad = 1;
			else
				bit_set(seen, p);
		}
	}
	for (i = 0; i < s->nslabs && !bad; i++) {
		struct slab_info *x = &s->si[i];
		uint64_t nfree = 0;

		if (x->state == S_UNMAPPED) {
			n_unmapped++;
			if (!bit_test(s->unmapped, i) || x->list != L_NONE)
				bad = 1;
		} else if (x->state == S_MAPPED) {
			mapped++;
			if (bit_test(s->unmapped, i))
				bad = 1;
		} else if (x->state == S_BROKEN) {
			mapped++;
		} else {
			busy++; /* being mapped or unmapped by another thread */
		}
		for (p = i * s->pps; p < (i + 1) * s->pps && !bad; p++) {
			uint16_t r = atomic_load_explicit(&s->ref[p], memory_order_relaxed);

			if (x->state != S_MAPPED) {
				if (r || bit_test(s->freebits, p))
					bad = 1;
			} else if (bit_test(s->freebits, p)) {
				nfree++;
				if (r)
					bad = 1;
			} else if (!r && !bit_test(seen, p)) {
				bad = 1; /* neither free, cached nor held: lost */
			}
		}
		if (x->state != S_MAPPED)
			continue;
		if (x->inuse != s->pps - nfree || x->list != want_list(s, x->inuse))
			bad = 1;
		free_bits += nfree;
		inuse += x->inuse;
		n_empty += x->list == L_EMPTY;
		n_partial += x->list >= 0;
		n_full += x->list == L_FULL;
	}
	if (!bad && (n_empty != s->n_empty || n_partial != s->n_partial || n_full != s->n_full ||
		     n_unmapped != s->n_unmapped || free_bits != s->free_in_slabs ||
		     inuse != s->inuse_total || busy != s->n_busy || s->n_mapping > busy ||
		     /* a slab being unmapped is still counted as mapped; one
		      * being mapped is not yet, but both are charged */
		     (mapped + busy - s->n_mapping) * s->slab_total != s->bytes_mapped ||
		     (mapped + busy) * s->slab_total != s->bytes_charged ||
		     (s->max_mapped && s->bytes_charged > s->max_mapped)))
		bad = 1;
	pthread_mutex_unlock(&s->lock);
	free(seen);
	return bad ? kvs_fail(EUCLEAN) : 0;
}

/* ------------------------------------------------------------ accessors */

/**
 * kvs_slab_page_size() - tokens per page.
 * @slab: allocator.
 *
 * Context: MT-Safe.
 * Return: the page size; 0 for NULL.
 */
KVS_EXPORT uint32_t kvs_slab_page_size(const kvs_slab_t *s)
{
	return s ? s->page_size : 0;
}

/**
 * kvs_slab_capacity() - pages the allocator can hold (capacity_pages rounded
 * up to whole slabs).
 * @slab: allocator.
 *
 * Context: MT-Safe.
 * Return: the capacity in pages; 0 for NULL.
 */
KVS_EXPORT uint64_t kvs_slab_capacity(const kvs_slab_t *s)
{
	return s ? s->npages : 0;
}

/**
 * kvs_slab_pages_per_slab() - pages in one slab.
 * @slab: allocator.
 *
 * Context: MT-Safe.
 * Return: the count; 0 for NULL.
 */
KVS_EXPORT uint32_t kvs_slab_pages_per_slab(const kvs_slab_t *s)
{
	return s ? s->pps : 0;
}

/**
 * kvs_slab_available() - pages that can still be allocated: free in mapped
 * slabs, cached by threads, and in slabs that can be mapped within the limit.
 * @slab: allocator.
 *
 * Context: MT-Safe.
 * Return: the count; 0 for NULL.
 */
KVS_EXPORT uint64_t kvs_slab_available(kvs_slab_t *s)
{
	uint64_t n, room;

	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	n = s->free_in_slabs + cached_locked(s);
	room = s->n_unmapped;
	if (s->max_mapped) {
		uint64_t fit = s->bytes_charged >= s->max_mapped
				       ? 0
				       : (s->max_mapped - s->bytes_charged) / s->slab_total;

		if (fit < room)
			room = fit;
	}
	pthread_mutex_unlock(&s->lock);
	return n + room * s->pps;
}

/**
 * kvs_slab_buffer() - base address of a buffer.
 * @slab: allocator.
 * @buffer: buffer index.
 *
 * Token t of page p lives at base + (p * page_size + t) * token_bytes[buffer].
 *
 * Context: MT-Safe.
 * Return: the address; 0 for a bad index.
 */
KVS_EXPORT kvs_devptr_t kvs_slab_buffer(const kvs_slab_t *s, uint32_t buffer)
{
	return s && buffer < s->nbuf ? s->base[buffer] : 0;
}

/**
 * kvs_slab_page_mapped() - is the memory of @page mapped?
 * @slab: allocator.
 * @page: page index.
 *
 * Context: MT-Safe.
 * Return: 1 or 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_slab_page_mapped(kvs_slab_t *s, uint32_t page)
{
	int r;

	if (!s || page >= s->npages)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&s->lock);
	r = s->si[page / s->pps].state == S_MAPPED;
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* ---------------------------------------------------------- statistics */

static const char *const slab_stat_names[] = {
#define KVS_X_NAME(n, d) #n,
	KVS_SLAB_STATS(KVS_X_NAME)
#undef KVS_X_NAME
};

static const char *const slab_stat_descs[] = {
#define KVS_X_DESC(n, d) d,
	KVS_SLAB_STATS(KVS_X_DESC)
#undef KVS_X_DESC
};

static void stats_fill(struct kvs_slab *s, uint64_t *v)
{
	uint64_t cached = 0, af = 0, ff = 0, mapped_slabs;
	struct mag *m;

	pthread_mutex_lock(&s->lock);
	memcpy(v, s->stats, sizeof(s->stats));
	for (m = s->mags; m; m = m->next) {
		cached += atomic_load_explicit(&m->count, memory_order_relaxed);
		af += atomic_load_explicit(&m->alloc_fast, memory_order_relaxed);
		ff += atomic_load_explicit(&m->free_fast, memory_order_relaxed);
	}
	mapped_slabs = s->n_empty + s->n_partial + s->n_full;
	v[KVS_SLAB_STAT_objects] = s->inuse_total - cached;
	v[KVS_SLAB_STAT_objects_free] = s->free_in_slabs + cached;
	v[KVS_SLAB_STAT_cpu_cached] = cached;
	v[KVS_SLAB_STAT_objs_per_slab] = s->pps;
	v[KVS_SLAB_STAT_total_objects] = mapped_slabs * s->pps;
	v[KVS_SLAB_STAT_slabs_full] = s->n_full;
	v[KVS_SLAB_STAT_slabs_partial] = s->n_partial;
	v[KVS_SLAB_STAT_slabs_empty] = s->n_empty;
	v[KVS_SLAB_STAT_slabs_unmapped] = s->n_unmapped;
	v[KVS_SLAB_STAT_bytes_mapped] = s->bytes_mapped;
	v[KVS_SLAB_STAT_bytes_mapped_peak] = s->bytes_peak;
	v[KVS_SLAB_STAT_bytes_live] = (s->inuse_total - cached) * (s->slab_total / s->pps);
	v[KVS_SLAB_STAT_bytes_pooled] = (uint64_t)s->pool_count * s->slab_total;
	v[KVS_SLAB_STAT_alloc_fast] = s->stats[KVS_SLAB_STAT_alloc_fast] + af;
	v[KVS_SLAB_STAT_free_fast] = s->stats[KVS_SLAB_STAT_free_fast] + ff;
	pthread_mutex_unlock(&s->lock);
	v[KVS_SLAB_STAT_drv_calls] = atomic_load_explicit(&s->drv_calls, memory_order_relaxed);
	v[KVS_SLAB_STAT_drv_calls_caller] =
		atomic_load_explicit(&s->drv_calls_caller, memory_order_relaxed);
	v[KVS_SLAB_STAT_drv_creates_caller] =
		atomic_load_explicit(&s->drv_creates_caller, memory_order_relaxed);
	v[KVS_SLAB_STAT_drv_ns] = atomic_load_explicit(&s->drv_ns, memory_order_relaxed);
}

/**
 * kvs_slab_stat() - read one statistic.
 * @slab: allocator.
 * @item: statistic.
 *
 * Context: MT-Safe.
 * Return: its value; 0 for NULL or an unknown item.
 */
KVS_EXPORT uint64_t kvs_slab_stat(kvs_slab_t *s, enum kvs_slab_stat item)
{
	uint64_t v[KVS_SLAB_STAT__COUNT];

	if (!s || (unsigned)item >= KVS_SLAB_STAT__COUNT)
		return 0;
	stats_fill(s, v);
	return v[item];
}

/**
 * kvs_slab_stat_name() - a statistic's name.
 * @item: statistic.
 *
 * Context: MT-Safe.
 * Return: a static string, or NULL for an unknown item.
 */
KVS_EXPORT const char *kvs_slab_stat_name(enum kvs_slab_stat item)
{
	return (unsigned)item < KVS_SLAB_STAT__COUNT ? slab_stat_names[item] : NULL;
}

/**
 * kvs_slab_stat_get() - read a statistic by name.
 * @slab: allocator.
 * @name: as kvs_slab_stat_name() gives it.
 * @value: receives the value.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL or ENOENT.
 */
KVS_EXPORT int kvs_slab_stat_get(kvs_slab_t *s, const char *name, uint64_t *value)
{
	unsigned i;

	if (!s || !name || !value)
		return kvs_fail(EINVAL);
	for (i = 0; i < KVS_SLAB_STAT__COUNT; i++) {
		if (strcmp(name, slab_stat_names[i]) == 0) {
			*value = kvs_slab_stat(s, i);
			return 0;
		}
	}
	return kvs_fail(ENOENT);
}

/**
 * kvs_slab_fragmentation() - 1 - live bytes / mapped bytes.
 * @slab: allocator.
 *
 * Context: MT-Safe.
 * Return: a value in [0, 1]; 0 when nothing is mapped.
 */
KVS_EXPORT double kvs_slab_fragmentation(kvs_slab_t *s)
{
	uint64_t v[KVS_SLAB_STAT__COUNT];

	if (!s)
		return 0;
	stats_fill(s, v);
	if (!v[KVS_SLAB_STAT_bytes_mapped])
		return 0;
	return 1.0 - (double)v[KVS_SLAB_STAT_bytes_live] / (double)v[KVS_SLAB_STAT_bytes_mapped];
}

/**
 * kvs_slab_stats_print() - print every statistic through a callback.
 * @slab: allocator.
 * @write_cb: called once per line.
 * @arg: passed to @write_cb.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_slab_stats_print(kvs_slab_t *s, void (*write_cb)(void *arg, const char *line),
				    void *arg)
{
	uint64_t v[KVS_SLAB_STAT__COUNT];
	char line[160];
	unsigned i;

	if (!s || !write_cb)
		return kvs_fail(EINVAL);
	stats_fill(s, v);
	snprintf(line, sizeof(line), "slab page_size %u pages_per_slab %u slabs %llu buffers %u\n",
		 s->page_size, s->pps, (unsigned long long)s->nslabs, s->nbuf);
	write_cb(arg, line);
	for (i = 0; i < KVS_SLAB_STAT__COUNT; i++) {
		snprintf(line, sizeof(line), "%-20s %20llu  # %s\n", slab_stat_names[i],
			 (unsigned long long)v[i], slab_stat_descs[i]);
		write_cb(arg, line);
	}
	return 0;
}
