/* SPDX-License-Identifier: MIT */
/*
 * tests/cache/test_radix.c - the radix prefix cache: SGLang's behaviour on
 * worked examples, what the calls refuse at the API boundary, a seeded
 * model test against a brute-force reference, and pinned matches beside an
 * evicting thread.  Readers beside a writer: tests/stress/stress_radix.c.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_radix_t *r;
};

static void env_open(struct env *e, uint32_t ps, int policy, uint64_t cap)
{
	kvs_pool_attr_t pa;
	kvs_radix_attr_t ra;

	e->d = kvs_drv_open("host", NULL);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = ps;
	pa.max_tokens = cap;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	kvs_radix_attr_init(&ra);
	ra.policy = policy;
	e->r = kvs_radix_create(e->pool, &ra);
	ck_assert_ptr_nonnull(e->r);
}

static void env_close(struct env *e)
{
	ck_assert_int_eq(kvs_radix_validate(e->r), 0);
	ck_assert_int_eq(kvs_radix_destroy(e->r), 0);
	/* The tree gave back every page it held. */
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(e->pool), KVS_SLAB_STAT_objects), 0);
	kvs_pool_destroy(e->pool);
	kvs_drv_close(e->d);
}

/* Allocate locations for @n tokens and insert; free the duplicates as a
 * request would.  Returns what insert returned. */
static ssize_t put(struct env *e, uint64_t extra, const int32_t *key, size_t n,
		   kvs_radix_node_t **last)
{
	int32_t *locs = malloc((n + 1) * sizeof(int32_t));
	ssize_t got;

	n = n / kvs_radix_page_size(e->r) * kvs_radix_page_size(e->r);
	ck_assert_int_eq(kvs_pool_alloc(e->pool, n, locs), 0);
	got = kvs_radix_insert(e->r, extra, key, n, locs, 0, last);
	ck_assert_int_ge(got, 0);
	if (got)
		ck_assert_int_eq(kvs_pool_free(e->pool, (size_t)got, locs), 0);
	free(locs);
	return got;
}

static ssize_t get(struct env *e, const int32_t *key, size_t n)
{
	int32_t locs[256];

	return kvs_radix_match_ro(e->r, 0, key, n, locs);
}

START_TEST(test_split_in_the_middle)
{
	struct env e;
	int32_t k1[] = {1, 2, 3, 4, 5}, q[] = {1, 2, 3, 9}, k2[] = {1, 2, 3, 4, 5, 6, 7};
	int32_t locs[8], full[8];
	kvs_radix_node_t *last;

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	ck_assert_int_eq(put(&e, 0, k1, 5, NULL), 0);
	ck_assert_uint_eq(kvs_radix_nodes(e.r), 1);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, k1, 5, full, NULL), 5);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, q, 4, locs, &last), 3);
	ck_assert_int_eq(memcmp(locs, full, 3 * sizeof(int32_t)), 0);
	ck_assert_uint_eq(kvs_radix_nodes(e.r), 2); /* [1,2,3] -> [4,5] */
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 5);
	ck_assert_ptr_ne(last, kvs_radix_root(e.r));
	/* Insert over a longer key: 5 already there, [6,7] added below. */
	ck_assert_int_eq(put(&e, 0, k2, 7, NULL), 5);
	ck_assert_uint_eq(kvs_radix_nodes(e.r), 3);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 7);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, k2, 7, locs, NULL), 7);
	ck_assert_int_eq(memcmp(locs, full, 5 * sizeof(int32_t)), 0);
	ck_assert_int_eq(kvs_radix_validate(e.r), 0);
	env_close(&e);
}
END_TEST

START_TEST(test_insert_over_partial)
{
	struct env e;
	int32_t a[] = {1, 2, 3}, b[] = {1, 2, 4, 5}, locs[4];

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	ck_assert_int_eq(put(&e, 0, a, 3, NULL), 0);
	ck_assert_int_eq(put(&e, 0, b, 4, NULL), 2);
	ck_assert_uint_eq(kvs_radix_nodes(e.r), 3); /* [1,2] -> {[3], [4,5]} */
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 5);
	ck_assert_uint_eq(kvs_radix_evictable(e.r), 5);
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, a, 3, locs), 3);
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, b, 4, locs), 4);
	/* A key that is a prefix of a node: read-only match stops inside it. */
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, b, 3, locs), 3);
	ck_assert_uint_eq(kvs_radix_nodes(e.r), 3);
	env_close(&e);
}
END_TEST

START_TEST(test_lru_order)
{
	struct env e;
	int32_t a[] = {10, 11}, b[] = {20, 21}, c[] = {30, 31}, locs[2];

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	put(&e, 0, a, 2, NULL);
	put(&e, 0, b, 2, NULL);
	put(&e, 0, c, 2, NULL);
	kvs_radix_match(e.r, 0, a, 2, locs, NULL); /* a is now the newest */
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), 2);
	ck_assert_int_eq(get(&e, b, 2), 0);
	ck_assert_int_eq(get(&e, a, 2), 2);
	ck_assert_int_eq(get(&e, c, 2), 2);
	ck_assert_int_eq(kvs_radix_evict(e.r, 2), 2);
	ck_assert_int_eq(get(&e, c, 2), 0);
	ck_assert_int_eq(get(&e, a, 2), 2);
	ck_assert_int_eq(kvs_radix_evict(e.r, 100), 2);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 0);
	env_close(&e);
}
END_TEST

START_TEST(test_lfu_order)
{
	struct env e;
	int32_t a[] = {10, 11}, b[] = {20, 21}, c[] = {30, 31}, locs[2];
	int k;

	env_open(&e, 1, KVS_EVICT_LFU, 1024);
	put(&e, 0, a, 2, NULL);
	put(&e, 0, b, 2, NULL);
	put(&e, 0, c, 2, NULL);
	for (k = 0; k < 3; k++)
		kvs_radix_match(e.r, 0, a, 2, locs, NULL);
	kvs_radix_match(e.r, 0, c, 2, locs, NULL);
	kvs_radix_match(e.r, 0, b, 2, locs, NULL);
	kvs_radix_match(e.r, 0, b, 2, locs, NULL); /* b: 2 hits, newest */
	/* LFU: c (1 hit) first although b was used last, then b, then a. */
	ck_assert_int_eq(kvs_radix_evict(e.r, 2), 2);
	ck_assert_int_eq(get(&e, c, 2), 0);
	ck_assert_int_eq(kvs_radix_evict(e.r, 2), 2);
	ck_assert_int_eq(get(&e, b, 2), 0);
	ck_assert_int_eq(get(&e, a, 2), 2);
	env_close(&e);
}
END_TEST

START_TEST(test_fifo_and_priority)
{
	struct env e;
	int32_t a[] = {10, 11}, b[] = {20, 21}, c[] = {30, 31}, locs[2];
	int32_t l2[2];

	env_open(&e, 1, KVS_EVICT_FIFO, 1024);
	put(&e, 0, a, 2, NULL);
	put(&e, 0, b, 2, NULL);
	kvs_radix_match(e.r, 0, a, 2, locs, NULL); /* FIFO ignores use */
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), 2);
	ck_assert_int_eq(get(&e, a, 2), 0);
	env_close(&e);

	env_open(&e, 1, KVS_EVICT_PRIORITY, 1024);
	kvs_pool_alloc(e.pool, 2, l2);
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, a, 2, l2, 5, NULL), 0);
	kvs_pool_alloc(e.pool, 2, l2);
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, b, 2, l2, 1, NULL), 0);
	kvs_pool_alloc(e.pool, 2, l2);
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, c, 2, l2, 3, NULL), 0);
	kvs_radix_match(e.r, 0, b, 2, locs, NULL); /* recency loses to priority */
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), 2);
	ck_assert_int_eq(get(&e, b, 2), 0);
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), 2);
	ck_assert_int_eq(get(&e, c, 2), 0);
	ck_assert_int_eq(get(&e, a, 2), 2);
	env_close(&e);
}
END_TEST

START_TEST(test_lock_protects_path)
{
	struct env e;
	int32_t k[] = {1, 2, 3, 4}, other[] = {7, 8}, locs[4];
	kvs_radix_node_t *last;

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	put(&e, 0, k, 4, NULL);
	put(&e, 0, other, 2, NULL);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, k, 2, locs, &last), 2); /* splits */
	ck_assert_int_eq(kvs_radix_lock(e.r, last), 0);
	ck_assert_uint_eq(kvs_radix_protected(e.r), 2);
	ck_assert_uint_eq(kvs_radix_evictable(e.r), 4);
	ck_assert_int_eq(kvs_radix_evict(e.r, 100), 4); /* [3,4] and [7,8] */
	ck_assert_int_eq(get(&e, k, 4), 2);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 2);
	ck_assert_int_eq(kvs_radix_validate(e.r), 0);
	ck_assert_int_eq(kvs_radix_unlock(e.r, last), 0);
	errno = 0;
	ck_assert_int_eq(kvs_radix_unlock(e.r, last), -1); /* not locked */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_radix_evictable(e.r), 2);
	ck_assert_uint_eq(kvs_radix_protected(e.r), 0);
	ck_assert_int_eq(kvs_radix_evict(e.r, 100), 2);
	env_close(&e);
}
END_TEST

START_TEST(test_page_size_16)
{
	struct env e;
	int32_t k[40], q[40], locs[40], full[40];
	int i;

	for (i = 0; i < 40; i++)
		k[i] = q[i] = 100 + i;
	q[20] = -1;
	env_open(&e, 16, KVS_EVICT_LRU, 4096);
	ck_assert_int_eq(put(&e, 0, k, 40, NULL), 0); /* 32 tokens: whole pages */
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 32);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, k, 40, full, NULL), 32);
	for (i = 0; i < 32; i++) /* page-aligned values */
		ck_assert_int_eq(full[i] % 16, i % 16);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, q, 40, locs, NULL), 16); /* mismatch in page 2 */
	ck_assert_uint_eq(kvs_radix_nodes(e.r), 2);
	ck_assert_int_eq(memcmp(locs, full, 16 * sizeof(int32_t)), 0);
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, k, 15, locs), 0); /* under a page */
	ck_assert_int_eq(kvs_radix_validate(e.r), 0);
	env_close(&e);
}
END_TEST

START_TEST(test_extra_keys)
{
	struct env e;
	int32_t k[] = {5, 6, 7}, locs[3];

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	ck_assert_int_eq(put(&e, 1, k, 3, NULL), 0);
	ck_assert_int_eq(kvs_radix_match(e.r, 2, k, 3, locs, NULL), 0);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, k, 3, locs, NULL), 0);
	ck_assert_int_eq(put(&e, 2, k, 3, NULL), 0); /* not shared */
	ck_assert_uint_eq(kvs_radix_nodes(e.r), 2);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 6);
	ck_assert_int_eq(kvs_radix_match(e.r, 1, k, 3, locs, NULL), 3);
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 2, k, 3, locs), 3);
	env_close(&e);
}
END_TEST

struct evlog {
	uint64_t stored[64], removed[64];
	int ns, nr;
	uint64_t parent_of_second;
	int32_t tok[64][4];		/* a stored page's token ids, copied */
	int removed_with_tokens;
};

static void on_event(void *arg, const kvs_kv_event_t *ev)
{
	struct evlog *l = arg;

	if (ev->type == KVS_KV_STORED) {
		if (l->ns == 1)
			l->parent_of_second = ev->parent_hash;
		if (ev->token_ids && ev->tokens == 4)
			memcpy(l->tok[l->ns], ev->token_ids, sizeof(l->tok[0]));
		else
			l->tok[l->ns][0] = -1;
		l->stored[l->ns++] = ev->hash;
	} else {
		l->removed_with_tokens += ev->token_ids != NULL;
		l->removed[l->nr++] = ev->hash;
	}
}

static int has(const uint64_t *v, int n, uint64_t x)
{
	for (int i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

START_TEST(test_kv_events)
{
	struct env e;
	struct evlog log;
	kvs_radix_attr_t ra;
	int32_t k[8] = {1, 2, 3, 4, 5, 6, 7, 8}, k2[8] = {1, 2, 3, 4, 9, 9, 9, 9}, locs[8];
	int i;

	memset(&log, 0, sizeof(log));
	env_open(&e, 4, KVS_EVICT_LRU, 1024);
	kvs_radix_destroy(e.r);
	kvs_radix_attr_init(&ra);
	ra.event_cb = on_event;
	ra.event_arg = &log;
	e.r = kvs_radix_create(e.pool, &ra);
	put(&e, 0, k, 8, NULL);
	ck_assert_int_eq(log.ns, 2); /* two pages */
	ck_assert_uint_eq(log.parent_of_second, log.stored[0]);
	/* Each stored page carries its own token ids. */
	ck_assert_mem_eq(log.tok[0], &k[0], 4 * sizeof(int32_t));
	ck_assert_mem_eq(log.tok[1], &k[4], 4 * sizeof(int32_t));
	kvs_radix_match(e.r, 0, k2, 8, locs, NULL); /* split: no new blocks */
	ck_assert_int_eq(log.ns, 2);
	put(&e, 0, k2, 8, NULL);
	ck_assert_int_eq(log.ns, 3);
	ck_assert_mem_eq(log.tok[2], &k2[4], 4 * sizeof(int32_t)); /* only the new page */
	ck_assert_int_eq(kvs_radix_evict(e.r, 100), 12);
	ck_assert_int_eq(log.nr, 3);
	ck_assert_int_eq(log.removed_with_tokens, 0);
	for (i = 0; i < 3; i++) /* what was removed is what was stored */
		ck_assert(has(log.stored, log.ns, log.removed[i]));
	ck_assert(log.removed[0] != log.removed[1]);
	env_close(&e);
}
END_TEST

/* An event callback may read the tree with kvs_radix_match_ro(). */
struct reentry {
	kvs_radix_t *r;
	int32_t key[8];
	ssize_t seen[8];
	int n;
};

static void on_event_read(void *arg, const kvs_kv_event_t *ev)
{
	struct reentry *re = arg;
	int32_t locs[8];

	(void)ev;
	if (re->n < 8)
		re->seen[re->n++] = kvs_radix_match_ro(re->r, 0, re->key, 8, locs);
}

START_TEST(test_event_callback_reads)
{
	struct env e;
	struct reentry re;
	kvs_radix_attr_t ra;
	int i;

	env_open(&e, 4, KVS_EVICT_LRU, 1024);
	kvs_radix_destroy(e.r);
	memset(&re, 0, sizeof(re));
	for (i = 0; i < 8; i++)
		re.key[i] = 40 + i;
	kvs_radix_attr_init(&ra);
	ra.event_cb = on_event_read;
	ra.event_arg = &re;
	e.r = re.r = kvs_radix_create(e.pool, &ra);
	put(&e, 0, re.key, 8, NULL);
	ck_assert_int_eq(re.n, 2);
	ck_assert_int_eq(re.seen[0], 8); /* stored events come after the write */
	ck_assert_int_eq(kvs_radix_evict(e.r, 100), 8);
	ck_assert_int_eq(re.n, 4);
	ck_assert_int_eq(re.seen[2], 0); /* removed: no longer matched */
	env_close(&e);
}
END_TEST

START_TEST(test_disabled)
{
	struct env e;
	kvs_radix_attr_t ra;
	int32_t k[] = {1, 2, 3}, locs[3];

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	kvs_radix_destroy(e.r);
	kvs_radix_attr_init(&ra);
	ra.disabled = 1;
	e.r = kvs_radix_create(e.pool, &ra);
	/* Keeps nothing: as SGLang's, insert returns 0; the tree takes the
	 * pages over and frees them at once (env_close sees none held). */
	ck_assert_int_eq(put(&e, 0, k, 3, NULL), 0);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(e.pool), KVS_SLAB_STAT_objects), 0);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, k, 3, locs, NULL), 0);
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, k, 3, locs), 0);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 0);
	ck_assert_int_eq(kvs_radix_evict(e.r, 10), 0);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ model test */

/* The reference: every cached page-aligned prefix, found by brute force. */
struct ref_page {
	uint64_t extra;
	uint32_t len;			/* prefix length, a page multiple */
	int32_t *prefix;		/* len tokens */
	int32_t *vals;			/* the last page's locations */
};

struct ref {
	struct ref_page *p;
	size_t n, cap;
	uint32_t ps;
};

static struct ref_page *ref_find(struct ref *rf, uint64_t extra, const int32_t *key, uint32_t len)
{
	for (size_t i = 0; i < rf->n; i++)
		if (rf->p[i].extra == extra && rf->p[i].len == len &&
		    memcmp(rf->p[i].prefix, key, len * sizeof(int32_t)) == 0)
			return &rf->p[i];
	return NULL;
}

static void ref_add(struct ref *rf, uint64_t extra, const int32_t *key, uint32_t len,
		    const int32_t *vals)
{
	struct ref_page *p;

	if (rf->n == rf->cap) {
		rf->cap = rf->cap ? 2 * rf->cap : 256;
		rf->p = realloc(rf->p, rf->cap * sizeof(*rf->p));
	}
	p = &rf->p[rf->n++];
	p->extra = extra;
	p->len = len;
	p->prefix = malloc(len * sizeof(int32_t));
	p->vals = malloc(rf->ps * sizeof(int32_t));
	memcpy(p->prefix, key, len * sizeof(int32_t));
	memcpy(p->vals, vals, rf->ps * sizeof(int32_t));
}

/* Longest cached prefix and its locations, by brute force. */
static size_t ref_match(struct ref *rf, uint64_t extra, const int32_t *key, size_t n,
			int32_t *locs)
{
	size_t len = 0;
	struct ref_page *p;

	while (len + rf->ps <= n && (p = ref_find(rf, extra, key, (uint32_t)(len + rf->ps)))) {
		memcpy(locs + len, p->vals, rf->ps * sizeof(int32_t));
		len += rf->ps;
	}
	return len;
}

/* Drop the pages the tree evicted: their locations went back to the pool. */
static size_t ref_sync(struct ref *rf, kvs_pool_t *pool)
{
	size_t i = 0, dropped = 0;
	kvs_slab_t *s = kvs_pool_slab(pool);

	while (i < rf->n) {
		if (kvs_slab_refcount(s, (uint32_t)rf->p[i].vals[0] / rf->ps) == 0) {
			free(rf->p[i].prefix);
			free(rf->p[i].vals);
			rf->p[i] = rf->p[--rf->n];
			dropped++;
		} else {
			i++;
		}
	}
	return dropped;
}

struct held_lock {
	kvs_radix_node_t *node;
	uint64_t extra;
	int32_t key[64];
	size_t len;
};

static void model_run(uint32_t ps, int policy, uint64_t seed, int steps)
{
	struct env e;
	struct ref rf = {NULL, 0, 0, ps};
	struct held_lock locks[8];
	int nlocks = 0, step;
	uint64_t x = seed;
	int32_t key[64], locs[64], want[64];

	env_open(&e, ps, policy, 1 << 16);
	for (step = 0; step < steps; step++) {
		uint64_t op = tu_rng(&x) % 100, extra = tu_rng(&x) % 3 == 0;
		size_t n = 1 + tu_rng(&x) % (ps == 1 ? 24 : 48), i, m, exp;

		/* Few distinct tokens: lots of shared prefixes and splits. */
		for (i = 0; i < n; i++)
			key[i] = (int32_t)(tu_rng(&x) % (i < 4 ? 2 : 3));
		if (op < 40) { /* insert, as a finished request does */
			size_t al = n / ps * ps;
			ssize_t got;
			kvs_radix_node_t *last;

			if (kvs_pool_available(e.pool) < al + 64)
				kvs_radix_evict(e.r, 256);
			ref_sync(&rf, e.pool);
			ck_assert_int_eq(kvs_pool_alloc(e.pool, al, locs), 0);
			exp = ref_match(&rf, extra, key, al, want);
			got = kvs_radix_insert(e.r, extra, key, n, locs, (int)(tu_rng(&x) % 4), &last);
			ck_assert_int_eq(got, (ssize_t)exp);
			if (got)
				ck_assert_int_eq(kvs_pool_free(e.pool, (size_t)got, locs), 0);
			for (i = exp; i < al; i += ps)
				ref_add(&rf, extra, key, (uint32_t)(i + ps), locs + i);
		} else if (op < 60) { /* match (splits) */
			kvs_radix_node_t *last;

			exp = ref_match(&rf, extra, key, n, want);
			m = (size_t)kvs_radix_match(e.r, extra, key, n, locs, &last);
			ck_assert_uint_eq(m, exp);
			ck_assert_int_eq(memcmp(locs, want, m * sizeof(int32_t)), 0);
			if (m && nlocks < 8 && tu_rng(&x) % 2) {
				ck_assert_int_eq(kvs_radix_lock(e.r, last), 0);
				locks[nlocks].node = last;
				locks[nlocks].extra = extra;
				memcpy(locks[nlocks].key, key, m * sizeof(int32_t));
				locks[nlocks++].len = m;
			}
		} else if (op < 75) { /* read-only match */
			exp = ref_match(&rf, extra, key, n, want);
			m = (size_t)kvs_radix_match_ro(e.r, extra, key, n, locs);
			ck_assert_uint_eq(m, exp);
			ck_assert_int_eq(memcmp(locs, want, m * sizeof(int32_t)), 0);
		} else if (op < 85 && nlocks) { /* unlock */
			int j = (int)(tu_rng(&x) % (uint64_t)nlocks);

			ck_assert_int_eq(kvs_radix_unlock(e.r, locks[j].node), 0);
			locks[j] = locks[--nlocks];
		} else { /* evict */
			size_t ask = tu_rng(&x) % 40;
			uint64_t before = kvs_radix_tokens(e.r);
			ssize_t ev = kvs_radix_evict(e.r, ask);
			int j;

			ck_assert_int_ge(ev, 0);
			ck_assert_uint_eq(kvs_radix_tokens(e.r), before - (uint64_t)ev);
			ck_assert_uint_eq(ref_sync(&rf, e.pool) * ps, (uint64_t)ev);
			if ((size_t)ev < ask) /* stopped short: nothing evictable left */
				ck_assert_uint_eq(kvs_radix_evictable(e.r), 0);
			/* Locked prefixes survive. */
			for (j = 0; j < nlocks; j++)
				ck_assert_uint_eq(ref_match(&rf, locks[j].extra, locks[j].key,
							    locks[j].len, want),
						  locks[j].len);
		}
		ck_assert_int_eq(kvs_radix_validate(e.r), 0);
		ck_assert_uint_eq(kvs_radix_tokens(e.r), rf.n * ps);
		ck_assert_uint_eq(kvs_radix_evictable(e.r) + kvs_radix_protected(e.r),
				  kvs_radix_tokens(e.r));
	}
	while (nlocks)
		ck_assert_int_eq(kvs_radix_unlock(e.r, locks[--nlocks].node), 0);
	ck_assert_uint_eq(kvs_radix_protected(e.r), 0);
	for (size_t i = 0; i < rf.n; i++) {
		free(rf.p[i].prefix);
		free(rf.p[i].vals);
	}
	free(rf.p);
	env_close(&e);
}

START_TEST(test_model_ps1_lru)
{
	model_run(1, KVS_EVICT_LRU, 0x1111, (int)tu_scaled(4000, 500));
}
END_TEST

START_TEST(test_model_ps4_lfu)
{
	model_run(4, KVS_EVICT_LFU, 0x2222, (int)tu_scaled(3000, 500));
}
END_TEST

START_TEST(test_model_ps16_priority)
{
	model_run(16, KVS_EVICT_PRIORITY, 0x3333, (int)tu_scaled(3000, 500));
}
END_TEST

START_TEST(test_model_ps1_fifo)
{
	model_run(1, KVS_EVICT_FIFO, 0x4444, (int)tu_scaled(3000, 500));
}
END_TEST

/* ------------------------------------------------- trust at the boundary */

/* Insert @n tokens of @key at @locs; the call must fail with EINVAL and
 * leave the tree as it was. */
static void insert_refused(struct env *e, const int32_t *key, size_t n, const int32_t *locs)
{
	uint64_t tokens = kvs_radix_tokens(e->r), nodes = kvs_radix_nodes(e->r);
	kvs_radix_node_t *last = NULL;

	errno = 0;
	ck_assert_int_eq(kvs_radix_insert(e->r, 0, key, n, locs, 0, &last), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(last);
	errno = 0;
	ck_assert_int_eq(kvs_radix_insert_lock(e->r, 0, key, n, locs, 0, &last), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_radix_tokens(e->r), tokens);
	ck_assert_uint_eq(kvs_radix_nodes(e->r), nodes);
	ck_assert_uint_eq(kvs_radix_protected(e->r), 0);
	ck_assert_int_eq(kvs_radix_validate(e->r), 0);
}

START_TEST(test_insert_checks_locations)
{
	struct env e;
	int32_t k[8] = {1, 2, 3, 4, 5, 6, 7, 8}, k2[8] = {9, 9, 9, 9, 8, 8, 8, 8};
	int32_t a[8], bad[8], other[4];
	uint64_t cap;

	env_open(&e, 4, KVS_EVICT_LRU, 1024);
	cap = kvs_pool_capacity(e.pool);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, a), 0);
	/* The same page twice in one call. */
	memcpy(bad, a, 4 * sizeof(int32_t));
	memcpy(bad + 4, a, 4 * sizeof(int32_t));
	insert_refused(&e, k, 8, bad);
	/* A page that straddles two pool pages. */
	for (int i = 0; i < 8; i++)
		bad[i] = a[0] + 2 + i;
	insert_refused(&e, k, 8, bad);
	/* Tokens of a page out of order. */
	memcpy(bad, a, sizeof(a));
	bad[1] = a[2];
	bad[2] = a[1];
	insert_refused(&e, k, 8, bad);
	/* A negative location. */
	memcpy(bad, a, sizeof(a));
	for (int i = 4; i < 8; i++)
		bad[i] = -7;
	insert_refused(&e, k, 8, bad);
	/* Beyond the pool's capacity. */
	for (int i = 4; i < 8; i++)
		bad[i] = (int32_t)cap + i - 4;
	insert_refused(&e, k, 8, bad);
	/* A page the caller does not hold (refcount 0). */
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 4, other), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 4, other), 0);
	ck_assert_int_eq(kvs_slab_refcount(kvs_pool_slab(e.pool), (uint32_t)other[0] / 4), 0);
	memcpy(bad + 4, other, sizeof(other));
	insert_refused(&e, k, 8, bad);
	/* The good call goes in. */
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, k, 8, a, 0, NULL), 0);
	/* A page the tree already holds, handed over again for another key. */
	insert_refused(&e, k2, 8, a);
	/* But the tree's own pages as the already-cached part are fine. */
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, k, 8, a, 0, NULL), 8);
	env_close(&e);
}
END_TEST

/* The checks work a run of consecutive pages at a time, eight tokens a
 * step: a bad location anywhere in a long run, a run that overlaps
 * another, a run that ends beyond the pool, page sizes 1 and 3 (not a
 * power of two), and a tree page inside a run that straddles the part
 * already cached. */
START_TEST(test_insert_checks_runs)
{
	static const uint32_t pss[] = {1, 3};

	for (size_t t = 0; t < 2; t++) {
		uint32_t ps = pss[t];
		struct env e;
		int32_t k[96], a[96], bad[96], b[48], c[48], c2[96];
		uint64_t cap;

		env_open(&e, ps, KVS_EVICT_LRU, 3072);
		cap = kvs_pool_capacity(e.pool);
		for (int i = 0; i < 96; i++)
			k[i] = 1000 + i;
		ck_assert_int_eq(kvs_pool_alloc(e.pool, 96, a), 0);
		/* Every token of the run in turn, moved so that the run breaks
		 * there (one before its neighbour, or a page's token out of
		 * order); the page moved to is held by the caller. */
		for (int at = 1; at < 96; at += 7) {
			memcpy(bad, a, sizeof(a));
			bad[at] = a[at - 1];
			insert_refused(&e, k, 96, bad);
		}
		/* A run overlapping an earlier one by whole pages. */
		memcpy(bad, a, 48 * sizeof(int32_t));
		memcpy(bad + 48, a + 24, 48 * sizeof(int32_t));
		insert_refused(&e, k, 96, bad);
		/* A negative location deep in the run, and a run that runs off
		 * the end of the pool. */
		memcpy(bad, a, sizeof(a));
		bad[40 / ps * ps] = -(int32_t)ps;
		insert_refused(&e, k, 96, bad);
		for (int i = 0; i < 96; i++)
			bad[i] = (int32_t)cap - 48 + i;
		insert_refused(&e, k, 96, bad);
		/* Shifted by one token: every page straddles two. */
		if (ps > 1) {
			for (int i = 0; i < 96; i++)
				bad[i] = a[0] + 1 + i;
			insert_refused(&e, k, 96, bad);
		}
		/* A page the caller does not hold, in the middle of a long
		 * run (its counts are read four at a time). */
		memcpy(bad, a, sizeof(a));
		ck_assert_int_eq(kvs_pool_alloc(e.pool, 96, c2), 0);
		ck_assert_int_eq(kvs_pool_free(e.pool, ps, &c2[51 / ps * ps]), 0);
		insert_refused(&e, k, 96, c2);
		ck_assert_int_eq(kvs_pool_free(e.pool, 51 / ps * ps, c2), 0);
		ck_assert_int_eq(kvs_pool_free(e.pool, 96 - 51 / ps * ps - ps, c2 + 51 / ps * ps + ps), 0);
		/* The first half goes in; then the whole key over fresh pages
		 * (the cached half's are the caller's duplicates), whose new
		 * half holds one of the tree's pages in the middle of a run. */
		ck_assert_int_eq(kvs_radix_insert(e.r, 0, k, 48, a, 0, NULL), 0);
		ck_assert_int_eq(kvs_pool_alloc(e.pool, 48, b), 0);
		ck_assert_int_eq(kvs_pool_alloc(e.pool, 48, c), 0);
		memcpy(bad, c, 48 * sizeof(int32_t));
		memcpy(bad + 48, b, 48 * sizeof(int32_t));
		for (uint32_t j = 0; j < ps; j++)
			bad[48 + 2 * ps + j] = a[ps + j];
		insert_refused(&e, k, 96, bad);
		/* The caller's own pages as the cached part, new ones after. */
		memcpy(bad + 48, b, 48 * sizeof(int32_t));
		ck_assert_int_eq(kvs_radix_insert(e.r, 0, k, 96, bad, 0, NULL), 48);
		ck_assert_int_eq(kvs_pool_free(e.pool, 48, c), 0);
		ck_assert_int_eq(kvs_pool_free(e.pool, 48, a + 48), 0);
		ck_assert_uint_eq(kvs_radix_tokens(e.r), 96);
		env_close(&e);
	}
}
END_TEST

/* An insert checks only the locations it stores: those of the part the
 * tree does not hold yet.  With the tree's own locations (a locked
 * match's) as the cached part, a bad location in the new part is still
 * refused with EINVAL and changes nothing; the cached part's locations are
 * ignored, whatever they are, and the tree keeps its own. */
/* Locations for the pages listed in @pg (-1 ends the list), page p being
 * tokens a[p * ps ...] of one allocation; returns the tokens written. */
static size_t pages_locs(const int32_t *a, uint32_t ps, const int *pg, int32_t *out)
{
	size_t n = 0;

	for (; *pg >= 0; pg++)
		for (uint32_t j = 0; j < ps; j++)
			out[n++] = a[(size_t)*pg * ps + j];
	return n;
}

/* The duplicate check takes runs that come in ascending order, apart, as
 * free of duplicates without its bitmap: a page named twice in any other
 * order (after, inside or right at the end of an earlier run, far later)
 * is still refused, distinct pages in any order go in, and a refusal
 * leaves the bitmap clear for the next call. */
START_TEST(test_insert_checks_run_order)
{
	static const uint32_t pss[] = {1, 4};
	static const int dups[][48] = {
		{0, 1, 2, 3, 8, 9, 10, 11, 2, -1},	/* ascending, then an early page */
		{0, 1, 2, 3, 3, 4, 5, 6, -1},		/* overlapping the last page */
		{5, 5, -1},				/* the same page twice in a row */
		{0, 1, 2, 3, 1, 2, 3, 4, -1},		/* inside the run before */
		{20, 21, 8, 9, 20, -1},			/* descending, then a repeat */
		{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36,
		 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62, 0, -1},
	};
	static const int up[] = {0, 1, 2, 3, 8, 9, 10, 11, 20, 21, 22, 23, 40, 41, 42, 43,
				 44, 45, 46, 47, -1};
	static const int down[] = {60, 61, 62, 63, 50, 51, 52, 53, 30, 31, 32, 33, 12, 13, 14,
				   15, -1};

	for (size_t t = 0; t < 2; t++) {
		uint32_t ps = pss[t];
		struct env e;
		int32_t a[64 * 4], locs[64 * 4], got[64 * 4], k[64 * 4];
		size_t n;

		env_open(&e, ps, KVS_EVICT_LRU, 1024);
		ck_assert_int_eq(kvs_pool_alloc(e.pool, 64 * ps, a), 0);
		for (size_t i = 0; i < 64 * ps; i++)
			k[i] = 5000 + (int32_t)i;
		for (size_t d = 0; d < sizeof(dups) / sizeof(dups[0]); d++) {
			n = pages_locs(a, ps, dups[d], locs);
			insert_refused(&e, k, n, locs);
		}
		/* Ascending with gaps (no bitmap), then descending (the bitmap,
		 * which the refusals above must have left clear). */
		n = pages_locs(a, ps, up, locs);
		ck_assert_int_eq(kvs_radix_insert(e.r, 1, k, n, locs, 0, NULL), 0);
		ck_assert_int_eq(kvs_radix_match_ro(e.r, 1, k, n, got), (ssize_t)n);
		ck_assert_int_eq(memcmp(got, locs, n * sizeof(int32_t)), 0);
		n = pages_locs(a, ps, down, locs);
		ck_assert_int_eq(kvs_radix_insert(e.r, 2, k, n, locs, 0, NULL), 0);
		ck_assert_int_eq(kvs_radix_match_ro(e.r, 2, k, n, got), (ssize_t)n);
		ck_assert_int_eq(memcmp(got, locs, n * sizeof(int32_t)), 0);
		/* Pages of the tree, ascending: refused as the tree's. */
		n = pages_locs(a, ps, up, locs);
		insert_refused(&e, k + 1, n, locs);
		ck_assert_int_eq(kvs_radix_validate(e.r), 0);
		/* Give back the pages the tree did not take. */
		for (int p = 0; p < 64; p++) {
			bool taken = false;

			for (const int *q = up; *q >= 0; q++)
				taken = taken || *q == p;
			for (const int *q = down; *q >= 0; q++)
				taken = taken || *q == p;
			if (!taken)
				ck_assert_int_eq(kvs_pool_free(e.pool, ps, a + (size_t)p * ps), 0);
		}
		env_close(&e);
	}
}
END_TEST

/* Keys are compared 256 bytes a step, then 32, then one token: a key that
 * differs from the cached one at any token, near those steps' edges or
 * not, matches (and an insert finds cached) exactly the whole pages before
 * that token, through every kind of match. */
START_TEST(test_match_differs_anywhere)
{
	static const uint32_t pss[] = {1, 16};
	static const int at[] = {0, 1, 7, 8, 9, 31, 32, 63, 64, 65, 71, 72, 127, 128, 129,
				 191, 192, 255, 256, 257, 300, 511, 512, 513, 700, 998, 999};
	enum { N = 1000 };

	for (size_t t = 0; t < 2; t++) {
		uint32_t ps = pss[t];
		size_t full = N / ps * ps;

		for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
			struct env e;
			int32_t *k = malloc(N * sizeof(int32_t)), *q = malloc(N * sizeof(int32_t));
			int32_t *locs = malloc(N * sizeof(int32_t)), *got = malloc(N * sizeof(int32_t));
			size_t want = (size_t)at[i] / ps * ps;
			kvs_radix_node_t *last;

			ck_assert_ptr_nonnull(k);
			ck_assert_ptr_nonnull(q);
			ck_assert_ptr_nonnull(locs);
			ck_assert_ptr_nonnull(got);
			env_open(&e, ps, KVS_EVICT_LRU, 4096);
			for (int j = 0; j < N; j++)
				k[j] = q[j] = 7 * j + 3;
			q[at[i]] = -1;
			ck_assert_int_eq(kvs_pool_alloc(e.pool, full, locs), 0);
			ck_assert_int_eq(kvs_radix_insert(e.r, 0, k, full, locs, 0, NULL), 0);
			/* The whole key, then the one that differs at at[i]. */
			ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, k, N, got), (ssize_t)full);
			ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, q, N, got), (ssize_t)want);
			ck_assert_int_eq(memcmp(got, locs, want * sizeof(int32_t)), 0);
			ck_assert_int_eq(kvs_radix_match(e.r, 0, q, N, got, &last), (ssize_t)want);
			ck_assert_int_eq(memcmp(got, locs, want * sizeof(int32_t)), 0);
			/* After the split (if any), the tree holds both halves. */
			ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, k, N, got), (ssize_t)full);
			ck_assert_int_eq(memcmp(got, locs, full * sizeof(int32_t)), 0);
			/* An insert of the differing key walks the same compare. */
			ck_assert_int_eq(put(&e, 0, q, N, NULL), (ssize_t)want);
			ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, q, N, got), (ssize_t)full);
			ck_assert_int_eq(memcmp(got, locs, want * sizeof(int32_t)), 0);
			env_close(&e);
			free(k);
			free(q);
			free(locs);
			free(got);
		}
	}
}
END_TEST

START_TEST(test_insert_checks_new_part_only)
{
	struct env e;
	int32_t k[16], a[8], b[8], m[16], bad[16], gone[4];
	kvs_radix_node_t *last;
	kvs_slab_t *slab;

	env_open(&e, 4, KVS_EVICT_LRU, 1024);
	slab = kvs_pool_slab(e.pool);
	for (int i = 0; i < 16; i++)
		k[i] = 100 + i;
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, a), 0);
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, k, 8, a, 0, NULL), 0);
	/* A request matches the first 8 tokens (locked) and computes 8 more. */
	ck_assert_int_eq(kvs_radix_match(e.r, 0, k, 16, m, &last), 8);
	ck_assert_int_eq(kvs_radix_lock(e.r, last), 0);
	ck_assert_int_eq(memcmp(m, a, sizeof(a)), 0);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, b), 0);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 4, gone), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 4, gone), 0);
	ck_assert_int_eq(kvs_radix_unlock(e.r, last), 0);
	/* The new part: negative, beyond the pool, a page twice, a page the
	 * caller does not hold, a page of the tree, a page out of order. */
	for (int c = 0; c < 6; c++) {
		memcpy(bad, m, 8 * sizeof(int32_t));
		memcpy(bad + 8, b, 8 * sizeof(int32_t));
		for (int j = 0; j < 4; j++) {
			int32_t *p = &bad[12 + j];

			*p = c == 0 ? -4 + j
			   : c == 1 ? (int32_t)kvs_pool_capacity(e.pool) + j
			   : c == 2 ? b[j]
			   : c == 3 ? gone[j]
			   : c == 4 ? a[4 + j]
			   : b[4 + (j ^ 1)];
		}
		insert_refused(&e, k, 16, bad);
		/* Nothing taken over: the caller still holds each new page once. */
		ck_assert_int_eq(kvs_slab_refcount(slab, (uint32_t)b[0] / 4), 1);
		ck_assert_int_eq(kvs_slab_refcount(slab, (uint32_t)b[4] / 4), 1);
	}
	/* The cached part's locations are not looked at: the tree's own (the
	 * match's), or anything at all. */
	memcpy(bad, m, 8 * sizeof(int32_t));
	for (int i = 0; i < 8; i++)
		bad[i] = -1;
	memcpy(bad + 8, b, 8 * sizeof(int32_t));
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, k, 16, bad, 0, NULL), 8);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 16);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, k, 16, m, NULL), 16);
	ck_assert_int_eq(memcmp(m, a, sizeof(a)), 0);
	ck_assert_int_eq(memcmp(m + 8, b, sizeof(b)), 0);
	ck_assert_int_eq(kvs_slab_refcount(slab, (uint32_t)a[0] / 4), 1);
	ck_assert_int_eq(kvs_slab_refcount(slab, (uint32_t)b[4] / 4), 1);
	/* And the matched locations as the cached part, with a longer key. */
	for (int i = 0; i < 8; i++)
		k[i + 8] = 200 + i;
	memcpy(bad, a, 8 * sizeof(int32_t));
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 8, bad + 8), 0);
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, k, 16, bad, 0, NULL), 8);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 24);
	env_close(&e);
}
END_TEST

static void count_frees(void *arg, const int32_t *locs, size_t n)
{
	(void)locs;
	*(size_t *)arg += n;
}

/* Without a pool only negative locations are out of range; a page twice
 * in one call is still refused. */
START_TEST(test_insert_checks_free_cb)
{
	kvs_radix_attr_t ra;
	kvs_radix_t *r;
	size_t freed = 0;
	int32_t k[] = {1, 2, 3}, dup[] = {5, 6, 5}, neg[] = {5, -7, 6}, ok[] = {5, 6, 7};

	kvs_radix_attr_init(&ra);
	ra.page_size = 1;
	ra.free_cb = count_frees;
	ra.free_arg = &freed;
	r = kvs_radix_create(NULL, &ra);
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_null(kvs_radix_pool(r));
	errno = 0;
	ck_assert_int_eq(kvs_radix_insert(r, 0, k, 3, dup, 0, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_radix_insert(r, 0, k, 3, neg, 0, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_radix_tokens(r), 0);
	ck_assert_int_eq(kvs_radix_insert(r, 0, k, 3, ok, 0, NULL), 0);
	ck_assert_int_eq(kvs_radix_validate(r), 0);
	kvs_radix_destroy(r);
	ck_assert_uint_eq(freed, 3);
}
END_TEST

/* validate finds what insert cannot refuse: the same page in two nodes of
 * a cache without a pool, and a page freed behind the tree's back. */
START_TEST(test_validate_catches_corruption)
{
	kvs_radix_attr_t ra;
	kvs_radix_t *r;
	struct env e;
	size_t freed = 0;
	int32_t k1[] = {1, 2}, k2[] = {5, 6}, locs[] = {10, 11}, pl[4];

	kvs_radix_attr_init(&ra);
	ra.page_size = 1;
	ra.free_cb = count_frees;
	ra.free_arg = &freed;
	r = kvs_radix_create(NULL, &ra);
	ck_assert_int_eq(kvs_radix_insert(r, 0, k1, 2, locs, 0, NULL), 0);
	ck_assert_int_eq(kvs_radix_validate(r), 0);
	ck_assert_int_eq(kvs_radix_insert(r, 0, k2, 2, locs, 0, NULL), 0);
	errno = 0;
	ck_assert_int_eq(kvs_radix_validate(r), -1);
	ck_assert_int_eq(errno, EUCLEAN);
	kvs_radix_destroy(r);

	/* Over a pool, frees through free_cb so the test can take the
	 * tree's page away and not have it freed twice. */
	env_open(&e, 2, KVS_EVICT_LRU, 1024);
	kvs_radix_destroy(e.r);
	ra.page_size = 0;
	e.r = kvs_radix_create(e.pool, &ra);
	ck_assert_ptr_eq(kvs_radix_pool(e.r), e.pool);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 4, pl), 0);
	ck_assert_int_eq(kvs_radix_insert(e.r, 0, (int32_t[]){1, 2, 3, 4}, 4, pl, 0, NULL), 0);
	ck_assert_int_eq(kvs_radix_validate(e.r), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 2, pl + 2), 0); /* behind its back */
	errno = 0;
	ck_assert_int_eq(kvs_radix_validate(e.r), -1);
	ck_assert_int_eq(errno, EUCLEAN);
	ck_assert_int_eq(kvs_pool_free(e.pool, 2, pl), 0);
	kvs_radix_destroy(e.r);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(e.pool), KVS_SLAB_STAT_objects), 0);
	kvs_pool_destroy(e.pool);
	kvs_drv_close(e.d);
}
END_TEST

START_TEST(test_node_of_other_tree)
{
	struct env e1, e2;
	int32_t k[] = {1, 2, 3, 4}, locs[4];
	kvs_radix_node_t *n1, *n2;

	env_open(&e1, 1, KVS_EVICT_LRU, 1024);
	env_open(&e2, 1, KVS_EVICT_LRU, 1024);
	put(&e1, 0, k, 4, NULL);
	put(&e2, 0, k, 4, NULL);
	ck_assert_int_eq(kvs_radix_match(e1.r, 0, k, 4, locs, &n1), 4);
	ck_assert_int_eq(kvs_radix_match(e2.r, 0, k, 4, locs, &n2), 4);
	errno = 0;
	ck_assert_int_eq(kvs_radix_lock(e2.r, n1), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_radix_lock(e1.r, n1), 0);
	errno = 0;
	ck_assert_int_eq(kvs_radix_unlock(e2.r, n1), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_radix_lock(e2.r, kvs_radix_root(e1.r)), -1);
	ck_assert_int_eq(kvs_radix_lock(e2.r, NULL), -1);
	ck_assert_int_eq(kvs_radix_unlock(e2.r, NULL), -1);
	ck_assert_uint_eq(kvs_radix_protected(e2.r), 0);
	ck_assert_uint_eq(kvs_radix_protected(e1.r), 4);
	/* The root: nothing to lock, and no error. */
	ck_assert_int_eq(kvs_radix_lock(e2.r, kvs_radix_root(e2.r)), 0);
	ck_assert_int_eq(kvs_radix_unlock(e2.r, kvs_radix_root(e2.r)), 0);
	ck_assert_uint_eq(kvs_radix_protected(e2.r), 0);
	ck_assert_int_eq(kvs_radix_unlock(e1.r, n1), 0);
	env_close(&e2);
	env_close(&e1);
}
END_TEST

START_TEST(test_match_lock_insert_lock)
{
	struct env e;
	int32_t k[] = {1, 2, 3, 4, 5, 6}, o[] = {7, 8}, locs[6], got[6];
	kvs_radix_node_t *a, *b, *root;

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	root = kvs_radix_root(e.r);
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 6, locs), 0);
	ck_assert_int_eq(kvs_radix_insert_lock(e.r, 0, k, 6, locs, 0, &a), 0);
	ck_assert_ptr_ne(a, root);
	ck_assert_uint_eq(kvs_radix_protected(e.r), 6);
	put(&e, 0, o, 2, NULL);
	ck_assert_int_eq(kvs_radix_evict(e.r, 100), 2); /* only [7,8] */
	ck_assert_int_eq(kvs_radix_match_lock(e.r, 0, k, 3, got, &b), 3); /* splits */
	ck_assert_int_eq(memcmp(got, locs, 3 * sizeof(int32_t)), 0);
	ck_assert_int_eq(kvs_radix_unlock(e.r, a), 0);
	ck_assert_uint_eq(kvs_radix_protected(e.r), 3);
	ck_assert_int_eq(kvs_radix_evict(e.r, 100), 3); /* [4,5,6] */
	ck_assert_int_eq(kvs_radix_match_ro(e.r, 0, k, 6, got), 3);
	ck_assert_int_eq(kvs_radix_unlock(e.r, b), 0);
	/* A miss locks the root: unlocking it is fine. */
	ck_assert_int_eq(kvs_radix_match_lock(e.r, 0, o, 2, got, &b), 0);
	ck_assert_ptr_eq(b, root);
	ck_assert_int_eq(kvs_radix_unlock(e.r, b), 0);
	errno = 0;
	ck_assert_int_eq(kvs_radix_match_lock(e.r, 0, k, 6, got, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(kvs_radix_protected(e.r), 0);
	env_close(&e);
}
END_TEST

/*
 * A split stamps both halves with the splitting call's time, as SGLang's
 * match does before _split_node.  By hand, LRU, page size 1:
 *   t1 insert [1,2,3,4]; t2 insert [5,6]; t3 match [1,2] splits the
 *   first into [1,2] and [3,4], both at t3.
 * Leaves: [5,6] (t2) and [3,4] (t3), so [5,6] goes first.  (Before, [3,4]
 * kept t1 and went first.)
 */
START_TEST(test_split_refreshes_time)
{
	struct env e;
	int32_t a[] = {1, 2, 3, 4}, b[] = {5, 6}, locs[4];

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	put(&e, 0, a, 4, NULL);
	put(&e, 0, b, 2, NULL);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, a, 2, locs, NULL), 2);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_splits), 1);
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), 2);
	ck_assert_int_eq(get(&e, b, 2), 0);
	ck_assert_int_eq(get(&e, a, 4), 4);
	ck_assert_int_eq(kvs_radix_evict(e.r, 1), 2);
	ck_assert_int_eq(get(&e, a, 4), 2);
	env_close(&e);
}
END_TEST

struct resetlog {
	int cleared, other;
};

static void on_reset_event(void *arg, const kvs_kv_event_t *ev)
{
	struct resetlog *l = arg;

	if (ev->type == KVS_KV_ALL_CLEARED)
		l->cleared++;
	else
		l->other++;
}

START_TEST(test_reset)
{
	struct env e;
	kvs_radix_attr_t ra;
	struct resetlog log = {0, 0};
	int32_t a[] = {1, 2, 3, 4}, b[] = {5, 6}, locs[4];
	kvs_radix_node_t *last;

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	kvs_radix_destroy(e.r);
	kvs_radix_attr_init(&ra);
	ra.event_cb = on_reset_event;
	ra.event_arg = &log;
	e.r = kvs_radix_create(e.pool, &ra);
	put(&e, 0, a, 4, NULL);
	put(&e, 0, b, 2, NULL);
	ck_assert_int_eq(kvs_radix_match_lock(e.r, 0, a, 2, locs, &last), 2);
	errno = 0;
	ck_assert_int_eq(kvs_radix_reset(e.r), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 6);
	ck_assert_int_eq(log.cleared, 0);
	ck_assert_int_eq(kvs_radix_unlock(e.r, last), 0);
	ck_assert_int_eq(kvs_radix_reset(e.r), 0);
	ck_assert_int_eq(log.cleared, 1);
	ck_assert_uint_eq(kvs_radix_tokens(e.r), 0);
	ck_assert_uint_eq(kvs_radix_nodes(e.r), 0);
	ck_assert_uint_eq(kvs_radix_evictable(e.r), 0);
	ck_assert_uint_eq(kvs_slab_stat(kvs_pool_slab(e.pool), KVS_SLAB_STAT_objects), 0);
	ck_assert_int_eq(get(&e, a, 4), 0);
	ck_assert_int_eq(kvs_radix_evict(e.r, 100), 0);
	ck_assert_int_eq(kvs_radix_validate(e.r), 0);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_resets), 1);
	/* The cache works as before, the same pages included. */
	ck_assert_int_eq(put(&e, 0, a, 4, NULL), 0);
	ck_assert_int_eq(get(&e, a, 4), 4);
	ck_assert_int_eq(kvs_radix_reset(NULL), -1);
	env_close(&e);
}
END_TEST

struct lines {
	int n;
	char first[160];
};

static void collect(void *arg, const char *line)
{
	struct lines *l = arg;

	if (l->n++ == 0)
		snprintf(l->first, sizeof(l->first), "%s", line);
}

START_TEST(test_stats)
{
	struct env e;
	int32_t a[] = {1, 2, 3, 4}, b[] = {1, 2, 9, 9}, locs[4];
	struct lines l = {0, ""};
	uint64_t v;
	unsigned i;

	env_open(&e, 1, KVS_EVICT_LRU, 1024);
	put(&e, 0, a, 4, NULL);				/* insert 4 */
	put(&e, 0, b, 4, NULL);				/* insert 2 more, 1 split */
	ck_assert_int_eq(kvs_radix_match(e.r, 0, a, 4, locs, NULL), 4);
	ck_assert_int_eq(kvs_radix_match(e.r, 0, a, 1, locs, NULL), 1); /* split */
	ck_assert_int_eq(get(&e, a, 4), 4);
	ck_assert_int_eq(get(&e, b, 4), 4);
	ck_assert_int_eq(kvs_radix_evict(e.r, 100), 6);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_inserts), 2);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_inserted_tokens), 6);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_matches), 2);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_hit_tokens), 5);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_match_ro), 2);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_splits), 2);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_evictions), 4);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_evicted_tokens), 6);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_reader_retries), 0);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_reader_fallbacks), 0);
	ck_assert_uint_eq(kvs_radix_stat(e.r, KVS_RADIX_STAT_resets), 0);
	for (i = 0; i < KVS_RADIX_STAT__COUNT; i++) {
		ck_assert_ptr_nonnull(kvs_radix_stat_name(i));
		ck_assert_int_eq(kvs_radix_stat_get(e.r, kvs_radix_stat_name(i), &v), 0);
		ck_assert_uint_eq(v, kvs_radix_stat(e.r, i));
	}
	ck_assert_str_eq(kvs_radix_stat_name(KVS_RADIX_STAT_hit_tokens), "hit_tokens");
	ck_assert_ptr_null(kvs_radix_stat_name(KVS_RADIX_STAT__COUNT));
	errno = 0;
	ck_assert_int_eq(kvs_radix_stat_get(e.r, "nope", &v), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(kvs_radix_stats_print(e.r, collect, &l), 0);
	ck_assert_int_eq(l.n, 1 + KVS_RADIX_STAT__COUNT);
	ck_assert_ptr_nonnull(strstr(l.first, "radix page_size 1"));
	ck_assert_int_eq(kvs_radix_stats_print(e.r, NULL, NULL), -1);
	env_close(&e);
}
END_TEST

/*
 * Pinning: one thread evicts everything in a loop while another matches
 * with kvs_radix_match_lock(), reads the locations it got and checks every
 * page is still held until it unlocks; on a miss it inserts again with
 * kvs_radix_insert_lock() and checks the same.  The verdict is an
 * invariant (no page of a locked match ever free), whatever the
 * interleaving.
 */
struct pin {
	struct env e;
	atomic_int stop;
	_Atomic uint64_t unheld;
};

static void *evictor(void *arg)
{
	struct pin *p = arg;

	while (!atomic_load(&p->stop))
		kvs_radix_evict(p->e.r, SIZE_MAX / 2);
	return NULL;
}

static void check_held(struct pin *p, const int32_t *locs, size_t n)
{
	kvs_slab_t *s = kvs_pool_slab(p->e.pool);

	for (size_t i = 0; i < n; i += 4)
		if (kvs_slab_refcount(s, (uint32_t)locs[i] / 4) <= 0)
			atomic_fetch_add(&p->unheld, 1);
}

START_TEST(test_pinned_beside_evictor)
{
	struct pin *p = calloc(1, sizeof(*p));
	int32_t keys[4][32], locs[32];
	uint64_t x = 7;
	pthread_t th;
	int i, j;

	env_open(&p->e, 4, KVS_EVICT_LRU, 4096);
	for (i = 0; i < 4; i++)
		for (j = 0; j < 32; j++)
			keys[i][j] = j < 16 ? 1 : i * 100 + j;
	pthread_create(&th, NULL, evictor, p);
	for (i = 0; i < tu_scaled(20000, 2000); i++) {
		const int32_t *k = keys[tu_rng(&x) % 4];
		kvs_radix_node_t *last;
		ssize_t m = kvs_radix_match_lock(p->e.r, 0, k, 32, locs, &last);

		ck_assert_int_ge(m, 0);
		check_held(p, locs, (size_t)m);
		sched_yield(); /* let the evictor in while we hold the pages */
		check_held(p, locs, (size_t)m);
		ck_assert_int_eq(kvs_radix_unlock(p->e.r, last), 0);
		if (m == 32)
			continue;
		ck_assert_int_eq(kvs_pool_alloc(p->e.pool, 32, locs), 0);
		m = kvs_radix_insert_lock(p->e.r, 0, k, 32, locs, 0, &last);
		ck_assert_int_ge(m, 0);
		ck_assert_int_eq(kvs_pool_free(p->e.pool, (size_t)m, locs), 0);
		check_held(p, locs + m, 32 - (size_t)m);
		sched_yield();
		check_held(p, locs + m, 32 - (size_t)m);
		ck_assert_int_eq(kvs_radix_unlock(p->e.r, last), 0);
	}
	atomic_store(&p->stop, 1);
	pthread_join(th, NULL);
	ck_assert_uint_eq(atomic_load(&p->unheld), 0);
	ck_assert_uint_eq(kvs_radix_protected(p->e.r), 0);
	env_close(&p->e);
	free(p);
}
END_TEST

static Suite *radix_suite(void)
{
	Suite *s = suite_create("radix");
	TCase *tc = tcase_create("examples");

	tcase_add_test(tc, test_split_in_the_middle);
	tcase_add_test(tc, test_insert_over_partial);
	tcase_add_test(tc, test_lru_order);
	tcase_add_test(tc, test_lfu_order);
	tcase_add_test(tc, test_fifo_and_priority);
	tcase_add_test(tc, test_lock_protects_path);
	tcase_add_test(tc, test_page_size_16);
	tcase_add_test(tc, test_extra_keys);
	tcase_add_test(tc, test_kv_events);
	tcase_add_test(tc, test_event_callback_reads);
	tcase_add_test(tc, test_disabled);
	tcase_add_test(tc, test_split_refreshes_time);
	tcase_add_test(tc, test_reset);
	tcase_add_test(tc, test_stats);
	tcase_add_test(tc, test_match_differs_anywhere);
	suite_add_tcase(s, tc);

	tc = tcase_create("boundary");
	tcase_add_test(tc, test_insert_checks_locations);
	tcase_add_test(tc, test_insert_checks_runs);
	tcase_add_test(tc, test_insert_checks_run_order);
	tcase_add_test(tc, test_insert_checks_new_part_only);
	tcase_add_test(tc, test_insert_checks_free_cb);
	tcase_add_test(tc, test_validate_catches_corruption);
	tcase_add_test(tc, test_node_of_other_tree);
	tcase_add_test(tc, test_match_lock_insert_lock);
	suite_add_tcase(s, tc);

	tc = tcase_create("model");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_model_ps1_lru);
	tcase_add_test(tc, test_model_ps4_lfu);
	tcase_add_test(tc, test_model_ps16_priority);
	tcase_add_test(tc, test_model_ps1_fifo);
	suite_add_tcase(s, tc);

	tc = tcase_create("concurrent");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_pinned_beside_evictor);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(radix_suite());
}
