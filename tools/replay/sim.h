/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/sim.h - the serving-loop simulator of kvslab-replay.
 */
#ifndef KVSLAB_REPLAY_SIM_H
#define KVSLAB_REPLAY_SIM_H

#include <stdint.h>

#include <kvslab.h>

#include "trace.h"

enum rp_kind { RP_STATIC, RP_PAGED, RP_SLAB };

/** One memory strategy to compare. */
struct rp_strategy {
	enum rp_kind kind;
	uint32_t page_size;
	uint32_t slab_granules;		/* chunk size in granules (>= 1) */
	char name[32];
};

struct rp_sim_opts {
	const char *driver;		/* "host", "cuda", "auto" */
	size_t granularity;		/* host driver's granularity; 0: its default */
	kvs_model_t model;
	uint64_t kv_bytes;		/* memory for KV: capacity = kv_bytes / cell */
	uint32_t max_running;		/* running requests at most */
	uint32_t chunk;			/* chunked prefill: tokens a step; 0 = off */
	uint32_t reserve;		/* decode tokens reserved at admission, at least */
	double reserve_ratio;		/* share of a request's remaining output reserved */
	double step_ms;			/* simulated duration of one step */
	int use_timestamps;		/* 0: everything arrives at once */
	uint32_t min_empty, max_empty;	/* slab watermarks */
	uint64_t shrink_quiet;		/* slab: pages freed since growth before unmapping */
	int worker;			/* slab: map ahead on a worker thread */
	int no_cache;			/* a disabled prefix cache: nothing kept */
	uint64_t sample_every;		/* steps between samples (>= 1) */
};

void rp_sim_defaults(struct rp_sim_opts *o);

/** One point of the time series. */
struct rp_sample {
	uint64_t step;
	double t_ms;
	uint64_t mapped, live, held, cached;
	uint32_t running, waiting;
};

struct rp_result {
	struct rp_strategy strat;
	size_t cell;
	uint64_t capacity_tokens;
	struct rp_sample *samples;
	size_t nsamples, cap_samples;
	/* Summary. */
	uint64_t steps, requests_done, preempted, rejected;
	uint64_t mapped_peak, live_peak, held_peak;
	double mapped_mean, live_mean, held_mean, cached_mean;
	double frag_peak, frag_mean, internal_frag_mean;
	uint64_t end_mapped;		/* after draining: cache evicted, slabs shrunk */
	uint64_t hit_tokens, req_tokens;
	uint64_t drv_calls, drv_ns;
	uint64_t alloc_p50_ns, alloc_p99_ns, match_p50_ns, match_p99_ns;
	double sim_ms, wall_s;
	/* Invariant checks made at every step. */
	uint64_t live_over_mapped;
};

typedef void (*rp_progress_cb)(void *arg, size_t done, size_t total);

int rp_simulate(const struct rp_trace *t, const struct rp_sim_opts *o,
		const struct rp_strategy *s, struct rp_result *res, rp_progress_cb cb, void *arg);
void rp_result_free(struct rp_result *res);

#endif
