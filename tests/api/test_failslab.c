/* SPDX-License-Identifier: MIT */
/*
 * tests/api/test_failslab.c - every allocation of the main scenarios,
 * failed in turn.
 *
 * Each scenario builds its state with no fault, then runs one call with the
 * failslab injector armed (tests/common/failslab.c): first counting the
 * call's allocations, then failing each of them in turn.  A call that fails
 * must fail with ENOMEM and change nothing (pool, tree, table, request); a
 * call that absorbs the failure (a per-thread cache not made, a finish
 * whose tokens the tree cannot take) must succeed; either way no page is
 * lost: available + held == capacity, and the held pages are exactly the
 * tree's and the live requests' own.
 *
 * The hashed block cache gets the same sweep over its own workload
 * (lookup, alloc from the pool and by eviction, cache, free, evict, reset,
 * create): a failed call fails with ENOMEM, gives back every allocation it
 * made (the injector counts frees too) and leaves the cache exactly as it
 * was, block by block; after every run the cache validates and every page
 * is free, held or cached.
 *
 * The hierarchical radix cache's insert gets the sweep too: it is where
 * the leaf sets' heaps grow, and a failure there must not leave a node
 * outside its set.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "failslab.h"
#include "testutil.h"

#define PS 4
#define CAP 256

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_reqtab_t *tab;
	kvs_radix_t *r;
	kvs_flow_t *f;
	int32_t tok[4][128];
	kvs_req_t req[4];
	int live[4];
};

struct snap {
	uint64_t avail, held, tokens, evictable, protected_, rows;
	kvs_req_t req[4];
};

static void env_open(struct env *e)
{
	kvs_pool_attr_t pa;
	kvs_drv_attr_t da;
	int i, k;

	memset(e, 0, sizeof(*e));
	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	e->d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 64;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = PS;
	pa.max_tokens = CAP; /* 8 slabs of 32 tokens */
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	e->tab = kvs_reqtab_create(e->d, 4, 128);
	ck_assert_ptr_nonnull(e->tab);
	e->r = kvs_radix_create(e->pool, NULL);
	ck_assert_ptr_nonnull(e->r);
	e->f = kvs_flow_create(e->pool, e->tab, e->r);
	ck_assert_ptr_nonnull(e->f);
	for (i = 0; i < 4; i++)
		for (k = 0; k < 128; k++)
			e->tok[i][k] = k < 24 ? 7 : 1000 * (i + 1) + k; /* a shared prefix */
}

static uint64_t held_pages(struct env *e)
{
	return kvs_slab_stat(kvs_pool_slab(e->pool), KVS_SLAB_STAT_objects);
}

/* Pages the test holds itself, outside the tree and the requests. */
static uint64_t accounted_extra;

/* No page is lost: every page is free, the tree's, or a live request's. */
static void accounted(struct env *e)
{
	uint64_t own = accounted_extra * PS;
	int i;

	ck_assert_int_eq(kvs_slab_validate(kvs_pool_slab(e->pool)), 0);
	ck_assert_int_eq(kvs_radix_validate(e->r), 0);
	ck_assert_uint_eq(kvs_pool_available(e->pool) + held_pages(e) * PS, kvs_pool_capacity(e->pool));
	for (i = 0; i < 4; i++) {
		kvs_req_t *q = &e->req[i];

		if (e->live[i] && q->slot >= 0)
			own += ((q->kv_len + PS - 1) / PS - q->prefix_len / PS) * PS;
	}
	ck_assert_uint_eq(held_pages(e) * PS, kvs_radix_tokens(e->r) + own);
}

static void snap(struct env *e, struct snap *s)
{
	s->avail = kvs_pool_available(e->pool);
	s->held = held_pages(e);
	s->tokens = kvs_radix_tokens(e->r);
	s->evictable = kvs_radix_evictable(e->r);
	s->protected_ = kvs_radix_protected(e->r);
	s->rows = kvs_reqtab_available(e->tab);
	memcpy(s->req, e->req, sizeof(s->req));
}

static void unchanged(struct env *e, const struct snap *s)
{
	int i;

	ck_assert_uint_eq(kvs_pool_available(e->pool), s->avail);
	ck_assert_uint_eq(held_pages(e), s->held);
	ck_assert_uint_eq(kvs_radix_tokens(e->r), s->tokens);
	ck_assert_uint_eq(kvs_radix_evictable(e->r), s->evictable);
	ck_assert_uint_eq(kvs_radix_protected(e->r), s->protected_);
	ck_assert_uint_eq(kvs_reqtab_available(e->tab), s->rows);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(e->req[i].slot, s->req[i].slot);
		ck_assert_uint_eq(e->req[i].kv_len, s->req[i].kv_len);
		ck_assert_uint_eq(e->req[i].prefix_len, s->req[i].prefix_len);
		ck_assert_ptr_eq(e->req[i].last_node, s->req[i].last_node);
	}
}

static void env_close(struct env *e)
{
	int i;

	for (i = 0; i < 4; i++)
		if (e->live[i])
			ck_assert_int_eq(kvs_flow_release(e->f, &e->req[i]), 0);
	accounted(e);
	kvs_flow_destroy(e->f);
	kvs_radix_destroy(e->r);
	ck_assert_uint_eq(held_pages(e), 0);
	kvs_reqtab_destroy(e->tab);
	kvs_pool_destroy(e->pool);
	kvs_drv_close(e->d);
}

/* Start request @i with @n tokens, extend it, and keep it running. */
static void run_req(struct env *e, int i, uint32_t n)
{
	kvs_req_t *b[1] = {&e->req[i]};

	ck_assert_int_eq(kvs_req_init(&e->req[i], e->tok[i], n, 0, 0), 0);
	ck_assert_int_ge(kvs_flow_prepare_extend(e->f, b, 1, NULL), 0);
	e->live[i] = 1;
}

static void finish_req(struct env *e, int i)
{
	ck_assert_int_eq(kvs_flow_cache_finished(e->f, &e->req[i]), 0);
	e->live[i] = 0;
}

/* ------------------------------------------------------------ scenarios */

/* The tree holds three finished requests (nearly all the pool); a fourth,
 * sharing only their prefix, needs eviction to get its pages. */
static void setup_full(struct env *e)
{
	int i;

	for (i = 0; i < 3; i++) {
		run_req(e, i, 80);
		finish_req(e, i);
	}
}

static void setup_full_waiting(struct env *e)
{
	setup_full(e);
	ck_assert_int_eq(kvs_req_init(&e->req[3], e->tok[3], 100, 0, 0), 0);
}

static int op_extend_evict(struct env *e)
{
	kvs_req_t *b[1] = {&e->req[3]};
	ssize_t got;

	got = kvs_flow_prepare_extend(e->f, b, 1, NULL);
	if (got >= 0)
		e->live[3] = 1;
	return got < 0 ? -1 : 0;
}

static void setup_running(struct env *e)
{
	run_req(e, 0, 40);
	run_req(e, 1, 40); /* shares 24 tokens: 20 (a page-aligned 20) cached? no: running */
	finish_req(e, 1);
	run_req(e, 2, 31); /* its last page has one free slot */
}

static int op_decode(struct env *e)
{
	kvs_req_t *b[2] = {&e->req[0], &e->req[2]};

	e->tok[0][e->req[0].kv_len] = 5;
	e->tok[2][e->req[2].kv_len] = 6;
	e->req[0].ntokens++;
	e->req[2].ntokens++;
	if (kvs_flow_prepare_decode(e->f, b, 2, NULL) == 0)
		return 0;
	e->req[0].ntokens--;
	e->req[2].ntokens--;
	return -1;
}

static int op_finish(struct env *e)
{
	return kvs_flow_cache_finished(e->f, &e->req[0]);
}

static void post_finish(struct env *e, ssize_t rc)
{
	/* Never fails for valid input: a failure inside frees instead. */
	ck_assert_int_eq(rc, 0);
	e->live[0] = 0;
}

static int op_unfinished(struct env *e)
{
	return kvs_flow_cache_unfinished(e->f, &e->req[0]);
}

/* Pages for 40 tokens that share 24 with the tree (20 page-aligned): the
 * insert splits a node. */
static int32_t ins_locs[40];

static void setup_insert(struct env *e)
{
	setup_running(e);
	ck_assert_int_eq(kvs_pool_alloc(e->pool, 40, ins_locs), 0);
}

static int op_insert_split(struct env *e)
{
	ssize_t got = kvs_radix_insert(e->r, 0, e->tok[3], 40, ins_locs, 0, NULL);

	return got < 0 ? -1 : (int)got;
}

static void post_insert(struct env *e, ssize_t rc)
{
	/* The tree has the first @rc of its own already: the caller's copies
	 * of those go back (all 40 when the insert failed). */
	ck_assert_int_eq(kvs_pool_free(e->pool, rc < 0 ? 40 : (size_t)rc, ins_locs), 0);
	accounted_extra = 0;
}

static void pre_insert_fail(struct env *e)
{
	/* A failed insert leaves the caller's 40 tokens with the caller. */
	ck_assert_int_eq(kvs_pool_free(e->pool, 40, ins_locs), 0);
	accounted_extra = 0;
}

static int op_evict(struct env *e)
{
	return (int)kvs_radix_evict(e->r, 100);
}

static void post_evict(struct env *e, ssize_t rc)
{
	(void)e;
	/* Eviction never allocates: it frees all it was asked for. */
	ck_assert_int_ge(rc, 100);
}

/* The call under test runs with the injector armed: it and its op
 * function may not assert (libcheck allocates to record an assertion);
 * post() checks after the injector is off. */
struct scenario {
	const char *name;
	void (*setup)(struct env *e);
	int (*op)(struct env *e);
	void (*post)(struct env *e, ssize_t rc);
	int may_fail;		/* 0: the call must succeed whatever fails */
};

static const struct scenario scenarios[] = {
	{"prepare_extend with eviction", setup_full_waiting, op_extend_evict, NULL, 1},
	{"prepare_decode", setup_running, op_decode, NULL, 1},
	{"cache_finished", setup_running, op_finish, post_finish, 0},
	{"cache_unfinished", setup_running, op_unfinished, NULL, 1},
	{"insert with split", setup_insert, op_insert_split, post_insert, 1},
	{"evict", setup_full, op_evict, post_evict, 0},
};

static void run_one(const struct scenario *sc, int mode, uint64_t arg)
{
	struct env e;
	struct snap s;
	int rc, err;

	env_open(&e);
	sc->setup(&e);
	if (sc->op == op_insert_split)
		accounted_extra = 40 / PS; /* the caller's pages for the insert */
	else
		accounted_extra = 0;
	accounted(&e);
	snap(&e, &s);
	if (mode == 0)
		fs_count();
	else if (mode == 1)
		fs_fail_nth(arg);
	else
		fs_fail_random(0.1, arg);
	rc = sc->op(&e);
	err = errno;
	fs_off();
	if (rc < 0) {
		ck_assert_msg(sc->may_fail, "%s failed", sc->name);
		ck_assert_msg(err == ENOMEM, "%s: errno %d", sc->name, err);
		ck_assert_uint_gt(fs_failed(), 0);
		unchanged(&e, &s);
		if (sc->op == op_insert_split) {
			pre_insert_fail(&e);
			rc = 0;
			accounted(&e);
			env_close(&e);
			return;
		}
	}
	if (sc->post)
		sc->post(&e, rc);
	accounted(&e);
	env_close(&e);
}

START_TEST(test_every_allocation)
{
	const struct scenario *sc = &scenarios[_i];
	struct env e;
	uint64_t n, k;
	int rc;

	/* Count the call's allocations once. */
	env_open(&e);
	sc->setup(&e);
	accounted_extra = sc->op == op_insert_split ? 40 / PS : 0;
	fs_count();
	rc = sc->op(&e);
	n = fs_off();
	ck_assert_int_ge(rc, 0);
	if (sc->post)
		sc->post(&e, rc);
	accounted_extra = 0;
	env_close(&e);
	for (k = 1; k <= n + 1; k++)
		run_one(sc, 1, k);
}
END_TEST

START_TEST(test_random_allocations)
{
	uint64_t seed;

	for (seed = 1; seed <= 50; seed++)
		run_one(&scenarios[seed % (sizeof(scenarios) / sizeof(scenarios[0]))], 2, seed);
}
END_TEST

/* ------------------------------------------------- the hashed block cache */

#define HBLK 64			/* pool pages: 256 tokens of PS 4 */

struct henv {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hcache_t *hc;
	uint32_t nb;			/* blocks: pool pages */
	int32_t blk[HBLK];		/* blocks the test holds, one reference each */
	size_t nblk;
	int32_t tok[HBLK * PS];
	kvs_hcache_t *made;		/* op_hc_create's cache */
	int events;
};

struct hsnap {
	kvs_hcache_stats_t st;
	uint64_t avail, objects;
	int32_t q[HBLK];
	ssize_t qn;
	uint32_t ref[HBLK];
	int has[HBLK];
	kvs_block_hash_t hash[HBLK];
	int events;
};

static void on_hc_event(void *arg, const kvs_kv_event_t *ev)
{
	(void)ev;
	((struct henv *)arg)->events++;
}

static kvs_block_hash_t hh(uint32_t seq, uint32_t i)
{
	kvs_block_hash_t h;

	memset(&h, 0, sizeof(h));
	h.len = 32;
	memcpy(h.bytes, &seq, 4);
	memcpy(h.bytes + 4, &i, 4);
	h.bytes[31] = (uint8_t)(seq ^ i);
	return h;
}

static void hashes_of(kvs_block_hash_t *h, uint32_t seq, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h[i] = hh(seq, (uint32_t)i);
}

static void henv_open(struct henv *e)
{
	kvs_pool_attr_t pa;
	kvs_hcache_attr_t ha;
	kvs_drv_attr_t da;

	memset(e, 0, sizeof(*e));
	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	e->d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 64;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = PS;
	pa.max_tokens = HBLK * PS; /* 8 slabs of 32 tokens */
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	e->nb = (uint32_t)(kvs_pool_capacity(e->pool) / PS);
	ck_assert_uint_le(e->nb, HBLK);
	kvs_hcache_attr_init(&ha);
	ha.window = 8;
	ha.kv_event_cb = on_hc_event;
	ha.kv_event_arg = e;
	e->hc = kvs_hcache_create(e->pool, &ha);
	ck_assert_ptr_nonnull(e->hc);
	for (size_t i = 0; i < HBLK * PS; i++)
		e->tok[i] = (int32_t)i;
}

/* Every page is free in the pool, held, or cached in the queue; the cache
 * validates. */
static void haccounted(struct henv *e)
{
	kvs_hcache_stats_t st;

	ck_assert_int_eq(kvs_hcache_validate(e->hc), 0);
	ck_assert_int_eq(kvs_slab_validate(kvs_pool_slab(e->pool)), 0);
	ck_assert_int_eq(kvs_hcache_stats(e->hc, &st), 0);
	ck_assert_uint_eq(kvs_pool_available(e->pool) + (st.used_blocks + st.free_queue_blocks) * PS,
			  kvs_pool_capacity(e->pool));
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(e->pool), KVS_SLAB_STAT_objects),
			  st.used_blocks + st.free_queue_blocks);
}

static void hsnap(struct henv *e, struct hsnap *s)
{
	memset(s, 0, sizeof(*s));
	ck_assert_int_eq(kvs_hcache_stats(e->hc, &s->st), 0);
	s->avail = kvs_pool_available(e->pool);
	s->objects = kvs_slab_stat(kvs_pool_slab(e->pool), KVS_SLAB_STAT_objects);
	s->qn = kvs_hcache_free_queue(e->hc, s->q, HBLK);
	for (uint32_t b = 0; b < e->nb; b++)
		s->has[b] = kvs_hcache_block(e->hc, (int32_t)b, &s->ref[b], &s->hash[b]);
	s->events = e->events;
}

static void hunchanged(struct henv *e, const struct hsnap *s)
{
	struct hsnap now;

	hsnap(e, &now);
	ck_assert_mem_eq(&now.st, &s->st, sizeof(s->st));
	ck_assert_uint_eq(now.avail, s->avail);
	ck_assert_uint_eq(now.objects, s->objects);
	ck_assert_int_eq(now.qn, s->qn);
	ck_assert_mem_eq(now.q, s->q, sizeof(s->q));
	ck_assert_mem_eq(now.ref, s->ref, sizeof(s->ref));
	ck_assert_mem_eq(now.has, s->has, sizeof(s->has));
	for (uint32_t b = 0; b < e->nb; b++)
		if (s->has[b] == 1)
			ck_assert_mem_eq(&now.hash[b], &s->hash[b], sizeof(s->hash[b]));
	ck_assert_int_eq(now.events, s->events); /* a failed call emits nothing */
}

static void henv_close(struct henv *e)
{
	if (e->nblk)
		ck_assert_int_eq(kvs_hcache_free(e->hc, e->blk, e->nblk), 0);
	e->nblk = 0;
	haccounted(e);
	if (e->made)
		ck_assert_int_eq(kvs_hcache_destroy(e->made), 0);
	ck_assert_int_eq(kvs_hcache_destroy(e->hc), 0);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(e->pool), KVS_SLAB_STAT_objects), 0);
	kvs_pool_destroy(e->pool);
	kvs_drv_close(e->d);
}

/* A request of @n full blocks on sequence @seq, cached and freed tail
 * first: its blocks wait in the free queue. */
static void hc_cached_request(struct henv *e, uint32_t seq, size_t n)
{
	kvs_block_hash_t h[HBLK];
	int32_t b[HBLK], rev[HBLK];

	hashes_of(h, seq, n);
	ck_assert_int_eq(kvs_hcache_alloc(e->hc, n, b), 0);
	ck_assert_int_eq(kvs_hcache_cache(e->hc, b, n, h, NULL, seq, e->tok), 0);
	for (size_t i = 0; i < n; i++)
		rev[i] = b[n - 1 - i];
	ck_assert_int_eq(kvs_hcache_free(e->hc, rev, n), 0);
}

/* Two requests' blocks cached free, and the test holding 6 fresh blocks. */
static void hsetup_cached(struct henv *e)
{
	hc_cached_request(e, 1, 6);
	hc_cached_request(e, 2, 4);
	ck_assert_int_eq(kvs_hcache_alloc(e->hc, 6, e->blk), 0);
	e->nblk = 6;
}

/* All the pool cached or held: an allocation must evict. */
static void hsetup_full(struct henv *e)
{
	kvs_hcache_stats_t st;

	hc_cached_request(e, 1, 8);
	ck_assert_int_eq(kvs_hcache_stats(e->hc, &st), 0);
	e->nblk = (size_t)(kvs_pool_available(e->pool) / PS);
	ck_assert_int_eq(kvs_hcache_alloc(e->hc, e->nblk, e->blk), 0);
	ck_assert_uint_eq(kvs_pool_available(e->pool), 0);
}

static int op_hc_lookup(struct henv *e)
{
	kvs_block_hash_t h[6];
	ssize_t k;

	hashes_of(h, 1, 6);
	k = kvs_hcache_lookup(e->hc, h, 6, 6 * PS + 1, e->blk + e->nblk);
	if (k < 0)
		return -1;
	e->nblk += (size_t)k;
	return (int)k;
}

static void post_hc_lookup(struct henv *e, ssize_t rc)
{
	(void)e;
	ck_assert_int_eq(rc, 6); /* never allocates, never fails */
}

static int op_hc_alloc(struct henv *e)
{
	if (kvs_hcache_alloc(e->hc, 5, e->blk + e->nblk) < 0)
		return -1;
	e->nblk += 5;
	return 0;
}

static int op_hc_cache(struct henv *e)
{
	kvs_block_hash_t h[6];

	hashes_of(h, 3, 6);
	return kvs_hcache_cache(e->hc, e->blk, 6, h, NULL, 3, e->tok);
}

static int op_hc_free(struct henv *e)
{
	int rc;

	/* The held blocks: the first three hashed, the rest not. */
	rc = kvs_hcache_free(e->hc, e->blk, e->nblk);
	if (rc == 0)
		e->nblk = 0;
	return rc;
}

static void hsetup_free(struct henv *e)
{
	kvs_block_hash_t h[3];

	hsetup_cached(e);
	hashes_of(h, 4, 3);
	ck_assert_int_eq(kvs_hcache_cache(e->hc, e->blk, 3, h, NULL, 4, NULL), 0);
}

static int op_hc_evict(struct henv *e)
{
	return (int)kvs_hcache_evict(e->hc, 7);
}

static void post_hc_evict(struct henv *e, ssize_t rc)
{
	(void)e;
	ck_assert_int_eq(rc, 7); /* never allocates, never fails */
}

static void hsetup_unheld(struct henv *e)
{
	hc_cached_request(e, 1, 6);
	hc_cached_request(e, 2, 4);
}

static int op_hc_reset(struct henv *e)
{
	return kvs_hcache_reset(e->hc);
}

static void post_must_succeed(struct henv *e, ssize_t rc)
{
	(void)e;
	ck_assert_int_eq(rc, 0);
}

static int op_hc_create(struct henv *e)
{
	e->made = kvs_hcache_create(e->pool, NULL);
	return e->made ? 0 : -1;
}

struct hscenario {
	const char *name;
	void (*setup)(struct henv *e);
	int (*op)(struct henv *e);
	void (*post)(struct henv *e, ssize_t rc);
	int may_fail;
};

static const struct hscenario hscenarios[] = {
	{"hcache lookup", hsetup_cached, op_hc_lookup, post_hc_lookup, 0},
	{"hcache alloc from the pool", hsetup_cached, op_hc_alloc, NULL, 1},
	{"hcache alloc by eviction", hsetup_full, op_hc_alloc, NULL, 1},
	{"hcache cache", hsetup_cached, op_hc_cache, NULL, 1},
	{"hcache free", hsetup_free, op_hc_free, post_must_succeed, 0},
	{"hcache evict", hsetup_unheld, op_hc_evict, post_hc_evict, 0},
	{"hcache reset", hsetup_unheld, op_hc_reset, post_must_succeed, 0},
	{"hcache create", hsetup_cached, op_hc_create, NULL, 1},
};

#define NHSC (sizeof(hscenarios) / sizeof(hscenarios[0]))

static void hrun_one(const struct hscenario *sc, int mode, uint64_t arg)
{
	struct henv e;
	struct hsnap s;
	int rc, err;
	int64_t net;

	henv_open(&e);
	sc->setup(&e);
	haccounted(&e);
	hsnap(&e, &s);
	if (mode == 0)
		fs_count();
	else if (mode == 1)
		fs_fail_nth(arg);
	else
		fs_fail_random(0.1, arg);
	rc = sc->op(&e);
	err = errno;
	fs_off();
	net = fs_net();
	if (rc < 0) {
		ck_assert_msg(sc->may_fail, "%s failed (errno %d)", sc->name, err);
		ck_assert_msg(err == ENOMEM, "%s: errno %d", sc->name, err);
		ck_assert_uint_gt(fs_failed(), 0);
		ck_assert_msg(net == 0, "%s: failed, keeping %lld allocations", sc->name,
			      (long long)net);
		hunchanged(&e, &s);
	}
	if (sc->post)
		sc->post(&e, rc);
	haccounted(&e);
	henv_close(&e);
}

START_TEST(test_hcache_every_allocation)
{
	const struct hscenario *sc = &hscenarios[_i];
	struct henv e;
	uint64_t n, k;
	int rc;

	henv_open(&e);
	sc->setup(&e);
	fs_count();
	rc = sc->op(&e);
	n = fs_off();
	if (getenv("KVSLAB_TEST_VERBOSE"))
		fprintf(stderr, "%s: %llu allocations, %lld kept\n", sc->name,
			(unsigned long long)n, (long long)fs_net());
	ck_assert_int_ge(rc, 0);
	if (sc->post)
		sc->post(&e, rc);
	henv_close(&e);
	for (k = 1; k <= n + 1; k++)
		hrun_one(sc, 1, k);
}
END_TEST

/*
 * The first removal from the table in a process hands an entry to
 * call_rcu(), whose worker thread liburcu creates on first use, with
 * malloc(): and liburcu aborts the process when that fails.  An eviction
 * must not allocate, even the first: the cache has the worker made when it
 * is created.  (Each test runs in a process of its own unless CK_FORK=no,
 * when an earlier test may have made the worker already.)
 */
START_TEST(test_hcache_first_eviction)
{
	struct henv e;
	ssize_t k;

	henv_open(&e);
	hsetup_unheld(&e);
	fs_fail_random(1.0, 1); /* every allocation fails */
	k = kvs_hcache_evict(e.hc, 3);
	fs_off();
	ck_assert_int_eq(k, 3);
	ck_assert_uint_eq(fs_failed(), 0); /* none was tried */
	haccounted(&e);
	henv_close(&e);
}
END_TEST

/*
 * Caching and evicting allocate nothing, however long they run: the
 * table's entries come from the cache's own slab, and a retired entry is
 * reused after a grace period, not freed and allocated again.  Every
 * allocation fails while the cache turns its whole pool over many times:
 * more retirements than the slab's pages and reserve (a quarter of the
 * pages, at least 4096 entries, kvs_hcache_create(3)) together, so that
 * retired entries are reused after grace periods, again and again.  Each
 * call succeeds without trying an allocation, and the table answers
 * exactly for the hashes cached last and for some evicted long ago.
 */
START_TEST(test_hcache_cache_never_allocates)
{
	struct henv e;
	kvs_block_hash_t h[HBLK];
	kvs_hcache_stats_t st;
	int32_t rev[HBLK];
	uint32_t seq = 10, rounds;
	int bad = 0;
	size_t n;

	henv_open(&e);
	n = e.nb / 2;
	/* 3 x (pages + 4096 + pages / 4) retirements at least. */
	rounds = (uint32_t)(3 * (e.nb + 4096 + e.nb / 4) / n + 2);
	/* The pool's pages cached first (taking a page from the pool may
	 * allocate); then no ck_assert while armed: libcheck allocates to
	 * record one. */
	for (uint32_t r = 0; r < rounds && !bad; r++, seq++) {
		if (r == 2)
			fs_fail_random(1.0, 1); /* every allocation fails */
		hashes_of(h, seq, n);
		bad |= kvs_hcache_alloc(e.hc, n, e.blk) != 0;
		bad |= kvs_hcache_cache(e.hc, e.blk, n, h, NULL, seq, e.tok) != 0;
		for (size_t i = 0; i < n; i++)
			rev[i] = e.blk[n - 1 - i];
		bad |= kvs_hcache_free(e.hc, rev, n) != 0;
		if (r % 64 == 0)
			bad |= kvs_hcache_validate(e.hc) != 0;
	}
	fs_off();
	ck_assert_int_eq(bad, 0);
	ck_assert_uint_eq(fs_failed(), 0); /* none was tried */
	ck_assert_int_eq(kvs_hcache_stats(e.hc, &st), 0);
	ck_assert_uint_ge(st.evictions, 3 * (e.nb + 4096 + e.nb / 4) - 2 * e.nb);
	/* The last two requests are cached (the pool holds two), the first
	 * ones long gone. */
	hashes_of(h, seq - 1, n);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, n, 1000), (ssize_t)n);
	hashes_of(h, seq - 2, n);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, n, 1000), (ssize_t)n);
	hashes_of(h, seq - 3, n);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, n, 1000), 0);
	hashes_of(h, 10, n);
	ck_assert_int_eq(kvs_hcache_match_ro(e.hc, h, n, 1000), 0);
	haccounted(&e);
	henv_close(&e);
}
END_TEST

START_TEST(test_hcache_random_allocations)
{
	for (uint64_t seed = 1; seed <= 40; seed++)
		hrun_one(&hscenarios[seed % NHSC], 2, seed);
}
END_TEST

/*
 * The hierarchical radix cache: an insert whose every allocation fails in
 * turn (one into an empty cache, where the leaf sets' heaps first grow;
 * one that splits a node and adds a leaf) fails with ENOMEM and leaves a
 * valid tree (a node may have been split), every node in its leaf set:
 * evicting all of it gives every device page back.
 */
static uint64_t hr_insert(int with_split, uint64_t nth)
{
	uint64_t failed;
	int32_t a[8], b[8], locs[8];
	kvs_hiradix_attr_t ha;
	kvs_hpool_attr_t hpa;
	kvs_hiradix_t *h;
	kvs_hpool_t *hp;
	struct env e;
	ssize_t rc;
	int i;

	env_open(&e);
	kvs_hpool_attr_init(&hpa);
	hp = kvs_hpool_create(e.pool, &hpa);
	ck_assert_ptr_nonnull(hp);
	kvs_hiradix_attr_init(&ha);
	ha.write_policy = KVS_WRITE_THROUGH_SELECTIVE;
	ha.hit_threshold = 1000; /* no backups: only the tree allocates */
	h = kvs_hiradix_create(e.pool, hp, &ha);
	ck_assert_ptr_nonnull(h);
	for (i = 0; i < 8; i++) {
		a[i] = 100 + i;
		b[i] = i < PS ? a[i] : 200 + i; /* a's first page, then its own */
	}
	if (with_split) {
		ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
		ck_assert_int_eq(kvs_hiradix_insert(h, a, 8, locs, NULL), 0);
	}
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, locs), 0);
	if (nth)
		fs_fail_nth(nth);
	rc = kvs_hiradix_insert(h, b, 8, locs, NULL);
	fs_off();
	failed = fs_failed();
	if (rc < 0) {
		ck_assert_int_eq(errno, ENOMEM);
		ck_assert_uint_gt(failed, 0);
		ck_assert_int_eq(kvs_pool_free(e.pool, 8, locs), 0);
	} else {
		ck_assert_int_eq(rc, with_split ? PS : 0);
		ck_assert_int_eq(kvs_pool_free(e.pool, (size_t)rc, locs), 0);
	}
	ck_assert_int_eq(kvs_hiradix_validate(h), 0);
	kvs_hiradix_evict_device(h, CAP);
	ck_assert_uint_eq(kvs_hiradix_stat(h, KVS_HIRADIX_STAT_nodes), 0);
	ck_assert_uint_eq(kvs_pool_available(e.pool), kvs_pool_capacity(e.pool));
	ck_assert_int_eq(kvs_hiradix_destroy(h), 0);
	ck_assert_int_eq(kvs_hpool_destroy(hp), 0);
	env_close(&e);
	return failed;
}

START_TEST(test_hiradix_every_allocation)
{
	uint64_t k = 1;

	while (hr_insert(_i, k))
		k++;
	/* Into an empty cache: both heaps grow, then the node's three. */
	ck_assert_uint_ge(k, _i ? 4 : 6);
}
END_TEST

static Suite *failslab_suite(void)
{
	Suite *s = suite_create("failslab");
	TCase *tc = tcase_create("sweep");

	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_every_allocation, 0,
			    (int)(sizeof(scenarios) / sizeof(scenarios[0])));
	tcase_add_test(tc, test_random_allocations);
	tcase_add_loop_test(tc, test_hcache_every_allocation, 0, (int)NHSC);
	tcase_add_test(tc, test_hcache_random_allocations);
	tcase_add_test(tc, test_hcache_first_eviction);
	tcase_add_test(tc, test_hcache_cache_never_allocates);
	tcase_add_loop_test(tc, test_hiradix_every_allocation, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* valgrind's allocator must see every allocation: not here. */
	if (getenv("KVSLAB_UNDER_VALGRIND"))
		return 77;
	return tu_run(failslab_suite());
}
