/* SPDX-License-Identifier: MIT */
/*
 * tests/elastic/test_elastic.c - elastic KV memory: a limit lowered and raised
 * at run time (kvs_pool_set_limit(3)), slab-aware eviction against plain
 * LRU in hand-checked cases, slab-aware allocation, and compaction
 * (kvs_pool_compact(3)): bytes and references.
 *
 * Geometry of every case: one layer, 4 KV heads of 128 two-byte elements,
 * so a token takes 1024 bytes in K and 1024 in V; on a 4 KiB granule a
 * slab is 4 pages of one token, 8 KiB in all buffers.  No per-thread
 * cache, no chunk pool, no empty slab kept: every byte the tests count is
 * a mapped slab.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* The cuda driver's granularity (tu_granularity()), 4 KiB with the double. */
#define GRAN tu_granularity(4096)
#define SLAB_BYTES (2 * GRAN)	/* PPS pages of K and V: 8 KiB at 4 KiB granules */
#define PPS 4

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_radix_t *r;
	kvs_slab_t *s;
};

/* The env over driver @d (its own from then on). */
static void env_open_on(struct env *e, kvs_drv_t *d, uint64_t tokens, int slab_aware)
{
	kvs_pool_attr_t pa;
	kvs_radix_attr_t ra;

	memset(e, 0, sizeof(*e));
	e->d = d;
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 4;
	pa.model.head_dim = 128 * (uint32_t)(GRAN / 4096); /* PPS tokens a slab */
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 1;
	pa.max_tokens = tokens;
	pa.magazine = 0;
	pa.chunk_pool = 0;
	pa.min_empty = 0;
	pa.max_empty = 0;
	pa.decay_ms = 0;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	e->s = kvs_pool_slab(e->pool);
	ck_assert_uint_eq(kvs_slab_pages_per_slab(e->s), PPS);
	kvs_radix_attr_init(&ra);
	ra.slab_aware = (uint32_t)slab_aware;
	e->r = kvs_radix_create(e->pool, &ra);
	ck_assert_ptr_nonnull(e->r);
}

static void env_open(struct env *e, int be, uint64_t tokens, int slab_aware)
{
	env_open_on(e, tu_open_gran(be, GRAN, 0, 0), tokens, slab_aware);
}

static void env_close(struct env *e)
{
	ck_assert_int_eq(kvs_radix_validate(e->r), 0);
	ck_assert_int_eq(kvs_slab_validate(e->s), 0);
	kvs_radix_destroy(e->r);
	ck_assert_uint_eq(kvs_slab_stat(e->s, KVS_SLAB_STAT_objects), 0);
	ck_assert_int_eq(kvs_pool_destroy(e->pool), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
}

static uint64_t st(struct env *e, enum kvs_slab_stat i)
{
	return kvs_slab_stat(e->s, i);
}

/* Cache one page at location @loc under the one-token key {@tok}. */
static void cache_page(struct env *e, int32_t tok, int32_t loc)
{
	ck_assert_int_eq(kvs_radix_insert(e->r, 0, &tok, 1, &loc, 0, NULL), 0);
}

/* Touch key {@tok} (an LRU access). */
static void touch(struct env *e, int32_t tok)
{
	int32_t loc;

	ck_assert_int_eq(kvs_radix_match(e->r, 0, &tok, 1, &loc, NULL), 1);
}

/*
 * The hand-checked case.  Pages 0-3 fill slab A, pages 4-7 slab B; each is
 * cached as a one-page leaf, touched in the order 0 4 1 5 2 6 3 7, so LRU's
 * order alternates between the slabs.  Evicting 4 tokens:
 *  - LRU takes 0 4 1 5: A and B both keep 2 live pages: 2 partial slabs,
 *    16 KiB mapped for 4 live pages (a packed floor of one slab, 8 KiB):
 *    2.0x the floor;
 *  - slab-aware takes 0 (a tie everywhere: the policy's first), then the
 *    oldest of A each time (3, then 2, then 1 other live pages left in A
 *    against 3 in B): 0 1 2 3.  A empties and goes back: 1 full slab, 8 KiB
 *    mapped, 1.0x the floor.
 */
static void lru_vs_aware(int be, int aware, uint64_t *mapped, uint64_t *partial)
{
	static const int32_t order[8] = {0, 4, 1, 5, 2, 6, 3, 7};
	struct env e;
	int32_t locs[8];
	int i;

	env_open(&e, be, 32, aware);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(locs[i], i); /* slab A then slab B, lowest first */
	for (i = 0; i < 8; i++)
		cache_page(&e, 100 + i, locs[i]);
	for (i = 0; i < 8; i++)
		touch(&e, 100 + order[i]);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_full), 2);
	ck_assert_int_eq(kvs_radix_evict(e.r, 4), 4);
	ck_assert_int_ge(kvs_slab_reclaim(e.s), 0);
	ck_assert_int_eq(kvs_slab_shrink(e.s), 0);
	*mapped = st(&e, KVS_SLAB_STAT_bytes_mapped);
	*partial = st(&e, KVS_SLAB_STAT_slabs_partial);
	if (aware) {
		/* Pages 0-3 are gone, 4-7 still cached. */
		for (i = 0; i < 4; i++) {
			ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)i), 0);
			ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)(4 + i)), 1);
		}
		ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_full), 1);
		ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_partial), 0);
		ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_empty), 0);
	} else {
		/* 0 4 1 5 gone; 2 3 6 7 stay. */
		static const int gone[8] = {1, 1, 0, 0, 1, 1, 0, 0};

		for (i = 0; i < 8; i++)
			ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)i), gone[i] ? 0 : 1);
		ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_full), 0);
		ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_partial), 2);
		ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_empty), 0);
	}
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_objects), 4);
	env_close(&e);
}

START_TEST(test_slab_aware_empties_a_slab)
{
	uint64_t m_lru, m_aware, p_lru, p_aware;

	lru_vs_aware(_i, 0, &m_lru, &p_lru);
	lru_vs_aware(_i, 1, &m_aware, &p_aware);
	ck_assert_uint_eq(m_lru, 2 * SLAB_BYTES);	/* 2.0x the packed floor */
	ck_assert_uint_eq(p_lru, 2);
	ck_assert_uint_eq(m_aware, SLAB_BYTES);		/* 1.0x: the floor */
	ck_assert_uint_eq(p_aware, 0);
	fprintf(stderr, "elastic[%s]: 4 live pages, packed floor %zu B; LRU %llu B (%.2fx), "
		"slab-aware %llu B (%.2fx)\n", tu_backends[_i], SLAB_BYTES,
		(unsigned long long)m_lru, (double)m_lru / SLAB_BYTES,
		(unsigned long long)m_aware, (double)m_aware / SLAB_BYTES);
}
END_TEST

/*
 * Slab-aware eviction passes over leaves whose pages a running request
 * shares (evicting them frees nothing) and weighs the rest: slab A holds a
 * request's page 0 and cached 1 2 3; slab B cached 4 5 6 7; LRU order
 * 0 1 4 5 2 6 3 7 (page 0's leaf is cached and shared).  Evicting 4 tokens
 * slab-aware takes 4 (tie with 1 at 3 others, but 0 and 1 come first in
 * LRU: 0 frees nothing, 1 leaves 2 others in A against 3 in B for 4): 1,
 * then 2, 3 (A: 1 other, the request's page), then the best of B.  A keeps
 * the request's page alone; B keeps 3.  Plain LRU would take 0 1 4 5.
 */
START_TEST(test_slab_aware_skips_shared)
{
	static const int32_t order[8] = {0, 1, 4, 5, 2, 6, 3, 7};
	struct env e;
	int32_t locs[8];
	int i;

	env_open(&e, _i, 32, 1);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	ck_assert_int_eq(kvs_pool_ref(e.pool, 1, &locs[0]), 0); /* the request's */
	for (i = 0; i < 8; i++)
		cache_page(&e, 100 + i, locs[i]);
	for (i = 0; i < 8; i++)
		touch(&e, 100 + order[i]);
	ck_assert_int_eq(kvs_radix_evict(e.r, 3), 3);
	/* 1 2 3 went (and the shared leaf 0 stayed: evicting it frees nothing) */
	ck_assert_int_eq(kvs_slab_refcount(e.s, 0), 2);
	for (i = 1; i < 4; i++)
		ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)i), 0);
	for (i = 4; i < 8; i++)
		ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)i), 1);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &locs[0]), 0);
	env_close(&e);
}
END_TEST

/*
 * The weights slab-aware eviction keeps on a leaf follow the pages'
 * sharing: slabs A = 0-3, B = 4-7, one cached page a leaf, LRU order
 * 0 1 4 5 2 6 3 7.  The first eviction weighs every leaf (a tie: 0 goes).
 * Then a request takes a second reference to page 1: leaf 1 frees
 * nothing now, so the next eviction takes 2 (2 others left in A, against
 * 3 in B), not 1 as its weights from before would say.  The request lets
 * go: leaf 1 frees its page again and goes next (1 other in A), before 3.
 */
START_TEST(test_slab_aware_follows_sharing)
{
	static const int32_t order[8] = {0, 1, 4, 5, 2, 6, 3, 7};
	struct env e;
	int32_t locs[8];
	int i;

	env_open(&e, _i, 32, 1);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	for (i = 0; i < 8; i++)
		cache_page(&e, 100 + i, locs[i]);
	for (i = 0; i < 8; i++)
		touch(&e, 100 + order[i]);
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 0), 0);
	ck_assert_int_eq(kvs_pool_ref(e.pool, 1, &locs[1]), 0);
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 1), 2);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 2), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &locs[1]), 0);
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 1), 0);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 3), 1);
	for (i = 4; i < 8; i++)
		ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)i), 1);
	env_close(&e);
}
END_TEST

/*
 * A leaf of a whole slab (pages 0-3 of A, one run, counted four at a
 * time) whose middle pages 1 and 2 a request shares: its eviction frees 2
 * pages and leaves 2 live in A.  Against it, one-page leaves of slab B.
 * With B half full (pages 4 and 5 cached, 6 and 7 free) leaf 4 leaves 1
 * live page and goes first; with B full (4-7 cached) it leaves 3, and the
 * big leaf goes first.  Counting the shared pages as freeable would take
 * the big leaf in both; not counting any, in neither.
 */
static void whole_slab_leaf(int be, int b_full)
{
	static const int32_t key[4] = {200, 201, 202, 203};
	struct env e;
	int32_t locs[8];
	int i;

	env_open(&e, be, 32, 1);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(locs[i], i);
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, key, 4, locs, 0, NULL), 0);
	ck_assert_int_eq(kvs_pool_ref(e.pool, 2, &locs[1]), 0);
	for (i = 4; i < 8; i++) {
		if (i < 6 || b_full)
			cache_page(&e, 300 + i, locs[i]);
		else
			ck_assert_int_eq(kvs_pool_free(e.pool, 1, &locs[i]), 0);
	}
	/* LRU order: the big leaf, 304, 305, ... */
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), b_full ? 4 : 1);
	if (b_full) {
		static const int want[8] = {0, 1, 1, 0, 1, 1, 1, 1};

		for (i = 0; i < 8; i++)
			ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)i), want[i]);
	} else {
		static const int want[6] = {1, 2, 2, 1, 0, 1};

		for (i = 0; i < 6; i++)
			ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)i), want[i]);
	}
	ck_assert_int_eq(kvs_pool_free(e.pool, 2, &locs[1]), 0);
	env_close(&e);
}

START_TEST(test_slab_aware_whole_slab_leaf)
{
	whole_slab_leaf(_i, 0);
	whole_slab_leaf(_i, 1);
}
END_TEST

/* Slab-aware allocation: pages go to the fullest partial slab first. */
START_TEST(test_alloc_fullest_first)
{
	struct env e;
	int32_t locs[12], a[2];
	int32_t drop[5] = {0, 1, 2, 4, 9};

	env_open(&e, _i, 32, 0);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 12, locs), 0); /* 3 full slabs */
	/* A keeps 1 page, B 3, C 3. */
	ck_assert_int_eq(kvs_pool_free(e.pool, 3, drop), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &drop[3]), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &drop[4]), 0);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_partial), 3);
	/* Two pages: one each into B and C (the fullest), not into A. */
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 1, &a[0]), 0);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 1, &a[1]), 0);
	ck_assert_int_ge(a[0], 4);
	ck_assert_int_ge(a[1], 4);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_full), 2);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_partial), 1);
	ck_assert_int_eq(kvs_pool_free(e.pool, 2, a), 0);
	for (int i = 0; i < 12; i++)
		if (i != 0 && i != 1 && i != 2 && i != 4 && i != 9)
			ck_assert_int_eq(kvs_pool_free(e.pool, 1, &locs[i]), 0);
	env_close(&e);
}
END_TEST

/*
 * Lowering the limit.  8 slabs (32 pages): a request holds pages 0 and 5
 * (slabs A and B); the cache holds the other 30 pages, one leaf per page,
 * in slabs A..H.  Mapped: 8 slabs, 64 KiB.  Below 2 slabs the limit is
 * refused (A and B cannot empty).  Lowered to 3 slabs (24 KiB): 5 slabs
 * must go, all from C..H (4 cached pages each, equally cheap): 20 tokens
 * evicted, no more; A and B keep their cached pages.  The report's
 * bytes_returned is mapped before - after, and mapped after <= limit.
 */
START_TEST(test_limit_lower_raise)
{
	struct env e;
	int32_t locs[32], extra[4], run[2];
	kvs_limit_report_t rep;
	uint64_t before, after;
	int i, pinned_slab = 0;

	env_open(&e, _i, 32, 0);
	ck_assert_uint_eq(kvs_pool_limit(e.pool), 8 * SLAB_BYTES); /* the reservation */
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 32, locs), 0);
	run[0] = locs[0];
	run[1] = locs[5];
	for (i = 0; i < 32; i++)
		if (i != 0 && i != 5)
			cache_page(&e, 100 + i, locs[i]);
	before = st(&e, KVS_SLAB_STAT_bytes_mapped);
	ck_assert_uint_eq(before, 8 * SLAB_BYTES);

	/* Below the running requests' two slabs: ENOMEM, nothing changes. */
	errno = 0;
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 2 * SLAB_BYTES - 1, e.r, &rep), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(rep.floor_bytes, 2 * SLAB_BYTES);
	ck_assert_uint_eq(rep.packed_bytes, SLAB_BYTES);
	ck_assert_uint_eq(rep.limit, 8 * SLAB_BYTES);
	ck_assert_uint_eq(rep.bytes_returned, 0);
	ck_assert_uint_eq(rep.evicted_tokens, 0);
	ck_assert_uint_eq(kvs_pool_limit(e.pool), 8 * SLAB_BYTES);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 30);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), before);

	/* To 3 slabs: 5 unpinned slabs of 4 cached pages empty, 20 tokens. */
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 3 * SLAB_BYTES, e.r, &rep), 0);
	after = st(&e, KVS_SLAB_STAT_bytes_mapped);
	ck_assert_uint_le(after, 3 * SLAB_BYTES);
	ck_assert_uint_eq(after, 3 * SLAB_BYTES);
	ck_assert_uint_eq(rep.bytes_returned, before - after);
	ck_assert_uint_eq(rep.bytes_mapped, after);
	ck_assert_uint_eq(rep.limit, 3 * SLAB_BYTES);
	ck_assert_uint_eq(rep.evicted_tokens, 20);
	ck_assert_uint_eq(rep.slabs_unmapped, 5);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 10);
	ck_assert_uint_eq(kvs_pool_limit(e.pool), 3 * SLAB_BYTES);
	/* Running requests' pages untouched; slabs A and B still mapped. */
	ck_assert_int_eq(kvs_slab_refcount(e.s, 0), 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 5), 1);
	ck_assert_int_eq(kvs_slab_page_mapped(e.s, 0), 1);
	ck_assert_int_eq(kvs_slab_page_mapped(e.s, 5), 1);
	for (i = 8; i < 32; i += PPS)
		pinned_slab += kvs_slab_page_mapped(e.s, (uint32_t)i);
	ck_assert_int_eq(pinned_slab, 1);	/* one of C..H kept */
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_full), 3);

	/* Nothing free and no room: allocation fails past the limit. */
	ck_assert_uint_eq(kvs_pool_available(e.pool), 0);
	errno = 0;
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 1, extra), -1);
	ck_assert_int_eq(errno, ENOMEM);

	/* Raised again: allocation maps again. */
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 5 * SLAB_BYTES, e.r, &rep), 0);
	ck_assert_uint_eq(rep.bytes_returned, 0);
	ck_assert_uint_eq(rep.evicted_tokens, 0);
	ck_assert_uint_eq(kvs_pool_limit(e.pool), 5 * SLAB_BYTES);
	ck_assert_uint_eq(kvs_pool_available(e.pool), 2 * PPS);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 4, extra), 0);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 4 * SLAB_BYTES);
	ck_assert_int_eq(kvs_pool_free(e.pool, 4, extra), 0);
	/* Past the reservation: clamped to it. */
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, SIZE_MAX, NULL, NULL), 0);
	ck_assert_uint_eq(kvs_pool_limit(e.pool), 8 * SLAB_BYTES);

	ck_assert_int_eq(kvs_pool_free(e.pool, 2, run), 0);
	env_close(&e);
}
END_TEST

/* Without a cache, only empty slabs can go: the rest is the floor.  With
 * nothing held, a limit of 0 gives everything back. */
START_TEST(test_limit_no_cache)
{
	struct env e;
	int32_t locs[16];
	kvs_limit_report_t rep;

	env_open(&e, _i, 32, 0);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 16, locs), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 8, locs + 8), 0); /* C, D empty */
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 4 * SLAB_BYTES);
	errno = 0;
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, SLAB_BYTES, NULL, &rep), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(rep.floor_bytes, 2 * SLAB_BYTES);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 4 * SLAB_BYTES);
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 2 * SLAB_BYTES, NULL, &rep), 0);
	ck_assert_uint_eq(rep.bytes_returned, 2 * SLAB_BYTES);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 2 * SLAB_BYTES);
	ck_assert_int_eq(kvs_pool_free(e.pool, 8, locs), 0);
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 0, NULL, &rep), 0);
	ck_assert_uint_eq(rep.bytes_returned, 2 * SLAB_BYTES);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 0);
	ck_assert_uint_eq(kvs_pool_available(e.pool), 0);
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 8 * SLAB_BYTES, NULL, &rep), 0);
	ck_assert_uint_eq(kvs_pool_available(e.pool), 32);
	env_close(&e);
}
END_TEST

/* A limit of 0, as kvs_pool_set_limit(3) states it: with a pinned page it
 * is a limit below the floor (ENOMEM, nothing given back, nothing evicted,
 * the old limit in force); with nothing pinned every slab goes back, the
 * cache's unlocked pages with them, and nothing can be allocated until the
 * limit is raised. */
START_TEST(test_limit_zero)
{
	struct env e;
	int32_t locs[8], one;
	kvs_limit_report_t rep;
	size_t lim;

	env_open(&e, _i, 32, 0);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	cache_page(&e, 1, locs[4]); /* an unlocked cached page */
	lim = kvs_pool_limit(e.pool);
	errno = 0;
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 0, e.r, &rep), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(rep.floor_bytes, 2 * SLAB_BYTES);
	ck_assert_uint_eq(rep.evicted_tokens, 0);
	ck_assert_uint_eq(rep.bytes_returned, 0);
	ck_assert_uint_eq(kvs_pool_limit(e.pool), lim);
	ck_assert_uint_eq(kvs_radix_evictable(e.r), 1);
	/* Nothing pinned: every slab goes back, the cached page evicted. */
	{
		int32_t rest[7] = { locs[0], locs[1], locs[2], locs[3], locs[5], locs[6], locs[7] };

		ck_assert_int_eq(kvs_pool_free(e.pool, 7, rest), 0);
	}
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 0, e.r, &rep), 0);
	ck_assert_uint_eq(rep.evicted_tokens, 1);
	ck_assert_uint_eq(rep.limit, 0);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 0);
	ck_assert_uint_eq(kvs_pool_available(e.pool), 0);
	errno = 0;
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 1, &one), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, SLAB_BYTES, e.r, &rep), 0);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 1, &one), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &one), 0);
	env_close(&e);
}
END_TEST

/* A slab that cannot be unmapped now (its unmap failed: parked broken) is
 * in the floor, and compaction cannot remove it either: packed_bytes, the
 * limit compaction could reach, counts it too (it used to count only the
 * pinned pages, and so said compaction would let a limit through that it
 * could not). */
START_TEST(test_limit_stuck_slab)
{
	struct env e;
	kvs_drv_t *f;
	int32_t locs[12], freed[10];
	kvs_limit_report_t rep;
	int n = 0;

	f = kvs_fault_open(tu_open_gran(_i, GRAN, 0, 0));
	ck_assert_ptr_nonnull(f);
	env_open_on(&e, f, 32, 0);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 12, locs), 0); /* slabs A, B, C */
	/* Pages 0 (A) and 4 (B) stay: two pinned pages, scattered. */
	for (int i = 0; i < 12; i++)
		if (i != 0 && i != 4)
			freed[n++] = locs[i];
	ck_assert_int_eq(kvs_fault_fail_random(f, KVS_OP_UNMAP, 1.0, 1, EIO), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, n, freed), 0);
	kvs_slab_shrink(e.s);	/* C's unmap fails (EIO, maybe later): parked */
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_broken), 1);
	errno = 0;
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, SLAB_BYTES, e.r, &rep), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(rep.floor_bytes, 3 * SLAB_BYTES);
	/* Compacted, A's and B's pages fit one slab; C stays. */
	ck_assert_uint_eq(rep.packed_bytes, 2 * SLAB_BYTES);
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &locs[0]), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &locs[4]), 0);
	env_close(&e);
}
END_TEST

/*
 * A larger, seeded case: 256 pages (64 slabs) all cached, 128 leaves of 2
 * pages each taken from a shuffled list (so a leaf's pages and LRU's order
 * mix the slabs), touched in a random order; then half the tokens are
 * evicted.  Same start for every mode; mapped bytes after the release
 * against the packed floor (128 live pages: 32 slabs).  Slab-aware
 * eviction must end at or below plain LRU, and a wider window lower still
 * (or equal).
 */
static uint64_t evict_half(int be, uint32_t aware, uint32_t window)
{
	kvs_pool_attr_t pa;
	kvs_radix_attr_t ra;
	struct env e;
	int32_t locs[256], key[2], order[128];
	uint64_t x = 0x9e3779b97f4a7c15ULL, mapped;
	int i;

	memset(&e, 0, sizeof(e));
	e.d = tu_open_gran(be, GRAN, 0, 0);
	ck_assert_ptr_nonnull(e.d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 4;
	pa.model.head_dim = 128 * (uint32_t)(GRAN / 4096); /* PPS tokens a slab */
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.max_tokens = 256;
	pa.magazine = 0;
	pa.chunk_pool = 0;
	pa.max_empty = 0;
	pa.decay_ms = 0;
	e.pool = kvs_pool_create(e.d, &pa);
	ck_assert_ptr_nonnull(e.pool);
	e.s = kvs_pool_slab(e.pool);
	kvs_radix_attr_init(&ra);
	ra.slab_aware = aware;
	ra.slab_window = window;
	e.r = kvs_radix_create(e.pool, &ra);
	ck_assert_ptr_nonnull(e.r);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 256, locs), 0);
	for (i = 255; i > 0; i--) {
		int j = (int)(tu_rng(&x) % (uint64_t)(i + 1));
		int32_t t = locs[i];

		locs[i] = locs[j];
		locs[j] = t;
	}
	for (i = 0; i < 128; i++) {
		key[0] = 1000 + i;
		key[1] = 7;
		ck_assert_int_eq(kvs_radix_insert(e.r, 0, key, 2, &locs[2 * i], 0, NULL), 0);
		order[i] = i;
	}
	for (i = 127; i > 0; i--) {
		int j = (int)(tu_rng(&x) % (uint64_t)(i + 1));
		int32_t t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (i = 0; i < 128; i++) {
		int32_t l[2];

		key[0] = 1000 + order[i];
		ck_assert_int_eq(kvs_radix_match(e.r, 0, key, 2, l, NULL), 2);
	}
	ck_assert_int_eq(kvs_radix_evict(e.r, 128), 128);
	ck_assert_int_eq(kvs_slab_shrink(e.s), 0);
	mapped = st(&e, KVS_SLAB_STAT_bytes_mapped);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_objects), 128);
	env_close(&e);
	return mapped;
}

START_TEST(test_slab_aware_random)
{
	uint64_t plain = evict_half(_i, 0, 0), w16 = evict_half(_i, 1, 0),
		 w64 = evict_half(_i, 1, KVS_RADIX_SLAB_WINDOW_MAX), floor = 32 * SLAB_BYTES;

	fprintf(stderr, "elastic[%s]: 128 live of 256 pages, floor %llu B; LRU %llu B (%.2fx), "
		"slab-aware w16 %llu B (%.2fx), w64 %llu B (%.2fx)\n", tu_backends[_i],
		(unsigned long long)floor, (unsigned long long)plain, (double)plain / floor,
		(unsigned long long)w16, (double)w16 / floor, (unsigned long long)w64,
		(double)w64 / floor);
	ck_assert_uint_ge(plain, floor);
	ck_assert_uint_le(w16, plain);
	ck_assert_uint_le(w64, w16);
	ck_assert_uint_ge(w64, floor);
}
END_TEST

/* The bytes of page @pg in K and V (layer 0): seeded by @seed. */
#define TOK_BYTES ((size_t)GRAN / 4)	/* one buffer's bytes a token */
static void page_fill(kvs_pool_t *p, int32_t pg, unsigned int seed)
{
	unsigned char *k = malloc(TOK_BYTES), *v = malloc(TOK_BYTES);

	ck_assert(k && v);
	tu_fill(k, TOK_BYTES, seed);
	tu_fill(v, TOK_BYTES, seed + 1000);
	ck_assert_int_eq(kvs_pool_set_kv(p, 0, pg, 1, k, v), 0);
	free(k);
	free(v);
}

static void page_check(kvs_pool_t *p, int32_t pg, unsigned int seed)
{
	unsigned char *k = malloc(TOK_BYTES), *v = malloc(TOK_BYTES);

	ck_assert(k && v);
	ck_assert_int_eq(kvs_pool_get_kv(p, 0, pg, 1, k, v), 0);
	ck_assert(tu_check(k, TOK_BYTES, seed));
	ck_assert(tu_check(v, TOK_BYTES, seed + 1000));
	free(k);
	free(v);
}

/*
 * Compaction, hand-checked.  Slabs A = pages 0-3, B = 4-7, C = 8-11:
 *   A: 0 request R1, 1 cached (key 200), 2 request R2, 3 free;
 *   B: 4 R1, 6 cached (key 201) and in R2's row too (2 references);
 *   C: 8 R2, 9 R1, 10 cached (key 202), 11 free.
 * 8 live pages: a packed floor of 2 slabs; 3 are mapped (1.5x).  B is the
 * sparsest and every reference to its pages is a row or the cache: its
 * two pages move to the densest free pages, 11 (C) then 3 (A).  Then A
 * and C are full, B empty and given back: 2 slabs, the floor.  Every byte
 * moves, rows read 0 11 9 and 2 8 3, key 201 matches location 3.
 */
START_TEST(test_compact)
{
	struct env e;
	kvs_reqtab_t *t;
	uint32_t slot[2];
	int32_t locs[16], row1[3] = {0, 4, 9}, row2[3] = {2, 8, 6}, got[3];
	int32_t unused[8] = {3, 5, 7, 11, 12, 13, 14, 15}, key, l, extra = 4;
	static const int32_t live[8] = {0, 1, 2, 4, 6, 8, 9, 10};
	uint64_t b0, k0, r0;
	int i;

	env_open(&e, _i, 32, 0);
	t = kvs_reqtab_create(e.d, 4, 16);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 16, locs), 0);
	cache_page(&e, 200, 1);
	cache_page(&e, 201, 6);
	cache_page(&e, 202, 10);
	ck_assert_int_eq(kvs_pool_ref(e.pool, 1, &row2[2]), 0); /* R2 shares 6 */
	ck_assert_int_eq(kvs_reqtab_alloc(t, 2, slot), 0);
	ck_assert_int_eq(kvs_reqtab_write(t, slot[0], 0, 3, row1), 0);
	ck_assert_int_eq(kvs_reqtab_write(t, slot[1], 0, 3, row2), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 8, unused), 0);
	ck_assert_int_eq(kvs_slab_shrink(e.s), 0);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 3 * SLAB_BYTES);
	for (i = 0; i < 8; i++)
		page_fill(e.pool, live[i], 7 + (unsigned int)live[i]);

	/* Within budget only: B needs 2 moves. */
	ck_assert_int_eq(kvs_pool_compact(e.pool, t, e.r, 1), 0);
	/* A holder the call cannot see (an extra reference on page 4) keeps
	 * B in place: moving it would leave that holder pointing at a free
	 * page. */
	ck_assert_int_eq(kvs_pool_ref(e.pool, 1, &extra), 0);
	ck_assert_int_eq(kvs_pool_compact(e.pool, t, e.r, 16), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 1, &extra), 0);

	b0 = kvs_drv_stat(e.d, KVS_DRV_STAT_bytes_copied);
	k0 = kvs_drv_stat(e.d, KVS_DRV_STAT_batch_calls);
	r0 = tu_dbl_calls("cuEventRecord");
	ck_assert_int_eq(kvs_pool_compact(e.pool, t, e.r, 16), 2);
	/* The double: the fence on the allocator's stream (stream 0), and
	 * the event after the copies. */
	if (strcmp(tu_backends[_i], "cuda") == 0 && tu_is_double())
		ck_assert_uint_eq(tu_dbl_calls("cuEventRecord") - r0, 2);
	/* Device to device, in one batch: 2 pages of every buffer copied
	 * once (through a host staging buffer they would be copied twice),
	 * and the two rewritten row entries. */
	{
		uint64_t page_bytes = 0;
		kvs_devptr_t base;
		size_t stride;
		uint32_t layer;

		for (layer = 0; kvs_pool_buffer(e.pool, layer, KVS_KV_K, &base, &stride) == 0;
		     layer++) {
			page_bytes += stride * kvs_pool_page_size(e.pool);
			ck_assert_int_eq(kvs_pool_buffer(e.pool, layer, KVS_KV_V, &base, &stride), 0);
			page_bytes += stride * kvs_pool_page_size(e.pool);
		}
		ck_assert_uint_gt(page_bytes, 0);
		ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_bytes_copied) - b0,
				  2 * page_bytes + 2 * 4);
	}
	ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_batch_calls) - k0, 1);
	ck_assert_int_eq(kvs_slab_shrink(e.s), 0);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 2 * SLAB_BYTES);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_full), 2);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_slabs_partial), 0);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_objects), 8);
	ck_assert_int_eq(kvs_slab_page_mapped(e.s, 4), 0);
	/* References. */
	ck_assert_int_eq(kvs_reqtab_read(t, slot[0], 0, 3, got), 0);
	ck_assert_int_eq(got[0], 0);
	ck_assert_int_eq(got[1], 11);
	ck_assert_int_eq(got[2], 9);
	ck_assert_int_eq(kvs_reqtab_read(t, slot[1], 0, 3, got), 0);
	ck_assert_int_eq(got[0], 2);
	ck_assert_int_eq(got[1], 8);
	ck_assert_int_eq(got[2], 3);
	key = 201;
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, &key, 1, &l), 1);
	ck_assert_int_eq(l, 3);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, &key, 1, &l, NULL), 1);
	ck_assert_int_eq(l, 3);
	key = 200;
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, &key, 1, &l), 1);
	ck_assert_int_eq(l, 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 11), 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 3), 2);
	ck_assert_int_eq(kvs_radix_validate(e.r), 0);
	ck_assert_int_eq(kvs_slab_validate(e.s), 0);
	/* Bytes: moved pages at their new homes, the others where they were. */
	page_check(e.pool, 11, 7 + 4);
	page_check(e.pool, 3, 7 + 6);
	for (i = 0; i < 8; i++)
		if (live[i] != 4 && live[i] != 6)
			page_check(e.pool, live[i], 7 + (unsigned int)live[i]);
	fprintf(stderr, "elastic[%s]: compaction: 8 live pages, floor %zu B; before %zu B (1.50x), "
		"after %llu B (%.2fx)\n", tu_backends[_i], 2 * SLAB_BYTES, 3 * SLAB_BYTES,
		(unsigned long long)st(&e, KVS_SLAB_STAT_bytes_mapped),
		(double)st(&e, KVS_SLAB_STAT_bytes_mapped) / (2 * SLAB_BYTES));

	/* The requests finish: their rows name their pages. */
	ck_assert_int_eq(kvs_reqtab_read(t, slot[0], 0, 3, got), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 3, got), 0);
	ck_assert_int_eq(kvs_reqtab_read(t, slot[1], 0, 3, got), 0);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(kvs_pool_free(e.pool, 1, &got[i]), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, slot[0]), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, slot[1]), 0);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	env_close(&e);
}
END_TEST

/*
 * The hashed block cache over the same pool (it registers on its pool as
 * the radix cache does).  Blocks 0-2 (slab A) and 8-10 (slab C) are in
 * use; block 4 (slab B) is a free cached block of hash 4; every other page
 * is free.  B can empty only by evicting or moving block 4.
 */
struct hc_env {
	kvs_hcache_t *hc;
	int32_t used[6];
};

static kvs_block_hash_t hc_hash(uint8_t v)
{
	kvs_block_hash_t h;

	memset(&h, 0, sizeof(h));
	h.len = 32;
	h.bytes[0] = v;
	h.bytes[31] = 0x5a;
	return h;
}

static void hc_open(struct env *e, struct hc_env *h)
{
	static const int32_t used[6] = {0, 1, 2, 8, 9, 10};
	int32_t b[16], spare[9], four = 4;
	kvs_block_hash_t h4 = hc_hash(4);
	int i, n = 0;

	h->hc = kvs_hcache_create(e->pool, NULL);
	ck_assert_ptr_nonnull(h->hc);
	memcpy(h->used, used, sizeof(used));
	ck_assert_int_eq(kvs_hcache_alloc(h->hc, 16, b), 0);
	for (i = 0; i < 16; i++)
		ck_assert_int_eq(b[i], i);
	ck_assert_int_eq(kvs_hcache_cache(h->hc, &four, 1, &h4, NULL, 0, NULL), 0);
	for (i = 0; i < 16; i++)
		if (i != 4 && !(i <= 2 || (i >= 8 && i <= 10)))
			spare[n++] = i;
	ck_assert_int_eq(kvs_hcache_free(h->hc, spare, (size_t)n), 0);
	ck_assert_int_eq(kvs_hcache_free(h->hc, &four, 1), 0);
	ck_assert_int_eq(kvs_slab_shrink(e->s), 0);
	ck_assert_uint_eq(st(e, KVS_SLAB_STAT_bytes_mapped), 3 * SLAB_BYTES);
}

static void hc_close(struct env *e, struct hc_env *h)
{
	ck_assert_int_eq(kvs_hcache_validate(h->hc), 0);
	ck_assert_int_eq(kvs_hcache_free(h->hc, h->used, 6), 0);
	ck_assert_int_eq(kvs_hcache_destroy(h->hc), 0);
	env_close(e);
}

/* A limit evicts the hashed cache's free blocks in the chosen slabs (it
 * used to count them as pinned: ENOMEM, a floor of 3 slabs). */
START_TEST(test_limit_hcache)
{
	struct env e;
	struct hc_env h;
	kvs_limit_report_t rep;
	kvs_block_hash_t h4 = hc_hash(4);
	int32_t got;

	env_open(&e, _i, 32, 0);
	hc_open(&e, &h);
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 2 * SLAB_BYTES, NULL, &rep), 0);
	ck_assert_uint_eq(rep.floor_bytes, 2 * SLAB_BYTES);
	ck_assert_uint_eq(rep.evicted_tokens, 1);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 2 * SLAB_BYTES);
	ck_assert_int_eq(kvs_hcache_lookup(h.hc, &h4, 1, 2, &got), 0);
	ck_assert_int_eq(kvs_hcache_free_queue(h.hc, NULL, 0), 0);
	hc_close(&e, &h);
}
END_TEST

/* Compaction moves the hashed cache's free cached block out of slab B:
 * its hash finds it at its new page, and B empties (it used to stay, the
 * cache's reference counted as a holder the call could not see). */
START_TEST(test_compact_hcache)
{
	struct env e;
	struct hc_env h;
	kvs_block_hash_t h4 = hc_hash(4), got_h;
	int32_t got = -1;
	uint32_t ref = 99;

	env_open(&e, _i, 32, 0);
	hc_open(&e, &h);
	page_fill(e.pool, 4, 44);
	ck_assert_int_eq(kvs_pool_compact(e.pool, NULL, NULL, 16), 1);
	ck_assert_int_eq(kvs_hcache_validate(h.hc), 0);
	ck_assert_int_eq(kvs_slab_validate(e.s), 0);
	ck_assert_int_eq(kvs_hcache_match_ro(h.hc, &h4, 1, 2), 1);
	ck_assert_int_eq(kvs_hcache_free_queue(h.hc, &got, 1), 1);
	ck_assert(got == 3 || got == 11);
	page_check(e.pool, got, 44);
	ck_assert_int_eq(kvs_hcache_block(h.hc, got, &ref, &got_h), 1);
	ck_assert_uint_eq(ref, 0);
	ck_assert_int_eq(memcmp(&got_h, &h4, sizeof(h4)), 0);
	ck_assert_int_eq(kvs_hcache_block(h.hc, 4, &ref, NULL), 0);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 4), 0);
	ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)got), 1);
	ck_assert_int_eq(kvs_slab_shrink(e.s), 0);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 2 * SLAB_BYTES);
	/* The moved block is evicted and reused like any other. */
	ck_assert_int_eq(kvs_hcache_evict(h.hc, 1), 1);
	ck_assert_int_eq(kvs_slab_refcount(e.s, (uint32_t)got), 0);
	hc_close(&e, &h);
}
END_TEST

/*
 * The tiered cache's device tier over the same pool: the cache registers
 * on its pool as the others do.  Pages 0-2 (slab A) and 8-10 (slab C) are
 * the caller's; page 4 (slab B) holds key {300} in the tiered cache,
 * backed up to its host pool (write-through); every other page is free.
 */
struct hr_env {
	kvs_hpool_t *hp;
	kvs_hiradix_t *h;
	int32_t mine[6];
};

static void hr_open(struct env *e, struct hr_env *h)
{
	static const int32_t mine[6] = {0, 1, 2, 8, 9, 10};
	int32_t locs[16], spare[9], key = 300;
	kvs_hpool_attr_t ha;
	kvs_hiradix_attr_t a;
	kvs_hiradix_usage_t u;
	int i, n = 0;

	kvs_hpool_attr_init(&ha);
	ha.ratio = 0;
	ha.bytes = 16 * 2 * TOK_BYTES;
	h->hp = kvs_hpool_create(e->pool, &ha);
	ck_assert_ptr_nonnull(h->hp);
	ck_assert_int_eq(kvs_hiradix_attr_init(&a), 0);
	a.write_policy = KVS_WRITE_THROUGH;
	h->h = kvs_hiradix_create(e->pool, h->hp, &a);
	ck_assert_ptr_nonnull(h->h);
	memcpy(h->mine, mine, sizeof(mine));
	ck_assert_int_eq(kvs_pool_alloc(e->pool, 16, locs), 0);
	for (i = 0; i < 16; i++)
		ck_assert_int_eq(locs[i], i);
	ck_assert_int_eq(kvs_hiradix_insert(h->h, &key, 1, &locs[4], NULL), 0);
	for (i = 0; i < 16; i++)
		if (i != 4 && !(i <= 2 || (i >= 8 && i <= 10)))
			spare[n++] = i;
	ck_assert_int_eq(kvs_pool_free(e->pool, (size_t)n, spare), 0);
	ck_assert_int_eq(kvs_slab_shrink(e->s), 0);
	tu_hiradix_settle(h->h);
	ck_assert_int_eq(kvs_hiradix_usage(h->h, &u), 0);
	ck_assert_uint_eq(u.backups_pending, 0);
}

static void hr_close(struct env *e, struct hr_env *h)
{
	ck_assert_int_eq(kvs_hiradix_validate(h->h), 0);
	ck_assert_int_eq(kvs_hiradix_destroy(h->h), 0);
	ck_assert_int_eq(kvs_hpool_destroy(h->hp), 0);
	ck_assert_int_eq(kvs_pool_free(e->pool, 6, h->mine), 0);
	env_close(e);
}

/* A limit evicts the tiered cache's device page in the chosen slab (to
 * its host copy); it used to count as pinned (ENOMEM). */
START_TEST(test_limit_hiradix)
{
	struct env e;
	struct hr_env h;
	kvs_limit_report_t rep;
	int32_t key = 300;

	env_open(&e, _i, 32, 0);
	hr_open(&e, &h);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 3 * SLAB_BYTES);
	ck_assert_int_eq(kvs_pool_set_limit(e.pool, 2 * SLAB_BYTES, NULL, &rep), 0);
	ck_assert_uint_eq(rep.evicted_tokens, 1);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 2 * SLAB_BYTES);
	/* Not on the device any more; still in the host tier. */
	ck_assert_int_eq(kvs_hiradix_match(h.h, &key, 1, NULL, NULL), 0);
	hr_close(&e, &h);
}
END_TEST

/* Compaction moves the tiered cache's device page out of slab B. */
START_TEST(test_compact_hiradix)
{
	struct env e;
	struct hr_env h;
	int32_t key = 300, loc = -1;

	env_open(&e, _i, 32, 0);
	hr_open(&e, &h);
	page_fill(e.pool, 4, 77);
	ck_assert_int_eq(kvs_pool_compact(e.pool, NULL, NULL, 16), 1);
	ck_assert_int_eq(kvs_hiradix_match(h.h, &key, 1, &loc, NULL), 1);
	ck_assert(loc == 3 || loc == 11);
	page_check(e.pool, loc, 77);
	ck_assert_int_eq(kvs_slab_refcount(e.s, 4), 0);
	ck_assert_int_eq(kvs_slab_validate(e.s), 0);
	ck_assert_int_eq(kvs_hiradix_validate(h.h), 0);
	ck_assert_int_eq(kvs_slab_shrink(e.s), 0);
	ck_assert_uint_eq(st(&e, KVS_SLAB_STAT_bytes_mapped), 2 * SLAB_BYTES);
	hr_close(&e, &h);
}
END_TEST

static Suite *elastic_suite(void)
{
	Suite *s = suite_create("elastic");
	TCase *tc = tcase_create("elastic");
	int nb = tu_nbackends();

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_slab_aware_empties_a_slab, 0, nb);
	tcase_add_loop_test(tc, test_slab_aware_skips_shared, 0, nb);
	tcase_add_loop_test(tc, test_slab_aware_follows_sharing, 0, nb);
	tcase_add_loop_test(tc, test_slab_aware_whole_slab_leaf, 0, nb);
	tcase_add_loop_test(tc, test_slab_aware_random, 0, nb);
	tcase_add_loop_test(tc, test_alloc_fullest_first, 0, nb);
	tcase_add_loop_test(tc, test_limit_lower_raise, 0, nb);
	tcase_add_loop_test(tc, test_limit_no_cache, 0, nb);
	tcase_add_loop_test(tc, test_limit_zero, 0, nb);
	tcase_add_loop_test(tc, test_limit_stuck_slab, 0, nb);
	tcase_add_loop_test(tc, test_compact, 0, nb);
	tcase_add_loop_test(tc, test_limit_hcache, 0, nb);
	tcase_add_loop_test(tc, test_compact_hcache, 0, nb);
	tcase_add_loop_test(tc, test_limit_hiradix, 0, nb);
	tcase_add_loop_test(tc, test_compact_hiradix, 0, nb);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* Unless the caller chose one (make check-gpu's plumbing check). */
	setenv("KVSLAB_DOUBLE_GRANULARITY", "4096", 0);
	(void)GRAN;
	return tu_run(elastic_suite());
}
