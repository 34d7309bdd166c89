/* SPDX-License-Identifier: MIT */
/*
 * tools/kvslab-ctl.c - talk to a running engine's kvslab control socket
 * (kvs_ctl_start(3)): read or change its memory limit, fetch its metrics,
 * ping it.  The protocol is kvslab-ctl(7); the tool is kvslab-ctl(1).
 * Exit status: 0 ok, 1 the server (or the connection) failed, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl_client.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: kvslab-ctl [-s SOCKET] COMMAND\n"
		   "commands:\n"
		   "  ping           check that the server answers\n"
		   "  limit          print the memory limit in bytes\n"
		   "  limit SIZE     set it (bytes, or K, M, G, T: powers of 1024)\n"
		   "  metrics        every statistic, Prometheus text format\n"
		   "  help           the server's list of requests\n"
		   "SOCKET defaults to $KVSLAB_CTL_SOCKET.\n");
}

int main(int argc, char **argv)
{
	const char *sock = getenv("KVSLAB_CTL_SOCKET");
	static const struct option lo[] = {{"socket", required_argument, 0, 's'},
					   {"help", no_argument, 0, 'h'},
					   {0, 0, 0, 0}};
	char req[256], *data;
	unsigned long long size;
	int c;

	while ((c = getopt_long(argc, argv, "+s:h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			sock = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	argc -= optind;
	argv += optind;
	if (!sock || !*sock || argc < 1) {
		usage(stderr);
		return 2;
	}
	if ((!strcmp(argv[0], "ping") || !strcmp(argv[0], "metrics") ||
	     !strcmp(argv[0], "help")) && argc == 1) {
		snprintf(req, sizeof(req), "%s", argv[0]);
	} else if (!strcmp(argv[0], "limit") && argc == 1) {
		snprintf(req, sizeof(req), "limit");
	} else if (!strcmp(argv[0], "limit") && argc == 2) {
		if (cc_parse_size(argv[1], &size) < 0) {
			fprintf(stderr, "kvslab-ctl: bad SIZE '%s' (bytes, or a number with K, M, G or T)\n",
				argv[1]);
			return 2;
		}
		snprintf(req, sizeof(req), "limit %llu", size);
	} else {
		usage(stderr);
		return 2;
	}
	if (cc_call("kvslab-ctl", sock, req, &data) < 0)
		return 1;
	fputs(data, stdout);
	free(data);
	return fflush(stdout) == 0 ? 0 : 1;
}
