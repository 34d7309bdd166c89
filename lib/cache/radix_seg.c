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

static struct rseg *seg_block(struct seg_cache *sc, size_t b)
{
	struct rseg *s = NULL;
	size_t size;
	unsigned int c = seg_class(b, &size);

	if (!sc || c == SEG_BIG) {
		s = malloc(b);
		if (s) {
			s->cls = SEG_BIG;
			s->sc = NULL;
		}
		return s;
	}
	pthread_mutex_lock(&sc->lock);
	s = sc->free[c];
	if (s) {
		sc->free[c] = s->owner;
		sc->free_bytes -= size;
	}
	sc->live_bytes += size;
	pthread_mutex_unlock(&sc->lock);
	if (!s && !(s = malloc(size))) {
		pthread_mutex_lock(&sc->lock);
		sc->live_bytes -= size;
		pthread_mutex_unlock(&sc->lock);
		return NULL;
	}
	s->cls = (uint8_t)c;
	s->sc = sc;
	return s;
}

/* An owner's block goes back to its cache, or to malloc. */
static void seg_block_free(struct rseg *s)
{
	struct seg_cache *sc = s->sc;
	size_t size;
	bool keep;

	if (!sc) {
		free(s);
		return;
	}
	seg_class(sizeof(*s) + 2 * (size_t)s->len * sizeof(int32_t), &size);
	pthread_mutex_lock(&sc->lock);
	sc->live_bytes -= size;
	keep = sc->free_bytes + size <= sc->live_bytes / 4 + (4u << 20);
	if (keep) {
		s->owner = sc->free[s->cls];
		sc->free[s->cls] = s;
		sc->free_bytes += size;
	}
	pthread_mutex_unlock(&sc->lock);
	if (!keep)
		free(s);
}

/* Give every kept block back to malloc.  No segment may be in flight. */
void rx_seg_cache_drain(struct seg_cache *sc)
{
	unsigned int c;

	for (c = 0; c < SEG_CLASSES; c++)
		while (sc->free[c]) {
			struct rseg *s = sc->free[c];

			sc->free[c] = s->owner;
			free(s);
		}
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
