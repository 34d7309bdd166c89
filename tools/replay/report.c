/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/report.c - kvslab-replay's outputs: the summary tables, the
 * CSV time series, the JSON summary and the gnuplot plot.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "report.h"

static double mib(double b)
{
	return b / 1048576.0;
}

static double hit_ratio(const struct rp_result *r)
{
	return r->req_tokens ? (double)r->hit_tokens / (double)r->req_tokens : 0;
}

/* Completed requests a second of time spent in the prefix cache's calls. */
static double cache_rps(const struct rp_result *r)
{
	return r->cache_ns ? (double)r->requests_done * 1e9 / (double)r->cache_ns : 0;
}

static const char *cache_name(const struct rp_result *r)
{
	return r->strat.cache == RP_CACHE_HASH ? "hash" : r->tiered ? "hiradix" : "radix";
}

static double ratio_of(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : 0;
}

static uint64_t recomputed(const struct rp_result *r)
{
	return r->req_tokens > r->hit_tokens ? r->req_tokens - r->hit_tokens : 0;
}

/* The third table, only when a run had a host tier. */
static void tier_table(FILE *f, const struct rp_result *res, size_t n)
{
	size_t i;
	int any = 0;

	for (i = 0; i < n; i++)
		any |= res[i].tiered;
	if (!any)
		return;
	fprintf(f, "\n%-16s %-23s %10s %7s %7s %7s %12s %12s %10s %11s %11s\n", "strategy",
		"write policy", "host MiB", "L1 hit", "L2 hit", "L3 hit", "input tok", "recomputed",
		"loads back", "backup MiB", "host pk MiB");
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];

		if (!r->tiered)
			continue;
		fprintf(f, "%-16s %-23s %10.1f %7.4f %7.4f %7.4f %12llu %12llu %10llu %11.1f %11.1f\n",
			r->strat.name, rp_write_policy_name(r->write_policy),
			mib((double)r->host_pool_bytes), ratio_of(r->l1_tokens, r->req_tokens),
			ratio_of(r->l2_tokens, r->req_tokens), ratio_of(r->l3_tokens, r->req_tokens),
			(unsigned long long)r->req_tokens,
			(unsigned long long)recomputed(r), (unsigned long long)r->load_backs,
			mib((double)r->backup_tokens * (double)r->cell),
			mib((double)r->host_tokens_peak * (double)r->cell));
	}
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];

		if (!r->storage)
			continue;
		fprintf(f, "%-16s storage %s, prefetch %s: %llu prefetches, %llu pages backed up; "
			   "store %llu get hits, %llu misses, %llu stored, %llu skipped, %llu "
			   "checksum failures, %llu I/O errors\n",
			r->strat.name, r->storage, rp_prefetch_policy_name(r->prefetch_policy),
			(unsigned long long)r->prefetches, (unsigned long long)r->l3_backup_pages,
			(unsigned long long)r->store_stats[KVS_STORE_STAT_get_hits],
			(unsigned long long)r->store_stats[KVS_STORE_STAT_get_misses],
			(unsigned long long)r->store_stats[KVS_STORE_STAT_set_stored],
			(unsigned long long)r->store_stats[KVS_STORE_STAT_set_skipped],
			(unsigned long long)r->store_stats[KVS_STORE_STAT_checksum_fail],
			(unsigned long long)r->store_stats[KVS_STORE_STAT_io_errors]);
	}
}

void rp_report_table(FILE *f, const struct rp_result *res, size_t n)
{
	size_t i;

	fprintf(f, "\n%-16s %4s %10s %11s %11s %11s %11s %7s %7s %7s %10s\n", "strategy", "page",
		"capacity", "peak mapd", "mean mapd", "peak live", "mean live", "frag pk",
		"frag mn", "intfrag", "cached mn");
	fprintf(f, "%-16s %4s %10s %11s %11s %11s %11s %7s %7s %7s %10s\n", "", "", "tokens",
		"MiB", "MiB", "MiB", "MiB", "", "", "mean", "MiB");
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];

		fprintf(f, "%-16s %4u %10llu %11.1f %11.1f %11.1f %11.1f %7.3f %7.3f %7.3f %10.1f\n",
			r->strat.name, r->strat.page_size, (unsigned long long)r->capacity_tokens,
			mib((double)r->mapped_peak), mib(r->mapped_mean), mib((double)r->live_peak),
			mib(r->live_mean), r->frag_peak, r->frag_mean, r->internal_frag_mean,
			mib(r->cached_mean));
	}
	fprintf(f, "\n%-16s %7s %7s %8s %8s %9s %10s %9s %15s %15s %11s %9s\n", "strategy",
		"cache", "hit", "done", "preempt", "rejected", "drv calls", "drv ms",
		"alloc p50/p99 us", "match p50/p99 us", "cache req/s", "end MiB");
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];
		char a[32], m[32];

		snprintf(a, sizeof(a), "%.1f/%.1f", r->alloc_p50_ns / 1e3, r->alloc_p99_ns / 1e3);
		snprintf(m, sizeof(m), "%.1f/%.1f", r->match_p50_ns / 1e3, r->match_p99_ns / 1e3);
		fprintf(f, "%-16s %7s %7.4f %8llu %8llu %9llu %10llu %9.1f %15s %15s %11.0f %9.1f\n",
			r->strat.name, cache_name(r), hit_ratio(r),
			(unsigned long long)r->requests_done, (unsigned long long)r->preempted,
			(unsigned long long)r->rejected, (unsigned long long)r->drv_calls,
			r->drv_ns / 1e6, a, m, cache_rps(r), mib((double)r->end_mapped));
	}
	tier_table(f, res, n);
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];
		int k;

		if (!r->rejected)
			continue;
		fprintf(f, "\n%s: %llu rejected:", r->strat.name, (unsigned long long)r->rejected);
		for (k = 0; k < RP_REJECT__COUNT; k++)
			if (r->rejects[k])
				fprintf(f, " %llu %s (%s);", (unsigned long long)r->rejects[k],
					rp_reject_name((enum rp_reject)k),
					rp_reject_desc((enum rp_reject)k));
		fprintf(f, " capacity %llu tokens, request table %u x %u\n",
			(unsigned long long)r->capacity_tokens, r->table_rows, r->table_cols);
	}
}

int rp_report_csv(const char *path, const struct rp_result *res, size_t n)
{
	FILE *f = fopen(path, "w");
	size_t i, k;

	if (!f)
		return -1;
	fprintf(f, "strategy,page_size,step,t_ms,mapped_bytes,live_bytes,held_bytes,cached_bytes,"
		   "running,waiting\n");
	for (i = 0; i < n; i++)
		for (k = 0; k < res[i].nsamples; k++) {
			const struct rp_sample *s = &res[i].samples[k];

			fprintf(f, "%s,%u,%llu,%.1f,%llu,%llu,%llu,%llu,%u,%u\n", res[i].strat.name,
				res[i].strat.page_size, (unsigned long long)s->step, s->t_ms,
				(unsigned long long)s->mapped, (unsigned long long)s->live,
				(unsigned long long)s->held, (unsigned long long)s->cached, s->running,
				s->waiting);
		}
	if (fclose(f) != 0)
		return -1;
	return 0;
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

int rp_report_json(const char *path, const struct rp_meta *meta, const struct rp_result *res,
		   size_t n)
{
	FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
	size_t i;
	int k;

	if (!f)
		return -1;
	fprintf(f, "{\n  \"trace\": ");
	json_str(f, meta->trace);
	fprintf(f, ",\n  \"requests\": %zu,\n  \"model\": ", meta->requests);
	json_str(f, meta->model);
	fprintf(f, ",\n  \"cell_bytes\": %zu,\n  \"kv_bytes\": %llu,\n  \"driver\": ", meta->cell,
		(unsigned long long)meta->kv_bytes);
	json_str(f, meta->driver);
	fprintf(f, ",\n  \"ideal_hit\": %.6f,\n  \"strategies\": [\n", meta->ideal_hit);
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];

		fprintf(f, "    {\"name\": ");
		json_str(f, r->strat.name);
		fprintf(f, ", \"cache\": \"%s\", \"cache_ns\": %llu, \"hash_ns\": %llu, "
			"\"cache_requests_per_s\": %.1f", cache_name(r), (unsigned long long)r->cache_ns,
			(unsigned long long)r->hash_ns, cache_rps(r));
		fprintf(f,
			", \"page_size\": %u, \"capacity_tokens\": %llu, \"steps\": %llu, "
			"\"sim_seconds\": %.3f,\n     \"mapped_peak\": %llu, \"mapped_mean\": %.0f, "
			"\"live_peak\": %llu, \"live_mean\": %.0f, \"held_mean\": %.0f, "
			"\"cached_mean\": %.0f,\n     \"frag_peak\": %.6f, \"frag_mean\": %.6f, "
			"\"internal_frag_mean\": %.6f, \"end_mapped\": %llu,\n     \"hit_ratio\": %.6f, "
			"\"requests_done\": %llu, \"preempted\": %llu, \"rejected\": %llu,\n"
			"     \"driver_calls\": %llu, \"driver_ms\": %.3f, \"alloc_p50_ns\": %llu, "
			"\"alloc_p99_ns\": %llu, \"match_p50_ns\": %llu, \"match_p99_ns\": %llu, "
			"\"wall_seconds\": %.3f,\n     \"table_rows\": %u, \"table_cols\": %u, "
			"\"rejects\": {",
			r->strat.page_size, (unsigned long long)r->capacity_tokens,
			(unsigned long long)r->steps, r->sim_ms / 1e3,
			(unsigned long long)r->mapped_peak, r->mapped_mean,
			(unsigned long long)r->live_peak, r->live_mean, r->held_mean, r->cached_mean,
			r->frag_peak, r->frag_mean, r->internal_frag_mean,
			(unsigned long long)r->end_mapped, hit_ratio(r),
			(unsigned long long)r->requests_done, (unsigned long long)r->preempted,
			(unsigned long long)r->rejected, (unsigned long long)r->drv_calls,
			r->drv_ns / 1e6, (unsigned long long)r->alloc_p50_ns,
			(unsigned long long)r->alloc_p99_ns, (unsigned long long)r->match_p50_ns,
			(unsigned long long)r->match_p99_ns, r->wall_s, r->table_rows, r->table_cols);
		for (k = 0; k < RP_REJECT__COUNT; k++)
			fprintf(f, "%s\"%s\": %llu", k ? ", " : "", rp_reject_name((enum rp_reject)k),
				(unsigned long long)r->rejects[k]);
		fprintf(f, "}");
		if (r->tiered)
			fprintf(f, ",\n     \"host_pool_bytes\": %llu, \"write_policy\": \"%s\", "
				"\"l1_hit_ratio\": %.6f, \"l2_hit_ratio\": %.6f, \"l3_hit_ratio\": %.6f,\n"
				"     \"l1_hit_tokens\": %llu, \"l2_hit_tokens\": %llu, "
				"\"l3_hit_tokens\": %llu, \"recomputed_tokens\": %llu, \"input_tokens\": %llu,\n     "
				"\"load_backs\": %llu, \"backup_tokens\": %llu, \"evict_host_tokens\": "
				"%llu, \"host_tokens_peak\": %llu",
				(unsigned long long)r->host_pool_bytes,
				rp_write_policy_name(r->write_policy),
				ratio_of(r->l1_tokens, r->req_tokens),
				ratio_of(r->l2_tokens, r->req_tokens),
				ratio_of(r->l3_tokens, r->req_tokens),
				(unsigned long long)r->l1_tokens, (unsigned long long)r->l2_tokens,
				(unsigned long long)r->l3_tokens,
				(unsigned long long)recomputed(r), (unsigned long long)r->req_tokens,
				(unsigned long long)r->load_backs, (unsigned long long)r->backup_tokens,
				(unsigned long long)r->evict_host_tokens,
				(unsigned long long)r->host_tokens_peak);
		if (r->storage) {
			fprintf(f, ",\n     \"storage\": ");
			json_str(f, r->storage);
			fprintf(f, ", \"prefetch_policy\": \"%s\", \"prefetches\": %llu, "
				"\"prefetch_tokens\": %llu, \"l3_backup_pages\": %llu, "
				"\"l3_backup_fail\": %llu,\n     ",
				rp_prefetch_policy_name(r->prefetch_policy),
				(unsigned long long)r->prefetches,
				(unsigned long long)r->prefetch_tokens,
				(unsigned long long)r->l3_backup_pages,
				(unsigned long long)r->l3_backup_fail);
			/* The store's counters by their names (kvs_store_stat(3)). */
			for (k = 0; k < KVS_STORE_STAT__COUNT; k++)
				fprintf(f, "%s\"%s\": %llu", k ? ", " : "",
					kvs_store_stat_name((enum kvs_store_stat)k),
					(unsigned long long)r->store_stats[k]);
		}
		fprintf(f, "}%s\n", i + 1 < n ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
	if (f != stdout && fclose(f) != 0)
		return -1;
	return 0;
}

static int have_gnuplot(void)
{
	return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

int rp_report_plot(const char *path, const struct rp_result *res, size_t n)
{
	char data[] = "/tmp/kvslab-replay-XXXXXX";
	const char *ext = strrchr(path, '.');
	int svg = ext && strcmp(ext, ".svg") == 0, fd, status;
	FILE *f, *gp;
	size_t i, k;

	if (!have_gnuplot()) {
		errno = ENOENT;
		return -1;
	}
	fd = mkstemp(data);
	if (fd < 0 || !(f = fdopen(fd, "w")))
		return -1;
	/* One block per strategy: minutes, mapped, live, cached (GiB). */
	for (i = 0; i < n; i++) {
		for (k = 0; k < res[i].nsamples; k++) {
			const struct rp_sample *s = &res[i].samples[k];

			fprintf(f, "%.4f %.4f %.4f %.4f\n", s->t_ms / 60000.0, s->mapped / 1073741824.0,
				s->live / 1073741824.0, s->cached / 1073741824.0);
		}
		fprintf(f, "\n\n");
	}
	fclose(f);
	gp = popen("gnuplot", "w");
	if (!gp) {
		unlink(data);
		return -1;
	}
	fprintf(gp, "set terminal %s size 1200,%zu%s\n", svg ? "svg" : "pngcairo",
		300 * n + 100, svg ? " dynamic" : "");
	fprintf(gp, "set output '%s'\n", path);
	fprintf(gp, "set multiplot layout %zu,1 title 'kvslab-replay: mapped vs live vs cached "
		    "KV memory'\n",
		n);
	fprintf(gp, "set xlabel 'simulated minutes'\nset ylabel 'GiB'\nset key outside right top\n"
		    "set grid\n");
	for (i = 0; i < n; i++) {
		fprintf(gp, "set title '%s (page %u)'\n", res[i].strat.name, res[i].strat.page_size);
		fprintf(gp,
			"plot '%s' index %zu using 1:2 with lines lw 2 title 'mapped', "
			"'' index %zu using 1:3 with lines lw 2 title 'live', "
			"'' index %zu using 1:4 with lines title 'cached (evictable)'\n",
			data, i, i, i);
	}
	fprintf(gp, "unset multiplot\n");
	status = pclose(gp);
	unlink(data);
	if (status != 0) {
		errno = EIO;
		return -1;
	}
	return 0;
}
