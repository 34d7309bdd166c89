/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/sim.h - the serving-loop simulator of kvslab-replay.
 */
#ifndef KVSLAB_REPLAY_SIM_H
#define KVSLAB_REPLAY_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvslab.h>

#include "trace.h"

enum rp_kind { RP_STATIC, RP_PAGED, RP_SLAB };

/* The prefix cache: SGLang's radix tree, or vLLM's hashed blocks. */
enum rp_cache { RP_CACHE_RADIX, RP_CACHE_HASH };

/** One memory strategy (and prefix cache) to compare. */
struct rp_strategy {
	enum rp_kind kind;
	enum rp_cache cache;
	uint32_t page_size;
	uint32_t slab_granules;		/* chunk size in granules (>= 1) */
	int slab_aware;			/* radix eviction: -1 the run's --slab-aware, 0 off, 1 on */
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
	int slab_aware;			/* radix eviction slab-aware (the library's default, 1);
					 * 2 (--slab-aware=both): main.c runs each slab
					 * strategy with it and without */
	uint32_t compact_pages;		/* slab: kvs_pool_compact() budget a step, 0: off */
	int no_cache;			/* a disabled prefix cache: nothing kept */
	int hash_fn;			/* --cache hash: enum kvs_hash_fn */
	uint64_t sample_every;		/* steps between samples (>= 1) */
	/* --host-pool: a host (L2) tier under the radix cache when either is
	 * not 0: host_bytes of host memory, or host_ratio x the device pages. */
	uint64_t host_bytes;
	double host_ratio;
	uint32_t write_policy;		/* KVS_WRITE_* */
	uint64_t load_threshold;	/* UINT64_MAX: the cache's default */
	/* --storage: a store (L3) under the host tier, or NULL; its
	 * namespace is model_name.  Prefetch threshold (tokens) and policy
	 * (KVS_PREFETCH_*). */
	const char *storage;
	const char *model_name;
	uint32_t prefetch_threshold;
	uint32_t prefetch_policy;
	/* --cache-max: the share of the budget the prefix cache's evictable
	 * pages may hold; after every step the cache is evicted down to it.
	 * Negative: no cap (the cache fills whatever the requests leave). */
	double cache_max;
	/* --limit-schedule: the slab strategy's budget becomes bytes at
	 * simulated t_ms, in order of t_ms (static and paged pools cannot
	 * give memory back and ignore it). */
	const struct rp_limit *limits;
	size_t nlimits;
	/* --metrics: a registry the run's objects join from setup to teardown,
	 * labelled with the strategy's name (NULL: none). */
	kvs_metrics_t *metrics;
};

/** One point of a limit schedule. */
struct rp_limit {
	double t_ms;
	uint64_t bytes;
};

/*
 * Parse "SECONDS:SIZE,..." (SIZE as -M takes it: 8G, 512M, bytes) into a
 * malloc'ed array, times strictly increasing.  Returns the count, or -1
 * with a message in @err (and errno EINVAL or ENOMEM).
 */
ssize_t rp_limit_parse(const char *spec, struct rp_limit **out, char *err, size_t errsize);
/* A size with an optional K/M/G/T suffix (binary, "iB"/"B" allowed): 0 or -1. */
int rp_parse_size(const char *arg, uint64_t *out);

/*
 * The driver calls a replay made, by kind, with a cost model: microseconds
 * each call would take on a GPU.  RP_DRV_OPS(X): X(name, kvs_drv_stat).
 */
#define RP_DRV_OPS(X)                                 \
	X(reserve, KVS_DRV_STAT_reserve_calls)         \
	X(unreserve, KVS_DRV_STAT_unreserve_calls)     \
	X(create, KVS_DRV_STAT_create_calls)           \
	X(release, KVS_DRV_STAT_release_calls)         \
	X(map, KVS_DRV_STAT_map_calls)                 \
	X(unmap, KVS_DRV_STAT_unmap_calls)             \
	X(set_access, KVS_DRV_STAT_set_access_calls)

enum rp_drv_op {
#define RP_X_ENUM(n, st) RP_OP_##n,
	RP_DRV_OPS(RP_X_ENUM)
#undef RP_X_ENUM
	RP_OP__COUNT
};

struct rp_cost_model {
	char name[64];			/* "a100", "h200", "h100", "measure", "none", a path */
	double us[RP_OP__COUNT];	/* all 0 for "none" and "measure" */
	int measure;			/* "measure": the calls' measured time, no estimate */
};

const char *rp_drv_op_name(enum rp_drv_op op);
/* "a100", "h200", "h100", "measure", "none" or a file of name=us lines: 0, or
 * -1 with @err. */
int rp_cost_model_load(const char *spec, struct rp_cost_model *m, char *err, size_t errsize);
/* Estimated microseconds of @calls under @m. */
double rp_cost_estimate_us(const struct rp_cost_model *m, const uint64_t *calls);
struct rp_result;
/* The driver time of @r's pool under @m, ms: the estimate of its calls, or
 * with "measure" the time they took (drv_ns); 0 without a model. */
double rp_cost_driver_ms(const struct rp_cost_model *m, const struct rp_result *r);
/* rp_cost_driver_ms() as a share of @r's simulated serving time (sim_ms). */
double rp_cost_share(const struct rp_cost_model *m, const struct rp_result *r);

/* Whether @o asks for a host tier. */
#define RP_TIERED(o) ((o)->host_bytes != 0 || (o)->host_ratio > 0)

/* "write_through", ...: NULL for an unknown policy; and back. */
const char *rp_write_policy_name(uint32_t policy);
int rp_write_policy_parse(const char *name, uint32_t *policy);
/* "best_effort", "wait_complete", "timeout": the same for KVS_PREFETCH_*. */
const char *rp_prefetch_policy_name(uint32_t policy);
int rp_prefetch_policy_parse(const char *name, uint32_t *policy);

void rp_sim_defaults(struct rp_sim_opts *o);

/* CLOCK_MONOTONIC in nanoseconds, for the replay's timings. */
uint64_t rp_now_ns(void);

/*
 * Why a request was turned away before it ran, one counter each in
 * struct rp_result: name (for the CSV/JSON keys and the table) and what
 * it means.
 */
#define RP_REJECTS(X)                                                              \
	X(over_budget, "input + output need more KV memory than the whole budget")  \
	X(over_table, "input + output longer than a request-table row may be")

enum rp_reject {
#define RP_X_ENUM(n, d) RP_REJECT_##n,
	RP_REJECTS(RP_X_ENUM)
#undef RP_X_ENUM
	RP_REJECT__COUNT
};

const char *rp_reject_name(enum rp_reject r);
const char *rp_reject_desc(enum rp_reject r);

/* The request table's bytes at most: rows x columns x 4. */
#define RP_TABLE_MAX_BYTES (1ull << 30)
/* Columns past the longest admitted request. */
#define RP_TABLE_SLACK 8

/** One point of the time series. */
struct rp_sample {
	uint64_t step;
	double t_ms;
	uint64_t mapped, live, held, cached;
	uint64_t need;			/* held pages no eviction can free: running requests' */
	uint64_t floor;			/* held pages packed densely into whole slabs */
	uint64_t limit;			/* --limit-schedule's budget now; 0: none */
	uint32_t running, waiting;
};

/* held_over_floor over every step with pages held: mapped / packed floor. */
struct rp_ratio {
	double mean, p99, max;
};

struct rp_result {
	struct rp_strategy strat;
	size_t cell;
	uint64_t capacity_tokens;
	struct rp_sample *samples;
	size_t nsamples, cap_samples;
	/* Summary. */
	uint64_t steps, requests_done, preempted, rejected;
	uint64_t rejects[RP_REJECT__COUNT];	/* rejected, by reason */
	uint32_t table_rows, table_cols;	/* the request table made */
	uint64_t mapped_peak, live_peak, held_peak;
	double mapped_mean, live_mean, held_mean, cached_mean;
	uint64_t need_peak, floor_peak;
	double need_mean, floor_mean;
	struct rp_ratio held_over_floor;
	size_t granularity;		/* the driver's, bytes a buffer */
	uint64_t slab_tokens;		/* one slab of this pool, tokens (the floor's unit) */
	uint64_t cache_evicted_tokens;	/* evicted by --cache-max */
	uint64_t limit_changes, limit_over_steps;	/* --limit-schedule */
	double limit_lag_max_ms;	/* longest wait for mapped <= a lowered limit */
	uint64_t limit_refused;		/* kvs_pool_set_limit() refused: running requests over it */
	/* Preemptions while the schedule held the budget below kv_bytes,
	 * counted for every strategy (those without a limit too): the
	 * price of the limit is the difference. */
	uint64_t limit_preempted;
	uint64_t limit_returned_bytes;	/* bytes kvs_pool_set_limit() gave back, summed */
	uint64_t limit_ns, limit_ns_max;	/* its time, summed and longest */
	uint64_t compacted_pages, compact_ns;	/* --compact: pages moved, time */
	uint64_t drv_ops[RP_OP__COUNT];	/* the pool's driver calls, by kind */
	double frag_peak, frag_mean, internal_frag_mean;
	uint64_t end_mapped;		/* after draining: cache evicted, slabs shrunk */
	uint64_t hit_tokens, req_tokens;
	/* --host-pool: hit_tokens = l1_tokens (device prefix at the first
	 * prefill) + l2_tokens (loaded back from the host) + l3_tokens (of
	 * those loaded back, the ones its prefetch brought from the store);
	 * recomputed = req_tokens - hit_tokens. */
	int tiered;
	uint32_t write_policy;
	uint64_t host_pool_bytes;
	uint64_t l1_tokens, l2_tokens, l3_tokens;
	/* --storage: the URI (NULL without), the cache's L3 counters and the
	 * store's, read after every backup reached the store. */
	const char *storage;
	uint32_t prefetch_policy;
	uint64_t prefetches, prefetch_tokens, l3_backup_pages, l3_backup_fail;
	/* Where the prefetched tokens went, at their request's first prefill:
	 * l3_tokens were loaded back; l3_unloaded were on the host but not
	 * loaded (no device room, or below the load-back threshold);
	 * l3_on_device were on the device by then (an L1 hit); l3_gone were
	 * no longer on the host (evicted while the request waited). */
	uint64_t l3_prefetched, l3_unloaded, l3_on_device, l3_gone;
	uint64_t store_stats[KVS_STORE_STAT__COUNT];
	uint64_t backup_tokens, load_backs, evict_host_tokens, host_tokens_peak;
	uint64_t drv_calls, drv_ns;
	uint64_t alloc_p50_ns, alloc_p99_ns, match_p50_ns, match_p99_ns;
	uint64_t cache_ns;		/* in the prefix cache's calls: match, extend, decode, finish */
	uint64_t hash_ns;		/* of which hashing blocks (--cache hash) */
	double sim_ms, wall_s;
	/* Invariant checks made at every step. */
	uint64_t live_over_mapped;
	/* Why rp_simulate() failed, in words ("" when it did not, or when
	 * errno says all). */
	char error[320];
};

typedef void (*rp_progress_cb)(void *arg, size_t done, size_t total);

/*
 * Replay @t with strategy @s into @res.  Returns 0 (even when no request
 * completed: see rp_result_verdict()), or -1 with errno and, where the
 * tool knows the cause, res->error.
 */
int rp_simulate(const struct rp_trace *t, const struct rp_sim_opts *o,
		const struct rp_strategy *s, struct rp_result *res, rp_progress_cb cb, void *arg);
void rp_result_free(struct rp_result *res);

/*
 * A run that completed no request failed: 0 when @res completed any, else
 * -1 with "no request completed: N rejected (...)" in @msg.
 */
int rp_result_verdict(const struct rp_result *res, char *msg, size_t size);

/* "128 MiB", "8 GiB", "100 bytes": exact where it can be. */
void rp_fmt_bytes(uint64_t b, char *buf, size_t size);

/*
 * The tokens and bytes of one slab as the slab allocator sizes it (the
 * least multiple of the page whose bytes in each of the model's buffers
 * are whole granules, times @granules): for messages.  0 when the shape
 * overflows.
 */
uint64_t rp_slab_tokens(const kvs_model_t *m, uint32_t page_size, size_t granularity,
			uint32_t granules);

#endif
