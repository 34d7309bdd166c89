/* SPDX-License-Identifier: MIT */
/*
 * python/kvslab/_events.c - the KV event queues of the Python types: what a
 * cache's event callback reports (kvs_kv_event_t of a radix tree,
 * kvs_hcache_event_t of the hashed block cache) queued in C and handed to
 * Python by take_events(), as SGLang's RadixCache and vLLM's BlockPool hand
 * theirs to the scheduler's publisher.
 *
 * The callbacks run inside library calls that the binding makes with the
 * GIL released, under the cache's own lock: no Python object can be made
 * there.  So each event is copied, whole (its hashes and token ids too),
 * into a byte queue under the queue's mutex, and take_events() swaps the
 * queue out under that mutex and builds the tuples with the GIL held.  An
 * event that cannot be queued for want of memory is counted; take_events()
 * then raises kvslab.Error(ENOMEM) after handing nothing back, so that a
 * publisher never sends a stream with a silent hole in it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "_kvslab.h"

/* One queued event; its hashes, parent and token ids follow it. */
struct evrec {
	uint32_t size;		/* of the record, padded to 8 bytes */
	int32_t type;
	int32_t medium;
	uint32_t ntok;		/* token ids that follow */
	uint32_t has_tok;
	uint32_t nhash;		/* hcache: kvs_block_hash_t that follow */
	uint32_t has_parent;	/* hcache: one more kvs_block_hash_t */
	uint32_t block_size;
	uint64_t hash, parent, extra;
};

int kvpy_evq_init(struct kvpy_evq *q)
{
	memset(q, 0, sizeof(*q));
	return pthread_mutex_init(&q->mu, NULL) ? -1 : 0;
}

void kvpy_evq_destroy(struct kvpy_evq *q)
{
	free(q->buf);
	q->buf = NULL;
	q->len = q->cap = 0;
	pthread_mutex_destroy(&q->mu);
}

/* Room for @need more bytes, mutex held; 0 or -1 (lost counted). */
static int evq_reserve(struct kvpy_evq *q, size_t need)
{
	size_t cap = q->cap ? q->cap : 4096;
	unsigned char *nb;

	if (q->len + need <= q->cap)
		return 0;
	while (cap < q->len + need)
		cap *= 2;
	nb = realloc(q->buf, cap);
	if (!nb) {
		q->lost++;
		return -1;
	}
	q->buf = nb;
	q->cap = cap;
	return 0;
}

static void evq_push(struct kvpy_evq *q, const struct evrec *h, const kvs_block_hash_t *hashes,
		     const kvs_block_hash_t *parent, const int32_t *tok)
{
	size_t hb = (size_t)h->nhash * sizeof(kvs_block_hash_t);
	size_t pb = h->has_parent ? sizeof(kvs_block_hash_t) : 0;
	size_t tb = (size_t)h->ntok * sizeof(int32_t);
	size_t size = (sizeof(*h) + hb + pb + tb + 7) & ~(size_t)7;
	unsigned char *p;

	pthread_mutex_lock(&q->mu);
	if (evq_reserve(q, size) == 0) {
		p = q->buf + q->len;
		memcpy(p, h, sizeof(*h));
		((struct evrec *)p)->size = (uint32_t)size;
		p += sizeof(*h);
		if (hb)
			memcpy(p, hashes, hb);
		p += hb;
		if (pb)
			memcpy(p, parent, pb);
		p += pb;
		if (tb)
			memcpy(p, tok, tb);
		q->len += size;
	}
	pthread_mutex_unlock(&q->mu);
}

/* kvs_kv_event_cb of a radix tree (and of the hierarchical cache). */
void kvpy_evq_kv_cb(void *arg, const kvs_kv_event_t *ev)
{
	struct evrec h = {
		.type = ev->type,
		.medium = ev->medium,
		.hash = ev->hash,
		.parent = ev->parent_hash,
		.extra = ev->extra_key,
	};

	if (ev->type == KVS_KV_STORED && ev->token_ids) {
		h.has_tok = 1;
		h.ntok = ev->tokens;
	}
	evq_push(arg, &h, NULL, NULL, h.has_tok ? ev->token_ids : NULL);
}

/* kvs_hcache_event_cb of the hashed block cache. */
void kvpy_evq_hcache_cb(void *arg, const kvs_hcache_event_t *ev)
{
	struct evrec h = {
		.type = ev->type,
		.nhash = (uint32_t)ev->nhashes,
		.has_parent = ev->type == KVS_KV_STORED && ev->parent,
		.block_size = ev->block_size,
		.extra = ev->extra_key,
	};

	if (ev->type == KVS_KV_STORED && ev->token_ids) {
		h.has_tok = 1;
		h.ntok = ev->tokens;
	}
	evq_push(arg, &h, ev->hashes, ev->parent, h.has_tok ? ev->token_ids : NULL);
}

static PyObject *tok_tuple(const int32_t *v, uint32_t n)
{
	PyObject *t = PyTuple_New(n);
	uint32_t i;

	for (i = 0; t && i < n; i++) {
		PyObject *x = PyLong_FromLong(v[i]);

		if (!x) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SET_ITEM(t, i, x);
	}
	return t;
}

static PyObject *hash_obj(const kvs_block_hash_t *h)
{
	return PyBytes_FromStringAndSize((const char *)h->bytes, h->len);
}

/* One event as the tuple take_events() documents for @hcache or not. */
static PyObject *ev_tuple(const struct evrec *h, int hcache)
{
	const unsigned char *p = (const unsigned char *)(h + 1);
	const kvs_block_hash_t *hashes = (const void *)p;
	const kvs_block_hash_t *parent = h->has_parent ? hashes + h->nhash : NULL;
	const int32_t *tok = (const void *)(p + ((size_t)h->nhash + (h->has_parent ? 1 : 0)) *
						   sizeof(kvs_block_hash_t));
	PyObject *t = NULL, *hl = NULL, *par = NULL;
	PyObject *toks;
	uint32_t i;

	if (h->has_tok) {
		toks = tok_tuple(tok, h->ntok);
		if (!toks)
			return NULL;
	} else {
		toks = Py_None;
		Py_INCREF(toks);
	}
	if (!hcache)
		return Py_BuildValue("(iKKNiK)", h->type, (unsigned long long)h->hash,
				     (unsigned long long)h->parent, toks, h->medium,
				     (unsigned long long)h->extra);
	hl = PyList_New(h->nhash);
	for (i = 0; hl && i < h->nhash; i++) {
		PyObject *b = hash_obj(&hashes[i]);

		if (!b)
			Py_CLEAR(hl);
		else
			PyList_SET_ITEM(hl, i, b);
	}
	if (parent)
		par = hash_obj(parent);
	else {
		par = Py_None;
		Py_INCREF(par);
	}
	if (hl && par)
		t = Py_BuildValue("(iNNNIK)", h->type, hl, par, toks, h->block_size,
				  (unsigned long long)h->extra);
	else {
		Py_XDECREF(hl);
		Py_XDECREF(par);
		Py_DECREF(toks);
	}
	return t;
}

PyObject *kvpy_evq_take(struct kvpy_evq *q, int hcache)
{
	unsigned char *buf;
	size_t len, off;
	uint64_t lost;
	PyObject *l;

	pthread_mutex_lock(&q->mu);
	buf = q->buf;
	len = q->len;
	lost = q->lost;
	q->buf = NULL;
	q->len = q->cap = 0;
	q->lost = 0;
	pthread_mutex_unlock(&q->mu);
	if (lost) {
		free(buf);
		errno = ENOMEM;
		return kvpy_raise("take_events: events were lost for want of memory", NULL);
	}
	l = PyList_New(0);
	for (off = 0; l && off < len;) {
		const struct evrec *h = (const void *)(buf + off);
		PyObject *t = ev_tuple(h, hcache);

		if (!t || PyList_Append(l, t) < 0)
			Py_CLEAR(l);
		Py_XDECREF(t);
		off += h->size;
	}
	free(buf);
	return l;
}
