/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/slab_limit.c - the slab allocator's side of elastic memory: the
 * run-time limit on mapped bytes, the census of slabs that lib/elastic/elastic.c
 * plans a lowered limit and a compaction from, and giving slabs back down
 * to the limit.
 *
 * The limit.  kvs_slab_create()'s max_mapped sizes the reservation and
 * never changes; s->limit is a second, run-time cap (SIZE_MAX: none).  The
 * allocator maps only while the bytes charged stay within the smaller of
 * the two (slab_cap(), lib/mem/slab_grow.c), so kvs_slab_available() and every
 * allocation respect it at once: past it, allocation fails ENOMEM exactly
 * as past max_mapped.  Lowering the cap unmaps nothing by itself; the
 * slabs that empty are given back by slab_reclaim_to_locked() through the
 * usual fenced path, oldest first, below min_empty if the cap needs it.
 *
 * Locking (the order is in common/common.h).  Every function takes
 * slab->lock itself, except kvsi_slab_inuse_locked(), which the caller
 * brackets with kvsi_slab_lock() / kvsi_slab_unlock() to read several
 * slabs' counts in one section (slab-aware eviction, under radix->wlock,
 * which comes before slab->lock).
 */
#include "mem/slab_cpu.h"

void kvsi_slab_geom(struct kvs_slab *s, uint32_t *pps, uint64_t *nslabs, size_t *slab_total)
{
	*pps = s->pps;
	*nslabs = s->nslabs;
	*slab_total = s->slab_total;
}

/* The cap in force, never more than the reservation can map.  Lock held. */
static size_t limit_locked(const struct kvs_slab *s)
{
	size_t cap = slab_cap(s), all = (size_t)s->nslabs * s->slab_total;

	return cap < all ? cap : all;
}

size_t kvsi_slab_limit(struct kvs_slab *s)
{
	size_t cap;

	pthread_mutex_lock(&s->lock);
	cap = limit_locked(s);
	pthread_mutex_unlock(&s->lock);
	return cap;
}

/* Set the run-time cap; the cap in force goes to *@old first.  A static
 * allocator maps everything once and never unmaps: EOPNOTSUPP. */
int kvsi_slab_set_limit(struct kvs_slab *s, size_t bytes, size_t *old)
{
	if (s->flags & KVS_SLAB_F_STATIC)
		return kvs_fail(EOPNOTSUPP);
	pthread_mutex_lock(&s->lock);
	if (old)
		*old = limit_locked(s);
	s->limit = bytes;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/*
 * A snapshot of every slab: @inuse[i] is slab i's pages not free in it
 * (held, or cached by a thread) when it is mapped, KVSI_SLAB_UNMAPPED when
 * it has no memory, KVSI_SLAB_STUCK when it is being mapped or unmapped or
 * is parked broken (nobody can empty it now).  The calling thread's cache
 * is given back first and every other thread's is asked back on its next
 * call.  *@mapped and *@pooled: bytes mapped now and kept in the chunk pool.
 */
void kvsi_slab_census(struct kvs_slab *s, uint32_t *inuse, size_t *mapped, size_t *pooled)
{
	struct mag *m = slab_mag_get(s);
	uint64_t i;

	pthread_mutex_lock(&s->lock);
	slab_mag_drain_all_locked(s);
	if (m)
		slab_mag_flush_locked(s, m, 0);
	for (i = 0; i < s->nslabs; i++) {
		const struct slab_info *x = &s->si[i];

		inuse[i] = x->state == S_MAPPED	    ? x->inuse
			   : x->state == S_UNMAPPED ? KVSI_SLAB_UNMAPPED
						    : KVSI_SLAB_STUCK;
	}
	*mapped = s->bytes_mapped;
	*pooled = (size_t)s->pool_count * s->slab_total;
	slab_after_free_locked(s);
	pthread_mutex_unlock(&s->lock);
}

/* Bytes mapped and pooled now. */
void kvsi_slab_held(struct kvs_slab *s, size_t *mapped, size_t *pooled)
{
	pthread_mutex_lock(&s->lock);
	*mapped = s->bytes_mapped;
	*pooled = (size_t)s->pool_count * s->slab_total;
	pthread_mutex_unlock(&s->lock);
}

/* Give empty slabs back until the bytes charged fit @cap (waiting for their
 * fence), then the chunk pool if it is what exceeds @cap.  The slabs
 * unmapped, or -1 with errno from the driver or the fence. */
int kvsi_slab_give_back(struct kvs_slab *s, size_t cap)
{
	struct mag *m = slab_mag_get(s);
	int n;

	pthread_mutex_lock(&s->lock);
	if (m)
		slab_mag_flush_locked(s, m, 0);
	n = slab_reclaim_to_locked(s, cap);
	pthread_mutex_unlock(&s->lock);
	return n;
}

void kvsi_slab_lock(struct kvs_slab *s)
{
	pthread_mutex_lock(&s->lock);
}

void kvsi_slab_unlock(struct kvs_slab *s)
{
	pthread_mutex_unlock(&s->lock);
}

/* Pages not free in slab @i (0 for a slab not mapped).  Lock held. */
uint32_t kvsi_slab_inuse_locked(struct kvs_slab *s, uint64_t i)
{
	return i < s->nslabs && s->si[i].state == S_MAPPED ? s->si[i].inuse : 0;
}

/* Compaction (lib/elastic/elastic.c).  Take up to @n free pages of mapped slab @i,
 * each with one reference; the number taken. */
uint32_t kvsi_slab_take_in(struct kvs_slab *s, uint64_t i, uint32_t n, uint32_t *out)
{
	uint32_t got = 0, k;

	pthread_mutex_lock(&s->lock);
	if (i < s->nslabs && s->si[i].state == S_MAPPED)
		got = slab_take_many(s, i, n, out);
	ST(s, alloc_slow) += got;
	pthread_mutex_unlock(&s->lock);
	for (k = 0; k < got; k++)
		atomic_store_explicit(&s->ref[out[k]], 1, memory_order_relaxed);
	return got;
}

/* Compaction's commit: page @to[k] (the caller's, taken with one
 * reference) takes over @from[k]'s reference count and @from[k] goes back
 * to its slab, but only where that count is still @expect[k], what the
 * caller planned for: a count that changed has a holder the caller cannot
 * see, and stays.  @moved[k] says which moved; both pages of one that did
 * not stay as they were.  Compare and move under slab->lock, so no count
 * changes between them.  Returns how many moved. */
size_t kvsi_slab_move_refs(struct kvs_slab *s, size_t n, const uint32_t *from, const uint32_t *to,
			   const uint16_t *expect, bool *moved)
{
	size_t k, done = 0;

	pthread_mutex_lock(&s->lock);
	for (k = 0; k < n; k++) {
		uint16_t r = atomic_load_explicit(&s->ref[from[k]], memory_order_relaxed);

		moved[k] = r == expect[k] && r > 0;
		if (!moved[k])
			continue;
		atomic_store_explicit(&s->ref[to[k]], r, memory_order_relaxed);
		atomic_store_explicit(&s->ref[from[k]], 0, memory_order_relaxed);
		slab_put(s, from[k]);
		done++;
	}
	ST(s, free_slow) += done;
	if (done) {
		slab_share_changed(s);
		slab_after_free_locked(s);
	}
	pthread_mutex_unlock(&s->lock);
	return done;
}
