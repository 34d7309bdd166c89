/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hiradix_l3.c - the storage tier (L3, kvs_hiradix_set_store())
 * of the hierarchical radix cache (lib/cache/hiradix.c is the tree,
 * lib/cache/hiradix_int.h the shared structures): backups of valid host
 * copies to the store, prefetch of a key's pages from it, and the two
 * threads that do the store's I/O.
 *
 * Keys.  With a store every node carries its pages' L3 keys (pkey, chained
 * from its parent's last one), computed when the node is made.
 *
 * Backups to L3.  A host copy that becomes valid is queued (hr_l3_backup())
 * with its host pages protected (hlock: not a host leaf, so host eviction
 * leaves it) until the backup thread has written it; the host pages of a
 * valid copy never change, so the thread reads them unlocked.
 *
 * Prefetch.  kvs_hiradix_prefetch() finds the deepest node with a valid
 * host copy on the key's path (the anchor, protected by hlock), allocates
 * host pages for the rest of the key and queues an operation; the prefetch
 * thread hashes the pages, asks the store how many it has from the first,
 * gives up below the threshold, and reads them in chunks, publishing the
 * pages done after each (pf->done, under pf->m).  kvs_hiradix_prefetch_done()
 * decides by the policy when to stop, takes the pages done as tombstones
 * under the anchor, and frees the rest; a chunk still being read when it
 * stops is the thread's to free when it ends (pf->inflight), so no call
 * waits for the store.
 *
 * Locking: the queues are under h->lock (level 2); the threads take it
 * only to take a job and to account for it, never across a store call
 * (kvs_store_exists(), _get_pages(), _set_pages()) or a host pool copy.
 * pf->m (level 3) guards a prefetch's progress between the thread and the
 * caller; it is taken under h->lock or alone, and nothing under it.
 * kvs_hiradix_prefetch_done() unlinks its operation before the ranks
 * agree (KVS_AGREE_PREFETCH, without h->lock), so no other call finds it
 * meanwhile; its anchor stays protected by hlock.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hiradix_int.h"

/* ------------------------------------------------------------ storage */

/* @x's pages' L3 keys, chained from its parent's last one; under an extra
 * key a root's child's chain starts from a key of the extra key's own (the
 * hash of its two halves as a page of two tokens), so that requests with
 * different extra keys never share the store's objects either. */
void hr_node_keys(kvs_hiradix_t *h, node_t *x)
{
	const node_t *p = x->parent;
	const kvs_page_key_t *prev = NULL;
	kvs_page_key_t seed;

	if (!h->store)
		return;
	if (p != &h->root) {
		prev = &p->pkey[p->len / h->ps - 1];
	} else if (x->extra) {
		int32_t e[2] = {(int32_t)(uint32_t)x->extra, (int32_t)(uint32_t)(x->extra >> 32)};

		if (kvs_page_hash(NULL, e, 2, &seed) == 0)
			prev = &seed;
	}
	(void)kvs_page_hashes(prev, x->key, x->len, h->ps, x->pkey);
}

static void hlock(kvs_hiradix_t *h, node_t *x, int d)
{
	if (x == &h->root)
		return;
	x->hlock = (uint32_t)((int)x->hlock + d);
	hr_leaf_update(h, x);
}

/* Queue @x's valid host copy for the store (best effort). */
void hr_l3_backup(kvs_hiradix_t *h, node_t *x)
{
	struct l3job *j;

	if (!h->store || !h->l3.backup)
		return;
	j = calloc(1, sizeof(*j));
	if (!j)
		goto fail;
	j->np = x->len / h->ps;
	j->keys = malloc(j->np * sizeof(*j->keys));
	j->host = malloc(j->np * sizeof(*j->host));
	if (!j->keys || !j->host)
		goto fail;
	memcpy(j->keys, x->pkey, j->np * sizeof(*j->keys));
	memcpy(j->host, x->host, j->np * sizeof(*j->host));
	j->x = x;
	hlock(h, x, 1);
	*h->l3q_tail = j;
	h->l3q_tail = &j->next;
	h->l3_pending++;
	pthread_cond_signal(&h->l3_wake);
	return;
fail:
	if (j) {
		free(j->keys);
		free(j->host);
	}
	free(j);
	ST(h, l3_backup_fail, 1);
}

static void *l3_backup_main(void *arg)
{
	kvs_hiradix_t *h = arg;
	struct l3job *j;
	ssize_t r;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->l3q && !h->l3_stop)
			pthread_cond_wait(&h->l3_wake, &h->lock);
		if (!h->l3q)
			break;
		j = h->l3q;
		h->l3q = j->next;
		if (!h->l3q)
			h->l3q_tail = &h->l3q;
		pthread_mutex_unlock(&h->lock);
		r = kvs_store_set_pages(h->store, j->keys, j->np, h->hp, j->host);
		pthread_mutex_lock(&h->lock);
		if (r == (ssize_t)j->np)
			ST(h, l3_backup_pages, j->np);
		else
			ST(h, l3_backup_fail, 1);
		hlock(h, j->x, -1);
		h->l3_pending--;
		pthread_cond_broadcast(&h->l3_idle);
		free(j->keys);
		free(j->host);
		free(j);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* Free @pf's host pages [from, np) and the op itself. */
static void pf_free(kvs_hiradix_t *h, struct pf *pf, size_t from)
{
	if (pf->np > from)
		kvs_hpool_free(h->hp, pf->np - from, pf->host + from);
	pthread_mutex_destroy(&pf->m);
	KVS_FREE_ALL(pf->tok, pf->host, pf->keys, pf);
}

static void *l3_prefetch_main(void *arg)
{
	kvs_hiradix_t *h = arg;
	struct pf *pf;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		size_t hit, at;
		bool stop;

		while (!h->pfq && !h->l3_stop)
			pthread_cond_wait(&h->pf_wake, &h->lock);
		if (!h->pfq)
			break;
		pf = h->pfq;
		h->pfq = pf->qnext;
		if (!h->pfq)
			h->pfq_tail = &h->pfq;
		pthread_mutex_unlock(&h->lock);
		/* Hash, ask, read chunk by chunk while not stopped. */
		hit = 0;
		if (kvs_page_hashes(pf->has_prev ? &pf->prev : NULL, pf->tok, pf->np * h->ps, h->ps,
				    pf->keys) == (ssize_t)pf->np) {
			ssize_t e = kvs_store_exists(h->store, pf->keys, pf->np);

			hit = e > 0 ? (size_t)e : 0;
			if (hit * h->ps < h->l3.prefetch_threshold)
				hit = 0;
		}
		for (at = 0;;) {
			size_t n = hit - at < h->l3.chunk_pages ? hit - at : h->l3.chunk_pages;
			ssize_t got = 0;

			pthread_mutex_lock(&pf->m);
			stop = pf->terminated || n == 0;
			pf->inflight = !stop;
			pthread_mutex_unlock(&pf->m);
			if (stop)
				break;
			got = kvs_store_get_pages(h->store, pf->keys + at, n, h->hp, pf->host + at);
			pthread_mutex_lock(&pf->m);
			pf->inflight = false;
			if (got > 0)
				at += (size_t)got;
			if (!pf->terminated)
				pf->done = at;
			stop = pf->terminated;
			pthread_mutex_unlock(&pf->m);
			if (stop || got != (ssize_t)n)
				break;
		}
		pthread_mutex_lock(&pf->m);
		pf->complete = true;
		stop = pf->terminated;
		pthread_mutex_unlock(&pf->m);
		if (stop)
			pf_free(h, pf, pf->taken); /* the caller gave it up to us */
		pthread_mutex_lock(&h->lock);
		h->pf_live--;
		pthread_cond_broadcast(&h->l3_idle);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

void hr_l3_stop(kvs_hiradix_t *h)
{
	struct l3job *j;
	struct pf *pf;

	if (!h->store)
		return;
	pthread_mutex_lock(&h->lock);
	h->l3_stop = true;
	/* Queued prefetches are not started: stop them here. */
	while ((pf = h->pfq)) {
		bool given_up;

		h->pfq = pf->qnext;
		if (!h->pfq)
			h->pfq_tail = &h->pfq;
		h->pf_live--;
		pthread_mutex_lock(&pf->m);
		pf->complete = true;
		given_up = pf->terminated;
		pthread_mutex_unlock(&pf->m);
		if (given_up)
			pf_free(h, pf, pf->taken); /* the caller gave it up */
	}
	pthread_cond_broadcast(&h->l3_wake);
	pthread_cond_broadcast(&h->pf_wake);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->l3_thread, NULL);
	pthread_join(h->pf_thread, NULL);
	/* Backups the thread did not take; prefetches the caller left. */
	while ((j = h->l3q)) {
		h->l3q = j->next;
		if (!h->l3q)
			h->l3q_tail = &h->l3q;
		hlock(h, j->x, -1);
		free(j->keys);
		free(j->host);
		free(j);
	}
	while ((pf = h->pfs)) {
		h->pfs = pf->next;
		hlock(h, pf->anchor, -1);
		pf_free(h, pf, 0);
	}
	pthread_cond_destroy(&h->l3_wake);
	pthread_cond_destroy(&h->pf_wake);
	pthread_cond_destroy(&h->l3_idle);
}

/**
 * kvs_hiradix_l3_attr_init() - the defaults: best effort, a threshold of
 * 256 tokens, timeout 2000 ms + 100 ms per 1024 tokens capped at 30 s
 * (SGLang's prefetch_timeout_base, _per_ki_token and _max), chunks of 16
 * pages, host copies backed up to the store.
 * @attr: attributes.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hiradix_l3_attr_init(kvs_hiradix_l3_attr_t *attr)
{
	KVS_ATTR_CLEAR(attr);
	attr->prefetch_policy = KVS_PREFETCH_BEST_EFFORT;
	attr->prefetch_threshold = 256;
	attr->timeout_base_ms = 2000;
	attr->timeout_per_ktoken_ms = 100;
	attr->timeout_max_ms = 30000;
	attr->chunk_pages = 16;
	attr->backup = 1;
	return 0;
}

/**
 * kvs_hiradix_set_store() - give the cache a storage tier.
 * @h: cache, still empty.
 * @store: the store (kvs_store_open()), whose page_bytes are the host
 *         pool's page bytes; it must outlive the cache.
 * @attr: attributes, or NULL for the defaults.
 *
 * Starts the backup and prefetch threads.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: 0, or -1 with errno EINVAL (a bad attribute, a store of another
 * page size), EBUSY (the cache has nodes, or a store already), ENOTSUP (no
 * SHA-256 in this build), ENOMEM or EAGAIN.
 */
KVS_EXPORT int kvs_hiradix_set_store(kvs_hiradix_t *h, kvs_store_t *store,
				     const kvs_hiradix_l3_attr_t *attr)
{
	kvs_hiradix_l3_attr_t def;
	kvs_page_key_t k;
	int32_t t = 0;
	size_t pb;
	int rc;

	if (!attr) {
		kvs_hiradix_l3_attr_init(&def);
		attr = &def;
	}
	if (!h || !store || attr->prefetch_policy > KVS_PREFETCH_TIMEOUT || attr->chunk_pages == 0) {
		errno = EINVAL;
		return -1;
	}
	if (kvs_page_hash(NULL, &t, 1, &k) < 0)
		return -1;
	pb = kvsi_hpool_page_bytes(h->hp);
	if (pb != kvs_store_page_bytes(store)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	if (h->store || h->use.nodes) {
		pthread_mutex_unlock(&h->lock);
		errno = EBUSY;
		return -1;
	}
	h->l3 = *attr;
	if (pthread_cond_init(&h->l3_wake, NULL) != 0 || pthread_cond_init(&h->pf_wake, NULL) != 0 ||
	    pthread_cond_init(&h->l3_idle, NULL) != 0) {
		pthread_mutex_unlock(&h->lock);
		errno = ENOMEM;
		return -1;
	}
	rc = pthread_create(&h->l3_thread, NULL, l3_backup_main, h);
	if (rc == 0) {
		rc = pthread_create(&h->pf_thread, NULL, l3_prefetch_main, h);
		if (rc != 0) {
			h->l3_stop = true;
			pthread_cond_broadcast(&h->l3_wake);
			pthread_mutex_unlock(&h->lock);
			pthread_join(h->l3_thread, NULL);
			pthread_mutex_lock(&h->lock);
			h->l3_stop = false;
		}
	}
	if (rc != 0) {
		pthread_cond_destroy(&h->l3_wake);
		pthread_cond_destroy(&h->pf_wake);
		pthread_cond_destroy(&h->l3_idle);
		pthread_mutex_unlock(&h->lock);
		errno = rc == EAGAIN ? EAGAIN : ENOMEM;
		return -1;
	}
	h->store = store;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

static struct pf *pf_find(kvs_hiradix_t *h, uint64_t id, struct pf ***link)
{
	struct pf **l;

	for (l = &h->pfs; *l; l = &(*l)->next)
		if ((*l)->id == id) {
			if (link)
				*link = l;
			return *l;
		}
	return NULL;
}

/* Lock @h and find operation @id; NULL, unlocked, with errno EINVAL (no
 * cache, or no store) or ENOENT. */
static struct pf *pf_lookup(kvs_hiradix_t *h, uint64_t id, struct pf ***link)
{
	struct pf *pf;

	if (!h) {
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&h->lock);
	if (!h->store) {
		pthread_mutex_unlock(&h->lock);
		errno = EINVAL;
		return NULL;
	}
	pf = pf_find(h, id, link);
	if (!pf) {
		pthread_mutex_unlock(&h->lock);
		errno = ENOENT;
	}
	return pf;
}

/**
 * kvs_hiradix_prefetch() - start fetching from the store the pages of
 * @key past what the host already has.
 * @h: cache with a store.
 * @id: the caller's name for the operation (a request id), unique among
 *      those in progress.
 * @key: token ids.
 * @n: tokens; only whole pages are fetched.
 *
 * Skipped (0) when fewer than the threshold's tokens are past the host
 * copy, or when the host pool has no room for them even after host
 * eviction.
 *
 * Context: MT-Safe (takes h->lock); never waits for the store.
 * Return: the tokens it will try to fetch, 0 when skipped, or -1 with
 * errno EINVAL (no store, bad arguments), EEXIST (@id in progress) or
 * ENOMEM.
 */
KVS_EXPORT ssize_t kvs_hiradix_prefetch(kvs_hiradix_t *h, uint64_t id, const int32_t *key,
					size_t n)
{
	size_t pos, base = 0, rem, np;
	node_t *x, *z, *y;
	struct pf *pf;
	uint64_t tmo;

	if (!h || (n && !key)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	if (!h->store) {
		pthread_mutex_unlock(&h->lock);
		errno = EINVAL;
		return -1;
	}
	if (pf_find(h, id, NULL)) {
		pthread_mutex_unlock(&h->lock);
		errno = EEXIST;
		return -1;
	}
	n -= n % h->ps;
	x = hr_walk(h, 0, key, n, &pos);
	if (!x) {
		pthread_mutex_unlock(&h->lock);
		errno = ENOMEM;
		return -1;
	}
	for (z = x; z != &h->root && !z->host_ok; z = z->parent)
		;
	for (y = z; y != &h->root; y = y->parent)
		base += y->len;
	rem = n - base;
	if (rem == 0 || rem < h->l3.prefetch_threshold) {
		if (rem)
			ST(h, prefetch_skipped, 1);
		pthread_mutex_unlock(&h->lock);
		return 0;
	}
	np = rem / h->ps;
	pf = calloc(1, sizeof(*pf));
	if (!pf || pthread_mutex_init(&pf->m, NULL) != 0)
		goto nomem;
	pf->tok = malloc(rem * sizeof(int32_t));
	pf->host = malloc(np * sizeof(int32_t));
	pf->keys = malloc(np * sizeof(kvs_page_key_t));
	if (!pf->tok || !pf->host || !pf->keys)
		goto nomem_m;
	if (kvs_hpool_alloc(h->hp, np, pf->host) < 0) {
		hr_evict_host(h, rem);
		if (kvs_hpool_alloc(h->hp, np, pf->host) < 0) {
			ST(h, prefetch_skipped, 1);
			pthread_mutex_destroy(&pf->m);
			KVS_FREE_ALL(pf->tok, pf->host, pf->keys, pf);
			pthread_mutex_unlock(&h->lock);
			return 0;
		}
	}
	memcpy(pf->tok, key + base, rem * sizeof(int32_t));
	pf->id = id;
	pf->np = np;
	pf->anchor = z;
	if (z != &h->root) {
		pf->prev = z->pkey[z->len / h->ps - 1];
		pf->has_prev = true;
	}
	tmo = h->l3.timeout_base_ms + (uint64_t)h->l3.timeout_per_ktoken_ms * rem / 1024;
	if (tmo > h->l3.timeout_max_ms)
		tmo = h->l3.timeout_max_ms;
	pf->deadline_ns = kvs_now_ns() + tmo * 1000000ull;
	hlock(h, z, 1);
	pf->next = h->pfs;
	h->pfs = pf;
	*h->pfq_tail = pf;
	h->pfq_tail = &pf->qnext;
	h->pf_live++;
	pthread_cond_signal(&h->pf_wake);
	ST(h, prefetches, 1);
	pthread_mutex_unlock(&h->lock);
	return (ssize_t)rem;
nomem_m:
	pthread_mutex_destroy(&pf->m);
nomem:
	if (pf) {
		free(pf->tok);
		free(pf->host);
		free(pf->keys);
	}
	free(pf);
	pthread_mutex_unlock(&h->lock);
	errno = ENOMEM;
	return -1;
}

/* Hang @pf's first @d pages under its anchor as host-only nodes, where the
 * tree does not have them already; free those of the @d it does not use.
 * Returns the tokens now on the host for the key. */
static size_t pf_insert(kvs_hiradix_t *h, struct pf *pf, size_t d)
{
	size_t pos = 0, end = d * h->ps, pg;
	node_t *x = pf->anchor, *c;

	while (pos < end) {
		c = hr_find_child(h, x, 0, pf->tok + pos);
		if (!c) {
			node_t *nn = hr_node_new(h, end - pos);

			if (!nn)
				break;
			nn->host = malloc((end - pos) / h->ps * sizeof(int32_t));
			if (!nn->host) {
				hr_node_free(h, nn);
				break;
			}
			memcpy(nn->key, pf->tok + pos, (end - pos) * sizeof(int32_t));
			memcpy(nn->host, pf->host + pos / h->ps, (end - pos) / h->ps * sizeof(int32_t));
			memcpy(nn->pkey, pf->keys + pos / h->ps,
			       (end - pos) / h->ps * sizeof(kvs_page_key_t));
			nn->host_ok = true;
			hr_child_add(x, nn);
			hr_acct(h, nn, 1);
			hr_node_hash(h, nn);
			hr_touch(h, nn);
			hr_leaf_update(h, nn);
			hr_leaf_update(h, x);
			hr_node_events(h, nn, KVS_KV_STORED, KVS_MEDIUM_CPU);
			pos = end;
			break;
		}
		{
			size_t k = hr_common(h, c, pf->tok + pos, end - pos);

			if (k < c->len) {
				c = hr_split(h, c, k);
				if (!c)
					break;
			}
		}
		pg = pos / h->ps;
		if (c->host_ok) {
			kvs_hpool_free(h->hp, c->len / h->ps, pf->host + pg);
		} else if (!c->host) {
			/* On the device without a copy: this is its copy. */
			hr_acct(h, c, -1);
			c->host = malloc(c->len / h->ps * sizeof(int32_t));
			if (!c->host) {
				hr_acct(h, c, 1);
				break;
			}
			memcpy(c->host, pf->host + pg, c->len / h->ps * sizeof(int32_t));
			c->host_ok = true;
			hr_acct(h, c, 1);
			hr_leaf_update(h, c);
			hr_node_events(h, c, KVS_KV_STORED, KVS_MEDIUM_CPU);
		} else {
			break; /* a backup pending: nothing may hang below it */
		}
		pos += c->len;
		x = c;
	}
	if (pos < end)
		kvs_hpool_free(h->hp, d - pos / h->ps, pf->host + pos / h->ps);
	return pos < end ? pos : end;
}

/**
 * kvs_hiradix_prefetch_done() - whether a prefetch is over, by the
 * policy; if it is, take its pages into the tree.
 * @h: cache.
 * @id: the operation.
 * @tokens: receives the tokens now on the host thanks to it (may be NULL).
 *
 * KVS_PREFETCH_BEST_EFFORT: over at once, with the pages read so far.
 * KVS_PREFETCH_WAIT_COMPLETE: over when the thread has read every page
 * the store had.  KVS_PREFETCH_TIMEOUT: that, or the deadline passed.
 * Once over, the pages read (the ranks agree on their number with
 * KVS_AGREE_PREFETCH) become host-only nodes under the anchor, the rest of
 * the host pages are freed, and @id is forgotten.
 *
 * Context: MT-Safe (takes h->lock); never waits for the store.
 * Return: 1 over, 0 not yet (call again later), or -1 with errno EINVAL
 * (no store) or ENOENT (no such operation).
 */
KVS_EXPORT int kvs_hiradix_prefetch_done(kvs_hiradix_t *h, uint64_t id, size_t *tokens)
{
	struct pf *pf, **link;
	size_t d, got;
	bool complete;

	pf = pf_lookup(h, id, &link);
	if (!pf)
		return -1;
	pthread_mutex_lock(&pf->m);
	complete = pf->complete;
	d = pf->done;
	pthread_mutex_unlock(&pf->m);
	if (!complete && (h->l3.prefetch_policy == KVS_PREFETCH_WAIT_COMPLETE ||
			  (h->l3.prefetch_policy == KVS_PREFETCH_TIMEOUT &&
			   kvs_now_ns() < pf->deadline_ns))) {
		pthread_mutex_unlock(&h->lock);
		return 0;
	}
	/* Pages [0, d) are final: the thread reads only past pf->done.  The
	 * operation leaves h->pfs first: the ranks agree without h->lock,
	 * and no other call may find it meanwhile. */
	*link = pf->next;
	if (h->agree) {
		uint64_t a = hr_agree(h, KVS_AGREE_PREFETCH, (uint64_t)d * h->ps);

		if (a < (uint64_t)d * h->ps)
			d = (size_t)(a / h->ps);
	}
	got = pf_insert(h, pf, d);
	hlock(h, pf->anchor, -1);
	/* Pages [d, np) and the op: ours if the thread is finished with it,
	 * else the thread's to free when it is. */
	pthread_mutex_lock(&pf->m);
	pf->terminated = true;
	pf->taken = d;
	complete = pf->complete;
	pthread_mutex_unlock(&pf->m);
	if (complete)
		pf_free(h, pf, d);
	ST(h, prefetch_tokens, got);
	if (tokens)
		*tokens = got;
	pthread_mutex_unlock(&h->lock);
	return 1;
}

/**
 * kvs_hiradix_prefetch_revoke() - give up a prefetch: nothing is taken
 * into the tree, its host pages are freed (by the thread, when it is
 * reading one of them).
 * @h: cache.
 * @id: the operation.
 *
 * Context: MT-Safe (takes h->lock); never waits for the store.
 * Return: 0, or -1 with errno EINVAL (no store) or ENOENT.
 */
KVS_EXPORT int kvs_hiradix_prefetch_revoke(kvs_hiradix_t *h, uint64_t id)
{
	struct pf *pf, **link;
	bool complete;

	pf = pf_lookup(h, id, &link);
	if (!pf)
		return -1;
	*link = pf->next;
	hlock(h, pf->anchor, -1);
	pthread_mutex_lock(&pf->m);
	pf->terminated = true;
	pf->taken = 0;
	complete = pf->complete;
	pthread_mutex_unlock(&pf->m);
	if (complete)
		pf_free(h, pf, 0);
	ST(h, prefetch_revoked, 1);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/**
 * kvs_hiradix_l3_wait() - wait until the storage threads are idle: every
 * queued backup to the store written (or failed) and every prefetch read
 * as far as it goes.
 * @h: cache.
 *
 * Context: MT-Safe (takes h->lock); waits for the store.
 * Return: 0, or -1 with errno EINVAL (no store).
 */
KVS_EXPORT int kvs_hiradix_l3_wait(kvs_hiradix_t *h)
{
	if (!h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	if (!h->store) {
		pthread_mutex_unlock(&h->lock);
		errno = EINVAL;
		return -1;
	}
	while (h->l3_pending > 0 || h->pf_live > 0)
		pthread_cond_wait(&h->l3_idle, &h->lock);
	pthread_mutex_unlock(&h->lock);
	return 0;
}
