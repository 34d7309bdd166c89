/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_radix_wait.c - how long a writer waits for a large
 * eviction (issue 26): a radix tree of LEAVES leaves (default 2M, 4 tokens
 * each, page 1, three levels: 128 x 128 x 128 under the root), from which
 * one kvs_radix_evict() takes EVICT tokens (default 80k) while a second
 * thread inserts new 4-token keys one after another.  Prints, per round,
 * the eviction's time and the inserter's longest call during it (the
 * longest writer section it waited behind, plus its own insert), and the
 * medians over the rounds; then the eviction alone (no inserter).
 *
 * The inserter's longest call also counts its own preemptions on this
 * machine, which a control measures: the inserter alone for as long, no
 * eviction.  The sections themselves are read from the cache's own
 * statistics (kvs_radix_stat(3): evict_sections, evict_section_ns and
 * evict_section_max_ns, wall-clock time with the writer lock held), per
 * round with and without the inserter; the last line gives the longest
 * section of the whole run, in wall-clock time (a preemption while the
 * lock is held included) and in the section's own CPU time, the latter
 * beside issue 26's target (<= 1 ms): what the library does under the
 * lock, which the scheduler of a loaded machine does not change.
 *
 *   bench_radix_wait [--leaves N] [--evict TOKENS] [--rounds R] [--slab-aware 0|1]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include <kvslab.h>

#include "benchutil.h"

#define LT 4 /* tokens a leaf */

static kvs_radix_t *r;
static kvs_pool_t *pool;
static atomic_int phase;	/* 0 idle, 1 inserting, 2 measuring, 3 quit */
static uint64_t worst_ns, inserts_during;
static _Atomic uint32_t next_key = 1;

static void key_of(uint32_t i, int32_t *key)
{
	key[0] = (int32_t)(1000000 + ((i >> 14) & 127));
	key[1] = (int32_t)(2000000 + ((i >> 7) & 127));
	for (int k = 0; k < LT; k++)
		key[2 + k] = (int32_t)(10000000 + i * LT + k);
}

static void *inserter(void *arg)
{
	int32_t key[2 + LT], locs[2 + LT];

	(void)arg;
	while (atomic_load(&phase) != 3) {
		uint64_t a, ns;
		int ph = atomic_load(&phase);

		if (ph == 0) {
			sched_yield();
			continue;
		}
		/* Branches of their own (never evicted by a round), 128 x 128. */
		uint32_t n = next_key++;

		key_of(0x40000000u + n, key);
		key[0] = (int32_t)(1000200 + (n & 127));
		key[1] = (int32_t)(2000200 + ((n >> 7) & 127));
		if (kvs_pool_alloc(pool, 2 + LT, locs) != 0)
			continue;
		ph = atomic_load(&phase);
		a = bench_ns();
		ssize_t m = kvs_radix_insert(r, 0, key, 2 + LT, locs, 0, NULL);
		ns = bench_ns() - a;
		if (m > 0)
			kvs_pool_free(pool, (size_t)m, locs);
		if (ph == 2 || atomic_load(&phase) == 2) {
			if (ns > worst_ns)
				worst_ns = ns;
			inserts_during++;
		}
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint32_t leaves = 2u << 20, rounds = 5, slab_aware = 1;
	size_t evict = 80000;
	kvs_drv_attr_t da;
	kvs_pool_attr_t pa;
	kvs_radix_attr_t ra;
	kvs_drv_t *d;
	pthread_t th;
	uint64_t *tw, *tev, *talone, *tctl, t0, sec0, secns0, sec, secns, cpu;
	int32_t key[2 + LT], locs[2 + LT];

	for (; argc > 2 && argv[1][0] == '-'; argc -= 2, argv += 2) {
		if (strcmp(argv[1], "--leaves") == 0)
			leaves = (uint32_t)strtoul(argv[2], NULL, 0);
		else if (strcmp(argv[1], "--evict") == 0)
			evict = strtoul(argv[2], NULL, 0);
		else if (strcmp(argv[1], "--rounds") == 0)
			rounds = (uint32_t)strtoul(argv[2], NULL, 0);
		else if (strcmp(argv[1], "--slab-aware") == 0)
			slab_aware = (uint32_t)strtoul(argv[2], NULL, 0);
	}
	if (rounds == 0 || (uint64_t)evict * 2 * rounds > (uint64_t)leaves * LT) {
		fprintf(stderr, "bench_radix_wait: too few leaves for %u rounds of %zu\n", rounds, evict);
		return 2;
	}
	kvs_drv_attr_init(&da);
	da.flags = KVS_DRV_F_NO_POPULATE;
	d = kvs_drv_open("host", &da);
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = 1;
	pa.max_tokens = (uint64_t)leaves * LT + (1u << 20) * 4;
	pa.max_mapped = 0;
	pool = d ? kvs_pool_create(d, &pa) : NULL;
	kvs_radix_attr_init(&ra);
	ra.slab_aware = slab_aware;
	r = pool ? kvs_radix_create(pool, &ra) : NULL;
	tw = calloc(rounds, sizeof(*tw));
	tev = calloc(rounds, sizeof(*tev));
	talone = calloc(rounds, sizeof(*talone));
	tctl = calloc(rounds, sizeof(*tctl));
	if (!r || !tw || !tev || !talone || !tctl) {
		perror("bench_radix_wait");
		return 1;
	}
	t0 = bench_ns();
	for (uint32_t i = 0; i < leaves; i++) {
		ssize_t m;

		key_of(i, key);
		if (kvs_pool_alloc(pool, 2 + LT, locs) != 0) {
			perror("bench_radix_wait: alloc");
			return 1;
		}
		m = kvs_radix_insert(r, 0, key, 2 + LT, locs, 0, NULL);
		if (m < 0) {
			perror("bench_radix_wait: insert");
			return 1;
		}
		kvs_pool_free(pool, (size_t)m, locs);
	}
	printf("bench_radix_wait: %u leaves (%llu nodes, %llu tokens) built in %.1f s; slab_aware %u\n",
	       leaves, (unsigned long long)kvs_radix_nodes(r),
	       (unsigned long long)kvs_radix_tokens(r), (bench_ns() - t0) / 1e9, slab_aware);
	if (pthread_create(&th, NULL, inserter, NULL) != 0)
		return 1;
	for (uint32_t k = 0; k < rounds; k++) {
		uint64_t a;
		ssize_t e;

		/* Each round with the inserter, then one without. */
		atomic_store(&phase, 1);
		while (next_key < 64 * (k + 1))
			sched_yield();
		worst_ns = inserts_during = 0;
		atomic_store(&phase, 2);
		sec0 = kvs_radix_stat(r, KVS_RADIX_STAT_evict_sections);
		secns0 = kvs_radix_stat(r, KVS_RADIX_STAT_evict_section_ns);
		a = bench_ns();
		e = kvs_radix_evict(r, evict);
		tev[k] = bench_ns() - a;
		atomic_store(&phase, 1);
		/* The call under way when the eviction ended counts too. */
		for (uint32_t w = next_key + 2; next_key < w;)
			sched_yield();
		atomic_store(&phase, 0);
		tw[k] = worst_ns;
		sec = kvs_radix_stat(r, KVS_RADIX_STAT_evict_sections) - sec0;
		secns = kvs_radix_stat(r, KVS_RADIX_STAT_evict_section_ns) - secns0;
		printf("  round %u: evicted %zd tokens in %.2f ms; inserter: %llu inserts during it, "
		       "longest %.3f ms; %llu sections, mean %.3f ms, longest so far %.3f ms\n",
		       k, e, tev[k] / 1e6, (unsigned long long)inserts_during, worst_ns / 1e6,
		       (unsigned long long)sec, sec ? secns / 1e6 / (double)sec : 0.0,
		       kvs_radix_stat(r, KVS_RADIX_STAT_evict_section_max_ns) / 1e6);
		/* Control: the inserter alone for as long, no eviction. */
		atomic_store(&phase, 1);
		worst_ns = inserts_during = 0;
		atomic_store(&phase, 2);
		struct timespec ts = {(time_t)(tev[k] / 1000000000u), (long)(tev[k] % 1000000000u)};
		nanosleep(&ts, NULL);
		atomic_store(&phase, 1);
		for (uint32_t w = next_key + 2; next_key < w;)
			sched_yield();
		atomic_store(&phase, 0);
		tctl[k] = worst_ns;
		a = bench_ns();
		e = kvs_radix_evict(r, evict);
		talone[k] = bench_ns() - a;
		printf("  round %u: alone, evicted %zd tokens in %.2f ms; control: inserter alone as "
		       "long, longest call %.3f ms\n",
		       k, e, talone[k] / 1e6, tctl[k] / 1e6);
	}
	atomic_store(&phase, 3);
	pthread_join(th, NULL);
	qsort(tw, rounds, sizeof(*tw), cmp_u64);
	qsort(tev, rounds, sizeof(*tev), cmp_u64);
	qsort(talone, rounds, sizeof(*talone), cmp_u64);
	qsort(tctl, rounds, sizeof(*tctl), cmp_u64);
	printf("bench_radix_wait: evict %zu of %u leaves, %u rounds: inserter's longest call median "
	       "%.3f ms (range %.3f-%.3f; target <= 1 ms), %.3f ms with no eviction; eviction median %.2f ms with the inserter, "
	       "%.2f ms alone (range %.2f-%.2f)\n",
	       evict, leaves, rounds, tw[rounds / 2] / 1e6, tw[0] / 1e6, tw[rounds - 1] / 1e6,
	       tctl[rounds / 2] / 1e6,
	       tev[rounds / 2] / 1e6, talone[rounds / 2] / 1e6, talone[0] / 1e6,
	       talone[rounds - 1] / 1e6);
	sec = kvs_radix_stat(r, KVS_RADIX_STAT_evict_sections);
	secns = kvs_radix_stat(r, KVS_RADIX_STAT_evict_section_ns);
	cpu = kvs_radix_stat(r, KVS_RADIX_STAT_evict_section_cpu_max_ns);
	printf("bench_radix_wait: eviction's write sections: %llu, mean %.3f ms, longest %.3f ms "
	       "of wall time (preemptions included), most CPU time in one %.3f ms "
	       "(target <= 1 ms: %s)\n",
	       (unsigned long long)sec, sec ? secns / 1e6 / (double)sec : 0.0,
	       kvs_radix_stat(r, KVS_RADIX_STAT_evict_section_max_ns) / 1e6, cpu / 1e6,
	       cpu <= 1000000 ? "met" : "NOT met");
	kvs_radix_destroy(r);
	kvs_pool_destroy(pool);
	kvs_drv_close(d);
	free(tw);
	free(tev);
	free(talone);
	free(tctl);
	return 0;
}
