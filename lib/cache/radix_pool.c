/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/radix_pool.c - the radix cache's operations for its pool
 * (lib/mem/cacheops.h).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu-bp.h>

#include "cache/radix_int.h"

/* ------------------------------------------------- elastic memory's side */

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

/*
 * kvsi_radix_unlocked_pages() - set, in @pages (one bit a pool page, zeroed
 * by the caller), every page the tree holds in an unlocked node: what
 * evicting the whole evictable tree would drop a reference to.  For
 * kvs_pool_set_limit().  Takes wlock.  0, or -1 with errno EINVAL (no pool).
 */
int kvsi_radix_unlocked_pages(struct kvs_radix *r, uint64_t *pages)
{
	if (!r->pool)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	mark_unlocked(r, r->root, pages);
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

/*
 * kvsi_radix_held_pages() - OR into @pages (one bit a pool page) every page
 * the tree holds, locked or not: one reference each.  For
 * kvs_pool_compact().  Takes wlock.  0, or -1 with errno EINVAL (no pool).
 */
int kvsi_radix_held_pages(struct kvs_radix *r, uint64_t *pages)
{
	size_t i, n;

	if (!r->pool)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	n = map_words(r);
	for (i = 0; i < n; i++)
		pages[i] |= r->held[i];
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

struct doom {
	struct rnode **v;
	size_t n, cap;
	const uint64_t *slabs;
	bool nomem;
};

/* Collect, children first, the unlocked nodes of @n's subtree that hold a
 * page of a slab in d->slabs or descend from one that does. */
static void doom_walk(struct kvs_radix *r, struct rnode *n, bool doomed, struct doom *d)
{
	struct rnode **v;
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
	v = kvsi_grow(d->v, &d->cap, d->n, sizeof(*d->v));
	if (!v) {
		d->nomem = true;
		return;
	}
	d->v = v;
	d->v[d->n++] = n;
}

/*
 * kvsi_radix_evict_slabs() - evict every unlocked node holding a page of a
 * slab set in @slabs (one bit a slab of the pool's allocator), with the
 * nodes below it, leaves first: the eviction that empties chosen slabs for
 * kvs_pool_set_limit().  Locked nodes (and so their ancestors) stay.  Takes
 * wlock.  Returns the tokens evicted, or -1 with errno ENOMEM (nothing
 * evicted) or EINVAL (no pool).
 */
long kvsi_radix_evict_slabs(struct kvs_radix *r, const uint64_t *slabs)
{
	struct doom d = {.slabs = slabs};
	struct rnode *gone = NULL, **tail = &gone;
	size_t i, done = 0;

	if (!r->pool)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
	doom_walk(r, r->root, false, &d);
	if (d.nomem) {
		pthread_mutex_unlock(&r->wlock);
		free(d.v);
		return kvs_fail(ENOMEM);
	}
	if (d.n) {
		write_begin(r);
		for (i = 0; i < d.n; i++) {
			uint32_t len = seg_of(d.v[i])->len;

			if (rx_evict_one(r, d.v[i], &tail))
				done += len;
		}
		write_end(r);
		rx_evict_finish(r, gone);
	}
	pthread_mutex_unlock(&r->wlock);
	free(d.v);
	return (long)done;
}

struct reloc {
	struct rnode **node;
	struct rseg **seg;
	size_t n, cap;
	const int32_t *newpage;
	bool nomem;
};

/* Build, for every node of @n's subtree holding a moved page, the segment
 * it will have: the same keys, the moved pages' new locations. */
static void reloc_walk(struct kvs_radix *r, struct rnode *n, struct reloc *rl)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n), *ns;
	uint32_t i;
	bool moved = false;

	for (i = 0; i < s->len && !moved; i += r->ps)
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
		for (i = 0; i < s->len; i++) {
			uint32_t p = (uint32_t)s->vals[i] / r->ps;

			if (rl->newpage[p] >= 0)
				ns->vals[i] = rl->newpage[p] * (int32_t)r->ps + s->vals[i] % (int32_t)r->ps;
		}
		rl->node[rl->n] = n;
		rl->seg[rl->n++] = ns;
	}
	if (k)
		for (i = 0; i < k->n; i++)
			reloc_walk(r, k->e[i].node, rl);
}

/*
 * kvsi_radix_relocate() - compaction's writer section: every node holding
 * a page p with @newpage[p] >= 0 gets a new segment naming page
 * @newpage[p] instead (published with one pointer store, the old one
 * retired through RCU; readers in flight start over on the sequence
 * count), the held map follows, and @inside(@arg) runs under wlock first,
 * so the request table's rows and the pages' reference counts change in
 * the same section.  Takes wlock.  0; or -1 with errno ENOMEM (nothing
 * changed, @inside not called), or @inside's failure (the tree is updated
 * regardless: @inside's side is the caller's to describe).
 */
int kvsi_radix_relocate(struct kvs_radix *r, const int32_t *newpage, int (*inside)(void *arg),
			void *arg)
{
	struct reloc rl = {.newpage = newpage};
	size_t i;
	int rc, err = 0;

	if (!r->pool)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&r->wlock);
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
		uint32_t j;

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
	if (err)
		return kvs_fail(err);
	return 0;
}
