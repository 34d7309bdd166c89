/* SPDX-License-Identifier: MIT */
/*
 * tests/flow/test_flow_hashed.c - request flows over the hashed block
 * cache (kvs_flow_create_hashed(), vLLM's request side): hits across
 * requests with a shared prefix, extra keys keeping requests apart, blocks
 * cached as they fill (prefill chunks and decode), eviction when the pool
 * is short, blocks freed tail first, no prefix caching without hash
 * attributes, and bad input or a short pool changing nothing.  The cache
 * is validated at the end of every test, with nothing referenced and
 * every page given back once the cache is emptied.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define PS 4
#define ROWS 8
#define MAXCTX 8192

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_reqtab_t *tab;
	kvs_hcache_t *hc;
	kvs_flow_t *f;
	kvs_block_hasher_attr_t ha;
};

/* A hash function this build has (SHA-256 needs libcrypto). */
static int hash_attr(kvs_block_hasher_attr_t *ha)
{
	static const int fns[] = {KVS_HASH_SHA256_CBOR, KVS_HASH_XXH3_128, KVS_HASH_SHA256_CBOR_64};
	size_t i;

	for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		kvs_block_hasher_t *h;

		kvs_block_hasher_attr_init(ha);
		ha->fn = fns[i];
		ha->block_size = PS;
		h = kvs_block_hasher_create(ha);
		if (h) {
			kvs_block_hasher_destroy(h);
			return 0;
		}
	}
	return -1;
}

/* 4 KiB granules: with the tiny model a slab is 4096 tokens. */
static void env_open(struct env *e, int caching)
{
	kvs_drv_attr_t da;
	kvs_pool_attr_t pa;

	memset(e, 0, sizeof(*e));
	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	e->d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = PS;
	pa.max_tokens = 4096;
	pa.slab_granules = 1;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	ck_assert_uint_eq(kvs_pool_capacity(e->pool), 4096);
	e->tab = kvs_reqtab_create(e->d, ROWS, MAXCTX);
	ck_assert_ptr_nonnull(e->tab);
	e->hc = kvs_hcache_create(e->pool, NULL);
	ck_assert_ptr_nonnull(e->hc);
	if (caching && hash_attr(&e->ha) < 0)
		ck_abort_msg("no block hash function in this build");
	e->f = kvs_flow_create_hashed(e->pool, e->tab, e->hc, caching ? &e->ha : NULL);
	ck_assert_ptr_nonnull(e->f);
}

static uint64_t held_pages(struct env *e)
{
	return kvs_slab_stat(kvs_pool_slab(e->pool), KVS_SLAB_STAT_objects);
}

static kvs_hcache_stats_t stats(struct env *e)
{
	kvs_hcache_stats_t st;

	ck_assert_int_eq(kvs_hcache_stats(e->hc, &st), 0);
	return st;
}

static void env_close(struct env *e)
{
	kvs_hcache_stats_t st = stats(e);

	ck_assert_int_eq(kvs_hcache_validate(e->hc), 0);
	ck_assert_uint_eq(st.used_blocks, 0);
	ck_assert_uint_eq(kvs_reqtab_available(e->tab), ROWS);
	/* Every held page is a cached free block. */
	ck_assert_uint_eq(held_pages(e), st.free_queue_blocks);
	ck_assert_int_eq(kvs_hcache_evict(e->hc, SIZE_MAX), (ssize_t)st.free_queue_blocks);
	ck_assert_uint_eq(held_pages(e), 0);
	kvs_flow_destroy(e->f);
	kvs_hcache_destroy(e->hc);
	kvs_reqtab_destroy(e->tab);
	kvs_pool_destroy(e->pool);
	kvs_drv_close(e->d);
}

static void row(struct env *e, const kvs_req_t *q, uint32_t from, uint32_t n, int32_t *out)
{
	ck_assert_int_eq(kvs_reqtab_read(e->tab, (uint32_t)q->slot, from, n, out), 0);
}

static ssize_t extend1(struct env *e, kvs_req_t *q, int32_t *out)
{
	kvs_req_t *batch[1] = {q};

	return kvs_flow_prepare_extend(e->f, batch, 1, out);
}

/* Two requests share 8 blocks: the second hits them, the same pages. */
START_TEST(test_shared_prefix)
{
	struct env e;
	int32_t a[64], b[64], out[64], ra[64], rb[64];
	kvs_req_t qa, qb;
	kvs_hcache_stats_t st;
	int i;

	env_open(&e, 1);
	for (i = 0; i < 64; i++) {
		a[i] = i;
		b[i] = i < 32 ? i : 1000 + i;
	}
	kvs_req_init(&qa, a, 40, 0, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &qa), 0);
	ck_assert_int_eq(extend1(&e, &qa, out), 40);
	ck_assert_uint_eq(qa.prefix_len, 0);
	ck_assert_uint_eq(qa.kv_len, 40);
	row(&e, &qa, 0, 40, ra);
	ck_assert_mem_eq(ra, out, 40 * sizeof(int32_t));
	/* A block is a page: its tokens are consecutive locations. */
	for (i = 0; i < 40; i++)
		ck_assert_int_eq(ra[i] % PS, i % PS);
	/* Its 10 full blocks are cached already, and referenced. */
	st = stats(&e);
	ck_assert_uint_eq(st.cached_blocks, 10);
	ck_assert_uint_eq(st.used_blocks, 10);
	kvs_req_init(&qb, b, 40, 0, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &qb), 32);
	ck_assert_int_eq(extend1(&e, &qb, out), 8);
	ck_assert_uint_eq(qb.prefix_len, 32);
	row(&e, &qb, 0, 40, rb);
	ck_assert_mem_eq(rb, ra, 32 * sizeof(int32_t));
	ck_assert_mem_eq(out, rb + 32, 8 * sizeof(int32_t));
	ck_assert_int_ne(rb[32], ra[32]);
	st = stats(&e);
	ck_assert_uint_eq(st.hit_blocks, 8);
	ck_assert_uint_eq(st.used_blocks, 12);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &qa), 0);
	ck_assert_int_eq(qa.slot, -1);
	/* The cap: a request whose prompt is all cached computes its last
	 * token, so it hits 9 of its 10 full blocks. */
	kvs_req_init(&qa, a, 40, 0, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &qa), 36);
	ck_assert_int_eq(extend1(&e, &qa, out), 4);
	ck_assert_uint_eq(qa.prefix_len, 36);
	ck_assert_int_eq(kvs_flow_release(e.f, &qa), 0);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &qb), 0);
	/* a's 10, b's 2, and the block a computed again beside its cached
	 * twin (duplicate hashes are allowed, as in vLLM). */
	ck_assert_uint_eq(stats(&e).cached_blocks, 13);
	env_close(&e);
}
END_TEST

/* Requests of different extra keys share nothing; the same key shares. */
START_TEST(test_extra_keys)
{
	struct env e;
	int32_t t[64], out[64];
	kvs_req_t q;
	int i;

	env_open(&e, 1);
	for (i = 0; i < 64; i++)
		t[i] = 7 * i;
	kvs_req_init(&q, t, 33, 42, 0);
	ck_assert_int_eq(extend1(&e, &q, out), 33);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	kvs_req_init(&q, t, 33, 0, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q), 0);
	ck_assert_int_eq(extend1(&e, &q, out), 33);
	ck_assert_uint_eq(q.prefix_len, 0);
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0);
	kvs_req_init(&q, t, 33, 43, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q), 0);
	kvs_req_init(&q, t, 33, 42, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q), 32);
	ck_assert_int_eq(extend1(&e, &q, out), 1);
	ck_assert_uint_eq(q.prefix_len, 32);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	env_close(&e);
}
END_TEST

/* Chunked prefill and decode: a block is cached when it fills; caching an
 * unfinished request changes nothing. */
START_TEST(test_blocks_cached_as_they_fill)
{
	struct env e;
	int32_t t[64], out[64], before[64], after[64];
	kvs_req_t q, q2, *batch[1] = {&q};
	int i;

	env_open(&e, 1);
	for (i = 0; i < 64; i++)
		t[i] = 100 + i;
	kvs_req_init(&q, t, 10, 0, 0);
	ck_assert_int_eq(extend1(&e, &q, out), 10);
	ck_assert_uint_eq(stats(&e).cached_blocks, 2);
	row(&e, &q, 0, 10, before);
	ck_assert_int_eq(kvs_flow_cache_unfinished(e.f, &q), 0);
	row(&e, &q, 0, 10, after);
	ck_assert_mem_eq(before, after, sizeof(int32_t) * 10);
	ck_assert_uint_eq(q.prefix_len, 0);
	/* The next chunk fills the partial block first. */
	q.ntokens = 21;
	ck_assert_int_eq(extend1(&e, &q, out), 11);
	ck_assert_int_eq(out[0], before[9] + 1);
	ck_assert_int_eq(out[1], before[9] + 2);
	ck_assert_uint_eq(stats(&e).cached_blocks, 5);
	/* Decode: 3 more tokens fill the sixth block. */
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 1, out), 0);
		ck_assert_uint_eq(stats(&e).cached_blocks, i < 2 ? 5 : 6);
	}
	ck_assert_uint_eq(q.kv_len, 24);
	ck_assert_uint_eq(q.ntokens, 24);
	/* Another request finds all six while the first runs. */
	kvs_req_init(&q2, t, 25, 0, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q2), 24);
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q2), 24);
	env_close(&e);
}
END_TEST

/* A release frees the request's blocks tail first: the end of its prefix
 * is the first to be evicted; its partial block goes back to the pool. */
START_TEST(test_release_order)
{
	struct env e;
	int32_t t[64], out[64], r[64], fq[16];
	kvs_req_t q;
	int i;

	env_open(&e, 1);
	for (i = 0; i < 64; i++)
		t[i] = 3 * i + 1;
	kvs_req_init(&q, t, 14, 0, 0);
	ck_assert_int_eq(extend1(&e, &q, out), 14);
	row(&e, &q, 0, 14, r);
	ck_assert_uint_eq(held_pages(&e), 4);
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0);
	ck_assert_uint_eq(held_pages(&e), 3);
	ck_assert_int_eq(kvs_hcache_free_queue(e.hc, fq, 16), 3);
	ck_assert_int_eq(fq[0], r[8] / PS);
	ck_assert_int_eq(fq[1], r[4] / PS);
	ck_assert_int_eq(fq[2], r[0] / PS);
	/* Evicting one block takes the last: the prefix's first two still hit. */
	ck_assert_int_eq(kvs_hcache_evict(e.hc, 1), 1);
	kvs_req_init(&q, t, 14, 0, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q), 8);
	env_close(&e);
}
END_TEST

/* A short pool: allocation evicts cached free blocks, least recently
 * freed first, never a block the request hits. */
START_TEST(test_evicts_when_short)
{
	struct env e;
	static int32_t toks[5][1000], out[1000];
	kvs_req_t q;
	int i, j;

	env_open(&e, 1);
	for (i = 0; i < 5; i++)
		for (j = 0; j < 1000; j++)
			toks[i][j] = i * 10000 + j;
	for (i = 0; i < 4; i++) {
		kvs_req_init(&q, toks[i], 1000, 0, 0);
		ck_assert_int_eq(extend1(&e, &q, out), 1000);
		ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	}
	ck_assert_uint_lt(kvs_pool_available(e.pool), 1000);
	ck_assert_uint_eq(stats(&e).evictions, 0);
	/* toks[3] hits; toks[4] needs more than the free pages: the oldest
	 * request's blocks go, tail first (its start survives). */
	kvs_req_t a, b, *batch[2] = {&a, &b};

	kvs_req_init(&a, toks[3], 1000, 0, 0);
	kvs_req_init(&b, toks[4], 1000, 0, 0);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 2, NULL), 4 + 1000);
	ck_assert_uint_eq(a.prefix_len, 996);
	ck_assert_uint_gt(stats(&e).evictions, 0);
	kvs_req_init(&q, toks[0], 1000, 0, 0);
	ck_assert_int_lt(kvs_flow_match(e.f, &q), 996);
	kvs_req_init(&q, toks[2], 1000, 0, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q), 996);
	ck_assert_int_eq(kvs_flow_release(e.f, &a), 0);
	ck_assert_int_eq(kvs_flow_release(e.f, &b), 0);
	env_close(&e);
}
END_TEST

/* Memory short for the whole batch: ENOMEM, and nothing changed (the
 * hits a new request took are given back, the slots too). */
START_TEST(test_enomem_changes_nothing)
{
	struct env e;
	int32_t *a = malloc(MAXCTX * sizeof(int32_t)), *b = malloc(MAXCTX * sizeof(int32_t));
	int32_t out[64], fq1[1100], fq2[1100];
	kvs_req_t ra, rb, *batch[2] = {&ra, &rb};
	kvs_hcache_stats_t st0, st1;
	ssize_t n1, n2;
	int i;

	for (i = 0; i < MAXCTX; i++) {
		a[i] = i;
		b[i] = 50000 + i;
	}
	env_open(&e, 1);
	kvs_req_init(&ra, a, 41, 0, 0);
	ck_assert_int_eq(extend1(&e, &ra, out), 41);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &ra), 0);
	st0 = stats(&e);
	n1 = kvs_hcache_free_queue(e.hc, fq1, 1100);
	/* ra hits 10 blocks and needs 1 more; rb needs the whole pool. */
	kvs_req_init(&ra, a, 44, 0, 0);
	kvs_req_init(&rb, b, 4096 - 4, 0, 0);
	errno = 0;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 2, NULL), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(ra.slot, -1);
	ck_assert_int_eq(rb.slot, -1);
	ck_assert_uint_eq(ra.prefix_len + ra.kv_len + rb.prefix_len + rb.kv_len, 0);
	ck_assert_uint_eq(kvs_reqtab_available(e.tab), ROWS);
	st1 = stats(&e);
	ck_assert_uint_eq(st1.used_blocks, 0);
	ck_assert_uint_eq(st1.cached_blocks, st0.cached_blocks);
	ck_assert_uint_eq(st1.evictions, st0.evictions);
	ck_assert_uint_eq(held_pages(&e), 10);
	n2 = kvs_hcache_free_queue(e.hc, fq2, 1100);
	ck_assert_int_eq(n1, n2);
	/* The queue keeps its blocks (ra's hits went back to its tail). */
	for (i = 0; i < n1; i++) {
		int k, found = 0;

		for (k = 0; k < n2; k++)
			found |= fq1[i] == fq2[k];
		ck_assert(found);
	}
	/* A decode short of memory changes nothing either. */
	rb.ntokens = 4096 - 44;
	kvs_req_init(&ra, a, 44, 0, 0);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 2, NULL), 4 + 4096 - 44);
	ck_assert_uint_eq(kvs_pool_available(e.pool), 0);
	ck_assert_uint_eq(ra.kv_len % PS, 0);
	errno = 0;
	ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 2, out), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(ra.kv_len, 44);
	ck_assert_uint_eq(rb.kv_len, 4096 - 44);
	ck_assert_int_eq(kvs_flow_release(e.f, &rb), 0);
	ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 1, out), 0);
	ck_assert_uint_eq(ra.kv_len, 45);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &ra), 0);
	env_close(&e);
	free(a);
	free(b);
}
END_TEST

/* Bad input: -1 with EINVAL or ERANGE, nothing changed. */
START_TEST(test_bad_inputs)
{
	struct env e;
	kvs_block_hasher_attr_t ha;
	int32_t t[64], out[64];
	kvs_req_t q, q2, *batch[2] = {&q, &q};
	kvs_hcache_stats_t st;

	memset(t, 0, sizeof(t));
	env_open(&e, 1);
	errno = 0;
	ck_assert_ptr_null(kvs_flow_create_hashed(NULL, e.tab, e.hc, &e.ha));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(kvs_flow_create_hashed(e.pool, NULL, e.hc, &e.ha));
	ck_assert_ptr_null(kvs_flow_create_hashed(e.pool, e.tab, NULL, &e.ha));
	ha = e.ha;
	ha.block_size = PS * 2;
	errno = 0;
	ck_assert_ptr_null(kvs_flow_create_hashed(e.pool, e.tab, e.hc, &ha));
	ck_assert_int_eq(errno, EINVAL);
	ha = e.ha;
	ha.fn = 99;
	errno = 0;
	ck_assert_ptr_null(kvs_flow_create_hashed(e.pool, e.tab, e.hc, &ha));
	ck_assert_int_eq(errno, EINVAL);

	kvs_req_init(&q, t, 20, 0, 0);
	st = stats(&e);
	errno = 0;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 2, out), -1); /* twice */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(q.slot, -1);
	q.ntokens = MAXCTX + 1;
	errno = 0;
	ck_assert_int_eq(extend1(&e, &q, out), -1);
	ck_assert_int_eq(errno, ERANGE);
	q.ntokens = 20;
	errno = 0;
	ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 1, out), -1); /* no slot */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), -1);
	ck_assert_int_eq(kvs_flow_cache_unfinished(e.f, &q), -1);
	ck_assert_int_eq(kvs_flow_release(e.f, NULL), -1);
	ck_assert_int_eq(kvs_flow_match(e.f, NULL), -1);
	kvs_req_init(&q2, NULL, 0, 0, 0);
	q2.ntokens = 4;
	errno = 0;
	ck_assert_int_eq(kvs_flow_match(e.f, &q2), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(held_pages(&e), 0);
	ck_assert_uint_eq(stats(&e).queries, st.queries);
	ck_assert_uint_eq(kvs_reqtab_available(e.tab), ROWS);
	/* A running request's extend below its kv_len is refused. */
	ck_assert_int_eq(extend1(&e, &q, out), 20);
	q.ntokens = 10;
	errno = 0;
	ck_assert_int_eq(extend1(&e, &q, out), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(q.kv_len, 20);
	ck_assert_int_eq(kvs_flow_wait_layer(e.f, 0), 0);
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0);
	env_close(&e);
}
END_TEST

/* No hash attributes: vLLM without prefix caching. */
START_TEST(test_no_caching)
{
	struct env e;
	int32_t t[64], out[64];
	kvs_req_t q;
	int i;

	for (i = 0; i < 64; i++)
		t[i] = i;
	env_open(&e, 0);
	kvs_req_init(&q, t, 40, 0, 0);
	ck_assert_int_eq(extend1(&e, &q, out), 40);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	ck_assert_uint_eq(held_pages(&e), 0);
	kvs_req_init(&q, t, 40, 0, 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q), 0);
	ck_assert_int_eq(extend1(&e, &q, out), 40);
	ck_assert_uint_eq(q.prefix_len, 0);
	ck_assert_uint_eq(stats(&e).cached_blocks, 0);
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0);
	env_close(&e);
}
END_TEST

static Suite *flow_hashed_suite(void)
{
	Suite *s = suite_create("flow_hashed");
	TCase *tc = tcase_create("flows");

	tcase_add_test(tc, test_shared_prefix);
	tcase_add_test(tc, test_extra_keys);
	tcase_add_test(tc, test_blocks_cached_as_they_fill);
	tcase_add_test(tc, test_release_order);
	tcase_add_test(tc, test_evicts_when_short);
	tcase_add_test(tc, test_enomem_changes_nothing);
	tcase_add_test(tc, test_bad_inputs);
	tcase_add_test(tc, test_no_caching);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(flow_hashed_suite());
}
