// SPDX-License-Identifier: MIT
/*
 * lib/cache/blockhash.c - vLLM v1's prefix-caching block hashes.
 *
 * vLLM names every full block of a request by
 *
 *	H((parent, tokens, extra_keys))
 *
 * where parent is the previous block's hash (NONE_HASH, the root, for the
 * first block), tokens the tuple of the block's token ids and extra_keys
 * None or a tuple of, in this order: the LoRA name; one (identifier,
 * offset of the item's first token minus the block's first token) pair per
 * multimodal item the block overlaps; the cache salt, on the first block
 * only (vllm/v1/core/kv_cache_utils.py: generate_block_hash_extra_keys,
 * hash_block_tokens).  H is SHA-256 or xxh3-128 of the canonical CBOR
 * encoding of that tuple (vllm/utils/hashing.py: sha256_cbor, xxhash_cbor).
 * vLLM's older sha256_cbor_64bit (--prefix-caching-hash-algo, until
 * vLLM 0.10), which llm-d's first indexers reproduced, chains the low 64
 * bits instead: the parent is the previous block's 64-bit value as a CBOR
 * unsigned integer, the hash the last 8 bytes of the SHA-256 digest read
 * big-endian.  Today's 64-bit keys (vLLM's int block hashes in KV events,
 * llm-d's engine keys) are the low 64 bits of sha256_cbor hashes instead:
 * kvs_block_hash_u64().
 *
 * The encoder writes CBOR into a small buffer on the stack: a block of 16
 * tokens encodes in under 200 bytes and is hashed in one call.  Longer
 * encodings (large blocks, many extras) stream the full buffer into an
 * incremental hash state and go on.  Nothing is allocated per block.
 *
 * A hasher is immutable after kvs_block_hasher_create() but for a relaxed
 * atomic count of the blocks it hashed, so every call on it may run from
 * any number of threads at once.
 */
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common.h"
#include "kvslab/blockhash.h"

#ifdef KVS_HAVE_LIBCRYPTO
#include <openssl/sha.h>
#endif
#ifdef KVS_HAVE_XXHASH
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#endif

struct kvs_block_hasher {
	int fn;
	uint32_t block_size;
	uint32_t len;			/* a hash's bytes (the root's may differ) */
	kvs_block_hash_t root;
	atomic_uint_fast64_t blocks;
};

/* ------------------------------------------------------------- the encoder */

#define ENC_BUF 1024

struct enc {
	int fn;
	bool streaming;
	size_t n;
	union {
#ifdef KVS_HAVE_LIBCRYPTO
		SHA256_CTX sha;
#endif
#ifdef KVS_HAVE_XXHASH
		XXH3_state_t xxh;
#endif
		char none;
	} st;
	uint8_t buf[ENC_BUF];
};

static void enc_flush(struct enc *e)
{
	if (!e->streaming) {
		e->streaming = true;
#ifdef KVS_HAVE_LIBCRYPTO
		if (e->fn != KVS_HASH_XXH3_128)
			SHA256_Init(&e->st.sha);
#endif
#ifdef KVS_HAVE_XXHASH
		if (e->fn == KVS_HASH_XXH3_128)
			XXH3_128bits_reset(&e->st.xxh);
#endif
	}
#ifdef KVS_HAVE_LIBCRYPTO
	if (e->fn != KVS_HASH_XXH3_128)
		SHA256_Update(&e->st.sha, e->buf, e->n);
#endif
#ifdef KVS_HAVE_XXHASH
	if (e->fn == KVS_HASH_XXH3_128)
		XXH3_128bits_update(&e->st.xxh, e->buf, e->n);
#endif
	e->n = 0;
}

static inline void enc_bytes(struct enc *e, const void *p, size_t len)
{
	const uint8_t *s = p;

	while (len) {
		size_t k = ENC_BUF - e->n;

		if (k == 0) {
			enc_flush(e);
			k = ENC_BUF;
		}
		if (k > len)
			k = len;
		memcpy(e->buf + e->n, s, k);
		e->n += k;
		s += k;
		len -= k;
	}
}

/* A head: major type @major with argument @v in its shortest form, as
 * canonical CBOR (RFC 8949, 4.2.1) requires.  Written in place: this is
 * the encoder's inner loop, once per token. */
static inline __attribute__((always_inline)) void enc_head(struct enc *e, unsigned int major,
							   uint64_t v)
{
	uint8_t *p;

	if (unlikely(ENC_BUF - e->n < 9))
		enc_flush(e);
	p = e->buf + e->n;
	major <<= 5;
	if (v < 24) {
		p[0] = (uint8_t)(major | v);
		e->n += 1;
	} else if (v <= 0xff) {
		p[0] = (uint8_t)(major | 24);
		p[1] = (uint8_t)v;
		e->n += 2;
	} else if (v <= 0xffff) {
		p[0] = (uint8_t)(major | 25);
		p[1] = (uint8_t)(v >> 8);
		p[2] = (uint8_t)v;
		e->n += 3;
	} else if (v <= 0xffffffffu) {
		uint32_t be = __builtin_bswap32((uint32_t)v);

		p[0] = (uint8_t)(major | 26);
		memcpy(p + 1, &be, 4);
		e->n += 5;
	} else {
		uint64_t be = __builtin_bswap64(v);

		p[0] = (uint8_t)(major | 27);
		memcpy(p + 1, &be, 8);
		e->n += 9;
	}
}

static inline __attribute__((always_inline)) void enc_int(struct enc *e, int64_t v)
{
	if (v >= 0)
		enc_head(e, 0, (uint64_t)v);
	else
		enc_head(e, 1, (uint64_t)(-(v + 1)));
}

static void enc_text(struct enc *e, const char *s)
{
	size_t len = strlen(s);

	enc_head(e, 3, len);
	enc_bytes(e, s, len);
}

static void enc_null(struct enc *e)
{
	uint8_t b = 0xf6;

	enc_bytes(e, &b, 1);
}

static void enc_final(struct enc *e, kvs_block_hash_t *out)
{
#ifdef KVS_HAVE_LIBCRYPTO
	if (e->fn != KVS_HASH_XXH3_128) {
		uint8_t d[SHA256_DIGEST_LENGTH];

		/* Not the one-shot SHA256(): OpenSSL 3 looks the algorithm up
		 * on every call of it, which costs more than the hash. */
		if (!e->streaming)
			SHA256_Init(&e->st.sha);
		if (e->n)
			SHA256_Update(&e->st.sha, e->buf, e->n);
		SHA256_Final(d, &e->st.sha);
		if (e->fn == KVS_HASH_SHA256_CBOR) {
			memcpy(out->bytes, d, 32);
			out->len = 32;
		} else {
			memset(out->bytes, 0, sizeof(out->bytes));
			memcpy(out->bytes, d + 24, 8);
			out->len = 8;
		}
	}
#endif
#ifdef KVS_HAVE_XXHASH
	if (e->fn == KVS_HASH_XXH3_128) {
		XXH128_hash_t x;

		if (e->streaming) {
			if (e->n)
				XXH3_128bits_update(&e->st.xxh, e->buf, e->n);
			x = XXH3_128bits_digest(&e->st.xxh);
		} else {
			x = XXH3_128bits(e->buf, e->n);
		}
		memset(out->bytes, 0, sizeof(out->bytes));
		/* Python's xxh3_128_digest(): the canonical, big-endian form. */
		XXH128_canonicalFromHash((XXH128_canonical_t *)out->bytes, x);
		out->len = 16;
	}
#endif
	(void)out;
}

static uint32_t hash_len(int fn)
{
	switch (fn) {
	case KVS_HASH_SHA256_CBOR:
		return 32;
	case KVS_HASH_SHA256_CBOR_64:
		return 8;
	case KVS_HASH_XXH3_128:
		return 16;
	}
	return 0;
}

static bool fn_built(int fn)
{
	switch (fn) {
	case KVS_HASH_SHA256_CBOR:
	case KVS_HASH_SHA256_CBOR_64:
#ifdef KVS_HAVE_LIBCRYPTO
		return true;
#else
		return false;
#endif
	case KVS_HASH_XXH3_128:
#ifdef KVS_HAVE_XXHASH
		return true;
#else
		return false;
#endif
	}
	return false;
}

/* The parent as the tuple's first element: vLLM's bytes, or llm-d's int. */
static void enc_parent(struct enc *e, const kvs_block_hash_t *p)
{
	if (e->fn == KVS_HASH_SHA256_CBOR_64) {
		enc_head(e, 0, kvs_block_hash_u64(p));
	} else {
		enc_head(e, 2, p->len);
		enc_bytes(e, p->bytes, p->len);
	}
}

/* ------------------------------------------------------------- extra keys */

/* First item that may overlap a block starting at @start: items are sorted
 * and disjoint, so their ends are sorted too. */
static size_t mm_first(const kvs_block_extra_t *x, uint64_t start)
{
	size_t lo = 0, hi = x->nmm;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (x->mm[mid].offset + x->mm[mid].length <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool extra_valid(const kvs_block_extra_t *x)
{
	if (!x)
		return true;
	if (x->nmm && !x->mm)
		return false;
	for (size_t i = 0; i < x->nmm; i++) {
		const kvs_block_mm_t *m = &x->mm[i];

		if (!m->identifier || m->offset > (uint64_t)INT64_MAX || m->length > (uint64_t)INT64_MAX - m->offset)
			return false;
		if (i && m->offset < x->mm[i - 1].offset + x->mm[i - 1].length)
			return false;
	}
	return true;
}

/*
 * The whole tuple of one block: [parent, [tokens...], extra_keys or null].
 * The array of extra keys holds what generate_block_hash_extra_keys()
 * gives, in its order: LoRA name, mm pairs, salt.
 */
static void hash_one(const struct kvs_block_hasher *h, const kvs_block_hash_t *parent,
		     const int32_t *tokens, uint64_t start, const kvs_block_extra_t *x,
		     kvs_block_hash_t *out)
{
	struct enc e;
	uint64_t end = start + h->block_size;
	size_t nkeys = 0, mm0 = 0, mm1 = 0;
	bool salt = false;

	e.fn = h->fn;
	e.streaming = false;
	e.n = 0;

	if (x) {
		if (x->lora_name)
			nkeys++;
		if (x->nmm) {
			mm0 = mm_first(x, start);
			for (mm1 = mm0; mm1 < x->nmm && x->mm[mm1].offset < end; mm1++)
				;
			nkeys += mm1 - mm0;
		}
		salt = start == 0 && x->cache_salt && x->cache_salt[0];
		nkeys += salt;
	}

	enc_head(&e, 4, 3);
	enc_parent(&e, parent ? parent : &h->root);
	enc_head(&e, 4, h->block_size);
	for (uint32_t i = 0; i < h->block_size; i++)
		enc_int(&e, tokens[i]);
	if (!nkeys) {
		enc_null(&e);
	} else {
		enc_head(&e, 4, nkeys);
		if (x->lora_name)
			enc_text(&e, x->lora_name);
		for (size_t i = mm0; i < mm1; i++) {
			enc_head(&e, 4, 2);
			enc_text(&e, x->mm[i].identifier);
			enc_int(&e, (int64_t)x->mm[i].offset - (int64_t)start);
		}
		if (salt)
			enc_text(&e, x->cache_salt);
	}
	enc_final(&e, out);
}

/* ------------------------------------------------------------- the hasher */

/**
 * kvs_block_hasher_attr_init() - fill @attr with the defaults.
 * @attr: attributes to initialize.
 *
 * SHA-256 over CBOR (vLLM's default), blocks of 16 tokens, a random root.
 *
 * Context: MT-Safe.
 */
KVS_EXPORT void kvs_block_hasher_attr_init(kvs_block_hasher_attr_t *attr)
{
	if (!attr)
		return;
	memset(attr, 0, sizeof(*attr));
	attr->fn = KVS_HASH_SHA256_CBOR;
	attr->block_size = 16;
}

static int random_bytes(void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t r = getrandom(b, n, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* A root may be a hash of the function (a seeded root, or one handed over);
 * for xxh3-128 also vLLM's unseeded NONE_HASH, 32 random bytes. */
static bool root_len_ok(int fn, uint32_t len)
{
	return len == hash_len(fn) || (fn == KVS_HASH_XXH3_128 && len == 32);
}

/**
 * kvs_block_hasher_create() - create a block hasher.
 * @attr: function, block size and root; NULL for the defaults.
 *
 * The root (vLLM's NONE_HASH) is the parent of every request's first block:
 * two processes produce the same hashes only if they share it.  It is
 * @attr->root when given; else, with @attr->seed, the hash of the seed as a
 * CBOR text string (vLLM's init_none_hash with PYTHONHASHSEED set, and
 * llm-d's HashSeed); else 32 random bytes from getrandom(2), as vLLM's
 * os.urandom(32) (8 for the 64-bit chain).
 *
 * Context: MT-Safe.
 * Return: the hasher, or NULL with errno EINVAL (unknown function, zero
 * block size, both a seed and a root, a root of the wrong length (the
 * function's hash length; for xxh3-128 also 32 bytes), a seed
 * pointer NULL with a length), ENOTSUP (the function's library was not
 * found when kvslab was built), ENOMEM, or getrandom's errno.
 */
KVS_EXPORT kvs_block_hasher_t *kvs_block_hasher_create(const kvs_block_hasher_attr_t *attr)
{
	kvs_block_hasher_attr_t def;
	struct kvs_block_hasher *h;
	uint32_t len;

	if (!attr) {
		kvs_block_hasher_attr_init(&def);
		attr = &def;
	}
	len = hash_len(attr->fn);
	if (!len || attr->block_size == 0 || (attr->seed_len && !attr->seed) ||
	    (attr->seed && attr->root) || (attr->root && !root_len_ok(attr->fn, attr->root->len))) {
		errno = EINVAL;
		return NULL;
	}
	if (!fn_built(attr->fn)) {
		errno = ENOTSUP;
		return NULL;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->fn = attr->fn;
	h->block_size = attr->block_size;
	h->len = len;
	atomic_init(&h->blocks, 0);
	if (attr->root) {
		h->root = *attr->root;
	} else if (attr->seed) {
		struct enc e = { .fn = attr->fn };

		enc_head(&e, 3, attr->seed_len);
		enc_bytes(&e, attr->seed, attr->seed_len);
		enc_final(&e, &h->root);
	} else {
		/* vLLM's unseeded NONE_HASH is os.urandom(32) whatever the
		 * function; the 64-bit chain's parent is an integer. */
		h->root.len = attr->fn == KVS_HASH_SHA256_CBOR_64 ? 8 : 32;
		if (random_bytes(h->root.bytes, h->root.len) < 0) {
			int err = errno;

			free(h);
			errno = err;
			return NULL;
		}
	}
	return h;
}

/**
 * kvs_block_hasher_destroy() - free a hasher.
 * @h: hasher, or NULL.
 *
 * Context: MT-Unsafe: the last call on @h.
 * Return: 0.
 */
KVS_EXPORT int kvs_block_hasher_destroy(kvs_block_hasher_t *h)
{
	free(h);
	return 0;
}

/**
 * kvs_block_hasher_root() - the root hash of @h (vLLM's NONE_HASH).
 * @h: hasher.
 * @root: where to store it.
 *
 * Another process given this root (kvs_block_hasher_attr_t.root) and the
 * same function and block size produces the same hashes.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (NULL argument).
 */
KVS_EXPORT int kvs_block_hasher_root(const kvs_block_hasher_t *h, kvs_block_hash_t *root)
{
	if (!h || !root) {
		errno = EINVAL;
		return -1;
	}
	*root = h->root;
	return 0;
}

/**
 * kvs_block_hasher_blocks() - how many blocks @h hashed.
 * @h: hasher.
 *
 * Context: MT-Safe; a relaxed count, exact once the calls counted returned.
 * Return: the count; 0 for NULL.
 */
KVS_EXPORT uint64_t kvs_block_hasher_blocks(const kvs_block_hasher_t *h)
{
	if (!h)
		return 0;
	return atomic_load_explicit(&((struct kvs_block_hasher *)h)->blocks,
				    memory_order_relaxed);
}

static void count(const struct kvs_block_hasher *h, uint64_t n)
{
	atomic_fetch_add_explicit(&((struct kvs_block_hasher *)h)->blocks, n,
				  memory_order_relaxed);
}

/**
 * kvs_block_hash() - hash one full block.
 * @h: hasher.
 * @parent: the previous block's hash; NULL for the first block.
 * @tokens: the block's block_size token ids.
 * @start: the index of the block's first token in the request, a multiple
 *	of the block size; 0 exactly when @parent is NULL.
 * @extra: the request's extra keys, or NULL.
 * @out: where the hash goes.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL (NULL @h, @tokens or @out; @start not
 * a multiple of the block size, or 0 with a parent, or not 0 without one;
 * a parent of another length; multimodal items unsorted, overlapping, with
 * no identifier, or past INT64_MAX).
 */
KVS_EXPORT int kvs_block_hash(const kvs_block_hasher_t *h, const kvs_block_hash_t *parent,
			      const int32_t *tokens, uint64_t start,
			      const kvs_block_extra_t *extra, kvs_block_hash_t *out)
{
	if (!h || !tokens || !out || start % h->block_size || (start == 0) != !parent ||
	    start > (uint64_t)INT64_MAX - h->block_size || (parent && parent->len != h->len) ||
	    !extra_valid(extra)) {
		errno = EINVAL;
		return -1;
	}
	hash_one(h, parent, tokens, start, extra, out);
	count(h, 1);
	return 0;
}

/**
 * kvs_block_hash_request() - hash a request's new full blocks.
 * @h: hasher.
 * @tokens: all the request's tokens so far (prompt and output).
 * @ntokens: their count.
 * @extra: the request's extra keys, or NULL; the same on every call.
 * @hashes: the request's block hashes, @max_hashes entries; the first
 *	*@nhashes were computed by earlier calls and are not recomputed.
 * @max_hashes: room in @hashes.
 * @nhashes: in: the hashes already in @hashes; out: the hashes there now.
 *
 * Hashes each block that is full and not yet hashed, as vLLM's request
 * block hasher does after prefill and each decode step: a call adds a hash
 * only when a block fills, and a partial block is never hashed.  Stops at
 * @max_hashes blocks.
 *
 * Context: MT-Safe; calls for one request must not overlap.
 * Return: 0, or -1 with errno EINVAL (a NULL pointer, *@nhashes more than
 * @max_hashes or more than the full blocks of @ntokens, bad @extra as in
 * kvs_block_hash(), a hash in @hashes of another length).
 */
KVS_EXPORT int kvs_block_hash_request(const kvs_block_hasher_t *h, const int32_t *tokens,
				      size_t ntokens, const kvs_block_extra_t *extra,
				      kvs_block_hash_t *hashes, size_t max_hashes,
				      size_t *nhashes)
{
	size_t n, full;

	if (!h || (!tokens && ntokens) || !hashes || !nhashes || !extra_valid(extra)) {
		errno = EINVAL;
		return -1;
	}
	n = *nhashes;
	full = ntokens / h->block_size;
	if (n > max_hashes || n > full || (n && hashes[n - 1].len != h->len)) {
		errno = EINVAL;
		return -1;
	}
	if (full > max_hashes)
		full = max_hashes;
	for (size_t i = n; i < full; i++) {
		uint64_t start = (uint64_t)i * h->block_size;

		hash_one(h, i ? &hashes[i - 1] : NULL, tokens + start, start, extra, &hashes[i]);
	}
	if (full > n)
		count(h, full - n);
	*nhashes = full;
	return 0;
}

/**
 * kvs_block_hash_u64() - the 64-bit integer form of a hash.
 * @hash: a hash.
 *
 * int.from_bytes(hash, "big") & (2**64 - 1): its last 8 bytes read
 * big-endian, what vLLM puts in KV events with
 * VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES and llm-d indexes.  For
 * KVS_HASH_SHA256_CBOR_64 hashes, the hash's value itself.
 *
 * Context: MT-Safe.
 * Return: the value; 0 for NULL or an empty hash.
 */
KVS_EXPORT uint64_t kvs_block_hash_u64(const kvs_block_hash_t *hash)
{
	uint64_t v = 0;
	uint32_t len, i;

	if (!hash)
		return 0;
	len = hash->len > KVS_BLOCK_HASH_MAX ? KVS_BLOCK_HASH_MAX : hash->len;
	for (i = len > 8 ? len - 8 : 0; i < len; i++)
		v = v << 8 | hash->bytes[i];
	return v;
}
