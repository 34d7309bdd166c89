/* SPDX-License-Identifier: MIT */
/*
 * lib/stats.c - the four statistics accessors, written once for every
 * family (lib/stats.h describes a family).
 *
 * kvsi_stat() reads one value, kvsi_stat_get() one by name, kvsi_stat_name()
 * names one, and kvsi_stats_print() writes a family's header line (when it
 * has one) and one line per statistic through a callback.  Every read
 * fills the family's whole snapshot with its fill() callback, which takes
 * the object's own locks; the print calls write_cb only after fill() and
 * header() have returned, so no object lock is held across it.
 *
 * Also here: the driver family's descriptor and its four exported
 * functions, as drv/ sits below lib/ and reads its counters with
 * kvsi_drv_stat() (drv/backend.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "stats.h"
#include "backend.h"

const struct kvsi_stat_style kvsi_style_desc = {.width = 20};
const struct kvsi_stat_style kvsi_style_kind = {.width = 20, .show_kind = true};
const struct kvsi_stat_style kvsi_style_kind16 = {.width = 16, .show_kind = true};
const struct kvsi_stat_style kvsi_style_plain = {.plain = true, .set_errno = true};

/* A bad argument: errno EINVAL where the family promises it. */
static void bad_arg(const struct kvsi_stat_family *f)
{
	if (f->style->set_errno)
		errno = EINVAL;
}

uint64_t kvsi_stat(const struct kvsi_stat_family *f, void *obj, unsigned item)
{
	uint64_t v[KVSI_STATS_MAX];

	if (!obj || item >= f->count) {
		bad_arg(f);
		return 0;
	}
	f->fill(obj, v);
	return v[item];
}

const char *kvsi_stat_name(const struct kvsi_stat_family *f, unsigned item)
{
	if (item >= f->count) {
		bad_arg(f);
		return NULL;
	}
	return f->names[item];
}

bool kvsi_stat_counter(const struct kvsi_stat_family *f, unsigned item)
{
	return item < f->count && strcmp(f->kinds[item], "counter") == 0;
}

int kvsi_stat_get(const struct kvsi_stat_family *f, void *obj, const char *name, uint64_t *value)
{
	unsigned i;

	if (!obj || !name || !value)
		return kvs_fail(EINVAL);
	for (i = 0; i < f->count; i++) {
		if (strcmp(name, f->names[i]) == 0) {
			*value = kvsi_stat(f, obj, i);
			return 0;
		}
	}
	return kvs_fail(ENOENT);
}

int kvsi_stats_print(const struct kvsi_stat_family *f, void *obj,
		     void (*write_cb)(void *arg, const char *line), void *arg)
{
	uint64_t v[KVSI_STATS_MAX];
	char line[256];
	unsigned i;

	if (!obj || !write_cb)
		return kvs_fail(EINVAL);
	f->fill(obj, v);
	if (f->header) {
		f->header(obj, line, sizeof(line));
		write_cb(arg, line);
	}
	for (i = 0; i < f->count; i++) {
		const struct kvsi_stat_style *st = f->style;
		unsigned long long x = v[i];

		if (st->plain)
			snprintf(line, sizeof(line), "%s %s %llu\n", f->prefix, f->names[i], x);
		else if (st->show_kind)
			snprintf(line, sizeof(line), "%-*s %20llu  %-7s # %s\n", (int)st->width,
				 f->names[i], x, f->kinds[i], f->descs[i]);
		else
			snprintf(line, sizeof(line), "%-*s %20llu  # %s\n", (int)st->width,
				 f->names[i], x, f->descs[i]);
		write_cb(arg, line);
	}
	return 0;
}

/* ---------------------------------------------------------- the driver */

static void drv_fill(void *obj, uint64_t *v)
{
	for (unsigned i = 0; i < KVS_DRV_STAT__COUNT; i++)
		v[i] = kvsi_drv_stat(obj, (enum kvs_drv_stat)i);
}

static void drv_header(void *obj, char *line, size_t size)
{
	snprintf(line, size, "driver %s granularity %zu\n", kvs_drv_name(obj),
		 kvs_drv_granularity(obj));
}

/**
 * kvs_drv_stat() - read one counter; kvs_drv_stat_get() reads one by name,
 * kvs_drv_stat_name() names one, kvs_drv_stats_print() prints every one
 * through a callback (a header line "driver NAME granularity BYTES", then
 * "name value  # description" lines).
 * @drv: driver.
 * @item: counter.
 *
 * Context: MT-Safe (relaxed atomic loads).
 * Return: kvs_drv_stat(): the value, 0 for NULL or an unknown item;
 * kvs_drv_stat_name(): a static string, NULL for an unknown item; the
 * others: 0, or -1 with errno EINVAL (a NULL argument) or ENOENT (no such
 * counter).
 */
KVSI_STATS_FAMILY(drv, KVS_DRV_STATS, drv_fill, drv_header, &kvsi_style_desc, NULL, const kvs_drv_t,
		  enum kvs_drv_stat);
