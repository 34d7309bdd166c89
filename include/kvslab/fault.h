/* SPDX-License-Identifier: MIT */
/*
 * kvslab/fault.h - fault injection: a driver that wraps another and fails
 * chosen calls on purpose, for reliability tests.  See kvs_fault_open(3).
 */
#ifndef KVSLAB_FAULT_H
#define KVSLAB_FAULT_H

#include <stdint.h>

#include <kvslab/drv.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Operations that can be made to fail. */
enum kvs_drv_op {
	KVS_OP_ANY = 0,
	KVS_OP_RESERVE,
	KVS_OP_UNRESERVE,
	KVS_OP_CREATE,
	KVS_OP_RELEASE,
	KVS_OP_MAP,
	KVS_OP_UNMAP,
	KVS_OP_SET_ACCESS,
	KVS_OP_COPY,
	KVS_OP_HOST_ALLOC,
	KVS_OP__COUNT
};

kvs_drv_t *kvs_fault_open(kvs_drv_t *inner);
int kvs_fault_fail_nth(kvs_drv_t *fault, enum kvs_drv_op op, uint64_t nth, int err);
int kvs_fault_fail_random(kvs_drv_t *fault, enum kvs_drv_op op, double p,
			  uint64_t seed, int err);
int kvs_fault_clear(kvs_drv_t *fault);
uint64_t kvs_fault_calls(const kvs_drv_t *fault, enum kvs_drv_op op);
uint64_t kvs_fault_injected(const kvs_drv_t *fault);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_FAULT_H */
