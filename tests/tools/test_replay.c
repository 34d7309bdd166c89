/* SPDX-License-Identifier: MIT */
/*
 * tests/tools/test_replay.c - the replay simulator: accounting on a tiny
 * hand-checked trace, infinite-capacity hit ratio against the ideal
 * computed from the trace, live never above mapped under pressure, and a
 * drained slab run ending at one pre-mapping watermark; requests too large
 * for the budget or the request table rejected with their reason and the
 * table sized by what runs; the tool's exit status and error messages (the
 * tool run as a subprocess); two replays sharing one file store (L3), the
 * second finding the first's pages.
 */
#include <errno.h>
#include <math.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "testutil.h"
#include "trace.h"

/*
 * The replay is single-threaded; under ThreadSanitizer only liburcu's
 * worker runs beside it, and every entry it frees costs TSan a race check:
 * the traces of the long runs shrink there (TRACE_REQS), nothing else.
 */
#if defined(__SANITIZE_THREAD__)
#define TRACE_REQS(n) ((n) / 5)
#else
#define TRACE_REQS(n) (n)
#endif

/* A model with 1 byte a token in each of K and V: cell = 2 bytes. */
static void tiny_opts(struct rp_sim_opts *o)
{
	rp_sim_defaults(o);
	kvs_model_preset("tiny", &o->model);
	o->granularity = 4096; /* 4096 tokens a slab, 8 KiB mapped a slab */
	o->kv_bytes = 16384;   /* 8192 tokens: two slabs */
	o->max_running = 8;
	o->reserve = 0;
	o->step_ms = 10;
	o->min_empty = 1;
	o->max_empty = 1;
}

static struct rp_strategy strat(enum rp_kind k, uint32_t ps, const char *name)
{
	struct rp_strategy s;

	memset(&s, 0, sizeof(s));
	s.kind = k;
	s.page_size = ps;
	s.slab_granules = 1;
	snprintf(s.name, sizeof(s.name), "%s", name);
	return s;
}

/*
 * R0 arrives at 0 ms: 1024 input tokens (blocks 1, 2), 3 outputs.
 * R1 arrives at 100 ms: 1024 input tokens (blocks 1, 3), 2 outputs.
 * Steps are 10 ms.
 *  step 0 (0 ms): R0 prefills 1024 tokens, its first output comes with
 *     the prefill; decode gives it KV for 1025 tokens.  Live 1025 tokens.
 *  step 1 (10 ms): decode: 1026 tokens, third output: R0 finishes and
 *     caches 1026 tokens (input + 2 outputs).  Live 1026 (the tree's).
 *  idle until 100 ms, skipped.
 *  step 2 (100 ms): R1 finds block 1 (512 tokens) cached, prefills 512,
 *     decodes once (1025 tokens, second output) and finishes: the tree
 *     adds 1025 - 512 = 513 tokens.  Live 1539.
 * Hit ratio 512 / 2048.  Page 1, slab: one slab of 8192 bytes mapped all
 * along (the low watermark is mapped at creation).  Live bytes are tokens
 * x 2, so the mean fragmentation is 1 - (2050 + 2052 + 3078) / 3 / 8192.
 */
static void tiny_trace(struct rp_trace *t)
{
	static uint32_t b0[2] = {1, 2}, b1[2] = {1, 3};
	static struct rp_req r[2];

	memset(t, 0, sizeof(*t));
	r[0] = (struct rp_req){0, 1024, 3, 2, b0};
	r[1] = (struct rp_req){100, 1024, 2, 2, b1};
	t->req = r;
	t->n = 2;
	t->max_input = 1024;
	t->max_output = 3;
	t->next_block = 4;
}

START_TEST(test_hand_checked_slab)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_SLAB, 1, "slab:1");
	struct rp_result r;

	tiny_trace(&t);
	tiny_opts(&o);
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.steps, 3);
	ck_assert_uint_eq(r.requests_done, 2);
	ck_assert_uint_eq(r.preempted, 0);
	ck_assert_uint_eq(r.hit_tokens, 512);
	ck_assert_uint_eq(r.req_tokens, 2048);
	ck_assert_uint_eq(r.nsamples, 3);
	ck_assert_uint_eq(r.samples[0].live, 1025 * 2);
	ck_assert_uint_eq(r.samples[1].live, 1026 * 2);
	ck_assert_uint_eq(r.samples[2].live, 1539 * 2);
	ck_assert(r.samples[2].t_ms == 100.0);
	ck_assert_uint_eq(r.samples[0].mapped, 8192);
	ck_assert_uint_eq(r.mapped_peak, 8192);
	ck_assert(r.mapped_mean == 8192.0);
	ck_assert(r.live_mean > 7180.0 / 3 - 1e-9 && r.live_mean < 7180.0 / 3 + 1e-9);
	ck_assert(r.frag_mean > 1 - 7180.0 / 3 / 8192 - 1e-9 &&
		  r.frag_mean < 1 - 7180.0 / 3 / 8192 + 1e-9);
	ck_assert(r.internal_frag_mean == 0);
	/* Drained: the cache is evicted; one watermark slab stays mapped. */
	ck_assert_uint_eq(r.end_mapped, 8192);
	ck_assert_uint_eq(r.live_over_mapped, 0);
	rp_result_free(&r);
}
END_TEST

/*
 * The same with pages of 16, all mapped (paged):
 *  step 0: R0 holds ceil(1025 / 16) = 65 pages (1040 tokens), live 1025.
 *  step 1: R0 caches the page-aligned 1024 tokens and frees its partial
 *     last page: live = held = 1024.
 *  step 2: R1 matches 512, allocates 32 pages, decodes into a 33rd page,
 *     finishes: the tree adds 512 tokens: live = held = 1536.
 * Both slabs are mapped from the start: 16384 bytes.
 */
START_TEST(test_hand_checked_paged)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_PAGED, 16, "paged:16");
	struct rp_result r;

	tiny_trace(&t);
	tiny_opts(&o);
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.steps, 3);
	ck_assert_uint_eq(r.hit_tokens, 512);
	ck_assert_uint_eq(r.samples[0].live, 1025 * 2);
	ck_assert_uint_eq(r.samples[0].held, 1040 * 2);
	ck_assert_uint_eq(r.samples[1].live, 1024 * 2);
	ck_assert_uint_eq(r.samples[1].held, 1024 * 2);
	ck_assert_uint_eq(r.samples[2].live, 1536 * 2);
	ck_assert_uint_eq(r.samples[2].mapped, 16384);
	ck_assert(r.internal_frag_mean > (1 - 1025.0 / 1040) / 3 - 1e-9 &&
		  r.internal_frag_mean < (1 - 1025.0 / 1040) / 3 + 1e-9);
	ck_assert_uint_eq(r.end_mapped, 16384); /* static: never unmapped */
	rp_result_free(&r);
}
END_TEST

/*
 * The hashed block cache on the same trace, pages (blocks) of 16:
 *  step 0: R0 prefills 64 blocks, all full, all cached as they fill;
 *     decode takes a 65th block: 1040 tokens held, 1025 live.
 *  step 1: R0 finishes: its 64 hashed blocks go to the free queue
 *     (evictable, 1024 tokens), the partial 65th back to the pool.
 *  step 2: R1's first 32 block hashes hit (block 1 of the trace, 512
 *     tokens); 32 new blocks are cached as they fill, decode takes one
 *     more, which goes back at the finish: 96 blocks cached, all free.
 * The same memory as the radix cache's run (test_hand_checked_paged).
 */
START_TEST(test_hand_checked_hash)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_PAGED, 16, "paged:16/hash");
	struct rp_result r;

	s.cache = RP_CACHE_HASH;
	tiny_trace(&t);
	tiny_opts(&o);
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.steps, 3);
	ck_assert_uint_eq(r.requests_done, 2);
	ck_assert_uint_eq(r.hit_tokens, 512);
	ck_assert_uint_eq(r.req_tokens, 2048);
	ck_assert_uint_eq(r.samples[0].live, 1025 * 2);
	ck_assert_uint_eq(r.samples[0].held, 1040 * 2);
	ck_assert_uint_eq(r.samples[0].cached, 0);
	ck_assert_uint_eq(r.samples[1].live, 1024 * 2);
	ck_assert_uint_eq(r.samples[1].held, 1024 * 2);
	ck_assert_uint_eq(r.samples[1].cached, 1024 * 2);
	ck_assert_uint_eq(r.samples[2].live, 1536 * 2);
	ck_assert_uint_eq(r.samples[2].held, 1536 * 2);
	ck_assert_uint_eq(r.samples[2].cached, 1536 * 2);
	/* Hashing runs inside the library's flow: counted in cache_ns. */
	ck_assert_uint_gt(r.cache_ns, 0);
	ck_assert_uint_eq(r.hash_ns, 0);
	ck_assert_uint_eq(r.end_mapped, 16384); /* static: never unmapped */
	rp_result_free(&r);
}
END_TEST

/* The hashed cache disabled (vLLM without prefix caching): nothing hits,
 * nothing is kept, nothing is hashed. */
START_TEST(test_hash_no_cache)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_SLAB, 16, "slab:16/hash");
	struct rp_result r;

	s.cache = RP_CACHE_HASH;
	tiny_trace(&t);
	tiny_opts(&o);
	o.no_cache = 1;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.requests_done, 2);
	ck_assert_uint_eq(r.hit_tokens, 0);
	ck_assert_uint_eq(r.hash_ns, 0);
	ck_assert_uint_eq(r.samples[1].live, 0);
	ck_assert_uint_eq(r.samples[1].cached, 0);
	rp_result_free(&r);
}
END_TEST

/* Requests one at a time into an unbounded cache hit exactly what the trace
 * says was seen before, capped as the flows cap it (n - 1, page-aligned). */
static double ideal_capped(const struct rp_trace *t, uint32_t ps)
{
	uint32_t *seen = calloc(t->next_block + 1, sizeof(uint32_t));
	uint64_t req = 0, hit = 0;

	for (size_t i = 0; i < t->n; i++) {
		const struct rp_req *q = &t->req[i];
		uint64_t m = 0;
		int open = 1;

		for (uint32_t b = 0; b < q->nblocks; b++) {
			uint32_t l = b + 1 < q->nblocks ? 512 : q->input_len - 512 * (q->nblocks - 1);
			uint32_t s = seen[q->blocks[b]];

			if (open) {
				m += s < l ? s : l;
				open = s >= l;
			}
			if (l > s)
				seen[q->blocks[b]] = l;
		}
		if (m > (q->input_len - 1) / ps * ps)
			m = (q->input_len - 1) / ps * ps;
		hit += m / ps * ps;
		req += q->input_len;
	}
	free(seen);
	return (double)hit / (double)req;
}

START_TEST(test_infinite_capacity_hit_is_ideal)
{
	struct rp_synth_opts so;
	struct rp_sim_opts o;
	struct rp_trace t;
	uint32_t ps = _i & 1 ? 16 : 1;
	struct rp_strategy s = strat(RP_SLAB, ps, "slab");
	struct rp_result r;
	double hit;

	rp_synth_defaults(&so);
	so.requests = TRACE_REQS(300);
	so.input_mean = 1500;
	so.output_mean = 20;
	so.output_max = 64;
	so.seed = 7;
	ck_assert_int_eq(rp_trace_synth(&so, &t), 0);
	s.cache = _i & 2 ? RP_CACHE_HASH : RP_CACHE_RADIX; /* either cache, the same hits */
	rp_sim_defaults(&o);
	kvs_model_preset("tiny", &o.model);
	o.kv_bytes = 16ull << 20; /* 8M tokens: far more than the trace's 0.5M */
	o.max_running = 1;       /* each request sees every earlier one */
	o.use_timestamps = 0;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.requests_done, TRACE_REQS(300));
	hit = (double)r.hit_tokens / (double)r.req_tokens;
	ck_assert_msg(hit == ideal_capped(&t, ps), "hit %.6f ideal %.6f", hit, ideal_capped(&t, ps));
	ck_assert(hit > (TRACE_REQS(300) == 300 ? 0.2 : 0.0)); /* the generator shares prefixes */
	rp_result_free(&r);
	rp_trace_free(&t);
}
END_TEST

/* Under memory pressure (preemption, eviction), every strategy keeps live
 * bytes within mapped bytes at every step, and the slab run drains to one
 * watermark. */
START_TEST(test_pressure_invariants)
{
	static const enum rp_kind kinds[3] = {RP_STATIC, RP_PAGED, RP_SLAB};
	struct rp_synth_opts so;
	struct rp_sim_opts o;
	struct rp_trace t;
	int k;

	rp_synth_defaults(&so);
	so.requests = TRACE_REQS(200);
	so.rate = 50;
	so.input_mean = 3000;
	so.output_mean = 300;
	so.seed = 11;
	ck_assert_int_eq(rp_trace_synth(&so, &t), 0);
	tiny_opts(&o);
	o.kv_bytes = 64 * 1024; /* 32768 tokens: a handful of requests */
	o.max_running = 16;
	o.reserve = 16;
	for (k = 0; k < 6; k++) { /* each strategy with the radix, then the hashed cache */
		struct rp_strategy s = strat(kinds[k % 3], k % 3 == 0 ? (k < 3 ? 1 : 16) : 16, "x");
		struct rp_result r;
		size_t i;

		s.cache = k < 3 ? RP_CACHE_RADIX : RP_CACHE_HASH;
		ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), 0);
		ck_assert_uint_eq(r.requests_done + r.rejected, TRACE_REQS(200));
		ck_assert_uint_eq(r.live_over_mapped, 0);
		for (i = 0; i < r.nsamples; i++) {
			ck_assert_uint_le(r.samples[i].live, r.samples[i].mapped);
			ck_assert_uint_le(r.samples[i].live, r.samples[i].held);
			ck_assert_uint_le(r.samples[i].mapped, o.kv_bytes);
		}
		ck_assert_uint_gt(r.mapped_peak, 0);
		if (kinds[k % 3] == RP_SLAB)
			ck_assert_uint_le(r.end_mapped, (uint64_t)o.min_empty * 8192);
		else
			ck_assert_uint_eq(r.end_mapped, r.mapped_peak);
		rp_result_free(&r);
	}
	rp_trace_free(&t);
}
END_TEST

START_TEST(test_bad_options)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_SLAB, 0, "bad");
	struct rp_result r;

	tiny_trace(&t);
	tiny_opts(&o);
	errno = 0;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	s.page_size = 1;
	o.kv_bytes = 1; /* not one token */
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
}
END_TEST


/* ------------------------------------------- held / packed floor */

/*
 * The packed floor on a tiny JSONL trace, the tiny model (2 bytes a
 * token), granules of 4096 bytes: a slab is 4096 tokens, 8 KiB, 256 pages
 * of 16; a budget of 32 KiB (4 slabs).  Steps of 10 ms.
 *  R0 at 0 ms: 5000 input tokens (blocks 1-10), 3 outputs.
 *  R1 at 100 ms: 4000 input tokens (blocks 20-27), 2 outputs.
 *  step 0: R0 prefills 5000 and decodes one: 5001 tokens in 313 pages
 *     (5008); nothing evictable (R0 locks what it cached unfinished):
 *     need = 313 x 16 x 2 = 10016 bytes.  Floor ceil(313 / 256) = 2 slabs
 *     = 16384 bytes.
 *  step 1: R0's third output: it finishes and caches its page-aligned 4992
 *     tokens (312 pages, all evictable): need 0, cached 9984 bytes; floor
 *     2 slabs.
 *  step 2 (100 ms): R1 prefills 4000 (250 pages), decodes into a 251st
 *     page and finishes, caching 250 pages: 562 pages held, floor
 *     ceil(562 / 256) = 3 slabs = 24576 bytes.
 * The static pool maps its 4 slabs (32768 bytes) all along:
 * held_over_floor = 2, 2, 4/3: mean 16/9, p99 (the sorted ratios' element
 * (int)(2 x 0.99) = 1) 2, max 2.
 */
static const char floor_jsonl[] =
	"{\"timestamp\": 0, \"input_length\": 5000, \"output_length\": 3, "
	"\"hash_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n"
	"{\"timestamp\": 100, \"input_length\": 4000, \"output_length\": 2, "
	"\"hash_ids\": [20, 21, 22, 23, 24, 25, 26, 27]}\n";

static char *tmp_trace(const char *text);

static void floor_opts(struct rp_sim_opts *o)
{
	tiny_opts(o);
	o->kv_bytes = 32768;
}

START_TEST(test_held_over_floor)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy st = strat(RP_STATIC, 16, "static:16"), sl = strat(RP_SLAB, 16, "slab:16");
	struct rp_result r, q;
	char *path = tmp_trace(floor_jsonl);
	double m = 0;
	size_t k;

	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 1, stderr, &t), 0);
	floor_opts(&o);
	ck_assert_int_eq(rp_simulate(&t, &o, &st, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.steps, 3);
	ck_assert_uint_eq(r.slab_tokens, 4096);
	ck_assert_uint_eq(r.samples[0].held, 313 * 16 * 2);
	ck_assert_uint_eq(r.samples[0].need, 10016);
	ck_assert_uint_eq(r.samples[0].floor, 16384);
	ck_assert_uint_eq(r.samples[1].need, 0);
	ck_assert_uint_eq(r.samples[1].cached, 9984);
	ck_assert_uint_eq(r.samples[1].floor, 16384);
	ck_assert_uint_eq(r.samples[2].held, 562 * 16 * 2);
	ck_assert_uint_eq(r.samples[2].floor, 24576);
	ck_assert_uint_eq(r.samples[2].mapped, 32768);
	ck_assert_double_eq_tol(r.held_over_floor.mean, 16.0 / 9, 1e-9);
	ck_assert_double_eq_tol(r.held_over_floor.p99, 2.0, 1e-12);
	ck_assert_double_eq_tol(r.held_over_floor.max, 2.0, 1e-12);
	ck_assert_uint_eq(r.floor_peak, 24576);

	/* The slab strategy holds the same pages, so has the same floor; its
	 * ratio is its own mapped bytes over it, never below 1. */
	ck_assert_int_eq(rp_simulate(&t, &o, &sl, &q, NULL, NULL), 0);
	ck_assert_uint_eq(q.nsamples, 3);
	for (k = 0; k < 3; k++) {
		ck_assert_uint_eq(q.samples[k].floor, r.samples[k].floor);
		ck_assert_uint_ge(q.samples[k].mapped, q.samples[k].floor);
		if ((double)q.samples[k].mapped / (double)q.samples[k].floor > m)
			m = (double)q.samples[k].mapped / (double)q.samples[k].floor;
	}
	ck_assert_double_eq_tol(q.held_over_floor.max, m, 1e-12);
	ck_assert(q.held_over_floor.mean <= r.held_over_floor.mean);
	rp_result_free(&q);
	rp_result_free(&r);

	/* --cache-max 0%: after every step the cache is evicted to nothing:
	 * R0's 4992 tokens after step 1, R1's 4000 after step 2. */
	o.cache_max = 0;
	ck_assert_int_eq(rp_simulate(&t, &o, &st, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.cache_evicted_tokens, 4992 + 4000);
	ck_assert_uint_eq(r.samples[1].held, 0);
	ck_assert_uint_eq(r.samples[1].cached, 0);
	ck_assert_uint_eq(r.samples[2].held, 0);
	/* Only step 0 held a page: one ratio, 32768 / 16384. */
	ck_assert_double_eq_tol(r.held_over_floor.mean, 2.0, 1e-12);
	rp_result_free(&r);
	/* Half the budget (8192 tokens): R0's 4992 tokens fit, then R1's
	 * 4000 more do not: the oldest are evicted down to 8192. */
	o.cache_max = 0.5;
	ck_assert_int_eq(rp_simulate(&t, &o, &st, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.samples[1].cached, 9984);
	ck_assert_uint_le(r.samples[2].cached, 8192 * 2);
	ck_assert_uint_gt(r.cache_evicted_tokens, 0);
	rp_result_free(&r);
	/* Above the whole budget is an error. */
	o.cache_max = 1.5;
	errno = 0;
	ck_assert_int_eq(rp_simulate(&t, &o, &st, &r, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	rp_trace_free(&t);
	unlink(path);
	free(path);
}
END_TEST

/* --limit-schedule: what parses and what does not, with the reason. */
START_TEST(test_limit_schedule_parse)
{
	struct rp_limit *l;
	char err[256];

	ck_assert_int_eq(rp_limit_parse("0:1G,60.5:512M,120:2147483648", &l, err, sizeof(err)), 3);
	ck_assert_double_eq(l[0].t_ms, 0);
	ck_assert_uint_eq(l[0].bytes, 1ull << 30);
	ck_assert_double_eq(l[1].t_ms, 60500);
	ck_assert_uint_eq(l[1].bytes, 512ull << 20);
	ck_assert_uint_eq(l[2].bytes, 2ull << 30);
	free(l);
	ck_assert_int_eq(rp_limit_parse("", &l, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "empty"), "%s", err);
	ck_assert_ptr_null(l);
	ck_assert_int_eq(rp_limit_parse("60", &l, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "'60' has no ':'"), "%s", err);
	ck_assert_int_eq(rp_limit_parse("60:", &l, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "is not a size"), "%s", err);
	ck_assert_int_eq(rp_limit_parse("x:4G", &l, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "'x' is not a time"), "%s", err);
	ck_assert_int_eq(rp_limit_parse("-1:4G", &l, err, sizeof(err)), -1);
	ck_assert_int_eq(rp_limit_parse("60:4G,30:2G", &l, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "times must increase"), "%s", err);
	ck_assert_int_eq(rp_limit_parse("60:4G,60:2G", &l, err, sizeof(err)), -1);
	ck_assert_int_eq(rp_limit_parse("60:4G,", &l, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "empty item 2"), "%s", err);
	ck_assert_int_eq(rp_limit_parse("60:4Q", &l, err, sizeof(err)), -1);
	ck_assert_int_eq(rp_limit_parse("60:0", &l, err, sizeof(err)), -1);
}
END_TEST

/*
 * The limit schedule on the slab strategy of the floor trace: at 0 s the
 * budget becomes 16 KiB (2 slabs).  R0 (313 pages) fits; at step 1 R0's
 * cached 312 pages stay (2 slabs), and at step 2 R1's 250 pages can come
 * only from the cache, which gives them up under the library's limit:
 * held at most 512 pages at every step.  The static pool ignores the
 * schedule.
 */
START_TEST(test_limit_schedule_applied)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy sl = strat(RP_SLAB, 16, "slab:16"), st = strat(RP_STATIC, 16, "static");
	struct rp_limit lim[1] = {{0, 16384}};
	struct rp_result r;
	char *path = tmp_trace(floor_jsonl);

	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 1, stderr, &t), 0);
	floor_opts(&o);
	o.limits = lim;
	o.nlimits = 1;
	ck_assert_int_eq(rp_simulate(&t, &o, &sl, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.requests_done, 2);
	ck_assert_uint_eq(r.limit_changes, 1);
	ck_assert_uint_eq(r.samples[0].limit, 16384);
	/* The library's limit held from the change on: never above it. */
	ck_assert_uint_eq(r.limit_refused, 0);
	ck_assert_uint_eq(r.limit_over_steps, 0);
	for (size_t i = 0; i < r.nsamples; i++)
		ck_assert_uint_le(r.samples[i].held, 16384);
	rp_result_free(&r);
	ck_assert_int_eq(rp_simulate(&t, &o, &st, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.limit_changes, 0);
	ck_assert_uint_eq(r.samples[2].held, 562 * 16 * 2);
	rp_result_free(&r);
	rp_trace_free(&t);
	unlink(path);
	free(path);
}
END_TEST

/* A limit the running requests alone exceed is refused, and the first
 * refusal says the lowest limit the library could honour then, and whether
 * compaction would let it through (it used to be only counted). */
START_TEST(test_limit_refused_says_floor)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy sl = strat(RP_SLAB, 16, "slab:16");
	struct rp_limit lim[1] = {{10, 12288}};	/* below the first request's 2 slabs */
	struct rp_result r;
	char *path = tmp_trace(floor_jsonl), err[] = "/tmp/kvs_refused_XXXXXX", text[1024];
	int fd = mkstemp(err), saved = dup(2);
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 1, stderr, &t), 0);
	floor_opts(&o);
	o.limits = lim;
	o.nlimits = 1;
	fflush(stderr);
	ck_assert_int_ge(dup2(fd, 2), 0);
	ck_assert_int_eq(rp_simulate(&t, &o, &sl, &r, NULL, NULL), 0);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, text, sizeof(text) - 1, 0);
	ck_assert_msg(r.limit_refused >= 1, "refused %llu", (unsigned long long)r.limit_refused);
	ck_assert_int_gt(n, 0);
	text[n] = 0;
	ck_assert_uint_eq(r.requests_done, 2);
	ck_assert_msg(strstr(text, "kvslab-replay: limit ") &&
			      strstr(text, " at 0.01 s refused: the lowest it could honour was ") &&
			      strstr(text, "; compaction would not ("),
		      "%s", text);
	rp_result_free(&r);
	rp_trace_free(&t);
	close(fd);
	unlink(err);
	unlink(path);
	free(path);
}
END_TEST

/* The ShareGPT statistics CSV: lengths by the header, fresh blocks, no
 * timestamps until a rate gives them; a bad row is skipped and named. */
START_TEST(test_sharegpt_csv)
{
	struct rp_trace t;
	char *path = tmp_trace("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
			       "74,918,992,0.08\n"
			       "1402,711,2113,1.97\n"
			       "abc,3,3,1\n"
			       "600,0,600,inf\n");
	FILE *errs = tmpfile();
	char msg[256] = "";
	size_t k;

	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 0, errs, &t), 0);
	ck_assert_uint_eq(t.n, 3);
	ck_assert_uint_eq(t.malformed, 1);
	ck_assert_int_eq(t.no_timestamps, 1);
	ck_assert_uint_eq(t.req[0].input_len, 74);
	ck_assert_uint_eq(t.req[0].output_len, 918);
	ck_assert_uint_eq(t.req[1].input_len, 1402);
	ck_assert_uint_eq(t.req[1].nblocks, 3);
	ck_assert_uint_eq(t.req[2].output_len, 0);
	/* No prefix data: every block is fresh. */
	ck_assert_uint_eq(t.req[1].blocks[0], 1);
	ck_assert(rp_trace_ideal_hit(&t, 1, NULL) == 0.0);
	rewind(errs);
	ck_assert_ptr_nonnull(fgets(msg, sizeof(msg), errs));
	ck_assert_msg(strstr(msg, ":4: num_prefill_tokens: expected a whole number"), "%s", msg);
	fclose(errs);
	for (k = 0; k < t.n; k++)
		ck_assert(t.req[k].arrival_ms == 0);
	ck_assert_int_eq(rp_trace_set_rate(&t, 2, 1), 0);
	ck_assert(t.req[0].arrival_ms == 0);
	for (k = 1; k < t.n; k++)
		ck_assert(t.req[k].arrival_ms > t.req[k - 1].arrival_ms);
	rp_trace_free(&t);
	/* A header without the two columns ends the load. */
	unlink(path);
	free(path);
	path = tmp_trace("num_prefill_tokens,pd_ratio\n1,2\n");
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 0, NULL, &t), -1);
	unlink(path);
	free(path);
}
END_TEST

/* ------------------------------------------------------ host tier */

/*
 * --host-pool, pages of 16, a device of 4096 tokens (one slab), a host
 * pool of 2x, write through; blocks of 512 tokens:
 *  R0 at 0 ms: blocks 1-4 (2048 in), 2 outputs: prefill, cache_unfinished
 *     inserts 2048 tokens (backed up to the host), finish caches nothing
 *     more (2049 tokens: the last page is partial).
 *  R1 at 100 ms: blocks 5-8: 2048 tokens plus a page for its decode: 2064
 *     tokens needed, 2048 free: device eviction makes R0's node a
 *     tombstone (its host copy is valid).
 *  R2 at 200 ms: blocks 1, 2, 9, 10: blocks 1, 2 (1024 tokens) are on the
 *     host only: loaded back, an L2 hit; nothing on the device (L1 0).
 * The L1-only radix run of the same trace finds nothing for R2.
 */
static void tier_trace(struct rp_trace *t)
{
	static uint32_t b0[4] = {1, 2, 3, 4}, b1[4] = {5, 6, 7, 8}, b2[4] = {1, 2, 9, 10};
	static struct rp_req r[3];

	memset(t, 0, sizeof(*t));
	r[0] = (struct rp_req){0, 2048, 2, 4, b0};
	r[1] = (struct rp_req){100, 2048, 2, 4, b1};
	r[2] = (struct rp_req){200, 2048, 2, 4, b2};
	t->req = r;
	t->n = 3;
	t->max_input = 2048;
	t->max_output = 2;
	t->next_block = 11;
}

static void tier_opts(struct rp_sim_opts *o)
{
	tiny_opts(o);
	o->kv_bytes = 8192; /* 4096 tokens */
	o->host_ratio = 2;
}

START_TEST(test_hand_checked_tier)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_PAGED, 16, "paged:16");
	struct rp_result r, l1;
	size_t i;

	tier_trace(&t);
	tier_opts(&o);
	ck_assert_msg(rp_simulate(&t, &o, &s, &r, NULL, NULL) == 0, "%s: %s", r.error,
		      strerror(errno));
	ck_assert_msg(r.tiered, "not tiered");
	ck_assert_uint_eq(r.capacity_tokens, 4096);
	ck_assert_uint_eq(r.host_pool_bytes, 8192 * 2);
	ck_assert_uint_eq(r.requests_done, 3);
	ck_assert_uint_eq(r.preempted, 0);
	ck_assert_uint_eq(r.req_tokens, 6144);
	ck_assert_uint_eq(r.l1_tokens, 0);
	ck_assert_uint_eq(r.l2_tokens, 1024);
	ck_assert_uint_eq(r.hit_tokens, 1024);
	ck_assert_uint_eq(r.load_backs, 1);
	ck_assert_uint_ge(r.backup_tokens, 2048);
	ck_assert_uint_eq(r.live_over_mapped, 0);
	for (i = 0; i < r.nsamples; i++)
		ck_assert_uint_le(r.samples[i].live, r.samples[i].mapped);
	ck_assert_uint_eq(r.end_mapped, r.mapped_peak); /* paged: all mapped */
	rp_result_free(&r);

	/* Without the host tier R2 recomputes everything. */
	o.host_ratio = 0;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &l1, NULL, NULL), 0);
	ck_assert(!l1.tiered);
	ck_assert_uint_eq(l1.requests_done, 3);
	ck_assert_uint_eq(l1.hit_tokens, 0);
	rp_result_free(&l1);
}
END_TEST

/* The same trace under pressure, L1 only and tiered with each write
 * policy: the tier never hits less (L1 + L2 >= the L1-only hit). */
START_TEST(test_tier_never_worse)
{
	struct rp_synth_opts so;
	struct rp_sim_opts o;
	struct rp_trace t;
	struct rp_strategy s = strat(RP_SLAB, 16, "slab:16");
	struct rp_result l1, r;
	uint32_t pol;

	rp_synth_defaults(&so);
	so.requests = 150;
	so.rate = 50;
	so.input_mean = 2000;
	so.output_mean = 50;
	so.prefixes = 8;
	so.seed = 5;
	ck_assert_int_eq(rp_trace_synth(&so, &t), 0);
	tiny_opts(&o);
	o.kv_bytes = 64 * 1024; /* 32768 tokens */
	o.max_running = 16;
	o.reserve = 16;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &l1, NULL, NULL), 0);
	ck_assert_uint_eq(l1.requests_done + l1.rejected, 150);
	for (pol = KVS_WRITE_THROUGH; pol <= KVS_WRITE_BACK; pol++) {
		size_t i;

		o.host_ratio = 4;
		o.write_policy = pol;
		ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), 0);
		ck_assert_uint_eq(r.requests_done + r.rejected, 150);
		ck_assert_uint_eq(r.req_tokens, l1.req_tokens);
		ck_assert_uint_eq(r.hit_tokens, r.l1_tokens + r.l2_tokens);
		ck_assert_msg(r.hit_tokens >= l1.hit_tokens, "policy %u: L1 %llu + L2 %llu < %llu",
			      pol, (unsigned long long)r.l1_tokens, (unsigned long long)r.l2_tokens,
			      (unsigned long long)l1.hit_tokens);
		ck_assert_uint_gt(r.l2_tokens, 0);
		ck_assert_uint_eq(r.live_over_mapped, 0);
		for (i = 0; i < r.nsamples; i++) {
			ck_assert_uint_le(r.samples[i].live, r.samples[i].mapped);
			ck_assert_uint_le(r.samples[i].mapped, o.kv_bytes);
		}
		ck_assert_uint_le(r.end_mapped, (uint64_t)o.min_empty * 8192);
		rp_result_free(&r);
	}
	rp_result_free(&l1);
	rp_trace_free(&t);
}
END_TEST

/* A host tier needs the radix cache, a prefix cache and a known policy. */
START_TEST(test_tier_bad_options)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_PAGED, 16, "paged:16");
	struct rp_result r;

	tier_trace(&t);
	tier_opts(&o);
	s.cache = RP_CACHE_HASH;
	errno = 0;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	s.cache = RP_CACHE_RADIX;
	o.no_cache = 1;
	errno = 0;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	o.no_cache = 0;
	o.write_policy = 3;
	errno = 0;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
}
END_TEST

/* ------------------------------------------------------ robustness */

/* Three small requests (1024 in, 3 out) and @extra, all at time 0. */
static void trace_with(struct rp_trace *t, struct rp_req *r, uint32_t in, uint32_t out)
{
	static uint32_t b[3][2] = {{1, 2}, {3, 4}, {5, 6}};
	int k;

	memset(t, 0, sizeof(*t));
	for (k = 0; k < 3; k++)
		r[k] = (struct rp_req){0, 1024, 3, 2, b[k]};
	/* The big one's blocks are never read: it must be turned away first. */
	r[3] = (struct rp_req){0, in, out, 0, NULL};
	t->req = r;
	t->n = 4;
	t->max_input = in > 1024 ? in : 1024;
	t->max_output = out > 3 ? out : 3;
	t->next_block = 7;
}

/* Input and output near 2^31 (their sum past 2^32) among normal requests:
 * the normal ones complete, the big one is rejected as over the budget,
 * and the request table is sized by the requests that fit. */
START_TEST(test_huge_lengths_rejected)
{
	struct rp_trace t;
	struct rp_req r[4];
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_SLAB, 16, "slab:16");
	struct rp_result res;

	trace_with(&t, r, INT32_MAX, INT32_MAX);
	tiny_opts(&o);
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &res, NULL, NULL), 0);
	ck_assert_uint_eq(res.requests_done, 3);
	ck_assert_uint_eq(res.rejected, 1);
	ck_assert_uint_eq(res.rejects[RP_REJECT_over_budget], 1);
	ck_assert_uint_eq(res.rejects[RP_REJECT_over_table], 0);
	ck_assert_uint_eq(res.table_rows, o.max_running);
	ck_assert_uint_eq(res.table_cols, 1024 + 3 + 1 + RP_TABLE_SLACK);
	ck_assert_int_eq(rp_result_verdict(&res, (char[64]){0}, 64), 0);
	rp_result_free(&res);
}
END_TEST

/* A 2^22-token output: over the budget of the tiny pool, over what a
 * table row may be with a budget that holds it; either way it is turned
 * away at once and the table stays the size of the small requests. */
START_TEST(test_long_output_rejected)
{
	struct rp_trace t;
	struct rp_req r[4];
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_PAGED, 16, "paged:16");
	struct rp_result res;

	trace_with(&t, r, 100, 1u << 22);
	tiny_opts(&o);
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &res, NULL, NULL), 0);
	ck_assert_uint_eq(res.requests_done, 3);
	ck_assert_uint_eq(res.rejects[RP_REJECT_over_budget], 1);
	ck_assert_uint_eq(res.table_cols, 1024 + 3 + 1 + RP_TABLE_SLACK);
	rp_result_free(&res);

	/* 2^30 bytes of 2-byte tokens hold it; 1024 rows of 2^22 columns
	 * would be 16 GiB of table, over RP_TABLE_MAX_BYTES. */
	o.kv_bytes = 1ull << 30;
	o.max_running = 1024;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &res, NULL, NULL), 0);
	ck_assert_uint_eq(res.requests_done, 3);
	ck_assert_uint_eq(res.rejects[RP_REJECT_over_table], 1);
	ck_assert_uint_eq(res.rejects[RP_REJECT_over_budget], 0);
	ck_assert_uint_eq(res.table_cols, 1024 + 3 + 1 + RP_TABLE_SLACK);
	rp_result_free(&res);
}
END_TEST

/* Nothing fits: the run itself succeeds, its verdict is a failure that
 * counts the reasons. */
START_TEST(test_nothing_completes)
{
	struct rp_trace t;
	struct rp_req r[4];
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_SLAB, 1, "slab:1");
	struct rp_result res;
	char msg[256];

	trace_with(&t, r, 100, 1u << 22);
	tiny_opts(&o);
	o.kv_bytes = 8192; /* one slab of 4096 tokens: the small ones do not fit either */
	for (int k = 0; k < 3; k++)
		r[k].input_len = 4096;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &res, NULL, NULL), 0);
	ck_assert_uint_eq(res.requests_done, 0);
	ck_assert_uint_eq(res.rejected, 4);
	ck_assert_int_eq(rp_result_verdict(&res, msg, sizeof(msg)), -1);
	ck_assert_str_eq(msg, "no request completed: 4 rejected (4 over_budget)");
	rp_result_free(&res);
}
END_TEST

/* ------------------------------------------------------ messages */

START_TEST(test_error_messages)
{
	struct rp_trace t;
	struct rp_sim_opts o;
	struct rp_strategy s = strat(RP_SLAB, 16, "slab:16");
	struct rp_result res;
	char b[32];

	tiny_trace(&t);
	tiny_opts(&o);
	o.kv_bytes = 4096; /* half a slab of 4096 tokens */
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &res, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_msg(strstr(res.error, "budget 4 KiB is smaller than one slab of 8 KiB"), "%s",
		      res.error);
	o.kv_bytes = 1;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &res, NULL, NULL), -1);
	ck_assert_msg(strstr(res.error, "budget 1 byte is smaller than one page of 32 bytes"),
		      "%s", res.error);
	tiny_opts(&o);
	o.driver = "nope";
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &res, NULL, NULL), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_msg(strstr(res.error, "cannot open driver \"nope\": no driver named \"nope\""),
		      "%s", res.error);
	ck_assert_str_eq(kvs_drv_open_error(), "no driver named \"nope\" (cuda, host or auto)");
	rp_fmt_bytes(128ull << 20, b, sizeof(b));
	ck_assert_str_eq(b, "128 MiB");
	rp_fmt_bytes(1536, b, sizeof(b));
	ck_assert_str_eq(b, "1.5 KiB");
	/* llama-3-8b: 1024 tokens of 128 KiB a slab with 2 MiB granules. */
	kvs_model_preset("llama-3-8b", &o.model);
	ck_assert_uint_eq(rp_slab_tokens(&o.model, 16, 2u << 20, 1), 1024);
}
END_TEST

/* Run the tool with @args; its exit status, its output (stdout and stderr) in @out. */
static int tool(const char *args, char *out, size_t size)
{
	const char *top = getenv("KVSLAB_TOP_BUILDDIR");
	char cmd[4096];
	FILE *p;
	size_t n = 0;
	int st;

	snprintf(cmd, sizeof(cmd), "'%s/tools/kvslab-replay' --no-progress %s 2>&1",
		 top && *top ? top : ".", args);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (n + 1 < size && fgets(out + n, (int)(size - n), p))
		n += strlen(out + n);
	out[n] = 0;
	while (fgetc(p) != EOF)
		;
	st = pclose(p);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static char *tmp_trace(const char *text)
{
	const char *dir = getenv("TMPDIR");
	char *path;
	FILE *f;
	int fd;

	ck_assert_int_ne(asprintf(&path, "%s/kvslab-replay-XXXXXX", dir && *dir ? dir : "/tmp"), -1);
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
	return path;
}

/* The tool itself: exit status and messages. */
START_TEST(test_tool_exit_and_messages)
{
	static char out[1 << 16];
	char args[512], *path;
	int rc;

	/* One request of near 2^31 output among normal ones: they complete,
	 * it is counted, exit 0. */
	path = tmp_trace("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 2]}\n"
			 "{\"timestamp\": 1, \"input_length\": 100, \"output_length\": 2147483647, \"hash_ids\": [18446744073709551615]}\n"
			 "{\"timestamp\": 2, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 3]}\n");
	snprintf(args, sizeof(args), "-m tiny -M 64M -s slab:16 --json=- %s", path);
	rc = tool(args, out, sizeof(out));
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_msg(strstr(out, "1 over_budget"), "%s", out);
	ck_assert_msg(strstr(out, "\"rejects\": {\"over_budget\": 1, \"over_table\": 0}"), "%s", out);
	ck_assert_msg(strstr(out, "\"requests_done\": 2"), "%s", out);
	unlink(path);
	free(path);

	/* Nothing can complete: exit 1, the reasons counted. */
	path = tmp_trace("{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 2147483647, \"hash_ids\": [7]}\n");
	snprintf(args, sizeof(args), "-q -m tiny -M 64M -s paged:16 %s", path);
	rc = tool(args, out, sizeof(out));
	ck_assert_int_eq(rc, 1);
	ck_assert_msg(strstr(out, "paged:16: no request completed: 1 rejected (1 over_budget)"),
		      "%s", out);

	/* A budget below one slab names both sizes. */
	snprintf(args, sizeof(args), "-q -M 100M -s slab:16 %s", path);
	rc = tool(args, out, sizeof(out));
	ck_assert_int_eq(rc, 1);
	ck_assert_msg(strstr(out, "budget 100 MiB is smaller than one slab of 128 MiB"), "%s", out);

	/* A driver that cannot open says why (unless this machine has a GPU). */
	snprintf(args, sizeof(args), "-q -d cuda -m tiny -M 1G %s", path);
	rc = tool(args, out, sizeof(out));
	if (rc != 0 && !strstr(out, "no request completed"))
		ck_assert_msg(strstr(out, "cannot open driver \"cuda\": cuda: "), "%s", out);
	unlink(path);
	free(path);

	/* Both caches side by side, the budget as a share of the trace. */
	path = tmp_trace("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 2]}\n"
			 "{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 3]}\n");
	snprintf(args, sizeof(args), "-M 300%% -s paged:16 --cache radix,hash "
		 "--block-hash xxh3_128 --json=- %s", path);
	rc = tool(args, out, sizeof(out));
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_msg(strstr(out, "(300% of the unique tokens' KV: "), "%s", out);
	ck_assert_msg(strstr(out, "{\"name\": \"paged:16/radix\", \"cache\": \"radix\""), "%s", out);
	ck_assert_msg(strstr(out, "{\"name\": \"paged:16/hash\", \"cache\": \"hash\""), "%s", out);
	/* 512 of 1200 tokens hit, in either cache. */
	ck_assert_msg(strstr(out, "\"hit_ratio\": 0.426667, \"requests_done\": 2"), "%s", out);
	ck_assert_msg(strstr(strstr(out, "paged:16/hash\", \"cache\""),
			     "\"hit_ratio\": 0.426667, \"requests_done\": 2"), "%s", out);
	snprintf(args, sizeof(args), "-q -m tiny --cache radix,radix %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "invalid value 'radix,radix' for --cache"), "%s", out);
	snprintf(args, sizeof(args), "-q -m tiny --cache hash --block-hash md5 %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "-q -m tiny -M 0%% %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	unlink(path);
	free(path);

	/* The host tier: its table and JSON keys; bad options exit 2. */
	path = tmp_trace("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 2]}\n"
			 "{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 3]}\n");
	snprintf(args, sizeof(args), "-m tiny -M 64M -s paged:16 --host-pool 2x "
		 "--write-policy write_back --json=- %s", path);
	rc = tool(args, out, sizeof(out));
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_msg(strstr(out, "L1 hit  L2 hit"), "%s", out);
	ck_assert_msg(strstr(out, "\"cache\": \"hiradix\""), "%s", out);
	ck_assert_msg(strstr(out, "\"write_policy\": \"write_back\", \"l1_hit_ratio\": 0.426667, "
				  "\"l2_hit_ratio\": 0.000000"), "%s", out);
	ck_assert_msg(strstr(out, "\"recomputed_tokens\": 688"), "%s", out);
	ck_assert_msg(strstr(out, "\"host_pool_bytes\": "), "%s", out);
	snprintf(args, sizeof(args), "-q -m tiny -M 64M --host-pool 64M %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 0);
	snprintf(args, sizeof(args), "-q -m tiny --host-pool 2x --cache hash %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "--host-pool works with --cache radix only"), "%s", out);
	snprintf(args, sizeof(args), "-q -m tiny --host-pool 2x --cache radix,hash %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "-q -m tiny --host-pool 2x --no-cache %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "-q -m tiny --host-pool 0x %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "invalid value '0x' for --host-pool"), "%s", out);
	snprintf(args, sizeof(args), "-q -m tiny --host-pool lots %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "-q -m tiny --host-pool 2x --write-policy lru %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "invalid value 'lru' for --write-policy"), "%s", out);
	snprintf(args, sizeof(args), "-q -m tiny --write-policy write_back %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "need --host-pool"), "%s", out);
	unlink(path);
	free(path);

	/* Parse errors name the file, the line and the field. */
	path = tmp_trace("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 2]}\n"
			 "{\"timestamp\": 1, \"input_length\": 12x, \"output_length\": 4, \"hash_ids\": [1]}\n");
	snprintf(args, sizeof(args), "-q -m tiny -M 64M --strict %s", path);
	rc = tool(args, out, sizeof(out));
	ck_assert_int_eq(rc, 1);
	snprintf(args, sizeof(args), "%s:2: input_length: expected ',' or '}' at column 36", path);
	ck_assert_msg(strstr(out, args), "%s", out);
	ck_assert_msg(strstr(out, "stopped at the malformed line reported above (--strict)"), "%s",
		      out);
	unlink(path);
	free(path);
}
END_TEST

/* The number after "@key": at its first place in @json, or UINT64_MAX. */
static uint64_t json_u64(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(json, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : UINT64_MAX;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/*
 * --storage: two replays of one generated trace on one fresh file store
 * behave as two instances sharing L3.  A small model (256 bytes a token,
 * 16384 tokens a slab) with one slab of device memory and a host pool of
 * 2x: pages leave the device, some leave the host.  The first replay finds
 * an empty store (no L3 hit) and backs its pages up; the second finds them
 * and recomputes less.  In both, every input token is an L1, L2 or L3 hit
 * or recomputed: their sum is the trace's input, counted here from the
 * generator itself.
 */
START_TEST(test_tool_storage_shared)
{
	static char out[2][1 << 16];
	const char *tmp = getenv("TMPDIR");
	struct rp_synth_opts so;
	struct rp_trace t;
	char args[1024], dir[512];
	uint64_t input = 0, l3[2], rec[2];
	kvs_page_key_t key;
	int32_t tok = 0;
	size_t i;
	int k, rc;

	if (kvs_page_hash(NULL, &tok, 1, &key) < 0 && errno == ENOTSUP)
		return; /* no SHA-256 in this build: no store */
	rp_synth_defaults(&so);
	so.requests = TRACE_REQS(40);
	so.input_mean = 1024;
	so.output_mean = 32;
	ck_assert_int_eq(rp_trace_synth(&so, &t), 0);
	for (i = 0; i < t.n; i++)
		input += t.req[i].input_len;
	rp_trace_free(&t);

	snprintf(dir, sizeof(dir), "%s/kvslab-rstore-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	for (k = 0; k < 2; k++) {
		uint64_t l1, l2;

		snprintf(args, sizeof(args), "-q -m tiny --layers 1 --kv-heads 1 --head-dim 128 "
			 "--dtype-size 1 -M 4M -s paged:16 --requests %zu --input-mean 1024 "
			 "--output-mean 32 --host-pool 2x --storage file://%s --json=-",
			 so.requests, dir);
		rc = tool(args, out[k], sizeof(out[k]));
		ck_assert_msg(rc == 0, "replay %d: rc %d: %s", k, rc, out[k]);
		ck_assert_msg(strstr(out[k], "\"prefetch_policy\": \"wait_complete\""), "%s",
			      out[k]);
		snprintf(args, sizeof(args), "\"storage\": \"file://%s\"", dir);
		ck_assert_msg(strstr(out[k], args), "%s", out[k]);
		l1 = json_u64(out[k], "l1_hit_tokens");
		l2 = json_u64(out[k], "l2_hit_tokens");
		l3[k] = json_u64(out[k], "l3_hit_tokens");
		rec[k] = json_u64(out[k], "recomputed_tokens");
		ck_assert_msg(json_u64(out[k], "input_tokens") == input, "%s", out[k]);
		ck_assert_msg(l1 + l2 + l3[k] + rec[k] == input, "replay %d: %llu + %llu + %llu + "
			      "%llu != %llu", k, (unsigned long long)l1, (unsigned long long)l2,
			      (unsigned long long)l3[k], (unsigned long long)rec[k],
			      (unsigned long long)input);
		ck_assert_uint_eq(json_u64(out[k], "checksum_fail"), 0);
		ck_assert_uint_eq(json_u64(out[k], "io_errors"), 0);
		ck_assert_uint_eq(json_u64(out[k], "l3_backup_fail"), 0);
		/* Every prefetched token is accounted for at its request's
		 * first prefill: an L3 hit, or why not. */
		ck_assert_uint_eq(json_u64(out[k], "l3_prefetched"),
				  l3[k] + json_u64(out[k], "l3_unloaded") +
					  json_u64(out[k], "l3_on_device") +
					  json_u64(out[k], "l3_gone"));
	}
	/* The first: an empty store, everything backed up. */
	ck_assert_uint_eq(l3[0], 0);
	ck_assert_uint_eq(json_u64(out[0], "get_hits"), 0);
	ck_assert_uint_gt(json_u64(out[0], "l3_backup_pages"), 0);
	ck_assert_uint_eq(json_u64(out[0], "set_stored"), json_u64(out[0], "l3_backup_pages"));
	/* The second: the first's pages, read and not written again. */
	ck_assert_msg(l3[1] > 0, "%s", out[1]);
	ck_assert_uint_gt(json_u64(out[1], "get_hits"), 0);
	ck_assert_uint_gt(json_u64(out[1], "l3_prefetched"), 0);
	ck_assert_uint_eq(json_u64(out[1], "set_stored"), 0);
	ck_assert_msg(rec[1] < rec[0], "recomputed %llu, then %llu", (unsigned long long)rec[0],
		      (unsigned long long)rec[1]);

	/* --storage needs --host-pool; one strategy; a bad URI is named. */
	snprintf(args, sizeof(args), "-q -m tiny -M 64M -s paged:16 --requests 2 "
		 "--storage file://%s", dir);
	ck_assert_int_eq(tool(args, out[0], sizeof(out[0])), 2);
	ck_assert_msg(strstr(out[0], "--storage needs --host-pool"), "%s", out[0]);
	snprintf(args, sizeof(args), "-q -m tiny -M 64M --requests 2 --host-pool 2x "
		 "--storage file://%s", dir);
	ck_assert_int_eq(tool(args, out[0], sizeof(out[0])), 2);
	ck_assert_msg(strstr(out[0], "--storage runs one strategy"), "%s", out[0]);
	snprintf(args, sizeof(args), "-q -m tiny -M 64M -s paged:16 --requests 2 "
		 "--host-pool 2x --prefetch-policy timeout");
	ck_assert_int_eq(tool(args, out[0], sizeof(out[0])), 2);
	ck_assert_msg(strstr(out[0], "need --storage"), "%s", out[0]);
	snprintf(args, sizeof(args), "-q -m tiny -M 64M -s paged:16 --requests 2 "
		 "--host-pool 2x --storage file://%s --prefetch-policy soon", dir);
	ck_assert_int_eq(tool(args, out[0], sizeof(out[0])), 2);
	ck_assert_msg(strstr(out[0], "invalid value 'soon' for --prefetch-policy"), "%s", out[0]);
	rc = tool("-q -m tiny -M 64M -s paged:16 --requests 2 --host-pool 2x "
		  "--storage nosuch://x", out[0], sizeof(out[0]));
	ck_assert_int_eq(rc, 1);
	ck_assert_msg(strstr(out[0], "--storage nosuch://x: cannot open the store: "), "%s",
		      out[0]);
	ck_assert_msg(strstr(out[0], "(errno "), "%s", out[0]);

	ck_assert_int_eq(nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}
END_TEST


/* The number after "@key": at its first place after @from in @json, as a double. */
static double json_num(const char *json, const char *from, const char *key)
{
	char pat[64];
	const char *p = strstr(json, from);

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = p ? strstr(p, pat) : NULL;
	return p ? strtod(p + strlen(pat), NULL) : -1;
}

/*
 * The tool's verdict lines agree with its JSON; an overloaded run and a
 * trace without prefix data warn and name the option to try; bad
 * --limit-schedule, --cache-max and --cost-model values exit 2.
 */
START_TEST(test_tool_verdict_and_warnings)
{
	static char out[1 << 17];
	char args[512], *path, *line, want[128];
	double pct, ratio;
	int rc;

	/* The default strategies on a small generated run: a verdict line a
	 * strategy, its saving the JSON's to the printed digit. */
	snprintf(args, sizeof(args), "--requests %d --json=-", TRACE_REQS(100));
	rc = tool(args, out, sizeof(out));
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_msg(strstr(out, "verdict static:1: the baseline"), "%s", out);
	ck_assert_msg(strstr(out, "prefix cache capped at 10% of the budget"), "%s", out);
	ck_assert_msg(strstr(out, "est. GPU ms"), "%s", out);
	line = strstr(out, "verdict slab:16: saves ");
	ck_assert_msg(line, "%s", out);
	pct = strtod(line + strlen("verdict slab:16: saves "), NULL);
	ratio = json_num(out, "\"name\": \"slab:16\"", "saved_mean_ratio");
	ck_assert_msg(ratio >= 0, "%s", out);
	snprintf(want, sizeof(want), "%.1f", 100 * ratio);
	ck_assert_double_eq_tol(pct, strtod(want, NULL), 1e-9);
	ck_assert_msg(strstr(out, "\"held_over_floor\": {\"mean\": "), "%s", out);
	snprintf(want, sizeof(want), "held/packed floor %.2f mean",
		 json_num(out, "\"name\": \"slab:16\"", "mean"));
	ck_assert_msg(strstr(line, want), "%s in %s", want, line);
	ck_assert_msg(strstr(out, "\"settings\": {"), "%s", out);
	ck_assert_msg(strstr(out, "\"cost_model\": \"a100\""), "%s", out);
	ck_assert_msg(strstr(out, "\"driver_ops\": {\"reserve\": "), "%s", out);
	ck_assert_msg(!strstr(out, "warning"), "%s", out);

	/* Overloaded: one slab of budget for requests of 2048 tokens on average. */
	snprintf(args, sizeof(args), "-q -s slab:16 --requests 20 -M 128M");
	rc = tool(args, out, sizeof(out));
	ck_assert_msg(strstr(out, "warning: overloaded: "), "%s", out);
	ck_assert_msg(strstr(out, "try a larger -M (--kv-mem) or a lower --rate"), "%s", out);

	/* No prefix data (ShareGPT lengths): the cache cannot hit. */
	path = tmp_trace("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
			 "700,4,704,175\n600,4,604,150\n");
	snprintf(args, sizeof(args), "-m tiny -M 64M -s slab:16 --rate 10 --json=- %s", path);
	rc = tool(args, out, sizeof(out));
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_msg(strstr(out, "arrivals none in the trace: Poisson at 10 requests/s"), "%s", out);
	ck_assert_msg(strstr(out, "warning: the trace has no prefix data"), "%s", out);
	ck_assert_msg(strstr(out, "try --no-cache"), "%s", out);
	ck_assert_msg(strstr(out, "\"requests_done\": 2"), "%s", out);
	ck_assert_msg(strstr(out, "verdict: no static pool to compare with"), "%s", out);

	/* Bad values exit 2 and say why. */
	snprintf(args, sizeof(args), "-q -m tiny --limit-schedule 60:4G,30:2G %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "--limit-schedule: times must increase"), "%s", out);
	snprintf(args, sizeof(args), "-q -m tiny --limit-schedule 60 %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "-q -m tiny --cache-max 120%% %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "invalid value '120' for --cache-max"), "%s", out);
	snprintf(args, sizeof(args), "-q -m tiny --cache-max 10 %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "-q -m tiny --cost-model /nonexistent/model %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "--cost-model /nonexistent/model: "), "%s", out);
	unlink(path);
	free(path);

	/* A cost model file: the figures it names replace the a100 ones. */
	path = tmp_trace("# test\ncreate = 1000\nmap=0\n");
	{
		struct rp_cost_model m;
		char err[256];
		uint64_t calls[RP_OP__COUNT] = {0};

		ck_assert_int_eq(rp_cost_model_load(path, &m, err, sizeof(err)), 0);
		calls[RP_OP_create] = 2;
		calls[RP_OP_map] = 5;
		calls[RP_OP_unmap] = 1;
		ck_assert_double_eq_tol(rp_cost_estimate_us(&m, calls), 2026, 1e-9);
		ck_assert_int_eq(rp_cost_model_load("none", &m, err, sizeof(err)), 0);
		ck_assert_double_eq(rp_cost_estimate_us(&m, calls), 0);
	}
	unlink(path);
	free(path);
	path = tmp_trace("create 1000\n");
	{
		struct rp_cost_model m;
		char err[256];

		ck_assert_int_eq(rp_cost_model_load(path, &m, err, sizeof(err)), -1);
		ck_assert_msg(strstr(err, ":1: expected name=microseconds"), "%s", err);
	}
	unlink(path);
	free(path);

	/* The measured presets (GPU-MEASURED.md, through kvslab), the share of
	 * the serving time, and "measure", which takes the timed calls. */
	{
		struct rp_cost_model m;
		struct rp_result r;
		char err[256];

		memset(&r, 0, sizeof(r));
		r.drv_ops[RP_OP_create] = 2;
		r.drv_ops[RP_OP_map] = 5;
		r.drv_ops[RP_OP_unmap] = 1;
		r.drv_ops[RP_OP_set_access] = 3;
		r.drv_ops[RP_OP_release] = 4;
		r.drv_ops[RP_OP_reserve] = 1;
		r.drv_ns = 7000000;
		r.sim_ms = 1000;
		ck_assert_int_eq(rp_cost_model_load("h200", &m, err, sizeof(err)), 0);
		ck_assert_str_eq(m.name, "h200");
		/* 2 x 9.5 + 5 x 5.9 + 22 + 3 x 23.1 + 4 x 11.5 + 210 */
		ck_assert_double_eq_tol(rp_cost_driver_ms(&m, &r), 0.3958, 1e-9);
		ck_assert_double_eq_tol(rp_cost_share(&m, &r), 0.3958e-3, 1e-12);
		ck_assert_int_eq(rp_cost_model_load("h100", &m, err, sizeof(err)), 0);
		/* 2 x 36.2 + 5 x 22 + 65.1 + 3 x 66.8 + 4 x 35.9 + 263 */
		ck_assert_double_eq_tol(rp_cost_driver_ms(&m, &r), 0.8545, 1e-9);
		ck_assert_int_eq(rp_cost_model_load("a100", &m, err, sizeof(err)), 0);
		/* 2 x 190 + 5 x 1.5 + 26 + 3 x 36 + 4 x 26 + 10: kept as it was */
		ck_assert_double_eq_tol(rp_cost_driver_ms(&m, &r), 0.6355, 1e-9);
		ck_assert_int_eq(rp_cost_model_load("measure", &m, err, sizeof(err)), 0);
		ck_assert_int_eq(m.measure, 1);
		ck_assert_double_eq_tol(rp_cost_driver_ms(&m, &r), 7.0, 1e-9);
		ck_assert_double_eq_tol(rp_cost_share(&m, &r), 0.007, 1e-12);
		r.sim_ms = 0;
		ck_assert_double_eq(rp_cost_share(&m, &r), 0);
	}
}
END_TEST

/* The report names its cost model and gives the driver's share of the
 * serving time; measure is refused without the cuda driver. */
START_TEST(test_cost_model_report)
{
	char out[65536];

	ck_assert_int_eq(tool("-q --cost-model measure --requests 20", out, sizeof(out)), 2);
	ck_assert_msg(strstr(out, "--cost-model measure times the CUDA driver's calls: it needs "
				  "--driver cuda (not host)"), "%s", out);
	ck_assert_int_eq(tool("-q --cost-model measure --driver auto --requests 20", out,
			      sizeof(out)), 2);
	ck_assert_int_eq(tool("-m tiny -M 64M --requests 200 --cost-model h100 "
			      "-s static:1,slab:16 --json -", out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "\"cost_model\": \"h100\""), "%s", out);
	ck_assert_msg(strstr(out, "\"driver_share\": "), "%s", out);
	ck_assert_msg(strstr(out, "(cost model h100)"), "%s", out);
	ck_assert_msg(strstr(out, "GPU driver time (h100), "), "%s", out);
	ck_assert_msg(strstr(out, "% of "), "%s", out);
	ck_assert_msg(strstr(out, "share %"), "%s", out);
}
END_TEST

/*
 * Run the tool with @args, its standard output only (as bytes: a PNG may
 * hold NULs) in @out; returns the byte count, *@rc the exit status.
 */
static size_t tool_stdout(const char *args, char *out, size_t size, int *rc)
{
	const char *top = getenv("KVSLAB_TOP_BUILDDIR");
	char cmd[4096];
	FILE *p;
	size_t n = 0, k;
	int st;

	snprintf(cmd, sizeof(cmd), "'%s/tools/kvslab-replay' --no-progress %s 2>/dev/null",
		 top && *top ? top : ".", args);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (n < size && (k = fread(out + n, 1, size - n, p)) > 0)
		n += k;
	while (fgetc(p) != EOF)
		;
	st = pclose(p);
	ck_assert(WIFEXITED(st));
	*rc = WEXITSTATUS(st);
	return n;
}

/* Lines of @out that hold @needle. */
static int count_lines(const char *out, const char *needle)
{
	const char *p = out;
	int n = 0;

	while ((p = strstr(p, needle))) {
		n++;
		p = strchr(p, '\n');
		if (!p)
			break;
	}
	return n;
}

/*
 * Output errors stay small and in their place: a --plot path that cannot
 * be written puts no picture on standard output (where the JSON is), and a
 * wrong --format reports a few lines and the count of the rest.
 */
START_TEST(test_tool_output_errors)
{
	static char out[1 << 17];
	char args[512], *path;
	size_t n, k;
	int rc, png = 0;

	n = tool_stdout("-q -m tiny -M 64M --requests 20 --json=- --plot /nonexistent/dir/x.png",
			out, sizeof(out), &rc);
	ck_assert_int_eq(rc, 1);
	for (k = 0; k + 4 <= n; k++)
		if (!memcmp(out + k, "\x89PNG", 4))
			png = 1;
	ck_assert_msg(!png, "PNG bytes on standard output");
	ck_assert_msg(n > 0 && out[n - 2] == '}' && out[n - 1] == '\n', "JSON not last");
	rc = tool("-q -m tiny -M 64M --requests 20 --plot /nonexistent/dir/x.png", out,
		  sizeof(out));
	ck_assert_int_eq(rc, 1);
	ck_assert_msg(strstr(out, "--plot /nonexistent/dir/x.png: ") &&
		      (strstr(out, "No such file or directory") ||
		       strstr(out, "gnuplot is not installed")), "%s", out);

	/* 40 CSV rows read as JSONL: 5 reported, then the count. */
	{
		char text[4096] = "TIMESTAMP,ContextTokens,GeneratedTokens\n";

		for (k = 0; k < 39; k++)
			snprintf(text + strlen(text), sizeof(text) - strlen(text),
				 "2023-11-16 18:15:46.%06zu,100,10\n", k);
		path = tmp_trace(text);
	}
	snprintf(args, sizeof(args), "-q -m tiny -M 64M -f mooncake %s", path);
	rc = tool(args, out, sizeof(out));
	ck_assert_int_eq(rc, 1);
	ck_assert_int_eq(count_lines(out, ": not a JSON object"), 5);
	ck_assert_msg(strstr(out, ": 40 malformed lines in all, the first 5 shown above; no line "
				  "was usable: is the format right (--format)?"), "%s", out);
	unlink(path);
	free(path);
}
END_TEST

/* The pre-pass behind the overload advice, on a hand-checked trace. */
START_TEST(test_peak_need)
{
	struct rp_req req[3] = {
		{.arrival_ms = 0, .input_len = 100, .output_len = 10},
		{.arrival_ms = 280, .input_len = 50, .output_len = 5},
		{.arrival_ms = 1000, .input_len = 10, .output_len = 1},
	};
	struct rp_trace t = {.req = req, .n = 3};
	uint64_t peak;
	size_t run;

	/* 25 ms steps: request 0 holds 110 tokens over [0, 275), 1 step of
	 * prefill and 10 of decode; request 1 comes after it. */
	ck_assert_int_eq(rp_trace_peak_need(&t, 25, 0, &peak, &run), 0);
	ck_assert_uint_eq(peak, 110);
	ck_assert_uint_eq(run, 1);
	/* Chunks of 50: 2 steps of prefill, [0, 300): the two overlap. */
	ck_assert_int_eq(rp_trace_peak_need(&t, 25, 50, &peak, &run), 0);
	ck_assert_uint_eq(peak, 165);
	ck_assert_uint_eq(run, 2);
	ck_assert_int_eq(rp_trace_peak_need(&t, 0, 0, &peak, &run), -1);
	ck_assert_int_eq(errno, EINVAL);
}
END_TEST

/*
 * A replay that guides: -M P% sizes the cache, so no default cap takes it
 * back (the same hit as --cache-max off, more than a 10% cap); a budget of
 * thousands of slabs raises --granules; options without effect are named;
 * an overloaded run is told the budget the arrivals ask for.
 */
START_TEST(test_tool_guidance)
{
	static char out[1 << 17];
	double h_def, h_off, h_cap;
	char args[512], *path;
	int rc;

	snprintf(args, sizeof(args), "-m tiny --head-dim 512 -M 30%% -s paged:16 --requests %d "
		 "--json=-", TRACE_REQS(300));
	ck_assert_int_eq(tool(args, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "(30% of the unique tokens' KV: "), "%s", out);
	ck_assert_msg(strstr(out, "note: the prefix cache is uncapped: -M 30% sized it"), "%s", out);
	ck_assert_msg(strstr(out, "\"cache_max\": null"), "%s", out);
	h_def = json_num(out, "\"name\": \"paged:16\"", "hit_ratio");
	snprintf(args, sizeof(args), "-q -m tiny --head-dim 512 -M 30%% -s paged:16 --requests %d "
		 "--json=- --cache-max off", TRACE_REQS(300));
	ck_assert_int_eq(tool(args, out, sizeof(out)), 0);
	h_off = json_num(out, "\"name\": \"paged:16\"", "hit_ratio");
	snprintf(args, sizeof(args), "-q -m tiny --head-dim 512 -M 30%% -s paged:16 --requests %d "
		 "--json=- --cache-max 10%%", TRACE_REQS(300));
	ck_assert_int_eq(tool(args, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "warning: --cache-max 10% defeats -M 30%: the cache holds at "
				  "most "), "%s", out);
	h_cap = json_num(out, "\"name\": \"paged:16\"", "hit_ratio");
	ck_assert_msg(h_def >= 0 && h_def == h_off && h_cap < h_def, "%g %g %g", h_def, h_off,
		      h_cap);

	/* tiny: slabs of 4 MiB; 8 GiB is 2048 of them. */
	ck_assert_int_eq(tool("-m tiny -M 8G -s slab:16 --requests 20 --json=-", out,
			      sizeof(out)), 0);
	ck_assert_msg(strstr(out, "note: --granules 2: a budget of over 1024 slabs"), "%s", out);
	ck_assert_msg(strstr(out, "\"granules\": 2,"), "%s", out);
	ck_assert_int_eq(tool("-q -m tiny -M 8G -s slab:16 --granules 1 --requests 20 --json=-",
			      out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "\"granules\": 1,") && !strstr(out, "note: --granules"), "%s",
		      out);

	/* Options that change nothing. */
	ck_assert_int_eq(tool("-q -m tiny -M 64M -s slab:16 --requests 20 --limit-schedule "
			      "1:1G,2:32M", out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "warning: --limit-schedule point 1 s:1 GiB has no effect: 1 GiB "
				  "is not below the budget of 64 MiB (-M)"), "%s", out);
	ck_assert_msg(!strstr(out, "point 2 s:"), "%s", out);
	/* Above the budget after a lower limit: it restores the budget. */
	ck_assert_int_eq(tool("-q -m tiny -M 64M -s slab:16 --requests 20 --limit-schedule "
			      "1:32M,2:1G", out, sizeof(out)), 0);
	ck_assert_msg(!strstr(out, "has no effect"), "%s", out);
	ck_assert_int_eq(tool("-q -m tiny -M 64M -s paged:16 --requests 20 --limit-schedule 1:32M "
			      "--min-empty 2 --block-hash xxh3_128", out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "warning: --limit-schedule has no effect: only a slab strategy"),
		      "%s", out);
	ck_assert_msg(strstr(out, "warning: --min-empty has no effect"), "%s", out);
	ck_assert_msg(strstr(out, "warning: --block-hash has no effect"), "%s", out);
	path = tmp_trace("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 2]}\n");
	snprintf(args, sizeof(args), "-q -m tiny -M 64M --requests 5 --rate 3 --no-cache "
		 "--cache-max 5%% %s", path);
	ck_assert_int_eq(tool(args, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "warning: --requests has no effect: it sets the built-in "
				  "generator"), "%s", out);
	ck_assert_msg(strstr(out, "warning: --rate has no effect: the trace has its own arrival"),
		      "%s", out);
	ck_assert_msg(strstr(out, "warning: --cache-max has no effect: --no-cache"), "%s", out);
	unlink(path);
	free(path);

	/* Overloaded: the advice names a budget, and that budget is not. */
	snprintf(args, sizeof(args), "-q -m tiny --head-dim 512 -M 8M -s paged:16 --requests %d "
		 "--rate 8", TRACE_REQS(300));
	ck_assert_int_eq(tool(args, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "warning: overloaded"), "%s", out);
	{
		const char *p = strstr(out, "the arrivals ask for about -M ");
		char m[32];

		ck_assert_msg(p, "%s", out);
		ck_assert_int_eq(sscanf(p + strlen("the arrivals ask for about -M "), "%31[0-9KMGT]",
					m), 1);
		snprintf(args, sizeof(args), "-q -m tiny --head-dim 512 -M %s -s paged:16 "
			 "--requests %d --rate 8", m, TRACE_REQS(300));
	}
	rc = tool(args, out, sizeof(out));
	ck_assert_int_eq(rc, 0);
	ck_assert_msg(!strstr(out, "overloaded"), "%s: %s", args, out);
}
END_TEST

/* Standard error of the tool run with @args and KVSLAB_REPLAY_PROGRESS_S=0. */
static void tool_stderr(const char *args, char *out, size_t size)
{
	const char *top = getenv("KVSLAB_TOP_BUILDDIR");
	char cmd[4096];
	FILE *p;
	size_t n = 0;
	int st;

	snprintf(cmd, sizeof(cmd), "KVSLAB_REPLAY_PROGRESS_S=0 '%s/tools/kvslab-replay' %s "
		 "2>&1 >/dev/null", top && *top ? top : ".", args);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (n + 1 < size && fgets(out + n, (int)(size - n), p))
		n += strlen(out + n);
	out[n] = 0;
	while (fgetc(p) != EOF)
		;
	st = pclose(p);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/*
 * Off a terminal (here a pipe) a run prints progress lines, the first with
 * the estimate of the whole run; --no-progress and -q print none.  The
 * lines' spacing in time is set to 0 here, so that the test does not
 * depend on the clock.
 */
START_TEST(test_tool_progress)
{
	static char out[1 << 17];

	tool_stderr("-m tiny -M 64M -s static:1,slab:16 --requests 400", out, sizeof(out));
	ck_assert_int_eq(count_lines(out, "in all (an estimate; --no-progress hides these lines)"),
			 1);
	ck_assert_msg(strstr(out, "kvslab-replay: static:1 (1 of 2): ") &&
		      strstr(out, "kvslab-replay: slab:16 (2 of 2): ") &&
		      strstr(out, " of 400 requests, ") && strstr(out, " left\n"), "%s", out);
	tool_stderr("-m tiny -M 64M -s slab:16 --requests 400 --no-progress", out, sizeof(out));
	ck_assert_msg(!strstr(out, " requests, "), "%s", out);
	tool_stderr("-q -m tiny -M 64M -s slab:16 --requests 400", out, sizeof(out));
	ck_assert_msg(!strstr(out, " requests, "), "%s", out);
}
END_TEST

/*
 * The host tier is accounted as the device memory is: a host pool four
 * times the machine's memory (it was allocated, and refused with ENOMEM).
 */
START_TEST(test_tool_host_tier_any_size)
{
	static char out[1 << 16];
	long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
	unsigned long long gib;
	char args[256];
	int rc;

	ck_assert_int_gt(pages, 0);
	gib = (unsigned long long)pages * (unsigned long long)pg * 4 / (1ull << 30) + 1;
	snprintf(args, sizeof(args), "-s paged:16 -M 8G --host-pool %lluG --requests 50 --json=-",
		 gib);
	rc = tool(args, out, sizeof(out));
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_msg(strstr(out, "\"cache\": \"hiradix\""), "%s", out);
	ck_assert_uint_eq(json_u64(out, "host_pool_bytes"), gib << 30);
}
END_TEST

/*
 * The cost side: under a limit schedule, the report says who paid for the
 * limit in preemptions (counted for every strategy while the schedule held
 * the budget down; the JSON's limit_preempted); the plot's titles give the
 * driver time beside the memory (an SVG, whose text can be read).
 */
/* --slab-aware=both: each slab strategy with slab-aware eviction and
 * without (NAME/lru), and a line that compares their hits and memory; the
 * two differ on this evicting load, so each ran with its own order. */
START_TEST(test_tool_slab_aware_both)
{
	static char out[1 << 16];
	double on = -1, off = -1, d;
	const char *l;

	ck_assert_int_eq(tool("-m tiny --head-dim 512 -M 64M -s slab:16 --slab-aware both "
			      "--requests 600 --cache-max off", out, sizeof(out)), 0);
	l = strstr(out, "slab-aware eviction slab:16 against slab:16/lru (LRU alone): hit ");
	ck_assert_msg(l, "no comparison line in:\n%s", out);
	ck_assert_int_eq(sscanf(l, "slab-aware eviction slab:16 against slab:16/lru (LRU alone): "
				   "hit %lf against %lf (%lf)", &on, &off, &d), 3);
	ck_assert(on > 0 && off > 0);
	ck_assert_msg(on != off, "the same hit ratio %f: both ran with one order", on);
	ck_assert(fabs(d - (on - off)) < 1e-4);
	ck_assert_int_eq(tool("-q -m tiny --head-dim 512 -M 64M -s slab:16 --slab-aware both "
			      "--requests 100 --json -", out, sizeof(out)), 0);
	ck_assert_ptr_nonnull(strstr(out, "\"name\": \"slab:16\""));
	ck_assert_ptr_nonnull(strstr(out, "\"slab_aware\": 1"));
	ck_assert_ptr_nonnull(strstr(out, "\"name\": \"slab:16/lru\""));
	ck_assert_ptr_nonnull(strstr(out, "\"slab_aware\": 0"));
	/* Doubling past the strategies' limit is refused. */
	ck_assert_int_eq(tool("-s slab:1,slab:2,slab:4,slab:8,slab:16 --slab-aware both", out,
			      sizeof(out)), 2);
	ck_assert_ptr_nonnull(strstr(out, "doubles the slab strategies"));
}
END_TEST

START_TEST(test_tool_limit_and_plot_costs)
{
	static char out[1 << 17];
	char args[512], want[256], svg[] = "/tmp/kvslab-replay-plot-XXXXXX.svg";
	unsigned long long st, sl;
	const char *p;
	FILE *f;
	int fd, rc;

	/* Requests longer than the 16 MiB limit are rejected once it holds
	 * (they looped, preempted over and over, and the run never ended). */
	snprintf(args, sizeof(args), "-m tiny --head-dim 512 -M 64M -s paged:16,slab:16 "
		 "--requests %d --rate 2 --limit-schedule 5:16M --json=-", TRACE_REQS(300));
	rc = tool(args, out, sizeof(out));
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	p = strstr(out, "\"name\": \"paged:16\"");
	ck_assert_msg(p, "%s", out);
	st = json_u64(p, "limit_preempted");
	p = strstr(out, "\"name\": \"slab:16\"");
	ck_assert_msg(p, "%s", out);
	sl = json_u64(p, "limit_preempted");
	ck_assert_msg(st != UINT64_MAX && sl > st, "%llu %llu: %s", st, sl, out);
	snprintf(want, sizeof(want), "limit: preemptions while the schedule held the budget below "
		 "-M: paged:16 %llu (kept its memory), slab:16 %llu (gave memory back)\n", st, sl);
	ck_assert_msg(strstr(out, want), "%s", out);
	snprintf(want, sizeof(want), "limit slab:16: paid for the limit with %llu preemptions "
		 "more than paged:16\n", sl - st);
	ck_assert_msg(strstr(out, want), "%s", out);

	fd = mkstemps(svg, 4);
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(args, sizeof(args), "-q -m tiny --head-dim 512 -M 64M -s static:1,slab:16 "
		 "--requests 50 --plot %s", svg);
	rc = tool(args, out, sizeof(out));
	if (rc == 1 && strstr(out, "gnuplot is not installed")) {
		unlink(svg);
		return;
	}
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	f = fopen(svg, "r");
	ck_assert_ptr_nonnull(f);
	memset(out, 0, sizeof(out));
	ck_assert_uint_gt(fread(out, 1, sizeof(out) - 1, f), 0);
	fclose(f);
	unlink(svg);
	ck_assert_msg(strstr(out, "slab:16 saves "), "no saving in the title");
	ck_assert_msg(strstr(out, "GPU driver time "), "no driver time in the plot");
	ck_assert_msg(strstr(out, "est. GPU driver time "), "no driver time in a panel");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("replay");
	TCase *tc = tcase_create("sim");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_hand_checked_slab);
	tcase_add_test(tc, test_hand_checked_paged);
	tcase_add_loop_test(tc, test_infinite_capacity_hit_is_ideal, 0, 4);
	tcase_add_test(tc, test_hand_checked_hash);
	tcase_add_test(tc, test_hash_no_cache);
	tcase_add_test(tc, test_pressure_invariants);
	tcase_add_test(tc, test_bad_options);
	tcase_add_test(tc, test_hand_checked_tier);
	tcase_add_test(tc, test_tier_never_worse);
	tcase_add_test(tc, test_tier_bad_options);
	tcase_add_test(tc, test_huge_lengths_rejected);
	tcase_add_test(tc, test_long_output_rejected);
	tcase_add_test(tc, test_nothing_completes);
	tcase_add_test(tc, test_error_messages);
	tcase_add_test(tc, test_tool_exit_and_messages);
	tcase_add_test(tc, test_tool_storage_shared);
	tcase_add_test(tc, test_held_over_floor);
	tcase_add_test(tc, test_limit_schedule_parse);
	tcase_add_test(tc, test_limit_schedule_applied);
	tcase_add_test(tc, test_limit_refused_says_floor);
	tcase_add_test(tc, test_sharegpt_csv);
	tcase_add_test(tc, test_tool_verdict_and_warnings);
	tcase_add_test(tc, test_cost_model_report);
	tcase_add_test(tc, test_tool_output_errors);
	tcase_add_test(tc, test_peak_need);
	tcase_add_test(tc, test_tool_guidance);
	tcase_add_test(tc, test_tool_progress);
	tcase_add_test(tc, test_tool_host_tier_any_size);
	tcase_add_test(tc, test_tool_limit_and_plot_costs);
	tcase_add_test(tc, test_tool_slab_aware_both);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
