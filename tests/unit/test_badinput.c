/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_badinput.c - bad input at the API boundary, family by
 * family: each call fails with the documented errno and changes nothing
 * (the family's validate, and its counts, are checked after every case).
 * With KVSLAB_TEST_VERBOSE set, prints the table of what was tried.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static int verbose;

/* Check one case: @rc must be -1 with errno @err (or, for calls returning
 * a pointer, NULL with @err).  Prints a row of the table. */
static void row(const char *family, const char *call, const char *input, long rc, int err,
		int want)
{
	if (verbose)
		fprintf(stderr, "| %-7s | %-26s | %-52s | %-2ld %-10s |\n", family, call, input, rc,
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
	kvs_flow_destroy(f);
	kvs_radix_destroy(r);
	kvs_radix_destroy(r2);
	kvs_reqtab_destroy(t);
	kvs_pool_destroy(p);
	kvs_pool_destroy(p2);
	ck_assert_int_eq(kvs_drv_close(d), 0);
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

static Suite *bad_suite(void)
{
	Suite *s = suite_create("badinput");
	TCase *tc = tcase_create("families");

	tcase_add_test(tc, test_drv);
	tcase_add_test(tc, test_slab);
	tcase_add_test(tc, test_pool_flow);
	tcase_add_test(tc, test_hpool);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	verbose = getenv("KVSLAB_TEST_VERBOSE") != NULL;
	return tu_run(bad_suite());
}
