/* SPDX-License-Identifier: MIT */
/*
 * tools/kvslab-stat.c - a slabtop-like live view of a running engine's
 * kvslab: every -d seconds it fetches the metrics request of the control
 * socket (kvslab-ctl(7)), parses the Prometheus text and prints a compact
 * table per instance: the slab's memory and lists, allocations and frees
 * a second (counter deltas), then the radix, hash cache, hierarchical
 * cache, host pool, store and driver lines of what the engine registered.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvslab/metrics.h>

#include "ctl_client.h"

struct sample {
	char *name;
	char *inst;
	double v;
};

struct snap {
	struct sample *s;
	size_t n, cap;
	double t;
};

static void snap_free(struct snap *sn)
{
	for (size_t i = 0; i < sn->n; i++) {
		free(sn->s[i].name);
		free(sn->s[i].inst);
	}
	free(sn->s);
	memset(sn, 0, sizeof(*sn));
}

/* One sample line: name, then an optional {object="..."} (KVS_METRICS_LABEL),
 * then a value. */
static void parse_line(struct snap *sn, char *l)
{
	char *name = l, *inst = NULL, *p = l, *end;
	double v;

	while (*p && *p != '{' && *p != ' ')
		p++;
	if (*p == '{') {
		char *q, *w;

		*p++ = 0;
		static const char lab[] = KVS_METRICS_LABEL "=\"";

		if (strncmp(p, lab, sizeof(lab) - 1))
			return;
		q = w = inst = p + sizeof(lab) - 1;
		while (*q && *q != '"') {
			if (*q == '\\' && q[1]) {
				q++;
				*w++ = *q == 'n' ? '\n' : *q;
				q++;
			} else {
				*w++ = *q++;
			}
		}
		if (*q != '"')
			return;
		*w = 0;
		p = q + 1;
		while (*p && *p != '}')
			p++;
		if (*p != '}')
			return;
		p++;
	} else if (*p == ' ') {
		*p = 0;
	}
	else
		return;
	while (*p == ' ' || *p == 0)
		if (!*p++)
			break;
	v = strtod(p, &end);
	if (end == p)
		return;
	if (sn->n == sn->cap) {
		size_t cap = sn->cap ? sn->cap * 2 : 256;
		struct sample *s = realloc(sn->s, cap * sizeof(*s));

		if (!s)
			return;
		sn->s = s;
		sn->cap = cap;
	}
	sn->s[sn->n].name = strdup(name);
	sn->s[sn->n].inst = strdup(inst ? inst : "");
	sn->s[sn->n++].v = v;
}

static int fetch(const char *sock, int timeout_ms, struct snap *sn)
{
	struct timespec ts;
	char *data, *l, *save = NULL;

	if (cc_call("kvslab-stat", sock, "metrics", timeout_ms, &data) < 0)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	sn->t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	for (l = strtok_r(data, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
		if (*l != '#')
			parse_line(sn, l);
	free(data);
	return 0;
}

/* The value of @name for @inst, or -1 when absent. */
static double get(const struct snap *sn, const char *name, const char *inst)
{
	for (size_t i = 0; i < sn->n; i++)
		if (!strcmp(sn->s[i].name, name) && !strcmp(sn->s[i].inst, inst))
			return sn->s[i].v;
	return -1;
}

static bool has_prefix(const struct snap *sn, const char *prefix)
{
	for (size_t i = 0; i < sn->n; i++)
		if (!strncmp(sn->s[i].name, prefix, strlen(prefix)))
			return true;
	return false;
}

/* The instances with a sample of @name, in order of appearance. */
static size_t instances(const struct snap *sn, const char *name, const char **out, size_t max)
{
	size_t k = 0;

	for (size_t i = 0; i < sn->n && k < max; i++)
		if (!strcmp(sn->s[i].name, name))
			out[k++] = sn->s[i].inst;
	return k;
}

static const char *human(double b, char *buf, size_t n)
{
	static const char *u[] = {"B", "K", "M", "G", "T"};
	int i = 0;

	if (b < 0)
		return "-";
	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	snprintf(buf, n, i ? "%.1f%s" : "%.0f%s", b, u[i]);
	return buf;
}

/* A rate from two snapshots of the sum of @a and @b (b may be NULL). */
static double rate(const struct snap *now, const struct snap *prev, const char *a, const char *b,
		   const char *inst)
{
	double x1, x0;

	if (!prev || now->t <= prev->t)
		return -1;
	x1 = get(now, a, inst) + (b ? get(now, b, inst) : 0);
	x0 = get(prev, a, inst) + (b ? get(prev, b, inst) : 0);
	if (x1 < 0 || x0 < 0 || x1 < x0)
		return -1;
	return (x1 - x0) / (now->t - prev->t);
}

static void fmt_rate(double r, char *buf, size_t n)
{
	if (r < 0)
		snprintf(buf, n, "-");
	else
		snprintf(buf, n, "%.0f", r);
}

#define NAME_OR(inst) (*(inst) ? (inst) : "-")

static void show(const struct snap *sn, const struct snap *prev)
{
	const char *in[64];
	char b1[32], b2[32], b3[32], r1[32], r2[32];
	size_t k;

	k = instances(sn, "kvslab_slab_objects", in, 64);
	if (k) {
		printf("%-12s %9s %9s %9s %8s %8s %8s %10s %10s %6s\n", "SLAB", "MAPPED", "LIVE",
		       "POOLED", "PAGES", "FULL", "PARTIAL", "ALLOCS/S", "FREES/S", "FRAG");
		for (size_t i = 0; i < k; i++) {
			double mapped = get(sn, "kvslab_slab_mapped_bytes", in[i]);
			double live = get(sn, "kvslab_slab_live_bytes", in[i]);
			char frag[16];

			fmt_rate(rate(sn, prev, "kvslab_slab_alloc_fast_total",
				      "kvslab_slab_alloc_slow_total", in[i]), r1, sizeof(r1));
			fmt_rate(rate(sn, prev, "kvslab_slab_free_fast_total",
				      "kvslab_slab_free_slow_total", in[i]), r2, sizeof(r2));
			if (mapped > 0)
				snprintf(frag, sizeof(frag), "%.1f%%", 100.0 * (1 - live / mapped));
			else
				snprintf(frag, sizeof(frag), "-");
			printf("%-12s %9s %9s %9s %8.0f %8.0f %8.0f %10s %10s %6s\n", NAME_OR(in[i]),
			       human(mapped, b1, sizeof(b1)), human(live, b2, sizeof(b2)),
			       human(get(sn, "kvslab_slab_pooled_bytes", in[i]), b3, sizeof(b3)),
			       get(sn, "kvslab_slab_objects", in[i]),
			       get(sn, "kvslab_slab_slabs_full", in[i]),
			       get(sn, "kvslab_slab_slabs_partial", in[i]), r1, r2, frag);
			printf("%-12s empty %.0f unmapped %.0f, pages/slab %.0f, free pages %.0f\n", "",
			       get(sn, "kvslab_slab_slabs_empty", in[i]),
			       get(sn, "kvslab_slab_slabs_unmapped", in[i]),
			       get(sn, "kvslab_slab_objs_per_slab", in[i]),
			       get(sn, "kvslab_slab_objects_free", in[i]));
		}
	}
	k = instances(sn, "kvslab_radix_matches_total", in, 64);
	for (size_t i = 0; i < k; i++) {
		fmt_rate(rate(sn, prev, "kvslab_radix_matches_total", NULL, in[i]), r1, sizeof(r1));
		printf("radix %-6s matches %.0f (%s/s) hit tokens %.0f inserted %.0f evictions %.0f "
		       "evicted tokens %.0f\n",
		       NAME_OR(in[i]), get(sn, "kvslab_radix_matches_total", in[i]), r1,
		       get(sn, "kvslab_radix_hit_tokens_total", in[i]),
		       get(sn, "kvslab_radix_inserted_tokens_total", in[i]),
		       get(sn, "kvslab_radix_evictions_total", in[i]),
		       get(sn, "kvslab_radix_evicted_tokens_total", in[i]));
	}
	k = instances(sn, "kvslab_hcache_queries_total", in, 64);
	for (size_t i = 0; i < k; i++) {
		double q = get(sn, "kvslab_hcache_query_blocks_total", in[i]);
		double h = get(sn, "kvslab_hcache_hit_blocks_total", in[i]);

		printf("hcache %-5s cached blocks %.0f used %.0f evictions %.0f hit ratio %.1f%%\n",
		       NAME_OR(in[i]), get(sn, "kvslab_hcache_cached_blocks", in[i]),
		       get(sn, "kvslab_hcache_used_blocks", in[i]),
		       get(sn, "kvslab_hcache_evictions_total", in[i]), q > 0 ? 100.0 * h / q : 0.0);
	}
	k = instances(sn, "kvslab_hiradix_nodes", in, 64);
	for (size_t i = 0; i < k; i++)
		printf("hiradix %-4s nodes %.0f device tokens %.0f host tokens %.0f backups pending "
		       "%.0f loads pending %.0f\n",
		       NAME_OR(in[i]), get(sn, "kvslab_hiradix_nodes", in[i]),
		       get(sn, "kvslab_hiradix_device_tokens", in[i]),
		       get(sn, "kvslab_hiradix_host_tokens", in[i]),
		       get(sn, "kvslab_hiradix_backups_pending", in[i]),
		       get(sn, "kvslab_hiradix_loads_pending", in[i]));
	k = instances(sn, "kvslab_hpool_pages", in, 64);
	for (size_t i = 0; i < k; i++)
		printf("hpool %-6s pages %.0f used %.0f (peak %.0f) busy %.0f copied %s\n",
		       NAME_OR(in[i]), get(sn, "kvslab_hpool_pages", in[i]),
		       get(sn, "kvslab_hpool_pages_used", in[i]),
		       get(sn, "kvslab_hpool_pages_used_peak", in[i]),
		       get(sn, "kvslab_hpool_pages_busy", in[i]),
		       human(get(sn, "kvslab_hpool_copied_bytes_total", in[i]), b1, sizeof(b1)));
	k = instances(sn, "kvslab_store_get_pages_total", in, 64);
	for (size_t i = 0; i < k; i++)
		printf("store %-6s get hits %.0f misses %.0f set stored %.0f stored %s errors %.0f\n",
		       NAME_OR(in[i]), get(sn, "kvslab_store_get_hits_total", in[i]),
		       get(sn, "kvslab_store_get_misses_total", in[i]),
		       get(sn, "kvslab_store_set_stored_total", in[i]),
		       human(get(sn, "kvslab_store_stored_bytes", in[i]), b1, sizeof(b1)),
		       get(sn, "kvslab_store_io_errors_total", in[i]));
	k = instances(sn, "kvslab_drv_mapped_bytes", in, 64);
	for (size_t i = 0; i < k; i++)
		printf("drv %-8s mapped %s (peak %s) chunks %.0f map calls %.0f unmap calls %.0f "
		       "failed %.0f\n",
		       NAME_OR(in[i]), human(get(sn, "kvslab_drv_mapped_bytes", in[i]), b1, sizeof(b1)),
		       human(get(sn, "kvslab_drv_mapped_peak_bytes", in[i]), b2, sizeof(b2)),
		       get(sn, "kvslab_drv_chunks", in[i]), get(sn, "kvslab_drv_map_calls_total", in[i]),
		       get(sn, "kvslab_drv_unmap_calls_total", in[i]),
		       get(sn, "kvslab_drv_failed_calls_total", in[i]));
	if (!sn->n || !has_prefix(sn, "kvslab_"))
		printf("(no statistics registered)\n");
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kvslab-stat [-s SOCKET] [-d SECONDS] [-n N] [-t SECONDS] [-1]\n"
		   "  -s SOCKET   the control socket (default $KVSLAB_CTL_SOCKET)\n"
		   "  -d SECONDS  time between refreshes (default 1)\n"
		   "  -n N        stop after N refreshes\n"
		   "  -t SECONDS  give up on an answer not complete by then (default %g)\n"
		   "  -1          one snapshot, no screen clearing\n", CC_TIMEOUT_MS / 1e3);
}

int main(int argc, char **argv)
{
	const char *sock = getenv("KVSLAB_CTL_SOCKET");
	struct snap cur = {0}, prev = {0};
	double delay = 1.0;
	long iters = -1;
	int c, timeout_ms = CC_TIMEOUT_MS;
	bool once = false;
	char *end;

	while ((c = getopt(argc, argv, "s:d:n:t:1h")) != -1) {
		switch (c) {
		case 's':
			sock = optarg;
			break;
		case 'd':
			delay = strtod(optarg, &end);
			if (*end || end == optarg || !(delay > 0) || delay > 86400) {
				fprintf(stderr, "kvslab-stat: bad -d '%s'\n", optarg);
				return 2;
			}
			break;
		case 'n':
			iters = strtol(optarg, &end, 10);
			if (*end || end == optarg || iters < 1) {
				fprintf(stderr, "kvslab-stat: bad -n '%s'\n", optarg);
				return 2;
			}
			break;
		case 't':
			if (cc_parse_timeout(optarg, &timeout_ms) < 0) {
				fprintf(stderr, "kvslab-stat: bad -t '%s'\n", optarg);
				return 2;
			}
			break;
		case '1':
			once = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !sock || !*sock) {
		usage(stderr);
		return 2;
	}
	if (once)
		iters = 1;
	for (long i = 0; iters < 0 || i < iters; i++) {
		struct timespec ts;

		if (i) {
			ts.tv_sec = (time_t)delay;
			ts.tv_nsec = (long)((delay - (double)ts.tv_sec) * 1e9);
			nanosleep(&ts, NULL);
		}
		if (fetch(sock, timeout_ms, &cur) < 0) {
			snap_free(&cur);
			snap_free(&prev);
			return 1;
		}
		if (!once)
			printf("\033[H\033[2J");
		printf("kvslab-stat %s  every %gs\n", sock, delay);
		show(&cur, i ? &prev : NULL);
		fflush(stdout);
		snap_free(&prev);
		prev = cur;
		memset(&cur, 0, sizeof(cur));
	}
	snap_free(&prev);
	return 0;
}
