/* SPDX-License-Identifier: MIT */
/*
 * kvslab/hostpool.h - the host (L2) pool of the KV cache tiers: pinned host
 * memory in pages of a device pool's page size, with asynchronous copies
 * between device pages and host pages (SGLang HiCache's HostKVCache) and
 * per-layer completion of a transfer (its LayerDoneCounter).  See
 * kvs_hpool_create(3), kvs_hpool_alloc(3), kvs_hpool_backup(3).
 */
#ifndef KVSLAB_HOSTPOOL_H
#define KVSLAB_HOSTPOOL_H

#include <stddef.h>
#include <stdint.h>

#include <kvslab/stats.h>
#include <kvslab/pool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_hpool kvs_hpool_t;
typedef struct kvs_hpool_xfer kvs_hpool_xfer_t;

/* Layouts of host memory.  LAYER_FIRST: one array of pages per buffer of the
 * device pool (each layer's K and V, or its latent vectors), as the device
 * pool keeps them.  PAGE_FIRST: a page's bytes of every buffer together, in
 * buffer order (layer 0 K, layer 0 V, layer 1 K, ...): one contiguous block
 * per page, the unit a storage tier (L3) keeps. */
#define KVS_HPOOL_LAYER_FIRST 0
#define KVS_HPOOL_PAGE_FIRST 1

/** Attributes of kvs_hpool_create(); always start from kvs_hpool_attr_init(). */
typedef struct kvs_hpool_attr {
	/* KVS_HPOOL_LAYER_FIRST (default) or KVS_HPOOL_PAGE_FIRST. */
	uint32_t layout;
	uint32_t _pad;
	/* The size: exactly one of the two is non-zero.  ratio: host pages =
	 * device pages x ratio, rounded down (default 2.0, SGLang's
	 * --hicache-ratio); bytes: host memory, rounded down to whole pages
	 * (set ratio to 0 when giving bytes). */
	double ratio;
	size_t bytes;
	/* The engine's streams that write and read the device pool's pages
	 * (the pool copies the array): every transfer is ordered on the
	 * device after the work queued on them before it (kvs_event_record()
	 * then kvs_drv_stream_wait()), so a backup needs no host
	 * synchronization first.  NULL and 0: none. */
	const kvs_stream_t *streams;
	uint32_t nstreams;
	uint32_t _pad2;
	uint64_t _reserved[6];
} kvs_hpool_attr_t;

int kvs_hpool_attr_init(kvs_hpool_attr_t *attr);
kvs_hpool_t *kvs_hpool_create(kvs_pool_t *dev, const kvs_hpool_attr_t *attr);
int kvs_hpool_destroy(kvs_hpool_t *hp);

uint64_t kvs_hpool_capacity(const kvs_hpool_t *hp);
uint64_t kvs_hpool_available(kvs_hpool_t *hp);
kvs_pool_t *kvs_hpool_pool(const kvs_hpool_t *hp);

int kvs_hpool_alloc(kvs_hpool_t *hp, size_t n, int32_t *pages);
int kvs_hpool_free(kvs_hpool_t *hp, size_t n, const int32_t *pages);

int kvs_hpool_page_ptr(kvs_hpool_t *hp, int32_t page, uint32_t layer, int which, void **ptr,
		       size_t *bytes);
int kvs_hpool_page_bytes(kvs_hpool_t *hp, int32_t page, void **ptr, size_t *bytes);

int kvs_hpool_backup(kvs_hpool_t *hp, const int32_t *dev_pages, const int32_t *host_pages,
		     size_t n, kvs_hpool_xfer_t **xfer);
int kvs_hpool_load(kvs_hpool_t *hp, const int32_t *dev_pages, const int32_t *host_pages,
		   size_t n, kvs_hpool_xfer_t **xfer);

int kvs_hpool_xfer_query(kvs_hpool_xfer_t *xfer);
int kvs_hpool_xfer_wait(kvs_hpool_xfer_t *xfer);
int kvs_hpool_xfer_layer_query(kvs_hpool_xfer_t *xfer, uint32_t layer);
int kvs_hpool_xfer_layer_wait(kvs_hpool_xfer_t *xfer, uint32_t layer);
int kvs_hpool_xfer_layer_stream_wait(kvs_hpool_xfer_t *xfer, uint32_t layer,
				     kvs_stream_t stream);

/* Read in one snapshot under the pool's lock. */
KVS_STATS_DECLARE(hpool, kvs_hpool_t, KVS_HPOOL_STATS, KVS_HPOOL_STAT_ITEM, KVS_HPOOL_STAT__COUNT);
int kvs_hpool_xfer_free(kvs_hpool_xfer_t *xfer);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_HOSTPOOL_H */
