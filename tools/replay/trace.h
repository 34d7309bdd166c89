/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/trace.h - request traces for kvslab-replay: Mooncake JSONL,
 * Azure LLM inference CSV, and a seeded synthetic generator.
 *
 * Every format is brought to one shape: a request is an arrival time, an
 * input length, an output length and the ids of its input's 512-token
 * blocks.  Token j of block id h is h * 512 + j; the last block holds
 * input_len - 512 * (nblocks - 1) tokens (the Mooncake traces' convention).
 * Block ids of Mooncake traces are chained hashes, so equal ids mean equal
 * prefixes (the loader maps them, whatever 64-bit values they are, to
 * dense ids in the order first seen); formats without prefix data (Azure)
 * get fresh ids, so requests share nothing; the generator draws shared
 * prefixes from a pool.
 */
#ifndef KVSLAB_REPLAY_TRACE_H
#define KVSLAB_REPLAY_TRACE_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#define RP_BLOCK 512
/* Block ids stay below this so that every token id fits an int32. */
#define RP_MAX_BLOCK_ID (1u << 22)
/* Output token ids: RP_OUTPUT_BASE + a per-trace counter, never shared. */
#define RP_OUTPUT_BASE 0x40000000

enum rp_format { RP_FMT_AUTO = 0, RP_FMT_MOONCAKE, RP_FMT_AZURE, RP_FMT_SHAREGPT };

struct rp_req {
	double arrival_ms;	/* from the trace's start */
	uint32_t input_len, output_len;
	uint32_t nblocks;	/* ceil(input_len / 512) */
	uint32_t *blocks;	/* block ids */
};

struct rp_trace {
	struct rp_req *req;
	size_t n;
	uint64_t malformed;	/* lines skipped */
	uint32_t max_input, max_output;
	uint32_t next_block;	/* first unused block id */
	int no_timestamps;	/* lengths only (ShareGPT): arrivals are the caller's */
};

struct rp_synth_opts {
	uint64_t seed;
	size_t requests;
	double rate;		/* arrivals per second (Poisson); 0: all at 0 */
	uint32_t input_mean, input_max;	/* lognormal-ish, clipped to [1, max] */
	uint32_t output_mean, output_max;
	double shared_ratio;	/* fraction of each input taken from a shared prefix */
	uint32_t prefixes;	/* distinct shared prefixes in the pool */
};

void rp_synth_defaults(struct rp_synth_opts *o);

/*
 * Load @path.  RP_FMT_AUTO tells JSONL from CSV by the first non-blank
 * character, and the ShareGPT statistics CSV by its header.  A malformed line is reported on @errs as "FILE:LINE: what"
 * and skipped, or, with @stop_on_error, ends the load with -1 and errno
 * EINVAL.  Returns 0, or -1 with errno (ENOENT, EINVAL, ENOMEM; EINVAL also
 * when no request could be read).
 */
/* Malformed lines rp_trace_load() reports one by one (5); past them, one
 * line at the end gives the count of all.  The tests raise it. */
extern unsigned long rp_trace_bad_shown;

int rp_trace_load(const char *path, enum rp_format fmt, int stop_on_error, FILE *errs,
		  struct rp_trace *t);
int rp_trace_synth(const struct rp_synth_opts *o, struct rp_trace *t);
void rp_trace_free(struct rp_trace *t);
/* Arrivals for a trace without timestamps: Poisson at @rate requests a
 * second from a seeded generator (0: all at 0).  0, or -1/EINVAL. */
int rp_trace_set_rate(struct rp_trace *t, double rate, uint64_t seed);

/* The input tokens of request @i into @out (room for input_len). */
void rp_req_input(const struct rp_req *r, int32_t *out);

/*
 * Ideal prefix-hit ratio with an infinite cache, from the trace alone: the
 * fraction of input tokens whose page-aligned prefix an earlier request
 * already held (per block id, the longest run of it seen so far).  Also
 * the number of unique tokens (the size of the token-level radix tree).
 */
double rp_trace_ideal_hit(const struct rp_trace *t, uint32_t page_size, uint64_t *unique_tokens);

/*
 * What the arrivals ask of memory, from the trace alone: every request
 * served from its arrival, held for its prefill (one step of @step_ms, or
 * one a @chunk of input tokens) and one step an output token, with all of
 * its input and output tokens (no prefix shared, no queue, no cache).
 * *@peak_tokens is the largest sum of the tokens of requests in flight at
 * once, *@peak_running their largest count.  0, or -1 with errno EINVAL
 * or ENOMEM.
 */
int rp_trace_peak_need(const struct rp_trace *t, double step_ms, uint32_t chunk,
		       uint64_t *peak_tokens, size_t *peak_running);

#endif
