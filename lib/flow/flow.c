/* SPDX-License-Identifier: MIT */
/*
 * lib/flow/flow.c - request flows: what SGLang's ScheduleBatch and tree
 * cache, or vLLM's KVCacheManager, do with the pool, the request table and
 * a prefix cache.  One path for every cache: what differs between the
 * caches is behind the request-side operations of lib/flow/flow_ops.h
 * (match-and-lock, insert-and-lock, unlock, evict-for-allocation, and for
 * tiers load back and wait), implemented by flow_radix.c, flow_tiered.c
 * and flow_hash.c, which also hold the constructors.
 *
 * Ownership of a request's row.  Positions [0, prefix_len) hold locations
 * owned by the cache: the request holds a lock on the node that ends
 * there (radix and tiered caches) or a reference on each block (the hashed
 * cache), which keeps them from being evicted.  Positions [prefix_len,
 * kv_len) hold locations the request allocated and owns (one reference
 * per page).  prefix_len is a multiple of the page size; kv_len need not
 * be, and then the request's last page has room for the next tokens.
 *
 * All or nothing.  A batch's extend or decode takes its request slots and
 * all its pages in one allocation each (for the hashed cache a new
 * request's blocks come with its admission, as vLLM allocates them),
 * evicting from the cache first when the pool is short; if memory is
 * still short, every lock, reference and slot taken for the batch is given
 * back and the call fails with ENOMEM.
 *
 * Freeing never fails.  kvs_flow_release() and kvs_flow_cache_finished()
 * allocate nothing: they read a request's row into the flow's own buffer,
 * sized at creation for the table's longest row, and free through the
 * kind's put operation (kvs_pool_free() or kvs_hcache_free()), which
 * allocates nothing either.  When the cache cannot take a finished
 * request's tokens (its insert runs out of memory), they are freed instead
 * of cached: nothing is lost, the call succeeds.
 *
 * A batch names each request once.  The flows stamp every request of a
 * call with the call's number (a field of kvs_req_t they own) and refuse a
 * batch that names one twice, in O(n) and without allocating.
 *
 * Locking (the order is in common/common.h):
 * flow->lock serializes the flows' calls, so one flow object may be shared by
 * threads; the cache, the table and the pool have their own, taken under it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "flow/flow_ops.h"
#include "mem/reqtab_int.h"

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

/* The parts every kind of flow shares; NULL with errno ENOMEM. */
struct kvs_flow *flow_new(kvs_pool_t *pool, kvs_reqtab_t *tab, const struct flow_ops *ops)
{
	struct kvs_flow *f = calloc(1, sizeof(*f));

	if (f)
		f->buf = malloc(2 * ((size_t)kvs_reqtab_max_context(tab) + 1) * sizeof(int32_t));
	if (!f || !f->buf) {
		free(f);
		errno = ENOMEM;
		return NULL;
	}
	f->ops = ops;
	f->pool = pool;
	f->tab = tab;
	f->ps = kvs_pool_page_size(pool);
	pthread_mutex_init(&f->lock, NULL);
	return f;
}

void flow_free(struct kvs_flow *f)
{
	if (!f)
		return;
	if (f->fence)
		kvsi_fence_fini(f->fence);
	free(f->fence);
	pthread_mutex_destroy(&f->lock);
	free(f->pend);
	free(f->buf);
	free(f);
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
	if (f->ops->destroy)
		f->ops->destroy(f);
	flow_free(f);
	return 0;
}

/**
 * flow_store() - set entries of a row for the call in progress.
 * @f: flow (lock held).
 * @slot: the request's slot.
 * @pos: first position.
 * @n: entries, at least 1.
 * @locs: the locations.
 *
 * Stores into the table's mirror at once (reads of the row see them) and
 * notes the range for flow_push(), so that a prepare sends all its rows in
 * one submission.  When there is no memory to note it, writes it through
 * kvs_reqtab_write() instead.
 *
 * Return: 0, or -1 with errno EINVAL, ERANGE (nothing stored) or the
 * write's.
 */
int flow_store(struct kvs_flow *f, uint32_t slot, uint32_t pos, uint32_t n, const int32_t *locs)
{
	if (f->npend == f->cappend) {
		size_t cap = f->cappend ? 2 * f->cappend : 64;
		kvs_reqtab_write_t *p = realloc(f->pend, cap * sizeof(*p));

		if (!p)
			return kvs_reqtab_write(f->tab, slot, pos, n, locs);
		f->pend = p;
		f->cappend = cap;
	}
	if (kvsi_reqtab_store(f->tab, slot, pos, n, locs) < 0)
		return -1;
	f->pend[f->npend].slot = slot;
	f->pend[f->npend].pos = pos;
	f->pend[f->npend].n = n;
	f->pend[f->npend].locs = NULL;
	f->npend++;
	return 0;
}

/**
 * flow_push() - send the rows flow_store() stored to the device table.
 * @f: flow (lock held).
 *
 * One kvsi_reqtab_push() for the whole call; the list is empty afterwards
 * whatever happens.  Push before the slots stored into are freed.
 *
 * Return: 0, or -1 with the push's errno.
 */
int flow_push(struct kvs_flow *f)
{
	int rc;

	if (!f->npend)
		return 0;
	rc = kvsi_reqtab_push(f->tab, f->pend, f->npend);
	f->npend = 0;
	return rc;
}

/* The usable cached prefix of @n tokens: a request always computes at
 * least its last token (SGLang and vLLM do the same), so at most n - 1,
 * page-aligned down. */
static size_t match_cap(const struct kvs_flow *f, uint32_t n)
{
	return n ? (size_t)(n - 1) / f->ps * f->ps : 0;
}

/* Is @req's extra key one this flow's cache takes? */
static bool key_ok(const struct kvs_flow *f, const kvs_req_t *req)
{
	return !req->extra_key || f->ops->extra_keys;
}

/**
 * kvs_flow_match() - how much of @req's tokens the cache would give it.
 * @flow: flow.
 * @req: request (tokens and ntokens set).
 *
 * The kind's read-only match (radix: kvs_radix_match_ro(), lock-free;
 * tiered: kvs_hiradix_match(); hashed: the request's block hashes and
 * kvs_hcache_match_ro(), lock-free) capped at ntokens - 1 tokens,
 * page-aligned down, for admission decisions.
 *
 * Context: MT-Safe.
 * Return: the prefix length, or -1 with errno EINVAL or ENOMEM.
 */
KVS_EXPORT ssize_t kvs_flow_match(kvs_flow_t *f, kvs_req_t *req)
{
	if (!f || !req || (!req->tokens && req->ntokens) || !key_ok(f, req))
		return kvs_fail(EINVAL);
	return f->ops->match(f, req, match_cap(f, req->ntokens));
}

static void req_reset(kvs_req_t *req)
{
	req->slot = -1;
	req->prefix_len = req->kv_len = 0;
	req->last_node = NULL;
	req->loaded_len = 0;
	req->hi_node = NULL;
}

/* Unlock what @req holds. */
static void req_unlock(struct kvs_flow *f, kvs_req_t *req)
{
	void *node = f->ops->held(req);

	if (node)
		f->ops->unlock(f, node);
	f->ops->hold(req, NULL);
}

/* Drop what @req holds: the locations it owns and its lock, not its
 * slot.  Never allocates.  Lock held. */
static void flow_drop_locked(struct kvs_flow *f, kvs_req_t *req)
{
	uint32_t own = req->kv_len - req->prefix_len;

	if (f->ops->forget)
		f->ops->forget(f, req); /* a load in flight goes on: the cache's */
	if (f->ops->release) {
		f->ops->release(f, req);
		return;
	}
	if (own && kvs_reqtab_read(f->tab, (uint32_t)req->slot, req->prefix_len, own, f->buf) == 0)
		f->ops->put(f, own, f->buf);
	req_unlock(f, req);
}

/* flow_release_locked() after the caller's own flow_fence(). */
static void release_fenced(struct kvs_flow *f, kvs_req_t *req)
{
	flow_drop_locked(f, req);
	kvs_reqtab_free(f->tab, (uint32_t)req->slot);
	req_reset(req);
}

/* Drop what @req holds, its slot too, and reset it.  Lock held. */
void flow_release_locked(struct kvs_flow *f, kvs_req_t *req)
{
	flow_fence(f);
	release_fenced(f, req);
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
 * Nothing else changes.  On a flow without tiers, or with no load in
 * flight, returns 0 at once.
 *
 * Context: MT-Safe (serialized per flow); the cache must not be called
 * other than through the flow during a flow call.
 * Return: 0, or -1 with errno EINVAL (no flow, a layer the pool does not
 * have; nothing changed) or the copy's errno (EIO, EFAULT) when requests
 * were released.
 */
KVS_EXPORT int kvs_flow_wait_layer(kvs_flow_t *f, uint32_t layer)
{
	kvs_devptr_t ptr;
	int rc;

	if (!f)
		return kvs_fail(EINVAL);
	if (kvs_pool_buffer(f->pool, layer, KVS_KV_K, &ptr, NULL) < 0 &&
	    kvs_pool_buffer(f->pool, layer, KVS_KV_LATENT, &ptr, NULL) < 0)
		return kvs_fail(EINVAL);
	if (!f->ops->wait_layer)
		return 0;
	pthread_mutex_lock(&f->lock);
	rc = f->ops->wait_layer(f, layer);
	pthread_mutex_unlock(&f->lock);
	return rc;
}

/*
 * The stream fence.  Locations a flow call frees may be handed out at once,
 * and the engine's kernels that wrote or read them may still be running on
 * its stream.  Kernels the engine queues later on the same stream are
 * ordered after them by the stream itself; what is not is the driver's copy
 * queue (loads from the host tier into new pages, request-table rows,
 * compaction), and the unmap of an emptied slab, which the allocator fences
 * with the pool's streams.  So before the first location goes back, the
 * call records an event on the engine's stream and makes the copy queue
 * wait for it (the fence module, lib/mem/fence.h: on the device, the
 * caller does not wait).  A failure to do so is not a reason to keep the
 * locations: the call waits for the event on the host instead, and if
 * even that fails, for every copy of the driver.
 */
int flow_fence(struct kvs_flow *f)
{
	uint64_t token;

	if (!f->fence)
		return 0;
	if (kvsi_fence_order_copies(f->fence) == 0)
		return 0;
	if (kvsi_fence_record(f->fence, &token) == 0 && kvsi_fence_query(f->fence, token, true) > 0)
		return 0;
	return kvs_drv_synchronize(kvsi_pool_drv(f->pool));
}

/**
 * kvs_flow_set_stream() - name the engine's stream, so that the flow's
 * freeing calls need no host synchronization before them.
 * @flow: flow.
 * @stream: the stream the engine's kernels that use the flow's locations
 *          run on, or NULL to forget the stream given before.
 *
 * From now on kvs_flow_cache_finished(), kvs_flow_cache_unfinished() and
 * kvs_flow_release() may be called as soon as the engine has queued the
 * kernels of the request's last step, without waiting for them: before the
 * call gives locations back, it records an event on the stream and makes
 * the driver's copy queue wait for it on the device, so that no copy queued
 * later (a load into reused pages, a request-table write) runs before
 * those kernels are done.  Kernels the engine queues later on the same
 * stream are ordered by the stream itself.
 *
 * Context: MT-Safe (serialized per flow).
 * Return: 0, or -1 with errno EINVAL (no flow) or ENOMEM (no event; the
 * stream is not set).
 */
KVS_EXPORT int kvs_flow_set_stream(kvs_flow_t *f, const kvs_stream_t *stream)
{
	struct kvsi_fence *fence = NULL, *old;

	if (!f)
		return kvs_fail(EINVAL);
	if (stream) {
		fence = malloc(sizeof(*fence));
		if (!fence)
			return kvs_fail(ENOMEM);
		if (kvsi_fence_init(fence, kvsi_pool_drv(f->pool), stream, 1, NULL) < 0) {
			free(fence);
			return -1;
		}
	}
	pthread_mutex_lock(&f->lock);
	old = f->fence;
	f->fence = fence;
	f->stream = stream ? *stream : 0;
	pthread_mutex_unlock(&f->lock);
	if (old)
		kvsi_fence_fini(old);
	free(old);
	return 0;
}

/* Does @reqs name a request twice?  Stamps each with this call's number.
 * Lock held. */
static bool batch_has_twice(kvs_req_t *const *reqs, size_t n)
{
	uint64_t call = atomic_fetch_add_explicit(&next_call, 1, memory_order_relaxed);
	size_t i;

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

/* Allocate @pages pages into @locs through the kind, evicting when short. */
static int alloc_pages(struct kvs_flow *f, size_t pages, int32_t *locs)
{
	return pages ? f->ops->alloc(f, pages, locs) : 0;
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
	if (k && flow_store(f, (uint32_t)req->slot, first, k, scratch) < 0)
		return -1;
	if (out)
		memcpy(out, scratch, k * sizeof(int32_t));
	req->kv_len = upto;
	return 0;
}

/* After new locations: let the kind see them (the hashed cache caches the
 * blocks that filled). */
static void grown(struct kvs_flow *f, kvs_req_t *const *reqs, size_t n)
{
	size_t i;

	if (f->ops->grown)
		for (i = 0; i < n; i++)
			f->ops->grown(f, reqs[i]);
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
 * Evicts from the cache when the pool is short.  All or nothing.
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
	uint8_t *fresh = NULL;
	const int32_t *cursor;
	size_t i, total_pages = 0, given = 0, j = 0;
	int err = 0;

	if (!f || (!reqs && n))
		return kvs_fail(EINVAL);
	maxctx = kvs_reqtab_max_context(f->tab);
	for (i = 0; i < n; i++) {
		if (!reqs[i] || (!reqs[i]->tokens && reqs[i]->ntokens) || !key_ok(f, reqs[i]))
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
	if (batch_has_twice(reqs, n)) {
		pthread_mutex_unlock(&f->lock);
		return kvs_fail(EINVAL);
	}
	slots = calloc(nnew + 1, sizeof(*slots));
	befores = calloc(n + 1, sizeof(*befores));
	fresh = calloc(n + 1, 1);
	scratch = malloc(((size_t)maxn + f->ps) * sizeof(int32_t));
	if (!slots || !befores || !fresh || !scratch) {
		err = ENOMEM;
		goto out;
	}
	if (f->ops->prepare && f->ops->prepare(f, nnew) < 0) {
		err = errno;
		goto out;
	}
	if (nnew && kvs_reqtab_alloc(f->tab, nnew, slots) < 0) {
		err = errno;
		goto out;
	}
	/* New requests: match and lock (in one writer section of the cache:
	 * no eviction on another thread can take the prefix before it is
	 * locked), the prefix written into the row. */
	for (i = 0; i < n; i++) {
		kvs_req_t *r = reqs[i];
		uint32_t placed = 0;
		ssize_t m;

		if (r->slot >= 0)
			continue;
		r->slot = (int32_t)slots[j++];
		fresh[i] = 1;
		m = f->ops->admit(f, r, match_cap(f, r->ntokens), scratch, &placed);
		if (m < 0) {
			err = errno;
			req_reset(r); /* holds nothing */
			goto undo;
		}
		r->prefix_len = (uint32_t)m;
		r->kv_len = placed;
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
		if (total_pages)
			f->ops->put(f, total_pages * f->ps, pages);
	}
	cursor = pages;
	for (i = 0; i < n; i++) {
		kvs_req_t *r = reqs[i];
		uint32_t from = fresh[i] ? r->prefix_len : r->kv_len;

		befores[i] = r->kv_len;
		/* Locations the admission placed already come first. */
		if (out_locs && r->kv_len > from &&
		    kvs_reqtab_read(f->tab, (uint32_t)r->slot, from, r->kv_len - from,
				    out_locs + given) < 0)
			goto unplace;
		if (place(f, r, r->ntokens, &cursor,
			  out_locs ? out_locs + given + (befores[i] - from) : NULL, scratch) < 0)
			goto unplace;
		given += r->kv_len - from;
	}
	/* Every row of the call, in one submission. */
	if (flow_push(f) < 0)
		goto unplace;
	grown(f, reqs, n);
	if (f->ops->admitted)
		f->ops->admitted(f); /* placed: a failed load now drops them */
	goto out;
unplace:
	/* The row could not be written: give back every page of this call
	 * and the positions handed out so far. */
	err = errno;
	if (total_pages)
		f->ops->put(f, total_pages * f->ps, pages);
	if (i < n)
		reqs[i]->kv_len = befores[i];
	while (i-- > 0)
		reqs[i]->kv_len = befores[i];
undo:
	/* What was stored goes to the device all the same, while its slots
	 * are still held, so that mirror and device agree. */
	flow_push(f);
	/* Give back what this call took for new requests (their slots go
	 * back below, with the ones not yet given out). */
	for (i = 0; i < n; i++)
		if (fresh[i] && reqs[i]->slot >= 0) {
			flow_drop_locked(f, reqs[i]);
			req_reset(reqs[i]);
		}
	for (i = 0; i < nnew; i++)
		kvs_reqtab_free(f->tab, slots[i]);
out:
	pthread_mutex_unlock(&f->lock);
	KVS_FREE_ALL(slots, befores, fresh, pages, scratch);
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
 * A request whose last page is full gets a new page; evicts from the cache
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
	if (batch_has_twice(reqs, n)) {
		pthread_mutex_unlock(&f->lock);
		return kvs_fail(EINVAL);
	}
	if (f->ops->prepare && f->ops->prepare(f, 0) < 0) {
		int e = errno;

		pthread_mutex_unlock(&f->lock);
		return kvs_fail(e);
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
			  scratch) < 0)
			break;
		reqs[i]->ntokens = reqs[i]->kv_len;
	}
	/* The step's rows, one location each, in one submission. */
	if (i < n || flow_push(f) < 0) {
		int e = errno;

		/* Undo the call: its pages back, its positions taken back. */
		flow_push(f);
		if (total)
			f->ops->put(f, total * f->ps, pages);
		while (i-- > 0) {
			reqs[i]->kv_len--;
			reqs[i]->ntokens = reqs[i]->kv_len;
		}
		pthread_mutex_unlock(&f->lock);
		free(pages);
		return kvs_fail(e);
	}
	grown(f, reqs, n);
	pthread_mutex_unlock(&f->lock);
	free(pages);
	return 0;
}

/* Insert the first kv_len tokens of @req, page-aligned down, through the
 * kind's insert-and-lock; free the request's duplicates.  With @node, the
 * node ending them is locked in the same writer section, so no eviction
 * can take them before the caller reads their locations back.  Returns
 * the page-aligned length inserted, or -1. */
static ssize_t cache_prefix(struct kvs_flow *f, kvs_req_t *req, int32_t *buf, void **node)
{
	uint32_t n = req->kv_len, aligned = n / f->ps * f->ps;
	ssize_t got;

	if (kvs_reqtab_read(f->tab, (uint32_t)req->slot, 0, n, buf) < 0)
		return -1;
	got = f->ops->insert(f, req, aligned, buf, node);
	if (got < 0)
		return -1;
	/* [0, prefix_len) were the cache's own; [prefix_len, got) duplicate it. */
	if ((uint32_t)got > req->prefix_len)
		f->ops->put(f, (size_t)got - req->prefix_len, buf + req->prefix_len);
	return aligned;
}

/**
 * kvs_flow_cache_finished() - a request finished: cache its tokens, free
 * what the cache already had and its partial last page, release its slot
 * and its lock.
 * @flow: flow.
 * @req: a request with a slot; its first kv_len tokens are cached.
 *
 * Never allocates memory of its own and never fails for valid input: when
 * the cache cannot take the tokens (its insert fails: out of memory), the
 * request's own locations are freed instead of cached, as
 * kvs_flow_release() does.  A kind that caches blocks as they fill (the
 * hashed cache) only frees them here.
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
	if (f->ops->settle && f->ops->settle(f, req)) {
		pthread_mutex_unlock(&f->lock);
		return 0; /* its load failed: released, nothing to cache */
	}
	flow_fence(f);
	aligned = f->ops->insert ? cache_prefix(f, req, f->buf, NULL) : -1;
	if (aligned < 0) {
		/* Not cached (or cached already): give back what the request
		 * owns, keep nothing (fenced above). */
		release_fenced(f, req);
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	if ((uint32_t)aligned < req->kv_len) /* the partial last page */
		f->ops->put(f, req->kv_len - (size_t)aligned, f->buf + aligned);
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
 * Inserts the first kv_len tokens, frees the request's duplicates, reads
 * the cache's locations of them back, rewrites the row with them, and
 * moves the lock to the new last node; prefix_len becomes the page-aligned
 * kv_len.
 *
 * On a disabled cache, or one that caches blocks as they fill (the hashed
 * cache), there is nothing to do and the call changes nothing.
 *
 * Context: MT-Safe (serialized per flow).
 * Return: 0, or -1 with errno EINVAL or ENOMEM (the request is unchanged),
 * or, when the row cannot be rewritten after the insert, the row's error
 * with the request released (as kvs_flow_release() does).
 */
KVS_EXPORT int kvs_flow_cache_unfinished(kvs_flow_t *f, kvs_req_t *req)
{
	void *last = NULL;
	int32_t *buf, *nl;
	ssize_t aligned, m;
	int err = 0;

	if (!f || !req || req->slot < 0)
		return kvs_fail(EINVAL);
	if (!f->ops->insert || (f->ops->disabled && f->ops->disabled(f)))
		return 0; /* nothing to cache: the request keeps what it holds */
	pthread_mutex_lock(&f->lock);
	if (f->ops->settle && f->ops->settle(f, req)) {
		err = EIO; /* its load failed: released */
		goto out;
	}
	buf = f->buf;
	nl = buf + kvs_reqtab_max_context(f->tab) + 1;
	flow_fence(f);
	aligned = cache_prefix(f, req, buf, &last);
	if (aligned < 0) {
		err = errno;
		goto out;
	}
	/* The inserted tokens are locked: read the cache's locations of them
	 * (a match that ends where the insert ended splits nothing). */
	m = f->ops->locations(f, req, (size_t)aligned, nl);
	if (m != aligned ||
	    ((uint32_t)m > req->prefix_len &&
	     kvs_reqtab_write(f->tab, (uint32_t)req->slot, req->prefix_len,
			      (uint32_t)m - req->prefix_len, nl + req->prefix_len) < 0)) {
		/* The row still names the duplicates that just went back: the
		 * request cannot go on.  Release it whole, as a preemption does:
		 * the cache has [0, aligned), the request its partial page. */
		err = m < 0 ? errno : m != aligned ? EIO : errno;
		if (last)
			f->ops->unlock(f, last);
		if (req->kv_len > (uint32_t)aligned)
			f->ops->put(f, req->kv_len - (size_t)aligned, buf + aligned);
		req_unlock(f, req);
		kvs_reqtab_free(f->tab, (uint32_t)req->slot);
		req_reset(req);
		goto out;
	}
	req_unlock(f, req);
	f->ops->hold(req, last);
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
	flow_release_locked(f, req);
	pthread_mutex_unlock(&f->lock);
	return 0;
}
