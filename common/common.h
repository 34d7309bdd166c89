/* SPDX-License-Identifier: MIT */
/*
 * common/common.h - what the core (lib/) and the driver shim (drv/) both
 * need: the export macro, branch hints, the monotonic clock, the one failure
 * convention, overflow-checked size arithmetic and intrusive doubly linked
 * lists.  Nothing here knows about slabs, trees or drivers; lib/internal.h
 * holds what only the core shares.  Everything is static inline or a macro,
 * so the header adds no symbol to the library.
 */
#ifndef KVSLAB_COMMON_H
#define KVSLAB_COMMON_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

/*
 * Intrusive doubly linked lists: a node type has members prev and next, a
 * list is a pointer to its first node (NULL when empty).
 */
#define DLIST_PUSH(head, n)                                                   \
	do {                                                                  \
		(n)->prev = NULL;                                             \
		(n)->next = (head);                                           \
		if (head)                                                     \
			(head)->prev = (n);                                   \
		(head) = (n);                                                 \
	} while (0)

#define DLIST_DEL(head, n)                                                    \
	do {                                                                  \
		if ((n)->prev)                                                \
			(n)->prev->next = (n)->next;                          \
		else                                                          \
			(head) = (n)->next;                                   \
		if ((n)->next)                                                \
			(n)->next->prev = (n)->prev;                          \
	} while (0)

#endif /* KVSLAB_COMMON_H */
