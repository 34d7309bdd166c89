/* SPDX-License-Identifier: MIT */
/*
 * tools/ctl_client.c - the client side of the kvslab-ctl(7) protocol: one
 * request line out, data lines back up to "ok" or "error NAME message".
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl_client.h"

int cc_connect(const char *path)
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
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int cc_call(const char *prog, const char *sock, const char *request, char **data)
{
	int fd, rc;

	fd = cc_connect(sock);
	if (fd < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, sock, strerror(errno));
		return -1;
	}
	rc = cc_request(fd, request, data);
	close(fd);
	if (rc < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, sock, strerror(errno));
		return -1;
	}
	if (rc > 0) {
		fprintf(stderr, "%s: %s\n", prog, *data);
		free(*data);
		return -1;
	}
	return 0;
}

int cc_request(int fd, const char *request, char **data)
{
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
	for (size_t off = 0; off < rl + 1;) {
		ssize_t n = send(fd, line + off, rl + 1 - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
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
		n = recv(fd, buf + len, cap - 1 - len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(buf);
			errno = n == 0 ? ECONNRESET : errno;
			return -1;
		}
		len += (size_t)n;
	}
}

int cc_parse_size(const char *s, unsigned long long *out)
{
	/* The grammar of the server's parser (lib/ops/ctl.c): digits, then an
	 * optional K, M, G or T (powers of 1024), "i", and "B". */
	static const char units[] = "kmgt";
	unsigned long long v = 0, mul = 1;
	const char *u;

	if (!isdigit((unsigned char)*s))
		goto bad;
	for (; isdigit((unsigned char)*s); s++)
		if (__builtin_mul_overflow(v, 10ULL, &v) ||
		    __builtin_add_overflow(v, (unsigned long long)(*s - '0'), &v))
			goto range;
	if (*s && (u = strchr(units, tolower((unsigned char)*s)))) {
		mul <<= 10 * (u - units + 1);
		s++;
		s += *s == 'i';
	}
	s += *s == 'B' || *s == 'b';
	if (*s)
		goto bad;
	if (__builtin_mul_overflow(v, mul, &v))
		goto range;
	*out = v;
	return 0;
bad:
	errno = EINVAL;
	return -1;
range:
	errno = ERANGE;
	return -1;
}
