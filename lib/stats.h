/* SPDX-License-Identifier: MIT */
/*
 * lib/stats.h - one statistics module for every family of the library.
 *
 * A family (the driver's, the slab's, the radix cache's, the host pool's,
 * the tiered cache's, the store's, the hashed cache's) defines its
 * statistics once, in the X(name, kind, description) list of its public
 * header (KVS_RADIX_STATS and the others), and describes itself here with
 * one struct kvsi_stat_family: the list expanded into names, kinds and
 * descriptions, a fill() callback that reads every value of an object in
 * one snapshot, an optional header() that makes the first line of
 * kvs_X_stats_print(), and a style (how the lines of that print look).
 * lib/stats.c implements the four accessors every family exports
 * (kvs_X_stat(), kvs_X_stat_get(), kvs_X_stat_name(), kvs_X_stats_print())
 * once over that descriptor; KVSI_STATS_FAMILY() defines a family's
 * descriptor and writes its four exported functions as calls of them, in
 * one line beside the family's fill() and header(); lib/ops/metrics.c
 * walks a table of the same descriptors.
 *
 * The driver shim (drv/) sits below lib/ and cannot include this file:
 * the driver family's descriptor is in lib/stats.c, over the public
 * kvs_drv_stat(), kvs_drv_name() and kvs_drv_granularity().
 */
#ifndef KVSI_STATS_H
#define KVSI_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most statistics a family may have (the size of a snapshot on the
 * stack). */
#define KVSI_STATS_MAX 64

/* A value computed from two others, written by the metrics only (the
 * hashed cache's window hit ratio): @num / @den, 0 when @den is 0, written
 * after statistic @after. */
struct kvsi_stat_ratio {
	const char *name;
	const char *desc;
	unsigned after, num, den;
};

/* How a family's print looks, and how its accessors fail. */
struct kvsi_stat_style {
	/* Lines "name value  kind # description\n": the name padded to
	 * @width, the kind column only with @show_kind.  With @plain, lines
	 * "prefix name value\n" instead. */
	unsigned width;
	bool show_kind;
	bool plain;
	/* kvs_X_stat() and kvs_X_stat_name() set errno EINVAL on a bad
	 * argument (the store's documented behaviour). */
	bool set_errno;
};

extern const struct kvsi_stat_style kvsi_style_desc;	/* 20, no kind: drv, slab, radix */
extern const struct kvsi_stat_style kvsi_style_kind;	/* 20 and kind: hiradix, hcache */
extern const struct kvsi_stat_style kvsi_style_kind16;	/* 16 and kind: hpool */
extern const struct kvsi_stat_style kvsi_style_plain;	/* "store name value": store */

struct kvsi_stat_family {
	const char *prefix;		/* the metrics' family name: "radix" */
	const char *const *names;	/* from the X-list, count of each */
	const char *const *kinds;	/* "counter" or "gauge" */
	const char *const *descs;
	unsigned count;
	/* Every value of @obj, v[0 .. count - 1], in one snapshot. */
	void (*fill)(void *obj, uint64_t *v);
	/* The first line of the print (ending in a newline), or NULL for none. */
	void (*header)(void *obj, char *line, size_t size);
	const struct kvsi_stat_style *style;
	const struct kvsi_stat_ratio *ratio;	/* NULL: none */
};

/* A family's tables from its X-list (TAG_names, TAG_kinds, TAG_descs) and
 * its descriptor, kvsi_TAG_stats. */
#define KVSI_STAT_NAME_(n, k, d) #n,
#define KVSI_STAT_KIND_(n, k, d) #k,
#define KVSI_STAT_DESC_(n, k, d) d,
#define KVSI_STATS_DESCRIPTOR(tag, LIST, fill_fn, header_fn, style_p, ratio_p)           \
	static const char *const tag##_names[] = {LIST(KVSI_STAT_NAME_)};               \
	static const char *const tag##_kinds[] = {LIST(KVSI_STAT_KIND_)};               \
	static const char *const tag##_descs[] = {LIST(KVSI_STAT_DESC_)};               \
	_Static_assert(sizeof(tag##_names) / sizeof(tag##_names[0]) <= KVSI_STATS_MAX, \
		       #tag " statistics: raise KVSI_STATS_MAX");                      \
	const struct kvsi_stat_family kvsi_##tag##_stats = {                            \
		#tag, tag##_names, tag##_kinds, tag##_descs,                            \
		sizeof(tag##_names) / sizeof(tag##_names[0]),                           \
		fill_fn, header_fn, style_p, ratio_p,                                   \
	}

uint64_t kvsi_stat(const struct kvsi_stat_family *f, void *obj, unsigned item);
const char *kvsi_stat_name(const struct kvsi_stat_family *f, unsigned item);
int kvsi_stat_get(const struct kvsi_stat_family *f, void *obj, const char *name,
		  uint64_t *value);
int kvsi_stats_print(const struct kvsi_stat_family *f, void *obj,
		     void (*write_cb)(void *arg, const char *line), void *arg);
bool kvsi_stat_counter(const struct kvsi_stat_family *f, unsigned item);

/*
 * A whole family: its descriptor (above) and its four exported accessors,
 * kvs_TAG_stat(), kvs_TAG_stat_get(), kvs_TAG_stat_name() and
 * kvs_TAG_stats_print(), for objects of type @type (kvs_radix_t, const
 * kvs_drv_t, ...) and items of type @item_t (enum kvs_radix_stat), each
 * one call of the generic implementation above.
 */
#define KVSI_STATS_FAMILY(tag, LIST, fill_fn, header_fn, style_p, ratio_p, type, item_t)    \
	KVSI_STATS_DESCRIPTOR(tag, LIST, fill_fn, header_fn, style_p, ratio_p);             \
	KVS_EXPORT uint64_t kvs_##tag##_stat(type *obj, item_t item)                        \
	{                                                                                   \
		return kvsi_stat(&kvsi_##tag##_stats, (void *)obj, (unsigned)item);         \
	}                                                                                   \
	KVS_EXPORT int kvs_##tag##_stat_get(type *obj, const char *name, uint64_t *value)   \
	{                                                                                   \
		return kvsi_stat_get(&kvsi_##tag##_stats, (void *)obj, name, value);        \
	}                                                                                   \
	KVS_EXPORT const char *kvs_##tag##_stat_name(item_t item)                           \
	{                                                                                   \
		return kvsi_stat_name(&kvsi_##tag##_stats, (unsigned)item);                 \
	}                                                                                   \
	KVS_EXPORT int kvs_##tag##_stats_print(type *obj,                                   \
					       void (*write_cb)(void *arg, const char *line), \
					       void *arg)                                     \
	{                                                                                   \
		return kvsi_stats_print(&kvsi_##tag##_stats, (void *)obj, write_cb, arg);   \
	}                                                                                   \
	_Static_assert(1, "a semicolon after the macro")

/* The families, each defined beside the code it reads. */
extern const struct kvsi_stat_family kvsi_drv_stats;		/* lib/stats.c */
extern const struct kvsi_stat_family kvsi_slab_stats;		/* lib/mem/slab_stat.c */
extern const struct kvsi_stat_family kvsi_radix_stats;		/* lib/cache/radix.c */
extern const struct kvsi_stat_family kvsi_hcache_stats;		/* lib/cache/hashcache.c */
extern const struct kvsi_stat_family kvsi_hpool_stats;		/* lib/tier/hostpool.c */
extern const struct kvsi_stat_family kvsi_hiradix_stats;	/* lib/cache/hiradix.c */
extern const struct kvsi_stat_family kvsi_store_stats;		/* lib/tier/storage.c */
extern const struct kvsi_stat_family kvsi_pool_stats;		/* lib/ops/metrics.c */

#endif /* KVSI_STATS_H */
