/* SPDX-License-Identifier: MIT */
/*
 * lib/tier/hostpool.c - the host (L2) pool of the KV cache tiers: SGLang HiCache's
 * HostKVCache (MHATokenToKVPoolHost, MLATokenToKVPoolHost) and the
 * LayerDoneCounter of its cache controller, over a kvslab device pool.
 *
 * What it owns.  One block of host memory from kvs_drv_host_alloc() (pinned
 * on cuda, so copies are truly asynchronous), cut into pages of the device
 * pool's page size, and the books of which pages are free.  It knows the
 * device pool's buffers (each layer's K and V, or each layer's latent
 * vectors) but owns no device page: the caller passes device pages it holds.
 * A page is named by its index, on both sides: device page p is the
 * locations p * page_size .. p * page_size + page_size - 1 of the pool.
 *
 * Layouts.  A page has a piece in every buffer b of the device pool,
 * piece[b] = page_size * token_bytes[b] bytes.  LAYER_FIRST keeps one array
 * of pages per buffer, buffer after buffer, as the device pool does: the
 * piece of host page h in buffer b is at off[b] + h * piece[b].  PAGE_FIRST
 * keeps a page's pieces together in buffer order: host page h is at
 * h * page_bytes and its piece of buffer b at h * page_bytes + off[b].
 *
 * Copies.  A transfer copies the pieces of n (device page, host page)
 * pairs, layer by layer, through the driver's copy queue (one in-order
 * queue per driver: cuda's copy stream, the host backend's worker).  Within
 * a buffer, consecutive pairs whose pieces are adjacent on both sides are
 * merged into one copy: with LAYER_FIRST a run of consecutive device pages
 * onto a run of consecutive host pages is one copy per buffer; with
 * PAGE_FIRST host pieces of consecutive pages are page_bytes apart, so every
 * page is one copy per buffer (unless the pool has one buffer).  Pieces of
 * different buffers are never merged: they lie in different reservations,
 * and a driver copy stays in one.  The copies of a layer, all its buffers'
 * and all its pages', are one submission: kvs_drv_copy_batch() (one driver
 * call where the backend has KVS_DRV_CAP_BATCH, cuMemcpyBatchAsync).  Each
 * layer's submission records that layer's event, so the completion of layer
 * l is a point in the queue: a caller can wait for layer 0 while later
 * layers are still copying, and a completed layer l implies every layer
 * before it completed.  An engine stream can wait for it on the device
 * instead (kvs_hpool_xfer_layer_stream_wait(): kvs_event_stream_wait()).
 *
 * Order after the engine.  The copy queue waits for nothing the engine
 * runs, unless the pool was given the engine's streams: then every
 * transfer first orders the copy queue after them (hp->fence, the fence
 * module: an event recorded on each stream and kvs_drv_stream_wait()), so
 * its copies start only
 * after the kernels queued on those streams before the call: a backup
 * reads pages their prefill has finished writing, and a load does not
 * overwrite pages a kernel still reads, without a host synchronization.
 * The fence's own lock keeps each record and its wait together.
 *
 * Transfers hold their host pages busy (a per-page count) from submission
 * until the pool sees their completion (a query or wait that reports it, or
 * kvs_hpool_xfer_free(), which waits for it): a busy page cannot be freed,
 * so a page is never handed to a new owner while a copy still writes or
 * reads it.  Device pages are the caller's to keep until completion.
 *
 * Failure.  Everything is validated before the first copy is submitted.  If
 * a submission fails part way, the copies already submitted are waited for
 * (kvs_drv_synchronize(): they may write pages the caller gets back at once)
 * and the call returns -1 with nothing changed but the bytes of the
 * destination pages, which are then unspecified.  A copy that fails after
 * submission shows as an error from the event queries; the transfer is then
 * failed, for every layer, and its destination holds no valid data.
 *
 * Transfer handles, with one event per layer, are kept on a small cache and
 * reused, so a transfer creates no driver event once the pool is warm.
 *
 * Locking (the library's lock order is in common/common.h).  hp->lock, a
 * mutex, protects the free stack, the page states and busy counts, the
 * device-page scratch bitmap, the handle cache, each handle's state and
 * the counters.  It is never held across a driver call or a wait and no
 * other lock is taken under it (kvs_slab_refcount() is a relaxed load), so
 * a tiered cache may call the pool from inside its writer section.
 * The fence's lock (lib/mem/fence.h) is held across its driver calls
 * (never a wait), with no other lock of the pool, and is taken before the
 * driver's.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvslab/hostpool.h"
#include "kvslab/pool.h"
#include "mem/fence.h"
#include "mem/kvbuf.h"

/* Page states. */
#define HP_FREE 0
#define HP_USED 1
#define HP_MARK 2 /* used, and seen earlier in the array being checked */

/* Transfer states. */
#define XF_PENDING 0
#define XF_DONE 1
#define XF_FAILED 2

/* Handles kept for reuse; beyond this they are freed. */
#define XFER_CACHE_MAX 64

struct hbuf {
	kvs_devptr_t dbase;	/* the device buffer */
	size_t piece;		/* bytes of one page in it */
	size_t off;		/* LAYER_FIRST: its region; PAGE_FIRST: its piece in a page */
};

struct kvs_hpool_xfer {
	struct kvs_hpool *hp;
	kvs_event_t **ev;	/* one per layer, created once per handle */
	int32_t *hpages;	/* the host pages held busy until completion */
	size_t n, cap;
	uint32_t done;		/* layers known complete: 0 .. done - 1 */
	int state;		/* XF_*; under hp->lock */
	int err;		/* XF_FAILED: the errno */
	bool busy;		/* hpages still hold their busy counts */
	struct kvs_hpool_xfer *next; /* on the cache */
};

struct kvs_hpool {
	kvs_pool_t *dev;
	kvs_drv_t *drv;
	kvs_slab_t *slab;
	uint32_t layout, page_size, layers, bpl, nbuf;
	uint64_t npages, dev_npages;
	size_t page_bytes, bytes;
	unsigned char *mem;
	struct hbuf *buf;

	pthread_mutex_t lock;	/* protects everything below */
	int32_t *stack;		/* free pages; the top is stack[nfree - 1] */
	uint64_t nfree, used_peak, nbusy;
	uint8_t *state;		/* HP_* per page */
	uint32_t *busy;		/* per page: transfers not yet complete */
	uint64_t *dmark;	/* device pages seen in the array being checked */
	struct kvs_hpool_xfer *cache;
	uint32_t ncache;
	uint64_t live;		/* handles given out and not freed */
	uint64_t st[KVS_HPOOL_STAT__COUNT];

	struct kvsi_fence fence;	/* the engine's streams; set at create */
};

static inline unsigned char *host_piece(const struct kvs_hpool *hp, uint32_t page, uint32_t b)
{
	if (hp->layout == KVS_HPOOL_LAYER_FIRST)
		return hp->mem + hp->buf[b].off + (size_t)page * hp->buf[b].piece;
	return hp->mem + (size_t)page * hp->page_bytes + hp->buf[b].off;
}

/* ------------------------------------------------------------ create */

/**
 * kvs_hpool_attr_init() - host pool defaults: LAYER_FIRST, twice the device
 * pool's pages (SGLang's --hicache-ratio 2), no size in bytes.
 * @attr: attributes.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hpool_attr_init(kvs_hpool_attr_t *attr)
{
	KVS_ATTR_CLEAR(attr);
	attr->layout = KVS_HPOOL_LAYER_FIRST;
	attr->ratio = 2.0;
	return 0;
}

/* Host pages from the attributes; -1/errno when the size is not exactly one
 * of ratio and bytes, or gives no page or more than INT32_MAX. */
static int hpool_pages(const kvs_hpool_attr_t *a, uint64_t dev_npages, size_t page_bytes,
		       uint64_t *pages)
{
	double want;

	if ((a->ratio != 0) == (a->bytes != 0))
		return kvs_fail(EINVAL);
	if (a->bytes) {
		*pages = a->bytes / page_bytes;
	} else {
		if (!isfinite(a->ratio) || a->ratio < 0)
			return kvs_fail(EINVAL);
		want = floor((double)dev_npages * a->ratio);
		if (want > (double)INT32_MAX)
			return kvs_fail(EINVAL);
		*pages = (uint64_t)want;
	}
	if (*pages == 0 || *pages > (uint64_t)INT32_MAX)
		return kvs_fail(EINVAL);
	return 0;
}

/* The device pool's buffers: their addresses, and a page's piece of each. */
static int hpool_pieces(struct kvs_hpool *hp)
{
	int which[2] = {KVS_KV_K, KVS_KV_V};
	uint32_t l, i;

	hp->buf = calloc(hp->nbuf, sizeof(*hp->buf));
	if (!hp->buf)
		return kvs_fail(ENOMEM);
	for (l = 0; l < hp->layers; l++) {
		for (i = 0; i < hp->bpl; i++) {
			struct hbuf *b = &hp->buf[l * hp->bpl + i];
			size_t stride;

			if (kvs_pool_buffer(hp->dev, l, hp->bpl == 1 ? KVS_KV_LATENT : which[i],
					    &b->dbase, &stride) < 0)
				return -1;
			if (!kvs_size_mul(stride, hp->page_size, &b->piece) ||
			    !kvs_size_add(hp->page_bytes, b->piece, &hp->page_bytes))
				return kvs_fail(EOVERFLOW);
		}
	}
	return 0;
}

/* Where each buffer's piece of a host page lies, once npages is known. */
static void hpool_offsets(struct kvs_hpool *hp)
{
	size_t off = 0;
	uint32_t b;

	for (b = 0; b < hp->nbuf; b++) {
		hp->buf[b].off = off;
		/* No overflow: the sum is at most npages x page_bytes, checked. */
		off += hp->layout == KVS_HPOOL_LAYER_FIRST ? hp->buf[b].piece * hp->npages
							  : hp->buf[b].piece;
	}
}

/* The one release path, for create's failures and for destroy. */
static void hpool_release(struct kvs_hpool *hp)
{
	struct kvs_hpool_xfer *x;
	uint32_t l;

	while ((x = hp->cache)) {
		hp->cache = x->next;
		for (l = 0; l < hp->layers; l++)
			kvs_event_destroy(x->ev[l]);
		free(x->ev);
		free(x->hpages);
		free(x);
	}
	if (hp->mem)
		kvs_drv_host_free(hp->drv, hp->mem);
	kvsi_fence_fini(&hp->fence);
	KVS_FREE_ALL(hp->buf, hp->stack, hp->state, hp->busy, hp->dmark);
	pthread_mutex_destroy(&hp->lock);
	free(hp);
}

/**
 * kvs_hpool_create() - create a host pool for a device pool.
 * @dev: the device pool; must outlive the host pool.
 * @attr: attributes, or NULL for the defaults of kvs_hpool_attr_init().
 *
 * Host memory comes from kvs_drv_host_alloc() on @dev's driver, in one
 * block of capacity x page_bytes bytes.  With streams, the pool keeps a
 * copy of the array and one driver event per stream, for the fence every
 * transfer sets after them.
 *
 * Context: MT-Safe.
 * Return: the pool, or NULL with errno EINVAL (NULL @dev, a layout not
 * known, not exactly one of ratio and bytes, a negative or non-finite ratio,
 * a size of no page or of more than INT32_MAX pages, NULL streams with
 * nstreams not 0), ENOMEM, EOVERFLOW, or the driver's errno from
 * kvs_drv_host_alloc() or kvs_event_create().
 */
KVS_EXPORT kvs_hpool_t *kvs_hpool_create(kvs_pool_t *dev, const kvs_hpool_attr_t *attr)
{
	const struct kvs_model *m;
	struct kvs_hpool *hp;
	kvs_hpool_attr_t def;
	uint64_t i;
	int e;

	if (!attr) {
		kvs_hpool_attr_init(&def);
		attr = &def;
	}
	if (!dev || (attr->layout != KVS_HPOOL_LAYER_FIRST &&
		     attr->layout != KVS_HPOOL_PAGE_FIRST) ||
	    (!attr->streams && attr->nstreams)) {
		errno = EINVAL;
		return NULL;
	}
	hp = calloc(1, sizeof(*hp));
	if (!hp)
		return NULL; /* errno ENOMEM */
	pthread_mutex_init(&hp->lock, NULL);
	if (kvsi_fence_init(&hp->fence, kvsi_pool_drv(dev), attr->streams, attr->nstreams,
			    NULL) < 0) {
		pthread_mutex_destroy(&hp->lock);
		free(hp);
		return NULL;
	}
	m = kvsi_pool_model(dev);
	hp->dev = dev;
	hp->drv = kvsi_pool_drv(dev);
	hp->slab = kvs_pool_slab(dev);
	hp->layout = attr->layout;
	hp->page_size = kvs_pool_page_size(dev);
	hp->layers = m->layers;
	hp->bpl = m->attn == KVS_ATTN_MLA ? 1 : 2;
	hp->nbuf = hp->layers * hp->bpl;
	hp->dev_npages = kvs_slab_capacity(hp->slab);
	if (hpool_pieces(hp) < 0 ||
	    hpool_pages(attr, hp->dev_npages, hp->page_bytes, &hp->npages) < 0)
		goto fail;
	if (!kvs_size_mul(hp->npages, hp->page_bytes, &hp->bytes)) {
		errno = ENOMEM; /* more memory than any machine has */
		goto fail;
	}
	hpool_offsets(hp);
	hp->stack = malloc(hp->npages * sizeof(*hp->stack));
	hp->state = calloc(hp->npages, sizeof(*hp->state));
	hp->busy = calloc(hp->npages, sizeof(*hp->busy));
	hp->dmark = calloc((hp->dev_npages + 63) / 64, sizeof(*hp->dmark));
	if (!hp->stack || !hp->state || !hp->busy || !hp->dmark) {
		errno = ENOMEM;
		goto fail;
	}
	if (kvs_drv_host_alloc(hp->drv, hp->bytes, (void **)&hp->mem) < 0) {
		hp->mem = NULL;
		goto fail;
	}
	/* Pages 0, 1, 2, ... come off the top first: runs for merged copies. */
	for (i = 0; i < hp->npages; i++)
		hp->stack[i] = (int32_t)(hp->npages - 1 - i);
	hp->nfree = hp->npages;
	return hp;
fail:
	e = errno;
	hpool_release(hp);
	errno = e;
	return NULL;
}

/**
 * kvs_hpool_destroy() - free the host pool and its memory.
 * @hp: pool, or NULL.
 *
 * Pages still allocated go with it.  Every transfer handle must have been
 * freed first.
 *
 * Context: MT-Unsafe (no other call on @hp may run or follow).
 * Return: 0, or -1 with errno EBUSY (a transfer handle is live; nothing is
 * freed).
 */
KVS_EXPORT int kvs_hpool_destroy(kvs_hpool_t *hp)
{
	if (!hp)
		return 0;
	pthread_mutex_lock(&hp->lock);
	if (hp->live) {
		pthread_mutex_unlock(&hp->lock);
		return kvs_fail(EBUSY);
	}
	pthread_mutex_unlock(&hp->lock);
	hpool_release(hp);
	return 0;
}

/**
 * kvs_hpool_capacity() - host pages in the pool.
 * @hp: pool.
 *
 * Context: MT-Safe.
 * Return: the count; 0 for NULL.
 */
KVS_EXPORT uint64_t kvs_hpool_capacity(const kvs_hpool_t *hp)
{
	return hp ? hp->npages : 0;
}

/**
 * kvs_hpool_available() - host pages free now.
 * @hp: pool.
 *
 * Context: MT-Safe (takes hp->lock).
 * Return: the count; 0 for NULL.
 */
KVS_EXPORT uint64_t kvs_hpool_available(kvs_hpool_t *hp)
{
	return hp ? kvs_locked_read(&hp->lock, &hp->nfree) : 0;
}

/**
 * kvs_hpool_pool() - the device pool a host pool serves.
 * @hp: pool.
 *
 * Context: MT-Safe.
 * Return: the device pool; NULL for NULL.
 */
KVS_EXPORT kvs_pool_t *kvs_hpool_pool(const kvs_hpool_t *hp)
{
	return hp ? hp->dev : NULL;
}

/* ------------------------------------------------------------ pages */

/**
 * kvs_hpool_alloc() - allocate @n host pages.
 * @hp: pool.
 * @n: pages.
 * @pages: receives n page indices.
 *
 * All or nothing.  Pages freed together come back in the order they were
 * given to kvs_hpool_free(), and a fresh pool gives 0, 1, 2, ...: runs of
 * consecutive pages, which transfers copy in one piece.
 *
 * Context: MT-Safe (takes hp->lock); never calls the driver.
 * Return: 0, or -1 with errno EINVAL (@hp NULL, or @pages NULL with @n not
 * 0) or ENOMEM (fewer than @n pages free; nothing allocated).
 */
KVS_EXPORT int kvs_hpool_alloc(kvs_hpool_t *hp, size_t n, int32_t *pages)
{
	size_t i;

	if (!hp || (!pages && n))
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hp->lock);
	if (n > hp->nfree) {
		hp->st[KVS_HPOOL_STAT_alloc_fail]++;
		pthread_mutex_unlock(&hp->lock);
		return kvs_fail(ENOMEM);
	}
	for (i = 0; i < n; i++) {
		int32_t p = hp->stack[--hp->nfree];

		hp->state[p] = HP_USED;
		pages[i] = p;
	}
	if (hp->npages - hp->nfree > hp->used_peak)
		hp->used_peak = hp->npages - hp->nfree;
	hp->st[KVS_HPOOL_STAT_allocs]++;
	pthread_mutex_unlock(&hp->lock);
	return 0;
}

/* Put the marks of pages[0 .. k - 1] back to HP_USED. */
static void unmark(struct kvs_hpool *hp, const int32_t *pages, size_t k)
{
	while (k--)
		hp->state[pages[k]] = HP_USED;
}

/*
 * Check that @pages are allocated host pages (and, with @distinct, none
 * twice) under hp->lock: the index of the first bad entry and *err its
 * errno, or @n when all are good.  No state is left changed.
 */
static size_t check_host(struct kvs_hpool *hp, size_t n, const int32_t *pages, bool distinct,
			 bool idle, int *err)
{
	size_t k;

	for (k = 0; k < n; k++) {
		int32_t p = pages[k];

		if (p < 0 || (uint64_t)p >= hp->npages || hp->state[p] != HP_USED) {
			*err = EINVAL; /* out of range, free, or (marked) given twice */
			break;
		}
		if (idle && hp->busy[p]) {
			*err = EBUSY;
			break;
		}
		if (distinct)
			hp->state[p] = HP_MARK;
	}
	if (distinct)
		unmark(hp, pages, k);
	return k;
}

/**
 * kvs_hpool_free() - free @n host pages.
 * @hp: pool.
 * @n: pages.
 * @pages: allocated pages, each once.
 *
 * All or nothing: if an entry is out of range, free, given twice, or busy
 * in a transfer whose completion the pool has not seen, nothing is freed.
 *
 * Context: MT-Safe (takes hp->lock); never allocates, never calls the
 * driver, never fails for valid input.
 * Return: 0, or -1 with errno EINVAL or EBUSY.
 */
KVS_EXPORT int kvs_hpool_free(kvs_hpool_t *hp, size_t n, const int32_t *pages)
{
	int err = 0;
	size_t k;

	if (!hp || (!pages && n))
		return kvs_fail(EINVAL);
	if (n > hp->npages)
		return kvs_fail(EINVAL); /* some page would be given twice */
	pthread_mutex_lock(&hp->lock);
	if (check_host(hp, n, pages, true, true, &err) < n) {
		pthread_mutex_unlock(&hp->lock);
		return kvs_fail(err);
	}
	/* Pushed last first, so that the next allocation gives them back in
	 * this order. */
	for (k = n; k-- > 0;) {
		hp->state[pages[k]] = HP_FREE;
		hp->stack[hp->nfree++] = pages[k];
	}
	hp->st[KVS_HPOOL_STAT_frees]++;
	pthread_mutex_unlock(&hp->lock);
	return 0;
}

/* The buffer of (@layer, @which), as kvs_pool_buffer() names it. */
static int buffer_index(const struct kvs_hpool *hp, uint32_t layer, int which, uint32_t *b)
{
	return kvsi_kv_buffer_index(hp->bpl == 1, hp->layers, layer, which, b);
}

static bool page_held(struct kvs_hpool *hp, int32_t page)
{
	bool ok;

	if (page < 0 || (uint64_t)page >= hp->npages)
		return false;
	pthread_mutex_lock(&hp->lock);
	ok = hp->state[page] == HP_USED;
	pthread_mutex_unlock(&hp->lock);
	return ok;
}

/**
 * kvs_hpool_page_ptr() - host address of one buffer's piece of a page.
 * @hp: pool.
 * @page: an allocated host page.
 * @layer: layer.
 * @which: KVS_KV_K or KVS_KV_V (MHA); KVS_KV_LATENT or KVS_KV_K (MLA).
 * @ptr: receives the address of the piece.
 * @bytes: receives its size, page_size x token_bytes (may be NULL).
 *
 * The piece holds the page's tokens in order, as the device buffer does.
 *
 * Context: MT-Safe (takes hp->lock).
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hpool_page_ptr(kvs_hpool_t *hp, int32_t page, uint32_t layer, int which,
				  void **ptr, size_t *bytes)
{
	uint32_t b;

	if (!hp || !ptr || buffer_index(hp, layer, which, &b) < 0 || !page_held(hp, page))
		return kvs_fail(EINVAL);
	*ptr = host_piece(hp, (uint32_t)page, b);
	if (bytes)
		*bytes = hp->buf[b].piece;
	return 0;
}

/**
 * kvs_hpool_page_bytes() - the whole of a PAGE_FIRST page.
 * @hp: pool.
 * @page: an allocated host page.
 * @ptr: receives its address.
 * @bytes: receives its size, every buffer's piece (may be NULL).
 *
 * Context: MT-Safe (takes hp->lock).
 * Return: 0, or -1 with errno EINVAL or ENOTSUP (the pool is LAYER_FIRST:
 * a page is not contiguous).
 */
KVS_EXPORT int kvs_hpool_page_bytes(kvs_hpool_t *hp, int32_t page, void **ptr, size_t *bytes)
{
	if (!hp || !ptr)
		return kvs_fail(EINVAL);
	if (hp->layout != KVS_HPOOL_PAGE_FIRST)
		return kvs_fail(ENOTSUP);
	if (!page_held(hp, page))
		return kvs_fail(EINVAL);
	*ptr = hp->mem + (size_t)page * hp->page_bytes;
	if (bytes)
		*bytes = hp->page_bytes;
	return 0;
}

size_t kvsi_hpool_page_bytes(const struct kvs_hpool *hp)
{
	return hp->page_bytes;
}

int kvsi_hpool_page_copy(struct kvs_hpool *hp, int32_t page, void *buf, bool to_buf)
{
	unsigned char *q = buf;
	uint32_t b;

	if (!page_held(hp, page))
		return kvs_fail(EINVAL);
	/* Buffer b = layer x (K, V): the page-first order of the pieces. */
	for (b = 0; buf && b < hp->nbuf; q += hp->buf[b].piece, b++) {
		if (to_buf)
			memcpy(q, host_piece(hp, (uint32_t)page, b), hp->buf[b].piece);
		else
			memcpy(host_piece(hp, (uint32_t)page, b), q, hp->buf[b].piece);
	}
	return 0;
}

/* ------------------------------------------------------------ transfers */

/* A handle with its events and room for @n host pages: from the cache, or
 * new.  Called without hp->lock (it may allocate and create events). */
static struct kvs_hpool_xfer *xfer_get(struct kvs_hpool *hp, size_t n)
{
	struct kvs_hpool_xfer *x;
	uint32_t l;

	pthread_mutex_lock(&hp->lock);
	x = hp->cache;
	if (x) {
		hp->cache = x->next;
		hp->ncache--;
	}
	pthread_mutex_unlock(&hp->lock);
	if (!x) {
		x = calloc(1, sizeof(*x));
		if (!x)
			goto nomem;
		x->hp = hp;
		x->ev = calloc(hp->layers, sizeof(*x->ev));
		if (!x->ev)
			goto nomem;
	}
	for (l = 0; l < hp->layers; l++)
		if (!x->ev[l] && kvs_event_create(hp->drv, &x->ev[l]) < 0)
			goto fail;
	if (n > x->cap) {
		int32_t *p = malloc(n * sizeof(*p));

		if (!p)
			goto nomem;
		free(x->hpages);
		x->hpages = p;
		x->cap = n;
	}
	x->n = 0;
	x->done = 0;
	x->state = XF_PENDING;
	x->err = 0;
	x->busy = false;
	x->next = NULL;
	return x;
nomem:
	errno = ENOMEM;
fail:
	if (x) {
		int e = errno;

		if (x->ev) {
			for (l = 0; l < hp->layers; l++)
				kvs_event_destroy(x->ev[l]);
			free(x->ev);
		}
		free(x->hpages);
		free(x);
		errno = e;
	}
	return NULL;
}

/* Back on the cache, or freed; @x holds no busy page.  Takes hp->lock. */
static void xfer_put(struct kvs_hpool *hp, struct kvs_hpool_xfer *x)
{
	uint32_t l;

	pthread_mutex_lock(&hp->lock);
	if (hp->ncache < XFER_CACHE_MAX) {
		x->next = hp->cache;
		hp->cache = x;
		hp->ncache++;
		x = NULL;
	}
	pthread_mutex_unlock(&hp->lock);
	if (x) {
		for (l = 0; l < hp->layers; l++)
			kvs_event_destroy(x->ev[l]);
		free(x->ev);
		free(x->hpages);
		free(x);
	}
}

/* Drop the busy counts @x holds; under hp->lock. */
static void xfer_unbusy(struct kvs_hpool *hp, struct kvs_hpool_xfer *x)
{
	size_t k;

	if (!x->busy)
		return;
	for (k = 0; k < x->n; k++)
		if (--hp->busy[x->hpages[k]] == 0)
			hp->nbusy--;
	x->busy = false;
}

/* The pool learnt that @x ended, well (@err 0) or not; under hp->lock. */
static void xfer_end(struct kvs_hpool *hp, struct kvs_hpool_xfer *x, int err)
{
	if (x->state != XF_PENDING)
		return;
	if (err) {
		x->state = XF_FAILED;
		x->err = err;
		hp->st[KVS_HPOOL_STAT_xfer_fail]++;
	} else {
		x->state = XF_DONE;
		x->done = hp->layers;
	}
	xfer_unbusy(hp, x);
}

/*
 * Validate a transfer's pages under hp->lock and, when they are good, hold
 * the host pages busy in @x.  @to_host: the host pages are the destination
 * (a backup), else the device pages are (a load); the destination's pages
 * must be distinct.  Device pages must be in range and held in the device
 * pool (a non-zero reference count).
 */
static int xfer_check(struct kvs_hpool *hp, struct kvs_hpool_xfer *x, const int32_t *dev,
		      const int32_t *host, size_t n, bool to_host)
{
	int err = EINVAL;
	size_t k, bad = n;

	for (k = 0; k < n && bad == n; k++) {
		int32_t p = dev[k];

		if (p < 0 || (uint64_t)p >= hp->dev_npages ||
		    kvs_slab_refcount(hp->slab, (uint32_t)p) <= 0)
			bad = k;
		else if (!to_host && bit_test(hp->dmark, (uint64_t)p))
			bad = k; /* a device destination given twice */
		else if (!to_host)
			bit_set(hp->dmark, (uint64_t)p);
	}
	if (!to_host) {
		/* Clear exactly the bits set: those of entries before the bad
		 * one (a twice-given entry's bit belongs to its first copy). */
		size_t set = bad == n ? n : bad;

		for (k = 0; k < set; k++)
			bit_clear(hp->dmark, (uint64_t)dev[k]);
	}
	if (bad < n)
		return kvs_fail(EINVAL);
	if (check_host(hp, n, host, to_host, false, &err) < n)
		return kvs_fail(err);
	for (k = 0; k < n; k++) {
		x->hpages[k] = host[k];
		if (hp->busy[host[k]]++ == 0)
			hp->nbusy++;
	}
	x->n = n;
	x->busy = true;
	return 0;
}

/*
 * Submit the copies of a validated transfer after the fence, one
 * submission per layer (every buffer's merged copies of the layer), each
 * recording x->ev[l].  Counts what was submitted in *copies and *bytes.
 * Return: 0, or -1 with errno ENOMEM (nothing submitted) or the driver's
 * at the first submission that failed.
 */
static int xfer_submit(struct kvs_hpool *hp, struct kvs_hpool_xfer *x, const int32_t *dev,
		       const int32_t *host, size_t n, bool to_host, uint64_t *copies,
		       uint64_t *bytes)
{
	kvs_copy_t *c;
	size_t cap;
	uint32_t l, i;
	int rc = 0;

	if (!kvs_size_mul(n, hp->bpl, &cap) || !(c = malloc(cap * sizeof(*c))))
		return kvs_fail(ENOMEM);
	if (kvsi_fence_order_copies(&hp->fence) < 0) {
		rc = -1;
		goto out;
	}
	for (l = 0; l < hp->layers && rc == 0; l++) {
		size_t nc = 0;
		uint64_t lbytes = 0;

		for (i = 0; i < hp->bpl; i++) {
			uint32_t b = l * hp->bpl + i;
			const struct hbuf *hb = &hp->buf[b];
			size_t k = 0;

			while (k < n) {
				kvs_devptr_t d = hb->dbase + (uint64_t)dev[k] * hb->piece;
				unsigned char *h = host_piece(hp, (uint32_t)host[k], b);
				size_t len = hb->piece, j = k + 1;

				while (j < n && hb->dbase + (uint64_t)dev[j] * hb->piece == d + len &&
				       host_piece(hp, (uint32_t)host[j], b) == h + len) {
					len += hb->piece;
					j++;
				}
				c[nc].dst = to_host ? (uintptr_t)h : d;
				c[nc].src = to_host ? d : (uintptr_t)h;
				c[nc].bytes = len;
				nc++;
				lbytes += len;
				k = j;
			}
		}
		rc = kvs_drv_copy_batch(hp->drv, to_host ? KVS_COPY_DTOH : KVS_COPY_HTOD, c, nc,
					x->ev[l]);
		if (rc == 0) {
			*copies += nc;
			*bytes += lbytes;
		}
	}
out:
	if (rc < 0) {
		int e = errno;

		free(c);
		return kvs_fail(e);
	}
	free(c);
	return 0;
}

static int xfer_wait_layer(struct kvs_hpool_xfer *x, uint32_t layer, bool block);

static int xfer_start(struct kvs_hpool *hp, const int32_t *dev, const int32_t *host, size_t n,
		      kvs_hpool_xfer_t **out, bool to_host)
{
	uint64_t copies = 0, bytes = 0;
	struct kvs_hpool_xfer *x;
	int rc;

	if (!hp || (n && (!dev || !host)))
		return kvs_fail(EINVAL);
	/* The destination's pages are distinct, so there are no more of them
	 * than the destination has (nothing of the arrays is read). */
	if (n > (to_host ? hp->npages : hp->dev_npages))
		return kvs_fail(EINVAL);
	x = xfer_get(hp, n);
	if (!x)
		return -1;
	pthread_mutex_lock(&hp->lock);
	rc = xfer_check(hp, x, dev, host, n, to_host);
	if (rc == 0)
		hp->live++;
	pthread_mutex_unlock(&hp->lock);
	if (rc < 0) {
		int e = errno;

		xfer_put(hp, x);
		return kvs_fail(e);
	}
	if (n == 0) {
		pthread_mutex_lock(&hp->lock);
		xfer_end(hp, x, 0);
		pthread_mutex_unlock(&hp->lock);
	} else if (xfer_submit(hp, x, dev, host, n, to_host, &copies, &bytes) < 0) {
		int e = errno;

		/* Copies already queued may still write pages that the caller
		 * may reuse as soon as this returns: wait for them (their own
		 * errors do not matter now). */
		(void)kvs_drv_synchronize(hp->drv);
		pthread_mutex_lock(&hp->lock);
		xfer_unbusy(hp, x);
		hp->live--;
		hp->st[KVS_HPOOL_STAT_submit_fail]++;
		hp->st[KVS_HPOOL_STAT_copies] += copies;
		hp->st[KVS_HPOOL_STAT_bytes_copied] += bytes;
		pthread_mutex_unlock(&hp->lock);
		xfer_put(hp, x);
		return kvs_fail(e);
	}
	pthread_mutex_lock(&hp->lock);
	hp->st[to_host ? KVS_HPOOL_STAT_backups : KVS_HPOOL_STAT_loads]++;
	hp->st[to_host ? KVS_HPOOL_STAT_backup_pages : KVS_HPOOL_STAT_load_pages] += n;
	hp->st[to_host ? KVS_HPOOL_STAT_backup_bytes : KVS_HPOOL_STAT_load_bytes] += bytes;
	hp->st[KVS_HPOOL_STAT_copies] += copies;
	hp->st[KVS_HPOOL_STAT_bytes_copied] += bytes;
	pthread_mutex_unlock(&hp->lock);
	if (out) {
		*out = x;
		return 0;
	}
	/* Synchronous: wait, then give the handle back. */
	rc = xfer_wait_layer(x, hp->layers - 1, true);
	{
		int e = errno;

		kvs_hpool_xfer_free(x);
		errno = e;
	}
	return rc < 0 ? -1 : 0;
}

/**
 * kvs_hpool_backup() - copy device pages to host pages.
 * @hp: pool.
 * @dev_pages: device pages held in the device pool.
 * @host_pages: allocated host pages, each once.
 * @n: pairs: dev_pages[i] is copied to host_pages[i].
 * @xfer: receives the transfer's handle; NULL: wait for the copies before
 *        returning.
 *
 * Context: MT-Safe (takes hp->lock, never across a driver call); does not
 * wait for the device unless @xfer is NULL or a submission fails.
 * Return: 0, or -1 with errno EINVAL, ENOMEM, or the driver's errno (a copy
 * could not be submitted; then nothing changed but the bytes of
 * @host_pages, and no copy of the call is still running).
 */
KVS_EXPORT int kvs_hpool_backup(kvs_hpool_t *hp, const int32_t *dev_pages,
				const int32_t *host_pages, size_t n, kvs_hpool_xfer_t **xfer)
{
	return xfer_start(hp, dev_pages, host_pages, n, xfer, true);
}

/**
 * kvs_hpool_load() - copy host pages to device pages, layer by layer.
 * @hp: pool.
 * @dev_pages: device pages held in the device pool, each once.
 * @host_pages: allocated host pages.
 * @n: pairs: host_pages[i] is copied to dev_pages[i].
 * @xfer: receives the transfer's handle; NULL: wait for the copies before
 *        returning.
 *
 * Layer l's copies are all submitted before layer l + 1's, each layer
 * ending with its own event: kvs_hpool_xfer_layer_wait() returns once its
 * layer has arrived.
 *
 * Context: MT-Safe, as kvs_hpool_backup().
 * Return: 0, or -1 with errno as kvs_hpool_backup() (with @dev_pages'
 * bytes unspecified after a failed submission).
 */
KVS_EXPORT int kvs_hpool_load(kvs_hpool_t *hp, const int32_t *dev_pages,
			      const int32_t *host_pages, size_t n, kvs_hpool_xfer_t **xfer)
{
	return xfer_start(hp, dev_pages, host_pages, n, xfer, false);
}

/*
 * Has layer @layer of @x arrived?  @block: wait for it.  1 (or 0 when
 * blocking) when it has, 0 when not yet, -1/errno when the transfer failed.
 * The event is queried with no lock held; what it says is recorded under
 * hp->lock.  Completed layers form a prefix: the queue runs in order.
 */
static int xfer_wait_layer(struct kvs_hpool_xfer *x, uint32_t layer, bool block)
{
	struct kvs_hpool *hp = x->hp;
	int r, e = 0;

	pthread_mutex_lock(&hp->lock);
	if (x->state == XF_FAILED) {
		e = x->err;
		pthread_mutex_unlock(&hp->lock);
		return kvs_fail(e);
	}
	if (layer < x->done) {
		pthread_mutex_unlock(&hp->lock);
		return block ? 0 : 1;
	}
	pthread_mutex_unlock(&hp->lock);
	r = block ? kvs_event_wait(x->ev[layer]) : kvs_event_query(x->ev[layer]);
	if (r < 0)
		e = errno ? errno : EIO;
	pthread_mutex_lock(&hp->lock);
	if (r < 0) {
		xfer_end(hp, x, e);
		e = x->err; /* another thread may have ended it first */
	} else if (block || r == 1) {
		if (x->done < layer + 1)
			x->done = layer + 1;
		if (x->done == hp->layers)
			xfer_end(hp, x, 0);
	}
	if (x->state == XF_FAILED && r >= 0) {
		/* Another thread saw the failure while this one waited. */
		e = x->err;
		r = -1;
	}
	pthread_mutex_unlock(&hp->lock);
	if (r < 0)
		return kvs_fail(e);
	return r;
}

/**
 * kvs_hpool_xfer_layer_query() - has one layer of a transfer arrived?
 * @xfer: transfer.
 * @layer: layer.
 *
 * Context: MT-Safe; never blocks (except on the fault driver, whose events
 * wait for its queue).
 * Return: 1 arrived, 0 not yet, -1 with errno EINVAL or the driver's errno
 * (the transfer failed: no layer of it may be used).
 */
KVS_EXPORT int kvs_hpool_xfer_layer_query(kvs_hpool_xfer_t *x, uint32_t layer)
{
	if (!x || layer >= x->hp->layers)
		return kvs_fail(EINVAL);
	return xfer_wait_layer(x, layer, false);
}

/**
 * kvs_hpool_xfer_layer_wait() - wait for one layer of a transfer.
 * @xfer: transfer.
 * @layer: layer.
 *
 * Returns once layer @layer's bytes (and so those of every layer before
 * it) have arrived, while later layers may still be copying.
 *
 * Context: MT-Safe; blocks.
 * Return: 0, or -1 with errno EINVAL or the driver's errno (the transfer
 * failed).
 */
KVS_EXPORT int kvs_hpool_xfer_layer_wait(kvs_hpool_xfer_t *x, uint32_t layer)
{
	if (!x || layer >= x->hp->layers)
		return kvs_fail(EINVAL);
	return xfer_wait_layer(x, layer, true);
}

/**
 * kvs_hpool_xfer_layer_stream_wait() - make an engine stream wait for one
 * layer of a transfer, on the device.
 * @xfer: transfer.
 * @layer: layer.
 * @stream: the engine's stream (as kvs_event_stream_wait() takes it).
 *
 * Work queued on @stream after the call starts once layer @layer (and so
 * every layer before it) has arrived; the caller does not wait
 * (kvs_event_stream_wait() of the layer's event).  A driver without
 * KVS_DRV_CAP_STREAM_WAIT has no engine streams to hold back: the call
 * waits for the layer on the calling thread, as kvs_hpool_xfer_layer_wait()
 * does.  The pool learns of the completion only from a query or a wait.
 *
 * Context: MT-Safe; blocks only without KVS_DRV_CAP_STREAM_WAIT.
 * Return: 0, or -1 with errno EINVAL or the driver's errno (the transfer
 * failed, as far as the pool knows).
 */
KVS_EXPORT int kvs_hpool_xfer_layer_stream_wait(kvs_hpool_xfer_t *x, uint32_t layer,
						kvs_stream_t stream)
{
	struct kvs_hpool *hp;
	int e;

	if (!x || layer >= x->hp->layers)
		return kvs_fail(EINVAL);
	hp = x->hp;
	if (!(kvs_drv_caps(hp->drv) & KVS_DRV_CAP_STREAM_WAIT))
		return xfer_wait_layer(x, layer, true);
	pthread_mutex_lock(&hp->lock);
	e = x->state == XF_FAILED ? x->err : 0;
	pthread_mutex_unlock(&hp->lock);
	if (e)
		return kvs_fail(e);
	return kvs_event_stream_wait(x->ev[layer], stream);
}

/**
 * kvs_hpool_xfer_query() - has a whole transfer completed?
 * @xfer: transfer.
 *
 * Context: MT-Safe; never blocks (but see kvs_hpool_xfer_layer_query()).
 * Return: 1 complete, 0 not yet, -1 with errno EINVAL or the driver's
 * errno (the transfer failed).
 */
KVS_EXPORT int kvs_hpool_xfer_query(kvs_hpool_xfer_t *x)
{
	if (!x)
		return kvs_fail(EINVAL);
	return xfer_wait_layer(x, x->hp->layers - 1, false);
}

/**
 * kvs_hpool_xfer_wait() - wait for a whole transfer.
 * @xfer: transfer.
 *
 * Context: MT-Safe; blocks.
 * Return: 0, or -1 with errno EINVAL or the driver's errno (the transfer
 * failed: the destination pages hold no valid data).
 */
KVS_EXPORT int kvs_hpool_xfer_wait(kvs_hpool_xfer_t *x)
{
	if (!x)
		return kvs_fail(EINVAL);
	return xfer_wait_layer(x, x->hp->layers - 1, true);
}

/**
 * kvs_hpool_xfer_free() - free a transfer handle.
 * @xfer: transfer, or NULL.
 *
 * A transfer not yet seen complete is waited for first, so that the pool
 * knows when its pages are no longer copied.
 *
 * Context: MT-Safe with other handles; the last call on @xfer.
 * Return: 0.
 */
KVS_EXPORT int kvs_hpool_xfer_free(kvs_hpool_xfer_t *x)
{
	struct kvs_hpool *hp;
	bool pending;

	if (!x)
		return 0;
	hp = x->hp;
	pthread_mutex_lock(&hp->lock);
	pending = x->state == XF_PENDING;
	pthread_mutex_unlock(&hp->lock);
	if (pending)
		(void)xfer_wait_layer(x, hp->layers - 1, true);
	pthread_mutex_lock(&hp->lock);
	xfer_unbusy(hp, x); /* already done by the wait; kept for safety */
	hp->live--;
	pthread_mutex_unlock(&hp->lock);
	xfer_put(hp, x);
	return 0;
}

/* ------------------------------------------------------------ statistics */

static void hpool_fill(void *obj, uint64_t *v)
{
	struct kvs_hpool *hp = obj;

	pthread_mutex_lock(&hp->lock);
	memcpy(v, hp->st, sizeof(hp->st));
	v[KVS_HPOOL_STAT_pages] = hp->npages;
	v[KVS_HPOOL_STAT_pages_used] = hp->npages - hp->nfree;
	v[KVS_HPOOL_STAT_pages_used_peak] = hp->used_peak;
	v[KVS_HPOOL_STAT_pages_busy] = hp->nbusy;
	v[KVS_HPOOL_STAT_xfers_live] = hp->live;
	pthread_mutex_unlock(&hp->lock);
}

static void hpool_header(void *obj, char *line, size_t size)
{
	const struct kvs_hpool *hp = obj;

	snprintf(line, size,
		 "hpool layout %s page_size %u layers %u pages %llu page_bytes %zu bytes %zu\n",
		 hp->layout == KVS_HPOOL_PAGE_FIRST ? "page_first" : "layer_first",
		 hp->page_size, hp->layers, (unsigned long long)hp->npages, hp->page_bytes,
		 hp->bytes);
}

/**
 * kvs_hpool_stat() - one statistic; kvs_hpool_stat_get() reads one by name,
 * kvs_hpool_stat_name() names one, kvs_hpool_stats_print() prints every one
 * through a callback (a header line, then "name value  kind # description"
 * lines), all through lib/stats.c.
 * @hp: pool.
 * @item: statistic.
 *
 * Context: MT-Safe (takes hp->lock to read, not while calling write_cb).
 * Return: kvs_hpool_stat(): its value, 0 for NULL or an unknown item;
 * kvs_hpool_stat_name(): a static string, NULL for an unknown item; the
 * others: 0, or -1 with errno EINVAL (a NULL argument) or ENOENT (no such
 * statistic).
 */
KVSI_STATS_FAMILY(hpool, KVS_HPOOL_STATS, hpool_fill, hpool_header, &kvsi_style_kind16, NULL, kvs_hpool_t,
		  enum kvs_hpool_stat);
