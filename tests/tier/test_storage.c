/* SPDX-License-Identifier: MIT */
/*
 * tests/tier/test_storage.c - the storage tier (L3) over the file backend:
 * page keys byte for byte against tests/pagehash_ref.py (python3 hashlib,
 * hashing as SGLang's HiCache does) and a fixed vector; namespaces that
 * never see each other's pages; longest-prefix exists, batched get and
 * set, no rewrite, zero-copy host-pool variants in both layouts, values
 * full of CR, LF and NUL; failures (the fault store, objects damaged on
 * disk, a full disk, a directory gone) as counted misses, never wrong
 * bytes; the size limit's LRU eviction; a writer SIGKILLed at random
 * points, after which a new store never reads a torn or wrong page.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "kvslab/storage.h"

#define PB 4096 /* page bytes of most tests */

static char dir[64], uri[96];

static void mkdir_tmp(void)
{
	const char *t = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/kvs_st_XXXXXX", t && *t && strlen(t) < 40 ? t : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(uri, sizeof(uri), "file://%s", dir);
}

static void rm_tmp(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void attr_of(kvs_store_attr_t *a, size_t pb)
{
	ck_assert_int_eq(kvs_store_attr_init(a), 0);
	a->model = "m";
	a->page_bytes = pb;
}

static kvs_store_t *open_a(const kvs_store_attr_t *a)
{
	kvs_store_t *s = kvs_store_open(uri, a);

	ck_assert_msg(s, "open %s: %s", uri, strerror(errno));
	return s;
}

static kvs_store_t *open_pb(size_t pb)
{
	kvs_store_attr_t a;

	attr_of(&a, pb);
	return open_a(&a);
}

static uint64_t st(kvs_store_t *s, enum kvs_store_stat i)
{
	return kvs_store_stat(s, i);
}

/* @n chained keys of a request seeded by @seed. */
static void mkkeys(kvs_page_key_t *k, size_t n, unsigned seed)
{
	int32_t tok[16 * 64];
	uint64_t x = seed * 2654435761u + 1;
	size_t i;

	ck_assert_uint_le(n, 64);
	for (i = 0; i < n * 16; i++)
		tok[i] = (int32_t)tu_rng(&x);
	ck_assert_int_eq(kvs_page_hashes(NULL, tok, n * 16, 16, k), (ssize_t)n);
}

/* A value full of CR, LF and NUL, and of noise, seeded by @seed. */
static void fill_val(uint8_t *p, size_t n, unsigned seed)
{
	static const uint8_t crlf0[] = {'\r', '\n', 0, '\r', '\n', '\r', 0, 0};

	tu_fill(p, n, seed);
	for (size_t i = 0; i < n; i += 3)
		p[i] = crlf0[(i / 3 + seed) % sizeof(crlf0)];
}

static bool val_ok(const uint8_t *p, size_t n, unsigned seed)
{
	uint8_t *w = malloc(n);
	bool ok;

	fill_val(w, n, seed);
	ok = memcmp(w, p, n) == 0;
	free(w);
	return ok;
}

/* The file of @key in store namespace @ns ("_m_0_1"): the one whose name
 * is the key's hex digits, @ns, a '.' and a suffix; "{hex}{ns}." when
 * there is none. */
static void obj_file(char *buf, size_t len, const kvs_page_key_t *key, const char *ns)
{
	char hex[65], pfx[160];
	struct dirent *de;
	DIR *d = opendir(dir);

	kvs_page_key_hex(key, hex);
	snprintf(pfx, sizeof(pfx), "%s%s.", hex, ns);
	snprintf(buf, len, "%s/%s", dir, pfx);
	if (!d)
		return;
	while ((de = readdir(d)))
		if (strncmp(de->d_name, pfx, strlen(pfx)) == 0 && !strstr(de->d_name, ".tmp.")) {
			size_t dl = strlen(dir), nl = strlen(de->d_name);

			ck_assert_uint_lt(dl + 1 + nl, len);
			memcpy(buf, dir, dl);
			buf[dl] = '/';
			memcpy(buf + dl + 1, de->d_name, nl + 1);
			break;
		}
	closedir(d);
}

/* Files in the directory whose name begins with @key's hex digits. */
static int files_of(const kvs_page_key_t *key)
{
	char hex[65];
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	ck_assert_ptr_nonnull(d);
	kvs_page_key_hex(key, hex);
	while ((de = readdir(d)))
		n += strncmp(de->d_name, hex, 64) == 0;
	closedir(d);
	return n;
}

static bool file_there(const kvs_page_key_t *key, const char *ns)
{
	char p[256];

	obj_file(p, sizeof(p), key, ns);
	return access(p, F_OK) == 0;
}

/* Temporary files in the directory. */
static int count_tmp(void)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		n += strstr(de->d_name, ".tmp.") != NULL;
	closedir(d);
	return n;
}

/* ------------------------------------------------------------ (a) keys */

static int32_t ktok[4 * 7 + 3];

static void fill_ktok(void)
{
	static const int32_t edge[] = {0, 1, -1, INT32_MIN, INT32_MAX, 255, 256, 65535, 65536,
				       151643, -2, 16777216};
	uint64_t x = 7;

	for (size_t i = 0; i < sizeof(ktok) / sizeof(ktok[0]); i++)
		ktok[i] = i < 12 ? edge[i] : (int32_t)tu_rng(&x);
}

/* Keys of ktok (page size @ps, after @prev) from python; 1 compared, 0
 * when python3 cannot run. */
static int python_keys(uint32_t ps, const kvs_page_key_t *prev, const kvs_page_key_t *got,
		       size_t n)
{
	const char *src = getenv("KVSLAB_TOP_SRCDIR");
	char path[] = "/tmp/kvs_ph_XXXXXX", cmd[512], line[256], hex[65];
	size_t i = 0;
	FILE *f, *p;
	int fd, stt;

	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	if (prev) {
		kvs_page_key_hex(prev, hex);
		fprintf(f, "%u %s", ps, hex);
	} else {
		fprintf(f, "%u -", ps);
	}
	for (size_t k = 0; k < sizeof(ktok) / sizeof(ktok[0]); k++)
		fprintf(f, " %d", ktok[k]);
	fprintf(f, "\n");
	fclose(f);
	snprintf(cmd, sizeof(cmd),
		 "for py in $KVSLAB_PYTHON python3 /usr/bin/python3; do "
		 "command -v $py >/dev/null 2>&1 && exec $py '%s/tests/pagehash_ref.py' < %s; "
		 "done; exit 77",
		 src ? src : ".", path);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (fgets(line, sizeof(line), p)) {
		line[strcspn(line, "\n")] = 0;
		ck_assert_uint_lt(i, n);
		kvs_page_key_hex(&got[i], hex);
		ck_assert_msg(!strcmp(line, hex), "page %zu: python %s, kvslab %s", i, line, hex);
		i++;
	}
	stt = pclose(p);
	unlink(path);
	if (!WIFEXITED(stt) || WEXITSTATUS(stt) != 0) {
		ck_assert_uint_eq(i, 0);
		printf("storage: python3 not available, key comparison skipped\n");
		return 0;
	}
	ck_assert_uint_eq(i, n);
	return 1;
}

START_TEST(test_keys)
{
	static const int32_t ex[4] = {1, 2, 3, 4};
	kvs_page_key_t k[8], k2[12], one, prev;
	char hex[65];
	size_t nt = sizeof(ktok) / sizeof(ktok[0]);
	int ran = 0;

	fill_ktok();
	/* The worked example of kvs_page_hash(3). */
	ck_assert_int_eq(kvs_page_hash(NULL, ex, 4, &one), 0);
	kvs_page_key_hex(&one, hex);
	ck_assert_str_eq(hex, "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72");
	/* Page size 4: 7 whole pages, a partial last one not hashed. */
	ck_assert_int_eq(kvs_page_hashes(NULL, ktok, nt, 4, k), 7);
	ran += python_keys(4, NULL, k, 7);
	/* One call per page chains the same. */
	for (size_t i = 0; i < 7; i++) {
		ck_assert_int_eq(kvs_page_hash(i ? &k[i - 1] : NULL, ktok + 4 * i, 4, &one), 0);
		ck_assert_mem_eq(one.b, k[i].b, KVS_PAGE_KEY_BYTES);
	}
	/* After a previous key, page size 3 (10 pages, one token left). */
	memset(prev.b, 0xa5, sizeof(prev.b));
	ck_assert_int_eq(kvs_page_hashes(&prev, ktok, nt, 3, k2), 10);
	ran += python_keys(3, &prev, k2, 10);
	/* A request shorter than a page has no key. */
	ck_assert_int_eq(kvs_page_hashes(NULL, ktok, 3, 4, k), 0);
	printf("storage: %d of 2 key cases compared with python3 hashlib\n", ran);
}
END_TEST

/* ------------------------------------------------------------ (b) namespaces */

START_TEST(test_namespace)
{
	kvs_page_key_t k[4];
	kvs_store_attr_t a, b;
	kvs_store_t *s, *t;
	uint8_t *v[4], *w[4];
	int i, j;

	mkdir_tmp();
	mkkeys(k, 4, 1);
	for (i = 0; i < 4; i++) {
		v[i] = malloc(PB);
		w[i] = malloc(PB);
		fill_val(v[i], PB, (unsigned)i);
	}
	attr_of(&a, PB);
	s = open_a(&a);
	ck_assert_int_eq(kvs_store_set(s, k, 4, (const void *const *)v), 4);
	ck_assert_int_eq(kvs_store_exists(s, k, 4), 4);
	for (j = 0; j < 6; j++) {
		b = a;
		switch (j) {
		case 0: b.model = "m2"; break;
		case 1: b.tp_size = 2; break;
		case 2: b.tp_size = 2; b.tp_rank = 1; break;
		case 3: b.layout = KVS_HPOOL_LAYER_FIRST; break;
		case 4: b.salt = "tenant-a"; break;
		default: b.model = "M"; break;
		}
		t = open_a(&b);
		ck_assert_msg(kvs_store_exists(t, k, 4) == 0, "namespace %d sees pages", j);
		ck_assert_int_eq(kvs_store_get(t, k, 4, (void *const *)w), 0);
		ck_assert_uint_eq(st(t, KVS_STORE_STAT_get_misses), 4);
		/* Its own pages beside the others'. */
		ck_assert_int_eq(kvs_store_set(t, k, 1, (const void *const *)v), 1);
		ck_assert_uint_eq(st(t, KVS_STORE_STAT_set_stored), 1);
		kvs_store_close(t);
	}
	/* Two salts never meet either. */
	b = a;
	b.salt = "tenant-b";
	t = open_a(&b);
	ck_assert_int_eq(kvs_store_exists(t, k, 1), 0);
	kvs_store_close(t);
	/* The first store's other pages are intact. */
	ck_assert_int_eq(kvs_store_get(s, k + 1, 3, (void *const *)(w + 1)), 3);
	for (i = 1; i < 4; i++)
		ck_assert(val_ok(w[i], PB, (unsigned)i));
	kvs_store_close(s);
	for (i = 0; i < 4; i++) {
		free(v[i]);
		free(w[i]);
	}
	rm_tmp();
}
END_TEST

/* Namespaces whose names once met: models that sanitise alike ("m/x",
 * "m?x" -> "m-x"), models alike in their first 63 bytes, another page
 * size.  Each keeps its own object beside the other's: neither reads the
 * other's page, nor removes it as damaged. */
START_TEST(test_ns_collide)
{
	kvs_page_key_t k[4];
	kvs_store_attr_t a, b;
	kvs_store_t *t;
	uint8_t *v[4], *w[4];
	int i;

	mkdir_tmp();
	mkkeys(k, 4, 1);
	for (i = 0; i < 4; i++) {
		v[i] = malloc(PB);
		w[i] = malloc(PB);
		fill_val(v[i], PB, (unsigned)i);
	}
	attr_of(&a, PB);
	{
		static const char long_a[] = "org/a-model-name-longer-than-the-sixty-three-bytes-kept-in-names-A",
				  long_b[] = "org/a-model-name-longer-than-the-sixty-three-bytes-kept-in-names-B";
		kvs_store_attr_t c = a;
		kvs_store_t *u;

		b = a;
		switch (_i) {
		case 0: b.model = "m/x"; c.model = "m?x"; break;
		case 1: b.model = long_a; c.model = long_b; break;
		default: b.model = c.model = "pb"; c.page_bytes = PB / 2; break;
		}
		t = open_a(&b);
		u = open_a(&c);
		ck_assert_int_eq(kvs_store_set(t, k + 3, 1, (const void *const *)(v + 3)), 1);
		ck_assert_int_eq(kvs_store_get(u, k + 3, 1, (void *const *)w), 0);
		ck_assert_msg(st(u, KVS_STORE_STAT_checksum_fail) == 0 && files_of(&k[3]) == 1,
			      "case %d: the other's object removed", _i);
		ck_assert_msg(kvs_store_exists(u, k + 3, 1) == 0, "case %d: the other's page seen", _i);
		/* Its own, written beside; both read back whole. */
		ck_assert_int_eq(kvs_store_set(u, k + 3, 1, (const void *const *)(v + 3)), 1);
		ck_assert_uint_eq(st(u, KVS_STORE_STAT_set_stored), 1);
		ck_assert_msg(kvs_store_get(t, k + 3, 1, (void *const *)(w + 3)) == 1,
			      "case %d: the first page lost", _i);
		ck_assert(val_ok(w[3], b.page_bytes, 3));
		ck_assert_int_eq(kvs_store_get(u, k + 3, 1, (void *const *)(w + 3)), 1);
		ck_assert_uint_eq(st(t, KVS_STORE_STAT_checksum_fail), 0);
		ck_assert_uint_eq(st(u, KVS_STORE_STAT_checksum_fail), 0);
		kvs_store_close(u);
		kvs_store_close(t);
	}
	for (i = 0; i < 4; i++) {
		free(v[i]);
		free(w[i]);
	}
	rm_tmp();
}
END_TEST

/* ------------------------------------------------------------ (c) calls */

START_TEST(test_calls)
{
	kvs_page_key_t k[8];
	kvs_store_t *s;
	uint8_t *v[8], *w[8];
	int i;

	mkdir_tmp();
	mkkeys(k, 8, 2);
	for (i = 0; i < 8; i++) {
		v[i] = malloc(PB);
		w[i] = malloc(PB);
		fill_val(v[i], PB, 100u + (unsigned)i);
	}
	s = open_pb(PB);
	ck_assert_uint_eq(kvs_store_page_bytes(s), PB);
	ck_assert_int_eq(kvs_store_exists(s, k, 8), 0);
	ck_assert_int_eq(kvs_store_get(s, k, 8, (void *const *)w), 0);
	/* Pages 0-2 and 4-7: a gap at 3 stops every count there. */
	ck_assert_int_eq(kvs_store_set(s, k, 3, (const void *const *)v), 3);
	ck_assert_int_eq(kvs_store_set(s, k + 4, 4, (const void *const *)(v + 4)), 4);
	ck_assert_int_eq(kvs_store_exists(s, k, 8), 3);
	ck_assert_int_eq(kvs_store_exists(s, k + 4, 4), 4);
	ck_assert_int_eq(kvs_store_exists(s, k + 3, 5), 0);
	ck_assert_int_eq(kvs_store_get(s, k, 8, (void *const *)w), 3);
	for (i = 0; i < 3; i++)
		ck_assert(val_ok(w[i], PB, 100u + (unsigned)i));
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_get_hits), 3);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_get_misses), 13);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_exists_hits), 7);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), 0);
	/* Set over present keys: not rewritten (a different value stays out). */
	ck_assert_int_eq(kvs_store_set(s, k, 8, (const void *const *)(v + 0)), 8);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_set_skipped), 7);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_set_stored), 8);
	ck_assert_int_eq(kvs_store_set(s, k + 5, 1, (const void *const *)v), 1);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_set_skipped), 8);
	ck_assert_int_eq(kvs_store_get(s, k, 8, (void *const *)w), 8);
	for (i = 0; i < 8; i++)
		ck_assert_msg(val_ok(w[i], PB, 100u + (unsigned)(i == 3 ? 3 : i)), "page %d", i);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_written), 8 * PB);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_read), 11 * PB);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_stored), 8 * (PB + 64));
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), 0);
	/* A second store over the same directory sees them (shared L3). */
	{
		kvs_store_t *t = open_pb(PB);

		ck_assert_int_eq(kvs_store_exists(t, k, 8), 8);
		ck_assert_uint_eq(st(t, KVS_STORE_STAT_bytes_stored), 8 * (PB + 64));
		kvs_store_close(t);
	}
	/* Stats by name and printed. */
	{
		uint64_t x;

		ck_assert_int_eq(kvs_store_stat_get(s, "set_stored", &x), 0);
		ck_assert_uint_eq(x, 8);
		ck_assert_str_eq(kvs_store_stat_name(KVS_STORE_STAT_evicted), "evicted");
	}
	kvs_store_close(s);
	for (i = 0; i < 8; i++) {
		free(v[i]);
		free(w[i]);
	}
	rm_tmp();
}
END_TEST

/* A device pool over driver @d and a host pool of @layout. */
struct henv {
	kvs_drv_t *d;
	kvs_pool_t *pool;
	kvs_hpool_t *hp;
	size_t pb;
};

static void henv_open(struct henv *e, int bi, int layout)
{
	kvs_pool_attr_t pa;
	kvs_hpool_attr_t ha;

	e->d = tu_open_gran(bi, 64 * 1024, 0, 0);
	ck_assert_ptr_nonnull(e->d);
	kvs_pool_attr_init(&pa);
	pa.model.layers = 3;
	pa.model.kv_heads = 2;
	pa.model.head_dim = 16;
	pa.model.dtype_size = 2;
	pa.model.tp_size = 1;
	pa.model.context_len = 4096;
	pa.page_size = 16;
	pa.max_tokens = 64 * 16;
	pa.magazine = 0;
	e->pool = kvs_pool_create(e->d, &pa);
	ck_assert_ptr_nonnull(e->pool);
	kvs_hpool_attr_init(&ha);
	ha.layout = (uint32_t)layout;
	e->hp = kvs_hpool_create(e->pool, &ha);
	ck_assert_ptr_nonnull(e->hp);
	e->pb = 16 * (2 * 16 * 2) * 2 * 3;
}

static void henv_close(struct henv *e)
{
	ck_assert_int_eq(kvs_hpool_destroy(e->hp), 0);
	ck_assert_int_eq(kvs_pool_destroy(e->pool), 0);
	ck_assert_int_eq(kvs_drv_close(e->d), 0);
}

/* A host page's bytes in PAGE_FIRST order, through its pieces. */
static void hpage_read(struct henv *e, int32_t h, uint8_t *out)
{
	size_t off = 0, len;
	void *p;

	for (uint32_t l = 0; l < 3; l++)
		for (int kv = 0; kv < 2; kv++) {
			ck_assert_int_eq(kvs_hpool_page_ptr(e->hp, h, l, kv ? KVS_KV_V : KVS_KV_K,
							    &p, &len),
					 0);
			memcpy(out + off, p, len);
			off += len;
		}
	ck_assert_uint_eq(off, e->pb);
}

static void hpage_write(struct henv *e, int32_t h, const uint8_t *in)
{
	size_t off = 0, len;
	void *p;

	for (uint32_t l = 0; l < 3; l++)
		for (int kv = 0; kv < 2; kv++) {
			ck_assert_int_eq(kvs_hpool_page_ptr(e->hp, h, l, kv ? KVS_KV_V : KVS_KV_K,
							    &p, &len),
					 0);
			memcpy(p, in + off, len);
			off += len;
		}
}

START_TEST(test_pages)
{
	int layout = _i % 2, bi = _i / 2;
	kvs_page_key_t k[6];
	kvs_store_attr_t a;
	struct henv e;
	kvs_store_t *s;
	int32_t h[6], h2[6];
	uint8_t *buf, *vals[6];
	int i;

	if (bi >= tu_nbackends())
		return;
	mkdir_tmp();
	henv_open(&e, bi, layout ? KVS_HPOOL_PAGE_FIRST : KVS_HPOOL_LAYER_FIRST);
	attr_of(&a, e.pb);
	a.layout = layout ? KVS_HPOOL_PAGE_FIRST : KVS_HPOOL_LAYER_FIRST;
	s = open_a(&a);
	mkkeys(k, 6, 3);
	buf = malloc(e.pb);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 6, h), 0);
	ck_assert_int_eq(kvs_hpool_alloc(e.hp, 6, h2), 0);
	for (i = 0; i < 6; i++) {
		vals[i] = malloc(e.pb);
		fill_val(buf, e.pb, 200u + (unsigned)i);
		hpage_write(&e, h[i], buf);
	}
	ck_assert_int_eq(kvs_store_set_pages(s, k, 6, e.hp, h), 6);
	/* The value is the page in PAGE_FIRST order whatever the layout. */
	ck_assert_int_eq(kvs_store_get(s, k, 6, (void *const *)vals), 6);
	for (i = 0; i < 6; i++)
		ck_assert_msg(val_ok(vals[i], e.pb, 200u + (unsigned)i), "value %d", i);
	/* Read into other host pages, bit for bit; a gap at 4 stops it. */
	{
		char p[256], ns[32];

		snprintf(ns, sizeof(ns), "_m_0_1%s", layout ? "" : "_lf");
		obj_file(p, sizeof(p), &k[4], ns);
		ck_assert_int_eq(unlink(p), 0);
	}
	ck_assert_int_eq(kvs_store_get_pages(s, k, 6, e.hp, h2), 4);
	for (i = 0; i < 4; i++) {
		hpage_read(&e, h2[i], buf);
		ck_assert_msg(val_ok(buf, e.pb, 200u + (unsigned)i), "host page %d", i);
	}
	if (layout) {
		/* PAGE_FIRST: the bytes land in the page itself. */
		void *p;
		size_t sz;

		ck_assert_int_eq(kvs_hpool_page_bytes(e.hp, h2[0], &p, &sz), 0);
		ck_assert_uint_eq(sz, e.pb);
		ck_assert(val_ok(p, e.pb, 200));
	}
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), 0);
	ck_assert_int_eq(kvs_hpool_free(e.hp, 6, h), 0);
	ck_assert_int_eq(kvs_hpool_free(e.hp, 6, h2), 0);
	kvs_store_close(s);
	henv_close(&e);
	for (i = 0; i < 6; i++)
		free(vals[i]);
	free(buf);
	rm_tmp();
}
END_TEST

/* ------------------------------------------------------------ (d) failures */

START_TEST(test_faults)
{
	kvs_page_key_t k[4];
	kvs_store_t *in, *f;
	uint8_t *v[4], *w[4];
	int i;

	mkdir_tmp();
	mkkeys(k, 4, 4);
	for (i = 0; i < 4; i++) {
		v[i] = malloc(PB);
		w[i] = malloc(PB);
		fill_val(v[i], PB, 300u + (unsigned)i);
	}
	in = open_pb(PB);
	f = kvs_store_fault_open(in);
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(kvs_store_page_bytes(f), PB);

	/* set ERROR: nothing stored, counted. */
	ck_assert_int_eq(kvs_store_fault_fail_nth(f, KVS_SOP_SET, 1, KVS_SFAULT_ERROR), 0);
	ck_assert_int_eq(kvs_store_set(f, k, 4, (const void *const *)v), 0);
	ck_assert_uint_eq(st(f, KVS_STORE_STAT_io_errors), 4); /* one a page */
	ck_assert_uint_eq(st(f, KVS_STORE_STAT_set_stored), 0);
	ck_assert_int_eq(kvs_store_exists(in, k, 4), 0);
	ck_assert_int_eq(kvs_store_set(f, k, 4, (const void *const *)v), 4);

	/* exists ERROR: a count of 0, counted. */
	ck_assert_int_eq(kvs_store_fault_fail_nth(f, KVS_SOP_EXISTS, 1, KVS_SFAULT_ERROR), 0);
	ck_assert_int_eq(kvs_store_exists(f, k, 4), 0);
	ck_assert_uint_eq(st(f, KVS_STORE_STAT_io_errors), 5);
	ck_assert_int_eq(kvs_store_exists(f, k, 4), 4);

	/* get ERROR: misses, the objects left alone. */
	ck_assert_int_eq(kvs_store_fault_fail_nth(f, KVS_SOP_GET, 1, KVS_SFAULT_ERROR), 0);
	ck_assert_int_eq(kvs_store_get(f, k, 4, (void *const *)w), 0);
	ck_assert_uint_eq(st(f, KVS_STORE_STAT_io_errors), 9);
	ck_assert_uint_eq(st(f, KVS_STORE_STAT_get_misses), 4);
	ck_assert_int_eq(kvs_store_exists(in, k, 4), 4);

	/* get SHORT and CORRUPT: the first object is bad: a miss, counted,
	 * removed; nothing past it is handed out as a hit. */
	ck_assert_int_eq(kvs_store_fault_fail_nth(f, KVS_SOP_GET, 1, KVS_SFAULT_SHORT), 0);
	ck_assert_int_eq(kvs_store_get(f, k, 4, (void *const *)w), 0);
	ck_assert_uint_eq(st(f, KVS_STORE_STAT_checksum_fail), 1);
	ck_assert(!file_there(&k[0], "_m_0_1"));
	ck_assert_int_eq(kvs_store_exists(in, k + 1, 3), 3);
	ck_assert_int_eq(kvs_store_fault_fail_nth(f, KVS_SOP_ANY, 1, KVS_SFAULT_CORRUPT), 0);
	ck_assert_int_eq(kvs_store_get(f, k + 1, 3, (void *const *)(w + 1)), 0);
	ck_assert_uint_eq(st(f, KVS_STORE_STAT_checksum_fail), 2);
	ck_assert(!file_there(&k[1], "_m_0_1"));
	ck_assert_int_eq(kvs_store_get(f, k + 2, 2, (void *const *)(w + 2)), 2);
	ck_assert(val_ok(w[2], PB, 302) && val_ok(w[3], PB, 303));

	/* set SHORT and CORRUPT: a torn object on disk; its read is a miss,
	 * counted, and removes it; the next set writes it whole. */
	for (int kind = KVS_SFAULT_SHORT; kind <= KVS_SFAULT_CORRUPT; kind++) {
		uint64_t cf = st(f, KVS_STORE_STAT_checksum_fail);
		char p[256];

		obj_file(p, sizeof(p), &k[0], "_m_0_1");
		(void)unlink(p);

		ck_assert_int_eq(kvs_store_fault_fail_nth(f, KVS_SOP_SET, 1, kind), 0);
		ck_assert_int_eq(kvs_store_set(f, k, 1, (const void *const *)v), 1);
		ck_assert(file_there(&k[0], "_m_0_1"));
		ck_assert_int_eq(kvs_store_get(f, k, 1, (void *const *)w), 0);
		ck_assert_uint_eq(st(f, KVS_STORE_STAT_checksum_fail), cf + 1);
		ck_assert(!file_there(&k[0], "_m_0_1"));
		ck_assert_int_eq(kvs_store_set(f, k, 1, (const void *const *)v), 1);
		ck_assert_int_eq(kvs_store_get(f, k, 1, (void *const *)w), 1);
		ck_assert(val_ok(w[0], PB, 300));
	}

	/* Random faults of every kind on every op: a hit is always the bytes. */
	ck_assert_int_eq(kvs_store_fault_clear(f), 0);
	for (int round = 0; round < tu_scaled(300, 30); round++) {
		int kind = round % 3, n;

		ck_assert_int_eq(kvs_store_fault_fail_random(f, KVS_SOP_ANY, 0.3,
							     (uint64_t)round + 1, kind),
				 0);
		(void)kvs_store_set(f, k, 4, (const void *const *)v);
		(void)kvs_store_exists(f, k, 4);
		n = (int)kvs_store_get(f, k, 4, (void *const *)w);
		ck_assert_int_ge(n, 0);
		for (i = 0; i < n; i++)
			ck_assert_msg(val_ok(w[i], PB, 300u + (unsigned)i), "round %d page %d",
				      round, i);
	}
	ck_assert_int_eq(kvs_store_fault_clear(f), 0);
	ck_assert_int_eq(kvs_store_close(f), 0);
	kvs_store_close(in);
	for (i = 0; i < 4; i++) {
		free(v[i]);
		free(w[i]);
	}
	rm_tmp();
}
END_TEST

/* Objects damaged on disk by someone else: truncated, a byte flipped, a
 * byte appended. */
START_TEST(test_damaged)
{
	kvs_page_key_t k[3];
	kvs_store_t *s;
	uint8_t *v[3], *w[3];
	char p[256];
	int fd, i;

	mkdir_tmp();
	mkkeys(k, 3, 5);
	for (i = 0; i < 3; i++) {
		v[i] = malloc(PB);
		w[i] = malloc(PB);
		fill_val(v[i], PB, 400u + (unsigned)i);
	}
	s = open_pb(PB);
	ck_assert_int_eq(kvs_store_set(s, k, 3, (const void *const *)v), 3);
	obj_file(p, sizeof(p), &k[0], "_m_0_1");
	ck_assert_int_eq(truncate(p, 64 + PB / 2), 0);
	obj_file(p, sizeof(p), &k[1], "_m_0_1");
	fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	{
		uint8_t b;

		ck_assert_int_eq(pread(fd, &b, 1, 64 + 1000), 1);
		b ^= 1;
		ck_assert_int_eq(pwrite(fd, &b, 1, 64 + 1000), 1);
	}
	close(fd);
	obj_file(p, sizeof(p), &k[2], "_m_0_1");
	fd = open(p, O_WRONLY | O_APPEND);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "\n", 1), 1);
	close(fd);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(kvs_store_get(s, k + i, 1, (void *const *)w), 0);
		ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), (uint64_t)i + 1);
		ck_assert_msg(!file_there(&k[i], "_m_0_1"), "damaged object %d left", i);
	}
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_stored), 0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_get_hits), 0);
	/* Written again, whole. */
	ck_assert_int_eq(kvs_store_set(s, k, 3, (const void *const *)v), 3);
	ck_assert_int_eq(kvs_store_get(s, k, 3, (void *const *)w), 3);
	for (i = 0; i < 3; i++)
		ck_assert(val_ok(w[i], PB, 400u + (unsigned)i));
	kvs_store_close(s);
	for (i = 0; i < 3; i++) {
		free(v[i]);
		free(w[i]);
	}
	rm_tmp();
}
END_TEST

/* A full disk: a child limited by RLIMIT_FSIZE (SIGXFSZ ignored) writes a
 * page larger than it may; the set fails cleanly, counted, and leaves no
 * file.  Exit codes say what went wrong. */
START_TEST(test_full_disk)
{
	kvs_page_key_t k[2];
	pid_t pid;
	int stt;

	mkdir_tmp();
	mkkeys(k, 2, 6);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct rlimit rl = {PB, PB};
		uint8_t *v = malloc(PB), *w = malloc(PB);
		const void *vv[2] = {v, v};
		void *ww[1] = {w};
		kvs_store_t *s;

		signal(SIGXFSZ, SIG_IGN);
		s = open_pb(PB);
		fill_val(v, PB, 1);
		if (setrlimit(RLIMIT_FSIZE, &rl) < 0)
			_exit(2);
		if (kvs_store_set(s, k, 2, vv) != 0)
			_exit(3);
		if (st(s, KVS_STORE_STAT_io_errors) != 2 || st(s, KVS_STORE_STAT_set_stored) != 0)
			_exit(4);
		if (kvs_store_exists(s, k, 2) != 0 || kvs_store_get(s, k, 1, ww) != 0)
			_exit(5);
		if (count_tmp() != 0 || st(s, KVS_STORE_STAT_bytes_stored) != 0)
			_exit(6);
		kvs_store_close(s);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &stt, 0), pid);
	ck_assert_msg(WIFEXITED(stt) && WEXITSTATUS(stt) == 0, "child status %#x", stt);
	rm_tmp();
}
END_TEST

/* The directory gone or unwritable: misses and failed sets, counted. */
START_TEST(test_no_dir)
{
	kvs_page_key_t k[2];
	kvs_store_attr_t a;
	kvs_store_t *s;
	uint8_t *v = malloc(PB);
	const void *vv[2] = {v, v};
	void *ww[2] = {v, v};
	char bad[128];
	int fd;

	mkdir_tmp();
	mkkeys(k, 2, 7);
	fill_val(v, PB, 9);
	attr_of(&a, PB);
	/* A path through a regular file: open fails. */
	snprintf(bad, sizeof(bad), "%s/f", dir);
	fd = open(bad, O_CREAT | O_WRONLY, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(bad, sizeof(bad), "file://%s/f/sub", dir);
	errno = 0;
	ck_assert_ptr_null(kvs_store_open(bad, &a));
	ck_assert_int_eq(errno, ENOTDIR);
	ck_assert_ptr_null(kvs_store_open("file://relative/dir", &a));
	ck_assert_int_eq(errno, EINVAL);
	if (geteuid() != 0) {
		/* Unwritable (root writes anyway). */
		s = open_a(&a);
		ck_assert_int_eq(chmod(dir, 0555), 0);
		ck_assert_int_eq(kvs_store_set(s, k, 2, vv), 0);
		ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), 2);
		ck_assert_int_eq(chmod(dir, 0755), 0);
		kvs_store_close(s);
	}
	/* Removed under an open store. */
	s = open_a(&a);
	ck_assert_int_eq(kvs_store_set(s, k, 1, vv), 1);
	rm_tmp();
	ck_assert_int_eq(kvs_store_set(s, k + 1, 1, vv + 1), 0);
	ck_assert_uint_ge(st(s, KVS_STORE_STAT_io_errors), 1);
	ck_assert_int_eq(kvs_store_exists(s, k, 2), 0);
	ck_assert_int_eq(kvs_store_get(s, k, 2, ww), 0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_get_misses), 2);
	kvs_store_close(s);
	free(v);
}
END_TEST

/* ------------------------------------------------------------ (e) the limit */

START_TEST(test_lru)
{
	const uint64_t obj = PB + 64;
	kvs_page_key_t k[8];
	kvs_store_attr_t a, b;
	kvs_store_t *s, *t;
	uint8_t *v = malloc(PB), *w = malloc(PB);
	const void *vv[1] = {v};
	void *ww[1] = {w};
	int i;

	mkdir_tmp();
	mkkeys(k, 8, 8);
	fill_val(v, PB, 5);
	attr_of(&a, PB);
	a.max_bytes = 3 * obj + 100;
	a.fsync = KVS_FSYNC_NONE;
	s = open_a(&a);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(kvs_store_set(s, k + i, 1, vv), 1);
	}
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_stored), 3 * obj);
	/* A get refreshes page 0: page 1 is the least recently used. */
	ck_assert_int_eq(kvs_store_get(s, k, 1, ww), 1);
	ck_assert_int_eq(kvs_store_set(s, k + 3, 1, vv), 1);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_evicted), 1);
	ck_assert(!file_there(&k[1], "_m_0_1"));
	ck_assert(file_there(&k[0], "_m_0_1") && file_there(&k[2], "_m_0_1") &&
		  file_there(&k[3], "_m_0_1"));
	/* exists refreshes too (page 2); a set of a present key as well (3). */
	ck_assert_int_eq(kvs_store_exists(s, k + 2, 1), 1);
	ck_assert_int_eq(kvs_store_set(s, k + 3, 1, vv), 1);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_set_skipped), 1);
	ck_assert_int_eq(kvs_store_set(s, k + 4, 1, vv), 1);
	ck_assert(!file_there(&k[0], "_m_0_1"));
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_evicted), 2);
	/* Order now (oldest first): 2, 3, 4. */
	for (i = 5; i < 8; i++) {
		ck_assert_int_eq(kvs_store_set(s, k + i, 1, vv), 1);
		ck_assert(!file_there(&k[i - 3], "_m_0_1"));
		ck_assert_uint_le(st(s, KVS_STORE_STAT_bytes_stored), a.max_bytes);
	}
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_evicted), 5);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_stored), 3 * obj);
	kvs_store_close(s);
	/* Modification times in the order of use, for the next open's scan
	 * (the clock's granularity may be coarser than the sets were apart). */
	for (i = 5; i < 8; i++) {
		struct timespec ts[2] = {{time(NULL) - 100 + 10 * i, 0}, {time(NULL) - 100 + 10 * i, 0}};
		char p[256];

		obj_file(p, sizeof(p), &k[i], "_m_0_1");
		ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
	}
	/* Another namespace in the directory counts toward its limit: its
	 * first set evicts the oldest of the first store's (page 5). */
	b = a;
	b.model = "other";
	t = open_a(&b);
	ck_assert_uint_eq(st(t, KVS_STORE_STAT_bytes_stored), 3 * obj);
	ck_assert_int_eq(kvs_store_set(t, k, 1, vv), 1);
	ck_assert_uint_eq(st(t, KVS_STORE_STAT_evicted), 1);
	ck_assert(!file_there(&k[5], "_m_0_1"));
	ck_assert(file_there(&k[6], "_m_0_1") && file_there(&k[7], "_m_0_1"));
	ck_assert_uint_eq(st(t, KVS_STORE_STAT_bytes_stored), 3 * obj);
	kvs_store_close(t);
	/* A smaller limit at open evicts down to it; an object larger than the
	 * limit is never stored. */
	b.max_bytes = obj;
	t = open_a(&b);
	ck_assert_uint_eq(st(t, KVS_STORE_STAT_evicted), 2);
	ck_assert_uint_eq(st(t, KVS_STORE_STAT_bytes_stored), obj);
	kvs_store_close(t);
	b.max_bytes = obj - 1;
	t = open_a(&b);
	ck_assert_uint_eq(st(t, KVS_STORE_STAT_bytes_stored), 0);
	ck_assert_int_eq(kvs_store_set(t, k + 1, 1, vv), 0);
	ck_assert_uint_eq(st(t, KVS_STORE_STAT_io_errors), 1);
	kvs_store_close(t);
	free(v);
	free(w);
	rm_tmp();
}
END_TEST

/* ------------------------------------------------------------ (f) crash */

#define CRASH_PB (64 * 1024)
#define CRASH_PAGES 200

static void crash_key(kvs_page_key_t *k, int life, int i)
{
	int32_t t[2] = {life, i};

	ck_assert_int_eq(kvs_page_hash(NULL, t, 2, k), 0);
}

/* The writer: pages (life, 0 ..) until killed; a byte on @fd after the
 * first.  Never returns. */
static void crash_writer(int life, int fd)
{
	uint8_t *v = malloc(CRASH_PB);
	kvs_store_attr_t a;
	kvs_store_t *s;
	kvs_page_key_t k;
	const void *vv[1] = {v};

	attr_of(&a, CRASH_PB);
	a.fsync = KVS_FSYNC_DATA;
	s = kvs_store_open(uri, &a);
	if (!s)
		_exit(2);
	for (int i = 0; i < CRASH_PAGES; i++) {
		crash_key(&k, life, i);
		fill_val(v, CRASH_PB, (unsigned)(life * 1000 + i));
		if (kvs_store_set(s, &k, 1, vv) != 1)
			_exit(3);
		if (i == 0 && write(fd, "x", 1) != 1)
			_exit(4);
	}
	_exit(0);
}

START_TEST(test_crash)
{
	int kills = (int)tu_scaled(20, 3), life, hits = 0, misses = 0, fds[2], stt;
	uint64_t rng = 0x5eed;
	uint8_t *w = malloc(CRASH_PB);
	void *ww[1] = {w};
	kvs_store_t *s;
	kvs_page_key_t k;
	char c;

	mkdir_tmp();
	for (life = 0; life < kills; life++) {
		pid_t pid;

		ck_assert_int_eq(pipe(fds), 0);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(fds[0]);
			crash_writer(life, fds[1]);
		}
		close(fds[1]);
		ck_assert_int_eq(read(fds[0], &c, 1), 1);
		close(fds[0]);
		usleep((useconds_t)(tu_rng(&rng) % 20000));
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, &stt, 0), pid);
		ck_assert_msg(WIFSIGNALED(stt) || (WIFEXITED(stt) && WEXITSTATUS(stt) == 0),
			      "writer %d status %#x", life, stt);
	}
	/* A new store: stale temporary files of the dead writers removed,
	 * every page either a miss or exactly its bytes. */
	s = open_pb(CRASH_PB);
	ck_assert_int_eq(count_tmp(), 0);
	for (life = 0; life < kills; life++)
		for (int i = 0; i < CRASH_PAGES; i++) {
			crash_key(&k, life, i);
			if (kvs_store_get(s, &k, 1, ww) == 1) {
				ck_assert_msg(val_ok(w, CRASH_PB, (unsigned)(life * 1000 + i)),
					      "life %d page %d: wrong bytes", life, i);
				hits++;
			} else {
				misses++;
			}
		}
	ck_assert_int_ge(hits, kills); /* each writer stored its first page */
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), 0);
	printf("storage: crash: %d writers killed, %d pages read whole, %d never written\n",
	       kills, hits, misses);
	kvs_store_close(s);
	free(w);
	rm_tmp();
}
END_TEST

/* A stale temporary file of a live process is kept unless old. */
START_TEST(test_stale_tmp)
{
	char p[256];
	kvs_store_t *s;
	struct timespec old[2] = {{0, 0}, {0, 0}};
	int fd;

	mkdir_tmp();
	/* Ours (alive, fresh): kept.  pid 1 (alive) but old: removed.  A pid
	 * that cannot exist: removed. */
	snprintf(p, sizeof(p), "%s/a_m_0_1.kvs.tmp.%ld.0", dir, (long)getpid());
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(p, sizeof(p), "%s/b_m_0_1.kvs.tmp.1.0", dir);
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	old[0].tv_sec = old[1].tv_sec = time(NULL) - 3600;
	ck_assert_int_eq(utimensat(AT_FDCWD, p, old, 0), 0);
	snprintf(p, sizeof(p), "%s/c_m_0_1.kvs.tmp.2147483646.0", dir);
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	s = open_pb(PB);
	ck_assert_int_eq(count_tmp(), 1);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_stored), 0);
	kvs_store_close(s);
	rm_tmp();
}
END_TEST

/* ------------------------------------------------------------ (g) sharing */

/* The mode bits of @path (permissions only). */
static unsigned mode_of(const char *path)
{
	struct stat sb;

	ck_assert_msg(stat(path, &sb) == 0, "stat %s: %s", path, strerror(errno));
	return (unsigned)(sb.st_mode & 07777);
}

/* Under umask 022 objects are 0600 in directories made 0700; with
 * KVS_STORE_SHARE_GROUP 0640 and 0750; a directory already there keeps
 * its mode; unknown flags are refused. */
START_TEST(test_perms)
{
	kvs_page_key_t k[1];
	kvs_store_attr_t a;
	kvs_store_t *s;
	uint8_t *v = malloc(PB);
	const void *vv[1] = {v};
	char sub[128], p[256];
	mode_t old = umask(022);
	int g;

	mkdir_tmp();
	mkkeys(k, 1, 21);
	fill_val(v, PB, 21);
	for (g = 0; g < 2; g++) {
		attr_of(&a, PB);
		a.flags = g ? KVS_STORE_SHARE_GROUP : 0;
		/* Two levels made by the store. */
		snprintf(sub, sizeof(sub), "%s/g%d", dir, g);
		snprintf(uri, sizeof(uri), "file://%s/g%d/objs", dir, g);
		s = open_a(&a);
		ck_assert_int_eq(kvs_store_set(s, k, 1, vv), 1);
		kvs_store_close(s);
		ck_assert_uint_eq(mode_of(sub), (g ? 0750u : 0700u));
		snprintf(p, sizeof(p), "%s/objs", sub);
		ck_assert_uint_eq(mode_of(p), (g ? 0750u : 0700u));
		snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/g%d/objs", g);
		obj_file(p, sizeof(p), &k[0], "_m_0_1");
		*strrchr(dir, '/') = 0;
		*strrchr(dir, '/') = 0;
		ck_assert_msg(mode_of(p) == (g ? 0640u : 0600u), "%s: %o", p, mode_of(p));
	}
	/* The directory of mkdtemp (0700) keeps its mode, shared or not. */
	snprintf(uri, sizeof(uri), "file://%s", dir);
	attr_of(&a, PB);
	a.flags = KVS_STORE_SHARE_GROUP;
	s = open_a(&a);
	kvs_store_close(s);
	ck_assert_uint_eq(mode_of(dir), 0700);
	a.flags = 0x2;
	errno = 0;
	ck_assert_ptr_null(kvs_store_open(uri, &a));
	ck_assert_int_eq(errno, EINVAL);
	umask(old);
	free(v);
	rm_tmp();
}
END_TEST

/* A FIFO, a symbolic link, a directory under an object's name: get
 * returns at once with a miss (in a child that SIGALRM ends if it
 * blocks), exists does not count them, set does not replace them, and
 * none is removed. */
START_TEST(test_not_regular)
{
	kvs_page_key_t k[4];
	kvs_store_t *s;
	uint8_t *v = malloc(PB);
	const void *vv[1] = {v};
	char tgt[128], names[3][256];
	struct stat sb;
	pid_t pid;
	int i, stt, fd;

	mkdir_tmp();
	mkkeys(k, 4, 22);
	fill_val(v, PB, 22);
	s = open_pb(PB);
	/* Each name as the store writes it, then replaced. */
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(kvs_store_set(s, k + i, 1, vv), 1);
		obj_file(names[i], sizeof(names[i]), &k[i], "_m_0_1");
		ck_assert_int_eq(unlink(names[i]), 0);
	}
	ck_assert_int_eq(kvs_store_set(s, k + 3, 1, vv), 1);
	ck_assert_int_eq(mkfifo(names[0], 0600), 0);
	snprintf(tgt, sizeof(tgt), "%s/target", dir);
	fd = open(tgt, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, v, 100), 100);
	close(fd);
	ck_assert_int_eq(symlink(tgt, names[1]), 0);
	ck_assert_int_eq(mkdir(names[2], 0700), 0);
	for (i = 0; i < 3; i++) {
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			uint8_t *w = malloc(PB);
			void *ww[1] = {w};

			/* check's own SIGALRM handler, inherited, would kill
			 * the whole test: the default action ends this child. */
			signal(SIGALRM, SIG_DFL);
			bool ok;

			alarm(20);
			ok = kvs_store_get(s, k + i, 1, ww) == 0 &&
			     st(s, KVS_STORE_STAT_checksum_fail) == 0;
			/* Nothing left for valgrind's leak check to count. */
			kvs_store_close(s);
			free(w);
			free(v);
			_exit(ok ? 0 : 1);
		}
		ck_assert_int_eq(waitpid(pid, &stt, 0), pid);
		ck_assert_msg(WIFEXITED(stt), "get of name %d did not return (signal %d)", i,
			      WIFSIGNALED(stt) ? WTERMSIG(stt) : 0);
		ck_assert_msg(WEXITSTATUS(stt) == 0, "get of name %d was no clean miss", i);
		ck_assert_int_eq(kvs_store_exists(s, k + i, 1), 0);
		ck_assert_int_eq(kvs_store_set(s, k + i, 1, vv), 0);
		ck_assert_int_eq(lstat(names[i], &sb), 0);
		ck_assert(i == 0 ? S_ISFIFO(sb.st_mode) : i == 1 ? S_ISLNK(sb.st_mode)
								 : S_ISDIR(sb.st_mode));
	}
	/* The link's target untouched, the real object still read. */
	ck_assert_int_eq(stat(tgt, &sb), 0);
	ck_assert_int_eq(sb.st_size, 100);
	{
		uint8_t *w = malloc(PB);
		void *ww[1] = {w};

		ck_assert_int_eq(kvs_store_get(s, k + 3, 1, ww), 1);
		ck_assert(val_ok(w, PB, 22));
		free(w);
	}
	kvs_store_close(s);
	free(v);
	rm_tmp();
}
END_TEST

/* Files the store did not write are never removed: raw bytes under a
 * kvslab name (of the right size, of another), SGLang's HiCacheFile pages
 * ("{key}_{model}_{rank}_{size}.bin") in the same directory with a size
 * limit that evicts. */
START_TEST(test_foreign)
{
	const uint64_t obj = PB + 64;
	kvs_page_key_t k[6];
	kvs_store_attr_t a;
	kvs_store_t *s;
	uint8_t *v = malloc(PB + 64), *w = malloc(PB);
	const void *vv[1] = {v};
	void *ww[1] = {w};
	char p[256], hex[65], sg[256], tmp[256];
	struct stat sb;
	int i, fd;

	mkdir_tmp();
	mkkeys(k, 6, 23);
	fill_val(v, PB + 64, 23);
	attr_of(&a, PB);
	a.fsync = KVS_FSYNC_NONE;
	s = open_a(&a);
	/* Two names as the store writes them, then overwritten with raw
	 * bytes, as another engine would write a page. */
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(kvs_store_set(s, k + i, 1, vv), 1);
		obj_file(p, sizeof(p), &k[i], "_m_0_1");
		fd = open(p, O_WRONLY | O_TRUNC);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, v, i ? PB : obj), i ? PB : (ssize_t)obj);
		close(fd);
		ck_assert_int_eq(kvs_store_get(s, k + i, 1, ww), 0);
		ck_assert_msg(access(p, F_OK) == 0, "foreign file %d removed", i);
		ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), 0);
	}
	kvs_store_close(s);
	/* SGLang's file of page 2, raw bytes, beside ours; then a limit of two
	 * objects and four sets: the store evicts its own, never that file. */
	kvs_page_key_hex(&k[2], hex);
	snprintf(sg, sizeof(sg), "%s/%s_m_0_1.bin", dir, hex);
	fd = open(sg, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, v, PB), PB);
	close(fd);
	/* And one of SGLang's temporary files, of a writer that is gone: the
	 * store removes only its own. */
	snprintf(tmp, sizeof(tmp), "%s/%s_m_0_1.bin.tmp.2147483646.1.0", dir, hex);
	fd = open(tmp, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	a.max_bytes = 2 * obj;
	s = open_a(&a);
	ck_assert_msg(access(tmp, F_OK) == 0, "SGLang's temporary file removed");
	for (i = 2; i < 6; i++)
		ck_assert_int_eq(kvs_store_set(s, k + i, 1, vv), 1);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_evicted), 2);
	ck_assert_int_eq(stat(sg, &sb), 0);
	ck_assert_int_eq(sb.st_size, PB);
	for (i = 0; i < 2; i++) {
		obj_file(p, sizeof(p), &k[i], "_m_0_1");
		ck_assert_msg(access(p, F_OK) == 0, "foreign file %d evicted", i);
	}
	/* SGLang's two files of page 2 are all that is left of it. */
	ck_assert_int_eq(files_of(&k[2]), 2);
	ck_assert_int_eq(access(tmp, F_OK), 0);
	ck_assert_int_eq(kvs_store_get(s, k + 4, 2, (void *[]){w, w}), 2);
	kvs_store_close(s);
	free(v);
	free(w);
	rm_tmp();
}
END_TEST

/* An empty file under an object's name, as a crash leaves an object
 * renamed before its data reached the disk (fsync NONE): a miss, not
 * counted by exists, and the next set of the key writes over it (counted
 * in bytes_stored by its new size).  A short file with content stays. */
START_TEST(test_empty_obj)
{
	kvs_page_key_t k[2];
	kvs_store_attr_t a;
	kvs_store_t *s;
	uint8_t *v = malloc(PB), *w = malloc(PB);
	const void *vv[1] = {v};
	void *ww[1] = {w};
	char p[2][256];
	int i, fd;

	mkdir_tmp();
	mkkeys(k, 2, 25);
	fill_val(v, PB, 25);
	attr_of(&a, PB);
	a.fsync = KVS_FSYNC_NONE;
	a.max_bytes = 16 * (PB + 64);
	s = open_a(&a);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(kvs_store_set(s, k + i, 1, vv), 1);
		obj_file(p[i], sizeof(p[i]), &k[i], "_m_0_1");
		ck_assert_int_eq(truncate(p[i], i ? 20 : 0), 0);
		ck_assert_int_eq(kvs_store_get(s, k + i, 1, ww), 0);
		ck_assert_int_eq(kvs_store_exists(s, k + i, 1), 0);
		ck_assert_int_eq(access(p[i], F_OK), 0);
	}
	/* The empty one: written over, read back whole. */
	ck_assert_int_eq(kvs_store_set(s, k, 1, vv), 1);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_set_stored), 3);
	ck_assert_int_eq(kvs_store_get(s, k, 1, ww), 1);
	ck_assert(val_ok(w, PB, 25));
	/* The short one with content: not ours to replace. */
	ck_assert_int_eq(kvs_store_set(s, k + 1, 1, vv), 0);
	fd = open(p[1], O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(lseek(fd, 0, SEEK_END), 20);
	close(fd);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), 0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_bytes_stored), (PB + 64) + 20);
	kvs_store_close(s);
	free(v);
	free(w);
	rm_tmp();
}
END_TEST

/* A model and a salt of any length are accepted, and kept apart by the
 * bytes past those the name keeps. */
START_TEST(test_long_names)
{
	static char m1[1100], m2[1100], salt[1500];
	kvs_page_key_t k[1];
	kvs_store_attr_t a, b;
	kvs_store_t *s, *t;
	uint8_t *v = malloc(PB), *w = malloc(PB);
	const void *vv[1] = {v};
	void *ww[1] = {w};

	mkdir_tmp();
	mkkeys(k, 1, 24);
	fill_val(v, PB, 24);
	memset(m1, 'x', sizeof(m1) - 1);
	memcpy(m2, m1, sizeof(m2));
	m2[sizeof(m2) - 2] = 'y';
	memset(salt, 's', sizeof(salt) - 1);
	attr_of(&a, PB);
	a.model = m1;
	a.salt = salt;
	s = kvs_store_open(uri, &a);
	ck_assert_msg(s, "a model of %zu bytes and a salt of %zu: %s", strlen(m1), strlen(salt),
		      strerror(errno));
	ck_assert_int_eq(kvs_store_set(s, k, 1, vv), 1);
	ck_assert_int_eq(kvs_store_get(s, k, 1, ww), 1);
	ck_assert(val_ok(w, PB, 24));
	b = a;
	b.model = m2;
	t = open_a(&b);
	ck_assert_int_eq(kvs_store_exists(t, k, 1), 0);
	ck_assert_int_eq(kvs_store_get(t, k, 1, ww), 0);
	ck_assert_int_eq(kvs_store_set(t, k, 1, vv), 1);
	ck_assert_uint_eq(st(t, KVS_STORE_STAT_set_stored), 1);
	ck_assert_int_eq(kvs_store_get(s, k, 1, ww), 1);
	kvs_store_close(t);
	kvs_store_close(s);
	free(v);
	free(w);
	rm_tmp();
}
END_TEST

/* ------------------------------------------------------------ threads */

#define MT_THREADS 4
#define MT_KEYS 24

struct mt_arg {
	kvs_store_t *s;
	const kvs_page_key_t *k;
	int id, rounds, bad;
};

/* Threads set, check and read overlapping keys under a limit that holds
 * a third of them: every hit is the page's bytes, the gauge never passes
 * the limit. */
static void *mt_main(void *p)
{
	struct mt_arg *a = p;
	uint8_t *v = malloc(PB), *w = malloc(PB);
	uint64_t x = (uint64_t)a->id + 11;

	for (int r = 0; r < a->rounds; r++) {
		int i = (int)(tu_rng(&x) % MT_KEYS);
		const void *vv[1] = {v};
		void *ww[1] = {w};

		fill_val(v, PB, 600u + (unsigned)i);
		(void)kvs_store_set(a->s, a->k + i, 1, vv);
		(void)kvs_store_exists(a->s, a->k + i, 1);
		if (kvs_store_get(a->s, a->k + i, 1, ww) == 1 && !val_ok(w, PB, 600u + (unsigned)i))
			a->bad++;
		if (kvs_store_stat(a->s, KVS_STORE_STAT_bytes_stored) > 8 * (PB + 64))
			a->bad++;
	}
	free(v);
	free(w);
	return NULL;
}

START_TEST(test_threads)
{
	kvs_page_key_t k[MT_KEYS];
	struct mt_arg a[MT_THREADS];
	pthread_t t[MT_THREADS];
	kvs_store_attr_t at;
	kvs_store_t *s;
	int i;

	mkdir_tmp();
	mkkeys(k, MT_KEYS, 9);
	attr_of(&at, PB);
	at.fsync = KVS_FSYNC_NONE;
	at.max_bytes = 8 * (PB + 64);
	s = open_a(&at);
	for (i = 0; i < MT_THREADS; i++) {
		a[i] = (struct mt_arg){s, k, i, (int)tu_scaled(400, 40), 0};
		ck_assert_int_eq(pthread_create(&t[i], NULL, mt_main, &a[i]), 0);
	}
	for (i = 0; i < MT_THREADS; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_int_eq(a[i].bad, 0);
	}
	ck_assert_uint_le(st(s, KVS_STORE_STAT_bytes_stored), at.max_bytes);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_checksum_fail), 0);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_io_errors), 0);
	ck_assert_uint_gt(st(s, KVS_STORE_STAT_evicted), 0);
	kvs_store_close(s);
	/* What the index said is what the directory holds. */
	s = open_a(&at);
	ck_assert_uint_le(st(s, KVS_STORE_STAT_bytes_stored), at.max_bytes);
	ck_assert_uint_eq(st(s, KVS_STORE_STAT_evicted), 0);
	kvs_store_close(s);
	rm_tmp();
}
END_TEST

static Suite *storage_suite(void)
{
	Suite *s = suite_create("storage");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_keys);
	tcase_add_test(tc, test_namespace);
	tcase_add_loop_test(tc, test_ns_collide, 0, 3);
	tcase_add_test(tc, test_calls);
	tcase_add_loop_test(tc, test_pages, 0, 4);
	tcase_add_test(tc, test_faults);
	tcase_add_test(tc, test_damaged);
	tcase_add_test(tc, test_full_disk);
	tcase_add_test(tc, test_no_dir);
	tcase_add_test(tc, test_lru);
	tcase_add_test(tc, test_crash);
	tcase_add_test(tc, test_stale_tmp);
	tcase_add_test(tc, test_threads);
	tcase_add_test(tc, test_perms);
	tcase_add_test(tc, test_not_regular);
	tcase_add_test(tc, test_foreign);
	tcase_add_test(tc, test_long_names);
	tcase_add_test(tc, test_empty_obj);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(storage_suite());
}
