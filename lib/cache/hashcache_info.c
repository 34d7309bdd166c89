/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hashcache_info.c - what the hashed block cache tells about
 * itself: its statistics (kvs_hcache_stats() and the accessors lib/stats.c
 * makes), the free queue, one block, and the check of its invariants
 * (kvs_hcache_validate()); and the events it sends (hc_emit()).  The
 * design is in lib/cache/hashcache.c's essay.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "cache/hashcache_int.h"

/* The low 64 bits of the hash read as a big-endian integer, as vLLM's
 * maybe_convert_block_hash() gives them. */
static uint64_t hash_low64(const kvs_block_hash_t *h)
{
	uint32_t i = h->len > 8 ? h->len - 8 : 0;
	uint64_t x = 0;

	for (; i < h->len; i++)
		x = (x << 8) | h->bytes[i];
	return x;
}

/* hashcache_int.h; @tokens is the caller's array, valid for the callbacks'
 * duration. */
void hc_emit(kvs_hcache_t *hc, int type, const kvs_block_hash_t *h, size_t n,
	     const kvs_block_hash_t *parent, uint64_t extra, const int32_t *tokens)
{
	bool stored = type == KVS_KV_STORED;

	if (hc->attr.event_cb) {
		kvs_hcache_event_t ev = {
			.type = type, .hashes = h, .nhashes = n, .parent = parent,
			.tokens = stored ? (uint32_t)(n * hc->ps) : 0,
			.block_size = hc->ps, .extra_key = stored ? extra : 0,
			.token_ids = stored ? tokens : NULL,
		};
		hc->attr.event_cb(hc->attr.event_arg, &ev);
	}
	if (hc->attr.kv_event_cb) {
		kvs_kv_event_t ev = { .type = type };
		size_t i;

		if (type == KVS_KV_ALL_CLEARED) {
			hc->attr.kv_event_cb(hc->attr.kv_event_arg, &ev);
			return;
		}
		for (i = 0; i < n; i++) {
			const kvs_block_hash_t *p = i ? &h[i - 1] : parent;

			ev.hash = hash_low64(&h[i]);
			ev.parent_hash = stored && p ? hash_low64(p) : 0;
			ev.tokens = hc->ps;
			ev.extra_key = stored ? extra : 0;
			ev.token_ids = stored && tokens ? tokens + i * hc->ps : NULL;
			hc->attr.kv_event_cb(hc->attr.kv_event_arg, &ev);
		}
	}
}

/* Each statistic of KVS_HCACHE_STATS and the cache's field that holds it. */
#define HC_STAT_FIELDS(X)                                                          \
	X(queries, queries) X(query_blocks, query_blocks) X(hit_blocks, hit_blocks)  \
	X(window_queries, wfill) X(window_query_blocks, wsum_q)                      \
	X(window_hit_blocks, wsum_h) X(query_tokens, query_tokens)                   \
	X(hit_tokens, hit_tokens) X(window_query_tokens, wsum_qt)                    \
	X(window_hit_tokens, wsum_ht) X(cached_blocks, ncached)                      \
	X(free_queue_blocks, qlen) X(used_blocks, nused) X(evictions, nevict)

/**
 * kvs_hcache_stats() - hit metrics and block counts.
 * @hc: cache.
 * @st: receives them.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hcache_stats(kvs_hcache_t *hc, kvs_hcache_stats_t *st)
{
	if (!hc || !st)
		return kvs_fail(EINVAL);
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&hc->lock);
#define HC_SET(n, e) st->n = hc->e;
	HC_STAT_FIELDS(HC_SET)
#undef HC_SET
	st->window_hit_ratio = hc->wsum_q ? (double)hc->wsum_h / (double)hc->wsum_q : 0.0;
	pthread_mutex_unlock(&hc->lock);
	return 0;
}

/* kvs_hcache_stats()'s snapshot, field by field. */
static void hcache_fill(void *obj, uint64_t *v)
{
	kvs_hcache_stats_t st;

	kvs_hcache_stats(obj, &st);
#define HC_GET(n, k, d) v[KVS_HCACHE_STAT_##n] = st.n;
	KVS_HCACHE_STATS(HC_GET)
#undef HC_GET
}

static void hcache_header(void *obj, char *line, size_t size)
{
	const struct kvs_hcache *hc = obj;

	snprintf(line, size, "hcache block_size %u blocks %u window %u\n", hc->ps, hc->nblocks,
		 hc->attr.window);
}

/* The metrics' one value that is not in the list. */
static const struct kvsi_stat_ratio hcache_ratio = {
	.name = "window_hit_ratio",
	.desc = "window_hit_blocks / window_query_blocks, 0 if none",
	.after = KVS_HCACHE_STAT_window_hit_blocks,
	.num = KVS_HCACHE_STAT_window_hit_blocks,
	.den = KVS_HCACHE_STAT_window_query_blocks,
};

/**
 * kvs_hcache_stat() - one statistic of kvs_hcache_stats(), by its
 * KVS_HCACHE_STATS item; kvs_hcache_stat_get() reads one by name,
 * kvs_hcache_stat_name() names one, kvs_hcache_stats_print() prints every
 * one through a callback (a header line, then "name value  kind #
 * description" lines), all through lib/stats.c.
 * @hc: cache.
 * @item: statistic.
 *
 * Context: MT-Safe (takes hc->lock to read, not while calling write_cb).
 * Return: kvs_hcache_stat(): its value, 0 for NULL or an unknown item;
 * kvs_hcache_stat_name(): a static string, NULL for an unknown item; the
 * others: 0, or -1 with errno EINVAL (a NULL argument) or ENOENT (no such
 * statistic).
 */
KVSI_STATS_FAMILY(hcache, KVS_HCACHE_STATS, hcache_fill, hcache_header, &kvsi_style_kind, &hcache_ratio, kvs_hcache_t,
		  enum kvs_hcache_stat);

/**
 * kvs_hcache_free_queue() - the free queue, next eviction first.
 * @hc: cache.
 * @blocks: receives up to @max block ids.
 * @max: room in @blocks.
 *
 * Context: MT-Safe.
 * Return: the queue's length (which may exceed @max), or -1 with errno
 * EINVAL.
 */
KVS_EXPORT ssize_t kvs_hcache_free_queue(kvs_hcache_t *hc, int32_t *blocks, size_t max)
{
	size_t k = 0;
	int32_t i;
	ssize_t len;

	if (!hc || (max && !blocks))
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	for (i = hc->qhead; i >= 0 && k < max; i = hc->b[i].next)
		blocks[k++] = i;
	len = (ssize_t)hc->qlen;
	pthread_mutex_unlock(&hc->lock);
	return len;
}

/**
 * kvs_hcache_block() - a block's refcount and hash.
 * @hc: cache.
 * @block: block id.
 * @ref: receives the refcount, or NULL.
 * @hash: receives the hash when it has one, or NULL.
 *
 * Context: MT-Safe.
 * Return: 1 when the block has a hash, 0 when not, or -1 with errno EINVAL
 * (out of range).
 */
KVS_EXPORT int kvs_hcache_block(kvs_hcache_t *hc, int32_t block, uint32_t *ref,
				kvs_block_hash_t *hash)
{
	int has;

	if (!hc || block < 0 || (uint32_t)block >= hc->nblocks)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	if (ref)
		*ref = hc->b[block].ref;
	has = hc->b[block].ent != 0;
	if (has && hash)
		hc_block_hash(hc, block, hash);
	pthread_mutex_unlock(&hc->lock);
	return has;
}

/**
 * kvs_hcache_block_size() - tokens per block (the pool's page size).
 * @hc: cache.
 *
 * Context: MT-Safe.
 * Return: the block size; 0 for NULL.
 */
KVS_EXPORT uint32_t kvs_hcache_block_size(const kvs_hcache_t *hc)
{
	return hc ? hc->ps : 0;
}

/**
 * kvs_hcache_validate() - check the cache's invariants.
 * @hc: cache.
 *
 * The free queue links both ways, holds exactly the hashed blocks of
 * refcount 0, and its length is counted right; every table slot in use
 * names an entry holding the hash of the block beside it, whose record
 * names the slot, the entry and the slot's distance from the hash's home
 * line, under the hash's tag; every line's count of the entries past it
 * is right; the free and retired entries and the table's account for the
 * whole slab; the counts of cached and used blocks are right.
 *
 * Context: MT-Safe (it takes the writer lock).
 * Return: 0, or -1 with errno EINVAL (@hc NULL) or EUCLEAN (broken).
 */
KVS_EXPORT int kvs_hcache_validate(kvs_hcache_t *hc)
{
	uint64_t n = 0, used = 0, ents = 0, inq = 0, iso = 0, dmax = 0;
	int32_t i, prev = -1;
	int bad = 0;

	if (!hc)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&hc->lock);
	for (i = hc->qhead; i >= 0 && n <= hc->nblocks; i = hc->b[i].next, n++) {
		struct hblock *b = &hc->b[i];

		if (b->prev != prev || !b->inq || b->ref || !b->ent)
			bad = 1;
		prev = i;
	}
	if (n != hc->qlen || hc->qtail != prev)
		bad = 1;
	for (uint32_t j = 0; j < hc->nblocks; j++) {
		struct hblock *b = &hc->b[j];

		used += b->ref > 0;
		inq += b->inq;
		iso += b->iso && b->inq;
		if (b->mark || (b->inq && b->ref) || (!b->inq && !b->ref && b->ent) || (b->iso && !b->ent) ||
		    b->ent > hc->efresh ||
		    (b->ent && (b->slot / HC_WAYS > hc->lmask ||
				hc->tbl[b->slot / HC_WAYS].blk[b->slot % HC_WAYS] != (int32_t)j)))
			bad = 1;
		if (b->ent) {
			uint64_t d = (b->slot / HC_WAYS - (hc_hash_bytes(b->hash, b->hlen) & hc->lmask)) &
				     hc->lmask;

			dmax = d > dmax ? d : dmax;
		}
	}
	/* The slots: each names its block and entry both ways; the records
	 * of hashed blocks were checked above to be as many as the slots. */
	for (uint64_t l = 0; l <= hc->lmask && !bad; l++) {
		for (int w = 0; w < HC_WAYS && !bad; w++) {
			uint64_t te = atomic_load_explicit(&hc->tbl[l].te[w], memory_order_relaxed), hv, home;
			int32_t blk = hc->tbl[l].blk[w];
			uint32_t e = (uint32_t)te - 1;
			struct hblock *b;

			if (!te)
				continue;
			if (e >= hc->efresh || blk < 0 || (uint32_t)blk >= hc->nblocks || ++ents > hc->nblocks) {
				bad = 1;
				break;
			}
			b = &hc->b[blk];
			hv = hc_hash_bytes(b->hash, b->hlen);
			home = hv & hc->lmask;
			if (b->ent != e + 1 || b->slot != l * HC_WAYS + (uint64_t)w || b->hlen < 1 ||
			    b->hlen > 32 || (uint32_t)(te >> 32) != hc_tag(hv, b->hlen) ||
			    b->disp != (((l - home) & hc->lmask) < 255 ? ((l - home) & hc->lmask) : 255) ||
			    memcmp(b->hash, hc->ent[e].bytes, b->hlen) != 0)
				bad = 1;
		}
	}
	/* Each line's over: the entries placed past it whose probe began at
	 * or before it (none is placed farther than dmax lines from home). */
	for (uint64_t l = 0; l <= hc->lmask && !bad; l++) {
		uint32_t want = 0;

		for (uint64_t d = 1; d <= dmax; d++) {
			const struct hline *L = &hc->tbl[(l + d) & hc->lmask];

			for (int w = 0; w < HC_WAYS; w++) {
				uint64_t te = atomic_load_explicit(&L->te[w], memory_order_relaxed);

				/* Probed from home h: passed l when l is
				 * within [h, its line). */
				if (te && ((((l + d) - hc_hash_bytes(hc->ent[(uint32_t)te - 1].bytes,
								     (uint32_t)(te >> 32) % 32 + 1)) &
					    hc->lmask) >= d))
					want++;
			}
		}
		if (atomic_load_explicit(&hc->tbl[l].over, memory_order_relaxed) != want)
			bad = 1;
	}
	/* The free and retired stacks: in range, the slab whole. */
	if (hc->nfree + hc->nretired + ents != hc->efresh || hc->efresh > hc->nent)
		bad = 1;
	for (uint32_t j = 0; j < hc->nfree + hc->nretired && !bad; j++) {
		int32_t e = hc->estk[j < hc->nfree ? j : hc->nent - 1 - (j - hc->nfree)];

		if (e < 0 || (uint32_t)e >= hc->efresh)
			bad = 1;
	}
	if (used != hc->nused || inq != hc->qlen || ents != hc->ncached || iso != hc->niso)
		bad = 1;
	pthread_mutex_unlock(&hc->lock);
	return bad ? kvs_fail(EUCLEAN) : 0;
}
