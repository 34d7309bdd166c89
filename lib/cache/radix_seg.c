/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/radix_seg.c - the radix cache's segment memory: size classes, the
 * per-tree cache of owner blocks, views for splits, and the RCU callbacks
 * that free segments, children arrays and nodes.  See lib/cache/radix.c.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <urcu-bp.h>

#include "cache/radix_int.h"

/* ------------------------------------------------------------ allocation */

/* The size class of a block of @b bytes and its size in *@size; SEG_BIG
 * above the largest. */
static unsigned int seg_class(size_t b, size_t *size)
{
	unsigned int e;
	size_t q, m;

	if (b <= 64) {
		*size = 64;
		return 0;
	}
	e = 63u - (unsigned int)__builtin_clzll((unsigned long long)(b - 1)); /* >= 6 */
	q = (size_t)1 << (e - 2);
	m = (b + q - 1) / q; /* 5 .. 8 quarters */
	*size = m * q;
	return e > 25 ? SEG_BIG : 1 + (e - 6) * 4 + (unsigned int)(m - 5);
}

/* The size of class @c's blocks (seg_class()'s inverse). */
static size_t class_size(unsigned int c)
{
	unsigned int e, m;

	if (c == 0)
		return 64;
	e = 6 + (c - 1) / 4;
	m = 5 + (c - 1) % 4;
	return (size_t)m << (e - 2);
}

/*
 * A block of @size bytes carved from @sc's arena, or NULL (the system
 * refused a chunk).  A new chunk is mapped whole and populated in one call
 * (advice only: a kernel without MADV_POPULATE_WRITE faults the pages in
 * as they are written), at most SEG_CHUNK_MAX at a time so that the
 * writer holding wlock never waits long for it; the old chunk's tail is
 * left unused.  Huge pages (MADV_HUGEPAGE) cut the faults to a third on
 * the conversation trace but made the replay slower on this machine's
 * kernel (defrag on madvise: compaction on the fault), so they are not
 * asked for.  With sc->lock.
 */
static void *arena_take(struct seg_cache *sc, size_t size)
{
	void *p;

	if (sc->left < size) {
		size_t csz = sc->next_chunk ? sc->next_chunk : SEG_CHUNK_MIN;
		void *m;

		while (csz < 8 * size && csz < SEG_CHUNK_MAX)
			csz *= 2;
		m = mmap(NULL, csz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return NULL;
#ifdef MADV_POPULATE_WRITE
		(void)madvise(m, csz, MADV_POPULATE_WRITE);
#endif
		*(void **)m = sc->chunks;
		((size_t *)m)[1] = csz;
		sc->chunks = m;
		sc->cur = (char *)m + 64;
		sc->left = csz - 64;
		sc->next_chunk = csz < SEG_CHUNK_MAX ? 2 * csz : SEG_CHUNK_MAX;
	}
	p = sc->cur;
	sc->cur += size;
	sc->left -= size;
	return p;
}

static struct rseg *seg_block(struct seg_cache *sc, size_t b)
{
	struct rseg *s = NULL;
	size_t size;
	unsigned int c = seg_class(b, &size), k;
	bool arena = size <= SEG_ARENA_BLOCK;

	if (!sc || c == SEG_BIG) {
		s = malloc(b);
		if (s) {
			s->cls = SEG_BIG;
			s->arena = false;
			s->sc = NULL;
		}
		return s;
	}
	pthread_mutex_lock(&sc->lock);
	/* A kept block of this class, else (arena sizes) of the next three. */
	for (k = c; k < SEG_CLASSES && k <= c + (arena ? 3u : 0u) && !(s = sc->free[k]); k++)
		;
	if (s) {
		sc->free[k] = s->owner;
		size = class_size(k);
		sc->free_bytes -= size;
		c = k;
	} else if (arena && (s = arena_take(sc, size)) != NULL) {
		s->arena = true;
	}
	if (s)
		sc->live_bytes += size;
	pthread_mutex_unlock(&sc->lock);
	if (!s) {
		if (!(s = malloc(size)))
			return NULL;
		s->arena = false;
		pthread_mutex_lock(&sc->lock);
		sc->live_bytes += size;
		pthread_mutex_unlock(&sc->lock);
	}
	s->cls = (uint8_t)c;
	s->sc = sc;
	return s;
}

/* An owner's block goes back to its cache (always, for an arena block),
 * or to malloc. */
static void seg_block_free(struct rseg *s)
{
	struct seg_cache *sc = s->sc;
	size_t size;
	bool keep;

	if (!sc) {
		free(s);
		return;
	}
	size = class_size(s->cls);
	pthread_mutex_lock(&sc->lock);
	sc->live_bytes -= size;
	keep = s->arena || sc->free_bytes + size <= sc->live_bytes / 4 + (4u << 20);
	if (keep) {
		s->owner = sc->free[s->cls];
		sc->free[s->cls] = s;
		sc->free_bytes += size;
	}
	pthread_mutex_unlock(&sc->lock);
	if (!keep)
		free(s);
}

/* Give every kept block back to malloc, and the arena to the system.  No
 * segment may be in flight, nor any arena block in use. */
void rx_seg_cache_drain(struct seg_cache *sc)
{
	unsigned int c;

	for (c = 0; c < SEG_CLASSES; c++)
		while (sc->free[c]) {
			struct rseg *s = sc->free[c];

			sc->free[c] = s->owner;
			if (!s->arena)
				free(s);
		}
	while (sc->chunks) {
		void *m = sc->chunks;

		sc->chunks = *(void **)m;
		munmap(m, ((size_t *)m)[1]);
	}
	sc->cur = NULL;
	sc->left = 0;
	sc->free_bytes = 0;
}

/* A segment owning a copy of @len keys and locations, from @sc (NULL:
 * malloc). */
struct rseg *rx_seg_new(struct seg_cache *sc, uint32_t len, const int32_t *keys,
			    const int32_t *vals)
{
	struct rseg *s = seg_block(sc, sizeof(*s) + 2 * (size_t)len * sizeof(int32_t));

	if (!s)
		return NULL;
	s->len = len;
	atomic_init(&s->refs, 1);
	s->owner = s;
	s->keys = s->data;
	s->vals = s->data + len;
	if (len) { /* the root's segment is empty and has no source */
		memcpy(s->keys, keys, len * sizeof(int32_t));
		memcpy(s->vals, vals, len * sizeof(int32_t));
	}
	return s;
}

/* A segment of @len tokens from token @off of @src that shares @src's
 * memory: a split copies nothing. */
struct rseg *rx_seg_view(struct rseg *src, uint32_t off, uint32_t len)
{
	struct rseg *s = malloc(sizeof(*s));

	if (!s)
		return NULL;
	s->len = len;
	s->cls = SEG_BIG;
	s->arena = false;
	s->sc = NULL;
	s->owner = src->owner;
	s->keys = src->keys + off;
	s->vals = src->vals + off;
	atomic_fetch_add_explicit(&s->owner->refs, 1, memory_order_relaxed);
	return s;
}

/* Free @s now (never published, or no reader can reach it); its owner's
 * memory goes with the last segment over it.  Runs on the writer's thread
 * and on RCU's, hence the atomic count. */
void rx_seg_free(struct rseg *s)
{
	struct rseg *o;

	if (!s)
		return;
	o = s->owner;
	if (s != o)
		free(s);
	if (atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1)
		seg_block_free(o);
}

/* The grace period's sync object for ThreadSanitizer (KVSI_TSAN_RELEASE,
 * internal.h): readers release it as they leave, writers before call_rcu(),
 * the callbacks below acquire it, so that TSan sees a reader's last look at
 * a segment, node or children array ordered before its reuse. */
char rx_rcu_gp;


void rx_free_seg_cb(struct rcu_head *h)
{
	KVSI_TSAN_ACQUIRE(&rx_rcu_gp);
	rx_seg_free(caa_container_of(h, struct rseg, rcu));
}

void rx_free_kids_cb(struct rcu_head *h)
{
	KVSI_TSAN_ACQUIRE(&rx_rcu_gp);
	free(caa_container_of(h, struct rkids, rcu));
}

void rx_free_node_cb(struct rcu_head *h)
{
	struct rnode *n = caa_container_of(h, struct rnode, rcu);

	KVSI_TSAN_ACQUIRE(&rx_rcu_gp);
	rx_seg_free(atomic_load_explicit(&n->seg, memory_order_relaxed));
	free(atomic_load_explicit(&n->kids, memory_order_relaxed));
	free(n->hist);
	free(n);
}
