/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_kvpub.c - KV event publishing: what the calls refuse,
 * the bounded queue, and the wire format and replay protocol as a
 * vLLM-style subscriber reads them (tests/kvpub_sub.py, python3 with zmq
 * and msgpack).  Built without libzmq and msgpack-c, the calls fail with
 * ENOTSUP, which is what the suite then checks.
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
	ck_assert_str_eq(a.endpoint, "tcp://*:5557");
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

	/* The background thread, and the defaults with a NULL attr... on
	 * tcp://*:5557, which may be taken: then EADDRINUSE. */
	p = kvs_kvpub_create(NULL);
	if (p) {
		kvs_kvpub_event_cb(p, &ev_stored);
		ck_assert_int_eq(kvs_kvpub_destroy(p), 0);
	} else {
		ck_assert_int_eq(errno, EADDRINUSE);
	}
}
END_TEST

/* Directly a cache's event callback: the cache's events become batches. */
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
	ck_assert_int_eq(kvs_radix_insert(r, 0, key, 8, locs, 0, NULL), 0);
	ck_assert_int_eq(kvs_kvpub_flush(p), 1); /* two BlockStored */
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

/* A hashed block cache's per-block events, with the blocks' token ids. */
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
	ck_assert_int_eq(kvs_hcache_cache(hc, blk, 2, h, NULL, 0, tok), 0);
	ck_assert_uint_eq(kvs_kvpub_dropped(p), 0); /* two BlockStored, 4 ids each */
	ck_assert_int_eq(kvs_kvpub_flush(p), 1);
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

/* The subscriber decodes every field of every event, token ids included,
 * in each format (_i: KVS_KVPUB_FORMAT_MAP, then _ARRAY). */
START_TEST(test_subscriber)
{
	const uint64_t big = 0xFFFFFFFFFFFFFFF0ull;
	static const char *fmt[] = { "map", "array" };
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
	a.format = _i ? KVS_KVPUB_FORMAT_ARRAY : KVS_KVPUB_FORMAT_MAP;
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
		execlp(python, python, script, ep, rep, "kvslab-test", fmt[_i], (char *)NULL);
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
	suite_add_tcase(s, tc);
	python = find_python();
	if (python) {
		TCase *tp = tcase_create("subscriber");
		tcase_set_timeout(tp, 60);
		tcase_add_loop_test(tp, test_subscriber, 0, 2);
		suite_add_tcase(s, tp);
	} else {
		printf("no python3 with zmq and msgpack: the subscriber test is skipped\n");
	}
	rc = tu_run(s);
	return rc == 0 && !python ? 77 : rc;
}

#endif /* KVS_HAVE_KVPUB */
