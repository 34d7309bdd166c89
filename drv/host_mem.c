/* SPDX-License-Identifier: MIT */
/*
 * drv/host_mem.c - how much memory the host backend may still commit: the
 * machine's available memory and, when the process runs in a memory
 * cgroup (v2 or v1), the room left under every limit up its hierarchy.
 * The cgroup's directory is found once at open (host_cgroup_locate()); each
 * chunk creation reads only the limits and usage.  Test hooks: the
 * environment's KVSLAB_CGROUP_ROOT and KVSLAB_CGROUP_PROC (read with
 * secure_getenv).  See drv/host.c's essay.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "host_int.h"

/* Bytes the machine can still commit: MemAvailable, else free RAM. */
size_t host_machine_available(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	unsigned long long kb = 0;
	char line[128];
	struct sysinfo si;
	bool found = false;

	if (f) {
		while (!found && fgets(line, sizeof(line), f))
			found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
		fclose(f);
	}
	if (found)
		return kb > SIZE_MAX / 1024 ? SIZE_MAX : (size_t)kb * 1024;
	if (sysinfo(&si) == 0)
		return (size_t)(si.freeram + si.bufferram) * si.mem_unit;
	return SIZE_MAX;	/* unknown: let fallocate() decide */
}

/* A number from the first line of @dir/@file: 1, or 0 when the file is
 * missing or says "max" (no limit) or is not a number. */
static int cg_read(const char *dir, const char *file, unsigned long long *v)
{
	char path[4096], buf[64], *end;
	FILE *f;
	int ok = 0;

	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
		return 0;
	f = fopen(path, "re");
	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f)) {
		errno = 0;
		*v = strtoull(buf, &end, 10);
		ok = end != buf && errno == 0 && (*end == '\n' || *end == 0);
	}
	fclose(f);
	return ok;
}

/* Does the first line of @path hold the word @w? */
static bool cg_has_word(const char *path, const char *w)
{
	char line[1024];
	bool found = false;
	FILE *f = fopen(path, "re");

	if (!f)
		return false;
	if (fgets(line, sizeof(line), f))
		for (char *sp, *t = strtok_r(line, " \n", &sp); t && !found;
		     t = strtok_r(NULL, " \n", &sp))
			found = !strcmp(t, w);
	fclose(f);
	return found;
}

/* @key's value in @dir/memory.stat, or 0. */
static unsigned long long cg_stat(const char *dir, const char *key)
{
	char path[4096], line[256];
	unsigned long long v = 0, x;
	size_t kl = strlen(key);
	FILE *f;

	if (snprintf(path, sizeof(path), "%s/memory.stat", dir) >= (int)sizeof(path))
		return 0;
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ' ' && sscanf(line + kl, "%llu", &x) == 1) {
			v = x;
			break;
		}
	fclose(f);
	return v;
}

/*
 * Find the process's memory cgroup, once, at open: cgroup v2 (the "0::"
 * line of /proc/self/cgroup) where its hierarchy (the mount, or a hybrid's
 * "unified") has the memory controller, else v1's memory controller.
 * Inside a cgroup namespace the process's path may not exist under the
 * mount, whose root is then its own cgroup: the walk starts at the deepest
 * directory that exists.  Leaves hb->cg_dir NULL when there is none (or
 * no memory for its name: then no limit is checked, as before).
 *
 * KVSLAB_CGROUP_ROOT and KVSLAB_CGROUP_PROC stand for /sys/fs/cgroup and
 * /proc/self/cgroup, for tests (kvs_drv_open(3), ENVIRONMENT).
 */
void host_cgroup_locate(struct host_be *hb)
{
	const char *root = secure_getenv("KVSLAB_CGROUP_ROOT");
	const char *proc = secure_getenv("KVSLAB_CGROUP_PROC");
	char line[4096], v2path[4096] = "", v1path[4096] = "", base[4096], dir[8192];
	bool have2 = false, have1 = false, v1;
	FILE *f;

	if (!root || !*root)
		root = "/sys/fs/cgroup";
	if (!proc || !*proc)
		proc = "/proc/self/cgroup";
	f = fopen(proc, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c2)
			continue;
		c2[strcspn(c2, "\n")] = 0;
		*c1 = *c2 = 0;	/* line: the id; c1 + 1: the controllers */
		if (!strcmp(line, "0") && c1[1] == 0) {
			snprintf(v2path, sizeof(v2path), "%s", c2 + 1);
			have2 = true;
		} else {
			/* v1: "N:ctrl,ctrl:/path"; the memory controller */
			for (char *sp, *t = strtok_r(c1 + 1, ",", &sp); t; t = strtok_r(NULL, ",", &sp))
				if (!strcmp(t, "memory")) {
					snprintf(v1path, sizeof(v1path), "%s", c2 + 1);
					have1 = true;
				}
		}
	}
	fclose(f);
	v1 = true;
	if (have2) {
		for (int i = 0; i < 2 && v1; i++) {
			snprintf(base, sizeof(base), i ? "%s/unified" : "%s", root);
			snprintf(dir, sizeof(dir), "%s/cgroup.controllers", base);
			if (cg_has_word(dir, "memory"))
				v1 = false;
		}
	}
	if (v1) {
		if (!have1)
			return;
		snprintf(base, sizeof(base), "%s/memory", root);
	}
	snprintf(dir, sizeof(dir), "%s%s", base, v1 ? v1path : v2path);
	if (access(dir, R_OK) != 0)
		snprintf(dir, sizeof(dir), "%s", base);
	hb->cg_dir = strdup(dir);
	hb->cg_base = strlen(base);
	hb->cg_v1 = v1;
}

/*
 * Bytes the process's memory cgroup still lets it charge now: for its
 * cgroup (hb->cg_dir) and each ancestor with a limit, the limit less the
 * usage it could not reclaim (the inactive page cache is reclaimable), the
 * least of them; SIZE_MAX when no limit applies or none can be read.
 */
size_t host_cgroup_headroom(const struct host_be *hb)
{
	unsigned long long lim, use, best = ULLONG_MAX;
	char dir[8192];
	bool v1 = hb->cg_v1;

	if (!hb->cg_dir)
		return SIZE_MAX;
	snprintf(dir, sizeof(dir), "%s", hb->cg_dir);
	for (;;) {
		char *slash;

		if (cg_read(dir, v1 ? "memory.limit_in_bytes" : "memory.max", &lim) &&
		    lim < (1ULL << 62) &&
		    cg_read(dir, v1 ? "memory.usage_in_bytes" : "memory.current", &use)) {
			unsigned long long inact = cg_stat(dir, v1 ? "total_inactive_file" :
							    "inactive_file");
			unsigned long long held = use > inact ? use - inact : 0;
			unsigned long long room = lim > held ? lim - held : 0;

			if (room < best)
				best = room;
		}
		if (strlen(dir) <= hb->cg_base)
			break;
		slash = strrchr(dir + hb->cg_base, '/');
		if (!slash)
			break;
		*slash = 0;
	}
	return best > SIZE_MAX ? SIZE_MAX : (size_t)best;
}

/* Bytes this process can still commit: the machine's, within its memory
 * cgroup's limit. */
size_t host_mem_available(const struct host_be *hb)
{
	size_t m = host_machine_available(), c = host_cgroup_headroom(hb);

	return c < m ? c : m;
}
