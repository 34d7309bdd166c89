/* SPDX-License-Identifier: MIT */
/*
 * kvslab/reqtab.h - the request table (SGLang's req_to_token_pool): one row
 * per running request, mapping its token positions to KV locations, in
 * driver memory that attention kernels read, with a lock-free allocator of
 * rows.  See kvs_reqtab_create(3), kvs_reqtab_alloc(3), kvs_reqtab_write(3).
 */
#ifndef KVSLAB_REQTAB_H
#define KVSLAB_REQTAB_H

#include <stddef.h>
#include <stdint.h>

#include <kvslab/drv.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_reqtab kvs_reqtab_t;

/** One write of kvs_reqtab_write_batch(): entries pos .. pos + n - 1 of
 *  slot's row become locs[0 .. n - 1]. */
typedef struct kvs_reqtab_write {
	uint32_t slot;
	uint32_t pos;
	uint32_t n;
	const int32_t *locs;
} kvs_reqtab_write_t;

kvs_reqtab_t *kvs_reqtab_create(kvs_drv_t *drv, uint32_t max_reqs, uint32_t max_context);
int kvs_reqtab_destroy(kvs_reqtab_t *tab);

int kvs_reqtab_alloc(kvs_reqtab_t *tab, uint32_t n, uint32_t *slots);
int kvs_reqtab_free(kvs_reqtab_t *tab, uint32_t slot);
uint32_t kvs_reqtab_available(const kvs_reqtab_t *tab);

int kvs_reqtab_write(kvs_reqtab_t *tab, uint32_t slot, uint32_t pos, uint32_t n,
		     const int32_t *locs);
int kvs_reqtab_write_batch(kvs_reqtab_t *tab, const kvs_reqtab_write_t *w, size_t n);
int kvs_reqtab_read(const kvs_reqtab_t *tab, uint32_t slot, uint32_t pos, uint32_t n,
		    int32_t *out);
const int32_t *kvs_reqtab_row(const kvs_reqtab_t *tab, uint32_t slot);
const int32_t *kvs_reqtab_mirror(const kvs_reqtab_t *tab);
int kvs_reqtab_sync(kvs_reqtab_t *tab);

int kvs_reqtab_table(const kvs_reqtab_t *tab, kvs_devptr_t *ptr, size_t *row_stride_bytes);
uint32_t kvs_reqtab_max_reqs(const kvs_reqtab_t *tab);
uint32_t kvs_reqtab_max_context(const kvs_reqtab_t *tab);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_REQTAB_H */
