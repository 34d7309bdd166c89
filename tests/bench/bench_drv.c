/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_drv.c - the driver's costs on the host backend, measured
 * in one run: map + set access + unmap of one granularity chunk, of a batch
 * of 64 chunks (64 maps, one set-access over the run, one unmap), and chunk
 * creation, which the slab allocator keeps off its fast path.
 *
 * Usage: bench_drv [ROUNDS]   (prints medians and p90 in microseconds)
 *        bench_drv --cuda [ROUNDS]   (the cuda backend against the raw
 *        driver: tests/bench/bench_drv_cuda.c; make bench-gpu)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvslab.h>

#include "benchutil.h"

#define BATCH 64

static void report(const char *what, uint64_t *v, size_t n, double per)
{
	uint64_t med = bench_quantile(v, n, 0.5), p90 = bench_quantile(v, n, 0.9);

	printf("%-44s median %9.1f us   p90 %9.1f us   per chunk %7.2f us   (n=%zu)\n", what,
	       med / 1e3, p90 / 1e3, med / 1e3 / per, n);
}

static int run(const char *label, unsigned flags, int rounds)
{
	kvs_drv_attr_t attr;
	kvs_drv_t *d;
	kvs_chunk_t *c[BATCH];
	kvs_devptr_t base;
	uint64_t *t = calloc(rounds, sizeof(*t));
	size_t g;
	int r, i;
	char name[96];

	kvs_drv_attr_init(&attr);
	attr.flags = flags;
	d = kvs_drv_open("host", &attr);
	if (!d || !t) {
		perror("bench_drv: open");
		return 1;
	}
	g = kvs_drv_granularity(d);
	if (kvs_drv_reserve(d, BATCH * g, &base) < 0)
		goto fail;
	for (i = 0; i < BATCH; i++)
		if (kvs_drv_chunk_create(d, g, &c[i]) < 0)
			goto fail;

	for (r = 0; r < rounds; r++) {
		uint64_t t0 = bench_ns();

		if (kvs_drv_map(d, base, c[r % BATCH]) < 0 ||
		    kvs_drv_set_access(d, base, g, KVS_ACCESS_RW) < 0 ||
		    kvs_drv_unmap(d, base, g) < 0)
			goto fail;
		t[r] = bench_ns() - t0;
	}
	snprintf(name, sizeof(name), "map+access+unmap, 1 chunk%s", label);
	report(name, t, rounds, 1);

	for (r = 0; r < rounds; r++) {
		uint64_t t0 = bench_ns();

		for (i = 0; i < BATCH; i++)
			if (kvs_drv_map(d, base + i * g, c[i]) < 0)
				goto fail;
		if (kvs_drv_set_access(d, base, BATCH * g, KVS_ACCESS_RW) < 0 ||
		    kvs_drv_unmap(d, base, BATCH * g) < 0)
			goto fail;
		t[r] = bench_ns() - t0;
	}
	snprintf(name, sizeof(name), "map+access+unmap, %d-chunk batch%s", BATCH, label);
	report(name, t, rounds, BATCH);

	for (r = 0; r < rounds; r++) {
		kvs_chunk_t *x;
		uint64_t t0 = bench_ns();

		if (kvs_drv_chunk_create(d, g, &x) < 0 || kvs_drv_chunk_release(d, x) < 0)
			goto fail;
		t[r] = bench_ns() - t0;
	}
	snprintf(name, sizeof(name), "chunk create+release%s", label);
	report(name, t, rounds, 1);
	free(t);
	return kvs_drv_close(d) < 0;
fail:
	perror("bench_drv");
	kvs_drv_close(d);
	free(t);
	return 1;
}

#ifdef BENCH_CUDA
int bench_drv_cuda(int rounds);
#endif

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200;
	kvs_drv_t *d;

	if (argc > 1 && strcmp(argv[1], "--cuda") == 0) {
#ifdef BENCH_CUDA
		rounds = argc > 2 ? atoi(argv[2]) : 200;
		return rounds < 1 ? 2 : bench_drv_cuda(rounds);
#else
		printf("bench_drv --cuda: built without the cuda backend\n");
		return 77;
#endif
	}
	d = kvs_drv_open("host", NULL);

	if (rounds < 1 || !d)
		return 2;
	printf("bench_drv: host backend, granularity %zu KiB, %d rounds each\n",
	       kvs_drv_granularity(d) >> 10, rounds);
	kvs_drv_close(d);
	if (run("", 0, rounds) || run(" (no populate)", KVS_DRV_F_NO_POPULATE, rounds))
		return 1;
	return 0;
}
