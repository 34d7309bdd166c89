/* SPDX-License-Identifier: MIT */
/* tools/replay/report.h - kvslab-replay's tables, CSV, JSON and plot. */
#ifndef KVSLAB_REPLAY_REPORT_H
#define KVSLAB_REPLAY_REPORT_H

#include <stdio.h>

#include "sim.h"

struct rp_meta {
	const char *trace, *model, *driver;
	size_t requests, cell;
	uint64_t kv_bytes;
	double ideal_hit;
	/* The settings the run used, printed with its results. */
	const struct rp_sim_opts *sim;
	const struct rp_cost_model *cost;
	uint32_t granules;
	size_t granularity;		/* the driver's, bytes a buffer */
	const char *arrivals;		/* "trace timestamps", "Poisson at 4 requests/s", ... */
};

/*
 * A strategy against the static pool of the same cache (the first static
 * run), as the verdict line and the JSON give it.  base < 0: no static
 * run to compare with.
 */
struct rp_verdict {
	long base;
	double saved_mean, saved_peak;		/* bytes, static's minus this one's */
	double saved_mean_ratio, saved_peak_ratio;
	double gpu_ms, base_gpu_ms;		/* by the cost model (estimated or measured) */
	double share;				/* gpu_ms / the simulated serving time */
};

void rp_verdict_of(const struct rp_result *res, size_t n, size_t i,
		   const struct rp_cost_model *cost, struct rp_verdict *v);

void rp_report_settings(FILE *f, const struct rp_meta *meta, const struct rp_result *res,
			size_t n);
void rp_report_table(FILE *f, const struct rp_result *res, size_t n);
/* rp_report_table() and the memory and driver-call tables. */
void rp_report_tables(FILE *f, const struct rp_result *res, size_t n,
		      const struct rp_cost_model *cost);
/* One line a strategy against the static pool; the cost model may be "none". */
void rp_report_verdict(FILE *f, const struct rp_result *res, size_t n,
		       const struct rp_cost_model *cost);
/* @points: samples a strategy at most (evenly taken, peaks kept); 0: all. */
int rp_report_csv(const char *path, const struct rp_result *res, size_t n, size_t points);
int rp_report_json(const char *path, const struct rp_meta *meta, const struct rp_result *res,
		   size_t n);
/* PNG (pngcairo) or SVG by the file's extension; -1/ENOEXEC without gnuplot, -1
 * and fopen()'s errno when @path cannot be written (nothing drawn). */
int rp_report_plot(const char *path, const struct rp_result *res, size_t n,
		   const struct rp_cost_model *cost);

#endif
