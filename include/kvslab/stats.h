/* SPDX-License-Identifier: MIT */
/*
 * kvslab/stats.h - the statistics of kvslab: every family's list, and what
 * every family declares alike.
 *
 * Each kind of object (driver, slab, radix cache, hashed cache, host pool,
 * tiered cache, store) defines its statistics once, in an X-macro list
 * below: KVS_RADIX_STATS(X) and the others, one
 * X(name, kind, description) per statistic, kind counter or gauge.  Its
 * header (kvslab/radix.h ...) includes this one and declares with
 * KVS_STATS_DECLARE(), from that list, for family F (radix) of
 * objects of type T (kvs_radix_t), with ITEM a macro that makes an enum
 * constant of one entry (KVS_RADIX_STAT_name) and COUNT the constant that
 * ends the enum (KVS_RADIX_STAT__COUNT):
 *
 *	enum kvs_F_stat { one ITEM per statistic, COUNT };
 *	uint64_t kvs_F_stat(T *obj, enum kvs_F_stat item);
 *	int kvs_F_stat_get(T *obj, const char *name, uint64_t *value);
 *	const char *kvs_F_stat_name(enum kvs_F_stat item);
 *	int kvs_F_stats_print(T *obj, void (*write_cb)(void *arg, const char *line),
 *			      void *arg);
 *
 * Each family's page (kvs_radix_stat(3) and the others) describes them.
 */
#ifndef KVSLAB_STATS_H
#define KVSLAB_STATS_H

#include <stdint.h>

/*
 * The lists, one a family, each used by its header's KVS_STATS_DECLARE()
 * line.  A statistic is added here, to its family's list, and nowhere
 * else: its enum constant, its name, its place in the print and in the
 * metrics (kvs_metrics_write(3)) follow.
 */

/* ---- <kvslab/drv.h> */

/*
 * Counters, defined once.  X(name, kind, description); kind is gauge (a
 * level now) or counter (events since kvs_drv_open()); the name says the
 * unit (calls, bytes, ns).  Read with kvs_drv_stat() or kvs_drv_stat_get().
 */
#define KVS_DRV_STATS(X)                                                      \
	X(reserve_calls, counter, "kvs_drv_reserve calls")                                     \
	X(unreserve_calls, counter, "kvs_drv_unreserve calls")                                 \
	X(create_calls, counter, "kvs_drv_chunk_create calls")                                 \
	X(release_calls, counter, "kvs_drv_chunk_release calls")                               \
	X(map_calls, counter, "kvs_drv_map calls")                                             \
	X(unmap_calls, counter, "kvs_drv_unmap calls")                                         \
	X(set_access_calls, counter, "kvs_drv_set_access calls")                               \
	X(copy_calls, counter, "copies submitted (each entry of a batch counts)")               \
	X(batch_calls, counter, "kvs_drv_copy_batch calls")                                    \
	X(host_alloc_calls, counter, "kvs_drv_host_alloc calls")                               \
	X(failed_calls, counter, "calls that returned -1")                                     \
	X(bytes_reserved, gauge, "virtual bytes reserved now")                                 \
	X(bytes_created, gauge, "physical bytes held by live chunks now")                      \
	X(bytes_created_peak, gauge, "peak of bytes_created")                                  \
	X(bytes_mapped, gauge, "bytes mapped now")                                             \
	X(bytes_mapped_peak, gauge, "peak of bytes_mapped")                                    \
	X(bytes_copied, counter, "bytes submitted for copy")                                   \
	X(bytes_host, gauge, "pinned host bytes allocated now")                                \
	X(chunks, gauge, "live chunks now")                                                    \
	X(ns_in_calls, counter, "wall time spent inside backend calls")
/* Its enum constants, KVS_DRV_STAT_name. */
#define KVS_DRV_STAT_ITEM(n, k, d) KVS_DRV_STAT_##n,

/* ---- <kvslab/slab.h> */

/*
 * Statistics, defined once, named after /sys/kernel/slab/<cache>/ where one
 * exists.  X(name, kind, description); kind is gauge (a level now) or
 * counter (events since kvs_slab_create()).
 */
#define KVS_SLAB_STATS(X)                                                               \
	X(objects, gauge, "pages held (refcount > 0)")                                         \
	X(objects_free, gauge, "free pages in mapped slabs, per-thread caches included") \
	X(cpu_cached, gauge, "free pages sitting in per-thread caches")                        \
	X(objs_per_slab, gauge, "pages per slab")                                              \
	X(total_objects, gauge, "pages in mapped slabs")                                       \
	X(slabs_full, gauge, "mapped slabs with no free page")                                 \
	X(slabs_partial, gauge, "mapped slabs with some pages free")                           \
	X(slabs_empty, gauge, "mapped slabs with every page free")                             \
	X(slabs_unmapped, gauge, "slabs with no memory behind them")                           \
	X(bytes_mapped, gauge, "bytes mapped now, all buffers")                                \
	X(bytes_mapped_peak, gauge, "peak of bytes_mapped")                                    \
	X(bytes_live, gauge, "bytes of held pages, all buffers")                               \
	X(bytes_pooled, gauge, "bytes created but unmapped, kept in the chunk pool")           \
	X(alloc_fast, counter, "pages allocated from a per-thread cache")                      \
	X(alloc_slow, counter, "pages allocated under the allocator lock")                     \
	X(free_fast, counter, "pages freed into a per-thread cache")                           \
	X(free_slow, counter, "pages freed under the allocator lock")                          \
	X(alloc_fail, counter, "allocations that failed")                                      \
	X(slab_maps, counter, "slabs mapped")                                                  \
	X(slab_unmaps, counter, "slabs unmapped")                                              \
	X(map_fail, counter, "slab maps that failed and were undone")                          \
	X(drv_calls, counter, "driver calls made by the allocator")                            \
	X(drv_calls_caller, counter, "driver calls made on a caller's thread (not the worker)") \
	X(drv_creates_caller, counter, "chunk creations on a caller's thread")                 \
	X(drv_ns, counter, "time spent in driver calls")                                       \
	X(alloc_waits, counter, "allocations that waited for a slab being mapped")             \
	X(fences, counter, "fences recorded before unmapping emptied slabs")                   \
	X(fence_fail, counter, "fence records or queries that failed")                         \
	X(decay_unmaps, counter, "slabs unmapped because they stayed empty for decay_ms") \
	X(slabs_broken, gauge, "slabs parked after a failed unmap, to unmap again")            \
	X(chunks_parked, gauge, "chunks whose release failed, to release again")               \
	X(release_fail, counter, "chunk releases and unmaps that failed and were retried")
/* Its enum constants, KVS_SLAB_STAT_name. */
#define KVS_SLAB_STAT_ITEM(n, k, d) KVS_SLAB_STAT_##n,

/* ---- <kvslab/radix.h> */

/*
 * Statistics, defined once; all are event counts since kvs_radix_create()
 * but evict_section_max_ns and evict_section_cpu_max_ns, peaks since then.  X(name, kind,
 * description); kind is counter, or gauge for the peak.
 */
#define KVS_RADIX_STATS(X)                                                             \
	X(matches, counter, "kvs_radix_match() and kvs_radix_match_lock() calls")              \
	X(match_ro, counter, "kvs_radix_match_ro() calls")                                     \
	X(hit_tokens, counter, "tokens found by kvs_radix_match() and kvs_radix_match_lock()") \
	X(inserts, counter, "kvs_radix_insert() and kvs_radix_insert_lock() calls that succeeded") \
	X(inserted_tokens, counter, "tokens the tree took over from inserts")                  \
	X(splits, counter, "nodes split by a match or an insert")                              \
	X(evictions, counter, "nodes evicted")                                                 \
	X(evicted_tokens, counter, "tokens evicted")                                           \
	X(reader_retries, counter, "lock-free reads started over because the tree changed") \
	X(reader_fallbacks, counter, "lock-free reads that gave up and read under the writer lock") \
	X(resets, counter, "kvs_radix_reset() calls that emptied the tree")              \
	X(query_tokens, counter, "tokens asked of kvs_radix_match() and kvs_radix_match_lock()") \
	X(evict_sections, counter, "write sections kvs_radix_evict() held the writer lock for")   \
	X(evict_section_ns, counter, "time kvs_radix_evict() held the writer lock, in all")        \
	X(evict_section_max_ns, gauge, "longest write section of kvs_radix_evict()")       \
	X(evict_section_cpu_max_ns, gauge, "most CPU time one write section of kvs_radix_evict() took")
/* Its enum constants, KVS_RADIX_STAT_name. */
#define KVS_RADIX_STAT_ITEM(n, k, d) KVS_RADIX_STAT_##n,

/* ---- <kvslab/hashcache.h> */

/*
 * The same statistics one by one, defined once (the fields of
 * kvs_hcache_stats_t of the same names; window_hit_ratio, a double, is
 * not in the list).  X(name, kind, description).
 */
#define KVS_HCACHE_STATS(X)                                                           \
	X(queries, counter, "requests looked up (lookup and admit calls)")            \
	X(query_blocks, counter, "blocks those lookups could have hit")               \
	X(hit_blocks, counter, "blocks those lookups hit")                            \
	X(window_queries, gauge, "lookups over the last window requests")             \
	X(window_query_blocks, gauge, "blocks they could have hit")                   \
	X(window_hit_blocks, gauge, "blocks they hit")                                \
	X(cached_blocks, gauge, "blocks with a hash (table entries)")                 \
	X(free_queue_blocks, gauge, "cached blocks of refcount 0")                    \
	X(used_blocks, gauge, "blocks of refcount > 0")                               \
	X(evictions, counter, "cached blocks evicted")                                \
	X(query_tokens, counter, "the requests' tokens (vLLM's prefix-cache queries)") \
	X(hit_tokens, counter, "their hit blocks' tokens (vLLM's prefix-cache hits)") \
	X(window_query_tokens, gauge, "query_tokens over the last window requests")   \
	X(window_hit_tokens, gauge, "hit_tokens over the last window requests")
/* Its enum constants, KVS_HCACHE_STAT_name. */
#define KVS_HCACHE_STAT_ITEM(n, k, d) KVS_HCACHE_STAT_##n,

/* ---- <kvslab/hostpool.h> */

/*
 * Statistics, defined once.  X(name, kind, description); kind is gauge (a
 * level now) or counter (events since kvs_hpool_create()).
 */
#define KVS_HPOOL_STATS(X)                                                                \
	X(pages, gauge, "host pages in the pool")                                        \
	X(pages_used, gauge, "host pages allocated now")                                 \
	X(pages_used_peak, gauge, "peak of pages_used")                                  \
	X(pages_busy, gauge, "allocated pages that a transfer not yet complete copies")  \
	X(xfers_live, gauge, "transfer handles not yet freed")                           \
	X(allocs, counter, "kvs_hpool_alloc() calls that allocated")                     \
	X(alloc_fail, counter, "kvs_hpool_alloc() calls that failed for want of pages")  \
	X(frees, counter, "kvs_hpool_free() calls that freed")                           \
	X(backups, counter, "kvs_hpool_backup() calls whose copies were all submitted")  \
	X(loads, counter, "kvs_hpool_load() calls whose copies were all submitted")      \
	X(backup_pages, counter, "pages those backups copied, device to host")           \
	X(load_pages, counter, "pages those loads copied, host to device")               \
	X(copies, counter, "driver copies submitted, after merging runs of pages")       \
	X(bytes_copied, counter, "bytes of those copies")                                \
	X(submit_fail, counter, "transfers undone because a copy could not be submitted") \
	X(xfer_fail, counter, "transfers whose completion reported an error")           \
	X(backup_bytes, counter, "bytes of the backups' copies, device to host")         \
	X(load_bytes, counter, "bytes of the loads' copies, host to device")
/* Its enum constants, KVS_HPOOL_STAT_name. */
#define KVS_HPOOL_STAT_ITEM(n, k, d) KVS_HPOOL_STAT_##n,

/* ---- <kvslab/hiradix.h> */

/*
 * Statistics, defined once.  X(name, kind, description); kind is gauge (a
 * level now) or counter (events since kvs_hiradix_create()).
 */
#define KVS_HIRADIX_STATS(X)                                                               \
	X(nodes, gauge, "nodes, the root not counted")                                     \
	X(device_tokens, gauge, "tokens on the device")                                    \
	X(host_tokens, gauge, "tokens with host pages, valid or in flight")                \
	X(tombstone_tokens, gauge, "tokens on the host only")                              \
	X(backups_pending, gauge, "backups in flight")                                     \
	X(loads_pending, gauge, "loads back in flight")                                    \
	X(matches, counter, "kvs_hiradix_match() calls that succeeded")                    \
	X(match_device_tokens, counter, "device tokens those matches found")               \
	X(match_host_tokens, counter, "host-only tokens those matches found")              \
	X(inserts, counter, "kvs_hiradix_insert() calls that succeeded")                   \
	X(remat_tokens, counter, "tombstone tokens inserts made device-resident again")    \
	X(backups, counter, "node backups submitted")                                      \
	X(backup_tokens, counter, "tokens those backups copy")                             \
	X(backup_fail, counter, "backups not submitted (no host pages, copy refused)")     \
	X(backup_lost, counter, "host copies dropped: their transfer or a parent's failed") \
	X(evict_device_tokens, counter, "device tokens freed by device eviction")          \
	X(tombstoned, counter, "nodes device eviction made tombstones")                    \
	X(deleted, counter, "nodes device eviction deleted")                               \
	X(evict_host_tokens, counter, "host tokens freed by host eviction")                \
	X(load_backs, counter, "loads back submitted")                                     \
	X(load_tokens, counter, "tokens those loads copy")                                 \
	X(load_skipped, counter, "loads back skipped: below the threshold or over quota")  \
	X(load_fail, counter, "loads back whose completion reported an error")            \
	X(write_batches, counter, "backup transfers started (merged backups)")             \
	X(load_batches, counter, "load transfers started (merged loads back)")             \
	X(l3_backup_pages, counter, "pages the store took from host copies")               \
	X(l3_backup_fail, counter, "host copies not backed up to the store")               \
	X(prefetches, counter, "prefetches started")                                       \
	X(prefetch_skipped, counter, "prefetches skipped: below the threshold or no room") \
	X(prefetch_tokens, counter, "tokens prefetches put on the host")                  \
	X(prefetch_revoked, counter, "prefetches revoked")                                 \
	X(query_tokens, counter, "tokens asked of the matches that succeeded")
/* Its enum constants, KVS_HIRADIX_STAT_name. */
#define KVS_HIRADIX_STAT_ITEM(n, k, d) KVS_HIRADIX_STAT_##n,

/* ---- <kvslab/storage.h> */

/*
 * Statistics, defined once.  X(name, kind, description); every counter
 * counts pages (or bytes) since kvs_store_open().
 */
#define KVS_STORE_STATS(X)                                                                  \
	X(exists_calls, counter, "kvs_store_exists() calls")                                \
	X(exists_hits, counter, "pages exists found present (the prefix counted)")          \
	X(get_pages, counter, "pages asked of get")                                          \
	X(get_hits, counter, "pages get returned")                                           \
	X(get_misses, counter, "pages get did not return: absent, bad or failed")           \
	X(set_pages, counter, "pages given to set")                                          \
	X(set_stored, counter, "pages set wrote")                                            \
	X(set_skipped, counter, "pages set did not write: already present")                 \
	X(bytes_read, counter, "value bytes read")                                           \
	X(bytes_written, counter, "value bytes written")                                     \
	X(checksum_fail, counter, "values whose header or checksum did not verify (removed)") \
	X(io_errors, counter, "operations that failed: I/O, connection, server, full disk")  \
	X(reconnects, counter, "redis: connections made again after a failure")              \
	X(evicted, counter, "file: objects removed by the size limit")                       \
	X(bytes_stored, gauge, "file: bytes of the objects in the directory")
/* Its enum constants, KVS_STORE_STAT_name. */
#define KVS_STORE_STAT_ITEM(n, k, d) KVS_STORE_STAT_##n,

#define KVS_STATS_DECLARE(F, T, LIST, ITEM, COUNT)                                      \
	enum kvs_##F##_stat { LIST(ITEM) COUNT };                                       \
	uint64_t kvs_##F##_stat(T *obj, enum kvs_##F##_stat item);                      \
	int kvs_##F##_stat_get(T *obj, const char *name, uint64_t *value);              \
	const char *kvs_##F##_stat_name(enum kvs_##F##_stat item);                      \
	int kvs_##F##_stats_print(T *obj, void (*write_cb)(void *arg, const char *line), \
				  void *arg)

#endif /* KVSLAB_STATS_H */
