/* SPDX-License-Identifier: MIT */
/*
 * lib/cache/hiradix_life.c - the life of a hierarchical radix cache
 * (lib/cache/hiradix.c is the tree, lib/cache/hiradix_xfer.c the transfer
 * controller, lib/cache/hiradix_int.h what they share): its attributes,
 * creation (with the poll thread, KVS_HIRADIX_THREAD), destruction (the
 * threads stopped, every transfer drained by the controller, every page
 * given back), the plain accessors of the cache and its nodes, and the
 * extra-key variants of match and insert (the tree's hr_match() and
 * hr_insert() under a key other than 0).
 *
 * Locking: create and destroy run alone (no other call on the cache);
 * the accessors take h->lock (level 2 of common/common.h) or need none.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hiradix_int.h"

/* ------------------------------------------------------------ life */

/**
 * kvs_hiradix_attr_init() - defaults: write through, selective threshold 2,
 * a load back threshold of 10 tokens (SGLang's load_back_threshold).
 * @attr: attributes.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hiradix_attr_init(kvs_hiradix_attr_t *attr)
{
	KVS_ATTR_CLEAR(attr);
	attr->write_policy = KVS_WRITE_THROUGH;
	attr->hit_threshold = 2;
	attr->load_back_threshold = 10;
	attr->poll_us = 1000;
	return 0;
}

/**
 * kvs_hiradix_create() - a hierarchical radix cache over @pool and @hp.
 * @pool: the device pool.
 * @hp: a host pool created over @pool.
 * @attr: attributes, or NULL for the defaults.
 *
 * Context: any thread.
 * Return: the cache, or NULL with errno EINVAL or ENOMEM.
 */
KVS_EXPORT kvs_hiradix_t *kvs_hiradix_create(kvs_pool_t *pool, kvs_hpool_t *hp,
					     const kvs_hiradix_attr_t *attr)
{
	kvs_hiradix_attr_t def;
	kvs_hiradix_t *h;

	if (!attr) {
		kvs_hiradix_attr_init(&def);
		attr = &def;
	}
	if (!pool || !hp || kvs_hpool_pool(hp) != pool || attr->write_policy > KVS_WRITE_BACK ||
	    (attr->write_policy == KVS_WRITE_THROUGH_SELECTIVE && attr->hit_threshold == 0) ||
	    (attr->flags & ~(uint32_t)(KVS_HIRADIX_DEFER | KVS_HIRADIX_THREAD |
				       KVS_HIRADIX_REMAT_HIT | KVS_HIRADIX_QUOTA_CHAIN)) ||
	    ((attr->flags & KVS_HIRADIX_THREAD) && attr->poll_us == 0)) {
		errno = EINVAL;
		return NULL;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL; /* errno ENOMEM */
	h->l3q_tail = &h->l3q;
	h->pfq_tail = &h->pfq;
	if (pthread_mutex_init(&h->lock, NULL) != 0) {
		free(h);
		errno = ENOMEM;
		return NULL;
	}
	if (pthread_cond_init(&h->xcv, NULL) != 0) {
		pthread_mutex_destroy(&h->lock);
		free(h);
		errno = ENOMEM;
		return NULL;
	}
	h->pool = pool;
	h->hp = hp;
	h->ps = kvs_pool_page_size(pool);
	h->slab = kvs_pool_slab(pool);
	h->cap = kvs_pool_capacity(pool);
	h->held = calloc((h->cap / h->ps + 63) / 64 + 1, sizeof(uint64_t));
	h->seen = calloc((h->cap / h->ps + 63) / 64 + 1, sizeof(uint64_t));
	if (!h->slab || !h->held || !h->seen) {
		free(h->held);
		free(h->seen);
		pthread_cond_destroy(&h->xcv);
		pthread_mutex_destroy(&h->lock);
		free(h);
		errno = ENOMEM;
		return NULL;
	}
	h->policy = attr->write_policy;
	h->threshold = attr->write_policy == KVS_WRITE_THROUGH ? 1 : attr->hit_threshold;
	h->lb_threshold = attr->load_back_threshold;
	h->flags = attr->flags;
	h->poll_us = attr->poll_us;
	h->agree = attr->agree;
	h->agree_arg = attr->agree_arg;
	h->sink.cb = attr->event_cb;
	h->sink.arg = attr->event_arg;
	h->sink.ps = h->ps;
	h->root.tree = h;
	h->root.on_dev = true;
	h->root.host_ok = true;
	h->root.dk.idx = h->root.hk.idx = -1;
	evict_heap_init(&h->dheap, KVS_EVICT_LRU);
	evict_heap_init(&h->hheap, KVS_EVICT_LRU);
	if ((h->flags & KVS_HIRADIX_THREAD) && hr_thread_start(h) < 0)
		goto fail;
	/* Last: the pool's elastic calls may find the cache from now on. */
	if (hr_pool_register(h) < 0) {
		hr_thread_stop(h);
		errno = ENOMEM;
		goto fail;
	}
	return h;
fail:
	pthread_cond_destroy(&h->xcv);
	pthread_mutex_destroy(&h->lock);
	free(h->held);
	free(h->seen);
	free(h);
	return NULL;
}

static void hr_free_tree(kvs_hiradix_t *h, node_t *x)
{
	node_t *c, *n;

	for (c = x->child; c; c = n) {
		n = c->next;
		hr_free_tree(h, c);
	}
	if (x == &h->root)
		return;
	if (x->on_dev)
		kvs_pool_free(h->pool, x->len, x->locs);
	if (x->host)
		kvs_hpool_free(h->hp, x->len / h->ps, x->host);
	hr_node_free(h, x);
}

/**
 * kvs_hiradix_destroy() - wait for every transfer in flight, give every
 * device page back to the pool and every host page to the host pool, and
 * free the cache.
 * @h: cache, or NULL.
 *
 * Context: no other call on @h, now or later.
 * Return: 0.
 */
KVS_EXPORT int kvs_hiradix_destroy(kvs_hiradix_t *h)
{
	if (!h)
		return 0;
	/* First: once it returns, no elastic call is in the cache or finds
	 * it. */
	hr_pool_unregister(h);
	hr_thread_stop(h);
	hr_l3_stop(h);
	hr_drain(h);
	hr_free_tree(h, &h->root);
	evict_heap_free(&h->dheap);
	evict_heap_free(&h->hheap);
	free(h->kt);
	pthread_cond_destroy(&h->xcv);
	pthread_mutex_destroy(&h->lock);
	free(h->held);
	free(h->seen);
	free(h);
	return 0;
}

/* ------------------------------------------------------------ accessors */

/**
 * kvs_hiradix_root() - the root node (locking it is a no-op).
 * @h: cache.
 *
 * Context: any thread.
 * Return: the root, or NULL with errno EINVAL.
 */
KVS_EXPORT kvs_hiradix_node_t *kvs_hiradix_root(kvs_hiradix_t *h)
{
	if (!h) {
		errno = EINVAL;
		return NULL;
	}
	return &h->root;
}

/**
 * kvs_hiradix_pool() - the device pool @h was created over.
 * @h: cache.
 *
 * Context: any thread.
 * Return: the pool, or NULL with errno EINVAL.
 */
KVS_EXPORT kvs_pool_t *kvs_hiradix_pool(const kvs_hiradix_t *h)
{
	if (!h) {
		errno = EINVAL;
		return NULL;
	}
	return h->pool;
}

/**
 * kvs_hiradix_node_info() - the state of @node.
 * @h: cache.
 * @node: a node of @h.
 * @info: receives it.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: 0, or -1 with errno EINVAL (NULL, or a node of another cache).
 */
KVS_EXPORT int kvs_hiradix_node_info(kvs_hiradix_t *h, const kvs_hiradix_node_t *node,
				     kvs_hiradix_node_info_t *info)
{
	if (!h || !node || !info || node->tree != h) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	memset(info, 0, sizeof(*info));
	info->tokens = node->len;
	info->on_device = node->on_dev;
	info->on_host = node->host_ok;
	info->backup_pending = node->host && !node->host_ok;
	info->loading = node->ld != NULL;
	info->lock_ref = node->lock_ref;
	info->hit_count = node->hit_count;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/**
 * kvs_hiradix_usage() - what the cache holds (gauges kept as it changes).
 * @h: cache.
 * @u: receives it.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_hiradix_usage(kvs_hiradix_t *h, kvs_hiradix_usage_t *u)
{
	const node_t *x;
	const struct hload *ld;

	if (!h || !u) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&h->lock);
	*u = h->use;
	for (x = h->backups; x; x = x->bnext)
		u->backups_pending++;
	for (ld = h->loads; ld; ld = ld->next)
		u->loads_pending++;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/* ------------------------------------------------------------ extra keys */

/**
 * kvs_hiradix_match_extra() - kvs_hiradix_match() under an extra key.
 * @h: cache.
 * @extra_key: the request's extra key (a LoRA adapter, a cache salt); 0:
 *             kvs_hiradix_match() itself.
 * @key: token ids.
 * @n: tokens.
 * @locs: as for kvs_hiradix_match().
 * @m: as for kvs_hiradix_match().
 *
 * Only what was inserted under @extra_key matches (SGLang's extra_key):
 * requests with different extra keys never share a prefix.
 *
 * Context: MT-Safe (takes h->lock); may wait for a transfer.
 * Return: as kvs_hiradix_match().
 */
KVS_EXPORT ssize_t kvs_hiradix_match_extra(kvs_hiradix_t *h, uint64_t extra_key, const int32_t *key,
					   size_t n, int32_t *locs, kvs_hiradix_match_t *m)
{
	return hr_match(h, extra_key, key, n, locs, m, false);
}

/**
 * kvs_hiradix_match_lock_extra() - kvs_hiradix_match_lock() under an extra
 * key.
 * @h: cache.
 * @extra_key: as for kvs_hiradix_match_extra().
 * @key: token ids.
 * @n: tokens.
 * @locs: as for kvs_hiradix_match().
 * @m: receives the match; not NULL.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: as kvs_hiradix_match_lock().
 */
KVS_EXPORT ssize_t kvs_hiradix_match_lock_extra(kvs_hiradix_t *h, uint64_t extra_key,
						const int32_t *key, size_t n, int32_t *locs,
						kvs_hiradix_match_t *m)
{
	if (!m) {
		errno = EINVAL;
		return -1;
	}
	return hr_match(h, extra_key, key, n, locs, m, true);
}

/**
 * kvs_hiradix_insert_extra() - kvs_hiradix_insert() under an extra key.
 * @h: cache.
 * @extra_key: as for kvs_hiradix_match_extra().
 * @key: token ids.
 * @n: tokens.
 * @locs: as for kvs_hiradix_insert().
 * @last: as for kvs_hiradix_insert().
 *
 * The prefix is cached apart from every other extra key's: its nodes (and,
 * with a store, their L3 keys) are its own.
 *
 * Context: MT-Safe (takes h->lock); may wait for a load back in flight on
 * the path.
 * Return: as kvs_hiradix_insert().
 */
KVS_EXPORT ssize_t kvs_hiradix_insert_extra(kvs_hiradix_t *h, uint64_t extra_key,
					    const int32_t *key, size_t n, const int32_t *locs,
					    kvs_hiradix_node_t **last)
{
	return hr_insert(h, extra_key, key, n, locs, last, false);
}

/**
 * kvs_hiradix_insert_lock_extra() - kvs_hiradix_insert_lock() under an
 * extra key.
 * @h: cache.
 * @extra_key: as for kvs_hiradix_match_extra().
 * @key: token ids.
 * @n: tokens.
 * @locs: as for kvs_hiradix_insert().
 * @last: receives the node, locked; not NULL.
 *
 * Context: MT-Safe (takes h->lock).
 * Return: as kvs_hiradix_insert_lock().
 */
KVS_EXPORT ssize_t kvs_hiradix_insert_lock_extra(kvs_hiradix_t *h, uint64_t extra_key,
						 const int32_t *key, size_t n, const int32_t *locs,
						 kvs_hiradix_node_t **last)
{
	if (!last) {
		errno = EINVAL;
		return -1;
	}
	return hr_insert(h, extra_key, key, n, locs, last, true);
}
