/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_replay.c - the replay simulator: accounting on a tiny
 * hand-checked trace, infinite-capacity hit ratio against the ideal
 * computed from the trace, live never above mapped under pressure, and a
 * drained slab run ending at one pre-mapping watermark.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "testutil.h"
#include "trace.h"

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
	uint32_t ps = _i ? 16 : 1;
	struct rp_strategy s = strat(RP_SLAB, ps, "slab");
	struct rp_result r;
	double hit;

	rp_synth_defaults(&so);
	so.requests = 300;
	so.input_mean = 1500;
	so.output_mean = 20;
	so.output_max = 64;
	so.seed = 7;
	ck_assert_int_eq(rp_trace_synth(&so, &t), 0);
	rp_sim_defaults(&o);
	kvs_model_preset("tiny", &o.model);
	o.kv_bytes = 1ull << 30; /* far more than the trace's tokens */
	o.max_running = 1;       /* each request sees every earlier one */
	o.use_timestamps = 0;
	ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), 0);
	ck_assert_uint_eq(r.requests_done, 300);
	hit = (double)r.hit_tokens / (double)r.req_tokens;
	ck_assert_msg(hit == ideal_capped(&t, ps), "hit %.6f ideal %.6f", hit, ideal_capped(&t, ps));
	ck_assert(hit > 0.2); /* the generator shares prefixes */
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
	so.requests = 200;
	so.rate = 50;
	so.input_mean = 3000;
	so.output_mean = 300;
	so.seed = 11;
	ck_assert_int_eq(rp_trace_synth(&so, &t), 0);
	tiny_opts(&o);
	o.kv_bytes = 64 * 1024; /* 32768 tokens: a handful of requests */
	o.max_running = 16;
	o.reserve = 16;
	for (k = 0; k < 3; k++) {
		struct rp_strategy s = strat(kinds[k], k == 0 ? 1 : 16, "x");
		struct rp_result r;
		size_t i;

		ck_assert_int_eq(rp_simulate(&t, &o, &s, &r, NULL, NULL), 0);
		ck_assert_uint_eq(r.requests_done + r.rejected, 200);
		ck_assert_uint_eq(r.live_over_mapped, 0);
		for (i = 0; i < r.nsamples; i++) {
			ck_assert_uint_le(r.samples[i].live, r.samples[i].mapped);
			ck_assert_uint_le(r.samples[i].live, r.samples[i].held);
			ck_assert_uint_le(r.samples[i].mapped, o.kv_bytes);
		}
		ck_assert_uint_gt(r.mapped_peak, 0);
		if (kinds[k] == RP_SLAB)
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

int main(void)
{
	Suite *s = suite_create("replay");
	TCase *tc = tcase_create("sim");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_hand_checked_slab);
	tcase_add_test(tc, test_hand_checked_paged);
	tcase_add_loop_test(tc, test_infinite_capacity_hit_is_ideal, 0, 2);
	tcase_add_test(tc, test_pressure_invariants);
	tcase_add_test(tc, test_bad_options);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
