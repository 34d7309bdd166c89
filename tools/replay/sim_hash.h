/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/sim_hash.h - the request side of vLLM's KV cache manager
 * over kvslab's hashed block cache, for kvslab-replay --cache hash.
 *
 * The calls mirror the request flows' (kvs_flow_*) so that the serving
 * loop runs either cache the same way: a request is a kvs_req_t (tokens,
 * ntokens, kv_len, prefix_len; slot >= 0 while it holds blocks) plus a
 * struct rp_hreq with its block list and block hashes.
 */
#ifndef KVSLAB_REPLAY_SIM_HASH_H
#define KVSLAB_REPLAY_SIM_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvslab.h>

struct rp_hsim;
struct rp_hreq;

/*
 * A hashed block cache over @pool with hash function @fn (enum
 * kvs_hash_fn); @disabled: nothing is hashed or cached (vLLM without
 * prefix caching).  NULL with errno on failure.
 */
struct rp_hsim *rp_hsim_create(kvs_pool_t *pool, int fn, int disabled);
void rp_hsim_destroy(struct rp_hsim *h);

/* Per-request state for requests of at most @max_tokens tokens. */
struct rp_hreq *rp_hreq_new(const struct rp_hsim *h, uint32_t max_tokens);
void rp_hreq_free(struct rp_hreq *q);

/* The cached prefix @req would get, in tokens (capped so that its last
 * token is computed); references nothing.  -1 with errno on failure. */
ssize_t rp_hsim_match(struct rp_hsim *h, struct rp_hreq *q, kvs_req_t *req);

/*
 * Blocks for every request's tokens up to its ntokens: a request without
 * a slot first takes its cached prefix (vLLM's touch); new full blocks are
 * cached.  All or nothing: -1 with ENOMEM when the free pages and the
 * evictable blocks do not suffice (the prefixes taken are given back).
 */
int rp_hsim_extend(struct rp_hsim *h, struct rp_hreq *const *qs, kvs_req_t *const *reqs,
		   size_t n);

/* One token more for each request (kv_len + 1); all or nothing. */
int rp_hsim_decode(struct rp_hsim *h, struct rp_hreq *const *qs, kvs_req_t *const *reqs,
		   size_t n);

/* The request is done or preempted: its blocks are freed tail first, the
 * cached ones stay in the cache.  Never fails. */
void rp_hsim_release(struct rp_hsim *h, struct rp_hreq *q, kvs_req_t *req);

/* Tokens in cached blocks nobody references (evictable). */
uint64_t rp_hsim_evictable(struct rp_hsim *h);
/* Tokens in blocks referenced or cached, as whole blocks. */
uint64_t rp_hsim_block_tokens(struct rp_hsim *h);
/* Nanoseconds spent hashing blocks so far. */
uint64_t rp_hsim_hash_ns(const struct rp_hsim *h);
/* Evict evictable blocks for at least @tokens tokens: the tokens freed. */
uint64_t rp_hsim_evict(struct rp_hsim *h, uint64_t tokens);
/* Evict every evictable block. */
void rp_hsim_drain(struct rp_hsim *h);

#endif
