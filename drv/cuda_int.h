/* SPDX-License-Identifier: MIT */
/*
 * drv/cuda_int.h - what the two files of the cuda backend share:
 * drv/cuda.c (loading the driver, the VMM calls, copies, events) and
 * drv/cuda_kern.c (the gather/scatter kernel and the pinned blocks it may
 * reach).  The driver's function table, the backend's state, and the
 * functions one gives the other.  The design is drv/cuda.c's essay.
 */
#ifndef KVSLAB_DRV_CUDA_INT_H
#define KVSLAB_DRV_CUDA_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "backend.h"

/*
 * Every driver function we call: X(member, ABI symbol, parameter list).
 * All return CUresult.  The member names drop the "cu" prefix so that
 * cuda.h's renaming macros (cuMemGetInfo -> cuMemGetInfo_v2 ...) cannot
 * touch them.
 */
#define CUDA_FNS(X)								\
	X(GetErrorName, "cuGetErrorName", (CUresult, const char **))		\
	X(Init, "cuInit", (unsigned int))					\
	X(DeviceGetCount, "cuDeviceGetCount", (int *))				\
	X(DeviceGet, "cuDeviceGet", (CUdevice *, int))				\
	X(DeviceGetAttribute, "cuDeviceGetAttribute",				\
	  (int *, CUdevice_attribute, CUdevice))				\
	X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",			\
	  (CUcontext *, CUdevice))						\
	X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))	\
	X(CtxSetCurrent, "cuCtxSetCurrent", (CUcontext))			\
	X(CtxGetCurrent, "cuCtxGetCurrent", (CUcontext *))			\
	X(CtxSynchronize, "cuCtxSynchronize", (void))				\
	X(StreamCreate, "cuStreamCreate", (CUstream *, unsigned int))		\
	X(StreamDestroy, "cuStreamDestroy_v2", (CUstream))			\
	X(StreamSynchronize, "cuStreamSynchronize", (CUstream))		\
	X(MemGetAllocationGranularity, "cuMemGetAllocationGranularity",	\
	  (size_t *, const CUmemAllocationProp *,				\
	   CUmemAllocationGranularity_flags))					\
	X(MemAddressReserve, "cuMemAddressReserve",				\
	  (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))	\
	X(MemAddressFree, "cuMemAddressFree", (CUdeviceptr, size_t))		\
	X(MemCreate, "cuMemCreate",						\
	  (CUmemGenericAllocationHandle *, size_t,				\
	   const CUmemAllocationProp *, unsigned long long))			\
	X(MemRelease, "cuMemRelease", (CUmemGenericAllocationHandle))		\
	X(MemMap, "cuMemMap",							\
	  (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,		\
	   unsigned long long))							\
	X(MemUnmap, "cuMemUnmap", (CUdeviceptr, size_t))			\
	X(MemSetAccess, "cuMemSetAccess",					\
	  (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))		\
	X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",				\
	  (CUdeviceptr, const void *, size_t, CUstream))			\
	X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2",				\
	  (void *, CUdeviceptr, size_t, CUstream))				\
	X(MemcpyAsync, "cuMemcpyAsync",						\
	  (CUdeviceptr, CUdeviceptr, size_t, CUstream))				\
	X(EventCreate, "cuEventCreate", (CUevent *, unsigned int))		\
	X(EventRecord, "cuEventRecord", (CUevent, CUstream))			\
	X(EventQuery, "cuEventQuery", (CUevent))				\
	X(EventSynchronize, "cuEventSynchronize", (CUevent))			\
	X(EventDestroy, "cuEventDestroy_v2", (CUevent))			\
	X(MemHostAlloc, "cuMemHostAlloc", (void **, size_t, unsigned int))	\
	X(MemFreeHost, "cuMemFreeHost", (void *))				\
	X(MemGetInfo, "cuMemGetInfo_v2", (size_t *, size_t *))		\
	X(StreamWaitEvent, "cuStreamWaitEvent", (CUstream, CUevent, unsigned int))

/*
 * Functions a driver may lack: a pointer left NULL turns the feature off
 * (and its KVS_DRV_CAP_* flag), nothing else.  cuMemcpyBatchAsync_v2 is
 * the CUDA 13 ABI (12.8's cuMemcpyBatchAsync takes a failIdx argument
 * more; we do not call that one).
 */
#define CUDA_OPT_FNS(X)								\
	X(MemcpyBatchAsync, "cuMemcpyBatchAsync_v2",				\
	  (CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,	\
	   size_t *, size_t, CUstream))						\
	X(ModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))	\
	X(ModuleGetFunction, "cuModuleGetFunction",				\
	  (CUfunction *, CUmodule, const char *))				\
	X(ModuleUnload, "cuModuleUnload", (CUmodule))				\
	X(LaunchKernel, "cuLaunchKernel",					\
	  (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,	\
	   unsigned int, unsigned int, unsigned int, CUstream, void **, void **))	\
	X(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2",		\
	  (CUdeviceptr *, void *, unsigned int))

#define CUDA_FN_TYPEDEF(fn, sym, args) typedef CUresult (CUDAAPI *cuda_##fn##_fn) args;
CUDA_FNS(CUDA_FN_TYPEDEF)
CUDA_OPT_FNS(CUDA_FN_TYPEDEF)
#undef CUDA_FN_TYPEDEF

struct cuda_fns {
#define CUDA_FN_MEMBER(fn, sym, args) cuda_##fn##_fn fn;
	CUDA_FNS(CUDA_FN_MEMBER)
	CUDA_OPT_FNS(CUDA_FN_MEMBER)
#undef CUDA_FN_MEMBER
};

/*
 * A pinned block of cuda_host_alloc() and where the device sees it
 * (cuMemHostGetDevicePointer), sorted by host address: how a batch learns
 * that its host sides are reachable by a kernel.
 */
struct cuda_pin {
	uintptr_t host;
	size_t size;
	CUdeviceptr dev;
};

struct cuda_pins {
	pthread_mutex_t lock;		/* after drv->lock */
	struct cuda_pin *v;
	size_t n, cap;
};

/* The descriptor ring: CUDA_KERN_SLOTS slots of CUDA_KERN_SLOT entries. */
#define CUDA_KERN_SLOTS 4
#define CUDA_KERN_SLOT 2048

/*
 * The gather/scatter kernel (drv/kernels/copy.cu), when the driver has the
 * module calls and loaded it: fn != NULL.  Its descriptors go to a pinned,
 * device-mapped ring of slots; a slot is reused once the event recorded
 * after its launch has completed.
 */
struct cuda_kern {
	CUmodule mod;
	CUfunction fn;
	kvs_copy_t *ring;		/* CUDA_KERN_SLOTS * CUDA_KERN_SLOT */
	CUdeviceptr ring_dev;
	CUevent done[CUDA_KERN_SLOTS];
	unsigned int next;		/* the slot to try first */
};

/*
 * The arrays cuMemcpyBatchAsync takes, grown to the largest batch yet.
 * Used only by cuda_copy_batch(), which the generic layer calls with
 * drv->lock held: that lock is theirs.
 */
struct cuda_batch {
	CUdeviceptr *dst, *src;
	size_t *size;
	size_t cap;
};

/* One open driver.  Written by cuda_open() only; read-only afterwards,
 * except the batch arrays and the kernels' ring (drv->lock) and the pinned
 * blocks (pins.lock). */
struct cuda_priv {
	struct cuda_fns cu;
	void *lib;			/* dlopen() handle */
	int ordinal;			/* attr->device */
	CUdevice dev;
	CUcontext ctx;			/* retained primary context */
	CUstream stream;		/* the copy queue, non-blocking */
	CUmemAllocationProp prop;	/* for cuMemCreate and the granularity */
	size_t gran;			/* MINIMUM granularity of prop */
	struct cuda_batch batch;	/* drv->lock */
	struct cuda_pins pins;		/* its own lock */
	struct cuda_kern kern;		/* drv->lock after cuda_open() */
};

/* drv/cuda.c */
int kvsi_cuda_fail(struct kvs_drv *drv, const struct cuda_priv *p, CUresult r,
		   const char *call);
/* drv/cuda_kern.c */
void kvsi_cuda_kern_open(struct kvs_drv *drv, struct cuda_priv *p);
void kvsi_cuda_kern_close(struct cuda_priv *p);
int kvsi_cuda_kern_batch(struct kvs_drv *drv, struct cuda_priv *p, int kind,
			 const kvs_copy_t *c, size_t n);
void kvsi_cuda_pin_add(struct cuda_priv *p, void *host, size_t size);
void kvsi_cuda_pin_remove(struct cuda_priv *p, void *host);

#endif /* KVSLAB_DRV_CUDA_INT_H */
