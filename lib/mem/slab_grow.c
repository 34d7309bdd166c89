/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/slab_grow.c - growth and release of the slab allocator: mapping and
 * unmapping slabs, the chunk pool, fences, decay, failure parking, and the
 * worker thread.
 *
 * Growth.  A slab is mapped by whoever needs it: the worker, which keeps
 * min_empty empty slabs mapped ahead of demand, or an allocation that finds
 * no free page and no slab in flight.  An allocation that finds a slab in
 * flight waits for it on slab->mapped (lib/mem/slab.c), so a map in progress is
 * memory on its way, never a reason for ENOMEM.  Chunks come from a pool of
 * created-but-unmapped chunk sets, so growth makes no creation call, the
 * expensive one, when the pool is filled ahead.
 *
 * Release, and why it is fenced.  The device may still be reading a page
 * that the host has freed: a kernel submitted before the free runs after it.
 * Unmapping such a slab faults the device (a sticky illegal-address error
 * on a GPU).  So a free never unmaps: a slab that empties stays mapped on
 * the empty list, stamped with ++empty_gen.  Release happens here, on the
 * worker or in kvs_slab_shrink() / kvs_slab_reclaim(): a fence is recorded
 * on the engine's streams (or through the engine's own fence callbacks)
 * after the stamp, and once it has completed, every slab stamped at or
 * below its cover and still empty may be unmapped.  A slab reused in the
 * meantime is simply no longer empty.  The fence is recorded and queried
 * with no lock held; kvs_slab_shrink() and kvs_slab_destroy() wait for it,
 * the worker and kvs_slab_reclaim() poll it.
 *
 * Policy.  Empty slabs above min_empty are given back (oldest first) when
 * the page-count hysteresis says so (more than max_empty empty and
 * shrink_quiet pages freed since the last growth: down to min_empty), or
 * one by one when a slab has stayed empty for decay_ms, as jemalloc's decay
 * does, so an idle engine returns its memory.
 *
 * Failures lose nothing.  A chunk the driver refuses to release is parked
 * (s->parked) and released again later.  A slab whose unmap fails, or
 * whose failed map cannot be undone, is BROKEN: buffers [bad_lo, bad_hi)
 * may still be mapped, it keeps its charge against max_mapped, its pages
 * are neither free nor held, and the unmap is retried by the worker,
 * kvs_slab_reclaim(), kvs_slab_shrink(), a growth that needs room, and
 * kvs_slab_destroy(), which reports what it could not give back.
 * kvs_slab_validate() accounts for all of it.
 *
 * Locking (the order is in common/common.h).  Everything here is called
 * with slab->lock held and drops it around every driver call and fence; a
 * slab being mapped or unmapped is BUSY meanwhile, and the fence's state
 * (F_BUSY) keeps a second thread from recording or querying it at once.
 */
#include <stdlib.h>
#include <time.h>

#include "mem/slab_defs.h"

/* Set on the worker thread: its driver calls are not the caller's. */
static __thread bool kvsi_slab_is_worker __attribute__((tls_model("initial-exec")));

/* Count a driver call, and whether it ran on a caller's thread. */
#define DRV(s, expr)                                                          \
	({                                                                    \
		uint64_t t0_ = kvs_now_ns();                                  \
		int r_ = (expr);                                              \
		int e_ = errno;                                               \
		atomic_fetch_add_explicit(&(s)->drv_ns, kvs_now_ns() - t0_,   \
					  memory_order_relaxed);              \
		atomic_fetch_add_explicit(&(s)->drv_calls, 1, memory_order_relaxed); \
		if (!kvsi_slab_is_worker)                                     \
			atomic_fetch_add_explicit(&(s)->drv_calls_caller, 1,  \
						  memory_order_relaxed);      \
		errno = e_;                                                   \
		r_;                                                           \
	})

/* ---------------------------------------------------------------- chunks */

static void chunkset_free(struct kvs_slab *s, struct chunkset *cs)
{
	(void)s;
	free(cs);
}

/* Release the chunks of @cs; those the driver refuses are parked in @cs,
 * which then goes on s->parked, to be released again.  No lock held. */
static int chunkset_release(struct kvs_slab *s, struct chunkset *cs)
{
	uint32_t b, failed = 0, done = 0;
	int err = 0;

	for (b = 0; b < s->nbuf; b++) {
		if (!cs->c[b])
			continue;
		if (DRV(s, kvs_drv_chunk_release(s->drv, cs->c[b])) < 0) {
			err = errno;
			failed++;
		} else {
			cs->c[b] = NULL;
			done++;
		}
	}
	pthread_mutex_lock(&s->lock);
	s->nchunks -= done;
	s->n_releasing -= done + failed;
	if (failed) {
		ST(s, release_fail) += failed;
		s->n_parked += failed;
		cs->next = s->parked;
		s->parked = cs;
	}
	pthread_mutex_unlock(&s->lock);
	if (!failed)
		chunkset_free(s, cs);
	if (err)
		return kvs_fail(err);
	return 0;
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
		if (!kvsi_slab_is_worker)
			atomic_fetch_add_explicit(&s->drv_creates_caller, 1, memory_order_relaxed);
		if (DRV(s, kvs_drv_chunk_create(s->drv, s->slab_bytes[b], &cs->c[b])) < 0) {
			int e = errno;

			cs->c[b] = NULL;
			pthread_mutex_lock(&s->lock);
			s->nchunks += b;
			s->n_releasing += b;
			pthread_mutex_unlock(&s->lock);
			(void)chunkset_release(s, cs);
			errno = e;
			return NULL;
		}
	}
	pthread_mutex_lock(&s->lock);
	s->nchunks += s->nbuf;
	pthread_mutex_unlock(&s->lock);
	return cs;
}

/* Keep @cs in the pool if there is room, else hand it back in *rel to be
 * released once the lock is dropped.  Lock held. */
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

/* Release a list of chunk sets; lock held, dropped meanwhile.  -1 when a
 * release failed (the chunk is parked). */
static int release_list_locked(struct kvs_slab *s, struct chunkset *rel)
{
	struct chunkset *cs;
	int rc = 0;

	if (!rel)
		return 0;
	/* Out of the books while the lock is dropped: validate counts them. */
	for (cs = rel; cs; cs = cs->next)
		for (uint32_t b = 0; b < s->nbuf; b++)
			s->n_releasing += cs->c[b] != NULL;
	pthread_mutex_unlock(&s->lock);
	while (rel) {
		struct chunkset *n = rel->next;

		if (chunkset_release(s, rel) < 0)
			rc = -1;
		rel = n;
	}
	pthread_mutex_lock(&s->lock);
	return rc;
}

/* Release parked chunks again.  Lock held (dropped meanwhile). */
static int retry_parked_locked(struct kvs_slab *s)
{
	struct chunkset *list = s->parked;

	if (!list)
		return 0;
	s->parked = NULL;
	s->n_parked = 0; /* chunkset_release parks again what fails again */
	return release_list_locked(s, list);
}

/* -------------------------------------------------------------- mapping */

/* Unmap buffers [lo, hi) of slab @i; no lock held.  Returns the first
 * buffer still mapped (hi when all are unmapped), errno set if < hi. */
static uint32_t unmap_buffers(struct kvs_slab *s, uint64_t i, uint32_t lo, uint32_t hi)
{
	for (; lo < hi; lo++)
		if (DRV(s, kvs_drv_unmap(s->drv, s->base[lo] + i * s->slab_bytes[lo],
					 s->slab_bytes[lo])) < 0)
			break;
	return lo;
}

/* Slab @i could not be unmapped whole: buffers [lo, hi) may still be
 * mapped.  Park it, charged and counted as mapped, to unmap again. */
static void park_broken_locked(struct kvs_slab *s, uint64_t i, uint32_t lo, uint32_t hi)
{
	struct slab_info *x = &s->si[i];

	x->state = S_BROKEN;
	x->bad_lo = lo;
	x->bad_hi = hi;
	s->n_broken++;
	ST(s, release_fail)++;
}

/* Slab @i is unmapped in every buffer now: back to the unmapped bitmap,
 * uncharged, its chunks to the pool (or released).  Lock held (dropped
 * when chunks are released). */
static void slab_gone_locked(struct kvs_slab *s, uint64_t i, bool was_mapped)
{
	struct slab_info *x = &s->si[i];
	struct chunkset *cs = x->cs, *rel = NULL;

	x->cs = NULL;
	x->state = S_UNMAPPED;
	bit_set(s->unmapped, i);
	s->n_unmapped++;
	if (was_mapped)
		s->bytes_mapped -= s->slab_total;
	s->bytes_charged -= s->slab_total;
	if (cs)
		pool_put_locked(s, cs, &rel);
	(void)release_list_locked(s, rel);
}

/*
 * Map slab @i, which the caller marked BUSY and charged to the limit.
 * Called and returns with the lock held; drops it around driver calls.
 * On failure the slab is unmapped again, its chunks pooled, errno set; if
 * that undo fails too, the slab is parked BROKEN (never handed out, never
 * mapped over) until an unmap succeeds.
 */
static int slab_map_locked(struct kvs_slab *s, uint64_t i)
{
	struct chunkset *cs = s->pool, *rel = NULL;
	uint32_t b = 0, left;
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
		left = 0;
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
	left = 0;
	goto out;
unwind:
	err = errno;
	left = unmap_buffers(s, i, 0, b);
	if (left < b) {
		/* The undo failed: keep the chunks with the slab. */
		pthread_mutex_lock(&s->lock);
		s->n_mapping--;
		s->n_busy--;
		s->si[i].cs = cs;
		s->bytes_mapped += s->slab_total;
		if (s->bytes_mapped > s->bytes_peak)
			s->bytes_peak = s->bytes_mapped;
		park_broken_locked(s, i, left, b);
		ST(s, map_fail)++;
		pthread_cond_broadcast(&s->mapped);
		errno = err;
		return -1;
	}
out:
	pthread_mutex_lock(&s->lock);
	s->n_mapping--;
	pthread_cond_broadcast(&s->mapped);
	if (err) {
		s->bytes_charged -= s->slab_total;
		s->si[i].state = S_UNMAPPED;
		bit_set(s->unmapped, i);
		s->n_unmapped++;
		s->n_busy--;
		ST(s, map_fail)++;
		if (cs)
			pool_put_locked(s, cs, &rel);
		(void)release_list_locked(s, rel);
		errno = err;
		return -1;
	}
	s->si[i].cs = cs;
	s->si[i].state = S_MAPPED;
	s->si[i].inuse = 0;
	s->si[i].hint = 0;
	s->n_busy--;
	bits_fill(s->freebits, i * s->pps, (i + 1) * s->pps, true);
	slab_pages_sync(s, i * s->pps, (i + 1) * s->pps);
	s->free_in_slabs += s->pps;
	s->bytes_mapped += s->slab_total;
	if (s->bytes_mapped > s->bytes_peak)
		s->bytes_peak = s->bytes_mapped;
	ST(s, slab_maps)++;
	s->freed_since_grow = 0;
	/* Never used: no fence needed before it is given back. */
	s->si[i].empty_seq = 0;
	s->si[i].empty_ns = slab_decay_now(s);
	slab_list_add(s, i, L_EMPTY);
	return 0;
}

/* The bytes the allocator may map: the smaller of max_mapped (0: none)
 * and the run-time limit (SIZE_MAX: none); SIZE_MAX when neither. */
size_t slab_cap(const struct kvs_slab *s)
{
	size_t cap = s->max_mapped ? s->max_mapped : SIZE_MAX;

	return s->limit < cap ? s->limit : cap;
}

/* Unmapped slabs that can be mapped within the limit.  Lock held. */
uint64_t slab_room_locked(const struct kvs_slab *s)
{
	uint64_t room = s->n_unmapped;
	size_t cap = slab_cap(s);

	if (cap != SIZE_MAX) {
		uint64_t fit = s->bytes_charged >= cap ? 0 : (cap - s->bytes_charged) / s->slab_total;

		if (fit < room)
			room = fit;
	}
	return room;
}

/* Claim unmapped slab @i and map it.  Lock held (dropped inside). */
int slab_claim_locked(struct kvs_slab *s, uint64_t i)
{
	if (slab_cap(s) != SIZE_MAX && s->bytes_charged + s->slab_total > slab_cap(s))
		return kvs_fail(ENOMEM);
	bit_clear(s->unmapped, i);
	s->n_unmapped--;
	s->n_busy++;
	s->si[i].state = S_BUSY;
	s->bytes_charged += s->slab_total;
	return slab_map_locked(s, i);
}

static int repair_locked(struct kvs_slab *s);

/* Map the lowest unmapped slab.  Lock held (dropped inside).  Broken slabs
 * are unmapped again first when they are what stands in the way. */
int slab_grow_locked(struct kvs_slab *s)
{
	if (slab_room_locked(s) == 0 && s->n_broken > 0)
		(void)repair_locked(s);
	if (slab_room_locked(s) == 0)
		return kvs_fail(ENOMEM);
	return slab_claim_locked(s, bits_next_set(s->unmapped, 0, s->nslabs));
}

/* Unmap empty slab @i, past its fence.  Lock held (dropped inside).  On a
 * driver failure the slab is parked BROKEN; its pages wait there. */
static int slab_unmap_locked(struct kvs_slab *s, uint64_t i)
{
	struct slab_info *x = &s->si[i];
	uint32_t left;
	int err;

	slab_list_del(s, i);
	x->state = S_BUSY;
	s->n_busy++;
	bits_fill(s->freebits, i * s->pps, (i + 1) * s->pps, false);
	slab_pages_sync(s, i * s->pps, (i + 1) * s->pps);
	s->free_in_slabs -= s->pps;
	pthread_mutex_unlock(&s->lock);
	left = unmap_buffers(s, i, 0, s->nbuf);
	err = errno;
	pthread_mutex_lock(&s->lock);
	s->n_busy--;
	if (left < s->nbuf) {
		park_broken_locked(s, i, left, s->nbuf);
		return kvs_fail(err);
	}
	ST(s, slab_unmaps)++;
	slab_gone_locked(s, i, true);
	return 0;
}

/* Unmap what broken slabs still have mapped.  Lock held (dropped inside).
 * Returns -1 when one is still broken. */
static int repair_locked(struct kvs_slab *s)
{
	uint64_t i;
	int rc = 0;

	for (i = 0; i < s->nslabs && s->n_broken > 0; i++) {
		struct slab_info *x = &s->si[i];
		uint32_t left;

		if (x->state != S_BROKEN)
			continue;
		x->state = S_BUSY;
		s->n_broken--;
		s->n_busy++;
		pthread_mutex_unlock(&s->lock);
		left = unmap_buffers(s, i, x->bad_lo, x->bad_hi);
		pthread_mutex_lock(&s->lock);
		s->n_busy--;
		if (left < x->bad_hi) {
			park_broken_locked(s, i, left, x->bad_hi);
			rc = -1;
			continue;
		}
		ST(s, slab_unmaps)++;
		slab_gone_locked(s, i, true);
	}
	return rc;
}

/* ---------------------------------------------------------------- fences */

/* Record a fence after all device work submitted so far.  No lock held.
 * The engine's own fence is its code, not a driver call. */
static int fence_record(struct kvs_slab *s, uint64_t *token)
{
	if (s->fence.engine.record)
		return kvsi_fence_record(&s->fence, token);
	return DRV(s, kvsi_fence_record(&s->fence, token));
}

/* 1 when the fence has completed, 0 when not yet, -1 on failure.  With
 * @wait, block until it completes.  No lock held. */
static int fence_query(struct kvs_slab *s, uint64_t token, bool wait)
{
	if (s->fence.engine.query)
		return kvsi_fence_query(&s->fence, token, wait);
	return DRV(s, kvsi_fence_query(&s->fence, token, wait));
}

/*
 * Move the fence forward: record one when slabs stamped after the last
 * completed fence wait for it, query (or, with @wait, wait for) the one
 * pending.  Lock held (dropped meanwhile).  1 when fence_done moved, 0
 * when not (pending, or another thread is at it), -1 on failure.
 */
static int fence_advance_locked(struct kvs_slab *s, bool wait)
{
	uint64_t cover, token;
	int q;

	if (s->fence_state == F_IDLE) {
		if (s->fence_done >= s->empty_gen)
			return 1;
		cover = s->empty_gen;
		s->fence_state = F_BUSY;
		pthread_mutex_unlock(&s->lock);
		q = fence_record(s, &token);
		pthread_mutex_lock(&s->lock);
		pthread_cond_broadcast(&s->fenced);
		if (q < 0) {
			s->fence_state = F_IDLE;
			ST(s, fence_fail)++;
			return -1;
		}
		ST(s, fences)++;
		s->fence_cover = cover;
		s->fence_token = token;
		s->fence_state = F_PENDING;
	}
	if (s->fence_state == F_BUSY) {
		/* Another thread records or queries it with the lock dropped:
		 * a waiter sleeps until it is done, a poller comes back later. */
		if (wait)
			pthread_cond_wait(&s->fenced, &s->lock);
		return 0;
	}
	s->fence_state = F_BUSY;
	token = s->fence_token;
	pthread_mutex_unlock(&s->lock);
	q = fence_query(s, token, wait);
	pthread_mutex_lock(&s->lock);
	pthread_cond_broadcast(&s->fenced);
	if (q < 0) {
		s->fence_state = F_IDLE; /* record a new one next time */
		ST(s, fence_fail)++;
		return -1;
	}
	if (q == 0) {
		s->fence_state = F_PENDING;
		return 0;
	}
	s->fence_done = s->fence_cover;
	s->fence_state = F_IDLE;
	return 1;
}

/* ------------------------------------------------------------ reclaim */

static bool shrink_due(const struct kvs_slab *s)
{
	return s->n_empty > s->max_empty && !(s->flags & KVS_SLAB_F_STATIC) &&
	       s->freed_since_grow >= s->shrink_quiet;
}

/*
 * Give back empty slabs above min_empty that the policy releases (all of
 * them with @all), oldest first, each once a fence after it emptied has
 * completed.  With @all, fences are waited for; without, they are only
 * polled.  Retries parked chunks and broken slabs first.  Lock held
 * (dropped meanwhile).  *wake_ns receives when the next slab's decay comes
 * due (0: none).  Returns the slabs unmapped, or -1 with errno when a
 * driver call or the fence failed (what was done stays done).
 */
int slab_reclaim_locked(struct kvs_slab *s, bool all, uint64_t *wake_ns)
{
	bool hyst = all || shrink_due(s);
	int n = 0, err = 0;

	*wake_ns = 0;
	if (s->flags & KVS_SLAB_F_STATIC)
		return 0;
	if (s->parked && retry_parked_locked(s) < 0)
		err = errno;
	if (s->n_broken && repair_locked(s) < 0)
		err = errno;
	while (s->n_empty > s->min_empty) {
		int64_t i = s->empty_tail;
		struct slab_info *x = &s->si[i];
		bool decayed = s->decay_ns && slab_decay_now(s) - x->empty_ns >= s->decay_ns;

		if (!hyst && !decayed) {
			/* On the precise clock the worker sleeps by: a
			 * coarse clock lags it by up to its resolution. */
			*wake_ns = x->empty_ns + s->decay_ns + s->decay_slack;
			break;
		}
		if (x->empty_seq > s->fence_done) {
			int q = fence_advance_locked(s, all);

			if (q < 0) {
				err = errno ? errno : EIO;
				break;
			}
			if (q == 0 && !all)
				break; /* pending: poll again later */
			continue; /* the lock was dropped: look again */
		}
		if (!hyst)
			ST(s, decay_unmaps)++;
		if (slab_unmap_locked(s, (uint64_t)i) < 0) {
			err = errno;
			break;
		}
		n++;
	}
	if (err)
		return kvs_fail(err);
	return n;
}

/*
 * Unmap empty slabs, oldest first and below min_empty if need be, until
 * the bytes charged fit @cap, each once a fence recorded after it emptied
 * has completed (waited for); then release the chunk pool when what is
 * mapped and pooled together still exceeds @cap.  For a lowered limit
 * (lib/elastic/elastic.c).  Lock held (dropped meanwhile).  Returns the slabs
 * unmapped, or -1 with errno when a driver call or the fence failed (what
 * was done stays done).
 */
int slab_reclaim_to_locked(struct kvs_slab *s, size_t cap)
{
	int n = 0, err = 0;

	if (s->parked && retry_parked_locked(s) < 0)
		err = errno;
	if (s->n_broken && repair_locked(s) < 0)
		err = errno;
	while (s->bytes_charged > cap && s->n_empty > 0) {
		int64_t i = s->empty_tail;

		if (s->si[i].empty_seq > s->fence_done) {
			if (fence_advance_locked(s, true) < 0) {
				err = errno ? errno : EIO;
				break;
			}
			continue; /* the lock was dropped: look again */
		}
		if (slab_unmap_locked(s, (uint64_t)i) < 0) {
			err = errno;
			break;
		}
		n++;
	}
	if (!err && s->pool && s->bytes_mapped + (size_t)s->pool_count * s->slab_total > cap &&
	    slab_release_pool_locked(s) < 0)
		err = errno;
	if (err)
		return kvs_fail(err);
	return n;
}

/* After pages went back: wake the worker when there is release work for
 * it.  Without a worker nothing happens here: frees never call the driver.
 * Lock held. */
void slab_after_free_locked(struct kvs_slab *s)
{
	if (!s->worker_on || !s->worker_asleep)
		return;
	/* A worker asleep on a decay timer wakes in time by itself. */
	if (shrink_due(s) || (s->decay_ns && s->n_empty > s->min_empty && !s->worker_timer)) {
		s->worker_asleep = false;
		pthread_cond_signal(&s->work);
	}
}

/* After pages were taken: wake the worker to map ahead or fill the pool. */
void slab_after_alloc_locked(struct kvs_slab *s)
{
	if (s->worker_on && s->worker_asleep &&
	    ((s->n_empty + s->n_mapping < s->min_empty && s->n_unmapped > 0) ||
	     s->pool_count < s->pool_target)) {
		s->worker_asleep = false;
		pthread_cond_signal(&s->work);
	}
}

/* --------------------------------------------------------------- worker */

static void wait_until_locked(struct kvs_slab *s, uint64_t wake_ns)
{
	struct timespec ts;

	/* The condition variable's clock is CLOCK_MONOTONIC (see start). */
	ts.tv_sec = (time_t)(wake_ns / 1000000000u);
	ts.tv_nsec = (long)(wake_ns % 1000000000u);
	pthread_cond_timedwait(&s->work, &s->lock, &ts);
}

static void *worker_main(void *arg)
{
	struct kvs_slab *s = arg;
	uint64_t poll_ns = 50000;

	kvsi_slab_is_worker = true;
	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		uint64_t wake = 0, now;
		bool trouble = false;

		if (s->n_empty + s->n_mapping < s->min_empty && slab_room_locked(s) > 0) {
			if (slab_grow_locked(s) == 0)
				continue;
			trouble = true; /* the driver said no: retry later */
		}
		if (slab_reclaim_locked(s, false, &wake) < 0)
			trouble = true;
		if (!trouble && s->pool_count < s->pool_target && !(s->flags & KVS_SLAB_F_STATIC)) {
			struct chunkset *cs;

			s->filling++;
			pthread_mutex_unlock(&s->lock);
			cs = chunkset_create(s);
			pthread_mutex_lock(&s->lock);
			s->filling--;
			if (cs) {
				struct chunkset *rel = NULL;

				pool_put_locked(s, cs, &rel);
				(void)release_list_locked(s, rel);
				continue;
			}
			trouble = true;
		}
		if (s->stop)
			break;
		now = kvs_now_ns();
		if (s->fence_state == F_PENDING) {
			/* Poll the device's progress, backing off to 5 ms. */
			wait_until_locked(s, now + poll_ns);
			if (poll_ns < 5000000)
				poll_ns *= 2;
			continue;
		}
		poll_ns = 50000;
		if (trouble || s->n_broken || s->parked) {
			wait_until_locked(s, now + 100000000); /* 100 ms */
		} else if (wake) {
			s->worker_asleep = s->worker_timer = true;
			wait_until_locked(s, wake > now ? wake : now);
			s->worker_asleep = s->worker_timer = false;
		} else {
			s->worker_asleep = true;
			pthread_cond_wait(&s->work, &s->lock);
			s->worker_asleep = false;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int slab_worker_start(struct kvs_slab *s)
{
	pthread_condattr_t ca;

	/* The worker's timed waits count on the monotonic clock. */
	pthread_cond_destroy(&s->work);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->work, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&s->worker, NULL, worker_main, s) != 0)
		return kvs_fail(EAGAIN);
	pthread_mutex_lock(&s->lock);
	s->worker_on = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

void slab_worker_stop(struct kvs_slab *s)
{
	if (!s->worker_on)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->worker, NULL);
	s->worker_on = false;
}

/*
 * Give everything back for kvs_slab_destroy(): wait for a fence after the
 * last use of any page, unmap every mapped or broken slab, release every
 * chunk, free the reservations.  The worker is stopped.  Returns 0, or the
 * errno to report (what the driver kept, it frees at its close).
 */
int slab_teardown(struct kvs_slab *s)
{
	uint64_t i, token;
	uint32_t b;
	struct chunkset *parked;
	int err = 0;

	/* Every page is dropped now, held or not: one fence covers them. */
	if (fence_record(s, &token) < 0 || fence_query(s, token, true) < 0)
		err = EIO;
	pthread_mutex_lock(&s->lock);
	s->pool_target = 0;
	for (i = 0; i < s->nslabs; i++) {
		struct slab_info *x = &s->si[i];
		uint32_t lo = 0, hi = s->nbuf;

		if (x->state == S_BROKEN) {
			lo = x->bad_lo;
			hi = x->bad_hi;
		} else if (x->state != S_MAPPED) {
			continue;
		}
		if (x->state == S_MAPPED)
			slab_list_del(s, i);
		if (x->state == S_BROKEN)
			s->n_broken--;
		x->state = S_BUSY;
		s->n_busy++;
		pthread_mutex_unlock(&s->lock);
		if (unmap_buffers(s, i, lo, hi) < hi)
			err = EIO; /* the driver unmaps it at close */
		pthread_mutex_lock(&s->lock);
		s->n_busy--;
		slab_gone_locked(s, i, true);
	}
	{
		struct chunkset *rel = s->pool;

		s->pool = NULL;
		s->pool_count = 0;
		if (release_list_locked(s, rel) < 0)
			err = EIO;
	}
	if (s->parked && retry_parked_locked(s) < 0)
		err = EIO;
	parked = s->parked;
	s->parked = NULL;
	pthread_mutex_unlock(&s->lock);
	/* What the driver still refuses is handed to it, parked (no lock of
	 * ours held across its calls): it tries again at its next allocations
	 * and gives it back at its close. */
	while (parked) {
		struct chunkset *cs = parked;

		parked = cs->next;
		for (b = 0; b < s->nbuf; b++)
			if (cs->c[b])
				kvsi_drv_park(s->drv, 0, 0, false, cs->c[b], NULL);
		chunkset_free(s, cs);
		err = EIO;
	}
	for (b = 0; b < s->nbuf; b++)
		if (kvs_drv_unreserve(s->drv, s->base[b]) < 0) {
			/* EBUSY after an unmap that failed: that stays with the
			 * driver until its close. */
			if (errno != EBUSY)
				kvsi_drv_park(s->drv, s->base[b], 0, true, NULL, NULL);
			err = EIO;
		}
	return err;
}

/* Release the chunk pool (kvs_slab_shrink()).  Lock held (dropped
 * meanwhile).  -1 with errno when a release failed (the chunk is parked). */
int slab_release_pool_locked(struct kvs_slab *s)
{
	struct chunkset *rel = s->pool;

	s->pool = NULL;
	s->pool_count = 0;
	return release_list_locked(s, rel);
}
