/* SPDX-License-Identifier: MIT */
/*
 * kvslab/hashcache.h - the hashed block cache (vLLM v1's BlockPool:
 * automatic prefix caching by block hash).  See kvs_hcache_create(3).
 */
#ifndef KVSLAB_HASHCACHE_H
#define KVSLAB_HASHCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvslab/stats.h>
#include <kvslab/blockhash.h>
#include <kvslab/pool.h>
#include <kvslab/radix.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A block hash, kvs_block_hash_t of <kvslab/blockhash.h>, is opaque to the
 * cache: the first len (1 to 32) bytes count. */

typedef struct kvs_hcache kvs_hcache_t;

/** One KV event of a hashed block cache (types KVS_KV_* of kvslab/radix.h). */
typedef struct kvs_hcache_event {
	int type;			/* KVS_KV_STORED, _REMOVED or _ALL_CLEARED */
	const kvs_block_hash_t *hashes;	/* the blocks stored or removed */
	size_t nhashes;
	const kvs_block_hash_t *parent;	/* stored: the block before them, or NULL */
	uint32_t tokens;		/* stored: nhashes * block_size */
	uint32_t block_size;		/* tokens per block */
	uint64_t extra_key;		/* stored: the caller's extra key (LoRA id...) */
	const int32_t *token_ids;	/* stored: the tokens token ids, or NULL */
} kvs_hcache_event_t;

typedef void (*kvs_hcache_event_cb)(void *arg, const kvs_hcache_event_t *ev);

/** Attributes of kvs_hcache_create(); start from kvs_hcache_attr_init(). */
typedef struct kvs_hcache_attr {
	uint32_t window;		/* requests in the hit-ratio window, default 1000 */
	kvs_hcache_event_cb event_cb;	/* optional: events with whole hashes */
	void *event_arg;
	kvs_kv_event_cb kv_event_cb;	/* optional: one kvs_kv_event_t a block, */
	void *kv_event_arg;		/* hash = the low 64 bits of the block hash */
	uint64_t _reserved[8];
} kvs_hcache_attr_t;

/** What kvs_hcache_stats() reports. */
typedef struct kvs_hcache_stats {
	uint64_t queries;		/* requests looked up (lookup and admit calls) */
	uint64_t query_blocks;		/* blocks they could have hit (after the cap) */
	uint64_t hit_blocks;		/* blocks they hit */
	uint64_t window_queries;	/* the same over the last window requests */
	uint64_t window_query_blocks;
	uint64_t window_hit_blocks;
	double window_hit_ratio;	/* window_hit_blocks / window_query_blocks, 0 if none */
	uint64_t cached_blocks;		/* blocks with a hash (table entries) */
	uint64_t free_queue_blocks;	/* cached blocks of refcount 0 */
	uint64_t used_blocks;		/* blocks of refcount > 0 */
	uint64_t evictions;		/* cached blocks evicted */
	/* vLLM's PrefixCacheStats, in tokens: its hit rate is
	 * hit_tokens / query_tokens (window_ over the last window requests). */
	uint64_t query_tokens;		/* the requests' tokens */
	uint64_t hit_tokens;		/* their hit blocks' tokens */
	uint64_t window_query_tokens;
	uint64_t window_hit_tokens;
	uint64_t _reserved[1];
} kvs_hcache_stats_t;

int kvs_hcache_attr_init(kvs_hcache_attr_t *attr);
kvs_hcache_t *kvs_hcache_create(kvs_pool_t *pool, const kvs_hcache_attr_t *attr);
int kvs_hcache_destroy(kvs_hcache_t *hc);

ssize_t kvs_hcache_lookup(kvs_hcache_t *hc, const kvs_block_hash_t *hashes, size_t nhashes,
			  size_t ntokens, int32_t *blocks);
ssize_t kvs_hcache_match_ro(kvs_hcache_t *hc, const kvs_block_hash_t *hashes, size_t nhashes,
			    size_t ntokens);
int kvs_hcache_alloc(kvs_hcache_t *hc, size_t n, int32_t *blocks);
ssize_t kvs_hcache_admit(kvs_hcache_t *hc, const kvs_block_hash_t *hashes, size_t nhashes,
			 size_t ntokens, size_t nblocks, int32_t *blocks);
int kvs_hcache_cache(kvs_hcache_t *hc, const int32_t *blocks, size_t n,
		     const kvs_block_hash_t *hashes, const kvs_block_hash_t *parent,
		     uint64_t extra_key, const int32_t *tokens);
int kvs_hcache_free(kvs_hcache_t *hc, const int32_t *blocks, size_t n);
int32_t kvs_hcache_find(kvs_hcache_t *hc, const kvs_block_hash_t *hash);
int kvs_hcache_touch(kvs_hcache_t *hc, const int32_t *blocks, size_t n);
ssize_t kvs_hcache_evict(kvs_hcache_t *hc, size_t n);
int kvs_hcache_reset(kvs_hcache_t *hc);

int kvs_hcache_stats(kvs_hcache_t *hc, kvs_hcache_stats_t *st);

/* Read under the cache's lock, as kvs_hcache_stats() does. */
KVS_STATS_DECLARE(hcache, kvs_hcache_t, KVS_HCACHE_STATS, KVS_HCACHE_STAT_ITEM, KVS_HCACHE_STAT__COUNT);
ssize_t kvs_hcache_free_queue(kvs_hcache_t *hc, int32_t *blocks, size_t max);
int kvs_hcache_block(kvs_hcache_t *hc, int32_t block, uint32_t *ref, kvs_block_hash_t *hash);
uint32_t kvs_hcache_block_size(const kvs_hcache_t *hc);
int kvs_hcache_validate(kvs_hcache_t *hc);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_HASHCACHE_H */
