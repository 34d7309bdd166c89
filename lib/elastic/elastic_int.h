/* SPDX-License-Identifier: MIT */
/*
 * lib/elastic/elastic_int.h - the elastic calls' test point: a function
 * that kvs_pool_compact() calls, when set, after its copies and before it
 * commits the move, with no lock of a cache or the allocator held.  Only
 * the regression programs (tests/regression/, linked statically) set it, to
 * run another thread's calls (an eviction, a limit change) in the window
 * the elastic calls must survive.
 */
#ifndef KVSLAB_ELASTIC_INT_H
#define KVSLAB_ELASTIC_INT_H

#include "internal.h"

extern void (*kvsi_compact_test_hook)(void *arg);
extern void *kvsi_compact_test_arg;

#endif /* KVSLAB_ELASTIC_INT_H */
