/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_reqtab.c - the request table's decode step: host time
 * of writing one new location for each of REQS running requests (SGLang's
 * req_to_token write of a decode step), with one kvs_reqtab_write() per
 * request against one kvs_reqtab_write_batch() for the step; median and
 * p99 over STEPS steps, and the driver's submissions a step
 * (kvs_drv_stat(3): copy_calls, batch_calls).  Under the libcuda double
 * (KVSLAB_DRIVER=cuda KVSLAB_CUDA_DOUBLE=.../libcudadouble.so) it also
 * counts the libcuda calls a step (memcpy, event record/query/wait).
 *
 * Nothing waits for the copies inside a step, as an engine launches its
 * kernels after the writes: the copies run behind, and a full staging ring
 * makes a write wait, which the times then show.
 *
 * Built with -DBENCH_NO_BATCH it measures only the single writes, so that
 * it also builds against a library from before the batch API.
 *
 * Usage: bench_reqtab [STEPS [REQS]]   (defaults 2000 and 128)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvslab.h>

#include "benchutil.h"

#define CTX 8192

/* libcuda calls of a copy path, when the double is loaded. */
static const char *const cu_fns[] = {
	"cuMemcpyHtoDAsync", "cuMemcpyBatchAsync", "cuMemcpyAsync", "cuEventRecord",
	"cuEventQuery", "cuEventSynchronize", "cuStreamWaitEvent", "cuLaunchKernel",
};

static unsigned long cu_calls(void)
{
	const char *p = getenv("KVSLAB_CUDA_DOUBLE");
	unsigned long (*calls)(const char *);
	unsigned long n = 0;
	void *h;
	size_t i;

	if (!p || !*p)
		return 0;
	h = dlopen(p, RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return 0;
	calls = (unsigned long (*)(const char *))dlsym(h, "kvsdbl_calls");
	for (i = 0; calls && i < sizeof(cu_fns) / sizeof(cu_fns[0]); i++)
		n += calls(cu_fns[i]);
	dlclose(h);
	return n;
}

static void run(kvs_drv_t *d, kvs_reqtab_t *t, const uint32_t *slots, uint32_t reqs,
		uint32_t steps, int batch)
{
	uint64_t *ns = calloc(steps, sizeof(*ns)), c0, b0, cu0, med, p99;
	int32_t *loc = calloc(reqs, sizeof(*loc));
#ifndef BENCH_NO_BATCH
	kvs_reqtab_write_t *w = calloc(reqs, sizeof(*w));
#endif
	uint32_t s, k;

	if (!ns || !loc) {
		perror("bench_reqtab: calloc");
		exit(1);
	}
	kvs_reqtab_sync(t);
	c0 = kvs_drv_stat(d, KVS_DRV_STAT_copy_calls);
	b0 = kvs_drv_stat(d, KVS_DRV_STAT_batch_calls);
	cu0 = cu_calls();
	for (s = 0; s < steps; s++) {
		uint32_t pos = s % CTX;
		uint64_t t0;

		for (k = 0; k < reqs; k++)
			loc[k] = (int32_t)(k * CTX + pos);
		t0 = bench_ns();
#ifndef BENCH_NO_BATCH
		if (batch) {
			for (k = 0; k < reqs; k++) {
				w[k].slot = slots[k];
				w[k].pos = pos;
				w[k].n = 1;
				w[k].locs = &loc[k];
			}
			if (kvs_reqtab_write_batch(t, w, reqs) < 0) {
				perror("kvs_reqtab_write_batch");
				exit(1);
			}
		} else
#endif
		{
			(void)batch;
			for (k = 0; k < reqs; k++)
				if (kvs_reqtab_write(t, slots[k], pos, 1, &loc[k]) < 0) {
					perror("kvs_reqtab_write");
					exit(1);
				}
		}
		ns[s] = bench_ns() - t0;
	}
	kvs_reqtab_sync(t);
	med = bench_quantile(ns, steps, 0.5);
	p99 = bench_quantile(ns, steps, 0.99);
	printf("%-28s %10.2f %10.2f %10.2f %10.3f %12.2f\n",
	       batch ? "kvs_reqtab_write_batch" : "kvs_reqtab_write x REQS", med / 1000.0,
	       p99 / 1000.0,
	       (double)(kvs_drv_stat(d, KVS_DRV_STAT_copy_calls) - c0) / steps,
	       (double)(kvs_drv_stat(d, KVS_DRV_STAT_batch_calls) - b0) / steps,
	       (double)(cu_calls() - cu0) / steps);
#ifndef BENCH_NO_BATCH
	free(w);
#endif
	free(loc);
	free(ns);
}

int main(int argc, char **argv)
{
	uint32_t steps = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 2000;
	uint32_t reqs = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 0) : 128;
	kvs_reqtab_t *t;
	uint32_t *slots;
	kvs_drv_t *d;

	if (steps == 0 || reqs == 0) {
		fprintf(stderr, "usage: bench_reqtab [STEPS [REQS]]\n");
		return 2;
	}
	d = kvs_drv_open(NULL, NULL);
	if (!d) {
		fprintf(stderr, "bench_reqtab: kvs_drv_open: %s\n", kvs_drv_open_error());
		return 1;
	}
	t = kvs_reqtab_create(d, reqs, CTX);
	slots = calloc(reqs, sizeof(*slots));
	if (!t || !slots || kvs_reqtab_alloc(t, reqs, slots) < 0) {
		perror("bench_reqtab: table");
		return 1;
	}
	printf("bench_reqtab: driver %s, %u requests a decode step, %u steps, table %u x %u\n",
	       kvs_drv_name(d), reqs, steps, reqs, CTX);
	printf("%-28s %10s %10s %10s %10s %12s\n", "a step", "median us", "p99 us",
	       "copies", "batches", "libcuda calls");
	run(d, t, slots, reqs, steps, 0);
#ifndef BENCH_NO_BATCH
	run(d, t, slots, reqs, steps, 1);
#endif
	free(slots);
	kvs_reqtab_destroy(t);
	kvs_drv_close(d);
	return 0;
}
