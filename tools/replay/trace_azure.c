/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/trace_azure.c - the Azure LLM inference CSV reader
 * (TIMESTAMP, ContextTokens, GeneratedTokens, columns found by the header
 * in any order, other columns ignored).
 *
 * The Azure CSV has no prefix data, so each request gets fresh block ids
 * from t->next_block and requests share nothing.  Its timestamps are civil
 * date and time without a zone; they are turned into (day number,
 * nanosecond of day) pairs so that differences stay exact to the ns,
 * whatever the year.
 *
 * Fields are split by a small RFC 4180 reader (quotes, doubled quotes,
 * blanks around fields); a bad header ends the load, a bad row goes to
 * rp_bad_line() naming the column.
 *
 * Locking: none; called from rp_trace_load() on its one thread.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "trace_int.h"

/* -------------------------------------------------------------- CSV lines */

/* One CSV field: its text with quotes and surrounding blanks removed. */
struct field {
	const char *s;
	size_t n;
	bool quoted;			/* "" inside must be read as " (we never need to) */
};

/*
 * Split the next field off [*p, end).  Returns 1 with a field, 0 at the end
 * of the line, -1 on bad quoting (message in @why).
 */
static int csv_next(const char **p, const char *end, bool *more, struct field *f,
		    const char **why)
{
	const char *q = *p;

	if (!*more)
		return 0;
	while (q < end && (*q == ' ' || *q == '\t'))
		q++;
	f->quoted = q < end && *q == '"';
	if (f->quoted) {
		f->s = ++q;
		for (;;) {
			if (q >= end) {
				*why = "unterminated quote";
				return -1;
			}
			if (*q == '"') {
				if (q + 1 < end && q[1] == '"') {
					q += 2;
					continue;
				}
				break;
			}
			q++;
		}
		f->n = (size_t)(q - f->s);
		q++;
		while (q < end && (*q == ' ' || *q == '\t'))
			q++;
		if (q < end && *q != ',') {
			*why = "characters after a closing quote";
			return -1;
		}
	} else {
		f->s = q;
		while (q < end && *q != ',')
			q++;
		f->n = (size_t)(q - f->s);
		while (f->n && (f->s[f->n - 1] == ' ' || f->s[f->n - 1] == '\t'))
			f->n--;
	}
	*more = q < end;		/* a ',' follows */
	*p = q < end ? q + 1 : q;
	return 1;
}

static bool field_is(const struct field *f, const char *name)
{
	return strlen(name) == f->n && !strncasecmp(f->s, name, f->n);
}

/* The header: find our three columns.  A bad header ends the load. */
int rp_azure_header(struct rp_loader *ld, const char *line, size_t len)
{
	static const char *const names[3] = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"};
	long *cols[3] = {&ld->col_ts, &ld->col_ctx, &ld->col_gen};
	const char *p = line, *end = line + len, *why = NULL;
	bool more = true;
	struct field f;
	long i = 0;
	int k, rc;

	ld->col_ts = ld->col_ctx = ld->col_gen = -1;
	while ((rc = csv_next(&p, end, &more, &f, &why)) == 1) {
		for (k = 0; k < 3; k++)
			if (field_is(&f, names[k])) {
				if (*cols[k] >= 0) {
					why = "duplicate column";
					goto bad;
				}
				*cols[k] = i;
			}
		i++;
	}
	if (rc < 0)
		goto bad;
	ld->ncols = i;
	for (k = 0; k < 3; k++)
		if (*cols[k] < 0) {
			ld->t->malformed++;
			if (ld->errs)
				fprintf(ld->errs, "%s:%lu: CSV header: missing column %s\n", ld->path,
					ld->line, names[k]);
			errno = EINVAL;
			return -1;
		}
	ld->have_header = true;
	return 0;
bad:
	ld->t->malformed++;
	if (ld->errs)
		fprintf(ld->errs, "%s:%lu: CSV header: %s\n", ld->path, ld->line, why);
	errno = EINVAL;
	return -1;
}

static bool is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned int m, unsigned int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* @n digits at @s as a number, or -1. */
static long digits(const char *s, const char *end, int n)
{
	long v = 0;
	int i;

	if (end - s < n)
		return -1;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/*
 * "YYYY-MM-DD HH:MM:SS[.fraction]" (or 'T' between, optional 'Z') into a
 * day number and a nanosecond of the day.  Digits past the ns are ignored.
 */
static int parse_time(const struct field *f, int64_t *day, int64_t *nsod)
{
	static const unsigned char mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	const char *s = f->s, *end = f->s + f->n;
	long y, mo, d, h, mi, sec;
	int64_t ns = 0, scale = 100000000;

	if ((y = digits(s, end, 4)) < 0 || s + 4 >= end || s[4] != '-' ||
	    (mo = digits(s + 5, end, 2)) < 0 || s + 7 >= end || s[7] != '-' ||
	    (d = digits(s + 8, end, 2)) < 0 || s + 10 >= end || (s[10] != ' ' && s[10] != 'T') ||
	    (h = digits(s + 11, end, 2)) < 0 || s + 13 >= end || s[13] != ':' ||
	    (mi = digits(s + 14, end, 2)) < 0 || s + 16 >= end || s[16] != ':' ||
	    (sec = digits(s + 17, end, 2)) < 0)
		return -1;
	if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 60 ||
	    d > mdays[mo - 1] + (mo == 2 && is_leap(y)))
		return -1;
	s += 19;
	if (s < end && *s == '.') {
		if (++s >= end || *s < '0' || *s > '9')
			return -1;
		for (; s < end && *s >= '0' && *s <= '9'; s++) {
			ns += (*s - '0') * scale;
			scale /= 10;
		}
	}
	if (s < end && *s == 'Z')
		s++;
	if (s != end)
		return -1;
	*day = days_from_civil(y, (unsigned int)mo, (unsigned int)d);
	*nsod = ((int64_t)h * 3600 + mi * 60 + sec) * 1000000000 + ns;
	return 0;
}

/* A non-negative integer field, at most LEN_MAX; a message in @why on failure. */
static int csv_uint(const struct field *f, uint64_t *v, const char **why)
{
	size_t i;
	uint64_t x = 0;

	if (!f->n) {
		*why = "empty";
		return -1;
	}
	if (f->s[0] == '-') {
		for (i = 1; i < f->n && f->s[i] >= '0' && f->s[i] <= '9'; i++)
			;
		*why = i == f->n && i > 1 ? "negative" : "not an integer";
		return -1;
	}
	for (i = f->s[0] == '+'; i < f->n; i++) {
		if (f->s[i] < '0' || f->s[i] > '9') {
			*why = "not an integer";
			return -1;
		}
		x = x * 10 + (uint64_t)(f->s[i] - '0');
		if (x > LEN_MAX) {
			*why = "out of range";
			return -1;
		}
	}
	if (i == (size_t)(f->s[0] == '+')) {
		*why = "not an integer";
		return -1;
	}
	*v = x;
	return 0;
}

/* One Azure request: fresh block ids for its input. */
int rp_azure_line(struct rp_loader *ld, const char *line, size_t len)
{
	const char *p = line, *end = line + len, *why = NULL;
	struct field f, fts = {0}, fctx = {0}, fgen = {0};
	bool more = true;
	long i = 0;
	int rc;
	int64_t day, nsod;
	uint64_t ctx, gen;
	uint32_t *blocks, nb;
	double arrival;

	while ((rc = csv_next(&p, end, &more, &f, &why)) == 1) {
		if (i == ld->col_ts)
			fts = f;
		else if (i == ld->col_ctx)
			fctx = f;
		else if (i == ld->col_gen)
			fgen = f;
		i++;
	}
	if (rc < 0)
		return rp_bad_line(ld, "%s", why);
	if (i != ld->ncols)
		return rp_bad_line(ld, "%ld field%s, the header has %ld", i, i == 1 ? "" : "s",
				ld->ncols);
	if (parse_time(&fts, &day, &nsod))
		return rp_bad_line(ld, "TIMESTAMP: bad date and time \"%.*s\"",
				(int)(fts.n < 40 ? fts.n : 40), fts.s);
	if (csv_uint(&fctx, &ctx, &why))
		return rp_bad_line(ld, "ContextTokens: %s", why);
	if (ctx < 1)
		return rp_bad_line(ld, "ContextTokens: must be at least 1");
	if (csv_uint(&fgen, &gen, &why))
		return rp_bad_line(ld, "GeneratedTokens: %s", why);
	rc = rp_fresh_blocks(ld, ctx, &blocks, &nb);
	if (rc <= 0)
		return rc;
	if (!ld->have_first) {
		ld->have_first = true;
		ld->first_day = day;
		ld->first_ns = nsod;
	}
	arrival = (double)(day - ld->first_day) * 86400000.0 + (double)(nsod - ld->first_ns) / 1e6;
	return rp_add_req(ld, arrival, (uint32_t)ctx, (uint32_t)gen, blocks, nb);
}
