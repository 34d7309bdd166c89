/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_storage.c - the storage tier's file backend: GB/s of
 * kvs_store_set() (fsync DATA: each object written to a temporary name,
 * fdatasync'ed, renamed) and kvs_store_get() (read and verified) of MIB
 * MiB in pages of 64 KiB, 512 KiB and 2 MiB, BATCH pages a call, against a
 * raw sequential write (open, write, fdatasync, close per object: the same
 * bytes, the same directory) and a raw read (open, read, close) of the same
 * objects, measured in the same run; medians of ROUNDS.  Reads come from
 * the page cache on both sides (the objects were just written).  Then the
 * throughput of kvs_page_hashes() (SHA-256 over the token ids, chained).
 *
 * The directory is a fresh one under $TMPDIR (or /tmp), removed at the end.
 *
 * Usage: bench_storage [ROUNDS [MIB]]   (defaults 3 and 64)
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvslab.h>

#include "benchutil.h"

#define BATCH 16

static int rounds = 3;
static size_t total = 64u << 20;
static char dir[256], uri[300];

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* Remove every file of the directory. */
static void clean(void)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[600];

	if (!d)
		die("bench_storage: opendir");
	while ((de = readdir(d)))
		if (de->d_name[0] != '.') {
			snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
			unlink(p);
		}
	closedir(d);
}

static double gbps(size_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0;
}

static void raw_write(const char *name, const void *p, size_t n)
{
	char path[600];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, p, n) != (ssize_t)n || fdatasync(fd) < 0 || close(fd) < 0)
		die("bench_storage: raw write");
}

static void raw_read(const char *name, void *p, size_t n)
{
	char path[600];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY);
	if (fd < 0 || read(fd, p, n) != (ssize_t)n || close(fd) < 0)
		die("bench_storage: raw read");
}

static void bench_size(size_t pb)
{
	size_t np = total / pb, i, j;
	uint64_t *ts = calloc((size_t)rounds, 8), *tg = calloc((size_t)rounds, 8);
	uint64_t *tw = calloc((size_t)rounds, 8), *tr = calloc((size_t)rounds, 8);
	kvs_page_key_t *keys = malloc(np * sizeof(*keys));
	uint8_t *src = malloc(np * pb), *dst = malloc(np * pb);
	void **bufs = malloc(np * sizeof(*bufs));
	const void **cbufs = malloc(np * sizeof(*cbufs));
	int32_t *tok = malloc(np * 16 * sizeof(*tok));
	kvs_store_attr_t a;
	kvs_store_t *s;
	double set_g, get_g, w_g, r_g;
	int r;

	if (!ts || !tg || !tw || !tr || !keys || !src || !dst || !bufs || !cbufs || !tok)
		die("bench_storage: malloc");
	for (i = 0; i < np * pb; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 13);
	memset(dst, 0, np * pb);
	for (i = 0; i < np; i++) {
		bufs[i] = dst + i * pb;
		cbufs[i] = src + i * pb;
	}
	kvs_store_attr_init(&a);
	a.model = "bench";
	a.page_bytes = pb;
	for (r = 0; r < rounds; r++) {
		uint64_t t0;

		/* New keys every round: a set never rewrites. */
		for (i = 0; i < np * 16; i++)
			tok[i] = (int32_t)(i + (size_t)r * 1000003u + pb);
		if (kvs_page_hashes(NULL, tok, np * 16, 16, keys) != (ssize_t)np)
			die("bench_storage: kvs_page_hashes");
		s = kvs_store_open(uri, &a);
		if (!s)
			die("bench_storage: kvs_store_open");
		t0 = bench_ns();
		for (i = 0; i < np; i += BATCH)
			if (kvs_store_set(s, keys + i, np - i < BATCH ? np - i : BATCH, cbufs + i) !=
			    (ssize_t)(np - i < BATCH ? np - i : BATCH))
				die("bench_storage: kvs_store_set");
		ts[r] = bench_ns() - t0;
		t0 = bench_ns();
		for (i = 0; i < np; i += BATCH)
			if (kvs_store_get(s, keys + i, np - i < BATCH ? np - i : BATCH, bufs + i) !=
			    (ssize_t)(np - i < BATCH ? np - i : BATCH))
				die("bench_storage: kvs_store_get");
		tg[r] = bench_ns() - t0;
		if (memcmp(src, dst, np * pb) != 0)
			die("bench_storage: get returned other bytes");
		kvs_store_close(s);
		/* The raw baseline: the same value bytes (no header, no
		 * temporary name), the same directory, one file an object. */
		t0 = bench_ns();
		for (i = 0; i < np; i++) {
			char name[64];

			snprintf(name, sizeof(name), "raw%zu", i);
			raw_write(name, src + i * pb, pb);
		}
		tw[r] = bench_ns() - t0;
		t0 = bench_ns();
		for (j = 0; j < np; j++) {
			char name[64];

			snprintf(name, sizeof(name), "raw%zu", j);
			raw_read(name, dst + j * pb, pb);
		}
		tr[r] = bench_ns() - t0;
		clean();
	}
	set_g = gbps(np * pb, bench_quantile(ts, (size_t)rounds, 0.5));
	get_g = gbps(np * pb, bench_quantile(tg, (size_t)rounds, 0.5));
	w_g = gbps(np * pb, bench_quantile(tw, (size_t)rounds, 0.5));
	r_g = gbps(np * pb, bench_quantile(tr, (size_t)rounds, 0.5));
	printf("storage file %5zu KiB x %4zu: set %6.3f GB/s (raw write+fdatasync %6.3f, %.2fx)"
	       "  get %6.3f GB/s (raw read %6.3f, %.2fx)\n",
	       pb >> 10, np, set_g, w_g, w_g > 0 ? set_g / w_g : 0, get_g, r_g,
	       r_g > 0 ? get_g / r_g : 0);
	free(ts);
	free(tg);
	free(tw);
	free(tr);
	free(keys);
	free(src);
	free(dst);
	free(bufs);
	free(cbufs);
	free(tok);
}

static void bench_hashes(void)
{
	const size_t ntok = 1u << 20;
	const uint32_t ps = 64;
	int32_t *tok = malloc(ntok * sizeof(*tok));
	kvs_page_key_t *keys = malloc(ntok / ps * sizeof(*keys));
	uint64_t *t = calloc((size_t)rounds, 8), med;
	size_t i;
	int r;

	if (!tok || !keys || !t)
		die("bench_storage: malloc");
	for (i = 0; i < ntok; i++)
		tok[i] = (int32_t)(i * 7919u % 151643u);
	for (r = 0; r < rounds; r++) {
		uint64_t t0 = bench_ns();

		if (kvs_page_hashes(NULL, tok, ntok, ps, keys) != (ssize_t)(ntok / ps))
			die("bench_storage: kvs_page_hashes");
		t[r] = bench_ns() - t0;
	}
	med = bench_quantile(t, (size_t)rounds, 0.5);
	printf("storage kvs_page_hashes: %.1f M tokens/s, %.2f GB/s of token ids, %.0f ns a "
	       "page of %u\n",
	       (double)ntok * 1e3 / (double)med, gbps(ntok * 4, med),
	       (double)med / (double)(ntok / ps), ps);
	free(tok);
	free(keys);
	free(t);
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = {64u << 10, 512u << 10, 2u << 20};
	const char *tmp = getenv("TMPDIR");

	if (argc > 1)
		rounds = atoi(argv[1]) > 0 ? atoi(argv[1]) : 1;
	if (argc > 2 && atoi(argv[2]) > 0)
		total = (size_t)atoi(argv[2]) << 20;
	snprintf(dir, sizeof(dir), "%s/kvs_bench_storage_XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		die("bench_storage: mkdtemp");
	snprintf(uri, sizeof(uri), "file://%s", dir);
	printf("storage: file backend in %s, fsync DATA, %d rounds of %zu MiB, batches of %d; "
	       "medians\n",
	       dir, rounds, total >> 20, BATCH);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		bench_size(sizes[i]);
	bench_hashes();
	clean();
	rmdir(dir);
	return 0;
}
