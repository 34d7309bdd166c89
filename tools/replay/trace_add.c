/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/trace_add.c - what every trace reader (trace_mooncake.c,
 * trace_azure.c, trace_sharegpt.c) ends a line with: appending a request
 * to the trace, giving a format without hash ids fresh block ids, and
 * reporting a malformed line.  Below the readers, which trace.c's loader
 * dispatches to, so that no reader calls back into the loader.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_int.h"

/*
 * Report the current line as malformed.  Returns -1 (with errno EINVAL)
 * when the load must stop, 0 when the line is just skipped.
 */
__attribute__((format(printf, 2, 3)))
int rp_bad_line(struct rp_loader *ld, const char *fmt, ...)
{
	va_list ap;

	ld->t->malformed++;
	/* The first few only: a wrong --format makes every line malformed,
	 * and rp_trace_load() ends with the count of the rest. */
	if (ld->errs && ld->t->malformed <= rp_trace_bad_shown) {
		fprintf(ld->errs, "%s:%lu: ", ld->path, ld->line);
		va_start(ap, fmt);
		vfprintf(ld->errs, fmt, ap);
		va_end(ap);
		fputc('\n', ld->errs);
	}
	if (ld->stop) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

int rp_fresh_blocks(struct rp_loader *ld, uint64_t in, uint32_t **blocks, uint32_t *nb)
{
	uint64_t n = (in + RP_BLOCK - 1) / RP_BLOCK, k;

	if ((uint64_t)ld->t->next_block + n > RP_MAX_BLOCK_ID)
		return rp_bad_line(ld, "block ids exhausted (%u in use, %llu more needed)",
				   ld->t->next_block, (unsigned long long)n);
	*blocks = malloc(n * sizeof(**blocks));
	if (!*blocks) {
		errno = ENOMEM;
		return -1;
	}
	for (k = 0; k < n; k++)
		(*blocks)[k] = ld->t->next_block + (uint32_t)k;
	ld->t->next_block += (uint32_t)n;
	*nb = (uint32_t)n;
	return 1;
}

/*
 * Append a request; takes @blocks (freed on failure).  The arrival is
 * clamped to the previous one so that a replay can walk arrivals in order.
 */
int rp_add_req(struct rp_loader *ld, double arrival, uint32_t in, uint32_t out,
		   uint32_t *blocks, uint32_t nblocks)
{
	struct rp_trace *t = ld->t;
	struct rp_req *r;
	uint32_t k;

	if (t->n == ld->cap) {
		size_t cap = ld->cap ? ld->cap * 2 : 256;
		struct rp_req *v;

		if (cap > SIZE_MAX / sizeof(*v) ||
		    !(v = realloc(t->req, cap * sizeof(*v)))) {
			free(blocks);
			errno = ENOMEM;
			return -1;
		}
		t->req = v;
		ld->cap = cap;
	}
	if (t->n && arrival < ld->last_arrival)
		arrival = ld->last_arrival;
	ld->last_arrival = arrival;
	r = &t->req[t->n++];
	r->arrival_ms = arrival;
	r->input_len = in;
	r->output_len = out;
	r->nblocks = nblocks;
	r->blocks = blocks;
	if (in > t->max_input)
		t->max_input = in;
	if (out > t->max_output)
		t->max_output = out;
	for (k = 0; k < nblocks; k++) {
		if (!ld->any_block || blocks[k] > ld->max_id)
			ld->max_id = blocks[k];
		ld->any_block = true;
	}
	return 0;
}
