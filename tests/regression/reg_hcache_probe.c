/* SPDX-License-Identifier: MIT */
/*
 * tests/regression/reg_hcache_probe.c - the hashed block cache's
 * open-addressed table where random hashes seldom take it: many hashes of
 * one home line.  Its lines hold five slots; a hash whose home line is
 * full goes to the next line with an empty slot (wrapping past the last),
 * counted in the over of every line it passed, and a probe stops at the
 * first line whose over is 0.  A block's record keeps its slot and its
 * distance from home (255 for that many lines or more, when removal
 * computes the home again from the hash).  So the cases are: a home line
 * full and its hashes spilling over the end of the table into line 0;
 * removals from the middle of a probe sequence, in every position; a
 * probe for an absent hash crossing full lines; new hashes filling the
 * emptied slots; and hashes placed 255 lines and more from home.  After
 * each step kvs_hcache_validate() recomputes every over count and slot
 * from the hashes, and every hash still cached is found, by the writers'
 * kvs_hcache_find() and the readers' kvs_hcache_match_ro() alike.
 *
 * The hashes of one home line are found by computing the cache's own
 * bucket hash (lib/cache/hashcache_int.h), so this program reads
 * internals and links the static library.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "cache/hashcache_int.h"

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hcache_t *hc;
	uint64_t next;			/* hash counter */
};

static void env_open(struct env *e, uint64_t pages)
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
	pa.page_size = 1;
	pa.slab_granules = 1;
	pa.max_tokens = pages;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	e->hc = kvs_hcache_create(e->pool, NULL);
	ck_assert_ptr_nonnull(e->hc);
}

static void env_close(struct env *e)
{
	ck_assert_int_eq(kvs_hcache_reset(e->hc), 0);
	ck_assert_int_eq(kvs_hcache_destroy(e->hc), 0);
	ck_assert_int_eq(kvs_pool_destroy(e->pool), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
}

static void make_hash(uint64_t i, kvs_block_hash_t *h)
{
	uint64_t x = i * 0x9e3779b97f4a7c15ULL + 12345;

	for (int k = 0; k < 4; k++) {
		uint64_t z = (x += 0x9e3779b97f4a7c15ULL);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		z ^= z >> 31;
		memcpy(h->bytes + 8 * k, &z, 8);
	}
	h->len = 32;
}

/* @n fresh hashes whose home line is @line. */
static void homed(struct env *e, uint64_t line, kvs_block_hash_t *h, size_t n)
{
	for (size_t k = 0; k < n; e->next++) {
		make_hash(e->next, &h[k]);
		if (hc_home(e->hc, hc_hash_bucket(&h[k])) == line)
			k++;
	}
}

static uint32_t used_slots(const struct env *e, uint64_t line)
{
	uint32_t n = 0;

	for (int w = 0; w < HC_WAYS; w++)
		n += atomic_load(&e->hc->tbl[line].te[w]) != 0;
	return n;
}

/* Every one of @h[0..n) with @live[k] is found (block @blk[k]), the others
 * not, by the writers and the readers. */
static void check_found(struct env *e, const kvs_block_hash_t *h, const int32_t *blk,
			const bool *live, size_t n)
{
	ck_assert_int_eq(kvs_hcache_validate(e->hc), 0);
	for (size_t k = 0; k < n; k++) {
		int32_t b = kvs_hcache_find(e->hc, &h[k]);

		if (live[k]) {
			ck_assert_int_eq(b, blk[k]);
		} else {
			ck_assert_int_eq(b, -1);
			ck_assert_int_eq(errno, ENOENT);
		}
		ck_assert_int_eq(kvs_hcache_match_ro(e->hc, &h[k], 1, 2), live[k]);
	}
}

/* Cache @n blocks under @h, then free them in the order @order (the
 * eviction order); their ids into @blk. */
static void cache_all(struct env *e, const kvs_block_hash_t *h, int32_t *blk, size_t n,
		      const int *order)
{
	int32_t *q = malloc(n * sizeof(*q));

	ck_assert_int_eq(kvs_hcache_alloc(e->hc, n, blk), 0);
	ck_assert_int_eq(kvs_hcache_cache(e->hc, blk, n, h, NULL, 0, NULL), 0);
	for (size_t k = 0; k < n; k++)
		q[k] = blk[order ? order[k] : (int)k];
	ck_assert_int_eq(kvs_hcache_free(e->hc, q, n), 0);
	free(q);
}

/*
 * Twelve hashes of the last line: five fill it, five spill into line 0
 * (the table wraps), two into line 1.  Evicted one at a time in an order
 * that takes slots from the home line, the middle and the end of the
 * probe; the rest stay found and the over counts fall as they must.
 */
START_TEST(test_spill_and_wrap)
{
	static const int order[3][12] = {
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
		{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0},
		{6, 0, 11, 3, 8, 5, 1, 10, 2, 9, 4, 7},
	};
	kvs_block_hash_t h[12], absent, fresh[12];
	int32_t blk[12], fb[12];
	bool live[12];
	struct env e;
	uint64_t last;

	env_open(&e, 64);
	last = e.hc->lmask;
	ck_assert_uint_ge(last, 3);
	homed(&e, last, h, 12);
	homed(&e, last, &absent, 1);
	cache_all(&e, h, blk, 12, order[_i]);
	for (int k = 0; k < 12; k++)
		live[k] = true;
	ck_assert_uint_eq(used_slots(&e, last), 5);
	ck_assert_uint_eq(used_slots(&e, 0), 5);
	ck_assert_uint_eq(used_slots(&e, 1), 2);
	ck_assert_uint_eq(atomic_load(&e.hc->tbl[last].over), 7);
	ck_assert_uint_eq(atomic_load(&e.hc->tbl[0].over), 2);
	ck_assert_uint_eq(atomic_load(&e.hc->tbl[1].over), 0);
	check_found(&e, h, blk, live, 12);
	/* An absent hash of the same home: its probe crosses two full
	 * lines and ends at line 1. */
	ck_assert_int_eq(kvs_hcache_find(e.hc, &absent), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, &absent, 1, 2), 0);
	for (int k = 0; k < 12; k++) {
		ck_assert_int_eq(kvs_hcache_evict(e.hc, 1), 1);
		live[order[_i][k]] = false;
		check_found(&e, h, blk, live, 12);
	}
	for (uint64_t l = 0; l <= last; l++) {
		ck_assert_uint_eq(used_slots(&e, l), 0);
		ck_assert_uint_eq(atomic_load(&e.hc->tbl[l].over), 0);
	}
	/* Fresh hashes of the same home take the emptied slots: the home
	 * line first. */
	homed(&e, last, fresh, 12);
	cache_all(&e, fresh, fb, 6, NULL);
	ck_assert_uint_eq(used_slots(&e, last), 5);
	ck_assert_uint_eq(used_slots(&e, 0), 1);
	ck_assert_uint_eq(atomic_load(&e.hc->tbl[last].over), 1);
	for (int k = 0; k < 6; k++)
		live[k] = true;
	check_found(&e, fresh, fb, live, 6);
	env_close(&e);
}
END_TEST

/*
 * Hashes placed 255 lines and more from home: 5 * 257 + 2 hashes of one
 * home fill it and the 256 lines after it, the last ones 256 and 257 lines
 * away (their records say 255, and removal computes the home from the
 * hash).  Evicting them, and ones from the middle of the run, keeps every
 * over count right.
 */
START_TEST(test_far_displacement)
{
	enum { N = 5 * 257 + 2 };
	kvs_block_hash_t *h = malloc(N * sizeof(*h));
	int32_t *blk = malloc(N * sizeof(*blk));
	int *order = malloc(N * sizeof(*order));
	bool *live = malloc(N * sizeof(*live));
	static const int first[] = { N - 1, N - 6, 5 * 255, 640, 3, N - 2 };
	const int nfirst = (int)(sizeof(first) / sizeof(first[0]));
	struct env e;
	int n = 0;

	env_open(&e, 4096);
	ck_assert_uint_ge(e.hc->lmask + 1, 1024);
	homed(&e, 7, h, N);
	/* The queue's order: the chosen ones first, then the others. */
	for (int k = 0; k < nfirst; k++)
		order[n++] = first[k];
	for (int k = 0; k < N; k++) {
		bool chosen = false;

		for (int j = 0; j < nfirst; j++)
			chosen |= first[j] == k;
		if (!chosen)
			order[n++] = k;
	}
	cache_all(&e, h, blk, N, order);
	for (int k = 0; k < N; k++)
		live[k] = true;
	ck_assert_uint_eq(e.hc->b[blk[N - 1]].disp, 255);
	ck_assert_uint_eq(e.hc->b[blk[N - 6]].disp, 255);
	ck_assert_uint_eq(e.hc->b[blk[5 * 255 - 1]].disp, 254);
	ck_assert_uint_eq(atomic_load(&e.hc->tbl[7].over), N - 5);
	check_found(&e, h, blk, live, N);
	for (int k = 0; k < nfirst; k++) {
		ck_assert_int_eq(kvs_hcache_evict(e.hc, 1), 1);
		live[first[k]] = false;
		check_found(&e, h, blk, live, N);
	}
	ck_assert_uint_eq(atomic_load(&e.hc->tbl[7].over), N - 5 - (nfirst - 1));
	free(h);
	free(blk);
	free(order);
	free(live);
	env_close(&e);
}
END_TEST

static Suite *reg_suite(void)
{
	Suite *s = suite_create("reg_hcache_probe");
	TCase *tc = tcase_create("probe");

	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_spill_and_wrap, 0, 3);
	tcase_add_test(tc, test_far_displacement);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(reg_suite());
}
