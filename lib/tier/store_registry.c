/* SPDX-License-Identifier: MIT */
/*
 * lib/tier/store_registry.c - the backends kvs_store_open() can open by
 * URI scheme.
 *
 * The table is the only place that names every backend, as
 * drv/registry.c is for the drivers: lib/tier/storage.c (the core) depends
 * on no backend and no backend on the core's internals beyond
 * lib/tier/storage_be.h.  A new backend (an S3-like object store, say) is
 * one file defining a const struct store_backend and one row here.  A
 * scheme this build lacks keeps its row with a NULL backend, so that
 * kvs_store_open() fails with ENOTSUP rather than EINVAL.  The fault
 * wrapper is not here: kvs_store_fault_open() makes it around another
 * store, never by URI.
 *
 * Data is constant; there is nothing to lock.
 */
#include "tier/storage_be.h"

const struct store_backend_entry store_backends[] = {
	{ "file", &store_file_backend },
#ifdef KVS_HAVE_HIREDIS
	{ "redis", &store_redis_backend },
	{ "redis+unix", &store_redis_unix_backend },
#else
	{ "redis", NULL },
	{ "redis+unix", NULL },
#endif
};

const size_t store_nbackends = sizeof(store_backends) / sizeof(store_backends[0]);
