/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/reqtab_int.h - the request table's calls for the library's own
 * layers above it: the flows store a whole call's entries into the mirror
 * as they go and send them to the device in one submission at its end.
 */
#ifndef KVSLAB_MEM_REQTAB_INT_H
#define KVSLAB_MEM_REQTAB_INT_H

#include "kvslab/reqtab.h"

int kvsi_reqtab_store(struct kvs_reqtab *t, uint32_t slot, uint32_t pos, uint32_t n,
		      const int32_t *locs);
int kvsi_reqtab_push(struct kvs_reqtab *t, const kvs_reqtab_write_t *w, size_t n);

#endif /* KVSLAB_MEM_REQTAB_INT_H */
