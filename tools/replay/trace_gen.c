/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/trace_gen.c - the seeded synthetic trace generator.
 *
 * The generator uses splitmix64 only (no libc rand), so a seed gives the
 * same integers everywhere; lengths and gaps go through libm's log, exp,
 * sqrt and cos, whose last-ulp differences between libms would only show
 * when a draw lands within an ulp of a rounding boundary.  Shared prefixes
 * are drawn Zipf(s = 1) over the pool, as a few system prompts and
 * templates dominate real traffic.
 *
 * Locking: none; MT-Safe on distinct traces.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace_int.h"

/* A small, busy workload: 2000 requests at 4/s, half of each input shared. */
void rp_synth_defaults(struct rp_synth_opts *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->seed = 1;
	o->requests = 2000;
	o->rate = 4.0;
	o->input_mean = 2048;
	o->input_max = 16384;
	o->output_mean = 256;
	o->output_max = 2048;
	o->shared_ratio = 0.5;
	o->prefixes = 16;
}

/* ------------------------------------------------------------- generator */

/* splitmix64 (Steele, Lea, Flood): a full-period 64-bit generator, one add a draw. */
static uint64_t sm64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1): never 0, so its log is finite. */
static double unif(uint64_t *s)
{
	return ((double)(sm64(s) >> 11) + 0.5) * 0x1p-53;
}

/* Standard normal by Box-Muller (one of the pair; simplicity over speed). */
static double gauss(uint64_t *s)
{
	double u1 = unif(s), u2 = unif(s);

	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

#define SYNTH_SIGMA 0.8

/*
 * A lognormal length with mean @mean: mu = ln(mean) - sigma^2 / 2 makes
 * E[exp(mu + sigma Z)] = mean; then rounded and clipped to [1, @max].
 */
static uint32_t draw_len(uint64_t *s, uint32_t mean, uint32_t max)
{
	double mu = log((double)mean) - SYNTH_SIGMA * SYNTH_SIGMA / 2;
	double x = floor(exp(mu + SYNTH_SIGMA * gauss(s)) + 0.5);

	if (!(x >= 1))
		return 1;
	if (x >= (double)max)
		return max;
	return (uint32_t)x;
}

/*
 * Prefix p's block k is id p * pblocks + k, fixed before the first request,
 * so the pool is the same whatever the order of draws; fresh ids follow.
 */
int rp_trace_synth(const struct rp_synth_opts *o, struct rp_trace *t)
{
	uint64_t s, pool_ids, next;
	uint32_t pblocks = 0, i, k;
	double *cdf = NULL, now = 0;
	size_t r;
	int err;

	if (t)
		memset(t, 0, sizeof(*t));
	if (!o || !t || !o->requests || !(o->rate >= 0) || !isfinite(o->rate) ||
	    !o->input_mean || !o->input_max || o->input_mean > o->input_max ||
	    !o->output_mean || !o->output_max || o->output_mean > o->output_max ||
	    o->input_max > LEN_MAX || o->output_max > LEN_MAX ||
	    !(o->shared_ratio >= 0 && o->shared_ratio <= 1) ||
	    (o->shared_ratio > 0 && !o->prefixes)) {
		errno = EINVAL;
		return -1;
	}
	/* Each prefix holds the full blocks of the longest shared part. */
	if (o->shared_ratio > 0)
		pblocks = (uint32_t)floor(o->shared_ratio * o->input_max) / RP_BLOCK;
	pool_ids = (uint64_t)pblocks * (pblocks ? o->prefixes : 0);
	if (pool_ids > RP_MAX_BLOCK_ID || o->requests > SIZE_MAX / sizeof(*t->req)) {
		errno = ENOMEM;
		return -1;
	}
	t->req = calloc(o->requests, sizeof(*t->req));
	/* pool_ids <= RP_MAX_BLOCK_ID bounds prefixes too, so no overflow here. */
	if (pblocks)
		cdf = malloc(o->prefixes * sizeof(*cdf));
	if (!t->req || (pblocks && !cdf)) {
		err = ENOMEM;
		goto fail;
	}
	/* Zipf(1): prefix p is drawn with weight 1 / (p + 1). */
	if (pblocks) {
		double sum = 0;

		for (i = 0; i < o->prefixes; i++)
			cdf[i] = sum += 1.0 / (i + 1);
		for (i = 0; i < o->prefixes; i++)
			cdf[i] /= sum;
		cdf[o->prefixes - 1] = 1.0;
	}
	s = o->seed;
	next = pool_ids;		/* prefix p's block k is p * pblocks + k */
	for (r = 0; r < o->requests; r++) {
		struct rp_req *q = &t->req[r];
		uint32_t shared = 0, prefix = 0;	/* shared: blocks from the prefix */

		if (o->rate > 0)
			now += -log(unif(&s)) / o->rate * 1000.0;
		if (!isfinite(now)) {
			err = EINVAL;	/* a rate so small that time overflows */
			goto fail;
		}
		q->arrival_ms = now;
		q->input_len = draw_len(&s, o->input_mean, o->input_max);
		q->output_len = draw_len(&s, o->output_mean, o->output_max);
		q->nblocks = (q->input_len + RP_BLOCK - 1) / RP_BLOCK;
		if (pblocks) {
			double u = unif(&s);
			uint32_t lo = 0, hi = o->prefixes - 1;

			while (lo < hi) {	/* first p with cdf[p] >= u */
				uint32_t mid = lo + (hi - lo) / 2;

				if (cdf[mid] >= u)
					hi = mid;
				else
					lo = mid + 1;
			}
			prefix = lo;
			/* round_down(ratio * input_len, 512) tokens, in blocks */
			shared = (uint32_t)floor(o->shared_ratio * q->input_len) / RP_BLOCK;
			if (shared > pblocks)
				shared = pblocks;	/* cannot happen; belt and braces */
		}
		if (next + (q->nblocks - shared) > RP_MAX_BLOCK_ID) {
			err = ENOMEM;
			goto fail;
		}
		q->blocks = malloc((size_t)q->nblocks * sizeof(*q->blocks));
		if (!q->blocks) {
			err = ENOMEM;
			goto fail;
		}
		t->n = r + 1;
		for (k = 0; k < shared; k++)
			q->blocks[k] = prefix * pblocks + k;
		for (; k < q->nblocks; k++)
			q->blocks[k] = (uint32_t)next++;
		if (q->input_len > t->max_input)
			t->max_input = q->input_len;
		if (q->output_len > t->max_output)
			t->max_output = q->output_len;
	}
	t->next_block = (uint32_t)next;
	free(cdf);
	return 0;
fail:
	free(cdf);
	rp_trace_free(t);
	errno = err;
	return -1;
}
