/* SPDX-License-Identifier: MIT */
/*
 * lib/tier/store_redis.c - the Redis backend of the storage tier, through
 * hiredis: "redis://[[user]:password@]host[:port][/db]" and
 * "redis+unix:///path/to/socket[?db=N]".
 *
 * One key per object: attr.key_prefix (if any) then the object name the
 * core passes, which ends with the namespace's fingerprint, so two
 * namespaces never share a key; the value is the object itself, the
 * 64-byte header then the page's value, binary as it is.  Every call is one pipeline: EXISTS, GET
 * or "SET key value NX [EX ttl]" for each page, sent together, the replies
 * read in order.  A key already present is not rewritten (NX).
 *
 * Sending.  Commands are framed here in RESP (every argument with its
 * length: no format strings, any byte goes) and sent with sendmsg() from
 * iovecs that point at the caller's header and value, so a SET copies
 * nothing, and with MSG_NOSIGNAL, so a server that went away answers EPIPE
 * rather than a SIGPIPE that would kill the process.  hiredis's own write
 * path (write(2), no MSG_NOSIGNAL) is never used: its output buffer stays
 * empty.
 *
 * Receiving.  hiredis's reader parses the replies, with reply functions of
 * our own: when the reader completes the bulk string of the GET being
 * read, createString copies its first 64 bytes into that page's header
 * buffer and the rest into its value buffer (a host-pool page) straight
 * from the reader's buffer, and keeps only the length; hiredis's reply
 * object, a malloc'd copy of the string, is never made.  Other replies
 * (status, errors, integers) are small objects of ours (struct rrep).
 *
 * Failures.  A reply that is an error fails its page (counted in
 * io_errors) and the connection stays, as it is still in step.  An I/O
 * error, a timeout (attr.timeout_ms bounds the connect and every read and
 * write) or a protocol error fails every page of the call not yet
 * answered (each counted in io_errors) and frees the connection; the next
 * call connects again (reconnects, when it works; when it does not, that
 * call's pages fail as well).
 *
 * Back-off.  A connect that fails (refused, timed out, AUTH or SELECT
 * refused, a self-connection) opens a window of attr.retry_ms (default
 * 100 ms) in which calls fail at once, every page counted in io_errors,
 * without touching the network; each further failed connect doubles the
 * window, up to 64 times retry_ms; a connect that works closes it.  So a
 * dead server costs at most one connect a window, however many calls
 * come, rather than one a call.
 *
 * Self-connection.  Connecting to 127.0.0.1:P where nothing listens and P
 * is in the ephemeral port range can pick P as the local port too: the
 * SYN meets itself (TCP's simultaneous open) and the socket is connected
 * to itself.  It would answer our PING with the PING itself, and it holds
 * port P, so the server cannot come back on it.  A TCP connection whose
 * local address is its peer's is closed at once and is a failed connect
 * (ECONNREFUSED: nobody listens there).
 *
 * Locking: one connection per store behind rs->lock, held for a whole
 * call; the reply functions run under it (they read rs->dest).  Calls are
 * MT-Safe; a call waits for the one before it.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <netinet/in.h>

#include <hiredis/hiredis.h>

#include "internal.h"
#include "tier/storage_be.h"

/* A reply, as our reply functions build it. */
struct rrep {
	int type;			/* REDIS_REPLY_* */
	long long integer;
	size_t len;			/* a string's length, all of it */
	char *str;			/* status, error or other string: a copy;
					 * NULL for a GET's value (it went to dest) */
	size_t elements;
	struct rrep **element;
};

struct rstore {
	pthread_mutex_t lock;
	redisContext *c;		/* NULL: none, connect at the next call */
	/* Where the next top-level bulk string goes (a GET's reply). */
	struct {
		bool on;
		void *hdr, *val;
		size_t val_bytes;
	} dest;
	/* The URI, parsed. */
	bool unix_sock;
	char *host;			/* or the socket's path */
	int port;
	int db;
	char *user, *password;		/* AUTH: the URI's (attr.password wins) */
	struct timeval tv;
	int err;			/* why the last connection failed, an errno */
	/* Back-off: connect failures in a row; no connect before retry_at
	 * (CLOCK_MONOTONIC, ns) while fails > 0; the first window, in ns. */
	unsigned int fails;
	uint64_t retry_at, retry_ns;
	/* Command bytes of the call being sent. */
	char *buf;
	size_t len, cap;
};

/* ------------------------------------------------------------ replies */

static void rrep_free(void *p)
{
	struct rrep *r = p;
	size_t i;

	if (!r)
		return;
	for (i = 0; i < r->elements; i++)
		rrep_free(r->element ? r->element[i] : NULL);
	free(r->element);
	free(r->str);
	free(r);
}

static struct rrep *rrep_new(const redisReadTask *task)
{
	struct rrep *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->type = task->type;
	if (task->parent) {
		struct rrep *p = task->parent->obj;

		if (p && p->element && (size_t)task->idx < p->elements)
			p->element[task->idx] = r;
	}
	return r;
}

static void *rrep_string(const redisReadTask *task, char *str, size_t len)
{
	struct rstore *rs = task->privdata;
	struct rrep *r = rrep_new(task);

	if (!r)
		return NULL;
	r->len = len;
	if (task->type == REDIS_REPLY_STRING && !task->parent && rs && rs->dest.on) {
		/* A GET's value: straight into the page's buffers, at most
		 * their sizes; the full length tells the core what came. */
		size_t h = len < STORE_HDR_BYTES ? len : STORE_HDR_BYTES, v = len - h;

		memcpy(rs->dest.hdr, str, h);
		memcpy(rs->dest.val, str + h, v < rs->dest.val_bytes ? v : rs->dest.val_bytes);
		rs->dest.on = false;
		return r;
	}
	r->str = malloc(len + 1);
	if (!r->str) {
		if (task->parent)
			return r; /* the parent frees it */
		free(r);
		return NULL;
	}
	memcpy(r->str, str, len);
	r->str[len] = 0;
	return r;
}

static void *rrep_array(const redisReadTask *task, int elements)
{
	struct rrep *r = rrep_new(task);

	if (!r)
		return NULL;
	if (elements > 0) {
		r->element = calloc((size_t)elements, sizeof(*r->element));
		if (!r->element) {
			if (!task->parent)
				free(r);
			return task->parent ? r : NULL;
		}
		r->elements = (size_t)elements;
	}
	return r;
}

static void *rrep_integer(const redisReadTask *task, long long v)
{
	struct rrep *r = rrep_new(task);

	if (r)
		r->integer = v;
	return r;
}

static void *rrep_nil(const redisReadTask *task)
{
	struct rrep *r = rrep_new(task);

	/* task->type is the bulk's or the array's ("$-1", "*-1"). */
	if (r)
		r->type = REDIS_REPLY_NIL;
	return r;
}

static redisReplyObjectFunctions rrep_fns = {
	.createString = rrep_string,
	.createArray = rrep_array,
	.createInteger = rrep_integer,
	.createNil = rrep_nil,
	.freeObject = rrep_free,
};

/* ------------------------------------------------------------ commands */

static int buf_room(struct rstore *rs, size_t more)
{
	char *p;
	size_t cap;

	if (rs->len + more <= rs->cap)
		return 0;
	cap = rs->cap ? rs->cap : 4096;
	while (cap < rs->len + more)
		cap *= 2;
	p = realloc(rs->buf, cap);
	if (!p)
		return -1;
	rs->buf = p;
	rs->cap = cap;
	return 0;
}

static int buf_fmt(struct rstore *rs, const char *pre, size_t v)
{
	char t[32];
	int k = snprintf(t, sizeof(t), "%s%zu\r\n", pre, v);

	if (buf_room(rs, (size_t)k) < 0)
		return -1;
	memcpy(rs->buf + rs->len, t, (size_t)k);
	rs->len += (size_t)k;
	return 0;
}

static int buf_put(struct rstore *rs, const void *p, size_t n)
{
	if (buf_room(rs, n) < 0)
		return -1;
	memcpy(rs->buf + rs->len, p, n);
	rs->len += n;
	return 0;
}

/* One argument, @a then @b (either may be empty), framed. */
static int buf_arg(struct rstore *rs, const char *a, size_t na, const char *b, size_t nb)
{
	if (buf_fmt(rs, "$", na + nb) < 0 || buf_put(rs, a, na) < 0 || buf_put(rs, b, nb) < 0)
		return -1;
	return buf_put(rs, "\r\n", 2);
}

static int buf_str(struct rstore *rs, const char *a)
{
	return buf_arg(rs, a, strlen(a), "", 0);
}

/* The key of object @name as one argument: attr.key_prefix and @name. */
static int buf_key(struct kvs_store *s, struct rstore *rs, const char *name)
{
	const char *pre = s->attr.key_prefix ? s->attr.key_prefix : "";

	return buf_arg(rs, pre, strlen(pre), name, strlen(name));
}

/* "{cmd} {key}". */
static int buf_keycmd(struct kvs_store *s, struct rstore *rs, const char *cmd, const char *name)
{
	if (buf_fmt(rs, "*", 2) < 0 || buf_str(rs, cmd) < 0)
		return -1;
	return buf_key(s, rs, name);
}

/* Send every byte of @iov (it is consumed); 0, or -1 with errno.  The
 * socket's SO_SNDTIMEO (attr.timeout_ms) bounds each wait. */
static int send_all(int fd, struct iovec *iov, size_t cnt)
{
	while (cnt) {
		struct msghdr m = {.msg_iov = iov, .msg_iovlen = cnt < IOV_MAX ? cnt : IOV_MAX};
		ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL);
		size_t k;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		for (k = (size_t)r; cnt && k >= iov->iov_len; iov++, cnt--)
			k -= iov->iov_len;
		if (cnt) {
			iov->iov_base = (char *)iov->iov_base + k;
			iov->iov_len -= k;
		}
	}
	return 0;
}

/* A failed read's or write's errno as open reports it: a timeout is
 * ETIMEDOUT, EOF or a protocol error EIO. */
static int io_errno(int e)
{
	if (e == EAGAIN || e == EWOULDBLOCK)
		return ETIMEDOUT;
	return e ? e : EIO;
}

/* The next reply, or NULL when the connection failed (dropped then). */
static struct rrep *reply(struct rstore *rs)
{
	void *r = NULL;

	if (redisGetReply(rs->c, &r) != REDIS_OK || !r) {
		rs->err = io_errno(rs->c->err == REDIS_ERR_IO ? errno : 0);
		rrep_free(r);
		rs->dest.on = false;
		redisFree(rs->c);
		rs->c = NULL;
		return NULL;
	}
	return r;
}

static void drop(struct rstore *rs)
{
	if (rs->c) {
		redisFree(rs->c);
		rs->c = NULL;
	}
}

/* Send @iov (consumed) on the connection; on failure the connection is
 * dropped, and -1 returned with errno as io_errno() says. */
static int rs_send(struct rstore *rs, struct iovec *iov, size_t cnt)
{
	int e;

	if (send_all(rs->c->fd, iov, cnt) == 0)
		return 0;
	e = io_errno(errno);
	drop(rs);
	return kvs_fail(e);
}

/* rs_send() of the command buffer. */
static int send_buf(struct rstore *rs)
{
	struct iovec v = {rs->buf, rs->len};

	return rs_send(rs, &v, 1);
}

/* ------------------------------------------------------------ connect */

static bool starts(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/* The error of a reply to AUTH, SELECT or PING, as an errno. */
static int reply_errno(const struct rrep *r, int other)
{
	if (!r)
		return EIO;
	if (r->type != REDIS_REPLY_ERROR)
		return 0;
	if (r->str && (starts(r->str, "NOAUTH") || starts(r->str, "WRONGPASS") ||
		       strstr(r->str, "password") || starts(r->str, "NOPERM")))
		return EACCES;
	return other;
}

/* Whether TCP socket @fd is connected to itself: its local address (the
 * port included) is its peer's. */
static bool self_connected(int fd)
{
	struct sockaddr_storage me, peer;
	socklen_t lm = sizeof(me), lp = sizeof(peer);

	if (getsockname(fd, (struct sockaddr *)&me, &lm) != 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &lp) != 0 || lm != lp ||
	    me.ss_family != peer.ss_family)
		return false;
	if (me.ss_family == AF_INET) {
		const struct sockaddr_in *a = (void *)&me, *b = (void *)&peer;

		return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
	}
	if (me.ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (void *)&me, *b = (void *)&peer;

		return a->sin6_port == b->sin6_port &&
		       memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0;
	}
	return false;
}

/* Connect, AUTH, SELECT and PING (which a server wanting a password
 * refuses); 0, or -1 with errno: ECONNREFUSED for a socket connected to
 * itself. */
static int rconn(struct kvs_store *s, struct rstore *rs)
{
	const char *pass = s->attr.password ? s->attr.password : rs->password;
	struct rrep *r;
	redisContext *c;
	int e = 0, k, steps[3], ns = 0;

	errno = 0;
	c = rs->unix_sock ? redisConnectUnixWithTimeout(rs->host, rs->tv)
			  : redisConnectWithTimeout(rs->host, rs->port, rs->tv);
	if (!c)
		return kvs_fail(ENOMEM);
	if (c->err) {
		e = c->err == REDIS_ERR_IO && errno ? errno : EIO;
		redisFree(c);
		return kvs_fail(e);
	}
	if (!rs->unix_sock && self_connected(c->fd)) {
		redisFree(c);
		return kvs_fail(ECONNREFUSED);
	}
	if (redisSetTimeout(c, rs->tv) != REDIS_OK) {
		redisFree(c);
		return kvs_fail(EIO);
	}
	c->reader->fn = &rrep_fns;
	c->reader->privdata = rs;
	/* Keep the reader's buffer between replies: freeing it after each
	 * would regrow it, copy after copy, for every large value. */
	c->reader->maxbuf = 0;
	rs->c = c;
	rs->len = 0;
	if (pass && pass[0]) {
		if (buf_fmt(rs, "*", rs->user ? 3 : 2) < 0 || buf_str(rs, "AUTH") < 0 ||
		    (rs->user && buf_str(rs, rs->user) < 0) || buf_str(rs, pass) < 0)
			goto nomem;
		steps[ns++] = EACCES;
	}
	if (rs->db) {
		char d[16];

		snprintf(d, sizeof(d), "%d", rs->db);
		if (buf_fmt(rs, "*", 2) < 0 || buf_str(rs, "SELECT") < 0 || buf_str(rs, d) < 0)
			goto nomem;
		steps[ns++] = EINVAL;
	}
	if (buf_fmt(rs, "*", 1) < 0 || buf_str(rs, "PING") < 0)
		goto nomem;
	steps[ns++] = EIO;
	if (send_buf(rs) < 0)
		return -1;
	for (k = 0; k < ns; k++) {
		r = reply(rs);
		if (!r)
			return kvs_fail(rs->err);
		if (!e)
			e = reply_errno(r, steps[k]);
		rrep_free(r);
	}
	if (e) {
		drop(rs);
		return kvs_fail(e);
	}
	return 0;
nomem:
	drop(rs);
	return kvs_fail(ENOMEM);
}

/* Back-off windows double at most this many times. */
#define RETRY_DOUBLINGS 6

/* A connection for this call: the one there is, or a new one (counted as
 * a reconnect: open made the first).  false if none could be made, or if
 * a back-off window is open (then nothing is tried). */
static bool conn_up(struct kvs_store *s, struct rstore *rs)
{
	unsigned int k;

	if (rs->c)
		return true;
	if (rs->fails && kvs_now_ns() < rs->retry_at)
		return false;
	if (rconn(s, rs) < 0) {
		/* The window starts when the attempt has ended: one that took
		 * timeout_ms does not use it up. */
		k = rs->fails < RETRY_DOUBLINGS ? rs->fails : RETRY_DOUBLINGS;
		rs->retry_at = kvs_now_ns() + (rs->retry_ns << k);
		rs->fails++;
		return false;
	}
	rs->fails = 0;
	store_count(s, KVS_STORE_STAT_reconnects, 1);
	return true;
}

/* ------------------------------------------------------------ URIs */

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* A copy of [p, p + n) with %XX decoded; NULL with errno. */
static char *pct_dup(const char *p, size_t n)
{
	char *d = malloc(n + 1), *o = d;
	size_t i;

	if (!d) {
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < n; i++) {
		if (p[i] == '%') {
			/* %00 too: the password is a C string. */
			if (i + 2 >= n || hexval(p[i + 1]) < 0 || hexval(p[i + 2]) < 0 ||
			    (p[i + 1] == '0' && p[i + 2] == '0')) {
				free(d);
				errno = EINVAL;
				return NULL;
			}
			*o++ = (char)(hexval(p[i + 1]) << 4 | hexval(p[i + 2]));
			i += 2;
		} else {
			*o++ = p[i];
		}
	}
	*o = 0;
	return d;
}

/* Decimal digits [p, p + n) into *v, at most @max; -1 if not that. */
static int digits(const char *p, size_t n, long max, long *v)
{
	size_t i;

	*v = 0;
	if (n == 0 || n > 10)
		return -1;
	for (i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		*v = *v * 10 + (p[i] - '0');
	}
	return *v <= max ? 0 : -1;
}

/* redis://[[user]:password@]host[:port][/db] */
static int parse_tcp(struct rstore *rs, const char *p)
{
	const char *end = p + strcspn(p, "/?#"), *at = NULL, *h, *he, *q;
	long v;

	for (q = p; q < end; q++)
		if (*q == '@')
			at = q;
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));

		if (!colon)
			return kvs_fail(EINVAL);
		if (colon > p) {
			rs->user = pct_dup(p, (size_t)(colon - p));
			if (!rs->user)
				return -1;
		}
		rs->password = pct_dup(colon + 1, (size_t)(at - colon - 1));
		if (!rs->password)
			return -1;
		p = at + 1;
	}
	if (*p == '[') {
		h = p + 1;
		he = memchr(h, ']', (size_t)(end - h));
		if (!he)
			return kvs_fail(EINVAL);
		q = he + 1;
	} else {
		h = p;
		he = memchr(p, ':', (size_t)(end - p));
		if (!he)
			he = end;
		q = he;
	}
	if (he == h || memchr(h, '%', (size_t)(he - h)))
		return kvs_fail(EINVAL);
	rs->port = 6379;
	if (q < end) {
		if (*q != ':' || digits(q + 1, (size_t)(end - q - 1), 65535, &v) < 0 || v == 0)
			return kvs_fail(EINVAL);
		rs->port = (int)v;
	}
	rs->host = strndup(h, (size_t)(he - h));
	if (!rs->host)
		return kvs_fail(ENOMEM);
	if (*end == 0)
		return 0;
	if (*end != '/')
		return kvs_fail(EINVAL);
	if (end[1] == 0)
		return 0;
	if (digits(end + 1, strlen(end + 1), INT_MAX, &v) < 0)
		return kvs_fail(EINVAL);
	rs->db = (int)v;
	return 0;
}

/* redis+unix:///path/to/socket[?db=N] */
static int parse_unix(struct rstore *rs, const char *p)
{
	size_t n = strcspn(p, "?#");
	long v;

	if (p[0] != '/' || n < 2 || n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return kvs_fail(EINVAL);
	if (p[n] == '#')
		return kvs_fail(EINVAL);
	if (p[n] == '?') {
		if (!starts(p + n + 1, "db=") ||
		    digits(p + n + 4, strlen(p + n + 4), INT_MAX, &v) < 0)
			return kvs_fail(EINVAL);
		rs->db = (int)v;
	}
	rs->unix_sock = true;
	rs->host = strndup(p, n);
	return rs->host ? 0 : kvs_fail(ENOMEM);
}

static void rs_free(struct rstore *rs)
{
	drop(rs);
	KVS_FREE_ALL(rs->host, rs->user, rs->password, rs->buf);
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}

static int redis_open_as(struct kvs_store *s, const char *uri, bool unix_sock)
{
	struct rstore *rs = calloc(1, sizeof(*rs));
	uint32_t ms = s->attr.timeout_ms ? s->attr.timeout_ms : 2000;
	int e;

	if (!rs)
		return kvs_fail(ENOMEM);
	if (pthread_mutex_init(&rs->lock, NULL) != 0) {
		free(rs);
		return kvs_fail(ENOMEM);
	}
	rs->tv.tv_sec = ms / 1000;
	rs->tv.tv_usec = (ms % 1000) * 1000;
	rs->retry_ns = (uint64_t)(s->attr.retry_ms ? s->attr.retry_ms : 100) * 1000000u;
	if ((unix_sock ? parse_unix(rs, uri + strlen("redis+unix://"))
		       : parse_tcp(rs, uri + strlen("redis://"))) < 0 ||
	    rconn(s, rs) < 0) {
		e = errno;
		rs_free(rs);
		return kvs_fail(e);
	}
	s->be_priv = rs;
	return 0;
}

static int redis_open(struct kvs_store *s, const char *uri)
{
	return redis_open_as(s, uri, false);
}

static int redis_unix_open(struct kvs_store *s, const char *uri)
{
	return redis_open_as(s, uri, true);
}

static void redis_close(struct kvs_store *s)
{
	rs_free(s->be_priv);
}

/* ------------------------------------------------------------ calls */

/* Every call starts by taking the connection (rs->lock) and making sure it
 * is up; false: it is not (the lock is held all the same). */
static bool call_begin(struct kvs_store *s, struct rstore *rs)
{
	pthread_mutex_lock(&rs->lock);
	return conn_up(s, rs);
}

/* ... and ends by counting the commands that failed and letting it go. */
static void call_end(struct kvs_store *s, struct rstore *rs, size_t failed)
{
	if (failed)
		store_count(s, KVS_STORE_STAT_io_errors, failed);
	pthread_mutex_unlock(&rs->lock);
}

/* The reply to command @i of @n, or NULL with every command from @i on
 * counted in *@failed (the connection is gone). */
static struct rrep *reply_of(struct rstore *rs, size_t i, size_t n, size_t *failed)
{
	struct rrep *r = reply(rs);

	if (!r)
		*failed += n - i;
	return r;
}

static size_t redis_exists(struct kvs_store *s, const char *const *names, size_t n)
{
	struct rstore *rs = s->be_priv;
	size_t i, hits = 0, failed = 0;
	bool run = true;

	if (!call_begin(s, rs)) {
		failed = n;
		goto out;
	}
	rs->len = 0;
	for (i = 0; i < n; i++)
		if (buf_keycmd(s, rs, "EXISTS", names[i]) < 0) {
			failed = n;
			goto out;
		}
	if (send_buf(rs) < 0) {
		failed = n;
		goto out;
	}
	for (i = 0; i < n; i++) {
		struct rrep *r = reply_of(rs, i, n, &failed);

		if (!r)
			break;
		if (r->type == REDIS_REPLY_ERROR)
			failed++;
		if (!(r->type == REDIS_REPLY_INTEGER && r->integer == 1))
			run = false;
		else if (run)
			hits++;
		rrep_free(r);
	}
out:
	call_end(s, rs, failed);
	return hits;
}

/* GETs in flight at most: the server holds their values until read. */
#define GET_WINDOW_BYTES (64u << 20)

static void redis_get(struct kvs_store *s, const char *const *names, size_t n,
		      void *const *hdr, void *const *val, ssize_t *got)
{
	struct rstore *rs = s->be_priv;
	size_t obj = STORE_HDR_BYTES + s->attr.page_bytes;
	size_t win = obj < GET_WINDOW_BYTES ? GET_WINDOW_BYTES / obj : 1;
	size_t i, sent = 0, failed = 0;

	for (i = 0; i < n; i++)
		got[i] = -1;
	if (!call_begin(s, rs)) {
		failed = n;
		goto out;
	}
	for (i = 0; i < n; i++) {
		struct rrep *r;

		/* Keep the pipe full: more GETs when half the window is read. */
		if (sent == i || (sent < n && sent - i <= win / 2)) {
			size_t k = i + win < n ? i + win : n;

			rs->len = 0;
			for (; sent < k; sent++)
				if (buf_keycmd(s, rs, "GET", names[sent]) < 0)
					break;
			if (sent < k) {
				drop(rs);
				failed += n - i;
				break;
			}
			if (send_buf(rs) < 0) {
				failed += n - i;
				break;
			}
		}
		rs->dest.on = true;
		rs->dest.hdr = hdr[i];
		rs->dest.val = val[i];
		rs->dest.val_bytes = s->attr.page_bytes;
		r = reply_of(rs, i, n, &failed);
		rs->dest.on = false;
		if (!r)
			break;
		if (r->type == REDIS_REPLY_STRING && !r->str)
			got[i] = (ssize_t)r->len;
		else if (r->type != REDIS_REPLY_NIL)
			failed++;
		rrep_free(r);
	}
out:
	call_end(s, rs, failed);
}

static void redis_set(struct kvs_store *s, const char *const *names, size_t n,
		      const void *const *hdr, const void *const *val, int *res)
{
	struct rstore *rs = s->be_priv;
	size_t i, failed = 0, *cut = NULL;
	struct iovec *iov = NULL;
	char ttl[16];

	for (i = 0; i < n; i++)
		res[i] = 0;
	snprintf(ttl, sizeof(ttl), "%u", s->attr.ttl_s);
	if (!call_begin(s, rs)) {
		failed = n;
		goto out;
	}
	/* The framing of each SET around its value: rs->buf holds, per page,
	 * the bytes before the value and the bytes after it; cut[] their
	 * ends.  The iovecs are made once the buffer stops moving. */
	cut = malloc(2 * n * sizeof(*cut));
	iov = malloc(4 * n * sizeof(*iov));
	if (!cut || !iov) {
		failed = n;
		goto out;
	}
	rs->len = 0;
	for (i = 0; i < n; i++) {
		if (buf_fmt(rs, "*", s->attr.ttl_s ? 6 : 4) < 0 || buf_str(rs, "SET") < 0 ||
		    buf_key(s, rs, names[i]) < 0 ||
		    buf_fmt(rs, "$", STORE_HDR_BYTES + s->attr.page_bytes) < 0) {
			failed = n;
			goto out;
		}
		cut[2 * i] = rs->len;
		if (buf_put(rs, "\r\n", 2) < 0 || buf_str(rs, "NX") < 0 ||
		    (s->attr.ttl_s && (buf_str(rs, "EX") < 0 || buf_str(rs, ttl) < 0))) {
			failed = n;
			goto out;
		}
		cut[2 * i + 1] = rs->len;
	}
	for (i = 0; i < n; i++) {
		size_t from = i ? cut[2 * i - 1] : 0;

		iov[4 * i] = (struct iovec){rs->buf + from, cut[2 * i] - from};
		iov[4 * i + 1] = (struct iovec){(void *)hdr[i], STORE_HDR_BYTES};
		iov[4 * i + 2] = (struct iovec){(void *)val[i], s->attr.page_bytes};
		iov[4 * i + 3] = (struct iovec){rs->buf + cut[2 * i], cut[2 * i + 1] - cut[2 * i]};
	}
	if (rs_send(rs, iov, 4 * n) < 0) {
		failed = n;
		goto out;
	}
	for (i = 0; i < n; i++) {
		struct rrep *r = reply_of(rs, i, n, &failed);

		if (!r)
			break;
		if (r->type == REDIS_REPLY_STATUS && r->str && strcmp(r->str, "OK") == 0)
			res[i] = 1;
		else if (r->type == REDIS_REPLY_NIL)
			res[i] = 2;
		else
			failed++;
		rrep_free(r);
	}
out:
	call_end(s, rs, failed);
	free(cut);
	free(iov);
}

static int redis_remove(struct kvs_store *s, const char *name)
{
	struct rstore *rs = s->be_priv;
	struct rrep *r = NULL;
	int rc = -1;

	if (!call_begin(s, rs))
		goto out;
	rs->len = 0;
	if (buf_keycmd(s, rs, "DEL", name) < 0)
		goto out;
	if (send_buf(rs) < 0)
		goto out;
	r = reply(rs);
	if (r && r->type == REDIS_REPLY_INTEGER)
		rc = 0;
out:
	rrep_free(r);
	call_end(s, rs, rc < 0);
	return rc;
}

const struct store_backend store_redis_backend = {
	.scheme = "redis",
	.open = redis_open,
	STORE_BACKEND_OPS(redis),
};

const struct store_backend store_redis_unix_backend = {
	.scheme = "redis+unix",
	.open = redis_unix_open,
	STORE_BACKEND_OPS(redis),
};
