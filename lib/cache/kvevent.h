/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/kvevent.h - page hashing and KV-event delivery shared by the prefix
 * caches (lib/cache/kvevent.c has the code and the essay).
 */
#ifndef KVSLAB_KVEVENT_H
#define KVSLAB_KVEVENT_H

#include <stdint.h>

#include "kvslab/radix.h"

/* Where a cache's events go; cb NULL: nowhere. */
struct kvev_sink {
	kvs_kv_event_cb cb;
	void *arg;
	uint32_t ps;			/* tokens per page */
	int medium;			/* KVS_MEDIUM_* of its events */
};

static inline uint64_t kvev_mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* A 64-bit hash of @n tokens under @seed.  Inline: the radix tree hashes a
 * page at every step of a match. */
static inline uint64_t kvev_hash_page(uint64_t seed, const int32_t *t, uint32_t n)
{
	uint64_t h = kvev_mix64(seed ^ 0x9e3779b97f4a7c15ULL);
	uint32_t i;

	for (i = 0; i < n; i++)
		h = kvev_mix64(h ^ ((uint64_t)(uint32_t)t[i] + ((uint64_t)i << 32)));
	return h;
}

uint64_t kvev_chain(const struct kvev_sink *sink, uint64_t h, uint64_t extra,
		    const int32_t *keys, uint32_t from, uint32_t to, int type);
void kvev_all_cleared(const struct kvev_sink *sink);

#endif /* KVSLAB_KVEVENT_H */
