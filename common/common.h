/* SPDX-License-Identifier: MIT */
/*
 * common/common.h - what the core (lib/) and the driver shim (drv/) both
 * need: the export macro, branch hints, the monotonic clock, a counter read
 * under its lock, the one failure convention, overflow-checked size
 * arithmetic and intrusive doubly linked lists.  Nothing here knows about slabs, trees or drivers; lib/internal.h
 * holds what only the core shares.  Everything is static inline or a macro,
 * so the header adds no symbol to the library.
 *
 * THE LOCK ORDER of the whole library, written once, here (each file's
 * essay says how it keeps to it; each function's Context: line names what
 * it takes).  A thread may take a lock only while holding locks above it:
 *
 *  0. pool->elastic (lib/mem/pool.c, used by lib/elastic/elastic.c):
 *     serializes kvs_pool_set_limit(), kvs_pool_compact() and the caches'
 *     registration on one pool (lib/mem/cacheops.h).  Takes the registered
 *     caches' writer locks (level 2) and slab->lock under it, and waits for
 *     fences and copies with none of them held.  The caches' writer locks
 *     nest in one place only: compaction's commit, under pool->elastic, in
 *     the order the caches registered.
 *  1. flow->lock (lib/flow/flow.c): serializes one flow object's calls.
 *  2. radix->wlock (lib/cache/radix.c): the prefix cache's single writer.  Held
 *     across frees of evicted pages (so it comes before slab->lock) and
 *     across KV-event callbacks, which may only read (kvs_radix_match_ro).
 *     hc->lock (lib/cache/hashcache.c), the hashed block cache's writer lock,
 *     sits at the same level: the two caches never nest.  The KV event
 *     publisher's queue lock (lib/ops/kvpub.c) is taken inside either, for an
 *     event's copy only.  RCU readers take no lock and may be inside any
 *     of these.  h->lock (lib/cache/hiradix*.c), the hierarchical radix
 *     cache's mutex around every call and its three threads' (poll, L3
 *     backup, L3 prefetch), sits at this level too: it calls the host pool
 *     and the device pool under it, but is dropped across every wait for
 *     a transfer (kvs_hpool_xfer_wait()), every submission of copies
 *     (kvs_hpool_backup(), kvs_hpool_load(): the driver's copies, and the
 *     synchronization after a failed one), the ranks' agreement callback
 *     (kvs_hiradix_agree_cb) and every storage backend call; the cache
 *     waits on its conditions (h->xcv, h->l3_idle, ...) with it.
 *  3. pf->m (lib/cache/hiradix_l3.c): one L3 prefetch's progress, between
 *     the prefetch thread and the caller; taken under h->lock or alone,
 *     nothing taken under it (it never nests with hp->lock).
 *     hp->lock (lib/tier/hostpool.c): the host pool's free pages, page states
 *     and busy counts, its transfers' states and its counters.  Taken
 *     inside the locks above (a tiered cache calls the host pool from its
 *     writer section); never held across a driver call or a wait for the
 *     device, and no lock is taken under it (it reads device pages'
 *     reference counts with relaxed loads, not under slab->lock).
 *  4. slab->lock (lib/mem/slab*.c): pages, lists, the chunk pool, the
 *     magazine registry.  Never held across a driver call, a fence
 *     callback, or a wait for the device: whoever maps, unmaps, records
 *     or queries a fence marks the slab or the fence BUSY and drops it.
 *     An allocation waiting for a slab in flight sleeps on slab->mapped,
 *     which releases it.  So slab->lock and the driver's locks are never
 *     held together.
 *  5. drv->lock (drv/drv.c): the driver's books.  Backend calls that
 *     validate-and-act run under it; chunk creation and every device
 *     synchronization (copy-queue drains, cuCtxSynchronize, event waits)
 *     run without it.
 *  6. backend locks, innermost: the fault wrapper's fb->lock (never held
 *     across a call into the inner driver, which takes the inner
 *     drv->lock), the host backend's hb->alock (arenas; under drv->lock)
 *     and hb->qlock (copy queue; under drv->lock or alone, never across a
 *     wait).
 *
 * Engine callbacks (kvs_fence_t, radix event callbacks) run with at most
 * the locks above that their caller's page names, never slab->lock or
 * drv->lock.
 *
 * EVERY MUTEX (grep pthread_mutex_t lib/ drv/): its level in the order
 * above ("leaf": nothing is taken under it, whoever holds what), its file,
 * and what may be taken under it.
 *
 *  lvl  mutex               file                   may be taken under it
 *  0    pool->elastic       lib/mem/pool.c         2 (the caches' writer
 *                           (lib/elastic/ uses it)  locks), 3-6
 *  0    metrics->scrape     lib/ops/metrics.c      each registered object's
 *                                                  stats locks (2-6, one at
 *                                                  a time, through its
 *                                                  family's fill()), a
 *                                                  pool's pool->elastic (its
 *                                                  caches' evictable tokens,
 *                                                  their writer locks under
 *                                                  it), then metrics->lock;
 *                                                  never held across
 *                                                  write_cb; never taken
 *                                                  under pool->elastic
 *  -    metrics->serve      lib/ops/metrics.c      nothing; stopping the
 *                                                  HTTP server under it
 *                                                  waits for its scrapes
 *                                                  (metrics->scrape and
 *                                                  below), which never take
 *                                                  it
 *  1    flow->lock          lib/flow/flow.c        2-6
 *  2    radix->wlock        lib/cache/radix.c      kvpub->qlock, sc->lock,
 *                                                  3-6
 *  2    hc->lock            lib/cache/hashcache.c  kvpub->qlock, 3-6
 *  2    h->lock             lib/cache/hiradix.c    hp->lock, 4-6 (the L3
 *                                                  engine's: see below)
 *  -    kvpub->slock        lib/ops/kvpub.c        kvpub->qlock; the
 *                                                  publisher's lora_cb; not
 *                                                  taken under a cache lock
 *  3    hp->lock            lib/tier/hostpool.c    nothing (leaf)
 *  4    slab->lock          lib/mem/slab_defs.h    nothing (leaf; sleeps on
 *                                                  slab->mapped)
 *  5    drv->lock           drv/backend.h          6
 *  6    fb->lock            drv/fault.c            nothing (leaf)
 *  6    hb->alock           drv/host.c             nothing (leaf; after
 *                                                  drv->lock)
 *  6    hb->qlock           drv/host.c             nothing (leaf; never
 *                                                  across a wait)
 *  leaf metrics->lock       lib/ops/metrics.c      nothing (the list only)
 *  leaf kvpub->qlock        lib/ops/kvpub.c        nothing (an event's copy)
 *  leaf sc->lock            lib/cache/radix.c      nothing (the segment
 *                                                  cache's free lists; also
 *                                                  from RCU's thread)
 *  leaf fault->lock         lib/tier/storage.c     nothing (the fault
 *                                                  store's dice)
 *  leaf fstore->lock        lib/tier/store_file.c  nothing (the index; I/O
 *                                                  runs outside it)
 *  leaf rs->lock            lib/tier/store_redis.c nothing (held across the
 *                                                  connection's round trip)
 *  [hiradix] the L3 engine's mutexes (lib/cache/hiradix*.c: a prefetch's
 *  op->m, ...): their levels are written here by the hiradix split.
 */
#ifndef KVSLAB_COMMON_H
#define KVSLAB_COMMON_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KVS_EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

static inline uint64_t kvs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One counter read under the lock that guards it: what a getter hands out. */
static inline uint64_t kvs_locked_read(pthread_mutex_t *lock, const uint64_t *v)
{
	uint64_t x;

	pthread_mutex_lock(lock);
	x = *v;
	pthread_mutex_unlock(lock);
	return x;
}

/* Set errno and return -1: the one failure convention of the library. */
static inline int kvs_fail(int err)
{
	errno = err;
	return -1;
}

/*
 * Size arithmetic on numbers a caller handed us.  Each returns false, with
 * *out untouched, when the exact result does not fit in a size_t.
 */
static inline bool kvs_size_add(size_t a, size_t b, size_t *out)
{
	size_t r;

	if (__builtin_add_overflow(a, b, &r))
		return false;
	*out = r;
	return true;
}

static inline bool kvs_size_mul(size_t a, size_t b, size_t *out)
{
	size_t r;

	if (__builtin_mul_overflow(a, b, &r))
		return false;
	*out = r;
	return true;
}

/* @v rounded up to a multiple of @align (non-zero, any value). */
static inline bool kvs_size_roundup(size_t v, size_t align, size_t *out)
{
	size_t r;

	if (align == 0 || __builtin_add_overflow(v, align - 1, &r))
		return false;
	*out = r - r % align;
	return true;
}

/* free() each of the pointers given (NULL ones are fine): an object's
 * arrays at its destruction, or after a failed creation. */
static inline void kvsi_free_each(void *const *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
}
#define KVS_FREE_ALL(...)                                                     \
	kvsi_free_each((void *const[]){__VA_ARGS__},                          \
		       sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))

/* An attribute initializer's first step: fail EINVAL for NULL (nothing
 * changed), else zero every field before the defaults are set. */
#define KVS_ATTR_CLEAR(attr)                                                  \
	do {                                                                  \
		if (!(attr))                                                  \
			return kvs_fail(EINVAL);                              \
		memset((attr), 0, sizeof(*(attr)));                           \
	} while (0)

/*
 * Intrusive doubly linked lists: a list is a pointer to its first node
 * (NULL when empty); a node has link members @prev and @next (DLIST_PUSH
 * and DLIST_DEL: the members named prev and next).
 */
#define DLIST_PUSH_F(head, n, prev, next)                                     \
	do {                                                                  \
		(n)->prev = NULL;                                             \
		(n)->next = (head);                                           \
		if (head)                                                     \
			(head)->prev = (n);                                   \
		(head) = (n);                                                 \
	} while (0)

#define DLIST_DEL_F(head, n, prev, next)                                      \
	do {                                                                  \
		if ((n)->prev)                                                \
			(n)->prev->next = (n)->next;                          \
		else                                                          \
			(head) = (n)->next;                                   \
		if ((n)->next)                                                \
			(n)->next->prev = (n)->prev;                          \
	} while (0)

#define DLIST_PUSH(head, n) DLIST_PUSH_F(head, n, prev, next)
#define DLIST_DEL(head, n) DLIST_DEL_F(head, n, prev, next)

/*
 * The driver keeps what a library object's undo could not give back (a
 * mapping, a chunk, a reservation, a pinned host block), tries again at its
 * next allocations and gives it back at close at the latest
 * (drv/drv.c).  0: all given back now; 1: parked.
 */
struct kvs_drv;
struct kvs_chunk;
int kvsi_drv_park(struct kvs_drv *d, uint64_t base, size_t mapped, bool reserved,
		  struct kvs_chunk *chunk, void *host);

#endif /* KVSLAB_COMMON_H */
