/* SPDX-License-Identifier: MIT */
/*
 * lib/flow/flow_tiered.c - the request side of the hierarchical radix
 * cache (kvs_hiradix_t, device and host tiers), as SGLang's scheduler
 * drives its HiRadixCache, through the flows' operations
 * (lib/flow/flow_ops.h).
 *
 * At admission a request matches across tiers and locks the deepest node
 * found (req->hi_node): its device prefix is the tree's, and the tokens
 * found only on the host (req->host_hit_len) are loaded back
 * (kvs_hiradix_load_back(), all or nothing) before the rest is allocated;
 * a load the cache skips (below its threshold) or cannot fit leaves those
 * tokens to compute, on pages the request owns, and the insert at caching
 * re-materialises the tombstones with them.  A load is asynchronous: the
 * flow keeps one record per load it submitted (the cache's transfer
 * handle, the locked node, the request) until the cache is seen to have
 * taken the load in, and kvs_flow_wait_layer() waits on them per layer.
 * The handle is the cache's (it frees it when it takes the load in, at a
 * poll, an eviction, or a match or insert through the chain), so after
 * every call into the cache, and before the flow touches a handle, the
 * flow asks the node (kvs_hiradix_node_info()): no longer loading means
 * taken in, on the device means it succeeded.  A record still loading
 * holds a valid handle as long as nobody calls the cache during a flow
 * call (the rule of kvs_hiradix_load_back(3)); between the flow's calls
 * the engine may poll it.  A load that failed before its request was
 * placed is computed instead; one that failed later marks its request,
 * which kvs_flow_wait_layer(), the caching calls and release then drop.
 * Before an insert, the flow waits for its loads: an insert through a
 * chain whose load fails would otherwise re-materialise it with the
 * request's stale locations.
 *
 * Pages come from the pool; when it is short the flow evicts from the
 * device tier, from the host tier when write back needs host room for its
 * backups, and waits for backups in flight that keep nodes locked.
 *
 * Extra keys go to the tiered cache's _extra calls (kvs_hiradix_match_extra()
 * and the others), as the radix flow passes them: requests with different
 * extra keys share no prefix.
 */
#include <stdlib.h>
#include <time.h>

#include "flow/flow_ops.h"

/* A load back the flow submitted and has not seen taken in. */
struct fload {
	kvs_hpool_xfer_t *x;		/* the cache's handle: valid while node loads */
	kvs_hiradix_node_t *node;	/* the request's locked node (load's last) */
	kvs_req_t *req;
	bool admitting;			/* inside the prepare that submitted it */
	bool failed;			/* its copy failed: the request is to drop */
};

struct tiers {
	struct fload *ld;		/* loads in flight, nld of ldcap */
	size_t nld, ldcap;
};

static struct tiers *T(struct kvs_flow *f)
{
	return f->priv;
}

static void load_drop(struct tiers *t, size_t i)
{
	t->ld[i] = t->ld[--t->nld];
}

static void tiered_forget(struct kvs_flow *f, kvs_req_t *req)
{
	struct tiers *t = T(f);
	size_t i = t->nld;

	while (i-- > 0)
		if (t->ld[i].req == req)
			load_drop(t, i);
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

/* After every call into the cache, and before a handle is used: which
 * loads has it taken in?  Flow lock held. */
static void loads_check(struct kvs_flow *f)
{
	struct tiers *t = T(f);
	size_t i = t->nld;

	while (i-- > 0) {
		struct fload *l = &t->ld[i];
		kvs_hiradix_node_info_t in;

		if (l->failed || kvs_hiradix_node_info(f->c.hr, l->node, &in) < 0 || in.loading)
			continue;
		if (in.on_device) {
			load_drop(t, i); /* arrived: nothing more to wait for */
		} else if (l->admitting) {
			load_revert(l->req);
			load_drop(t, i);
		} else {
			l->failed = true;
		}
	}
}

/* Release the requests whose load failed after they were placed.  Returns
 * how many.  Flow lock held. */
static size_t loads_reap(struct kvs_flow *f)
{
	struct tiers *t = T(f);
	size_t i = t->nld, n = 0;

	while (i-- > 0) {
		if (!t->ld[i].failed)
			continue;
		flow_release_locked(f, t->ld[i].req); /* drops the record */
		n++;
		i = t->nld; /* the array moved: scan again */
	}
	return n;
}

/* Wait for @req's loads (every load when @req is NULL) and let the cache
 * take them in.  Flow lock held. */
static void loads_settle(struct kvs_flow *f, const kvs_req_t *req)
{
	struct tiers *t = T(f);
	size_t i;
	bool any = false;

	loads_check(f); /* the engine may have polled: drop what was taken in */
	for (i = 0; i < t->nld; i++) {
		if (t->ld[i].failed || (req && t->ld[i].req != req))
			continue;
		if (kvs_hpool_xfer_wait(t->ld[i].x) < 0)
			t->ld[i].failed = true;
		any = true;
	}
	if (any)
		(void)kvs_hiradix_poll(f->c.hr);
	loads_check(f);
}

static ssize_t tiered_match(struct kvs_flow *f, kvs_req_t *req, size_t cap)
{
	kvs_hiradix_match_t m;
	ssize_t r;

	pthread_mutex_lock(&f->lock);
	r = kvs_hiradix_match_extra(f->c.hr, req->extra_key, req->tokens, cap, NULL, &m);
	if (T(f)->nld)
		loads_check(f);
	if (r >= 0 && req->slot < 0)
		req->host_hit_len = (uint32_t)m.host_hit;
	pthread_mutex_unlock(&f->lock);
	return r;
}

/* Where a scheduler polls (completed backups become valid), with room for
 * the records of @nnew loads. */
static int tiered_prepare(struct kvs_flow *f, size_t nnew)
{
	struct tiers *t = T(f);

	if (t->nld + nnew > t->ldcap) {
		struct fload *nl = realloc(t->ld, (t->nld + nnew) * sizeof(*nl));

		if (!nl)
			return kvs_fail(ENOMEM);
		t->ld = nl;
		t->ldcap = t->nld + nnew;
	}
	(void)kvs_hiradix_poll(f->c.hr);
	loads_check(f);
	return 0;
}

/* Match @r across tiers, lock what it found, load back the host part into
 * @locs after the device part.  Returns the device prefix plus what is
 * loaded, or -1. */
static ssize_t tiered_admit(struct kvs_flow *f, kvs_req_t *r, size_t cap, int32_t *locs,
			    uint32_t *placed)
{
	struct tiers *t = T(f);
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x = NULL;
	ssize_t dev, got = 0;

	dev = kvs_hiradix_match_lock_extra(f->c.hr, r->extra_key, r->tokens, cap, locs, &m);
	loads_check(f);
	if (dev < 0)
		return -1;
	r->hi_node = m.last_node;
	r->host_hit_len = (uint32_t)m.host_hit;
	r->loaded_len = 0;
	if (m.host_hit) {
		got = kvs_hiradix_load_back(f->c.hr, m.last_node, 0, locs + dev, &x);
		loads_check(f);
		if (got < 0 || (size_t)got != m.host_hit || !x) {
			/* No room, or the copy could not be submitted: compute them.
			 * (A partial chain cannot be: the chain ends the device
			 * prefix.) */
			got = 0;
		} else {
			struct fload *l = &t->ld[t->nld++]; /* room made by prepare */

			l->x = x;
			l->node = m.last_node;
			l->req = r;
			l->admitting = true;
			l->failed = false;
		}
	}
	r->loaded_len = (uint32_t)got;
	if (flow_write_prefix(f, r, (uint32_t)(dev + got), locs) < 0) {
		int e = errno;

		tiered_forget(f, r); /* the load goes on; the cache owns it */
		kvs_hiradix_unlock(f->c.hr, r->hi_node);
		r->hi_node = NULL;
		r->loaded_len = 0;
		return kvs_fail(e);
	}
	*placed = (uint32_t)(dev + got);
	return dev + got;
}

static void tiered_admitted(struct kvs_flow *f)
{
	struct tiers *t = T(f);
	size_t i;

	for (i = 0; i < t->nld; i++)
		t->ld[i].admitting = false; /* placed: a failure now drops them */
}

/* Allocate @pages pages, evicting from the device tier (and the host
 * tier, where write back needs room for its backups). */
static int tiered_alloc(struct kvs_flow *f, size_t pages, int32_t *locs)
{
	size_t want = pages * f->ps;
	long waits = 0;

	for (;;) {
		uint64_t avail;
		ssize_t got;

		if (kvs_pool_alloc(f->pool, want, locs) == 0)
			return 0;
		if (errno != ENOMEM)
			return -1;
		avail = kvs_pool_available(f->pool);
		got = kvs_hiradix_evict_device(f->c.hr, want > avail ? want - avail : f->ps);
		loads_check(f);
		if (got < 0)
			return -1;
		if (got == 0) {
			kvs_hiradix_usage_t u;

			if (kvs_hiradix_usage(f->c.hr, &u) < 0)
				return -1;
			/* Device tokens without a host copy can leave only once
			 * backed up (write back): make host room for them.  Not
			 * otherwise: when running requests lock the device, host
			 * copies evicted would be hits lost for nothing. */
			if (u.device_tokens > u.host_tokens - u.tombstone_tokens) {
				(void)kvs_hiradix_evict_host(f->c.hr, want);
				got = kvs_hiradix_evict_device(f->c.hr, want);
				loads_check(f);
				if (got < 0)
					return -1;
				if (got > 0)
					continue;
			}
			/* Backups in flight lock their nodes: a scheduler short of
			 * memory waits for the copy engine. */
			if ((u.backups_pending == 0 && u.loads_pending == 0) || ++waits > 1000000)
				return kvs_fail(ENOMEM);
			nanosleep(&(struct timespec){0, 20000}, NULL);
			(void)kvs_hiradix_poll(f->c.hr);
			loads_check(f);
		}
	}
}

static void tiered_put(struct kvs_flow *f, size_t n, const int32_t *locs)
{
	kvs_pool_free(f->pool, n, locs);
}

/* Write through backs the new nodes up; a later poll makes the copies
 * valid. */
static ssize_t tiered_insert(struct kvs_flow *f, kvs_req_t *req, size_t n, const int32_t *locs,
			     void **node)
{
	kvs_hiradix_node_t *last = NULL;
	ssize_t got;

	if (node)
		got = kvs_hiradix_insert_lock_extra(f->c.hr, req->extra_key, req->tokens, n, locs,
						    &last);
	else
		got = kvs_hiradix_insert_extra(f->c.hr, req->extra_key, req->tokens, n, locs, NULL);
	loads_check(f);
	if (got >= 0 && node)
		*node = last;
	return got;
}

static ssize_t tiered_locations(struct kvs_flow *f, kvs_req_t *req, size_t n, int32_t *locs)
{
	ssize_t m = kvs_hiradix_match_extra(f->c.hr, req->extra_key, req->tokens, n, locs, NULL);

	loads_check(f);
	return m;
}

static void *tiered_held(const kvs_req_t *req)
{
	return req->hi_node;
}

static void tiered_hold(kvs_req_t *req, void *node)
{
	req->hi_node = node;
}

static void tiered_unlock(struct kvs_flow *f, void *node)
{
	kvs_hiradix_unlock(f->c.hr, node);
}

/* Before an insert: wait for @req's load and release the request if it
 * failed (then true). */
static bool tiered_settle(struct kvs_flow *f, kvs_req_t *req)
{
	struct tiers *t = T(f);
	size_t i;

	loads_settle(f, req);
	for (i = 0; i < t->nld; i++)
		if (t->ld[i].req == req && t->ld[i].failed) {
			flow_release_locked(f, req);
			return true;
		}
	return false;
}

static int tiered_wait_layer(struct kvs_flow *f, uint32_t layer)
{
	struct tiers *t = T(f);
	size_t i;
	int err = 0;

	loads_check(f); /* the engine may have polled: drop what was taken in */
	for (i = 0; i < t->nld; i++) {
		int rc;

		if (t->ld[i].failed)
			continue;
		/* With the engine's stream named (kvs_flow_set_stream()), the
		 * stream waits for the layer on the device; a copy that fails
		 * is then found by the flow's later calls. */
		rc = f->fence ? kvs_hpool_xfer_layer_stream_wait(t->ld[i].x, layer, f->stream)
			      : kvs_hpool_xfer_layer_wait(t->ld[i].x, layer);
		if (rc < 0) {
			if (!err)
				err = errno ? errno : EIO;
			t->ld[i].failed = true;
		}
	}
	if (loads_reap(f))
		return kvs_fail(err ? err : EIO);
	return 0;
}

static void tiered_destroy(struct kvs_flow *f)
{
	struct tiers *t = T(f);

	if (t)
		free(t->ld); /* the handles are the cache's */
	free(t);
}

static const struct flow_ops tiered_ops = {
	.name = "tiered",
	.extra_keys = true,
	.match = tiered_match,
	.prepare = tiered_prepare,
	.admit = tiered_admit,
	.admitted = tiered_admitted,
	.alloc = tiered_alloc,
	.put = tiered_put,
	.insert = tiered_insert,
	.locations = tiered_locations,
	.held = tiered_held,
	.hold = tiered_hold,
	.unlock = tiered_unlock,
	.forget = tiered_forget,
	.settle = tiered_settle,
	.wait_layer = tiered_wait_layer,
	.destroy = tiered_destroy,
};

/**
 * kvs_flow_create_tiered() - tie a pool, a request table and a
 * hierarchical radix cache (device and host tiers).
 * @pool: the KV pool.
 * @tab: the request table.
 * @hr: the tiered cache over @pool (kvs_hiradix_create()).
 *
 * The flow calls work on it as on a radix flow, matching across tiers,
 * loading back at admission and inserting at caching (see the file's
 * comment).  A request's extra key keeps its prefixes apart from other
 * keys', as in a radix flow.
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
	f = flow_new(pool, tab, &tiered_ops);
	if (!f)
		return NULL;
	f->c.hr = hr;
	f->priv = calloc(1, sizeof(struct tiers));
	if (!f->priv) {
		flow_free(f);
		errno = ENOMEM;
		return NULL;
	}
	return f;
}
