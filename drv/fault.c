/* SPDX-License-Identifier: MIT */
/*
 * drv/fault.c - a driver that wraps another and fails calls on purpose.
 *
 * The wrapper is a backend like any other: the generic layer validates and
 * books each call against the wrapper's own ranges and chunks, then this file
 * either forwards it to the inner driver through the public API or fails it
 * with the chosen errno before the inner driver sees it.  A failed call thus
 * changes nothing anywhere, which is what lets a test inject a failure at
 * every call index and demand that the caller unwinds to the exact state it
 * had.  Backend handles are the inner driver's objects: a chunk handle is the
 * inner kvs_chunk_t pointer, an event the inner kvs_event_t.
 *
 * Rules are per operation: fail the Nth call of a kind (counted from 1 since
 * the rule was set; once), or each call with probability p drawn from a
 * seeded splitmix64 generator (so that seeds 1, 2, 3... are unrelated).
 * KVS_OP_ANY counts every call of every kind.
 * Calls made while the wrapper is being closed never fail.
 *
 * Locking (the order is in common/common.h):
 * fb->lock protects the rules and counters; it is never held across a call
 * into the inner driver.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

struct fault_rule {
	uint64_t nth;		/* 0: none */
	uint64_t seen;		/* calls since the rule was set */
	double p;		/* 0: none */
	uint64_t rng;
	int err;
};

struct fault_be {
	kvs_drv_t *inner;
	pthread_mutex_t lock;
	struct fault_rule rule[KVS_OP__COUNT];
	uint64_t calls[KVS_OP__COUNT];
	uint64_t injected;
	bool closing;
};

static struct fault_be *fb_of(struct kvs_drv *d)
{
	return d->priv;
}

/*
 * splitmix64 (Steele, Lea and Flood; the seeder of xoshiro): a Weyl sequence
 * passed through a strong 64-bit finalizer.  Every output is fully mixed, so
 * neighbouring seeds give unrelated streams from the first draw on; a bare
 * xorshift started from a small seed stays small for its first outputs.
 */
static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static bool rule_fires(struct fault_rule *r, int *err)
{
	r->seen++;
	if (r->nth && r->seen == r->nth) {
		*err = r->err;
		return true;
	}
	if (r->p > 0 && (double)(splitmix64(&r->rng) >> 11) / 9007199254740992.0 < r->p) {
		*err = r->err;
		return true;
	}
	return false;
}

/* Count a call of @op; return -1 with the rule's errno if it must fail. */
static int inject(struct kvs_drv *d, enum kvs_drv_op op)
{
	struct fault_be *fb = fb_of(d);
	int err = 0;
	bool fire;

	pthread_mutex_lock(&fb->lock);
	fb->calls[op]++;
	fb->calls[KVS_OP_ANY]++;
	if (fb->closing) {
		pthread_mutex_unlock(&fb->lock);
		return 0;
	}
	fire = rule_fires(&fb->rule[op], &err);
	if (!fire)
		fire = rule_fires(&fb->rule[KVS_OP_ANY], &err);
	if (fire)
		fb->injected++;
	pthread_mutex_unlock(&fb->lock);
	if (fire) {
		kvsi_drv_set_detail(d, "fault: injected failure (op %d, errno %d)", op, err);
		errno = err;
		return -1;
	}
	return 0;
}

/* Forward a call's failure detail from the inner driver. */
static int inner_fail(struct kvs_drv *d, const char *what)
{
	int e = errno;

	kvsi_drv_set_detail(d, "fault: inner %s: %s", what, kvs_drv_strerror(fb_of(d)->inner));
	errno = e;
	return -1;
}

static int fault_open(struct kvs_drv *d, const kvs_drv_attr_t *attr)
{
	(void)d;
	(void)attr;
	return 0; /* set up by kvs_fault_open() */
}

static void fault_begin_close(struct kvs_drv *d)
{
	struct fault_be *fb = fb_of(d);

	pthread_mutex_lock(&fb->lock);
	fb->closing = true;
	pthread_mutex_unlock(&fb->lock);
}

static void fault_close(struct kvs_drv *d)
{
	struct fault_be *fb = fb_of(d);

	kvs_drv_close(fb->inner);
	pthread_mutex_destroy(&fb->lock);
	free(fb);
}

static int fault_mem_info(struct kvs_drv *d, size_t *f, size_t *t)
{
	return kvs_drv_mem_info(fb_of(d)->inner, f, t);
}

static int fault_reserve(struct kvs_drv *d, size_t size, kvs_devptr_t *base)
{
	if (inject(d, KVS_OP_RESERVE) < 0)
		return -1;
	if (kvs_drv_reserve(fb_of(d)->inner, size, base) < 0)
		return inner_fail(d, "reserve");
	return 0;
}

static int fault_unreserve(struct kvs_drv *d, kvs_devptr_t base, size_t size)
{
	(void)size;
	if (inject(d, KVS_OP_UNRESERVE) < 0)
		return -1;
	if (kvs_drv_unreserve(fb_of(d)->inner, base) < 0)
		return inner_fail(d, "unreserve");
	return 0;
}

static int fault_create(struct kvs_drv *d, size_t size, uint64_t *handle)
{
	kvs_chunk_t *c;

	if (inject(d, KVS_OP_CREATE) < 0)
		return -1;
	if (kvs_drv_chunk_create(fb_of(d)->inner, size, &c) < 0)
		return inner_fail(d, "create");
	*handle = (uint64_t)(uintptr_t)c;
	return 0;
}

static int fault_release(struct kvs_drv *d, uint64_t handle)
{
	if (inject(d, KVS_OP_RELEASE) < 0)
		return -1;
	if (kvs_drv_chunk_release(fb_of(d)->inner, (kvs_chunk_t *)(uintptr_t)handle) < 0)
		return inner_fail(d, "release");
	return 0;
}

static int fault_map(struct kvs_drv *d, kvs_devptr_t addr, size_t size, uint64_t handle)
{
	(void)size;
	if (inject(d, KVS_OP_MAP) < 0)
		return -1;
	if (kvs_drv_map(fb_of(d)->inner, addr, (kvs_chunk_t *)(uintptr_t)handle) < 0)
		return inner_fail(d, "map");
	return 0;
}

static int fault_unmap(struct kvs_drv *d, kvs_devptr_t addr, size_t size)
{
	if (inject(d, KVS_OP_UNMAP) < 0)
		return -1;
	if (kvs_drv_unmap(fb_of(d)->inner, addr, size) < 0)
		return inner_fail(d, "unmap");
	return 0;
}

static int fault_set_access(struct kvs_drv *d, kvs_devptr_t addr, size_t size, int access)
{
	if (inject(d, KVS_OP_SET_ACCESS) < 0)
		return -1;
	if (kvs_drv_set_access(fb_of(d)->inner, addr, size, access) < 0)
		return inner_fail(d, "set_access");
	return 0;
}

static int fault_copy_htod(struct kvs_drv *d, kvs_devptr_t dst, const void *src, size_t n)
{
	if (inject(d, KVS_OP_COPY) < 0)
		return -1;
	if (kvs_drv_copy_htod(fb_of(d)->inner, dst, src, n, NULL) < 0)
		return inner_fail(d, "copy_htod");
	return 0;
}

static int fault_copy_dtoh(struct kvs_drv *d, void *dst, kvs_devptr_t src, size_t n)
{
	if (inject(d, KVS_OP_COPY) < 0)
		return -1;
	if (kvs_drv_copy_dtoh(fb_of(d)->inner, dst, src, n, NULL) < 0)
		return inner_fail(d, "copy_dtoh");
	return 0;
}

static int fault_copy_dtod(struct kvs_drv *d, kvs_devptr_t dst, kvs_devptr_t src, size_t n)
{
	if (inject(d, KVS_OP_COPY) < 0)
		return -1;
	if (kvs_drv_copy_dtod(fb_of(d)->inner, dst, src, n, NULL) < 0)
		return inner_fail(d, "copy_dtod");
	return 0;
}

/* A batch is one copy operation for the rules: it fails as a whole. */
static int fault_copy_batch(struct kvs_drv *d, int kind, const kvs_copy_t *c, size_t n)
{
	if (inject(d, KVS_OP_COPY) < 0)
		return -1;
	if (kvs_drv_copy_batch(fb_of(d)->inner, kind, c, n, NULL) < 0)
		return inner_fail(d, "copy_batch");
	return 0;
}

/* The inner streams are not ours to see (below): order the queue after an
 * engine's event by draining the inner driver, late but never early. */
static int fault_stream_wait(struct kvs_drv *d, void *bev)
{
	(void)bev;
	return kvs_drv_synchronize(fb_of(d)->inner);
}

/*
 * Events: the wrapper forwards copies without events, so a wrapper event is
 * complete when the inner queue has drained.  That is later than needed, but
 * never early, since copies run in submission order.
 */
static int fault_event_create(struct kvs_drv *d, void **bev)
{
	(void)d;
	*bev = NULL;
	return 0;
}

static void fault_event_destroy(struct kvs_drv *d, void *bev)
{
	(void)d;
	(void)bev;
}

static int fault_event_record(struct kvs_drv *d, void *bev)
{
	(void)d;
	(void)bev;
	return 0;
}

/* The inner driver's engine streams are not ours to see: like a copy's
 * event, complete once the inner queue drains (never early for copies). */
static int fault_event_record_stream(struct kvs_drv *d, void *bev, uint64_t stream)
{
	(void)stream;
	return fault_event_record(d, bev);
}

static int fault_event_wait(struct kvs_drv *d, void *bev)
{
	(void)bev;
	return kvs_drv_synchronize(fb_of(d)->inner);
}

static int fault_event_query(struct kvs_drv *d, void *bev)
{
	return fault_event_wait(d, bev) < 0 ? -1 : 1;
}

static int fault_synchronize(struct kvs_drv *d)
{
	return kvs_drv_synchronize(fb_of(d)->inner);
}

static int fault_host_alloc(struct kvs_drv *d, size_t size, void **ptr)
{
	if (inject(d, KVS_OP_HOST_ALLOC) < 0)
		return -1;
	if (kvs_drv_host_alloc(fb_of(d)->inner, size, ptr) < 0)
		return inner_fail(d, "host_alloc");
	return 0;
}

static int fault_host_free(struct kvs_drv *d, void *ptr)
{
	return kvs_drv_host_free(fb_of(d)->inner, ptr);
}

const struct kvs_drv_backend kvsi_backend_fault = {
	.name = "fault",
	.begin_close = fault_begin_close,
	.copy_batch = fault_copy_batch,
	.stream_wait = fault_stream_wait,
	KVSI_DRV_BACKEND_OPS(fault)
};

/**
 * kvs_fault_open() - wrap a driver in a fault injector.
 * @inner: an open driver; the wrapper owns it from now on and closes it when
 *         it is closed itself.
 *
 * Context: MT-Safe.
 * Return: the wrapper (a driver like any other), or NULL with errno EINVAL
 * or ENOMEM (then @inner is still the caller's).
 */
KVS_EXPORT kvs_drv_t *kvs_fault_open(kvs_drv_t *inner)
{
	struct fault_be *fb;
	struct kvs_drv *d;
	kvs_drv_attr_t attr;

	if (!inner) {
		errno = EINVAL;
		return NULL;
	}
	kvs_drv_attr_init(&attr);
	fb = calloc(1, sizeof(*fb));
	d = kvsi_drv_new(&kvsi_backend_fault, &attr);
	if (!fb || !d) {
		free(fb);
		free(d);
		errno = ENOMEM;
		return NULL;
	}
	fb->inner = inner;
	pthread_mutex_init(&fb->lock, NULL);
	d->priv = fb;
	d->granularity = kvs_drv_granularity(inner);
	/* Streams are emulated by draining the inner driver (above). */
	d->caps = kvs_drv_caps(inner) & ~KVS_DRV_CAP_STREAM_WAIT;
	return d;
}

static struct fault_be *fault_of(const kvs_drv_t *d)
{
	return d && d->be == &kvsi_backend_fault ? d->priv : NULL;
}

/**
 * kvs_fault_fail_nth() - fail the @nth next call of @op, once.
 * @fault: a driver from kvs_fault_open().
 * @op: operation, or KVS_OP_ANY for every kind.
 * @nth: 1 fails the next call; 0 removes the rule.
 * @err: errno the failing call sets (non-zero).
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_fault_fail_nth(kvs_drv_t *fault, enum kvs_drv_op op, uint64_t nth, int err)
{
	struct fault_be *fb = fault_of(fault);

	if (!fb || (unsigned)op >= KVS_OP__COUNT || err <= 0) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&fb->lock);
	fb->rule[op].nth = nth;
	fb->rule[op].seen = 0;
	fb->rule[op].err = err;
	pthread_mutex_unlock(&fb->lock);
	return 0;
}

/**
 * kvs_fault_fail_random() - fail calls of @op with probability @p.
 * @fault: a driver from kvs_fault_open().
 * @op: operation, or KVS_OP_ANY.
 * @p: probability in [0, 1]; 0 removes the rule.
 * @seed: seed of the generator; the same seed fails the same calls.
 * @err: errno the failing calls set (non-zero).
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_fault_fail_random(kvs_drv_t *fault, enum kvs_drv_op op, double p,
				     uint64_t seed, int err)
{
	struct fault_be *fb = fault_of(fault);

	if (!fb || (unsigned)op >= KVS_OP__COUNT || err <= 0 || !(p >= 0 && p <= 1)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&fb->lock);
	fb->rule[op].p = p;
	/* Every seed, 0 included, is a valid start of the Weyl sequence; the
	 * finalizer mixes it, so the seed itself needs no scrambling. */
	fb->rule[op].rng = seed;
	fb->rule[op].err = err;
	pthread_mutex_unlock(&fb->lock);
	return 0;
}

/**
 * kvs_fault_clear() - remove every rule; counters are kept.
 * @fault: a driver from kvs_fault_open().
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_fault_clear(kvs_drv_t *fault)
{
	struct fault_be *fb = fault_of(fault);

	if (!fb) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&fb->lock);
	memset(fb->rule, 0, sizeof(fb->rule));
	pthread_mutex_unlock(&fb->lock);
	return 0;
}

/**
 * kvs_fault_calls() - calls of @op that reached the wrapper's backend.
 * @fault: a driver from kvs_fault_open().
 * @op: operation, or KVS_OP_ANY for all.
 *
 * Context: MT-Safe.
 * Return: the count; 0 if @fault is not a fault wrapper.
 */
KVS_EXPORT uint64_t kvs_fault_calls(const kvs_drv_t *fault, enum kvs_drv_op op)
{
	struct fault_be *fb = fault_of(fault);
	uint64_t v;

	if (!fb || (unsigned)op >= KVS_OP__COUNT)
		return 0;
	pthread_mutex_lock(&fb->lock);
	v = fb->calls[op];
	pthread_mutex_unlock(&fb->lock);
	return v;
}

/**
 * kvs_fault_injected() - failures injected so far.
 * @fault: a driver from kvs_fault_open().
 *
 * Context: MT-Safe.
 * Return: the count; 0 if @fault is not a fault wrapper.
 */
KVS_EXPORT uint64_t kvs_fault_injected(const kvs_drv_t *fault)
{
	struct fault_be *fb = fault_of(fault);

	return fb ? kvs_locked_read(&fb->lock, &fb->injected) : 0;
}
