/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/stress_hashcache.c - lock-free lookups (kvs_hcache_match_ro())
 * beside a writer that allocates, caches, frees and evicts.  The verdict
 * does not depend on the scheduler: a pinned prefix (its blocks held, so
 * never evictable) is found whole by every read, a prefix never cached is
 * never found, and a churned prefix is never found longer than it is; at
 * the end, with the writer stopped, the table answers exactly.  Every
 * reader does at least a fixed number of reads, however the threads run.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define PS 2
#define PIN 8			/* pinned blocks */
#define CHURN 6			/* blocks of a churned request */
#define NREADERS 2

struct stress {
	kvs_hcache_t *hc;
	kvs_block_hash_t pin[PIN], never[4], churn[CHURN];
	atomic_int stop;
	_Atomic uint64_t reads, bad;
};

static kvs_block_hash_t mk(uint32_t a, uint32_t b)
{
	kvs_block_hash_t h;

	memset(&h, 0, sizeof(h));
	h.len = 32;
	for (int k = 0; k < 32; k++)
		h.bytes[k] = (uint8_t)(a * 17u + b * 5u + (uint32_t)k);
	memcpy(h.bytes, &a, 4);
	memcpy(h.bytes + 4, &b, 4);
	return h;
}

static void *reader(void *arg)
{
	struct stress *st = arg;
	uint64_t n = 0, bad = 0;

	while (n < 2000 || !atomic_load(&st->stop)) {
		ssize_t a = kvs_hcache_match_ro(st->hc, st->pin, PIN, PIN * PS + 1);
		ssize_t b = kvs_hcache_match_ro(st->hc, st->never, 4, 100);
		ssize_t c = kvs_hcache_match_ro(st->hc, st->churn, CHURN, 100);

		if (a != PIN || b != 0 || c < 0 || c > CHURN)
			bad++;
		n++;
	}
	atomic_fetch_add(&st->reads, n);
	atomic_fetch_add(&st->bad, bad);
	return NULL;
}

static void run(long rounds)
{
	kvs_drv_attr_t da;
	kvs_drv_t *d;
	kvs_pool_attr_t pa;
	kvs_pool_t *pool;
	struct stress st;
	pthread_t th[NREADERS];
	int32_t pinb[PIN], blk[CHURN];
	double deadline = tu_seconds() + 60;

	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	pa.slab_granules = 1;
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = PS;
	pa.max_tokens = 256;
	pool = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(pool);
	memset(&st, 0, sizeof(st));
	st.hc = kvs_hcache_create(pool, NULL);
	ck_assert_ptr_nonnull(st.hc);
	for (uint32_t i = 0; i < PIN; i++)
		st.pin[i] = mk(1, i);
	for (uint32_t i = 0; i < 4; i++)
		st.never[i] = mk(2, i);
	for (uint32_t i = 0; i < CHURN; i++)
		st.churn[i] = mk(3, i);
	ck_assert_int_eq(kvs_hcache_alloc(st.hc, PIN, pinb), 0);
	ck_assert_int_eq(kvs_hcache_cache(st.hc, pinb, PIN, st.pin, NULL, 0, NULL), 0);
	for (int i = 0; i < NREADERS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, reader, &st), 0);
	for (long r = 0; r < rounds && tu_seconds() < deadline; r++) {
		ssize_t k = kvs_hcache_lookup(st.hc, st.churn, CHURN, 100, blk);
		int32_t rev[CHURN];

		ck_assert_int_ge(k, 0);
		ck_assert_int_eq(kvs_hcache_alloc(st.hc, CHURN - (size_t)k, blk + k), 0);
		/* Cache a random-length run, so that some blocks go back to the pool. */
		{
			size_t upto = (size_t)k + (size_t)(r % (CHURN - k + 1));

			if (upto > (size_t)k)
				ck_assert_int_eq(kvs_hcache_cache(st.hc, blk + k, upto - (size_t)k,
								  st.churn + k, NULL, 0, NULL), 0);
		}
		for (int i = 0; i < CHURN; i++)
			rev[i] = blk[CHURN - 1 - i];
		ck_assert_int_eq(kvs_hcache_free(st.hc, rev, CHURN), 0);
		if (r % 3 == 0)
			ck_assert_int_ge(kvs_hcache_evict(st.hc, (size_t)(r % 5)), 0);
		if (r % 7 == 0)
			ck_assert_int_eq(kvs_hcache_validate(st.hc), 0);
	}
	atomic_store(&st.stop, 1);
	for (int i = 0; i < NREADERS; i++)
		pthread_join(th[i], NULL);
	ck_assert_uint_eq(atomic_load(&st.bad), 0);
	ck_assert_uint_ge(atomic_load(&st.reads), 2000 * NREADERS);
	ck_assert_int_eq(kvs_hcache_validate(st.hc), 0);
	/* Quiescent: the table answers exactly. */
	ck_assert_int_eq(kvs_hcache_match_ro(st.hc, st.pin, PIN, 1000), PIN);
	{
		ssize_t q = kvs_hcache_free_queue(st.hc, NULL, 0);

		ck_assert_int_eq(kvs_hcache_evict(st.hc, 1000), q);
	}
	ck_assert_int_eq(kvs_hcache_match_ro(st.hc, st.churn, CHURN, 1000), 0);
	ck_assert_int_eq(kvs_hcache_free(st.hc, pinb, PIN), 0);
	ck_assert_int_eq(kvs_hcache_destroy(st.hc), 0);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(pool), KVS_SLAB_STAT_objects), 0);
	kvs_pool_destroy(pool);
	kvs_drv_close(d);
}

START_TEST(test_readers_beside_writer)
{
	run(tu_scaled(5000, 500));
}
END_TEST

static Suite *stress_suite(void)
{
	Suite *s = suite_create("stress_hashcache");
	TCase *tc = tcase_create("concurrent");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_readers_beside_writer);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(stress_suite());
}
