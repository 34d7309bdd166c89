/* SPDX-License-Identifier: MIT */
/*
 * python/kvslab/_hash.c - vLLM's block hashes (Hasher) and the hashed block
 * cache (HCache) for the kvslab Python package; see _kvslab.c for the
 * extension's manners (ownership, errors, the GIL).
 */
#include <errno.h>
#include <string.h>

#include "_kvslab.h"

/* --------------------------------------------------------------- Hasher */

/* vLLM's block hashes (kvs_block_hasher_create(3)). */
typedef struct {
	PyObject_HEAD
	kvs_block_hasher_t *h;
	unsigned int block_size;
} HasherObject;

static int hasher_init(HasherObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"fn", "block_size", "seed", "root", NULL};
	int fn = KVS_HASH_SHA256_CBOR;
	unsigned int bs = 16;
	Py_buffer seed = {0}, root = {0};
	kvs_block_hasher_attr_t attr;
	kvs_block_hash_t r;
	kvs_block_hasher_t *h;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|iIz*z*", kwlist, &fn, &bs, &seed, &root))
		return -1;
	kvs_block_hasher_attr_init(&attr);
	attr.fn = fn;
	attr.block_size = bs;
	if (seed.buf) {
		attr.seed = seed.buf;
		attr.seed_len = (size_t)seed.len;
	}
	if (root.buf) {
		if (root.len < 1 || root.len > KVS_BLOCK_HASH_MAX) {
			PyBuffer_Release(&seed);
			PyBuffer_Release(&root);
			PyErr_SetString(PyExc_ValueError, "root: 1 to 32 bytes");
			return -1;
		}
		memset(&r, 0, sizeof(r));
		memcpy(r.bytes, root.buf, (size_t)root.len);
		r.len = (uint32_t)root.len;
		attr.root = &r;
	}
	h = kvs_block_hasher_create(&attr);
	PyBuffer_Release(&seed);
	PyBuffer_Release(&root);
	if (!h) {
		kvpy_raise("kvs_block_hasher_create", NULL);
		return -1;
	}
	if (self->h)
		kvs_block_hasher_destroy(self->h);
	self->h = h;
	self->block_size = bs;
	return 0;
}

static void hasher_dealloc(HasherObject *self)
{
	if (self->h)
		kvs_block_hasher_destroy(self->h);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static int hasher_check(HasherObject *self)
{
	if (!self->h) {
		PyErr_SetString(PyExc_ValueError, "the hasher is not initialised");
		return -1;
	}
	return 0;
}

static PyObject *hash_bytes(const kvs_block_hash_t *x)
{
	return PyBytes_FromStringAndSize((const char *)x->bytes, (Py_ssize_t)x->len);
}

/* hash_request(tokens, lora_name=None, cache_salt=None) -> [bytes]: the
 * hashes of every full block, first block first. */
static PyObject *hasher_hash_request(HasherObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"tokens", "lora_name", "cache_salt", NULL};
	PyObject *tokens, *list;
	const char *lora = NULL, *salt = NULL;
	kvs_block_extra_t extra;
	kvs_block_hash_t *hs;
	struct ivec iv;
	size_t max, n = 0, i;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|zz", kwlist, &tokens, &lora, &salt) ||
	    hasher_check(self) < 0 || ivec_get(tokens, &iv, 0) < 0)
		return NULL;
	memset(&extra, 0, sizeof(extra));
	extra.lora_name = lora;
	extra.cache_salt = salt;
	max = (size_t)iv.n / self->block_size;
	hs = PyMem_Malloc((max ? max : 1) * sizeof(*hs));
	if (!hs) {
		ivec_release(&iv);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_block_hash_request(self->h, iv.v, (size_t)iv.n, &extra, hs, max, &n);
	Py_END_ALLOW_THREADS
	ivec_release(&iv);
	if (rc < 0) {
		PyMem_Free(hs);
		return kvpy_raise("kvs_block_hash_request", NULL);
	}
	list = PyList_New((Py_ssize_t)n);
	for (i = 0; list && i < n; i++) {
		PyObject *b = hash_bytes(&hs[i]);

		if (!b) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, b);
	}
	PyMem_Free(hs);
	return list;
}

/* hash_block(parent, tokens, start=0, lora_name=None, cache_salt=None):
 * the hash of one full block (its block_size tokens) after @parent (bytes,
 * or None for the first block), @start its first token's position. */
static PyObject *hasher_hash_block(HasherObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"parent", "tokens", "start", "lora_name", "cache_salt", NULL};
	PyObject *parent, *tokens;
	unsigned long long start = 0;
	const char *lora = NULL, *salt = NULL;
	kvs_block_extra_t extra;
	kvs_block_hash_t p, out;
	struct ivec iv;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|Kzz", kwlist, &parent, &tokens, &start,
					 &lora, &salt) || hasher_check(self) < 0)
		return NULL;
	memset(&p, 0, sizeof(p));
	if (parent != Py_None) {
		char *b;
		Py_ssize_t len;

		if (PyBytes_AsStringAndSize(parent, &b, &len) < 0)
			return NULL;
		if (len < 1 || len > KVS_BLOCK_HASH_MAX) {
			PyErr_SetString(PyExc_ValueError, "parent: 1 to 32 bytes");
			return NULL;
		}
		memcpy(p.bytes, b, (size_t)len);
		p.len = (uint32_t)len;
	}
	if (ivec_get(tokens, &iv, 0) < 0)
		return NULL;
	if ((size_t)iv.n != self->block_size) {
		ivec_release(&iv);
		PyErr_Format(PyExc_ValueError, "a block is %u tokens", self->block_size);
		return NULL;
	}
	memset(&extra, 0, sizeof(extra));
	extra.lora_name = lora;
	extra.cache_salt = salt;
	rc = kvs_block_hash(self->h, parent == Py_None ? NULL : &p, iv.v, start, &extra, &out);
	ivec_release(&iv);
	if (rc < 0)
		return kvpy_raise("kvs_block_hash", NULL);
	return hash_bytes(&out);
}

static PyObject *hasher_get_root(HasherObject *self, void *c)
{
	kvs_block_hash_t r;

	(void)c;
	if (hasher_check(self) < 0)
		return NULL;
	if (kvs_block_hasher_root(self->h, &r) < 0)
		return kvpy_raise("kvs_block_hasher_root", NULL);
	return hash_bytes(&r);
}

static PyObject *hasher_get_block_size(HasherObject *self, void *c)
{
	(void)c;
	return PyLong_FromUnsignedLong(self->block_size);
}

static PyMethodDef hasher_methods[] = {
	{"hash_request", (PyCFunction)(void (*)(void))hasher_hash_request,
	 METH_VARARGS | METH_KEYWORDS, "hash_request(tokens, lora_name=None, cache_salt=None)"},
	{"hash_block", (PyCFunction)(void (*)(void))hasher_hash_block,
	 METH_VARARGS | METH_KEYWORDS,
	 "hash_block(parent, tokens, start=0, lora_name=None, cache_salt=None)"},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef hasher_getset[] = {
	{"root", (getter)hasher_get_root, NULL, "the root hash (vLLM's NONE_HASH)", NULL},
	{"block_size", (getter)hasher_get_block_size, NULL, "tokens per block", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject HasherType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.Hasher",
	.tp_doc = "Hasher(fn=HASH_SHA256_CBOR, block_size=16, seed=None, root=None): "
		  "kvs_block_hasher_create(3).",
	.tp_basicsize = sizeof(HasherObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)hasher_init,
	.tp_dealloc = (destructor)hasher_dealloc,
	.tp_methods = hasher_methods,
	.tp_getset = hasher_getset,
};


/* --------------------------------------------------------------- HCache */

/* vLLM's hashed block cache over a Pool (kvs_hcache_create(3)); blocks are
 * the pool's pages. */
typedef struct {
	PyObject_HEAD
	kvs_hcache_t *hc;
	PoolObject *pool;
	int has_events;
	struct kvpy_evq events;	/* with events=True */
} HCacheObject;

static int hcache_init(HCacheObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"pool", "events", NULL};
	PoolObject *pool;
	kvs_hcache_attr_t attr;
	kvs_hcache_t *hc;
	int events = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|p", kwlist, &PoolType, &pool, &events))
		return -1;
	if (self->hc) {
		PyErr_SetString(PyExc_RuntimeError, "HCache already initialised");
		return -1;
	}
	if (pool_check(pool) < 0)
		return -1;
	kvs_hcache_attr_init(&attr);
	if (events) {
		if (kvpy_evq_init(&self->events) < 0) {
			PyErr_NoMemory();
			return -1;
		}
		self->has_events = 1;
		attr.event_cb = kvpy_evq_hcache_cb;
		attr.event_arg = &self->events;
	}
	Py_BEGIN_ALLOW_THREADS
	hc = kvs_hcache_create(pool->p, &attr);
	Py_END_ALLOW_THREADS
	if (!hc) {
		kvpy_raise("kvs_hcache_create", NULL);
		if (self->has_events)
			kvpy_evq_destroy(&self->events);
		self->has_events = 0;
		return -1;
	}
	self->hc = hc;
	KVPY_HOLD(self->pool, pool);
	return 0;
}

static int hcache_check(HCacheObject *self)
{
	if (!self->hc) {
		PyErr_SetString(PyExc_ValueError, "the block cache is closed");
		return -1;
	}
	return 0;
}

static PyObject *hcache_close(HCacheObject *self, PyObject *unused)
{
	kvs_hcache_t *hc = self->hc;
	int rc;

	(void)unused;
	if (!hc)
		Py_RETURN_NONE;
	self->hc = NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hcache_destroy(hc);
	Py_END_ALLOW_THREADS
	KVPY_RELEASE(self->pool);
	if (self->has_events)
		kvpy_evq_destroy(&self->events);
	self->has_events = 0;
	if (rc < 0)
		return kvpy_raise("kvs_hcache_destroy", NULL);
	Py_RETURN_NONE;
}

static void hcache_dealloc(HCacheObject *self)
{
	if (self->hc)
		kvs_hcache_destroy(self->hc);
	KVPY_RELEASE(self->pool);
	if (self->has_events)
		kvpy_evq_destroy(&self->events);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A block hash from bytes (1 to 32 of them). */
static int hash_from(PyObject *o, kvs_block_hash_t *h)
{
	char *b;
	Py_ssize_t len;

	if (PyBytes_AsStringAndSize(o, &b, &len) < 0)
		return -1;
	if (len < 1 || len > KVS_BLOCK_HASH_MAX) {
		PyErr_SetString(PyExc_ValueError, "a block hash is 1 to 32 bytes");
		return -1;
	}
	memset(h, 0, sizeof(*h));
	memcpy(h->bytes, b, (size_t)len);
	h->len = (uint32_t)len;
	return 0;
}

/* A vector of hashes from a sequence of bytes; PyMem_Free() it. */
static kvs_block_hash_t *hashes_from(PyObject *seq_in, Py_ssize_t *n)
{
	PyObject *seq = PySequence_Fast(seq_in, "expected a sequence of block hashes");
	kvs_block_hash_t *hs;
	Py_ssize_t i;

	if (!seq)
		return NULL;
	*n = PySequence_Fast_GET_SIZE(seq);
	hs = PyMem_Malloc((*n ? *n : 1) * sizeof(*hs));
	if (!hs) {
		Py_DECREF(seq);
		return (kvs_block_hash_t *)PyErr_NoMemory();
	}
	for (i = 0; i < *n; i++)
		if (hash_from(PySequence_Fast_GET_ITEM(seq, i), &hs[i]) < 0) {
			Py_DECREF(seq);
			PyMem_Free(hs);
			return NULL;
		}
	Py_DECREF(seq);
	return hs;
}

static PyObject *int_list(const int32_t *v, size_t n)
{
	PyObject *l = PyList_New((Py_ssize_t)n);
	size_t i;

	for (i = 0; l && i < n; i++) {
		PyObject *x = PyLong_FromLong(v[i]);

		if (!x)
			Py_CLEAR(l);
		else
			PyList_SET_ITEM(l, (Py_ssize_t)i, x);
	}
	return l;
}

static PyObject *hcache_alloc(HCacheObject *self, PyObject *arg)
{
	Py_ssize_t n = PyLong_AsSsize_t(arg);
	int32_t *b;
	PyObject *l;
	int rc;

	if ((n == -1 && PyErr_Occurred()) || hcache_check(self) < 0)
		return NULL;
	if (n < 0) {
		PyErr_SetString(PyExc_ValueError, "negative count");
		return NULL;
	}
	b = PyMem_Malloc((n ? n : 1) * sizeof(*b));
	if (!b)
		return PyErr_NoMemory();
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hcache_alloc(self->hc, (size_t)n, b);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		PyMem_Free(b);
		return kvpy_raise("kvs_hcache_alloc", NULL);
	}
	l = int_list(b, (size_t)n);
	if (!l) { /* loses nothing: the blocks go back */
		Py_BEGIN_ALLOW_THREADS
		kvs_hcache_free(self->hc, b, (size_t)n);
		Py_END_ALLOW_THREADS
	}
	PyMem_Free(b);
	return l;
}

static PyObject *hcache_blocks_op(HCacheObject *self, PyObject *arg, int touch)
{
	struct ivec iv;
	int rc;

	if (hcache_check(self) < 0 || ivec_get(arg, &iv, 0) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = touch ? kvs_hcache_touch(self->hc, iv.v, (size_t)iv.n)
		   : kvs_hcache_free(self->hc, iv.v, (size_t)iv.n);
	Py_END_ALLOW_THREADS
	ivec_release(&iv);
	if (rc < 0)
		return kvpy_raise(touch ? "kvs_hcache_touch" : "kvs_hcache_free", NULL);
	Py_RETURN_NONE;
}

static PyObject *hcache_free(HCacheObject *self, PyObject *arg)
{
	return hcache_blocks_op(self, arg, 0);
}

static PyObject *hcache_touch(HCacheObject *self, PyObject *arg)
{
	return hcache_blocks_op(self, arg, 1);
}

/* The block cached under hash @arg into *@b: 1, 0 when none is, -1 with
 * an exception set (a closed cache, not a hash, the library's error). */
static int hcache_find_id(HCacheObject *self, PyObject *arg, int32_t *b)
{
	kvs_block_hash_t h;

	if (hcache_check(self) < 0 || hash_from(arg, &h) < 0)
		return -1;
	*b = kvs_hcache_find(self->hc, &h);
	if (*b >= 0)
		return 1;
	if (errno == ENOENT)
		return 0;
	kvpy_raise("kvs_hcache_find", NULL);
	return -1;
}

/* find(hash) -> block or None. */
static PyObject *hcache_find(HCacheObject *self, PyObject *arg)
{
	int32_t b;
	int rc = hcache_find_id(self, arg, &b);

	if (rc < 0)
		return NULL;
	if (rc == 0)
		Py_RETURN_NONE;
	return PyLong_FromLong(b);
}

/* cache(blocks, hashes, parent=None, extra_key=0) */
static PyObject *hcache_cache(HCacheObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"blocks", "hashes", "parent", "extra_key", NULL};
	PyObject *blocks, *hashes, *parent = Py_None;
	unsigned long long extra = 0;
	kvs_block_hash_t *hs, p;
	struct ivec iv;
	Py_ssize_t nh;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OK", kwlist, &blocks, &hashes, &parent,
					 &extra) || hcache_check(self) < 0)
		return NULL;
	if (parent != Py_None && hash_from(parent, &p) < 0)
		return NULL;
	if (!(hs = hashes_from(hashes, &nh)))
		return NULL;
	if (ivec_get(blocks, &iv, 0) < 0) {
		PyMem_Free(hs);
		return NULL;
	}
	if (iv.n != nh) {
		ivec_release(&iv);
		PyMem_Free(hs);
		PyErr_SetString(PyExc_ValueError, "as many hashes as blocks");
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hcache_cache(self->hc, iv.v, (size_t)iv.n, hs, parent == Py_None ? NULL : &p,
			      extra, NULL);
	Py_END_ALLOW_THREADS
	ivec_release(&iv);
	PyMem_Free(hs);
	if (rc < 0)
		return kvpy_raise("kvs_hcache_cache", NULL);
	Py_RETURN_NONE;
}

/* lookup(hashes, ntokens) -> the hit blocks, referenced. */
static PyObject *hcache_lookup(HCacheObject *self, PyObject *args)
{
	PyObject *hashes, *l;
	unsigned long long ntok;
	kvs_block_hash_t *hs;
	Py_ssize_t nh;
	int32_t *b;
	ssize_t got;

	if (!PyArg_ParseTuple(args, "OK", &hashes, &ntok) || hcache_check(self) < 0)
		return NULL;
	if (!(hs = hashes_from(hashes, &nh)))
		return NULL;
	b = PyMem_Malloc((nh ? nh : 1) * sizeof(*b));
	if (!b) {
		PyMem_Free(hs);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	got = kvs_hcache_lookup(self->hc, hs, (size_t)nh, (size_t)ntok, b);
	Py_END_ALLOW_THREADS
	PyMem_Free(hs);
	if (got < 0) {
		PyMem_Free(b);
		return kvpy_raise("kvs_hcache_lookup", NULL);
	}
	l = int_list(b, (size_t)got);
	if (!l) { /* the references the lookup took go back */
		Py_BEGIN_ALLOW_THREADS
		kvs_hcache_free(self->hc, b, (size_t)got);
		Py_END_ALLOW_THREADS
	}
	PyMem_Free(b);
	return l;
}

static PyObject *hcache_evict(HCacheObject *self, PyObject *arg)
{
	Py_ssize_t n = PyLong_AsSsize_t(arg);
	ssize_t got;

	if ((n == -1 && PyErr_Occurred()) || hcache_check(self) < 0)
		return NULL;
	if (n < 0) {
		PyErr_SetString(PyExc_ValueError, "blocks to evict must be >= 0");
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	got = kvs_hcache_evict(self->hc, (size_t)n);
	Py_END_ALLOW_THREADS
	if (got < 0)
		return kvpy_raise("kvs_hcache_evict", NULL);
	return PyLong_FromSsize_t(got);
}

static PyObject *hcache_reset(HCacheObject *self, PyObject *unused)
{
	int rc;

	(void)unused;
	if (hcache_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hcache_reset(self->hc);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_hcache_reset", NULL);
	Py_RETURN_NONE;
}

/* block(id) -> (refcount, hash or None) */
static PyObject *hcache_block(HCacheObject *self, PyObject *arg)
{
	long id = PyLong_AsLong(arg);
	kvs_block_hash_t h;
	uint32_t ref;
	int has;

	if ((id == -1 && PyErr_Occurred()) || hcache_check(self) < 0)
		return NULL;
	if (id < INT32_MIN || id > INT32_MAX) {
		PyErr_SetString(PyExc_OverflowError, "block id out of range");
		return NULL;
	}
	has = kvs_hcache_block(self->hc, (int32_t)id, &ref, &h);
	if (has < 0)
		return kvpy_raise("kvs_hcache_block", NULL);
	if (!has)
		return Py_BuildValue("(kO)", (unsigned long)ref, Py_None);
	return Py_BuildValue("(kN)", (unsigned long)ref, hash_bytes(&h));
}

/* used_blocks() -> blocks of refcount > 0, without the dict of stats()
 * (the library's one-statistic getter). */
static PyObject *hcache_used_blocks(HCacheObject *self, PyObject *unused)
{
	(void)unused;
	if (hcache_check(self) < 0)
		return NULL;
	return PyLong_FromUnsignedLongLong(kvs_hcache_stat(self->hc, KVS_HCACHE_STAT_used_blocks));
}

static PyObject *hcache_stats(HCacheObject *self, PyObject *unused)
{
	kvs_hcache_stats_t st;

	(void)unused;
	if (hcache_check(self) < 0)
		return NULL;
	if (kvs_hcache_stats(self->hc, &st) < 0)
		return kvpy_raise("kvs_hcache_stats", NULL);
	return Py_BuildValue(
		"{sKsKsKsdsKsKsKsKsKsKsK}", "queries", (unsigned long long)st.queries,
		"query_blocks", (unsigned long long)st.query_blocks, "hit_blocks",
		(unsigned long long)st.hit_blocks, "window_hit_ratio", st.window_hit_ratio,
		"cached_blocks", (unsigned long long)st.cached_blocks, "free_queue_blocks",
		(unsigned long long)st.free_queue_blocks, "used_blocks",
		(unsigned long long)st.used_blocks, "evictions", (unsigned long long)st.evictions,
		"query_tokens", (unsigned long long)st.query_tokens, "hit_tokens",
		(unsigned long long)st.hit_tokens, "window_query_tokens",
		(unsigned long long)st.window_query_tokens);
}

static PyObject *hcache_validate(HCacheObject *self, PyObject *unused)
{
	(void)unused;
	if (hcache_check(self) < 0)
		return NULL;
	if (kvs_hcache_validate(self->hc) < 0)
		return kvpy_raise("kvs_hcache_validate", NULL);
	Py_RETURN_NONE;
}

/* take_events() -> [(type, hashes, parent, token_ids, block_size, extra_key)] */
static PyObject *hcache_take_events(HCacheObject *self, PyObject *unused)
{
	(void)unused;
	if (hcache_check(self) < 0)
		return NULL;
	if (!self->has_events) {
		PyErr_SetString(PyExc_ValueError, "the cache was made without events=True");
		return NULL;
	}
	return kvpy_evq_take(&self->events, 1);
}

/*
 * getter(blocks, fallback): a callable for vLLM's per-block
 * BlockPool.get_cached_block(block_hash, kv_cache_group_ids=(0,)), the
 * scheduler's loop along a request's hash chain.  Made in C, so that a
 * call is one find and one list index: the Python method around find()
 * cost about as much as vLLM's own dict lookups.  It answers the common
 * case itself (a bytes hash, no groups or one group 0): [blocks[b]], or
 * None on a miss; anything else goes to @fallback with the same arguments,
 * which answers as the Python method does.
 */
typedef struct {
	PyObject_HEAD
	vectorcallfunc vectorcall;
	HCacheObject *hc;
	PyObject *blocks;	/* a list, indexed by block id */
	PyObject *fallback;
} GetterObject;

static PyObject *getter_call(GetterObject *self, PyObject *const *args, size_t nargsf,
			     PyObject *kwnames)
{
	Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
	PyObject *item, *l;
	int32_t b;
	int rc;

	if (kwnames || nargs < 1 || nargs > 2 || !PyBytes_Check(args[0]))
		goto slow;
	if (nargs == 2) {
		PyObject *g = args[1], *g0;
		int ov;

		if (PyList_CheckExact(g) && PyList_GET_SIZE(g) == 1)
			g0 = PyList_GET_ITEM(g, 0);
		else if (PyTuple_CheckExact(g) && PyTuple_GET_SIZE(g) == 1)
			g0 = PyTuple_GET_ITEM(g, 0);
		else
			goto slow;
		if (!PyLong_CheckExact(g0) || PyLong_AsLongAndOverflow(g0, &ov) != 0 || ov)
			goto slow;
	}
	rc = hcache_find_id(self->hc, args[0], &b);
	if (rc < 0)
		return NULL;
	if (rc == 0)
		Py_RETURN_NONE;
	if (!PyList_CheckExact(self->blocks) || b >= PyList_GET_SIZE(self->blocks))
		goto slow;
	item = PyList_GET_ITEM(self->blocks, b);
	l = PyList_New(1);
	if (!l)
		return NULL;
	Py_INCREF(item);
	PyList_SET_ITEM(l, 0, item);
	return l;
slow:
	return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static int getter_traverse(GetterObject *self, visitproc visit, void *arg)
{
	Py_VISIT(self->hc);
	Py_VISIT(self->blocks);
	Py_VISIT(self->fallback);
	return 0;
}

static int getter_clear(GetterObject *self)
{
	Py_CLEAR(self->hc);
	Py_CLEAR(self->blocks);
	Py_CLEAR(self->fallback);
	return 0;
}

static void getter_dealloc(GetterObject *self)
{
	PyObject_GC_UnTrack(self);
	getter_clear(self);
	PyObject_GC_Del(self);
}

static PyTypeObject GetterType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.CachedBlockGetter",
	.tp_doc = "HCache.getter(blocks, fallback)'s callable: "
		  "(block_hash, kv_cache_group_ids=(0,)) -> [block] or None.",
	.tp_basicsize = sizeof(GetterObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_vectorcall_offset = offsetof(GetterObject, vectorcall),
	.tp_call = PyVectorcall_Call,
	.tp_traverse = (traverseproc)getter_traverse,
	.tp_clear = (inquiry)getter_clear,
	.tp_dealloc = (destructor)getter_dealloc,
};

/* getter(blocks, fallback) -> CachedBlockGetter */
static PyObject *hcache_getter(HCacheObject *self, PyObject *args)
{
	PyObject *blocks, *fallback;
	GetterObject *g;

	if (!PyArg_ParseTuple(args, "O!O:getter", &PyList_Type, &blocks, &fallback))
		return NULL;
	if (!PyCallable_Check(fallback)) {
		PyErr_SetString(PyExc_TypeError, "getter: fallback must be callable");
		return NULL;
	}
	if (hcache_check(self) < 0)
		return NULL;
	if (PyType_Ready(&GetterType) < 0)
		return NULL;
	g = PyObject_GC_New(GetterObject, &GetterType);
	if (!g)
		return NULL;
	g->vectorcall = (vectorcallfunc)getter_call;
	Py_INCREF(self);
	g->hc = self;
	Py_INCREF(blocks);
	g->blocks = blocks;
	Py_INCREF(fallback);
	g->fallback = fallback;
	PyObject_GC_Track(g);
	return (PyObject *)g;
}

static PyMethodDef hcache_methods[] = {
	{"take_events", (PyCFunction)hcache_take_events, METH_NOARGS,
	 "take_events() -> the KV events queued since the last call, oldest first: "
	 "(type, hashes, parent or None, token_ids or None, block_size, extra_key) each."},
	{"close", (PyCFunction)hcache_close, METH_NOARGS, "Destroy the cache (idempotent)."},
	{"alloc", (PyCFunction)hcache_alloc, METH_O, "alloc(n) -> new blocks, all or none."},
	{"free", (PyCFunction)hcache_free, METH_O, "Drop a reference of each block."},
	{"touch", (PyCFunction)hcache_touch, METH_O, "Reference cached blocks."},
	{"find", (PyCFunction)hcache_find, METH_O, "find(hash) -> block or None."},
	{"getter", (PyCFunction)hcache_getter, METH_VARARGS,
	 "getter(blocks, fallback) -> a callable (block_hash, kv_cache_group_ids=(0,)) -> "
	 "[blocks[b]] or None, for vLLM's get_cached_block; other arguments go to fallback."},
	{"cache", (PyCFunction)(void (*)(void))hcache_cache, METH_VARARGS | METH_KEYWORDS,
	 "cache(blocks, hashes, parent=None, extra_key=0)"},
	{"lookup", (PyCFunction)hcache_lookup, METH_VARARGS,
	 "lookup(hashes, ntokens) -> hit blocks (referenced)"},
	{"evict", (PyCFunction)hcache_evict, METH_O, "evict(n) -> blocks evicted"},
	{"reset", (PyCFunction)hcache_reset, METH_NOARGS, "Forget every hash (none in use)."},
	{"block", (PyCFunction)hcache_block, METH_O, "block(id) -> (refcount, hash or None)"},
	{"stats", (PyCFunction)hcache_stats, METH_NOARGS, "kvs_hcache_stats() as a dict."},
	{"used_blocks", (PyCFunction)hcache_used_blocks, METH_NOARGS,
	 "Blocks of refcount > 0 (kvs_hcache_stats()'s used_blocks)."},
	{"validate", (PyCFunction)hcache_validate, METH_NOARGS, "Check the invariants."},
	{NULL, NULL, 0, NULL},
};

PyTypeObject HCacheType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.HCache",
	.tp_doc = "HCache(pool, events=False): kvs_hcache_create(3).",
	.tp_basicsize = sizeof(HCacheObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)hcache_init,
	.tp_dealloc = (destructor)hcache_dealloc,
	.tp_methods = hcache_methods,
};
