/* SPDX-License-Identifier: MIT */
/*
 * kvslab/hiradix.h - the hierarchical radix cache: a prefix tree whose nodes
 * keep their KV on the device (L1), on the host (L2), or both, with SGLang
 * HiCache's write policies, two-level eviction and load back.  See
 * kvs_hiradix_create(3).
 */
#ifndef KVSLAB_HIRADIX_H
#define KVSLAB_HIRADIX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvslab/stats.h>
#include <kvslab/pool.h>
#include <kvslab/hostpool.h>
#include <kvslab/radix.h>
#include <kvslab/storage.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_hiradix kvs_hiradix_t;
typedef struct kvs_hiradix_node kvs_hiradix_node_t;

/* Write policies (SGLang's --hicache-write-policy). */
#define KVS_WRITE_THROUGH 0		/* back up every node as it is inserted */
#define KVS_WRITE_THROUGH_SELECTIVE 1	/* back up a node once hit threshold times */
#define KVS_WRITE_BACK 2		/* back up a node when evicted from the device */

/* Controller flags (kvs_hiradix_attr_t.flags). */
#define KVS_HIRADIX_DEFER 0x1	/* queue copies until kvs_hiradix_submit() or a poll */
#define KVS_HIRADIX_THREAD 0x2	/* a background thread submits and polls */
/* kvslab's former choices, where SGLang's HiCache (the default) differs: */
#define KVS_HIRADIX_REMAT_HIT 0x4	/* a tombstone an insert re-materialises counts a hit */
#define KVS_HIRADIX_QUOTA_CHAIN 0x8	/* load back's quota bounds the chain alone */

/* What the agree hook is asked to agree on (the minimum across ranks). */
#define KVS_AGREE_WRITE_ACKS 1	/* completed backup batches to take in */
#define KVS_AGREE_LOAD 2	/* tokens to load back */
#define KVS_AGREE_PREFETCH 3	/* tokens a prefetch read, to take into the tree */

typedef uint64_t (*kvs_hiradix_agree_cb)(void *arg, int what, uint64_t value);

/** Attributes of kvs_hiradix_create(); start from kvs_hiradix_attr_init(). */
typedef struct kvs_hiradix_attr {
	uint32_t write_policy;		/* default KVS_WRITE_THROUGH */
	uint32_t hit_threshold;		/* WRITE_THROUGH_SELECTIVE's, default 2 */
	uint64_t load_back_threshold;	/* tokens below which load back is skipped, default 10 */
	uint32_t flags;			/* KVS_HIRADIX_DEFER, _THREAD, _REMAT_HIT, _QUOTA_CHAIN; default 0 */
	uint32_t poll_us;		/* the thread's period, default 1000 */
	kvs_hiradix_agree_cb agree;	/* tensor-parallel ranks agree on a minimum; optional */
	void *agree_arg;
	kvs_kv_event_cb event_cb;	/* KV events of both tiers; optional */
	void *event_arg;
	uint64_t _reserved[1];
} kvs_hiradix_attr_t;

/** What kvs_hiradix_match() found besides the device prefix. */
typedef struct kvs_hiradix_match {
	size_t host_hit;		  /* tokens past the device prefix found on the host */
	kvs_hiradix_node_t *last_device;  /* deepest matched node on the device (or the root) */
	kvs_hiradix_node_t *last_node;	  /* deepest matched node (load back's argument) */
	kvs_hiradix_node_t *last_host;	  /* deepest matched node with a valid host copy */
	uint64_t _reserved[4];
} kvs_hiradix_match_t;

/** A node's state, from kvs_hiradix_node_info(). */
typedef struct kvs_hiradix_node_info {
	size_t tokens;			/* tokens of the node's key */
	int on_device;			/* holds device pages */
	int on_host;			/* holds a valid host copy */
	int backup_pending;		/* a backup to the host is in flight */
	int loading;			/* a load back into it is in flight */
	uint32_t lock_ref;
	uint32_t hit_count;
	uint64_t _reserved[4];
} kvs_hiradix_node_info_t;

/** Tokens held, from kvs_hiradix_usage(). */
typedef struct kvs_hiradix_usage {
	uint64_t nodes;			/* nodes, the root not counted */
	uint64_t device_tokens;		/* tokens on the device */
	uint64_t host_tokens;		/* tokens with host pages (valid or in flight) */
	uint64_t tombstone_tokens;	/* tokens on the host only */
	uint64_t backups_pending;	/* backups in flight */
	uint64_t loads_pending;		/* loads back in flight */
	uint64_t _reserved[4];
} kvs_hiradix_usage_t;

int kvs_hiradix_attr_init(kvs_hiradix_attr_t *attr);
kvs_hiradix_t *kvs_hiradix_create(kvs_pool_t *pool, kvs_hpool_t *hp,
				  const kvs_hiradix_attr_t *attr);
int kvs_hiradix_destroy(kvs_hiradix_t *h);

ssize_t kvs_hiradix_match(kvs_hiradix_t *h, const int32_t *key, size_t n, int32_t *locs,
			  kvs_hiradix_match_t *m);
ssize_t kvs_hiradix_insert(kvs_hiradix_t *h, const int32_t *key, size_t n, const int32_t *locs,
			   kvs_hiradix_node_t **last);
ssize_t kvs_hiradix_match_lock(kvs_hiradix_t *h, const int32_t *key, size_t n, int32_t *locs,
			       kvs_hiradix_match_t *m);
ssize_t kvs_hiradix_match_extra(kvs_hiradix_t *h, uint64_t extra_key, const int32_t *key, size_t n,
				int32_t *locs, kvs_hiradix_match_t *m);
ssize_t kvs_hiradix_insert_extra(kvs_hiradix_t *h, uint64_t extra_key, const int32_t *key, size_t n,
				 const int32_t *locs, kvs_hiradix_node_t **last);
ssize_t kvs_hiradix_match_lock_extra(kvs_hiradix_t *h, uint64_t extra_key, const int32_t *key,
				     size_t n, int32_t *locs, kvs_hiradix_match_t *m);
ssize_t kvs_hiradix_insert_lock_extra(kvs_hiradix_t *h, uint64_t extra_key, const int32_t *key,
				      size_t n, const int32_t *locs, kvs_hiradix_node_t **last);
ssize_t kvs_hiradix_insert_lock(kvs_hiradix_t *h, const int32_t *key, size_t n,
				const int32_t *locs, kvs_hiradix_node_t **last);
int kvs_hiradix_lock(kvs_hiradix_t *h, kvs_hiradix_node_t *node);
int kvs_hiradix_unlock(kvs_hiradix_t *h, kvs_hiradix_node_t *node);

ssize_t kvs_hiradix_evict_device(kvs_hiradix_t *h, size_t tokens);
ssize_t kvs_hiradix_evict_host(kvs_hiradix_t *h, size_t tokens);
ssize_t kvs_hiradix_load_back(kvs_hiradix_t *h, kvs_hiradix_node_t *node, size_t quota,
			      int32_t *locs, kvs_hpool_xfer_t **xfer);
int kvs_hiradix_poll(kvs_hiradix_t *h);

/* Prefetch policies (kvs_hiradix_l3_attr_t.prefetch_policy). */
#define KVS_PREFETCH_BEST_EFFORT 0	/* take what was read when asked */
#define KVS_PREFETCH_WAIT_COMPLETE 1	/* wait until every page the store has is read */
#define KVS_PREFETCH_TIMEOUT 2		/* that, or until a deadline */

/** Attributes of kvs_hiradix_set_store(); start from kvs_hiradix_l3_attr_init(). */
typedef struct kvs_hiradix_l3_attr {
	uint32_t prefetch_policy;	/* default KVS_PREFETCH_BEST_EFFORT */
	uint32_t prefetch_threshold;	/* tokens; fewer are not fetched (256) */
	uint32_t timeout_base_ms;	/* KVS_PREFETCH_TIMEOUT: base (2000) */
	uint32_t timeout_per_ktoken_ms;	/* plus this per 1024 tokens (100) */
	uint32_t timeout_max_ms;	/* capped at (30000) */
	uint32_t chunk_pages;		/* pages per read of the store (16) */
	uint32_t backup;		/* 1: back valid host copies up to the store (1) */
	uint32_t _pad;
	uint64_t _reserved[6];
} kvs_hiradix_l3_attr_t;

int kvs_hiradix_l3_attr_init(kvs_hiradix_l3_attr_t *attr);
int kvs_hiradix_set_store(kvs_hiradix_t *h, kvs_store_t *store, const kvs_hiradix_l3_attr_t *attr);
ssize_t kvs_hiradix_prefetch(kvs_hiradix_t *h, uint64_t id, const int32_t *key, size_t n);
int kvs_hiradix_prefetch_done(kvs_hiradix_t *h, uint64_t id, size_t *tokens);
int kvs_hiradix_prefetch_revoke(kvs_hiradix_t *h, uint64_t id);
int kvs_hiradix_l3_wait(kvs_hiradix_t *h);
int kvs_hiradix_submit(kvs_hiradix_t *h, kvs_hpool_xfer_t **load_xfer);

kvs_hiradix_node_t *kvs_hiradix_root(kvs_hiradix_t *h);
kvs_pool_t *kvs_hiradix_pool(const kvs_hiradix_t *h);
int kvs_hiradix_node_info(kvs_hiradix_t *h, const kvs_hiradix_node_t *node,
			  kvs_hiradix_node_info_t *info);
int kvs_hiradix_usage(kvs_hiradix_t *h, kvs_hiradix_usage_t *u);

/* The gauges walk the tree under the cache's lock. */
KVS_STATS_DECLARE(hiradix, kvs_hiradix_t, KVS_HIRADIX_STATS, KVS_HIRADIX_STAT_ITEM, KVS_HIRADIX_STAT__COUNT);
int kvs_hiradix_validate(kvs_hiradix_t *h);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_HIRADIX_H */
