/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/stress_radix.c - lock-free readers (kvs_radix_match_ro())
 * beside a writer that inserts, splits and evicts.  The verdict does not
 * depend on the scheduler: no reader ever returns a location of another
 * prefix (however few reads the scheduler lets happen), and a final
 * lock-free read after the writer stopped finds what the tree holds.  A
 * deadline bounds the run on a slow or loaded machine.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* ------------------------------------------------------------ stress test */

/*
 * Readers match while the writer inserts and evicts.  Values are unique ids
 * that are never reused, and ids[v] records the hash of the prefix ending at
 * the token that got id v, so a reader can tell a torn answer: every
 * location it returns must belong to exactly its query's prefix.
 */
#define NSEQ 64
#define SEQLEN 48
#define MAXID (1 << 22)		/* ids of a default run */
#define MAXID_TIMED (1 << 26)	/* of a KVSLAB_STRESS_SECONDS run */

struct stress {
	kvs_radix_t *r;
	int32_t seqs[NSEQ][SEQLEN];
	_Atomic uint64_t *ids;
	atomic_int stop;
	_Atomic uint64_t matches, hits, torn;
};

static uint64_t prefix_hash(const int32_t *k, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint32_t)k[i]) * 1099511628211ULL;
	return h;
}

static void discard(void *arg, const int32_t *locs, size_t n)
{
	(void)arg;
	(void)locs;
	(void)n; /* ids are never reused: nothing to give back */
}

static void *reader(void *arg)
{
	struct stress *st = arg;
	uint64_t x = (uint64_t)(uintptr_t)&x | 1;
	int32_t locs[SEQLEN];

	while (!atomic_load(&st->stop)) {
		const int32_t *q = st->seqs[tu_rng(&x) % NSEQ];
		size_t n = 1 + tu_rng(&x) % SEQLEN;
		ssize_t m = kvs_radix_match_ro(st->r, 0, q, n, locs);

		for (ssize_t i = 0; i < m; i++)
			if (atomic_load_explicit(&st->ids[locs[i]], memory_order_relaxed) !=
			    prefix_hash(q, (size_t)i + 1))
				atomic_fetch_add(&st->torn, 1);
		atomic_fetch_add(&st->matches, 1);
		if (m)
			atomic_fetch_add(&st->hits, 1);
	}
	return NULL;
}

START_TEST(test_readers_beside_writer)
{
	struct stress *st = calloc(1, sizeof(*st));
	kvs_radix_attr_t ra;
	pthread_t th[3];
	uint64_t x = 99;
	int32_t next = 1, locs[SEQLEN];
	double deadline, secs;
	long i, steps, maxid;
	int j, t;

	secs = getenv("KVSLAB_STRESS_SECONDS") ? atof(getenv("KVSLAB_STRESS_SECONDS")) : 0;
	maxid = secs > 0 ? MAXID_TIMED : MAXID;
	st->ids = calloc(maxid, sizeof(*st->ids));
	ck_assert_ptr_nonnull(st->ids);
	/* Sequences share prefixes in a small tree of variants. */
	for (i = 0; i < NSEQ; i++)
		for (j = 0; j < SEQLEN; j++)
			st->seqs[i][j] = j < 8 ? (i & 1) : j < 24 ? (i >> 1) % 4 : (int32_t)(tu_rng(&x) % 5);
	kvs_radix_attr_init(&ra);
	ra.page_size = 1;
	ra.free_cb = discard;
	st->r = kvs_radix_create(NULL, &ra);
	ck_assert_ptr_nonnull(st->r);
	for (t = 0; t < 3; t++)
		pthread_create(&th[t], NULL, reader, st);
	/* At most 60000 writer steps, and at most 15 s of them (natively the
	 * whole test takes well under a second).  KVSLAB_STRESS_SECONDS=S
	 * runs S seconds instead, without a step limit (a ThreadSanitizer
	 * run of readers against splits, say); ids, never reused, last a few
	 * million steps. */
	steps = secs > 0 ? LONG_MAX : tu_scaled(60000, 2000);
	deadline = tu_seconds() + (secs > 0 ? secs : 15.0);
	/* Room for a last insert and the final check's SEQLEN ids. */
	for (i = 0; i < steps && next < maxid - 2 * SEQLEN; i++) {
		if (i % 256 == 0 && tu_seconds() > deadline)
			break;
		const int32_t *k = st->seqs[tu_rng(&x) % NSEQ];
		size_t n = 1 + tu_rng(&x) % SEQLEN;

		if (tu_rng(&x) % 4 == 0) {
			kvs_radix_evict(st->r, 1 + tu_rng(&x) % 64);
			continue;
		}
		if (tu_rng(&x) % 3 == 0) { /* a splitting match */
			kvs_radix_match(st->r, 0, k, n, locs, NULL);
			continue;
		}
		for (j = 0; j < (int)n; j++) {
			locs[j] = next++;
			atomic_store_explicit(&st->ids[locs[j]], prefix_hash(k, (size_t)j + 1),
					      memory_order_relaxed);
		}
		ck_assert_int_ge(kvs_radix_insert(st->r, 0, k, n, locs, 0, NULL), 0);
	}
	/* Give readers that the scheduler kept off the CPU (a loaded machine,
	 * a sanitizer) a moment to run; this is not a verdict. */
	while (atomic_load(&st->matches) < 1000 && tu_seconds() < deadline + 10.0)
		usleep(1000);
	atomic_store(&st->stop, 1);
	for (t = 0; t < 3; t++)
		pthread_join(th[t], NULL);
	/* The verdict: no reader ever saw a location of another prefix. */
	ck_assert_uint_eq(atomic_load(&st->torn), 0);
	/* And the lock-free read finds what is in the tree, checked here
	 * rather than by counting the readers' hits, which the scheduler
	 * decides. */
	for (j = 0; j < SEQLEN; j++) {
		locs[j] = next++;
		atomic_store_explicit(&st->ids[locs[j]], prefix_hash(st->seqs[0], (size_t)j + 1),
				      memory_order_relaxed);
	}
	ck_assert_int_ge(kvs_radix_insert(st->r, 0, st->seqs[0], SEQLEN, locs, 0, NULL), 0);
	ck_assert_int_eq(kvs_radix_match_ro(st->r, 0, st->seqs[0], SEQLEN, locs), SEQLEN);
	for (j = 0; j < SEQLEN; j++)
		ck_assert_uint_eq(atomic_load(&st->ids[locs[j]]), prefix_hash(st->seqs[0], (size_t)j + 1));
	if (getenv("KVSLAB_TEST_VERBOSE"))
		fprintf(stderr, "stress: %ld writer steps, %llu matches, %llu hits, %d inserted ids\n", i,
			(unsigned long long)atomic_load(&st->matches),
			(unsigned long long)atomic_load(&st->hits), next);
	ck_assert_int_eq(kvs_radix_validate(st->r), 0);
	kvs_radix_destroy(st->r);
	free(st->ids);
	free(st);
}
END_TEST

static Suite *stress_suite(void)
{
	Suite *s = suite_create("radix-stress");
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
