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
};

void rp_report_table(FILE *f, const struct rp_result *res, size_t n);
int rp_report_csv(const char *path, const struct rp_result *res, size_t n);
int rp_report_json(const char *path, const struct rp_meta *meta, const struct rp_result *res,
		   size_t n);
/* PNG (pngcairo) or SVG by the file's extension; -1/ENOENT without gnuplot. */
int rp_report_plot(const char *path, const struct rp_result *res, size_t n);

#endif
