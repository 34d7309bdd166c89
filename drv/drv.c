/* SPDX-License-Identifier: MIT */
/*
 * drv/drv.c - the generic half of the driver shim.  Events, copies,
 * synchronization and pinned host memory are drv/drv_io.c's; the records
 * both files keep are in drv/drv_int.h.
 *
 * This file owns every rule that is the same for all backends: it validates
 * arguments, keeps the books and enforces the memory limit, then hands a call
 * that is known to be legal to the backend.  The rules are those of the CUDA
 * VMM API (CUDA-VMM.md): sizes and offsets are multiples of the granularity,
 * a granule is mapped at most once, an unmap covers whole mappings, access is
 * set on fully mapped ranges, a reservation is freed only when nothing in it
 * is mapped.  Checking them here means the host backend behaves exactly like
 * a GPU and that a cuda caller gets a clear errno instead of a sticky device
 * error.
 *
 * Data structures.  A reservation is a struct kvs_range with one slot per
 * granule: the chunk mapped there (NULL when unmapped), whether the granule
 * starts a mapping, and its access.  Ranges sit in an array sorted by base,
 * found by binary search.  Chunks sit on a doubly linked list; a chunk that
 * was released while mapped stays on it, marked released, until its last
 * unmap, which is when its physical bytes are really given back (the driver's
 * own rule for cuMemRelease).
 *
 * Locking (the library's lock order is in common/common.h).
 * drv->lock (a mutex) protects the books.  map, unmap, set_access, reserve,
 * unreserve and copy submission call the backend with the lock held,
 * so validation and action are one step; chunk creation, the slow call
 * (~190 us on an A100), runs unlocked with its bytes counted as pending so
 * the limit still holds.  Counters are atomics, readable without the lock.
 *
 * The driver lock's rule: drv->lock is never held across a device
 * synchronization (a copy-queue drain, cuStreamSynchronize, cuCtxSynchronize)
 * or any other wait for the device, so one thread's unmap never stalls
 * another thread's map or copy submission behind the GPU.  Copies are
 * validated and enqueued under the lock, each bumping copies_submitted.  An
 * unmap reads that count, calls the backend's quiesce() with no lock held
 * (drain the copy queue; with KVS_DRV_F_SYNC_UNMAP, the whole device), then
 * takes the lock: if the count moved, a copy was submitted meanwhile and may
 * touch the range, so it drops the lock and drains again; otherwise it
 * validates, unmaps and updates the books in one step.  So a queued copy
 * never touches memory unmapped after it was submitted.  A finished drain
 * or kvs_drv_synchronize() records the count it covered (copies_quiesced),
 * and so does a copy's event found complete (kvs_event_wait() and
 * kvs_event_query(); each event keeps the count its record came after);
 * an unmap that finds no copy submitted since skips the drain, so
 * unmapping after the copies are known done costs no device
 * synchronization.  Event waits and kvs_drv_synchronize() take no lock at
 * all.  kvs_drv_close() is MT-Unsafe and takes none either.  Backends' own locks (the host's alock and qlock)
 * come after drv->lock, never before.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "drv_int.h"

/**
 * kvs_drv_attr_init() - fill @attr with the defaults.
 * @attr: attributes to initialise.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL when @attr is NULL.
 */
KVS_EXPORT int kvs_drv_attr_init(kvs_drv_attr_t *attr)
{
	if (!attr)
		return fail(NULL, EINVAL);
	memset(attr, 0, sizeof(*attr));
	return 0;
}

struct kvs_drv *kvsi_drv_new(const struct kvs_drv_backend *be, const kvs_drv_attr_t *attr)
{
	struct kvs_drv *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->be = be;
	if (attr) {
		d->mem_limit = attr->mem_limit;
		d->flags = attr->flags;
	}
	pthread_mutex_init(&d->lock, NULL);
	return d;
}

static const char *default_name(void)
{
	const char *env = getenv("KVSLAB_DRIVER");

	return env && *env ? env : "auto";
}

/* The detail of this thread's last failed kvs_drv_open(): there is no
 * driver left to hold it, so it lives here, one per thread. */
static _Thread_local char open_error[192];

__attribute__((format(printf, 2, 3)))
static void *open_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(open_error, sizeof(open_error), fmt, ap);
	va_end(ap);
	errno = err;
	return NULL;
}

/**
 * kvs_drv_open() - open a driver by name.
 * @name: "host", "cuda", "auto" or NULL (auto: cuda when a device is usable,
 *        else host; the environment variable KVSLAB_DRIVER names the default).
 * @attr: attributes, or NULL for the defaults.
 *
 * On failure the cause in words is kept for kvs_drv_open_error().
 *
 * Context: any thread; may load libcuda.
 * Return: a driver, or NULL with errno set (ENOENT unknown name, ENODEV no
 * usable device, EINVAL bad attributes, ENOMEM).
 */
KVS_EXPORT kvs_drv_t *kvs_drv_open(const char *name, const kvs_drv_attr_t *attr)
{
	const struct kvs_drv_backend *be = NULL;
	kvs_drv_attr_t defaults;
	struct kvs_drv *d;
	size_t i;

	if (!attr) {
		kvs_drv_attr_init(&defaults);
		attr = &defaults;
	}
	if (!name)
		name = default_name();
	if (strcmp(name, "auto") == 0) {
		/* The first built backend whose probe finds a device. */
		for (i = 0; i < kvsi_nbackends && !be; i++) {
			const struct kvs_drv_backend *b = kvsi_backends[i].be;

			if (b && (!b->probe || b->probe()))
				be = b;
		}
		if (!be)
			return open_fail(ENODEV, "auto: no built backend finds a usable device");
		name = be->name;
	} else {
		for (i = 0; i < kvsi_nbackends; i++)
			if (strcmp(name, kvsi_backends[i].name) == 0)
				break;
		if (i == kvsi_nbackends)
			return open_fail(ENOENT, "no driver named \"%.64s\" (cuda, host or auto)",
					 name);
		be = kvsi_backends[i].be;
		if (!be)	/* known, but not built into this library */
			return open_fail(ENODEV, "%s: backend not built into this library "
					 "(configured without it)", name);
	}

	d = kvsi_drv_new(be, attr);
	if (!d)
		return open_fail(ENOMEM, "%s: no memory for the driver", name);
	if (be->open(d, attr) < 0) {
		int e = errno;

		/* The backend's detail dies with @d: keep it first, named by
		 * the backend unless it names itself. */
		if (d->errdetail[0] && !strncmp(d->errdetail, name, strlen(name)) &&
		    d->errdetail[strlen(name)] == ':')
			open_fail(e, "%s", d->errdetail);
		else if (d->errdetail[0])
			open_fail(e, "%s: %s", name, d->errdetail);
		else
			open_fail(e, "%s: %s", name, strerror(e));
		pthread_mutex_destroy(&d->lock);
		free(d);
		errno = e;
		return NULL;
	}
	return d;
}

/**
 * kvs_drv_open_error() - why this thread's last kvs_drv_open() failed.
 *
 * Context: any thread; reads only the calling thread's copy.
 * Return: the detail of the last failed kvs_drv_open() on the calling
 * thread ("cuda: cuInit: CUDA_ERROR_NO_DEVICE"), or "" if none failed.
 * A later successful open leaves it as it is.
 */
KVS_EXPORT const char *kvs_drv_open_error(void)
{
	return open_error;
}

/* Find the range holding [addr, addr + size); call with drv->lock held. */
struct kvs_range *drv_range_find(struct kvs_drv *d, kvs_devptr_t addr, size_t size)
{
	size_t lo = 0, hi = d->nranges;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		struct kvs_range *r = d->ranges[mid];

		if (addr < r->base) {
			hi = mid;
		} else if (addr >= r->base + r->size) {
			lo = mid + 1;
		} else {
			if (size > r->size - (addr - r->base))
				return NULL;
			return r;
		}
	}
	return NULL;
}

/* drv_range_find(), and the granules [*g, *g + *n) the span covers in it. */
static struct kvs_range *range_span(struct kvs_drv *d, kvs_devptr_t addr, size_t size, size_t *g,
				    size_t *n)
{
	struct kvs_range *r = drv_range_find(d, addr, size);

	if (r) {
		*g = (addr - r->base) / d->granularity;
		*n = size / d->granularity;
	}
	return r;
}

static size_t range_index(struct kvs_drv *d, kvs_devptr_t base)
{
	size_t lo = 0, hi = d->nranges;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->ranges[mid]->base < base)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void range_free(struct kvs_range *r)
{
	if (!r)
		return;
	KVS_FREE_ALL(r->chunk, r->start, r->access, r);
}

bool drv_aligned(struct kvs_drv *d, uint64_t v)
{
	return v % d->granularity == 0;
}

/* ------------------------------------------------------------ parking */

/*
 * What a library object could not give back while undoing its own failed
 * creation (kvs_pool_create(), kvs_reqtab_create()): a mapping, a chunk, a
 * reservation, a pinned host block, in the order they are given back.  No
 * handle of the caller's names them any more, so the driver keeps them and
 * tries again at its next allocation (kvs_drv_reserve(), _chunk_create(),
 * _host_alloc()) and, at the latest, at kvs_drv_close(), which gives back
 * everything anyway: the memory is not lost for the process's life.
 */
struct kvs_parked {
	kvs_devptr_t base;		/* the reservation's base */
	size_t mapped;			/* bytes still mapped at base, or 0 */
	bool reserved;
	kvs_chunk_t *chunk;
	void *host;
	struct kvs_parked *next;
};

/* Give back what @p holds, in order; true when nothing is left. */
static bool parked_retry_one(kvs_drv_t *d, struct kvs_parked *p)
{
	if (p->mapped && kvs_drv_unmap(d, p->base, p->mapped) == 0)
		p->mapped = 0;
	if (!p->mapped && p->chunk && kvs_drv_chunk_release(d, p->chunk) == 0)
		p->chunk = NULL;
	if (!p->mapped && p->reserved && kvs_drv_unreserve(d, p->base) == 0)
		p->reserved = false;
	if (p->host && kvs_drv_host_free(d, p->host) == 0)
		p->host = NULL;
	return !p->mapped && !p->chunk && !p->reserved && !p->host;
}

static void parked_push(kvs_drv_t *d, struct kvs_parked *p)
{
	pthread_mutex_lock(&d->lock);
	p->next = d->parked;
	d->parked = p;
	atomic_store_explicit(&d->has_parked, true, memory_order_relaxed);
	pthread_mutex_unlock(&d->lock);
}

/* Try again to give back what was parked; the errno of the caller's call is
 * kept.  Takes the list whole, so two threads never retry one record. */
void drv_parked_retry(kvs_drv_t *d)
{
	struct kvs_parked *list, *p;
	int e = errno;

	if (!atomic_load_explicit(&d->has_parked, memory_order_relaxed))
		return;
	pthread_mutex_lock(&d->lock);
	list = d->parked;
	d->parked = NULL;
	atomic_store_explicit(&d->has_parked, false, memory_order_relaxed);
	pthread_mutex_unlock(&d->lock);
	while ((p = list)) {
		list = p->next;
		if (parked_retry_one(d, p))
			free(p);
		else
			parked_push(d, p);
	}
	errno = e;
}

/**
 * kvsi_drv_park() - hand the driver what an undo could not give back.
 * @d: driver.
 * @base: a reservation's base (with @reserved or @mapped).
 * @mapped: bytes still mapped at @base, or 0.
 * @reserved: the reservation at @base is still there.
 * @chunk: a chunk not released, or NULL.
 * @host: a pinned host block not freed, or NULL.
 *
 * The driver tries again at once, then at its next allocations, and gives
 * back the rest at kvs_drv_close().
 *
 * Context: MT-Safe; takes the driver lock.
 * Return: 0 when everything could be given back now, 1 when some is parked.
 */
int kvsi_drv_park(struct kvs_drv *d, uint64_t base, size_t mapped, bool reserved,
		  struct kvs_chunk *chunk, void *host)
{
	struct kvs_parked tmp = { base, mapped, reserved, chunk, host, NULL }, *p;
	int e = errno;

	if (parked_retry_one(d, &tmp)) {
		errno = e;
		return 0;
	}
	p = malloc(sizeof(*p));
	if (p) {	/* else kvs_drv_close() still gives it back */
		*p = tmp;
		parked_push(d, p);
	}
	errno = e;
	return 1;
}

/**
 * kvs_drv_reserve() - reserve a virtual address range.
 * @drv: driver.
 * @size: bytes, a non-zero multiple of the granularity.
 * @base: receives the range's base, aligned to the granularity.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (size), ENOMEM (no address space; also
 * any size above SIZE_MAX minus the granularity).
 */
KVS_EXPORT int kvs_drv_reserve(kvs_drv_t *d, size_t size, kvs_devptr_t *base)
{
	struct kvs_range *r;
	size_t idx;

	if (!d || !base || size == 0 || !drv_aligned(d, size))
		return fail(d, EINVAL);
	drv_parked_retry(d);
	/* Backends may over-reserve by a granule to align the base; a size
	 * that close to SIZE_MAX fits in no address space anyway. */
	if (size > SIZE_MAX - d->granularity)
		return fail(d, ENOMEM);
	r = calloc(1, sizeof(*r));
	if (!r)
		return fail(d, ENOMEM);
	r->size = size;
	r->ngran = size / d->granularity;

	pthread_mutex_lock(&d->lock);
	if (d->nranges == d->cap_ranges) {
		size_t cap = d->cap_ranges ? 2 * d->cap_ranges : 8;
		struct kvs_range **nr = realloc(d->ranges, cap * sizeof(*nr));

		if (!nr)
			goto err_unlock;
		d->ranges = nr;
		d->cap_ranges = cap;
	}
	stat_add(d, KVS_DRV_STAT_reserve_calls, 1);
	if (BE_CALL(d, d->be->reserve(d, size, &r->base)) < 0) {
		int e = errno;

		pthread_mutex_unlock(&d->lock);
		range_free(r);
		return fail(d, e);
	}
	/* The books after the address space: a size no address space holds is
	 * refused there, before we try to allocate books for it. */
	r->chunk = calloc(r->ngran, sizeof(*r->chunk));
	r->start = calloc(r->ngran, 1);
	r->access = calloc(r->ngran, 1);
	if (!r->chunk || !r->start || !r->access) {
		(void)d->be->unreserve(d, r->base, r->size);
		goto err_unlock;
	}
	idx = range_index(d, r->base);
	memmove(&d->ranges[idx + 1], &d->ranges[idx],
		(d->nranges - idx) * sizeof(*d->ranges));
	d->ranges[idx] = r;
	d->nranges++;
	stat_add(d, KVS_DRV_STAT_bytes_reserved, size);
	pthread_mutex_unlock(&d->lock);
	*base = r->base;
	return 0;

err_unlock:
	pthread_mutex_unlock(&d->lock);
	range_free(r);
	return fail(d, ENOMEM);
}

/**
 * kvs_drv_unreserve() - free a range made by kvs_drv_reserve().
 * @drv: driver.
 * @base: the base kvs_drv_reserve() returned.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (not a range's base) or EBUSY (something
 * is still mapped in it; unmap it first).
 */
KVS_EXPORT int kvs_drv_unreserve(kvs_drv_t *d, kvs_devptr_t base)
{
	struct kvs_range *r;
	size_t idx;

	if (!d)
		return fail(d, EINVAL);
	pthread_mutex_lock(&d->lock);
	r = drv_range_find(d, base, 1);
	if (!r || r->base != base)
		return fail_unlock(d, EINVAL);
	if (r->nmapped)
		return fail_unlock(d, EBUSY);
	stat_add(d, KVS_DRV_STAT_unreserve_calls, 1);
	if (BE_CALL(d, d->be->unreserve(d, r->base, r->size)) < 0) {
		int e = errno;

		pthread_mutex_unlock(&d->lock);
		return fail(d, e);
	}
	idx = range_index(d, base);
	memmove(&d->ranges[idx], &d->ranges[idx + 1],
		(d->nranges - idx - 1) * sizeof(*d->ranges));
	d->nranges--;
	stat_sub(d, KVS_DRV_STAT_bytes_reserved, r->size);
	pthread_mutex_unlock(&d->lock);
	range_free(r);
	return 0;
}

static bool over_limit(struct kvs_drv *d, enum kvs_drv_stat s, size_t extra)
{
	uint64_t now = atomic_load_explicit(&d->stats[s], memory_order_relaxed);
	size_t sum;

	/* A sum that does not fit is over any limit. */
	return d->mem_limit && (!kvs_size_add((size_t)now, extra, &sum) || sum > d->mem_limit);
}

/*
 * The set of live chunk structs, so that a stale or foreign pointer is
 * answered with EINVAL without being dereferenced.  Open addressing with
 * linear probing and backward-shift deletion; lock held.
 */
static size_t cset_slot(const struct kvs_drv *d, const void *p)
{
	uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL;

	return (size_t)(h >> 20) & (d->cset_cap - 1);
}

static bool cset_has(const struct kvs_drv *d, const void *p)
{
	size_t i;

	if (!d->cset_cap || !p)
		return false;
	for (i = cset_slot(d, p); d->cset[i]; i = (i + 1) & (d->cset_cap - 1))
		if (d->cset[i] == p)
			return true;
	return false;
}

static void cset_put(struct kvs_drv *d, void *p)
{
	size_t i;

	for (i = cset_slot(d, p); d->cset[i]; i = (i + 1) & (d->cset_cap - 1))
		;
	d->cset[i] = p;
	d->cset_n++;
}

/* Make room for one more beside the members and pending creates; lock held. */
static int cset_reserve(struct kvs_drv *d)
{
	void **old = d->cset;
	size_t i, oldcap = d->cset_cap, cap = oldcap ? oldcap : 64;

	size_t want = d->cset_n + d->pending_chunks + 1;

	if (want * 2 <= oldcap)
		return 0;
	while (want * 2 > cap)
		cap *= 2;
	d->cset = calloc(cap, sizeof(*d->cset));
	if (!d->cset) {
		d->cset = old;
		return -1;
	}
	d->cset_cap = cap;
	d->cset_n = 0;
	for (i = 0; i < oldcap; i++)
		if (old[i])
			cset_put(d, old[i]);
	free(old);
	return 0;
}

static void cset_del(struct kvs_drv *d, void *p)
{
	size_t mask = d->cset_cap - 1, i = cset_slot(d, p), j;

	while (d->cset[i] != p)
		i = (i + 1) & mask;
	d->cset[i] = NULL;
	d->cset_n--;
	/* Shift later members of the probe run back over the hole. */
	for (j = (i + 1) & mask; d->cset[j]; j = (j + 1) & mask) {
		size_t home = cset_slot(d, d->cset[j]);

		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			d->cset[i] = d->cset[j];
			d->cset[j] = NULL;
			i = j;
		}
	}
}

static bool chunk_valid(struct kvs_drv *d, struct kvs_chunk *c)
{
	return cset_has(d, c) && c->magic == CHUNK_MAGIC && !c->released;
}

/**
 * kvs_drv_chunk_create() - create a physical chunk.
 * @drv: driver.
 * @size: bytes, a non-zero multiple of the granularity.
 * @chunk: receives the chunk.
 *
 * The memory is committed here (the expensive call); it is not mapped.
 *
 * Context: MT-Safe; runs without the driver lock held during the backend call.
 * Return: 0, or -1 with errno EINVAL or ENOMEM (limit, device memory, or a
 * size that does not fit in the driver's books).
 */
KVS_EXPORT int kvs_drv_chunk_create(kvs_drv_t *d, size_t size, kvs_chunk_t **chunk)
{
	struct kvs_chunk *c;
	size_t pending;
	int rc;

	if (!d || !chunk || size == 0 || !drv_aligned(d, size))
		return fail(d, EINVAL);
	drv_parked_retry(d);
	c = calloc(1, sizeof(*c));
	if (!c)
		return fail(d, ENOMEM);

	pthread_mutex_lock(&d->lock);
	if (!kvs_size_add(d->pending_create, size, &pending) ||
	    over_limit(d, KVS_DRV_STAT_bytes_created, pending)) {
		pthread_mutex_unlock(&d->lock);
		free(c);
		return fail(d, ENOMEM);
	}
	/* Room in the set now, so that booking the chunk later cannot fail. */
	if (cset_reserve(d) < 0) {
		pthread_mutex_unlock(&d->lock);
		free(c);
		return fail(d, ENOMEM);
	}
	d->pending_chunks++;
	d->pending_create = pending;
	pthread_mutex_unlock(&d->lock);

	stat_add(d, KVS_DRV_STAT_create_calls, 1);
	rc = BE_CALL(d, d->be->create(d, size, &c->handle));

	pthread_mutex_lock(&d->lock);
	d->pending_create -= size;
	d->pending_chunks--;
	if (rc < 0) {
		int e = errno;

		pthread_mutex_unlock(&d->lock);
		free(c);
		return fail(d, e);
	}
	cset_put(d, c); /* room was reserved, counting pending creates */
	c->magic = CHUNK_MAGIC;
	c->size = size;
	c->drv = d;
	DLIST_PUSH(d->chunks, c);
	stat_add(d, KVS_DRV_STAT_bytes_created, size);
	stat_add(d, KVS_DRV_STAT_chunks, 1);
	stat_peak(d, KVS_DRV_STAT_bytes_created, KVS_DRV_STAT_bytes_created_peak);
	pthread_mutex_unlock(&d->lock);
	*chunk = c;
	return 0;
}

/* Forget a chunk whose handle is released and which has no mapping left. */
static void chunk_drop(struct kvs_drv *d, struct kvs_chunk *c)
{
	if (d->be->chunk_free)
		d->be->chunk_free(d, c->handle);
	DLIST_DEL(d->chunks, c);
	stat_sub(d, KVS_DRV_STAT_bytes_created, c->size);
	stat_sub(d, KVS_DRV_STAT_chunks, 1);
	cset_del(d, c);
	c->magic = 0;
	free(c);
}


/**
 * kvs_drv_chunk_release() - release a chunk.
 * @drv: driver.
 * @chunk: a chunk of @drv that was not released yet.
 *
 * Legal while the chunk is mapped: its memory is given back at its last
 * unmap, and @chunk must not be used again either way.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (not a live chunk of @drv).
 */
KVS_EXPORT int kvs_drv_chunk_release(kvs_drv_t *d, kvs_chunk_t *c)
{
	if (!d)
		return fail(d, EINVAL);
	pthread_mutex_lock(&d->lock);
	if (!chunk_valid(d, c))
		return fail_unlock(d, EINVAL);
	stat_add(d, KVS_DRV_STAT_release_calls, 1);
	if (BE_CALL(d, d->be->release(d, c->handle)) < 0) {
		int e = errno;

		pthread_mutex_unlock(&d->lock);
		return fail(d, e);
	}
	c->released = true;
	if (c->nmaps == 0)
		chunk_drop(d, c);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/**
 * kvs_drv_chunk_size() - the size of a chunk.
 * @chunk: a live chunk.
 *
 * Context: MT-Safe.
 * Return: its size in bytes, or 0 for NULL.
 */
KVS_EXPORT size_t kvs_drv_chunk_size(const kvs_chunk_t *c)
{
	return c ? c->size : 0;
}

/**
 * kvs_drv_map() - map a whole chunk at @addr.
 * @drv: driver.
 * @addr: a granularity-aligned address inside a reservation; the chunk's
 *        size must fit in the same reservation.
 * @chunk: a live chunk.
 *
 * A new mapping has no access: call kvs_drv_set_access() before use.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (misaligned, outside a reservation, not
 * a live chunk), EBUSY (a granule is already mapped), ENOMEM (limit).
 */
KVS_EXPORT int kvs_drv_map(kvs_drv_t *d, kvs_devptr_t addr, kvs_chunk_t *c)
{
	struct kvs_range *r;
	size_t g, n, i;

	if (!d || !drv_aligned(d, addr))
		return fail(d, EINVAL);
	pthread_mutex_lock(&d->lock);
	if (!chunk_valid(d, c) || !(r = drv_range_find(d, addr, c->size)))
		return fail_unlock(d, EINVAL);
	g = (addr - r->base) / d->granularity;
	n = c->size / d->granularity;
	for (i = 0; i < n; i++) {
		if (r->chunk[g + i])
			return fail_unlock(d, EBUSY);
	}
	if (over_limit(d, KVS_DRV_STAT_bytes_mapped, c->size))
		return fail_unlock(d, ENOMEM);
	stat_add(d, KVS_DRV_STAT_map_calls, 1);
	if (BE_CALL(d, d->be->map(d, addr, c->size, c->handle)) < 0) {
		int e = errno;

		pthread_mutex_unlock(&d->lock);
		return fail(d, e);
	}
	for (i = 0; i < n; i++) {
		r->chunk[g + i] = c;
		r->start[g + i] = i == 0;
		r->access[g + i] = KVS_ACCESS_NONE;
	}
	r->nmapped += n;
	c->nmaps++;
	stat_add(d, KVS_DRV_STAT_bytes_mapped, c->size);
	stat_peak(d, KVS_DRV_STAT_bytes_mapped, KVS_DRV_STAT_bytes_mapped_peak);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/* Does [g, g + n) of @r consist of whole mappings?  Call with the lock held. */
static bool whole_mappings(struct kvs_range *r, size_t g, size_t n)
{
	size_t i;

	if (!r->start[g])
		return false;
	for (i = 0; i < n; i++)
		if (!r->chunk[g + i])
			return false;
	return g + n == r->ngran || !r->chunk[g + n] || r->start[g + n];
}

/* Clear the books of [g, g + n) after the backend unmapped it. */
static void forget_mappings(struct kvs_drv *d, struct kvs_range *r, size_t g, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		struct kvs_chunk *c = r->chunk[g + i];

		if (r->start[g + i]) {
			stat_sub(d, KVS_DRV_STAT_bytes_mapped, c->size);
			if (--c->nmaps == 0 && c->released)
				chunk_drop(d, c);
		}
		r->chunk[g + i] = NULL;
		r->start[g + i] = 0;
		r->access[g + i] = KVS_ACCESS_NONE;
	}
	r->nmapped -= n;
}

/**
 * kvs_drv_unmap() - unmap whole mappings.
 * @drv: driver.
 * @addr: start of a mapping.
 * @size: bytes; [addr, addr + size) must be one or more adjacent whole
 *        mappings with no hole.
 *
 * Queued copies are drained first.  The range returns to the reservation and
 * a later mapping starts with no access.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (misaligned, holes, part of a mapping).
 */
KVS_EXPORT int kvs_drv_unmap(kvs_drv_t *d, kvs_devptr_t addr, size_t size)
{
	struct kvs_range *r;
	uint64_t seen;
	size_t g, n;

	if (!d || size == 0 || !drv_aligned(d, addr) || !drv_aligned(d, size))
		return fail(d, EINVAL);
again:
	/* Drain and synchronize unlocked; a copy submitted meanwhile moves the
	 * count, and then we drain again rather than unmap under it.  With no
	 * copy submitted since the last drain finished there is nothing to
	 * wait for (the device synchronization of KVS_DRV_F_SYNC_UNMAP is for
	 * the engine's work, which we cannot count, and always runs). */
	seen = atomic_load(&d->copies_submitted);
	if (d->be->quiesce && ((d->flags & KVS_DRV_F_SYNC_UNMAP) ||
			       seen != atomic_load(&d->copies_quiesced))) {
		if (BE_CALL(d, d->be->quiesce(d)) < 0)
			return fail(d, errno);
		drv_quiesced(d, seen);
	}
	pthread_mutex_lock(&d->lock);
	if (atomic_load(&d->copies_submitted) != seen) {
		pthread_mutex_unlock(&d->lock);
		goto again;
	}
	r = range_span(d, addr, size, &g, &n);
	if (!r)
		return fail_unlock(d, EINVAL);
	if (!whole_mappings(r, g, n))
		return fail_unlock(d, EINVAL);
	stat_add(d, KVS_DRV_STAT_unmap_calls, 1);
	if (BE_CALL(d, d->be->unmap(d, addr, size)) < 0) {
		int e = errno;

		pthread_mutex_unlock(&d->lock);
		return fail(d, e);
	}
	forget_mappings(d, r, g, n);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/**
 * kvs_drv_set_access() - set access on a fully mapped range.
 * @drv: driver.
 * @addr: granularity-aligned start.
 * @size: bytes; every granule of [addr, addr + size) must be mapped.  One
 *        call may span many mappings: set access once per run, it is the
 *        costly call on a GPU.
 * @access: KVS_ACCESS_NONE, KVS_ACCESS_READ or KVS_ACCESS_RW.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_drv_set_access(kvs_drv_t *d, kvs_devptr_t addr, size_t size, int access)
{
	struct kvs_range *r;
	size_t g, n, i;

	if (!d || size == 0 || !drv_aligned(d, addr) || !drv_aligned(d, size) ||
	    (access != KVS_ACCESS_NONE && access != KVS_ACCESS_READ &&
	     access != KVS_ACCESS_RW))
		return fail(d, EINVAL);
	pthread_mutex_lock(&d->lock);
	r = range_span(d, addr, size, &g, &n);
	if (!r)
		return fail_unlock(d, EINVAL);
	for (i = 0; i < n; i++) {
		if (!r->chunk[g + i])
			return fail_unlock(d, EINVAL);
	}
	stat_add(d, KVS_DRV_STAT_set_access_calls, 1);
	if (BE_CALL(d, d->be->set_access(d, addr, size, access)) < 0) {
		int e = errno;

		pthread_mutex_unlock(&d->lock);
		return fail(d, e);
	}
	memset(&r->access[g], access, n);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/**
 * kvs_drv_close() - close a driver and release everything it holds.
 * @drv: driver, or NULL.
 *
 * Live mappings are unmapped, chunks released, reservations freed, events
 * and pinned host blocks freed, in that order; afterwards nothing of @drv is
 * reserved or mapped, and @drv and every handle it gave out are invalid.
 * A fault wrapper closes the driver it wraps.
 *
 * Context: MT-Unsafe: no other call on @drv may run concurrently.
 * Return: 0; -1 with errno EIO if the backend failed to give something back
 * (everything is still freed on the library's side).
 */
KVS_EXPORT int kvs_drv_close(kvs_drv_t *d)
{
	int err = 0;
	size_t i, g;

	if (!d)
		return 0;
	if (d->be->begin_close)
		d->be->begin_close(d);
	/* No lock is held here (close is MT-Unsafe): wait for the device once,
	 * then unmap everything. */
	if ((d->be->quiesce ? d->be->quiesce(d) : d->be->synchronize(d)) < 0)
		err = EIO;
	for (i = 0; i < d->nranges; i++) {
		struct kvs_range *r = d->ranges[i];

		for (g = 0; g < r->ngran; g++) {
			size_t n;

			if (!r->chunk[g])
				continue;
			n = r->chunk[g]->size / d->granularity;
			if (d->be->unmap(d, r->base + g * d->granularity,
					 n * d->granularity) < 0)
				err = EIO;
			forget_mappings(d, r, g, n);
			g += n - 1;
		}
		if (d->be->unreserve(d, r->base, r->size) < 0)
			err = EIO;
		stat_sub(d, KVS_DRV_STAT_bytes_reserved, r->size);
		range_free(r);
	}
	free(d->ranges);
	while (d->chunks) {
		if (d->be->release(d, d->chunks->handle) < 0)
			err = EIO;
		chunk_drop(d, d->chunks);
	}
	while (d->events) {
		struct kvs_event *e = d->events;

		drv_event_unlink(d, e);
		d->be->event_destroy(d, e->bev);
		free(e);
	}
	while (d->host_blocks) {
		struct kvs_host_block *b = d->host_blocks;

		d->host_blocks = b->next;
		d->be->host_free(d, b->ptr);
		free(b);
	}
	while (d->parked) {	/* given back with everything above */
		struct kvs_parked *p = d->parked;

		d->parked = p->next;
		free(p);
	}
	d->be->close(d);
	free(d->cset);
	pthread_mutex_destroy(&d->lock);
	free(d);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/**
 * kvs_drv_name() - the backend's name ("host", "cuda", "fault").
 * @drv: driver.
 *
 * Context: MT-Safe.
 * Return: a static string; "" for NULL.
 */
KVS_EXPORT const char *kvs_drv_name(const kvs_drv_t *d)
{
	return d ? d->be->name : "";
}

/**
 * kvs_drv_granularity() - the mapping granularity in bytes.
 * @drv: driver.
 *
 * Context: MT-Safe.
 * Return: the granularity; 0 for NULL.
 */
KVS_EXPORT size_t kvs_drv_granularity(const kvs_drv_t *d)
{
	return d ? d->granularity : 0;
}

/**
 * kvs_drv_mem_info() - free and total memory, within the driver's limit.
 * @drv: driver.
 * @free_bytes: receives free bytes (may be NULL).
 * @total_bytes: receives total bytes (may be NULL).
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno.
 */
KVS_EXPORT int kvs_drv_mem_info(kvs_drv_t *d, size_t *free_bytes, size_t *total_bytes)
{
	size_t f, t;

	if (!d)
		return fail(d, EINVAL);
	if (BE_CALL(d, d->be->mem_info(d, &f, &t)) < 0)
		return fail(d, errno);
	if (d->mem_limit) {
		uint64_t used = kvsi_drv_stat(d, KVS_DRV_STAT_bytes_created);
		size_t room = used >= d->mem_limit ? 0 : d->mem_limit - used;

		if (t > d->mem_limit)
			t = d->mem_limit;
		if (f > room)
			f = room;
	}
	if (free_bytes)
		*free_bytes = f;
	if (total_bytes)
		*total_bytes = t;
	return 0;
}

/**
 * kvs_drv_strerror() - detail of the last backend failure.
 * @drv: driver.
 *
 * Context: MT-Unsafe race:detail (another thread's failure may overwrite it).
 * Return: a string owned by @drv, "" when there is none.
 */
KVS_EXPORT const char *kvs_drv_strerror(const kvs_drv_t *d)
{
	return d ? d->errdetail : "";
}
