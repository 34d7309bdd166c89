/* SPDX-License-Identifier: MIT */
/*
 * tests/tier/test_store_redis.c - the Redis storage backend against real
 * redis-servers the suite starts itself (loopback TCP on a free port and a
 * unix socket, no persistence, a temporary directory) and stops at the end:
 * round trips bit for bit with values full of CR, LF and NUL bytes, pages
 * of 4 KiB to 2 MiB in batches of 1 to 256, NX, key prefixes and TTLs,
 * AUTH, SELECT, URIs, values corrupted in Redis, a server stopped or
 * killed between calls and during one, and restarted, the back-off after
 * a failed connect, a connection to itself, the fault wrapper over a redis
 * store, and several threads on one store.
 *
 * A second, raw hiredis connection looks at what the store wrote.  The
 * suite defines connect(2), which hiredis's calls reach before libc's: it
 * counts the connects to one port and can turn the next one into a real
 * self-connection.  Exit 77 when no redis-server is installed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "testutil.h"

/* ------------------------------------------------------------ connect */

/* Connects to 127.0.0.1:hook_port are counted in hook_calls; with
 * hook_self set, the next one binds the socket to that very address first,
 * so that the connect meets itself (TCP's simultaneous open), which is
 * what happens by chance when nothing listens on an ephemeral port. */
static _Atomic int hook_port, hook_calls;
static _Atomic bool hook_self;

int connect(int fd, const struct sockaddr *a, socklen_t l)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);
	const struct sockaddr_in *in = (const struct sockaddr_in *)a;

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "connect");
	if (a && a->sa_family == AF_INET && l >= sizeof(*in) && hook_port &&
	    ntohs(in->sin_port) == hook_port) {
		hook_calls++;
		if (hook_self) {
			int one = 1;

			hook_self = false;
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (bind(fd, a, l) != 0)
				return -1;
		}
	}
	return real(fd, a, l);
}

/* ------------------------------------------------------------ servers */

struct srv {
	pid_t pid;
	int port;			/* 0: unix socket only */
	char dir[64];
	char sock[128];			/* "" : TCP only */
	char pass[64];
};

static char redis_bin[512];
static struct srv main_srv;

static bool find_redis(void)
{
	const char *e = getenv("REDIS_SERVER");
	const char *dirs[] = {"/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"};
	char *path, *tok, *save = NULL;
	size_t i;

	if (e && *e && access(e, X_OK) == 0) {
		snprintf(redis_bin, sizeof(redis_bin), "%s", e);
		return true;
	}
	path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
	for (tok = path ? strtok_r(path, ":", &save) : NULL; tok; tok = strtok_r(NULL, ":", &save)) {
		snprintf(redis_bin, sizeof(redis_bin), "%s/redis-server", tok);
		if (access(redis_bin, X_OK) == 0) {
			free(path);
			return true;
		}
	}
	free(path);
	for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(redis_bin, sizeof(redis_bin), "%s/redis-server", dirs[i]);
		if (access(redis_bin, X_OK) == 0)
			return true;
	}
	return false;
}

/* A loopback port nothing listens on (for now). */
static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static redisContext *raw_connect(const struct srv *v)
{
	struct timeval tv = {1, 0};
	redisContext *c = v->port ? redisConnectWithTimeout("127.0.0.1", v->port, tv)
				  : redisConnectUnixWithTimeout(v->sock, tv);

	if (c && c->err) {
		redisFree(c);
		return NULL;
	}
	if (c && v->pass[0]) {
		redisReply *r = redisCommand(c, "AUTH %s", v->pass);

		freeReplyObject(r);
	}
	return c;
}

/* Start (or restart, same port and directory) @v's server and wait until
 * it answers. */
static void srv_start(struct srv *v)
{
	char port[16], log[128];
	const char *argv[32];
	pid_t parent = getpid();
	int n = 0, i;

	if (!v->dir[0]) {
		snprintf(v->dir, sizeof(v->dir), "/tmp/kvs-redis-XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(v->dir));
	}
	snprintf(port, sizeof(port), "%d", v->port);
	snprintf(log, sizeof(log), "%s/log", v->dir);
	argv[n++] = redis_bin;
	argv[n++] = "--port";
	argv[n++] = port;
	argv[n++] = "--bind";
	argv[n++] = "127.0.0.1";
	argv[n++] = "--save";
	argv[n++] = "";
	argv[n++] = "--appendonly";
	argv[n++] = "no";
	argv[n++] = "--dir";
	argv[n++] = v->dir;
	argv[n++] = "--logfile";
	argv[n++] = log;
	argv[n++] = "--daemonize";
	argv[n++] = "no";
	if (v->sock[0]) {
		argv[n++] = "--unixsocket";
		argv[n++] = v->sock;
		argv[n++] = "--unixsocketperm";
		argv[n++] = "700";
	}
	if (v->pass[0]) {
		argv[n++] = "--requirepass";
		argv[n++] = v->pass;
	}
	argv[n] = NULL;
	v->pid = fork();
	ck_assert_int_ge(v->pid, 0);
	if (v->pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		/* Dies with the test, whatever ends it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(redis_bin, (char *const *)argv);
		_exit(127);
	}
	for (i = 0; i < 1000; i++) {
		redisContext *c = raw_connect(v);
		redisReply *r = c ? redisCommand(c, "PING") : NULL;
		bool up = r && r->type == REDIS_REPLY_STATUS;

		freeReplyObject(r);
		if (c)
			redisFree(c);
		if (up)
			return;
		ck_assert_int_eq(waitpid(v->pid, NULL, WNOHANG), 0); /* still running */
		usleep(10000);
	}
	ck_abort_msg("redis-server did not answer");
}

static void srv_kill(struct srv *v)
{
	if (v->pid > 0) {
		kill(v->pid, SIGKILL);
		waitpid(v->pid, NULL, 0);
		v->pid = 0;
	}
}

static void srv_cleanup(struct srv *v)
{
	char p[160];

	srv_kill(v);
	if (!v->dir[0])
		return;
	snprintf(p, sizeof(p), "%s/log", v->dir);
	unlink(p);
	if (v->sock[0])
		unlink(v->sock);
	snprintf(p, sizeof(p), "%s/dump.rdb", v->dir);
	unlink(p);
	rmdir(v->dir);
	v->dir[0] = 0;
}

/* A TCP server on a free port, with a password if @pass. */
static void srv_tcp(struct srv *v, const char *pass)
{
	memset(v, 0, sizeof(*v));
	v->port = free_port();
	if (pass)
		snprintf(v->pass, sizeof(v->pass), "%s", pass);
	srv_start(v);
}

static void main_setup(void)
{
	memset(&main_srv, 0, sizeof(main_srv));
	main_srv.port = free_port();
	snprintf(main_srv.dir, sizeof(main_srv.dir), "/tmp/kvs-redis-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(main_srv.dir));
	snprintf(main_srv.sock, sizeof(main_srv.sock), "%s/sock", main_srv.dir);
	srv_start(&main_srv);
}

static void main_teardown(void)
{
	srv_cleanup(&main_srv);
}

/* ------------------------------------------------------------ helpers */

static char *uri_of(const struct srv *v, char *buf, size_t n)
{
	snprintf(buf, n, "redis://127.0.0.1:%d", v->port);
	return buf;
}

static uint32_t retry_ms;	/* attr.retry_ms of the next open_store() */

static kvs_store_t *open_store(const char *uri, size_t page_bytes, const char *prefix,
			       uint32_t ttl, const char *pass, uint32_t timeout_ms)
{
	kvs_store_attr_t a;

	kvs_store_attr_init(&a);
	a.retry_ms = retry_ms;
	a.page_bytes = page_bytes;
	a.key_prefix = prefix;
	a.ttl_s = ttl;
	a.password = pass;
	if (timeout_ms)
		a.timeout_ms = timeout_ms;
	return kvs_store_open(uri, &a);
}

static void make_keys(kvs_page_key_t *k, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	size_t i, j;

	for (i = 0; i < n; i++)
		for (j = 0; j < KVS_PAGE_KEY_BYTES; j++)
			k[i].b[j] = (uint8_t)tu_rng(&x);
}

/* Bytes that a text protocol would trip on: CR, LF, NUL, a fake RESP
 * reply, then random bytes with more of them. */
static void fill_nasty(uint8_t *p, size_t n, uint64_t seed)
{
	static const char resp[] = "\r\n$-1\r\n*3\r\n\0\r\n+OK\r\n";
	uint64_t x = seed * 0xff51afd7ed558ccdull + 7;
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t r = tu_rng(&x);

		p[i] = (uint8_t)r;
		if ((r >> 8) % 4 == 0)
			p[i] = "\r\n\0"[(r >> 16) % 3];
	}
	memcpy(p, resp, n < sizeof(resp) ? n : sizeof(resp));
	if (n >= 2) {
		p[n - 2] = '\r';
		p[n - 1] = '\n';
	}
}

static uint64_t st(kvs_store_t *s, enum kvs_store_stat i)
{
	return kvs_store_stat(s, i);
}

/* The Redis key of @k in the default namespace with pages of @page_bytes:
 * prefix, 64 hex digits, the namespace, and "." and its fingerprint: the
 * first 8 bytes, little-endian, of SHA-256 of
 * "{model}\n{rank}\n{size}\n{layout}\n{page_bytes}\n{salt}". */
static void key_name(char *buf, size_t n, const char *prefix, const kvs_page_key_t *k,
		     size_t page_bytes)
{
	char hex[2 * KVS_PAGE_KEY_BYTES + 1], ns[128];
	unsigned char d[SHA256_DIGEST_LENGTH];
	uint64_t fp;
	int len;

	kvs_page_key_hex(k, hex);
	len = snprintf(ns, sizeof(ns), "default\n0\n1\n%d\n%zu\n", KVS_HPOOL_PAGE_FIRST,
		       page_bytes);
	SHA256((const unsigned char *)ns, (size_t)len, d);
	memcpy(&fp, d, 8);
	snprintf(buf, n, "%s%s_default_0_1.%016llx", prefix ? prefix : "", hex,
		 (unsigned long long)fp);
}

static long long raw_int(redisContext *c, const char *cmd, const char *key)
{
	redisReply *r = redisCommand(c, "%s %s", cmd, key);
	long long v;

	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
	v = r->integer;
	freeReplyObject(r);
	return v;
}

struct pages {
	size_t n, bytes;
	kvs_page_key_t *keys;
	uint8_t **in, **out;
};

static void pages_make(struct pages *p, size_t n, size_t bytes, uint64_t seed)
{
	size_t i;

	p->n = n;
	p->bytes = bytes;
	p->keys = calloc(n, sizeof(*p->keys));
	p->in = calloc(n, sizeof(*p->in));
	p->out = calloc(n, sizeof(*p->out));
	ck_assert(p->keys && p->in && p->out);
	make_keys(p->keys, n, seed);
	for (i = 0; i < n; i++) {
		p->in[i] = malloc(bytes);
		p->out[i] = calloc(1, bytes);
		ck_assert(p->in[i] && p->out[i]);
		fill_nasty(p->in[i], bytes, seed * 1000 + i);
	}
}

static void pages_free(struct pages *p)
{
	size_t i;

	for (i = 0; i < p->n; i++) {
		free(p->in[i]);
		free(p->out[i]);
	}
	free(p->keys);
	free(p->in);
	free(p->out);
}

static ssize_t set_all(kvs_store_t *s, struct pages *p)
{
	return kvs_store_set(s, p->keys, p->n, (const void *const *)p->in);
}

static ssize_t get_all(kvs_store_t *s, struct pages *p)
{
	size_t i;

	for (i = 0; i < p->n; i++)
		memset(p->out[i], 0, p->bytes);
	return kvs_store_get(s, p->keys, p->n, (void *const *)p->out);
}

static void check_same(struct pages *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		ck_assert_msg(memcmp(p->in[i], p->out[i], p->bytes) == 0, "page %zu differs", i);
}

/* ------------------------------------------------------------ tests */

/* set, exists, get bit for bit, NX, prefixes of hits. */
static void roundtrip(size_t bytes, size_t n, uint64_t seed)
{
	char uri[64], prefix[64];
	struct pages p;
	kvs_page_key_t *mix;
	kvs_store_t *s;
	size_t k;

	snprintf(prefix, sizeof(prefix), "rt:%zu:%zu:", bytes, n);
	s = open_store(uri_of(&main_srv, uri, sizeof(uri)), bytes, prefix, 0, NULL, 0);
	ck_assert_ptr_nonnull(s);
	pages_make(&p, n, bytes, seed);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, n), 0);
	ck_assert_int_eq(get_all(s, &p), 0);
	ck_assert_int_eq(set_all(s, &p), (ssize_t)n);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_set_stored), n);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_written), n * bytes);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, n), (ssize_t)n);
	ck_assert_int_eq(get_all(s, &p), (ssize_t)n);
	check_same(&p, n);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_read), n * bytes);
	/* Present keys are not rewritten. */
	ck_assert_int_eq(set_all(s, &p), (ssize_t)n);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_set_stored), n);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_set_skipped), n);
	/* An absent key at k ends both counts there. */
	k = n / 2;
	mix = malloc(n * sizeof(*mix));
	memcpy(mix, p.keys, n * sizeof(*mix));
	make_keys(&mix[k], 1, seed + 99991);
	ck_assert_int_eq(kvs_store_exists(s, mix, n), (ssize_t)k);
	ck_assert_int_eq(kvs_store_get(s, mix, n, (void *const *)p.out), (ssize_t)k);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), 0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), 0);
	free(mix);
	pages_free(&p);
	kvs_store_close(s);
}

START_TEST(test_roundtrip)
{
	static const size_t batches[] = {1, 7, 32, 256};
	size_t b;

	for (b = 0; b < 4; b++) {
		roundtrip(4096, batches[b], 1 + b);
		roundtrip(64 << 10, (size_t)tu_scaled((long)batches[b], batches[b] < 8 ? (long)batches[b] : 8), 11 + b);
	}
	/* 2 MiB pages: batches of 1, 7, 32 (fewer under valgrind). */
	roundtrip(2 << 20, 1, 21);
	roundtrip(2 << 20, 7, 22);
	roundtrip(2 << 20, (size_t)tu_scaled(32, 4), 23);
	/* Odd sizes: the header and value split anywhere. */
	roundtrip(1, 3, 31);
	roundtrip(4097, 5, 32);
}
END_TEST

START_TEST(test_prefix_ttl)
{
	char uri[64], key[256];
	struct pages p;
	kvs_store_t *s, *s2, *s3;
	redisContext *c = raw_connect(&main_srv);
	long long ttl;
	size_t i;

	ck_assert_ptr_nonnull(c);
	uri_of(&main_srv, uri, sizeof(uri));
	pages_make(&p, 3, 8192, 41);
	s = open_store(uri, 8192, "pfx:", 120, NULL, 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(set_all(s, &p), 3);
	for (i = 0; i < 3; i++) {
		key_name(key, sizeof(key), "pfx:", &p.keys[i], 8192);
		ck_assert_int_eq(raw_int(c, "EXISTS", key), 1);
		ck_assert_int_eq(raw_int(c, "STRLEN", key), 64 + 8192);
		ttl = raw_int(c, "TTL", key);
		ck_assert_msg(ttl > 100 && ttl <= 120, "ttl %lld", ttl);
	}
	/* Another prefix, or none, is another key space. */
	s2 = open_store(uri, 8192, "other:", 0, NULL, 0);
	ck_assert_ptr_nonnull(s2);
	ck_assert_int_eq(kvs_store_exists(s2, p.keys, 3), 0);
	s3 = open_store(uri, 8192, NULL, 0, NULL, 0);
	ck_assert_ptr_nonnull(s3);
	ck_assert_int_eq(kvs_store_exists(s3, p.keys, 3), 0);
	ck_assert_int_eq(set_all(s3, &p), 3);
	key_name(key, sizeof(key), NULL, &p.keys[0], 8192);
	ck_assert_int_eq(raw_int(c, "TTL", key), -1); /* no TTL: none set */
	ck_assert_int_eq(get_all(s2, &p), 0);
	ck_assert_int_eq(get_all(s3, &p), 3);
	check_same(&p, 3);
	for (i = 0; i < 3; i++) {
		key_name(key, sizeof(key), NULL, &p.keys[i], 8192);
		raw_int(c, "DEL", key);
	}
	kvs_store_close(s);
	kvs_store_close(s2);
	kvs_store_close(s3);
	pages_free(&p);
	redisFree(c);
}
END_TEST

START_TEST(test_auth)
{
	/* A password that needs %-encoding in a URI. */
	static const char pw[] = "a@b:c/d%e";
	char uri[128];
	struct srv v;
	struct pages p;
	kvs_store_t *s;

	srv_tcp(&v, pw);
	pages_make(&p, 4, 4096, 51);
	uri_of(&v, uri, sizeof(uri));
	errno = 0;
	ck_assert_ptr_null(open_store(uri, 4096, NULL, 0, NULL, 0));
	ck_assert_int_eq(errno, EACCES);
	errno = 0;
	ck_assert_ptr_null(open_store(uri, 4096, NULL, 0, "wrong", 0));
	ck_assert_int_eq(errno, EACCES);
	snprintf(uri, sizeof(uri), "redis://:wrong@127.0.0.1:%d", v.port);
	errno = 0;
	ck_assert_ptr_null(open_store(uri, 4096, NULL, 0, NULL, 0));
	ck_assert_int_eq(errno, EACCES);
	/* attr.password wins over the URI's. */
	s = open_store(uri, 4096, NULL, 0, pw, 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(set_all(s, &p), 4);
	kvs_store_close(s);
	snprintf(uri, sizeof(uri), "redis://:a%%40b%%3Ac%%2Fd%%25e@127.0.0.1:%d/0", v.port);
	s = open_store(uri, 4096, NULL, 0, NULL, 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(get_all(s, &p), 4);
	check_same(&p, 4);
	/* Reconnecting authenticates again. */
	srv_kill(&v);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 0);
	srv_start(&v);
	ck_assert_int_eq(set_all(s, &p), 4);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_reconnects), 1);
	ck_assert_int_eq(get_all(s, &p), 4);
	check_same(&p, 4);
	kvs_store_close(s);
	/* ACL user "default" with the password. */
	snprintf(uri, sizeof(uri), "redis://default:a%%40b%%3Ac%%2Fd%%25e@127.0.0.1:%d", v.port);
	s = open_store(uri, 4096, NULL, 0, NULL, 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 4);
	kvs_store_close(s);
	pages_free(&p);
	srv_cleanup(&v);
}
END_TEST

START_TEST(test_uri)
{
	static const char *const bad[] = {
		"redis://", "redis://:6379", "redis://127.0.0.1:", "redis://127.0.0.1:x",
		"redis://127.0.0.1:0", "redis://127.0.0.1:65536", "redis://127.0.0.1:6379/x",
		"redis://127.0.0.1:6379/1/2", "redis://127.0.0.1?db=1", "redis://pass@127.0.0.1",
		"redis://:%zz@127.0.0.1", "redis://[::1", "redis+unix://", "redis+unix://rel/sock",
		"redis+unix:///tmp/x?db=", "redis+unix:///tmp/x?db=a", "redis+unix:///tmp/x?foo=1",
	};
	char uri[128], key[256];
	struct pages p;
	kvs_store_t *s;
	redisContext *c;
	redisReply *r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		ck_assert_msg(open_store(bad[i], 4096, NULL, 0, NULL, 0) == NULL, "%s", bad[i]);
		ck_assert_msg(errno == EINVAL, "%s: errno %d", bad[i], errno);
	}
	/* Nothing listening. */
	snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d", free_port());
	errno = 0;
	ck_assert_ptr_null(open_store(uri, 4096, NULL, 0, NULL, 0));
	ck_assert_int_eq(errno, ECONNREFUSED);
	snprintf(uri, sizeof(uri), "redis+unix://%s/nosock", main_srv.dir);
	errno = 0;
	ck_assert_ptr_null(open_store(uri, 4096, NULL, 0, NULL, 0));
	ck_assert_int_eq(errno, ENOENT);
	/* A database out of the server's range. */
	snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d/999", main_srv.port);
	errno = 0;
	ck_assert_ptr_null(open_store(uri, 4096, NULL, 0, NULL, 0));
	ck_assert_int_eq(errno, EINVAL);
	/* /db selects; "[::1]"-style brackets and a trailing slash parse. */
	snprintf(uri, sizeof(uri), "redis://[127.0.0.1]:%d/5", main_srv.port);
	s = open_store(uri, 4096, "db:", 0, NULL, 0);
	ck_assert_ptr_nonnull(s);
	pages_make(&p, 2, 4096, 61);
	ck_assert_int_eq(set_all(s, &p), 2);
	kvs_store_close(s);
	c = raw_connect(&main_srv);
	ck_assert_ptr_nonnull(c);
	key_name(key, sizeof(key), "db:", &p.keys[0], 4096);
	ck_assert_int_eq(raw_int(c, "EXISTS", key), 0);
	r = redisCommand(c, "SELECT 5");
	freeReplyObject(r);
	ck_assert_int_eq(raw_int(c, "EXISTS", key), 1);
	raw_int(c, "DEL", key);
	redisFree(c);
	snprintf(uri, sizeof(uri), "redis://localhost:%d/", main_srv.port);
	s = open_store(uri, 4096, "db:", 0, NULL, 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 2), 0);
	kvs_store_close(s);
	pages_free(&p);
}
END_TEST

START_TEST(test_unix)
{
	char uri[256];
	struct pages p;
	kvs_store_t *s, *t;

	pages_make(&p, 16, 32 << 10, 71);
	snprintf(uri, sizeof(uri), "redis+unix://%s", main_srv.sock);
	s = open_store(uri, 32 << 10, "unix:", 0, NULL, 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(set_all(s, &p), 16);
	ck_assert_int_eq(get_all(s, &p), 16);
	check_same(&p, 16);
	/* The same server over TCP sees the same keys. */
	t = open_store(uri_of(&main_srv, uri, sizeof(uri)), 32 << 10, "unix:", 0, NULL, 0);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(kvs_store_exists(t, p.keys, 16), 16);
	kvs_store_close(t);
	kvs_store_close(s);
	/* ?db=N */
	snprintf(uri, sizeof(uri), "redis+unix://%s?db=3", main_srv.sock);
	s = open_store(uri, 32 << 10, "unix:", 0, NULL, 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 16), 0);
	ck_assert_int_eq(set_all(s, &p), 16);
	ck_assert_int_eq(get_all(s, &p), 16);
	check_same(&p, 16);
	kvs_store_close(s);
	pages_free(&p);
}
END_TEST

/* Killed between calls: every page of the next calls misses, counted;
 * SIGPIPE (writing a large SET into the dead connection) does not kill us;
 * restarted on the same port, the next call reconnects. */
START_TEST(test_kill_restart)
{
	char uri[64];
	struct srv v;
	struct pages p;
	kvs_store_t *s;
	uint64_t io;

	srv_tcp(&v, NULL);
	pages_make(&p, 32, 64 << 10, 81);
	retry_ms = 1; /* the back-off's window: short, waited out below */
	s = open_store(uri_of(&v, uri, sizeof(uri)), 64 << 10, NULL, 0, NULL, 0);
	retry_ms = 0;
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(set_all(s, &p), 32);
	srv_kill(&v);
	/* The first call after the kill writes 2 MiB into a closed connection. */
	make_keys(p.keys, 32, 82);
	ck_assert_int_eq(set_all(s, &p), 0);
	io = st(s, KVS_STORE_STAT_io_errors);
	ck_assert_uint_eq(io, 32);
	ck_assert_int_eq(get_all(s, &p), 0);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 32), 0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), io + 64);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_reconnects), 0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_get_misses), 32);
	srv_start(&v);
	/* Calls fail at once until the back-off's window closes. */
	for (int i = 0; i < 10000 && st(s, KVS_STORE_STAT_reconnects) == 0; i++) {
		ck_assert_int_eq(kvs_store_exists(s, p.keys, 32), 0); /* no persistence */
		usleep(1000);
	}
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_reconnects), 1);
	io = st(s, KVS_STORE_STAT_io_errors);
	ck_assert_int_eq(set_all(s, &p), 32);
	ck_assert_int_eq(get_all(s, &p), 32);
	check_same(&p, 32);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), io);
	kvs_store_close(s);
	pages_free(&p);
	srv_cleanup(&v);
}
END_TEST

/* A server gone: after a failed connect, calls make no connection until
 * the back-off's window closes, however many come; then one connect a
 * window; one that works ends it. */
START_TEST(test_backoff)
{
	char uri[64];
	struct srv v;
	struct pages p;
	kvs_store_t *s;
	uint64_t io;
	int i, n = 0;

	srv_tcp(&v, NULL);
	pages_make(&p, 4, 4096, 121);
	uri_of(&v, uri, sizeof(uri));
	retry_ms = 3600u * 1000u; /* an hour: every call below is inside it */
	s = open_store(uri, 4096, NULL, 0, NULL, 0);
	retry_ms = 0;
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(set_all(s, &p), 4);
	srv_kill(&v);
	hook_calls = 0;
	hook_port = v.port;
	/* The first call finds its connection dead (no connect); the next
	 * connects, is refused, and opens the window. */
	for (i = 0; i < 30; i++) {
		ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 0);
		ck_assert_int_eq(get_all(s, &p), 0);
		make_keys(p.keys, 4, 122 + (uint64_t)i);
		ck_assert_int_eq(set_all(s, &p), 0);
		n += 12;
	}
	ck_assert_int_eq(hook_calls, 1);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), (uint64_t)n);
	/* Back on its port, but the window is still open: no connect yet. */
	srv_start(&v);
	hook_calls = 0;
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 0);
	ck_assert_int_eq(hook_calls, 0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_reconnects), 0);
	kvs_store_close(s);

	/* A short window closes: connects come again, one a window, and one
	 * that works ends the back-off. */
	retry_ms = 1;
	s = open_store(uri, 4096, NULL, 0, NULL, 0);
	retry_ms = 0;
	ck_assert_ptr_nonnull(s);
	srv_kill(&v);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 0); /* the dead connection */
	hook_calls = 0;
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 0); /* refused */
	ck_assert_int_eq(hook_calls, 1);
	for (i = 0; i < 10000 && hook_calls < 3; i++) {
		ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 0);
		usleep(1000);
	}
	ck_assert_int_ge(hook_calls, 3);
	srv_start(&v);
	for (i = 0; i < 10000 && st(s, KVS_STORE_STAT_reconnects) == 0; i++) {
		kvs_store_exists(s, p.keys, 4);
		usleep(1000);
	}
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_reconnects), 1);
	io = st(s, KVS_STORE_STAT_io_errors);
	ck_assert_int_eq(set_all(s, &p), 4);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 4);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), io);
	hook_port = 0;
	kvs_store_close(s);
	pages_free(&p);
	srv_cleanup(&v);
}
END_TEST

/* The suite's way of making a self-connection works: a socket bound to a
 * port and connected to its own address is connected to itself. */
START_TEST(test_self_connect_raw)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)},
			   me, peer;
	socklen_t l = sizeof(a), lm = sizeof(me), lp = sizeof(peer);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&me, &lm), 0);
	ck_assert_int_eq(getpeername(fd, (struct sockaddr *)&peer, &lp), 0);
	ck_assert_int_eq(me.sin_port, peer.sin_port);
	ck_assert_int_eq(me.sin_addr.s_addr, peer.sin_addr.s_addr);
	close(fd);
}
END_TEST

/* The server's port, nothing listening on it, and the store's reconnect
 * connected to itself: refused and closed, not taken for the server (it
 * would echo the PING), so the port is free and the server comes back on
 * it; open refuses a self-connection as well (ECONNREFUSED). */
START_TEST(test_self_connect)
{
	char uri[64];
	struct srv v;
	struct pages p;
	kvs_store_t *s;
	int i;

	srv_tcp(&v, NULL);
	pages_make(&p, 4, 4096, 131);
	uri_of(&v, uri, sizeof(uri));
	retry_ms = 1;
	s = open_store(uri, 4096, NULL, 0, NULL, 0);
	retry_ms = 0;
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(set_all(s, &p), 4);
	srv_kill(&v);
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 0); /* the dead connection */
	hook_calls = 0;
	hook_port = v.port;
	hook_self = true;
	ck_assert_int_eq(kvs_store_exists(s, p.keys, 4), 0);
	ck_assert_int_eq(hook_calls, 1);
	ck_assert(!hook_self);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_reconnects), 0);
	hook_port = 0;
	srv_start(&v); /* the port is free */
	for (i = 0; i < 10000 && st(s, KVS_STORE_STAT_reconnects) == 0; i++) {
		kvs_store_exists(s, p.keys, 4);
		usleep(1000);
	}
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_reconnects), 1);
	ck_assert_int_eq(set_all(s, &p), 4);
	ck_assert_int_eq(get_all(s, &p), 4);
	check_same(&p, 4);
	kvs_store_close(s);
	/* Open. */
	srv_kill(&v);
	hook_port = v.port;
	hook_self = true;
	errno = 0;
	ck_assert_ptr_null(open_store(uri, 4096, NULL, 0, NULL, 0));
	ck_assert_int_eq(errno, ECONNREFUSED);
	ck_assert(!hook_self);
	hook_port = 0;
	srv_start(&v);
	s = open_store(uri, 4096, NULL, 0, NULL, 0);
	ck_assert_ptr_nonnull(s);
	kvs_store_close(s);
	pages_free(&p);
	srv_cleanup(&v);
}
END_TEST

struct getter {
	kvs_store_t *s;
	struct pages *p;
	ssize_t r;
	double secs;
};

static void *getter_run(void *arg)
{
	struct getter *g = arg;
	double t0 = tu_seconds();

	g->r = get_all(g->s, g->p);
	g->secs = tu_seconds() - t0;
	return NULL;
}

/* A server that stops answering: the call fails within the timeout, the
 * connection is dropped (its late replies can never be taken for the next
 * call's), and the next call reconnects.  A server killed while a batch is
 * in flight on another thread: that call fails at once, not at the
 * timeout. */
START_TEST(test_stall_and_kill_in_flight)
{
	char uri[64];
	struct srv v;
	struct pages p;
	struct getter g;
	kvs_store_t *s, *slow;
	pthread_t th;
	double t0;

	srv_tcp(&v, NULL);
	pages_make(&p, 16, 256 << 10, 91);
	uri_of(&v, uri, sizeof(uri));
	s = open_store(uri, 256 << 10, NULL, 0, NULL, 300);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(set_all(s, &p), 16);
	kill(v.pid, SIGSTOP);
	/* A server that takes the connection but never answers. */
	t0 = tu_seconds();
	errno = 0;
	ck_assert_ptr_null(open_store(uri, 256 << 10, NULL, 0, NULL, 300));
	ck_assert_int_eq(errno, ETIMEDOUT);
	ck_assert_double_lt(tu_seconds() - t0, 10.0);
	t0 = tu_seconds();
	ck_assert_int_eq(get_all(s, &p), 0);
	ck_assert_double_lt(tu_seconds() - t0, 10.0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), 16);
	kill(v.pid, SIGCONT);
	ck_assert_int_eq(get_all(s, &p), 16);
	check_same(&p, 16);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_reconnects), 1);
	kvs_store_close(s);

	/* Killed in flight: a long timeout that the call must not wait out. */
	slow = open_store(uri, 256 << 10, NULL, 0, NULL, 60000);
	ck_assert_ptr_nonnull(slow);
	kill(v.pid, SIGSTOP);
	g.s = slow;
	g.p = &p;
	ck_assert_int_eq(pthread_create(&th, NULL, getter_run, &g), 0);
	usleep(300000); /* the getter is most likely blocked reading; either way */
	srv_kill(&v);
	pthread_join(th, NULL);
	ck_assert_int_eq(g.r, 0);
	ck_assert_double_lt(g.secs, 30.0);
	ck_assert_uint_eq(st(slow, KVS_STORE_STAT_io_errors), 16);
	srv_start(&v);
	ck_assert_int_eq(set_all(slow, &p), 16);
	ck_assert_uint_eq(st(slow, KVS_STORE_STAT_reconnects), 1);
	ck_assert_int_eq(get_all(slow, &p), 16);
	check_same(&p, 16);
	kvs_store_close(slow);
	pages_free(&p);
	srv_cleanup(&v);
}
END_TEST

/* A value changed in Redis behind the store's back: a miss, counted, and
 * the key deleted. */
START_TEST(test_corrupt)
{
	enum { SHORT, FLIP_VALUE, FLIP_HEADER, LONG, NCASE };
	char uri[64], key[256];
	struct pages p;
	kvs_store_t *s;
	redisContext *c = raw_connect(&main_srv);
	int k;

	ck_assert_ptr_nonnull(c);
	pages_make(&p, NCASE + 1, 16 << 10, 101);
	s = open_store(uri_of(&main_srv, uri, sizeof(uri)), 16 << 10, "bad:", 0, NULL, 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(set_all(s, &p), NCASE + 1);
	for (k = 0; k < NCASE; k++) {
		size_t len = 64 + p.bytes;
		redisReply *r;
		char *v;

		key_name(key, sizeof(key), "bad:", &p.keys[k], 16 << 10);
		r = redisCommand(c, "GET %s", key);
		ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
		ck_assert_uint_eq(r->len, len);
		v = malloc(len + 1);
		memcpy(v, r->str, len);
		v[len] = 'x';
		freeReplyObject(r);
		if (k == SHORT)
			len--;
		else if (k == LONG)
			len++;
		else
			v[k == FLIP_VALUE ? 64 + 1000 : 20] ^= 0x04;
		r = redisCommand(c, "SET %s %b", key, v, len);
		freeReplyObject(r);
		free(v);
		ck_assert_int_eq(kvs_store_get(s, &p.keys[k], 1, (void *const *)&p.out[k]), 0);
		ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), (uint64_t)k + 1);
		ck_assert_int_eq(raw_int(c, "EXISTS", key), 0);
	}
	/* A key of another type: a failed read, not a bad value. */
	key_name(key, sizeof(key), "bad:", &p.keys[NCASE], 16 << 10);
	raw_int(c, "DEL", key);
	freeReplyObject(redisCommand(c, "LPUSH %s x", key));
	ck_assert_int_eq(kvs_store_get(s, &p.keys[NCASE], 1, (void *const *)&p.out[NCASE]), 0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), NCASE);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), 1);
	raw_int(c, "DEL", key);
	kvs_store_close(s);
	pages_free(&p);
	redisFree(c);
}
END_TEST

/* Two namespaces whose names agree (the default model, rank and layout) but
 * whose pages differ in size share no key: each stores and reads its own
 * pages (with one key, the second's SET NX found the first's and its gets
 * missed). */
START_TEST(test_ns_keys)
{
	char uri[64], key[256];
	struct pages p1, p2;
	kvs_store_t *s1, *s2;
	redisContext *c = raw_connect(&main_srv);

	ck_assert_ptr_nonnull(c);
	pages_make(&p1, 3, 4096, 131);
	pages_make(&p2, 3, 8192, 131); /* the same page keys */
	s1 = open_store(uri_of(&main_srv, uri, sizeof(uri)), 4096, "ns:", 0, NULL, 0);
	s2 = open_store(uri, 8192, "ns:", 0, NULL, 0);
	ck_assert(s1 && s2);
	ck_assert_int_eq(set_all(s1, &p1), 3);
	ck_assert_int_eq(set_all(s2, &p2), 3);
	ck_assert_int_eq(kvs_store_exists(s2, p2.keys, 3), 3);
	ck_assert_int_eq(get_all(s1, &p1), 3);
	check_same(&p1, 3);
	ck_assert_int_eq(get_all(s2, &p2), 3);
	check_same(&p2, 3);
	for (size_t i = 0; i < 3; i++) {
		key_name(key, sizeof(key), "ns:", &p1.keys[i], 4096);
		ck_assert_int_eq(raw_int(c, "DEL", key), 1);
		key_name(key, sizeof(key), "ns:", &p2.keys[i], 8192);
		ck_assert_int_eq(raw_int(c, "DEL", key), 1);
	}
	kvs_store_close(s1);
	kvs_store_close(s2);
	pages_free(&p1);
	pages_free(&p2);
	redisFree(c);
}
END_TEST

START_TEST(test_fault_wrapper)
{
	char uri[64], key[256];
	struct pages p;
	kvs_store_t *in, *f;
	redisContext *c = raw_connect(&main_srv);

	ck_assert_ptr_nonnull(c);
	pages_make(&p, 4, 8192, 111);
	in = open_store(uri_of(&main_srv, uri, sizeof(uri)), 8192, "flt:", 0, NULL, 0);
	ck_assert_ptr_nonnull(in);
	f = kvs_store_fault_open(in);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(set_all(f, &p), 4);
	ck_assert_int_eq(kvs_store_fault_fail_nth(f, KVS_SOP_GET, 1, KVS_SFAULT_ERROR), 0);
	ck_assert_int_eq(get_all(f, &p), 0);
	ck_assert_uint_ge(st(f, KVS_STORE_STAT_io_errors), 1);
	ck_assert_int_eq(get_all(f, &p), 4);
	check_same(&p, 4);
	ck_assert_int_eq(kvs_store_fault_fail_nth(f, KVS_SOP_GET, 1, KVS_SFAULT_CORRUPT), 0);
	ck_assert_int_eq(get_all(f, &p), 0);
	ck_assert_uint_eq(st(f, KVS_STORE_STAT_checksum_fail), 1);
	key_name(key, sizeof(key), "flt:", &p.keys[0], 8192);
	ck_assert_int_eq(raw_int(c, "EXISTS", key), 0); /* removed through the backend */
	ck_assert_int_eq(kvs_store_exists(f, p.keys, 4), 0);
	ck_assert_int_eq(kvs_store_exists(f, p.keys + 1, 3), 3);
	ck_assert_int_eq(kvs_store_fault_fail_nth(f, KVS_SOP_SET, 1, KVS_SFAULT_SHORT), 0);
	ck_assert_int_eq(set_all(f, &p), 4); /* written torn */
	ck_assert_int_eq(get_all(f, &p), 0);
	ck_assert_uint_eq(st(f, KVS_STORE_STAT_checksum_fail), 2);
	kvs_store_close(f);
	kvs_store_close(in);
	pages_free(&p);
	redisFree(c);
}
END_TEST

struct worker {
	kvs_store_t *s;
	int id;
	int ok;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	struct pages p;
	long it, iters = tu_scaled(20, 3);

	pages_make(&p, 8, 16 << 10, 1000 + (uint64_t)w->id);
	w->ok = 1;
	for (it = 0; it < iters && w->ok; it++) {
		make_keys(p.keys, 8, 5000 + (uint64_t)w->id * 1000 + (uint64_t)it);
		if (set_all(w->s, &p) != 8 || kvs_store_exists(w->s, p.keys, 8) != 8 ||
		    get_all(w->s, &p) != 8)
			w->ok = 0;
		else
			for (size_t i = 0; i < 8; i++)
				if (memcmp(p.in[i], p.out[i], p.bytes))
					w->ok = 0;
	}
	pages_free(&p);
	return NULL;
}

START_TEST(test_threads)
{
	char uri[64];
	struct worker w[4];
	pthread_t th[4];
	kvs_store_t *s;
	int i;

	s = open_store(uri_of(&main_srv, uri, sizeof(uri)), 16 << 10, "mt:", 60, NULL, 0);
	ck_assert_ptr_nonnull(s);
	for (i = 0; i < 4; i++) {
		w[i] = (struct worker){s, i, 0};
		ck_assert_int_eq(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert_msg(w[i].ok, "worker %d", i);
	}
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), 0);
	kvs_store_close(s);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("store_redis");
	TCase *tc = tcase_create("redis");

	tcase_add_unchecked_fixture(tc, main_setup, main_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_roundtrip);
	tcase_add_test(tc, test_prefix_ttl);
	tcase_add_test(tc, test_auth);
	tcase_add_test(tc, test_uri);
	tcase_add_test(tc, test_unix);
	tcase_add_test(tc, test_kill_restart);
	tcase_add_test(tc, test_stall_and_kill_in_flight);
	tcase_add_test(tc, test_backoff);
	tcase_add_test(tc, test_self_connect_raw);
	tcase_add_test(tc, test_self_connect);
	tcase_add_test(tc, test_corrupt);
	tcase_add_test(tc, test_fault_wrapper);
	tcase_add_test(tc, test_ns_keys);
	tcase_add_test(tc, test_threads);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	if (!find_redis()) {
		printf("SKIP: no redis-server installed\n");
		return 77;
	}
	return tu_run(suite());
}
