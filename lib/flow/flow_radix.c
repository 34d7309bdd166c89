/* SPDX-License-Identifier: MIT */
/*
 * lib/flow/flow_radix.c - the request side of the radix cache (kvs_radix_t,
 * SGLang's RadixCache), as the flows drive it (lib/flow/flow_ops.h).
 *
 * A request's prefix is the tree's, locked through the node that ends it
 * (req->last_node).  Admission matches and locks in one writer section
 * (kvs_radix_match_lock()); caching inserts and locks in one
 * (kvs_radix_insert_lock()).  Pages come from the pool; when it is short
 * the tree evicts what allocation needs, then, since available pages count
 * pages other threads cache, what it takes.  Extra keys and priorities go
 * to the tree as they are.
 */
#include <stdlib.h>

#include "flow/flow_ops.h"

static ssize_t radix_match(struct kvs_flow *f, kvs_req_t *req, size_t cap)
{
	int32_t stackbuf[1024], *buf = stackbuf;
	ssize_t m;

	if (cap > 1024) {
		buf = malloc(cap * sizeof(int32_t));
		if (!buf)
			return kvs_fail(ENOMEM);
	}
	m = kvs_radix_match_ro(f->c.radix, req->extra_key, req->tokens, cap, buf);
	if (buf != stackbuf)
		free(buf);
	return m;
}

static ssize_t radix_admit(struct kvs_flow *f, kvs_req_t *req, size_t cap, int32_t *scratch,
			   uint32_t *placed)
{
	kvs_radix_node_t *last = NULL;
	ssize_t m = kvs_radix_match_lock(f->c.radix, req->extra_key, req->tokens, cap, scratch,
					 &last);

	if (m < 0)
		return -1;
	if (flow_write_prefix(f, req, (uint32_t)m, scratch) < 0) {
		int e = errno;

		kvs_radix_unlock(f->c.radix, last);
		return kvs_fail(e);
	}
	req->last_node = last;
	*placed = (uint32_t)m;
	return m;
}

static int radix_alloc(struct kvs_flow *f, size_t pages, int32_t *locs)
{
	size_t want = pages * f->ps;
	uint64_t avail = kvs_pool_available(f->pool);

	if (avail < want)
		kvs_radix_evict(f->c.radix, want - avail);
	if (kvs_pool_alloc(f->pool, want, locs) == 0)
		return 0;
	if (errno != ENOMEM)
		return -1;
	/* Available counts pages other threads cache; evict what it takes. */
	kvs_radix_evict(f->c.radix, want);
	return kvs_pool_alloc(f->pool, want, locs);
}

static void radix_put(struct kvs_flow *f, size_t n, const int32_t *locs)
{
	kvs_pool_free(f->pool, n, locs);
}

static ssize_t radix_insert(struct kvs_flow *f, kvs_req_t *req, size_t n, const int32_t *locs,
			    void **node)
{
	kvs_radix_node_t *last = NULL;
	ssize_t got;

	if (!node)
		return kvs_radix_insert(f->c.radix, req->extra_key, req->tokens, n, locs,
					req->priority, NULL);
	got = kvs_radix_insert_lock(f->c.radix, req->extra_key, req->tokens, n, locs,
				    req->priority, &last);
	if (got >= 0)
		*node = last;
	return got;
}

static ssize_t radix_locations(struct kvs_flow *f, kvs_req_t *req, size_t n, int32_t *locs)
{
	return kvs_radix_match(f->c.radix, req->extra_key, req->tokens, n, locs, NULL);
}

static void *radix_held(const kvs_req_t *req)
{
	return req->last_node;
}

static void radix_hold(kvs_req_t *req, void *node)
{
	req->last_node = node;
}

static void radix_unlock(struct kvs_flow *f, void *node)
{
	kvs_radix_unlock(f->c.radix, node);
}

static bool radix_disabled(struct kvs_flow *f)
{
	return kvs_radix_disabled(f->c.radix);
}

static const struct flow_ops radix_ops = {
	.name = "radix",
	.extra_keys = true,
	.match = radix_match,
	.admit = radix_admit,
	.alloc = radix_alloc,
	.put = radix_put,
	.insert = radix_insert,
	.locations = radix_locations,
	.held = radix_held,
	.hold = radix_hold,
	.unlock = radix_unlock,
	.disabled = radix_disabled,
};

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
	f = flow_new(pool, tab, &radix_ops);
	if (f)
		f->c.radix = radix;
	return f;
}
