/* SPDX-License-Identifier: MIT */
/*
 * tests/cache/test_hiradix_l3.c - the hierarchical radix cache over a store
 * (L3), on every backend, with the file store: host copies backed up to the
 * store; a second instance sharing the directory prefetches them, bit for
 * bit; a store that has only a prefix; the threshold; revocation; best
 * effort; a store that corrupts what it reads; another namespace; the
 * ranks' agreement on what a prefetch read.
 */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define GRAN (64 * 1024)
#define LAYERS 2
#define HEADS 2
#define HDIM 8
#define TB (HEADS * HDIM * 2)
#define PS 4
#define MAXT 64

static char dir[256];

struct inst {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	kvs_hiradix_t *h;
	kvs_store_t *st, *fault;
};

static kvs_hiradix_agree_cb i_agree;

static void inst_open(struct inst *e, int be, const char *model, uint32_t policy, int fault)
{
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;
	kvs_hiradix_attr_t a;
	kvs_store_attr_t sa;
	kvs_hiradix_l3_attr_t la;
	char uri[300];

	memset(e, 0, sizeof(*e));
	e->d = tu_open_gran(be, GRAN, 0, 0);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = LAYERS;
	pa.model.tp_size = 1;
	pa.model.dtype_size = 2;
	pa.model.context_len = 4096;
	pa.model.kv_heads = HEADS;
	pa.model.head_dim = HDIM;
	pa.page_size = PS;
	pa.max_tokens = 64 * PS;
	pa.magazine = 0;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	kvs_hpool_attr_init(&ha);
	ha.layout = KVS_HPOOL_PAGE_FIRST;
	ha.ratio = 0;
	ha.bytes = (size_t)64 * PS * TB * 2 * LAYERS;
	e->hp = kvs_hpool_create(e->pool, &ha);
	ck_assert_ptr_nonnull(e->hp);
	kvs_hiradix_attr_init(&a);
	a.load_back_threshold = 0; /* the tests load back single pages */
	a.agree = i_agree;
	e->h = kvs_hiradix_create(e->pool, e->hp, &a);
	ck_assert_ptr_nonnull(e->h);
	kvs_store_attr_init(&sa);
	sa.model = model;
	sa.page_bytes = (size_t)PS * TB * 2 * LAYERS;
	snprintf(uri, sizeof(uri), "file://%s", dir);
	e->st = kvs_store_open(uri, &sa);
	ck_assert_ptr_nonnull(e->st);
	if (fault) {
		e->fault = kvs_store_fault_open(e->st);
		ck_assert_ptr_nonnull(e->fault);
	}
	kvs_hiradix_l3_attr_init(&la);
	la.prefetch_policy = policy;
	la.prefetch_threshold = 2 * PS;
	la.chunk_pages = 2;
	ck_assert_int_eq(kvs_hiradix_set_store(e->h, e->fault ? e->fault : e->st, &la), 0);
}

static void inst_close(struct inst *e)
{
	ck_assert_int_eq(kvs_hiradix_validate(e->h), 0);
	ck_assert_int_eq(kvs_hiradix_destroy(e->h), 0);
	ck_assert_uint_eq(kvs_hpool_available(e->hp), kvs_hpool_capacity(e->hp));
	ck_assert_int_eq(kvs_hpool_destroy(e->hp), 0);
	ck_assert_uint_eq(kvs_pool_available(e->pool), kvs_pool_capacity(e->pool));
	ck_assert_int_eq(kvs_pool_destroy(e->pool), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
	kvs_store_close(e->fault);
	kvs_store_close(e->st);
}

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

/* A request: its KV written, inserted, backed up to host and store. */
static void request(struct inst *e, const int32_t *key, size_t n)
{
	unsigned char k[TB], v[TB];
	int32_t locs[MAXT];
	ssize_t dev = kvs_hiradix_match(e->h, key, n, locs, NULL);
	size_t i;
	uint32_t l;

	ck_assert_int_ge(dev, 0);
	ck_assert_int_eq(kvs_pool_alloc(e->pool, n - (size_t)dev, locs + dev), 0);
	for (i = (size_t)dev; i < n; i++)
		for (l = 0; l < LAYERS; l++) {
			tu_fill(k, TB, tok_seed(key, i, l, 0));
			tu_fill(v, TB, tok_seed(key, i, l, 1));
			ck_assert_int_eq(kvs_pool_set_kv(e->pool, l, locs[i], 1, k, v), 0);
		}
	ck_assert_int_eq(kvs_hiradix_insert(e->h, key, n, locs, NULL), dev);
}

static void settle(struct inst *e)
{
	kvs_hiradix_usage_t u;
	double end = tu_seconds() + 120;

	/* A deadline, not a count of polls (see test_hiradix.c's settle_all). */
	do {
		ck_assert_int_eq(kvs_hiradix_poll(e->h), 0);
		ck_assert_int_eq(kvs_hiradix_usage(e->h, &u), 0);
		if (!u.backups_pending && !u.loads_pending)
			break;
		sched_yield();
	} while (tu_seconds() < end);
	ck_assert_int_eq(kvs_hiradix_l3_wait(e->h), 0);
}

/* Prefetch @key and wait for the policy to say it is over. */
static size_t prefetch(struct inst *e, uint64_t id, const int32_t *key, size_t n, ssize_t want)
{
	size_t got = SIZE_MAX;
	long i;
	int r = 0;

	ck_assert_int_eq(kvs_hiradix_prefetch(e->h, id, key, n), want);
	if (want == 0)
		return 0;
	for (i = 0; i < 2000000 && r == 0; i++) {
		r = kvs_hiradix_prefetch_done(e->h, id, &got);
		ck_assert_int_ge(r, 0);
		if (r == 0)
			usleep(50);
	}
	ck_assert_int_eq(r, 1);
	ck_assert_int_eq(kvs_hiradix_validate(e->h), 0);
	return got;
}

/* Load back what is on the host for @key; check every byte of @n. */
static void load_check(struct inst *e, const int32_t *key, size_t n)
{
	unsigned char k[TB], v[TB];
	int32_t locs[MAXT];
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x;
	ssize_t dev = kvs_hiradix_match(e->h, key, n, locs, &m);
	size_t i;
	uint32_t l;

	ck_assert_int_ge(dev, 0);
	ck_assert_uint_eq((size_t)dev + m.host_hit, n);
	if (m.host_hit) {
		ck_assert_int_eq(kvs_hiradix_load_back(e->h, m.last_node, 0, locs + dev, &x),
				 (ssize_t)m.host_hit);
		ck_assert_int_eq(kvs_hpool_xfer_wait(x), 0);
	}
	settle(e);
	for (i = 0; i < n; i++)
		for (l = 0; l < LAYERS; l++) {
			ck_assert_int_eq(kvs_pool_get_kv(e->pool, l, locs[i], 1, k, v), 0);
			ck_assert(tu_check(k, TB, tok_seed(key, i, l, 0)));
			ck_assert(tu_check(v, TB, tok_seed(key, i, l, 1)));
		}
}

static void keyseq(int32_t *k, size_t n, int32_t base)
{
	size_t i;

	for (i = 0; i < n; i++)
		k[i] = base + (int32_t)i;
}

static void mkdir_tmp(void)
{
	snprintf(dir, sizeof(dir), "%s/kvslab-l3-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void rm_tmp(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* Two instances share a store: the second finds the first's pages. */
START_TEST(test_share)
{
	int32_t a[32], b[32];
	kvs_page_key_t keys[8];
	struct inst e, f, g;
	uint64_t avail;

	mkdir_tmp();
	inst_open(&e, _i, "m1", KVS_PREFETCH_WAIT_COMPLETE, 0);
	keyseq(a, 32, 1000);
	request(&e, a, 32);
	settle(&e);
	ck_assert_int_eq(kvs_page_hashes(NULL, a, 32, PS, keys), 8);
	ck_assert_int_eq(kvs_store_exists(e.st, keys, 8), 8);
	ck_assert_uint_ge(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_l3_backup_pages), 8);
	inst_close(&e);

	/* Another instance: nothing on its device or host; all from L3. */
	inst_open(&f, _i, "m1", KVS_PREFETCH_WAIT_COMPLETE, 0);
	ck_assert_uint_eq(prefetch(&f, 7, a, 32, 32), 32);
	ck_assert_uint_eq(kvs_hiradix_stat(f.h, KVS_HIRADIX_STAT_prefetch_tokens), 32);
	load_check(&f, a, 32);
	/* A key sharing 16 tokens: only they come from the store (a node
	 * split on the way); below the threshold nothing is asked. */
	memcpy(b, a, 16 * sizeof(int32_t));
	keyseq(b + 16, 16, 50000);
	ck_assert_int_eq(kvs_hiradix_evict_device(f.h, 100), 32);
	ck_assert_int_eq(kvs_hiradix_evict_host(f.h, 100), 32);
	ck_assert_uint_eq(prefetch(&f, 8, b, 32, 32), 16);
	load_check(&f, b, 16);
	ck_assert_int_eq(kvs_hiradix_prefetch(f.h, 9, b, 16 + PS), 0); /* 4 tokens past the host */
	ck_assert_uint_eq(kvs_hiradix_stat(f.h, KVS_HIRADIX_STAT_prefetch_skipped), 1);
	/* Revoked at once: nothing taken, every host page back. */
	ck_assert_int_eq(kvs_hiradix_evict_device(f.h, 100), 16);
	ck_assert_int_eq(kvs_hiradix_evict_host(f.h, 100), 16);
	avail = kvs_hpool_available(f.hp);
	ck_assert_int_eq(kvs_hiradix_prefetch(f.h, 10, a, 32), 32);
	ck_assert_int_eq(kvs_hiradix_prefetch(f.h, 10, a, 32), -1);
	ck_assert_int_eq(errno, EEXIST);
	ck_assert_int_eq(kvs_hiradix_prefetch_revoke(f.h, 10), 0);
	ck_assert_int_eq(kvs_hiradix_prefetch_done(f.h, 10, NULL), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(kvs_hiradix_l3_wait(f.h), 0);
	ck_assert_uint_eq(kvs_hpool_available(f.hp), avail);
	ck_assert_uint_eq(kvs_hiradix_usage(f.h, &(kvs_hiradix_usage_t){0}), 0);
	inst_close(&f);

	/* Another model's instance sees nothing of it. */
	inst_open(&g, _i, "m2", KVS_PREFETCH_WAIT_COMPLETE, 0);
	ck_assert_uint_eq(prefetch(&g, 1, a, 32, 32), 0);
	inst_close(&g);
	rm_tmp();
}
END_TEST

/* Best effort takes what was read; a corrupting store never yields wrong
 * bytes. */
START_TEST(test_best_effort_faults)
{
	int32_t a[32];
	struct inst e, f;
	size_t got;
	int rounds;

	mkdir_tmp();
	inst_open(&e, _i, "m", KVS_PREFETCH_WAIT_COMPLETE, 0);
	keyseq(a, 32, 77);
	request(&e, a, 32);
	settle(&e);
	inst_close(&e);
	for (rounds = 0; rounds < 4; rounds++) {
		inst_open(&f, _i, "m", KVS_PREFETCH_BEST_EFFORT, 0);
		ck_assert_int_eq(kvs_hiradix_prefetch(f.h, 1, a, 32), 32);
		if (rounds & 1)
			ck_assert_int_eq(kvs_hiradix_l3_wait(f.h), 0);
		ck_assert_int_eq(kvs_hiradix_prefetch_done(f.h, 1, &got), 1);
		ck_assert_uint_le(got, 32);
		ck_assert_uint_eq(got % PS, 0);
		if (rounds & 1)
			ck_assert_uint_eq(got, 32);
		if (got)
			load_check(&f, a, got);
		inst_close(&f);
	}
	/* Reads that come back corrupted: the pages before the bad one only. */
	inst_open(&f, _i, "m", KVS_PREFETCH_WAIT_COMPLETE, 1);
	ck_assert_int_eq(kvs_store_fault_fail_nth(f.fault, KVS_SOP_GET, 2, KVS_SFAULT_CORRUPT), 0);
	got = prefetch(&f, 3, a, 32, 32);
	ck_assert_uint_eq(got, 2 * PS); /* chunks of 2 pages: the second's first was bad */
	ck_assert_uint_ge(kvs_store_stat(f.fault, KVS_STORE_STAT_checksum_fail), 1);
	load_check(&f, a, got);
	inst_close(&f);
	rm_tmp();
}
END_TEST

static uint64_t cap;

static uint64_t agree_cb(void *arg, int what, uint64_t value)
{
	(void)arg;
	if (what != KVS_AGREE_PREFETCH)
		return value;
	return value < cap ? value : cap;
}

/* The ranks agree on fewer tokens than this one read. */
START_TEST(test_agree)
{
	int32_t a[32];
	struct inst e, f;

	mkdir_tmp();
	inst_open(&e, _i, "m", KVS_PREFETCH_WAIT_COMPLETE, 0);
	keyseq(a, 32, 9);
	request(&e, a, 32);
	settle(&e);
	inst_close(&e);
	cap = 13; /* rounded down to pages: 12 */
	i_agree = agree_cb;
	inst_open(&f, _i, "m", KVS_PREFETCH_WAIT_COMPLETE, 0);
	i_agree = NULL;
	ck_assert_uint_eq(prefetch(&f, 1, a, 32, 32), 12);
	load_check(&f, a, 12);
	inst_close(&f);
	rm_tmp();
}
END_TEST

START_TEST(test_bad_input)
{
	kvs_hiradix_l3_attr_t la;
	int32_t a[8] = {0};
	struct inst e;

	mkdir_tmp();
	inst_open(&e, _i, "m", KVS_PREFETCH_WAIT_COMPLETE, 0);
	ck_assert_int_eq(kvs_hiradix_l3_attr_init(NULL), -1);
	kvs_hiradix_l3_attr_init(&la);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_set_store(e.h, e.st, &la), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(kvs_hiradix_set_store(NULL, e.st, &la), -1);
	ck_assert_int_eq(kvs_hiradix_set_store(e.h, NULL, &la), -1);
	la.prefetch_policy = 3;
	ck_assert_int_eq(kvs_hiradix_set_store(e.h, e.st, &la), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hiradix_prefetch(NULL, 1, a, 8), -1);
	ck_assert_int_eq(kvs_hiradix_prefetch(e.h, 1, NULL, 8), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hiradix_prefetch_done(NULL, 1, NULL), -1);
	ck_assert_int_eq(kvs_hiradix_prefetch_revoke(NULL, 1), -1);
	ck_assert_int_eq(kvs_hiradix_prefetch_revoke(e.h, 1), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(kvs_hiradix_l3_wait(NULL), -1);
	inst_close(&e);
	rm_tmp();
}
END_TEST

static Suite *l3_suite(void)
{
	Suite *s = suite_create("hiradix_l3");
	TCase *tc = tcase_create("l3");
	int nb = tu_nbackends();

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_share, 0, nb);
	tcase_add_loop_test(tc, test_best_effort_faults, 0, nb);
	tcase_add_loop_test(tc, test_agree, 0, nb);
	tcase_add_loop_test(tc, test_bad_input, 0, nb);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(l3_suite());
}
