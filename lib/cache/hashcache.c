/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hashcache.c - the hashed block cache: vLLM v1's BlockPool
 * (vllm/v1/core/block_pool.py, kv_cache_utils.py's FreeKVCacheBlockQueue)
 * over a kvslab KV pool.
 *
 * A block is one pool page.  The cache keeps one struct hblock per page of
 * the pool, indexed by page number, so that a block id is a page number and
 * its token locations are block * page_size ... + page_size - 1.  A page is
 * the cache's from kvs_hcache_alloc() until it goes back to the pool: when a
 * block without a hash is freed to refcount 0, when a cached free block is
 * evicted by kvs_hcache_evict(), and on reset or destroy.  A cached block
 * freed to refcount 0 keeps its page and its hash and goes to the tail of
 * the free queue, an intrusive doubly linked list threaded through the
 * block array by index: taking a hit block off it and evicting its head are
 * O(1).  Eviction order is the queue's: least recently freed first, and
 * among blocks freed by one call, the order the caller gave (vLLM frees a
 * request's blocks tail first, so the end of the longest prefix goes
 * first).  kvs_hcache_alloc() takes free pool pages before it evicts.
 *
 * The table maps hash -> block.  It is open-addressed: a fixed array of
 * 64-byte lines (a power of two, one line for every two pages, so at most
 * 40% of its slots are used), each holding five slots, the blocks of those
 * slots, and the line's over count.  A slot is one word, 0 when empty,
 * else the hash's tag (27 bits of its bucket hash and its length) over the
 * index of its entry.  A hash is placed in the first empty slot from its
 * home line on (the lines after it in turn, wrapping); every full line it
 * passes counts it in its over, and a probe ends at the first line whose
 * over is 0, as in F14's chunks.  Entries never move, so removal is O(1)
 * and walks nothing: the block's record names its slot and how many lines
 * lie between the slot and its home, the slot is emptied and those lines'
 * over counts (none, for 98% of the hashes) go down.  No tombstones: an
 * emptied slot is empty.
 *
 * The entries, which hold the hashes' bytes for the lock-free readers, are
 * neither the blocks' records nor malloc'd: they come from a slab,
 * hc->ent[], made at create with one entry per page of the pool and a
 * reserve beside them (a quarter of the pages, at least HC_RESERVE_MIN
 * entries), 32 bytes each.  The writers never read them: each block's
 * record, one cache line, keeps a copy of its hash beside its refcount and
 * free-queue links, and a slot names its block beside it.  So a writer's
 * lookup reads a table line and the candidate's record (which it goes on
 * to reference), an eviction the record it takes off the queue and its
 * slot's line, and caching writes the entry and the record and fills a
 * slot: no entry is read and no chain neighbour touched (the doubly linked
 * chains of entries before this table took an entry, a bucket and one or
 * two neighbours per removal, and the singly linked ones before them a
 * walk).  Caching a block takes an entry off the free stack (of indices),
 * fills it and publishes it in its slot with a release store; removing one
 * empties the slot with a release store and pushes the entry's index on
 * the retired stack.  Writers are serialized by one mutex.
 *
 * Readers (kvs_hcache_match_ro()) take no lock: they probe the table with
 * acquire loads inside an RCU read-side critical section (liburcu,
 * bulletproof flavour, as lib/cache/radix.c) and compare the entries a
 * slot of their tag names.  A reader may hold an entry's index as its slot
 * is emptied; what it must never meet is the entry reused, filled with
 * another hash while it compares it: it could match torn bytes.  There
 * are two ways out.  A sequence count per entry, checked around each
 * compare (a seqlock), makes readers retry: lock-free but not wait-free,
 * as a busy writer can keep a reader retrying, and every step pays two
 * more loads.  Or reuse waits for a grace period, as the malloc'd entries
 * of old were freed through call_rcu().  The cache waits: a retired entry
 * is not written and becomes free only after a grace period.  When the
 * free stack runs dry, the writer calls synchronize_rcu() once and takes
 * the whole retired stack, which then holds at least the reserve (the
 * table never holds more entries than pages).  So a reader stays
 * wait-free (a probe is bounded by the table), compares only entries that
 * held the hash their slot named when it read the slot, never an entry
 * that changes under it, and never reports a hash that no block held; and
 * a writer pays one grace period per reserve retirements (microseconds
 * over thousands of entries), no malloc, no call_rcu() queue.  The price:
 * a writer call may wait for the readers, so none may be made inside a
 * liburcu-bp read-side critical section of the calling thread (the event
 * callbacks may call kvs_hcache_match_ro(), which leaves its section
 * before it returns).  Duplicate hashes are allowed, as in vLLM: a second
 * block with the same hash gets an entry and a slot of its own; a lookup
 * finds one of them.  (tests/stress/stress_hashcache.c holds a reader in
 * its section and checks that the writer waits; it fails with entries
 * reused at once.)
 *
 * Memory.  At millions of blocks every random step of a lookup or an
 * eviction is a cache miss (and, on 4 KiB pages, a TLB miss: the arrays
 * ask for transparent huge pages).  So the calls that handle many blocks
 * work in rounds of HC_BATCH: a lookup or match hashes a round's hashes and
 * prefetches their home lines, then each hash's first candidate of its tag
 * (the writer's record, the reader's entry), then compares; an eviction
 * walks the queue prefetching the next round's table lines and the
 * records of the round after; caching prefetches the entries, home lines
 * and records.  The misses of a round overlap
 * instead of following one another.  The one chain left, the free queue's
 * links, is walked with the records already fetched: a ring of the blocks
 * in the order they joined the queue tells which to prefetch a round ahead
 * (see "free queue" below).  The hash itself is computed word by word
 * without a branch a byte, and the slots of a line are compared without a
 * branch a slot (a mispredicted branch a slot was a fifth of caching's
 * time at 1k blocks).
 *
 * Files.  The cache's operations for its pool (limits and compaction over
 * every cache, lib/mem/cacheops.h) are lib/cache/hashcache_pool.c's, its
 * statistics, checks and events lib/cache/hashcache_info.c's; the
 * structures they share are in lib/cache/hashcache_int.h.
 *
 * Locking (the library's lock order is in common/common.h): hc->lock, the
 * writer lock, sits where radix->wlock does, above slab->lock: it is held
 * across kvs_pool_alloc() and kvs_pool_free() and across the event
 * callbacks, which may only call kvs_hcache_match_ro().  A flow's lock may
 * be held above it (a hashed flow calls the cache); it nests with another
 * cache's writer lock only in kvs_pool_compact()'s commit, under the
 * pool's elastic mutex (lib/mem/cacheops.h).
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <urcu-bp.h>

#include "cache/hashcache_int.h"
#include "mem/cacheops.h"


/* ---------------------------------------------------------------- hashes */

static bool hash_ok(const kvs_block_hash_t *h)
{
	return h->len >= 1 && h->len <= sizeof(h->bytes);
}

/* @len bytes at @a and @b equal: a SHA-256 digest's 32 in four words. */
static inline bool bytes_eq(const uint8_t *a, const uint8_t *b, uint32_t len)
{
	if (len == 32) {
		uint64_t x[4], y[4];

		memcpy(x, a, 32);
		memcpy(y, b, 32);
		return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3])) == 0;
	}
	return memcmp(a, b, len) == 0;
}

/* Does entry @e hold hash @h (whose length its slot's tag matched)? */
static inline bool ent_eq(const kvs_hcache_t *hc, int32_t e, const kvs_block_hash_t *h)
{
	return bytes_eq(hc->ent[e].bytes, h->bytes, h->len);
}

/* Does block @i's record hold hash @h? */
static inline bool rec_eq(const kvs_hcache_t *hc, int32_t i, const kvs_block_hash_t *h)
{
	return hc->b[i].hlen == h->len && bytes_eq(hc->b[i].hash, h->bytes, h->len);
}

/* ---------------------------------------------------------------- table */


/* The entries' reserve beside one a page, at least. */
#define HC_RESERVE_MIN 4096u

/* A slot's word: the tag of a hash of @len bytes and hc_hash_bucket() @hv
 * over entry @e's index + 1. */
static inline uint64_t te_make(uint64_t hv, uint32_t len, int32_t e)
{
	return ((uint64_t)hc_tag(hv, len) << 32) | ((uint32_t)e + 1);
}

static inline int32_t te_ent(uint64_t te)
{
	return (int32_t)((uint32_t)te - 1);
}

/* The ways of line @L that are empty, or (line_tag()) that hold an entry
 * under @tag, as a bit mask: no branch a way, which would mispredict. */
static inline uint32_t line_empty(struct hline *L)
{
	uint32_t m = 0;

#pragma GCC unroll 8
	for (int w = 0; w < HC_WAYS; w++)
		m |= (uint32_t)(atomic_load_explicit(&L->te[w], memory_order_relaxed) == 0) << w;
	return m;
}

static inline uint32_t line_tag(struct hline *L, uint32_t tag)
{
	uint32_t m = 0;

#pragma GCC unroll 8
	for (int w = 0; w < HC_WAYS; w++) {
		uint64_t te = atomic_load_explicit(&L->te[w], memory_order_acquire);

		m |= (uint32_t)(te != 0 && (uint32_t)(te >> 32) == tag) << w;
	}
	return m;
}

/*
 * Probe for a hash (@hv its hc_hash_bucket()) from its home line on: each
 * slot of its tag is a candidate, until a line that no entry passed
 * (over 0).  A reader's (inside its read-side section: the entries'
 * hashes are compared, -1 or the entry's index returned) or, with @writer,
 * a writer's under hc->lock (the blocks' records are compared, -1 or the
 * block returned).
 */
static int32_t tbl_probe(kvs_hcache_t *hc, const kvs_block_hash_t *h, uint64_t hv, bool writer)
{
	uint64_t l = hc_home(hc, hv), d;
	uint32_t tag = hc_tag(hv, h->len);

	for (d = 0; d <= hc->lmask; d++, l = (l + 1) & hc->lmask) {
		struct hline *L = &hc->tbl[l];

		for (int w = 0; w < HC_WAYS; w++) {
			uint64_t te = atomic_load_explicit(&L->te[w], memory_order_acquire);

			if (!te || (uint32_t)(te >> 32) != tag)
				continue;
			if (writer ? rec_eq(hc, L->blk[w], h) : ent_eq(hc, te_ent(te), h))
				return writer ? L->blk[w] : te_ent(te);
		}
		if (!atomic_load_explicit(&L->over, memory_order_acquire))
			break;
	}
	return -1;
}

/* Blocks or hashes a batched pass takes a round: a 64-block request in one
 * (32 measured 2-3 ns a block slower at 4M blocks, lookup and caching). */
#define HC_BATCH 64

/*
 * The longest run of @hashes (at most @cap) in the table; the blocks into
 * @blocks, or with @blocks NULL, a reader's count (inside its read-side
 * section).  With @blocks, a writer's under hc->lock: it compares the
 * blocks' records, which the caller goes on to touch, and never reads an
 * entry.  A round of up to HC_BATCH hashes at a time, so that the misses
 * of a round overlap rather than follow one another: the home lines are
 * prefetched, then each hash's first candidate of its tag (its record, or
 * a reader's entry), then the candidates are compared, a probe from the
 * start for the few that are not the first of their tag or not in their
 * home line.  A round may fetch a little past the first miss; it reads
 * nothing else.
 */
static size_t tbl_find_run(kvs_hcache_t *hc, const kvs_block_hash_t *hashes, size_t cap,
			   int32_t *blocks)
{
	uint64_t hv[HC_BATCH];
	int32_t cand[HC_BATCH];
	bool writer = blocks != NULL;

	for (size_t k = 0; k < cap; k += HC_BATCH) {
		size_t m = cap - k < HC_BATCH ? cap - k : HC_BATCH, j;

		for (j = 0; j < m; j++) {
			hv[j] = hc_hash_bucket(&hashes[k + j]);
			__builtin_prefetch(&hc->tbl[hc_home(hc, hv[j])]);
		}
		for (j = 0; j < m; j++) {
			struct hline *L = &hc->tbl[hc_home(hc, hv[j])];
			uint32_t tag = hc_tag(hv[j], hashes[k + j].len);

			uint32_t mt = line_tag(L, tag);
			uint64_t te;
			int w;

			cand[j] = -1;
			if (!mt)
				continue;
			w = __builtin_ctz(mt);
			if (writer) {
				cand[j] = L->blk[w];
				__builtin_prefetch(&hc->b[cand[j]], 1);
			} else if ((te = atomic_load_explicit(&L->te[w], memory_order_acquire)) != 0) {
				/* (A writer may have emptied it since.) */
				cand[j] = te_ent(te);
				__builtin_prefetch(&hc->ent[cand[j]]);
			}
		}
		for (j = 0; j < m; j++) {
			const kvs_block_hash_t *h = &hashes[k + j];
			int32_t c = cand[j];

			if (c < 0 || !(writer ? rec_eq(hc, c, h) : ent_eq(hc, c, h)))
				c = tbl_probe(hc, h, hv[j], writer);
			if (c < 0)
				return k + j;
			if (writer)
				blocks[k + j] = c;
		}
	}
	return cap;
}

/* The grace period's sync object for ThreadSanitizer (KVSI_TSAN_RELEASE,
 * internal.h): readers release it as they leave their read-side section
 * and the writer as it retires an entry; the writer acquires it after the
 * grace period, before it reuses the retired entries; so TSan sees a
 * reader's last look at an entry ordered before the entry's reuse. */
static char hc_rcu_gp;

/* A free entry, its index: after a grace period when none is left (the
 * retired ones then hold at least the reserve).  The free and retired
 * entries are stacks of indices, so that taking one reads no entry (a
 * linked free list would cost a dependent miss each) and the next ones can
 * be prefetched.  With hc->lock held. */
static int32_t ent_get(kvs_hcache_t *hc)
{
	if (hc->nfree)
		return hc->estk[--hc->nfree];
	if (hc->efresh < hc->nent)
		return (int32_t)hc->efresh++;
	synchronize_rcu();
	KVSI_TSAN_ACQUIRE(&hc_rcu_gp);
	memmove(hc->estk, hc->estk + hc->nent - hc->nretired, hc->nretired * sizeof(*hc->estk));
	hc->nfree = hc->nretired;
	hc->nretired = 0;
	hc->ngp++;
	return hc->estk[--hc->nfree];
}

/* Publish entry @e, filled with @hash (@hv its hc_hash_bucket()), for
 * block @block in the first empty slot from its home line on; every full
 * line passed counts it in its over.  The block's record takes the hash,
 * the entry and the slot. */
static void tbl_insert(kvs_hcache_t *hc, int32_t e, const kvs_block_hash_t *hash, uint64_t hv,
		       int32_t block)
{
	struct hblock *b = &hc->b[block];
	uint64_t l = hc_home(hc, hv);
	uint32_t d = 0;

	/* The whole array: a constant size, copied inline. */
	memcpy(hc->ent[e].bytes, hash->bytes, sizeof(hash->bytes));
	for (;; d++, l = (l + 1) & hc->lmask) {
		struct hline *L = &hc->tbl[l];
		uint32_t empty = line_empty(L);

		if (empty) {
			int w = __builtin_ctz(empty);

			L->blk[w] = block;
			atomic_store_explicit(&L->te[w], te_make(hv, hash->len, e), memory_order_release);
			b->slot = (uint32_t)(l * HC_WAYS + (uint64_t)w);
			b->disp = (uint8_t)(d < 255 ? d : 255);
			b->ent = (uint32_t)e + 1;
			memcpy(b->hash, hash->bytes, sizeof(hash->bytes));
			b->hlen = (uint8_t)hash->len;
			return;
		}
		atomic_store_explicit(&L->over, atomic_load_explicit(&L->over, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	}
}

/* Take block @i's hash out of the table in O(1): empty its slot (the
 * entry stays as it is for a reader on it), take it off the over counts
 * of the lines its probe passed, and retire the entry. */
static void tbl_remove(kvs_hcache_t *hc, int32_t i)
{
	struct hblock *b = &hc->b[i];
	uint64_t l = b->slot / HC_WAYS;
	struct hline *L = &hc->tbl[l];

	atomic_store_explicit(&L->te[b->slot % HC_WAYS], 0, memory_order_release);
	if (b->disp) {
		uint64_t p = b->disp < 255 ? (l - b->disp) & hc->lmask
					   : hc_home(hc, hc_hash_bytes(b->hash, b->hlen));

		for (; p != l; p = (p + 1) & hc->lmask)
			atomic_store_explicit(&hc->tbl[p].over,
					      atomic_load_explicit(&hc->tbl[p].over, memory_order_relaxed) - 1,
					      memory_order_relaxed);
	}
	KVSI_TSAN_RELEASE(&hc_rcu_gp);
	hc->estk[hc->nent - ++hc->nretired] = (int32_t)b->ent - 1;
	b->ent = 0;
}

/* ---------------------------------------------------------------- free queue */

/*
 * The queue is a list, and an eviction walking it from the head would wait
 * for each block's record before it knows the next block: one dependent
 * miss a block.  Beside it, qring records every block pushed to the queue,
 * in order, in a ring of at least the pages: from the head's position on it
 * lists the queue, but for blocks that left it by a hit (still listed) and
 * for old positions overwritten.  It is only a hint of which records to
 * prefetch ahead of the walk; the list alone says what is evicted.
 */

static inline void hc_q_remove(kvs_hcache_t *hc, int32_t i)
{
	struct hblock *b = &hc->b[i];

	if (b->prev >= 0)
		hc->b[b->prev].next = b->next;
	else
		hc->qhead = b->next;
	if (b->next >= 0)
		hc->b[b->next].prev = b->prev;
	else
		hc->qtail = b->prev;
	b->prev = b->next = -1;
	b->inq = false;
	hc->qlen--;
}

static inline void q_push_tail(kvs_hcache_t *hc, int32_t i)
{
	struct hblock *b = &hc->b[i];

	b->prev = hc->qtail;
	b->next = -1;
	if (hc->qtail >= 0)
		hc->b[hc->qtail].next = i;
	else
		hc->qhead = i;
	hc->qtail = i;
	b->inq = true;
	b->qpos = hc->qrtail;
	hc->qring[hc->qrtail++ & hc->qrmask] = i;
	/* The ring's line a request or two ahead, so that its store does not
	 * wait for it (the ring is as large as the queue: its lines are cold). */
	__builtin_prefetch(&hc->qring[(hc->qrtail + 128) & hc->qrmask], 1);
	hc->qlen++;
}

/* Take free cached block @i off the queue and out of the table (a removed
 * event and an eviction counted when @event); its page stays with the
 * caller.  With hc->lock held. */
static inline void uncache(kvs_hcache_t *hc, int32_t i, bool event)
{
	hc_q_remove(hc, i);
	if (event && (hc->attr.event_cb || hc->attr.kv_event_cb)) {
		kvs_block_hash_t h;

		hc_block_hash(hc, i, &h);
		hc_emit(hc, KVS_KV_REMOVED, &h, 1, NULL, 0, NULL);
	}
	tbl_remove(hc, i);
	hc->ncached--;
	if (event)
		hc->nevict++;
}

void hc_uncache(kvs_hcache_t *hc, int32_t i, bool event)
{
	uncache(hc, i, event);
}

/* Take the first block of the free queue that is not isolated off the
 * queue and out of the table (the caller knows there is one: qlen > niso);
 * its page stays with the caller.  O(1) but for the isolated blocks passed
 * over while kvs_pool_compact() runs. */
static int32_t evict_head(kvs_hcache_t *hc, bool event)
{
	int32_t i = hc->qhead;

	while (hc->b[i].iso)
		i = hc->b[i].next;
	hc_uncache(hc, i, event);
	return i;
}

/*
 * evict_head() @n times (the caller knows there are @n: qlen - niso >= @n),
 * the blocks into @out, in the same order, with the same events; but a
 * round of up to HC_BATCH blocks at a time, so that their memory is
 * fetched in parallel rather than one dependent miss after another, and
 * ahead: by qring's hint, the records of the round after next and the
 * table lines of the next round (their records fetched a round before)
 * are prefetched while a round walks the queue; then its blocks leave as
 * evict_head() takes them.  No entry is read: the record holds the hash.
 */
static void evict_batch(kvs_hcache_t *hc, size_t n, int32_t *out, bool event)
{
	uint32_t pos, j;

	if (n == 0)
		return;
	pos = hc->b[hc->qhead].qpos;
	for (j = 0; j < 2 * HC_BATCH && j < n + HC_BATCH; j++)
		__builtin_prefetch(&hc->b[hc->qring[(pos + j) & hc->qrmask]], 1);
	while (n) {
		size_t m = n < HC_BATCH ? n : HC_BATCH;
		int32_t i = hc->qhead;

		pos = hc->b[i].qpos;
		for (j = 0; j < m; j++) {
			int32_t nx = hc->qring[(pos + HC_BATCH + j) & hc->qrmask];

			__builtin_prefetch(&hc->b[hc->qring[(pos + 2 * HC_BATCH + j) & hc->qrmask]], 1);
			__builtin_prefetch(&hc->tbl[hc->b[nx].slot / HC_WAYS], 1);
			while (hc->b[i].iso)
				i = hc->b[i].next;
			out[j] = i;
			__builtin_prefetch(&hc->tbl[hc->b[i].slot / HC_WAYS], 1);
			i = hc->b[i].next;
		}
		for (j = 0; j < m; j++)
			uncache(hc, out[j], event);
		out += m;
		n -= m;
	}
}

void hc_page_free(kvs_hcache_t *hc, int32_t i)
{
	int32_t loc = (int32_t)((uint64_t)i * hc->ps);

	kvs_pool_free(hc->pool, 1, &loc);
}

/* ---------------------------------------------------------------- API */

/**
 * kvs_hcache_attr_init() - fill @attr with the defaults.
 * @attr: attributes.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL for NULL.
 */
KVS_EXPORT int kvs_hcache_attr_init(kvs_hcache_attr_t *attr)
{
	KVS_ATTR_CLEAR(attr);
	attr->window = 1000;
	return 0;
}

/* Ask for transparent huge pages over the 2 MiB-aligned part of an array
 * of @len bytes at @p (a large calloc() is a mapping of its own): the
 * table's accesses are random, and at millions of blocks a TLB miss would
 * come with nearly every cache miss.  Advice only; errors are ignored. */
static void advise_huge(void *p, size_t len)
{
#ifdef MADV_HUGEPAGE
	const uintptr_t huge = (uintptr_t)2 << 20;
	uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
	uintptr_t e = ((uintptr_t)p + len) & ~(huge - 1);

	if (e > a)
		(void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
	(void)p;
	(void)len;
#endif
}

/* Free the cache's arrays and the cache (NULL arrays are fine). */
static void hc_free_mem(kvs_hcache_t *hc)
{
	KVS_FREE_ALL(hc->b_mem, hc->ent_mem, hc->estk, hc->qring, hc->tbl_mem, hc->scratch, hc->wq, hc->wh,
		     hc->wqt, hc->wht, hc);
}

/**
 * kvs_hcache_create() - a hashed block cache over @pool.
 * @pool: the KV pool its blocks (one page each) come from.
 * @attr: attributes, or NULL for the defaults.
 *
 * Context: MT-Safe.
 * Return: the cache, or NULL with errno EINVAL (no pool, window 0, a pool of
 * no pages or more than 2^30) or ENOMEM.
 */
KVS_EXPORT kvs_hcache_t *kvs_hcache_create(kvs_pool_t *pool, const kvs_hcache_attr_t *attr)
{
	kvs_hcache_attr_t def;
	kvs_hcache_t *hc;
	uint64_t pages, nl = 2, nq = 16, nent;

	if (!attr) {
		kvs_hcache_attr_init(&def);
		attr = &def;
	}
	if (!pool || attr->window == 0 || kvs_pool_page_size(pool) == 0) {
		errno = EINVAL;
		return NULL;
	}
	pages = kvs_pool_capacity(pool) / kvs_pool_page_size(pool);
	if (pages == 0 || pages > ((uint64_t)1 << 30)) {
		errno = EINVAL;
		return NULL;
	}
	while (nl * 2 < pages)		/* a line for every two pages: 40% full at most */
		nl <<= 1;
	while (nq < pages)
		nq <<= 1;
	nent = pages + (pages / 4 > HC_RESERVE_MIN ? pages / 4 : HC_RESERVE_MIN);
	hc = calloc(1, sizeof(*hc));
	if (!hc)
		return NULL;
	hc->pool = pool;
	hc->ps = kvs_pool_page_size(pool);
	hc->nblocks = (uint32_t)pages;
	hc->attr = *attr;
	hc->lmask = nl - 1;
	hc->qhead = hc->qtail = -1;
	hc->nent = (uint32_t)nent;
	hc->b_mem = calloc(pages + 2, sizeof(*hc->b));
	/* calloc(): a large slab is mapped on demand, each entry's page
	 * touched when it is first used; aligned by hand to a cache line. */
	hc->ent_mem = calloc(nent + 1, sizeof(*hc->ent));
	hc->estk = calloc(nent, sizeof(*hc->estk));
	hc->qrmask = (uint32_t)(nq - 1);	/* nq >= pages */
	hc->qring = calloc(nq, sizeof(*hc->qring));
	/* calloc(): every slot empty, every over 0, mapped on demand. */
	hc->tbl_mem = calloc(nl + 1, sizeof(*hc->tbl));
	hc->scratch = calloc(hc->ps, sizeof(*hc->scratch));
	hc->wq = calloc(attr->window, sizeof(*hc->wq));
	hc->wh = calloc(attr->window, sizeof(*hc->wh));
	hc->wqt = calloc(attr->window, sizeof(*hc->wqt));
	hc->wht = calloc(attr->window, sizeof(*hc->wht));
	if (!hc->b_mem || !hc->ent_mem || !hc->estk || !hc->qring || !hc->tbl_mem || !hc->scratch || !hc->wq || !hc->wh ||
	    !hc->wqt || !hc->wht)
		goto nomem;
	hc->ent = (struct hent *)(((uintptr_t)hc->ent_mem + sizeof(*hc->ent) - 1) &
				  ~(uintptr_t)(sizeof(*hc->ent) - 1));
	hc->b = (struct hblock *)(((uintptr_t)hc->b_mem + 63) & ~(uintptr_t)63);
	hc->tbl = (struct hline *)(((uintptr_t)hc->tbl_mem + 63) & ~(uintptr_t)63);
	advise_huge(hc->b, pages * sizeof(*hc->b));
	advise_huge(hc->ent_mem, (nent + 1) * sizeof(*hc->ent));
	advise_huge(hc->tbl_mem, (nl + 1) * sizeof(*hc->tbl));
	pthread_mutex_init(&hc->lock, NULL);
	/* The records stay untouched until their page is used: the queue
	 * links are set when a block joins the queue and read only there. */
	if (kvsi_pool_cache_add(pool, &kvsi_hcache_ops, hc) < 0) {
		pthread_mutex_destroy(&hc->lock);
		goto nomem;
	}
	return hc;
nomem:
	hc_free_mem(hc);
	errno = ENOMEM;
	return NULL;
}

/* Give every cached free block's page back and empty the table. */
static void drop_all(kvs_hcache_t *hc)
{
	while (hc->qhead >= 0)
		hc_page_free(hc, evict_head(hc, false));
}

/**
 * kvs_hcache_destroy() - give back every cached page and free the cache.
 * @hc: cache, or NULL.
 *
 * Takes the cache off its pool first (lib/mem/cacheops.h), waiting for an
 * elastic call under way on the pool.
 *
 * Context: MT-Unsafe: no other call on @hc may run or follow.
 * Return: 0, or -1 with errno EBUSY (a block is still referenced; nothing
 * changed).
 */
KVS_EXPORT int kvs_hcache_destroy(kvs_hcache_t *hc)
{
	if (!hc)
		return 0;
	if (hc->nused)
		return kvs_fail(EBUSY);
	kvsi_pool_cache_del(hc->pool, hc); /* no elastic call runs on it from here on */
	drop_all(hc);
	synchronize_rcu();
	pthread_mutex_destroy(&hc->lock);
	hc_free_mem(hc);
	return 0;
}

static size_t lookup_cap(const kvs_hcache_t *hc, size_t nhashes, size_t ntokens)
{
	size_t cap = ntokens ? (ntokens - 1) / hc->ps : 0;

	return cap < nhashes ? cap : nhashes;
}

static bool hashes_ok(const kvs_block_hash_t *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!hash_ok(&h[i]))
			return false;
	return true;
}

/* Count one request in the hit metrics: @q blocks looked up (after the
 * cap), @h of them hit, of a request of @qt tokens.  vLLM's hit rate is in
 * tokens: the request's tokens queried, the hit blocks' tokens hit. */
static void query_record(kvs_hcache_t *hc, uint32_t q, uint32_t h, uint64_t qt)
{
	uint64_t ht = (uint64_t)h * hc->ps;

	hc->queries++;
	hc->query_blocks += q;
	hc->hit_blocks += h;
	hc->query_tokens += qt;
	hc->hit_tokens += ht;
	if (hc->wfill == hc->attr.window) {
		hc->wsum_q -= hc->wq[hc->wpos];
		hc->wsum_h -= hc->wh[hc->wpos];
		hc->wsum_qt -= hc->wqt[hc->wpos];
		hc->wsum_ht -= hc->wht[hc->wpos];
	} else {
		hc->wfill++;
	}
	hc->wq[hc->wpos] = q;
	hc->wh[hc->wpos] = h;
	hc->wqt[hc->wpos] = qt;
	hc->wht[hc->wpos] = ht;
	hc->wsum_q += q;
	hc->wsum_h += h;
	hc->wsum_qt += qt;
	hc->wsum_ht += ht;
	hc->wpos = (hc->wpos + 1) % hc->attr.window;
}

/* The longest run of @hashes (at most @cap) in the table, into @blocks.
 * Call with hc->lock held. */
static size_t find_hits(kvs_hcache_t *hc, const kvs_block_hash_t *hashes, size_t cap,
			int32_t *blocks)
{
	return tbl_find_run(hc, hashes, cap, blocks);
}

/* Reference @n blocks (vLLM's touch()): one of refcount 0 leaves the free
 * queue.  Call with hc->lock held. */
static void touch(kvs_hcache_t *hc, const int32_t *blocks, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct hblock *b = &hc->b[blocks[i]];

		if (b->ref == 0) {
			hc_q_remove(hc, blocks[i]);
			hc->nused++;
			/* A hit: in use now, so compaction leaves it; it stays
			 * isolated (it cannot lose its hash), so that once freed
			 * again it cannot be evicted before the compaction ends. */
			hc->niso -= b->iso;
		}
		b->ref++;
	}
}

/**
 * kvs_hcache_lookup() - find and reference a request's longest run of cached
 * blocks.
 * @hc: cache.
 * @hashes: the request's full blocks' hashes, first block first.
 * @nhashes: entries of @hashes.
 * @ntokens: the request's tokens; at most (@ntokens - 1) / block size blocks
 *           are looked up, so that the last token is always computed.
 * @blocks: receives the hit blocks, at most min(@nhashes, cap) entries.
 *
 * Each hit block gains a reference; one of refcount 0 leaves the free queue.
 * The call counts as one request in the hit metrics.
 *
 * Context: MT-Safe; serialized with the other writers.
 * Return: the hit blocks, or -1 with errno EINVAL (NULL, a hash of length 0
 * or over 32 within the cap; nothing changed).
 */
KVS_EXPORT ssize_t kvs_hcache_lookup(kvs_hcache_t *hc, const kvs_block_hash_t *hashes,
				     size_t nhashes, size_t ntokens, int32_t *blocks)
{
	size_t cap, k;

	if (!hc || (nhashes && (!hashes || !blocks)))
		return kvs_fail(EINVAL);
	cap = lookup_cap(hc, nhashes, ntokens);
	if (!hashes_ok(hashes, cap) || cap > UINT32_MAX)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	k = find_hits(hc, hashes, cap, blocks);
	touch(hc, blocks, k);
	query_record(hc, (uint32_t)cap, (uint32_t)k, ntokens);
	pthread_mutex_unlock(&hc->lock);
	return (ssize_t)k;
}

/**
 * kvs_hcache_find() - the block cached under one hash, taking nothing
 * (vLLM's BlockPool.get_cached_block()).
 * @hc: cache.
 * @hash: the hash.
 *
 * Neither references the block nor counts in the metrics.
 *
 * Context: MT-Safe; serialized with the writers.
 * Return: the block, -1 with errno ENOENT when no block has @hash, or -1
 * with errno EINVAL (NULL, a hash of length 0 or over 32).
 */
KVS_EXPORT int32_t kvs_hcache_find(kvs_hcache_t *hc, const kvs_block_hash_t *hash)
{
	int32_t blk;

	if (!hc || !hash || !hash_ok(hash))
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	blk = tbl_probe(hc, hash, hc_hash_bucket(hash), true);
	pthread_mutex_unlock(&hc->lock);
	return blk >= 0 ? blk : kvs_fail(ENOENT);
}

/**
 * kvs_hcache_touch() - reference blocks found by hash (vLLM's
 * BlockPool.touch()).
 * @hc: cache.
 * @blocks: blocks that have a hash, or that the caller holds; a block may
 *          appear more than once (each time is a reference).
 * @n: entries.
 *
 * Each block gains a reference; one of refcount 0 leaves the free queue.
 * Unlike kvs_hcache_lookup() it is not a request: the metrics stay.
 *
 * Context: MT-Safe; serialized with the other writers.
 * Return: 0, or -1 with errno EINVAL (NULL, a block out of range, or one
 * that has no hash and is not held; nothing changed).
 */
KVS_EXPORT int kvs_hcache_touch(kvs_hcache_t *hc, const int32_t *blocks, size_t n)
{
	size_t i;

	if (!hc || (n && !blocks))
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	for (i = 0; i < n; i++)
		if (blocks[i] < 0 || (uint32_t)blocks[i] >= hc->nblocks ||
		    (!hc->b[blocks[i]].ent && !hc->b[blocks[i]].ref)) {
			pthread_mutex_unlock(&hc->lock);
			return kvs_fail(EINVAL);
		}
	touch(hc, blocks, n);
	pthread_mutex_unlock(&hc->lock);
	return 0;
}

/**
 * kvs_hcache_match_ro() - count a request's longest run of cached blocks
 * without taking any.
 * @hc: cache.
 * @hashes: the hashes, first block first.
 * @nhashes: entries of @hashes.
 * @ntokens: the request's tokens (the same cap as kvs_hcache_lookup()).
 *
 * Takes no lock: it reads the table inside an RCU read-side critical
 * section, beside writers.  The count is a snapshot; nothing is referenced
 * and the metrics are not touched.
 *
 * Context: MT-Safe, lock-free.
 * Return: the count, or -1 with errno EINVAL.
 */
KVS_EXPORT ssize_t kvs_hcache_match_ro(kvs_hcache_t *hc, const kvs_block_hash_t *hashes,
				       size_t nhashes, size_t ntokens)
{
	size_t cap, k;

	if (!hc || (nhashes && !hashes))
		return kvs_fail(EINVAL);
	cap = lookup_cap(hc, nhashes, ntokens);
	if (!hashes_ok(hashes, cap))
		return kvs_fail(EINVAL);
	rcu_read_lock();
	k = tbl_find_run(hc, hashes, cap, NULL);
	KVSI_TSAN_RELEASE(&hc_rcu_gp);
	rcu_read_unlock();
	return (ssize_t)k;
}

/* Allocate @n new blocks into @blocks, free pool pages first, then cached
 * free blocks evicted from the queue's head; @hits (@nhits blocks found by
 * find_hits()) are touched first, so that none of them is evicted, and
 * only when the whole allocation can be made.  All or nothing: on ENOMEM
 * the free queue, the refcounts and the pool are as they were.  Call with
 * hc->lock held. */
static int alloc_locked(kvs_hcache_t *hc, size_t n, int32_t *blocks, const int32_t *hits,
			size_t nhits)
{
	size_t got = 0, queued_hits = 0, i;
	uint64_t evictable;

	/* Hits of refcount 0 sit in the free queue but will not be evicted:
	 * count each once (a caller may name a block twice). */
	for (i = 0; i < nhits; i++) {
		struct hblock *b = &hc->b[hits[i]];

		if (b->ref == 0 && !b->mark && !b->iso) {
			b->mark = 1;
			queued_hits++;
		}
	}
	for (i = 0; i < nhits; i++)
		hc->b[hits[i]].mark = 0;
	evictable = hc->qlen - hc->niso - queued_hits;
	if (n > kvs_pool_available(hc->pool) / hc->ps + evictable)
		return kvs_fail(ENOMEM);
	while (got < n && kvs_pool_alloc(hc->pool, hc->ps, hc->scratch) == 0)
		blocks[got++] = hc->scratch[0] / (int32_t)hc->ps;
	if (n - got > evictable) {
		/* The pool shrank under us (another user): give back. */
		for (i = 0; i < got; i++)
			hc_page_free(hc, blocks[i]);
		return kvs_fail(ENOMEM);
	}
	touch(hc, hits, nhits);
	evict_batch(hc, n - got, blocks + got, true);
	for (i = 0; i < n; i++)
		hc->b[blocks[i]].ref = 1;
	hc->nused += n;
	return 0;
}

/**
 * kvs_hcache_alloc() - allocate @n new blocks.
 * @hc: cache.
 * @n: blocks.
 * @blocks: receives their ids (page numbers).
 *
 * Free pool pages are taken first; then cached free blocks are evicted from
 * the head of the free queue (their hashes leave the table, with a removed
 * event each).  Each block comes with refcount 1 and no hash.  All or
 * nothing.
 *
 * Context: MT-Safe; serialized with the other writers.
 * Return: 0, or -1 with errno EINVAL or ENOMEM (fewer free pages and cached
 * free blocks than @n; nothing changed).
 */
KVS_EXPORT int kvs_hcache_alloc(kvs_hcache_t *hc, size_t n, int32_t *blocks)
{
	int rc;

	if (!hc || (n && !blocks))
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	rc = alloc_locked(hc, n, blocks, NULL, 0);
	pthread_mutex_unlock(&hc->lock);
	return rc;
}

/**
 * kvs_hcache_admit() - look up a request's cached prefix and allocate the
 * rest of its blocks, all or nothing (vLLM's get_computed_blocks() followed
 * by allocate_slots()).
 * @hc: cache.
 * @hashes: the request's full blocks' hashes, first block first.
 * @nhashes: entries of @hashes.
 * @ntokens: the request's tokens (the lookup's cap, as kvs_hcache_lookup()).
 * @nblocks: the blocks the request needs in all, hits included.
 * @blocks: receives @nblocks ids: the hit blocks first, then the new ones.
 *
 * The hits are referenced, and the new blocks allocated as by
 * kvs_hcache_alloc(), only when all @nblocks - hits new blocks can be had
 * without evicting a hit; otherwise nothing is referenced, allocated or
 * evicted and the free queue keeps its order, as vLLM's does after a
 * failed admission.  The request counts in the hit metrics either way, as
 * vLLM counts it at lookup.
 *
 * Context: MT-Safe; serialized with the other writers.
 * Return: the hit blocks, or -1 with errno EINVAL (NULL, a bad hash within
 * the cap, @nblocks over INT32_MAX; nothing changed) or ENOMEM (too few free
 * pages and evictable blocks; only the metrics changed).
 */
KVS_EXPORT ssize_t kvs_hcache_admit(kvs_hcache_t *hc, const kvs_block_hash_t *hashes,
				    size_t nhashes, size_t ntokens, size_t nblocks,
				    int32_t *blocks)
{
	size_t cap, lim, k;
	int rc;

	if (!hc || (nhashes && !hashes) || (nblocks && !blocks) || nblocks > INT32_MAX)
		return kvs_fail(EINVAL);
	cap = lookup_cap(hc, nhashes, ntokens);
	if (!hashes_ok(hashes, cap) || cap > UINT32_MAX)
		return kvs_fail(EINVAL);
	lim = cap < nblocks ? cap : nblocks;
	pthread_mutex_lock(&hc->lock);
	k = find_hits(hc, hashes, lim, blocks);
	query_record(hc, (uint32_t)cap, (uint32_t)k, ntokens);
	rc = alloc_locked(hc, nblocks - k, blocks + k, blocks, k);
	pthread_mutex_unlock(&hc->lock);
	return rc < 0 ? -1 : (ssize_t)k;
}

/* Is @blk a block the caller may hold? */
static bool held(const kvs_hcache_t *hc, int32_t blk)
{
	return blk >= 0 && (uint32_t)blk < hc->nblocks && hc->b[blk].ref > 0;
}

/**
 * kvs_hcache_cache() - give full blocks their hashes.
 * @hc: cache.
 * @blocks: blocks the caller holds, with no hash yet, distinct.
 * @n: entries.
 * @hashes: their hashes, in the same order.
 * @parent: the hash of the block before @blocks[0] in the request, or NULL.
 * @extra_key: passed to the stored event (a LoRA id, say).
 * @tokens: the @n * block size token ids of the blocks, @blocks[0]'s first,
 *          for the stored event; or NULL (the event carries none).  Only
 *          the event reads them, during the call.
 *
 * Each block enters the table (beside any other block of the same hash);
 * one stored event names them all.  Never allocates: the entries come
 * from the cache's slab, after a grace period when every free one is
 * used (so it must not be called inside a liburcu-bp read-side section).
 *
 * Context: MT-Safe; serialized with the other writers.
 * Return: 0, or -1 with errno EINVAL (a block not held, already hashed or
 * repeated, a bad hash length; nothing changed).
 */
KVS_EXPORT int kvs_hcache_cache(kvs_hcache_t *hc, const int32_t *blocks, size_t n,
				const kvs_block_hash_t *hashes, const kvs_block_hash_t *parent,
				uint64_t extra_key, const int32_t *tokens)
{
	size_t i;
	int err = 0;

	if (!hc || (n && (!blocks || !hashes)) || (parent && !hash_ok(parent)) ||
	    !hashes_ok(hashes, n))
		return kvs_fail(EINVAL);
	if (n == 0)
		return 0;
	pthread_mutex_lock(&hc->lock);
	for (i = 0; i < n && !err; i++) {
		if (!held(hc, blocks[i]) || hc->b[blocks[i]].ent || hc->b[blocks[i]].mark)
			err = EINVAL;
		else
			hc->b[blocks[i]].mark = 1;
	}
	if (err) {
		while (i--)
			if (held(hc, blocks[i]))
				hc->b[blocks[i]].mark = 0;
	} else {
		/* Never more entries in the table than pages: one for each
		 * is there, free or after a grace period (ent_get()).  A
		 * round of HC_BATCH at a time: the entries, home lines and
		 * records are prefetched, then filled and published. */
		for (i = 0; i < n; i += HC_BATCH) {
			size_t m = n - i < HC_BATCH ? n - i : HC_BATCH, j;
			int32_t ev[HC_BATCH];
			uint64_t hv[HC_BATCH];

			for (j = 0; j < m; j++) {
				ev[j] = ent_get(hc);
				hv[j] = hc_hash_bucket(&hashes[i + j]);
				__builtin_prefetch(&hc->ent[ev[j]], 1);
				__builtin_prefetch(&hc->tbl[hc_home(hc, hv[j])], 1);
				__builtin_prefetch(&hc->b[blocks[i + j]], 1);
			}
			for (j = 0; j < m; j++) {
				hc->b[blocks[i + j]].mark = 0;
				tbl_insert(hc, ev[j], &hashes[i + j], hv[j], blocks[i + j]);
			}
		}
		hc->ncached += n;
		hc_emit(hc, KVS_KV_STORED, hashes, n, parent, extra_key, tokens);
	}
	pthread_mutex_unlock(&hc->lock);
	return err ? kvs_fail(err) : 0;
}

/**
 * kvs_hcache_free() - drop one reference to each of @blocks.
 * @hc: cache.
 * @blocks: blocks the caller holds; a block may appear as often as it has
 *          references.  Pass a request's blocks last first.
 * @n: entries.
 *
 * A block whose refcount reaches 0 goes to the tail of the free queue, in
 * the order of @blocks, when it has a hash, and back to the pool when it
 * has none.  Never allocates.
 *
 * Context: MT-Safe; serialized with the other writers.
 * Return: 0, or -1 with errno EINVAL (a block not held, or named more often
 * than its refcount; nothing changed).
 */
KVS_EXPORT int kvs_hcache_free(kvs_hcache_t *hc, const int32_t *blocks, size_t n)
{
	size_t i;
	int err = 0;

	if (!hc || (n && !blocks))
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	for (i = 0; i < n && !err; i++) {
		if (!held(hc, blocks[i]) || hc->b[blocks[i]].mark >= hc->b[blocks[i]].ref)
			err = EINVAL;
		else
			hc->b[blocks[i]].mark++;
	}
	if (err) {
		while (i--)
			if (blocks[i] >= 0 && (uint32_t)blocks[i] < hc->nblocks)
				hc->b[blocks[i]].mark = 0;
	} else {
		/* The marks are cleared on the way (each valid). */
		for (i = 0; i < n; i++) {
			struct hblock *b = &hc->b[blocks[i]];

			b->mark = 0;
			if (--b->ref)
				continue;
			hc->nused--;
			if (b->ent) {
				q_push_tail(hc, blocks[i]);
				hc->niso += b->iso;
			} else {
				hc_page_free(hc, blocks[i]);
			}
		}
	}
	pthread_mutex_unlock(&hc->lock);
	return err ? kvs_fail(err) : 0;
}

/**
 * kvs_hcache_evict() - give up to @n cached free blocks back to the pool.
 * @hc: cache.
 * @n: blocks.
 *
 * From the head of the free queue, with a removed event each: for another
 * user of the same pool that needs pages.  Any @n: SIZE_MAX evicts every
 * cached free block.
 *
 * Context: MT-Safe; serialized with the other writers.
 * Return: the blocks evicted, or -1 with errno EINVAL (@hc NULL).
 */
KVS_EXPORT ssize_t kvs_hcache_evict(kvs_hcache_t *hc, size_t n)
{
	size_t k = 0, m;
	int32_t v[HC_BATCH];

	if (!hc)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	/* Any @n: the queue never holds more than INT32_MAX blocks. */
	while (k < n && hc->qlen > hc->niso) {
		m = n - k < HC_BATCH ? n - k : HC_BATCH;
		if (m > hc->qlen - hc->niso)
			m = (size_t)(hc->qlen - hc->niso);
		evict_batch(hc, m, v, true);
		for (size_t j = 0; j < m; j++)
			hc_page_free(hc, v[j]);
		k += m;
	}
	pthread_mutex_unlock(&hc->lock);
	return (ssize_t)k;
}

/**
 * kvs_hcache_reset() - forget every cached block.
 * @hc: cache.
 *
 * vLLM's reset_prefix_cache(): refused while any block is referenced; else
 * every cached free block's page goes back to the pool, the table empties,
 * the hit-ratio window restarts, and one all-cleared event is sent.
 *
 * Context: MT-Safe; serialized with the other writers.
 * Return: 0, or -1 with errno EINVAL or EBUSY (blocks in use, or isolated
 * by kvs_pool_compact(); nothing changed).
 */
KVS_EXPORT int kvs_hcache_reset(kvs_hcache_t *hc)
{
	if (!hc)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	if (hc->nused || hc->niso) {
		pthread_mutex_unlock(&hc->lock);
		return kvs_fail(EBUSY);
	}
	drop_all(hc);
	hc->wpos = hc->wfill = 0;
	hc->wsum_q = hc->wsum_h = hc->wsum_qt = hc->wsum_ht = 0;
	hc_emit(hc, KVS_KV_ALL_CLEARED, NULL, 0, NULL, 0, NULL);
	pthread_mutex_unlock(&hc->lock);
	return 0;
}
