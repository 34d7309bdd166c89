/* SPDX-License-Identifier: MIT */
/*
 * tools/replay/cost.c - what kvslab-replay parses besides traces: sizes,
 * the limit schedule (--limit-schedule), and the cost model of the CUDA
 * virtual memory calls (--cost-model) that turns the driver calls a replay
 * made into an estimate of the time they would take on a GPU.
 *
 * The cost model.  The host driver's calls (mmap, fallocate) cost a few
 * microseconds; the CUDA VMM calls they stand for cost far more, and
 * differently: creating physical memory is the expensive one.  The a100
 * model takes kvcached's figures measured on an A100 (cuMemCreate of a
 * 2 MiB granule about 190 us, cuMemSetAccess about 36 us, cuMemUnmap about
 * 26 us, cuMemMap about 1.5 us).  Release and the address reservation are
 * not in those figures; the model assumes cuMemRelease costs what an unmap
 * does (26 us: it returns the physical pages) and cuMemAddressReserve /
 * cuMemAddressFree 10 us each (virtual space only, once a pool).  A file
 * replaces any of them: one "name=microseconds" a line, names as
 * rp_drv_op_name() gives them, '#' starts a comment, a name not given
 * keeps the a100 figure.
 *
 * The h200 and h100 models are measured (../shared/GPU-MEASURED.md: driver
 * 580, CUDA 13, medians of one 2 MiB granule as kvslab's cuda backend
 * calls it, its own work included; the reservation is of 1 TiB).
 * cuMemAddressFree was not measured: 10 us, as in a100.  The model has no
 * copy fields: the replay's pool makes no copies outside --host-pool.
 *
 * "measure" estimates nothing: the time is what the pool's calls took on
 * the driver the replay ran (the slab's drv_ns, timed around every call),
 * which only means GPU time with --driver cuda; main.c refuses it without.
 *
 * Locking: none; everything here works on its caller's memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static const char *const op_names[] = {
#define RP_X_NAME(n, st) #n,
	RP_DRV_OPS(RP_X_NAME)
#undef RP_X_NAME
};

/* Microseconds a call, in RP_DRV_OPS order. */
static const double a100_us[RP_OP__COUNT] = {
	[RP_OP_reserve] = 10,	/* assumed: virtual space only */
	[RP_OP_unreserve] = 10,	/* assumed */
	[RP_OP_create] = 190,	/* kvcached, A100, one 2 MiB granule */
	[RP_OP_release] = 26,	/* assumed: as an unmap */
	[RP_OP_map] = 1.5,	/* kvcached */
	[RP_OP_unmap] = 26,	/* kvcached */
	[RP_OP_set_access] = 36, /* kvcached */
};

/* H200, through kvslab (GPU-MEASURED.md, "VMM calls"). */
static const double h200_us[RP_OP__COUNT] = {
	[RP_OP_reserve] = 210,
	[RP_OP_unreserve] = 10,	/* not measured: as a100 */
	[RP_OP_create] = 9.5,
	[RP_OP_release] = 11.5,
	[RP_OP_map] = 5.9,
	[RP_OP_unmap] = 22.0,
	[RP_OP_set_access] = 23.1,
};

/* H100, through kvslab, one-granule chunks. */
static const double h100_us[RP_OP__COUNT] = {
	[RP_OP_reserve] = 263,
	[RP_OP_unreserve] = 10,	/* not measured: as a100 */
	[RP_OP_create] = 36.2,
	[RP_OP_release] = 35.9,
	[RP_OP_map] = 22.0,
	[RP_OP_unmap] = 65.1,
	[RP_OP_set_access] = 66.8,
};

static const struct {
	const char *name;
	const double *us;
} presets[] = {
	{"a100", a100_us},
	{"h200", h200_us},
	{"h100", h100_us},
};

const char *rp_drv_op_name(enum rp_drv_op op)
{
	return (unsigned int)op < RP_OP__COUNT ? op_names[op] : "?";
}

static int cost_file(const char *path, struct rp_cost_model *m, char *err, size_t errsize)
{
	FILE *f = fopen(path, "r");
	char line[256];
	unsigned long n = 0;

	if (!f) {
		snprintf(err, errsize, "--cost-model %s: %s (a100, h200, h100, measure, none, or a file of "
				 "name=us lines)",
			 path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *eq, *end;
		double v;
		int k;

		n++;
		p[strcspn(p, "#\r\n")] = 0;
		p += strspn(p, " \t");
		if (!*p)
			continue;
		eq = strchr(p, '=');
		if (eq) {
			char *q = eq;

			while (q > p && (q[-1] == ' ' || q[-1] == '\t'))
				q--;
			*q = 0;
			errno = 0;
			v = strtod(eq + 1, &end);
			end += strspn(end, " \t");
		}
		for (k = 0; eq && k < RP_OP__COUNT; k++)
			if (!strcmp(p, op_names[k]))
				break;
		if (!eq || k == RP_OP__COUNT || errno || end == eq + 1 || *end || !(v >= 0)) {
			snprintf(err, errsize, "--cost-model %s:%lu: expected name=microseconds with a "
					       "name among reserve, unreserve, create, release, map, "
					       "unmap, set_access", path, n);
			fclose(f);
			errno = EINVAL;
			return -1;
		}
		m->us[k] = v;
	}
	fclose(f);
	return 0;
}

int rp_cost_model_load(const char *spec, struct rp_cost_model *m, char *err, size_t errsize)
{
	size_t i;

	memset(m, 0, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "%s", spec);
	if (!strcmp(spec, "none"))
		return 0;
	if (!strcmp(spec, "measure")) {
		m->measure = 1;
		return 0;
	}
	for (i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (!strcmp(spec, presets[i].name)) {
			memcpy(m->us, presets[i].us, sizeof(m->us));
			return 0;
		}
	memcpy(m->us, a100_us, sizeof(m->us));
	return cost_file(spec, m, err, errsize);
}

double rp_cost_estimate_us(const struct rp_cost_model *m, const uint64_t *calls)
{
	double us = 0;
	int k;

	for (k = 0; k < RP_OP__COUNT; k++)
		us += (double)calls[k] * m->us[k];
	return us;
}

double rp_cost_driver_ms(const struct rp_cost_model *m, const struct rp_result *r)
{
	if (!m)
		return 0;
	if (m->measure)
		return (double)r->drv_ns / 1e6;
	return rp_cost_estimate_us(m, r->drv_ops) / 1e3;
}

double rp_cost_share(const struct rp_cost_model *m, const struct rp_result *r)
{
	return r->sim_ms > 0 ? rp_cost_driver_ms(m, r) / r->sim_ms : 0;
}

int rp_parse_size(const char *arg, uint64_t *out)
{
	uint64_t v;

	/* The library's grammar, every tool's (kvs_parse_size(3)); no 0 here. */
	if (kvs_parse_size(arg, &v) < 0 || v == 0)
		return -1;
	*out = v;
	return 0;
}

ssize_t rp_limit_parse(const char *spec, struct rp_limit **out, char *err, size_t errsize)
{
	struct rp_limit *v = NULL;
	size_t n = 0, cap = 0;
	const char *p = spec;

	*out = NULL;
	if (!*p) {
		snprintf(err, errsize, "--limit-schedule: empty (expected SECONDS:SIZE,...)");
		goto bad;
	}
	for (;;) {
		size_t len = strcspn(p, ",");
		char item[128], *colon, *end;
		double sec;

		if (len == 0 || len >= sizeof(item)) {
			snprintf(err, errsize, "--limit-schedule: %s item %zu (expected SECONDS:SIZE, "
					       "e.g. 60:4G)", len ? "overlong" : "empty", n + 1);
			goto bad;
		}
		memcpy(item, p, len);
		item[len] = 0;
		colon = strchr(item, ':');
		if (!colon) {
			snprintf(err, errsize, "--limit-schedule: '%s' has no ':' (expected "
					       "SECONDS:SIZE, e.g. 60:4G)", item);
			goto bad;
		}
		*colon = 0;
		errno = 0;
		sec = strtod(item, &end);
		if (errno || end == item || *end || !(sec >= 0 && sec <= 1e9)) {
			snprintf(err, errsize, "--limit-schedule: '%s' is not a time in simulated "
					       "seconds (0 or more)", item);
			goto bad;
		}
		if (n && !(sec * 1e3 > v[n - 1].t_ms)) {
			snprintf(err, errsize, "--limit-schedule: times must increase (%g s after "
					       "%g s)", sec, v[n - 1].t_ms / 1e3);
			goto bad;
		}
		if (n == cap) {
			struct rp_limit *w;

			cap = cap ? 2 * cap : 8;
			w = realloc(v, cap * sizeof(*w));
			if (!w) {
				free(v);
				errno = ENOMEM;
				snprintf(err, errsize, "--limit-schedule: out of memory");
				return -1;
			}
			v = w;
		}
		v[n].t_ms = sec * 1e3;
		if (rp_parse_size(colon + 1, &v[n].bytes) < 0) {
			snprintf(err, errsize, "--limit-schedule: '%s' is not a size (e.g. 4G, 512M)",
				 colon + 1);
			goto bad;
		}
		n++;
		p += len;
		if (!*p)
			break;
		p++;
	}
	*out = v;
	return (ssize_t)n;
bad:
	free(v);
	errno = EINVAL;
	return -1;
}
