// SPDX-License-Identifier: MIT
// The public headers, alone, in C++: the fault header first (it must bring
// <kvslab/drv.h> itself), then the umbrella header.
#include <kvslab/fault.h>

#include <kvslab.h>

extern "C" int kvs_cxx_header_ok(void);

extern "C" int kvs_cxx_header_ok(void)
{
	kvs_drv_attr_t attr;
	kvs_drv_attr_init(&attr);
	return static_cast<int>(sizeof(attr));
}

extern "C" int kvs_cxx_fault_ok(void);

extern "C" int kvs_cxx_fault_ok(void)
{
	enum kvs_drv_op op = KVS_OP__COUNT;
	return kvs_fault_injected(nullptr) == 0 ? static_cast<int>(op) : -1;
}
