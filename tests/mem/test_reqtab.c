/* SPDX-License-Identifier: MIT */
/*
 * tests/mem/test_reqtab.c - the request table and its lock-free slot
 * allocator, on every backend.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* The granularity asked of the host backend and of the double; the
 * expectations take the driver's own (kvs_drv_granularity()), which on a
 * real GPU is 2 MiB. */
#define GRAN (64 * 1024)

/* @bytes rounded up to the driver's granularity. */
static size_t rounded(kvs_drv_t *d, size_t bytes)
{
	size_t g = kvs_drv_granularity(d);

	ck_assert_uint_gt(g, 0);
	return (bytes + g - 1) / g * g;
}

static kvs_reqtab_t *mk(kvs_drv_t *d, uint32_t reqs, uint32_t ctx)
{
	kvs_reqtab_t *t = kvs_reqtab_create(d, reqs, ctx);

	ck_assert_ptr_nonnull(t);
	return t;
}

/* Nothing of the table is left on the driver. */
static void assert_clean(kvs_drv_t *d)
{
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_reserved), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_created), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_chunks), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_host), 0);
}

START_TEST(test_create_args)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_devptr_t p;

	errno = 0;
	ck_assert_ptr_null(kvs_reqtab_create(NULL, 4, 4));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(kvs_reqtab_create(d, 0, 4));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(kvs_reqtab_create(d, 4, 0));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(kvs_reqtab_create(d, UINT32_MAX, 4));
	ck_assert_int_eq(errno, EINVAL);
	/* 2^32 - 2 rows of 2^32 - 1 entries: 2^66 bytes. */
	ck_assert_ptr_null(kvs_reqtab_create(d, UINT32_MAX - 1, UINT32_MAX));
	ck_assert_int_eq(errno, ENOMEM);
	assert_clean(d);
	ck_assert_int_eq(kvs_reqtab_destroy(NULL), 0);
	ck_assert_uint_eq(kvs_reqtab_max_reqs(NULL), 0);
	ck_assert_uint_eq(kvs_reqtab_max_context(NULL), 0);
	ck_assert_uint_eq(kvs_reqtab_available(NULL), 0);
	ck_assert_int_eq(kvs_reqtab_table(NULL, &p, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_sync(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_alloc_free)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, 8, 16);
	uint32_t s[8], k;

	ck_assert_uint_eq(kvs_reqtab_max_reqs(t), 8);
	ck_assert_uint_eq(kvs_reqtab_max_context(t), 16);
	ck_assert_uint_eq(kvs_reqtab_available(t), 8);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 0, NULL), 0);
	errno = 0;
	ck_assert_int_eq(kvs_reqtab_alloc(t, 1, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_alloc(NULL, 1, s), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* Lowest first, as SGLang's list of free slots. */
	ck_assert_int_eq(kvs_reqtab_alloc(t, 3, s), 0);
	ck_assert_uint_eq(s[0], 0);
	ck_assert_uint_eq(s[1], 1);
	ck_assert_uint_eq(s[2], 2);
	ck_assert_uint_eq(kvs_reqtab_available(t), 5);
	ck_assert_int_eq(kvs_reqtab_free(t, s[1]), 0);
	ck_assert_uint_eq(kvs_reqtab_available(t), 6);
	/* LIFO: the slot just freed comes back first. */
	ck_assert_int_eq(kvs_reqtab_alloc(t, 1, &s[1]), 0);
	ck_assert_uint_eq(s[1], 1);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 5, s + 3), 0);
	ck_assert_uint_eq(kvs_reqtab_available(t), 0);
	for (k = 0; k < 8; k++) {
		uint32_t j;

		ck_assert_uint_lt(s[k], 8);
		for (j = 0; j < k; j++)
			ck_assert_uint_ne(s[j], s[k]);
	}
	for (k = 0; k < 8; k++)
		ck_assert_int_eq(kvs_reqtab_free(t, s[k]), 0);
	ck_assert_uint_eq(kvs_reqtab_available(t), 8);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_double_free)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, 4, 8);
	uint32_t s[2], again;

	ck_assert_int_eq(kvs_reqtab_alloc(t, 2, s), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, s[0]), 0);
	errno = 0;
	ck_assert_int_eq(kvs_reqtab_free(t, s[0]), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_reqtab_available(t), 3);
	/* Never allocated. */
	ck_assert_int_eq(kvs_reqtab_free(t, 3), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_reqtab_available(t), 3);
	/* The stack is intact: three distinct slots, then none. */
	ck_assert_int_eq(kvs_reqtab_alloc(t, 1, &again), 0);
	ck_assert_uint_eq(again, s[0]);
	ck_assert_int_eq(kvs_reqtab_free(t, again), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, s[1]), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, s[1]), -1);
	ck_assert_uint_eq(kvs_reqtab_available(t), 4);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_out_of_range)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, 4, 8);
	int32_t v[8] = {0};
	uint32_t s;

	errno = 0;
	ck_assert_int_eq(kvs_reqtab_free(t, 4), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_free(t, UINT32_MAX), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_free(NULL, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_reqtab_available(t), 4);
	/* Rows of slots out of range or not allocated. */
	ck_assert_int_eq(kvs_reqtab_write(t, 4, 0, 1, v), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_read(t, 4, 0, 1, v), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_write(t, 0, 0, 1, v), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_read(t, 0, 0, 1, v), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(kvs_reqtab_row(t, 0));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(kvs_reqtab_row(t, 99));
	ck_assert_int_eq(errno, EINVAL);
	/* Allocated, then NULL buffers. */
	ck_assert_int_eq(kvs_reqtab_alloc(t, 1, &s), 0);
	ck_assert_ptr_nonnull(kvs_reqtab_row(t, s));
	/* The whole mirror: row s at s * max_context, the writes in it. */
	errno = 0;
	ck_assert_ptr_null(kvs_reqtab_mirror(NULL));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_eq(kvs_reqtab_mirror(t) + (size_t)s * kvs_reqtab_max_context(t),
			 kvs_reqtab_row(t, s));
	v[0] = 4242;
	ck_assert_int_eq(kvs_reqtab_write(t, s, 1, 1, v), 0);
	ck_assert_int_eq(kvs_reqtab_mirror(t)[(size_t)s * kvs_reqtab_max_context(t) + 1], 4242);
	ck_assert_int_eq(kvs_reqtab_write(t, s, 0, 1, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_read(t, s, 0, 1, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_write(t, s, 0, 0, NULL), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, s), 0);
	ck_assert_ptr_null(kvs_reqtab_row(t, s));
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_write_read)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, 4, 1000);
	int32_t in[1000], out[1000];
	const int32_t *row;
	uint32_t s[2], k, round;

	ck_assert_int_eq(kvs_reqtab_alloc(t, 2, s), 0);
	/* A new table is zero. */
	ck_assert_int_eq(kvs_reqtab_read(t, s[0], 0, 1000, out), 0);
	for (k = 0; k < 1000; k++)
		ck_assert_int_eq(out[k], 0);
	for (k = 0; k < 1000; k++)
		in[k] = (int32_t)(7 * k + 3);
	/* A prefill of 600 tokens, then decode steps one at a time; each
	 * rewrite of a row waits for its previous copy. */
	ck_assert_int_eq(kvs_reqtab_write(t, s[0], 0, 600, in), 0);
	for (k = 600; k < 1000; k++)
		ck_assert_int_eq(kvs_reqtab_write(t, s[0], k, 1, in + k), 0);
	ck_assert_int_eq(kvs_reqtab_write(t, s[1], 10, 5, in + 500), 0);
	ck_assert_int_eq(kvs_reqtab_read(t, s[0], 0, 1000, out), 0);
	ck_assert_mem_eq(out, in, sizeof(in));
	ck_assert_int_eq(kvs_reqtab_read(t, s[0], 998, 2, out), 0);
	ck_assert_int_eq(out[0], in[998]);
	ck_assert_int_eq(out[1], in[999]);
	ck_assert_int_eq(kvs_reqtab_read(t, s[1], 9, 7, out), 0);
	ck_assert_int_eq(out[0], 0);
	ck_assert_mem_eq(out + 1, in + 500, 5 * sizeof(int32_t));
	ck_assert_int_eq(out[6], 0);
	row = kvs_reqtab_row(t, s[0]);
	ck_assert_ptr_nonnull(row);
	ck_assert_mem_eq(row, in, sizeof(in));
	/* The same bytes rewritten many times in a row. */
	for (round = 0; round < 200; round++) {
		int32_t v[3] = {(int32_t)round, -(int32_t)round, 42};

		ck_assert_int_eq(kvs_reqtab_write(t, s[1], 0, 3, v), 0);
	}
	ck_assert_int_eq(row[0], in[0]);
	row = kvs_reqtab_row(t, s[1]);
	ck_assert_int_eq(row[0], 199);
	ck_assert_int_eq(row[1], -199);
	ck_assert_int_eq(row[2], 42);
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	/* A row keeps its entries across free and alloc. */
	ck_assert_int_eq(kvs_reqtab_free(t, s[0]), 0);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 1, s), 0);
	ck_assert_int_eq(kvs_reqtab_read(t, s[0], 0, 1000, out), 0);
	ck_assert_mem_eq(out, in, sizeof(in));
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_erange)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, 2, 10);
	int32_t v[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, out[11];
	uint32_t s;

	ck_assert_int_eq(kvs_reqtab_alloc(t, 1, &s), 0);
	ck_assert_int_eq(kvs_reqtab_write(t, s, 0, 10, v), 0);
	errno = 0;
	ck_assert_int_eq(kvs_reqtab_write(t, s, 0, 11, v), -1);
	ck_assert_int_eq(errno, ERANGE);
	ck_assert_int_eq(kvs_reqtab_write(t, s, 9, 2, v), -1);
	ck_assert_int_eq(errno, ERANGE);
	ck_assert_int_eq(kvs_reqtab_write(t, s, 11, 0, v), -1);
	ck_assert_int_eq(errno, ERANGE);
	/* pos + n computed without wrapping. */
	ck_assert_int_eq(kvs_reqtab_write(t, s, UINT32_MAX, 2, v), -1);
	ck_assert_int_eq(errno, ERANGE);
	ck_assert_int_eq(kvs_reqtab_read(t, s, 5, 6, out), -1);
	ck_assert_int_eq(errno, ERANGE);
	ck_assert_int_eq(kvs_reqtab_read(t, s, UINT32_MAX, 1, out), -1);
	ck_assert_int_eq(errno, ERANGE);
	/* The end itself is fine; failed writes changed nothing. */
	ck_assert_int_eq(kvs_reqtab_write(t, s, 10, 0, v), 0);
	ck_assert_int_eq(kvs_reqtab_read(t, s, 9, 1, out), 0);
	ck_assert_int_eq(out[0], 10);
	ck_assert_int_eq(kvs_reqtab_read(t, s, 0, 10, out), 0);
	ck_assert_mem_eq(out, v, 10 * sizeof(int32_t));
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* After kvs_reqtab_sync() the device table holds the mirror's entries, at
 * the exported address and stride. */
START_TEST(test_device_table)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	/* 33 rows of 500 entries: 66000 bytes (two granules of 64 KiB). */
	kvs_reqtab_t *t = mk(d, 33, 500);
	int32_t in[500], out[500];
	uint32_t s[33], k, j;
	kvs_devptr_t base;
	size_t stride;

	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), rounded(d, 66000));
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_reserved), rounded(d, 66000));
	ck_assert_int_eq(kvs_reqtab_table(t, &base, &stride), 0);
	ck_assert_uint_eq(stride, 500 * sizeof(int32_t));
	ck_assert_int_eq(kvs_reqtab_table(t, &base, NULL), 0);
	ck_assert_int_eq(kvs_reqtab_table(t, NULL, &stride), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 33, s), 0);
	/* Zero on the device too, before any write. */
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, base + (uint64_t)s[32] * stride,
					   sizeof(out), NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	for (k = 0; k < 500; k++)
		ck_assert_int_eq(out[k], 0);
	for (j = 0; j < 33; j++) {
		for (k = 0; k < 500; k++)
			in[k] = (int32_t)(j * 1000 + k);
		ck_assert_int_eq(kvs_reqtab_write(t, s[j], 0, 250, in), 0);
		for (k = 250; k < 500; k += 50)
			ck_assert_int_eq(kvs_reqtab_write(t, s[j], k, 50, in + k), 0);
	}
	/* The last row crosses into the second granule (of 64 KiB). */
	ck_assert_int_eq(kvs_reqtab_write(t, s[32], 499, 1, (int32_t[]){-7}), 0);
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	for (j = 0; j < 33; j++) {
		ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, base + (uint64_t)s[j] * stride,
						   sizeof(out), NULL), 0);
		ck_assert_int_eq(kvs_drv_synchronize(d), 0);
		ck_assert_mem_eq(out, kvs_reqtab_row(t, s[j]), sizeof(out));
		ck_assert_int_eq(out[17], (int32_t)(j * 1000 + 17));
	}
	ck_assert_int_eq(out[499], -7);
	/* host: the address is the memory itself. */
	if (strcmp(tu_backends[_i], "host") == 0)
		ck_assert_int_eq(((const int32_t *)(uintptr_t)(base + s[5] * stride))[3], 5003);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	assert_clean(d);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_all_or_nothing)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, 5, 4);
	uint32_t a[3], b[3] = {77, 77, 77}, c[2];

	ck_assert_int_eq(kvs_reqtab_alloc(t, 3, a), 0);
	errno = 0;
	ck_assert_int_eq(kvs_reqtab_alloc(t, 3, b), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(kvs_reqtab_available(t), 2);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 2, c), 0);
	ck_assert_uint_eq(kvs_reqtab_available(t), 0);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 1, b), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(kvs_reqtab_alloc(t, UINT32_MAX, b), -1);
	ck_assert_int_eq(errno, ENOMEM);
	/* Every slot is still exactly once either held or free. */
	ck_assert_int_eq(kvs_reqtab_free(t, c[0]), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, c[1]), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, a[0]), 0);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 3, b), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, a[1]), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, a[2]), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, b[0]), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, b[1]), 0);
	ck_assert_int_eq(kvs_reqtab_free(t, b[2]), 0);
	ck_assert_uint_eq(kvs_reqtab_available(t), 5);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_destroy_clean)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, 100, 1000);
	int32_t v[4] = {1, 2, 3, 4};
	uint32_t s[10];

	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), rounded(d, 400000));
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_created), rounded(d, 400000));
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_chunks), 1);
	ck_assert_uint_ge(kvs_drv_stat(d, KVS_DRV_STAT_bytes_host), 400000);
	/* Slots still held and copies still queued at destroy. */
	ck_assert_int_eq(kvs_reqtab_alloc(t, 10, s), 0);
	ck_assert_int_eq(kvs_reqtab_write(t, s[3], 0, 4, v), 0);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	assert_clean(d);
	if (strcmp(tu_backends[_i], "cuda") == 0 && tu_is_double()) {
		ck_assert_uint_eq(tu_double_query("kvsdbl_live_handles"), 0);
		ck_assert_uint_eq(tu_double_query("kvsdbl_mapped_bytes"), 0);
	} else {
		ck_assert_int_eq(tu_host_chunk_maps(), 0);
		ck_assert_int_eq(tu_host_chunk_fds(), 0);
	}
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* Fail each driver call of kvs_reqtab_create() in turn: the call fails with
 * the injected errno and leaves nothing behind; a failed copy leaves the
 * row as it was, in the mirror and on the device. */
START_TEST(test_faults)
{
	kvs_drv_t *inner = tu_open_gran(_i, GRAN, 0, 0), *f;
	kvs_reqtab_t *t;
	int32_t v[4] = {1, 2, 3, 4}, w[4] = {9, 9, 9, 9}, out[4];
	kvs_devptr_t base;
	size_t stride;
	uint64_t k;
	uint32_t s;

	ck_assert_ptr_nonnull(inner);
	f = kvs_fault_open(inner);
	ck_assert_ptr_nonnull(f);
	for (k = 1;; k++) {
		ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_ANY, k, EIO), 0);
		errno = 0;
		t = kvs_reqtab_create(f, 16, 64);
		ck_assert_int_eq(kvs_fault_clear(f), 0);
		if (t)
			break;
		ck_assert_int_eq(errno, EIO);
		assert_clean(f);
		assert_clean(inner);
	}
	/* reserve, create, map, access, host_alloc (mirror, then ring), the
	 * zeroing copy. */
	ck_assert_uint_eq(k, 8);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 1, &s), 0);
	ck_assert_int_eq(kvs_reqtab_write(t, s, 10, 4, v), 0);
	ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_COPY, 1, EIO), 0);
	errno = 0;
	ck_assert_int_eq(kvs_reqtab_write(t, s, 10, 4, w), -1);
	ck_assert_int_eq(errno, EIO);
	ck_assert_int_eq(kvs_reqtab_read(t, s, 10, 4, out), 0);
	ck_assert_mem_eq(out, v, sizeof(v));
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	ck_assert_int_eq(kvs_reqtab_table(t, &base, &stride), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(f, out, base + s * stride + 40, sizeof(out), NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(f), 0);
	ck_assert_mem_eq(out, v, sizeof(v));
	ck_assert_int_eq(kvs_reqtab_write(t, s, 10, 4, w), 0);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	assert_clean(f);
	ck_assert_int_eq(kvs_drv_close(f), 0);
}
END_TEST

/* The device table's row of @slot equals the mirror's (after a sync). */
static void assert_device_row(kvs_drv_t *d, kvs_reqtab_t *t, uint32_t slot)
{
	uint32_t ctx = kvs_reqtab_max_context(t);
	int32_t *out = malloc((size_t)ctx * sizeof(int32_t));
	kvs_devptr_t base;
	size_t stride;

	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(kvs_reqtab_table(t, &base, &stride), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, base + (uint64_t)slot * stride,
					   (size_t)ctx * sizeof(int32_t), NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert_mem_eq(out, kvs_reqtab_row(t, slot), (size_t)ctx * sizeof(int32_t));
	free(out);
}

#define STEP_REQS 128
#define STEPS 100

/* A decode step of 128 requests is one batch: one submission of 128
 * copies, not 128 copies and 128 events; the device gets every entry. */
START_TEST(test_batch_decode_step)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, STEP_REQS, 256);
	kvs_reqtab_write_t w[STEP_REQS];
	int32_t loc[STEP_REQS];
	uint32_t s[STEP_REQS], k, step;
	uint64_t batches, copies, submits;

	ck_assert_int_eq(kvs_reqtab_alloc(t, STEP_REQS, s), 0);
	batches = kvs_drv_stat(d, KVS_DRV_STAT_batch_calls);
	copies = kvs_drv_stat(d, KVS_DRV_STAT_copy_calls);
	for (step = 0; step < STEPS; step++) {
		for (k = 0; k < STEP_REQS; k++) {
			loc[k] = (int32_t)(k * 100000 + step);
			w[k].slot = s[k];
			w[k].pos = step;
			w[k].n = 1;
			w[k].locs = &loc[k];
		}
		ck_assert_int_eq(kvs_reqtab_write_batch(t, w, STEP_REQS), 0);
	}
	/* 100 steps of 512 bytes cross a 64 KiB segment of the ring never:
	 * one batch a step (and no event a step: a segment's event is
	 * recorded when the ring moves on). */
	batches = kvs_drv_stat(d, KVS_DRV_STAT_batch_calls) - batches;
	copies = kvs_drv_stat(d, KVS_DRV_STAT_copy_calls) - copies;
	ck_assert_uint_eq(batches, STEPS);
	ck_assert_uint_eq(copies, STEPS * STEP_REQS);
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	for (k = 0; k < STEP_REQS; k++) {
		const int32_t *row = kvs_reqtab_row(t, s[k]);

		for (step = 0; step < STEPS; step++)
			ck_assert_int_eq(row[step], (int32_t)(k * 100000 + step));
		assert_device_row(d, t, s[k]);
	}
	/* Single writes: one copy each, no batch, no event. */
	batches = kvs_drv_stat(d, KVS_DRV_STAT_batch_calls);
	submits = kvs_drv_stat(d, KVS_DRV_STAT_copy_calls);
	for (k = 0; k < STEP_REQS; k++)
		ck_assert_int_eq(kvs_reqtab_write(t, s[k], STEPS, 1, &loc[k]), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_batch_calls), batches);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_copy_calls), submits + STEP_REQS);
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	for (k = 0; k < STEP_REQS; k++)
		assert_device_row(d, t, s[k]);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	assert_clean(d);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* A slot written twice in a batch: later entries win, as sequential
 * writes; one copy of the slot's span, bytes between the two writes kept. */
START_TEST(test_batch_duplicates)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, 4, 64);
	int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[4] = {-1, -2, -3, -4}, c[2] = {90, 91};
	int32_t base_row[64], out[64];
	kvs_reqtab_write_t w[4];
	uint32_t s[2], k;
	uint64_t copies;

	ck_assert_int_eq(kvs_reqtab_alloc(t, 2, s), 0);
	for (k = 0; k < 64; k++)
		base_row[k] = (int32_t)(1000 + k);
	ck_assert_int_eq(kvs_reqtab_write(t, s[0], 0, 64, base_row), 0);
	/* s0: [10, 18) = a, then [14, 18) = b over it, then [30, 32) = c;
	 * s1: [0, 2) = c. */
	w[0] = (kvs_reqtab_write_t){ s[0], 10, 8, a };
	w[1] = (kvs_reqtab_write_t){ s[1], 0, 2, c };
	w[2] = (kvs_reqtab_write_t){ s[0], 14, 4, b };
	w[3] = (kvs_reqtab_write_t){ s[0], 30, 2, c };
	copies = kvs_drv_stat(d, KVS_DRV_STAT_copy_calls);
	ck_assert_int_eq(kvs_reqtab_write_batch(t, w, 4), 0);
	/* One copy a slot. */
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_copy_calls), copies + 2);
	memcpy(out, base_row, sizeof(out));
	memcpy(out + 10, a, sizeof(a));
	memcpy(out + 14, b, sizeof(b));
	memcpy(out + 30, c, sizeof(c));
	ck_assert_mem_eq(kvs_reqtab_row(t, s[0]), out, sizeof(out));
	ck_assert_int_eq(kvs_reqtab_row(t, s[1])[0], 90);
	ck_assert_int_eq(kvs_reqtab_row(t, s[1])[1], 91);
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	assert_device_row(d, t, s[0]);
	assert_device_row(d, t, s[1]);
	/* The same range twice: the second wins. */
	w[0] = (kvs_reqtab_write_t){ s[1], 0, 2, b };
	w[1] = (kvs_reqtab_write_t){ s[1], 0, 2, a };
	ck_assert_int_eq(kvs_reqtab_write_batch(t, w, 2), 0);
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	ck_assert_int_eq(kvs_reqtab_row(t, s[1])[0], 1);
	ck_assert_int_eq(kvs_reqtab_row(t, s[1])[1], 2);
	assert_device_row(d, t, s[1]);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* A batch with one bad entry changes no row and submits nothing. */
START_TEST(test_batch_all_or_nothing)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_reqtab_t *t = mk(d, 4, 16);
	int32_t v[4] = {5, 6, 7, 8}, zero[16] = {0};
	kvs_reqtab_write_t w[3];
	uint32_t s[2];
	uint64_t copies, batches;

	ck_assert_int_eq(kvs_reqtab_alloc(t, 2, s), 0);
	ck_assert_int_eq(kvs_reqtab_write_batch(t, NULL, 0), 0);
	errno = 0;
	ck_assert_int_eq(kvs_reqtab_write_batch(t, NULL, 1), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_reqtab_write_batch(NULL, w, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	copies = kvs_drv_stat(d, KVS_DRV_STAT_copy_calls);
	batches = kvs_drv_stat(d, KVS_DRV_STAT_batch_calls);
	w[0] = (kvs_reqtab_write_t){ s[0], 0, 4, v };
	w[1] = (kvs_reqtab_write_t){ s[1], 0, 4, v };
	/* A slot not allocated, last. */
	w[2] = (kvs_reqtab_write_t){ 3, 0, 1, v };
	ck_assert_int_eq(kvs_reqtab_write_batch(t, w, 3), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* Out of the row. */
	w[2] = (kvs_reqtab_write_t){ s[1], 14, 4, v };
	ck_assert_int_eq(kvs_reqtab_write_batch(t, w, 3), -1);
	ck_assert_int_eq(errno, ERANGE);
	/* NULL locations. */
	w[2] = (kvs_reqtab_write_t){ s[1], 4, 4, NULL };
	ck_assert_int_eq(kvs_reqtab_write_batch(t, w, 3), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_mem_eq(kvs_reqtab_row(t, s[0]), zero, sizeof(zero));
	ck_assert_mem_eq(kvs_reqtab_row(t, s[1]), zero, sizeof(zero));
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_copy_calls), copies);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_batch_calls), batches);
	/* Entries of 0 entries are checked and skipped. */
	w[2] = (kvs_reqtab_write_t){ s[1], 16, 0, NULL };
	ck_assert_int_eq(kvs_reqtab_write_batch(t, w, 3), 0);
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	assert_device_row(d, t, s[0]);
	assert_device_row(d, t, s[1]);
	ck_assert_int_eq(kvs_reqtab_row(t, s[1])[3], 8);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* Writes far larger than a segment of the staging ring, and many small
 * ones, wrapping the ring many times without a sync: the device ends
 * equal to the mirror (a segment reused before its copies ran would
 * leave later bytes where earlier ones belong). */
START_TEST(test_ring_wrap)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	/* 8 rows of 20000 entries: 640000 bytes, 64 KiB segments. */
	kvs_reqtab_t *t = mk(d, 8, 20000);
	int32_t *in = malloc(20000 * sizeof(int32_t));
	kvs_reqtab_write_t w[8];
	uint32_t s[8], k, j, round;

	ck_assert_ptr_nonnull(in);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 8, s), 0);
	for (round = 0; round < 6; round++) {
		for (j = 0; j < 8; j++) {
			for (k = 0; k < 20000; k++)
				in[k] = (int32_t)(round * 1000000 + j * 30000 + k);
			/* Whole rows, one at a time: 80000 bytes each. */
			ck_assert_int_eq(kvs_reqtab_write(t, s[j], 0, 20000, in), 0);
		}
		/* Then a batch of pieces of every row. */
		for (j = 0; j < 8; j++) {
			w[j].slot = s[j];
			w[j].pos = 1000 * j + round;
			w[j].n = 5000;
			w[j].locs = in + j;
		}
		ck_assert_int_eq(kvs_reqtab_write_batch(t, w, 8), 0);
		for (k = 0; k < 3000; k++)
			ck_assert_int_eq(kvs_reqtab_write(t, s[k % 8], k, 1, in + k), 0);
	}
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	for (j = 0; j < 8; j++)
		assert_device_row(d, t, s[j]);
	free(in);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	assert_clean(d);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

struct wrap_arg {
	kvs_reqtab_t *t;
	uint32_t *s;
	int32_t *in;
	_Atomic int done, errors;
};

static void *wrap_writer(void *p)
{
	struct wrap_arg *a = p;
	uint32_t j;

	/* 9 whole rows of 80000 bytes: more than the 8 x 64 KiB ring. */
	for (j = 0; j < 9; j++)
		if (kvs_reqtab_write(a->t, a->s[j % 8], 0, 20000, a->in + j) < 0)
			atomic_fetch_add(&a->errors, 1);
	atomic_store(&a->done, 1);
	return NULL;
}

/* The ring is reused only after the copies out of it are done: with the
 * double's copies held, a writer that wraps the ring waits until they are
 * released (a writer that did not wait would be done, and would have
 * overwritten the sources of copies still queued). */
START_TEST(test_ring_waits)
{
	if (TU_NEED_DOUBLE(_i, "the double's held copies"))
		return;
	kvs_drv_t *d;
	kvs_reqtab_t *t;
	struct wrap_arg a;
	pthread_t th;
	uint32_t s[8], j, k;
	int done;

	if (strcmp(tu_backends[_i], "cuda") != 0)
		return; /* the copy hold is the double's */
	d = tu_open_gran(_i, GRAN, 0, 0);
	t = mk(d, 8, 20000);
	memset(&a, 0, sizeof(a));
	a.in = malloc(20010 * sizeof(int32_t));
	ck_assert_ptr_nonnull(a.in);
	for (k = 0; k < 20010; k++)
		a.in[k] = (int32_t)(k * 3 + 1);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 8, s), 0);
	a.t = t;
	a.s = s;
	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, wrap_writer, &a), 0);
	/* However long this sleeps, the writer cannot get past the wrap. */
	usleep(200000);
	done = atomic_load(&a.done);
	ck_assert_int_eq(done, 0);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(atomic_load(&a.errors), 0);
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	for (j = 0; j < 8; j++)
		assert_device_row(d, t, s[j]);
	ck_assert_int_eq(kvs_reqtab_row(t, s[0])[0], a.in[8]);
	free(a.in);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* A batch whose copy fails leaves every row as it was, mirror and device. */
START_TEST(test_batch_fault)
{
	kvs_drv_t *inner = tu_open_gran(_i, GRAN, 0, 0), *f;
	kvs_reqtab_t *t;
	int32_t v[4] = {1, 2, 3, 4}, w4[4] = {9, 9, 9, 9}, old[2][64];
	kvs_reqtab_write_t w[3];
	uint32_t s[2];

	f = kvs_fault_open(inner);
	ck_assert_ptr_nonnull(f);
	t = mk(f, 4, 64);
	ck_assert_int_eq(kvs_reqtab_alloc(t, 2, s), 0);
	ck_assert_int_eq(kvs_reqtab_write(t, s[0], 10, 4, v), 0);
	ck_assert_int_eq(kvs_reqtab_write(t, s[1], 0, 4, v), 0);
	memcpy(old[0], kvs_reqtab_row(t, s[0]), sizeof(old[0]));
	memcpy(old[1], kvs_reqtab_row(t, s[1]), sizeof(old[1]));
	w[0] = (kvs_reqtab_write_t){ s[0], 10, 4, w4 };
	w[1] = (kvs_reqtab_write_t){ s[1], 2, 4, w4 };
	w[2] = (kvs_reqtab_write_t){ s[0], 40, 4, w4 };
	ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_COPY, 1, EIO), 0);
	errno = 0;
	ck_assert_int_eq(kvs_reqtab_write_batch(t, w, 3), -1);
	ck_assert_int_eq(errno, EIO);
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	ck_assert_mem_eq(kvs_reqtab_row(t, s[0]), old[0], sizeof(old[0]));
	ck_assert_mem_eq(kvs_reqtab_row(t, s[1]), old[1], sizeof(old[1]));
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	assert_device_row(f, t, s[0]);
	assert_device_row(f, t, s[1]);
	/* And it goes through once the driver does. */
	ck_assert_int_eq(kvs_reqtab_write_batch(t, w, 3), 0);
	ck_assert_int_eq(kvs_reqtab_sync(t), 0);
	ck_assert_int_eq(kvs_reqtab_row(t, s[0])[41], 9);
	assert_device_row(f, t, s[0]);
	assert_device_row(f, t, s[1]);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	assert_clean(f);
	ck_assert_int_eq(kvs_drv_close(f), 0);
}
END_TEST

/* ------------------------------------------------------------ threads */

#define NTHREADS 4
#define ITERS 10000
#define MT_REQS 12
#define MT_CTX 32

struct mt {
	kvs_reqtab_t *t;
	_Atomic uint32_t owner[MT_REQS];	/* thread id + 1 holding a slot, 0 */
	_Atomic uint32_t errors, enomem;
};

struct mt_arg {
	struct mt *m;
	uint32_t id;
};

static void *mt_worker(void *p)
{
	struct mt_arg *a = p;
	struct mt *m = a->m;
	unsigned int seed = 12345u + a->id;
	uint32_t me = a->id + 1, it, k, held[5];

	for (it = 0; it < ITERS; it++) {
		uint32_t n = 1 + (uint32_t)rand_r(&seed) % 5;

		if (kvs_reqtab_alloc(m->t, n, held) < 0) {
			if (errno != ENOMEM)
				atomic_fetch_add(&m->errors, 1);
			atomic_fetch_add(&m->enomem, 1);
			continue;
		}
		for (k = 0; k < n; k++) {
			uint32_t was = atomic_exchange(&m->owner[held[k]], me);
			int32_t v[2] = {(int32_t)(me * 100000 + it), (int32_t)k}, out[2];
			uint32_t pos = (uint32_t)rand_r(&seed) % (MT_CTX - 1);

			if (was != 0)
				atomic_fetch_add(&m->errors, 1);
			/* Rows of different threads written at once, rows
			 * handed from thread to thread with copies queued;
			 * the other iterations hammer the free stack alone. */
			if (it % 4 == 0 &&
			    (kvs_reqtab_write(m->t, held[k], pos, 2, v) < 0 ||
			     kvs_reqtab_read(m->t, held[k], pos, 2, out) < 0 ||
			     out[0] != v[0] || out[1] != v[1]))
				atomic_fetch_add(&m->errors, 1);
		}
		for (k = 0; k < n; k++) {
			if (atomic_exchange(&m->owner[held[k]], 0) != me)
				atomic_fetch_add(&m->errors, 1);
			if (kvs_reqtab_free(m->t, held[k]) < 0)
				atomic_fetch_add(&m->errors, 1);
		}
	}
	return NULL;
}

START_TEST(test_threads)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	static struct mt m;
	struct mt_arg args[NTHREADS];
	pthread_t th[NTHREADS];
	uint32_t k, s[MT_REQS];

	memset(&m, 0, sizeof(m));
	m.t = mk(d, MT_REQS, MT_CTX);
	for (k = 0; k < NTHREADS; k++) {
		args[k].m = &m;
		args[k].id = k;
		ck_assert_int_eq(pthread_create(&th[k], NULL, mt_worker, &args[k]), 0);
	}
	for (k = 0; k < NTHREADS; k++)
		ck_assert_int_eq(pthread_join(th[k], NULL), 0);
	ck_assert_uint_eq(atomic_load(&m.errors), 0);
	/* Up to 4 x 5 slots wanted of 12, so allocations failed on the
	 * way; they took nothing, and every slot is back. */
	ck_assert_uint_eq(kvs_reqtab_available(m.t), MT_REQS);
	/* The stack holds every slot exactly once. */
	ck_assert_int_eq(kvs_reqtab_alloc(m.t, MT_REQS, s), 0);
	for (k = 0; k < MT_REQS; k++)
		ck_assert_int_eq(atomic_exchange(&m.owner[s[k]], 1), 0);
	ck_assert_int_eq(kvs_reqtab_sync(m.t), 0);
	ck_assert_int_eq(kvs_reqtab_destroy(m.t), 0);
	assert_clean(d);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* A creation whose undo fails too: the chunk the driver refused to release
 * is parked with it, not lost; the driver gives it back at its next
 * allocation, long before its close. */
START_TEST(test_failed_undo_parked)
{
	kvs_drv_t *inner = tu_open_gran(_i, GRAN, 0, 0), *f;
	kvs_reqtab_t *t;
	kvs_devptr_t p;

	ck_assert_ptr_nonnull(inner);
	f = kvs_fault_open(inner);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_MAP, 1, EIO), 0);
	ck_assert_int_eq(kvs_fault_fail_random(f, KVS_OP_RELEASE, 1.0, 1, EIO), 0);
	errno = 0;
	ck_assert_ptr_null(kvs_reqtab_create(f, 16, 64));
	ck_assert_int_eq(errno, EIO);
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_chunks), 1); /* refused: parked */
	ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_bytes_reserved), 0);
	/* The next allocation gives it back. */
	ck_assert_int_eq(kvs_drv_reserve(f, kvs_drv_granularity(f), &p), 0);
	ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_chunks), 0);
	ck_assert_int_eq(kvs_drv_unreserve(f, p), 0);
	assert_clean(f);
	/* An unmap refused too: mapping, chunk and reservation are parked
	 * together, and go back in order. */
	ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_SET_ACCESS, 1, EIO), 0);
	ck_assert_int_eq(kvs_fault_fail_random(f, KVS_OP_UNMAP, 1.0, 1, EIO), 0);
	ck_assert_ptr_null(kvs_reqtab_create(f, 16, 64));
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	ck_assert_uint_gt(kvs_drv_stat(f, KVS_DRV_STAT_bytes_mapped), 0);
	t = kvs_reqtab_create(f, 16, 64);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(kvs_reqtab_destroy(t), 0);
	assert_clean(f);
	ck_assert_int_eq(kvs_drv_close(f), 0);
}
END_TEST

static Suite *reqtab_suite(void)
{
	Suite *s = suite_create("reqtab");
	TCase *tc = tcase_create("reqtab");
	int nb = tu_nbackends();

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_create_args, 0, nb);
	tcase_add_loop_test(tc, test_alloc_free, 0, nb);
	tcase_add_loop_test(tc, test_double_free, 0, nb);
	tcase_add_loop_test(tc, test_out_of_range, 0, nb);
	tcase_add_loop_test(tc, test_write_read, 0, nb);
	tcase_add_loop_test(tc, test_erange, 0, nb);
	tcase_add_loop_test(tc, test_device_table, 0, nb);
	tcase_add_loop_test(tc, test_all_or_nothing, 0, nb);
	tcase_add_loop_test(tc, test_destroy_clean, 0, nb);
	tcase_add_loop_test(tc, test_faults, 0, nb);
	tcase_add_loop_test(tc, test_failed_undo_parked, 0, nb);
	tcase_add_loop_test(tc, test_threads, 0, nb);
	tcase_add_loop_test(tc, test_batch_decode_step, 0, nb);
	tcase_add_loop_test(tc, test_batch_duplicates, 0, nb);
	tcase_add_loop_test(tc, test_batch_all_or_nothing, 0, nb);
	tcase_add_loop_test(tc, test_ring_wrap, 0, nb);
	tcase_add_loop_test(tc, test_ring_waits, 0, nb);
	tcase_add_loop_test(tc, test_batch_fault, 0, nb);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	setenv("KVSLAB_DOUBLE_GRANULARITY", "65536", 0);
	return tu_run(reqtab_suite());
}
