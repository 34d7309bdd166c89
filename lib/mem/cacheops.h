/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/cacheops.h - the operations every cache over a KV pool gives the
 * pool: the kernel's shrinker (how much is evictable, evict so much) and
 * movable-page operations (isolate, migrate, put back), which the elastic
 * calls (lib/elastic/elastic.c), the control socket and metrics use on
 * every cache registered on a pool, whatever its kind.
 *
 * A cache registers at creation (kvsi_pool_cache_add()) and unregisters at
 * destruction (kvsi_pool_cache_del()), both under the pool's elastic mutex;
 * a cache's reset and destroy hold that mutex (kvsi_pool_elastic()) while
 * they drop entries, so no elastic call sees a cache or an isolated entry
 * go away.  The pool's elastic mutex is held across every operation below:
 * they take the cache's own writer lock (and slab->lock under it) and
 * release them before they return, except migrate(), which holds the
 * cache's writer lock across @inside.  The pool nests the migrate() of its
 * caches in registration order, so their writer locks nest in that order
 * (only there, and only under pool->elastic).
 *
 * Pages are the pool's page numbers (location / page_size); page sets are
 * bitmaps of one bit a page, slab sets one bit a slab of the allocator.
 */
#ifndef KVSLAB_MEM_CACHEOPS_H
#define KVSLAB_MEM_CACHEOPS_H

#include "internal.h"

struct kvs_pool;

struct kvsi_cache_ops {
	const char *kind;	/* "radix", "hcache", "hiradix" */
	/* Tokens the cache could evict now (held by nothing but itself). */
	uint64_t (*evictable)(void *cache);
	/* Evict at least @tokens tokens if it can, least valuable first; the
	 * tokens evicted, or -1 with errno. */
	long (*evict)(void *cache, uint64_t tokens);
	/* Set in @pages every page the cache holds that eviction could free:
	 * held by evictable entries only, one reference of the cache's. */
	int (*unlocked_pages)(void *cache, uint64_t *pages);
	/* OR into @pages every page whose reference the cache can move
	 * (migrate() rewrites its holders), one reference each: compaction
	 * counts the cache's other pages as holders it cannot see. */
	int (*held_pages)(void *cache, uint64_t *pages);
	/* Evict every evictable entry holding a page of a slab in @slabs (and
	 * what cannot outlive it); the tokens evicted, or -1 with errno
	 * ENOMEM (nothing evicted). */
	long (*evict_slabs)(void *cache, const uint64_t *slabs);
	/* Isolate the holders of the pages in @pages: from now until
	 * putback(), eviction, reset or a hit cannot drop the cache's
	 * reference to them.  Sets in @pinned (zeroed by the caller) every
	 * page of @pages whose holder it pinned, in the same section: a page
	 * the cache let go of since the plan is not there, even if the cache
	 * holds it again by now.  *@token receives what putback() needs.  0,
	 * or -1 with errno ENOMEM (nothing isolated). */
	int (*isolate)(void *cache, const uint64_t *pages, uint64_t *pinned, void **token);
	/*
	 * Migrate: under the cache's writer lock, first clear @newpage[p] (set
	 * -1) for every page p the cache holds that must not move now (its
	 * entry changed hands since isolate()), then call @inside(@arg)
	 * (which may clear more entries), then make every entry holding a page
	 * p with @newpage[p] >= 0 name page @newpage[p] instead, all before the
	 * lock is released.  Returns @inside's return value (with its errno),
	 * or -1 with errno ENOMEM before @inside ran (nothing changed).
	 */
	int (*migrate)(void *cache, int32_t *newpage, int (*inside)(void *arg), void *arg);
	/* Undo isolate(); frees @token. */
	void (*putback)(void *cache, void *token);
};

/*
 * The operations table of a cache whose functions are named
 * prefix_evictable, prefix_evict, ... (its kind a string):
 *	const struct kvsi_cache_ops x = KVSI_CACHE_OPS("radix", ops);
 * KVSI_CACHE_OPS_PAGES names the two page-set operations itself (a cache
 * whose unlocked and held pages are the same set).
 */
#define KVSI_CACHE_OPS_PAGES(kind_, prefix, unlocked_, held_) \
	{                                                      \
		.kind = (kind_),                               \
		.evictable = prefix##_evictable,               \
		.evict = prefix##_evict,                       \
		.unlocked_pages = (unlocked_),                 \
		.held_pages = (held_),                         \
		.evict_slabs = prefix##_evict_slabs,           \
		.isolate = prefix##_isolate,                   \
		.migrate = prefix##_migrate,                   \
		.putback = prefix##_putback,                   \
	}
#define KVSI_CACHE_OPS(kind_, prefix) \
	KVSI_CACHE_OPS_PAGES(kind_, prefix, prefix##_unlocked_pages, prefix##_held_pages)

/*
 * Register @cache (with its operations) on @pool, or take it off.  Both
 * take the pool's elastic mutex: call with no cache or allocator lock
 * held.  add: 0, or -1 with errno ENOMEM.  del: a cache not registered is
 * ignored.
 */
int kvsi_pool_cache_add(struct kvs_pool *p, const struct kvsi_cache_ops *ops, void *cache);
void kvsi_pool_cache_del(struct kvs_pool *p, void *cache);

/* The registered caches, under the pool's elastic mutex (the caller holds
 * it): how many, and the @i-th. */
unsigned kvsi_pool_ncaches(struct kvs_pool *p);
void *kvsi_pool_cache(struct kvs_pool *p, unsigned i, const struct kvsi_cache_ops **ops);

#endif /* KVSLAB_MEM_CACHEOPS_H */
