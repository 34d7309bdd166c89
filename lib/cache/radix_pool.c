/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/radix_pool.c - the radix cache's operations for its pool
 * (lib/mem/cacheops.h), which the elastic calls use on every cache
 * registered on a pool: what is evictable and evicting it, the pages of
 * unlocked nodes, evicting exactly the nodes that hold pages of chosen
 * slabs (slab-aware limits), and compaction's isolate, migrate and put
 * back.
 *
 * Isolation pins: every node holding a page to be moved is locked as
 * kvs_radix_lock() locks it (its path to the root protected), so no
 * eviction, reset or limit can drop the tree's reference while the bytes
 * are copied; put back unlocks them.  A split in the window keeps the
 * count right: the new parent takes the node's lock count, and unlocking
 * walks up from the node through it.  Migration builds the nodes' new
 * segments before it calls the pool's inner step (nothing can fail after
 * it), then writes the locations the inner step left standing and
 * publishes them in one write section: lock-free readers in flight start
 * over on the sequence count.
 *
 * Locking: each operation takes wlock (slab->lock under it, in eviction);
 * migrate holds it across the pool's inner step.  The pool's elastic mutex
 * is held around all of them (lib/mem/cacheops.h).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu-bp.h>

#include "cache/radix_int.h"
#include "mem/cacheops.h"


/* Mark the pages of @n's subtree that sit in unlocked nodes. */
static void mark_unlocked(struct kvs_radix *r, struct rnode *n, uint64_t *pages)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);
	uint32_t i;

	if (n != r->root && n->lock_ref == 0)
		for (i = 0; i < s->len; i += r->ps)
			bit_set(pages, (uint64_t)s->vals[i] / r->ps);
	if (k)
		for (i = 0; i < k->n; i++)
			mark_unlocked(r, k->e[i].node, pages);
}

/* unlocked_pages(): every page the tree holds in an unlocked node, what
 * evicting the whole evictable tree would drop a reference to. */
static int ops_unlocked_pages(void *cache, uint64_t *pages)
{
	struct kvs_radix *r = cache;

	rx_wlock(r);
	mark_unlocked(r, r->root, pages);
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

/* held_pages(): every page the tree holds, locked or not. */
static int ops_held_pages(void *cache, uint64_t *pages)
{
	struct kvs_radix *r = cache;
	size_t i, n;

	rx_wlock(r);
	n = map_words(r);
	for (i = 0; i < n; i++)
		pages[i] |= r->held[i];
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

/* A growing array of nodes; nomem once it could not grow. */
struct nodev {
	struct rnode **v;
	size_t n, cap;
	bool nomem;
};

static void nodev_push(struct nodev *a, struct rnode *n)
{
	struct rnode **v = kvsi_grow(a->v, &a->cap, a->n, sizeof(*a->v));

	if (!v) {
		a->nomem = true;
		return;
	}
	a->v = v;
	a->v[a->n++] = n;
}

struct doom {
	struct nodev nv;
	const uint64_t *slabs;
};

/* Collect, children first, the unlocked nodes of @n's subtree that hold a
 * page of a slab in d->slabs or descend from one that does. */
static void doom_walk(struct kvs_radix *r, struct rnode *n, bool doomed, struct doom *d)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);
	uint32_t i;

	if (n != r->root) {
		if (n->lock_ref > 0)
			doomed = false; /* nor can any ancestor go: it is locked too */
		else
			for (i = 0; i < s->len && !doomed; i += r->ps)
				doomed = bit_test(d->slabs, (uint64_t)s->vals[i] / r->ps / r->pps);
	}
	if (k)
		for (i = 0; i < k->n; i++)
			doom_walk(r, k->e[i].node, doomed, d);
	if (!doomed || n == r->root || n->lock_ref > 0)
		return;
	nodev_push(&d->nv, n);
}

/* evict_slabs(): every unlocked node holding a page of a slab in @slabs,
 * with the nodes below it, leaves first.  Locked nodes (and so their
 * ancestors) stay. */
static long ops_evict_slabs(void *cache, const uint64_t *slabs)
{
	struct kvs_radix *r = cache;
	struct doom d = {.slabs = slabs};
	struct rnode *gone = NULL, **tail = &gone;
	size_t i, done = 0;

	rx_wlock(r);
	doom_walk(r, r->root, false, &d);
	if (d.nv.nomem) {
		pthread_mutex_unlock(&r->wlock);
		free(d.nv.v);
		return kvs_fail(ENOMEM);
	}
	if (d.nv.n) {
		write_begin(r);
		for (i = 0; i < d.nv.n; i++) {
			uint32_t len = seg_of(d.nv.v[i])->len;

			if (rx_evict_one(r, d.nv.v[i], &tail))
				done += len;
		}
		write_end(r);
		rx_evict_finish(r, gone);
	}
	pthread_mutex_unlock(&r->wlock);
	free(d.nv.v);
	return (long)done;
}

/* ----------------------------------------------------------- migration */

struct iso {
	struct nodev nv;
	const uint64_t *pages;
	uint64_t *pinned;
};

/* Collect the nodes of @n's subtree holding a page in i->pages. */
static void iso_walk(struct kvs_radix *r, struct rnode *n, struct iso *i)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);
	uint32_t j;

	for (j = 0; n != r->root && j < s->len; j += r->ps) {
		if (!bit_test(i->pages, (uint64_t)s->vals[j] / r->ps))
			continue;
		nodev_push(&i->nv, n);
		if (i->nv.nomem)
			return;
		for (; j < s->len; j += r->ps)
			if (bit_test(i->pages, (uint64_t)s->vals[j] / r->ps))
				bit_set(i->pinned, (uint64_t)s->vals[j] / r->ps);
		break;
	}
	if (k)
		for (j = 0; j < k->n && !i->nv.nomem; j++)
			iso_walk(r, k->e[j].node, i);
}

/* isolate(): lock every node holding a page in @pages. */
static int ops_isolate(void *cache, const uint64_t *pages, uint64_t *pinned, void **token)
{
	struct kvs_radix *r = cache;
	struct iso *i = calloc(1, sizeof(*i));
	size_t j;

	if (!i)
		return kvs_fail(ENOMEM);
	i->pages = pages;
	i->pinned = pinned;
	rx_wlock(r);
	iso_walk(r, r->root, i);
	if (i->nv.nomem) {
		pthread_mutex_unlock(&r->wlock);
		free(i->nv.v);
		free(i);
		return kvs_fail(ENOMEM);
	}
	for (j = 0; j < i->nv.n; j++)
		rx_lock_path(r, i->nv.v[j]);
	pthread_mutex_unlock(&r->wlock);
	i->pages = NULL;
	i->pinned = NULL;
	*token = i;
	return 0;
}

/* putback(): unlock what isolate() locked. */
static void ops_putback(void *cache, void *token)
{
	struct kvs_radix *r = cache;
	struct iso *i = token;
	size_t j;

	rx_wlock(r);
	for (j = 0; j < i->nv.n; j++)
		rx_unlock_path(r, i->nv.v[j]);
	pthread_mutex_unlock(&r->wlock);
	free(i->nv.v);
	free(i);
}

struct reloc {
	struct rnode **node;
	struct rseg **seg;
	size_t n, cap;
	const int32_t *newpage;
	bool nomem;
};

/* Build, for every node of @n's subtree holding a page to move, a copy of
 * its segment (the locations are written after the pool's inner step). */
static void reloc_walk(struct kvs_radix *r, struct rnode *n, struct reloc *rl)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n), *ns;
	uint32_t i;
	bool moved = false;

	for (i = 0; n != r->root && i < s->len && !moved; i += r->ps)
		moved = rl->newpage[(uint32_t)s->vals[i] / r->ps] >= 0;
	if (moved && !rl->nomem) {
		if (rl->n == rl->cap) {
			size_t cap = rl->cap ? 2 * rl->cap : 64;
			struct rnode **nv = realloc(rl->node, cap * sizeof(*nv));
			struct rseg **sv;

			if (nv)
				rl->node = nv;
			sv = nv ? realloc(rl->seg, cap * sizeof(*sv)) : NULL;
			if (!sv) {
				rl->nomem = true;
				return;
			}
			rl->seg = sv;
			rl->cap = cap;
		}
		ns = rx_seg_new(&r->sc, s->len, s->keys, s->vals);
		if (!ns) {
			rl->nomem = true;
			return;
		}
		rl->node[rl->n] = n;
		rl->seg[rl->n++] = ns;
	}
	if (k)
		for (i = 0; i < k->n; i++)
			reloc_walk(r, k->e[i].node, rl);
}

/* migrate(): every node holding a page p with newpage[p] >= 0 (after the
 * inner step) gets a new segment naming the new page, the held map
 * following, in one write section under wlock. */
static int ops_migrate(void *cache, int32_t *newpage, int (*inside)(void *arg), void *arg)
{
	struct kvs_radix *r = cache;
	struct reloc rl = {.newpage = newpage};
	size_t i;
	int rc, err = 0;

	rx_wlock(r);
	reloc_walk(r, r->root, &rl);
	if (rl.nomem) {
		pthread_mutex_unlock(&r->wlock);
		for (i = 0; i < rl.n; i++)
			rx_seg_free(rl.seg[i]);
		free(rl.node);
		free(rl.seg);
		return kvs_fail(ENOMEM);
	}
	rc = inside(arg);
	if (rc < 0)
		err = errno;
	write_begin(r);
	for (i = 0; i < rl.n; i++) {
		struct rseg *old = seg_of(rl.node[i]), *ns = rl.seg[i];
		bool moved = false;
		uint32_t j;

		for (j = 0; j < ns->len; j++) {
			int32_t np = newpage[(uint32_t)old->vals[j] / r->ps];

			if (np < 0)
				continue;
			ns->vals[j] = np * (int32_t)r->ps + old->vals[j] % (int32_t)r->ps;
			moved = true;
		}
		if (!moved) { /* the inner step kept its pages where they were */
			rx_seg_free(ns);
			continue;
		}
		for (j = 0; j < ns->len; j += r->ps) {
			bit_clear(r->held, (uint64_t)old->vals[j] / r->ps);
			bit_set(r->held, (uint64_t)ns->vals[j] / r->ps);
		}
		atomic_store_explicit(&rl.node[i]->seg, ns, memory_order_release);
		free(rl.node[i]->hist);
		rl.node[i]->hist = NULL;
		rcu_retire(&old->rcu, rx_free_seg_cb);
	}
	write_end(r);
	pthread_mutex_unlock(&r->wlock);
	free(rl.node);
	free(rl.seg);
	if (rc < 0)
		errno = err;
	return rc;
}

/* ------------------------------------------------------------- shrinker */

/* evictable(): the tokens of unlocked nodes. */
static uint64_t ops_evictable(void *cache)
{
	return kvs_radix_evictable(cache);
}

/* evict(): in the policy's order (slab-aware where the tree is). */
static long ops_evict(void *cache, uint64_t tokens)
{
	ssize_t n = kvs_radix_evict(cache, tokens > SIZE_MAX ? SIZE_MAX : (size_t)tokens);

	return n < 0 ? -1 : (long)n;
}

const struct kvsi_cache_ops kvsi_radix_cache_ops = KVSI_CACHE_OPS("radix", ops);
