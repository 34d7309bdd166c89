/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/slab_cpu.c - the slab allocator's per-thread caches (the kernel's
 * per-CPU slabs, as magazines).
 *
 * What it owns.  A magazine per thread and allocator: up to `magazine` free
 * pages the thread may hand out and take back with no lock (the fast paths
 * in lib/mem/slab.c).  A thread finds its magazine through a one-entry
 * thread-local cache keyed by the allocator's never-reused id, falling back
 * to the allocator's pthread key; the key's destructor gives the pages back
 * when the thread exits.
 *
 * Locking (the order is in common/common.h).  A magazine's pages and count
 * are written by its owner thread only: on the fast path with no lock, and
 * under slab->lock in refills and flushes.  Other threads only read counts
 * (statistics, validation) under slab->lock.  kvs_slab_shrink() cannot take
 * another thread's pages without a lock on the fast path, so it bumps
 * drain_gen and sets each magazine's limit to 0: the fast paths compare
 * the count with that limit alone (one compare for empty, full and drain
 * due), so each thread takes the slow path and flushes on its next call.
 */
#include <stdlib.h>

#include "mem/slab_cpu.h"

__thread struct kvsi_tls_mag kvsi_slab_tls __attribute__((tls_model("initial-exec")));

/* Give back all but @keep of @m's pages.  Lock held. */
void slab_mag_flush_locked(struct kvs_slab *s, struct mag *m, uint32_t keep)
{
	uint32_t n = atomic_load_explicit(&m->count, memory_order_relaxed);

	if (n > keep) {
		slab_put_many(s, n - keep, m->pages + keep);
		n = keep;
	}
	atomic_store_explicit(&m->count, n, memory_order_relaxed);
	m->drain_seen = atomic_load_explicit(&s->drain_gen, memory_order_relaxed);
	atomic_store_explicit(&m->lim, m->cap, memory_order_relaxed);
}

/* Ask every thread for its cache back on its next call: move drain_gen
 * and close each magazine's fast paths (lim 0) until its owner flushes.
 * Lock held. */
void slab_mag_drain_all_locked(struct kvs_slab *s)
{
	struct mag *m;

	atomic_fetch_add_explicit(&s->drain_gen, 1, memory_order_relaxed);
	for (m = s->mags; m; m = m->next)
		atomic_store_explicit(&m->lim, 0, memory_order_relaxed);
}

static void mag_unlink_locked(struct kvs_slab *s, struct mag *m)
{
	DLIST_DEL(s->mags, m);
}

/* Thread exit: give the cache back. */
void slab_mag_destructor(void *arg)
{
	struct mag *m = arg;
	struct kvs_slab *s = m->owner;

	pthread_mutex_lock(&s->lock);
	slab_mag_flush_locked(s, m, 0);
	ST(s, alloc_fast) += atomic_load_explicit(&m->alloc_fast, memory_order_relaxed);
	ST(s, free_fast) += atomic_load_explicit(&m->free_fast, memory_order_relaxed);
	mag_unlink_locked(s, m);
	slab_after_free_locked(s);
	pthread_mutex_unlock(&s->lock);
	if (kvsi_slab_tls.mag == m)
		kvsi_slab_tls.id = 0;
	free(m);
}

/* This thread's magazine, created on first use; NULL when disabled (or
 * when memory is short: the slow path works without one). */
__attribute__((noinline, cold)) struct mag *slab_mag_get_slow(struct kvs_slab *s)
{
	struct mag *m;

	if (s->magcap == 0)
		return NULL;
	m = pthread_getspecific(s->key);
	if (!m) {
		m = calloc(1, sizeof(*m) + s->magcap * sizeof(m->pages[0]));
		if (!m)
			return NULL;
		m->owner = s;
		m->cap = s->magcap;
		if (pthread_setspecific(s->key, m) != 0) {
			free(m);
			return NULL;
		}
		pthread_mutex_lock(&s->lock);
		m->drain_seen = atomic_load_explicit(&s->drain_gen, memory_order_relaxed);
		atomic_store_explicit(&m->lim, m->cap, memory_order_relaxed);
		m->next = s->mags;
		if (s->mags)
			s->mags->prev = m;
		s->mags = m;
		pthread_mutex_unlock(&s->lock);
	}
	kvsi_slab_tls.id = s->id;
	kvsi_slab_tls.mag = m;
	return m;
}

/* Pages sitting in all threads' caches.  Lock held. */
uint64_t slab_cached_locked(struct kvs_slab *s)
{
	uint64_t n = 0;
	struct mag *m;

	for (m = s->mags; m; m = m->next)
		n += atomic_load_explicit(&m->count, memory_order_relaxed);
	return n;
}
