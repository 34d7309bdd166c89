/* SPDX-License-Identifier: MIT */
/*
 * lib/ops/metrics_http.h - the metrics' HTTP endpoint (lib/ops/metrics_http.c),
 * started and stopped by kvs_metrics_serve() and kvs_metrics_serve_stop()
 * in lib/ops/metrics.c.
 */
#ifndef KVSI_METRICS_HTTP_H
#define KVSI_METRICS_HTTP_H

#include <stdint.h>

#include "kvslab/metrics.h"

struct kvsi_http;

/*
 * Listen on @addr ("HOST:PORT", "[V6]:PORT", ":PORT" for the loopback
 * address, "*:PORT" for every interface) and answer GET /metrics with
 * kvs_metrics_write(@m) from a thread of the HTTP library.  *@out gets the
 * server, *@port the port bound.  0, or -1 with errno (ENOTSUP without
 * libmicrohttpd); nothing is left behind on failure.
 */
int kvsi_http_start(kvs_metrics_t *m, const char *addr, struct kvsi_http **out, uint16_t *port);
/* Stop @h: waits for the requests being answered, closes the socket. */
void kvsi_http_stop(struct kvsi_http *h);

#endif /* KVSI_METRICS_HTTP_H */
