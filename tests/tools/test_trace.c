/* SPDX-License-Identifier: MIT */
/*
 * tests/tools/test_trace.c - kvslab-replay's traces: the Mooncake and Azure
 * loaders (good input, every kind of malformed line, format detection), the
 * synthetic generator, and the ideal hit ratio, on hand-made input and on
 * the public traces under $KVSLAB_SHARED/traces when they are there.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "trace.h"

/* ------------------------------------------------------------- helpers */

/* Write @len bytes to a new temporary file; its path, to give to drop_tmp(). */
static char *write_tmp(const void *data, size_t len)
{
	const char *dir = getenv("TMPDIR");
	char *path;
	int fd;

	ck_assert_int_ne(asprintf(&path, "%s/kvslab-trace-XXXXXX", dir && *dir ? dir : "/tmp"), -1);
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
	return path;
}

static char *write_str(const char *s)
{
	return write_tmp(s, strlen(s));
}

static void drop_tmp(char *path)
{
	unlink(path);
	free(path);
}

/* An in-memory stream, for the loader's reports and for building input. */
struct mem {
	FILE *f;
	char *buf;
	size_t len;
};

static void mem_open(struct mem *m)
{
	m->buf = NULL;
	m->len = 0;
	m->f = open_memstream(&m->buf, &m->len);
	ck_assert_ptr_nonnull(m->f);
}

/* Close the stream; the text stays in m->buf until mem_free(). */
static void mem_close(struct mem *m)
{
	ck_assert_int_eq(fclose(m->f), 0);
	m->f = NULL;
}

static void mem_free(struct mem *m)
{
	free(m->buf);
	m->buf = NULL;
}

static size_t count_lines(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Assert that @errs holds a report "PATH:LINE: ...@what..." on one line. */
static void assert_report(const char *errs, const char *path, unsigned int line, const char *what)
{
	char *head;
	const char *p, *eol;

	ck_assert_int_ne(asprintf(&head, "%s:%u: ", path, line), -1);
	for (p = errs; (p = strstr(p, head)); p++) {
		if (p != errs && p[-1] != '\n')
			continue;
		eol = strchr(p, '\n');
		ck_assert_ptr_nonnull(eol);
		if (memmem(p, (size_t)(eol - p), what, strlen(what)))
			break;
	}
	ck_assert_msg(p, "no report \"%s...%s\" in:\n%s", head, what, errs);
	free(head);
}

static const char *shared_path(const char *name, char *buf, size_t size)
{
	const char *dir = getenv("KVSLAB_SHARED");

	snprintf(buf, size, "%s/traces/%s", dir && *dir ? dir : "../shared", name);
	return buf;
}

/* ------------------------------------------------------------ Mooncake */

START_TEST(test_mooncake_good)
{
	/* Keys in any order, white space anywhere, a float timestamp, an
	 * unknown key with a nested value, CRLF, blank lines, and a last line
	 * without a newline whose timestamp goes back in time. */
	static const char text[] =
		"{\"timestamp\": 1000, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [3, 9]}\n"
		"\n"
		"   \t\r\n"
		"{ \"hash_ids\" : [ 3 , 10 , 11 ] ,\"output_length\":0,\"input_length\":1536,"
		" \"timestamp\":1500.5 , \"extra\": {\"a\": [1, -2.5e3, {\"b\": null}], \"s\": \"x\\\"y\"},"
		" \"ok\": true}\r\n"
		"\t{\"input_length\": 1, \"output_length\": 7, \"timestamp\": 1.2e3, \"hash_ids\": [42]}";
	char *path = write_str(text);
	struct rp_trace t;
	struct mem e;
	int32_t tok[1536];
	int j;

	mem_open(&e);
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_MOONCAKE, 1, e.f, &t), 0);
	mem_close(&e);
	ck_assert_str_eq(e.buf, "");
	ck_assert_uint_eq(t.n, 3);
	ck_assert_uint_eq(t.malformed, 0);
	/* Arrivals relative to the first request; the third is clamped. */
	ck_assert_double_eq(t.req[0].arrival_ms, 0.0);
	ck_assert_double_eq(t.req[1].arrival_ms, 500.5);
	ck_assert_double_eq(t.req[2].arrival_ms, 500.5);
	ck_assert_uint_eq(t.req[0].input_len, 700);
	ck_assert_uint_eq(t.req[0].output_len, 5);
	/* Trace ids 3, 9, 10, 11, 42 are dense ids 0..4, in the order seen. */
	ck_assert_uint_eq(t.req[0].nblocks, 2);
	ck_assert_uint_eq(t.req[0].blocks[0], 0);
	ck_assert_uint_eq(t.req[0].blocks[1], 1);
	ck_assert_uint_eq(t.req[1].input_len, 1536);
	ck_assert_uint_eq(t.req[1].output_len, 0);
	ck_assert_uint_eq(t.req[1].nblocks, 3);
	ck_assert_uint_eq(t.req[1].blocks[0], 0);
	ck_assert_uint_eq(t.req[1].blocks[1], 2);
	ck_assert_uint_eq(t.req[1].blocks[2], 3);
	ck_assert_uint_eq(t.req[2].input_len, 1);
	ck_assert_uint_eq(t.req[2].output_len, 7);
	ck_assert_uint_eq(t.req[2].blocks[0], 4);
	ck_assert_uint_eq(t.max_input, 1536);
	ck_assert_uint_eq(t.max_output, 7);
	ck_assert_uint_eq(t.next_block, 5);

	/* 700 tokens: block 0 whole (0..511), then 188 of block 1
	 * (512..699); the guard past the end stays untouched. */
	for (j = 0; j < 1536; j++)
		tok[j] = -7;
	rp_req_input(&t.req[0], tok);
	ck_assert_int_eq(tok[0], 0 * 512);
	ck_assert_int_eq(tok[511], 0 * 512 + 511);
	ck_assert_int_eq(tok[512], 1 * 512);
	ck_assert_int_eq(tok[699], 1 * 512 + 187);
	ck_assert_int_eq(tok[700], -7);
	for (j = 1; j < 700; j++)
		if (j != 512)
			ck_assert_int_eq(tok[j], tok[j - 1] + 1);
	rp_req_input(&t.req[2], tok);
	ck_assert_int_eq(tok[0], 4 * 512);
	ck_assert_int_eq(tok[1], 0 * 512 + 1);	/* untouched from before */

	rp_trace_free(&t);
	ck_assert_ptr_null(t.req);
	ck_assert_uint_eq(t.n, 0);
	rp_trace_free(&t);		/* twice is harmless */
	mem_free(&e);
	drop_tmp(path);
}
END_TEST

/* Malformed lines, one of each kind, with the report each must give. */
struct badline {
	unsigned int line;
	const char *what;
};

/*
 * Build the malformed-lines file: good lines 1 and 21, every other line
 * bad in its own way.  Returns the path.
 */
static char *mooncake_bad_file(void)
{
	static const char nul_line[] = "{\"timestamp\": 1,\0 \"input_length\": 100}\n";
	struct mem m;
	char *path;
	int k;

	mem_open(&m);
	/* 1 */ fputs("{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [0]}\n", m.f);
	/* 2 */ fputs("{\"timestamp\": 5, \"input_length\": 512, \"outp\n", m.f);
	/* 3 */ fputs("{\"timestamp\": 5, \"input_length\": 512, \"hash_ids\": [1]}\n", m.f);
	/* 4 */ fputs("{\"timestamp\": \"12\", \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1]}\n", m.f);
	/* 5 */ fputs("{\"timestamp\": 1, \"input_length\": 12x, \"output_length\": 1, \"hash_ids\": [1]}\n", m.f);
	/* 6 */ fputs("{\"timestamp\": 1, \"input_length\": 1025, \"output_length\": 1, \"hash_ids\": [1, 2]}\n", m.f);
	/* 7 */ fputs("hello, world\n", m.f);
	/* 8 */ fputs("{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": [1]}\n", m.f);
	/* 9 */ fputs("{\"timestamp\": 1, \"input_length\": 5, \"output_length\": -3, \"hash_ids\": [1]}\n", m.f);
	/* 10 */ fputs("{\"timestamp\": 1, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": []}\n", m.f);
	/* 11: good, an id far above 2^22 (dense id 1) */
	fputs("{\"timestamp\": 1, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [4194304]}\n", m.f);
	/* 12 */ fputs("{\"timestamp\": 1, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [-1]}\n", m.f);
	/* 13 */ fputs("{\"timestamp\": 1, \"input_length\": 99999999999999999999999999, \"output_length\": 1, \"hash_ids\": [1]}\n", m.f);
	/* 14 */ fputs("{\"timestamp\": 1e999, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [1]}\n", m.f);
	/* 15 */ fwrite(nul_line, 1, sizeof(nul_line) - 1, m.f);
	/* 16 */ fputs("{\"timestamp\": 1, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [1]} x\n", m.f);
	/* 17 */ fputs("{\"timestamp\": 1, \"timestamp\": 2, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [1]}\n", m.f);
	/* 18 */ fputs("{\"timestamp\": 1, \"input_length\": 512.0, \"output_length\": 1, \"hash_ids\": [1]}\n", m.f);
	/* 19: a megabyte-long string that never ends */
	fputs("{\"timestamp\": 1, \"note\": \"", m.f);
	for (k = 0; k < 1 << 20; k++)
		fputc('a', m.f);
	fputc('\n', m.f);
	/* 20: nesting deeper than anyone needs */
	fputs("{\"timestamp\": 1, \"x\": ", m.f);
	for (k = 0; k < 200; k++)
		fputc('[', m.f);
	for (k = 0; k < 200; k++)
		fputc(']', m.f);
	fputs(", \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n", m.f);
	/* 21: good, long: 5000 blocks, the last one partial */
	fputs("{\"timestamp\": 250, \"input_length\": 2559999, \"output_length\": 3, \"hash_ids\": [", m.f);
	for (k = 0; k < 5000; k++)
		fprintf(m.f, "%s%d", k ? ", " : "", 100 + k);
	fputs("]}\n", m.f);
	/* 22: truncated at the end of the file, no newline */
	fputs("{\"timestamp\": 9, \"input_length\": 51", m.f);
	mem_close(&m);
	path = write_tmp(m.buf, m.len);
	mem_free(&m);
	return path;
}

static const struct badline mooncake_bad[] = {
	{2, "unterminated string (truncated line?)"},
	{3, "missing key \"output_length\""},
	{4, "timestamp: expected a number"},
	{5, "expected ',' or '}' at column 36"},
	{6, "hash_ids: 2 ids, input_length 1025 needs 3"},
	{7, "not a JSON object"},
	{8, "input_length: must be at least 1"},
	{9, "output_length: negative"},
	{10, "hash_ids: empty"},
	{12, "hash_ids: negative"},
	{13, "input_length: out of range"},
	{14, "timestamp: out of range"},
	{15, "NUL byte at column 17"},
	{16, "garbage after the object"},
	{17, "duplicate key \"timestamp\""},
	{18, "input_length: not an integer"},
	{19, "unterminated string"},
	{20, "nested too deep"},
	{22, "unexpected end of line (truncated?), expected ',' or '}'"},
};

START_TEST(test_mooncake_malformed)
{
	char *path = mooncake_bad_file();
	size_t nbad = sizeof(mooncake_bad) / sizeof(mooncake_bad[0]), k;
	struct rp_trace t;
	struct mem e;
	unsigned long shown = rp_trace_bad_shown;

	/* Every line reported, to check each report (then the default). */
	rp_trace_bad_shown = ULONG_MAX;

	mem_open(&e);
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 0, e.f, &t), 0);
	mem_close(&e);
	/* The good lines kept, in order, the bad ones skipped and counted;
	 * only good lines take dense ids. */
	ck_assert_uint_eq(t.n, 3);
	ck_assert_uint_eq(t.malformed, nbad);
	ck_assert_uint_eq(t.req[0].blocks[0], 0);
	ck_assert_uint_eq(t.req[1].blocks[0], 1);
	ck_assert_double_eq(t.req[2].arrival_ms, 250.0);
	ck_assert_uint_eq(t.req[2].nblocks, 5000);
	ck_assert_uint_eq(t.req[2].blocks[0], 2);
	ck_assert_uint_eq(t.req[2].blocks[4999], 5001);
	ck_assert_uint_eq(t.max_input, 2559999);
	ck_assert_uint_eq(t.next_block, 5002);
	/* One report a bad line, each at its line. */
	ck_assert_uint_eq(count_lines(e.buf), nbad);
	for (k = 0; k < nbad; k++)
		assert_report(e.buf, path, mooncake_bad[k].line, mooncake_bad[k].what);
	rp_trace_free(&t);
	mem_free(&e);

	/* By default the first 5, then the count of all. */
	rp_trace_bad_shown = shown;
	mem_open(&e);
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_MOONCAKE, 0, e.f, &t), 0);
	mem_close(&e);
	ck_assert_uint_eq(t.malformed, nbad);
	ck_assert_uint_eq(count_lines(e.buf), 6);
	for (k = 0; k < 5; k++)
		assert_report(e.buf, path, mooncake_bad[k].line, mooncake_bad[k].what);
	{
		char want[512];

		snprintf(want, sizeof(want), "%s: %zu malformed lines in all, the first 5 shown "
			 "above\n", path, nbad);
		ck_assert_msg(strstr(e.buf, want), "%s", e.buf);
	}
	rp_trace_free(&t);
	mem_free(&e);

	/* With no report stream the same load just counts. */
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_MOONCAKE, 0, NULL, &t), 0);
	ck_assert_uint_eq(t.n, 3);
	ck_assert_uint_eq(t.malformed, nbad);
	rp_trace_free(&t);
	drop_tmp(path);
}
END_TEST

/*
 * Hash ids of any 64-bit value (near 2^63, 2^64 - 1, 0) are mapped to
 * dense ids in the order first seen, equal ids to equal dense ids; one
 * past 2^64 - 1 is out of range.
 */
START_TEST(test_mooncake_wide_ids)
{
	static const char text[] =
		"{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, "
		"\"hash_ids\": [9223372036854775807, 18446744073709551615]}\n"
		"{\"timestamp\": 1, \"input_length\": 1500, \"output_length\": 1, "
		"\"hash_ids\": [9223372036854775807, 9223372036854775808, 0]}\n"
		"{\"timestamp\": 2, \"input_length\": 600, \"output_length\": 1, "
		"\"hash_ids\": [18446744073709551615, 9223372036854775808]}\n"
		"{\"timestamp\": 3, \"input_length\": 10, \"output_length\": 1, "
		"\"hash_ids\": [18446744073709551616]}\n";
	char *path = write_str(text);
	struct rp_trace t;
	struct mem e;
	uint64_t uniq;

	mem_open(&e);
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_MOONCAKE, 0, e.f, &t), 0);
	mem_close(&e);
	ck_assert_uint_eq(t.n, 3);
	ck_assert_uint_eq(t.malformed, 1);
	assert_report(e.buf, path, 4, "hash_ids: out of range (18446744073709551616)");
	ck_assert_uint_eq(t.req[0].blocks[0], 0);	/* 2^63 - 1 */
	ck_assert_uint_eq(t.req[0].blocks[1], 1);	/* 2^64 - 1 */
	ck_assert_uint_eq(t.req[1].blocks[0], 0);
	ck_assert_uint_eq(t.req[1].blocks[1], 2);	/* 2^63 */
	ck_assert_uint_eq(t.req[1].blocks[2], 3);	/* 0 */
	ck_assert_uint_eq(t.req[2].blocks[0], 1);
	ck_assert_uint_eq(t.req[2].blocks[1], 2);
	ck_assert_uint_eq(t.next_block, 4);
	/* Sharing survives the mapping: request 1 finds request 0's first block. */
	ck_assert(rp_trace_ideal_hit(&t, 1, &uniq) > 0);
	ck_assert_uint_eq(uniq, 512 + 512 + 512 + 476);
	rp_trace_free(&t);
	mem_free(&e);
	drop_tmp(path);
}
END_TEST

START_TEST(test_stop_on_error)
{
	char *path = mooncake_bad_file();
	struct rp_trace t;
	struct mem e;

	mem_open(&e);
	errno = 0;
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_MOONCAKE, 1, e.f, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	mem_close(&e);
	/* Stopped at the first bad line, nothing left behind. */
	ck_assert_uint_eq(count_lines(e.buf), 1);
	assert_report(e.buf, path, 2, "truncated");
	ck_assert_ptr_null(t.req);
	ck_assert_uint_eq(t.n, 0);
	rp_trace_free(&t);
	mem_free(&e);
	drop_tmp(path);
}
END_TEST

START_TEST(test_load_errors)
{
	const char *dir = getenv("TMPDIR");
	struct rp_trace t;
	char *path;

	errno = 0;
	ck_assert_int_eq(rp_trace_load("/nonexistent/kvslab.jsonl", RP_FMT_AUTO, 0, NULL, &t), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(rp_trace_load(NULL, RP_FMT_AUTO, 0, NULL, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(rp_trace_load("x", RP_FMT_AUTO, 0, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(rp_trace_load("x", (enum rp_format)7, 0, NULL, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* A directory opens but does not read. */
	errno = 0;
	ck_assert_int_eq(rp_trace_load(dir && *dir ? dir : "/tmp", RP_FMT_AUTO, 0, NULL, &t), -1);
	ck_assert_int_ne(errno, 0);
	/* Nothing to replay: empty, blank only, only bad lines. */
	path = write_str("");
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 0, NULL, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	drop_tmp(path);
	path = write_str("\n  \n\t\r\n");
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_MOONCAKE, 0, NULL, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	drop_tmp(path);
	path = write_str("{\"timestamp\": 1}\n{}\n");
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 0, NULL, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(t.req);
	drop_tmp(path);
}
END_TEST

/* Random bytes and cut-off good lines: the loader must neither crash nor leak. */
START_TEST(test_mooncake_fuzz)
{
	static const char good[] =
		"{\"timestamp\": 12.5, \"input_length\": 1030, \"output_length\": 4, \"hash_ids\": [7, 8, 9], "
		"\"x\": [\"a\\\\\", {\"y\": false}]}\n";
	uint64_t s = 42;
	char buf[2048];
	int round, k;

	for (round = 0; round < 300; round++) {
		size_t len = sizeof(good) - 1, n = 0;
		struct rp_trace t;
		char *path;

		/* Cut the good line, flip a few bytes, end with or without a newline. */
		for (k = 0; k < 4; k++) {
			size_t cut;
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			cut = (size_t)(s >> 33) % len;
			memcpy(buf + n, good, cut);
			n += cut;
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			if ((s >> 40) & 1)
				buf[n - (cut ? 1 : 0)] = (char)(s >> 48);
			buf[n++] = '\n';
		}
		memcpy(buf + n, good, len);	/* one good line, so a load can succeed */
		n += len;
		if (round & 1)
			n--;
		path = write_tmp(buf, n);
		if (rp_trace_load(path, RP_FMT_AUTO, 0, NULL, &t) == 0) {
			ck_assert_uint_ge(t.n, 1);
			ck_assert_uint_le(t.n + t.malformed, 9);
			rp_trace_free(&t);
		}
		drop_tmp(path);
	}
}
END_TEST

/* --------------------------------------------------------------- Azure */

START_TEST(test_azure_good)
{
	/* Columns in another order and case, an extra one, quotes, CRLF. */
	static const char text[] =
		"ContextTokens, timestamp ,Extra,generatedtokens\r\n"
		"374,2023-11-16 18:15:46.6805900,foo,44\r\n"
		"\r\n"
		"1025,\"2023-11-16 18:15:50.9951690\",\"a,\"\"b\"\"\",109\r\n"
		"512,2023-11-16 18:15:50.0000000,x,0\r\n"
		"1,2023-11-17 00:00:00,x,3";
	char *path = write_str(text);
	struct rp_trace t;
	struct mem e;

	mem_open(&e);
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AZURE, 1, e.f, &t), 0);
	mem_close(&e);
	ck_assert_str_eq(e.buf, "");
	ck_assert_uint_eq(t.n, 4);
	/* 50.9951690 - 46.6805900 = 4.314579 s; the third goes back and is
	 * clamped; midnight is 5 h 44 min 13.31941 s after the first. */
	ck_assert_double_eq(t.req[0].arrival_ms, 0.0);
	ck_assert_double_eq_tol(t.req[1].arrival_ms, 4314.579, 1e-6);
	ck_assert_double_eq_tol(t.req[2].arrival_ms, 4314.579, 1e-6);
	ck_assert_double_eq_tol(t.req[3].arrival_ms, (5 * 3600 + 44 * 60 + 13.31941) * 1000, 1e-6);
	/* Fresh ids, in order, none shared. */
	ck_assert_uint_eq(t.req[0].input_len, 374);
	ck_assert_uint_eq(t.req[0].output_len, 44);
	ck_assert_uint_eq(t.req[0].nblocks, 1);
	ck_assert_uint_eq(t.req[0].blocks[0], 0);
	ck_assert_uint_eq(t.req[1].nblocks, 3);
	ck_assert_uint_eq(t.req[1].blocks[0], 1);
	ck_assert_uint_eq(t.req[1].blocks[2], 3);
	ck_assert_uint_eq(t.req[2].blocks[0], 4);
	ck_assert_uint_eq(t.req[2].output_len, 0);
	ck_assert_uint_eq(t.req[3].blocks[0], 5);
	ck_assert_uint_eq(t.next_block, 6);
	ck_assert_uint_eq(t.max_input, 1025);
	ck_assert_uint_eq(t.max_output, 109);
	rp_trace_free(&t);
	mem_free(&e);
	drop_tmp(path);

	/* A leap day between: 2024-02-28 23:59:59.5 to 2024-03-01 00:00:00.5
	 * is one day and one second. */
	path = write_str("TIMESTAMP,ContextTokens,GeneratedTokens\n"
			 "2024-02-28 23:59:59.5,10,1\n2024-03-01T00:00:00.5Z,10,1\n");
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 1, NULL, &t), 0);
	ck_assert_uint_eq(t.n, 2);
	ck_assert_double_eq_tol(t.req[1].arrival_ms, 86401000.0, 1e-6);
	rp_trace_free(&t);
	drop_tmp(path);
}
END_TEST

static const struct badline azure_bad[] = {
	{3, "TIMESTAMP: bad date and time \"2023-13-16"},
	{4, "TIMESTAMP: bad date and time \"not a time\""},
	{5, "TIMESTAMP: bad date and time \"2023-02-29"},
	{6, "ContextTokens: negative"},
	{7, "ContextTokens: must be at least 1"},
	{8, "GeneratedTokens: negative"},
	{9, "2 fields, the header has 3"},
	{10, "GeneratedTokens: not an integer"},
	{11, "ContextTokens: out of range"},
	{12, "unterminated quote"},
	{13, "TIMESTAMP: bad date and time \"2023-11-16 25:00:00\""},
};

START_TEST(test_azure_malformed)
{
	static const char text[] =
		"TIMESTAMP,ContextTokens,GeneratedTokens\n"
		"2023-11-16 18:15:46.6805900,374,44\n"
		"2023-13-16 18:15:46.6805900,374,44\n"
		"not a time,374,44\n"
		"2023-02-29 10:00:00,374,44\n"
		"2023-11-16 18:15:47,-5,44\n"
		"2023-11-16 18:15:47,0,44\n"
		"2023-11-16 18:15:47,10,-1\n"
		"2023-11-16 18:15:47,10\n"
		"2023-11-16 18:15:47,10,abc\n"
		"2023-11-16 18:15:47,99999999999,1\n"
		"\"2023-11-16 18:15:47,10,1\n"
		"2023-11-16 25:00:00,10,1\n"
		"2023-11-16 18:15:48.5,100,2";
	size_t nbad = sizeof(azure_bad) / sizeof(azure_bad[0]), k;
	char *path = write_str(text);
	struct rp_trace t;
	struct mem e;
	unsigned long shown = rp_trace_bad_shown;

	rp_trace_bad_shown = ULONG_MAX; /* every line reported, to check each */

	mem_open(&e);
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 0, e.f, &t), 0);
	mem_close(&e);
	ck_assert_uint_eq(t.n, 2);
	ck_assert_uint_eq(t.malformed, nbad);
	/* 48.5 - 46.68059 s */
	ck_assert_double_eq_tol(t.req[1].arrival_ms, 1819.41, 1e-6);
	ck_assert_uint_eq(t.req[1].blocks[0], 1);
	ck_assert_uint_eq(count_lines(e.buf), nbad);
	for (k = 0; k < nbad; k++)
		assert_report(e.buf, path, azure_bad[k].line, azure_bad[k].what);
	rp_trace_free(&t);
	mem_free(&e);

	errno = 0;
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AZURE, 1, NULL, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	drop_tmp(path);

	/* A header without a column we need ends the load. */
	path = write_str("\n\nTIMESTAMP,ContextTokens\n2023-11-16 18:15:48.5,100\n");
	mem_open(&e);
	errno = 0;
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 0, e.f, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	mem_close(&e);
	assert_report(e.buf, path, 3, "missing column GeneratedTokens");
	mem_free(&e);
	drop_tmp(path);
	rp_trace_bad_shown = shown;
}
END_TEST

START_TEST(test_auto_detect)
{
	static const char jsonl[] =
		"\n   \n  {\"timestamp\": 3, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [5]}\n";
	static const char csv[] = "\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\n"
				  "2023-11-16 18:15:46.6805900,374,44\n";
	struct rp_trace t;
	char *pj = write_str(jsonl), *pc = write_str(csv);

	ck_assert_int_eq(rp_trace_load(pj, RP_FMT_AUTO, 1, NULL, &t), 0);
	ck_assert_uint_eq(t.n, 1);
	ck_assert_uint_eq(t.req[0].blocks[0], 0);	/* trace id 5, the first seen */
	ck_assert_uint_eq(t.next_block, 1);
	rp_trace_free(&t);
	ck_assert_int_eq(rp_trace_load(pc, RP_FMT_AUTO, 1, NULL, &t), 0);
	ck_assert_uint_eq(t.n, 1);
	ck_assert_uint_eq(t.req[0].input_len, 374);
	ck_assert_uint_eq(t.req[0].blocks[0], 0);
	rp_trace_free(&t);
	/* A forced format that does not fit reads nothing. */
	errno = 0;
	ck_assert_int_eq(rp_trace_load(pc, RP_FMT_MOONCAKE, 0, NULL, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(rp_trace_load(pj, RP_FMT_AZURE, 0, NULL, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	drop_tmp(pj);
	drop_tmp(pc);
}
END_TEST

/* ----------------------------------------------------------- generator */

static int same_trace(const struct rp_trace *a, const struct rp_trace *b)
{
	size_t i;

	if (a->n != b->n || a->next_block != b->next_block)
		return 0;
	for (i = 0; i < a->n; i++) {
		const struct rp_req *x = &a->req[i], *y = &b->req[i];

		if (x->arrival_ms != y->arrival_ms || x->input_len != y->input_len ||
		    x->output_len != y->output_len || x->nblocks != y->nblocks ||
		    memcmp(x->blocks, y->blocks, x->nblocks * sizeof(*x->blocks)))
			return 0;
	}
	return 1;
}

START_TEST(test_synth_defaults)
{
	struct rp_synth_opts o;

	rp_synth_defaults(&o);
	ck_assert_uint_eq(o.seed, 1);
	ck_assert_uint_eq(o.requests, 2000);
	ck_assert_double_eq(o.rate, 4.0);
	ck_assert_uint_eq(o.input_mean, 2048);
	ck_assert_uint_eq(o.input_max, 16384);
	ck_assert_uint_eq(o.output_mean, 256);
	ck_assert_uint_eq(o.output_max, 2048);
	ck_assert_double_eq(o.shared_ratio, 0.5);
	ck_assert_uint_eq(o.prefixes, 16);
}
END_TEST

START_TEST(test_synth_determinism)
{
	struct rp_synth_opts o;
	struct rp_trace a, b;

	rp_synth_defaults(&o);
	ck_assert_int_eq(rp_trace_synth(&o, &a), 0);
	ck_assert_int_eq(rp_trace_synth(&o, &b), 0);
	ck_assert(same_trace(&a, &b));
	rp_trace_free(&b);
	o.seed = 2;
	ck_assert_int_eq(rp_trace_synth(&o, &b), 0);
	ck_assert(!same_trace(&a, &b));
	ck_assert(a.req[0].input_len != b.req[0].input_len ||
		  a.req[0].arrival_ms != b.req[0].arrival_ms);
	rp_trace_free(&a);
	rp_trace_free(&b);
}
END_TEST

START_TEST(test_synth_shape)
{
	struct rp_synth_opts o;
	struct rp_trace t;
	double in_sum = 0, out_sum = 0;
	uint64_t blocks = 0;
	size_t i;

	rp_synth_defaults(&o);
	ck_assert_int_eq(rp_trace_synth(&o, &t), 0);
	ck_assert_uint_eq(t.n, o.requests);
	ck_assert_uint_eq(t.malformed, 0);
	ck_assert(t.req[0].arrival_ms > 0);
	for (i = 0; i < t.n; i++) {
		const struct rp_req *r = &t.req[i];
		uint32_t k;

		ck_assert_uint_ge(r->input_len, 1);
		ck_assert_uint_le(r->input_len, o.input_max);
		ck_assert_uint_ge(r->output_len, 1);
		ck_assert_uint_le(r->output_len, o.output_max);
		ck_assert_uint_eq(r->nblocks, (r->input_len + 511) / 512);
		ck_assert_uint_le(r->input_len, t.max_input);
		ck_assert_uint_le(r->output_len, t.max_output);
		for (k = 0; k < r->nblocks; k++)
			ck_assert_uint_lt(r->blocks[k], t.next_block);
		if (i)
			ck_assert(r->arrival_ms >= t.req[i - 1].arrival_ms);
		in_sum += r->input_len;
		out_sum += r->output_len;
		blocks += r->nblocks;
	}
	/* Means within 15% (the standard error is about 2%); 2000 arrivals at
	 * 4/s take about 500 s (standard deviation about 11 s). */
	ck_assert_double_ge(in_sum / t.n, 0.85 * o.input_mean);
	ck_assert_double_le(in_sum / t.n, 1.15 * o.input_mean);
	ck_assert_double_ge(out_sum / t.n, 0.85 * o.output_mean);
	ck_assert_double_le(out_sum / t.n, 1.15 * o.output_mean);
	ck_assert_double_ge(t.req[t.n - 1].arrival_ms, 450e3);
	ck_assert_double_le(t.req[t.n - 1].arrival_ms, 550e3);
	/* Half of each input shared: fewer ids than blocks, real hits. */
	ck_assert_uint_lt(t.next_block, blocks);
	ck_assert_double_gt(rp_trace_ideal_hit(&t, 1, NULL), 0.2);
	rp_trace_free(&t);

	/* Rate 0: everything arrives at once. */
	o.rate = 0;
	o.requests = 50;
	ck_assert_int_eq(rp_trace_synth(&o, &t), 0);
	for (i = 0; i < t.n; i++)
		ck_assert_double_eq(t.req[i].arrival_ms, 0.0);
	rp_trace_free(&t);
}
END_TEST

/*
 * Check the block structure of a synthetic trace against @ratio: in each
 * request the first round_down(ratio * input, 512) / 512 blocks come from
 * the pool (an id always sits at the same position behind the same
 * predecessor, and at most @prefixes distinct first blocks), every other
 * block appears in that request only.
 */
static void check_sharing(const struct rp_trace *t, double ratio, uint32_t prefixes)
{
	uint32_t *uses = calloc(t->next_block, sizeof(*uses));
	int64_t *pred = malloc(t->next_block * sizeof(*pred));
	uint32_t *pos = malloc(t->next_block * sizeof(*pos));
	uint32_t firsts = 0, k;
	size_t i;

	ck_assert(uses && pred && pos);
	for (i = 0; i < t->n; i++) {
		const struct rp_req *r = &t->req[i];
		uint32_t shared = (uint32_t)floor(ratio * r->input_len) / 512;

		for (k = 0; k < r->nblocks; k++) {
			uint32_t id = r->blocks[k];
			int64_t p = k ? (int64_t)r->blocks[k - 1] : -1;

			if (k >= shared) {
				ck_assert_uint_eq(uses[id], 0);	/* fresh */
				uses[id] = UINT32_MAX;
				continue;
			}
			ck_assert_uint_ne(uses[id], UINT32_MAX);
			if (uses[id]++) {
				ck_assert_int_eq(pred[id], p);
				ck_assert_uint_eq(pos[id], k);
			} else {
				pred[id] = p;
				pos[id] = k;
				firsts += !k;
			}
		}
	}
	ck_assert_uint_le(firsts, prefixes);
	free(uses);
	free(pred);
	free(pos);
}

START_TEST(test_synth_sharing)
{
	struct rp_synth_opts o;
	struct rp_trace t;
	uint64_t blocks = 0, uniq, sum_in = 0;
	size_t i;
	double hit;

	rp_synth_defaults(&o);
	o.requests = 500;
	/* Nothing shared: every id used once, and no hit at all. */
	o.shared_ratio = 0;
	ck_assert_int_eq(rp_trace_synth(&o, &t), 0);
	for (i = 0; i < t.n; i++) {
		blocks += t.req[i].nblocks;
		sum_in += t.req[i].input_len;
	}
	ck_assert_uint_eq(t.next_block, blocks);
	check_sharing(&t, 0, 0);
	ck_assert_double_eq(rp_trace_ideal_hit(&t, 1, &uniq), 0.0);
	ck_assert_uint_eq(uniq, sum_in);
	rp_trace_free(&t);

	/* Everything shared: each request's full blocks come from the pool,
	 * only a partial last block is its own. */
	o.shared_ratio = 1.0;
	ck_assert_int_eq(rp_trace_synth(&o, &t), 0);
	check_sharing(&t, 1.0, o.prefixes);
	for (i = 0; i < t.n; i++)
		if (t.req[i].input_len >= 512)
			ck_assert_uint_lt(t.req[i].blocks[0], 16 * (16384 / 512));
	hit = rp_trace_ideal_hit(&t, 1, NULL);
	ck_assert_double_gt(hit, 0.7);
	rp_trace_free(&t);

	/* Half, with a single prefix. */
	o.shared_ratio = 0.5;
	o.prefixes = 1;
	ck_assert_int_eq(rp_trace_synth(&o, &t), 0);
	check_sharing(&t, 0.5, 1);
	rp_trace_free(&t);
	/* And 0.3, which is not a power of two. */
	o.shared_ratio = 0.3;
	o.prefixes = 5;
	ck_assert_int_eq(rp_trace_synth(&o, &t), 0);
	check_sharing(&t, 0.3, 5);
	rp_trace_free(&t);
}
END_TEST

START_TEST(test_synth_errors)
{
	struct rp_synth_opts o, d;
	struct rp_trace t;

	rp_synth_defaults(&d);
#define BAD(field, value, err)                                         \
	do {                                                           \
		o = d;                                                 \
		o.field = value;                                       \
		errno = 0;                                             \
		ck_assert_int_eq(rp_trace_synth(&o, &t), -1);          \
		ck_assert_int_eq(errno, err);                          \
		ck_assert_ptr_null(t.req);                             \
	} while (0)
	BAD(requests, 0, EINVAL);
	BAD(input_mean, 0, EINVAL);
	BAD(output_mean, 0, EINVAL);
	BAD(input_max, 0, EINVAL);
	BAD(output_max, 0, EINVAL);
	BAD(input_mean, 20000, EINVAL);		/* above input_max */
	BAD(shared_ratio, -0.1, EINVAL);
	BAD(shared_ratio, 1.5, EINVAL);
	BAD(shared_ratio, NAN, EINVAL);
	BAD(rate, -1, EINVAL);
	BAD(rate, NAN, EINVAL);
	BAD(rate, INFINITY, EINVAL);
	BAD(prefixes, 0, EINVAL);
	/* The pool alone: 2^20 prefixes of 32 blocks. */
	BAD(prefixes, 1u << 20, ENOMEM);
#undef BAD
	errno = 0;
	ck_assert_int_eq(rp_trace_synth(NULL, &t), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(rp_trace_synth(&d, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* No pool needed without sharing. */
	o = d;
	o.shared_ratio = 0;
	o.prefixes = 0;
	o.requests = 10;
	ck_assert_int_eq(rp_trace_synth(&o, &t), 0);
	rp_trace_free(&t);
	/* Fresh blocks run out: 10000 requests of about 1000 blocks each
	 * need more than 2^22 ids. */
	o = d;
	o.requests = 10000;
	o.input_mean = o.input_max = 1 << 19;
	o.shared_ratio = 0;
	errno = 0;
	ck_assert_int_eq(rp_trace_synth(&o, &t), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_ptr_null(t.req);
	ck_assert_uint_eq(t.n, 0);
}
END_TEST

/* ----------------------------------------------------------- ideal hit */

START_TEST(test_ideal_hit_small)
{
	/*
	 * Runs: 512 for every block but the last, which holds what is left.
	 *   A 1200 [1 2 3]  nothing seen               -> 0
	 *   B 1100 [1 2 4]  1, 2 whole; 4 unseen        -> 1024
	 *   C 1100 [1 2 3]  3 needs 76, has 176         -> 1100 (all)
	 *   D 1300 [1 2 3]  3 needs 276, has 176        -> 1024 + 176 = 1200
	 *   E  300 [5]      unseen                      -> 0
	 *   F  600 [1 6]    1 whole; 6 unseen           -> 512
	 * Inputs 5600, matched 3836: 0.685.  Page 16: C 1100 -> 1088,
	 * 3824 / 5600.  Page 64: C -> 1088, D 1200 -> 1152, 3776 / 5600.
	 * Unique: 1, 2: 512 each; 3: max(176, 76, 276) = 276; 4: 76; 5: 300;
	 * 6: 88 -> 1764.
	 */
	static uint32_t b_a[] = {1, 2, 3}, b_b[] = {1, 2, 4}, b_e[] = {5}, b_f[] = {1, 6};
	struct rp_req req[] = {
		{0, 1200, 1, 3, b_a}, {0, 1100, 1, 3, b_b}, {0, 1100, 1, 3, b_a},
		{0, 1300, 1, 3, b_a}, {0, 300, 1, 1, b_e},  {0, 600, 1, 2, b_f},
	};
	struct rp_trace t = {.req = req, .n = 6};
	uint64_t uniq = 0;

	ck_assert_double_eq_tol(rp_trace_ideal_hit(&t, 1, &uniq), 3836.0 / 5600, 1e-12);
	ck_assert_double_eq_tol(3836.0 / 5600, 0.685, 1e-12);
	ck_assert_uint_eq(uniq, 1764);
	ck_assert_double_eq_tol(rp_trace_ideal_hit(&t, 16, NULL), 3824.0 / 5600, 1e-12);
	ck_assert_double_eq_tol(rp_trace_ideal_hit(&t, 64, &uniq), 3776.0 / 5600, 1e-12);
	ck_assert_uint_eq(uniq, 1764);
	errno = 0;
	ck_assert_double_eq(rp_trace_ideal_hit(&t, 0, &uniq), -1.0);
	ck_assert_int_eq(errno, EINVAL);
	t.n = 0;
	ck_assert_double_eq(rp_trace_ideal_hit(&t, 1, &uniq), 0.0);
	ck_assert_uint_eq(uniq, 0);
}
END_TEST

/* -------------------------------------------------------- public traces */

/* Load a public trace; 0 when it is not there (the test is then skipped). */
static int load_shared(const char *name, struct rp_trace *t)
{
	char path[4096];

	shared_path(name, path, sizeof(path));
	if (access(path, R_OK)) {
		fprintf(stderr, "test_trace: %s not found, skipped\n", path);
		return 0;
	}
	ck_assert_int_eq(rp_trace_load(path, RP_FMT_AUTO, 1, stderr, t), 0);
	ck_assert_uint_eq(t->malformed, 0);
	return 1;
}

START_TEST(test_conversation_trace)
{
	struct rp_trace t;
	uint64_t uniq;
	size_t i;

	if (!load_shared("conversation_trace.jsonl", &t))
		return;
	/* The README's numbers: 12,031 requests, 182,790 block hashes,
	 * 90,695,412 unique tokens, SGLang's 0.3736 at page 1. */
	ck_assert_uint_eq(t.n, 12031);
	ck_assert_uint_eq(t.next_block, 182790);
	ck_assert_uint_eq(t.max_input, 126195);
	ck_assert_double_eq_tol(rp_trace_ideal_hit(&t, 1, &uniq), 0.3736, 0.0005);
	ck_assert_uint_eq(uniq, 90695412);
	ck_assert_double_le(t.req[t.n - 1].arrival_ms, 3538e3);
	for (i = 1; i < t.n; i++)
		ck_assert(t.req[i].arrival_ms >= t.req[i - 1].arrival_ms);
	/* Paging can only lose hits. */
	ck_assert_double_le(rp_trace_ideal_hit(&t, 16, NULL), 0.3737);
	rp_trace_free(&t);
}
END_TEST

START_TEST(test_synthetic_trace)
{
	struct rp_trace t;
	uint64_t uniq;

	if (!load_shared("synthetic_trace.jsonl", &t))
		return;
	ck_assert_uint_eq(t.n, 3993);
	ck_assert_uint_eq(t.next_block, 43924);
	ck_assert_double_eq_tol(rp_trace_ideal_hit(&t, 1, &uniq), 0.651, 0.0005);
	ck_assert_uint_eq(uniq, 21341967);
	rp_trace_free(&t);
}
END_TEST

START_TEST(test_azure_trace)
{
	struct rp_trace t;
	uint64_t uniq, sum = 0;
	size_t i;

	if (!load_shared("azure2023_AzureLLMInferenceTrace_conv.csv", &t))
		return;
	ck_assert_uint_eq(t.n, 19366);
	for (i = 0; i < t.n; i++)
		sum += t.req[i].input_len;
	/* Context mean 1,155; 18:15 to 19:14 is under an hour; no sharing. */
	ck_assert_double_eq_tol((double)sum / t.n, 1155, 1);
	ck_assert_uint_eq(t.max_input, 14050);
	ck_assert_double_gt(t.req[t.n - 1].arrival_ms, 3300e3);
	ck_assert_double_lt(t.req[t.n - 1].arrival_ms, 3600e3);
	ck_assert_double_eq(rp_trace_ideal_hit(&t, 1, &uniq), 0.0);
	ck_assert_uint_eq(uniq, sum);
	rp_trace_free(&t);
}
END_TEST

static Suite *trace_suite(void)
{
	Suite *s = suite_create("trace");
	TCase *tc = tcase_create("load");

	tcase_add_test(tc, test_mooncake_good);
	tcase_add_test(tc, test_mooncake_malformed);
	tcase_add_test(tc, test_mooncake_wide_ids);
	tcase_add_test(tc, test_stop_on_error);
	tcase_add_test(tc, test_load_errors);
	tcase_add_test(tc, test_mooncake_fuzz);
	tcase_add_test(tc, test_azure_good);
	tcase_add_test(tc, test_azure_malformed);
	tcase_add_test(tc, test_auto_detect);
	suite_add_tcase(s, tc);
	tc = tcase_create("synth");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_synth_defaults);
	tcase_add_test(tc, test_synth_determinism);
	tcase_add_test(tc, test_synth_shape);
	tcase_add_test(tc, test_synth_sharing);
	tcase_add_test(tc, test_synth_errors);
	tcase_add_test(tc, test_ideal_hit_small);
	suite_add_tcase(s, tc);
	tc = tcase_create("public");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_conversation_trace);
	tcase_add_test(tc, test_synthetic_trace);
	tcase_add_test(tc, test_azure_trace);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(trace_suite());
}
