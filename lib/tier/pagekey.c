/* SPDX-License-Identifier: MIT */
/*
 * lib/tier/pagekey.c - the storage tier's page keys: kvs_page_hash(),
 * kvs_page_hashes() and kvs_page_key_hex().
 *
 * Page keys are SGLang HiCache's (get_hash_str): SHA-256 over the previous
 * page's key as 32 raw bytes (nothing for the first page), then each token
 * id as 4 bytes little-endian.  Chained, one key names a whole prefix.
 * Built without libcrypto, the calls fail with ENOTSUP.
 *
 * Locking: none; pure functions of their arguments.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef KVS_HAVE_LIBCRYPTO
/* The low-level SHA-256 calls, as lib/cache/blockhash.c uses them: OpenSSL 3's
 * EVP look-up costs more than a page's hash. */
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/sha.h>
#endif

#include "internal.h"
#include "kvslab/storage.h"

static int sha_chain(const kvs_page_key_t *prev, const int32_t *tokens, size_t n,
		     kvs_page_key_t *key)
{
#ifdef KVS_HAVE_LIBCRYPTO
	SHA256_CTX c;

	SHA256_Init(&c);
	if (prev)
		SHA256_Update(&c, prev->b, KVS_PAGE_KEY_BYTES);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/* The tokens already are 4 bytes little-endian each. */
	SHA256_Update(&c, tokens, 4 * n);
#else
	{
		uint8_t buf[4 * 64];
		size_t i, k = 0;

		for (i = 0; i < n; i++) {
			uint32_t t = (uint32_t)tokens[i];

			buf[k++] = (uint8_t)t;
			buf[k++] = (uint8_t)(t >> 8);
			buf[k++] = (uint8_t)(t >> 16);
			buf[k++] = (uint8_t)(t >> 24);
			if (k == sizeof(buf)) {
				SHA256_Update(&c, buf, k);
				k = 0;
			}
		}
		SHA256_Update(&c, buf, k);
	}
#endif
	SHA256_Final(key->b, &c);
	return 0;
#else
	(void)prev;
	(void)tokens;
	(void)n;
	(void)key;
	errno = ENOTSUP;
	return -1;
#endif
}

/**
 * kvs_page_hash() - the key of one page.
 * @prev: the key of the page before it, or NULL for the first page.
 * @tokens: the page's token ids.
 * @n: tokens (the page size; any count is hashed as given).
 * @key: receives the key.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL, or ENOTSUP (built without libcrypto).
 */
KVS_EXPORT int kvs_page_hash(const kvs_page_key_t *prev, const int32_t *tokens, size_t n,
			     kvs_page_key_t *key)
{
	if (!key || (n && !tokens))
		return kvs_fail(EINVAL);
	return sha_chain(prev, tokens, n, key);
}

/**
 * kvs_page_hashes() - the chained keys of every whole page of @tokens.
 * @prev: the key of the page before @tokens, or NULL.
 * @tokens: token ids.
 * @ntokens: tokens; a partial last page is not hashed.
 * @page_size: tokens per page.
 * @keys: receives ntokens / page_size keys.
 *
 * Context: any thread.
 * Return: the keys written, or -1 with errno EINVAL or ENOTSUP.
 */
KVS_EXPORT ssize_t kvs_page_hashes(const kvs_page_key_t *prev, const int32_t *tokens,
				   size_t ntokens, uint32_t page_size, kvs_page_key_t *keys)
{
	size_t np, i;

	if (page_size == 0 || (ntokens >= page_size && (!tokens || !keys)))
		return kvs_fail(EINVAL);
	np = ntokens / page_size;
	for (i = 0; i < np; i++) {
		if (sha_chain(i ? &keys[i - 1] : prev, tokens + i * page_size, page_size,
			      &keys[i]) < 0)
			return -1;
	}
	return (ssize_t)np;
}

/**
 * kvs_page_key_hex() - a key as 64 lowercase hex digits (SGLang's
 * hexdigest()).
 * @key: key.
 * @hex: receives the digits and a NUL.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_page_key_hex(const kvs_page_key_t *key, char hex[2 * KVS_PAGE_KEY_BYTES + 1])
{
	static const char d[] = "0123456789abcdef";
	int i;

	if (!key || !hex)
		return kvs_fail(EINVAL);
	for (i = 0; i < KVS_PAGE_KEY_BYTES; i++) {
		hex[2 * i] = d[key->b[i] >> 4];
		hex[2 * i + 1] = d[key->b[i] & 15];
	}
	hex[2 * KVS_PAGE_KEY_BYTES] = 0;
	return 0;
}
