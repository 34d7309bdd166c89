/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_store_redis.c - the Redis storage backend's get and set
 * GB/s through kvs_store (batches of 32, pipelined) against what
 * redis-benchmark (-t set,get -d SIZE -P 32) gets from the same server in
 * the same run, for values of 64 KiB, 512 KiB and 2 MiB; each the median
 * of three runs.
 *
 * It starts its own redis-server on a free loopback port (no persistence).
 * kvs_store's numbers include the envelope's checksum (computed on set,
 * verified on get) and 64 more bytes per value; redis-benchmark sends the
 * same key over and over with a value of 'x's.  Exit 77 when redis-server
 * or redis-benchmark is missing.
 *
 * A figure that cannot be measured is printed as "-", with the reason on
 * stderr, and the rest go on: redis-benchmark printing nothing that
 * parses (its output is shown then) leaves its columns and the ratios
 * empty.  Exit 1 only when kvs_store itself failed (an open, or a set or
 * get that came short).
 *
 * Usage: bench_store_redis [MiB per size and round, default 256]; the
 * environment's REDIS_SERVER names the server to run.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "kvslab.h"
#include "benchutil.h"

#define BATCH 32
#define ROUNDS 3

static char server[512], benchmark[512];

static bool find_prog(const char *name, char *out, size_t n)
{
	const char *dirs[] = {"/usr/bin", "/usr/sbin", "/usr/local/bin"};
	char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL, *tok, *save = NULL;
	size_t i;

	for (tok = path ? strtok_r(path, ":", &save) : NULL; tok; tok = strtok_r(NULL, ":", &save)) {
		snprintf(out, n, "%s/%s", tok, name);
		if (access(out, X_OK) == 0) {
			free(path);
			return true;
		}
	}
	free(path);
	for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(out, n, "%s/%s", dirs[i], name);
		if (access(out, X_OK) == 0)
			return true;
	}
	return false;
}

static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static pid_t start_server(int port, const char *dir)
{
	char p[16];
	pid_t pid, parent = getpid();
	int i;

	snprintf(p, sizeof(p), "%d", port);
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		dup2(fd, 1);
		dup2(fd, 2);
		execl(server, server, "--port", p, "--bind", "127.0.0.1", "--save", "",
		      "--appendonly", "no", "--dir", dir, "--daemonize", "no", (char *)NULL);
		_exit(127);
	}
	for (i = 0; pid > 0 && i < 500; i++) {
		struct timeval tv = {1, 0};
		redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
		redisReply *r = c && !c->err ? redisCommand(c, "PING") : NULL;
		bool up = r && r->type == REDIS_REPLY_STATUS;

		freeReplyObject(r);
		if (c)
			redisFree(c);
		if (up)
			return pid;
		usleep(10000);
	}
	if (pid > 0)
		kill(pid, SIGKILL);
	return -1;
}

static void flushall(int port)
{
	struct timeval tv = {10, 0};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);

	if (c && !c->err)
		freeReplyObject(redisCommand(c, "FLUSHALL"));
	if (c)
		redisFree(c);
}

/* redis-benchmark's requests per second for SET and GET; -1 when it gave
 * neither, its last line of output (progress lines cut) in @why. */
static int run_benchmark(int port, size_t size, size_t n, double *set_rps, double *get_rps,
			 char *why, size_t why_n)
{
	char cmd[1024], line[512];
	FILE *f;
	int st;

	snprintf(cmd, sizeof(cmd), "'%s' -h 127.0.0.1 -p %d -t set,get -d %zu -P %d -n %zu -q 2>&1",
		 benchmark, port, size, BATCH, n);
	*set_rps = *get_rps = 0;
	snprintf(why, why_n, "no output");
	f = popen(cmd, "r");
	if (!f) {
		snprintf(why, why_n, "popen: %s", strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		/* "SET: 1234.56 requests per second, p50=..."; progress lines
		 * end in \r and come first. */
		char *p = strrchr(line, '\r');
		double v;

		p = p ? p + 1 : line;
		p[strcspn(p, "\n")] = 0;
		if (sscanf(p, "SET: %lf requests per second", &v) == 1 && v > 0)
			*set_rps = v;
		else if (sscanf(p, "GET: %lf requests per second", &v) == 1 && v > 0)
			*get_rps = v;
		else if (*p && strspn(p, " ") < strlen(p))
			snprintf(why, why_n, "%s", p);
	}
	st = pclose(f);
	if (*set_rps > 0 && *get_rps > 0)
		return 0;
	if (st != 0 && strcmp(why, "no output") == 0)
		snprintf(why, why_n, "exit status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return -1;
}

/* A figure, or "-" where there is none. */
static const char *fig(char *buf, size_t n, double v, bool have)
{
	if (have)
		snprintf(buf, n, "%.2f", v);
	else
		snprintf(buf, n, "-");
	return buf;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = {64 << 10, 512 << 10, 2 << 20};
	size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256, si;
	char dir[] = "/tmp/kvs-bench-redis-XXXXXX", uri[64];
	int port, rc = 0;
	pid_t pid;

	/* REDIS_SERVER (configure's find, from make bench) first, and
	 * redis-benchmark beside it. */
	if (getenv("REDIS_SERVER") && *getenv("REDIS_SERVER")) {
		char *slash;

		snprintf(server, sizeof(server), "%s", getenv("REDIS_SERVER"));
		snprintf(benchmark, sizeof(benchmark), "%s", server);
		slash = strrchr(benchmark, '/');
		if (slash)
			snprintf(slash + 1, sizeof(benchmark) - (size_t)(slash + 1 - benchmark),
				 "redis-benchmark");
	}
	if ((access(server, X_OK) != 0 && !find_prog("redis-server", server, sizeof(server))) ||
	    (access(benchmark, X_OK) != 0 &&
	     !find_prog("redis-benchmark", benchmark, sizeof(benchmark)))) {
		printf("bench_store_redis: SKIP (no redis-server or redis-benchmark)\n");
		return 77;
	}
	if (!mkdtemp(dir) || (port = free_port()) < 0 || (pid = start_server(port, dir)) < 0) {
		fprintf(stderr, "bench_store_redis: cannot start redis-server\n");
		return 1;
	}
	snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d", port);
	printf("bench_store_redis: %s, batch/pipeline %d, %zu MiB per size and round, median of %d\n",
	       uri, BATCH, mib, ROUNDS);
	printf("%8s %6s | %10s %10s | %12s %12s | %6s %6s\n", "value", "pages", "kvs set", "kvs get",
	       "r-bench set", "r-bench get", "set x", "get x");
	for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		size_t size = sizes[si], n = (mib << 20) / size, i, b, r;
		double set_gbs[ROUNDS], get_gbs[ROUNDS], rbs[ROUNDS], rbg[ROUNDS], rb_set, rb_get;
		double s_gbs, g_gbs;
		char why[256], f[4][32];
		size_t rb_ok = 0;
		bool have;
		kvs_page_key_t *keys;
		void *bufs[BATCH];
		kvs_store_attr_t a;
		kvs_store_t *s;

		n = (n + BATCH - 1) / BATCH * BATCH;
		kvs_store_attr_init(&a);
		a.page_bytes = size;
		a.timeout_ms = 30000;
		s = kvs_store_open(uri, &a);
		keys = calloc(n, sizeof(*keys));
		if (!s || !keys) {
			fprintf(stderr, "bench_store_redis: open: %s\n", strerror(errno));
			rc = 1;
			break;
		}
		for (b = 0; b < BATCH; b++) {
			bufs[b] = malloc(size);
			memset(bufs[b], (int)(b * 7 + 1), size);
		}
		for (r = 0; r < ROUNDS; r++) {
			uint64_t t0;

			for (i = 0; i < n; i++) {
				memset(&keys[i], 0, sizeof(keys[i]));
				memcpy(keys[i].b, &i, sizeof(i));
				keys[i].b[16] = (uint8_t)r;
				keys[i].b[17] = (uint8_t)si;
			}
			t0 = bench_ns();
			for (i = 0; i < n; i += BATCH)
				if (kvs_store_set(s, keys + i, BATCH, (const void *const *)bufs) != BATCH)
					rc = 1;
			set_gbs[r] = (double)(n * size) / (double)(bench_ns() - t0);
			t0 = bench_ns();
			for (i = 0; i < n; i += BATCH)
				if (kvs_store_get(s, keys + i, BATCH, bufs) != BATCH)
					rc = 1;
			get_gbs[r] = (double)(n * size) / (double)(bench_ns() - t0);
			flushall(port);
		}
		if (rc)
			fprintf(stderr, "bench_store_redis: a set or get came short\n");
		qsort(set_gbs, ROUNDS, sizeof(double), cmp_d);
		qsort(get_gbs, ROUNDS, sizeof(double), cmp_d);
		s_gbs = set_gbs[ROUNDS / 2];
		g_gbs = get_gbs[ROUNDS / 2];
		/* redis-benchmark: the median of the runs that gave numbers;
		 * none: its columns stay empty, and the reason is told. */
		for (r = 0; r < ROUNDS; r++) {
			if (run_benchmark(port, size, n, &rbs[rb_ok], &rbg[rb_ok], why,
					  sizeof(why)) == 0)
				rb_ok++;
			else
				fprintf(stderr,
					"bench_store_redis: %zu KiB: redis-benchmark gave no "
					"numbers (%s)\n",
					size >> 10, why);
			flushall(port);
		}
		have = rb_ok > 0;
		rb_set = rb_get = 0;
		if (have) {
			qsort(rbs, rb_ok, sizeof(double), cmp_d);
			qsort(rbg, rb_ok, sizeof(double), cmp_d);
			rb_set = rbs[rb_ok / 2] * (double)size / 1e9;
			rb_get = rbg[rb_ok / 2] * (double)size / 1e9;
		}
		printf("%5zu KiB %6zu | %6.2f GB/s %6.2f GB/s | %8s GB/s %8s GB/s | %6s %6s\n",
		       size >> 10, n, s_gbs, g_gbs, fig(f[0], sizeof(f[0]), rb_set, have),
		       fig(f[1], sizeof(f[1]), rb_get, have),
		       fig(f[2], sizeof(f[2]), have ? s_gbs / rb_set : 0, have),
		       fig(f[3], sizeof(f[3]), have ? g_gbs / rb_get : 0, have));
		fflush(stdout);
		flushall(port);
		for (b = 0; b < BATCH; b++)
			free(bufs[b]);
		free(keys);
		kvs_store_close(s);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	{
		char p[96];

		snprintf(p, sizeof(p), "%s/dump.rdb", dir);
		unlink(p);
		rmdir(dir);
	}
	return rc;
}
