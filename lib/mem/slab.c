/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/slab.c - the slab allocator for KV pages (Linux SLUB in spirit):
 * its API, creation, and the allocation and free paths.
 *
 * What it owns.  A set of buffers (one virtual reservation each: a layer's K
 * range, its V range, an MLA latent range) carved into slabs.  Slab s covers
 * pages [s * pps, (s + 1) * pps) and, in buffer b, the bytes
 * [s * slab_bytes[b], (s + 1) * slab_bytes[b]), a whole number of driver
 * granules, so one chunk per buffer backs it.  A slab is mapped in every
 * buffer or in none.  The lists and page moves live in lib/mem/slab_page.c,
 * mapping and unmapping in lib/mem/slab_grow.c, the per-thread caches in
 * lib/mem/slab_cpu.c, statistics and validation in lib/mem/slab_stat.c;
 * lib/mem/slab_defs.h has the shared structures.
 *
 * Data structures.
 *  - freebits: one bit per page, set when the page is free *in its slab*
 *    (meaningful for mapped slabs only).  A slab allocates its lowest free
 *    page, starting from a per-slab word hint, which keeps the low pages of
 *    a slab busy and the high ones free.  freewords summarises it, a bit
 *    per word that is not 0, so a take skips 64 full words a load.
 *  - ref: one 16-bit reference count per page.  0 means free (in a slab, in
 *    a per-thread cache, or parked in a broken slab); n > 0 means n holders.
 *  - lists of mapped slabs: an empty list and NBUCKET partial lists bucketed
 *    by fullness, with a bitmap of non-empty buckets, so "the fullest partial
 *    slab" is one find-last-set away.  Full slabs sit on no list.  The empty
 *    list is ordered by the time each slab emptied: allocation takes the
 *    newest (its head), release gives back the oldest (its tail).  Unmapped
 *    slabs are a bitmap; the lowest is mapped first.
 *
 * Locking (the library's lock order is in common/common.h).  slab->lock (a
 * mutex) protects the bitmaps, lists, counts, the chunk pool and the
 * magazine registry.  It is never held across a driver call or a fence: a
 * slab being mapped or unmapped is BUSY and on no list, so nobody else
 * touches it, and the bytes it will map are charged to the limit before the
 * lock is dropped.  Frees never make a driver call and never wait: a slab
 * that empties stays mapped, on the empty list, until the worker (or
 * kvs_slab_shrink() / kvs_slab_reclaim()) unmaps it behind a fence.  An
 * allocation that finds no free page while a slab is being mapped waits on
 * slab->mapped for it, and maps a slab itself only when none is in flight.
 * Reference counts are atomics: the last reference of a page may be
 * dropped with a plain store because, as with kref, a new reference may only
 * be taken by someone who already holds one.  The bulk paths work in runs of
 * consecutive pages: they take whole bitmap words, set and clear counts four
 * at a time (still atomically, see slab_defs.h), and free with slab->lock
 * held from the first reference dropped to the last page put back.  On a
 * fragmented pool (free pages as single holes in many slabs) a hole costs a
 * find-first-set on the summary word (kept in a register), one on its
 * bitmap word and three stores (index, count, word) to take, and a load
 * and a store of its count and a bit set in its word to give back; the
 * summary bits change in a register and reach memory once per summary
 * word, and a slab is relisted once per call on each side.  The cost is the
 * pages and the slabs visited, not the slabs' sizes (bench_slab's scattered
 * line: 256 pages from 32 slabs).
 *
 * The per-thread fast paths compare the cache's count with one limit: the
 * cache's size, or 0 while a drain (kvs_slab_shrink(), compaction's census)
 * waits for the owner, so that "empty", "full" and "drain due" are one
 * compare and a load fewer than reading the drain generation each call.
 *
 * Files.  This one creates and destroys the allocator, allocates and frees
 * one page, and releases slabs; lib/mem/slab_bulk.c has the run paths
 * (bulk free, contiguous allocation, references); slab_page.c the page
 * maps, slab_grow.c mapping and the release fence, slab_cpu.c the
 * per-thread magazines, slab_limit.c the elastic limit and compaction's
 * helpers, slab_stat.c statistics.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/slab_cpu.h"

static _Atomic uint64_t next_slab_id = 1;

/* ------------------------------------------------------------- creation */

/**
 * kvs_slab_attr_init() - fill @attr with the defaults.
 * @attr: attributes.
 *
 * Defaults: page_size 1, one granule per slab, no mapped limit, min_empty 0,
 * max_empty 1, chunk_pool 1, magazine 32, decay_ms 10000, no worker, the
 * default stream's fence.  nbuffers, token_bytes and capacity_pages must be
 * set by the caller.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_slab_attr_init(kvs_slab_attr_t *attr)
{
	KVS_ATTR_CLEAR(attr);
	attr->page_size = 1;
	attr->slab_granules = 1;
	attr->max_empty = 1;
	attr->chunk_pool = 1;
	attr->magazine = 32;
	attr->decay_ms = 10000;
	return 0;
}

/* Tokens per slab: the least multiple of page_size whose bytes in every
 * buffer are whole granules, scaled to @granules of the smallest buffer. */
static int slab_tokens(const kvs_slab_attr_t *a, size_t gran, uint64_t *out)
{
	uint64_t t = a->page_size, min_tb = UINT64_MAX, k, want;
	uint32_t b;

	for (b = 0; b < a->nbuffers; b++) {
		uint64_t tb = a->token_bytes[b], need = gran / gcd_u64(gran, tb);

		t = t / gcd_u64(t, need);
		if (__builtin_mul_overflow(t, need, &t) || t > (1ULL << 32))
			return -1;
		if (tb < min_tb)
			min_tb = tb;
	}
	if (__builtin_mul_overflow((uint64_t)a->slab_granules, (uint64_t)gran, &want))
		return -1;
	/* t <= 2^32 and min_tb < 2^64 / t is not guaranteed: divide instead. */
	k = want / min_tb / t + 1;
	if (want % (t * min_tb) == 0 && min_tb <= UINT64_MAX / t)
		k = want / (t * min_tb);
	if (k == 0)
		k = 1;
	if (t * k > (1ULL << 32) || k > (1ULL << 32))
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

static int check_attr(kvs_drv_t *drv, const kvs_slab_attr_t *a)
{
	uint32_t b;

	if (!drv || !a || a->page_size == 0 || a->nbuffers == 0 || !a->token_bytes ||
	    a->capacity_pages == 0 || a->slab_granules == 0 || a->max_empty < a->min_empty ||
	    kvs_drv_granularity(drv) == 0 || (a->nstreams && !a->streams) ||
	    (!a->fence.record) != (!a->fence.query) ||
	    a->decay_ms > UINT64_MAX / 1000000)
		return kvs_fail(EINVAL);
	for (b = 0; b < a->nbuffers; b++)
		if (a->token_bytes[b] == 0)
			return kvs_fail(EINVAL);
	return 0;
}

/* Free what kvs_slab_create() allocated; nothing mapped or reserved. */
static void slab_free_mem(struct kvs_slab *s)
{
	if (s->fence_inited)
		kvsi_fence_fini(&s->fence);
	KVS_FREE_ALL(s->token_bytes, s->slab_bytes, s->base, s->si, s->freebits, s->freewords,
	             s->unmapped, (void *)s->ref, s);
}

/**
 * kvs_slab_create() - create a slab allocator over new buffers on @drv.
 * @drv: an open driver; it must outlive the allocator.
 * @attr: attributes (page size, buffers' token sizes, capacity, limits,
 *        the engine's streams or fence).
 *
 * Reserves one virtual range per buffer, big enough for capacity_pages
 * (rounded up to whole slabs, and down to the slabs that fit within
 * max_mapped); maps nothing unless min_empty or KVS_SLAB_F_STATIC says so.
 *
 * Context: MT-Safe.
 * Return: the allocator, or NULL with errno EINVAL (bad attributes),
 * EOVERFLOW (a size does not fit), ENOMEM, or the driver's errno.
 */
KVS_EXPORT kvs_slab_t *kvs_slab_create(kvs_drv_t *drv, const kvs_slab_attr_t *a)
{
	struct kvs_slab *s;
	uint64_t tokens, words;
	uint32_t b;
	int err = ENOMEM;

	if (check_attr(drv, a) < 0)
		return NULL;
	if (slab_tokens(a, kvs_drv_granularity(drv), &tokens) < 0 ||
	    tokens / a->page_size > UINT32_MAX) {
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
	s->limit = SIZE_MAX;
	s->min_empty = a->min_empty;
	s->max_empty = a->max_empty;
	s->shrink_quiet = a->shrink_quiet;
	s->decay_ns = a->decay_ms * 1000000;
	s->decay_clock = CLOCK_MONOTONIC;
	if (s->decay_ns >= 1000000000u) {
		struct timespec res;

		if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0 &&
		    res.tv_nsec <= 10000000) {
			s->decay_clock = CLOCK_MONOTONIC_COARSE;
			s->decay_slack = (uint64_t)res.tv_nsec;
		}
	}
	s->pool_target = a->chunk_pool;
	s->magcap = a->magazine;
	s->flags = a->flags;
	s->token_bytes = calloc(s->nbuf, sizeof(size_t));
	s->slab_bytes = calloc(s->nbuf, sizeof(size_t));
	s->base = calloc(s->nbuf, sizeof(kvs_devptr_t));
	s->si = calloc(s->nslabs, sizeof(*s->si));
	words = (s->npages + 63) / 64;
	s->freebits = calloc(words, sizeof(uint64_t));
	s->freewords = calloc((words + 63) / 64, sizeof(uint64_t));
	s->unmapped = calloc((s->nslabs + 63) / 64, sizeof(uint64_t));
	s->ref = calloc(s->npages, sizeof(*s->ref));
	if (!s->token_bytes || !s->slab_bytes || !s->base || !s->si || !s->freebits || !s->freewords ||
	    !s->unmapped || !s->ref)
		goto err_free;
	/* The engine's fence, its streams, or stream 0 (mem/fence.h). */
	{
		static const kvs_stream_t stream0;

		if (kvsi_fence_init(&s->fence, drv, a->nstreams ? a->streams : &stream0,
				    a->nstreams ? a->nstreams : 1, &a->fence) < 0) {
			err = errno;
			goto err_free;
		}
		s->fence_inited = true;
	}
	for (b = 0; b < s->nbuf; b++) {
		s->token_bytes[b] = a->token_bytes[b];
		s->slab_bytes[b] = tokens * a->token_bytes[b]; /* checked by slab_geometry */
	}
	s->empty_head = s->empty_tail = -1;
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
	pthread_cond_init(&s->mapped, NULL);
	pthread_cond_init(&s->fenced, NULL);
	if (pthread_key_create(&s->key, slab_mag_destructor) != 0)
		goto err_sync;

	for (b = 0; b < s->nbuf; b++) {
		if (kvs_drv_reserve(drv, s->nslabs * s->slab_bytes[b], &s->base[b]) < 0) {
			err = errno;
			goto err_unreserve;
		}
	}

	pthread_mutex_lock(&s->lock);
	err = 0;
	if (s->flags & KVS_SLAB_F_STATIC) {
		/* Everything: the slabs were counted to fit max_mapped. */
		while (s->n_unmapped > 0 && !err)
			if (slab_grow_locked(s) < 0)
				err = errno;
	} else if (!(s->flags & KVS_SLAB_F_WORKER)) {
		/* Without a worker, the low watermark is mapped here, once. */
		while (s->n_empty < s->min_empty && s->n_unmapped > 0 && !err)
			if (slab_grow_locked(s) < 0)
				err = errno;
	}
	pthread_mutex_unlock(&s->lock);
	if (!err && (s->flags & KVS_SLAB_F_WORKER) && slab_worker_start(s) < 0)
		err = errno;
	if (err)
		goto err_destroy;
	return s;

err_destroy:
	kvs_slab_destroy(s);
	errno = err;
	return NULL;
err_unreserve:
	while (b-- > 0)
		if (kvs_drv_unreserve(drv, s->base[b]) < 0)
			kvsi_drv_park(drv, s->base[b], 0, true, NULL, NULL);
	pthread_key_delete(s->key);
err_sync:
	pthread_cond_destroy(&s->mapped);
	pthread_cond_destroy(&s->fenced);
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->lock);
err_free:
	slab_free_mem(s);
err:
	errno = err;
	return NULL;
}

/**
 * kvs_slab_destroy() - unmap everything, release every chunk, free the
 * buffers' ranges and the allocator.
 * @slab: allocator, or NULL.
 *
 * Pages still held are lost with it; their memory is given back.  Every
 * stream or fence the allocator was given is waited for first, since a
 * kernel may still read a page.  What the driver refuses to take back
 * (a release, a reservation) is parked with the driver, which tries again
 * at its next allocation and gives it back at kvs_drv_close() at the
 * latest (a mapping it refused to unmap stays until then); the return
 * value says so.
 *
 * Context: MT-Unsafe: no other call on @slab may run or follow.
 * Return: 0, or -1 with errno EIO (the fence failed, or the driver kept
 * something; everything is freed on the library's side regardless).
 */
KVS_EXPORT int kvs_slab_destroy(kvs_slab_t *s)
{
	int err;

	if (!s)
		return 0;
	slab_worker_stop(s);
	pthread_key_delete(s->key);
	while (s->mags) {
		struct mag *m = s->mags;

		s->mags = m->next;
		free(m);
	}
	err = slab_teardown(s);
	pthread_cond_destroy(&s->mapped);
	pthread_cond_destroy(&s->fenced);
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->lock);
	slab_free_mem(s);
	if (err)
		return kvs_fail(err);
	return 0;
}

/* ----------------------------------------------------------- allocation */

/* An allocation failed: count it, check the watermarks (pages taken and put
 * back may have emptied slabs), unlock, fail with @err.  Lock held. */
int alloc_failed_unlock(struct kvs_slab *s, int err)
{
	ST(s, alloc_fail)++;
	slab_after_free_locked(s);
	pthread_mutex_unlock(&s->lock);
	return kvs_fail(err);
}

/* Pages that mapped slabs could add: unmapped ones within the limit, and
 * those being mapped now.  Lock held. */
static uint64_t growable_pages(const struct kvs_slab *s)
{
	return (slab_room_locked(s) + s->n_mapping) * s->pps;
}

/* Take @n pages from mapped slabs into @out, growing when short: waiting for
 * a slab being mapped, else mapping one here.  Lock held (dropped while
 * waiting or mapping).  All or nothing: on failure the pages taken are put
 * back, and ENOMEM means that growth truly cannot help.  With @hold, the
 * pages come with their first reference, set while the lock is held (they
 * are ours alone from the moment their bits are cleared). */
static int take_locked(struct kvs_slab *s, size_t n, uint32_t *out, bool hold)
{
	size_t got = 0;
	bool waited = false;

	/* Fail at once when even growing cannot give @n (broken slabs may
	 * be repaired to make room): taking pages and putting them back
	 * would cost as much as the allocation. */
	if (n > s->free_in_slabs + growable_pages(s) + s->n_broken * s->pps)
		return kvs_fail(ENOMEM);

	while (got < n) {
		int64_t i = slab_pick(s);

		if (i >= 0) {
			got += slab_take_runs(s, (uint64_t)i,
					      (uint32_t)(n - got < UINT32_MAX ? n - got : UINT32_MAX),
					      out + got, hold);
			continue;
		}
		if (s->n_mapping > 0) {
			/* A slab is on its way: wait for it rather than fail
			 * or map a second one. */
			if (!waited)
				ST(s, alloc_waits)++;
			waited = true;
			pthread_cond_wait(&s->mapped, &s->lock);
			continue;
		}
		if (slab_grow_locked(s) < 0) {
			int e = errno;

			/* The lock was dropped: others may have freed or grown. */
			if (slab_pick(s) >= 0 || s->n_mapping > 0)
				continue;
			while (got > 0) {
				if (hold)
					atomic_store_explicit(&s->ref[out[got - 1]], 0,
							      memory_order_relaxed);
				slab_put(s, out[--got]);
			}
			slab_after_free_locked(s);
			errno = e;
			return -1;
		}
	}
	slab_after_alloc_locked(s);
	return 0;
}


/* Refill the magazine from the slabs and hand out one page. */
static __attribute__((noinline)) int64_t alloc_slow(struct kvs_slab *s, struct mag *m)
{
	uint32_t p;

	pthread_mutex_lock(&s->lock);
	if (m && slab_mag_drain_due(s, m)) {
		slab_mag_flush_locked(s, m, 0);
		slab_after_free_locked(s);
	}
	if (take_locked(s, 1, &p, false) < 0)
		return alloc_failed_unlock(s, errno);
	ST(s, alloc_slow)++;
	if (m) {
		/* Fill half the magazine from what is already mapped, no growth. */
		uint32_t n = atomic_load_explicit(&m->count, memory_order_relaxed);
		uint32_t want = m->cap / 2;

		while (n < want && s->free_in_slabs > 0) {
			int64_t i = slab_pick(s);

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

static __attribute__((noinline, cold)) int fail_einval(void)
{
	return kvs_fail(EINVAL);
}

/* The fast path: a page from this thread's cache @m, else alloc_slow().
 * One compare with the limit says empty (n - 1 wraps) or drain due. */
static inline __attribute__((always_inline)) int64_t mag_take(struct kvs_slab *s, struct mag *m)
{
	uint32_t n = atomic_load_explicit(&m->count, memory_order_relaxed), p;

	if (unlikely(n - 1 >= atomic_load_explicit(&m->lim, memory_order_relaxed)))
		return alloc_slow(s, m);
	p = m->pages[n - 1];
	atomic_store_explicit(&m->count, n - 1, memory_order_relaxed);
	atomic_store_explicit(&s->ref[p], 1, memory_order_relaxed);
	atomic_store_explicit(&m->alloc_fast,
			      atomic_load_explicit(&m->alloc_fast, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	return p;
}

/* kvs_slab_alloc() on a thread whose cache for @s is not the one at hand:
 * find it (or find there is none) and allocate as kvs_slab_alloc() does. */
static __attribute__((noinline)) int64_t alloc_nocache(struct kvs_slab *s)
{
	struct mag *m = slab_mag_get_slow(s);

	if (!m)
		return alloc_slow(s, NULL);
	return mag_take(s, m);
}

/**
 * kvs_slab_alloc() - allocate one page.
 * @slab: allocator.
 *
 * The page comes with one reference.  The fast path takes it from the
 * calling thread's cache without a lock or a driver call.  When no page is
 * free and a slab is being mapped, the call waits for that slab.
 *
 * Context: MT-Safe.
 * Return: the page index, or -1 with errno ENOMEM (capacity, limit or device
 * memory exhausted: growth cannot help) or the driver's errno.
 */
KVS_EXPORT int64_t kvs_slab_alloc(kvs_slab_t *s)
{
	/* Every way off the fast path is a tail call: no frame to set up. */
	if (unlikely(!s))
		return fail_einval();
	if (unlikely(kvsi_slab_tls.id != s->id))
		return alloc_nocache(s);
	return mag_take(s, kvsi_slab_tls.mag);
}


static __attribute__((noinline)) int free_slow(struct kvs_slab *s, struct mag *m, uint32_t p)
{
	pthread_mutex_lock(&s->lock);
	ST(s, free_slow)++;
	if (m) {
		/* Keep half, give the rest back, then cache the page. */
		slab_mag_flush_locked(s, m, slab_mag_drain_due(s, m) ? 0 : m->cap / 2);
		if (!slab_mag_drain_due(s, m) &&
		    atomic_load_explicit(&m->count, memory_order_relaxed) < m->cap) {
			uint32_t n = atomic_load_explicit(&m->count, memory_order_relaxed);

			m->pages[n] = p;
			atomic_store_explicit(&m->count, n + 1, memory_order_relaxed);
			slab_after_free_locked(s); /* the flush may have emptied slabs */
			pthread_mutex_unlock(&s->lock);
			return 0;
		}
	}
	slab_put(s, p);
	slab_after_free_locked(s);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* The fast path: @page goes into this thread's cache @m, else free_slow().
 * One compare with the limit says full or drain due. */
static inline __attribute__((always_inline)) int mag_put(struct kvs_slab *s, struct mag *m,
							 uint32_t page)
{
	uint32_t n = atomic_load_explicit(&m->count, memory_order_relaxed);

	if (unlikely(n >= atomic_load_explicit(&m->lim, memory_order_relaxed)))
		return free_slow(s, m, page);
	m->pages[n] = page;
	atomic_store_explicit(&m->count, n + 1, memory_order_relaxed);
	atomic_store_explicit(&m->free_fast,
			      atomic_load_explicit(&m->free_fast, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	return 0;
}

/* The last reference to @page is gone: cache the page, or give it back. */
static __attribute__((noinline)) int free_last(struct kvs_slab *s, uint32_t page)
{
	struct mag *m = slab_mag_get(s);

	if (!m)
		return free_slow(s, NULL, page);
	return mag_put(s, m, page);
}

/* kvs_slab_free() of a page not at count 1 when it looked: shared (drop
 * one with a CAS, which may turn out the last), free or dying (EINVAL). */
static __attribute__((noinline)) int free_shared(struct kvs_slab *s, uint32_t page)
{
	int last = unref(s, page, 0);

	if (last <= 0)
		return last;
	return free_last(s, page);
}

/**
 * kvs_slab_free() - drop one reference to a page; free it at the last.
 * @slab: allocator.
 * @page: a page with at least one reference.
 *
 * Never makes a driver call, never waits for the device, never allocates.
 *
 * Context: MT-Safe.  As with kref, another thread may add a reference to the
 * page only while it holds one itself.
 * Return: 0, or -1 with errno EINVAL (out of range, or already free).
 */
KVS_EXPORT int kvs_slab_free(kvs_slab_t *s, uint32_t page)
{
	_Atomic uint16_t *ref;

	/* As in kvs_slab_alloc(), every way off the fast path is a tail call. */
	if (unlikely(!s || page >= s->npages))
		return fail_einval();
	ref = &s->ref[page];
	if (unlikely(atomic_load_explicit(ref, memory_order_relaxed) != 1))
		return free_shared(s, page);
	/* The last reference, ours: no one else may touch the count (kref). */
	atomic_store_explicit(ref, 0, memory_order_relaxed);
	if (unlikely(kvsi_slab_tls.id != s->id))
		return free_last(s, page);
	return mag_put(s, kvsi_slab_tls.mag, page);
}

/**
 * kvs_slab_alloc_bulk() - allocate @n pages, all or none.
 * @slab: allocator.
 * @n: pages wanted.
 * @pages: receives @n page indices, each with one reference.
 *
 * Pages come from the fullest slabs first, growing as needed (waiting for
 * a slab being mapped rather than failing); within a slab, its lowest free
 * pages, taken a bitmap word or a run of one at a time, their counts set
 * four at a time under the lock.
 *
 * Context: MT-Safe.
 * Return: @n (as an int), or -1 with errno ENOMEM (nothing is allocated
 * then) or EINVAL.
 */
KVS_EXPORT int kvs_slab_alloc_bulk(kvs_slab_t *s, size_t n, uint32_t *pages)
{
	struct mag *m;

	if (!s || (!pages && n) || n > INT32_MAX)
		return kvs_fail(EINVAL);
	if (n == 0)
		return 0;
	m = slab_mag_get(s);
	pthread_mutex_lock(&s->lock);
	if (m && slab_mag_drain_due(s, m))
		slab_mag_flush_locked(s, m, 0);
	/* The slabs first (fullest first keeps memory dense), then this
	 * thread's cache for what they cannot give without growing. */
	if (take_locked(s, n, pages, true) < 0) {
		if (!m || atomic_load_explicit(&m->count, memory_order_relaxed) == 0)
			return alloc_failed_unlock(s, errno);
		slab_mag_flush_locked(s, m, 0);
		if (take_locked(s, n, pages, true) < 0)
			return alloc_failed_unlock(s, errno);
	}
	ST(s, alloc_slow) += n;
	pthread_mutex_unlock(&s->lock);
	return (int)n;
}

/* -------------------------------------------------------------- release */

/**
 * kvs_slab_shrink() - give back every empty slab above min_empty and the
 * chunk pool, now.
 * @slab: allocator.
 *
 * The calling thread's cache is given back first; every other thread gives
 * its cache back on its next call into @slab (their pages cannot be moved
 * from here without a lock on the fast path).  Slabs are unmapped only
 * after a fence recorded after they emptied has completed: this call waits
 * for the device.  Parked chunks and broken slabs are retried.
 *
 * Context: MT-Safe; makes driver calls on the calling thread and blocks
 * until the fence completes; takes no lock across the wait.
 * Return: 0, or -1 with errno from the driver or the fence (the allocator
 * stays consistent; what failed is parked and retried later).
 */
KVS_EXPORT int kvs_slab_shrink(kvs_slab_t *s)
{
	struct mag *m;
	uint64_t wake;
	int rc, err = 0;

	if (!s)
		return kvs_fail(EINVAL);
	m = slab_mag_get(s);
	pthread_mutex_lock(&s->lock);
	slab_mag_drain_all_locked(s);
	if (m)
		slab_mag_flush_locked(s, m, 0);
	rc = slab_reclaim_locked(s, true, &wake);
	if (rc < 0)
		err = errno;
	if (slab_release_pool_locked(s) < 0 && !err)
		err = errno;
	pthread_mutex_unlock(&s->lock);
	if (err)
		return kvs_fail(err);
	return 0;
}

/**
 * kvs_slab_reclaim() - give back what the release policy allows, without
 * waiting.
 * @slab: allocator.
 *
 * Unmaps the empty slabs above min_empty that the hysteresis (max_empty,
 * shrink_quiet) or the decay time (decay_ms) releases and whose fence has
 * completed; records a fence for the others, or polls the one pending.
 * Retries parked chunks and broken slabs.  The worker does this by itself;
 * an allocator without one gives memory back only through this call and
 * kvs_slab_shrink(), since frees never call the driver: call it between
 * steps of the serving loop.
 *
 * Context: MT-Safe; makes driver calls on the calling thread but never
 * waits for the device.
 * Return: the number of slabs unmapped, or -1 with errno from the driver or
 * the fence (what was unmapped stays unmapped).
 */
KVS_EXPORT int kvs_slab_reclaim(kvs_slab_t *s)
{
	uint64_t wake;
	int n;

	if (!s)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&s->lock);
	n = slab_reclaim_locked(s, false, &wake);
	pthread_mutex_unlock(&s->lock);
	return n;
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
 * kvs_slab_capacity() - pages the allocator can hold: capacity_pages
 * rounded up to whole slabs, and down to the slabs that fit in max_mapped.
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
 * slabs, cached by threads, in slabs being mapped, and in slabs that can be
 * mapped within the limit.
 * @slab: allocator.
 *
 * Context: MT-Safe.
 * Return: the count; 0 for NULL.
 */
KVS_EXPORT uint64_t kvs_slab_available(kvs_slab_t *s)
{
	uint64_t n;

	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	n = s->free_in_slabs + slab_cached_locked(s) + growable_pages(s);
	pthread_mutex_unlock(&s->lock);
	return n;
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
