/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/main.c - kvslab-replay: memory fragmentation and prefix-hit
 * testing of a serving setup on a request trace.  See kvslab-replay(1).
 *
 * Exit status: 0 success, 2 bad usage, 1 a failed run (including a
 * strategy that completed no request).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <kvslab.h>

#include "report.h"
#include "sim.h"
#include "trace.h"

/*
 * The tool's default cache cap (see kvslab-replay(1), DEFAULTS): the
 * value and the same for the help text, where a '%' is doubled.
 */
#define RP_CACHE_MAX_DEFAULT "10%"
#define RP_CACHE_MAX_HELP "10%%"
/* The tool's defaults that differ from rp_sim_defaults() and
 * rp_synth_defaults() (which the tests use): see kvslab-replay(1), DEFAULTS. */
#define TOOL_SHRINK_QUIET 4096
#define TOOL_RATE 2.0

#define MAX_STRATEGIES 8
/* Strategies times caches. */
#define MAX_RUNS (2 * MAX_STRATEGIES)

struct opts {
	const char *trace_path, *csv, *plot, *json, *model_name, *strategies, *caches;
	enum rp_format fmt;
	int strict, quiet, progress;
	int wpolicy_set, loadth_set;	/* given on the command line */
	int pf_set;
	uint32_t granules;
	int csv_full, cache_max_set;
	const char *cost_spec;
	const char *metrics;		/* --metrics ADDR:PORT, or NULL */
	struct rp_cost_model cost;
	struct rp_limit *limits;
	double kv_share;		/* -M P%: share of the trace's unique tokens; 0: bytes */
	uint64_t given;			/* long options given, bit c - 256 (GIVEN()) */
	int granules_auto;		/* --granules raised for a large budget */
	struct rp_synth_opts synth;
	struct rp_sim_opts sim;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvslab-replay [OPTION]... [TRACE]\n"
		"Replay a request trace through a simulated serving loop over kvslab and report\n"
		"KV memory fragmentation, prefix hits, driver calls and latencies for several\n"
		"memory strategies side by side.  Without TRACE, the built-in generator runs.\n"
		"\n"
		"Trace:\n"
		"  -f, --format=FMT        auto, mooncake (JSONL), azure (CSV) or sharegpt (the\n"
		"                          length statistics CSV, arrivals at --rate)  [auto]\n"
		"      --strict            stop at the first malformed line (default: report, skip)\n"
		"      --requests=N        generator: requests                     [2000]\n"
		"      --rate=R            generator and ShareGPT CSV: arrivals per second [2]\n"
		"      --input-mean=N      generator: mean input tokens            [2048]\n"
		"      --input-max=N       generator: largest input                [16384]\n"
		"      --output-mean=N     generator: mean output tokens           [256]\n"
		"      --output-max=N      generator: largest output               [2048]\n"
		"      --shared-ratio=F    generator: share of input from a shared prefix [0.5]\n"
		"      --prefixes=N        generator: distinct shared prefixes     [16]\n"
		"      --seed=N            generator and ShareGPT arrivals: seed   [1]\n"
		"Model and memory:\n"
		"  -m, --model=NAME        llama-3-8b, llama-3-70b-tp8, qwen2.5-7b, deepseek-v3-tp8,\n"
		"                          tiny                                    [llama-3-8b]\n"
		"      --layers=N --kv-heads=N --head-dim=N --dtype-size=N --tp=N  override the shape\n"
		"  -M, --kv-mem=SIZE|P%%    KV memory budget, e.g. 8G, 512M; or P%% of the KV of\n"
		"                          the trace's unique tokens (what a prefix cache that\n"
		"                          never evicts would hold: P%% sizes the cache, and\n"
		"                          --cache-max is then off unless given)   [8G]\n"
		"  -d, --driver=NAME       host, cuda or auto                      [host]\n"
		"Serving loop:\n"
		"      --max-running=N     running requests at most                [128]\n"
		"      --chunk=N           chunked prefill, tokens a step (0: off) [0]\n"
		"      --reserve=N         decode tokens reserved a request, at least [64]\n"
		"      --reserve-ratio=F   share of remaining output reserved      [0.7]\n"
		"      --step-ms=F         simulated time of one step              [25]\n"
		"      --no-timestamps     ignore arrival times: all arrive at once\n"
		"      --no-cache          disable the prefix cache (finished requests free all)\n"
		"      --cache=LIST        prefix cache: radix (SGLang's tree), hash (vLLM's hashed\n"
		"                          blocks) or radix,hash for both side by side  [radix]\n"
		"      --block-hash=FN     hash: sha256_cbor, sha256_cbor_64 or xxh3_128\n"
		"                                                                  [sha256_cbor]\n"
		"      --host-pool=SIZE|Rx a host (L2) tier under the radix cache: SIZE of host\n"
		"                          memory (64G) or R times the device budget (2x)\n"
		"      --write-policy=P    write_through, write_through_selective or write_back\n"
		"                                                                  [write_through]\n"
		"      --load-back-threshold=N  host hits below N tokens are recomputed  [10]\n"
		"      --storage=URI       a store (L3) under the host tier: file:///DIR,\n"
		"                          redis://HOST:PORT; replays sharing it share L3\n"
		"      --prefetch-threshold=N  fewer tokens in the store are not fetched [256]\n"
		"      --prefetch-policy=P best_effort, wait_complete or timeout [wait_complete]\n"
		"Strategies:\n"
		"  -s, --strategies=LIST   comma list of static[:PAGE], paged[:PAGE], slab[:PAGE]\n"
		"                          [static:1,paged:16,slab:16]\n"
		"      --granules=N        chunk size in driver granules [1; raised for a budget\n"
		"                          of over 1024 slabs, to keep the host driver's mappings\n"
		"                          few]\n"
		"      --min-empty=N       slab: empty slabs kept mapped ahead     [1]\n"
		"      --max-empty=N       slab: empty slabs above which to unmap  [4]\n"
		"      --shrink-quiet=N    slab: pages freed since the last growth before\n"
		"                          empty slabs are unmapped                [4096]\n"
		"      --worker            slab: map ahead on a worker thread\n"
		"      --slab-aware=on|off|both radix eviction prefers pages whose slabs\n"
		"                          empty [on]; both: each slab strategy with and\n"
		"                          without (NAME/lru), to see what it costs in hits\n"
		"      --compact=N         slab: migrate up to N live pages a step out of\n"
		"                          sparse slabs (kvs_pool_compact)           [0: off]\n"
		"      --cache-max=P%%      cap the prefix cache's evictable pages at P%% of the\n"
		"                          budget, evicted after every step (off: none)\n"
		"                          [" RP_CACHE_MAX_HELP "; off with -M P%%]\n"
		"      --limit-schedule=SECONDS:SIZE,...  slab: the budget becomes SIZE at\n"
		"                          simulated SECONDS (e.g. 120:4G,240:8G)\n"
		"      --cost-model=M      GPU cost of the driver calls: a100, h200, h100 (measured),\n"
		"                          measure (time them: --driver cuda), none, or a file\n"
		"                          of name=us lines                         [a100]\n"
		"Output:\n"
		"      --csv=FILE          time series of every strategy (downsampled to 2000\n"
		"                          samples a strategy, peaks kept)\n"
		"      --csv-full          every sample in the CSV\n"
		"      --plot=FILE         mapped vs live vs cached over time (.png or .svg; gnuplot)\n"
		"      --json=FILE         summary for scripts (- for standard output)\n"
		"      --sample-every=N    steps between time-series samples       [1]\n"
		"      --metrics=ADDR:PORT serve the running replay's metrics over HTTP at\n"
		"                          /metrics for Prometheus (:PORT: 127.0.0.1)\n"
		"  -q, --quiet             no tables, no progress\n"
		"      --no-progress       no progress: a bar on a terminal, else a line every\n"
		"                          10 s (the first, after 5 s, estimates the run's length)\n"
		"  -h, --help              this help\n"
		"  -V, --version           version\n");
}

enum {
	O_STRICT = 256, O_REQUESTS, O_RATE, O_IN_MEAN, O_IN_MAX, O_OUT_MEAN, O_OUT_MAX, O_SHARED,
	O_PREFIXES, O_SEED, O_LAYERS, O_HEADS, O_DIM, O_DTYPE, O_TP, O_MAXRUN, O_CHUNK,
	O_RESERVE, O_RATIO, O_STEP, O_NOTS, O_GRANULES, O_MINE, O_MAXE, O_QUIET, O_WORKER, O_CSV, O_PLOT, O_JSON,
	O_SAMPLE, O_NOPROG, O_NOCACHE, O_CACHE, O_BLOCKHASH,
	O_HOSTPOOL, O_WPOLICY, O_LOADTH, O_STORAGE, O_PFTH, O_PFPOLICY, O_CACHEMAX, O_LIMITS,
	O_COST, O_CSVFULL, O_SLABAWARE, O_COMPACT, O_METRICS
};

/* Whether long option @opt (an O_* value) was given. */
#define GIVEN(o, opt) ((o)->given >> ((opt) - 256) & 1)

/* The CSV's samples a strategy by default (--csv-full: all). */
#define CSV_POINTS 2000

static const struct option longopts[] = {
	{"format", required_argument, 0, 'f'},   {"strict", no_argument, 0, O_STRICT},
	{"requests", required_argument, 0, O_REQUESTS}, {"rate", required_argument, 0, O_RATE},
	{"input-mean", required_argument, 0, O_IN_MEAN}, {"input-max", required_argument, 0, O_IN_MAX},
	{"output-mean", required_argument, 0, O_OUT_MEAN},
	{"output-max", required_argument, 0, O_OUT_MAX},
	{"shared-ratio", required_argument, 0, O_SHARED},
	{"prefixes", required_argument, 0, O_PREFIXES}, {"seed", required_argument, 0, O_SEED},
	{"model", required_argument, 0, 'm'},    {"layers", required_argument, 0, O_LAYERS},
	{"kv-heads", required_argument, 0, O_HEADS}, {"head-dim", required_argument, 0, O_DIM},
	{"dtype-size", required_argument, 0, O_DTYPE}, {"tp", required_argument, 0, O_TP},
	{"kv-mem", required_argument, 0, 'M'},   {"driver", required_argument, 0, 'd'},
	{"max-running", required_argument, 0, O_MAXRUN}, {"chunk", required_argument, 0, O_CHUNK},
	{"reserve", required_argument, 0, O_RESERVE},
	{"reserve-ratio", required_argument, 0, O_RATIO}, {"step-ms", required_argument, 0, O_STEP},
	{"no-timestamps", no_argument, 0, O_NOTS}, {"strategies", required_argument, 0, 's'},
	{"granules", required_argument, 0, O_GRANULES},
	{"min-empty", required_argument, 0, O_MINE}, {"max-empty", required_argument, 0, O_MAXE},
	{"shrink-quiet", required_argument, 0, O_QUIET}, {"worker", no_argument, 0, O_WORKER},
	{"slab-aware", required_argument, 0, O_SLABAWARE},
	{"compact", required_argument, 0, O_COMPACT},    {"csv", required_argument, 0, O_CSV},
	{"plot", required_argument, 0, O_PLOT},  {"json", required_argument, 0, O_JSON},
	{"sample-every", required_argument, 0, O_SAMPLE}, {"quiet", no_argument, 0, 'q'},
	{"no-progress", no_argument, 0, O_NOPROG}, {"no-cache", no_argument, 0, O_NOCACHE},
	{"cache", required_argument, 0, O_CACHE}, {"block-hash", required_argument, 0, O_BLOCKHASH},
	{"host-pool", required_argument, 0, O_HOSTPOOL},
	{"write-policy", required_argument, 0, O_WPOLICY},
	{"load-back-threshold", required_argument, 0, O_LOADTH},
	{"storage", required_argument, 0, O_STORAGE},
	{"prefetch-threshold", required_argument, 0, O_PFTH},
	{"prefetch-policy", required_argument, 0, O_PFPOLICY}, {"help", no_argument, 0, 'h'},
	{"cache-max", required_argument, 0, O_CACHEMAX},
	{"limit-schedule", required_argument, 0, O_LIMITS},
	{"cost-model", required_argument, 0, O_COST}, {"csv-full", no_argument, 0, O_CSVFULL},
	{"metrics", required_argument, 0, O_METRICS},
	{"version", no_argument, 0, 'V'},        {0, 0, 0, 0}};

static int bad(const char *opt, const char *arg)
{
	fprintf(stderr, "kvslab-replay: invalid value '%s' for %s\n", arg, opt);
	return -1;
}

static int parse_u64(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(arg, &end, 0);
	if (errno || end == arg || *end || arg[0] == '-' || v < min || v > max)
		return bad(opt, arg);
	*out = v;
	return 0;
}

static int parse_u32(const char *opt, const char *arg, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;

	if (parse_u64(opt, arg, min, max, &v) < 0)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int parse_double(const char *opt, const char *arg, double min, double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !(v >= min && v <= max))
		return bad(opt, arg);
	*out = v;
	return 0;
}

static int parse_size(const char *opt, const char *arg, uint64_t *out)
{
	return rp_parse_size(arg, out) < 0 ? bad(opt, arg) : 0;
}

/* "P%" or "off". */
static int parse_cache_max(const char *arg, double *out)
{
	size_t len = strlen(arg);
	char num[64];
	double v;

	if (!strcmp(arg, "off")) {
		*out = -1;
		return 0;
	}
	if (len < 2 || len >= sizeof(num) || arg[len - 1] != '%')
		return bad("--cache-max", arg);
	memcpy(num, arg, len - 1);
	num[len - 1] = 0;
	if (parse_double("--cache-max", num, 0, 100, &v) < 0)
		return -1;
	*out = v / 100;
	return 0;
}

/* "static:1,paged:16,slab:16" */
static int parse_strategies(const char *list, uint32_t granules, struct rp_strategy *out,
			    size_t *n)
{
	char *copy = strdup(list), *save = NULL, *tok;
	int rc = 0;

	*n = 0;
	if (!copy)
		return -1;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		struct rp_strategy *s = &out[*n];
		char *colon = strchr(tok, ':');
		uint32_t page = 16;

		if (*n == MAX_STRATEGIES) {
			rc = bad("--strategies", list);
			break;
		}
		if (colon) {
			*colon = 0;
			if (parse_u32("--strategies", colon + 1, 1, 1u << 20, &page) < 0) {
				rc = -1;
				break;
			}
		}
		memset(s, 0, sizeof(*s));
		if (strcmp(tok, "static") == 0) {
			s->kind = RP_STATIC;
			if (!colon)
				page = 1;
		} else if (strcmp(tok, "paged") == 0) {
			s->kind = RP_PAGED;
		} else if (strcmp(tok, "slab") == 0) {
			s->kind = RP_SLAB;
		} else {
			rc = bad("--strategies", list);
			break;
		}
		s->page_size = page;
		s->slab_granules = granules;
		s->slab_aware = -1;
		snprintf(s->name, sizeof(s->name), "%s:%u", tok, page);
		(*n)++;
	}
	free(copy);
	if (rc == 0 && *n == 0)
		rc = bad("--strategies", list);
	return rc;
}

/*
 * --slab-aware=both: each slab strategy twice, slab-aware eviction on (its
 * name) and off (NAME/lru, the policy's order alone, SGLang's), so that
 * the report gives what it costs in hits and saves in memory.
 */
static int add_lru_twins(struct rp_strategy *s, size_t *n)
{
	size_t m = *n, i, j;

	for (i = 0; i < *n; i++)
		m += s[i].kind == RP_SLAB;
	if (m > MAX_STRATEGIES) {
		fprintf(stderr, "kvslab-replay: --slab-aware=both doubles the slab strategies: at "
				"most %d in all\n", MAX_STRATEGIES);
		return -1;
	}
	for (i = *n, j = m; i-- > 0;) {
		if (s[i].kind == RP_SLAB) {
			s[--j] = s[i];
			s[j].slab_aware = 0;
			snprintf(s[j].name + strlen(s[j].name), sizeof(s[j].name) - strlen(s[j].name),
				 "/lru");
			s[--j] = s[i];
			s[j].slab_aware = 1;
		} else {
			s[--j] = s[i];
		}
	}
	*n = m;
	return 0;
}

/* "radix", "hash" or both, comma-separated, each at most once. */
static int parse_caches(const char *list, enum rp_cache *out, size_t *n)
{
	const char *p = list;

	*n = 0;
	while (*p) {
		size_t len = strcspn(p, ",");
		enum rp_cache c;
		size_t k;

		if (len == 5 && strncmp(p, "radix", 5) == 0)
			c = RP_CACHE_RADIX;
		else if (len == 4 && strncmp(p, "hash", 4) == 0)
			c = RP_CACHE_HASH;
		else
			return bad("--cache", list);
		for (k = 0; k < *n; k++)
			if (out[k] == c)
				return bad("--cache", list);
		out[(*n)++] = c;
		p += len;
		if (*p == ',' && *++p == 0)
			return bad("--cache", list);
	}
	return *n ? 0 : bad("--cache", list);
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	int c;
	uint32_t u;

	memset(o, 0, sizeof(*o));
	rp_synth_defaults(&o->synth);
	rp_sim_defaults(&o->sim);
	/* Only what the command line sets overrides the chosen preset. */
	memset(&o->sim.model, 0, sizeof(o->sim.model));
	o->model_name = "llama-3-8b";
	o->strategies = "static:1,paged:16,slab:16";
	o->caches = "radix";
	o->granules = 1;
	o->cost_spec = "a100";
	parse_cache_max(RP_CACHE_MAX_DEFAULT, &o->sim.cache_max);
	o->sim.shrink_quiet = TOOL_SHRINK_QUIET;
	o->synth.rate = TOOL_RATE;
	o->progress = 1;
	while ((c = getopt_long(argc, argv, "f:m:M:d:s:qhV", longopts, NULL)) != -1) {
		int r = 0;
		uint64_t v;

		if (c >= 256 && c < 256 + 64)
			o->given |= 1ull << (c - 256);
		switch (c) {
		case 'f':
			if (strcmp(optarg, "auto") == 0)
				o->fmt = RP_FMT_AUTO;
			else if (strcmp(optarg, "mooncake") == 0 || strcmp(optarg, "jsonl") == 0)
				o->fmt = RP_FMT_MOONCAKE;
			else if (strcmp(optarg, "azure") == 0 || strcmp(optarg, "csv") == 0)
				o->fmt = RP_FMT_AZURE;
			else if (strcmp(optarg, "sharegpt") == 0)
				o->fmt = RP_FMT_SHAREGPT;
			else
				r = bad("--format", optarg);
			break;
		case O_STRICT: o->strict = 1; break;
		case O_REQUESTS:
			r = parse_u64("--requests", optarg, 1, 10000000, &v);
			o->synth.requests = (size_t)v;
			break;
		case O_RATE: r = parse_double("--rate", optarg, 0, 1e6, &o->synth.rate); break;
		case O_IN_MEAN: r = parse_u32("--input-mean", optarg, 1, 1u << 20, &o->synth.input_mean); break;
		case O_IN_MAX: r = parse_u32("--input-max", optarg, 1, 1u << 21, &o->synth.input_max); break;
		case O_OUT_MEAN: r = parse_u32("--output-mean", optarg, 1, 1u << 20, &o->synth.output_mean); break;
		case O_OUT_MAX: r = parse_u32("--output-max", optarg, 1, 1u << 21, &o->synth.output_max); break;
		case O_SHARED: r = parse_double("--shared-ratio", optarg, 0, 1, &o->synth.shared_ratio); break;
		case O_PREFIXES: r = parse_u32("--prefixes", optarg, 1, 1u << 16, &o->synth.prefixes); break;
		case O_SEED: r = parse_u64("--seed", optarg, 0, UINT64_MAX, &o->synth.seed); break;
		case 'm': o->model_name = optarg; break;
		case O_LAYERS: r = parse_u32("--layers", optarg, 1, 4096, &o->sim.model.layers); break;
		case O_HEADS: r = parse_u32("--kv-heads", optarg, 1, 4096, &o->sim.model.kv_heads); break;
		case O_DIM: r = parse_u32("--head-dim", optarg, 1, 65536, &o->sim.model.head_dim); break;
		case O_DTYPE: r = parse_u32("--dtype-size", optarg, 1, 16, &o->sim.model.dtype_size); break;
		case O_TP: r = parse_u32("--tp", optarg, 1, 1024, &o->sim.model.tp_size); break;
		case 'M':
			o->kv_share = 0;
			if (*optarg && optarg[strlen(optarg) - 1] == '%') {
				char *pct = strndup(optarg, strlen(optarg) - 1);

				r = pct ? parse_double("--kv-mem", pct, 1e-6, 1e6, &o->kv_share) : -1;
				free(pct);
				if (r < 0 && pct)
					r = bad("--kv-mem", optarg);
			} else {
				r = parse_size("--kv-mem", optarg, &o->sim.kv_bytes);
			}
			break;
		case 'd':
			if (strcmp(optarg, "host") && strcmp(optarg, "cuda") && strcmp(optarg, "auto"))
				r = bad("--driver", optarg);
			o->sim.driver = optarg;
			break;
		case O_MAXRUN: r = parse_u32("--max-running", optarg, 1, 65536, &o->sim.max_running); break;
		case O_CHUNK: r = parse_u32("--chunk", optarg, 0, 1u << 24, &o->sim.chunk); break;
		case O_RESERVE: r = parse_u32("--reserve", optarg, 0, 1u << 24, &o->sim.reserve); break;
		case O_RATIO: r = parse_double("--reserve-ratio", optarg, 0, 1, &o->sim.reserve_ratio); break;
		case O_STEP: r = parse_double("--step-ms", optarg, 1e-3, 1e6, &o->sim.step_ms); break;
		case O_NOTS: o->sim.use_timestamps = 0; break;
		case 's': o->strategies = optarg; break;
		case O_GRANULES: r = parse_u32("--granules", optarg, 1, 4096, &o->granules); break;
		case O_MINE: r = parse_u32("--min-empty", optarg, 0, 1u << 20, &o->sim.min_empty); break;
		case O_MAXE: r = parse_u32("--max-empty", optarg, 0, 1u << 20, &o->sim.max_empty); break;
		case O_QUIET: r = parse_u64("--shrink-quiet", optarg, 0, UINT64_MAX, &o->sim.shrink_quiet); break;
		case O_WORKER: o->sim.worker = 1; break;
		case O_SLABAWARE:
			if (strcmp(optarg, "on") == 0)
				o->sim.slab_aware = 1;
			else if (strcmp(optarg, "off") == 0)
				o->sim.slab_aware = 0;
			else if (strcmp(optarg, "both") == 0)
				o->sim.slab_aware = 2;
			else
				r = bad("--slab-aware", optarg);
			break;
		case O_COMPACT: {
			uint64_t pages;

			r = parse_u64("--compact", optarg, 0, UINT32_MAX, &pages);
			o->sim.compact_pages = (uint32_t)pages;
			break;
		}
		case O_CSV: o->csv = optarg; break;
		case O_PLOT: o->plot = optarg; break;
		case O_JSON: o->json = optarg; break;
		case O_SAMPLE:
			r = parse_u32("--sample-every", optarg, 1, 1u << 30, &u);
			o->sim.sample_every = u;
			break;
		case 'q': o->quiet = 1; o->progress = 0; break;
		case O_NOPROG: o->progress = 0; break;
		case O_NOCACHE: o->sim.no_cache = 1; break;
		case O_CACHE: o->caches = optarg; break;
		case O_BLOCKHASH:
			if (strcmp(optarg, "sha256_cbor") == 0)
				o->sim.hash_fn = KVS_HASH_SHA256_CBOR;
			else if (strcmp(optarg, "sha256_cbor_64") == 0)
				o->sim.hash_fn = KVS_HASH_SHA256_CBOR_64;
			else if (strcmp(optarg, "xxh3_128") == 0)
				o->sim.hash_fn = KVS_HASH_XXH3_128;
			else
				r = bad("--block-hash", optarg);
			break;
		case O_HOSTPOOL: {
			size_t len = strlen(optarg);

			o->sim.host_bytes = 0;
			o->sim.host_ratio = 0;
			if (len > 1 && (optarg[len - 1] == 'x' || optarg[len - 1] == 'X')) {
				char num[64];

				if (len >= sizeof(num)) {
					r = bad("--host-pool", optarg);
					break;
				}
				memcpy(num, optarg, len - 1);
				num[len - 1] = 0;
				r = parse_double("--host-pool", num, 1e-6, 1e6, &o->sim.host_ratio);
				if (r < 0 || !(o->sim.host_ratio > 0))
					r = bad("--host-pool", optarg);
			} else {
				r = parse_size("--host-pool", optarg, &o->sim.host_bytes);
			}
			break;
		}
		case O_WPOLICY:
			if (rp_write_policy_parse(optarg, &o->sim.write_policy) < 0)
				r = bad("--write-policy", optarg);
			o->wpolicy_set = 1;
			break;
		case O_LOADTH:
			r = parse_u64("--load-back-threshold", optarg, 0, UINT32_MAX, &v);
			o->sim.load_threshold = v;
			o->loadth_set = 1;
			break;
		case O_STORAGE:
			if (!*optarg)
				r = bad("--storage", optarg);
			o->sim.storage = optarg;
			break;
		case O_PFTH:
			r = parse_u32("--prefetch-threshold", optarg, 0, UINT32_MAX,
				      &o->sim.prefetch_threshold);
			o->pf_set = 1;
			break;
		case O_PFPOLICY:
			if (rp_prefetch_policy_parse(optarg, &o->sim.prefetch_policy) < 0)
				r = bad("--prefetch-policy", optarg);
			o->pf_set = 1;
			break;
		case O_CACHEMAX: r = parse_cache_max(optarg, &o->sim.cache_max); break;
		case O_LIMITS: {
			char err[256];
			ssize_t nl;

			free(o->limits);
			nl = rp_limit_parse(optarg, &o->limits, err, sizeof(err));
			if (nl < 0) {
				fprintf(stderr, "kvslab-replay: %s\n", err);
				r = -1;
				break;
			}
			o->sim.limits = o->limits;
			o->sim.nlimits = (size_t)nl;
			break;
		}
		case O_COST: o->cost_spec = optarg; break;
		case O_CSVFULL: o->csv_full = 1; break;
		case O_METRICS: o->metrics = optarg; break;
		case 'h': usage(stdout); exit(0);
		case 'V': printf("kvslab-replay (kvslab) %s\n", KVSLAB_VERSION_STRING); exit(0);
		default: usage(stderr); return -1;
		}
		if (r < 0)
			return -1;
	}
	if (optind < argc)
		o->trace_path = argv[optind++];
	if (optind < argc) {
		fprintf(stderr, "kvslab-replay: one trace at a time\n");
		return -1;
	}
	if (!RP_TIERED(&o->sim) && (o->wpolicy_set || o->loadth_set)) {
		fprintf(stderr, "kvslab-replay: --write-policy and --load-back-threshold need "
				"--host-pool\n");
		return -1;
	}
	if (!RP_TIERED(&o->sim) && o->sim.storage) {
		fprintf(stderr, "kvslab-replay: --storage needs --host-pool (the store backs the "
				"host tier up and prefetches into it)\n");
		return -1;
	}
	if (!o->sim.storage && o->pf_set) {
		fprintf(stderr, "kvslab-replay: --prefetch-threshold and --prefetch-policy need "
				"--storage\n");
		return -1;
	}
	if (RP_TIERED(&o->sim) && o->sim.no_cache) {
		fprintf(stderr, "kvslab-replay: --host-pool needs a prefix cache, not --no-cache\n");
		return -1;
	}
	{
		char err[320];

		if (rp_cost_model_load(o->cost_spec, &o->cost, err, sizeof(err)) < 0) {
			fprintf(stderr, "kvslab-replay: %s\n", err);
			return -1;
		}
		/* Timing the host driver would report mmap's cost as a GPU's. */
		if (o->cost.measure && strcmp(o->sim.driver, "cuda")) {
			fprintf(stderr, "kvslab-replay: --cost-model measure times the CUDA driver's "
					"calls: it needs --driver cuda (not %s)\n", o->sim.driver);
			errno = EINVAL;
			return -1;
		}
	}
	if (o->sim.max_empty < o->sim.min_empty) {
		fprintf(stderr, "kvslab-replay: --max-empty must not be below --min-empty\n");
		return -1;
	}
	return 0;
}

/*
 * Progress on stderr: a bar on a terminal; elsewhere (a log, a CI job) a
 * line after 5 seconds (KVSLAB_REPLAY_PROGRESS_S; 0: at every call, for
 * the tests), with the estimate of the whole run's length, then one every
 * twice that.  The estimate takes
 * the strategies still to run as long as the one that ran longest so far,
 * or for the first, as long as its share done says.
 */
#define PROGRESS_FIRST_S 5.0

struct progress {
	const char *name;
	int on, tty;
	size_t run, runs;		/* this strategy's number (0-based), of all */
	uint64_t t0, t_run;		/* the first run's start, this one's (ns) */
	double longest_s;		/* the longest finished run */
	double first_s;			/* when the first line is due (since t0) */
	double next_s;			/* when the next line is due */
	unsigned long lines;		/* printed */
};

/* "1 min 5 s", "45 s" */
static void fmt_secs(double s, char *buf, size_t size)
{
	if (s >= 60)
		snprintf(buf, size, "%.0f min %.0f s", floor(s / 60), fmod(s, 60));
	else
		snprintf(buf, size, "%.0f s", s);
}

static void show_progress(void *arg, size_t done, size_t total)
{
	struct progress *p = arg;
	int width = 40, k, fill = total ? (int)((double)done / (double)total * width) : width;
	uint64_t now = rp_now_ns();
	double in = (double)(now - p->t0) / 1e9, run = (double)(now - p->t_run) / 1e9;
	double frac = total ? (double)done / (double)total : 1, this_s, left;
	char b1[32], b2[32];

	if (!p->on)
		return;
	if (p->tty) {
		fprintf(stderr, "\r%-12s [", p->name);
		for (k = 0; k < width; k++)
			fputc(k < fill ? '#' : ' ', stderr);
		fprintf(stderr, "] %3d%% %zu/%zu", total ? (int)(100.0 * done / total) : 100, done,
			total);
		if (done >= total)
			fputc('\n', stderr);
		fflush(stderr);
		return;
	}
	if (done >= total || in < p->next_s || frac <= 0)
		return;
	/* Early in a run its share done says little: the longest so far does. */
	this_s = p->longest_s > 0 && frac < 0.25 ? (run > p->longest_s ? run : p->longest_s)
						  : run / frac;
	left = this_s - run + (double)(p->runs - p->run - 1) * (p->longest_s > this_s
								     ? p->longest_s : this_s);
	fmt_secs(in, b1, sizeof(b1));
	fmt_secs(p->lines ? left : in + left, b2, sizeof(b2));
	fprintf(stderr, "kvslab-replay: %s (%zu of %zu): %zu of %zu requests, %s in, about %s "
			"%s\n", p->name, p->run + 1, p->runs, done, total, b1, b2,
		p->lines ? "left" : "in all (an estimate; --no-progress hides these lines)");
	p->lines++;
	fflush(stderr);
	p->next_s = in + 2 * p->first_s;
}

/*
 * Slabs a budget may hold before --granules, unless given, is doubled: the
 * host driver maps the slabs of each buffer side by side as one mapping,
 * but a budget of thousands of one-granule slabs, freed in holes, splits
 * them past vm.max_map_count (65530) and map or unmap fails (EIO).  1024
 * slabs keep a llama-3-8b pool (64 buffers) far below it.
 */
#define AUTO_GRANULES_SLABS 1024

static void auto_granules(struct opts *o, struct rp_strategy *st, size_t n)
{
	size_t gran = o->sim.granularity ? o->sim.granularity : 2u << 20, i;
	uint64_t cell = kvs_model_cell_size(&o->sim.model), tok;
	uint32_t g = o->granules;

	if (GIVEN(o, O_GRANULES) || !cell)
		return;
	for (i = 0; i < n; i++)
		while (st[i].kind == RP_SLAB && g < 4096) {
			tok = rp_slab_tokens(&o->sim.model, st[i].page_size, gran, g);
			if (!tok || tok > UINT64_MAX / cell ||
			    o->sim.kv_bytes / (tok * cell) <= AUTO_GRANULES_SLABS)
				break;
			g *= 2;
		}
	if (g == o->granules)
		return;
	for (i = 0; i < n; i++)
		st[i].slab_granules = g;
	o->granules = g;
	o->granules_auto = 1;
}

static void futile(const char *what, const char *why)
{
	fprintf(stderr, "kvslab-replay: warning: %s has no effect: %s\n", what, why);
}

/*
 * Options given that cannot change this run, each said once on stderr
 * before it starts: a limit not below the budget, a cap that keeps the
 * cache from the memory -M P% sized for it, an option of a strategy, cache
 * or output that is not there, the generator's options with a trace.
 */
static void futile_options(const struct opts *o, const struct rp_trace *t,
			   const struct rp_strategy *st, size_t n, uint64_t unique)
{
	int slab = 0, hash = 0, radix = 0;
	char b1[32], b2[32], what[96];
	size_t i;

	for (i = 0; i < n; i++) {
		slab |= st[i].kind == RP_SLAB;
		hash |= st[i].cache == RP_CACHE_HASH;
		radix |= st[i].cache == RP_CACHE_RADIX;
	}
	if (o->sim.nlimits && !slab)
		futile("--limit-schedule", "only a slab strategy has an elastic limit (static and "
					   "paged pools cannot give memory back): add slab:16 to -s");
	/* A point at or above the budget restores it after a lower one; before
	 * any, it changes nothing. */
	for (i = 0; slab && i < o->sim.nlimits && o->sim.limits[i].bytes >= o->sim.kv_bytes;
	     i++) {
		rp_fmt_bytes(o->sim.limits[i].bytes, b1, sizeof(b1));
		rp_fmt_bytes(o->sim.kv_bytes, b2, sizeof(b2));
		snprintf(what, sizeof(what), "--limit-schedule point %g s:%s",
			 o->sim.limits[i].t_ms / 1e3, b1);
		fprintf(stderr, "kvslab-replay: warning: %s has no effect: %s is not below the "
				"budget of %s (-M), and a limit only lowers the budget: give a "
				"larger -M for the limit to raise\n", what, b1, b2);
	}
	if (GIVEN(o, O_CACHEMAX) && o->sim.no_cache)
		futile("--cache-max", "--no-cache keeps no cache to cap");
	else if (GIVEN(o, O_CACHEMAX) && o->kv_share > 0 && o->sim.cache_max >= 0 &&
		 o->sim.cache_max < 1) {
		double tok = o->sim.cache_max * (double)o->sim.kv_bytes /
			     (double)kvs_model_cell_size(&o->sim.model);

		fprintf(stderr, "kvslab-replay: warning: --cache-max %g%% defeats -M %g%%: the "
				"cache holds at most %.0f tokens, %.3g%% of the trace's %llu unique "
				"tokens, not the %g%% the budget was sized for; expect the hit ratio "
				"of a cache that size (--cache-max off: the budget's)\n",
			o->sim.cache_max * 100, o->kv_share, tok,
			unique ? 100 * tok / (double)unique : 0.0, (unsigned long long)unique,
			o->kv_share);
	}
	if (!slab) {
		static const struct {
			int opt;
			const char *name;
		} so[] = {{O_GRANULES, "--granules"}, {O_MINE, "--min-empty"},
			  {O_MAXE, "--max-empty"},     {O_QUIET, "--shrink-quiet"},
			  {O_WORKER, "--worker"},      {O_COMPACT, "--compact"},
			  {O_SLABAWARE, "--slab-aware"}};

		for (i = 0; i < sizeof(so) / sizeof(so[0]); i++)
			if (GIVEN(o, so[i].opt))
				futile(so[i].name, "it sets the slab strategy, and -s has none");
	}
	if (GIVEN(o, O_BLOCKHASH) && !hash)
		futile("--block-hash", "it hashes the blocks of --cache hash, which is not used");
	if (GIVEN(o, O_SLABAWARE) && slab && (!radix || o->sim.no_cache))
		futile("--slab-aware", "it steers the radix cache's eviction, which is not used");
	if (GIVEN(o, O_CSVFULL) && !o->csv)
		futile("--csv-full", "there is no --csv");
	if (o->trace_path) {
		static const struct {
			int opt;
			const char *name;
		} go[] = {{O_REQUESTS, "--requests"},	   {O_IN_MEAN, "--input-mean"},
			  {O_IN_MAX, "--input-max"},	   {O_OUT_MEAN, "--output-mean"},
			  {O_OUT_MAX, "--output-max"},	   {O_SHARED, "--shared-ratio"},
			  {O_PREFIXES, "--prefixes"}};

		for (i = 0; i < sizeof(go) / sizeof(go[0]); i++)
			if (GIVEN(o, go[i].opt))
				futile(go[i].name, "it sets the built-in generator, and a trace is "
						   "replayed");
		if (!t->no_timestamps && GIVEN(o, O_RATE))
			futile("--rate", "the trace has its own arrival times");
		if (!t->no_timestamps && GIVEN(o, O_SEED))
			futile("--seed", "it seeds the generator's and ShareGPT's arrivals, and "
					 "the trace has its own");
	}
	if (!o->sim.use_timestamps && GIVEN(o, O_RATE))
		futile("--rate", "--no-timestamps makes every request arrive at once");
}

/*
 * The overload warnings' advice: the budget the arrivals ask for, from
 * rp_trace_peak_need() (every request served on arrival with all its
 * tokens, no sharing), the cache cap's share added, rounded up.
 */
static void suggest_budget(const struct opts *o, const struct rp_trace *t)
{
	uint64_t peak, cell = kvs_model_cell_size(&o->sim.model);
	double b;
	size_t run;
	char sz[32];
	int u;

	if (!o->sim.use_timestamps ||
	    rp_trace_peak_need(t, o->sim.step_ms, o->sim.chunk, &peak, &run) < 0 || !peak)
		return;
	b = (double)peak * (double)cell;
	if (o->sim.cache_max >= 0 && o->sim.cache_max < 0.9)
		b /= 1 - o->sim.cache_max;
	/* Rounded up in the largest unit it has one of: 51M, 127G. */
	for (u = 0; u < 4 && b >= 1024.0 * 1024; u++)
		b /= 1024;
	snprintf(sz, sizeof(sz), "%.0f%c", ceil(b / 1024), "KMGT"[u]);
	fprintf(stderr, "kvslab-replay: the arrivals ask for about -M %s: at their peak %llu "
			"tokens are in flight (%zu requests, each served on arrival with its whole "
			"input and output, no prefix shared%s)",
		sz, (unsigned long long)peak, run,
		o->sim.cache_max >= 0 && o->sim.cache_max < 0.9 ? ", plus the cache cap's share"
								 : "");
	if (run > o->sim.max_running)
		fprintf(stderr, "; and --max-running %zu: more than %u run at once", run,
			o->sim.max_running);
	fprintf(stderr, "\n");
}

/*
 * What a reader should know before trusting the numbers, on stderr, each
 * with the option to try: an overloaded run (preemptions, rejections, a
 * simulated span well past the trace's) measures the queue, not the
 * allocator; a trace without prefix data cannot hit the cache.
 */
static void warnings(const struct opts *o, const struct rp_trace *t, double ideal,
		     const struct rp_result *res, size_t n)
{
	double span = t->n ? t->req[t->n - 1].arrival_ms : 0;
	uint64_t pre = 0, rej = 0;
	double sim = 0;
	size_t i;
	int over = 0;

	for (i = 0; i < n; i++) {
		pre += res[i].preempted;
		rej += res[i].rejected;
		if (res[i].sim_ms > sim)
			sim = res[i].sim_ms;
	}
	if (pre || rej)
		fprintf(stderr, "kvslab-replay: warning: overloaded: %llu preemptions, %llu "
				"rejected requests over %zu run%s; the budget is too small for the "
				"arrivals: try a larger -M (--kv-mem)%s\n",
			(unsigned long long)pre, (unsigned long long)rej, n, n == 1 ? "" : "s",
			o->trace_path && !t->no_timestamps ? "" : " or a lower --rate");
	over = pre || rej;
	if (o->sim.use_timestamps && span > 0 && sim > 1.5 * span + 60000 && ++over)
		fprintf(stderr, "kvslab-replay: warning: overloaded: the replay ran %.0f simulated "
				"seconds for arrivals over %.0f s: requests queued far behind their "
				"arrival; try a larger -M (--kv-mem)%s\n",
			sim / 1e3, span / 1e3,
			o->trace_path && !t->no_timestamps ? "" : " or a lower --rate");
	if (over)
		suggest_budget(o, t);
	for (i = 0; i < o->sim.nlimits; i++)
		if (o->sim.limits[i].t_ms > sim) {
			fprintf(stderr, "kvslab-replay: warning: --limit-schedule: the limit at %g s "
					"was never reached: the run ended at %.0f simulated seconds\n",
				o->sim.limits[i].t_ms / 1e3, sim / 1e3);
			break;
		}
	/* The store served its pages, but they left the host before use. */
	for (i = 0; i < n; i++)
		if (res[i].l3_prefetched && res[i].l3_gone > res[i].l3_prefetched / 2)
			fprintf(stderr, "kvslab-replay: warning: %s: %.0f%% of the tokens prefetched "
					"from the store were evicted from the host tier before their "
					"request's first prefill (it waited or was preempted while "
					"backups of the requests that ran filled the host): they were "
					"recomputed, not L3 hits; try a larger --host-pool or -M\n",
				res[i].strat.name,
				100.0 * (double)res[i].l3_gone / (double)res[i].l3_prefetched);
	if (ideal <= 0 && !o->sim.no_cache)
		fprintf(stderr, "kvslab-replay: warning: the trace has no prefix data (no request "
				"shares a block with an earlier one): the prefix cache cannot hit and "
				"only holds memory; try --no-cache, or --cache-max to cap it\n");
}

/* --metrics: a registry served over HTTP; each run's objects join it while
 * the run lasts (rp_sim_opts.metrics). */
static int start_metrics(struct opts *o)
{
	uint16_t port;
	int e;

	o->sim.metrics = kvs_metrics_create();
	if (o->sim.metrics && kvs_metrics_serve(o->sim.metrics, o->metrics, &port) == 0) {
		/* Even with -q: port 0 is only known from here. */
		fprintf(stderr, "kvslab-replay: metrics on %s (port %u) at /metrics\n", o->metrics,
			(unsigned)port);
		return 0;
	}
	e = errno;
	fprintf(stderr, "kvslab-replay: --metrics %s: %s\n", o->metrics,
		e == ENOTSUP  ? "built without libmicrohttpd (no HTTP server)"
		: e == EINVAL ? "not an address: HOST:PORT, [IPV6]:PORT or :PORT"
			      : strerror(e));
	kvs_metrics_destroy(o->sim.metrics);
	o->sim.metrics = NULL;
	return -1;
}

int main(int argc, char **argv)
{
	struct rp_strategy strats[MAX_RUNS];
	struct rp_result res[MAX_RUNS];
	enum rp_cache caches[2];
	size_t nc, k;
	struct rp_trace t;
	struct opts o;
	struct rp_meta meta;
	struct progress prog;
	kvs_model_t model;
	size_t ns, i;
	uint64_t unique;
	double ideal;
	int rc = 0;

	const char *arrivals;
	char arrbuf[96];

	if (parse_args(argc, argv, &o) < 0) {
		free(o.limits);
		return 2;
	}
	if (kvs_model_preset(o.model_name, &model) < 0) {
		fprintf(stderr, "kvslab-replay: unknown model '%s'\n", o.model_name);
		return 2;
	}
	/* Overrides given on the command line win over the preset. */
	if (o.sim.model.layers) model.layers = o.sim.model.layers;
	if (o.sim.model.kv_heads) model.kv_heads = o.sim.model.kv_heads;
	if (o.sim.model.head_dim) model.head_dim = o.sim.model.head_dim;
	if (o.sim.model.dtype_size) model.dtype_size = o.sim.model.dtype_size;
	if (o.sim.model.tp_size) model.tp_size = o.sim.model.tp_size;
	o.sim.model = model;
	o.sim.model_name = o.model_name;
	if (parse_strategies(o.strategies, o.granules, strats, &ns) < 0 ||
	    parse_caches(o.caches, caches, &nc) < 0)
		return 2;
	if (o.sim.slab_aware == 2 && add_lru_twins(strats, &ns) < 0)
		return 2;
	if (o.sim.slab_aware == 2)
		o.sim.slab_aware = 1;
	/* One run a store: a second strategy would find the first's pages
	 * there, and the two would no longer be compared on equal terms. */
	if (o.sim.storage && ns > 1) {
		fprintf(stderr, "kvslab-replay: --storage runs one strategy (give one with -s, "
				"e.g. -s paged:16): a second would find the first's pages in the "
				"store\n");
		return 2;
	}
	if (RP_TIERED(&o.sim) && (nc != 1 || caches[0] != RP_CACHE_RADIX)) {
		fprintf(stderr, "kvslab-replay: --host-pool works with --cache radix only (the "
				"hashed block cache has no host tier)\n");
		return 2;
	}
	/* Each strategy with each cache; named by the cache unless it is
	 * the radix cache alone. */
	for (i = ns; i-- > 0;)
		for (k = nc; k-- > 0;) {
			struct rp_strategy *d = &strats[i * nc + k];

			if (d != &strats[i])
				*d = strats[i];
			d->cache = caches[k];
			if (nc > 1 || caches[k] != RP_CACHE_RADIX)
				snprintf(d->name + strlen(d->name), sizeof(d->name) - strlen(d->name),
					 "/%s", caches[k] == RP_CACHE_HASH ? "hash" : "radix");
		}
	ns *= nc;

	if (o.trace_path) {
		if (rp_trace_load(o.trace_path, o.fmt, o.strict, stderr, &t) < 0) {
			fprintf(stderr, "kvslab-replay: %s: %s\n", o.trace_path,
				errno != EINVAL ? strerror(errno)
				: o.strict	? "stopped at the malformed line reported above (--strict)"
						: "no usable request: the file is empty, or every line "
						  "is blank or malformed (reported above)");
			return 1;
		}
	} else if (rp_trace_synth(&o.synth, &t) < 0) {
		int e = errno;

		fprintf(stderr, "kvslab-replay: generator: %s\n",
			e == EINVAL ? "inconsistent options (a mean above its maximum, or arrivals "
				      "so sparse that time overflows)"
			: e == ENOMEM ? "out of memory, or more than 2^22 distinct blocks of 512 "
					"tokens (lower --requests or --input-max)"
				      : strerror(e));
		return e == EINVAL ? 2 : 1;
	}
	if (t.no_timestamps && o.sim.use_timestamps) {
		rp_trace_set_rate(&t, o.synth.rate, o.synth.seed);
		snprintf(arrbuf, sizeof(arrbuf), "none in the trace: Poisson at %g requests/s (--rate)",
			 o.synth.rate);
		arrivals = arrbuf;
	} else if (!o.sim.use_timestamps)
		arrivals = "all at once (--no-timestamps)";
	else if (o.trace_path)
		arrivals = "the trace's timestamps";
	else {
		snprintf(arrbuf, sizeof(arrbuf), "Poisson at %g requests/s (--rate)", o.synth.rate);
		arrivals = arrbuf;
	}
	ideal = rp_trace_ideal_hit(&t, 1, &unique);
	if (o.kv_share > 0) {
		double b = (double)unique * o.kv_share / 100.0 * (double)kvs_model_cell_size(&model);

		if (!(b >= 1.0) || b > 1e18) {
			fprintf(stderr, "kvslab-replay: --kv-mem %g%% of %llu unique tokens is %s\n",
				o.kv_share, (unsigned long long)unique, b < 1.0 ? "no memory" : "too much");
			rp_trace_free(&t);
			return 2;
		}
		o.sim.kv_bytes = (uint64_t)b;
		/* The percentage sizes the cache: a cap of the budget would
		 * keep it from that memory (10% of 10%). */
		if (!GIVEN(&o, O_CACHEMAX))
			o.sim.cache_max = -1;
	}
	auto_granules(&o, strats, ns);
	if (!o.quiet) {
		printf("trace: %s, %zu requests", o.trace_path ? o.trace_path : "built-in generator",
		       t.n);
		if (t.malformed)
			printf(" (%llu malformed lines skipped)", (unsigned long long)t.malformed);
		printf(", %llu unique tokens, ideal hit %.4f\n", (unsigned long long)unique, ideal);
		printf("model: %s, %zu bytes of KV a token; KV memory %.1f GiB", o.model_name,
		       kvs_model_cell_size(&model), o.sim.kv_bytes / 1073741824.0);
		if (o.kv_share > 0)
			printf(" (%g%% of the unique tokens' KV: %llu of %llu tokens, what a prefix "
			       "cache that never evicts would hold)", o.kv_share,
			       (unsigned long long)(o.sim.kv_bytes / kvs_model_cell_size(&model)),
			       (unsigned long long)unique);
		printf("; driver %s\n", o.sim.driver);
		if (o.kv_share > 0 && !GIVEN(&o, O_CACHEMAX) && !o.sim.no_cache)
			printf("note: the prefix cache is uncapped: -M %g%% sized it (--cache-max "
			       "caps it)\n", o.kv_share);
		if (o.granules_auto)
			printf("note: --granules %u: a budget of over %d slabs of one granule "
			       "(--granules sets it)\n", o.granules, AUTO_GRANULES_SLABS);
	}
	futile_options(&o, &t, strats, ns, unique);
	memset(&prog, 0, sizeof(prog));
	prog.on = o.progress;
	prog.tty = isatty(STDERR_FILENO);
	prog.runs = ns;
	prog.t0 = rp_now_ns();
	{
		const char *e = getenv("KVSLAB_REPLAY_PROGRESS_S");
		char *end;

		prog.first_s = e && *e ? strtod(e, &end) : PROGRESS_FIRST_S;
		if (!e || !*e || *end || !(prog.first_s >= 0) || prog.first_s > 1e6)
			prog.first_s = PROGRESS_FIRST_S;
		prog.next_s = prog.first_s;
	}
	if (o.metrics && start_metrics(&o) < 0) {
		rp_trace_free(&t);
		return 2;
	}
	for (i = 0; i < ns; i++) {
		struct progress *pp = &prog;
		char verdict[256];

		prog.name = strats[i].name;
		prog.run = i;
		prog.t_run = rp_now_ns();
		if (rp_simulate(&t, &o.sim, &strats[i], &res[i], show_progress, pp) < 0) {
			fprintf(stderr, "%skvslab-replay: %s: %s\n", o.progress && prog.tty ? "\n" : "",
				strats[i].name, res[i].error[0] ? res[i].error : strerror(errno));
			while (i-- > 0)
				rp_result_free(&res[i]);
			rp_trace_free(&t);
			kvs_metrics_destroy(o.sim.metrics);
			return 1;
		}
		if ((double)(rp_now_ns() - prog.t_run) / 1e9 > prog.longest_s)
			prog.longest_s = (double)(rp_now_ns() - prog.t_run) / 1e9;
		if (rp_result_verdict(&res[i], verdict, sizeof(verdict)) < 0) {
			fprintf(stderr, "kvslab-replay: %s: %s\n", strats[i].name, verdict);
			rc = 1;
		}
		if (res[i].live_over_mapped) {
			fprintf(stderr, "kvslab-replay: %s: live bytes exceeded mapped bytes at %llu "
					"steps\n",
				strats[i].name, (unsigned long long)res[i].live_over_mapped);
			rc = 1;
		}
	}
	memset(&meta, 0, sizeof(meta));
	meta.trace = o.trace_path ? o.trace_path : "generator";
	meta.model = o.model_name;
	meta.driver = o.sim.driver;
	meta.requests = t.n;
	meta.cell = kvs_model_cell_size(&model);
	meta.kv_bytes = o.sim.kv_bytes;
	meta.ideal_hit = ideal;
	meta.sim = &o.sim;
	meta.cost = &o.cost;
	meta.granules = o.granules;
	meta.granularity = res[0].granularity;
	meta.arrivals = arrivals;
	if (!o.quiet) {
		printf("\n");
		rp_report_settings(stdout, &meta, res, ns);
		rp_report_tables(stdout, res, ns, &o.cost);
		rp_report_verdict(stdout, res, ns, &o.cost);
	}
	fflush(stdout);
	warnings(&o, &t, ideal, res, ns);
	if (o.csv && rp_report_csv(o.csv, res, ns, o.csv_full ? 0 : CSV_POINTS) < 0) {
		fprintf(stderr, "kvslab-replay: %s: %s\n", o.csv, strerror(errno));
		rc = 1;
	}
	if (o.json && rp_report_json(o.json, &meta, res, ns) < 0) {
		fprintf(stderr, "kvslab-replay: %s: %s\n", o.json, strerror(errno));
		rc = 1;
	}
	if (o.plot) {
		if (rp_report_plot(o.plot, res, ns, &o.cost) < 0) {
			fprintf(stderr, "kvslab-replay: --plot %s: %s\n", o.plot,
				errno == ENOEXEC ? "gnuplot is not installed" : strerror(errno));
			rc = 1;
		} else if (!o.quiet) {
			printf("\nplot written to %s\n", o.plot);
		}
	}
	for (i = 0; i < ns; i++)
		rp_result_free(&res[i]);
	rp_trace_free(&t);
	free(o.limits);
	kvs_metrics_destroy(o.sim.metrics);	/* stops its server */
	return rc;
}
