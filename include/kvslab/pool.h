/* SPDX-License-Identifier: MIT */
/*
 * kvslab/pool.h - the KV pool (SGLang's token_to_kv_pool and its allocator)
 * and the memory planner.  See kvs_pool_create(3) and kvs_plan(3).
 */
#ifndef KVSLAB_POOL_H
#define KVSLAB_POOL_H

#include <stddef.h>
#include <stdint.h>

#include <kvslab/drv.h>
#include <kvslab/slab.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_ATTN_MHA 0
#define KVS_ATTN_MLA 1

/** A model's KV shape. */
typedef struct kvs_model {
	uint32_t layers;
	uint32_t kv_heads;		/* all KV heads, before the TP split */
	uint32_t head_dim;
	uint32_t dtype_size;		/* bytes per element */
	uint32_t tp_size;		/* tensor-parallel ranks, >= 1 */
	uint32_t attn;			/* KVS_ATTN_MHA or KVS_ATTN_MLA */
	uint32_t kv_lora_rank;		/* MLA: compressed KV width */
	uint32_t qk_rope_head_dim;	/* MLA: rotary part */
	uint32_t context_len;		/* the model's context length */
	uint32_t _reserved[7];
} kvs_model_t;

int kvs_model_preset(const char *name, kvs_model_t *model);
const char *kvs_model_preset_name(unsigned int index);
size_t kvs_model_cell_size(const kvs_model_t *model);
uint32_t kvs_model_kv_heads_per_rank(const kvs_model_t *model);

/** Inputs of the planner; start from kvs_plan_attr_init(). */
typedef struct kvs_plan_attr {
	kvs_model_t model;
	uint32_t page_size;		/* default 1 */
	double mem_fraction_static;	/* default 0.88 */
	size_t total_bytes;		/* 0: ask the driver */
	size_t free_bytes;		/* 0: ask the driver */
	uint64_t max_total_tokens;	/* 0: no cap */
	uint32_t max_running_requests;	/* 0: derive */
	uint32_t context_len;		/* 0: the model's */
	uint64_t _reserved[8];
} kvs_plan_attr_t;

/** What the planner decided. */
typedef struct kvs_plan {
	size_t cell_size;		/* KV bytes of one token, all layers */
	uint64_t max_total_tokens;	/* aligned down to page_size */
	uint32_t max_requests;
	uint32_t req_rows, req_cols;	/* request table: max_requests + 1, context + 4 */
	size_t kv_bytes;		/* max_total_tokens * cell_size */
	size_t rest_bytes;		/* memory the planner found for KV */
	uint64_t _reserved[4];
} kvs_plan_t;

int kvs_plan_attr_init(kvs_plan_attr_t *attr);
int kvs_plan(kvs_drv_t *drv, const kvs_plan_attr_t *attr, kvs_plan_t *plan);

typedef struct kvs_pool kvs_pool_t;

/** Attributes of kvs_pool_create(); start from kvs_pool_attr_init(). */
typedef struct kvs_pool_attr {
	kvs_model_t model;
	uint32_t page_size;		/* tokens per page, default 1 */
	uint64_t max_tokens;		/* capacity: the virtual reservation */
	/* Passed to the slab allocator (see kvs_slab_create(3)). */
	size_t max_mapped;
	uint32_t min_empty, max_empty, chunk_pool, magazine, slab_granules;
	unsigned int slab_flags;
	uint64_t shrink_quiet;
	/* The plan the pool is built from, or NULL: its kv_bytes bound the
	 * bytes the pool maps, and its max_total_tokens is the default of
	 * max_tokens.  Read only during kvs_pool_create(). */
	const kvs_plan_t *plan;
	/* Passed to the slab allocator: how long an empty slab stays mapped
	 * (default 10000 ms; 0: no time-based give-back), and what orders an
	 * unmap after the device's last read: the engine's streams (NULL:
	 * stream 0) or its own fence.  See kvs_slab_create(3). */
	const kvs_stream_t *streams;
	uint32_t nstreams;
	uint32_t decay_ms;
	kvs_fence_t fence;
	uint64_t _reserved[1];
} kvs_pool_attr_t;

/* Which buffer of a layer. */
#define KVS_KV_K 0
#define KVS_KV_V 1
#define KVS_KV_LATENT 2

int kvs_pool_attr_init(kvs_pool_attr_t *attr);
kvs_pool_t *kvs_pool_create(kvs_drv_t *drv, const kvs_pool_attr_t *attr);
int kvs_pool_destroy(kvs_pool_t *pool);

int kvs_pool_alloc(kvs_pool_t *pool, size_t n, int32_t *locs);
int kvs_pool_free(kvs_pool_t *pool, size_t n, const int32_t *locs);
int kvs_pool_ref(kvs_pool_t *pool, size_t n, const int32_t *locs);
uint64_t kvs_pool_available(kvs_pool_t *pool);
uint64_t kvs_pool_capacity(const kvs_pool_t *pool);
uint32_t kvs_pool_page_size(const kvs_pool_t *pool);
kvs_slab_t *kvs_pool_slab(kvs_pool_t *pool);

int kvs_pool_buffer(const kvs_pool_t *pool, uint32_t layer, int which, kvs_devptr_t *ptr,
		    size_t *token_stride);
int kvs_pool_set_kv(kvs_pool_t *pool, uint32_t layer, int32_t loc, size_t n, const void *k,
		    const void *v);
int kvs_pool_get_kv(kvs_pool_t *pool, uint32_t layer, int32_t loc, size_t n, void *k, void *v);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_POOL_H */
