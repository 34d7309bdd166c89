/* SPDX-License-Identifier: MIT */
/*
 * kvslab/radix.h - the radix-tree prefix cache (SGLang's RadixCache).
 * See kvs_radix_create(3) and kvslab-rcu(7).
 */
#ifndef KVSLAB_RADIX_H
#define KVSLAB_RADIX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvslab/stats.h>
#include <kvslab/pool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_radix kvs_radix_t;
typedef struct kvs_radix_node kvs_radix_node_t;

/* Eviction policies. */
#define KVS_EVICT_LRU 0
#define KVS_EVICT_LFU 1
#define KVS_EVICT_FIFO 2
#define KVS_EVICT_PRIORITY 3

/* KV event types. */
#define KVS_KV_STORED 1
#define KVS_KV_REMOVED 2
#define KVS_KV_ALL_CLEARED 3	/* kvs_radix_reset(): hash, tokens, extra_key 0, token_ids NULL */

/* Where a page is stored or removed (kvs_kv_event_t.medium). */
#define KVS_MEDIUM_GPU 0	/* device memory: every event of kvs_radix_t */
#define KVS_MEDIUM_CPU 1	/* host memory: kvs_hiradix_t's host copies */

/** One cached page stored in or removed from the tree. */
typedef struct kvs_kv_event {
	int type;			/* KVS_KV_STORED, _REMOVED or _ALL_CLEARED */
	uint64_t hash;			/* chained hash of the page */
	uint64_t parent_hash;		/* hash of the page before it (0: none) */
	uint32_t tokens;		/* tokens in the page */
	uint64_t extra_key;
	const int32_t *token_ids;	/* stored: the page's tokens token ids, or NULL */
	int medium;			/* KVS_MEDIUM_GPU or KVS_MEDIUM_CPU */
} kvs_kv_event_t;

typedef void (*kvs_kv_event_cb)(void *arg, const kvs_kv_event_t *ev);

/** Attributes of kvs_radix_create(); start from kvs_radix_attr_init(). */
typedef struct kvs_radix_attr {
	uint32_t page_size;		/* default: the pool's page size */
	int policy;			/* KVS_EVICT_*, default LRU */
	int disabled;			/* 1: the same API, nothing cached */
	kvs_kv_event_cb event_cb;	/* optional */
	void *event_arg;
	/* Optional: frees evicted locations instead of kvs_pool_free(), for a
	 * cache over another allocator (the pool may then be NULL). */
	void (*free_cb)(void *arg, const int32_t *locs, size_t n);
	void *free_arg;
	/* Slab-aware eviction (over a pool; ignored without one): among the
	 * first slab_window evictable leaves in the policy's order, evict the
	 * one whose pages' slabs hold the fewest other live pages, so that
	 * whole slabs empty.  Default 1; 0: the policy's order alone. */
	uint32_t slab_aware;
	/* Leaves weighed per eviction: 0 for KVS_RADIX_SLAB_WINDOW, at most
	 * KVS_RADIX_SLAB_WINDOW_MAX. */
	uint32_t slab_window;
	uint64_t _reserved[7];
} kvs_radix_attr_t;

#define KVS_RADIX_SLAB_WINDOW 16
#define KVS_RADIX_SLAB_WINDOW_MAX 64

int kvs_radix_attr_init(kvs_radix_attr_t *attr);
kvs_radix_t *kvs_radix_create(kvs_pool_t *pool, const kvs_radix_attr_t *attr);
int kvs_radix_destroy(kvs_radix_t *radix);

ssize_t kvs_radix_match(kvs_radix_t *radix, uint64_t extra_key, const int32_t *key, size_t n,
			int32_t *locs, kvs_radix_node_t **last);
ssize_t kvs_radix_match_ro(kvs_radix_t *radix, uint64_t extra_key, const int32_t *key, size_t n,
			   int32_t *locs);
ssize_t kvs_radix_insert(kvs_radix_t *radix, uint64_t extra_key, const int32_t *key, size_t n,
			 const int32_t *locs, int priority, kvs_radix_node_t **last);
ssize_t kvs_radix_match_lock(kvs_radix_t *radix, uint64_t extra_key, const int32_t *key, size_t n,
			     int32_t *locs, kvs_radix_node_t **last);
ssize_t kvs_radix_insert_lock(kvs_radix_t *radix, uint64_t extra_key, const int32_t *key,
			      size_t n, const int32_t *locs, int priority, kvs_radix_node_t **last);
int kvs_radix_lock(kvs_radix_t *radix, kvs_radix_node_t *node);
int kvs_radix_unlock(kvs_radix_t *radix, kvs_radix_node_t *node);
ssize_t kvs_radix_evict(kvs_radix_t *radix, size_t tokens);
int kvs_radix_reset(kvs_radix_t *radix);

uint64_t kvs_radix_evictable(kvs_radix_t *radix);
uint64_t kvs_radix_protected(kvs_radix_t *radix);
uint64_t kvs_radix_tokens(kvs_radix_t *radix);
uint64_t kvs_radix_nodes(kvs_radix_t *radix);
uint32_t kvs_radix_page_size(const kvs_radix_t *radix);
int kvs_radix_disabled(const kvs_radix_t *radix);
kvs_radix_node_t *kvs_radix_root(kvs_radix_t *radix);
int kvs_radix_validate(kvs_radix_t *radix);

/* Read under the writer lock: not from an event callback. */
KVS_STATS_DECLARE(radix, kvs_radix_t, KVS_RADIX_STATS, KVS_RADIX_STAT_ITEM, KVS_RADIX_STAT__COUNT);
kvs_pool_t *kvs_radix_pool(const kvs_radix_t *radix);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_RADIX_H */
