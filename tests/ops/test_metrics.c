/* SPDX-License-Identifier: MIT */
/*
 * tests/ops/test_metrics.c - kvs_metrics_write(): the Prometheus text of a
 * driver, two pools (their slabs), a radix tree, a hash cache, a host pool,
 * a hierarchical cache and a file store, checked line by line by a strict
 * parser (tests/prom_check.py) and sample by sample against each object's
 * own kvs_*_stat(); the escaping of a label with a quote, a backslash and a
 * newline; the registry's refusals and removal; kvs_metrics_serve(): a
 * real HTTP GET over a socket, the body through the same checker, a second
 * server on the port refused, the loopback address by default, every
 * socket and thread gone after the stop (skipped, with the reason, when
 * built without libmicrohttpd).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

struct buf {
	char *p;
	size_t len, cap;
	int calls;
};

static void buf_cb(void *arg, const char *data, size_t len)
{
	struct buf *b = arg;

	if (b->len + len + 1 > b->cap) {
		b->cap = (b->len + len + 1) * 2;
		b->p = realloc(b->p, b->cap);
		ck_assert_ptr_nonnull(b->p);
	}
	memcpy(b->p + b->len, data, len);
	b->len += len;
	b->p[b->len] = 0;
	b->calls++;
	ck_assert(len > 0 && data[len - 1] == '\n');
}

/* One expected sample. */
struct exp {
	char name[128];
	const char *label;
	char value[32];
	int found;
};

struct exps {
	struct exp e[1024];
	size_t n;
};

/*
 * The names kvs_metrics_write(3) gives where they are not
 * kvslab_FAMILY_STATISTIC (Prometheus's conventions: the unit last, no
 * word twice), and the times it writes in seconds: the documented
 * contract, written out here so that a change to it fails.
 */
static const struct {
	const char *fam, *stat, *name;
	int ns;
} renames[] = {
	{"drv", "bytes_reserved", "drv_reserved_bytes", 0},
	{"drv", "bytes_created", "drv_created_bytes", 0},
	{"drv", "bytes_created_peak", "drv_created_peak_bytes", 0},
	{"drv", "bytes_mapped", "drv_mapped_bytes", 0},
	{"drv", "bytes_mapped_peak", "drv_mapped_peak_bytes", 0},
	{"drv", "bytes_copied", "drv_copied_bytes", 0},
	{"drv", "bytes_host", "drv_host_bytes", 0},
	{"drv", "ns_in_calls", "drv_call_seconds", 1},
	{"slab", "bytes_mapped", "slab_mapped_bytes", 0},
	{"slab", "bytes_mapped_peak", "slab_mapped_peak_bytes", 0},
	{"slab", "bytes_live", "slab_live_bytes", 0},
	{"slab", "bytes_pooled", "slab_pooled_bytes", 0},
	{"slab", "slab_maps", "slab_maps", 0},
	{"slab", "slab_unmaps", "slab_unmaps", 0},
	{"slab", "drv_ns", "slab_drv_call_seconds", 1},
	{"radix", "evict_section_ns", "radix_evict_section_seconds", 1},
	{"radix", "evict_section_max_ns", "radix_evict_section_max_seconds", 1},
	{"radix", "evict_section_cpu_max_ns", "radix_evict_section_cpu_max_seconds", 1},
	{"hpool", "bytes_copied", "hpool_copied_bytes", 0},
	{"store", "bytes_read", "store_read_bytes", 0},
	{"store", "bytes_written", "store_written_bytes", 0},
	{"store", "bytes_stored", "store_stored_bytes", 0},
};

static void expect(struct exps *x, const char *fam, const char *stat, int counter,
		   const char *label, uint64_t v)
{
	struct exp *e = &x->e[x->n++];
	int ns = 0;

	ck_assert_uint_lt(x->n, 1024);
	snprintf(e->name, sizeof(e->name), "kvslab_%s_%s%s", fam, stat, counter ? "_total" : "");
	for (size_t i = 0; i < sizeof(renames) / sizeof(renames[0]); i++)
		if (!strcmp(renames[i].fam, fam) && !strcmp(renames[i].stat, stat)) {
			snprintf(e->name, sizeof(e->name), "kvslab_%s%s", renames[i].name,
				 counter ? "_total" : "");
			ns = renames[i].ns;
		}
	e->label = label;
	if (ns)
		snprintf(e->value, sizeof(e->value), "%" PRIu64 ".%09" PRIu64, v / 1000000000u,
			 v % 1000000000u);
	else
		snprintf(e->value, sizeof(e->value), "%" PRIu64, v);
	e->found = 0;
}

#define IS_COUNTER_gauge 0
#define IS_COUNTER_counter 1
#define KIND(n, k, d) IS_COUNTER_##k,
static const int drv_kind[] = {KVS_DRV_STATS(KIND)};
static const int slab_kind[] = {KVS_SLAB_STATS(KIND)};
static const int radix_kind[] = {KVS_RADIX_STATS(KIND)};
static const int hpool_kind[] = {KVS_HPOOL_STATS(KIND)};
static const int hiradix_kind[] = {KVS_HIRADIX_STATS(KIND)};
static const int store_kind[] = {KVS_STORE_STATS(KIND)};

struct objs {
	kvs_drv_t *d;
	kvs_pool_t *p, *p2;
	kvs_radix_t *r;
	kvs_hcache_t *hc;
	kvs_hpool_t *hp;
	kvs_hiradix_t *h;
	kvs_store_t *st;
	const char *lp, *lp2, *ld, *lr, *lhc, *lhp, *lh, *lst;
};

/* The tiered cache's device tokens it could evict: with nothing locked
 * and no copy in flight (these tests lock nothing), all of them. */
static uint64_t hr_evictable(kvs_hiradix_t *h)
{
	kvs_hiradix_usage_t u;

	ck_assert_int_eq(kvs_hiradix_usage(h, &u), 0);
	ck_assert_uint_eq(u.backups_pending + u.loads_pending, 0);
	return u.device_tokens;
}

static void expect_all(struct exps *x, const struct objs *o)
{
	kvs_hcache_stats_t hs;

	x->n = 0;
	for (int i = 0; i < KVS_DRV_STAT__COUNT; i++)
		expect(x, "drv", kvs_drv_stat_name(i), drv_kind[i], o->ld, kvs_drv_stat(o->d, i));
	for (int i = 0; i < KVS_SLAB_STAT__COUNT; i++) {
		expect(x, "slab", kvs_slab_stat_name(i), slab_kind[i], o->lp,
		       kvs_slab_stat(kvs_pool_slab(o->p), i));
		expect(x, "slab", kvs_slab_stat_name(i), slab_kind[i], o->lp2,
		       kvs_slab_stat(kvs_pool_slab(o->p2), i));
	}
	expect(x, "pool", "capacity_pages", 0, o->lp, kvs_pool_capacity(o->p));
	expect(x, "pool", "available_pages", 0, o->lp, kvs_pool_available(o->p));
	expect(x, "pool", "page_size_tokens", 0, o->lp, kvs_pool_page_size(o->p));
	expect(x, "pool", "capacity_pages", 0, o->lp2, kvs_pool_capacity(o->p2));
	expect(x, "pool", "available_pages", 0, o->lp2, kvs_pool_available(o->p2));
	expect(x, "pool", "page_size_tokens", 0, o->lp2, kvs_pool_page_size(o->p2));
	/* Every cache registered on a pool: o->p has the radix and the
	 * tiered caches, o->p2 the hashed one (its free queue's blocks, a
	 * page each). */
	expect(x, "pool", "caches", 0, o->lp, 2);
	expect(x, "pool", "evictable_tokens", 0, o->lp,
	       kvs_radix_evictable(o->r) + hr_evictable(o->h));
	expect(x, "pool", "caches", 0, o->lp2, 1);
	expect(x, "pool", "evictable_tokens", 0, o->lp2,
	       (uint64_t)kvs_hcache_free_queue(o->hc, NULL, 0) * kvs_pool_page_size(o->p2));
	/* KV usage as vLLM and SGLang count it: neither free nor evictable. */
	for (int i = 0; i < 2; i++) {
		kvs_pool_t *p = i ? o->p2 : o->p;
		const char *l = i ? o->lp2 : o->lp;
		uint64_t cap = (uint64_t)kvs_pool_capacity(p) * kvs_pool_page_size(p);
		uint64_t idle = (uint64_t)kvs_pool_available(p) * kvs_pool_page_size(p) +
				(i ? (uint64_t)kvs_hcache_free_queue(o->hc, NULL, 0) *
					     kvs_pool_page_size(p)
				   : kvs_radix_evictable(o->r) + hr_evictable(o->h));
		uint64_t used = idle < cap ? cap - idle : 0;
		struct exp *e;

		expect(x, "pool", "capacity_tokens", 0, l, cap);
		expect(x, "pool", "used_tokens", 0, l, used);
		expect(x, "pool", "usage_ratio", 0, l, 0);
		e = &x->e[x->n - 1];
		snprintf(e->value, sizeof(e->value), "%.17g", cap ? (double)used / (double)cap : 0.0);
	}
	for (int i = 0; i < KVS_RADIX_STAT__COUNT; i++)
		expect(x, "radix", kvs_radix_stat_name(i), radix_kind[i], o->lr,
		       kvs_radix_stat(o->r, i));
	ck_assert_int_eq(kvs_hcache_stats(o->hc, &hs), 0);
	expect(x, "hcache", "queries", 1, o->lhc, hs.queries);
	expect(x, "hcache", "hit_blocks", 1, o->lhc, hs.hit_blocks);
	expect(x, "hcache", "cached_blocks", 0, o->lhc, hs.cached_blocks);
	expect(x, "hcache", "used_blocks", 0, o->lhc, hs.used_blocks);
	expect(x, "hcache", "query_tokens", 1, o->lhc, hs.query_tokens);
	expect(x, "hcache", "hit_tokens", 1, o->lhc, hs.hit_tokens);
	expect(x, "hcache", "window_query_tokens", 0, o->lhc, hs.window_query_tokens);
	expect(x, "hcache", "window_hit_tokens", 0, o->lhc, hs.window_hit_tokens);
	for (int i = 0; i < KVS_HPOOL_STAT__COUNT; i++)
		expect(x, "hpool", kvs_hpool_stat_name(i), hpool_kind[i], o->lhp,
		       kvs_hpool_stat(o->hp, i));
	for (int i = 0; i < KVS_HIRADIX_STAT__COUNT; i++)
		expect(x, "hiradix", kvs_hiradix_stat_name(i), hiradix_kind[i], o->lh,
		       kvs_hiradix_stat(o->h, i));
	for (int i = 0; i < KVS_STORE_STAT__COUNT; i++)
		expect(x, "store", kvs_store_stat_name(i), store_kind[i], o->lst,
		       kvs_store_stat(o->st, i));
}

static int exps_equal(const struct exps *a, const struct exps *b)
{
	if (a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->e[i].value, b->e[i].value))
			return 0;
	return 1;
}

static void hex(const char *s, char *out)
{
	if (!s) {
		strcpy(out, "-");
		return;
	}
	for (; *s; s++, out += 2)
		sprintf(out, "%02x", (unsigned char)*s);
	*out = 0;
}

/* Run the strict parser on @text; its samples, one "name\thex\tvalue" a line. */
static char *prom_check(const char *text, size_t len, int *status)
{
	const char *src = getenv("KVSLAB_TOP_SRCDIR");
	char path[] = "/tmp/kvs_metrics_XXXXXX", cmd[1024];
	struct buf out = {0};
	char line[4096];
	FILE *f, *p;
	int fd;

	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "python3 '%s/tests/prom_check.py' '%s'", src && *src ? src : ".",
		 path);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (fgets(line, sizeof(line), p))
		buf_cb(&out, line, strlen(line));
	*status = pclose(p);
	unlink(path);
	if (!out.p)
		out.p = strdup("");
	return out.p;
}

static void check_samples(char *samples, struct exps *x, size_t want_lines)
{
	char *save = NULL, *l;
	size_t lines = 0;

	for (l = strtok_r(samples, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *name = l, *lab = strchr(l, '\t'), *val;

		ck_assert_ptr_nonnull(lab);
		*lab++ = 0;
		val = strchr(lab, '\t');
		ck_assert_ptr_nonnull(val);
		*val++ = 0;
		lines++;
		for (size_t i = 0; i < x->n; i++) {
			char h[512];

			hex(x->e[i].label, h);
			if (strcmp(x->e[i].name, name) || strcmp(h, lab))
				continue;
			ck_assert_msg(!strcmp(x->e[i].value, val), "%s{%s} = %s, kvs_*_stat says %s",
				      name, lab, val, x->e[i].value);
			x->e[i].found++;
		}
	}
	for (size_t i = 0; i < x->n; i++)
		ck_assert_msg(x->e[i].found == 1, "%s (%s) written %d times", x->e[i].name,
			      x->e[i].label ? x->e[i].label : "no label", x->e[i].found);
	ck_assert_uint_eq(lines, want_lines);
}

static void open_all(struct objs *o, char *dir)
{
	kvs_drv_attr_t da;
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;
	kvs_store_attr_t sa;
	kvs_hcache_attr_t hca;
	char uri[128];

	kvs_drv_attr_init(&da);
	da.granularity = 4096;
	o->d = kvs_drv_open("host", &da);
	ck_assert_ptr_nonnull(o->d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 2;
	pa.model.kv_heads = 1;
	pa.model.head_dim = 64;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 4;
	pa.max_tokens = 256;
	o->p = kvs_pool_create(o->d, &pa);
	ck_assert_ptr_nonnull(o->p);
	o->p2 = kvs_pool_create(o->d, &pa);
	ck_assert_ptr_nonnull(o->p2);
	o->r = kvs_radix_create(o->p, NULL);
	ck_assert_ptr_nonnull(o->r);
	kvs_hcache_attr_init(&hca);
	o->hc = kvs_hcache_create(o->p2, &hca);
	ck_assert_ptr_nonnull(o->hc);
	kvs_hpool_attr_init(&ha);
	o->hp = kvs_hpool_create(o->p, &ha);
	ck_assert_ptr_nonnull(o->hp);
	o->h = kvs_hiradix_create(o->p, o->hp, NULL);
	ck_assert_ptr_nonnull(o->h);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(uri, sizeof(uri), "file://%s", dir);
	kvs_store_attr_init(&sa);
	sa.page_bytes = 512;
	o->st = kvs_store_open(uri, &sa);
	ck_assert_ptr_nonnull(o->st);
}

static void close_all(struct objs *o, const char *dir)
{
	char cmd[256];

	ck_assert_int_eq(kvs_store_close(o->st), 0);
	ck_assert_int_eq(kvs_hiradix_destroy(o->h), 0);
	ck_assert_int_eq(kvs_hpool_destroy(o->hp), 0);
	ck_assert_int_eq(kvs_hcache_destroy(o->hc), 0);
	ck_assert_int_eq(kvs_radix_destroy(o->r), 0);
	ck_assert_int_eq(kvs_pool_destroy(o->p2), 0);
	ck_assert_int_eq(kvs_pool_destroy(o->p), 0);
	ck_assert_int_eq(kvs_drv_close(o->d), 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_write_all)
{
	static const char tricky[] = "r\"q\\x\ny";
	char dir[] = "/tmp/kvs_metrics_XXXXXX";
	struct objs o = {0};
	struct exps *before = calloc(1, sizeof(*before)), *after = calloc(1, sizeof(*after));
	struct buf b = {0};
	int32_t locs[8], key[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[8];
	kvs_metrics_t *m;
	char *samples;
	int status, tries;

	open_all(&o, dir);
	o.ld = "host0";
	o.lp = "gpu0";
	o.lp2 = "gpu1";
	o.lr = tricky;
	o.lhc = "hc";
	o.lhp = "h\\p";
	o.lh = NULL;
	o.lst = "file";
	/* Some traffic, so that counters are not all 0. */
	ck_assert_int_eq(kvs_pool_alloc(o.p, 8, locs), 0);
	ck_assert_int_eq(kvs_radix_insert(o.r, 0, key, 8, locs, 0, NULL), 0);
	ck_assert_int_eq(kvs_radix_match(o.r, 0, key, 8, got, NULL), 8);
	/* Queries count the whole key, hits whole pages (4 tokens): a hit
	 * rate over tokens as vLLM and SGLang give it. */
	ck_assert_int_eq(kvs_radix_match(o.r, 0, key, 7, got, NULL), 4);
	ck_assert_uint_eq(kvs_radix_stat(o.r, KVS_RADIX_STAT_query_tokens), 8 + 7);
	ck_assert_uint_eq(kvs_radix_stat(o.r, KVS_RADIX_STAT_hit_tokens), 8 + 4);

	m = kvs_metrics_create();
	ck_assert_ptr_nonnull(m);
	/* Nothing registered: nothing written, and that is valid text. */
	ck_assert_int_eq(kvs_metrics_write(m, buf_cb, &b), 0);
	ck_assert_uint_eq(b.len, 0);
	ck_assert_int_eq(kvs_metrics_add_drv(m, o.d, o.ld), 0);
	ck_assert_int_eq(kvs_metrics_add_pool(m, o.p, o.lp), 0);
	ck_assert_int_eq(kvs_metrics_add_pool(m, o.p2, o.lp2), 0);
	ck_assert_int_eq(kvs_metrics_add_radix(m, o.r, o.lr), 0);
	ck_assert_int_eq(kvs_metrics_add_hcache(m, o.hc, o.lhc), 0);
	ck_assert_int_eq(kvs_metrics_add_hpool(m, o.hp, o.lhp), 0);
	ck_assert_int_eq(kvs_metrics_add_hiradix(m, o.h, o.lh), 0);
	ck_assert_int_eq(kvs_metrics_add_store(m, o.st, o.lst), 0);
	/* Refusals: the same object, a pool's own slab, a label taken in the
	 * family (the slab family holds the pools' slabs). */
	errno = 0;
	ck_assert_int_eq(kvs_metrics_add_drv(m, o.d, "other"), -1);
	ck_assert_int_eq(errno, EEXIST);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_add_slab(m, kvs_pool_slab(o.p), "s"), -1);
	ck_assert_int_eq(errno, EEXIST);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_add_hiradix(m, (kvs_hiradix_t *)&o, NULL), -1);
	ck_assert_int_eq(errno, EEXIST);

	/* The slab's worker may still be mapping ahead: compare a write with
	 * the stats read before and after it, when those agree. */
	for (tries = 0; tries < 50; tries++) {
		expect_all(before, &o);
		b.len = 0;
		b.calls = 0;
		ck_assert_int_eq(kvs_metrics_write(m, buf_cb, &b), 0);
		expect_all(after, &o);
		if (exps_equal(before, after))
			break;
		usleep(20000);
	}
	ck_assert_int_lt(tries, 50);
	ck_assert_int_ge(b.calls, 1);
	/* The label's escapes, as the format spells them. */
	ck_assert_ptr_nonnull(strstr(b.p, "kvslab_radix_matches_total{object=\"r\\\"q\\\\x\\ny\"} 2\n"));
	ck_assert_ptr_nonnull(strstr(b.p, "# TYPE kvslab_slab_alloc_fast_total counter\n"));
	ck_assert_ptr_nonnull(strstr(b.p, "# TYPE kvslab_slab_objects gauge\n"));
	ck_assert_ptr_nonnull(strstr(b.p, "\nkvslab_hiradix_nodes 0\n"));
	samples = prom_check(b.p, b.len, &status);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "prom_check.py failed on:\n%s",
		      b.p);
	/* Every expected sample once; the hcache has 7 more than we check. */
	check_samples(samples, before, before->n + 7);
	free(samples);

	/* Removal: the radix's series go, the family's HELP too. */
	ck_assert_int_eq(kvs_metrics_remove(m, o.r), 0);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_remove(m, o.r), -1);
	ck_assert_int_eq(errno, ENOENT);
	b.len = 0;
	ck_assert_int_eq(kvs_metrics_write(m, buf_cb, &b), 0);
	ck_assert_ptr_null(strstr(b.p, "kvslab_radix_"));
	/* Its label is free again; a slab alone is its own member. */
	ck_assert_int_eq(kvs_metrics_remove(m, o.p2), 0);
	ck_assert_int_eq(kvs_metrics_add_slab(m, kvs_pool_slab(o.p2), "gpu1"), 0);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_add_pool(m, o.p2, "gpu2"), -1);
	ck_assert_int_eq(errno, EEXIST);
	b.len = 0;
	ck_assert_int_eq(kvs_metrics_write(m, buf_cb, &b), 0);
	ck_assert_ptr_nonnull(strstr(b.p, "kvslab_slab_objects{object=\"gpu1\"} 0\n"));
	ck_assert_ptr_null(strstr(b.p, "kvslab_pool_capacity_pages{object=\"gpu1\"}"));
	samples = prom_check(b.p, b.len, &status);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	free(samples);

	ck_assert_int_eq(kvs_metrics_destroy(m), 0);
	ck_assert_int_eq(kvs_pool_free(o.p, 8, locs), 0);
	close_all(&o, dir);
	free(b.p);
	free(before);
	free(after);
}
END_TEST

/* The registry's locks are not held across write_cb (nor across the
 * objects' reads): a write_cb may add and remove objects, from its own
 * thread or another, and what it changes shows in the next write.  With
 * the list lock held across write_cb, the other thread's calls would wait
 * for ever: the join times out. */
struct churn {
	kvs_metrics_t *m;
	struct objs *o;
	int rc[3], done;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;

	c->rc[0] = kvs_metrics_add_hcache(c->m, c->o->hc, "hc");
	c->rc[1] = kvs_metrics_remove(c->m, c->o->d);
	c->rc[2] = kvs_metrics_add_drv(c->m, c->o->d, "host1");
	return NULL;
}

static void churn_cb(void *arg, const char *data, size_t len)
{
	struct churn *c = arg;
	struct timespec until;
	pthread_t t;

	(void)data;
	(void)len;
	if (c->done++)
		return;
	ck_assert_int_eq(pthread_create(&t, NULL, churn_main, c), 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	ck_assert_msg(pthread_timedjoin_np(t, NULL, &until) == 0,
		      "kvs_metrics_add/remove waited for a write_cb");
	/* And from the writing thread itself. */
	ck_assert_int_eq(kvs_metrics_add_store(c->m, c->o->st, NULL), 0);
}

START_TEST(test_write_cb_unlocked)
{
	char dir[] = "/tmp/kvs_metrics_XXXXXX";
	struct objs o = {0};
	struct churn c = {0};
	struct buf b = {0};
	kvs_block_hash_t h[2] = {0};
	int32_t blk[2];
	kvs_metrics_t *m;
	char *samples, *p, *q;
	int status;

	open_all(&o, dir);
	m = kvs_metrics_create();
	ck_assert_ptr_nonnull(m);
	c.m = m;
	c.o = &o;
	ck_assert_int_eq(kvs_metrics_add_drv(m, o.d, "host0"), 0);
	ck_assert_int_eq(kvs_metrics_write(m, churn_cb, &c), 0);
	ck_assert_int_eq(c.done, 1);
	ck_assert_int_eq(c.rc[0], 0);
	ck_assert_int_eq(c.rc[1], 0);
	ck_assert_int_eq(c.rc[2], 0);
	/* Two lookups of two blocks, none cached: a window ratio of 0, then
	 * the hcache family in the next write, its ratio after
	 * window_hit_blocks. */
	h[0].len = h[1].len = 8;
	h[1].bytes[0] = 1;
	ck_assert_int_eq(kvs_hcache_lookup(o.hc, h, 2, 12, blk), 0);
	ck_assert_int_eq(kvs_metrics_write(m, buf_cb, &b), 0);
	ck_assert_ptr_nonnull(strstr(b.p, "kvslab_drv_reserve_calls_total{object=\"host1\"} "));
	ck_assert_ptr_null(strstr(b.p, "object=\"host0\""));
	ck_assert_ptr_nonnull(strstr(b.p, "\nkvslab_store_exists_calls_total "));
	p = strstr(b.p, "kvslab_hcache_window_hit_blocks{object=\"hc\"} 0\n");
	q = strstr(b.p, "# HELP kvslab_hcache_window_hit_ratio window_hit_blocks / "
		       "window_query_blocks, 0 if none\n# TYPE kvslab_hcache_window_hit_ratio gauge\n"
		       "kvslab_hcache_window_hit_ratio{object=\"hc\"} 0\n"
		       "# HELP kvslab_hcache_cached_blocks ");
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(q);
	ck_assert_ptr_eq(strchr(p, '#'), q);
	ck_assert_ptr_nonnull(strstr(b.p, "kvslab_hcache_query_blocks_total{object=\"hc\"} 2\n"));
	samples = prom_check(b.p, b.len, &status);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	free(samples);
	ck_assert_int_eq(kvs_metrics_destroy(m), 0);
	close_all(&o, dir);
	free(b.p);
}
END_TEST

/* A label that is not UTF-8 is refused (the scrape would be unparsable,
 * and the format has no escape for a raw byte) and changes nothing; one
 * that is UTF-8, multi-byte and 4-byte sequences included, is written as
 * it is and parses. */
START_TEST(test_label_utf8)
{
	static const char *const bad[] = {
		"gpu\xff",		/* never in UTF-8 */
		"\x80gpu",		/* a stray continuation byte */
		"gpu\xc3",		/* truncated at the end */
		"g\xe6\x97u",		/* truncated inside */
		"\xc0\xaf",		/* overlong '/' */
		"\xe0\x80\xaf",	/* overlong, 3 bytes */
		"\xf0\x80\x80\xaf",	/* overlong, 4 bytes */
		"\xed\xa0\x80",	/* a surrogate, U+D800 */
		"\xf4\x90\x80\x80",	/* past U+10FFFF */
		"\xf8\x88\x80\x80\x80", /* a 5-byte form */
	};
	/* "gpu-é-日-😀", and the highest code point. */
	static const char good[] = "gpu-\xc3\xa9-\xe6\x97\xa5-\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf";
	char dir[] = "/tmp/kvs_metrics_XXXXXX", h[512], *samples, *line;
	struct objs o = {0};
	struct buf b = {0};
	kvs_metrics_t *m;
	int status;

	open_all(&o, dir);
	m = kvs_metrics_create();
	ck_assert_ptr_nonnull(m);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		ck_assert_msg(kvs_metrics_add_store(m, o.st, bad[i]) == -1, "label %zu accepted", i);
		ck_assert_int_eq(errno, EINVAL);
		errno = 0;
		ck_assert_int_eq(kvs_metrics_add_drv(m, o.d, bad[i]), -1);
		ck_assert_int_eq(errno, EINVAL);
	}
	/* Nothing was registered. */
	ck_assert_int_eq(kvs_metrics_write(m, buf_cb, &b), 0);
	ck_assert_uint_eq(b.len, 0);
	ck_assert_int_eq(kvs_metrics_add_store(m, o.st, good), 0);
	ck_assert_int_eq(kvs_metrics_write(m, buf_cb, &b), 0);
	ck_assert_uint_gt(b.len, 0);
	samples = prom_check(b.p, b.len, &status);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "prom_check.py failed on:\n%s",
		      b.p);
	/* Every sample carries the label, byte for byte. */
	hex(good, h);
	line = strstr(samples, "kvslab_store_io_errors_total\t");
	ck_assert_ptr_nonnull(line);
	ck_assert_int_eq(strncmp(line + strlen("kvslab_store_io_errors_total\t"), h, strlen(h)), 0);
	free(samples);
	ck_assert_int_eq(kvs_metrics_destroy(m), 0);
	close_all(&o, dir);
	free(b.p);
}
END_TEST

/* The checker itself refuses what the format forbids. */
START_TEST(test_checker_strict)
{
	static const char *const bad[] = {
		"kvslab_x 1\n",					   /* no HELP/TYPE */
		"# HELP kvslab_x d\n# TYPE kvslab_x counter\nkvslab_x 1\n", /* no _total */
		"# HELP kvslab_x_total d\n# TYPE kvslab_x_total gauge\nkvslab_x_total 1\n",
		"# HELP kvslab_x d\n# TYPE kvslab_x gauge\nkvslab_x{object=\"a\"b\"} 1\n",
		/* Prometheus's naming: no "instance" label, no stutter, base
		 * units last, a ratio within 0..1. */
		"# HELP kvslab_x d\n# TYPE kvslab_x gauge\nkvslab_x{instance=\"a\"} 1\n",
		"# HELP kvslab_slab_slab_maps_total d\n# TYPE kvslab_slab_slab_maps_total counter\n"
		"kvslab_slab_slab_maps_total 1\n",
		"# HELP kvslab_x_bytes_mapped d\n# TYPE kvslab_x_bytes_mapped gauge\n"
		"kvslab_x_bytes_mapped 1\n",
		"# HELP kvslab_x_ns_total d\n# TYPE kvslab_x_ns_total counter\nkvslab_x_ns_total 1\n",
		"# HELP kvslab_x_ratio d\n# TYPE kvslab_x_ratio gauge\nkvslab_x_ratio 1.5\n",
		"# HELP kvslab_x d\n# TYPE kvslab_x gauge\nkvslab_x 1\nkvslab_x 2\n",
		"# HELP kvslab_x d\n# TYPE kvslab_x gauge\nkvslab_x one\n",
		"# HELP 9x d\n# TYPE 9x gauge\n9x 1\n",
		"# TYPE kvslab_x gauge\n# HELP kvslab_x d\nkvslab_x 1\n",
	};
	static const char good[] =
		"# HELP kvslab_x d \\\\ \\n\n# TYPE kvslab_x gauge\nkvslab_x{object=\"a\\\"\\\\\\n\"} 1\n";
	int status;
	char *s;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		s = prom_check(bad[i], strlen(bad[i]), &status);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "accepted: %s", bad[i]);
		free(s);
	}
	s = prom_check(good, strlen(good), &status);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_str_eq(s, "kvslab_x\t61225c0a\t1\n");
	free(s);
}
END_TEST

/* ------------------------------------------------------------ HTTP */

#ifdef KVS_HAVE_MICROHTTPD
/* One HTTP/1.0 request to 127.0.0.1:@port; the whole answer (status line,
 * headers, body), or NULL when the connection was refused (errno). */
static char *http_get(uint16_t port, const char *method, const char *path)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct buf b = {0};
	char req[256], chunk[4096];
	ssize_t n;
	int fd, e;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return NULL;
	}
	n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
	ck_assert_int_eq(write(fd, req, (size_t)n), n);
	b.p = strdup("");
	b.cap = 1;
	while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
		if (b.len + (size_t)n + 1 > b.cap) {
			b.cap = (b.len + (size_t)n + 1) * 2;
			b.p = realloc(b.p, b.cap);
			ck_assert_ptr_nonnull(b.p);
		}
		memcpy(b.p + b.len, chunk, (size_t)n);
		b.len += (size_t)n;
		b.p[b.len] = 0;
	}
	ck_assert_int_eq(n, 0);
	close(fd);
	return b.p;
}

/* The open descriptors of this process. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* the directory's own */
}

/* The threads of this process. */
static int count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The local address (hex, as /proc/net/tcp writes it) of the socket
 * listening on @port, or "" when none. */
static void listen_addr(uint16_t port, char *out, size_t size)
{
	FILE *f = fopen("/proc/net/tcp", "r");
	char line[512], addr[64];
	unsigned p, st;

	ck_assert_ptr_nonnull(f);
	*out = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, " %*d: %63[0-9A-F]:%X %*[0-9A-F]:%*X %X", addr, &p, &st) == 3 &&
		    p == port && st == 0x0A)
			snprintf(out, size, "%s", addr);
	fclose(f);
}

START_TEST(test_http)
{
	char dir[] = "/tmp/kvs_metrics_XXXXXX", addr[64], la[64];
	struct objs o = {0};
	kvs_metrics_t *m, *m2;
	uint16_t port = 0, port2 = 1;
	char *ans, *body, *samples;
	int status, fds, threads;
	static const char *const bad[] = {"", "abc", ":", ":65536", ":-1", "::1:80", "[::1]",
					  "[]:80", "[::1:80", "127.0.0.1:8x", ":123456"};

	open_all(&o, dir);
	o.ld = "host0";
	o.lp = "gpu0";
	o.lp2 = "gpu1";
	o.lr = "r";
	o.lhc = "hc";
	o.lhp = "hp";
	o.lh = "h";
	o.lst = "file";
	m = kvs_metrics_create();
	m2 = kvs_metrics_create();
	ck_assert_ptr_nonnull(m);
	ck_assert_ptr_nonnull(m2);
	ck_assert_int_eq(kvs_metrics_add_drv(m, o.d, o.ld), 0);
	ck_assert_int_eq(kvs_metrics_add_pool(m, o.p, o.lp), 0);
	ck_assert_int_eq(kvs_metrics_add_pool(m, o.p2, o.lp2), 0);
	ck_assert_int_eq(kvs_metrics_add_radix(m, o.r, o.lr), 0);
	ck_assert_int_eq(kvs_metrics_add_hcache(m, o.hc, o.lhc), 0);
	ck_assert_int_eq(kvs_metrics_add_hpool(m, o.hp, o.lhp), 0);
	ck_assert_int_eq(kvs_metrics_add_hiradix(m, o.h, o.lh), 0);
	ck_assert_int_eq(kvs_metrics_add_store(m, o.st, o.lst), 0);

	/* Refusals change nothing. */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		ck_assert_msg(kvs_metrics_serve(m, bad[i], &port) == -1 && errno == EINVAL,
			      "address \"%s\" accepted (errno %d)", bad[i], errno);
	}
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve(NULL, ":0", &port), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve(m, NULL, &port), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve(m, "no-such-host.invalid:0", &port), -1);
	ck_assert_int_ne(errno, 0);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve_stop(m), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(kvs_metrics_serve_stop(NULL), -1);
	ck_assert_uint_eq(port, 0);

	fds = count_fds();
	threads = count_threads();
	/* ":0": an ephemeral port on the loopback address only. */
	ck_assert_int_eq(kvs_metrics_serve(m, ":0", &port), 0);
	ck_assert_uint_ne(port, 0);
	listen_addr(port, la, sizeof(la));
	ck_assert_str_eq(la, "0100007F");
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve(m, ":0", &port2), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_uint_eq(port2, 1);

	/* A real GET: status, Content-Type, and a body the checker takes,
	 * with every registered object's series. */
	ans = http_get(port, "GET", "/metrics");
	ck_assert_ptr_nonnull(ans);
	ck_assert_msg(!strncmp(ans, "HTTP/1.1 200 ", 13) || !strncmp(ans, "HTTP/1.0 200 ", 13),
		      "%s", ans);
	ck_assert_ptr_nonnull(strcasestr(ans, "\r\nContent-Type: " KVS_METRICS_CONTENT_TYPE "\r\n"));
	body = strstr(ans, "\r\n\r\n");
	ck_assert_ptr_nonnull(body);
	body += 4;
	samples = prom_check(body, strlen(body), &status);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "prom_check.py failed on:\n%s",
		      body);
	for (const char *fam = "drv\0slab\0pool\0radix\0hcache\0hpool\0hiradix\0store\0"; *fam;
	     fam += strlen(fam) + 1) {
		char want[64];

		snprintf(want, sizeof(want), "kvslab_%s_", fam);
		ck_assert_msg(strstr(samples, want) != NULL, "no %s series", fam);
	}
	free(samples);
	free(ans);
	/* HEAD: the headers only. */
	ans = http_get(port, "HEAD", "/metrics");
	ck_assert_ptr_nonnull(ans);
	ck_assert_int_eq(strncmp(ans + 9, "200", 3), 0);
	ck_assert_ptr_nonnull(strstr(ans, "\r\n\r\n"));
	ck_assert_str_eq(strstr(ans, "\r\n\r\n"), "\r\n\r\n");
	free(ans);
	/* Another path, another method. */
	ans = http_get(port, "GET", "/");
	ck_assert_ptr_nonnull(ans);
	ck_assert_int_eq(strncmp(ans + 9, "404", 3), 0);
	free(ans);
	ans = http_get(port, "GET", "/metrics/x");
	ck_assert_ptr_nonnull(ans);
	ck_assert_int_eq(strncmp(ans + 9, "404", 3), 0);
	free(ans);
	ans = http_get(port, "POST", "/metrics");
	ck_assert_ptr_nonnull(ans);
	ck_assert_int_eq(strncmp(ans + 9, "405", 3), 0);
	free(ans);

	/* A second server on the port fails cleanly; the first still answers. */
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve(m2, addr, &port2), -1);
	ck_assert_int_eq(errno, EADDRINUSE);
	ck_assert_uint_eq(port2, 1);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve_stop(m2), -1);
	ck_assert_int_eq(errno, ENOENT);
	ans = http_get(port, "GET", "/metrics");
	ck_assert_ptr_nonnull(ans);
	ck_assert_int_eq(strncmp(ans + 9, "200", 3), 0);
	free(ans);

	/* Removing an object shows in the next scrape. */
	ck_assert_int_eq(kvs_metrics_remove(m, o.st), 0);
	ans = http_get(port, "GET", "/metrics");
	ck_assert_ptr_nonnull(ans);
	ck_assert_ptr_null(strstr(ans, "kvslab_store_"));
	ck_assert_ptr_nonnull(strstr(ans, "kvslab_hiradix_"));
	free(ans);

	/* The stop closes the socket and ends the thread. */
	ck_assert_int_eq(kvs_metrics_serve_stop(m), 0);
	ck_assert_ptr_null(http_get(port, "GET", "/metrics"));
	ck_assert_int_eq(errno, ECONNREFUSED);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_threads(), threads);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve_stop(m), -1);
	ck_assert_int_eq(errno, ENOENT);
	/* The port is free again: the other registry takes it. */
	ck_assert_int_eq(kvs_metrics_serve(m2, addr, &port2), 0);
	ck_assert_uint_eq(port2, port);
	ans = http_get(port, "GET", "/metrics");
	ck_assert_ptr_nonnull(ans);
	ck_assert_int_eq(strncmp(ans + 9, "200", 3), 0);
	/* An empty registry: an empty body. */
	ck_assert_str_eq(strstr(ans, "\r\n\r\n"), "\r\n\r\n");
	free(ans);
	/* Destroying a serving registry stops its server. */
	ck_assert_int_eq(kvs_metrics_destroy(m2), 0);
	ck_assert_ptr_null(http_get(port, "GET", "/metrics"));
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_threads(), threads);

	ck_assert_int_eq(kvs_metrics_destroy(m), 0);
	close_all(&o, dir);
}
END_TEST

/* The value of the first sample of @name{object="@obj"} in @text, or -1. */
static double sample_of(const char *text, const char *name, const char *obj)
{
	char want[256];
	const char *p;

	snprintf(want, sizeof(want), "\n%s{object=\"%s\"} ", name, obj);
	p = strstr(text, want);
	return p ? strtod(p + strlen(want), NULL) : -1;
}

/*
 * kvslab-replay --metrics: while a replay runs (a long one, killed once
 * seen), its objects are scraped over HTTP under the strategy's name, the
 * text passes the checker, and the prefix cache's query tokens grow.
 */
START_TEST(test_replay_metrics)
{
	const char *top = getenv("KVSLAB_TOP_BUILDDIR");
	char tool[1024], line[512], *ans = NULL;
	double q = -1, q0 = -1;
	unsigned port = 0;
	int fds[2], status, tries;
	FILE *err;
	pid_t pid;

	snprintf(tool, sizeof(tool), "%s/tools/kvslab-replay", top && *top ? top : ".");
	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fds[1], 2);
		close(fds[0]);
		close(fds[1]);
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execl(tool, tool, "-q", "--no-progress", "-m", "tiny", "--requests", "100000",
		      "-s", "slab:16", "--metrics", "127.0.0.1:0", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	err = fdopen(fds[0], "r");
	ck_assert_ptr_nonnull(err);
	while (fgets(line, sizeof(line), err))
		if (sscanf(line, "kvslab-replay: metrics on 127.0.0.1:0 (port %u)", &port) == 1)
			break;
	ck_assert_msg(port > 0 && port < 65536, "no port from kvslab-replay --metrics");
	/* Scrape until the run's cache has been queried twice apart. */
	for (tries = 0; tries < 600 && !(q0 > 0 && q > q0); tries++) {
		free(ans);
		ans = http_get((uint16_t)port, "GET", "/metrics");
		ck_assert_msg(ans != NULL, "the replay stopped serving: %s", strerror(errno));
		ck_assert_int_eq(strncmp(ans + 9, "200", 3), 0);
		q = sample_of(ans, "kvslab_radix_query_tokens_total", "slab:16");
		if (q0 <= 0)
			q0 = q;
		usleep(100000);
	}
	ck_assert_msg(q0 > 0 && q > q0, "query tokens did not grow: %g then %g", q0, q);
	{
		char *body = strstr(ans, "\r\n\r\n") + 4, *samples;

		samples = prom_check(body, strlen(body), &status);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "prom_check.py failed on:\n%s", body);
		free(samples);
		ck_assert(sample_of(body, "kvslab_pool_usage_ratio", "slab:16") >= 0);
		ck_assert(sample_of(body, "kvslab_slab_mapped_bytes", "slab:16") >= 0);
		ck_assert(sample_of(body, "kvslab_drv_map_calls_total", "slab:16") >= 0);
	}
	free(ans);
	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	fclose(err);
}
END_TEST
#else /* !KVS_HAVE_MICROHTTPD */
START_TEST(test_replay_metrics)
{
	tu_skip(__func__, "built without libmicrohttpd: kvslab-replay --metrics has no server");
}
END_TEST

START_TEST(test_http)
{
	kvs_metrics_t *m = kvs_metrics_create();
	uint16_t port = 1;

	ck_assert_ptr_nonnull(m);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve(m, ":0", &port), -1);
	ck_assert_int_eq(errno, ENOTSUP);
	ck_assert_uint_eq(port, 1);
	errno = 0;
	ck_assert_int_eq(kvs_metrics_serve_stop(m), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(kvs_metrics_destroy(m), 0);
	tu_skip(__func__, "built without libmicrohttpd (configure: metrics http: no): "
			  "kvs_metrics_serve() fails with ENOTSUP, checked; no HTTP test");
}
END_TEST
#endif /* KVS_HAVE_MICROHTTPD */

static Suite *metrics_suite(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("write");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_write_all);
	tcase_add_test(tc, test_write_cb_unlocked);
	tcase_add_test(tc, test_checker_strict);
	tcase_add_test(tc, test_label_utf8);
	tcase_add_test(tc, test_http);
	tcase_add_test(tc, test_replay_metrics);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(metrics_suite());
}
