/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_radix.c - replay a Mooncake trace through the radix
 * cache, as SGLang's RadixCache peer baseline was measured (the traces'
 * README): per request, match the prefix (the radix match itself, without
 * the request flow's n - 1 cap), lock the matched node, allocate the missing
 * tokens from the pool (evicting on shortfall), insert the whole input,
 * free the duplicate locations, unlock.
 *
 * Token j of block id h is h * 512 + j; the last block holds
 * input_length - 512 * (n - 1) tokens.  Runs page sizes 1 and 16 at 10%,
 * 30% and 100% of the trace's unique tokens and prints, per run, the hit
 * ratio (tokens matched / tokens requested) beside the ideal one computed
 * directly from the trace (tokens whose page-aligned prefix an earlier
 * request held), requests per second, and the median ns per request of
 * each step timed apart: expanding the key, the match, the eviction (0 for
 * a request that needed none; also the median of the evicting requests),
 * the pool allocation and the insert, then each step's total over the run
 * (where the time went, beside the bound's total).  The capacity printed
 * is the pool's own (kvs_pool_capacity: whole slabs), not the one asked
 * for.
 *
 * Each run's requests/s counts the time of the cache's calls and the pool
 * allocation (not the key's expansion), and is printed as a fraction of
 * the bound (measure_bandwidth()) for the same run's token counts.  After
 * each 100% run, lock-free readers match over the full tree (readers()).
 *
 * Each configuration runs --repeat times (3); the summary at the end gives
 * the median requests/s and fraction of the bound, and the range, beside
 * issue 26's target (a median of at least 50% of the bound).
 *
 * Usage: bench_radix [--page 1|16] [--capacity 10|30|100] [--repeat N] [TRACE.jsonl ...]
 *   (default: both pages, every capacity, the conversation and
 * synthetic traces in $KVSLAB_SHARED/traces, else in the "shared" folder
 * beside any folder above $KVSLAB_TOP_SRCDIR, $KVSLAB_TOP_BUILDDIR or the
 * current one, as ../shared sits beside a checkout, or several levels up
 * from a VPATH or distcheck build; exits 77 when none is found)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <kvslab.h>

#include "benchutil.h"

struct treq {
	uint32_t len;		/* input tokens */
	uint32_t nblocks;
	uint32_t *blocks;	/* hash ids */
};

struct trace {
	struct treq *r;
	size_t n;
	uint32_t max_len;
	uint64_t max_hash;
};

/* Minimal reader of the Mooncake JSONL fields this bench needs. */
static int trace_load(const char *path, struct trace *t)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0, rcap = 0;
	ssize_t len;

	memset(t, 0, sizeof(*t));
	if (!f)
		return -1;
	while ((len = getline(&line, &cap, f)) > 0) {
		char *p = strstr(line, "\"input_length\""), *h = strstr(line, "\"hash_ids\"");
		struct treq q = {0, 0, NULL};
		size_t bcap = 0;

		if (!p || !h)
			continue;
		q.len = (uint32_t)strtoul(strchr(p, ':') + 1, NULL, 10);
		p = strchr(h, '[');
		while (p && *p && *p != ']') {
			char *end;
			unsigned long v;

			p++;
			while (*p == ' ')
				p++;
			if (*p == ']')
				break;
			v = strtoul(p, &end, 10);
			if (end == p)
				break;
			if (q.nblocks == bcap) {
				bcap = bcap ? 2 * bcap : 16;
				q.blocks = realloc(q.blocks, bcap * sizeof(uint32_t));
			}
			q.blocks[q.nblocks++] = (uint32_t)v;
			if (v > t->max_hash)
				t->max_hash = v;
			p = end;
		}
		if (q.nblocks == 0 || q.len == 0 || q.len > 512 * q.nblocks) {
			free(q.blocks);
			continue;
		}
		if (t->n == rcap) {
			rcap = rcap ? 2 * rcap : 1024;
			t->r = realloc(t->r, rcap * sizeof(*t->r));
		}
		t->r[t->n++] = q;
		if (q.len > t->max_len)
			t->max_len = q.len;
	}
	free(line);
	fclose(f);
	return t->n ? 0 : -1;
}

static uint32_t block_len(const struct treq *q, uint32_t b)
{
	return b + 1 < q->nblocks ? 512 : q->len - 512 * (q->nblocks - 1);
}

static void expand(const struct treq *q, int32_t *key)
{
	uint32_t b, j, k = 0;

	for (b = 0; b < q->nblocks; b++)
		for (j = 0; j < block_len(q, b); j++)
			key[k++] = (int32_t)(q->blocks[b] * 512u + j);
}

/* Unique tokens and the ideal hit ratio at page size @ps, from the trace:
 * per block id the longest run of it seen so far. */
static void ideal(const struct trace *t, uint32_t ps, uint64_t *unique, double *hit)
{
	uint32_t *seen = calloc(t->max_hash + 1, sizeof(uint32_t));
	uint64_t req = 0, matched = 0, uniq = 0;
	size_t i;

	for (i = 0; i < t->n; i++) {
		const struct treq *q = &t->r[i];
		uint64_t m = 0;
		uint32_t b;
		int open = 1;

		for (b = 0; b < q->nblocks; b++) {
			uint32_t l = block_len(q, b), s = seen[q->blocks[b]];

			if (open) {
				m += s < l ? s : l;
				if (s < l)
					open = 0;
			}
			if (l > s) {
				uniq += l - s;
				seen[q->blocks[b]] = l;
			}
		}
		req += q->len;
		matched += m / ps * ps;
	}
	free(seen);
	*unique = uniq;
	*hit = (double)matched / (double)req;
}

/*
 * The bound: the memory traffic the same work cannot avoid, at this core's
 * own memcmp and memcpy bandwidth over buffers far larger than its caches
 * (the tree's keys and locations are: hundreds of MB).  Per run: the
 * matched tokens' keys compared once (4 bytes a token), the allocated
 * tokens' locations written (4), the inserted tokens' keys and locations
 * copied into the tree (8), and the evicted tokens' locations given back
 * (4).  Measured before every configuration, medians of BW_REPS.
 */
#define BW_BYTES (64u << 20)
#define BW_REPS 7

static double bw_cmp, bw_cpy;	/* bytes per second */
static volatile int bw_sink;

static void measure_bandwidth(void)
{
	static char *a, *b;	/* kept: fresh pages would time the kernel */
	uint64_t tc[BW_REPS], tm[BW_REPS];
	int k;

	if (!a) {
		a = malloc(BW_BYTES);
		b = malloc(BW_BYTES);
		if (!a || !b) {
			perror("bench_radix");
			exit(1);
		}
		memset(a, 1, BW_BYTES);
		memset(b, 1, BW_BYTES);
	}
	for (k = 0; k < BW_REPS; k++) {
		uint64_t t0 = bench_ns();

		memcpy(b, a, BW_BYTES);
		tc[k] = bench_ns() - t0;
		t0 = bench_ns();
		bw_sink += memcmp(a, b, BW_BYTES);
		tm[k] = bench_ns() - t0;
	}
	bw_cpy = BW_BYTES / (bench_quantile(tc, BW_REPS, 0.5) / 1e9);
	bw_cmp = BW_BYTES / (bench_quantile(tm, BW_REPS, 0.5) / 1e9);
}

static double bound_seconds(uint64_t matched, uint64_t allocated, uint64_t inserted,
			    uint64_t evicted)
{
	return 4.0 * (double)matched / bw_cmp +
	       (4.0 * (double)allocated + 8.0 * (double)inserted + 4.0 * (double)evicted) / bw_cpy;
}

/* Per-request times of one step; a request that skips the step counts 0. */
struct stat_ns {
	uint64_t *v;
	size_t n, cap;
};

static void rec(struct stat_ns *s, uint64_t ns)
{
	if (s->n == s->cap) {
		uint64_t *v;

		s->cap = s->cap ? 2 * s->cap : 4096;
		v = realloc(s->v, s->cap * sizeof(uint64_t));
		if (!v) {
			perror("bench_radix");
			exit(1);
		}
		s->v = v;
	}
	s->v[s->n++] = ns;
}

static uint64_t median(struct stat_ns *s)
{
	return bench_quantile(s->v, s->n, 0.5);
}

/* The step's total over the run, in ms: where the time went. */
static double total_ms(const struct stat_ns *s)
{
	uint64_t t = 0;
	size_t i;

	for (i = 0; i < s->n; i++)
		t += s->v[i];
	return (double)t / 1e6;
}

/*
 * Lock-free readers over the tree a run left behind: the first READ_REQS
 * requests' keys, expanded beforehand, matched with kvs_radix_match_ro()
 * READ_ROUNDS times by each of 1 and 2 threads at once; prints matches and
 * matched tokens per second of wall time, the median of READ_REPS tries.
 */
#define READ_REQS 500
#define READ_ROUNDS 4
#define READ_REPS 5

static int cmp_double(const void *a, const void *b);

struct reader {
	kvs_radix_t *r;
	const int32_t *keys;
	const size_t *off;	/* READ_REQS + 1 offsets into keys */
	size_t nreq;
	uint64_t tokens;
	int32_t *locs;
};

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	int round;
	size_t i;

	for (round = 0; round < READ_ROUNDS; round++)
		for (i = 0; i < rd->nreq; i++) {
			ssize_t m = kvs_radix_match_ro(rd->r, 0, rd->keys + rd->off[i],
						       rd->off[i + 1] - rd->off[i], rd->locs);

			rd->tokens += m > 0 ? (uint64_t)m : 0;
		}
	return NULL;
}

static void readers(kvs_radix_t *r, const struct trace *t)
{
	size_t nreq = t->n < READ_REQS ? t->n : READ_REQS, i, total = 0;
	size_t *off = malloc((nreq + 1) * sizeof(size_t));
	int32_t *keys;
	int nth;

	for (i = 0; i < nreq; i++)
		total += t->r[i].len;
	keys = malloc(total * sizeof(int32_t));
	if (!off || !keys) {
		perror("bench_radix");
		exit(1);
	}
	off[0] = 0;
	for (i = 0; i < nreq; i++) {
		expand(&t->r[i], keys + off[i]);
		off[i + 1] = off[i] + t->r[i].len;
	}
	printf("    lock-free readers (kvs_radix_match_ro, first %zu requests x %d, median of %d):",
	       nreq, READ_ROUNDS, READ_REPS);
	for (nth = 1; nth <= 2; nth++) {
		double mps[READ_REPS], tps[READ_REPS];
		int rep;

		for (rep = 0; rep < READ_REPS; rep++) {
			struct reader rd[2];
			pthread_t th[2];
			uint64_t t0 = bench_ns(), tokens = 0, wall;
			int k;

			for (k = 0; k < nth; k++) {
				rd[k] = (struct reader){r, keys, off, nreq, 0,
							malloc(t->max_len * sizeof(int32_t))};
				if (!rd[k].locs ||
				    pthread_create(&th[k], NULL, reader_main, &rd[k]) != 0) {
					perror("bench_radix");
					exit(1);
				}
			}
			for (k = 0; k < nth; k++) {
				pthread_join(th[k], NULL);
				tokens += rd[k].tokens;
				free(rd[k].locs);
			}
			wall = bench_ns() - t0;
			mps[rep] = (double)nth * READ_ROUNDS * nreq / (wall / 1e9);
			tps[rep] = (double)tokens / wall;
		}
		qsort(mps, READ_REPS, sizeof(double), cmp_double);
		qsort(tps, READ_REPS, sizeof(double), cmp_double);
		printf("  %d thread%s %.0f matches/s (%.2f G tokens/s)", nth, nth > 1 ? "s" : "",
		       mps[READ_REPS / 2], tps[READ_REPS / 2]);
	}
	printf("\n");
	free(keys);
	free(off);
}

static int run(const struct trace *t, uint32_t ps, uint64_t capacity, double ideal_hit,
	       const char *label, int fraction_full, double *rps, double *frac)
{
	double cmp0, cpy0;
	kvs_drv_attr_t da;
	kvs_pool_attr_t pa;
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_radix_t *r;
	int32_t *key = malloc((t->max_len + 16) * sizeof(int32_t));
	int32_t *locs = malloc((t->max_len + 16) * sizeof(int32_t));
	int32_t *held;
	size_t held_n;
	/* expand, match, evict (every request), evict (evicting ones), alloc, insert */
	struct stat_ns sx = {0}, sm = {0}, se = {0}, sec = {0}, sa = {0}, si = {0};
	uint64_t req_tokens = 0, hit_tokens = 0, alloc_tokens = 0, evicted_tokens = 0;
	uint64_t busy = 0, inserted;
	struct rusage ru0, ru1;
	double bound_s;
	size_t i;

	measure_bandwidth();
	cmp0 = bw_cmp;
	cpy0 = bw_cpy;
	kvs_drv_attr_init(&da);
	da.flags = KVS_DRV_F_NO_POPULATE; /* pages arrive when used */
	d = kvs_drv_open("host", &da);
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = ps;
	pa.max_tokens = capacity / ps * ps;
	pa.max_mapped = 0;
	pool = d ? kvs_pool_create(d, &pa) : NULL;
	r = pool ? kvs_radix_create(pool, NULL) : NULL;
	if (!r || !key || !locs) {
		perror("bench_radix");
		return 1;
	}
	/* The pool rounds its capacity up to whole slabs: hold the excess for
	 * the run, so that the cache has exactly the capacity asked. */
	held_n = kvs_pool_capacity(pool) > pa.max_tokens ? kvs_pool_capacity(pool) - pa.max_tokens
							  : 0;
	held = malloc((held_n ? held_n : 1) * sizeof(int32_t));
	if (!held || (held_n && kvs_pool_alloc(pool, held_n, held) < 0)) {
		perror("bench_radix: holding the pool's excess");
		return 1;
	}
	getrusage(RUSAGE_SELF, &ru0);
	for (i = 0; i < t->n; i++) {
		const struct treq *q = &t->r[i];
		uint32_t n = q->len / ps * ps;
		kvs_radix_node_t *last;
		uint64_t a = bench_ns(), b, ev = 0, start;
		ssize_t m, got, e;
		size_t need;
		int ok;

		expand(q, key);
		b = start = bench_ns();
		rec(&sx, b - a);
		m = kvs_radix_match(r, 0, key, q->len, locs, &last);
		a = bench_ns();
		rec(&sm, a - b);
		if (m < 0)
			return 1;
		kvs_radix_lock(r, last);
		hit_tokens += (uint64_t)m;
		req_tokens += q->len;
		/* A match past the aligned length (page > 1) needs nothing more. */
		need = n > (size_t)m ? n - (size_t)m : 0;
		if (need > kvs_pool_available(pool)) {
			a = bench_ns();
			e = kvs_radix_evict(r, need - kvs_pool_available(pool));
			ev = bench_ns() - a;
			evicted_tokens += e > 0 ? (uint64_t)e : 0;
			rec(&sec, ev);
		}
		rec(&se, ev);
		a = bench_ns();
		ok = !need || kvs_pool_alloc(pool, need, locs + m) == 0;
		rec(&sa, bench_ns() - a);
		if (!ok) {
			kvs_radix_unlock(r, last); /* larger than the whole cache: skip */
			rec(&si, 0);
			busy += bench_ns() - start;
			continue;
		}
		alloc_tokens += need;
		a = bench_ns();
		got = kvs_radix_insert(r, 0, key, n, locs, 0, NULL);
		rec(&si, bench_ns() - a);
		if (got > m)
			kvs_pool_free(pool, (size_t)(got - m), locs + m);
		kvs_radix_unlock(r, last);
		busy += bench_ns() - start;
	}
	getrusage(RUSAGE_SELF, &ru1);
	/* The bandwidth before and after the run, averaged: the machine's
	 * other tenants change it over seconds. */
	measure_bandwidth();
	bw_cmp = (bw_cmp + cmp0) / 2;
	bw_cpy = (bw_cpy + cpy0) / 2;
	printf("  bound: memcmp %.2f GB/s, memcpy %.2f GB/s (one core, %u MiB buffers, "
	       "before and after) over: the matched keys compared (4 B a token), the allocated "
	       "locations written (4 B), the inserted keys and locations copied (8 B), the evicted "
	       "locations freed (4 B)\n", bw_cmp / 1e9, bw_cpy / 1e9, BW_BYTES >> 20);
	inserted = kvs_radix_stat(r, KVS_RADIX_STAT_inserted_tokens);
	bound_s = bound_seconds(hit_tokens, alloc_tokens, inserted, evicted_tokens);
	*rps = (double)t->n / ((double)busy / 1e9);
	*frac = bound_s / ((double)busy / 1e9);
	printf("  page %2u cap %9llu (%s of the unique tokens; the pool's %llu, the rest held)"
	       ": hit %.4f (ideal %.4f) %8.0f req/s = %5.1f%% of bound %.0f\n",
	       ps, (unsigned long long)(capacity / ps * ps), label,
	       (unsigned long long)kvs_pool_capacity(pool), (double)hit_tokens / (double)req_tokens,
	       ideal_hit, (double)t->n / ((double)busy / 1e9),
	       100.0 * bound_s / ((double)busy / 1e9), (double)t->n / bound_s);
	printf("    tokens: matched %llu allocated %llu inserted %llu evicted %llu; minor page "
	       "faults during the requests %ld\n",
	       (unsigned long long)hit_tokens, (unsigned long long)alloc_tokens,
	       (unsigned long long)inserted, (unsigned long long)evicted_tokens,
	       ru1.ru_minflt - ru0.ru_minflt);
	printf("    median ns/request: expand %llu  match %llu  evict %llu (%llu over %zu "
	       "evicting)  alloc %llu  insert %llu\n",
	       (unsigned long long)median(&sx), (unsigned long long)median(&sm),
	       (unsigned long long)median(&se), (unsigned long long)median(&sec), sec.n,
	       (unsigned long long)median(&sa), (unsigned long long)median(&si));
	printf("    total ms: match %.1f  evict %.1f  alloc %.1f  insert %.1f  (busy %.1f; the "
	       "bound's %.1f)\n", total_ms(&sm), total_ms(&se), total_ms(&sa), total_ms(&si),
	       (double)busy / 1e6, bound_s * 1e3);
	free(sx.v);
	free(sm.v);
	free(se.v);
	free(sec.v);
	free(sa.v);
	free(si.v);
	if (fraction_full)
		readers(r, t);
	if (held_n)
		kvs_pool_free(pool, held_n, held);
	free(held);
	kvs_radix_destroy(r);
	kvs_pool_destroy(pool);
	kvs_drv_close(d);
	free(key);
	free(locs);
	return 0;
}

static uint32_t only_page;	/* --page: 0 for both */
static int repeat = 3;		/* --repeat: runs of each configuration */
static char summary[4096];	/* one line a configuration, printed at the end */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}
static int only_cap = -1;	/* --capacity: index into fractions[], -1 for all */

static int bench_trace(const char *path)
{
	static const double fractions[] = {0.10, 0.30, 1.00};
	static const char *const labels[] = {"10%", "30%", "100%"};
	static const uint32_t pss[] = {1, 16};
	struct trace t;
	size_t i, k;

	if (trace_load(path, &t) < 0) {
		fprintf(stderr, "bench_radix: cannot read %s: %s\n", path, strerror(errno));
		return -1;
	}
	printf("%s: %zu requests\n", path, t.n);
	for (k = 0; k < 2; k++) {
		uint64_t unique;
		double hit;

		if (only_page && pss[k] != only_page)
			continue;
		ideal(&t, pss[k], &unique, &hit);
		if (k == 0)
			printf("  unique tokens %llu, ideal hit at page 1: %.4f\n",
			       (unsigned long long)unique, hit);
		for (i = 0; i < 3; i++) {
			double rps[16], frac[16];
			int j;

			if (only_cap >= 0 && (size_t)only_cap != i)
				continue;
			for (j = 0; j < repeat; j++)
				/* N% of the unique tokens, rounded up to a page. */
				if (run(&t, pss[k], ((uint64_t)(fractions[i] * (double)unique) +
						     pss[k] - 1) / pss[k] * pss[k],
					hit, labels[i], i == 2 && j == 0, &rps[j], &frac[j]))
					return 1;
			qsort(rps, (size_t)repeat, sizeof(double), cmp_double);
			qsort(frac, (size_t)repeat, sizeof(double), cmp_double);
			snprintf(summary + strlen(summary), sizeof(summary) - strlen(summary),
				 "  %-12.12s page %2u %4s: %8.0f req/s, %5.1f%% of bound (runs %.1f%% to "
				 "%.1f%%; target >= 50%%: %s)\n",
				 strrchr(path, '/') ? strrchr(path, '/') + 1 : path, pss[k], labels[i],
				 rps[repeat / 2], 100 * frac[repeat / 2], 100 * frac[0],
				 100 * frac[repeat - 1], frac[repeat / 2] >= 0.5 ? "met" : "NOT met");
		}
	}
	for (i = 0; i < t.n; i++)
		free(t.r[i].blocks);
	free(t.r);
	return 0;
}

/*
 * The traces folder: $KVSLAB_SHARED/traces, else "shared/traces" beside
 * @start or any folder above it.  Returns 0 with the folder in @out.
 */
static int find_traces(const char *start, char *out, size_t size)
{
	char dir[4096], *slash;

	if (!start || !*start || strlen(start) >= sizeof(dir))
		return -1;
	snprintf(dir, sizeof(dir), "%s", start);
	for (;;) {
		FILE *f;

		snprintf(out, size, "%s/shared/traces/conversation_trace.jsonl", dir);
		if ((f = fopen(out, "r"))) {
			fclose(f);
			snprintf(out, size, "%s/shared/traces", dir);
			return 0;
		}
		slash = strrchr(dir, '/');
		if (!slash || slash == dir)
			return -1;
		*slash = 0;
	}
}

int main(int argc, char **argv)
{
	const char *shared = getenv("KVSLAB_SHARED");
	const char *starts[3] = {getenv("KVSLAB_TOP_SRCDIR"), getenv("KVSLAB_TOP_BUILDDIR"), NULL};
	char cwd[4096], dir[4096], path[2][4200];
	int i, ran = 0, found = 0;

	while (argc > 2 && argv[1][0] == '-') {
		if (strcmp(argv[1], "--page") == 0) {
			only_page = (uint32_t)atoi(argv[2]);
		} else if (strcmp(argv[1], "--repeat") == 0) {
			repeat = atoi(argv[2]);
			if (repeat < 1 || repeat > 16)
				only_cap = -2;
		} else if (strcmp(argv[1], "--capacity") == 0) {
			int pct = atoi(argv[2]);

			only_cap = pct == 10 ? 0 : pct == 30 ? 1 : pct == 100 ? 2 : -2;
		} else {
			break;
		}
		argc -= 2;
		argv += 2;
	}
	if ((only_page != 0 && only_page != 1 && only_page != 16) || only_cap == -2 ||
	    (argc > 1 && argv[1][0] == '-')) {
		fprintf(stderr, "usage: bench_radix [--page 1|16] [--capacity 10|30|100] "
				"[--repeat 1..16] [TRACE.jsonl ...]\n");
		return 2;
	}
	if (argc > 1) {
		for (i = 1; i < argc; i++)
			if (bench_trace(argv[i]) != 0)
				return 1;
		printf("summary (medians of %d runs):\n%s", repeat, summary);
		return 0;
	}
	if (shared && *shared) {
		snprintf(dir, sizeof(dir), "%s/traces", shared);
		found = 1;
	}
	starts[2] = getcwd(cwd, sizeof(cwd));
	for (i = 0; i < 3 && !found; i++)
		found = find_traces(starts[i], dir, sizeof(dir)) == 0;
	if (!found) {
		fprintf(stderr, "bench_radix: no shared/traces beside any folder above the source, "
				"build or current folder, and KVSLAB_SHARED is not set: skipped\n");
		return 77;
	}
	snprintf(path[0], sizeof(path[0]), "%s/conversation_trace.jsonl", dir);
	snprintf(path[1], sizeof(path[1]), "%s/synthetic_trace.jsonl", dir);
	for (i = 0; i < 2; i++) {
		FILE *f = fopen(path[i], "r");

		if (!f)
			continue;
		fclose(f);
		if (bench_trace(path[i]) != 0)
			return 1;
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "bench_radix: no trace under %s: skipped\n", dir);
		return 77;
	}
	printf("summary (medians of %d runs):\n%s", repeat, summary);
	return 0;
}
