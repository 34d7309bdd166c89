// SPDX-License-Identifier: MIT
// The public header, alone, in C++.
#include <kvslab.h>

extern "C" int kvs_cxx_header_ok(void);

extern "C" int kvs_cxx_header_ok(void)
{
	kvs_drv_attr_t attr;
	kvs_drv_attr_init(&attr);
	return static_cast<int>(sizeof(attr));
}
