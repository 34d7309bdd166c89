/* SPDX-License-Identifier: MIT */
/*
 * lib/tier/store_fault.c - a fault-injecting store: kvs_store_fault_open()
 * wraps another store and passes every call to its backend, failing the
 * ones it is told to (the nth call of an operation, or each with a
 * probability) below the envelope, as an error, a short read or a
 * corrupted value, so that the core's checks see what a failing backend
 * would hand back.
 *
 * It is a backend (struct store_backend) that is never chosen by URI, so
 * it is not in lib/tier/store_registry.c's table.
 *
 * Locking: f->lock guards the counters, the armed faults and the random
 * state, for the roll of the dice only; the inner backend's calls run
 * outside it.  Calls are MT-Safe.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tier/storage_be.h"

struct fault {
	struct kvs_store *inner;
	pthread_mutex_t lock;
	uint64_t calls[KVS_SOP__COUNT];
	uint64_t nth[KVS_SOP__COUNT];	/* fail the nth call from now (0: none) */
	int nth_kind[KVS_SOP__COUNT];
	double p[KVS_SOP__COUNT];
	int p_kind[KVS_SOP__COUNT];
	uint64_t rng;
};

/* Does this call of @op fail, and how (-1: it does not)? */
static int fault_roll(struct kvs_store *s, enum kvs_store_op op)
{
	struct fault *f = s->be_priv;
	int kind = -1;
	enum kvs_store_op o;

	pthread_mutex_lock(&f->lock);
	for (o = op;; o = KVS_SOP_ANY) {
		f->calls[o]++;
		if (f->nth[o] && --f->nth[o] == 0)
			kind = f->nth_kind[o];
		if (kind < 0 && f->p[o] > 0) {
			f->rng ^= f->rng << 13;
			f->rng ^= f->rng >> 7;
			f->rng ^= f->rng << 17;
			if ((double)(f->rng >> 11) / 9007199254740992.0 < f->p[o])
				kind = f->p_kind[o];
		}
		if (o == KVS_SOP_ANY)
			break;
	}
	pthread_mutex_unlock(&f->lock);
	return kind;
}

static int fault_be_open(struct kvs_store *s, const char *uri)
{
	(void)s;
	(void)uri;
	return 0;
}

static void fault_be_close(struct kvs_store *s)
{
	struct fault *f = s->be_priv;

	pthread_mutex_destroy(&f->lock);
	free(f);
}

static size_t fault_be_exists(struct kvs_store *s, const char *const *names, size_t n)
{
	struct fault *f = s->be_priv;

	if (fault_roll(s, KVS_SOP_EXISTS) >= 0) {
		store_count(s, KVS_STORE_STAT_io_errors, 1);
		return 0;
	}
	return f->inner->be->exists(f->inner, names, n);
}

static void fault_be_get(struct kvs_store *s, const char *const *names, size_t n,
			 void *const *hdr, void *const *val, ssize_t *got)
{
	struct fault *f = s->be_priv;
	int kind = fault_roll(s, KVS_SOP_GET);
	size_t i;

	if (kind == KVS_SFAULT_ERROR) {
		for (i = 0; i < n; i++)
			got[i] = -1;
		store_count(s, KVS_STORE_STAT_io_errors, n); /* per page, as the backends */
		return;
	}
	f->inner->be->get(f->inner, names, n, hdr, val, got);
	if (kind < 0 || n == 0)
		return;
	/* The first object present is the one damaged. */
	for (i = 0; i < n && got[i] < 0; i++)
		;
	if (i == n)
		return;
	if (kind == KVS_SFAULT_SHORT)
		got[i] = got[i] > 1 ? got[i] / 2 : 0;
	else
		((uint8_t *)val[i])[s->attr.page_bytes / 2] ^= 0x40;
}

static void fault_be_set(struct kvs_store *s, const char *const *names, size_t n,
			 const void *const *hdr, const void *const *val, int *res)
{
	struct fault *f = s->be_priv;
	int kind = fault_roll(s, KVS_SOP_SET);
	size_t i;

	if (kind == KVS_SFAULT_ERROR) {
		for (i = 0; i < n; i++)
			res[i] = 0;
		store_count(s, KVS_STORE_STAT_io_errors, n);
		return;
	}
	if (kind == KVS_SFAULT_SHORT || kind == KVS_SFAULT_CORRUPT) {
		/* A torn write: the first object's value half there (or with a
		 * flipped byte), as a crash or a bad disk would leave it. */
		uint8_t *bad = malloc(s->attr.page_bytes);
		const void **v2 = malloc(n * sizeof(*v2));

		if (!bad || !v2) {
			free(bad);
			free(v2);
			for (i = 0; i < n; i++)
				res[i] = 0;
			return;
		}
		memcpy(bad, val[0], s->attr.page_bytes);
		if (kind == KVS_SFAULT_SHORT)
			memset(bad + s->attr.page_bytes / 2, 0, s->attr.page_bytes - s->attr.page_bytes / 2);
		else
			bad[s->attr.page_bytes / 2] ^= 0x40;
		memcpy(v2, val, n * sizeof(*v2));
		v2[0] = bad;
		f->inner->be->set(f->inner, names, n, hdr, v2, res);
		free(bad);
		free(v2);
		return;
	}
	f->inner->be->set(f->inner, names, n, hdr, val, res);
}

static int fault_be_remove(struct kvs_store *s, const char *name)
{
	struct fault *f = s->be_priv;

	return f->inner->be->remove(f->inner, name);
}

static const struct store_backend store_fault_backend = {
	.scheme = "fault",
	.open = fault_be_open,
	STORE_BACKEND_OPS(fault_be),
};

static struct fault *fault_of(kvs_store_t *s)
{
	return s && s->be == &store_fault_backend ? s->be_priv : NULL;
}

/**
 * kvs_store_fault_open() - a store that passes every call to @inner and
 * fails the ones it is told to, below the envelope (so the core's checks
 * see what a failing backend would hand back).
 * @inner: the store to wrap; it must outlive the wrapper, which does not
 *         close it.
 *
 * Context: any thread.
 * Return: the wrapper, or NULL with errno EINVAL or ENOMEM.
 */
KVS_EXPORT kvs_store_t *kvs_store_fault_open(kvs_store_t *inner)
{
	struct kvs_store *s;
	struct fault *f;

	if (!inner) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	f = calloc(1, sizeof(*f));
	if (!s || !f || pthread_mutex_init(&f->lock, NULL) != 0) {
		free(s);
		free(f);
		errno = ENOMEM;
		return NULL;
	}
	f->inner = inner;
	f->rng = 0x2545F4914F6CDD1Dull;
	s->attr = inner->attr; /* its strings stay inner's: not freed here */
	memcpy(s->ns, inner->ns, sizeof(s->ns));
	s->ns_fp = inner->ns_fp;
	s->be = &store_fault_backend;
	s->be_priv = f;
	return s;
}

/**
 * kvs_store_fault_fail_nth() - fail the @nth next call of @op.
 * @fault: a store from kvs_store_fault_open().
 * @op: KVS_SOP_EXISTS, _GET, _SET, or _ANY (any of them).
 * @nth: 1: the next call; 0 disarms.
 * @kind: KVS_SFAULT_ERROR, _SHORT or _CORRUPT.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_store_fault_fail_nth(kvs_store_t *fault, enum kvs_store_op op, uint64_t nth,
					int kind)
{
	struct fault *f = fault_of(fault);

	if (!f || (unsigned)op >= KVS_SOP__COUNT || kind < KVS_SFAULT_ERROR ||
	    kind > KVS_SFAULT_CORRUPT)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&f->lock);
	f->nth[op] = nth;
	f->nth_kind[op] = kind;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

/**
 * kvs_store_fault_fail_random() - fail each call of @op with probability
 * @p, from a seeded generator.
 * @fault: a store from kvs_store_fault_open().
 * @op: as kvs_store_fault_fail_nth().
 * @p: probability in [0, 1]; 0 disarms.
 * @seed: the generator's seed (non-zero).
 * @kind: as kvs_store_fault_fail_nth().
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_store_fault_fail_random(kvs_store_t *fault, enum kvs_store_op op, double p,
					   uint64_t seed, int kind)
{
	struct fault *f = fault_of(fault);

	if (!f || (unsigned)op >= KVS_SOP__COUNT || !(p >= 0 && p <= 1) || seed == 0 ||
	    kind < KVS_SFAULT_ERROR || kind > KVS_SFAULT_CORRUPT)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&f->lock);
	f->p[op] = p;
	f->p_kind[op] = kind;
	f->rng = seed;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

/**
 * kvs_store_fault_clear() - disarm every fault.
 * @fault: a store from kvs_store_fault_open().
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_store_fault_clear(kvs_store_t *fault)
{
	struct fault *f = fault_of(fault);
	int i;

	if (!f)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&f->lock);
	for (i = 0; i < KVS_SOP__COUNT; i++) {
		f->nth[i] = 0;
		f->p[i] = 0;
	}
	pthread_mutex_unlock(&f->lock);
	return 0;
}
