/* SPDX-License-Identifier: MIT */
/*
 * tests/cache/test_hiradix.c - the hierarchical radix cache, on every
 * backend: the seed's state transitions (eviction with and without a host
 * copy, a tombstone re-materialised by insert, host eviction, load back bit
 * for bit), victims in LRU order at both levels, the selective threshold, write back at eviction, a seeded
 * random run checking the invariants (kvs_hiradix_validate()) and the bytes
 * after every step, copies failing under the fault driver, bad input, a
 * parent with hundreds of children (the child table).
 */
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define GRAN (64 * 1024)
#define LAYERS 2
#define HEADS 2
#define HDIM 8
#define TB (HEADS * HDIM * 2) /* bytes of one token in one buffer */
#define MAXT 256

/* A fault driver to arm (fail its next copy) just before request()'s
 * insert, after the KV writes; and whether KV writes may fail. */
static kvs_drv_t *arm_fault;
static int lax_writes;
/* Whether request() holds the double's copies before its insert. */
static int hold_at_insert;

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	kvs_hiradix_t *h;
	uint32_t ps;
};

/* Controller attributes env_open_drv() applies (the tests that set them
 * clear them before closing). */
static uint32_t x_flags, x_poll_us;
static kvs_hiradix_agree_cb x_agree;
static kvs_kv_event_cb x_event;

static void env_open_drv(struct env *e, kvs_drv_t *d, uint32_t ps, uint32_t policy,
			 uint32_t threshold, uint64_t dev_pages, uint64_t host_pages)
{
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;
	kvs_hiradix_attr_t a;

	memset(e, 0, sizeof(*e));
	e->d = d;
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = LAYERS;
	pa.model.tp_size = 1;
	pa.model.dtype_size = 2;
	pa.model.context_len = 4096;
	pa.model.kv_heads = HEADS;
	pa.model.head_dim = HDIM;
	pa.page_size = ps;
	pa.max_tokens = dev_pages * ps;
	pa.magazine = 0;
	e->pool = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	e->ps = ps;
	kvs_hpool_attr_init(&ha);
	ha.ratio = 0;
	ha.bytes = host_pages * ps * TB * 2 * LAYERS;
	e->hp = kvs_hpool_create(e->pool, &ha);
	ck_assert_ptr_nonnull(e->hp);
	ck_assert_int_eq(kvs_hiradix_attr_init(&a), 0);
	a.write_policy = policy;
	a.hit_threshold = threshold;
	a.load_back_threshold = 0; /* the tests load back single pages */
	a.flags = x_flags;
	if (x_poll_us)
		a.poll_us = x_poll_us;
	a.agree = x_agree;
	a.event_cb = x_event;
	e->h = kvs_hiradix_create(e->pool, e->hp, &a);
	ck_assert_ptr_nonnull(e->h);
}

static void env_open(struct env *e, int i, uint32_t ps, uint32_t policy, uint32_t threshold)
{
	env_open_drv(e, tu_open_gran(i, GRAN, 0, 0), ps, policy, threshold, 64, 64);
}

static void env_close(struct env *e)
{
	ck_assert_int_eq(kvs_hiradix_validate(e->h), 0);
	ck_assert_int_eq(kvs_hiradix_destroy(e->h), 0);
	ck_assert_uint_eq(kvs_hpool_available(e->hp), kvs_hpool_capacity(e->hp));
	ck_assert_uint_eq(kvs_hpool_stat(e->hp, KVS_HPOOL_STAT_xfers_live), 0);
	ck_assert_int_eq(kvs_hpool_destroy(e->hp), 0);
	ck_assert_uint_eq(kvs_pool_available(e->pool), kvs_pool_capacity(e->pool));
	ck_assert_int_eq(kvs_pool_destroy(e->pool), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
}

static void valid(struct env *e)
{
	ck_assert_int_eq(kvs_hiradix_validate(e->h), 0);
}

/* The bytes of token @i of @key: a function of the prefix key[0 .. i], so
 * that equal prefixes hold equal KV. */
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

static void kv_write(struct env *e, const int32_t *key, const int32_t *locs, size_t from,
		     size_t n)
{
	unsigned char k[TB], v[TB];
	size_t i;
	uint32_t l;

	for (i = from; i < n; i++)
		for (l = 0; l < LAYERS; l++) {
			tu_fill(k, TB, tok_seed(key, i, l, 0));
			tu_fill(v, TB, tok_seed(key, i, l, 1));
			if (kvs_pool_set_kv(e->pool, l, locs[i], 1, k, v) < 0)
				ck_assert(lax_writes);
		}
}

static int kv_check(struct env *e, const int32_t *key, const int32_t *locs, size_t n)
{
	unsigned char k[TB], v[TB];
	size_t i;
	uint32_t l;

	for (i = 0; i < n; i++)
		for (l = 0; l < LAYERS; l++) {
			ck_assert_int_eq(kvs_pool_get_kv(e->pool, l, locs[i], 1, k, v), 0);
			if (!tu_check(k, TB, tok_seed(key, i, l, 0)) ||
			    !tu_check(v, TB, tok_seed(key, i, l, 1)))
				return 0;
		}
	return 1;
}

/* Take in completions until nothing is in flight. */
static void settle_all(struct env *e)
{
	tu_hiradix_settle(e->h);
}

/*
 * What a request does: match, allocate device pages for the rest, write
 * its KV, insert.  Returns the tokens inserted (0: the pool is full).
 */
static size_t request(struct env *e, const int32_t *key, size_t n, kvs_hiradix_node_t **last)
{
	int32_t locs[MAXT];
	ssize_t dev, ret;

	n -= n % e->ps;
	dev = kvs_hiradix_match(e->h, key, n, locs, NULL);
	ck_assert_int_ge(dev, 0);
	if ((size_t)dev < n && kvs_pool_alloc(e->pool, n - (size_t)dev, locs + dev) < 0) {
		ck_assert_int_eq(errno, ENOMEM);
		kvs_hiradix_evict_device(e->h, n - (size_t)dev);
		if (kvs_pool_alloc(e->pool, n - (size_t)dev, locs + dev) < 0)
			return 0;
		/* Eviction may have shortened the device prefix. */
		{
			int32_t l2[MAXT];
			ssize_t d2 = kvs_hiradix_match(e->h, key, n, l2, NULL);

			ck_assert_int_le(d2, dev);
			if (d2 < dev) {
				kvs_pool_free(e->pool, n - (size_t)dev, locs + dev);
				return 0;
			}
		}
	}
	kv_write(e, key, locs, (size_t)dev, n);
	if (arm_fault) {
		ck_assert_int_eq(kvs_fault_fail_nth(arm_fault, KVS_OP_COPY, 1, EIO), 0);
		arm_fault = NULL;
	}
	if (hold_at_insert) {
		ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
		hold_at_insert = 0;
	}
	ret = kvs_hiradix_insert(e->h, key, n, locs, last);
	ck_assert_int_eq(ret, dev);
	return n;
}

static kvs_hiradix_node_info_t info(struct env *e, kvs_hiradix_node_t *x)
{
	kvs_hiradix_node_info_t i;

	ck_assert_int_eq(kvs_hiradix_node_info(e->h, x, &i), 0);
	return i;
}

static kvs_hiradix_usage_t usage(struct env *e)
{
	kvs_hiradix_usage_t u;

	ck_assert_int_eq(kvs_hiradix_usage(e->h, &u), 0);
	return u;
}

/* Load back what a match of @key finds on the host only; check the bytes. */
static void load_and_check(struct env *e, const int32_t *key, size_t n, size_t want)
{
	int32_t locs[MAXT], nl[MAXT];
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x;
	ssize_t dev, got;
	uint32_t l;

	dev = kvs_hiradix_match(e->h, key, n, locs, &m);
	ck_assert_int_ge(dev, 0);
	ck_assert_uint_eq(m.host_hit, want);
	got = kvs_hiradix_load_back(e->h, m.last_node, 0, nl, &x);
	ck_assert_int_eq(got, (ssize_t)want);
	if (!want) {
		ck_assert_ptr_null(x);
		return;
	}
	ck_assert_ptr_nonnull(x);
	ck_assert(info(e, m.last_node).loading);
	ck_assert_uint_gt(info(e, m.last_node).lock_ref, 0);
	for (l = 0; l < LAYERS; l++)
		ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, l), 0);
	valid(e);
	settle_all(e);
	ck_assert(!info(e, m.last_node).loading);
	ck_assert_uint_eq(info(e, m.last_node).lock_ref, 0);
	ck_assert_int_eq(kvs_hiradix_match(e->h, key, n, locs, &m), dev + (ssize_t)want);
	ck_assert_uint_eq(m.host_hit, 0);
	ck_assert(kv_check(e, key, locs, (size_t)dev + want));
	ck_assert_int_eq(memcmp(locs + dev, nl, want * sizeof(int32_t)), 0);
}

static void keyseq(int32_t *k, size_t n, int32_t base)
{
	size_t i;

	for (i = 0; i < n; i++)
		k[i] = base + (int32_t)i;
}

/* ------------------------------------------------------------ transitions */

START_TEST(test_transitions)
{
	int32_t ab[16], locs[16];
	kvs_hiradix_node_t *a, *b;
	kvs_hiradix_match_t m;
	kvs_hiradix_usage_t u;
	struct env e;

	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	keyseq(ab, 16, 100);
	/* A, then A + B: write through backs up both. */
	ck_assert_uint_eq(request(&e, ab, 8, &a), 8);
	valid(&e);
	ck_assert_uint_eq(request(&e, ab, 16, &b), 16);
	valid(&e);
	settle_all(&e);
	valid(&e);
	ck_assert(info(&e, a).on_host && info(&e, b).on_host);
	ck_assert(info(&e, a).on_device && info(&e, b).on_device);
	/* L1 eviction of a backed-up leaf: B becomes a tombstone. */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	valid(&e);
	ck_assert(!info(&e, b).on_device && info(&e, b).on_host);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, locs, &m), 8);
	ck_assert_uint_eq(m.host_hit, 8);
	ck_assert_ptr_eq(m.last_device, a);
	ck_assert_ptr_eq(m.last_node, b);
	ck_assert_ptr_eq(m.last_host, b);
	/* Other pages take B's old device pages' place, then load back. */
	{
		int32_t junk[32];

		ck_assert_int_eq(kvs_pool_alloc(e.pool, 32, junk), 0);
		kv_write(&e, ab, junk, 0, 16); /* wrong bytes everywhere */
		load_and_check(&e, ab, 16, 8);
		ck_assert_int_eq(kvs_pool_free(e.pool, 32, junk), 0);
	}
	valid(&e);
	/* Both to tombstones: the deepest first, then its parent. */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	valid(&e);
	u = usage(&e);
	ck_assert_uint_eq(u.device_tokens, 0);
	ck_assert_uint_eq(u.tombstone_tokens, 16);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, locs, &m), 0);
	ck_assert_uint_eq(m.host_hit, 16);
	ck_assert_ptr_eq(m.last_device, kvs_hiradix_root(e.h));
	/* Insert re-materialises the tombstones with new device pages. */
	ck_assert_uint_eq(request(&e, ab, 16, NULL), 16);
	valid(&e);
	u = usage(&e);
	ck_assert_uint_eq(u.nodes, 2);
	ck_assert_uint_eq(u.device_tokens, 16);
	ck_assert_uint_eq(u.tombstone_tokens, 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, locs, NULL), 16);
	ck_assert(kv_check(&e, ab, locs, 16));
	/* L2 eviction deletes tombstones, deepest first. */
	ck_assert_int_eq(kvs_hiradix_evict_host(e.h, 16), 0); /* none yet */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	ck_assert_int_eq(kvs_hiradix_evict_host(e.h, 4), 8);
	valid(&e);
	ck_assert_uint_eq(usage(&e).nodes, 1);
	ck_assert_int_eq(kvs_hiradix_evict_host(e.h, 100), 8);
	ck_assert_uint_eq(usage(&e).nodes, 0);
	ck_assert_uint_eq(kvs_hpool_available(e.hp), kvs_hpool_capacity(e.hp));
	env_close(&e);
}
END_TEST

/* Without a host copy an evicted node is deleted; a lock protects. */
START_TEST(test_evict_no_backup)
{
	int32_t ab[16];
	kvs_hiradix_node_t *a, *b;
	struct env e;

	env_open(&e, _i, 4, KVS_WRITE_THROUGH_SELECTIVE, 100);
	keyseq(ab, 16, 7);
	ck_assert_uint_eq(request(&e, ab, 8, &a), 8);
	ck_assert_uint_eq(request(&e, ab, 16, &b), 16);
	settle_all(&e);
	ck_assert(!info(&e, a).on_host && !info(&e, b).on_host);
	ck_assert_int_eq(kvs_hiradix_lock(e.h, b), 0);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 0);
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, b), 0);
	valid(&e);
	/* match_lock and insert_lock hold what they return. */
	{
		kvs_hiradix_match_t m;
		kvs_hiradix_node_t *l;
		int32_t locs[16];

		ck_assert_int_eq(kvs_hiradix_match_lock(e.h, ab, 16, locs, &m), 16);
		ck_assert_ptr_eq(m.last_node, b);
		ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 0);
		ck_assert_int_eq(kvs_hiradix_insert_lock(e.h, ab, 16, locs, &l), 16);
		ck_assert_ptr_eq(l, b);
		ck_assert_uint_eq(info(&e, b).lock_ref, 2);
		ck_assert_int_eq(kvs_hiradix_unlock(e.h, m.last_node), 0);
		ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 0);
		ck_assert_int_eq(kvs_hiradix_unlock(e.h, l), 0);
		valid(&e);
	}
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	valid(&e);
	ck_assert_uint_eq(usage(&e).nodes, 1);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	ck_assert_uint_eq(usage(&e).nodes, 0);
	ck_assert_uint_eq(kvs_pool_available(e.pool), kvs_pool_capacity(e.pool));
	env_close(&e);
}
END_TEST

/*
 * Victims in least recently used order at both levels, whatever the order
 * of insertion: four sibling leaves, touched by matches in a known order,
 * evicted one node at a time.
 */
START_TEST(test_lru_order)
{
	static const int dorder[4] = {2, 0, 3, 1}, horder[4] = {1, 3, 0, 2};
	int32_t k[4][8], locs[8];
	kvs_hiradix_node_t *n[4];
	kvs_hiradix_match_t m;
	struct env e;
	int i, j;

	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	for (i = 0; i < 4; i++) {
		keyseq(k[i], 8, 100 * (i + 1));
		ck_assert_uint_eq(request(&e, k[i], 8, &n[i]), 8);
	}
	settle_all(&e);
	for (i = 0; i < 4; i++)
		ck_assert(info(&e, n[i]).on_host);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(kvs_hiradix_match(e.h, k[dorder[i]], 8, locs, NULL), 8);
	/* Device: each eviction demotes the oldest leaf still on the device. */
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
		valid(&e);
		for (j = 0; j < 4; j++)
			ck_assert_int_eq(info(&e, n[dorder[j]]).on_device, j > i);
	}
	/* Host: matches touch the tombstones anew; each eviction deletes the
	 * oldest (only the victim is matched after, so no other is touched). */
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(kvs_hiradix_match(e.h, k[horder[i]], 8, locs, NULL), 0);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(kvs_hiradix_evict_host(e.h, 8), 8);
		valid(&e);
		ck_assert_uint_eq(usage(&e).nodes, 3 - (unsigned)i);
		ck_assert_int_eq(kvs_hiradix_match(e.h, k[horder[i]], 8, locs, &m), 0);
		ck_assert_uint_eq(m.host_hit, 0);
	}
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ policies */

START_TEST(test_selective)
{
	int32_t k[12];
	kvs_hiradix_node_t *a;
	struct env e;
	uint32_t t;

	for (t = 2; t <= 3; t++) {
		uint32_t hit;

		env_open(&e, _i, 4, KVS_WRITE_THROUGH_SELECTIVE, t);
		keyseq(k, 12, 1);
		for (hit = 1; hit < t; hit++) {
			ck_assert_uint_eq(request(&e, k, 12, &a), 12);
			settle_all(&e);
			ck_assert_uint_eq(info(&e, a).hit_count, hit);
			ck_assert(!info(&e, a).on_host);
			ck_assert_uint_eq(usage(&e).host_tokens, 0);
		}
		ck_assert_uint_eq(request(&e, k, 12, &a), 12);
		valid(&e);
		settle_all(&e);
		ck_assert(info(&e, a).on_host);
		valid(&e);
		env_close(&e);
	}
}
END_TEST

START_TEST(test_write_back)
{
	int32_t ab[16];
	kvs_hiradix_node_t *a, *b;
	struct env e;

	env_open(&e, _i, 4, KVS_WRITE_BACK, 0);
	keyseq(ab, 16, 55);
	ck_assert_uint_eq(request(&e, ab, 8, &a), 8);
	ck_assert_uint_eq(request(&e, ab, 16, &b), 16);
	ck_assert_uint_eq(request(&e, ab, 16, &b), 16);
	settle_all(&e);
	/* No copy and no hit counted before eviction. */
	ck_assert(!info(&e, a).on_host && !info(&e, b).on_host);
	ck_assert_uint_eq(info(&e, b).hit_count, 0);
	ck_assert_uint_eq(usage(&e).host_tokens, 0);
	/* Eviction writes B back (and A, its parent, first). */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	valid(&e);
	ck_assert(!info(&e, b).on_device && info(&e, b).on_host);
	ck_assert(info(&e, a).on_device && info(&e, a).on_host);
	load_and_check(&e, ab, 16, 8);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	valid(&e);
	load_and_check(&e, ab, 16, 16);
	valid(&e);
	env_close(&e);
}
END_TEST

/* Load back's quota and threshold; a full device pool is made room in. */
START_TEST(test_load_back_limits)
{
	int32_t ab[16], nl[16];
	kvs_hiradix_attr_t a;
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x;
	struct env e;

	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	keyseq(ab, 16, 3);
	ck_assert_uint_eq(request(&e, ab, 16, NULL), 16);
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, &m), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 8, nl, &x), 0);
	ck_assert_ptr_null(x);
	ck_assert_uint_eq(usage(&e).device_tokens, 0);
	/* Loading the root or a device node: nothing to do. */
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, kvs_hiradix_root(e.h), 0, nl, &x), 0);
	ck_assert_int_eq(kvs_hiradix_destroy(e.h), 0);
	kvs_hiradix_attr_init(&a);
	a.load_back_threshold = 32;
	e.h = kvs_hiradix_create(e.pool, e.hp, &a);
	ck_assert_ptr_nonnull(e.h);
	ck_assert_uint_eq(request(&e, ab, 16, NULL), 16);
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, &m), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 0, nl, &x), 0);
	ck_assert_ptr_null(x);
	valid(&e);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ random */

/* Keys from a few shared stems, so prefixes meet and nodes split. */
static size_t rand_key(uint64_t *rng, int32_t *k, uint32_t ps)
{
	size_t n = (tu_rng(rng) % 8 + 1) * ps, i;
	int32_t stem = (int32_t)(tu_rng(rng) % 3) * 1000;
	size_t cut = tu_rng(rng) % (n + 1);
	int32_t tail = (int32_t)(tu_rng(rng) % 4) * 100000;

	for (i = 0; i < n; i++)
		k[i] = stem + (int32_t)i + (i >= cut ? tail : 0);
	return n;
}

/* What the random runs did, summed: each transition must have happened. */
static uint64_t r_loads, r_tombs, r_hevict, r_remat, r_batches;

/* The reference: every key ever inserted.  The cache may forget, never
 * invent: what a match finds on either tier is a prefix some inserted key
 * shares. */
#define NREF 512
static int32_t ref_key[NREF][MAXT];
static size_t ref_len[NREF], nref;

static void ref_add(const int32_t *k, size_t n)
{
	ck_assert_uint_lt(nref, NREF);
	memcpy(ref_key[nref], k, n * sizeof(int32_t));
	ref_len[nref++] = n;
}

static size_t ref_lcp(const int32_t *k, size_t n, uint32_t ps)
{
	size_t best = 0, r, i;

	for (r = 0; r < nref; r++) {
		size_t m = n < ref_len[r] ? n : ref_len[r];

		for (i = 0; i < m && ref_key[r][i] == k[i]; i++)
			;
		if (i > best)
			best = i;
	}
	return best - best % ps;
}

static uint64_t st(struct env *e, enum kvs_hiradix_stat i);

static void random_run(int be, uint32_t ps, uint32_t policy, uint64_t seed, uint32_t flags)
{
	uint64_t rng = seed;
	struct env e;
	long step, steps = tu_scaled(400, 150);

	x_flags = flags;
	env_open_drv(&e, tu_open_gran(be, GRAN, 0, 0), ps, policy, 2, 24, 20);
	x_flags = 0;
	nref = 0;
	for (step = 0; step < steps; step++) {
		int32_t k[MAXT], locs[MAXT];
		kvs_hiradix_match_t m;
		kvs_hpool_xfer_t *x;
		size_t n = rand_key(&rng, k, ps);
		ssize_t dev, got;

		switch (tu_rng(&rng) % 9) {
		case 8:
			ck_assert_int_eq(kvs_hiradix_submit(e.h, NULL), 0);
			break;
		case 0:
		case 1:
		case 2: {
			kvs_hiradix_usage_t u0 = usage(&e);

			if (request(&e, k, n, NULL) == n) {
				ref_add(k, n);
				ck_assert_int_eq(kvs_hiradix_match(e.h, k, n, NULL, NULL), (ssize_t)n);
			}
			r_remat += usage(&e).tombstone_tokens < u0.tombstone_tokens;
			break;
		}
		case 3:
			dev = kvs_hiradix_match(e.h, k, n, locs, &m);
			ck_assert_int_ge(dev, 0);
			ck_assert_uint_le((size_t)dev + m.host_hit, ref_lcp(k, n, ps));
			ck_assert(kv_check(&e, k, locs, (size_t)dev));
			got = kvs_hiradix_load_back(e.h, m.last_node, 0, locs + dev, &x);
			if (got < 0) {
				ck_assert_int_eq(errno, ENOMEM);
				break;
			}
			ck_assert_uint_eq((size_t)got, m.host_hit);
			r_loads += got > 0;
			valid(&e);
			if (got > 0 && (flags & KVS_HIRADIX_DEFER)) {
				ck_assert_ptr_null(x);
				ck_assert_int_eq(kvs_hiradix_submit(e.h, &x), 0);
				ck_assert_ptr_nonnull(x);
			}
			if (x)
				ck_assert_int_eq(kvs_hpool_xfer_wait(x), 0);
			ck_assert(kv_check(&e, k, locs, (size_t)dev + (size_t)got));
			if (tu_rng(&rng) & 1)
				settle_all(&e);
			break;
		case 4: {
			uint64_t t0 = usage(&e).tombstone_tokens;

			ck_assert_int_ge(kvs_hiradix_evict_device(e.h, tu_rng(&rng) % 16), 0);
			r_tombs += usage(&e).tombstone_tokens > t0;
			break;
		}
		case 5:
			dev = kvs_hiradix_evict_host(e.h, tu_rng(&rng) % 16);
			ck_assert_int_ge(dev, 0);
			r_hevict += dev > 0;
			break;
		case 6:
			ck_assert_int_eq(kvs_hiradix_poll(e.h), 0);
			break;
		case 7:
			dev = kvs_hiradix_match(e.h, k, n, NULL, &m);
			ck_assert_int_ge(dev, 0);
			ck_assert_int_eq(kvs_hiradix_lock(e.h, m.last_device), 0);
			ck_assert_int_ge(kvs_hiradix_evict_device(e.h, 64), 0);
			valid(&e);
			/* What was locked is still on the device. */
			ck_assert_int_ge(kvs_hiradix_match(e.h, k, n, NULL, NULL), dev);
			ck_assert_int_eq(kvs_hiradix_unlock(e.h, m.last_device), 0);
			break;
		}
		valid(&e);
	}
	settle_all(&e);
	r_batches += st(&e, KVS_HIRADIX_STAT_write_batches) < st(&e, KVS_HIRADIX_STAT_backups);
	env_close(&e);
}

START_TEST(test_random)
{
	uint32_t pol;

	r_loads = r_tombs = r_hevict = r_remat = r_batches = 0;
	for (pol = 0; pol <= KVS_WRITE_BACK; pol++) {
		random_run(_i, 1, pol, 0x9e3779b97f4a7c15ull + pol, 0);
		random_run(_i, 4, pol, 0xdeadbeefcafef00dull + pol, 0);
		random_run(_i, 4, pol, 0x0123456789abcdefull + pol, KVS_HIRADIX_DEFER);
	}
	/* Deferred runs merged several backups into one transfer. */
	ck_assert_uint_gt(r_batches, 0);
	ck_assert_uint_gt(r_loads, 0);
	ck_assert_uint_gt(r_tombs, 0);
	ck_assert_uint_gt(r_hevict, 0);
	ck_assert_uint_gt(r_remat, 0);
}
END_TEST

/* ------------------------------------------------------------ threads */

#define NTHREADS 4

struct targ {
	struct env *e;
	uint64_t seed;
	long steps;
};

/* A request through the _lock variants: the device prefix stays the
 * tree's, and its bytes right, from the match to the unlock. */
static void *thread_fn(void *p)
{
	struct targ *t = p;
	struct env *e = t->e;
	uint64_t rng = t->seed;
	long i;

	for (i = 0; i < t->steps; i++) {
		int32_t k[MAXT], locs[MAXT];
		kvs_hiradix_match_t m;
		kvs_hiradix_node_t *l;
		size_t n = rand_key(&rng, k, e->ps);
		ssize_t dev, ret;

		switch (tu_rng(&rng) % 5) {
		case 0:
		case 1:
			dev = kvs_hiradix_match_lock(e->h, k, n, locs, &m);
			ck_assert_int_ge(dev, 0);
			ck_assert(kv_check(e, k, locs, (size_t)dev));
			if ((size_t)dev == n ||
			    (kvs_pool_alloc(e->pool, n - (size_t)dev, locs + dev) < 0 &&
			     (kvs_hiradix_evict_device(e->h, n - (size_t)dev) < 0 ||
			      kvs_pool_alloc(e->pool, n - (size_t)dev, locs + dev) < 0))) {
				ck_assert_int_eq(kvs_hiradix_unlock(e->h, m.last_node), 0);
				break;
			}
			kv_write(e, k, locs, (size_t)dev, n);
			ret = kvs_hiradix_insert_lock(e->h, k, n, locs, &l);
			ck_assert_int_ge(ret, dev);
			/* Another thread may have cached more meanwhile. */
			if (ret > dev)
				ck_assert_int_eq(kvs_pool_free(e->pool, (size_t)(ret - dev), locs + dev), 0);
			ck_assert_int_eq(kvs_hiradix_unlock(e->h, m.last_node), 0);
			ck_assert_int_eq(kvs_hiradix_unlock(e->h, l), 0);
			break;
		case 2: {
			kvs_hpool_xfer_t *x;

			ck_assert_int_ge(kvs_hiradix_match_lock(e->h, k, n, NULL, &m), 0);
			ret = kvs_hiradix_load_back(e->h, m.last_node, 0, NULL, &x);
			ck_assert(ret >= 0 || errno == ENOMEM);
			ck_assert_int_eq(kvs_hiradix_unlock(e->h, m.last_node), 0);
			/* A match waits for the load: the bytes are there. */
			dev = kvs_hiradix_match_lock(e->h, k, n, locs, &m);
			ck_assert_int_ge(dev, 0);
			ck_assert(kv_check(e, k, locs, (size_t)dev));
			ck_assert_int_eq(kvs_hiradix_unlock(e->h, m.last_node), 0);
			break;
		}
		case 3:
			ck_assert_int_ge(kvs_hiradix_evict_device(e->h, tu_rng(&rng) % 16), 0);
			ck_assert_int_ge(kvs_hiradix_evict_host(e->h, tu_rng(&rng) % 16), 0);
			break;
		case 4:
			ck_assert_int_eq(kvs_hiradix_poll(e->h), 0);
			ck_assert_int_eq(kvs_hiradix_validate(e->h), 0);
			break;
		}
	}
	return NULL;
}

/*
 * Threads sharing one cache, every call under its mutex: requests through
 * the _lock variants on shared stems, loads back, evictions at both levels,
 * polls; no device prefix returned ever holds wrong bytes, the invariants
 * hold throughout, and every page comes back at the end.
 */
START_TEST(test_threads)
{
	pthread_t th[NTHREADS];
	struct targ ta[NTHREADS];
	uint32_t pol;

	for (pol = 0; pol <= KVS_WRITE_BACK; pol++) {
		struct env e;
		int i;

		env_open_drv(&e, tu_open_gran(_i, GRAN, 0, 0), 4, pol, 2, 48, 40);
		for (i = 0; i < NTHREADS; i++) {
			ta[i].e = &e;
			ta[i].seed = 0x1234567ull * (uint64_t)(i + 1) + pol;
			ta[i].steps = tu_scaled(300, 30);
			ck_assert_int_eq(pthread_create(&th[i], NULL, thread_fn, &ta[i]), 0);
		}
		for (i = 0; i < NTHREADS; i++)
			ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		settle_all(&e);
		valid(&e);
		ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_backups_pending), 0);
		env_close(&e);
	}
}
END_TEST

/* An agreement hook that agrees: every rank has what this one has. */
static uint64_t agree_all(void *arg, int what, uint64_t value)
{
	(void)arg;
	(void)what;
	return value;
}

/*
 * test_threads' threads with the poll thread and an agreement hook: the
 * hook, the submissions and the waits all run without the cache's mutex
 * while the other threads' calls (and the poll thread) go on; the
 * invariants, the bytes and the pages come out as without them.
 */
START_TEST(test_threads_unlocked)
{
	pthread_t th[NTHREADS];
	struct targ ta[NTHREADS];
	uint32_t pol;

	for (pol = 0; pol <= KVS_WRITE_BACK; pol += KVS_WRITE_BACK) {
		struct env e;
		int i;

		x_flags = KVS_HIRADIX_THREAD;
		x_poll_us = 200;
		x_agree = agree_all;
		env_open_drv(&e, tu_open_gran(_i, GRAN, 0, 0), 4, pol, 2, 48, 40);
		x_flags = 0;
		x_poll_us = 0;
		x_agree = NULL;
		for (i = 0; i < NTHREADS; i++) {
			ta[i].e = &e;
			ta[i].seed = 0x7654321ull * (uint64_t)(i + 1) + pol;
			ta[i].steps = tu_scaled(300, 30);
			ck_assert_int_eq(pthread_create(&th[i], NULL, thread_fn, &ta[i]), 0);
		}
		for (i = 0; i < NTHREADS; i++)
			ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		settle_all(&e);
		valid(&e);
		env_close(&e);
	}
}
END_TEST

/* ------------------------------------------------------------ faults */

/*
 * Copies that fail at submission: a write-through backup that cannot be
 * submitted leaves its node without a copy (and its host pages free); a
 * load back that cannot be submitted fails with the driver's errno and
 * changes nothing; with the faults cleared all works again.
 */
START_TEST(test_faults)
{
	int32_t ab[16], nl[MAXT]; /* the random run's loads are up to MAXT */
	kvs_hiradix_node_t *a, *b;
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x;
	uint64_t avail;
	struct env e;
	kvs_drv_t *f;

	f = kvs_fault_open(tu_open_gran(_i, GRAN, 0, 0));
	ck_assert_ptr_nonnull(f);
	env_open_drv(&e, f, 4, KVS_WRITE_THROUGH, 0, 64, 64);
	keyseq(ab, 16, 900);
	ck_assert_uint_eq(request(&e, ab, 8, &a), 8);
	settle_all(&e);
	ck_assert(info(&e, a).on_host);
	/* B's backup fails at its first copy. */
	arm_fault = f;
	ck_assert_uint_eq(request(&e, ab, 16, &b), 16);
	valid(&e);
	settle_all(&e);
	ck_assert(!info(&e, b).on_host && !info(&e, b).backup_pending);
	ck_assert_uint_eq(usage(&e).host_tokens, 8);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_backup_fail), 1);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_backups), 1);
	ck_assert_uint_eq(kvs_hpool_available(e.hp), kvs_hpool_capacity(e.hp) - 2);
	/* B has no copy: evicted, it is gone. */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	valid(&e);
	ck_assert_uint_eq(usage(&e).nodes, 1);
	/* A, a tombstone whose load fails at submission. */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 8, NULL, &m), 0);
	avail = kvs_pool_available(e.pool);
	ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_COPY, 1, EIO), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 0, nl, &x), -1);
	ck_assert_int_eq(errno, EIO);
	ck_assert_ptr_null(x);
	valid(&e);
	ck_assert_uint_eq(kvs_pool_available(e.pool), avail);
	ck_assert(!info(&e, m.last_node).on_device && info(&e, m.last_node).on_host);
	ck_assert_uint_eq(info(&e, m.last_node).lock_ref, 0);
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	load_and_check(&e, ab, 8, 8);
	/* Random failures through a random run keep the invariants. */
	ck_assert_int_eq(kvs_fault_fail_random(f, KVS_OP_COPY, 0.2, 42, EIO), 0);
	lax_writes = 1;
	{
		uint64_t rng = 77;
		int i;

		for (i = 0; i < 200; i++) {
			int32_t k[MAXT];
			size_t n = rand_key(&rng, k, 4);

			if (i % 3 == 2) {
				ck_assert_int_ge(kvs_hiradix_match(e.h, k, n, NULL, &m), 0);
				if (kvs_hiradix_load_back(e.h, m.last_node, 0, nl, &x) < 0)
					ck_assert(errno == EIO || errno == ENOMEM);
			} else if (i % 3 == 1) {
				kvs_hiradix_evict_device(e.h, 8);
			} else {
				request(&e, k, n, NULL);
			}
			valid(&e);
			kvs_hiradix_poll(e.h);
			valid(&e);
		}
	}
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	lax_writes = 0;
	settle_all(&e);
	env_close(&e);
}
END_TEST

/*
 * The libcuda double: a backup whose completion reports an error (a
 * device fault while its copies are in flight) drops the node's host copy
 * and its descendants'; the tree stays valid.
 */
START_TEST(test_completion_error)
{
	if (TU_NEED_DOUBLE(_i, "needs a simulated kernel (kvsdbl_kernel) of the double"))
		return;
	int32_t ab[16], locs[16];
	kvs_hiradix_node_t *a, *b;
	struct env e;

	if (strcmp(tu_backends[_i], "cuda") != 0)
		return;
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	keyseq(ab, 16, 4242);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 16, locs), 0);
	kv_write(&e, ab, locs, 0, 16);
	tu_dbl_clear_sticky();
	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	ck_assert_int_eq(kvs_hiradix_insert(e.h, ab, 8, locs, &a), 0);
	ck_assert_int_eq(kvs_hiradix_insert(e.h, ab, 16, locs, &b), 8);
	ck_assert(info(&e, a).backup_pending && info(&e, b).backup_pending);
	valid(&e);
	ck_assert_int_eq(tu_dbl_kernel(0, 4096, 64, 1000), 0);
	ck_assert_int_eq(tu_dbl_sticky(), 700);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	settle_all(&e);
	valid(&e);
	ck_assert(!info(&e, a).on_host && !info(&e, b).on_host);
	ck_assert_uint_eq(usage(&e).host_tokens, 0);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_backup_lost), 2);
	ck_assert_uint_eq(kvs_hpool_available(e.hp), kvs_hpool_capacity(e.hp));
	tu_dbl_clear_sticky();
	env_close(&e);
}
END_TEST

/*
 * The double, copies held: a load back keeps its chain and anchor locked
 * (device eviction cannot take them, polls leave them loading) until its
 * copies complete; then a load whose completion reports an error leaves
 * its chain tombstones again, its new device pages back in the pool.
 */
START_TEST(test_load_held)
{
	if (TU_NEED_DOUBLE(_i, "needs a simulated kernel (kvsdbl_kernel) of the double"))
		return;
	int32_t ab[16], nl[16], locs[16];
	kvs_hiradix_node_t *a, *b;
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x;
	uint64_t avail;
	struct env e;

	if (strcmp(tu_backends[_i], "cuda") != 0)
		return;
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	keyseq(ab, 16, 31337);
	ck_assert_uint_eq(request(&e, ab, 8, &a), 8);
	ck_assert_uint_eq(request(&e, ab, 16, &b), 16);
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	ck_assert(!info(&e, b).on_device);
	tu_dbl_clear_sticky();
	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, &m), 8);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 0, nl, &x), 8);
	ck_assert(info(&e, b).loading && info(&e, b).on_device);
	ck_assert_uint_eq(info(&e, a).lock_ref, 1);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 0);
	ck_assert_int_eq(kvs_hiradix_poll(e.h), 0);
	ck_assert(info(&e, b).loading);
	valid(&e);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	settle_all(&e);
	ck_assert(!info(&e, b).loading);
	ck_assert_uint_eq(info(&e, a).lock_ref, 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, locs, NULL), 16);
	ck_assert(kv_check(&e, ab, locs, 16));
	/* A load whose completion fails. */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	avail = kvs_pool_available(e.pool);
	ck_assert_int_eq(tu_dbl_copy_hold(1), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, &m), 8);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 0, nl, &x), 8);
	ck_assert_int_eq(tu_dbl_kernel(0, 4096, 64, 1000), 0);
	ck_assert_int_eq(tu_dbl_sticky(), 700);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, 0), -1);
	settle_all(&e);
	valid(&e);
	ck_assert(!info(&e, b).on_device && info(&e, b).on_host && !info(&e, b).loading);
	ck_assert_uint_eq(info(&e, a).lock_ref, 0);
	ck_assert_uint_eq(kvs_pool_available(e.pool), avail);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_fail), 1);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_backs), 2);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, &m), 8);
	ck_assert_uint_eq(m.host_hit, 8);
	tu_dbl_clear_sticky();
	load_and_check(&e, ab, 16, 8);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ stats */

static void count_line(void *arg, const char *line)
{
	ck_assert_ptr_nonnull(strchr(line, '\n'));
	(*(int *)arg)++;
}

static uint64_t st(struct env *e, enum kvs_hiradix_stat i)
{
	return kvs_hiradix_stat(e->h, i);
}

START_TEST(test_stats)
{
	int32_t ab[16];
	struct env e;
	uint64_t v;
	int lines = 0;
	unsigned i;

	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	keyseq(ab, 16, 808);
	ck_assert_uint_eq(request(&e, ab, 8, NULL), 8);
	ck_assert_uint_eq(request(&e, ab, 16, NULL), 16);
	settle_all(&e);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_inserts), 2);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_matches), 2);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_query_tokens), 8 + 16);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_match_device_tokens), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_backups), 2);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_backup_tokens), 16);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_nodes), 2);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_device_tokens), 16);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_host_tokens), 16);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_tombstoned), 1);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_tombstone_tokens), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_evict_device_tokens), 8);
	load_and_check(&e, ab, 16, 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_match_host_tokens), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_load_backs), 1);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_load_tokens), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_loads_pending), 0);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	ck_assert_uint_eq(request(&e, ab, 8, NULL), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_remat_tokens), 8);
	ck_assert_int_eq(kvs_hiradix_evict_host(e.h, 8), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_evict_host_tokens), 8);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_deleted), 0);
	for (i = 0; i < KVS_HIRADIX_STAT__COUNT; i++) {
		const char *n = kvs_hiradix_stat_name((enum kvs_hiradix_stat)i);

		ck_assert_ptr_nonnull(n);
		ck_assert_int_eq(kvs_hiradix_stat_get(e.h, n, &v), 0);
		ck_assert_uint_eq(v, kvs_hiradix_stat(e.h, (enum kvs_hiradix_stat)i));
	}
	ck_assert_ptr_null(kvs_hiradix_stat_name(KVS_HIRADIX_STAT__COUNT));
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT__COUNT), 0);
	ck_assert_uint_eq(kvs_hiradix_stat(NULL, KVS_HIRADIX_STAT_nodes), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_stat_get(e.h, "nope", &v), -1);
	ck_assert_int_eq(errno, ENOENT);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_stat_get(e.h, NULL, &v), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_stats_print(e.h, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hiradix_stats_print(e.h, count_line, &lines), 0);
	ck_assert_int_eq(lines, KVS_HIRADIX_STAT__COUNT + 1);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ bad input */

/* ------------------------------------------------------------ controller */

static uint64_t hst(struct env *e, enum kvs_hpool_stat i)
{
	return kvs_hpool_stat(e->hp, i);
}

/* Deferred: backups and loads back queue, and one submission starts each
 * queue as one transfer. */
START_TEST(test_defer)
{
	int32_t ab[16], cd[16], locs[16], nl[32];
	kvs_hiradix_node_t *a, *c;
	kvs_hiradix_match_t ma, mc;
	kvs_hpool_xfer_t *x;
	struct env e;
	uint32_t l;

	x_flags = KVS_HIRADIX_DEFER;
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	x_flags = 0;
	keyseq(ab, 16, 100);
	keyseq(cd, 16, 900);
	ck_assert_uint_eq(request(&e, ab, 16, &a), 16);
	ck_assert_uint_eq(request(&e, cd, 16, &c), 16);
	/* Queued, not started: nothing copied, the nodes locked. */
	ck_assert(info(&e, a).backup_pending && info(&e, c).backup_pending);
	ck_assert_uint_eq(info(&e, a).lock_ref, 1);
	ck_assert_uint_eq(usage(&e).backups_pending, 2);
	ck_assert_uint_eq(hst(&e, KVS_HPOOL_STAT_backups), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, NULL), 16);
	ck_assert_uint_eq(hst(&e, KVS_HPOOL_STAT_backups), 0);
	valid(&e);
	x = (kvs_hpool_xfer_t *)&x;
	ck_assert_int_eq(kvs_hiradix_submit(e.h, &x), 0);
	ck_assert_ptr_null(x);
	ck_assert_uint_eq(hst(&e, KVS_HPOOL_STAT_backups), 1);
	ck_assert_uint_eq(hst(&e, KVS_HPOOL_STAT_backup_pages), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_write_batches), 1);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_backups), 2);
	settle_all(&e);
	ck_assert(info(&e, a).on_host && info(&e, c).on_host);
	/* Both to the host only, then both loaded back in one transfer. */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 32);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, &ma), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, cd, 16, NULL, &mc), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, ma.last_node, 0, nl, &x), 16);
	ck_assert_ptr_null(x);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, mc.last_node, 0, nl + 16, &x), 16);
	ck_assert_ptr_null(x);
	ck_assert(info(&e, a).loading && info(&e, a).on_device);
	ck_assert_uint_eq(hst(&e, KVS_HPOOL_STAT_loads), 0);
	/* A poll starts no load: the caller needs its transfer. */
	ck_assert_int_eq(kvs_hiradix_poll(e.h), 0);
	ck_assert_uint_eq(hst(&e, KVS_HPOOL_STAT_loads), 0);
	valid(&e);
	ck_assert_int_eq(kvs_hiradix_submit(e.h, &x), 0);
	ck_assert_ptr_nonnull(x);
	ck_assert_uint_eq(hst(&e, KVS_HPOOL_STAT_loads), 1);
	ck_assert_uint_eq(hst(&e, KVS_HPOOL_STAT_load_pages), 8);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_load_batches), 1);
	for (l = 0; l < LAYERS; l++)
		ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, l), 0);
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, locs, NULL), 16);
	ck_assert(kv_check(&e, ab, locs, 16));
	ck_assert_int_eq(memcmp(locs, nl, sizeof(locs)), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, cd, 16, locs, NULL), 16);
	ck_assert(kv_check(&e, cd, locs, 16));
	/* Queued copies left at destroy are carried out, nothing leaks. */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 32);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, &ma), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, ma.last_node, 0, NULL, &x), 16);
	ck_assert_int_eq(kvs_hiradix_submit(e.h, NULL), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, cd, 16, NULL, &mc), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, mc.last_node, 0, NULL, &x), 16);
	env_close(&e);
}
END_TEST

#define MAXEV 64
static struct {
	int type, medium;
	uint64_t hash, parent;
	int32_t tok0;
} evs[MAXEV];
static int nev;

static void ev_cb(void *arg, const kvs_kv_event_t *ev)
{
	(void)arg;
	ck_assert_int_lt(nev, MAXEV);
	evs[nev].type = ev->type;
	evs[nev].medium = ev->medium;
	evs[nev].hash = ev->hash;
	evs[nev].parent = ev->parent_hash;
	evs[nev].tok0 = ev->token_ids ? ev->token_ids[0] : -1;
	nev++;
}

static int count_ev(int type, int medium)
{
	int i, n = 0;

	for (i = 0; i < nev; i++)
		n += evs[i].type == type && evs[i].medium == medium;
	return n;
}

/* Deferred queues whose transfer cannot be submitted are undone whole:
 * backups dropped, loads tombstones again, nothing leaked. */
START_TEST(test_defer_faults)
{
	int32_t ab[8], cd[8], nl[16], locs[8];
	kvs_hiradix_node_t *a, *c;
	kvs_hiradix_match_t ma, mc;
	kvs_hpool_xfer_t *x;
	uint64_t avail;
	struct env e;
	kvs_drv_t *f;
	uint32_t l;

	f = kvs_fault_open(tu_open_gran(_i, GRAN, 0, 0));
	ck_assert_ptr_nonnull(f);
	x_flags = KVS_HIRADIX_DEFER;
	env_open_drv(&e, f, 4, KVS_WRITE_THROUGH, 0, 64, 64);
	x_flags = 0;
	keyseq(ab, 8, 300);
	keyseq(cd, 8, 600);
	ck_assert_uint_eq(request(&e, ab, 8, &a), 8);
	ck_assert_uint_eq(request(&e, cd, 8, &c), 8);
	ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_COPY, 1, EIO), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_submit(e.h, &x), -1);
	ck_assert_int_eq(errno, EIO);
	ck_assert_ptr_null(x);
	valid(&e);
	ck_assert(!info(&e, a).backup_pending && !info(&e, a).on_host);
	ck_assert(!info(&e, c).backup_pending && !info(&e, c).on_host);
	ck_assert_uint_eq(info(&e, a).lock_ref, 0);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_backup_fail), 2);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_backups), 0);
	ck_assert_uint_eq(kvs_hpool_available(e.hp), kvs_hpool_capacity(e.hp));
	ck_assert_int_eq(kvs_hiradix_submit(e.h, &x), 0);
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	/* Hit again, they are queued again, and this time copied. */
	ck_assert_uint_eq(request(&e, ab, 8, NULL), 8);
	ck_assert_uint_eq(request(&e, cd, 8, NULL), 8);
	ck_assert_int_eq(kvs_hiradix_submit(e.h, NULL), 0);
	settle_all(&e);
	ck_assert(info(&e, a).on_host && info(&e, c).on_host);
	/* Both loads back fail at submission. */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	avail = kvs_pool_available(e.pool);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 8, NULL, &ma), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, cd, 8, NULL, &mc), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, ma.last_node, 0, nl, &x), 8);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, mc.last_node, 0, nl + 8, &x), 8);
	ck_assert_uint_eq(kvs_pool_available(e.pool), avail - 16);
	ck_assert_int_eq(kvs_fault_fail_nth(f, KVS_OP_COPY, 1, EIO), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_submit(e.h, &x), -1);
	ck_assert_int_eq(errno, EIO);
	ck_assert_ptr_null(x);
	valid(&e);
	ck_assert_uint_eq(kvs_pool_available(e.pool), avail);
	ck_assert(!info(&e, a).on_device && info(&e, a).on_host && !info(&e, a).loading);
	ck_assert(!info(&e, c).on_device && info(&e, c).on_host && !info(&e, c).loading);
	ck_assert_uint_eq(info(&e, a).lock_ref, 0);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_load_fail), 2);
	ck_assert_int_eq(kvs_fault_clear(f), 0);
	/* And then loaded, bit for bit. */
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 8, NULL, &ma), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, ma.last_node, 0, nl, &x), 8);
	ck_assert_int_eq(kvs_hiradix_submit(e.h, &x), 0);
	ck_assert_ptr_nonnull(x);
	for (l = 0; l < LAYERS; l++)
		ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, l), 0);
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 8, locs, NULL), 8);
	ck_assert(kv_check(&e, ab, locs, 8));
	env_close(&e);
}
END_TEST

/* Both tiers' events; write through announces a host copy only once its
 * transfer is seen complete. */
START_TEST(test_events)
{
	if (TU_NEED_DOUBLE(_i, "needs the double's copy hold (kvsdbl_copy_hold)"))
		return;
	int dbl = strcmp(tu_backends[_i], "cuda") == 0;
	int32_t ab[8];
	kvs_hiradix_node_t *a;
	struct env e;
	int i;

	nev = 0;
	x_event = ev_cb;
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	x_event = NULL;
	keyseq(ab, 8, 555);
	hold_at_insert = dbl;
	ck_assert_uint_eq(request(&e, ab, 8, &a), 8);
	ck_assert_int_eq(nev, 2);
	ck_assert_int_eq(count_ev(KVS_KV_STORED, KVS_MEDIUM_GPU), 2);
	ck_assert_uint_eq(evs[0].parent, 0);
	ck_assert_uint_eq(evs[1].parent, evs[0].hash);
	ck_assert_int_eq(evs[0].tok0, 555);
	ck_assert_int_eq(evs[1].tok0, 559);
	if (dbl) {
		/* The copy is held: polls see nothing complete. */
		for (i = 0; i < 100; i++)
			ck_assert_int_eq(kvs_hiradix_poll(e.h), 0);
		ck_assert(info(&e, a).backup_pending);
		ck_assert_int_eq(nev, 2);
		ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	}
	ck_assert_int_eq(nev, 2); /* nothing before a poll sees the copy */
	settle_all(&e);
	ck_assert_int_eq(nev, 4);
	ck_assert_int_eq(count_ev(KVS_KV_STORED, KVS_MEDIUM_CPU), 2);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(evs[2 + i].medium, KVS_MEDIUM_CPU);
		ck_assert_uint_eq(evs[2 + i].hash, evs[i].hash);
		ck_assert_uint_eq(evs[2 + i].parent, evs[i].parent);
		ck_assert_int_eq(evs[2 + i].tok0, evs[i].tok0);
	}
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	ck_assert_int_eq(count_ev(KVS_KV_REMOVED, KVS_MEDIUM_GPU), 2);
	ck_assert_uint_eq(evs[4].hash, evs[0].hash);
	/* Load back announces the device pages when its copy completes. */
	load_and_check(&e, ab, 8, 8);
	ck_assert_int_eq(count_ev(KVS_KV_STORED, KVS_MEDIUM_GPU), 4);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	ck_assert_int_eq(kvs_hiradix_evict_host(e.h, 8), 8);
	ck_assert_int_eq(count_ev(KVS_KV_REMOVED, KVS_MEDIUM_CPU), 2);
	ck_assert_int_eq(count_ev(KVS_KV_REMOVED, KVS_MEDIUM_GPU), 4);
	ck_assert_int_eq(nev, 12);
	env_close(&e);
}
END_TEST

static uint64_t agree_cap[3], agree_seen[3], agree_calls[3];

static uint64_t agree_cb(void *arg, int what, uint64_t value)
{
	(void)arg;
	ck_assert(what == KVS_AGREE_WRITE_ACKS || what == KVS_AGREE_LOAD);
	agree_calls[what]++;
	agree_seen[what] = value;
	return value < agree_cap[what] ? value : agree_cap[what];
}

/* The ranks' agreement: write acks and load lengths limited by the hook. */
START_TEST(test_agree)
{
	int32_t ab[16], locs[16];
	kvs_hiradix_node_t *a;
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x;
	struct env e;
	long i;
	uint32_t l;

	memset(agree_calls, 0, sizeof(agree_calls));
	agree_cap[KVS_AGREE_WRITE_ACKS] = 0;
	agree_cap[KVS_AGREE_LOAD] = UINT64_MAX;
	x_agree = agree_cb;
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	x_agree = NULL;
	keyseq(ab, 16, 7000);
	ck_assert_uint_eq(request(&e, ab, 16, &a), 16);
	/* The copy completes here, but the other ranks have not: the node
	 * stays pending whatever the polls see. */
	for (double end = tu_seconds() + 120;
	     agree_seen[KVS_AGREE_WRITE_ACKS] == 0 && tu_seconds() < end; sched_yield())
		ck_assert_int_eq(kvs_hiradix_poll(e.h), 0);
	ck_assert_uint_eq(agree_seen[KVS_AGREE_WRITE_ACKS], 1);
	ck_assert(info(&e, a).backup_pending && !info(&e, a).on_host);
	/* Evictions poll too, but never ask the ranks. */
	i = (long)agree_calls[KVS_AGREE_WRITE_ACKS];
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 0);
	ck_assert_uint_eq(agree_calls[KVS_AGREE_WRITE_ACKS], (uint64_t)i);
	valid(&e);
	agree_cap[KVS_AGREE_WRITE_ACKS] = UINT64_MAX;
	ck_assert_int_eq(kvs_hiradix_poll(e.h), 0);
	ck_assert(info(&e, a).on_host && !info(&e, a).backup_pending);
	/* Load back: the ranks agree on 8 of the 16 tokens: the top half. */
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, &m), 0);
	ck_assert_uint_eq(m.host_hit, 16);
	agree_cap[KVS_AGREE_LOAD] = 10; /* rounded down to whole pages */
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 0, locs, &x), 8);
	ck_assert_uint_eq(agree_seen[KVS_AGREE_LOAD], 16);
	for (l = 0; l < LAYERS; l++)
		ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, l), 0);
	settle_all(&e);
	valid(&e);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, locs, &m), 8);
	ck_assert_uint_eq(m.host_hit, 8);
	ck_assert(kv_check(&e, ab, locs, 8));
	ck_assert_uint_eq(usage(&e).nodes, 2);
	/* Agreeing on nothing loads nothing; the hook is still asked. */
	agree_cap[KVS_AGREE_LOAD] = 0;
	i = (long)agree_calls[KVS_AGREE_LOAD];
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 0, locs, &x), 0);
	ck_assert_ptr_null(x);
	ck_assert_uint_eq(agree_calls[KVS_AGREE_LOAD], (uint64_t)i + 1);
	agree_cap[KVS_AGREE_LOAD] = UINT64_MAX;
	load_and_check(&e, ab, 16, 8);
	env_close(&e);
}
END_TEST

/* The agreement hook runs without the cache's mutex: it may call the
 * cache (here kvs_hiradix_usage() and kvs_hiradix_node_info(), which take
 * it), as a hook waiting on the other ranks must not stall the cache's
 * other threads.  With the mutex held across the hook, the first call
 * deadlocks (the test times out). */
static kvs_hiradix_t *reenter_h;
static uint64_t reenter_calls;

static uint64_t agree_reenter(void *arg, int what, uint64_t value)
{
	kvs_hiradix_usage_t u;
	kvs_hiradix_node_info_t ni;

	(void)arg;
	(void)what;
	ck_assert_int_eq(kvs_hiradix_usage(reenter_h, &u), 0);
	ck_assert_int_eq(kvs_hiradix_node_info(reenter_h, kvs_hiradix_root(reenter_h), &ni), 0);
	reenter_calls++;
	return value;
}

START_TEST(test_agree_unlocked)
{
	int32_t ab[16], locs[16];
	kvs_hiradix_node_t *a;
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x;
	struct env e;
	uint32_t l;

	reenter_calls = 0;
	x_agree = agree_reenter;
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	x_agree = NULL;
	reenter_h = e.h;
	keyseq(ab, 16, 7100);
	ck_assert_uint_eq(request(&e, ab, 16, &a), 16);
	settle_all(&e); /* polls: KVS_AGREE_WRITE_ACKS each */
	ck_assert(info(&e, a).on_host);
	ck_assert_uint_gt(reenter_calls, 0);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 16, NULL, &m), 0);
	l = (uint32_t)reenter_calls;
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 0, locs, &x), 16); /* KVS_AGREE_LOAD */
	ck_assert_uint_eq(reenter_calls, l + 1);
	for (l = 0; l < LAYERS; l++)
		ck_assert_int_eq(kvs_hpool_xfer_layer_wait(x, l), 0);
	settle_all(&e);
	valid(&e);
	env_close(&e);
}
END_TEST

/* The background thread starts and takes in copies without the caller. */
START_TEST(test_thread_poll)
{
	int32_t ab[16];
	kvs_hiradix_node_t *a;
	struct env e;
	int i;

	x_flags = KVS_HIRADIX_DEFER | KVS_HIRADIX_THREAD;
	x_poll_us = 200;
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	x_flags = x_poll_us = 0;
	keyseq(ab, 16, 4242);
	ck_assert_uint_eq(request(&e, ab, 16, &a), 16);
	/* A deadline, not a timing: the thread gets there eventually. */
	for (i = 0; i < 20000 && !info(&e, a).on_host; i++)
		usleep(1000);
	ck_assert(info(&e, a).on_host);
	ck_assert_uint_eq(st(&e, KVS_HIRADIX_STAT_write_batches), 1);
	valid(&e);
	ck_assert_uint_eq(request(&e, ab, 8, NULL), 8); /* destroy with work queued */
	env_close(&e);
}
END_TEST

/* A split of a node whose backup is in flight shares the transfer: the
 * match does not wait for it (the copy is held: waiting would hang). */
START_TEST(test_split_in_flight)
{
	if (TU_NEED_DOUBLE(_i, "needs the double's copy hold (kvsdbl_copy_hold)"))
		return;
	int32_t ab[16], locs[16];
	kvs_hiradix_node_t *a, *top;
	kvs_hiradix_match_t m;
	struct env e;

	if (strcmp(tu_backends[_i], "cuda") != 0)
		return;
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	keyseq(ab, 16, 8080);
	tu_dbl_clear_sticky();
	hold_at_insert = 1;
	ck_assert_uint_eq(request(&e, ab, 16, &a), 16);
	ck_assert_int_eq(kvs_hiradix_match(e.h, ab, 8, locs, &m), 8);
	top = m.last_node;
	ck_assert_ptr_ne(top, a);
	ck_assert(info(&e, top).backup_pending && info(&e, a).backup_pending);
	ck_assert_uint_eq(info(&e, top).tokens, 8);
	ck_assert_uint_eq(info(&e, a).tokens, 8);
	valid(&e);
	ck_assert_int_eq(tu_dbl_copy_hold(0), 0);
	settle_all(&e);
	ck_assert(info(&e, top).on_host && info(&e, a).on_host);
	ck_assert_uint_eq(info(&e, top).lock_ref, 0);
	ck_assert_uint_eq(hst(&e, KVS_HPOOL_STAT_backups), 1);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 16), 16);
	load_and_check(&e, ab, 16, 16);
	env_close(&e);
}
END_TEST

/* An insert of locations near INT32_MAX, for a page size whose aligned locations reach INT32_MAX inside a
 * page (2147483646 is a multiple of 3): the third location is compared
 * with INT32_MAX + 1, which the check must not compute in int32_t (UBSan
 * reports the overflow of the check before this fix). */
START_TEST(test_insert_int32_max)
{
	int32_t k[3] = {1, 2, 3}, locs[3] = {INT32_MAX - 1, INT32_MAX, 0};
	struct env e;

	env_open_drv(&e, tu_open_gran(_i, GRAN, 0, 0), 3, KVS_WRITE_THROUGH, 0, 64, 64);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k, 3, locs, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(usage(&e).nodes, 0);
	env_close(&e);
}
END_TEST

START_TEST(test_bad_input)
{
	int32_t k[8] = {1, 2, 3, 4, 5, 6, 7, 8}, locs[8];
	kvs_hiradix_attr_t a;
	kvs_hiradix_node_info_t ni;
	kvs_hiradix_usage_t u;
	kvs_hiradix_node_t *n;
	kvs_hpool_xfer_t *x;
	struct env e, o;

#define BAD(expr, err)                          \
	do {                                    \
		errno = 0;                      \
		ck_assert_int_eq((expr), -1);   \
		ck_assert_int_eq(errno, (err)); \
	} while (0)

	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	env_open(&o, _i, 4, KVS_WRITE_THROUGH, 0);
	BAD(kvs_hiradix_attr_init(NULL), EINVAL);
	kvs_hiradix_attr_init(&a);
	errno = 0;
	ck_assert_ptr_null(kvs_hiradix_create(NULL, e.hp, &a));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(kvs_hiradix_create(e.pool, NULL, &a));
	ck_assert_ptr_null(kvs_hiradix_create(e.pool, o.hp, &a));
	a.write_policy = 3;
	ck_assert_ptr_null(kvs_hiradix_create(e.pool, e.hp, &a));
	a.write_policy = KVS_WRITE_THROUGH_SELECTIVE;
	a.hit_threshold = 0;
	errno = 0;
	ck_assert_ptr_null(kvs_hiradix_create(e.pool, e.hp, &a));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hiradix_destroy(NULL), 0);
	kvs_hiradix_attr_init(&a);
	a.flags = 0x100;
	errno = 0;
	ck_assert_ptr_null(kvs_hiradix_create(e.pool, e.hp, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.flags = KVS_HIRADIX_THREAD;
	a.poll_us = 0;
	ck_assert_ptr_null(kvs_hiradix_create(e.pool, e.hp, &a));
	BAD(kvs_hiradix_submit(NULL, &x), EINVAL);
	ck_assert_int_eq(kvs_hiradix_submit(e.h, NULL), 0);

	BAD(kvs_hiradix_match(NULL, k, 8, locs, NULL), EINVAL);
	BAD(kvs_hiradix_match(e.h, NULL, 8, locs, NULL), EINVAL);
	ck_assert_int_eq(kvs_hiradix_match(e.h, NULL, 0, NULL, NULL), 0);
	BAD(kvs_hiradix_match_lock(e.h, k, 8, locs, NULL), EINVAL);
	BAD(kvs_hiradix_insert_lock(e.h, k, 8, locs, NULL), EINVAL);
	BAD(kvs_hiradix_insert(NULL, k, 8, locs, NULL), EINVAL);
	BAD(kvs_hiradix_insert(e.h, NULL, 8, locs, NULL), EINVAL);
	BAD(kvs_hiradix_insert(e.h, k, 8, NULL, NULL), EINVAL);
	/* Locations not in whole pages. */
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	locs[0]++;
	BAD(kvs_hiradix_insert(e.h, k, 8, locs, NULL), EINVAL);
	locs[0]--;
	locs[5] = locs[4] + 2;
	BAD(kvs_hiradix_insert(e.h, k, 8, locs, NULL), EINVAL);
	locs[5] = locs[4] + 1;
	locs[4] = -4;
	BAD(kvs_hiradix_insert(e.h, k, 8, locs, NULL), EINVAL);
	locs[4] = locs[5] - 1;
	ck_assert_uint_eq(usage(&e).nodes, 0);
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k, 8, locs, &n), 0);
	ck_assert_ptr_nonnull(n);
	settle_all(&e); /* the write-through backup's lock released */
	BAD(kvs_hiradix_lock(NULL, n), EINVAL);
	BAD(kvs_hiradix_lock(e.h, NULL), EINVAL);
	BAD(kvs_hiradix_unlock(e.h, NULL), EINVAL);
	BAD(kvs_hiradix_unlock(e.h, n), EINVAL);
	BAD(kvs_hiradix_evict_device(NULL, 1), EINVAL);
	BAD(kvs_hiradix_evict_host(NULL, 1), EINVAL);
	BAD(kvs_hiradix_load_back(NULL, n, 0, NULL, &x), EINVAL);
	BAD(kvs_hiradix_load_back(e.h, NULL, 0, NULL, &x), EINVAL);
	BAD(kvs_hiradix_load_back(e.h, n, 0, NULL, NULL), EINVAL);
	BAD(kvs_hiradix_poll(NULL), EINVAL);
	BAD(kvs_hiradix_node_info(e.h, n, NULL), EINVAL);
	BAD(kvs_hiradix_node_info(NULL, n, &ni), EINVAL);
	BAD(kvs_hiradix_usage(e.h, NULL), EINVAL);
	BAD(kvs_hiradix_usage(NULL, &u), EINVAL);
	BAD(kvs_hiradix_validate(NULL), EINVAL);
	/* The storage tier's calls on a cache without a store. */
	BAD(kvs_hiradix_prefetch(e.h, 1, k, 8), EINVAL);
	BAD(kvs_hiradix_prefetch_done(e.h, 1, NULL), EINVAL);
	BAD(kvs_hiradix_prefetch_revoke(e.h, 1), EINVAL);
	BAD(kvs_hiradix_l3_wait(e.h), EINVAL);
	errno = 0;
	ck_assert_ptr_null(kvs_hiradix_root(NULL));
	ck_assert_int_eq(errno, EINVAL);
	valid(&e);
	settle_all(&e);
	ck_assert_uint_eq(usage(&e).nodes, 1);
	env_close(&e);
	env_close(&o);
#undef BAD
}
END_TEST

/* ------------------------------------------------------------ guards */

/* An insert refuses locations that would corrupt the tree: out of the
 * pool's range, free, named twice, or the tree's own under another key;
 * nothing changes, and no match hands them out. */
START_TEST(test_insert_guard)
{
	int32_t k1[8], k2[8], locs[8], bad[8], got[8];
	uint64_t avail;
	size_t i;
	struct env e;

	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	keyseq(k1, 8, 100);
	keyseq(k2, 8, 500);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	avail = kvs_pool_available(e.pool);
	/* Past the pool's range (256 tokens): its first location and one
	 * a run crossing INT32_MAX would overflow in a signed check. */
	for (i = 0; i < 8; i++)
		bad[i] = (int32_t)kvs_pool_capacity(e.pool) + (int32_t)i;
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k2, 8, bad, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	bad[0] = INT32_MAX - 3;
	bad[1] = INT32_MAX - 2;
	bad[2] = INT32_MAX;
	bad[3] = INT32_MIN;
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k2, 4, bad, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* The same page twice in one call. */
	memcpy(bad, locs, 4 * sizeof(int32_t));
	memcpy(bad + 4, locs, 4 * sizeof(int32_t));
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k2, 8, bad, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* Free pages. */
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, bad), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 8, bad), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k2, 8, bad, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(usage(&e).nodes, 0);
	ck_assert_uint_eq(kvs_pool_available(e.pool), avail);
	/* The tree's own pages under another key. */
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k1, 8, locs, NULL), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k2, 8, locs, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k2, 8, got, NULL), 0);
	/* ... but under its own key they are the device prefix, the
	 * caller's duplicates: accepted, nothing taken over. */
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k1, 8, locs, NULL), 8);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k1, 8, got, NULL), 8);
	ck_assert_int_eq(memcmp(got, locs, sizeof(got)), 0);
	ck_assert_uint_eq(usage(&e).nodes, 1);
	/* A tombstone re-materialised takes fresh pages; once evicted, its
	 * old pages are no longer the tree's. */
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k1, 8, locs, NULL), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k1, 8, got, NULL), 8);
	ck_assert_int_eq(memcmp(got, locs, sizeof(got)), 0);
	valid(&e);
	env_close(&e);
}
END_TEST

/* A node of another cache is refused by every call taking a node. */
START_TEST(test_foreign_node)
{
	int32_t k[8], locs[8];
	kvs_hiradix_node_info_t ni;
	kvs_hiradix_node_t *n;
	kvs_hpool_xfer_t *x;
	struct env e, o;

	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	env_open(&o, _i, 4, KVS_WRITE_THROUGH, 0);
	keyseq(k, 8, 7);
	ck_assert_int_eq(kvs_pool_alloc(o.pool, 8, locs), 0);
	ck_assert_int_eq(kvs_hiradix_insert(o.h, k, 8, locs, &n), 0);
	settle_all(&o);
	ck_assert_int_eq(kvs_hiradix_evict_device(o.h, 8), 8);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_lock(e.h, n), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hiradix_lock(o.h, n), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, n), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_hiradix_unlock(o.h, n), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, n, 0, NULL, &x), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_node_info(e.h, n, &ni), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_lock(e.h, kvs_hiradix_root(o.h)), -1);
	ck_assert_int_eq(errno, EINVAL);
	valid(&e);
	valid(&o);
	ck_assert_uint_eq(usage(&e).nodes, 0);
	ck_assert_uint_eq(usage(&o).tombstone_tokens, 8);
	/* Both caches still evict and load back. */
	ck_assert_int_eq(kvs_hiradix_evict_host(o.h, 8), 8);
	env_close(&e);
	env_close(&o);
}
END_TEST

/* Unlocking a node the caller never locked is refused while a backup
 * holds it locked: lock_ref does not underflow. */
START_TEST(test_unlock_unowned)
{
	int32_t k[8], locs[8];
	kvs_hiradix_match_t m;
	kvs_hiradix_node_t *n;
	struct env e;

	x_flags = KVS_HIRADIX_DEFER;
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	x_flags = 0;
	keyseq(k, 8, 9);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	ck_assert_int_eq(kvs_hiradix_insert(e.h, k, 8, locs, &n), 0);
	ck_assert(info(&e, n).backup_pending);
	ck_assert_uint_eq(info(&e, n).lock_ref, 1);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, n), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(info(&e, n).lock_ref, 1);
	valid(&e);
	/* The caller's own lock, on top, is undone once only. */
	ck_assert_int_eq(kvs_hiradix_match_lock(e.h, k, 8, NULL, &m), 8);
	ck_assert_uint_eq(info(&e, n).lock_ref, 2);
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, m.last_node), 0);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, m.last_node), -1);
	ck_assert_int_eq(errno, EINVAL);
	valid(&e);
	ck_assert_int_eq(kvs_hiradix_submit(e.h, NULL), 0);
	settle_all(&e);
	ck_assert_uint_eq(info(&e, n).lock_ref, 0);
	ck_assert(info(&e, n).on_host);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	valid(&e);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ SGLang */

/* Insert @n tokens of @k: the device prefix's locations from a match, the
 * rest fresh; returns the insert's result. */
static ssize_t insert_fresh(struct env *e, const int32_t *k, size_t n, kvs_hiradix_node_t **last)
{
	int32_t locs[MAXT];
	ssize_t dev = kvs_hiradix_match(e->h, k, n, locs, NULL);

	ck_assert_int_ge(dev, 0);
	if ((size_t)dev < n)
		ck_assert_int_eq(kvs_pool_alloc(e->pool, n - (size_t)dev, locs + dev), 0);
	return kvs_hiradix_insert(e->h, k, n, locs, last);
}

/*
 * SGLang's HiRadixCache._insert_helper: a tombstone an insert makes
 * device-resident again is recomputed KV, neither part of the prefix the
 * insert returns nor a hit (KVS_HIRADIX_REMAT_HIT: kvslab's former count).
 * Scenario: A = k[0, 8), B = k[8, 16) under it; B evicted to a tombstone;
 * the request inserts k[0, 16) again.
 */
static void remat_scenario(int be, uint32_t flags, uint32_t want_b_hits)
{
	int32_t k[16];
	kvs_hiradix_node_t *a, *b;
	struct env e;

	x_flags = flags;
	env_open(&e, be, 4, KVS_WRITE_THROUGH, 0);
	x_flags = 0;
	keyseq(k, 16, 40);
	ck_assert_int_eq(insert_fresh(&e, k, 8, &a), 0);
	ck_assert_int_eq(insert_fresh(&e, k, 16, &b), 8);
	ck_assert_uint_eq(info(&e, a).hit_count, 2);
	ck_assert_uint_eq(info(&e, b).hit_count, 1);
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8); /* B, the device leaf */
	ck_assert(!info(&e, b).on_device);
	ck_assert(info(&e, a).on_device);
	/* A is a prefix hit, B is recomputed. */
	ck_assert_int_eq(insert_fresh(&e, k, 16, NULL), 8);
	ck_assert(info(&e, b).on_device);
	ck_assert_uint_eq(info(&e, a).hit_count, 3);
	ck_assert_uint_eq(info(&e, b).hit_count, want_b_hits);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_remat_tokens), 8);
	/* Both on the device now: the whole key is a prefix hit. */
	ck_assert_int_eq(insert_fresh(&e, k, 16, NULL), 16);
	ck_assert_uint_eq(info(&e, b).hit_count, want_b_hits + 1);
	valid(&e);
	env_close(&e);
}

START_TEST(test_sglang_remat)
{
	remat_scenario(_i, 0, 1);
	remat_scenario(_i, KVS_HIRADIX_REMAT_HIT, 2);
}
END_TEST

/*
 * SGLang's HiRadixCache.load_back: the quota is compared with the chain
 * less the ancestor tokens the load newly locks (mem_quota + delta, delta
 * = -tokens inc_lock_ref() makes protected), and chains below the default
 * threshold of 10 tokens are not loaded.  Scenario: A = k[0, 8) on the
 * device, B = k[8, 16) a tombstone below it.
 */
static void quota_setup(struct env *e, int be, uint32_t flags, const int32_t *k,
			kvs_hiradix_node_t **a, kvs_hiradix_match_t *m)
{
	x_flags = flags;
	env_open(e, be, 4, KVS_WRITE_THROUGH, 0);
	x_flags = 0;
	ck_assert_int_eq(insert_fresh(e, k, 8, a), 0);
	ck_assert_int_eq(insert_fresh(e, k, 16, NULL), 8);
	settle_all(e);
	ck_assert_int_eq(kvs_hiradix_evict_device(e->h, 8), 8);
	ck_assert_int_eq(kvs_hiradix_match(e->h, k, 16, NULL, m), 8);
	ck_assert_uint_eq(m->host_hit, 8);
}

START_TEST(test_sglang_load_quota)
{
	int32_t k[16], nl[16];
	kvs_hiradix_node_t *a;
	kvs_hiradix_match_t m, m2;
	kvs_hpool_xfer_t *x;
	struct env e;

	keyseq(k, 16, 70);
	/* A unlocked: loading B locks its 8 tokens anew, so it needs a
	 * quota of 16; 15 is refused. */
	quota_setup(&e, _i, 0, k, &a, &m);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 15, nl, &x), 0);
	ck_assert_ptr_null(x);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_skipped), 1);
	ck_assert_uint_eq(info(&e, a).lock_ref, 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 16, nl, &x), 8);
	settle_all(&e);
	valid(&e);
	env_close(&e);
	/* A already locked by the request: nothing locked anew, 8 do. */
	quota_setup(&e, _i, 0, k, &a, &m);
	ck_assert_int_eq(kvs_hiradix_match_lock(e.h, k, 8, NULL, &m2), 8);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 7, nl, &x), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 8, nl, &x), 8);
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, m2.last_node), 0);
	valid(&e);
	env_close(&e);
	/* KVS_HIRADIX_QUOTA_CHAIN: the chain alone against the quota. */
	quota_setup(&e, _i, KVS_HIRADIX_QUOTA_CHAIN, k, &a, &m);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 7, nl, &x), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 8, nl, &x), 8);
	settle_all(&e);
	valid(&e);
	env_close(&e);
}
END_TEST

/* The defaults are SGLang's: a load back threshold of 10 tokens, prefetch
 * timeouts of 2 s + 0.1 s per 1024 tokens capped at 30 s. */
START_TEST(test_sglang_defaults)
{
	int32_t k[16], nl[16];
	kvs_hiradix_l3_attr_t l3;
	kvs_hiradix_attr_t a;
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x;
	struct env e;

	ck_assert_int_eq(kvs_hiradix_attr_init(&a), 0);
	ck_assert_uint_eq(a.load_back_threshold, 10);
	ck_assert_uint_eq(a.flags, 0);
	ck_assert_int_eq(kvs_hiradix_l3_attr_init(&l3), 0);
	ck_assert_uint_eq(l3.timeout_base_ms, 2000);
	ck_assert_uint_eq(l3.timeout_per_ktoken_ms, 100);
	ck_assert_uint_eq(l3.timeout_max_ms, 30000);
	/* A cache made with the defaults skips an 8-token chain, loads a
	 * 12-token one. */
	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	ck_assert_int_eq(kvs_hiradix_destroy(e.h), 0);
	e.h = kvs_hiradix_create(e.pool, e.hp, NULL);
	ck_assert_ptr_nonnull(e.h);
	keyseq(k, 16, 90);
	ck_assert_int_eq(insert_fresh(&e, k, 4, NULL), 0);
	ck_assert_int_eq(insert_fresh(&e, k, 12, NULL), 4);
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 8), 8);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k, 12, NULL, &m), 4);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 0, nl, &x), 0);
	ck_assert_uint_eq(kvs_hiradix_stat(e.h, KVS_HIRADIX_STAT_load_skipped), 1);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 4), 4);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k, 12, NULL, &m), 0);
	ck_assert_int_eq(kvs_hiradix_load_back(e.h, m.last_node, 0, nl, &x), 12);
	settle_all(&e);
	valid(&e);
	env_close(&e);
}
END_TEST

/*
 * Many children under one parent: each is found by its first page (the
 * tree's child table, grown as nodes come: 64 buckets, then more), through
 * splits (a child's first page changes hands), tombstones and deletes.
 */
START_TEST(test_many_children)
{
	enum { N = 300 };
	kvs_hiradix_match_t m;
	int32_t k[4];
	struct env e;
	int i;

	env_open_drv(&e, tu_open_gran(_i, GRAN, 0, 0), 2, KVS_WRITE_THROUGH, 0, 2 * N + 8,
		     2 * N + 8);
	for (i = 0; i < N; i++) {
		k[0] = k[1] = i;
		k[2] = 1000 + i;
		k[3] = 7;
		ck_assert_int_eq(insert_fresh(&e, k, 4, NULL), 0);
	}
	valid(&e);
	/* A second key under each: the child splits after its first page. */
	for (i = 0; i < N; i += 2) {
		k[0] = k[1] = i;
		k[2] = 5000 + i;
		k[3] = 8;
		ck_assert_int_eq(kvs_hiradix_match(e.h, k, 4, NULL, NULL), 2);
	}
	valid(&e);
	for (i = 0; i < N; i++) {
		k[0] = k[1] = i;
		k[2] = 1000 + i;
		k[3] = 7;
		ck_assert_int_eq(kvs_hiradix_match(e.h, k, 4, NULL, &m), 4);
		k[2] = 1001 + i; /* another page after the first: the first only */
		ck_assert_int_eq(kvs_hiradix_match(e.h, k, 4, NULL, NULL), 2);
		k[0] = N + i; /* an unknown first page */
		ck_assert_int_eq(kvs_hiradix_match(e.h, k, 4, NULL, NULL), 0);
	}
	/* Tombstones are found too (host hits); host eviction deletes them. */
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 4 * N), 4 * N);
	valid(&e);
	for (i = 0; i < N; i++) {
		k[0] = k[1] = i;
		k[2] = 1000 + i;
		k[3] = 7;
		ck_assert_int_eq(kvs_hiradix_match(e.h, k, 4, NULL, &m), 0);
		ck_assert_uint_eq(m.host_hit, 4);
	}
	ck_assert_int_eq(kvs_hiradix_evict_host(e.h, 4 * N), 4 * N);
	valid(&e);
	ck_assert_uint_eq(usage(&e).nodes, 0);
	env_close(&e);
}
END_TEST

/*
 * Extra keys (SGLang's extra_key): what is cached under one extra key is
 * found under it only, never under another (0 included), at both levels;
 * the same tokens under two keys are two prefixes.
 */
static ssize_t insert_extra(struct env *e, uint64_t x, const int32_t *k, size_t n,
			    kvs_hiradix_node_t **last)
{
	int32_t locs[MAXT];
	ssize_t dev = kvs_hiradix_match_extra(e->h, x, k, n, locs, NULL);

	ck_assert_int_ge(dev, 0);
	if ((size_t)dev < n)
		ck_assert_int_eq(kvs_pool_alloc(e->pool, n - (size_t)dev, locs + dev), 0);
	return kvs_hiradix_insert_extra(e->h, x, k, n, locs, last);
}

START_TEST(test_extra_keys)
{
	int32_t k[16], locs[16];
	kvs_hiradix_node_t *a, *b, *l;
	kvs_hiradix_match_t m;
	struct env e;

	env_open(&e, _i, 4, KVS_WRITE_THROUGH, 0);
	keyseq(k, 16, 4200);
	ck_assert_int_eq(insert_extra(&e, 7, k, 16, &a), 0);
	ck_assert_int_eq(kvs_hiradix_match_extra(e.h, 7, k, 16, NULL, NULL), 16);
	ck_assert_int_eq(kvs_hiradix_match_extra(e.h, 8, k, 16, NULL, NULL), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k, 16, NULL, NULL), 0);
	/* The same tokens under another key, and under none: apart. */
	ck_assert_int_eq(insert_extra(&e, 8, k, 8, &b), 0);
	ck_assert_int_eq(insert_fresh(&e, k, 4, NULL), 0);
	ck_assert_uint_eq(usage(&e).nodes, 3);
	ck_assert_int_eq(kvs_hiradix_match_extra(e.h, 8, k, 16, NULL, NULL), 8);
	ck_assert_int_eq(kvs_hiradix_match_extra(e.h, 0, k, 16, NULL, NULL), 4);
	/* A split under one key leaves the other's node whole. */
	ck_assert_int_eq(kvs_hiradix_match_lock_extra(e.h, 7, k, 12, locs, &m), 12);
	ck_assert_uint_eq(info(&e, m.last_node).tokens, 12);
	ck_assert_uint_eq(info(&e, b).tokens, 8);
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, m.last_node), 0);
	valid(&e);
	/* The host level too: tombstones found under their key only. */
	settle_all(&e);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 28);
	ck_assert_int_eq(kvs_hiradix_match_extra(e.h, 7, k, 16, NULL, &m), 0);
	ck_assert_uint_eq(m.host_hit, 16);
	ck_assert_int_eq(kvs_hiradix_match_extra(e.h, 9, k, 16, NULL, &m), 0);
	ck_assert_uint_eq(m.host_hit, 0);
	/* Re-materialised under its key by an insert_lock. */
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 16, locs), 0);
	ck_assert_int_eq(kvs_hiradix_insert_lock_extra(e.h, 7, k, 16, locs, &l), 0);
	ck_assert_int_eq(kvs_hiradix_match_extra(e.h, 7, k, 16, NULL, NULL), 16);
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, l), 0);
	/* The _lock variants want somewhere to put the node. */
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_match_lock_extra(e.h, 7, k, 16, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_hiradix_insert_lock_extra(e.h, 7, k, 16, locs, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	valid(&e);
	env_close(&e);
}
END_TEST

static Suite *hiradix_suite(void)
{
	Suite *s = suite_create("hiradix");
	TCase *tc = tcase_create("hiradix");
	int nb = tu_nbackends();

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_transitions, 0, nb);
	tcase_add_loop_test(tc, test_evict_no_backup, 0, nb);
	tcase_add_loop_test(tc, test_lru_order, 0, nb);
	tcase_add_loop_test(tc, test_selective, 0, nb);
	tcase_add_loop_test(tc, test_write_back, 0, nb);
	tcase_add_loop_test(tc, test_load_back_limits, 0, nb);
	tcase_add_loop_test(tc, test_random, 0, nb);
	tcase_add_loop_test(tc, test_threads, 0, nb);
	tcase_add_loop_test(tc, test_threads_unlocked, 0, nb);
	tcase_add_loop_test(tc, test_faults, 0, nb);
	tcase_add_loop_test(tc, test_completion_error, 0, nb);
	tcase_add_loop_test(tc, test_load_held, 0, nb);
	tcase_add_loop_test(tc, test_stats, 0, nb);
	tcase_add_loop_test(tc, test_defer, 0, nb);
	tcase_add_loop_test(tc, test_defer_faults, 0, nb);
	tcase_add_loop_test(tc, test_events, 0, nb);
	tcase_add_loop_test(tc, test_agree, 0, nb);
	tcase_add_loop_test(tc, test_agree_unlocked, 0, nb);
	tcase_add_loop_test(tc, test_thread_poll, 0, nb);
	tcase_add_loop_test(tc, test_split_in_flight, 0, nb);
	tcase_add_loop_test(tc, test_bad_input, 0, nb);
	tcase_add_loop_test(tc, test_insert_int32_max, 0, nb);
	tcase_add_loop_test(tc, test_insert_guard, 0, nb);
	tcase_add_loop_test(tc, test_foreign_node, 0, nb);
	tcase_add_loop_test(tc, test_unlock_unowned, 0, nb);
	tcase_add_loop_test(tc, test_sglang_remat, 0, nb);
	tcase_add_loop_test(tc, test_sglang_load_quota, 0, nb);
	tcase_add_loop_test(tc, test_sglang_defaults, 0, nb);
	tcase_add_loop_test(tc, test_many_children, 0, nb);
	tcase_add_loop_test(tc, test_extra_keys, 0, nb);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(hiradix_suite());
}
