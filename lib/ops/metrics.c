/* SPDX-License-Identifier: MIT */
/*
 * lib/ops/metrics.c - the library's statistics in the Prometheus text exposition
 * format 0.0.4.
 *
 * A registry (kvs_metrics_t) holds a list of objects, each with its family
 * (drv, slab, pool, radix, hcache, hpool, hiradix, store) and an optional
 * label, the value of an "instance" label telling two objects of a family
 * apart.  kvs_metrics_write() walks the families in a fixed order and, for
 * each statistic of a family, writes its # HELP and # TYPE lines once and
 * then one sample per registered object of that family:
 *
 *	# HELP kvslab_slab_alloc_fast_total pages allocated from a per-thread cache
 *	# TYPE kvslab_slab_alloc_fast_total counter
 *	kvslab_slab_alloc_fast_total{instance="gpu0"} 1234
 *
 * The statistics come from each family's X-macro list (KVS_SLAB_STATS and
 * the others, name, kind, description), expanded here into tables: a
 * statistic added to a list appears in the output with no change to this
 * file.  A counter's name gets the "_total" suffix Prometheus asks for.  The
 * hashed block cache has no list; its kvs_hcache_stats_t is described by a
 * table below, the one place to extend when that struct grows.
 *
 * A pool is written as its own family (capacity, available, page size) and
 * as the slab family's sample of its slab, so adding a pool adds its slab;
 * adding that slab again is refused.  Two objects of one family with the
 * same label (or both without one) would write duplicate series, and are
 * refused too, as is a label that is not UTF-8: the format has no escape
 * for a raw byte, and replacing it could make two labels one.
 *
 * Locking: one mutex (m->lock) guards the list and is held for the whole of
 * kvs_metrics_write(), write_cb included, so kvs_metrics_remove() returns
 * only once no write reads the object: remove an object before destroying
 * it.  The objects' own stat calls take their own locks inside.
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
#include "kvslab/metrics.h"

enum fam { F_DRV, F_SLAB, F_POOL, F_RADIX, F_HCACHE, F_HPOOL, F_HIRADIX, F_STORE, F__COUNT };

struct entry {
	enum fam fam;
	void *obj;
	char *label;		/* NULL: no instance label */
	struct entry *next;
};

struct kvs_metrics {
	pthread_mutex_t lock;
	struct entry *head, **tail;
};

/* One statistic of a family: its name, whether it is a counter, its help. */
struct stat_def {
	const char *name;
	bool counter;
	const char *desc;
};

#define KVS_M_KIND_gauge false
#define KVS_M_KIND_counter true
#define KVS_M_DEF(n, k, d) {#n, KVS_M_KIND_##k, d},

static const struct stat_def drv_defs[] = {KVS_DRV_STATS(KVS_M_DEF)};
static const struct stat_def slab_defs[] = {KVS_SLAB_STATS(KVS_M_DEF)};
static const struct stat_def radix_defs[] = {KVS_RADIX_STATS(KVS_M_DEF)};
static const struct stat_def hpool_defs[] = {KVS_HPOOL_STATS(KVS_M_DEF)};
static const struct stat_def hiradix_defs[] = {KVS_HIRADIX_STATS(KVS_M_DEF)};
static const struct stat_def store_defs[] = {KVS_STORE_STATS(KVS_M_DEF)};

/* The pool's own numbers. */
static const struct stat_def pool_defs[] = {
	{"capacity_pages", false, "pages the pool can hold"},
	{"available_pages", false, "pages free to allocate now"},
	{"page_size_tokens", false, "tokens per page"},
};

/* kvs_hcache_stats_t, field by field (window_hit_ratio is the one double). */
#define HC_U64(f, k, d) {#f, KVS_M_KIND_##k, d}
static const struct stat_def hcache_defs[] = {
	HC_U64(queries, counter, "requests looked up (lookup and admit calls)"),
	HC_U64(query_blocks, counter, "blocks those lookups could have hit"),
	HC_U64(hit_blocks, counter, "blocks those lookups hit"),
	HC_U64(window_queries, gauge, "lookups over the last window requests"),
	HC_U64(window_query_blocks, gauge, "blocks they could have hit"),
	HC_U64(window_hit_blocks, gauge, "blocks they hit"),
	HC_U64(window_hit_ratio, gauge, "window_hit_blocks / window_query_blocks, 0 if none"),
	HC_U64(cached_blocks, gauge, "blocks with a hash (table entries)"),
	HC_U64(free_queue_blocks, gauge, "cached blocks of refcount 0"),
	HC_U64(used_blocks, gauge, "blocks of refcount > 0"),
	HC_U64(evictions, counter, "cached blocks evicted"),
	HC_U64(query_tokens, counter, "the requests' tokens (vLLM's prefix-cache queries)"),
	HC_U64(hit_tokens, counter, "their hit blocks' tokens (vLLM's prefix-cache hits)"),
	HC_U64(window_query_tokens, gauge, "query_tokens over the last window requests"),
	HC_U64(window_hit_tokens, gauge, "hit_tokens over the last window requests"),
};
static const size_t hcache_off[] = {
	offsetof(kvs_hcache_stats_t, queries),
	offsetof(kvs_hcache_stats_t, query_blocks),
	offsetof(kvs_hcache_stats_t, hit_blocks),
	offsetof(kvs_hcache_stats_t, window_queries),
	offsetof(kvs_hcache_stats_t, window_query_blocks),
	offsetof(kvs_hcache_stats_t, window_hit_blocks),
	offsetof(kvs_hcache_stats_t, window_hit_ratio),
	offsetof(kvs_hcache_stats_t, cached_blocks),
	offsetof(kvs_hcache_stats_t, free_queue_blocks),
	offsetof(kvs_hcache_stats_t, used_blocks),
	offsetof(kvs_hcache_stats_t, evictions),
	offsetof(kvs_hcache_stats_t, query_tokens),
	offsetof(kvs_hcache_stats_t, hit_tokens),
	offsetof(kvs_hcache_stats_t, window_query_tokens),
	offsetof(kvs_hcache_stats_t, window_hit_tokens),
};
_Static_assert(sizeof(hcache_defs) / sizeof(hcache_defs[0]) ==
		       sizeof(hcache_off) / sizeof(hcache_off[0]),
	       "one offset per hcache statistic");

#define NDEFS(a) (sizeof(a) / sizeof((a)[0]))

/* snap() fills a family's whole list from the object's own. */
_Static_assert(NDEFS(drv_defs) == KVS_DRV_STAT__COUNT, "drv statistics");
_Static_assert(NDEFS(slab_defs) == KVS_SLAB_STAT__COUNT, "slab statistics");
_Static_assert(NDEFS(radix_defs) == KVS_RADIX_STAT__COUNT, "radix statistics");
_Static_assert(NDEFS(hpool_defs) == KVS_HPOOL_STAT__COUNT, "hpool statistics");
_Static_assert(NDEFS(hiradix_defs) == KVS_HIRADIX_STAT__COUNT, "hiradix statistics");
_Static_assert(NDEFS(store_defs) == KVS_STORE_STAT__COUNT, "store statistics");

static const struct family {
	const char *prefix;
	const struct stat_def *defs;
	size_t n;
} families[F__COUNT] = {
	[F_DRV] = {"drv", drv_defs, NDEFS(drv_defs)},
	[F_SLAB] = {"slab", slab_defs, NDEFS(slab_defs)},
	[F_POOL] = {"pool", pool_defs, NDEFS(pool_defs)},
	[F_RADIX] = {"radix", radix_defs, NDEFS(radix_defs)},
	[F_HCACHE] = {"hcache", hcache_defs, NDEFS(hcache_defs)},
	[F_HPOOL] = {"hpool", hpool_defs, NDEFS(hpool_defs)},
	[F_HIRADIX] = {"hiradix", hiradix_defs, NDEFS(hiradix_defs)},
	[F_STORE] = {"store", store_defs, NDEFS(store_defs)},
};

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
	m->tail = &m->head;
	return m;
}

/**
 * kvs_metrics_destroy() - free a registry; the objects are not touched.
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
	for (e = m->head; e; e = n) {
		n = e->next;
		free(e->label);
		free(e);
	}
	pthread_mutex_destroy(&m->lock);
	free(m);
	return 0;
}

/* The slab family's members: slabs, and pools through their slab. */
static bool same_series(const struct entry *e, enum fam fam, const char *label)
{
	bool slabish = (fam == F_SLAB || fam == F_POOL) && (e->fam == F_SLAB || e->fam == F_POOL);

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

static int add(kvs_metrics_t *m, enum fam fam, void *obj, const char *label)
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
		if (fam == F_SLAB && o->fam == F_POOL && kvs_pool_slab(o->obj) == obj)
			dup = true;
		if (fam == F_POOL && o->fam == F_SLAB && kvs_pool_slab(obj) == o->obj)
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
 * calls are the same for their families.
 * @m: the registry.
 * @drv: the object; it must outlive its registration.
 * @label: the value of its "instance" label (copied), or NULL for none.
 *
 * Context: any thread; takes m->lock.
 * Return: 0, or -1 with errno EINVAL (NULL @m or object, a @label that is
 * not UTF-8), EEXIST (the object is registered, or one of its family has
 * the same label), ENOMEM.
 */
KVS_EXPORT int kvs_metrics_add_drv(kvs_metrics_t *m, kvs_drv_t *drv, const char *label)
{
	return add(m, F_DRV, drv, label);
}

KVS_EXPORT int kvs_metrics_add_slab(kvs_metrics_t *m, kvs_slab_t *slab, const char *label)
{
	return add(m, F_SLAB, slab, label);
}

KVS_EXPORT int kvs_metrics_add_pool(kvs_metrics_t *m, kvs_pool_t *pool, const char *label)
{
	return add(m, F_POOL, pool, label);
}

KVS_EXPORT int kvs_metrics_add_radix(kvs_metrics_t *m, kvs_radix_t *radix, const char *label)
{
	return add(m, F_RADIX, radix, label);
}

KVS_EXPORT int kvs_metrics_add_hcache(kvs_metrics_t *m, kvs_hcache_t *hc, const char *label)
{
	return add(m, F_HCACHE, hc, label);
}

KVS_EXPORT int kvs_metrics_add_hpool(kvs_metrics_t *m, kvs_hpool_t *hp, const char *label)
{
	return add(m, F_HPOOL, hp, label);
}

KVS_EXPORT int kvs_metrics_add_hiradix(kvs_metrics_t *m, kvs_hiradix_t *h, const char *label)
{
	return add(m, F_HIRADIX, h, label);
}

KVS_EXPORT int kvs_metrics_add_store(kvs_metrics_t *m, kvs_store_t *s, const char *label)
{
	return add(m, F_STORE, s, label);
}

/**
 * kvs_metrics_remove() - unregister an object.
 * @m: the registry.
 * @obj: an object a kvs_metrics_add_* call registered.
 *
 * Context: any thread; takes m->lock, so it waits for a kvs_metrics_write()
 * in progress: once it returns, no write reads @obj.
 * Return: 0, or -1 with errno EINVAL (NULL argument) or ENOENT (not
 * registered).
 */
KVS_EXPORT int kvs_metrics_remove(kvs_metrics_t *m, const void *obj)
{
	struct entry **pp, *e = NULL;

	if (!m || !obj)
		return kvs_fail(EINVAL);
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

/* Every statistic of entry @e of family @fam, in one snapshot where the
 * object takes one: @v (the family's count), and @hc for the hashed
 * cache.  Called with m->lock held. */
static void snap(const struct entry *e, enum fam fam, uint64_t *v, kvs_hcache_stats_t *hc)
{
	size_t i;

	switch (fam) {
	case F_DRV:
		for (i = 0; i < KVS_DRV_STAT__COUNT; i++)
			v[i] = kvs_drv_stat(e->obj, (enum kvs_drv_stat)i);
		break;
	case F_SLAB:
		kvsi_slab_stats_fill(e->fam == F_POOL ? kvs_pool_slab(e->obj) : e->obj, v);
		break;
	case F_POOL:
		v[0] = kvs_pool_capacity(e->obj);
		v[1] = kvs_pool_available(e->obj);
		v[2] = kvs_pool_page_size(e->obj);
		break;
	case F_RADIX:
		kvsi_radix_stats_fill(e->obj, v);
		break;
	case F_HCACHE:
		memset(hc, 0, sizeof(*hc));
		kvs_hcache_stats(e->obj, hc);
		for (i = 0; i < NDEFS(hcache_off); i++)
			if (hcache_off[i] != offsetof(kvs_hcache_stats_t, window_hit_ratio))
				memcpy(&v[i], (const char *)hc + hcache_off[i], sizeof(v[i]));
		break;
	case F_HPOOL:
		kvsi_hpool_stats_fill(e->obj, v);
		break;
	case F_HIRADIX:
		kvsi_hiradix_stats_fill(e->obj, v);
		break;
	case F_STORE:
		for (i = 0; i < KVS_STORE_STAT__COUNT; i++)
			v[i] = kvs_store_stat(e->obj, (enum kvs_store_stat)i);
		break;
	default:
		break;
	}
}

/* Statistic @i of a snapshot, as the family's text. */
static void out_value(struct out *o, enum fam fam, const uint64_t *v,
		      const kvs_hcache_stats_t *hc, size_t i)
{
	if (fam == F_HCACHE && hcache_off[i] == offsetof(kvs_hcache_stats_t, window_hit_ratio))
		kvsi_buf_fmt(&o->b, "%.17g", hc->window_hit_ratio);
	else
		kvsi_buf_fmt(&o->b, "%" PRIu64, v[i]);
}

static bool member(const struct entry *e, enum fam fam)
{
	return e->fam == fam || (fam == F_SLAB && e->fam == F_POOL);
}

/**
 * kvs_metrics_write() - write every statistic of every registered object in
 * the Prometheus text exposition format 0.0.4.
 * @m: the registry.
 * @write_cb: called with successive pieces of the text (each ends at a line
 * end); it must not call kvs_metrics_* on @m.
 * @arg: handed to @write_cb.
 *
 * A family without registered objects writes nothing.
 *
 * Context: any thread; holds m->lock across the calls of @write_cb.
 * Return: 0, or -1 with errno EINVAL (NULL @m or @write_cb) or ENOMEM (the
 * text may then have been written in part).
 */
KVS_EXPORT int kvs_metrics_write(kvs_metrics_t *m,
				 void (*write_cb)(void *arg, const char *data, size_t len), void *arg)
{
	struct out o = {.b.first = OUT_FLUSH * 2, .cb = write_cb, .arg = arg};
	char name[160];

	if (!m || !write_cb)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&m->lock);
	for (int f = 0; f < F__COUNT && !o.b.nomem; f++) {
		const struct family *fa = &families[f];
		kvs_hcache_stats_t *hc;
		uint64_t *v;
		size_t nm = 0, k;

		for (const struct entry *e = m->head; e; e = e->next)
			nm += member(e, f);
		if (!nm)
			continue;
		/* One snapshot a member, taken before its lines are written. */
		v = calloc(nm * fa->n, sizeof(*v));
		hc = calloc(nm, sizeof(*hc));
		if (!v || !hc) {
			free(v);
			free(hc);
			o.b.nomem = true;
			break;
		}
		k = 0;
		for (const struct entry *e = m->head; e; e = e->next)
			if (member(e, f)) {
				snap(e, f, v + k * fa->n, &hc[k]);
				k++;
			}
		for (size_t i = 0; i < fa->n; i++) {
			const struct stat_def *d = &fa->defs[i];
			int n = snprintf(name, sizeof(name), "kvslab_%s_%s%s", fa->prefix, d->name,
					 d->counter ? "_total" : "");

			if (n <= 0 || (size_t)n >= sizeof(name) || !name_ok(name))
				continue;
			out_str(&o, "# HELP ");
			out_str(&o, name);
			out_str(&o, " ");
			out_escaped(&o, d->desc, false);
			out_str(&o, "\n# TYPE ");
			out_str(&o, name);
			out_str(&o, d->counter ? " counter\n" : " gauge\n");
			k = 0;
			for (const struct entry *e = m->head; e; e = e->next) {
				if (!member(e, f))
					continue;
				out_str(&o, name);
				if (e->label) {
					out_str(&o, "{instance=\"");
					out_escaped(&o, e->label, true);
					out_str(&o, "\"}");
				}
				out_str(&o, " ");
				out_value(&o, f, v + k * fa->n, &hc[k], i);
				out_str(&o, "\n");
				k++;
			}
			if (o.b.len >= OUT_FLUSH)
				out_flush(&o);
		}
		free(v);
		free(hc);
	}
	out_flush(&o);
	pthread_mutex_unlock(&m->lock);
	free(o.b.buf);
	return o.b.nomem ? kvs_fail(ENOMEM) : 0;
}
