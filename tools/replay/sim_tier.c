/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/sim_tier.c - SGLang's scheduler with HiCache, the request
 * side, over kvs_hiradix and kvs_hpool: kvslab-replay --host-pool.
 *
 * A request's tokens [0, prefix_len) are the cache's, locked through the
 * node of its last page (q->lock); [prefix_len, kv_len) are on pages the
 * request owns (q->locs), whole pages from the pool.  At the first prefill
 * the request matches again: the device part is its L1 hit; a host part of
 * at least the load-back threshold is loaded back (kvs_hiradix_load_back),
 * the transfer waited for as a forward pass would wait for every layer, and
 * is its L2 hit.  Pages for the rest come from the pool, the shortfall
 * evicted from the cache's device side (and from its host side first, so
 * that a write-back eviction finds host pages for its backups).  Caching
 * (unfinished or finished) inserts the request's whole pages: the tree
 * takes the pages past what it already has on the device; the request's
 * duplicates are freed, and the lock moves to the new last node.  Since
 * the locked prefix is on the device at every insert, the tree takes none
 * of the request's locations for it, but it checks their shape: q->locs
 * keeps the tree's locations there (from the match, the load back, or a
 * match again after an insert that found duplicates).
 *
 * Copies take no simulated time: the backups an insert starts are waited
 * for before the call returns (write back waits inside eviction, a load
 * back at the first prefill), so what the cache holds at each step does
 * not depend on the speed of the driver's copy thread and a replay is
 * reproducible.  The wait for backups on a shortfall stays, for safety.
 *
 * With a store (--storage, rp_tsim_set_store()) the host pool is
 * PAGE_FIRST, the unit the store keeps, and the cache backs every valid
 * host copy up to it.  The same rule holds for L3: the backups an insert
 * queues are written before the call returns, and so are those queued
 * before a host eviction (their host pages are protected until written)
 * and before a prefetch (whose exists query would otherwise race the
 * backup thread), so what the store holds at each step is the same from
 * one run to the next.  A prefetch (rp_tsim_prefetch()) runs when the
 * request is first considered for admission and is waited for until the
 * policy says it is over; its pages become host-only nodes that the first
 * prefill's match loads back like any host hit.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_tier.h"

struct rp_tsim {
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	kvs_hiradix_t *h;
	kvs_store_t *store;		/* --storage, or NULL; closed after h */
	uint32_t ps;
	uint64_t locked;		/* sum of the holders' prefixes, tokens */
	uint64_t waits;			/* short of memory, waited for a backup */
};

static size_t match_len(const struct rp_tsim *t, const kvs_req_t *req);

struct rp_treq {
	int32_t *locs;			/* device locations, [prefix_len, kv_len) owned */
	uint32_t max;
	kvs_hiradix_node_t *lock;	/* locked node of the prefix, or NULL */
	uint64_t loaded;		/* tokens loaded back for this request */
};

struct rp_tsim *rp_tsim_create(kvs_pool_t *pool, uint64_t host_bytes, double host_ratio,
			       uint32_t policy, uint64_t load_threshold, int page_first)
{
	struct rp_tsim *t = calloc(1, sizeof(*t));
	kvs_hpool_attr_t ha;
	kvs_hiradix_attr_t ra;
	int e;

	if (!t)
		return NULL;
	t->pool = pool;
	t->ps = kvs_pool_page_size(pool);
	kvs_hpool_attr_init(&ha);
	if (host_bytes) {
		ha.ratio = 0;
		ha.bytes = (size_t)host_bytes;
	} else {
		ha.ratio = host_ratio;
	}
	if (page_first)
		ha.layout = KVS_HPOOL_PAGE_FIRST;
	t->hp = kvs_hpool_create(pool, &ha);
	if (!t->hp)
		goto fail;
	kvs_hiradix_attr_init(&ra);
	ra.write_policy = policy;
	if (load_threshold != UINT64_MAX)
		ra.load_back_threshold = load_threshold;
	t->h = kvs_hiradix_create(pool, t->hp, &ra);
	if (!t->h)
		goto fail;
	return t;
fail:
	e = errno;
	rp_tsim_destroy(t);
	errno = e;
	return NULL;
}

void rp_tsim_destroy(struct rp_tsim *t)
{
	if (!t)
		return;
	if (t->h)
		kvs_hiradix_destroy(t->h);
	if (t->store)
		kvs_store_close(t->store);
	if (t->hp)
		kvs_hpool_destroy(t->hp);
	free(t);
}

int rp_tsim_set_store(struct rp_tsim *t, const struct rp_tstore *ts, const char **stage)
{
	kvs_store_attr_t sa;
	kvs_hiradix_l3_attr_t la;
	int32_t page;
	void *p;
	size_t pb;
	int rc, e;

	*stage = "cannot size the pages of";
	/* The host pool's page bytes, from a page of it, given back. */
	if (kvs_hpool_alloc(t->hp, 1, &page) < 0)
		return -1;
	rc = kvs_hpool_page_bytes(t->hp, page, &p, &pb);
	e = errno;
	kvs_hpool_free(t->hp, 1, &page);
	if (rc < 0) {
		errno = e;
		return -1;
	}
	kvs_store_attr_init(&sa);
	sa.model = ts->model;
	sa.layout = KVS_HPOOL_PAGE_FIRST;
	sa.page_bytes = pb;
	/* A replay's store is scratch: a crash may lose pages, never tear one. */
	sa.fsync = KVS_FSYNC_NONE;
	*stage = "cannot open";
	t->store = kvs_store_open(ts->uri, &sa);
	if (!t->store)
		return -1;
	kvs_hiradix_l3_attr_init(&la);
	la.prefetch_policy = ts->policy;
	la.prefetch_threshold = ts->threshold;
	la.backup = 1;
	*stage = "cannot attach";
	if (kvs_hiradix_set_store(t->h, t->store, &la) < 0) {
		e = errno;
		kvs_store_close(t->store);
		t->store = NULL;
		errno = e;
		return -1;
	}
	*stage = NULL;
	return 0;
}

kvs_store_t *rp_tsim_store(struct rp_tsim *t)
{
	return t->store;
}

/* Every backup the store was given written: see the file's comment. */
static int settle_l3(struct rp_tsim *t)
{
	return t->store ? kvs_hiradix_l3_wait(t->h) : 0;
}

ssize_t rp_tsim_prefetch(struct rp_tsim *t, uint64_t id, const kvs_req_t *req)
{
	size_t got = 0;
	ssize_t n;
	int done;

	if (!t->store)
		return 0;
	if (settle_l3(t) < 0)
		return -1;
	n = kvs_hiradix_prefetch(t->h, id, req->tokens, match_len(t, req));
	if (n <= 0)
		return n;
	/* Copies take no simulated time: the request waits here until the
	 * policy says the prefetch is over (wait_complete: every page the
	 * store has is read). */
	while ((done = kvs_hiradix_prefetch_done(t->h, id, &got)) == 0)
		nanosleep(&(struct timespec){0, 20000}, NULL);
	if (done < 0)
		return -1;
	return (ssize_t)got;
}

struct rp_treq *rp_treq_new(const struct rp_tsim *t, uint32_t max_tokens)
{
	struct rp_treq *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->max = (max_tokens + t->ps - 1) / t->ps * t->ps;
	q->locs = malloc(((size_t)q->max + 1) * sizeof(*q->locs));
	if (!q->locs) {
		free(q);
		return NULL;
	}
	return q;
}

void rp_treq_free(struct rp_treq *q)
{
	if (q) {
		free(q->locs);
		free(q);
	}
}

uint64_t rp_treq_loaded(const struct rp_treq *q)
{
	return q->loaded;
}

static uint32_t pages_end(const struct rp_tsim *t, uint32_t len)
{
	return (len + t->ps - 1) / t->ps * t->ps;
}

/* The key a request matches: whole pages, its last token left to compute. */
static size_t match_len(const struct rp_tsim *t, const kvs_req_t *req)
{
	return req->ntokens ? (req->ntokens - 1) / t->ps * t->ps : 0;
}

ssize_t rp_tsim_match(struct rp_tsim *t, kvs_req_t *req, size_t *host_hit)
{
	kvs_hiradix_match_t m;
	ssize_t r = kvs_hiradix_match(t->h, req->tokens, match_len(t, req), NULL, &m);

	if (r >= 0 && host_hit)
		*host_hit = m.host_hit;
	return r;
}

/* Wait until no backup or load is in flight: copies take no simulated
 * time, and a replay does not depend on how fast the copy thread runs. */
static int settle_all(struct rp_tsim *t)
{
	kvs_hiradix_usage_t u;

	for (;;) {
		if (kvs_hiradix_poll(t->h) < 0 || kvs_hiradix_usage(t->h, &u) < 0)
			return -1;
		if (!u.backups_pending && !u.loads_pending)
			return settle_l3(t);
		nanosleep(&(struct timespec){0, 20000}, NULL);
	}
}

/* @n tokens (whole pages) of device memory into @locs, evicting from the
 * cache on shortfall. */
static int alloc_evict(struct rp_tsim *t, size_t n, int32_t *locs)
{
	for (;;) {
		uint64_t avail;
		ssize_t got;

		if (kvs_pool_alloc(t->pool, n, locs) == 0)
			return 0;
		if (errno != ENOMEM)
			return -1;
		avail = kvs_pool_available(t->pool);
		/* A write-back eviction backs up first: make host room (host
		 * pages being backed up to the store are protected: let them
		 * land first, as settle_all() does). */
		if (kvs_hpool_available(t->hp) * t->ps < n) {
			if (settle_l3(t) < 0)
				return -1;
			(void)kvs_hiradix_evict_host(t->h, n);
		}
		got = kvs_hiradix_evict_device(t->h, n > avail ? n - avail : t->ps);
		if (got < 0)
			return -1;
		if (got == 0) {
			/* Backups in flight lock their nodes: wait for the copy
			 * engine, as a scheduler short of memory would. */
			kvs_hiradix_usage_t u;

			if (kvs_hiradix_usage(t->h, &u) < 0)
				return -1;
			if (u.backups_pending == 0) {
				errno = ENOMEM;
				return -1;
			}
			nanosleep(&(struct timespec){0, 20000}, NULL);
			if (kvs_hiradix_poll(t->h) < 0)
				return -1;
			t->waits++;
		}
	}
}

static void free_range(struct rp_tsim *t, struct rp_treq *q, uint32_t from, uint32_t to)
{
	if (to > from)
		kvs_pool_free(t->pool, to - from, q->locs + from);
}

/* Take the cached prefix: match, load back, lock. */
static int acquire(struct rp_tsim *t, struct rp_treq *q, kvs_req_t *req)
{
	kvs_hiradix_match_t m;
	kvs_hpool_xfer_t *x = NULL;
	ssize_t dev = kvs_hiradix_match(t->h, req->tokens, match_len(t, req), q->locs, &m);
	ssize_t got = 0;
	kvs_hiradix_node_t *node;

	if (dev < 0)
		return -1;
	node = m.last_device;
	if (m.host_hit) {
		got = kvs_hiradix_load_back(t->h, m.last_node, 0, q->locs + dev, &x);
		if (got < 0) {
			if (errno != ENOMEM)
				return -1;
			got = 0;	/* no room: compute them */
		}
		if (got > 0) {
			if (x && kvs_hpool_xfer_wait(x) < 0)
				got = 0; /* failed: tombstones again at the next poll */
			else
				node = m.last_node;
		}
	}
	if (kvs_hiradix_lock(t->h, node) < 0)
		return -1;
	q->lock = node;
	q->loaded += (uint64_t)got;
	req->prefix_len = (uint32_t)(dev + got);
	req->kv_len = req->prefix_len;
	req->slot = 0;
	t->locked += req->prefix_len;
	return 0;
}

void rp_tsim_release(struct rp_tsim *t, struct rp_treq *q, kvs_req_t *req)
{
	if (req->slot < 0)
		return;
	free_range(t, q, req->prefix_len, pages_end(t, req->kv_len));
	if (q->lock)
		kvs_hiradix_unlock(t->h, q->lock);
	t->locked -= req->prefix_len;
	q->lock = NULL;
	req->slot = -1;
	req->kv_len = req->prefix_len = 0;
}

int rp_tsim_extend(struct rp_tsim *t, struct rp_treq *const *qs, kvs_req_t *const *reqs,
		   size_t n)
{
	uint32_t *old = malloc((n + 1) * sizeof(*old));
	uint8_t *fresh = malloc(n + 1);
	size_t i, k;
	int e;

	if (!old || !fresh) {
		free(old);
		free(fresh);
		errno = ENOMEM;
		return -1;
	}
	for (i = 0; i < n; i++) {
		kvs_req_t *r = reqs[i];
		uint32_t from, to;

		fresh[i] = r->slot < 0;
		if (fresh[i] && acquire(t, qs[i], r) < 0)
			goto undo;
		old[i] = r->kv_len;
		from = pages_end(t, r->kv_len);
		to = pages_end(t, r->ntokens);
		if (to > qs[i]->max) {
			errno = EINVAL;
			i++;
			goto undo;
		}
		if (to > from && alloc_evict(t, to - from, qs[i]->locs + from) < 0) {
			r->kv_len = old[i];
			i++;
			goto undo;
		}
		r->kv_len = r->ntokens;
	}
	free(old);
	free(fresh);
	return 0;
undo:
	e = errno;
	for (k = 0; k < i; k++) {
		kvs_req_t *r = reqs[k];

		if (r->slot < 0)
			continue;
		if (fresh[k]) {
			rp_tsim_release(t, qs[k], r);
			continue;
		}
		free_range(t, qs[k], pages_end(t, old[k]), pages_end(t, r->kv_len));
		r->kv_len = old[k];
	}
	free(old);
	free(fresh);
	errno = e;
	return -1;
}

int rp_tsim_decode(struct rp_tsim *t, struct rp_treq *const *qs, kvs_req_t *const *reqs,
		   size_t n)
{
	size_t i, k;
	int e;

	for (i = 0; i < n; i++) {
		kvs_req_t *r = reqs[i];

		if (r->kv_len % t->ps == 0) {
			if (r->kv_len + t->ps > qs[i]->max) {
				errno = EINVAL;
				goto undo;
			}
			if (alloc_evict(t, t->ps, qs[i]->locs + r->kv_len) < 0)
				goto undo;
		}
		r->kv_len++;
	}
	return 0;
undo:
	e = errno;
	for (k = 0; k < i; k++) {
		kvs_req_t *r = reqs[k];

		r->kv_len--;
		if (r->kv_len % t->ps == 0)
			free_range(t, qs[k], r->kv_len, r->kv_len + t->ps);
	}
	errno = e;
	return -1;
}

/* Insert the request's whole pages of its first @len tokens. */
static int cache(struct rp_tsim *t, struct rp_treq *q, kvs_req_t *req, uint32_t len)
{
	uint32_t aligned = len / t->ps * t->ps;
	kvs_hiradix_node_t *last = NULL;
	ssize_t had;

	if (aligned <= req->prefix_len)
		return 0;
	/* The prefix is the tree's: only [prefix_len, aligned) are read. */
	had = kvs_hiradix_insert_lock(t->h, req->tokens, aligned, q->locs, &last);
	if (had < 0)
		return -1;
	if ((uint32_t)had > req->prefix_len) {
		kvs_hiradix_match_t m;

		/* Duplicates: free them, and take the tree's locations (the
		 * next insert checks the shape of every location). */
		free_range(t, q, req->prefix_len, (uint32_t)had);
		if (kvs_hiradix_match(t->h, req->tokens, aligned, q->locs, &m) < (ssize_t)aligned) {
			/* Cannot be: the path is locked on the device. */
			kvs_hiradix_unlock(t->h, last);
			errno = EPROTO;
			return -1;
		}
	}
	if (q->lock)
		kvs_hiradix_unlock(t->h, q->lock);
	q->lock = last;
	t->locked += aligned - req->prefix_len;
	req->prefix_len = aligned;
	return settle_all(t); /* the backups the insert started */
}

int rp_tsim_cache_unfinished(struct rp_tsim *t, struct rp_treq *q, kvs_req_t *req)
{
	if (req->slot < 0)
		return 0;
	return cache(t, q, req, req->kv_len);
}

int rp_tsim_finish(struct rp_tsim *t, struct rp_treq *q, kvs_req_t *req)
{
	int rc = 0;

	if (req->slot < 0)
		return 0;
	if (kvs_hpool_available(t->hp) == 0 && settle_l3(t) == 0)
		(void)kvs_hiradix_evict_host(t->h, req->kv_len);
	if (cache(t, q, req, req->kv_len) < 0)
		rc = -1; /* nothing cached: release frees it all */
	rp_tsim_release(t, q, req);
	return rc;
}

int rp_tsim_poll(struct rp_tsim *t)
{
	return kvs_hiradix_poll(t->h);
}

uint64_t rp_tsim_device_tokens(struct rp_tsim *t)
{
	kvs_hiradix_usage_t u;

	if (kvs_hiradix_usage(t->h, &u) < 0)
		return 0;
	return u.device_tokens;
}

uint64_t rp_tsim_host_tokens(struct rp_tsim *t)
{
	kvs_hiradix_usage_t u;

	if (kvs_hiradix_usage(t->h, &u) < 0)
		return 0;
	return u.host_tokens;
}

uint64_t rp_tsim_evictable(struct rp_tsim *t)
{
	uint64_t d = rp_tsim_device_tokens(t);

	/* Prefixes shared by several requests count more than once: an
	 * underestimate, so admission errs on the side of waiting. */
	return d > t->locked ? d - t->locked : 0;
}

uint64_t rp_tsim_host_tokens_max(const struct rp_tsim *t)
{
	return kvs_hpool_capacity(t->hp) * t->ps;
}

kvs_hiradix_t *rp_tsim_cache(struct rp_tsim *t)
{
	return t->h;
}

int rp_tsim_l3_wait(struct rp_tsim *t)
{
	return settle_all(t); /* host backups land, then the store's */
}

uint64_t rp_tsim_evict(struct rp_tsim *t, uint64_t tokens)
{
	ssize_t got = kvs_hiradix_evict_device(t->h, tokens > SIZE_MAX / 2 ? SIZE_MAX / 2
								    : (size_t)tokens);

	return got > 0 ? (uint64_t)got : 0;
}

void rp_tsim_drain(struct rp_tsim *t)
{
	/* Backups in flight lock their nodes: let them land first. */
	(void)settle_all(t);
	(void)kvs_hiradix_evict_device(t->h, SIZE_MAX / 2);
}
