/* SPDX-License-Identifier: MIT */
/*
 * lib/flow/flow_ops.h - the request side of a cache, as the flows drive it.
 *
 * lib/flow/flow.c holds the one path every flow call takes (slots, the
 * request table, batches all or nothing, the free paths); what differs
 * between caches is behind a table of request-side operations, one
 * implementation per cache kind: flow_radix.c (kvs_radix_t, SGLang's
 * RadixCache), flow_tiered.c (kvs_hiradix_t, SGLang's HiRadixCache: load
 * back and wait), flow_hash.c (kvs_hcache_t, vLLM v1's KVCacheManager over
 * its BlockPool).  Each constructor fills a struct kvs_flow with its table
 * and its private state (f->priv) and hands it to flow_new().
 *
 * Unless said otherwise an operation is called with flow->lock held, and
 * sets errno when it fails.  Operations a kind does not need are NULL.
 */
#ifndef KVSLAB_FLOW_OPS_H
#define KVSLAB_FLOW_OPS_H

#include <pthread.h>
#include <stdbool.h>

#include "internal.h"
#include "mem/fence.h"
#include "kvslab/flow.h"
#include "kvslab/hashcache.h"

struct kvs_flow;

struct flow_ops {
	const char *name;
	/* Requests may carry extra keys (kvs_req_t.extra_key != 0). */
	bool extra_keys;
	/* kvs_flow_match(): the prefix @req would get now, at most @cap
	 * tokens, taking nothing.  Called without flow->lock (the kind takes
	 * it if it needs it). */
	ssize_t (*match)(struct kvs_flow *f, kvs_req_t *req, size_t cap);
	/* Before a prepare: take in completed copies, and make room for
	 * what @nnew new requests will record.  May be NULL. */
	int (*prepare)(struct kvs_flow *f, size_t nnew);
	/* Match-and-lock a new request (slot set, nothing held) on its
	 * cached prefix of at most @cap tokens, write the prefix's locations
	 * into its row and return its length.  A kind may give the request
	 * locations of its own after the prefix as well, in the same row
	 * (vLLM's admission allocates them in the same call): *placed is the
	 * tokens written, >= the prefix.  @scratch has room for ntokens +
	 * page size locations.  On failure the request holds nothing. */
	ssize_t (*admit)(struct kvs_flow *f, kvs_req_t *req, size_t cap, int32_t *scratch,
			 uint32_t *placed);
	/* After a prepare_extend placed its batch (may be NULL). */
	void (*admitted)(struct kvs_flow *f);
	/* Evict for allocation: @pages new pages, @pages * page size
	 * locations into @locs, all or nothing. */
	int (*alloc)(struct kvs_flow *f, size_t pages, int32_t *locs);
	/* Give back @n locations a request owns (whole pages, or the first
	 * tokens of a page it owns all of).  Never fails, never allocates. */
	void (*put)(struct kvs_flow *f, size_t n, const int32_t *locs);
	/* @req got new locations, up to kv_len (may be NULL). */
	void (*grown)(struct kvs_flow *f, kvs_req_t *req);
	/* Insert-and-lock: cache the first @n (page-aligned) tokens of @req,
	 * whose locations are @locs; with @node, lock the node that ends
	 * them and return it there.  Returns how many leading tokens the
	 * cache had already (their locations in @locs are duplicates).
	 * NULL: the kind caches nothing at caching time (kvs_flow_cache_*
	 * only free). */
	ssize_t (*insert)(struct kvs_flow *f, kvs_req_t *req, size_t n, const int32_t *locs,
			  void **node);
	/* The cache's locations of @req's first @n tokens (locked). */
	ssize_t (*locations)(struct kvs_flow *f, kvs_req_t *req, size_t n, int32_t *locs);
	/* The node @req holds locked, or NULL; hold @node instead. */
	void *(*held)(const kvs_req_t *req);
	void (*hold)(kvs_req_t *req, void *node);
	/* Unlock @node (not NULL). */
	void (*unlock)(struct kvs_flow *f, void *node);
	/* The cache keeps nothing (a disabled cache): may be NULL. */
	bool (*disabled)(struct kvs_flow *f);
	/* Drop what @req holds, instead of the generic path (may be NULL):
	 * its locations, its lock.  Never fails, never allocates. */
	void (*release)(struct kvs_flow *f, kvs_req_t *req);
	/* Tiers: forget the loads of @req (the cache owns them). */
	void (*forget)(struct kvs_flow *f, kvs_req_t *req);
	/* Tiers: wait for @req's load before an insert; true when it failed
	 * and the request was released (flow_release_locked()). */
	bool (*settle)(struct kvs_flow *f, kvs_req_t *req);
	/* Tiers: kvs_flow_wait_layer()'s work: 0, or -1 with the copy's
	 * errno when requests were released. */
	int (*wait_layer)(struct kvs_flow *f, uint32_t layer);
	/* Free f->priv. */
	void (*destroy)(struct kvs_flow *f);
};

struct kvs_flow {
	const struct flow_ops *ops;
	kvs_pool_t *pool;
	kvs_reqtab_t *tab;
	union {
		kvs_radix_t *radix;
		kvs_hiradix_t *hr;
		kvs_hcache_t *hc;
	} c;
	void *priv;			/* the kind's own state */
	uint32_t ps;
	pthread_mutex_t lock;
	int32_t *buf;			/* 2 rows of the table, for the free paths */
	/* kvs_flow_set_stream(): the engine's stream, and the fence the
	 * freeing calls order the copy queue with (NULL: no stream given). */
	kvs_stream_t stream;
	struct kvsi_fence *fence;
	/* Rows of the call in progress stored into the table's mirror and
	 * not yet sent to the device: flow_push() sends them at its end. */
	kvs_reqtab_write_t *pend;
	size_t npend, cappend;
};

/* A flow call is about to free locations: with a stream, order every copy
 * queued from now on after the engine's work so far.  Lock held. */
int flow_fence(struct kvs_flow *f);

/* A flow over @pool and @tab with @ops; the caller sets c and priv. */
struct kvs_flow *flow_new(kvs_pool_t *pool, kvs_reqtab_t *tab, const struct flow_ops *ops);
/* Free what flow_new() made (not priv). */
void flow_free(struct kvs_flow *f);
/* Drop what @req holds and its slot; reset it.  Lock held. */
void flow_release_locked(struct kvs_flow *f, kvs_req_t *req);

/* Set entries @pos.. of @slot's row to @n @locs, sent to the device with
 * the rest of the call by flow_push(): 0 or -1.  Lock held. */
int flow_store(struct kvs_flow *f, uint32_t slot, uint32_t pos, uint32_t n,
	       const int32_t *locs);
/* Send what flow_store() stored, in one submission: 0 or -1.  Lock held. */
int flow_push(struct kvs_flow *f);

/* Write @req's first @n locations into its row: 0 or -1. */
static inline int flow_write_prefix(struct kvs_flow *f, kvs_req_t *req, uint32_t n,
				    const int32_t *locs)
{
	return n ? flow_store(f, (uint32_t)req->slot, 0, n, locs) : 0;
}

#endif /* KVSLAB_FLOW_OPS_H */
