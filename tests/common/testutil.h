/* SPDX-License-Identifier: MIT */
/* tests/common/testutil.h - helpers shared by the libcheck suites. */
#ifndef KVSLAB_TESTUTIL_H
#define KVSLAB_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "kvslab.h"

/* Backends the suites loop over: "host" always, "cuda" when the double is built. */
extern const char *const tu_backends[];
int tu_nbackends(void);

/* Open backend @i of tu_backends with a memory limit (0: none) and flags.
 * For "cuda" the libcuda test double is loaded. */
kvs_drv_t *tu_open(int i, size_t mem_limit, unsigned int flags);
/* The same with a host granularity (the double's comes from
 * KVSLAB_DOUBLE_GRANULARITY, read at its first cuInit). */
kvs_drv_t *tu_open_gran(int i, size_t gran, size_t mem_limit, unsigned int flags);

/* Resident shared-memory pages of this process (RssShmem), in bytes. */
long tu_rss_shmem(void);
/* Host backend: mappings (VMAs; adjacent ranges of one arena mapped side by
 * side may merge into one) and open descriptors of its chunk arenas still in
 * this process; both 0 after every host driver is closed. */
int tu_host_chunk_maps(void);
int tu_host_chunk_fds(void);
/* Bytes allocated in the host backend's arenas (their st_blocks). */
long tu_host_chunk_bytes(void);
/* Offset in its arena of the host chunk mapped at @addr; -1 if none. */
long tu_host_map_offset(uint64_t addr);

/* Introspection of the libcuda double (0 when it is not loaded). */
size_t tu_double_query(const char *fn);

/*
 * Whether KVSLAB_CUDA_DOUBLE names the libcuda double (it exports kvsdbl_*
 * symbols) rather than a real libcuda (make check-gpu); 0 without cuda.
 */
int tu_is_double(void);
/* Print "SKIP <name>: <reason>" (a trailing _fn of @name dropped); 1. */
int tu_skip(const char *name, const char *reason);
/*
 * For a case that only the double can run (its controls, books, simulated
 * kernels): on backend @i = cuda with a real libcuda, tu_skip() and 1; else
 * 0.  Call it first: if (TU_NEED_DOUBLE(_i, "why")) return;
 */
int tu_need_double(const char *name, int i, const char *reason);
#define TU_NEED_DOUBLE(i, reason) tu_need_double(__func__, (i), (reason))
/*
 * The granularity the suites build their geometry on: the cuda driver's
 * (the double's KVSLAB_DOUBLE_GRANULARITY, or the real device's) when the
 * cuda backend is tested, @host_gran otherwise; the host backend is then
 * opened with the same, so both backends share one geometry.  Call it in
 * main(), before any test: it asks in a forked child, exits on failure.
 */
size_t tu_granularity(size_t host_gran);

/* The seeded xorshift64 generator the randomized tests share. */
static inline uint64_t tu_rng(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Fill and check a byte pattern seeded by @seed. */
void tu_fill(void *p, size_t n, unsigned int seed);
int tu_check(const void *p, size_t n, unsigned int seed);

/* Scale of long loops: KVSLAB_TEST_SCALE (default 1), lowered under
 * valgrind and sanitizers; at least @min. */
long tu_scaled(long n, long min);

/* Seconds on the monotonic clock.  Loops that race other threads stop at a
 * deadline as well as at their count: under valgrind, which runs one thread
 * at a time, spinning readers can starve a writer for many minutes. */
double tu_seconds(void);

/* Poll the tiered cache @h until no backup or load is in flight; fails the
 * test after 120 s (a deadline, not a count of polls: the copies complete
 * on other threads, which a loaded machine may leave without a core). */
void tu_hiradix_settle(kvs_hiradix_t *h);

/* Run the suite with check's runner and print its summary; the exit code. */
int tu_run(Suite *s);

/*
 * The libcuda double's simulated device work, through dlsym of the loaded
 * double (KVSLAB_CUDA_DOUBLE).  CUstreams travel as uint64_t, 0 being the
 * legacy default stream.  The calling thread gets the double's primary
 * context made current if it has none (retained and released around the
 * call: open a cuda driver first, it holds the context).
 *
 * tu_dbl_kernel: a kernel reading [ptr, ptr + n) for @ns nanoseconds after
 * the stream's earlier work; the CUresult, -1 when the double is not
 * loaded.  Reading memory it may not read poisons the context.
 * tu_dbl_sticky: the sticky CUresult (700, ILLEGAL_ADDRESS), 0 if none.
 * tu_dbl_faults: faults seen since the start or the last clear (0 without
 * the double).  tu_dbl_clear_sticky: forget both.
 * tu_dbl_stream_create: a CUstream of flags 0 (blocking: ordered with the
 * legacy stream); it holds a primary-context retain until
 * tu_dbl_stream_destroy, which returns at once, pending work or not.
 * 0 on failure.
 */
int tu_dbl_kernel(uint64_t stream, uint64_t ptr, size_t n, unsigned long long ns);
int tu_dbl_sticky(void);
unsigned long tu_dbl_faults(void);
void tu_dbl_clear_sticky(void);
uint64_t tu_dbl_stream_create(void);
void tu_dbl_stream_destroy(uint64_t stream);

/*
 * Held copies of the double (kvsdbl_copy_hold): tu_dbl_copy_hold(1) holds
 * the completion of every copy submitted after it (bytes move at once,
 * events after them stay pending) until tu_dbl_copy_release(n) completes
 * the next n of them, in submission order; tu_dbl_copy_hold(0) releases all
 * and stops.  tu_dbl_copy_release returns the copies still held, -1 when
 * the double is not loaded; tu_dbl_copy_hold returns 0, or -1 likewise.
 */
int tu_dbl_copy_hold(int on);
long tu_dbl_copy_release(unsigned long n);

/*
 * The double's writing kernels and call counts (issue 23).
 * tu_dbl_kernel_write: like tu_dbl_kernel, but the kernel writes: when it
 * completes, byte i of [ptr, ptr + n) becomes the double's pattern of
 * @seed, landing before any copy ordered after it runs.  tu_dbl_pattern_ok:
 * 1 when [p, p + n) holds that pattern (0 without the double).
 * tu_dbl_calls: calls of a cu* function (kvsdbl_calls), 0 without the double.
 */
int tu_dbl_kernel_write(uint64_t stream, uint64_t ptr, size_t n, unsigned int seed,
			unsigned long long ns);
int tu_dbl_pattern_ok(const void *p, size_t n, unsigned int seed);
unsigned long tu_dbl_calls(const char *fn);

#endif
