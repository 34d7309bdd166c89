/* SPDX-License-Identifier: MIT */
/*
 * lib/flow/flow.c - request flows: what SGLang's ScheduleBatch and tree cache do
 * with the pool, the request table and the radix cache.
 *
 * Ownership of a request's row.  Positions [0, prefix_len) hold locations
 * owned by the radix tree: the request holds a lock on the node that ends
 * there, which keeps them from being evicted.  Positions [prefix_len,
 * kv_len) hold locations the request allocated and owns (one pool reference
 * per page).  prefix_len is a multiple of the page size; kv_len need not
 * be, and then the request's last page has room for the next tokens.
 *
 * All or nothing.  A batch's extend or decode takes its request slots and
 * all its pages in one allocation each, evicting from the tree first when
 * the pool is short; if memory is still short, every lock and slot taken
 * for the batch is given back and the call fails with ENOMEM.
 *
 * Freeing never fails.  kvs_flow_release() and kvs_flow_cache_finished()
 * allocate nothing: they read a request's row into the flow's own buffer,
 * sized at creation for the table's longest row, and free through
 * kvs_pool_free(), which allocates nothing either.  When the tree cannot
 * take a finished request's tokens (its insert runs out of memory), they
 * are freed instead of cached: nothing is lost, the call succeeds.
 *
 * A batch names each request once.  The flows stamp every request of a
 * call with the call's number (a field of kvs_req_t they own) and refuse a
 * batch that names one twice, in O(n) and without allocating.
 *
 * Tiers.  A flow created by kvs_flow_create_tiered() serves the same calls
 * over a hierarchical radix cache (kvs_hiradix_t), as SGLang's scheduler
 * drives its HiRadixCache.  At admission a request matches across tiers and
 * locks the deepest node found (req->hi_node): its device prefix is the
 * tree's, and the tokens found only on the host (req->host_hit_len) are
 * loaded back (kvs_hiradix_load_back(), all or nothing) before the rest is
 * allocated; a load the cache skips (below its threshold) or cannot fit
 * leaves those tokens to compute, on pages the request owns, and the insert
 * at caching re-materialises the tombstones with them.  A load is
 * asynchronous: the flow keeps one record per load it submitted (the
 * cache's transfer handle, the locked node, the request) until the cache is
 * seen to have taken the load in, and kvs_flow_wait_layer() waits on them
 * per layer.  The handle is the cache's (it frees it when it takes the load
 * in, at a poll, an eviction, or a match or insert through the chain), so
 * after every call into the cache the flow asks the node
 * (kvs_hiradix_node_info()): no longer loading means taken in, on the
 * device means it succeeded.  A record still loading holds a valid handle,
 * as long as the cache is called only through the flow meanwhile (the rule
 * of kvs_hiradix_load_back(3)).  A load that failed before its request was
 * placed is computed instead; one that failed later marks its request,
 * which kvs_flow_wait_layer(), the caching calls and release then drop.
 * Before an insert, the flow waits for its loads: an insert through a
 * chain whose load fails would otherwise re-materialise it with the
 * request's stale locations.
 *
 * Locking (the order is in common/common.h):
 * flow->lock serializes the flows' calls, so one flow object may be shared by
 * threads; the tree, the table and the pool have their own.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "kvslab/flow.h"

/* A load back the flow submitted and has not seen taken in (see "Tiers"). */
struct fload {
	kvs_hpool_xfer_t *x;		/* the cache's handle: valid while node loads */
	kvs_hiradix_node_t *node;	/* the request's locked node (load's last) */
	kvs_req_t *req;
	bool admitting;			/* inside the prepare that submitted it */
	bool failed;			/* its copy failed: the request is to drop */
};

struct kvs_flow {
	kvs_pool_t *pool;
	kvs_reqtab_t *tab;
	kvs_radix_t *radix;		/* NULL for a tiered flow */
	kvs_hiradix_t *hr;		/* NULL for a radix flow */
	uint32_t ps;
	pthread_mutex_t lock;
	int32_t *buf;			/* 2 rows of the table, for the free paths */
	struct fload *ld;		/* loads in flight, nld of ldcap */
	size_t nld, ldcap;
};

/* The request's fields moved into _reserved keep its size (and ABI). */
_Static_assert(sizeof(void *) != 8 || sizeof(kvs_req_t) == 80, "kvs_req_t changed size");

/* The stamp of a request in a batch call (see "A batch names each
 * request once"); call numbers are unique across flows. */
#define REQ_STAMP(r) ((r)->_reserved[0])
static _Atomic uint64_t next_call = 1;

/**
 * kvs_req_init() - start a request.
 * @req: request to fill.
 * @tokens: its token ids (caller-owned; generated ids are appended by the
 *          caller, so keep room).
 * @ntokens: tokens to have KV for after the first extend (the prompt, or
 *           its first chunk under chunked prefill).
 * @extra_key: 0, or a key requests must share to share cached KV.
 * @priority: carried into the tree (see KVS_EVICT_PRIORITY).
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_req_init(kvs_req_t *req, const int32_t *tokens, uint32_t ntokens,
			    uint64_t extra_key, int priority)
{
	if (!req || (!tokens && ntokens))
		return kvs_fail(EINVAL);
	memset(req, 0, sizeof(*req));
	req->tokens = tokens;
	req->ntokens = ntokens;
	req->extra_key = extra_key;
	req->priority = priority;
	req->slot = -1;
	return 0;
}

/* The parts both kinds of flow share. */
static struct kvs_flow *flow_new(kvs_pool_t *pool, kvs_reqtab_t *tab)
{
	struct kvs_flow *f = calloc(1, sizeof(*f));

	if (f)
		f->buf = malloc(2 * ((size_t)kvs_reqtab_max_context(tab) + 1) * sizeof(int32_t));
	if (!f || !f->buf) {
		free(f);
		errno = ENOMEM;
		return NULL;
	}
	f->pool = pool;
	f->tab = tab;
	f->ps = kvs_pool_page_size(pool);
	pthread_mutex_init(&f->lock, NULL);
	return f;
}

/**
 * kvs_flow_create() - tie a pool, a request table and a radix cache.
 * @pool: the KV pool.
 * @tab: the request table.
 * @radix: the prefix cache over @pool (may be a disabled one).
 *
 * Context: MT-Safe.
 * Return: the flow object, or NULL with errno EINVAL or ENOMEM.
 */
KVS_EXPORT kvs_flow_t *kvs_flow_create(kvs_pool_t *pool, kvs_reqtab_t *tab, kvs_radix_t *radix)
{
	struct kvs_flow *f;

	/* A cache over another pool would free that pool's pages on eviction
	 * and keep this one's: refused. */
	if (!pool || !tab || !radix || kvs_radix_page_size(radix) != kvs_pool_page_size(pool) ||
	    kvs_radix_pool(radix) != pool) {
		errno = EINVAL;
		return NULL;
	}
	f = flow_new(pool, tab);
	if (f)
		f->radix = radix;
	return f;
}

/**
 * kvs_flow_create_tiered() - tie a pool, a request table and a
 * hierarchical radix cache (device and host tiers).
 * @pool: the KV pool.
 * @tab: the request table.
 * @hr: the tiered cache over @pool (kvs_hiradix_create()).
 *
 * The flow calls work on it as on a radix flow, matching across tiers,
 * loading back at admission and inserting at caching (see "Tiers").
 * Requests must have extra_key 0: the tiered cache has no extra keys.
 *
 * Context: MT-Safe.
 * Return: the flow object, or NULL with errno EINVAL or ENOMEM.
 */
KVS_EXPORT kvs_flow_t *kvs_flow_create_tiered(kvs_pool_t *pool, kvs_reqtab_t *tab,
					      kvs_hiradix_t *hr)
{
	struct kvs_flow *f;

	if (!pool || !tab || !hr || kvs_hiradix_pool(hr) != pool) {
		errno = EINVAL;
		return NULL;
	}
	f = flow_new(pool, tab);
	if (f)
		f->hr = hr;
	return f;
}

/**
 * kvs_flow_destroy() - free the flow object (not what it ties together).
 * @flow: flow, or NULL.
 *
 * Context: MT-Unsafe.
 * Return: 0.
 */
KVS_EXPORT int kvs_flow_destroy(kvs_flow_t *f)
{
	if (!f)
		return 0;
	pthread_mutex_destroy(&f->lock);
	free(f->ld); /* the handles are the cache's */
	free(f->buf);
	free(f);
	return 0;
}

/* The usable cached prefix of @n tokens: a request always computes at
 * least its last token (SGLang and vLLM do the same), so at most n - 1,
 * page-aligned down. */
static size_t match_cap(const struct kvs_flow *f, uint32_t n)
{
	return n ? (size_t)(n - 1) / f->ps * f->ps : 0;
}

static ssize_t match_tiered(struct kvs_flow *f, kvs_req_t *req, size_t cap);

/**
 * kvs_flow_match() - how much of @req's tokens the cache would give it.
 * @flow: flow.
 * @req: request (tokens and ntokens set).
 *
 * A read-only, lock-free match (kvs_radix_match_ro()) capped at
 * ntokens - 1 tokens, page-aligned down, for admission decisions.
 *
 * Context: MT-Safe.
 * Return: the prefix length, or -1 with errno EINVAL or ENOMEM.
 */
KVS_EXPORT ssize_t kvs_flow_match(kvs_flow_t *f, kvs_req_t *req)
{
	int32_t stackbuf[1024], *buf = stackbuf;
	size_t cap;
	ssize_t m;

	if (!f || !req || (!req->tokens && req->ntokens))
		return kvs_fail(EINVAL);
	cap = match_cap(f, req->ntokens);
	if (f->hr)
		return match_tiered(f, req, cap);
	if (cap > 1024) {
		buf = malloc(cap * sizeof(int32_t));
		if (!buf)
			return kvs_fail(ENOMEM);
	}
	m = kvs_radix_match_ro(f->radix, req->extra_key, req->tokens, cap, buf);
	if (buf != stackbuf)
		free(buf);
	return m;
}

static void req_reset(kvs_req_t *req)
{
	req->slot = -1;
	req->prefix_len = req->kv_len = 0;
	req->last_node = NULL;
	req->loaded_len = 0;
	req->hi_node = NULL;
}

/* ------------------------------------------------------------ tiers */

static void load_drop(struct kvs_flow *f, size_t i)
{
	f->ld[i] = f->ld[--f->nld];
}

static void load_drop_req(struct kvs_flow *f, const kvs_req_t *req)
{
	size_t i = f->nld;

	while (i-- > 0)
		if (f->ld[i].req == req)
			load_drop(f, i);
}

/* A load of @r failed before @r was placed: compute those tokens instead
 * (the cache has made the chain tombstones again and freed its pages; the
 * request keeps its lock on the last node). */
static void load_revert(kvs_req_t *r)
{
	r->prefix_len -= r->loaded_len;
	r->kv_len = r->prefix_len;
	r->loaded_len = 0;
}

/* After every call into the cache: which loads has it taken in?  Flow
 * lock held. */
static void loads_check(struct kvs_flow *f)
{
	size_t i = f->nld;

	while (i-- > 0) {
		struct fload *l = &f->ld[i];
		kvs_hiradix_node_info_t in;

		if (l->failed || kvs_hiradix_node_info(f->hr, l->node, &in) < 0 || in.loading)
			continue;
		if (in.on_device) {
			load_drop(f, i); /* arrived: nothing more to wait for */
		} else if (l->admitting) {
			load_revert(l->req);
			load_drop(f, i);
		} else {
			l->failed = true;
		}
	}
}

/* Drop what @req holds (see release_locked()). */
static void release_locked(struct kvs_flow *f, kvs_req_t *req);

/* Release the requests whose load failed after they were placed.  Returns
 * how many.  Flow lock held. */
static size_t loads_reap(struct kvs_flow *f)
{
	size_t i = f->nld, n = 0;

	while (i-- > 0) {
		if (!f->ld[i].failed)
			continue;
		release_locked(f, f->ld[i].req); /* drops the record */
		n++;
		i = f->nld; /* the array moved: scan again */
	}
	return n;
}

/* Wait for @req's loads (every load when @req is NULL) and let the cache
 * take them in.  Flow lock held. */
static void loads_settle(struct kvs_flow *f, const kvs_req_t *req)
{
	size_t i;
	bool any = false;

	for (i = 0; i < f->nld; i++) {
		if (f->ld[i].failed || (req && f->ld[i].req != req))
			continue;
		if (kvs_hpool_xfer_wait(f->ld[i].x) < 0)
			f->ld[i].failed = true;
		any = true;
	}
	if (any)
		(void)kvs_hiradix_poll(f->hr);
	loads_check(f);
}

static ssize_t match_tiered(struct kvs_flow *f, kvs_req_t *req, size_t cap)
{
	kvs_hiradix_match_t m;
	ssize_t r;

	if (req->extra_key)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&f->lock);
	r = kvs_hiradix_match(f->hr, req->tokens, cap, NULL, &m);
	if (f->nld)
		loads_check(f);
	if (r >= 0 && req->slot < 0)
		req->host_hit_len = (uint32_t)m.host_hit;
	pthread_mutex_unlock(&f->lock);
	return r;
}

/* Match @r across tiers, lock what it found, load back the host part into
 * @locs after the device part.  Returns the device prefix, or -1. */
static ssize_t admit_tiered(struct kvs_flow *f, kvs_req_t *r, int32_t *locs)
{
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x = NULL;
	ssize_t dev, got = 0;

	dev = kvs_hiradix_match_lock(f->hr, r->tokens, match_cap(f, r->ntokens), locs, &m);
	loads_check(f);
	if (dev < 0)
		return -1;
	r->hi_node = m.last_node;
	r->host_hit_len = (uint32_t)m.host_hit;
	r->loaded_len = 0;
	if (m.host_hit) {
		got = kvs_hiradix_load_back(f->hr, m.last_node, 0, locs + dev, &x);
		loads_check(f);
		if (got < 0 || (size_t)got != m.host_hit || !x) {
			/* No room, or the copy could not be submitted: compute them.
			 * (A partial chain cannot be: the chain ends the device
			 * prefix.) */
			got = 0;
		} else {
			struct fload *l = &f->ld[f->nld++]; /* room made by the caller */

			l->x = x;
			l->node = m.last_node;
			l->req = r;
			l->admitting = true;
			l->failed = false;
		}
	}
	r->loaded_len = (uint32_t)got;
	return dev + got;
}

/* Unlock what @req holds in either cache. */
static void req_unlock(struct kvs_flow *f, kvs_req_t *req);

/* Allocate @want tokens for a tiered flow, evicting from the device tier
 * (and the host tier, where write back needs room for its backups). */
static int alloc_tiered(struct kvs_flow *f, size_t want, int32_t *locs)
{
	long waits = 0;

	for (;;) {
		uint64_t avail;
		ssize_t got;

		if (kvs_pool_alloc(f->pool, want, locs) == 0)
			return 0;
		if (errno != ENOMEM)
			return -1;
		avail = kvs_pool_available(f->pool);
		got = kvs_hiradix_evict_device(f->hr, want > avail ? want - avail : f->ps);
		loads_check(f);
		if (got == 0) {
			(void)kvs_hiradix_evict_host(f->hr, want);
			got = kvs_hiradix_evict_device(f->hr, want);
			loads_check(f);
		}
		if (got < 0)
			return -1;
		if (got == 0) {
			kvs_hiradix_usage_t u;

			/* Backups in flight lock their nodes: a scheduler short of
			 * memory waits for the copy engine. */
			if (kvs_hiradix_usage(f->hr, &u) < 0)
				return -1;
			if ((u.backups_pending == 0 && u.loads_pending == 0) || ++waits > 1000000) {
				errno = ENOMEM;
				return -1;
			}
			nanosleep(&(struct timespec){0, 20000}, NULL);
			(void)kvs_hiradix_poll(f->hr);
			loads_check(f);
		}
	}
}

/**
 * kvs_flow_wait_layer() - wait until layer @layer of every load back the
 * flow submitted has arrived (call it before the forward pass reads the
 * layer).
 * @flow: flow.
 * @layer: layer index.
 *
 * A load whose copy failed is not usable in any layer: its request is
 * released (as kvs_flow_release() does: req->slot becomes -1) and the
 * call fails; the caller drops it from the batch and admits it again.
 * Nothing else changes.  On a radix flow, or with no load in flight,
 * returns 0 at once.
 *
 * Context: MT-Safe (serialized per flow); the cache must not be called
 * other than through the flow between the prepare and the last wait.
 * Return: 0, or -1 with errno EINVAL (no flow, a layer the pool does not
 * have; nothing changed) or the copy's errno (EIO, EFAULT) when requests
 * were released.
 */
KVS_EXPORT int kvs_flow_wait_layer(kvs_flow_t *f, uint32_t layer)
{
	kvs_devptr_t ptr;
	size_t i, rel;
	int err = 0;

	if (!f)
		return kvs_fail(EINVAL);
	if (kvs_pool_buffer(f->pool, layer, KVS_KV_K, &ptr, NULL) < 0 &&
	    kvs_pool_buffer(f->pool, layer, KVS_KV_LATENT, &ptr, NULL) < 0)
		return kvs_fail(EINVAL);
	if (!f->hr)
		return 0;
	pthread_mutex_lock(&f->lock);
	for (i = 0; i < f->nld; i++) {
		if (f->ld[i].failed)
			continue;
		if (kvs_hpool_xfer_layer_wait(f->ld[i].x, layer) < 0) {
			if (!err)
				err = errno ? errno : EIO;
			f->ld[i].failed = true;
		}
	}
	rel = loads_reap(f);
	pthread_mutex_unlock(&f->lock);
	if (rel)
		return kvs_fail(err ? err : EIO);
	return 0;
}

/* Does @reqs name a request twice?  Stamps each with this call's number.
 * Lock held. */
static bool batch_has_twice(struct kvs_flow *f, kvs_req_t *const *reqs, size_t n)
{
	uint64_t call = atomic_fetch_add_explicit(&next_call, 1, memory_order_relaxed);
	size_t i;

	(void)f;
	for (i = 0; i < n; i++) {
		if (REQ_STAMP(reqs[i]) == call)
			return true;
		REQ_STAMP(reqs[i]) = call;
	}
	return false;
}

/* Pages needed to give @req locations up to @upto tokens. */
static size_t pages_needed(const struct kvs_flow *f, uint32_t kv_len, uint32_t upto)
{
	uint32_t have = (kv_len + f->ps - 1) / f->ps * f->ps; /* room in the last page */

	return upto > have ? (upto - have + f->ps - 1) / f->ps : 0;
}

/* Allocate @pages pages into @locs, evicting from the tree when short. */
static int alloc_pages(struct kvs_flow *f, size_t pages, int32_t *locs)
{
	size_t want = pages * f->ps;
	uint64_t avail;

	if (want == 0)
		return 0;
	if (f->hr)
		return alloc_tiered(f, want, locs);
	avail = kvs_pool_available(f->pool);
	if (avail < want)
		kvs_radix_evict(f->radix, want - avail);
	if (kvs_pool_alloc(f->pool, want, locs) == 0)
		return 0;
	if (errno != ENOMEM)
		return -1;
	/* Available counts pages other threads cache; evict what it takes. */
	kvs_radix_evict(f->radix, want);
	return kvs_pool_alloc(f->pool, want, locs);
}

/* Give @req locations for [kv_len, upto): the rest of its last page first,
 * then whole pages from @pages (advanced).  Appends to @out. */
static int place(struct kvs_flow *f, kvs_req_t *req, uint32_t upto, const int32_t **pages,
		 int32_t *out, int32_t *scratch)
{
	uint32_t pos, k = 0, first = req->kv_len;
	int32_t last = 0;

	if (req->kv_len % f->ps)
		kvs_reqtab_read(f->tab, (uint32_t)req->slot, req->kv_len - 1, 1, &last);
	for (pos = req->kv_len; pos < upto; pos++) {
		int32_t loc;

		if (pos % f->ps) {
			loc = last + 1;
		} else {
			loc = **pages;
			*pages += f->ps;
		}
		last = loc;
		scratch[k++] = loc;
	}
	if (k && kvs_reqtab_write(f->tab, (uint32_t)req->slot, first, k, scratch) < 0)
		return -1;
	if (out)
		memcpy(out, scratch, k * sizeof(int32_t));
	req->kv_len = upto;
	return 0;
}

/**
 * kvs_flow_prepare_extend() - give a batch of requests their KV locations
 * for the tokens up to each request's ntokens.
 * @flow: flow.
 * @reqs: requests; a request without a slot is new: it gets a slot, its
 *        cached prefix (capped at ntokens - 1) is matched, locked and
 *        written into its row; a request with a slot continues (chunked
 *        prefill).
 * @n: requests in the batch.
 * @out_locs: receives the new locations, request after request (room for
 *            the sum of ntokens - cached prefix), or NULL.
 *
 * Evicts from the tree when the pool is short.  All or nothing.
 *
 * Context: MT-Safe (serialized per flow).
 * Return: new locations given out, or -1 with errno ENOMEM (nothing
 * changed), ERANGE (ntokens beyond the table's context), EINVAL.
 */
KVS_EXPORT ssize_t kvs_flow_prepare_extend(kvs_flow_t *f, kvs_req_t *const *reqs, size_t n,
					   int32_t *out_locs)
{
	uint32_t *slots = NULL, *befores = NULL, nnew = 0, maxctx, maxn = 0;
	int32_t *pages = NULL, *scratch = NULL;
	const int32_t *cursor;
	size_t i, total_pages = 0, given = 0, j = 0;
	int err = 0;

	if (!f || (!reqs && n))
		return kvs_fail(EINVAL);
	maxctx = kvs_reqtab_max_context(f->tab);
	for (i = 0; i < n; i++) {
		if (!reqs[i] || (!reqs[i]->tokens && reqs[i]->ntokens) ||
		    (f->hr && reqs[i]->extra_key))
			return kvs_fail(EINVAL);
		if (reqs[i]->ntokens > maxctx)
			return kvs_fail(ERANGE);
		if (reqs[i]->slot < 0)
			nnew++;
		else if (reqs[i]->ntokens < reqs[i]->kv_len)
			return kvs_fail(EINVAL);
		if (reqs[i]->ntokens > maxn)
			maxn = reqs[i]->ntokens;
	}
	pthread_mutex_lock(&f->lock);
	if (batch_has_twice(f, reqs, n)) {
		pthread_mutex_unlock(&f->lock);
		return kvs_fail(EINVAL);
	}
	slots = calloc(nnew + 1, sizeof(*slots));
	befores = calloc(n + 1, sizeof(*befores));
	scratch = malloc(((size_t)maxn + f->ps) * sizeof(int32_t));
	if (!slots || !befores || !scratch) {
		err = ENOMEM;
		goto out;
	}
	if (f->hr && f->nld + nnew > f->ldcap) {
		struct fload *nl = realloc(f->ld, (f->nld + nnew) * sizeof(*nl));

		if (!nl) {
			err = ENOMEM;
			goto out;
		}
		f->ld = nl;
		f->ldcap = f->nld + nnew;
	}
	if (f->hr) {
		/* Where a scheduler polls: completed backups become valid. */
		(void)kvs_hiradix_poll(f->hr);
		loads_check(f);
	}
	if (nnew && kvs_reqtab_alloc(f->tab, nnew, slots) < 0) {
		err = errno;
		goto out;
	}
	/* New requests: match, lock, write the cached prefix. */
	for (i = 0; i < n; i++) {
		kvs_req_t *r = reqs[i];
		kvs_radix_node_t *last;
		ssize_t m;

		if (r->slot >= 0)
			continue;
		/* Matched and locked in one writer section: no eviction on
		 * another thread can take the prefix before it is locked. */
		if (f->hr) {
			last = NULL;
			m = admit_tiered(f, r, scratch);
		} else {
			m = kvs_radix_match_lock(f->radix, r->extra_key, r->tokens,
						 match_cap(f, r->ntokens), scratch, &last);
		}
		if (m < 0) {
			err = errno;
			if (r->hi_node)
				kvs_hiradix_unlock(f->hr, r->hi_node);
			r->hi_node = NULL;
			goto undo;
		}
		r->slot = (int32_t)slots[j++];
		r->last_node = last;
		r->prefix_len = r->kv_len = (uint32_t)m;
		if (m && kvs_reqtab_write(f->tab, (uint32_t)r->slot, 0, (uint32_t)m, scratch) < 0) {
			err = errno;
			goto undo;
		}
	}
	/* A tiered flow: an eviction may see a load of this batch fail, and
	 * its request then computes those tokens too: allocate again. */
	for (;;) {
		size_t again = 0;
		int32_t *np;

		total_pages = 0;
		for (i = 0; i < n; i++)
			total_pages += pages_needed(f, reqs[i]->kv_len, reqs[i]->ntokens);
		np = realloc(pages, (total_pages * f->ps + 1) * sizeof(int32_t));
		if (!np) {
			err = ENOMEM;
			goto undo;
		}
		pages = np;
		if (alloc_pages(f, total_pages, pages) < 0) {
			err = errno;
			goto undo;
		}
		for (i = 0; i < n; i++)
			again += pages_needed(f, reqs[i]->kv_len, reqs[i]->ntokens);
		if (again == total_pages)
			break;
		kvs_pool_free(f->pool, total_pages * f->ps, pages);
	}
	cursor = pages;
	for (i = 0; i < n; i++) {
		uint32_t before = reqs[i]->kv_len;

		befores[i] = before;
		if (place(f, reqs[i], reqs[i]->ntokens, &cursor, out_locs ? out_locs + given : NULL,
			  scratch) < 0) {
			/* The row could not be written: give back every page of this
			 * call and the positions handed out so far. */
			err = errno;
			kvs_pool_free(f->pool, total_pages * f->ps, pages);
			while (i-- > 0)
				reqs[i]->kv_len = befores[i];
			goto undo;
		}
		given += reqs[i]->kv_len - before;
	}
	for (i = 0; i < f->nld; i++)
		f->ld[i].admitting = false; /* placed: a failure now drops them */
	goto out;
undo:
	/* Give back what this call took for new requests. */
	for (i = 0; i < n; i++) {
		kvs_req_t *r = reqs[i];
		size_t k;

		for (k = 0; k < j; k++)
			if (r->slot == (int32_t)slots[k])
				break;
		if (k == j)
			continue;
		if (f->hr)
			load_drop_req(f, r); /* the load goes on; the cache owns it */
		req_unlock(f, r);
		req_reset(r);
	}
	for (i = 0; i < nnew; i++)
		kvs_reqtab_free(f->tab, slots[i]);
out:
	pthread_mutex_unlock(&f->lock);
	free(slots);
	free(befores);
	free(pages);
	free(scratch);
	if (err)
		return kvs_fail(err);
	return (ssize_t)given;
}

/**
 * kvs_flow_prepare_decode() - one new location per request, for the token
 * at position kv_len (the one just generated, whose id the caller appended).
 * @flow: flow.
 * @reqs: running requests (each has a slot).
 * @n: requests.
 * @out_locs: receives one location per request, or NULL.
 *
 * A request whose last page is full gets a new page; evicts from the tree
 * when the pool is short.  All or nothing.  Afterwards ntokens == kv_len.
 *
 * Context: MT-Safe (serialized per flow).
 * Return: 0, or -1 with errno ENOMEM, ERANGE (row full) or EINVAL.
 */
KVS_EXPORT int kvs_flow_prepare_decode(kvs_flow_t *f, kvs_req_t *const *reqs, size_t n,
				       int32_t *out_locs)
{
	int32_t *pages = NULL, scratch[2];
	const int32_t *cursor;
	size_t i, total = 0;
	uint32_t maxctx;

	if (!f || (!reqs && n))
		return kvs_fail(EINVAL);
	maxctx = kvs_reqtab_max_context(f->tab);
	for (i = 0; i < n; i++) {
		if (!reqs[i] || reqs[i]->slot < 0)
			return kvs_fail(EINVAL);
		if (reqs[i]->kv_len + 1 > maxctx)
			return kvs_fail(ERANGE);
		total += reqs[i]->kv_len % f->ps == 0;
	}
	pthread_mutex_lock(&f->lock);
	if (batch_has_twice(f, reqs, n)) {
		pthread_mutex_unlock(&f->lock);
		return kvs_fail(EINVAL);
	}
	if (f->hr) {
		(void)kvs_hiradix_poll(f->hr);
		loads_check(f);
	}
	pages = malloc((total * f->ps + 1) * sizeof(int32_t));
	if (!pages || alloc_pages(f, total, pages) < 0) {
		int e = pages ? errno : ENOMEM;

		pthread_mutex_unlock(&f->lock);
		free(pages);
		return kvs_fail(e);
	}
	cursor = pages;
	for (i = 0; i < n; i++) {
		if (place(f, reqs[i], reqs[i]->kv_len + 1, &cursor, out_locs ? out_locs + i : NULL,
			  scratch) < 0) {
			int e = errno;

			/* Undo the call: its pages back, its positions taken back. */
			kvs_pool_free(f->pool, total * f->ps, pages);
			while (i-- > 0) {
				reqs[i]->kv_len--;
				reqs[i]->ntokens = reqs[i]->kv_len;
			}
			pthread_mutex_unlock(&f->lock);
			free(pages);
			return kvs_fail(e);
		}
		reqs[i]->ntokens = reqs[i]->kv_len;
	}
	pthread_mutex_unlock(&f->lock);
	free(pages);
	return 0;
}

/* Insert the first kv_len tokens of @req; free the request's duplicates.
 * With @lock, the node ending them is locked in the same writer section
 * (kvs_radix_insert_lock()), so no eviction can take them before the
 * caller reads their locations back.  Returns the page-aligned length
 * inserted, or -1. */
static ssize_t cache_prefix(struct kvs_flow *f, kvs_req_t *req, int32_t *buf,
			    kvs_radix_node_t **lock, kvs_hiradix_node_t **hlock)
{
	uint32_t n = req->kv_len, aligned = n / f->ps * f->ps;
	ssize_t got;

	if (kvs_reqtab_read(f->tab, (uint32_t)req->slot, 0, n, buf) < 0)
		return -1;
	if (f->hr) {
		/* Write through backs the new nodes up; a later poll makes the
		 * copies valid. */
		if (hlock)
			got = kvs_hiradix_insert_lock(f->hr, req->tokens, aligned, buf, hlock);
		else
			got = kvs_hiradix_insert(f->hr, req->tokens, aligned, buf, NULL);
		loads_check(f);
	} else if (lock)
		got = kvs_radix_insert_lock(f->radix, req->extra_key, req->tokens, aligned, buf,
					    req->priority, lock);
	else
		got = kvs_radix_insert(f->radix, req->extra_key, req->tokens, aligned, buf,
				       req->priority, NULL);
	if (got < 0)
		return -1;
	/* [0, prefix_len) were the tree's own; [prefix_len, got) duplicate it. */
	if ((uint32_t)got > req->prefix_len)
		kvs_pool_free(f->pool, (size_t)got - req->prefix_len, buf + req->prefix_len);
	return aligned;
}

static void req_unlock(struct kvs_flow *f, kvs_req_t *req)
{
	if (req->last_node)
		kvs_radix_unlock(f->radix, req->last_node);
	if (req->hi_node)
		kvs_hiradix_unlock(f->hr, req->hi_node);
	req->last_node = NULL;
	req->hi_node = NULL;
}

/* Drop what @req holds: the locations it owns, its lock and its slot.
 * Never allocates.  Lock held. */
static void release_locked(struct kvs_flow *f, kvs_req_t *req)
{
	uint32_t own = req->kv_len - req->prefix_len;

	if (f->hr)
		load_drop_req(f, req); /* a load in flight goes on: the cache's */
	if (own && kvs_reqtab_read(f->tab, (uint32_t)req->slot, req->prefix_len, own, f->buf) == 0)
		kvs_pool_free(f->pool, own, f->buf);
	req_unlock(f, req);
	kvs_reqtab_free(f->tab, (uint32_t)req->slot);
	req_reset(req);
}

/* Before an insert: wait for @req's load and release the request if it
 * failed (then true).  Flow lock held. */
static bool tiered_settle(struct kvs_flow *f, kvs_req_t *req)
{
	size_t i;

	loads_settle(f, req);
	for (i = 0; i < f->nld; i++)
		if (f->ld[i].req == req && f->ld[i].failed) {
			release_locked(f, req);
			return true;
		}
	return false;
}

/**
 * kvs_flow_cache_finished() - a request finished: cache its tokens, free
 * what the tree already had and its partial last page, release its slot
 * and its lock.
 * @flow: flow.
 * @req: a request with a slot; its first kv_len tokens are cached.
 *
 * Never allocates memory of its own and never fails for valid input: when
 * the tree cannot take the tokens (its insert fails: out of memory), the
 * request's own locations are freed instead of cached, as
 * kvs_flow_release() does.
 *
 * Context: MT-Safe (serialized per flow).
 * Return: 0 (the request is reset), or -1 with errno EINVAL (no flow, no
 * request, or a request without a slot; nothing changes).
 */
KVS_EXPORT int kvs_flow_cache_finished(kvs_flow_t *f, kvs_req_t *req)
{
	ssize_t aligned;

	if (!f || !req || req->slot < 0)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&f->lock);
	if (f->hr && tiered_settle(f, req)) {
		pthread_mutex_unlock(&f->lock);
		return 0; /* its load failed: released, nothing to cache */
	}
	aligned = cache_prefix(f, req, f->buf, NULL, NULL);
	if (aligned < 0) {
		/* Not cached: give back what the request owns, keep nothing. */
		release_locked(f, req);
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	if ((uint32_t)aligned < req->kv_len) /* the partial last page */
		kvs_pool_free(f->pool, req->kv_len - (size_t)aligned, f->buf + aligned);
	req_unlock(f, req);
	kvs_reqtab_free(f->tab, (uint32_t)req->slot);
	req_reset(req);
	pthread_mutex_unlock(&f->lock);
	return 0;
}

/**
 * kvs_flow_cache_unfinished() - chunked prefill: cache what is computed so
 * far and hold on to it.
 * @flow: flow.
 * @req: a request with a slot.
 *
 * Inserts the first kv_len tokens, frees the request's duplicates, matches
 * again, rewrites the row with the tree's locations, and moves the lock to
 * the new last node; prefix_len becomes the page-aligned kv_len.
 *
 * On a disabled cache there is nothing to cache and the call changes
 * nothing.
 *
 * Context: MT-Safe (serialized per flow).
 * Return: 0, or -1 with errno EINVAL or ENOMEM (the request is unchanged),
 * or, when the row cannot be rewritten after the insert, the row's error
 * with the request released (as kvs_flow_release() does).
 */
KVS_EXPORT int kvs_flow_cache_unfinished(kvs_flow_t *f, kvs_req_t *req)
{
	kvs_radix_node_t *last = NULL;
	kvs_hiradix_node_t *hlast = NULL;
	int32_t *buf, *nl;
	ssize_t aligned, m;
	int err = 0;

	if (!f || !req || req->slot < 0)
		return kvs_fail(EINVAL);
	if (f->radix && kvs_radix_disabled(f->radix))
		return 0; /* nothing is cached: the request keeps what it holds */
	pthread_mutex_lock(&f->lock);
	if (f->hr && tiered_settle(f, req)) {
		err = EIO; /* its load failed: released */
		goto out;
	}
	buf = f->buf;
	nl = buf + kvs_reqtab_max_context(f->tab) + 1;
	aligned = cache_prefix(f, req, buf, f->hr ? NULL : &last, f->hr ? &hlast : NULL);
	if (aligned < 0) {
		err = errno;
		goto out;
	}
	/* The inserted tokens are locked: read the tree's locations of them
	 * (a match that ends where the insert ended splits nothing). */
	if (f->hr) {
		m = kvs_hiradix_match(f->hr, req->tokens, (size_t)aligned, nl, NULL);
		loads_check(f);
	} else {
		m = kvs_radix_match(f->radix, req->extra_key, req->tokens, (size_t)aligned, nl,
				    NULL);
	}
	if (m != aligned ||
	    ((uint32_t)m > req->prefix_len &&
	     kvs_reqtab_write(f->tab, (uint32_t)req->slot, req->prefix_len,
			      (uint32_t)m - req->prefix_len, nl + req->prefix_len) < 0)) {
		/* The row still names the duplicates that just went back: the
		 * request cannot go on.  Release it whole, as a preemption does:
		 * the tree has [0, aligned), the request its partial page. */
		err = m < 0 ? errno : m != aligned ? EIO : errno;
		if (f->hr && hlast)
			kvs_hiradix_unlock(f->hr, hlast);
		else if (!f->hr)
			kvs_radix_unlock(f->radix, last);
		if (req->kv_len > (uint32_t)aligned)
			kvs_pool_free(f->pool, req->kv_len - (size_t)aligned, buf + aligned);
		req_unlock(f, req);
		kvs_reqtab_free(f->tab, (uint32_t)req->slot);
		req_reset(req);
		goto out;
	}
	req_unlock(f, req);
	req->last_node = last;
	req->hi_node = hlast;
	req->prefix_len = (uint32_t)m;
out:
	pthread_mutex_unlock(&f->lock);
	return err ? kvs_fail(err) : 0;
}

/**
 * kvs_flow_release() - drop a request without caching it (abort or
 * preemption): free the locations it owns, its lock and its slot.
 * @flow: flow.
 * @req: request; one without a slot is left alone.
 *
 * Never allocates and never fails for valid input.
 *
 * Context: MT-Safe (serialized per flow).
 * Return: 0, or -1 with errno EINVAL (no flow or no request).
 */
KVS_EXPORT int kvs_flow_release(kvs_flow_t *f, kvs_req_t *req)
{
	if (!f || !req)
		return kvs_fail(EINVAL);
	if (req->slot < 0)
		return 0;
	pthread_mutex_lock(&f->lock);
	release_locked(f, req);
	pthread_mutex_unlock(&f->lock);
	return 0;
}
