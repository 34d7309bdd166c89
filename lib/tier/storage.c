/* SPDX-License-Identifier: MIT */
/*
 * lib/tier/storage.c - the storage tier's core: object names, the
 * envelope every object carries, opening a store by URI, the batched calls
 * with their longest-prefix semantics, and the statistics.  The page keys
 * are in lib/tier/pagekey.c, the table of backends by URI scheme in
 * lib/tier/store_registry.c, the fault-injecting store in
 * lib/tier/store_fault.c.
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
	KVS_ATTR_CLEAR(attr);
	attr->model = "default";
	attr->tp_size = 1;
	attr->layout = KVS_HPOOL_PAGE_FIRST;
	attr->fsync = KVS_FSYNC_DATA;
	attr->timeout_ms = 2000;
	return 0;
}

/* The backend of @uri's scheme (lib/tier/store_registry.c's table); NULL
 * with errno EINVAL (malformed, or no such scheme) or ENOTSUP (a scheme
 * this build lacks). */
static const struct store_backend *backend_of(const char *uri)
{
	const char *c = strstr(uri, "://");
	size_t n, i;

	if (!c || c == uri)
		return NULL;
	n = (size_t)(c - uri);
	for (i = 0; i < store_nbackends; i++) {
		const struct store_backend_entry *e = &store_backends[i];

		if (strlen(e->scheme) != n || strncmp(uri, e->scheme, n) != 0)
			continue;
		if (!e->be)
			errno = ENOTSUP;
		return e->be;
	}
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
	KVS_FREE_ALL(s->model, s->salt, s->password, s->key_prefix, s);
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

/* The scratch of one batched call: the objects' names, their headers,
 * pointers to the headers, and the backend's per-object results (@rsize
 * bytes each, zeroed). */
struct batch {
	char **names;
	uint8_t *hdrs;
	void **hp;
	void *res;
};

static void batch_free(struct batch *b)
{
	KVS_FREE_ALL(b->names, b->hdrs, b->hp, b->res);
}

static int batch_alloc(struct batch *b, const struct kvs_store *s, const kvs_page_key_t *keys,
		       size_t n, size_t rsize)
{
	size_t i;

	b->names = names_of(s, keys, n);
	b->hdrs = malloc(n * STORE_HDR_BYTES);
	b->hp = malloc(n * sizeof(*b->hp));
	b->res = calloc(n, rsize);
	if (!b->names || !b->hdrs || !b->hp || !b->res) {
		batch_free(b);
		return kvs_fail(ENOMEM);
	}
	for (i = 0; i < n; i++)
		b->hp[i] = b->hdrs + i * STORE_HDR_BYTES;
	return 0;
}

/* Get into val[i] (page_bytes each); the pages returned from the first. */
static ssize_t get_impl(kvs_store_t *s, const kvs_page_key_t *keys, size_t n, void *const *val)
{
	struct batch b;
	ssize_t *got;
	size_t i, ok = 0;
	bool run = true;

	if (batch_alloc(&b, s, keys, n, sizeof(*got)) < 0)
		return -1;
	got = b.res;
	s->be->get(s, (const char *const *)b.names, n, b.hp, val, got);
	for (i = 0; i < n; i++) {
		bool good = got[i] == (ssize_t)(STORE_HDR_BYTES + s->attr.page_bytes) &&
			    hdr_check(s, &keys[i], val[i], b.hp[i]);

		if (!good && hdr_ours(s, b.hp[i], got[i])) {
			/* Ours, but torn, short, long or flipped. */
			store_count(s, KVS_STORE_STAT_checksum_fail, 1);
			(void)s->be->remove(s, b.names[i]);
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
	batch_free(&b);
	return (ssize_t)ok;
}

static ssize_t set_impl(kvs_store_t *s, const kvs_page_key_t *keys, size_t n,
			const void *const *val)
{
	struct batch b;
	int *res;
	size_t i, ok = 0;
	bool run = true;

	if (batch_alloc(&b, s, keys, n, sizeof(*res)) < 0)
		return -1;
	res = b.res;
	for (i = 0; i < n; i++)
		hdr_build(s, &keys[i], val[i], b.hp[i]);
	s->be->set(s, (const char *const *)b.names, n, (const void *const *)b.hp, val, res);
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
	batch_free(&b);
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

/* ------------------------------------------------------------ stats */

/* Relaxed atomic counters, read one by one. */
static void store_fill(void *obj, uint64_t *v)
{
	struct kvs_store *s = obj;

	for (unsigned i = 0; i < KVS_STORE_STAT__COUNT; i++)
		v[i] = atomic_load_explicit(&s->st[i], memory_order_relaxed);
}

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
KVSI_STATS_FAMILY(store, KVS_STORE_STATS, store_fill, NULL, &kvsi_style_plain, NULL, kvs_store_t,
		  enum kvs_store_stat);
