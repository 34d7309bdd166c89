/* SPDX-License-Identifier: MIT */
/*
 * kvslab.h - the umbrella header of kvslab, KV-cache memory management for
 * LLM inference engines.  See kvslab(7).
 */
#ifndef KVSLAB_H
#define KVSLAB_H

#include <kvslab/version.h>
#include <kvslab/drv.h>
#include <kvslab/fault.h>
#include <kvslab/slab.h>
#include <kvslab/pool.h>
#include <kvslab/reqtab.h>
#include <kvslab/radix.h>
#include <kvslab/elastic.h>
#include <kvslab/flow.h>
#include <kvslab/blockhash.h>
#include <kvslab/kvpub.h>
#include <kvslab/hashcache.h>
#include <kvslab/hostpool.h>
#include <kvslab/hiradix.h>
#include <kvslab/storage.h>
#include <kvslab/metrics.h>
#include <kvslab/ctl.h>

#endif /* KVSLAB_H */
