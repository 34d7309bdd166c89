/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_blockhash.c - block hashing throughput in tokens/s, 16
 * tokens a block, for each hash function, beside the raw hash (SHA-256,
 * xxh3-128) of the same CBOR bytes in the same run: the difference is the
 * encoder and the chaining.  Every figure printed is measured by the run
 * itself (vLLM's Python hashing is not: measure it with vLLM).
 * Usage: bench_blockhash [tokens (default 4M)]
 */
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvslab.h"
#include "benchutil.h"

#ifdef KVS_HAVE_LIBCRYPTO
#include <openssl/sha.h>
#endif
#ifdef KVS_HAVE_XXHASH
#include <xxhash.h>
#endif

#define BS 16
#define REPS 5

static volatile uint8_t sink;

static double run_fn(int fn, const char *name, const int32_t *tok, size_t ntok,
		     kvs_block_hash_t *hashes)
{
	kvs_block_hasher_attr_t a;
	kvs_block_hasher_t *h;
	uint64_t t[REPS];
	double mtps;

	kvs_block_hasher_attr_init(&a);
	a.fn = fn;
	a.block_size = BS;
	a.seed = "0";
	a.seed_len = 1;
	h = kvs_block_hasher_create(&a);
	if (!h) {
		printf("%-22s not built (%s)\n", name, strerror(errno));
		return 0;
	}
	for (int r = 0; r < REPS; r++) {
		size_t n = 0;
		uint64_t t0 = bench_ns();

		kvs_block_hash_request(h, tok, ntok, NULL, hashes, ntok / BS, &n);
		t[r] = bench_ns() - t0;
		sink ^= hashes[n - 1].bytes[0];
	}
	mtps = (double)ntok / (double)bench_quantile(t, REPS, 0.5) * 1e3;
	printf("%-22s %8.1f M tokens/s\n", name, mtps);
	kvs_block_hasher_destroy(h);
	return mtps;
}

/* The CBOR of a 16-token block with a 32-byte parent and no extras, as the
 * raw hashes get it: 1 + 33 + 1 + 16 tokens + 1 bytes. */
static size_t block_bytes(const int32_t *tok, uint8_t *buf)
{
	size_t n = 0;

	buf[n++] = 0x83;
	buf[n++] = 0x58;
	buf[n++] = 32;
	memset(buf + n, 0xab, 32);
	n += 32;
	buf[n++] = 0x90;
	for (int i = 0; i < BS; i++) {
		uint32_t v = (uint32_t)tok[i];

		if (v < 24) {
			buf[n++] = (uint8_t)v;
		} else if (v < 256) {
			buf[n++] = 0x18;
			buf[n++] = (uint8_t)v;
		} else if (v < 65536) {
			buf[n++] = 0x19;
			buf[n++] = (uint8_t)(v >> 8);
			buf[n++] = (uint8_t)v;
		} else {
			buf[n++] = 0x1a;
			for (int k = 3; k >= 0; k--)
				buf[n++] = (uint8_t)(v >> (8 * k));
		}
	}
	buf[n++] = 0xf6;
	return n;
}

int main(int argc, char **argv)
{
	size_t ntok = argc > 1 ? strtoull(argv[1], NULL, 0) : 4u << 20;
	size_t nblk;
	int32_t *tok;
	kvs_block_hash_t *hashes;
	uint8_t *enc;
	size_t *len, stride = 128;
	uint64_t x = 88172645463325252ull;

	ntok -= ntok % BS;
	nblk = ntok / BS;
	tok = malloc(ntok * sizeof(*tok));
	hashes = malloc(nblk * sizeof(*hashes));
	enc = malloc(nblk * stride);
	len = malloc(nblk * sizeof(*len));
	if (!tok || !hashes || !enc || !len || nblk == 0)
		return 1;
	for (size_t i = 0; i < ntok; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		tok[i] = (int32_t)(x % 152000);	/* a Qwen-sized vocabulary */
	}
	for (size_t b = 0; b < nblk; b++)
		len[b] = block_bytes(tok + b * BS, enc + b * stride);

	printf("block hashing, %zu tokens in blocks of %d (median of %d)\n", ntok, BS, REPS);
	run_fn(KVS_HASH_SHA256_CBOR, "sha256_cbor", tok, ntok, hashes);
	run_fn(KVS_HASH_SHA256_CBOR_64, "sha256_cbor_64", tok, ntok, hashes);
	run_fn(KVS_HASH_XXH3_128, "xxh3_128 (cbor)", tok, ntok, hashes);
#ifdef KVS_HAVE_LIBCRYPTO
	{
		uint64_t t[REPS];
		uint8_t d[32];

		for (int r = 0; r < REPS; r++) {
			uint64_t t0 = bench_ns();

			for (size_t b = 0; b < nblk; b++) {
				SHA256_CTX c;

				SHA256_Init(&c);
				SHA256_Update(&c, enc + b * stride, len[b]);
				SHA256_Final(d, &c);
			}
			t[r] = bench_ns() - t0;
			sink ^= d[0];
		}
		printf("%-22s %8.1f M tokens/s (raw SHA-256 of the same bytes)\n", "raw sha256",
		       (double)ntok / (double)bench_quantile(t, REPS, 0.5) * 1e3);
	}
#endif
#ifdef KVS_HAVE_XXHASH
	{
		uint64_t t[REPS];
		XXH128_hash_t d = { 0, 0 };

		for (int r = 0; r < REPS; r++) {
			uint64_t t0 = bench_ns();

			for (size_t b = 0; b < nblk; b++)
				d = XXH3_128bits(enc + b * stride, len[b]);
			t[r] = bench_ns() - t0;
			sink ^= (uint8_t)d.low64;
		}
		printf("%-22s %8.1f M tokens/s (raw xxh3-128 of the same bytes)\n", "raw xxh3_128",
		       (double)ntok / (double)bench_quantile(t, REPS, 0.5) * 1e3);
	}
#endif
	free(tok);
	free(hashes);
	free(enc);
	free(len);
	return 0;
}
