/* SPDX-License-Identifier: MIT */
/*
 * lib/elastic.c - elastic KV memory: a limit on what a pool maps that an
 * engine lowers and raises at run time (engines sharing a device give
 * memory to each other), and compaction.
 *
 * Lowering the limit is planned before anything changes.  A census of the
 * slabs (lib/slab_limit.c) and the pages the prefix cache holds in
 * unlocked nodes (lib/radix.c) tell, for every mapped slab, whether a page
 * in it is *pinned*: held by someone other than the cache's evictable
 * nodes (a running request, a locked node, a page shared by both).  A slab
 * with a pinned page cannot empty; those slabs, and the ones in flight or
 * broken, are the floor: a limit below it fails ENOMEM with nothing
 * changed.  Otherwise the slabs to give back are the empty ones first, then
 * the unpinned slabs with the fewest live pages (slab-aware eviction:
 * whole slabs empty, and no page outside them is evicted, apart from the
 * nodes below an evicted node, which cannot outlive it).  The cap goes on
 * first, so nothing maps past it meanwhile; the cache evicts what holds
 * pages of the chosen slabs; the emptied slabs go back through the
 * allocator's fenced release (the call waits for the fence), and the chunk
 * pool too when it is what stands above the limit.
 *
 * Locking (the order is in common/common.h).  pool->elastic serializes
 * these calls on one pool; radix->wlock and slab->lock are taken under it,
 * one call at a time, never together except as the cache's eviction takes
 * them.  Allocation, free and matching may run meanwhile: the plan is a
 * snapshot, so a limit may end up unmet (EBUSY: pages cached by another
 * thread, or taken meanwhile), which the report shows; the engine calls
 * this between forward passes.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvslab/elastic.h"

struct cand {
	uint64_t slab;
	uint32_t live, inuse;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->live != y->live)
		return x->live < y->live ? -1 : 1;
	if (x->inuse != y->inuse)
		return x->inuse < y->inuse ? -1 : 1;
	return x->slab < y->slab ? -1 : x->slab > y->slab;
}

/**
 * kvs_pool_set_limit() - lower or raise the bytes @pool may map, now.
 * @pool: pool.
 * @bytes: the new limit on mapped bytes, all buffers (0 gives back all it
 *         can).  Above the pool's creation budget, the budget still binds.
 * @cache: the prefix cache over @pool whose unlocked pages may be evicted
 *         to meet the limit, or NULL.
 * @rep: receives what was done, or NULL.
 *
 * See kvs_pool_set_limit(3).
 *
 * Context: MT-Safe; calls on one pool are serialized (pool->elastic), and
 * take the cache's wlock and slab->lock under it.  Waits for the device
 * (the release fence) with no lock of the cache or the allocator held.
 * Return: 0, or -1 with errno EINVAL, ENOMEM (the running requests' slabs
 * alone exceed @bytes: the limit is not applied, nothing is evicted),
 * EOPNOTSUPP (a static pool), EBUSY (applied, but pages cached by other
 * threads or allocated meanwhile keep the mapped bytes above it), or the
 * driver's errno (applied; what failed to unmap is retried later).
 */
KVS_EXPORT int kvs_pool_set_limit(kvs_pool_t *p, size_t bytes, kvs_radix_t *cache,
				  kvs_limit_report_t *rep)
{
	uint64_t t0 = kvs_now_ns(), nslabs, npages, i, floor = 0, pinned = 0, ncand = 0, nempty = 0;
	size_t slab_total, mapped0, pooled0, mapped, pooled, old, need = 0;
	kvs_limit_report_t r;
	uint64_t *unlocked = NULL, *target = NULL;
	struct cand *cand = NULL;
	uint32_t pps, *inuse = NULL;
	pthread_mutex_t *lk;
	kvs_slab_t *s;
	int err = 0, n;

	if (!p || (cache && kvs_radix_pool(cache) != p))
		return kvs_fail(EINVAL);
	s = kvs_pool_slab(p);
	lk = kvsi_pool_elastic(p);
	memset(&r, 0, sizeof(r));
	kvsi_slab_geom(s, &pps, &nslabs, &slab_total);
	npages = nslabs * pps;
	pthread_mutex_lock(lk);
	old = kvsi_slab_limit(s);
	kvsi_slab_held(s, &mapped0, &pooled0);
	if (mapped0 + pooled0 <= bytes) {
		/* Raising, or lowering to what is held already: the cap alone. */
		if (kvsi_slab_set_limit(s, bytes, NULL) < 0) {
			err = errno;
			goto out;
		}
		r.limit = kvsi_slab_limit(s);
		r.bytes_mapped = mapped0;
		goto out;
	}
	inuse = malloc(nslabs * sizeof(*inuse));
	unlocked = calloc((npages + 63) / 64, sizeof(*unlocked));
	target = calloc((nslabs + 63) / 64, sizeof(*target));
	cand = malloc(nslabs * sizeof(*cand));
	if (!inuse || !unlocked || !target || !cand) {
		err = ENOMEM;
		goto out_state;
	}
	if (kvsi_slab_set_limit(s, old, NULL) < 0) { /* EOPNOTSUPP before any work */
		err = errno;
		goto out_state;
	}
	if (cache && kvsi_radix_unlocked_pages(cache, unlocked) < 0) {
		err = errno;
		goto out_state;
	}
	kvsi_slab_census(s, inuse, &mapped0, &pooled0);

	/* Which slabs can empty, and what it costs. */
	for (i = 0; i < nslabs; i++) {
		uint32_t live = 0, q;
		bool pin = false;

		if (inuse[i] == KVSI_SLAB_UNMAPPED)
			continue;
		if (inuse[i] == KVSI_SLAB_STUCK) {
			floor++;
			continue;
		}
		for (q = 0; q < pps; q++) {
			uint32_t pg = (uint32_t)(i * pps + q);
			int rc = kvs_slab_refcount(s, pg);

			if (rc <= 0)
				continue;
			live++;
			if (rc != 1 || !bit_test(unlocked, pg)) {
				pin = true;
				pinned++;
			}
		}
		if (pin)
			floor++;
		else if (inuse[i] == 0)
			nempty++;
		else
			cand[ncand++] = (struct cand){i, live, inuse[i]};
	}
	r.floor_bytes = floor * slab_total;
	r.packed_bytes = (pinned + pps - 1) / pps * slab_total;
	if (bytes < r.floor_bytes) {
		err = ENOMEM;
		goto out_state;
	}
	/* Slabs to give back beyond the empty ones: the cheapest to empty. */
	if (mapped0 > bytes)
		need = (mapped0 - bytes + slab_total - 1) / slab_total;
	if (need > nempty) {
		qsort(cand, ncand, sizeof(*cand), cand_cmp);
		for (i = 0; i < need - nempty && i < ncand; i++)
			bit_set(target, cand[i].slab);
	}
	kvsi_slab_set_limit(s, bytes, NULL);
	if (need > nempty && cache) {
		long ev = kvsi_radix_evict_slabs(cache, target);

		if (ev < 0) {
			err = errno; /* ENOMEM: nothing was evicted */
			kvsi_slab_set_limit(s, old, NULL);
			goto out_state;
		}
		r.evicted_tokens = (uint64_t)ev;
	}
	n = kvsi_slab_give_back(s, bytes);
	if (n < 0)
		err = errno;
	else
		r.slabs_unmapped = (uint64_t)n;
	kvsi_slab_held(s, &mapped, &pooled);
	if (!err && mapped > bytes)
		err = EBUSY;
	r.limit = kvsi_slab_limit(s);
	r.bytes_mapped = mapped;
	if (mapped0 + pooled0 > mapped + pooled)
		r.bytes_returned = mapped0 + pooled0 - (mapped + pooled);
	goto out;
out_state:
	r.limit = kvsi_slab_limit(s);
	r.bytes_mapped = mapped0;
out:
	pthread_mutex_unlock(lk);
	free(inuse);
	free(unlocked);
	free(target);
	free(cand);
	r.elapsed_ns = kvs_now_ns() - t0;
	if (rep)
		*rep = r;
	if (err)
		return kvs_fail(err);
	return 0;
}

/**
 * kvs_pool_limit() - the limit on @pool's mapped bytes in force: the
 * smaller of its creation budget and the last kvs_pool_set_limit(), and
 * never more than its reservation can map.
 * @pool: pool.
 *
 * Context: MT-Safe.
 * Return: the limit in bytes; 0 for NULL.
 */
KVS_EXPORT size_t kvs_pool_limit(kvs_pool_t *p)
{
	return p ? kvsi_slab_limit(kvs_pool_slab(p)) : 0;
}
