/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hashcache_pool.c - the hashed block cache's operations for its
 * pool (lib/mem/cacheops.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hashcache_int.h"
#include "mem/cacheops.h"

/*
 * The cache's side of lib/mem/cacheops.h, which kvs_pool_set_limit() and
 * kvs_pool_compact() use on every cache over a pool.  Every page of a
 * block in use or in the free queue is the cache's, one reference each;
 * the free queue's blocks are what eviction can give back.  Compaction
 * moves only free cached blocks: a block in use has its id in the engine's
 * block tables.  Isolation flags a free block so that eviction passes over
 * it (it keeps its place in the queue, and so the eviction order) until
 * the compaction puts it back: a hit puts it in use (migration then leaves
 * it), and freed again it returns to the queue still flagged, so that its
 * page cannot change hands while the compaction runs.  Migration
 * gives the block's hash entry, queue place and record to its new page:
 * the entry stays in its table slot and only the slot's block changes (a
 * field the lock-free readers never read).  Each operation takes hc->lock;
 * migrate holds it across the pool's inner step and allocates nothing.
 */

static bool hc_holds(const kvs_hcache_t *hc, uint64_t pg)
{
	return pg < hc->nblocks && (hc->b[pg].ref > 0 || hc->b[pg].inq);
}

static uint64_t ops_evictable(void *cache)
{
	kvs_hcache_t *hc = cache;
	uint64_t n;

	pthread_mutex_lock(&hc->lock);
	n = (hc->qlen - hc->niso) * hc->ps;
	pthread_mutex_unlock(&hc->lock);
	return n;
}

static long ops_evict(void *cache, uint64_t tokens)
{
	kvs_hcache_t *hc = cache;
	uint64_t blocks = tokens / hc->ps + (tokens % hc->ps != 0);
	ssize_t n = kvs_hcache_evict(hc, blocks > SIZE_MAX ? SIZE_MAX : (size_t)blocks);

	return n < 0 ? -1 : (long)((uint64_t)n * hc->ps);
}

/* unlocked_pages() and held_pages() alike: the free queue's pages, the
 * only ones eviction can free and migration can move. */
static int ops_queue_pages(void *cache, uint64_t *pages)
{
	kvs_hcache_t *hc = cache;

	pthread_mutex_lock(&hc->lock);
	for (int32_t i = hc->qhead; i >= 0; i = hc->b[i].next)
		bit_set(pages, (uint64_t)i);
	pthread_mutex_unlock(&hc->lock);
	return 0;
}

static long ops_evict_slabs(void *cache, const uint64_t *slabs)
{
	kvs_hcache_t *hc = cache;
	uint64_t nslabs;
	size_t slab_total;
	uint32_t pps;
	int32_t i, next;
	long done = 0;

	kvsi_slab_geom(kvs_pool_slab(hc->pool), &pps, &nslabs, &slab_total);
	pthread_mutex_lock(&hc->lock);
	for (i = hc->qhead; i >= 0; i = next) {
		struct hblock *b = &hc->b[i];

		next = b->next;
		if (b->iso || !bit_test(slabs, (uint64_t)i / pps))
			continue;
		hc_uncache(hc, i, true);
		hc_page_free(hc, i);
		done += hc->ps;
	}
	pthread_mutex_unlock(&hc->lock);
	return done;
}

struct hiso {
	int32_t *v;
	size_t n;
};

static int ops_isolate(void *cache, const uint64_t *pages, uint64_t *pinned, void **token)
{
	kvs_hcache_t *hc = cache;
	struct hiso *t = calloc(1, sizeof(*t));
	size_t cap = 0;

	if (!t)
		return kvs_fail(ENOMEM);
	pthread_mutex_lock(&hc->lock);
	for (int32_t i = hc->qhead; i >= 0; i = hc->b[i].next) {
		if (!bit_test(pages, (uint64_t)i))
			continue;
		int32_t *v = kvsi_grow(t->v, &cap, t->n, sizeof(*t->v));

		if (!v) {
			pthread_mutex_unlock(&hc->lock);
			free(t->v);
			free(t);
			return kvs_fail(ENOMEM);
		}
		t->v = v;
		t->v[t->n++] = i;
	}
	for (size_t k = 0; k < t->n; k++) {
		hc->b[t->v[k]].iso = true;
		bit_set(pinned, (uint64_t)t->v[k]);
	}
	hc->niso += t->n;
	pthread_mutex_unlock(&hc->lock);
	*token = t;
	return 0;
}

static void ops_putback(void *cache, void *token)
{
	kvs_hcache_t *hc = cache;
	struct hiso *t = token;

	pthread_mutex_lock(&hc->lock);
	for (size_t k = 0; k < t->n; k++) {
		struct hblock *b = &hc->b[t->v[k]];

		if (b->iso) {
			b->iso = false;
			hc->niso -= b->inq;
		}
	}
	pthread_mutex_unlock(&hc->lock);
	free(t->v);
	free(t);
}

/* Block @p's record, table entry and place in the queue go to block @q
 * (a page of the pool's that the cache did not hold). */
static void block_move(kvs_hcache_t *hc, int32_t p, int32_t q)
{
	struct hblock *a = &hc->b[p], *b = &hc->b[q];

	hc->tbl[a->slot / HC_WAYS].blk[a->slot % HC_WAYS] = q;
	if (hc->qring[a->qpos & hc->qrmask] == p)
		hc->qring[a->qpos & hc->qrmask] = q;
	*b = *a;
	b->iso = false;
	if (b->prev >= 0)
		hc->b[b->prev].next = q;
	else
		hc->qhead = q;
	if (b->next >= 0)
		hc->b[b->next].prev = q;
	else
		hc->qtail = q;
	memset(a, 0, sizeof(*a));
	a->prev = a->next = -1;
	hc->niso--;
}

static int ops_migrate(void *cache, int32_t *newpage, int (*inside)(void *arg), void *arg)
{
	kvs_hcache_t *hc = cache;
	int rc, err = 0;

	pthread_mutex_lock(&hc->lock);
	/* Blocks that must stay: in use (a hit since isolate()), or not
	 * isolated. */
	for (uint32_t j = 0; j < hc->nblocks; j++) {
		struct hblock *b = &hc->b[j];

		if (newpage[j] < 0 || !hc_holds(hc, j))
			continue;
		if (!b->iso || !b->inq || (uint32_t)newpage[j] >= hc->nblocks ||
		    hc_holds(hc, (uint32_t)newpage[j]))
			newpage[j] = -1;
	}
	rc = inside(arg);
	if (rc < 0)
		err = errno;
	/* The blocks whose pages moved; a block moved to a later page is no
	 * longer isolated when the walk reaches it. */
	for (uint32_t j = 0; j < hc->nblocks; j++)
		if (hc->b[j].iso && hc->b[j].inq && newpage[j] >= 0)
			block_move(hc, (int32_t)j, newpage[j]);
	pthread_mutex_unlock(&hc->lock);
	if (rc < 0)
		errno = err;
	return rc;
}

const struct kvsi_cache_ops kvsi_hcache_ops =
	KVSI_CACHE_OPS_PAGES("hcache", ops, ops_queue_pages, ops_queue_pages);
