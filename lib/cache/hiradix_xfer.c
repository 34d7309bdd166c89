/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hiradix_xfer.c - the transfer controller of the hierarchical
 * radix cache (lib/cache/hiradix.c is the tree, lib/cache/hiradix_int.h
 * the shared structures): backups of device nodes to the host pool, loads
 * back of tombstones to the device, their queues, acks and failures, the
 * poll thread (KVS_HIRADIX_THREAD), and the draining of all of it when the
 * cache is destroyed (lib/cache/hiradix_life.c).
 *
 * Host copies.  host != NULL and !host_ok: a backup is pending (bt, its
 * batch: queued, in flight, or complete while its parent's copy is not
 * valid yet).  A host copy becomes valid only when its own transfer
 * completed and its parent's copy is valid, so valid copies always form a
 * prefix from the root (the backup invariant); a transfer that fails drops
 * its node's host pages and those of every descendant (whose copies could
 * only be pending).  Completions are taken in by polls, or waited for where
 * a call needs a node settled (a match or insert through a node being
 * loaded, write-back eviction, destroy).
 *
 * The queues.  A backup or a load back is first queued (h->wq, h->lq:
 * batches with no transfer yet); hr_submit_writes() and hr_submit_loads()
 * start everything queued as one kvs_hpool_backup() or kvs_hpool_load(),
 * whose runs of adjacent pages the host pool merges into single copies, and
 * put the batch at the tail of its ack queue (h->wacks, h->lacks).  Without
 * KVS_HIRADIX_DEFER each call submits what it queued before it returns;
 * with it the queues wait for kvs_hiradix_submit(), a poll, or a call that
 * must wait for one of their copies.
 *
 * Acks.  take_acks() finds the batches that completed.  Backup batches are
 * taken in order, and only as many as the agree hook allows (the minimum
 * over tensor-parallel ranks), so that every rank marks the same nodes
 * backed up.  A batch's state (0 in flight, 1 done, -1 failed) then drives
 * its nodes: resolve() makes a done node's copy valid once its parent's is
 * (cascading down), drops a failed one's.  A batch is freed when it is
 * resolved, no node or load refers to it (refs) and, for a load handed to
 * the caller, the caller's next poll or submit has come (handed).  Host
 * pages of a copy dropped while its batch is in flight cannot be freed yet
 * (busy in the transfer): they wait on the batch (orphans).
 *
 * Locking: everything here runs with h->lock (level 2), as the tree's
 * calls do; the poll thread takes it for each poll.  No mutex is held
 * across a device wait or the agreement callback:
 *
 *  - A submission (hr_submit_writes(), hr_submit_loads()) moves what is
 *    queued into a new batch marked submitting, drops h->lock across
 *    kvs_hpool_backup() or kvs_hpool_load() (the driver's copies, and its
 *    synchronization after a failed one), takes it again and publishes the
 *    transfer, or undoes the batch.  Whoever needs a submitting batch waits
 *    on h->xcv (which releases h->lock).
 *  - A wait (hr_batch_wait()) pins the batch (pins: not freed), drops
 *    h->lock across kvs_hpool_xfer_wait(), and takes the batch out of its
 *    ack queue unless another thread's poll did meanwhile.  Its callers pin
 *    the node they wait on (hr_pin()) and look at the tree again after.
 *  - The agreement callback (KVS_AGREE_WRITE_ACKS here and in
 *    kvs_hiradix_load_back(), KVS_AGREE_PREFETCH in the storage tier) runs
 *    without h->lock, one call at a time (h->agreeing, waited for on
 *    h->xcv) so that the ranks see their calls in the same order; the
 *    batches being agreed on are pinned and remembered (anext), the load's
 *    last node is pinned and its chain counted again after.
 *  - Host pages of a copy dropped in flight go to the batch in a record
 *    allocated with the backup (orph), so dropping never waits.
 *
 * Lock order: h->lock, then hp->lock and the pool's (inside the calls made
 * under it); nothing of the cache is held across a driver wait.  The
 * fault driver's event queries may wait (test driver only).
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/hiradix_int.h"

/* ------------------------------------------------------------ batches */

void hr_bset(kvs_hiradix_t *h, node_t *x, bool in)
{
	if (in) {
		DLIST_PUSH_F(h->backups, x, bprev, bnext);
	} else {
		DLIST_DEL_F(h->backups, x, bprev, bnext);
		x->bprev = x->bnext = NULL;
		h->bgen++;
	}
}

static void batch_free(kvs_hiradix_t *h, struct hbatch *b)
{
	struct orphan *o;

	kvs_hpool_xfer_free(b->x); /* seen complete: no wait */
	while ((o = b->orphans)) {
		b->orphans = o->next;
		kvs_hpool_free(h->hp, o->n, o->pages);
		free(o->pages);
		free(o);
	}
	free(b);
}

/* Free @b if nothing needs it any more. */
static void hr_batch_check(kvs_hiradix_t *h, struct hbatch *b)
{
	if (b->refs == 0 && b->state != 0 && !b->handed && b->pins == 0)
		batch_free(h, b);
}

static void batch_put(kvs_hiradix_t *h, struct hbatch *b)
{
	if (hr_queued(h, b))
		return;
	b->refs--;
	hr_batch_check(h, b);
}

/* Append @b to the ack queue at *@q. */
static void ack_push(struct hbatch **q, struct hbatch *b)
{
	while (*q)
		q = &(*q)->next;
	*q = b;
}

/* Take @b, seen complete or failed, out of the ack queue at *@q. */
static void ack_take(struct hbatch **q, struct hbatch *b, int state)
{
	while (*q != b)
		q = &(*q)->next;
	*q = b->next;
	b->next = NULL;
	b->state = state;
}

/*
 * Wait for @b's transfer (submitted, or being submitted) and take it out of
 * its ack queue, without h->lock: it is dropped across the wait and taken
 * again, so anything may have changed in the tree meanwhile.  @b is pinned
 * (pins: not freed) until the caller's batch_unpin().
 */
static void hr_batch_wait(kvs_hiradix_t *h, struct hbatch *b, bool load)
{
	int r;

	b->pins++;
	while (b->submitting)
		pthread_cond_wait(&h->xcv, &h->lock);
	if (b->state == 0) {
		pthread_mutex_unlock(&h->lock);
		r = kvs_hpool_xfer_wait(b->x);
		pthread_mutex_lock(&h->lock);
		if (b->state == 0) /* not taken in by another thread meanwhile */
			ack_take(load ? &h->lacks : &h->wacks, b, r == 0 ? 1 : -1);
	}
}

/* Undo hr_batch_wait()'s pin: @b may be freed now. */
static void batch_unpin(kvs_hiradix_t *h, struct hbatch *b)
{
	b->pins--;
	hr_batch_check(h, b);
}

/* Wait for the agreement callback's turn: one call at a time, in the order
 * the ranks make them. */
static void agree_begin(kvs_hiradix_t *h)
{
	while (h->agreeing)
		pthread_cond_wait(&h->xcv, &h->lock);
	h->agreeing = true;
}

/* Call the agreement callback (after agree_begin()) without h->lock. */
static uint64_t agree_call(kvs_hiradix_t *h, int what, uint64_t value)
{
	uint64_t a;

	pthread_mutex_unlock(&h->lock);
	a = h->agree(h->agree_arg, what, value);
	pthread_mutex_lock(&h->lock);
	h->agreeing = false;
	pthread_cond_broadcast(&h->xcv);
	return a;
}

uint64_t hr_agree(kvs_hiradix_t *h, int what, uint64_t value)
{
	agree_begin(h);
	return agree_call(h, what, value);
}

/* Pin @x (@d 1) or unpin it (-1): a lock of the cache's (not in a leaf
 * set, not evicted) held by a call across a time without h->lock. */
void hr_pin(kvs_hiradix_t *h, node_t *x, int d)
{
	if (x == &h->root)
		return;
	x->pin = (uint32_t)((int)x->pin + d);
	hr_lock_path(h, x, d);
}

/* ------------------------------------------------------------ backups */

static void host_release(kvs_hiradix_t *h, node_t *x)
{
	struct orphan *o;
	size_t np = x->len / h->ps;

	hr_acct(h, x, -1);
	if (x->bt && !hr_queued(h, x->bt) && x->bt->state == 0) {
		/* Still the destination of a copy in flight: its pages wait on
		 * the batch, in the record hr_backup() made for this. */
		o = x->orph;
		x->orph = NULL;
		o->n = np;
		o->pages = x->host;
		o->next = x->bt->orphans;
		x->bt->orphans = o;
		x->host = NULL;
	}
	if (x->host)
		kvs_hpool_free(h->hp, np, x->host);
	free(x->host);
	x->host = NULL;
	x->host_ok = false;
	hr_acct(h, x, 1);
	hr_leaf_update(h, x);
}

/* Forget @x's backup: its batch is resolved, or its copy dropped. */
static void bx_end(kvs_hiradix_t *h, node_t *x)
{
	struct hbatch *b = x->bt;

	hr_bset(h, x, false);
	x->bt = NULL;
	free(x->orph);
	x->orph = NULL;
	hr_lock_path(h, x, -1);
	batch_put(h, b);
}

/* @x's host copy failed: drop it and every descendant's (only pending). */
static void drop_host(kvs_hiradix_t *h, node_t *x)
{
	node_t *c;

	for (c = x->child; c; c = c->next)
		if (c->host)
			drop_host(h, c);
	host_release(h, x); /* first: it needs to see the batch */
	if (x->bt)
		bx_end(h, x);
	ST(h, backup_lost, 1);
}

/* @x's copy is complete and its parent's valid: valid now, and so are its
 * children's that completed meanwhile. */
static void make_valid(kvs_hiradix_t *h, node_t *x)
{
	node_t *c;

	bx_end(h, x);
	x->host_ok = true;
	hr_leaf_update(h, x);
	hr_node_events(h, x, KVS_KV_STORED, KVS_MEDIUM_CPU);
	hr_l3_backup(h, x);
	for (c = x->child; c; c = c->next)
		if (c->bt && !hr_queued(h, c->bt) && c->bt->state == 1)
			make_valid(h, c);
}

/* Act on the backups whose batch is resolved. */
static void resolve(kvs_hiradix_t *h)
{
	node_t *x = h->backups, *n;

	while (x) {
		uint64_t gen = h->bgen;
		int s = hr_queued(h, x->bt) ? 0 : x->bt->state;

		n = x->bnext;
		if (s < 0)
			drop_host(h, x);
		else if (s > 0 && (x->parent == &h->root || x->parent->host_ok))
			make_valid(h, x);
		/* Others than x left the list: start again. */
		x = h->bgen - gen > (s != 0) ? h->backups : n;
	}
}

/* Queue a backup of @x (on the device, no host copy), its ancestors'
 * first. */
int hr_backup(kvs_hiradix_t *h, node_t *x)
{
	size_t np = x->len / h->ps;
	int32_t *host;

	if (x->parent != &h->root && !x->parent->host && hr_backup(h, x->parent) < 0)
		return -1;
	host = malloc(np * sizeof(*host));
	/* The record its pages need if its copy is dropped in flight. */
	x->orph = malloc(sizeof(*x->orph));
	if (!host || !x->orph)
		goto fail;
	if (kvs_hpool_alloc(h->hp, np, host) < 0) {
		if (errno != ENOMEM)
			goto fail;
		hr_evict_host(h, x->len);
		if (kvs_hpool_alloc(h->hp, np, host) < 0)
			goto fail;
	}
	hr_acct(h, x, -1);
	x->host = host;
	hr_acct(h, x, 1);
	x->bt = &h->wq;
	hr_bset(h, x, true);
	hr_lock_path(h, x, 1);
	return 0;
fail:
	ST(h, backup_fail, 1);
	free(host);
	free(x->orph);
	x->orph = NULL;
	errno = ENOMEM;
	return -1;
}

/* A batch of @np pages and its two page arrays (*@dev, *@host), or NULL
 * with nothing allocated. */
static struct hbatch *batch_new(size_t np, int32_t **dev, int32_t **host)
{
	struct hbatch *b = calloc(1, sizeof(*b));

	*dev = malloc(np * sizeof(**dev));
	*host = malloc(np * sizeof(**host));
	if (!b || !*dev || !*host) {
		free(b);
		free(*dev);
		free(*host);
		*dev = *host = NULL;
		return NULL;
	}
	return b;
}

/*
 * Submit batch @b's copies (kvs_hpool_backup() or kvs_hpool_load(), @np
 * pages @dev and @host, both freed here) with h->lock dropped across the
 * call; b->submitting meanwhile (waiters on h->xcv are woken after).  0
 * with *@xf set, or the call's errno.
 */
static int batch_submit(kvs_hiradix_t *h, struct hbatch *b,
			int (*copy)(kvs_hpool_t *, const int32_t *, const int32_t *, size_t,
				    kvs_hpool_xfer_t **),
			int32_t *dev, int32_t *host, size_t np, kvs_hpool_xfer_t **xf)
{
	int rc = 0;

	b->submitting = true;
	pthread_mutex_unlock(&h->lock);
	if (copy(h->hp, dev, host, np, xf) < 0)
		rc = errno;
	pthread_mutex_lock(&h->lock);
	b->submitting = false;
	pthread_cond_broadcast(&h->xcv);
	free(dev);
	free(host);
	return rc;
}

/*
 * Start every queued backup as one transfer.  Its nodes join the batch
 * first (b->submitting), then h->lock is dropped across kvs_hpool_backup()
 * (which queues the copies, and on a failure waits for those it queued);
 * a call that needs the batch meanwhile waits on h->xcv.  A failure drops
 * every node still in it.
 */
static int hr_submit_writes(kvs_hiradix_t *h)
{
	size_t np = 0, k = 0;
	int32_t *dev = NULL, *host = NULL;
	uint64_t nodes = 0, tokens = 0;
	struct hbatch *b = NULL;
	kvs_hpool_xfer_t *xf = NULL;
	node_t *x, *n;
	int rc = ENOMEM;

	for (x = h->backups; x; x = x->bnext)
		if (x->bt == &h->wq)
			np += x->len / h->ps;
	if (np == 0)
		return 0;
	b = batch_new(np, &dev, &host);
	if (!b)
		goto fail;
	/* The list is newest first: fill from the end, ancestors first. */
	k = np;
	for (x = h->backups; x; x = x->bnext) {
		if (x->bt != &h->wq)
			continue;
		k -= x->len / h->ps;
		hr_pages_of(h, x->locs, x->len, dev + k);
		memcpy(host + k, x->host, x->len / h->ps * sizeof(*host));
		x->bt = b;
		b->refs++;
		nodes++;
		tokens += x->len;
	}
	rc = batch_submit(h, b, kvs_hpool_backup, dev, host, np, &xf);
	if (rc == 0) {
		b->x = xf;
		ST(h, backups, nodes);
		ST(h, backup_tokens, tokens);
		ack_push(&h->wacks, b);
		ST(h, write_batches, 1);
		return 0;
	}
	b->state = -1;
	b->pins++; /* until every node of it is dropped */
fail:
	for (x = h->backups; x; x = n) {
		n = x->bnext;
		if (b ? x->bt == b : x->bt == &h->wq) {
			/* Never submitted: not lost, failed. */
			host_release(h, x);
			bx_end(h, x);
			ST(h, backup_fail, 1);
		}
	}
	if (b)
		batch_unpin(h, b);
	errno = rc;
	return -1;
}

void hr_inc_hit(kvs_hiradix_t *h, node_t *x)
{
	if (h->policy == KVS_WRITE_BACK)
		return;
	x->hit_count++;
	if (!x->host && x->hit_count >= h->threshold)
		(void)hr_backup(h, x); /* best effort: the node stays without a copy */
}

/* ------------------------------------------------------------ loads */

static void load_done(kvs_hiradix_t *h, struct hload *ld, bool ok)
{
	node_t *x;

	if (!ok)
		ST(h, load_fail, 1);
	for (x = ld->last;; x = x->parent) {
		x->ld = NULL;
		if (!ok) {
			/* Never claim data not there: tombstones again. */
			kvs_pool_free(h->pool, x->len, x->locs);
			hr_set_dev(h, x, false);
		} else {
			hr_node_events(h, x, KVS_KV_STORED, KVS_MEDIUM_GPU);
		}
		if (x == ld->top)
			break;
	}
	hr_lock_path(h, ld->last, -1);
	DLIST_DEL(h->loads, ld);
	batch_put(h, ld->bt);
	free(ld->dev);
	free(ld->host);
	free(ld);
}

/*
 * Start every queued load back (@only: that one alone) as one transfer,
 * h->lock dropped across kvs_hpool_load() as in hr_submit_writes(); *@out
 * (may be NULL) receives the batch, NULL if nothing was queued.  A failure
 * undoes every load in it (their chains are tombstones again).
 */
static int hr_submit_loads(kvs_hiradix_t *h, struct hload *only, struct hbatch **out)
{
	struct hload *ld, *ln;
	size_t np = 0, k = 0;
	int32_t *dev = NULL, *host = NULL;
	kvs_hpool_xfer_t *xf = NULL;
	struct hbatch *b;
	int rc = ENOMEM;

	if (out)
		*out = NULL;
	for (ld = h->loads; ld; ld = ld->next)
		if (ld->bt == &h->lq && (!only || ld == only))
			np += ld->np;
	if (np == 0)
		return 0;
	b = batch_new(np, &dev, &host);
	if (!b) {
		for (ld = h->loads; ld; ld = ln) {
			ln = ld->next;
			if (ld->bt == &h->lq && (!only || ld == only))
				load_done(h, ld, false);
		}
		errno = rc;
		return -1;
	}
	for (ld = h->loads; ld; ld = ld->next)
		if (ld->bt == &h->lq && (!only || ld == only)) {
			memcpy(dev + k, ld->dev, ld->np * sizeof(*dev));
			memcpy(host + k, ld->host, ld->np * sizeof(*host));
			k += ld->np;
			ld->bt = b;
			b->refs++;
			free(ld->dev);
			free(ld->host);
			ld->dev = ld->host = NULL;
		}
	rc = batch_submit(h, b, kvs_hpool_load, dev, host, np, &xf);
	if (rc == 0) {
		b->x = xf;
		ack_push(&h->lacks, b);
		ST(h, load_batches, 1);
		if (out)
			*out = b;
		return 0;
	}
	b->state = -1;
	b->pins++;
	for (ld = h->loads; ld; ld = ln) {
		ln = ld->next;
		if (ld->bt == b)
			load_done(h, ld, false);
	}
	batch_unpin(h, b);
	errno = rc;
	return -1;
}

/* Wait for a load back in flight into @x (pinned by the caller: h->lock is
 * dropped across the wait). */
void hr_settle_load(kvs_hiradix_t *h, node_t *x)
{
	struct hload *ld;
	struct hbatch *b;

	while ((ld = x->ld)) {
		b = ld->bt;
		if (hr_queued(h, b)) {
			(void)hr_submit_loads(h, NULL, NULL); /* failed: x a tombstone again */
			continue;
		}
		hr_batch_wait(h, b, true);
		/* b pinned: ld, if still x's and b's, is the load waited for. */
		if (x->ld == ld && ld->bt == b)
			load_done(h, ld, b->state > 0);
		batch_unpin(h, b);
	}
}

/* Wait for what is in flight on @x (pinned by the caller): a load back
 * into it, its backup (and, first, its ancestors'). */
void hr_settle(kvs_hiradix_t *h, node_t *x)
{
	struct hbatch *b;
	node_t *p;

	hr_settle_load(h, x);
	while ((b = x->bt)) {
		p = x->parent;
		if (p != &h->root && p->bt) {
			hr_pin(h, p, 1);
			hr_settle(h, p);
			hr_pin(h, p, -1);
			continue;
		}
		if (hr_queued(h, b)) {
			(void)hr_submit_writes(h); /* failed: dropped */
			continue;
		}
		hr_batch_wait(h, b, false);
		resolve(h);
		batch_unpin(h, b);
	}
}

/* Take in the transfers that completed; backup batches in order, as many
 * as every rank has. */
static void take_acks(kvs_hiradix_t *h, bool caller)
{
	struct hbatch *b, *bn;
	struct hload *ld, *ln;
	uint64_t k = 0;

	for (b = h->lacks; b; b = bn) {
		int r = kvs_hpool_xfer_query(b->x);

		bn = b->next;
		if (r != 0) {
			ack_take(&h->lacks, b, r == 1 ? 1 : -1);
			hr_batch_check(h, b); /* no load left in it */
		}
	}
	for (ld = h->loads; ld; ld = ln) {
		ln = ld->next;
		if (!hr_queued(h, ld->bt) && ld->bt->state != 0)
			load_done(h, ld, ld->bt->state > 0);
	}
	if (h->agree && !caller)
		return; /* the ranks agree in the caller's polls only */
	if (h->agree)
		agree_begin(h);
	/* Each batch is queried once: the answer is kept for taking it in. */
	for (b = h->wacks; b && (b->seen = kvs_hpool_xfer_query(b->x)) != 0; b = b->next)
		k++;
	if (h->agree) {
		/* The k batches seen complete, pinned and remembered in
		 * order (anext) while the ranks agree without h->lock; one
		 * taken in meanwhile (a wait) is not taken again. */
		struct hbatch *first = h->wacks;
		uint64_t a, i;

		for (b = first, i = 0; i < k; i++, b = b->next) {
			b->pins++;
			b->anext = i + 1 < k ? b->next : NULL;
		}
		a = agree_call(h, KVS_AGREE_WRITE_ACKS, k);
		for (b = first, i = 0; i < k; i++, b = bn) {
			bn = b->anext;
			if (i < a && b->state == 0)
				ack_take(&h->wacks, b, b->seen == 1 ? 1 : -1);
			batch_unpin(h, b); /* every node of it dropped */
		}
	} else {
		while (k--) {
			b = h->wacks;
			ack_take(&h->wacks, b, b->seen == 1 ? 1 : -1);
			hr_batch_check(h, b); /* every node of it dropped */
		}
	}
	resolve(h);
}

/* Give back the load transfers handed to the caller. */
static void hr_unhand(kvs_hiradix_t *h)
{
	struct hbatch *b;

	while ((b = h->handed)) {
		h->handed = b->hnext;
		b->handed = false;
		hr_batch_check(h, b); /* else freed when taken in or put */
	}
}

/* Hand the load batch @b, just submitted, to the caller. */
static kvs_hpool_xfer_t *hand(kvs_hiradix_t *h, struct hbatch *b)
{
	if (!b)
		return NULL;
	b->handed = true;
	b->hnext = h->handed;
	h->handed = b;
	return b->x;
}

/* What a caller's call does before returning: submit its copies unless
 * deferred. */
void hr_flush(kvs_hiradix_t *h)
{
	if (!(h->flags & KVS_HIRADIX_DEFER))
		(void)hr_submit_writes(h);
}

/* A poll: by the caller (@caller), or by an eviction or the thread.  It
 * submits every backup still queued, deferred or not: without a deferral a
 * call submits what it queued before it returns, yet a backup was found
 * left in the queue with no call to come (a settle that never ended, in
 * test_hiradix's threads; the path that left it is not known), and a poll
 * is where the engine waits. */
void hr_poll_locked(kvs_hiradix_t *h, bool caller)
{
	if (caller)
		hr_unhand(h);
	(void)hr_submit_writes(h);
	take_acks(h, caller);
}

/* ------------------------------------------------------------ thread */

/* KVS_HIRADIX_THREAD: submit and take in every poll_us, as a scheduler's
 * poll would, so that copies start and complete without the caller. */
static void *thread_main(void *arg)
{
	kvs_hiradix_t *h = arg;
	struct timespec t;

	pthread_mutex_lock(&h->lock);
	while (!h->stop) {
		hr_poll_locked(h, false);
		clock_gettime(CLOCK_MONOTONIC, &t);
		t.tv_nsec += (long)(h->poll_us % 1000000) * 1000;
		t.tv_sec += h->poll_us / 1000000 + t.tv_nsec / 1000000000;
		t.tv_nsec %= 1000000000;
		pthread_cond_timedwait(&h->wake, &h->lock, &t);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

int hr_thread_start(kvs_hiradix_t *h)
{
	pthread_condattr_t ca;
	int rc;

	if (pthread_condattr_init(&ca) != 0) {
		errno = ENOMEM;
		return -1;
	}
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(&h->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (rc != 0) {
		errno = ENOMEM;
		return -1;
	}
	rc = pthread_create(&h->thread, NULL, thread_main, h);
	if (rc != 0) {
		pthread_cond_destroy(&h->wake);
		errno = rc == EAGAIN ? EAGAIN : ENOMEM;
		return -1;
	}
	h->has_thread = true;
	return 0;
}

void hr_thread_stop(kvs_hiradix_t *h)
{
	if (!h->has_thread)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_signal(&h->wake);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->wake);
	h->has_thread = false;
}

/* ------------------------------------------------------------ API: transfers */

/* Cut the chain of tombstones ending at @node so that it holds its first
 * @want tokens only (top down), splitting a node; the new last node, or
 * NULL with errno ENOMEM. */
static node_t *chain_cut(kvs_hiradix_t *h, node_t *node, size_t total, size_t want)
{
	size_t end = total;
	node_t *y;

	for (y = node;; y = y->parent) {
		size_t start = end - y->len;

		if (start < want)
			return want - start < y->len ? hr_split(h, y, want - start) : y;
		end = start;
	}
}

/**
 * kvs_hiradix_load_back() - bring the tombstones ending at @node back to
 * the device.
 * @h: cache.
 * @node: the last node of a match (kvs_hiradix_match_t.last_node).
 * @quota: the most device tokens the load may take from what the caller
 *         could still use (0: no limit): the chain's tokens plus those of
 *         its anchor's path that the load locks anew (unlocked device
 *         nodes, evictable until now), as SGLang's mem_quota + delta; the
 *         chain's alone with KVS_HIRADIX_QUOTA_CHAIN.
 * @locs: receives the new device locations, top node first (room for
 *        the match's host_hit), or NULL.
 * @xfer: receives the transfer, to wait on per layer with
 *        kvs_hpool_xfer_layer_wait(); NULL when nothing was loaded or
 *        under KVS_HIRADIX_DEFER (kvs_hiradix_submit() starts the load and
 *        hands out the transfer).  It stays valid until the caller's next
 *        kvs_hiradix_poll() or kvs_hiradix_submit(), or kvs_hiradix_destroy().
 *
 * All or nothing: device pages for the whole chain (evicting device leaves
 * if the pool is short), or none.  With an agree hook, the ranks first
 * agree on the tokens to load (KVS_AGREE_LOAD: the hook is called on every
 * call, with the chain's tokens, 0 included); fewer agreed loads the chain's
 * top part only, splitting a node where it ends.  The chain and its anchor
 * stay locked until the copy is seen complete; a copy that fails makes the
 * chain tombstones again.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: the tokens being loaded, 0 when there is nothing to load or it is
 * below the load back threshold or over @quota; or -1 with errno EINVAL,
 * ENOMEM, or the driver's (nothing loaded).
 */
KVS_EXPORT ssize_t kvs_hiradix_load_back(kvs_hiradix_t *h, kvs_hiradix_node_t *node, size_t quota,
					 int32_t *locs, kvs_hpool_xfer_t **xfer)
{
	int32_t *dloc = NULL;
	struct hload *ld = NULL;
	size_t total = 0, p, k, newly = 0;
	node_t *y, *top = NULL;
	int rc;

	if (!h || !node || !xfer || node->tree != h) {
		errno = EINVAL;
		return -1;
	}
	*xfer = NULL;
	pthread_mutex_lock(&h->lock);
	for (y = node; y != &h->root && !y->on_dev; y = y->parent)
		total += y->len;
	if (h->agree) {
		uint64_t a;

		/* The ranks agree without h->lock: @node pinned meanwhile,
		 * its chain counted again after. */
		hr_pin(h, node, 1);
		a = hr_agree(h, KVS_AGREE_LOAD, total);
		hr_pin(h, node, -1);
		for (total = 0, y = node; y != &h->root && !y->on_dev; y = y->parent)
			total += y->len;
		if (a < total) {
			a -= a % h->ps;
			if (a == 0) {
				total = 0;
			} else {
				node = chain_cut(h, node, total, a);
				if (!node) {
					rc = ENOMEM;
					goto out;
				}
				total = a;
			}
		}
	}
	/* The anchor's tokens this load would lock anew count against the
	 * quota (SGLang's mem_quota + delta of inc_lock_ref()). */
	if (!(h->flags & KVS_HIRADIX_QUOTA_CHAIN))
		for (y = node; y != &h->root; y = y->parent)
			if (y->on_dev && y->lock_ref == 0)
				newly += y->len;
	if (total == 0 || total < h->lb_threshold || (quota && total + newly > quota)) {
		if (total)
			ST(h, load_skipped, 1);
		pthread_mutex_unlock(&h->lock);
		return 0;
	}
	ld = calloc(1, sizeof(*ld));
	dloc = malloc(total * sizeof(int32_t));
	if (ld) {
		ld->np = total / h->ps;
		ld->dev = malloc(ld->np * sizeof(int32_t));
		ld->host = malloc(ld->np * sizeof(int32_t));
	}
	if (!ld || !dloc || !ld->dev || !ld->host) {
		rc = ENOMEM;
		goto out;
	}
	hr_lock_path(h, node, 1);
	if (kvs_pool_alloc(h->pool, total, dloc) < 0) {
		hr_evict_device(h, total);
		if (kvs_pool_alloc(h->pool, total, dloc) < 0) {
			rc = errno;
			hr_lock_path(h, node, -1);
			goto out;
		}
		/* A write-back eviction drops h->lock while it waits: another
		 * call may have loaded part of the chain meanwhile. */
		for (p = 0, y = node; y != &h->root && !y->on_dev; y = y->parent)
			p += y->len;
		if (p != total) {
			kvs_pool_free(h->pool, total, dloc);
			hr_lock_path(h, node, -1);
			ST(h, load_skipped, 1);
			pthread_mutex_unlock(&h->lock);
			KVS_FREE_ALL(ld->dev, ld->host, ld, dloc);
			return 0;
		}
	}
	for (top = node, p = top->len; p < total; p += top->len)
		top = top->parent;
	/* Top down: the chain's host pages in order. */
	hr_pages_of(h, dloc, total, ld->dev);
	p = total;
	for (y = node; y != top->parent; y = y->parent) {
		p -= y->len;
		k = p / h->ps;
		memcpy(ld->host + k, y->host, y->len / h->ps * sizeof(int32_t));
		memcpy(y->locs, dloc + p, y->len * sizeof(int32_t));
		y->ld = ld;
		hr_set_dev(h, y, true);
	}
	ld->bt = &h->lq;
	ld->top = top;
	ld->last = node;
	DLIST_PUSH(h->loads, ld);
	if (!(h->flags & KVS_HIRADIX_DEFER)) {
		struct hbatch *b;

		/* This load alone: another call's queued load is its own. */
		if (hr_submit_loads(h, ld, &b) < 0) {
			/* Undone by hr_submit_loads(): tombstones again. */
			rc = errno;
			ST(h, load_fail, -1);
			ld = NULL;
			goto out;
		}
		*xfer = hand(h, b);
	}
	ST(h, load_backs, 1);
	ST(h, load_tokens, total);
	if (locs)
		memcpy(locs, dloc, total * sizeof(int32_t));
	free(dloc);
	pthread_mutex_unlock(&h->lock);
	return (ssize_t)total;
out:
	pthread_mutex_unlock(&h->lock);
	if (ld) {
		free(ld->dev);
		free(ld->host);
	}
	free(ld);
	free(dloc);
	errno = rc;
	return -1;
}

/**
 * kvs_hiradix_submit() - start every queued copy: the backups queued since
 * the last submission as one transfer, the loads back as another.
 * @h: cache.
 * @load_xfer: receives the loads' transfer, to wait on per layer with
 *             kvs_hpool_xfer_layer_wait() before the forward pass reads
 *             each layer (NULL: no load was queued), or NULL.  It stays
 *             valid until the caller's next kvs_hiradix_poll() or
 *             kvs_hiradix_submit(), or kvs_hiradix_destroy().
 *
 * Without KVS_HIRADIX_DEFER every call submits its own copies and this
 * finds nothing queued.  A batch that cannot be submitted is undone: its
 * backups are dropped (counted in backup_fail), its loads make their chains
 * tombstones again (load_fail), and the locations kvs_hiradix_load_back()
 * returned for them no longer hold data: the requests that took them must
 * compute those tokens (as after a load whose copy failed).
 *
 * Context: MT-Safe (takes h->lock); never waits.
 * Return: 0, or -1 with errno EINVAL, ENOMEM or the driver's (the other
 * batch is still submitted).
 */
KVS_EXPORT int kvs_hiradix_submit(kvs_hiradix_t *h, kvs_hpool_xfer_t **load_xfer)
{
	struct hbatch *b = NULL;
	int rc = 0, err = 0;

	if (load_xfer)
		*load_xfer = NULL;
	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	hr_unhand(h);
	if (hr_submit_writes(h) < 0) {
		rc = -1;
		err = errno;
	}
	if (hr_submit_loads(h, NULL, &b) < 0) {
		rc = -1;
		err = errno;
	}
	if (load_xfer)
		*load_xfer = hand(h, b);
	pthread_mutex_unlock(&h->lock);
	if (rc)
		errno = err;
	return rc;
}

/**
 * kvs_hiradix_poll() - take in the transfers that completed: host copies
 * become valid (or, failed, are dropped with their descendants'), loads
 * back unlock their chain (or, failed, leave it tombstones).  Under
 * KVS_HIRADIX_DEFER, first submits the queued backups (not the loads:
 * kvs_hiradix_submit() hands out their transfer).
 * @h: cache.
 *
 * Backup batches are taken in submission order; with an agree hook, only
 * as many as every rank has complete (KVS_AGREE_WRITE_ACKS, asked on every
 * call): every rank then marks the same nodes backed up.  The load
 * transfers handed out before this call may be freed by it.
 *
 * Context: MT-Safe (takes h->lock); never waits.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hiradix_poll(kvs_hiradix_t *h)
{
	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	hr_poll_locked(h, true);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/* kvs_hiradix_destroy(), no other thread left: wait for every transfer,
 * submitting what is queued, and free every batch. */
void hr_drain(kvs_hiradix_t *h)
{
	struct hbatch *b;
	node_t *x;

	/* h->lock for the waits, which drop it. */
	pthread_mutex_lock(&h->lock);
	hr_unhand(h);
	(void)hr_submit_writes(h);
	(void)hr_submit_loads(h, NULL, NULL);
	while (h->loads) {
		x = h->loads->last;
		hr_pin(h, x, 1);
		hr_settle_load(h, x);
		hr_pin(h, x, -1);
	}
	while ((x = h->backups)) {
		hr_pin(h, x, 1);
		hr_settle(h, x);
		hr_pin(h, x, -1);
	}
	/* Batches whose every node was dropped: wait, then free. */
	while ((b = h->wacks)) {
		hr_batch_wait(h, b, false);
		batch_unpin(h, b);
	}
	while ((b = h->lacks)) {
		hr_batch_wait(h, b, true);
		batch_unpin(h, b);
	}
	pthread_mutex_unlock(&h->lock);
}
