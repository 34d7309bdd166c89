/* SPDX-License-Identifier: MIT */
/*
 * drv/drv_io.c - the driver shim's device work and host memory: events
 * (create, record, query, wait, destroy), copies between host and device
 * (checked against the mappings and their access, submitted on the
 * backend's copy queue), synchronization, and pinned host memory.  The
 * design, and the locking (event waits and synchronization take no lock),
 * are drv/drv.c's essay.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "drv_int.h"

/* Is [addr, addr + n) mapped with at least @need access?  Lock held. */
static bool accessible(struct kvs_drv *d, kvs_devptr_t addr, size_t n, int need)
{
	struct kvs_range *r = drv_range_find(d, addr, n);
	size_t g, last, i;

	if (!r || n == 0)
		return false;
	g = (addr - r->base) / d->granularity;
	last = (addr + n - 1 - r->base) / d->granularity;
	for (i = g; i <= last; i++)
		if (!r->chunk[i] || (r->access[i] & need) != need)
			return false;
	return true;
}

/**
 * kvs_event_create() - create a completion object for copies.
 * @drv: driver.
 * @ev: receives the event.
 *
 * An event passed to a copy completes when that copy and every copy
 * submitted before it on @drv are done.  An event never recorded is complete.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL or ENOMEM.
 */
KVS_EXPORT int kvs_event_create(kvs_drv_t *d, kvs_event_t **ev)
{
	struct kvs_event *e;

	if (!d || !ev)
		return fail(d, EINVAL);
	e = calloc(1, sizeof(*e));
	if (!e)
		return fail(d, ENOMEM);
	e->drv = d;
	if (d->be->event_create(d, &e->bev) < 0) {
		int err = errno;

		free(e);
		return fail(d, err);
	}
	pthread_mutex_lock(&d->lock);
	DLIST_PUSH(d->events, e);
	pthread_mutex_unlock(&d->lock);
	*ev = e;
	return 0;
}

void drv_event_unlink(struct kvs_drv *d, struct kvs_event *e)
{
	DLIST_DEL(d->events, e);
}

/**
 * kvs_event_destroy() - destroy an event.
 * @ev: event, or NULL.
 *
 * Context: MT-Safe, but not concurrently with a wait on the same event.
 * Return: 0.
 */
KVS_EXPORT int kvs_event_destroy(kvs_event_t *e)
{
	struct kvs_drv *d;

	if (!e)
		return 0;
	d = e->drv;
	pthread_mutex_lock(&d->lock);
	drv_event_unlink(d, e);
	pthread_mutex_unlock(&d->lock);
	d->be->event_destroy(d, e->bev);
	free(e);
	return 0;
}

/**
 * kvs_event_record() - record an event on an engine's stream.
 * @ev: event.
 * @stream: the stream (cuda: a CUstream cast to kvs_stream_t, 0 for the
 *          legacy default stream); host: any value.
 *
 * @ev completes when all work submitted on @stream before this call is done
 * (cuda: cuEventRecord).  On host there are no streams: @ev completes when the
 * driver's copy queue reaches the point of the record, at once when no copy
 * is queued.  kvs_event_query() and kvs_event_wait() then work as for a copy.
 *
 * cuda: a @stream that is not a live CUstream of the context is undefined
 * behaviour, as in CUDA (the driver crashes).
 *
 * Context: MT-Safe; takes no lock of the driver and never waits for the
 * device.
 * Return: 0, or -1 with errno EINVAL (@ev NULL), ENOTSUP (the backend
 * cannot record on streams).
 */
KVS_EXPORT int kvs_event_record(kvs_event_t *e, kvs_stream_t stream)
{
	struct kvs_drv *d;

	if (!e)
		return fail(NULL, EINVAL);
	d = e->drv;
	if (!d->be->event_record_stream)
		return fail(d, ENOTSUP);
	if (BE_CALL(d, d->be->event_record_stream(d, e->bev, stream)) < 0)
		return fail(d, errno);
	atomic_store(&e->covers, 0);
	return 0;
}

/**
 * kvs_event_query() - poll an event.
 * @ev: event.
 *
 * Context: MT-Safe.
 * Return: 1 when complete, 0 when pending, -1 with errno (EIO: a copy before
 * it failed; EINVAL: @ev is NULL).
 */
KVS_EXPORT int kvs_event_query(kvs_event_t *e)
{
	uint64_t covers;
	int rc;

	if (!e)
		return fail(NULL, EINVAL);
	/* Read first: a record after it only makes the answer cover more. */
	covers = atomic_load(&e->covers);
	rc = e->drv->be->event_query(e->drv, e->bev);
	if (rc == 1 && covers)
		drv_quiesced(e->drv, covers);
	return rc;
}

/**
 * kvs_event_wait() - block until an event is complete.
 * @ev: event.
 *
 * Context: MT-Safe; blocks.
 * Return: 0, or -1 with errno (EIO: a copy before it failed).
 */
KVS_EXPORT int kvs_event_wait(kvs_event_t *e)
{
	uint64_t covers;
	int rc;

	if (!e)
		return fail(NULL, EINVAL);
	/* A completed copy event: the copies it came after are done, and an
	 * unmap need not drain them (drv/drv.c's essay). */
	covers = atomic_load(&e->covers);
	rc = e->drv->be->event_wait(e->drv, e->bev);
	if (rc == 0 && covers)
		drv_quiesced(e->drv, covers);
	return rc;
}

/* May a copy of direction @kind touch [dst, dst + n) and [src, src + n)?
 * Host sides must not wrap (EINVAL); device sides must not wrap and must be
 * mapped with the access the copy needs (EFAULT).  Lock held. */
static int copy_check(struct kvs_drv *d, int kind, uint64_t dst, uint64_t src, uint64_t n)
{
	bool dev_dst = kind != KVS_COPY_DTOH, dev_src = kind != KVS_COPY_HTOD;

	if (n == 0 || (!dev_dst && !dst) || (!dev_src && !src) || n > SIZE_MAX)
		return EINVAL;
	if ((!dev_dst && dst + n < dst) || (!dev_src && src + n < src))
		return EINVAL;
	if ((dev_dst && dst + n < dst) || (dev_src && src + n < src))
		return EFAULT;
	if (dev_dst && !accessible(d, dst, n, KVS_ACCESS_RW))
		return EFAULT;
	if (dev_src && !accessible(d, src, n, KVS_ACCESS_READ))
		return EFAULT;
	return 0;
}

/* Submit one checked copy to the backend.  Lock held. */
static int copy_one(struct kvs_drv *d, int kind, uint64_t dst, uint64_t src, size_t n)
{
	switch (kind) {
	case KVS_COPY_HTOD:
		return d->be->copy_htod(d, dst, (const void *)(uintptr_t)src, n);
	case KVS_COPY_DTOH:
		return d->be->copy_dtoh(d, (void *)(uintptr_t)dst, src, n);
	default:
		return d->be->copy_dtod(d, dst, src, n);
	}
}

/* Finish a submission under the lock: record @ev, count, unlock. */
static int copy_done(struct kvs_drv *d, int rc, kvs_event_t *ev, size_t ncopies, uint64_t bytes)
{
	if (rc == 0 && ev)
		rc = d->be->event_record(d, ev->bev);
	if (rc < 0) {
		int e = errno;

		pthread_mutex_unlock(&d->lock);
		return fail(d, e);
	}
	if (ncopies) {
		atomic_fetch_add(&d->copies_submitted, 1);
		stat_add(d, KVS_DRV_STAT_copy_calls, ncopies);
		stat_add(d, KVS_DRV_STAT_bytes_copied, bytes);
	}
	if (ev)
		atomic_store(&ev->covers, atomic_load(&d->copies_submitted));
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static int copy_submit(struct kvs_drv *d, int kind, uint64_t dst, uint64_t src, size_t n,
		       kvs_event_t *ev)
{
	int rc;

	if (!d || (ev && ev->drv != d))
		return fail(d, EINVAL);
	pthread_mutex_lock(&d->lock);
	rc = copy_check(d, kind, dst, src, n);
	if (rc)
		return fail_unlock(d, rc);
	rc = BE_CALL(d, copy_one(d, kind, dst, src, n));
	return copy_done(d, rc, ev, 1, n);
}

/**
 * kvs_drv_copy_htod() - queue a copy from host memory to device memory.
 * @drv: driver.
 * @dst: device address; [dst, dst + n) mapped with KVS_ACCESS_RW.
 * @src: host memory; must stay valid until the copy completes.
 * @n: bytes, non-zero.
 * @ev: event to record after the copy, or NULL.
 *
 * Copies on one driver run in submission order.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (bad argument, or [src, src + n) wraps
 * around the address space) or EFAULT (device side not accessible, which
 * includes a [dst, dst + n) that wraps).
 */
KVS_EXPORT int kvs_drv_copy_htod(kvs_drv_t *d, kvs_devptr_t dst, const void *src, size_t n,
				 kvs_event_t *ev)
{
	return copy_submit(d, KVS_COPY_HTOD, dst, (uintptr_t)src, n, ev);
}

/**
 * kvs_drv_copy_dtoh() - queue a copy from device memory to host memory.
 * @drv: driver.
 * @dst: host memory; valid and untouched until the copy completes.
 * @src: device address; [src, src + n) mapped with at least KVS_ACCESS_READ.
 * @n: bytes, non-zero.
 * @ev: event to record after the copy, or NULL.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (bad argument, or [dst, dst + n) wraps
 * around the address space) or EFAULT (device side not accessible, which
 * includes a [src, src + n) that wraps).
 */
KVS_EXPORT int kvs_drv_copy_dtoh(kvs_drv_t *d, void *dst, kvs_devptr_t src, size_t n,
				 kvs_event_t *ev)
{
	return copy_submit(d, KVS_COPY_DTOH, (uintptr_t)dst, src, n, ev);
}

/**
 * kvs_drv_copy_dtod() - queue a copy between two device ranges.
 * @drv: driver.
 * @dst: device address; [dst, dst + n) mapped with KVS_ACCESS_RW.
 * @src: device address; [src, src + n) mapped with at least KVS_ACCESS_READ.
 * @n: bytes, non-zero.  The ranges must not overlap.
 * @ev: event to record after the copy, or NULL.
 *
 * Runs on the copy queue, in submission order with the other copies (cuda:
 * cuMemcpyDtoDAsync on the copy stream; host: memcpy by the queue).
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (bad argument) or EFAULT (a side not
 * accessible, or wrapping).
 */
KVS_EXPORT int kvs_drv_copy_dtod(kvs_drv_t *d, kvs_devptr_t dst, kvs_devptr_t src, size_t n,
				 kvs_event_t *ev)
{
	if (d && n && dst < src + n && src < dst + n && dst + n > dst && src + n > src)
		return fail(d, EINVAL);
	return copy_submit(d, KVS_COPY_DTOD, dst, src, n, ev);
}

/**
 * kvs_drv_copy_batch() - queue many copies of one direction as one batch.
 * @drv: driver.
 * @kind: KVS_COPY_HTOD, KVS_COPY_DTOH or KVS_COPY_DTOD.
 * @copies: @n copies, each checked as the single-copy call of @kind checks
 *          it; host sides stay valid (sources unchanged, destinations
 *          untouched) until the batch completes.  No destination may overlap
 *          another entry's destination or any source.
 * @n: entries; 0 submits nothing (@ev is still recorded).
 * @ev: event to record after the batch, or NULL.
 *
 * Every entry is checked before anything is submitted.  The batch runs after
 * every copy submitted before it and before every copy after it; its entries
 * may run in any order and concurrently.  A backend with KVS_DRV_CAP_BATCH
 * submits the batch in one driver call, one with KVS_DRV_CAP_KERNELS may run
 * it as a gather/scatter kernel; otherwise the entries are queued one by one.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (bad @kind, NULL @copies with @n > 0,
 * an entry with 0 bytes, a NULL or wrapping host side), EFAULT (a device
 * side not accessible, or wrapping), ENOMEM, or the backend's errno.  On an
 * argument error nothing is submitted; when the backend fails part way, the
 * copies already queued are waited for, and the destinations' contents are
 * unspecified.
 */
KVS_EXPORT int kvs_drv_copy_batch(kvs_drv_t *d, int kind, const kvs_copy_t *copies, size_t n,
				  kvs_event_t *ev)
{
	uint64_t bytes = 0;
	size_t i, done = 0;
	int rc = 0;

	if (!d || (ev && ev->drv != d) || (!copies && n) ||
	    (kind != KVS_COPY_HTOD && kind != KVS_COPY_DTOH && kind != KVS_COPY_DTOD))
		return fail(d, EINVAL);
	pthread_mutex_lock(&d->lock);
	for (i = 0; i < n; i++) {
		rc = copy_check(d, kind, copies[i].dst, copies[i].src, copies[i].bytes);
		if (rc)
			return fail_unlock(d, rc);
		bytes += copies[i].bytes;
	}
	stat_add(d, KVS_DRV_STAT_batch_calls, 1);
	if (n && d->be->copy_batch) {
		rc = BE_CALL(d, d->be->copy_batch(d, kind, copies, n));
		done = rc == 0 ? n : 0;
	} else {
		for (; done < n && rc == 0; done++)
			rc = BE_CALL(d, copy_one(d, kind, copies[done].dst, copies[done].src,
						 copies[done].bytes));
	}
	if (rc < 0 && done) {
		/* Part of the batch is queued: let it finish before the caller
		 * reuses its buffers. */
		int e = errno;

		atomic_fetch_add(&d->copies_submitted, 1);
		pthread_mutex_unlock(&d->lock);
		d->be->synchronize(d);
		return fail(d, e);
	}
	return copy_done(d, rc, ev, n, bytes);
}

/**
 * kvs_drv_stream_wait() - make the copy queue wait for an engine's event.
 * @drv: driver.
 * @ev: an event of @drv, recorded on an engine stream (kvs_event_record())
 *      or by a copy.
 *
 * Copies submitted to @drv after this call start only once @ev has
 * completed, and the caller does not wait (cuda: cuStreamWaitEvent on the
 * copy stream).  On host, where an event marks a point of the copy queue
 * itself, that order holds already and the call does nothing.  An event
 * never recorded is complete.  A backup ordered this way after the kernels
 * that wrote its pages needs no host synchronization before it.
 *
 * Context: MT-Safe; never blocks.
 * Return: 0, or -1 with errno EINVAL (NULL, or @ev of another driver) or
 * the backend's.
 */
KVS_EXPORT int kvs_drv_stream_wait(kvs_drv_t *d, kvs_event_t *ev)
{
	int rc = 0;

	if (!d || !ev || ev->drv != d)
		return fail(d, EINVAL);
	if (!d->be->stream_wait)
		return 0;
	pthread_mutex_lock(&d->lock);
	rc = BE_CALL(d, d->be->stream_wait(d, ev->bev));
	if (rc < 0)
		return fail_unlock(d, errno);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/**
 * kvs_event_stream_wait() - make an engine's stream wait for an event.
 * @ev: event (of a copy, or recorded on a stream).
 * @stream: the engine's stream (cuda: a CUstream cast to kvs_stream_t, 0
 *          for the legacy default stream).  A stream the driver does not
 *          know is undefined behaviour, as in CUDA.
 *
 * Work submitted to @stream after this call starts only once @ev has
 * completed (cuda: cuStreamWaitEvent); the caller does not wait.  A backend
 * without KVS_DRV_CAP_STREAM_WAIT (host, whose engine "streams" are the
 * calling thread) waits for @ev here instead, so that what the caller does
 * next sees the copies done.
 *
 * Context: MT-Safe.  Blocks only without KVS_DRV_CAP_STREAM_WAIT.
 * Return: 0, or -1 with errno EINVAL (@ev NULL), EIO (a copy before @ev
 * failed, host) or the backend's.
 */
KVS_EXPORT int kvs_event_stream_wait(kvs_event_t *e, kvs_stream_t stream)
{
	struct kvs_drv *d;

	if (!e)
		return fail(NULL, EINVAL);
	d = e->drv;
	if (!d->be->event_stream_wait)
		return d->be->event_wait(d, e->bev) < 0 ? fail(d, errno) : 0;
	if (BE_CALL(d, d->be->event_stream_wait(d, e->bev, stream)) < 0)
		return fail(d, errno);
	return 0;
}

/**
 * kvs_drv_caps() - what the backend does natively.
 * @drv: driver.
 *
 * Context: MT-Safe.
 * Return: KVS_DRV_CAP_* flags; 0 for NULL.
 */
KVS_EXPORT unsigned int kvs_drv_caps(const kvs_drv_t *d)
{
	return d ? d->caps : 0;
}

/**
 * kvs_drv_synchronize() - wait for every queued copy.
 * @drv: driver.
 *
 * Context: MT-Safe; blocks.
 * Return: 0, or -1 with errno (EIO: a copy failed).
 */
KVS_EXPORT int kvs_drv_synchronize(kvs_drv_t *d)
{
	uint64_t seen;

	if (!d)
		return fail(d, EINVAL);
	seen = atomic_load(&d->copies_submitted);
	if (BE_CALL(d, d->be->synchronize(d)) < 0)
		return fail(d, errno);
	drv_quiesced(d, seen);
	return 0;
}

/**
 * kvs_drv_host_alloc() - allocate pinned host memory.
 * @drv: driver.
 * @size: bytes, non-zero.
 * @ptr: receives the memory (page aligned).
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (NULL, size 0) or ENOMEM (no memory,
 * including a size that wraps when rounded up to whole pages); nothing is
 * allocated then.
 */
KVS_EXPORT int kvs_drv_host_alloc(kvs_drv_t *d, size_t size, void **ptr)
{
	struct kvs_host_block *b;
	long pg = sysconf(_SC_PAGESIZE);
	size_t rounded;

	if (!d || !ptr || size == 0)
		return fail(d, EINVAL);
	drv_parked_retry(d);
	/* Backends round to whole pages: a size whose rounding wraps is more
	 * memory than any machine has. */
	if (!kvs_size_roundup(size, pg > 0 ? (size_t)pg : 4096, &rounded))
		return fail(d, ENOMEM);
	b = calloc(1, sizeof(*b));
	if (!b)
		return fail(d, ENOMEM);
	stat_add(d, KVS_DRV_STAT_host_alloc_calls, 1);
	if (BE_CALL(d, d->be->host_alloc(d, size, &b->ptr)) < 0) {
		int e = errno;

		free(b);
		return fail(d, e);
	}
	b->size = size;
	pthread_mutex_lock(&d->lock);
	b->next = d->host_blocks;
	d->host_blocks = b;
	pthread_mutex_unlock(&d->lock);
	stat_add(d, KVS_DRV_STAT_bytes_host, size);
	*ptr = b->ptr;
	return 0;
}

/**
 * kvs_drv_host_free() - free memory from kvs_drv_host_alloc().
 * @drv: driver.
 * @ptr: the pointer returned, or NULL (nothing happens).
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (not a live block of @drv).
 */
KVS_EXPORT int kvs_drv_host_free(kvs_drv_t *d, void *ptr)
{
	struct kvs_host_block **pp, *b;

	if (!d)
		return fail(d, EINVAL);
	if (!ptr)
		return 0;
	pthread_mutex_lock(&d->lock);
	for (pp = &d->host_blocks; *pp && (*pp)->ptr != ptr; pp = &(*pp)->next)
		;
	b = *pp;
	if (!b)
		return fail_unlock(d, EINVAL);
	*pp = b->next;
	pthread_mutex_unlock(&d->lock);
	d->be->host_free(d, b->ptr);
	stat_sub(d, KVS_DRV_STAT_bytes_host, b->size);
	free(b);
	return 0;
}
