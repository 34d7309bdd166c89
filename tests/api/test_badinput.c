/* SPDX-License-Identifier: MIT */
/*
 * tests/api/test_badinput.c - bad input at the API boundary, family by
 * family: each call fails with the documented errno and changes nothing
 * (the family's validate, and its counts, are checked after every case).
 * With KVSLAB_TEST_VERBOSE set, prints the table of what was tried.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static int verbose;

/* Check one case: @rc must be -1 with errno @err (or, for calls returning
 * a pointer, NULL with @err).  Prints a row of the table. */
static void row(const char *family, const char *call, const char *input, long rc, int err,
		int want)
{
	if (verbose)
		fprintf(stderr, "| %-9s | %-26s | %-52s | %-2ld %-10s |\n", family, call, input, rc,
			rc < 0 ? strerrorname_np(err) : "");
	ck_assert_msg(rc == -1 && err == want, "%s(%s): rc %ld errno %d, want -1 errno %d", call,
		      input, rc, err, want);
}

#define CASE(fam, call, input, expr, want)                                    \
	do {                                                                  \
		long rc_;                                                     \
		errno = 0;                                                    \
		rc_ = (long)(expr);                                           \
		row(fam, call, input, rc_, errno, want);                      \
	} while (0)

#define CASE_NULL(fam, call, input, expr, want)                               \
	do {                                                                  \
		void *p_;                                                     \
		errno = 0;                                                    \
		p_ = (void *)(expr);                                          \
		row(fam, call, input, p_ ? 0 : -1, errno, want);              \
	} while (0)

static const size_t tb2[2] = {1024, 1024};

START_TEST(test_drv)
{
	kvs_drv_attr_t a;
	kvs_drv_t *d;
	kvs_devptr_t base;
	kvs_chunk_t *c, *c2;
	size_t g = 65536;
	void *hp;
	char buf[64];

	kvs_drv_attr_init(&a);
	a.granularity = g;
	CASE_NULL("drv", "kvs_drv_open", "name \"nope\"", kvs_drv_open("nope", &a), ENOENT);
	a.granularity = 1000;
	CASE_NULL("drv", "kvs_drv_open", "host granularity 1000 (not page multiple)",
		  kvs_drv_open("host", &a), EINVAL);
	a.granularity = g;
	d = kvs_drv_open("host", &a);
	ck_assert_ptr_nonnull(d);
	CASE("drv", "kvs_drv_reserve", "size 0", kvs_drv_reserve(d, 0, &base), EINVAL);
	CASE("drv", "kvs_drv_reserve", "size granularity + 1", kvs_drv_reserve(d, g + 1, &base),
	     EINVAL);
	CASE("drv", "kvs_drv_reserve", "size SIZE_MAX rounded down to granules",
	     kvs_drv_reserve(d, SIZE_MAX / g * g, &base), ENOMEM);
	CASE("drv", "kvs_drv_reserve", "drv NULL", kvs_drv_reserve(NULL, g, &base), EINVAL);
	ck_assert_int_eq(kvs_drv_reserve(d, 4 * g, &base), 0);
	CASE("drv", "kvs_drv_chunk_create", "size 0", kvs_drv_chunk_create(d, 0, &c), EINVAL);
	CASE("drv", "kvs_drv_chunk_create", "size granularity / 2",
	     kvs_drv_chunk_create(d, g / 2, &c), EINVAL);
	CASE("drv", "kvs_drv_chunk_create", "size larger than memory (1 PiB)",
	     kvs_drv_chunk_create(d, (size_t)1 << 50, &c), ENOMEM);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c), 0);
	ck_assert_int_eq(kvs_drv_chunk_create(d, g, &c2), 0);
	CASE("drv", "kvs_drv_map", "address not granule-aligned", kvs_drv_map(d, base + 4096, c),
	     EINVAL);
	CASE("drv", "kvs_drv_map", "address outside any reservation",
	     kvs_drv_map(d, base + 64 * g, c), EINVAL);
	ck_assert_int_eq(kvs_drv_map(d, base, c), 0);
	CASE("drv", "kvs_drv_map", "over a mapped granule", kvs_drv_map(d, base, c2), EBUSY);
	CASE("drv", "kvs_drv_map", "a foreign chunk pointer",
	     kvs_drv_map(d, base + g, (kvs_chunk_t *)buf), EINVAL);
	CASE("drv", "kvs_drv_unmap", "a range with an unmapped granule",
	     kvs_drv_unmap(d, base, 2 * g), EINVAL);
	CASE("drv", "kvs_drv_set_access", "access 7", kvs_drv_set_access(d, base, g, 7), EINVAL);
	CASE("drv", "kvs_drv_set_access", "range not fully mapped",
	     kvs_drv_set_access(d, base, 2 * g, KVS_ACCESS_RW), EINVAL);
	CASE("drv", "kvs_drv_copy_htod", "to a mapping without access",
	     kvs_drv_copy_htod(d, base, buf, 8, NULL), EFAULT);
	CASE("drv", "kvs_drv_copy_htod", "to an unmapped address",
	     kvs_drv_copy_htod(d, base + 2 * g, buf, 8, NULL), EFAULT);
	CASE("drv", "kvs_drv_unreserve", "with a live mapping", kvs_drv_unreserve(d, base), EBUSY);
	CASE("drv", "kvs_drv_unreserve", "not a reservation's base",
	     kvs_drv_unreserve(d, base + g), EINVAL);
	CASE("drv", "kvs_drv_host_alloc", "size SIZE_MAX - 10",
	     kvs_drv_host_alloc(d, SIZE_MAX - 10, &hp), ENOMEM);
	CASE("drv", "kvs_drv_host_free", "a pointer it did not give", kvs_drv_host_free(d, buf),
	     EINVAL);
	ck_assert_int_eq(kvs_drv_chunk_release(d, c2), 0);
	CASE("drv", "kvs_drv_chunk_release", "a released chunk", kvs_drv_chunk_release(d, c2),
	     EINVAL);
	CASE("drv", "kvs_event_record", "event NULL", kvs_event_record(NULL, 0), EINVAL);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_slab)
{
	kvs_drv_attr_t da;
	kvs_slab_attr_t a;
	kvs_drv_t *d;
	kvs_slab_t *s;
	uint64_t stream = 0;
	size_t huge[2] = {SIZE_MAX / 2, 1024};
	uint32_t pages[64], bad[3];
	uint32_t first;

	kvs_drv_attr_init(&da);
	da.granularity = 65536;
	d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(d);
#define SLAB_ATTR()                                                           \
	do {                                                                  \
		kvs_slab_attr_init(&a);                                       \
		a.nbuffers = 2;                                               \
		a.token_bytes = tb2;                                          \
		a.capacity_pages = 256;                                       \
	} while (0)
	SLAB_ATTR();
	a.page_size = 0;
	CASE_NULL("slab", "kvs_slab_create", "page_size 0", kvs_slab_create(d, &a), EINVAL);
	SLAB_ATTR();
	a.token_bytes = NULL;
	CASE_NULL("slab", "kvs_slab_create", "token_bytes NULL", kvs_slab_create(d, &a), EINVAL);
	SLAB_ATTR();
	a.min_empty = 3;
	a.max_empty = 2;
	CASE_NULL("slab", "kvs_slab_create", "max_empty < min_empty", kvs_slab_create(d, &a),
		  EINVAL);
	SLAB_ATTR();
	a.nstreams = 1;
	CASE_NULL("slab", "kvs_slab_create", "nstreams 1, streams NULL", kvs_slab_create(d, &a),
		  EINVAL);
	SLAB_ATTR();
	a.fence.record = (int (*)(void *, uint64_t *))1;
	CASE_NULL("slab", "kvs_slab_create", "fence.record without fence.query",
		  kvs_slab_create(d, &a), EINVAL);
	SLAB_ATTR();
	a.max_mapped = 4096;
	CASE_NULL("slab", "kvs_slab_create", "max_mapped smaller than one slab",
		  kvs_slab_create(d, &a), EINVAL);
	SLAB_ATTR();
	a.token_bytes = huge;
	CASE_NULL("slab", "kvs_slab_create", "token_bytes SIZE_MAX/2 (overflow)",
		  kvs_slab_create(d, &a), EOVERFLOW);
	SLAB_ATTR();
	a.streams = &stream;
	a.nstreams = 1;
	s = kvs_slab_create(d, &a);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(kvs_slab_alloc_bulk(s, 64, pages), 64);
	CASE("slab", "kvs_slab_free", "page out of range", kvs_slab_free(s, 1u << 30), EINVAL);
	CASE("slab", "kvs_slab_free", "a free page", kvs_slab_free(s, 200), EINVAL);
	bad[0] = pages[0];
	bad[1] = pages[1];
	bad[2] = pages[0];
	CASE("slab", "kvs_slab_free_bulk", "a page twice, held once", kvs_slab_free_bulk(s, 3, bad),
	     EINVAL);
	ck_assert_int_eq(kvs_slab_refcount(s, pages[0]), 1);
	ck_assert_int_eq(kvs_slab_refcount(s, pages[1]), 1);
	CASE("slab", "kvs_slab_ref", "a free page", kvs_slab_ref(s, 200), EINVAL);
	CASE("slab", "kvs_slab_alloc_bulk", "n > INT32_MAX",
	     kvs_slab_alloc_bulk(s, (size_t)INT32_MAX + 1, pages), EINVAL);
	CASE("slab", "kvs_slab_alloc_contig", "n 0", kvs_slab_alloc_contig(s, 0, &first), EINVAL);
	CASE("slab", "kvs_slab_alloc_contig", "n beyond the capacity",
	     kvs_slab_alloc_contig(s, 100000, &first), ENOMEM);
	CASE("slab", "kvs_slab_stat_get", "unknown name",
	     kvs_slab_stat_get(s, "no_such_stat", (uint64_t *)&first), ENOENT);
	ck_assert_uint_eq(kvs_slab_stat(s, KVS_SLAB_STAT_objects), 64);
	ck_assert_int_eq(kvs_slab_validate(s), 0);
	ck_assert_int_eq(kvs_slab_free_bulk(s, 64, pages), 0);
	ck_assert_int_eq(kvs_slab_destroy(s), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

START_TEST(test_pool_flow)
{
	kvs_pool_attr_t pa;
	kvs_drv_attr_t da;
	kvs_model_t m;
	kvs_drv_t *d;
	kvs_pool_t *p, *p2;
	kvs_reqtab_t *t;
	kvs_radix_t *r, *r2;
	kvs_flow_t *f;
	kvs_req_t q, *b[2];
	int32_t locs[8], tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};

	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(d);
	memset(&m, 0, sizeof(m));
	CASE("plan", "kvs_model_cell_size", "a zeroed model",
	     kvs_model_cell_size(&m) ? 0 : -1, EINVAL);
	m.layers = UINT32_MAX;
	m.kv_heads = UINT32_MAX;
	m.head_dim = UINT32_MAX;
	m.dtype_size = UINT32_MAX;
	m.tp_size = 1;
	CASE("plan", "kvs_model_cell_size", "every dimension UINT32_MAX (overflow)",
	     kvs_model_cell_size(&m) ? 0 : -1, EOVERFLOW);
	kvs_pool_attr_init(&pa);
	CASE_NULL("pool", "kvs_pool_create", "a zeroed model", kvs_pool_create(d, &pa), EINVAL);
	pa.model.layers = 1;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 64;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 4;
	pa.max_tokens = 256;
	p = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(p);
	p2 = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(p2);
	CASE("pool", "kvs_pool_alloc", "n 6, not a multiple of the page",
	     kvs_pool_alloc(p, 6, locs), EINVAL);
	locs[0] = -7;
	CASE("pool", "kvs_pool_free", "a negative location", kvs_pool_free(p, 1, locs), EINVAL);
	locs[0] = 100000;
	CASE("pool", "kvs_pool_free", "a location beyond the capacity",
	     kvs_pool_free(p, 1, locs), EINVAL);
	locs[0] = 12;
	CASE("pool", "kvs_pool_free", "a location of a free page", kvs_pool_free(p, 1, locs),
	     EINVAL);
	CASE("pool", "kvs_pool_ref", "a location of a free page", kvs_pool_ref(p, 1, locs), EINVAL);
	ck_assert_uint_eq(kvs_pool_available(p), kvs_pool_capacity(p));
	t = kvs_reqtab_create(d, 2, 64);
	ck_assert_ptr_nonnull(t);
	CASE_NULL("reqtab", "kvs_reqtab_create", "0 rows", kvs_reqtab_create(d, 0, 64), EINVAL);
	r = kvs_radix_create(p, NULL);
	ck_assert_ptr_nonnull(r);
	r2 = kvs_radix_create(p2, NULL);
	ck_assert_ptr_nonnull(r2);
	CASE_NULL("flow", "kvs_flow_create", "tab NULL", kvs_flow_create(p, NULL, r), EINVAL);
	CASE_NULL("flow", "kvs_flow_create", "a cache over another pool", kvs_flow_create(p, t, r2),
		  EINVAL);
	/* The radix cache: what insert takes, and whose nodes it locks. */
	{
		int32_t key[8] = {1, 2, 3, 4, 5, 6, 7, 8}, own[8];
		kvs_radix_node_t *last;

		ck_assert_int_eq(kvs_pool_alloc(p, 8, own), 0);
		locs[0] = own[0], locs[1] = own[1], locs[2] = own[2], locs[3] = own[3];
		locs[4] = own[0], locs[5] = own[1], locs[6] = own[2], locs[7] = own[3];
		CASE("radix", "kvs_radix_insert", "the same page twice",
		     kvs_radix_insert(r, 0, key, 8, locs, 0, NULL), EINVAL);
		memcpy(locs, own, sizeof(own));
		locs[1] = own[5];
		CASE("radix", "kvs_radix_insert", "a page straddling two pool pages",
		     kvs_radix_insert(r, 0, key, 8, locs, 0, NULL), EINVAL);
		memcpy(locs, own, sizeof(own));
		locs[0] = -7;
		CASE("radix", "kvs_radix_insert", "a location -7",
		     kvs_radix_insert(r, 0, key, 8, locs, 0, NULL), EINVAL);
		locs[0] = 1 << 30;
		CASE("radix", "kvs_radix_insert", "a location beyond the pool",
		     kvs_radix_insert(r, 0, key, 8, locs, 0, NULL), EINVAL);
		for (int i = 0; i < 8; i++)
			locs[i] = 200 + i; /* pages the caller does not hold */
		CASE("radix", "kvs_radix_insert", "pages the caller does not hold",
		     kvs_radix_insert(r, 0, key, 8, locs, 0, NULL), EINVAL);
		ck_assert_uint_eq(kvs_radix_tokens(r), 0);
		ck_assert_int_ge(kvs_radix_insert_lock(r2, 0, key, 0, own, 0, &last), 0);
		CASE("radix", "kvs_radix_lock", "a node of another tree (its root)",
		     kvs_radix_lock(r, kvs_radix_root(r2)), EINVAL);
		CASE("radix", "kvs_radix_unlock", "NULL", kvs_radix_unlock(r, NULL), EINVAL);
		CASE("radix", "kvs_radix_match_lock", "last NULL",
		     kvs_radix_match_lock(r, 0, key, 8, locs, NULL), EINVAL);
		ck_assert_int_eq(kvs_radix_validate(r), 0);
		ck_assert_int_eq(kvs_pool_free(p, 8, own), 0);
	}
	/* Elastic memory: the limit, and which cache may give pages back. */
	{
		kvs_limit_report_t rep;
		kvs_radix_attr_t ra;
		size_t lim = kvs_pool_limit(p);

		memset(&rep, 0x5a, sizeof(rep));
		CASE("elastic", "kvs_pool_set_limit", "pool NULL",
		     kvs_pool_set_limit(NULL, 0, NULL, &rep), EINVAL);
		CASE("elastic", "kvs_pool_set_limit", "a cache over another pool",
		     kvs_pool_set_limit(p, 0, r2, &rep), EINVAL);
		ck_assert_uint_eq(rep.limit, (size_t)0x5a5a5a5a5a5a5a5aULL); /* untouched */
		ck_assert_uint_eq(kvs_pool_limit(p), lim);
		ck_assert_uint_eq(kvs_pool_limit(NULL), 0);
		CASE("elastic", "kvs_pool_compact", "pool NULL",
		     kvs_pool_compact(NULL, t, NULL, 8), EINVAL);
		CASE("elastic", "kvs_pool_compact", "a cache over another pool",
		     kvs_pool_compact(p, t, r2, 8), EINVAL);
		kvs_radix_attr_init(&ra);
		ra.slab_aware = 1;
		ra.slab_window = KVS_RADIX_SLAB_WINDOW_MAX + 1;
		CASE_NULL("radix", "kvs_radix_create", "slab_window above the maximum",
			  kvs_radix_create(p, &ra), EINVAL);
	}
	f = kvs_flow_create(p, t, r);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(kvs_req_init(&q, tok, 8, 0, 0), 0);
	b[0] = b[1] = &q;
	CASE("flow", "kvs_flow_prepare_extend", "the same request twice in the batch",
	     kvs_flow_prepare_extend(f, b, 2, NULL), EINVAL);
	CASE("flow", "kvs_flow_prepare_decode", "a request without a slot",
	     kvs_flow_prepare_decode(f, b, 1, NULL), EINVAL);
	CASE("flow", "kvs_flow_cache_finished", "a request without a slot",
	     kvs_flow_cache_finished(f, &q), EINVAL);
	q.ntokens = 100;
	CASE("flow", "kvs_flow_prepare_extend", "ntokens beyond the table's context",
	     kvs_flow_prepare_extend(f, b, 1, NULL), ERANGE);
	ck_assert_uint_eq(kvs_reqtab_available(t), 2);
	ck_assert_uint_eq(kvs_pool_available(p), kvs_pool_capacity(p));
	CASE("flow", "kvs_flow_wait_layer", "flow NULL", kvs_flow_wait_layer(NULL, 0), EINVAL);
	CASE("flow", "kvs_flow_wait_layer", "layer 1 of 1", kvs_flow_wait_layer(f, 1), EINVAL);
	kvs_flow_destroy(f);
	/* The tiered flow: the same calls over a hierarchical radix cache. */
	{
		kvs_hpool_attr_t ha;
		kvs_hpool_t *hp;
		kvs_hiradix_t *hr;
		kvs_hiradix_usage_t u;

		kvs_hpool_attr_init(&ha);
		hp = kvs_hpool_create(p, &ha);
		ck_assert_ptr_nonnull(hp);
		hr = kvs_hiradix_create(p, hp, NULL);
		ck_assert_ptr_nonnull(hr);
		CASE_NULL("flow", "kvs_flow_create_tiered", "pool NULL",
			  kvs_flow_create_tiered(NULL, t, hr), EINVAL);
		CASE_NULL("flow", "kvs_flow_create_tiered", "tab NULL",
			  kvs_flow_create_tiered(p, NULL, hr), EINVAL);
		CASE_NULL("flow", "kvs_flow_create_tiered", "hr NULL",
			  kvs_flow_create_tiered(p, t, NULL), EINVAL);
		CASE_NULL("flow", "kvs_flow_create_tiered", "hr over another pool",
			  kvs_flow_create_tiered(p2, t, hr), EINVAL);
		CASE_NULL("hiradix", "kvs_hiradix_pool", "h NULL", kvs_hiradix_pool(NULL), EINVAL);
		ck_assert_ptr_eq(kvs_hiradix_pool(hr), p);
		f = kvs_flow_create_tiered(p, t, hr);
		ck_assert_ptr_nonnull(f);
		ck_assert_int_eq(kvs_req_init(&q, tok, 8, 0, 0), 0);
		b[0] = b[1] = &q;
		CASE("flow", "kvs_flow_prepare_extend", "tiered: the same request twice",
		     kvs_flow_prepare_extend(f, b, 2, NULL), EINVAL);
		q.tokens = NULL; /* the tiered flow takes extra keys now: tokens missing */
		CASE("flow", "kvs_flow_prepare_extend", "tiered: no tokens",
		     kvs_flow_prepare_extend(f, b, 1, NULL), EINVAL);
		CASE("flow", "kvs_flow_match", "tiered: no tokens", kvs_flow_match(f, &q), EINVAL);
		q.tokens = tok;
		CASE("flow", "kvs_flow_cache_unfinished", "tiered: a request without a slot",
		     kvs_flow_cache_unfinished(f, &q), EINVAL);
		CASE("flow", "kvs_flow_prepare_decode", "tiered: a request without a slot",
		     kvs_flow_prepare_decode(f, b, 1, NULL), EINVAL);
		q.ntokens = 100;
		CASE("flow", "kvs_flow_prepare_extend", "tiered: ntokens beyond the context",
		     kvs_flow_prepare_extend(f, b, 1, NULL), ERANGE);
		CASE("flow", "kvs_flow_wait_layer", "tiered: layer 1 of 1",
		     kvs_flow_wait_layer(f, 1), EINVAL);
		CASE("flow", "kvs_flow_release", "tiered: req NULL", kvs_flow_release(f, NULL),
		     EINVAL);
		ck_assert_uint_eq(kvs_reqtab_available(t), 2);
		ck_assert_uint_eq(kvs_pool_available(p), kvs_pool_capacity(p));
		ck_assert_int_eq(kvs_hiradix_validate(hr), 0);
		ck_assert_int_eq(kvs_hiradix_usage(hr, &u), 0);
		ck_assert_uint_eq(u.nodes, 0);
		kvs_flow_destroy(f);
		kvs_hiradix_destroy(hr);
		ck_assert_uint_eq(kvs_hpool_available(hp), kvs_hpool_capacity(hp));
		kvs_hpool_destroy(hp);
	}
	kvs_radix_destroy(r);
	kvs_radix_destroy(r2);
	kvs_reqtab_destroy(t);
	kvs_pool_destroy(p);
	kvs_pool_destroy(p2);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* ------------------------------------------------ the hashed block cache */

struct hc_env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hcache_t *hc;
	uint32_t nb;
	int events;
};

/* Everything a call may change, block by block. */
struct hc_snap {
	kvs_hcache_stats_t st;
	uint64_t avail;
	int32_t q[64];
	ssize_t qn;
	uint32_t ref[64];
	int has[64];
	kvs_block_hash_t hash[64];
	int events;
};

static void hc_on_event(void *arg, const kvs_hcache_event_t *ev)
{
	(void)ev;
	((struct hc_env *)arg)->events++;
}

static void hc_snap(struct hc_env *e, struct hc_snap *s)
{
	memset(s, 0, sizeof(*s));
	ck_assert_int_eq(kvs_hcache_validate(e->hc), 0);
	ck_assert_int_eq(kvs_hcache_stats(e->hc, &s->st), 0);
	s->avail = kvs_pool_available(e->pool);
	s->qn = kvs_hcache_free_queue(e->hc, s->q, 64);
	for (uint32_t b = 0; b < e->nb; b++)
		s->has[b] = kvs_hcache_block(e->hc, (int32_t)b, &s->ref[b], &s->hash[b]);
	s->events = e->events;
}

/* After a refused call: the cache validates and is as it was. */
static void hc_same(struct hc_env *e, const struct hc_snap *s)
{
	struct hc_snap now;

	hc_snap(e, &now);
	ck_assert_mem_eq(&now.st, &s->st, sizeof(s->st));
	ck_assert_uint_eq(now.avail, s->avail);
	ck_assert_int_eq(now.qn, s->qn);
	ck_assert_mem_eq(now.q, s->q, sizeof(s->q));
	ck_assert_mem_eq(now.ref, s->ref, sizeof(s->ref));
	ck_assert_mem_eq(now.has, s->has, sizeof(s->has));
	for (uint32_t b = 0; b < e->nb; b++)
		if (s->has[b] == 1)
			ck_assert_mem_eq(&now.hash[b], &s->hash[b], sizeof(s->hash[b]));
	ck_assert_int_eq(now.events, s->events);
}

/* A case on the cache: the row, then nothing changed. */
#define HC_CASE(call, input, expr, want)                                      \
	do {                                                                  \
		struct hc_snap s_;                                            \
		hc_snap(&e, &s_);                                             \
		CASE("hcache", call, input, expr, want);                      \
		hc_same(&e, &s_);                                             \
	} while (0)

static kvs_block_hash_t bh(uint32_t seq, uint32_t i, uint32_t len)
{
	kvs_block_hash_t h;

	memset(&h, 0, sizeof(h));
	h.len = len;
	h.bytes[0] = (uint8_t)seq;
	h.bytes[1] = (uint8_t)i;
	h.bytes[len ? len - 1 : 0] ^= 0x5a;
	return h;
}

START_TEST(test_hcache)
{
	struct hc_env e;
	kvs_pool_attr_t pa;
	kvs_drv_attr_t da;
	kvs_hcache_attr_t ha;
	kvs_block_hash_t h[4], bad0, bad33, parent;
	int32_t held[4], cached[2], out[8], tok[16] = {0}, x[3];
	int32_t free_blk = -1;
	size_t n;

	memset(&e, 0, sizeof(e));
	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	e.d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(e.d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 64;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 4;
	pa.max_tokens = 64; /* 16 blocks */
	e.pool = kvs_pool_create(e.d, &pa);
	ck_assert_ptr_nonnull(e.pool);
	e.nb = (uint32_t)(kvs_pool_capacity(e.pool) / 4);
	ck_assert_uint_le(e.nb, 64);

	CASE("hcache", "kvs_hcache_attr_init", "attr NULL", kvs_hcache_attr_init(NULL), EINVAL);
	CASE_NULL("hcache", "kvs_hcache_create", "pool NULL", kvs_hcache_create(NULL, NULL),
		  EINVAL);
	kvs_hcache_attr_init(&ha);
	ha.window = 0;
	CASE_NULL("hcache", "kvs_hcache_create", "window 0", kvs_hcache_create(e.pool, &ha), EINVAL);
	ck_assert_uint_eq(kvs_pool_available(e.pool), kvs_pool_capacity(e.pool));
	kvs_hcache_attr_init(&ha);
	ha.event_cb = hc_on_event;
	ha.event_arg = &e;
	e.hc = kvs_hcache_create(e.pool, &ha);
	ck_assert_ptr_nonnull(e.hc);

	/* The state every case starts from: two blocks cached free in the
	 * queue, four held (the first two hashed, one held twice), the rest
	 * free in the pool. */
	for (uint32_t i = 0; i < 4; i++)
		h[i] = bh(1, i, 32);
	bad0 = bh(9, 0, 0);
	bad33 = bh(9, 1, 32);
	bad33.len = 33;
	parent = bh(2, 0, 32);
	ck_assert_int_eq(kvs_hcache_alloc(e.hc, 2, cached), 0);
	ck_assert_int_eq(kvs_hcache_cache(e.hc, cached, 2, &h[2], NULL, 0, tok), 0);
	ck_assert_int_eq(kvs_hcache_free(e.hc, cached, 2), 0);
	ck_assert_int_eq(kvs_hcache_alloc(e.hc, 4, held), 0);
	ck_assert_int_eq(kvs_hcache_cache(e.hc, held, 2, h, NULL, 0, tok), 0);
	ck_assert_int_eq(kvs_hcache_lookup(e.hc, h, 1, 5, out), 1); /* held[0]: refcount 2 */
	ck_assert_int_eq(out[0], held[0]);
	for (uint32_t b = 0; b < e.nb && free_blk < 0; b++) {
		uint32_t r;
		int has = kvs_hcache_block(e.hc, (int32_t)b, &r, NULL);

		if (r == 0 && has == 0)
			free_blk = (int32_t)b;
	}
	ck_assert_int_ge(free_blk, 0);
	e.events = 0;

	HC_CASE("kvs_hcache_destroy", "a block still referenced", kvs_hcache_destroy(e.hc), EBUSY);
	HC_CASE("kvs_hcache_reset", "a block still referenced", kvs_hcache_reset(e.hc), EBUSY);
	HC_CASE("kvs_hcache_reset", "hc NULL", kvs_hcache_reset(NULL), EINVAL);

	HC_CASE("kvs_hcache_lookup", "hc NULL", kvs_hcache_lookup(NULL, h, 1, 5, out), EINVAL);
	HC_CASE("kvs_hcache_lookup", "hashes NULL, nhashes 1",
		kvs_hcache_lookup(e.hc, NULL, 1, 5, out), EINVAL);
	HC_CASE("kvs_hcache_lookup", "blocks NULL, nhashes 1",
		kvs_hcache_lookup(e.hc, h, 1, 5, NULL), EINVAL);
	{
		kvs_block_hash_t two[2] = { h[0], bad0 };

		HC_CASE("kvs_hcache_lookup", "a hash of length 0 within the cap",
			kvs_hcache_lookup(e.hc, two, 2, 9, out), EINVAL);
		two[1] = bad33;
		HC_CASE("kvs_hcache_lookup", "a hash of length 33 within the cap",
			kvs_hcache_lookup(e.hc, two, 2, 9, out), EINVAL);
	}
	HC_CASE("kvs_hcache_match_ro", "hc NULL", kvs_hcache_match_ro(NULL, h, 1, 5), EINVAL);
	HC_CASE("kvs_hcache_match_ro", "hashes NULL, nhashes 1",
		kvs_hcache_match_ro(e.hc, NULL, 1, 5), EINVAL);
	HC_CASE("kvs_hcache_match_ro", "a hash of length 0 within the cap",
		kvs_hcache_match_ro(e.hc, &bad0, 1, 5), EINVAL);

	HC_CASE("kvs_hcache_admit", "hc NULL", kvs_hcache_admit(NULL, h, 1, 5, 2, out), EINVAL);
	HC_CASE("kvs_hcache_admit", "hashes NULL, nhashes 1",
		kvs_hcache_admit(e.hc, NULL, 1, 5, 2, out), EINVAL);
	HC_CASE("kvs_hcache_admit", "blocks NULL, nblocks 2",
		kvs_hcache_admit(e.hc, h, 1, 5, 2, NULL), EINVAL);
	HC_CASE("kvs_hcache_admit", "nblocks INT32_MAX + 1",
		kvs_hcache_admit(e.hc, h, 1, 5, (size_t)INT32_MAX + 1, out), EINVAL);
	HC_CASE("kvs_hcache_admit", "a hash of length 0 within the cap",
		kvs_hcache_admit(e.hc, &bad0, 1, 5, 2, out), EINVAL);
	HC_CASE("kvs_hcache_alloc", "hc NULL", kvs_hcache_alloc(NULL, 1, out), EINVAL);
	HC_CASE("kvs_hcache_alloc", "blocks NULL, n 1", kvs_hcache_alloc(e.hc, 1, NULL), EINVAL);
	n = (size_t)(kvs_pool_available(e.pool) / 4) + 2; /* free pages + the queue */
	HC_CASE("kvs_hcache_alloc", "one more than the free and cached free blocks",
		kvs_hcache_alloc(e.hc, n + 1, out), ENOMEM);
	HC_CASE("kvs_hcache_alloc", "n SIZE_MAX", kvs_hcache_alloc(e.hc, SIZE_MAX, out), ENOMEM);

	HC_CASE("kvs_hcache_cache", "hc NULL",
		kvs_hcache_cache(NULL, &held[2], 1, &h[3], NULL, 0, tok), EINVAL);
	HC_CASE("kvs_hcache_cache", "blocks NULL, n 1",
		kvs_hcache_cache(e.hc, NULL, 1, &h[3], NULL, 0, tok), EINVAL);
	HC_CASE("kvs_hcache_cache", "hashes NULL, n 1",
		kvs_hcache_cache(e.hc, &held[2], 1, NULL, NULL, 0, tok), EINVAL);
	HC_CASE("kvs_hcache_cache", "parent of length 0",
		kvs_hcache_cache(e.hc, &held[2], 1, &h[3], &bad0, 0, tok), EINVAL);
	HC_CASE("kvs_hcache_cache", "parent of length 33, n 0",
		kvs_hcache_cache(e.hc, &held[2], 0, &h[3], &bad33, 0, tok), EINVAL);
	{
		kvs_block_hash_t two[2] = { h[3], bad33 };

		HC_CASE("kvs_hcache_cache", "the second hash of length 33",
			kvs_hcache_cache(e.hc, &held[2], 2, two, &parent, 0, tok), EINVAL);
	}
	x[0] = held[2];
	x[1] = -1;
	HC_CASE("kvs_hcache_cache", "a held block, then block -1",
		kvs_hcache_cache(e.hc, x, 2, h, NULL, 0, tok), EINVAL);
	x[1] = (int32_t)e.nb;
	HC_CASE("kvs_hcache_cache", "a held block, then a block past the pool",
		kvs_hcache_cache(e.hc, x, 2, h, NULL, 0, tok), EINVAL);
	x[1] = free_blk;
	HC_CASE("kvs_hcache_cache", "a held block, then one free in the pool",
		kvs_hcache_cache(e.hc, x, 2, h, NULL, 0, tok), EINVAL);
	x[1] = cached[0];
	HC_CASE("kvs_hcache_cache", "a held block, then one cached free (refcount 0)",
		kvs_hcache_cache(e.hc, x, 2, h, NULL, 0, tok), EINVAL);
	x[1] = held[1];
	HC_CASE("kvs_hcache_cache", "a held block, then a held block already hashed",
		kvs_hcache_cache(e.hc, x, 2, h, NULL, 0, tok), EINVAL);
	x[1] = held[3];
	x[2] = held[2];
	HC_CASE("kvs_hcache_cache", "held blocks, the first repeated third",
		kvs_hcache_cache(e.hc, x, 3, h, NULL, 0, tok), EINVAL);

	x[0] = held[2];
	x[1] = -1;
	HC_CASE("kvs_hcache_free", "hc NULL", kvs_hcache_free(NULL, x, 1), EINVAL);
	HC_CASE("kvs_hcache_free", "blocks NULL, n 1", kvs_hcache_free(e.hc, NULL, 1), EINVAL);
	HC_CASE("kvs_hcache_free", "a held block, then block -1", kvs_hcache_free(e.hc, x, 2),
		EINVAL);
	x[1] = INT32_MAX;
	HC_CASE("kvs_hcache_free", "a held block, then block INT32_MAX",
		kvs_hcache_free(e.hc, x, 2), EINVAL);
	x[1] = free_blk;
	HC_CASE("kvs_hcache_free", "a held block, then one free in the pool",
		kvs_hcache_free(e.hc, x, 2), EINVAL);
	x[1] = cached[1];
	HC_CASE("kvs_hcache_free", "a held block, then one cached free (refcount 0)",
		kvs_hcache_free(e.hc, x, 2), EINVAL);
	x[1] = held[2];
	HC_CASE("kvs_hcache_free", "a block of refcount 1 twice", kvs_hcache_free(e.hc, x, 2),
		EINVAL);
	x[0] = x[1] = x[2] = held[0];
	HC_CASE("kvs_hcache_free", "a block of refcount 2 three times",
		kvs_hcache_free(e.hc, x, 3), EINVAL);

	HC_CASE("kvs_hcache_evict", "hc NULL", kvs_hcache_evict(NULL, 1), EINVAL);
	{
		kvs_hcache_stats_t st;

		HC_CASE("kvs_hcache_stats", "hc NULL", kvs_hcache_stats(NULL, &st), EINVAL);
	}
	HC_CASE("kvs_hcache_stats", "st NULL", kvs_hcache_stats(e.hc, NULL), EINVAL);
	HC_CASE("kvs_hcache_free_queue", "hc NULL", kvs_hcache_free_queue(NULL, out, 8), EINVAL);
	HC_CASE("kvs_hcache_free_queue", "blocks NULL, max 1",
		kvs_hcache_free_queue(e.hc, NULL, 1), EINVAL);
	HC_CASE("kvs_hcache_block", "hc NULL", kvs_hcache_block(NULL, 0, NULL, NULL), EINVAL);
	HC_CASE("kvs_hcache_block", "block -1", kvs_hcache_block(e.hc, -1, NULL, NULL), EINVAL);
	HC_CASE("kvs_hcache_block", "block past the pool",
		kvs_hcache_block(e.hc, (int32_t)e.nb, NULL, NULL), EINVAL);
	HC_CASE("kvs_hcache_block", "block INT32_MIN",
		kvs_hcache_block(e.hc, INT32_MIN, NULL, NULL), EINVAL);
	HC_CASE("kvs_hcache_validate", "hc NULL", kvs_hcache_validate(NULL), EINVAL);

	/* What was refused did nothing: the state still goes back cleanly. */
	ck_assert_int_eq(e.events, 0);
	ck_assert_int_eq(kvs_hcache_free(e.hc, held, 4), 0);
	ck_assert_int_eq(kvs_hcache_free(e.hc, held, 1), 0);
	ck_assert_int_eq(kvs_hcache_reset(e.hc), 0);
	ck_assert_int_eq(kvs_hcache_destroy(e.hc), 0);
	ck_assert_uint_eq(kvs_pool_available(e.pool), kvs_pool_capacity(e.pool));
	kvs_pool_destroy(e.pool);
	ck_assert_int_eq(kvs_drv_close(e.d), 0);
}
END_TEST

/* ------------------------------------------------------------ block hashes */

/* A case on the hasher: the row, then @out and the block count unchanged. */
#define BH_CASE(call, input, expr, want)                                      \
	do {                                                                  \
		uint64_t n_ = kvs_block_hasher_blocks(hs);                    \
		memcpy(&out, &sentinel, sizeof(out));                         \
		CASE("blockhash", call, input, expr, want);                   \
		ck_assert_mem_eq(&out, &sentinel, sizeof(out));               \
		ck_assert_uint_eq(kvs_block_hasher_blocks(hs), n_);           \
	} while (0)

START_TEST(test_blockhash)
{
	kvs_block_hasher_attr_t a;
	kvs_block_hasher_t *hs;
	kvs_block_hash_t root, other, out, sentinel, hv[4], hcopy[4];
	kvs_block_mm_t mm[2];
	kvs_block_extra_t x;
	int32_t tok[64];
	size_t nh, nh0;
	uint8_t seed[4] = {1, 2, 3, 4};

	for (int i = 0; i < 64; i++)
		tok[i] = i;
	memset(&sentinel, 0xa5, sizeof(sentinel));
	kvs_block_hasher_attr_init(&a);
	a.fn = KVS_HASH_SHA256_CBOR_64;
	a.block_size = 4;
	hs = kvs_block_hasher_create(&a);
	if (!hs) {
		/* Built without libcrypto: the rows need a hasher. */
		ck_assert_int_eq(errno, ENOTSUP);
		return;
	}
	ck_assert_int_eq(kvs_block_hasher_root(hs, &root), 0);

	a.fn = 0;
	CASE_NULL("blockhash", "kvs_block_hasher_create", "fn 0", kvs_block_hasher_create(&a),
		  EINVAL);
	a.fn = 99;
	CASE_NULL("blockhash", "kvs_block_hasher_create", "fn 99", kvs_block_hasher_create(&a),
		  EINVAL);
	a.fn = KVS_HASH_SHA256_CBOR_64;
	a.block_size = 0;
	CASE_NULL("blockhash", "kvs_block_hasher_create", "block_size 0",
		  kvs_block_hasher_create(&a), EINVAL);
	a.block_size = 4;
	a.seed_len = 4;
	CASE_NULL("blockhash", "kvs_block_hasher_create", "seed_len 4, seed NULL",
		  kvs_block_hasher_create(&a), EINVAL);
	a.seed = seed;
	a.root = &root;
	CASE_NULL("blockhash", "kvs_block_hasher_create", "both a seed and a root",
		  kvs_block_hasher_create(&a), EINVAL);
	a.seed = NULL;
	a.seed_len = 0;
	other = root;
	other.len = 32;
	a.root = &other;
	CASE_NULL("blockhash", "kvs_block_hasher_create", "a root of 32 bytes for an 8-byte fn",
		  kvs_block_hasher_create(&a), EINVAL);
	CASE("blockhash", "kvs_block_hasher_root", "h NULL", kvs_block_hasher_root(NULL, &out),
	     EINVAL);
	CASE("blockhash", "kvs_block_hasher_root", "root NULL", kvs_block_hasher_root(hs, NULL),
	     EINVAL);

	BH_CASE("kvs_block_hash", "h NULL", kvs_block_hash(NULL, NULL, tok, 0, NULL, &out), EINVAL);
	BH_CASE("kvs_block_hash", "tokens NULL", kvs_block_hash(hs, NULL, NULL, 0, NULL, &out),
		EINVAL);
	BH_CASE("kvs_block_hash", "out NULL", kvs_block_hash(hs, NULL, tok, 0, NULL, NULL), EINVAL);
	BH_CASE("kvs_block_hash", "start 2, not a multiple of the block size",
		kvs_block_hash(hs, &root, tok, 2, NULL, &out), EINVAL);
	BH_CASE("kvs_block_hash", "start 0 with a parent",
		kvs_block_hash(hs, &root, tok, 0, NULL, &out), EINVAL);
	BH_CASE("kvs_block_hash", "start 4 without a parent",
		kvs_block_hash(hs, NULL, tok, 4, NULL, &out), EINVAL);
	BH_CASE("kvs_block_hash", "a parent of another length",
		kvs_block_hash(hs, &other, tok, 4, NULL, &out), EINVAL);
	BH_CASE("kvs_block_hash", "start 2^63 - 4, past INT64_MAX - block size",
		kvs_block_hash(hs, &root, tok, (uint64_t)INT64_MAX - 3, NULL, &out), EINVAL);
	memset(&x, 0, sizeof(x));
	x.nmm = 1;
	BH_CASE("kvs_block_hash", "extra: nmm 1, mm NULL",
		kvs_block_hash(hs, NULL, tok, 0, &x, &out), EINVAL);
	mm[0].identifier = NULL;
	mm[0].offset = 0;
	mm[0].length = 2;
	x.mm = mm;
	BH_CASE("kvs_block_hash", "extra: an item without identifier",
		kvs_block_hash(hs, NULL, tok, 0, &x, &out), EINVAL);
	mm[0].identifier = "img0";
	mm[1].identifier = "img1";
	mm[1].offset = 1;
	mm[1].length = 2;
	x.nmm = 2;
	BH_CASE("kvs_block_hash", "extra: two items overlapping",
		kvs_block_hash(hs, NULL, tok, 0, &x, &out), EINVAL);
	mm[0].offset = 8;
	mm[1].offset = 0;
	BH_CASE("kvs_block_hash", "extra: items out of order",
		kvs_block_hash(hs, NULL, tok, 0, &x, &out), EINVAL);
	mm[0].offset = (uint64_t)INT64_MAX;
	mm[0].length = 1;
	x.nmm = 1;
	BH_CASE("kvs_block_hash", "extra: an item ending past INT64_MAX",
		kvs_block_hash(hs, NULL, tok, 0, &x, &out), EINVAL);

	/* kvs_block_hash_request(): hv and *nhashes unchanged as well. */
	nh = 0;
	memset(hv, 0, sizeof(hv)); /* a hash fills only its len bytes */
	ck_assert_int_eq(kvs_block_hash_request(hs, tok, 8, NULL, hv, 4, &nh), 0);
	ck_assert_uint_eq(nh, 2);
	memcpy(hcopy, hv, sizeof(hv));
#define BHR_CASE(input, expr, want)                                           \
	do {                                                                  \
		nh0 = nh;                                                     \
		BH_CASE("kvs_block_hash_request", input, expr, want);         \
		ck_assert_uint_eq(nh, nh0);                                   \
		ck_assert_mem_eq(hv, hcopy, sizeof(hv));                      \
	} while (0)
	BHR_CASE("h NULL", kvs_block_hash_request(NULL, tok, 16, NULL, hv, 4, &nh), EINVAL);
	BHR_CASE("tokens NULL, ntokens 16",
		 kvs_block_hash_request(hs, NULL, 16, NULL, hv, 4, &nh), EINVAL);
	BHR_CASE("hashes NULL", kvs_block_hash_request(hs, tok, 16, NULL, NULL, 4, &nh), EINVAL);
	BHR_CASE("nhashes NULL", kvs_block_hash_request(hs, tok, 16, NULL, hv, 4, NULL), EINVAL);
	BHR_CASE("*nhashes 2 over max_hashes 1",
		 kvs_block_hash_request(hs, tok, 16, NULL, hv, 1, &nh), EINVAL);
	BHR_CASE("*nhashes 2 over the full blocks of 7 tokens",
		 kvs_block_hash_request(hs, tok, 7, NULL, hv, 4, &nh), EINVAL);
	hv[1].len = 32;
	hcopy[1].len = 32;
	BHR_CASE("the last hash given of another length",
		 kvs_block_hash_request(hs, tok, 16, NULL, hv, 4, &nh), EINVAL);
	hv[1].len = 8;
	hcopy[1].len = 8;
	mm[0].identifier = NULL;
	mm[0].offset = 0;
	BHR_CASE("extra: an item without identifier",
		 kvs_block_hash_request(hs, tok, 16, &x, hv, 4, &nh), EINVAL);
#undef BHR_CASE
	ck_assert_int_eq(kvs_block_hash_request(hs, tok, 16, NULL, hv, 4, &nh), 0);
	ck_assert_uint_eq(nh, 4);
	ck_assert_mem_eq(hv, hcopy, 2 * sizeof(hv[0])); /* the first two kept */
	ck_assert_int_eq(kvs_block_hasher_destroy(hs), 0);
}
END_TEST

/* The host pool: sizing, pages, transfers, direct access.  Each failing
 * call leaves the pool as it was (available pages, busy pages, handles). */
START_TEST(test_hpool)
{
	kvs_drv_attr_t da;
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;
	kvs_drv_t *d;
	kvs_pool_t *p;
	kvs_hpool_t *hp;
	kvs_hpool_xfer_t *x;
	int32_t locs[8], dev[2], host[2], bad[2];
	void *ptr;

	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 2;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 64;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 4;
	pa.max_tokens = 256;
	p = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(p);
	kvs_hpool_attr_init(&ha);
	CASE_NULL("hpool", "kvs_hpool_create", "dev NULL", kvs_hpool_create(NULL, &ha), EINVAL);
	ha.bytes = 1 << 20;
	CASE_NULL("hpool", "kvs_hpool_create", "both ratio and bytes", kvs_hpool_create(p, &ha),
		  EINVAL);
	ha.ratio = 0;
	ha.bytes = 0;
	CASE_NULL("hpool", "kvs_hpool_create", "neither ratio nor bytes", kvs_hpool_create(p, &ha),
		  EINVAL);
	ha.bytes = 100;
	CASE_NULL("hpool", "kvs_hpool_create", "bytes less than a page", kvs_hpool_create(p, &ha),
		  EINVAL);
	ha.bytes = 0;
	ha.ratio = -2.0;
	CASE_NULL("hpool", "kvs_hpool_create", "ratio -2", kvs_hpool_create(p, &ha), EINVAL);
	ha.ratio = 2.0;
	ha.layout = 9;
	CASE_NULL("hpool", "kvs_hpool_create", "layout 9", kvs_hpool_create(p, &ha), EINVAL);
	ha.layout = KVS_HPOOL_LAYER_FIRST;
	hp = kvs_hpool_create(p, &ha);
	ck_assert_ptr_nonnull(hp);
	ck_assert_int_eq(kvs_pool_alloc(p, 8, locs), 0);
	dev[0] = locs[0] / 4;
	dev[1] = locs[4] / 4;
	ck_assert_int_eq(kvs_hpool_alloc(hp, 2, host), 0);
	CASE("hpool", "kvs_hpool_alloc", "more pages than the pool has",
	     kvs_hpool_alloc(hp, kvs_hpool_capacity(hp), bad), ENOMEM);
	bad[0] = host[0];
	bad[1] = host[0];
	CASE("hpool", "kvs_hpool_free", "a page twice", kvs_hpool_free(hp, 2, bad), EINVAL);
	bad[1] = (int32_t)kvs_hpool_capacity(hp);
	CASE("hpool", "kvs_hpool_free", "a page beyond the pool", kvs_hpool_free(hp, 2, bad),
	     EINVAL);
	bad[1] = 5;
	CASE("hpool", "kvs_hpool_free", "a free page", kvs_hpool_free(hp, 2, bad), EINVAL);
	bad[0] = dev[0];
	bad[1] = dev[0];
	CASE("hpool", "kvs_hpool_load", "a device page twice", kvs_hpool_load(hp, bad, host, 2, &x),
	     EINVAL);
	bad[0] = host[1];
	bad[1] = host[1];
	CASE("hpool", "kvs_hpool_backup", "a host page twice",
	     kvs_hpool_backup(hp, dev, bad, 2, &x), EINVAL);
	bad[0] = dev[0];
	bad[1] = 60; /* a device page nobody holds */
	CASE("hpool", "kvs_hpool_backup", "a device page nobody holds",
	     kvs_hpool_backup(hp, bad, host, 2, &x), EINVAL);
	bad[1] = -1;
	CASE("hpool", "kvs_hpool_load", "a device page -1", kvs_hpool_load(hp, bad, host, 2, &x),
	     EINVAL);
	bad[0] = host[0];
	bad[1] = 7;
	CASE("hpool", "kvs_hpool_backup", "a free host page", kvs_hpool_backup(hp, dev, bad, 2, &x),
	     EINVAL);
	CASE("hpool", "kvs_hpool_page_ptr", "layer 2 of 2",
	     kvs_hpool_page_ptr(hp, host[0], 2, KVS_KV_K, &ptr, NULL), EINVAL);
	CASE("hpool", "kvs_hpool_page_bytes", "a layer-first pool",
	     kvs_hpool_page_bytes(hp, host[0], &ptr, NULL), ENOTSUP);
	CASE("hpool", "kvs_hpool_xfer_wait", "NULL", kvs_hpool_xfer_wait(NULL), EINVAL);
	ck_assert_uint_eq(kvs_hpool_available(hp), kvs_hpool_capacity(hp) - 2);
	ck_assert_uint_eq(kvs_hpool_stat(hp, KVS_HPOOL_STAT_pages_busy), 0);
	ck_assert_uint_eq(kvs_hpool_stat(hp, KVS_HPOOL_STAT_xfers_live), 0);
	ck_assert_int_eq(kvs_hpool_backup(hp, dev, host, 2, &x), 0);
	ck_assert_int_eq(kvs_hpool_xfer_wait(x), 0);
	CASE("hpool", "kvs_hpool_destroy", "a transfer handle live", kvs_hpool_destroy(hp), EBUSY);
	ck_assert_int_eq(kvs_hpool_xfer_free(x), 0);
	ck_assert_int_eq(kvs_hpool_free(hp, 2, host), 0);
	ck_assert_int_eq(kvs_hpool_destroy(hp), 0);
	ck_assert_int_eq(kvs_pool_free(p, 8, locs), 0);
	kvs_pool_destroy(p);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

/* The storage tier: every call on bad input fails with its errno, and the
 * store is left as it was (no object, no counter moved). */
static void store_unchanged(kvs_store_t *st, const char *dir)
{
	char cmd[160];

	for (int i = 0; i < KVS_STORE_STAT__COUNT; i++)
		ck_assert_msg(kvs_store_stat(st, (enum kvs_store_stat)i) == 0, "store stat %s moved",
			      kvs_store_stat_name((enum kvs_store_stat)i));
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", dir);
	ck_assert_msg(system(cmd) == 0, "the store's directory is not empty");
}

static void store_line(void *arg, const char *line)
{
	(void)arg;
	(void)line;
}

START_TEST(test_store)
{
	static const int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	char dir[] = "/tmp/kvs_bad_XXXXXX", uri[64], hex[65];
	kvs_page_key_t k[2];
	kvs_store_attr_t a;
	kvs_store_t *st, *f;
	kvs_drv_attr_t da;
	kvs_drv_t *d;
	kvs_pool_attr_t pa;
	kvs_pool_t *p;
	kvs_hpool_attr_t ha;
	kvs_hpool_t *hp;
	uint8_t buf[2][512];
	void *bufs[2] = {buf[0], buf[1]}, *nulls[2] = {buf[0], NULL};
	int32_t host[2], bad[2];
	uint64_t x;
	size_t pb;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(uri, sizeof(uri), "file://%s", dir);
	CASE("page", "kvs_page_hash", "key NULL", kvs_page_hash(NULL, tok, 4, NULL), EINVAL);
	CASE("page", "kvs_page_hash", "tokens NULL, n 4", kvs_page_hash(NULL, NULL, 4, k), EINVAL);
	CASE("page", "kvs_page_hashes", "page_size 0", kvs_page_hashes(NULL, tok, 8, 0, k), EINVAL);
	CASE("page", "kvs_page_hashes", "keys NULL", kvs_page_hashes(NULL, tok, 8, 4, NULL),
	     EINVAL);
	CASE("page", "kvs_page_hashes", "tokens NULL", kvs_page_hashes(NULL, NULL, 8, 4, k),
	     EINVAL);
	CASE("page", "kvs_page_key_hex", "key NULL", kvs_page_key_hex(NULL, hex), EINVAL);
	CASE("page", "kvs_page_key_hex", "hex NULL", kvs_page_key_hex(k, NULL), EINVAL);
	ck_assert_int_eq(kvs_page_hashes(NULL, tok, 8, 4, k), 2);

	CASE("store", "kvs_store_attr_init", "NULL", kvs_store_attr_init(NULL), EINVAL);
	kvs_store_attr_init(&a);
	CASE_NULL("store", "kvs_store_open", "page_bytes 0", kvs_store_open(uri, &a), EINVAL);
	a.page_bytes = 512;
	CASE_NULL("store", "kvs_store_open", "uri NULL", kvs_store_open(NULL, &a), EINVAL);
	CASE_NULL("store", "kvs_store_open", "attr NULL", kvs_store_open(uri, NULL), EINVAL);
	CASE_NULL("store", "kvs_store_open", "uri \"nope\" (no scheme)", kvs_store_open("nope", &a),
		  EINVAL);
	CASE_NULL("store", "kvs_store_open", "scheme \"s3\"", kvs_store_open("s3://b/x", &a),
		  EINVAL);
	CASE_NULL("store", "kvs_store_open", "\"file://rel\" (not absolute)",
		  kvs_store_open("file://rel", &a), EINVAL);
#ifndef KVS_HAVE_HIREDIS
	CASE_NULL("store", "kvs_store_open", "redis:// without hiredis",
		  kvs_store_open("redis://127.0.0.1:1", &a), ENOTSUP);
	CASE_NULL("store", "kvs_store_open", "redis+unix:// without hiredis",
		  kvs_store_open("redis+unix:///tmp/none.sock", &a), ENOTSUP);
#endif
	a.tp_rank = 1;
	CASE_NULL("store", "kvs_store_open", "tp_rank 1 of 1", kvs_store_open(uri, &a), EINVAL);
	a.tp_rank = 0;
	a.tp_size = 0;
	CASE_NULL("store", "kvs_store_open", "tp_size 0", kvs_store_open(uri, &a), EINVAL);
	a.tp_size = 1;
	a.layout = 7;
	CASE_NULL("store", "kvs_store_open", "layout 7", kvs_store_open(uri, &a), EINVAL);
	a.layout = KVS_HPOOL_PAGE_FIRST;
	a.fsync = 3;
	CASE_NULL("store", "kvs_store_open", "fsync 3", kvs_store_open(uri, &a), EINVAL);
	a.fsync = KVS_FSYNC_DATA;
	a.model = "";
	CASE_NULL("store", "kvs_store_open", "model \"\"", kvs_store_open(uri, &a), EINVAL);
	a.model = NULL;
	CASE_NULL("store", "kvs_store_open", "model NULL", kvs_store_open(uri, &a), EINVAL);
	a.model = "m";
	st = kvs_store_open(uri, &a);
	ck_assert_ptr_nonnull(st);

	CASE("store", "kvs_store_exists", "store NULL", kvs_store_exists(NULL, k, 2), EINVAL);
	CASE("store", "kvs_store_exists", "keys NULL, n 2", kvs_store_exists(st, NULL, 2), EINVAL);
	CASE("store", "kvs_store_get", "store NULL", kvs_store_get(NULL, k, 2, bufs), EINVAL);
	CASE("store", "kvs_store_get", "bufs NULL", kvs_store_get(st, k, 2, NULL), EINVAL);
	CASE("store", "kvs_store_get", "keys NULL", kvs_store_get(st, NULL, 2, bufs), EINVAL);
	CASE("store", "kvs_store_get", "a NULL buffer", kvs_store_get(st, k, 2, nulls), EINVAL);
	CASE("store", "kvs_store_set", "store NULL",
	     kvs_store_set(NULL, k, 2, (const void *const *)bufs), EINVAL);
	CASE("store", "kvs_store_set", "bufs NULL", kvs_store_set(st, k, 2, NULL), EINVAL);
	CASE("store", "kvs_store_set", "keys NULL",
	     kvs_store_set(st, NULL, 2, (const void *const *)bufs), EINVAL);
	CASE("store", "kvs_store_set", "a NULL buffer",
	     kvs_store_set(st, k, 2, (const void *const *)nulls), EINVAL);
	errno = 0;
	ck_assert_uint_eq(kvs_store_page_bytes(NULL), 0);
	row("store", "kvs_store_page_bytes", "store NULL (returns 0)", -1, errno, EINVAL);
	errno = 0;
	ck_assert_uint_eq(kvs_store_stat(NULL, KVS_STORE_STAT_get_hits), 0);
	row("store", "kvs_store_stat", "store NULL (returns 0)", -1, errno, EINVAL);
	errno = 0;
	ck_assert_uint_eq(kvs_store_stat(st, KVS_STORE_STAT__COUNT), 0);
	row("store", "kvs_store_stat", "item __COUNT (returns 0)", -1, errno, EINVAL);
	CASE_NULL("store", "kvs_store_stat_name", "item __COUNT",
		  kvs_store_stat_name(KVS_STORE_STAT__COUNT), EINVAL);
	CASE("store", "kvs_store_stat_get", "unknown name", kvs_store_stat_get(st, "nope", &x),
	     ENOENT);
	CASE("store", "kvs_store_stat_get", "value NULL", kvs_store_stat_get(st, "evicted", NULL),
	     EINVAL);
	CASE("store", "kvs_store_stat_get", "store NULL", kvs_store_stat_get(NULL, "evicted", &x),
	     EINVAL);
	CASE("store", "kvs_store_stats_print", "write_cb NULL", kvs_store_stats_print(st, NULL, NULL),
	     EINVAL);
	CASE("store", "kvs_store_stats_print", "store NULL",
	     kvs_store_stats_print(NULL, store_line, NULL), EINVAL);
	ck_assert_int_eq(kvs_store_close(NULL), 0);

	CASE_NULL("store", "kvs_store_fault_open", "inner NULL", kvs_store_fault_open(NULL), EINVAL);
	CASE("store", "kvs_store_fault_fail_nth", "not a fault store",
	     kvs_store_fault_fail_nth(st, KVS_SOP_GET, 1, KVS_SFAULT_ERROR), EINVAL);
	CASE("store", "kvs_store_fault_fail_random", "not a fault store",
	     kvs_store_fault_fail_random(st, KVS_SOP_GET, 0.5, 1, KVS_SFAULT_ERROR), EINVAL);
	CASE("store", "kvs_store_fault_clear", "not a fault store", kvs_store_fault_clear(st),
	     EINVAL);
	f = kvs_store_fault_open(st);
	ck_assert_ptr_nonnull(f);
	CASE("store", "kvs_store_fault_fail_nth", "op __COUNT",
	     kvs_store_fault_fail_nth(f, KVS_SOP__COUNT, 1, KVS_SFAULT_ERROR), EINVAL);
	CASE("store", "kvs_store_fault_fail_nth", "kind 3",
	     kvs_store_fault_fail_nth(f, KVS_SOP_GET, 1, 3), EINVAL);
	CASE("store", "kvs_store_fault_fail_random", "p 1.5",
	     kvs_store_fault_fail_random(f, KVS_SOP_GET, 1.5, 1, KVS_SFAULT_ERROR), EINVAL);
	CASE("store", "kvs_store_fault_fail_random", "seed 0",
	     kvs_store_fault_fail_random(f, KVS_SOP_GET, 0.5, 0, KVS_SFAULT_ERROR), EINVAL);
	CASE("store", "kvs_store_fault_fail_random", "kind -1",
	     kvs_store_fault_fail_random(f, KVS_SOP_GET, 0.5, 1, -1), EINVAL);
	CASE("store", "kvs_store_fault_clear", "NULL", kvs_store_fault_clear(NULL), EINVAL);

	/* Host-pool variants: a pool whose pages are not page_bytes, pages not
	 * allocated. */
	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 2;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 32;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 2;
	pa.max_tokens = 256;
	p = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(p);
	for (int layout = 0; layout < 2; layout++) {
		const char *lname = layout ? "page-first" : "layer-first";
		char in[96];

		kvs_hpool_attr_init(&ha);
		ha.layout = layout ? KVS_HPOOL_PAGE_FIRST : KVS_HPOOL_LAYER_FIRST;
		hp = kvs_hpool_create(p, &ha);
		ck_assert_ptr_nonnull(hp);
		pb = 2 * 32 * 2 * 2 * 2; /* 512: the store's page_bytes */
		ck_assert_uint_eq(pb, 512);
		ck_assert_int_eq(kvs_hpool_alloc(hp, 2, host), 0);
		CASE("store", "kvs_store_get_pages", "hp NULL",
		     kvs_store_get_pages(st, k, 2, NULL, host), EINVAL);
		CASE("store", "kvs_store_set_pages", "host_pages NULL",
		     kvs_store_set_pages(st, k, 2, hp, NULL), EINVAL);
		CASE("store", "kvs_store_set_pages", "store NULL",
		     kvs_store_set_pages(NULL, k, 2, hp, host), EINVAL);
		bad[0] = host[0];
		bad[1] = (int32_t)kvs_hpool_capacity(hp);
		snprintf(in, sizeof(in), "a page beyond the pool (%s)", lname);
		CASE("store", "kvs_store_get_pages", in, kvs_store_get_pages(st, k, 2, hp, bad),
		     EINVAL);
		CASE("store", "kvs_store_set_pages", in, kvs_store_set_pages(st, k, 2, hp, bad),
		     EINVAL);
		ck_assert_int_eq(kvs_hpool_free(hp, 2, host), 0);
		ck_assert_int_eq(kvs_hpool_destroy(hp), 0);
	}
	/* A store of another page size. */
	{
		kvs_store_t *st2;
		char in[96];

		a.page_bytes = 1024;
		st2 = kvs_store_open(uri, &a);
		ck_assert_ptr_nonnull(st2);
		for (int layout = 0; layout < 2; layout++) {
			kvs_hpool_attr_init(&ha);
			ha.layout = layout ? KVS_HPOOL_PAGE_FIRST : KVS_HPOOL_LAYER_FIRST;
			hp = kvs_hpool_create(p, &ha);
			ck_assert_ptr_nonnull(hp);
			ck_assert_int_eq(kvs_hpool_alloc(hp, 2, host), 0);
			snprintf(in, sizeof(in), "pages of 512 bytes, store of 1024 (%s)",
				 layout ? "page-first" : "layer-first");
			CASE("store", "kvs_store_set_pages", in,
			     kvs_store_set_pages(st2, k, 2, hp, host), EINVAL);
			CASE("store", "kvs_store_get_pages", in,
			     kvs_store_get_pages(st2, k, 2, hp, host), EINVAL);
			ck_assert_int_eq(kvs_hpool_free(hp, 2, host), 0);
			ck_assert_int_eq(kvs_hpool_destroy(hp), 0);
		}
		store_unchanged(st2, dir);
		kvs_store_close(st2);
	}
	kvs_pool_destroy(p);
	ck_assert_int_eq(kvs_drv_close(d), 0);
	store_unchanged(st, dir);
	store_unchanged(f, dir);
	ck_assert_int_eq(kvs_store_close(f), 0);
	ck_assert_int_eq(kvs_store_close(st), 0);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static void text_cb(void *arg, const char *data, size_t len)
{
	char **t = arg;
	size_t old = *t ? strlen(*t) : 0;

	*t = realloc(*t, old + len + 1);
	memcpy(*t + old, data, len);
	(*t)[old + len] = 0;
}

START_TEST(test_metrics_ctl)
{
	kvs_drv_attr_t da;
	kvs_drv_t *d;
	kvs_pool_attr_t pa;
	kvs_pool_t *p;
	kvs_metrics_t *m;
	kvs_ctl_attr_t ca;
	char *before = NULL, *after = NULL, longp[200];
	int x;

	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 1;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 64;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 4;
	pa.max_tokens = 256;
	p = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(p);
	m = kvs_metrics_create();
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(kvs_metrics_add_pool(m, p, "p"), 0);
	ck_assert_int_eq(kvs_metrics_add_drv(m, d, "d"), 0);
	ck_assert_int_eq(kvs_metrics_write(m, text_cb, &before), 0);

	CASE("metrics", "kvs_metrics_add_drv", "m NULL", kvs_metrics_add_drv(NULL, d, "x"), EINVAL);
	CASE("metrics", "kvs_metrics_add_drv", "drv NULL", kvs_metrics_add_drv(m, NULL, "x"), EINVAL);
	CASE("metrics", "kvs_metrics_add_drv", "registered already", kvs_metrics_add_drv(m, d, "x"),
	     EEXIST);
	CASE("metrics", "kvs_metrics_add_slab", "m NULL",
	     kvs_metrics_add_slab(NULL, kvs_pool_slab(p), "x"), EINVAL);
	CASE("metrics", "kvs_metrics_add_slab", "slab NULL", kvs_metrics_add_slab(m, NULL, "x"),
	     EINVAL);
	CASE("metrics", "kvs_metrics_add_slab", "a registered pool's slab",
	     kvs_metrics_add_slab(m, kvs_pool_slab(p), "x"), EEXIST);
	CASE("metrics", "kvs_metrics_add_pool", "m NULL", kvs_metrics_add_pool(NULL, p, "x"), EINVAL);
	CASE("metrics", "kvs_metrics_add_pool", "pool NULL", kvs_metrics_add_pool(m, NULL, "x"),
	     EINVAL);
	CASE("metrics", "kvs_metrics_add_radix", "m NULL",
	     kvs_metrics_add_radix(NULL, (kvs_radix_t *)&x, "x"), EINVAL);
	CASE("metrics", "kvs_metrics_add_radix", "radix NULL", kvs_metrics_add_radix(m, NULL, "x"),
	     EINVAL);
	CASE("metrics", "kvs_metrics_add_hcache", "m NULL",
	     kvs_metrics_add_hcache(NULL, (kvs_hcache_t *)&x, "x"), EINVAL);
	CASE("metrics", "kvs_metrics_add_hcache", "hc NULL", kvs_metrics_add_hcache(m, NULL, "x"),
	     EINVAL);
	CASE("metrics", "kvs_metrics_add_hpool", "m NULL",
	     kvs_metrics_add_hpool(NULL, (kvs_hpool_t *)&x, "x"), EINVAL);
	CASE("metrics", "kvs_metrics_add_hpool", "hp NULL", kvs_metrics_add_hpool(m, NULL, "x"),
	     EINVAL);
	CASE("metrics", "kvs_metrics_add_hiradix", "m NULL",
	     kvs_metrics_add_hiradix(NULL, (kvs_hiradix_t *)&x, "x"), EINVAL);
	CASE("metrics", "kvs_metrics_add_hiradix", "h NULL", kvs_metrics_add_hiradix(m, NULL, "x"),
	     EINVAL);
	CASE("metrics", "kvs_metrics_add_store", "m NULL",
	     kvs_metrics_add_store(NULL, (kvs_store_t *)&x, "x"), EINVAL);
	CASE("metrics", "kvs_metrics_add_store", "s NULL", kvs_metrics_add_store(m, NULL, "x"),
	     EINVAL);
	CASE("metrics", "kvs_metrics_remove", "m NULL", kvs_metrics_remove(NULL, p), EINVAL);
	CASE("metrics", "kvs_metrics_remove", "obj NULL", kvs_metrics_remove(m, NULL), EINVAL);
	CASE("metrics", "kvs_metrics_remove", "not registered", kvs_metrics_remove(m, &x), ENOENT);
	CASE("metrics", "kvs_metrics_write", "m NULL", kvs_metrics_write(NULL, text_cb, &after),
	     EINVAL);
	CASE("metrics", "kvs_metrics_write", "write_cb NULL", kvs_metrics_write(m, NULL, NULL),
	     EINVAL);
	ck_assert_ptr_null(after);
	ck_assert_int_eq(kvs_metrics_write(m, text_cb, &after), 0);
	/* The same series (values aside: the slab's worker may map ahead). */
	for (char *a = before, *b = after; *a || *b;) {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
		char *sa = memrchr(a, ' ', la), *sb = memrchr(b, ' ', lb);

		ck_assert(sa && sb && sa - a == sb - b && !memcmp(a, b, (size_t)(sa - a)));
		a += la + (a[la] != 0);
		b += lb + (b[lb] != 0);
	}

	CASE("ctl", "kvs_ctl_attr_init", "attr NULL", kvs_ctl_attr_init(NULL), EINVAL);
	kvs_ctl_attr_init(&ca);
	CASE_NULL("ctl", "kvs_ctl_start", "path NULL", kvs_ctl_start(NULL, &ca), EINVAL);
	CASE_NULL("ctl", "kvs_ctl_start", "path \"\"", kvs_ctl_start("", &ca), EINVAL);
	memset(longp, 'x', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = 0;
	CASE_NULL("ctl", "kvs_ctl_start", "path of 199 bytes", kvs_ctl_start(longp, &ca),
		  ENAMETOOLONG);
	ca.max_clients = 100000;
	CASE_NULL("ctl", "kvs_ctl_start", "max_clients 100000", kvs_ctl_start("/tmp/kvs_bad_ctl", &ca),
		  EINVAL);
	ck_assert_int_eq(access("/tmp/kvs_bad_ctl", F_OK), -1);
	CASE("ctl", "kvs_ctl_stop", "ctl NULL", kvs_ctl_stop(NULL), EINVAL);

	free(before);
	free(after);
	ck_assert_int_eq(kvs_metrics_destroy(m), 0);
	ck_assert_int_eq(kvs_pool_destroy(p), 0);
	ck_assert_int_eq(kvs_drv_close(d), 0);
}
END_TEST

static Suite *bad_suite(void)
{
	Suite *s = suite_create("badinput");
	TCase *tc = tcase_create("families");

	tcase_add_test(tc, test_drv);
	tcase_add_test(tc, test_slab);
	tcase_add_test(tc, test_pool_flow);
	tcase_add_test(tc, test_hcache);
	tcase_add_test(tc, test_blockhash);
	tcase_add_test(tc, test_hpool);
	tcase_add_test(tc, test_store);
	tcase_add_test(tc, test_metrics_ctl);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	verbose = getenv("KVSLAB_TEST_VERBOSE") != NULL;
	return tu_run(bad_suite());
}
