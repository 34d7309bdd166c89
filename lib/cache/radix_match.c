/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/radix_match.c - matching in the radix cache: under the writer lock
 * (kvs_radix_match(), kvs_radix_match_lock(), which may split) and
 * lock-free inside an RCU read section (kvs_radix_match_ro(), validated
 * by the sequence count).  See lib/cache/radix.c.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu-bp.h>

#include "cache/radix_int.h"

/* The walk of kvs_radix_match() and kvs_radix_match_lock(), with wlock
 * held: splits where the match ends inside a node, and refreshes access
 * times (no write section for that).  Returns tokens matched or -1
 * (ENOMEM, the tree unchanged but for earlier splits and access times). */
static ssize_t match_locked(struct kvs_radix *r, uint64_t extra, const int32_t *key, size_t n,
			    int32_t *locs, struct rnode **last)
{
	struct rnode *node = r->root;
	size_t pos = 0;

	*last = node;
	if (r->disabled)
		return 0;
	r->st.query_tokens += n;
	n = n / r->ps * r->ps;
	r->clock++;
	r->st.matches++;
	while (pos < n) {
		struct rnode *c = rx_find_child(r, node, extra, key + pos);
		struct rseg *s;
		uint32_t m, len;

		if (!c)
			break;
		s = seg_of(c);
		len = s->len; /* @s is retired by a split: read it before */
		m = edge_match(r, s, key + pos, n - pos);
		if (m < len) {
			struct rnode *top;

			write_begin(r);
			top = rx_split(r, c, m);
			write_end(r);
			if (!top) {
				r->st.hit_tokens += pos;
				return kvs_fail(ENOMEM);
			}
			c = top;
		}
		memcpy(locs + pos, seg_of(c)->vals, m * sizeof(int32_t));
		pos += m;
		rx_touch(r, c, INT32_MIN);
		node = c;
		if (m < len)
			break;
	}
	r->st.hit_tokens += pos;
	*last = node;
	return (ssize_t)pos;
}

/**
 * kvs_radix_match() - the longest cached prefix of @key.
 * @radix: cache.
 * @extra_key: the request's extra key (LoRA id, cache salt; 0 for none).
 * @key: token ids.
 * @n: tokens in @key; only whole pages are matched.
 * @locs: receives the locations of the matched tokens (room for @n).
 * @last: receives the node the match ends in (the root when nothing
 *        matched); pass it to kvs_radix_lock().  May be NULL.
 *
 * A match that ends inside a node splits the node there, so that @last
 * covers exactly the matched prefix.  Updates access times and hit counts
 * along the path.  Neither @last nor the pages of @locs are protected once
 * the call returns: another thread's kvs_radix_evict() may free them before
 * a kvs_radix_lock().  Unless the calling thread is the only one that
 * evicts, use kvs_radix_match_lock().
 *
 * Context: MT-Safe (takes wlock).
 * Return: tokens matched (a multiple of the page size), or -1 with errno
 * EINVAL or ENOMEM.
 */
KVS_EXPORT ssize_t kvs_radix_match(kvs_radix_t *r, uint64_t extra, const int32_t *key, size_t n,
				   int32_t *locs, kvs_radix_node_t **last)
{
	struct rnode *node;
	ssize_t got;

	if (!r || (!key && n) || (!locs && n))
		return kvs_fail(EINVAL);
	rx_wlock(r);
	got = match_locked(r, extra, key, n, locs, &node);
	pthread_mutex_unlock(&r->wlock);
	if (got >= 0 && last)
		*last = (kvs_radix_node_t *)node;
	return got;
}

/**
 * kvs_radix_match_lock() - kvs_radix_match() and kvs_radix_lock() of the
 * node it ends in, in one writer section.
 * @radix: cache.
 * @extra_key: the request's extra key.
 * @key: token ids.
 * @n: tokens in @key; only whole pages are matched.
 * @locs: receives the locations of the matched tokens (room for @n).
 * @last: receives the locked node (the root when nothing matched); the
 *        caller gives it back with kvs_radix_unlock().  Not NULL.
 *
 * The matched pages stay in the tree, and their locations valid, until
 * the kvs_radix_unlock().
 *
 * Context: MT-Safe (takes wlock).
 * Return: tokens matched, or -1 with errno EINVAL or ENOMEM (nothing
 * locked).
 */
KVS_EXPORT ssize_t kvs_radix_match_lock(kvs_radix_t *r, uint64_t extra, const int32_t *key,
					size_t n, int32_t *locs, kvs_radix_node_t **last)
{
	struct rnode *node;
	ssize_t got;

	if (!r || (!key && n) || (!locs && n) || !last)
		return kvs_fail(EINVAL);
	rx_wlock(r);
	got = match_locked(r, extra, key, n, locs, &node);
	if (got >= 0)
		rx_lock_path(r, node);
	pthread_mutex_unlock(&r->wlock);
	if (got >= 0)
		*last = (kvs_radix_node_t *)node;
	return got;
}

/*
 * How many times a lock-free reader starts over before it reads under the
 * writer lock (Linux's read_seqbegin_or_lock does the same after one).
 */
#define RO_TRIES 256

/* One walk of kvs_radix_match_ro(): copies the matched locations. */
static size_t ro_walk(const struct kvs_radix *r, uint64_t extra, const int32_t *key, size_t n,
		      int32_t *locs)
{
	const struct rnode *node = r->root;
	size_t pos = 0;

	while (pos < n) {
		const struct rnode *c = rx_find_child(r, node, extra, key + pos);
		const struct rseg *s;
		uint32_t m;

		if (!c)
			break;
		s = seg_of(c);
		m = edge_match(r, s, key + pos, n - pos);
		if (locs)
			memcpy(locs + pos, s->vals, m * sizeof(int32_t));
		pos += m;
		if (m < s->len)
			break;
		node = c;
	}
	return pos;
}

/**
 * kvs_radix_match_ro() - the longest cached prefix, without changing the
 * tree: lock-free, for any number of threads beside the writer.
 * @radix: cache.
 * @extra_key: the request's extra key.
 * @key: token ids.
 * @n: tokens in @key.
 * @locs: receives the matched locations (room for @n).
 *
 * Neither splits nodes nor updates access times.  Runs under an RCU read
 * lock and starts over when a writer changed the tree's shape meanwhile
 * (a split, a new child, an eviction, a reset; not a match or insert that
 * only refreshed access times), so the answer is a prefix that was cached,
 * as a whole, at one moment; after RO_TRIES attempts it leaves the read
 * section and reads once under the writer lock.
 *
 * Context: MT-Safe, lock-free unless writers keep overlapping it (never
 * waits for wlock inside its RCU read section); may be called from any
 * thread, including inside an event callback (whose thread holds wlock,
 * so no write can overlap the walk and the first one stands).
 * Return: tokens matched, or -1 with errno EINVAL.
 */
KVS_EXPORT ssize_t kvs_radix_match_ro(kvs_radix_t *r, uint64_t extra, const int32_t *key,
				      size_t n, int32_t *locs)
{
	size_t pos;
	uint64_t s1;
	unsigned int tries = 0;

	if (!r || (!key && n) || (!locs && n))
		return kvs_fail(EINVAL);
	if (r->disabled)
		return 0;
	atomic_fetch_add_explicit(&r->rst.match_ro, 1, memory_order_relaxed);
	n = n / r->ps * r->ps;
	rcu_read_lock();
	for (;;) {
		s1 = atomic_load_explicit(&r->seq, memory_order_acquire);
		if (!(s1 & 1)) {
			pos = ro_walk(r, extra, key, n, locs);
			atomic_thread_fence(memory_order_acquire);
			if (atomic_load_explicit(&r->seq, memory_order_relaxed) == s1)
				break;
		}
		/* A write is in progress or overlapped the walk.  Spin
		 * briefly, then let the writer's thread run (it may share our
		 * CPU); a reader that keeps losing to writers reads once under
		 * the writer lock, so that it cannot starve. */
		atomic_fetch_add_explicit(&r->rst.retries, 1, memory_order_relaxed);
		if (++tries == RO_TRIES) {
			/* Out of the read section first: a writer holding
			 * wlock may be waiting for a grace period. */
			KVSI_TSAN_RELEASE(&rx_rcu_gp);
			rcu_read_unlock();
			atomic_fetch_add_explicit(&r->rst.fallbacks, 1, memory_order_relaxed);
			rx_wlock(r);
			pos = ro_walk(r, extra, key, n, locs);
			pthread_mutex_unlock(&r->wlock);
			return (ssize_t)pos;
		}
		if (tries % 16 == 0)
			sched_yield();
		else
			caa_cpu_relax();
	}
	KVSI_TSAN_RELEASE(&rx_rcu_gp);
	rcu_read_unlock();
	return (ssize_t)pos;
}

