/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hashcache_int.h - what the hashed block cache's files share:
 * its structures, its bucket hash, and the table, event and free-queue
 * helpers of lib/cache/hashcache.c that lib/cache/hashcache_pool.c (the
 * cache's operations for its pool) uses; lib/cache/hashcache_info.c has
 * its statistics and checks.  The design is in hashcache.c's essay.
 */
#ifndef KVSLAB_CACHE_HASHCACHE_INT_H
#define KVSLAB_CACHE_HASHCACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <urcu-bp.h>

#include "internal.h"
#include "kvslab/hashcache.h"

/* A table entry: one of hc->ent[], the slab of entries made at create
 * (hashcache.c's essay).  Published, it is immutable for the readers but
 * for @next; @prev and @block are the writers'. */
struct hent {
	_Atomic int32_t next;		/* chain: the next entry, -1 at the end */
	int32_t prev;			/* chain: the entry before, -1 at the bucket's head */
	int32_t block;
	uint32_t pad;
	uint64_t hv;			/* hc_hash_bucket(&hash), kept for removal and compares */
	kvs_block_hash_t hash;
} __attribute__((aligned(64)));

struct hblock {
	uint32_t ent;			/* its table entry's index + 1; 0: no hash */
	uint32_t ref;
	uint32_t mark;			/* scratch for validating a call's input */
	int32_t prev, next;		/* free queue links, -1 at the ends; only while inq */
	bool inq;
	bool iso;			/* isolated by kvs_pool_compact(): in the queue or in use */
	uint32_t qpos;			/* qring position of its last push to the queue */
} __attribute__((aligned(32)));		/* one cache line's half: a record is one miss */

struct kvs_hcache {
	kvs_pool_t *pool;
	uint32_t ps;
	uint32_t nblocks;
	struct hblock *b;		/* nblocks records, 64-byte aligned */
	void *b_mem;			/* their allocation */
	struct hent *ent;		/* the slab: nent entries, 64-byte aligned */
	void *ent_mem;			/* its allocation */
	_Atomic int32_t *bucket;	/* chain heads, -1 for none */
	uint64_t mask;
	uint32_t nent;
	int32_t *estk;			/* nent: free entries (past a grace period) at
					 * [0, nfree), retired ones at [nent - nretired, nent) */
	uint32_t nfree, nretired;
	uint32_t efresh;		/* entries from here on never used */
	uint64_t ngp;			/* grace periods waited for (entries ran out) */
	int32_t qhead, qtail;
	int32_t *qring;			/* the blocks in the order pushed to the queue: a hint */
	uint32_t qrmask, qrtail;	/* qring's size - 1 (a power of two), next position */
	uint64_t qlen, ncached, nused, nevict;
	uint64_t niso;			/* isolated blocks in the queue (kept from eviction) */
	int32_t *scratch;		/* ps locations for kvs_pool_alloc() */
	pthread_mutex_t lock;
	kvs_hcache_attr_t attr;
	/* metrics */
	uint64_t queries, query_blocks, hit_blocks, query_tokens, hit_tokens;
	uint32_t *wq, *wh;		/* per request of the window: blocks */
	uint64_t *wqt, *wht;		/* and tokens */
	uint32_t wpos, wfill;
	uint64_t wsum_q, wsum_h, wsum_qt, wsum_ht;
};

/* Every byte counts (the caller's hashes need not be uniform), a word at a
 * time: four multiplies for a SHA-256 digest, then a finalizer. */
static inline uint64_t hc_hash_bucket(const kvs_block_hash_t *h)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL ^ h->len;
	uint32_t i;

	for (i = 0; i < h->len; i += 8) {
		uint64_t w = 0;

		memcpy(&w, h->bytes + i, h->len - i < 8 ? h->len - i : 8);
		x = (x ^ w) * 0xff51afd7ed558ccdULL;
		x ^= x >> 29;
	}
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* lib/cache/hashcache.c; each with hc->lock held. */
void hc_page_free(kvs_hcache_t *hc, int32_t i);
void hc_uncache(kvs_hcache_t *hc, int32_t i, bool event);

/* lib/cache/hashcache_pool.c: the operations the cache registers. */
struct kvsi_cache_ops;
extern const struct kvsi_cache_ops kvsi_hcache_ops;

#endif /* KVSLAB_CACHE_HASHCACHE_INT_H */
