/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/kvevent.c - chained page hashes and KV events (stored / removed /
 * all cleared), as SGLang's and vLLM's caches publish them.
 *
 * What it owns.  The hash of a cached page chains over the prefix: a page's
 * hash is the hash of its tokens seeded with the hash of the page before it
 * (the first page of a prefix is seeded from the request's extra key), so
 * one hash names a whole prefix and a router can rebuild a cache's contents
 * from its events alone.  kvev_chain() walks a run of pages, computing the
 * chain and, when asked, emitting one event per page; kvev_all_cleared()
 * emits the event of a reset.  The page hash itself is inline in
 * lib/cache/kvevent.h, for the caches' lookups.
 *
 * Locking.  None of its own.  The cache calls it under its writer lock
 * (radix->wlock), outside the section readers check against, so an event
 * callback may call the cache's lock-free readers (kvs_radix_match_ro())
 * but no writer call.
 */
#include "cache/kvevent.h"

/* Chained hashes of the pages keys[from, to) after a page that hashed to
 * @h (0: the prefix starts here); emits one event of @type per page when
 * @type is set and the sink has a callback.  A stored event points at the
 * page's keys, its token ids, which are valid for the callback's duration
 * (the caller's key or a node's).  Returns the last hash. */
uint64_t kvev_chain(const struct kvev_sink *sink, uint64_t h, uint64_t extra,
		    const int32_t *keys, uint32_t from, uint32_t to, int type)
{
	uint32_t i;

	for (i = from; i < to; i += sink->ps) {
		uint64_t nh = kvev_hash_page(h ? h : kvev_mix64(extra + 1), keys + i, sink->ps);

		if (type && sink->cb) {
			kvs_kv_event_t ev = {.type = type,
					     .hash = nh,
					     .parent_hash = h,
					     .tokens = sink->ps,
					     .extra_key = extra,
					     .token_ids = type == KVS_KV_STORED ? keys + i : NULL,
					     .medium = sink->medium};

			sink->cb(sink->arg, &ev);
		}
		h = nh;
	}
	return h;
}

/* Everything the cache held is gone. */
void kvev_all_cleared(const struct kvev_sink *sink)
{
	kvs_kv_event_t ev = {.type = KVS_KV_ALL_CLEARED};

	if (sink->cb)
		sink->cb(sink->arg, &ev);
}
