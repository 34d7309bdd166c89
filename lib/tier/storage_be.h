/* SPDX-License-Identifier: MIT */
/*
 * lib/tier/storage_be.h - what a storage backend implements, and the store
 * object the core (lib/tier/storage.c) and the backends share.
 *
 * The core turns page keys into object names, builds and verifies each
 * object's envelope (a 64-byte header, then the page's value) and keeps
 * the statistics; a backend only moves named objects of a fixed size.  An
 * object is STORE_HDR_BYTES of header followed by s->attr.page_bytes of
 * value; a backend reads the two parts into two buffers (so that a value
 * can land straight in a host-pool page) and writes them from two.
 *
 * Backends never fail a call: an object they cannot read is reported
 * absent (got[i] < 0) or short (got[i] < its size), one they cannot write
 * is reported not stored; they count what went wrong (io_errors,
 * reconnects, evicted, bytes_stored) with store_count().  The core calls
 * them from any thread: a backend serialises what needs it.
 */
#ifndef KVSLAB_STORAGE_BE_H
#define KVSLAB_STORAGE_BE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvslab/storage.h"

#define STORE_HDR_BYTES 64
#define STORE_MAGIC "KVSLABP1"	/* 8 bytes, no NUL stored */

/*
 * The header, little-endian:
 *   [0, 8)   STORE_MAGIC
 *   [8, 40)  the page key
 *   [40, 48) the namespace fingerprint (store_ns_fp())
 *   [48, 56) the value's length in bytes
 *   [56, 64) the value's checksum (store_checksum())
 */

struct kvs_store;

struct store_backend {
	const char *scheme;		/* the URI's scheme, "file", "redis", ... */
	/* Open: @uri is the whole URI; set s->be_priv.  -1 with errno. */
	int (*open)(struct kvs_store *s, const char *uri);
	void (*close)(struct kvs_store *s);
	/* How many of names[0 .. n) are present, consecutively from the
	 * first (a failure ends the count). */
	size_t (*exists)(struct kvs_store *s, const char *const *names, size_t n);
	/* Read objects: header into hdr[i] (STORE_HDR_BYTES), value into
	 * val[i] (page_bytes); got[i]: bytes of the object read (header and
	 * value), -1 absent or failed.  May read all n even past a miss. */
	void (*get)(struct kvs_store *s, const char *const *names, size_t n, void *const *hdr,
		    void *const *val, ssize_t *got);
	/* Write objects from hdr[i] and val[i]; res[i]: 1 written, 2 already
	 * present (not rewritten), 0 failed. */
	void (*set)(struct kvs_store *s, const char *const *names, size_t n,
		    const void *const *hdr, const void *const *val, int *res);
	/* Remove an object that did not verify; -1 if it could not be. */
	int (*remove)(struct kvs_store *s, const char *name);
};

/* The calls of a backend after .open, named PREFIX_close, PREFIX_exists,
 * ... as every backend names them:
 *	{ .scheme = "file", .open = file_open, STORE_BACKEND_OPS(file) } */
#define STORE_BACKEND_OPS(prefix)                                                  \
	.close = prefix##_close, .exists = prefix##_exists, .get = prefix##_get,   \
	.set = prefix##_set, .remove = prefix##_remove

struct kvs_store {
	const struct store_backend *be;
	void *be_priv;
	kvs_store_attr_t attr;		/* strings below are copies */
	char *model, *salt, *password, *key_prefix;
	char ns[160];			/* "_{model}_{rank}_{size}[_lf][_s{salt fp}].{fp}" */
	uint64_t ns_fp;
	_Atomic uint64_t st[KVS_STORE_STAT__COUNT];
};

static inline void store_count(struct kvs_store *s, enum kvs_store_stat i, uint64_t v)
{
	atomic_fetch_add_explicit(&s->st[i], v, memory_order_relaxed);
}

static inline void store_gauge(struct kvs_store *s, enum kvs_store_stat i, uint64_t v)
{
	atomic_store_explicit(&s->st[i], v, memory_order_relaxed);
}

/* The object name of @key: 64 hex digits and s->ns. */
#define STORE_NAME_MAX (2 * KVS_PAGE_KEY_BYTES + sizeof(((struct kvs_store *)0)->ns))

uint64_t store_checksum(const void *p, size_t n);

extern const struct store_backend store_file_backend;
#ifdef KVS_HAVE_HIREDIS
extern const struct store_backend store_redis_backend;
extern const struct store_backend store_redis_unix_backend;
#endif

/* lib/tier/store_registry.c: every scheme kvs_store_open() knows, in
 * order; @be NULL for one this build lacks. */
struct store_backend_entry {
	const char *scheme;
	const struct store_backend *be;
};

extern const struct store_backend_entry store_backends[];
extern const size_t store_nbackends;

#endif /* KVSLAB_STORAGE_BE_H */
