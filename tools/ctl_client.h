/* SPDX-License-Identifier: MIT */
/*
 * tools/ctl_client.h - the client side of the kvslab-ctl(7) protocol,
 * shared by kvslab-ctl and kvslab-stat.
 */
#ifndef KVSLAB_TOOLS_CTL_CLIENT_H
#define KVSLAB_TOOLS_CTL_CLIENT_H

#include <stddef.h>

/* Connect to the socket at @path: a file descriptor, or -1 with errno. */
int cc_connect(const char *path);

/*
 * Send @request (one line, no newline) and read the response: its data
 * lines, each newline-terminated, into *data (malloc'd, NUL-terminated).
 * Return 0 on "ok"; 1 on "error ...", with the line's text after "error "
 * in *data instead; -1 with errno when the connection failed or the
 * response was cut short.
 */
int cc_request(int fd, const char *request, char **data);

/*
 * cc_connect() to @sock, then cc_request() @request: 0 with the data in
 * *data (malloc'd) on "ok"; else -1, after printing to stderr, each line
 * prefixed "@prog: ", why (the socket and strerror, or the server's error
 * text).
 */
int cc_call(const char *prog, const char *sock, const char *request, char **data);

/* SIZE: digits, then an optional K, M, G or T (and "B" or "iB"); 0 or -1. */
int cc_parse_size(const char *s, unsigned long long *out);

#endif
