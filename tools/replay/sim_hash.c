/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/sim_hash.c - vLLM v1's KVCacheManager, the request side,
 * over kvs_hcache: what kvslab-replay --cache hash runs.
 *
 * As vLLM does for one attention group: a request's prompt is hashed block
 * by block (kvs_block_hash_request()); at admission the longest run of
 * cached blocks is looked up (capped so that the last prompt token is
 * computed) and referenced; blocks for the new tokens come from
 * kvs_hcache_alloc(), which evicts from the free queue's head; every block
 * that fills, in prefill or decode, is hashed and cached at once; a
 * finished or preempted request frees its blocks tail first, so the end
 * of its longest prefix is evicted first.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "sim_hash.h"

struct rp_hsim {
	kvs_hcache_t *hc;
	kvs_block_hasher_t *hasher;
	uint32_t bs;
	int disabled;
	int32_t *scratch;		/* kvs_hcache_alloc()'s blocks */
	size_t cap_scratch;
	uint64_t hash_ns;		/* spent hashing blocks */
};

struct rp_hreq {
	int32_t *blocks;		/* block of each block-sized piece of the request */
	kvs_block_hash_t *hashes;	/* hash of each full block of known tokens */
	size_t nblocks, nhashes;
	size_t ncached;			/* blocks[0..ncached) carry their hash */
	size_t max_blocks;
	int fresh;			/* took its prefix in this rp_hsim_extend() */
};

struct rp_hsim *rp_hsim_create(kvs_pool_t *pool, int fn, int disabled)
{
	struct rp_hsim *h = calloc(1, sizeof(*h));
	kvs_block_hasher_attr_t ha;

	if (!h)
		return NULL;
	h->bs = kvs_pool_page_size(pool);
	h->disabled = disabled;
	h->hc = kvs_hcache_create(pool, NULL);
	kvs_block_hasher_attr_init(&ha);
	ha.fn = fn;
	ha.block_size = h->bs;
	if (h->hc)
		h->hasher = kvs_block_hasher_create(&ha);
	if (!h->hc || !h->hasher) {
		int e = errno;

		rp_hsim_destroy(h);
		errno = e;
		return NULL;
	}
	return h;
}

void rp_hsim_destroy(struct rp_hsim *h)
{
	if (!h)
		return;
	kvs_hcache_destroy(h->hc);
	kvs_block_hasher_destroy(h->hasher);
	free(h->scratch);
	free(h);
}

struct rp_hreq *rp_hreq_new(const struct rp_hsim *h, uint32_t max_tokens)
{
	struct rp_hreq *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->max_blocks = ((size_t)max_tokens + h->bs - 1) / h->bs + 1;
	q->blocks = malloc(q->max_blocks * sizeof(*q->blocks));
	q->hashes = malloc(q->max_blocks * sizeof(*q->hashes));
	if (!q->blocks || !q->hashes) {
		rp_hreq_free(q);
		return NULL;
	}
	return q;
}

void rp_hreq_free(struct rp_hreq *q)
{
	if (q) {
		free(q->blocks);
		free(q->hashes);
		free(q);
	}
}

/* Hash the full blocks of the request's first @ntokens tokens. */
static int hash_upto(struct rp_hsim *h, struct rp_hreq *q, const kvs_req_t *req, size_t ntokens)
{
	uint64_t t0;
	int rc;

	if (h->disabled || ntokens / h->bs <= q->nhashes)
		return 0;
	t0 = rp_now_ns();
	rc = kvs_block_hash_request(h->hasher, req->tokens, ntokens, NULL, q->hashes,
				    q->max_blocks, &q->nhashes);
	h->hash_ns += rp_now_ns() - t0;
	return rc;
}

uint64_t rp_hsim_hash_ns(const struct rp_hsim *h)
{
	return h->hash_ns;
}

ssize_t rp_hsim_match(struct rp_hsim *h, struct rp_hreq *q, kvs_req_t *req)
{
	ssize_t m;

	if (h->disabled || req->ntokens == 0)
		return 0;
	if (hash_upto(h, q, req, req->ntokens) < 0)
		return -1;
	m = kvs_hcache_match_ro(h->hc, q->hashes, q->nhashes, req->ntokens);
	return m < 0 ? -1 : m * (ssize_t)h->bs;
}

/* Cache the blocks that are full now and have no hash yet. */
static int cache_full(struct rp_hsim *h, struct rp_hreq *q, const kvs_req_t *req)
{
	size_t full = req->kv_len / h->bs;

	if (h->disabled || full <= q->ncached)
		return 0;
	if (hash_upto(h, q, req, req->kv_len) < 0)
		return -1;
	if (kvs_hcache_cache(h->hc, q->blocks + q->ncached, full - q->ncached,
			     q->hashes + q->ncached, q->ncached ? &q->hashes[q->ncached - 1] : NULL,
			     req->extra_key, req->tokens + q->ncached * h->bs) < 0)
		return -1;
	q->ncached = full;
	return 0;
}

static int take_scratch(struct rp_hsim *h, size_t n)
{
	if (n > h->cap_scratch) {
		int32_t *v = realloc(h->scratch, n * sizeof(*v));

		if (!v)
			return -1;
		h->scratch = v;
		h->cap_scratch = n;
	}
	return 0;
}

/* Give a request's blocks back, tail first, and forget its slot. */
static void drop_blocks(struct rp_hsim *h, struct rp_hreq *q, kvs_req_t *req)
{
	size_t i;

	for (i = 0; i < q->nblocks / 2; i++) {
		int32_t t = q->blocks[i];

		q->blocks[i] = q->blocks[q->nblocks - 1 - i];
		q->blocks[q->nblocks - 1 - i] = t;
	}
	/* Cannot fail: every block is held once by this request. */
	kvs_hcache_free(h->hc, q->blocks, q->nblocks);
	q->nblocks = q->ncached = 0;
	req->slot = -1;
	req->kv_len = req->prefix_len = 0;
}

int rp_hsim_extend(struct rp_hsim *h, struct rp_hreq *const *qs, kvs_req_t *const *reqs,
		   size_t n)
{
	size_t i, need = 0, k = 0;
	int e;

	for (i = 0; i < n; i++)
		qs[i]->fresh = 0;
	for (i = 0; i < n; i++) {
		kvs_req_t *r = reqs[i];
		struct rp_hreq *q = qs[i];

		if ((r->ntokens + h->bs - 1) / h->bs > q->max_blocks) {
			errno = ERANGE;
			goto undo;
		}
		if (r->slot < 0) {
			ssize_t hit = 0;

			if (!h->disabled) {
				if (hash_upto(h, q, r, r->ntokens) < 0)
					goto undo;
				hit = kvs_hcache_lookup(h->hc, q->hashes, q->nhashes, r->ntokens,
							q->blocks);
				if (hit < 0)
					goto undo;
			}
			q->nblocks = q->ncached = (size_t)hit;
			r->kv_len = r->prefix_len = (uint32_t)hit * h->bs;
			r->slot = 0;
			q->fresh = 1;
		}
		need += (r->ntokens + h->bs - 1) / h->bs - q->nblocks;
	}
	if (take_scratch(h, need) < 0 || kvs_hcache_alloc(h->hc, need, h->scratch) < 0)
		goto undo;
	for (i = 0; i < n; i++) {
		kvs_req_t *r = reqs[i];
		struct rp_hreq *q = qs[i];
		size_t want = (r->ntokens + h->bs - 1) / h->bs - q->nblocks;

		memcpy(q->blocks + q->nblocks, h->scratch + k, want * sizeof(int32_t));
		q->nblocks += want;
		k += want;
		r->kv_len = r->ntokens;
		if (cache_full(h, q, r) < 0)
			return -1;
	}
	return 0;
undo:
	/* Requests that took their cached prefix in this call give it back. */
	e = errno;
	for (i = 0; i < n; i++)
		if (qs[i]->fresh)
			drop_blocks(h, qs[i], reqs[i]);
	errno = e;
	return -1;
}

int rp_hsim_decode(struct rp_hsim *h, struct rp_hreq *const *qs, kvs_req_t *const *reqs,
		   size_t n)
{
	size_t i, need = 0, k = 0;

	for (i = 0; i < n; i++) {
		if (reqs[i]->slot < 0) {
			errno = EINVAL;
			return -1;
		}
		if (reqs[i]->kv_len == qs[i]->nblocks * h->bs) {
			if (qs[i]->nblocks == qs[i]->max_blocks) {
				errno = ERANGE;
				return -1;
			}
			need++;
		}
	}
	if (take_scratch(h, need) < 0 || kvs_hcache_alloc(h->hc, need, h->scratch) < 0)
		return -1;
	for (i = 0; i < n; i++) {
		kvs_req_t *r = reqs[i];
		struct rp_hreq *q = qs[i];

		if (r->kv_len == q->nblocks * h->bs)
			q->blocks[q->nblocks++] = h->scratch[k++];
		r->kv_len++;
		r->ntokens = r->kv_len;
		if (cache_full(h, q, r) < 0)
			return -1;
	}
	return 0;
}

void rp_hsim_release(struct rp_hsim *h, struct rp_hreq *q, kvs_req_t *req)
{
	if (req->slot >= 0)
		drop_blocks(h, q, req);
}

static kvs_hcache_stats_t stats(struct rp_hsim *h)
{
	kvs_hcache_stats_t st;

	if (kvs_hcache_stats(h->hc, &st) < 0)
		memset(&st, 0, sizeof(st));
	return st;
}

uint64_t rp_hsim_evictable(struct rp_hsim *h)
{
	return stats(h).free_queue_blocks * h->bs;
}

uint64_t rp_hsim_block_tokens(struct rp_hsim *h)
{
	kvs_hcache_stats_t st = stats(h);

	return (st.used_blocks + st.free_queue_blocks) * h->bs;
}

uint64_t rp_hsim_evict(struct rp_hsim *h, uint64_t tokens)
{
	uint64_t n = (tokens + h->bs - 1) / h->bs;
	ssize_t got = kvs_hcache_evict(h->hc, n > SSIZE_MAX ? SSIZE_MAX : (size_t)n);

	return got > 0 ? (uint64_t)got * h->bs : 0;
}

void rp_hsim_drain(struct rp_hsim *h)
{
	kvs_hcache_evict(h->hc, SSIZE_MAX);
}
