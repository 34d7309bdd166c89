/* SPDX-License-Identifier: MIT */
/*
 * kvslab/drv.h - the driver shim: GPU virtual memory behind one small interface.
 *
 * KV memory is reserved as virtual address ranges and backed by physical chunks
 * that are mapped and unmapped on demand.  Backends: "cuda" (the CUDA driver's
 * VMM API, loaded with dlopen), "host" (the same semantics on CPU memory:
 * mmap reservations, memfd chunks) and a fault-injecting wrapper around either
 * (declared in <kvslab/fault.h>).
 *
 * Every function returns 0 (or a count) on success and -1 with errno set on
 * failure, unless its man page says otherwise.  See kvs_drv_open(3).
 */
#ifndef KVSLAB_DRV_H
#define KVSLAB_DRV_H

#include <stddef.h>
#include <stdint.h>

#include <kvslab/stats.h>

#ifdef __cplusplus
extern "C" {
#endif

/** An address in a driver's address space (device address for cuda). */
typedef uint64_t kvs_devptr_t;

typedef struct kvs_drv kvs_drv_t;
typedef struct kvs_chunk kvs_chunk_t;
typedef struct kvs_event kvs_event_t;
/** An engine's stream (cuda: a CUstream cast to an integer; 0 is the legacy
 *  default stream).  The host backend has no streams and accepts any value. */
typedef uint64_t kvs_stream_t;

/** Attributes of kvs_drv_open(); always start from kvs_drv_attr_init(). */
typedef struct kvs_drv_attr {
	/* Hard limit on physical bytes created and on bytes mapped; 0: none. */
	size_t mem_limit;
	/* host: mapping granularity (a multiple of the system page size);
	 * 0 selects 2 MiB.  cuda: ignored, the driver's MINIMUM is used. */
	size_t granularity;
	/* host: total memory the driver reports; 0: the machine's RAM. */
	size_t total_mem;
	/* cuda: device ordinal. */
	int device;
	/* KVS_DRV_F_* flags. */
	unsigned int flags;
	/* Room to grow without breaking the ABI. */
	uint64_t _reserved[8];
} kvs_drv_attr_t;

/* Synchronize the device (cuda: cuCtxSynchronize) before every unmap. */
#define KVS_DRV_F_SYNC_UNMAP 0x1u
/* host: do not prefault pages when access is granted. */
#define KVS_DRV_F_NO_POPULATE 0x2u
/* host: commit nothing ahead of use: chunks get pages on first touch, as an
 * overcommitting OS gives them (implies NO_POPULATE), and so do the blocks
 * of kvs_drv_host_alloc() (address space reserved, MAP_NORESERVE).  For
 * simulations that account device and host memory without touching it,
 * such as kvslab-replay(1). */
#define KVS_DRV_F_LAZY 0x4u
/* cuda: create chunks GPUDirect RDMA capable (a NIC may read them);
 * off by default: such chunks cost more to create and map. */
#define KVS_DRV_F_RDMA 0x8u
/* cuda: never run a batch as a gather/scatter kernel (kvs_drv_copy_batch(3)). */
#define KVS_DRV_F_NO_KERNELS 0x10u
/* host: copies are checked, ordered, counted and complete as usual but move
 * no byte: a simulation's, whose bytes nobody reads.  With LAZY, device
 * and host memory are then never touched, so tiers of any size fit. */
#define KVS_DRV_F_NO_COPY 0x20u

/* Access flags for kvs_drv_set_access(). */
#define KVS_ACCESS_NONE 0
#define KVS_ACCESS_READ 1
#define KVS_ACCESS_RW 3

int kvs_drv_attr_init(kvs_drv_attr_t *attr);

kvs_drv_t *kvs_drv_open(const char *name, const kvs_drv_attr_t *attr);
int kvs_drv_close(kvs_drv_t *drv);
const char *kvs_drv_name(const kvs_drv_t *drv);
size_t kvs_drv_granularity(const kvs_drv_t *drv);
int kvs_drv_mem_info(kvs_drv_t *drv, size_t *free_bytes, size_t *total_bytes);
const char *kvs_drv_strerror(const kvs_drv_t *drv);
const char *kvs_drv_open_error(void);

int kvs_drv_reserve(kvs_drv_t *drv, size_t size, kvs_devptr_t *base);
int kvs_drv_unreserve(kvs_drv_t *drv, kvs_devptr_t base);

int kvs_drv_chunk_create(kvs_drv_t *drv, size_t size, kvs_chunk_t **chunk);
int kvs_drv_chunk_release(kvs_drv_t *drv, kvs_chunk_t *chunk);
size_t kvs_drv_chunk_size(const kvs_chunk_t *chunk);

int kvs_drv_map(kvs_drv_t *drv, kvs_devptr_t addr, kvs_chunk_t *chunk);
int kvs_drv_unmap(kvs_drv_t *drv, kvs_devptr_t addr, size_t size);
int kvs_drv_set_access(kvs_drv_t *drv, kvs_devptr_t addr, size_t size, int access);

int kvs_event_create(kvs_drv_t *drv, kvs_event_t **ev);
int kvs_event_destroy(kvs_event_t *ev);
int kvs_event_record(kvs_event_t *ev, kvs_stream_t stream);
int kvs_event_query(kvs_event_t *ev);
int kvs_event_wait(kvs_event_t *ev);

int kvs_drv_copy_htod(kvs_drv_t *drv, kvs_devptr_t dst, const void *src, size_t n,
		      kvs_event_t *ev);
int kvs_drv_copy_dtoh(kvs_drv_t *drv, void *dst, kvs_devptr_t src, size_t n,
		      kvs_event_t *ev);
int kvs_drv_synchronize(kvs_drv_t *drv);

/* What a backend does natively; see kvs_drv_caps(3).  Every call below works
 * on every backend: a capability says the work is done by the device, in one
 * submission, without blocking the caller, rather than emulated. */
/* kvs_drv_stream_wait() and kvs_event_stream_wait() order on the device. */
#define KVS_DRV_CAP_STREAM_WAIT 0x1u
/* kvs_drv_copy_dtod() runs on the device's copy engines. */
#define KVS_DRV_CAP_DTOD 0x2u
/* kvs_drv_copy_batch() is one driver submission (cuMemcpyBatchAsync). */
#define KVS_DRV_CAP_BATCH 0x4u
/* kvs_drv_copy_batch() may run as a gather/scatter kernel. */
#define KVS_DRV_CAP_KERNELS 0x8u

/* Directions of kvs_drv_copy_batch(). */
#define KVS_COPY_HTOD 1
#define KVS_COPY_DTOH 2
#define KVS_COPY_DTOD 3

/** One copy of a batch: device addresses, or host pointers cast to
 *  uint64_t, as the batch's direction says. */
typedef struct kvs_copy {
	uint64_t dst;
	uint64_t src;
	uint64_t bytes;
} kvs_copy_t;

unsigned int kvs_drv_caps(const kvs_drv_t *drv);
int kvs_drv_copy_dtod(kvs_drv_t *drv, kvs_devptr_t dst, kvs_devptr_t src, size_t n,
		      kvs_event_t *ev);
int kvs_drv_copy_batch(kvs_drv_t *drv, int kind, const kvs_copy_t *copies, size_t n,
		       kvs_event_t *ev);
int kvs_drv_stream_wait(kvs_drv_t *drv, kvs_event_t *ev);
int kvs_event_stream_wait(kvs_event_t *ev, kvs_stream_t stream);


/* Relaxed atomic counters, read from any thread. */
KVS_STATS_DECLARE(drv, const kvs_drv_t, KVS_DRV_STATS, KVS_DRV_STAT_ITEM, KVS_DRV_STAT__COUNT);
int kvs_drv_host_alloc(kvs_drv_t *drv, size_t size, void **ptr);
int kvs_drv_host_free(kvs_drv_t *drv, void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_DRV_H */
