/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_decay.c - memory an idle allocator gives back.
 *
 * A slab allocator on the host driver (real, prefaulted memory) with the
 * worker, 1 GiB in 64 slabs of 16 MiB, min_empty 1 and max_empty 64, so the
 * page-count hysteresis never releases anything: only the decay time does.
 * Everything is allocated, then freed, and the engine goes idle.  The bench
 * prints the allocator's mapped bytes and the process's resident shared
 * memory (RssShmem, where host-driver chunks live) as the idle time passes.
 *
 * Usage: bench_decay [DECAY_MS]   (default 1000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvslab.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long rss_shmem_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "RssShmem:", 9) == 0)
			kib = atol(line + 9);
	fclose(f);
	return kib;
}

static void report(kvs_slab_t *s, double t0, const char *what)
{
	printf("bench_decay: %6.2f s %-22s mapped %7.1f MiB, RssShmem %7.1f MiB, "
	       "empty slabs %llu\n",
	       now() - t0, what,
	       (double)kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped) / (1 << 20),
	       (double)rss_shmem_kib() / 1024,
	       (unsigned long long)kvs_slab_stat(s, KVS_SLAB_STAT_slabs_empty));
}

int main(int argc, char **argv)
{
	static const size_t tb[2] = {4096, 4096};
	unsigned long decay = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
	kvs_drv_attr_t da;
	kvs_slab_attr_t a;
	kvs_drv_t *d;
	kvs_slab_t *s;
	uint32_t *pages;
	uint64_t cap;
	double t0;
	int k;

	kvs_drv_attr_init(&da);
	d = kvs_drv_open("host", &da);
	if (!d) {
		perror("kvs_drv_open");
		return 1;
	}
	kvs_slab_attr_init(&a);
	a.nbuffers = 2;
	a.token_bytes = tb;
	a.slab_granules = 4;		/* 8 MiB a buffer, 16 MiB a slab */
	a.capacity_pages = 64 * 2048;
	a.min_empty = 1;
	a.max_empty = 64;
	a.decay_ms = decay;
	a.flags = KVS_SLAB_F_WORKER;
	s = kvs_slab_create(d, &a);
	if (!s) {
		perror("kvs_slab_create");
		return 1;
	}
	cap = kvs_slab_capacity(s);
	pages = malloc(cap * sizeof(*pages));
	if (!pages || kvs_slab_alloc_bulk(s, cap, pages) != (int)cap) {
		perror("kvs_slab_alloc_bulk");
		return 1;
	}
	t0 = now();
	report(s, t0, "all allocated");
	kvs_slab_free_bulk(s, cap, pages);
	report(s, t0, "all freed, now idle");
	for (k = 1; k <= 8; k++) {
		usleep((useconds_t)(decay * 1000 / 4));
		report(s, t0, k * 25 % 100 ? "idle" : "idle (decay time)");
	}
	printf("bench_decay: decay_ms %lu: %llu slabs unmapped by decay\n", decay,
	       (unsigned long long)kvs_slab_stat(s, KVS_SLAB_STAT_decay_unmaps));
	free(pages);
	kvs_slab_destroy(s);
	kvs_drv_close(d);
	return 0;
}
