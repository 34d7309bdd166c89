/* SPDX-License-Identifier: MIT */
/*
 * tests/ops/test_kvpub.c - KV event publishing: what the calls refuse,
 * the bounded queue, and the wire format and replay protocol as a
 * vLLM-style subscriber reads them (tests/kvpub_sub.py, python3 with zmq
 * and msgpack).  Built without libzmq and msgpack-c, the calls fail with
 * ENOTSUP, which is what the suite then checks.
 *
 * The replay socket is also driven directly, from a ZeroMQ DEALER socket
 * here: malformed requests, the cap on one answer, both framings.
 *
 * Exit 77 only when the build has publishing but no python3 with zmq and
 * msgpack is found (after every other test passed).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static const kvs_kv_event_t ev_stored = { KVS_KV_STORED, 1, 0, 16, 0, NULL };

#ifndef KVS_HAVE_KVPUB

START_TEST(test_not_supported)
{
	kvs_kvpub_attr_t a;

	ck_assert_int_eq(kvs_kvpub_attr_init(&a), 0);
	errno = 0;
	ck_assert_ptr_null(kvs_kvpub_create(&a));
	ck_assert_int_eq(errno, ENOTSUP);
	errno = 0;
	ck_assert_ptr_null(kvs_kvpub_create(NULL));
	ck_assert_int_eq(errno, ENOTSUP);
	errno = 0;
	ck_assert_int_eq(kvs_kvpub_flush(NULL), -1);
	ck_assert_int_eq(errno, ENOTSUP);
	ck_assert_int_eq(kvs_kvpub_destroy(NULL), 0);
	ck_assert_uint_eq(kvs_kvpub_dropped(NULL), 0);
	kvs_kvpub_event_cb(NULL, &ev_stored); /* a no-op */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kvpub");
	TCase *tc = tcase_create("without libzmq");

	tcase_add_test(tc, test_not_supported);
	suite_add_tcase(s, tc);
	return tu_run(s);
}

#else /* KVS_HAVE_KVPUB */

#include <zmq.h>

static void put_events(kvs_kvpub_t *p, const kvs_kv_event_t *ev, int n);

/* A loopback port free right now (the publisher binds it just after). */
static int free_port(void)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	ck_assert_int_ge(fd, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static kvs_kvpub_t *create_errno(const kvs_kvpub_attr_t *a, int want)
{
	kvs_kvpub_t *p;

	errno = 0;
	p = kvs_kvpub_create(a);
	ck_assert_ptr_null(p);
	ck_assert_int_eq(errno, want);
	return p;
}

START_TEST(test_bad_input)
{
	/* The attributes before format and max_queue_tokens were taken from
	 * _reserved: the size may not change. */
	struct attr_v0 {
		const char *endpoint;
		int bind;
		const char *replay_endpoint, *topic;
		size_t buffer_steps, max_batch_events, max_queue;
		uint32_t flush_interval_ms;
		int hwm, data_parallel_rank;
		uint64_t _reserved[8];
	};
	kvs_kvpub_attr_t a, b;
	kvs_kvpub_t *p;
	char ep[64];

	ck_assert_uint_eq(sizeof(kvs_kvpub_attr_t), sizeof(struct attr_v0));

	errno = 0;
	ck_assert_int_eq(kvs_kvpub_attr_init(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_kvpub_attr_init(&a), 0);
	ck_assert_str_eq(a.endpoint, "tcp://127.0.0.1:5557");
	ck_assert_int_eq(a.bind, KVS_KVPUB_BIND);
	ck_assert_uint_eq(a.replay_max_batches, 1000);
	ck_assert_int_eq(a.replay_framing, KVS_KVPUB_REPLAY_SEQ);
	ck_assert_ptr_null(a.lora_cb);
	ck_assert_ptr_null(a.lora_arg);
	ck_assert_ptr_null(a.replay_endpoint);
	ck_assert_str_eq(a.topic, "");
	ck_assert_uint_eq(a.buffer_steps, 10000);
	ck_assert_int_eq(a.format, KVS_KVPUB_FORMAT_ARRAY);
	ck_assert_uint_eq(a.max_queue_tokens, (size_t)1 << 20);
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", free_port());
	a.endpoint = ep;
	a.bind = KVS_KVPUB_BIND;

	b = a; b.endpoint = NULL; create_errno(&b, EINVAL);
	b = a; b.endpoint = ""; create_errno(&b, EINVAL);
	b = a; b.topic = NULL; create_errno(&b, EINVAL);
	b = a; b.bind = 3; create_errno(&b, EINVAL);
	b = a; b.bind = -1; create_errno(&b, EINVAL);
	b = a; b.max_batch_events = 0; create_errno(&b, EINVAL);
	b = a; b.max_queue = 0; create_errno(&b, EINVAL);
	b = a; b.hwm = -1; create_errno(&b, EINVAL);
	b = a; b.data_parallel_rank = -1; create_errno(&b, EINVAL);
	b = a; b.replay_endpoint = ""; create_errno(&b, EINVAL);
	b = a; b.format = 2; create_errno(&b, EINVAL);
	b = a; b.format = -1; create_errno(&b, EINVAL);
	b = a; b.max_queue_tokens = 0; create_errno(&b, EINVAL);
	b = a; b.replay_max_batches = 0; create_errno(&b, EINVAL);
	b = a; b.replay_framing = 2; create_errno(&b, EINVAL);
	b = a; b.replay_framing = -1; create_errno(&b, EINVAL);
	b = a; b.endpoint = "nonsense"; create_errno(&b, EINVAL);
	b = a; b.endpoint = "tcp://127.0.0.1:notaport"; create_errno(&b, EINVAL);
	b = a; b.endpoint = "nosuch://x"; create_errno(&b, EPROTONOSUPPORT);
	b = a; b.replay_endpoint = "nonsense"; create_errno(&b, EINVAL);

	/* The port taken: the second bind fails, the first publisher works. */
	p = kvs_kvpub_create(&a);
	ck_assert_ptr_nonnull(p);
	create_errno(&a, EADDRINUSE);
	b = a; b.endpoint = "tcp://127.0.0.1:1"; b.bind = KVS_KVPUB_CONNECT;
	b.replay_endpoint = ep; create_errno(&b, EADDRINUSE);
	ck_assert_int_eq(kvs_kvpub_destroy(p), 0);

	errno = 0;
	ck_assert_int_eq(kvs_kvpub_flush(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(kvs_kvpub_destroy(NULL), 0);
	ck_assert_uint_eq(kvs_kvpub_dropped(NULL), 0);
	kvs_kvpub_event_cb(NULL, &ev_stored); /* ignored */
}
END_TEST

/* A bounded queue: what does not fit is dropped and counted, never waited
 * for; events of unknown types are ignored; connecting to nobody works. */
START_TEST(test_queue_bounds)
{
	kvs_kvpub_attr_t a;
	kvs_kvpub_t *p;
	kvs_kv_event_t bad = ev_stored;

	kvs_kvpub_attr_init(&a);
	a.endpoint = "tcp://127.0.0.1:1"; /* connects, in the background */
	a.bind = KVS_KVPUB_AUTO;
	a.flush_interval_ms = 0;
	a.max_queue = 3;
	a.max_batch_events = 2;
	a.buffer_steps = 0;
	p = kvs_kvpub_create(&a);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(kvs_kvpub_flush(p), 0);
	for (int i = 0; i < 5; i++)
		kvs_kvpub_event_cb(p, &ev_stored);
	bad.type = 0;
	kvs_kvpub_event_cb(p, &bad);
	bad.type = 4;
	kvs_kvpub_event_cb(p, &bad);
	kvs_kvpub_event_cb(p, NULL);
	ck_assert_uint_eq(kvs_kvpub_dropped(p), 2);
	ck_assert_int_eq(kvs_kvpub_flush(p), 2); /* 3 events, 2 a batch */
	ck_assert_int_eq(kvs_kvpub_flush(p), 0);
	kvs_kvpub_event_cb(p, &ev_stored); /* destroy sends it */
	ck_assert_int_eq(kvs_kvpub_destroy(p), 0);

	/* Token ids beyond max_queue_tokens: the event is dropped and counted,
	 * as when the queue is full; a flush makes room again. */
	{
		int32_t ids[21] = {0};
		kvs_kv_event_t st = ev_stored, rm = { KVS_KV_REMOVED, 1, 0, 16, 0, ids };

		a.max_queue = 8;
		a.max_batch_events = 8;
		a.max_queue_tokens = 20;
		p = kvs_kvpub_create(&a);
		ck_assert_ptr_nonnull(p);
		st.token_ids = ids;
		kvs_kvpub_event_cb(p, &st);		/* 16 of 20 */
		kvs_kvpub_event_cb(p, &st);		/* 32 > 20: dropped */
		ck_assert_uint_eq(kvs_kvpub_dropped(p), 1);
		kvs_kvpub_event_cb(p, &ev_stored);	/* no ids: fits */
		kvs_kvpub_event_cb(p, &rm);		/* removed: its ids are not taken */
		st.tokens = 4;
		kvs_kvpub_event_cb(p, &st);		/* 20 of 20 */
		kvs_kvpub_event_cb(p, &st);		/* dropped */
		ck_assert_uint_eq(kvs_kvpub_dropped(p), 2);
		ck_assert_int_eq(kvs_kvpub_flush(p), 1); /* 4 events */
		st.tokens = 16;
		kvs_kvpub_event_cb(p, &st);		/* room again (the ring wraps) */
		st.tokens = 21;
		kvs_kvpub_event_cb(p, &st);		/* never fits */
		ck_assert_uint_eq(kvs_kvpub_dropped(p), 3);
		ck_assert_int_eq(kvs_kvpub_flush(p), 1);
		ck_assert_int_eq(kvs_kvpub_destroy(p), 0);
	}

}
END_TEST

/* Binds a TCP socket to @ip:@port and closes it: 0, or -1 and errno. */
static int try_bind(const char *ip, int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0), r, e;

	ck_assert_int_ge(fd, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	ck_assert_int_eq(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	e = errno;
	close(fd);
	errno = e;
	return r;
}

/* The defaults (a NULL attr; the background thread) bind the loopback
 * address only: 127.0.0.2, loopback too on Linux, keeps the port free,
 * which a bind of all interfaces would hold.  The port may be taken by
 * someone else: then EADDRINUSE and nothing more to see.  A wide bind is
 * still there for the asking, and the probe sees it. */
START_TEST(test_default_loopback)
{
	kvs_kvpub_attr_t a;
	kvs_kvpub_t *p;
	char ep[64];
	int port;

	p = kvs_kvpub_create(NULL);
	if (p) {
		ck_assert_int_eq(try_bind("127.0.0.2", 5557), 0);
		kvs_kvpub_event_cb(p, &ev_stored);
		ck_assert_int_eq(kvs_kvpub_destroy(p), 0);
	} else {
		ck_assert_int_eq(errno, EADDRINUSE);
	}

	kvs_kvpub_attr_init(&a);
	a.flush_interval_ms = 0;
	port = free_port();
	snprintf(ep, sizeof(ep), "tcp://*:%d", port);
	a.endpoint = ep;
	p = kvs_kvpub_create(&a);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(try_bind("127.0.0.2", port), -1);
	ck_assert_int_eq(errno, EADDRINUSE);
	ck_assert_int_eq(kvs_kvpub_destroy(p), 0);
}
END_TEST

/* One message from @s, each frame's bytes and size; flushes @p (which
 * answers the replay requests) until it comes, 10 s at most.  Returns the
 * number of frames. */
static int recv_frames(kvs_kvpub_t *p, void *s, char frames[][64], size_t *len, int max)
{
	double end = tu_seconds() + 10;
	int n = 0, more = 1;

	while (tu_seconds() < end) {
		zmq_pollitem_t it = { s, 0, ZMQ_POLLIN, 0 };

		ck_assert_int_ge(kvs_kvpub_flush(p), 0);
		if (zmq_poll(&it, 1, 10) > 0)
			break;
	}
	while (more) {
		zmq_msg_t m;

		zmq_msg_init(&m);
		ck_assert_int_ge(zmq_msg_recv(&m, s, ZMQ_DONTWAIT), 0);
		ck_assert_int_lt(n, max);
		len[n] = zmq_msg_size(&m);
		memcpy(frames[n], zmq_msg_data(&m), len[n] < 64 ? len[n] : 64);
		more = zmq_msg_more(&m);
		zmq_msg_close(&m);
		n++;
	}
	return n;
}

static uint64_t be64(const char *b)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | (unsigned char)b[i];
	return v;
}

/* Sends a request of @n frames (after the DEALER's empty one, when
 * @delim) from @s. */
static void send_req(void *s, int delim, const void *f1, size_t l1, const void *f2, size_t l2)
{
	if (delim)
		ck_assert_int_eq(zmq_send(s, "", 0, ZMQ_SNDMORE), 0);
	ck_assert_int_eq(zmq_send(s, f1, l1, f2 ? ZMQ_SNDMORE : 0), (int)l1);
	if (f2)
		ck_assert_int_eq(zmq_send(s, f2, l2, 0), (int)l2);
}

/* Reads one replay answer from @s: returns its sequence number (-1: the
 * end marker) and checks its frames against the framing. */
static int64_t recv_answer(kvs_kvpub_t *p, void *s, int topic)
{
	char f[5][64];
	size_t len[5];
	int n = recv_frames(p, s, f, len, 5), at = 1;

	ck_assert_int_eq(n, topic ? 4 : 3);
	ck_assert_uint_eq(len[0], 0); /* the delimiter */
	if (topic) {
		/* The topic; the end marker's is empty. */
		ck_assert_uint_eq(len[2], 8);
		if (be64(f[2]) == UINT64_MAX)
			ck_assert_uint_eq(len[1], 0);
		else
			ck_assert(len[1] == 5 && !memcmp(f[1], "kvtop", 5));
		at = 2;
	}
	ck_assert_uint_eq(len[at], 8);
	if (be64(f[at]) == UINT64_MAX) {
		ck_assert_uint_eq(len[at + 1], 0);
		return -1;
	}
	ck_assert_uint_gt(len[at + 1], 0); /* a payload */
	return (int64_t)be64(f[at]);
}

/* The replay socket from a DEALER (_i 0: KVS_KVPUB_REPLAY_SEQ, 1: _TOPIC):
 * malformed requests get no answer, a well-formed one at most
 * replay_max_batches batches and the end marker. */
START_TEST(test_replay_requests)
{
	const int topic = _i;
	unsigned char start[9] = {0};
	kvs_kvpub_attr_t a;
	kvs_kvpub_t *p;
	char rep[64];
	void *ctx, *s;
	int64_t seq;
	int zero = 0;

	snprintf(rep, sizeof(rep), "tcp://127.0.0.1:%d", free_port());
	kvs_kvpub_attr_init(&a);
	a.endpoint = "inproc://kvpub-replay";
	a.replay_endpoint = rep;
	a.topic = "kvtop";
	a.flush_interval_ms = 0;
	a.buffer_steps = 8;
	a.replay_max_batches = 3;
	a.replay_framing = topic ? KVS_KVPUB_REPLAY_TOPIC : KVS_KVPUB_REPLAY_SEQ;
	p = kvs_kvpub_create(&a);
	ck_assert_ptr_nonnull(p);
	for (int i = 0; i < 10; i++) /* batches 0..9; 2..9 kept */
		put_events(p, &ev_stored, 1);

	ctx = zmq_ctx_new();
	s = zmq_socket(ctx, ZMQ_DEALER);
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	ck_assert_int_eq(zmq_connect(s, rep), 0);

	/* Malformed, each would have been answered with every kept batch:
	 * a start of 0, 7 or 9 bytes; no delimiter; a delimiter that is not
	 * empty; a fourth frame. */
	send_req(s, 1, start, 0, NULL, 0);
	send_req(s, 1, start, 7, NULL, 0);
	send_req(s, 1, start, 9, NULL, 0);
	send_req(s, 0, start, 8, NULL, 0);
	send_req(s, 0, "x", 1, start, 8);
	ck_assert_int_eq(zmq_send(s, "", 0, ZMQ_SNDMORE), 0);
	send_req(s, 0, start, 8, "", 0);
	/* Then well-formed ones, answered in order: the first answer is the
	 * one to a start of 5, so the malformed got none. */
	start[7] = 5;
	send_req(s, 1, start, 8, NULL, 0);
	ck_assert_int_eq(recv_answer(p, s, topic), 5);
	ck_assert_int_eq(recv_answer(p, s, topic), 6);
	ck_assert_int_eq(recv_answer(p, s, topic), 7);
	ck_assert_int_eq(recv_answer(p, s, topic), -1); /* 3 at most: 8, 9 wait */
	/* From 0 (before the kept ones): the oldest three kept. */
	start[7] = 0;
	send_req(s, 1, start, 8, NULL, 0);
	for (seq = 2; seq < 5; seq++)
		ck_assert_int_eq(recv_answer(p, s, topic), seq);
	ck_assert_int_eq(recv_answer(p, s, topic), -1);
	/* The rest, then past the end: only the end marker. */
	start[7] = 8;
	send_req(s, 1, start, 8, NULL, 0);
	ck_assert_int_eq(recv_answer(p, s, topic), 8);
	ck_assert_int_eq(recv_answer(p, s, topic), 9);
	ck_assert_int_eq(recv_answer(p, s, topic), -1);
	start[0] = 0x80;
	send_req(s, 1, start, 8, NULL, 0);
	ck_assert_int_eq(recv_answer(p, s, topic), -1);

	zmq_close(s);
	zmq_ctx_term(ctx);
	ck_assert_int_eq(kvs_kvpub_destroy(p), 0);
}
END_TEST

/* The LoRA adapters of the tests: extra key 42 (the hashed cache's) and 7
 * (the subscriber's) are vLLM's test LoRA, id 42 "test_lora"; the others
 * none.  Counts the calls per extra key of interest. */
static int lora_calls[2];

static int test_lora(void *arg, uint64_t extra_key, int64_t *lora_id, const char **lora_name)
{
	ck_assert_ptr_eq(arg, lora_calls);
	ck_assert_int_eq(*lora_id, -1);
	ck_assert_ptr_null(*lora_name);
	if (extra_key != 42 && extra_key != 7)
		return 0;
	lora_calls[extra_key == 7]++;
	*lora_id = 42;
	*lora_name = "test_lora";
	return 1;
}

/* Directly a cache's event callback: the cache's events become batches;
 * the extra key given kvs_radix_insert() reaches lora_cb. */
START_TEST(test_radix_callback)
{
	kvs_kvpub_attr_t a;
	kvs_pool_attr_t pa;
	kvs_radix_attr_t ra;
	kvs_kvpub_t *p;
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_radix_t *r;
	int32_t key[8], locs[8];

	kvs_kvpub_attr_init(&a);
	a.endpoint = "inproc://kvpub-radix";
	a.flush_interval_ms = 0;
	a.lora_cb = test_lora;
	a.lora_arg = lora_calls;
	p = kvs_kvpub_create(&a);
	ck_assert_ptr_nonnull(p);
	d = kvs_drv_open("host", NULL);
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = 4;
	pa.max_tokens = 64;
	pool = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(pool);
	kvs_radix_attr_init(&ra);
	ra.event_cb = kvs_kvpub_event_cb;
	ra.event_arg = p;
	r = kvs_radix_create(pool, &ra);
	ck_assert_ptr_nonnull(r);

	for (int i = 0; i < 8; i++)
		key[i] = i + 1;
	ck_assert_int_eq(kvs_pool_alloc(pool, 8, locs), 0);
	ck_assert_int_eq(kvs_radix_insert(r, 42, key, 8, locs, 0, NULL), 0);
	lora_calls[0] = 0;
	ck_assert_int_eq(kvs_kvpub_flush(p), 1); /* two BlockStored */
	ck_assert_int_eq(lora_calls[0], 2);
	ck_assert_int_ge(kvs_radix_evict(r, 8), 8);
	ck_assert_int_eq(kvs_kvpub_flush(p), 1); /* two BlockRemoved */
	ck_assert_int_eq(kvs_radix_reset(r), 0);
	ck_assert_int_eq(kvs_kvpub_flush(p), 1); /* AllBlocksCleared */
	ck_assert_int_eq(kvs_radix_destroy(r), 0);
	ck_assert_uint_eq(kvs_kvpub_dropped(p), 0);
	ck_assert_int_eq(kvs_kvpub_destroy(p), 0);
	kvs_pool_destroy(pool);
	kvs_drv_close(d);
}
END_TEST

/* A hashed block cache's per-block events, with the blocks' token ids; the
 * extra key the caller gives kvs_hcache_cache() reaches lora_cb. */
START_TEST(test_hcache_callback)
{
	kvs_kvpub_attr_t a;
	kvs_pool_attr_t pa;
	kvs_hcache_attr_t ha;
	kvs_kvpub_t *p;
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hcache_t *hc;
	kvs_block_hash_t h[2];
	int32_t blk[2], tok[8];

	kvs_kvpub_attr_init(&a);
	a.endpoint = "inproc://kvpub-hcache";
	a.flush_interval_ms = 0;
	a.lora_cb = test_lora;
	a.lora_arg = lora_calls;
	a.max_queue_tokens = 8; /* exactly the two blocks' ids */
	p = kvs_kvpub_create(&a);
	ck_assert_ptr_nonnull(p);
	d = kvs_drv_open("host", NULL);
	ck_assert_ptr_nonnull(d);
	kvs_pool_attr_init(&pa);
	kvs_model_preset("tiny", &pa.model);
	pa.page_size = 4;
	pa.max_tokens = 64;
	pool = kvs_pool_create(d, &pa);
	ck_assert_ptr_nonnull(pool);
	kvs_hcache_attr_init(&ha);
	ha.kv_event_cb = kvs_kvpub_event_cb;
	ha.kv_event_arg = p;
	hc = kvs_hcache_create(pool, &ha);
	ck_assert_ptr_nonnull(hc);

	memset(h, 0, sizeof(h));
	for (int i = 0; i < 2; i++) {
		h[i].len = 8;
		h[i].bytes[7] = (uint8_t)(i + 1);
	}
	for (int i = 0; i < 8; i++)
		tok[i] = i + 1;
	ck_assert_int_eq(kvs_hcache_alloc(hc, 2, blk), 0);
	ck_assert_int_eq(kvs_hcache_cache(hc, blk, 2, h, NULL, 42, tok), 0);
	ck_assert_uint_eq(kvs_kvpub_dropped(p), 0); /* two BlockStored, 4 ids each */
	lora_calls[0] = 0;
	ck_assert_int_eq(kvs_kvpub_flush(p), 1);
	ck_assert_int_eq(lora_calls[0], 2); /* asked when encoded, once a block */
	ck_assert_int_eq(kvs_hcache_free(hc, blk, 2), 0);
	ck_assert_int_eq(kvs_hcache_evict(hc, 2), 2);
	ck_assert_int_eq(kvs_kvpub_flush(p), 1); /* two BlockRemoved */
	ck_assert_int_eq(kvs_hcache_reset(hc), 0);
	ck_assert_int_eq(kvs_kvpub_flush(p), 1); /* AllBlocksCleared */
	ck_assert_uint_eq(kvs_kvpub_dropped(p), 0);
	ck_assert_int_eq(kvs_hcache_destroy(hc), 0);
	ck_assert_int_eq(kvs_kvpub_destroy(p), 0);
	kvs_pool_destroy(pool);
	kvs_drv_close(d);
}
END_TEST

static const char *python;

/* A python3 that imports zmq and msgpack: $PYTHON, python3, /usr/bin/python3. */
static const char *find_python(void)
{
	static const char *cands[] = { NULL, "python3", "/usr/bin/python3" };
	static char cmd[512];

	cands[0] = getenv("PYTHON");
	for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
		if (!cands[i] || !*cands[i])
			continue;
		snprintf(cmd, sizeof(cmd), "'%s' -c 'import zmq, msgpack' >/dev/null 2>&1", cands[i]);
		if (system(cmd) == 0)
			return cands[i];
	}
	return NULL;
}

static void put_events(kvs_kvpub_t *p, const kvs_kv_event_t *ev, int n)
{
	for (int i = 0; i < n; i++)
		kvs_kvpub_event_cb(p, &ev[i]);
	ck_assert_int_eq(kvs_kvpub_flush(p), 1);
}

/* The token ids tests/kvpub_sub.py expects (TOK0, TOK1, TOK2 there). */
static void tok(int32_t *t0, int32_t *t1, int32_t *t2)
{
	for (int j = 0; j < 16; j++) {
		t0[j] = 100 + j;
		t1[j] = j < 15 ? -5 + j : INT32_MAX;
		t2[j] = j ? 70000 + j - 1 : INT32_MIN;
	}
}

/* The subscriber decodes every field of every event, token ids and LoRA
 * included, in each format (_i & 1: KVS_KVPUB_FORMAT_MAP, then _ARRAY)
 * and each replay framing (_i >> 1: KVS_KVPUB_REPLAY_SEQ, then _TOPIC),
 * and replays as vLLM's subscribers do, past a cap of 2 batches an answer. */
START_TEST(test_subscriber)
{
	const uint64_t big = 0xFFFFFFFFFFFFFFF0ull;
	static const char *fmt[] = { "map", "array" }, *framing[] = { "seq", "topic" };
	int32_t t0[16], t1[16], t2[16], junk[16];
	kvs_kv_event_t b0[] = { { KVS_KV_STORED, big, 0, 16, 0, t0 },
				{ KVS_KV_STORED, 2, big, 16, 7, t1 } };
	/* A removed event's ids are not sent, whatever it points at. */
	const kvs_kv_event_t b1[] = { { KVS_KV_REMOVED, 2, big, 16, 7, junk } };
	const kvs_kv_event_t b2[] = { { KVS_KV_ALL_CLEARED, 0, 0, 0, 0, NULL } };
	kvs_kv_event_t b3[] = { { KVS_KV_STORED, 3, 2, 16, 0, t2 },
				{ KVS_KV_STORED, 4, 3, 16, 0, NULL, KVS_MEDIUM_CPU } };
	char ep[64], rep[64], script[1024], line[256];
	int fds[2], status = -1;
	kvs_kvpub_attr_t a;
	kvs_kvpub_t *p;
	FILE *in;
	pid_t pid;
	double end;

	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", free_port());
	snprintf(rep, sizeof(rep), "tcp://127.0.0.1:%d", free_port());
	snprintf(script, sizeof(script), "%s/tests/kvpub_sub.py",
		 getenv("KVSLAB_TOP_SRCDIR") ? getenv("KVSLAB_TOP_SRCDIR") : ".");
	kvs_kvpub_attr_init(&a);
	a.endpoint = ep;
	a.bind = KVS_KVPUB_BIND;
	a.replay_endpoint = rep;
	a.topic = "kvslab-test";
	a.data_parallel_rank = 3;
	a.flush_interval_ms = 0; /* batches exactly where the test flushes */
	a.format = _i & 1 ? KVS_KVPUB_FORMAT_ARRAY : KVS_KVPUB_FORMAT_MAP;
	a.replay_framing = _i >> 1 ? KVS_KVPUB_REPLAY_TOPIC : KVS_KVPUB_REPLAY_SEQ;
	a.replay_max_batches = 2;
	a.lora_cb = test_lora; /* b0[1]'s extra key 7: LoRA 42 "test_lora" */
	a.lora_arg = lora_calls;
	/* Room for b0's 32 ids; b3's 16 then wrap around the ring's end. */
	a.max_queue_tokens = 40;
	p = kvs_kvpub_create(&a);
	ck_assert_ptr_nonnull(p);
	tok(t0, t1, t2);
	memset(junk, 0x5a, sizeof(junk));

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execlp(python, python, script, ep, rep, "kvslab-test", fmt[_i & 1], framing[_i >> 1],
		       "2", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	in = fdopen(fds[0], "r");
	ck_assert_ptr_nonnull(in);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), in));
	ck_assert_str_eq(line, "ready\n");

	kvs_kvpub_event_cb(p, &b0[0]);
	kvs_kvpub_event_cb(p, &b0[1]);
	memset(t0, 0, sizeof(t0)); /* copied when queued: the caller's may change */
	memset(t1, 0, sizeof(t1));
	ck_assert_int_eq(kvs_kvpub_flush(p), 1);
	put_events(p, b1, 1);
	put_events(p, b2, 1);
	put_events(p, b3, 2);
	/* Without a thread, flush serves the replay requests. */
	for (end = tu_seconds() + 30; tu_seconds() < end;) {
		ck_assert_int_eq(kvs_kvpub_flush(p), 0);
		if (waitpid(pid, &status, WNOHANG) == pid)
			break;
		usleep(5000);
	}
	if (!WIFEXITED(status)) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	while (fgets(line, sizeof(line), in))
		fprintf(stderr, "subscriber: %s", line);
	fclose(in);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "subscriber failed (status %d)", status);
	ck_assert_uint_eq(kvs_kvpub_dropped(p), 0);
	ck_assert_int_eq(kvs_kvpub_destroy(p), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kvpub");
	TCase *tc = tcase_create("api");
	int rc;

	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_queue_bounds);
	tcase_add_test(tc, test_radix_callback);
	tcase_add_test(tc, test_hcache_callback);
	tcase_add_test(tc, test_default_loopback);
	tcase_add_loop_test(tc, test_replay_requests, 0, 2);
	suite_add_tcase(s, tc);
	python = find_python();
	if (python) {
		TCase *tp = tcase_create("subscriber");
		tcase_set_timeout(tp, 60);
		tcase_add_loop_test(tp, test_subscriber, 0, 4);
		suite_add_tcase(s, tp);
	} else {
		printf("no python3 with zmq and msgpack: the subscriber test is skipped\n");
	}
	rc = tu_run(s);
	return rc == 0 && !python ? 77 : rc;
}

#endif /* KVS_HAVE_KVPUB */
