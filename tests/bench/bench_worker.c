/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_worker.c - spurious ENOMEM while the worker maps.
 *
 * A two-slab allocator with the worker and min_empty 1, slabs of 128 MiB
 * (prefaulted, so a map takes tens of milliseconds).  Each round takes all
 * of the mapped slab, which sends the worker to map the second, then asks
 * for one more page: it counts the allocations that failed with ENOMEM and
 * the times kvs_slab_available() said 0 until the page came, and how long
 * that took.  Before issue 9 the allocator failed for the whole length of
 * the map; now it waits for the slab in flight.
 *
 * Usage: bench_worker [ROUNDS]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <kvslab.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	static const size_t tb[2] = {2048, 2048};
	int r, rounds = argc > 1 ? atoi(argv[1]) : 20;
	unsigned long fails = 0, zero = 0;
	kvs_drv_attr_t da;
	kvs_slab_attr_t a;
	double waited = 0;
	kvs_drv_t *d;

	kvs_drv_attr_init(&da);
	d = kvs_drv_open("host", &da);
	if (!d) {
		perror("kvs_drv_open");
		return 1;
	}
	kvs_slab_attr_init(&a);
	a.nbuffers = 2;
	a.token_bytes = tb;
	a.slab_granules = 32;
	a.capacity_pages = 2 * 32 * 1024;
	a.min_empty = 1;
	a.max_empty = 2;
	a.chunk_pool = 0;
	a.magazine = 0;
	a.flags = KVS_SLAB_F_WORKER;
	for (r = 0; r < rounds; r++) {
		kvs_slab_t *s = kvs_slab_create(d, &a);
		uint32_t pps, *p;
		double t0;

		if (!s) {
			perror("kvs_slab_create");
			return 1;
		}
		pps = kvs_slab_pages_per_slab(s);
		p = malloc((pps + 1) * sizeof(*p));
		if (!p)
			return 1;
		while (kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty) < 1)
			usleep(100);
		if (kvs_slab_alloc_bulk(s, pps, p) != (int)pps) {
			perror("kvs_slab_alloc_bulk");
			return 1;
		}
		usleep(500); /* the worker is mapping the second slab now */
		t0 = now();
		for (;;) {
			int64_t x;

			if (kvs_slab_available(s) == 0)
				zero++;
			x = kvs_slab_alloc(s);
			if (x >= 0) {
				p[pps] = (uint32_t)x;
				break;
			}
			if (errno != ENOMEM) {
				perror("kvs_slab_alloc");
				return 1;
			}
			fails++;
		}
		waited += now() - t0;
		kvs_slab_free_bulk(s, pps + 1, p);
		free(p);
		kvs_slab_destroy(s);
	}
	printf("bench_worker: rounds %d, slabs of %d MiB: spurious ENOMEM %lu, "
	       "available() == 0 seen %lu, mean wait for the page %.2f ms\n",
	       rounds, 32 * 2 * 2, fails, zero, waited / rounds * 1e3);
	kvs_drv_close(d);
	return 0;
}
