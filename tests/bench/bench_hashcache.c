/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_hashcache.c - the hashed block cache (kvs_hcache_*) at
 * 1k, 100k and 1M cached blocks: ns per block of
 *
 *  - lookup:  kvs_hcache_lookup() of a 64-block request that hits fully,
 *             every block on the free queue (refcount 0 -> 1), and
 *    free:    kvs_hcache_free() of the same blocks, last first, back to the
 *             queue's tail; the two are timed apart, per call;
 *  - match:   kvs_hcache_match_ro() of the same requests (64 hits each);
 *  - alloc:   kvs_hcache_alloc() of 64 blocks from free pool pages (no
 *             eviction), and free: their kvs_hcache_free() back to the pool;
 *  - evict:   kvs_hcache_alloc() of 64 blocks with the pool empty and every
 *             cached block on the free queue, so each block evicts the
 *             queue's head (its hash leaves the table); then
 *    cache:   kvs_hcache_cache() of them under fresh hashes, and
 *    free:    kvs_hcache_free(), last first, to the queue's tail, so that
 *             the cache holds N cached blocks throughout.
 *
 * The lookups visit the N / 64 requests in a random order, so that at 1M
 * the table and the block array are read as a real cache reads them, mostly
 * from memory.  The hashes are 32 bytes made from a counter by splitmix64
 * outside the timed calls (the fresh ones of the evict phase too); the
 * cache's own bucket hash of them is measured.  An evicting alloc includes
 * the one kvs_pool_alloc() that finds the pool empty.  Pages are 16 tokens
 * of the "tiny" model (2 bytes a token) over a lazy host driver, which
 * commits nothing: 1M blocks cost the cache's metadata and this program's
 * hashes (under 200 bytes a block), not KV memory.  Each point is the
 * median over the repetitions of the ns per block of one repetition (at
 * least 256k blocks, or all N); the last line gives evict at the largest N
 * over evict at the smallest: about 1 when eviction is O(1) per block and
 * the memory hierarchy does not intervene.
 *
 * vLLM's BlockPool beside it: with KVSLAB_VLLM_SRC naming a vLLM source
 * tree (one that holds vllm/v1/core/block_pool.py), each point is run
 * again, right after kvslab's, by tests/bench/peer_vllm_blockpool.py (found
 * under KVSLAB_TOP_SRCDIR, else the current directory; run by
 * KVSLAB_PYTHON, else /usr/bin/python3): vLLM's own block_pool.py and
 * kv_cache_utils.py on the same workload (get_cached_block() and touch(),
 * free_blocks(), get_new_blocks() evicting, cache_full_blocks()).  Then
 * each row has vLLM's row and the ratios under it, and the last lines give
 * issue 26's targets beside their figures: eviction >= 10x vLLM's per
 * block at the middle point (max_blocks * 100 / 1024, about 10% of the
 * largest) and at the largest (4M: bench_hashcache 4194304), and the
 * request's whole sequence of cache operations (lookup + free, evict +
 * cache + free, per block) >= 20x.  Without KVSLAB_VLLM_SRC, the lines say
 * that no peer ran: no figure from another run is printed as the peer's.
 *
 * Usage: bench_hashcache [max_blocks [reps [top]]]   (default 1048576
 * blocks, 7 repetitions; the points are max_blocks / 1024, max_blocks *
 * 100 / 1024 and max_blocks, rounded up to whole 64-block requests; "top":
 * the largest point only)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <kvslab.h>

#include "benchutil.h"

#define PS 16			/* tokens per block */
#define REQ 64			/* blocks per request */
#define SPARE 1024		/* free pool pages beside the cached blocks */
#define MIN_OPS (256u << 10)	/* blocks a repetition handles at least */
#define MAX_REPS 15

struct env {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hcache_t *hc;
	size_t n;			/* cached blocks */
	kvs_block_hash_t *h;		/* their hashes, request r at r * REQ */
	uint32_t *order;		/* the requests in a random order */
	int32_t *hog;			/* pool pages held apart, evict phase */
	size_t nhog;
	uint64_t next_hash;		/* counter of fresh hashes */
	uint64_t rng;
};

static void die(const char *what)
{
	fprintf(stderr, "bench_hashcache: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Hash number @i: 32 bytes, distinct for distinct @i. */
static void make_hash(uint64_t i, kvs_block_hash_t *h)
{
	uint64_t x = i * 4;

	for (int k = 0; k < 4; k++) {
		uint64_t v = splitmix(&x);

		memcpy(h->bytes + 8 * k, &v, 8);
	}
	h->len = 32;
}

static void reverse(const int32_t *in, int32_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = in[n - 1 - i];
}

/* A pool of @n + SPARE pages or a little more (whole slabs), a cache over it
 * holding @n cached blocks, all on the free queue. */
static void env_open(struct env *e, size_t n)
{
	kvs_drv_attr_t da;
	kvs_pool_attr_t pa;
	int32_t blk[REQ], rev[REQ];
	size_t r, nreq = n / REQ;

	memset(e, 0, sizeof(*e));
	e->n = n;
	e->rng = 0x2545f4914f6cdd1dULL;
	kvs_drv_attr_init(&da);
	da.flags = KVS_DRV_F_LAZY;	/* account, never touch */
	da.granularity = 4096;		/* small slabs: capacity close to asked */
	e->d = kvs_drv_open("host", &da);
	if (!e->d)
		die("kvs_drv_open");
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = PS;
	pa.slab_granules = 1;
	pa.max_tokens = (uint64_t)(n + SPARE) * PS;
	e->pool = kvs_pool_create(e->d, &pa);
	if (!e->pool)
		die("kvs_pool_create");
	e->hc = kvs_hcache_create(e->pool, NULL);
	e->h = malloc(n * sizeof(*e->h));
	e->order = malloc(nreq * sizeof(*e->order));
	e->hog = malloc((kvs_pool_capacity(e->pool) / PS) * sizeof(*e->hog));
	if (!e->hc || !e->h || !e->order || !e->hog)
		die("setup");
	for (size_t i = 0; i < n; i++)
		make_hash(e->next_hash++, &e->h[i]);
	for (r = 0; r < nreq; r++)
		e->order[r] = (uint32_t)r;
	for (r = nreq; r > 1; r--) {
		size_t j = splitmix(&e->rng) % r;
		uint32_t t = e->order[r - 1];

		e->order[r - 1] = e->order[j];
		e->order[j] = t;
	}
	for (r = 0; r < nreq; r++) {
		if (kvs_hcache_alloc(e->hc, REQ, blk) ||
		    kvs_hcache_cache(e->hc, blk, REQ, e->h + r * REQ, NULL, 0, NULL))
			die("fill");
		reverse(blk, rev, REQ);
		if (kvs_hcache_free(e->hc, rev, REQ))
			die("fill");
	}
}

static void env_close(struct env *e)
{
	int32_t locs[PS];

	for (size_t i = 0; i < e->nhog; i++) {
		for (int j = 0; j < PS; j++)
			locs[j] = e->hog[i] + j;
		if (kvs_pool_free(e->pool, PS, locs))
			die("kvs_pool_free");
	}
	if (kvs_hcache_destroy(e->hc) || kvs_pool_destroy(e->pool) || kvs_drv_close(e->d))
		die("teardown");
	free(e->h);
	free(e->order);
	free(e->hog);
}

/* Blocks one repetition handles: whole requests, at least MIN_OPS or N. */
static size_t rep_reqs(size_t n)
{
	size_t ops = n > MIN_OPS ? n : MIN_OPS;

	return ops / REQ;
}

static double per_block(uint64_t ns, size_t reqs)
{
	return (double)ns / (double)(reqs * REQ);
}

struct point {
	size_t n, capacity;
	double lookup, lfree, match, alloc, afree, evict, ecache, efree;
	long rss_kib;
	bool peer;			/* vLLM's figures below are set */
	double vlookup, vlfree, vmatch, vevict, vecache, vefree;
};

/* Median of @reps values of ns per block. */
static double med(double *v, int reps)
{
	uint64_t t[MAX_REPS];

	for (int i = 0; i < reps; i++)
		t[i] = (uint64_t)(v[i] * 1000.0 + 0.5);	/* ps, for the integer sort */
	return (double)bench_quantile(t, (size_t)reps, 0.5) / 1000.0;
}

static void bench_lookup(struct env *e, int reps, struct point *p)
{
	size_t nreq = e->n / REQ, reqs = rep_reqs(e->n);
	double vl[MAX_REPS], vf[MAX_REPS], vm[MAX_REPS];
	int32_t blk[REQ], rev[REQ];
	volatile ssize_t sink = 0;

	for (int rep = 0; rep < reps; rep++) {
		uint64_t tl = 0, tf = 0, t0;

		for (size_t q = 0; q < reqs; q++) {
			const kvs_block_hash_t *h = e->h + (size_t)e->order[q % nreq] * REQ;
			uint64_t a = bench_ns(), b, c;

			if (kvs_hcache_lookup(e->hc, h, REQ, REQ * PS + 1, blk) != REQ)
				die("lookup missed");
			b = bench_ns();
			reverse(blk, rev, REQ);
			c = bench_ns();
			if (kvs_hcache_free(e->hc, rev, REQ))
				die("kvs_hcache_free");
			tl += b - a;
			tf += bench_ns() - c;
		}
		vl[rep] = per_block(tl, reqs);
		vf[rep] = per_block(tf, reqs);
		t0 = bench_ns();
		for (size_t q = 0; q < reqs; q++)
			sink += kvs_hcache_match_ro(e->hc, e->h + (size_t)e->order[q % nreq] * REQ,
						    REQ, REQ * PS + 1);
		vm[rep] = per_block(bench_ns() - t0, reqs);
	}
	if (sink != (ssize_t)(reqs * REQ) * reps)
		die("match_ro missed");
	p->lookup = med(vl, reps);
	p->lfree = med(vf, reps);
	p->match = med(vm, reps);
}

static void bench_alloc(struct env *e, int reps, struct point *p)
{
	size_t reqs = rep_reqs(e->n);
	double va[MAX_REPS], vf[MAX_REPS];
	int32_t blk[REQ], rev[REQ];

	for (int rep = 0; rep < reps; rep++) {
		uint64_t ta = 0, tf = 0;

		for (size_t q = 0; q < reqs; q++) {
			uint64_t a = bench_ns(), b, c;

			if (kvs_hcache_alloc(e->hc, REQ, blk))
				die("kvs_hcache_alloc");
			b = bench_ns();
			reverse(blk, rev, REQ);
			c = bench_ns();
			if (kvs_hcache_free(e->hc, rev, REQ))
				die("kvs_hcache_free");
			ta += b - a;
			tf += bench_ns() - c;
		}
		va[rep] = per_block(ta, reqs);
		vf[rep] = per_block(tf, reqs);
	}
	p->alloc = med(va, reps);
	p->afree = med(vf, reps);
}

/* Hold every free pool page apart, so that the cache must evict. */
static void hog_pool(struct env *e)
{
	int32_t locs[PS];

	while (kvs_pool_available(e->pool) >= PS) {
		if (kvs_pool_alloc(e->pool, PS, locs))
			die("kvs_pool_alloc");
		e->hog[e->nhog++] = locs[0];
	}
}

static void bench_evict(struct env *e, int reps, struct point *p)
{
	size_t reqs = rep_reqs(e->n);
	double ve[MAX_REPS], vc[MAX_REPS], vf[MAX_REPS];
	kvs_block_hash_t fresh[REQ];
	int32_t blk[REQ], rev[REQ];
	kvs_hcache_stats_t st0, st;

	hog_pool(e);
	kvs_hcache_stats(e->hc, &st0);
	for (int rep = 0; rep < reps; rep++) {
		uint64_t te = 0, tc = 0, tf = 0;

		for (size_t q = 0; q < reqs; q++) {
			uint64_t a, b, c, d;

			for (int i = 0; i < REQ; i++)
				make_hash(e->next_hash++, &fresh[i]);
			a = bench_ns();
			if (kvs_hcache_alloc(e->hc, REQ, blk))
				die("kvs_hcache_alloc (evicting)");
			b = bench_ns();
			if (kvs_hcache_cache(e->hc, blk, REQ, fresh, NULL, 0, NULL))
				die("kvs_hcache_cache");
			c = bench_ns();
			reverse(blk, rev, REQ);
			d = bench_ns();
			if (kvs_hcache_free(e->hc, rev, REQ))
				die("kvs_hcache_free");
			te += b - a;
			tc += c - b;
			tf += bench_ns() - d;
		}
		ve[rep] = per_block(te, reqs);
		vc[rep] = per_block(tc, reqs);
		vf[rep] = per_block(tf, reqs);
	}
	kvs_hcache_stats(e->hc, &st);
	if (st.evictions - st0.evictions != (uint64_t)reqs * REQ * (uint64_t)reps ||
	    st.cached_blocks != e->n || st.free_queue_blocks != e->n) {
		errno = EPROTO;
		die("eviction did not keep the population");
	}
	p->evict = med(ve, reps);
	p->ecache = med(vc, reps);
	p->efree = med(vf, reps);
}

static long rss_kib(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_SELF, &ru) ? 0 : ru.ru_maxrss;
}

static void run_point(size_t n, int reps, struct point *p)
{
	struct env e;

	memset(p, 0, sizeof(*p));
	env_open(&e, n);
	p->n = n;
	p->capacity = kvs_pool_capacity(e.pool) / PS;
	bench_lookup(&e, reps, p);
	bench_alloc(&e, reps, p);
	bench_evict(&e, reps, p);
	if (kvs_hcache_validate(e.hc))
		die("kvs_hcache_validate");
	env_close(&e);
	p->rss_kib = rss_kib();
}

/* vLLM's BlockPool at @n blocks, run by peer_vllm_blockpool.py, into @p's
 * v* fields; false when KVSLAB_VLLM_SRC is unset or the run fails. */
static bool run_peer(size_t n, int reps, struct point *p)
{
	const char *src = getenv("KVSLAB_VLLM_SRC"), *top = getenv("KVSLAB_TOP_SRCDIR");
	const char *py = getenv("KVSLAB_PYTHON");
	char cmd[4096];
	FILE *f;
	int got;

	if (!src || !*src)
		return false;
	snprintf(cmd, sizeof(cmd), "'%s' '%s/tests/bench/peer_vllm_blockpool.py' '%s' %zu %d one",
		 py && *py ? py : "/usr/bin/python3", top && *top ? top : ".", src, n, reps);
	f = popen(cmd, "r");
	if (!f)
		return false;
	got = fscanf(f, "%lf %lf %lf %lf %lf %lf", &p->vlookup, &p->vlfree, &p->vmatch, &p->vevict,
		     &p->vecache, &p->vefree);
	p->peer = pclose(f) == 0 && got == 6;
	if (!p->peer)
		fprintf(stderr, "bench_hashcache: %s: failed\n", cmd);
	return p->peer;
}

static double ratio(double peer, double ours)
{
	return ours > 0 ? peer / ours : 0;
}

/* A request's cache operations a block: lookup + free, evict + cache + free. */
static double seq_ns(double lookup, double lfree, double evict, double ecache, double efree)
{
	return lookup + lfree + evict + ecache + efree;
}

static void print_target(const char *what, double ours, double peer, double want)
{
	double r = ratio(peer, ours);

	printf("  %-44s %8.1f ns  vLLM %8.1f ns  %6.1fx  (target >= %.0fx: %s)\n", what, ours,
	       peer, r, want, r >= want ? "met" : "NOT met");
}

static size_t round_req(size_t n)
{
	n = (n + REQ - 1) / REQ * REQ;
	return n ? n : REQ;
}

int main(int argc, char **argv)
{
	size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)1 << 20;
	int reps = argc > 2 ? atoi(argv[2]) : 7;
	bool only_top = argc > 3 && strcmp(argv[3], "top") == 0;
	size_t pts[3];
	struct point p[3];
	int first = only_top ? 2 : 0, mid = only_top ? 2 : 1;
	bool peers = true;
	char what[96];

	if (max == 0 || max > (1u << 26) || reps < 1 || reps > MAX_REPS ||
	    (argc > 3 && !only_top)) {
		fprintf(stderr, "usage: bench_hashcache [max_blocks (1..%u) [reps (1..%d) [top]]]\n",
			1u << 26, MAX_REPS);
		return 2;
	}
	pts[0] = round_req(max / 1024);
	pts[1] = round_req(max * 100 / 1024);
	pts[2] = round_req(max);
	printf("hashed block cache, %d-token blocks, %d-block requests, median ns/block of %d "
	       "repetitions\n", PS, REQ, reps);
	printf("%9s %9s | %7s %7s %7s | %7s %7s | %7s %7s %7s | %8s\n", "blocks", "pool",
	       "lookup", "free", "match", "alloc", "free", "evict", "cache", "free", "maxrss");
	for (int i = first; i < 3; i++) {
		run_point(pts[i], reps, &p[i]);
		printf("%9zu %9zu | %7.1f %7.1f %7.1f | %7.1f %7.1f | %7.1f %7.1f %7.1f | %5ld MiB\n",
		       p[i].n, p[i].capacity, p[i].lookup, p[i].lfree, p[i].match, p[i].alloc,
		       p[i].afree, p[i].evict, p[i].ecache, p[i].efree, p[i].rss_kib / 1024);
		fflush(stdout);
		if (run_peer(pts[i], reps, &p[i])) {
			printf("%9s %9s | %7.1f %7.1f %7.1f | %7s %7s | %7.1f %7.1f %7.1f |\n",
			       "vLLM", "", p[i].vlookup, p[i].vlfree, p[i].vmatch, "-", "-",
			       p[i].vevict, p[i].vecache, p[i].vefree);
			printf("%9s %9s | %6.1fx %6.1fx %6.1fx | %7s %7s | %6.1fx %6.1fx %6.1fx |\n",
			       "vLLM/us", "", ratio(p[i].vlookup, p[i].lookup),
			       ratio(p[i].vlfree, p[i].lfree), ratio(p[i].vmatch, p[i].match), "",
			       "", ratio(p[i].vevict, p[i].evict), ratio(p[i].vecache, p[i].ecache),
			       ratio(p[i].vefree, p[i].efree));
			fflush(stdout);
		}
		peers = peers && p[i].peer;
	}
	printf("  lookup/free: a 64-block request that hits fully, then its free to the queue;\n"
	       "  alloc/free: from and to free pool pages; evict/cache/free: alloc with the pool\n"
	       "  empty (one eviction a block), hashing under fresh hashes, free to the queue\n");
	if (!only_top)
		printf("evict ns/block at %zu over %zu blocks: %.2f (lookup %.2f, match %.2f)\n",
		       p[2].n, p[0].n, p[2].evict / p[0].evict, p[2].lookup / p[0].lookup,
		       p[2].match / p[0].match);
	if (!peers) {
		printf("targets (issue 26): vLLM's BlockPool not run (set KVSLAB_VLLM_SRC to a vLLM "
		       "source tree to run it beside, with the ratios)\n");
		return 0;
	}
	printf("targets (issue 26), vLLM's BlockPool run beside, per block:\n");
	for (int i = mid; i < 3; i++) {
		snprintf(what, sizeof(what), "evict at %zu blocks%s", p[i].n,
			 i == 1 ? " (~10% of the largest)" : "");
		print_target(what, p[i].evict, p[i].vevict, 10);
	}
	for (int i = first; i < 3; i++) {
		snprintf(what, sizeof(what), "request sequence at %zu blocks", p[i].n);
		print_target(what, seq_ns(p[i].lookup, p[i].lfree, p[i].evict, p[i].ecache, p[i].efree),
			     seq_ns(p[i].vlookup, p[i].vlfree, p[i].vevict, p[i].vecache, p[i].vefree),
			     20);
	}
	printf("  (request sequence: lookup + free of a hit, evict + cache + free of a new block)\n");
	return 0;
}
