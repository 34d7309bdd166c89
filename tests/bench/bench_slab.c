/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_slab.c - the slab allocator against the baseline SGLang's
 * allocator uses (a stack of free indices, everything mapped up front),
 * measured side by side in one run on the host backend, the contenders
 * interleaved round by round.  What each line times, per operation pair:
 *   - "alloc+free 1 page (fast path)": BATCH pairs kvs_slab_alloc() +
 *     kvs_slab_free() on the calling thread's cache (no lock), against
 *     stack_alloc1() + stack_free1() (out of line, as a library call);
 *   - "alloc+free 256 pages (bulk)": BATCH / 10 pairs kvs_slab_alloc_bulk()
 *     + kvs_slab_free_bulk() of 256 pages, contiguous (one slab of 512
 *     pages mapped, its lowest free pages given), counts set and checked, against a
 *     memcpy of 256 indices off and back onto the stack;
 *   - "alloc+free 256 pages (scattered)": the same pair on a fragmented
 *     pool, its own static allocator: every slab full but for single-page
 *     holes, one in each 64 pages at a seeded offset and never two touching,
 *     so the 256 pages are the holes of 32 slabs (8 each) and the free hands
 *     back 256 pages alone; the stack holds the same 1024 holes;
 * each figure the median (and p90) over ROUNDS rounds of the batch's time
 * divided by its pairs, and the ratio slab/stack of the medians printed
 * with its target beside it (single <= 1.5x, contiguous bulk <= 3x,
 * scattered bulk <= 5x).  Both sides run the same calls in every round:
 * neither is given work the other is spared.  Then a churn run: seeded
 * requests of random lengths arrive, decode and leave; mapped and live bytes
 * are sampled every step for a static pool (KVS_SLAB_F_STATIC) and for the
 * slab allocator with its shrinker, and the summary gives peak and mean
 * fragmentation (1 - live / mapped) of each.
 *
 * Usage: bench_slab [ROUNDS] [CSV | --no-churn]   (CSV: the churn time series)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvslab.h>

#include "benchutil.h"

#define BATCH 1000
#define BULK 256

/* The baseline: SGLang's TokenToKVPoolAllocator reduced to C. */
struct stack_alloc {
	uint32_t *free;
	size_t top;
};

/* Out of line, as a library call would be, so both sides pay for a call. */
static __attribute__((noinline)) int64_t stack_alloc1(struct stack_alloc *a)
{
	return a->top ? (int64_t)a->free[--a->top] : -1;
}

static __attribute__((noinline)) void stack_free1(struct stack_alloc *a, uint32_t p)
{
	a->free[a->top++] = p;
}

static __attribute__((noinline)) int stack_alloc_n(struct stack_alloc *a, size_t n, uint32_t *out)
{
	if (n > a->top)
		return -1;
	a->top -= n;
	memcpy(out, a->free + a->top, n * sizeof(*out));
	return 0;
}

static __attribute__((noinline)) void stack_free_n(struct stack_alloc *a, size_t n, const uint32_t *p)
{
	memcpy(a->free + a->top, p, n * sizeof(*p));
	a->top += n;
}

static volatile uint64_t sink;

#define HOLE_STRIDE 64

/* Fill @s (@cap pages) and free one page in each HOLE_STRIDE at a seeded
 * offset that is never the group's last, so no two holes touch; the same
 * pages go onto @base's stack.  The calling thread's cache is flushed, so
 * every hole is free in its slab. */
static int make_holes(kvs_slab_t *s, uint64_t cap, struct stack_alloc *base)
{
	uint32_t *all = malloc(cap * sizeof(uint32_t));
	uint64_t k, x = 0x9e3779b97f4a7c15ULL;

	if (!all)
		return -1;
	for (k = 0; k < cap; k += BULK)
		if (kvs_slab_alloc_bulk(s, BULK, all + k) != BULK)
			return -1;
	base->top = 0;
	for (k = 0; k < cap; k += HOLE_STRIDE) {
		uint32_t p;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p = (uint32_t)(k + x % (HOLE_STRIDE - 1));
		if (kvs_slab_free(s, p) < 0)
			return -1;
		base->free[base->top++] = p;
	}
	kvs_slab_flush(s);
	free(all);
	return 0;
}

static void line(const char *what, uint64_t *v, int n, double per)
{
	printf("  %-40s median %8.2f ns", what, bench_quantile(v, n, 0.5) / per);
	printf("   p90 %8.2f ns\n", bench_quantile(v, n, 0.9) / per);
}

static int micro(int rounds)
{
	static const size_t tb[2] = {4096, 4096};
	uint64_t *t_slab1 = calloc(rounds, 8), *t_base1 = calloc(rounds, 8);
	uint64_t *t_slabn = calloc(rounds, 8), *t_basen = calloc(rounds, 8);
	uint64_t *t_slabh = calloc(rounds, 8), *t_baseh = calloc(rounds, 8);
	uint32_t pages[BULK];
	struct stack_alloc base, hbase;
	kvs_slab_attr_t a;
	kvs_drv_t *d = kvs_drv_open("host", NULL);
	kvs_slab_t *s, *h;
	uint64_t cap = 1 << 16, k;
	double m1, mb1, mn, mbn, mh, mbh;
	int r, i;

	kvs_slab_attr_init(&a);
	a.nbuffers = 2;
	a.token_bytes = tb;
	a.capacity_pages = cap;
	s = d ? kvs_slab_create(d, &a) : NULL;
	/* The fragmented pool: its own allocator, every slab mapped. */
	a.flags = KVS_SLAB_F_STATIC;
	h = d ? kvs_slab_create(d, &a) : NULL;
	base.free = malloc(cap * sizeof(uint32_t));
	hbase.free = malloc(cap * sizeof(uint32_t));
	if (!s || !h || !base.free || !hbase.free || !t_slab1 || !t_base1 || !t_slabn ||
	    !t_basen || !t_slabh || !t_baseh || make_holes(h, cap, &hbase) < 0) {
		perror("bench_slab");
		return 1;
	}
	for (k = 0; k < cap; k++)
		base.free[k] = (uint32_t)(cap - 1 - k);
	base.top = cap;
	/* Warm both: one slab mapped, caches filled. */
	for (i = 0; i < 100; i++)
		kvs_slab_free(s, (uint32_t)kvs_slab_alloc(s));

	/* Interleave the contenders round by round so drift hits both alike. */
	for (r = 0; r < rounds; r++) {
		uint64_t t0 = bench_ns();

		for (i = 0; i < BATCH; i++) {
			int64_t p = kvs_slab_alloc(s);

			sink += (uint64_t)p;
			kvs_slab_free(s, (uint32_t)p);
		}
		t_slab1[r] = bench_ns() - t0;
		t0 = bench_ns();
		for (i = 0; i < BATCH; i++) {
			int64_t p = stack_alloc1(&base);

			sink += (uint64_t)p;
			stack_free1(&base, (uint32_t)p);
		}
		t_base1[r] = bench_ns() - t0;
		t0 = bench_ns();
		for (i = 0; i < BATCH / 10; i++) {
			if (kvs_slab_alloc_bulk(s, BULK, pages) != BULK)
				return 1;
			sink += pages[BULK - 1];
			kvs_slab_free_bulk(s, BULK, pages);
		}
		t_slabn[r] = bench_ns() - t0;
		t0 = bench_ns();
		for (i = 0; i < BATCH / 10; i++) {
			if (stack_alloc_n(&base, BULK, pages) < 0)
				return 1;
			sink += pages[BULK - 1];
			stack_free_n(&base, BULK, pages);
		}
		t_basen[r] = bench_ns() - t0;
		t0 = bench_ns();
		for (i = 0; i < BATCH / 10; i++) {
			if (kvs_slab_alloc_bulk(h, BULK, pages) != BULK)
				return 1;
			sink += pages[BULK - 1];
			kvs_slab_free_bulk(h, BULK, pages);
		}
		t_slabh[r] = bench_ns() - t0;
		t0 = bench_ns();
		for (i = 0; i < BATCH / 10; i++) {
			if (stack_alloc_n(&hbase, BULK, pages) < 0)
				return 1;
			sink += pages[BULK - 1];
			stack_free_n(&hbase, BULK, pages);
		}
		t_baseh[r] = bench_ns() - t0;
	}
	printf("allocator micro-benchmarks (%d rounds, medians per operation pair):\n", rounds);
	line("slab: alloc+free 1 page (fast path)", t_slab1, rounds, BATCH);
	line("baseline stack: alloc+free 1 page", t_base1, rounds, BATCH);
	line("slab: alloc+free 256 pages (bulk)", t_slabn, rounds, BATCH / 10);
	line("baseline stack: alloc+free 256 pages", t_basen, rounds, BATCH / 10);
	line("slab: alloc+free 256 pages (scattered)", t_slabh, rounds, BATCH / 10);
	line("baseline stack: 256 pages (same holes)", t_baseh, rounds, BATCH / 10);
	m1 = (double)bench_quantile(t_slab1, rounds, 0.5);
	mb1 = (double)bench_quantile(t_base1, rounds, 0.5);
	mn = (double)bench_quantile(t_slabn, rounds, 0.5);
	mbn = (double)bench_quantile(t_basen, rounds, 0.5);
	mh = (double)bench_quantile(t_slabh, rounds, 0.5);
	mbh = (double)bench_quantile(t_baseh, rounds, 0.5);
	printf("  ratio slab/baseline: single %.2fx, bulk-256 %.2fx, bulk-256 scattered %.2fx\n",
	       m1 / mb1, mn / mbn, mh / mbh);
	printf("  target single           %6.2fx (<= 1.5x: %s)\n", m1 / mb1,
	       m1 / mb1 <= 1.5 ? "met" : "NOT met");
	printf("  target bulk-256         %6.2fx (<= 3x: %s)\n", mn / mbn,
	       mn / mbn <= 3.0 ? "met" : "NOT met");
	printf("  target bulk-256 holes   %6.2fx (<= 5x: %s)\n", mh / mbh,
	       mh / mbh <= 5.0 ? "met" : "NOT met");
	printf("  slab made %llu driver calls in all (%llu slab maps)\n",
	       (unsigned long long)kvs_slab_stat(s, KVS_SLAB_STAT_drv_calls),
	       (unsigned long long)kvs_slab_stat(s, KVS_SLAB_STAT_slab_maps));
	printf("  mapped: slab %llu bytes for what is live; baseline maps all %llu bytes\n",
	       (unsigned long long)kvs_slab_stat(s, KVS_SLAB_STAT_bytes_mapped),
	       (unsigned long long)(cap * 2 * 4096));
	kvs_slab_destroy(s);
	kvs_slab_destroy(h);
	kvs_drv_close(d);
	free(base.free);
	free(hbase.free);
	free(t_slabh);
	free(t_baseh);
	free(t_slab1);
	free(t_base1);
	free(t_slabn);
	free(t_basen);
	return 0;
}

/* ---------------------------------------------------------------- churn */

struct req {
	uint32_t npages, cap, tokens, left;
	uint32_t *pages;
};

struct churn {
	const char *name;
	kvs_slab_t *s;
	double frag_sum, frag_peak;
	uint64_t mapped_sum, mapped_peak, live_sum, steps, fails;
};

static uint64_t rng(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* One run of the churn on allocator @c; same seed, same requests. */
static int churn_run(struct churn *c, uint64_t seed, int steps, uint32_t page_size, FILE *csv)
{
	struct req *rs = calloc(512, sizeof(*rs));
	int nr = 0, step, k;
	uint64_t x = seed;

	if (!rs)
		return -1;
	for (step = 0; step < steps; step++) {
		uint64_t mapped, live;
		/* Load rises and falls: arrival rates per step in four phases sized
		 * so that the peak nearly fills the pool and the trough drains it. */
		static const uint32_t rate_ppm[4] = {40000, 90000, 30000, 2000};
		int arrivals = rng(&x) % 1000000 < rate_ppm[(step / 1000) % 4];

		for (k = 0; k < arrivals && nr < 512; k++) {
			struct req *r = &rs[nr];
			uint32_t prompt = 64 + (uint32_t)(rng(&x) % 4000);

			r->tokens = prompt;
			r->left = 16 + (uint32_t)(rng(&x) % 600);
			r->npages = (prompt + page_size - 1) / page_size;
			r->cap = r->npages + (r->left + page_size - 1) / page_size + 1;
			r->pages = malloc(r->cap * sizeof(uint32_t));
			if (!r->pages || kvs_slab_alloc_bulk(c->s, r->npages, r->pages) < 0) {
				free(r->pages);
				c->fails++;
				continue;
			}
			nr++;
		}
		for (k = 0; k < nr; k++) { /* decode one token each */
			struct req *r = &rs[k];

			if (r->tokens % page_size == 0) {
				int64_t p = kvs_slab_alloc(c->s);

				if (p < 0) {
					c->fails++;
					r->left = 0; /* preempted: finish now */
				} else {
					r->pages[r->npages++] = (uint32_t)p;
				}
			}
			r->tokens++;
			if (r->left)
				r->left--;
		}
		for (k = 0; k < nr;) { /* finished requests leave */
			if (rs[k].left == 0) {
				kvs_slab_free_bulk(c->s, rs[k].npages, rs[k].pages);
				free(rs[k].pages);
				rs[k] = rs[--nr];
			} else {
				k++;
			}
		}
		mapped = kvs_slab_stat(c->s, KVS_SLAB_STAT_bytes_mapped);
		live = kvs_slab_stat(c->s, KVS_SLAB_STAT_bytes_live);
		c->mapped_sum += mapped;
		c->live_sum += live;
		if (mapped > c->mapped_peak)
			c->mapped_peak = mapped;
		if (mapped) {
			double f = 1.0 - (double)live / (double)mapped;

			c->frag_sum += f;
			if (f > c->frag_peak)
				c->frag_peak = f;
		}
		c->steps++;
		if (csv)
			fprintf(csv, "%s,%d,%llu,%llu\n", c->name, step, (unsigned long long)mapped,
				(unsigned long long)live);
	}
	for (k = 0; k < nr; k++) {
		kvs_slab_free_bulk(c->s, rs[k].npages, rs[k].pages);
		free(rs[k].pages);
	}
	free(rs);
	return 0;
}

static int churn(const char *csvpath)
{
	/* 8 buffers of 2 KiB a token (4 layers of K and V, 8 heads x 128 x fp16). */
	static const size_t tb[8] = {2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048};
	struct churn c[2] = {{.name = "static"}, {.name = "slab"}};
	FILE *csv = NULL;
	int k;

	if (csvpath) {
		csv = fopen(csvpath, "w");
		if (!csv) {
			perror(csvpath);
			return 1;
		}
		fprintf(csv, "strategy,step,mapped_bytes,live_bytes\n");
	}
	printf("\nchurn: seeded requests (prompt 64..4064, output 16..616 tokens), page 16,\n"
	       "  8 buffers x 2 KiB/token, capacity 65536 tokens, 2 MiB granularity, 4000 steps\n");
	for (k = 0; k < 2; k++) {
		kvs_drv_t *d = kvs_drv_open("host", NULL);
		kvs_slab_attr_t a;

		kvs_slab_attr_init(&a);
		a.page_size = 16;
		a.nbuffers = 8;
		a.token_bytes = tb;
		a.capacity_pages = 65536 / 16;
		a.min_empty = 0;
		a.max_empty = 1;
		a.flags = k == 0 ? KVS_SLAB_F_STATIC : 0;
		c[k].s = d ? kvs_slab_create(d, &a) : NULL;
		if (!c[k].s || churn_run(&c[k], 42, 4000, 16, csv) < 0) {
			perror("bench_slab: churn");
			return 1;
		}
		kvs_slab_destroy(c[k].s);
		kvs_drv_close(d);
	}
	printf("  %-8s %14s %14s %14s %10s %10s %6s\n", "strategy", "peak mapped", "mean mapped",
	       "mean live", "peak frag", "mean frag", "fails");
	for (k = 0; k < 2; k++)
		printf("  %-8s %11.1f MiB %11.1f MiB %11.1f MiB %10.3f %10.3f %6llu\n", c[k].name,
		       c[k].mapped_peak / 1048576.0, c[k].mapped_sum / (double)c[k].steps / 1048576.0,
		       c[k].live_sum / (double)c[k].steps / 1048576.0, c[k].frag_peak,
		       c[k].frag_sum / (double)c[k].steps, (unsigned long long)c[k].fails);
	printf("summary: static peak frag %.3f mean frag %.3f; slab peak frag %.3f mean frag %.3f; "
	       "slab mean mapped %.1f%% of static\n",
	       c[0].frag_peak, c[0].frag_sum / c[0].steps, c[1].frag_peak, c[1].frag_sum / c[1].steps,
	       100.0 * (double)c[1].mapped_sum / (double)c[0].mapped_sum);
	if (csv)
		fclose(csv);
	return 0;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200;

	if (rounds < 1)
		return 2;
	if (micro(rounds))
		return 1;
	if (argc > 2 && strcmp(argv[2], "--no-churn") == 0)
		return 0;
	return churn(argc > 2 ? argv[2] : NULL);
}
