/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/radix.c - the radix-tree prefix cache (SGLang's RadixCache).
 *
 * What it owns.  A tree whose edges are runs of token ids and whose nodes
 * hold, for each token, its KV location in a kvs_pool.  The tree holds one
 * pool reference on every page it stores and drops it when it evicts the
 * node.  Matching and insertion work in whole pages: keys are cut to a
 * multiple of page_size, a node's length is a multiple of page_size, and a
 * node's children are told apart by their first page (and the request's
 * extra key: requests with different extra keys never share a node).
 *
 * Data structures.  A node's tokens and locations live in one immutable
 * segment (struct rseg); a split's two halves point into the old
 * segment's memory (its owner, freed with the last segment over it), so a
 * split copies nothing; owners' memory comes from and goes back to a
 * per-tree cache of blocks (struct seg_cache).  A node's children live in
 * one array sorted by a 64-bit hash of (extra key, first page) (struct
 * rkids), changed in place while it has room (see kid_count()).  Changing
 * a segment, or a full array, means building a new one, publishing it with
 * one pointer store, and retiring the old one through call_rcu.  Every node records its tree, so
 * a handle from another tree is refused.  Leaves that may be evicted
 * (lock_ref 0, no children) sit in the eviction-policy heap
 * (lib/cache/evict_heap.c), kept up to date on every change, so eviction never
 * walks the tree.  Time is a logical clock, one tick per match or insert.
 * KV events and the chained page hashes are lib/cache/kvevent.c's.  Over a pool,
 * the tree keeps a bitmap of the pages it holds (one bit a pool page), so
 * an insert can refuse a page the tree already holds in O(1), and a
 * scratch bitmap of the same size to find a page named twice in one call
 * (needed only when the call's runs of pages do not come in ascending
 * order, as the slab hands them out); both are changed only under wlock.
 *
 * Trust at the API boundary.  An insert checks every location of the part
 * of the key the tree does not hold yet before it changes anything, a run
 * of consecutive pages at a time (one scan finds the runs): in the pool's
 * range, page-aligned, no page twice, held by the caller (refcount > 0),
 * and not already the tree's.  The locations of the part the tree holds
 * are not looked at: the tree keeps its own, and the caller's are most
 * often the very ones it matched.  Node handles are checked
 * to belong to the tree.  kvs_radix_validate() checks the same of the
 * whole tree.
 *
 * Concurrency (the library's lock order is in common/common.h).
 * Writers (match, insert, lock, unlock, evict, reset) are serialized by
 * r->wlock.  kvs_radix_match_ro() takes no lock: it runs inside an RCU
 * read-side critical section (liburcu, bulletproof flavour: no thread
 * registration), so nothing it can reach is freed under it, and validates
 * its whole walk against a sequence count that the writer makes odd while
 * it changes what a reader can see: a split, a new child, an eviction, a
 * reset.  A writer's match or insert that only refreshes access times, hit
 * counts and priorities leaves the count alone: readers never look at
 * those fields (they are the writer's, below the two published pointers),
 * so they do not send readers back.  RCU alone would not do: a split gives
 * an existing node a shorter segment before its new parent is published,
 * and a reader that came through the old edge would match the shorter
 * segment at the wrong depth (whatever the order of the stores).  As the
 * SLAB_TYPESAFE_BY_RCU warning says, RCU keeps the
 * memory valid, not the meaning: the reader re-checks with the sequence
 * count and starts over if the tree changed during its walk, so it never
 * returns a torn result.  A reader that has started over RO_TRIES times
 * leaves its RCU read section and reads once under wlock instead, so a
 * stream of writes cannot starve it and no reader ever waits for wlock
 * inside a read section; writers never wait for readers, and keep their
 * write sections short: evicted locations are freed and KV events
 * delivered after the sequence count is even again (still under wlock),
 * so an event callback may call kvs_radix_match_ro() but no writer call.
 *
 * Slab awareness (kvs_radix_attr_t.slab_aware).  Eviction may look past
 * the heap's top: the first slab_window leaves in the policy's order are
 * found by walking the heap from its root with a small frontier, and each
 * is weighed by the live pages its eviction would leave in the slabs it
 * frees pages in (slab->lock held for the reads, under wlock, which the
 * lock order allows).  What a leaf's eviction frees per slab is counted
 * once and kept on the leaf (struct slab_hist) while the slab's sharing
 * generation stands.  Pages of leaves the same call has already taken
 * are counted as freed (slab_gone), since they go back to the pool only
 * after the write section.  For elastic memory (lib/elastic/elastic.c) the tree
 * also reports the pages of its unlocked nodes, evicts exactly the nodes
 * that hold pages of chosen slabs, and relocates moved pages (compaction)
 * by publishing new segments in one write section.
 *
 * Files.  This file holds the tree itself (children, the writer, create,
 * insert, lock, reset, getters, statistics); lib/cache/radix_int.h lists
 * the others: segment memory, matching, input checks and validation,
 * eviction, and the cache's operations for its pool.
 *
 * Statistics.  The writer's counters are plain fields changed under wlock;
 * the readers' three are relaxed atomics on a cache line of their own, away
 * from the sequence count every reader loads.
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


/* Entry @i of @k set to (@h, @node), as readers may be looking: the node
 * with release, so that a reader who loads it (kid_node()) sees the node
 * and its segment as they were written before. */
static inline void kid_set(struct rkids *k, uint32_t i, uint64_t h, struct rnode *node)
{
	__atomic_store_n(&k->e[i].h, h, __ATOMIC_RELAXED);
	__atomic_store_n(&k->e[i].node, node, __ATOMIC_RELEASE);
}

/*
 * Change the children array of @n by adding @add (if not NULL), removing
 * @del (if not NULL), or swapping @del for @add.  In place when the array
 * has room, which the caller's write section makes safe: a reader may see
 * entries half moved (each a valid node, the count written last) and is
 * sent back by the sequence count.  Otherwise a copy with twice the room,
 * published with one store, the old one retired through RCU.  A removal
 * never allocates (eviction).  Returns 0 or -1 (ENOMEM, nothing changed).
 */
int rx_kids_update(struct rnode *n, struct rnode *add, struct rnode *del)
{
	struct rkids *old = kids_of(n), *nw;
	uint32_t on = old ? old->n : 0, nn = on + (add != NULL) - (del != NULL), i, j = 0;
	bool placed = add == NULL;

	if (nn == 0) {
		atomic_store_explicit(&n->kids, NULL, memory_order_release);
		goto retire;
	}
	if (old && del) {
		for (i = 0; i < on && old->e[i].node != del; i++)
			;
		if (!add) {
			for (; i + 1 < on; i++)
				kid_set(old, i, old->e[i + 1].h, old->e[i + 1].node);
			__atomic_store_n(&old->n, on - 1, __ATOMIC_RELEASE);
			return 0;
		}
		if (i < on && old->e[i].h == add->h) { /* a split: same first page */
			__atomic_store_n(&old->e[i].node, add, __ATOMIC_RELEASE);
			return 0;
		}
	} else if (old && add && on < old->cap) {
		for (i = on; i > 0 && old->e[i - 1].h > add->h; i--)
			kid_set(old, i, old->e[i - 1].h, old->e[i - 1].node);
		kid_set(old, i, add->h, add);
		__atomic_store_n(&old->n, on + 1, __ATOMIC_RELEASE);
		return 0;
	}
	nw = malloc(sizeof(*nw) + 2 * (size_t)nn * sizeof(nw->e[0]));
	if (!nw)
		return -1;
	nw->cap = 2 * nn;
	for (i = 0; i < on; i++) {
		if (old->e[i].node == del)
			continue;
		if (!placed && add->h < old->e[i].h) {
			nw->e[j].h = add->h;
			nw->e[j++].node = add;
			placed = true;
		}
		nw->e[j++] = old->e[i];
	}
	if (!placed) {
		nw->e[j].h = add->h;
		nw->e[j++].node = add;
	}
	nw->n = j;
	atomic_store_explicit(&n->kids, nw, memory_order_release);
retire:
	if (old)
		rcu_retire(&old->rcu, rx_free_kids_cb);
	return 0;
}

/* ------------------------------------------------------------ the writer */



/* Put @n in the heap or take it out as its evictability says; keep its place
 * right after its key changed. */
void rx_heap_fix(struct kvs_radix *r, struct rnode *n)
{
	bool want = n != r->root && n->lock_ref == 0 && nkids(n) == 0;

	if (want && n->ek.idx < 0) {
		if (evict_heap_push(&r->heap, &n->ek) < 0)
			return; /* out of memory: the node is just not evictable yet */
	} else if (!want && n->ek.idx >= 0) {
		evict_heap_remove(&r->heap, &n->ek);
	} else if (want) {
		evict_heap_update(&r->heap, &n->ek);
	}
}

static struct rnode *node_new(struct kvs_radix *r, struct rnode *parent, uint64_t extra,
			      struct rseg *seg)
{
	struct rnode *n;

	/* The heap holds at most every node: room for one more now, so that
	 * eviction, which pushes the parents it turns into leaves, never
	 * allocates. */
	if (evict_heap_reserve(&r->heap, r->nnodes + 1) < 0)
		return NULL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	atomic_store_explicit(&n->seg, seg, memory_order_relaxed);
	n->tree = r;
	n->parent = parent;
	n->extra = extra;
	n->h = seg->len ? child_hash(r, extra, seg->keys) : 0;
	n->ek.idx = -1;
	n->ek.created = n->ek.last_access = r->clock;
	r->nnodes++;
	return n;
}

/*
 * Split @c at @m tokens: a new node takes the first @m tokens and becomes
 * @c's parent.  As SGLang's _split_node does, the new node is a fresh node
 * (created now, no hits) that takes @c's lock count and priority, so the
 * sizes and the locks on the path stay exact; and as SGLang's match and
 * insert do (they stamp the child before splitting it), both halves carry
 * this call's access time.  Called with wlock held, inside a write section.
 */
struct rnode *rx_split(struct kvs_radix *r, struct rnode *c, uint32_t m)
{
	struct rseg *old = seg_of(c), *top, *rest;
	struct rnode *n;
	uint64_t old_h;

	top = rx_seg_view(old, 0, m);
	rest = rx_seg_view(old, m, old->len - m);
	n = top && rest ? node_new(r, c->parent, c->extra, top) : NULL;
	if (!n) {
		rx_seg_free(top);
		rx_seg_free(rest);
		return NULL;
	}
	old_h = c->h;
	n->lock_ref = c->lock_ref;
	n->ek.priority = c->ek.priority;
	if (r->ev.cb)
		n->last_hash = kvev_chain(&r->ev, c->parent == r->root ? 0 : c->parent->last_hash,
					  c->extra, top->keys, 0, m, 0);
	/* Publish the new node's children, then the new node in place of @c,
	 * then @c's shorter segment.  No order is safe for a reader on its own:
	 * readers that overlap any of it are sent back by the sequence count. */
	c->h = child_hash(r, c->extra, rest->keys);
	if (rx_kids_update(n, c, NULL) < 0) {
		c->h = old_h;
		rx_seg_free(top);
		rx_seg_free(rest);
		free(n);
		r->nnodes--;
		return NULL;
	}
	/* The parent's entry keeps its hash: @n starts with the same page. */
	if (rx_kids_update(c->parent, n, c) < 0) {
		c->h = old_h;
		free(atomic_load_explicit(&n->kids, memory_order_relaxed));
		rx_seg_free(top);
		rx_seg_free(rest);
		free(n);
		r->nnodes--;
		return NULL;
	}
	c->parent = n;
	free(c->hist);
	c->hist = NULL;
	atomic_store_explicit(&c->seg, rest, memory_order_release);
	rcu_retire(&old->rcu, rx_free_seg_cb);
	c->ek.last_access = r->clock;
	if (c->ek.idx >= 0)
		evict_heap_update(&r->heap, &c->ek);
	r->st.splits++;
	return n;
}

/* A match or insert passed through @n.  Touches fields no reader reads, so
 * it needs no write section. */
void rx_touch(struct kvs_radix *r, struct rnode *n, int priority)
{
	n->ek.last_access = r->clock;
	n->ek.hits++;
	if (priority > n->ek.priority)
		n->ek.priority = priority;
	if (n->ek.idx >= 0)
		rx_heap_fix(r, n);
}



/* Lock @n and its ancestors once (the root is never counted).  With wlock. */
void rx_lock_path(struct kvs_radix *r, struct rnode *n)
{
	for (; n && n != r->root; n = n->parent) {
		if (n->lock_ref++ == 0) {
			uint32_t len = seg_of(n)->len;

			r->evictable -= len;
			r->protected_ += len;
			rx_heap_fix(r, n);
		}
	}
}

/* Undo rx_lock_path(@n): every node of the path locked by it. */
void rx_unlock_path(struct kvs_radix *r, struct rnode *n)
{
	for (; n && n != r->root; n = n->parent) {
		if (--n->lock_ref == 0) {
			uint32_t len = seg_of(n)->len;

			r->evictable += len;
			r->protected_ -= len;
			rx_heap_fix(r, n);
		}
	}
}

/* Is @n a node of @r?  Nodes record their tree; a freed node cannot be
 * told apart, which is why the _lock forms exist. */
static inline bool node_ok(const struct kvs_radix *r, const struct rnode *n)
{
	return n && n->tree == r;
}

/**
 * kvs_radix_attr_init() - defaults: the pool's page size, LRU, enabled, no
 * events, slab-aware eviction over a window of KVS_RADIX_SLAB_WINDOW.
 * @attr: attributes.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_radix_attr_init(kvs_radix_attr_t *attr)
{
	KVS_ATTR_CLEAR(attr);
	attr->policy = KVS_EVICT_LRU;
	attr->slab_aware = 1;
	return 0;
}


/**
 * kvs_radix_create() - create an empty prefix cache over @pool.
 * @pool: the KV pool whose locations the tree stores and frees on eviction;
 *        may be NULL when @attr gives free_cb and page_size.
 * @attr: attributes, or NULL for the defaults.
 *
 * Context: MT-Safe.
 * Return: the cache, or NULL with errno EINVAL (page size not the pool's,
 * unknown policy) or ENOMEM.
 */
KVS_EXPORT kvs_radix_t *kvs_radix_create(kvs_pool_t *pool, const kvs_radix_attr_t *attr)
{
	kvs_radix_attr_t defaults;
	struct kvs_radix *r;
	struct rseg *empty;

	if (!attr) {
		kvs_radix_attr_init(&defaults);
		attr = &defaults;
	}
	if ((!pool && (!attr->free_cb || !attr->page_size)) || attr->policy < KVS_EVICT_LRU ||
	    attr->policy > KVS_EVICT_PRIORITY ||
	    attr->slab_window > KVS_RADIX_SLAB_WINDOW_MAX ||
	    (pool && attr->page_size && attr->page_size != kvs_pool_page_size(pool))) {
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	empty = rx_seg_new(NULL, 0, NULL, NULL);
	if (!r || !empty)
		goto nomem;
	pthread_mutex_init(&r->sc.lock, NULL);
	r->pool = pool;
	r->ps = pool ? kvs_pool_page_size(pool) : attr->page_size;
	r->ps_shift = (r->ps & (r->ps - 1)) ? -1 : __builtin_ctz(r->ps);
	if (pool) {
		r->slab = kvs_pool_slab(pool);
		r->cap = kvs_pool_capacity(pool);
		r->held = calloc(map_words(r), sizeof(uint64_t));
		r->seen = calloc(map_words(r), sizeof(uint64_t));
		if (!r->held || !r->seen)
			goto nomem;
		uint64_t nslabs;
		size_t slab_total;

		kvsi_slab_geom(r->slab, &r->pps, &nslabs, &slab_total);
		if (attr->slab_aware) {
			r->window = attr->slab_window ? attr->slab_window : KVS_RADIX_SLAB_WINDOW;
			r->slab_cnt = calloc(nslabs ? nslabs : 1, sizeof(uint32_t));
			r->slab_gone = calloc(nslabs ? nslabs : 1, sizeof(uint32_t));
			r->slab_list = malloc((nslabs ? nslabs : 1) * sizeof(uint32_t));
			r->hist_tmp = malloc(sizeof(*r->hist_tmp) +
					     (nslabs ? nslabs : 1) * sizeof(r->hist_tmp->e[0]));
			if (!r->slab_cnt || !r->slab_gone || !r->slab_list || !r->hist_tmp)
				goto nomem;
		}
	}
	r->free_cb = attr->free_cb;
	r->free_arg = attr->free_arg;
	r->policy = attr->policy;
	r->disabled = attr->disabled;
	r->ev.cb = attr->event_cb;
	r->ev.arg = attr->event_arg;
	r->ev.ps = r->ps;
	evict_heap_init(&r->heap, r->policy);
	pthread_mutex_init(&r->wlock, NULL);
	r->root = node_new(r, NULL, 0, empty);
	if (!r->root) {
		pthread_mutex_destroy(&r->wlock);
		goto nomem;
	}
	r->nnodes = 0; /* the root is not counted */
	r->root->lock_ref = 1; /* never evicted */
	if (pool && kvsi_pool_cache_add(pool, &kvsi_radix_cache_ops, r) < 0) {
		free(r->root); /* its segment is empty, freed below */
		evict_heap_free(&r->heap);
		pthread_mutex_destroy(&r->wlock);
		goto nomem;
	}
	return r;
nomem:
	if (r) {
		if (empty)
			pthread_mutex_destroy(&r->sc.lock);
		KVS_FREE_ALL(r->slab_cnt, r->slab_gone, r->slab_list, r->hist_tmp, r->seen, r->held);
	}
	rx_seg_free(empty);
	free(r);
	errno = ENOMEM;
	return NULL;
}







/*
 * Give the tree's pages of @locs back.  One read of the locations: their
 * runs of pages leave the held map (run_gone()) and, over a pool, go back
 * to the slab as runs; with no memory for the runs, through the pool,
 * which reads the locations again.  With wlock, outside any write
 * section.
 */
void rx_free_locs(struct kvs_radix *r, const int32_t *locs, size_t n)
{
	size_t i = 0, nr = 0;
	bool runs = !r->free_cb;

	while (r->held && i < n) {
		uint64_t p;
		uint32_t np = page_run(r, locs, n, &i, &p);

		run_gone(r, p, np);
		if (runs) {
			struct kvsi_page_run *f = kvsi_grow(r->fruns, &r->fruns_cap, nr,
							    sizeof(*r->fruns));

			runs = f != NULL;
			if (f) {
				r->fruns = f;
				r->fruns[nr].first = (uint32_t)p;
				r->fruns[nr++].len = np;
			}
		}
	}
	if (r->free_cb)
		r->free_cb(r->free_arg, locs, n);
	else if (runs)
		kvsi_slab_free_page_runs(r->slab, nr, r->fruns);
	else
		kvs_pool_free(r->pool, n, locs);
}

/* Call @fn on every node of @n's subtree, children before their parent. */
static void subtree_post(struct kvs_radix *r, struct rnode *n,
			 void (*fn)(struct kvs_radix *r, struct rnode *n))
{
	struct rkids *k = kids_of(n);
	uint32_t i;

	if (k)
		for (i = 0; i < k->n; i++)
			subtree_post(r, k->e[i].node, fn);
	fn(r, n);
}

/* Free @n and its locations at once (kvs_radix_destroy()). */
static void free_node(struct kvs_radix *r, struct rnode *n)
{
	struct rkids *k = kids_of(n);
	struct rseg *s = seg_of(n);

	if (s->len)
		rx_free_locs(r, s->vals, s->len);
	rx_seg_free(s);
	free(k);
	free(n->hist);
	free(n);
}

/**
 * kvs_radix_destroy() - free the tree and every location it holds.
 * @radix: cache, or NULL.
 *
 * Locks held by requests are ignored: their nodes go too.  Waits for
 * concurrent readers' grace period so nothing is freed under them.
 *
 * Context: MT-Unsafe: no other call on @radix may run or follow.
 * Return: 0.
 */
KVS_EXPORT int kvs_radix_destroy(kvs_radix_t *r)
{
	if (!r)
		return 0;
	if (r->pool) /* no elastic call runs on it from here on */
		kvsi_pool_cache_del(r->pool, r);
	synchronize_rcu();
	subtree_post(r, r->root, free_node);
	rcu_barrier(); /* retired segments and arrays are freed before we return */
	rx_seg_cache_drain(&r->sc);
	pthread_mutex_destroy(&r->sc.lock);
	evict_heap_free(&r->heap);
	KVS_FREE_ALL(r->held, r->seen, r->runs, r->path, r->fruns, r->slab_cnt, r->slab_gone,
	             r->slab_list, r->hist_tmp);
	pthread_mutex_destroy(&r->wlock);
	free(r);
	return 0;
}


/* The body of kvs_radix_insert() and kvs_radix_insert_lock(), with wlock
 * held and the arguments checked.  The walk finds the part of the key the
 * tree holds; only the locations of the rest are checked
 * (rx_check_insert()), since the tree keeps its own for the part it holds
 * and ignores the caller's.  *@last receives the node ending the key.
 * Returns what kvs_radix_insert() returns. */
static ssize_t insert_locked(struct kvs_radix *r, uint64_t extra, const int32_t *key, size_t n,
			     const int32_t *locs, int priority, struct rnode **last)
{
	struct rnode *node = r->root, *stored = NULL;
	uint64_t stored_from = 0;
	size_t pos = 0, i, npath = 0;
	struct rnode **path;
	uint32_t cut = 0;

	*last = node;
	if (r->disabled) {
		/* Nothing was cached, so the tree takes every page over and
		 * drops it at once, as SGLang's caller does; returns 0. */
		if (rx_check_insert(r, locs, n) < 0)
			return -1;
		if (n)
			rx_free_locs(r, locs, n);
		return 0;
	}
	/* The walk compares and changes nothing: the new part's pages are
	 * checked against the tree's first.  Only its last node may be
	 * split: the key leaves the tree inside it. */
	while (pos < n) {
		struct rnode *c = rx_find_child(r, node, extra, key + pos);

		if (!c)
			break;
		path = kvsi_grow(r->path, &r->path_cap, npath, sizeof(*r->path));
		if (!path)
			return kvs_fail(ENOMEM);
		r->path = path;
		r->path[npath++] = c;
		cut = edge_match(r, seg_of(c), key + pos, n - pos);
		pos += cut;
		if (cut < seg_of(c)->len)
			break;
		cut = 0;
		node = c;
	}
	/* The new part's locations, from token @pos on (page-aligned, so its
	 * runs start pages): rx_check_insert() leaves its runs of pages in
	 * r->runs, none of which the tree may hold yet. */
	if (rx_check_insert(r, pos < n ? locs + pos : locs, n - pos) < 0)
		return -1;
	if (r->held)
		for (i = 0; i < r->nruns; i++) {
			const struct prun *u = &r->runs[i];

			if (bits_any(r->held, u->first, u->first + u->np))
				return kvs_fail(EINVAL);
		}
	r->clock++;
	for (i = 0; i < npath; i++) {
		struct rnode *c = r->path[i];

		if (i + 1 == npath && cut) {
			write_begin(r);
			c = rx_split(r, c, cut);
			write_end(r);
			if (!c)
				return kvs_fail(ENOMEM);
		}
		rx_touch(r, c, priority);
		node = c;
	}
	if (pos < n) {
		struct rseg *s = rx_seg_new(&r->sc, (uint32_t)(n - pos), key + pos, locs + pos);
		struct rnode *leaf = s ? node_new(r, node, extra, s) : NULL;
		int rc;

		if (!leaf) {
			rx_seg_free(s);
			return kvs_fail(ENOMEM);
		}
		leaf->ek.priority = priority;
		write_begin(r);
		rc = rx_kids_update(node, leaf, NULL);
		write_end(r);
		if (rc < 0) {
			rx_seg_free(s);
			free(leaf);
			r->nnodes--;
			return kvs_fail(ENOMEM);
		}
		if (r->ev.cb) {
			stored_from = node == r->root ? 0 : node->last_hash;
			stored = leaf;
			leaf->last_hash = kvev_chain(&r->ev, stored_from, extra, s->keys, 0, s->len, 0);
		}
		if (r->held) /* the new part's runs, from rx_check_insert() */
			for (i = 0; i < r->nruns; i++)
				bits_fill(r->held, r->runs[i].first,
					  r->runs[i].first + r->runs[i].np, true);
		r->evictable += s->len;
		r->total += s->len;
		r->st.inserted_tokens += s->len;
		rx_heap_fix(r, node); /* no longer a leaf */
		rx_heap_fix(r, leaf);
		node = leaf;
	}
	r->st.inserts++;
	if (stored) /* after the write: a callback may call kvs_radix_match_ro() */
		kvev_chain(&r->ev, stored_from, extra, seg_of(stored)->keys, 0, seg_of(stored)->len,
			   KVS_KV_STORED);
	*last = node;
	return (ssize_t)pos;
}

static ssize_t insert_common(struct kvs_radix *r, uint64_t extra, const int32_t *key, size_t n,
			     const int32_t *locs, int priority, kvs_radix_node_t **last, bool lock)
{
	struct rnode *node = NULL;
	ssize_t got;

	if (!r || (!key && n) || (!locs && n) || n > UINT32_MAX || (lock && !last))
		return kvs_fail(EINVAL);
	n = n / r->ps * r->ps;
	rx_wlock(r);
	got = insert_locked(r, extra, key, n, locs, priority, &node);
	if (got >= 0 && lock)
		rx_lock_path(r, node);
	pthread_mutex_unlock(&r->wlock);
	if (got >= 0 && last)
		*last = (kvs_radix_node_t *)node;
	return got;
}

/**
 * kvs_radix_insert() - cache @key with its locations.
 * @radix: cache.
 * @extra_key: the request's extra key.
 * @key: token ids.
 * @n: tokens; only whole pages are inserted.
 * @locs: the KV locations of the tokens.  The tree takes over the caller's
 *        reference on the pages of the part it did not hold yet.
 * @priority: the request's priority (kept as the maximum on each node of
 *            the path; used by KVS_EVICT_PRIORITY).
 * @last: receives the node holding the last inserted token (may be NULL).
 *        It is not protected once the call returns (see
 *        kvs_radix_insert_lock()).
 *
 * The locations of the part the tree does not hold yet are checked
 * before anything changes: in the pool's range, page-aligned, no page
 * twice, every page held by the caller, and none already in the tree.
 * The tree keeps its own locations for the part it holds and ignores
 * the caller's (those of a disabled cache are all checked).
 *
 * Context: MT-Safe (takes wlock).
 * Return: the number of leading tokens that were already cached: the
 * caller still owns locs[0 .. ret) and frees its duplicates; or -1 with
 * errno EINVAL or ENOMEM (nothing inserted).  A disabled cache keeps
 * nothing: it frees the (checked) pages it was handed and returns 0.
 */
KVS_EXPORT ssize_t kvs_radix_insert(kvs_radix_t *r, uint64_t extra, const int32_t *key, size_t n,
				    const int32_t *locs, int priority, kvs_radix_node_t **last)
{
	return insert_common(r, extra, key, n, locs, priority, last, false);
}

/**
 * kvs_radix_insert_lock() - kvs_radix_insert() and kvs_radix_lock() of the
 * node ending the key, in one writer section.
 * @radix: cache.
 * @extra_key: the request's extra key.
 * @key: token ids.
 * @n: tokens; only whole pages are inserted.
 * @locs: the KV locations of the tokens, as for kvs_radix_insert().
 * @priority: the request's priority.
 * @last: receives the locked node (the root when no whole page was
 *        given, or the cache is disabled); give it back with
 *        kvs_radix_unlock().  Not NULL.
 *
 * Context: MT-Safe (takes wlock).
 * Return: as kvs_radix_insert(); nothing is locked on failure.
 */
KVS_EXPORT ssize_t kvs_radix_insert_lock(kvs_radix_t *r, uint64_t extra, const int32_t *key,
					 size_t n, const int32_t *locs, int priority,
					 kvs_radix_node_t **last)
{
	return insert_common(r, extra, key, n, locs, priority, last, true);
}

/* Take wlock for a call on @n, a node of @r: 0, or -1 with errno EINVAL
 * (NULL, or a node of another tree; wlock not held). */
static int wlock_node(struct kvs_radix *r, const struct rnode *n)
{
	if (!r || !n)
		return kvs_fail(EINVAL);
	rx_wlock(r);
	if (!node_ok(r, n)) {
		pthread_mutex_unlock(&r->wlock);
		return kvs_fail(EINVAL);
	}
	return 0;
}

/**
 * kvs_radix_lock() - protect @node and its ancestors from eviction.
 * @radix: cache.
 * @node: a node of @radix from kvs_radix_match() or kvs_radix_insert()
 *        (the root: nothing to do).
 *
 * Each lock needs one kvs_radix_unlock().  Keeps evictable and protected
 * token counts exact.
 *
 * Context: MT-Safe (takes wlock).
 * Return: 0, or -1 with errno EINVAL (NULL, or a node of another tree).
 */
KVS_EXPORT int kvs_radix_lock(kvs_radix_t *r, kvs_radix_node_t *node)
{
	struct rnode *n = (struct rnode *)node;

	if (wlock_node(r, n) < 0)
		return -1;
	rx_lock_path(r, n);
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

/**
 * kvs_radix_unlock() - undo one kvs_radix_lock().
 * @radix: cache.
 * @node: the node that was locked (the root: nothing to do).
 *
 * Context: MT-Safe (takes wlock).
 * Return: 0, or -1 with errno EINVAL (NULL, a node of another tree, or a
 * node not locked).
 */
KVS_EXPORT int kvs_radix_unlock(kvs_radix_t *r, kvs_radix_node_t *node)
{
	struct rnode *n = (struct rnode *)node, *p;

	if (wlock_node(r, n) < 0)
		return -1;
	for (p = n; p && p != r->root; p = p->parent) {
		if (p->lock_ref == 0) {
			pthread_mutex_unlock(&r->wlock);
			return kvs_fail(EINVAL);
		}
	}
	rx_unlock_path(r, n);
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

/* Free the locations of @n and retire it: readers that came in before
 * the reset may still walk it.  With wlock. */
static void retire_node(struct kvs_radix *r, struct rnode *n)
{
	struct rseg *s = seg_of(n);

	rx_free_locs(r, s->vals, s->len);
	n->tree = NULL;
	n->ek.idx = -1;
	rcu_retire(&n->rcu, rx_free_node_cb);
}

/**
 * kvs_radix_reset() - empty the cache.
 * @radix: cache.
 *
 * Frees every location the tree holds (through the pool or free_cb) and
 * emits one KVS_KV_ALL_CLEARED event, as SGLang's reset() does.  Node
 * handles from before the reset are no longer valid.
 *
 * Context: MT-Safe (takes wlock; frees pages under it).
 * Return: 0, or -1 with errno EINVAL or EBUSY (a node is locked; nothing
 * changed).
 */
KVS_EXPORT int kvs_radix_reset(kvs_radix_t *r)
{
	struct rkids *k;
	uint32_t i;

	if (!r)
		return kvs_fail(EINVAL);
	rx_wlock(r);
	if (r->protected_) {
		pthread_mutex_unlock(&r->wlock);
		return kvs_fail(EBUSY);
	}
	k = kids_of(r->root);
	write_begin(r);
	atomic_store_explicit(&r->root->kids, NULL, memory_order_release);
	evict_heap_clear(&r->heap);
	r->evictable = r->total = r->nnodes = 0;
	write_end(r);
	if (k) {
		for (i = 0; i < k->n; i++)
			subtree_post(r, k->e[i].node, retire_node);
		rcu_retire(&k->rcu, rx_free_kids_cb);
	}
	r->st.resets++;
	kvev_all_cleared(&r->ev);
	pthread_mutex_unlock(&r->wlock);
	return 0;
}

#define RADIX_GETTER(fn, field, doc)                                       \
	KVS_EXPORT uint64_t fn(kvs_radix_t *r)                             \
	{                                                                  \
		uint64_t v;                                                \
                                                                           \
		if (!r)                                                    \
			return 0;                                          \
		rx_wlock(r);                             \
		v = r->field;                                              \
		pthread_mutex_unlock(&r->wlock);                           \
		return v;                                                  \
	}

/* kvs_radix_evictable() - tokens in unlocked nodes.  MT-Safe. */
RADIX_GETTER(kvs_radix_evictable, evictable, "")
/* kvs_radix_protected() - tokens in locked nodes.  MT-Safe. */
RADIX_GETTER(kvs_radix_protected, protected_, "")
/* kvs_radix_tokens() - tokens in the tree.  MT-Safe. */
RADIX_GETTER(kvs_radix_tokens, total, "")
/* kvs_radix_nodes() - nodes in the tree, the root not counted.  MT-Safe. */
RADIX_GETTER(kvs_radix_nodes, nnodes, "")

/**
 * kvs_radix_page_size() - tokens per page.
 * @radix: cache.
 *
 * Context: MT-Safe.
 * Return: the page size; 0 for NULL.
 */
KVS_EXPORT uint32_t kvs_radix_page_size(const kvs_radix_t *r)
{
	return r ? r->ps : 0;
}

/**
 * kvs_radix_disabled() - is this a disabled cache (the same API, nothing
 * cached)?
 * @radix: cache.
 *
 * Context: MT-Safe.
 * Return: 1 or 0; 0 for NULL.
 */
KVS_EXPORT int kvs_radix_disabled(const kvs_radix_t *r)
{
	return r ? r->disabled != 0 : 0;
}

/**
 * kvs_radix_root() - the root node (what a match of nothing returns).
 * @radix: cache.
 *
 * Context: MT-Safe.
 * Return: the root; NULL for NULL.
 */
KVS_EXPORT kvs_radix_node_t *kvs_radix_root(kvs_radix_t *r)
{
	return r ? (kvs_radix_node_t *)r->root : NULL;
}

/**
 * kvs_radix_pool() - the pool the cache was created over.
 * @radix: cache.
 *
 * Context: MT-Safe.
 * Return: the pool; NULL for a cache over free_cb, and for NULL.
 */
KVS_EXPORT kvs_pool_t *kvs_radix_pool(const kvs_radix_t *r)
{
	return r ? r->pool : NULL;
}

/* ------------------------------------------------------------ statistics */

/* Every counter: the writer's under wlock, the readers' relaxed. */
static void radix_fill(void *obj, uint64_t *v)
{
	struct kvs_radix *r = obj;

	rx_wlock(r);
#define W_GET(n) v[KVS_RADIX_STAT_##n] = r->st.n;
	W_STATS(W_GET)
#undef W_GET
	pthread_mutex_unlock(&r->wlock);
	v[KVS_RADIX_STAT_match_ro] = atomic_load_explicit(&r->rst.match_ro, memory_order_relaxed);
	v[KVS_RADIX_STAT_reader_retries] =
		atomic_load_explicit(&r->rst.retries, memory_order_relaxed);
	v[KVS_RADIX_STAT_reader_fallbacks] =
		atomic_load_explicit(&r->rst.fallbacks, memory_order_relaxed);
}

/* The print's first line (takes wlock for the counts). */
static void radix_header(void *obj, char *line, size_t size)
{
	struct kvs_radix *r = obj;
	uint64_t tokens = kvs_radix_tokens(r), nodes = kvs_radix_nodes(r);

	snprintf(line, size, "radix page_size %u policy %d tokens %llu nodes %llu\n", r->ps,
		 r->policy, (unsigned long long)tokens, (unsigned long long)nodes);
}

/**
 * kvs_radix_stat() - one statistic; kvs_radix_stat_get() reads one by name,
 * kvs_radix_stat_name() names one, kvs_radix_stats_print() prints every one
 * through a callback (a header line, then "name value  # description"
 * lines), all through lib/stats.c.
 * @radix: cache.
 * @item: statistic.
 *
 * Context: MT-Safe (takes wlock: not from an event callback; write_cb is
 * called without it).
 * Return: kvs_radix_stat(): its value, 0 for NULL or an unknown item;
 * kvs_radix_stat_name(): a static string, NULL for an unknown item; the
 * others: 0, or -1 with errno EINVAL (a NULL argument) or ENOENT (no such
 * statistic).
 */
KVSI_STATS_FAMILY(radix, KVS_RADIX_STATS, radix_fill, radix_header, &kvsi_style_desc, NULL, kvs_radix_t,
		  enum kvs_radix_stat);
