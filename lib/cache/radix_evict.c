/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/radix_evict.c - eviction in the radix cache: taking leaves out in the
 * policy's order (the heap of lib/cache/evict_heap.c) and slab-aware
 * picks that weigh the first leaves by the slabs their pages would empty.
 * See lib/cache/radix.c.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <urcu-bp.h>

#include "cache/radix_int.h"


/* Take evictable leaf @leaf out of the tree onto the call's list at
 * **@tail.  Inside a write section.  False when its parent's children
 * could not be changed (never for a removal, which is in place). */
bool rx_evict_one(struct kvs_radix *r, struct rnode *leaf, struct rnode ***tail)
{
	struct rnode *parent = leaf->parent;
	struct rseg *s = seg_of(leaf);

	if (rx_kids_update(parent, NULL, leaf) < 0)
		return false;
	if (leaf->ek.idx >= 0)
		evict_heap_remove(&r->heap, &leaf->ek);
	leaf->gone_parent_hash = parent == r->root ? 0 : parent->last_hash;
	leaf->gone_next = NULL;
	**tail = leaf;
	*tail = &leaf->gone_next;
	r->evictable -= s->len;
	r->total -= s->len;
	r->nnodes--;
	r->st.evictions++;
	r->st.evicted_tokens += s->len;
	rx_heap_fix(r, parent);
	return true;
}

/* Deliver the events of the evicted nodes on @gone, free their locations
 * and retire them.  With wlock, after write_end(): readers are not held
 * up by the pool and a callback may call kvs_radix_match_ro(). */
void rx_evict_finish(struct kvs_radix *r, struct rnode *gone)
{
	while (gone) {
		struct rnode *leaf = gone;
		struct rseg *s = seg_of(leaf);

		gone = leaf->gone_next;
		if (r->ev.cb)
			kvev_chain(&r->ev, leaf->gone_parent_hash, leaf->extra, s->keys, 0, s->len,
				   KVS_KV_REMOVED);
		rx_free_locs(r, s->vals, s->len);
		leaf->tree = NULL;
		rcu_retire(&leaf->rcu, rx_free_node_cb);
	}
}

/*
 * Run BODY, with sl (a slab), p (a first page) and k (pages) set, for each
 * piece of segment @s's runs of consecutive pages that lies in one slab.
 */
#define SEG_SLAB_PIECES(r, s, BODY)                                                    \
	do {                                                                           \
		size_t i_ = 0;                                                         \
		while (i_ < (s)->len) {                                                \
			uint64_t p_;                                                   \
			uint32_t np_ = page_run((r), (s)->vals, (s)->len, &i_, &p_);   \
			while (np_ > 0) {                                              \
				uint64_t sl = p_ / (r)->pps;                           \
				uint64_t room_ = (sl + 1) * (r)->pps - p_;             \
				uint32_t k = np_ < room_ ? np_ : (uint32_t)room_;      \
				uint64_t p = p_;                                       \
				BODY;                                                  \
				(void)p;                                               \
				p_ += k;                                               \
				np_ -= k;                                              \
			}                                                              \
		}                                                                      \
	} while (0)

/*
 * Leaf @n's pages held by the tree alone, per slab (struct slab_hist): the
 * one kept on the node if the sharing generation still stands, else built
 * (a run of pages at a time, in one pass over its locations) and kept: in
 * the node's old one when it has room (a new generation rebuilds the
 * weights of every leaf weighed, and a free() and malloc() each made glibc
 * consolidate its free lists in the middle of an eviction's write section:
 * sections of 0.5-1 ms at 2M leaves), or, with no memory to keep it, in
 * r->hist_tmp.  With wlock; r->slab_cnt is all zero before and after.
 */
static const struct slab_hist *slab_hist_of(struct kvs_radix *r, struct rnode *n)
{
	uint64_t gen = kvsi_slab_share_gen(r->slab);
	const struct rseg *s = seg_of(n);
	struct slab_hist *h;
	uint32_t nd = 0;

	if (n->hist && n->hist->gen == gen)
		return n->hist;
	SEG_SLAB_PIECES(r, s, {
		uint32_t c = kvsi_slab_run_sole(r->slab, (uint32_t)p, k);

		if (c) {
			if (r->slab_cnt[sl] == 0)
				r->slab_list[nd++] = (uint32_t)sl;
			r->slab_cnt[sl] += c;
		}
	});
	if (n->hist && n->hist->cap >= nd) {
		h = n->hist;
	} else {
		free(n->hist);
		n->hist = h = malloc(sizeof(*h) + nd * sizeof(h->e[0]));
		if (h)
			h->cap = nd;
		else
			h = r->hist_tmp;
	}
	h->gen = gen;
	h->n = nd;
	/* From the list, in the order the pass met them: the segment's
	 * locations are read once. */
	for (uint32_t j = 0; j < nd; j++) {
		uint32_t sl = r->slab_list[j];

		h->e[j].slab = sl;
		h->e[j].cnt = r->slab_cnt[sl];
		r->slab_cnt[sl] = 0;
	}
	return h;
}

/*
 * Weigh leaf @n for slab-aware eviction: of the pages its eviction frees
 * (those the tree holds alone, refcount 1), @touched slabs they lie in,
 * and @other live pages left in those slabs once they are freed, not
 * counting the pages of leaves this call has evicted already (they are
 * freed only after the write section: r->slab_gone).  With wlock and
 * slab->lock held.
 */
static const struct slab_hist *slab_weigh(struct kvs_radix *r, struct rnode *n, uint64_t *other,
					  uint64_t *touched)
{
	const struct slab_hist *h = slab_hist_of(r, n);
	uint32_t j;

	*other = 0;
	*touched = h->n;
	for (j = 0; j < h->n; j++)
		*other += kvsi_slab_inuse_locked(r->slab, h->e[j].slab) - r->slab_gone[h->e[j].slab] -
			  h->e[j].cnt;
	return h;
}

/* Count the freeable pages of the leaf being taken (weights @h) in
 * r->slab_gone.  With wlock held. */
static void slab_pending_add(struct kvs_radix *r, const struct slab_hist *h)
{
	uint32_t j;

	for (j = 0; j < h->n; j++)
		r->slab_gone[h->e[j].slab] += h->e[j].cnt;
}


/*
 * The leaf slab-aware eviction takes: of the first r->window leaves in the
 * policy's order (found by walking the heap from its top, a frontier of at
 * most window + 1 entries, O(window^2) comparisons), the one that leaves
 * the fewest other live pages per slab it frees pages in; ties, and
 * leaves that free nothing (every page shared with a request), go by the
 * policy's order.  A leaf that empties every slab it touches wins at once.
 * With wlock held.
 */
static struct rnode *slab_aware_pick(struct kvs_radix *r)
{
	size_t front[KVS_RADIX_SLAB_WINDOW_MAX + 2], nf = 1, j, k;
	struct evict_key **a = r->heap.a;
	struct rnode *best = ek_node(a[0]);
	const struct slab_hist *best_h = NULL;
	uint64_t best_other = 0, best_touched = 0;

	front[0] = 0;
	kvsi_slab_lock(r->slab);
	for (k = 0; k < r->window && nf > 0; k++) {
		size_t at = 0, idx;
		uint64_t other, touched;
		const struct slab_hist *h;

		for (j = 1; j < nf; j++)
			if (evict_before(r->heap.policy, a[front[j]], a[front[at]]))
				at = j;
		idx = front[at];
		front[at] = front[--nf];
		if (2 * idx + 1 < r->heap.n)
			front[nf++] = 2 * idx + 1;
		if (2 * idx + 2 < r->heap.n)
			front[nf++] = 2 * idx + 2;
		h = slab_weigh(r, ek_node(a[idx]), &other, &touched);
		if (touched && (!best_touched || other * best_touched < best_other * touched)) {
			best = ek_node(a[idx]);
			best_h = h;
			best_other = other;
			best_touched = touched;
			if (other == 0)
				break;
		}
	}
	kvsi_slab_unlock(r->slab);
	/* Weights built in r->hist_tmp are the last leaf's: rebuild the
	 * winner's if so (no memory to keep them; seldom). */
	if (best_h == r->hist_tmp)
		best_h = slab_hist_of(r, best);
	if (best_h)
		slab_pending_add(r, best_h);
	return best;
}

/*
 * An eviction works in sections of at most EVICT_SECTION_LEAVES leaves and
 * EVICT_SECTION_TOKENS tokens, and no leaf is started once a section has
 * run EVICT_SECTION_NS: each takes wlock, takes leaves out in one write
 * section, frees their locations, and lets wlock go (to a waiting writer
 * first: rx_wlock_yield()) before the next.  At 2M leaves a leaf costs
 * 2-10 us (heap removal, slab-aware weighing, the free; most at a large
 * tree's first evictions): in tests/bench/bench_radix_wait.c, where one
 * section once held it all (80k tokens, 20k leaves) for 70-130 ms,
 * sections of 64 leaves alone took 0.2 ms of CPU on average but up to
 * 2 ms, hence the time bound.  Nothing is carried from one section
 * to the next but the count: each starts again from the heap's top, so a
 * leaf another writer locked, extended or inserted meanwhile is weighed
 * as it is now.
 */
#define EVICT_SECTION_LEAVES 64
#define EVICT_SECTION_TOKENS 4096
#define EVICT_SECTION_NS 200000

/* The bounds, which tests/regression may change (SIZE_MAX, UINT64_MAX:
 * one section). */
size_t kvsi_radix_evict_section_leaves = EVICT_SECTION_LEAVES;
size_t kvsi_radix_evict_section_tokens = EVICT_SECTION_TOKENS;
uint64_t kvsi_radix_evict_section_ns = EVICT_SECTION_NS;

/* Called between two sections, without wlock (tests/regression). */
void (*kvsi_radix_evict_test_hook)(void *arg, kvs_radix_t *radix);
void *kvsi_radix_evict_test_arg;

/* The calling thread's CPU time: a section's own work, without the time
 * the thread spent preempted (a system call of about 0.1-0.3 us, against
 * sections of tens to hundreds of us). */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One section: evict up to the bounds, or until *@done reaches @tokens.
 * With wlock.  False once nothing more can be evicted. */
static bool evict_section(struct kvs_radix *r, size_t tokens, size_t *done)
{
	struct rnode *gone = NULL, **tail = &gone;
	size_t leaves = 0, part = 0;
	uint64_t t0 = kvs_now_ns(), c0 = thread_cpu_ns(), ns;
	bool more = true;

	write_begin(r);
	while (*done < tokens && r->heap.n > 0 && leaves < kvsi_radix_evict_section_leaves &&
	       part < kvsi_radix_evict_section_tokens &&
	       (leaves == 0 || kvs_now_ns() - t0 < kvsi_radix_evict_section_ns)) {
		struct rnode *leaf = r->window ? slab_aware_pick(r) : ek_node(evict_heap_top(&r->heap));
		uint32_t len = seg_of(leaf)->len;

		if (!rx_evict_one(r, leaf, &tail)) {
			more = false;
			break;
		}
		*done += len;
		part += len;
		leaves++;
	}
	write_end(r);
	rx_evict_finish(r, gone); /* clears r->slab_gone of the pages it frees */
	ns = kvs_now_ns() - t0;
	r->st.evict_sections++;
	r->st.evict_section_ns += ns;
	if (ns > r->st.evict_section_max_ns)
		r->st.evict_section_max_ns = ns;
	/* A thread's CPU time never exceeds the wall time: the second
	 * system call only when the section could be the new peak. */
	if (ns > r->st.evict_section_cpu_max_ns) {
		ns = thread_cpu_ns() - c0;
		if (ns > r->st.evict_section_cpu_max_ns)
			r->st.evict_section_cpu_max_ns = ns;
	}
	return more && r->heap.n > 0;
}

/**
 * kvs_radix_evict() - evict at least @tokens tokens, if that many are
 * evictable.
 * @radix: cache.
 * @tokens: tokens wanted.
 *
 * Takes the policy's first evictable leaf (lock_ref 0, no children), or
 * with slab_aware the best of the first slab_window (see
 * kvs_radix_create(3)), frees its locations through the pool, and goes on;
 * a parent left childless and unlocked becomes a candidate in turn.  In
 * sections (EVICT_SECTION_LEAVES), letting other writers in between.
 *
 * Context: MT-Safe (takes wlock for each section; frees pages under it).
 * Return: tokens evicted (may be less than asked), or -1 with errno EINVAL.
 */
KVS_EXPORT ssize_t kvs_radix_evict(kvs_radix_t *r, size_t tokens)
{
	size_t done = 0;

	if (!r)
		return kvs_fail(EINVAL);
	if (tokens == 0)
		return 0;
	rx_wlock(r);
	while (r->heap.n > 0 && evict_section(r, tokens, &done) && done < tokens) {
		rx_wlock_yield(r);
		if (kvsi_radix_evict_test_hook)
			kvsi_radix_evict_test_hook(kvsi_radix_evict_test_arg, r);
		rx_wlock(r);
	}
	pthread_mutex_unlock(&r->wlock);
	return (ssize_t)done;
}
