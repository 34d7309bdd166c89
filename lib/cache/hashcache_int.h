/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hashcache_int.h - what the hashed block cache's files share:
 * its structures, its bucket hash, and the table and free-queue helpers
 * of lib/cache/hashcache.c that lib/cache/hashcache_pool.c (the cache's
 * operations for its pool) uses; lib/cache/hashcache_info.c has its
 * statistics, checks and events.  The design is in hashcache.c's essay.
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
 * (hashcache.c's essay): the bytes of the hash the lock-free readers
 * compare (its length is in the slot's tag).  Written before it is
 * published, it stays as it is until a grace period after it leaves the
 * table. */
struct hent {
	uint8_t bytes[32];
} __attribute__((aligned(32)));

/* Slots of a table line. */
#define HC_WAYS 5

/* A line of the open-addressed table (hashcache.c's essay): five slots,
 * each 0 (empty) or its hash's tag (hc_tag()) over its entry's index + 1; each slot's block beside it (the
 * writers'); and how many entries sit past this line although their probe
 * began at or before it. */
struct hline {
	_Atomic uint64_t te[HC_WAYS];
	int32_t blk[HC_WAYS];
	_Atomic uint32_t over;
} __attribute__((aligned(64)));

/* A block's record: one cache line, so that a lookup or an eviction takes
 * one miss for it, hash included.  The writers' only: the readers never
 * look at it. */
struct hblock {
	uint8_t hash[32];		/* its hash's bytes while it has one (ent) */
	uint32_t ent;			/* its table entry's index + 1; 0: no hash */
	uint32_t slot;			/* its table slot: line * HC_WAYS + way */
	uint32_t ref;
	uint32_t mark;			/* scratch for validating a call's input */
	int32_t prev, next;		/* free queue links, -1 at the ends; only while inq */
	uint32_t qpos;			/* qring position of its last push to the queue */
	uint8_t hlen;			/* its hash's length */
	uint8_t disp;			/* lines its slot lies past its hash's home line
					 * (255: that many or more) */
	bool inq;
	bool iso;			/* isolated by kvs_pool_compact(): in the queue or in use */
} __attribute__((aligned(64)));

struct kvs_hcache {
	kvs_pool_t *pool;
	uint32_t ps;
	uint32_t nblocks;
	struct hblock *b;		/* nblocks records, 64-byte aligned */
	void *b_mem;			/* their allocation */
	struct hent *ent;		/* the slab: nent entries, 64-byte aligned */
	void *ent_mem;			/* its allocation */
	struct hline *tbl;		/* the table: lmask + 1 lines, 64-byte aligned */
	void *tbl_mem;			/* its allocation */
	uint64_t lmask;
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
static inline uint64_t hc_hash_bytes(const uint8_t *bytes, uint32_t len)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL ^ len, w;
	uint32_t i;

	/* Whole words with a load each (a digest's four unrolled); a short
	 * tail zero-extended. */
	if (len == 32) {
#pragma GCC unroll 4
		for (i = 0; i < 32; i += 8) {
			memcpy(&w, bytes + i, 8);
			x = (x ^ w) * 0xff51afd7ed558ccdULL;
			x ^= x >> 29;
		}
		goto fin;
	}
	for (i = 0; i + 8 <= len; i += 8) {
		memcpy(&w, bytes + i, 8);
		x = (x ^ w) * 0xff51afd7ed558ccdULL;
		x ^= x >> 29;
	}
	if (i < len) {
		w = 0;
		memcpy(&w, bytes + i, len - i);
		x = (x ^ w) * 0xff51afd7ed558ccdULL;
		x ^= x >> 29;
	}
fin:
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static inline uint64_t hc_hash_bucket(const kvs_block_hash_t *h)
{
	return hc_hash_bytes(h->bytes, h->len);
}

/* The line a hash of hc_hash_bucket() @hv is probed from, and its tag. */
static inline uint64_t hc_home(const kvs_hcache_t *hc, uint64_t hv)
{
	return hv & hc->lmask;
}

/* A hash's tag: 27 high bits of its hc_hash_bucket() @hv over its length
 * @len - 1, so that one compare checks both. */
static inline uint32_t hc_tag(uint64_t hv, uint32_t len)
{
	return ((uint32_t)(hv >> 32) & ~(uint32_t)31) | (len - 1);
}

/* Block @i's hash, from its record. */
static inline void hc_block_hash(const kvs_hcache_t *hc, int32_t i, kvs_block_hash_t *h)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->bytes, hc->b[i].hash, hc->b[i].hlen);
	h->len = hc->b[i].hlen;
}

/* lib/cache/hashcache_info.c: send an event of @type to the callbacks
 * (hc->lock held): @n hashes at @h, the one before them @parent (or NULL),
 * and for a stored event @extra and the n * block size token ids @tokens
 * (or NULL), which the events point into. */
void hc_emit(kvs_hcache_t *hc, int type, const kvs_block_hash_t *h, size_t n,
	     const kvs_block_hash_t *parent, uint64_t extra, const int32_t *tokens);

/* lib/cache/hashcache.c; each with hc->lock held. */
void hc_page_free(kvs_hcache_t *hc, int32_t i);
void hc_uncache(kvs_hcache_t *hc, int32_t i, bool event);

/* lib/cache/hashcache_pool.c: the operations the cache registers. */
struct kvsi_cache_ops;
extern const struct kvsi_cache_ops kvsi_hcache_ops;

#endif /* KVSLAB_CACHE_HASHCACHE_INT_H */
