// SPDX-License-Identifier: MIT
/*
 * lib/ops/kvpub.c - publish KV events as vLLM's ZmqEventPublisher does
 * (vllm/distributed/kv_events.py), so that routers written for vLLM and
 * SGLang (llm-d, Dynamo) read kvslab's events unchanged.
 *
 * Wire format (kvslab-kvevents(7) has the field-by-field mapping and the
 * vLLM version each form follows):
 *  - PUB socket, one three-frame message per batch: the topic, the batch's
 *    sequence number as 8 bytes big-endian (0, 1, 2, ...), the payload;
 *  - the payload is msgpack, as msgspec encodes vLLM's structs: the batch,
 *    an array_like struct, is [ts (float64), [event...], data_parallel_rank];
 *    each event is a tagged struct, by default (KVS_KVPUB_FORMAT_ARRAY,
 *    vLLM's array_like events, what routers built for vLLM decode) an
 *    array of the tag, the class name, then the fields in their declared
 *    order: ["BlockStored", block_hashes, parent_block_hash, token_ids,
 *    block_size, lora_id, medium, lora_name], ["BlockRemoved",
 *    block_hashes, medium], ["AllBlocksCleared"]; or (KVS_KVPUB_FORMAT_MAP,
 *    vLLM since its PR #42892) a map whose first key, "type", holds the
 *    tag, followed by the same fields by name;
 *  - ROUTER socket for replay: a request [identity, "", start_seq (8 bytes
 *    big-endian)] is answered with [identity, "", seq, payload] for the
 *    buffered batches whose seq >= start_seq, oldest first, at most
 *    replay_max_batches of them, then [identity, "", -1 as 8 bytes, ""];
 *    with KVS_KVPUB_REPLAY_TOPIC (vLLM's PR #45177) each answer has the
 *    topic frame before the seq, the end marker an empty one.  A request
 *    of another shape (frame count, a delimiter that is not empty, a
 *    start_seq not of 8 bytes) gets no answer at all: one request can
 *    never make the publisher send more than replay_max_batches batches.
 *  - A stored event's lora_id and lora_name come from the lora_cb the
 *    caller gives, asked with the event's extra key when its batch is
 *    encoded; without one, or when it says no, they are nil.
 *
 * Threads: kvs_kvpub_event_cb() only copies the event into a preallocated
 * queue, and a stored event's token ids into a preallocated ring of
 * max_queue_tokens ids, under a short mutex (it may run inside a cache's
 * writer section, where nothing may block or allocate); what does not fit
 * is dropped and counted.  The ring is FIFO like the queue: the ids of the
 * events a flush takes are the ring's oldest, and they stay reserved until
 * the batch is encoded, so producers never overwrite what is being read.
 * The sockets are used only under the send lock, by the background thread
 * or by kvs_kvpub_flush(); so is lora_cb, called while a batch is encoded,
 * outside the queue's mutex and any cache's writer section.
 * ZeroMQ sockets may move between threads with a full barrier between
 * uses, which that lock gives.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include <kvslab/kvpub.h>

/* Loopback only: the events carry every cached block's token ids, and the
 * sockets have no authentication; a wider bind is the caller's choice. */
#define DEF_ENDPOINT "tcp://127.0.0.1:5557"

KVS_EXPORT int kvs_kvpub_attr_init(kvs_kvpub_attr_t *attr)
{
	KVS_ATTR_CLEAR(attr);
	attr->endpoint = DEF_ENDPOINT;
	attr->bind = KVS_KVPUB_BIND;
	attr->replay_endpoint = NULL;
	attr->topic = "";
	attr->buffer_steps = 10000;
	attr->max_batch_events = 1024;
	attr->max_queue = 100000;
	attr->flush_interval_ms = 10;
	attr->hwm = 100000;
	attr->data_parallel_rank = 0;
	attr->format = KVS_KVPUB_FORMAT_ARRAY;
	attr->max_queue_tokens = (size_t)1 << 20;
	attr->replay_max_batches = 1000;
	attr->replay_framing = KVS_KVPUB_REPLAY_SEQ;
	attr->lora_cb = NULL;
	attr->lora_arg = NULL;
	return 0;
}

#ifndef KVS_HAVE_KVPUB

/* Built without libzmq and msgpack-c: the same API, nothing published. */
KVS_EXPORT kvs_kvpub_t *kvs_kvpub_create(const kvs_kvpub_attr_t *attr)
{
	(void)attr;
	errno = ENOTSUP;
	return NULL;
}

KVS_EXPORT int kvs_kvpub_destroy(kvs_kvpub_t *pub)
{
	if (!pub)
		return 0;
	errno = ENOTSUP;
	return -1;
}

KVS_EXPORT void kvs_kvpub_event_cb(void *pub, const kvs_kv_event_t *ev)
{
	(void)pub;
	(void)ev;
}

KVS_EXPORT int kvs_kvpub_flush(kvs_kvpub_t *pub)
{
	(void)pub;
	errno = ENOTSUP;
	return -1;
}

KVS_EXPORT uint64_t kvs_kvpub_dropped(kvs_kvpub_t *pub)
{
	(void)pub;
	return 0;
}

#else /* KVS_HAVE_KVPUB */

#include <pthread.h>
#include <time.h>

#include <msgpack.h>
#include <zmq.h>

struct kvpub_batch {
	uint64_t seq;
	char *buf;
	size_t len;
};

/* A queued event; its token ids (ntok of them) are in the token ring, right
 * after those of the events queued before it. */
struct kvpub_ev {
	kvs_kv_event_t ev;		/* ev.token_ids is not used */
	size_t ntok;
};

struct kvs_kvpub {
	/* The queue and the token ring, under qlock. */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct kvpub_ev *q;
	size_t qcap, qhead, qlen;
	int32_t *tok;			/* max_queue_tokens ids */
	size_t tokcap, tokhead, toklen;	/* toklen counts the ids a flush reads */
	uint64_t dropped;
	int stop;

	/* Sending, under slock. */
	pthread_mutex_t slock;
	void *ctx, *pub, *replay;
	char *topic;
	size_t topic_len;
	struct kvpub_batch *ring;	/* the last buffer_steps batches */
	size_t ringcap, ringhead, ringlen;
	uint64_t next_seq;
	struct kvpub_ev *batch;		/* max_batch scratch */
	size_t max_batch;
	int dp_rank;
	int map;			/* KVS_KVPUB_FORMAT_MAP */
	int replay_topic;		/* KVS_KVPUB_REPLAY_TOPIC */
	size_t replay_max;		/* batches one replay request gets at most */
	kvs_kvpub_lora_cb lora_cb;
	void *lora_arg;
	msgpack_sbuffer sbuf;

	uint32_t interval_ms;
	int has_thread;
	pthread_t thread;
};

static void put_be64(unsigned char *b, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		b[i] = (unsigned char)(v & 0xff);
		v >>= 8;
	}
}

static int pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);
	return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

/* A tagged struct's head: msgspec puts the tag first, under "type" in a
 * map, as the first element of an array; @nfields follow. */
static int pack_head(msgpack_packer *pk, int map, const char *tag, size_t nfields)
{
	if (map)
		return msgpack_pack_map(pk, nfields + 1) | pack_str(pk, "type") | pack_str(pk, tag);
	return msgpack_pack_array(pk, nfields + 1) | pack_str(pk, tag);
}

/* A field's name, in a map only; its value follows. */
static int pack_key(msgpack_packer *pk, int map, const char *name)
{
	return map ? pack_str(pk, name) : 0;
}

/* @n token ids from the ring, from index @at on. */
static int pack_tokens(msgpack_packer *pk, const struct kvs_kvpub *p, size_t at, size_t n)
{
	int r = msgpack_pack_array(pk, n);

	for (size_t j = 0; j < n; j++, at++) {
		if (at == p->tokcap)
			at = 0;
		r |= msgpack_pack_int32(pk, p->tok[at]);
	}
	return r;
}

/* One event, as msgspec encodes vLLM's tagged structs; its token ids at
 * ring index @at. */
static int pack_event(msgpack_packer *pk, const struct kvs_kvpub *p, const struct kvpub_ev *q,
		      size_t at)
{
	const kvs_kv_event_t *ev = &q->ev;
	int map = p->map, r = 0;
	int64_t lora_id = -1;
	const char *lora_name = NULL;

	switch (ev->type) {
	case KVS_KV_STORED:
		/* Asked here, under slock, outside the cache's writer section. */
		if (p->lora_cb && !p->lora_cb(p->lora_arg, ev->extra_key, &lora_id, &lora_name)) {
			lora_id = -1;
			lora_name = NULL;
		}
		r |= pack_head(pk, map, "BlockStored", 7);
		r |= pack_key(pk, map, "block_hashes");
		r |= msgpack_pack_array(pk, 1);
		r |= msgpack_pack_uint64(pk, ev->hash);
		r |= pack_key(pk, map, "parent_block_hash");
		if (ev->parent_hash)
			r |= msgpack_pack_uint64(pk, ev->parent_hash);
		else
			r |= msgpack_pack_nil(pk);
		r |= pack_key(pk, map, "token_ids");
		r |= pack_tokens(pk, p, at, q->ntok);
		r |= pack_key(pk, map, "block_size");
		r |= msgpack_pack_uint32(pk, ev->tokens);
		r |= pack_key(pk, map, "lora_id");
		if (lora_id >= 0)
			r |= msgpack_pack_int64(pk, lora_id);
		else
			r |= msgpack_pack_nil(pk);
		r |= pack_key(pk, map, "medium");
		r |= pack_str(pk, ev->medium == KVS_MEDIUM_CPU ? "CPU" : "GPU");
		r |= pack_key(pk, map, "lora_name");
		if (lora_name)
			r |= pack_str(pk, lora_name);
		else
			r |= msgpack_pack_nil(pk);
		break;
	case KVS_KV_REMOVED:
		r |= pack_head(pk, map, "BlockRemoved", 2);
		r |= pack_key(pk, map, "block_hashes");
		r |= msgpack_pack_array(pk, 1);
		r |= msgpack_pack_uint64(pk, ev->hash);
		r |= pack_key(pk, map, "medium");
		r |= pack_str(pk, ev->medium == KVS_MEDIUM_CPU ? "CPU" : "GPU");
		break;
	default: /* KVS_KV_ALL_CLEARED; the queue holds no other type */
		r |= pack_head(pk, map, "AllBlocksCleared", 0);
		break;
	}
	return r;
}

/* Encodes p->batch[0, n), whose token ids start at ring index @at. */
static int encode_batch(struct kvs_kvpub *p, size_t n, size_t at)
{
	struct timespec ts;
	msgpack_packer pk;
	int r = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	msgpack_sbuffer_clear(&p->sbuf);
	msgpack_packer_init(&pk, &p->sbuf, msgpack_sbuffer_write);
	r |= msgpack_pack_array(&pk, 3);
	r |= msgpack_pack_double(&pk, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
	r |= msgpack_pack_array(&pk, n);
	for (size_t i = 0; i < n; i++) {
		r |= pack_event(&pk, p, &p->batch[i], at);
		at = (at + p->batch[i].ntok) % p->tokcap;
	}
	r |= msgpack_pack_int(&pk, p->dp_rank);
	return r ? -1 : 0;
}

/* Keeps a copy of a batch for replay; the oldest goes when the ring is full. */
static int ring_push(struct kvs_kvpub *p, uint64_t seq, const char *buf, size_t len)
{
	char *copy;
	struct kvpub_batch *b;

	if (!p->ringcap)
		return 0;
	copy = malloc(len ? len : 1);
	if (!copy)
		return -1;
	memcpy(copy, buf, len);
	if (p->ringlen == p->ringcap) {
		b = &p->ring[p->ringhead];
		free(b->buf);
		p->ringhead = (p->ringhead + 1) % p->ringcap;
		p->ringlen--;
	}
	b = &p->ring[(p->ringhead + p->ringlen) % p->ringcap];
	b->seq = seq;
	b->buf = copy;
	b->len = len;
	p->ringlen++;
	return 0;
}

/* One replay answer to @id: [id, "", (topic,) seq, payload].  A ROUTER
 * socket drops what it cannot route or queue: never blocks. */
static void replay_send(struct kvs_kvpub *p, zmq_msg_t *id, const char *topic, size_t topic_len,
			const unsigned char *seq, const void *buf, size_t len)
{
	zmq_send(p->replay, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(p->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	if (p->replay_topic)
		zmq_send(p->replay, topic, topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(p->replay, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(p->replay, buf, len, ZMQ_DONTWAIT);
}

/* Answers one well-formed request: the kept batches from @start on, at
 * most replay_max of them, then the end marker. */
static void replay_answer(struct kvs_kvpub *p, zmq_msg_t *id, uint64_t start)
{
	static const unsigned char end_seq[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	size_t i, n = 0;

	/* Oldest first; a batch ring_push() could not keep leaves a gap. */
	for (i = 0; i < p->ringlen && n < p->replay_max; i++) {
		const struct kvpub_batch *b = &p->ring[(p->ringhead + i) % p->ringcap];
		unsigned char seq[8];

		if (b->seq < start)
			continue;
		n++;
		put_be64(seq, b->seq);
		replay_send(p, id, p->topic, p->topic_len, seq, b->buf, b->len);
	}
	replay_send(p, id, "", 0, end_seq, "", 0);
}

/* Requests read per flush at most: a flood of them delays the batches by
 * one pass's worth, never starves them; the rest wait for the next pass. */
#define REPLAY_PER_PASS 16

/* Answers the waiting replay requests, REPLAY_PER_PASS at most; never
 * waits for one.  Only [identity, "", start_seq of 8 bytes] is a request:
 * anything else is dropped unanswered. */
static void service_replay(struct kvs_kvpub *p)
{
	for (int req = 0; req < REPLAY_PER_PASS; req++) {
		zmq_msg_t part[3];
		size_t nparts = 0, i;
		int more = 1, ok = 1;

		while (more) {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, p->replay, nparts ? 0 : ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(&m);
				if (!nparts)
					return; /* nothing waiting */
				ok = 0;
				break;
			}
			more = zmq_msg_more(&m);
			if (nparts < 3)
				part[nparts] = m;
			else
				zmq_msg_close(&m);
			nparts++;
		}
		if (ok && nparts == 3 && zmq_msg_size(&part[1]) == 0 && zmq_msg_size(&part[2]) == 8) {
			const unsigned char *s = zmq_msg_data(&part[2]);
			uint64_t start = 0;

			for (i = 0; i < 8; i++)
				start = (start << 8) | s[i];
			replay_answer(p, &part[0], start);
		}
		for (i = 0; i < nparts && i < 3; i++)
			zmq_msg_close(&part[i]);
	}
}

/* Sends what is queued, in batches; under slock.  Returns batches sent. */
static int flush_locked(struct kvs_kvpub *p)
{
	int sent = 0, err = 0;

	if (p->replay)
		service_replay(p);
	for (;;) {
		size_t n = 0, at, ntok = 0;
		unsigned char seq[8];
		int enc;

		pthread_mutex_lock(&p->qlock);
		at = p->tokhead;
		while (n < p->max_batch && p->qlen) {
			p->batch[n] = p->q[p->qhead];
			ntok += p->batch[n++].ntok;
			p->qhead = (p->qhead + 1) % p->qcap;
			p->qlen--;
		}
		pthread_mutex_unlock(&p->qlock);
		if (!n)
			break;
		/* The batch's token ids stay in the ring, reserved, until encoded. */
		enc = encode_batch(p, n, at);
		pthread_mutex_lock(&p->qlock);
		p->tokhead = (p->tokhead + ntok) % p->tokcap;
		p->toklen -= ntok;
		pthread_mutex_unlock(&p->qlock);
		if (enc) {
			err = ENOMEM;
			break;
		}
		put_be64(seq, p->next_seq);
		/* A PUB socket drops, never blocks, at its high-water mark. */
		if (zmq_send(p->pub, p->topic, p->topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
		    zmq_send(p->pub, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
		    zmq_send(p->pub, p->sbuf.data, p->sbuf.size, ZMQ_DONTWAIT) < 0)
			err = zmq_errno();
		/* Kept for replay even if the PUB send failed. */
		if (ring_push(p, p->next_seq, p->sbuf.data, p->sbuf.size))
			err = ENOMEM;
		p->next_seq++;
		sent++;
	}
	if (err) {
		errno = err;
		return -1;
	}
	return sent;
}

static void *kvpub_thread(void *arg)
{
	struct kvs_kvpub *p = arg;

	pthread_mutex_lock(&p->qlock);
	while (!p->stop) {
		struct timespec ts;

		pthread_mutex_unlock(&p->qlock);
		pthread_mutex_lock(&p->slock);
		flush_locked(p);
		pthread_mutex_unlock(&p->slock);
		pthread_mutex_lock(&p->qlock);
		if (p->stop || p->qlen >= p->max_batch)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += p->interval_ms / 1000;
		ts.tv_nsec += (long)(p->interval_ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&p->qcond, &p->qlock, &ts);
	}
	pthread_mutex_unlock(&p->qlock);
	return NULL;
}

/* vLLM's heuristic: bind stable endpoints, connect to volatile ones. */
static int endpoint_binds(const char *ep)
{
	return strchr(ep, '*') || strstr(ep, "::") || !strncmp(ep, "ipc://", 6) ||
	       !strncmp(ep, "inproc://", 9);
}

static void kvpub_free(struct kvs_kvpub *p)
{
	int linger = 100; /* ms: the last batches get a chance, not a hang */

	if (p->pub) {
		zmq_setsockopt(p->pub, ZMQ_LINGER, &linger, sizeof(linger));
		zmq_close(p->pub);
	}
	if (p->replay) {
		linger = 0;
		zmq_setsockopt(p->replay, ZMQ_LINGER, &linger, sizeof(linger));
		zmq_close(p->replay);
	}
	if (p->ctx)
		zmq_ctx_term(p->ctx);
	for (size_t i = 0; i < p->ringlen; i++)
		free(p->ring[(p->ringhead + i) % p->ringcap].buf);
	msgpack_sbuffer_destroy(&p->sbuf);
	KVS_FREE_ALL(p->ring, p->batch, p->q, p->tok, p->topic);
	pthread_cond_destroy(&p->qcond);
	pthread_mutex_destroy(&p->qlock);
	pthread_mutex_destroy(&p->slock);
	free(p);
}

KVS_EXPORT kvs_kvpub_t *kvs_kvpub_create(const kvs_kvpub_attr_t *attr)
{
	kvs_kvpub_attr_t def;
	struct kvs_kvpub *p;
	pthread_condattr_t ca;
	int err = ENOMEM, hwm, bind;

	if (!attr) {
		kvs_kvpub_attr_init(&def);
		attr = &def;
	}
	if (!attr->endpoint || !*attr->endpoint || !attr->topic || attr->bind < KVS_KVPUB_AUTO ||
	    attr->bind > KVS_KVPUB_CONNECT || !attr->max_batch_events || !attr->max_queue ||
	    attr->hwm < 0 || attr->data_parallel_rank < 0 ||
	    (attr->replay_endpoint && !*attr->replay_endpoint) ||
	    (attr->format != KVS_KVPUB_FORMAT_MAP && attr->format != KVS_KVPUB_FORMAT_ARRAY) ||
	    !attr->max_queue_tokens || !attr->replay_max_batches ||
	    (attr->replay_framing != KVS_KVPUB_REPLAY_SEQ &&
	     attr->replay_framing != KVS_KVPUB_REPLAY_TOPIC)) {
		errno = EINVAL;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL; /* errno ENOMEM */
	pthread_mutex_init(&p->qlock, NULL);
	pthread_mutex_init(&p->slock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->qcond, &ca);
	pthread_condattr_destroy(&ca);
	msgpack_sbuffer_init(&p->sbuf);
	p->qcap = attr->max_queue;
	p->max_batch = attr->max_batch_events;
	p->ringcap = attr->buffer_steps;
	p->dp_rank = attr->data_parallel_rank;
	p->interval_ms = attr->flush_interval_ms;
	p->map = attr->format == KVS_KVPUB_FORMAT_MAP;
	p->replay_topic = attr->replay_framing == KVS_KVPUB_REPLAY_TOPIC;
	p->replay_max = attr->replay_max_batches;
	p->lora_cb = attr->lora_cb;
	p->lora_arg = attr->lora_arg;
	p->topic_len = strlen(attr->topic);
	p->tokcap = attr->max_queue_tokens;
	p->q = calloc(p->qcap, sizeof(*p->q));
	p->tok = calloc(p->tokcap, sizeof(*p->tok));
	p->batch = calloc(p->max_batch, sizeof(*p->batch));
	p->ring = p->ringcap ? calloc(p->ringcap, sizeof(*p->ring)) : NULL;
	p->topic = strdup(attr->topic);
	if (!p->q || !p->tok || !p->batch || (p->ringcap && !p->ring) || !p->topic)
		goto fail;

	p->ctx = zmq_ctx_new();
	if (!p->ctx)
		goto fail_zmq;
	p->pub = zmq_socket(p->ctx, ZMQ_PUB);
	if (!p->pub)
		goto fail_zmq;
	hwm = attr->hwm;
	if (zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm)))
		goto fail_zmq;
	bind = attr->bind == KVS_KVPUB_BIND ||
	       (attr->bind == KVS_KVPUB_AUTO && endpoint_binds(attr->endpoint));
	if ((bind ? zmq_bind : zmq_connect)(p->pub, attr->endpoint))
		goto fail_zmq;
	if (attr->replay_endpoint) {
		p->replay = zmq_socket(p->ctx, ZMQ_ROUTER);
		if (!p->replay || zmq_bind(p->replay, attr->replay_endpoint))
			goto fail_zmq;
	}
	if (p->interval_ms) {
		err = pthread_create(&p->thread, NULL, kvpub_thread, p);
		if (err)
			goto fail;
		p->has_thread = 1;
	}
	return p;

fail_zmq:
	err = zmq_errno();
	/* zmq's own codes (EPROTONOSUPPORT aside) are not ours to pass on */
	if (err >= ZMQ_HAUSNUMERO)
		err = EINVAL;
fail:
	kvpub_free(p);
	errno = err;
	return NULL;
}

KVS_EXPORT void kvs_kvpub_event_cb(void *arg, const kvs_kv_event_t *ev)
{
	struct kvs_kvpub *p = arg;
	size_t ntok;

	if (!p || !ev || ev->type < KVS_KV_STORED || ev->type > KVS_KV_ALL_CLEARED)
		return;
	ntok = ev->type == KVS_KV_STORED && ev->token_ids ? ev->tokens : 0;
	pthread_mutex_lock(&p->qlock);
	if (p->stop || p->qlen == p->qcap || ntok > p->tokcap - p->toklen) {
		p->dropped++;
	} else {
		struct kvpub_ev *q = &p->q[(p->qhead + p->qlen) % p->qcap];
		size_t at = (p->tokhead + p->toklen) % p->tokcap;
		size_t first = ntok < p->tokcap - at ? ntok : p->tokcap - at;

		/* The ring may wrap inside an event's ids: two copies. */
		if (first)
			memcpy(p->tok + at, ev->token_ids, first * sizeof(int32_t));
		if (ntok > first)
			memcpy(p->tok, ev->token_ids + first, (ntok - first) * sizeof(int32_t));
		p->toklen += ntok;
		q->ev = *ev;
		q->ev.token_ids = NULL;
		q->ntok = ntok;
		p->qlen++;
		if (p->has_thread && p->qlen == p->max_batch)
			pthread_cond_signal(&p->qcond);
	}
	pthread_mutex_unlock(&p->qlock);
}

KVS_EXPORT int kvs_kvpub_flush(kvs_kvpub_t *p)
{
	int r;

	if (!p) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&p->slock);
	r = flush_locked(p);
	pthread_mutex_unlock(&p->slock);
	return r;
}

KVS_EXPORT uint64_t kvs_kvpub_dropped(kvs_kvpub_t *p)
{
	return p ? kvs_locked_read(&p->qlock, &p->dropped) : 0;
}

KVS_EXPORT int kvs_kvpub_destroy(kvs_kvpub_t *p)
{
	if (!p)
		return 0;
	pthread_mutex_lock(&p->qlock);
	p->stop = 1;
	pthread_cond_signal(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
	if (p->has_thread)
		pthread_join(p->thread, NULL);
	/* What was queued before destroy goes out. */
	pthread_mutex_lock(&p->slock);
	flush_locked(p);
	pthread_mutex_unlock(&p->slock);
	kvpub_free(p);
	return 0;
}

#endif /* KVS_HAVE_KVPUB */
