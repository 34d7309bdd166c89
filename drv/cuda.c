/* SPDX-License-Identifier: MIT */
/*
 * drv/cuda.c - the "cuda" backend: kvslab's driver operations carried out
 * with the CUDA driver's virtual memory management (VMM) API.
 *
 * What this file owns.  Nothing but the translation of one backend call into
 * CUDA driver calls and of a CUresult into errno.  The generic layer
 * (drv/drv.c) keeps every table: reservations, chunks, mappings, access
 * rights, limits, counters.  It validates arguments against the rules of
 * CUDA-VMM.md before calling us, so this file does not second-guess sizes or
 * alignments; it reports what the driver says.
 *
 * Loading.  kvslab never links libcuda: a machine without an NVIDIA driver
 * must still load kvslab and use the host backend, and the tests substitute
 * a double.  cuda_load() dlopen()s $KVSLAB_LIBCUDA (read with secure_getenv,
 * so a set-id program ignores it, as the dynamic linker ignores LD_*) or
 * "libcuda.so.1", RTLD_NOW | RTLD_LOCAL, and looks up every function by its
 * ABI name (CUDA-VMM.md section 8: several calls are exported as "_v2" and
 * cuda.h renames the plain spelling by macro).  <cuda.h> is included for
 * types and constants only; the function-pointer types are ours, generated
 * with the symbol table from the one CUDA_FNS() list, and the pointers live
 * in struct cuda_priv (drv->priv).  A missing symbol of CUDA_FNS() makes
 * the library unusable: open fails with ENODEV.  Those of CUDA_OPT_FNS()
 * (drv/cuda_int.h) are features a driver may lack, each behind a capability
 * flag: cuMemcpyBatchAsync_v2 (KVS_DRV_CAP_BATCH; else a batch is one copy
 * call per entry) and the module and launch calls of the gather/scatter
 * kernel (KVS_DRV_CAP_KERNELS: drv/cuda_kern.c).
 *
 * Ordering with the engine.  cuStreamWaitEvent makes the copy stream wait
 * for an event the engine recorded (kvs_drv_stream_wait()) and an engine
 * stream wait for a copy's event (kvs_event_stream_wait()): both on the
 * device, the caller never waits (KVS_DRV_CAP_STREAM_WAIT).  A CUstream the
 * driver does not know crashes it; we pass what the caller gave.
 *
 * State and locking.  struct cuda_priv is written once by cuda_open() and
 * only read afterwards, so there is no lock here: the driver API is
 * thread-safe and so is submitting to one stream from several threads.  Each
 * driver owns one CU_STREAM_NON_BLOCKING stream, its copy queue: copies and
 * event records go there in submission order, and being non-blocking it
 * neither waits for nor holds up the legacy default stream that other code
 * in the process may use.
 *
 * Contexts and threads.  We retain the device's primary context, the one
 * the CUDA runtime (and so PyTorch) uses, so our allocations, streams and
 * events are the application's too.  A current context is per thread and
 * streams, events, copies and cuMemGetInfo need one, so every operation
 * first makes ours current on the calling thread (cuda_bind()) and leaves it
 * current afterwards, as cudaSetDevice() would.  The thread-local cuda_bound
 * remembers what we last bound on this thread, keyed on the library handle
 * (two libraries keep two independent "current" states), the context, and
 * cuda_epoch, which every primary-context release bumps so a context reset
 * by a close and retained again by a later open is bound afresh.  The common
 * case therefore costs three compares and no driver call.  The cache cannot
 * see the application change the thread's context behind our back, so:
 *  - a call that fails with CUDA_ERROR_INVALID_CONTEXT did nothing; it is
 *    retried once after binding for real (CU_RETRY());
 *  - the two calls whose meaning depends on *which* context is current,
 *    cuCtxSynchronize (KVS_DRV_F_SYNC_UNMAP) and cuMemGetInfo, ask the
 *    driver (cuda_bind_strict()) instead of trusting the cache;
 *  - everything else names its device object explicitly (addresses,
 *    handles, the prop, our stream and events) and is not redirected by a
 *    wrong current context.
 *
 * Synchronization before unmap (CUDA-VMM.md section 5).  No VMM call takes
 * a stream and none is stream-ordered; cuMemUnmap is not documented to wait
 * for work still reading the range, and editing mappings under running
 * kernels has faulted in practice (kvcached#465).  The rule is: wait for a
 * range's last use before unmapping or remapping it.  This backend
 * synchronizes its own copy stream before cuMemUnmap, since a copy queued on
 * it may still read or write the range (the generic layer skips that when
 * no copy was submitted since the last synchronization finished); the application's kernels are the
 * caller's to wait for (an event), or KVS_DRV_F_SYNC_UNMAP makes every unmap
 * synchronize the whole context first, as PyTorch's expandable segments do.
 * Creating or releasing handles needs no wait: cuMemRelease of a mapped
 * handle only drops a reference.
 *
 * Errors.  Every failure returns -1 with errno from cuda_errno() and leaves
 * a detail "cuXxx: CUDA_ERROR_NAME" for kvs_drv_strerror().  Nothing here
 * aborts or prints.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* secure_getenv() */
#endif

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* The library kvslab loads unless $KVSLAB_LIBCUDA names another. */
#define CUDA_LIBNAME "libcuda.so.1"

static const struct cuda_sym {
	const char *name;
	size_t off;		/* of the pointer in struct cuda_fns */
	int optional;		/* from CUDA_OPT_FNS(): may be missing */
} cuda_syms[] = {
#define CUDA_FN_SYM(fn, sym, args) { sym, offsetof(struct cuda_fns, fn), 0 },
	CUDA_FNS(CUDA_FN_SYM)
#undef CUDA_FN_SYM
#define CUDA_FN_SYM(fn, sym, args) { sym, offsetof(struct cuda_fns, fn), 1 },
	CUDA_OPT_FNS(CUDA_FN_SYM)
#undef CUDA_FN_SYM
};

/* dlsym() hands back a void *; we store it bytewise into a function pointer. */
_Static_assert(sizeof(void *) == sizeof(cuda_Init_fn), "function pointers are not void *-sized");
/* kvslab's 64-bit names for device addresses and chunk handles pass unchanged. */
_Static_assert(sizeof(CUdeviceptr) == sizeof(kvs_devptr_t), "CUdeviceptr is not 64 bits");
_Static_assert(sizeof(CUmemGenericAllocationHandle) == sizeof(uint64_t),
	       "CUmemGenericAllocationHandle is not 64 bits");

/* What cuda_bind() last made current on this thread; see the essay above. */
struct cuda_binding {
	const void *lib;
	CUcontext ctx;
	unsigned long epoch;
};

static __thread struct cuda_binding cuda_bound;

/* Bumped on every primary-context release; starts above any cached zero. */
static _Atomic unsigned long cuda_epoch = 1;

/**
 * cuda_errno() - the errno that stands for a CUresult.
 * @r: what the driver returned.
 *
 * Context: Any.
 * Return: 0 for CUDA_SUCCESS, else a positive errno value.
 */
static int cuda_errno(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
		return EINVAL;
	/*
	 * The driver does not know a stream, event or handle we passed.  The
	 * generic layer only passes live objects, so this is a stale object,
	 * the same class of mistake the driver reports as INVALID_VALUE for a
	 * released memory handle: one errno for both.
	 */
	case CUDA_ERROR_INVALID_HANDLE:
		return EINVAL;
	/*
	 * Seen only after CU_RETRY() bound our context for real and tried
	 * again, so the retained primary context itself is unusable (reset by
	 * cudaDeviceReset() or cuDevicePrimaryCtxReset() behind our back).
	 * Nothing the caller passed is wrong and retrying will not help: the
	 * driver instance has lost its device.
	 */
	case CUDA_ERROR_INVALID_CONTEXT:
		return ENODEV;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_STUB_LIBRARY:
	case CUDA_ERROR_INVALID_DEVICE:
	/* The driver is shutting down (process exit): no device any more. */
	case CUDA_ERROR_DEINITIALIZED:
	/* cuInit's ways of saying this driver cannot run this machine's GPUs. */
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
	case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
		return ENODEV;
	case CUDA_ERROR_NOT_SUPPORTED:
		return ENOTSUP;
	case CUDA_ERROR_NOT_PERMITTED:
		return EPERM;
	/* Sticky: the context is dead; only a new process helps. */
	case CUDA_ERROR_ILLEGAL_ADDRESS:
		return EFAULT;
	default:
		return EIO;
	}
}

/**
 * cuda_note() - record "call: CUDA_ERROR_NAME" as the driver's detail.
 * @drv: the driver.
 * @p: its private state (only the function table is used).
 * @r: the failing result.
 * @call: the driver function that returned @r.
 *
 * Context: Any.
 * Return: the errno for @r; errno itself is not touched.
 */
static int cuda_note(struct kvs_drv *drv, const struct cuda_priv *p, CUresult r,
		     const char *call)
{
	const char *name = NULL;
	int err = cuda_errno(r);

	if (!p->cu.GetErrorName || p->cu.GetErrorName(r, &name) != CUDA_SUCCESS)
		name = NULL;
	if (name)
		kvsi_drv_set_detail(drv, "%s: %s", call, name);
	else
		kvsi_drv_set_detail(drv, "%s: CUresult %d", call, (int)r);
	return err;
}

/* Record the detail for @r, set errno, return -1. */
static int cuda_fail(struct kvs_drv *drv, const struct cuda_priv *p, CUresult r,
		     const char *call)
{
	int err = cuda_note(drv, p, r, call);

	errno = err;
	return -1;
}

/* cuda_fail() for drv/cuda_kern.c. */
int kvsi_cuda_fail(struct kvs_drv *drv, const struct cuda_priv *p, CUresult r, const char *call)
{
	return cuda_fail(drv, p, r, call);
}

/* 0 on CUDA_SUCCESS, else cuda_fail(). */
static inline int cuda_result(struct kvs_drv *drv, const struct cuda_priv *p, CUresult r,
			      const char *call)
{
	return r == CUDA_SUCCESS ? 0 : cuda_fail(drv, p, r, call);
}

/**
 * cuda_bind_slow() - make @p's context current on this thread and cache it.
 * @p: the driver's private state.
 * @check: ask the driver what is current first and skip the set if it is ours.
 *
 * The epoch is read before binding: a release racing with us can only make
 * the cache look older than it is, which costs one more bind, never one less.
 *
 * Context: Any thread.
 * Return: the CUresult of cuCtxGetCurrent or cuCtxSetCurrent.  On failure the
 * cache is cleared, so the next call binds again.
 */
static CUresult cuda_bind_slow(struct cuda_priv *p, int check)
{
	unsigned long epoch = atomic_load_explicit(&cuda_epoch, memory_order_relaxed);
	CUcontext cur = NULL;
	CUresult r = CUDA_SUCCESS;

	if (check)
		r = p->cu.CtxGetCurrent(&cur);
	if (r == CUDA_SUCCESS && cur != p->ctx)
		r = p->cu.CtxSetCurrent(p->ctx);
	if (r != CUDA_SUCCESS) {
		cuda_bound.ctx = NULL;
		return r;
	}
	cuda_bound.lib = p->lib;
	cuda_bound.ctx = p->ctx;
	cuda_bound.epoch = epoch;
	return CUDA_SUCCESS;
}

/**
 * cuda_bind() - make sure @drv's primary context is current on this thread.
 * @drv: the driver.
 * @p: its private state.
 *
 * Every operation starts here.  The thread-local cache makes the common case
 * free of driver calls; see "Contexts and threads" at the top of the file.
 *
 * Context: Any thread.
 * Return: 0, or -1 with errno and a detail when cuCtxSetCurrent failed.
 */
static inline int cuda_bind(struct kvs_drv *drv, struct cuda_priv *p)
{
	CUresult r;

	if (__builtin_expect(cuda_bound.ctx == p->ctx && cuda_bound.lib == p->lib &&
			     cuda_bound.epoch ==
			     atomic_load_explicit(&cuda_epoch, memory_order_relaxed), 1))
		return 0;
	r = cuda_bind_slow(p, 0);
	return cuda_result(drv, p, r, "cuCtxSetCurrent");
}

/**
 * cuda_bind_strict() - like cuda_bind(), but ask the driver, not the cache.
 * @drv: the driver.
 * @p: its private state.
 *
 * For calls that act on "the current context" as a whole, where a context
 * switched by the application behind the cache would silently act on the
 * wrong device instead of failing.
 *
 * Context: Any thread.
 * Return: 0, or -1 with errno and a detail.
 */
static int cuda_bind_strict(struct kvs_drv *drv, struct cuda_priv *p)
{
	CUresult r = cuda_bind_slow(p, 1);

	return cuda_result(drv, p, r, "cuCtxSetCurrent");
}

/*
 * CU_RETRY(p, call) - evaluate @call (a CUresult expression) and, if the
 * driver says no context is current, bind @p's for real and evaluate it once
 * more.  INVALID_CONTEXT means the call did nothing, so repeating it is safe;
 * it happens when the application unbound or reset this thread's context
 * after cuda_bind() cached it.
 */
#define CU_RETRY(p, call)							\
	({									\
		CUresult r_ = (call);						\
		if (r_ == CUDA_ERROR_INVALID_CONTEXT &&				\
		    cuda_bind_slow((p), 0) == CUDA_SUCCESS)			\
			r_ = (call);						\
		r_;								\
	})

/*
 * CU_CALL(drv, p, call, name) - the whole of most backend calls: bind @p's
 * context (cuda_bind()), evaluate @call with CU_RETRY(), and give 0, or -1
 * with errno and @drv's detail naming @name (cuda_result()).
 */
#define CU_CALL(drv, p, call, name)						\
	(cuda_bind((drv), (p)) < 0 ? -1 : cuda_result((drv), (p), CU_RETRY((p), call), (name)))

/**
 * cuda_load() - dlopen libcuda and resolve every function of CUDA_FNS().
 * @cu: filled with the function pointers; optional ones the library lacks
 *      are left as they were (NULL: callers zero @cu).
 * @path: set to the library tried.
 * @missing: set to the first symbol not found, or NULL.
 * @why: set to dlerror()'s text (or a fallback) when dlopen() failed.
 *
 * Context: Any; touches no CUDA state.
 * Return: the dlopen() handle, or NULL on failure (nothing is left open).
 */
static void *cuda_load(struct cuda_fns *cu, const char **path, const char **missing,
		       const char **why)
{
	const char *name = secure_getenv("KVSLAB_LIBCUDA");
	void *lib;
	size_t i;

	if (!name || !*name)
		name = CUDA_LIBNAME;
	*path = name;
	*missing = NULL;
	*why = NULL;
	lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		*why = dlerror();
		if (!*why)
			*why = "cannot load";
		return NULL;
	}
	for (i = 0; i < sizeof(cuda_syms) / sizeof(cuda_syms[0]); i++) {
		void *sym = dlsym(lib, cuda_syms[i].name);

		/* No driver function lives at address 0: NULL is "not found". */
		if (!sym && cuda_syms[i].optional)
			continue;
		if (!sym) {
			*missing = cuda_syms[i].name;
			dlclose(lib);
			return NULL;
		}
		memcpy((char *)cu + cuda_syms[i].off, &sym, sizeof(sym));
	}
	return lib;
}

/**
 * cuda_open() - load the driver and set up one device.
 * @drv: the new driver; its generic part is initialised.
 * @attr: open attributes; @attr->device is used (and drv->flags, for
 *        KVS_DRV_F_RDMA).
 *
 * Retains the device's primary context, makes it current on the calling
 * thread, creates the copy stream and queries the MINIMUM granularity of the
 * exact allocation properties cuMemCreate will use.  On failure everything
 * acquired is given back in reverse order, and the calling thread's previous
 * current context is restored.
 *
 * Context: Any thread.
 * Return: 0 with drv->priv, drv->granularity and drv->caps set; -1 with errno ENODEV
 * (no library, a library without a needed symbol, no device, device out of
 * range, a stub or uninitialisable driver), ENOTSUP (the device has no VMM, or no RDMA
 * with VMM and KVS_DRV_F_RDMA was asked for),
 * ENOMEM, or the errno of the failing call (see cuda_errno()).
 */
static int cuda_open(struct kvs_drv *drv, const kvs_drv_attr_t *attr)
{
	struct cuda_priv *p;
	const char *path, *missing, *why;
	CUcontext prev = NULL;
	int count = 0, vmm = 0, rdma = 0, err;
	CUresult r;

	p = calloc(1, sizeof(*p));
	if (!p) {
		kvsi_drv_set_detail(drv, "cuda: out of memory");
		errno = ENOMEM;
		return -1;
	}
	p->ordinal = attr->device;
	pthread_mutex_init(&p->pins.lock, NULL);

	p->lib = cuda_load(&p->cu, &path, &missing, &why);
	if (!p->lib) {
		if (missing)
			kvsi_drv_set_detail(drv, "dlsym %s: symbol not found in %s", missing, path);
		else
			kvsi_drv_set_detail(drv, "libcuda not loadable: dlopen: %s", why);
		err = ENODEV;
		goto out_free;
	}

	r = p->cu.Init(0);
	if (r != CUDA_SUCCESS) {
		err = cuda_note(drv, p, r, "cuInit");
		goto out_dlclose;
	}
	r = p->cu.DeviceGetCount(&count);
	if (r != CUDA_SUCCESS) {
		err = cuda_note(drv, p, r, "cuDeviceGetCount");
		goto out_dlclose;
	}
	if (count == 0) {
		kvsi_drv_set_detail(drv, "cuDeviceGetCount: no CUDA device");
		err = ENODEV;
		goto out_dlclose;
	}
	if (p->ordinal < 0 || p->ordinal >= count) {
		kvsi_drv_set_detail(drv, "cuDeviceGetCount: device %d requested, %d present",
				   p->ordinal, count);
		err = ENODEV;
		goto out_dlclose;
	}
	r = p->cu.DeviceGet(&p->dev, p->ordinal);
	if (r != CUDA_SUCCESS) {
		err = cuda_note(drv, p, r, "cuDeviceGet");
		goto out_dlclose;
	}
	r = p->cu.DeviceGetAttribute(&vmm,
				     CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
				     p->dev);
	if (r != CUDA_SUCCESS) {
		err = cuda_note(drv, p, r, "cuDeviceGetAttribute");
		goto out_dlclose;
	}
	if (!vmm) {
		kvsi_drv_set_detail(drv, "cuDeviceGetAttribute: device %d has no virtual "
				   "memory management", p->ordinal);
		err = ENOTSUP;
		goto out_dlclose;
	}
	/* A driver too old to know attribute 110 rejects it: read that as 0. */
	if (p->cu.DeviceGetAttribute(&rdma,
				     CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
				     p->dev) != CUDA_SUCCESS)
		rdma = 0;

	r = p->cu.DevicePrimaryCtxRetain(&p->ctx, p->dev);
	if (r != CUDA_SUCCESS) {
		err = cuda_note(drv, p, r, "cuDevicePrimaryCtxRetain");
		goto out_dlclose;
	}
	r = p->cu.CtxGetCurrent(&prev);
	if (r != CUDA_SUCCESS) {
		err = cuda_note(drv, p, r, "cuCtxGetCurrent");
		goto out_release;
	}
	r = cuda_bind_slow(p, 0);
	if (r != CUDA_SUCCESS) {
		err = cuda_note(drv, p, r, "cuCtxSetCurrent");
		goto out_unbind;
	}

	r = p->cu.StreamCreate(&p->stream, CU_STREAM_NON_BLOCKING);
	if (r != CUDA_SUCCESS) {
		err = cuda_note(drv, p, r, "cuStreamCreate");
		goto out_unbind;
	}

	/* Exactly what cuda_create() passes to cuMemCreate (CUDA-VMM.md 3). */
	memset(&p->prop, 0, sizeof(p->prop));
	p->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->prop.location.id = p->ordinal;
	/* Opt-in: an RDMA-capable chunk costs more to create and map (the
	 * H200 map overhead of GPU-MEASURED.md), and only a NIC reading KV
	 * memory directly needs it. */
	if (drv->flags & KVS_DRV_F_RDMA) {
		if (!rdma) {
			kvsi_drv_set_detail(drv, "cuDeviceGetAttribute: device %d has no "
					   "GPUDirect RDMA with VMM", p->ordinal);
			err = ENOTSUP;
			goto out_stream;
		}
		p->prop.allocFlags.gpuDirectRDMACapable = 1;
	}
	r = p->cu.MemGetAllocationGranularity(&p->gran, &p->prop,
					      CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != CUDA_SUCCESS) {
		err = cuda_note(drv, p, r, "cuMemGetAllocationGranularity");
		goto out_stream;
	}
	/* It is our reservation alignment, which must be a power of two. */
	if (!p->gran || (p->gran & (p->gran - 1))) {
		kvsi_drv_set_detail(drv, "cuMemGetAllocationGranularity: %zu is not a "
				   "power of two", p->gran);
		err = EIO;
		goto out_stream;
	}

	drv->priv = p;
	drv->granularity = p->gran;
	drv->caps = KVS_DRV_CAP_DTOD | KVS_DRV_CAP_STREAM_WAIT;
	if (p->cu.MemcpyBatchAsync)
		drv->caps |= KVS_DRV_CAP_BATCH;
	if (!(drv->flags & KVS_DRV_F_NO_KERNELS))
		kvsi_cuda_kern_open(drv, p);
	if (p->kern.fn)
		drv->caps |= KVS_DRV_CAP_KERNELS;
	return 0;

out_stream:
	p->cu.StreamDestroy(p->stream);
out_unbind:
	p->cu.CtxSetCurrent(prev);
	cuda_bound.ctx = NULL;
out_release:
	p->cu.DevicePrimaryCtxRelease(p->dev);
	atomic_fetch_add_explicit(&cuda_epoch, 1, memory_order_relaxed);
out_dlclose:
	dlclose(p->lib);
out_free:
	pthread_mutex_destroy(&p->pins.lock);
	free(p);
	errno = err;
	return -1;
}

/**
 * cuda_close() - give back what cuda_open() acquired.
 * @drv: the driver; the generic layer has unmapped and released everything.
 *
 * Waits for the copy stream first so that no copy is still writing a host
 * buffer when close returns.  The primary context stays current on the
 * threads that used it (it may have been reset by our release if we held the
 * last reference); the epoch bump makes every thread bind afresh next time.
 *
 * Context: Any thread; no other call on @drv may be running or follow.
 */
static void cuda_close(struct kvs_drv *drv)
{
	struct cuda_priv *p = drv->priv;

	if (!p)
		return;
	/* Errors here have nobody to go to; release what we can regardless. */
	if (cuda_bind(drv, p) == 0)
		p->cu.StreamSynchronize(p->stream);
	kvsi_cuda_kern_close(p);
	p->cu.StreamDestroy(p->stream);
	p->cu.DevicePrimaryCtxRelease(p->dev);
	atomic_fetch_add_explicit(&cuda_epoch, 1, memory_order_relaxed);
	cuda_bound.ctx = NULL;
	dlclose(p->lib);
	free(p->batch.dst);
	free(p->batch.src);
	free(p->batch.size);
	pthread_mutex_destroy(&p->pins.lock);
	free(p);
	drv->priv = NULL;
}

/**
 * cuda_mem_info() - free and total memory of the device.
 * @drv: the driver.
 * @free_bytes: set to the driver's (racy) estimate of free memory.
 * @total_bytes: set to the device's memory.
 *
 * cuMemGetInfo reports on the current context's device, so the binding is
 * checked with the driver rather than trusted from the cache.
 *
 * Context: Any thread.
 * Return: 0, or -1 with errno.
 */
static int cuda_mem_info(struct kvs_drv *drv, size_t *free_bytes, size_t *total_bytes)
{
	struct cuda_priv *p = drv->priv;
	CUresult r;

	if (cuda_bind_strict(drv, p) < 0)
		return -1;
	r = CU_RETRY(p, p->cu.MemGetInfo(free_bytes, total_bytes));
	return cuda_result(drv, p, r, "cuMemGetInfo");
}

/**
 * cuda_reserve() - reserve a granularity-aligned device address range.
 * @drv: the driver.
 * @size: bytes, a multiple of the granularity.
 * @base: set to the start of the range.
 *
 * The alignment is asked for and then checked: the mapping code relies on
 * granule-aligned bases, and a driver that ignored the request gets its
 * range back rather than a silent misalignment.
 *
 * Context: Any thread.
 * Return: 0, or -1 with errno (EIO for a misaligned base).
 */
static int cuda_reserve(struct kvs_drv *drv, size_t size, kvs_devptr_t *base)
{
	struct cuda_priv *p = drv->priv;
	CUdeviceptr ptr = 0;
	CUresult r;

	if (cuda_bind(drv, p) < 0)
		return -1;
	r = CU_RETRY(p, p->cu.MemAddressReserve(&ptr, size, p->gran, 0, 0));
	if (r != CUDA_SUCCESS)
		return cuda_fail(drv, p, r, "cuMemAddressReserve");
	if (ptr & (p->gran - 1)) {
		p->cu.MemAddressFree(ptr, size);
		kvsi_drv_set_detail(drv, "cuMemAddressReserve: base 0x%llx not aligned to %zu",
				   (unsigned long long)ptr, p->gran);
		errno = EIO;
		return -1;
	}
	*base = ptr;
	return 0;
}

static int cuda_unreserve(struct kvs_drv *drv, kvs_devptr_t base, size_t size)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.MemAddressFree(base, size), "cuMemAddressFree");
}

static int cuda_create(struct kvs_drv *drv, size_t size, uint64_t *handle)
{
	struct cuda_priv *p = drv->priv;
	CUmemGenericAllocationHandle h = 0;
	CUresult r;

	if (cuda_bind(drv, p) < 0)
		return -1;
	r = CU_RETRY(p, p->cu.MemCreate(&h, size, &p->prop, 0));
	if (r != CUDA_SUCCESS)
		return cuda_fail(drv, p, r, "cuMemCreate");
	*handle = h;
	return 0;
}

static int cuda_release(struct kvs_drv *drv, uint64_t handle)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.MemRelease(handle), "cuMemRelease");
}

static int cuda_map(struct kvs_drv *drv, kvs_devptr_t addr, size_t size, uint64_t handle)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.MemMap(addr, size, 0, handle, 0), "cuMemMap");
}

/**
 * cuda_quiesce() - wait for the last use by us of memory about to be unmapped.
 * @drv: the driver.
 *
 * Called by the generic layer before cuda_unmap(), with no lock held.
 * With KVS_DRV_F_SYNC_UNMAP the whole context is synchronized first, for
 * callers that cannot name the last use of the range.  The copy stream is
 * synchronized in every case (see the essay).  When a synchronization fails
 * (usually a sticky error from earlier work) nothing is unmapped: we cannot
 * tell that the range is idle, and a failed call must leave the mapping as
 * the generic layer believes it is.
 *
 * Context: Any thread.  Blocks until the copy stream (or the device) is idle.
 * Return: 0, or -1 with errno.
 */
static int cuda_quiesce(struct kvs_drv *drv)
{
	struct cuda_priv *p = drv->priv;
	CUresult r;

	if (drv->flags & KVS_DRV_F_SYNC_UNMAP) {
		if (cuda_bind_strict(drv, p) < 0)
			return -1;
		r = CU_RETRY(p, p->cu.CtxSynchronize());
		if (r != CUDA_SUCCESS)
			return cuda_fail(drv, p, r, "cuCtxSynchronize");
	} else if (cuda_bind(drv, p) < 0) {
		return -1;
	}
	r = CU_RETRY(p, p->cu.StreamSynchronize(p->stream));
	return cuda_result(drv, p, r, "cuStreamSynchronize");
}

/* cuda_quiesce() ran first, without the driver lock (drv.c's rule). */
static int cuda_unmap(struct kvs_drv *drv, kvs_devptr_t addr, size_t size)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.MemUnmap(addr, size), "cuMemUnmap");
}

/**
 * cuda_set_access() - set this device's access to a fully mapped range.
 * @drv: the driver.
 * @addr: start of the range.
 * @size: bytes.
 * @access: KVS_ACCESS_NONE, KVS_ACCESS_READ or KVS_ACCESS_RW.
 *
 * Context: Any thread.
 * Return: 0, or -1 with errno.
 */
static int cuda_set_access(struct kvs_drv *drv, kvs_devptr_t addr, size_t size, int access)
{
	struct cuda_priv *p = drv->priv;
	CUmemAccessDesc desc;

	memset(&desc, 0, sizeof(desc));
	desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	desc.location.id = p->ordinal;
	switch (access) {
	case KVS_ACCESS_NONE:
		desc.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
		break;
	case KVS_ACCESS_READ:
		desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
		break;
	case KVS_ACCESS_RW:
		desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		break;
	default:
		kvsi_drv_set_detail(drv, "cuMemSetAccess: unknown access %d", access);
		errno = EINVAL;
		return -1;
	}
	return CU_CALL(drv, p, p->cu.MemSetAccess(addr, size, &desc, 1), "cuMemSetAccess");
}

static int cuda_copy_htod(struct kvs_drv *drv, kvs_devptr_t dst, const void *src, size_t n)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.MemcpyHtoDAsync(dst, src, n, p->stream), "cuMemcpyHtoDAsync");
}

static int cuda_copy_dtoh(struct kvs_drv *drv, void *dst, kvs_devptr_t src, size_t n)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.MemcpyDtoHAsync(dst, src, n, p->stream), "cuMemcpyDtoHAsync");
}

/* Unified addressing: cuMemcpyAsync copies device to device by address. */
static int cuda_copy_dtod(struct kvs_drv *drv, kvs_devptr_t dst, kvs_devptr_t src, size_t n)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.MemcpyAsync(dst, src, n, p->stream), "cuMemcpyAsync");
}

/* One checked copy of direction @kind on the copy stream (no binding). */
static CUresult cuda_copy_one(struct cuda_priv *p, int kind, const kvs_copy_t *c)
{
	switch (kind) {
	case KVS_COPY_HTOD:
		return p->cu.MemcpyHtoDAsync(c->dst, (const void *)(uintptr_t)c->src, c->bytes,
					     p->stream);
	case KVS_COPY_DTOH:
		return p->cu.MemcpyDtoHAsync((void *)(uintptr_t)c->dst, c->src, c->bytes,
					     p->stream);
	default:
		return p->cu.MemcpyAsync(c->dst, c->src, c->bytes, p->stream);
	}
}

/* Room for @n entries in the batch arrays.  drv->lock held. */
static int cuda_batch_room(struct cuda_batch *b, size_t n)
{
	size_t cap = b->cap ? b->cap : 64;
	void *d, *s, *z;

	if (n <= b->cap)
		return 0;
	while (cap < n)
		cap = cap > SIZE_MAX / 2 / sizeof(CUdeviceptr) ? n : 2 * cap;
	d = realloc(b->dst, cap * sizeof(*b->dst));
	if (d)
		b->dst = d;
	s = d ? realloc(b->src, cap * sizeof(*b->src)) : NULL;
	if (s)
		b->src = s;
	z = s ? realloc(b->size, cap * sizeof(*b->size)) : NULL;
	if (!z)
		return -1;	/* what did grow is kept; cap is the old one */
	b->size = z;
	b->cap = cap;
	return 0;
}

/**
 * cuda_copy_batch() - @n copies of one direction in one submission.
 * @drv: the driver.
 * @kind: KVS_COPY_HTOD, KVS_COPY_DTOH or KVS_COPY_DTOD.
 * @c: the entries, checked by the generic layer.
 * @n: entries, at least 1.
 *
 * With cuMemcpyBatchAsync (KVS_DRV_CAP_BATCH): one call on the copy stream,
 * one attribute set for all (sources in stream order, so a batch after a
 * kvs_drv_stream_wait() reads what the engine wrote).  Host pointers go
 * as they are: under unified addressing the driver tells them from device
 * ones.  Without it: the copies one by one; if one fails after others were
 * queued, the stream is synchronized before returning, so that nothing of
 * the batch still runs when the caller hears of the failure.
 *
 * Context: drv->lock held (it guards the batch arrays).
 * Return: 0, or -1 with errno (ENOMEM: no room for the arrays).
 */
static int cuda_copy_batch(struct kvs_drv *drv, int kind, const kvs_copy_t *c, size_t n)
{
	struct cuda_priv *p = drv->priv;
	struct cuda_batch *b = &p->batch;
	CUmemcpyAttributes attr;
	size_t idx = 0, i;
	CUresult r = CUDA_SUCCESS;
	int kr;

	if (cuda_bind(drv, p) < 0)
		return -1;
	kr = kvsi_cuda_kern_batch(drv, p, kind, c, n);
	if (kr)
		return kr > 0 ? 0 : -1;
	if (!p->cu.MemcpyBatchAsync) {
		for (i = 0; i < n && r == CUDA_SUCCESS; i++)
			r = CU_RETRY(p, cuda_copy_one(p, kind, &c[i]));
		if (r != CUDA_SUCCESS && i > 1) {
			int err = cuda_note(drv, p, r, "cuMemcpyAsync");

			(void)p->cu.StreamSynchronize(p->stream);
			errno = err;
			return -1;
		}
		return cuda_result(drv, p, r, "cuMemcpyAsync");
	}
	if (cuda_batch_room(b, n) < 0) {
		kvsi_drv_set_detail(drv, "cuMemcpyBatchAsync: no memory for %zu entries", n);
		errno = ENOMEM;
		return -1;
	}
	for (i = 0; i < n; i++) {
		b->dst[i] = c[i].dst;
		b->src[i] = c[i].src;
		b->size[i] = c[i].bytes;
	}
	memset(&attr, 0, sizeof(attr));
	attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	r = CU_RETRY(p, p->cu.MemcpyBatchAsync(b->dst, b->src, b->size, n, &attr, &idx, 1,
					       p->stream));
	return cuda_result(drv, p, r, "cuMemcpyBatchAsync");
}

/*
 * Events are CUevents stored directly in the void * (CUevent is a pointer).
 * Timing is disabled: we only ask "done yet?", and untimed events are cheaper.
 */
static int cuda_event_create(struct kvs_drv *drv, void **bev)
{
	struct cuda_priv *p = drv->priv;
	CUevent ev = NULL;
	CUresult r;

	if (cuda_bind(drv, p) < 0)
		return -1;
	r = CU_RETRY(p, p->cu.EventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	if (r != CUDA_SUCCESS)
		return cuda_fail(drv, p, r, "cuEventCreate");
	*bev = ev;
	return 0;
}

static void cuda_event_destroy(struct kvs_drv *drv, void *bev)
{
	struct cuda_priv *p = drv->priv;

	if (cuda_bind(drv, p) < 0)
		return;
	(void)CU_RETRY(p, p->cu.EventDestroy((CUevent)bev));
}

static int cuda_event_record(struct kvs_drv *drv, void *bev)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.EventRecord((CUevent)bev, p->stream), "cuEventRecord");
}

/* After all work submitted so far on the engine's @stream (0: legacy). */
static int cuda_event_record_stream(struct kvs_drv *drv, void *bev, uint64_t stream)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.EventRecord((CUevent)bev, (CUstream)(uintptr_t)stream),
		       "cuEventRecord");
}

/**
 * cuda_event_query() - has the copy queue reached the event?
 * @drv: the driver.
 * @bev: the CUevent.
 *
 * Context: Any thread; never blocks.
 * Return: 1 complete (also before any record), 0 pending, -1 with errno when
 * the driver reports an error, typically a sticky one from an earlier copy.
 */
static int cuda_event_query(struct kvs_drv *drv, void *bev)
{
	struct cuda_priv *p = drv->priv;
	CUresult r;

	if (cuda_bind(drv, p) < 0)
		return -1;
	r = CU_RETRY(p, p->cu.EventQuery((CUevent)bev));
	if (r == CUDA_SUCCESS)
		return 1;
	if (r == CUDA_ERROR_NOT_READY)
		return 0;
	return cuda_fail(drv, p, r, "cuEventQuery");
}

/* Copies submitted after this wait on the device for @bev (an engine's). */
static int cuda_stream_wait(struct kvs_drv *drv, void *bev)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.StreamWaitEvent(p->stream, (CUevent)bev, 0),
		       "cuStreamWaitEvent");
}

/* The engine's @stream waits on the device for @bev.  An unknown stream is
 * undefined behaviour, as in CUDA (the driver crashes). */
static int cuda_event_stream_wait(struct kvs_drv *drv, void *bev, uint64_t stream)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p,
		       p->cu.StreamWaitEvent((CUstream)(uintptr_t)stream, (CUevent)bev, 0),
		       "cuStreamWaitEvent");
}

static int cuda_event_wait(struct kvs_drv *drv, void *bev)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.EventSynchronize((CUevent)bev), "cuEventSynchronize");
}

static int cuda_synchronize(struct kvs_drv *drv)
{
	struct cuda_priv *p = drv->priv;

	return CU_CALL(drv, p, p->cu.StreamSynchronize(p->stream), "cuStreamSynchronize");
}

/*
 * Pinned and PORTABLE: usable for async copies from any context; and
 * DEVICEMAP, so that the gather/scatter kernel can reach it (the block is
 * remembered with its device address for that: drv/cuda_kern.c).
 */
static int cuda_host_alloc(struct kvs_drv *drv, size_t size, void **ptr)
{
	struct cuda_priv *p = drv->priv;
	void *mem = NULL;
	CUresult r;

	if (cuda_bind(drv, p) < 0)
		return -1;
	r = CU_RETRY(p, p->cu.MemHostAlloc(&mem, size,
					   CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
	if (r != CUDA_SUCCESS)
		return cuda_fail(drv, p, r, "cuMemHostAlloc");
	kvsi_cuda_pin_add(p, mem, size);
	*ptr = mem;
	return 0;
}

static int cuda_host_free(struct kvs_drv *drv, void *ptr)
{
	struct cuda_priv *p = drv->priv;

	kvsi_cuda_pin_remove(p, ptr);
	return CU_CALL(drv, p, p->cu.MemFreeHost(ptr), "cuMemFreeHost");
}


/**
 * cuda_probe() - is there a device the cuda backend could open?
 *
 * Loads the library exactly as cuda_open() does (so a library missing any
 * needed symbol counts as absent), initialises the driver and looks for a
 * device with virtual memory management.  Any device qualifies: the probe
 * does not know which ordinal the caller will open, and cuda_open() reports
 * ENOTSUP for a specific device without VMM.
 *
 * Nothing is kept: no context is retained (cuDeviceGetAttribute needs none)
 * and the dlopen() handle is closed again.  cuInit() cannot be undone, so the
 * driver stays initialised, and libcuda normally stays resident after
 * dlclose(); a later open finds it already loaded.  The result is not cached,
 * so $KVSLAB_LIBCUDA is honoured on every call.
 *
 * Context: Any thread.  errno is preserved.
 * Return: 1 if a VMM-capable device is present, else 0.
 */
static int cuda_probe(void)
{
	int saved_errno = errno;
	struct cuda_fns cu;
	const char *path, *missing, *why;
	int count = 0, found = 0, i;
	void *lib;

	memset(&cu, 0, sizeof(cu));
	lib = cuda_load(&cu, &path, &missing, &why);
	if (!lib)
		goto out;
	if (cu.Init(0) != CUDA_SUCCESS || cu.DeviceGetCount(&count) != CUDA_SUCCESS)
		goto out_dlclose;
	for (i = 0; i < count && !found; i++) {
		CUdevice dev;
		int vmm = 0;

		if (cu.DeviceGet(&dev, i) != CUDA_SUCCESS)
			continue;
		if (cu.DeviceGetAttribute(&vmm,
					  CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
					  dev) == CUDA_SUCCESS && vmm)
			found = 1;
	}
out_dlclose:
	dlclose(lib);
out:
	errno = saved_errno;
	return found;
}

const struct kvs_drv_backend kvsi_backend_cuda = {
	.name = "cuda",
	.probe = cuda_probe,
	.quiesce = cuda_quiesce,
	.copy_batch = cuda_copy_batch,
	.stream_wait = cuda_stream_wait,
	.event_stream_wait = cuda_event_stream_wait,
	KVSI_DRV_BACKEND_OPS(cuda)
};
