/* SPDX-License-Identifier: MIT */
/*
 * tests/common/failslab.c - fail the Nth allocation, as the kernel's
 * failslab does.
 *
 * malloc, calloc, realloc and free are defined here, in the test program,
 * so the program and the library it links (ELF interposition) allocate
 * through them; they forward to glibc's __libc_* functions.  An armed
 * thread's successful allocations and its frees are counted too, so that a
 * test can see that a failed call gave back what it took.  An armed thread's
 * allocations are counted from 1, and the Nth one fails (once), or each one
 * fails with a seeded probability; other threads (liburcu's, the slab
 * worker) are never failed, so a failure always lands in the call under
 * test.  Not for sanitized or valgrind runs, whose allocators must see
 * every call: the Makefile leaves the program out of sanitized builds and
 * the test skips itself under valgrind.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "failslab.h"

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t nmemb, size_t n);
void *__libc_realloc(void *p, size_t n);
void __libc_free(void *p);

static __thread struct {
	int armed;		/* 0 off, 1 nth, 2 random */
	uint64_t seen, nth, rng;
	uint32_t p16;		/* probability in 1/65536 */
	uint64_t failed;
	int64_t net;		/* allocations made - frees */
} fs;

static void *made(void *p)
{
	if (p && fs.armed)
		fs.net++;
	return p;
}

static int should_fail(void)
{
	if (!fs.armed)
		return 0;
	fs.seen++;
	if (fs.armed == 1 && fs.seen == fs.nth) {
		fs.failed++;
		return 1;
	}
	if (fs.armed == 2) {
		/* splitmix64 */
		uint64_t z = (fs.rng += 0x9e3779b97f4a7c15ULL);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		z ^= z >> 31;
		if ((z & 0xffff) < fs.p16) {
			fs.failed++;
			return 1;
		}
	}
	return 0;
}

void *malloc(size_t n)
{
	if (should_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	return made(__libc_malloc(n));
}

void *calloc(size_t nmemb, size_t n)
{
	if (should_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	return made(__libc_calloc(nmemb, n));
}

void *realloc(void *p, size_t n)
{
	void *q;

	if (should_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	q = __libc_realloc(p, n);
	if (fs.armed && !p && q)
		fs.net++;
	else if (fs.armed && p && !n)
		fs.net--;
	return q;
}

void free(void *p)
{
	if (p && fs.armed)
		fs.net--;
	__libc_free(p);
}

void fs_fail_nth(uint64_t nth)
{
	fs.armed = nth ? 1 : 0;
	fs.seen = fs.failed = 0;
	fs.net = 0;
	fs.nth = nth;
}

void fs_fail_random(double p, uint64_t seed)
{
	fs.armed = 2;
	fs.seen = fs.failed = 0;
	fs.net = 0;
	fs.rng = seed;
	fs.p16 = (uint32_t)(p * 65536.0);
}

void fs_count(void)
{
	fs.armed = 1;
	fs.seen = fs.failed = 0;
	fs.net = 0;
	fs.nth = 0; /* counts, never fails */
}

uint64_t fs_off(void)
{
	uint64_t seen = fs.seen;

	fs.armed = 0;
	return seen;
}

uint64_t fs_failed(void)
{
	return fs.failed;
}

int64_t fs_net(void)
{
	return fs.net;
}
