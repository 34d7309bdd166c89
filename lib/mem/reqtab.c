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
 * bytes.  The mirror is the table's truth on the host: reads are served
 * from it without a driver call, and a write stores into it and then queues
 * a copy of exactly the bytes written to the same offset of the device
 * table.  Copies on one driver run in submission order, so the device table
 * converges to the mirror; after kvs_reqtab_sync() (kvs_drv_synchronize())
 * the two are equal.  Both start zeroed, as SGLang's torch.zeros table does.
 *
 * Staging ring.  A copy's source must not change until the copy is done,
 * so the copies do not read the mirror: each submission first copies the
 * bytes it sends into a ring of pinned host memory (kvs_drv_host_alloc(),
 * so that on cuda the copies are truly asynchronous), and the device copies
 * read the ring.  The ring is RING_SEGS segments; a submission fills the
 * current segment, and when the next one does not fit, the current one's
 * event is recorded on the copy queue and the next segment is taken, after
 * a query (and, only when the device is a whole ring behind, a wait) of
 * that segment's event.  So a write never waits for a row's previous copy,
 * and an event is recorded once a segment, not once a write.
 *
 * Batches.  kvs_reqtab_write_batch() validates every entry first (a bad
 * one changes nothing), stores them into the mirror in order (later entries
 * win, as sequential writes would), and sends the step in one submission:
 * one copy per slot written, covering the span of the row the batch wrote
 * (a slot written twice is one copy of the union, read from the mirror
 * after both stores, so the batch's destinations never overlap, as
 * kvs_drv_copy_batch() requires).  A slot is found twice with a per-slot
 * stamp: the batch's generation, owner-only like the row.  A submission
 * is kvs_drv_copy_batch(), or kvs_drv_copy_htod() for a single copy; it is
 * split only where it crosses a segment of the ring.  If the driver fails,
 * the old entries go back into the mirror and, after the queue drained, to
 * the device.  The flows use the same machinery in two halves:
 * kvsi_reqtab_store() writes the mirror, kvsi_reqtab_push() sends the
 * ranges of a whole call at its end.
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
 * A slot's row and stamp are touched only by its owner.
 * Ownership passes through the stack: a free's release CAS on head
 * happens-before the acquire of the pop that takes the slot, so the next
 * owner sees everything the last one did.
 *
 * Locking.  ring_lock (a mutex) protects the ring: staging into it and
 * submitting what was staged are one step under it, so the segment's event
 * is recorded after every copy out of the segment.  It is taken before the
 * driver's lock, never after.  alloc, free and available are lock-free and
 * MT-Safe.  write, read and row on one slot are the slot owner's business:
 * two threads must not call them on the same slot at once, nor free a slot
 * while another uses it.  Different slots may be written from different
 * threads concurrently: their mirror bytes and their copies' destinations
 * are disjoint rows, and the order between copies of different rows does
 * not matter because they do not overlap.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "mem/reqtab_int.h"

enum { SLOT_FREE = 0, SLOT_USED = 1 };

/* Segments of the staging ring, and the most bytes of one. */
#define RING_SEGS 8
#define SEG_MAX (64 * 1024)
/* Batches of at most this many slots keep their spans on the stack. */
#define GRP_STACK 64
/* Old entries saved on the stack up to this many. */
#define SAVE_STACK 256
/* Copies gathered before a submission, at most. */
#define COPY_MAX 128

struct rt_slot {
	_Atomic uint32_t state;		/* SLOT_FREE or SLOT_USED */
	_Atomic uint32_t next;		/* free stack link: next slot + 1, 0 ends */
	uint64_t stamp;			/* owner only: generation of the last batch */
	uint32_t grp;			/* owner only: its span in that batch */
};

struct rt_seg {
	kvs_event_t *ev;		/* recorded after the segment's copies */
	bool dirty;			/* copies queued since ev was recorded */
	bool pending;			/* ev may not be complete */
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
	_Atomic uint64_t gen;		/* batches so far */
	pthread_mutex_t ring_lock;
	uint8_t *ring;			/* RING_SEGS x seg_bytes, pinned */
	size_t seg_bytes;
	unsigned int cur;		/* segment being filled */
	size_t fill;			/* its bytes used */
	struct rt_seg seg[RING_SEGS];
};

/* A span of one slot's row that a submission sends: [lo, hi). */
struct rt_grp {
	uint32_t slot, lo, hi;
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
	if ((t->mirror || t->ring) && kvs_drv_synchronize(t->drv) < 0)
		e = errno;
	for (i = 0; i < RING_SEGS; i++)
		kvs_event_destroy(t->seg[i].ev);
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
	if (t->ring && kvs_drv_host_free(t->drv, t->ring) < 0) {
		e = e ? e : errno;
		kvsi_drv_park(t->drv, 0, 0, false, NULL, t->ring);
	}
	/* What the driver refused stays with it, parked: it tries again at its
	 * next allocations, and gives it back at close at the latest. */
	if (mapped || t->chunk || reserved || t->mirror)
		kvsi_drv_park(t->drv, t->base, mapped ? t->map_size : 0, reserved, t->chunk,
			      t->mirror);
	pthread_mutex_destroy(&t->ring_lock);
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
 * mirror and the staging ring (RING_SEGS segments of up to 64 KiB, no more
 * than the table's bytes each) with an event a segment, and zeroes both
 * copies of the table.
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
	t->seg_bytes = bytes < SEG_MAX ? bytes : SEG_MAX;
	pthread_mutex_init(&t->ring_lock, NULL);
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
	if (kvs_drv_host_alloc(drv, RING_SEGS * t->seg_bytes, (void **)&t->ring) < 0)
		goto fail_errno;
	for (i = 0; i < RING_SEGS; i++)
		if (kvs_event_create(drv, &t->seg[i].ev) < 0)
			goto fail_errno;
	for (i = 0; i < max_reqs; i++) {
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
 * The row keeps its contents; copies of it still queued finish (they read
 * the staging ring, not the row, so the next owner may write at once).
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

/* ------------------------------------------------------- staging ring */

/* Send what the current segment gathered: @nc copies out of it.  Ring lock
 * held. */
static int ring_flush(struct kvs_reqtab *t, kvs_copy_t *c, size_t *nc)
{
	int rc;

	if (*nc == 0)
		return 0;
	if (*nc == 1)
		rc = kvs_drv_copy_htod(t->drv, c[0].dst, (const void *)(uintptr_t)c[0].src,
				       c[0].bytes, NULL);
	else
		rc = kvs_drv_copy_batch(t->drv, KVS_COPY_HTOD, c, *nc, NULL);
	if (rc < 0)
		return -1;
	t->seg[t->cur].dirty = true;
	*nc = 0;
	return 0;
}

/* Close the current segment (record its event after its copies) and take
 * the next one once the copies out of it are done.  Ring lock held. */
static void ring_next(struct kvs_reqtab *t)
{
	struct rt_seg *s = &t->seg[t->cur];
	unsigned int i;

	if (s->dirty) {
		if (kvs_drv_copy_batch(t->drv, KVS_COPY_HTOD, NULL, 0, s->ev) == 0) {
			s->pending = true;
		} else {
			/* No event to wait for later: wait for everything now. */
			kvs_drv_synchronize(t->drv);
			for (i = 0; i < RING_SEGS; i++)
				t->seg[i].pending = false;
		}
		s->dirty = false;
	}
	t->cur = (t->cur + 1) % RING_SEGS;
	t->fill = 0;
	s = &t->seg[t->cur];
	/* A wait that fails (a copy failed) still means the copies are over;
	 * kvs_reqtab_sync() reports the failure. */
	if (s->pending && kvs_event_query(s->ev) == 0)
		kvs_event_wait(s->ev);
	s->pending = false;
}

/* Queue copies of the spans @g[0..ng) from the mirror to the device table:
 * staged through the ring, one submission for all of them unless they
 * cross a segment.  Returns 0 or -1 with errno; on failure some of the
 * spans may have been queued (the caller repairs). */
static int rt_submit(struct kvs_reqtab *t, const struct rt_grp *g, size_t ng)
{
	kvs_copy_t stackc[GRP_STACK], *c = stackc;
	size_t cap = GRP_STACK, nc = 0, i;
	int rc = 0;

	if (ng > GRP_STACK) {
		cap = ng < COPY_MAX ? ng : COPY_MAX;
		c = malloc(cap * sizeof(*c));
		if (!c)
			return kvs_fail(ENOMEM);
	}
	pthread_mutex_lock(&t->ring_lock);
	for (i = 0; i < ng && rc == 0; i++) {
		size_t off = (size_t)g[i].slot * t->stride + (size_t)g[i].lo * sizeof(int32_t);
		size_t left = (size_t)(g[i].hi - g[i].lo) * sizeof(int32_t);
		const uint8_t *src = (const uint8_t *)t->mirror + off;

		while (left && rc == 0) {
			size_t take = t->seg_bytes - t->fill;
			uint8_t *dst;

			if (take == 0 || nc == cap) {
				rc = ring_flush(t, c, &nc);
				if (rc == 0 && take == 0)
					ring_next(t);
				continue;
			}
			if (take > left)
				take = left;
			dst = t->ring + (size_t)t->cur * t->seg_bytes + t->fill;
			memcpy(dst, src, take);
			c[nc].dst = t->base + off;
			c[nc].src = (uintptr_t)dst;
			c[nc].bytes = take;
			nc++;
			t->fill += take;
			src += take;
			off += take;
			left -= take;
		}
	}
	if (rc == 0)
		rc = ring_flush(t, c, &nc);
	pthread_mutex_unlock(&t->ring_lock);
	if (c != stackc) {
		int e = errno;

		free(c);
		errno = e;
	}
	return rc;
}

/* ------------------------------------------------------------- the rows */

/* Check the entries of a batch and gather them into spans, one a slot, in
 * the order of each slot's first entry.  @g has room for @n; *@ng receives
 * the count.  Changes nothing but the slots' stamps. */
static int rt_gather(struct kvs_reqtab *t, const kvs_reqtab_write_t *w, size_t n,
		     bool need_locs, struct rt_grp *g, size_t *ng)
{
	uint64_t gen = atomic_fetch_add_explicit(&t->gen, 1, memory_order_relaxed) + 1;
	size_t i, k = 0;

	for (i = 0; i < n; i++) {
		struct rt_slot *s;
		uint32_t end;

		if (slot_check(t, w[i].slot) < 0 || (need_locs && !w[i].locs && w[i].n))
			return kvs_fail(EINVAL);
		if (range_check(t, w[i].pos, w[i].n) < 0)
			return -1;
		if (w[i].n == 0)
			continue;
		s = &t->slots[w[i].slot];
		end = w[i].pos + w[i].n;
		if (s->stamp != gen) {
			s->stamp = gen;
			s->grp = (uint32_t)k;
			g[k].slot = w[i].slot;
			g[k].lo = w[i].pos;
			g[k].hi = end;
			k++;
			continue;
		}
		if (w[i].pos < g[s->grp].lo)
			g[s->grp].lo = w[i].pos;
		if (end > g[s->grp].hi)
			g[s->grp].hi = end;
	}
	*ng = k;
	return 0;
}

static int32_t *mirror_at(const struct kvs_reqtab *t, uint32_t slot, uint32_t pos)
{
	return t->mirror + (size_t)slot * t->max_context + pos;
}

/**
 * kvs_reqtab_write_batch() - set many ranges of rows with one submission.
 * @tab: table.
 * @w: @n writes, each {slot, pos, n, locs} as kvs_reqtab_write() takes
 *     them; a slot may appear more than once (later entries win).
 * @n: writes; 0 does nothing.
 *
 * Checks every entry, stores them into the mirror in order, then queues the
 * step's copies to the device table: one copy per slot (the span of its row
 * the batch wrote), staged through the ring, in one kvs_drv_copy_batch()
 * (kvs_drv_copy_htod() for one slot); more only where the step crosses a
 * segment of the ring.  Never waits for an earlier write's copy, unless the
 * device is a whole ring of copies behind.
 *
 * Context: MT-Safe for different slots; the caller must own every slot of
 * @w, and no other thread may read or write them meanwhile.
 * Return: 0, or -1 with errno EINVAL (NULL arguments, a slot out of range or
 * free), ERANGE (pos + n > max_context), ENOMEM, or the errno of the copy.
 * On failure no row changes (a driver failure: the old entries are put
 * back, and copied back after the queue drained).
 */
KVS_EXPORT int kvs_reqtab_write_batch(kvs_reqtab_t *t, const kvs_reqtab_write_t *w, size_t n)
{
	struct rt_grp stackg[GRP_STACK], *g = stackg;
	int32_t stacksave[SAVE_STACK], *save = stacksave;
	size_t ng, i, k, total = 0;
	int e;

	if (!t || (!w && n))
		return kvs_fail(EINVAL);
	if (n > GRP_STACK) {
		g = malloc(n * sizeof(*g));
		if (!g)
			return kvs_fail(ENOMEM);
	}
	if (rt_gather(t, w, n, true, g, &ng) < 0)
		goto fail;
	for (k = 0; k < ng; k++)
		total += g[k].hi - g[k].lo;
	if (total > SAVE_STACK) {
		save = malloc(total * sizeof(int32_t));
		if (!save) {
			errno = ENOMEM;
			goto fail;
		}
	}
	for (k = 0, i = 0; k < ng; i += g[k].hi - g[k].lo, k++)
		memcpy(save + i, mirror_at(t, g[k].slot, g[k].lo),
		       (size_t)(g[k].hi - g[k].lo) * sizeof(int32_t));
	for (i = 0; i < n; i++)
		if (w[i].n)
			memmove(mirror_at(t, w[i].slot, w[i].pos), w[i].locs,
				(size_t)w[i].n * sizeof(int32_t));
	if (rt_submit(t, g, ng) < 0) {
		/* Some spans may be queued: drain, put the old entries back,
		 * and send them after, so mirror and device agree again. */
		e = errno;
		kvs_drv_synchronize(t->drv);
		for (k = 0, i = 0; k < ng; i += g[k].hi - g[k].lo, k++)
			memcpy(mirror_at(t, g[k].slot, g[k].lo), save + i,
			       (size_t)(g[k].hi - g[k].lo) * sizeof(int32_t));
		if (rt_submit(t, g, ng) == 0)
			kvs_drv_synchronize(t->drv);
		errno = e;
		goto fail;
	}
	if (save != stacksave)
		free(save);
	if (g != stackg)
		free(g);
	return 0;
fail:
	e = errno;
	if (save != stacksave)
		free(save);
	if (g != stackg)
		free(g);
	return kvs_fail(e);
}

/**
 * kvs_reqtab_write() - set positions @pos .. @pos + @n - 1 of a row.
 * @tab: table.
 * @slot: an allocated slot.
 * @pos: first position.
 * @n: entries; 0 does nothing.
 * @locs: the n KV locations.
 *
 * kvs_reqtab_write_batch() of one entry: stores into the mirror, then
 * queues one copy of the n entries (staged through the ring) to the device
 * table.  The device holds the new entries once the copy is done: after
 * kvs_reqtab_sync(), or for a kernel queued on the driver's copy stream
 * after it.
 *
 * Context: MT-Safe for different slots; the caller must own @slot and no
 * other thread may read or write it meanwhile.
 * Return: 0, or -1 with errno EINVAL (NULL arguments, @slot out of range or
 * free), ERANGE (@pos + @n > max_context), ENOMEM, or the errno of the
 * copy.  On failure the row is unchanged.
 */
KVS_EXPORT int kvs_reqtab_write(kvs_reqtab_t *t, uint32_t slot, uint32_t pos, uint32_t n,
				const int32_t *locs)
{
	kvs_reqtab_write_t w = { slot, pos, n, locs };

	return kvs_reqtab_write_batch(t, &w, 1);
}

/**
 * kvsi_reqtab_store() - set entries of a row in the mirror only.
 * @tab: table.
 * @slot: an allocated slot.
 * @pos: first position.
 * @n: entries.
 * @locs: the n KV locations.
 *
 * The device table does not follow until kvsi_reqtab_push() of the range.
 *
 * Context: as kvs_reqtab_write().
 * Return: 0, or -1 with errno EINVAL or ERANGE (nothing changed).
 */
int kvsi_reqtab_store(struct kvs_reqtab *t, uint32_t slot, uint32_t pos, uint32_t n,
		      const int32_t *locs)
{
	if (slot_check(t, slot) < 0 || (!locs && n))
		return kvs_fail(EINVAL);
	if (range_check(t, pos, n) < 0)
		return -1;
	if (n)
		memmove(mirror_at(t, slot, pos), locs, (size_t)n * sizeof(int32_t));
	return 0;
}

/**
 * kvsi_reqtab_push() - send ranges of rows from the mirror to the device.
 * @tab: table.
 * @w: @n ranges (their locs are not read); a slot may appear more than once.
 * @n: ranges.
 *
 * The submission kvs_reqtab_write_batch() makes, for what
 * kvsi_reqtab_store() put into the mirror.
 *
 * Context: as kvs_reqtab_write_batch().
 * Return: 0, or -1 with errno EINVAL, ERANGE, ENOMEM or the copy's.  On a
 * driver failure the ranges' device entries are unspecified (the mirror
 * keeps the stored ones).
 */
int kvsi_reqtab_push(struct kvs_reqtab *t, const kvs_reqtab_write_t *w, size_t n)
{
	struct rt_grp stackg[GRP_STACK], *g = stackg;
	size_t ng;
	int rc, e;

	if (!t || (!w && n))
		return kvs_fail(EINVAL);
	if (n > GRP_STACK) {
		g = malloc(n * sizeof(*g));
		if (!g)
			return kvs_fail(ENOMEM);
	}
	rc = rt_gather(t, w, n, false, g, &ng);
	if (rc == 0)
		rc = rt_submit(t, g, ng);
	e = errno;
	if (g != stackg)
		free(g);
	return rc < 0 ? kvs_fail(e) : 0;
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
 * kvs_reqtab_mirror() - the whole host mirror, for views of the table.
 * @tab: table.
 *
 * Row s starts at entry s * max_context.  Valid until the table is
 * destroyed; a row is its slot owner's (kvs_reqtab_row()), and nobody may
 * write through the pointer.
 *
 * Context: MT-Safe.
 * Return: the mirror, or NULL with errno EINVAL (@tab NULL).
 */
KVS_EXPORT const int32_t *kvs_reqtab_mirror(const kvs_reqtab_t *t)
{
	if (!t) {
		errno = EINVAL;
		return NULL;
	}
	return t->mirror;
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
