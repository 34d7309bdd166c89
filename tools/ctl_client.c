/* SPDX-License-Identifier: MIT */
/*
 * tools/ctl_client.c - the client side of the kvslab-ctl(7) protocol: one
 * request line out, data lines back up to "ok" or "error NAME message".
 *
 * Every exchange has a deadline: connect(2) and send(2) are bounded by
 * SO_SNDTIMEO (a Unix socket's connect waits on it when the server's
 * backlog is full), and each read waits in poll(2) for what is left of
 * the time, so a server that accepts and never answers, or never ends its
 * answer, costs the tool at most its timeout.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl_client.h"

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Bound @fd's blocking sends (and a Unix connect) by @ms (at least 1). */
static void send_timeout(int fd, int64_t ms)
{
	struct timeval tv;

	if (ms < 1)
		ms = 1;
	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int cc_connect(const char *path, int timeout_ms)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	send_timeout(fd, timeout_ms);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno == EAGAIN || errno == EINPROGRESS ? ETIMEDOUT : errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static void say_error(const char *prog, const char *sock, int timeout_ms)
{
	if (errno == ETIMEDOUT)
		fprintf(stderr, "%s: %s: no complete answer within %g s (see --timeout)\n", prog,
			sock, timeout_ms / 1e3);
	else
		fprintf(stderr, "%s: %s: %s\n", prog, sock, strerror(errno));
}

int cc_call(const char *prog, const char *sock, const char *request, int timeout_ms,
	    char **data)
{
	int64_t t0 = now_ms(), left;
	int fd, rc;

	fd = cc_connect(sock, timeout_ms);
	if (fd < 0) {
		say_error(prog, sock, timeout_ms);
		return -1;
	}
	left = timeout_ms - (now_ms() - t0);
	rc = cc_request(fd, request, left > 0 ? (int)left : 1, data);
	close(fd);
	if (rc < 0) {
		say_error(prog, sock, timeout_ms);
		return -1;
	}
	if (rc > 0) {
		fprintf(stderr, "%s: %s\n", prog, *data);
		free(*data);
		return -1;
	}
	return 0;
}

/* Wait until @fd can be read or @deadline (ms) passes: 0, or -1 with errno. */
static int wait_readable(int fd, int64_t deadline)
{
	for (;;) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - now_ms();
		int n;

		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		n = poll(&pf, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -1;
	}
}

int cc_request(int fd, const char *request, int timeout_ms, char **data)
{
	int64_t deadline = now_ms() + timeout_ms;
	size_t len = 0, cap = 8192, start = 0;
	char *buf = malloc(cap);
	size_t rl = strlen(request);
	char *line;

	*data = NULL;
	if (!buf)
		return -1;
	line = malloc(rl + 1);
	if (!line) {
		free(buf);
		return -1;
	}
	memcpy(line, request, rl);
	line[rl] = '\n';
	send_timeout(fd, timeout_ms);
	for (size_t off = 0; off < rl + 1;) {
		ssize_t n = send(fd, line + off, rl + 1 - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				errno = ETIMEDOUT;
			free(line);
			free(buf);
			return -1;
		}
		off += (size_t)n;
	}
	free(line);
	for (;;) {
		char *nl;
		ssize_t n;

		/* Look at each complete line once: the last one ends it. */
		while ((nl = memchr(buf + start, '\n', len - start))) {
			char *l = buf + start;
			size_t ll = (size_t)(nl - l);

			if (ll == 2 && !memcmp(l, "ok", 2)) {
				buf[start] = 0;
				*data = buf;
				return 0;
			}
			if (ll >= 6 && !memcmp(l, "error ", 6)) {
				memmove(buf, l + 6, ll - 6);
				buf[ll - 6] = 0;
				*data = buf;
				return 1;
			}
			start += ll + 1;
		}
		if (len + 1 >= cap) {
			char *b = realloc(buf, cap * 2);

			if (!b) {
				free(buf);
				return -1;
			}
			buf = b;
			cap *= 2;
		}
		if (wait_readable(fd, deadline) < 0) {
			free(buf);
			return -1;
		}
		n = recv(fd, buf + len, cap - 1 - len, MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			free(buf);
			errno = n == 0 ? ECONNRESET : errno;
			return -1;
		}
		len += (size_t)n;
	}
}

int cc_parse_timeout(const char *s, int *ms)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > 86400)
		return -1;
	*ms = v * 1e3 < 1 ? 1 : (int)(v * 1e3);
	return 0;
}
