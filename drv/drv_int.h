/* SPDX-License-Identifier: MIT */
/*
 * drv/drv_int.h - what the two halves of the generic driver shim share:
 * drv/drv.c (opening, reserving, chunks, mappings, parking, closing) and
 * drv/drv_io.c (events, copies, synchronization, pinned host memory).
 * Their records, the statistics helpers, the failure paths, and the
 * functions one gives the other.  The design is drv/drv.c's essay.
 */
#ifndef KVSLAB_DRV_INT_H
#define KVSLAB_DRV_INT_H

#include <errno.h>
#include <stdbool.h>

#include "backend.h"
#include "kvslab/drv.h"

#define CHUNK_MAGIC 0x6b766368756e6bULL /* "kvchunk" */

struct kvs_range {
	kvs_devptr_t base;
	size_t size;
	size_t ngran;
	struct kvs_chunk **chunk;	/* per granule: mapped chunk or NULL */
	unsigned char *start;		/* per granule: 1 if a mapping starts here */
	unsigned char *access;		/* per granule: KVS_ACCESS_* */
	size_t nmapped;			/* granules mapped */
};

struct kvs_chunk {
	uint64_t magic;
	uint64_t handle;
	size_t size;
	unsigned int nmaps;
	bool released;
	struct kvs_drv *drv;
	struct kvs_chunk *prev, *next;
};

struct kvs_event {
	struct kvs_drv *drv;
	void *bev;
	struct kvs_event *prev, *next;
	/* The copies_submitted its last record on the copy queue came after
	 * (all those copies are done when it completes); 0 when it was last
	 * recorded on an engine's stream, or never. */
	_Atomic uint64_t covers;
};

struct kvs_host_block {
	void *ptr;
	size_t size;
	struct kvs_host_block *next;
};

static inline void stat_add(struct kvs_drv *d, enum kvs_drv_stat s, uint64_t v)
{
	atomic_fetch_add_explicit(&d->stats[s], v, memory_order_relaxed);
}

static inline void stat_sub(struct kvs_drv *d, enum kvs_drv_stat s, uint64_t v)
{
	atomic_fetch_sub_explicit(&d->stats[s], v, memory_order_relaxed);
}

static inline void stat_peak(struct kvs_drv *d, enum kvs_drv_stat now, enum kvs_drv_stat peak)
{
	uint64_t v = atomic_load_explicit(&d->stats[now], memory_order_relaxed);
	uint64_t p = atomic_load_explicit(&d->stats[peak], memory_order_relaxed);

	while (v > p && !atomic_compare_exchange_weak(&d->stats[peak], &p, v))
		;
}

/* Time a backend call and count its failure; keeps errno as the call left it. */
#define BE_CALL(d, expr)                                                      \
	({                                                                    \
		uint64_t t0_ = kvs_now_ns();                                      \
		int r_ = (expr);                                              \
		int e_ = errno;                                               \
		stat_add((d), KVS_DRV_STAT_ns_in_calls, kvs_now_ns() - t0_);      \
		errno = e_;                                                   \
		r_;                                                           \
	})

static inline int fail(struct kvs_drv *d, int err)
{
	if (d)
		stat_add(d, KVS_DRV_STAT_failed_calls, 1);
	errno = err;
	return -1;
}

/* fail() from under d->lock, letting it go first. */
static inline int fail_unlock(struct kvs_drv *d, int err)
{
	pthread_mutex_unlock(&d->lock);
	return fail(d, err);
}

/* @seen (copies_submitted read before a quiesce or synchronize began) is
 * done: raise copies_quiesced to it. */
static inline void drv_quiesced(struct kvs_drv *d, uint64_t seen)
{
	uint64_t q = atomic_load(&d->copies_quiesced);

	while (q < seen && !atomic_compare_exchange_weak(&d->copies_quiesced, &q, seen))
		;
}

/* drv/drv.c */
struct kvs_range *drv_range_find(struct kvs_drv *d, kvs_devptr_t addr, size_t size);
bool drv_aligned(struct kvs_drv *d, uint64_t v);
void drv_parked_retry(kvs_drv_t *d);
/* drv/drv_io.c */
void drv_event_unlink(struct kvs_drv *d, struct kvs_event *e);

#endif /* KVSLAB_DRV_INT_H */
