/* SPDX-License-Identifier: MIT */
/*
 * kvslab/flow.h - request flows over the pool, the request table and a
 * prefix cache: the radix cache or the hierarchical (tiered) radix cache
 * (SGLang's ScheduleBatch and tree-cache calls), or the hashed block cache
 * (vLLM's KVCacheManager).  See kvs_flow_create(3),
 * kvs_flow_create_tiered(3) and kvs_flow_create_hashed(3).
 */
#ifndef KVSLAB_FLOW_H
#define KVSLAB_FLOW_H

#include <stddef.h>
#include <stdint.h>

#include <kvslab/blockhash.h>
#include <kvslab/hashcache.h>
#include <kvslab/hiradix.h>
#include <kvslab/pool.h>
#include <kvslab/radix.h>
#include <kvslab/reqtab.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_flow kvs_flow_t;

/** One request.  The caller owns the token array and sets ntokens; the
 * flows own the other fields (start them with kvs_req_init()). */
typedef struct kvs_req {
	const int32_t *tokens;		/* input ids, then generated ids */
	uint32_t ntokens;		/* tokens to have KV for after the next extend */
	uint64_t extra_key;		/* LoRA id, cache salt; 0: none */
	int priority;
	/* Managed by the flows. */
	int32_t slot;			/* request-table row, -1: none */
	uint32_t prefix_len;		/* cached prefix, locked in the tree */
	uint32_t kv_len;		/* tokens whose KV locations are in the row */
	kvs_radix_node_t *last_node;	/* locked node, NULL: none */
	/* Managed by tiered flows (kvs_flow_create_tiered()). */
	uint32_t host_hit_len;		/* tokens past the device prefix the match found on the host */
	uint32_t loaded_len;		/* of those, tokens loaded back at admission */
	kvs_hiradix_node_t *hi_node;	/* locked node of the tiered cache, NULL: none */
	uint64_t _reserved[2];
} kvs_req_t;

int kvs_req_init(kvs_req_t *req, const int32_t *tokens, uint32_t ntokens, uint64_t extra_key,
		 int priority);

kvs_flow_t *kvs_flow_create(kvs_pool_t *pool, kvs_reqtab_t *tab, kvs_radix_t *radix);
kvs_flow_t *kvs_flow_create_tiered(kvs_pool_t *pool, kvs_reqtab_t *tab, kvs_hiradix_t *hr);
kvs_flow_t *kvs_flow_create_hashed(kvs_pool_t *pool, kvs_reqtab_t *tab, kvs_hcache_t *hc,
				   const kvs_block_hasher_attr_t *attr);
int kvs_flow_destroy(kvs_flow_t *flow);

ssize_t kvs_flow_match(kvs_flow_t *flow, kvs_req_t *req);
ssize_t kvs_flow_prepare_extend(kvs_flow_t *flow, kvs_req_t *const *reqs, size_t n,
				int32_t *out_locs);
int kvs_flow_prepare_decode(kvs_flow_t *flow, kvs_req_t *const *reqs, size_t n,
			    int32_t *out_locs);
int kvs_flow_cache_unfinished(kvs_flow_t *flow, kvs_req_t *req);
int kvs_flow_cache_finished(kvs_flow_t *flow, kvs_req_t *req);
int kvs_flow_release(kvs_flow_t *flow, kvs_req_t *req);
int kvs_flow_wait_layer(kvs_flow_t *flow, uint32_t layer);
int kvs_flow_set_stream(kvs_flow_t *flow, const kvs_stream_t *stream);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_FLOW_H */
