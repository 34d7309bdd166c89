/* SPDX-License-Identifier: MIT */
/*
 * kvslab/storage.h - the storage tier (L3) of the KV cache: pages named by
 * their chained SHA-256 hash (SGLang HiCache's page keys), kept in a store
 * that several instances can share (a directory, a Redis server).  See
 * kvs_store_open(3), kvs_page_hash(3), kvslab-storage(7).
 */
#ifndef KVSLAB_STORAGE_H
#define KVSLAB_STORAGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvslab/stats.h>
#include <kvslab/hostpool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A page's key: SHA-256 over the previous page's key (32 raw bytes, absent
 * for the first page), then each token id as 4 bytes little-endian. */
#define KVS_PAGE_KEY_BYTES 32

typedef struct kvs_page_key {
	uint8_t b[KVS_PAGE_KEY_BYTES];
} kvs_page_key_t;

int kvs_page_hash(const kvs_page_key_t *prev, const int32_t *tokens, size_t n,
		  kvs_page_key_t *key);
ssize_t kvs_page_hashes(const kvs_page_key_t *prev, const int32_t *tokens, size_t ntokens,
			uint32_t page_size, kvs_page_key_t *keys);
int kvs_page_key_hex(const kvs_page_key_t *key, char hex[2 * KVS_PAGE_KEY_BYTES + 1]);

typedef struct kvs_store kvs_store_t;

/* When the file backend fsyncs (kvs_store_attr_t.fsync). */
#define KVS_FSYNC_NONE 0	/* never: a crash may lose pages, never tear one */
#define KVS_FSYNC_DATA 1	/* each object before its rename (default) */
#define KVS_FSYNC_FULL 2	/* the object and its directory after the rename */

/* kvs_store_attr_t.flags. */
#define KVS_STORE_SHARE_GROUP 0x1	/* file: objects 0640, directories 0750 (not 0600, 0700) */

/** Attributes of kvs_store_open(); always start from kvs_store_attr_init(). */
typedef struct kvs_store_attr {
	/* The namespace: pages of another model, rank, layout or salt are
	 * never read.  model: a name (default "default"); layout: the host
	 * pool layout the bytes are in (KVS_HPOOL_*, default PAGE_FIRST). */
	const char *model;
	uint32_t tp_rank, tp_size;	/* default 0 of 1 */
	uint32_t layout;
	uint32_t flags;			/* KVS_STORE_SHARE_GROUP, or 0 (default) */
	const char *salt;		/* optional: a tenant's secret or id */
	/* Bytes of one page's value (all buffers of all layers); every get
	 * and set moves exactly this many.  Required (no default). */
	size_t page_bytes;
	/* file: the limit of the directory's objects in bytes (0: none); past
	 * it the least recently used objects are removed.  fsync policy. */
	uint64_t max_bytes;
	uint32_t fsync;
	/* redis: I/O timeout in ms (default 2000), key time-to-live in seconds
	 * (0: none). */
	uint32_t timeout_ms;
	uint32_t ttl_s;
	/* redis: after a failed connect, calls make no connection for this
	 * many ms, doubled after each further failure up to 64 times it (0:
	 * the default, 100). */
	uint32_t retry_ms;
	const char *password;		/* redis AUTH, or NULL (also in the URI) */
	const char *key_prefix;		/* redis: prepended to every key, or NULL */
	uint64_t _reserved[8];
} kvs_store_attr_t;

int kvs_store_attr_init(kvs_store_attr_t *attr);
kvs_store_t *kvs_store_open(const char *uri, const kvs_store_attr_t *attr);
int kvs_store_close(kvs_store_t *s);

ssize_t kvs_store_exists(kvs_store_t *s, const kvs_page_key_t *keys, size_t n);
ssize_t kvs_store_get(kvs_store_t *s, const kvs_page_key_t *keys, size_t n, void *const *bufs);
ssize_t kvs_store_set(kvs_store_t *s, const kvs_page_key_t *keys, size_t n,
		      const void *const *bufs);
ssize_t kvs_store_get_pages(kvs_store_t *s, const kvs_page_key_t *keys, size_t n,
			    kvs_hpool_t *hp, const int32_t *host_pages);
ssize_t kvs_store_set_pages(kvs_store_t *s, const kvs_page_key_t *keys, size_t n,
			    kvs_hpool_t *hp, const int32_t *host_pages);
size_t kvs_store_page_bytes(const kvs_store_t *s);

/* Atomic counters; an unknown item sets errno EINVAL. */
KVS_STATS_DECLARE(store, kvs_store_t, KVS_STORE_STATS, KVS_STORE_STAT_ITEM, KVS_STORE_STAT__COUNT);

/* Fault injection: a store that wraps another and fails chosen operations. */
enum kvs_store_op {
	KVS_SOP_ANY = 0,
	KVS_SOP_EXISTS,
	KVS_SOP_GET,
	KVS_SOP_SET,
	KVS_SOP__COUNT
};

/* How an injected fault fails (kvs_store_fault_fail_nth()'s @kind). */
#define KVS_SFAULT_ERROR 0	/* the operation fails with an I/O error */
#define KVS_SFAULT_SHORT 1	/* get: a short value; set: a short write */
#define KVS_SFAULT_CORRUPT 2	/* get: one flipped byte in the value */

kvs_store_t *kvs_store_fault_open(kvs_store_t *inner);
int kvs_store_fault_fail_nth(kvs_store_t *fault, enum kvs_store_op op, uint64_t nth, int kind);
int kvs_store_fault_fail_random(kvs_store_t *fault, enum kvs_store_op op, double p,
				uint64_t seed, int kind);
int kvs_store_fault_clear(kvs_store_t *fault);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_STORAGE_H */
