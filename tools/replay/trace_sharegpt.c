/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/trace_sharegpt.c - the ShareGPT length statistics CSV
 * (Sarathi-Serve / Vidur: num_prefill_tokens, num_decode_tokens, and other
 * columns ignored, found by the header in any order).
 *
 * The file holds lengths only: no arrival times and no prefix data.  Each
 * request gets fresh block ids, as the Azure reader gives them, so requests
 * share nothing; every arrival is 0 and the trace is marked
 * no_timestamps, so that the caller gives it arrivals at a rate
 * (rp_trace_set_rate(), kvslab-replay's --rate).  The fields are plain
 * numbers: a row is split at its commas, and a field with anything but
 * digits (and blanks around them) makes the row malformed.
 *
 * Locking: none; called from rp_trace_load() on its one thread.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace_int.h"

/* Field @col of [line, line + len) without surrounding blanks. */
static bool field(const char *line, size_t len, long col, const char **s, size_t *n)
{
	const char *p = line, *end = line + len, *q;
	long i;

	for (i = 0; i < col; i++) {
		q = memchr(p, ',', (size_t)(end - p));
		if (!q)
			return false;
		p = q + 1;
	}
	q = memchr(p, ',', (size_t)(end - p));
	if (!q)
		q = end;
	while (p < q && is_ws(*p))
		p++;
	while (q > p && is_ws(q[-1]))
		q--;
	*s = p;
	*n = (size_t)(q - p);
	return true;
}

static long count_fields(const char *line, size_t len)
{
	long n = 1;
	size_t i;

	for (i = 0; i < len; i++)
		n += line[i] == ',';
	return n;
}

bool rp_sharegpt_is_header(const char *line, size_t len)
{
	static const char key[] = "num_prefill_tokens";

	return len >= sizeof(key) - 1 && !memcmp(line, key, sizeof(key) - 1);
}

int rp_sharegpt_header(struct rp_loader *ld, const char *line, size_t len)
{
	long i, n = count_fields(line, len);

	ld->have_header = true;
	ld->col_ctx = ld->col_gen = -1;
	ld->ncols = n;
	for (i = 0; i < n; i++) {
		const char *s;
		size_t k;

		field(line, len, i, &s, &k);
		if (k == 18 && !memcmp(s, "num_prefill_tokens", 18))
			ld->col_ctx = i;
		else if (k == 17 && !memcmp(s, "num_decode_tokens", 17))
			ld->col_gen = i;
	}
	if (ld->col_ctx < 0 || ld->col_gen < 0) {
		ld->stop = 1;
		return rp_bad_line(ld, "ShareGPT header without num_prefill_tokens and "
				       "num_decode_tokens");
	}
	return 0;
}

static int num(const char *s, size_t n, uint64_t *v)
{
	uint64_t x = 0;
	size_t i;

	if (!n || n > 10)
		return -1;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(s[i] - '0');
	}
	if (x > LEN_MAX)
		return -1;
	*v = x;
	return 0;
}

int rp_sharegpt_line(struct rp_loader *ld, const char *line, size_t len)
{
	const char *s;
	size_t n;
	uint64_t in, out;
	uint32_t *blocks, nb;
	int rc;
	long nf = count_fields(line, len);

	if (nf != ld->ncols)
		return rp_bad_line(ld, "%ld field%s, the header has %ld", nf, nf == 1 ? "" : "s",
				   ld->ncols);
	field(line, len, ld->col_ctx, &s, &n);
	if (num(s, n, &in) || in < 1)
		return rp_bad_line(ld, "num_prefill_tokens: expected a whole number from 1 to %d",
				   LEN_MAX);
	field(line, len, ld->col_gen, &s, &n);
	if (num(s, n, &out))
		return rp_bad_line(ld, "num_decode_tokens: expected a whole number from 0 to %d",
				   LEN_MAX);
	rc = rp_fresh_blocks(ld, in, &blocks, &nb);
	if (rc <= 0)
		return rc;
	return rp_add_req(ld, 0, (uint32_t)in, (uint32_t)out, blocks, nb);
}

static double unif(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return ((double)(z >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
}

int rp_trace_set_rate(struct rp_trace *t, double rate, uint64_t seed)
{
	double now = 0;
	size_t i;

	if (!t || !(rate >= 0) || !isfinite(rate)) {
		errno = EINVAL;
		return -1;
	}
	for (i = 0; i < t->n; i++) {
		t->req[i].arrival_ms = now;
		if (rate > 0)
			now += -log(unif(&seed)) / rate * 1000.0;
	}
	return 0;
}
