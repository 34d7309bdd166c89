/* SPDX-License-Identifier: MIT */
/*
 * tools/kvslab-demo.c - reserve a KV range on the default driver, map and
 * unmap pages in it, and print what happened and the driver's counters.
 *
 * Usage: kvslab-demo [-d host|cuda|auto] [-n CHUNKS]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvslab.h>

static void print_line(void *arg, const char *line)
{
	fputs(line, arg);
}

static int die(kvs_drv_t *d, const char *what)
{
	fprintf(stderr, "kvslab-demo: %s: %s%s%s\n", what, strerror(errno),
		d && *kvs_drv_strerror(d) ? " - " : "", d ? kvs_drv_strerror(d) : "");
	kvs_drv_close(d);
	return 1;
}

int main(int argc, char **argv)
{
	const char *name = NULL;
	unsigned long n = 16, i;
	kvs_drv_t *d;
	kvs_devptr_t base;
	kvs_chunk_t **chunks;
	size_t g, f, t;
	int opt;

	while ((opt = getopt(argc, argv, "d:n:h")) != -1) {
		switch (opt) {
		case 'd':
			name = optarg;
			break;
		case 'n':
			n = strtoul(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr, "usage: %s [-d host|cuda|auto] [-n CHUNKS]\n", argv[0]);
			return 2;
		}
	}
	if (n == 0 || n > 4096) {
		fprintf(stderr, "kvslab-demo: -n must be 1..4096\n");
		return 2;
	}
	d = kvs_drv_open(name, NULL);
	if (!d)
		return die(NULL, "opening the driver");
	g = kvs_drv_granularity(d);
	if (kvs_drv_mem_info(d, &f, &t) < 0)
		return die(d, "mem_info");
	printf("driver %s: granularity %zu KiB, memory %zu MiB free of %zu MiB\n",
	       kvs_drv_name(d), g >> 10, f >> 20, t >> 20);

	if (kvs_drv_reserve(d, 4 * n * g, &base) < 0)
		return die(d, "reserve");
	printf("reserved %lu MiB of KV address space at 0x%llx\n",
	       (unsigned long)(4 * n * g >> 20), (unsigned long long)base);
	chunks = calloc(n, sizeof(*chunks));
	if (!chunks)
		return die(d, "calloc");
	for (i = 0; i < n; i++) {
		if (kvs_drv_chunk_create(d, g, &chunks[i]) < 0)
			return die(d, "chunk_create");
		if (kvs_drv_map(d, base + 2 * i * g, chunks[i]) < 0)
			return die(d, "map");
		if (kvs_drv_set_access(d, base + 2 * i * g, g, KVS_ACCESS_RW) < 0)
			return die(d, "set_access");
	}
	printf("mapped %lu chunks (%lu MiB) at every other granule: %llu bytes mapped\n", n,
	       (unsigned long)(n * g >> 20),
	       (unsigned long long)kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped));
	for (i = 0; i < n; i += 2) {
		if (kvs_drv_unmap(d, base + 2 * i * g, g) < 0)
			return die(d, "unmap");
		if (kvs_drv_chunk_release(d, chunks[i]) < 0)
			return die(d, "release");
	}
	printf("unmapped and released half of them: %llu bytes mapped, peak %llu\n",
	       (unsigned long long)kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped),
	       (unsigned long long)kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped_peak));
	printf("\ncounters:\n");
	kvs_drv_stats_print(d, print_line, stdout);
	free(chunks);
	if (kvs_drv_close(d) < 0)
		return die(NULL, "close");
	printf("\nclosed the driver: the remaining mappings and the range were released\n");
	return 0;
}
