/* SPDX-License-Identifier: MIT */
/*
 * drv/host.c - the host backend: GPU virtual-memory semantics on CPU memory.
 *
 * A reservation is an mmap(PROT_NONE, MAP_NORESERVE) of address space, over-
 * allocated and trimmed so that its base is aligned to the granularity.  A
 * physical chunk is a memfd whose pages are allocated at creation with
 * fallocate(), so that creation commits memory as cuMemCreate does and fails
 * with ENOMEM when there is none.  Mapping puts the memfd at a fixed address
 * with MAP_SHARED and PROT_NONE (a new mapping has no access); granting access
 * is mprotect() followed by MADV_POPULATE_* so the pages really are resident
 * (and show in RSS) once access is set, as device memory is.  Unmapping puts
 * an anonymous PROT_NONE mapping back, which both returns the range to the
 * reservation and drops the pages from the process; releasing closes the fd,
 * and the kernel frees the pages when the last mapping of them goes, which is
 * the deferred-release rule of cuMemRelease for free.  KVS_DRV_F_LAZY
 * skips both the fallocate() and the populate, so a simulation can account
 * for far more "device" memory than the machine has as long as it never
 * touches it.
 *
 * Copies run on one worker thread, started on the first large copy, in
 * submission order (a small copy with nothing queued is done at once): a FIFO of requests numbered by a sequence.  An event records the
 * sequence number of the last copy submitted before it and is complete when
 * the worker has finished that many.  Unmap drains the queue first, because a
 * queued copy may still read or write the range.
 *
 * Locking: hb->qlock protects the queue and sequence numbers; the worker
 * signals hb->qdone after each copy.  Everything else is called by drv/drv.c
 * with drv->lock held, or touches nothing shared.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "backend.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define HOST_DEFAULT_GRANULARITY (2u << 20)

struct copy_req {
	void *dst;
	const void *src;
	size_t n;
	struct copy_req *next;
};

struct host_be {
	size_t total;
	bool populate, lazy;

	pthread_mutex_t qlock;
	pthread_cond_t qwork, qdone;
	struct copy_req *head, *tail;
	uint64_t submitted, completed;
	bool worker_started, stop;
	pthread_t worker;
};

struct host_event {
	uint64_t seq;
};

static struct host_be *hb_of(struct kvs_drv *d)
{
	return d->priv;
}

/* Each chunk is a memfd: allow as many descriptors as the hard limit does,
 * since a large pool maps tens of thousands of chunks. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int host_open(struct kvs_drv *d, const kvs_drv_attr_t *attr)
{
	long pg = sysconf(_SC_PAGESIZE);
	struct host_be *hb;
	size_t gran = attr && attr->granularity ? attr->granularity : HOST_DEFAULT_GRANULARITY;

	if (pg <= 0 || gran % (size_t)pg) {
		kvsi_drv_set_detail(d, "host: granularity %zu is not a multiple of the page size",
				   gran);
		errno = EINVAL;
		return -1;
	}
	hb = calloc(1, sizeof(*hb));
	if (!hb) {
		errno = ENOMEM;
		return -1;
	}
	if (attr && attr->total_mem) {
		hb->total = attr->total_mem;
	} else {
		long pages = sysconf(_SC_PHYS_PAGES);

		hb->total = pages > 0 ? (size_t)pages * (size_t)pg : 0;
	}
	hb->lazy = attr && (attr->flags & KVS_DRV_F_LAZY);
	hb->populate = !hb->lazy && !(attr && (attr->flags & KVS_DRV_F_NO_POPULATE));
	raise_fd_limit();
	pthread_mutex_init(&hb->qlock, NULL);
	pthread_cond_init(&hb->qwork, NULL);
	pthread_cond_init(&hb->qdone, NULL);
	d->priv = hb;
	d->granularity = gran;
	return 0;
}

static void host_close(struct kvs_drv *d)
{
	struct host_be *hb = hb_of(d);

	if (hb->worker_started) {
		pthread_mutex_lock(&hb->qlock);
		hb->stop = true;
		pthread_cond_signal(&hb->qwork);
		pthread_mutex_unlock(&hb->qlock);
		pthread_join(hb->worker, NULL);
	}
	pthread_cond_destroy(&hb->qwork);
	pthread_cond_destroy(&hb->qdone);
	pthread_mutex_destroy(&hb->qlock);
	free(hb);
}

static int host_mem_info(struct kvs_drv *d, size_t *free_bytes, size_t *total_bytes)
{
	struct host_be *hb = hb_of(d);
	uint64_t used = kvsi_drv_stat(d, KVS_DRV_STAT_bytes_created);
	struct sysinfo si;
	size_t f = hb->total > used ? hb->total - used : 0;

	if (sysinfo(&si) == 0) {
		size_t avail = (size_t)si.freeram * si.mem_unit;

		if (avail < f)
			f = avail;
	}
	*free_bytes = f;
	*total_bytes = hb->total;
	return 0;
}

static int host_reserve(struct kvs_drv *d, size_t size, kvs_devptr_t *base)
{
	size_t gran = d->granularity, over;
	uintptr_t p, a;
	void *m;

	if (!kvs_size_add(size, gran, &over)) {
		kvsi_drv_set_detail(d, "host: reserve of %zu bytes: too large", size);
		errno = ENOMEM;
		return -1;
	}

	m = mmap(NULL, over, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		kvsi_drv_set_detail(d, "host: mmap reserve of %zu bytes: %s", size, strerror(errno));
		errno = ENOMEM;
		return -1;
	}
	p = (uintptr_t)m;
	a = (p + gran - 1) / gran * gran;
	if (a > p)
		munmap(m, a - p);
	if (a + size < p + over)
		munmap((void *)(a + size), p + over - (a + size));
	*base = a;
	return 0;
}

static int host_unreserve(struct kvs_drv *d, kvs_devptr_t base, size_t size)
{
	if (munmap((void *)(uintptr_t)base, size) < 0) {
		kvsi_drv_set_detail(d, "host: munmap: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int host_create(struct kvs_drv *d, size_t size, uint64_t *handle)
{
	int fd, err;

	if (size > (size_t)INT64_MAX) {	/* no file is that large */
		kvsi_drv_set_detail(d, "host: chunk of %zu bytes: too large", size);
		errno = ENOMEM;
		return -1;
	}
	fd = memfd_create("kvslab-chunk", MFD_CLOEXEC);
	if (fd < 0) {
		err = errno == EMFILE || errno == ENFILE ? ENOMEM : errno;
		kvsi_drv_set_detail(d, "host: memfd_create: %s", strerror(errno));
		errno = err;
		return -1;
	}
	if (ftruncate(fd, (off_t)size) < 0 ||
	    (!hb_of(d)->lazy && fallocate(fd, 0, 0, (off_t)size) < 0)) {
		err = errno;
		kvsi_drv_set_detail(d, "host: allocating %zu bytes: %s", size, strerror(err));
		close(fd);
		errno = err == ENOSPC || err == EFBIG ? ENOMEM : err;
		return -1;
	}
	*handle = (uint64_t)fd;
	return 0;
}

static int host_release(struct kvs_drv *d, uint64_t handle)
{
	(void)d;
	/* Mappings keep the file alive: the kernel frees the pages at the last unmap. */
	close((int)handle);
	return 0;
}

static int host_map(struct kvs_drv *d, kvs_devptr_t addr, size_t size, uint64_t handle)
{
	void *m = mmap((void *)(uintptr_t)addr, size, PROT_NONE, MAP_SHARED | MAP_FIXED,
		       (int)handle, 0);

	if (m == MAP_FAILED) {
		int err = errno;

		kvsi_drv_set_detail(d, "host: mmap map: %s", strerror(err));
		errno = err == ENOMEM ? ENOMEM : EIO;
		return -1;
	}
	return 0;
}

static int host_drain(struct host_be *hb)
{
	pthread_mutex_lock(&hb->qlock);
	while (hb->completed < hb->submitted)
		pthread_cond_wait(&hb->qdone, &hb->qlock);
	pthread_mutex_unlock(&hb->qlock);
	return 0;
}

static int host_unmap(struct kvs_drv *d, kvs_devptr_t addr, size_t size)
{
	void *m;

	host_drain(hb_of(d));
	m = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		kvsi_drv_set_detail(d, "host: mmap unmap: %s", strerror(errno));
		errno = EIO;
		return -1;
	}
	return 0;
}

static int host_set_access(struct kvs_drv *d, kvs_devptr_t addr, size_t size, int access)
{
	int prot = access == KVS_ACCESS_RW	 ? PROT_READ | PROT_WRITE
		   : access == KVS_ACCESS_READ ? PROT_READ
					       : PROT_NONE;
	void *p = (void *)(uintptr_t)addr;

	if (mprotect(p, size, prot) < 0) {
		kvsi_drv_set_detail(d, "host: mprotect: %s", strerror(errno));
		errno = EIO;
		return -1;
	}
	/* Device memory is resident once mapped; make host memory so too.  Old
	 * kernels lack MADV_POPULATE_*: then pages arrive on first touch. */
	if (hb_of(d)->populate && prot != PROT_NONE)
		(void)madvise(p, size, access == KVS_ACCESS_RW ? MADV_POPULATE_WRITE
							       : MADV_POPULATE_READ);
	return 0;
}

static void *host_worker(void *arg)
{
	struct host_be *hb = arg;

	pthread_mutex_lock(&hb->qlock);
	for (;;) {
		struct copy_req *r;

		while (!hb->head && !hb->stop)
			pthread_cond_wait(&hb->qwork, &hb->qlock);
		if (!hb->head)
			break;
		r = hb->head;
		hb->head = r->next;
		if (!hb->head)
			hb->tail = NULL;
		pthread_mutex_unlock(&hb->qlock);
		memcpy(r->dst, r->src, r->n);
		free(r);
		pthread_mutex_lock(&hb->qlock);
		hb->completed++;
		pthread_cond_broadcast(&hb->qdone);
	}
	pthread_mutex_unlock(&hb->qlock);
	return NULL;
}

/* Copies this small are done at once on the caller's thread when nothing
 * is queued: a hand-off to the worker costs more than the copy, and a copy
 * that completes at submission keeps every ordering rule. */
#define HOST_INLINE_COPY (64u << 10)

static int host_copy(struct kvs_drv *d, void *dst, const void *src, size_t n)
{
	struct host_be *hb = hb_of(d);
	struct copy_req *r;

	if (n <= HOST_INLINE_COPY) {
		pthread_mutex_lock(&hb->qlock);
		if (hb->completed == hb->submitted) {
			memcpy(dst, src, n);
			hb->submitted++;
			hb->completed++;
			pthread_mutex_unlock(&hb->qlock);
			return 0;
		}
		pthread_mutex_unlock(&hb->qlock);
	}
	r = malloc(sizeof(*r));
	if (!r) {
		errno = ENOMEM;
		return -1;
	}
	r->dst = dst;
	r->src = src;
	r->n = n;
	r->next = NULL;
	pthread_mutex_lock(&hb->qlock);
	if (!hb->worker_started) {
		if (pthread_create(&hb->worker, NULL, host_worker, hb) != 0) {
			pthread_mutex_unlock(&hb->qlock);
			free(r);
			kvsi_drv_set_detail(d, "host: cannot start the copy worker");
			errno = EAGAIN;
			return -1;
		}
		hb->worker_started = true;
	}
	if (hb->tail)
		hb->tail->next = r;
	else
		hb->head = r;
	hb->tail = r;
	hb->submitted++;
	pthread_cond_signal(&hb->qwork);
	pthread_mutex_unlock(&hb->qlock);
	return 0;
}

static int host_copy_htod(struct kvs_drv *d, kvs_devptr_t dst, const void *src, size_t n)
{
	return host_copy(d, (void *)(uintptr_t)dst, src, n);
}

static int host_copy_dtoh(struct kvs_drv *d, void *dst, kvs_devptr_t src, size_t n)
{
	return host_copy(d, dst, (const void *)(uintptr_t)src, n);
}

static int host_event_create(struct kvs_drv *d, void **bev)
{
	struct host_event *e = calloc(1, sizeof(*e));

	(void)d;
	if (!e) {
		errno = ENOMEM;
		return -1;
	}
	*bev = e;
	return 0;
}

static void host_event_destroy(struct kvs_drv *d, void *bev)
{
	(void)d;
	free(bev);
}

static int host_event_record(struct kvs_drv *d, void *bev)
{
	struct host_be *hb = hb_of(d);
	struct host_event *e = bev;

	pthread_mutex_lock(&hb->qlock);
	e->seq = hb->submitted;
	pthread_mutex_unlock(&hb->qlock);
	return 0;
}

static int host_event_query(struct kvs_drv *d, void *bev)
{
	struct host_be *hb = hb_of(d);
	struct host_event *e = bev;
	int done;

	pthread_mutex_lock(&hb->qlock);
	done = hb->completed >= e->seq;
	pthread_mutex_unlock(&hb->qlock);
	return done;
}

static int host_event_wait(struct kvs_drv *d, void *bev)
{
	struct host_be *hb = hb_of(d);
	struct host_event *e = bev;

	pthread_mutex_lock(&hb->qlock);
	while (hb->completed < e->seq)
		pthread_cond_wait(&hb->qdone, &hb->qlock);
	pthread_mutex_unlock(&hb->qlock);
	return 0;
}

static int host_synchronize(struct kvs_drv *d)
{
	return host_drain(hb_of(d));
}

static int host_host_alloc(struct kvs_drv *d, size_t size, void **ptr)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t align = pg > 0 ? (size_t)pg : 4096;
	size_t rounded;
	void *p = NULL;

	if (kvs_size_roundup(size, align, &rounded))
		p = aligned_alloc(align, rounded);

	if (!p) {
		kvsi_drv_set_detail(d, "host: cannot allocate %zu host bytes", size);
		errno = ENOMEM;
		return -1;
	}
	*ptr = p;
	return 0;
}

static int host_host_free(struct kvs_drv *d, void *ptr)
{
	(void)d;
	free(ptr);
	return 0;
}

const struct kvs_drv_backend kvsi_backend_host = {
	.name = "host",
	.open = host_open,
	.close = host_close,
	.mem_info = host_mem_info,
	.reserve = host_reserve,
	.unreserve = host_unreserve,
	.create = host_create,
	.release = host_release,
	.map = host_map,
	.unmap = host_unmap,
	.set_access = host_set_access,
	.copy_htod = host_copy_htod,
	.copy_dtoh = host_copy_dtoh,
	.event_create = host_event_create,
	.event_destroy = host_event_destroy,
	.event_record = host_event_record,
	.event_query = host_event_query,
	.event_wait = host_event_wait,
	.synchronize = host_synchronize,
	.host_alloc = host_host_alloc,
	.host_free = host_host_free,
};
