/* SPDX-License-Identifier: MIT */
/*
 * drv/backend.h - what a driver backend implements.
 *
 * The generic layer (drv/drv.c) owns all bookkeeping: which ranges are
 * reserved, which chunk is mapped at which granule, access rights, limits and
 * counters.  It validates every argument before a backend sees it, so a
 * backend receives only calls that are legal by the rules of CUDA-VMM.md:
 * aligned sizes and offsets, no mapping over a mapped granule, unmaps of whole
 * mappings, set-access over fully mapped ranges, copies only through mapped
 * and accessible device memory.  A backend's job is to carry the call out and
 * report failure as -1 with errno (and, optionally, a detail string).
 *
 * Backend calls are made with no lock of the generic layer held unless the
 * comment says so; a backend protects its own state.
 */
#ifndef KVSLAB_DRV_BACKEND_H
#define KVSLAB_DRV_BACKEND_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "common.h"
#include "kvslab/drv.h"
#include "kvslab/fault.h"

struct kvs_drv_backend {
	const char *name;
	/* Optional, for "auto": 1 when open() would find a device, else 0;
	 * keeps nothing and preserves errno.  NULL: always usable. */
	int (*probe)(void);
	/* Fill drv->granularity and drv->priv; -1/errno if unusable. */
	int (*open)(struct kvs_drv *drv, const kvs_drv_attr_t *attr);
	/* Optional: kvs_drv_close() is about to give everything back. */
	void (*begin_close)(struct kvs_drv *drv);
	/* Everything was unmapped and released by the generic layer already. */
	void (*close)(struct kvs_drv *drv);
	int (*mem_info)(struct kvs_drv *drv, size_t *free_bytes, size_t *total_bytes);
	int (*reserve)(struct kvs_drv *drv, size_t size, kvs_devptr_t *base);
	int (*unreserve)(struct kvs_drv *drv, kvs_devptr_t base, size_t size);
	/* *handle is the backend's own name for the chunk (fd, CU handle...). */
	int (*create)(struct kvs_drv *drv, size_t size, uint64_t *handle);
	/* Legal while mapped: the memory lives until its last unmap. */
	int (*release)(struct kvs_drv *drv, uint64_t handle);
	/* Optional: a released chunk's last mapping is gone (or it was never
	 * mapped); its memory may go now.  Called with drv->lock held; never
	 * fails. */
	void (*chunk_free)(struct kvs_drv *drv, uint64_t handle);
	int (*map)(struct kvs_drv *drv, kvs_devptr_t addr, size_t size, uint64_t handle);
	/* Optional: wait until no queued copy (and, with KVS_DRV_F_SYNC_UNMAP,
	 * no device work) can still touch memory about to be unmapped.  Called
	 * WITHOUT drv->lock: the driver lock is never held across a device
	 * synchronization. */
	int (*quiesce)(struct kvs_drv *drv);
	/* May cover several adjacent whole mappings; quiesce() ran first and
	 * no copy was submitted since.  Called with drv->lock held. */
	int (*unmap)(struct kvs_drv *drv, kvs_devptr_t addr, size_t size);
	int (*set_access)(struct kvs_drv *drv, kvs_devptr_t addr, size_t size, int access);
	/* Copies run in submission order on one queue per driver. */
	int (*copy_htod)(struct kvs_drv *drv, kvs_devptr_t dst, const void *src, size_t n);
	int (*copy_dtoh)(struct kvs_drv *drv, void *dst, kvs_devptr_t src, size_t n);
	int (*copy_dtod)(struct kvs_drv *drv, kvs_devptr_t dst, kvs_devptr_t src, size_t n);
	/* Optional: @n (>= 1) copies of direction @kind in one submission,
	 * after every earlier copy; the entries are validated, and may run in
	 * any order.  Called with drv->lock held.  NULL: the generic layer
	 * submits them one by one. */
	int (*copy_batch)(struct kvs_drv *drv, int kind, const kvs_copy_t *c, size_t n);
	/* Optional: copies submitted after this call start only once @bev
	 * (recorded on an engine stream) has completed.  Called with
	 * drv->lock held.  NULL: engine streams and the copy queue are one
	 * order already (host), nothing to do. */
	int (*stream_wait)(struct kvs_drv *drv, void *bev);
	/* Optional: work submitted to the engine's @stream after this call
	 * starts only once @bev has completed.  NULL: the generic layer waits
	 * for @bev on the calling thread. */
	int (*event_stream_wait)(struct kvs_drv *drv, void *bev, uint64_t stream);
	/* Events mark a point in the copy queue. */
	int (*event_create)(struct kvs_drv *drv, void **bev);
	void (*event_destroy)(struct kvs_drv *drv, void *bev);
	int (*event_record)(struct kvs_drv *drv, void *bev);
	/* Record after all work submitted so far on an engine's stream. */
	int (*event_record_stream)(struct kvs_drv *drv, void *bev, uint64_t stream);
	/* 1 complete, 0 pending, -1/errno: a copy before it failed. */
	int (*event_query)(struct kvs_drv *drv, void *bev);
	int (*event_wait)(struct kvs_drv *drv, void *bev);
	int (*synchronize)(struct kvs_drv *drv);
	int (*host_alloc)(struct kvs_drv *drv, size_t size, void **ptr);
	int (*host_free)(struct kvs_drv *drv, void *ptr);
};

/*
 * The operations every backend implements, named prefix_open,
 * prefix_close, ...; a backend's table lists its name and its optional
 * operations, then KVSI_DRV_BACKEND_OPS(prefix).
 */
#define KVSI_DRV_BACKEND_OPS(prefix)                         \
	.open = prefix##_open,                               \
	.close = prefix##_close,                             \
	.mem_info = prefix##_mem_info,                       \
	.reserve = prefix##_reserve,                         \
	.unreserve = prefix##_unreserve,                     \
	.create = prefix##_create,                           \
	.release = prefix##_release,                         \
	.map = prefix##_map,                                 \
	.unmap = prefix##_unmap,                             \
	.set_access = prefix##_set_access,                   \
	.copy_htod = prefix##_copy_htod,                     \
	.copy_dtoh = prefix##_copy_dtoh,                     \
	.copy_dtod = prefix##_copy_dtod,                     \
	.event_create = prefix##_event_create,               \
	.event_destroy = prefix##_event_destroy,             \
	.event_record = prefix##_event_record,               \
	.event_record_stream = prefix##_event_record_stream, \
	.event_query = prefix##_event_query,                 \
	.event_wait = prefix##_event_wait,                   \
	.synchronize = prefix##_synchronize,                 \
	.host_alloc = prefix##_host_alloc,                   \
	.host_free = prefix##_host_free,

struct kvs_range;
struct kvs_host_block;

struct kvs_drv {
	const struct kvs_drv_backend *be;
	void *priv;			/* backend state */
	size_t granularity;
	size_t mem_limit;
	unsigned int flags;
	unsigned int caps;		/* KVS_DRV_CAP_*, set by the backend's open */

	pthread_mutex_t lock;		/* protects everything below */
	struct kvs_range **ranges;	/* sorted by base */
	size_t nranges, cap_ranges;
	struct kvs_chunk *chunks;	/* all live chunks (doubly linked) */
	void **cset;			/* set of live chunk pointers */
	size_t cset_n, cset_cap, pending_chunks;
	struct kvs_host_block *host_blocks;
	size_t pending_create;		/* bytes being created right now */
	struct kvs_event *events;	/* live events */
	struct kvs_parked *parked;	/* what an undo could not give back */
	_Atomic bool has_parked;	/* parked != NULL, read without the lock */

	_Atomic uint64_t copies_submitted;	/* bumped under lock per copy */
	/* The copies_submitted a finished quiesce()/synchronize() covered:
	 * while the two are equal no copy can be running. */
	_Atomic uint64_t copies_quiesced;
	_Atomic uint64_t stats[KVS_DRV_STAT__COUNT];
	char errdetail[160];		/* last backend detail; best effort */
};

/*
 * The backends kvs_drv_open() knows by name, in "auto" preference order
 * (drv/registry.c).  An entry whose backend was not built has be == NULL:
 * opening it by name fails with ENODEV rather than ENOENT.
 */
struct kvsi_backend_entry {
	const char *name;
	const struct kvs_drv_backend *be;
};

extern const struct kvsi_backend_entry kvsi_backends[];
extern const size_t kvsi_nbackends;

extern const struct kvs_drv_backend kvsi_backend_host;
#ifdef KVS_HAVE_CUDA
extern const struct kvs_drv_backend kvsi_backend_cuda;
#endif
extern const struct kvs_drv_backend kvsi_backend_fault;

/* Allocate and initialise the generic part; used by kvs_fault_open too. */
struct kvs_drv *kvsi_drv_new(const struct kvs_drv_backend *be, const kvs_drv_attr_t *attr);

/*
 * Record a backend detail message for kvs_drv_strerror().  Inline so that a
 * backend never calls back into drv.c; best effort under races (see the man
 * page: MT-Unsafe race:detail).
 */
static inline __attribute__((format(printf, 2, 3)))
void kvsi_drv_set_detail(struct kvs_drv *drv, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(drv->errdetail, sizeof(drv->errdetail), fmt, ap);
	va_end(ap);
}

/* A counter of @drv, read directly (for backends). */
static inline uint64_t kvsi_drv_stat(struct kvs_drv *drv, enum kvs_drv_stat s)
{
	return atomic_load_explicit(&drv->stats[s], memory_order_relaxed);
}

#endif /* KVSLAB_DRV_BACKEND_H */
