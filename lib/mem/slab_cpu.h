/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/slab_cpu.h - the per-thread caches of the slab allocator, as the
 * allocation fast paths (lib/mem/slab.c) see them; lib/mem/slab_cpu.c has the rest.
 */
#ifndef KVSLAB_SLAB_CPU_H
#define KVSLAB_SLAB_CPU_H

#include "mem/slab_defs.h"

struct mag *slab_mag_get_slow(struct kvs_slab *s);
void slab_mag_flush_locked(struct kvs_slab *s, struct mag *m, uint32_t keep);
void slab_mag_drain_all_locked(struct kvs_slab *s);
void slab_mag_destructor(void *arg);
uint64_t slab_cached_locked(struct kvs_slab *s);

/* This thread's cache for @s, NULL when there is none. */
static inline struct mag *slab_mag_get(struct kvs_slab *s)
{
	if (likely(kvsi_slab_tls.id == s->id))
		return kvsi_slab_tls.mag;
	return slab_mag_get_slow(s);
}

static inline bool slab_mag_drain_due(struct kvs_slab *s, struct mag *m)
{
	return unlikely(m->drain_seen != atomic_load_explicit(&s->drain_gen, memory_order_relaxed));
}

#endif /* KVSLAB_SLAB_CPU_H */
