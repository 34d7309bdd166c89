/* SPDX-License-Identifier: MIT */
/*
 * kvslab/blockhash.h - vLLM v1's prefix-caching block hashes: each full
 * block of a request is named by a hash chained over its prefix, byte for
 * byte as vLLM computes them (sha256_cbor, xxhash_cbor, and its older
 * sha256_cbor_64bit chain).  See kvs_block_hasher_create(3), kvs_block_hash(3).
 */
#ifndef KVSLAB_BLOCKHASH_H
#define KVSLAB_BLOCKHASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Hash functions; a function whose library was not found at build time
 * makes kvs_block_hasher_create() fail with ENOTSUP. */
enum kvs_hash_fn {
	KVS_HASH_SHA256_CBOR = 1,	/* vLLM sha256_cbor: 32 bytes */
	KVS_HASH_SHA256_CBOR_64 = 2,	/* vLLM's old sha256_cbor_64bit chain: 8 bytes */
	KVS_HASH_XXH3_128 = 3,		/* vLLM xxhash_cbor: 16 bytes */
};

#define KVS_BLOCK_HASH_MAX 32

/* A block hash: the digest's first len bytes, as vLLM's bytes object holds
 * them (the 64-bit form: the integer big-endian). */
#ifndef KVS_BLOCK_HASH_DEFINED
#define KVS_BLOCK_HASH_DEFINED
typedef struct kvs_block_hash {
	uint8_t bytes[32];
	uint32_t len;
} kvs_block_hash_t;
#endif

/* A multimodal item of the request (vLLM's mm feature): its identifier (the
 * mm hash) and the tokens it covers, counted from the request's start. */
typedef struct kvs_block_mm {
	const char *identifier;
	uint64_t offset;
	uint64_t length;
} kvs_block_mm_t;

/* What besides the tokens names a request's blocks; NULL members: none. */
typedef struct kvs_block_extra {
	const char *lora_name;		/* every block; "" counts */
	const kvs_block_mm_t *mm;	/* nmm items, sorted by offset, disjoint */
	size_t nmm;
	const char *cache_salt;		/* first block only; "" is none */
} kvs_block_extra_t;

typedef struct kvs_block_hasher_attr {
	int fn;				/* enum kvs_hash_fn */
	uint32_t block_size;		/* tokens per block, >= 1 */
	const void *seed;		/* PYTHONHASHSEED's bytes, or NULL */
	size_t seed_len;
	const kvs_block_hash_t *root;	/* the root hash itself, or NULL (xxh3: 16 or 32 bytes) */
} kvs_block_hasher_attr_t;

typedef struct kvs_block_hasher kvs_block_hasher_t;

void kvs_block_hasher_attr_init(kvs_block_hasher_attr_t *attr);
kvs_block_hasher_t *kvs_block_hasher_create(const kvs_block_hasher_attr_t *attr);
int kvs_block_hasher_destroy(kvs_block_hasher_t *h);
int kvs_block_hasher_root(const kvs_block_hasher_t *h, kvs_block_hash_t *root);
uint64_t kvs_block_hasher_blocks(const kvs_block_hasher_t *h);

int kvs_block_hash(const kvs_block_hasher_t *h, const kvs_block_hash_t *parent,
		   const int32_t *tokens, uint64_t start, const kvs_block_extra_t *extra,
		   kvs_block_hash_t *out);
int kvs_block_hash_request(const kvs_block_hasher_t *h, const int32_t *tokens,
			   size_t ntokens, const kvs_block_extra_t *extra,
			   kvs_block_hash_t *hashes, size_t max_hashes, size_t *nhashes);
uint64_t kvs_block_hash_u64(const kvs_block_hash_t *hash);

#ifdef __cplusplus
}
#endif

#endif /* KVSLAB_BLOCKHASH_H */
