/* SPDX-License-Identifier: MIT */
/*
 * kvslab/ctl.h - the local control interface: a Unix-domain stream socket
 * served by a library thread, speaking the line protocol of kvslab-ctl(7)
 * (metrics, limit, ping, help), which kvslab-ctl(1) and kvslab-stat(1) use.
 * See kvs_ctl_start(3).
 */
#ifndef KVSLAB_CTL_H
#define KVSLAB_CTL_H

#include <stdint.h>

#include <kvslab/metrics.h>
#include <kvslab/pool.h>
#include <kvslab/radix.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_ctl kvs_ctl_t;

/* The longest request line, newline included. */
#define KVS_CTL_LINE_MAX 1024

/** What a set_limit callback reports. */
typedef struct kvs_ctl_limit_report {
	uint64_t bytes_returned;	/* bytes given back to the driver */
	uint64_t elapsed_ns;		/* time the change took */
	uint64_t limit;			/* the limit now in force, bytes */
	/* On a refusal (ENOMEM), when known: the lowest limit the engine
	 * can honour now, and the lowest compaction could bring it to (as
	 * kvs_limit_report_t's floor_bytes and packed_bytes); 0: unknown. */
	uint64_t floor_bytes;
	uint64_t packed_bytes;
	uint64_t _reserved[3];
} kvs_ctl_limit_report_t;

/** Attributes of kvs_ctl_start(); start from kvs_ctl_attr_init(). */
typedef struct kvs_ctl_attr {
	/* What the metrics request writes; NULL: the request fails ENOTSUP. */
	kvs_metrics_t *metrics;
	/* Change the memory limit to @bytes: 0, or -1 with errno set (its name
	 * and strerror text are sent to the client).  Called on the server
	 * thread; NULL: limit SIZE fails ENOTSUP. */
	int (*set_limit)(void *arg, uint64_t bytes, kvs_ctl_limit_report_t *report);
	/* The memory limit now, in *bytes: 0, or -1 with errno.  NULL: the
	 * limit request reports the last limit a set_limit report gave, or
	 * limit below. */
	int (*get_limit)(void *arg, uint64_t *bytes);
	void *limit_arg;		/* handed to set_limit and get_limit */
	uint64_t limit;			/* the limit before any set; 0: unknown */
	uint32_t max_clients;		/* clients served at once; default 8 */
	uint32_t timeout_ms;		/* idle client and blocked write limit; default 10000 */
	/* Instead of the callbacks: a pool whose limit the limit requests read
	 * and set with kvs_pool_limit() and kvs_pool_set_limit(), evicting
	 * from @cache, or from every cache over the pool when it is NULL.
	 * Used when set_limit is NULL. */
	kvs_pool_t *pool;
	kvs_radix_t *cache;
	uint64_t _reserved[6];
} kvs_ctl_attr_t;

int kvs_ctl_attr_init(kvs_ctl_attr_t *attr);
/* SIZE as kvslab-ctl(7) and every kvslab tool read it: "8G", "1.5G",
 * "512MiB", "64k", "4096".  See kvs_parse_size(3). */
int kvs_parse_size(const char *s, uint64_t *bytes);
kvs_ctl_t *kvs_ctl_start(const char *path, const kvs_ctl_attr_t *attr);
int kvs_ctl_stop(kvs_ctl_t *ctl);

#ifdef __cplusplus
}
#endif
#endif /* KVSLAB_CTL_H */
