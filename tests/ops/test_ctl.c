/* SPDX-License-Identifier: MIT */
/*
 * tests/ops/test_ctl.c - the control socket (kvs_ctl_start(3)) and its
 * tools: a server started here over a pool's metrics and a test set_limit
 * callback, driven by the real tools/kvslab-ctl and tools/kvslab-stat
 * binaries and by hand: limit get and set (the callback sees the parsed
 * bytes, its errno comes back as "error ENOMEM ..." and exit status 1), the
 * metrics text equal to kvs_metrics_write()'s, garbage, a line too long,
 * two clients at once, a stale socket replaced, a live one refused, and the
 * socket file gone after kvs_ctl_stop().
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* What the test callback saw; the server thread writes, the test reads. */
static uint64_t seen_bytes;
static int seen_calls;
static int fail_errno;
static uint64_t fail_floor, fail_packed;	/* what a failing callback reports */

static int test_set_limit(void *arg, uint64_t bytes, kvs_ctl_limit_report_t *rep)
{
	ck_assert_ptr_eq(arg, &seen_bytes);
	__atomic_store_n(&seen_bytes, bytes, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&seen_calls, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&fail_errno, __ATOMIC_SEQ_CST)) {
		rep->floor_bytes = __atomic_load_n(&fail_floor, __ATOMIC_SEQ_CST);
		rep->packed_bytes = __atomic_load_n(&fail_packed, __ATOMIC_SEQ_CST);
		errno = __atomic_load_n(&fail_errno, __ATOMIC_SEQ_CST);
		return -1;
	}
	rep->bytes_returned = 4096;
	rep->elapsed_ns = 1234;
	rep->limit = bytes;
	return 0;
}

struct env {
	char dir[64];
	char path[128];
	kvs_drv_t *d;
	kvs_pool_t *p;
	kvs_metrics_t *m;
	kvs_ctl_t *ctl;
};

static void env_open(struct env *e)
{
	kvs_drv_attr_t da;
	kvs_pool_attr_t pa;
	kvs_ctl_attr_t ca;

	strcpy(e->dir, "/tmp/kvs_ctl_XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(e->dir));
	snprintf(e->path, sizeof(e->path), "%s/ctl.sock", e->dir);
	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	e->d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 2;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 64;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 4;
	pa.max_tokens = 256;
	e->p = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->p);
	e->m = kvs_metrics_create();
	ck_assert_ptr_nonnull(e->m);
	ck_assert_int_eq(kvs_metrics_add_pool(e->m, e->p, "gpu0"), 0);
	ck_assert_int_eq(kvs_metrics_add_drv(e->m, e->d, "host"), 0);
	kvs_ctl_attr_init(&ca);
	ca.metrics = e->m;
	ca.set_limit = test_set_limit;
	ca.limit_arg = &seen_bytes;
	ca.limit = 1ull << 30;
	e->ctl = kvs_ctl_start(e->path, &ca);
	ck_assert_ptr_nonnull(e->ctl);
}

static void env_close(struct env *e)
{
	struct stat st;

	ck_assert_int_eq(kvs_ctl_stop(e->ctl), 0);
	ck_assert_int_eq(lstat(e->path, &st), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(kvs_metrics_destroy(e->m), 0);
	ck_assert_int_eq(kvs_pool_destroy(e->p), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
	ck_assert_int_eq(rmdir(e->dir), 0);
}

/* Run tools/@tool with @args; its exit status, its stdout and stderr in @out. */
static int tool(const char *name, const char *args, char *out, size_t size)
{
	const char *top = getenv("KVSLAB_TOP_BUILDDIR");
	char cmd[4096];
	size_t n = 0;
	FILE *p;
	int st;

	/* timeout(1): a tool that hangs fails the test (124), not the suite. */
	snprintf(cmd, sizeof(cmd), "timeout 60 '%s/tools/%s' %s 2>&1", top && *top ? top : ".",
		 name, args);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (n + 1 < size && fgets(out + n, (int)(size - n), p))
		n += strlen(out + n);
	out[n] = 0;
	while (fgetc(p) != EOF)
		;
	st = pclose(p);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static int dial(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = 10};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void say(int fd, const char *s, size_t n)
{
	ck_assert_int_eq(send(fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Read one response, up to its "ok" or "error" line, into @buf. */
static void response(int fd, char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = 0;
	for (;;) {
		char *last;
		ssize_t r;

		if (n && buf[n - 1] == '\n') {
			buf[n - 1] = 0;
			last = strrchr(buf, '\n');
			last = last ? last + 1 : buf;
			buf[n - 1] = '\n';
			if (!strncmp(last, "ok\n", 3) || !strncmp(last, "error ", 6))
				return;
		}
		ck_assert_uint_lt(n + 1, size);
		r = recv(fd, buf + n, 1, 0);	/* one byte: never past this response */
		ck_assert_int_eq(r, 1);
		n++;
		buf[n] = 0;
	}
}

/* The server closed @fd: the next read sees the end. */
static void closed(int fd)
{
	ssize_t n;
	char c;

	/* A Unix socket closed with our bytes unread reads as ECONNRESET. */
	n = recv(fd, &c, 1, 0);
	ck_assert_msg(n == 0 || (n < 0 && errno == ECONNRESET), "recv %zd errno %d", n, errno);
}

struct text {
	char *p;
	size_t len;
};

static void text_cb(void *arg, const char *data, size_t len)
{
	struct text *t = arg;

	t->p = realloc(t->p, t->len + len + 1);
	memcpy(t->p + t->len, data, len);
	t->len += len;
	t->p[t->len] = 0;
}

START_TEST(test_tools)
{
	static char out[1 << 16];
	char args[512];
	struct text want = {0};
	struct env e;
	struct stat st;
	int tries;

	env_open(&e);
	ck_assert_int_eq(lstat(e.path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0600);

	snprintf(args, sizeof(args), "-s '%s' ping", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "pong\n");
	snprintf(args, sizeof(args), "-s '%s' limit", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "limit 1073741824\n");

	snprintf(args, sizeof(args), "-s '%s' limit 512M", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "limit 536870912\nbytes_returned 4096\nelapsed_ns 1234\n");
	ck_assert_uint_eq(__atomic_load_n(&seen_bytes, __ATOMIC_SEQ_CST), 512ull << 20);
	ck_assert_int_eq(__atomic_load_n(&seen_calls, __ATOMIC_SEQ_CST), 1);
	snprintf(args, sizeof(args), "-s '%s' limit", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "limit 536870912\n");
	/* The one SIZE grammar (kvs_parse_size(3)), the replay's too. */
	snprintf(args, sizeof(args), "-s '%s' limit 1.5G", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 0);
	ck_assert_uint_eq(__atomic_load_n(&seen_bytes, __ATOMIC_SEQ_CST), 3ull << 29);
	snprintf(args, sizeof(args), "-s '%s' limit 64KiB", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 0);
	ck_assert_uint_eq(__atomic_load_n(&seen_bytes, __ATOMIC_SEQ_CST), 64 << 10);
	snprintf(args, sizeof(args), "-s '%s' limit 3000", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 0);
	ck_assert_uint_eq(__atomic_load_n(&seen_bytes, __ATOMIC_SEQ_CST), 3000);

	/* The callback's errno, by name, and exit status 1. */
	__atomic_store_n(&fail_errno, ENOMEM, __ATOMIC_SEQ_CST);
	snprintf(args, sizeof(args), "-s '%s' limit 1g", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "ENOMEM") != NULL, "%s", out);
	ck_assert_uint_eq(__atomic_load_n(&seen_bytes, __ATOMIC_SEQ_CST), 1ull << 30);
	ck_assert_msg(!strstr(out, "floor"), "%s", out);	/* no floor known */
	/* A refusal below the floor says the floor, and whether compaction
	 * would let the limit through. */
	__atomic_store_n(&fail_floor, 3ull << 30, __ATOMIC_SEQ_CST);
	__atomic_store_n(&fail_packed, 1ull << 29, __ATOMIC_SEQ_CST);
	snprintf(args, sizeof(args), "-s '%s' limit 1g", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "kvslab-ctl: ENOMEM limit below the floor 3221225472 ") &&
			      strstr(out, "; compaction would let it through: packed 536870912\n"),
		      "%s", out);
	__atomic_store_n(&fail_packed, 2ull << 30, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "ENOMEM limit below the floor 3221225472 ") &&
			      strstr(out, "; compaction would not: packed 2147483648\n"),
		      "%s", out);
	__atomic_store_n(&fail_floor, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&fail_packed, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&fail_errno, 0, __ATOMIC_SEQ_CST);
	/* The limit known is still the last one set. */
	snprintf(args, sizeof(args), "-s '%s' limit", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "limit 3000\n");

	/* Usage: exit status 2, the server not asked. */
	tries = __atomic_load_n(&seen_calls, __ATOMIC_SEQ_CST);
	snprintf(args, sizeof(args), "-s '%s' limit 12Q", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "-s '%s' frobnicate", e.path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 2);
	ck_assert_int_eq(tool("kvslab-ctl", "", out, sizeof(out)), 2);
	ck_assert_int_eq(__atomic_load_n(&seen_calls, __ATOMIC_SEQ_CST), tries);
	/* No server: exit status 1. */
	snprintf(args, sizeof(args), "-s '%s/none' ping", e.dir);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 1);

	/* metrics: kvs_metrics_write()'s text, byte for byte (the slab's
	 * worker may still move a gauge: retry until two reads agree). */
	snprintf(args, sizeof(args), "-s '%s' metrics", e.path);
	for (tries = 0; tries < 50; tries++) {
		free(want.p);
		want.p = NULL;
		want.len = 0;
		ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 0);
		ck_assert_int_eq(kvs_metrics_write(e.m, text_cb, &want), 0);
		if (!strcmp(out, want.p))
			break;
		usleep(20000);
	}
	ck_assert_int_lt(tries, 50);
	ck_assert_ptr_nonnull(strstr(out, "kvslab_slab_objects{object=\"gpu0\"}"));
	free(want.p);

	/* kvslab-stat, one snapshot. */
	snprintf(args, sizeof(args), "-s '%s' -1", e.path);
	ck_assert_int_eq(tool("kvslab-stat", args, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "SLAB") && strstr(out, "gpu0") && strstr(out, "drv host"), "%s",
		      out);
	ck_assert_ptr_null(strstr(out, "\033["));
	snprintf(args, sizeof(args), "-s '%s' -n 2 -d 0.05", e.path);
	ck_assert_int_eq(tool("kvslab-stat", args, out, sizeof(out)), 0);
	snprintf(args, sizeof(args), "-s '%s' -d 0", e.path);
	ck_assert_int_eq(tool("kvslab-stat", args, out, sizeof(out)), 2);

	env_close(&e);
}
END_TEST

START_TEST(test_protocol)
{
	static char buf[1 << 16];
	char line[2 * KVS_CTL_LINE_MAX];
	struct env e;
	int a, b;

	env_open(&e);
	a = dial(e.path);
	ck_assert_int_ge(a, 0);
	/* An unknown request: an error, the connection stays. */
	say(a, "frobnicate\n", 11);
	response(a, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error EINVAL ", 13), "%s", buf);
	/* Two requests in one write, a CRLF line: two responses. */
	say(a, "ping\r\nhelp\n", 11);
	response(a, buf, sizeof(buf));
	ck_assert_str_eq(buf, "pong\nok\n");
	response(a, buf, sizeof(buf));
	ck_assert_ptr_nonnull(strstr(buf, "limit SIZE"));
	/* A second client while the first is connected. */
	b = dial(e.path);
	ck_assert_int_ge(b, 0);
	say(b, "limit\n", 6);
	response(b, buf, sizeof(buf));
	ck_assert_str_eq(buf, "limit 1073741824\nok\n");
	say(a, "limit 2K\n", 9);
	response(a, buf, sizeof(buf));
	ck_assert_str_eq(buf, "limit 2048\nbytes_returned 4096\nelapsed_ns 1234\nok\n");
	/* The server reads SIZE as the tools do (kvs_parse_size(3)). */
	say(a, "limit 1.5K\n", 11);
	response(a, buf, sizeof(buf));
	ck_assert_str_eq(buf, "limit 1536\nbytes_returned 4096\nelapsed_ns 1234\nok\n");
	say(b, "limit 1.5\n", 10);
	response(b, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error EINVAL ", 13), "%s", buf);
	say(b, "limit 99999999999999999999\n", 27);
	response(b, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error ERANGE ", 13), "%s", buf);
	say(b, "limit 1 2\n", 10);
	response(b, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error E2BIG ", 12), "%s", buf);
	say(b, "\n", 1);
	response(b, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error EINVAL ", 13), "%s", buf);
	/* Garbage: an error, then the server closes. */
	say(b, "\x01\x02\xff junk\n", 9);
	response(b, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error EPROTO ", 13), "%s", buf);
	closed(b);
	close(b);
	/* A line longer than KVS_CTL_LINE_MAX, never ended: the same. */
	b = dial(e.path);
	memset(line, 'a', sizeof(line));
	say(b, line, sizeof(line));
	response(b, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error EMSGSIZE ", 15), "%s", buf);
	closed(b);
	close(b);
	/* The first client is still served; quit closes it. */
	say(a, "ping\n", 5);
	response(a, buf, sizeof(buf));
	ck_assert_str_eq(buf, "pong\nok\n");
	say(a, "quit\n", 5);
	response(a, buf, sizeof(buf));
	ck_assert_str_eq(buf, "ok\n");
	closed(a);
	close(a);
	/* A client that vanishes mid-request does not hurt the server. */
	b = dial(e.path);
	say(b, "metr", 4);
	close(b);
	b = dial(e.path);
	say(b, "metrics\n", 8);
	close(b);
	b = dial(e.path);
	say(b, "ping\n", 5);
	response(b, buf, sizeof(buf));
	ck_assert_str_eq(buf, "pong\nok\n");
	close(b);
	env_close(&e);
	/* After stop nobody answers. */
	ck_assert_int_eq(dial(e.path), -1);
}
END_TEST

START_TEST(test_start_errors)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[] = "/tmp/kvs_ctl_XXXXXX", path[128], longp[200], buf[256];
	kvs_ctl_t *c, *c2;
	struct stat st;
	int fd;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/s", dir);
	/* A stale socket (bound, nobody listening) is replaced. */
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	c = kvs_ctl_start(path, NULL);
	ck_assert_ptr_nonnull(c);
	fd = dial(path);
	ck_assert_int_ge(fd, 0);
	say(fd, "ping\n", 5);
	response(fd, buf, sizeof(buf));
	ck_assert_str_eq(buf, "pong\nok\n");
	/* Without a registry or callbacks: ENOTSUP, said. */
	say(fd, "metrics\n", 8);
	response(fd, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error ENOTSUP ", 14), "%s", buf);
	say(fd, "limit\n", 6);
	response(fd, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error ENOTSUP ", 14), "%s", buf);
	say(fd, "limit 1M\n", 9);
	response(fd, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "error ENOTSUP ", 14), "%s", buf);
	close(fd);
	/* A live server is not replaced. */
	errno = 0;
	c2 = kvs_ctl_start(path, NULL);
	ck_assert_ptr_null(c2);
	ck_assert_int_eq(errno, EADDRINUSE);
	ck_assert_int_eq(kvs_ctl_stop(c), 0);
	ck_assert_int_eq(lstat(path, &st), -1);
	/* A file that is not a socket is not removed. */
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	errno = 0;
	ck_assert_ptr_null(kvs_ctl_start(path, NULL));
	ck_assert_int_eq(errno, EEXIST);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_int_eq(unlink(path), 0);
	/* A path longer than sun_path. */
	memset(longp, 'x', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = 0;
	errno = 0;
	ck_assert_ptr_null(kvs_ctl_start(longp, NULL));
	ck_assert_int_eq(errno, ENAMETOOLONG);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* A server wired to a pool (attr.pool): the limit requests read and set the
 * pool's elastic limit (kvs_pool_set_limit()). */
START_TEST(test_pool_limit)
{
	struct env e;
	kvs_ctl_attr_t ca;
	kvs_ctl_t *ctl;
	char path[300], buf[1024];
	int32_t locs[200];
	int fd;

	env_open(&e);
	snprintf(path, sizeof(path), "%s/pool.sock", e.dir);
	kvs_ctl_attr_init(&ca);
	ca.pool = e.p;
	ctl = kvs_ctl_start(path, &ca);
	ck_assert_ptr_nonnull(ctl);
	fd = dial(path);
	ck_assert_int_ge(fd, 0);
	say(fd, "limit\n", 6);
	response(fd, buf, sizeof(buf));
	snprintf(path, sizeof(path), "limit %zu\nok\n", kvs_pool_limit(e.p));
	ck_assert_str_eq(buf, path);
	/* Lowered: the pool's limit follows. */
	say(fd, "limit 64K\n", 10);
	response(fd, buf, sizeof(buf));
	ck_assert_msg(strncmp(buf, "limit ", 6) == 0 && strstr(buf, "bytes_returned ") &&
			      strstr(buf, "\nok\n"),
		      "%s", buf);
	ck_assert_uint_le(kvs_pool_limit(e.p), 65536);
	ck_assert_uint_gt(kvs_pool_limit(e.p), 0);
	/* Raised, then running requests hold more than a new limit: refused. */
	say(fd, "limit 1G\n", 9);
	response(fd, buf, sizeof(buf));
	ck_assert_msg(strstr(buf, "\nok\n"), "%s", buf);
	ck_assert_int_eq(kvs_pool_alloc(e.p, 200, locs), 0);
	say(fd, "limit 8K\n", 9);
	response(fd, buf, sizeof(buf));
	ck_assert_msg(strncmp(buf, "error ENOMEM", 12) == 0, "%s", buf);
	/* The answer gives the pool's floor and packed bytes, as its report. */
	{
		kvs_limit_report_t rep;
		char want[128];

		ck_assert_int_eq(kvs_pool_set_limit(e.p, 8192, NULL, &rep), -1);
		ck_assert_int_eq(errno, ENOMEM);
		ck_assert_uint_gt(rep.floor_bytes, 8192);
		snprintf(want, sizeof(want), " the floor %zu (", rep.floor_bytes);
		ck_assert_msg(strstr(buf, want), "%s", buf);
		snprintf(want, sizeof(want), "; compaction would not: packed %zu\n",
			 rep.packed_bytes);
		ck_assert_msg(strstr(buf, want), "%s", buf);
	}
	ck_assert_int_eq(kvs_pool_free(e.p, 200, locs), 0);
	close(fd);
	ck_assert_int_eq(kvs_ctl_stop(ctl), 0);
	env_close(&e);
}
END_TEST

/* kvs_parse_size(): the grammar every tool and the server read SIZE with. */
START_TEST(test_parse_size)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{"0", 0}, {"4096", 4096}, {"64k", 64 << 10}, {"64KiB", 64 << 10}, {"64kb", 64 << 10},
		{"512M", 512ull << 20}, {"512MiB", 512ull << 20}, {"1.5G", 3ull << 29},
		{"1.5g", 3ull << 29}, {"8GB", 8ull << 30}, {"2T", 2ull << 40}, {"0.5k", 512},
		{"1.3K", 1331}, {"7B", 7}, {"0.000000000000000001T", 0},
		{"18446744073709551615", UINT64_MAX}, {"16777215.99999999999T", 18446744073709551605ull},
	};
	static const char *const bad[] = {
		"", "G", "-1", "+1", " 1G", "1G ", "1.5", ".5G", "1.G", "1e3", "1Q", "1iB", "1GiBB",
		"0x10", "1.1234567890123456789G", "1,5G", "inf", "nan",
	};
	static const char *const big[] = {
		"18446744073709551616", "16777216T", "99999999999999999999G", "17179869184G",
	};
	uint64_t v;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 42;
		ck_assert_msg(kvs_parse_size(good[i].s, &v) == 0, "%s: errno %d", good[i].s, errno);
		ck_assert_msg(v == good[i].v, "%s: %llu", good[i].s, (unsigned long long)v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 42;
		errno = 0;
		ck_assert_msg(kvs_parse_size(bad[i], &v) == -1 && errno == EINVAL, "%s", bad[i]);
		ck_assert_uint_eq(v, 42);
	}
	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		v = 42;
		errno = 0;
		ck_assert_msg(kvs_parse_size(big[i], &v) == -1 && errno == ERANGE, "%s", big[i]);
		ck_assert_uint_eq(v, 42);
	}
	errno = 0;
	ck_assert_int_eq(kvs_parse_size(NULL, &v), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_parse_size("1G", NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
}
END_TEST

/* A fake server: accepts every connection, answers half a response (a data
 * line, never "ok") and then nothing, until the test closes it. */
struct mute {
	int lfd, stop[2];
	int fds[16];
	int n;
};

static void *mute_server(void *arg)
{
	struct mute *m = arg;

	for (;;) {
		struct pollfd pf[2] = {{.fd = m->lfd, .events = POLLIN},
				       {.fd = m->stop[0], .events = POLLIN}};

		if (poll(pf, 2, -1) < 0 || pf[1].revents)
			break;
		if (pf[0].revents) {
			int fd = accept(m->lfd, NULL, NULL);

			if (fd < 0)
				continue;
			(void)!write(fd, "pong\n", 5);
			if (m->n < 16)
				m->fds[m->n++] = fd;
			else
				close(fd);
		}
	}
	return NULL;
}

/* The tools give up on a server that never ends its answer: after -t, and
 * after the default (5 s) without it. */
START_TEST(test_tool_timeout)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[] = "/tmp/kvs_ctl_XXXXXX", path[128], args[512];
	static char out[1 << 14];
	struct mute m = {.n = 0};
	pthread_t th;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/mute.sock", dir);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	m.lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(m.lfd, 0);
	ck_assert_int_eq(bind(m.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(m.lfd, 16), 0);
	ck_assert_int_eq(pipe(m.stop), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, mute_server, &m), 0);

	snprintf(args, sizeof(args), "-t 0.2 -s '%s' ping", path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "no complete answer within 0.2 s"), "%s", out);
	snprintf(args, sizeof(args), "--timeout=0.2 -s '%s' limit 1.5G", path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "no complete answer"), "%s", out);
	snprintf(args, sizeof(args), "-t 0.2 -s '%s' -1", path);
	ck_assert_int_eq(tool("kvslab-stat", args, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "no complete answer within 0.2 s"), "%s", out);
	/* The default applies without -t. */
	snprintf(args, sizeof(args), "-s '%s' ping", path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "no complete answer within 5 s"), "%s", out);
	/* A bad -t is a usage error. */
	snprintf(args, sizeof(args), "-t 0 -s '%s' ping", path);
	ck_assert_int_eq(tool("kvslab-ctl", args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "-t x -s '%s' -1", path);
	ck_assert_int_eq(tool("kvslab-stat", args, out, sizeof(out)), 2);

	ck_assert_int_eq(write(m.stop[1], "x", 1), 1);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_ge(m.n, 4);
	for (int i = 0; i < m.n; i++)
		close(m.fds[i]);
	close(m.lfd);
	close(m.stop[0]);
	close(m.stop[1]);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Read from @fd until @n responses ended ("ok" lines), every byte. */
static void drain_responses(int fd, int n)
{
	static char buf[1 << 16];
	bool bol = true;
	int oks = 0, st = 0;	/* st: of "ok\n" matched at a line's start */

	while (oks < n) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);

		ck_assert_msg(r > 0, "response %d of %d: recv %zd errno %d", oks + 1, n, r, errno);
		for (ssize_t i = 0; i < r; i++) {
			char ch = buf[i];

			if (bol)
				st = 0;
			if (st >= 0 && st < 3 && ch == "ok\n"[st])
				st++;
			else
				st = -1;
			if (st == 3)
				oks++;
			bol = ch == '\n';
		}
	}
}

/* Idle connections hold no one up: with every slot held by idle clients a
 * new one is answered at once (the one idle longest makes room; it used to
 * get "error EBUSY too many clients" for the 10 s timeout). */
START_TEST(test_idle_clients)
{
	static char buf[1 << 16];
	struct env e;
	int fds[9];

	env_open(&e);
	/* Eight idle clients, each answered once, in order. */
	for (int i = 0; i < 8; i++) {
		fds[i] = dial(e.path);
		ck_assert_int_ge(fds[i], 0);
		say(fds[i], "ping\n", 5);
		response(fds[i], buf, sizeof(buf));
		ck_assert_str_eq(buf, "pong\nok\n");
	}
	fds[8] = dial(e.path);
	ck_assert_int_ge(fds[8], 0);
	say(fds[8], "ping\n", 5);
	response(fds[8], buf, sizeof(buf));
	ck_assert_str_eq(buf, "pong\nok\n");
	/* The one idle longest gave its slot; the others are still served. */
	closed(fds[0]);
	for (int i = 1; i < 9; i++) {
		say(fds[i], "ping\n", 5);
		response(fds[i], buf, sizeof(buf));
		ck_assert_str_eq(buf, "pong\nok\n");
	}
	for (int i = 0; i < 9; i++)
		close(fds[i]);
	env_close(&e);
}
END_TEST

/* A client that asks for more than its socket holds and reads none of it:
 * another is answered meanwhile, and the first, reading at last, gets it
 * all (the server used to block in send(2) on it, then drop it). */
START_TEST(test_stalled_reader)
{
	static char buf[1 << 16];
	struct text want = {0};
	struct env e;
	int slow, quick, nreq;

	env_open(&e);
	ck_assert_int_eq(kvs_metrics_write(e.m, text_cb, &want), 0);
	nreq = (int)((4u << 20) / want.len) + 1;
	free(want.p);
	ck_assert_int_le(nreq * 8, (int)sizeof(buf));
	for (int i = 0; i < nreq; i++)
		memcpy(buf + 8 * i, "metrics\n", 8);
	slow = dial(e.path);
	ck_assert_int_ge(slow, 0);
	say(slow, buf, (size_t)nreq * 8);	/* one write: the socket holds it */
	quick = dial(e.path);
	ck_assert_int_ge(quick, 0);
	say(quick, "ping\n", 5);
	response(quick, buf, sizeof(buf));
	ck_assert_str_eq(buf, "pong\nok\n");
	drain_responses(slow, nreq);
	say(slow, "ping\n", 5);
	response(slow, buf, sizeof(buf));
	ck_assert_str_eq(buf, "pong\nok\n");
	close(slow);
	close(quick);
	env_close(&e);
}
END_TEST

static Suite *ctl_suite(void)
{
	Suite *s = suite_create("ctl");
	TCase *tc = tcase_create("ctl");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_tools);
	tcase_add_test(tc, test_protocol);
	tcase_add_test(tc, test_start_errors);
	tcase_add_test(tc, test_pool_limit);
	tcase_add_test(tc, test_parse_size);
	tcase_add_test(tc, test_tool_timeout);
	tcase_add_test(tc, test_idle_clients);
	tcase_add_test(tc, test_stalled_reader);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(ctl_suite());
}
