/* SPDX-License-Identifier: MIT */
/*
 * python/kvslab/_hiradix.c - the hierarchical cache (kvs_hiradix_create(3))
 * for the kvslab Python package: SGLang HiCache's three tiers, the device
 * pool (L1) it is given, a host pool (L2) it makes (kvs_hpool_create(3):
 * a ratio of the device pool, or a size), and optionally a store (L3,
 * kvs_store_open(3): file:// or redis://).  One object owns the host pool,
 * the store and the tree, and gives them back in the right order.
 *
 * Nodes are handles (ints) as Radix's are: valid while the tree holds
 * them, which a lock guarantees.  Calls that may wait (on copies, the
 * store, the tree's lock) run with the GIL released.  See _kvslab.c for the
 * extension's other manners.
 */
#include <errno.h>
#include <string.h>

#include "_kvslab.h"

typedef struct {
	PyObject_HEAD
	kvs_hiradix_t *h;
	kvs_hpool_t *hp;
	kvs_store_t *store;
	PoolObject *pool;
	int has_events;
	struct kvpy_evq events;
} HiRadixObject;

static void hiradix_release(HiRadixObject *self)
{
	/* The tree first (it drains its copies), then what it used. */
	if (self->h)
		kvs_hiradix_destroy(self->h);
	if (self->store)
		kvs_store_close(self->store);
	if (self->hp)
		kvs_hpool_destroy(self->hp);
	self->h = NULL;
	self->store = NULL;
	self->hp = NULL;
	if (self->has_events)
		kvpy_evq_destroy(&self->events);
	self->has_events = 0;
}

/* Open the store at @uri for the pool's pages (a page's bytes in every
 * layer, page-first, whatever the host pool's layout), in the namespace
 * of the pool's model, as kvslab-replay(1) does.  GIL released. */
static kvs_store_t *open_store(PoolObject *pool, const char *uri)
{
	kvs_store_attr_t sa;

	kvs_store_attr_init(&sa);
	sa.model = pool->model_name;
	sa.layout = KVS_HPOOL_PAGE_FIRST;
	sa.page_bytes = kvs_model_cell_size(&pool->model) * kvs_pool_page_size(pool->p);
	return kvs_store_open(uri, &sa);
}

static int hiradix_init(HiRadixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"pool", "host_ratio", "host_size", "layout", "write_policy",
				 "hit_threshold", "load_back_threshold", "flags", "storage",
				 "prefetch_policy", "prefetch_threshold", "events", NULL};
	PoolObject *pool;
	double ratio = 2.0;
	unsigned long long host_size = 0, lb_threshold = 10;
	unsigned int layout = KVS_HPOOL_LAYER_FIRST, policy = KVS_WRITE_THROUGH, hit_threshold = 2;
	unsigned int flags = 0, pf_policy = KVS_PREFETCH_BEST_EFFORT, pf_threshold = 256;
	const char *storage = NULL;
	int events = 0;
	kvs_hpool_attr_t ha;
	kvs_hiradix_attr_t ra;
	kvs_hiradix_l3_attr_t la;
	int rc = 0, err = 0;
	const char *what = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|dKIIIKIzIIp", kwlist, &PoolType, &pool,
					 &ratio, &host_size, &layout, &policy, &hit_threshold,
					 &lb_threshold, &flags, &storage, &pf_policy,
					 &pf_threshold, &events))
		return -1;
	if (self->h) {
		PyErr_SetString(PyExc_RuntimeError, "HiRadix already initialised");
		return -1;
	}
	if (pool_check(pool) < 0)
		return -1;
	kvs_hpool_attr_init(&ha);
	ha.layout = layout;
	ha.ratio = host_size ? 0 : ratio;
	ha.bytes = (size_t)host_size;
	kvs_hiradix_attr_init(&ra);
	ra.write_policy = policy;
	ra.hit_threshold = hit_threshold;
	ra.load_back_threshold = lb_threshold;
	ra.flags = flags;
	if (events) {
		if (kvpy_evq_init(&self->events) < 0) {
			PyErr_NoMemory();
			return -1;
		}
		self->has_events = 1;
		ra.event_cb = kvpy_evq_kv_cb;
		ra.event_arg = &self->events;
	}
	kvs_hiradix_l3_attr_init(&la);
	la.prefetch_policy = pf_policy;
	la.prefetch_threshold = pf_threshold;
	Py_BEGIN_ALLOW_THREADS
	self->hp = kvs_hpool_create(pool->p, &ha);
	if (!self->hp) {
		rc = -1;
		what = "kvs_hpool_create";
	}
	if (rc == 0) {
		self->h = kvs_hiradix_create(pool->p, self->hp, &ra);
		if (!self->h) {
			rc = -1;
			what = "kvs_hiradix_create";
		}
	}
	if (rc == 0 && storage) {
		self->store = open_store(pool, storage);
		if (!self->store) {
			rc = -1;
			what = "kvs_store_open";
		} else if (kvs_hiradix_set_store(self->h, self->store, &la) < 0) {
			rc = -1;
			what = "kvs_hiradix_set_store";
		}
	}
	err = errno;
	if (rc < 0)
		hiradix_release(self);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		errno = err;
		kvpy_raise(what, pool->drv->d);
		return -1;
	}
	KVPY_HOLD(self->pool, pool);
	return 0;
}

static int hiradix_check(HiRadixObject *self)
{
	if (!self->h) {
		PyErr_SetString(PyExc_ValueError, "the hierarchical cache is closed");
		return -1;
	}
	return 0;
}

static PyObject *hiradix_close(HiRadixObject *self, PyObject *unused)
{
	(void)unused;
	if (!self->h)
		Py_RETURN_NONE;
	Py_BEGIN_ALLOW_THREADS
	hiradix_release(self);
	Py_END_ALLOW_THREADS
	KVPY_RELEASE(self->pool);
	Py_RETURN_NONE;
}

static void hiradix_dealloc(HiRadixObject *self)
{
	hiradix_release(self);
	KVPY_RELEASE(self->pool);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *hnode_obj(kvs_hiradix_node_t *n)
{
	return PyLong_FromVoidPtr(n);
}

static kvs_hiradix_node_t *hnode_arg(PyObject *o)
{
	void *p = PyLong_AsVoidPtr(o);

	if (!p && !PyErr_Occurred())
		PyErr_SetString(PyExc_ValueError, "not a node");
	return p;
}

/* An optional writable int32 buffer of at least @n entries, or a scratch
 * one when @out is None; *buf is the array to pass. */
static int out_buf(PyObject *out, size_t n, struct ivec *iv, int32_t **buf)
{
	memset(iv, 0, sizeof(*iv));
	if (out == Py_None) {
		if (!ivec_scratch(iv, n))
			return -1;
		*buf = iv->own;
		return 0;
	}
	if (ivec_get(out, iv, 1) < 0)
		return -1;
	if ((size_t)iv->n < n) {
		PyErr_SetString(PyExc_ValueError, "out is shorter than the key");
		ivec_release(iv);
		return -1;
	}
	*buf = (int32_t *)iv->v;
	return 0;
}

/* match(key, out=None, lock=False, extra_key=0)
 *   -> (device_len, host_hit, last_device, last_node, last_host) */
static PyObject *hiradix_match(HiRadixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"key", "out", "lock", "extra_key", NULL};
	PyObject *key, *out = Py_None;
	unsigned long long extra = 0;
	int lock = 0;
	struct ivec k, o;
	kvs_hiradix_match_t m;
	int32_t *buf;
	ssize_t got;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OpK", kwlist, &key, &out, &lock, &extra))
		return NULL;
	if (hiradix_check(self) < 0 || ivec_get(key, &k, 0) < 0)
		return NULL;
	if (out_buf(out, (size_t)k.n, &o, &buf) < 0) {
		ivec_release(&k);
		return NULL;
	}
	memset(&m, 0, sizeof(m));
	Py_BEGIN_ALLOW_THREADS
	got = lock ? kvs_hiradix_match_lock_extra(self->h, extra, k.v, (size_t)k.n, buf, &m)
		   : kvs_hiradix_match_extra(self->h, extra, k.v, (size_t)k.n, buf, &m);
	Py_END_ALLOW_THREADS
	if (got > 0)
		ivec_writeback(&o, got);
	ivec_release(&k);
	ivec_release(&o);
	if (got < 0)
		return kvpy_raise("kvs_hiradix_match", NULL);
	return Py_BuildValue("(nnNNN)", (Py_ssize_t)got, (Py_ssize_t)m.host_hit,
			     hnode_obj(m.last_device), hnode_obj(m.last_node),
			     hnode_obj(m.last_host));
}

/* insert(key, locs, lock=False, extra_key=0) -> (prefix_len, last_node) */
static PyObject *hiradix_insert(HiRadixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"key", "locs", "lock", "extra_key", NULL};
	PyObject *key, *locs;
	unsigned long long extra = 0;
	int lock = 0;
	struct ivec k, l;
	kvs_hiradix_node_t *last = NULL;
	ssize_t got;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|pK", kwlist, &key, &locs, &lock, &extra))
		return NULL;
	if (hiradix_check(self) < 0 || ivec_get(key, &k, 0) < 0)
		return NULL;
	if (ivec_get(locs, &l, 0) < 0) {
		ivec_release(&k);
		return NULL;
	}
	if (l.n != k.n) {
		ivec_release(&k);
		ivec_release(&l);
		PyErr_SetString(PyExc_ValueError, "key and locs differ in length");
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	got = lock ? kvs_hiradix_insert_lock_extra(self->h, extra, k.v, (size_t)k.n, l.v, &last)
		   : kvs_hiradix_insert_extra(self->h, extra, k.v, (size_t)k.n, l.v, &last);
	Py_END_ALLOW_THREADS
	ivec_release(&k);
	ivec_release(&l);
	if (got < 0)
		return kvpy_raise("kvs_hiradix_insert", NULL);
	return Py_BuildValue("(nN)", (Py_ssize_t)got, hnode_obj(last));
}

static PyObject *hiradix_lock_common(HiRadixObject *self, PyObject *arg, int lock)
{
	kvs_hiradix_node_t *n;
	int rc;

	if (hiradix_check(self) < 0 || !(n = hnode_arg(arg)))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = lock ? kvs_hiradix_lock(self->h, n) : kvs_hiradix_unlock(self->h, n);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise(lock ? "kvs_hiradix_lock" : "kvs_hiradix_unlock", NULL);
	Py_RETURN_NONE;
}

static PyObject *hiradix_lock(HiRadixObject *self, PyObject *arg)
{
	return hiradix_lock_common(self, arg, 1);
}

static PyObject *hiradix_unlock(HiRadixObject *self, PyObject *arg)
{
	return hiradix_lock_common(self, arg, 0);
}

static PyObject *hiradix_evict_common(HiRadixObject *self, PyObject *arg, int host)
{
	Py_ssize_t n = PyLong_AsSsize_t(arg);
	ssize_t got;

	if (n == -1 && PyErr_Occurred())
		return NULL;
	if (n < 0) {
		PyErr_SetString(PyExc_ValueError, "tokens must be >= 0");
		return NULL;
	}
	if (hiradix_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	got = host ? kvs_hiradix_evict_host(self->h, (size_t)n)
		   : kvs_hiradix_evict_device(self->h, (size_t)n);
	Py_END_ALLOW_THREADS
	if (got < 0)
		return kvpy_raise(host ? "kvs_hiradix_evict_host" : "kvs_hiradix_evict_device",
				  NULL);
	return PyLong_FromSsize_t(got);
}

static PyObject *hiradix_evict_device(HiRadixObject *self, PyObject *arg)
{
	return hiradix_evict_common(self, arg, 0);
}

static PyObject *hiradix_evict_host(HiRadixObject *self, PyObject *arg)
{
	return hiradix_evict_common(self, arg, 1);
}

/* load_back(node, quota=0, wait=True) -> tokens loaded onto the device;
 * with wait the copy is complete when it returns.  The new locations are
 * the tree's: a match of the key returns them. */
static PyObject *hiradix_load_back(HiRadixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"node", "quota", "wait", NULL};
	PyObject *node_o;
	Py_ssize_t quota = 0;
	int wait = 1, rc = 0;
	kvs_hiradix_node_t *node;
	kvs_hpool_xfer_t *x = NULL;
	ssize_t got;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|np", kwlist, &node_o, &quota, &wait))
		return NULL;
	if (quota < 0) {
		PyErr_SetString(PyExc_ValueError, "quota must be >= 0");
		return NULL;
	}
	if (hiradix_check(self) < 0 || !(node = hnode_arg(node_o)))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	got = kvs_hiradix_load_back(self->h, node, (size_t)quota, NULL, &x);
	if (got > 0 && wait && x)
		rc = kvs_hpool_xfer_wait(x);
	Py_END_ALLOW_THREADS
	if (got < 0)
		return kvpy_raise("kvs_hiradix_load_back", NULL);
	if (rc < 0)
		return kvpy_raise("kvs_hpool_xfer_wait", NULL);
	return PyLong_FromSsize_t(got);
}

static PyObject *hiradix_poll(HiRadixObject *self, PyObject *unused)
{
	int rc;

	(void)unused;
	if (hiradix_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hiradix_poll(self->h);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_hiradix_poll", NULL);
	return PyLong_FromLong(rc);
}

/* submit(wait=False): start what KVS_HIRADIX_DEFER queued; with wait, the
 * load it starts (if any) is complete when it returns. */
static PyObject *hiradix_submit(HiRadixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"wait", NULL};
	int wait = 0, rc, wrc = 0;
	kvs_hpool_xfer_t *x = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &wait))
		return NULL;
	if (hiradix_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hiradix_submit(self->h, &x);
	if (rc == 0 && wait && x)
		wrc = kvs_hpool_xfer_wait(x);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_hiradix_submit", NULL);
	if (wrc < 0)
		return kvpy_raise("kvs_hpool_xfer_wait", NULL);
	Py_RETURN_NONE;
}

/* prefetch(id, key) -> tokens the store will read */
static PyObject *hiradix_prefetch(HiRadixObject *self, PyObject *args)
{
	unsigned long long id;
	PyObject *key;
	struct ivec k;
	ssize_t got;

	if (!PyArg_ParseTuple(args, "KO", &id, &key))
		return NULL;
	if (hiradix_check(self) < 0 || ivec_get(key, &k, 0) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	got = kvs_hiradix_prefetch(self->h, id, k.v, (size_t)k.n);
	Py_END_ALLOW_THREADS
	ivec_release(&k);
	if (got < 0)
		return kvpy_raise("kvs_hiradix_prefetch", NULL);
	return PyLong_FromSsize_t(got);
}

/* prefetch_done(id) -> (done, tokens) */
static PyObject *hiradix_prefetch_done(HiRadixObject *self, PyObject *arg)
{
	unsigned long long id = PyLong_AsUnsignedLongLong(arg);
	size_t tokens = 0;
	int rc;

	if (id == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (hiradix_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hiradix_prefetch_done(self->h, id, &tokens);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_hiradix_prefetch_done", NULL);
	return Py_BuildValue("(On)", rc ? Py_True : Py_False, (Py_ssize_t)tokens);
}

static PyObject *hiradix_prefetch_revoke(HiRadixObject *self, PyObject *arg)
{
	unsigned long long id = PyLong_AsUnsignedLongLong(arg);
	int rc;

	if (id == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (hiradix_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hiradix_prefetch_revoke(self->h, id);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_hiradix_prefetch_revoke", NULL);
	Py_RETURN_NONE;
}

/* A call on the tree alone that returns 0 or -1: without the GIL, None or
 * kvslab.Error naming @what. */
static PyObject *hiradix_call(HiRadixObject *self, int (*fn)(kvs_hiradix_t *), const char *what)
{
	int rc;

	if (hiradix_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = fn(self->h);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise(what, NULL);
	Py_RETURN_NONE;
}

static PyObject *hiradix_l3_wait(HiRadixObject *self, PyObject *unused)
{
	(void)unused;
	return hiradix_call(self, kvs_hiradix_l3_wait, "kvs_hiradix_l3_wait");
}

static PyObject *hiradix_usage(HiRadixObject *self, PyObject *unused)
{
	kvs_hiradix_usage_t u;
	uint64_t ps;
	int rc;

	(void)unused;
	if (hiradix_check(self) < 0)
		return NULL;
	ps = kvs_pool_page_size(self->pool->p); /* the host pool counts pages */
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hiradix_usage(self->h, &u);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_hiradix_usage", NULL);
	return Py_BuildValue("{sKsKsKsKsKsKsKsK}", "nodes", (unsigned long long)u.nodes,
			     "device_tokens", (unsigned long long)u.device_tokens, "host_tokens",
			     (unsigned long long)u.host_tokens, "tombstone_tokens",
			     (unsigned long long)u.tombstone_tokens, "backups_pending",
			     (unsigned long long)u.backups_pending, "loads_pending",
			     (unsigned long long)u.loads_pending, "host_capacity_tokens",
			     (unsigned long long)(kvs_hpool_capacity(self->hp) * ps),
			     "host_available_tokens",
			     (unsigned long long)(kvs_hpool_available(self->hp) * ps));
}

static PyObject *hiradix_node_info(HiRadixObject *self, PyObject *arg)
{
	kvs_hiradix_node_t *n;
	kvs_hiradix_node_info_t in;
	int rc;

	if (hiradix_check(self) < 0 || !(n = hnode_arg(arg)))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_hiradix_node_info(self->h, n, &in);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_hiradix_node_info", NULL);
	return Py_BuildValue("{snsOsOsOsOsIsI}", "tokens", (Py_ssize_t)in.tokens, "on_device",
			     in.on_device ? Py_True : Py_False, "on_host",
			     in.on_host ? Py_True : Py_False, "backup_pending",
			     in.backup_pending ? Py_True : Py_False, "loading",
			     in.loading ? Py_True : Py_False, "lock_ref", in.lock_ref, "hit_count",
			     in.hit_count);
}

static PyObject *hiradix_stats(HiRadixObject *self, PyObject *unused)
{
	(void)unused;
	if (hiradix_check(self) < 0)
		return NULL;
	return STATS_DICT(hiradix, HIRADIX, self->h);
}

static PyObject *hiradix_validate(HiRadixObject *self, PyObject *unused)
{
	(void)unused;
	return hiradix_call(self, kvs_hiradix_validate, "kvs_hiradix_validate");
}

static PyObject *hiradix_root(HiRadixObject *self, PyObject *unused)
{
	(void)unused;
	if (hiradix_check(self) < 0)
		return NULL;
	return hnode_obj(kvs_hiradix_root(self->h));
}

static PyObject *hiradix_take_events(HiRadixObject *self, PyObject *unused)
{
	(void)unused;
	if (hiradix_check(self) < 0)
		return NULL;
	if (!self->has_events) {
		PyErr_SetString(PyExc_ValueError, "the cache was made without events=True");
		return NULL;
	}
	return kvpy_evq_take(&self->events, 0);
}

static PyMethodDef hiradix_methods[] = {
	{"close", (PyCFunction)hiradix_close, METH_NOARGS,
	 "Destroy the tree, its store and host pool (idempotent)."},
	{"match", (PyCFunction)(void (*)(void))hiradix_match, METH_VARARGS | METH_KEYWORDS,
	 "match(key, out=None, lock=False, extra_key=0) -> (device_len, host_hit, last_device, "
	 "last_node, last_host)"},
	{"insert", (PyCFunction)(void (*)(void))hiradix_insert, METH_VARARGS | METH_KEYWORDS,
	 "insert(key, locs, lock=False, extra_key=0) -> (prefix_len, last_node)"},
	{"lock", (PyCFunction)hiradix_lock, METH_O, "Lock a node and its ancestors."},
	{"unlock", (PyCFunction)hiradix_unlock, METH_O, "Unlock a node and its ancestors."},
	{"evict_device", (PyCFunction)hiradix_evict_device, METH_O,
	 "evict_device(tokens) -> device tokens freed (backed-up nodes stay on the host)"},
	{"evict_host", (PyCFunction)hiradix_evict_host, METH_O,
	 "evict_host(tokens) -> host tokens freed"},
	{"load_back", (PyCFunction)(void (*)(void))hiradix_load_back, METH_VARARGS | METH_KEYWORDS,
	 "load_back(node, quota=0, wait=True) -> tokens loaded back onto the device"},
	{"poll", (PyCFunction)hiradix_poll, METH_NOARGS, "Take in completed copies."},
	{"submit", (PyCFunction)(void (*)(void))hiradix_submit, METH_VARARGS | METH_KEYWORDS,
	 "submit(wait=False): start the copies a deferring cache queued."},
	{"prefetch", (PyCFunction)hiradix_prefetch, METH_VARARGS,
	 "prefetch(id, key) -> tokens the store will read"},
	{"prefetch_done", (PyCFunction)hiradix_prefetch_done, METH_O,
	 "prefetch_done(id) -> (done, tokens)"},
	{"prefetch_revoke", (PyCFunction)hiradix_prefetch_revoke, METH_O, "Cancel a prefetch."},
	{"l3_wait", (PyCFunction)hiradix_l3_wait, METH_NOARGS,
	 "Wait until the store's reads and writes queued so far are done."},
	{"usage", (PyCFunction)hiradix_usage, METH_NOARGS, "Tokens held per tier, as a dict."},
	{"node_info", (PyCFunction)hiradix_node_info, METH_O, "A node's state, as a dict."},
	{"stats", (PyCFunction)hiradix_stats, METH_NOARGS, "The cache's statistics as a dict."},
	{"validate", (PyCFunction)hiradix_validate, METH_NOARGS, "Check the invariants."},
	{"root", (PyCFunction)hiradix_root, METH_NOARGS, "The root node."},
	{"take_events", (PyCFunction)hiradix_take_events, METH_NOARGS,
	 "take_events() -> KV events of both tiers (radix form; medium GPU or CPU)."},
	{NULL, NULL, 0, NULL},
};

PyTypeObject HiRadixType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.HiRadix",
	.tp_doc = "HiRadix(pool, host_ratio=2.0, host_size=0, layout=0, write_policy=0, "
		  "hit_threshold=2, load_back_threshold=10, flags=0, storage=None, "
		  "prefetch_policy=0, prefetch_threshold=256, events=False): kvs_hiradix_create(3).",
	.tp_basicsize = sizeof(HiRadixObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)hiradix_init,
	.tp_dealloc = (destructor)hiradix_dealloc,
	.tp_methods = hiradix_methods,
};
