/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/evict_heap.c - the eviction-policy heap of the prefix caches.
 *
 * What it owns.  A binary min-heap of pointers to struct evict_key, the
 * policy's view of an evictable entry (a radix tree's unlocked leaf, a
 * hashed block cache's unreferenced block), ordered so the top is the next
 * entry to evict: LRU by last access; LFU by hits, then last access; FIFO
 * by creation; priority by priority, then last access (SGLang's
 * evict_policy.py strategies).  Each key records its own place in the heap,
 * so an entry whose key changed (a touch, a lock) is moved, or taken out,
 * in O(log n) without a search, and eviction never walks the cache.
 * SGLang rebuilds a heap of all leaves on every eviction; keeping it up to
 * date is what makes eviction cheap here.
 *
 * Locking.  None of its own: the cache that embeds it serializes every call
 * under its writer lock (radix->wlock for the radix tree).  Readers never
 * look at it.  Only evict_heap_push() allocates; removing and updating
 * never fail.
 */
#include <stdlib.h>

#include "cache/evict_heap.h"
#include "internal.h"
#include "kvslab/radix.h"

/* Should @a be evicted before @b under @policy? */
bool evict_before(int policy, const struct evict_key *a, const struct evict_key *b)
{
	switch (policy) {
	case KVS_EVICT_LFU:
		if (a->hits != b->hits)
			return a->hits < b->hits;
		break;
	case KVS_EVICT_FIFO:
		return a->created < b->created;
	case KVS_EVICT_PRIORITY:
		if (a->priority != b->priority)
			return a->priority < b->priority;
		break;
	default:
		break;
	}
	return a->last_access < b->last_access;
}

static void heap_set(struct evict_heap *h, size_t i, struct evict_key *k)
{
	h->a[i] = k;
	k->idx = (int64_t)i;
}

static void heap_up(struct evict_heap *h, size_t i)
{
	struct evict_key *k = h->a[i];

	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (!evict_before(h->policy, k, h->a[p]))
			break;
		heap_set(h, i, h->a[p]);
		i = p;
	}
	heap_set(h, i, k);
}

static void heap_down(struct evict_heap *h, size_t i)
{
	struct evict_key *k = h->a[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && evict_before(h->policy, h->a[c + 1], h->a[c]))
			c++;
		if (!evict_before(h->policy, h->a[c], k))
			break;
		heap_set(h, i, h->a[c]);
		i = c;
	}
	heap_set(h, i, k);
}

/* Make room for @n keys, so that pushes up to that many never allocate.
 * Returns 0, or -1 with errno ENOMEM (the heap is unchanged). */
int evict_heap_reserve(struct evict_heap *h, size_t n)
{
	size_t cap = h->cap ? h->cap : 256;
	struct evict_key **a;

	if (n <= h->cap)
		return 0;
	while (cap < n)
		cap *= 2;
	a = realloc(h->a, cap * sizeof(*a));
	if (!a)
		return kvs_fail(ENOMEM);
	h->a = a;
	h->cap = cap;
	return 0;
}

/* Add @k (not in the heap).  Returns 0, or -1 when the array cannot grow
 * (the heap is unchanged); never allocates within a reserve. */
int evict_heap_push(struct evict_heap *h, struct evict_key *k)
{
	if (h->n == h->cap && evict_heap_reserve(h, h->n + 1) < 0)
		return -1;
	heap_set(h, h->n++, k);
	heap_up(h, h->n - 1);
	return 0;
}

/* Take @k (in the heap) out. */
void evict_heap_remove(struct evict_heap *h, struct evict_key *k)
{
	size_t i = (size_t)k->idx;
	struct evict_key *moved;

	k->idx = -1;
	if (--h->n == i)
		return;
	moved = h->a[h->n];
	heap_set(h, i, moved);
	heap_down(h, i);
	heap_up(h, (size_t)moved->idx);
}

/* Move @k (in the heap) to its place after its key changed. */
void evict_heap_update(struct evict_heap *h, struct evict_key *k)
{
	heap_down(h, (size_t)k->idx);
	heap_up(h, (size_t)k->idx);
}

/* Forget every entry (their idx fields are left to the caller). */
void evict_heap_clear(struct evict_heap *h)
{
	h->n = 0;
}

void evict_heap_free(struct evict_heap *h)
{
	free(h->a);
	h->a = NULL;
	h->n = h->cap = 0;
}

/* Every entry knows its place and no child comes before its parent. */
bool evict_heap_valid(const struct evict_heap *h)
{
	size_t i;

	for (i = 0; i < h->n; i++)
		if ((size_t)h->a[i]->idx != i ||
		    (i && evict_before(h->policy, h->a[i], h->a[(i - 1) / 2])))
			return false;
	return true;
}
