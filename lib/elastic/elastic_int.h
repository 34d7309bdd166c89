/* SPDX-License-Identifier: MIT */
/*
 * lib/elastic/elastic_int.h - the elastic calls' test point: a function
 * that kvs_pool_compact() calls, when set, with no lock of a cache or the
 * allocator held: at KVSI_COMPACT_PLANNED, after the plan and before the
 * caches isolate the pages, and at KVSI_COMPACT_COPIED, after the copies
 * and before the commit.  Only
 * the regression programs (tests/regression/, linked statically) set it, to
 * run another thread's calls (an eviction, a limit change) in the window
 * the elastic calls must survive.
 */
#ifndef KVSLAB_ELASTIC_INT_H
#define KVSLAB_ELASTIC_INT_H

#include "internal.h"

enum { KVSI_COMPACT_PLANNED, KVSI_COMPACT_COPIED };
extern void (*kvsi_compact_test_hook)(void *arg, int stage);
extern void *kvsi_compact_test_arg;

#endif /* KVSLAB_ELASTIC_INT_H */
