/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hiradix_pool.c - what the device pool asks of a hierarchical
 * radix cache (lib/mem/cacheops.h): the shrinker (evictable, evict,
 * unlocked_pages, evict_slabs) and the movable-page operations (held_pages,
 * isolate, migrate, putback), on the device tier only: host copies and
 * the store are none of the pool's business.
 *
 * kvs_hiradix_create() registers the cache on its pool once everything
 * else succeeded (lib/cache/hiradix_life.c), kvs_hiradix_destroy()
 * unregisters it before it tears anything down: the registry's mutex (the
 * pool's elastic mutex) is taken by both, so no elastic call is inside
 * the cache when it goes.  The cache has no reset.
 *
 * What the pool's operations see:
 *
 *  - evictable: the device tokens of the unlocked device nodes.  Device
 *    eviction takes leaves until none is left, and an unlocked node has
 *    no locked node below it (lock_ref counts its subtree's locks), so
 *    every unlocked device node's pages go: as a tombstone with a valid
 *    host copy, deleted without one, or, under KVS_WRITE_BACK, after a
 *    backup (which kvs_hiradix_evict_device() waits for).  A node with a
 *    backup or a load in flight is locked (the cache's own lock).
 *  - evict: kvs_hiradix_evict_device().
 *  - evict_slabs: every unlocked device node holding a page of a chosen
 *    slab, with its device descendants (which cannot stay on the device
 *    below a tombstone or a deleted node), children first, each as device
 *    eviction evicts a leaf.
 *  - isolate: every device node holding a page of the set is pinned
 *    (hr_pin(): the cache's own lock on it and its ancestors, which
 *    kvs_hiradix_validate() counts), its pages of the set reported
 *    pinned, the nodes kept in the token; putback unpins them.  A pinned node is in no leaf set: no eviction takes it.
 *  - migrate: under h->lock, the pages of every node with a copy in
 *    flight (a backup pending, queued or copying, or a load back not yet
 *    taken in) are cleared from @newpage first (the copy reads or writes
 *    the old pages), then @inside runs, then every device node's
 *    locations on a page p with newpage[p] >= 0 become newpage[p] *
 *    page_size + offset, and h->held follows (every moved node's old pages
 *    cleared before any new one is set).
 *
 * Locking: each operation takes h->lock (level 2 of common/common.h)
 * under the pool's elastic mutex (level 0) and releases it before it
 * returns; migrate holds it across @inside.  evict and evict_slabs drop it
 * across a write-back wait, as kvs_hiradix_evict_device() does, the
 * nodes they hold pinned meanwhile.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hiradix_int.h"
#include "mem/cacheops.h"

/* Nodes collected by a walk (children first). */
struct nodes {
	node_t **v;
	size_t n, cap;
	bool nomem;
};

static void nodes_add(struct nodes *ns, node_t *x)
{
	node_t **v = kvsi_grow(ns->v, &ns->cap, ns->n, sizeof(*ns->v));

	if (!v) {
		ns->nomem = true;
		return;
	}
	ns->v = v;
	ns->v[ns->n++] = x;
}

/* Whether a device page of @x is set in the bitmap @pages, which has a
 * bit a group of @pps pages (1: a bit a page; the slab's pages a slab: a
 * bit a slab). */
static bool holds_any(const kvs_hiradix_t *h, const node_t *x, const uint64_t *pages, uint32_t pps)
{
	size_t i;

	for (i = 0; i < x->len; i += h->ps)
		if (bit_test(pages, (uint64_t)(uint32_t)x->locs[i] / h->ps / pps))
			return true;
	return false;
}

static void mark_pages(const kvs_hiradix_t *h, const node_t *x, uint64_t *pages)
{
	size_t i;

	for (i = 0; i < x->len; i += h->ps)
		bit_set(pages, (uint64_t)(uint32_t)x->locs[i] / h->ps);
}

/* The unlocked device nodes below @x: their tokens, their pages marked in
 * @pages (may be NULL).  Tombstones have no device node below them. */
static uint64_t unlocked_walk(const kvs_hiradix_t *h, const node_t *x, uint64_t *pages)
{
	const node_t *c;
	uint64_t t = 0;

	for (c = x->child; c; c = c->next) {
		if (!c->on_dev)
			continue;
		if (c->lock_ref == 0) {
			t += c->len;
			if (pages)
				mark_pages(h, c, pages);
		}
		t += unlocked_walk(h, c, pages);
	}
	return t;
}

static uint64_t op_evictable(void *cache)
{
	kvs_hiradix_t *h = cache;
	uint64_t t;

	pthread_mutex_lock(&h->lock);
	t = unlocked_walk(h, &h->root, NULL);
	pthread_mutex_unlock(&h->lock);
	return t;
}

static long op_evict(void *cache, uint64_t tokens)
{
	kvs_hiradix_t *h = cache;
	ssize_t r;

	pthread_mutex_lock(&h->lock);
	hr_poll_locked(h, false);
	r = hr_evict_device(h, (size_t)tokens);
	pthread_mutex_unlock(&h->lock);
	return (long)r;
}

static int op_unlocked_pages(void *cache, uint64_t *pages)
{
	kvs_hiradix_t *h = cache;

	pthread_mutex_lock(&h->lock);
	(void)unlocked_walk(h, &h->root, pages);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

static int op_held_pages(void *cache, uint64_t *pages)
{
	kvs_hiradix_t *h = cache;
	size_t i, n = (size_t)((h->cap / h->ps + 63) / 64);

	pthread_mutex_lock(&h->lock);
	for (i = 0; i < n; i++)
		pages[i] |= h->held[i];
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/* Collect, children first, the unlocked device nodes below @x that hold a
 * page of a slab in @slabs or descend from one that does. */
static void doom_walk(kvs_hiradix_t *h, node_t *x, bool doomed, const uint64_t *slabs,
		      uint32_t pps, struct nodes *ns)
{
	node_t *c;

	for (c = x->child; c; c = c->next) {
		bool d = doomed;

		if (!c->on_dev)
			continue;
		if (c->lock_ref > 0)
			d = false; /* nor can an ancestor go: it is locked too */
		else if (!d)
			d = holds_any(h, c, slabs, pps);
		doom_walk(h, c, d, slabs, pps, ns);
		if (d)
			nodes_add(ns, c);
	}
}

static long op_evict_slabs(void *cache, const uint64_t *slabs)
{
	kvs_hiradix_t *h = cache;
	struct nodes ns = {0};
	size_t i, done = 0, total;
	uint64_t nslabs;
	uint32_t pps;

	kvsi_slab_geom(h->slab, &pps, &nslabs, &total);
	pthread_mutex_lock(&h->lock);
	doom_walk(h, &h->root, false, slabs, pps, &ns);
	if (ns.nomem) {
		pthread_mutex_unlock(&h->lock);
		free(ns.v);
		return kvs_fail(ENOMEM);
	}
	/* Pinned, so that none goes away while a write-back eviction drops
	 * h->lock; each unpinned in its turn, children first. */
	for (i = 0; i < ns.n; i++)
		hr_pin(h, ns.v[i], 1);
	for (i = 0; i < ns.n; i++) {
		node_t *x = ns.v[i];

		hr_pin(h, x, -1);
		if (hr_is_dleaf(h, x))
			done += hr_evict_one(h, x);
	}
	ST(h, evict_device_tokens, done);
	pthread_mutex_unlock(&h->lock);
	free(ns.v);
	return (long)done;
}

/* Every device node below @x holding a page set in @pages. */
static void holders_walk(kvs_hiradix_t *h, node_t *x, const uint64_t *pages, struct nodes *ns)
{
	node_t *c;

	for (c = x->child; c; c = c->next) {
		if (!c->on_dev)
			continue;
		if (holds_any(h, c, pages, 1))
			nodes_add(ns, c);
		holders_walk(h, c, pages, ns);
	}
}

static int op_isolate(void *cache, const uint64_t *pages, uint64_t *pinned, void **token)
{
	kvs_hiradix_t *h = cache;
	struct nodes *ns = calloc(1, sizeof(*ns));
	size_t i, j;

	if (!ns)
		return kvs_fail(ENOMEM);
	pthread_mutex_lock(&h->lock);
	holders_walk(h, &h->root, pages, ns);
	if (ns->nomem) {
		pthread_mutex_unlock(&h->lock);
		free(ns->v);
		free(ns);
		return kvs_fail(ENOMEM);
	}
	for (i = 0; i < ns->n; i++) {
		node_t *x = ns->v[i];

		hr_pin(h, x, 1);
		for (j = 0; j < x->len; j += h->ps) {
			uint64_t p = (uint32_t)x->locs[j] / h->ps;

			if (bit_test(pages, p))
				bit_set(pinned, p);
		}
	}
	pthread_mutex_unlock(&h->lock);
	*token = ns;
	return 0;
}

static void op_putback(void *cache, void *token)
{
	kvs_hiradix_t *h = cache;
	struct nodes *ns = token;
	size_t i;

	if (!ns)
		return;
	pthread_mutex_lock(&h->lock);
	for (i = 0; i < ns->n; i++)
		hr_pin(h, ns->v[i], -1);
	pthread_mutex_unlock(&h->lock);
	free(ns->v);
	free(ns);
}

/* A copy reads or writes @x's device pages: a backup pending (queued,
 * submitting or in flight, until it is resolved) or a load back not yet
 * taken in. */
static bool in_flight(const node_t *x)
{
	return x->bt || x->ld;
}

/* Clear @newpage for the pages of every device node in flight. */
static void pin_flight(kvs_hiradix_t *h, const node_t *x, int32_t *newpage)
{
	const node_t *c;
	size_t i;

	for (c = x->child; c; c = c->next) {
		if (!c->on_dev)
			continue;
		if (in_flight(c))
			for (i = 0; i < c->len; i += h->ps)
				newpage[(uint32_t)c->locs[i] / h->ps] = -1;
		pin_flight(h, c, newpage);
	}
}

static bool moves(const kvs_hiradix_t *h, const node_t *x, const int32_t *newpage)
{
	size_t i;

	for (i = 0; i < x->len; i += h->ps)
		if (newpage[(uint32_t)x->locs[i] / h->ps] >= 0)
			return true;
	return false;
}

/* Pass 0: clear the moving nodes' pages in h->held; pass 1: move their
 * locations and mark the new pages. */
static void move_walk(kvs_hiradix_t *h, node_t *x, const int32_t *newpage, int pass)
{
	node_t *c;
	size_t i;

	for (c = x->child; c; c = c->next) {
		if (!c->on_dev)
			continue;
		if (moves(h, c, newpage)) {
			if (pass == 0) {
				hr_held_mark(h, c, false);
			} else {
				for (i = 0; i < c->len; i++) {
					uint32_t loc = (uint32_t)c->locs[i];
					int32_t np = newpage[loc / h->ps];

					if (np >= 0)
						c->locs[i] = (int32_t)((uint32_t)np * h->ps + loc % h->ps);
				}
				hr_held_mark(h, c, true);
			}
		}
		move_walk(h, c, newpage, pass);
	}
}

static int op_migrate(void *cache, int32_t *newpage, int (*inside)(void *arg), void *arg)
{
	kvs_hiradix_t *h = cache;
	int r, e;

	pthread_mutex_lock(&h->lock);
	pin_flight(h, &h->root, newpage);
	r = inside(arg);
	e = errno;
	/* Pass 1 reads the old locations to find the moving nodes, so pass 0
	 * must have cleared all of them first. */
	move_walk(h, &h->root, newpage, 0);
	move_walk(h, &h->root, newpage, 1);
	pthread_mutex_unlock(&h->lock);
	errno = e;
	return r;
}

static const struct kvsi_cache_ops hiradix_ops = KVSI_CACHE_OPS("hiradix", op);

/* kvs_hiradix_create(): register @h on its pool.  0, or -1 (ENOMEM). */
int hr_pool_register(kvs_hiradix_t *h)
{
	return kvsi_pool_cache_add(h->pool, &hiradix_ops, h);
}

/* kvs_hiradix_destroy(), before anything is torn down. */
void hr_pool_unregister(kvs_hiradix_t *h)
{
	kvsi_pool_cache_del(h->pool, h);
}
