/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hiradix_int.h - what the files of the hierarchical radix cache
 * share, and nothing else includes: its structures and the hr_ functions
 * one of them calls in another.
 *
 *   lib/cache/hiradix.c       the tree: nodes, leaf sets, match, insert,
 *                             locks, eviction, validation, statistics
 *   lib/cache/hiradix_xfer.c  the transfer controller (backups to and loads
 *                             back from the host pool, their queues and
 *                             acks) and its poll thread
 *   lib/cache/hiradix_life.c  the cache's creation and destruction, and
 *                             its plain accessors
 *   lib/cache/hiradix_pool.c  the operations the device pool asks of it
 *                             (lib/mem/cacheops.h)
 *   lib/cache/hiradix_l3.c    the storage tier: backups to the store,
 *                             prefetch, and their two threads
 *
 * Each structure's fields are grouped by who owns them: the lock that
 * guards them, or the thread that alone touches them.  h->lock is the
 * cache's mutex (level 2 of the lock order in common/common.h).
 */
#ifndef KVSLAB_CACHE_HIRADIX_INT_H
#define KVSLAB_CACHE_HIRADIX_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/evict_heap.h"
#include "cache/kvevent.h"
#include "internal.h"
#include "kvslab/hiradix.h"
#include "kvslab/storage.h"

struct hload;
struct hbatch;

/* A node: all of it under h->lock. */
struct kvs_hiradix_node {
	/* The tree's shape. */
	struct kvs_hiradix_node *parent, *child, *prev, *next; /* children list */
	struct kvs_hiradix *tree;	/* the cache it belongs to */
	int32_t *key, *locs, *host;
	size_t len;
	uint32_t nchildren, ndev;
	uint64_t extra;			/* its extra key (the root's child's, inherited) */
	uint64_t kh;			/* hash of extra and first page (the child table) */
	struct kvs_hiradix_node *knext;	/* its chain in the child table */
	/* Eviction: the leaf sets, recency, locks. */
	struct evict_key dk, hk;	/* in the device and host leaf sets */
	uint32_t lock_ref, hit_count;
	uint32_t ulock;			/* the caller's share of lock_ref */
	uint64_t access;
	bool on_dev, host_ok;
	/* The controller (lib/cache/hiradix_xfer.c). */
	struct kvs_hiradix_node *bprev, *bnext;			 /* backups in flight */
	struct hbatch *bt;		/* a backup's batch, while one is pending */
	struct orphan *orph;		/* with bt: for its host pages, if dropped in flight */
	struct hload *ld;
	uint32_t pin;			/* hr_pin(): calls across a drop of h->lock */
	/* The storage tier (lib/cache/hiradix_l3.c). */
	kvs_page_key_t *pkey;		/* with a store: each page's L3 key */
	uint32_t hlock;			/* host pages in use (L3 backup, prefetch anchor) */
	/* Events. */
	uint64_t hash;			/* chained hash of its last page (events only) */
};

/* Host pages of a copy dropped while its transfer is in flight. */
struct orphan {
	struct orphan *next;
	size_t n;
	int32_t *pages;
};

/* One transfer of the controller: the backups (or loads back) merged into
 * one kvs_hpool_backup() (kvs_hpool_load()); h->wq and h->lq, with no
 * transfer, are the queues.  Under h->lock. */
struct hbatch {
	kvs_hpool_xfer_t *x;
	uint32_t refs;			/* nodes or loads it still serves */
	int state;			/* 0 in flight, 1 complete, -1 failed */
	int seen;			/* take_acks(): the query's answer this poll */
	bool handed;			/* a load transfer the caller holds */
	bool submitting;		/* its copies being queued, h->lock dropped */
	uint32_t pins;			/* calls holding it across a drop of h->lock */
	struct hbatch *next;		/* its ack queue, oldest first */
	struct hbatch *anext;		/* take_acks(): the batches the ranks agree on */
	struct hbatch *hnext;		/* the handed-out list */
	struct orphan *orphans;		/* freed with it */
};

/* A load back: the chain top .. last, loaded together.  Under h->lock. */
struct hload {
	struct hbatch *bt;
	struct kvs_hiradix_node *top, *last;
	int32_t *dev, *host;		/* while queued: its pages, top first */
	size_t np;
	struct hload *prev, *next;
};

/* A backup to the store: queued under h->lock, then the backup thread's. */
struct l3job {
	struct l3job *next;
	struct kvs_hiradix_node *x;
	size_t np;
	kvs_page_key_t *keys;
	int32_t *host;
};

/* A prefetch from the store. */
struct pf {
	/* Under h->lock. */
	struct pf *next;		/* h->pfs (all) */
	struct pf *qnext;		/* the prefetch thread's queue */
	uint64_t id;
	struct kvs_hiradix_node *anchor;
	/* Set before it is queued, then read-only (keys and host: the
	 * prefetch thread writes them past pf->done only). */
	kvs_page_key_t prev;		/* the anchor's last key */
	bool has_prev;
	int32_t *tok, *host;		/* np pages of tokens; host pages */
	kvs_page_key_t *keys;
	size_t np;
	uint64_t deadline_ns;
	/* Under pf->m (level 3: taken under h->lock, or alone). */
	pthread_mutex_t m;		/* done .. taken */
	size_t done;			/* pages read, from the first */
	size_t taken;			/* pages the tree took (terminated) */
	bool complete;			/* the thread is finished with it */
	bool inflight;			/* the thread is reading a chunk */
	bool terminated;		/* the caller stopped it */
};

struct kvs_hiradix {
	pthread_mutex_t lock;		/* h->lock: level 2 */

	/* Set by kvs_hiradix_create(), read-only after: no lock. */
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	kvs_slab_t *slab;		/* the pool's: which pages are held */
	uint64_t cap;			/* the pool's tokens */
	uint32_t ps, policy, threshold;
	uint64_t lb_threshold;
	uint32_t flags, poll_us;
	kvs_hiradix_agree_cb agree;
	void *agree_arg;
	struct kvev_sink sink;

	/* The tree (lib/cache/hiradix.c), under h->lock. */
	uint64_t *held, *seen;		/* pages on the device nodes hold; an insert's scratch */
	uint64_t clock;
	struct kvs_hiradix_node root;
	struct evict_heap dheap, hheap;	/* the leaf sets */
	size_t nnodes;			/* but the root: room in each heap */
	struct kvs_hiradix_node **kt;	/* the child table: kt_mask + 1 chains */
	size_t kt_mask;
	kvs_hiradix_usage_t use;	/* the token gauges, kept by acct() */
	uint64_t st[KVS_HIRADIX_STAT__COUNT]; /* the counters; gauges are walked */

	/* The controller (lib/cache/hiradix_xfer.c), under h->lock. */
	struct kvs_hiradix_node *backups;
	struct hload *loads;
	struct hbatch wq, lq;		/* the write and load queues */
	struct hbatch *wacks, *lacks;	/* the ack queues */
	struct hbatch *handed;		/* load transfers the caller holds */
	uint64_t bgen;			/* backups taken out of h->backups */
	pthread_cond_t xcv;		/* a submission ended, or an agreement */
	bool agreeing;			/* a call is in the agreement callback */

	/* The poll thread (KVS_HIRADIX_THREAD): thread and has_thread are
	 * create's and destroy's; stop under h->lock; wake waits on it. */
	pthread_t thread;
	pthread_cond_t wake;
	bool has_thread, stop;

	/* The storage tier (lib/cache/hiradix_l3.c): store and l3 set under
	 * h->lock by kvs_hiradix_set_store() while the tree is empty, then
	 * read-only; the queues, counts and l3_stop under h->lock, the
	 * conditions wait on it; the threads are set_store's and destroy's. */
	kvs_store_t *store;
	kvs_hiradix_l3_attr_t l3;
	struct l3job *l3q, **l3q_tail;	/* backups to the store, oldest first */
	struct pf *pfs, *pfq, **pfq_tail;	/* prefetches: all, and not started */
	uint64_t l3_pending;		/* backups queued or being written */
	uint64_t pf_live;		/* prefetches the thread has not finished */
	pthread_t l3_thread, pf_thread;
	pthread_cond_t l3_wake, pf_wake, l3_idle;
	bool l3_stop;
};

#define ST(h, n, v) ((h)->st[KVS_HIRADIX_STAT_##n] += (v))

typedef struct kvs_hiradix_node node_t;

/* A batch that is one of the queues: no transfer yet. */
static inline bool hr_queued(const kvs_hiradix_t *h, const struct hbatch *b)
{
	return b == &h->wq || b == &h->lq;
}

/* lib/cache/hiradix.c: the tree.  All with h->lock. */
void hr_touch(kvs_hiradix_t *h, node_t *x);
void hr_leaf_update(kvs_hiradix_t *h, node_t *x);
void hr_acct(kvs_hiradix_t *h, const node_t *x, int s);
void hr_held_mark(kvs_hiradix_t *h, const node_t *x, bool on);
void hr_set_dev(kvs_hiradix_t *h, node_t *x, bool on);
void hr_lock_path(kvs_hiradix_t *h, node_t *x, int d);
node_t *hr_node_new(kvs_hiradix_t *h, size_t len);
void hr_child_add(node_t *p, node_t *c);
void hr_node_free(kvs_hiradix_t *h, node_t *x);
node_t *hr_find_child(const kvs_hiradix_t *h, const node_t *x, uint64_t extra, const int32_t *key);
size_t hr_common(const kvs_hiradix_t *h, const node_t *c, const int32_t *key, size_t n);
void hr_pages_of(const kvs_hiradix_t *h, const int32_t *locs, size_t len, int32_t *pages);
void hr_node_hash(kvs_hiradix_t *h, node_t *x);
void hr_node_events(kvs_hiradix_t *h, node_t *x, int type, int medium);
node_t *hr_split(kvs_hiradix_t *h, node_t *c, size_t k);
node_t *hr_walk(kvs_hiradix_t *h, uint64_t extra, const int32_t *key, size_t n, size_t *pos);
bool hr_is_dleaf(const kvs_hiradix_t *h, const node_t *x);
size_t hr_evict_one(kvs_hiradix_t *h, node_t *x);
ssize_t hr_evict_device(kvs_hiradix_t *h, size_t tokens);
ssize_t hr_evict_host(kvs_hiradix_t *h, size_t tokens);
ssize_t hr_match(kvs_hiradix_t *h, uint64_t extra, const int32_t *key, size_t n, int32_t *locs,
		 kvs_hiradix_match_t *m, bool lock);			/* takes h->lock */
ssize_t hr_insert(kvs_hiradix_t *h, uint64_t extra, const int32_t *key, size_t n,
		  const int32_t *locs, kvs_hiradix_node_t **last, bool lock); /* takes h->lock */

/* lib/cache/hiradix_xfer.c: the controller.  All with h->lock. */
void hr_bset(kvs_hiradix_t *h, node_t *x, bool in);
void hr_settle_load(kvs_hiradix_t *h, node_t *x);
void hr_settle(kvs_hiradix_t *h, node_t *x);
int hr_backup(kvs_hiradix_t *h, node_t *x);
void hr_inc_hit(kvs_hiradix_t *h, node_t *x);
void hr_flush(kvs_hiradix_t *h);
void hr_poll_locked(kvs_hiradix_t *h, bool caller);
void hr_pin(kvs_hiradix_t *h, node_t *x, int d);
uint64_t hr_agree(kvs_hiradix_t *h, int what, uint64_t value);
int hr_thread_start(kvs_hiradix_t *h);	/* kvs_hiradix_create() */
void hr_thread_stop(kvs_hiradix_t *h);	/* kvs_hiradix_destroy(), without h->lock */
void hr_drain(kvs_hiradix_t *h);		/* kvs_hiradix_destroy(), without h->lock */

/* lib/cache/hiradix_l3.c: the storage tier. */
void hr_node_keys(kvs_hiradix_t *h, node_t *x);	/* with h->lock */
void hr_l3_backup(kvs_hiradix_t *h, node_t *x);	/* with h->lock */
void hr_l3_stop(kvs_hiradix_t *h);		/* without it */

/* lib/cache/hiradix_pool.c: the pool's operations (lib/mem/cacheops.h). */
int hr_pool_register(kvs_hiradix_t *h);		/* kvs_hiradix_create() */
void hr_pool_unregister(kvs_hiradix_t *h);	/* kvs_hiradix_destroy(), first */

#endif /* KVSLAB_CACHE_HIRADIX_INT_H */
