/* SPDX-License-Identifier: MIT */
/*
 * tests/drv/test_drv.c - the driver shim, on every backend: host, and cuda
 * over the libcuda test double.  Each loop test runs once per backend.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define BACKEND_LOOP(tc, fn) tcase_add_loop_test(tc, fn, 0, tu_nbackends())

static int is_cuda(int i)
{
	return strcmp(tu_backends[i], "cuda") == 0;
}

/* Nothing of the driver's (and, for cuda, of the double's) is left. */
static void assert_nothing_left(int i)
{
	if (is_cuda(i)) {
		ck_assert_uint_eq(tu_double_query("kvsdbl_live_handles"), 0);
		ck_assert_uint_eq(tu_double_query("kvsdbl_live_reservations"), 0);
		ck_assert_uint_eq(tu_double_query("kvsdbl_mapped_bytes"), 0);
	} else {
		ck_assert_int_eq(tu_host_chunk_maps(), 0);
		ck_assert_int_eq(tu_host_chunk_fds(), 0);
	}
}

static void assert_drv_empty(kvs_drv_t *d)
{
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_created), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_chunks), 0);
}

START_TEST(test_open_info)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t f = 0, t = 0, g;

	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(kvs_drv_name(d), tu_backends[_i]);
	g = kvs_drv_granularity(d);
	ck_assert_uint_gt(g, 0);
	ck_assert_uint_eq(g % 4096, 0);
	ck_assert_int_eq(kvs_drv_mem_info(d, &f, &t), 0);
	ck_assert_uint_gt(t, 0);
	ck_assert_uint_le(f, t);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_open_errors)
{
	kvs_drv_attr_t attr;

	errno = 0;
	ck_assert_ptr_null(kvs_drv_open("nosuch", NULL));
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(kvs_drv_attr_init(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);

	kvs_drv_attr_init(&attr);
	attr.granularity = 1000; /* not a page multiple */
	errno = 0;
	ck_assert_ptr_null(kvs_drv_open("host", &attr));
	ck_assert_int_eq(errno, EINVAL);

	/* A library that cannot be loaded means no device, not a crash. */
	setenv("KVSLAB_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	errno = 0;
	ck_assert_ptr_null(kvs_drv_open("cuda", NULL));
	ck_assert_int_eq(errno, ENODEV);
	unsetenv("KVSLAB_LIBCUDA");
}
END_TEST

START_TEST(test_cuda_nodev)
{
	if (TU_NEED_DOUBLE(1, "needs the double's no-device switch (KVSLAB_DOUBLE_NODEV)"))
		return;
	kvs_drv_t *d;

	/* The double reports no device: cuda fails with ENODEV, auto falls back. */
	setenv("KVSLAB_DOUBLE_NODEV", "1", 1);
	setenv("KVSLAB_LIBCUDA", getenv("KVSLAB_CUDA_DOUBLE"), 1);
	errno = 0;
	ck_assert_ptr_null(kvs_drv_open("cuda", NULL));
	ck_assert_int_eq(errno, ENODEV);
	d = kvs_drv_open("auto", NULL);
	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(kvs_drv_name(d), "host");
	kvs_drv_close(d);
	unsetenv("KVSLAB_DOUBLE_NODEV");
	d = kvs_drv_open("auto", NULL);
	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(kvs_drv_name(d), "cuda");
	kvs_drv_close(d);
}
END_TEST

/* Map @c at @addr with RW access. */
static void map_rw(kvs_drv_t *d, kvs_devptr_t addr, kvs_chunk_t *c)
{
	ck_assert_int_eq(kvs_drv_map(d, addr, c), 0);
	ck_assert_int_eq(kvs_drv_set_access(d, addr, kvs_drv_chunk_size(c), KVS_ACCESS_RW), 0);
}

START_TEST(test_data_survives_remap)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d);
	kvs_devptr_t a, b;
	kvs_chunk_t *c;
	kvs_event_t *ev;
	unsigned char *buf = malloc(2 * g), *out = malloc(2 * g);

	ck_assert_int_eq(kvs_drv_reserve(d, 4 * g, &a), 0);
	ck_assert_int_eq(kvs_drv_reserve(d, 8 * g, &b), 0);
	ck_assert_uint_eq(a % g, 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_reserved), 12 * g);
	ck_assert_int_eq(kvs_drv_chunk_create(d, 2 * g, &c), 0);
	ck_assert_int_eq(kvs_event_create(d, &ev), 0);
	ck_assert_int_eq(kvs_event_query(ev), 1); /* never recorded: complete */

	map_rw(d, a + g, c);
	tu_fill(buf, 2 * g, 7);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a + g, buf, 2 * g, ev), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);
	ck_assert_int_eq(kvs_event_query(ev), 1);
	ck_assert_int_eq(kvs_drv_unmap(d, a + g, 2 * g), 0);

	/* Elsewhere, in another range: the bytes are the chunk's, not the address's. */
	map_rw(d, b + 5 * g, c);
	memset(out, 0, 2 * g);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, b + 5 * g, 2 * g, ev), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);
	ck_assert(tu_check(out, 2 * g, 7));
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 2 * g);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped_peak), 2 * g);

	ck_assert_int_eq(kvs_drv_unmap(d, b + 5 * g, 2 * g), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
	ck_assert_int_eq(kvs_drv_unreserve(d, a), 0);
	ck_assert_int_eq(kvs_drv_unreserve(d, b), 0);
	assert_drv_empty(d);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_reserved), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_failed_calls), 0);
	kvs_event_destroy(ev);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(_i);
	free(buf);
	free(out);
}
END_TEST

START_TEST(test_misaligned)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d);
	kvs_devptr_t a;
	kvs_chunk_t *c;

	errno = 0;
	ck_assert_int_eq(kvs_drv_reserve(d, g + 4096, &a), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_reserve(d, 0, &a), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g / 2, &c), -1);
	ck_assert_int_eq(errno, EINVAL);

	ck_assert_int_eq(kvs_drv_reserve(d, 4 * g, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	errno = 0;
	ck_assert_int_eq(kvs_drv_map(d, a + 4096, c), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_map(d, a + 4 * g, c), -1); /* past the range */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_set_access(d, a, g, KVS_ACCESS_RW), -1); /* unmapped */
	ck_assert_int_eq(errno, EINVAL);
	map_rw(d, a, c);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g / 2), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_unmap(d, a, 2 * g), -1); /* a hole after it */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_set_access(d, a, 2 * g, KVS_ACCESS_RW), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_set_access(d, a, g, 2), -1); /* not an access value */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_unreserve(d, a + g), -1); /* not a base */
	ck_assert_int_eq(errno, EINVAL);
	/* Failures changed nothing. */
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), g);
	ck_assert_uint_ge(kvs_drv_stat(d, KVS_DRV_STAT_failed_calls), 11);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
	errno = 0;
	ck_assert_int_eq(kvs_drv_chunk_release(d, c), -1); /* twice */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_unreserve(d, a), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(_i);
}
END_TEST

START_TEST(test_map_over_mapped)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d);
	kvs_devptr_t a;
	kvs_chunk_t *c1, *c2;

	ck_assert_int_eq(kvs_drv_reserve(d, 4 * g, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, 2 * g, &c1), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, 2 * g, &c2), 0);
	ck_assert_int_eq(kvs_drv_map(d, a + g, c1), 0);
	errno = 0;
	ck_assert_int_eq(kvs_drv_map(d, a, c2), -1); /* overlaps one granule */
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(kvs_drv_map(d, a + 2 * g, c2), -1);
	ck_assert_int_eq(errno, EBUSY);
	errno = 0;
	ck_assert_int_eq(kvs_drv_unreserve(d, a), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(kvs_drv_unmap(d, a + g, 2 * g), 0);
	/* Now both fit side by side, and one unmap covers both mappings. */
	ck_assert_int_eq(kvs_drv_map(d, a, c1), 0);
	ck_assert_int_eq(kvs_drv_map(d, a + 2 * g, c2), 0);
	ck_assert_int_eq(kvs_drv_set_access(d, a, 4 * g, KVS_ACCESS_RW), 0);
	ck_assert_int_eq(kvs_drv_unmap(d, a + g, 2 * g), -1); /* halves of two */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_unmap(d, a, 4 * g), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c1), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c2), 0);
	assert_drv_empty(d);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(_i);
}
END_TEST

START_TEST(test_limit)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d);
	kvs_devptr_t a;
	kvs_chunk_t *c[3];
	size_t f, t;

	kvs_drv_close(d);
	d = tu_open(_i, 2 * g, 0);
	ck_assert_int_eq(kvs_drv_mem_info(d, &f, &t), 0);
	ck_assert_uint_eq(t, 2 * g);
	ck_assert_uint_eq(f, 2 * g);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c[0]), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c[1]), 0);
	ck_assert_int_eq(kvs_drv_mem_info(d, &f, &t), 0);
	ck_assert_uint_eq(f, 0);
	errno = 0;
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c[2]), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_created), 2 * g);

	/* Mapped bytes are limited too: one chunk at three places. */
	ck_assert_int_eq(kvs_drv_reserve(d, 4 * g, &a), 0);
	ck_assert_int_eq(kvs_drv_map(d, a, c[0]), 0);
	ck_assert_int_eq(kvs_drv_map(d, a + g, c[0]), 0);
	errno = 0;
	ck_assert_int_eq(kvs_drv_map(d, a + 2 * g, c[0]), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_le(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped_peak), 2 * g);
	/* After giving memory back the limit admits again. */
	ck_assert_int_eq(kvs_drv_unmap(d, a, 2 * g), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c[1]), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c[2]), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(_i);
}
END_TEST

START_TEST(test_close_releases_everything)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d);
	kvs_devptr_t a, b;
	kvs_chunk_t *c;
	kvs_event_t *ev;
	void *h;
	int k;

	ck_assert_int_eq(kvs_drv_reserve(d, 8 * g, &a), 0);
	ck_assert_int_eq(kvs_drv_reserve(d, 2 * g, &b), 0);
	for (k = 0; k < 4; k++) {
		ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
		map_rw(d, a + 2 * k * g, c);
		if (k & 1)
			ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
	}
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0); /* created, never mapped */
	ck_assert_int_eq(kvs_event_create(d, &ev), 0);
	ck_assert_int_eq(kvs_drv_host_alloc(d, 12345, &h), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 4 * g);
	if (!is_cuda(_i))
		ck_assert_int_eq(tu_host_chunk_maps(), 4);
	else if (tu_is_double())	/* the double's books: a real libcuda has none */
		ck_assert_uint_eq(tu_double_query("kvsdbl_live_handles"), 5);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(_i);
}
END_TEST

START_TEST(test_release_while_mapped)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d);
	kvs_devptr_t a;
	kvs_chunk_t *c;
	unsigned char *buf = malloc(g);

	ck_assert_int_eq(kvs_drv_reserve(d, 2 * g, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	map_rw(d, a, c);
	tu_fill(buf, g, 3);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, buf, g, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
	/* Still there until its last unmap. */
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_created), g);
	memset(buf, 0, g);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, buf, a, g, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert(tu_check(buf, g, 3));
	errno = 0;
	ck_assert_int_eq(kvs_drv_map(d, a + g, c), -1); /* released: no new mapping */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	assert_drv_empty(d);
	ck_assert_int_eq(kvs_drv_unreserve(d, a), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(_i);
	free(buf);
}
END_TEST

START_TEST(test_copy_needs_access)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d);
	kvs_devptr_t a;
	kvs_chunk_t *c;
	char buf[64] = "kv";

	ck_assert_int_eq(kvs_drv_reserve(d, 2 * g, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	errno = 0;
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, buf, sizeof(buf), NULL), -1); /* unmapped */
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(kvs_drv_map(d, a, c), 0);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, buf, sizeof(buf), NULL), -1); /* no access */
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(kvs_drv_set_access(d, a, g, KVS_ACCESS_READ), 0);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, buf, sizeof(buf), NULL), -1); /* read only */
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, buf, a, sizeof(buf), NULL), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, buf, a + g - 8, sizeof(buf), NULL), -1); /* straddles */
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	/* A new mapping starts with no access. */
	ck_assert_int_eq(kvs_drv_map(d, a, c), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, buf, a, sizeof(buf), NULL), -1);
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(_i);
}
END_TEST

START_TEST(test_host_alloc)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	void *p, *q;
	int x;

	ck_assert_int_eq(kvs_drv_host_alloc(d, 1 << 20, &p), 0);
	ck_assert_uint_eq((uintptr_t)p % 4096, 0);
	memset(p, 0xab, 1 << 20);
	ck_assert_int_eq(kvs_drv_host_alloc(d, 100, &q), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_host), (1 << 20) + 100);
	errno = 0;
	ck_assert_int_eq(kvs_drv_host_free(d, &x), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_host_alloc(d, 0, &q), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_host_free(d, p), 0);
	ck_assert_int_eq(kvs_drv_host_free(d, NULL), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_host), 100);
	ck_assert_int_eq(kvs_drv_close(d), 0); /* frees q */
}
END_TEST

/*
 * Sizes near SIZE_MAX: every place a caller's number is rounded, added to
 * or multiplied must fail cleanly instead of wrapping into a small request
 * that succeeds.  Before the checks, host_alloc(SIZE_MAX - 10) rounded to 0
 * and succeeded, a create past a limit wrapped the limit test, and a copy to
 * a host buffer that wraps was carried out.
 */
START_TEST(test_size_overflow)
{
	kvs_drv_t *d = tu_open(_i, 0, 0), *lim = NULL;
	size_t g = kvs_drv_granularity(d), top = SIZE_MAX / g * g;
	kvs_devptr_t base;
	kvs_chunk_t *c, *c2;
	void *p;
	char buf[64];

	/* host_alloc: the page rounding would wrap; ENOMEM, nothing held. */
	p = buf;
	errno = 0;
	ck_assert_int_eq(kvs_drv_host_alloc(d, SIZE_MAX - 10, &p), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_ptr_eq(p, buf);
	ck_assert_int_eq(kvs_drv_host_alloc(d, SIZE_MAX, &p), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_host), 0);

	/* reserve: aligned sizes whose alignment slack would wrap. */
	ck_assert_int_eq(kvs_drv_reserve(d, top, &base), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(kvs_drv_reserve(d, top - g, &base), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_reserved), 0);

	/* create: larger than any memory. */
	ck_assert_int_eq(kvs_drv_chunk_create(d, top, &c), -1);
	ck_assert_int_eq(errno, ENOMEM);
	assert_drv_empty(d);

	/* create under a limit: bytes held + size wraps the limit test. */
	lim = tu_open(_i, 4 * g, 0);
	ck_assert_int_eq(kvs_drv_chunk_create(lim, g, &c), 0);
	errno = 0;
	ck_assert_int_eq(kvs_drv_chunk_create(lim, top, &c2), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(kvs_drv_stat(lim, KVS_DRV_STAT_bytes_created), g);
	ck_assert_uint_eq(kvs_drv_stat(lim, KVS_DRV_STAT_chunks), 1);

	/* copies: a host buffer or a device range that wraps. */
	ck_assert_int_eq(kvs_drv_reserve(lim, 2 * g, &base), 0);
	ck_assert_int_eq(kvs_drv_map(lim, base, c), 0);
	ck_assert_int_eq(kvs_drv_set_access(lim, base, g, KVS_ACCESS_RW), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(lim, (void *)(UINTPTR_MAX - 100), base, g, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_copy_htod(lim, base, (void *)(UINTPTR_MAX - 100), g, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_copy_htod(lim, UINT64_MAX - 63, buf, 128, NULL), -1);
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(kvs_drv_copy_dtoh(lim, buf, UINT64_MAX - 63, 128, NULL), -1);
	ck_assert_int_eq(errno, EFAULT);
	/* A size past the end of the range, with a buffer that does not wrap. */
	ck_assert_int_eq(kvs_drv_copy_dtoh(lim, buf, base, 3 * g, NULL), -1);
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_uint_eq(kvs_drv_stat(lim, KVS_DRV_STAT_bytes_copied), 0);
	/* set_access and unmap of a size that runs past the range. */
	ck_assert_int_eq(kvs_drv_set_access(lim, base, top, KVS_ACCESS_RW), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_unmap(lim, base, top), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_drv_stat(lim, KVS_DRV_STAT_bytes_mapped), g);

	ck_assert_int_eq(kvs_drv_close(lim), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(_i);
}
END_TEST

/* cuda: a stream made by the double, as an engine would make one. */
static kvs_stream_t double_stream(void **lib)
{
	int (*create)(void **, unsigned int);
	void *s = NULL;

	*lib = dlopen(getenv("KVSLAB_CUDA_DOUBLE"), RTLD_NOW | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(*lib);
	*(void **)&create = dlsym(*lib, "cuStreamCreate");
	ck_assert_ptr_nonnull(create);
	ck_assert_int_eq(create(&s, 1), 0);
	return (kvs_stream_t)(uintptr_t)s;
}

/*
 * kvs_event_record(): a fence on an engine's stream.  Host: any stream
 * value; the event completes when the copy queue reaches the record (at once
 * with nothing queued; after a queued copy, only once that copy is done).
 * cuda: stream 0 and streams the application made are accepted (a stream
 * the driver does not know is undefined behaviour: test_bad_stream_aborts).
 */
START_TEST(test_event_record_stream)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d), n = 4 * g;
	unsigned char *in = malloc(n), *out = malloc(n);
	kvs_event_t *ev;
	kvs_devptr_t a;
	kvs_chunk_t *c;
	kvs_stream_t s = 0;
	void *lib = NULL;

	ck_assert_int_eq(kvs_event_create(d, &ev), 0);
	ck_assert_int_eq(kvs_event_record(ev, 0), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);
	ck_assert_int_eq(kvs_event_query(ev), 1);
	ck_assert_int_eq(kvs_event_record(NULL, 0), -1);
	ck_assert_int_eq(errno, EINVAL);

	/* Behind a queued copy: complete means the copy is done. */
	ck_assert_int_eq(kvs_drv_reserve(d, n, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, n, &c), 0);
	map_rw(d, a, c);
	tu_fill(in, n, 21);
	memset(out, 0, n);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, in, n, NULL), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, a, n, NULL), 0);
	if (is_cuda(_i)) {
		s = double_stream(&lib);
		ck_assert_int_eq(kvs_event_record(ev, s), 0);
		ck_assert_int_eq(kvs_event_wait(ev), 0);
		/* The engine's stream says nothing of our copy queue. */
		ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	} else {
		ck_assert_int_eq(kvs_event_record(ev, 12345), 0);
		ck_assert_int_eq(kvs_event_wait(ev), 0);
	}
	ck_assert_int_eq(kvs_event_query(ev), 1);
	ck_assert(tu_check(out, n, 21));
	ck_assert_int_eq(kvs_event_destroy(ev), 0);
	if (lib) {
		int (*destroy)(void *);

		*(void **)&destroy = dlsym(lib, "cuStreamDestroy_v2");
		ck_assert_int_eq(destroy((void *)(uintptr_t)s), 0);
	}
	ck_assert_int_eq(kvs_drv_close(d), 0);
	if (lib)
		dlclose(lib);
	assert_nothing_left(_i);
	free(in);
	free(out);
}
END_TEST


/*
 * Device-to-device copies and batches, on every backend: bytes arrive where
 * they should, every entry is checked before anything is submitted (a batch
 * with one bad entry copies nothing), and the counters count entries.
 */
START_TEST(test_copy_dtod_batch)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d), n = 4 * g, piece = 1024, i;
	unsigned char *in = malloc(n), *out = malloc(n), *back = malloc(n);
	kvs_copy_t cp[8];
	kvs_event_t *ev;
	kvs_devptr_t a;
	kvs_chunk_t *c;
	uint64_t calls, batches;
	unsigned long native = tu_dbl_calls("cuMemcpyBatchAsync_v2");
	unsigned long launches = tu_dbl_calls("cuLaunchKernel");

	ck_assert_uint_ne(kvs_drv_caps(d) & KVS_DRV_CAP_DTOD, 0);
	/* The double has cuMemcpyBatchAsync: one driver call per batch. */
	if (is_cuda(_i))
		ck_assert_uint_ne(kvs_drv_caps(d) & KVS_DRV_CAP_BATCH, 0);
	ck_assert_uint_eq(kvs_drv_caps(NULL), 0);
	ck_assert_int_eq(kvs_event_create(d, &ev), 0);
	ck_assert_int_eq(kvs_drv_reserve(d, n, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, n, &c), 0);
	map_rw(d, a, c);
	tu_fill(in, n, 5);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, in, n, NULL), 0);

	/* dtod: granule 0 onto granule 2, then read all back. */
	ck_assert_int_eq(kvs_drv_copy_dtod(d, a + 2 * g, a, g, ev), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, a, n, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert_int_eq(memcmp(out + 2 * g, in, g), 0);
	ck_assert_int_eq(memcmp(out, in, 2 * g), 0);
	ck_assert_int_eq(memcmp(out + 3 * g, in + 3 * g, g), 0);
	/* Overlap, zero bytes, outside the mapping. */
	errno = 0;
	ck_assert_int_eq(kvs_drv_copy_dtod(d, a + 8, a, 64, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_copy_dtod(d, a + g, a, 0, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_copy_dtod(d, a + n - 8, a, 64, NULL), -1);
	ck_assert_int_eq(errno, EFAULT);

	/* A scattered batch out: piece i of granule i % 4, at offset 3 * i KiB. */
	calls = kvs_drv_stat(d, KVS_DRV_STAT_copy_calls);
	batches = kvs_drv_stat(d, KVS_DRV_STAT_batch_calls);
	memset(back, 0, n);
	for (i = 0; i < 8; i++) {
		cp[i].src = a + (i % 4) * g + 3 * i * piece;
		cp[i].dst = (uintptr_t)back + i * piece;
		cp[i].bytes = piece;
	}
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 8, ev), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(memcmp(back + i * piece, out + (i % 4) * g + 3 * i * piece,
					piece), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_copy_calls) - calls, 8);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_batch_calls) - batches, 1);

	/* And in: the pieces back to new places, device to device too. */
	for (i = 0; i < 8; i++) {
		cp[i].dst = a + ((i + 1) % 4) * g + 3 * i * piece + piece;
		cp[i].src = (uintptr_t)back + i * piece;
	}
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_HTOD, cp, 8, NULL), 0);
	for (i = 0; i < 8; i++) {
		cp[i].src = cp[i].dst;
		cp[i].dst = a + ((i + 2) % 4) * g + 3 * i * piece + 2 * piece;
	}
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOD, cp, 8, NULL), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, a, n, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(memcmp(out + ((i + 2) % 4) * g + 3 * i * piece + 2 * piece,
					back + i * piece, piece), 0);
	/* Pageable host memory: the copy engines' batch; device to device,
	 * 8 small entries: the gather/scatter kernel. */
	if (is_cuda(_i) && tu_is_double()) {
		ck_assert_uint_eq(tu_dbl_calls("cuMemcpyBatchAsync_v2") - native, 2);
		ck_assert_uint_eq(tu_dbl_calls("cuLaunchKernel") - launches, 1);
	}

	/* One bad entry: nothing at all is copied. */
	memset(back, 0, n);
	for (i = 0; i < 8; i++) {
		cp[i].src = a + i * piece;
		cp[i].dst = (uintptr_t)back + i * piece;
		cp[i].bytes = piece;
	}
	cp[5].src = a + n - 8;
	errno = 0;
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 8, NULL), -1);
	ck_assert_int_eq(errno, EFAULT);
	cp[5].src = a;
	cp[6].bytes = 0;
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 8, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	cp[6].bytes = piece;
	cp[7].dst = 0;
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 8, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	for (i = 0; i < n; i++)
		ck_assert_uint_eq(back[i], 0);
	ck_assert_int_eq(kvs_drv_copy_batch(d, 7, cp, 1, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, NULL, 1, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_copy_batch(NULL, KVS_COPY_DTOH, cp, 1, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* An empty batch records its event. */
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, NULL, 0, ev), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);

	ck_assert_int_eq(kvs_event_destroy(ev), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(_i);
	free(in);
	free(out);
	free(back);
}
END_TEST

/*
 * Stream waits, the calls every backend takes: the copy queue waiting for an
 * event, and an engine's stream waiting for a copy's event.  Without
 * KVS_DRV_CAP_STREAM_WAIT the second waits on the host, so the bytes of the
 * copy are there when it returns.
 */
START_TEST(test_stream_wait_calls)
{
	kvs_drv_t *d = tu_open(_i, 0, 0), *d2 = tu_open(0, 0, 0);
	size_t g = kvs_drv_granularity(d), n = 4 * g;
	unsigned char *in = malloc(n), *out = malloc(n);
	kvs_event_t *ev, *other;
	kvs_devptr_t a;
	kvs_chunk_t *c;

	ck_assert_int_eq(kvs_event_create(d, &ev), 0);
	ck_assert_int_eq(kvs_event_create(d2, &other), 0);
	ck_assert_int_eq(kvs_drv_reserve(d, n, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, n, &c), 0);
	map_rw(d, a, c);
	tu_fill(in, n, 9);
	memset(out, 0, n);
	/* Never recorded: complete, nothing to wait for. */
	ck_assert_int_eq(kvs_drv_stream_wait(d, ev), 0);
	ck_assert_int_eq(kvs_event_record(ev, 0), 0);
	ck_assert_int_eq(kvs_drv_stream_wait(d, ev), 0);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, in, n, NULL), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, a, n, ev), 0);
	ck_assert_int_eq(kvs_event_stream_wait(ev, 0), 0);
	if (!(kvs_drv_caps(d) & KVS_DRV_CAP_STREAM_WAIT)) {
		/* Waited on the host. */
		ck_assert_int_eq(kvs_event_query(ev), 1);
		ck_assert(tu_check(out, n, 9));
	}
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert(tu_check(out, n, 9));
	errno = 0;
	ck_assert_int_eq(kvs_drv_stream_wait(d, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_stream_wait(NULL, ev), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_drv_stream_wait(d, other), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_event_stream_wait(NULL, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_event_destroy(ev), 0);
	ck_assert_int_eq(kvs_event_destroy(other), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	ck_assert_int_eq(kvs_drv_close(d2), 0);
	assert_nothing_left(_i);
	free(in);
	free(out);
}
END_TEST

/*
 * cuda over the double: the copy queue ordered after an engine's kernel on
 * the device.  The engine's stream runs a kernel that rewrites two pages
 * for 2 s and records an event after it.  A backup submitted without
 * waiting runs at once and reads the old bytes (the kernel is long so that
 * this is so; nothing below depends on it for correctness); one submitted
 * after kvs_drv_stream_wait() on that event, single copy and batch alike,
 * reads what the kernel wrote, with no host synchronization in between.
 */
START_TEST(test_stream_wait_orders_backup)
{
	if (TU_NEED_DOUBLE(1, "the double's writing kernels"))
		return;
	kvs_drv_t *d = tu_open(1, 0, 0);
	size_t g = kvs_drv_granularity(d), n = 2 * g, piece = g / 8, i;
	unsigned char *old = malloc(n), *early = malloc(n), *late = malloc(n);
	uint64_t s = tu_dbl_stream_create();
	unsigned long launches;
	double t0;
	kvs_event_t *kdone, *ev;
	void *pinned;
	kvs_copy_t cp[8];
	kvs_devptr_t a;
	kvs_chunk_t *c;

	ck_assert_uint_ne(s, 0);
	ck_assert_uint_ne(kvs_drv_caps(d) & KVS_DRV_CAP_STREAM_WAIT, 0);
	ck_assert_int_eq(kvs_event_create(d, &kdone), 0);
	ck_assert_int_eq(kvs_event_create(d, &ev), 0);
	ck_assert_int_eq(kvs_drv_reserve(d, n, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, n, &c), 0);
	map_rw(d, a, c);
	tu_fill(old, n, 3);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, old, n, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);

	t0 = tu_seconds();
	ck_assert_int_eq(tu_dbl_kernel_write(s, a, n, 77, 2000000000ULL), 0);
	ck_assert_int_eq(kvs_event_record(kdone, s), 0);
	/* Not ordered after the kernel: the old bytes (checked only when the
	 * copies were done before the kernel could end, so that a stalled
	 * machine cannot fail the test). */
	memset(early, 0, n);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, early, a, g, NULL), 0);
	for (i = 0; i < 8; i++) {
		cp[i].dst = (uintptr_t)early + g + i * piece;
		cp[i].src = a + g + i * piece;
		cp[i].bytes = piece;
	}
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 8, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	if (tu_seconds() - t0 < 1.9)
		ck_assert(tu_check(early, n, 3));

	/* Ordered after it on the device: the kernel's bytes. */
	memset(late, 0, n);
	ck_assert_int_eq(kvs_drv_stream_wait(d, kdone), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, late, a, g, NULL), 0);
	for (i = 0; i < 8; i++)
		cp[i].dst = (uintptr_t)late + g + i * piece;
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 8, ev), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);
	ck_assert(tu_dbl_pattern_ok(late, n, 77));
	ck_assert_int_eq(kvs_event_query(kdone), 1);
	/* The same through the gather/scatter kernel (pinned memory): a
	 * second writer, ordered after on the device again. */
	ck_assert_int_eq(kvs_drv_host_alloc(d, g, &pinned), 0);
	memset(pinned, 0, g);
	ck_assert_int_eq(tu_dbl_kernel_write(s, a + g, g, 78, 2000000000ULL), 0);
	ck_assert_int_eq(kvs_event_record(kdone, s), 0);
	ck_assert_int_eq(kvs_drv_stream_wait(d, kdone), 0);
	launches = tu_dbl_calls("cuLaunchKernel");
	for (i = 0; i < 8; i++)
		cp[i].dst = (uintptr_t)pinned + i * piece;
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 8, ev), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuLaunchKernel") - launches, 1);
	ck_assert(tu_dbl_pattern_ok(pinned, g, 78));
	ck_assert_int_eq(kvs_drv_host_free(d, pinned), 0);
	ck_assert_uint_ge(tu_dbl_calls("cuStreamWaitEvent"), 1);

	ck_assert_int_eq(kvs_event_destroy(kdone), 0);
	ck_assert_int_eq(kvs_event_destroy(ev), 0);
	tu_dbl_stream_destroy(s);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(1);
	free(old);
	free(early);
	free(late);
}
END_TEST

/*
 * cuda over the double: an engine's stream ordered after a copy on the
 * device.  The copy's completion is held (kvsdbl_copy_hold), so its event
 * is pending; kvs_event_stream_wait() returns at once, and an event the
 * engine records on its stream afterwards stays pending until the copy
 * completes; a kernel reading the copied bytes then runs on that stream.
 */
START_TEST(test_engine_waits_for_copy)
{
	if (TU_NEED_DOUBLE(1, "the double's held copies"))
		return;
	kvs_drv_t *d = tu_open(1, 0, 0);
	size_t g = kvs_drv_granularity(d), n = 2 * g;
	unsigned char *in = malloc(n);
	uint64_t s = tu_dbl_stream_create();
	kvs_event_t *ev, *after;
	kvs_devptr_t a;
	kvs_chunk_t *c;

	ck_assert_uint_ne(s, 0);
	ck_assert_uint_ne(kvs_drv_caps(d) & KVS_DRV_CAP_STREAM_WAIT, 0);
	ck_assert_int_eq(kvs_event_create(d, &ev), 0);
	ck_assert_int_eq(kvs_event_create(d, &after), 0);
	ck_assert_int_eq(kvs_drv_reserve(d, n, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, n, &c), 0);
	map_rw(d, a, c);
	tu_fill(in, n, 8);

	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, in, n, ev), 0);
	ck_assert_int_eq(kvs_event_query(ev), 0);
	ck_assert_int_eq(kvs_event_stream_wait(ev, s), 0);
	ck_assert_int_eq(kvs_event_record(after, s), 0);
	ck_assert_int_eq(kvs_event_query(after), 0);
	ck_assert_int_eq(tu_dbl_copy_release(1), 0);
	ck_assert_int_eq(kvs_event_query(ev), 1);
	ck_assert_int_eq(kvs_event_query(after), 1);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	ck_assert_int_eq(tu_dbl_kernel(s, a, n, 1000), 0);
	ck_assert_int_eq(kvs_event_record(after, s), 0);
	ck_assert_int_eq(kvs_event_wait(after), 0);
	ck_assert_int_eq(tu_dbl_sticky(), 0);

	ck_assert_int_eq(kvs_event_destroy(ev), 0);
	ck_assert_int_eq(kvs_event_destroy(after), 0);
	tu_dbl_stream_destroy(s);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(1);
	free(in);
}
END_TEST

/*
 * cuda over the double: an unmap synchronizes the copy stream only when a
 * copy was submitted since the last synchronization finished (an unmap's
 * own, or kvs_drv_synchronize()); with KVS_DRV_F_SYNC_UNMAP the device is
 * synchronized every time regardless.
 */
START_TEST(test_unmap_syncs_only_after_copies)
{
	if (TU_NEED_DOUBLE(1, "the double's call counts"))
		return;
	kvs_drv_t *d = tu_open(1, 0, 0);
	size_t g = kvs_drv_granularity(d);
	unsigned char *buf = calloc(1, g);
	unsigned long s0;
	kvs_event_t *ev;
	kvs_devptr_t a;
	kvs_chunk_t *c;
	int i;

	ck_assert_int_eq(kvs_drv_reserve(d, g, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	s0 = tu_dbl_calls("cuStreamSynchronize");
	for (i = 0; i < 3; i++) {
		map_rw(d, a, c);
		ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	}
	ck_assert_uint_eq(tu_dbl_calls("cuStreamSynchronize") - s0, 0);
	/* A copy: the next unmap drains, the one after does not. */
	map_rw(d, a, c);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, buf, g, NULL), 0);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuStreamSynchronize") - s0, 1);
	map_rw(d, a, c);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuStreamSynchronize") - s0, 1);
	/* Synchronized by the caller: nothing left to drain. */
	map_rw(d, a, c);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, buf, a, g, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuStreamSynchronize") - s0, 2);
	/* A copy's event found complete covers it and what came before... */
	ck_assert_int_eq(kvs_event_create(d, &ev), 0);
	map_rw(d, a, c);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, buf, g, NULL), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, buf, a, g, ev), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	map_rw(d, a, c);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, buf, g, ev), 0);
	while (kvs_event_query(ev) == 0)
		;
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuStreamSynchronize") - s0, 2);
	/* ... one recorded on an engine's stream does not. */
	map_rw(d, a, c);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, buf, g, NULL), 0);
	ck_assert_int_eq(kvs_event_record(ev, 0), 0);
	ck_assert_int_eq(kvs_event_wait(ev), 0);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuStreamSynchronize") - s0, 3);
	ck_assert_int_eq(kvs_event_destroy(ev), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
	ck_assert_int_eq(kvs_drv_unreserve(d, a), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);

	/* SYNC_UNMAP: the device, every unmap. */
	d = tu_open(1, 0, KVS_DRV_F_SYNC_UNMAP);
	ck_assert_int_eq(kvs_drv_reserve(d, g, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	s0 = tu_dbl_calls("cuCtxSynchronize");
	for (i = 0; i < 2; i++) {
		map_rw(d, a, c);
		ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	}
	ck_assert_uint_eq(tu_dbl_calls("cuCtxSynchronize") - s0, 2);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(1);
	free(buf);
}
END_TEST

/* cuda over the double: chunks are GPUDirect RDMA capable only when asked
 * (KVS_DRV_F_RDMA); the flag costs map time on an H200. */
START_TEST(test_rdma_opt_in)
{
	if (TU_NEED_DOUBLE(1, "the double's book of cuMemCreate flags"))
		return;
	size_t r0 = tu_double_query("kvsdbl_rdma_creates");
	kvs_drv_t *d = tu_open(1, 0, 0);
	size_t g = kvs_drv_granularity(d);
	kvs_chunk_t *c;

	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	ck_assert_uint_eq(tu_double_query("kvsdbl_rdma_creates"), r0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	d = tu_open(1, 0, KVS_DRV_F_RDMA);
	ck_assert_ptr_nonnull(d);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	ck_assert_uint_eq(tu_double_query("kvsdbl_rdma_creates"), r0 + 2);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	assert_nothing_left(1);
}
END_TEST

/* n copies of 2 KiB, piece i from/to offset 5 KiB * i of the device
 * range a (inside 4 granules) and 2 KiB * i of host memory h. */
static void scatter(kvs_copy_t *cp, size_t n, int kind, kvs_devptr_t a, unsigned char *h)
{
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t dev = a + i * 5120, host = (uintptr_t)h + i * 2048;

		cp[i].dst = kind == KVS_COPY_DTOH ? host : dev;
		cp[i].src = kind == KVS_COPY_DTOH ? dev : host;
		cp[i].bytes = 2048;
	}
}

/*
 * cuda over the double: batches as the gather/scatter kernel.  Pinned host
 * memory of the driver and at least 8 small entries: one cuLaunchKernel,
 * bytes where they belong, both ways.  Pageable memory, a small batch, or
 * a driver opened with KVS_DRV_F_NO_KERNELS: cuMemcpyBatchAsync.  The
 * descriptor ring's slots are reused only once their launch is done: with
 * the double's copies held, four launches fill the ring and the fifth
 * batch goes to the copy engines; released, kernels again.  A batch of more
 * than one slot's entries takes two launches.
 */
START_TEST(test_kernel_batches)
{
	if (TU_NEED_DOUBLE(1, "the double's held copies and launch counts"))
		return;
	kvs_drv_t *d = tu_open(1, 0, 0), *nk;
	size_t g = kvs_drv_granularity(d), i, big = 3000;
	size_t half = (64 * 5120 + g - 1) / g * g, n = 2 * half;
	unsigned char *in = malloc(n), *out = malloc(n), *pageable = malloc(64 * 2048);
	unsigned char *pin;
	kvs_copy_t *cp = calloc(big, sizeof(*cp));
	unsigned long l0, b0;
	kvs_devptr_t a;
	kvs_chunk_t *c;
	void *hp;

	ck_assert_uint_ne(kvs_drv_caps(d) & KVS_DRV_CAP_KERNELS, 0);
	ck_assert_int_eq(kvs_drv_host_alloc(d, 64 * 2048, &hp), 0);
	pin = hp;
	ck_assert_int_eq(kvs_drv_reserve(d, n, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, n, &c), 0);
	map_rw(d, a, c);
	tu_fill(in, n, 31);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, in, n, NULL), 0);

	/* Out through the kernel, then back in at a shifted place. */
	l0 = tu_dbl_calls("cuLaunchKernel");
	b0 = tu_dbl_calls("cuMemcpyBatchAsync_v2");
	memset(pin, 0, 64 * 2048);
	scatter(cp, 64, KVS_COPY_DTOH, a, pin);
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 64, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	for (i = 0; i < 64; i++)
		ck_assert_int_eq(memcmp(pin + i * 2048, in + i * 5120, 2048), 0);
	scatter(cp, 64, KVS_COPY_HTOD, a + half, pin);
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_HTOD, cp, 64, NULL), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, out, a, n, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	for (i = 0; i < 64; i++)
		ck_assert_int_eq(memcmp(out + half + i * 5120, in + i * 5120, 2048), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuLaunchKernel") - l0, 2);
	ck_assert_uint_eq(tu_dbl_calls("cuMemcpyBatchAsync_v2") - b0, 0);

	/* Not for the kernel: pageable memory; 4 entries. */
	scatter(cp, 64, KVS_COPY_DTOH, a, pageable);
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 64, NULL), 0);
	scatter(cp, 4, KVS_COPY_DTOH, a, pin);
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 4, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert_int_eq(memcmp(pageable + 63 * 2048, in + 63 * 5120, 2048), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuLaunchKernel") - l0, 2);
	ck_assert_uint_eq(tu_dbl_calls("cuMemcpyBatchAsync_v2") - b0, 2);

	/* The ring: held launches keep their slots. */
	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	scatter(cp, 16, KVS_COPY_DTOH, a, pin);
	for (i = 0; i < 5; i++)
		ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 16, NULL), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuLaunchKernel") - l0, 6);
	ck_assert_uint_eq(tu_dbl_calls("cuMemcpyBatchAsync_v2") - b0, 3);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 16, NULL), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuLaunchKernel") - l0, 7);

	/* More entries than a slot holds: two launches. */
	for (i = 0; i < big; i++) {
		cp[i].dst = (uintptr_t)pin + i * 16;
		cp[i].src = a + i * 32;
		cp[i].bytes = 16;
	}
	memset(pin, 0, big * 16);
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, big, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuLaunchKernel") - l0, 9);
	for (i = 0; i < big; i++)
		ck_assert_int_eq(memcmp(pin + i * 16, in + i * 32, 16), 0);

	ck_assert_int_eq(kvs_drv_host_free(d, hp), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);

	/* KVS_DRV_F_NO_KERNELS: the copy engines, whatever the batch. */
	nk = tu_open(1, 0, KVS_DRV_F_NO_KERNELS);
	ck_assert_ptr_nonnull(nk);
	ck_assert_uint_eq(kvs_drv_caps(nk) & KVS_DRV_CAP_KERNELS, 0);
	ck_assert_int_eq(kvs_drv_host_alloc(nk, 64 * 2048, &hp), 0);
	ck_assert_int_eq(kvs_drv_reserve(nk, n, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(nk, n, &c), 0);
	map_rw(nk, a, c);
	scatter(cp, 64, KVS_COPY_DTOH, a, hp);
	l0 = tu_dbl_calls("cuLaunchKernel");
	ck_assert_int_eq(kvs_drv_copy_batch(nk, KVS_COPY_DTOH, cp, 64, NULL), 0);
	ck_assert_uint_eq(tu_dbl_calls("cuLaunchKernel") - l0, 0);
	ck_assert_int_eq(kvs_drv_close(nk), 0);
	assert_nothing_left(1);
	free(in);
	free(out);
	free(pageable);
	free(cp);
}
END_TEST

/* Calls of @fn counted by the double at @path (loaded already), or 0. */
static unsigned long calls_in(const char *path, const char *fn)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	unsigned long (*f)(const char *);
	unsigned long n = 0;

	if (!h)
		return 0;
	*(void **)&f = dlsym(h, "kvsdbl_calls");
	if (f)
		n = f(fn);
	dlclose(h);
	return n;
}

/*
 * A libcuda without the calls kvslab loads optionally (the double built
 * -DKVSDBL_MINIMAL: no cuMemcpyBatchAsync_v2, no module or launch calls):
 * the driver opens, has neither KVS_DRV_CAP_BATCH nor KVS_DRV_CAP_KERNELS,
 * and a batch is one cuMemcpyDtoHAsync per entry, bytes intact.
 */
START_TEST(test_minimal_driver)
{
	if (TU_NEED_DOUBLE(1, "the double built without the optional calls"))
		return;
	const char *min = getenv("KVSLAB_CUDA_DOUBLE_MIN");
	kvs_drv_t *d;
	size_t g, i;
	kvs_copy_t cp[8];
	unsigned char *in;
	unsigned long c0;
	kvs_devptr_t a;
	kvs_chunk_t *c;
	void *hp;

	if (!min || !*min)
		return;
	setenv("KVSLAB_LIBCUDA", min, 1);
	d = kvs_drv_open("cuda", NULL);
	ck_assert_msg(d != NULL, "%s", kvs_drv_open_error());
	ck_assert_uint_eq(kvs_drv_caps(d), KVS_DRV_CAP_DTOD | KVS_DRV_CAP_STREAM_WAIT);
	g = kvs_drv_granularity(d);
	in = malloc(g);
	tu_fill(in, g, 4);
	ck_assert_int_eq(kvs_drv_reserve(d, g, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	map_rw(d, a, c);
	ck_assert_int_eq(kvs_drv_copy_htod(d, a, in, g, NULL), 0);
	ck_assert_int_eq(kvs_drv_host_alloc(d, 8 * 1024, &hp), 0);
	for (i = 0; i < 8; i++) {
		cp[i].dst = (uintptr_t)hp + i * 1024;
		cp[i].src = a + i * 4096;
		cp[i].bytes = 1024;
	}
	c0 = calls_in(min, "cuMemcpyDtoHAsync_v2");
	ck_assert_int_eq(kvs_drv_copy_batch(d, KVS_COPY_DTOH, cp, 8, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert_uint_eq(calls_in(min, "cuMemcpyDtoHAsync_v2") - c0, 8);
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(memcmp((char *)hp + i * 1024, in + i * 4096, 1024), 0);
	ck_assert_int_eq(kvs_drv_host_free(d, hp), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	free(in);
}
END_TEST

static int record_bad_stream(kvs_event_t *ev)
{
	return kvs_event_record(ev, (kvs_stream_t)0xdead0);
}

static int wait_bad_stream(kvs_event_t *ev)
{
	return kvs_event_stream_wait(ev, (kvs_stream_t)0xdead0);
}

/* Call @call with an event of a cuda driver over the double, in a child
 * whose stderr lands in @msg; the child's wait status. */
static int cuda_child(int (*call)(kvs_event_t *), char *msg, size_t len)
{
	int pfd[2], status;
	size_t off = 0;
	ssize_t got;
	pid_t pid;

	ck_assert_int_eq(pipe(pfd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		kvs_event_t *ev;
		kvs_drv_t *d;

		close(pfd[0]);
		dup2(pfd[1], 2);
		d = tu_open(1, 0, 0);
		if (!d || kvs_event_create(d, &ev) < 0)
			_exit(2);
		(void)call(ev);
		_exit(3);	/* returned: nothing stopped the misuse */
	}
	close(pfd[1]);
	while (off < len - 1 && (got = read(pfd[0], msg + off, len - 1 - off)) > 0)
		off += (size_t)got;
	msg[off] = 0;
	close(pfd[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

/*
 * A stream the driver does not know crashes the real libcuda inside
 * cuEventRecord and cuStreamWaitEvent; the double aborts as loudly, naming
 * the rule.  In a forked child of our own, so that it also runs unforked
 * (valgrind's CK_FORK=no).
 */
START_TEST(test_bad_stream_aborts)
{
	if (TU_NEED_DOUBLE(1, "the double's abort on an unknown stream (a real libcuda crashes)"))
		return;
	char msg[4096];
	int st;

	st = cuda_child(record_bad_stream, msg, sizeof(msg));
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %#x: %s", st, msg);
	ck_assert_ptr_nonnull(strstr(msg, "cuEventRecord: hStream is not a live stream"));
	st = cuda_child(wait_bad_stream, msg, sizeof(msg));
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %#x: %s", st, msg);
	ck_assert_ptr_nonnull(strstr(msg, "cuStreamWaitEvent: hStream is not a live stream"));
}
END_TEST

struct sink {
	char text[4096];
	int lines;
};

static void sink_write(void *arg, const char *line)
{
	struct sink *s = arg;

	strncat(s->text, line, sizeof(s->text) - strlen(s->text) - 1);
	s->lines++;
}

START_TEST(test_stats)
{
	kvs_drv_t *d = tu_open(_i, 0, 0);
	size_t g = kvs_drv_granularity(d);
	struct sink s = {{0}, 0};
	kvs_devptr_t a;
	uint64_t v;

	ck_assert_int_eq(kvs_drv_reserve(d, 2 * g, &a), 0);
	ck_assert_int_eq(kvs_drv_stat_get(d, "bytes_reserved", &v), 0);
	ck_assert_uint_eq(v, 2 * g);
	ck_assert_int_eq(kvs_drv_stat_get(d, "reserve_calls", &v), 0);
	ck_assert_uint_eq(v, 1);
	errno = 0;
	ck_assert_int_eq(kvs_drv_stat_get(d, "nonsense", &v), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_str_eq(kvs_drv_stat_name(KVS_DRV_STAT_map_calls), "map_calls");
	ck_assert_ptr_null(kvs_drv_stat_name(KVS_DRV_STAT__COUNT));
	ck_assert_int_eq(kvs_drv_stats_print(d, sink_write, &s), 0);
	ck_assert_int_eq(s.lines, KVS_DRV_STAT__COUNT + 1);
	ck_assert_ptr_nonnull(strstr(s.text, "bytes_reserved"));
	ck_assert_uint_gt(kvs_drv_stat(d, KVS_DRV_STAT_ns_in_calls), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* Host only: pages really become resident when access is granted and really
 * leave on unmap; the chunk's memory is gone after release. */
START_TEST(test_host_rss)
{
	kvs_drv_t *d = kvs_drv_open("host", NULL);
	size_t g = kvs_drv_granularity(d), sz = 16 * g;
	kvs_devptr_t a;
	kvs_chunk_t *c;
	long base, mapped, after;

	ck_assert_int_eq(kvs_drv_reserve(d, sz, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, sz, &c), 0);
	base = tu_rss_shmem();
	ck_assert_int_ge(base, 0);
	map_rw(d, a, c);
	memset((void *)(uintptr_t)a, 1, sz); /* resident whether or not populate works */
	mapped = tu_rss_shmem();
	ck_assert_int_ge(mapped - base, (long)sz * 9 / 10);
	ck_assert_int_eq(kvs_drv_unmap(d, a, sz), 0);
	after = tu_rss_shmem();
	ck_assert_int_le(after - base, (long)sz / 10);
	/* One arena holds the chunk, whose memory stays committed unmapped;
	 * the arena goes with its last chunk. */
	ck_assert_int_eq(tu_host_chunk_fds(), 1);
	ck_assert_int_ge(tu_host_chunk_bytes(), (long)sz);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
	ck_assert_int_eq(tu_host_chunk_bytes(), 0);
	ck_assert_int_eq(tu_host_chunk_fds(), 0);
	ck_assert_int_eq(tu_host_chunk_maps(), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	ck_assert_int_eq(tu_host_chunk_fds(), 0);
}
END_TEST

/* Run @fn in a child process (for tests that change process limits); its
 * exit status: 0 when it passed, else the line of the failed check. */
#define CHILD_CHECK(cond)                                                     \
	do {                                                                  \
		if (!(cond))                                                  \
			return __LINE__;                                      \
	} while (0)

static int in_child(int (*fn)(void))
{
	int status;
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(fn());
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static int rlimit_unchanged(void)
{
	struct rlimit before, after;
	kvs_drv_t *d;

	CHILD_CHECK(getrlimit(RLIMIT_NOFILE, &before) == 0);
	/* Leave room to raise, or a raise could not be seen. */
	if (before.rlim_cur == before.rlim_max && before.rlim_cur > 64) {
		before.rlim_cur = 64;
		CHILD_CHECK(setrlimit(RLIMIT_NOFILE, &before) == 0);
	}
	d = kvs_drv_open("host", NULL);
	CHILD_CHECK(d);
	CHILD_CHECK(getrlimit(RLIMIT_NOFILE, &after) == 0);
	CHILD_CHECK(after.rlim_cur == before.rlim_cur && after.rlim_max == before.rlim_max);
	CHILD_CHECK(kvs_drv_close(d) == 0);
	return 0;
}

/* Host only: opening a driver leaves RLIMIT_NOFILE alone (select() users). */
START_TEST(test_host_rlimit_unchanged)
{
	ck_assert_int_eq(in_child(rlimit_unchanged), 0);
}
END_TEST

#define MANY 2000

static int many_chunks(void)
{
	struct rlimit rl = {64, 64};	/* hard limit too: nothing can raise it */
	size_t g = 64 << 10;
	kvs_drv_attr_t attr;
	kvs_chunk_t **c = calloc(MANY, sizeof(*c));
	kvs_devptr_t base;
	kvs_drv_t *d;
	int k;

	CHILD_CHECK(c);
	/* valgrind keeps descriptors of its own at the top of the limit and
	 * refuses to lower it: there, tu_host_chunk_fds() below bounds the
	 * descriptors the backend holds instead. */
	if (!getenv("KVSLAB_UNDER_VALGRIND"))
		CHILD_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	kvs_drv_attr_init(&attr);
	attr.granularity = g;
	attr.flags = KVS_DRV_F_LAZY;
	d = kvs_drv_open("host", &attr);
	CHILD_CHECK(d);
	CHILD_CHECK(kvs_drv_reserve(d, MANY * g, &base) == 0);
	for (k = 0; k < MANY; k++) {
		CHILD_CHECK(kvs_drv_chunk_create(d, g, &c[k]) == 0);
		CHILD_CHECK(kvs_drv_map(d, base + (size_t)k * g, c[k]) == 0);
	}
	CHILD_CHECK(kvs_drv_set_access(d, base, MANY * g, KVS_ACCESS_RW) == 0);
	for (k = 0; k < MANY; k++) {
		unsigned char *p = (unsigned char *)(uintptr_t)(base + (size_t)k * g);

		tu_fill(p, 64, (unsigned)k);
		tu_fill(p + g - 64, 64, (unsigned)k + MANY);
	}
	for (k = 0; k < MANY; k++) {
		unsigned char *p = (unsigned char *)(uintptr_t)(base + (size_t)k * g);

		CHILD_CHECK(tu_check(p, 64, (unsigned)k));
		CHILD_CHECK(tu_check(p + g - 64, 64, (unsigned)k + MANY));
	}
	CHILD_CHECK(tu_host_chunk_fds() >= 1 && tu_host_chunk_fds() <= 2);
	for (k = 0; k < MANY; k += 2)
		CHILD_CHECK(kvs_drv_chunk_release(d, c[k]) == 0);
	CHILD_CHECK(kvs_drv_close(d) == 0);
	CHILD_CHECK(tu_host_chunk_fds() == 0 && tu_host_chunk_maps() == 0);
	free(c);
	return 0;
}

/* Host only: 2000 one-granule chunks, mapped and used, under a limit of 64
 * descriptors (one memfd per chunk needed 2000). */
START_TEST(test_host_many_chunks_few_fds)
{
	ck_assert_int_eq(in_child(many_chunks), 0);
}
END_TEST

/* Lines of /proc/self/maps: the VMAs vm.max_map_count bounds. */
static int vma_count(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	int ch, n = 0;

	if (!f)
		return -1;
	while ((ch = getc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

#define VMA_BUFS 4
#define VMA_CHUNKS 70000	/* in all: more than the default 65530 VMAs */
#define VMA_PER (VMA_CHUNKS / VMA_BUFS)
#define VMA_BATCH 1000

static unsigned char *vma_ptr(const kvs_devptr_t *base, size_t g, int k)
{
	return (unsigned char *)(uintptr_t)(base[k % VMA_BUFS] + (size_t)(k / VMA_BUFS) * g);
}

static int many_vmas(void)
{
	size_t g = 64 << 10;
	kvs_drv_attr_t attr;
	kvs_chunk_t **c = calloc(VMA_CHUNKS, sizeof(*c));
	kvs_devptr_t base[VMA_BUFS];
	int vmas0, k, b, i;
	kvs_drv_t *d;

	CHILD_CHECK(c);
	vmas0 = vma_count();
	CHILD_CHECK(vmas0 > 0);
	kvs_drv_attr_init(&attr);
	attr.granularity = g;
	attr.flags = KVS_DRV_F_LAZY;
	d = kvs_drv_open("host", &attr);
	CHILD_CHECK(d);
	for (b = 0; b < VMA_BUFS; b++)
		CHILD_CHECK(kvs_drv_reserve(d, VMA_PER * g, &base[b]) == 0);
	/* As a slab allocator does: slab i's chunk of buffer 0, of buffer 1... */
	for (k = 0; k < VMA_CHUNKS; k++) {
		CHILD_CHECK(kvs_drv_chunk_create(d, g, &c[k]) == 0);
		CHILD_CHECK(kvs_drv_map(d, (kvs_devptr_t)(uintptr_t)vma_ptr(base, g, k), c[k]) == 0);
		CHILD_CHECK(kvs_drv_set_access(d, (kvs_devptr_t)(uintptr_t)vma_ptr(base, g, k), g,
					       KVS_ACCESS_RW) == 0);
	}
	CHILD_CHECK(vma_count() - vmas0 < 1000);
	CHILD_CHECK(tu_host_chunk_maps() <= VMA_BUFS);
	CHILD_CHECK(tu_host_chunk_fds() == VMA_BUFS);
	for (k = 0; k < VMA_CHUNKS; k += 7) {
		*vma_ptr(base, g, k) = (unsigned char)k;
		vma_ptr(base, g, k)[g - 1] = (unsigned char)(k >> 8);
	}
	for (k = 0; k < VMA_CHUNKS; k += 7)
		CHILD_CHECK(*vma_ptr(base, g, k) == (unsigned char)k &&
			    vma_ptr(base, g, k)[g - 1] == (unsigned char)(k >> 8));
	/* Unmap every other chunk, a batch at a time (every other one of all
	 * of them at once would be 70000 VMAs again: holes count), and map
	 * it back: same range, same bytes, merged again. */
	for (i = 0; i < VMA_CHUNKS; i += VMA_BATCH) {
		for (k = i; k < i + VMA_BATCH && k < VMA_CHUNKS; k += 2)
			CHILD_CHECK(kvs_drv_unmap(d, (kvs_devptr_t)(uintptr_t)vma_ptr(base, g, k),
						  g) == 0);
		for (k = i; k < i + VMA_BATCH && k < VMA_CHUNKS; k += 2) {
			kvs_devptr_t a = (kvs_devptr_t)(uintptr_t)vma_ptr(base, g, k);

			CHILD_CHECK(kvs_drv_map(d, a, c[k]) == 0);
			CHILD_CHECK(kvs_drv_set_access(d, a, g, KVS_ACCESS_RW) == 0);
		}
	}
	CHILD_CHECK(vma_count() - vmas0 < 1000);
	for (k = 0; k < VMA_CHUNKS; k += 7)
		CHILD_CHECK(*vma_ptr(base, g, k) == (unsigned char)k &&
			    vma_ptr(base, g, k)[g - 1] == (unsigned char)(k >> 8));
	/* A chunk mapped a second time elsewhere is the same memory. */
	CHILD_CHECK(kvs_drv_unmap(d, base[0], g) == 0);
	CHILD_CHECK(kvs_drv_map(d, base[0], c[1]) == 0);
	CHILD_CHECK(kvs_drv_set_access(d, base[0], g, KVS_ACCESS_RW) == 0);
	*(unsigned char *)(uintptr_t)base[0] = 0xa5;
	CHILD_CHECK(*vma_ptr(base, g, 1) == 0xa5);
	for (k = 0; k < VMA_CHUNKS; k += 2)
		CHILD_CHECK(kvs_drv_chunk_release(d, c[k]) == 0);
	CHILD_CHECK(kvs_drv_close(d) == 0);
	CHILD_CHECK(tu_host_chunk_fds() == 0 && tu_host_chunk_maps() == 0);
	free(c);
	return 0;
}

/* Host only: 70000 one-granule chunks, lazy, created interleaved over four
 * reservations as a slab allocator makes them, mapped side by side: their
 * mappings merge, so the count of VMAs stays small and the default
 * vm.max_map_count (65530, left as it is) is no limit. */
START_TEST(test_host_many_chunks_few_vmas)
{
	/* valgrind's address-space manager holds far fewer segments than the
	 * kernel's map count: it cannot host this test. */
	if (getenv("KVSLAB_UNDER_VALGRIND"))
		return;
	ck_assert_int_eq(in_child(many_vmas), 0);
}
END_TEST

/* Host only: a chunk larger than the machine's memory fails at creation,
 * having committed nothing, instead of waking the OOM killer later. */
/* Write @text to @dir/@name. */
static void put_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

/* A chunk larger than what the memory cgroup's limit leaves fails with
 * ENOMEM at creation (the kernel would OOM-kill the process at its first
 * touch instead).  The cgroup trees are fakes (KVSLAB_CGROUP_ROOT,
 * KVSLAB_CGROUP_PROC), so that the limit is small and nothing is killed:
 * a v2 tree whose parent is tighter than the leaf, and a v1 tree inside a
 * cgroup namespace (the path is not under the mount). */
START_TEST(test_host_cgroup_limit)
{
	char root[] = "/tmp/kvs_cg_XXXXXX", dir[512], proc[600], cmd[700];
	kvs_drv_t *d;
	size_t g;
	kvs_chunk_t *c;
	char num[32];

	ck_assert_ptr_nonnull(mkdtemp(root));
	d = kvs_drv_open("host", NULL);
	ck_assert_ptr_nonnull(d);
	g = kvs_drv_granularity(d);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	/* v2: /a (limit 5g, 1g held) / b (limit 8g, 2g held, half of it
	 * inactive page cache): the parent leaves 4g. */
	put_file(root, "cgroup.controllers", "cpuset cpu io memory pids\n");
	snprintf(dir, sizeof(dir), "%s/a", root);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(num, sizeof(num), "%zu\n", 5 * g);
	put_file(dir, "memory.max", num);
	snprintf(num, sizeof(num), "%zu\n", g);
	put_file(dir, "memory.current", num);
	snprintf(dir, sizeof(dir), "%s/a/b", root);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(num, sizeof(num), "%zu\n", 8 * g);
	put_file(dir, "memory.max", num);
	snprintf(num, sizeof(num), "%zu\n", 2 * g);
	put_file(dir, "memory.current", num);
	snprintf(num, sizeof(num), "anon 0\ninactive_file %zu\n", g);
	put_file(dir, "memory.stat", num);
	put_file(root, "proc_cgroup", "0::/a/b\n");
	snprintf(proc, sizeof(proc), "%s/proc_cgroup", root);
	setenv("KVSLAB_CGROUP_ROOT", root, 1);
	setenv("KVSLAB_CGROUP_PROC", proc, 1);
	d = kvs_drv_open("host", NULL);
	ck_assert_ptr_nonnull(d);
	errno = 0;
	ck_assert_int_eq(kvs_drv_chunk_create(d, 5 * g, &c), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_ptr_nonnull(strstr(kvs_drv_strerror(d), "cgroup"));
	assert_drv_empty(d);
	ck_assert_int_eq(kvs_drv_chunk_create(d, 4 * g, &c), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
	/* No limit anywhere ("max"): only the machine bounds it. */
	put_file(dir, "memory.max", "max\n");
	snprintf(dir, sizeof(dir), "%s/a", root);
	put_file(dir, "memory.max", "max\n");
	ck_assert_int_eq(kvs_drv_chunk_create(d, 6 * g, &c), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	/* v1, inside a namespace: /proc says /x/y, the mount's root is the
	 * process's own cgroup; limit 3g, 1g held. */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/a '%s'/cgroup.controllers", root, root);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(dir, sizeof(dir), "%s/memory", root);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(num, sizeof(num), "%zu\n", 3 * g);
	put_file(dir, "memory.limit_in_bytes", num);
	snprintf(num, sizeof(num), "%zu\n", g);
	put_file(dir, "memory.usage_in_bytes", num);
	put_file(root, "proc_cgroup", "5:memory:/x/y\n3:cpu,cpuacct:/x/y\n0::/\n");
	d = kvs_drv_open("host", NULL);
	ck_assert_ptr_nonnull(d);
	errno = 0;
	ck_assert_int_eq(kvs_drv_chunk_create(d, 3 * g, &c), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(kvs_drv_chunk_create(d, 2 * g, &c), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	unsetenv("KVSLAB_CGROUP_ROOT");
	unsetenv("KVSLAB_CGROUP_PROC");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	ck_assert_int_eq(system(cmd), 0);
	assert_nothing_left(0);
}
END_TEST

/*
 * Host only, the accounting mode of simulations: with KVS_DRV_F_LAZY a
 * host block four times the machine's memory is address space (before,
 * aligned_alloc() of it failed with ENOMEM under the kernel's overcommit
 * heuristic; with overcommit always allowed both pass); with
 * KVS_DRV_F_NO_COPY copies complete, are counted and move no byte.
 */
START_TEST(test_host_lazy_blocks_no_copy)
{
	long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
	unsigned char *big, src[4096], dst[4096];
	kvs_drv_attr_t attr;
	kvs_devptr_t base;
	kvs_event_t *ev;
	kvs_chunk_t *c;
	kvs_drv_t *d;
	size_t size, g;
	int nocopy;

	ck_assert_int_gt(pages, 0);
	/* valgrind's address space is smaller than four machines'. */
	size = (size_t)pages * (size_t)pg * (getenv("KVSLAB_UNDER_VALGRIND") ? 1 : 4) / 4 * 4;
	kvs_drv_attr_init(&attr);
	attr.flags = KVS_DRV_F_LAZY;
	d = kvs_drv_open("host", &attr);
	ck_assert_ptr_nonnull(d);
	ck_assert_int_eq(kvs_drv_host_alloc(d, size, (void **)&big), 0);
	ck_assert_uint_eq((uintptr_t)big % (uintptr_t)pg, 0);
	big[0] = 1;
	big[size - 1] = 2;
	ck_assert(big[0] == 1 && big[size - 1] == 2 && big[size / 2] == 0);
	ck_assert_int_eq(kvs_drv_host_free(d, big), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);

	for (nocopy = 0; nocopy < 2; nocopy++) {
		attr.flags = KVS_DRV_F_LAZY | (nocopy ? KVS_DRV_F_NO_COPY : 0);
		d = kvs_drv_open("host", &attr);
		ck_assert_ptr_nonnull(d);
		g = kvs_drv_granularity(d);
		ck_assert_int_eq(kvs_drv_reserve(d, g, &base), 0);
		ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
		ck_assert_int_eq(kvs_drv_map(d, base, c), 0);
		ck_assert_int_eq(kvs_drv_set_access(d, base, g, KVS_ACCESS_RW), 0);
		ck_assert_int_eq(kvs_event_create(d, &ev), 0);
		tu_fill(src, sizeof(src), 7);
		memset(dst, 0, sizeof(dst));
		ck_assert_int_eq(kvs_drv_copy_htod(d, base, src, sizeof(src), NULL), 0);
		ck_assert_int_eq(kvs_drv_copy_dtoh(d, dst, base, sizeof(dst), ev), 0);
		ck_assert_int_eq(kvs_event_wait(ev), 0);
		ck_assert_int_eq(kvs_event_query(ev), 1);
		ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_copy_calls), 2);
		ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_copied), 2 * sizeof(src));
		if (nocopy)
			ck_assert_int_eq(tu_check(dst, sizeof(dst), 7), 0);
		else
			ck_assert(tu_check(dst, sizeof(dst), 7));
		ck_assert_int_eq(kvs_event_destroy(ev), 0);
		ck_assert_int_eq(kvs_drv_unmap(d, base, g), 0);
		ck_assert_int_eq(kvs_drv_chunk_release(d, c), 0);
		ck_assert_int_eq(kvs_drv_unreserve(d, base), 0);
		ck_assert_int_eq(kvs_drv_close(d), 0);
	}
}
END_TEST

START_TEST(test_host_too_large)
{
	kvs_drv_t *d = kvs_drv_open("host", NULL);
	size_t g = kvs_drv_granularity(d), total;
	long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
	long rss0 = tu_rss_shmem();
	kvs_chunk_t *c;

	ck_assert_int_gt(pages, 0);
	total = ((size_t)pages * (size_t)pg + g) / g * g;
	errno = 0;
	ck_assert_int_eq(kvs_drv_chunk_create(d, total, &c), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_le(tu_rss_shmem() - rss0, 64 * 1024);
	ck_assert_int_eq(tu_host_chunk_bytes(), 0);
	assert_drv_empty(d);
	/* The driver's own total_mem bounds it too. */
	ck_assert_int_eq(kvs_drv_close(d), 0);
	{
		kvs_drv_attr_t attr;

		kvs_drv_attr_init(&attr);
		attr.total_mem = 4 * g;
		d = kvs_drv_open("host", &attr);
		ck_assert_ptr_nonnull(d);
		ck_assert_int_eq(kvs_drv_chunk_create(d, 4 * g, &c), 0);
		ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), -1);
		ck_assert_int_eq(errno, ENOMEM);
		ck_assert_int_eq(kvs_drv_close(d), 0);
	}
}
END_TEST

/* Host only: a released range goes back to its arena, and the next chunk
 * that gets it reads zeros, not its previous owner's bytes. */
START_TEST(test_host_range_reuse)
{
	kvs_drv_t *d = kvs_drv_open("host", NULL);
	size_t g = kvs_drv_granularity(d);
	kvs_devptr_t a;
	kvs_chunk_t *c0, *c1, *c2;
	unsigned char *p;
	long off;
	size_t i;

	ck_assert_int_eq(kvs_drv_reserve(d, g, &a), 0);
	p = (unsigned char *)(uintptr_t)a;
	/* c0 stays, and with it the arena. */
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c0), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c1), 0);
	map_rw(d, a, c1);
	off = tu_host_map_offset(a);
	ck_assert_int_ge(off, 0);
	memset(p, 0x5a, g);
	ck_assert_int_eq(kvs_drv_unmap(d, a, g), 0);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c1), 0);
	ck_assert_int_eq(tu_host_chunk_bytes(), (long)g);	/* c0's only */
	ck_assert_int_eq(tu_host_chunk_fds(), 1);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c2), 0);
	map_rw(d, a, c2);
	ck_assert_int_eq(tu_host_map_offset(a), off);
	for (i = 0; i < g; i++)
		if (p[i])
			break;
	ck_assert_uint_eq(i, g);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	ck_assert_int_eq(tu_host_chunk_fds(), 0);
	ck_assert_int_eq(tu_host_chunk_maps(), 0);
}
END_TEST

/* Host only: access is granted with populate, so pages are resident before
 * any touch, as device memory is. */
START_TEST(test_host_populate)
{
	kvs_drv_t *d = kvs_drv_open("host", NULL);
	size_t g = kvs_drv_granularity(d), sz = 8 * g;
	kvs_devptr_t a;
	kvs_chunk_t *c;
	long base;

	ck_assert_int_eq(kvs_drv_reserve(d, sz, &a), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, sz, &c), 0);
	base = tu_rss_shmem();
	map_rw(d, a, c);
	ck_assert_int_ge(tu_rss_shmem() - base, (long)sz * 9 / 10);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	ck_assert_int_eq(tu_host_chunk_maps(), 0);
}
END_TEST

static Suite *drv_suite(void)
{
	Suite *s = suite_create("drv");
	TCase *tc = tcase_create("backends");

	tcase_set_timeout(tc, 60);
	BACKEND_LOOP(tc, test_open_info);
	BACKEND_LOOP(tc, test_data_survives_remap);
	BACKEND_LOOP(tc, test_misaligned);
	BACKEND_LOOP(tc, test_map_over_mapped);
	BACKEND_LOOP(tc, test_limit);
	BACKEND_LOOP(tc, test_close_releases_everything);
	BACKEND_LOOP(tc, test_release_while_mapped);
	BACKEND_LOOP(tc, test_copy_needs_access);
	BACKEND_LOOP(tc, test_host_alloc);
	BACKEND_LOOP(tc, test_size_overflow);
	BACKEND_LOOP(tc, test_event_record_stream);
	BACKEND_LOOP(tc, test_copy_dtod_batch);
	BACKEND_LOOP(tc, test_stream_wait_calls);
	BACKEND_LOOP(tc, test_stats);
	suite_add_tcase(s, tc);

	tc = tcase_create("open");
	tcase_add_test(tc, test_open_errors);
	if (tu_nbackends() > 1)
		tcase_add_test(tc, test_cuda_nodev);
	suite_add_tcase(s, tc);

	if (tu_nbackends() > 1) {
		tc = tcase_create("cuda-double");
		tcase_set_timeout(tc, 60);
		tcase_add_test(tc, test_stream_wait_orders_backup);
		tcase_add_test(tc, test_engine_waits_for_copy);
		tcase_add_test(tc, test_bad_stream_aborts);
		tcase_add_test(tc, test_unmap_syncs_only_after_copies);
		tcase_add_test(tc, test_rdma_opt_in);
		tcase_add_test(tc, test_kernel_batches);
		tcase_add_test(tc, test_minimal_driver);
		suite_add_tcase(s, tc);
	}

	tc = tcase_create("host");
	/* 70,000 chunks in a child: seconds alone, more on a loaded machine. */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_host_rss);
	tcase_add_test(tc, test_host_populate);
	tcase_add_test(tc, test_host_rlimit_unchanged);
	tcase_add_test(tc, test_host_many_chunks_few_fds);
	tcase_add_test(tc, test_host_many_chunks_few_vmas);
	tcase_add_test(tc, test_host_too_large);
	tcase_add_test(tc, test_host_lazy_blocks_no_copy);
	tcase_add_test(tc, test_host_cgroup_limit);
	tcase_add_test(tc, test_host_range_reuse);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(drv_suite());
}
