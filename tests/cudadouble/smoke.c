/* SPDX-License-Identifier: MIT */
/*
 * tests/cudadouble/smoke.c - a standalone check of the CUDA driver double.
 *
 * Not part of the build.  It loads the double the way kvslab's cuda backend
 * does (dlopen + dlsym of the ABI names), walks the happy path of
 * CUDA-VMM.md (reserve, create, map, set access, copy, unmap, release, free)
 * and then every row of the misuse table, checking each code and that a
 * failing call changed nothing.  Configuration errors and the no-device mode
 * need a fresh cuInit, so they run in forked children before the library is
 * loaded in the parent.  So does the asynchronous model (child_async):
 * simulated kernels, events and stream order, the legacy stream, copies in
 * stream order, the sticky fault of unmapping under a running kernel, and
 * a kernel thread racing a mapping thread; a fault there must not leak into
 * the other checks.  It takes a few seconds of sleeping.
 *
 *   gcc -std=gnu11 -Wall -Wextra -fPIC -shared -I/usr/local/cuda/include \
 *       -o /tmp/libcuda-double.so libcuda.c -lpthread
 *   gcc -std=gnu11 -Wall -Wextra -I/usr/local/cuda/include -o /tmp/smoke \
 *       smoke.c -ldl -lpthread
 *   valgrind --leak-check=full --error-exitcode=1 /tmp/smoke /tmp/libcuda-double.so
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)							\
	do {								\
		if (!(cond)) {						\
			fprintf(stderr, "%s:%d: FAILED: %s\n",		\
				__FILE__, __LINE__, #cond);		\
			failures++;					\
		}							\
	} while (0)

#define EXPECT(call, code)						\
	do {								\
		CUresult r_ = (call);					\
		if (r_ != (code)) {					\
			fprintf(stderr, "%s:%d: %s = %d, want %d\n",	\
				__FILE__, __LINE__, #call, (int)r_,	\
				(int)(code));				\
			failures++;					\
		}							\
	} while (0)

#define OK(call) EXPECT(call, CUDA_SUCCESS)

static void *lib;

/* Prefixed, since cuda.h declares the real prototypes under the plain names. */
#define FN(name, pfn) static pfn p_##name
FN(cuInit, PFN_cuInit_v2000);
FN(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020);
FN(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000);
FN(cuDeviceGet, PFN_cuDeviceGet_v2000);
FN(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000);
FN(cuDeviceGetName, PFN_cuDeviceGetName_v2000);
FN(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000);
FN(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000);
FN(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000);
FN(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000);
FN(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000);
FN(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020);
FN(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020);
FN(cuMemAddressFree, PFN_cuMemAddressFree_v10020);
FN(cuMemCreate, PFN_cuMemCreate_v10020);
FN(cuMemRelease, PFN_cuMemRelease_v10020);
FN(cuMemMap, PFN_cuMemMap_v10020);
FN(cuMemUnmap, PFN_cuMemUnmap_v10020);
FN(cuMemSetAccess, PFN_cuMemSetAccess_v10020);
FN(cuMemGetAccess, PFN_cuMemGetAccess_v10020);
FN(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000);
FN(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020);
FN(cuMemHostAlloc, PFN_cuMemHostAlloc_v2020);
FN(cuMemAllocHost_v2, PFN_cuMemAllocHost_v3020);
FN(cuMemFreeHost, PFN_cuMemFreeHost_v2000);
FN(cuMemcpyHtoDAsync_v2, PFN_cuMemcpyHtoDAsync_v3020);
FN(cuMemcpyDtoHAsync_v2, PFN_cuMemcpyDtoHAsync_v3020);
FN(cuMemcpyAsync, PFN_cuMemcpyAsync_v4000);
FN(cuStreamCreate, PFN_cuStreamCreate_v2000);
FN(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000);
FN(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000);
FN(cuEventCreate, PFN_cuEventCreate_v2000);
FN(cuEventRecord, PFN_cuEventRecord_v2000);
FN(cuEventQuery, PFN_cuEventQuery_v2000);
FN(cuEventSynchronize, PFN_cuEventSynchronize_v2000);
FN(cuEventDestroy_v2, PFN_cuEventDestroy_v4000);
FN(cuGetErrorString, PFN_cuGetErrorString_v6000);
FN(cuGetErrorName, PFN_cuGetErrorName_v6000);
FN(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000);
#undef FN

#define cuInit p_cuInit
#define cuDriverGetVersion p_cuDriverGetVersion
#define cuDeviceGetCount p_cuDeviceGetCount
#define cuDeviceGet p_cuDeviceGet
#define cuDeviceGetAttribute p_cuDeviceGetAttribute
#define cuDeviceGetName p_cuDeviceGetName
#define cuDevicePrimaryCtxRetain p_cuDevicePrimaryCtxRetain
#define cuDevicePrimaryCtxRelease_v2 p_cuDevicePrimaryCtxRelease_v2
#define cuCtxSetCurrent p_cuCtxSetCurrent
#define cuCtxGetCurrent p_cuCtxGetCurrent
#define cuCtxSynchronize p_cuCtxSynchronize
#define cuMemGetAllocationGranularity p_cuMemGetAllocationGranularity
#define cuMemAddressReserve p_cuMemAddressReserve
#define cuMemAddressFree p_cuMemAddressFree
#define cuMemCreate p_cuMemCreate
#define cuMemRelease p_cuMemRelease
#define cuMemMap p_cuMemMap
#define cuMemUnmap p_cuMemUnmap
#define cuMemSetAccess p_cuMemSetAccess
#define cuMemGetAccess p_cuMemGetAccess
#define cuMemRetainAllocationHandle p_cuMemRetainAllocationHandle
#define cuMemGetInfo_v2 p_cuMemGetInfo_v2
#define cuMemHostAlloc p_cuMemHostAlloc
#define cuMemAllocHost_v2 p_cuMemAllocHost_v2
#define cuMemFreeHost p_cuMemFreeHost
#define cuMemcpyHtoDAsync_v2 p_cuMemcpyHtoDAsync_v2
#define cuMemcpyDtoHAsync_v2 p_cuMemcpyDtoHAsync_v2
#define cuMemcpyAsync p_cuMemcpyAsync
#define cuStreamCreate p_cuStreamCreate
#define cuStreamDestroy_v2 p_cuStreamDestroy_v2
#define cuStreamSynchronize p_cuStreamSynchronize
#define cuEventCreate p_cuEventCreate
#define cuEventRecord p_cuEventRecord
#define cuEventQuery p_cuEventQuery
#define cuEventSynchronize p_cuEventSynchronize
#define cuEventDestroy_v2 p_cuEventDestroy_v2
#define cuGetErrorString p_cuGetErrorString
#define cuGetErrorName p_cuGetErrorName
#define cuGetProcAddress_v2 p_cuGetProcAddress_v2

static size_t (*p_kvsdbl_live_handles)(void);
static size_t (*p_kvsdbl_live_reservations)(void);
static size_t (*p_kvsdbl_mapped_bytes)(void);
static size_t (*p_kvsdbl_created_bytes)(void);
static unsigned long (*p_kvsdbl_calls)(const char *);
static int (*p_kvsdbl_last_error)(void);
static CUresult (*p_kvsdbl_kernel)(CUstream, CUdeviceptr, size_t, unsigned long long);
static CUresult (*p_kvsdbl_kernel_write)(CUstream, CUdeviceptr, size_t, unsigned int,
					    unsigned long long);
static int (*p_kvsdbl_sticky_error)(void);
static unsigned long (*p_kvsdbl_faults)(void);
static void (*p_kvsdbl_clear_sticky)(void);
static CUresult (*p_cuCtxSynchronize_v2)(CUcontext);
static CUresult (*p_cuStreamWaitEvent)(CUstream, CUevent, unsigned int);
static CUresult (*p_cuMemcpyBatchAsync_v2)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t,
					   CUmemcpyAttributes *, size_t *, size_t, CUstream);
static unsigned char (*p_kvsdbl_pattern)(unsigned int, size_t);
static CUresult (*p_cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuModuleUnload)(CUmodule);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
				    unsigned int, unsigned int, unsigned int, unsigned int,
				    CUstream, void **, void **);
static CUresult (*p_cuMemHostGetDevicePointer_v2)(CUdeviceptr *, void *, unsigned int);

#define kvsdbl_live_handles p_kvsdbl_live_handles
#define kvsdbl_live_reservations p_kvsdbl_live_reservations
#define kvsdbl_mapped_bytes p_kvsdbl_mapped_bytes
#define kvsdbl_created_bytes p_kvsdbl_created_bytes
#define kvsdbl_calls p_kvsdbl_calls
#define kvsdbl_last_error p_kvsdbl_last_error
#define kvsdbl_kernel p_kvsdbl_kernel
#define kvsdbl_kernel_write p_kvsdbl_kernel_write
#define kvsdbl_sticky_error p_kvsdbl_sticky_error
#define kvsdbl_faults p_kvsdbl_faults
#define kvsdbl_clear_sticky p_kvsdbl_clear_sticky
#define cuCtxSynchronize_v2 p_cuCtxSynchronize_v2
#define cuStreamWaitEvent p_cuStreamWaitEvent
#define cuMemcpyBatchAsync_v2 p_cuMemcpyBatchAsync_v2
#define kvsdbl_pattern p_kvsdbl_pattern
#define cuModuleLoadData p_cuModuleLoadData
#define cuModuleGetFunction p_cuModuleGetFunction
#define cuModuleUnload p_cuModuleUnload
#define cuLaunchKernel p_cuLaunchKernel
#define cuMemHostGetDevicePointer_v2 p_cuMemHostGetDevicePointer_v2

#define LOAD(name)							\
	do {								\
		*(void **)&p_##name = dlsym(lib, #name);		\
		if (!p_##name) {					\
			fprintf(stderr, "missing symbol %s\n", #name);	\
			exit(2);					\
		}							\
	} while (0)

static void load(const char *path)
{
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(2);
	}
	LOAD(cuInit);
	LOAD(cuDriverGetVersion);
	LOAD(cuDeviceGetCount);
	LOAD(cuDeviceGet);
	LOAD(cuDeviceGetAttribute);
	LOAD(cuDeviceGetName);
	LOAD(cuDevicePrimaryCtxRetain);
	LOAD(cuDevicePrimaryCtxRelease_v2);
	LOAD(cuCtxSetCurrent);
	LOAD(cuCtxGetCurrent);
	LOAD(cuCtxSynchronize);
	LOAD(cuMemGetAllocationGranularity);
	LOAD(cuMemAddressReserve);
	LOAD(cuMemAddressFree);
	LOAD(cuMemCreate);
	LOAD(cuMemRelease);
	LOAD(cuMemMap);
	LOAD(cuMemUnmap);
	LOAD(cuMemSetAccess);
	LOAD(cuMemGetAccess);
	LOAD(cuMemRetainAllocationHandle);
	LOAD(cuMemGetInfo_v2);
	LOAD(cuMemHostAlloc);
	LOAD(cuMemAllocHost_v2);
	LOAD(cuMemFreeHost);
	LOAD(cuMemcpyHtoDAsync_v2);
	LOAD(cuMemcpyDtoHAsync_v2);
	LOAD(cuMemcpyAsync);
	LOAD(cuStreamCreate);
	LOAD(cuStreamDestroy_v2);
	LOAD(cuStreamSynchronize);
	LOAD(cuEventCreate);
	LOAD(cuEventRecord);
	LOAD(cuEventQuery);
	LOAD(cuEventSynchronize);
	LOAD(cuEventDestroy_v2);
	LOAD(cuGetErrorString);
	LOAD(cuGetErrorName);
	LOAD(cuGetProcAddress_v2);
	LOAD(kvsdbl_live_handles);
	LOAD(kvsdbl_live_reservations);
	LOAD(kvsdbl_mapped_bytes);
	LOAD(kvsdbl_created_bytes);
	LOAD(kvsdbl_calls);
	LOAD(kvsdbl_last_error);
	LOAD(kvsdbl_kernel);
	LOAD(kvsdbl_kernel_write);
	LOAD(kvsdbl_sticky_error);
	LOAD(kvsdbl_faults);
	LOAD(kvsdbl_clear_sticky);
	LOAD(cuCtxSynchronize_v2);
	LOAD(cuStreamWaitEvent);
	LOAD(cuMemcpyBatchAsync_v2);
	LOAD(kvsdbl_pattern);
	LOAD(cuModuleLoadData);
	LOAD(cuModuleGetFunction);
	LOAD(cuModuleUnload);
	LOAD(cuLaunchKernel);
	LOAD(cuMemHostGetDevicePointer_v2);
}

static CUmemAllocationProp dev_prop(int id)
{
	CUmemAllocationProp prop;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = id;
	return prop;
}

static CUmemAccessDesc access_desc(unsigned long long flags)
{
	CUmemAccessDesc d;

	memset(&d, 0, sizeof(d));
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = 0;
	d.flags = flags;
	return d;
}

static unsigned long long access_at(CUdeviceptr p)
{
	CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 };
	unsigned long long f = 99;

	if (cuMemGetAccess(&f, &loc, p) != CUDA_SUCCESS)
		return 99;
	return f;
}

/* Run fn in a child that loads its own copy of the double. */
static void in_child(const char *path, void (*fn)(void))
{
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		load(path);
		fn();
		dlclose(lib);
		_exit(failures ? 1 : 0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		fprintf(stderr, "child check failed\n");
		failures++;
	}
}

static void child_nodev(void)
{
	int n = -1;
	CUdevice d;

	setenv("KVSLAB_DOUBLE_NODEV", "1", 1);
	EXPECT(cuInit(0), CUDA_ERROR_NO_DEVICE);
	OK(cuDeviceGetCount(&n));
	CHECK(n == 0);
	EXPECT(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK(kvsdbl_last_error() == CUDA_ERROR_NOT_INITIALIZED);
	/* A failed cuInit keeps nothing: fix the environment and retry. */
	unsetenv("KVSLAB_DOUBLE_NODEV");
	OK(cuInit(0));
	OK(cuDeviceGetCount(&n));
	CHECK(n == 1);
	OK(cuDeviceGet(&d, 0));
	/* Set again after a success: hidden from later starters only. */
	setenv("KVSLAB_DOUBLE_NODEV", "1", 1);
	EXPECT(cuInit(0), CUDA_ERROR_NO_DEVICE);
	OK(cuDeviceGetCount(&n));
	CHECK(n == 0);
	EXPECT(cuDeviceGet(&d, 0), CUDA_ERROR_INVALID_DEVICE);
	unsetenv("KVSLAB_DOUBLE_NODEV");
	OK(cuInit(0));
	OK(cuDeviceGet(&d, 0));
}

/* A granularity that is not a power of two must still work everywhere. */
static void child_granularity(void)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h;
	CUdeviceptr base, base2, base3;
	size_t gran = 0;

	setenv("KVSLAB_DOUBLE_GRANULARITY", "1000", 1);
	EXPECT(cuInit(0), CUDA_ERROR_INVALID_VALUE);
	setenv("KVSLAB_DOUBLE_GRANULARITY", "12k", 1);
	EXPECT(cuInit(0), CUDA_ERROR_INVALID_VALUE);
	setenv("KVSLAB_DOUBLE_GRANULARITY", "12288", 1);
	setenv("KVSLAB_DOUBLE_MEM", "0", 1);
	OK(cuInit(0));
	OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK(gran == 12288);
	/* Capacity 0: every creation is out of memory. */
	EXPECT(cuMemCreate(&h, gran, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	OK(cuMemAddressReserve(&base, 5 * gran, 0, 0, 0));
	CHECK(base % gran == 0);
	OK(cuMemAddressReserve(&base2, 3 * gran, 65536, 0, 0));
	CHECK(base2 % (3 * 65536) == 0);
	EXPECT(cuMemAddressReserve(&base2, 3 * gran, 3000, 0, 0), CUDA_ERROR_INVALID_VALUE);
	/* What kvslab passes: alignment = granularity, here not a power of 2. */
	OK(cuMemAddressReserve(&base3, 3 * gran, gran, 0, 0));
	CHECK(base3 % gran == 0);
	OK(cuMemAddressFree(base3, 3 * gran));
	EXPECT(cuMemAddressReserve(&base2, 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemAddressFree(base2, 3 * gran));
	/* The hint is taken when the space is free. */
	OK(cuMemAddressReserve(&base2, gran, 0, base2, 0));
	OK(cuMemAddressFree(base2, gran));
	OK(cuMemAddressFree(base, 5 * gran));
	CHECK(kvsdbl_live_reservations() == 0);
}

struct thread_arg {
	CUcontext ctx;
	void *host;
	CUdeviceptr dev;
	size_t n;
	CUresult without, with;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;

	a->without = cuMemcpyDtoHAsync_v2(a->host, a->dev, a->n, NULL);
	if (cuCtxSetCurrent(a->ctx) == CUDA_SUCCESS)
		a->with = cuMemcpyDtoHAsync_v2(a->host, a->dev, a->n, NULL);
	return NULL;
}

/* ---- asynchronous work: simulated kernels, events, faults ---- */

#define MS 1000000ULL

static double secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A fault seen, then forgotten: the next test starts clean. */
static void expect_fault_and_clear(void)
{
	CHECK(kvsdbl_sticky_error() == CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK(kvsdbl_faults() == 1);
	kvsdbl_clear_sticky();
	CHECK(kvsdbl_sticky_error() == 0 && kvsdbl_faults() == 0);
	OK(cuCtxSynchronize());
}

struct churn {
	CUcontext ctx;
	CUdeviceptr kern_at, map_at;	/* disjoint granules */
	CUmemGenericAllocationHandle h;
	size_t G;
	double until;
	unsigned long launched, remapped;
	int bad;
};

/* Launch, record, query and now and then wait, on its own stream. */
static void *churn_kernels(void *p)
{
	struct churn *c = p;
	CUstream s;
	CUevent ev;

	if (cuCtxSetCurrent(c->ctx) || cuStreamCreate(&s, 0) ||
	    cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)) {
		c->bad++;
		return NULL;
	}
	while (secs() < c->until) {
		CUresult r;

		if (kvsdbl_kernel(s, c->kern_at, c->G, 200000) ||
		    cuEventRecord(ev, s))
			c->bad++;
		r = cuEventQuery(ev);
		if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
			c->bad++;
		if (++c->launched % 8 == 0 && cuEventSynchronize(ev))
			c->bad++;
	}
	if (cuStreamSynchronize(s) || cuEventDestroy_v2(ev) || cuStreamDestroy_v2(s))
		c->bad++;
	return NULL;
}

/* Map, open, close and unmap another granule, as a background mapper does. */
static void *churn_maps(void *p)
{
	struct churn *c = p;
	CUmemAccessDesc rw = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

	while (secs() < c->until) {
		if (cuMemMap(c->map_at, c->G, 0, c->h, 0) ||
		    cuMemSetAccess(c->map_at, c->G, &rw, 1) ||
		    cuMemUnmap(c->map_at, c->G))
			c->bad++;
		c->remapped++;
	}
	return NULL;
}

struct waiter {
	CUevent ev;
	CUcontext ctx;
	CUresult r;
};

static void *wait_event(void *p)
{
	struct waiter *w = p;

	w->r = cuCtxSetCurrent(w->ctx);
	if (!w->r)
		w->r = cuEventSynchronize(w->ev);
	return NULL;
}

static void child_async(void)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemAccessDesc rw = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CUmemAccessDesc ro = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READ);
	CUmemAccessDesc none = access_desc(CU_MEM_ACCESS_FLAGS_PROT_NONE);
	CUmemGenericAllocationHandle h1, h2, h3;
	CUdeviceptr base;
	CUstream s, nb, s2;
	CUevent ev, ev2, fresh;
	CUcontext ctx;
	CUdevice dev;
	size_t G = 0, fr, tot;
	unsigned char buf[64];
	double t0;

	OK(cuInit(0));
	OK(cuDeviceGet(&dev, 0));
	OK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	OK(cuMemAddressReserve(&base, 4 * G, 0, 0, 0));
	OK(cuMemCreate(&h1, G, &prop, 0));
	OK(cuMemCreate(&h2, G, &prop, 0));
	OK(cuMemCreate(&h3, G, &prop, 0));
	OK(cuMemMap(base, G, 0, h1, 0));
	OK(cuMemMap(base + G, G, 0, h2, 0));
	OK(cuMemSetAccess(base, 2 * G, &rw, 1));

	/* Kernels need a context, like every launch. */
	EXPECT(kvsdbl_kernel(NULL, base, G, MS), CUDA_ERROR_INVALID_CONTEXT);
	OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	OK(cuCtxSetCurrent(ctx));
	OK(cuStreamCreate(&s, 0));
	OK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
	OK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	OK(cuEventCreate(&ev2, 0));
	OK(cuEventCreate(&fresh, 0));
	EXPECT(kvsdbl_kernel((CUstream)&G, base, G, MS), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(kvsdbl_kernel(s, base, 0, MS), CUDA_ERROR_INVALID_VALUE);
	CHECK(kvsdbl_faults() == 0);

	/* An event recorded after a kernel completes with it. */
	OK(cuEventQuery(fresh));
	t0 = secs();
	OK(kvsdbl_kernel(s, base, G, 300 * MS));
	OK(cuEventRecord(ev, s));
	EXPECT(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
	OK(cuEventSynchronize(ev));
	CHECK(secs() - t0 >= 0.3);
	OK(cuEventQuery(ev));
	OK(cuEventQuery(fresh));

	/* Stream order: back-to-back kernels run one after the other. */
	t0 = secs();
	OK(kvsdbl_kernel(s, base, G, 100 * MS));
	OK(kvsdbl_kernel(s, base + G, G, 100 * MS));
	OK(cuEventRecord(ev, s));
	OK(cuEventSynchronize(ev));
	CHECK(secs() - t0 >= 0.2);
	t0 = secs();
	OK(kvsdbl_kernel(s, base, G, 50 * MS));
	OK(cuStreamSynchronize(s));
	CHECK(secs() - t0 >= 0.05);

	/* The legacy stream waits for a blocking stream... */
	OK(kvsdbl_kernel(s, base, G, 200 * MS));
	OK(cuEventRecord(ev, NULL));
	EXPECT(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
	OK(cuStreamSynchronize(NULL));
	OK(cuEventQuery(ev));
	/* ...not for a non-blocking one... */
	OK(kvsdbl_kernel(nb, base, G, 300 * MS));
	OK(cuEventRecord(ev, NULL));
	OK(cuEventQuery(ev));
	OK(cuEventRecord(ev2, nb));
	EXPECT(cuEventQuery(ev2), CUDA_ERROR_NOT_READY);
	OK(cuStreamSynchronize(nb));
	OK(cuEventQuery(ev2));
	/* ...and a blocking stream's later work waits for legacy work; a
	 * non-blocking stream's does not. */
	OK(kvsdbl_kernel(NULL, base, G, 200 * MS));
	OK(cuEventRecord(ev, s));
	OK(cuEventRecord(ev2, nb));
	EXPECT(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
	OK(cuEventQuery(ev2));
	OK(cuCtxSynchronize());
	OK(cuEventQuery(ev));

	/* A copy after a kernel on its stream completes after the kernel. */
	t0 = secs();
	OK(kvsdbl_kernel(s, base, G, 150 * MS));
	OK(cuMemcpyDtoHAsync_v2(buf, base, sizeof(buf), s));
	CHECK(secs() - t0 >= 0.15);

	/* The fence rule: wait for the event after the last reader, then unmap. */
	OK(kvsdbl_kernel(s, base + G, G, 100 * MS));
	OK(cuEventRecord(ev, s));
	OK(cuEventSynchronize(ev));
	OK(cuMemUnmap(base + G, G));
	CHECK(kvsdbl_sticky_error() == 0 && kvsdbl_faults() == 0);
	OK(cuMemMap(base + G, G, 0, h2, 0));
	OK(cuMemSetAccess(base + G, G, &rw, 1));

	/* Unmapping under a reader: the unmap succeeds, the context is lost. */
	OK(kvsdbl_kernel(s, base + G, G, 10000 * MS));
	OK(cuEventRecord(ev, s));
	OK(cuMemUnmap(base + G, G));
	CHECK(kvsdbl_mapped_bytes() == G);
	CHECK(kvsdbl_sticky_error() == CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK(kvsdbl_faults() == 1);
	t0 = secs();
	EXPECT(cuEventSynchronize(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuCtxSynchronize_v2(ctx), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuEventQuery(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuEventQuery(fresh), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuMemGetInfo_v2(&fr, &tot), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuMemcpyDtoHAsync_v2(buf, base, sizeof(buf), s), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(kvsdbl_kernel(s, base, G, MS), CUDA_ERROR_ILLEGAL_ADDRESS);
	/* The abandoned kernel is waited for by nobody. */
	CHECK(secs() - t0 < 5);
	CHECK(kvsdbl_faults() == 1);
	/* VMM calls belong to no context and keep working. */
	OK(cuMemMap(base + G, G, 0, h2, 0));
	OK(cuMemSetAccess(base + G, G, &rw, 1));
	expect_fault_and_clear();
	OK(cuEventQuery(ev));
	OK(cuEventSynchronize(ev));
	/* Nothing runs any more: unmapping what it read is harmless now. */
	OK(cuMemUnmap(base + G, G));
	CHECK(kvsdbl_faults() == 0);
	OK(cuMemMap(base + G, G, 0, h2, 0));
	OK(cuMemSetAccess(base + G, G, &rw, 1));

	/* A kernel on unmapped memory, on memory without access, a writer on
	 * read-only memory: each launch succeeds and faults the device. */
	OK(kvsdbl_kernel(s, base + 2 * G, G, MS));
	expect_fault_and_clear();
	OK(kvsdbl_kernel(s, base + G, 2 * G, MS));		/* runs into the hole */
	expect_fault_and_clear();
	OK(cuMemMap(base + 2 * G, G, 0, h3, 0));
	OK(kvsdbl_kernel(NULL, base + 2 * G, G, MS));
	expect_fault_and_clear();
	OK(cuMemSetAccess(base + 2 * G, G, &ro, 1));
	OK(kvsdbl_kernel(s, base + 2 * G, G, MS));
	OK(cuCtxSynchronize());
	CHECK(kvsdbl_faults() == 0);
	OK(kvsdbl_kernel_write(s, base + 2 * G, G, 1, MS));
	expect_fault_and_clear();

	/* Taking access away under a kernel faults it; what it keeps does not. */
	OK(kvsdbl_kernel(s, base, G, 10000 * MS));
	OK(cuMemSetAccess(base, G, &ro, 1));
	CHECK(kvsdbl_faults() == 0);
	OK(cuMemSetAccess(base, G, &none, 1));
	expect_fault_and_clear();
	OK(kvsdbl_kernel_write(s, base + G, G, 2, 10000 * MS));
	OK(cuMemSetAccess(base + G, G, &ro, 1));
	expect_fault_and_clear();
	OK(cuMemSetAccess(base, 2 * G, &rw, 1));

	/* A destroyed stream's work goes on: the unmap still faults... */
	OK(cuStreamCreate(&s2, 0));
	OK(kvsdbl_kernel(s2, base, G, 10000 * MS));
	OK(cuStreamDestroy_v2(s2));
	OK(cuMemUnmap(base, G));
	expect_fault_and_clear();
	OK(cuMemMap(base, G, 0, h1, 0));
	OK(cuMemSetAccess(base, G, &rw, 1));
	/* ...and the context waits for it; afterwards unmapping is safe. */
	OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
	t0 = secs();
	OK(kvsdbl_kernel(s2, base, G, 100 * MS));
	OK(cuStreamDestroy_v2(s2));
	OK(cuCtxSynchronize());
	CHECK(secs() - t0 >= 0.1);
	OK(cuMemUnmap(base, G));
	CHECK(kvsdbl_faults() == 0);
	OK(cuMemMap(base, G, 0, h1, 0));
	OK(cuMemSetAccess(base, G, &rw, 1));

	/* A waiting call does not hold the double: this thread maps and
	 * unmaps while another sleeps in cuEventSynchronize for 1 s.  (Were
	 * the lock held, the first call below would return after 1 s.) */
	{
		struct waiter w = { .ctx = ctx, .r = CUDA_ERROR_UNKNOWN };
		pthread_t t;

		t0 = secs();
		OK(kvsdbl_kernel(s, base, G, 1000 * MS));
		OK(cuEventRecord(ev, s));
		w.ev = ev;
		CHECK(pthread_create(&t, NULL, wait_event, &w) == 0);
		usleep(50000);
		OK(cuMemUnmap(base + 2 * G, G));
		OK(cuMemMap(base + 2 * G, G, 0, h3, 0));
		CHECK(secs() - t0 < 1.0);
		pthread_join(t, NULL);
		OK(w.r);
		CHECK(secs() - t0 >= 1.0);
	}

	/* Churn: kernels and events on one thread, mapping and unmapping of
	 * another granule on a second; no fault, no deadlock. */
	{
		struct churn c = { .ctx = ctx, .kern_at = base, .map_at = base + 3 * G,
				   .h = h3, .G = G, .until = secs() + 1.0 };
		pthread_t tk, tm;

		OK(cuMemUnmap(base + 2 * G, G));
		CHECK(pthread_create(&tk, NULL, churn_kernels, &c) == 0);
		CHECK(pthread_create(&tm, NULL, churn_maps, &c) == 0);
		pthread_join(tk, NULL);
		pthread_join(tm, NULL);
		CHECK(c.bad == 0);
		CHECK(c.launched > 0 && c.remapped > 0);
		CHECK(kvsdbl_faults() == 0 && kvsdbl_sticky_error() == 0);
	}

	OK(cuCtxSynchronize());
	OK(cuEventDestroy_v2(ev));
	OK(cuEventDestroy_v2(ev2));
	OK(cuEventDestroy_v2(fresh));
	OK(cuStreamDestroy_v2(s));
	OK(cuStreamDestroy_v2(nb));
	OK(cuMemUnmap(base, 2 * G));
	OK(cuMemRelease(h1));
	OK(cuMemRelease(h2));
	OK(cuMemRelease(h3));
	OK(cuMemAddressFree(base, 4 * G));
	OK(cuDevicePrimaryCtxRelease_v2(dev));
	CHECK(kvsdbl_live_handles() == 0 && kvsdbl_live_reservations() == 0);
}

/*
 * cuMemcpyBatchAsync_v2's argument rules, each refused with nothing moved;
 * a good batch in both directions; and a writing kernel's bytes reaching a
 * batch ordered after it by cuStreamWaitEvent.
 */
static void child_batch(void)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemAccessDesc rw = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CUmemcpyAttributes at[2];
	CUmemGenericAllocationHandle h;
	CUdeviceptr base, dst[4], src[4];
	size_t G = 0, sz[4], idx[2] = { 0, 2 };
	unsigned char host[4096], back[4096];
	CUstream s, k;
	CUevent ev;
	CUcontext ctx;
	CUdevice dev;

	OK(cuInit(0));
	OK(cuDeviceGet(&dev, 0));
	OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	OK(cuCtxSetCurrent(ctx));
	OK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	OK(cuMemAddressReserve(&base, G, 0, 0, 0));
	OK(cuMemCreate(&h, G, &prop, 0));
	OK(cuMemMap(base, G, 0, h, 0));
	OK(cuMemSetAccess(base, G, &rw, 1));
	OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	OK(cuStreamCreate(&k, 0));
	OK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	for (int i = 0; i < 4096; i++)
		host[i] = (unsigned char)(i * 13 + 1);
	memset(at, 0, sizeof(at));
	at[0].srcAccessOrder = at[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	for (int i = 0; i < 4; i++) {
		dst[i] = base + (CUdeviceptr)i * 8192;
		src[i] = (uintptr_t)host + (size_t)i * 1024;
		sz[i] = 1024;
	}
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 0, at, idx, 1, s), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, NULL, idx, 1, s), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, NULL, 1, s), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 0, s), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 1, NULL), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 1, CU_STREAM_LEGACY),
	       CUDA_ERROR_INVALID_VALUE);
	idx[0] = 1;
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 1, s), CUDA_ERROR_INVALID_VALUE);
	idx[0] = 0;
	idx[1] = 4;
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 2, s), CUDA_ERROR_INVALID_VALUE);
	idx[1] = 0;
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 2, s), CUDA_ERROR_INVALID_VALUE);
	idx[1] = 2;
	at[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID;
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 2, s), CUDA_ERROR_INVALID_VALUE);
	at[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
	at[1].flags = 0x80;
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 2, s), CUDA_ERROR_INVALID_VALUE);
	at[1].flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
	sz[3] = 0;
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 2, s), CUDA_ERROR_INVALID_VALUE);
	sz[3] = 1024;
	dst[3] = base + G - 512;	/* runs past the mapping */
	EXPECT(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 2, s), CUDA_ERROR_ILLEGAL_ADDRESS);
	dst[3] = base + 3 * 8192;
	for (int i = 0; i < 4; i++)
		CHECK(((unsigned char *)(uintptr_t)dst[i])[0] == 0);
	CHECK(kvsdbl_calls("cuMemcpyBatchAsync_v2") == 13);

	/* Good: in, then out again (device to host), then device to device. */
	OK(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 2, s));
	for (int i = 0; i < 4; i++) {
		src[i] = dst[i];
		dst[i] = (uintptr_t)back + (size_t)i * 1024;
	}
	memset(back, 0, sizeof(back));
	OK(cuMemcpyBatchAsync_v2(dst, src, sz, 4, at, idx, 1, s));
	OK(cuStreamSynchronize(s));
	CHECK(memcmp(back, host, 4096) == 0);

	/* A kernel on k writes the first 8 KiB for 50 ms; a batch on s made
	 * to wait for it reads its bytes. */
	OK(kvsdbl_kernel_write(k, base, 8192, 5, 50 * MS));
	OK(cuEventRecord(ev, k));
	OK(cuStreamWaitEvent(s, ev, 0));
	EXPECT(cuStreamWaitEvent(s, ev, 2), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemcpyBatchAsync_v2(dst, src, sz, 1, at, idx, 1, s));
	OK(cuStreamSynchronize(s));
	for (int i = 0; i < 1024; i++)
		CHECK(back[i] == kvsdbl_pattern(5, (size_t)i));
	/* Copies of one batch that overlap would be undefined: see the
	 * kvslab suite (it aborts). */

	OK(cuEventDestroy_v2(ev));
	OK(cuStreamDestroy_v2(s));
	OK(cuStreamDestroy_v2(k));
	OK(cuMemUnmap(base, G));
	OK(cuMemRelease(h));
	OK(cuMemAddressFree(base, G));
	OK(cuDevicePrimaryCtxRelease_v2(dev));
}

/*
 * kvslab's module: recognised by its entry, other images refused; the
 * launch configuration checked; the copy kernel's reference run in stream
 * order, and a fault (sticky 700) when a descriptor names memory the
 * device cannot reach (pageable host memory).
 */
static void child_module(void)
{
	static const char ptx[] = ".version 9.0\n.visible .entry kvslab_copy_batch_v1(\n)";
	CUmemAllocationProp prop = dev_prop(0);
	CUmemAccessDesc rw = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CUmemGenericAllocationHandle h;
	CUdeviceptr base, ddesc;
	unsigned long long n = 2;
	unsigned char *pin, pageable[64];
	struct { unsigned long long dst, src, bytes; } *desc;
	void *args[2] = { &ddesc, &n }, *mem;
	CUmodule mod;
	CUfunction fn;
	CUstream s;
	CUcontext ctx;
	CUdevice dev;
	size_t G = 0;

	OK(cuInit(0));
	OK(cuDeviceGet(&dev, 0));
	OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	OK(cuCtxSetCurrent(ctx));
	OK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	OK(cuMemAddressReserve(&base, G, 0, 0, 0));
	OK(cuMemCreate(&h, G, &prop, 0));
	OK(cuMemMap(base, G, 0, h, 0));
	OK(cuMemSetAccess(base, G, &rw, 1));
	OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	EXPECT(cuModuleLoadData(&mod, ".version 9.0\n.visible .entry other(\n)"),
	       CUDA_ERROR_INVALID_IMAGE);
	OK(cuModuleLoadData(&mod, ptx));
	EXPECT(cuModuleGetFunction(&fn, mod, "other"), CUDA_ERROR_NOT_FOUND);
	OK(cuModuleGetFunction(&fn, mod, "kvslab_copy_batch_v1"));

	/* Descriptors in pinned, device-mapped memory. */
	OK(cuMemHostAlloc(&mem, 4096, CU_MEMHOSTALLOC_PORTABLE));
	EXPECT(cuMemHostGetDevicePointer_v2(&ddesc, mem, 0), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemFreeHost(mem));
	OK(cuMemHostAlloc(&mem, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
	EXPECT(cuMemHostGetDevicePointer_v2(&ddesc, mem, 1), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemHostGetDevicePointer_v2(&ddesc, mem, 0));
	CHECK(ddesc == (uintptr_t)mem);
	desc = mem;
	pin = (unsigned char *)mem + 1024;
	for (int i = 0; i < 256; i++)
		pin[i] = (unsigned char)i;
	desc[0].dst = base + 100;
	desc[0].src = (uintptr_t)pin;
	desc[0].bytes = 100;
	desc[1].dst = (uintptr_t)pin + 512;
	desc[1].src = (uintptr_t)pin + 100;
	desc[1].bytes = 50;

	EXPECT(cuLaunchKernel(fn, 0, 1, 1, 256, 1, 1, 0, s, args, NULL), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuLaunchKernel(fn, 2, 1, 1, 2048, 1, 1, 0, s, args, NULL), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuLaunchKernel(fn, 2, 1, 1, 256, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuLaunchKernel(fn, 2, 1, 1, 256, 1, 1, 0, s, args, args), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuLaunchKernel((CUfunction)&n, 2, 1, 1, 256, 1, 1, 0, s, args, NULL),
	       CUDA_ERROR_INVALID_HANDLE);
	OK(cuLaunchKernel(fn, 2, 1, 1, 256, 1, 1, 0, s, args, NULL));
	OK(cuStreamSynchronize(s));
	for (int i = 0; i < 100; i++)
		CHECK(((unsigned char *)(uintptr_t)base)[100 + i] == i);
	for (int i = 0; i < 50; i++)
		CHECK(pin[512 + i] == 100 + i);

	/* Pageable memory: the device cannot reach it; the kernel faults. */
	desc[1].dst = (uintptr_t)pageable;
	OK(cuLaunchKernel(fn, 2, 1, 1, 256, 1, 1, 0, s, args, NULL));
	CHECK(kvsdbl_sticky_error() == CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
	kvsdbl_clear_sticky();

	OK(cuModuleUnload(mod));
	EXPECT(cuLaunchKernel(fn, 2, 1, 1, 256, 1, 1, 0, s, args, NULL), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);
	OK(cuMemFreeHost(mem));
	OK(cuStreamDestroy_v2(s));
	OK(cuMemUnmap(base, G));
	OK(cuMemRelease(h));
	OK(cuMemAddressFree(base, G));
	OK(cuDevicePrimaryCtxRelease_v2(dev));
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "/tmp/libcuda-double.so";
	CUmemAllocationProp prop = dev_prop(0), bad;
	CUmemAccessDesc rw = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CUmemAccessDesc ro = access_desc(CU_MEM_ACCESS_FLAGS_PROT_READ);
	CUmemAccessDesc descs[2];
	CUmemGenericAllocationHandle h1, h2, h3, h4, hr, many[9];
	CUdeviceptr base;
	CUcontext ctx, cur;
	CUstream s;
	CUevent ev;
	CUdriverProcAddressQueryResult st;
	const char *str;
	unsigned char *host, *host2;
	size_t G = 0, rec = 0, fr, tot;
	unsigned long calls;
	void *pfn;
	char name[64];
	int v = 0, n = 0;
	CUdevice dev;

	in_child(path, child_nodev);
	in_child(path, child_granularity);
	in_child(path, child_async);
	in_child(path, child_batch);
	in_child(path, child_module);

	/* The default 2 MiB granularity, and a device of 8 granules so the
	 * capacity check is reachable. */
	setenv("KVSLAB_DOUBLE_MEM", "16777216", 1);
	load(path);

	/* ---- start-up ---- */
	OK(cuDriverGetVersion(&v));
	CHECK(v == 13000);
	OK(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &str));
	CHECK(str && !strcmp(str, "CUDA_ERROR_ILLEGAL_ADDRESS"));
	EXPECT(cuMemCreate(&h1, 2 << 20, &prop, 0), CUDA_ERROR_NOT_INITIALIZED);
	EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	EXPECT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
	OK(cuInit(0));
	OK(cuInit(0));
	OK(cuDeviceGetCount(&n));
	CHECK(n == 1);
	OK(cuDeviceGet(&dev, 0));
	EXPECT(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
	OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
	CHECK(v == 1);
	OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev));
	CHECK(v == 1);
	OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
	CHECK(v == 0);
	OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev));
	CHECK(v == 1);
	EXPECT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 3), CUDA_ERROR_INVALID_DEVICE);
	OK(cuDeviceGetName(name, sizeof(name), dev));
	CHECK(strlen(name) > 0);

	OK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK(G == 2 << 20);
	OK(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	CHECK(rec % G == 0);
	bad = dev_prop(1);
	EXPECT(cuMemGetAllocationGranularity(&rec, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
	       CUDA_ERROR_INVALID_DEVICE);

	/* ---- happy path: reserve 4 granules, two handles, map, access, copy ---- */
	OK(cuMemAddressReserve(&base, 4 * G, 0, 0, 0));
	CHECK(base % G == 0);
	CHECK(kvsdbl_live_reservations() == 1);
	OK(cuMemCreate(&h1, G, &prop, 0));
	OK(cuMemCreate(&h2, G, &prop, 0));
	CHECK(h1 != h2);
	CHECK(kvsdbl_live_handles() == 2);
	CHECK(kvsdbl_created_bytes() == 2 * G);
	OK(cuMemMap(base, G, 0, h1, 0));
	OK(cuMemMap(base + G, G, 0, h2, 0));
	CHECK(kvsdbl_mapped_bytes() == 2 * G);
	CHECK(access_at(base) == CU_MEM_ACCESS_FLAGS_PROT_NONE);
	OK(cuMemSetAccess(base, 2 * G, &rw, 1));
	CHECK(access_at(base + G + 5) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	for (size_t i = 0; i < 2 * G; i++)
		((unsigned char *)(uintptr_t)base)[i] = (unsigned char)(i * 7 + 3);

	/* Context-needing calls without a context. */
	EXPECT(cuMemGetInfo_v2(&fr, &tot), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuMemAllocHost_v2((void **)&host, G), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuEventCreate(&ev, 0), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
	CHECK(kvsdbl_last_error() == CUDA_ERROR_INVALID_CONTEXT);

	OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	EXPECT(cuCtxSetCurrent((CUcontext)&n), CUDA_ERROR_INVALID_CONTEXT);
	OK(cuCtxSetCurrent(ctx));
	OK(cuCtxGetCurrent(&cur));
	CHECK(cur == ctx);
	OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	OK(cuMemAllocHost_v2((void **)&host, 2 * G));
	OK(cuMemHostAlloc((void **)&host2, G, CU_MEMHOSTALLOC_PORTABLE));
	EXPECT(cuMemHostAlloc((void **)&host2, G, 0x80), CUDA_ERROR_INVALID_VALUE);
	memset(host, 0, 2 * G);
	EXPECT(cuMemcpyDtoHAsync_v2(host, base, 2 * G, (CUstream)&n), CUDA_ERROR_INVALID_HANDLE);
	OK(cuMemcpyDtoHAsync_v2(host, base, 2 * G, s));
	OK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	OK(cuEventRecord(ev, s));
	OK(cuEventQuery(ev));
	OK(cuEventSynchronize(ev));
	OK(cuStreamSynchronize(s));
	OK(cuCtxSynchronize());
	CHECK(memcmp(host, (void *)(uintptr_t)base, 2 * G) == 0);
	CHECK(host[G + 1] == (unsigned char)((G + 1) * 7 + 3));

	/* HtoD into the second granule, DtoD back into the first. */
	memset(host2, 0xab, G);
	OK(cuMemcpyHtoDAsync_v2(base + G, host2, G, s));
	CHECK(((unsigned char *)(uintptr_t)base)[G + 17] == 0xab);
	OK(cuMemcpyAsync(base, base + G, 4096, NULL));
	CHECK(((unsigned char *)(uintptr_t)base)[100] == 0xab);
	CHECK(((unsigned char *)(uintptr_t)base)[4096] == (unsigned char)(4096 * 7 + 3));
	/* Pinned host blocks are device-accessible under UVA. */
	OK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)host, base, 64, s));
	/* Zero bytes: nothing to check beyond the context and stream. */
	OK(cuMemcpyAsync(0, 0, 0, s));

	OK(cuMemGetInfo_v2(&fr, &tot));
	CHECK(tot == 16 << 20 && fr == tot - 2 * G);

	/* ---- misuse: create ---- */
	EXPECT(cuMemCreate(&h3, G + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemCreate(&h3, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemCreate(&h3, G, &prop, 1), CUDA_ERROR_INVALID_VALUE);
	bad = prop;
	bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
	EXPECT(cuMemCreate(&h3, G, &bad, 0), CUDA_ERROR_INVALID_VALUE);
	bad = prop;
	bad.location.type = CU_MEM_LOCATION_TYPE_HOST;
	EXPECT(cuMemCreate(&h3, G, &bad, 0), CUDA_ERROR_INVALID_VALUE);
	bad = dev_prop(1);
	EXPECT(cuMemCreate(&h3, G, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
	CHECK(kvsdbl_live_handles() == 2 && kvsdbl_created_bytes() == 2 * G);

	/* ---- misuse: map ---- */
	OK(cuMemCreate(&h3, 2 * G, &prop, 0));
	EXPECT(cuMemMap(base + 2 * G + 4096, 2 * G, 0, h3, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemMap(base + 2 * G, 2 * G, 0, h3, 1), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemMap(base + G, 2 * G, 0, h3, 0), CUDA_ERROR_INVALID_VALUE);	/* over h2 */
	EXPECT(cuMemMap(base + 3 * G, 2 * G, 0, h3, 0), CUDA_ERROR_INVALID_VALUE); /* past the end */
	EXPECT(cuMemMap(base + 2 * G, G, G, h3, 0), CUDA_ERROR_INVALID_VALUE);	/* offset */
	EXPECT(cuMemMap(base + 2 * G, G, 0, h3, 0), CUDA_ERROR_INVALID_VALUE);	/* prefix */
	EXPECT(cuMemMap(0, 2 * G, 0, h3, 0), CUDA_ERROR_INVALID_VALUE);	/* no reservation */
	EXPECT(cuMemMap(base + 2 * G, 2 * G, 0, 12345, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK(kvsdbl_mapped_bytes() == 2 * G);
	OK(cuMemMap(base + 2 * G, 2 * G, 0, h3, 0));

	/* ---- misuse: copies before access, read-only, across a hole ---- */
	memset(host, 0x5a, 64);
	EXPECT(cuMemcpyDtoHAsync_v2(host, base + 2 * G, 64, s), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK(host[0] == 0x5a && host[63] == 0x5a);
	EXPECT(cuMemcpyDtoHAsync_v2(host, base + 2 * G - 32, 64, s), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK(host[0] == 0x5a);
	EXPECT(cuMemcpyHtoDAsync_v2(base + 2 * G, host, 64, s), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuMemcpyHtoDAsync_v2(base + 2 * G, NULL, 64, s), CUDA_ERROR_INVALID_VALUE);
	CHECK(kvsdbl_last_error() == CUDA_ERROR_INVALID_VALUE);
	OK(cuMemSetAccess(base + 2 * G, 2 * G, &ro, 1));
	CHECK(access_at(base + 3 * G) == CU_MEM_ACCESS_FLAGS_PROT_READ);
	OK(cuMemcpyDtoHAsync_v2(host, base + 2 * G, 64, s));
	CHECK(host[0] == 0 && host[63] == 0);
	EXPECT(cuMemcpyHtoDAsync_v2(base + 2 * G, host, 64, s), CUDA_ERROR_ILLEGAL_ADDRESS);
	EXPECT(cuMemcpyAsync(base + 2 * G, base, 64, s), CUDA_ERROR_ILLEGAL_ADDRESS);
	/* A "host" pointer inside a reservation is device memory. */
	EXPECT(cuMemcpyDtoHAsync_v2((void *)(uintptr_t)(base + 2 * G), base, 64, s),
	       CUDA_ERROR_ILLEGAL_ADDRESS);
	/* Partial set access inside one mapping. */
	OK(cuMemSetAccess(base + 3 * G, G, &rw, 1));
	CHECK(access_at(base + 2 * G) == CU_MEM_ACCESS_FLAGS_PROT_READ);
	CHECK(access_at(base + 3 * G) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	OK(cuMemcpyHtoDAsync_v2(base + 3 * G, host, 64, s));
	EXPECT(cuMemcpyHtoDAsync_v2(base + 3 * G - 64, host, 128, s), CUDA_ERROR_ILLEGAL_ADDRESS);
	descs[0] = rw;
	descs[1] = ro;
	EXPECT(cuMemSetAccess(base, G, descs, 2), CUDA_ERROR_INVALID_VALUE);
	descs[0].location.id = 1;
	EXPECT(cuMemSetAccess(base, G, descs, 1), CUDA_ERROR_INVALID_DEVICE);
	descs[0] = access_desc(2);
	EXPECT(cuMemSetAccess(base, G, descs, 1), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemSetAccess(base + 4096, G, &rw, 1), CUDA_ERROR_INVALID_VALUE);

	/* ---- misuse: unmap ---- */
	EXPECT(cuMemUnmap(base + 2 * G, G), CUDA_ERROR_INVALID_VALUE);		/* part */
	EXPECT(cuMemUnmap(base + 3 * G, G), CUDA_ERROR_INVALID_VALUE);		/* part */
	EXPECT(cuMemUnmap(base + G, 2 * G), CUDA_ERROR_INVALID_VALUE);		/* whole + part */
	EXPECT(cuMemUnmap(base + 4096, G), CUDA_ERROR_INVALID_VALUE);		/* unaligned */
	CHECK(kvsdbl_mapped_bytes() == 4 * G);
	OK(cuMemUnmap(base + G, G));
	CHECK(kvsdbl_mapped_bytes() == 3 * G);
	EXPECT(cuMemUnmap(base + G, G), CUDA_ERROR_INVALID_VALUE);		/* unmapped */
	EXPECT(cuMemUnmap(base, 4 * G), CUDA_ERROR_INVALID_VALUE);		/* hole */
	/* Set access on a range that is not fully mapped changes nothing. */
	EXPECT(cuMemSetAccess(base, 2 * G, &ro, 1), CUDA_ERROR_INVALID_VALUE);
	CHECK(access_at(base) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	/* A fresh mapping starts with no access, even where access was. */
	OK(cuMemMap(base + G, G, 0, h2, 0));
	CHECK(access_at(base + G) == CU_MEM_ACCESS_FLAGS_PROT_NONE);
	/* ...and aliases are the same memory. */
	OK(cuMemSetAccess(base, 2 * G, &rw, 1));
	OK(cuMemcpyAsync(base + G, base, 16, s));
	CHECK(((unsigned char *)(uintptr_t)base)[G + 20] == 0xab);
	OK(cuMemUnmap(base + G, G));

	/* ---- retain and release ---- */
	EXPECT(cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)(base + G)),
	       CUDA_ERROR_INVALID_VALUE);
	OK(cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)(base + 3 * G + 100)));
	CHECK(hr == h3);
	OK(cuMemRelease(h3));		/* the retain */
	OK(cuMemRelease(h3));		/* the creation; still mapped: deferred */
	CHECK(kvsdbl_live_handles() == 3);
	EXPECT(cuMemRelease(h3), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemMap(base + G, G, 0, h3, 0), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemUnmap(base + 2 * G, 2 * G));	/* frees h3 */
	CHECK(kvsdbl_live_handles() == 2);
	CHECK(kvsdbl_created_bytes() == 2 * G);
	OK(cuMemRelease(h1));		/* mapped: deferred */
	CHECK(kvsdbl_live_handles() == 2);
	EXPECT(cuMemRelease(12345), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemRelease(h2));		/* unmapped: freed now */
	EXPECT(cuMemRelease(h2), CUDA_ERROR_INVALID_VALUE);
	CHECK(kvsdbl_live_handles() == 1);

	/* ---- misuse: free a reservation ---- */
	EXPECT(cuMemAddressFree(base, 4 * G), CUDA_ERROR_INVALID_VALUE);	/* h1 live */
	OK(cuMemUnmap(base, G));	/* frees h1 */
	CHECK(kvsdbl_live_handles() == 0 && kvsdbl_created_bytes() == 0);
	CHECK(kvsdbl_mapped_bytes() == 0);
	EXPECT(cuMemAddressFree(base, 2 * G), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemAddressFree(base + G, 3 * G), CUDA_ERROR_INVALID_VALUE);
	CHECK(kvsdbl_live_reservations() == 1);

	/* ---- capacity ---- */
	for (int i = 0; i < 8; i++)
		OK(cuMemCreate(&many[i], G, &prop, 0));
	EXPECT(cuMemCreate(&many[8], G, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(kvsdbl_last_error() == CUDA_ERROR_OUT_OF_MEMORY);
	OK(cuMemGetInfo_v2(&fr, &tot));
	CHECK(fr == 0 && kvsdbl_live_handles() == 8);
	OK(cuMemRelease(many[7]));
	OK(cuMemGetInfo_v2(&fr, &tot));
	CHECK(fr == G);
	OK(cuMemCreate(&h4, G, &prop, 0));
	OK(cuMemMap(base + 3 * G, G, 0, h4, 0));
	EXPECT(cuMemAddressFree(base, 4 * G), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemUnmap(base + 3 * G, G));
	OK(cuMemRelease(h4));
	for (int i = 0; i < 7; i++)
		OK(cuMemRelease(many[i]));
	OK(cuMemAddressFree(base, 4 * G));
	EXPECT(cuMemAddressFree(base, 4 * G), CUDA_ERROR_INVALID_VALUE);
	CHECK(kvsdbl_live_reservations() == 0);
	EXPECT(cuMemcpyDtoHAsync_v2(host, base, 64, s), CUDA_ERROR_ILLEGAL_ADDRESS);

	/* ---- another thread has no context until it sets one ---- */
	{
		struct thread_arg a = { .ctx = ctx, .host = host, .n = 64,
					.without = CUDA_SUCCESS, .with = CUDA_ERROR_UNKNOWN };
		pthread_t t;

		OK(cuMemAddressReserve(&base, G, 0, 0, 0));
		OK(cuMemCreate(&h1, G, &prop, 0));
		OK(cuMemMap(base, G, 0, h1, 0));
		OK(cuMemRelease(h1));
		OK(cuMemSetAccess(base, G, &ro, 1));
		a.dev = base;
		CHECK(pthread_create(&t, NULL, thread_main, &a) == 0);
		pthread_join(t, NULL);
		CHECK(a.without == CUDA_ERROR_INVALID_CONTEXT);
		CHECK(a.with == CUDA_SUCCESS);
		OK(cuMemUnmap(base, G));
		OK(cuMemAddressFree(base, G));
		CHECK(kvsdbl_live_handles() == 0);
	}

	/* ---- streams, events, errors, lookup, counters ---- */
	OK(cuEventDestroy_v2(ev));
	EXPECT(cuEventQuery(ev), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuEventRecord(NULL, s), CUDA_ERROR_INVALID_HANDLE);
	OK(cuStreamDestroy_v2(s));
	EXPECT(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
	OK(cuStreamSynchronize(NULL));
	EXPECT(cuGetErrorString((CUresult)12345, &str), CUDA_ERROR_INVALID_VALUE);
	CHECK(str == NULL);
	OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &str));
	CHECK(str && !strcmp(str, "out of memory"));

	OK(cuGetProcAddress_v2("cuMemGetInfo", &pfn, 12000, 0, &st));
	CHECK(pfn == dlsym(lib, "cuMemGetInfo_v2") && st == CU_GET_PROC_ADDRESS_SUCCESS);
	OK(cuGetProcAddress_v2("cuCtxSynchronize", &pfn, 12000, 0, &st));
	CHECK(pfn == dlsym(lib, "cuCtxSynchronize"));
	OK(cuGetProcAddress_v2("cuCtxSynchronize", &pfn, 13000, 0, &st));
	CHECK(pfn == dlsym(lib, "cuCtxSynchronize_v2"));
	OK(cuGetProcAddress_v2("cuMemCreate", &pfn, 10010, 0, &st));
	CHECK(pfn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	OK(cuGetProcAddress_v2("cuNoSuchCall", &pfn, 12000, 0, &st));
	CHECK(pfn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	EXPECT(cuGetProcAddress_v2("cuMemCreate", &pfn, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE);

	calls = kvsdbl_calls("cuMemCreate");
	EXPECT(cuMemCreate(NULL, G, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK(kvsdbl_calls("cuMemCreate") == calls + 1);
	CHECK(kvsdbl_calls("cuMemGetInfo") == kvsdbl_calls("cuMemGetInfo_v2"));
	CHECK(kvsdbl_calls("cuMemGetInfo") >= 4);
	CHECK(kvsdbl_calls("cuNoSuchCall") == 0);

	/* ---- primary context: last release resets it ---- */
	OK(cuMemFreeHost(host));
	EXPECT(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemFreeHost(NULL));
	OK(cuStreamCreate(&s, 0));	/* left for the reset to collect */
	OK(cuDevicePrimaryCtxRelease_v2(dev));
	EXPECT(cuDevicePrimaryCtxRelease_v2(dev), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuMemGetInfo_v2(&fr, &tot), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuMemFreeHost(host2), CUDA_ERROR_INVALID_VALUE);	/* died with the context */
	EXPECT(cuCtxSetCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
	OK(cuCtxSetCurrent(NULL));

	/* A resource leaked by the code under test is released at unload. */
	OK(cuMemAddressReserve(&base, G, 0, 0, 0));
	OK(cuMemCreate(&h1, G, &prop, 0));
	dlclose(lib);

	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("smoke: all checks passed\n");
	return 0;
}
