/* SPDX-License-Identifier: MIT */
/*
 * tests/regression/reg_compact_race.c - compaction against the calls that
 * may run beside it (issue 22).  kvs_pool_compact() used to plan under the
 * cache's lock, drop it, copy, then move reference counts with nothing
 * pinning the pages it moved: an eviction in that window freed a page the
 * commit then freed again (kvs_slab_validate() failing with EUCLEAN, and
 * kvs_pool_available() promising pages no allocation could get), and a
 * reference taken in the window was carried to the new page while its
 * holder kept naming the old, freed one.
 *
 * The window is reached deterministically: this program links the static
 * library and sets the compaction's test point (lib/elastic/elastic_int.h),
 * called after the copies and before the commit with no lock held.
 *
 * Geometry as tests/elastic/test_elastic.c's: a slab is 4 one-token pages.
 * Slab A (pages 0-3) and C (8-11) hold three pages of the caller each and a
 * free page; slab B (4-7) holds one cached page, 4 (key 201).  B is the
 * only source: compaction moves page 4 into A or C.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "elastic/elastic_int.h"

/* The cuda driver's granularity (tu_granularity()), 4 KiB with the double. */
#define GRAN tu_granularity(4096)
#define PPS 4
#define NPAGES 16

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_radix_t *r;
	kvs_slab_t *s;
	int32_t mine[6];		/* the caller's pages in A and C */
	long hook_evicted;
	int hook_calls;
};

/* The pool (32 pages, none allocated) and an empty radix cache. */
static void env_pool(struct env *e)
{
	kvs_pool_attr_t pa;

	memset(e, 0, sizeof(*e));
	e->d = tu_open_gran(0, GRAN, 0, 0);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 4;
	pa.model.head_dim = 128 * (uint32_t)(GRAN / 4096); /* PPS tokens a slab */
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 1;
	pa.max_tokens = 32;
	pa.magazine = 0;
	pa.chunk_pool = 0;
	pa.min_empty = 0;
	pa.max_empty = 0;
	pa.decay_ms = 0;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	e->s = kvs_pool_slab(e->pool);
	ck_assert_uint_eq(kvs_slab_pages_per_slab(e->s), PPS);
	e->r = kvs_radix_create(e->pool, NULL);
	ck_assert_ptr_nonnull(e->r);
}

static void env_open(struct env *e)
{
	static const int32_t mine[6] = {0, 1, 2, 8, 9, 10};
	int32_t locs[NPAGES], unused[NPAGES - 7], key = 201, loc = 4;
	int i, n = 0;

	env_pool(e);
	memcpy(e->mine, mine, sizeof(mine));
	ck_assert_int_eq(kvs_pool_alloc(e->pool, NPAGES, locs), 0);
	for (i = 0; i < NPAGES; i++)
		ck_assert_int_eq(locs[i], i);
	ck_assert_int_eq(kvs_radix_insert(e->r, 0, &key, 1, &loc, 0, NULL), 0);
	for (i = 0; i < NPAGES; i++)
		if (i != 4 && !(i <= 2 || (i >= 8 && i <= 10)))
			unused[n++] = i;
	ck_assert_int_eq(n, NPAGES - 7);
	ck_assert_int_eq(kvs_pool_free(e->pool, (size_t)n, unused), 0);
}

/* Everything given back: every page of the budget can be allocated, the
 * allocator and the tree check clean, and nothing is left over. */
static void env_close(struct env *e)
{
	uint64_t avail;
	int32_t *all;

	ck_assert_int_eq(kvs_slab_validate(e->s), 0);
	ck_assert_int_eq(kvs_radix_validate(e->r), 0);
	if (e->mine[0] >= 0)
		ck_assert_int_eq(kvs_pool_free(e->pool, 6, e->mine), 0);
	ck_assert_int_ge(kvs_radix_evict(e->r, 1000), 0);
	ck_assert_uint_eq(kvs_radix_tokens(e->r), 0);
	avail = kvs_pool_available(e->pool);
	ck_assert_uint_eq(avail, kvs_pool_capacity(e->pool));
	all = malloc(avail * sizeof(*all));
	ck_assert_ptr_nonnull(all);
	ck_assert_int_eq(kvs_pool_alloc(e->pool, avail, all), 0);
	ck_assert_int_eq(kvs_pool_free(e->pool, avail, all), 0);
	free(all);
	ck_assert_int_eq(kvs_slab_validate(e->s), 0);
	kvs_radix_destroy(e->r);
	ck_assert_uint_eq(kvs_slab_stat(e->s, KVS_SLAB_STAT_objects), 0);
	ck_assert_int_eq(kvs_pool_destroy(e->pool), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
	kvsi_compact_test_hook = NULL;
	kvsi_compact_test_arg = NULL;
}

static void hook_evict(void *arg, int stage)
{
	struct env *e = arg;

	if (stage != KVSI_COMPACT_COPIED)
		return;
	e->hook_calls++;
	e->hook_evicted = kvs_radix_evict(e->r, 1000);
}

/*
 * Another thread's kvs_radix_evict() (MT-Safe) between the copy and the
 * commit.  The page being moved must not be evicted from under the move:
 * the cache's node is pinned until the commit, so the eviction finds
 * nothing to take, the page moves, and the cache names its new home.
 */
START_TEST(test_evict_during_compact)
{
	struct env e;
	int32_t key = 201, loc = -1;

	env_open(&e);
	kvsi_compact_test_arg = &e;
	kvsi_compact_test_hook = hook_evict;
	ck_assert_int_eq(kvs_pool_compact(e.pool, NULL, e.r, 16), 1);
	ck_assert_int_eq(e.hook_calls, 1);
	ck_assert_int_eq(e.hook_evicted, 0);
	ck_assert_int_eq(kvs_slab_validate(e.s), 0);
	ck_assert_int_eq(kvs_radix_validate(e.r), 0);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, &key, 1, &loc, NULL), 1);
	ck_assert(loc == 3 || loc == 11);
	ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)loc), 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 4), 0);
	/* Slab B emptied, as planned. */
	ck_assert_int_eq(kvs_slab_shrink(e.s), 0);
	ck_assert_int_eq(kvs_slab_page_mapped(e.s, 4), 0);
	env_close(&e);
}
END_TEST

static void hook_ref(void *arg, int stage)
{
	struct env *e = arg;
	int32_t loc = 4;

	if (stage != KVSI_COMPACT_COPIED)
		return;
	e->hook_calls++;
	ck_assert_int_eq(kvs_pool_ref(e->pool, 1, &loc), 0);
}

/*
 * A reference taken in the window by a holder the call cannot rewrite (an
 * engine's copy of location 4): the page's count changed since the plan, so
 * it must not move; it stays where it is with both references, and the
 * destination page goes back.
 */
START_TEST(test_ref_during_compact)
{
	struct env e;
	int32_t key = 201, loc = -1, four = 4;

	env_open(&e);
	kvsi_compact_test_arg = &e;
	kvsi_compact_test_hook = hook_ref;
	ck_assert_int_eq(kvs_pool_compact(e.pool, NULL, e.r, 16), 0);
	ck_assert_int_eq(e.hook_calls, 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 4), 2);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 3), 0);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 11), 0);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, &key, 1, &loc, NULL), 1);
	ck_assert_int_eq(loc, 4);
	ck_assert_int_eq(kvs_slab_validate(e.s), 0);
	ck_assert_int_eq(kvs_radix_validate(e.r), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &four), 0);
	env_close(&e);
}
END_TEST

static void hook_evict_realloc(void *arg, int stage)
{
	struct env *e = arg;
	int32_t got[NPAGES * 2];
	size_t n = 0;

	if (stage != KVSI_COMPACT_PLANNED)
		return;
	e->hook_calls++;
	e->hook_evicted = kvs_radix_evict(e->r, 1000);
	/* Allocate until page 4 comes back, then keep only it. */
	while (n < NPAGES * 2 && kvs_pool_alloc(e->pool, 1, &got[n]) == 0 && got[n++] != 4)
		;
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(got[n - 1], 4);
	if (n > 1)
		ck_assert_int_eq(kvs_pool_free(e->pool, n - 1, got), 0);
}

/*
 * Between the plan and the isolation, the cached page 4 is evicted and
 * allocated again, to a holder the call cannot see, with the same count
 * as planned (1).  The count alone cannot tell; the holders can: after
 * isolating, no cache holds page 4 any more, so it must not move.
 */
START_TEST(test_evict_realloc_before_isolate)
{
	struct env e;
	int32_t four = 4;

	env_open(&e);
	kvsi_compact_test_arg = &e;
	kvsi_compact_test_hook = hook_evict_realloc;
	ck_assert_int_eq(kvs_pool_compact(e.pool, NULL, e.r, 16), 0);
	ck_assert_int_eq(e.hook_calls, 1);
	ck_assert_int_eq(e.hook_evicted, 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 4), 1);
	ck_assert_int_eq(kvs_slab_validate(e.s), 0);
	ck_assert_int_eq(kvs_radix_validate(e.r), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &four), 0);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------- the hashed block cache */

struct henv {
	struct env e;			/* its radix cache stays empty */
	kvs_hcache_t *hc;
	kvs_block_hash_t h4;
	int32_t hit;
	ssize_t evicted;
	int hook_calls;
};

/* Blocks 0-2 and 8-10 in use, block 4 a free cached block (hash h4). */
static void henv_open(struct henv *h)
{
	static const int32_t used[6] = {0, 1, 2, 8, 9, 10};
	int32_t b[NPAGES], spare[NPAGES], four = 4;
	int i, n = 0;

	memset(h, 0, sizeof(*h));
	env_pool(&h->e);
	memcpy(h->e.mine, used, sizeof(used));
	h->hc = kvs_hcache_create(h->e.pool, NULL);
	ck_assert_ptr_nonnull(h->hc);
	ck_assert_int_eq(kvs_hcache_alloc(h->hc, NPAGES, b), 0);
	for (i = 0; i < NPAGES; i++)
		ck_assert_int_eq(b[i], i);
	h->h4.len = 32;
	h->h4.bytes[0] = 4;
	ck_assert_int_eq(kvs_hcache_cache(h->hc, &four, 1, &h->h4, NULL, 0, NULL), 0);
	for (i = 0; i < NPAGES; i++)
		if (i != 4 && !(i <= 2 || (i >= 8 && i <= 10)))
			spare[n++] = i;
	ck_assert_int_eq(kvs_hcache_free(h->hc, spare, (size_t)n), 0);
	ck_assert_int_eq(kvs_hcache_free(h->hc, &four, 1), 0);
}

static void henv_close(struct henv *h)
{
	ck_assert_int_eq(kvs_hcache_validate(h->hc), 0);
	ck_assert_int_eq(kvs_hcache_free(h->hc, h->e.mine, 6), 0);
	ck_assert_int_eq(kvs_hcache_destroy(h->hc), 0);
	h->e.mine[0] = -1; /* the cache gave them back */
	env_close(&h->e);
}

static void hook_hit(void *arg, int stage)
{
	struct henv *h = arg;

	if (stage != KVSI_COMPACT_COPIED)
		return;
	h->hook_calls++;
	ck_assert_int_eq(kvs_hcache_lookup(h->hc, &h->h4, 1, 2, &h->hit), 1);
}

/*
 * A hit on the free block being moved, between the copy and the commit:
 * the block is in use from then on, its id in the engine's block table,
 * so it must not move; it stays with its hash, and the destination goes
 * back.
 */
START_TEST(test_hcache_hit_during_compact)
{
	struct henv h;
	uint32_t ref = 0;

	henv_open(&h);
	kvsi_compact_test_arg = &h;
	kvsi_compact_test_hook = hook_hit;
	ck_assert_int_eq(kvs_pool_compact(h.e.pool, NULL, NULL, 16), 0);
	kvsi_compact_test_hook = NULL;
	ck_assert_int_eq(h.hook_calls, 1);
	ck_assert_int_eq(h.hit, 4);
	ck_assert_int_eq(kvs_hcache_block(h.hc, 4, &ref, NULL), 1);
	ck_assert_uint_eq(ref, 1);
	ck_assert_int_eq(kvs_slab_refcount(h.e.s, 4), 1);
	ck_assert_int_eq(kvs_slab_refcount(h.e.s, 3), 0);
	ck_assert_int_eq(kvs_slab_refcount(h.e.s, 11), 0);
	ck_assert_int_eq(kvs_slab_validate(h.e.s), 0);
	ck_assert_int_eq(kvs_hcache_validate(h.hc), 0);
	ck_assert_int_eq(kvs_hcache_free(h.hc, &h.hit, 1), 0);
	/* And with no hit, the same block moves. */
	ck_assert_int_eq(kvs_pool_compact(h.e.pool, NULL, NULL, 16), 1);
	ck_assert_int_eq(kvs_hcache_block(h.hc, 4, NULL, NULL), 0);
	henv_close(&h);
}
END_TEST

static void hook_hit_free_evict(void *arg, int stage)
{
	struct henv *h = arg;

	if (stage != KVSI_COMPACT_COPIED)
		return;
	h->hook_calls++;
	ck_assert_int_eq(kvs_hcache_lookup(h->hc, &h->h4, 1, 2, &h->hit), 1);
	ck_assert_int_eq(kvs_hcache_free(h->hc, &h->hit, 1), 0);
	h->evicted = kvs_hcache_evict(h->hc, SIZE_MAX);
}

/*
 * A hit on the block being moved, then its free, then an eviction of the
 * whole queue, all in the window: the block went back to the queue, but
 * its page must not change hands before the compaction ends (it used to
 * leave isolation at the hit, be evicted here, and its page could be
 * allocated to someone else and moved from under them).  It stays out of
 * eviction and, free again at the commit, it moves.
 */
START_TEST(test_hcache_hit_free_evict_during_compact)
{
	struct henv h;
	int32_t blk = -1;

	henv_open(&h);
	kvsi_compact_test_arg = &h;
	kvsi_compact_test_hook = hook_hit_free_evict;
	ck_assert_int_eq(kvs_pool_compact(h.e.pool, NULL, NULL, 16), 1);
	kvsi_compact_test_hook = NULL;
	ck_assert_int_eq(h.hook_calls, 1);
	ck_assert_int_eq(h.evicted, 0);
	ck_assert_int_eq(kvs_hcache_free_queue(h.hc, &blk, 1), 1);
	ck_assert(blk == 3 || blk == 11);
	ck_assert_int_eq(kvs_hcache_match_ro(h.hc, &h.h4, 1, 2), 1);
	ck_assert_int_eq(kvs_slab_refcount(h.e.s, 4), 0);
	ck_assert_int_eq(kvs_slab_validate(h.e.s), 0);
	ck_assert_int_eq(kvs_hcache_validate(h.hc), 0);
	henv_close(&h);
}
END_TEST

static Suite *reg_suite(void)
{
	Suite *s = suite_create("reg_compact_race");
	TCase *tc = tcase_create("window");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_evict_during_compact);
	tcase_add_test(tc, test_ref_during_compact);
	tcase_add_test(tc, test_evict_realloc_before_isolate);
	tcase_add_test(tc, test_hcache_hit_during_compact);
	tcase_add_test(tc, test_hcache_hit_free_evict_during_compact);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* Unless the caller chose one (make check-gpu's plumbing check). */
	setenv("KVSLAB_DOUBLE_GRANULARITY", "4096", 0);
	(void)GRAN;
	return tu_run(reg_suite());
}
