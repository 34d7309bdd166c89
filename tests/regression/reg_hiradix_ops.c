/* SPDX-License-Identifier: MIT */
/*
 * tests/regression/reg_hiradix_ops.c - the operations a hierarchical radix
 * cache gives its device pool (lib/mem/cacheops.h, lib/cache/hiradix_pool.c),
 * called as the pool's elastic calls call them: through the pool's
 * registry, under its elastic mutex.  Registration at create and removal
 * at destroy; evictable and evict against kvs_hiradix_evict_device(); the
 * page sets; evict_slabs; isolate keeping nodes from eviction; migrate
 * moving locations (read back by a match) and keeping nodes with a copy in
 * flight where they are; putback; kvs_hiradix_validate() clean after each.
 *
 * A regression program, so it may include the library's private headers
 * (tests/check-layers.sh allows tests/regression/ that), and it is linked
 * with the static library, whose internal symbols the shared one hides.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem/cacheops.h"
#include "testutil.h"

#define GRAN (64 * 1024)
#define PS 4
#define NPAGES 64
/* Page bitmaps: room for every page of the pool (its capacity is rounded
 * up to whole slabs; env_open() checks). */
#define MAPW 256

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	kvs_hiradix_t *h;
	const struct kvsi_cache_ops *ops;
	void *cache;
};

static void env_open(struct env *e, int be, uint32_t policy, uint32_t flags)
{
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;
	kvs_hiradix_attr_t a;

	memset(e, 0, sizeof(*e));
	e->d = tu_open_gran(be, GRAN, 0, 0);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 2;
	pa.model.tp_size = 1;
	pa.model.dtype_size = 2;
	pa.model.context_len = 4096;
	pa.model.kv_heads = 2;
	pa.model.head_dim = 8;
	pa.page_size = PS;
	pa.max_tokens = NPAGES * PS;
	pa.magazine = 0;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	ck_assert_uint_le(kvs_pool_capacity(e->pool) / PS, MAPW * 64);
	kvs_hpool_attr_init(&ha);
	ha.ratio = 0;
	ha.bytes = (size_t)NPAGES * PS * 2 * 8 * 2 * 2 * 2;
	e->hp = kvs_hpool_create(e->pool, &ha);
	ck_assert_ptr_nonnull(e->hp);
	ck_assert_uint_eq(kvsi_pool_ncaches(e->pool), 0);
	ck_assert_int_eq(kvs_hiradix_attr_init(&a), 0);
	a.write_policy = policy;
	a.load_back_threshold = 0;
	a.flags = flags;
	e->h = kvs_hiradix_create(e->pool, e->hp, &a);
	ck_assert_ptr_nonnull(e->h);
	/* Registered, last of create. */
	pthread_mutex_lock(kvsi_pool_elastic(e->pool));
	ck_assert_uint_eq(kvsi_pool_ncaches(e->pool), 1);
	e->cache = kvsi_pool_cache(e->pool, 0, &e->ops);
	pthread_mutex_unlock(kvsi_pool_elastic(e->pool));
	ck_assert_ptr_eq(e->cache, e->h);
	ck_assert_str_eq(e->ops->kind, "hiradix");
}

static void env_close(struct env *e)
{
	ck_assert_int_eq(kvs_hiradix_validate(e->h), 0);
	ck_assert_int_eq(kvs_hiradix_destroy(e->h), 0);
	ck_assert_uint_eq(kvsi_pool_ncaches(e->pool), 0); /* unregistered */
	ck_assert_int_eq(kvs_hpool_destroy(e->hp), 0);
	ck_assert_uint_eq(kvs_pool_available(e->pool), kvs_pool_capacity(e->pool));
	ck_assert_int_eq(kvs_pool_destroy(e->pool), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
}

static void settle(struct env *e)
{
	tu_hiradix_settle(e->h);
}

/* Insert @n tokens of @k (fresh pages past the device prefix); *@last the
 * node of its last token. */
static void put(struct env *e, const int32_t *k, size_t n, kvs_hiradix_node_t **last)
{
	int32_t locs[64];
	ssize_t dev = kvs_hiradix_match(e->h, k, n, locs, NULL);

	ck_assert_int_ge(dev, 0);
	ck_assert_int_eq(kvs_pool_alloc(e->pool, n - (size_t)dev, locs + dev), 0);
	ck_assert_int_eq(kvs_hiradix_insert(e->h, k, n, locs, last), dev);
}

static void keyseq(int32_t *k, size_t n, int32_t base)
{
	size_t i;

	for (i = 0; i < n; i++)
		k[i] = base + (int32_t)i;
}

/* The pool page bitmap of the device pages of @locs[0 .. n). */
static void pages_of(const int32_t *locs, size_t n, uint64_t *map)
{
	size_t i;

	for (i = 0; i < n; i += PS)
		bit_set(map, (uint64_t)locs[i] / PS);
}

static uint64_t evictable(struct env *e)
{
	uint64_t t;

	pthread_mutex_lock(kvsi_pool_elastic(e->pool));
	t = e->ops->evictable(e->cache);
	pthread_mutex_unlock(kvsi_pool_elastic(e->pool));
	return t;
}

/* evictable, evict, unlocked_pages and held_pages against the tree:
 * A = k[0, 8) -> B = k[8, 16), and C = c[0, 8) beside them. */
START_TEST(test_shrinker)
{
	int32_t k[16], c[8], la[16], lc[8];
	uint64_t want[MAPW] = {0}, got[MAPW] = {0}, held[MAPW] = {0};
	kvs_hiradix_node_t *a, *b, *cn;
	struct env e;

	env_open(&e, _i, KVS_WRITE_THROUGH, 0);
	keyseq(k, 16, 100);
	keyseq(c, 8, 900);
	put(&e, k, 8, &a);
	put(&e, k, 16, &b);
	put(&e, c, 8, &cn);
	settle(&e);
	ck_assert_uint_eq(evictable(&e), 24);
	/* A lock on B keeps B and A; C is still evictable. */
	ck_assert_int_eq(kvs_hiradix_lock(e.h, b), 0);
	ck_assert_uint_eq(evictable(&e), 8);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k, 16, la, NULL), 16);
	ck_assert_int_eq(kvs_hiradix_match(e.h, c, 8, lc, NULL), 8);
	pages_of(lc, 8, want);
	pthread_mutex_lock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(e.ops->unlocked_pages(e.cache, got), 0);
	ck_assert_int_eq(e.ops->held_pages(e.cache, held), 0);
	pthread_mutex_unlock(kvsi_pool_elastic(e.pool));
	ck_assert_uint_eq(got[0], want[0]);
	ck_assert_uint_eq(got[1], want[1]);
	pages_of(la, 16, want);
	ck_assert_uint_eq(held[0], want[0]);
	ck_assert_uint_eq(held[1], want[1]);
	/* evict: as kvs_hiradix_evict_device(): C only (a tombstone). */
	pthread_mutex_lock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(e.ops->evict(e.cache, 100), 8);
	pthread_mutex_unlock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(kvs_hiradix_match(e.h, c, 8, NULL, NULL), 0);
	ck_assert_uint_eq(evictable(&e), 0);
	ck_assert_int_eq(kvs_hiradix_validate(e.h), 0);
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, b), 0);
	ck_assert_uint_eq(evictable(&e), 16);
	env_close(&e);
}
END_TEST

/* Write back: a node without a host copy is evictable (eviction backs it
 * up first), and evict_slabs over every slab empties the device but for
 * the locked path, children first. */
START_TEST(test_write_back_slabs)
{
	int32_t k[16], c[8];
	uint64_t slabs[MAPW] = {0};
	kvs_hiradix_node_t *a, *b, *cn;
	kvs_hiradix_node_info_t ni;
	struct env e;
	long r;

	env_open(&e, _i, KVS_WRITE_BACK, 0);
	keyseq(k, 16, 300);
	keyseq(c, 8, 700);
	put(&e, k, 8, &a);
	put(&e, k, 16, &b);
	put(&e, c, 8, &cn);
	ck_assert_int_eq(kvs_hiradix_node_info(e.h, b, &ni), 0);
	ck_assert(!ni.on_host);
	ck_assert_uint_eq(evictable(&e), 24);
	ck_assert_int_eq(kvs_hiradix_lock(e.h, cn), 0);
	memset(slabs, 0xff, sizeof(slabs));
	pthread_mutex_lock(kvsi_pool_elastic(e.pool));
	r = e.ops->evict_slabs(e.cache, slabs);
	pthread_mutex_unlock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(r, 16); /* B then A, backed up first: tombstones */
	ck_assert_int_eq(kvs_hiradix_node_info(e.h, a, &ni), 0);
	ck_assert(!ni.on_device && ni.on_host);
	ck_assert_int_eq(kvs_hiradix_match(e.h, c, 8, NULL, NULL), 8);
	ck_assert_int_eq(kvs_hiradix_validate(e.h), 0);
	ck_assert_int_eq(kvs_hiradix_unlock(e.h, cn), 0);
	env_close(&e);
}
END_TEST

struct inside_arg {
	const int32_t *newpage;
	int32_t flight_page;	/* a page of a node in flight: must read -1 */
	int calls;
};

static int inside_fn(void *p)
{
	struct inside_arg *ia = p;

	ia->calls++;
	if (ia->flight_page >= 0)
		ck_assert_int_eq(ia->newpage[ia->flight_page], -1);
	errno = 0;
	return 7;
}

/* isolate keeps nodes from eviction; migrate moves their locations (read
 * back by a match) and h->held; putback lets eviction take them again. */
START_TEST(test_isolate_migrate)
{
	int32_t k[16], la[16], nl[16], newpage[MAPW * 64];
	uint64_t set[MAPW] = {0}, pinned[MAPW] = {0};
	struct inside_arg ia = {newpage, -1, 0};
	kvs_hiradix_node_t *a, *b;
	struct env e;
	void *tok = NULL;
	size_t i;

	env_open(&e, _i, KVS_WRITE_THROUGH, 0);
	keyseq(k, 16, 500);
	put(&e, k, 8, &a);
	put(&e, k, 16, &b);
	settle(&e);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k, 16, la, NULL), 16);
	pages_of(la, 16, set);
	pthread_mutex_lock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(e.ops->isolate(e.cache, set, pinned, &tok), 0);
	pthread_mutex_unlock(kvsi_pool_elastic(e.pool));
	ck_assert_ptr_nonnull(tok);
	/* Every page of the set has its holder pinned, and no other. */
	ck_assert_int_eq(memcmp(pinned, set, sizeof(set)), 0);
	ck_assert_int_eq(kvs_hiradix_validate(e.h), 0);
	/* Neither eviction takes an isolated node. */
	ck_assert_uint_eq(evictable(&e), 0);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k, 16, NULL, NULL), 16);
	/* Move every page to a fresh one. */
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 16, nl), 0);
	for (i = 0; i < MAPW * 64; i++)
		newpage[i] = -1;
	for (i = 0; i < 16; i += PS)
		newpage[la[i] / PS] = nl[i] / PS;
	pthread_mutex_lock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(e.ops->migrate(e.cache, newpage, inside_fn, &ia), 7);
	pthread_mutex_unlock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(ia.calls, 1);
	/* The tree owns the new pages now (the caller's reference), the old
	 * ones are the caller's to free. */
	ck_assert_int_eq(kvs_pool_free(e.pool, 16, la), 0);
	ck_assert_int_eq(kvs_hiradix_validate(e.h), 0);
	{
		int32_t moved[16];

		ck_assert_int_eq(kvs_hiradix_match(e.h, k, 16, moved, NULL), 16);
		ck_assert_int_eq(memcmp(moved, nl, sizeof(moved)), 0);
	}
	pthread_mutex_lock(kvsi_pool_elastic(e.pool));
	e.ops->putback(e.cache, tok);
	pthread_mutex_unlock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(kvs_hiradix_validate(e.h), 0);
	ck_assert_uint_eq(evictable(&e), 16);
	ck_assert_int_eq(kvs_hiradix_evict_device(e.h, 100), 16);
	env_close(&e);
}
END_TEST

/* A node whose backup is still queued (KVS_HIRADIX_DEFER) does not move:
 * its pages read -1 in @newpage before @inside runs; a node beside it
 * moves. */
START_TEST(test_migrate_in_flight)
{
	int32_t k[8], c[8], lk[8], lc[8], nl[16], got[8], newpage[MAPW * 64];
	uint64_t set[MAPW] = {0}, pinned[MAPW] = {0};
	struct inside_arg ia = {newpage, -1, 0};
	kvs_hiradix_node_t *kn, *cn;
	kvs_hiradix_node_info_t ni;
	struct env e;
	void *tok = NULL;
	size_t i;

	env_open(&e, _i, KVS_WRITE_THROUGH, KVS_HIRADIX_DEFER);
	keyseq(k, 8, 1500);
	keyseq(c, 8, 1700);
	put(&e, c, 8, &cn);
	ck_assert_int_eq(kvs_hiradix_submit(e.h, NULL), 0);
	settle(&e); /* C backed up */
	put(&e, k, 8, &kn); /* K's backup queued, not submitted */
	ck_assert_int_eq(kvs_hiradix_node_info(e.h, kn, &ni), 0);
	ck_assert(ni.backup_pending);
	ck_assert_int_eq(kvs_hiradix_match(e.h, k, 8, lk, NULL), 8);
	ck_assert_int_eq(kvs_hiradix_match(e.h, c, 8, lc, NULL), 8);
	pages_of(lk, 8, set);
	pages_of(lc, 8, set);
	pthread_mutex_lock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(e.ops->isolate(e.cache, set, pinned, &tok), 0);
	pthread_mutex_unlock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(kvs_pool_alloc(e.pool, 16, nl), 0);
	for (i = 0; i < MAPW * 64; i++)
		newpage[i] = -1;
	for (i = 0; i < 8; i += PS) {
		newpage[lk[i] / PS] = nl[i] / PS;
		newpage[lc[i] / PS] = nl[8 + i] / PS;
	}
	ia.flight_page = lk[0] / PS;
	pthread_mutex_lock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(e.ops->migrate(e.cache, newpage, inside_fn, &ia), 7);
	pthread_mutex_unlock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(ia.calls, 1);
	for (i = 0; i < 8; i += PS)
		ck_assert_int_eq(newpage[lk[i] / PS], -1);
	/* K where it was; C moved. */
	ck_assert_int_eq(kvs_hiradix_match(e.h, k, 8, got, NULL), 8);
	ck_assert_int_eq(memcmp(got, lk, sizeof(got)), 0);
	ck_assert_int_eq(kvs_hiradix_match(e.h, c, 8, got, NULL), 8);
	ck_assert_int_eq(memcmp(got, nl + 8, sizeof(got)), 0);
	ck_assert_int_eq(kvs_pool_free(e.pool, 8, lc), 0); /* C's old pages */
	ck_assert_int_eq(kvs_pool_free(e.pool, 8, nl), 0); /* K's unused ones */
	ck_assert_int_eq(kvs_hiradix_validate(e.h), 0);
	pthread_mutex_lock(kvsi_pool_elastic(e.pool));
	e.ops->putback(e.cache, tok);
	pthread_mutex_unlock(kvsi_pool_elastic(e.pool));
	ck_assert_int_eq(kvs_hiradix_submit(e.h, NULL), 0);
	settle(&e);
	ck_assert_int_eq(kvs_hiradix_validate(e.h), 0);
	env_close(&e);
}
END_TEST

static Suite *ops_suite(void)
{
	Suite *s = suite_create("hiradix_ops");
	TCase *tc = tcase_create("hiradix_ops");
	int nb = tu_nbackends();

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_shrinker, 0, nb);
	tcase_add_loop_test(tc, test_write_back_slabs, 0, nb);
	tcase_add_loop_test(tc, test_isolate_migrate, 0, nb);
	tcase_add_loop_test(tc, test_migrate_in_flight, 0, nb);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(ops_suite());
}
