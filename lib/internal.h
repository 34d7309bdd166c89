/* SPDX-License-Identifier: MIT */
/*
 * lib/internal.h - what only the core files share: bit operations on page
 * bitmaps and gcd.  What the driver shim needs too (export macro, branch
 * hints, timing, kvs_fail, lists, checked size arithmetic) is in
 * common/common.h, included here, and so is lib/stats.h (the statistics
 * families).
 */
#ifndef KVSLAB_INTERNAL_H
#define KVSLAB_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stats.h"

static inline bool bit_test(const uint64_t *map, uint64_t i)
{
	return (map[i >> 6] >> (i & 63)) & 1;
}

static inline void bit_set(uint64_t *map, uint64_t i)
{
	map[i >> 6] |= 1ULL << (i & 63);
}

static inline void bit_clear(uint64_t *map, uint64_t i)
{
	map[i >> 6] &= ~(1ULL << (i & 63));
}

/* The bits of [from, to) in @from's word; @to at most the word's end. */
static inline uint64_t bits_mask(uint64_t from, uint64_t to)
{
	return (~0ULL >> (64 - (to - from))) << (from & 63);
}

/* Set or clear bits [from, to), a word at a time. */
static inline void bits_fill(uint64_t *map, uint64_t from, uint64_t to, bool on)
{
	while (from < to) {
		uint64_t end = (from | 63) + 1, m;

		if (end > to)
			end = to;
		m = bits_mask(from, end);
		if (on)
			map[from >> 6] |= m;
		else
			map[from >> 6] &= ~m;
		from = end;
	}
}

/* Is any bit of [from, to) set? */
static inline bool bits_any(const uint64_t *map, uint64_t from, uint64_t to)
{
	while (from < to) {
		uint64_t end = (from | 63) + 1;

		if (end > to)
			end = to;
		if (map[from >> 6] & bits_mask(from, end))
			return true;
		from = end;
	}
	return false;
}

/* First set bit in [from, to), or @to when none. */
static inline uint64_t bits_next_set(const uint64_t *map, uint64_t from, uint64_t to)
{
	while (from < to) {
		uint64_t w = map[from >> 6] >> (from & 63);

		if (w) {
			from += (uint64_t)__builtin_ctzll(w);
			return from < to ? from : to;
		}
		from = (from | 63) + 1;
	}
	return to;
}

/* Four uint32_t at any 4-byte boundary: a vector of the machine (SSE2,
 * NEON), read and written in place without a copy through the stack. */
typedef uint32_t v4u_t __attribute__((vector_size(16), aligned(4), may_alias));
typedef uint64_t v2q_t __attribute__((vector_size(16)));

/* How many of @v[0, @n) continue the run v[0], v[0] + 1, ... (n >= 1,
 * n <= UINT32_MAX): sixteen entries a step while the run lasts. */
static inline size_t kvsi_run_len(const uint32_t *v, size_t n)
{
	const v4u_t four = {4, 4, 4, 4}, eight = {8, 8, 8, 8}, sixteen = {16, 16, 16, 16};
	v4u_t want = {1, 2, 3, 4};
	size_t j = 1;

	want += v[0];
	while (j + 16 <= n) {
		const v4u_t *a = (const v4u_t *)(const void *)(v + j);
		v2q_t d = (v2q_t)(((a[0] ^ want) | (a[1] ^ (want + four))) |
				  ((a[2] ^ (want + eight)) | (a[3] ^ (want + eight + four))));

		if (d[0] | d[1])
			break;
		want += sixteen;
		j += 16;
	}
	while (j + 8 <= n) {
		v2q_t d = (v2q_t)((*(const v4u_t *)(const void *)(v + j) ^ want) |
				  (*(const v4u_t *)(const void *)(v + j + 4) ^ (want + four)));

		if (d[0] | d[1])
			break;
		want += eight;
		j += 8;
	}
	while (j < n && v[j] == v[0] + (uint32_t)j)
		j++;
	return j;
}

/* @out[0, @len) = @base, @base + 1, ...: eight at a time (the compiler does
 * not vectorize the scalar loop at -O2). */
static inline void kvsi_iota_u32(uint32_t *out, uint32_t base, size_t len)
{
	v4u_t v = {0, 1, 2, 3}, w = {4, 5, 6, 7};
	const v4u_t eight = {8, 8, 8, 8};
	size_t j = 0;

	v += base;
	w += base;
	for (; j + 8 <= len; j += 8, v += eight, w += eight) {
		*(v4u_t *)(void *)(out + j) = v;
		*(v4u_t *)(void *)(out + j + 4) = w;
	}
	for (; j < len; j++)
		out[j] = base + (uint32_t)j;
}

/* @arr (of *@cap elements of @size bytes, @n used) with room for one more:
 * @arr itself, or a copy with twice the room (64 at first); NULL, @arr
 * and *@cap unchanged, when there is no memory. */
static inline void *kvsi_grow(void *arr, size_t *cap, size_t n, size_t size)
{
	size_t want = *cap ? 2 * *cap : 64;
	void *nw;

	if (n < *cap)
		return arr;
	if (want > SIZE_MAX / size)
		return NULL;
	nw = realloc(arr, want * size);
	if (nw)
		*cap = want;
	return nw;
}

/* A text grown as it is written (lib/ops/ctl.c's responses, lib/ops/metrics.c's
 * scrape): after a failed growth it takes nothing more and says so in
 * nomem.  Zeroed to start; @first is the first capacity (0: 4096). */
struct kvsi_buf {
	char *buf;
	size_t len, cap, first;
	bool nomem;
};

static inline void kvsi_buf_put(struct kvsi_buf *b, const void *s, size_t n)
{
	if (b->nomem)
		return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : b->first ? b->first : 4096;
		char *nb;

		while (cap < b->len + n)
			cap *= 2;
		if (!(nb = realloc(b->buf, cap))) {
			b->nomem = true;
			return;
		}
		b->buf = nb;
		b->cap = cap;
	}
	memcpy(b->buf + b->len, s, n);
	b->len += n;
}

/* printf into @b; a piece longer than 511 bytes is cut there. */
static inline void kvsi_buf_fmt(struct kvsi_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline void kvsi_buf_fmt(struct kvsi_buf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		kvsi_buf_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static inline uint64_t gcd_u64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/* lib/mem/slab.c, for kvs_pool_free(): free the pages of token locations with
 * no allocation (see there). */
struct kvs_slab;
int kvsi_slab_free_locs(struct kvs_slab *s, size_t n, const int32_t *locs, uint32_t ps);
/* lib/mem/slab.c, for the radix cache's checks and slab-aware eviction: over
 * pages [first, first + n), whether every one is held (count > 0), and how
 * many are held exactly once.  Lock-free reads, stale at once. */
bool kvsi_slab_run_held(struct kvs_slab *s, uint32_t first, uint32_t n);
uint32_t kvsi_slab_run_sole(struct kvs_slab *s, uint32_t first, uint32_t n);
uint64_t kvsi_slab_share_gen(struct kvs_slab *s);
/* lib/mem/slab.c, for the radix cache's eviction: kvs_slab_free_bulk() of the
 * pages of @n runs of consecutive pages, found once by the caller. */
struct kvsi_page_run {
	uint32_t first, len;
};
int kvsi_slab_free_page_runs(struct kvs_slab *s, size_t n, const struct kvsi_page_run *runs);

/* lib/mem/slab_limit.c, for elastic memory (lib/elastic/elastic.c) and slab-aware
 * eviction (lib/cache/radix.c): the run-time limit, a census of the slabs, giving
 * slabs back down to a limit, and reading slabs' occupancy. */
#define KVSI_SLAB_UNMAPPED UINT32_MAX		/* census: no memory behind it */
#define KVSI_SLAB_STUCK (UINT32_MAX - 1)	/* census: in flight or broken */
void kvsi_slab_geom(struct kvs_slab *s, uint32_t *pps, uint64_t *nslabs, size_t *slab_total);
size_t kvsi_slab_limit(struct kvs_slab *s);
int kvsi_slab_set_limit(struct kvs_slab *s, size_t bytes, size_t *old);
void kvsi_slab_census(struct kvs_slab *s, uint32_t *inuse, size_t *mapped, size_t *pooled);
void kvsi_slab_held(struct kvs_slab *s, size_t *mapped, size_t *pooled);
int kvsi_slab_give_back(struct kvs_slab *s, size_t cap);
void kvsi_slab_lock(struct kvs_slab *s);
void kvsi_slab_unlock(struct kvs_slab *s);
uint32_t kvsi_slab_inuse_locked(struct kvs_slab *s, uint64_t i);
uint32_t kvsi_slab_take_in(struct kvs_slab *s, uint64_t i, uint32_t n, uint32_t *out);
size_t kvsi_slab_move_refs(struct kvs_slab *s, size_t n, const uint32_t *from, const uint32_t *to,
			   const uint16_t *expect, bool *moved);

/* lib/tier/hostpool.c, for the store (lib/tier/storage.c) and lib/cache/hiradix.c: the
 * bytes of a host page (every buffer's piece, whatever the layout), and
 * copying held page @page to (@to_buf) or from one page-first buffer of
 * that many bytes; @buf NULL only checks that the page is held.  0, or -1
 * with errno EINVAL. */
struct kvs_hpool;
size_t kvsi_hpool_page_bytes(const struct kvs_hpool *hp);
int kvsi_hpool_page_copy(struct kvs_hpool *hp, int32_t page, void *buf, bool to_buf);

/* lib/mem/pool.c, for the host pool (lib/tier/hostpool.c): the driver a pool was
 * built on and its model's shape. */
struct kvs_pool;
struct kvs_drv;
struct kvs_model;
struct kvs_drv *kvsi_pool_drv(const struct kvs_pool *p);
const struct kvs_model *kvsi_pool_model(const struct kvs_pool *p);
/* ... and, for lib/elastic/elastic.c, the lock its calls take (level 0). */
pthread_mutex_t *kvsi_pool_elastic(struct kvs_pool *p);

/*
 * ThreadSanitizer cannot see an RCU grace period (liburcu is not
 * instrumented): that every reader's critical section that could see an
 * object ended before call_rcu()'s callback frees or recycles it.  A
 * structure with RCU readers says it to TSan with one sync object: each
 * reader releases it as it leaves its read-side critical section, the
 * writer releases it before call_rcu(), and each callback acquires it
 * first.  No-ops unless built with -fsanitize=thread.
 */
#if defined(__SANITIZE_THREAD__)
#define KVSI_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVSI_TSAN 1
#endif
#endif
#ifdef KVSI_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define KVSI_TSAN_RELEASE(p) __tsan_release(p)
#define KVSI_TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define KVSI_TSAN_RELEASE(p) ((void)(p))
#define KVSI_TSAN_ACQUIRE(p) ((void)(p))
#endif

#endif /* KVSLAB_INTERNAL_H */
