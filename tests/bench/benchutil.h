/* SPDX-License-Identifier: MIT */
/* tests/bench/benchutil.h - timing and medians for the benchmarks. */
#ifndef KVSLAB_BENCHUTIL_H
#define KVSLAB_BENCHUTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t bench_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int bench_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts @v in place; returns the value at quantile @q (0.5: median). */
static inline uint64_t bench_quantile(uint64_t *v, size_t n, double q)
{
	size_t i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), bench_cmp_u64);
	i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i];
}

#endif
