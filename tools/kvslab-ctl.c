/* SPDX-License-Identifier: MIT */
/*
 * tools/kvslab-ctl.c - talk to a running engine's kvslab control socket
 * (kvs_ctl_start(3)): read or change its memory limit, fetch its metrics,
 * ping it.  The protocol is kvslab-ctl(7); the tool is kvslab-ctl(1).
 * Exit status: 0 ok, 1 the server (or the connection) failed, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvslab/ctl.h>

#include "ctl_client.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: kvslab-ctl [-s SOCKET] [-t SECONDS] COMMAND\n"
		   "commands:\n"
		   "  ping           check that the server answers\n"
		   "  limit          print the memory limit in bytes\n"
		   "  limit SIZE     set it (bytes, or 1.5G, 512M, 64KiB: powers of 1024)\n"
		   "  metrics        every statistic, Prometheus text format\n"
		   "  help           the server's list of requests\n"
		   "SOCKET defaults to $KVSLAB_CTL_SOCKET; the server must answer within\n"
		   "SECONDS (default %g).\n", CC_TIMEOUT_MS / 1e3);
}

int main(int argc, char **argv)
{
	const char *sock = getenv("KVSLAB_CTL_SOCKET");
	static const struct option lo[] = {{"socket", required_argument, 0, 's'},
					   {"timeout", required_argument, 0, 't'},
					   {"help", no_argument, 0, 'h'},
					   {0, 0, 0, 0}};
	char req[256], *data;
	int c, timeout_ms = CC_TIMEOUT_MS;
	uint64_t size;

	while ((c = getopt_long(argc, argv, "+s:t:h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			sock = optarg;
			break;
		case 't':
			if (cc_parse_timeout(optarg, &timeout_ms) < 0) {
				fprintf(stderr, "kvslab-ctl: bad --timeout '%s' (seconds, more "
						"than 0)\n", optarg);
				return 2;
			}
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
		if (kvs_parse_size(argv[1], &size) < 0) {
			fprintf(stderr, "kvslab-ctl: bad SIZE '%s' (%s)\n", argv[1],
				errno == ERANGE ? "too large"
						: "bytes, or a number with K, M, G or T: 1.5G, 512MiB");
			return 2;
		}
		snprintf(req, sizeof(req), "limit %" PRIu64, size);
	} else {
		usage(stderr);
		return 2;
	}
	if (cc_call("kvslab-ctl", sock, req, timeout_ms, &data) < 0)
		return 1;
	fputs(data, stdout);
	free(data);
	return fflush(stdout) == 0 ? 0 : 1;
}
