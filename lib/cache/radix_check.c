/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/radix_check.c - trust in the radix cache: the checks of an insert's
 * locations before anything changes (runs of pages, duplicates, pages
 * held by the caller and not already the tree's) and kvs_radix_validate(),
 * the same of the whole tree.  See lib/cache/radix.c.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu-bp.h>

#include "cache/radix_int.h"

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

/* Is a page named twice in @locs (@n tokens, page-aligned)?  Without a
 * pool, on a sorted copy.  Returns 1, 0, or -1 (ENOMEM). */
static int has_dup_page(struct kvs_radix *r, const int32_t *locs, size_t n)
{
	size_t np = n / r->ps, i;
	int32_t *pg;
	int dup = 0;

	if (np < 2)
		return 0;
	pg = malloc(np * sizeof(*pg));
	if (!pg)
		return kvs_fail(ENOMEM);
	for (i = 0; i < np; i++)
		pg[i] = locs[i * r->ps];
	qsort(pg, np, sizeof(*pg), cmp_i32);
	for (i = 1; i < np && !dup; i++)
		dup = pg[i] == pg[i - 1];
	free(pg);
	return dup;
}

/*
 * Check the shape of the locations an insert is handed (@n tokens, whole
 * pages) and cut them into runs of consecutive pages (r->runs): each page's
 * locations one page of the pool in order, all in the pool's range (>= 0,
 * and within an int32_t, without a pool).  A maximal run of consecutive
 * locations must then start a page, with an aligned location, and hold
 * whole pages; so one scan checks everything, with no division a token.
 * Returns 0, or -1 with errno EINVAL or ENOMEM.  With wlock.
 */
static int cut_runs(struct kvs_radix *r, const int32_t *locs, size_t n)
{
	uint64_t limit = r->cap ? r->cap : (uint64_t)INT32_MAX + 1;
	struct prun *nr;
	size_t at = 0;

	r->nruns = 0;
	while (at < n) {
		size_t end = consec_end(locs, at, n), len = end - at;
		int64_t v = locs[at];

		if (v < 0 || (uint64_t)v + len > limit || !loc_aligned(r, (int32_t)at) ||
		    !loc_aligned(r, (int32_t)len) || !loc_aligned(r, (int32_t)v))
			return kvs_fail(EINVAL);
		nr = kvsi_grow(r->runs, &r->runs_cap, r->nruns, sizeof(*r->runs));
		if (!nr)
			return kvs_fail(ENOMEM);
		r->runs = nr;
		r->runs[r->nruns].at = at;
		r->runs[r->nruns].first = loc_page(r, (int32_t)v);
		r->runs[r->nruns++].np = (uint32_t)loc_page(r, (int32_t)len);
		at = end;
	}
	return 0;
}


/*
 * Over a pool, the page checks of an insert, a run at a time (r->runs):
 * every page held by the caller (reference count > 0) and none named twice.
 * Runs that come in ascending order without overlap (what the slab hands
 * out, lowest page first) cannot name a page twice: one compare a run.
 * Others go through the scratch bitmap r->seen (left clear again), whose
 * words, one bit a pool page, are cold: each run costs a cache miss or two
 * there, and most inserts need none.  Returns 0 or -1 with errno EINVAL.
 * With wlock.
 */
static int check_pages(struct kvs_radix *r)
{
	size_t k, done;
	uint64_t next = 0;
	bool sorted = true;
	int rc = 0;

	for (k = 0; k < r->nruns; k++) {
		const struct prun *u = &r->runs[k];

		if (!kvsi_slab_run_held(r->slab, (uint32_t)u->first, u->np))
			return kvs_fail(EINVAL);
		sorted = sorted && u->first >= next;
		next = u->first + u->np;
	}
	if (sorted)
		return 0;
	for (k = 0; k < r->nruns; k++) {
		const struct prun *u = &r->runs[k];

		if (bits_any(r->seen, u->first, u->first + u->np)) {
			rc = kvs_fail(EINVAL);
			break;
		}
		bits_fill(r->seen, u->first, u->first + u->np, true);
	}
	for (done = k, k = 0; k < done; k++)
		bits_fill(r->seen, r->runs[k].first, r->runs[k].first + r->runs[k].np, false);
	return rc;
}

/*
 * Check the locations of the @n tokens (page-aligned) an insert would
 * store, before it changes anything (insert_locked() hands the part of its
 * key the tree does not hold yet): every location in the pool's range
 * (>= 0 without a pool), each page's locations one page of the pool in
 * order, no page twice, every page held by the caller (reference count >
 * 0); insert_locked() then refuses a page already the tree's.  Leaves the
 * runs of pages in r->runs for the insert.  With wlock.  Returns 0, or -1
 * with errno EINVAL or ENOMEM.
 */
int rx_check_insert(struct kvs_radix *r, const int32_t *locs, size_t n)
{
	int dup;

	if (cut_runs(r, locs, n) < 0)
		return -1;
	if (r->slab) {
		if (check_pages(r) < 0)
			return -1;
	} else {
		dup = has_dup_page(r, locs, n);
		if (dup)
			return dup < 0 ? -1 : kvs_fail(EINVAL);
	}
	return 0;
}


struct vstate {
	uint64_t evictable, protected_, total, nodes, leaves;
	uint64_t *mine;			/* pool pages seen so far (pool only) */
	int32_t *pages;			/* without a pool: every page, to sort */
	size_t npages;
	int bad;
};

/* The locations of one node: in range, page-aligned, each page held (by
 * the caller's pool reference count), and no page seen in another node. */
static void validate_vals(struct kvs_radix *r, const struct rseg *s, struct vstate *v)
{
	uint32_t i;

	for (i = 0; i < s->len && !v->bad; i++) {
		int32_t x = s->vals[i];

		if (x < 0 || (r->cap && (uint64_t)x >= r->cap) ||
		    (i % r->ps ? x != s->vals[i - 1] + 1 : x % (int32_t)r->ps != 0)) {
			v->bad = 1;
			break;
		}
		if (i % r->ps)
			continue;
		if (v->mine) {
			uint64_t b = (uint64_t)x / r->ps;

			if (bit_test(v->mine, b) || !bit_test(r->held, b) ||
			    kvs_slab_refcount(r->slab, (uint32_t)b) <= 0)
				v->bad = 1;
			bit_set(v->mine, b);
		} else if (v->pages) {
			v->pages[v->npages++] = x;
		}
	}
}

static void validate_node(struct kvs_radix *r, struct rnode *n, uint32_t parent_lock,
			  struct vstate *v)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);
	uint32_t i;

	if (n != r->root) {
		v->nodes++;
		v->total += s->len;
		if (n->lock_ref)
			v->protected_ += s->len;
		else
			v->evictable += s->len;
		if (s->len == 0 || s->len % r->ps || n->tree != r)
			v->bad = 1;
		if (!v->bad)
			validate_vals(r, s, v);
		/* A locked node has locked ancestors (locks go to the root). */
		if (n->lock_ref > parent_lock)
			v->bad = 1;
		if ((n->ek.idx >= 0) != (n->lock_ref == 0 && !k))
			v->bad = 1;
		if (n->lock_ref == 0 && !k)
			v->leaves++;
		if (n->ek.idx >= 0 &&
		    ((size_t)n->ek.idx >= r->heap.n || r->heap.a[n->ek.idx] != &n->ek))
			v->bad = 1;
		if (n->h != child_hash(r, n->extra, s->keys))
			v->bad = 1;
	}
	if (!k)
		return;
	for (i = 0; i < k->n && !v->bad; i++) {
		struct rnode *c = k->e[i].node;

		if (c->parent != n || k->e[i].h != c->h || (i && k->e[i - 1].h > k->e[i].h))
			v->bad = 1;
		/* Distinct first pages among siblings (under one extra key). */
		if (i && k->e[i - 1].h == k->e[i].h && k->e[i - 1].node->extra == c->extra &&
		    memcmp(seg_of(k->e[i - 1].node)->keys, seg_of(c)->keys, r->ps * 4) == 0)
			v->bad = 1;
		validate_node(r, c, n == r->root ? UINT32_MAX : n->lock_ref, v);
	}
}

/**
 * kvs_radix_validate() - check the tree's invariants.
 * @radix: cache.
 *
 * evictable + protected == tokens in the tree; a locked node's ancestors
 * are locked at least as often; siblings have distinct first pages; every
 * location is in the pool's range (>= 0 without a pool) and page-aligned;
 * no page is held by two nodes; over a pool, every page's reference count
 * is > 0 and the tree's map of held pages is exact; the eviction heap holds
 * exactly the unlocked leaves.
 *
 * Context: MT-Safe (takes wlock).
 * Return: 0, or -1 with errno EUCLEAN (an invariant broken), EINVAL or
 * ENOMEM.
 */
KVS_EXPORT int kvs_radix_validate(kvs_radix_t *r)
{
	struct vstate v = {0};
	size_t i;

	if (!r)
		return kvs_fail(EINVAL);
	rx_wlock(r);
	if (r->held)
		v.mine = calloc(map_words(r), sizeof(uint64_t));
	else
		v.pages = malloc((r->total / r->ps + 1) * sizeof(int32_t));
	if (!v.mine && !v.pages) {
		pthread_mutex_unlock(&r->wlock);
		return kvs_fail(ENOMEM);
	}
	validate_node(r, r->root, UINT32_MAX, &v);
	if (v.evictable != r->evictable || v.protected_ != r->protected_ || v.total != r->total ||
	    v.nodes != r->nnodes || r->evictable + r->protected_ != r->total ||
	    v.leaves != r->heap.n || !evict_heap_valid(&r->heap))
		v.bad = 1;
	if (!v.bad && v.mine && memcmp(v.mine, r->held, map_words(r) * sizeof(uint64_t)) != 0)
		v.bad = 1;
	if (!v.bad && v.pages) {
		qsort(v.pages, v.npages, sizeof(int32_t), cmp_i32);
		for (i = 1; i < v.npages && !v.bad; i++)
			if (v.pages[i] == v.pages[i - 1])
				v.bad = 1;
	}
	pthread_mutex_unlock(&r->wlock);
	free(v.mine);
	free(v.pages);
	return v.bad ? kvs_fail(EUCLEAN) : 0;
}
