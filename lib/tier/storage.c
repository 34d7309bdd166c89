/* SPDX-License-Identifier: MIT */
/*
 * lib/tier/storage.c - the storage tier's core: page keys, object names, the
 * envelope every object carries, the backends chosen by URI, the batched
 * calls with their longest-prefix semantics, and a fault-injecting store.
 *
 * Page keys are SGLang HiCache's (get_hash_str): SHA-256 over the previous
 * page's key as 32 raw bytes (nothing for the first page), then each token
 * id as 4 bytes little-endian.  Chained, one key names a whole prefix.
 *
 * Names.  An object is named "{64 hex digits}_{model}_{tp_rank}_{tp_size}"
 * (SGLang's file backend's names, less its ".bin"), then "_lf" when
 * the store was opened for a LAYER_FIRST host pool, then "_s" and 16 hex
 * digits of SHA-256 of the salt when there is one, then "." and the
 * namespace's fingerprint (below) in 16 hex digits.  The model name keeps
 * [A-Za-z0-9._-] and turns every other byte into '-'; the fingerprint
 * holds what the name loses (the model past 63 bytes, the page bytes), so
 * two namespaces never share a name.
 *
 * The envelope (lib/tier/storage_be.h): a header with the key, a fingerprint
 * of the whole namespace (model, rank, size, layout, salt, page bytes),
 * the value's length and checksum.  A read verifies all four: a mismatch
 * is a miss.  The object is removed (and counted in checksum_fail) only
 * when its header carries the magic and this namespace's fingerprint: a
 * torn object or a flipped bit of ours; another engine's file, another
 * namespace's object, or one too short to tell, is left alone.  So a
 * store never hands back KV that is not the page's, and never deletes
 * what it did not write.
 *
 * The value is the page in PAGE_FIRST order (layer 0 K, layer 0 V, layer
 * 1 K, ...) whatever the host pool's layout: kvs_store_get_pages() and
 * kvs_store_set_pages() read into and write from a PAGE_FIRST host page
 * directly (zero copy) and go through a bounce buffer for LAYER_FIRST.
 *
 * Locking: none of its own; counters are atomic, backends serialise what
 * they need.  Calls are MT-Safe.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KVS_HAVE_LIBCRYPTO
/* The low-level SHA-256 calls, as lib/cache/blockhash.c uses them: OpenSSL 3's
 * EVP look-up costs more than a page's hash. */
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/sha.h>
#endif

#include "internal.h"
#include "tier/storage_be.h"

/* ------------------------------------------------------------ page keys */

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

/* ------------------------------------------------------------ envelope */

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	/* One load where the host is little-endian: the checksum runs over
	 * every byte of every value read or written. */
	memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

static void wr64(uint8_t *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A 64-bit checksum of @n bytes, word at a time; not cryptographic, the
 * same on every machine (bytes read little-endian). */
uint64_t store_checksum(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull), w;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		w = rd64(b + i) * 0x87c37b91114253d5ull;
		w = (w << 31) | (w >> 33);
		h ^= w * 0x4cf5ad432745937full;
		h = ((h << 27) | (h >> 37)) * 5 + 0x52dce729;
	}
	for (w = 0; i < n; i++)
		w = w << 8 | b[i];
	h ^= w * 0x87c37b91114253d5ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	return h ^ (h >> 33);
}

static void hdr_build(const struct kvs_store *s, const kvs_page_key_t *key, const void *val,
		      uint8_t *hdr)
{
	memcpy(hdr, STORE_MAGIC, 8);
	memcpy(hdr + 8, key->b, KVS_PAGE_KEY_BYTES);
	wr64(hdr + 40, s->ns_fp);
	wr64(hdr + 48, s->attr.page_bytes);
	wr64(hdr + 56, store_checksum(val, s->attr.page_bytes));
}

static bool hdr_check(const struct kvs_store *s, const kvs_page_key_t *key, const void *val,
		      const uint8_t *hdr)
{
	return memcmp(hdr, STORE_MAGIC, 8) == 0 &&
	       memcmp(hdr + 8, key->b, KVS_PAGE_KEY_BYTES) == 0 && rd64(hdr + 40) == s->ns_fp &&
	       rd64(hdr + 48) == s->attr.page_bytes &&
	       rd64(hdr + 56) == store_checksum(val, s->attr.page_bytes);
}

/* Did this namespace write the object whose first @got bytes are in
 * @hdr?  Only then may a read that does not verify remove it: a file of
 * another engine, of another namespace, or too short to carry a header is
 * not ours to delete. */
static bool hdr_ours(const struct kvs_store *s, const uint8_t *hdr, ssize_t got)
{
	return got >= 48 && memcmp(hdr, STORE_MAGIC, 8) == 0 && rd64(hdr + 40) == s->ns_fp;
}

/* ------------------------------------------------------------ open */

/**
 * kvs_store_attr_init() - the defaults: model "default", rank 0 of 1,
 * PAGE_FIRST, no salt, fsync each object, no size limit, a 2-second redis
 * timeout, no TTL; page_bytes must still be set.
 * @attr: attributes.
 *
 * Context: any thread.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_store_attr_init(kvs_store_attr_t *attr)
{
	if (!attr)
		return kvs_fail(EINVAL);
	memset(attr, 0, sizeof(*attr));
	attr->model = "default";
	attr->tp_size = 1;
	attr->layout = KVS_HPOOL_PAGE_FIRST;
	attr->fsync = KVS_FSYNC_DATA;
	attr->timeout_ms = 2000;
	return 0;
}

static const struct store_backend store_fault_backend;

static const struct store_backend *const backends[] = {
	&store_file_backend,
#ifdef KVS_HAVE_HIREDIS
	&store_redis_backend,
	&store_redis_unix_backend,
#endif
};

/* The backend of @uri's scheme; NULL with errno EINVAL (malformed) or
 * ENOTSUP (a scheme this build lacks). */
static const struct store_backend *backend_of(const char *uri)
{
	const char *c = strstr(uri, "://");
	size_t n, i;

	if (!c || c == uri)
		return NULL;
	n = (size_t)(c - uri);
	for (i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (strlen(backends[i]->scheme) == n && strncmp(uri, backends[i]->scheme, n) == 0)
			return backends[i];
	if ((n == 5 && strncmp(uri, "redis", 5) == 0) ||
	    (n == 10 && strncmp(uri, "redis+unix", 10) == 0))
		errno = ENOTSUP;
	return NULL;
}

static char *dup_or_null(const char *p, bool *fail)
{
	char *d;

	if (!p)
		return NULL;
	d = strdup(p);
	if (!d)
		*fail = true;
	return d;
}

static void store_free(struct kvs_store *s)
{
	free(s->model);
	free(s->salt);
	free(s->password);
	free(s->key_prefix);
	free(s);
}

/* SHA-256 of the string @a, @n bytes of @mid, and the string @b. */
static int sha_parts(const char *a, const void *mid, size_t n, const char *b, uint8_t out[32])
{
#ifdef KVS_HAVE_LIBCRYPTO
	SHA256_CTX c;

	SHA256_Init(&c);
	SHA256_Update(&c, a, strlen(a));
	SHA256_Update(&c, mid, n);
	SHA256_Update(&c, b, strlen(b));
	SHA256_Final(out, &c);
	return 0;
#else
	(void)a;
	(void)mid;
	(void)n;
	(void)b;
	(void)out;
	return kvs_fail(ENOTSUP);
#endif
}

/* SHA-256 of @n bytes at @p. */
static int sha_bytes(const void *p, size_t n, uint8_t out[32])
{
	return sha_parts("", p, n, "", out);
}

/* The namespace: its name suffix and fingerprint.  Any length of model
 * and salt: the suffix keeps at most 63 bytes of the model and a digest of
 * the salt, and the fingerprint hashes both whole, piece by piece. */
static int make_ns(struct kvs_store *s)
{
	char model[64], salt_fp[24] = "", mid[96];
	uint8_t d[32];
	size_t i;
	int n;

	for (i = 0; s->model[i] && i < sizeof(model) - 1; i++) {
		char ch = s->model[i];
		bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';

		model[i] = keep ? ch : '-';
	}
	model[i] = 0;
	if (s->salt) {
		if (sha_bytes(s->salt, strlen(s->salt), d) < 0)
			return -1;
		snprintf(salt_fp, sizeof(salt_fp), "_s%02x%02x%02x%02x%02x%02x%02x%02x", d[0], d[1],
			 d[2], d[3], d[4], d[5], d[6], d[7]);
	}
	/* At most 1 + 63 + 2 * 11 + 3 + 18 bytes, 17 more below: always fits. */
	snprintf(s->ns, sizeof(s->ns), "_%s_%u_%u%s%s", model, s->attr.tp_rank, s->attr.tp_size,
		 s->attr.layout == KVS_HPOOL_LAYER_FIRST ? "_lf" : "", salt_fp);
	/* The fingerprint covers what the name may have lost: the full model
	 * name and salt, and the page's bytes:
	 * SHA-256("{model}\n{rank}\n{size}\n{layout}\n{page_bytes}\n{salt}"). */
	n = snprintf(mid, sizeof(mid), "\n%u\n%u\n%u\n%zu\n", s->attr.tp_rank, s->attr.tp_size,
		     s->attr.layout, s->attr.page_bytes);
	if (n < 0 || (size_t)n >= sizeof(mid))
		return kvs_fail(EINVAL);
	if (sha_parts(s->model, mid, (size_t)n, s->salt ? s->salt : "", d) < 0)
		return -1;
	s->ns_fp = rd64(d);
	/* And the fingerprint ends the name, so that no two namespaces share
	 * a name in any backend: 17 more bytes, which fit as well. */
	n = (int)strlen(s->ns);
	snprintf(s->ns + n, sizeof(s->ns) - (size_t)n, ".%016llx", (unsigned long long)s->ns_fp);
	return 0;
}

/**
 * kvs_store_open() - open the store @uri names.
 * @uri: "file:///dir" (a directory, created if missing), "redis://[:password@]host:port[/db]"
 *       or "redis+unix:///path/to/socket".
 * @attr: attributes; page_bytes must be set.
 *
 * Context: any thread.
 * Return: the store, or NULL with errno EINVAL (a malformed URI or
 * attribute), ENOTSUP (a scheme left out of this build, or no libcrypto),
 * ENOMEM, or the backend's (a directory that cannot be made, a server
 * that cannot be reached).
 */
KVS_EXPORT kvs_store_t *kvs_store_open(const char *uri, const kvs_store_attr_t *attr)
{
	const struct store_backend *be;
	struct kvs_store *s;
	bool fail = false;
	int e;

	if (!uri || !attr || attr->page_bytes == 0 || attr->tp_size == 0 ||
	    attr->tp_rank >= attr->tp_size || attr->layout > KVS_HPOOL_PAGE_FIRST ||
	    attr->fsync > KVS_FSYNC_FULL || (attr->flags & ~(uint32_t)KVS_STORE_SHARE_GROUP) ||
	    !attr->model || !attr->model[0]) {
		errno = EINVAL;
		return NULL;
	}
	errno = EINVAL;
	be = backend_of(uri);
	if (!be)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	s->attr = *attr;
	s->model = dup_or_null(attr->model, &fail);
	s->salt = dup_or_null(attr->salt, &fail);
	s->password = dup_or_null(attr->password, &fail);
	s->key_prefix = dup_or_null(attr->key_prefix, &fail);
	if (fail) {
		store_free(s);
		errno = ENOMEM;
		return NULL;
	}
	s->attr.model = s->model;
	s->attr.salt = s->salt;
	s->attr.password = s->password;
	s->attr.key_prefix = s->key_prefix;
	s->be = be;
	if (make_ns(s) < 0 || be->open(s, uri) < 0) {
		e = errno;
		store_free(s);
		errno = e;
		return NULL;
	}
	return s;
}

/**
 * kvs_store_close() - close a store (the objects stay).
 * @s: store, or NULL.
 *
 * Context: no other call on @s, now or later.
 * Return: 0.
 */
KVS_EXPORT int kvs_store_close(kvs_store_t *s)
{
	if (!s)
		return 0;
	s->be->close(s);
	store_free(s);
	return 0;
}

/**
 * kvs_store_page_bytes() - the bytes of one page's value.
 * @s: store.
 *
 * Context: any thread.
 * Return: attr.page_bytes, or 0 with errno EINVAL.
 */
KVS_EXPORT size_t kvs_store_page_bytes(const kvs_store_t *s)
{
	if (!s) {
		errno = EINVAL;
		return 0;
	}
	return s->attr.page_bytes;
}

/* ------------------------------------------------------------ calls */

/* Names of keys[0 .. n): one allocation, freed by the caller (names[0]'s
 * block is the array itself). */
static char **names_of(const struct kvs_store *s, const kvs_page_key_t *keys, size_t n)
{
	size_t len = 2 * KVS_PAGE_KEY_BYTES + strlen(s->ns) + 1, i;
	char **v = malloc(n * (sizeof(char *) + len));
	char *p;

	if (!v)
		return NULL;
	p = (char *)(v + n);
	for (i = 0; i < n; i++, p += len) {
		kvs_page_key_hex(&keys[i], p);
		strcpy(p + 2 * KVS_PAGE_KEY_BYTES, s->ns);
		v[i] = p;
	}
	return v;
}

/**
 * kvs_store_exists() - how many of @keys, from the first, the store has.
 * @s: store.
 * @keys: page keys, a chain's in order.
 * @n: keys.
 *
 * A failure (a lost connection, an unreadable directory) ends the count
 * there and is counted (io_errors).
 *
 * Context: MT-Safe.
 * Return: the count of consecutive keys present from the first, or -1 with
 * errno EINVAL or ENOMEM.
 */
KVS_EXPORT ssize_t kvs_store_exists(kvs_store_t *s, const kvs_page_key_t *keys, size_t n)
{
	char **names;
	size_t r;

	if (!s || (n && !keys))
		return kvs_fail(EINVAL);
	if (n == 0)
		return 0;
	names = names_of(s, keys, n);
	if (!names)
		return kvs_fail(ENOMEM);
	r = s->be->exists(s, (const char *const *)names, n);
	free(names);
	store_count(s, KVS_STORE_STAT_exists_calls, 1);
	store_count(s, KVS_STORE_STAT_exists_hits, r);
	return (ssize_t)r;
}

/* Get into val[i] (page_bytes each); the pages returned from the first. */
static ssize_t get_impl(kvs_store_t *s, const kvs_page_key_t *keys, size_t n, void *const *val)
{
	uint8_t *hdrs;
	void **hp;
	ssize_t *got;
	char **names;
	size_t i, ok = 0;
	bool run = true;

	names = names_of(s, keys, n);
	hdrs = malloc(n * STORE_HDR_BYTES);
	hp = malloc(n * sizeof(*hp));
	got = malloc(n * sizeof(*got));
	if (!names || !hdrs || !hp || !got) {
		free(names);
		free(hdrs);
		free(hp);
		free(got);
		return kvs_fail(ENOMEM);
	}
	for (i = 0; i < n; i++)
		hp[i] = hdrs + i * STORE_HDR_BYTES;
	s->be->get(s, (const char *const *)names, n, hp, val, got);
	for (i = 0; i < n; i++) {
		bool good = got[i] == (ssize_t)(STORE_HDR_BYTES + s->attr.page_bytes) &&
			    hdr_check(s, &keys[i], val[i], hp[i]);

		if (!good && hdr_ours(s, hp[i], got[i])) {
			/* Ours, but torn, short, long or flipped. */
			store_count(s, KVS_STORE_STAT_checksum_fail, 1);
			(void)s->be->remove(s, names[i]);
		}
		if (good && run) {
			ok++;
			store_count(s, KVS_STORE_STAT_bytes_read, s->attr.page_bytes);
		} else {
			run = false;
		}
	}
	store_count(s, KVS_STORE_STAT_get_pages, n);
	store_count(s, KVS_STORE_STAT_get_hits, ok);
	store_count(s, KVS_STORE_STAT_get_misses, n - ok);
	free(names);
	free(hdrs);
	free(hp);
	free(got);
	return (ssize_t)ok;
}

static ssize_t set_impl(kvs_store_t *s, const kvs_page_key_t *keys, size_t n,
			const void *const *val)
{
	uint8_t *hdrs;
	const void **hp;
	int *res;
	char **names;
	size_t i, ok = 0;
	bool run = true;

	names = names_of(s, keys, n);
	hdrs = malloc(n * STORE_HDR_BYTES);
	hp = malloc(n * sizeof(*hp));
	res = malloc(n * sizeof(*res));
	if (!names || !hdrs || !hp || !res) {
		free(names);
		free(hdrs);
		free(hp);
		free(res);
		return kvs_fail(ENOMEM);
	}
	for (i = 0; i < n; i++) {
		hdr_build(s, &keys[i], val[i], hdrs + i * STORE_HDR_BYTES);
		hp[i] = hdrs + i * STORE_HDR_BYTES;
		res[i] = 0;
	}
	s->be->set(s, (const char *const *)names, n, hp, val, res);
	for (i = 0; i < n; i++) {
		if (res[i] == 1) {
			store_count(s, KVS_STORE_STAT_set_stored, 1);
			store_count(s, KVS_STORE_STAT_bytes_written, s->attr.page_bytes);
		} else if (res[i] == 2) {
			store_count(s, KVS_STORE_STAT_set_skipped, 1);
		}
		if (res[i] && run)
			ok++;
		else
			run = false;
	}
	store_count(s, KVS_STORE_STAT_set_pages, n);
	free(names);
	free(hdrs);
	free(hp);
	free(res);
	return (ssize_t)ok;
}

/**
 * kvs_store_get() - read pages into caller buffers.
 * @s: store.
 * @keys: page keys.
 * @n: keys.
 * @bufs: n buffers of page_bytes each.
 *
 * Every value is verified (key, namespace, length, checksum): one that
 * does not verify is a miss; one this namespace wrote is counted
 * (checksum_fail) and removed, anything else left alone.  A buffer past
 * the first miss may have been written.
 *
 * Context: MT-Safe.
 * Return: the pages read, consecutively from the first, or -1 with errno
 * EINVAL or ENOMEM.
 */
KVS_EXPORT ssize_t kvs_store_get(kvs_store_t *s, const kvs_page_key_t *keys, size_t n,
				 void *const *bufs)
{
	size_t i;

	if (!s || (n && (!keys || !bufs)))
		return kvs_fail(EINVAL);
	for (i = 0; i < n; i++)
		if (!bufs[i])
			return kvs_fail(EINVAL);
	return n ? get_impl(s, keys, n, bufs) : 0;
}

/**
 * kvs_store_set() - write pages from caller buffers.
 * @s: store.
 * @keys: page keys.
 * @n: keys.
 * @bufs: n values of page_bytes each.
 *
 * A key already present is not rewritten.
 *
 * Context: MT-Safe.
 * Return: the pages present after the call (written or already there),
 * consecutively from the first, or -1 with errno EINVAL or ENOMEM.
 */
KVS_EXPORT ssize_t kvs_store_set(kvs_store_t *s, const kvs_page_key_t *keys, size_t n,
				 const void *const *bufs)
{
	size_t i;

	if (!s || (n && (!keys || !bufs)))
		return kvs_fail(EINVAL);
	for (i = 0; i < n; i++)
		if (!bufs[i])
			return kvs_fail(EINVAL);
	return n ? set_impl(s, keys, n, bufs) : 0;
}

/* Page-first views of @n host pages: the pages themselves (PAGE_FIRST) or
 * bounce buffers (LAYER_FIRST, *bounce set, filled when @fill). */
static int views(kvs_store_t *s, kvs_hpool_t *hp, const int32_t *pages, size_t n, void **v,
		 uint8_t **bounce, bool fill)
{
	size_t i, sz;

	*bounce = NULL;
	for (i = 0; i < n; i++) {
		if (kvs_hpool_page_bytes(hp, pages[i], &v[i], &sz) == 0) {
			if (sz != s->attr.page_bytes)
				return kvs_fail(EINVAL);
			continue;
		}
		if (errno != ENOTSUP)
			return -1;
		if (!*bounce) {
			if (kvsi_hpool_page_bytes(hp) != s->attr.page_bytes)
				return kvs_fail(EINVAL);
			*bounce = malloc(n * s->attr.page_bytes);
			if (!*bounce)
				return kvs_fail(ENOMEM);
		}
		v[i] = *bounce + i * s->attr.page_bytes;
		if (kvsi_hpool_page_copy(hp, pages[i], fill ? v[i] : NULL, true) < 0)
			return -1;
	}
	return 0;
}

/* Scatter bounce buffer views back into LAYER_FIRST pages [0, n). */
static void scatter(kvs_hpool_t *hp, const int32_t *pages, size_t n, void *const *v)
{
	size_t i;

	for (i = 0; i < n; i++)
		kvsi_hpool_page_copy(hp, pages[i], v[i], false);
}

/* get_pages (@set false) or set_pages (true): page-first views of the
 * host pages (the pages themselves, or a bounce buffer filled before a
 * set and scattered after a get), then the batched call. */
static ssize_t pages_io(kvs_store_t *s, const kvs_page_key_t *keys, size_t n, kvs_hpool_t *hp,
			const int32_t *host_pages, bool set)
{
	uint8_t *bounce;
	void **v;
	ssize_t r;
	int e;

	if (!s || !hp || (n && (!keys || !host_pages)))
		return kvs_fail(EINVAL);
	if (n == 0)
		return 0;
	v = malloc(n * sizeof(*v));
	if (!v)
		return kvs_fail(ENOMEM);
	if (views(s, hp, host_pages, n, v, &bounce, set) < 0) {
		e = errno;
		free(bounce);
		free(v);
		return kvs_fail(e);
	}
	if (set) {
		r = set_impl(s, keys, n, (const void *const *)v);
	} else {
		r = get_impl(s, keys, n, v);
		if (r > 0 && bounce)
			scatter(hp, host_pages, (size_t)r, v);
	}
	e = errno;
	free(bounce);
	free(v);
	errno = e;
	return r;
}

/**
 * kvs_store_get_pages() - read pages straight into host-pool pages.
 * @s: store.
 * @keys: page keys.
 * @n: keys.
 * @hp: host pool whose page bytes equal the store's page_bytes.
 * @host_pages: n allocated host pages.
 *
 * PAGE_FIRST pools are read into without a copy; LAYER_FIRST pools
 * through a bounce buffer.  Pages past the first miss may have been
 * written (PAGE_FIRST) or are left as they were (LAYER_FIRST).
 *
 * Context: MT-Safe; the host pages must not be in a transfer.
 * Return: as kvs_store_get(); -1 with errno EINVAL also for pages not
 * allocated or of another size.
 */
KVS_EXPORT ssize_t kvs_store_get_pages(kvs_store_t *s, const kvs_page_key_t *keys, size_t n,
				       kvs_hpool_t *hp, const int32_t *host_pages)
{
	return pages_io(s, keys, n, hp, host_pages, false);
}

/**
 * kvs_store_set_pages() - write pages straight from host-pool pages.
 * @s: store.
 * @keys: page keys.
 * @n: keys.
 * @hp: host pool whose page bytes equal the store's page_bytes.
 * @host_pages: n allocated host pages.
 *
 * Context: MT-Safe; the host pages must not be written meanwhile.
 * Return: as kvs_store_set(); -1 with errno EINVAL also for pages not
 * allocated or of another size.
 */
KVS_EXPORT ssize_t kvs_store_set_pages(kvs_store_t *s, const kvs_page_key_t *keys, size_t n,
				       kvs_hpool_t *hp, const int32_t *host_pages)
{
	return pages_io(s, keys, n, hp, host_pages, true);
}

/* ------------------------------------------------------------ faults */

struct fault {
	struct kvs_store *inner;
	pthread_mutex_t lock;
	uint64_t calls[KVS_SOP__COUNT];
	uint64_t nth[KVS_SOP__COUNT];	/* fail the nth call from now (0: none) */
	int nth_kind[KVS_SOP__COUNT];
	double p[KVS_SOP__COUNT];
	int p_kind[KVS_SOP__COUNT];
	uint64_t rng;
};

/* Does this call of @op fail, and how (-1: it does not)? */
static int fault_roll(struct kvs_store *s, enum kvs_store_op op)
{
	struct fault *f = s->be_priv;
	int kind = -1;
	enum kvs_store_op o;

	pthread_mutex_lock(&f->lock);
	for (o = op;; o = KVS_SOP_ANY) {
		f->calls[o]++;
		if (f->nth[o] && --f->nth[o] == 0)
			kind = f->nth_kind[o];
		if (kind < 0 && f->p[o] > 0) {
			f->rng ^= f->rng << 13;
			f->rng ^= f->rng >> 7;
			f->rng ^= f->rng << 17;
			if ((double)(f->rng >> 11) / 9007199254740992.0 < f->p[o])
				kind = f->p_kind[o];
		}
		if (o == KVS_SOP_ANY)
			break;
	}
	pthread_mutex_unlock(&f->lock);
	return kind;
}

static int fault_be_open(struct kvs_store *s, const char *uri)
{
	(void)s;
	(void)uri;
	return 0;
}

static void fault_be_close(struct kvs_store *s)
{
	struct fault *f = s->be_priv;

	pthread_mutex_destroy(&f->lock);
	free(f);
}

static size_t fault_be_exists(struct kvs_store *s, const char *const *names, size_t n)
{
	struct fault *f = s->be_priv;

	if (fault_roll(s, KVS_SOP_EXISTS) >= 0) {
		store_count(s, KVS_STORE_STAT_io_errors, 1);
		return 0;
	}
	return f->inner->be->exists(f->inner, names, n);
}

static void fault_be_get(struct kvs_store *s, const char *const *names, size_t n,
			 void *const *hdr, void *const *val, ssize_t *got)
{
	struct fault *f = s->be_priv;
	int kind = fault_roll(s, KVS_SOP_GET);
	size_t i;

	if (kind == KVS_SFAULT_ERROR) {
		for (i = 0; i < n; i++)
			got[i] = -1;
		store_count(s, KVS_STORE_STAT_io_errors, n); /* per page, as the backends */
		return;
	}
	f->inner->be->get(f->inner, names, n, hdr, val, got);
	if (kind < 0 || n == 0)
		return;
	/* The first object present is the one damaged. */
	for (i = 0; i < n && got[i] < 0; i++)
		;
	if (i == n)
		return;
	if (kind == KVS_SFAULT_SHORT)
		got[i] = got[i] > 1 ? got[i] / 2 : 0;
	else
		((uint8_t *)val[i])[s->attr.page_bytes / 2] ^= 0x40;
}

static void fault_be_set(struct kvs_store *s, const char *const *names, size_t n,
			 const void *const *hdr, const void *const *val, int *res)
{
	struct fault *f = s->be_priv;
	int kind = fault_roll(s, KVS_SOP_SET);
	size_t i;

	if (kind == KVS_SFAULT_ERROR) {
		for (i = 0; i < n; i++)
			res[i] = 0;
		store_count(s, KVS_STORE_STAT_io_errors, n);
		return;
	}
	if (kind == KVS_SFAULT_SHORT || kind == KVS_SFAULT_CORRUPT) {
		/* A torn write: the first object's value half there (or with a
		 * flipped byte), as a crash or a bad disk would leave it. */
		uint8_t *bad = malloc(s->attr.page_bytes);
		const void **v2 = malloc(n * sizeof(*v2));

		if (!bad || !v2) {
			free(bad);
			free(v2);
			for (i = 0; i < n; i++)
				res[i] = 0;
			return;
		}
		memcpy(bad, val[0], s->attr.page_bytes);
		if (kind == KVS_SFAULT_SHORT)
			memset(bad + s->attr.page_bytes / 2, 0, s->attr.page_bytes - s->attr.page_bytes / 2);
		else
			bad[s->attr.page_bytes / 2] ^= 0x40;
		memcpy(v2, val, n * sizeof(*v2));
		v2[0] = bad;
		f->inner->be->set(f->inner, names, n, hdr, v2, res);
		free(bad);
		free(v2);
		return;
	}
	f->inner->be->set(f->inner, names, n, hdr, val, res);
}

static int fault_be_remove(struct kvs_store *s, const char *name)
{
	struct fault *f = s->be_priv;

	return f->inner->be->remove(f->inner, name);
}

static const struct store_backend store_fault_backend = {
	.scheme = "fault",
	.open = fault_be_open,
	.close = fault_be_close,
	.exists = fault_be_exists,
	.get = fault_be_get,
	.set = fault_be_set,
	.remove = fault_be_remove,
};

static struct fault *fault_of(kvs_store_t *s)
{
	return s && s->be == &store_fault_backend ? s->be_priv : NULL;
}

/**
 * kvs_store_fault_open() - a store that passes every call to @inner and
 * fails the ones it is told to, below the envelope (so the core's checks
 * see what a failing backend would hand back).
 * @inner: the store to wrap; it must outlive the wrapper, which does not
 *         close it.
 *
 * Context: any thread.
 * Return: the wrapper, or NULL with errno EINVAL or ENOMEM.
 */
KVS_EXPORT kvs_store_t *kvs_store_fault_open(kvs_store_t *inner)
{
	struct kvs_store *s;
	struct fault *f;

	if (!inner) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	f = calloc(1, sizeof(*f));
	if (!s || !f || pthread_mutex_init(&f->lock, NULL) != 0) {
		free(s);
		free(f);
		errno = ENOMEM;
		return NULL;
	}
	f->inner = inner;
	f->rng = 0x2545F4914F6CDD1Dull;
	s->attr = inner->attr; /* its strings stay inner's: not freed here */
	memcpy(s->ns, inner->ns, sizeof(s->ns));
	s->ns_fp = inner->ns_fp;
	s->be = &store_fault_backend;
	s->be_priv = f;
	return s;
}

/**
 * kvs_store_fault_fail_nth() - fail the @nth next call of @op.
 * @fault: a store from kvs_store_fault_open().
 * @op: KVS_SOP_EXISTS, _GET, _SET, or _ANY (any of them).
 * @nth: 1: the next call; 0 disarms.
 * @kind: KVS_SFAULT_ERROR, _SHORT or _CORRUPT.
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_store_fault_fail_nth(kvs_store_t *fault, enum kvs_store_op op, uint64_t nth,
					int kind)
{
	struct fault *f = fault_of(fault);

	if (!f || (unsigned)op >= KVS_SOP__COUNT || kind < KVS_SFAULT_ERROR ||
	    kind > KVS_SFAULT_CORRUPT)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&f->lock);
	f->nth[op] = nth;
	f->nth_kind[op] = kind;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

/**
 * kvs_store_fault_fail_random() - fail each call of @op with probability
 * @p, from a seeded generator.
 * @fault: a store from kvs_store_fault_open().
 * @op: as kvs_store_fault_fail_nth().
 * @p: probability in [0, 1]; 0 disarms.
 * @seed: the generator's seed (non-zero).
 * @kind: as kvs_store_fault_fail_nth().
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_store_fault_fail_random(kvs_store_t *fault, enum kvs_store_op op, double p,
					   uint64_t seed, int kind)
{
	struct fault *f = fault_of(fault);

	if (!f || (unsigned)op >= KVS_SOP__COUNT || !(p >= 0 && p <= 1) || seed == 0 ||
	    kind < KVS_SFAULT_ERROR || kind > KVS_SFAULT_CORRUPT)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&f->lock);
	f->p[op] = p;
	f->p_kind[op] = kind;
	f->rng = seed;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

/**
 * kvs_store_fault_clear() - disarm every fault.
 * @fault: a store from kvs_store_fault_open().
 *
 * Context: MT-Safe.
 * Return: 0, or -1 with errno EINVAL.
 */
KVS_EXPORT int kvs_store_fault_clear(kvs_store_t *fault)
{
	struct fault *f = fault_of(fault);
	int i;

	if (!f)
		return kvs_fail(EINVAL);
	pthread_mutex_lock(&f->lock);
	for (i = 0; i < KVS_SOP__COUNT; i++) {
		f->nth[i] = 0;
		f->p[i] = 0;
	}
	pthread_mutex_unlock(&f->lock);
	return 0;
}

/* ------------------------------------------------------------ stats */

KVSI_STAT_TABLES(store, KVS_STORE_STATS);

/* Relaxed atomic counters, read one by one. */
static void store_fill(void *obj, uint64_t *v)
{
	struct kvs_store *s = obj;

	for (unsigned i = 0; i < KVS_STORE_STAT__COUNT; i++)
		v[i] = atomic_load_explicit(&s->st[i], memory_order_relaxed);
}

const struct kvsi_stat_family kvsi_store_stats = {
	.prefix = "store",
	KVSI_STAT_LISTS(store),
	.fill = store_fill,
	.plain = true,
	.set_errno = true,
};

/**
 * kvs_store_stat() - one statistic; kvs_store_stat_get() reads one by name,
 * kvs_store_stat_name() names one, kvs_store_stats_print() prints every one
 * as "store name value\n" lines, all through lib/stats.c.
 * @s: store.
 * @item: which.
 *
 * Context: MT-Safe.
 * Return: kvs_store_stat(): its value, or 0 with errno EINVAL;
 * kvs_store_stat_name(): the name, or NULL with errno EINVAL; the others:
 * 0, or -1 with errno EINVAL or ENOENT.
 */
KVSI_STATS_EXPORTS(store, kvs_store_t, enum kvs_store_stat, kvsi_store_stats);
