/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/trace.c - request traces for kvslab-replay: what every
 * format shares.  The line-by-line loader and its dispatch to one reader
 * per format (trace_mooncake.c, trace_azure.c, trace_sharegpt.c), which
 * append to the request array through trace_add.c, and the queries on a loaded trace (the input tokens of a
 * request, the ideal infinite-cache prefix-hit ratio).  The generator is
 * in trace_gen.c.
 *
 * What it owns.  A struct rp_trace: one array of requests, each with its
 * own malloc'ed array of block ids (rp_trace_free() frees both).  Every
 * format ends in the same shape (see trace.h): an arrival in ms from the
 * first request, the input and output lengths, and the ids of the input's
 * 512-token blocks, the last of which may be partial.
 *
 * Reading.  The file is read a line at a time with getline(), so a line
 * may be as long as memory allows and may hold NUL bytes (which make it
 * malformed).  The format is fixed by the first non-blank line ('{' is
 * Mooncake JSONL, anything else Azure CSV) unless the caller named it.  A
 * line that fails any check is reported on the caller's stream as
 * "PATH:LINE: what" (the first rp_trace_bad_shown, then one line with the count)
 * and skipped, or ends the load with EINVAL when the
 * caller asked to stop on errors.  Blank lines (only white space) are
 * skipped silently.  Arrivals keep the trace's order; a request that goes
 * back in time is kept with the previous arrival, so that arrivals never
 * decrease.
 *
 * Locking: none.  A trace is built by one thread and then only read;
 * every function here is MT-Safe on distinct traces, and the read-only
 * ones (rp_req_input, rp_trace_ideal_hit) on a shared one.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "trace_int.h"

/*
 * Run of tokens of block @k of a request: 512, or what is left for the
 * last.  Saturating, so that a hand-built inconsistent request cannot make
 * a run outside [0, 512].
 */
static inline uint32_t block_run(const struct rp_req *r, uint32_t k)
{
	uint64_t start = (uint64_t)k * RP_BLOCK;

	if (start >= r->input_len)
		return 0;
	return r->input_len - start < RP_BLOCK ? (uint32_t)(r->input_len - start) : RP_BLOCK;
}


/* Free and zero, so that freeing twice or after a failed load is harmless. */
void rp_trace_free(struct rp_trace *t)
{
	size_t i;

	if (!t)
		return;
	for (i = 0; i < t->n; i++)
		free(t->req[i].blocks);
	free(t->req);
	memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------ the loader */

unsigned long rp_trace_bad_shown = 5;


/* ------------------------------------------------------------------ load */

/* Dispatch one line by format; the format is fixed by the first non-blank one. */
static int load_line(struct rp_loader *ld, char *line, size_t len)
{
	size_t i;

	if (ld->line == 1 && len >= 3 && !memcmp(line, "\xEF\xBB\xBF", 3)) {
		line += 3;		/* a UTF-8 byte-order mark */
		len -= 3;
	}
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	for (i = 0; i < len && is_ws(line[i]); i++)
		;
	if (i == len)
		return 0;
	if (memchr(line, 0, len))
		return rp_bad_line(ld, "NUL byte at column %zu",
				(size_t)((char *)memchr(line, 0, len) - line) + 1);
	if (ld->fmt == RP_FMT_AUTO)
		ld->fmt = line[i] == '{'				  ? RP_FMT_MOONCAKE
			  : rp_sharegpt_is_header(line + i, len - i) ? RP_FMT_SHAREGPT
								      : RP_FMT_AZURE;
	if (ld->fmt == RP_FMT_MOONCAKE)
		return rp_mooncake_line(ld, line, len);
	if (ld->fmt == RP_FMT_SHAREGPT) {
		if (!ld->have_header)
			return rp_sharegpt_header(ld, line, len);
		return rp_sharegpt_line(ld, line, len);
	}
	if (!ld->have_header)
		return rp_azure_header(ld, line, len);
	return rp_azure_line(ld, line, len);
}

/*
 * Read line by line, so that a bad line costs only itself; on any failure
 * the partial trace is freed and @t left empty.
 */
int rp_trace_load(const char *path, enum rp_format fmt, int stop_on_error, FILE *errs,
		  struct rp_trace *t)
{
	struct rp_loader ld;
	FILE *f;
	char *buf = NULL;
	size_t bufcap = 0;
	ssize_t len;
	int err = 0;

	if (t)
		memset(t, 0, sizeof(*t));
	if (!path || !t ||
	    (fmt != RP_FMT_AUTO && fmt != RP_FMT_MOONCAKE && fmt != RP_FMT_AZURE &&
	     fmt != RP_FMT_SHAREGPT)) {
		errno = EINVAL;
		return -1;
	}
	f = fopen(path, "r");
	if (!f)
		return -1;
	memset(&ld, 0, sizeof(ld));
	ld.path = path;
	ld.errs = errs;
	ld.stop = stop_on_error;
	ld.t = t;
	ld.fmt = fmt;
	for (;;) {
		errno = 0;
		len = getline(&buf, &bufcap, f);
		if (len < 0) {
			if (ferror(f) || !feof(f))
				err = errno ? errno : EIO;
			break;
		}
		ld.line++;
		if (load_line(&ld, buf, (size_t)len)) {
			err = errno ? errno : EINVAL;
			break;
		}
	}
	free(buf);
	fclose(f);
	rp_mooncake_done(&ld);
	if (errs && t->malformed > rp_trace_bad_shown)
		fprintf(errs, "%s: %llu malformed lines in all, the first %lu shown above%s\n", path,
			(unsigned long long)t->malformed, rp_trace_bad_shown,
			t->n ? "" : "; no line was usable: is the format right (--format)?");
	if (!err && !t->n)
		err = EINVAL;		/* nothing to replay */
	if (err) {
		rp_trace_free(t);
		errno = err;
		return -1;
	}
	if (ld.fmt == RP_FMT_MOONCAKE)
		t->next_block = ld.any_block ? ld.max_id + 1 : 0;
	t->no_timestamps = ld.fmt == RP_FMT_SHAREGPT;
	return 0;
}

/* ---------------------------------------------------------------- queries */

/* Token j of block h is h * 512 + j: equal blocks give equal tokens, as the hashes promise. */
void rp_req_input(const struct rp_req *r, int32_t *out)
{
	uint32_t k, j, run;

	for (k = 0; k < r->nblocks; k++) {
		run = block_run(r, k);
		for (j = 0; j < run; j++)
			*out++ = (int32_t)(r->blocks[k] * RP_BLOCK + j);
	}
}

/*
 * The ideal hit ratio, as a token radix tree with infinite capacity would
 * see it.  Since block ids are chain hashes (or, for the other formats,
 * fresh or fixed-prefix ids), a block id always sits behind the same
 * predecessors, so the tree's content is summed up by the longest run of
 * each id inserted so far.  A request matches whole blocks while the tree
 * holds at least its run of them, then the part of the first block it
 * does not fully hold, and stops.  With page_size > 1 a real tree keeps only
 * page-aligned prefixes, but aligning the match down gives the same count
 * (floor(min(a, b)) = min(floor(a), floor(b))), so the runs stay exact.
 */
double rp_trace_ideal_hit(const struct rp_trace *t, uint32_t page_size, uint64_t *unique_tokens)
{
	uint16_t *seen;
	uint64_t matched = 0, total = 0, uniq = 0, nid = 0;
	size_t i;
	uint32_t k;

	if (unique_tokens)
		*unique_tokens = 0;
	if (!t || !page_size || (t->n && !t->req)) {
		errno = EINVAL;
		return -1.0;
	}
	/* Size the table from the ids themselves: a hand-built trace may leave next_block 0. */
	for (i = 0; i < t->n; i++)
		for (k = 0; k < t->req[i].nblocks; k++)
			if ((uint64_t)t->req[i].blocks[k] + 1 > nid)
				nid = (uint64_t)t->req[i].blocks[k] + 1;
	if (!nid)
		return 0.0;
	if (nid > SIZE_MAX / sizeof(*seen) || !(seen = calloc(nid, sizeof(*seen)))) {
		errno = ENOMEM;
		return -1.0;
	}
	for (i = 0; i < t->n; i++) {
		const struct rp_req *r = &t->req[i];
		uint64_t m = 0;

		for (k = 0; k < r->nblocks; k++) {
			uint32_t run = block_run(r, k), have = seen[r->blocks[k]];

			if (have < run) {
				m += have;
				break;
			}
			m += run;
		}
		matched += m - m % page_size;
		total += r->input_len;
		for (k = 0; k < r->nblocks; k++) {
			uint32_t run = block_run(r, k);

			if (seen[r->blocks[k]] < run)
				seen[r->blocks[k]] = (uint16_t)run;
		}
	}
	for (i = 0; i < nid; i++)
		uniq += seen[i];
	free(seen);
	if (unique_tokens)
		*unique_tokens = uniq;
	return total ? (double)matched / (double)total : 0.0;
}

struct need_ev {
	double t;
	int64_t tokens;		/* + at the start, - at the end */
};

static int need_ev_cmp(const void *a, const void *b)
{
	const struct need_ev *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	/* Ends first: a request finishing as another arrives frees its room. */
	return (x->tokens > 0) - (y->tokens > 0);
}

/*
 * The pre-pass behind the overload warning's budget: each request held
 * from its arrival for its prefill (one step, or one a @chunk of input)
 * and one step an output token, with its whole input and output (no
 * prefix shared, no queue, no cache); the largest sum of what those in
 * flight hold, and their largest count.
 */
int rp_trace_peak_need(const struct rp_trace *t, double step_ms, uint32_t chunk,
		       uint64_t *peak_tokens, size_t *peak_running)
{
	struct need_ev *ev;
	int64_t cur = 0, peak = 0;
	size_t i, run = 0, peak_run = 0;

	if (!t || (t->n && !t->req) || !(step_ms > 0) || !peak_tokens || !peak_running) {
		errno = EINVAL;
		return -1;
	}
	if (t->n > SIZE_MAX / (2 * sizeof(*ev)) || !(ev = malloc(2 * t->n * sizeof(*ev) + 1))) {
		errno = ENOMEM;
		return -1;
	}
	for (i = 0; i < t->n; i++) {
		const struct rp_req *r = &t->req[i];
		uint64_t steps = (chunk ? (r->input_len + (uint64_t)chunk - 1) / chunk : 1) +
				 r->output_len;
		int64_t tok = (int64_t)r->input_len + r->output_len;

		ev[2 * i].t = r->arrival_ms;
		ev[2 * i].tokens = tok ? tok : 1;
		ev[2 * i + 1].t = r->arrival_ms + (double)steps * step_ms;
		ev[2 * i + 1].tokens = -(tok ? tok : 1);
	}
	qsort(ev, 2 * t->n, sizeof(*ev), need_ev_cmp);
	for (i = 0; i < 2 * t->n; i++) {
		cur += ev[i].tokens;
		if (ev[i].tokens > 0)
			run++;
		else
			run--;
		if (cur > peak)
			peak = cur;
		if (run > peak_run)
			peak_run = run;
	}
	free(ev);
	*peak_tokens = (uint64_t)peak;
	*peak_running = peak_run;
	return 0;
}
