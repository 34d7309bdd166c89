/* SPDX-License-Identifier: MIT */
/*
 * kvslab/metrics.h - every statistic of the library in the Prometheus text
 * exposition format (version 0.0.4), through a write callback: a registry of
 * objects, each with an optional "object" label, written in one call, so
 * an engine's /metrics endpoint is one call, or kvs_metrics_serve() serves it
 * over HTTP.  See kvs_metrics_create(3).
 */
#ifndef KVSLAB_METRICS_H
#define KVSLAB_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include <kvslab/drv.h>
#include <kvslab/slab.h>
#include <kvslab/pool.h>
#include <kvslab/radix.h>
#include <kvslab/hashcache.h>
#include <kvslab/hostpool.h>
#include <kvslab/hiradix.h>
#include <kvslab/storage.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_metrics kvs_metrics_t;

/* The label that tells two objects of a family apart (not "instance", which
 * a Prometheus server sets to the target it scraped). */
#define KVS_METRICS_LABEL "object"

/* The Content-Type an HTTP endpoint serving kvs_metrics_write()'s text sends. */
#define KVS_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

kvs_metrics_t *kvs_metrics_create(void);
int kvs_metrics_destroy(kvs_metrics_t *m);

int kvs_metrics_add_drv(kvs_metrics_t *m, kvs_drv_t *drv, const char *label);
int kvs_metrics_add_slab(kvs_metrics_t *m, kvs_slab_t *slab, const char *label);
int kvs_metrics_add_pool(kvs_metrics_t *m, kvs_pool_t *pool, const char *label);
int kvs_metrics_add_radix(kvs_metrics_t *m, kvs_radix_t *radix, const char *label);
int kvs_metrics_add_hcache(kvs_metrics_t *m, kvs_hcache_t *hc, const char *label);
int kvs_metrics_add_hpool(kvs_metrics_t *m, kvs_hpool_t *hp, const char *label);
int kvs_metrics_add_hiradix(kvs_metrics_t *m, kvs_hiradix_t *h, const char *label);
int kvs_metrics_add_store(kvs_metrics_t *m, kvs_store_t *s, const char *label);
int kvs_metrics_remove(kvs_metrics_t *m, const void *obj);

int kvs_metrics_write(kvs_metrics_t *m, void (*write_cb)(void *arg, const char *data, size_t len),
		      void *arg);

/* GET /metrics over HTTP on @addr ("127.0.0.1:9400", ":9400" = loopback,
 * "*:9400" = every interface; port 0: an ephemeral one, in *@port). */
int kvs_metrics_serve(kvs_metrics_t *m, const char *addr, uint16_t *port);
int kvs_metrics_serve_stop(kvs_metrics_t *m);

#ifdef __cplusplus
}
#endif
#endif /* KVSLAB_METRICS_H */
