/* SPDX-License-Identifier: MIT */
/* tests/common/testutil.c - helpers shared by the libcheck suites. */
#include <sched.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

const char *const tu_backends[] = {"host", "cuda"};

static const char *double_path(void)
{
	const char *p = getenv("KVSLAB_CUDA_DOUBLE");

	return p && *p ? p : NULL;
}

int tu_nbackends(void)
{
	return double_path() ? 2 : 1;
}

kvs_drv_t *tu_open(int i, size_t mem_limit, unsigned int flags)
{
	return tu_open_gran(i, 0, mem_limit, flags);
}

kvs_drv_t *tu_open_gran(int i, size_t gran, size_t mem_limit, unsigned int flags)
{
	kvs_drv_attr_t attr;

	kvs_drv_attr_init(&attr);
	attr.granularity = gran;
	attr.mem_limit = mem_limit;
	attr.flags = flags;
	if (strcmp(tu_backends[i], "cuda") == 0) {
		static void *keep;

		/* Hold our own reference so the double's books outlive the
		 * driver's dlclose and can be checked after kvs_drv_close(). */
		if (!keep)
			keep = dlopen(double_path(), RTLD_NOW | RTLD_LOCAL);
		setenv("KVSLAB_LIBCUDA", double_path(), 1);
	}
	return kvs_drv_open(tu_backends[i], &attr);
}

long tu_rss_shmem(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssShmem: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

/* The host backend's chunks live in memfds named "kvslab-arena". */
#define HOST_ARENA_NAME "memfd:kvslab-arena"

int tu_host_chunk_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, HOST_ARENA_NAME))
			n++;
	fclose(f);
	return n;
}

/* Call @fn on every descriptor of an arena; the count. */
static int for_arena_fds(void (*fn)(int fd, void *arg), void *arg)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!dir)
		return -1;
	while ((de = readdir(dir))) {
		char path[300], target[300];
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		len = readlink(path, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		if (strstr(target, HOST_ARENA_NAME)) {
			n++;
			if (fn)
				fn(atoi(de->d_name), arg);
		}
	}
	closedir(dir);
	return n;
}

int tu_host_chunk_fds(void)
{
	return for_arena_fds(NULL, NULL);
}

static void add_blocks(int fd, void *arg)
{
	struct stat st;

	if (fstat(fd, &st) == 0)
		*(long *)arg += (long)st.st_blocks * 512;
}

long tu_host_chunk_bytes(void)
{
	long bytes = 0;

	if (for_arena_fds(add_blocks, &bytes) < 0)
		return -1;
	return bytes;
}

long tu_host_map_offset(uint64_t addr)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	long off = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, pgoff;

		if (!strstr(line, HOST_ARENA_NAME) ||
		    sscanf(line, "%lx-%lx %*s %lx", &lo, &hi, &pgoff) != 3)
			continue;
		if (addr >= lo && addr < hi) {
			off = (long)(pgoff + (addr - lo));
			break;
		}
	}
	fclose(f);
	return off;
}

size_t tu_double_query(const char *fn)
{
	const char *p = double_path();
	void *h;
	size_t (*q)(void);
	size_t v = 0;

	if (!p)
		return 0;
	h = dlopen(p, RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return 0;
	q = (size_t (*)(void))dlsym(h, fn);
	if (q)
		v = q();
	dlclose(h);
	return v;
}

int tu_is_double(void)
{
	static int known = -1;
	const char *p = double_path();
	void *h;

	if (known >= 0)
		return known;
	if (!p)
		return known = 0;
	/* The double exports its kvsdbl_* controls; a real libcuda has none. */
	h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return known = 0;
	known = dlsym(h, "kvsdbl_faults") != NULL;
	dlclose(h);
	return known;
}

int tu_skip(const char *name, const char *reason)
{
	size_t n = strlen(name);

	/* START_TEST(x) defines x_fn: print the name the suite knows. */
	if (n > 3 && strcmp(name + n - 3, "_fn") == 0)
		n -= 3;
	printf("SKIP %.*s: %s\n", (int)n, name, reason);
	fflush(stdout);
	return 1;
}

int tu_need_double(const char *name, int i, const char *reason)
{
	if (strcmp(tu_backends[i], "cuda") != 0 || tu_is_double())
		return 0;
	return tu_skip(name, reason);
}

/*
 * Asked in a child process: a real libcuda initialised in the parent is
 * unusable in the children check forks for each test.
 */
size_t tu_granularity(size_t host_gran)
{
	static size_t known;
	int fd[2], st;
	size_t g = 0;
	pid_t pid;

	if (known)
		return known;
	if (tu_nbackends() < 2)
		return known = host_gran;
	if (pipe(fd) != 0)
		return 0;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		kvs_drv_t *d = tu_open(1, 0, 0);

		g = d ? kvs_drv_granularity(d) : 0;
		if (d)
			kvs_drv_close(d);
		_exit(write(fd[1], &g, sizeof(g)) == (ssize_t)sizeof(g) ? 0 : 1);
	}
	close(fd[1]);
	if (pid < 0 || read(fd[0], &g, sizeof(g)) != (ssize_t)sizeof(g))
		g = 0;
	close(fd[0]);
	if (pid > 0)
		waitpid(pid, &st, 0);
	if (!g) {
		fprintf(stderr, "tu_granularity: the cuda backend did not open\n");
		exit(EXIT_FAILURE);
	}
	return known = g;
}

void tu_fill(void *p, size_t n, unsigned int seed)
{
	unsigned char *c = p;
	uint32_t x = seed * 2654435761u + 1;
	size_t i;

	for (i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		c[i] = (unsigned char)(x >> 16);
	}
}

int tu_check(const void *p, size_t n, unsigned int seed)
{
	const unsigned char *c = p;
	uint32_t x = seed * 2654435761u + 1;
	size_t i;

	for (i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		if (c[i] != (unsigned char)(x >> 16))
			return 0;
	}
	return 1;
}

long tu_scaled(long n, long min)
{
	const char *e = getenv("KVSLAB_TEST_SCALE");
	double f = e && *e ? atof(e) : 1.0;
	long v = (long)((double)n * (f > 0 ? f : 1.0));

	return v < min ? min : v;
}

double tu_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tu_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ---- the libcuda double's simulated device work --------------------------- */

/* A symbol of the loaded double, or NULL.  The driver's types are spelled
 * without cuda.h: CUresult (an enum) is int, CUcontext and CUstream are
 * pointers, CUdevice an int. */
static void *dbl_sym(const char *fn)
{
	const char *p = double_path();
	void *h, *f;

	if (!p)
		return NULL;
	h = dlopen(p, RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return NULL;
	f = dlsym(h, fn);
	/* The double stays loaded: the caller's reference (tu_open's, or
	 * the driver's) outlives this one. */
	dlclose(h);
	return f;
}

/* Make the primary context current on this thread if nothing is. */
static void dbl_bind(void)
{
	int (*get)(void **) = (int (*)(void **))dbl_sym("cuCtxGetCurrent");
	int (*retain)(void **, int) = (int (*)(void **, int))dbl_sym("cuDevicePrimaryCtxRetain");
	int (*set)(void *) = (int (*)(void *))dbl_sym("cuCtxSetCurrent");
	int (*release)(int) = (int (*)(int))dbl_sym("cuDevicePrimaryCtxRelease_v2");
	void *cur = NULL, *ctx;

	if (!get || !retain || !set || !release)
		return;
	if (get(&cur) == 0 && cur)
		return;
	if (retain(&ctx, 0) != 0)
		return;
	(void)set(ctx);
	(void)release(0);
}

int tu_dbl_kernel(uint64_t stream, uint64_t ptr, size_t n, unsigned long long ns)
{
	int (*k)(void *, unsigned long long, size_t, unsigned long long) =
		(int (*)(void *, unsigned long long, size_t, unsigned long long))
		dbl_sym("kvsdbl_kernel");

	if (!k)
		return -1;
	dbl_bind();
	return k((void *)(uintptr_t)stream, ptr, n, ns);
}

int tu_dbl_sticky(void)
{
	int (*f)(void) = (int (*)(void))dbl_sym("kvsdbl_sticky_error");

	return f ? f() : 0;
}

unsigned long tu_dbl_faults(void)
{
	unsigned long (*f)(void) = (unsigned long (*)(void))dbl_sym("kvsdbl_faults");

	return f ? f() : 0;
}

void tu_dbl_clear_sticky(void)
{
	void (*f)(void) = (void (*)(void))dbl_sym("kvsdbl_clear_sticky");

	if (f)
		f();
}

uint64_t tu_dbl_stream_create(void)
{
	int (*init)(unsigned int) = (int (*)(unsigned int))dbl_sym("cuInit");
	int (*retain)(void **, int) = (int (*)(void **, int))dbl_sym("cuDevicePrimaryCtxRetain");
	int (*set)(void *) = (int (*)(void *))dbl_sym("cuCtxSetCurrent");
	int (*release)(int) = (int (*)(int))dbl_sym("cuDevicePrimaryCtxRelease_v2");
	int (*create)(void **, unsigned int) =
		(int (*)(void **, unsigned int))dbl_sym("cuStreamCreate");
	void *ctx, *s = NULL;

	if (!init || !retain || !set || !release || !create || init(0) != 0)
		return 0;
	/* The retain is the stream's: its context must outlive it. */
	if (retain(&ctx, 0) != 0)
		return 0;
	if (set(ctx) != 0 || create(&s, 0) != 0) {
		(void)release(0);
		return 0;
	}
	return (uint64_t)(uintptr_t)s;
}

void tu_dbl_stream_destroy(uint64_t stream)
{
	int (*destroy)(void *) = (int (*)(void *))dbl_sym("cuStreamDestroy_v2");
	int (*release)(int) = (int (*)(int))dbl_sym("cuDevicePrimaryCtxRelease_v2");

	if (!stream || !destroy || !release)
		return;
	dbl_bind();
	/* A poisoned context refuses; its last release collects the stream. */
	(void)destroy((void *)(uintptr_t)stream);
	(void)release(0);
}

int tu_dbl_copy_hold(int on)
{
	void (*f)(int) = (void (*)(int))dbl_sym("kvsdbl_copy_hold");

	if (!f)
		return -1;
	f(on);
	return 0;
}

long tu_dbl_copy_release(unsigned long n)
{
	unsigned long (*f)(unsigned long) =
		(unsigned long (*)(unsigned long))dbl_sym("kvsdbl_copy_release");

	return f ? (long)f(n) : -1;
}

void tu_hiradix_settle(kvs_hiradix_t *h)
{
	kvs_hiradix_usage_t u;
	double end = tu_seconds() + 120;

	do {
		ck_assert_int_eq(kvs_hiradix_poll(h), 0);
		ck_assert_int_eq(kvs_hiradix_usage(h, &u), 0);
		if (!u.backups_pending && !u.loads_pending)
			return;
		sched_yield();
	} while (tu_seconds() < end);
	ck_abort_msg("transfers never completed in 120 s");
}

/* ---- the double's writing kernels, call counts (issue 23) ------------------- */

int tu_dbl_kernel_write(uint64_t stream, uint64_t ptr, size_t n, unsigned int seed,
			unsigned long long ns)
{
	int (*k)(void *, unsigned long long, size_t, unsigned int, unsigned long long) =
		(int (*)(void *, unsigned long long, size_t, unsigned int, unsigned long long))
		dbl_sym("kvsdbl_kernel_write");

	if (!k)
		return -1;
	dbl_bind();
	return k((void *)(uintptr_t)stream, ptr, n, seed, ns);
}

int tu_dbl_pattern_ok(const void *p, size_t n, unsigned int seed)
{
	unsigned char (*pat)(unsigned int, size_t) =
		(unsigned char (*)(unsigned int, size_t))dbl_sym("kvsdbl_pattern");
	const unsigned char *c = p;

	if (!pat)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (c[i] != pat(seed, i))
			return 0;
	return 1;
}

unsigned long tu_dbl_calls(const char *fn)
{
	unsigned long (*f)(const char *) =
		(unsigned long (*)(const char *))dbl_sym("kvsdbl_calls");

	return f ? f(fn) : 0;
}
