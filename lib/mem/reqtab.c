/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/reqtab.c - the request table: SGLang's req_to_token_pool, a
 * max_reqs x max_context matrix of int32 KV locations (row = a running
 * request's slot, column = a token position), and the allocator of its rows.
 *
 * What it owns.  One reservation on the driver, rounded up to the driver's
 * granularity, backed by one chunk, mapped and given KVS_ACCESS_RW once at
 * creation: on a GPU the table is device memory, and attention kernels read
 * a request's page table straight from it (the address and row stride are
 * exported by kvs_reqtab_table()).  Beside it, a host mirror of the same
 * bytes, from kvs_drv_host_alloc() so that on cuda the copies out of it are
 * truly asynchronous.  The mirror is the table's truth on the host: reads
 * are served from it without a driver call, and a write stores into it and
 * then queues kvs_drv_copy_htod() of exactly the bytes written, from the
 * mirror to the same offset of the device table.  Copies on one driver run
 * in submission order, so the device table converges to the mirror; after
 * kvs_reqtab_sync() (kvs_drv_synchronize()) the two are equal.  Both start
 * zeroed, as SGLang's torch.zeros table does.
 *
 * The mirror is the source of copies that may still be running, and the
 * driver's rule is that a copy's source must not change until it is done.
 * Every slot therefore has an event, recorded by each copy of a write to its
 * row; before a write stores into a row whose last copy may still be queued
 * (slot->pending), it waits for that event.  In steady state (a decode step
 * appends one location per request, a step apart) the copy is long done and
 * the wait is one query.  The event belongs to the slot, not the request, so
 * a slot freed with a copy in flight and handed to another request is safe
 * too: the new owner's first write waits.
 *
 * The slot allocator is lock-free, for schedulers that admit and retire
 * requests from several threads:
 *  - a Treiber stack of free slots.  head packs an ABA tag in its high 32
 *    bits and (top slot + 1) in its low 32 (0: empty); slot i's link,
 *    slots[i].next, holds (next slot + 1).  Every successful compare-and-
 *    swap of head bumps the tag, so a pop that read a stale link (its top
 *    was popped and pushed back meanwhile) fails its CAS and retries.  The
 *    links are atomics because a popper may read a link while a pusher
 *    rewrites it; the stale value is then discarded by the failed CAS.
 *  - nfree, the number of free slots, which kvs_reqtab_alloc() decrements
 *    by n with a CAS *before* popping.  A free pushes and only then
 *    increments nfree, so at every instant the stack holds at least as many
 *    slots as the reservations not yet popped: a thread that reserved n
 *    pops n without ever finding the stack empty, and an allocation is all
 *    or nothing without taking slots only to give them back.
 *  - slots[i].state, FREE or USED.  A free flips USED to FREE with a CAS, so
 *    of two frees of one slot exactly one succeeds and the other gets
 *    EINVAL with nothing changed, and write/read/row reject a slot that is
 *    not allocated.
 * A slot's row, pending flag and event are touched only by its owner.
 * Ownership passes through the stack: a free's release CAS on head
 * happens-before the acquire of the pop that takes the slot, so the next
 * owner sees everything the last one did.
 *
 * Locking.  None of the table's own.  alloc, free and available are
 * lock-free and MT-Safe.  write, read and row on one slot are the slot
 * owner's business: two threads must not call them on the same slot at
 * once, nor free a slot while another uses it.  Different slots may be
 * written from different threads concurrently: their mirror bytes and their
 * copies' source and destination bytes are disjoint rows, the driver
 * serializes submission under its own lock, and the order between copies of
 * different rows does not matter because they do not overlap.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvslab/reqtab.h"

enum { SLOT_FREE = 0, SLOT_USED = 1 };

/* Copies of at most this many entries save the old values on the stack. */
#define SAVE_STACK 256

struct rt_slot {
	_Atomic uint32_t state;		/* SLOT_FREE or SLOT_USED */
	_Atomic uint32_t next;		/* free stack link: next slot + 1, 0 ends */
	bool pending;			/* owner only: ev may not be complete */
	kvs_event_t *ev;		/* recorded by every copy of this row */
};

struct kvs_reqtab {
	kvs_drv_t *drv;
	uint32_t max_reqs, max_context;
	size_t stride;			/* bytes of a row */
	size_t bytes;			/* bytes of the table */
	size_t map_size;		/* bytes reserved and mapped */
	kvs_devptr_t base;
	kvs_chunk_t *chunk;
	int32_t *mirror;
	struct rt_slot *slots;
	_Atomic uint64_t head;		/* tag << 32 | (top slot + 1) */
	_Atomic uint32_t nfree;
};

#define HEAD_IDX(h) ((uint32_t)(h))
#define HEAD_TAG(h) ((uint32_t)((h) >> 32))
#define HEAD_MAKE(tag, idx) (((uint64_t)(tag) << 32) | (uint32_t)(idx))

/* --------------------------------------------------------- free stack */

static void stack_push(struct kvs_reqtab *t, uint32_t slot)
{
	uint64_t h = atomic_load_explicit(&t->head, memory_order_relaxed), nh;

	do {
		atomic_store_explicit(&t->slots[slot].next, HEAD_IDX(h), memory_order_relaxed);
		nh = HEAD_MAKE(HEAD_TAG(h) + 1, slot + 1);
	} while (!atomic_compare_exchange_weak_explicit(&t->head, &h, nh, memory_order_release,
							memory_order_relaxed));
}

/* Pop a slot; false when the stack is empty. */
static bool stack_pop(struct kvs_reqtab *t, uint32_t *slot)
{
	uint64_t h = atomic_load_explicit(&t->head, memory_order_acquire), nh;
	uint32_t top, next;

	do {
		top = HEAD_IDX(h);
		if (top == 0)
			return false;
		next = atomic_load_explicit(&t->slots[top - 1].next, memory_order_relaxed);
		nh = HEAD_MAKE(HEAD_TAG(h) + 1, next);
	} while (!atomic_compare_exchange_weak_explicit(&t->head, &h, nh, memory_order_acquire,
							memory_order_acquire));
	*slot = top - 1;
	return true;
}

/* Give a slot back: state first (it is no longer anyone's), then the stack,
 * then the count, so that nfree never exceeds what the stack can deliver. */
static void slot_release(struct kvs_reqtab *t, uint32_t slot)
{
	atomic_store_explicit(&t->slots[slot].state, SLOT_FREE, memory_order_relaxed);
	stack_push(t, slot);
	atomic_fetch_add_explicit(&t->nfree, 1, memory_order_release);
}

/* ------------------------------------------------------------ creation */

/* Undo kvs_reqtab_create() as far as it got; errno of the first failure. */
static int release_all(struct kvs_reqtab *t, bool reserved, bool mapped)
{
	int e = 0;
	uint32_t i;

	/* Copies read the mirror and write the table: wait for them before
	 * either goes away (an unmap would wait too, a host_free would not). */
	if (t->mirror && kvs_drv_synchronize(t->drv) < 0)
		e = errno;
	if (t->slots)
		for (i = 0; i < t->max_reqs; i++)
			kvs_event_destroy(t->slots[i].ev);
	if (mapped && kvs_drv_unmap(t->drv, t->base, t->map_size) < 0) {
		e = e ? e : errno;
	} else {
		mapped = false;
		if (t->chunk && kvs_drv_chunk_release(t->drv, t->chunk) < 0)
			e = e ? e : errno;
		else
			t->chunk = NULL;
		if (reserved && kvs_drv_unreserve(t->drv, t->base) < 0)
			e = e ? e : errno;
		else
			reserved = false;
	}
	if (t->mirror && kvs_drv_host_free(t->drv, t->mirror) < 0)
		e = e ? e : errno;
	else
		t->mirror = NULL;
	/* What the driver refused stays with it, parked: it tries again at its
	 * next allocations, and gives it back at close at the latest. */
	if (mapped || t->chunk || reserved || t->mirror)
		kvsi_drv_park(t->drv, t->base, mapped ? t->map_size : 0, reserved, t->chunk,
			      t->mirror);
	free(t->slots);
	free(t);
	return e ? kvs_fail(e) : 0;
}

/**
 * kvs_reqtab_create() - create a request table on @drv.
 * @drv: driver; must outlive the table.
 * @max_reqs: rows (slots), 1 to UINT32_MAX - 1.
 * @max_context: entries a row, at least 1.
 *
 * Reserves the table's bytes rounded up to the driver's granularity, backs
 * them with one chunk, maps it with read-write access, allocates the host
 * mirror and one event per slot, and zeroes both copies of the table.
 * Every slot is free; slot 0 is the first handed out.
 *
 * Context: MT-Safe.  Blocks until the zeroing copy is done.
 * Return: the table, or NULL with errno EINVAL (NULL driver, a zero or
 * too large dimension), ENOMEM (the table's size overflows, or out of
 * memory), or the errno of the driver call that failed.
 */
KVS_EXPORT kvs_reqtab_t *kvs_reqtab_create(kvs_drv_t *drv, uint32_t max_reqs,
					   uint32_t max_context)
{
	struct kvs_reqtab *t;
	size_t bytes, gran, map_size;
	bool reserved = false, mapped = false;
	uint32_t i;
	int e;

	if (!drv || max_reqs == 0 || max_reqs == UINT32_MAX || max_context == 0) {
		errno = EINVAL;
		return NULL;
	}
	gran = kvs_drv_granularity(drv);
	if (gran == 0) {
		errno = EINVAL;
		return NULL;
	}
	if (__builtin_mul_overflow((size_t)max_reqs, (size_t)max_context * sizeof(int32_t),
				   &bytes) ||
	    __builtin_add_overflow(bytes, gran - 1, &map_size)) {
		errno = ENOMEM;
		return NULL;
	}
	map_size = map_size / gran * gran;
	t = calloc(1, sizeof(*t));
	if (!t) {
		errno = ENOMEM;
		return NULL;
	}
	t->drv = drv;
	t->max_reqs = max_reqs;
	t->max_context = max_context;
	t->stride = (size_t)max_context * sizeof(int32_t);
	t->bytes = bytes;
	t->map_size = map_size;
	t->slots = calloc(max_reqs, sizeof(*t->slots));
	if (!t->slots) {
		e = ENOMEM;
		goto fail;
	}
	if (kvs_drv_reserve(drv, map_size, &t->base) < 0)
		goto fail_errno;
	reserved = true;
	if (kvs_drv_chunk_create(drv, map_size, &t->chunk) < 0)
		goto fail_errno;
	if (kvs_drv_map(drv, t->base, t->chunk) < 0)
		goto fail_errno;
	mapped = true;
	if (kvs_drv_set_access(drv, t->base, map_size, KVS_ACCESS_RW) < 0)
		goto fail_errno;
	if (kvs_drv_host_alloc(drv, bytes, (void **)&t->mirror) < 0)
		goto fail_errno;
	memset(t->mirror, 0, bytes);
	for (i = 0; i < max_reqs; i++) {
		if (kvs_event_create(drv, &t->slots[i].ev) < 0)
			goto fail_errno;
		atomic_init(&t->slots[i].state, SLOT_FREE);
		/* Slot i links to i + 1, so pops hand out 0, 1, 2, ... */
		atomic_init(&t->slots[i].next, i + 1 < max_reqs ? i + 2 : 0);
	}
	atomic_init(&t->head, HEAD_MAKE(0, 1));
	atomic_init(&t->nfree, max_reqs);
	/* A new chunk's contents are unspecified on a GPU. */
	if (kvs_drv_copy_htod(drv, t->base, t->mirror, bytes, NULL) < 0 ||
	    kvs_drv_synchronize(drv) < 0)
		goto fail_errno;
	return t;

fail_errno:
	e = errno;
fail:
	release_all(t, reserved, mapped);
	errno = e;
	return NULL;
}

/**
 * kvs_reqtab_destroy() - free the table and give its memory back.
 * @tab: table, or NULL.
 *
 * Waits for the driver's queued copies, then unmaps, releases and
 * unreserves the device table and frees the mirror.  Slots still allocated
 * are freed with it.  The device must no longer read the table.
 *
 * Context: MT-Unsafe: the last call on @tab.  Blocks.
 * Return: 0, or -1 with the errno of the first driver call that failed
 * (everything is freed anyway).
 */
KVS_EXPORT int kvs_reqtab_destroy(kvs_reqtab_t *t)
{
	if (!t)
		return 0;
	return release_all(t, true, true);
}

/* ------------------------------------------------------------ the slots */

/**
 * kvs_reqtab_alloc() - allocate @n slots.
 * @tab: table.
 * @n: slots wanted; 0 allocates nothing and succeeds.
 * @slots: receives the n slot indices.
 *
 * All or nothing: the count of free slots is reserved first, then the slots
 * are popped.  A new slot's row holds what its last owner wrote (zeros at
 * first).
 *
 * Context: MT-Safe, lock-free.
 * Return: 0, or -1 with errno EINVAL (NULL arguments) or ENOMEM (fewer
 * than @n slots free).
 */
KVS_EXPORT int kvs_reqtab_alloc(kvs_reqtab_t *t, uint32_t n, uint32_t *slots)
{
	uint32_t avail, i;

	if (!t || (!slots && n))
		return kvs_fail(EINVAL);
	if (n == 0)
		return 0;
	avail = atomic_load_explicit(&t->nfree, memory_order_relaxed);
	do {
		if (avail < n)
			return kvs_fail(ENOMEM);
	} while (!atomic_compare_exchange_weak_explicit(&t->nfree, &avail, avail - n,
							memory_order_acquire, memory_order_relaxed));
	for (i = 0; i < n; i++) {
		if (unlikely(!stack_pop(t, &slots[i]))) {
			/* Cannot happen (see the essay); keep the books right. */
			atomic_fetch_add_explicit(&t->nfree, n - i, memory_order_relaxed);
			while (i-- > 0)
				slot_release(t, slots[i]);
			return kvs_fail(ENOMEM);
		}
		atomic_store_explicit(&t->slots[slots[i]].state, SLOT_USED, memory_order_relaxed);
	}
	return 0;
}

/**
 * kvs_reqtab_free() - free one slot.
 * @tab: table.
 * @slot: an allocated slot.
 *
 * The row keeps its contents; copies of it still queued finish, and the
 * slot's next owner waits for them before its first write.
 *
 * Context: MT-Safe, lock-free.  No other thread may use @slot meanwhile.
 * Return: 0, or -1 with errno EINVAL (@slot out of range or free; nothing
 * changes).
 */
KVS_EXPORT int kvs_reqtab_free(kvs_reqtab_t *t, uint32_t slot)
{
	uint32_t used = SLOT_USED;

	if (!t || slot >= t->max_reqs)
		return kvs_fail(EINVAL);
	if (!atomic_compare_exchange_strong_explicit(&t->slots[slot].state, &used, SLOT_FREE,
						     memory_order_acq_rel, memory_order_relaxed))
		return kvs_fail(EINVAL);
	stack_push(t, slot);
	atomic_fetch_add_explicit(&t->nfree, 1, memory_order_release);
	return 0;
}

/**
 * kvs_reqtab_available() - free slots.
 * @tab: table.
 *
 * A snapshot: other threads may allocate or free at any time.
 *
 * Context: MT-Safe, lock-free.
 * Return: the count; 0 for NULL.
 */
KVS_EXPORT uint32_t kvs_reqtab_available(const kvs_reqtab_t *t)
{
	return t ? atomic_load_explicit(&t->nfree, memory_order_relaxed) : 0;
}

/* 0 when @slot is in range and allocated. */
static int slot_check(const struct kvs_reqtab *t, uint32_t slot)
{
	if (!t || slot >= t->max_reqs ||
	    atomic_load_explicit(&t->slots[slot].state, memory_order_acquire) != SLOT_USED)
		return kvs_fail(EINVAL);
	return 0;
}

static int range_check(const struct kvs_reqtab *t, uint32_t pos, uint32_t n)
{
	return (uint64_t)pos + n > t->max_context ? kvs_fail(ERANGE) : 0;
}

/* ------------------------------------------------------------- the rows */

/* Wait until no copy out of @s's row may still read it. */
static int slot_quiesce(struct rt_slot *s)
{
	int r;

	if (!s->pending)
		return 0;
	r = kvs_event_query(s->ev);
	if (r == 0)
		r = kvs_event_wait(s->ev) < 0 ? -1 : 1;
	if (r < 0)
		return -1;
	s->pending = false;
	return 0;
}

/**
 * kvs_reqtab_write() - set positions @pos .. @pos + @n - 1 of a row.
 * @tab: table.
 * @slot: an allocated slot.
 * @pos: first position.
 * @n: entries; 0 does nothing.
 * @locs: the n KV locations.
 *
 * Stores into the mirror, then queues a copy of the n entries to the device
 * table.  If the row's previous copy may still be queued, waits for it
 * first (the mirror is that copy's source).  The device holds the new
 * entries once the copy is done: after kvs_reqtab_sync(), or for a kernel
 * queued on the driver's copy stream after it.
 *
 * Context: MT-Safe for different slots; the caller must own @slot and no
 * other thread may read or write it meanwhile.  May block (see above).
 * Return: 0, or -1 with errno EINVAL (NULL arguments, @slot out of range or
 * free), ERANGE (@pos + @n > max_context), ENOMEM, or the errno of the
 * copy.  On failure the row is unchanged.
 */
KVS_EXPORT int kvs_reqtab_write(kvs_reqtab_t *t, uint32_t slot, uint32_t pos, uint32_t n,
				const int32_t *locs)
{
	int32_t stackbuf[SAVE_STACK], *old = stackbuf, *row;
	struct rt_slot *s;
	size_t nbytes, off;
	int e;

	if (slot_check(t, slot) < 0 || (!locs && n))
		return kvs_fail(EINVAL);
	if (range_check(t, pos, n) < 0)
		return -1;
	if (n == 0)
		return 0;
	s = &t->slots[slot];
	if (slot_quiesce(s) < 0)
		return -1;
	nbytes = (size_t)n * sizeof(int32_t);
	off = (size_t)slot * t->stride + (size_t)pos * sizeof(int32_t);
	row = t->mirror + off / sizeof(int32_t);
	if (n > SAVE_STACK) {
		old = malloc(nbytes);
		if (!old)
			return kvs_fail(ENOMEM);
	}
	memcpy(old, row, nbytes);
	memmove(row, locs, nbytes);
	if (kvs_drv_copy_htod(t->drv, t->base + off, row, nbytes, s->ev) == 0) {
		s->pending = true;
		if (old != stackbuf)
			free(old);
		return 0;
	}
	/* Nothing should have been queued, but a copy queued whose event
	 * failed to record cannot be told apart: drain, put the old entries
	 * back, and push them after it, so mirror and device agree again. */
	e = errno;
	kvs_drv_synchronize(t->drv);
	memcpy(row, old, nbytes);
	if (kvs_drv_copy_htod(t->drv, t->base + off, row, nbytes, NULL) == 0)
		kvs_drv_synchronize(t->drv);
	s->pending = false;
	if (old != stackbuf)
		free(old);
	return kvs_fail(e);
}

/**
 * kvs_reqtab_read() - get positions @pos .. @pos + @n - 1 of a row.
 * @tab: table.
 * @slot: an allocated slot.
 * @pos: first position.
 * @n: entries; 0 does nothing.
 * @out: receives the n entries.
 *
 * Reads the host mirror: no driver call, and the entries of every write
 * made so far, whether or not its copy to the device is done.
 *
 * Context: MT-Safe for different slots; no thread may write @slot
 * meanwhile.
 * Return: 0, or -1 with errno EINVAL (NULL arguments, @slot out of range or
 * free) or ERANGE (@pos + @n > max_context).
 */
KVS_EXPORT int kvs_reqtab_read(const kvs_reqtab_t *t, uint32_t slot, uint32_t pos, uint32_t n,
			       int32_t *out)
{
	if (slot_check(t, slot) < 0 || (!out && n))
		return kvs_fail(EINVAL);
	if (range_check(t, pos, n) < 0)
		return -1;
	if (n)
		memcpy(out, t->mirror + (size_t)slot * t->max_context + pos,
		       (size_t)n * sizeof(int32_t));
	return 0;
}

/**
 * kvs_reqtab_row() - the mirror's row of a slot, for reads without a copy.
 * @tab: table.
 * @slot: an allocated slot.
 *
 * The pointer stays valid until the table is destroyed; its max_context
 * entries are the slot's while the caller owns it.
 *
 * Context: as kvs_reqtab_read().
 * Return: the row, or NULL with errno EINVAL (@slot out of range or free).
 */
KVS_EXPORT const int32_t *kvs_reqtab_row(const kvs_reqtab_t *t, uint32_t slot)
{
	if (slot_check(t, slot) < 0)
		return NULL;
	return t->mirror + (size_t)slot * t->max_context;
}

/**
 * kvs_reqtab_sync() - wait until the device table equals the mirror.
 * @tab: table.
 *
 * Waits for every copy queued on the driver (kvs_drv_synchronize()), the
 * table's and any other's.  Rows written concurrently by other threads may
 * have copies queued after the call started.
 *
 * Context: MT-Safe.  Blocks.
 * Return: 0, or -1 with errno EINVAL (NULL) or the driver's (EIO: a copy
 * failed).
 */
KVS_EXPORT int kvs_reqtab_sync(kvs_reqtab_t *t)
{
	if (!t)
		return kvs_fail(EINVAL);
	return kvs_drv_synchronize(t->drv);
}

/* ------------------------------------------------------------ geometry */

/**
 * kvs_reqtab_table() - where the device table is.
 * @tab: table.
 * @ptr: receives the driver address of row 0: slot s, position p is the
 *       int32 at ptr + s * stride + p * 4.
 * @row_stride_bytes: receives the bytes between rows (may be NULL).
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_reqtab_table(const kvs_reqtab_t *t, kvs_devptr_t *ptr,
				size_t *row_stride_bytes)
{
	if (!t || !ptr)
		return kvs_fail(EINVAL);
	*ptr = t->base;
	if (row_stride_bytes)
		*row_stride_bytes = t->stride;
	return 0;
}

/**
 * kvs_reqtab_max_reqs() - rows of the table.
 * @tab: table.
 *
 * Context: MT-Safe.
 * Return: max_reqs; 0 for NULL.
 */
KVS_EXPORT uint32_t kvs_reqtab_max_reqs(const kvs_reqtab_t *t)
{
	return t ? t->max_reqs : 0;
}

/**
 * kvs_reqtab_max_context() - entries a row.
 * @tab: table.
 *
 * Context: MT-Safe.
 * Return: max_context; 0 for NULL.
 */
KVS_EXPORT uint32_t kvs_reqtab_max_context(const kvs_reqtab_t *t)
{
	return t ? t->max_context : 0;
}
