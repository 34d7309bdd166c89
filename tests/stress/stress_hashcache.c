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
#include <time.h>
#include <urcu-bp.h>

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

/*
 * Entries reused under the readers.  A table entry, retired when its block
 * is evicted, is taken again for another hash once the free ones run out;
 * a reader standing on it must not be led away by its new links.  The
 * pinned blocks are cached first, so that in their chains they sit behind
 * the churned entries (new entries go in at a chain's head), and the
 * writer caches every round under fresh hashes, so that each eviction
 * retires an entry that comes back for some other hash: at least three
 * times the slab (pages, and a reserve of a quarter of the pages, at least
 * 4096 entries: kvs_hcache_create(3)).  A reader led astray would miss a
 * pinned hash; one comparing a reused entry's bytes could match a hash no
 * block holds.  Every read must find the pinned prefix whole and never a
 * hash never cached.
 */
#define RCH 16			/* blocks a round of the reuse test */

struct reuse {
	kvs_hcache_t *hc;
	kvs_block_hash_t pin[32], never[32];
	atomic_int stop;
	_Atomic uint64_t reads, bad;
};

static void *reuse_reader(void *arg)
{
	struct reuse *st = arg;
	uint64_t n = 0, bad = 0;

	while (n < 2000 || !atomic_load(&st->stop)) {
		bad += kvs_hcache_match_ro(st->hc, st->pin, 32, 32 * PS + 1) != 32;
		for (int i = 0; i < 32; i++)
			bad += kvs_hcache_match_ro(st->hc, &st->never[i], 1, 100) != 0;
		n++;
	}
	atomic_fetch_add(&st->reads, n);
	atomic_fetch_add(&st->bad, bad);
	return NULL;
}

START_TEST(test_readers_through_reuse)
{
	kvs_drv_attr_t da;
	kvs_drv_t *d;
	kvs_pool_attr_t pa;
	kvs_pool_t *pool;
	kvs_hcache_stats_t hs;
	struct reuse st;
	pthread_t th[NREADERS];
	int32_t pinb[32], blk[RCH], rev[RCH];
	kvs_block_hash_t h[RCH];
	uint64_t pages, slab, rounds;

	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	pa.slab_granules = 1;
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = PS;
	pa.max_tokens = 512;
	pool = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(pool);
	pages = kvs_pool_capacity(pool) / PS;
	slab = pages + (pages / 4 > 4096 ? pages / 4 : 4096);
	rounds = 3 * slab / RCH + 1;
	memset(&st, 0, sizeof(st));
	st.hc = kvs_hcache_create(pool, NULL);
	ck_assert_ptr_nonnull(st.hc);
	for (uint32_t i = 0; i < 32; i++) {
		st.pin[i] = mk(5, i);
		st.never[i] = mk(6, i);
	}
	ck_assert_int_eq(kvs_hcache_alloc(st.hc, 32, pinb), 0);
	ck_assert_int_eq(kvs_hcache_cache(st.hc, pinb, 32, st.pin, NULL, 0, NULL), 0);
	for (int i = 0; i < NREADERS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, reuse_reader, &st), 0);
	for (uint64_t r = 0; r < rounds; r++) {
		for (uint32_t i = 0; i < RCH; i++)
			h[i] = mk(7 + (uint32_t)(r >> 16), (uint32_t)(r & 0xffff) * RCH + i);
		ck_assert_int_eq(kvs_hcache_alloc(st.hc, RCH, blk), 0);
		ck_assert_int_eq(kvs_hcache_cache(st.hc, blk, RCH, h, NULL, 0, NULL), 0);
		for (int i = 0; i < RCH; i++)
			rev[i] = blk[RCH - 1 - i];
		ck_assert_int_eq(kvs_hcache_free(st.hc, rev, RCH), 0);
	}
	atomic_store(&st.stop, 1);
	for (int i = 0; i < NREADERS; i++)
		pthread_join(th[i], NULL);
	ck_assert_uint_eq(atomic_load(&st.bad), 0);
	ck_assert_uint_ge(atomic_load(&st.reads), 2000 * NREADERS);
	ck_assert_int_eq(kvs_hcache_stats(st.hc, &hs), 0);
	ck_assert_uint_ge(hs.evictions, 2 * slab);
	ck_assert_int_eq(kvs_hcache_validate(st.hc), 0);
	ck_assert_int_eq(kvs_hcache_match_ro(st.hc, st.pin, 32, 1000), 32);
	ck_assert_int_eq(kvs_hcache_free(st.hc, pinb, 32), 0);
	ck_assert_int_eq(kvs_hcache_destroy(st.hc), 0);
	kvs_pool_destroy(pool);
	kvs_drv_close(d);
}
END_TEST

/*
 * A retired entry waits for the readers.  One thread stays inside an RCU
 * read-side critical section (liburcu-bp, as kvs_hcache_match_ro() reads)
 * while a writer turns the cache over under fresh hashes: it may use each
 * entry of the slab once (pages and reserve, kvs_hcache_create(3)) and must
 * then wait, since any retired entry may still be under that reader.  So
 * however the threads run, the writer completes at most slab / RCH rounds
 * before the reader leaves, and all of them after.  (A cache that reused
 * entries at once would run on: the watch below ends as soon as it does,
 * or after a while.)
 */
static void nap(void)
{
	struct timespec ts = {0, 1000000};

	nanosleep(&ts, NULL);
}

struct churn {
	kvs_hcache_t *hc;
	uint64_t rounds;
	atomic_int held, release;
	_Atomic uint64_t done;
};

static void *holder(void *arg)
{
	struct churn *c = arg;

	rcu_read_lock();
	atomic_store(&c->held, 1);
	while (!atomic_load(&c->release))
		nap();
	rcu_read_unlock();
	return NULL;
}

static void *churner(void *arg)
{
	struct churn *c = arg;
	int32_t blk[RCH], rev[RCH];
	kvs_block_hash_t h[RCH];

	for (uint64_t r = 0; r < c->rounds; r++) {
		for (uint32_t i = 0; i < RCH; i++)
			h[i] = mk(100 + (uint32_t)(r >> 16), (uint32_t)(r & 0xffff) * RCH + i);
		if (kvs_hcache_alloc(c->hc, RCH, blk) ||
		    kvs_hcache_cache(c->hc, blk, RCH, h, NULL, 0, NULL))
			return NULL;
		for (int i = 0; i < RCH; i++)
			rev[i] = blk[RCH - 1 - i];
		if (kvs_hcache_free(c->hc, rev, RCH))
			return NULL;
		atomic_fetch_add(&c->done, 1);
	}
	return NULL;
}

START_TEST(test_writer_waits_for_reader)
{
	kvs_drv_attr_t da;
	kvs_drv_t *d;
	kvs_pool_attr_t pa;
	kvs_pool_t *pool;
	struct churn c;
	pthread_t th, tw;
	uint64_t pages, slab, seen;
	double until;

	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	pa.slab_granules = 1;
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = PS;
	pa.max_tokens = 512;
	pool = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(pool);
	pages = kvs_pool_capacity(pool) / PS;
	slab = pages + (pages / 4 > 4096 ? pages / 4 : 4096);
	memset(&c, 0, sizeof(c));
	c.hc = kvs_hcache_create(pool, NULL);
	ck_assert_ptr_nonnull(c.hc);
	c.rounds = 2 * slab / RCH + 1;
	ck_assert_int_eq(pthread_create(&th, NULL, holder, &c), 0);
	while (!atomic_load(&c.held))
		nap();
	ck_assert_int_eq(pthread_create(&tw, NULL, churner, &c), 0);
	until = tu_seconds() + 0.5;
	while (atomic_load(&c.done) <= slab / RCH && tu_seconds() < until)
		nap();
	seen = atomic_load(&c.done);
	atomic_store(&c.release, 1);
	pthread_join(th, NULL);
	pthread_join(tw, NULL);
	ck_assert_uint_le(seen, slab / RCH);
	ck_assert_uint_eq(atomic_load(&c.done), c.rounds);
	ck_assert_int_eq(kvs_hcache_validate(c.hc), 0);
	ck_assert_int_eq(kvs_hcache_evict(c.hc, SIZE_MAX), (ssize_t)pages);
	ck_assert_int_eq(kvs_hcache_destroy(c.hc), 0);
	kvs_pool_destroy(pool);
	kvs_drv_close(d);
}
END_TEST

static Suite *stress_suite(void)
{
	Suite *s = suite_create("stress_hashcache");
	TCase *tc = tcase_create("concurrent");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_readers_beside_writer);
	tcase_add_test(tc, test_readers_through_reuse);
	tcase_add_test(tc, test_writer_waits_for_reader);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(stress_suite());
}
