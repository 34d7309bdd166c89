/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_hostpool.c - host <-> device copies of the host (L2)
 * pool on the host driver: GB/s of a backup (device to host) and a load
 * (host to device, waited for layer by layer) of TOKENS tokens of a
 * Llama-3-8B-shaped model (32 layers, 8 KV heads of 128, 2 bytes: 2 KiB a
 * token a buffer, 128 KiB a token), for each layout and pages of 1, 16 and
 * 64 tokens, as a fraction of one large memcpy of the same bytes measured in
 * the same run.  "runs": device and host pages in runs, merged into one
 * copy per buffer; "scattered": host pages in descending order, so that no
 * two pages merge (layer-first only; page-first pages never merge).
 *
 * "copies" counts the pieces a transfer moves, "batches" the driver's
 * kvs_drv_copy_batch() submissions (one per layer where a layer has more
 * than one piece).
 *
 * On the host driver a "device" is host memory too, so the fraction says
 * what the pool's bookkeeping and its split into copies cost against the
 * memory bandwidth, not what PCIe would give.  KVSLAB_DRIVER names another
 * driver (cuda on a GPU; the memcpy column stays a host memcpy).
 *
 * Usage: bench_hostpool [ROUNDS [TOKENS]]   (medians; defaults 5 and 512)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvslab.h>

#include "benchutil.h"

#define LAYERS 32

static int rounds = 5;
static uint32_t tokens = 512;
static kvs_drv_t *the_drv;	/* for its counters */

static void model(kvs_model_t *m)
{
	memset(m, 0, sizeof(*m));
	m->layers = LAYERS;
	m->kv_heads = 8;
	m->head_dim = 128;
	m->dtype_size = 2;
	m->tp_size = 1;
	m->context_len = 8192;
}

/* GB/s of one memcpy of @bytes, median of the rounds. */
static double memcpy_gbps(size_t bytes)
{
	unsigned char *a = malloc(bytes), *b = malloc(bytes);
	uint64_t *t = calloc((size_t)rounds, sizeof(*t));
	double gbps;
	int r;

	if (!a || !b || !t) {
		perror("bench_hostpool: malloc");
		exit(1);
	}
	memset(a, 1, bytes);
	memset(b, 2, bytes);
	memcpy(b, a, bytes); /* warm */
	for (r = 0; r < rounds; r++) {
		uint64_t t0 = bench_ns();

		memcpy(r % 2 ? a : b, r % 2 ? b : a, bytes);
		t[r] = bench_ns() - t0;
	}
	gbps = (double)bytes / (double)bench_quantile(t, (size_t)rounds, 0.5);
	free(a);
	free(b);
	free(t);
	return gbps;
}

struct result {
	double gbps;
	uint64_t copies, batches;
};

/* One direction, median over the rounds (after one warm-up). */
static int measure(kvs_hpool_t *hp, const int32_t *dev, const int32_t *host, size_t n,
		   int load, size_t bytes, struct result *res)
{
	uint64_t *t = calloc((size_t)rounds + 1, sizeof(*t));
	uint64_t c0, b0;
	int r;

	if (!t)
		return -1;
	for (r = 0; r <= rounds; r++) {
		kvs_hpool_xfer_t *x;
		uint64_t t0 = bench_ns();
		uint32_t l;

		c0 = kvs_hpool_stat(hp, KVS_HPOOL_STAT_copies);
		b0 = kvs_drv_stat(the_drv, KVS_DRV_STAT_batch_calls);
		if ((load ? kvs_hpool_load : kvs_hpool_backup)(hp, dev, host, n, &x) < 0)
			goto fail;
		for (l = 0; load && l < LAYERS; l++)
			if (kvs_hpool_xfer_layer_wait(x, l) < 0)
				goto fail;
		if (kvs_hpool_xfer_wait(x) < 0)
			goto fail;
		kvs_hpool_xfer_free(x);
		t[r] = bench_ns() - t0;
		res->copies = kvs_hpool_stat(hp, KVS_HPOOL_STAT_copies) - c0;
		res->batches = kvs_drv_stat(the_drv,
					    KVS_DRV_STAT_batch_calls) - b0;
	}
	res->gbps = (double)bytes / (double)bench_quantile(t + 1, (size_t)rounds, 0.5);
	free(t);
	return 0;
fail:
	free(t);
	return -1;
}

static int run(kvs_drv_t *d, int layout, uint32_t ps, double base)
{
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;
	kvs_pool_t *pool = NULL;
	kvs_hpool_t *hp = NULL;
	size_t n = tokens / ps, i, bytes;
	int32_t *locs = malloc(tokens * sizeof(*locs)), *dev = malloc(n * sizeof(*dev));
	int32_t *host = malloc(n * sizeof(*host)), *rev = malloc(n * sizeof(*rev));
	int pat, dir, rc = -1;

	kvs_pool_attr_init(&pa);
	model(&pa.model);
	pa.page_size = ps;
	pa.max_tokens = tokens;
	pa.magazine = 0;
	pool = kvs_pool_create(d, &pa);
	kvs_hpool_attr_init(&ha);
	ha.layout = (uint32_t)layout;
	ha.ratio = 0;
	ha.bytes = (size_t)tokens * kvs_model_cell_size(&pa.model);
	hp = pool ? kvs_hpool_create(pool, &ha) : NULL;
	if (!locs || !dev || !host || !rev || !hp || kvs_pool_alloc(pool, tokens, locs) < 0 ||
	    kvs_hpool_alloc(hp, n, host) < 0) {
		perror("bench_hostpool: setup");
		goto out;
	}
	bytes = (size_t)tokens * kvs_model_cell_size(&pa.model);
	for (i = 0; i < n; i++) {
		dev[i] = locs[i * ps] / (int32_t)ps;
		rev[i] = host[n - 1 - i];
	}
	for (pat = 0; pat < (layout == KVS_HPOOL_LAYER_FIRST ? 2 : 1); pat++) {
		for (dir = 0; dir < 2; dir++) {
			struct result res = {0, 0, 0};

			if (measure(hp, dev, pat ? rev : host, n, dir, bytes, &res) < 0) {
				perror("bench_hostpool: transfer");
				goto out;
			}
			printf("%-11s %4u  %-9s  %-6s %8llu %8llu  %6.1f  %7.2f  %6.3f\n",
			       layout == KVS_HPOOL_LAYER_FIRST ? "layer_first" : "page_first", ps,
			       layout == KVS_HPOOL_PAGE_FIRST ? "-" : pat ? "scattered" : "runs",
			       dir ? "load" : "backup", (unsigned long long)res.copies,
			       (unsigned long long)res.batches,
			       (double)bytes / (1 << 20), res.gbps, res.gbps / base);
		}
	}
	rc = 0;
out:
	if (hp)
		kvs_hpool_destroy(hp);
	if (pool)
		kvs_pool_destroy(pool);
	free(locs);
	free(dev);
	free(host);
	free(rev);
	return rc;
}

int main(int argc, char **argv)
{
	static const uint32_t ps[3] = {1, 16, 64};
	kvs_drv_attr_t da;
	kvs_drv_t *d;
	kvs_model_t m;
	double base;
	int lay, p;

	if (argc > 1)
		rounds = atoi(argv[1]) > 0 ? atoi(argv[1]) : rounds;
	if (argc > 2)
		tokens = atoi(argv[2]) >= 64 ? (uint32_t)atoi(argv[2]) / 64 * 64 : tokens;
	model(&m);
	kvs_drv_attr_init(&da);
	the_drv = d = kvs_drv_open(getenv("KVSLAB_DRIVER") ? getenv("KVSLAB_DRIVER") : "host", &da);
	if (!d) {
		perror("bench_hostpool: kvs_drv_open");
		return 1;
	}
	base = memcpy_gbps((size_t)tokens * kvs_model_cell_size(&m));
	printf("bench_hostpool: %u tokens of %zu KiB (%d layers), %s driver, %d rounds\n",
	       tokens, kvs_model_cell_size(&m) >> 10, LAYERS, kvs_drv_name(d), rounds);
	printf("one memcpy of the same bytes: %.2f GB/s\n", base);
	printf("%-11s %4s  %-9s  %-6s %8s %8s  %6s  %7s  %6s\n", "layout", "page", "pages", "dir",
	       "copies", "batches", "MiB", "GB/s", "/memcpy");
	for (lay = 0; lay < 2; lay++)
		for (p = 0; p < 3; p++)
			if (run(d, lay ? KVS_HPOOL_PAGE_FIRST : KVS_HPOOL_LAYER_FIRST, ps[p], base) < 0)
				return 1;
	kvs_drv_close(d);
	return 0;
}
