/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/sim_tier.h - the request side of SGLang's scheduler with
 * HiCache over kvslab's hierarchical radix cache (kvs_hiradix) and host
 * pool (kvs_hpool), for kvslab-replay --host-pool.
 *
 * The calls mirror sim_hash.h's so that the serving loop runs any cache the
 * same way: a request is a kvs_req_t (tokens, ntokens, kv_len, prefix_len;
 * slot >= 0 while it holds memory) plus a struct rp_treq with its device
 * locations and the node that locks its cached prefix.
 */
#ifndef KVSLAB_REPLAY_SIM_TIER_H
#define KVSLAB_REPLAY_SIM_TIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvslab.h>

struct rp_tsim;
struct rp_treq;

/*
 * A hierarchical radix cache over @pool with a host pool of @host_bytes
 * (when not 0) or @host_ratio times the device pool's pages, write policy
 * @policy (KVS_WRITE_*), and @load_threshold tokens below which a host hit
 * is not loaded back (UINT64_MAX: the cache's default).  NULL with errno.
 */
struct rp_tsim *rp_tsim_create(kvs_pool_t *pool, uint64_t host_bytes, double host_ratio,
			       uint32_t policy, uint64_t load_threshold, int page_first);
void rp_tsim_destroy(struct rp_tsim *t);

/* --storage: the store under the cache (L3). */
struct rp_tstore {
	const char *uri;		/* kvs_store_open()'s */
	const char *model;		/* the namespace: the replay's model name */
	uint32_t threshold;		/* prefetch threshold, tokens */
	uint32_t policy;		/* KVS_PREFETCH_* */
};

/*
 * Open the store (pages of the host pool's bytes, which must be
 * PAGE_FIRST: @page_first above) and put it under the still empty cache,
 * backups on.  -1 with errno, *stage saying which step failed ("cannot
 * open", ...); the tsim owns the store and closes it after the cache.
 */
int rp_tsim_set_store(struct rp_tsim *t, const struct rp_tstore *ts, const char **stage);
kvs_store_t *rp_tsim_store(struct rp_tsim *t);
/*
 * Prefetch @req's input (whole pages, its last token left to compute)
 * from the store as operation @id and wait until the policy says it is
 * over: the tokens it put on the host (0 without a store, or when nothing
 * was worth fetching), or -1 with errno.
 */
ssize_t rp_tsim_prefetch(struct rp_tsim *t, uint64_t id, const kvs_req_t *req);
/* No copy in flight: every backup to the host landed, and every one
 * queued for the store written. */
int rp_tsim_l3_wait(struct rp_tsim *t);

struct rp_treq *rp_treq_new(const struct rp_tsim *t, uint32_t max_tokens);
void rp_treq_free(struct rp_treq *q);

/* The device prefix @req would get now, in tokens (whole pages, its last
 * token left to compute); *host_hit (may be NULL) the host tokens past it. */
ssize_t rp_tsim_match(struct rp_tsim *t, kvs_req_t *req, size_t *host_hit);

/*
 * Device pages for every request's tokens up to its ntokens.  A request
 * without memory first matches again, loads back its host hit when that is
 * at least the threshold (waiting for the transfer), and locks its prefix.
 * The pool's shortfall is evicted from the cache.  All or nothing: -1 with
 * ENOMEM (the memory taken by this call is given back; what was loaded
 * back stays cached).
 */
int rp_tsim_extend(struct rp_tsim *t, struct rp_treq *const *qs, kvs_req_t *const *reqs,
		   size_t n);
/* One token more for each request; all or nothing. */
int rp_tsim_decode(struct rp_tsim *t, struct rp_treq *const *qs, kvs_req_t *const *reqs,
		   size_t n);
/* Cache the request's whole pages so far and keep running (SGLang's
 * cache_unfinished_req). */
int rp_tsim_cache_unfinished(struct rp_tsim *t, struct rp_treq *q, kvs_req_t *req);
/* Cache the request's tokens (the last has no KV) and free its memory. */
int rp_tsim_finish(struct rp_tsim *t, struct rp_treq *q, kvs_req_t *req);
/* Preempted: free its memory, cache nothing.  Never fails. */
void rp_tsim_release(struct rp_tsim *t, struct rp_treq *q, kvs_req_t *req);

/* Tokens of the request's prefix that came from the host (loaded back). */
uint64_t rp_treq_loaded(const struct rp_treq *q);

/* Take in completed transfers: once a step. */
int rp_tsim_poll(struct rp_tsim *t);
/* Device tokens of the cache nobody locks, about (evictable). */
uint64_t rp_tsim_evictable(struct rp_tsim *t);
/* Device tokens the cache holds. */
uint64_t rp_tsim_device_tokens(struct rp_tsim *t);
/* Host tokens the cache holds now. */
uint64_t rp_tsim_host_tokens(struct rp_tsim *t);
/* The host pool's capacity in tokens. */
uint64_t rp_tsim_host_tokens_max(const struct rp_tsim *t);
kvs_hiradix_t *rp_tsim_cache(struct rp_tsim *t);
/* Evict device tokens, at least @tokens where it can: the tokens freed. */
uint64_t rp_tsim_evict(struct rp_tsim *t, uint64_t tokens);
/* Evict everything from the device. */
void rp_tsim_drain(struct rp_tsim *t);

#endif
