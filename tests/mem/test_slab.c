/* SPDX-License-Identifier: MIT */
/*
 * tests/mem/test_slab.c - the slab allocator on every backend.
 *
 * Granularity is 64 KiB on both backends here (the double reads
 * KVSLAB_DOUBLE_GRANULARITY, set in main() before any cuInit), so slabs are
 * small and a test can map and unmap many of them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* The cuda driver's granularity (tu_granularity()), 64 KiB with the double. */
#define GRAN tu_granularity((64 * 1024))

/* K and V of one layer: 64 tokens a slab whatever the granularity (1 KiB a
 * token at 64 KiB, set in main()). */
static size_t tb2[2];

static kvs_drv_t *drv_open(int i, size_t limit)
{
	kvs_drv_t *d = tu_open_gran(i, GRAN, limit, 0);

	ck_assert_ptr_nonnull(d);
	ck_assert_uint_eq(kvs_drv_granularity(d), GRAN);
	return d;
}

/* Two buffers of one layer's K and V, @cap pages. */
static void base_attr(kvs_slab_attr_t *a, uint64_t cap)
{
	kvs_slab_attr_init(a);
	a->nbuffers = 2;
	a->token_bytes = tb2;
	a->capacity_pages = cap;
}

static kvs_slab_t *mk(kvs_drv_t *d, uint32_t page_size, uint64_t cap, uint32_t mag,
		      unsigned flags)
{
	kvs_slab_attr_t a;
	kvs_slab_t *s;

	kvs_slab_attr_init(&a);
	a.page_size = page_size;
	a.nbuffers = 2;
	a.token_bytes = tb2;
	a.capacity_pages = cap;
	a.magazine = mag;
	a.flags = flags;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	return s;
}

/* An allocator on @d with no chunk pool and no per-thread cache, so that
 * every growth and release reaches the driver at once. */
static kvs_slab_t *mk_plain(kvs_drv_t *d, uint64_t cap, uint32_t max_empty)
{
	kvs_slab_attr_t a;
	kvs_slab_t *s;

	base_attr(&a, cap);
	a.max_empty = max_empty;
	a.chunk_pool = 0;
	a.magazine = 0;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	return s;
}

static void finish(int i, kvs_drv_t *d, kvs_slab_t *s)
{
	if (s) {
		ck_assert_int_eq(kvs_slab_validate(s), 0);
		ck_assert_int_eq(kvs_slab_destroy(s), 0);
	}
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_created), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_reserved), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	if (strcmp(tu_backends[i], "cuda") == 0)
		ck_assert_uint_eq(tu_double_query("kvsdbl_live_handles"), 0);
	else
		ck_assert_int_eq(tu_host_chunk_fds(), 0);
}

START_TEST(test_geometry_and_basics)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk(d, 16, 20, 0, 0);
	kvs_slab_attr_t a;
	int64_t p;

	/* 64 tokens a slab (64 KiB / 1 KiB), 4 pages of 16 tokens; 20 -> 20. */
	ck_assert_uint_eq(kvs_slab_pages_per_slab(s), 4);
	ck_assert_uint_eq(kvs_slab_capacity(s), 20);
	ck_assert_uint_eq(kvs_slab_page_size(s), 16);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 0); /* lazy */
	ck_assert_uint_eq(kvs_slab_available(s), 20);
	p = kvs_slab_alloc(s);
	ck_assert_int_ge(p, 0);
	ck_assert_int_eq(kvs_slab_refcount(s, (uint32_t)p), 1);
	ck_assert_int_eq(kvs_slab_page_mapped(s, (uint32_t)p), 1);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 2 * GRAN);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 1);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_live), 2 * GRAN / 4);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_partial), 1);
	ck_assert(kvs_slab_fragmentation(s) > 0.74 && kvs_slab_fragmentation(s) < 0.76);
	ck_assert_uint_eq(kvs_slab_available(s), 19);
	ck_assert_int_eq(kvs_slab_free(s, (uint32_t)p), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 0);

	/* Odd token sizes: the slab grows until every buffer holds whole granules. */
	kvs_slab_attr_init(&a);
	{
		size_t tb[3] = {576, 1024, 3000};
		kvs_slab_t *s2;

		a.nbuffers = 3;
		a.token_bytes = tb;
		a.capacity_pages = 1;
		a.page_size = 3;
		s2 = kvs_slab_create(d, &a);
		ck_assert_ptr_nonnull(s2);
		for (int b = 0; b < 3; b++)
			ck_assert_uint_eq((uint64_t)kvs_slab_pages_per_slab(s2) * 3 * tb[b] % GRAN, 0);
		ck_assert_int_eq(kvs_slab_destroy(s2), 0);
	}
	errno = 0;
	a.page_size = 0;
	ck_assert_ptr_null(kvs_slab_create(d, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.page_size = 1;
	a.min_empty = 3;
	a.max_empty = 2;
	ck_assert_ptr_null(kvs_slab_create(d, &a));
	ck_assert_int_eq(errno, EINVAL);
	finish(_i, d, s);
}
END_TEST

/* Write a page's bytes, churn other slabs through unmap and remap, and read
 * the page back. */
START_TEST(test_data_survives_churn)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk(d, 16, 64, 0, 0);
	uint32_t pps = kvs_slab_pages_per_slab(s), pages[64];
	size_t page_bytes = 16 * 1024;
	unsigned char *buf = malloc(page_bytes), *out = malloc(page_bytes);
	int64_t keep = kvs_slab_alloc(s);
	int round, b;

	ck_assert_int_ge(keep, 0);
	for (b = 0; b < 2; b++) {
		tu_fill(buf, page_bytes, 100 + b);
		ck_assert_int_eq(kvs_drv_copy_htod(d, kvs_slab_buffer(s, b) + keep * page_bytes, buf,
						   page_bytes, NULL),
				 0);
		ck_assert_int_eq(kvs_drv_synchronize(d), 0); /* buf is reused */
	}
	for (round = 0; round < 5; round++) {
		uint64_t unmaps = kvs_slab_stat(s, KVS_SLAB_STAT_slab_unmaps);

		ck_assert_int_eq(kvs_slab_alloc_bulk(s, 8 * pps, pages), (int)(8 * pps));
		ck_assert_int_eq(kvs_slab_free_bulk(s, 8 * pps, pages), 0);
		ck_assert_int_eq(kvs_slab_shrink(s), 0);
		ck_assert_uint_gt(kvs_slab_stat(s, KVS_SLAB_STAT_slab_unmaps), unmaps);
		ck_assert_int_eq(kvs_slab_validate(s), 0);
	}
	/* Only the slab with the kept page is still mapped. */
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 2 * GRAN);
	for (b = 0; b < 2; b++) {
		memset(out, 0, page_bytes);
		ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, kvs_slab_buffer(s, b) + keep * page_bytes,
						   page_bytes, NULL),
				 0);
		ck_assert_int_eq(kvs_drv_synchronize(d), 0);
		ck_assert(tu_check(out, page_bytes, 100 + b));
	}
	ck_assert_int_eq(kvs_slab_free(s, (uint32_t)keep), 0);
	free(buf);
	free(out);
	finish(_i, d, s);
}
END_TEST

/* Slabs of 4 pages share bitmap words: taking from one slab must never
 * touch, or stop at, a neighbour's bits (a hang once). */
START_TEST(test_shared_bitmap_words)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk(d, 16, 20, 0, KVS_SLAB_F_WORKER | KVS_SLAB_F_STATIC);
	uint32_t pages[24], k;
	int64_t p;

	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 8, pages), 8);
	ck_assert_int_eq(kvs_slab_free(s, pages[0]), 0);
	ck_assert_int_eq(kvs_slab_free(s, pages[1]), 0);
	ck_assert_int_eq(kvs_slab_free(s, pages[2]), 0);
	ck_assert_int_eq(kvs_slab_free(s, pages[7]), 0);
	p = kvs_slab_alloc(s); /* fullest partial: the slab of pages[7] */
	ck_assert_uint_eq((uint64_t)p / 4, pages[7] / 4u);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 15, pages + 8), 15);
	for (k = 8; k < 23; k++)
		ck_assert_int_eq(kvs_slab_refcount(s, pages[k]), 1);
	ck_assert_int_eq(kvs_slab_alloc(s), -1); /* 20 pages, all held */
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	finish(_i, d, s);
}
END_TEST

START_TEST(test_refcounts)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk(d, 1, 256, 8, 0);
	uint32_t pages[4], bad[3];
	int64_t p = kvs_slab_alloc(s);

	ck_assert_int_ge(p, 0);
	ck_assert_int_eq(kvs_slab_ref(s, (uint32_t)p), 0);
	ck_assert_int_eq(kvs_slab_ref(s, (uint32_t)p), 0);
	ck_assert_int_eq(kvs_slab_refcount(s, (uint32_t)p), 3);
	ck_assert_int_eq(kvs_slab_free(s, (uint32_t)p), 0);
	ck_assert_int_eq(kvs_slab_free(s, (uint32_t)p), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 1);
	ck_assert_int_eq(kvs_slab_free(s, (uint32_t)p), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 0);
	errno = 0;
	ck_assert_int_eq(kvs_slab_free(s, (uint32_t)p), -1); /* free page */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_slab_ref(s, (uint32_t)p), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_slab_free(s, 1u << 30), -1); /* out of range */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_slab_refcount(s, 1u << 30), -1);

	/* Bulk free is all or nothing: one bad entry, nothing changes. */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 4, pages), 4);
	ck_assert_int_eq(kvs_slab_ref(s, pages[1]), 0);
	bad[0] = pages[0];
	bad[1] = pages[1];
	bad[2] = pages[0]; /* pages[0] has one reference, not two */
	ck_assert_int_eq(kvs_slab_free_bulk(s, 3, bad), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_slab_refcount(s, pages[0]), 1);
	ck_assert_int_eq(kvs_slab_refcount(s, pages[1]), 2);
	bad[2] = pages[1]; /* now legal: pages[1] has two */
	ck_assert_int_eq(kvs_slab_free_bulk(s, 3, bad), 0);
	ck_assert_int_eq(kvs_slab_refcount(s, pages[0]), 0);
	ck_assert_int_eq(kvs_slab_refcount(s, pages[1]), 0);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 2, pages + 2), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 0);
	finish(_i, d, s);
}
END_TEST

START_TEST(test_contiguous)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk(d, 4, 64, 0, 0); /* 16 pages a slab, 4 slabs */
	uint32_t first, pages[64], k;

	ck_assert_int_eq(kvs_slab_alloc_contig(s, 40, &first), 0); /* spans 3 slabs */
	for (k = 0; k < 40; k++)
		ck_assert_int_eq(kvs_slab_refcount(s, first + k), 1);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	/* Hold every other remaining page: no run of 3 is left anywhere. */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 24, pages), 24);
	for (k = 0; k < 24; k += 2)
		ck_assert_int_eq(kvs_slab_free(s, pages[k]), 0);
	errno = 0;
	ck_assert_int_eq(kvs_slab_alloc_contig(s, 3, &first), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 40 + 12);
	/* A run of 1 still works. */
	ck_assert_int_eq(kvs_slab_alloc_contig(s, 1, &first), 0);
	ck_assert_int_eq(kvs_slab_free(s, first), 0);
	ck_assert_int_eq(kvs_slab_alloc_contig(s, 0, &first), -1);
	ck_assert_int_eq(errno, EINVAL);
	finish(_i, d, s);
}
END_TEST

START_TEST(test_limits)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_attr_t a;
	kvs_slab_t *s;
	uint32_t pages[256];
	int64_t p;
	int k;

	kvs_slab_attr_init(&a);
	a.nbuffers = 2;
	a.token_bytes = tb2;
	a.capacity_pages = 256; /* 4 slabs of 64 tokens */
	a.max_mapped = 2 * 2 * GRAN; /* two slabs */
	a.magazine = 0;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(kvs_slab_available(s), 128);
	errno = 0;
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 129, pages), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 0);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 128, pages), 128);
	ck_assert_uint_le(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), a.max_mapped);
	p = kvs_slab_alloc(s);
	ck_assert_int_eq(p, -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_gt(kvs_slab_stat(s, KVS_SLAB_STAT_alloc_fail), 0);
	for (k = 0; k < 128; k++)
		ck_assert_int_eq(kvs_slab_free(s, pages[k]), 0);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	ck_assert_int_eq(kvs_slab_destroy(s), 0);

	/* Capacity exhausted. */
	a.max_mapped = 0;
	a.capacity_pages = 64;
	s = kvs_slab_create(d, &a);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 64, pages), 64);
	ck_assert_int_eq(kvs_slab_alloc(s), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 64, pages), 0);
	finish(_i, d, s);
}
END_TEST

/* Allocation goes to the fullest partial slab, so frees concentrate in the
 * emptiest slabs and those can be unmapped. */
START_TEST(test_fullest_first)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk(d, 4, 64, 0, 0); /* 16 pages a slab */
	uint32_t pages[64], k;
	int64_t p;

	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 48, pages), 48); /* 3 full slabs */
	/* Slab of pages[0..15]: free 12 (4 left); slab of pages[16..31]: free 2. */
	for (k = 0; k < 12; k++)
		ck_assert_int_eq(kvs_slab_free(s, pages[k]), 0);
	ck_assert_int_eq(kvs_slab_free(s, pages[16]), 0);
	ck_assert_int_eq(kvs_slab_free(s, pages[17]), 0);
	p = kvs_slab_alloc(s);
	ck_assert_uint_eq((uint64_t)p / 16, pages[16] / 16);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_partial), 2);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_full), 1);
	ck_assert_int_eq(kvs_slab_free(s, (uint32_t)p), 0);
	for (k = 12; k < 48; k++)
		if (k != 16 && k != 17)
			ck_assert_int_eq(kvs_slab_free(s, pages[k]), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 0);
	finish(_i, d, s);
}
END_TEST

START_TEST(test_shrinker_hysteresis)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_attr_t a;
	kvs_slab_t *s;
	uint32_t pages[512];
	uint64_t calls;
	int k;

	base_attr(&a, 512);
	a.min_empty = 1;
	a.max_empty = 3;
	a.magazine = 0;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	/* min_empty is mapped up front. */
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 1);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 512, pages), 512);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_full), 8);
	/* Empty slabs accumulate to the high watermark, then drop to the low one. */
	for (k = 0; k < 3 * 64; k++)
		ck_assert_int_eq(kvs_slab_free(s, pages[k]), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 3);
	calls = kvs_slab_stat(s, KVS_SLAB_STAT_drv_calls);
	for (; k < 4 * 64; k++)
		ck_assert_int_eq(kvs_slab_free(s, pages[k]), 0);
	/* Frees never call the driver: the slabs wait for a reclaim. */
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_drv_calls), calls);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 4);
	ck_assert_int_eq(kvs_slab_reclaim(s), 3);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 1);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 5 * 2 * GRAN);
	ck_assert_int_eq(kvs_slab_reclaim(s), 0);
	for (; k < 512; k++)
		ck_assert_int_eq(kvs_slab_free(s, pages[k]), 0);
	ck_assert_int_ge(kvs_slab_reclaim(s), 0);
	ck_assert_uint_le(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 3);
	ck_assert_int_eq(kvs_slab_shrink(s), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 1);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_pooled), 0);
	finish(_i, d, s);
}
END_TEST

START_TEST(test_static_mode)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk(d, 1, 256, 8, KVS_SLAB_F_STATIC);
	uint32_t pages[256];

	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 4 * 2 * GRAN);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 256, pages), 256);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 256, pages), 0);
	ck_assert_int_eq(kvs_slab_shrink(s), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 4 * 2 * GRAN);
	finish(_i, d, s);
}
END_TEST

/* Fail each driver call of slab growth in turn: the allocator stays
 * consistent, reports -1/errno, and nothing leaks. */
START_TEST(test_fault_during_growth)
{
	uint64_t k, ncalls;
	uint32_t pages[256];

	for (k = 0;; k++) {
		kvs_drv_t *inner = drv_open(_i, 0), *f = kvs_fault_open(inner);
		kvs_slab_attr_t a;
		kvs_slab_t *s;
		uint64_t c0;
		int rc;

		kvs_slab_attr_init(&a);
		a.nbuffers = 2;
		a.token_bytes = tb2;
		a.capacity_pages = 256;
		a.magazine = 0;
		a.chunk_pool = 0;
		s = kvs_slab_create(f, &a);
		ck_assert_ptr_nonnull(s);
		c0 = kvs_fault_calls(f, KVS_OP_ANY);
		if (k > 0)
			kvs_fault_fail_nth(f, KVS_OP_ANY, k, k % 2 ? ENOMEM : EIO);
		rc = kvs_slab_alloc_bulk(s, 200, pages);
		ncalls = kvs_fault_calls(f, KVS_OP_ANY) - c0;
		if (k == 0) {
			ck_assert_int_eq(rc, 200);
		} else if (k <= ncalls && kvs_fault_injected(f)) {
			ck_assert_int_eq(rc, -1);
			ck_assert(errno == ENOMEM || errno == EIO);
			ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 0);
			ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_map_fail), 1);
		}
		ck_assert_int_eq(kvs_slab_validate(s), 0);
		/* The allocator's books match the driver's. */
		ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped),
				  kvs_drv_stat(f, KVS_DRV_STAT_bytes_mapped));
		kvs_fault_clear(f);
		if (rc < 0) /* and it still works */
			ck_assert_int_eq(kvs_slab_alloc_bulk(s, 200, pages), 200);
		ck_assert_int_eq(kvs_slab_free_bulk(s, 200, pages), 0);
		ck_assert_int_eq(kvs_slab_validate(s), 0);
		ck_assert_int_eq(kvs_slab_destroy(s), 0);
		ck_assert_uint_eq(kvs_drv_stat(inner, KVS_DRV_STAT_bytes_created), 0);
		ck_assert_uint_eq(kvs_drv_stat(inner, KVS_DRV_STAT_bytes_mapped), 0);
		ck_assert_int_eq(kvs_drv_close(f), 0);
		if (k > 0 && k > ncalls)
			break;
	}
	/* 4 slabs x 2 buffers x (create, map, set access). */
	ck_assert_uint_eq(ncalls, 24);
}
END_TEST

static int wait_for(kvs_slab_t *s, enum kvs_slab_stat st, uint64_t want)
{
	int k;

	for (k = 0; k < 2000; k++) {
		if (kvs_slab_stat(s, st) >= want)
			return 1;
		usleep(1000);
	}
	return 0;
}

/* With the worker, steady-state allocation makes no driver call on the
 * caller's thread. */
START_TEST(test_worker_premaps)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_attr_t a;
	kvs_slab_t *s;
	uint32_t pages[64];
	int round;

	base_attr(&a, 64 * 16);
	a.min_empty = 2;
	a.max_empty = 4;
	a.chunk_pool = 2;
	a.flags = KVS_SLAB_F_WORKER;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	ck_assert(wait_for(s, KVS_SLAB_STAT_bytes_pooled, 2 * 2 * GRAN));
	ck_assert_uint_ge(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 2);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_drv_calls_caller), 0);
	for (round = 0; round < 6; round++) {
		/* Take one slab's worth, let the worker catch up, give it back. */
		ck_assert_int_eq(kvs_slab_alloc_bulk(s, 64, pages), 64);
		ck_assert(wait_for(s, KVS_SLAB_STAT_slabs_empty, 2));
		ck_assert_int_eq(kvs_slab_free_bulk(s, 64, pages), 0);
	}
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_drv_calls_caller), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_drv_creates_caller), 0);
	ck_assert_uint_gt(kvs_slab_stat(s, KVS_SLAB_STAT_drv_calls), 0);
	ck_assert_uint_le(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 4 + 1);
	finish(_i, d, s);
}
END_TEST

/* ---------------------------------------------------------- model test */

static void model_check(kvs_slab_t *s, const uint16_t *model, uint64_t n, size_t limit)
{
	uint64_t p, held = 0;

	ck_assert_int_eq(kvs_slab_validate(s), 0);
	for (p = 0; p < n; p++) {
		ck_assert_int_eq(kvs_slab_refcount(s, (uint32_t)p), model[p]);
		held += model[p] > 0;
	}
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), held);
	ck_assert_uint_le(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), limit);
	ck_assert_uint_le(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_live),
			  kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped));
}

static void random_run(int i, uint32_t page_size, uint64_t seed, int steps)
{
	kvs_drv_t *d = drv_open(i, 0);
	kvs_slab_attr_t a;
	kvs_slab_t *s;
	uint64_t x = seed, n, k;
	uint16_t *model;
	uint32_t *held, nheld = 0, buf[96];
	size_t limit;
	int step;

	kvs_slab_attr_init(&a);
	a.page_size = page_size;
	a.nbuffers = 2;
	a.token_bytes = tb2;
	a.capacity_pages = 12 * 64 / page_size;
	a.max_mapped = limit = 9 * 2 * GRAN; /* below capacity: the limit bites */
	a.min_empty = 0;
	a.max_empty = 2;
	a.magazine = 6;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	n = kvs_slab_capacity(s);
	model = calloc(n, sizeof(*model));
	held = calloc(n * 4, sizeof(*held)); /* one entry per reference */
	for (step = 0; step < steps; step++) {
		uint64_t op = tu_rng(&x) % 100;

		if (op < 30) { /* alloc one */
			int64_t p = kvs_slab_alloc(s);

			if (p < 0) {
				ck_assert_int_eq(errno, ENOMEM);
			} else {
				ck_assert_int_eq(model[p], 0);
				model[p] = 1;
				held[nheld++] = (uint32_t)p;
			}
		} else if (op < 40) { /* alloc bulk */
			size_t want = 1 + tu_rng(&x) % 40;

			if (kvs_slab_alloc_bulk(s, want, buf) < 0) {
				ck_assert_int_eq(errno, ENOMEM);
			} else {
				for (k = 0; k < want; k++) {
					ck_assert_int_eq(model[buf[k]], 0);
					model[buf[k]] = 1;
					held[nheld++] = buf[k];
				}
			}
		} else if (op < 45) { /* contiguous */
			size_t want = 1 + tu_rng(&x) % 20;
			uint32_t first;

			if (kvs_slab_alloc_contig(s, want, &first) < 0) {
				ck_assert_int_eq(errno, ENOMEM);
			} else {
				for (k = 0; k < want; k++) {
					ck_assert_int_eq(model[first + k], 0);
					model[first + k] = 1;
					held[nheld++] = first + (uint32_t)k;
				}
			}
		} else if (op < 55 && nheld) { /* ref */
			uint32_t p = held[tu_rng(&x) % nheld];

			ck_assert_int_eq(kvs_slab_ref(s, p), 0);
			model[p]++;
			held[nheld++] = p;
		} else if (op < 85 && nheld) { /* free one reference */
			uint32_t j = (uint32_t)(tu_rng(&x) % nheld), p = held[j];

			ck_assert_int_eq(kvs_slab_free(s, p), 0);
			model[p]--;
			held[j] = held[--nheld];
		} else if (op < 92 && nheld) { /* free bulk */
			uint32_t m = 1 + (uint32_t)(tu_rng(&x) % 20), j;

			if (m > nheld)
				m = nheld;
			for (j = 0; j < m; j++) {
				uint32_t r = (uint32_t)(tu_rng(&x) % nheld);

				buf[j] = held[r];
				held[r] = held[--nheld];
			}
			ck_assert_int_eq(kvs_slab_free_bulk(s, m, buf), 0);
			for (j = 0; j < m; j++)
				model[buf[j]]--;
		} else if (op < 95) { /* invalid free: a free page or out of range */
			uint32_t p = (uint32_t)(tu_rng(&x) % (n + 4));

			if (p >= n || model[p] == 0) {
				ck_assert_int_eq(kvs_slab_free(s, p), -1);
				ck_assert_int_eq(errno, EINVAL);
			}
		} else if (op < 98) {
			ck_assert_int_eq(kvs_slab_shrink(s), 0);
		} else {
			ck_assert_int_eq(kvs_slab_flush(s), 0);
		}
		model_check(s, model, n, limit);
	}
	while (nheld)
		ck_assert_int_eq(kvs_slab_free(s, held[--nheld]), 0);
	ck_assert_int_eq(kvs_slab_shrink(s), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 0);
	free(model);
	free(held);
	finish(i, d, s);
}

START_TEST(test_random_ps1)
{
	random_run(_i, 1, 0x1234567ULL, (int)tu_scaled(3000, 500));
}
END_TEST

START_TEST(test_random_ps4)
{
	random_run(_i, 4, 0xabcdefULL, (int)tu_scaled(3000, 500));
}
END_TEST

START_TEST(test_random_ps16)
{
	random_run(_i, 16, 0x5eedULL, (int)tu_scaled(3000, 500));
}
END_TEST

/* ---------------------------------------------------------- threads */

struct thr {
	kvs_slab_t *s;
	uint64_t seed;
	int fails;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	uint32_t held[64], buf[16];
	int n = 0, step;

	for (step = 0; step < tu_scaled(20000, 2000); step++) {
		uint64_t op = tu_rng(&t->seed) % 10;

		if (op < 4 && n < 48) {
			int64_t p = kvs_slab_alloc(t->s);

			if (p >= 0)
				held[n++] = (uint32_t)p;
		} else if (op < 5 && n < 48) {
			if (kvs_slab_alloc_bulk(t->s, 8, buf) == 8)
				for (int k = 0; k < 8; k++)
					held[n++] = buf[k];
		} else if (op < 6 && n > 0 && n < 60) {
			uint32_t p = held[tu_rng(&t->seed) % n];

			if (kvs_slab_ref(t->s, p) == 0)
				held[n++] = p;
			else
				t->fails++;
		} else if (op == 9 && step % 500 == 0) {
			kvs_slab_shrink(t->s);
		} else if (op == 6 && n > 0) {
			/* Up to 8 held entries picked at random: pages alone,
			 * scattered over the slabs, a shared one maybe twice. */
			int m = 1 + (int)(tu_rng(&t->seed) % (n < 8 ? n : 8));

			for (int k = 0; k < m; k++) {
				int j = (int)(tu_rng(&t->seed) % n);

				buf[k] = held[j];
				held[j] = held[--n];
			}
			if (kvs_slab_free_bulk(t->s, (size_t)m, buf) < 0)
				t->fails++;
		} else if (n > 0) {
			int j = (int)(tu_rng(&t->seed) % n);

			if (kvs_slab_free(t->s, held[j]) < 0)
				t->fails++;
			held[j] = held[--n];
		}
	}
	while (n > 0)
		if (kvs_slab_free(t->s, held[--n]) < 0)
			t->fails++;
	kvs_slab_flush(t->s);
	return NULL;
}

START_TEST(test_threads)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_attr_t a;
	kvs_slab_t *s;
	pthread_t th[3];
	struct thr t[3];
	int k;

	base_attr(&a, 64 * 8);
	a.min_empty = 1;
	a.max_empty = 2;
	a.magazine = 16;
	a.flags = KVS_SLAB_F_WORKER;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	for (k = 0; k < 3; k++) {
		t[k].s = s;
		t[k].seed = 77 + k;
		t[k].fails = 0;
		ck_assert_int_eq(pthread_create(&th[k], NULL, thr_main, &t[k]), 0);
	}
	for (k = 0; k < 3; k++) {
		pthread_join(th[k], NULL);
		ck_assert_int_eq(t[k].fails, 0);
	}
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_cpu_cached), 0);
	ck_assert_uint_gt(kvs_slab_stat(s, KVS_SLAB_STAT_alloc_fast), 0);
	finish(_i, d, s);
}
END_TEST


/* ------------------------------------------------ growth and release */

/* A slab the worker is mapping is memory on its way: an allocation that
 * needs it waits instead of failing, and available() counts it.  Slabs of
 * 128 MiB, prefaulted, make the worker's map take tens of milliseconds, and
 * the test gives the worker a moment to start it: then the allocations
 * below find the slab in flight (before this was fixed, they failed with
 * ENOMEM and available() said 0).  Whether the worker is mid-map or done,
 * the assertions hold. */
START_TEST(test_worker_inflight)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_attr_t a;
	kvs_slab_t *s;
	uint32_t *pages, pps;
	int64_t p;
	int round;

	kvs_slab_attr_init(&a);
	a.nbuffers = 2;
	a.token_bytes = tb2;
	/* 64 MiB a buffer, whatever the granularity. */
	a.slab_granules = GRAN >= (64u << 20) ? 1 : (uint32_t)((64u << 20) / GRAN);
	a.capacity_pages = 2 * (uint64_t)a.slab_granules * 64;
	a.min_empty = 1;
	a.max_empty = 2;
	a.chunk_pool = 0;
	a.magazine = 0;
	a.flags = KVS_SLAB_F_WORKER;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	pps = kvs_slab_pages_per_slab(s);
	ck_assert_uint_eq(pps, a.slab_granules * 64);
	pages = malloc(2 * pps * sizeof(*pages));
	ck_assert_ptr_nonnull(pages);
	for (round = 0; round < 3; round++) {
		ck_assert(wait_for(s, KVS_SLAB_STAT_slabs_empty, 1));
		/* All of the first slab: the worker starts on the second. */
		ck_assert_int_eq(kvs_slab_alloc_bulk(s, pps, pages), (int)pps);
		usleep(2000);
		/* In flight, mapped or mappable: never zero. */
		ck_assert_uint_eq(kvs_slab_available(s), pps);
		p = kvs_slab_alloc(s);
		ck_assert_int_ge(p, 0);
		pages[pps] = (uint32_t)p;
		ck_assert_int_eq(kvs_slab_alloc_bulk(s, pps - 1, pages + pps + 1), (int)pps - 1);
		ck_assert_uint_eq(kvs_slab_available(s), 0);
		ck_assert_int_eq(kvs_slab_alloc(s), -1);
		ck_assert_int_eq(errno, ENOMEM);
		ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_alloc_fail), 1);
		ck_assert_int_eq(kvs_slab_free_bulk(s, 2 * pps, pages), 0);
		ck_assert_int_eq(kvs_slab_shrink(s), 0);
		ck_assert_int_eq(kvs_slab_validate(s), 0);
		kvs_slab_destroy(s);
		s = kvs_slab_create(d, &a);
		ck_assert_ptr_nonnull(s);
	}
	free(pages);
	finish(_i, d, s);
}
END_TEST

/* A slab allocator of @a over @d whose 256 pages were allocated and freed
 * again: its slabs are all empty, left to decay. */
static kvs_slab_t *emptied(kvs_drv_t *d, const kvs_slab_attr_t *a)
{
	kvs_slab_t *s = kvs_slab_create(d, a);
	uint32_t pages[256];

	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 256, pages), 256);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 256, pages), 0);
	return s;
}

/* Wait up to @ms for the worker to bring @s down to one empty slab.  A
 * slab leaves slabs_empty when its unmap starts and bytes_mapped when the
 * unmap returns (tens of us on a GPU): wait for both. */
static void wait_decayed(kvs_slab_t *s, int ms)
{
	for (int k = 0; k < ms && (kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty) > 1 ||
				   kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped) > 2 * GRAN); k++)
		usleep(1000);
}

/* Decay of a second and more counts on the coarse clock (a tick's
 * resolution): not before the time, and at it, by reclaim and by the
 * worker, which sleeps past the coarse clock's lag rather than spin. */
START_TEST(test_decay_coarse)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_attr_t a;
	kvs_slab_t *s;

	base_attr(&a, 256);
	a.max_empty = 8; /* the hysteresis never fires */
	a.magazine = 0;
	a.decay_ms = 1000;
	s = emptied(d, &a);
	usleep(500000);
	ck_assert_int_eq(kvs_slab_reclaim(s), 0); /* half the time */
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 4);
	usleep(600000);
	ck_assert_int_eq(kvs_slab_reclaim(s), 4);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_decay_unmaps), 4);
	kvs_slab_destroy(s);

	a.min_empty = 1;
	a.flags = KVS_SLAB_F_WORKER;
	s = emptied(d, &a);
	wait_decayed(s, 3000);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 1);
	ck_assert_uint_ge(kvs_slab_stat(s, KVS_SLAB_STAT_decay_unmaps), 3);
	finish(_i, d, s);
}
END_TEST

/* Frees never call the driver; release waits for its policy: decay
 * gives an idle allocator's memory back, by the worker or by reclaim. */
START_TEST(test_decay)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_attr_t a;
	kvs_slab_t *s;
	uint32_t pages[256];
	uint64_t calls;

	base_attr(&a, 256);
	a.max_empty = 8; /* the hysteresis never fires */
	a.magazine = 0;
	a.decay_ms = 60000;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 256, pages), 256);
	calls = kvs_slab_stat(s, KVS_SLAB_STAT_drv_calls);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 256, pages), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_drv_calls), calls);
	ck_assert_int_eq(kvs_slab_reclaim(s), 0); /* not a minute yet */
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 4);
	kvs_slab_destroy(s);

	a.decay_ms = 1;
	s = emptied(d, &a);
	usleep(5000);
	ck_assert_int_eq(kvs_slab_reclaim(s), 4);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_decay_unmaps), 4);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	kvs_slab_destroy(s);

	/* The worker does it by itself, down to min_empty. */
	a.decay_ms = 20;
	a.min_empty = 1;
	a.flags = KVS_SLAB_F_WORKER;
	s = emptied(d, &a);
	wait_decayed(s, 10000);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 1);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 2 * GRAN);
	ck_assert_uint_ge(kvs_slab_stat(s, KVS_SLAB_STAT_decay_unmaps), 3);
	finish(_i, d, s);
}
END_TEST

/* A chunk the driver refuses to release is parked, not forgotten, and
 * released by a later call. */
START_TEST(test_release_failure_parks)
{
	kvs_drv_t *inner = drv_open(_i, 0), *f = kvs_fault_open(inner);
	kvs_slab_t *s;
	uint32_t pages[64];

	s = mk_plain(f, 256, 0);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 64, pages), 64);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 64, pages), 0);
	kvs_fault_fail_nth(f, KVS_OP_RELEASE, 1, EIO);
	ck_assert_int_eq(kvs_slab_reclaim(s), 1);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_chunks_parked), 1);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_release_fail), 1);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	/* The driver still holds it, and so do the books. */
	ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_bytes_created), GRAN);
	ck_assert_int_eq(kvs_slab_reclaim(s), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_chunks_parked), 0);
	ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_bytes_created), 0);
	ck_assert_int_eq(kvs_slab_validate(s), 0);

	/* destroy reports what the driver kept; close frees it. */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 64, pages), 64);
	kvs_fault_fail_random(f, KVS_OP_RELEASE, 1.0, 1, EIO);
	ck_assert_int_eq(kvs_slab_destroy(s), -1);
	ck_assert_int_eq(errno, EIO);
	ck_assert_uint_gt(kvs_drv_stat(f, KVS_DRV_STAT_bytes_created), 0);
	ck_assert_int_eq(kvs_drv_close(f), 0); /* closes the inner driver too */
	if (strcmp(tu_backends[_i], "cuda") == 0)
		ck_assert_uint_eq(tu_double_query("kvsdbl_live_handles"), 0);
	else
		ck_assert_int_eq(tu_host_chunk_fds(), 0);
}
END_TEST

/* A map whose undo fails leaves a broken slab that is parked and repaired,
 * never one that fails every later allocation with EBUSY. */
START_TEST(test_map_undo_failure)
{
	kvs_drv_t *inner = drv_open(_i, 0), *f = kvs_fault_open(inner);
	kvs_slab_t *s;
	uint32_t pages[128];

	s = mk_plain(f, 128, 1);
	kvs_fault_fail_nth(f, KVS_OP_SET_ACCESS, 1, EIO);
	kvs_fault_fail_nth(f, KVS_OP_UNMAP, 1, EIO);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 10, pages), -1);
	ck_assert_int_eq(errno, EIO);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_broken), 1);
	ck_assert_uint_eq(kvs_slab_available(s), 64);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	kvs_fault_clear(f);
	/* Both slabs' pages: the broken one is repaired to make room. */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 128, pages), 128);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_broken), 0);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 128, pages), 0);
	ck_assert_int_eq(kvs_slab_destroy(s), 0);
	ck_assert_uint_eq(kvs_drv_stat(inner, KVS_DRV_STAT_bytes_mapped), 0);
	ck_assert_uint_eq(kvs_drv_stat(inner, KVS_DRV_STAT_bytes_created), 0);
	ck_assert_int_eq(kvs_drv_close(f), 0);
}
END_TEST

/* An unmap that fails while shrinking parks the slab and its pages where
 * validate sees them, and a later call finishes the job. */
START_TEST(test_unmap_failure_parks)
{
	kvs_drv_t *inner = drv_open(_i, 0), *f = kvs_fault_open(inner);
	kvs_slab_t *s;
	uint32_t pages[128];

	s = mk_plain(f, 128, 1);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 128, pages), 128);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 128, pages), 0);
	kvs_fault_fail_nth(f, KVS_OP_UNMAP, 2, EIO); /* the second buffer */
	ck_assert_int_eq(kvs_slab_shrink(s), -1);
	ck_assert_int_eq(errno, EIO);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_broken), 1);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	/* Its pages are neither free nor held, and not counted as available. */
	ck_assert_uint_eq(kvs_slab_available(s), 64);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped),
			  kvs_drv_stat(f, KVS_DRV_STAT_bytes_mapped) + GRAN);
	ck_assert_int_eq(kvs_slab_shrink(s), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_broken), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 0);
	ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_bytes_mapped), 0);
	ck_assert_uint_eq(kvs_slab_available(s), 128);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	ck_assert_int_eq(kvs_slab_destroy(s), 0);
	ck_assert_int_eq(kvs_drv_close(f), 0);
}
END_TEST

/* free_bulk is all or nothing for any count, duplicates included, and
 * allocates nothing. */
START_TEST(test_free_bulk_all_or_nothing)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk(d, 1, 2048, 0, 0);
	static uint32_t pages[2048], list[3000];
	int k;

	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 2048, pages), 2048);
	for (k = 0; k < 1000; k++)
		ck_assert_int_eq(kvs_slab_ref(s, pages[k]), 0);
	for (k = 0; k < 2048; k++)
		list[k] = pages[k];
	for (k = 0; k < 952; k++)
		list[2048 + k] = pages[k];
	/* Page 6 thrice, one more reference than it has. */
	list[2999] = pages[5];
	list[2048 + 5] = pages[6];
	ck_assert_int_eq(kvs_slab_free_bulk(s, 3000, list), -1);
	ck_assert_int_eq(errno, EINVAL);
	for (k = 0; k < 2048; k++)
		ck_assert_int_eq(kvs_slab_refcount(s, pages[k]), k < 1000 ? 2 : 1);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	list[2999] = pages[5];
	list[2048 + 5] = pages[5];
	ck_assert_int_eq(kvs_slab_free_bulk(s, 3000, list), -1); /* still one too many */
	list[2048 + 5] = pages[999];
	list[2999] = pages[1000];
	ck_assert_int_eq(kvs_slab_free_bulk(s, 3000, list), -1); /* page 1000 twice */
	for (k = 0; k < 2048; k++)
		ck_assert_int_eq(kvs_slab_refcount(s, pages[k]), k < 1000 ? 2 : 1);
	list[2048 + 5] = pages[5];
	list[2999] = pages[999];
	ck_assert_int_eq(kvs_slab_free_bulk(s, 3000, list), 0);
	/* Pages 951..998 were listed once (951's second entry became 999). */
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 48);
	for (k = 951; k < 999; k++) {
		ck_assert_int_eq(kvs_slab_refcount(s, pages[k]), 1);
		ck_assert_int_eq(kvs_slab_free(s, pages[k]), 0);
	}
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 0);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	finish(_i, d, s);
}
END_TEST


/* ------------------------------------------------- bulk paths in runs */

/* Page size 1, four granules a slab (256 pages: four bitmap words), @cap
 * pages, magazine @mag. */
static kvs_slab_t *mk_runs(kvs_drv_t *d, uint64_t cap, uint32_t mag)
{
	kvs_slab_attr_t a;
	kvs_slab_t *s;

	base_attr(&a, cap);
	a.slab_granules = 4;
	a.magazine = mag;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(kvs_slab_pages_per_slab(s), 256);
	return s;
}

/* Every count is what @want says, objects agrees, and validate passes. */
static void check_counts(kvs_slab_t *s, const uint16_t *want, uint32_t n)
{
	uint64_t held = 0;
	uint32_t p;

	for (p = 0; p < n; p++) {
		ck_assert_msg(kvs_slab_refcount(s, p) == want[p], "page %u: count %d, want %u", p,
			      kvs_slab_refcount(s, p), want[p]);
		held += want[p] != 0;
	}
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), held);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
}

/* Pages [@first, @first + @n) into @list; returns the next slot. */
static size_t put_run(uint32_t *list, size_t k, uint32_t first, uint32_t n)
{
	while (n--)
		list[k++] = first++;
	return k;
}

/* Bulk allocation takes whole bitmap words and runs of partial ones, lowest
 * first within the fullest slab: the pages are distinct, held once, and the
 * counts agree with validation. */
START_TEST(test_bulk_alloc_words)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk_runs(d, 1024, 0);
	static uint32_t pages[1024], more[8];
	static uint16_t want[1024];
	uint32_t k;

	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 5, pages), 5);	/* part of word 0 */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 200, pages + 5), 200); /* words 0..3 */
	for (k = 0; k < 205; k++) {
		ck_assert_uint_eq(pages[k], k);
		want[k] = 1;
	}
	check_counts(s, want, 1024);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_alloc_slow), 205);
	/* Holes in words 1 and 2: the next allocation fills them, lowest
	 * first, before the rest of the slab. */
	more[0] = 70;
	more[1] = 71;
	more[2] = 90;
	more[3] = 130;
	ck_assert_int_eq(kvs_slab_free_bulk(s, 4, more), 0);
	want[70] = want[71] = want[90] = want[130] = 0;
	check_counts(s, want, 1024);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 6, more), 6);
	ck_assert_uint_eq(more[0], 70);
	ck_assert_uint_eq(more[1], 71);
	ck_assert_uint_eq(more[2], 90);
	ck_assert_uint_eq(more[3], 130);
	ck_assert_uint_eq(more[4], 205);
	ck_assert_uint_eq(more[5], 206);
	want[70] = want[71] = want[90] = want[130] = want[205] = want[206] = 1;
	check_counts(s, want, 1024);
	/* The rest of the allocator: 51 pages of slab 0 and three slabs of
	 * whole words, all distinct. */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 1024 - 207, pages), 1024 - 207);
	for (k = 0; k < 1024 - 207; k++) {
		ck_assert_uint_lt(pages[k], 1024);
		ck_assert_uint_eq(want[pages[k]], 0);
		want[pages[k]] = 1;
	}
	check_counts(s, want, 1024);
	errno = 0;
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 1, more), -1);
	ck_assert_int_eq(errno, ENOMEM);
	check_counts(s, want, 1024);
	for (k = 0; k < 1024; k++)
		pages[k] = k;
	ck_assert_int_eq(kvs_slab_free_bulk(s, 1024, pages), 0);
	memset(want, 0, sizeof(want));
	check_counts(s, want, 1024);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 4);
	finish(_i, d, s);
}
END_TEST

/* Bulk free of runs that cross bitmap words and slabs and end mid-word,
 * mixed with scattered pages and shared ones. */
START_TEST(test_bulk_free_runs)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk_runs(d, 1024, 0);
	static uint32_t pages[1024], list[2048];
	static uint16_t want[1024];
	uint64_t free_slow;
	size_t n = 0;
	uint32_t k;

	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 1024, pages), 1024);
	for (k = 0; k < 1024; k++)
		want[k] = 1;
	for (k = 600; k < 610; k++) {	/* shared: a run of them drops to 1 */
		ck_assert_int_eq(kvs_slab_ref(s, k), 0);
		want[k] = 2;
	}
	free_slow = kvs_slab_stat(s, KVS_SLAB_STAT_free_slow);
	n = put_run(list, n, 30, 170);		/* words 0..3 of slab 0, ends mid-word */
	n = put_run(list, n, 250, 350);		/* slab 0 -> 1 -> 2, ends mid-word */
	n = put_run(list, n, 700, 1);		/* scattered */
	n = put_run(list, n, 702, 1);
	n = put_run(list, n, 705, 2);
	n = put_run(list, n, 1023, 1);		/* the last page */
	n = put_run(list, n, 605, 10);		/* half shared */
	n = put_run(list, n, 3, 1);
	for (k = 0; k < n; k++)
		want[list[k]]--;
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), 0);
	check_counts(s, want, 1024);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_free_slow) - free_slow, n - 5);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects_free), n - 5);
	/* Slab 1 is empty, the others partial. */
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 1);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_partial), 3);
	/* Allocating them again gives the freed pages back, no others. */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, n - 5, list), (int)(n - 5));
	for (k = 0; k < n - 5; k++) {
		ck_assert_uint_eq(want[list[k]], 0);
		want[list[k]] = 1;
	}
	check_counts(s, want, 1024);
	for (k = 0; k < 1024; k++)
		list[k] = k;
	for (k = 600; k < 605; k++)
		list[1024 + k - 600] = k;
	ck_assert_int_eq(kvs_slab_free_bulk(s, 1029, list), 0);
	memset(want, 0, sizeof(want));
	check_counts(s, want, 1024);
	finish(_i, d, s);
}
END_TEST

/* A page listed twice: freed at count 2, refused at count 1 with nothing
 * dropped; a bad entry at the end of a long run drops nothing. */
START_TEST(test_bulk_free_twice_and_bad_tail)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk_runs(d, 1024, 0);
	static uint32_t pages[1024], list[1100];
	static uint16_t want[1024];
	uint64_t free_slow;
	size_t n;
	uint32_t k;

	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 1000, pages), 1000);
	for (k = 0; k < 1000; k++)
		want[k] = 1;
	free_slow = kvs_slab_stat(s, KVS_SLAB_STAT_free_slow);
	/* Count 1 listed twice: inside a long run and after it. */
	n = put_run(list, 0, 10, 500);
	list[n++] = 300;
	errno = 0;
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), -1);
	ck_assert_int_eq(errno, EINVAL);
	check_counts(s, want, 1024);
	/* Twice in a row, and twice apart in two runs. */
	list[0] = 7;
	list[1] = 7;
	ck_assert_int_eq(kvs_slab_free_bulk(s, 2, list), -1);
	n = put_run(list, 0, 100, 50);
	n = put_run(list, n, 140, 50);
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), -1);
	check_counts(s, want, 1024);
	/* The same lists with the pages shared: freed. */
	ck_assert_int_eq(kvs_slab_ref(s, 300), 0);
	ck_assert_int_eq(kvs_slab_ref(s, 7), 0);
	for (k = 140; k < 150; k++)
		ck_assert_int_eq(kvs_slab_ref(s, k), 0);
	list[0] = 7;
	list[1] = 7;
	ck_assert_int_eq(kvs_slab_free_bulk(s, 2, list), 0);
	want[7] = 0;
	n = put_run(list, 0, 100, 50);
	n = put_run(list, n, 140, 50);
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), 0);
	for (k = 100; k < 190; k++)
		want[k] = 0;
	n = put_run(list, 0, 200, 200);
	list[n++] = 300;
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), 0);
	for (k = 200; k < 400; k++)
		want[k] = 0;
	check_counts(s, want, 1024);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_free_slow) - free_slow, 1 + 90 + 200);
	/* A bad entry at the end of a long run: out of range, a free page,
	 * a page past the allocator (a run running off its end). */
	free_slow = kvs_slab_stat(s, KVS_SLAB_STAT_free_slow);
	n = put_run(list, 0, 400, 600);
	list[n++] = 1024;
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), -1);
	list[n - 1] = 1010;	/* never allocated */
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), -1);
	list[n - 1] = 100;	/* freed above */
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), -1);
	list[n - 1] = UINT32_MAX;
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), -1);
	n = put_run(list, 0, 1000, 30);	/* 1000..1029: past the allocated, and the end */
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), -1);
	n = put_run(list, 0, 990, 10);
	n = put_run(list, n, UINT32_MAX - 1, 3);	/* wraps to 0 */
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), -1);
	ck_assert_int_eq(errno, EINVAL);
	check_counts(s, want, 1024);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_free_slow), free_slow);
	n = put_run(list, 0, 400, 600);
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), 0);
	n = put_run(list, 0, 0, 7);
	n = put_run(list, n, 8, 92);
	n = put_run(list, n, 190, 10);
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), 0);
	memset(want, 0, sizeof(want));
	check_counts(s, want, 1024);
	(void)pages;
	finish(_i, d, s);
}
END_TEST

/*
 * A fragmented pool: every slab full but for single-page holes (one word
 * holding one, words holding two apart, a pair, the first and last page
 * of a slab), fewer holes in some slabs than in others.  Bulk allocation
 * takes the holes of the fullest slab first, lowest first, without taking
 * a held page; a bulk free of them in any order (pages alone, runs, more
 * than 64 of each, a page listed twice) gives each back once; a bad page
 * alone anywhere in the list drops nothing.
 */
START_TEST(test_bulk_holes)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk_runs(d, 1024, 0);
	/* Holes per slab: slab 1 fullest (bucket 63), then 2, 3, 0. */
	static const uint32_t holes[] = {
		/* slab 0: 13 */ 0, 5, 64, 70, 100, 101, 130, 140, 150, 191, 192, 254, 255,
		/* slab 1: 1 */ 256 + 77,
		/* slab 2: 5 */ 512 + 0, 512 + 63, 512 + 64, 512 + 200, 512 + 255,
		/* slab 3: 9 */ 768 + 1, 768 + 3, 768 + 40, 768 + 90, 768 + 91, 768 + 92, 768 + 128,
		768 + 129, 768 + 250,
	};
	static const uint32_t order[] = {1, 2, 3, 0};
	enum { NH = sizeof(holes) / sizeof(holes[0]) };
	static uint32_t pages[1024], list[1200], expect[NH];
	static uint16_t want[1024];
	uint32_t k, j, n = 0, ne = 0;

	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 1024, pages), 1024);
	for (k = 0; k < 1024; k++)
		want[k] = 1;
	for (k = 0; k < NH; k++) {
		/* Each page alone: a list of holes with gaps between them. */
		ck_assert_int_eq(kvs_slab_free_bulk(s, 1, &holes[k]), 0);
		want[holes[k]] = 0;
	}
	check_counts(s, want, 1024);
	for (j = 0; j < 4; j++)
		for (k = 0; k < NH; k++)
			if (holes[k] / 256 == order[j])
				expect[ne++] = holes[k];
	ck_assert_uint_eq(ne, NH);
	/* In two calls, the first ending mid-slab and mid-word. */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 9, pages), 9);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, NH - 9, pages + 9), NH - 9);
	for (k = 0; k < NH; k++) {
		ck_assert_uint_eq(pages[k], expect[k]);
		want[pages[k]] = 1;
	}
	check_counts(s, want, 1024);
	errno = 0;
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 1, list), -1);
	ck_assert_int_eq(errno, ENOMEM);

	/* Freed backwards (no two adjacent entries in a run), a bad page
	 * alone at the front, in the middle, at the end: nothing dropped. */
	for (k = 0; k < NH; k++)
		list[k + 1] = expect[NH - 1 - k];
	list[0] = 1024;
	ck_assert_int_eq(kvs_slab_free_bulk(s, NH + 1, list), -1);
	list[0] = list[NH / 2 + 1];		/* held once, listed twice */
	ck_assert_int_eq(kvs_slab_free_bulk(s, NH + 1, list), -1);
	list[NH + 1] = UINT32_MAX;
	ck_assert_int_eq(kvs_slab_free_bulk(s, NH + 2, list + 1), -1);
	ck_assert_int_eq(errno, EINVAL);
	check_counts(s, want, 1024);
	ck_assert_int_eq(kvs_slab_free_bulk(s, NH, list + 1), 0);
	for (k = 0; k < NH; k++)
		want[expect[k]] = 0;
	check_counts(s, want, 1024);
	/* The same order of slabs and pages again. */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, NH, pages), NH);
	for (k = 0; k < NH; k++) {
		ck_assert_uint_eq(pages[k], expect[k]);
		want[pages[k]] = 1;
	}
	check_counts(s, want, 1024);

	/* 100 pages alone then 70 runs of two at count 1 and a run shared
	 * (past the 64th run: dropped page by page), then a page alone listed
	 * twice at count 2. */
	for (k = 0; k < 100; k++)
		list[n++] = 2 * k;			/* 0, 2, ..., 198 */
	for (k = 0; k < 70; k++)
		n = (uint32_t)put_run(list, n, 300 + 3 * k, 2);	/* 300..509 */
	for (k = 600; k < 610; k++) {
		ck_assert_int_eq(kvs_slab_ref(s, k), 0);
		want[k]++;
	}
	n = (uint32_t)put_run(list, n, 600, 10);
	ck_assert_int_eq(kvs_slab_ref(s, 700), 0);
	want[700]++;
	list[n++] = 700;
	list[n++] = 5;
	list[n++] = 700;
	for (k = 0; k < n; k++)
		want[list[k]]--;
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), 0);
	check_counts(s, want, 1024);
	ck_assert_uint_eq(kvs_slab_refcount(s, 700), 0);
	ck_assert_uint_eq(kvs_slab_refcount(s, 605), 1);
	/* Everything back: the allocator is empty. */
	n = 0;
	for (k = 0; k < 1024; k++)
		for (j = 0; j < want[k]; j++)
			list[n++] = k;
	ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), 0);
	memset(want, 0, sizeof(want));
	check_counts(s, want, 1024);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty), 4);
	finish(_i, d, s);
}
END_TEST

static uint64_t xs(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/*
 * A pool like bench_slab's scattered case, smaller: every slab full but for
 * single-page holes, one in each 64 pages at a seeded offset (never a
 * group's last, so no two touch), and in a few slabs a word with two holes
 * or a word all free.  One bulk allocation of as many pages as are free
 * hands out exactly the free pages, each once, each at count 1, and the
 * next page fails; freeing them one entry a page (no runs) restores every
 * slab: the same lists and counts (validate, the list gauges), and the same
 * pages in the same order from the next allocation.  Then a bulk free of
 * the holes where the 51st is shared (count 2) and listed again at the
 * end: the 50 before it, dropped to 0 while the call saw no shared page,
 * still go back, once each, and the shared one at its second entry.
 */
START_TEST(test_bulk_holes_many)
{
	enum { NSLAB = 24, CAP = 256 * NSLAB };
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk_runs(d, CAP, 0);
	static uint32_t all[CAP], holes[CAP], got[CAP], again[CAP], list[CAP + 1];
	static uint8_t seen[CAP];
	static uint16_t want[CAP];
	uint64_t x = 0x9e3779b97f4a7c15ULL, partial, full;
	uint32_t k, nh = 0;

	memset(seen, 0, sizeof(seen));	/* static: CK_FORK=no runs it twice */
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, CAP, all), CAP);
	for (k = 0; k < CAP; k++)
		want[k] = 1;
	for (k = 0; k < CAP; k += 64) {
		holes[nh++] = k + (uint32_t)(xs(&x) % 63);
		if (k / 256 % 5 == 1 && k % 256 == 64) {	/* two in a word */
			holes[nh] = holes[nh - 1] < k + 32 ? k + 40 : k + 8;
			nh++;
		}
	}
	for (k = 0; k < nh; k++) {
		ck_assert_int_eq(kvs_slab_free(s, holes[k]), 0);
		want[holes[k]] = 0;
	}
	/* Slab 7: a word all free besides its hole's word. */
	for (k = 7 * 256 + 128; k < 7 * 256 + 192; k++) {
		if (want[k]) {
			ck_assert_int_eq(kvs_slab_free(s, k), 0);
			want[k] = 0;
			holes[nh++] = k;
		}
	}
	ck_assert_int_eq(kvs_slab_flush(s), 0);
	check_counts(s, want, CAP);
	partial = kvs_slab_stat(s, KVS_SLAB_STAT_slabs_partial);
	full = kvs_slab_stat(s, KVS_SLAB_STAT_slabs_full);
	ck_assert_uint_eq(partial, NSLAB);

	ck_assert_int_eq(kvs_slab_alloc_bulk(s, nh, got), (int)nh);
	for (k = 0; k < nh; k++) {
		ck_assert_uint_lt(got[k], CAP);
		ck_assert_msg(!seen[got[k]], "page %u handed out twice", got[k]);
		ck_assert_msg(want[got[k]] == 0, "page %u was held", got[k]);
		seen[got[k]] = 1;
		want[got[k]] = 1;
	}
	for (k = 0; k < nh; k++)
		ck_assert_msg(seen[holes[k]], "hole %u not handed out", holes[k]);
	check_counts(s, want, CAP);
	errno = 0;
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 1, list), -1);
	ck_assert_int_eq(errno, ENOMEM);

	/* Back in reverse, every entry a page alone. */
	for (k = 0; k < nh; k++)
		list[k] = got[nh - 1 - k];
	ck_assert_int_eq(kvs_slab_free_bulk(s, nh, list), 0);
	for (k = 0; k < nh; k++)
		want[got[k]] = 0;
	check_counts(s, want, CAP);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_partial), partial);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_full), full);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, nh, again), (int)nh);
	ck_assert_mem_eq(again, got, nh * sizeof(got[0]));

	/* The 51st shared, listed again at the end. */
	ck_assert_int_gt(nh, 60);
	ck_assert_int_eq(kvs_slab_ref(s, got[50]), 0);
	memcpy(list, got, nh * sizeof(got[0]));
	list[nh] = got[50];
	ck_assert_int_eq(kvs_slab_free_bulk(s, nh + 1, list), 0);
	check_counts(s, want, CAP);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_slabs_partial), partial);
	for (k = 0; k < CAP; k++)
		want[k] = 0;
	for (k = 0; k < CAP; k++)
		if (kvs_slab_refcount(s, k) == 1)
			ck_assert_int_eq(kvs_slab_free(s, k), 0);
	ck_assert_int_eq(kvs_slab_flush(s), 0);
	check_counts(s, want, CAP);
	finish(_i, d, s);
}
END_TEST

/*
 * kvs_slab_shrink() on one thread asks every other thread's cache back: each
 * gives it back on its next call, by the slow paths, even though its
 * magazine has room and pages (the fast paths see the drain).  Two threads
 * in lock step (a barrier, no timing).
 */
struct drain_thr {
	kvs_slab_t *s;
	pthread_barrier_t *bar;
	uint64_t slow[4];	/* alloc_slow, free_slow before and after */
};

static void *drain_main(void *arg)
{
	struct drain_thr *t = arg;
	int64_t p, q;

	/* Fill this thread's cache: the first allocation refills it. */
	p = kvs_slab_alloc(t->s);
	q = kvs_slab_alloc(t->s);
	if (p < 0 || q < 0 || kvs_slab_free(t->s, (uint32_t)p) < 0)
		return NULL;
	pthread_barrier_wait(t->bar);	/* the main thread shrinks */
	pthread_barrier_wait(t->bar);
	t->slow[0] = kvs_slab_stat(t->s, KVS_SLAB_STAT_free_slow);
	if (kvs_slab_free(t->s, (uint32_t)q) < 0)
		return NULL;
	t->slow[1] = kvs_slab_stat(t->s, KVS_SLAB_STAT_free_slow);
	pthread_barrier_wait(t->bar);	/* and again */
	pthread_barrier_wait(t->bar);
	t->slow[2] = kvs_slab_stat(t->s, KVS_SLAB_STAT_alloc_slow);
	p = kvs_slab_alloc(t->s);
	t->slow[3] = kvs_slab_stat(t->s, KVS_SLAB_STAT_alloc_slow);
	if (p < 0 || kvs_slab_free(t->s, (uint32_t)p) < 0)
		return NULL;
	kvs_slab_flush(t->s);
	return t;
}

START_TEST(test_drain_other_thread)
{
	kvs_drv_t *d = drv_open(_i, 0);
	kvs_slab_t *s = mk(d, 1, 64 * 4, 16, 0);
	pthread_barrier_t bar;
	struct drain_thr t = {.s = s, .bar = &bar};
	pthread_t th;
	void *ret;

	ck_assert_int_eq(pthread_barrier_init(&bar, NULL, 2), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, drain_main, &t), 0);
	pthread_barrier_wait(&bar);
	/* The other thread holds one page and caches some. */
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 1);
	ck_assert_int_eq(kvs_slab_shrink(s), 0);
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar);
	/* Its free went the slow way and gave its cache back. */
	ck_assert_uint_eq(t.slow[1] - t.slow[0], 1);
	ck_assert_int_eq(kvs_slab_shrink(s), 0);
	pthread_barrier_wait(&bar);
	ck_assert_int_eq(pthread_join(th, &ret), 0);
	ck_assert_ptr_eq(ret, &t);
	ck_assert_uint_eq(t.slow[3] - t.slow[2], 1);
	pthread_barrier_destroy(&bar);
	finish(_i, d, s);
}
END_TEST

/*
 * Many random operations against a model (an array of counts): bulk and
 * single allocation, references, bulk frees of runs, scattered pages and
 * repeats, some with a bad entry somewhere (refused, nothing changes).
 * With @mag, the per-thread cache takes part.
 */
static void random_model(int i, uint32_t mag, uint64_t seed)
{
	enum { CAP = 1024, OPS = 3000 };
	kvs_drv_t *d = drv_open(i, 0);
	kvs_slab_t *s = mk_runs(d, CAP, mag);
	static uint16_t want[CAP];
	static uint32_t list[4 * CAP], held[CAP];
	uint64_t x = seed;
	int op;

	memset(want, 0, sizeof(want));
	for (op = 0; op < OPS; op++) {
		uint32_t nheld = 0, p, k, r = (uint32_t)(xs(&x) % 100);
		size_t n = 0;

		for (p = 0; p < CAP; p++)
			if (want[p])
				held[nheld++] = p;
		if (r < 30) {			/* bulk allocation */
			uint32_t want_n = 1 + (uint32_t)(xs(&x) % 300);
			int rc = kvs_slab_alloc_bulk(s, want_n, list);

			if (rc < 0) {
				ck_assert_int_eq(errno, ENOMEM);
				ck_assert_uint_gt(want_n, CAP - nheld);
				continue;
			}
			for (k = 0; k < want_n; k++) {
				ck_assert_uint_lt(list[k], CAP);
				ck_assert_uint_eq(want[list[k]], 0);
				want[list[k]] = 1;
			}
		} else if (r < 38) {		/* single pages */
			int64_t pg = kvs_slab_alloc(s);

			if (pg >= 0) {
				ck_assert_uint_eq(want[pg], 0);
				want[pg] = 1;
			}
		} else if (r < 48 && nheld) {	/* references */
			for (k = 0; k < 20; k++) {
				p = held[xs(&x) % nheld];
				ck_assert_int_eq(kvs_slab_ref(s, p), 0);
				want[p]++;
			}
		} else if (r < 52 && nheld) {	/* single free */
			p = held[xs(&x) % nheld];
			ck_assert_int_eq(kvs_slab_free(s, p), 0);
			want[p]--;
		} else if (nheld) {		/* bulk free */
			static uint16_t drop[CAP];
			bool bad = xs(&x) % 4 == 0;

			memset(drop, 0, sizeof(drop));
			while (n < 2 * CAP && xs(&x) % 8) {
				uint32_t at = (uint32_t)(xs(&x) % nheld), len;

				len = 1 + (uint32_t)(xs(&x) % (xs(&x) % 4 ? 8 : 200));
				/* A run of held pages, consecutive while they are. */
				for (k = 0; k < len && at + k < nheld; k++) {
					p = held[at + k];
					if (k && p != held[at + k - 1] + 1)
						break;
					if (drop[p] >= want[p])
						break;
					drop[p]++;
					list[n++] = p;
				}
			}
			if (bad) {
				/* One entry too many, anywhere. */
				uint32_t where = n ? (uint32_t)(xs(&x) % (n + 1)) : 0;
				uint32_t what = (uint32_t)(xs(&x) % (CAP + 10));

				if (what < CAP && drop[what] < want[what]) {
					bad = false;
				} else {
					memmove(list + where + 1, list + where,
						(n - where) * sizeof(*list));
					list[where] = what;
					n++;
				}
			}
			errno = 0;
			if (bad) {
				ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), -1);
				ck_assert_int_eq(errno, EINVAL);
			} else {
				ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), 0);
				for (k = 0; k < n; k++)
					want[list[k]]--;
			}
		}
		if (op % 50 == 0 || op == OPS - 1)
			check_counts(s, want, CAP);
		else
			for (k = 0; k < 16; k++) {
				p = (uint32_t)(xs(&x) % CAP);
				ck_assert_int_eq(kvs_slab_refcount(s, p), want[p]);
			}
	}
	for (;;) {			/* everything back */
		size_t n = 0;
		uint32_t p;

		for (p = 0; p < CAP; p++)
			if (want[p])
				list[n++] = p;
		if (!n)
			break;
		ck_assert_int_eq(kvs_slab_free_bulk(s, n, list), 0);
		for (p = 0; p < n; p++)
			want[list[p]]--;
	}
	check_counts(s, want, CAP);
	ck_assert_int_eq(kvs_slab_flush(s), 0);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects_free),
			  kvs_slab_stat(s, KVS_SLAB_STAT_total_objects));
	finish(i, d, s);
}

START_TEST(test_bulk_random_model)
{
	random_model(_i, 0, 0x9e3779b97f4a7c15ULL);
}
END_TEST

START_TEST(test_bulk_random_model_mag)
{
	random_model(_i, 32, 0x2545f4914f6cdd1dULL);
}
END_TEST


/* ------------------------------------------------------ the fence rule */

/* Kernels reading each run of consecutive pages of @pages in both
 * buffers, for @ns nanoseconds, on @stream of the cuda double. */
static void read_pages(kvs_slab_t *s, uint64_t stream, uint32_t *pages, int n,
		       unsigned long long ns)
{
	int k = 0, b;

	while (k < n) {
		int j = k + 1;

		while (j < n && pages[j] == pages[j - 1] + 1)
			j++;
		for (b = 0; b < 2; b++)
			ck_assert_int_eq(tu_dbl_kernel(stream, kvs_slab_buffer(s, (uint32_t)b) +
								 (uint64_t)pages[k] * tb2[b],
						       (size_t)(j - k) * tb2[b], ns),
					 0);
		k = j;
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int lie_record(void *arg, uint64_t *token)
{
	(void)arg;
	*token = 7;
	return 0;
}

static int lie_query(void *arg, uint64_t token)
{
	(void)arg;
	(void)token;
	return 1; /* "the device is done": a fence that waits for nothing */
}

/* On the cuda double, whose simulated kernels run on a stream for a time
 * and whose unmap of memory a running kernel reads poisons the context:
 * a slab freed under a running kernel is unmapped only once a fence on the
 * engine's stream says the kernel is done.  A fence that lies is caught,
 * which shows the test can fail. */
START_TEST(test_fence_rule)
{
	if (TU_NEED_DOUBLE(_i, "needs a stream made through the double's helpers"))
		return;
	kvs_drv_t *d = drv_open(_i, 0);
	uint64_t stream = tu_dbl_stream_create();
	kvs_slab_attr_t a;
	kvs_slab_t *s;
	uint32_t pages[64];
	double t0;
	int rc;

	ck_assert_uint_ne(stream, 0);
	tu_dbl_clear_sticky();
	base_attr(&a, 256);
	a.max_empty = 0;
	a.chunk_pool = 0;
	a.magazine = 0;
	a.decay_ms = 0;
	a.streams = &stream;
	a.nstreams = 1;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 64, pages), 64);
	t0 = tu_seconds();
	read_pages(s, stream, pages, 64, 300000000ULL); /* 300 ms */
	ck_assert_int_eq(kvs_slab_free_bulk(s, 64, pages), 0);
	rc = kvs_slab_reclaim(s);
	if (tu_seconds() - t0 < 0.2) /* the kernel surely still runs */
		ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(tu_dbl_faults(), 0);
	/* shrink waits for the fence, then unmaps. */
	ck_assert_int_eq(kvs_slab_shrink(s), 0);
	ck_assert_double_ge(tu_seconds() - t0, 0.25);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped), 0);
	ck_assert_uint_ge(kvs_slab_stat(s, KVS_SLAB_STAT_fences), 1);
	ck_assert_uint_eq(tu_dbl_faults(), 0);
	ck_assert_int_eq(tu_dbl_sticky(), 0);
	ck_assert_int_eq(kvs_slab_destroy(s), 0);

	/* The same with a fence that waits for nothing: the device faults. */
	a.streams = NULL;
	a.nstreams = 0;
	a.fence.record = lie_record;
	a.fence.query = lie_query;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 64, pages), 64);
	/* 5 s: surely still running at the unmap, however loaded the machine
	 * (the fault drops it, so nothing waits for it). */
	read_pages(s, stream, pages, 64, 5000000000ULL);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 64, pages), 0);
	(void)kvs_slab_reclaim(s);
	ck_assert_uint_ge(tu_dbl_faults(), 1);
	ck_assert_int_eq(tu_dbl_sticky(), 700);
	tu_dbl_clear_sticky();
	(void)kvs_slab_destroy(s);
	tu_dbl_stream_destroy(stream);
	finish(_i, d, NULL);
}
END_TEST

/* The fence rule under churn with the worker on: batches of pages read by
 * kernels of random length, freed while the kernels run, slabs emptied and
 * given back by the worker all along.  The device never faults. */
START_TEST(test_fence_churn)
{
	if (TU_NEED_DOUBLE(_i, "needs a stream made through the double's helpers"))
		return;
	kvs_drv_t *d = drv_open(_i, 0);
	uint64_t stream = tu_dbl_stream_create(), x = 0x9e3779b97f4a7c15ULL;
	kvs_slab_attr_t a;
	kvs_slab_t *s;
	static uint32_t pages[2][256];
	int n[2] = {0, 0}, it, iters = (int)tu_scaled(400, 40);
	double t_end = tu_seconds() + 20;

	ck_assert_uint_ne(stream, 0);
	tu_dbl_clear_sticky();
	base_attr(&a, 64 * 16);
	a.min_empty = 1;
	a.max_empty = 1;
	a.chunk_pool = 1;
	a.magazine = 8;
	a.decay_ms = 1;
	a.streams = &stream;
	a.nstreams = 1;
	a.flags = KVS_SLAB_F_WORKER;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	for (it = 0; it < iters && tu_seconds() < t_end; it++) {
		int cur = it & 1, k;

		/* Free the batch before last: its kernels may still run. */
		ck_assert_int_eq(kvs_slab_free_bulk(s, (size_t)n[cur], pages[cur]), 0);
		n[cur] = 1 + (int)(tu_rng(&x) % 256);
		ck_assert_int_eq(kvs_slab_alloc_bulk(s, (size_t)n[cur], pages[cur]), n[cur]);
		qsort(pages[cur], (size_t)n[cur], sizeof(uint32_t), cmp_u32);
		read_pages(s, stream, pages[cur], n[cur], 100000 + tu_rng(&x) % 2000000);
		if (it % 3 == 0) {
			/* And one page through the per-thread cache. */
			int64_t p = kvs_slab_alloc(s);

			ck_assert_int_ge(p, 0);
			k = (int)p;
			read_pages(s, stream, (uint32_t *)&k, 1, 500000);
			ck_assert_int_eq(kvs_slab_free(s, (uint32_t)p), 0);
		}
		if (it % 50 == 0)
			usleep(3000); /* let the worker catch up: slabs empty and go */
		ck_assert_uint_eq(tu_dbl_faults(), 0);
	}
	ck_assert_int_eq(kvs_slab_free_bulk(s, (size_t)n[0], pages[0]), 0);
	ck_assert_int_eq(kvs_slab_free_bulk(s, (size_t)n[1], pages[1]), 0);
	ck_assert_int_eq(kvs_slab_flush(s), 0);
	ck_assert_int_eq(kvs_slab_shrink(s), 0);
	ck_assert_uint_gt(kvs_slab_stat(s, KVS_SLAB_STAT_slab_unmaps), 0);
	ck_assert_uint_gt(kvs_slab_stat(s, KVS_SLAB_STAT_fences), 0);
	ck_assert_uint_eq(tu_dbl_faults(), 0);
	ck_assert_int_eq(tu_dbl_sticky(), 0);
	/* The streams outlive the allocator: destroy fences on them too. */
	finish(_i, d, s);
	tu_dbl_stream_destroy(stream);
}
END_TEST

static Suite *slab_suite(void)
{
	Suite *s = suite_create("slab");
	TCase *tc = tcase_create("behaviour");
	int nb = tu_nbackends();

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_geometry_and_basics, 0, nb);
	tcase_add_loop_test(tc, test_data_survives_churn, 0, nb);
	tcase_add_loop_test(tc, test_refcounts, 0, nb);
	tcase_add_loop_test(tc, test_shared_bitmap_words, 0, nb);
	tcase_add_loop_test(tc, test_contiguous, 0, nb);
	tcase_add_loop_test(tc, test_limits, 0, nb);
	tcase_add_loop_test(tc, test_fullest_first, 0, nb);
	tcase_add_loop_test(tc, test_shrinker_hysteresis, 0, nb);
	tcase_add_loop_test(tc, test_static_mode, 0, nb);
	tcase_add_loop_test(tc, test_fault_during_growth, 0, nb);
	tcase_add_loop_test(tc, test_worker_premaps, 0, nb);
	suite_add_tcase(s, tc);

	tc = tcase_create("release");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_worker_inflight, 0, nb);
	tcase_add_loop_test(tc, test_decay, 0, nb);
	tcase_add_loop_test(tc, test_decay_coarse, 0, nb);
	tcase_add_loop_test(tc, test_release_failure_parks, 0, nb);
	tcase_add_loop_test(tc, test_map_undo_failure, 0, nb);
	tcase_add_loop_test(tc, test_unmap_failure_parks, 0, nb);
	tcase_add_loop_test(tc, test_free_bulk_all_or_nothing, 0, nb);
	suite_add_tcase(s, tc);

	tc = tcase_create("runs");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_bulk_alloc_words, 0, nb);
	tcase_add_loop_test(tc, test_bulk_free_runs, 0, nb);
	tcase_add_loop_test(tc, test_bulk_free_twice_and_bad_tail, 0, nb);
	tcase_add_loop_test(tc, test_bulk_holes, 0, nb);
	tcase_add_loop_test(tc, test_bulk_holes_many, 0, nb);
	tcase_add_loop_test(tc, test_drain_other_thread, 0, nb);
	tcase_add_loop_test(tc, test_bulk_random_model, 0, nb);
	tcase_add_loop_test(tc, test_bulk_random_model_mag, 0, nb);
	suite_add_tcase(s, tc);

	if (nb > 1) {
		/* The fence rule needs the double's simulated kernels. */
		tc = tcase_create("fence");
		tcase_set_timeout(tc, 120);
		tcase_add_loop_test(tc, test_fence_rule, 1, 2);
		tcase_add_loop_test(tc, test_fence_churn, 1, 2);
		suite_add_tcase(s, tc);
	}

	tc = tcase_create("random");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_random_ps1, 0, nb);
	tcase_add_loop_test(tc, test_random_ps4, 0, nb);
	tcase_add_loop_test(tc, test_random_ps16, 0, nb);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_threads, 0, nb);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* Unless the caller chose one (make check-gpu's plumbing check). */
	setenv("KVSLAB_DOUBLE_GRANULARITY", "65536", 0);
	tb2[0] = tb2[1] = GRAN / 64;
	return tu_run(slab_suite());
}
