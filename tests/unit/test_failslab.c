/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_failslab.c - every allocation of the main scenarios,
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
 */
#include <errno.h>
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

static Suite *failslab_suite(void)
{
	Suite *s = suite_create("failslab");
	TCase *tc = tcase_create("sweep");

	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_every_allocation, 0,
			    (int)(sizeof(scenarios) / sizeof(scenarios[0])));
	tcase_add_test(tc, test_random_allocations);
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
