/* SPDX-License-Identifier: MIT */
/*
 * lib/ops/metrics.c - the library's statistics in the Prometheus text exposition
 * format 0.0.4.
 *
 * A registry (kvs_metrics_t) holds a list of objects, each with its family
 * (drv, slab, pool, radix, hcache, hpool, hiradix, store) and an optional
 * label, the value of an "object" label telling two objects of a family
 * apart.  kvs_metrics_write() walks the families in a fixed order and, for
 * each statistic of a family, writes its # HELP and # TYPE lines once and
 * then one sample per registered object of that family:
 *
 *	# HELP kvslab_slab_alloc_fast_total pages allocated from a per-thread cache
 *	# TYPE kvslab_slab_alloc_fast_total counter
 *	kvslab_slab_alloc_fast_total{object="gpu0"} 1234
 *
 * The statistics come from the families of lib/stats.h (each one's
 * X-macro list, KVS_SLAB_STATS and the others: name, kind, description,
 * and its fill() callback), walked in the order of the table families[]
 * below: a statistic added to a list appears in the output with no change
 * to this file, and a new family is one row of that table and one
 * kvs_metrics_add_* call.  A counter's name gets the "_total" suffix
 * Prometheus asks for; a name with a unit before its last word (bytes_mapped)
 * or a word said twice (slab_slab_maps) is renamed by the table renames[]
 * below, and a time in nanoseconds is written in seconds.  The hashed cache's window_hit_ratio, a double, is
 * its family's ratio (struct kvsi_stat_ratio), written after
 * window_hit_blocks.
 *
 * A pool is written as its own family (capacity, available, page size) and
 * as the slab family's sample of its slab, so adding a pool adds its slab;
 * adding that slab again is refused.  Two objects of one family with the
 * same label (or both without one) would write duplicate series, and are
 * refused too, as is a label that is not UTF-8: the format has no escape
 * for a raw byte, and replacing it could make two labels one.
 *
 * Locking: two mutexes, neither held across a write_cb call.  m->lock
 * guards the list and is a leaf: nothing is taken under it (the order is
 * in common/common.h), and no object is read under it.  m->scrape
 * serialises reading the objects with unregistering them:
 * kvs_metrics_write() takes m->scrape, copies the list (objects, families
 * and labels) under m->lock, releases m->lock, fills every object's
 * snapshot (the objects' stat calls take their own locks inside), releases
 * m->scrape, and only then formats the text and calls write_cb.
 * kvs_metrics_remove() takes m->scrape before m->lock, so it waits for the
 * snapshots in progress and returns only once no write reads the object:
 * remove an object before destroying it.  A scrape mutex rather than
 * reference counts: a write holds no entry after it releases m->scrape (it
 * wrote the labels into its copy), so there is nothing to count, and a
 * remove waits for at most one snapshot pass, never for a write_cb.
 * kvs_metrics_add() takes m->lock only.
 *
 * kvs_metrics_serve() answers GET /metrics over HTTP
 * (lib/ops/metrics_http.c): each request is a kvs_metrics_write() on a
 * thread of the HTTP library.  m->serve guards the server pointer only;
 * no scrape takes it, so stopping the server under it (which waits for the
 * requests in progress) cannot wait for itself.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "mem/cacheops.h"
#include "ops/metrics_http.h"
#include "kvslab/metrics.h"

struct entry {
	const struct kvsi_stat_family *fam;
	void *obj;
	char *label;		/* NULL: no object label */
	struct entry *next;
};

struct kvs_metrics {
	pthread_mutex_t lock;	/* the list; a leaf */
	pthread_mutex_t scrape;	/* reading the objects; before lock */
	struct entry *head, **tail;
	pthread_mutex_t serve;	/* the HTTP server; never taken by a scrape */
	struct kvsi_http *http;	/* kvs_metrics_serve()'s, or NULL */
};

/* The pool's own numbers: a family of the metrics only. */
#define POOL_STATS(X)                                                              \
	X(capacity_pages, gauge, "pages the pool can hold")                             \
	X(available_pages, gauge, "pages free to allocate now")                         \
	X(page_size_tokens, gauge, "tokens per page")                                   \
	X(caches, gauge, "caches over the pool (radix, hashed, tiered)")                \
	X(evictable_tokens, gauge, "tokens those caches could evict now")               \
	X(capacity_tokens, gauge, "tokens the pool can hold")                           \
	X(used_tokens, gauge, "tokens in use: neither free nor evictable")
enum { P_CAP, P_AVAIL, P_PS, P_CACHES, P_EVICTABLE, P_CAP_TOKENS, P_USED };

/* The pool's numbers, and its registered caches' (lib/mem/cacheops.h),
 * under the pool's elastic mutex: taken under metrics->scrape, never the
 * other way round.  The tokens in use are what vLLM's and SGLang's KV
 * usage counts: not free and not evictable (a cached page no request
 * holds is free to them); the pool and its caches are read one after the
 * other, so the difference is clamped at 0. */
static void pool_fill(void *obj, uint64_t *v)
{
	pthread_mutex_t *lk = kvsi_pool_elastic(obj);
	uint64_t idle;
	unsigned i, n;

	v[P_CAP] = kvs_pool_capacity(obj);
	v[P_AVAIL] = kvs_pool_available(obj);
	v[P_PS] = kvs_pool_page_size(obj);
	v[P_EVICTABLE] = 0;
	pthread_mutex_lock(lk);
	n = kvsi_pool_ncaches(obj);
	for (i = 0; i < n; i++) {
		const struct kvsi_cache_ops *ops;
		void *c = kvsi_pool_cache(obj, i, &ops);

		v[P_EVICTABLE] += ops->evictable(c);
	}
	pthread_mutex_unlock(lk);
	v[P_CACHES] = n;
	v[P_CAP_TOKENS] = v[P_CAP] * v[P_PS];
	idle = v[P_AVAIL] * v[P_PS] + v[P_EVICTABLE];
	v[P_USED] = idle < v[P_CAP_TOKENS] ? v[P_CAP_TOKENS] - idle : 0;
}

/* KV usage as a ratio (0 to 1), as vLLM's kv_cache_usage_perc and
 * SGLang's token_usage give it. */
static const struct kvsi_stat_ratio pool_usage = {
	"usage_ratio", "share of the pool's tokens in use (used_tokens / capacity_tokens)",
	P_USED, P_USED, P_CAP_TOKENS,
};

KVSI_STATS_DESCRIPTOR(pool, POOL_STATS, pool_fill, NULL, &kvsi_style_desc, &pool_usage);

/*
 * The names Prometheus sees, where they are not kvslab_FAMILY_STATISTIC:
 * its conventions want base units as the last word of the name (bytes,
 * seconds; "_total" after it for a counter), and no word said twice in a
 * row.  The families' own names (kvs_slab_stat_name() and the others, the
 * prints, the control socket's JSON) are not changed.  @name is the
 * metric's name less "kvslab_" and "_total"; @ns: the value is in
 * nanoseconds and is written in seconds.  tests/prom_check.py refuses a
 * name that breaks these rules, so a statistic added to a list with a
 * unit before its last word fails the suite until it gets a row here.
 */
static const struct rename {
	const char *fam, *stat, *name;
	bool ns;
} renames[] = {
	{"drv", "bytes_reserved", "drv_reserved_bytes", false},
	{"drv", "bytes_created", "drv_created_bytes", false},
	{"drv", "bytes_created_peak", "drv_created_peak_bytes", false},
	{"drv", "bytes_mapped", "drv_mapped_bytes", false},
	{"drv", "bytes_mapped_peak", "drv_mapped_peak_bytes", false},
	{"drv", "bytes_copied", "drv_copied_bytes", false},
	{"drv", "bytes_host", "drv_host_bytes", false},
	{"drv", "ns_in_calls", "drv_call_seconds", true},
	{"slab", "bytes_mapped", "slab_mapped_bytes", false},
	{"slab", "bytes_mapped_peak", "slab_mapped_peak_bytes", false},
	{"slab", "bytes_live", "slab_live_bytes", false},
	{"slab", "bytes_pooled", "slab_pooled_bytes", false},
	{"slab", "slab_maps", "slab_maps", false},
	{"slab", "slab_unmaps", "slab_unmaps", false},
	{"slab", "drv_ns", "slab_drv_call_seconds", true},
	{"radix", "evict_section_ns", "radix_evict_section_seconds", true},
	{"radix", "evict_section_max_ns", "radix_evict_section_max_seconds", true},
	{"radix", "evict_section_cpu_max_ns", "radix_evict_section_cpu_max_seconds", true},
	{"hpool", "bytes_copied", "hpool_copied_bytes", false},
	{"store", "bytes_read", "store_read_bytes", false},
	{"store", "bytes_written", "store_written_bytes", false},
	{"store", "bytes_stored", "store_stored_bytes", false},
};

static const struct rename *renamed(const char *fam, const char *stat)
{
	for (size_t i = 0; i < sizeof(renames) / sizeof(renames[0]); i++)
		if (!strcmp(renames[i].fam, fam) && !strcmp(renames[i].stat, stat))
			return &renames[i];
	return NULL;
}

/* The registry of families, in the order they are written. */
static const struct kvsi_stat_family *const families[] = {
	&kvsi_drv_stats, &kvsi_slab_stats,  &kvsi_pool_stats,	 &kvsi_radix_stats,
	&kvsi_hcache_stats, &kvsi_hpool_stats, &kvsi_hiradix_stats, &kvsi_store_stats,
};

#define NFAM (sizeof(families) / sizeof(families[0]))

/* The object entry @e adds to family @f, or NULL: itself in its own
 * family, and a pool's slab in the slab family. */
static void *member_obj(const struct entry *e, const struct kvsi_stat_family *f)
{
	if (e->fam == f)
		return e->obj;
	if (f == &kvsi_slab_stats && e->fam == &kvsi_pool_stats)
		return kvs_pool_slab(e->obj);
	return NULL;
}

/* ------------------------------------------------------------- registry */

/**
 * kvs_metrics_create() - an empty registry.
 *
 * Context: any thread.
 * Return: the registry, or NULL with errno ENOMEM.
 */
KVS_EXPORT kvs_metrics_t *kvs_metrics_create(void)
{
	kvs_metrics_t *m = calloc(1, sizeof(*m));

	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->scrape, NULL);
	pthread_mutex_init(&m->serve, NULL);
	m->tail = &m->head;
	return m;
}

/**
 * kvs_metrics_destroy() - free a registry, stopping its HTTP server first;
 * the objects are not touched.
 * @m: the registry, or NULL (nothing done).
 *
 * Context: no other call on @m may run or follow.
 * Return: 0.
 */
KVS_EXPORT int kvs_metrics_destroy(kvs_metrics_t *m)
{
	struct entry *e, *n;

	if (!m)
		return 0;
	kvsi_http_stop(m->http);
	for (e = m->head; e; e = n) {
		n = e->next;
		free(e->label);
		free(e);
	}
	pthread_mutex_destroy(&m->lock);
	pthread_mutex_destroy(&m->scrape);
	pthread_mutex_destroy(&m->serve);
	free(m);
	return 0;
}

/* The slab family's members: slabs, and pools through their slab. */
static bool same_series(const struct entry *e, const struct kvsi_stat_family *fam,
			const char *label)
{
	bool slabish = (fam == &kvsi_slab_stats || fam == &kvsi_pool_stats) &&
		       (e->fam == &kvsi_slab_stats || e->fam == &kvsi_pool_stats);

	if (e->fam != fam && !slabish)
		return false;
	if (!e->label || !label)
		return !e->label && !label;
	return strcmp(e->label, label) == 0;
}

/* Well-formed UTF-8 (RFC 3629): no stray continuation byte, no truncated
 * sequence, no overlong form, no surrogate, nothing past U+10FFFF.  The
 * text format's label values are UTF-8; one byte that is not makes the
 * whole scrape unparsable, and no escape spells a raw byte. */
static bool utf8_ok(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	while (*s) {
		unsigned char c = *s;
		unsigned int lo = 0x80, hi = 0xbf;
		int more, i;

		if (c < 0x80) {
			s++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			more = 1;
		} else if (c >= 0xe0 && c <= 0xef) {
			more = 2;
			if (c == 0xe0)
				lo = 0xa0;	/* overlong */
			else if (c == 0xed)
				hi = 0x9f;	/* surrogates */
		} else if (c >= 0xf0 && c <= 0xf4) {
			more = 3;
			if (c == 0xf0)
				lo = 0x90;	/* overlong */
			else if (c == 0xf4)
				hi = 0x8f;	/* past U+10FFFF */
		} else {
			return false;		/* 0x80-0xc1, 0xf5-0xff */
		}
		for (i = 1; i <= more; i++) {
			/* The NUL ends the loop here: a truncated sequence. */
			if (s[i] < lo || s[i] > hi)
				return false;
			lo = 0x80;
			hi = 0xbf;
		}
		s += more + 1;
	}
	return true;
}

static int add(kvs_metrics_t *m, const struct kvsi_stat_family *fam, void *obj,
	       const char *label)
{
	struct entry *e;
	char *copy = NULL;
	int err = 0;

	if (!m || !obj || (label && !utf8_ok(label)))
		return kvs_fail(EINVAL);
	if (label && !(copy = strdup(label)))
		return kvs_fail(ENOMEM);
	if (!(e = calloc(1, sizeof(*e)))) {
		free(copy);
		return kvs_fail(ENOMEM);
	}
	e->fam = fam;
	e->obj = obj;
	e->label = copy;

	pthread_mutex_lock(&m->lock);
	for (struct entry *o = m->head; o; o = o->next) {
		bool dup = o->obj == obj;

		/* A pool's slab is written with the pool. */
		if (fam == &kvsi_slab_stats && o->fam == &kvsi_pool_stats && kvs_pool_slab(o->obj) == obj)
			dup = true;
		if (fam == &kvsi_pool_stats && o->fam == &kvsi_slab_stats && kvs_pool_slab(obj) == o->obj)
			dup = true;
		if (dup || same_series(o, fam, label)) {
			err = EEXIST;
			break;
		}
	}
	if (!err) {
		*m->tail = e;
		m->tail = &e->next;
	}
	pthread_mutex_unlock(&m->lock);
	if (err) {
		free(copy);
		free(e);
		return kvs_fail(err);
	}
	return 0;
}

/**
 * kvs_metrics_add_drv() - register an object; the other kvs_metrics_add_*
 * calls (slab, pool, radix, hcache, hpool, hiradix, store) are the same for
 * their families, and METRICS_ADD() writes each of them.
 * @m: the registry.
 * @obj: the object (a kvs_drv_t for kvs_metrics_add_drv()); it must outlive
 * its registration.
 * @label: the value of its "object" label (copied), or NULL for none.
 *
 * Context: any thread; takes m->lock.
 * Return: 0, or -1 with errno EINVAL (NULL @m or object, a @label that is
 * not UTF-8), EEXIST (the object is registered, or one of its family has
 * the same label), ENOMEM.
 */
#define METRICS_ADD(tag, type)                                                          \
	KVS_EXPORT int kvs_metrics_add_##tag(kvs_metrics_t *m, type *obj, const char *label) \
	{                                                                               \
		return add(m, &kvsi_##tag##_stats, obj, label);                         \
	}                                                                               \
	_Static_assert(1, "a semicolon after the macro")

METRICS_ADD(drv, kvs_drv_t);
METRICS_ADD(slab, kvs_slab_t);
METRICS_ADD(pool, kvs_pool_t);
METRICS_ADD(radix, kvs_radix_t);
METRICS_ADD(hcache, kvs_hcache_t);
METRICS_ADD(hpool, kvs_hpool_t);
METRICS_ADD(hiradix, kvs_hiradix_t);
METRICS_ADD(store, kvs_store_t);

/**
 * kvs_metrics_remove() - unregister an object.
 * @m: the registry.
 * @obj: an object a kvs_metrics_add_* call registered.
 *
 * Context: any thread; takes m->scrape, then m->lock, so it waits for the
 * snapshots of a kvs_metrics_write() in progress (not for its write_cb
 * calls): once it returns, no write reads @obj.  Not from under a lock a
 * registered object's statistics take.
 * Return: 0, or -1 with errno EINVAL (NULL argument) or ENOENT (not
 * registered).
 */
KVS_EXPORT int kvs_metrics_remove(kvs_metrics_t *m, const void *obj)
{
	struct entry **pp, *e = NULL;

	if (!m || !obj)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&m->scrape);
	pthread_mutex_lock(&m->lock);
	for (pp = &m->head; *pp; pp = &(*pp)->next) {
		if ((*pp)->obj == obj) {
			e = *pp;
			*pp = e->next;
			if (m->tail == &e->next)
				m->tail = pp;
			break;
		}
	}
	pthread_mutex_unlock(&m->lock);
	pthread_mutex_unlock(&m->scrape);
	if (!e)
		return kvs_fail(ENOENT);
	free(e->label);
	free(e);
	return 0;
}

/* --------------------------------------------------------------- output */

/* The text, grown as it is written and handed to write_cb in pieces. */
struct out {
	struct kvsi_buf b;
	void (*cb)(void *arg, const char *data, size_t len);
	void *arg;
};

#define OUT_FLUSH 16384

static void out_flush(struct out *o)
{
	if (o->b.len && !o->b.nomem)
		o->cb(o->arg, o->b.buf, o->b.len);
	o->b.len = 0;
}

static void out_put(struct out *o, const char *s, size_t n)
{
	kvsi_buf_put(&o->b, s, n);
}

static void out_str(struct out *o, const char *s)
{
	out_put(o, s, strlen(s));
}

/* A help text: backslash and newline escaped.  A label value: the same and
 * the double quote (the format's two escaping rules). */
static void out_escaped(struct out *o, const char *s, bool quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			out_put(o, "\\\\", 2);
		else if (*s == '\n')
			out_put(o, "\\n", 2);
		else if (*s == '"' && quote)
			out_put(o, "\\\"", 2);
		else
			out_put(o, s, 1);
	}
}

/* [a-zA-Z_:][a-zA-Z0-9_:]*, as the format requires of a metric name. */
static bool name_ok(const char *s)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == ':'))
			return false;
	return true;
}

/* One object's statistics, read under m->scrape and written after. */
struct snap {
	const struct kvsi_stat_family *fam;
	char *label;
	uint64_t v[KVSI_STATS_MAX];
};

static void snaps_free(struct snap *sn, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(sn[i].label);
	free(sn);
}

/* Every registered object's statistics, family by family in the table's
 * order and in registration order within a family (a pool twice: its own
 * and its slab's).  Takes m->scrape across the reads, m->lock only to copy
 * the list.  NULL with *n 0 when nothing is registered or on ENOMEM
 * (*nomem set). */
static struct snap *snapshot(kvs_metrics_t *m, size_t *n, bool *nomem)
{
	struct { const struct kvsi_stat_family *fam; void *obj; } *ref = NULL;
	struct snap *sn = NULL;
	size_t nref = 0, k = 0;

	*n = 0;
	pthread_mutex_lock(&m->scrape);
	pthread_mutex_lock(&m->lock);
	for (size_t f = 0; f < NFAM; f++)
		for (const struct entry *e = m->head; e; e = e->next)
			nref += member_obj(e, families[f]) != NULL;
	if (nref) {
		ref = calloc(nref, sizeof(*ref));
		sn = calloc(nref, sizeof(*sn));
	}
	if (nref && ref && sn) {
		for (size_t f = 0; f < NFAM; f++)
			for (const struct entry *e = m->head; e; e = e->next) {
				void *obj = member_obj(e, families[f]);

				if (!obj)
					continue;
				ref[k].fam = families[f];
				ref[k].obj = obj;
				if (e->label && !(sn[k].label = strdup(e->label)))
					*nomem = true;
				k++;
			}
	}
	pthread_mutex_unlock(&m->lock);
	/* The list may change now; the objects stay until m->scrape is let go. */
	if (nref && (!ref || !sn))
		*nomem = true;
	if (!*nomem) {
		for (k = 0; k < nref; k++) {
			sn[k].fam = ref[k].fam;
			ref[k].fam->fill(ref[k].obj, sn[k].v);
		}
		*n = nref;
	}
	pthread_mutex_unlock(&m->scrape);
	free(ref);
	if (*nomem) {
		if (sn)
			snaps_free(sn, nref);
		return NULL;
	}
	return sn;
}

/* One sample line: NAME{object="LABEL"} VALUE.  Not "instance": a
 * Prometheus server sets that label to the target it scraped, and renames
 * a scraped one exported_instance. */
static void out_sample(struct out *o, const char *name, const char *label)
{
	out_str(o, name);
	if (label) {
		out_str(o, "{" KVS_METRICS_LABEL "=\"");
		out_escaped(o, label, true);
		out_str(o, "\"}");
	}
	out_str(o, " ");
}

/* The # HELP and # TYPE lines of a metric, and its full name in @name;
 * false when the name is not one the format allows. */
static bool out_head(struct out *o, char *name, size_t size, const char *prefix, const char *stat,
		     bool counter, const char *desc, bool *ns)
{
	const struct rename *r = renamed(prefix, stat);
	int n = r ? snprintf(name, size, "kvslab_%s%s", r->name, counter ? "_total" : "")
		  : snprintf(name, size, "kvslab_%s_%s%s", prefix, stat, counter ? "_total" : "");

	*ns = r && r->ns;
	if (n <= 0 || (size_t)n >= size || !name_ok(name))
		return false;
	out_str(o, "# HELP ");
	out_str(o, name);
	out_str(o, " ");
	out_escaped(o, desc, false);
	if (*ns)
		out_str(o, " (seconds)");
	out_str(o, "\n# TYPE ");
	out_str(o, name);
	out_str(o, counter ? " counter\n" : " gauge\n");
	return true;
}

/* Family @f's samples [@a, @b) of @sn: statistic @i, and its ratio after. */
static void out_stat(struct out *o, const struct kvsi_stat_family *f, const struct snap *sn,
		     size_t a, size_t b, unsigned i)
{
	const struct kvsi_stat_ratio *r = f->ratio;
	bool counter = kvsi_stat_counter(f, i), ns;
	char name[160];

	if (out_head(o, name, sizeof(name), f->prefix, f->names[i], counter, f->descs[i], &ns))
		for (size_t k = a; k < b; k++) {
			out_sample(o, name, sn[k].label);
			if (ns)
				kvsi_buf_fmt(&o->b, "%" PRIu64 ".%09" PRIu64 "\n",
					     sn[k].v[i] / 1000000000u, sn[k].v[i] % 1000000000u);
			else
				kvsi_buf_fmt(&o->b, "%" PRIu64 "\n", sn[k].v[i]);
		}
	if (r && r->after == i &&
	    out_head(o, name, sizeof(name), f->prefix, r->name, false, r->desc, &ns))
		for (size_t k = a; k < b; k++) {
			const uint64_t *v = sn[k].v;

			out_sample(o, name, sn[k].label);
			kvsi_buf_fmt(&o->b, "%.17g\n",
				     v[r->den] ? (double)v[r->num] / (double)v[r->den] : 0.0);
		}
}

/**
 * kvs_metrics_write() - write every statistic of every registered object in
 * the Prometheus text exposition format 0.0.4.
 * @m: the registry.
 * @write_cb: called with successive pieces of the text (each ends at a line
 * end); no lock of the registry is held, so it may call kvs_metrics_* on @m
 * (what it adds or removes shows in the next write).
 * @arg: handed to @write_cb.
 *
 * A family without registered objects writes nothing.  Every object is
 * read before the first piece is written (see the locking above).
 *
 * Context: any thread; takes m->scrape and m->lock to read, neither while
 * calling @write_cb.
 * Return: 0, or -1 with errno EINVAL (NULL @m or @write_cb) or ENOMEM (the
 * text may then have been written in part).
 */
KVS_EXPORT int kvs_metrics_write(kvs_metrics_t *m,
				 void (*write_cb)(void *arg, const char *data, size_t len), void *arg)
{
	struct out o = {.b.first = OUT_FLUSH * 2, .cb = write_cb, .arg = arg};
	struct snap *sn;
	size_t n, a, b;

	if (!m || !write_cb)
		return kvs_fail(EINVAL);
	sn = snapshot(m, &n, &o.b.nomem);
	/* The snapshots are grouped by family: [a, b) is one family's. */
	for (a = 0; a < n && !o.b.nomem; a = b) {
		const struct kvsi_stat_family *f = sn[a].fam;

		for (b = a; b < n && sn[b].fam == f; b++)
			;
		for (unsigned i = 0; i < f->count; i++) {
			out_stat(&o, f, sn, a, b, i);
			if (o.b.len >= OUT_FLUSH)
				out_flush(&o);
		}
	}
	out_flush(&o);
	snaps_free(sn, n);
	free(o.b.buf);
	return o.b.nomem ? kvs_fail(ENOMEM) : 0;
}

/* ----------------------------------------------------------------- HTTP */

/**
 * kvs_metrics_serve() - answer GET /metrics over HTTP with
 * kvs_metrics_write()'s text, from a thread of libmicrohttpd, until
 * kvs_metrics_serve_stop() or kvs_metrics_destroy().
 * @m: the registry.
 * @addr: "HOST:PORT" or "[IPV6]:PORT"; "PORT" or ":PORT" is the loopback
 * address (127.0.0.1), "*:PORT" every interface (lib/ops/metrics_http.c).
 * @port: receives the port bound (port 0 asks for an ephemeral one), or NULL.
 *
 * Context: any thread; takes m->serve, which no scrape takes.
 * Return: 0, or -1 with errno EINVAL (NULL @m or @addr, a malformed
 * @addr), EBUSY (@m serves already), ENOTSUP (built without
 * libmicrohttpd), EADDRINUSE, EACCES, EADDRNOTAVAIL (bind() and
 * getaddrinfo()), ENOMEM; nothing is left listening.
 */
KVS_EXPORT int kvs_metrics_serve(kvs_metrics_t *m, const char *addr, uint16_t *port)
{
	struct kvsi_http *h = NULL;
	uint16_t got = 0;
	int rc;

	if (!m || !addr)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&m->serve);
	if (m->http) {
		pthread_mutex_unlock(&m->serve);
		return kvs_fail(EBUSY);
	}
	rc = kvsi_http_start(m, addr, &h, &got);
	if (rc == 0)
		m->http = h;
	pthread_mutex_unlock(&m->serve);
	if (rc < 0)
		return -1;	/* errno from kvsi_http_start() */
	if (port)
		*port = got;
	return 0;
}

/**
 * kvs_metrics_serve_stop() - stop kvs_metrics_serve()'s server: the
 * requests being answered finish, the socket is closed.
 * @m: the registry.
 *
 * Context: any thread, not a write_cb of a scrape the server answers.
 * Return: 0, or -1 with errno EINVAL (NULL @m) or ENOENT (not serving).
 */
KVS_EXPORT int kvs_metrics_serve_stop(kvs_metrics_t *m)
{
	struct kvsi_http *h;

	if (!m)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&m->serve);
	h = m->http;
	m->http = NULL;
	pthread_mutex_unlock(&m->serve);
	if (!h)
		return kvs_fail(ENOENT);
	kvsi_http_stop(h);
	return 0;
}
