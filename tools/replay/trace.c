/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/trace.c - request traces for kvslab-replay: the Mooncake
 * JSONL loader, the Azure LLM inference CSV loader, the seeded synthetic
 * generator, and the ideal (infinite-cache) prefix-hit ratio of a trace.
 *
 * What it owns.  A struct rp_trace: one array of requests, each with its
 * own malloc'ed array of block ids (rp_trace_free() frees both).  Every
 * format ends in the same shape (see trace.h): an arrival in ms from the
 * first request, the input and output lengths, and the ids of the input's
 * 512-token blocks, the last of which may be partial.
 *
 * Reading.  Both loaders read the file a line at a time with getline(), so
 * a line may be as long as memory allows and may hold NUL bytes (which
 * make it malformed).  The JSON reader is a small recursive-descent parser
 * over one line (pointer and length, never relying on a terminating NUL):
 * keys in any order, whitespace anywhere, unknown keys skipped (nesting
 * bounded, so no input can exhaust the stack), duplicates of the four keys
 * we use rejected.  A line that fails any check is reported on the caller's
 * stream as "PATH:LINE: what" and skipped, or ends the load with EINVAL
 * when the caller asked to stop on errors.  Blank lines (only white space)
 * are skipped silently.  Arrivals keep the trace's order; a request that
 * goes back in time is kept with the previous arrival, so that arrivals
 * never decrease.
 *
 * The Azure CSV has no prefix data, so each request gets fresh block ids
 * from t->next_block and requests share nothing.  Its timestamps are civil
 * date and time without a zone; they are turned into (day number,
 * nanosecond of day) pairs so that differences stay exact to the ns,
 * whatever the year.
 *
 * The generator uses splitmix64 only (no libc rand), so a seed gives the
 * same integers everywhere; lengths and gaps go through libm's log, exp,
 * sqrt and cos, whose last-ulp differences between libms would only show
 * when a draw lands within an ulp of a rounding boundary.  Shared prefixes
 * are drawn Zipf(s = 1) over the pool, as a few system prompts and
 * templates dominate real traffic.
 *
 * Locking: none.  A trace is built by one thread and then only read;
 * every function here is MT-Safe on distinct traces, and the read-only
 * ones (rp_req_input, rp_trace_ideal_hit) on a shared one.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "trace.h"

/* Lengths stay within int32, since the simulator indexes token arrays with it. */
#define LEN_MAX INT32_MAX
/* Unknown JSON values nested deeper than this are refused, not recursed into. */
#define JSON_DEPTH 32
/* Longest number text we convert; longer is refused rather than truncated. */
#define NUM_MAX 64

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

/* A small, busy workload: 2000 requests at 4/s, half of each input shared. */
void rp_synth_defaults(struct rp_synth_opts *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->seed = 1;
	o->requests = 2000;
	o->rate = 4.0;
	o->input_mean = 2048;
	o->input_max = 16384;
	o->output_mean = 256;
	o->output_max = 2048;
	o->shared_ratio = 0.5;
	o->prefixes = 16;
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

struct loader {
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
	/* Azure header: column indexes (-1 until found) and count. */
	bool have_header;
	long col_ts, col_ctx, col_gen, ncols;
};

/*
 * Report the current line as malformed.  Returns -1 (with errno EINVAL)
 * when the load must stop, 0 when the line is just skipped.
 */
__attribute__((format(printf, 2, 3)))
static int bad_line(struct loader *ld, const char *fmt, ...)
{
	va_list ap;

	ld->t->malformed++;
	if (ld->errs) {
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

/*
 * Append a request; takes @blocks (freed on failure).  The arrival is
 * clamped to the previous one so that a replay can walk arrivals in order.
 */
static int add_req(struct loader *ld, double arrival, uint32_t in, uint32_t out,
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

static inline bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* ------------------------------------------------------------ JSON lines */

/* A cursor over one line.  @err is set on the first error and sticks. */
struct jcur {
	const char *p, *beg, *end;
	const char *err;
	char msg[96];
};

__attribute__((format(printf, 2, 3)))
static int jfail(struct jcur *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->err) {
		va_start(ap, fmt);
		vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
		va_end(ap);
		c->err = c->msg;
	}
	return -1;
}

/* The column of the cursor (1-based), or "end of line" where there is none. */
static int jwhere(struct jcur *c, const char *what)
{
	if (c->p >= c->end)
		return jfail(c, "unexpected end of line (truncated?), expected %s", what);
	return jfail(c, "expected %s at column %ld", what, (long)(c->p - c->beg) + 1);
}

static void jws(struct jcur *c)
{
	while (c->p < c->end && is_ws(*c->p))
		c->p++;
}

/* Scan a JSON string; its raw content (escapes not decoded) in @s, @n. */
static int jstring(struct jcur *c, const char **s, size_t *n)
{
	const char *q;

	if (c->p >= c->end || *c->p != '"')
		return jwhere(c, "'\"'");
	q = ++c->p;
	while (c->p < c->end && *c->p != '"') {
		if ((unsigned char)*c->p < 0x20)
			return jfail(c, "control character in string at column %ld",
				     (long)(c->p - c->beg) + 1);
		if (*c->p == '\\') {
			c->p++;
			if (c->p >= c->end)
				break;
		}
		c->p++;
	}
	if (c->p >= c->end)
		return jfail(c, "unterminated string (truncated line?)");
	*s = q;
	*n = (size_t)(c->p - q);
	c->p++;
	return 0;
}

/*
 * Scan a number by the JSON grammar (-?int frac? exp?) and leave its text
 * in @s, @n; @integral tells whether it has neither fraction nor exponent.
 */
static int jnumber(struct jcur *c, const char **s, size_t *n, bool *integral)
{
	const char *q = c->p, *d;

	*integral = true;
	if (c->p < c->end && *c->p == '-')
		c->p++;
	d = c->p;
	while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
		c->p++;
	if (c->p == d) {
		c->p = q;
		return jwhere(c, "a number");
	}
	if (*d == '0' && c->p - d > 1)
		return jfail(c, "number with a leading zero at column %ld", (long)(d - c->beg) + 1);
	if (c->p < c->end && *c->p == '.') {
		*integral = false;
		d = ++c->p;
		while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
			c->p++;
		if (c->p == d)
			return jwhere(c, "a digit after '.'");
	}
	if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
		*integral = false;
		c->p++;
		if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
			c->p++;
		d = c->p;
		while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
			c->p++;
		if (c->p == d)
			return jwhere(c, "a digit in the exponent");
	}
	*s = q;
	*n = (size_t)(c->p - q);
	return 0;
}

/*
 * An integer value in [0, @max] for field @what.  Digits are accumulated
 * with saturation, so any number of them is safe.
 */
static int jint(struct jcur *c, const char *what, uint64_t max, uint64_t *v)
{
	const char *s;
	size_t n, i;
	bool integral;
	uint64_t x = 0;

	if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9')))
		return c->p >= c->end ? jwhere(c, "a number") : jfail(c, "%s: expected a number", what);
	if (jnumber(c, &s, &n, &integral))
		return -1;
	if (!integral)
		return jfail(c, "%s: not an integer (%.*s)", what, (int)(n < 24 ? n : 24), s);
	if (*s == '-') {
		for (i = 1; i < n && s[i] == '0'; i++)
			;
		if (i < n)
			return jfail(c, "%s: negative (%.*s)", what, (int)(n < 24 ? n : 24), s);
		*v = 0;			/* "-0" */
		return 0;
	}
	for (i = 0; i < n; i++) {
		x = x * 10 + (uint64_t)(s[i] - '0');
		if (x > max)
			return jfail(c, "%s: out of range (%.*s%s)", what, (int)(n < 24 ? n : 24), s,
				     n > 24 ? "..." : "");
	}
	*v = x;
	return 0;
}

/* A finite number, integer or not, for field @what. */
static int jdouble(struct jcur *c, const char *what, double *v)
{
	char buf[NUM_MAX + 1];
	const char *s;
	size_t n;
	bool integral;
	char *e;

	if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9')))
		return c->p >= c->end ? jwhere(c, "a number") : jfail(c, "%s: expected a number", what);
	if (jnumber(c, &s, &n, &integral))
		return -1;
	if (n > NUM_MAX)
		return jfail(c, "%s: number too long (%zu characters)", what, n);
	/* A bounded, NUL-terminated copy: strtod must not read past the token. */
	memcpy(buf, s, n);
	buf[n] = 0;
	errno = 0;
	*v = strtod(buf, &e);
	if (e != buf + n || !isfinite(*v))
		return jfail(c, "%s: out of range (%s)", what, buf);
	return 0;
}

/* Skip any JSON value, for keys we do not use. */
static int jskip(struct jcur *c, int depth)
{
	const char *s;
	size_t n;
	bool integral;
	static const char *const lit[] = {"true", "false", "null"};
	unsigned int i;

	if (depth > JSON_DEPTH)
		return jfail(c, "value nested too deep");
	jws(c);
	if (c->p >= c->end)
		return jwhere(c, "a value");
	switch (*c->p) {
	case '"':
		return jstring(c, &s, &n);
	case '[':
	case '{': {
		char close = *c->p == '[' ? ']' : '}';

		c->p++;
		jws(c);
		if (c->p < c->end && *c->p == close) {
			c->p++;
			return 0;
		}
		for (;;) {
			if (close == '}') {
				jws(c);
				if (jstring(c, &s, &n))
					return -1;
				jws(c);
				if (c->p >= c->end || *c->p != ':')
					return jwhere(c, "':'");
				c->p++;
			}
			if (jskip(c, depth + 1))
				return -1;
			jws(c);
			if (c->p < c->end && *c->p == ',') {
				c->p++;
				continue;
			}
			if (c->p < c->end && *c->p == close) {
				c->p++;
				return 0;
			}
			return jwhere(c, close == ']' ? "',' or ']'" : "',' or '}'");
		}
	}
	default:
		if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))
			return jnumber(c, &s, &n, &integral);
		for (i = 0; i < sizeof(lit) / sizeof(lit[0]); i++) {
			size_t l = strlen(lit[i]);

			if ((size_t)(c->end - c->p) >= l && !memcmp(c->p, lit[i], l)) {
				c->p += l;
				return 0;
			}
		}
		return jwhere(c, "a value");
	}
}

/*
 * The hash_ids array; the ids in a malloc'ed array @ids of @n entries.
 * Returns 0, -1 for a malformed array, -2 (errno ENOMEM) to stop the load.
 */
static int jids(struct jcur *c, uint32_t **ids, uint32_t *n)
{
	uint32_t *v = NULL, cnt = 0, cap = 0;
	uint64_t x;

	*ids = NULL;
	*n = 0;
	if (c->p >= c->end || *c->p != '[')
		return c->p >= c->end ? jwhere(c, "'['") : jfail(c, "hash_ids: expected an array");
	c->p++;
	jws(c);
	if (c->p < c->end && *c->p == ']') {
		c->p++;
		return 0;
	}
	for (;;) {
		jws(c);
		if (jint(c, "hash_ids", (uint64_t)UINT32_MAX << 8, &x))
			goto fail;
		if (x >= RP_MAX_BLOCK_ID) {
			jfail(c, "hash_ids: id %llu not below %u", (unsigned long long)x,
			      (unsigned int)RP_MAX_BLOCK_ID);
			goto fail;
		}
		if (cnt == cap) {
			uint32_t *w;

			if (cap >= UINT32_MAX / 2) {
				jfail(c, "hash_ids: too many ids");
				goto fail;
			}
			cap = cap ? cap * 2 : 64;
			w = realloc(v, (size_t)cap * sizeof(*v));
			if (!w) {
				free(v);
				errno = ENOMEM;
				return -2;
			}
			v = w;
		}
		v[cnt++] = (uint32_t)x;
		jws(c);
		if (c->p < c->end && *c->p == ',') {
			c->p++;
			continue;
		}
		if (c->p < c->end && *c->p == ']') {
			c->p++;
			break;
		}
		jwhere(c, "',' or ']' in hash_ids");
		goto fail;
	}
	*ids = v;
	*n = cnt;
	return 0;
fail:
	free(v);
	return -1;
}

enum { K_TS, K_IN, K_OUT, K_IDS, K_N };
static const char *const jkeys[K_N] = {"timestamp", "input_length", "output_length", "hash_ids"};

/*
 * One Mooncake request.  Returns 0 (added or skipped), or -1 with errno
 * when the load must stop.
 */
static int mooncake_line(struct loader *ld, const char *line, size_t len)
{
	struct jcur c = {.p = line, .beg = line, .end = line + len};
	bool seen[K_N] = {false};
	double ts = 0;
	uint64_t in = 0, out = 0;
	uint32_t *ids = NULL, nids = 0;
	uint64_t need;
	double arrival;
	int k, rc;

	jws(&c);
	if (c.p >= c.end || *c.p != '{') {
		jfail(&c, "not a JSON object");
		goto bad;
	}
	c.p++;
	jws(&c);
	if (c.p < c.end && *c.p == '}') {
		c.p++;
		goto closed;
	}
	for (;;) {
		const char *key;
		size_t kn;

		jws(&c);
		if (jstring(&c, &key, &kn))
			goto bad;
		jws(&c);
		if (c.p >= c.end || *c.p != ':') {
			jwhere(&c, "':'");
			goto bad;
		}
		c.p++;
		jws(&c);
		for (k = 0; k < K_N; k++)
			if (strlen(jkeys[k]) == kn && !memcmp(jkeys[k], key, kn))
				break;
		if (k < K_N && seen[k]) {
			jfail(&c, "duplicate key \"%s\"", jkeys[k]);
			goto bad;
		}
		switch (k) {
		case K_TS:
			rc = jdouble(&c, "timestamp", &ts);
			break;
		case K_IN:
			rc = jint(&c, "input_length", LEN_MAX, &in);
			break;
		case K_OUT:
			rc = jint(&c, "output_length", LEN_MAX, &out);
			break;
		case K_IDS:
			rc = jids(&c, &ids, &nids);
			if (rc == -2)
				return -1;
			break;
		default:
			rc = jskip(&c, 1);
			break;
		}
		if (rc)
			goto bad;
		if (k < K_N)
			seen[k] = true;
		jws(&c);
		if (c.p < c.end && *c.p == ',') {
			c.p++;
			continue;
		}
		if (c.p < c.end && *c.p == '}') {
			c.p++;
			break;
		}
		jwhere(&c, "',' or '}'");
		goto bad;
	}
closed:
	jws(&c);
	if (c.p < c.end) {
		jfail(&c, "garbage after the object at column %ld", (long)(c.p - c.beg) + 1);
		goto bad;
	}
	for (k = 0; k < K_N; k++)
		if (!seen[k]) {
			jfail(&c, "missing key \"%s\"", jkeys[k]);
			goto bad;
		}
	if (in < 1) {
		jfail(&c, "input_length: must be at least 1");
		goto bad;
	}
	if (!nids) {
		jfail(&c, "hash_ids: empty");
		goto bad;
	}
	need = (in + RP_BLOCK - 1) / RP_BLOCK;
	if (nids != need) {
		jfail(&c, "hash_ids: %u ids, input_length %llu needs %llu", nids,
		      (unsigned long long)in, (unsigned long long)need);
		goto bad;
	}
	if (!ld->have_first) {
		ld->have_first = true;
		ld->first_ts = ts;
	}
	arrival = ts - ld->first_ts;
	if (!isfinite(arrival))
		arrival = ld->last_arrival;
	return add_req(ld, arrival, (uint32_t)in, (uint32_t)out, ids, nids);
bad:
	free(ids);
	return bad_line(ld, "%s", c.err ? c.err : "malformed line");
}

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
static int csv_header(struct loader *ld, const char *line, size_t len)
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
static int azure_line(struct loader *ld, const char *line, size_t len)
{
	const char *p = line, *end = line + len, *why = NULL;
	struct field f, fts = {0}, fctx = {0}, fgen = {0};
	bool more = true;
	long i = 0;
	int rc;
	int64_t day, nsod;
	uint64_t ctx, gen, nb, k;
	uint32_t *blocks;
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
		return bad_line(ld, "%s", why);
	if (i != ld->ncols)
		return bad_line(ld, "%ld field%s, the header has %ld", i, i == 1 ? "" : "s",
				ld->ncols);
	if (parse_time(&fts, &day, &nsod))
		return bad_line(ld, "TIMESTAMP: bad date and time \"%.*s\"",
				(int)(fts.n < 40 ? fts.n : 40), fts.s);
	if (csv_uint(&fctx, &ctx, &why))
		return bad_line(ld, "ContextTokens: %s", why);
	if (ctx < 1)
		return bad_line(ld, "ContextTokens: must be at least 1");
	if (csv_uint(&fgen, &gen, &why))
		return bad_line(ld, "GeneratedTokens: %s", why);
	nb = (ctx + RP_BLOCK - 1) / RP_BLOCK;
	if ((uint64_t)ld->t->next_block + nb > RP_MAX_BLOCK_ID)
		return bad_line(ld, "block ids exhausted (%u in use, %llu more needed)",
				ld->t->next_block, (unsigned long long)nb);
	blocks = malloc(nb * sizeof(*blocks));
	if (!blocks) {
		errno = ENOMEM;
		return -1;
	}
	for (k = 0; k < nb; k++)
		blocks[k] = ld->t->next_block + (uint32_t)k;
	ld->t->next_block += (uint32_t)nb;
	if (!ld->have_first) {
		ld->have_first = true;
		ld->first_day = day;
		ld->first_ns = nsod;
	}
	arrival = (double)(day - ld->first_day) * 86400000.0 + (double)(nsod - ld->first_ns) / 1e6;
	return add_req(ld, arrival, (uint32_t)ctx, (uint32_t)gen, blocks, (uint32_t)nb);
}

/* ------------------------------------------------------------------ load */

/* Dispatch one line by format; the format is fixed by the first non-blank one. */
static int load_line(struct loader *ld, char *line, size_t len)
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
		return bad_line(ld, "NUL byte at column %zu",
				(size_t)((char *)memchr(line, 0, len) - line) + 1);
	if (ld->fmt == RP_FMT_AUTO)
		ld->fmt = line[i] == '{' ? RP_FMT_MOONCAKE : RP_FMT_AZURE;
	if (ld->fmt == RP_FMT_MOONCAKE)
		return mooncake_line(ld, line, len);
	if (!ld->have_header)
		return csv_header(ld, line, len);
	return azure_line(ld, line, len);
}

/*
 * Read line by line, so that a bad line costs only itself; on any failure
 * the partial trace is freed and @t left empty.
 */
int rp_trace_load(const char *path, enum rp_format fmt, int stop_on_error, FILE *errs,
		  struct rp_trace *t)
{
	struct loader ld;
	FILE *f;
	char *buf = NULL;
	size_t bufcap = 0;
	ssize_t len;
	int err = 0;

	if (t)
		memset(t, 0, sizeof(*t));
	if (!path || !t || (fmt != RP_FMT_AUTO && fmt != RP_FMT_MOONCAKE && fmt != RP_FMT_AZURE)) {
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
	if (!err && !t->n)
		err = EINVAL;		/* nothing to replay */
	if (err) {
		rp_trace_free(t);
		errno = err;
		return -1;
	}
	if (ld.fmt == RP_FMT_MOONCAKE)
		t->next_block = ld.any_block ? ld.max_id + 1 : 0;
	return 0;
}

/* ------------------------------------------------------------- generator */

/* splitmix64 (Steele, Lea, Flood): a full-period 64-bit generator, one add a draw. */
static uint64_t sm64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1): never 0, so its log is finite. */
static double unif(uint64_t *s)
{
	return ((double)(sm64(s) >> 11) + 0.5) * 0x1p-53;
}

/* Standard normal by Box-Muller (one of the pair; simplicity over speed). */
static double gauss(uint64_t *s)
{
	double u1 = unif(s), u2 = unif(s);

	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

#define SYNTH_SIGMA 0.8

/*
 * A lognormal length with mean @mean: mu = ln(mean) - sigma^2 / 2 makes
 * E[exp(mu + sigma Z)] = mean; then rounded and clipped to [1, @max].
 */
static uint32_t draw_len(uint64_t *s, uint32_t mean, uint32_t max)
{
	double mu = log((double)mean) - SYNTH_SIGMA * SYNTH_SIGMA / 2;
	double x = floor(exp(mu + SYNTH_SIGMA * gauss(s)) + 0.5);

	if (!(x >= 1))
		return 1;
	if (x >= (double)max)
		return max;
	return (uint32_t)x;
}

/*
 * Prefix p's block k is id p * pblocks + k, fixed before the first request,
 * so the pool is the same whatever the order of draws; fresh ids follow.
 */
int rp_trace_synth(const struct rp_synth_opts *o, struct rp_trace *t)
{
	uint64_t s, pool_ids, next;
	uint32_t pblocks = 0, i, k;
	double *cdf = NULL, now = 0;
	size_t r;
	int err;

	if (t)
		memset(t, 0, sizeof(*t));
	if (!o || !t || !o->requests || !(o->rate >= 0) || !isfinite(o->rate) ||
	    !o->input_mean || !o->input_max || o->input_mean > o->input_max ||
	    !o->output_mean || !o->output_max || o->output_mean > o->output_max ||
	    o->input_max > LEN_MAX || o->output_max > LEN_MAX ||
	    !(o->shared_ratio >= 0 && o->shared_ratio <= 1) ||
	    (o->shared_ratio > 0 && !o->prefixes)) {
		errno = EINVAL;
		return -1;
	}
	/* Each prefix holds the full blocks of the longest shared part. */
	if (o->shared_ratio > 0)
		pblocks = (uint32_t)floor(o->shared_ratio * o->input_max) / RP_BLOCK;
	pool_ids = (uint64_t)pblocks * (pblocks ? o->prefixes : 0);
	if (pool_ids > RP_MAX_BLOCK_ID || o->requests > SIZE_MAX / sizeof(*t->req)) {
		errno = ENOMEM;
		return -1;
	}
	t->req = calloc(o->requests, sizeof(*t->req));
	/* pool_ids <= RP_MAX_BLOCK_ID bounds prefixes too, so no overflow here. */
	if (pblocks)
		cdf = malloc(o->prefixes * sizeof(*cdf));
	if (!t->req || (pblocks && !cdf)) {
		err = ENOMEM;
		goto fail;
	}
	/* Zipf(1): prefix p is drawn with weight 1 / (p + 1). */
	if (pblocks) {
		double sum = 0;

		for (i = 0; i < o->prefixes; i++)
			cdf[i] = sum += 1.0 / (i + 1);
		for (i = 0; i < o->prefixes; i++)
			cdf[i] /= sum;
		cdf[o->prefixes - 1] = 1.0;
	}
	s = o->seed;
	next = pool_ids;		/* prefix p's block k is p * pblocks + k */
	for (r = 0; r < o->requests; r++) {
		struct rp_req *q = &t->req[r];
		uint32_t shared = 0, prefix = 0;	/* shared: blocks from the prefix */

		if (o->rate > 0)
			now += -log(unif(&s)) / o->rate * 1000.0;
		if (!isfinite(now)) {
			err = EINVAL;	/* a rate so small that time overflows */
			goto fail;
		}
		q->arrival_ms = now;
		q->input_len = draw_len(&s, o->input_mean, o->input_max);
		q->output_len = draw_len(&s, o->output_mean, o->output_max);
		q->nblocks = (q->input_len + RP_BLOCK - 1) / RP_BLOCK;
		if (pblocks) {
			double u = unif(&s);
			uint32_t lo = 0, hi = o->prefixes - 1;

			while (lo < hi) {	/* first p with cdf[p] >= u */
				uint32_t mid = lo + (hi - lo) / 2;

				if (cdf[mid] >= u)
					hi = mid;
				else
					lo = mid + 1;
			}
			prefix = lo;
			/* round_down(ratio * input_len, 512) tokens, in blocks */
			shared = (uint32_t)floor(o->shared_ratio * q->input_len) / RP_BLOCK;
			if (shared > pblocks)
				shared = pblocks;	/* cannot happen; belt and braces */
		}
		if (next + (q->nblocks - shared) > RP_MAX_BLOCK_ID) {
			err = ENOMEM;
			goto fail;
		}
		q->blocks = malloc((size_t)q->nblocks * sizeof(*q->blocks));
		if (!q->blocks) {
			err = ENOMEM;
			goto fail;
		}
		t->n = r + 1;
		for (k = 0; k < shared; k++)
			q->blocks[k] = prefix * pblocks + k;
		for (; k < q->nblocks; k++)
			q->blocks[k] = (uint32_t)next++;
		if (q->input_len > t->max_input)
			t->max_input = q->input_len;
		if (q->output_len > t->max_output)
			t->max_output = q->output_len;
	}
	t->next_block = (uint32_t)next;
	free(cdf);
	return 0;
fail:
	free(cdf);
	rp_trace_free(t);
	errno = err;
	return -1;
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
