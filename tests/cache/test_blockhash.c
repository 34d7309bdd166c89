/* SPDX-License-Identifier: MIT */
/*
 * tests/cache/test_blockhash.c - vLLM's block hashes: byte for byte against
 * tests/blockhash_ref.py (python3 with cbor2, hashing as vLLM does) when it
 * can run, against vectors it printed otherwise; incremental hashing;
 * bad input.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define MAXB 64

static const char *const fn_name[] = { "", "sha256_cbor", "sha256_cbor_64", "xxh3_128" };

struct hcase {
	int fn;
	uint32_t bs;
	const char *seed;
	size_t ntokens;
	kvs_block_extra_t extra;
	bool has_extra;
	const kvs_block_hash_t *root;	/* instead of the seed, when set */
};

static int32_t tok[4096];

/* Token ids covering every CBOR integer width. */
static void fill_tokens(void)
{
	static const int32_t edge[] = { 0, 1, 23, 24, 255, 256, 65535, 65536, 151643, INT32_MAX };
	uint64_t x = 42;

	for (size_t i = 0; i < sizeof(tok) / sizeof(tok[0]); i++)
		tok[i] = i < 10 ? edge[i] : (int32_t)(tu_rng(&x) % 200000);
}

static kvs_block_hasher_t *mk(int fn, uint32_t bs, const char *seed)
{
	kvs_block_hasher_attr_t a;
	kvs_block_hasher_t *h;

	kvs_block_hasher_attr_init(&a);
	a.fn = fn;
	a.block_size = bs;
	a.seed = seed;
	a.seed_len = seed ? strlen(seed) : 0;
	h = kvs_block_hasher_create(&a);
	ck_assert_msg(h, "create %s: %s", fn_name[fn], strerror(errno));
	return h;
}

static void hex(const kvs_block_hash_t *b, char *s)
{
	for (uint32_t i = 0; i < b->len; i++)
		sprintf(s + 2 * i, "%02x", b->bytes[i]);
	s[2 * b->len] = 0;
}

static void put_hex(FILE *f, const char *key, const char *s)
{
	fprintf(f, "%s ", key);
	for (; *s; s++)
		fprintf(f, "%02x", (unsigned char)*s);
	fprintf(f, "\n");
}

static size_t hash_case(const struct hcase *c, kvs_block_hash_t *out)
{
	kvs_block_hasher_t *h;
	size_t n = 0;

	if (c->root) {
		kvs_block_hasher_attr_t a;

		kvs_block_hasher_attr_init(&a);
		a.fn = c->fn;
		a.block_size = c->bs;
		a.root = c->root;
		h = kvs_block_hasher_create(&a);
		ck_assert_msg(h, "create %s with a root of %u bytes: %s", fn_name[c->fn],
			      c->root->len, strerror(errno));
	} else {
		h = mk(c->fn, c->bs, c->seed);
	}

	ck_assert_int_eq(kvs_block_hash_request(h, tok, c->ntokens, c->has_extra ? &c->extra : NULL,
						out, MAXB, &n), 0);
	ck_assert_uint_eq(n, c->ntokens / c->bs);
	kvs_block_hasher_destroy(h);
	return n;
}

/* 1: compared; 0: python or a module missing. */
static int compare_with_python(const char *name, const struct hcase *c)
{
	const char *src = getenv("KVSLAB_TOP_SRCDIR");
	char path[] = "/tmp/kvs_bh_XXXXXX", cmd[4096], line[256], want[80];
	kvs_block_hash_t got[MAXB];
	size_t n = hash_case(c, got), i = 0;
	int fd, st;
	FILE *f, *p;

	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	fprintf(f, "fn %s\nblock_size %u\n", fn_name[c->fn], c->bs);
	if (c->root) {
		fprintf(f, "root ");
		for (uint32_t k = 0; k < c->root->len; k++)
			fprintf(f, "%02x", c->root->bytes[k]);
		fprintf(f, "\n");
	} else {
		put_hex(f, "seed", c->seed);
	}
	fprintf(f, "tokens");
	for (size_t k = 0; k < c->ntokens; k++)
		fprintf(f, " %d", tok[k]);
	fprintf(f, "\n");
	if (c->has_extra) {
		if (c->extra.lora_name)
			put_hex(f, "lora", c->extra.lora_name);
		if (c->extra.cache_salt)
			put_hex(f, "salt", c->extra.cache_salt);
		for (size_t k = 0; k < c->extra.nmm; k++) {
			put_hex(f, "mm", c->extra.mm[k].identifier);
			fseek(f, -1, SEEK_CUR);
			fprintf(f, " %llu %llu\n", (unsigned long long)c->extra.mm[k].offset,
				(unsigned long long)c->extra.mm[k].length);
		}
	}
	fclose(f);
	/* The first python3 that has cbor2: a pyenv's may lack what apt added. */
	snprintf(cmd, sizeof(cmd),
		 "for py in $KVSLAB_PYTHON python3 /usr/bin/python3; do "
		 "$py -c 'import cbor2' 2>/dev/null && exec $py '%s/tests/blockhash_ref.py' < %s; "
		 "done; exit 77", src ? src : ".", path);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (fgets(line, sizeof(line), p)) {
		line[strcspn(line, "\n")] = 0;
		ck_assert_uint_lt(i, n);
		hex(&got[i], want);
		ck_assert_msg(!strcmp(line, want), "%s block %zu: python %s, kvslab %s", name, i,
			      line, want);
		i++;
	}
	st = pclose(p);
	unlink(path);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		ck_assert_uint_eq(i, 0);
		printf("blockhash: %s: python3 with cbor2%s not available, comparison skipped\n",
		       name, c->fn == KVS_HASH_XXH3_128 ? " and xxhash" : "");
		return 0;
	}
	ck_assert_uint_eq(i, n);
	return 1;
}

static const kvs_block_mm_t mm_items[] = {
	{ "img-a", 5, 30 },	/* blocks 0, 1, 2; offset -11 and -27 from 1, 2 */
	{ "img-b", 40, 3 },	/* block 2 as well */
	{ "img-c", 60, 10 },	/* blocks 3 and 4 */
	{ "img-d", 70, 2 },	/* block 4 */
};

START_TEST(test_python)
{
	kvs_block_hash_t root32 = { .len = 32 };

	struct hcase c[] = {
		{ KVS_HASH_SHA256_CBOR, 16, "0", 87, { 0 }, false },
		{ KVS_HASH_SHA256_CBOR, 16, "0", 87, { .lora_name = "my-lora" }, true },
		{ KVS_HASH_SHA256_CBOR, 16, "0", 87, { .cache_salt = "tenant-1" }, true },
		{ KVS_HASH_SHA256_CBOR, 16, "0", 87,
		  { .lora_name = "l", .mm = mm_items, .nmm = 4, .cache_salt = "s" }, true },
		{ KVS_HASH_SHA256_CBOR, 16, "1234", 80, { .mm = mm_items, .nmm = 4 }, true },
		{ KVS_HASH_SHA256_CBOR_64, 16, "", 87, { 0 }, false },
		{ KVS_HASH_SHA256_CBOR_64, 16, "42", 87, { .lora_name = "x", .cache_salt = "y" }, true },
		{ KVS_HASH_XXH3_128, 16, "0", 87, { .mm = mm_items, .nmm = 4 }, true },
		{ KVS_HASH_SHA256_CBOR, 1, "0", 9, { .mm = mm_items, .nmm = 1 }, true },
		/* 300 tokens encode past the encoder's 1 KiB buffer. */
		{ KVS_HASH_SHA256_CBOR, 300, "7", 950, { .lora_name = "l" }, true },
		{ KVS_HASH_XXH3_128, 300, "7", 950, { 0 }, false },
		/* vLLM's unseeded root, 32 bytes, for both functions. */
		{ KVS_HASH_XXH3_128, 16, NULL, 87, { .lora_name = "l" }, true, &root32 },
		{ KVS_HASH_SHA256_CBOR, 16, NULL, 87, { 0 }, false, &root32 },
	};
	int ran = 0;
	char name[32];

	for (uint32_t k = 0; k < 32; k++)
		root32.bytes[k] = (uint8_t)(0xa5 ^ (k * 37));
	fill_tokens();
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		snprintf(name, sizeof(name), "case %zu", i);
		ran += compare_with_python(name, &c[i]);
	}
	printf("blockhash: %d of %zu cases compared with python3 (cbor2, hashlib, xxhash)\n", ran,
	       sizeof(c) / sizeof(c[0]));
}
END_TEST

/* Printed by tests/blockhash_ref.py (sha256_cbor, seed "0", block 16, the
 * tokens of fill_tokens()): checks the encoding where python3 is missing. */
START_TEST(test_vectors)
{
	static const char *const want[] = {
		"2ce77f37ff72006bdbdfd7e24d3ad218901739908d83b8ebb14167a9adf9241b",
		"b4899c8c6553e0d7d8b91d6db0cc44382f953032df06e9b9526d8d768bdc2fa2",
	};
	struct hcase c = { KVS_HASH_SHA256_CBOR, 16, "0", 32, { 0 }, false };
	kvs_block_hash_t got[MAXB];
	char s[80];

	fill_tokens();
	ck_assert_uint_eq(hash_case(&c, got), 2);
	for (int i = 0; i < 2; i++) {
		hex(&got[i], s);
		ck_assert_str_eq(s, want[i]);
	}
	ck_assert_uint_eq(kvs_block_hash_u64(&got[0]), 0xb14167a9adf9241bULL);
}
END_TEST

/* The salt changes the first block only; hashes chain on, so every later
 * one differs too, but its encoding has no salt. */
START_TEST(test_salt_first_block)
{
	kvs_block_hasher_t *h = mk(KVS_HASH_SHA256_CBOR, 16, "0");
	kvs_block_extra_t s1 = { .cache_salt = "a" }, s2 = { .cache_salt = "b" },
			  empty = { .cache_salt = "" };
	kvs_block_hash_t a[4], b[4], n[4], e[4], x;

	fill_tokens();
	ck_assert_int_eq(kvs_block_hash(h, NULL, tok, 0, &s1, &a[0]), 0);
	ck_assert_int_eq(kvs_block_hash(h, NULL, tok, 0, &s2, &b[0]), 0);
	ck_assert_int_eq(kvs_block_hash(h, NULL, tok, 0, NULL, &n[0]), 0);
	ck_assert_int_eq(kvs_block_hash(h, NULL, tok, 0, &empty, &e[0]), 0);
	ck_assert_mem_ne(a[0].bytes, b[0].bytes, 32);
	ck_assert_mem_ne(a[0].bytes, n[0].bytes, 32);
	ck_assert_mem_eq(e[0].bytes, n[0].bytes, 32);	/* "" is no salt, as in vLLM */
	/* The second block with the salt equals the one without, given the
	 * same parent. */
	ck_assert_int_eq(kvs_block_hash(h, &a[0], tok + 16, 16, &s1, &x), 0);
	ck_assert_int_eq(kvs_block_hash(h, &a[0], tok + 16, 16, NULL, &a[1]), 0);
	ck_assert_mem_eq(x.bytes, a[1].bytes, 32);
	kvs_block_hasher_destroy(h);
}
END_TEST

START_TEST(test_seed_and_root)
{
	kvs_block_hasher_t *r1 = mk(_i, 16, NULL), *r2 = mk(_i, 16, NULL);
	kvs_block_hasher_t *s1 = mk(_i, 16, "7"), *s2 = mk(_i, 16, "7"), *s3 = mk(_i, 16, "8");
	kvs_block_hasher_attr_t a;
	kvs_block_hasher_t *shared;
	kvs_block_hash_t root, h1, h2, h3;
	uint32_t len = _i == KVS_HASH_SHA256_CBOR ? 32 : _i == KVS_HASH_SHA256_CBOR_64 ? 8 : 16;
	/* vLLM's unseeded NONE_HASH: os.urandom(32), whatever the function. */
	uint32_t root_len = _i == KVS_HASH_SHA256_CBOR_64 ? 8 : 32;

	fill_tokens();
	ck_assert_int_eq(kvs_block_hash(r1, NULL, tok, 0, NULL, &h1), 0);
	ck_assert_int_eq(kvs_block_hash(r2, NULL, tok, 0, NULL, &h2), 0);
	ck_assert_uint_eq(h1.len, len);
	ck_assert_mem_ne(h1.bytes, h2.bytes, len);	/* random roots */
	/* A process given r1's root hashes as r1 does. */
	ck_assert_int_eq(kvs_block_hasher_root(r1, &root), 0);
	ck_assert_uint_eq(root.len, root_len);
	kvs_block_hasher_attr_init(&a);
	a.fn = _i;
	a.root = &root;
	shared = kvs_block_hasher_create(&a);
	ck_assert_ptr_nonnull(shared);
	ck_assert_int_eq(kvs_block_hash(shared, NULL, tok, 0, NULL, &h3), 0);
	ck_assert_mem_eq(h1.bytes, h3.bytes, len);
	/* The same seed, the same hashes; another seed, others. */
	ck_assert_int_eq(kvs_block_hash(s1, NULL, tok, 0, NULL, &h1), 0);
	ck_assert_int_eq(kvs_block_hash(s2, NULL, tok, 0, NULL, &h2), 0);
	ck_assert_int_eq(kvs_block_hash(s3, NULL, tok, 0, NULL, &h3), 0);
	ck_assert_mem_eq(h1.bytes, h2.bytes, len);
	ck_assert_mem_ne(h1.bytes, h3.bytes, len);
	kvs_block_hasher_destroy(r1);
	kvs_block_hasher_destroy(r2);
	kvs_block_hasher_destroy(s1);
	kvs_block_hasher_destroy(s2);
	kvs_block_hasher_destroy(s3);
	kvs_block_hasher_destroy(shared);
}
END_TEST

/* Prefill then decode one token at a time: each block hashed once, a hash
 * added exactly when a block fills, the same hashes as in one call. */
START_TEST(test_incremental)
{
	kvs_block_hasher_t *h = mk(KVS_HASH_SHA256_CBOR, 16, "0");
	kvs_block_extra_t x = { .lora_name = "l", .mm = mm_items, .nmm = 4, .cache_salt = "s" };
	kvs_block_hash_t inc[MAXB], all[MAXB];
	size_t n = 0, m = 0;

	fill_tokens();
	ck_assert_int_eq(kvs_block_hash_request(h, tok, 0, &x, inc, MAXB, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(kvs_block_hash_request(h, tok, 37, &x, inc, MAXB, &n), 0);	/* prefill */
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(kvs_block_hasher_blocks(h), 2);
	for (size_t t = 38; t <= 16 * 20 + 3; t++) {
		size_t before = n;

		ck_assert_int_eq(kvs_block_hash_request(h, tok, t, &x, inc, MAXB, &n), 0);
		ck_assert_uint_eq(n, t / 16);
		ck_assert_uint_eq(n - before, t % 16 == 0);
		ck_assert_uint_eq(kvs_block_hasher_blocks(h), n);
	}
	ck_assert_int_eq(kvs_block_hash_request(h, tok, 16 * 20 + 3, &x, all, MAXB, &m), 0);
	ck_assert_uint_eq(m, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_mem_eq(inc[i].bytes, all[i].bytes, 32);
	/* Capped at max_hashes: a lookup of the first blocks only. */
	m = 0;
	ck_assert_int_eq(kvs_block_hash_request(h, tok, 16 * 20, &x, all, 3, &m), 0);
	ck_assert_uint_eq(m, 3);
	ck_assert_mem_eq(inc[2].bytes, all[2].bytes, 32);
	/* A block through kvs_block_hash() is the same block. */
	ck_assert_int_eq(kvs_block_hash(h, &inc[4], tok + 80, 80, &x, &all[5]), 0);
	ck_assert_mem_eq(inc[5].bytes, all[5].bytes, 32);
	kvs_block_hasher_destroy(h);
}
END_TEST

START_TEST(test_badinput)
{
	kvs_block_hasher_t *h = mk(KVS_HASH_SHA256_CBOR, 16, "0");
	kvs_block_hasher_attr_t a;
	kvs_block_hash_t p, out[4], short_root = { .len = 8 };
	kvs_block_mm_t unsorted[] = { { "a", 10, 5 }, { "b", 2, 1 } };
	kvs_block_mm_t overlap[] = { { "a", 10, 5 }, { "b", 12, 1 } };
	kvs_block_mm_t noid[] = { { NULL, 10, 5 } };
	kvs_block_extra_t bad1 = { .mm = unsorted, .nmm = 2 }, bad2 = { .mm = overlap, .nmm = 2 },
			  bad3 = { .mm = noid, .nmm = 1 }, bad4 = { .mm = NULL, .nmm = 1 };
	size_t n;

	fill_tokens();
#define EINV(expr) do { errno = 0; ck_assert_int_eq((expr), -1); ck_assert_int_eq(errno, EINVAL); } while (0)
#define EINVP(expr) do { errno = 0; ck_assert_ptr_null(expr); ck_assert_int_eq(errno, EINVAL); } while (0)
	kvs_block_hasher_attr_init(&a);
	a.fn = 0;
	EINVP(kvs_block_hasher_create(&a));
	a.fn = 99;
	EINVP(kvs_block_hasher_create(&a));
	kvs_block_hasher_attr_init(&a);
	a.block_size = 0;
	EINVP(kvs_block_hasher_create(&a));
	kvs_block_hasher_attr_init(&a);
	a.seed_len = 3;
	EINVP(kvs_block_hasher_create(&a));
	kvs_block_hasher_attr_init(&a);
	a.root = &short_root;
	EINVP(kvs_block_hasher_create(&a));
	a.seed = "x";
	a.seed_len = 1;
	a.root = &p;
	p.len = 32;
	EINVP(kvs_block_hasher_create(&a));
	/* xxh3-128 takes a root of 16 bytes (its hash) or 32 (vLLM's random
	 * NONE_HASH), no other; the 64-bit chain only 8. */
	kvs_block_hasher_attr_init(&a);
	a.fn = KVS_HASH_XXH3_128;
	a.root = &p;
	memset(&p, 0, sizeof(p));
	p.len = 24;
	EINVP(kvs_block_hasher_create(&a));
	p.len = 8;
	EINVP(kvs_block_hasher_create(&a));
	a.fn = KVS_HASH_SHA256_CBOR_64;
	p.len = 32;
	EINVP(kvs_block_hasher_create(&a));
	a.fn = KVS_HASH_SHA256_CBOR;
	p.len = 16;
	EINVP(kvs_block_hasher_create(&a));

	ck_assert_int_eq(kvs_block_hash(h, NULL, tok, 0, NULL, &p), 0);
	EINV(kvs_block_hash(NULL, NULL, tok, 0, NULL, &p));
	EINV(kvs_block_hash(h, NULL, NULL, 0, NULL, &p));
	EINV(kvs_block_hash(h, NULL, tok, 0, NULL, NULL));
	EINV(kvs_block_hash(h, NULL, tok, 16, NULL, out));	/* no parent past block 0 */
	EINV(kvs_block_hash(h, &p, tok, 0, NULL, out));	/* a parent at block 0 */
	EINV(kvs_block_hash(h, &p, tok, 17, NULL, out));	/* not a block's start */
	EINV(kvs_block_hash(h, &short_root, tok, 16, NULL, out));
	EINV(kvs_block_hash(h, NULL, tok, 0, &bad1, out));
	EINV(kvs_block_hash(h, NULL, tok, 0, &bad2, out));
	EINV(kvs_block_hash(h, NULL, tok, 0, &bad3, out));
	EINV(kvs_block_hash(h, NULL, tok, 0, &bad4, out));

	n = 0;
	EINV(kvs_block_hash_request(NULL, tok, 32, NULL, out, 4, &n));
	EINV(kvs_block_hash_request(h, NULL, 32, NULL, out, 4, &n));
	EINV(kvs_block_hash_request(h, tok, 32, NULL, NULL, 4, &n));
	EINV(kvs_block_hash_request(h, tok, 32, NULL, out, 4, NULL));
	EINV(kvs_block_hash_request(h, tok, 32, &bad1, out, 4, &n));
	n = 3;	/* more hashes than full blocks */
	EINV(kvs_block_hash_request(h, tok, 32, NULL, out, 4, &n));
	n = 5;	/* more than room */
	EINV(kvs_block_hash_request(h, tok, 128, NULL, out, 4, &n));
	n = 1;
	out[0].len = 8;	/* a hash of another function */
	EINV(kvs_block_hash_request(h, tok, 32, NULL, out, 4, &n));
	n = 0;
	ck_assert_int_eq(kvs_block_hash_request(h, NULL, 0, NULL, out, 4, &n), 0);
	ck_assert_uint_eq(n, 0);

	EINV(kvs_block_hasher_root(NULL, &p));
	EINV(kvs_block_hasher_root(h, NULL));
	ck_assert_uint_eq(kvs_block_hasher_blocks(NULL), 0);
	ck_assert_uint_eq(kvs_block_hash_u64(NULL), 0);
	ck_assert_int_eq(kvs_block_hasher_destroy(NULL), 0);
	kvs_block_hasher_attr_init(NULL);
	kvs_block_hasher_destroy(h);
}
END_TEST

START_TEST(test_u64)
{
	kvs_block_hash_t b = { .len = 32 };

	for (int i = 0; i < 32; i++)
		b.bytes[i] = (uint8_t)i;
	ck_assert_uint_eq(kvs_block_hash_u64(&b), 0x18191a1b1c1d1e1fULL);
	b.len = 16;
	ck_assert_uint_eq(kvs_block_hash_u64(&b), 0x08090a0b0c0d0e0fULL);
	b.len = 8;
	ck_assert_uint_eq(kvs_block_hash_u64(&b), 0x0001020304050607ULL);
}
END_TEST

static Suite *blockhash_suite(void)
{
	Suite *s = suite_create("blockhash");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_python);
	tcase_add_test(tc, test_vectors);
	tcase_add_test(tc, test_salt_first_block);
	tcase_add_loop_test(tc, test_seed_and_root, KVS_HASH_SHA256_CBOR, KVS_HASH_XXH3_128 + 1);
	tcase_add_test(tc, test_incremental);
	tcase_add_test(tc, test_badinput);
	tcase_add_test(tc, test_u64);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(blockhash_suite());
}
