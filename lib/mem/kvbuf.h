/* SPDX-License-Identifier: MIT */
/*
 * lib/mem/kvbuf.h - how a pool numbers its per-layer buffers, shared with
 * the layers that keep buffers of the same shape (the host pool): MLA
 * keeps one buffer a layer (KVS_KV_LATENT, or KVS_KV_K for the same), the
 * other attentions two (KVS_KV_K and KVS_KV_V), numbered layer by layer.
 */
#ifndef KVSLAB_MEM_KVBUF_H
#define KVSLAB_MEM_KVBUF_H

#include <stdbool.h>
#include <stdint.h>

/*
 * The index of buffer (@layer, @which) among @layers layers of one (@mla)
 * or two buffers each into *@b: 0, or -1 with errno EINVAL (a layer out of
 * range or a @which the attention has not).
 */
int kvsi_kv_buffer_index(bool mla, uint32_t layers, uint32_t layer, int which, uint32_t *b);

#endif /* KVSLAB_MEM_KVBUF_H */
