/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/report.c - kvslab-replay's outputs: the settings, the
 * summary tables, the verdict lines, the CSV time series, the JSON summary
 * and the gnuplot plot.
 *
 * The verdict compares each strategy with the first static pool of the
 * same prefix cache: memory saved on average and at peak, mapped / packed
 * floor, driver calls with their host time and the cost model's estimate
 * for a GPU, and the allocation latency.  rp_verdict_of() computes it once
 * for the table and the JSON, so that the two always agree.
 *
 * Long runs are downsampled for the CSV and the plot: samples are taken in
 * equal buckets, each bucket giving its sample of most mapped memory, so
 * peaks survive.
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

static double gib(double b)
{
	return b / 1073741824.0;
}

void rp_verdict_of(const struct rp_result *res, size_t n, size_t i,
		   const struct rp_cost_model *cost, struct rp_verdict *v)
{
	const struct rp_result *r = &res[i], *b;
	size_t k;

	memset(v, 0, sizeof(*v));
	v->base = -1;
	for (k = 0; k < n; k++)
		if (res[k].strat.kind == RP_STATIC && res[k].strat.cache == r->strat.cache &&
		    res[k].tiered == r->tiered) {
			v->base = (long)k;
			break;
		}
	if (cost) {
		v->gpu_ms = rp_cost_driver_ms(cost, r);
		v->share = rp_cost_share(cost, r);
	}
	if (v->base < 0)
		return;
	b = &res[v->base];
	if (cost)
		v->base_gpu_ms = rp_cost_driver_ms(cost, b);
	v->saved_mean = b->mapped_mean - r->mapped_mean;
	v->saved_peak = (double)b->mapped_peak - (double)r->mapped_peak;
	v->saved_mean_ratio = b->mapped_mean > 0 ? v->saved_mean / b->mapped_mean : 0;
	v->saved_peak_ratio = b->mapped_peak ? v->saved_peak / (double)b->mapped_peak : 0;
}

void rp_report_settings(FILE *f, const struct rp_meta *meta, const struct rp_result *res,
			size_t n)
{
	const struct rp_sim_opts *o = meta->sim;
	char b[32], g[32];
	size_t i;

	if (!o)
		return;
	rp_fmt_bytes(meta->granularity, g, sizeof(g));
	fprintf(f, "settings: arrivals %s; pages", meta->arrivals ? meta->arrivals : "?");
	for (i = 0; i < n; i++) {
		rp_fmt_bytes(res[i].slab_tokens * res[i].cell, b, sizeof(b));
		fprintf(f, "%s %s %u (slab %llu tokens, %s)", i ? "," : "", res[i].strat.name,
			res[i].strat.page_size, (unsigned long long)res[i].slab_tokens, b);
	}
	fprintf(f, ";\n  slab: %u granule%s of %s a buffer, watermarks min_empty %u max_empty %u, "
		   "give-back after %llu pages freed since the last growth (shrink_quiet), "
		   "no time-based give-back (decay_ms 0), %s;\n",
		meta->granules, meta->granules == 1 ? "" : "s", g, o->min_empty, o->max_empty,
		(unsigned long long)o->shrink_quiet,
		o->worker ? "maps on a worker thread" : "maps on the loop's thread");
	if (o->cache_max >= 0)
		fprintf(f, "  prefix cache capped at %g%% of the budget (--cache-max)", o->cache_max * 100);
	else
		fprintf(f, "  prefix cache uncapped (--cache-max off)");
	fprintf(f, "; cost model %s", meta->cost ? meta->cost->name : "none");
	if (o->nlimits) {
		fprintf(f, "; limit schedule");
		for (i = 0; i < o->nlimits; i++) {
			rp_fmt_bytes(o->limits[i].bytes, b, sizeof(b));
			fprintf(f, "%s %g s: %s", i ? "," : "", o->limits[i].t_ms / 1e3, b);
		}
	}
	fprintf(f, "\n");
}

/*
 * Under a limit schedule: who paid for the limit in preemptions.  Every
 * strategy counts its preemptions while the schedule held the budget below
 * -M; those with an elastic limit (limit_changes) gave memory back, the
 * others kept theirs, and the difference is the limit's price.
 */
static void limit_verdict(FILE *f, const struct rp_result *res, size_t n)
{
	const struct rp_result *keep = NULL;
	size_t i;
	int any = 0;

	for (i = 0; i < n; i++) {
		if (res[i].limit_changes)
			any = 1;
		else if (!keep)
			keep = &res[i];
	}
	if (!any)
		return;
	fprintf(f, "limit: preemptions while the schedule held the budget below -M:");
	for (i = 0; i < n; i++)
		fprintf(f, "%s %s %llu%s", i ? "," : "", res[i].strat.name,
			(unsigned long long)res[i].limit_preempted,
			res[i].limit_changes ? " (gave memory back)" : " (kept its memory)");
	fprintf(f, "\n");
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];

		if (!r->limit_changes)
			continue;
		if (keep && r->limit_preempted > keep->limit_preempted)
			fprintf(f, "limit %s: paid for the limit with %llu preemptions more than %s\n",
				r->strat.name,
				(unsigned long long)(r->limit_preempted - keep->limit_preempted),
				keep->strat.name);
		else if (keep)
			fprintf(f, "limit %s: the limit cost no preemption (%s: %llu)\n", r->strat.name,
				keep->strat.name, (unsigned long long)keep->limit_preempted);
		else
			fprintf(f, "limit %s: %llu preemptions under the limit (add static:1 to -s to "
				   "compare)\n", r->strat.name,
				(unsigned long long)r->limit_preempted);
	}
}

/*
 * --slab-aware=both: each slab strategy beside its NAME/lru twin, what the
 * slab-aware eviction order costs in hits and saves in memory, so that a
 * user can choose.
 */
static void aware_verdict(FILE *f, const struct rp_result *res, size_t n)
{
	size_t i, j;

	for (i = 0; i < n; i++) {
		const struct rp_result *off = &res[i];

		if (off->strat.slab_aware != 0 || off->strat.kind != RP_SLAB)
			continue;
		for (j = 0; j < n; j++) {
			const struct rp_result *on = &res[j];

			if (on->strat.slab_aware != 1 || on->strat.kind != RP_SLAB ||
			    on->strat.page_size != off->strat.page_size ||
			    on->strat.cache != off->strat.cache)
				continue;
			fprintf(f, "slab-aware eviction %s against %s (LRU alone): hit %.4f against "
				   "%.4f (%+.4f); maps %.2f GiB on average against %.2f (%+.1f%%), "
				   "%.2f GiB at peak against %.2f; %llu driver calls against %llu\n",
				on->strat.name, off->strat.name, hit_ratio(on), hit_ratio(off),
				hit_ratio(on) - hit_ratio(off), gib(on->mapped_mean),
				gib(off->mapped_mean),
				off->mapped_mean > 0 ? 100.0 * (on->mapped_mean / off->mapped_mean - 1)
						     : 0.0,
				gib((double)on->mapped_peak), gib((double)off->mapped_peak),
				(unsigned long long)on->drv_calls, (unsigned long long)off->drv_calls);
			break;
		}
	}
}

void rp_report_verdict(FILE *f, const struct rp_result *res, size_t n,
		       const struct rp_cost_model *cost)
{
	size_t i;
	int any = 0;

	fprintf(f, "\n");
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i], *b;
		struct rp_verdict v;
		char gpu[192] = "";

		rp_verdict_of(res, n, i, cost, &v);
		if (cost && strcmp(cost->name, "none"))
			snprintf(gpu, sizeof(gpu), ", %s %.0f ms GPU driver time (%s), %.2f%% of "
				 "%.1f min served", cost->measure ? "measured" : "est.", v.gpu_ms,
				 cost->name, 100 * v.share, r->sim_ms / 60000);
		if (v.base < 0)
			continue;
		b = &res[v.base];
		any = 1;
		if ((size_t)v.base == i) {
			fprintf(f, "verdict %s: the baseline: maps %.2f GiB on average, %.2f GiB at "
				   "peak; held/packed floor %.2f mean, %.2f max; %llu driver calls, "
				   "%.1f ms host%s; alloc p99 %.1f us\n",
				r->strat.name, gib(r->mapped_mean), gib((double)r->mapped_peak),
				r->held_over_floor.mean, r->held_over_floor.max,
				(unsigned long long)r->drv_calls, r->drv_ns / 1e6, gpu,
				r->alloc_p99_ns / 1e3);
			continue;
		}
		fprintf(f, "verdict %s: saves %.1f%% on average (%.2f of %.2f GiB), %.1f%% at peak "
			   "(%.2f of %.2f GiB) against %s; held/packed floor %.2f mean, %.2f p99, "
			   "%.2f max (%s %.2f); %llu driver calls (%s %llu), %.1f ms host%s; alloc "
			   "p99 %.1f us (%s %.1f us)\n",
			r->strat.name, 100 * v.saved_mean_ratio, gib(r->mapped_mean),
			gib(b->mapped_mean), 100 * v.saved_peak_ratio, gib((double)r->mapped_peak),
			gib((double)b->mapped_peak), b->strat.name, r->held_over_floor.mean,
			r->held_over_floor.p99, r->held_over_floor.max, b->strat.name,
			b->held_over_floor.mean, (unsigned long long)r->drv_calls, b->strat.name,
			(unsigned long long)b->drv_calls, r->drv_ns / 1e6, gpu,
			r->alloc_p99_ns / 1e3, b->strat.name, b->alloc_p99_ns / 1e3);
	}
	if (!any)
		fprintf(f, "verdict: no static pool to compare with (add static:1 to -s)\n");
	limit_verdict(f, res, n);
	aware_verdict(f, res, n);
}

/* The memory table: what requests need, what the cache holds, what is mapped. */
static void memory_table(FILE *f, const struct rp_result *res, size_t n)
{
	size_t i;

	fprintf(f, "\n%-16s %10s %10s %10s %10s %10s %10s %21s\n", "strategy", "need mn",
		"need pk", "cached mn", "floor mn", "mapped mn", "mapped pk",
		"held/floor mn/p99/max");
	fprintf(f, "%-16s %10s %10s %10s %10s %10s %10s %21s\n", "", "MiB", "MiB", "MiB", "MiB",
		"MiB", "MiB", "");
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];
		char h[48];

		snprintf(h, sizeof(h), "%.2f/%.2f/%.2f", r->held_over_floor.mean,
			 r->held_over_floor.p99, r->held_over_floor.max);
		fprintf(f, "%-16s %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %21s\n", r->strat.name,
			mib(r->need_mean), mib((double)r->need_peak), mib(r->cached_mean),
			mib(r->floor_mean), mib(r->mapped_mean), mib((double)r->mapped_peak), h);
	}
}

/* Driver calls by kind, host time, the cost model's estimate. */
static void driver_table(FILE *f, const struct rp_result *res, size_t n,
			 const struct rp_cost_model *cost)
{
	size_t i;
	int k;

	fprintf(f, "\n%-16s", "strategy");
	for (k = 0; k < RP_OP__COUNT; k++)
		fprintf(f, " %10s", rp_drv_op_name((enum rp_drv_op)k));
	fprintf(f, " %9s %12s %8s\n", "host ms", cost && cost->measure ? "meas. GPU ms" :
		"est. GPU ms", "share %");
	for (i = 0; i < n; i++) {
		fprintf(f, "%-16s", res[i].strat.name);
		for (k = 0; k < RP_OP__COUNT; k++)
			fprintf(f, " %10llu", (unsigned long long)res[i].drv_ops[k]);
		fprintf(f, " %9.1f %12.1f %8.3f\n", res[i].drv_ns / 1e6,
			rp_cost_driver_ms(cost, &res[i]), 100 * rp_cost_share(cost, &res[i]));
	}
	if (cost && cost->measure)
		fprintf(f, "%-16s   (cost model measure: the calls' time on the driver; share: of "
			   "the simulated serving time)\n", "");
	else if (cost && strcmp(cost->name, "none")) {
		fprintf(f, "%-16s", "  us a call");
		for (k = 0; k < RP_OP__COUNT; k++)
			fprintf(f, " %10g", cost->us[k]);
		fprintf(f, "   (cost model %s)\n", cost->name);
	}
}

void rp_report_tables(FILE *f, const struct rp_result *res, size_t n,
		      const struct rp_cost_model *cost)
{
	rp_report_table(f, res, n);
	memory_table(f, res, n);
	driver_table(f, res, n, cost);
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
		/* Where the prefetched tokens went: the L3 hit is what was left. */
		if (r->l3_prefetched)
			fprintf(f, "%-16s L3: of %llu tokens prefetched for requests (at the head of "
				   "the queue), %llu were loaded back at their first prefill (%.1f%%), "
				   "%llu were on the host but not loaded (no device room), %llu were "
				   "on the device by then, %llu were gone from the host (evicted while "
				   "the request waited)\n",
				r->strat.name, (unsigned long long)r->l3_prefetched,
				(unsigned long long)r->l3_tokens,
				100.0 * (double)r->l3_tokens / (double)r->l3_prefetched,
				(unsigned long long)r->l3_unloaded, (unsigned long long)r->l3_on_device,
				(unsigned long long)r->l3_gone);
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

/*
 * Downsampling: @points buckets of equal sample counts, each giving its
 * sample of most mapped memory (0: every sample).  Calls @fn for each.
 */
static void each_point(const struct rp_result *r, size_t points,
		       void (*fn)(void *arg, const struct rp_sample *s), void *arg)
{
	size_t per = points && r->nsamples > points ? (r->nsamples + points - 1) / points : 1;
	size_t k, j;

	for (k = 0; k < r->nsamples; k += per) {
		const struct rp_sample *best = &r->samples[k];

		for (j = k + 1; j < k + per && j < r->nsamples; j++)
			if (r->samples[j].mapped > best->mapped)
				best = &r->samples[j];
		fn(arg, best);
	}
}

struct csv_ctx {
	FILE *f;
	const struct rp_result *r;
};

static void csv_row(void *arg, const struct rp_sample *s)
{
	struct csv_ctx *c = arg;

	fprintf(c->f, "%s,%u,%llu,%.1f,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%u,%u\n",
		c->r->strat.name, c->r->strat.page_size, (unsigned long long)s->step, s->t_ms,
		(unsigned long long)s->mapped, (unsigned long long)s->live,
		(unsigned long long)s->held, (unsigned long long)s->cached,
		(unsigned long long)s->need, (unsigned long long)s->floor,
		(unsigned long long)s->limit, s->running, s->waiting);
}

int rp_report_csv(const char *path, const struct rp_result *res, size_t n, size_t points)
{
	FILE *f = fopen(path, "w");
	size_t i;

	if (!f)
		return -1;
	fprintf(f, "strategy,page_size,step,t_ms,mapped_bytes,live_bytes,held_bytes,cached_bytes,"
		   "need_bytes,floor_bytes,limit_bytes,running,waiting\n");
	for (i = 0; i < n; i++) {
		struct csv_ctx c = {f, &res[i]};

		each_point(&res[i], points, csv_row, &c);
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
	fprintf(f, ",\n  \"ideal_hit\": %.6f,\n", meta->ideal_hit);
	if (meta->sim) {
		const struct rp_sim_opts *o = meta->sim;

		fprintf(f, "  \"settings\": {\"arrivals\": ");
		json_str(f, meta->arrivals ? meta->arrivals : "");
		fprintf(f, ", \"granules\": %u, \"granularity\": %zu, \"min_empty\": %u, "
			   "\"max_empty\": %u, \"chunk_pool\": %u, \"shrink_quiet\": %llu, "
			   "\"decay_ms\": 0, \"worker\": %s, \"cache_max\": ",
			meta->granules, meta->granularity, o->min_empty, o->max_empty, o->max_empty,
			(unsigned long long)o->shrink_quiet, o->worker ? "true" : "false");
		if (o->cache_max >= 0)
			fprintf(f, "%.6f", o->cache_max);
		else
			fprintf(f, "null");
		fprintf(f, ", \"max_running\": %u, \"step_ms\": %g, \"cost_model\": ",
			o->max_running, o->step_ms);
		json_str(f, meta->cost ? meta->cost->name : "none");
		fprintf(f, ", \"cost_us\": {");
		for (k = 0; k < RP_OP__COUNT; k++)
			fprintf(f, "%s\"%s\": %g", k ? ", " : "", rp_drv_op_name((enum rp_drv_op)k),
				meta->cost ? meta->cost->us[k] : 0.0);
		fprintf(f, "}, \"limit_schedule\": [");
		for (i = 0; i < o->nlimits; i++)
			fprintf(f, "%s{\"seconds\": %g, \"bytes\": %llu}", i ? ", " : "",
				o->limits[i].t_ms / 1e3, (unsigned long long)o->limits[i].bytes);
		fprintf(f, "]},\n");
	}
	fprintf(f, "  \"strategies\": [\n");
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];

		fprintf(f, "    {\"name\": ");
		json_str(f, r->strat.name);
		fprintf(f, ", \"cache\": \"%s\", \"cache_ns\": %llu, \"hash_ns\": %llu, "
			"\"cache_requests_per_s\": %.1f", cache_name(r), (unsigned long long)r->cache_ns,
			(unsigned long long)r->hash_ns, cache_rps(r));
		if (r->strat.kind == RP_SLAB && r->strat.slab_aware >= 0)
			fprintf(f, ", \"slab_aware\": %d", r->strat.slab_aware);
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
		{
			struct rp_verdict v;

			rp_verdict_of(res, n, i, meta->cost, &v);
			fprintf(f, ",\n     \"need_mean\": %.0f, \"need_peak\": %llu, "
				"\"floor_mean\": %.0f, \"floor_peak\": %llu, \"slab_tokens\": %llu, "
				"\"slab_bytes\": %llu,\n     \"held_over_floor\": {\"mean\": %.4f, "
				"\"p99\": %.4f, \"max\": %.4f}, \"cache_evicted_tokens\": %llu, "
				"\"limit_changes\": %llu, \"limit_over_steps\": %llu, "
				"\"limit_lag_max_ms\": %.1f, \"limit_refused\": %llu, "
				"\"limit_preempted\": %llu, "
				"\"limit_returned_bytes\": %llu, \"limit_ms\": %.3f, \"limit_ms_max\": %.3f,"
				"\n     \"compacted_pages\": %llu, \"compact_ms\": %.3f, \"driver_ops\": {",
				r->need_mean, (unsigned long long)r->need_peak, r->floor_mean,
				(unsigned long long)r->floor_peak, (unsigned long long)r->slab_tokens,
				(unsigned long long)(r->slab_tokens * r->cell), r->held_over_floor.mean,
				r->held_over_floor.p99, r->held_over_floor.max,
				(unsigned long long)r->cache_evicted_tokens,
				(unsigned long long)r->limit_changes,
				(unsigned long long)r->limit_over_steps, r->limit_lag_max_ms,
				(unsigned long long)r->limit_refused,
				(unsigned long long)r->limit_preempted,
				(unsigned long long)r->limit_returned_bytes, (double)r->limit_ns / 1e6,
				(double)r->limit_ns_max / 1e6, (unsigned long long)r->compacted_pages,
				(double)r->compact_ns / 1e6);
			for (k = 0; k < RP_OP__COUNT; k++)
				fprintf(f, "%s\"%s\": %llu", k ? ", " : "",
					rp_drv_op_name((enum rp_drv_op)k),
					(unsigned long long)r->drv_ops[k]);
			fprintf(f, "}, \"est_gpu_driver_ms\": %.3f, \"driver_share\": %.6f, "
				"\"cost_model\": ", v.gpu_ms, v.share);
			json_str(f, meta->cost ? meta->cost->name : "none");
			if (v.base >= 0)
				fprintf(f, ",\n     \"verdict\": {\"against\": \"%s\", "
					"\"saved_mean_bytes\": %.0f, \"saved_peak_bytes\": %.0f, "
					"\"saved_mean_ratio\": %.6f, \"saved_peak_ratio\": %.6f}",
					res[v.base].strat.name, v.saved_mean, v.saved_peak,
					v.saved_mean_ratio, v.saved_peak_ratio);
		}
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
				"\"l3_backup_fail\": %llu, \"l3_prefetched\": %llu, "
				"\"l3_unloaded\": %llu, \"l3_on_device\": %llu, \"l3_gone\": %llu,\n     ",
				rp_prefetch_policy_name(r->prefetch_policy),
				(unsigned long long)r->prefetches,
				(unsigned long long)r->prefetch_tokens,
				(unsigned long long)r->l3_backup_pages,
				(unsigned long long)r->l3_backup_fail,
				(unsigned long long)r->l3_prefetched,
				(unsigned long long)r->l3_unloaded, (unsigned long long)r->l3_on_device,
				(unsigned long long)r->l3_gone);
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

/* @s inside gnuplot's single quotes, where a quote is doubled. */
static void gp_quoted(FILE *gp, const char *s)
{
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', gp);
		fputc(*s, gp);
	}
}

static int have_gnuplot(void)
{
	return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

/* Samples a plot shows a strategy, at most: more than a picture's width is noise. */
#define PLOT_POINTS 1500

static void plot_row(void *arg, const struct rp_sample *s)
{
	/* minutes, mapped, need, need + cached, floor, limit (GiB) */
	fprintf(arg, "%.4f %.4f %.4f %.4f %.4f %.4f\n", s->t_ms / 60000.0, gib((double)s->mapped),
		gib((double)s->need), gib((double)s->need + (double)s->cached),
		gib((double)s->floor), s->limit ? gib((double)s->limit) : -1.0);
}

int rp_report_plot(const char *path, const struct rp_result *res, size_t n,
		   const struct rp_cost_model *cost)
{
	char data[] = "/tmp/kvslab-replay-XXXXXX";
	const char *ext = strrchr(path, '.');
	int svg = ext && strcmp(ext, ".svg") == 0, fd, status;
	double ymax = 0, xmax = 0;
	FILE *f, *gp;
	size_t i;

	if (!have_gnuplot()) {
		errno = ENOEXEC;
		return -1;
	}
	/* Open it here first: gnuplot told of a path it cannot write
	 * complains and draws on its standard output instead. */
	if (!(f = fopen(path, "w")))
		return -1;
	fclose(f);
	fd = mkstemp(data);
	if (fd < 0 || !(f = fdopen(fd, "w")))
		return -1;
	/* One block per strategy, downsampled with its peaks kept. */
	for (i = 0; i < n; i++) {
		each_point(&res[i], PLOT_POINTS, plot_row, f);
		fprintf(f, "\n\n");
		if (gib((double)res[i].mapped_peak) > ymax)
			ymax = gib((double)res[i].mapped_peak);
		if (res[i].sim_ms / 60000.0 > xmax)
			xmax = res[i].sim_ms / 60000.0;
	}
	fclose(f);
	/* Never its standard output: that is ours (the JSON may be there). */
	gp = popen("gnuplot >/dev/null", "w");
	if (!gp) {
		unlink(data);
		return -1;
	}
	fprintf(gp, "set terminal %s size 1200,%zu%s\n", svg ? "svg" : "pngcairo",
		260 * n + 120, svg ? " dynamic" : "");
	fprintf(gp, "set output '");
	gp_quoted(gp, path);
	fprintf(gp, "'\n");
	/* The title says what the panels show: each strategy against the static pool. */
	fprintf(gp, "set multiplot layout %zu,1 title \"kvslab-replay: KV memory mapped vs what "
		    "requests need", n);
	for (i = 0; i < n; i++) {
		struct rp_verdict v;

		rp_verdict_of(res, n, i, cost, &v);
		if (v.base >= 0 && (size_t)v.base != i) {
			struct rp_verdict bv;

			fprintf(gp, "\\n%s saves %.1f%% mean, %.1f%% peak vs %s; held/packed floor "
				    "%.2f (%s %.2f)", res[i].strat.name, 100 * v.saved_mean_ratio,
				100 * v.saved_peak_ratio, res[v.base].strat.name,
				res[i].held_over_floor.mean, res[v.base].strat.name,
				res[v.base].held_over_floor.mean);
			/* ... and what it costs in driver time. */
			rp_verdict_of(res, n, (size_t)v.base, cost, &bv);
			if (cost && strcmp(cost->name, "none"))
				fprintf(gp, "; GPU driver time %.0f ms (%s %.0f ms)", v.gpu_ms,
					res[v.base].strat.name, bv.gpu_ms);
			else
				fprintf(gp, "; %llu driver calls (%s %llu)",
					(unsigned long long)res[i].drv_calls, res[v.base].strat.name,
					(unsigned long long)res[v.base].drv_calls);
		}
	}
	fprintf(gp, "\"\n");
	/* One scale on every panel, so that heights compare at a glance. */
	fprintf(gp, "set xlabel 'simulated minutes'\nset ylabel 'GiB'\nset key outside right top\n"
		    "set grid\nset yrange [0:%g]\nset xrange [0:%g]\n", ymax * 1.05 + 1e-9,
		xmax > 0 ? xmax : 1);
	for (i = 0; i < n; i++) {
		const struct rp_result *r = &res[i];
		char lim[128] = "", cst[160] = "";
		struct rp_verdict v;

		if (r->limit_changes)
			snprintf(lim, sizeof(lim), ", '' index %zu using 1:($6 < 0 ? 1/0 : $6) with "
						   "steps dt 3 lw 2 lc rgb 'red' title 'limit'", i);
		/* The cost beside the memory: the driver time the saving took. */
		rp_verdict_of(res, n, i, cost, &v);
		if (cost && strcmp(cost->name, "none"))
			snprintf(cst, sizeof(cst), "\\n%s GPU driver time %.0f ms (%s), %.2f%% of "
				 "the time served; %.1f ms host", cost->measure ? "measured" : "est.",
				 v.gpu_ms, cost->name, 100 * v.share, r->drv_ns / 1e6);
		else
			snprintf(cst, sizeof(cst), "; %.1f ms host driver time", r->drv_ns / 1e6);
		fprintf(gp, "set title \"%s (page %u): mapped mean %.2f GiB, peak %.2f GiB; "
			    "held/packed floor %.2f mean, %.2f max; %llu driver calls%s\"\n",
			r->strat.name, r->strat.page_size, gib(r->mapped_mean),
			gib((double)r->mapped_peak), r->held_over_floor.mean, r->held_over_floor.max,
			(unsigned long long)r->drv_calls, cst);
		fprintf(gp,
			"plot '%s' index %zu using 1:2 with steps lw 2 title 'mapped', "
			"'' index %zu using 1:5 with steps dt 2 lc rgb 'black' title 'packed floor', "
			"'' index %zu using 1:4 with steps title 'need + cached', "
			"'' index %zu using 1:3 with steps title 'need (running)'%s\n",
			data, i, i, i, i, lim);
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
