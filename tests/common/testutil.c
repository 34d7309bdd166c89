/* SPDX-License-Identifier: MIT */
/* tests/common/testutil.c - helpers shared by the libcheck suites. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
