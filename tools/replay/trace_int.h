/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/trace_int.h - what the trace readers share: the loader
 * state one rp_trace_load() call walks the file with, and the two calls
 * every reader ends a line with (rp_add_req, rp_bad_line).  Internal to
 * libreplay; the public shape of a trace is in trace.h.
 */
#ifndef KVSLAB_REPLAY_TRACE_INT_H
#define KVSLAB_REPLAY_TRACE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "trace.h"

/* Lengths stay within int32, since the simulator indexes token arrays with it. */
#define LEN_MAX INT32_MAX

struct rp_loader {
	const char *path;
	FILE *errs;
	int stop;
	struct rp_trace *t;
	size_t cap;			/* of t->req */
	unsigned long line;		/* 1-based, blank lines count */
	enum rp_format fmt;		/* RP_FMT_AUTO until the first non-blank line */
	bool have_first;
	double first_ts;		/* Mooncake: first request's timestamp */
	int64_t first_day, first_ns;	/* Azure: first request's date and time */
	double last_arrival;
	bool any_block;
	uint32_t max_id;
	/* Mooncake: the trace's 64-bit hash ids to dense ids in the order
	 * seen, open addressing; val 0 is an empty slot, else dense id + 1. */
	uint64_t *id_key;
	uint32_t *id_val;
	size_t id_cap, id_n;
	/* Azure header: column indexes (-1 until found) and count. */
	bool have_header;
	long col_ts, col_ctx, col_gen, ncols;
};

static inline bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}


/*
 * Report the current line as malformed.  Returns -1 (with errno EINVAL)
 * when the load must stop, 0 when the line is just skipped.
 */
__attribute__((format(printf, 2, 3)))
int rp_bad_line(struct rp_loader *ld, const char *fmt, ...);

/*
 * Append a request; takes @blocks (freed on failure).  Returns 0, or -1
 * with errno ENOMEM.
 */
int rp_add_req(struct rp_loader *ld, double arrival, uint32_t in, uint32_t out,
	       uint32_t *blocks, uint32_t nblocks);

/*
 * Fresh block ids for a request of @in input tokens that shares no prefix
 * (the formats without hash ids): 1 with *@blocks (the caller's, for
 * rp_add_req()) and *@nb set; else what the line's reader returns, 0 (the
 * line skipped: ids exhausted) or -1 with errno.
 */
int rp_fresh_blocks(struct rp_loader *ld, uint64_t in, uint32_t **blocks, uint32_t *nb);

/* One line of each format (trace_mooncake.c, trace_azure.c): 0 (added or
 * skipped), or -1 with errno when the load must stop. */
int rp_mooncake_line(struct rp_loader *ld, const char *line, size_t len);
int rp_azure_header(struct rp_loader *ld, const char *line, size_t len);
int rp_azure_line(struct rp_loader *ld, const char *line, size_t len);

/* The ShareGPT length statistics CSV (trace_sharegpt.c): whether a first
 * line is its header, the header, and a row. */
bool rp_sharegpt_is_header(const char *line, size_t len);
int rp_sharegpt_header(struct rp_loader *ld, const char *line, size_t len);
int rp_sharegpt_line(struct rp_loader *ld, const char *line, size_t len);

/* Free what a reader kept in @ld (the Mooncake id map). */
void rp_mooncake_done(struct rp_loader *ld);

#endif
