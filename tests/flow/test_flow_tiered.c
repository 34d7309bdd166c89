/* SPDX-License-Identifier: MIT */
/*
 * tests/flow/test_flow_tiered.c - request flows over the hierarchical radix
 * cache (kvs_flow_create_tiered()), on every backend: a prefix evicted to
 * the host served by load back, bit for bit; a host hit below the
 * threshold computed and re-materialised; chunked prefill, decode,
 * preemption and release leaving nothing held; copies failing at
 * submission (the fault driver) and at completion (the libcuda double)
 * giving computed tokens or a released request, never wrong data.  The
 * cache is validated after every step.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define GRAN (64 * 1024)
#define LAYERS 2
#define HEADS 2
#define HDIM 8
#define TB (HEADS * HDIM * 2) /* bytes of one token in one buffer */
#define MAXT 256
#define PS 4

struct env {
	kvs_drv_t *d, *td;		/* td: the request table's, when not d */
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	kvs_hiradix_t *h;
	kvs_reqtab_t *tab;
	kvs_flow_t *f;
};

static void env_open_drv(struct env *e, kvs_drv_t *d, uint32_t policy, uint64_t lb_threshold,
			 uint64_t dev_pages, uint64_t host_pages)
{
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;
	kvs_hiradix_attr_t a;

	{
		kvs_drv_t *td = e->td;

		memset(e, 0, sizeof(*e));
		e->td = td;
	}
	e->d = d;
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = LAYERS;
	pa.model.tp_size = 1;
	pa.model.dtype_size = 2;
	pa.model.context_len = 4096;
	pa.model.kv_heads = HEADS;
	pa.model.head_dim = HDIM;
	pa.page_size = PS;
	pa.max_tokens = dev_pages * PS;
	pa.magazine = 0;
	e->pool = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	kvs_hpool_attr_init(&ha);
	ha.ratio = 0;
	ha.bytes = host_pages * PS * TB * 2 * LAYERS;
	e->hp = kvs_hpool_create(e->pool, &ha);
	ck_assert_ptr_nonnull(e->hp);
	ck_assert_int_eq(kvs_hiradix_attr_init(&a), 0);
	a.write_policy = policy;
	a.load_back_threshold = lb_threshold;
	e->h = kvs_hiradix_create(e->pool, e->hp, &a);
	ck_assert_ptr_nonnull(e->h);
	e->tab = kvs_reqtab_create(e->td ? e->td : d, 8, MAXT);
	ck_assert_ptr_nonnull(e->tab);
	e->f = kvs_flow_create_tiered(e->pool, e->tab, e->h);
	ck_assert_ptr_nonnull(e->f);
}

/* @e->td is kept: zero @e first. */
static void env_open(struct env *e, int i, uint32_t policy, uint64_t lb_threshold)
{
	env_open_drv(e, tu_open_gran(i, GRAN, 0, 0), policy, lb_threshold, 64, 64);
}

static void valid(struct env *e)
{
	ck_assert_int_eq(kvs_hiradix_validate(e->h), 0);
}

static void env_close(struct env *e)
{
	valid(e);
	ck_assert_uint_eq(kvs_reqtab_available(e->tab), 8);
	ck_assert_int_eq(kvs_flow_destroy(e->f), 0);
	ck_assert_int_eq(kvs_hiradix_destroy(e->h), 0);
	ck_assert_uint_eq(kvs_hpool_available(e->hp), kvs_hpool_capacity(e->hp));
	ck_assert_uint_eq(kvs_hpool_stat(e->hp, KVS_HPOOL_STAT_xfers_live), 0);
	ck_assert_int_eq(kvs_hpool_destroy(e->hp), 0);
	ck_assert_uint_eq(kvs_pool_available(e->pool), kvs_pool_capacity(e->pool));
	ck_assert_int_eq(kvs_reqtab_destroy(e->tab), 0);
	ck_assert_int_eq(kvs_pool_destroy(e->pool), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
	if (e->td)
		ck_assert_int_eq(kvs_drv_close(e->td), 0);
}

/* Take in completions until nothing is in flight. */
static void settle_all(struct env *e)
{
	tu_hiradix_settle(e->h);
}

/* The bytes of token @i of @key: a function of the prefix key[0 .. i]. */
static unsigned int tok_seed(const int32_t *key, size_t i, uint32_t layer, int which)
{
	uint64_t x = 1469598103934665603ull;
	size_t j;

	for (j = 0; j <= i; j++)
		x = (x ^ (uint32_t)key[j]) * 1099511628211ull;
	x = (x ^ layer) * 1099511628211ull;
	x = (x ^ (unsigned)which) * 1099511628211ull;
	return (unsigned int)(x ^ (x >> 32));
}

/* The forward pass: write the KV of @req's tokens [from, to) into its row. */
static void kv_write(struct env *e, const kvs_req_t *q, uint32_t from, uint32_t to)
{
	unsigned char k[TB], v[TB];
	int32_t locs[MAXT];
	uint32_t i, l;

	if (to <= from)
		return;
	ck_assert_int_eq(kvs_reqtab_read(e->tab, (uint32_t)q->slot, from, to - from, locs), 0);
	for (i = from; i < to; i++)
		for (l = 0; l < LAYERS; l++) {
			tu_fill(k, TB, tok_seed(q->tokens, i, l, 0));
			tu_fill(v, TB, tok_seed(q->tokens, i, l, 1));
			ck_assert_int_eq(kvs_pool_set_kv(e->pool, l, locs[i - from], 1, k, v), 0);
		}
}

/* Do @req's row's first @n tokens hold its KV? */
static int kv_check(struct env *e, const kvs_req_t *q, uint32_t n)
{
	unsigned char k[TB], v[TB];
	int32_t locs[MAXT];
	uint32_t i, l;

	if (!n)
		return 1;
	ck_assert_int_eq(kvs_reqtab_read(e->tab, (uint32_t)q->slot, 0, n, locs), 0);
	for (i = 0; i < n; i++)
		for (l = 0; l < LAYERS; l++) {
			ck_assert_int_eq(kvs_pool_get_kv(e->pool, l, locs[i], 1, k, v), 0);
			if (!tu_check(k, TB, tok_seed(q->tokens, i, l, 0)) ||
			    !tu_check(v, TB, tok_seed(q->tokens, i, l, 1)))
				return 0;
		}
	return 1;
}

static void keyseq(int32_t *k, size_t n, int32_t base)
{
	size_t i;

	for (i = 0; i < n; i++)
		k[i] = base + (int32_t)i;
}

/* Admit @q alone, wait for every layer, check its prefix, compute the rest. */
static void admit(struct env *e, kvs_req_t *q)
{
	kvs_req_t *b[1] = {q};
	int32_t out[MAXT];
	ssize_t got;
	uint32_t l;

	got = kvs_flow_prepare_extend(e->f, b, 1, out);
	ck_assert_int_eq(got, (ssize_t)(q->ntokens - q->prefix_len));
	valid(e);
	for (l = 0; l < LAYERS; l++)
		ck_assert_int_eq(kvs_flow_wait_layer(e->f, l), 0);
	ck_assert(kv_check(e, q, q->prefix_len));
	kv_write(e, q, q->prefix_len, q->kv_len);
}

/* Serve @n tokens of @key to the end; returns what admission loaded. */
static uint32_t serve(struct env *e, const int32_t *key, uint32_t n)
{
	kvs_req_t q;
	uint32_t loaded;

	ck_assert_int_eq(kvs_req_init(&q, key, n, 0, 0), 0);
	admit(e, &q);
	loaded = q.loaded_len;
	ck_assert_int_eq(kvs_flow_cache_finished(e->f, &q), 0);
	ck_assert_int_eq(q.slot, -1);
	valid(e);
	return loaded;
}

/* Evict the whole device tier (tombstones where backed up). */
static void evict_all(struct env *e)
{
	settle_all(e);
	ck_assert_int_ge(kvs_hiradix_evict_device(e->h, SIZE_MAX / 2), 0);
	valid(e);
}

/* ------------------------------------------------------------ load back */

START_TEST(test_load_back)
{
	int32_t key[64];
	kvs_req_t q;
	struct env e = {0};

	env_open(&e, _i, KVS_WRITE_THROUGH, 0);
	keyseq(key, 64, 100);
	ck_assert_uint_eq(serve(&e, key, 33), 0);
	evict_all(&e);
	/* The match tells the host part without taking anything. */
	ck_assert_int_eq(kvs_req_init(&q, key, 41, 0, 0), 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q), 0);
	ck_assert_uint_eq(q.host_hit_len, 32);
	admit(&e, &q);
	ck_assert_uint_eq(q.host_hit_len, 32);
	ck_assert_uint_eq(q.loaded_len, 32);
	ck_assert_uint_eq(q.prefix_len, 32);
	ck_assert_ptr_nonnull(q.hi_node);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_backs), 1);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_tokens), 32);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	valid(&e);
	/* Everything on the device now: a third request matches it all. */
	ck_assert_int_eq(kvs_req_init(&q, key, 41, 0, 0), 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &q), 40);
	ck_assert_uint_eq(q.host_hit_len, 0);
	ck_assert_uint_eq(serve(&e, key, 41), 0);
	/* Two requests of one batch sharing the host part. */
	evict_all(&e);
	{
		int32_t k2[64], out[MAXT];
		kvs_req_t a, b, *batch[2] = {&a, &b};
		uint32_t l;

		memcpy(k2, key, sizeof(k2));
		k2[36] = -5;
		ck_assert_int_eq(kvs_req_init(&a, key, 45, 0, 0), 0);
		ck_assert_int_eq(kvs_req_init(&b, k2, 45, 0, 0), 0);
		ck_assert_int_ge(kvs_flow_prepare_extend(e.f, batch, 2, out), 0);
		valid(&e);
		for (l = 0; l < LAYERS; l++)
			ck_assert_int_eq(kvs_flow_wait_layer(e.f, l), 0);
		ck_assert_uint_eq(a.prefix_len, 40);
		ck_assert_uint_eq(b.prefix_len, 36);
		ck_assert(kv_check(&e, &a, a.prefix_len));
		ck_assert(kv_check(&e, &b, b.prefix_len));
		kv_write(&e, &a, a.prefix_len, a.kv_len);
		kv_write(&e, &b, b.prefix_len, b.kv_len);
		ck_assert_int_eq(kvs_flow_cache_finished(e.f, &a), 0);
		ck_assert_int_eq(kvs_flow_cache_finished(e.f, &b), 0);
		valid(&e);
	}
	env_close(&e);
}
END_TEST

/* With the engine's stream named, the layer waits are the stream's, on the
 * device (the host backend waits on the host), and releasing needs no host
 * synchronization: the loaded bytes are right all the same. */
START_TEST(test_load_back_stream)
{
	int32_t key[64];
	kvs_req_t q;
	struct env e = {0};
	kvs_stream_t s0 = 0;

	env_open(&e, _i, KVS_WRITE_THROUGH, 0);
	ck_assert_int_eq(kvs_flow_set_stream(e.f, &s0), 0);
	keyseq(key, 64, 300);
	ck_assert_uint_eq(serve(&e, key, 33), 0);
	evict_all(&e);
	ck_assert_int_eq(kvs_req_init(&q, key, 41, 0, 0), 0);
	admit(&e, &q);
	ck_assert_uint_eq(q.loaded_len, 32);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	ck_assert_int_eq(kvs_req_init(&q, key, 41, 0, 0), 0);
	admit(&e, &q);
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0);
	valid(&e);
	env_close(&e);
}
END_TEST

/* A host hit below the cache's threshold is computed, and the insert at
 * the finish makes the tombstones device-resident again with its pages. */
START_TEST(test_threshold)
{
	int32_t key[64];
	kvs_req_t q;
	struct env e = {0};

	env_open(&e, _i, KVS_WRITE_THROUGH, 64);
	keyseq(key, 64, 7000);
	ck_assert_uint_eq(serve(&e, key, 33), 0);
	evict_all(&e);
	ck_assert_int_eq(kvs_req_init(&q, key, 37, 0, 0), 0);
	admit(&e, &q);
	ck_assert_uint_eq(q.host_hit_len, 32);
	ck_assert_uint_eq(q.loaded_len, 0);
	ck_assert_uint_eq(q.prefix_len, 0);
	ck_assert_uint_eq(q.kv_len, 37);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_backs), 0);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_skipped), 1);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	valid(&e);
	ck_assert_uint_ge(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_remat_tokens), 32);
	/* On the device again, with the computed bytes. */
	ck_assert_int_eq(kvs_req_init(&q, key, 37, 0, 0), 0);
	admit(&e, &q);
	ck_assert_uint_eq(q.prefix_len, 36);
	ck_assert_uint_eq(q.host_hit_len, 0);
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ lifecycles */

/* Chunked prefill over a loaded prefix, decode, preemption, re-admission,
 * release before the wait: the pools go back to where they started. */
START_TEST(test_lifecycle)
{
	int32_t key[MAXT], out[MAXT];
	kvs_req_t q, r, *b[1];
	struct env e = {0};
	int i;

	env_open(&e, _i, KVS_WRITE_BACK, 0);
	keyseq(key, MAXT, 555);
	ck_assert_uint_eq(serve(&e, key, 24), 0);
	evict_all(&e); /* write back: backed up now, tombstones */
	ck_assert_int_eq(kvs_req_init(&q, key, 30, 0, 0), 0);
	admit(&e, &q);
	ck_assert_uint_eq(q.loaded_len, 24);
	/* Chunked prefill: cache what is computed, go on. */
	ck_assert_int_eq(kvs_flow_cache_unfinished(e.f, &q), 0);
	valid(&e);
	ck_assert_uint_eq(q.prefix_len, 28);
	ck_assert(kv_check(&e, &q, 30));
	q.ntokens = 50;
	b[0] = &q;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, b, 1, out), 20);
	kv_write(&e, &q, 30, 50);
	valid(&e);
	for (i = 0; i < 10; i++) {
		ck_assert_int_eq(kvs_flow_prepare_decode(e.f, b, 1, out), 0);
		kv_write(&e, &q, q.kv_len - 1, q.kv_len);
		valid(&e);
	}
	ck_assert(kv_check(&e, &q, q.kv_len));
	/* Preempted: released, then admitted again from what the tree has. */
	ck_assert_int_eq(kvs_flow_release(e.f, &q), 0);
	ck_assert_int_eq(q.slot, -1);
	valid(&e);
	evict_all(&e);
	ck_assert_int_eq(kvs_req_init(&q, key, 60, 0, 0), 0);
	admit(&e, &q);
	ck_assert_uint_eq(q.prefix_len, 28);
	ck_assert_uint_eq(q.loaded_len, 28);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	valid(&e);
	/* Released before its load was waited for. */
	evict_all(&e);
	ck_assert_int_eq(kvs_req_init(&r, key, 60, 0, 0), 0);
	b[0] = &r;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, b, 1, out), 4);
	ck_assert_uint_eq(r.loaded_len, 56);
	ck_assert_int_eq(kvs_flow_release(e.f, &r), 0);
	ck_assert_int_eq(kvs_flow_wait_layer(e.f, 0), 0);
	valid(&e);
	settle_all(&e);
	valid(&e);
	env_close(&e);
}
END_TEST

/* A pool too small for a batch: all or nothing, then eviction serves it. */
START_TEST(test_shortfall)
{
	int32_t keys[4][64], out[4 * MAXT];
	kvs_req_t q[4], *b[4];
	struct env e = {0};
	uint64_t avail;
	int32_t *held;
	size_t nheld;
	int i;

	memset(&e, 0, sizeof(e));
	env_open_drv(&e, tu_open_gran(_i, GRAN, 0, 0), KVS_WRITE_THROUGH, 0, 32, 64);
	for (i = 0; i < 4; i++) {
		keyseq(keys[i], 64, 10000 * (i + 1));
		ck_assert_uint_eq(serve(&e, keys[i], 25), 0);
	}
	settle_all(&e);
	/* The pool rounds up to whole slabs: hold all but 32 free tokens. */
	nheld = (size_t)kvs_pool_available(e.pool) - 32;
	held = malloc((nheld + 1) * sizeof(*held));
	ck_assert_ptr_nonnull(held);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, nheld, held), 0);
	/* 4 x 24 cached tokens and 32 free; now 3 x 40 more. */
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(kvs_req_init(&q[i], keys[i], 64, 0, 0), 0);
		b[i] = &q[i];
	}
	avail = kvs_pool_available(e.pool);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, b, 3, out), -1);
	ck_assert_int_eq(errno, ENOMEM);
	valid(&e);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(q[i].slot, -1);
	ck_assert_uint_eq(kvs_reqtab_available(e.tab), 8);
	settle_all(&e);
	ck_assert_uint_ge(kvs_pool_available(e.pool), avail);
	ck_assert_int_ge(kvs_flow_prepare_extend(e.f, b, 2, out), 0);
	ck_assert_int_eq(kvs_flow_wait_layer(e.f, 1), 0);
	for (i = 0; i < 2; i++) {
		ck_assert(kv_check(&e, &q[i], q[i].prefix_len));
		ck_assert_int_eq(kvs_flow_release(e.f, &q[i]), 0);
	}
	valid(&e);
	ck_assert_int_eq(kvs_pool_free(e.pool, nheld, held), 0);
	free(held);
	env_close(&e);
}
END_TEST

/* A pool short while nothing on the device can go: the host copies stay
 * (they are hits for later requests, and evicting them frees no device
 * page).  Before the fix, every failed allocation evicted the host tier. */
START_TEST(test_shortfall_keeps_host)
{
	int32_t keys[4][64], other[64], out[MAXT];
	kvs_req_t q, *b[1] = {&q};
	kvs_hiradix_usage_t u0, u1;
	struct env e = {0};
	int32_t *held;
	size_t nheld;
	int i;

	memset(&e, 0, sizeof(e));
	env_open_drv(&e, tu_open_gran(_i, GRAN, 0, 0), KVS_WRITE_THROUGH, 0, 32, 64);
	for (i = 0; i < 4; i++) {
		keyseq(keys[i], 64, 10000 * (i + 1));
		ck_assert_uint_eq(serve(&e, keys[i], 25), 0);
	}
	evict_all(&e);
	ck_assert_int_eq(kvs_hiradix_usage(e.h, &u0), 0);
	ck_assert_uint_eq(u0.device_tokens, 0);
	ck_assert_uint_eq(u0.tombstone_tokens, 4 * 24);
	/* Someone else holds all but 8 free tokens. */
	nheld = (size_t)kvs_pool_available(e.pool) - 8;
	held = malloc((nheld + 1) * sizeof(*held));
	ck_assert_ptr_nonnull(held);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, nheld, held), 0);
	keyseq(other, 64, 90000);
	ck_assert_int_eq(kvs_req_init(&q, other, 64, 0, 0), 0);
	errno = 0;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, b, 1, out), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(q.slot, -1);
	valid(&e);
	ck_assert_int_eq(kvs_hiradix_usage(e.h, &u1), 0);
	ck_assert_uint_eq(u1.tombstone_tokens, u0.tombstone_tokens);
	ck_assert_uint_eq(u1.host_tokens, u0.host_tokens);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_evict_host_tokens), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, nheld, held), 0);
	free(held);
	/* The host copies still serve a request. */
	ck_assert_uint_eq(serve(&e, keys[0], 25), 24);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ faults */

/* A load that cannot be submitted: the request is admitted and computes. */
START_TEST(test_fault_submit)
{
	int32_t key[64];
	kvs_req_t q;
	struct env e = {0};
	kvs_drv_t *f;

	f = kvs_fault_open(tu_open_gran(_i, GRAN, 0, 0));
	ck_assert_ptr_nonnull(f);
	memset(&e, 0, sizeof(e));
	env_open_drv(&e, f, KVS_WRITE_THROUGH, 0, 64, 64);
	keyseq(key, 64, 4242);
	ck_assert_uint_eq(serve(&e, key, 33), 0);
	evict_all(&e);
	ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_COPY, 1, EIO), 0);
	ck_assert_int_eq(kvs_req_init(&q, key, 37, 0, 0), 0);
	admit(&e, &q);
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	ck_assert_uint_eq(q.host_hit_len, 32);
	ck_assert_uint_eq(q.loaded_len, 0);
	ck_assert_uint_eq(q.prefix_len, 0);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	valid(&e);
	/* The computed bytes are what the next request gets. */
	ck_assert_int_eq(kvs_req_init(&q, key, 37, 0, 0), 0);
	admit(&e, &q);
	ck_assert_uint_eq(q.prefix_len, 36);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	/* Random copy failures: data right or request dropped, never wrong. */
	ck_assert_int_eq(kvs_fault_fail_random(f, KVS_OP_COPY, 0.3, 99, EIO), 0);
	{
		uint64_t rng = 5;
		int i;

		for (i = 0; i < 60; i++) {
			int32_t k[64];
			kvs_req_t r, *b[1] = {&r};
			int32_t out[MAXT];
			uint32_t l, n;
			int ok = 1;

			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			keyseq(k, 64, 4242);
			k[8 + (rng >> 33) % 40] = (int32_t)(rng >> 40) % 3;
			n = 9 + (uint32_t)((rng >> 20) % 50);
			if (i % 4 == 3)
				(void)kvs_hiradix_evict_device(e.h, 40);
			ck_assert_int_eq(kvs_req_init(&r, k, n, 0, 0), 0);
			if (kvs_flow_prepare_extend(e.f, b, 1, out) < 0) {
				ck_assert_int_eq(r.slot, -1);
				valid(&e);
				continue;
			}
			for (l = 0; l < LAYERS; l++)
				if (kvs_flow_wait_layer(e.f, l) < 0)
					ok = 0;
			valid(&e);
			if (!ok) {
				ck_assert_int_eq(r.slot, -1);
				continue;
			}
			/* The KV reads and writes are copies too: not failed. */
			ck_assert_int_eq(kvs_fault_clear(f), 0);
			ck_assert(kv_check(&e, &r, r.prefix_len));
			kv_write(&e, &r, r.prefix_len, r.kv_len);
			ck_assert_int_eq(kvs_fault_fail_random(f, KVS_OP_COPY, 0.3, 99 + (uint64_t)i,
							       EIO), 0);
			ck_assert_int_eq(kvs_flow_cache_finished(e.f, &r), 0);
			valid(&e);
		}
	}
	/* The run did load back, and did fail copies. */
	ck_assert_uint_gt(kvs_fault_injected(f), 0);
	ck_assert_uint_gt(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_backs), 0);
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	settle_all(&e);
	env_close(&e);
}
END_TEST

/* The libcuda double: a load whose completion fails.  The wait reports
 * it and releases the request; admitted again, it is loaded again. */
START_TEST(test_fault_completion)
{
	if (TU_NEED_DOUBLE(_i, "needs a simulated kernel (kvsdbl_kernel) of the double"))
		return;
	int32_t key[64];
	kvs_req_t q;
	struct env e = {0};
	kvs_req_t *b[1] = {&q};
	int32_t out[MAXT];
	uint64_t avail;

	if (strcmp(tu_backends[_i], "cuda") != 0)
		return;
	/* The table on the host driver: held copies would hold its writes. */
	e.td = kvs_drv_open("host", NULL);
	ck_assert_ptr_nonnull(e.td);
	env_open(&e, _i, KVS_WRITE_THROUGH, 0);
	keyseq(key, 64, 31337);
	ck_assert_uint_eq(serve(&e, key, 33), 0);
	evict_all(&e);
	avail = kvs_pool_available(e.pool);
	tu_dbl_clear_sticky();
	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	ck_assert_int_eq(kvs_req_init(&q, key, 37, 0, 0), 0);
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, b, 1, out), 5);
	ck_assert_uint_eq(q.loaded_len, 32);
	valid(&e);
	ck_assert_int_eq(tu_dbl_kernel(0, 4096, 64, 1000), 0);
	ck_assert_int_eq(tu_dbl_sticky(), 700);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	errno = 0;
	ck_assert_int_eq(kvs_flow_wait_layer(e.f, 0), -1);
	ck_assert_int_ne(errno, 0);
	ck_assert_int_eq(q.slot, -1);
	ck_assert_ptr_null(q.hi_node);
	settle_all(&e);
	valid(&e);
	ck_assert_uint_eq(kvs_pool_available(e.pool), avail);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_fail), 1);
	tu_dbl_clear_sticky();
	/* Admitted again: loaded again, right this time. */
	ck_assert_int_eq(kvs_req_init(&q, key, 37, 0, 0), 0);
	admit(&e, &q);
	ck_assert_uint_eq(q.loaded_len, 32);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	env_close(&e);
}
END_TEST

/* Bad input changes nothing. */
START_TEST(test_bad_input)
{
	int32_t key[64];
	kvs_req_t q, *b[1] = {&q};
	struct env e = {0};

	env_open(&e, _i, KVS_WRITE_THROUGH, 0);
	keyseq(key, 64, 1);
	ck_assert_int_eq(kvs_req_init(&q, key, 9, 0, 0), 0);
	q.tokens = NULL; /* tokens missing */
	errno = 0;
	ck_assert_int_eq(kvs_flow_prepare_extend(e.f, b, 1, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(q.slot, -1);
	errno = 0;
	ck_assert_int_eq(kvs_flow_match(e.f, &q), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_flow_wait_layer(e.f, LAYERS), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(kvs_flow_create_tiered(e.pool, e.tab, NULL));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_reqtab_available(e.tab), 8);
	env_close(&e);
}
END_TEST

/* Extra keys reach the tiered cache: a prefix served under one key is
 * found under it alone, on the device and, evicted, in the host tier (the
 * flow used to refuse any extra key). */
START_TEST(test_extra_keys)
{
	int32_t key[64];
	kvs_req_t q, r;
	struct env e = {0};

	env_open(&e, _i, KVS_WRITE_THROUGH, 0);
	keyseq(key, 64, 700);
	ck_assert_int_eq(kvs_req_init(&q, key, 33, 7, 0), 0);
	admit(&e, &q);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &q), 0);
	ck_assert_int_eq(kvs_req_init(&r, key, 33, 0, 0), 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &r), 0);
	ck_assert_int_eq(kvs_req_init(&r, key, 33, 8, 0), 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &r), 0);
	ck_assert_int_eq(kvs_req_init(&r, key, 33, 7, 0), 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &r), 32);
	evict_all(&e);
	ck_assert_int_eq(kvs_req_init(&r, key, 33, 7, 0), 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &r), 0);
	ck_assert_uint_eq(r.host_hit_len, 32);
	ck_assert_int_eq(kvs_req_init(&r, key, 33, 0, 0), 0);
	ck_assert_int_eq(kvs_flow_match(e.f, &r), 0);
	ck_assert_uint_eq(r.host_hit_len, 0);
	/* Admitted under its key, it loads the host part back. */
	ck_assert_int_eq(kvs_req_init(&r, key, 33, 7, 0), 0);
	admit(&e, &r);
	ck_assert_uint_eq(r.loaded_len, 32);
	ck_assert_int_eq(kvs_flow_cache_finished(e.f, &r), 0);
	env_close(&e);
}
END_TEST

static Suite *flow_tiered_suite(void)
{
	Suite *s = suite_create("flow_tiered");
	TCase *tc = tcase_create("flow_tiered");
	int nb = tu_nbackends();

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_load_back, 0, nb);
	tcase_add_loop_test(tc, test_load_back_stream, 0, nb);
	tcase_add_loop_test(tc, test_threshold, 0, nb);
	tcase_add_loop_test(tc, test_lifecycle, 0, nb);
	tcase_add_loop_test(tc, test_shortfall, 0, nb);
	tcase_add_loop_test(tc, test_shortfall_keeps_host, 0, nb);
	tcase_add_loop_test(tc, test_fault_submit, 0, nb);
	tcase_add_loop_test(tc, test_fault_completion, 0, nb);
	tcase_add_loop_test(tc, test_extra_keys, 0, nb);
	tcase_add_loop_test(tc, test_bad_input, 0, nb);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(flow_tiered_suite());
}
