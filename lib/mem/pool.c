/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/pool.c - the KV pool: SGLang's token_to_kv_pool and its allocator over
 * the slab allocator.  The model shapes and the planner that sizes a pool
 * are lib/mem/plan.c's.
 *
 * Layout.  MHA: buffer 2l holds layer l's keys and buffer 2l + 1 its values,
 * each its own virtual range, so that every layer's pages stay dense in that
 * layer's range (the layout attention kernels want; kvcached measured an
 * all-layers-in-one-chunk layout 31% slower end to end).  MLA: buffer l holds
 * layer l's latent vectors (kv_lora_rank + qk_rope_head_dim elements).  A
 * token's location is loc = page * page_size + offset; its bytes in buffer b
 * are at base[b] + loc * token_bytes[b].
 *
 * Allocation is in pages (page_size 1: token slots), with SGLang's interface:
 * alloc n tokens returns n locations, page by page; free takes locations and
 * drops one reference per page (the tokens of a page given together count
 * once).  Pages carry reference counts so the prefix cache can share them.
 *
 * Budget.  A pool never maps more than its budget: the kv_bytes of the plan
 * it is built from (kvs_pool_attr_t.plan), or the caller's max_mapped when
 * that is smaller.  The budget goes to the slab allocator as its
 * max_mapped, and the slab allocator holds only the slabs that fit within
 * it; capacity and availability are the slab allocator's, in tokens, so
 * neither counts a page that could not be mapped (rounding a plan's tokens
 * up to whole slabs would promise up to a slab that is not there).
 *
 * Locking: none of its own on these paths.  The pool's fields are set at
 * creation and only read afterwards; every mutable state lives in the slab
 * allocator, whose calls are MT-Safe.  pool->elastic only serializes the
 * elastic-memory calls of lib/elastic/elastic.c (level 0 of the lock order).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvslab/pool.h"
#include "mem/cacheops.h"
#include "mem/kvbuf.h"

struct kvs_pool {
	kvs_drv_t *drv;
	kvs_slab_t *slab;
	kvs_model_t model;
	uint32_t page_size, nbuf;
	uint64_t capacity;		/* tokens */
	size_t *token_bytes;
	pthread_mutex_t elastic;	/* lib/elastic/elastic.c's calls, one at a time */
	/* The caches over the pool (lib/mem/cacheops.h), under elastic. */
	struct cache_reg {
		const struct kvsi_cache_ops *ops;
		void *cache;
	} *caches;
	unsigned ncaches, capcaches;
};

/* ------------------------------------------------------------------ pool */

/**
 * kvs_pool_attr_init() - pool defaults: page_size 1 and the slab
 * allocator's defaults (see kvs_slab_attr_init(3)).
 * @attr: attributes; model, and max_tokens or plan, must then be set.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_pool_attr_init(kvs_pool_attr_t *attr)
{
	kvs_slab_attr_t s;

	KVS_ATTR_CLEAR(attr);
	kvs_slab_attr_init(&s);
	attr->page_size = 1;
	attr->min_empty = s.min_empty;
	attr->max_empty = s.max_empty;
	attr->chunk_pool = s.chunk_pool;
	attr->magazine = s.magazine;
	attr->slab_granules = s.slab_granules;
	attr->decay_ms = (uint32_t)s.decay_ms;
	return 0;
}

/*
 * The pool's capacity in tokens and its budget of mapped bytes.  A plan's
 * kv_bytes are a budget: its tokens are whole pages but not whole slabs, and
 * rounding them up to slabs would map up to a slab more than planned (104
 * MiB over an 80 GiB plan of Llama 3 8B) and count pages that an engine
 * admitting requests by kvs_pool_available() can never get.  The smaller of
 * the plan's bytes and the caller's max_mapped wins; the slab allocator then
 * holds only the slabs that fit within it.  A plan that disagrees with the
 * model, or with itself, is refused rather than trusted.
 */
static int pool_budget(const kvs_pool_attr_t *a, size_t cell, uint64_t *max_tokens,
		       size_t *budget)
{
	const kvs_plan_t *plan = a->plan;
	uint64_t kv;

	*max_tokens = a->max_tokens;
	*budget = a->max_mapped;
	if (plan) {
		if (plan->cell_size != cell || plan->max_total_tokens == 0 ||
		    __builtin_mul_overflow(plan->max_total_tokens, (uint64_t)cell, &kv) ||
		    kv != plan->kv_bytes)
			return kvs_fail(EINVAL);
		if (!*max_tokens)
			*max_tokens = plan->max_total_tokens;
		if (!*budget || plan->kv_bytes < *budget)
			*budget = plan->kv_bytes;
	}
	return *max_tokens ? 0 : kvs_fail(EINVAL);
}

/**
 * kvs_pool_create() - create a KV pool on @drv.
 * @drv: driver; must outlive the pool.
 * @attr: model shape, page size, capacity in tokens, slab knobs, and the
 *        plan it is built from, if any.
 *
 * The pool never maps more than its budget: the plan's kv_bytes, or
 * max_mapped when that is given and smaller.  Its capacity is max_tokens
 * (default: the plan's max_total_tokens) rounded up to whole pages and then
 * to whole slabs, but only as many slabs as fit within the budget, so that
 * kvs_pool_capacity() and kvs_pool_available() never count a page that
 * could not be mapped.
 *
 * Context: MT-Safe.
 * Return: the pool, or NULL with errno EINVAL (bad shape, no max_tokens and
 * no plan, a plan of another shape, a budget of less than one slab, capacity
 * beyond INT32_MAX tokens), EOVERFLOW (the cell size, the buffer count or a
 * buffer's bytes do not fit their types), ENOMEM, or the driver's errno.
 */
KVS_EXPORT kvs_pool_t *kvs_pool_create(kvs_drv_t *drv, const kvs_pool_attr_t *a)
{
	uint64_t pages, max_tokens;
	struct kvs_pool *p;
	kvs_slab_attr_t sa;
	size_t cell, budget;
	uint32_t b;

	if (!drv || !a || a->page_size == 0) {
		errno = EINVAL;
		return NULL;
	}
	cell = kvs_model_cell_size(&a->model);
	if (!cell)
		return NULL; /* EINVAL or EOVERFLOW from kvs_model_cell_size() */
	if (pool_budget(a, cell, &max_tokens, &budget) < 0)
		return NULL;
	if (a->model.attn == KVS_ATTN_MHA && a->model.layers > UINT32_MAX / 2) {
		errno = EOVERFLOW; /* 2 * layers buffers do not fit a uint32_t */
		return NULL;
	}
	/* Rounded up without adding first: max_tokens may be near 2^64. */
	pages = max_tokens / a->page_size + (max_tokens % a->page_size != 0);
	if (pages > INT32_MAX / a->page_size) {
		errno = EINVAL; /* pages * page_size locations would not fit an int32_t */
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	p->drv = drv;
	p->model = a->model;
	p->page_size = a->page_size;
	p->nbuf = a->model.layers * (a->model.attn == KVS_ATTN_MLA ? 1 : 2);
	p->token_bytes = calloc(p->nbuf, sizeof(size_t));
	if (!p->token_bytes) {
		free(p);
		errno = ENOMEM;
		return NULL;
	}
	for (b = 0; b < p->nbuf; b++)
		p->token_bytes[b] = cell / p->nbuf; /* every buffer takes the same share */
	kvs_slab_attr_init(&sa);
	sa.page_size = a->page_size;
	sa.nbuffers = p->nbuf;
	sa.token_bytes = p->token_bytes;
	sa.capacity_pages = pages;
	sa.max_mapped = budget; /* the slab counts only the slabs that fit */
	sa.min_empty = a->min_empty;
	sa.max_empty = a->max_empty;
	sa.chunk_pool = a->chunk_pool;
	sa.magazine = a->magazine;
	sa.slab_granules = a->slab_granules ? a->slab_granules : 1;
	sa.flags = a->slab_flags;
	sa.shrink_quiet = a->shrink_quiet;
	sa.decay_ms = a->decay_ms;
	sa.streams = a->streams;
	sa.nstreams = a->nstreams;
	sa.fence = a->fence;
	p->slab = kvs_slab_create(drv, &sa);
	if (!p->slab) {
		int e = errno;

		free(p->token_bytes);
		free(p);
		errno = e;
		return NULL;
	}
	p->capacity = kvs_slab_capacity(p->slab) * p->page_size;
	if (p->capacity > (uint64_t)INT32_MAX + 1) {
		/* Whole slabs went past what an int32 location can name. */
		kvs_slab_destroy(p->slab);
		free(p->token_bytes);
		free(p);
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_init(&p->elastic, NULL);
	return p;
}

/**
 * kvs_pool_destroy() - free the pool, its slab allocator and its memory.
 * @pool: pool, or NULL.
 *
 * Context: MT-Unsafe.
 * Return: 0, or -1 with errno from the driver (everything is freed anyway).
 */
KVS_EXPORT int kvs_pool_destroy(kvs_pool_t *p)
{
	int rc;

	if (!p)
		return 0;
	rc = kvs_slab_destroy(p->slab);
	pthread_mutex_destroy(&p->elastic);
	free(p->caches);
	free(p->token_bytes);
	free(p);
	return rc;
}


/**
 * kvs_pool_alloc() - allocate @n token locations.
 * @pool: pool.
 * @n: tokens; a multiple of the page size.
 * @locs: receives n locations: whole pages, each page's tokens in order.
 *
 * All or nothing.  Each page comes with one reference.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (n not a page multiple) or ENOMEM.
 */
KVS_EXPORT int kvs_pool_alloc(kvs_pool_t *p, size_t n, int32_t *locs)
{
	uint32_t ps, *pages;
	size_t npages, i, j, len;

	if (!p || (!locs && n) || n % p->page_size)
		return kvs_fail(EINVAL);
	if (n == 0)
		return 0;
	ps = p->page_size;
	npages = n / ps;
	if (npages == 1) {
		int64_t pg = kvs_slab_alloc(p->slab);

		if (pg < 0)
			return -1;
		for (j = 0; j < ps; j++)
			locs[j] = (int32_t)((uint64_t)pg * ps + j);
		return 0;
	}
	/* Pages land in the tail of @locs and are expanded forwards: page i is
	 * read before slots i * ps .. i * ps + ps - 1 are written, and those
	 * never reach a later page's slot. */
	pages = (uint32_t *)(locs + (n - npages));
	if (kvs_slab_alloc_bulk(p->slab, npages, pages) < 0)
		return -1;
	if (ps == 1)
		return 0;	/* the pages are the locations */
	/* The slab hands out runs of consecutive pages, whose tokens are one
	 * run of locations: expand a run at a time.  Run [i, i + len) writes
	 * up to slot (i + len) * ps - 1, below the slot of page i + len, and
	 * its pages were read before. */
	for (i = 0; i < npages; i += len) {
		len = kvsi_run_len(pages + i, npages - i);
		/* Locations are below INT32_MAX: as unsigned, the same bits. */
		kvsi_iota_u32((uint32_t *)locs + i * ps, (uint32_t)((uint64_t)pages[i] * ps),
			      len * ps);
	}
	return 0;
}

/* The page of each run of adjacent tokens of one page in @locs, in turn:
 * *i is advanced past the run.  -1 for a negative location. */
static int64_t next_page(const struct kvs_pool *p, size_t n, const int32_t *locs, size_t *i)
{
	uint32_t pg;

	if (locs[*i] < 0)
		return -1;
	pg = (uint32_t)locs[*i] / p->page_size;
	(*i)++;
	while (p->page_size > 1 && *i < n && locs[*i] >= 0 &&
	       (uint32_t)locs[*i] / p->page_size == pg)
		(*i)++;
	return pg;
}

/* Add a reference to the page of each run; all or nothing, no allocation. */
static int pool_ref_locs(struct kvs_pool *p, size_t n, const int32_t *locs)
{
	size_t i = 0;

	while (i < n) {
		size_t start = i, j = 0;
		int64_t pg = next_page(p, n, locs, &i);
		int e;

		if (pg >= 0 && kvs_slab_ref(p->slab, (uint32_t)pg) == 0)
			continue;
		e = pg < 0 ? EINVAL : errno;
		/* Give back the references taken on the runs before this one:
		 * the caller holds each page, so this never frees one. */
		while (j < start)
			kvs_slab_free(p->slab, (uint32_t)next_page(p, n, locs, &j));
		return kvs_fail(e);
	}
	return 0;
}

static int pool_pages_call(struct kvs_pool *p, size_t n, const int32_t *locs, int ref)
{
	/* No array of more than SIZE_MAX / 4 entries of int32_t exists. */
	if (!p || (!locs && n) || n > SIZE_MAX / sizeof(*locs))
		return kvs_fail(EINVAL);
	if (n == 0)
		return 0;
	if (ref)
		return pool_ref_locs(p, n, locs);
	return kvsi_slab_free_locs(p->slab, n, locs, p->page_size);
}

/**
 * kvs_pool_free() - drop one reference to the pages of @locs.
 * @pool: pool.
 * @n: entries.
 * @locs: token locations; adjacent tokens of one page count once, so a
 *        request's whole list of locations frees each page once.
 *
 * All or nothing: an invalid entry (negative, out of range, a free page)
 * changes nothing.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL or ENOMEM.
 */
KVS_EXPORT int kvs_pool_free(kvs_pool_t *p, size_t n, const int32_t *locs)
{
	return pool_pages_call(p, n, locs, 0);
}

/**
 * kvs_pool_ref() - add one reference to the pages of @locs.
 * @pool: pool.
 * @n: entries.
 * @locs: token locations, counted per page as for kvs_pool_free().
 *
 * All or nothing.  The caller must hold a reference to each page already.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL, EOVERFLOW or ENOMEM.
 */
KVS_EXPORT int kvs_pool_ref(kvs_pool_t *p, size_t n, const int32_t *locs)
{
	return pool_pages_call(p, n, locs, 1);
}

/**
 * kvs_pool_available() - tokens that can still be allocated.
 * @pool: pool.
 *
 * The slab allocator's free pages in tokens; pages of slabs beyond the
 * budget are not in the count, since they could never be mapped.
 *
 * Context: MT-Safe.
 * Return: the count; 0 for NULL.
 */
KVS_EXPORT uint64_t kvs_pool_available(kvs_pool_t *p)
{
	return p ? kvs_slab_available(p->slab) * p->page_size : 0;
}

/**
 * kvs_pool_capacity() - tokens the pool can hold.
 * @pool: pool.
 *
 * Context: MT-Safe.
 * Return: max_tokens rounded up to whole slabs, but no more slabs than fit
 * within the pool's budget of mapped bytes; 0 for NULL.
 */
KVS_EXPORT uint64_t kvs_pool_capacity(const kvs_pool_t *p)
{
	return p ? p->capacity : 0;
}

/**
 * kvs_pool_page_size() - tokens per page.
 * @pool: pool.
 *
 * Context: MT-Safe.
 * Return: the page size; 0 for NULL.
 */
KVS_EXPORT uint32_t kvs_pool_page_size(const kvs_pool_t *p)
{
	return p ? p->page_size : 0;
}

/**
 * kvs_pool_slab() - the slab allocator under the pool, for statistics.
 * @pool: pool.
 *
 * Context: MT-Safe.
 * Return: the allocator; NULL for NULL.
 */
KVS_EXPORT kvs_slab_t *kvs_pool_slab(kvs_pool_t *p)
{
	return p ? p->slab : NULL;
}

struct kvs_drv *kvsi_pool_drv(const struct kvs_pool *p)
{
	return p->drv;
}

const struct kvs_model *kvsi_pool_model(const struct kvs_pool *p)
{
	return &p->model;
}

/* ---------------------------------------------------- registered caches */

int kvsi_pool_cache_add(struct kvs_pool *p, const struct kvsi_cache_ops *ops, void *cache)
{
	size_t cap = p->capcaches;
	struct cache_reg *nc;

	pthread_mutex_lock(&p->elastic);
	nc = kvsi_grow(p->caches, &cap, p->ncaches, sizeof(*nc));
	if (!nc) {
		pthread_mutex_unlock(&p->elastic);
		return kvs_fail(ENOMEM);
	}
	p->caches = nc;
	p->capcaches = (unsigned)cap;
	p->caches[p->ncaches++] = (struct cache_reg){ops, cache};
	pthread_mutex_unlock(&p->elastic);
	return 0;
}

void kvsi_pool_cache_del(struct kvs_pool *p, void *cache)
{
	unsigned i;

	pthread_mutex_lock(&p->elastic);
	for (i = 0; i < p->ncaches; i++) {
		if (p->caches[i].cache == cache) {
			memmove(&p->caches[i], &p->caches[i + 1],
				(p->ncaches - i - 1) * sizeof(p->caches[0]));
			p->ncaches--;
			break;
		}
	}
	pthread_mutex_unlock(&p->elastic);
}

unsigned kvsi_pool_ncaches(struct kvs_pool *p)
{
	return p->ncaches;
}

void *kvsi_pool_cache(struct kvs_pool *p, unsigned i, const struct kvsi_cache_ops **ops)
{
	if (i >= p->ncaches)
		return NULL;
	*ops = p->caches[i].ops;
	return p->caches[i].cache;
}

pthread_mutex_t *kvsi_pool_elastic(struct kvs_pool *p)
{
	return &p->elastic;
}

int kvsi_kv_buffer_index(bool mla, uint32_t layers, uint32_t layer, int which, uint32_t *b)
{
	if (layer >= layers)
		return kvs_fail(EINVAL);
	if (mla) {
		if (which != KVS_KV_LATENT && which != KVS_KV_K)
			return kvs_fail(EINVAL);
		*b = layer;
	} else {
		if (which != KVS_KV_K && which != KVS_KV_V)
			return kvs_fail(EINVAL);
		*b = 2 * layer + (uint32_t)which;
	}
	return 0;
}

static int buffer_index(const struct kvs_pool *p, uint32_t layer, int which, uint32_t *b)
{
	if (!p)
		return kvs_fail(EINVAL);
	return kvsi_kv_buffer_index(p->model.attn == KVS_ATTN_MLA, p->model.layers, layer, which, b);
}

/**
 * kvs_pool_buffer() - device pointer and stride of one layer's buffer.
 * @pool: pool.
 * @layer: layer index.
 * @which: KVS_KV_K or KVS_KV_V (MHA); KVS_KV_LATENT (MLA).
 * @ptr: receives the buffer's base: token loc is at ptr + loc * stride.
 * @token_stride: receives the bytes of one token (may be NULL).
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_pool_buffer(const kvs_pool_t *p, uint32_t layer, int which, kvs_devptr_t *ptr,
			       size_t *token_stride)
{
	uint32_t b;

	if (!ptr || buffer_index(p, layer, which, &b) < 0)
		return kvs_fail(EINVAL);
	*ptr = kvs_slab_buffer(p->slab, b);
	if (token_stride)
		*token_stride = p->token_bytes[b];
	return 0;
}

static int kv_copy(struct kvs_pool *p, uint32_t layer, int32_t loc, size_t n, void *k, void *v,
		   int to_device)
{
	int which[2] = {KVS_KV_K, KVS_KV_V};
	void *host[2] = {k, v};
	int nb = p && p->model.attn == KVS_ATTN_MLA ? 1 : 2, i;

	/* n is compared with what is left past loc, so that loc + n cannot wrap. */
	if (!p || loc < 0 || n == 0 || (uint64_t)loc >= p->capacity ||
	    n > p->capacity - (uint64_t)loc || !k || (nb == 2 && !v))
		return kvs_fail(EINVAL);
	for (i = 0; i < nb; i++) {
		kvs_devptr_t base;
		size_t stride;
		int rc;

		if (kvs_pool_buffer(p, layer, which[i], &base, &stride) < 0)
			return -1;
		base += (uint64_t)loc * stride;
		rc = to_device ? kvs_drv_copy_htod(p->drv, base, host[i], n * stride, NULL)
			       : kvs_drv_copy_dtoh(p->drv, host[i], base, n * stride, NULL);
		if (rc < 0) {
			int e = errno;

			kvs_drv_synchronize(p->drv); /* an earlier copy may use the caller's buffer */
			return kvs_fail(e);
		}
	}
	return kvs_drv_synchronize(p->drv);
}

/**
 * kvs_pool_set_kv() - write the KV bytes of tokens loc .. loc + n - 1.
 * @pool: pool.
 * @layer: layer.
 * @loc: first token location; the range must lie in allocated pages.
 * @n: tokens.
 * @k: n * stride bytes of keys (MLA: latent vectors).
 * @v: n * stride bytes of values (MHA); ignored for MLA.
 *
 * A synchronous copy through the driver, for tests and tools.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL or EFAULT (memory not mapped).
 */
KVS_EXPORT int kvs_pool_set_kv(kvs_pool_t *p, uint32_t layer, int32_t loc, size_t n,
			       const void *k, const void *v)
{
	return kv_copy(p, layer, loc, n, (void *)k, (void *)v, 1);
}

/**
 * kvs_pool_get_kv() - read the KV bytes of tokens loc .. loc + n - 1.
 * @pool: pool.
 * @layer: layer.
 * @loc: first token location.
 * @n: tokens.
 * @k: receives n * stride bytes of keys (MLA: latent vectors).
 * @v: receives n * stride bytes of values (MHA); ignored for MLA.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL or EFAULT.
 */
KVS_EXPORT int kvs_pool_get_kv(kvs_pool_t *p, uint32_t layer, int32_t loc, size_t n, void *k,
			       void *v)
{
	return kv_copy(p, layer, loc, n, k, v, 0);
}
