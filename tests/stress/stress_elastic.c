/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/stress_elastic.c - compaction, eviction, limit changes and
 * serving at once, on one pool with a radix cache and a hashed block cache
 * (issue 22).  Threads: a radix server (allocate, insert, match and lock,
 * unlock), a hashed-cache server (admit, cache, free), an evictor (both
 * caches), a limiter (kvs_pool_set_limit() down and up, every cache) and a
 * compactor (kvs_pool_compact(), every cache).  The verdict does not
 * depend on the scheduler: whatever interleaving happened, after the
 * threads stop the allocator, both caches and the pool's accounting check
 * clean, every call returned 0 or an errno its man page names, and once
 * the caches are emptied every page of the budget can be allocated.  A
 * deadline bounds the run (KVSLAB_STRESS_SECONDS, default a fraction of a
 * second scaled by KVSLAB_TEST_SCALE).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

/* The cuda driver's granularity (tu_granularity()), 4 KiB with the double. */
#define GRAN tu_granularity(4096)
#define TOKENS 512		/* 128 slabs of 4 one-token pages */
#define SEQLEN 24
#define NSEQ 32

struct st {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_slab_t *s;
	kvs_radix_t *r;
	kvs_hcache_t *hc;
	int32_t seqs[NSEQ][SEQLEN];
	double deadline;
	atomic_int stop;
	_Atomic uint64_t ops, bad, moved, limits, evicted;
	char why[160];
	pthread_mutex_t why_lock;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A call failed in a way its man page does not allow: remember the first. */
static void bad_return(struct st *st, const char *what, int err)
{
	pthread_mutex_lock(&st->why_lock);
	if (!atomic_load(&st->bad))
		snprintf(st->why, sizeof(st->why), "%s: %s", what, strerror(err));
	atomic_fetch_add(&st->bad, 1);
	pthread_mutex_unlock(&st->why_lock);
}

static bool running(struct st *st)
{
	return !atomic_load(&st->stop) && now_s() < st->deadline;
}

/* Allocate @n locations, evicting from the radix cache when short. */
static int alloc_evict(struct st *st, size_t n, int32_t *locs)
{
	for (int tries = 0; tries < 3; tries++) {
		if (kvs_pool_alloc(st->pool, n, locs) == 0)
			return 0;
		if (errno != ENOMEM) {
			bad_return(st, "kvs_pool_alloc", errno);
			return -1;
		}
		if (kvs_radix_evict(st->r, n) < 0)
			bad_return(st, "kvs_radix_evict", errno);
	}
	return -1;
}

static void *radix_server(void *arg)
{
	struct st *st = arg;
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	int32_t locs[SEQLEN];
	kvs_radix_node_t *last;

	while (running(st)) {
		const int32_t *key = st->seqs[tu_rng(&x) % NSEQ];
		size_t n = 1 + tu_rng(&x) % SEQLEN;
		ssize_t got;

		if (tu_rng(&x) % 3 == 0) {
			/* Lock what matches for a moment, as a running request. */
			got = kvs_radix_match_lock(st->r, 0, key, n, locs, &last);
			if (got < 0)
				bad_return(st, "kvs_radix_match_lock", errno);
			else if (kvs_radix_unlock(st->r, last) < 0)
				bad_return(st, "kvs_radix_unlock", errno);
			continue;
		}
		if (alloc_evict(st, n, locs) < 0)
			continue;
		got = kvs_radix_insert(st->r, 0, key, n, locs, 0, NULL);
		if (got < 0) {
			bad_return(st, "kvs_radix_insert", errno);
			kvs_pool_free(st->pool, n, locs);
		} else if (got > 0 && kvs_pool_free(st->pool, (size_t)got, locs) < 0) {
			bad_return(st, "kvs_pool_free", errno);
		}
		atomic_fetch_add(&st->ops, 1);
	}
	return NULL;
}

static kvs_block_hash_t bhash(uint32_t seq, uint32_t i)
{
	kvs_block_hash_t h;

	memset(&h, 0, sizeof(h));
	h.len = 32;
	memcpy(h.bytes, &seq, sizeof(seq));
	memcpy(h.bytes + 4, &i, sizeof(i));
	h.bytes[31] = 0xa5;
	return h;
}

static void *hcache_server(void *arg)
{
	struct st *st = arg;
	uint64_t x = 0x2545f4914f6cdd1dULL;
	kvs_block_hash_t h[8];
	int32_t blocks[8];

	while (running(st)) {
		uint32_t seq = (uint32_t)(tu_rng(&x) % 16), nb = 1 + (uint32_t)(tu_rng(&x) % 8);
		ssize_t hit;

		for (uint32_t i = 0; i < nb; i++)
			h[i] = bhash(seq, i);
		/* nb blocks of one token each, plus the last token computed. */
		hit = kvs_hcache_admit(st->hc, h, nb, nb + 1, nb, blocks);
		if (hit < 0) {
			if (errno != ENOMEM)
				bad_return(st, "kvs_hcache_admit", errno);
			if (kvs_hcache_evict(st->hc, 4) < 0)
				bad_return(st, "kvs_hcache_evict", errno);
			continue;
		}
		if ((uint32_t)hit < nb &&
		    kvs_hcache_cache(st->hc, blocks + hit, nb - (size_t)hit, h + hit,
				     hit ? &h[hit - 1] : NULL, 0, NULL) < 0)
			bad_return(st, "kvs_hcache_cache", errno);
		/* vLLM frees a request's blocks tail first. */
		for (uint32_t i = 0; i < nb / 2; i++) {
			int32_t t = blocks[i];

			blocks[i] = blocks[nb - 1 - i];
			blocks[nb - 1 - i] = t;
		}
		if (kvs_hcache_free(st->hc, blocks, nb) < 0)
			bad_return(st, "kvs_hcache_free", errno);
		atomic_fetch_add(&st->ops, 1);
	}
	return NULL;
}

static void *evictor(void *arg)
{
	struct st *st = arg;
	uint64_t x = 0xdeadbeefcafef00dULL;

	while (running(st)) {
		ssize_t a = kvs_radix_evict(st->r, tu_rng(&x) % 16);
		ssize_t b = kvs_hcache_evict(st->hc, tu_rng(&x) % 4);

		if (a < 0)
			bad_return(st, "kvs_radix_evict", errno);
		if (b < 0)
			bad_return(st, "kvs_hcache_evict", errno);
		if (a > 0 || b > 0)
			atomic_fetch_add(&st->evicted, 1);
	}
	return NULL;
}

static void *limiter(void *arg)
{
	struct st *st = arg;
	uint64_t x = 0x123456789abcdefULL;
	size_t full = kvs_pool_limit(st->pool);

	while (running(st)) {
		size_t want = full / 2 + (size_t)(tu_rng(&x) % (full / 2 + 1));

		/* ENOMEM: below what running requests pin; EBUSY: applied but
		 * pages taken meanwhile keep it unmet.  Both are documented. */
		if (kvs_pool_set_limit(st->pool, want, NULL, NULL) < 0 && errno != ENOMEM &&
		    errno != EBUSY)
			bad_return(st, "kvs_pool_set_limit", errno);
		else
			atomic_fetch_add(&st->limits, 1);
		if (kvs_pool_set_limit(st->pool, full, NULL, NULL) < 0)
			bad_return(st, "kvs_pool_set_limit (raise)", errno);
	}
	return NULL;
}

static void *compactor(void *arg)
{
	struct st *st = arg;

	while (running(st)) {
		ssize_t m = kvs_pool_compact(st->pool, NULL, NULL, 32);

		if (m < 0)
			bad_return(st, "kvs_pool_compact", errno);
		else
			atomic_fetch_add(&st->moved, (uint64_t)m);
	}
	return NULL;
}

START_TEST(test_elastic_beside_serving)
{
	static struct st st;
	void *(*fn[5])(void *) = {radix_server, hcache_server, evictor, limiter, compactor};
	pthread_t th[5];
	kvs_pool_attr_t pa;
	uint64_t x = 7, avail;
	const char *secs = getenv("KVSLAB_STRESS_SECONDS");
	int32_t *all;

	memset(&st, 0, sizeof(st));
	pthread_mutex_init(&st.why_lock, NULL);
	st.d = tu_open_gran(0, GRAN, 0, 0);
	ck_assert_ptr_nonnull(st.d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 4;
	pa.model.head_dim = 128;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 1;
	pa.max_tokens = TOKENS;
	pa.magazine = 0;
	pa.min_empty = 0;
	pa.max_empty = 0;
	pa.decay_ms = 0;
	st.pool = kvs_pool_create(st.d, &pa);
	ck_assert_ptr_nonnull(st.pool);
	st.s = kvs_pool_slab(st.pool);
	st.r = kvs_radix_create(st.pool, NULL);
	ck_assert_ptr_nonnull(st.r);
	st.hc = kvs_hcache_create(st.pool, NULL);
	ck_assert_ptr_nonnull(st.hc);
	for (int i = 0; i < NSEQ; i++)
		for (int j = 0; j < SEQLEN; j++)
			st.seqs[i][j] = j < 4 ? (i % 4) * 100 + j : (int32_t)(tu_rng(&x) % 50);
	st.deadline = now_s() + (secs ? atof(secs) : tu_scaled(500, 50) / 1000.0);

	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, fn[i], &st), 0);
	for (int i = 0; i < 5; i++)
		pthread_join(th[i], NULL);
	fprintf(stderr, "stress_elastic: %llu serving ops, %llu pages moved, %llu limits, "
		"%llu evictions\n", (unsigned long long)st.ops, (unsigned long long)st.moved,
		(unsigned long long)st.limits, (unsigned long long)st.evicted);
	ck_assert_msg(st.bad == 0, "%llu bad returns; first: %s", (unsigned long long)st.bad,
		      st.why);
	ck_assert_int_eq(kvs_slab_validate(st.s), 0);
	ck_assert_int_eq(kvs_radix_validate(st.r), 0);
	ck_assert_int_eq(kvs_hcache_validate(st.hc), 0);
	/* Empty both caches: every page of the budget comes back. */
	ck_assert_int_eq(kvs_pool_set_limit(st.pool, SIZE_MAX, NULL, NULL), 0);
	ck_assert_int_ge(kvs_radix_evict(st.r, kvs_radix_tokens(st.r)), 0);
	ck_assert_int_ge(kvs_hcache_evict(st.hc, SIZE_MAX), 0);
	ck_assert_uint_eq(kvs_radix_tokens(st.r), 0);
	avail = kvs_pool_available(st.pool);
	ck_assert_uint_eq(avail, kvs_pool_capacity(st.pool));
	all = malloc(avail * sizeof(*all));
	ck_assert_ptr_nonnull(all);
	ck_assert_int_eq(kvs_pool_alloc(st.pool, avail, all), 0);
	ck_assert_int_eq(kvs_pool_free(st.pool, avail, all), 0);
	free(all);
	ck_assert_int_eq(kvs_hcache_destroy(st.hc), 0);
	ck_assert_int_eq(kvs_radix_destroy(st.r), 0);
	ck_assert_int_eq(kvs_slab_validate(st.s), 0);
	ck_assert_uint_eq(kvs_slab_stat(st.s, KVS_SLAB_STAT_objects), 0);
	ck_assert_int_eq(kvs_pool_destroy(st.pool), 0);
	ck_assert_int_eq(kvs_drv_close(st.d), 0);
	pthread_mutex_destroy(&st.why_lock);
}
END_TEST

static Suite *stress_suite(void)
{
	Suite *s = suite_create("stress_elastic");
	TCase *tc = tcase_create("elastic");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_elastic_beside_serving);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* Unless the caller chose one (make check-gpu's plumbing check). */
	setenv("KVSLAB_DOUBLE_GRANULARITY", "4096", 0);
	(void)GRAN;
	return tu_run(stress_suite());
}
