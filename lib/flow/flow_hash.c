/* SPDX-License-Identifier: MIT */
/*
 * lib/flow/flow_hash.c - the request side of the hashed block cache
 * (kvs_hcache_t, vLLM v1's BlockPool), as vLLM's KVCacheManager drives it
 * for one attention group, through the flows' operations
 * (lib/flow/flow_ops.h).
 *
 * A block is one pool page: the request's row holds block * page size +
 * offset for each of its tokens, so the blocks of a request are read back
 * from its row.  Each full block of a request is named by its block hash
 * (kvs_block_hash_request(), chained over the prefix; a request's extra
 * key is hashed in as a cache salt, so requests of different keys share no
 * block); the flow keeps each slot's hashes, computed once.
 *
 * Admission is vLLM's: the request's longest run of cached blocks (capped
 * so that its last token is computed) is looked up and the rest of its
 * blocks allocated in one call (kvs_hcache_admit()), all or nothing,
 * without evicting a hit; the hits are its prefix (one reference each),
 * the new blocks its own.  Later blocks (chunks, decode) come from
 * kvs_hcache_alloc(), which takes free pool pages before it evicts from
 * the free queue's head.  Every block that fills, in prefill or decode, is
 * hashed and cached at once (kvs_hcache_cache()); one that cannot be (out
 * of memory) is cached at the request's next call.  Caching a finished or
 * unfinished request therefore inserts nothing: a finished request, like
 * a released one, frees its blocks tail first (kvs_hcache_free()), so that
 * the end of its longest prefix is evicted first, and its cached blocks
 * stay in the cache.
 *
 * Without hash attributes the flow hashes nothing and caches nothing
 * (vLLM without prefix caching): every block goes back to the pool when
 * its request frees it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "flow/flow_ops.h"
#include "kvslab/blockhash.h"

/* What the flow keeps for a slot of the table. */
struct hslot {
	kvs_block_hash_t *h;		/* its full blocks' hashes, maxb entries, or NULL */
	size_t nh;			/* hashes computed */
	size_t ncached;			/* leading blocks that carry their hash */
};

struct hashed {
	kvs_block_hasher_t *hasher;	/* NULL: no prefix caching */
	struct hslot *slot;		/* one per row of the table */
	uint32_t nslots;
	size_t maxb;			/* blocks of the longest row, + 1 */
	int32_t *blk;			/* maxb blocks, for the free path */
};

static struct hashed *H(struct kvs_flow *f)
{
	return f->priv;
}

/* The request's extra key as the cache salt of its first block. */
static const kvs_block_extra_t *extra_of(const kvs_req_t *req, kvs_block_extra_t *ex,
					 char *salt, size_t size)
{
	if (!req->extra_key)
		return NULL;
	snprintf(salt, size, "kvs:%016" PRIx64, req->extra_key);
	*ex = (kvs_block_extra_t){.cache_salt = salt};
	return ex;
}

/* Hash the full blocks of @req's first @n tokens into @s (the ones not
 * hashed yet). */
static int hash_upto(struct kvs_flow *f, struct hslot *s, const kvs_req_t *req, size_t n)
{
	struct hashed *h = H(f);
	kvs_block_extra_t ex;
	char salt[32];

	if (n / f->ps <= s->nh)
		return 0;
	return kvs_block_hash_request(h->hasher, req->tokens, n, extra_of(req, &ex, salt,
									    sizeof(salt)),
				      s->h, h->maxb, &s->nh);
}

static ssize_t hash_match(struct kvs_flow *f, kvs_req_t *req, size_t cap)
{
	struct hashed *h = H(f);
	kvs_block_hash_t stackbuf[64], *buf = stackbuf;
	size_t nb = cap / f->ps, nh = 0;
	kvs_block_extra_t ex;
	char salt[32];
	ssize_t m;

	if (!h->hasher || nb == 0)
		return 0;
	if (nb > 64) {
		buf = malloc(nb * sizeof(*buf));
		if (!buf)
			return kvs_fail(ENOMEM);
	}
	m = kvs_block_hash_request(h->hasher, req->tokens, cap,
				   extra_of(req, &ex, salt, sizeof(salt)), buf, nb, &nh);
	if (m == 0)
		m = kvs_hcache_match_ro(f->c.hc, buf, nh, req->ntokens);
	if (buf != stackbuf)
		free(buf);
	return m < 0 ? -1 : m * (ssize_t)f->ps;
}

/* Write the locations of @n tokens on @blocks into @locs.  From the last
 * down, so that @blocks may be @locs itself: block i's entry is written
 * over only after its last read (its tokens come at i * page size on). */
static void blocks_to_locs(const struct kvs_flow *f, const int32_t *blocks, size_t n,
			   int32_t *locs)
{
	size_t i = n;

	while (i-- > 0)
		locs[i] = blocks[i / f->ps] * (int32_t)f->ps + (int32_t)(i % f->ps);
}

/* vLLM's admission: look up the cached prefix and allocate the rest, in
 * one call. */
static ssize_t hash_admit(struct kvs_flow *f, kvs_req_t *req, size_t cap, int32_t *scratch,
			  uint32_t *placed)
{
	struct hashed *h = H(f);
	struct hslot *s = &h->slot[req->slot];
	size_t nb = ((size_t)req->ntokens + f->ps - 1) / f->ps;
	int32_t *blk = h->blk;
	ssize_t k = 0;
	int e;

	(void)cap; /* kvs_hcache_admit() caps the same way */
	s->nh = s->ncached = 0;
	if (!h->hasher) {
		if (kvs_hcache_alloc(f->c.hc, nb, blk) < 0)
			return -1;
	} else {
		if (!s->h && !(s->h = malloc(h->maxb * sizeof(*s->h))))
			return kvs_fail(ENOMEM);
		if (hash_upto(f, s, req, req->ntokens) < 0)
			goto fail;
		k = kvs_hcache_admit(f->c.hc, s->h, s->nh, req->ntokens, nb, blk);
		if (k < 0)
			goto fail;
	}
	blocks_to_locs(f, blk, req->ntokens, scratch);
	if (flow_write_prefix(f, req, req->ntokens, scratch) < 0) {
		e = errno;
		/* Tail first, as a release frees them. */
		while (nb-- > 0)
			(void)kvs_hcache_free(f->c.hc, &blk[nb], 1);
		errno = e;
		goto fail;
	}
	s->ncached = (size_t)k;
	*placed = req->ntokens;
	return k * (ssize_t)f->ps;
fail:
	e = errno;
	s->nh = 0;
	return kvs_fail(e);
}

static int hash_alloc(struct kvs_flow *f, size_t pages, int32_t *locs)
{
	if (kvs_hcache_alloc(f->c.hc, pages, locs) < 0)
		return -1;
	blocks_to_locs(f, locs, pages * f->ps, locs);
	return 0;
}

/* Give back the pages of @n locations (whole pages, or a page's first
 * tokens), in the order given. */
static void hash_put(struct kvs_flow *f, size_t n, const int32_t *locs)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int32_t b = locs[i] / (int32_t)f->ps;

		if (i && locs[i - 1] / (int32_t)f->ps == b)
			continue;
		(void)kvs_hcache_free(f->c.hc, &b, 1);
	}
}

/* Cache the blocks of @req that are full now and have no hash yet. */
static void hash_grown(struct kvs_flow *f, kvs_req_t *req)
{
	struct hashed *h = H(f);
	struct hslot *s = &h->slot[req->slot];
	size_t full = req->kv_len / f->ps, i, n;

	if (!h->hasher || full <= s->ncached)
		return;
	if (hash_upto(f, s, req, req->kv_len) < 0 || s->nh < full)
		return;
	n = full - s->ncached;
	if (kvs_reqtab_read(f->tab, (uint32_t)req->slot, (uint32_t)(s->ncached * f->ps),
			    (uint32_t)(n * f->ps), f->buf) < 0)
		return;
	for (i = 0; i < n; i++)
		h->blk[i] = f->buf[i * f->ps] / (int32_t)f->ps;
	if (kvs_hcache_cache(f->c.hc, h->blk, n, s->h + s->ncached,
			     s->ncached ? &s->h[s->ncached - 1] : NULL, req->extra_key,
			     req->tokens + s->ncached * f->ps) < 0)
		return; /* out of memory: the next call tries again */
	s->ncached = full;
}

/* Free @req's blocks, tail first; its cached ones stay in the cache. */
static void hash_release(struct kvs_flow *f, kvs_req_t *req)
{
	struct hashed *h = H(f);
	size_t n = ((size_t)req->kv_len + f->ps - 1) / f->ps, i;

	if (n && kvs_reqtab_read(f->tab, (uint32_t)req->slot, 0, req->kv_len, f->buf) == 0) {
		for (i = 0; i < n; i++)
			h->blk[n - 1 - i] = f->buf[i * f->ps] / (int32_t)f->ps;
		(void)kvs_hcache_free(f->c.hc, h->blk, n);
	}
	h->slot[req->slot].nh = h->slot[req->slot].ncached = 0;
}

static void *hash_held(const kvs_req_t *req)
{
	(void)req;
	return NULL;
}

static void hash_hold(kvs_req_t *req, void *node)
{
	(void)req;
	(void)node;
}

static void hash_destroy(struct kvs_flow *f)
{
	struct hashed *h = H(f);
	uint32_t i;

	if (!h)
		return;
	if (h->slot)
		for (i = 0; i < h->nslots; i++)
			free(h->slot[i].h);
	free(h->slot);
	free(h->blk);
	kvs_block_hasher_destroy(h->hasher);
	free(h);
	f->priv = NULL;
}

static const struct flow_ops hash_ops = {
	.name = "hashed",
	.extra_keys = true,
	.match = hash_match,
	.admit = hash_admit,
	.alloc = hash_alloc,
	.put = hash_put,
	.grown = hash_grown,
	.held = hash_held,
	.hold = hash_hold,
	.release = hash_release,
	.destroy = hash_destroy,
};

/**
 * kvs_flow_create_hashed() - tie a pool, a request table and a hashed
 * block cache (vLLM's request side).
 * @pool: the KV pool.
 * @tab: the request table.
 * @hc: the hashed block cache over @pool (kvs_hcache_create()).
 * @attr: how blocks are hashed (kvs_block_hasher_create()'s attributes,
 *        block_size the pool's page size), or NULL for no prefix caching.
 *
 * The flow calls work on it as on a radix flow (see the file's comment):
 * admission looks up and allocates in one call, full blocks are cached as
 * they fill, and caching a request only frees its blocks, tail first.
 *
 * Context: MT-Safe.
 * Return: the flow object, or NULL with errno EINVAL (a NULL argument, a
 * cache of another block size, attributes kvs_block_hasher_create()
 * refuses or of another block size), ENOTSUP (a hash function this build
 * lacks) or ENOMEM.
 */
KVS_EXPORT kvs_flow_t *kvs_flow_create_hashed(kvs_pool_t *pool, kvs_reqtab_t *tab,
					      kvs_hcache_t *hc,
					      const kvs_block_hasher_attr_t *attr)
{
	struct kvs_flow *f;
	struct hashed *h;
	int e;

	if (!pool || !tab || !hc || kvs_hcache_block_size(hc) != kvs_pool_page_size(pool) ||
	    (attr && attr->block_size != kvs_pool_page_size(pool))) {
		errno = EINVAL;
		return NULL;
	}
	f = flow_new(pool, tab, &hash_ops);
	if (!f)
		return NULL;
	f->c.hc = hc;
	h = calloc(1, sizeof(*h));
	f->priv = h;
	if (!h)
		goto nomem;
	h->nslots = kvs_reqtab_max_reqs(tab);
	h->maxb = (size_t)kvs_reqtab_max_context(tab) / f->ps + 1;
	h->slot = calloc(h->nslots + 1, sizeof(*h->slot));
	h->blk = malloc(h->maxb * sizeof(*h->blk));
	if (!h->slot || !h->blk)
		goto nomem;
	if (attr && !(h->hasher = kvs_block_hasher_create(attr)))
		goto fail;
	return f;
nomem:
	errno = ENOMEM;
fail:
	e = errno;
	hash_destroy(f);
	flow_free(f);
	errno = e;
	return NULL;
}
