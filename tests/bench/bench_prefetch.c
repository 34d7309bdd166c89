/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_prefetch.c - L3 prefetch latency per page: one
 * instance backs a set of prompts up to a file store, a second instance
 * (sharing the directory, its host tier empty) prefetches each prompt and
 * waits for it (KVS_PREFETCH_WAIT_COMPLETE), from kvs_hiradix_prefetch() to
 * kvs_hiradix_prefetch_done() == 1.  Beside it, in the same run, the same
 * pages read with kvs_store_get_pages() in one batch into host pages: what
 * the store alone costs.  Medians over the prompts; host driver.
 *
 * Usage: bench_prefetch [prompts [pages_per_prompt]]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvslab.h>

#include "benchutil.h"

#define PS 16

struct inst {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	kvs_hiradix_t *h;
	kvs_store_t *st;
};

static int inst_open(struct inst *e, const char *uri, uint32_t pages)
{
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;
	kvs_store_attr_t sa;
	kvs_hiradix_l3_attr_t la;
	void *p;
	size_t pb;
	int32_t pg;

	memset(e, 0, sizeof(*e));
	e->d = kvs_drv_open("host", NULL);
	if (!e->d)
		return -1;
	kvs_pool_attr_init(&pa);
	if (kvs_model_preset("llama-3-8b", &pa.model) < 0)
		return -1;
	pa.model.layers = 8; /* 8 layers: 256 KiB pages of 16 tokens */
	pa.page_size = PS;
	pa.max_tokens = (uint64_t)pages * PS * 2;
	e->pool = kvs_pool_create(e->d, &pa);
	if (!e->pool)
		return -1;
	kvs_hpool_attr_init(&ha);
	ha.layout = KVS_HPOOL_PAGE_FIRST;
	ha.ratio = 1.0;
	e->hp = kvs_hpool_create(e->pool, &ha);
	if (!e->hp)
		return -1;
	e->h = kvs_hiradix_create(e->pool, e->hp, NULL);
	if (!e->h || kvs_hpool_alloc(e->hp, 1, &pg) < 0 ||
	    kvs_hpool_page_bytes(e->hp, pg, &p, &pb) < 0 || kvs_hpool_free(e->hp, 1, &pg) < 0)
		return -1;
	kvs_store_attr_init(&sa);
	sa.model = "bench";
	sa.page_bytes = pb;
	sa.fsync = KVS_FSYNC_NONE;
	e->st = kvs_store_open(uri, &sa);
	if (!e->st)
		return -1;
	kvs_hiradix_l3_attr_init(&la);
	la.prefetch_policy = KVS_PREFETCH_WAIT_COMPLETE;
	la.prefetch_threshold = PS;
	return kvs_hiradix_set_store(e->h, e->st, &la);
}

static void inst_close(struct inst *e)
{
	kvs_hiradix_destroy(e->h);
	kvs_hpool_destroy(e->hp);
	kvs_pool_destroy(e->pool);
	kvs_store_close(e->st);
	kvs_drv_close(e->d);
}

int main(int argc, char **argv)
{
	uint32_t prompts = argc > 1 ? (uint32_t)atoi(argv[1]) : 32;
	uint32_t pages = argc > 2 ? (uint32_t)atoi(argv[2]) : 64;
	size_t n = (size_t)pages * PS, i;
	char dir[256], uri[300], cmd[300];
	uint64_t *lat, *raw;
	struct inst a, b;
	int32_t *key, *locs, *hp;
	kvs_page_key_t *keys;
	uint32_t q;

	if (prompts == 0 || pages == 0)
		return 2;
	snprintf(dir, sizeof(dir), "%s/kvslab-bench-pf-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	snprintf(uri, sizeof(uri), "file://%s", dir);
	key = malloc(n * sizeof(*key));
	locs = malloc(n * sizeof(*locs));
	hp = malloc(pages * sizeof(*hp));
	keys = malloc(pages * sizeof(*keys));
	lat = malloc(prompts * sizeof(*lat));
	raw = malloc(prompts * sizeof(*raw));
	if (!key || !locs || !hp || !keys || !lat || !raw || inst_open(&a, uri, pages) < 0) {
		fprintf(stderr, "bench_prefetch: setup failed: %s\n", strerror(errno));
		return 1;
	}
	/* Instance A: every prompt computed, backed up to host and store. */
	for (q = 0; q < prompts; q++) {
		for (i = 0; i < n; i++)
			key[i] = (int32_t)(q * 1000003u + (uint32_t)i);
		if (kvs_hiradix_match(a.h, key, n, NULL, NULL) != 0 ||
		    kvs_pool_alloc(a.pool, n, locs) < 0 || kvs_hiradix_insert(a.h, key, n, locs, NULL) < 0)
			return 1;
		for (;;) {
			kvs_hiradix_usage_t u;

			if (kvs_hiradix_poll(a.h) < 0 || kvs_hiradix_usage(a.h, &u) < 0)
				return 1;
			if (!u.backups_pending)
				break;
		}
		kvs_hiradix_l3_wait(a.h);
		kvs_hiradix_evict_device(a.h, n);
		kvs_hiradix_evict_host(a.h, n);
	}
	inst_close(&a);
	/* Instance B: each prompt prefetched; then the raw reads. */
	if (inst_open(&b, uri, pages) < 0)
		return 1;
	for (q = 0; q < prompts; q++) {
		uint64_t t0;
		size_t got = 0;

		for (i = 0; i < n; i++)
			key[i] = (int32_t)(q * 1000003u + (uint32_t)i);
		t0 = bench_ns();
		if (kvs_hiradix_prefetch(b.h, q, key, n) != (ssize_t)n)
			return 1;
		while (kvs_hiradix_prefetch_done(b.h, q, &got) == 0)
			;
		lat[q] = bench_ns() - t0;
		if (got != n) {
			fprintf(stderr, "bench_prefetch: prompt %u: %zu of %zu tokens\n", q, got, n);
			return 1;
		}
		kvs_hiradix_evict_host(b.h, n);
		/* The store alone: the same pages in one batch. */
		if (kvs_page_hashes(NULL, key, n, PS, keys) != (ssize_t)pages ||
		    kvs_hpool_alloc(b.hp, pages, hp) < 0)
			return 1;
		t0 = bench_ns();
		if (kvs_store_get_pages(b.st, keys, pages, b.hp, hp) != (ssize_t)pages)
			return 1;
		raw[q] = bench_ns() - t0;
		kvs_hpool_free(b.hp, pages, hp);
	}
	printf("bench_prefetch: %u prompts of %u pages of %zu bytes (file store, fsync none, "
	       "page cache warm)\n",
	       prompts, pages, kvs_store_page_bytes(b.st));
	printf("  prefetch, request to done: median %.1f us, %.2f us/page\n",
	       bench_quantile(lat, prompts, 0.5) / 1e3,
	       bench_quantile(lat, prompts, 0.5) / 1e3 / pages);
	printf("  store get_pages alone:     median %.1f us, %.2f us/page\n",
	       bench_quantile(raw, prompts, 0.5) / 1e3,
	       bench_quantile(raw, prompts, 0.5) / 1e3 / pages);
	printf("  ratio prefetch / store:    %.2f\n",
	       (double)bench_quantile(lat, prompts, 0.5) / (double)bench_quantile(raw, prompts, 0.5));
	inst_close(&b);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		return 1;
	free(key);
	free(locs);
	free(hp);
	free(keys);
	free(lat);
	free(raw);
	return 0;
}
