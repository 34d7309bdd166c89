/* SPDX-License-Identifier: MIT */
/*
 * kvslab/elastic.h - elastic KV memory: a limit on the memory a pool maps
 * that can be lowered and raised at run time, and compaction.  See
 * kvs_pool_set_limit(3) and kvs_pool_compact(3).
 */
#ifndef KVSLAB_ELASTIC_H
#define KVSLAB_ELASTIC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvslab/pool.h>
#include <kvslab/radix.h>
#include <kvslab/reqtab.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What kvs_pool_set_limit() did (filled on success and on failure). */
typedef struct kvs_limit_report {
	size_t limit;			/* the limit in force after the call */
	size_t bytes_returned;		/* held bytes (mapped + pooled) given back */
	size_t bytes_mapped;		/* mapped after the call */
	size_t floor_bytes;		/* slabs the running requests keep mapped:
					 * the lowest limit reachable without
					 * compaction */
	size_t packed_bytes;		/* the running requests' pages packed
					 * into whole slabs, and the slabs
					 * nobody can empty now: the lowest
					 * limit reachable after compaction */
	uint64_t evicted_tokens;	/* tokens evicted from the cache */
	uint64_t slabs_unmapped;	/* slabs given back */
	uint64_t elapsed_ns;		/* time the call took */
	uint64_t _reserved[4];
} kvs_limit_report_t;

int kvs_pool_set_limit(kvs_pool_t *pool, size_t bytes, kvs_radix_t *cache,
		       kvs_limit_report_t *rep);
size_t kvs_pool_limit(kvs_pool_t *pool);
ssize_t kvs_pool_compact(kvs_pool_t *pool, kvs_reqtab_t *tab, kvs_radix_t *cache,
			 size_t max_pages);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_ELASTIC_H */
