/* SPDX-License-Identifier: MIT */
/*
 * tools/ctl_client.h - the client side of the kvslab-ctl(7) protocol,
 * shared by kvslab-ctl and kvslab-stat.  SIZE arguments are read by the
 * library's kvs_parse_size(3), the server's own grammar.
 */
#ifndef KVSLAB_TOOLS_CTL_CLIENT_H
#define KVSLAB_TOOLS_CTL_CLIENT_H

#include <stddef.h>

/* The default of -t/--timeout: a server that has not answered in full by
 * then is given up on. */
#define CC_TIMEOUT_MS 5000

/* Connect to the socket at @path, waiting at most @timeout_ms for a server
 * whose backlog is full: a file descriptor, or -1 with errno (ETIMEDOUT). */
int cc_connect(const char *path, int timeout_ms);

/*
 * Send @request (one line, no newline) and read the response: its data
 * lines, each newline-terminated, into *data (malloc'd, NUL-terminated).
 * The whole exchange takes at most @timeout_ms.
 * Return 0 on "ok"; 1 on "error ...", with the line's text after "error "
 * in *data instead; -1 with errno when the connection failed, the
 * response was cut short, or it did not end in time (ETIMEDOUT).
 */
int cc_request(int fd, const char *request, int timeout_ms, char **data);

/*
 * cc_connect() to @sock, then cc_request() @request, within @timeout_ms:
 * 0 with the data in *data (malloc'd) on "ok"; else -1, after printing to
 * stderr, each line prefixed "@prog: ", why (the socket and strerror, the
 * timeout, or the server's error text).
 */
int cc_call(const char *prog, const char *sock, const char *request, int timeout_ms,
	    char **data);

/* -t SECONDS: a decimal number of seconds, more than 0 and at most a day,
 * into *ms (at least 1); 0, or -1 when it is not one. */
int cc_parse_timeout(const char *s, int *ms);

#endif
