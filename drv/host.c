/* SPDX-License-Identifier: MIT */
/*
 * drv/host.c - the host backend: GPU virtual-memory semantics on CPU memory.
 * The memory-limit reads (the machine's, the memory cgroup's) are
 * drv/host_mem.c's; the records both files use are in drv/host_int.h.
 *
 * Reservations.  A reservation is an mmap(PROT_NONE, MAP_NORESERVE) of
 * address space, over-allocated by a granule and trimmed so that its base is
 * aligned to the granularity.  The backend keeps its own sorted table of
 * them (base, size, mirror arena), for placement below.
 *
 * Chunks are ranges of a few arenas.  An arena is a memfd ("kvslab-arena")
 * made sparse with ftruncate(), so it costs no memory until pages are
 * allocated in it.  A chunk is (arena, first granule, granules); the backend
 * handle is the chunk's index in hb->chunks, whose free slots are chained.
 * There are two kinds of arena.  A general arena is HOST_ARENA_BYTES (64
 * GiB; more for a chunk larger than that, which gets an arena of its own)
 * and is searched first fit in its bitmap of used granules (a new one is
 * made when none has room).  A mirror arena belongs to one reservation, is
 * as large as it, and its granule i stands for the reservation's granule i;
 * it is never searched.  An arena whose last chunk goes is closed (a
 * reservation opens a new mirror at its next first map), so a driver holding
 * no chunk holds no descriptor: a pool of tens of thousands of chunks needs
 * one descriptor per reservation in use plus a general arena or two, and
 * the process's RLIMIT_NOFILE is left alone (raising it would break
 * select()).
 *
 * Placement: why mirrors.  Linux caps a process at vm.max_map_count VMAs
 * (65530 by default), and every mapping is one unless the kernel merges it
 * with a neighbour, which it does (mmap MAP_FIXED and mprotect alike) for
 * MAP_SHARED mappings of the same file at contiguous file offsets with the
 * same protection.  A slab allocator creates one chunk per buffer per slab,
 * so creation order says nothing about addresses, and 1024 one-granule slabs
 * of 64 buffers were 65536 VMAs: mmap failed with ENOMEM.  So a chunk's
 * range is chosen by the address it is first mapped at: the granules of its
 * reservation's mirror arena that mirror that address, so that chunks mapped
 * side by side lie side by side in one file and their mappings merge into
 * one VMA per run.  If that range is taken (a chunk first mapped there
 * earlier is still alive, e.g. mapped elsewhere now) or no mirror arena can
 * be opened (out of descriptors), it falls back to first fit in a general
 * arena and simply does not merge.  Later maps of the chunk, at any address,
 * map the same range, so aliases share bytes and contents survive unmap and
 * remap: a chunk's bytes live in its range from its first map to its
 * release.  VMAs now count runs and holes, not chunks: an unmap splits a
 * merged VMA, and a layout of tens of thousands of alternating holes can
 * still reach the limit (map and unmap then fail with ENOMEM and EIO).
 *
 * Host blocks (kvs_drv_host_alloc) are aligned_alloc() memory, or with
 * KVS_DRV_F_LAZY address space mmap()ed MAP_NORESERVE, committed on first
 * touch as a lazy chunk is.  KVS_DRV_F_NO_COPY completes every copy at its
 * submission without moving a byte (a simulation's), so that with LAZY a
 * replay's tiers never touch memory at all.
 *
 * Creation.  KVS_DRV_F_LAZY commits nothing: a lazy chunk gets no range at
 * creation, only a slot, and its range at its first map; one never mapped
 * has none, and freeing it only frees the slot.  So a simulation can
 * account for far more "device" memory than the machine has as long as it
 * never touches it.  Otherwise creation commits memory as cuMemCreate does:
 * fallocate() of a range taken first fit in a general arena, after checking
 * the size against what the machine can commit (MemAvailable of
 * /proc/meminfo, else sysinfo), against what the process's memory cgroup
 * still allows (its limit, and every ancestor's, less what it holds but
 * could not reclaim: v2's memory.max, memory.current and memory.stat's
 * inactive_file, or v1's memory.limit_in_bytes and memory.usage_in_bytes),
 * and against the driver's total memory, so
 * that a chunk larger than memory fails with ENOMEM at creation instead of
 * waking the OOM killer later.  At its first map such a chunk moves to its
 * mirrored range when that is free: fallocate() there, then punch the old
 * range.  Nothing is copied, since nobody can write a chunk before it is
 * mapped; if the fallocate() fails the chunk stays where it was, committed,
 * so a map never fails for memory the creation already promised.
 *
 * Mapping puts the chunk's range at a fixed address with MAP_SHARED and
 * PROT_NONE (a new mapping has no access); granting access is mprotect()
 * followed by MADV_POPULATE_* so the pages really are resident (and show in
 * RSS) once access is set, as device memory is (not when lazy).  Unmapping
 * puts an anonymous PROT_NONE mapping back over exactly the unmapped range,
 * which returns it to the reservation (merging with the reservation's other
 * placeholders) and drops the pages from the process.
 *
 * Release keeps the cuMemRelease rule: a chunk released while mapped keeps
 * its memory and contents until its last unmap.  The generic layer knows
 * when that is and then calls chunk_free() (host_release() itself does
 * nothing); only there is the range hole-punched (FALLOC_FL_PUNCH_HOLE |
 * KEEP_SIZE), which gives the pages back and makes the range read as zeros
 * for its next owner, and returned to its arena's bitmap.  Unreserve unbinds
 * the reservation's mirror arena, which lives on while chunks first mapped
 * there do.  Close truncates and closes every arena.
 *
 * Copies run on one worker thread, started on the first large copy, in
 * submission order (a small copy with nothing queued is done at once): a
 * FIFO of requests numbered by a sequence.  An event records the sequence
 * number of the last copy submitted before it and is complete when the
 * worker has finished that many.  Before an unmap the generic layer calls
 * host_quiesce(), which drains the queue with no driver lock held, because a
 * queued copy may still read or write the range.
 *
 * Locking (the order is in common/common.h).
 * hb->alock protects the arenas, their bitmaps, the chunk table and the
 * reservation table; create runs without drv->lock (it is the slow call), so
 * reserve, unreserve, map and chunk_free, which run under drv->lock, take
 * hb->alock too (drv->lock before hb->alock, never the other way).
 * fallocate() of a new chunk runs with no lock, and that of a chunk moving
 * at its first map with drv->lock only: the ranges are already marked used.  hb->qlock protects the
 * copy queue and sequence numbers; the worker signals hb->qdone after each
 * copy.  Everything else touches nothing shared.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "host_int.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

#define HOST_DEFAULT_GRANULARITY (2u << 20)
/* File size of an arena: sparse, so only address space in the file. */
#define HOST_ARENA_BYTES (64ULL << 30)
#define NO_SLOT SIZE_MAX

static struct host_be *hb_of(struct kvs_drv *d)
{
	return d->priv;
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
	hb->nocopy = attr && (attr->flags & KVS_DRV_F_NO_COPY);
	hb->populate = !hb->lazy && !(attr && (attr->flags & KVS_DRV_F_NO_POPULATE));
	hb->gran = gran;
	hb->free_slot = NO_SLOT;
	if (!hb->lazy)
		host_cgroup_locate(hb);
	pthread_mutex_init(&hb->alock, NULL);
	pthread_mutex_init(&hb->qlock, NULL);
	pthread_cond_init(&hb->qwork, NULL);
	pthread_cond_init(&hb->qdone, NULL);
	d->priv = hb;
	d->granularity = gran;
	/* Device-to-device copies and batches are the queue's own work; there
	 * are no streams to order on a device, nor kernels. */
	d->caps = KVS_DRV_CAP_DTOD | KVS_DRV_CAP_BATCH;
	return 0;
}

static void host_close(struct kvs_drv *d)
{
	struct host_be *hb = hb_of(d);
	size_t i;

	if (hb->worker_started) {
		pthread_mutex_lock(&hb->qlock);
		hb->stop = true;
		pthread_cond_signal(&hb->qwork);
		pthread_mutex_unlock(&hb->qlock);
		pthread_join(hb->worker, NULL);
	}
	/* Every chunk was freed and unmapped by the generic layer: the
	 * arenas hold nothing; truncating first frees any page a leak kept. */
	for (i = 0; i < hb->narenas; i++) {
		if (hb->arenas[i].fd < 0)
			continue;
		if (ftruncate(hb->arenas[i].fd, 0) < 0) {
			/* nothing to report to: close() frees it all the same */
		}
		close(hb->arenas[i].fd);
		free(hb->arenas[i].used);
	}
	KVS_FREE_ALL(hb->arenas, hb->chunks, hb->res, hb->cg_dir);
	pthread_cond_destroy(&hb->qwork);
	pthread_cond_destroy(&hb->qdone);
	pthread_mutex_destroy(&hb->qlock);
	pthread_mutex_destroy(&hb->alock);
	free(hb);
}


/* Free: what the backend's total leaves, within what the machine can still
 * commit (MemAvailable: free RAM plus the page cache it can reclaim; free
 * RAM alone swings with other processes' file I/O) and the memory cgroup's
 * limit leaves. */
static int host_mem_info(struct kvs_drv *d, size_t *free_bytes, size_t *total_bytes)
{
	struct host_be *hb = hb_of(d);
	uint64_t used = kvsi_drv_stat(d, KVS_DRV_STAT_bytes_created);
	size_t f = hb->total > used ? hb->total - used : 0;
	size_t avail = host_mem_available(hb);

	if (avail < f)
		f = avail;
	*free_bytes = f;
	*total_bytes = hb->total;
	return 0;
}

/* Index of the first reservation whose base is >= @addr; alock held. */
static size_t res_index(const struct host_be *hb, kvs_devptr_t addr)
{
	size_t lo = 0, hi = hb->nres;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (hb->res[mid].base < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The reservation holding @addr, or NULL; alock held. */
static struct host_res *res_find(struct host_be *hb, kvs_devptr_t addr)
{
	size_t i = res_index(hb, addr);

	if (i < hb->nres && hb->res[i].base == addr)
		return &hb->res[i];
	if (i > 0 && addr - hb->res[i - 1].base < hb->res[i - 1].size)
		return &hb->res[i - 1];
	return NULL;
}

static int res_add(struct host_be *hb, kvs_devptr_t base, size_t size)
{
	size_t i;

	pthread_mutex_lock(&hb->alock);
	if (hb->nres == hb->cap_res) {
		size_t cap = hb->cap_res ? 2 * hb->cap_res : 8;
		struct host_res *r = realloc(hb->res, cap * sizeof(*r));

		if (!r) {
			pthread_mutex_unlock(&hb->alock);
			return kvs_fail(ENOMEM);
		}
		hb->res = r;
		hb->cap_res = cap;
	}
	i = res_index(hb, base);
	memmove(&hb->res[i + 1], &hb->res[i], (hb->nres - i) * sizeof(*hb->res));
	hb->res[i].base = base;
	hb->res[i].size = size;
	hb->res[i].arena = NO_SLOT;
	hb->nres++;
	pthread_mutex_unlock(&hb->alock);
	return 0;
}

/* Forget a reservation.  Its mirror arena, if any, still holds chunks (an
 * empty arena is closed at once): it stays, unbound, until the last goes. */
static void res_del(struct host_be *hb, kvs_devptr_t base)
{
	size_t i;

	pthread_mutex_lock(&hb->alock);
	i = res_index(hb, base);
	if (i < hb->nres && hb->res[i].base == base) {
		if (hb->res[i].arena != NO_SLOT)
			hb->arenas[hb->res[i].arena].bound = false;
		memmove(&hb->res[i], &hb->res[i + 1], (hb->nres - i - 1) * sizeof(*hb->res));
		hb->nres--;
	}
	pthread_mutex_unlock(&hb->alock);
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
	if (res_add(hb_of(d), a, size) < 0) {
		munmap((void *)a, size);
		kvsi_drv_set_detail(d, "host: no memory for the reservation's books");
		return kvs_fail(ENOMEM);
	}
	*base = a;
	return 0;
}

static int host_unreserve(struct kvs_drv *d, kvs_devptr_t base, size_t size)
{
	if (munmap((void *)(uintptr_t)base, size) < 0) {
		kvsi_drv_set_detail(d, "host: munmap: %s", strerror(errno));
		return -1;
	}
	res_del(hb_of(d), base);
	return 0;
}

static bool gran_used(const struct host_arena *a, size_t i)
{
	return (a->used[i >> 6] >> (i & 63)) & 1;
}

static void gran_mark(struct host_arena *a, size_t first, size_t n, bool used)
{
	size_t i;

	for (i = first; i < first + n; i++) {
		if (used)
			a->used[i >> 6] |= 1ULL << (i & 63);
		else
			a->used[i >> 6] &= ~(1ULL << (i & 63));
	}
	if (used) {
		a->nfree -= n;
		if (first == a->hint)
			a->hint = first + n;
	} else {
		a->nfree += n;
		if (first < a->hint)
			a->hint = first;
	}
}

/* First fit of @n free granules in @a; alock held. */
static bool arena_fit(const struct host_arena *a, size_t n, size_t *first)
{
	size_t i, run = 0;

	if (a->mirror || a->nfree < n)
		return false;
	for (i = a->hint; i < a->ngran; i++) {
		if (!(i & 63) && a->used[i >> 6] == ~0ULL && i + 64 <= a->ngran) {
			run = 0;
			i += 63;
			continue;
		}
		if (gran_used(a, i)) {
			run = 0;
		} else if (++run == n) {
			*first = i + 1 - n;
			return true;
		}
	}
	return false;
}

/* Add an arena of @ngran granules, a mirror of the reservation at @rbase
 * when @mirror; alock held.  -1/errno. */
static int arena_add(struct kvs_drv *d, struct host_be *hb, size_t ngran, bool mirror,
		     kvs_devptr_t rbase, size_t *idx)
{
	struct host_arena *a;
	size_t i;
	int fd, err;

	for (i = 0; i < hb->narenas; i++)	/* a closed one's slot */
		if (hb->arenas[i].fd < 0)
			break;
	if (i == hb->narenas && hb->narenas == hb->cap_arenas) {
		size_t cap = hb->cap_arenas ? 2 * hb->cap_arenas : 4;

		a = realloc(hb->arenas, cap * sizeof(*a));
		if (!a)
			return kvs_fail(ENOMEM);
		hb->arenas = a;
		hb->cap_arenas = cap;
	}
	a = &hb->arenas[i];
	memset(a, 0, sizeof(*a));
	a->fd = -1;
	a->used = calloc((ngran + 63) / 64, sizeof(*a->used));
	if (!a->used)
		return kvs_fail(ENOMEM);
	fd = memfd_create("kvslab-arena", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)(ngran * hb->gran)) < 0) {
		err = errno;
		kvsi_drv_set_detail(d, "host: making an arena of %zu bytes: %s",
				    ngran * hb->gran, strerror(err));
		if (fd >= 0)
			close(fd);
		free(a->used);
		/* Out of descriptors or file size: out of device memory. */
		return kvs_fail(err == EMFILE || err == ENFILE || err == EFBIG ||
				err == ENOSPC || err == EINVAL ? ENOMEM : err);
	}
	a->fd = fd;
	a->mirror = mirror;
	a->bound = mirror;
	a->rbase = rbase;
	a->ngran = ngran;
	a->nfree = ngran;
	if (i == hb->narenas)
		hb->narenas++;
	*idx = i;
	return 0;
}

/* A free slot of the chunk table; alock held.  NO_SLOT when out of memory. */
static size_t slot_get(struct host_be *hb)
{
	size_t i = hb->free_slot;

	if (i != NO_SLOT) {
		hb->free_slot = hb->chunks[i].next_free;
		return i;
	}
	if (hb->nchunks == hb->cap_chunks) {
		size_t cap = hb->cap_chunks ? 2 * hb->cap_chunks : 64;
		struct host_chunk *c = realloc(hb->chunks, cap * sizeof(*c));

		if (!c)
			return NO_SLOT;
		hb->chunks = c;
		hb->cap_chunks = cap;
	}
	return hb->nchunks++;
}

/* Give granules [first, first + n) of arena @ai back; alock held.  An
 * arena left empty is closed (its slot reused by the next arena_add(); a
 * reservation it mirrored opens a new one at its next first map), so a
 * driver with no live chunk holds no descriptor and no file. */
static void range_put(struct host_be *hb, size_t ai, size_t first, size_t n)
{
	struct host_arena *a = &hb->arenas[ai];

	gran_mark(a, first, n, false);
	if (a->nfree == a->ngran) {
		if (a->bound) {
			struct host_res *r = res_find(hb, a->rbase);

			if (r && r->arena == ai)
				r->arena = NO_SLOT;
		}
		close(a->fd);
		free(a->used);
		memset(a, 0, sizeof(*a));
		a->fd = -1;
	}
}

/* Give a chunk's range, if it has one, and its slot back; alock held. */
static void chunk_put(struct host_be *hb, size_t slot)
{
	struct host_chunk *c = &hb->chunks[slot];

	if (c->arena != NO_SLOT)
		range_put(hb, c->arena, c->first, c->ngran);
	c->next_free = hb->free_slot;
	hb->free_slot = slot;
}

/* Can @size bytes be committed now?  0, or -1/ENOMEM with a detail. */
static int commit_check(struct kvs_drv *d, struct host_be *hb, size_t size)
{
	uint64_t used = kvsi_drv_stat(d, KVS_DRV_STAT_bytes_created);
	size_t avail;

	if (hb->total && (size > hb->total || used > hb->total - size)) {
		kvsi_drv_set_detail(d, "host: %zu bytes more than the driver's %zu of memory "
				    "(%llu held)", size, hb->total, (unsigned long long)used);
		return kvs_fail(ENOMEM);
	}
	avail = host_machine_available();
	if (size > avail) {
		kvsi_drv_set_detail(d, "host: %zu bytes more than the %zu the machine can commit",
				    size, avail);
		return kvs_fail(ENOMEM);
	}
	avail = host_cgroup_headroom(hb);
	if (size > avail) {
		kvsi_drv_set_detail(d, "host: %zu bytes more than the %zu the memory cgroup's "
				    "limit leaves", size, avail);
		return kvs_fail(ENOMEM);
	}
	return 0;
}

/* First fit of @n granules in a general arena, adding one if none has room,
 * and mark them used; alock held.  -1/errno. */
static int general_take(struct kvs_drv *d, struct host_be *hb, size_t n, size_t *ai,
			size_t *first)
{
	size_t i, ngran = HOST_ARENA_BYTES / hb->gran;

	for (i = 0; i < hb->narenas; i++)
		if (hb->arenas[i].fd >= 0 && arena_fit(&hb->arenas[i], n, first))
			break;
	if (i == hb->narenas) {
		if (arena_add(d, hb, ngran < n ? n : ngran, false, 0, &i) < 0)
			return -1;
		*first = 0;
	}
	gran_mark(&hb->arenas[i], *first, n, true);
	*ai = i;
	return 0;
}

static int host_create(struct kvs_drv *d, size_t size, uint64_t *handle)
{
	struct host_be *hb = hb_of(d);
	size_t n = size / hb->gran, slot, ai, first = 0;
	struct host_chunk *c;
	off_t off;
	int fd, err;

	if (size > (size_t)INT64_MAX) {	/* no file is that large */
		kvsi_drv_set_detail(d, "host: chunk of %zu bytes: too large", size);
		return kvs_fail(ENOMEM);
	}
	if (!hb->lazy && commit_check(d, hb, size) < 0)
		return -1;
	pthread_mutex_lock(&hb->alock);
	slot = slot_get(hb);
	if (slot == NO_SLOT) {
		pthread_mutex_unlock(&hb->alock);
		return kvs_fail(ENOMEM);
	}
	c = &hb->chunks[slot];
	c->arena = NO_SLOT;
	c->first = 0;
	c->ngran = n;
	c->placed = false;
	if (hb->lazy) {		/* its range comes with its first map */
		pthread_mutex_unlock(&hb->alock);
		*handle = slot;
		return 0;
	}
	if (general_take(d, hb, n, &ai, &first) < 0) {
		err = errno;
		chunk_put(hb, slot);
		pthread_mutex_unlock(&hb->alock);
		return kvs_fail(err);
	}
	c->arena = ai;
	c->first = first;
	fd = hb->arenas[ai].fd;
	pthread_mutex_unlock(&hb->alock);

	off = (off_t)(first * hb->gran);
	if (fallocate(fd, 0, off, (off_t)size) < 0) {
		err = errno;
		kvsi_drv_set_detail(d, "host: allocating %zu bytes: %s", size, strerror(err));
		/* Give back whatever part was allocated. */
		(void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, (off_t)size);
		pthread_mutex_lock(&hb->alock);
		chunk_put(hb, slot);
		pthread_mutex_unlock(&hb->alock);
		return kvs_fail(err == ENOSPC || err == EFBIG ? ENOMEM : err);
	}
	*handle = slot;
	return 0;
}

static int host_release(struct kvs_drv *d, uint64_t handle)
{
	/* The memory stays until chunk_free(), at the last unmap. */
	(void)d;
	(void)handle;
	return 0;
}

static void punch(int fd, size_t first, size_t n, size_t gran)
{
	(void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(first * gran),
			(off_t)(n * gran));
}

/* Released and no longer mapped (or never mapped): punch its range out,
 * give it back.  A lazy chunk never mapped has none. */
static void host_chunk_free(struct kvs_drv *d, uint64_t handle)
{
	struct host_be *hb = hb_of(d);
	struct host_chunk *c;

	pthread_mutex_lock(&hb->alock);
	c = &hb->chunks[handle];
	if (c->arena != NO_SLOT)
		punch(hb->arenas[c->arena].fd, c->first, c->ngran, hb->gran);
	chunk_put(hb, (size_t)handle);
	pthread_mutex_unlock(&hb->alock);
}

/* Are granules [first, first + n) of @a all free? */
static bool range_free(const struct host_arena *a, size_t first, size_t n)
{
	size_t i;

	if (a->nfree < n || first + n > a->ngran)
		return false;
	for (i = first; i < first + n; i++)
		if (gran_used(a, i))
			return false;
	return true;
}

/*
 * Take the mirrored range of a chunk first mapped at @addr: granules
 * [g, g + n) of the mirror arena of @addr's reservation, g being @addr's
 * granule in it, opening that arena if needed.  alock held.  True with
 * *ai, *first set and the range marked used; false when the range is held
 * by a chunk first mapped there earlier (or no arena can be had).
 */
static bool mirror_take(struct kvs_drv *d, struct host_be *hb, kvs_devptr_t addr, size_t n,
			size_t *ai, size_t *first)
{
	struct host_res *r = res_find(hb, addr);
	size_t g;

	if (!r)
		return false;
	g = (addr - r->base) / hb->gran;
	if (r->arena == NO_SLOT) {
		size_t i;

		if (arena_add(d, hb, r->size / hb->gran, true, r->base, &i) < 0)
			return false;	/* out of descriptors: first fit will do */
		r->arena = i;
	}
	if (!range_free(&hb->arenas[r->arena], g, n))
		return false;
	gran_mark(&hb->arenas[r->arena], g, n, true);
	*ai = r->arena;
	*first = g;
	return true;
}

/*
 * Give a chunk mapped for the first time its final range; alock held (and
 * drv->lock, so no other map, unmap or chunk_free runs; create may, so
 * hb->chunks and hb->arenas are reread after the lock is dropped).
 *
 * Lazy: the mirrored range, else first fit.  Committed at creation: the
 * commitment moves to the mirrored range (nobody can have written the
 * chunk before its first map, so no byte is copied) when that range is free
 * and fallocate() gets it; otherwise it stays where it is.
 */
static int place(struct kvs_drv *d, struct host_be *hb, uint64_t handle, kvs_devptr_t addr)
{
	struct host_chunk *c = &hb->chunks[handle];
	size_t n = c->ngran, ai, first, old_ai, old_first;
	int mfd, ofd;

	if (!mirror_take(d, hb, addr, n, &ai, &first)) {
		if (c->arena == NO_SLOT) {
			if (general_take(d, hb, n, &ai, &first) < 0)
				return -1;
			c->arena = ai;
			c->first = first;
		}
		c->placed = true;
		return 0;
	}
	if (c->arena == NO_SLOT) {
		c->arena = ai;
		c->first = first;
		c->placed = true;
		return 0;
	}
	old_ai = c->arena;
	old_first = c->first;
	mfd = hb->arenas[ai].fd;
	ofd = hb->arenas[old_ai].fd;
	pthread_mutex_unlock(&hb->alock);
	if (fallocate(mfd, 0, (off_t)(first * hb->gran), (off_t)(n * hb->gran)) == 0) {
		punch(ofd, old_first, n, hb->gran);
		pthread_mutex_lock(&hb->alock);
		range_put(hb, old_ai, old_first, n);
		c = &hb->chunks[handle];
		c->arena = ai;
		c->first = first;
	} else {
		punch(mfd, first, n, hb->gran);
		pthread_mutex_lock(&hb->alock);
		range_put(hb, ai, first, n);
		c = &hb->chunks[handle];
	}
	c->placed = true;
	return 0;
}

static int host_map(struct kvs_drv *d, kvs_devptr_t addr, size_t size, uint64_t handle)
{
	struct host_be *hb = hb_of(d);
	off_t off;
	void *m;
	int fd;

	pthread_mutex_lock(&hb->alock);
	if (!hb->chunks[handle].placed && place(d, hb, handle, addr) < 0) {
		int err = errno;

		pthread_mutex_unlock(&hb->alock);
		return kvs_fail(err);
	}
	fd = hb->arenas[hb->chunks[handle].arena].fd;
	off = (off_t)(hb->chunks[handle].first * hb->gran);
	pthread_mutex_unlock(&hb->alock);
	m = mmap((void *)(uintptr_t)addr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, off);

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

/* Every copy of a batch; device addresses are host addresses here. */
static void host_copy_vec(const kvs_copy_t *c, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		memcpy((void *)(uintptr_t)c[i].dst, (const void *)(uintptr_t)c[i].src, c[i].bytes);
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
		if (r->vec) {
			host_copy_vec(r->vec, r->nvec);
			free(r->vec);
		} else {
			memcpy(r->dst, r->src, r->n);
		}
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

/* Run @r at once, on the caller's thread, when it is small and nothing is
 * queued (see HOST_INLINE_COPY); true if it ran.  @r is the caller's. */
static bool host_inline(struct host_be *hb, const struct copy_req *r, size_t bytes)
{
	if (bytes > HOST_INLINE_COPY)
		return false;
	pthread_mutex_lock(&hb->qlock);
	if (hb->completed != hb->submitted) {
		pthread_mutex_unlock(&hb->qlock);
		return false;
	}
	if (r->vec)
		host_copy_vec(r->vec, r->nvec);
	else
		memcpy(r->dst, r->src, r->n);
	hb->submitted++;
	hb->completed++;
	pthread_mutex_unlock(&hb->qlock);
	return true;
}

/* Queue a copy of @proto for the worker: copies @proto (and its vector). */
static int host_enqueue(struct kvs_drv *d, const struct copy_req *proto)
{
	struct host_be *hb = hb_of(d);
	struct copy_req *r = malloc(sizeof(*r));

	if (r) {
		*r = *proto;
		r->next = NULL;
		if (proto->vec) {
			r->vec = malloc(proto->nvec * sizeof(*r->vec));
			if (r->vec)
				memcpy(r->vec, proto->vec, proto->nvec * sizeof(*r->vec));
		}
	}
	if (!r || (proto->vec && !r->vec)) {
		free(r);
		errno = ENOMEM;
		return -1;
	}
	pthread_mutex_lock(&hb->qlock);
	if (!hb->worker_started) {
		if (pthread_create(&hb->worker, NULL, host_worker, hb) != 0) {
			pthread_mutex_unlock(&hb->qlock);
			free(r->vec);
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

/* KVS_DRV_F_NO_COPY: complete at once, in order (nothing is ever queued). */
static bool host_nocopy(struct host_be *hb)
{
	if (!hb->nocopy)
		return false;
	pthread_mutex_lock(&hb->qlock);
	hb->submitted++;
	hb->completed++;
	pthread_mutex_unlock(&hb->qlock);
	return true;
}

static int host_copy(struct kvs_drv *d, void *dst, const void *src, size_t n)
{
	struct copy_req r = {.dst = dst, .src = src, .n = n};

	if (host_nocopy(hb_of(d)))
		return 0;
	if (host_inline(hb_of(d), &r, n))
		return 0;
	return host_enqueue(d, &r);
}

/* A batch is one entry of the queue: one hand-off to the worker. */
static int host_copy_batch(struct kvs_drv *d, int kind, const kvs_copy_t *c, size_t n)
{
	struct copy_req r = {.vec = (kvs_copy_t *)c, .nvec = n};
	size_t i, bytes = 0;

	(void)kind;
	if (host_nocopy(hb_of(d)))
		return 0;
	for (i = 0; i < n; i++)
		bytes += c[i].bytes;
	if (host_inline(hb_of(d), &r, bytes))
		return 0;
	return host_enqueue(d, &r);
}

static int host_copy_htod(struct kvs_drv *d, kvs_devptr_t dst, const void *src, size_t n)
{
	return host_copy(d, (void *)(uintptr_t)dst, src, n);
}

static int host_copy_dtoh(struct kvs_drv *d, void *dst, kvs_devptr_t src, size_t n)
{
	return host_copy(d, dst, (const void *)(uintptr_t)src, n);
}

static int host_copy_dtod(struct kvs_drv *d, kvs_devptr_t dst, kvs_devptr_t src, size_t n)
{
	return host_copy(d, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
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

/* No streams on the host: the point reached by the copy queue. */
static int host_event_record_stream(struct kvs_drv *d, void *bev, uint64_t stream)
{
	(void)stream;
	return host_event_record(d, bev);
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

/* Before an unmap, without drv->lock: a queued copy may use the range. */
static int host_quiesce(struct kvs_drv *d)
{
	return host_drain(hb_of(d));
}

/*
 * Host blocks.  Ordinary memory; a lazy driver's are address space with no
 * commitment (MAP_NORESERVE, so that the kernel's overcommit heuristic does
 * not refuse a block larger than the machine), pages coming on first touch
 * as a lazy chunk's do.  Such a block is mmap()ed one page larger: its size
 * is kept in that first page, for the munmap() at its free.
 */
static int host_host_alloc(struct kvs_drv *d, size_t size, void **ptr)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t align = pg > 0 ? (size_t)pg : 4096;
	size_t rounded;
	void *p = NULL;

	if (hb_of(d)->lazy) {
		if (kvs_size_roundup(size, align, &rounded) && rounded <= SIZE_MAX - align) {
			p = mmap(NULL, rounded + align, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
			if (p == MAP_FAILED) {
				p = NULL;
			} else {
				*(size_t *)p = rounded + align;
				p = (char *)p + align;
			}
		}
	} else if (kvs_size_roundup(size, align, &rounded)) {
		p = aligned_alloc(align, rounded);
	}
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
	long pg = sysconf(_SC_PAGESIZE);
	size_t align = pg > 0 ? (size_t)pg : 4096;
	char *base;

	if (hb_of(d)->lazy) {
		base = (char *)ptr - align;
		munmap(base, *(size_t *)base);
	} else {
		free(ptr);
	}
	return 0;
}

const struct kvs_drv_backend kvsi_backend_host = {
	.name = "host",
	.chunk_free = host_chunk_free,
	.quiesce = host_quiesce,
	.copy_batch = host_copy_batch,
	KVSI_DRV_BACKEND_OPS(host)
};
