/* SPDX-License-Identifier: MIT */
/*
 * tests/flow/test_flow.c - request flows: extend, decode, chunked prefill,
 * finished and released requests, eviction on shortfall, all-or-nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_reqtab_t *tab;
	kvs_radix_t *r;
	kvs_flow_t *f;
};

/* 4 KiB granules: with the tiny model a slab is 4096 tokens. */
static kvs_drv_t *small_drv(void)
{
	kvs_drv_attr_t da;

	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	return kvs_drv_open("host", &da);
}

static void env_open(struct env *e, uint32_t ps, uint64_t cap)
{
	kvs_pool_attr_t pa;

	e->d = small_drv();
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = ps;
	pa.max_tokens = cap;
	pa.slab_granules = 1;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	e->tab = kvs_reqtab_create(e->d, 8, 8192);
	ck_assert_ptr_nonnull(e->tab);
	e->r = kvs_radix_create(e->pool, NULL);
	ck_assert_ptr_nonnull(e->r);
	e->f = kvs_flow_create(e->pool, e->tab, e->r);
	ck_assert_ptr_nonnull(e->f);
}

static uint64_t held_pages(struct env *e)
{
	return kvs_slab_stat(kvs_pool_slab(e->pool), KVS_SLAB_STAT_objects);
}

static void env_close(struct env *e)
{
	ck_assert_int_eq(kvs_radix_validate(e->r), 0);
	ck_assert_uint_eq(kvs_radix_protected(e->r), 0);
	ck_assert_uint_eq(kvs_reqtab_available(e->tab), 8);
	/* Every held page is the tree's. */
	ck_assert_uint_eq(held_pages(e) * kvs_pool_page_size(e->pool), kvs_radix_tokens(e->r));
	kvs_flow_destroy(e->f);
	kvs_radix_destroy(e->r);
	ck_assert_uint_eq(held_pages(e), 0);
	kvs_reqtab_destroy(e->tab);
	kvs_pool_destroy(e->pool);
	kvs_drv_close(e->d);
}

static void row(struct env *e, kvs_req_t *q, uint32_t from, uint32_t n, int32_t *out)
{
	ck_assert_int_eq(kvs_reqtab_read(e->tab, (uint32_t)q->slot, from, n, out), 0);
}

START_TEST(test_shared_prefix)
{
	struct env e;
	int32_t a[64], b[64], out[64], tree[64], rb[64];
	kvs_req_t ra, rb_, *batch[2];
	int i;

	for (i = 0; i < 64; i++) {
		a[i] = 1000 + i;
		b[i] = i < 30 ? a[i] : 5000 + i;
	}
	env_open(&e, 1, 1 << 16);
	kvs_req_init(&ra, a, 40, 0, 0);
	batch[0] = &ra;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 40);
	ck_assert_int_ge(ra.slot, 0);
	ck_assert_uint_eq(ra.prefix_len, 0);
	ck_assert_uint_eq(ra.kv_len, 40);
	row(&e, &ra, 0, 40, rb);
	ck_assert_int_eq(memcmp(rb, out, 40 * sizeof(int32_t)), 0);
	for (i = 0; i < 3; i++) { /* decode: the caller appended a[40 + i] */
		ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 1, out), 0);
		ck_assert_uint_eq(ra.kv_len, 41 + (uint32_t)i);
	}
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &ra), 0);
	ck_assert_int_eq(ra.slot, -1);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 43);

	/* B shares 30 tokens with A: they come from the tree. */
	kvs_req_init(&rb_, b, 50, 0, 0);
	batch[0] = &rb_;
	ck_assert_int_eq(kvs_flow_match(e.f, &rb_), 30);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 20);
	ck_assert_uint_eq(rb_.prefix_len, 30);
	ck_assert_uint_eq(kvs_radix_protected(e.r), 30);
	row(&e, &rb_, 0, 30, rb);
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, a, 30, tree), 30);
	ck_assert_int_eq(memcmp(rb, tree, 30 * sizeof(int32_t)), 0);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &rb_), 0);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 43 + 20);

	/* The same 43 tokens again: at most n - 1 = 42 come from the cache. */
	kvs_req_init(&ra, a, 43, 0, 0);
	batch[0] = &ra;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 1);
	ck_assert_uint_eq(ra.prefix_len, 42);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &ra), 0);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 63); /* nothing new: freed as duplicate */
	env_close(&e);
}
END_TEST

START_TEST(test_batch_all_or_nothing)
{
	struct env e;
	int32_t *a = malloc(8192 * sizeof(int32_t)), *b = malloc(8192 * sizeof(int32_t));
	int32_t *out = malloc(16384 * sizeof(int32_t));
	kvs_req_t ra, rb, *batch[2] = {&ra, &rb};
	uint64_t cap;
	int i;

	for (i = 0; i < 8192; i++) {
		a[i] = i;
		b[i] = 10000 + i;
	}
	env_open(&e, 1, 256); /* rounds up to one slab */
	cap = kvs_pool_capacity(e.pool);
	ck_assert_uint_eq(cap, 4096);
	kvs_req_init(&ra, a, 300, 0, 0);
	kvs_req_init(&rb, b, (uint32_t)(cap - 299), 0, 0);
	errno = 0;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 2, out), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(ra.slot, -1);
	ck_assert_int_eq(rb.slot, -1);
	ck_assert_uint_eq(held_pages(&e), 0);
	ck_assert_uint_eq(kvs_reqtab_available(e.tab), 8);
	/* One fewer token fits exactly. */
	rb.ntokens--;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 2, out), (ssize_t)cap);
	ck_assert_int_eq(kvs_flow_release(e.f, &ra), 0);
	ck_assert_int_eq(kvs_flow_release(e.f, &rb), 0);
	ck_assert_uint_eq(held_pages(&e), 0);
	env_close(&e);
	free(a);
	free(b);
	free(out);
}
END_TEST

START_TEST(test_evicts_on_shortfall)
{
	struct env e;
	static int32_t toks[5][1000], out[1000];
	kvs_req_t q, *batch[1] = {&q};
	int i, j;

	env_open(&e, 1, 4096);
	for (i = 0; i < 5; i++)
		for (j = 0; j < 1000; j++)
			toks[i][j] = i * 10000 + j;
	/* Fill the tree with finished requests until the pool is nearly full. */
	for (i = 0; i < 4; i++) {
		kvs_req_init(&q, toks[i], 1000, 0, 0);
		ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 1000);
		ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	}
	ck_assert_uint_lt(kvs_pool_available(e.pool), 1000);
	/* A new request fits only by evicting the oldest cached one (LRU). */
	kvs_req_init(&q, toks[4], 1000, 0, 0);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 1000);
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, toks[0], 1000, out), 0);
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, toks[3], 1000, out), 1000);
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0);
	env_close(&e);
}
END_TEST

START_TEST(test_chunked_prefill_pages)
{
	struct env e;
	int32_t t[80], out[80], rowv[80], tree[80];
	kvs_req_t q, *batch[1] = {&q};
	int i;

	for (i = 0; i < 80; i++)
		t[i] = 7 * i + 3;
	env_open(&e, 16, 1 << 16);
	kvs_req_init(&q, t, 20, 0, 0); /* first chunk: 20 tokens */
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 20);
	ck_assert_uint_eq(held_pages(&e), 2);
	ck_assert_int_eq(out[17], out[16] + 1); /* second page */
	ck_assert_int_eq(kvs_flow_cache_unfinished(e.f, &q), 0);
	ck_assert_uint_eq(q.prefix_len, 16); /* page-aligned */
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 16);
	ck_assert_uint_eq(kvs_radix_protected(e.r), 16);
	q.ntokens = 70; /* next chunk */
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 50);
	/* Tokens 20..31 continue the partial page; then new pages. */
	ck_assert_int_eq(kvs_reqtab_read(e.tab, (uint32_t)q.slot, 0, 70, rowv), 0);
	for (i = 17; i < 32; i++)
		ck_assert_int_eq(rowv[i], rowv[i - 1] + 1);
	ck_assert_int_eq(kvs_flow_cache_unfinished(e.f, &q), 0);
	ck_assert_uint_eq(q.prefix_len, 64);
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, t, 64, tree), 64);
	ck_assert_int_eq(kvs_reqtab_read(e.tab, (uint32_t)q.slot, 0, 64, rowv), 0);
	ck_assert_int_eq(memcmp(rowv, tree, 64 * sizeof(int32_t)), 0);
	ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 1, out), 0);
	ck_assert_uint_eq(q.kv_len, 71);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 64);
	env_close(&e);
}
END_TEST

START_TEST(test_release_and_errors)
{
	struct env e;
	int32_t t[600], out[600];
	kvs_req_t q, *batch[1] = {&q};
	int i;

	for (i = 0; i < 600; i++)
		t[i] = i;
	env_open(&e, 4, 1 << 16);
	kvs_req_init(&q, t, 600, 0, 0);
	errno = 0;
	q.ntokens = 9000;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), -1); /* > 8192 */
	ck_assert_int_eq(errno, ERANGE);
	q.ntokens = 30;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 30);
	ck_assert_uint_eq(held_pages(&e), 8);
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0); /* preempted */
	ck_assert_uint_eq(held_pages(&e), 0);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 0);
	ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 1, out), -1); /* no slot */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), -1);
	ck_assert_int_eq(errno, EINVAL);
	env_close(&e);
}
END_TEST

/* With the engine's stream named, the freeing calls work as before (on the
 * host backend the fence is the copy queue's own order). */
START_TEST(test_set_stream)
{
	struct env e;
	int32_t t[64], out[64];
	kvs_req_t q, r, *batch[2] = {&q, &r};
	kvs_stream_t s = 7;
	int i;

	for (i = 0; i < 64; i++)
		t[i] = i;
	env_open(&e, 4, 1 << 16);
	errno = 0;
	ck_assert_int_eq(kvs_flow_set_stream(NULL, &s), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_flow_set_stream(e.f, &s), 0);
	ck_assert_int_eq(kvs_flow_set_stream(e.f, &s), 0); /* again: one event */
	kvs_req_init(&q, t, 40, 0, 0);
	kvs_req_init(&r, t, 24, 0, 0);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 2, out), 64);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	ck_assert_int_eq(kvs_flow_release(e.f, &r), 0);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 40);
	ck_assert_int_eq(kvs_flow_set_stream(e.f, NULL), 0);
	env_close(&e);
}
END_TEST

/*
 * On the double: a request released with no host synchronization while the
 * engine's kernel still writes its page.  The flow was given the stream, so
 * a copy the driver queues into the page afterwards runs after the kernel,
 * and its bytes are the ones left.  Without the fence the copy runs at once
 * and the kernel's bytes land over it.
 */
START_TEST(test_stream_fences_release)
{
	if (TU_NEED_DOUBLE(1, "the double's writing kernels"))
		return;
	kvs_drv_t *d = tu_open(1, 0, 0);
	uint64_t s = tu_dbl_stream_create();
	kvs_stream_t ks = s;
	int32_t t[16], out[16];
	kvs_req_t q, *batch[1] = {&q};
	kvs_pool_attr_t pa;
	kvs_pool_t *pool;
	kvs_reqtab_t *tab;
	kvs_radix_t *r;
	kvs_flow_t *f;
	kvs_event_t *kdone;
	kvs_devptr_t base, addr;
	size_t stride, n;
	unsigned char *buf, *back;
	int i;

	ck_assert_ptr_nonnull(d);
	ck_assert_uint_ne(s, 0);
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = 4;
	pa.max_tokens = 1 << 16;
	pa.streams = &ks;
	pa.nstreams = 1;
	pool = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(pool);
	tab = kvs_reqtab_create(d, 4, 256);
	ck_assert_ptr_nonnull(tab);
	r = kvs_radix_create(pool, NULL);
	f = kvs_flow_create(pool, tab, r);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(kvs_flow_set_stream(f, &ks), 0);
	for (i = 0; i < 16; i++)
		t[i] = 500 + i;
	kvs_req_init(&q, t, 16, 0, 0);
	ck_assert_int_eq(kvs_flow_prepare_extend(f, batch, 1, out), 16);
	ck_assert_int_eq(kvs_pool_buffer(pool, 0, KVS_KV_K, &base, &stride), 0);
	addr = base + (uint64_t)out[0] * stride;
	n = 4 * stride;
	buf = malloc(n);
	back = malloc(n);
	tu_fill(buf, n, 5);

	/* The engine's last kernel of the request writes its first page. */
	ck_assert_int_eq(kvs_event_create(d, &kdone), 0);
	ck_assert_int_eq(tu_dbl_kernel_write(s, addr, n, 41, 1500000000ULL), 0);
	ck_assert_int_eq(kvs_event_record(kdone, s), 0);
	ck_assert_int_eq(kvs_flow_release(f, &q), 0); /* no host wait */
	/* The page is free: a copy the driver queues into it now. */
	ck_assert_int_eq(kvs_drv_copy_htod(d, addr, buf, n, NULL), 0);
	ck_assert_int_eq(kvs_event_wait(kdone), 0);
	ck_assert_int_eq(kvs_drv_copy_dtoh(d, back, addr, n, NULL), 0);
	ck_assert_int_eq(kvs_drv_synchronize(d), 0);
	ck_assert(tu_check(back, n, 5));
	ck_assert_int_eq(tu_dbl_faults(), 0);

	kvs_event_destroy(kdone);
	kvs_flow_destroy(f);
	kvs_radix_destroy(r);
	kvs_reqtab_destroy(tab);
	ck_assert_int_eq(kvs_pool_destroy(pool), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	tu_dbl_stream_destroy(s);
	free(buf);
	free(back);
}
END_TEST

/* A row that cannot be written (a failed copy to the device table) fails
 * the batch and leaks nothing. */
/* A prepare sends its rows to the device in one submission: one batch of
 * one copy per request (a cached prefix and the new locations of a request
 * are one copy), not one write per request; the device rows equal the
 * mirror's. */
START_TEST(test_one_submission_per_call)
{
	struct env e;
	int32_t t[8][64], out[8 * 64], dev[64];
	kvs_req_t q[8], *batch[8];
	uint64_t b0, c0;
	kvs_devptr_t base;
	size_t stride;
	int i, k, step;

	for (i = 0; i < 8; i++)
		for (k = 0; k < 64; k++)
			t[i][k] = k < 20 ? 7 + k : 1000 * i + k; /* 20 shared tokens */
	env_open(&e, 4, 1 << 16);
	/* Cache the shared prefix first. */
	kvs_req_init(&q[0], t[0], 30, 0, 0);
	batch[0] = &q[0];
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 30);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q[0]), 0);
	for (i = 0; i < 8; i++) {
		kvs_req_init(&q[i], t[i], 40, 0, 0);
		batch[i] = &q[i];
	}
	b0 = kvs_drv_stat(e.d, KVS_DRV_STAT_batch_calls);
	c0 = kvs_drv_stat(e.d, KVS_DRV_STAT_copy_calls);
	ck_assert_int_gt(kvs_flow_prepare_extend(e.f, batch, 8, out), 0);
	for (i = 0; i < 8; i++)
		ck_assert_uint_ge(q[i].prefix_len, 20); /* q[0]: its own 28 */
	ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_batch_calls) - b0, 1);
	ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_copy_calls) - c0, 8);
	for (step = 0; step < 10; step++) {
		b0 = kvs_drv_stat(e.d, KVS_DRV_STAT_batch_calls);
		c0 = kvs_drv_stat(e.d, KVS_DRV_STAT_copy_calls);
		ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 8, out), 0);
		ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_batch_calls) - b0, 1);
		ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_copy_calls) - c0, 8);
		for (i = 0; i < 8; i++) {
			int32_t loc;

			row(&e, &q[i], q[i].kv_len - 1, 1, &loc);
			ck_assert_int_eq(loc, out[i]);
		}
	}
	ck_assert_int_eq(kvs_reqtab_sync(e.tab), 0);
	ck_assert_int_eq(kvs_reqtab_table(e.tab, &base, &stride), 0);
	for (i = 0; i < 8; i++) {
		ck_assert_uint_eq(q[i].kv_len, 50);
		ck_assert_int_eq(kvs_drv_copy_dtoh(e.d, dev, base + (uint64_t)q[i].slot * stride,
						   sizeof(dev), NULL), 0);
		ck_assert_int_eq(kvs_drv_synchronize(e.d), 0);
		ck_assert_int_eq(memcmp(dev, kvs_reqtab_row(e.tab, (uint32_t)q[i].slot),
					50 * sizeof(int32_t)), 0);
	}
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(kvs_flow_release(e.f, &q[i]), 0);
	env_close(&e);
}
END_TEST

START_TEST(test_row_write_failure)
{
	struct env e;
	kvs_drv_t *inner;
	kvs_pool_attr_t pa;
	int32_t t[64], out[64];
	kvs_req_t q, *batch[1] = {&q};
	int i;

	for (i = 0; i < 64; i++)
		t[i] = i;
	inner = small_drv();
	e.d = kvs_fault_open(inner);
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.max_tokens = 4096;
	e.pool = kvs_pool_create(e.d, &pa);
	e.tab = kvs_reqtab_create(e.d, 8, 8192);
	e.r = kvs_radix_create(e.pool, NULL);
	e.f = kvs_flow_create(e.pool, e.tab, e.r);
	ck_assert_ptr_nonnull(e.f);
	kvs_req_init(&q, t, 40, 0, 0);
	kvs_fault_fail_nth(e.d, KVS_OP_COPY, 1, EIO);
	errno = 0;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), -1);
	ck_assert_int_eq(errno, EIO);
	ck_assert_int_eq(q.slot, -1);
	ck_assert_uint_eq(held_pages(&e), 0);
	ck_assert_uint_eq(kvs_reqtab_available(e.tab), 8);
	/* Works again, then a decode whose row write fails is undone. */
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 40);
	kvs_fault_fail_nth(e.d, KVS_OP_COPY, 1, EIO);
	ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 1, out), -1);
	ck_assert_uint_eq(q.kv_len, 40);
	ck_assert_uint_eq(held_pages(&e), 40);
	ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 1, out), 0);
	ck_assert_uint_eq(q.kv_len, 41);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	env_close(&e);
}
END_TEST

/* A disabled cache: the flows work, nothing is kept, chunked prefill keeps
 * the request's own pages. */
START_TEST(test_disabled_cache)
{
	struct env e;
	kvs_radix_attr_t ra;
	int32_t t[64], out[64];
	kvs_req_t q, *batch[1] = {&q};
	int i;

	for (i = 0; i < 64; i++)
		t[i] = i;
	env_open(&e, 4, 4096);
	kvs_flow_destroy(e.f);
	kvs_radix_destroy(e.r);
	kvs_radix_attr_init(&ra);
	ra.disabled = 1;
	e.r = kvs_radix_create(e.pool, &ra);
	e.f = kvs_flow_create(e.pool, e.tab, e.r);
	kvs_req_init(&q, t, 20, 0, 0);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 20);
	ck_assert_int_eq(kvs_flow_cache_unfinished(e.f, &q), 0);
	ck_assert_uint_eq(held_pages(&e), 5);
	ck_assert_uint_eq(q.prefix_len, 0);
	q.ntokens = 40;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, out), 20);
	ck_assert_uint_eq(held_pages(&e), 10);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	ck_assert_uint_eq(held_pages(&e), 0);
	env_close(&e);
}
END_TEST

/* The "Found" of issue 9: with the worker, a slab being mapped counted as
 * no memory, so the flows evicted cached prefixes to admit a small request
 * that the slab in flight would have served.  Slabs of 128 MiB (prefaulted:
 * the worker's map takes tens of milliseconds); a cached request fills the
 * first slab but 36 tokens, the worker starts on the second; a request of
 * 100 tokens then waits for it, and the cache keeps every token. */
START_TEST(test_worker_keeps_cache)
{
	static int32_t a[65500], b[100];
	kvs_pool_attr_t pa;
	kvs_drv_attr_t da;
	kvs_req_t ra, rb, *batch[1];
	struct env e;
	int i;

	kvs_drv_attr_init(&da);
	e.d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(e.d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 512;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 65536;
	pa.page_size = 1;
	pa.max_tokens = 2 * 65536;
	pa.slab_granules = 32;		/* 64 MiB a buffer: 65536 tokens */
	pa.min_empty = 1;
	pa.max_empty = 2;
	pa.chunk_pool = 0;
	pa.magazine = 0;
	pa.slab_flags = KVS_SLAB_F_WORKER;
	e.pool = kvs_pool_create(e.d, &pa);
	ck_assert_ptr_nonnull(e.pool);
	ck_assert_uint_eq(kvs_slab_pages_per_slab(kvs_pool_slab(e.pool)), 65536);
	e.tab = kvs_reqtab_create(e.d, 8, 65600);
	ck_assert_ptr_nonnull(e.tab);
	e.r = kvs_radix_create(e.pool, NULL);
	ck_assert_ptr_nonnull(e.r);
	e.f = kvs_flow_create(e.pool, e.tab, e.r);
	ck_assert_ptr_nonnull(e.f);
	for (i = 0; i < 2000 && kvs_slab_stat(kvs_pool_slab(e.pool), KVS_SLAB_STAT_slabs_empty) < 1;
	     i++)
		usleep(1000);

	for (i = 0; i < 65500; i++)
		a[i] = i + 1;
	for (i = 0; i < 100; i++)
		b[i] = 1000000 + i;
	ck_assert_int_eq(kvs_req_init(&ra, a, 65500, 0, 0), 0);
	batch[0] = &ra;
	ck_assert_int_eq(kvs_flow_match(e.f, &ra), 0);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, NULL), 65500);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &ra), 0);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 65500);
	usleep(2000); /* the worker is mapping the second slab now */

	ck_assert_uint_ge(kvs_pool_available(e.pool), 100);
	ck_assert_int_eq(kvs_req_init(&rb, b, 100, 0, 0), 0);
	batch[0] = &rb;
	ck_assert_int_eq(kvs_flow_match(e.f, &rb), 0);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 1, NULL), 100);
	/* Nothing was evicted for it, and nothing failed. */
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 65500);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(e.pool), KVS_SLAB_STAT_alloc_fail), 0);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &rb), 0);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 65600);
	ck_assert_int_eq(kvs_slab_validate(kvs_pool_slab(e.pool)), 0);
	env_close(&e);
}
END_TEST

/* The same request twice in one batch is refused with EINVAL and changes
 * nothing (it leaked a request slot and pages before). */
START_TEST(test_batch_names_twice)
{
	struct env e;
	int32_t a[40], b[40];
	kvs_req_t ra, rb, *batch[3];
	uint64_t avail;
	int i;

	env_open(&e, 4, 8192);
	for (i = 0; i < 40; i++) {
		a[i] = 100 + i;
		b[i] = 500 + i;
	}
	ck_assert_int_eq(kvs_req_init(&ra, a, 16, 0, 0), 0);
	ck_assert_int_eq(kvs_req_init(&rb, b, 16, 0, 0), 0);
	avail = kvs_pool_available(e.pool);
	batch[0] = &ra;
	batch[1] = &rb;
	batch[2] = &ra;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 3, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ra.slot, -1);
	ck_assert_int_eq(rb.slot, -1);
	ck_assert_uint_eq(kvs_reqtab_available(e.tab), 8);
	ck_assert_uint_eq(kvs_pool_available(e.pool), avail);
	/* Named once each, the batch goes through; decode refuses twice too. */
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, batch, 2, NULL), 32);
	a[16] = 1;
	ra.ntokens = 17;
	batch[1] = &ra;
	ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 2, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(ra.kv_len, 16);
	batch[1] = &rb;
	b[16] = 2;
	rb.ntokens = 17;
	ck_assert_int_eq(kvs_flow_prepare_decode(e.f, batch, 2, NULL), 0);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &ra), 0);
	ck_assert_int_eq(kvs_flow_release(e.f, &rb), 0);
	env_close(&e);
}
END_TEST

static Suite *flow_suite(void)
{
	Suite *s = suite_create("flow");
	TCase *tc = tcase_create("flows");

	tcase_add_test(tc, test_shared_prefix);
	tcase_add_test(tc, test_batch_all_or_nothing);
	tcase_add_test(tc, test_evicts_on_shortfall);
	tcase_add_test(tc, test_chunked_prefill_pages);
	tcase_add_test(tc, test_release_and_errors);
	tcase_add_test(tc, test_set_stream);
	if (tu_nbackends() > 1)
		tcase_add_test(tc, test_stream_fences_release);
	tcase_add_test(tc, test_row_write_failure);
	tcase_add_test(tc, test_one_submission_per_call);
	tcase_add_test(tc, test_disabled_cache);
	tcase_add_test(tc, test_worker_keeps_cache);
	tcase_add_test(tc, test_batch_names_twice);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(flow_suite());
}
