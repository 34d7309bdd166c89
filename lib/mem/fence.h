/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/fence.h - the engine's device work as a point the library can
 * order against: one module that the slab allocator (unmaps after the
 * device's last use), the host pool (backups after the kernels that wrote
 * their pages), compaction (copies after the kernels that use the pages)
 * and the flows (locations given back before the kernels are done) share.
 *
 * A fence is either the engine's streams, with one driver event per stream,
 * or a fence of the engine's own (kvs_fence_t: record a token, query it).
 * Two uses:
 *  - record, then query or wait: "has the device done everything submitted
 *    before the record?" (the allocator's unmaps);
 *  - kvsi_fence_order_copies(): make the driver's copy queue start its
 *    next copies only after the engine's work so far, on the device
 *    (an event recorded on each stream, kvs_drv_stream_wait()); an engine
 *    fence cannot be waited for on the device, so it is waited for on the
 *    host.
 * Each user owns its fence: events are re-recorded, and a shared one would
 * move a point another user still queries.  The events are created at
 * init.  A fence's calls are serialized by its own lock, held across
 * driver calls that do not wait (records, device-side waits) and never
 * across a host wait.
 */
#ifndef KVSLAB_MEM_FENCE_H
#define KVSLAB_MEM_FENCE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "kvslab/drv.h"
#include "kvslab/slab.h"

struct kvsi_fence {
	kvs_drv_t *drv;
	kvs_stream_t *streams;		/* copy of the engine's, nstreams */
	uint32_t nstreams;
	kvs_event_t **ev;		/* one per stream, from init to fini */
	kvs_fence_t engine;		/* record non-NULL: instead of streams */
	pthread_mutex_t lock;
};

/* Set up @f over @streams (copied; n of them, an event each) or @engine
 * (record non-NULL, used instead of the streams).  0, or -1 with errno
 * ENOMEM or the driver's (nothing is left to fini then). */
int kvsi_fence_init(struct kvsi_fence *f, kvs_drv_t *drv, const kvs_stream_t *streams,
		    uint32_t n, const kvs_fence_t *engine);
void kvsi_fence_fini(struct kvsi_fence *f);
/* Does @f name any device work at all (streams or an engine fence)? */
static inline bool kvsi_fence_active(const struct kvsi_fence *f)
{
	return f->nstreams || f->engine.record;
}
/* Mark the point after all work submitted so far; *token names it for an
 * engine fence (0 for streams).  0, or -1 with errno. */
int kvsi_fence_record(struct kvsi_fence *f, uint64_t *token);
/* 1 when the point recorded last (@token) is passed, 0 not yet, -1 on
 * failure; with @wait, block until it is passed (no lock held then). */
int kvsi_fence_query(struct kvsi_fence *f, uint64_t token, bool wait);
/* Order the driver's copy queue after the engine's work so far: on the
 * device for streams, by a host wait for an engine fence.  0, or -1 with
 * errno (the caller must then not rely on the order). */
int kvsi_fence_order_copies(struct kvsi_fence *f);

#endif /* KVSLAB_MEM_FENCE_H */
