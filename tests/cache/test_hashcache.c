/* SPDX-License-Identifier: MIT */
/*
 * tests/cache/test_hashcache.c - the hashed block cache: vLLM v1's
 * BlockPool behaviour on worked examples (which blocks get hashes, hit
 * refcounts, the free queue's exact order, eviction, reset, events,
 * metrics), what the calls refuse, and a seeded model test against a
 * brute-force reference.  Readers beside a writer:
 * tests/stress/stress_hashcache.c.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAXB 4096

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hcache_t *hc;
	uint32_t ps;
	uint64_t pages;			/* pool capacity in pages */
	int32_t *hog;			/* pool pages taken away to size the pool */
	size_t nhog;
	/* events */
	int nstored, nremoved, ncleared, nkv;
	size_t stored_blocks;
	kvs_hcache_event_t last;
	kvs_block_hash_t last_parent;
	int had_parent;
	uint64_t kv_hash[64], kv_parent[64];
	/* token ids of the last stored event, and of each block's kv event
	 * (copied: the events' pointers are valid during the callback only) */
	int32_t last_tok[256];
	int last_has_tok;
	int32_t kv_tok[64][16];
	int kv_has_tok[64];
};

static void on_event(void *arg, const kvs_hcache_event_t *ev)
{
	struct env *e = arg;

	if (ev->type == KVS_KV_STORED) {
		e->nstored++;
		e->stored_blocks += ev->nhashes;
	} else if (ev->type == KVS_KV_REMOVED) {
		e->nremoved++;
	} else if (ev->type == KVS_KV_ALL_CLEARED) {
		e->ncleared++;
	}
	e->last = *ev;
	e->had_parent = ev->parent != NULL;
	if (ev->parent)
		e->last_parent = *ev->parent;
	e->last_has_tok = ev->token_ids != NULL;
	if (ev->token_ids) {
		ck_assert_int_eq(ev->type, KVS_KV_STORED);
		ck_assert_uint_le(ev->tokens, 256);
		memcpy(e->last_tok, ev->token_ids, ev->tokens * sizeof(int32_t));
	}
	e->last.token_ids = NULL;
}

static void on_kv(void *arg, const kvs_kv_event_t *ev)
{
	struct env *e = arg;

	if (ev->type != KVS_KV_STORED)
		ck_assert_ptr_null(ev->token_ids);
	if (ev->type == KVS_KV_STORED && e->nkv < 64) {
		e->kv_hash[e->nkv] = ev->hash;
		e->kv_parent[e->nkv] = ev->parent_hash;
		e->kv_has_tok[e->nkv] = ev->token_ids != NULL;
		if (ev->token_ids) {
			ck_assert_uint_le(ev->tokens, 16);
			memcpy(e->kv_tok[e->nkv], ev->token_ids, ev->tokens * sizeof(int32_t));
		}
		e->nkv++;
	}
}

/* A pool of page size @ps with exactly @free_pages pages free to the cache. */
static void env_open(struct env *e, uint32_t ps, size_t free_pages, uint32_t window)
{
	kvs_pool_attr_t pa;
	kvs_hcache_attr_t ha;
	int32_t *locs;
	kvs_drv_attr_t da;

	memset(e, 0, sizeof(*e));
	e->ps = ps;
	kvs_drv_attr_init(&da);
	da.granularity = 4096; /* tiny model, one granule a slab: 4096 tokens */
	e->d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = ps;
	pa.slab_granules = 1;
	pa.max_tokens = (uint64_t)(free_pages + 8) * ps;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	e->pages = kvs_pool_capacity(e->pool) / ps;
	ck_assert_uint_ge(kvs_pool_available(e->pool) / ps, free_pages);
	e->hog = malloc(e->pages * sizeof(int32_t));
	locs = malloc(ps * sizeof(int32_t));
	while (kvs_pool_available(e->pool) / ps > free_pages) {
		ck_assert_int_eq(kvs_pool_alloc(e->pool, ps, locs), 0);
		e->hog[e->nhog++] = locs[0];
	}
	free(locs);
	kvs_hcache_attr_init(&ha);
	ha.window = window;
	ha.event_cb = on_event;
	ha.event_arg = e;
	ha.kv_event_cb = on_kv;
	ha.kv_event_arg = e;
	e->hc = kvs_hcache_create(e->pool, &ha);
	ck_assert_ptr_nonnull(e->hc);
	ck_assert_uint_eq(kvs_hcache_block_size(e->hc), ps);
}

static uint64_t avail_pages(struct env *e)
{
	return kvs_pool_available(e->pool) / e->ps;
}

/* Every page is exactly one of: free in the pool, hogged, held by a block of
 * refcount > 0, cached free in the queue. */
static void check_pages(struct env *e)
{
	kvs_hcache_stats_t st;

	ck_assert_int_eq(kvs_hcache_validate(e->hc), 0);
	ck_assert_int_eq(kvs_hcache_stats(e->hc, &st), 0);
	ck_assert_uint_eq(avail_pages(e) + e->nhog + st.used_blocks + st.free_queue_blocks,
			  e->pages);
}

static void env_close(struct env *e)
{
	check_pages(e);
	ck_assert_int_eq(kvs_hcache_destroy(e->hc), 0);
	for (size_t i = 0; i < e->nhog; i++)
		ck_assert_int_eq(kvs_pool_free(e->pool, 1, &e->hog[i]), 0);
	free(e->hog);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(e->pool), KVS_SLAB_STAT_objects), 0);
	kvs_pool_destroy(e->pool);
	kvs_drv_close(e->d);
}

/* The hash of block @i of a sequence @seq: 32 bytes, distinct per (seq, i). */
static kvs_block_hash_t H(uint32_t seq, uint32_t i)
{
	kvs_block_hash_t h;

	memset(&h, 0, sizeof(h));
	h.len = 32;
	for (int k = 0; k < 32; k++)
		h.bytes[k] = (uint8_t)(seq * 131u + i * 7u + (uint32_t)k * (seq + 3u) + (i >> 8));
	memcpy(h.bytes, &seq, 4);
	memcpy(h.bytes + 4, &i, 4);
	return h;
}

static void hashes(kvs_block_hash_t *out, uint32_t seq, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		out[i] = H(seq, i);
}

/* Token @j of a request on sequence @seq: what H(seq, j / ps) stands for. */
static int32_t T(uint32_t seq, size_t j)
{
	return (int32_t)(seq * 100000u + (uint32_t)j);
}

static void tokens(int32_t *out, uint32_t seq, size_t n)
{
	for (size_t j = 0; j < n; j++)
		out[j] = T(seq, j);
}

static uint32_t refof(struct env *e, int32_t b)
{
	uint32_t r = 99;

	ck_assert_int_ge(kvs_hcache_block(e->hc, b, &r, NULL), 0);
	return r;
}

static int hashed(struct env *e, int32_t b, kvs_block_hash_t *h)
{
	return kvs_hcache_block(e->hc, b, NULL, h);
}

/* A request of @ntok tokens on sequence @seq, as vLLM's scheduler runs it:
 * look up its cached prefix, allocate the rest, cache the full blocks.
 * Returns its block count; its blocks in @blk. */
static size_t request(struct env *e, uint32_t seq, size_t ntok, int32_t *blk, ssize_t *hit)
{
	kvs_block_hash_t h[64];
	int32_t tok[1024];
	size_t full = ntok / e->ps, nblk = (ntok + e->ps - 1) / e->ps;
	ssize_t k;

	ck_assert_uint_le(ntok, 1024);
	hashes(h, seq, (uint32_t)full);
	tokens(tok, seq, ntok);
	k = kvs_hcache_lookup(e->hc, h, full, ntok, blk);
	ck_assert_int_ge(k, 0);
	if (hit)
		*hit = k;
	ck_assert_int_eq(kvs_hcache_alloc(e->hc, nblk - (size_t)k, blk + k), 0);
	if (full > (size_t)k)
		ck_assert_int_eq(kvs_hcache_cache(e->hc, blk + k, full - (size_t)k, h + k,
						  k ? &h[k - 1] : NULL, 0, tok + (size_t)k * e->ps),
				 0);
	check_pages(e);
	return nblk;
}

/* Free a request's blocks tail first, as vLLM's KV cache manager does. */
static void release(struct env *e, const int32_t *blk, size_t n)
{
	int32_t rev[64];

	for (size_t i = 0; i < n; i++)
		rev[i] = blk[n - 1 - i];
	ck_assert_int_eq(kvs_hcache_free(e->hc, rev, n), 0);
	check_pages(e);
}

static size_t queue(struct env *e, int32_t *q)
{
	ssize_t n = kvs_hcache_free_queue(e->hc, q, MAXB);

	ck_assert_int_ge(n, 0);
	return (size_t)n;
}

START_TEST(test_only_full_blocks_cached)
{
	struct env e;
	int32_t blk[8];
	kvs_block_hash_t got, want;
	ssize_t hit;

	env_open(&e, 4, 16, 100);
	/* 10 tokens of block size 4: two full blocks, one partial. */
	ck_assert_uint_eq(request(&e, 1, 10, blk, &hit), 3);
	ck_assert_int_eq(hit, 0);
	ck_assert_int_eq(hashed(&e, blk[0], &got), 1);
	want = H(1, 0);
	ck_assert_mem_eq(got.bytes, want.bytes, 32);
	ck_assert_int_eq(hashed(&e, blk[1], &got), 1);
	want = H(1, 1);
	ck_assert_mem_eq(got.bytes, want.bytes, 32);
	ck_assert_int_eq(hashed(&e, blk[2], NULL), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(refof(&e, blk[i]), 1);
	release(&e, blk, 3);
	/* The partial block went back to the pool, the two full ones wait. */
	ck_assert_uint_eq(avail_pages(&e), 14);
	ck_assert_uint_eq(refof(&e, blk[2]), 0);
	{
		int32_t q[MAXB];

		ck_assert_uint_eq(queue(&e, q), 2);
		ck_assert_int_eq(q[0], blk[1]);
		ck_assert_int_eq(q[1], blk[0]);
	}
	env_close(&e);
}
END_TEST

START_TEST(test_last_token_always_computed)
{
	struct env e;
	int32_t blk[8], b2[8];
	kvs_block_hash_t h[4];

	env_open(&e, 4, 16, 100);
	request(&e, 1, 8, blk, NULL); /* two full blocks, both cached */
	ck_assert_int_eq(hashed(&e, blk[1], NULL), 1);
	release(&e, blk, 2);
	hashes(h, 1, 2);
	/* The same 8 tokens again: only one block may hit, (8 - 1) / 4. */
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, 2, 8), 1);
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, h, 2, 8, b2), 1);
	ck_assert_int_eq(b2[0], blk[0]);
	/* 9 tokens: both. */
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, 2, 9), 2);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, 2, 1), 0);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, 2, 0), 0);
	ck_assert_int_eq(kvs_hcache_free(e.hc, b2, 1), 0);
	env_close(&e);
}
END_TEST

START_TEST(test_hit_refcounts)
{
	struct env e;
	int32_t a[8], b[8];
	ssize_t hit;
	kvs_hcache_stats_t st;

	env_open(&e, 4, 16, 100);
	ck_assert_uint_eq(request(&e, 1, 13, a, NULL), 4); /* 3 full + 1 */
	/* B shares A's 3 full blocks while A runs. */
	ck_assert_uint_eq(request(&e, 1, 14, b, &hit), 4);
	ck_assert_int_eq(hit, 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(b[i], a[i]);
		ck_assert_uint_eq(refof(&e, a[i]), 2);
	}
	ck_assert_int_ne(b[3], a[3]);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.used_blocks, 5);
	ck_assert_uint_eq(st.cached_blocks, 3);
	release(&e, a, 4);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(refof(&e, a[i]), 1);
	ck_assert_int_eq(kvs_hcache_free_queue(e.hc, NULL, 0), 0);
	release(&e, b, 4);
	ck_assert_int_eq(kvs_hcache_free_queue(e.hc, NULL, 0), 3);
	env_close(&e);
}
END_TEST

/* vLLM's get_cached_block() and touch(): find takes nothing and counts no
 * request; touch references a cached block (out of the free queue at 0). */
START_TEST(test_find_and_touch)
{
	struct env e;
	int32_t a[8], blk;
	kvs_block_hash_t h, bad;
	kvs_hcache_stats_t st0, st;

	env_open(&e, 4, 16, 100);
	ck_assert_uint_eq(request(&e, 1, 13, a, NULL), 4);
	release(&e, a, 4);
	ck_assert_int_eq(hashed(&e, a[1], &h), 1);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st0), 0);
	ck_assert_int_eq(kvs_hcache_find(e.hc, &h), a[1]);
	ck_assert_uint_eq(refof(&e, a[1]), 0);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.queries, st0.queries);
	/* Touch twice: two references, out of the free queue. */
	blk = a[1];
	ck_assert_int_eq(kvs_hcache_touch(e.hc, (int32_t[]){blk, blk}, 2), 0);
	ck_assert_uint_eq(refof(&e, blk), 2);
	ck_assert_int_eq(kvs_hcache_free_queue(e.hc, NULL, 0), 2);
	ck_assert_int_eq(kvs_hcache_validate(e.hc), 0);
	release(&e, &blk, 1);
	release(&e, &blk, 1);
	ck_assert_int_eq(kvs_hcache_free_queue(e.hc, NULL, 0), 3);
	/* a[3], the partial block, has no hash and is free: not touchable. */
	errno = 0;
	ck_assert_int_eq(kvs_hcache_touch(e.hc, &a[3], 1), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hcache_touch(e.hc, (int32_t[]){-1}, 1), -1);
	ck_assert_int_eq(kvs_hcache_touch(NULL, a, 1), -1);
	ck_assert_int_eq(kvs_hcache_free_queue(e.hc, NULL, 0), 3);
	memset(&bad, 0, sizeof(bad));
	ck_assert_int_eq(kvs_hcache_find(e.hc, &bad), -1); /* length 0 */
	ck_assert_int_eq(errno, EINVAL);
	bad = h;
	bad.bytes[0] ^= 0xff;
	ck_assert_int_eq(kvs_hcache_find(e.hc, &bad), -1);
	ck_assert_int_eq(errno, ENOENT);
	env_close(&e);
}
END_TEST

/* vLLM's test_prefix_caching free-queue order: tail first, LRU across
 * requests, a touched block leaves the queue and comes back at its end. */
START_TEST(test_free_queue_order)
{
	struct env e;
	int32_t a[8], b[8], c[8], q[MAXB];
	ssize_t hit;

	env_open(&e, 4, 32, 100);
	request(&e, 1, 12, a, NULL); /* a0 a1 a2, all full */
	request(&e, 2, 8, b, NULL);  /* b0 b1 */
	request(&e, 3, 17, c, NULL); /* c0..c3 full, c4 partial */
	release(&e, a, 3);
	release(&e, c, 5);
	release(&e, b, 2);
	ck_assert_uint_eq(queue(&e, q), 9);
	{
		int32_t want[] = { a[2], a[1], a[0], c[3], c[2], c[1], c[0], b[1], b[0] };

		for (int i = 0; i < 9; i++)
			ck_assert_int_eq(q[i], want[i]);
	}
	/* A request on a's first two blocks (9 tokens: cap 2) touches a0, a1. */
	{
		int32_t d[8];

		ck_assert_uint_eq(request(&e, 1, 9, d, &hit), 3);
		ck_assert_int_eq(hit, 2);
		ck_assert_uint_eq(queue(&e, q), 7);
		{
			int32_t want[] = { a[2], c[3], c[2], c[1], c[0], b[1], b[0] };

			for (int i = 0; i < 7; i++)
				ck_assert_int_eq(q[i], want[i]);
		}
		release(&e, d, 3); /* d2 is a fresh partial block: to the pool */
		ck_assert_uint_eq(queue(&e, q), 9);
		{
			int32_t want[] = { a[2], c[3], c[2], c[1], c[0], b[1], b[0], a[1], a[0] };

			for (int i = 0; i < 9; i++)
				ck_assert_int_eq(q[i], want[i]);
		}
	}
	env_close(&e);
}
END_TEST

/* With the pool empty, allocation evicts from the queue's head; a hit block
 * (refcount > 0) is never taken while other free blocks exist, and an
 * evicted block loses its hash. */
START_TEST(test_eviction_and_hash_cleared)
{
	struct env e;
	int32_t a[8], b[8], x[8], q[MAXB];
	kvs_block_hash_t h[4];
	kvs_hcache_stats_t st;

	env_open(&e, 4, 6, 100);
	request(&e, 1, 12, a, NULL); /* 3 blocks */
	request(&e, 2, 12, b, NULL); /* 3 blocks: the pool is empty */
	ck_assert_uint_eq(avail_pages(&e), 0);
	release(&e, a, 3);
	release(&e, b, 3);
	/* Hit a0 a1 (and refcount them). */
	hashes(h, 1, 3);
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, h, 3, 9, x), 2);
	ck_assert_uint_eq(refof(&e, a[0]), 1);
	ck_assert_uint_eq(queue(&e, q), 4); /* a2 b2 b1 b0 */
	/* Four new blocks: exactly the free ones, in queue order. */
	ck_assert_int_eq(kvs_hcache_alloc(e.hc, 4, x + 2), 0);
	ck_assert_int_eq(x[2], a[2]);
	ck_assert_int_eq(x[3], b[2]);
	ck_assert_int_eq(x[4], b[1]);
	ck_assert_int_eq(x[5], b[0]);
	for (int i = 2; i < 6; i++) {
		ck_assert_int_eq(hashed(&e, x[i], NULL), 0); /* reallocated: no hash */
		ck_assert_uint_eq(refof(&e, x[i]), 1);
	}
	ck_assert_int_eq(e.nremoved, 4);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, 3, 100), 2);
	hashes(h, 2, 3);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, 3, 100), 0);
	/* The hit blocks survived. */
	ck_assert_int_eq(hashed(&e, a[0], NULL), 1);
	ck_assert_int_eq(hashed(&e, a[1], NULL), 1);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.evictions, 4);
	ck_assert_uint_eq(st.cached_blocks, 2);
	check_pages(&e);
	ck_assert_int_eq(kvs_hcache_free(e.hc, x, 6), 0);
	env_close(&e);
}
END_TEST

START_TEST(test_failed_alloc_changes_nothing)
{
	struct env e;
	int32_t a[8], x[16], q1[MAXB], q2[MAXB];
	uint32_t ref[8];
	kvs_hcache_stats_t s1, s2;
	size_t n1;

	env_open(&e, 4, 6, 100);
	request(&e, 1, 16, a, NULL); /* 4 blocks */
	{
		int32_t tail[2] = { a[3], a[2] };

		ck_assert_int_eq(kvs_hcache_free(e.hc, tail, 2), 0);
	}
	/* a3, a2 are cached free; a0, a1 still held; 2 pool pages free. */
	for (int i = 0; i < 4; i++)
		ref[i] = refof(&e, a[i]);
	n1 = queue(&e, q1);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &s1), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hcache_alloc(e.hc, 5, x), -1);
	ck_assert_int_eq(errno, ENOMEM);
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(refof(&e, a[i]), ref[i]);
	ck_assert_uint_eq(queue(&e, q2), n1);
	ck_assert_mem_eq(q1, q2, n1 * sizeof(int32_t));
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &s2), 0);
	ck_assert_mem_eq(&s1, &s2, sizeof(s1));
	ck_assert_uint_eq(avail_pages(&e), 2);
	ck_assert_int_eq(e.nremoved, 0);
	/* Exactly enough works. */
	ck_assert_int_eq(kvs_hcache_alloc(e.hc, 4, x), 0);
	ck_assert_int_eq(kvs_hcache_free(e.hc, x, 4), 0);
	{
		int32_t head[2] = { a[1], a[0] };

		ck_assert_int_eq(kvs_hcache_free(e.hc, head, 2), 0);
	}
	env_close(&e);
}
END_TEST

START_TEST(test_reset_refused_in_use)
{
	struct env e;
	int32_t a[8];
	kvs_block_hash_t h[4];
	kvs_hcache_stats_t st;

	env_open(&e, 4, 8, 100);
	request(&e, 1, 12, a, NULL);
	errno = 0;
	ck_assert_int_eq(kvs_hcache_reset(e.hc), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(kvs_hcache_destroy(e.hc), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(e.ncleared, 0);
	ck_assert_int_eq(hashed(&e, a[0], NULL), 1);
	release(&e, a, 3);
	ck_assert_int_eq(kvs_hcache_reset(e.hc), 0);
	ck_assert_int_eq(e.ncleared, 1);
	ck_assert_int_eq(e.last.type, KVS_KV_ALL_CLEARED);
	hashes(h, 1, 3);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, 3, 100), 0);
	ck_assert_uint_eq(avail_pages(&e), 8);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.cached_blocks, 0);
	ck_assert_uint_eq(st.free_queue_blocks, 0);
	env_close(&e);
}
END_TEST

START_TEST(test_events)
{
	struct env e;
	int32_t a[8], b[8];
	kvs_block_hash_t h[8];

	env_open(&e, 4, 5, 100);
	/* Five full blocks (21 tokens: 5 full + 1 partial does not fit; 20). */
	ck_assert_uint_eq(request(&e, 7, 20, a, NULL), 5);
	ck_assert_int_eq(e.nstored, 1);
	ck_assert_uint_eq(e.stored_blocks, 5);
	ck_assert_uint_eq(e.last.nhashes, 5);
	ck_assert_uint_eq(e.last.tokens, 20);
	ck_assert_uint_eq(e.last.block_size, 4);
	ck_assert_int_eq(e.had_parent, 0);
	/* The radix-style events: one per block, the low 64 bits (big-endian
	 * tail) of each hash, chained. */
	hashes(h, 7, 5);
	ck_assert_int_eq(e.nkv, 5);
	for (int i = 0; i < 5; i++) {
		uint64_t lo = 0;

		for (int k = 24; k < 32; k++)
			lo = (lo << 8) | h[i].bytes[k];
		ck_assert_uint_eq(e.kv_hash[i], lo);
		ck_assert_uint_eq(e.kv_parent[i], i ? e.kv_hash[i - 1] : 0);
	}
	/* The token ids request() passed: all 20 in the event, each block's
	 * 4 in its kv event. */
	ck_assert_int_eq(e.last_has_tok, 1);
	for (int j = 0; j < 20; j++)
		ck_assert_int_eq(e.last_tok[j], T(7, (size_t)j));
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(e.kv_has_tok[i], 1);
		for (int j = 0; j < 4; j++)
			ck_assert_int_eq(e.kv_tok[i][j], T(7, (size_t)(4 * i + j)));
	}
	release(&e, a, 5);
	/* A continuation: 3 hits, 2 new full blocks under a parent. */
	{
		kvs_block_hash_t g[5];
		ssize_t k;

		hashes(g, 7, 3);
		g[3] = H(8, 3);
		g[4] = H(8, 4);
		k = kvs_hcache_lookup(e.hc, g, 5, 21, b);
		ck_assert_int_eq(k, 3);
		ck_assert_int_eq(kvs_hcache_alloc(e.hc, 2, b + 3), 0); /* evicts a4 a3 */
		ck_assert_int_eq(e.nremoved, 2);
		ck_assert_int_eq(kvs_hcache_cache(e.hc, b + 3, 2, g + 3, &g[2], 42, NULL), 0);
		ck_assert_int_eq(e.nstored, 2);
		ck_assert_uint_eq(e.last.nhashes, 2);
		ck_assert_uint_eq(e.last.extra_key, 42);
		ck_assert_int_eq(e.had_parent, 1);
		ck_assert_mem_eq(e.last_parent.bytes, g[2].bytes, 32);
		ck_assert_int_eq(e.last_has_tok, 0); /* cached with tokens NULL */
		ck_assert_int_eq(e.nkv, 7);
		ck_assert_int_eq(e.kv_has_tok[5], 0);
		ck_assert_int_eq(e.kv_has_tok[6], 0);
		release(&e, b, 5);
	}
	/* Evicting everything: one removed event a block, without token ids. */
	ck_assert_int_eq(kvs_hcache_evict(e.hc, 100), 5);
	ck_assert_int_eq(e.nremoved, 7);
	ck_assert_int_eq(e.last.type, KVS_KV_REMOVED);
	ck_assert_int_eq(e.last_has_tok, 0);
	env_close(&e);
}
END_TEST

/* Stored events carry the token ids kvs_hcache_cache() was given, the
 * caller's blocks in order: the whole run in the block cache's event, each
 * block's slice in its kv event; removed and cleared events carry none. */
START_TEST(test_event_token_ids)
{
	struct env e;
	int32_t a[8], b[8], tok[32];
	kvs_block_hash_t g[6];
	ssize_t k;

	env_open(&e, 4, 12, 100);
	ck_assert_uint_eq(request(&e, 3, 13, a, NULL), 4); /* 3 full blocks cached */
	ck_assert_int_eq(e.nstored, 1);
	ck_assert_uint_eq(e.last.tokens, 12);
	for (int j = 0; j < 12; j++)
		ck_assert_int_eq(e.last_tok[j], T(3, (size_t)j));
	/* A request sharing the 3 blocks and going on with 3 of its own: the
	 * event names only the 3 new blocks, and their tokens 12..23. */
	hashes(g, 3, 3);
	g[3] = H(9, 3);
	g[4] = H(9, 4);
	g[5] = H(9, 5);
	for (int j = 0; j < 24; j++)
		tok[j] = j < 12 ? T(3, (size_t)j) : -1000 - j; /* negative ids pass through */
	k = kvs_hcache_lookup(e.hc, g, 6, 25, b);
	ck_assert_int_eq(k, 3);
	ck_assert_int_eq(kvs_hcache_alloc(e.hc, 4, b + 3), 0);
	e.nkv = 0;
	ck_assert_int_eq(kvs_hcache_cache(e.hc, b + 3, 3, g + 3, &g[2], 5, tok + 12), 0);
	ck_assert_int_eq(e.nstored, 2);
	ck_assert_uint_eq(e.last.nhashes, 3);
	ck_assert_uint_eq(e.last.tokens, 12);
	ck_assert_int_eq(e.last_has_tok, 1);
	for (int j = 0; j < 12; j++)
		ck_assert_int_eq(e.last_tok[j], -1012 - j);
	ck_assert_int_eq(e.nkv, 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(e.kv_has_tok[i], 1);
		for (int j = 0; j < 4; j++)
			ck_assert_int_eq(e.kv_tok[i][j], -1012 - (4 * i + j));
	}
	/* A refused call sends nothing. */
	ck_assert_int_eq(kvs_hcache_cache(e.hc, b + 3, 1, g + 3, NULL, 0, tok), -1);
	ck_assert_int_eq(e.nstored, 2);
	ck_assert_int_eq(e.nkv, 3);
	release(&e, b, 7);
	release(&e, a, 4);
	ck_assert_int_eq(kvs_hcache_reset(e.hc), 0);
	ck_assert_int_eq(e.last.type, KVS_KV_ALL_CLEARED);
	ck_assert_int_eq(e.last_has_tok, 0);
	env_close(&e);
}
END_TEST

START_TEST(test_duplicates_allowed)
{
	struct env e;
	int32_t x[4], y[4];
	kvs_block_hash_t h = H(5, 0);
	kvs_hcache_stats_t st;

	env_open(&e, 2, 8, 100);
	ck_assert_int_eq(kvs_hcache_alloc(e.hc, 2, x), 0);
	ck_assert_int_eq(kvs_hcache_cache(e.hc, &x[0], 1, &h, NULL, 0, NULL), 0);
	ck_assert_int_eq(kvs_hcache_cache(e.hc, &x[1], 1, &h, NULL, 0, NULL), 0);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.cached_blocks, 2);
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, &h, 1, 3, y), 1);
	ck_assert(y[0] == x[0] || y[0] == x[1]);
	ck_assert_int_eq(kvs_hcache_free(e.hc, y, 1), 0);
	ck_assert_int_eq(kvs_hcache_free(e.hc, x, 2), 0);
	/* Evict one: the other still answers. */
	ck_assert_int_eq(kvs_hcache_evict(e.hc, 1), 1);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, &h, 1, 3), 1);
	env_close(&e);
}
END_TEST

/*
 * Hashes shorter than 32 bytes: a hash is its first len bytes, so one that
 * differs only past its length is the same hash, while hashes that share
 * their bytes but not their length are different ones (the table's tags
 * carry the length; the writers compare the blocks' copies, the readers
 * the entries).  Lengths 1, 7, 8, 9 and 31: a word's tail and none.
 */
START_TEST(test_short_hashes)
{
	static const uint32_t lens[] = { 1, 7, 8, 9, 31 };
	enum { N = sizeof(lens) / sizeof(lens[0]) };
	kvs_block_hash_t h[N], same, longer;
	int32_t x[N], b;
	struct env e;

	env_open(&e, 2, 16, 100);
	for (int k = 0; k < N; k++) {
		h[k] = H(12, (uint32_t)k);
		h[k].len = lens[k];
		memset(h[k].bytes + lens[k], 0xa5, 32 - lens[k]);
	}
	ck_assert_int_eq(kvs_hcache_alloc(e.hc, N, x), 0);
	ck_assert_int_eq(kvs_hcache_cache(e.hc, x, N, h, NULL, 0, NULL), 0);
	ck_assert_int_eq(kvs_hcache_free(e.hc, x, N), 0);
	ck_assert_int_eq(kvs_hcache_validate(e.hc), 0);
	for (int k = 0; k < N; k++) {
		kvs_block_hash_t got;

		same = h[k];
		memset(same.bytes + lens[k], 0x3c, 32 - lens[k]);
		ck_assert_int_eq(kvs_hcache_find(e.hc, &same), x[k]);
		ck_assert_int_eq(kvs_hcache_match_ro(e.hc, &same, 1, 3), 1);
		ck_assert_int_eq(kvs_hcache_block(e.hc, x[k], NULL, &got), 1);
		ck_assert_uint_eq(got.len, lens[k]);
		ck_assert_mem_eq(got.bytes, h[k].bytes, lens[k]);
		/* One byte more of the same bytes: another hash. */
		longer = h[k];
		longer.len = lens[k] + 1;
		b = kvs_hcache_find(e.hc, &longer);
		ck_assert_int_eq(b, -1);
		ck_assert_int_eq(errno, ENOENT);
		ck_assert_int_eq(kvs_hcache_match_ro(e.hc, &longer, 1, 3), 0);
		ck_assert_int_eq(kvs_hcache_lookup(e.hc, &same, 1, 3, &b), 1);
		ck_assert_int_eq(b, x[k]);
		ck_assert_int_eq(kvs_hcache_free(e.hc, &b, 1), 0);
	}
	env_close(&e);
}
END_TEST

/*
 * Removal from the middle of a chain: eight blocks under one hash share a
 * chain (its entries linked in the order cached, newest first), beside
 * blocks of other hashes; evicting them in every order of position (the
 * queue's order: head, tail, middle) must leave the chain whole each time:
 * the cache validates (the chain links both ways), the hash answers while
 * one block holds it and names a block that holds it, and the other
 * hashes keep answering.  Then the same blocks, cached again under fresh
 * hashes, reuse the entries.
 */
START_TEST(test_duplicate_chain_removal)
{
	static const int order[3][8] = {
		{0, 1, 2, 3, 4, 5, 6, 7}, {7, 6, 5, 4, 3, 2, 1, 0}, {3, 5, 0, 7, 1, 6, 2, 4},
	};
	kvs_block_hash_t h = H(9, 9), other[4], fresh[8];
	int32_t x[8], o[4], q[8];
	kvs_block_hash_t got;
	struct env e;

	for (int k = 0; k < 4; k++)
		other[k] = H(10, (uint32_t)k);
	for (int round = 0; round < 3; round++) {
		env_open(&e, 2, 16, 100);
		ck_assert_int_eq(kvs_hcache_alloc(e.hc, 4, o), 0);
		ck_assert_int_eq(kvs_hcache_cache(e.hc, o, 4, other, NULL, 0, NULL), 0);
		ck_assert_int_eq(kvs_hcache_alloc(e.hc, 8, x), 0);
		for (int k = 0; k < 8; k++)
			ck_assert_int_eq(kvs_hcache_cache(e.hc, &x[k], 1, &h, NULL, 0, NULL), 0);
		/* Freed in the round's order: the queue's order, and so the
		 * eviction's. */
		for (int k = 0; k < 8; k++)
			q[k] = x[order[round][k]];
		ck_assert_int_eq(kvs_hcache_free(e.hc, q, 8), 0);
		ck_assert_int_eq(kvs_hcache_validate(e.hc), 0);
		for (int k = 0; k < 8; k++) {
			int32_t b;

			ck_assert_int_eq(kvs_hcache_evict(e.hc, 1), 1);
			ck_assert_int_eq(kvs_hcache_block(e.hc, q[k], NULL, NULL), 0);
			ck_assert_int_eq(kvs_hcache_validate(e.hc), 0);
			ck_assert_int_eq(kvs_hcache_match_ro(e.hc, &h, 1, 3), k < 7);
			ck_assert_int_eq(kvs_hcache_match_ro(e.hc, other, 4, 100), 4);
			b = kvs_hcache_find(e.hc, &h);
			if (k == 7) {
				ck_assert_int_eq(b, -1);
				ck_assert_int_eq(errno, ENOENT);
				continue;
			}
			/* A block still in the queue, holding the hash. */
			ck_assert_int_eq(kvs_hcache_block(e.hc, b, NULL, &got), 1);
			ck_assert_mem_eq(got.bytes, h.bytes, 32);
			for (int j = 0; j <= k; j++)
				ck_assert_int_ne(b, q[j]);
		}
		/* The entries come back for other hashes. */
		ck_assert_int_eq(kvs_hcache_alloc(e.hc, 8, x), 0);
		for (int k = 0; k < 8; k++)
			fresh[k] = H(11, (uint32_t)k);
		ck_assert_int_eq(kvs_hcache_cache(e.hc, x, 8, fresh, NULL, 0, NULL), 0);
		ck_assert_int_eq(kvs_hcache_validate(e.hc), 0);
		ck_assert_int_eq(kvs_hcache_match_ro(e.hc, fresh, 8, 100), 8);
		ck_assert_int_eq(kvs_hcache_match_ro(e.hc, &h, 1, 3), 0);
		ck_assert_int_eq(kvs_hcache_free(e.hc, x, 8), 0);
		ck_assert_int_eq(kvs_hcache_free(e.hc, o, 4), 0);
		env_close(&e);
	}
}
END_TEST

START_TEST(test_window_metrics)
{
	struct env e;
	int32_t a[8], b[8];
	kvs_block_hash_t h[4];
	kvs_hcache_stats_t st;

	env_open(&e, 4, 16, 2);
	request(&e, 1, 13, a, NULL); /* query 3, hit 0 */
	release(&e, a, 4);
	hashes(h, 1, 3);
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, h, 3, 13, b), 3); /* 3 / 3 */
	ck_assert_int_eq(kvs_hcache_free(e.hc, b, 3), 0);
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, h, 3, 5, b), 1); /* 1 / 1 */
	ck_assert_int_eq(kvs_hcache_free(e.hc, b, 1), 0);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.queries, 3);
	ck_assert_uint_eq(st.query_blocks, 7);
	ck_assert_uint_eq(st.hit_blocks, 4);
	ck_assert_uint_eq(st.window_queries, 2);
	ck_assert_uint_eq(st.window_query_blocks, 4);
	ck_assert_uint_eq(st.window_hit_blocks, 4);
	ck_assert(st.window_hit_ratio == 1.0);
	hashes(h, 9, 3);
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, h, 3, 13, b), 0); /* 0 / 3 */
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.window_query_blocks, 4);
	ck_assert_uint_eq(st.window_hit_blocks, 1);
	ck_assert(st.window_hit_ratio == 0.25);
	env_close(&e);
}
END_TEST

/* The accessors of the KVS_HCACHE_STATS list: each item is the field of
 * kvs_hcache_stats() of the same name, by number and by name, and the
 * print is a header line and one line per item. */
struct lines {
	int n;
	char last[256];
	char all[4096];
};

static void line_cb(void *arg, const char *line)
{
	struct lines *l = arg;

	l->n++;
	snprintf(l->last, sizeof(l->last), "%s", line);
	strncat(l->all, line, sizeof(l->all) - strlen(l->all) - 1);
}

START_TEST(test_stat_accessors)
{
	static const char *const names[] = {
#define NAME(n, k, d) #n,
		KVS_HCACHE_STATS(NAME)
#undef NAME
	};
	struct env e;
	int32_t a[8], b[8];
	kvs_block_hash_t h[4];
	kvs_hcache_stats_t st;
	struct lines l = {0};
	uint64_t v, want[KVS_HCACHE_STAT__COUNT];
	char line[128];
	int i;

	env_open(&e, 4, 16, 2);
	request(&e, 1, 13, a, NULL);
	release(&e, a, 4);
	hashes(h, 1, 3);
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, h, 3, 13, b), 3);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	i = 0;
#define FIELD(n, k, d) want[i++] = st.n;
	KVS_HCACHE_STATS(FIELD)
#undef FIELD
	ck_assert_int_eq(i, KVS_HCACHE_STAT__COUNT);
	ck_assert_uint_eq(want[KVS_HCACHE_STAT_queries], 2);
	ck_assert_uint_eq(want[KVS_HCACHE_STAT_hit_blocks], 3);
	ck_assert_uint_eq(want[KVS_HCACHE_STAT_used_blocks], 3);
	for (i = 0; i < KVS_HCACHE_STAT__COUNT; i++) {
		ck_assert_str_eq(kvs_hcache_stat_name(i), names[i]);
		ck_assert_uint_eq(kvs_hcache_stat(e.hc, i), want[i]);
		v = ~0ULL;
		ck_assert_int_eq(kvs_hcache_stat_get(e.hc, names[i], &v), 0);
		ck_assert_uint_eq(v, want[i]);
	}
	ck_assert_ptr_null(kvs_hcache_stat_name(KVS_HCACHE_STAT__COUNT));
	ck_assert_uint_eq(kvs_hcache_stat(e.hc, KVS_HCACHE_STAT__COUNT), 0);
	ck_assert_uint_eq(kvs_hcache_stat(NULL, KVS_HCACHE_STAT_queries), 0);
	v = 7;
	errno = 0;
	ck_assert_int_eq(kvs_hcache_stat_get(e.hc, "window_hit_ratio", &v), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_uint_eq(v, 7);
	errno = 0;
	ck_assert_int_eq(kvs_hcache_stat_get(NULL, "queries", &v), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_hcache_stat_get(e.hc, NULL, &v), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_hcache_stat_get(e.hc, "queries", NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_hcache_stats_print(e.hc, NULL, &l), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_hcache_stats_print(NULL, line_cb, &l), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(l.n, 0);
	ck_assert_int_eq(kvs_hcache_stats_print(e.hc, line_cb, &l), 0);
	ck_assert_int_eq(l.n, 1 + KVS_HCACHE_STAT__COUNT);
	ck_assert(strncmp(l.all, "hcache block_size 4 blocks ", 27) == 0);
	ck_assert_ptr_nonnull(strstr(l.all, " window 2\n"));
	snprintf(line, sizeof(line), "%-20s %20llu  %-7s # %s\n", "window_hit_tokens",
		 (unsigned long long)want[KVS_HCACHE_STAT_window_hit_tokens], "gauge",
		 "hit_tokens over the last window requests");
	ck_assert_str_eq(l.last, line);
	snprintf(line, sizeof(line), "\n%-20s %20llu  %-7s # ", "hit_blocks", 3ULL, "counter");
	ck_assert_ptr_nonnull(strstr(l.all, line));
	ck_assert_int_eq(kvs_hcache_free(e.hc, b, 3), 0);
	env_close(&e);
}
END_TEST

/* vLLM's free queue after a failed admission (tests/v1/core/
 * test_prefix_caching.py): the scheduler's lookup does not touch the hits,
 * and allocate_slots() touches them only once the new blocks can be had, so
 * a request that does not fit leaves the queue exactly as it was.  With a
 * referencing lookup, a failed allocation and a free of the hits, the hits
 * would move to the tail: [y0, r1, r0]. */
START_TEST(test_failed_admission_keeps_queue)
{
	struct env e;
	int32_t r[8], y[8], x[8], q[MAXB];
	kvs_block_hash_t h[8];
	kvs_hcache_stats_t s1, s2;

	env_open(&e, 4, 4, 100);
	request(&e, 1, 8, r, NULL); /* r0 r1, both full */
	request(&e, 2, 4, y, NULL); /* y0 */
	release(&e, r, 2);
	release(&e, y, 1);
	ck_assert_uint_eq(avail_pages(&e), 1);
	ck_assert_uint_eq(queue(&e, q), 3);
	ck_assert_int_eq(q[0], r[1]);
	ck_assert_int_eq(q[1], r[0]);
	ck_assert_int_eq(q[2], y[0]);
	/* 24 tokens on r's sequence: r0 r1 hit, 4 new blocks needed, but only
	 * the pool's page and y0 can be had without evicting a hit. */
	hashes(h, 1, 6);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &s1), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hcache_admit(e.hc, h, 6, 24, 6, x), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(queue(&e, q), 3);
	ck_assert_int_eq(q[0], r[1]);
	ck_assert_int_eq(q[1], r[0]);
	ck_assert_int_eq(q[2], y[0]);
	ck_assert_uint_eq(refof(&e, r[0]), 0);
	ck_assert_uint_eq(refof(&e, r[1]), 0);
	ck_assert_uint_eq(avail_pages(&e), 1);
	ck_assert_int_eq(e.nremoved, 0);
	/* The request was counted, as vLLM counts it at lookup. */
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &s2), 0);
	ck_assert_uint_eq(s2.queries, s1.queries + 1);
	ck_assert_uint_eq(s2.query_tokens, s1.query_tokens + 24);
	ck_assert_uint_eq(s2.hit_tokens, s1.hit_tokens + 8);
	check_pages(&e);
	/* 16 tokens: r0 r1 hit (cap 3, but r2 is not cached), 2 new: the
	 * pool's page, then y0 evicted; the hits are never taken. */
	ck_assert_int_eq(kvs_hcache_admit(e.hc, h, 4, 16, 4, x), 2);
	ck_assert_int_eq(x[0], r[0]);
	ck_assert_int_eq(x[1], r[1]);
	ck_assert_int_eq(x[3], y[0]);
	ck_assert_int_eq(hashed(&e, y[0], NULL), 0);
	ck_assert_int_eq(e.nremoved, 1);
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(refof(&e, x[i]), 1);
	ck_assert_uint_eq(queue(&e, q), 0);
	check_pages(&e);
	ck_assert_int_eq(kvs_hcache_free(e.hc, x, 4), 0);
	/* Bad input changes nothing. */
	ck_assert_int_eq(kvs_hcache_admit(NULL, h, 1, 8, 2, x), -1);
	ck_assert_int_eq(kvs_hcache_admit(e.hc, h, 1, 8, 2, NULL), -1);
	ck_assert_int_eq(kvs_hcache_admit(e.hc, NULL, 1, 8, 2, x), -1);
	ck_assert_int_eq(kvs_hcache_admit(e.hc, h, 1, 8, (size_t)INT32_MAX + 1, x), -1);
	ck_assert_int_eq(errno, EINVAL);
	h[0].len = 33;
	ck_assert_int_eq(kvs_hcache_admit(e.hc, h, 1, 8, 2, x), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hcache_admit(e.hc, NULL, 0, 0, 0, NULL), 0);
	env_close(&e);
}
END_TEST

/* vLLM's prefix-cache hit rate is in tokens: hit blocks' tokens over the
 * requests' tokens (PrefixCacheStats), not hit blocks over the blocks that
 * could have hit after the cap. */
START_TEST(test_hit_rate_in_tokens)
{
	struct env e;
	int32_t a[8], b[8];
	kvs_block_hash_t h[4];
	kvs_hcache_stats_t st;

	env_open(&e, 4, 16, 2);
	request(&e, 1, 8, a, NULL); /* 8 tokens queried, 0 hit */
	release(&e, a, 2);
	hashes(h, 1, 2);
	/* 8 tokens: the cap is 1 block (the last token is computed), it hits:
	 * per block 1/1, in tokens 4/8. */
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, h, 2, 8, b), 1);
	ck_assert_int_eq(kvs_hcache_free(e.hc, b, 1), 0);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.queries, 2);
	ck_assert_uint_eq(st.query_tokens, 16);
	ck_assert_uint_eq(st.hit_tokens, 4);
	ck_assert_uint_eq(st.window_query_tokens, 16);
	ck_assert_uint_eq(st.window_hit_tokens, 4);
	ck_assert_uint_eq(st.window_query_blocks, 2);
	ck_assert_uint_eq(st.window_hit_blocks, 1);
	/* 13 tokens: cap 3, 2 cached: 8 of 13 tokens; the window (2 requests)
	 * forgets the first. */
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, h, 2, 13, b), 2);
	ck_assert_int_eq(kvs_hcache_free(e.hc, b, 2), 0);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.query_tokens, 29);
	ck_assert_uint_eq(st.hit_tokens, 12);
	ck_assert_uint_eq(st.window_query_tokens, 8 + 13);
	ck_assert_uint_eq(st.window_hit_tokens, 4 + 8);
	ck_assert_int_eq(kvs_hcache_reset(e.hc), 0);
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_eq(st.window_query_tokens, 0);
	ck_assert_uint_eq(st.window_hit_tokens, 0);
	ck_assert_uint_eq(st.query_tokens, 29);
	env_close(&e);
}
END_TEST

/* kvs_hcache_evict() takes any count: SIZE_MAX empties the free queue. */
START_TEST(test_evict_any_count)
{
	struct env e;
	int32_t a[8];

	env_open(&e, 4, 8, 100);
	request(&e, 1, 12, a, NULL);
	release(&e, a, 3);
	ck_assert_int_eq(kvs_hcache_evict(e.hc, (size_t)SSIZE_MAX + 1), 3);
	ck_assert_int_eq(queue(&e, a), 0);
	request(&e, 2, 8, a, NULL);
	release(&e, a, 2);
	ck_assert_int_eq(kvs_hcache_evict(e.hc, SIZE_MAX), 2);
	ck_assert_int_eq(kvs_hcache_evict(e.hc, SIZE_MAX), 0);
	ck_assert_int_eq(kvs_hcache_evict(NULL, 1), -1);
	ck_assert_int_eq(errno, EINVAL);
	env_close(&e);
}
END_TEST

START_TEST(test_bad_input)
{
	struct env e;
	int32_t x[4], q1[MAXB], q2[MAXB];
	kvs_block_hash_t h[2] = { H(1, 0), H(1, 1) }, bad = H(1, 2);
	kvs_hcache_attr_t ha;
	size_t n1;

	env_open(&e, 4, 8, 100);
	ck_assert_ptr_null(kvs_hcache_create(NULL, NULL));
	kvs_hcache_attr_init(&ha);
	ha.window = 0;
	ck_assert_ptr_null(kvs_hcache_create(e.pool, &ha));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hcache_alloc(e.hc, 2, x), 0);
	/* Caching a block not held, a repeated block, an already hashed one,
	 * a bad hash length: refused, nothing changed. */
	{
		int32_t nb[2] = { x[0], 7 == x[1] ? 6 : 7 };

		ck_assert_int_eq(kvs_hcache_cache(e.hc, nb, 2, h, NULL, 0, NULL), -1);
		ck_assert_int_eq(errno, EINVAL);
	}
	{
		int32_t dup[2] = { x[0], x[0] };

		ck_assert_int_eq(kvs_hcache_cache(e.hc, dup, 2, h, NULL, 0, NULL), -1);
	}
	bad.len = 33;
	ck_assert_int_eq(kvs_hcache_cache(e.hc, x, 1, &bad, NULL, 0, NULL), -1);
	bad.len = 0;
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, &bad, 1, 9, q1), -1);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, &bad, 1, 9), -1);
	ck_assert_int_eq(hashed(&e, x[0], NULL), 0);
	ck_assert_int_eq(kvs_hcache_validate(e.hc), 0);
	ck_assert_int_eq(kvs_hcache_cache(e.hc, x, 2, h, NULL, 0, NULL), 0);
	ck_assert_int_eq(kvs_hcache_cache(e.hc, x, 1, h, NULL, 0, NULL), -1);
	/* Freeing more references than held, or a block not held. */
	{
		int32_t twice[2] = { x[0], x[0] }, oob = -1, big = (int32_t)e.pages;

		ck_assert_int_eq(kvs_hcache_free(e.hc, twice, 2), -1);
		ck_assert_int_eq(kvs_hcache_free(e.hc, &oob, 1), -1);
		ck_assert_int_eq(kvs_hcache_free(e.hc, &big, 1), -1);
		ck_assert_uint_eq(refof(&e, x[0]), 1);
	}
	ck_assert_int_eq(kvs_hcache_free(e.hc, x, 2), 0);
	n1 = queue(&e, q1);
	{
		int32_t again = x[0];

		ck_assert_int_eq(kvs_hcache_free(e.hc, &again, 1), -1); /* refcount 0 */
		ck_assert_int_eq(errno, EINVAL);
	}
	ck_assert_uint_eq(queue(&e, q2), n1);
	ck_assert_mem_eq(q1, q2, n1 * sizeof(int32_t));
	ck_assert_int_eq(kvs_hcache_block(e.hc, -1, NULL, NULL), -1);
	ck_assert_int_eq(kvs_hcache_destroy(NULL), 0);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ model test */

/*
 * Requests over a few families of sequences: a request on family f shares
 * the family's blocks up to a random length, then continues with blocks of
 * its own.  The reference holds, per block, the refcount and hash (an
 * integer id), and the free queue as a plain array; the cache must agree on
 * every block, on the exact queue, on every lookup's length, and on which
 * blocks an allocation evicts, after every step.
 */
#define MB 64
#define MREQ 6

struct mreq {
	int32_t blk[64];
	size_t n;
};

struct model {
	uint32_t *ref;
	int64_t *hid;			/* -1: no hash */
	int32_t *q;
	size_t qn;
	int32_t known[MB * 16];		/* every block the cache ever gave out */
	size_t nknown;
	bool *seen;
	struct mreq req[MREQ];
	int live[MREQ];
};

static kvs_block_hash_t hid_hash(int64_t id)
{
	return H((uint32_t)(id >> 16), (uint32_t)(id & 0xffff));
}

static bool m_has(struct model *m, struct env *e, int64_t id)
{
	(void)e;
	for (size_t i = 0; i < m->nknown; i++)
		if (m->hid[m->known[i]] == id)
			return true;
	return false;
}

static void m_qdel(struct model *m, int32_t b)
{
	for (size_t i = 0; i < m->qn; i++)
		if (m->q[i] == b) {
			memmove(&m->q[i], &m->q[i + 1], (m->qn - i - 1) * sizeof(int32_t));
			m->qn--;
			return;
		}
	ck_abort_msg("block %d not in the model's queue", b);
}

static void m_check(struct model *m, struct env *e)
{
	int32_t q[MAXB];
	kvs_block_hash_t h;

	check_pages(e);
	ck_assert_uint_eq(queue(e, q), m->qn);
	for (size_t i = 0; i < m->qn; i++)
		ck_assert_int_eq(q[i], m->q[i]);
	for (size_t i = 0; i < m->nknown; i++) {
		int32_t b = m->known[i];
		int has = hashed(e, b, &h);

		ck_assert_uint_eq(refof(e, b), m->ref[b]);
		ck_assert_int_eq(has, m->hid[b] >= 0);
		if (has) {
			kvs_block_hash_t w = hid_hash(m->hid[b]);

			ck_assert_mem_eq(h.bytes, w.bytes, 32);
			/* The table answers for it. */
			ck_assert_int_eq(kvs_hcache_match_ro(e->hc, &h, 1, 2 * e->ps), 1);
		}
	}
}

static void m_free(struct model *m, struct env *e, int r)
{
	struct mreq *rq = &m->req[r];
	int32_t rev[64];

	for (size_t i = 0; i < rq->n; i++)
		rev[i] = rq->blk[rq->n - 1 - i];
	ck_assert_int_eq(kvs_hcache_free(e->hc, rev, rq->n), 0);
	for (size_t i = 0; i < rq->n; i++) {
		int32_t b = rev[i];

		if (--m->ref[b] == 0 && m->hid[b] >= 0)
			m->q[m->qn++] = b;
	}
	m->live[r] = 0;
}

static void run_model(uint32_t ps, size_t free_pages, uint64_t seed, int steps)
{
	struct env e;
	struct model *m = calloc(1, sizeof(*m));
	uint64_t x = seed;
	uint32_t fresh = 100;
	int enomem = 0, hits = 0;
	kvs_hcache_stats_t st;

	env_open(&e, ps, free_pages, 16);
	m->ref = calloc(e.pages, sizeof(*m->ref));
	m->hid = malloc(e.pages * sizeof(*m->hid));
	m->q = malloc(e.pages * sizeof(*m->q));
	m->seen = calloc(e.pages, sizeof(*m->seen));
	for (uint64_t b = 0; b < e.pages; b++)
		m->hid[b] = -1;
	for (int s = 0; s < steps; s++) {
		int r = (int)(tu_rng(&x) % MREQ);

		if (m->live[r]) {
			m_free(m, &e, r);
		} else if (tu_rng(&x) % 8 == 0) {
			size_t want = tu_rng(&x) % 4, got = 0;
			ssize_t k = kvs_hcache_evict(e.hc, want);

			ck_assert_int_ge(k, 0);
			while (got < want && m->qn) {
				int32_t b = m->q[0];

				m_qdel(m, b);
				m->hid[b] = -1;
				got++;
			}
			ck_assert_uint_eq((size_t)k, got);
		} else {
			uint32_t fam = (uint32_t)(tu_rng(&x) % 4);
			size_t ntok = 1 + tu_rng(&x) % (ps * 10);
			size_t full = ntok / ps, nblk = (ntok + ps - 1) / ps;
			size_t shared = tu_rng(&x) % (full + 1), cap, want_hit = 0, frompool;
			uint32_t own = fresh++;
			int64_t ids[64];
			kvs_block_hash_t hs[64];
			struct mreq *rq = &m->req[r];
			ssize_t k;
			uint64_t avail;

			for (size_t i = 0; i < full; i++) {
				ids[i] = i < shared ? ((int64_t)fam << 16 | (int64_t)i) :
						      ((int64_t)own << 16 | (int64_t)i);
				hs[i] = hid_hash(ids[i]);
			}
			cap = ntok ? (ntok - 1) / ps : 0;
			if (cap > full)
				cap = full;
			while (want_hit < cap && m_has(m, &e, ids[want_hit]))
				want_hit++;
			ck_assert_int_eq(kvs_hcache_match_ro(e.hc, hs, full, ntok),
					 (ssize_t)want_hit);
			k = kvs_hcache_lookup(e.hc, hs, full, ntok, rq->blk);
			ck_assert_int_eq(k, (ssize_t)want_hit);
			hits += k > 0;
			for (ssize_t i = 0; i < k; i++) {
				int32_t b = rq->blk[i];

				ck_assert_int_eq(m->hid[b], ids[i]);
				if (m->ref[b]++ == 0)
					m_qdel(m, b);
			}
			avail = avail_pages(&e);
			if (nblk - (size_t)k > avail + m->qn) {
				int32_t back[64];

				errno = 0;
				ck_assert_int_eq(kvs_hcache_alloc(e.hc, nblk - (size_t)k, rq->blk + k),
						 -1);
				ck_assert_int_eq(errno, ENOMEM);
				enomem++;
				m_check(m, &e);
				/* Give back the hits, tail first. */
				for (ssize_t i = 0; i < k; i++)
					back[i] = rq->blk[k - 1 - i];
				ck_assert_int_eq(kvs_hcache_free(e.hc, back, (size_t)k), 0);
				for (ssize_t i = 0; i < k; i++)
					if (--m->ref[back[i]] == 0)
						m->q[m->qn++] = back[i];
				m_check(m, &e);
				continue;
			}
			ck_assert_int_eq(kvs_hcache_alloc(e.hc, nblk - (size_t)k, rq->blk + k), 0);
			frompool = nblk - (size_t)k < avail ? nblk - (size_t)k : avail;
			for (size_t i = (size_t)k; i < nblk; i++) {
				int32_t b = rq->blk[i];

				ck_assert_uint_eq(m->ref[b], 0);
				if (!m->seen[b]) {
					ck_assert_uint_lt(m->nknown, MB * 16);
					m->seen[b] = true;
					m->known[m->nknown++] = b;
				}
				if (i - (size_t)k >= frompool) {
					/* Evicted: exactly the model's queue head. */
					ck_assert_int_eq(b, m->q[0]);
					m_qdel(m, b);
					m->hid[b] = -1;
				} else {
					ck_assert_int_eq(m->hid[b], -1);
				}
				m->ref[b] = 1;
			}
			if (full > (size_t)k) {
				ck_assert_int_eq(kvs_hcache_cache(e.hc, rq->blk + k, full - (size_t)k,
								  hs + k, k ? &hs[k - 1] : NULL, 0, NULL),
						 0);
				for (size_t i = (size_t)k; i < full; i++)
					m->hid[rq->blk[i]] = ids[i];
			}
			rq->n = nblk;
			m->live[r] = 1;
		}
		m_check(m, &e);
	}
	for (int r = 0; r < MREQ; r++)
		if (m->live[r])
			m_free(m, &e, r);
	m_check(m, &e);
	/* The run went through every path: hits, evictions, refusals. */
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_int_gt(hits, 0);
	ck_assert_uint_gt(st.evictions, 0);
	ck_assert_int_gt(enomem, 0);
	ck_assert_int_eq(kvs_hcache_reset(e.hc), 0);
	env_close(&e);
	free(m->ref);
	free(m->hid);
	free(m->q);
	free(m->seen);
	free(m);
}

START_TEST(test_model_ps4)
{
	run_model(4, 24, 0x1234567ULL, (int)tu_scaled(3000, 300));
}
END_TEST

START_TEST(test_model_ps1)
{
	run_model(1, 20, 0xabcdef1ULL, (int)tu_scaled(3000, 300));
}
END_TEST

START_TEST(test_model_ps16)
{
	run_model(16, 24, 0x5eed5eedULL, (int)tu_scaled(2000, 200));
}
END_TEST

static Suite *hcache_suite(void)
{
	Suite *s = suite_create("hashcache");
	TCase *tc = tcase_create("vllm");

	tcase_add_test(tc, test_only_full_blocks_cached);
	tcase_add_test(tc, test_last_token_always_computed);
	tcase_add_test(tc, test_hit_refcounts);
	tcase_add_test(tc, test_find_and_touch);
	tcase_add_test(tc, test_free_queue_order);
	tcase_add_test(tc, test_eviction_and_hash_cleared);
	tcase_add_test(tc, test_failed_alloc_changes_nothing);
	tcase_add_test(tc, test_reset_refused_in_use);
	tcase_add_test(tc, test_events);
	tcase_add_test(tc, test_event_token_ids);
	tcase_add_test(tc, test_duplicates_allowed);
	tcase_add_test(tc, test_short_hashes);
	tcase_add_test(tc, test_duplicate_chain_removal);
	tcase_add_test(tc, test_window_metrics);
	tcase_add_test(tc, test_stat_accessors);
	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_failed_admission_keeps_queue);
	tcase_add_test(tc, test_hit_rate_in_tokens);
	tcase_add_test(tc, test_evict_any_count);
	suite_add_tcase(s, tc);

	tc = tcase_create("model");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_model_ps4);
	tcase_add_test(tc, test_model_ps1);
	tcase_add_test(tc, test_model_ps16);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(hcache_suite());
}
