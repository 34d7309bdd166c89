/* SPDX-License-Identifier: MIT */
/*
 * tests/api/test_sweep.c - driver faults swept over a serving loop.
 *
 * A small serving loop (requests sharing prefixes, matched, extended in
 * batches, decoded, finished into the radix cache, with eviction because
 * the pool is small, and the slab release policy run between steps as an
 * engine would) runs over the fault-injecting driver.  First with no
 * fault, counting the driver calls; then failing each call index in turn
 * (ENOMEM and EIO alternately), then with 50 seeds failing calls at
 * random.  Whatever fails, the loop handles it as an engine does (release
 * the request), and at the end every page is free, held by the tree or
 * parked where validate sees it, every chunk is accounted for, and once
 * everything is destroyed the driver holds nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define NREQ 12
#define WAVE 4
#define PREFIX 48
#define OWN 16
#define DECODE 8
#define MAXTOK (PREFIX + OWN + DECODE)

struct loop {
	kvs_drv_t *inner, *f;
	kvs_pool_t *pool;
	kvs_reqtab_t *tab;
	kvs_radix_t *r;
	kvs_flow_t *fl;
};

static void tokens_of(int i, int32_t *t)
{
	int k;

	for (k = 0; k < PREFIX; k++)
		t[k] = 1000 * (i % 3 + 1) + k; /* three shared prefixes */
	for (k = 0; k < OWN; k++)
		t[PREFIX + k] = 100000 + 100 * i + k;
}

/* One run of the loop; returns the driver calls it made. */
static uint64_t run(int i_backend, int mode, uint64_t arg)
{
	struct loop L;
	kvs_pool_attr_t pa;
	kvs_drv_attr_t da;
	int32_t toks[NREQ][MAXTOK];
	kvs_req_t req[NREQ];
	uint64_t calls = 0;
	int w, i, k, kept = 0, finished = 0;

	(void)i_backend;
	memset(&L, 0, sizeof(L));
	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	L.inner = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(L.inner);
	L.f = kvs_fault_open(L.inner);
	ck_assert_ptr_nonnull(L.f);
	if (mode == 1)
		kvs_fault_fail_nth(L.f, KVS_OP_ANY, arg, arg % 2 ? ENOMEM : EIO);
	else if (mode == 2)
		kvs_fault_fail_random(L.f, KVS_OP_ANY, 0.02, arg, arg % 2 ? ENOMEM : EIO);

	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 64;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 4;
	pa.max_tokens = 256; /* 8 slabs of 32 tokens: eviction is needed */
	pa.min_empty = 0;
	pa.max_empty = 0;
	pa.chunk_pool = 1;
	pa.magazine = 4;
	L.pool = kvs_pool_create(L.f, &pa);
	if (!L.pool)
		goto out;
	L.tab = kvs_reqtab_create(L.f, WAVE, MAXTOK + 8);
	if (!L.tab)
		goto out;
	L.r = kvs_radix_create(L.pool, NULL);
	ck_assert_ptr_nonnull(L.r);
	L.fl = kvs_flow_create(L.pool, L.tab, L.r);
	ck_assert_ptr_nonnull(L.fl);

	for (w = 0; w < NREQ / WAVE; w++) {
		kvs_req_t *batch[WAVE];
		int live[WAVE];

		for (i = 0; i < WAVE; i++) {
			int q = w * WAVE + i;

			tokens_of(q, toks[q]);
			ck_assert_int_eq(kvs_req_init(&req[q], toks[q], PREFIX + OWN, 0, 0), 0);
			batch[i] = &req[q];
			live[i] = kvs_flow_match(L.fl, &req[q]) >= 0;
		}
		if (kvs_flow_prepare_extend(L.fl, batch, WAVE, NULL) < 0) {
			for (i = 0; i < WAVE; i++)
				ck_assert_int_eq(kvs_flow_release(L.fl, batch[i]), 0);
			(void)kvs_slab_reclaim(kvs_pool_slab(L.pool));
			continue;
		}
		for (k = 0; k < DECODE; k++) {
			for (i = 0; i < WAVE; i++) {
				toks[w * WAVE + i][batch[i]->ntokens] = 7 * k + i;
				batch[i]->ntokens++;
			}
			if (kvs_flow_prepare_decode(L.fl, batch, WAVE, NULL) < 0) {
				for (i = 0; i < WAVE; i++)
					batch[i]->ntokens--;
				break;
			}
			(void)kvs_slab_reclaim(kvs_pool_slab(L.pool));
		}
		for (i = 0; i < WAVE; i++) {
			(void)live[i];
			if (kvs_flow_cache_finished(L.fl, batch[i]) < 0)
				ck_assert_int_eq(kvs_flow_release(L.fl, batch[i]), 0);
			else
				finished++;
		}
		(void)kvs_slab_reclaim(kvs_pool_slab(L.pool));
	}

	if (mode == 0) {
		/* The fault-free run does what the sweep is meant to cover:
		 * 432 distinct tokens through 256 of room: the tree evicted. */
		ck_assert_int_eq(finished, NREQ);
		ck_assert_uint_le(kvs_radix_tokens(L.r), 256);
	}
	/* Every page: free, cached, held by the tree, or parked. */
	ck_assert_int_eq(kvs_slab_validate(kvs_pool_slab(L.pool)), 0);
	ck_assert_int_eq(kvs_radix_validate(L.r), 0);
	ck_assert_uint_eq(kvs_radix_protected(L.r), 0);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(L.pool), KVS_SLAB_STAT_objects) *
				  kvs_pool_page_size(L.pool),
			  kvs_radix_tokens(L.r));
	ck_assert_int_ge(kvs_radix_evict(L.r, kvs_radix_tokens(L.r)), 0);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(L.pool), KVS_SLAB_STAT_objects), 0);
	(void)kvs_slab_shrink(kvs_pool_slab(L.pool));
	ck_assert_int_eq(kvs_slab_validate(kvs_pool_slab(L.pool)), 0);
	if (mode == 0) /* and slabs went back to the driver */
		ck_assert_uint_gt(kvs_slab_stat(kvs_pool_slab(L.pool), KVS_SLAB_STAT_slab_unmaps), 0);
out:
	calls = kvs_fault_calls(L.f, KVS_OP_ANY);
	if (L.fl)
		ck_assert_int_eq(kvs_flow_destroy(L.fl), 0);
	if (L.r)
		ck_assert_int_eq(kvs_radix_destroy(L.r), 0);
	if (L.tab && kvs_reqtab_destroy(L.tab) < 0)
		kept = 1;
	if (L.pool && kvs_pool_destroy(L.pool) < 0) {
		ck_assert_int_eq(errno, EIO); /* the driver kept something */
		kept = 1;
	}
	if (!kept) {
		/* Everything was given back: the driver holds nothing. */
		ck_assert_uint_eq(kvs_drv_stat(L.inner, KVS_DRV_STAT_bytes_mapped), 0);
		ck_assert_uint_eq(kvs_drv_stat(L.inner, KVS_DRV_STAT_bytes_created), 0);
		ck_assert_uint_eq(kvs_drv_stat(L.inner, KVS_DRV_STAT_bytes_reserved), 0);
	}
	/* What a failed release or unmap left with the driver, its close
	 * gives back (the wrapper closes the inner driver too). */
	ck_assert_int_eq(kvs_drv_close(L.f), 0);
	ck_assert_int_eq(tu_host_chunk_fds(), 0);
	ck_assert_int_eq(tu_host_chunk_maps(), 0);
	return calls;
}

/* Fail every call index in turn. */
START_TEST(test_sweep_nth)
{
	uint64_t n = run(0, 0, 0), k, kept = 0;

	ck_assert_uint_gt(n, 50);
	for (k = 1; k <= n; k++)
		run(0, 1, k);
	(void)kept;
}
END_TEST

/* 50 seeds failing calls at random. */
START_TEST(test_sweep_random)
{
	uint64_t seed;

	for (seed = 1; seed <= 50; seed++)
		run(0, 2, seed);
}
END_TEST

static Suite *sweep_suite(void)
{
	Suite *s = suite_create("sweep");
	TCase *tc = tcase_create("faults");

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_sweep_nth);
	tcase_add_test(tc, test_sweep_random);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(sweep_suite());
}
