/* SPDX-License-Identifier: MIT */
/*
 * drv/registry.c - the backends kvs_drv_open() can open by name.
 *
 * The table is the only place that names every backend, so that drv.c
 * (the generic layer) depends on no backend and no backend on drv.c: a
 * backend is a const struct of function pointers, and "auto" walks this
 * table in order, taking the first built backend whose optional probe()
 * finds a device (one without a probe, the host, always qualifies).  The
 * fault wrapper is not here: it is made by kvs_fault_open() around another
 * driver, never by name.
 *
 * Data is constant; there is nothing to lock.
 */
#include "backend.h"

const struct kvsi_backend_entry kvsi_backends[] = {
#ifdef KVS_HAVE_CUDA
	{ "cuda", &kvsi_backend_cuda },
#else
	{ "cuda", NULL },
#endif
	{ "host", &kvsi_backend_host },
};

const size_t kvsi_nbackends = sizeof(kvsi_backends) / sizeof(kvsi_backends[0]);
