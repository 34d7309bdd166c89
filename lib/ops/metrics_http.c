/* SPDX-License-Identifier: MIT */
/*
 * lib/ops/metrics_http.c - the metrics' HTTP endpoint: GET /metrics answers
 * kvs_metrics_write()'s text, for a Prometheus server to scrape.
 *
 * The socket is made here (so that a port already taken fails with
 * EADDRINUSE, a privileged one with EACCES, and port 0 gets an ephemeral
 * port read back with getsockname()) and handed to libmicrohttpd
 * (MHD_OPTION_LISTEN_SOCKET), which answers from its own polling thread
 * (epoll where it has it, so an engine with thousands of descriptors is
 * fine) and closes the socket when it stops.  A request is answered whole
 * from memory: the text is written into a buffer by kvs_metrics_write(),
 * which takes the registry's locks inside and none across this file's
 * code, and handed to the library to free.  GET and HEAD of /metrics get
 * 200 and KVS_METRICS_CONTENT_TYPE; another path 404, another method 405,
 * a write that ran out of memory 500.  The library logs nothing (no
 * MHD_USE_ERROR_LOG): a library prints nothing on its own.
 *
 * Addresses: "HOST:PORT" (an IPv4 address or a name), "[V6]:PORT", and
 * for the loopback address "PORT" or ":PORT" alone: an empty host is
 * 127.0.0.1, never every interface.  Every interface is asked for
 * explicitly: "*:PORT" (0.0.0.0), "0.0.0.0:PORT" or "[::]:PORT".
 *
 * Built without libmicrohttpd (configure's summary says so), the start
 * fails with ENOTSUP and nothing else is here.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "ops/metrics_http.h"

#ifdef KVS_HAVE_MICROHTTPD
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

struct kvsi_http {
	struct MHD_Daemon *d;
	kvs_metrics_t *m;
};

/* Seconds an idle or slow connection is kept; connections at most. */
#define HTTP_TIMEOUT_S 10u
#define HTTP_CONN_MAX 64u

static void text_cb(void *arg, const char *data, size_t len)
{
	kvsi_buf_put(arg, data, len);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *text,
			     const char *allow)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* One request: answered on its first call (a GET has no body to wait for). */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	struct kvsi_http *h = cls;
	struct kvsi_buf b = {.first = 16384};
	struct MHD_Response *r;
	enum MHD_Result ret;

	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)con_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n", "GET, HEAD");
	if (strcmp(url, "/metrics"))
		return reply(c, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n", NULL);
	if (kvs_metrics_write(h->m, text_cb, &b) < 0 || b.nomem) {
		free(b.buf);
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL);
	}
	r = MHD_create_response_from_buffer(b.len, b.buf ? b.buf : (void *)"", b.buf ?
					    MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(b.buf);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, KVS_METRICS_CONTENT_TYPE);
	ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* "PORT", ":PORT", "HOST:PORT", "[V6]:PORT", "*:PORT" into @host (the
 * loopback address for an empty one) and @port.  0, or -1 (EINVAL). */
static int split_addr(const char *addr, char *host, size_t size, uint16_t *port)
{
	const char *colon = strrchr(addr, ':'), *p, *h = addr;
	size_t hlen;
	unsigned long v = 0;

	if (!colon) {
		colon = addr - 1;	/* "PORT" alone */
		hlen = 0;
	} else if (*addr == '[') {
		if (colon == addr || colon[-1] != ']')
			return kvs_fail(EINVAL);
		h = addr + 1;
		hlen = (size_t)(colon - 1 - h);
		if (!hlen)
			return kvs_fail(EINVAL);
	} else {
		hlen = (size_t)(colon - addr);
		if (memchr(addr, ':', hlen))	/* an IPv6 address wants brackets */
			return kvs_fail(EINVAL);
	}
	p = colon + 1;
	if (!*p || strlen(p) > 5)
		return kvs_fail(EINVAL);
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return kvs_fail(EINVAL);
		v = v * 10 + (unsigned long)(*p - '0');
	}
	if (v > 65535 || hlen >= size || memchr(h, ']', hlen) || memchr(h, '[', hlen))
		return kvs_fail(EINVAL);
	if (hlen == 0)
		strcpy(host, "127.0.0.1");
	else if (hlen == 1 && *h == '*')
		strcpy(host, "0.0.0.0");
	else {
		memcpy(host, h, hlen);
		host[hlen] = 0;
	}
	*port = (uint16_t)v;
	return 0;
}

/* A listening socket on @host:@port; the port bound in *@bound. */
static int listen_on(const char *host, uint16_t port, uint16_t *bound)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = -1, err = EADDRNOTAVAIL, rc, one = 1;

	rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc)
		return kvs_fail(rc == EAI_MEMORY ? ENOMEM : rc == EAI_AGAIN ? EAGAIN : EADDRNOTAVAIL);
	for (ai = res; ai; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET)
			((struct sockaddr_in *)ai->ai_addr)->sin_port = htons(port);
		else if (ai->ai_family == AF_INET6)
			((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons(port);
		else
			continue;
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		/* A restarted server gets its port back from TIME_WAIT; a
		 * second listener on it is still refused. */
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0)
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return kvs_fail(err);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		err = errno;
		close(fd);
		return kvs_fail(err);
	}
	*bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						: ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

int kvsi_http_start(kvs_metrics_t *m, const char *addr, struct kvsi_http **out, uint16_t *port)
{
	struct kvsi_http *h;
	char host[256];
	uint16_t want, got;
	int fd;

	if (split_addr(addr, host, sizeof(host), &want) < 0)
		return -1;
	if (!(h = calloc(1, sizeof(*h))))
		return kvs_fail(ENOMEM);
	fd = listen_on(host, want, &got);
	if (fd < 0) {
		int e = errno;

		free(h);
		return kvs_fail(e);
	}
	h->m = m;
	/* The socket is the daemon's from here: it closes it on a failed
	 * start as on a stop. */
	h->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, 0, NULL, NULL, handle, h,
				MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
				MHD_OPTION_CONNECTION_TIMEOUT, HTTP_TIMEOUT_S,
				MHD_OPTION_CONNECTION_LIMIT, HTTP_CONN_MAX, MHD_OPTION_END);
	if (!h->d) {
		int e = errno;

		/* Its thread or its memory: nothing else can fail with the
		 * options above. */
		free(h);
		return kvs_fail(e == EAGAIN || e == EMFILE || e == ENFILE ? e : ENOMEM);
	}
	*out = h;
	*port = got;
	return 0;
}

void kvsi_http_stop(struct kvsi_http *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->d);
	free(h);
}

#else /* !KVS_HAVE_MICROHTTPD */

int kvsi_http_start(kvs_metrics_t *m, const char *addr, struct kvsi_http **out, uint16_t *port)
{
	(void)m;
	(void)addr;
	(void)out;
	(void)port;
	return kvs_fail(ENOTSUP);
}

void kvsi_http_stop(struct kvsi_http *h)
{
	(void)h;
}

#endif /* KVS_HAVE_MICROHTTPD */
