/* SPDX-License-Identifier: MIT */
/*
 * tests/mem/test_pool.c - the KV pool and the planner, on every backend.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* The cuda driver's granularity (tu_granularity()), 64 KiB with the double. */
#define GRAN tu_granularity((64 * 1024))

static kvs_pool_t *mk(kvs_drv_t *d, const char *preset, uint32_t ps, uint64_t tokens)
{
	kvs_pool_attr_t a;
	kvs_pool_t *p;

	kvs_pool_attr_init(&a);
	ck_assert_int_eq(kvs_model_preset(preset, &a.model), 0);
	a.page_size = ps;
	a.max_tokens = tokens;
	a.magazine = 0;
	p = kvs_pool_create(d, &a);
	ck_assert_ptr_nonnull(p);
	return p;
}

START_TEST(test_cell_size)
{
	kvs_model_t m;

	/* Llama-3-8B: 8 KV heads x 128 x 32 layers x 2 (K, V) x 2 bytes. */
	ck_assert_int_eq(kvs_model_preset("llama-3-8b", &m), 0);
	ck_assert_uint_eq(kvs_model_cell_size(&m), 8 * 128 * 32 * 2 * 2);
	ck_assert_uint_eq(kvs_model_cell_size(&m), 131072);
	/* Llama-3-70B on 8 ranks: one head a rank. */
	ck_assert_int_eq(kvs_model_preset("llama-3-70b-tp8", &m), 0);
	ck_assert_uint_eq(kvs_model_kv_heads_per_rank(&m), 1);
	ck_assert_uint_eq(kvs_model_cell_size(&m), 1 * 128 * 80 * 2 * 2);
	/* More ranks than heads: heads are replicated, at least one a rank. */
	m.tp_size = 16;
	ck_assert_uint_eq(kvs_model_kv_heads_per_rank(&m), 1);
	/* MLA: (512 + 64) x 61 layers x 2 bytes, no K/V split. */
	ck_assert_int_eq(kvs_model_preset("deepseek-v3-tp8", &m), 0);
	ck_assert_uint_eq(kvs_model_cell_size(&m), (512 + 64) * 61 * 2);
	ck_assert_uint_eq(kvs_model_cell_size(&m), 70272);
	ck_assert_int_eq(kvs_model_preset("nonesuch", &m), -1);
	ck_assert_int_eq(errno, ENOENT);
	memset(&m, 0, sizeof(m));
	errno = 0;
	ck_assert_uint_eq(kvs_model_cell_size(&m), 0);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_str_eq(kvs_model_preset_name(0), "llama-3-8b");
	ck_assert_ptr_null(kvs_model_preset_name(1000));
}
END_TEST

START_TEST(test_planner)
{
	kvs_plan_attr_t a;
	kvs_plan_t p;

	/* An 80 GiB GPU with 64 GiB free after the weights, fraction 0.88:
	 * rest = 64 GiB - 80 GiB * 0.12 = 54.4 GiB; / 128 KiB a token =
	 * 445644 tokens (floor of 445644.8); page 16 -> 445632;
	 * requests: 445632 / 8192 * 512 = 54 * 512 = 27648 -> capped at 4096. */
	kvs_plan_attr_init(&a);
	kvs_model_preset("llama-3-8b", &a.model);
	a.page_size = 16;
	a.total_bytes = 80ull << 30;
	a.free_bytes = 64ull << 30;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), 0);
	ck_assert_uint_eq(p.cell_size, 131072);
	ck_assert_uint_eq(p.max_total_tokens, 445632);
	ck_assert_uint_eq(p.max_requests, 4096);
	ck_assert_uint_eq(p.req_rows, 4097);
	ck_assert_uint_eq(p.req_cols, 8196);
	ck_assert_uint_eq(p.kv_bytes, 445632ull * 131072);

	/* Caps: max_total_tokens wins when smaller, then page alignment; the
	 * request count comes from the profiled tokens, before the cap. */
	a.max_total_tokens = 10007;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), 0);
	ck_assert_uint_eq(p.max_total_tokens, 10000);
	ck_assert_uint_eq(p.max_requests, 4096);
	/* Few tokens give the floor of 2048 requests: 24 GiB card, 12 GiB
	 * free: rest = 12 - 24 * 0.12 = 9.12 GiB -> 74711 tokens;
	 * 74711 / 8192 * 512 = 4669.4 -> 4096; at 5 GiB free: 2.12 GiB ->
	 * 17367 tokens -> 1085.4 -> 2048. */
	a.max_total_tokens = 0;
	a.total_bytes = 24ull << 30;
	a.free_bytes = 5ull << 30;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), 0);
	ck_assert_uint_eq(p.max_total_tokens, 17360);
	ck_assert_uint_eq(p.max_requests, 2048);
	a.total_bytes = 80ull << 30;
	a.free_bytes = 64ull << 30;
	a.max_running_requests = 37;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), 0);
	ck_assert_uint_eq(p.max_requests, 37);

	/* Nothing left once the non-static share is set aside. */
	a.free_bytes = 8ull << 30;
	errno = 0;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), -1);
	ck_assert_int_eq(errno, ENOMEM);
	a.mem_fraction_static = 1.5;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), -1);
	ck_assert_int_eq(errno, EINVAL);
	a.mem_fraction_static = 0.88;
	a.free_bytes = 0;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), -1); /* no driver to ask */
	ck_assert_int_eq(errno, EINVAL);
}
END_TEST

START_TEST(test_planner_from_driver)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 1ull << 30, 0);
	kvs_plan_attr_t a;
	kvs_plan_t p;

	kvs_plan_attr_init(&a);
	kvs_model_preset("llama-3-8b", &a.model);
	a.mem_fraction_static = 0.5;
	/* 1 GiB limit: total 1 GiB, free 1 GiB -> rest 0.5 GiB -> 4096 tokens. */
	ck_assert_int_eq(kvs_plan(d, &a, &p), 0);
	ck_assert_uint_eq(p.max_total_tokens, 4096);
	kvs_drv_close(d);
}
END_TEST

START_TEST(test_alloc_free_pages)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	/* tiny: 1 byte a token in each of K and V: GRAN tokens a slab. */
	kvs_pool_t *p = mk(d, "tiny", 16, 2 * GRAN);
	int32_t locs[64], one[16];
	int k;

	ck_assert_uint_eq(kvs_pool_capacity(p), 2 * GRAN);
	ck_assert_uint_eq(kvs_pool_available(p), 2 * GRAN);
	errno = 0;
	ck_assert_int_eq(kvs_pool_alloc(p, 10, locs), -1); /* not a page multiple */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_pool_alloc(p, 64, locs), 0);
	for (k = 0; k < 64; k++) {
		ck_assert_int_ge(locs[k], 0);
		if (k % 16)
			ck_assert_int_eq(locs[k], locs[k - 1] + 1); /* within a page */
		else
			ck_assert_int_eq(locs[k] % 16, 0);
	}
	ck_assert_uint_eq(kvs_pool_available(p), 2 * GRAN - 64);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(p), KVS_SLAB_STAT_objects), 4);
	/* Share the second page, then free the whole list: it survives. */
	ck_assert_int_eq(kvs_pool_ref(p, 16, locs + 16), 0);
	ck_assert_int_eq(kvs_pool_free(p, 64, locs), 0);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(p), KVS_SLAB_STAT_objects), 1);
	errno = 0;
	ck_assert_int_eq(kvs_pool_free(p, 16, locs), -1); /* already free */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_pool_free(p, 16, locs + 16), 0);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(p), KVS_SLAB_STAT_objects), 0);
	/* A single page goes through the fast path. */
	ck_assert_int_eq(kvs_pool_alloc(p, 16, one), 0);
	ck_assert_int_eq(one[15], one[0] + 15);
	ck_assert_int_eq(kvs_pool_free(p, 16, one), 0);
	one[0] = -5;
	ck_assert_int_eq(kvs_pool_free(p, 1, one), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_slab_validate(kvs_pool_slab(p)), 0);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* The refcount of each page of @p against @want, and validation. */
static void pool_counts(kvs_pool_t *p, const uint16_t *want, uint32_t npages)
{
	kvs_slab_t *s = kvs_pool_slab(p);
	uint64_t held = 0;
	uint32_t pg;

	for (pg = 0; pg < npages; pg++) {
		ck_assert_msg(kvs_slab_refcount(s, pg) == want[pg], "page %u: count %d, want %u", pg,
			      kvs_slab_refcount(s, pg), want[pg]);
		held += want[pg] != 0;
	}
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), held);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
}

/*
 * kvs_pool_free() over runs of pages at page size @ps: whole allocations
 * (runs of consecutive pages, each page's tokens in order), some tokens of
 * a page (counted once while adjacent), a page's tokens listed apart
 * (counted twice), and a bad location after a long run (nothing dropped).
 */
static void pool_free_runs(int i, uint32_t ps)
{
	enum { NP = 1000 };
	kvs_drv_t *d = tu_open_gran(i, GRAN, 0, 0);
	kvs_pool_t *p = mk(d, "tiny", ps, 4096 * (uint64_t)ps);
	uint32_t npages = (uint32_t)(kvs_pool_capacity(p) / ps), k, j;
	int32_t *locs = malloc(sizeof(int32_t) * NP * ps);
	int32_t *list = malloc(sizeof(int32_t) * 3 * NP * ps);
	uint16_t *want = calloc(npages, sizeof(uint16_t));
	size_t n;

	ck_assert_ptr_nonnull(locs);
	ck_assert_ptr_nonnull(list);
	ck_assert_ptr_nonnull(want);
	/* Three allocations: one page, a few, the rest. */
	ck_assert_int_eq(kvs_pool_alloc(p, ps, locs), 0);
	ck_assert_int_eq(kvs_pool_alloc(p, 7 * (size_t)ps, locs + ps), 0);
	ck_assert_int_eq(kvs_pool_alloc(p, (NP - 8) * (size_t)ps, locs + 8 * ps), 0);
	for (k = 0; k < NP; k++) {
		int32_t base = locs[k * ps];

		ck_assert_int_ge(base, 0);
		ck_assert_int_eq(base % (int32_t)ps, 0);
		for (j = 0; j < ps; j++)
			ck_assert_int_eq(locs[k * ps + j], base + (int32_t)j);
		ck_assert_uint_lt((uint32_t)base / ps, npages);
		ck_assert_uint_eq(want[base / ps], 0);	/* distinct pages */
		want[base / ps] = 1;
	}
	pool_counts(p, want, npages);

	/* A bad location after a long run: negative, past the capacity. */
	memcpy(list, locs, sizeof(int32_t) * 900 * ps);
	n = 900 * (size_t)ps;
	list[n++] = -1;
	errno = 0;
	ck_assert_int_eq(kvs_pool_free(p, n, list), -1);
	ck_assert_int_eq(errno, EINVAL);
	list[n - 1] = INT32_MIN;
	ck_assert_int_eq(kvs_pool_free(p, n, list), -1);
	list[n - 1] = (int32_t)kvs_pool_capacity(p);
	ck_assert_int_eq(kvs_pool_free(p, n, list), -1);
	list[n - 1] = locs[0];	/* page 0 twice, held once */
	ck_assert_int_eq(kvs_pool_free(p, n, list), -1);
	pool_counts(p, want, npages);

	/* Pages 0..99: all tokens but the first (or the page, at ps 1);
	 * pages 100..199: their tokens backwards.  Each page once. */
	n = 0;
	for (k = 0; k < 100; k++)
		for (j = ps > 1 ? 1 : 0; j < ps; j++)
			list[n++] = locs[k * ps + j];
	for (k = 100; k < 200; k++)
		for (j = ps; j-- > 0;)
			list[n++] = locs[k * ps + j];
	ck_assert_int_eq(kvs_pool_free(p, n, list), 0);
	for (k = 0; k < 200; k++)
		want[locs[k * ps] / ps] = 0;
	pool_counts(p, want, npages);

	/* Pages 200..299 shared, then freed by a list naming each twice:
	 * the run, then the run again. */
	ck_assert_int_eq(kvs_pool_ref(p, 100 * (size_t)ps, locs + 200 * ps), 0);
	for (k = 200; k < 300; k++)
		want[locs[k * ps] / ps] = 2;
	pool_counts(p, want, npages);
	memcpy(list, locs + 200 * ps, sizeof(int32_t) * 100 * ps);
	memcpy(list + 100 * ps, locs + 200 * ps, sizeof(int32_t) * 100 * ps);
	ck_assert_int_eq(kvs_pool_free(p, 200 * (size_t)ps, list), 0);
	for (k = 200; k < 300; k++)
		want[locs[k * ps] / ps] = 0;
	pool_counts(p, want, npages);

	/* Pages 300..399: one token from the middle of each, separated by
	 * a page's other tokens when shared: a page listed apart counts twice. */
	if (ps > 2) {
		ck_assert_int_eq(kvs_pool_ref(p, ps, locs + 300 * ps), 0);
		n = 0;
		list[n++] = locs[300 * ps];	/* page 300's first token */
		list[n++] = locs[301 * ps];	/* page 301 */
		list[n++] = locs[300 * ps + 2];	/* page 300 again: apart, twice */
		ck_assert_int_eq(kvs_pool_free(p, n, list), 0);
		want[locs[300 * ps] / ps] = 0;
		want[locs[301 * ps] / ps] = 0;
		pool_counts(p, want, npages);
		ck_assert_int_eq(kvs_pool_free(p, n, list), -1);	/* all free now */
		pool_counts(p, want, npages);
	}

	/* The rest in one call, in reverse page order (runs of one page). */
	n = 0;
	for (k = NP; k-- > (ps > 2 ? 302u : 300u);)
		for (j = 0; j < ps; j++)
			list[n++] = locs[k * ps + j];
	ck_assert_int_eq(kvs_pool_free(p, n, list), 0);
	memset(want, 0, npages * sizeof(uint16_t));
	pool_counts(p, want, npages);
	ck_assert_uint_eq(kvs_pool_available(p), kvs_pool_capacity(p));
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	free(locs);
	free(list);
	free(want);
}

START_TEST(test_free_runs_ps1)
{
	pool_free_runs(_i, 1);
}
END_TEST

START_TEST(test_free_runs_ps16)
{
	pool_free_runs(_i, 16);
}
END_TEST

START_TEST(test_free_runs_ps3)
{
	pool_free_runs(_i, 3);
}
END_TEST

START_TEST(test_free_runs_ps12)
{
	pool_free_runs(_i, 12);
}
END_TEST


START_TEST(test_token_slots)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_pool_t *p = mk(d, "tiny", 1, 1000);
	int32_t *locs = malloc(sizeof(int32_t) * (GRAN + 1));

	/* Capacity rounds up to a whole slab (GRAN tokens of 1 byte). */
	ck_assert_uint_eq(kvs_pool_capacity(p), GRAN);
	ck_assert_int_eq(kvs_pool_alloc(p, GRAN, locs), 0);
	ck_assert_int_eq(kvs_pool_alloc(p, 1, locs + GRAN), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(kvs_pool_free(p, GRAN, locs), 0);
	ck_assert_uint_eq(kvs_pool_available(p), GRAN);
	kvs_pool_destroy(p);
	kvs_drv_close(d);
	free(locs);
}
END_TEST

/* KV bytes of each layer's K and V land in that layer's buffer, survive
 * churn, and device pointers and strides describe where they are. */
START_TEST(test_set_get_kv)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_pool_attr_t a;
	kvs_pool_t *p;
	int32_t locs[32], churn[512];
	size_t stride, n = 32;
	kvs_devptr_t kb, vb, k1;
	/* 256 tokens a slab at any granularity (256 bytes a token at 64 KiB). */
	uint32_t hd = (uint32_t)(64 * (GRAN / (64 * 1024)));
	unsigned char *in = malloc(32 * 4 * (size_t)hd), *out = malloc(32 * 4 * (size_t)hd);
	uint32_t l;

	kvs_pool_attr_init(&a);
	a.model.layers = 3;
	a.model.kv_heads = 2;
	a.model.head_dim = hd;
	a.model.dtype_size = 2;
	a.model.tp_size = 1;
	a.model.context_len = 4096;
	a.page_size = 16;
	a.max_tokens = 4096;
	p = kvs_pool_create(d, &a);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(kvs_pool_buffer(p, 0, KVS_KV_K, &kb, &stride), 0);
	ck_assert_uint_eq(stride, 2 * hd * 2);
	ck_assert_int_eq(kvs_pool_buffer(p, 0, KVS_KV_V, &vb, NULL), 0);
	ck_assert_int_eq(kvs_pool_buffer(p, 1, KVS_KV_K, &k1, NULL), 0);
	ck_assert(kb != vb && kb != k1 && vb != k1);
	ck_assert_int_eq(kvs_pool_buffer(p, 3, KVS_KV_K, &kb, NULL), -1);
	ck_assert_int_eq(kvs_pool_buffer(p, 0, KVS_KV_LATENT, &kb, NULL), -1);

	ck_assert_int_eq(kvs_pool_alloc(p, n, locs), 0);
	for (l = 0; l < 3; l++) {
		tu_fill(in, 16 * stride, 10 * l + 1);
		tu_fill(in + 16 * stride, 16 * stride, 10 * l + 2);
		ck_assert_int_eq(kvs_pool_set_kv(p, l, locs[0], 16, in, in + 16 * stride), 0);
	}
	/* Churn: many pages in and out, with shrinking. */
	ck_assert_int_eq(kvs_pool_alloc(p, 512, churn), 0);
	ck_assert_int_eq(kvs_pool_free(p, 512, churn), 0);
	kvs_slab_shrink(kvs_pool_slab(p));
	for (l = 0; l < 3; l++) {
		ck_assert_int_eq(kvs_pool_get_kv(p, l, locs[0], 16, out, out + 16 * stride), 0);
		ck_assert(tu_check(out, 16 * stride, 10 * l + 1));
		ck_assert(tu_check(out + 16 * stride, 16 * stride, 10 * l + 2));
	}
	/* The bytes are where the pointer and stride say (host: readable). */
	if (strcmp(tu_backends[_i], "host") == 0) {
		ck_assert_int_eq(kvs_pool_buffer(p, 2, KVS_KV_V, &vb, &stride), 0);
		ck_assert(tu_check((void *)(uintptr_t)(vb + (uint64_t)locs[0] * stride),
				   16 * stride, 22));
	}
	ck_assert_int_eq(kvs_pool_get_kv(p, 0, 4000, 16, out, out), -1); /* unmapped */
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(kvs_pool_get_kv(p, 0, 4090, 16, out, out), -1); /* past capacity */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_pool_free(p, n, locs), 0);
	kvs_pool_destroy(p);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	free(in);
	free(out);
}
END_TEST

START_TEST(test_mla_pool)
{
	kvs_drv_t *d = tu_open_gran(_i, GRAN, 0, 0);
	kvs_pool_attr_t a;
	kvs_pool_t *p;
	kvs_devptr_t b0, b1;
	size_t stride;
	int32_t locs[1];
	unsigned char in[1152], out[1152];

	kvs_pool_attr_init(&a);
	kvs_model_preset("deepseek-v3-tp8", &a.model);
	a.model.layers = 2;
	a.max_tokens = 1024;
	p = kvs_pool_create(d, &a);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(kvs_pool_buffer(p, 0, KVS_KV_LATENT, &b0, &stride), 0);
	ck_assert_uint_eq(stride, (512 + 64) * 2);
	ck_assert_int_eq(kvs_pool_buffer(p, 1, KVS_KV_LATENT, &b1, NULL), 0);
	ck_assert(b0 != b1);
	ck_assert_int_eq(kvs_pool_buffer(p, 0, KVS_KV_V, &b0, NULL), -1);
	ck_assert_int_eq(kvs_pool_alloc(p, 1, locs), 0);
	tu_fill(in, sizeof(in), 5);
	ck_assert_int_eq(kvs_pool_set_kv(p, 1, locs[0], 1, in, NULL), 0);
	ck_assert_int_eq(kvs_pool_get_kv(p, 1, locs[0], 1, out, NULL), 0);
	ck_assert(tu_check(out, sizeof(out), 5));
	kvs_pool_destroy(p);
	kvs_drv_close(d);
}
END_TEST

/* Every product of the caller's numbers in a cell size is checked. */
START_TEST(test_cell_size_overflow)
{
	kvs_model_t m;

	memset(&m, 0, sizeof(m));
	m.layers = 1;
	m.tp_size = 1;
	m.kv_heads = UINT32_MAX;
	m.head_dim = UINT32_MAX;
	m.dtype_size = UINT32_MAX; /* heads * head_dim * dtype: about 2^96 */
	errno = 0;
	ck_assert_uint_eq(kvs_model_cell_size(&m), 0);
	ck_assert_int_eq(errno, EOVERFLOW);
	/* A token fits (2^63 bytes a buffer) but K and V together do not. */
	m.kv_heads = 1u << 31;
	m.head_dim = 1u << 31;
	m.dtype_size = 2;
	errno = 0;
	ck_assert_uint_eq(kvs_model_cell_size(&m), 0);
	ck_assert_int_eq(errno, EOVERFLOW);
	m.kv_heads = 1;
	m.head_dim = 1;
	m.dtype_size = 1;
	m.layers = UINT32_MAX; /* 2 * layers passes 2^32 in size_t, no wrap */
	ck_assert_uint_eq(kvs_model_cell_size(&m), 2 * (size_t)UINT32_MAX);
	/* MLA: the latent width is added in 64 bits, not wrapped to 0. */
	memset(&m, 0, sizeof(m));
	m.attn = KVS_ATTN_MLA;
	m.layers = 1;
	m.tp_size = 1;
	m.dtype_size = 1;
	m.kv_lora_rank = UINT32_MAX;
	m.qk_rope_head_dim = 1;
	ck_assert_uint_eq(kvs_model_cell_size(&m), 1ull << 32);
	ck_assert_uint_eq(kvs_model_kv_heads_per_rank(&m), 1);
	m.dtype_size = UINT32_MAX;
	m.layers = UINT32_MAX;
	errno = 0;
	ck_assert_uint_eq(kvs_model_cell_size(&m), 0);
	ck_assert_int_eq(errno, EOVERFLOW);
}
END_TEST

/* Overflowing plans fail with EOVERFLOW, impossible ones with EINVAL or
 * ENOMEM, and none of them writes to the caller's plan. */
START_TEST(test_planner_overflow)
{
	kvs_plan_attr_t a;
	kvs_plan_t p, before;

	memset(&p, 0x5a, sizeof(p));
	before = p;
	kvs_plan_attr_init(&a);
	kvs_model_preset("llama-3-8b", &a.model);
	a.page_size = 16;
	a.total_bytes = 80ull << 30;
	a.free_bytes = 64ull << 30;

	a.model.kv_heads = UINT32_MAX;
	a.model.head_dim = UINT32_MAX;
	errno = 0;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), -1);
	ck_assert_int_eq(errno, EOVERFLOW);
	ck_assert_mem_eq(&p, &before, sizeof(p));
	kvs_model_preset("llama-3-8b", &a.model);

	/* Request table: rows = requests + 1, cols = context + 4, and the
	 * table's bytes, rows * cols * 4. */
	a.max_running_requests = UINT32_MAX;
	errno = 0;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), -1);
	ck_assert_int_eq(errno, EOVERFLOW);
	a.max_running_requests = 0;
	a.context_len = UINT32_MAX - 3;
	errno = 0;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), -1);
	ck_assert_int_eq(errno, EOVERFLOW);
	a.max_running_requests = UINT32_MAX - 1;
	a.context_len = UINT32_MAX - 4; /* rows, cols fit; about 2^66 bytes do not */
	errno = 0;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), -1);
	ck_assert_int_eq(errno, EOVERFLOW);
	ck_assert_mem_eq(&p, &before, sizeof(p));
	a.max_running_requests = 0;
	a.context_len = 0;

	/* Nonsense, and a cap that leaves no whole page. */
	a.mem_fraction_static = 0.0 / 0.0;
	errno = 0;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), -1);
	ck_assert_int_eq(errno, EINVAL);
	a.mem_fraction_static = 0.88;
	a.max_total_tokens = 15;
	errno = 0;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_mem_eq(&p, &before, sizeof(p));
	a.max_total_tokens = 0;

	/* All of a size_t's memory: rest is 2^64 as a double and must not be
	 * converted back as such; 2 bytes a token. */
	kvs_model_preset("tiny", &a.model);
	a.page_size = 1;
	a.mem_fraction_static = 1.0;
	a.total_bytes = SIZE_MAX;
	a.free_bytes = SIZE_MAX;
	ck_assert_int_eq(kvs_plan(NULL, &a, &p), 0);
	ck_assert_uint_eq(p.rest_bytes, SIZE_MAX);
	ck_assert_uint_eq(p.max_total_tokens, SIZE_MAX / 2);
	ck_assert_uint_eq(p.kv_bytes, SIZE_MAX - 1);
	ck_assert_uint_eq(p.max_requests, 4096);
}
END_TEST

/* The pool's own sizes: buffers, pages, locations, page lists. */
START_TEST(test_pool_overflow)
{
	kvs_drv_t *d = tu_open_gran(0, GRAN, 0, 0);
	kvs_pool_attr_t a;
	kvs_pool_t *p;
	int32_t locs[16];
	unsigned char buf[64];

	kvs_pool_attr_init(&a);
	a.model.layers = 1;
	a.model.tp_size = 1;
	a.model.kv_heads = UINT32_MAX;
	a.model.head_dim = UINT32_MAX;
	a.model.dtype_size = UINT32_MAX;
	a.max_tokens = 1024;
	errno = 0;
	ck_assert_ptr_null(kvs_pool_create(d, &a));
	ck_assert_int_eq(errno, EOVERFLOW);
	/* 2^32 buffers: the cell fits, the buffer count does not. */
	a.model.kv_heads = a.model.head_dim = a.model.dtype_size = 1;
	a.model.layers = 1u << 31;
	errno = 0;
	ck_assert_ptr_null(kvs_pool_create(d, &a));
	ck_assert_int_eq(errno, EOVERFLOW);
	/* A buffer of 2^24 tokens of 2^40 bytes is 2^64 bytes. */
	a.model.layers = 1;
	a.model.head_dim = 1u << 20;
	a.model.dtype_size = 1u << 20;
	a.max_tokens = 1u << 24;
	errno = 0;
	ck_assert_ptr_null(kvs_pool_create(d, &a));
	ck_assert_int_eq(errno, EOVERFLOW);
	/* Locations are int32_t; max_tokens near 2^64 must not wrap when
	 * rounded up to pages. */
	kvs_model_preset("tiny", &a.model);
	a.page_size = 16;
	a.max_tokens = UINT64_MAX;
	errno = 0;
	ck_assert_ptr_null(kvs_pool_create(d, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.page_size = 1;
	a.max_tokens = 1ull << 31;
	errno = 0;
	ck_assert_ptr_null(kvs_pool_create(d, &a));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_reserved), 0);

	p = mk(d, "tiny", 16, GRAN);	/* one slab */
	ck_assert_int_eq(kvs_pool_alloc(p, 16, locs), 0);
	/* loc + n would wrap past 2^64 to a small number. */
	errno = 0;
	ck_assert_int_eq(kvs_pool_get_kv(p, 0, locs[0], SIZE_MAX - 10, buf, buf), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_pool_set_kv(p, 0, locs[0], SIZE_MAX - 10, buf, buf), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* n * 4 bytes of page numbers would wrap: refused before a read. */
	errno = 0;
	ck_assert_int_eq(kvs_pool_free(p, SIZE_MAX / 4 + 1, locs), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_pool_ref(p, SIZE_MAX / 4 + 1, locs), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_slab_refcount(kvs_pool_slab(p), (uint32_t)locs[0] / 16), 1);
	ck_assert_uint_eq(kvs_pool_available(p), GRAN - 16);
	ck_assert_int_eq(kvs_pool_free(p, 16, locs), 0);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/*
 * Budgets.  A pool is filled until ENOMEM, in bulk and then page by page:
 * the driver never maps more than the budget, and the tokens it gave out
 * are exactly what kvs_pool_available() promised at the start and what
 * kvs_pool_capacity() says.  Host driver, lazy: nothing is committed, so
 * a plan of 80 GiB costs address space only.
 */
#define MIB (1ull << 20)

static void fill_to_budget(kvs_drv_t *d, kvs_pool_t *p, size_t budget, size_t bulk)
{
	uint32_t ps = kvs_pool_page_size(p);
	uint64_t cap = kvs_pool_capacity(p), avail = kvs_pool_available(p), got = 0;
	int32_t *locs = malloc(bulk * sizeof(*locs));
	size_t n = bulk;

	ck_assert_ptr_nonnull(locs);
	ck_assert_uint_eq(avail, cap);
	ck_assert_uint_gt(cap, 0);
	for (;;) {
		if (kvs_pool_alloc(p, n, locs) == 0) {
			got += n;
			ck_assert_uint_le(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), budget);
			continue;
		}
		ck_assert_int_eq(errno, ENOMEM);
		if (n == ps)
			break;
		n = ps; /* the rest page by page */
	}
	ck_assert_uint_eq(got, avail);
	ck_assert_uint_eq(got, cap);
	ck_assert_uint_eq(kvs_pool_available(p), 0);
	ck_assert_uint_le(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped_peak), budget);
	ck_assert_int_eq(kvs_slab_validate(kvs_pool_slab(p)), 0);
	free(locs);
}

/* A plan of @kv bytes exactly (fraction 1, all memory free). */
static void plan_of(const kvs_model_t *m, uint32_t ps, size_t kv, kvs_plan_t *plan)
{
	kvs_plan_attr_t a;

	kvs_plan_attr_init(&a);
	a.model = *m;
	a.page_size = ps;
	a.mem_fraction_static = 1.0;
	a.total_bytes = kv;
	a.free_bytes = kv;
	ck_assert_int_eq(kvs_plan(NULL, &a, plan), 0);
	ck_assert_uint_eq(plan->kv_bytes, kv);
}

static kvs_pool_t *mk_budget(kvs_drv_t *d, const kvs_model_t *m, uint32_t ps,
			     const kvs_plan_t *plan, uint64_t max_tokens, size_t max_mapped,
			     uint32_t granules)
{
	kvs_pool_attr_t a;

	kvs_pool_attr_init(&a);
	a.model = *m;
	a.page_size = ps;
	a.plan = plan;
	a.max_tokens = max_tokens;
	a.max_mapped = max_mapped;
	a.slab_granules = granules;
	return kvs_pool_create(d, &a);
}

/* 4 buffers (2 layers, K and V) of 1 KiB a token: 2 MiB slabs hold 2048
 * tokens, 8 pages of 256, 8 MiB in all. */
static void small_model(kvs_model_t *m)
{
	memset(m, 0, sizeof(*m));
	m->layers = 2;
	m->kv_heads = 1;
	m->head_dim = 512;
	m->dtype_size = 2;
	m->tp_size = 1;
	m->context_len = 4096;
}

START_TEST(test_budget_plan_80g)
{
	kvs_drv_t *d = tu_open_gran(0, 2 * MIB, 0, KVS_DRV_F_LAZY);
	/* 80 GiB; valgrind's address space holds less (the scale is 1/4). */
	uint64_t gib = (uint64_t)tu_scaled(80, 1);
	size_t kv = (gib << 30) + 40 * MIB;
	kvs_model_t m;
	kvs_plan_t plan;
	kvs_pool_t *p;

	/* One latent buffer of 2 KiB a token; pages of 1024 tokens are 2 MiB,
	 * slabs of 32 granules 64 MiB.  80 GiB + 40 MiB is 1280 slabs and 20
	 * pages: rounded up, the pool would map 80 GiB + 64 MiB. */
	memset(&m, 0, sizeof(m));
	m.attn = KVS_ATTN_MLA;
	m.layers = 1;
	m.kv_lora_rank = 1024;
	m.dtype_size = 2;
	m.tp_size = 1;
	m.context_len = 1 << 20;
	plan_of(&m, 1024, kv, &plan);
	ck_assert_uint_eq(plan.max_total_tokens, (gib * 512 + 20) * 1024);
	/* max_tokens as callers set it from a plan; the plan is the budget. */
	p = mk_budget(d, &m, 1024, &plan, plan.max_total_tokens, 0, 32);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(kvs_pool_capacity(p), gib * 16 * 32 * 1024);
	fill_to_budget(d, p, plan.kv_bytes, 32 * 1024);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), gib << 30);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_budget_plan_small)
{
	kvs_drv_t *d = tu_open_gran(0, 2 * MIB, 0, KVS_DRV_F_LAZY);
	kvs_model_t m;
	kvs_plan_t plan, bad;
	kvs_pool_t *p;

	small_model(&m);
	/* 101 MiB: 101 pages, 12 slabs and 5 pages. */
	plan_of(&m, 256, 101 * MIB, &plan);
	ck_assert_uint_eq(plan.max_total_tokens, 101 * 256);
	p = mk_budget(d, &m, 256, &plan, plan.max_total_tokens, 0, 1);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(kvs_pool_capacity(p), 12 * 8 * 256);
	fill_to_budget(d, p, plan.kv_bytes, 8 * 256);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 96 * MIB);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);

	/* The caller's smaller max_mapped wins (a new driver: a new peak); a
	 * larger one does not. */
	d = tu_open_gran(0, 2 * MIB, 0, KVS_DRV_F_LAZY);
	p = mk_budget(d, &m, 256, &plan, 0, 50 * MIB + 1, 1);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(kvs_pool_capacity(p), 6 * 8 * 256);
	fill_to_budget(d, p, 50 * MIB + 1, 8 * 256);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	p = mk_budget(d, &m, 256, &plan, 0, 1ull << 40, 1); /* max_tokens: the plan's */
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(kvs_pool_capacity(p), 12 * 8 * 256);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	/* max_tokens below the plan's caps the capacity (address space). */
	p = mk_budget(d, &m, 256, &plan, 3000, 0, 1);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(kvs_pool_capacity(p), 2048 * 2);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);

	/* Refused, nothing reserved: a plan of another shape, a plan that
	 * disagrees with itself, a budget of less than a slab. */
	bad = plan;
	bad.cell_size *= 2;
	errno = 0;
	ck_assert_ptr_null(mk_budget(d, &m, 256, &bad, 0, 0, 1));
	ck_assert_int_eq(errno, EINVAL);
	bad = plan;
	bad.kv_bytes += 1;
	errno = 0;
	ck_assert_ptr_null(mk_budget(d, &m, 256, &bad, 0, 0, 1));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(mk_budget(d, &m, 256, &plan, 0, 8 * MIB - 1, 1));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(mk_budget(d, &m, 256, NULL, 0, 0, 1)); /* no tokens, no plan */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_reserved), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* No plan, an odd max_mapped: 5 slabs and 12345 bytes. */
START_TEST(test_budget_odd_max_mapped)
{
	kvs_drv_t *d = tu_open_gran(0, 2 * MIB, 0, KVS_DRV_F_LAZY);
	size_t budget = 5 * 8 * MIB + 12345;
	kvs_model_t m;
	kvs_pool_t *p;

	small_model(&m);
	p = mk_budget(d, &m, 256, NULL, 1 << 16, budget, 1);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(kvs_pool_capacity(p), 5 * 2048);
	fill_to_budget(d, p, budget, 8 * 256);
	ck_assert_uint_eq(kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped), 40 * MIB);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* A pool whose creation fails (its second buffer's reservation) and whose
 * undo fails too (the first buffer's unreserve): the reservation the driver
 * refused is parked with it and given back at its next allocation, not
 * left without a handle until its close. */
START_TEST(test_failed_undo_parked)
{
	kvs_drv_t *inner = tu_open_gran(_i, GRAN, 0, 0), *f;
	kvs_pool_attr_t a;
	kvs_pool_t *p;
	kvs_devptr_t base;

	ck_assert_ptr_nonnull(inner);
	f = kvs_fault_open(inner);
	ck_assert_ptr_nonnull(f);
	kvs_pool_attr_init(&a);
	ck_assert_int_eq(kvs_model_preset("tiny", &a.model), 0);
	a.page_size = 16;
	a.max_tokens = 4096;
	ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_RESERVE, 2, EIO), 0);
	ck_assert_int_eq(kvs_fault_fail_random(f, KVS_OP_UNRESERVE, 1.0, 1, EIO), 0);
	errno = 0;
	ck_assert_ptr_null(kvs_pool_create(f, &a));
	ck_assert_int_eq(errno, EIO);
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	ck_assert_uint_gt(kvs_drv_stat(f, KVS_DRV_STAT_bytes_reserved), 0); /* parked */
	ck_assert_int_eq(kvs_drv_reserve(f, GRAN, &base), 0);
	ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_bytes_reserved), GRAN);
	ck_assert_int_eq(kvs_drv_unreserve(f, base), 0);
	p = kvs_pool_create(f, &a);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_bytes_reserved), 0);
	ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_bytes_created), 0);
	ck_assert_int_eq(kvs_drv_close(f), 0);
}
END_TEST

static Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("model");
	int nb = tu_nbackends();

	tcase_add_test(tc, test_cell_size);
	tcase_add_test(tc, test_planner);
	tcase_add_test(tc, test_cell_size_overflow);
	tcase_add_test(tc, test_planner_overflow);
	suite_add_tcase(s, tc);
	tc = tcase_create("pool");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_planner_from_driver, 0, nb);
	tcase_add_loop_test(tc, test_alloc_free_pages, 0, nb);
	tcase_add_loop_test(tc, test_token_slots, 0, nb);
	tcase_add_loop_test(tc, test_free_runs_ps1, 0, nb);
	tcase_add_loop_test(tc, test_free_runs_ps16, 0, nb);
	tcase_add_loop_test(tc, test_free_runs_ps3, 0, nb);
	tcase_add_loop_test(tc, test_free_runs_ps12, 0, nb);
	tcase_add_loop_test(tc, test_set_get_kv, 0, nb);
	tcase_add_loop_test(tc, test_mla_pool, 0, nb);
	tcase_add_loop_test(tc, test_failed_undo_parked, 0, nb);
	tcase_add_test(tc, test_pool_overflow);
	tcase_add_test(tc, test_budget_plan_80g);
	tcase_add_test(tc, test_budget_plan_small);
	tcase_add_test(tc, test_budget_odd_max_mapped);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* Unless the caller chose one (make check-gpu's plumbing check). */
	setenv("KVSLAB_DOUBLE_GRANULARITY", "65536", 0);
	(void)GRAN;
	return tu_run(pool_suite());
}
