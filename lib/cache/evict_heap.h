/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/evict_heap.h - the eviction-policy heap the prefix caches share
 * (lib/cache/evict_heap.c has the code and the essay).
 */
#ifndef KVSLAB_EVICT_HEAP_H
#define KVSLAB_EVICT_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * What the policy orders an entry by, embedded in the cache's own entry
 * (a tree node, a block); the heap finds the entry again with
 * container_of.  @idx is the entry's place in the heap, -1 when it is not
 * in it.
 */
struct evict_key {
	int32_t priority;
	uint64_t last_access, hits, created;
	int64_t idx;
};

struct evict_heap {
	struct evict_key **a;
	size_t n, cap;
	int policy;			/* KVS_EVICT_* */
};

static inline void evict_heap_init(struct evict_heap *h, int policy)
{
	h->a = NULL;
	h->n = h->cap = 0;
	h->policy = policy;
}

static inline struct evict_key *evict_heap_top(const struct evict_heap *h)
{
	return h->n ? h->a[0] : NULL;
}

bool evict_before(int policy, const struct evict_key *a, const struct evict_key *b);
int evict_heap_reserve(struct evict_heap *h, size_t n);
int evict_heap_push(struct evict_heap *h, struct evict_key *k);
void evict_heap_remove(struct evict_heap *h, struct evict_key *k);
void evict_heap_update(struct evict_heap *h, struct evict_key *k);
void evict_heap_clear(struct evict_heap *h);
void evict_heap_free(struct evict_heap *h);
bool evict_heap_valid(const struct evict_heap *h);

#endif /* KVSLAB_EVICT_HEAP_H */
