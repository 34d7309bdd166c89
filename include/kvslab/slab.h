/* SPDX-License-Identifier: MIT */
/*
 * kvslab/slab.h - the slab allocator for KV pages.
 *
 * An object is one KV page of page_size tokens.  A slab is a group of pages
 * whose bytes, in every buffer of the allocator (each layer's K and V range,
 * or one latent range), form whole granularity-aligned chunks, so that a slab
 * is mapped and unmapped as a unit, in all buffers or in none.  See
 * kvs_slab_create(3).
 */
#ifndef KVSLAB_SLAB_H
#define KVSLAB_SLAB_H

#include <stddef.h>
#include <stdint.h>

#include <kvslab/stats.h>
#include <kvslab/drv.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_slab kvs_slab_t;

/**
 * A fence of the engine's own: a point in its device work.  record() marks
 * the point after everything submitted so far and names it by a token;
 * query() says whether the work before it has completed (1), not yet (0),
 * or fails (-1).  The allocator calls both from its worker thread or from
 * kvs_slab_shrink() and kvs_slab_reclaim(), never from an allocation or a
 * free, with no lock of its own held.  See kvs_slab_create(3).
 */
typedef struct kvs_fence {
	int (*record)(void *arg, uint64_t *token);
	int (*query)(void *arg, uint64_t token);
	void *arg;
} kvs_fence_t;

/** Attributes of kvs_slab_create(); always start from kvs_slab_attr_init(). */
typedef struct kvs_slab_attr {
	/* Tokens per page (>= 1).  Default 1. */
	uint32_t page_size;
	/* Number of buffers (>= 1) and the bytes one token takes in each. */
	uint32_t nbuffers;
	const size_t *token_bytes;
	/* Pages the allocator can ever hold: the virtual reservation. */
	uint64_t capacity_pages;
	/* Granules per slab in the buffer with the smallest token size
	 * (>= 1; default 1): larger slabs, fewer driver calls. */
	uint32_t slab_granules;
	/* Hard limit on mapped bytes, all buffers together; 0: none. */
	size_t max_mapped;
	/* Empty mapped slabs kept ahead of demand (low watermark) and the count
	 * above which empty slabs are unmapped (high watermark, >= low). */
	uint32_t min_empty, max_empty;
	/* Created-but-unmapped chunk sets (one per slab) kept for reuse. */
	uint32_t chunk_pool;
	/* Pages that must go back to the slabs after the last growth before
	 * empty slabs are unmapped (0: at once).  Under steady pressure the
	 * allocator keeps growing and so keeps its empty slabs, instead of
	 * unmapping what it maps again a moment later. */
	uint64_t shrink_quiet;
	/* Pages a thread caches (0 disables the per-thread caches). Default 32. */
	uint32_t magazine;
	/* KVS_SLAB_F_* */
	unsigned int flags;
	/* Milliseconds an empty slab above min_empty stays mapped before it
	 * is given back (0: never for time alone).  Default 10000. */
	uint64_t decay_ms;
	/* The engine's streams whose work may read pages: a slab that empties
	 * is unmapped only after an event recorded on each of them, after it
	 * emptied, has completed.  NULL: stream 0 (cuda: the legacy default
	 * stream; host: immediate). */
	const kvs_stream_t *streams;
	uint32_t nstreams;
	/* A fence of the engine's own instead of streams (record non-NULL). */
	kvs_fence_t fence;
	uint64_t _reserved[1];
} kvs_slab_attr_t;

/* A persistent worker thread maps ahead of demand (min_empty), keeps the
 * chunk pool filled and unmaps above max_empty, off the caller's thread. */
#define KVS_SLAB_F_WORKER 0x1u
/* Map every slab at creation (as many as max_mapped allows) and never
 * unmap: a static pool, for comparison. */
#define KVS_SLAB_F_STATIC 0x2u

int kvs_slab_attr_init(kvs_slab_attr_t *attr);
kvs_slab_t *kvs_slab_create(kvs_drv_t *drv, const kvs_slab_attr_t *attr);
int kvs_slab_destroy(kvs_slab_t *slab);

int64_t kvs_slab_alloc(kvs_slab_t *slab);
int kvs_slab_free(kvs_slab_t *slab, uint32_t page);
int kvs_slab_alloc_bulk(kvs_slab_t *slab, size_t n, uint32_t *pages);
int kvs_slab_free_bulk(kvs_slab_t *slab, size_t n, const uint32_t *pages);
int kvs_slab_alloc_contig(kvs_slab_t *slab, size_t n, uint32_t *first);
int kvs_slab_ref(kvs_slab_t *slab, uint32_t page);
int kvs_slab_refcount(kvs_slab_t *slab, uint32_t page);

int kvs_slab_shrink(kvs_slab_t *slab);
int kvs_slab_reclaim(kvs_slab_t *slab);
int kvs_slab_flush(kvs_slab_t *slab);
int kvs_slab_validate(kvs_slab_t *slab);

uint32_t kvs_slab_page_size(const kvs_slab_t *slab);
uint64_t kvs_slab_capacity(const kvs_slab_t *slab);
uint32_t kvs_slab_pages_per_slab(const kvs_slab_t *slab);
uint64_t kvs_slab_available(kvs_slab_t *slab);
kvs_devptr_t kvs_slab_buffer(const kvs_slab_t *slab, uint32_t buffer);
int kvs_slab_page_mapped(kvs_slab_t *slab, uint32_t page);

/* Read under the slab's lock, the per-thread caches' counts summed. */
KVS_STATS_DECLARE(slab, kvs_slab_t, KVS_SLAB_STATS, KVS_SLAB_STAT_ITEM, KVS_SLAB_STAT__COUNT);
double kvs_slab_fragmentation(kvs_slab_t *slab);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_SLAB_H */
