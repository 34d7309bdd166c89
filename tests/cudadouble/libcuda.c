/* SPDX-License-Identifier: MIT */
/*
 * tests/cudadouble/libcuda.c - a test double of libcuda.so.1 over host memory.
 *
 * kvslab's cuda backend loads the CUDA driver with dlopen and calls a small
 * subset of it: start-up, the primary context, the ten virtual-memory (VMM)
 * calls, pinned host memory, async copies, streams and events.  No GPU is
 * available where the tests run, so this library stands in for the driver.
 * It is only worth having if it is stricter than the code it tests: every rule
 * of shared/CUDA-VMM.md that a driver documents (or that the survey found
 * enforced) is checked, and a broken rule is answered with the CUresult of
 * that document's section 4 table, with no state changed.  The double owns
 * no policy beyond that; where the real driver's answer is unknown the choice
 * is written down next to the check.  Where the double now answers rows of
 * that table differently from what the document's "Double" column says:
 *
 *   misuse                                  driver              double
 *   copy on a mapping before set access     fault, 700 likely   ILLEGAL_ADDRESS
 *                                                               at the call, not sticky
 *   kernel on a mapping before set access,  fault, sticky 700   call succeeds, context
 *   or on unmapped memory                                       poisoned: sticky 700
 *   unmap (or set access taking it away)    GPU fault, 700      detected (the table's
 *   while an incomplete kernel reads it     (kvcached#465)      "undetectable" is
 *                                                               outdated): call
 *                                                               succeeds, sticky 700
 *
 * The model.  Device pointers are host addresses (UVA), so the code under
 * test can look at device memory and a copy is a memmove.  A reservation is
 * an anonymous PROT_NONE, MAP_NORESERVE mapping, trimmed to its alignment, so
 * stray accesses fault as they would on a GPU and an untouched reservation
 * costs nothing.  A physical allocation is a memfd of its size: it exists
 * apart from any address, and one allocation mapped at several addresses
 * aliases, as the VMM guide promises.  cuMemMap puts the memfd over the
 * reservation with MAP_FIXED and no access; cuMemSetAccess turns the device
 * access flags into mprotect; cuMemUnmap puts the PROT_NONE placeholder back.
 * The kernel thus enforces access for host code, and the bookkeeping enforces
 * it for copies, which check every byte of the device side before touching
 * anything and fail with CUDA_ERROR_ILLEGAL_ADDRESS instead of faulting.
 *
 * Asynchronous work.  A GPU runs kernels after the launch call returns, and
 * unmapping memory a kernel still reads faults the device (CUDA-VMM.md
 * section 4, last row: kvcached#465).  The double models that without a
 * thread: the test-only kvsdbl_kernel() enqueues a simulated kernel that
 * reads [ptr, ptr + n) for a given time of CLOCK_MONOTONIC.  Each stream
 * keeps the time at which the work submitted to it completes (`busy`): a
 * kernel starts when the work before it on its stream is done (a FIFO per
 * stream) and ends `ns` later.  Completion is computed from the clock; the
 * kernel itself is kept in a flat list only while its end is in the future,
 * with its range, for the fault checks.  The legacy default stream (stream 0,
 * CU_STREAM_LEGACY, and CU_STREAM_PER_THREAD, which the double does not
 * tell apart from it: more ordering, never less) follows CUDA's legacy
 * semantics: its work waits for all earlier work on every stream created
 * without CU_STREAM_NON_BLOCKING, and work on such a blocking stream waits
 * for earlier legacy work; non-blocking streams wait for nobody.  An event
 * records the completion time of its stream's work so far (in that legacy
 * sense for stream 0); cuEventQuery says NOT_READY until then.
 * cuEventSynchronize, cuStreamSynchronize and cuCtxSynchronize sleep in steps
 * of at most a millisecond until the time they wait for, with the global
 * lock dropped, so other threads (a background mapper) keep calling in.
 * cuStreamDestroy returns at once; the stream's kernels stay in the list
 * until their time is up, and cuCtxSynchronize waits for them too.  So do
 * they through the primary context's last release (a choice: the driver's
 * teardown of running work is not documented), so unmapping what they read
 * right after it still faults.  Copies
 * are still done at submission, but in stream order: a copy first sleeps
 * (lock dropped) until its stream's earlier work is done, so a copy after a
 * kernel completes no earlier than the kernel.  That makes a copy host-
 * synchronous with its stream, which the driver is allowed to be.
 *
 * Writing kernels and stream waits.  kvsdbl_kernel_write() launches a
 * kernel that writes a known pattern (kvsdbl_pattern()) over its range;
 * the bytes land when it completes: the first call that sees the clock
 * past its end applies them (every entry point looks, and so does a
 * waiting call when it wakes), earliest end first, before anything that
 * could unmap, protect or free the range goes ahead.  A copy ordered after
 * the kernel waits for its end and so reads the new bytes; one that is not
 * and runs earlier reads the old ones, which is what a backup that runs
 * ahead of the kernel writing its pages looks like on a GPU.
 * cuStreamWaitEvent makes a stream's later work start no earlier than the
 * event's time (its completion time joins the stream's, as a kernel's end
 * does).  cuMemcpyBatchAsync_v2 checks its arguments as the header states
 * the driver does, then runs as one copy of the stream.
 *
 * Crashes.  Where the real driver dereferences a handle it does not know
 * and crashes (a CUstream that is no stream, passed to cuEventRecord or
 * cuStreamWaitEvent; overlapping copies of one batch, which the header
 * calls undefined), the double prints the rule to stderr and aborts,
 * rather than return an error a program could come to rely on.
 *
 * Sticky errors.  A kernel launched on memory it cannot read, and a
 * cuMemUnmap (or a cuMemSetAccess taking away access) of a range an
 * incomplete kernel reads, fault the device: the call itself succeeds, as
 * the driver cannot tell at that point, but the context is poisoned.  All
 * its work is abandoned, and every later call that needs the context
 * (synchronizations, event queries, streams, copies, kernels, ...) returns
 * CUDA_ERROR_ILLEGAL_ADDRESS, as a GPU does ("after ILLEGAL_ADDRESS only a
 * restart helps").  VMM calls belong to no context and keep working, so a
 * test can still tear down and count what leaked.  kvsdbl_sticky_error(),
 * kvsdbl_faults() and kvsdbl_clear_sticky() let a test see the fault and
 * then forget it: a simulated restart of the error state only.  Copies that
 * touch inaccessible memory are refused with a plain, non-sticky
 * ILLEGAL_ADDRESS at the call, as before, so one misuse test of a copy does
 * not poison the rest of a process.  With no kernel launched every busy time
 * stays 0 and the double behaves exactly as the synchronous one it was.
 *
 * Data structures.  Everything lives in one global, `g`.  Reservations,
 * allocations, mappings, pinned host blocks, streams and events are each kept
 * in a `struct vec`: an array of pointers to structs whose first member is a
 * 64-bit key, sorted by that key, found by binary search.  Keys are the base
 * address (reservations, mappings, host blocks), the handle (allocations, and
 * handles only grow, so stale ones are never reused and are always caught),
 * or the object's own address (streams, events, so a dangling CUstream is
 * recognised instead of dereferenced).  Mappings are one global array, not
 * one per reservation, because copies and cuMemSetAccess may legitimately run
 * across adjacent mappings whatever reservation they came from.  Each mapping
 * records the access flags of each of its granules, since cuMemSetAccess may
 * cover part of a mapping.  An allocation counts its references (creation,
 * each retain) and its live mappings, and is freed when both reach zero: that
 * is how a release while mapped defers the free to the last unmap.  Arrays
 * grow before any irreversible step (mmap, mprotect), so a call that cannot
 * complete leaves nothing half done.
 *
 * Locking.  One mutex, taken by every exported entry point for its whole
 * duration and by the introspection calls, except while a call sleeps for
 * the device (wait_until() drops and retakes it; what the call looked up
 * before the sleep is looked up again after).  No call is hot enough for
 * contention to matter, and a single lock makes every call atomic, which is
 * what the tests want to reason about.  The current context is per thread, as in the
 * driver, so it is a __thread pointer; whether the context it names is alive
 * is global state and is read under the lock.
 *
 * Held copies.  kvsdbl_copy_hold() lets a test stop time for copies: a
 * copy submitted while holding moves its bytes at once, as always, but its
 * completion is a number (HELD_BASE + k for the k-th held copy) instead of
 * a time, reached when the test releases k copies with
 * kvsdbl_copy_release().  So a test can see, without timing anything, that
 * a waiter on the first copies' event returns while later copies are still
 * in flight.
 *
 * Configuration comes from the environment when cuInit runs (see init()
 * and read_sizes()).  The kvsdbl_* functions at the end let tests
 * see what the double holds, launch simulated kernels and forget a sticky
 * error; they are not CUDA API.
 */
#define _GNU_SOURCE
#include <cuda.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
/*
 * Built with -DKVSDBL_MINIMAL (libcudadouble_min.so), the double does not
 * export the calls kvslab loads optionally: cuMemcpyBatchAsync_v2 (CUDA
 * 13), the module and launch calls and cuMemHostGetDevicePointer_v2.  That
 * is a driver without them, to test that their features stay off.
 */
#ifdef KVSDBL_MINIMAL
#define EXPORT_OPT __attribute__((visibility("hidden")))
#else
#define EXPORT_OPT EXPORT
#endif

/* The ABI names for which cuda.h has no declaration of its own. */
EXPORT size_t kvsdbl_live_handles(void);
EXPORT size_t kvsdbl_live_reservations(void);
EXPORT size_t kvsdbl_mapped_bytes(void);
EXPORT size_t kvsdbl_created_bytes(void);
EXPORT unsigned long kvsdbl_calls(const char *fn);
EXPORT int kvsdbl_last_error(void);
EXPORT CUresult kvsdbl_kernel(CUstream stream, CUdeviceptr ptr, size_t n,
			      unsigned long long ns);
EXPORT CUresult kvsdbl_kernel_write(CUstream stream, CUdeviceptr ptr, size_t n,
				    unsigned int seed, unsigned long long ns);
EXPORT unsigned char kvsdbl_pattern(unsigned int seed, size_t i);
EXPORT size_t kvsdbl_rdma_creates(void);
EXPORT int kvsdbl_sticky_error(void);
EXPORT unsigned long kvsdbl_faults(void);
EXPORT void kvsdbl_clear_sticky(void);
EXPORT void kvsdbl_copy_hold(int on);
EXPORT unsigned long kvsdbl_copy_release(unsigned long n);

#define DRIVER_VERSION 13000
#define DEFAULT_GRANULARITY ((size_t)2 << 20)
#define DEFAULT_CAPACITY ((size_t)1 << 30)
/* Far from small integers, so that a size or an fd passed as a handle fails. */
#define HANDLE_BASE 0x6b76730000000001ULL
#define NONE SIZE_MAX
/* The longest a waiting call sleeps before it looks again (for a fault). */
#define WAIT_STEP_NS 1000000ULL
/* Completion "times" from here up name held copies (kvsdbl_copy_hold()):
 * HELD_BASE + k is the k-th copy held, complete once k are released.  No
 * clock reaches it (2^62 ns is 146 years of uptime). */
#define HELD_BASE (1ULL << 62)

/* Every exported cu* function: its ABI (dlsym) name and its base name. */
#define CU_FUNCS(X)						\
	X(cuInit, cuInit)					\
	X(cuDriverGetVersion, cuDriverGetVersion)		\
	X(cuDeviceGetCount, cuDeviceGetCount)			\
	X(cuDeviceGet, cuDeviceGet)				\
	X(cuDeviceGetAttribute, cuDeviceGetAttribute)		\
	X(cuDeviceGetName, cuDeviceGetName)			\
	X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)	\
	X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease) \
	X(cuCtxSetCurrent, cuCtxSetCurrent)			\
	X(cuCtxGetCurrent, cuCtxGetCurrent)			\
	X(cuCtxSynchronize, cuCtxSynchronize)			\
	X(cuCtxSynchronize_v2, cuCtxSynchronize)		\
	X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity) \
	X(cuMemAddressReserve, cuMemAddressReserve)		\
	X(cuMemAddressFree, cuMemAddressFree)			\
	X(cuMemCreate, cuMemCreate)				\
	X(cuMemRelease, cuMemRelease)				\
	X(cuMemMap, cuMemMap)					\
	X(cuMemUnmap, cuMemUnmap)				\
	X(cuMemSetAccess, cuMemSetAccess)			\
	X(cuMemGetAccess, cuMemGetAccess)			\
	X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle) \
	X(cuMemGetInfo_v2, cuMemGetInfo)			\
	X(cuMemHostAlloc, cuMemHostAlloc)			\
	X(cuMemAllocHost_v2, cuMemAllocHost)			\
	X(cuMemFreeHost, cuMemFreeHost)				\
	X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync)		\
	X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync)		\
	X(cuMemcpyAsync, cuMemcpyAsync)				\
	X(cuStreamCreate, cuStreamCreate)			\
	X(cuStreamDestroy_v2, cuStreamDestroy)			\
	X(cuStreamSynchronize, cuStreamSynchronize)		\
	X(cuStreamWaitEvent, cuStreamWaitEvent)			\
	X(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync)		\
	X(cuMemHostGetDevicePointer_v2, cuMemHostGetDevicePointer) \
	X(cuModuleLoadData, cuModuleLoadData)			\
	X(cuModuleGetFunction, cuModuleGetFunction)		\
	X(cuModuleUnload, cuModuleUnload)			\
	X(cuLaunchKernel, cuLaunchKernel)			\
	X(cuEventCreate, cuEventCreate)				\
	X(cuEventRecord, cuEventRecord)				\
	X(cuEventQuery, cuEventQuery)				\
	X(cuEventSynchronize, cuEventSynchronize)		\
	X(cuEventDestroy_v2, cuEventDestroy)			\
	X(cuGetErrorString, cuGetErrorString)			\
	X(cuGetErrorName, cuGetErrorName)			\
	X(cuGetProcAddress_v2, cuGetProcAddress)

enum fn {
#define X(abi, base) FN_##abi,
	CU_FUNCS(X)
#undef X
	FN__COUNT
};

static const struct {
	const char *abi, *base;
} fn_names[FN__COUNT] = {
#define X(abi, base) [FN_##abi] = { #abi, #base },
	CU_FUNCS(X)
#undef X
};

/* ---- sorted arrays ------------------------------------------------------ */

struct vec {
	void **v;	/* each points at a struct starting with a uint64_t key */
	size_t n, cap;
};

static inline uint64_t vkey(const struct vec *vec, size_t i)
{
	return *(const uint64_t *)vec->v[i];
}

/* How many elements have a key <= k: the insertion point after equals. */
static size_t vec_upper(const struct vec *vec, uint64_t k)
{
	size_t lo = 0, hi = vec->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (vkey(vec, mid) <= k)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static size_t vec_exact(const struct vec *vec, uint64_t k)
{
	size_t i = vec_upper(vec, k);

	return i && vkey(vec, i - 1) == k ? i - 1 : NONE;
}

/* Called before the step that cannot be undone, so insertion cannot fail. */
static bool vec_reserve(struct vec *vec, size_t extra)
{
	size_t cap;
	void **v;

	if (vec->n + extra <= vec->cap)
		return true;
	cap = vec->cap ? vec->cap * 2 : 16;
	if (cap < vec->n + extra)
		cap = vec->n + extra;
	v = realloc(vec->v, cap * sizeof(*v));
	if (!v)
		return false;
	vec->v = v;
	vec->cap = cap;
	return true;
}

static void vec_insert(struct vec *vec, void *p)
{
	size_t i = vec_upper(vec, *(const uint64_t *)p);

	memmove(&vec->v[i + 1], &vec->v[i], (vec->n - i) * sizeof(*vec->v));
	vec->v[i] = p;
	vec->n++;
}

static void vec_remove(struct vec *vec, size_t i, size_t count)
{
	memmove(&vec->v[i], &vec->v[i + count],
		(vec->n - i - count) * sizeof(*vec->v));
	vec->n -= count;
	/* An empty array holds no memory, so a clean run ends with none. */
	if (!vec->n) {
		free(vec->v);
		vec->v = NULL;
		vec->cap = 0;
	}
}

/* Free every element and the array itself. */
static void vec_clear(struct vec *vec)
{
	for (size_t i = 0; i < vec->n; i++)
		free(vec->v[i]);
	free(vec->v);
	vec->v = NULL;
	vec->n = vec->cap = 0;
}

/* ---- state -------------------------------------------------------------- */

struct resv {
	uint64_t base;
	size_t size;
};

struct alloc {
	uint64_t handle;
	size_t size;
	int fd;
	unsigned long refs;	/* creation + retains - releases */
	unsigned long maps;	/* live mappings */
};

struct mapping {
	uint64_t addr;
	size_t size;
	struct alloc *alloc;
	unsigned char acc[];	/* CUmemAccess_flags of each granule */
};

struct hostblk {
	uint64_t addr;
	size_t size;
	unsigned int flags;	/* CU_MEMHOSTALLOC_* */
};

struct CUstream_st {
	uint64_t key;		/* its own address */
	unsigned int flags;
	uint64_t busy;		/* CLOCK_MONOTONIC ns when its work completes */
};

struct CUevent_st {
	uint64_t key;		/* its own address */
	unsigned int flags;
	uint64_t at;		/* completion time of the recorded work; 0: none */
};

/* A simulated kernel, kept while its end lies in the future. */
struct kernel {
	uint64_t addr;
	size_t n;
	uint64_t end;		/* CLOCK_MONOTONIC ns */
	unsigned int need;	/* CU_MEM_ACCESS_FLAGS_PROT_READ or _READWRITE */
	bool lands;		/* writes kvsdbl_pattern(seed, i) at its end */
	unsigned int seed;
};

struct CUctx_st {
	unsigned long refs;	/* primary context retains; 0: inactive */
};

/* A function of a module the double can run: kvslab's kernels only. */
struct CUfunc_st {
	struct CUmod_st *mod;
};

struct CUmod_st {
	uint64_t key;		/* its own address */
	struct CUfunc_st copy;	/* kvslab_copy_batch_v1 */
};

static struct {
	pthread_mutex_t lock;
	bool init;		/* a cuInit succeeded */
	bool nodev;		/* the last cuInit saw KVSLAB_DOUBLE_NODEV */
	size_t page, gran, capacity;
	struct CUctx_st ctx;	/* the one device's primary context */
	uint64_t next_handle;
	struct vec resvs, allocs, maps, hosts, streams, events, mods;
	size_t created, mapped;
	size_t rdma_creates;	/* cuMemCreate calls with gpuDirectRDMACapable */
	unsigned long calls[FN__COUNT];
	CUresult last_error;
	/* Asynchronous work (times in CLOCK_MONOTONIC ns, 0: idle). */
	struct kernel *kern;	/* incomplete kernels, unordered */
	size_t nkern, kern_cap;
	uint64_t legacy_busy;	/* the legacy default stream */
	uint64_t gone_busy;	/* destroyed blocking streams */
	uint64_t all_busy;	/* every stream, destroyed ones included */
	CUresult sticky;	/* the context's sticky error; 0: none */
	unsigned long faults;	/* faulting launches, unmaps, access changes */
	/* Held copies (kvsdbl_copy_hold()): numbered 1, 2, ... in submission
	 * order; the first `released` of them are complete. */
	bool hold;
	uint64_t held, released;
} g = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.next_handle = HANDLE_BASE,
};

/* initial-exec: the variable lives in the static TLS surplus glibc keeps
 * for dlopen'ed libraries, so no per-thread block is allocated on first use
 * (one glibc would keep after dlclose, which valgrind reports). */
static __thread struct CUctx_st *tls_ctx __attribute__((tls_model("initial-exec")));

static uint64_t now_ns(void);
static void kern_prune(uint64_t now);

/* Every call observes the clock: writing kernels that ended have landed. */
static void enter(enum fn f)
{
	pthread_mutex_lock(&g.lock);
	g.calls[f]++;
	if (g.nkern)
		kern_prune(now_ns());
}

static CUresult leave(CUresult r)
{
	if (r != CUDA_SUCCESS)
		g.last_error = r;
	pthread_mutex_unlock(&g.lock);
	return r;
}

static CUresult need_init(void)
{
	return g.init ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

/* A poisoned context answers every call that needs it with its error. */
static CUresult need_ctx(void)
{
	if (!g.init)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* A context whose last retain was released is gone for every thread. */
	if (tls_ctx != &g.ctx || !g.ctx.refs)
		return CUDA_ERROR_INVALID_CONTEXT;
	return g.sticky;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/*
 * Sleep until CLOCK_MONOTONIC reaches @t.  Call with g.lock held; it is
 * dropped while sleeping and held again on return, so the caller must look
 * up again whatever it found before.  Returns early with the sticky error
 * if the context is poisoned meanwhile: a faulted device abandons its work.
 */
/* Is work ending at @t complete at @now?  A held copy's end is not a time:
 * it is complete once released. */
static bool time_done(uint64_t t, uint64_t now)
{
	if (t >= HELD_BASE)
		return t - HELD_BASE <= g.released;
	return now >= t;
}

static CUresult wait_until(uint64_t t)
{
	for (;;) {
		uint64_t now, step;
		struct timespec ts;

		if (g.sticky)
			return g.sticky;
		now = now_ns();
		if (time_done(t, now)) {
			kern_prune(now);
			return CUDA_SUCCESS;
		}
		step = t >= HELD_BASE || t - now >= WAIT_STEP_NS ? WAIT_STEP_NS : t - now;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)step;
		pthread_mutex_unlock(&g.lock);
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&g.lock);
	}
}

/* The byte a writing kernel of @seed leaves at offset @i of its range. */
static unsigned char pattern(unsigned int seed, size_t i)
{
	return (unsigned char)(seed * 131u + i * 7u + (i >> 9));
}

/*
 * Land the writes of the kernels that ended by @now, earliest end first (on
 * one stream that is their order, so the last writer of a byte wins), then
 * forget every kernel whose time is up.  Their ranges are still mapped with
 * READWRITE: anything that took that away while they ran faulted, and a
 * fault abandons every kernel; unmapping, access changes and frees call
 * this (through kern_hit()) before they touch the memory.
 */
static void kern_prune(uint64_t now)
{
	for (;;) {
		struct kernel *first = NULL;

		for (size_t i = 0; i < g.nkern; i++) {
			struct kernel *k = &g.kern[i];

			if (k->lands && k->end <= now && (!first || k->end < first->end))
				first = k;
		}
		if (!first)
			break;
		for (size_t i = 0; i < first->n; i++)
			((unsigned char *)(uintptr_t)first->addr)[i] = pattern(first->seed, i);
		first->lands = false;
	}
	for (size_t i = 0; i < g.nkern;) {
		if (g.kern[i].end <= now)
			g.kern[i] = g.kern[--g.nkern];
		else
			i++;
	}
}

/*
 * Is there an incomplete kernel touching [p, p + n) that the access @flags
 * would not let do its work?  READ keeps readers going, READWRITE everyone,
 * PROT_NONE (and unmapping, which passes it) nobody.
 */
static bool kern_hit(uint64_t p, size_t n, unsigned int flags)
{
	kern_prune(now_ns());
	for (size_t i = 0; i < g.nkern; i++) {
		const struct kernel *k = &g.kern[i];

		if ((flags & k->need) == k->need)
			continue;
		if (k->addr <= p + (n - 1) && p <= k->addr + (k->n - 1))
			return true;
	}
	return false;
}

/*
 * A misuse the real driver does not survive: it dereferences the object it
 * was handed (a CUstream it does not know, for one) and the process
 * crashes.  The double says which rule broke and aborts, no less loudly.
 */
static void die(const char *call, const char *rule)
{
	fprintf(stderr, "libcuda double: %s: %s (undefined behaviour: the driver "
		"crashes); aborting\n", call, rule);
	fflush(stderr);
	abort();
}

/*
 * The device faulted: poison the context.  Its work is abandoned, as a GPU
 * kills a context after an illegal address: no kernel runs on, no stream or
 * event waits any more.
 */
static void fault(void)
{
	g.faults++;
	g.sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
	g.nkern = 0;
	g.legacy_busy = g.gone_busy = g.all_busy = 0;
	for (size_t i = 0; i < g.streams.n; i++)
		((struct CUstream_st *)g.streams.v[i])->busy = 0;
	for (size_t i = 0; i < g.events.n; i++)
		((struct CUevent_st *)g.events.v[i])->at = 0;
}

static bool gran_ok(uint64_t v)
{
	return v % g.gran == 0;
}

/* Non-empty and not wrapping past the top of the address space. */
static bool range_ok(uint64_t p, size_t n)
{
	return n && n - 1 <= UINT64_MAX - p;
}

static int prot_of(unsigned long long flags)
{
	if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
		return PROT_READ | PROT_WRITE;
	return flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_NONE;
}

static size_t resv_at(uint64_t a)
{
	size_t i = vec_upper(&g.resvs, a);
	const struct resv *r;

	if (!i)
		return NONE;
	r = g.resvs.v[i - 1];
	return a - r->base < r->size ? i - 1 : NONE;
}

static size_t map_at(uint64_t a)
{
	size_t i = vec_upper(&g.maps, a);
	const struct mapping *m;

	if (!i)
		return NONE;
	m = g.maps.v[i - 1];
	return a - m->addr < m->size ? i - 1 : NONE;
}

/* Does any mapping have a byte in [p, p + n)?  Mappings are disjoint and
 * sorted, so only the last one starting below the end can reach in. */
static bool map_overlaps(uint64_t p, size_t n)
{
	size_t i = vec_upper(&g.maps, p + (n - 1));
	const struct mapping *m;

	if (!i)
		return false;
	m = g.maps.v[i - 1];
	return m->addr + (m->size - 1) >= p;
}

/*
 * If mappings cover every byte of [p, p + n), the index of the first one and,
 * in *end, one past the last; NONE if any byte is unmapped.
 */
static size_t map_cover(uint64_t p, size_t n, size_t *end)
{
	size_t i = map_at(p), j;
	uint64_t cur = p, lim = p + (n - 1);

	if (i == NONE)
		return NONE;
	for (j = i; cur <= lim; j++) {
		const struct mapping *m;

		if (j == g.maps.n)
			return NONE;
		m = g.maps.v[j];
		if (m->addr > cur)
			return NONE;
		cur = m->addr + m->size;
		if (!cur)	/* a mapping ending at the top of the space */
			break;
	}
	*end = j + (cur == 0);
	return i;
}

static size_t host_at(uint64_t a)
{
	size_t i = vec_upper(&g.hosts, a);
	const struct hostblk *h;

	if (!i)
		return NONE;
	h = g.hosts.v[i - 1];
	return a - h->addr < h->size ? i - 1 : NONE;
}

/*
 * Could the device touch every byte of [p, p + n) with `need` (READ for a
 * source, READWRITE for a destination)?  Device memory is a mapping whose
 * granules grant it; under UVA a pinned host block is device-accessible at
 * its host address too, except write-combined ones, whose device address
 * differs.
 */
static bool dev_ok(uint64_t p, size_t n, unsigned int need)
{
	if (!range_ok(p, n))
		return false;
	while (n) {
		size_t i = map_at(p), step;

		if (i != NONE) {
			const struct mapping *m = g.maps.v[i];
			size_t left = m->size - (p - m->addr);
			size_t gi = (p - m->addr) / g.gran;

			step = n < left ? n : left;
			for (size_t ge = (p - m->addr + step - 1) / g.gran;
			     gi <= ge; gi++)
				if ((m->acc[gi] & need) != need)
					return false;
		} else {
			const struct hostblk *h;

			i = host_at(p);
			if (i == NONE)
				return false;
			h = g.hosts.v[i];
			if (h->flags & CU_MEMHOSTALLOC_WRITECOMBINED)
				return false;
			step = h->size - (p - h->addr);
			if (step > n)
				step = n;
		}
		p += step;
		n -= step;
	}
	return true;
}

/* Does [p, p + n) touch any reservation?  Then it is device address space,
 * even when a call names it a host pointer. */
static bool resv_overlaps(uint64_t p, size_t n)
{
	size_t i = vec_upper(&g.resvs, p + (n - 1));
	const struct resv *r;

	if (!i)
		return false;
	r = g.resvs.v[i - 1];
	return r->base + (r->size - 1) >= p;
}

static void alloc_maybe_free(struct alloc *a)
{
	size_t i;

	if (a->refs || a->maps)
		return;
	i = vec_exact(&g.allocs, a->handle);
	if (i != NONE)
		vec_remove(&g.allocs, i, 1);
	close(a->fd);
	g.created -= a->size;
	free(a);
}

/* What the driver does when the primary context's last retain goes: the
 * context's streams, events and pinned memory die with it; VMM memory
 * belongs to no context and stays. */
static void ctx_reset(void)
{
	vec_clear(&g.mods);
	/* Kernels outlive the context (see the essay), but not their writes
	 * into pinned memory, which goes now. */
	for (size_t i = 0; i < g.nkern; i++)
		if (g.kern[i].lands && host_at(g.kern[i].addr) != NONE)
			g.kern[i].lands = false;
	vec_clear(&g.streams);
	vec_clear(&g.events);
	for (size_t i = 0; i < g.hosts.n; i++)
		free((void *)(uintptr_t)((struct hostblk *)g.hosts.v[i])->addr);
	vec_clear(&g.hosts);
}

/* ---- start-up ------------------------------------------------------------ */

/* An unset or empty variable keeps the default; anything but a plain
 * non-negative number is a configuration error. */
static bool env_size(const char *name, size_t *out)
{
	const char *s = getenv(name);
	unsigned long long v;
	char *end;

	if (!s || !*s)
		return true;
	if (strchr(s, '-'))
		return false;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || v > SIZE_MAX)
		return false;
	*out = v;
	return true;
}

/*
 * The sizes are read by the first successful cuInit only: they cannot
 * change under live mappings.  A failed cuInit keeps nothing, so a test may
 * fix its environment and call again.
 */
static CUresult read_sizes(void)
{
	size_t gran = DEFAULT_GRANULARITY, cap = DEFAULT_CAPACITY;
	long page = sysconf(_SC_PAGESIZE);

	if (page <= 0)
		page = 4096;
	/* A typo in a test's environment should fail loudly, not fall back. */
	if (!env_size("KVSLAB_DOUBLE_GRANULARITY", &gran) ||
	    !env_size("KVSLAB_DOUBLE_MEM", &cap) ||
	    !gran || gran % (size_t)page)
		return CUDA_ERROR_INVALID_VALUE;
	g.page = page;
	g.gran = gran;
	g.capacity = cap;
	return CUDA_SUCCESS;
}

/*
 * KVSLAB_DOUBLE_NODEV, unlike the sizes, is read by every cuInit, so one
 * process (a test suite run without fork) can see the device vanish and come
 * back.  While it is set, cuInit fails and the device count is 0; whoever
 * initialised before keeps working, as a process keeps a GPU that is
 * hidden from later starters.
 */
static CUresult init(unsigned int flags)
{
	const char *nodev = getenv("KVSLAB_DOUBLE_NODEV");
	CUresult r;

	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	g.nodev = nodev && *nodev && strcmp(nodev, "0") != 0;
	if (g.nodev)
		return CUDA_ERROR_NO_DEVICE;
	if (g.init)
		return CUDA_SUCCESS;
	r = read_sizes();
	if (r == CUDA_SUCCESS)
		g.init = true;
	return r;
}

EXPORT CUresult cuInit(unsigned int Flags)
{
	enter(FN_cuInit);
	return leave(init(Flags));
}

/* Documented to work before cuInit (it lists no NOT_INITIALIZED), and
 * loaders ask for the version first. */
EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
	enter(FN_cuDriverGetVersion);
	if (!driverVersion)
		return leave(CUDA_ERROR_INVALID_VALUE);
	*driverVersion = DRIVER_VERSION;
	return leave(CUDA_SUCCESS);
}

static CUresult device_get_count(int *count)
{
	/* With no device the failed cuInit still leaves the count meaningful:
	 * that is how a caller tells "no GPU" from a broken driver. */
	if (g.nodev) {
		if (!count)
			return CUDA_ERROR_INVALID_VALUE;
		*count = 0;
		return CUDA_SUCCESS;
	}
	if (!g.init)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = 1;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
	enter(FN_cuDeviceGetCount);
	return leave(device_get_count(count));
}

static CUresult device_get(CUdevice *device, int ordinal)
{
	CUresult r = need_init();

	if (r)
		return r;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	/* Ordinals are in [0, count), and the count is 0 without a device. */
	if (ordinal != 0 || g.nodev)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = 0;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	enter(FN_cuDeviceGet);
	return leave(device_get(device, ordinal));
}

static CUresult device_get_attribute(int *pi, CUdevice_attribute attrib,
				     CUdevice dev)
{
	CUresult r = need_init();

	if (r)
		return r;
	if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
	/* As an H100 or H200 says; cuMemCreate records the flag and
	 * otherwise ignores it (no NIC reads the double's memory). */
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
		*pi = 1;
		break;
	default:
		/* Including POSIX fd handles (103): the double cannot export
		 * them. */
		*pi = 0;
		break;
	}
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	enter(FN_cuDeviceGetAttribute);
	return leave(device_get_attribute(pi, attrib, dev));
}

static CUresult device_get_name(char *name, int len, CUdevice dev)
{
	static const char dev_name[] = "kvslab CUDA test double";
	CUresult r = need_init();

	if (r)
		return r;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if ((size_t)len > sizeof(dev_name))
		len = sizeof(dev_name);
	memcpy(name, dev_name, len - 1);
	name[len - 1] = '\0';
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	enter(FN_cuDeviceGetName);
	return leave(device_get_name(name, len, dev));
}

/* ---- contexts ------------------------------------------------------------ */

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
	CUresult r = need_init();

	if (r)
		return r;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	g.ctx.refs++;
	*pctx = &g.ctx;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	enter(FN_cuDevicePrimaryCtxRetain);
	return leave(primary_retain(pctx, dev));
}

static CUresult primary_release(CUdevice dev)
{
	CUresult r = need_init();

	if (r)
		return r;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!g.ctx.refs)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!--g.ctx.refs)
		ctx_reset();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	enter(FN_cuDevicePrimaryCtxRelease_v2);
	return leave(primary_release(dev));
}

static CUresult ctx_set_current(CUcontext ctx)
{
	CUresult r = need_init();

	if (r)
		return r;
	if (ctx && (ctx != &g.ctx || !g.ctx.refs))
		return CUDA_ERROR_INVALID_CONTEXT;
	tls_ctx = ctx;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	enter(FN_cuCtxSetCurrent);
	return leave(ctx_set_current(ctx));
}

static CUresult ctx_get_current(CUcontext *pctx)
{
	CUresult r = need_init();

	if (r)
		return r;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = tls_ctx;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	enter(FN_cuCtxGetCurrent);
	return leave(ctx_get_current(pctx));
}

/* Wait for all work submitted so far, on every stream, destroyed ones too. */
static CUresult ctx_sync(void)
{
	CUresult r = need_ctx();

	return r ? r : wait_until(g.all_busy);
}

EXPORT CUresult cuCtxSynchronize(void)
{
	enter(FN_cuCtxSynchronize);
	return leave(ctx_sync());
}

/* The 13.0 form, returned by cuGetProcAddress for version >= 13000. */
EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	enter(FN_cuCtxSynchronize_v2);
	if (!ctx)
		return leave(ctx_sync());
	if (!g.init)
		return leave(CUDA_ERROR_NOT_INITIALIZED);
	if (ctx != &g.ctx || !g.ctx.refs)
		return leave(CUDA_ERROR_INVALID_CONTEXT);
	return leave(g.sticky ? g.sticky : wait_until(g.all_busy));
}

/* ---- virtual memory ------------------------------------------------------- */

/*
 * The properties the double can honour: pinned device memory on device 0,
 * GPUDirect RDMA capable or not (the attribute says the device can).
 * Exportable handles and compression are features the attributes report as
 * absent, hence NOT_SUPPORTED rather than a bad value.
 */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->location.id != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE ||
	    prop->allocFlags.compressionType ||
	    prop->allocFlags.usage)
		return CUDA_ERROR_NOT_SUPPORTED;
	for (size_t i = 0; i < sizeof(prop->allocFlags.reserved); i++)
		if (prop->allocFlags.reserved[i])
			return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult get_granularity(size_t *granularity, const CUmemAllocationProp *prop,
				CUmemAllocationGranularity_flags option)
{
	CUresult r = need_init();

	if (r)
		return r;
	if (!granularity)
		return CUDA_ERROR_INVALID_VALUE;
	r = check_prop(prop);
	if (r)
		return r;
	switch (option) {
	case CU_MEM_ALLOC_GRANULARITY_MINIMUM:
		*granularity = g.gran;
		return CUDA_SUCCESS;
	case CU_MEM_ALLOC_GRANULARITY_RECOMMENDED:
		/* Deliberately larger than MINIMUM: code that takes the
		 * hint for the binding unit shows up in the tests. */
		*granularity = 2 * g.gran;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity,
					      const CUmemAllocationProp *prop,
					      CUmemAllocationGranularity_flags option)
{
	enter(FN_cuMemGetAllocationGranularity);
	return leave(get_granularity(granularity, prop, option));
}

static size_t gcd(size_t a, size_t b)
{
	while (b) {
		size_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/* A PROT_NONE placeholder: reserves addresses without committing memory. */
static void *placeholder(void *addr, size_t size, int extra)
{
	return mmap(addr, size, PROT_NONE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | extra, -1, 0);
}

static CUresult address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				CUdeviceptr addr, unsigned long long flags)
{
	CUresult r = need_init();
	struct resv *rv;
	size_t align, total;
	uintptr_t raw, base;
	void *p = MAP_FAILED;

	if (r)
		return r;
	/* The driver asks only for page multiples here; the double asks for
	 * MINIMUM multiples like everywhere else, which kvslab promises.  An
	 * alignment must be a power of two, or a multiple of the granularity:
	 * with a non-power-of-two test granularity (no GPU has one) the usual
	 * "alignment = granularity" must keep working. */
	if (!ptr || flags || !size || !gran_ok(size) || !gran_ok(addr) ||
	    ((alignment & (alignment - 1)) && !gran_ok(alignment)))
		return CUDA_ERROR_INVALID_VALUE;
	align = g.gran;
	if (alignment > 1) {
		/* Aligned to both: their least common multiple. */
		if (__builtin_mul_overflow(g.gran / gcd(g.gran, alignment),
					   alignment, &align))
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	rv = malloc(sizeof(*rv));
	if (!rv || !vec_reserve(&g.resvs, 1)) {
		free(rv);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
#ifdef MAP_FIXED_NOREPLACE
	/* The address is only a hint: take it if it is free and aligned. */
	if (addr && addr % align == 0) {
		p = placeholder((void *)(uintptr_t)addr, size, MAP_FIXED_NOREPLACE);
		if (p != MAP_FAILED && (uintptr_t)p != addr) {
			/* A kernel that ignores the flag treats it as a hint. */
			munmap(p, size);
			p = MAP_FAILED;
		}
	}
#endif
	if (p == MAP_FAILED) {
		if (__builtin_add_overflow(size, align - g.page, &total)) {
			free(rv);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		p = placeholder(NULL, total, 0);
		if (p == MAP_FAILED) {
			free(rv);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		raw = (uintptr_t)p;
		base = (raw + align - 1) / align * align;
		if (base > raw)
			munmap(p, base - raw);
		if (raw + total > base + size)
			munmap((void *)(base + size), raw + total - (base + size));
		p = (void *)base;
	}
	rv->base = (uintptr_t)p;
	rv->size = size;
	vec_insert(&g.resvs, rv);
	*ptr = rv->base;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				    CUdeviceptr addr, unsigned long long flags)
{
	enter(FN_cuMemAddressReserve);
	return leave(address_reserve(ptr, size, alignment, addr, flags));
}

static CUresult address_free(CUdeviceptr ptr, size_t size)
{
	CUresult r = need_init();
	struct resv *rv;
	size_t i;

	if (r)
		return r;
	i = vec_exact(&g.resvs, ptr);
	if (i == NONE)
		return CUDA_ERROR_INVALID_VALUE;
	rv = g.resvs.v[i];
	/* No partial free, and no freeing under live mappings: what the
	 * driver does then is unknown, so the double refuses. */
	if (size != rv->size || map_overlaps(ptr, size))
		return CUDA_ERROR_INVALID_VALUE;
	if (munmap((void *)(uintptr_t)ptr, size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	vec_remove(&g.resvs, i, 1);
	free(rv);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	enter(FN_cuMemAddressFree);
	return leave(address_free(ptr, size));
}

static CUresult mem_create(CUmemGenericAllocationHandle *handle, size_t size,
			   const CUmemAllocationProp *prop, unsigned long long flags)
{
	CUresult r = need_init();
	struct alloc *a;
	int fd;

	if (r)
		return r;
	if (!handle || flags || !size || !gran_ok(size))
		return CUDA_ERROR_INVALID_VALUE;
	r = check_prop(prop);
	if (r)
		return r;
	if (size > g.capacity - g.created)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a = malloc(sizeof(*a));
	if (!a || !vec_reserve(&g.allocs, 1)) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	fd = memfd_create("kvslab-cuda-double", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size)) {
		if (fd >= 0)
			close(fd);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->handle = g.next_handle++;
	a->size = size;
	a->fd = fd;
	a->refs = 1;
	a->maps = 0;
	vec_insert(&g.allocs, a);
	g.created += size;
	if (prop->allocFlags.gpuDirectRDMACapable)
		g.rdma_creates++;
	*handle = a->handle;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			    const CUmemAllocationProp *prop, unsigned long long flags)
{
	enter(FN_cuMemCreate);
	return leave(mem_create(handle, size, prop, flags));
}

/* A handle is usable while it holds a reference: a released handle that
 * is still mapped keeps its memory, not its name. */
static struct alloc *alloc_live(CUmemGenericAllocationHandle handle)
{
	size_t i = vec_exact(&g.allocs, handle);
	struct alloc *a;

	if (i == NONE)
		return NULL;
	a = g.allocs.v[i];
	return a->refs ? a : NULL;
}

static CUresult mem_release(CUmemGenericAllocationHandle handle)
{
	CUresult r = need_init();
	struct alloc *a;

	if (r)
		return r;
	/* Undefined behaviour in the driver; a test wants to hear of it. */
	a = alloc_live(handle);
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	a->refs--;
	alloc_maybe_free(a);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	enter(FN_cuMemRelease);
	return leave(mem_release(handle));
}

static CUresult mem_map(CUdeviceptr ptr, size_t size, size_t offset,
			CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	CUresult r = need_init();
	struct mapping *m;
	struct alloc *a;
	size_t i;
	void *p;

	if (r)
		return r;
	if (flags || !range_ok(ptr, size) || !gran_ok(ptr) || !gran_ok(size) ||
	    !gran_ok(offset))
		return CUDA_ERROR_INVALID_VALUE;
	a = alloc_live(handle);
	/* The driver allows mapping a prefix; nobody does, so the double
	 * wants the whole allocation. */
	if (!a || offset != 0 || size != a->size)
		return CUDA_ERROR_INVALID_VALUE;
	i = resv_at(ptr);
	if (i == NONE) {
		return CUDA_ERROR_INVALID_VALUE;
	} else {
		const struct resv *rv = g.resvs.v[i];

		if (ptr - rv->base + size > rv->size)
			return CUDA_ERROR_INVALID_VALUE;
	}
	if (map_overlaps(ptr, size))
		return CUDA_ERROR_INVALID_VALUE;
	m = calloc(1, sizeof(*m) + size / g.gran);
	if (!m || !vec_reserve(&g.maps, 1)) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* A new mapping has no access for anyone. */
	p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED,
		 a->fd, 0);
	if (p == MAP_FAILED) {
		/* A failed MAP_FIXED may have dropped the placeholder; put it
		 * back so no other mmap can land inside the reservation. */
		placeholder((void *)(uintptr_t)ptr, size, MAP_FIXED);
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->addr = ptr;
	m->size = size;
	m->alloc = a;
	vec_insert(&g.maps, m);
	a->maps++;
	g.mapped += size;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			 CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	enter(FN_cuMemMap);
	return leave(mem_map(ptr, size, offset, handle, flags));
}

static CUresult mem_unmap(CUdeviceptr ptr, size_t size)
{
	CUresult r = need_init();
	size_t i, end;
	bool hit;

	if (r)
		return r;
	if (!range_ok(ptr, size) || !gran_ok(ptr) || !gran_ok(size))
		return CUDA_ERROR_INVALID_VALUE;
	/* Whole mappings only: the range starts where one starts, ends where
	 * one ends, and has no hole in between. */
	i = map_cover(ptr, size, &end);
	if (i == NONE)
		return CUDA_ERROR_INVALID_VALUE;
	{
		const struct mapping *first = g.maps.v[i], *last = g.maps.v[end - 1];

		if (first->addr != ptr || last->addr + last->size != ptr + size)
			return CUDA_ERROR_INVALID_VALUE;
	}
	/* The device cannot tell yet: the unmap succeeds and a kernel still
	 * using the range faults, which poisons the context.  Asked before
	 * the memory goes, so that a writer that just ended lands first. */
	hit = kern_hit(ptr, size, CU_MEM_ACCESS_FLAGS_PROT_NONE);
	/* One call swaps the whole range back to a placeholder, so there is
	 * no moment at which it is unreserved. */
	if (placeholder((void *)(uintptr_t)ptr, size, MAP_FIXED) == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t k = i; k < end; k++) {
		struct mapping *m = g.maps.v[k];
		struct alloc *a = m->alloc;

		a->maps--;
		g.mapped -= m->size;
		free(m);
		alloc_maybe_free(a);
	}
	vec_remove(&g.maps, i, end - i);
	if (hit)
		fault();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	enter(FN_cuMemUnmap);
	return leave(mem_unmap(ptr, size));
}

static CUresult check_location(const CUmemLocation *loc)
{
	if (!loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	return loc->id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Give the part of mappings [i, end) inside [p, lim] the protections their
 * granules record: the undo of a half-applied mprotect. */
static void reprotect(size_t i, size_t end, uint64_t p, uint64_t lim)
{
	for (size_t k = i; k < end; k++) {
		const struct mapping *m = g.maps.v[k];
		uint64_t a = m->addr > p ? m->addr : p;
		uint64_t e = m->addr + (m->size - 1) < lim ? m->addr + (m->size - 1) : lim;

		while (a <= e) {
			unsigned char acc = m->acc[(a - m->addr) / g.gran];
			uint64_t b = a + g.gran;

			while (b <= e && m->acc[(b - m->addr) / g.gran] == acc)
				b += g.gran;
			(void)mprotect((void *)(uintptr_t)a, b - a, prot_of(acc));
			a = b;
		}
	}
}

static CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
			   size_t count)
{
	CUresult r = need_init();
	unsigned long long flags;
	size_t i, end;
	bool hit;

	if (r)
		return r;
	if (!desc || !count || !range_ok(ptr, size) || !gran_ok(ptr) ||
	    !gran_ok(size))
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t k = 0; k < count; k++) {
		r = check_location(&desc[k].location);
		if (r)
			return r;
		if (desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
		    desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		    desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
	}
	/* One descriptor per location, and there is one device. */
	if (count > 1)
		return CUDA_ERROR_INVALID_VALUE;
	flags = desc[0].flags;
	i = map_cover(ptr, size, &end);
	if (i == NONE)
		return CUDA_ERROR_INVALID_VALUE;
	/* Taking access away from a running kernel faults it like an unmap;
	 * asked first, so that a writer that just ended lands first. */
	hit = kern_hit(ptr, size, (unsigned int)flags);
	if (mprotect((void *)(uintptr_t)ptr, size, prot_of(flags))) {
		reprotect(i, end, ptr, ptr + (size - 1));
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (size_t k = i; k < end; k++) {
		struct mapping *m = g.maps.v[k];
		uint64_t a = m->addr > ptr ? m->addr : ptr;
		uint64_t e = m->addr + m->size < ptr + size ? m->addr + m->size
							    : ptr + size;

		memset(&m->acc[(a - m->addr) / g.gran], (int)flags, (e - a) / g.gran);
	}
	if (hit)
		fault();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
			       size_t count)
{
	enter(FN_cuMemSetAccess);
	return leave(set_access(ptr, size, desc, count));
}

static CUresult get_access(unsigned long long *flags, const CUmemLocation *location,
			   CUdeviceptr ptr)
{
	CUresult r = need_init();
	const struct mapping *m;
	size_t i;

	if (r)
		return r;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	r = check_location(location);
	if (r)
		return r;
	i = map_at(ptr);
	if (i == NONE)
		return CUDA_ERROR_INVALID_VALUE;
	m = g.maps.v[i];
	*flags = m->acc[(ptr - m->addr) / g.gran];
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
			       CUdeviceptr ptr)
{
	enter(FN_cuMemGetAccess);
	return leave(get_access(flags, location, ptr));
}

static CUresult retain_handle(CUmemGenericAllocationHandle *handle, void *addr)
{
	CUresult r = need_init();
	struct alloc *a;
	size_t i;

	if (r)
		return r;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	i = map_at((uintptr_t)addr);
	if (i == NONE)
		return CUDA_ERROR_INVALID_VALUE;
	/* Revives a released-but-mapped handle's name, as the driver's
	 * reference counting implies. */
	a = ((struct mapping *)g.maps.v[i])->alloc;
	a->refs++;
	*handle = a->handle;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	enter(FN_cuMemRetainAllocationHandle);
	return leave(retain_handle(handle, addr));
}

static CUresult mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
	CUresult r = need_ctx();

	if (r)
		return r;
	if (!free_bytes || !total_bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*free_bytes = g.capacity - g.created;
	*total_bytes = g.capacity;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
	enter(FN_cuMemGetInfo_v2);
	return leave(mem_get_info(free_bytes, total_bytes));
}

/* ---- pinned host memory -------------------------------------------------- */

static CUresult host_alloc(void **pp, size_t bytesize, unsigned int flags)
{
	CUresult r = need_ctx();
	struct hostblk *h;
	void *p;

	if (r)
		return r;
	if (!pp || !bytesize ||
	    (flags & ~(unsigned int)(CU_MEMHOSTALLOC_PORTABLE |
				      CU_MEMHOSTALLOC_DEVICEMAP |
				      CU_MEMHOSTALLOC_WRITECOMBINED)))
		return CUDA_ERROR_INVALID_VALUE;
	/* Heap memory, so that valgrind sees overruns of staging buffers. */
	h = malloc(sizeof(*h));
	if (!h || !vec_reserve(&g.hosts, 1) ||
	    posix_memalign(&p, g.page, bytesize)) {
		free(h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	h->addr = (uintptr_t)p;
	h->size = bytesize;
	h->flags = flags;
	vec_insert(&g.hosts, h);
	*pp = p;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	enter(FN_cuMemHostAlloc);
	return leave(host_alloc(pp, bytesize, Flags));
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	enter(FN_cuMemAllocHost_v2);
	return leave(host_alloc(pp, bytesize, 0));
}

static CUresult free_host(void *p)
{
	CUresult r = need_init();
	size_t i;

	if (r)
		return r;
	if (!p)
		return CUDA_SUCCESS;
	/* Freeing needs no current context: any thread may drop a buffer. */
	i = vec_exact(&g.hosts, (uintptr_t)p);
	if (i == NONE)
		return CUDA_ERROR_INVALID_VALUE;
	/* Freed under a kernel that uses it: the device faults. */
	if (kern_hit((uintptr_t)p, ((struct hostblk *)g.hosts.v[i])->size,
		     CU_MEM_ACCESS_FLAGS_PROT_NONE))
		fault();
	free(g.hosts.v[i]);
	vec_remove(&g.hosts, i, 1);
	free(p);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
	enter(FN_cuMemFreeHost);
	return leave(free_host(p));
}

/*
 * The device's address of pinned host memory: the same address, under
 * unified addressing.  The double asks for what the driver documents:
 * memory allocated CU_MEMHOSTALLOC_DEVICEMAP (a choice: with unified
 * addressing a real driver may map every pinned block), flags 0.
 */
static CUresult host_dev_ptr(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
	CUresult r = need_ctx();
	size_t i;

	if (r)
		return r;
	if (!pdptr || flags)
		return CUDA_ERROR_INVALID_VALUE;
	i = host_at((uintptr_t)p);
	if (i == NONE || !(((struct hostblk *)g.hosts.v[i])->flags & CU_MEMHOSTALLOC_DEVICEMAP))
		return CUDA_ERROR_INVALID_VALUE;
	*pdptr = (uintptr_t)p;
	return CUDA_SUCCESS;
}

EXPORT_OPT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	enter(FN_cuMemHostGetDevicePointer_v2);
	return leave(host_dev_ptr(pdptr, p, Flags));
}

/* ---- streams, copies, events ---------------------------------------------- */

/*
 * Look @s up: true if it names a stream, with *st the stream or NULL for
 * the legacy default stream (0, CU_STREAM_LEGACY, and CU_STREAM_PER_THREAD,
 * which the double orders as the legacy stream: never less order than the
 * driver gives).
 */
static bool stream_get(CUstream s, struct CUstream_st **st)
{
	size_t i;

	*st = NULL;
	if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
		return true;
	i = vec_exact(&g.streams, (uintptr_t)s);
	if (i == NONE)
		return false;
	*st = g.streams.v[i];
	return true;
}

static bool blocking(const struct CUstream_st *st)
{
	return !(st->flags & CU_STREAM_NON_BLOCKING);
}

/*
 * When the work submitted so far to @st (NULL: the legacy stream) is done,
 * with the legacy stream's implicit order: legacy work waits for every
 * blocking stream's earlier work, a blocking stream's work for earlier
 * legacy work, and a non-blocking stream for nobody.
 */
static uint64_t stream_tail(const struct CUstream_st *st)
{
	uint64_t t;

	if (st)
		return blocking(st) ? max64(st->busy, g.legacy_busy) : st->busy;
	t = max64(g.legacy_busy, g.gone_busy);
	for (size_t i = 0; i < g.streams.n; i++) {
		const struct CUstream_st *o = g.streams.v[i];

		if (blocking(o))
			t = max64(t, o->busy);
	}
	return t;
}

/* A completion time, with released held copies (complete) counted as 0. */
static uint64_t settled(uint64_t t)
{
	return t >= HELD_BASE && time_done(t, 0) ? 0 : t;
}

/* Work ending at @t was put on @st: later work there comes after it. */
static void stream_push(struct CUstream_st *st, uint64_t t)
{
	if (st)
		st->busy = max64(settled(st->busy), t);
	else
		g.legacy_busy = max64(settled(g.legacy_busy), t);
	g.all_busy = max64(settled(g.all_busy), t);
}

static CUresult stream_create(CUstream *ph, unsigned int flags)
{
	CUresult r = need_ctx();
	struct CUstream_st *s;

	if (r)
		return r;
	if (!ph || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	s = malloc(sizeof(*s));
	if (!s || !vec_reserve(&g.streams, 1)) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	s->key = (uintptr_t)s;
	s->flags = flags;
	s->busy = 0;
	vec_insert(&g.streams, s);
	*ph = s;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	enter(FN_cuStreamCreate);
	return leave(stream_create(phStream, Flags));
}

static CUresult stream_destroy(CUstream s)
{
	CUresult r = need_ctx();
	size_t i;

	if (r)
		return r;
	i = vec_exact(&g.streams, (uintptr_t)s);
	if (i == NONE)
		return CUDA_ERROR_INVALID_HANDLE;
	/* The driver returns at once and lets pending work finish: its
	 * kernels stay in g.kern and g.all_busy until their time is up, and
	 * the legacy stream still waits for a blocking stream's last work. */
	if (blocking(g.streams.v[i]))
		g.gone_busy = max64(g.gone_busy,
				    ((struct CUstream_st *)g.streams.v[i])->busy);
	free(g.streams.v[i]);
	vec_remove(&g.streams, i, 1);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
	enter(FN_cuStreamDestroy_v2);
	return leave(stream_destroy(hStream));
}

static CUresult stream_sync(CUstream s)
{
	CUresult r = need_ctx();
	struct CUstream_st *st;

	if (r)
		return r;
	if (!stream_get(s, &st))
		return CUDA_ERROR_INVALID_HANDLE;
	return wait_until(stream_tail(st));
}

EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
	enter(FN_cuStreamSynchronize);
	return leave(stream_sync(hStream));
}

enum side { HOST_SIDE, DEV_READ, DEV_WRITE };

/* Check one side of a copy.  A "host" pointer inside a reservation is
 * device address space under UVA and is checked as such, so a bad pointer
 * cannot make the double itself fault. */
static CUresult copy_side(uint64_t p, size_t n, enum side side, bool src)
{
	if (side == HOST_SIDE) {
		if (!p || !range_ok(p, n))
			return CUDA_ERROR_INVALID_VALUE;
		if (resv_overlaps(p, n) &&
		    !dev_ok(p, n, src ? CU_MEM_ACCESS_FLAGS_PROT_READ
				      : CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
			return CUDA_ERROR_ILLEGAL_ADDRESS;
		return CUDA_SUCCESS;
	}
	return dev_ok(p, n, side == DEV_WRITE ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
					      : CU_MEM_ACCESS_FLAGS_PROT_READ)
		       ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
}

/*
 * Wait for @s's earlier work before a copy on it: it starts when that is
 * done.  The lock is dropped meanwhile, so the caller looks everything up
 * again; *st is looked up afresh.  Held copies ahead of it moved their bytes
 * at their submission: it need not (and, on one thread, could not) wait for
 * their release.  Writing kernels that ended by then have landed.
 */
static CUresult copy_turn(CUstream s, struct CUstream_st **st)
{
	CUresult r = need_ctx();

	if (r)
		return r;
	if (!stream_get(s, st))
		return CUDA_ERROR_INVALID_HANDLE;
	if (stream_tail(*st) < HELD_BASE)
		r = wait_until(stream_tail(*st));
	if (!r)
		r = need_ctx();
	if (r)
		return r;
	if (!stream_get(s, st))
		return CUDA_ERROR_INVALID_HANDLE;
	kern_prune(now_ns());
	return CUDA_SUCCESS;
}

/*
 * The whole copy is validated before a byte moves, then done at once, after
 * the stream's earlier work: the stream is in order and its work is complete
 * when the call returns.
 */
static CUresult copy(uint64_t dst, enum side dside, uint64_t src, enum side sside,
		     size_t n, CUstream s)
{
	struct CUstream_st *st;
	CUresult r = copy_turn(s, &st);

	if (r)
		return r;
	if (!n)
		return CUDA_SUCCESS;
	/* Bad arguments (INVALID_VALUE) outrank bad addresses. */
	if (dside == HOST_SIDE && (!dst || !range_ok(dst, n)))
		return CUDA_ERROR_INVALID_VALUE;
	if (sside == HOST_SIDE && (!src || !range_ok(src, n)))
		return CUDA_ERROR_INVALID_VALUE;
	r = copy_side(dst, n, dside, false);
	if (!r)
		r = copy_side(src, n, sside, true);
	if (r)
		return r;
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	if (g.hold)
		stream_push(st, HELD_BASE + ++g.held);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
				     size_t ByteCount, CUstream hStream)
{
	enter(FN_cuMemcpyHtoDAsync_v2);
	return leave(copy(dstDevice, DEV_WRITE, (uintptr_t)srcHost, HOST_SIDE,
			  ByteCount, hStream));
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice,
				     size_t ByteCount, CUstream hStream)
{
	enter(FN_cuMemcpyDtoHAsync_v2);
	return leave(copy((uintptr_t)dstHost, HOST_SIDE, srcDevice, DEV_READ,
			  ByteCount, hStream));
}

EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
			      CUstream hStream)
{
	enter(FN_cuMemcpyAsync);
	return leave(copy(dst, DEV_WRITE, src, DEV_READ, ByteCount, hStream));
}

/* Order of copies by destination, for batch_overlap(). */
static const CUdeviceptr *bo_dsts;

static int bo_cmp(const void *a, const void *b)
{
	CUdeviceptr x = bo_dsts[*(const size_t *)a], y = bo_dsts[*(const size_t *)b];

	return x < y ? -1 : x > y;
}

/*
 * Does a copy of the batch write what another copy reads or writes?  The
 * driver runs the copies of a batch in no order ("specifying any dependent
 * copies within a batch will result in undefined behavior").  Destinations
 * sorted, each one against the next, and every source against the
 * destination starting at or below its end.  -1: out of memory.
 */
static int batch_overlap(const CUdeviceptr *dsts, const CUdeviceptr *srcs,
			 const size_t *sizes, size_t count)
{
	size_t *ord = malloc(count * sizeof(*ord));
	int hit = 0;

	if (!ord)
		return -1;
	for (size_t i = 0; i < count; i++)
		ord[i] = i;
	bo_dsts = dsts;		/* under g.lock: qsort has no context pointer */
	qsort(ord, count, sizeof(*ord), bo_cmp);
	for (size_t k = 0; k + 1 < count && !hit; k++)
		hit = dsts[ord[k]] + (sizes[ord[k]] - 1) >= dsts[ord[k + 1]];
	for (size_t i = 0; i < count && !hit; i++) {
		uint64_t lo = srcs[i], hi = srcs[i] + (sizes[i] - 1);
		size_t a = 0, b = count;

		/* The last destination starting at or below hi: with sorted,
		 * disjoint destinations only it can reach back to lo. */
		while (a < b) {
			size_t mid = a + (b - a) / 2;

			if (dsts[ord[mid]] <= hi)
				a = mid + 1;
			else
				b = mid;
		}
		if (a && dsts[ord[a - 1]] + (sizes[ord[a - 1]] - 1) >= lo)
			hit = 1;
	}
	free(ord);
	return hit;
}

/*
 * cuMemcpyBatchAsync (the 13.0 ABI, without failIdx): @count pointer
 * copies in stream order as a whole, in no order among themselves.  What
 * the driver checks (the header's rules), all before a byte moves:
 * the arrays and @count non-zero; one attribute set at least, at most
 * @count, @attrsIdxs starting at 0, strictly rising and below @count; each
 * set a valid srcAccessOrder and only known flags; not the legacy NULL
 * stream.  A zero-sized copy is refused too (a choice: the header says
 * nothing, and kvslab never submits one).  Each side is a device pointer
 * when it lies in a reservation (checked as a copy checks it) and host
 * memory otherwise.  Copies that depend on each other are undefined
 * behaviour: the double aborts.  Then the copies move, as one unit of
 * the stream's work.
 */
static CUresult copy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
			   CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
			   CUstream s)
{
	struct CUstream_st *st;
	CUresult r = need_ctx();
	int ov;

	if (r)
		return r;
	if (!dsts || !srcs || !sizes || !count || !attrs || !attrsIdxs || !numAttrs ||
	    numAttrs > count || attrsIdxs[0] != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!s || s == CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t k = 0; k < numAttrs; k++) {
		if (k && attrsIdxs[k] <= attrsIdxs[k - 1])
			return CUDA_ERROR_INVALID_VALUE;
		if (attrsIdxs[k] >= count)
			return CUDA_ERROR_INVALID_VALUE;
		if (attrs[k].srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM &&
		    attrs[k].srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
		    attrs[k].srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
			return CUDA_ERROR_INVALID_VALUE;
		if (attrs[k].flags & ~(unsigned int)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE)
			return CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; i < count; i++)
		if (!sizes[i] || !dsts[i] || !srcs[i] || !range_ok(dsts[i], sizes[i]) ||
		    !range_ok(srcs[i], sizes[i]))
			return CUDA_ERROR_INVALID_VALUE;
	r = copy_turn(s, &st);
	if (r)
		return r;
	for (size_t i = 0; i < count && !r; i++) {
		r = copy_side(dsts[i], sizes[i], HOST_SIDE, false);
		if (!r)
			r = copy_side(srcs[i], sizes[i], HOST_SIDE, true);
	}
	if (r)
		return r;
	ov = batch_overlap(dsts, srcs, sizes, count);
	if (ov < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (ov)
		die("cuMemcpyBatchAsync", "a copy of the batch writes what another reads or writes");
	for (size_t i = 0; i < count; i++)
		memcpy((void *)(uintptr_t)dsts[i], (const void *)(uintptr_t)srcs[i], sizes[i]);
	if (g.hold)
		stream_push(st, HELD_BASE + ++g.held);
	return CUDA_SUCCESS;
}

EXPORT_OPT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
				      size_t count, CUmemcpyAttributes *attrs,
				      size_t *attrsIdxs, size_t numAttrs, CUstream hStream)
{
	enter(FN_cuMemcpyBatchAsync_v2);
	return leave(copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream));
}

static bool event_ok(CUevent e)
{
	return e && vec_exact(&g.events, (uintptr_t)e) != NONE;
}

static CUresult event_create(CUevent *ph, unsigned int flags)
{
	const unsigned int known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
				   CU_EVENT_INTERPROCESS;
	CUresult r = need_ctx();
	struct CUevent_st *e;

	if (r)
		return r;
	if (!ph || (flags & ~known) ||
	    ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
		return CUDA_ERROR_INVALID_VALUE;
	e = malloc(sizeof(*e));
	if (!e || !vec_reserve(&g.events, 1)) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	e->key = (uintptr_t)e;
	e->flags = flags;
	e->at = 0;
	vec_insert(&g.events, e);
	*ph = e;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	enter(FN_cuEventCreate);
	return leave(event_create(phEvent, Flags));
}

static CUresult event_record(CUevent e, CUstream s)
{
	CUresult r = need_ctx();
	struct CUstream_st *st;

	if (r)
		return r;
	if (!event_ok(e))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!stream_get(s, &st))
		die("cuEventRecord", "hStream is not a live stream of the context");
	/* The event completes with the work submitted before it.  On the
	 * legacy stream the record is itself legacy work: blocking streams'
	 * later work waits for what it waited for. */
	e->at = stream_tail(st);
	if (!st)
		stream_push(NULL, e->at);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	enter(FN_cuEventRecord);
	return leave(event_record(hEvent, hStream));
}

/*
 * @s's work submitted after this starts once @e's recorded work is done:
 * its completion time joins the stream's, as a kernel's end does.  A
 * never-recorded event is complete: nothing to wait for.  A stream the
 * driver does not know crashes it (die()); flags other than 0 and
 * CU_EVENT_WAIT_EXTERNAL are INVALID_VALUE.
 */
static CUresult stream_wait_event(CUstream s, CUevent e, unsigned int flags)
{
	CUresult r = need_ctx();
	struct CUstream_st *st;

	if (r)
		return r;
	if (!event_ok(e))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!stream_get(s, &st))
		die("cuStreamWaitEvent", "hStream is not a live stream of the context");
	if (flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	if (settled(e->at))
		stream_push(st, e->at);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	enter(FN_cuStreamWaitEvent);
	return leave(stream_wait_event(hStream, hEvent, Flags));
}

static CUresult event_check(CUevent e)
{
	CUresult r = need_ctx();

	if (r)
		return r;
	return event_ok(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Complete once its time is past, and always if never recorded, as the
 * driver says of a fresh event. */
static CUresult event_query(CUevent e)
{
	CUresult r = event_check(e);

	if (r)
		return r;
	return time_done(e->at, now_ns()) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EXPORT CUresult cuEventQuery(CUevent hEvent)
{
	enter(FN_cuEventQuery);
	return leave(event_query(hEvent));
}

/* BLOCKING_SYNC or not, the double sleeps: a busy wait would hold a core. */
static CUresult event_sync(CUevent e)
{
	CUresult r = event_check(e);

	if (r)
		return r;
	/* The time is read before the lock drops: the event may be
	 * re-recorded or destroyed meanwhile, and what was recorded at the
	 * call is what the caller waits for. */
	return wait_until(e->at);
}

EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
	enter(FN_cuEventSynchronize);
	return leave(event_sync(hEvent));
}

static CUresult event_destroy(CUevent e)
{
	CUresult r = event_check(e);
	size_t i;

	if (r)
		return r;
	i = vec_exact(&g.events, (uintptr_t)e);
	free(g.events.v[i]);
	vec_remove(&g.events, i, 1);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
	enter(FN_cuEventDestroy_v2);
	return leave(event_destroy(hEvent));
}

/* ---- modules and kernels -------------------------------------------------- */

/*
 * The double runs no device code.  It knows kvslab's gather/scatter module
 * by its versioned entry (".entry kvslab_copy_batch_v1" in the PTX text)
 * and runs that kernel's host reference implementation when it is launched;
 * any other image is refused as the driver refuses one it cannot load.
 */
#define KVSLAB_COPY_ENTRY "kvslab_copy_batch_v1"

static CUresult module_load(CUmodule *pmod, const void *image)
{
	CUresult r = need_ctx();
	struct CUmod_st *m;

	if (r)
		return r;
	if (!pmod || !image)
		return CUDA_ERROR_INVALID_VALUE;
	if (!strstr(image, ".entry " KVSLAB_COPY_ENTRY "("))
		return CUDA_ERROR_INVALID_IMAGE;
	m = malloc(sizeof(*m));
	if (!m || !vec_reserve(&g.mods, 1)) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->key = (uintptr_t)m;
	m->copy.mod = m;
	vec_insert(&g.mods, m);
	*pmod = m;
	return CUDA_SUCCESS;
}

EXPORT_OPT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	enter(FN_cuModuleLoadData);
	return leave(module_load(module, image));
}

static bool module_ok(CUmodule m)
{
	return m && vec_exact(&g.mods, (uintptr_t)m) != NONE;
}

static CUresult module_function(CUfunction *pf, CUmodule m, const char *name)
{
	CUresult r = need_ctx();

	if (r)
		return r;
	if (!pf || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!module_ok(m))
		return CUDA_ERROR_INVALID_HANDLE;
	if (strcmp(name, KVSLAB_COPY_ENTRY))
		return CUDA_ERROR_NOT_FOUND;
	*pf = &m->copy;
	return CUDA_SUCCESS;
}

EXPORT_OPT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	enter(FN_cuModuleGetFunction);
	return leave(module_function(hfunc, hmod, name));
}

static CUresult module_unload(CUmodule m)
{
	CUresult r = need_ctx();
	size_t i;

	if (r)
		return r;
	if (!module_ok(m))
		return CUDA_ERROR_INVALID_HANDLE;
	i = vec_exact(&g.mods, (uintptr_t)m);
	free(g.mods.v[i]);
	vec_remove(&g.mods, i, 1);
	return CUDA_SUCCESS;
}

EXPORT_OPT CUresult cuModuleUnload(CUmodule hmod)
{
	enter(FN_cuModuleUnload);
	return leave(module_unload(hmod));
}

/* Is @f a function of a loaded module?  Looked up, not dereferenced: a
 * function of an unloaded module is a dangling pointer. */
static bool function_ok(CUfunction f)
{
	for (size_t i = 0; i < g.mods.n; i++)
		if (&((struct CUmod_st *)g.mods.v[i])->copy == f)
			return true;
	return false;
}

/* kvs_copy_t, the kernel's descriptor. */
struct copy_desc {
	uint64_t dst, src, bytes;
};

/*
 * kvslab_copy_batch_v1(desc, n), on the host: what each thread block does
 * on a GPU, with the checks a GPU's memory system makes.  The descriptors
 * and every side must be device-accessible (mapped with the access the
 * copy needs, or pinned host memory): otherwise the kernel faults, which
 * poisons the context (the launch itself succeeds).  Copies of one launch
 * that overlap would race: the double aborts.
 */
static CUresult run_copy_kernel(CUdeviceptr d, unsigned long long n)
{
	const struct copy_desc *desc = (const struct copy_desc *)(uintptr_t)d;
	CUdeviceptr *dsts, *srcs;
	size_t *sizes, m = 0;
	int ov;

	if (!n)
		return CUDA_SUCCESS;
	if (n > SIZE_MAX / sizeof(*desc) ||
	    !dev_ok(d, (size_t)n * sizeof(*desc), CU_MEM_ACCESS_FLAGS_PROT_READ)) {
		fault();
		return CUDA_SUCCESS;
	}
	for (unsigned long long i = 0; i < n; i++) {
		if (!desc[i].bytes)
			continue;
		if (desc[i].bytes > SIZE_MAX ||
		    !dev_ok(desc[i].dst, (size_t)desc[i].bytes,
			    CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
		    !dev_ok(desc[i].src, (size_t)desc[i].bytes, CU_MEM_ACCESS_FLAGS_PROT_READ)) {
			fault();
			return CUDA_SUCCESS;
		}
	}
	dsts = malloc((size_t)n * sizeof(*dsts));
	srcs = malloc((size_t)n * sizeof(*srcs));
	sizes = malloc((size_t)n * sizeof(*sizes));
	if (!dsts || !srcs || !sizes) {
		free(dsts);
		free(srcs);
		free(sizes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (unsigned long long i = 0; i < n; i++) {
		if (!desc[i].bytes)
			continue;
		dsts[m] = desc[i].dst;
		srcs[m] = desc[i].src;
		sizes[m++] = (size_t)desc[i].bytes;
	}
	ov = m ? batch_overlap(dsts, srcs, sizes, m) : 0;
	if (ov > 0)
		die("cuLaunchKernel", "copies of one " KVSLAB_COPY_ENTRY " launch overlap");
	if (!ov)
		for (size_t i = 0; i < m; i++)
			memcpy((void *)(uintptr_t)dsts[i], (const void *)(uintptr_t)srcs[i],
			       sizes[i]);
	free(dsts);
	free(srcs);
	free(sizes);
	return ov < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/*
 * cuLaunchKernel of a function the double knows, with the driver's checks
 * of the launch configuration (a block of at most 1024 threads, z at most
 * 64; grid y and z at most 65535; no more than 48 KiB of dynamic shared
 * memory without opting in; kernelParams or extra, not both).  It runs in
 * stream order, as a copy does: after the stream's earlier work, done when
 * the call returns (held, like a copy, under kvsdbl_copy_hold()).
 */
static CUresult launch_kernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			      unsigned int bx, unsigned int by, unsigned int bz,
			      unsigned int shmem, CUstream s, void **params, void **extra)
{
	struct CUstream_st *st;
	CUresult r = need_ctx();

	if (r)
		return r;
	if (!function_ok(f))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!gx || !gy || !gz || !bx || !by || !bz || gx > INT_MAX || gy > 65535 ||
	    gz > 65535 || bz > 64 || (unsigned long long)bx * by * bz > 1024 ||
	    shmem > 48 * 1024)
		return CUDA_ERROR_INVALID_VALUE;
	if (!params || extra)
		return CUDA_ERROR_INVALID_VALUE;
	if (!params[0] || !params[1])
		return CUDA_ERROR_INVALID_VALUE;
	r = copy_turn(s, &st);
	if (r)
		return r;
	r = run_copy_kernel(*(CUdeviceptr *)params[0], *(unsigned long long *)params[1]);
	if (!r && g.hold)
		stream_push(st, HELD_BASE + ++g.held);
	return r;
}

EXPORT_OPT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			       unsigned int gridDimZ, unsigned int blockDimX,
			       unsigned int blockDimY, unsigned int blockDimZ,
			       unsigned int sharedMemBytes, CUstream hStream,
			       void **kernelParams, void **extra)
{
	enter(FN_cuLaunchKernel);
	return leave(launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
				   blockDimZ, sharedMemBytes, hStream, kernelParams, extra));
}

/* ---- errors --------------------------------------------------------------- */

#define E(code, text) { code, #code, text }
static const struct {
	CUresult code;
	const char *name, *text;
} errors[] = {
	E(CUDA_SUCCESS, "no error"),
	E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
	E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
	E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
	E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
	E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
	E(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized"),
	E(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
	E(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
	E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
	E(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "call requires a newer driver"),
	E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
	E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
	E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
	E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
	E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
	E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
	E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
	E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
	E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
	E(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
	E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
	E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
	E(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
	E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
	E(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
	E(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
	E(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
	E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
	E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"),
	E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
	E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
	E(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context"),
	E(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution"),
	E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
	E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain."),
	E(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled"),
	E(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported"),
	E(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
	E(CUDA_ERROR_CONTAINED, "an exception occurred on the device that is now contained"),
	E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
	E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
	E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
	E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
	E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
	E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
	E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
	E(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy"),
	E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
	E(CUDA_ERROR_NOT_READY, "device not ready"),
	E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
	E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
	E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
	E(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode"),
	E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
	E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
	E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
	E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
	E(CUDA_ERROR_ASSERT, "device-side assert triggered"),
	E(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
	E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
	E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
	E(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
	E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
	E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
	E(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
	E(CUDA_ERROR_INVALID_PC, "invalid program counter"),
	E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
	E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
	E(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed"),
	E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
	E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
	E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
	E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
	E(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "forward compatibility was attempted on non supported HW"),
	E(CUDA_ERROR_MPS_CONNECTION_FAILED, "MPS client failed to connect to the MPS control daemon or the MPS server"),
	E(CUDA_ERROR_MPS_RPC_FAILURE, "the remote procedural call between the MPS server and the MPS client failed"),
	E(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests"),
	E(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "the hardware resources required to create MPS client have been exhausted"),
	E(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "the hardware resources required to support device connections have been exhausted"),
	E(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server"),
	E(CUDA_ERROR_CDP_NOT_SUPPORTED, "the module is using CUDA Dynamic Parallelism, but the current configuration does not support it"),
	E(CUDA_ERROR_CDP_VERSION_MISMATCH, "the module uses a CUDA Dynamic Parallelism version the current configuration does not support"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
	E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
	E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
	E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream"),
	E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream"),
	E(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
	E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
	E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
	E(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
	E(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occurred in external entity outside of CUDA"),
	E(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster misconfiguration"),
	E(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded"),
	E(CUDA_ERROR_INVALID_RESOURCE_TYPE, "one or more resources passed in are not valid resource types for the operation"),
	E(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "one or more resources are insufficient or non-applicable for the operation"),
	E(CUDA_ERROR_KEY_ROTATION, "an error occurred during the key rotation sequence"),
	E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

/* Before cuInit too: a failing cuInit must be printable. */
static CUresult error_text(CUresult error, const char **pStr, bool name)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		if (errors[i].code == error) {
			*pStr = name ? errors[i].name : errors[i].text;
			return CUDA_SUCCESS;
		}
	}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	enter(FN_cuGetErrorString);
	return leave(error_text(error, pStr, false));
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	enter(FN_cuGetErrorName);
	return leave(error_text(error, pStr, true));
}

/* ---- versioned lookup ------------------------------------------------------ */

/*
 * Base name, the CUDA version range [from, until) it answers for, and the
 * function.  Versions are those of cudaTypedefs.h.  Below a _v2's version
 * the real driver hands out the legacy variant, which the double lacks: the
 * lookup then says VERSION_NOT_SUFFICIENT rather than give a pointer whose
 * signature differs.
 */
#define P(base, from, until, fn) { #base, from, until, (void *)(fn) }
static const struct {
	const char *name;
	int from, until;
	void *fn;
} procs[] = {
	P(cuInit, 2000, INT_MAX, cuInit),
	P(cuDriverGetVersion, 2020, INT_MAX, cuDriverGetVersion),
	P(cuDeviceGetCount, 2000, INT_MAX, cuDeviceGetCount),
	P(cuDeviceGet, 2000, INT_MAX, cuDeviceGet),
	P(cuDeviceGetAttribute, 2000, INT_MAX, cuDeviceGetAttribute),
	P(cuDeviceGetName, 2000, INT_MAX, cuDeviceGetName),
	P(cuDevicePrimaryCtxRetain, 7000, INT_MAX, cuDevicePrimaryCtxRetain),
	P(cuDevicePrimaryCtxRelease, 11000, INT_MAX, cuDevicePrimaryCtxRelease_v2),
	P(cuCtxSetCurrent, 4000, INT_MAX, cuCtxSetCurrent),
	P(cuCtxGetCurrent, 4000, INT_MAX, cuCtxGetCurrent),
	P(cuCtxSynchronize, 2000, 13000, cuCtxSynchronize),
	P(cuCtxSynchronize, 13000, INT_MAX, cuCtxSynchronize_v2),
	P(cuMemGetAllocationGranularity, 10020, INT_MAX, cuMemGetAllocationGranularity),
	P(cuMemAddressReserve, 10020, INT_MAX, cuMemAddressReserve),
	P(cuMemAddressFree, 10020, INT_MAX, cuMemAddressFree),
	P(cuMemCreate, 10020, INT_MAX, cuMemCreate),
	P(cuMemRelease, 10020, INT_MAX, cuMemRelease),
	P(cuMemMap, 10020, INT_MAX, cuMemMap),
	P(cuMemUnmap, 10020, INT_MAX, cuMemUnmap),
	P(cuMemSetAccess, 10020, INT_MAX, cuMemSetAccess),
	P(cuMemGetAccess, 10020, INT_MAX, cuMemGetAccess),
	P(cuMemRetainAllocationHandle, 11000, INT_MAX, cuMemRetainAllocationHandle),
	P(cuMemGetInfo, 3020, INT_MAX, cuMemGetInfo_v2),
	P(cuMemHostAlloc, 2020, INT_MAX, cuMemHostAlloc),
	P(cuMemAllocHost, 3020, INT_MAX, cuMemAllocHost_v2),
	P(cuMemFreeHost, 2000, INT_MAX, cuMemFreeHost),
	P(cuMemcpyHtoDAsync, 3020, INT_MAX, cuMemcpyHtoDAsync_v2),
	P(cuMemcpyDtoHAsync, 3020, INT_MAX, cuMemcpyDtoHAsync_v2),
	P(cuMemcpyAsync, 4000, INT_MAX, cuMemcpyAsync),
	P(cuStreamCreate, 2000, INT_MAX, cuStreamCreate),
	P(cuStreamDestroy, 4000, INT_MAX, cuStreamDestroy_v2),
	P(cuStreamSynchronize, 2000, INT_MAX, cuStreamSynchronize),
	P(cuStreamWaitEvent, 3020, INT_MAX, cuStreamWaitEvent),
	P(cuMemcpyBatchAsync, 13000, INT_MAX, cuMemcpyBatchAsync_v2),
	P(cuMemHostGetDevicePointer, 3020, INT_MAX, cuMemHostGetDevicePointer_v2),
	P(cuModuleLoadData, 2000, INT_MAX, cuModuleLoadData),
	P(cuModuleGetFunction, 2000, INT_MAX, cuModuleGetFunction),
	P(cuModuleUnload, 2000, INT_MAX, cuModuleUnload),
	P(cuLaunchKernel, 4000, INT_MAX, cuLaunchKernel),
	P(cuEventCreate, 2000, INT_MAX, cuEventCreate),
	P(cuEventRecord, 2000, INT_MAX, cuEventRecord),
	P(cuEventQuery, 2000, INT_MAX, cuEventQuery),
	P(cuEventSynchronize, 2000, INT_MAX, cuEventSynchronize),
	P(cuEventDestroy, 4000, INT_MAX, cuEventDestroy_v2),
	P(cuGetErrorString, 6000, INT_MAX, cuGetErrorString),
	P(cuGetErrorName, 6000, INT_MAX, cuGetErrorName),
	P(cuGetProcAddress, 12000, INT_MAX, cuGetProcAddress_v2),
};
#undef P

/* Works before cuInit, as the runtime relies on. */
static CUresult get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
			 CUdriverProcAddressQueryResult *status)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;

	if (!symbol || !pfn || version > DRIVER_VERSION ||
	    flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
		return CUDA_ERROR_INVALID_VALUE;
	/* Streams never overlap here, so per-thread-default-stream lookups
	 * get the same functions as legacy ones. */
	*pfn = NULL;
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		if (strcmp(procs[i].name, symbol))
			continue;
		if (version >= procs[i].from && version < procs[i].until) {
			*pfn = procs[i].fn;
			st = CU_GET_PROC_ADDRESS_SUCCESS;
			break;
		}
		st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
	}
	if (status)
		*status = st;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				    cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	enter(FN_cuGetProcAddress_v2);
	return leave(get_proc(symbol, pfn, cudaVersion, flags, symbolStatus));
}

/* ---- introspection for tests ---------------------------------------------- */

/* Allocations not yet freed, including released ones kept by a mapping. */
EXPORT size_t kvsdbl_live_handles(void)
{
	size_t n;

	pthread_mutex_lock(&g.lock);
	n = g.allocs.n;
	pthread_mutex_unlock(&g.lock);
	return n;
}

EXPORT size_t kvsdbl_live_reservations(void)
{
	size_t n;

	pthread_mutex_lock(&g.lock);
	n = g.resvs.n;
	pthread_mutex_unlock(&g.lock);
	return n;
}

EXPORT size_t kvsdbl_mapped_bytes(void)
{
	size_t n;

	pthread_mutex_lock(&g.lock);
	n = g.mapped;
	pthread_mutex_unlock(&g.lock);
	return n;
}

EXPORT size_t kvsdbl_created_bytes(void)
{
	size_t n;

	pthread_mutex_lock(&g.lock);
	n = g.created;
	pthread_mutex_unlock(&g.lock);
	return n;
}

/*
 * Calls of `fn`, failed ones included.  The ABI name ("cuMemGetInfo_v2")
 * names one export; a base name ("cuMemGetInfo") that is no export's ABI
 * name counts every export with that base.
 */
EXPORT unsigned long kvsdbl_calls(const char *fn)
{
	unsigned long n = 0;

	if (!fn)
		return 0;
	pthread_mutex_lock(&g.lock);
	for (size_t i = 0; i < FN__COUNT; i++) {
		if (!strcmp(fn_names[i].abi, fn)) {
			n = g.calls[i];
			goto out;
		}
	}
	for (size_t i = 0; i < FN__COUNT; i++)
		if (!strcmp(fn_names[i].base, fn))
			n += g.calls[i];
out:
	pthread_mutex_unlock(&g.lock);
	return n;
}

/* The last CUresult other than CUDA_SUCCESS any cu* call returned; 0 if none. */
EXPORT int kvsdbl_last_error(void)
{
	int r;

	pthread_mutex_lock(&g.lock);
	r = (int)g.last_error;
	pthread_mutex_unlock(&g.lock);
	return r;
}

/* ---- simulated kernels (test-only) ---------------------------------------- */

static CUresult launch(CUstream s, CUdeviceptr ptr, size_t n, unsigned long long ns,
		       unsigned int need, bool lands, unsigned int seed)
{
	CUresult r = need_ctx();
	struct CUstream_st *st;
	uint64_t now, end, tail;

	if (r)
		return r;
	if (!stream_get(s, &st))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!range_ok(ptr, n))
		return CUDA_ERROR_INVALID_VALUE;
	/* The launch itself succeeds, as an asynchronous one does; the
	 * kernel faults when it touches the memory, which poisons the
	 * context and is seen at the next synchronization. */
	if (!dev_ok(ptr, n, need)) {
		fault();
		return CUDA_SUCCESS;
	}
	now = now_ns();
	kern_prune(now);
	tail = stream_tail(st);
	if (tail >= HELD_BASE) {
		/* Behind a held copy it would start at a time nobody knows;
		 * behind released ones, now. */
		if (!time_done(tail, now))
			return CUDA_ERROR_NOT_SUPPORTED;
		tail = now;
	}
	if (__builtin_add_overflow(max64(now, tail), ns, &end))
		end = UINT64_MAX;
	if (end > now) {
		if (g.nkern == g.kern_cap) {
			size_t cap = g.kern_cap ? 2 * g.kern_cap : 16;
			struct kernel *k = realloc(g.kern, cap * sizeof(*k));

			if (!k)
				return CUDA_ERROR_OUT_OF_MEMORY;
			g.kern = k;
			g.kern_cap = cap;
		}
		g.kern[g.nkern++] = (struct kernel){ ptr, n, end, need, lands, seed };
	} else if (lands) {
		for (size_t i = 0; i < n; i++)
			((unsigned char *)(uintptr_t)ptr)[i] = pattern(seed, i);
	}
	stream_push(st, end);
	return CUDA_SUCCESS;
}

/*
 * kvsdbl_kernel - enqueue a simulated kernel that reads [ptr, ptr + n)
 * @stream: 0 (or CU_STREAM_LEGACY) for the legacy default stream, or a
 *          stream the double created
 * @ns: how long it runs, in CLOCK_MONOTONIC nanoseconds, from the moment
 *      the stream's earlier work is done
 *
 * Context: the calling thread must have the primary context current.
 * Return: the launch's CUresult.  Memory the kernel cannot read makes the
 * launch succeed and poisons the context with a sticky ILLEGAL_ADDRESS.
 */
EXPORT CUresult kvsdbl_kernel(CUstream stream, CUdeviceptr ptr, size_t n,
			      unsigned long long ns)
{
	CUresult r;

	pthread_mutex_lock(&g.lock);
	r = launch(stream, ptr, n, ns, CU_MEM_ACCESS_FLAGS_PROT_READ, false, 0);
	return leave(r);
}

/*
 * kvsdbl_kernel_write - the same for a kernel that writes the range
 * @seed: what it writes: byte i of the range becomes kvsdbl_pattern(seed, i)
 *
 * It needs READWRITE, and a cuMemSetAccess down to READ under it faults
 * too.  Its bytes land when it completes: applied by the first call that
 * sees the clock past its end, and always before a copy ordered after it
 * moves a byte; a copy not ordered after it that runs earlier reads the old
 * bytes.
 */
EXPORT CUresult kvsdbl_kernel_write(CUstream stream, CUdeviceptr ptr, size_t n,
				    unsigned int seed, unsigned long long ns)
{
	CUresult r;

	pthread_mutex_lock(&g.lock);
	r = launch(stream, ptr, n, ns, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, true, seed);
	return leave(r);
}

/* The byte kvsdbl_kernel_write(..., seed, ...) leaves at offset @i. */
EXPORT unsigned char kvsdbl_pattern(unsigned int seed, size_t i)
{
	return pattern(seed, i);
}

/* cuMemCreate calls that asked for a GPUDirect RDMA capable allocation. */
EXPORT size_t kvsdbl_rdma_creates(void)
{
	size_t n;

	pthread_mutex_lock(&g.lock);
	n = g.rdma_creates;
	pthread_mutex_unlock(&g.lock);
	return n;
}

/* The context's sticky CUresult (CUDA_ERROR_ILLEGAL_ADDRESS), 0 if none. */
EXPORT int kvsdbl_sticky_error(void)
{
	int r;

	pthread_mutex_lock(&g.lock);
	r = (int)g.sticky;
	pthread_mutex_unlock(&g.lock);
	return r;
}

/* Device faults seen since the start or the last kvsdbl_clear_sticky(). */
EXPORT unsigned long kvsdbl_faults(void)
{
	unsigned long n;

	pthread_mutex_lock(&g.lock);
	n = g.faults;
	pthread_mutex_unlock(&g.lock);
	return n;
}

/*
 * kvsdbl_copy_hold - hold the completion of copies, to test what waits for
 * them without timing anything
 * @on: non-zero: every copy submitted from now on is held; 0: release
 *      every held copy and stop holding
 *
 * A held copy moves its bytes at submission, as every copy of the double
 * does, but its stream's work does not complete until the test releases
 * it: events recorded after it stay NOT_READY, synchronizations wait (with
 * the lock dropped, so another thread can release), and later copies on
 * its stream, which do not wait for it, are held too while holding is on.
 * Copies are held and released in submission order, the order of their
 * streams.  A kernel launched behind an unreleased held copy is refused
 * with CUDA_ERROR_NOT_SUPPORTED.
 */
EXPORT void kvsdbl_copy_hold(int on)
{
	pthread_mutex_lock(&g.lock);
	g.hold = on != 0;
	if (!on) {
		uint64_t now = now_ns();

		g.released = g.held;
		/* Nothing is held any more: every held end is now. */
		if (g.legacy_busy >= HELD_BASE)
			g.legacy_busy = now;
		if (g.gone_busy >= HELD_BASE)
			g.gone_busy = now;
		if (g.all_busy >= HELD_BASE)
			g.all_busy = now;
		for (size_t i = 0; i < g.streams.n; i++) {
			struct CUstream_st *st = g.streams.v[i];

			if (st->busy >= HELD_BASE)
				st->busy = now;
		}
	}
	pthread_mutex_unlock(&g.lock);
}

/*
 * kvsdbl_copy_release - complete the next @n held copies
 *
 * Return: the copies still held after it.
 */
EXPORT unsigned long kvsdbl_copy_release(unsigned long n)
{
	unsigned long left;

	pthread_mutex_lock(&g.lock);
	g.released = g.held - g.released < n ? g.held : g.released + n;
	left = (unsigned long)(g.held - g.released);
	pthread_mutex_unlock(&g.lock);
	return left;
}

/* Forget the sticky error and the fault count: a simulated process restart
 * of the error state only (the faulting work was already abandoned). */
EXPORT void kvsdbl_clear_sticky(void)
{
	pthread_mutex_lock(&g.lock);
	g.sticky = CUDA_SUCCESS;
	g.faults = 0;
	pthread_mutex_unlock(&g.lock);
}

/*
 * Process exit (or dlclose): drop what the double allocated, as a driver's
 * teardown would, so valgrind sees a clean exit even when the code under
 * test leaks (the kvsdbl_* counters are how tests catch that).  Reservations
 * and mappings stay in the address space: a thread still touching device
 * memory at exit should not fault because of the double.  Later calls find
 * the double uninitialised.
 */
__attribute__((destructor)) static void dbl_fini(void)
{
	pthread_mutex_lock(&g.lock);
	ctx_reset();
	g.ctx.refs = 0;
	vec_clear(&g.maps);
	for (size_t i = 0; i < g.allocs.n; i++)
		close(((struct alloc *)g.allocs.v[i])->fd);
	vec_clear(&g.allocs);
	vec_clear(&g.resvs);
	free(g.kern);
	g.kern = NULL;
	g.nkern = g.kern_cap = 0;
	g.created = g.mapped = 0;
	g.init = false;
	pthread_mutex_unlock(&g.lock);
}
