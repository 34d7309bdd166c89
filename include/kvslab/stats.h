/* SPDX-License-Identifier: MIT */
/*
 * kvslab/stats.h - what every statistics family of kvslab declares alike.
 *
 * Each kind of object (driver, slab, radix cache, hashed cache, host pool,
 * tiered cache, store) defines its statistics once, in an X-macro list of
 * its header: KVS_RADIX_STATS(X) and the others, one
 * X(name, kind, description) per statistic, kind counter or gauge.
 * KVS_STATS_DECLARE() declares from that list, for family F (radix) of
 * objects of type T (kvs_radix_t), with ITEM a macro that makes an enum
 * constant of one entry (KVS_RADIX_STAT_name) and COUNT the constant that
 * ends the enum (KVS_RADIX_STAT__COUNT):
 *
 *	enum kvs_F_stat { one ITEM per statistic, COUNT };
 *	uint64_t kvs_F_stat(T *obj, enum kvs_F_stat item);
 *	int kvs_F_stat_get(T *obj, const char *name, uint64_t *value);
 *	const char *kvs_F_stat_name(enum kvs_F_stat item);
 *	int kvs_F_stats_print(T *obj, void (*write_cb)(void *arg, const char *line),
 *			      void *arg);
 *
 * Each family's page (kvs_radix_stat(3) and the others) describes them.
 */
#ifndef KVSLAB_STATS_H
#define KVSLAB_STATS_H

#include <stdint.h>

#define KVS_STATS_DECLARE(F, T, LIST, ITEM, COUNT)                                      \
	enum kvs_##F##_stat { LIST(ITEM) COUNT };                                       \
	uint64_t kvs_##F##_stat(T *obj, enum kvs_##F##_stat item);                      \
	int kvs_##F##_stat_get(T *obj, const char *name, uint64_t *value);              \
	const char *kvs_##F##_stat_name(enum kvs_##F##_stat item);                      \
	int kvs_##F##_stats_print(T *obj, void (*write_cb)(void *arg, const char *line), \
				  void *arg)

#endif /* KVSLAB_STATS_H */
