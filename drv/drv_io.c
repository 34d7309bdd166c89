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
 * Context: MT-Safe; takes no lock of the driver and never waits for the
 * device.
 * Return: 0, or -1 with errno EINVAL (@ev NULL; cuda: a stream the driver
 * does not know), ENOTSUP (the backend cannot record on streams).
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
	if (!e)
		return fail(NULL, EINVAL);
	return e->drv->be->event_query(e->drv, e->bev);
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
	if (!e)
		return fail(NULL, EINVAL);
	return e->drv->be->event_wait(e->drv, e->bev);
}

static int copy_submit(struct kvs_drv *d, int htod, kvs_devptr_t dev, void *host,
		       size_t n, kvs_event_t *ev)
{
	int rc;

	if (!d || !host || n == 0 || (ev && ev->drv != d))
		return fail(d, EINVAL);
	/* Neither side may wrap around the end of the address space. */
	if ((uintptr_t)host + n < (uintptr_t)host)
		return fail(d, EINVAL);
	if (dev + n < dev)
		return fail(d, EFAULT);
	pthread_mutex_lock(&d->lock);
	if (!accessible(d, dev, n, htod ? KVS_ACCESS_RW : KVS_ACCESS_READ))
		return fail_unlock(d, EFAULT);
	stat_add(d, KVS_DRV_STAT_copy_calls, 1);
	rc = BE_CALL(d, htod ? d->be->copy_htod(d, dev, host, n)
			     : d->be->copy_dtoh(d, host, dev, n));
	if (rc == 0 && ev)
		rc = d->be->event_record(d, ev->bev);
	if (rc < 0) {
		int e = errno;

		pthread_mutex_unlock(&d->lock);
		return fail(d, e);
	}
	atomic_fetch_add(&d->copies_submitted, 1);
	stat_add(d, KVS_DRV_STAT_bytes_copied, n);
	pthread_mutex_unlock(&d->lock);
	return 0;
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
	return copy_submit(d, 1, dst, (void *)src, n, ev);
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
	return copy_submit(d, 0, src, dst, n, ev);
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
	if (!d)
		return fail(d, EINVAL);
	if (BE_CALL(d, d->be->synchronize(d)) < 0)
		return fail(d, errno);
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
