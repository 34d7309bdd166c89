/* SPDX-License-Identifier: MIT */
/*
 * drv/kernels/copy.cu - kvslab's gather/scatter copy kernel, for batches of
 * many small copies that the copy engines move slowly one by one.
 *
 * Built to PTX (nvcc -ptx) and loaded by drv/cuda.c with cuModuleLoadData,
 * so nothing links the CUDA runtime.  The entry's name is versioned
 * (kvslab_copy_batch_v1): drv/cuda.c looks it up by that name and the
 * libcuda test double recognises the module by it and runs its host
 * reference implementation instead.  A change of the descriptor layout or
 * of the semantics takes a new name.
 *
 * One descriptor per copy, the layout of kvs_copy_t: destination, source,
 * bytes, 64 bits each, device addresses (host memory through its mapped
 * device pointer).  Thread blocks take descriptors in turn (block b does
 * b, b + gridDim.x, ...); the threads of a block move one copy together:
 * 16-byte vector loads and stores when both ends are 16-byte aligned, the
 * bytes past the last whole vector one by one; byte by byte otherwise.
 * Copies of one batch must not overlap (kvs_drv_copy_batch(3)).
 */
#include <stdint.h>

struct kvs_copy_desc {
	unsigned long long dst;
	unsigned long long src;
	unsigned long long bytes;
};

extern "C" __global__ void kvslab_copy_batch_v1(const struct kvs_copy_desc *desc,
						unsigned long long n)
{
	for (unsigned long long i = blockIdx.x; i < n; i += gridDim.x) {
		unsigned char *dst = (unsigned char *)desc[i].dst;
		const unsigned char *src = (const unsigned char *)desc[i].src;
		unsigned long long bytes = desc[i].bytes, k, done = 0;

		if (((desc[i].dst | desc[i].src) & 15) == 0) {
			uint4 *vd = (uint4 *)dst;
			const uint4 *vs = (const uint4 *)src;
			unsigned long long nv = bytes / 16;

			for (k = threadIdx.x; k < nv; k += blockDim.x)
				vd[k] = vs[k];
			done = nv * 16;
		}
		for (k = done + threadIdx.x; k < bytes; k += blockDim.x)
			dst[k] = src[k];
	}
}
