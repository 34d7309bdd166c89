/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/fence.c - the engine's device work as a point; the design is
 * lib/mem/fence.h's essay.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mem/fence.h"

int kvsi_fence_init(struct kvsi_fence *f, kvs_drv_t *drv, const kvs_stream_t *streams,
		    uint32_t n, const kvs_fence_t *engine)
{
	uint32_t j;

	memset(f, 0, sizeof(*f));
	f->drv = drv;
	pthread_mutex_init(&f->lock, NULL);
	if (engine && engine->record) {
		f->engine = *engine;
		return 0;
	}
	if (!n)
		return 0;
	f->streams = malloc(n * sizeof(*f->streams));
	f->ev = calloc(n, sizeof(*f->ev));
	if (!f->streams || !f->ev) {
		kvsi_fence_fini(f);
		return kvs_fail(ENOMEM);
	}
	memcpy(f->streams, streams, n * sizeof(*streams));
	f->nstreams = n;
	for (j = 0; j < n; j++)
		if (kvs_event_create(drv, &f->ev[j]) < 0) {
			int e = errno;

			kvsi_fence_fini(f);
			return kvs_fail(e);
		}
	return 0;
}

void kvsi_fence_fini(struct kvsi_fence *f)
{
	uint32_t j;

	for (j = 0; f->ev && j < f->nstreams; j++)
		kvs_event_destroy(f->ev[j]);
	free(f->ev);
	free(f->streams);
	f->ev = NULL;
	f->streams = NULL;
	f->nstreams = 0;
	pthread_mutex_destroy(&f->lock);
}

int kvsi_fence_record(struct kvsi_fence *f, uint64_t *token)
{
	uint32_t j;
	int rc = 0;

	if (f->engine.record)
		return f->engine.record(f->engine.arg, token);
	pthread_mutex_lock(&f->lock);
	for (j = 0; j < f->nstreams && rc == 0; j++)
		rc = kvs_event_record(f->ev[j], f->streams[j]);
	pthread_mutex_unlock(&f->lock);
	*token = 0;
	return rc;
}

int kvsi_fence_query(struct kvsi_fence *f, uint64_t token, bool wait)
{
	uint32_t j;
	int q;

	if (f->engine.query) {
		long ns = 20000;

		while ((q = f->engine.query(f->engine.arg, token)) == 0 && wait) {
			struct timespec ts = {0, ns};

			nanosleep(&ts, NULL);
			if (ns < 1000000)
				ns *= 2;
		}
		return q < 0 ? -1 : q;
	}
	/* The events live from init to fini: no lock, a wait must not hold
	 * one. */
	for (j = 0; j < f->nstreams; j++) {
		q = wait ? (kvs_event_wait(f->ev[j]) < 0 ? -1 : 1) : kvs_event_query(f->ev[j]);
		if (q <= 0)
			return q;
	}
	return 1;
}

int kvsi_fence_order_copies(struct kvsi_fence *f)
{
	uint64_t token;
	uint32_t j;
	int rc = 0;

	if (f->engine.record) {
		if (kvsi_fence_record(f, &token) < 0)
			return -1;
		return kvsi_fence_query(f, token, true) < 0 ? kvs_fail(errno ? errno : EIO) : 0;
	}
	if (!f->nstreams)
		return 0; /* no device work named: nothing to order after */
	pthread_mutex_lock(&f->lock);
	for (j = 0; j < f->nstreams && rc == 0; j++)
		if (kvs_event_record(f->ev[j], f->streams[j]) < 0 || kvs_drv_stream_wait(f->drv, f->ev[j]) < 0)
			rc = -1;
	pthread_mutex_unlock(&f->lock);
	return rc;
}
