/* SPDX-License-Identifier: MIT */
/*
 * lib/ops/ctl.c - the local control interface: a Unix-domain stream socket and
 * the library thread that serves it.
 *
 * The protocol (kvslab-ctl(7)) is text, one request a line, and one
 * response a request: zero or more lines of data, then a line "ok" or
 * "error <ERRNO-NAME> <message>".  The thread multiplexes up to
 * max_clients connections with poll(2); each has a line buffer of
 * KVS_CTL_LINE_MAX bytes.  A line that does not fit, or that holds a byte
 * that is neither printable ASCII nor a tab, gets an error and the
 * connection is closed: the server never trusts a client to be sane.  An
 * unknown request gets an error and the connection stays open.
 *
 * A response is built whole in memory (the metrics text under the
 * registry's lock, which is then released) and sent without waiting: what
 * the socket does not take now waits in the client's output until poll(2)
 * says it can go, and the client is not read from meanwhile (its next
 * requests wait in its socket).  No client can hold the thread: one that
 * stops reading, or sends half a line, stalls only itself, and is dropped
 * when it has made no progress for timeout_ms.  When every slot is held, a
 * new connection takes the slot of the client idle longest (one with
 * nothing under way first), so idle connections never lock a request out.
 *
 * Threads and locks: kvs_ctl_start() creates the server thread with every
 * signal blocked; kvs_ctl_stop() wakes it through a pipe, joins it, and
 * then owns everything again.  The server thread alone touches the client
 * table and calls the attr callbacks (set_limit, get_limit), one at a
 * time; it takes no lock of its own, only the metrics registry's inside
 * kvs_metrics_write().  The socket file is made mode 0600 right after
 * bind(2); it is removed at stop if it is still the one we bound.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "kvslab/ctl.h"
#include "kvslab/elastic.h"

#define CTL_MAX_CLIENTS_LIMIT 1024

struct client {
	int fd;			/* -1: a free slot */
	size_t len;		/* bytes in buf */
	uint64_t last_ns;	/* last progress either way, for the idle limit */
	struct kvsi_buf out;	/* the responses not yet sent */
	size_t sent;		/* of out.len */
	bool closing;		/* close once out is sent */
	char buf[KVS_CTL_LINE_MAX];
};

struct kvs_ctl {
	kvs_ctl_attr_t attr;
	char *path;
	dev_t dev;		/* the socket file we bound, to unlink only it */
	ino_t ino;
	int lfd;		/* listening socket */
	int wake[2];		/* stop writes wake[1] */
	pthread_t thread;
	uint64_t limit;		/* the last limit known, 0 unknown */
	struct client *clients;
};

/* ------------------------------------------------------------ responses */

static void metrics_cb(void *arg, const char *data, size_t len)
{
	kvsi_buf_put(arg, data, len);
}

static const char *errname(int err)
{
	const char *n;

	if (err == ENOTSUP)	/* EOPNOTSUPP on Linux: the name POSIX gives */
		return "ENOTSUP";
	n = strerrorname_np(err);

	return n ? n : "EIO";
}

static void resp_error(struct kvsi_buf *r, int err, const char *msg)
{
	kvsi_buf_fmt(r, "error %s %s\n", errname(err), msg ? msg : strerror(err));
}

/* ------------------------------------------------------------- requests */

static const char help_text[] =
	"ping                 answer ok\n"
	"help                 this list\n"
	"metrics              every statistic, Prometheus text format 0.0.4\n"
	"limit                the memory limit now, in bytes\n"
	"limit SIZE           set the memory limit (bytes, or 1.5G, 512M, 64KiB: powers of 1024)\n"
	"quit                 close the connection\n";

/*
 * A refused limit of @bytes.  Below the floor (ENOMEM with a floor above
 * @bytes) the answer says the lowest limit the engine can honour now, and
 * whether compaction would let @bytes through (the pinned pages packed
 * into whole slabs fit it) or not; else the errno's text.
 */
static void limit_refused(struct kvsi_buf *r, int err, uint64_t bytes,
			  const kvs_ctl_limit_report_t *rep)
{
	char msg[320];

	if (err != ENOMEM || rep->floor_bytes <= bytes) {
		resp_error(r, err, NULL);
		return;
	}
	snprintf(msg, sizeof(msg), "limit below the floor %" PRIu64 " (the lowest limit "
		 "the engine can honour now: slabs its running requests keep mapped)",
		 rep->floor_bytes);
	if (rep->packed_bytes && rep->packed_bytes <= bytes)
		snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "; compaction would let "
			 "it through: packed %" PRIu64, rep->packed_bytes);
	else if (rep->packed_bytes)
		snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "; compaction would "
			 "not: packed %" PRIu64, rep->packed_bytes);
	resp_error(r, err, msg);
}

static void do_limit(kvs_ctl_t *c, const char *arg, struct kvsi_buf *r)
{
	kvs_ctl_limit_report_t rep;
	uint64_t bytes;

	if (!arg) {
		if (!c->attr.set_limit && !c->attr.get_limit && c->attr.pool) {
			bytes = kvs_pool_limit(c->attr.pool);
		} else if (c->attr.get_limit) {
			errno = 0;
			if (c->attr.get_limit(c->attr.limit_arg, &bytes) < 0) {
				resp_error(r, errno ? errno : EIO, NULL);
				return;
			}
		} else if (!(bytes = c->limit)) {
			resp_error(r, ENOTSUP, "the limit is not known here");
			return;
		}
		kvsi_buf_fmt(r, "limit %" PRIu64 "\nok\n", bytes);
		return;
	}
	if (kvs_parse_size(arg, &bytes) < 0) {
		resp_error(r, errno, errno == ERANGE ? "SIZE too large"
						     : "SIZE is bytes, or a number with K, M, G or T (1.5G)");
		return;
	}
	if (!c->attr.set_limit && !c->attr.pool) {
		resp_error(r, ENOTSUP, "this server cannot change the limit");
		return;
	}
	memset(&rep, 0, sizeof(rep));
	rep.limit = bytes;
	errno = 0;
	if (c->attr.set_limit) {
		if (c->attr.set_limit(c->attr.limit_arg, bytes, &rep) < 0) {
			limit_refused(r, errno ? errno : EIO, bytes, &rep);
			return;
		}
	} else {
		kvs_limit_report_t lr = {0};
		int rc = kvs_pool_set_limit(c->attr.pool, bytes, c->attr.cache, &lr);

		rep.limit = lr.limit;
		rep.bytes_returned = lr.bytes_returned;
		rep.elapsed_ns = lr.elapsed_ns;
		rep.floor_bytes = lr.floor_bytes;
		rep.packed_bytes = lr.packed_bytes;
		if (rc < 0) {
			limit_refused(r, errno ? errno : EIO, bytes, &rep);
			return;
		}
	}
	c->limit = rep.limit ? rep.limit : bytes;
	kvsi_buf_fmt(r, "limit %" PRIu64 "\nbytes_returned %" PRIu64 "\nelapsed_ns %" PRIu64 "\nok\n",
		 c->limit, rep.bytes_returned, rep.elapsed_ns);
}

/* Answer one request line (NUL-terminated, checked printable) into @r;
 * false when the connection is to be closed after the response. */
static bool do_request(kvs_ctl_t *c, char *line, struct kvsi_buf *r)
{
	char *save = NULL, *cmd, *arg, *extra;

	cmd = strtok_r(line, " \t", &save);
	arg = cmd ? strtok_r(NULL, " \t", &save) : NULL;
	extra = arg ? strtok_r(NULL, " \t", &save) : NULL;
	if (!cmd) {
		resp_error(r, EINVAL, "empty request (try help)");
	} else if (extra) {
		resp_error(r, E2BIG, "too many arguments (try help)");
	} else if (!strcmp(cmd, "ping") && !arg) {
		kvsi_buf_put(r, "pong\nok\n", 8);
	} else if (!strcmp(cmd, "help") && !arg) {
		kvsi_buf_put(r, help_text, sizeof(help_text) - 1);
		kvsi_buf_put(r, "ok\n", 3);
	} else if (!strcmp(cmd, "quit") && !arg) {
		kvsi_buf_put(r, "ok\n", 3);
		return false;
	} else if (!strcmp(cmd, "metrics") && !arg) {
		if (!c->attr.metrics) {
			resp_error(r, ENOTSUP, "no metrics registry");
		} else {
			size_t mark = r->len;

			if (kvs_metrics_write(c->attr.metrics, metrics_cb, r) < 0) {
				r->len = mark;
				resp_error(r, errno, NULL);
			} else {
				kvsi_buf_put(r, "ok\n", 3);
			}
		}
	} else if (!strcmp(cmd, "limit")) {
		do_limit(c, arg, r);
	} else {
		char name[32];

		snprintf(name, sizeof(name), "%s", cmd);
		kvsi_buf_fmt(r, "error %s unknown request '%s'%s (try help)\n", errname(EINVAL), name,
			 arg ? " or bad arguments" : "");
	}
	return true;
}

/* --------------------------------------------------------------- server */

static void client_close(struct client *cl)
{
	if (cl->fd >= 0)
		close(cl->fd);
	free(cl->out.buf);
	memset(&cl->out, 0, sizeof(cl->out));
	cl->fd = -1;
	cl->len = 0;
	cl->sent = 0;
	cl->closing = false;
}

static bool line_clean(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		if ((ch < 0x20 && ch != '\t') || ch >= 0x7f)
			return false;
	}
	return true;
}

/* Send what @cl's socket takes now of its pending responses, without
 * waiting; close it when it is gone, or when all is sent and it was to
 * close. */
static void client_flush(struct client *cl)
{
	while (cl->sent < cl->out.len) {
		ssize_t n = send(cl->fd, cl->out.buf + cl->sent, cl->out.len - cl->sent,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;	/* the rest when poll(2) says POLLOUT */
		if (n <= 0) {
			client_close(cl);
			return;
		}
		cl->sent += (size_t)n;
		cl->last_ns = kvs_now_ns();
	}
	cl->out.len = 0;
	cl->sent = 0;
	if (cl->closing)
		client_close(cl);
}

/* Read what @cl sent and answer every complete line. */
static void client_read(kvs_ctl_t *c, struct client *cl)
{
	struct kvsi_buf *r = &cl->out;
	bool keep = true;
	ssize_t n;
	char *nl;

	n = recv(cl->fd, cl->buf + cl->len, sizeof(cl->buf) - cl->len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		client_close(cl);
		return;
	}
	cl->len += (size_t)n;
	cl->last_ns = kvs_now_ns();
	while (keep && (nl = memchr(cl->buf, '\n', cl->len))) {
		size_t ll = (size_t)(nl - cl->buf), rest;

		if (ll && cl->buf[ll - 1] == '\r')
			cl->buf[--ll] = 0;
		if (!line_clean(cl->buf, ll)) {
			resp_error(r, EPROTO, "a request is one line of printable ASCII");
			keep = false;
			break;
		}
		cl->buf[ll] = 0;
		keep = do_request(c, cl->buf, r);
		rest = cl->len - (size_t)(nl + 1 - cl->buf);
		memmove(cl->buf, nl + 1, rest);
		cl->len = rest;
	}
	if (keep && cl->len == sizeof(cl->buf)) {
		kvsi_buf_fmt(r, "error %s a request line is at most %d bytes\n", errname(EMSGSIZE),
			 KVS_CTL_LINE_MAX - 1);
		keep = false;
	}
	if (r->nomem) {
		r->len = 0;
		r->nomem = false;
		resp_error(r, ENOMEM, NULL);
		keep = false;
	}
	cl->closing = !keep;
	client_flush(cl);
}

/*
 * The slot a new connection takes when every slot is held: the client
 * idle longest among those with nothing under way (no partial request, no
 * response unsent), else the one idle longest.  Idle connections thus
 * never lock a request out.
 */
static struct client *client_victim(kvs_ctl_t *c)
{
	struct client *best = NULL, *any = NULL;

	for (uint32_t i = 0; i < c->attr.max_clients; i++) {
		struct client *cl = &c->clients[i];

		if (!any || cl->last_ns < any->last_ns)
			any = cl;
		if (!cl->len && !cl->out.len && (!best || cl->last_ns < best->last_ns))
			best = cl;
	}
	return best ? best : any;
}

static void client_accept(kvs_ctl_t *c)
{
	struct client *slot = NULL;
	int fd;

	fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return;
	for (uint32_t i = 0; i < c->attr.max_clients && !slot; i++)
		if (c->clients[i].fd < 0)
			slot = &c->clients[i];
	if (!slot) {
		slot = client_victim(c);
		client_close(slot);
	}
	slot->fd = fd;
	slot->len = 0;
	slot->last_ns = kvs_now_ns();
}

static void *server(void *arg)
{
	kvs_ctl_t *c = arg;
	uint32_t nmax = c->attr.max_clients;
	struct pollfd *pf;
	struct client **who;

	pf = calloc(nmax + 2, sizeof(*pf));
	who = calloc(nmax + 2, sizeof(*who));
	if (!pf || !who)
		goto out;	/* stop still works: it joins and closes */
	for (;;) {
		uint64_t now, idle = (uint64_t)c->attr.timeout_ms * 1000000u;
		nfds_t np = 0;

		pf[np++] = (struct pollfd){.fd = c->wake[0], .events = POLLIN};
		pf[np++] = (struct pollfd){.fd = c->lfd, .events = POLLIN};
		for (uint32_t i = 0; i < nmax; i++) {
			struct client *cl = &c->clients[i];

			if (cl->fd < 0)
				continue;
			/* A client with a response unsent is not read from
			 * until it takes it: its requests wait in its socket. */
			who[np] = cl;
			pf[np++] = (struct pollfd){.fd = cl->fd,
						   .events = cl->out.len ? POLLOUT : POLLIN};
		}
		if (poll(pf, np, 500) < 0 && errno != EINTR)
			break;
		if (pf[0].revents)
			break;
		for (nfds_t i = 2; i < np; i++) {
			if (!pf[i].revents || who[i]->fd != pf[i].fd)
				continue;
			if (who[i]->out.len)
				client_flush(who[i]);
			else
				client_read(c, who[i]);
		}
		if (pf[1].revents & POLLIN)
			client_accept(c);
		now = kvs_now_ns();
		for (uint32_t i = 0; i < nmax; i++)
			if (c->clients[i].fd >= 0 && now - c->clients[i].last_ns > idle)
				client_close(&c->clients[i]);
	}
out:
	free(pf);
	free(who);
	return NULL;
}

/* ------------------------------------------------------------ the calls */

/**
 * kvs_ctl_attr_init() - the default attributes: no metrics, no limit
 * callbacks, 8 clients, a 10 s timeout.
 * @attr: filled.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL (NULL @attr).
 */
KVS_EXPORT int kvs_ctl_attr_init(kvs_ctl_attr_t *attr)
{
	KVS_ATTR_CLEAR(attr);
	attr->max_clients = 8;
	attr->timeout_ms = 10000;
	return 0;
}

/**
 * kvs_parse_size() - read a SIZE: decimal digits, an optional fraction
 * (a point and up to 18 digits, with a unit only), then an optional unit
 * K, M, G or T (powers of 1024, either case) with an optional "i", and an
 * optional "B": "4096", "64k", "512MiB", "1.5G", "8GB".  A fraction is
 * rounded down to a whole byte.  The one grammar of the control protocol
 * (kvslab-ctl(7)) and of every kvslab tool.
 * @s: the text, NUL-terminated: nothing before or after the SIZE.
 * @bytes: receives the size in bytes; untouched on failure.
 *
 * Context: any thread; MT-Safe.
 * Return: 0, or -1 with errno EINVAL (NULL argument, or @s is not a SIZE)
 * or ERANGE (more bytes than a uint64_t holds).
 */
KVS_EXPORT int kvs_parse_size(const char *s, uint64_t *bytes)
{
	uint64_t v = 0, frac = 0, scale = 1, mul = 1;
	unsigned __int128 part;
	bool range = false;
	int nfrac = 0;

	if (!s || !bytes || *s < '0' || *s > '9')
		return kvs_fail(EINVAL);
	for (; *s >= '0' && *s <= '9'; s++)
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
			range = true;	/* still checked for the grammar */
	if (*s == '.') {
		if (*++s < '0' || *s > '9')
			return kvs_fail(EINVAL);
		for (; *s >= '0' && *s <= '9'; s++, nfrac++) {
			if (nfrac == 18)
				return kvs_fail(EINVAL);
			frac = frac * 10 + (uint64_t)(*s - '0');
			scale *= 10;
		}
	}
	switch (*s) {
	case 'k': case 'K': mul = 1ull << 10; s++; break;
	case 'm': case 'M': mul = 1ull << 20; s++; break;
	case 'g': case 'G': mul = 1ull << 30; s++; break;
	case 't': case 'T': mul = 1ull << 40; s++; break;
	default: break;
	}
	if (mul > 1 && (*s == 'i' || *s == 'I'))
		s++;
	if (*s == 'B' || *s == 'b')
		s++;
	if (*s || (nfrac && mul == 1))
		return kvs_fail(EINVAL);
	part = (unsigned __int128)frac * mul / scale;	/* < mul: fits */
	if (range || __builtin_mul_overflow(v, mul, &v) ||
	    __builtin_add_overflow(v, (uint64_t)part, &v))
		return kvs_fail(ERANGE);
	*bytes = v;
	return 0;
}

/* Remove a socket file left by a server that is gone; refuse a live one or
 * a file that is not a socket. */
static int clear_stale(const char *path, const struct sockaddr_un *sa)
{
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISSOCK(st.st_mode))
		return kvs_fail(EEXIST);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	close(fd);
	if (rc == 0)
		return kvs_fail(EADDRINUSE);
	if (errno != ECONNREFUSED)
		return -1;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* The one release, shared by kvs_ctl_start()'s failure path and stop. */
static void ctl_free(kvs_ctl_t *c, bool bound)
{
	struct stat st;

	if (c->clients)
		for (uint32_t i = 0; i < c->attr.max_clients; i++)
			client_close(&c->clients[i]);
	if (c->lfd >= 0)
		close(c->lfd);
	if (bound && lstat(c->path, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino)
		unlink(c->path);
	if (c->wake[0] >= 0)
		close(c->wake[0]);
	if (c->wake[1] >= 0)
		close(c->wake[1]);
	free(c->clients);
	free(c->path);
	free(c);
}

/**
 * kvs_ctl_start() - serve the control protocol on a Unix-domain socket.
 * @path: the socket file; a stale one (no server behind it) is replaced.
 * @attr: the attributes, or NULL for the defaults; copied.
 *
 * Context: any thread; starts the server thread.
 * Return: the server, or NULL with errno EINVAL (NULL or empty @path, bad
 * @attr), ENAMETOOLONG (@path does not fit in sun_path), EADDRINUSE (a
 * server answers on @path), EEXIST (@path is not a socket), ENOMEM, or what
 * socket(2), bind(2), listen(2) or pthread_create(3) set.
 */
KVS_EXPORT kvs_ctl_t *kvs_ctl_start(const char *path, const kvs_ctl_attr_t *attr)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	sigset_t all, old;
	bool bound = false;
	struct stat st;
	kvs_ctl_t *c;
	int err;

	if (!path || !*path) {
		errno = EINVAL;
		return NULL;
	}
	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	if (attr && attr->max_clients > CTL_MAX_CLIENTS_LIMIT) {
		errno = EINVAL;
		return NULL;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (!(c = calloc(1, sizeof(*c)))) {
		errno = ENOMEM;
		return NULL;
	}
	c->lfd = c->wake[0] = c->wake[1] = -1;
	if (attr)
		c->attr = *attr;
	else
		kvs_ctl_attr_init(&c->attr);
	if (!c->attr.max_clients)
		c->attr.max_clients = 8;
	if (!c->attr.timeout_ms)
		c->attr.timeout_ms = 10000;
	c->limit = c->attr.limit;
	c->path = strdup(path);
	c->clients = calloc(c->attr.max_clients, sizeof(*c->clients));
	if (!c->path || !c->clients) {
		err = ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < c->attr.max_clients; i++)
		c->clients[i].fd = -1;
	if (pipe2(c->wake, O_CLOEXEC | O_NONBLOCK) < 0)
		goto fail_errno;
	if (clear_stale(path, &sa) < 0)
		goto fail_errno;
	c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->lfd < 0)
		goto fail_errno;
	if (bind(c->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto fail_errno;
	if (lstat(path, &st) < 0)
		goto fail_errno;
	c->dev = st.st_dev;
	c->ino = st.st_ino;
	bound = true;
	if (chmod(path, 0600) < 0 || listen(c->lfd, 16) < 0)
		goto fail_errno;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&c->thread, NULL, server, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		goto fail;
	return c;

fail_errno:
	err = errno;
fail:
	ctl_free(c, bound);
	errno = err;
	return NULL;
}

/**
 * kvs_ctl_stop() - stop serving: close every connection, join the server
 * thread, remove the socket file.
 * @ctl: a server kvs_ctl_start() returned.
 *
 * Context: any thread but the server's (not from a callback).
 * Return: 0, or -1 with errno EINVAL (NULL @ctl).
 */
KVS_EXPORT int kvs_ctl_stop(kvs_ctl_t *ctl)
{
	ssize_t n;

	if (!ctl)
		return kvs_fail(EINVAL);
	do
		n = write(ctl->wake[1], "x", 1);
	while (n < 0 && errno == EINTR);
	pthread_join(ctl->thread, NULL);
	ctl_free(ctl, true);
	return 0;
}
