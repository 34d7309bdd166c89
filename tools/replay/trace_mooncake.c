/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/trace_mooncake.c - the Mooncake JSONL reader: one request
 * a line, {"timestamp": ms, "input_length": n, "output_length": n,
 * "hash_ids": [id, ...]}.
 *
 * The JSON reader is a small recursive-descent parser over one line
 * (pointer and length, never relying on a terminating NUL): keys in any
 * order, whitespace anywhere, unknown keys skipped (nesting bounded, so no
 * input can exhaust the stack), duplicates of the four keys we use
 * rejected.  A line that fails any check goes to rp_bad_line() with what
 * was wrong, where, and the key whose value it was.  Arrivals are the
 * timestamps less the first one.
 *
 * Hash ids.  The trace's ids are chained hashes, any 64-bit value; only
 * their equality matters.  Each distinct id gets a dense id, 0, 1, 2, ...
 * in the order first seen (an open-addressing table in the loader), so
 * that token ids (dense id * 512 + j) fit an int32 whatever the trace
 * spells; RP_MAX_BLOCK_ID distinct ids at most.  Ids are mapped only once
 * the whole line is found good, so a skipped line takes none.
 *
 * Locking: none; called from rp_trace_load() on its one thread.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "trace_int.h"

/* Unknown JSON values nested deeper than this are refused, not recursed into. */
#define JSON_DEPTH 32
/* Longest number text we convert; longer is refused rather than truncated. */
#define NUM_MAX 64

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
 * An integer value in [0, @max] for field @what.  Each digit is checked
 * before it is added, so any number of them is safe.
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
		uint64_t d = (uint64_t)(s[i] - '0');

		/* Checked before the step, so that max may be UINT64_MAX. */
		if (x > (max - d) / 10)
			return jfail(c, "%s: out of range (%.*s%s)", what, (int)(n < 24 ? n : 24), s,
				     n > 24 ? "..." : "");
		x = x * 10 + d;
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
 * The hash_ids array, as the trace spells the ids (any 64-bit value), in a
 * malloc'ed array @ids of @n entries.  Returns 0, -1 for a malformed
 * array, -2 (errno ENOMEM) to stop the load.
 */
static int jids(struct jcur *c, uint64_t **ids, uint32_t *n)
{
	uint64_t *v = NULL, x;
	uint32_t cnt = 0, cap = 0;

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
		if (jint(c, "hash_ids", UINT64_MAX, &x))
			goto fail;
		if (cnt == cap) {
			uint64_t *w;

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
		v[cnt++] = x;
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

/* ------------------------------------------------------------ the id map */

/* splitmix64's finaliser: hash ids may be anything, sequential or not. */
static inline size_t id_hash(uint64_t k, size_t mask)
{
	k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
	k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
	return (size_t)(k ^ (k >> 31)) & mask;
}

/* Double the table (or make the first); -1 with errno ENOMEM. */
static int id_grow(struct rp_loader *ld)
{
	size_t cap = ld->id_cap ? ld->id_cap * 2 : 1024, i, h;
	uint64_t *key;
	uint32_t *val;

	if (cap > SIZE_MAX / sizeof(*key) || !(key = malloc(cap * sizeof(*key))))
		goto nomem;
	if (!(val = calloc(cap, sizeof(*val)))) {
		free(key);
		goto nomem;
	}
	for (i = 0; i < ld->id_cap; i++) {
		if (!ld->id_val[i])
			continue;
		for (h = id_hash(ld->id_key[i], cap - 1); val[h]; h = (h + 1) & (cap - 1))
			;
		key[h] = ld->id_key[i];
		val[h] = ld->id_val[i];
	}
	free(ld->id_key);
	free(ld->id_val);
	ld->id_key = key;
	ld->id_val = val;
	ld->id_cap = cap;
	return 0;
nomem:
	errno = ENOMEM;
	return -1;
}

/*
 * The dense id of trace id @k, a new one (the next in order) when @k is
 * new.  Returns 0, 1 when the dense ids are exhausted (RP_MAX_BLOCK_ID of
 * them: token ids must fit an int32), -1 with errno ENOMEM.
 */
static int id_map(struct rp_loader *ld, uint64_t k, uint32_t *dense)
{
	size_t h;

	if ((ld->id_n + 1) * 2 > ld->id_cap && id_grow(ld) < 0)
		return -1;
	for (h = id_hash(k, ld->id_cap - 1); ld->id_val[h]; h = (h + 1) & (ld->id_cap - 1))
		if (ld->id_key[h] == k) {
			*dense = ld->id_val[h] - 1;
			return 0;
		}
	if (ld->id_n >= RP_MAX_BLOCK_ID)
		return 1;
	ld->id_key[h] = k;
	ld->id_val[h] = (uint32_t)++ld->id_n;
	*dense = (uint32_t)(ld->id_n - 1);
	return 0;
}

void rp_mooncake_done(struct rp_loader *ld)
{
	free(ld->id_key);
	free(ld->id_val);
	ld->id_key = NULL;
	ld->id_val = NULL;
	ld->id_cap = ld->id_n = 0;
}

enum { K_TS, K_IN, K_OUT, K_IDS, K_N };
static const char *const jkeys[K_N] = {"timestamp", "input_length", "output_length", "hash_ids"};

/*
 * One Mooncake request.  Returns 0 (added or skipped), or -1 with errno
 * when the load must stop.
 */
int rp_mooncake_line(struct rp_loader *ld, const char *line, size_t len)
{
	struct jcur c = {.p = line, .beg = line, .end = line + len};
	bool seen[K_N] = {false};
	double ts = 0;
	uint64_t in = 0, out = 0;
	uint64_t *ids = NULL;
	uint32_t *dense = NULL, nids = 0, i;
	uint64_t need;
	double arrival;
	int k, rc;
	/* The key whose value is being read, to name it in an error. */
	char field[48] = "";

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

		field[0] = 0;
		jws(&c);
		if (jstring(&c, &key, &kn))
			goto bad;
		snprintf(field, sizeof(field), "%.*s", (int)(kn < 40 ? kn : 40), key);
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
	field[0] = 0;
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
	/* Only a line found good takes dense ids, so a bad one leaves no gap. */
	dense = malloc((size_t)nids * sizeof(*dense));
	if (!dense) {
		free(ids);
		errno = ENOMEM;
		return -1;
	}
	for (i = 0; i < nids; i++) {
		rc = id_map(ld, ids[i], &dense[i]);
		if (rc < 0) {
			free(ids);
			free(dense);
			return -1;
		}
		if (rc > 0) {
			jfail(&c, "hash_ids: more than %u distinct ids in the trace (id %llu)",
			      (unsigned int)RP_MAX_BLOCK_ID, (unsigned long long)ids[i]);
			free(dense);
			goto bad;
		}
	}
	free(ids);
	if (!ld->have_first) {
		ld->have_first = true;
		ld->first_ts = ts;
	}
	arrival = ts - ld->first_ts;
	if (!isfinite(arrival))
		arrival = ld->last_arrival;
	return rp_add_req(ld, arrival, (uint32_t)in, (uint32_t)out, dense, nids);
bad:
	free(ids);
	/* Name the field, unless the message does already. */
	if (field[0] && c.err && strncmp(c.err, field, strlen(field)) != 0)
		return rp_bad_line(ld, "%s: %s", field, c.err);
	return rp_bad_line(ld, "%s", c.err ? c.err : "malformed line");
}
