/* SPDX-License-Identifier: MIT */
/*
 * tests/tier/test_hostpool.c - the host (L2) pool, on every backend: sizing,
 * page allocation, round trips device -> host -> device bit for bit in both
 * layouts and several page sizes, merged-copy counts on hand-checked cases,
 * layer-wise completion (held copies on the libcuda double: a waiter on layer
 * 0 returns while later layers are in flight), completion errors, bad input,
 * and a failed copy injected at every copy of a scenario.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define GRAN (64 * 1024)
#define LAYERS 3
#define HEADS 2
#define HDIM 16
#define TB (HEADS * HDIM * 2) /* bytes of one token in one buffer */

static const int layouts[2] = {KVS_HPOOL_LAYER_FIRST, KVS_HPOOL_PAGE_FIRST};
static const uint32_t page_sizes[3] = {1, 16, 64};

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	uint32_t ps, layers, nb; /* nb: buffers a layer, 2 (MHA) or 1 (MLA) */
	size_t tb;		 /* bytes of a token in a buffer */
};

static void model(kvs_model_t *m, int mla, uint32_t layers)
{
	memset(m, 0, sizeof(*m));
	m->layers = layers;
	m->tp_size = 1;
	m->dtype_size = 2;
	m->context_len = 4096;
	if (mla) {
		m->attn = KVS_ATTN_MLA;
		m->kv_heads = 1;
		m->head_dim = 48;
		m->kv_lora_rank = 32;
		m->qk_rope_head_dim = 16;
	} else {
		m->kv_heads = HEADS;
		m->head_dim = HDIM;
	}
}

/* A device pool of @layers layers over driver @d, and a host pool of
 * @pages pages (0: the default size) in @layout. */
static void env_open_drv(struct env *e, kvs_drv_t *d, uint32_t ps, int layout, int mla,
			 uint32_t layers, uint64_t pages)
{
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;

	memset(e, 0, sizeof(*e));
	e->d = d;
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	model(&pa.model, mla, layers);
	pa.page_size = ps;
	pa.max_tokens = 256 * ps;
	pa.magazine = 0;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	e->ps = ps;
	e->layers = layers;
	e->nb = mla ? 1 : 2;
	e->tb = mla ? 48 * 2 : TB;
	kvs_hpool_attr_init(&ha);
	ha.layout = (uint32_t)layout;
	if (pages) {
		ha.ratio = 0;
		ha.bytes = pages * (size_t)ps * e->tb * e->nb * layers;
	}
	e->hp = kvs_hpool_create(e->pool, &ha);
	ck_assert_ptr_nonnull(e->hp);
}

static void env_open(struct env *e, int i, uint32_t ps, int layout, int mla, uint32_t layers,
		     uint64_t pages)
{
	env_open_drv(e, tu_open_gran(i, GRAN, 0, 0), ps, layout, mla, layers, pages);
}

/* Everything given back: no page used or busy, no handle live. */
static void env_close(struct env *e)
{
	ck_assert_uint_eq(kvs_hpool_available(e->hp), kvs_hpool_capacity(e->hp));
	ck_assert_uint_eq(kvs_hpool_stat(e->hp, KVS_HPOOL_STAT_pages_busy), 0);
	ck_assert_uint_eq(kvs_hpool_stat(e->hp, KVS_HPOOL_STAT_xfers_live), 0);
	ck_assert_int_eq(kvs_hpool_destroy(e->hp), 0);
	ck_assert_uint_eq(kvs_drv_stat(e->d, KVS_DRV_STAT_bytes_host), 0);
	ck_assert_uint_eq(kvs_pool_available(e->pool), kvs_pool_capacity(e->pool));
	ck_assert_int_eq(kvs_pool_destroy(e->pool), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
}

static size_t page_bytes(const struct env *e)
{
	return (size_t)e->ps * e->tb * e->nb * e->layers;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

/* @n device pages, sorted. */
static void dev_alloc(struct env *e, size_t n, int32_t *pages)
{
	int32_t *locs = malloc(n * e->ps * sizeof(*locs));
	size_t i;

	ck_assert_ptr_nonnull(locs);
	ck_assert_int_eq(kvs_pool_alloc(e->pool, n * e->ps, locs), 0);
	for (i = 0; i < n; i++)
		pages[i] = locs[i * e->ps] / (int32_t)e->ps;
	free(locs);
	qsort(pages, n, sizeof(*pages), cmp_i32);
}

static void dev_free(struct env *e, size_t n, const int32_t *pages)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int32_t loc = pages[i] * (int32_t)e->ps;

		ck_assert_int_eq(kvs_pool_free(e->pool, 1, &loc), 0);
	}
}

static unsigned int seed_of(unsigned int tag, uint32_t layer, int which)
{
	return tag * 977u + layer * 31u + (unsigned int)which * 7u + 1u;
}

/* Write pattern @tag of every layer into device page @page. */
static void dev_fill(struct env *e, int32_t page, unsigned int tag)
{
	size_t n = (size_t)e->ps * e->tb;
	unsigned char *k = malloc(n), *v = malloc(n);
	uint32_t l;

	for (l = 0; l < e->layers; l++) {
		tu_fill(k, n, seed_of(tag, l, 0));
		tu_fill(v, n, seed_of(tag, l, 1));
		ck_assert_int_eq(kvs_pool_set_kv(e->pool, l, page * (int32_t)e->ps, e->ps, k, v), 0);
	}
	free(k);
	free(v);
}

/* Does device page @page hold pattern @tag in every layer? */
static int dev_check(struct env *e, int32_t page, unsigned int tag)
{
	size_t n = (size_t)e->ps * e->tb;
	unsigned char *k = malloc(n), *v = malloc(n);
	uint32_t l;
	int ok = 1;

	for (l = 0; l < e->layers && ok; l++) {
		ck_assert_int_eq(kvs_pool_get_kv(e->pool, l, page * (int32_t)e->ps, e->ps, k, v), 0);
		ok = tu_check(k, n, seed_of(tag, l, 0)) && (e->nb == 1 || tu_check(v, n, seed_of(tag, l, 1)));
	}
	free(k);
	free(v);
	return ok;
}

/* Does host page @page hold pattern @tag, piece by piece? */
static int host_check(struct env *e, int32_t page, unsigned int tag)
{
	uint32_t l;
	int w;

	for (l = 0; l < e->layers; l++) {
		for (w = 0; w < (int)e->nb; w++) {
			void *p;
			size_t n;

			ck_assert_int_eq(kvs_hpool_page_ptr(e->hp, page, l,
							    e->nb == 1 ? KVS_KV_LATENT : w, &p, &n),
					 0);
			ck_assert_uint_eq(n, (size_t)e->ps * e->tb);
			if (!tu_check(p, n, seed_of(tag, l, w)))
				return 0;
		}
	}
	return 1;
}

static uint64_t hstat(struct env *e, enum kvs_hpool_stat s)
{
	return kvs_hpool_stat(e->hp, s);
}

/* ------------------------------------------------------------ sizing */

START_TEST(test_sizing)
{
	struct env e;
	kvs_hpool_attr_t a;
	kvs_hpool_t *hp;
	uint64_t dev_pages;
	size_t pb;

	env_open(&e, _i, 16, KVS_HPOOL_LAYER_FIRST, 0, LAYERS, 0);
	dev_pages = kvs_pool_capacity(e.pool) / 16;
	pb = page_bytes(&e);
	/* The default: twice the device pool's pages (SGLang's 2.0). */
	ck_assert_uint_eq(kvs_hpool_capacity(e.hp), 2 * dev_pages);
	ck_assert_uint_eq(kvs_hpool_stat(e.hp, KVS_HPOOL_STAT_pages), 2 * dev_pages);
	ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_bytes_host), 2 * dev_pages * pb);
	ck_assert_ptr_eq(kvs_hpool_pool(e.hp), e.pool);
	ck_assert_int_eq(kvs_hpool_destroy(e.hp), 0);
	/* NULL attributes are the defaults. */
	hp = kvs_hpool_create(e.pool, NULL);
	ck_assert_ptr_nonnull(hp);
	ck_assert_uint_eq(kvs_hpool_capacity(hp), 2 * dev_pages);
	ck_assert_int_eq(kvs_hpool_destroy(hp), 0);
	/* A ratio rounds down to whole pages. */
	kvs_hpool_attr_init(&a);
	a.ratio = 0.5;
	hp = kvs_hpool_create(e.pool, &a);
	ck_assert_ptr_nonnull(hp);
	ck_assert_uint_eq(kvs_hpool_capacity(hp), dev_pages / 2);
	ck_assert_int_eq(kvs_hpool_destroy(hp), 0);
	a.ratio = 1.0 / (double)dev_pages; /* one page, or just under it */
	hp = kvs_hpool_create(e.pool, &a);
	if (hp) {
		ck_assert_uint_eq(kvs_hpool_capacity(hp), 1);
		ck_assert_int_eq(kvs_hpool_destroy(hp), 0);
	}
	/* Bytes round down to whole pages. */
	a.ratio = 0;
	a.bytes = 10 * pb + pb - 1;
	a.layout = KVS_HPOOL_PAGE_FIRST;
	hp = kvs_hpool_create(e.pool, &a);
	ck_assert_ptr_nonnull(hp);
	ck_assert_uint_eq(kvs_hpool_capacity(hp), 10);
	ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_bytes_host), 10 * pb);
	ck_assert_int_eq(kvs_hpool_destroy(hp), 0);
	ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_bytes_host), 0);
	/* Exactly one of the two. */
	a.ratio = 2.0;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.ratio = 0;
	a.bytes = 0;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	/* Sizes of no page, of too many pages, ratios that are no size. */
	a.bytes = pb - 1;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.bytes = 0;
	a.ratio = -1.0;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.ratio = NAN;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.ratio = INFINITY;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.ratio = 1e12;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.ratio = 1e-9;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	/* More pages than an int32_t names. */
	a.ratio = 0;
	a.bytes = SIZE_MAX / 2;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.bytes = 0;
	a.ratio = 2.0;
	a.layout = 7;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.layout = KVS_HPOOL_LAYER_FIRST;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(NULL, &a));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_drv_stat(e.d, KVS_DRV_STAT_bytes_host), 0);
	/* Put a pool back for env_close. */
	e.hp = kvs_hpool_create(e.pool, &a);
	ck_assert_ptr_nonnull(e.hp);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ pages */

START_TEST(test_alloc_free)
{
	struct env e;
	int32_t p[16], q[16], bad[2];
	uint64_t cap;
	int k;

	env_open(&e, _i, 4, KVS_HPOOL_LAYER_FIRST, 0, LAYERS, 16);
	cap = kvs_hpool_capacity(e.hp);
	ck_assert_uint_eq(cap, 16);
	/* A fresh pool hands out 0, 1, 2, ... */
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 10, p), 0);
	for (k = 0; k < 10; k++)
		ck_assert_int_eq(p[k], k);
	ck_assert_uint_eq(kvs_hpool_available(e.hp), 6);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_pages_used), 10);
	/* All or nothing. */
	errno = 0;
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 7, q), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_uint_eq(kvs_hpool_available(e.hp), 6);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_alloc_fail), 1);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 0, NULL), 0);
	/* Freed pages come back in the order they were freed in. */
	q[0] = 7, q[1] = 3, q[2] = 5;
	ck_assert_int_eq(kvs_hpool_free(e.hp, 3, q), 0);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 3, q), 0);
	ck_assert_int_eq(q[0], 7);
	ck_assert_int_eq(q[1], 3);
	ck_assert_int_eq(q[2], 5);
	/* Bad frees change nothing. */
	bad[0] = 2, bad[1] = 2;
	errno = 0;
	ck_assert_int_eq(kvs_hpool_free(e.hp, 2, bad), -1); /* twice in one call */
	ck_assert_int_eq(errno, EINVAL);
	bad[0] = 1, bad[1] = 12; /* 12 is free */
	errno = 0;
	ck_assert_int_eq(kvs_hpool_free(e.hp, 2, bad), -1);
	ck_assert_int_eq(errno, EINVAL);
	bad[1] = 16;
	ck_assert_int_eq(kvs_hpool_free(e.hp, 2, bad), -1);
	bad[1] = -1;
	ck_assert_int_eq(kvs_hpool_free(e.hp, 2, bad), -1);
	ck_assert_int_eq(kvs_hpool_free(e.hp, 17, p), -1);
	ck_assert_uint_eq(kvs_hpool_available(e.hp), 6);
	ck_assert_int_eq(kvs_hpool_free(e.hp, 1, &p[1]), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hpool_free(e.hp, 1, &p[1]), -1); /* a double free */
	ck_assert_int_eq(errno, EINVAL);
	/* The rest, then the pool is whole. */
	p[1] = p[9];
	ck_assert_int_eq(kvs_hpool_free(e.hp, 9, p), 0);
	ck_assert_uint_eq(kvs_hpool_available(e.hp), cap);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_pages_used_peak), 10);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 16, p), 0);
	ck_assert_int_eq(kvs_hpool_free(e.hp, 16, p), 0);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ round trips */

#define RT_PAGES 6

/* Device pages A -> host -> device pages B, in @layout with pages of @ps
 * tokens; the host pages are paired out of order so that runs break. */
static void round_trip(int i, uint32_t ps, int layout, int mla)
{
	static const int perm[RT_PAGES] = {0, 1, 2, 5, 4, 3};
	int32_t a[RT_PAGES], b[RT_PAGES], h[RT_PAGES], hp[RT_PAGES];
	kvs_hpool_xfer_t *x;
	struct env e;
	uint32_t l;
	int k;

	env_open(&e, i, ps, layout, mla, mla ? 2 : LAYERS, 32);
	dev_alloc(&e, RT_PAGES, a);
	dev_alloc(&e, RT_PAGES, b);
	for (k = 0; k < RT_PAGES; k++) {
		dev_fill(&e, a[k], (unsigned)k + 1);
		dev_fill(&e, b[k], 1000u + (unsigned)k); /* to be overwritten */
	}
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, RT_PAGES, h), 0);
	for (k = 0; k < RT_PAGES; k++)
		hp[k] = h[perm[k]];
	ck_assert_int_eq(kvs_hpool_backup(e.hp, a, hp, RT_PAGES, &x), 0);
	ck_assert_int_eq(kvs_hpool_xfer_wait(x), 0);
	ck_assert_int_eq(kvs_hpool_xfer_query(x), 1);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	for (k = 0; k < RT_PAGES; k++)
		ck_assert_msg(host_check(&e, hp[k], (unsigned)k + 1), "host page %d, ps %u", k, ps);
	if (layout == KVS_HPOOL_PAGE_FIRST) {
		/* The whole page: every piece, in buffer order. */
		for (k = 0; k < RT_PAGES; k++) {
			unsigned char *base;
			size_t n, off = 0;
			int w;

			ck_assert_int_eq(kvs_hpool_page_bytes(e.hp, hp[k], (void **)&base, &n), 0);
			ck_assert_uint_eq(n, page_bytes(&e));
			for (l = 0; l < e.layers; l++) {
				for (w = 0; w < (int)e.nb; w++) {
					void *p;
					size_t pn;

					ck_assert_int_eq(kvs_hpool_page_ptr(e.hp, hp[k], l, w, &p, &pn), 0);
					ck_assert_ptr_eq(p, base + off);
					off += pn;
				}
			}
			ck_assert_uint_eq(off, n);
		}
	} else {
		void *p;

		errno = 0;
		ck_assert_int_eq(kvs_hpool_page_bytes(e.hp, hp[0], &p, NULL), -1);
		ck_assert_int_eq(errno, ENOTSUP);
	}
	/* Back into B, waiting layer by layer as a forward pass would. */
	ck_assert_int_eq(kvs_hpool_load(e.hp, b, hp, RT_PAGES, &x), 0);
	for (l = 0; l < e.layers; l++)
		ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, l), 0);
	ck_assert_int_eq(kvs_hpool_xfer_wait(x), 0);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	for (k = 0; k < RT_PAGES; k++)
		ck_assert_msg(dev_check(&e, b[k], (unsigned)k + 1), "device page %d, ps %u", k, ps);
	/* Synchronously (no handle), from one host page to two device pages. */
	hp[1] = hp[0];
	ck_assert_int_eq(kvs_hpool_load(e.hp, b, hp, 2, NULL), 0);
	ck_assert(dev_check(&e, b[0], 1));
	ck_assert(dev_check(&e, b[1], 1));
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_backup_pages), RT_PAGES);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_load_pages), RT_PAGES + 2);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_bytes_copied),
			  (2 * RT_PAGES + 2) * page_bytes(&e));
	/* The same bytes by direction (the metrics' tier transfers). */
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_backup_bytes), RT_PAGES * page_bytes(&e));
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_load_bytes), (RT_PAGES + 2) * page_bytes(&e));
	ck_assert_int_eq(kvs_hpool_free(e.hp, RT_PAGES, h), 0);
	dev_free(&e, RT_PAGES, a);
	dev_free(&e, RT_PAGES, b);
	env_close(&e);
}

START_TEST(test_round_trip)
{
	int lay, p;

	for (lay = 0; lay < 2; lay++)
		for (p = 0; p < 3; p++)
			round_trip(_i, page_sizes[p], layouts[lay], 0);
}
END_TEST

START_TEST(test_round_trip_mla)
{
	int lay;

	for (lay = 0; lay < 2; lay++) {
		round_trip(_i, 1, layouts[lay], 1);
		round_trip(_i, 16, layouts[lay], 1);
	}
}
END_TEST

/* ------------------------------------------------------------ merging */

/* Copies one backup of these pairs issues: the pool's count and the
 * driver's agree. */
static uint64_t copies_of(struct env *e, const int32_t *dev, const int32_t *host, size_t n)
{
	uint64_t c0 = hstat(e, KVS_HPOOL_STAT_copies);
	uint64_t d0 = kvs_drv_stat(e->d, KVS_DRV_STAT_copy_calls);
	uint64_t b0 = hstat(e, KVS_HPOOL_STAT_bytes_copied);
	uint64_t k0 = kvs_drv_stat(e->d, KVS_DRV_STAT_batch_calls);
	uint64_t c, batches;

	ck_assert_int_eq(kvs_hpool_backup(e->hp, dev, host, n, NULL), 0);
	c = hstat(e, KVS_HPOOL_STAT_copies) - c0;
	ck_assert_uint_eq(kvs_drv_stat(e->d, KVS_DRV_STAT_copy_calls) - d0, c);
	ck_assert_uint_eq(hstat(e, KVS_HPOOL_STAT_bytes_copied) - b0, n * page_bytes(e));
	/* One submission per layer, however many copies. */
	batches = e->layers;
	ck_assert_uint_eq(kvs_drv_stat(e->d, KVS_DRV_STAT_batch_calls) - k0, batches);
	/* A load of the same pairs merges the same way. */
	c0 = hstat(e, KVS_HPOOL_STAT_copies);
	k0 = kvs_drv_stat(e->d, KVS_DRV_STAT_batch_calls);
	ck_assert_int_eq(kvs_hpool_load(e->hp, dev, host, n, NULL), 0);
	ck_assert_uint_eq(hstat(e, KVS_HPOOL_STAT_copies) - c0, c);
	ck_assert_uint_eq(kvs_drv_stat(e->d, KVS_DRV_STAT_batch_calls) - k0, batches);
	return c;
}

START_TEST(test_merge_counts)
{
	int32_t d[8], h[8], dv[4], hv[4];
	struct env e;
	int k, lay;

	for (lay = 0; lay < 2; lay++) {
		/* 3 layers x (K, V): 6 buffers. */
		env_open(&e, _i, 16, layouts[lay], 0, LAYERS, 8);
		dev_alloc(&e, 8, d);
		for (k = 1; k < 8; k++)
			ck_assert_int_eq(d[k], d[0] + k); /* a fresh slab's pages */
		ck_assert_int_eq(kvs_hpool_alloc(e.hp, 8, h), 0);
		for (k = 0; k < 4; k++)
			dv[k] = d[k], hv[k] = h[k];
		if (layouts[lay] == KVS_HPOOL_LAYER_FIRST) {
			/* One run on both sides: one copy per buffer. */
			ck_assert_uint_eq(copies_of(&e, dv, hv, 4), 6);
			/* Device pages d0 d1 | d3 d4: two runs. */
			dv[2] = d[3], dv[3] = d[4];
			ck_assert_uint_eq(copies_of(&e, dv, hv, 4), 12);
			/* Host pages 0 1 | 3 | 2: three runs. */
			dv[2] = d[2], dv[3] = d[3];
			hv[2] = h[3], hv[3] = h[2];
			ck_assert_uint_eq(copies_of(&e, dv, hv, 4), 18);
			/* Descending on both sides: no run at all. */
			for (k = 0; k < 4; k++)
				dv[k] = d[3 - k], hv[k] = h[3 - k];
			ck_assert_uint_eq(copies_of(&e, dv, hv, 4), 24);
		} else {
			/* A page's pieces are contiguous only on the host: one
			 * copy per page per buffer, runs or not. */
			ck_assert_uint_eq(copies_of(&e, dv, hv, 4), 24);
			ck_assert_uint_eq(copies_of(&e, dv, hv, 1), 6);
		}
		ck_assert_int_eq(kvs_hpool_free(e.hp, 8, h), 0);
		dev_free(&e, 8, d);
		env_close(&e);
	}
	/* One buffer (MLA, one layer): page-first pages of a run are adjacent
	 * on both sides too, so they merge. */
	env_open(&e, _i, 16, KVS_HPOOL_PAGE_FIRST, 1, 1, 8);
	dev_alloc(&e, 4, d);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 4, h), 0);
	ck_assert_uint_eq(copies_of(&e, d, h, 4), 1);
	ck_assert_int_eq(kvs_hpool_free(e.hp, 4, h), 0);
	dev_free(&e, 4, d);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ layer order */

#define LO_LAYERS 4
#define LO_PAGES 8

/* Any backend: completed layers form a prefix at every moment.  Queried
 * from the last layer down, so a layer seen complete implies that every
 * layer queried after it (earlier ones) is complete too. */
START_TEST(test_layer_prefix)
{
	int32_t d[LO_PAGES], h[LO_PAGES];
	kvs_hpool_xfer_t *x;
	struct env e;
	int round, k;

	/* Pages of 64 tokens x 64 bytes x 8 = 32 KiB a page a buffer: copies
	 * of 256 KiB go to the host backend's worker, really asynchronous. */
	env_open(&e, _i, 64, KVS_HPOOL_LAYER_FIRST, 0, LO_LAYERS, LO_PAGES);
	dev_alloc(&e, LO_PAGES, d);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, LO_PAGES, h), 0);
	for (k = 0; k < LO_PAGES; k++)
		dev_fill(&e, d[k], (unsigned)k + 7);
	ck_assert_int_eq(kvs_hpool_backup(e.hp, d, h, LO_PAGES, NULL), 0);
	for (round = 0; round < 20; round++) {
		int done = 0;

		ck_assert_int_eq(kvs_hpool_load(e.hp, d, h, LO_PAGES, &x), 0);
		while (!done) {
			int seen = 0, l;

			for (l = LO_LAYERS - 1; l >= 0; l--) {
				int q = kvs_hpool_xfer_layer_query(x, (uint32_t)l);

				ck_assert_int_ge(q, 0);
				if (seen)
					ck_assert_msg(q == 1, "layer %d pending after a later one", l);
				seen |= q;
			}
			done = kvs_hpool_xfer_query(x);
			ck_assert_int_ge(done, 0);
		}
		ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	}
	for (k = 0; k < LO_PAGES; k++)
		ck_assert(dev_check(&e, d[k], (unsigned)k + 7));
	ck_assert_int_eq(kvs_hpool_free(e.hp, LO_PAGES, h), 0);
	dev_free(&e, LO_PAGES, d);
	env_close(&e);
}
END_TEST

struct waiter {
	kvs_hpool_xfer_t *x;
	uint32_t layer;
	atomic_int done;
	int rc;
};

static void *wait_layer(void *arg)
{
	struct waiter *w = arg;

	w->rc = kvs_hpool_xfer_layer_wait(w->x, w->layer);
	atomic_store(&w->done, 1);
	return NULL;
}

/*
 * The libcuda double, its copies held: layer l completes when its copies
 * are released, and not before, so a waiter on layer 0 returns while the
 * later layers are still in flight.  Layer-first, one run: 2 copies a
 * layer (K, V).  Pages in flight cannot be freed.
 */
START_TEST(test_layer_wait_held)
{
	if (TU_NEED_DOUBLE(_i, "the double's held copies"))
		return;
	int32_t d[LO_PAGES], h[LO_PAGES];
	struct waiter w = {0};
	kvs_hpool_xfer_t *x;
	uint64_t c0;
	pthread_t t;
	struct env e;
	int k, l;
	long per;

	if (strcmp(tu_backends[_i], "cuda") != 0)
		return; /* held copies are the double's */
	env_open(&e, _i, 16, KVS_HPOOL_LAYER_FIRST, 0, LO_LAYERS, LO_PAGES);
	dev_alloc(&e, LO_PAGES, d);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, LO_PAGES, h), 0);
	for (k = 0; k < LO_PAGES; k++)
		dev_fill(&e, d[k], (unsigned)k + 3);
	ck_assert_int_eq(kvs_hpool_backup(e.hp, d, h, LO_PAGES, NULL), 0);
	for (k = 0; k < LO_PAGES; k++)
		dev_fill(&e, d[k], 99); /* overwritten by the load */

	c0 = hstat(&e, KVS_HPOOL_STAT_copies);
	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	ck_assert_int_eq(kvs_hpool_load(e.hp, d, h, LO_PAGES, &x), 0);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_copies) - c0, 2 * LO_LAYERS);
	/* A layer is one submission where the driver batches natively (one
	 * held copy), two copies (K, V) where it does not. */
	per = tu_dbl_copy_release(0);
	ck_assert(per == LO_LAYERS || per == 2 * LO_LAYERS);
	per /= LO_LAYERS;
	ck_assert_int_eq(per == 1, (kvs_drv_caps(e.d) & KVS_DRV_CAP_BATCH) != 0);
	for (l = 0; l < LO_LAYERS; l++)
		ck_assert_int_eq(kvs_hpool_xfer_layer_query(x, (uint32_t)l), 0);
	ck_assert_int_eq(kvs_hpool_xfer_query(x), 0);
	/* Busy: a page a copy still reads cannot go back to the pool. */
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_pages_busy), LO_PAGES);
	errno = 0;
	ck_assert_int_eq(kvs_hpool_free(e.hp, 1, &h[3]), -1);
	ck_assert_int_eq(errno, EBUSY);
	/* A thread waits for the last layer. */
	w.x = x;
	w.layer = LO_LAYERS - 1;
	ck_assert_int_eq(pthread_create(&t, NULL, wait_layer, &w), 0);
	for (l = 0; l < LO_LAYERS; l++) {
		int m;

		/* All but the last submission of layer l: not there yet. */
		if (per > 1) {
			ck_assert_int_eq(tu_dbl_copy_release(1), per * (LO_LAYERS - l) - 1);
			ck_assert_int_eq(kvs_hpool_xfer_layer_query(x, (uint32_t)l), 0);
		}
		/* Its last: it has arrived, the next layer not. */
		ck_assert_int_eq(tu_dbl_copy_release(1), per * (LO_LAYERS - 1 - l));
		ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, (uint32_t)l), 0);
		ck_assert_int_eq(kvs_hpool_xfer_layer_query(x, (uint32_t)l), 1);
		for (m = 0; m < l; m++)
			ck_assert_int_eq(kvs_hpool_xfer_layer_query(x, (uint32_t)m), 1);
		for (m = l + 1; m < LO_LAYERS; m++)
			ck_assert_int_eq(kvs_hpool_xfer_layer_query(x, (uint32_t)m), 0);
		if (l < LO_LAYERS - 1) {
			/* Its event is pending: the waiter cannot have returned. */
			ck_assert_int_eq(atomic_load(&w.done), 0);
			ck_assert_int_eq(kvs_hpool_xfer_query(x), 0);
		}
	}
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(w.rc, 0);
	ck_assert_int_eq(kvs_hpool_xfer_query(x), 1);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_pages_busy), 0);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	for (k = 0; k < LO_PAGES; k++)
		ck_assert(dev_check(&e, d[k], (unsigned)k + 3));

	/* A handle freed before the pool saw its completion: the free sees it
	 * and gives the pages back. */
	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	ck_assert_int_eq(kvs_hpool_backup(e.hp, d, h, LO_PAGES, &x), 0);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_pages_busy), LO_PAGES);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_pages_busy), 0);

	ck_assert_int_eq(kvs_hpool_free(e.hp, LO_PAGES, h), 0);
	dev_free(&e, LO_PAGES, d);
	env_close(&e);
}
END_TEST

/*
 * The double again: a transfer whose completion reports an error (the
 * device faults while its copies are in flight) says so from every wait
 * and query, and gives its pages back.
 */
START_TEST(test_completion_error)
{
	if (TU_NEED_DOUBLE(_i, "the double's poisoned context and held copies"))
		return;
	int32_t d[4], h[4];
	kvs_hpool_xfer_t *x;
	struct env e;

	if (strcmp(tu_backends[_i], "cuda") != 0)
		return;
	env_open(&e, _i, 16, KVS_HPOOL_LAYER_FIRST, 0, LAYERS, 4);
	dev_alloc(&e, 4, d);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 4, h), 0);
	tu_dbl_clear_sticky();
	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	ck_assert_int_eq(kvs_hpool_backup(e.hp, d, h, 4, &x), 0);
	/* A kernel reading memory nobody mapped faults the device. */
	ck_assert_int_eq(tu_dbl_kernel(0, 4096, 64, 1000), 0);
	ck_assert_int_eq(tu_dbl_sticky(), 700);
	errno = 0;
	ck_assert_int_eq(kvs_hpool_xfer_layer_query(x, 0), -1);
	ck_assert_int_ne(errno, 0);
	errno = 0;
	ck_assert_int_eq(kvs_hpool_xfer_wait(x), -1);
	ck_assert_int_ne(errno, 0);
	ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, 0), -1);
	ck_assert_int_eq(kvs_hpool_xfer_query(x), -1);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_xfer_fail), 1);
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_pages_busy), 0);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	tu_dbl_clear_sticky();
	/* The pool goes on. */
	dev_fill(&e, d[0], 5);
	ck_assert_int_eq(kvs_hpool_backup(e.hp, d, h, 1, NULL), 0);
	ck_assert(host_check(&e, h[0], 5));
	ck_assert_int_eq(kvs_hpool_free(e.hp, 4, h), 0);
	dev_free(&e, 4, d);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ faults */

#define FI_PAGES 5

/* The scenario: back up A into H, then load H into B.  -1 at the first
 * call that fails. */
static int scenario(struct env *e, const int32_t *a, const int32_t *b, const int32_t *h)
{
	kvs_hpool_xfer_t *x;

	if (kvs_hpool_backup(e->hp, a, h, FI_PAGES, &x) < 0)
		return -1;
	if (kvs_hpool_xfer_wait(x) < 0) {
		kvs_hpool_xfer_free(x);
		return -1;
	}
	kvs_hpool_xfer_free(x);
	return kvs_hpool_load(e->hp, b, h, FI_PAGES, NULL);
}

/*
 * A copy fails at submission, at every copy of the scenario in turn, in
 * both layouts: the failing call returns -1 with the injected errno,
 * nothing is busy, no handle is live, no page is lost or leaked (the
 * caller's pages are still the caller's: they free exactly once), and the
 * scenario then runs clean, bit for bit.
 */
START_TEST(test_fault_every_copy)
{
	int32_t a[FI_PAGES], b[FI_PAGES], h[FI_PAGES];
	int lay;

	for (lay = 0; lay < 2; lay++) {
		uint64_t ncopies, nth, avail, dev_avail, inj0;
		struct env e;
		kvs_drv_t *f;
		int k;

		f = kvs_fault_open(tu_open_gran(_i, GRAN, 0, 0));
		ck_assert_ptr_nonnull(f);
		env_open_drv(&e, f, 4, layouts[lay], 0, LAYERS, 16);
		/* The host memory itself: no pool, nothing held. */
		ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_HOST_ALLOC, 1, ENOMEM), 0);
		errno = 0;
		ck_assert_ptr_null(kvs_hpool_create(e.pool, NULL));
		ck_assert_int_eq(errno, ENOMEM);
		ck_assert_uint_eq(kvs_drv_stat(f, KVS_DRV_STAT_bytes_host),
				  16 * page_bytes(&e));
		dev_alloc(&e, FI_PAGES, a);
		dev_alloc(&e, FI_PAGES, b);
		/* Out of order, so that runs break and copies are many. */
		ck_assert_int_eq(kvs_hpool_alloc(e.hp, FI_PAGES, h), 0);
		k = h[1], h[1] = h[3], h[3] = k;
		for (k = 0; k < FI_PAGES; k++)
			dev_fill(&e, a[k], (unsigned)k + 11);
		/* Count the scenario's submissions: one batch per layer of
		 * each of its two transfers, however many copies. */
		ncopies = kvs_fault_calls(f, KVS_OP_COPY);
		ck_assert_int_eq(scenario(&e, a, b, h), 0);
		ncopies = kvs_fault_calls(f, KVS_OP_COPY) - ncopies;
		ck_assert_uint_eq(ncopies, 2 * LAYERS);
		avail = kvs_hpool_available(e.hp);
		dev_avail = kvs_pool_available(e.pool);
		inj0 = kvs_fault_injected(f);
		for (nth = 1; nth <= ncopies; nth++) {
			uint64_t fails = hstat(&e, KVS_HPOOL_STAT_submit_fail);

			ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_COPY, nth, EIO), 0);
			errno = 0;
			ck_assert_int_eq(scenario(&e, a, b, h), -1);
			ck_assert_int_eq(errno, EIO);
			ck_assert_uint_eq(kvs_fault_injected(f), inj0 + nth);
			ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_submit_fail), fails + 1);
			ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_pages_busy), 0);
			ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_xfers_live), 0);
			ck_assert_uint_eq(kvs_hpool_available(e.hp), avail);
			ck_assert_uint_eq(kvs_pool_available(e.pool), dev_avail);
			for (k = 0; k < FI_PAGES; k++)
				dev_fill(&e, b[k], 500);
		}
		ck_assert_int_eq(kvs_fault_clear(f), 0);
		ck_assert_int_eq(scenario(&e, a, b, h), 0);
		for (k = 0; k < FI_PAGES; k++) {
			ck_assert(host_check(&e, h[k], (unsigned)k + 11));
			ck_assert(dev_check(&e, b[k], (unsigned)k + 11));
		}
		/* Each page is the caller's, once. */
		ck_assert_int_eq(kvs_hpool_free(e.hp, FI_PAGES, h), 0);
		dev_free(&e, FI_PAGES, a);
		dev_free(&e, FI_PAGES, b);
		env_close(&e);
	}
}
END_TEST

/* ------------------------------------------------------------ streams */

/* A pool given the engine's streams: every transfer is fenced after them
 * (no host synchronization), layers can be waited for by a stream, and
 * the bytes are right on every backend. */
START_TEST(test_streams)
{
	int32_t a[4], b[4], h[4];
	kvs_stream_t streams[2] = {0, 0};
	kvs_hpool_attr_t ha;
	kvs_hpool_xfer_t *x;
	kvs_hpool_t *hp2;
	unsigned long rec0, wait0;
	struct env e;
	uint32_t l;
	int k;

	env_open(&e, _i, 16, KVS_HPOOL_PAGE_FIRST, 0, LAYERS, 8);
	if (strcmp(tu_backends[_i], "cuda") == 0)
		streams[1] = tu_dbl_stream_create();
	kvs_hpool_attr_init(&ha);
	ha.layout = KVS_HPOOL_PAGE_FIRST;
	ha.nstreams = 2;
	errno = 0;
	ck_assert_ptr_null(kvs_hpool_create(e.pool, &ha)); /* NULL streams */
	ck_assert_int_eq(errno, EINVAL);
	ha.streams = streams;
	hp2 = kvs_hpool_create(e.pool, &ha);
	ck_assert_ptr_nonnull(hp2);
	/* The pool keeps its own copy of the array. */
	ha.streams = NULL;
	ck_assert_int_eq(kvs_hpool_destroy(e.hp), 0);
	e.hp = hp2;
	dev_alloc(&e, 4, a);
	dev_alloc(&e, 4, b);
	for (k = 0; k < 4; k++) {
		dev_fill(&e, a[k], (unsigned)k + 21);
		dev_fill(&e, b[k], 77);
	}
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 4, h), 0);
	rec0 = tu_dbl_calls("cuEventRecord");
	wait0 = tu_dbl_calls("cuStreamWaitEvent");
	ck_assert_int_eq(kvs_hpool_backup(e.hp, a, h, 4, &x), 0);
	if (strcmp(tu_backends[_i], "cuda") == 0 && tu_is_double()) {
		/* The fence: an event on each stream that the copy queue waits
		 * for, then (at least) one a layer. */
		ck_assert_uint_eq(tu_dbl_calls("cuStreamWaitEvent") - wait0, 2);
		ck_assert_uint_ge(tu_dbl_calls("cuEventRecord") - rec0, 2 + LAYERS);
	}
	ck_assert_int_eq(kvs_hpool_xfer_wait(x), 0);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	for (k = 0; k < 4; k++)
		ck_assert(host_check(&e, h[k], (unsigned)k + 21));
	/* A forward pass: layer l waited for by the stream. */
	ck_assert_int_eq(kvs_hpool_load(e.hp, b, h, 4, &x), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hpool_xfer_layer_stream_wait(NULL, 0, streams[1]), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hpool_xfer_layer_stream_wait(x, LAYERS, streams[1]), -1);
	ck_assert_int_eq(errno, EINVAL);
	for (l = 0; l < LAYERS; l++)
		ck_assert_int_eq(kvs_hpool_xfer_layer_stream_wait(x, l, streams[1]), 0);
	if (!(kvs_drv_caps(e.d) & KVS_DRV_CAP_STREAM_WAIT))
		/* Waited for on this thread: the pool saw it arrive. */
		ck_assert_int_eq(kvs_hpool_xfer_query(x), 1);
	ck_assert_int_eq(kvs_hpool_xfer_wait(x), 0);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	for (k = 0; k < 4; k++)
		ck_assert(dev_check(&e, b[k], (unsigned)k + 21));
	ck_assert_int_eq(kvs_hpool_free(e.hp, 4, h), 0);
	dev_free(&e, 4, a);
	dev_free(&e, 4, b);
	env_close(&e);
	if (streams[1])
		tu_dbl_stream_destroy(streams[1]);
}
END_TEST

/* A backup fenced after a kernel on the engine's stream does not complete
 * before the kernel does: the copy queue waits on the device.  Needs a
 * driver that orders on the device (KVS_DRV_CAP_STREAM_WAIT) and kernels
 * (the double's): elsewhere there is nothing to see. */
START_TEST(test_backup_after_kernel)
{
	if (TU_NEED_DOUBLE(_i, "the double's simulated kernels"))
		return;
	int32_t a[4], h[4];
	kvs_stream_t s;
	kvs_hpool_attr_t ha;
	kvs_hpool_xfer_t *x;
	kvs_devptr_t buf;
	struct env e;
	size_t stride;
	double t0;

	if (strcmp(tu_backends[_i], "cuda") != 0)
		return;
	env_open(&e, _i, 16, KVS_HPOOL_LAYER_FIRST, 0, LAYERS, 8);
	if (!(kvs_drv_caps(e.d) & KVS_DRV_CAP_STREAM_WAIT)) {
		env_close(&e);
		return;
	}
	s = tu_dbl_stream_create();
	ck_assert_uint_ne(s, 0);
	kvs_hpool_attr_init(&ha);
	ha.streams = &s;
	ha.nstreams = 1;
	ck_assert_int_eq(kvs_hpool_destroy(e.hp), 0);
	e.hp = kvs_hpool_create(e.pool, &ha);
	ck_assert_ptr_nonnull(e.hp);
	dev_alloc(&e, 4, a);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 4, h), 0);
	ck_assert_int_eq(kvs_pool_buffer(e.pool, 0, KVS_KV_K, &buf, &stride), 0);
	t0 = tu_seconds();
	/* The engine's prefill: 0.3 s on its stream. */
	ck_assert_int_eq(tu_dbl_kernel(s, buf + (uint64_t)a[0] * e.ps * stride,
				       (size_t)e.ps * stride, 300000000ull), 0);
	ck_assert_int_eq(kvs_hpool_backup(e.hp, a, h, 4, &x), 0);
	ck_assert_int_eq(kvs_hpool_xfer_wait(x), 0);
	ck_assert_double_ge(tu_seconds() - t0, 0.3);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	ck_assert_int_eq(kvs_hpool_free(e.hp, 4, h), 0);
	dev_free(&e, 4, a);
	env_close(&e);
	tu_dbl_stream_destroy(s);
}
END_TEST

/* ------------------------------------------------------------ bad input */

#define BAD(expr, err)                                                                    \
	do {                                                                              \
		errno = 0;                                                                \
		ck_assert_int_eq((long)(expr), -1);                                       \
		ck_assert_int_eq(errno, (err));                                           \
		ck_assert_uint_eq(kvs_hpool_available(e.hp), avail);                      \
		ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_pages_busy), 0);               \
		ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_xfers_live), live);            \
		ck_assert_uint_eq(kvs_pool_available(e.pool), dev_avail);                 \
	} while (0)

START_TEST(test_bad_input)
{
	int32_t d[4], h[4], dv[4], hv[4], freed, big[20] = {0};
	uint64_t avail, dev_avail, live = 0, v;
	kvs_hpool_xfer_t *x;
	struct env e;
	void *p;
	size_t n;

	env_open(&e, _i, 16, KVS_HPOOL_LAYER_FIRST, 0, LAYERS, 8);
	dev_alloc(&e, 4, d);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 4, h), 0);
	dev_alloc(&e, 1, &freed);
	dev_free(&e, 1, &freed); /* a device page nobody holds */
	avail = kvs_hpool_available(e.hp);
	dev_avail = kvs_pool_available(e.pool);

	BAD(kvs_hpool_attr_init(NULL), EINVAL);
	BAD(kvs_hpool_alloc(NULL, 1, hv), EINVAL);
	BAD(kvs_hpool_alloc(e.hp, 1, NULL), EINVAL);
	BAD(kvs_hpool_alloc(e.hp, 5, hv), ENOMEM);
	BAD(kvs_hpool_free(NULL, 1, h), EINVAL);
	BAD(kvs_hpool_free(e.hp, 1, NULL), EINVAL);
	/* Transfers: every kind of bad pair, in both directions. */
	for (int dir = 0; dir < 2; dir++) {
		int (*xf)(kvs_hpool_t *, const int32_t *, const int32_t *, size_t,
			  kvs_hpool_xfer_t **) = dir ? kvs_hpool_load : kvs_hpool_backup;

		memcpy(dv, d, sizeof(dv));
		memcpy(hv, h, sizeof(hv));
		BAD(xf(NULL, dv, hv, 4, &x), EINVAL);
		BAD(xf(e.hp, NULL, hv, 4, &x), EINVAL);
		BAD(xf(e.hp, dv, NULL, 4, &x), EINVAL);
		dv[2] = -1;
		BAD(xf(e.hp, dv, hv, 4, &x), EINVAL);
		dv[2] = (int32_t)(kvs_pool_capacity(e.pool) / 16);
		BAD(xf(e.hp, dv, hv, 4, &x), EINVAL);
		dv[2] = freed; /* not held */
		BAD(xf(e.hp, dv, hv, 4, &x), EINVAL);
		dv[2] = d[2];
		hv[3] = -5;
		BAD(xf(e.hp, dv, hv, 4, &x), EINVAL);
		hv[3] = 8;
		BAD(xf(e.hp, dv, hv, 4, &x), EINVAL);
		hv[3] = 6; /* a free host page */
		BAD(xf(e.hp, dv, hv, 4, &x), EINVAL);
		hv[3] = h[3];
		if (dir) {
			dv[3] = dv[0]; /* a device destination twice */
			BAD(xf(e.hp, dv, hv, 4, &x), EINVAL);
			dv[3] = d[3];
			BAD(xf(e.hp, big, big, kvs_pool_capacity(e.pool) / 16 + 1, &x), EINVAL);
		} else {
			hv[3] = hv[1]; /* a host destination twice */
			BAD(xf(e.hp, dv, hv, 4, &x), EINVAL);
			hv[3] = h[3];
			BAD(xf(e.hp, big, big, 9, &x), EINVAL);
		}
		/* The good call still works: nothing was left marked. */
		ck_assert_int_eq(xf(e.hp, dv, hv, 4, NULL), 0);
	}
	/* Direct access. */
	BAD(kvs_hpool_page_ptr(NULL, h[0], 0, KVS_KV_K, &p, &n), EINVAL);
	BAD(kvs_hpool_page_ptr(e.hp, h[0], 0, KVS_KV_K, NULL, &n), EINVAL);
	BAD(kvs_hpool_page_ptr(e.hp, h[0], LAYERS, KVS_KV_K, &p, &n), EINVAL);
	BAD(kvs_hpool_page_ptr(e.hp, h[0], 0, KVS_KV_LATENT, &p, &n), EINVAL);
	BAD(kvs_hpool_page_ptr(e.hp, h[0], 0, 9, &p, &n), EINVAL);
	BAD(kvs_hpool_page_ptr(e.hp, 6, 0, KVS_KV_K, &p, &n), EINVAL); /* free */
	BAD(kvs_hpool_page_ptr(e.hp, -1, 0, KVS_KV_K, &p, &n), EINVAL);
	BAD(kvs_hpool_page_ptr(e.hp, 8, 0, KVS_KV_K, &p, &n), EINVAL);
	BAD(kvs_hpool_page_bytes(e.hp, h[0], &p, &n), ENOTSUP);
	BAD(kvs_hpool_page_bytes(NULL, h[0], &p, &n), EINVAL);
	BAD(kvs_hpool_page_bytes(e.hp, h[0], NULL, &n), EINVAL);
	/* Handles. */
	BAD(kvs_hpool_xfer_query(NULL), EINVAL);
	BAD(kvs_hpool_xfer_wait(NULL), EINVAL);
	BAD(kvs_hpool_xfer_layer_query(NULL, 0), EINVAL);
	BAD(kvs_hpool_xfer_layer_wait(NULL, 0), EINVAL);
	ck_assert_int_eq(kvs_hpool_xfer_free(NULL), 0);
	ck_assert_int_eq(kvs_hpool_backup(e.hp, d, h, 4, &x), 0);
	ck_assert_int_eq(kvs_hpool_xfer_wait(x), 0);
	live = 1;
	BAD(kvs_hpool_xfer_layer_query(x, LAYERS), EINVAL);
	BAD(kvs_hpool_xfer_layer_wait(x, LAYERS), EINVAL);
	BAD(kvs_hpool_destroy(e.hp), EBUSY);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	live = 0;
	/* A transfer of nothing is complete at once. */
	ck_assert_int_eq(kvs_hpool_load(e.hp, NULL, NULL, 0, &x), 0);
	ck_assert_int_eq(kvs_hpool_xfer_query(x), 1);
	ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, LAYERS - 1), 0);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	/* Statistics. */
	BAD(kvs_hpool_stat_get(e.hp, "nonesuch", &v), ENOENT);
	BAD(kvs_hpool_stat_get(NULL, "pages", &v), EINVAL);
	BAD(kvs_hpool_stat_get(e.hp, "pages", NULL), EINVAL);
	BAD(kvs_hpool_stats_print(e.hp, NULL, NULL), EINVAL);
	ck_assert_ptr_null(kvs_hpool_stat_name(KVS_HPOOL_STAT__COUNT));
	ck_assert_uint_eq(kvs_hpool_stat(NULL, KVS_HPOOL_STAT_pages), 0);
	ck_assert_uint_eq(kvs_hpool_capacity(NULL), 0);
	ck_assert_uint_eq(kvs_hpool_available(NULL), 0);
	ck_assert_ptr_null(kvs_hpool_pool(NULL));
	ck_assert_int_eq(kvs_hpool_destroy(NULL), 0);

	ck_assert_int_eq(kvs_hpool_free(e.hp, 4, h), 0);
	dev_free(&e, 4, d);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ threads */

#define TH_THREADS 3
#define TH_PAGES 3

struct worker {
	struct env *e;
	int32_t dev[TH_PAGES];
	unsigned int tag;
	int iters, bad;
};

/* Each thread backs its own device pages up into fresh host pages, loads
 * them back, checks them and frees the host pages, again and again. */
static void *worker_run(void *arg)
{
	struct worker *w = arg;
	int it, k;

	for (it = 0; it < w->iters; it++) {
		kvs_hpool_xfer_t *x;
		int32_t h[TH_PAGES];

		if (kvs_hpool_alloc(w->e->hp, TH_PAGES, h) < 0) {
			w->bad++;
			continue;
		}
		if (kvs_hpool_backup(w->e->hp, w->dev, h, TH_PAGES, &x) < 0 ||
		    kvs_hpool_xfer_wait(x) < 0)
			w->bad++;
		kvs_hpool_xfer_free(x);
		if (kvs_hpool_load(w->e->hp, w->dev, h, TH_PAGES, &x) < 0)
			w->bad++;
		for (k = 0; k < LAYERS; k++)
			if (kvs_hpool_xfer_layer_wait(x, (uint32_t)k) < 0)
				w->bad++;
		kvs_hpool_xfer_free(x);
		if (kvs_hpool_free(w->e->hp, TH_PAGES, h) < 0)
			w->bad++;
	}
	return NULL;
}

/* Calls on one pool from several threads: no page lost, none twice, every
 * round trip intact (checked at the end: each thread's pages are its own). */
START_TEST(test_threads)
{
	struct worker w[TH_THREADS];
	pthread_t t[TH_THREADS];
	struct env e;
	int i, k;

	env_open(&e, _i, 16, KVS_HPOOL_LAYER_FIRST, 0, LAYERS, TH_THREADS * TH_PAGES);
	for (i = 0; i < TH_THREADS; i++) {
		w[i].e = &e;
		w[i].tag = 40u + (unsigned)i * 10u;
		w[i].iters = (int)tu_scaled(200, 10);
		w[i].bad = 0;
		dev_alloc(&e, TH_PAGES, w[i].dev);
		for (k = 0; k < TH_PAGES; k++)
			dev_fill(&e, w[i].dev[k], w[i].tag + (unsigned)k);
	}
	for (i = 0; i < TH_THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
	for (i = 0; i < TH_THREADS; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_int_eq(w[i].bad, 0);
		for (k = 0; k < TH_PAGES; k++)
			ck_assert(dev_check(&e, w[i].dev[k], w[i].tag + (unsigned)k));
		dev_free(&e, TH_PAGES, w[i].dev);
	}
	ck_assert_uint_eq(hstat(&e, KVS_HPOOL_STAT_backups), (uint64_t)TH_THREADS * w[0].iters);
	/* How many threads overlapped is the scheduler's business. */
	ck_assert_uint_ge(hstat(&e, KVS_HPOOL_STAT_pages_used_peak), TH_PAGES);
	ck_assert_uint_le(hstat(&e, KVS_HPOOL_STAT_pages_used_peak), TH_THREADS * TH_PAGES);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ statistics */

static void count_lines(void *arg, const char *line)
{
	(*(int *)arg)++;
	ck_assert_ptr_nonnull(strchr(line, '\n'));
}

START_TEST(test_stats)
{
	struct env e;
	uint64_t v;
	int lines = 0, i;

	env_open(&e, _i, 16, KVS_HPOOL_PAGE_FIRST, 0, LAYERS, 8);
	for (i = 0; i < KVS_HPOOL_STAT__COUNT; i++) {
		const char *name = kvs_hpool_stat_name((enum kvs_hpool_stat)i);

		ck_assert_ptr_nonnull(name);
		ck_assert_int_eq(kvs_hpool_stat_get(e.hp, name, &v), 0);
		ck_assert_uint_eq(v, kvs_hpool_stat(e.hp, (enum kvs_hpool_stat)i));
	}
	ck_assert_int_eq(kvs_hpool_stat_get(e.hp, "pages", &v), 0);
	ck_assert_uint_eq(v, 8);
	ck_assert_int_eq(kvs_hpool_stats_print(e.hp, count_lines, &lines), 0);
	ck_assert_int_eq(lines, KVS_HPOOL_STAT__COUNT + 1);
	env_close(&e);
}
END_TEST

static Suite *hostpool_suite(void)
{
	Suite *s = suite_create("hostpool");
	TCase *tc = tcase_create("hostpool");
	int nb = tu_nbackends();

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_sizing, 0, nb);
	tcase_add_loop_test(tc, test_alloc_free, 0, nb);
	tcase_add_loop_test(tc, test_round_trip, 0, nb);
	tcase_add_loop_test(tc, test_round_trip_mla, 0, nb);
	tcase_add_loop_test(tc, test_merge_counts, 0, nb);
	tcase_add_loop_test(tc, test_layer_prefix, 0, nb);
	tcase_add_loop_test(tc, test_layer_wait_held, 0, nb);
	tcase_add_loop_test(tc, test_completion_error, 0, nb);
	tcase_add_loop_test(tc, test_fault_every_copy, 0, nb);
	tcase_add_loop_test(tc, test_bad_input, 0, nb);
	tcase_add_loop_test(tc, test_threads, 0, nb);
	tcase_add_loop_test(tc, test_stats, 0, nb);
	tcase_add_loop_test(tc, test_streams, 0, nb);
	tcase_add_loop_test(tc, test_backup_after_kernel, 0, nb);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(hostpool_suite());
}
