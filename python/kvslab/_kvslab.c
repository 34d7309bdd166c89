/* SPDX-License-Identifier: MIT */
/*
 * python/kvslab/_kvslab.c - the C extension under the kvslab Python package:
 * thin types over the library's handles (Driver, Pool, Radix), nothing of
 * its own policy.  The Python layer (python/kvslab/__init__.py and the
 * drop-ins) gives them Python's manners.
 *
 * Why a C extension.  The drop-ins call the cache once or several times per
 * request; a ctypes or cffi (ABI mode) call costs a microsecond or more of
 * argument marshalling, as much as the radix operation itself, while a
 * METH_FASTCALL method costs tens of nanoseconds.  Lists of token ids, the
 * form SGLang's scheduler passes them in, are converted here in one loop;
 * any buffer of int32 (a numpy array, array('i'), a torch CPU tensor's
 * numpy view) crosses without a copy.
 *
 * Ownership.  Each object owns its handle and holds a reference to the
 * object its handle depends on (a Pool its Driver, a Radix its Pool), so
 * that Python's collector can never free a driver under a live pool.
 * close() gives the handle back at once; dealloc does it otherwise.  A
 * closed object raises ValueError.
 *
 * Errors.  A call that fails raises kvslab.Error, a subclass of OSError
 * whose errno is the library's and whose message names the call (and, for
 * driver failures, the driver's own detail).
 *
 * The GIL is released around every library call that may block (waits for
 * the writer lock of the cache, driver calls, eviction); the objects
 * themselves are as thread-safe as the library's calls are (see the man
 * pages), and each method holds a reference to its object for the call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <kvslab.h>

static PyObject *KvsError;

/* Raise kvslab.Error(errno, "what: strerror[: detail]"); returns NULL. */
static PyObject *kvs_raise(const char *what, kvs_drv_t *drv)
{
	int e = errno ? errno : EIO;
	const char *detail = drv ? kvs_drv_strerror(drv) : NULL;
	PyObject *args, *msg;

	msg = detail && *detail
			? PyUnicode_FromFormat("%s: %s (%s)", what, strerror(e), detail)
			: PyUnicode_FromFormat("%s: %s", what, strerror(e));

	args = msg ? Py_BuildValue("(iN)", e, msg) : NULL;
	if (args) {
		PyErr_SetObject(KvsError, args);
		Py_DECREF(args);
	}
	return NULL;
}

/* ------------------------------------------------------------ int32 keys */

/*
 * An int32 vector from a Python object: a C-contiguous buffer of 4-byte
 * integers (no copy), or any sequence of ints (converted).  release() after.
 */
struct ivec {
	Py_buffer view;
	int has_view;
	int32_t *own;
	const int32_t *v;
	Py_ssize_t n;
};

static void ivec_release(struct ivec *iv)
{
	if (iv->has_view)
		PyBuffer_Release(&iv->view);
	PyMem_Free(iv->own);
	memset(iv, 0, sizeof(*iv));
}

static int ivec_get(PyObject *o, struct ivec *iv, int writable)
{
	memset(iv, 0, sizeof(*iv));
	if (PyObject_CheckBuffer(o)) {
		int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);

		if (PyObject_GetBuffer(o, &iv->view, flags) < 0)
			return -1;
		iv->has_view = 1;
		if (iv->view.itemsize != 4 || !iv->view.format ||
		    !strchr("iIl", iv->view.format[strlen(iv->view.format) - 1]) ||
		    (iv->view.format[strlen(iv->view.format) - 1] == 'l' && sizeof(long) != 4)) {
			PyErr_SetString(PyExc_TypeError, "expected a buffer of int32");
			ivec_release(iv);
			return -1;
		}
		iv->v = iv->view.buf;
		iv->n = iv->view.len / 4;
		return 0;
	}
	if (writable) {
		PyErr_SetString(PyExc_TypeError, "expected a writable buffer of int32");
		return -1;
	}
	{
		PyObject *seq = PySequence_Fast(o, "expected a sequence of ints or an int32 buffer");
		Py_ssize_t i, n;

		if (!seq)
			return -1;
		n = PySequence_Fast_GET_SIZE(seq);
		iv->own = PyMem_Malloc((n ? n : 1) * sizeof(int32_t));
		if (!iv->own) {
			Py_DECREF(seq);
			PyErr_NoMemory();
			return -1;
		}
		for (i = 0; i < n; i++) {
			long x = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));

			if (x == -1 && PyErr_Occurred()) {
				Py_DECREF(seq);
				ivec_release(iv);
				return -1;
			}
			if (x < INT32_MIN || x > INT32_MAX) {
				Py_DECREF(seq);
				ivec_release(iv);
				PyErr_SetString(PyExc_OverflowError, "token or location out of int32 range");
				return -1;
			}
			iv->own[i] = (int32_t)x;
		}
		Py_DECREF(seq);
		iv->v = iv->own;
		iv->n = n;
		return 0;
	}
}

/* A dict of a stats family: name -> value. */
#define STATS_DICT(F, U, obj)                                                        \
	({                                                                        \
		PyObject *d_ = PyDict_New();                                      \
		for (int i_ = 0; d_ && i_ < (int)KVS_##U##_STAT__COUNT; i_++) {   \
			const char *n_ = kvs_##F##_stat_name((enum kvs_##F##_stat)i_);	\
			PyObject *v_ = PyLong_FromUnsignedLongLong(                   \
				kvs_##F##_stat((obj), (enum kvs_##F##_stat)i_));      \
			if (!v_ || PyDict_SetItemString(d_, n_, v_) < 0) {         \
				Py_XDECREF(v_);                                       \
				Py_CLEAR(d_);                                         \
				break;                                                \
			}                                                             \
			Py_DECREF(v_);                                                \
		}                                                                 \
		d_;                                                               \
	})

/* ---------------------------------------------------------------- Driver */

typedef struct {
	PyObject_HEAD
	kvs_drv_t *d;
} DriverObject;

static int driver_init(DriverObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "granularity", "mem_limit", "flags", NULL};
	const char *name = NULL;
	unsigned long long gran = 0, limit = 0;
	unsigned int flags = 0;
	kvs_drv_attr_t attr;
	kvs_drv_t *d;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zKKI", kwlist, &name, &gran, &limit, &flags))
		return -1;
	if (self->d) {
		PyErr_SetString(PyExc_RuntimeError, "Driver already initialised");
		return -1;
	}
	kvs_drv_attr_init(&attr);
	attr.granularity = gran;
	attr.mem_limit = limit;
	attr.flags = flags;
	Py_BEGIN_ALLOW_THREADS
	d = kvs_drv_open(name, &attr);
	Py_END_ALLOW_THREADS
	if (!d) {
		int e = errno;
		PyObject *a = Py_BuildValue("(iN)", e,
					    PyUnicode_FromFormat("kvs_drv_open(%s): %s: %s",
								 name ? name : "auto", strerror(e),
								 kvs_drv_open_error()));

		if (a) {
			PyErr_SetObject(KvsError, a);
			Py_DECREF(a);
		}
		return -1;
	}
	self->d = d;
	return 0;
}

static int driver_check(DriverObject *self)
{
	if (!self->d) {
		PyErr_SetString(PyExc_ValueError, "the driver is closed");
		return -1;
	}
	return 0;
}

static PyObject *driver_close(DriverObject *self, PyObject *unused)
{
	kvs_drv_t *d = self->d;
	int rc;

	(void)unused;
	if (!d)
		Py_RETURN_NONE;
	self->d = NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_drv_close(d);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvs_raise("kvs_drv_close", NULL);
	Py_RETURN_NONE;
}

static void driver_dealloc(DriverObject *self)
{
	if (self->d)
		kvs_drv_close(self->d);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *driver_stats(DriverObject *self, PyObject *unused)
{
	(void)unused;
	if (driver_check(self) < 0)
		return NULL;
	return STATS_DICT(drv, DRV, self->d);
}

static PyObject *driver_get_name(DriverObject *self, void *c)
{
	(void)c;
	if (driver_check(self) < 0)
		return NULL;
	return PyUnicode_FromString(kvs_drv_name(self->d));
}

static PyObject *driver_get_gran(DriverObject *self, void *c)
{
	(void)c;
	if (driver_check(self) < 0)
		return NULL;
	return PyLong_FromSize_t(kvs_drv_granularity(self->d));
}

static PyObject *driver_get_caps(DriverObject *self, void *c)
{
	(void)c;
	if (driver_check(self) < 0)
		return NULL;
	return PyLong_FromUnsignedLong(kvs_drv_caps(self->d));
}

static PyObject *driver_get_closed(DriverObject *self, void *c)
{
	(void)c;
	return PyBool_FromLong(self->d == NULL);
}

static PyMethodDef driver_methods[] = {
	{"close", (PyCFunction)driver_close, METH_NOARGS, "Close the driver (idempotent)."},
	{"stats", (PyCFunction)driver_stats, METH_NOARGS, "The driver's counters as a dict."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef driver_getset[] = {
	{"name", (getter)driver_get_name, NULL, "backend name", NULL},
	{"granularity", (getter)driver_get_gran, NULL, "mapping granularity in bytes", NULL},
	{"caps", (getter)driver_get_caps, NULL, "KVS_DRV_CAP_* flags", NULL},
	{"closed", (getter)driver_get_closed, NULL, "True once closed", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DriverType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.Driver",
	.tp_doc = "Driver(name=None, granularity=0, mem_limit=0, flags=0): kvs_drv_open(3).",
	.tp_basicsize = sizeof(DriverObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)driver_init,
	.tp_dealloc = (destructor)driver_dealloc,
	.tp_methods = driver_methods,
	.tp_getset = driver_getset,
};

/* ------------------------------------------------------------------ Pool */

typedef struct {
	PyObject_HEAD
	kvs_pool_t *p;
	DriverObject *drv;
} PoolObject;

static int pool_init(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"driver", "model", "page_size", "max_tokens", "max_mapped",
				 "slab_granules", NULL};
	DriverObject *drv;
	const char *model = "tiny";
	unsigned int page_size = 1, granules = 0;
	unsigned long long max_tokens = 0, max_mapped = 0;
	kvs_pool_attr_t attr;
	kvs_pool_t *p;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|sIKKI", kwlist, &DriverType, &drv, &model,
					 &page_size, &max_tokens, &max_mapped, &granules))
		return -1;
	if (self->p) {
		PyErr_SetString(PyExc_RuntimeError, "Pool already initialised");
		return -1;
	}
	if (driver_check(drv) < 0)
		return -1;
	kvs_pool_attr_init(&attr);
	if (kvs_model_preset(model, &attr.model) < 0) {
		kvs_raise("kvs_model_preset", NULL);
		return -1;
	}
	attr.page_size = page_size;
	attr.max_tokens = max_tokens;
	attr.max_mapped = max_mapped;
	if (granules)
		attr.slab_granules = granules;
	Py_BEGIN_ALLOW_THREADS
	p = kvs_pool_create(drv->d, &attr);
	Py_END_ALLOW_THREADS
	if (!p) {
		kvs_raise("kvs_pool_create", drv->d);
		return -1;
	}
	self->p = p;
	Py_INCREF(drv);
	self->drv = drv;
	return 0;
}

static int pool_check(PoolObject *self)
{
	if (!self->p) {
		PyErr_SetString(PyExc_ValueError, "the pool is closed");
		return -1;
	}
	return 0;
}

static PyObject *pool_close(PoolObject *self, PyObject *unused)
{
	kvs_pool_t *p = self->p;
	int rc;

	(void)unused;
	if (!p)
		Py_RETURN_NONE;
	self->p = NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_pool_destroy(p);
	Py_END_ALLOW_THREADS
	Py_CLEAR(self->drv);
	if (rc < 0)
		return kvs_raise("kvs_pool_destroy", NULL);
	Py_RETURN_NONE;
}

static void pool_dealloc(PoolObject *self)
{
	if (self->p)
		kvs_pool_destroy(self->p);
	Py_CLEAR(self->drv);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

/* alloc_into(buf): fill a writable int32 buffer with len(buf) locations. */
static PyObject *pool_alloc_into(PoolObject *self, PyObject *arg)
{
	struct ivec iv;
	int rc;

	if (pool_check(self) < 0 || ivec_get(arg, &iv, 1) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_pool_alloc(self->p, (size_t)iv.n, (int32_t *)iv.v);
	Py_END_ALLOW_THREADS
	ivec_release(&iv);
	if (rc < 0)
		return kvs_raise("kvs_pool_alloc", self->drv->d);
	Py_RETURN_NONE;
}

static PyObject *pool_free(PoolObject *self, PyObject *arg)
{
	struct ivec iv;
	int rc;

	if (pool_check(self) < 0 || ivec_get(arg, &iv, 0) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_pool_free(self->p, (size_t)iv.n, iv.v);
	Py_END_ALLOW_THREADS
	ivec_release(&iv);
	if (rc < 0)
		return kvs_raise("kvs_pool_free", NULL);
	Py_RETURN_NONE;
}

static PyObject *pool_available(PoolObject *self, PyObject *unused)
{
	(void)unused;
	if (pool_check(self) < 0)
		return NULL;
	return PyLong_FromUnsignedLongLong(kvs_pool_available(self->p));
}

static PyObject *pool_slab_stats(PoolObject *self, PyObject *unused)
{
	(void)unused;
	if (pool_check(self) < 0)
		return NULL;
	return STATS_DICT(slab, SLAB, kvs_pool_slab(self->p));
}

static PyObject *pool_get_capacity(PoolObject *self, void *c)
{
	(void)c;
	if (pool_check(self) < 0)
		return NULL;
	return PyLong_FromUnsignedLongLong(kvs_pool_capacity(self->p));
}

static PyObject *pool_get_page_size(PoolObject *self, void *c)
{
	(void)c;
	if (pool_check(self) < 0)
		return NULL;
	return PyLong_FromUnsignedLong(kvs_pool_page_size(self->p));
}

static PyObject *pool_get_driver(PoolObject *self, void *c)
{
	(void)c;
	if (pool_check(self) < 0)
		return NULL;
	Py_INCREF(self->drv);
	return (PyObject *)self->drv;
}

static PyMethodDef pool_methods[] = {
	{"close", (PyCFunction)pool_close, METH_NOARGS, "Destroy the pool (idempotent)."},
	{"alloc_into", (PyCFunction)pool_alloc_into, METH_O,
	 "Fill a writable int32 buffer with that many token locations (all or nothing)."},
	{"free", (PyCFunction)pool_free, METH_O, "Free token locations (int32 buffer or ints)."},
	{"available", (PyCFunction)pool_available, METH_NOARGS, "Tokens that can be allocated."},
	{"slab_stats", (PyCFunction)pool_slab_stats, METH_NOARGS,
	 "The slab allocator's statistics as a dict."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef pool_getset[] = {
	{"capacity", (getter)pool_get_capacity, NULL, "tokens the pool can hold", NULL},
	{"page_size", (getter)pool_get_page_size, NULL, "tokens per page", NULL},
	{"driver", (getter)pool_get_driver, NULL, "the driver", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PoolType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.Pool",
	.tp_doc = "Pool(driver, model='tiny', page_size=1, max_tokens=0, max_mapped=0, "
		  "slab_granules=0): kvs_pool_create(3).",
	.tp_basicsize = sizeof(PoolObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)pool_init,
	.tp_dealloc = (destructor)pool_dealloc,
	.tp_methods = pool_methods,
	.tp_getset = pool_getset,
};

/* ----------------------------------------------------------------- Radix */

/*
 * A radix cache over a Pool, or over no pool at all: then the locations it
 * evicts are collected (evicted) and handed back by evict(), so that the
 * Python caller gives them to its own allocator, as SGLang's RadixCache
 * frees through its token_to_kv_pool_allocator.
 */
typedef struct {
	PyObject_HEAD
	kvs_radix_t *r;
	PoolObject *pool;
	int32_t *evicted;
	size_t nevicted, capevicted;
	int oom;
} RadixObject;

/* free_cb: collect what eviction frees (called under the writer lock, with
 * the GIL released: no Python here). */
static void radix_collect(void *arg, const int32_t *locs, size_t n)
{
	RadixObject *self = arg;

	if (self->nevicted + n > self->capevicted) {
		size_t cap = self->capevicted ? self->capevicted : 256;
		int32_t *nv;

		while (cap < self->nevicted + n)
			cap *= 2;
		nv = realloc(self->evicted, cap * sizeof(*nv));
		if (!nv) {
			self->oom = 1;
			return;
		}
		self->evicted = nv;
		self->capevicted = cap;
	}
	memcpy(self->evicted + self->nevicted, locs, n * sizeof(*locs));
	self->nevicted += n;
}

static int radix_init(RadixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"pool", "page_size", "policy", "disabled", "slab_aware", NULL};
	PyObject *pool = Py_None;
	unsigned int page_size = 0, slab_aware = 0;
	int policy = KVS_EVICT_LRU, disabled = 0;
	kvs_radix_attr_t attr;
	kvs_radix_t *r;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OIipI", kwlist, &pool, &page_size, &policy,
					 &disabled, &slab_aware))
		return -1;
	if (self->r) {
		PyErr_SetString(PyExc_RuntimeError, "Radix already initialised");
		return -1;
	}
	if (pool != Py_None && !PyObject_TypeCheck(pool, &PoolType)) {
		PyErr_SetString(PyExc_TypeError, "pool must be a Pool or None");
		return -1;
	}
	if (pool != Py_None && pool_check((PoolObject *)pool) < 0)
		return -1;
	kvs_radix_attr_init(&attr);
	attr.page_size = page_size;
	attr.policy = policy;
	attr.disabled = disabled;
	/* SGLang's order unless asked: no slab-aware reordering. */
	attr.slab_aware = slab_aware;
	if (pool == Py_None) {
		if (!page_size)
			attr.page_size = 1;
		attr.free_cb = radix_collect;
		attr.free_arg = self;
	}
	Py_BEGIN_ALLOW_THREADS
	r = kvs_radix_create(pool == Py_None ? NULL : ((PoolObject *)pool)->p, &attr);
	Py_END_ALLOW_THREADS
	if (!r) {
		kvs_raise("kvs_radix_create", NULL);
		return -1;
	}
	self->r = r;
	if (pool != Py_None) {
		Py_INCREF(pool);
		self->pool = (PoolObject *)pool;
	}
	return 0;
}

static int radix_check(RadixObject *self)
{
	if (!self->r) {
		PyErr_SetString(PyExc_ValueError, "the radix cache is closed");
		return -1;
	}
	return 0;
}

static PyObject *radix_close(RadixObject *self, PyObject *unused)
{
	kvs_radix_t *r = self->r;
	int rc;

	(void)unused;
	if (!r)
		Py_RETURN_NONE;
	self->r = NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_radix_destroy(r);
	Py_END_ALLOW_THREADS
	Py_CLEAR(self->pool);
	free(self->evicted);
	self->evicted = NULL;
	self->nevicted = self->capevicted = 0;
	if (rc < 0)
		return kvs_raise("kvs_radix_destroy", NULL);
	Py_RETURN_NONE;
}

static void radix_dealloc(RadixObject *self)
{
	if (self->r)
		kvs_radix_destroy(self->r);
	Py_CLEAR(self->pool);
	free(self->evicted);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *node_obj(kvs_radix_node_t *n)
{
	return PyLong_FromVoidPtr(n);
}

/* match(key, out=None, lock=False, extra_key=0) -> (length, node): the
 * cached prefix's length (page-aligned), its locations written into out
 * (a writable int32 buffer of at least len(key), optional), and the node
 * that ends it, locked with lock=True. */
static PyObject *radix_match(RadixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"key", "out", "lock", "extra_key", NULL};
	PyObject *key, *out = Py_None;
	unsigned long long extra = 0;
	int lock = 0;
	struct ivec k, o = {0};
	kvs_radix_node_t *last = NULL;
	ssize_t got;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OpK", kwlist, &key, &out, &lock, &extra))
		return NULL;
	if (radix_check(self) < 0 || ivec_get(key, &k, 0) < 0)
		return NULL;
	if (out != Py_None) {
		if (ivec_get(out, &o, 1) < 0) {
			ivec_release(&k);
			return NULL;
		}
		if (o.n < k.n) {
			ivec_release(&k);
			ivec_release(&o);
			PyErr_SetString(PyExc_ValueError, "out is shorter than key");
			return NULL;
		}
	}
	/* The library writes the prefix's locations somewhere: a scratch
	 * vector when the caller wants none. */
	if (!o.v) {
		o.own = PyMem_Malloc((k.n ? k.n : 1) * sizeof(int32_t));
		if (!o.own) {
			ivec_release(&k);
			return PyErr_NoMemory();
		}
		o.v = o.own;
	}
	Py_BEGIN_ALLOW_THREADS
	got = (lock ? kvs_radix_match_lock : kvs_radix_match)(self->r, extra, k.v, (size_t)k.n,
							      (int32_t *)o.v, &last);
	Py_END_ALLOW_THREADS
	ivec_release(&k);
	ivec_release(&o);
	if (got < 0)
		return kvs_raise("kvs_radix_match", NULL);
	return Py_BuildValue("(nN)", (Py_ssize_t)got, node_obj(last));
}

/* insert(key, locs, lock=False, priority=0, extra_key=0) -> (prefix, node):
 * how many leading tokens were cached already (their locations in locs
 * are duplicates the caller frees), and the node that ends the key. */
static PyObject *radix_insert(RadixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"key", "locs", "lock", "priority", "extra_key", NULL};
	PyObject *key, *locs;
	unsigned long long extra = 0;
	int lock = 0, prio = 0;
	struct ivec k, l;
	kvs_radix_node_t *last = NULL;
	ssize_t got;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|piK", kwlist, &key, &locs, &lock, &prio,
					 &extra))
		return NULL;
	if (radix_check(self) < 0 || ivec_get(key, &k, 0) < 0)
		return NULL;
	if (ivec_get(locs, &l, 0) < 0) {
		ivec_release(&k);
		return NULL;
	}
	if (l.n < k.n) {
		ivec_release(&k);
		ivec_release(&l);
		PyErr_SetString(PyExc_ValueError, "locs is shorter than key");
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	got = (lock ? kvs_radix_insert_lock : kvs_radix_insert)(self->r, extra, k.v, (size_t)k.n,
								l.v, prio, &last);
	Py_END_ALLOW_THREADS
	ivec_release(&k);
	ivec_release(&l);
	if (got < 0)
		return kvs_raise("kvs_radix_insert", NULL);
	return Py_BuildValue("(nN)", (Py_ssize_t)got, node_obj(last));
}

static kvs_radix_node_t *node_arg(PyObject *o)
{
	void *p = PyLong_AsVoidPtr(o);

	if (!p && !PyErr_Occurred())
		PyErr_SetString(PyExc_ValueError, "no node");
	return p;
}

static PyObject *radix_lock_common(RadixObject *self, PyObject *arg, int lock)
{
	kvs_radix_node_t *n;
	int rc;

	if (radix_check(self) < 0 || !(n = node_arg(arg)))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = lock ? kvs_radix_lock(self->r, n) : kvs_radix_unlock(self->r, n);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvs_raise(lock ? "kvs_radix_lock" : "kvs_radix_unlock", NULL);
	Py_RETURN_NONE;
}

static PyObject *radix_lock(RadixObject *self, PyObject *arg)
{
	return radix_lock_common(self, arg, 1);
}

static PyObject *radix_unlock(RadixObject *self, PyObject *arg)
{
	return radix_lock_common(self, arg, 0);
}

/* evict(tokens) -> (evicted, locations): over no pool, the locations the
 * eviction freed (a bytes object of int32, for the caller's allocator);
 * over a pool, the pool took them back and locations is empty. */
static PyObject *radix_evict(RadixObject *self, PyObject *arg)
{
	unsigned long long want = PyLong_AsUnsignedLongLong(arg);
	PyObject *locs;
	ssize_t got;

	if ((want == (unsigned long long)-1 && PyErr_Occurred()) || radix_check(self) < 0)
		return NULL;
	self->nevicted = 0;
	self->oom = 0;
	Py_BEGIN_ALLOW_THREADS
	got = kvs_radix_evict(self->r, (size_t)want);
	Py_END_ALLOW_THREADS
	if (got < 0)
		return kvs_raise("kvs_radix_evict", NULL);
	if (self->oom)
		return PyErr_NoMemory();
	locs = PyBytes_FromStringAndSize((const char *)self->evicted,
					 (Py_ssize_t)(self->nevicted * sizeof(int32_t)));
	if (!locs)
		return NULL;
	return Py_BuildValue("(nN)", (Py_ssize_t)got, locs);
}

static PyObject *radix_reset(RadixObject *self, PyObject *unused)
{
	int rc;

	(void)unused;
	if (radix_check(self) < 0)
		return NULL;
	self->nevicted = 0;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_radix_reset(self->r);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvs_raise("kvs_radix_reset", NULL);
	Py_RETURN_NONE;
}

static PyObject *radix_validate(RadixObject *self, PyObject *unused)
{
	(void)unused;
	if (radix_check(self) < 0)
		return NULL;
	if (kvs_radix_validate(self->r) < 0)
		return kvs_raise("kvs_radix_validate", NULL);
	Py_RETURN_NONE;
}

#define RADIX_COUNT(fn)                                                        \
	static PyObject *radix_##fn(RadixObject *self, PyObject *unused)       \
	{                                                                      \
		uint64_t v;                                                    \
		(void)unused;                                                  \
		if (radix_check(self) < 0)                                     \
			return NULL;                                           \
		Py_BEGIN_ALLOW_THREADS                                         \
		v = kvs_radix_##fn(self->r);                                   \
		Py_END_ALLOW_THREADS                                           \
		return PyLong_FromUnsignedLongLong(v);                         \
	}
RADIX_COUNT(tokens)
RADIX_COUNT(evictable)
RADIX_COUNT(protected)
RADIX_COUNT(nodes)

static PyObject *radix_stats(RadixObject *self, PyObject *unused)
{
	PyObject *d;

	(void)unused;
	if (radix_check(self) < 0)
		return NULL;
	d = STATS_DICT(radix, RADIX, self->r);
	return d;
}

static PyMethodDef radix_methods[] = {
	{"close", (PyCFunction)radix_close, METH_NOARGS, "Destroy the cache (idempotent)."},
	{"match", (PyCFunction)(void (*)(void))radix_match, METH_VARARGS | METH_KEYWORDS,
	 "match(key, out=None, lock=False, extra_key=0) -> (length, node)"},
	{"insert", (PyCFunction)(void (*)(void))radix_insert, METH_VARARGS | METH_KEYWORDS,
	 "insert(key, locs, lock=False, priority=0, extra_key=0) -> (prefix, node)"},
	{"lock", (PyCFunction)radix_lock, METH_O, "Lock a node and its ancestors."},
	{"unlock", (PyCFunction)radix_unlock, METH_O, "Unlock a node and its ancestors."},
	{"evict", (PyCFunction)radix_evict, METH_O, "evict(tokens) -> (evicted, locations)"},
	{"reset", (PyCFunction)radix_reset, METH_NOARGS, "Drop everything (nothing locked)."},
	{"validate", (PyCFunction)radix_validate, METH_NOARGS, "Check the invariants."},
	{"tokens", (PyCFunction)radix_tokens, METH_NOARGS, "Tokens cached."},
	{"evictable", (PyCFunction)radix_evictable, METH_NOARGS, "Tokens eviction could free."},
	{"protected", (PyCFunction)radix_protected, METH_NOARGS, "Tokens locked."},
	{"nodes", (PyCFunction)radix_nodes, METH_NOARGS, "Nodes of the tree."},
	{"stats", (PyCFunction)radix_stats, METH_NOARGS, "The cache's statistics as a dict."},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject RadixType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.Radix",
	.tp_doc = "Radix(pool=None, page_size=0, policy=LRU, disabled=False, slab_aware=0): "
		  "kvs_radix_create(3).",
	.tp_basicsize = sizeof(RadixObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)radix_init,
	.tp_dealloc = (destructor)radix_dealloc,
	.tp_methods = radix_methods,
};


/* --------------------------------------------------------------- Reqtab */

/*
 * A request table (kvs_reqtab_create(3)).  Its host mirror is exported
 * through the buffer protocol as a read-only max_reqs x max_context int32
 * matrix (numpy.asarray(tab) is a view, no copy): reads see every write at
 * once; writes go through write() so that the device table follows.
 */
typedef struct {
	PyObject_HEAD
	kvs_reqtab_t *t;
	DriverObject *drv;
	Py_ssize_t shape[2], strides[2];
	Py_ssize_t exports;
} ReqtabObject;

static int reqtab_init(ReqtabObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"driver", "max_reqs", "max_context", NULL};
	DriverObject *drv;
	unsigned int reqs, ctx;
	kvs_reqtab_t *t;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!II", kwlist, &DriverType, &drv, &reqs, &ctx))
		return -1;
	if (self->t) {
		PyErr_SetString(PyExc_RuntimeError, "Reqtab already initialised");
		return -1;
	}
	if (driver_check(drv) < 0)
		return -1;
	Py_BEGIN_ALLOW_THREADS
	t = kvs_reqtab_create(drv->d, reqs, ctx);
	Py_END_ALLOW_THREADS
	if (!t) {
		kvs_raise("kvs_reqtab_create", drv->d);
		return -1;
	}
	self->t = t;
	Py_INCREF(drv);
	self->drv = drv;
	self->shape[0] = reqs;
	self->shape[1] = ctx;
	self->strides[0] = (Py_ssize_t)ctx * 4;
	self->strides[1] = 4;
	return 0;
}

static int reqtab_check(ReqtabObject *self)
{
	if (!self->t) {
		PyErr_SetString(PyExc_ValueError, "the request table is closed");
		return -1;
	}
	return 0;
}

static PyObject *reqtab_close(ReqtabObject *self, PyObject *unused)
{
	kvs_reqtab_t *t = self->t;
	int rc;

	(void)unused;
	if (!t)
		Py_RETURN_NONE;
	if (self->exports) {
		PyErr_SetString(PyExc_BufferError, "views of the table are still alive");
		return NULL;
	}
	self->t = NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_reqtab_destroy(t);
	Py_END_ALLOW_THREADS
	Py_CLEAR(self->drv);
	if (rc < 0)
		return kvs_raise("kvs_reqtab_destroy", NULL);
	Py_RETURN_NONE;
}

static void reqtab_dealloc(ReqtabObject *self)
{
	if (self->t)
		kvs_reqtab_destroy(self->t);
	Py_CLEAR(self->drv);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static int reqtab_getbuffer(ReqtabObject *self, Py_buffer *view, int flags)
{
	if (reqtab_check(self) < 0) {
		view->obj = NULL;
		return -1;
	}
	if (flags & PyBUF_WRITABLE) {
		PyErr_SetString(PyExc_BufferError, "the table is read-only: write through write()");
		view->obj = NULL;
		return -1;
	}
	view->buf = (void *)kvs_reqtab_mirror(self->t);
	view->obj = (PyObject *)self;
	Py_INCREF(self);
	view->len = self->shape[0] * self->strides[0];
	view->readonly = 1;
	view->itemsize = 4;
	view->format = (flags & PyBUF_FORMAT) ? "i" : NULL;
	view->ndim = 2;
	view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
	view->strides = (flags & PyBUF_STRIDES) ? self->strides : NULL;
	view->suboffsets = NULL;
	view->internal = NULL;
	self->exports++;
	return 0;
}

static void reqtab_releasebuffer(ReqtabObject *self, Py_buffer *view)
{
	(void)view;
	self->exports--;
}

static PyBufferProcs reqtab_as_buffer = {
	(getbufferproc)reqtab_getbuffer,
	(releasebufferproc)reqtab_releasebuffer,
};

/* alloc(n) -> list of slots, or None when fewer than n are free. */
static PyObject *reqtab_alloc(ReqtabObject *self, PyObject *arg)
{
	Py_ssize_t n = PyLong_AsSsize_t(arg), i;
	uint32_t *slots;
	PyObject *list;
	int rc;

	if ((n == -1 && PyErr_Occurred()) || reqtab_check(self) < 0)
		return NULL;
	if (n < 0 || n > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError, "bad count of slots");
		return NULL;
	}
	slots = PyMem_Malloc((n ? n : 1) * sizeof(*slots));
	if (!slots)
		return PyErr_NoMemory();
	rc = kvs_reqtab_alloc(self->t, (uint32_t)n, slots);
	if (rc < 0) {
		PyMem_Free(slots);
		if (errno == ENOMEM)
			Py_RETURN_NONE;
		return kvs_raise("kvs_reqtab_alloc", NULL);
	}
	list = PyList_New(n);
	for (i = 0; list && i < n; i++)
		PyList_SET_ITEM(list, i, PyLong_FromUnsignedLong(slots[i]));
	PyMem_Free(slots);
	return list;
}

static PyObject *reqtab_free(ReqtabObject *self, PyObject *arg)
{
	unsigned long slot = PyLong_AsUnsignedLong(arg);

	if ((slot == (unsigned long)-1 && PyErr_Occurred()) || reqtab_check(self) < 0)
		return NULL;
	if (kvs_reqtab_free(self->t, (uint32_t)slot) < 0)
		return kvs_raise("kvs_reqtab_free", NULL);
	Py_RETURN_NONE;
}

/* write(slot, pos, locs): entries pos .. pos + len(locs) - 1 of the row. */
static PyObject *reqtab_write(ReqtabObject *self, PyObject *args)
{
	unsigned int slot, pos;
	PyObject *locs;
	struct ivec iv;
	int rc;

	if (!PyArg_ParseTuple(args, "IIO", &slot, &pos, &locs) || reqtab_check(self) < 0 ||
	    ivec_get(locs, &iv, 0) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_reqtab_write(self->t, slot, pos, (uint32_t)iv.n, iv.v);
	Py_END_ALLOW_THREADS
	ivec_release(&iv);
	if (rc < 0)
		return kvs_raise("kvs_reqtab_write", self->drv->d);
	Py_RETURN_NONE;
}

static PyObject *reqtab_sync(ReqtabObject *self, PyObject *unused)
{
	int rc;

	(void)unused;
	if (reqtab_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_reqtab_sync(self->t);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvs_raise("kvs_reqtab_sync", self->drv->d);
	Py_RETURN_NONE;
}

static PyObject *reqtab_available(ReqtabObject *self, PyObject *unused)
{
	(void)unused;
	if (reqtab_check(self) < 0)
		return NULL;
	return PyLong_FromUnsignedLong(kvs_reqtab_available(self->t));
}

static PyMethodDef reqtab_methods[] = {
	{"close", (PyCFunction)reqtab_close, METH_NOARGS, "Destroy the table (idempotent)."},
	{"alloc", (PyCFunction)reqtab_alloc, METH_O, "alloc(n) -> slots, or None if short."},
	{"free", (PyCFunction)reqtab_free, METH_O, "Free a slot."},
	{"write", (PyCFunction)reqtab_write, METH_VARARGS, "write(slot, pos, locs)"},
	{"sync", (PyCFunction)reqtab_sync, METH_NOARGS, "Wait until the device table is written."},
	{"available", (PyCFunction)reqtab_available, METH_NOARGS, "Free slots."},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject ReqtabType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.Reqtab",
	.tp_doc = "Reqtab(driver, max_reqs, max_context): kvs_reqtab_create(3); a read-only "
		  "buffer of the host mirror.",
	.tp_basicsize = sizeof(ReqtabObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)reqtab_init,
	.tp_dealloc = (destructor)reqtab_dealloc,
	.tp_methods = reqtab_methods,
	.tp_as_buffer = &reqtab_as_buffer,
};


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
		kvs_raise("kvs_block_hasher_create", NULL);
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
		return kvs_raise("kvs_block_hash_request", NULL);
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
		return kvs_raise("kvs_block_hash", NULL);
	return hash_bytes(&out);
}

static PyObject *hasher_get_root(HasherObject *self, void *c)
{
	kvs_block_hash_t r;

	(void)c;
	if (hasher_check(self) < 0)
		return NULL;
	if (kvs_block_hasher_root(self->h, &r) < 0)
		return kvs_raise("kvs_block_hasher_root", NULL);
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

static PyTypeObject HasherType = {
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
} HCacheObject;

static int hcache_init(HCacheObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"pool", NULL};
	PoolObject *pool;
	kvs_hcache_t *hc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!", kwlist, &PoolType, &pool))
		return -1;
	if (self->hc) {
		PyErr_SetString(PyExc_RuntimeError, "HCache already initialised");
		return -1;
	}
	if (pool_check(pool) < 0)
		return -1;
	Py_BEGIN_ALLOW_THREADS
	hc = kvs_hcache_create(pool->p, NULL);
	Py_END_ALLOW_THREADS
	if (!hc) {
		kvs_raise("kvs_hcache_create", NULL);
		return -1;
	}
	self->hc = hc;
	Py_INCREF(pool);
	self->pool = pool;
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
	Py_CLEAR(self->pool);
	if (rc < 0)
		return kvs_raise("kvs_hcache_destroy", NULL);
	Py_RETURN_NONE;
}

static void hcache_dealloc(HCacheObject *self)
{
	if (self->hc)
		kvs_hcache_destroy(self->hc);
	Py_CLEAR(self->pool);
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

	for (i = 0; l && i < n; i++)
		PyList_SET_ITEM(l, (Py_ssize_t)i, PyLong_FromLong(v[i]));
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
		return kvs_raise("kvs_hcache_alloc", NULL);
	}
	l = int_list(b, (size_t)n);
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
		return kvs_raise(touch ? "kvs_hcache_touch" : "kvs_hcache_free", NULL);
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

/* find(hash) -> block or None. */
static PyObject *hcache_find(HCacheObject *self, PyObject *arg)
{
	kvs_block_hash_t h;
	int32_t b;

	if (hcache_check(self) < 0 || hash_from(arg, &h) < 0)
		return NULL;
	b = kvs_hcache_find(self->hc, &h);
	if (b < 0) {
		if (errno == ENOENT)
			Py_RETURN_NONE;
		return kvs_raise("kvs_hcache_find", NULL);
	}
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
		return kvs_raise("kvs_hcache_cache", NULL);
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
		return kvs_raise("kvs_hcache_lookup", NULL);
	}
	l = int_list(b, (size_t)got);
	PyMem_Free(b);
	return l;
}

static PyObject *hcache_evict(HCacheObject *self, PyObject *arg)
{
	Py_ssize_t n = PyLong_AsSsize_t(arg);
	ssize_t got;

	if ((n == -1 && PyErr_Occurred()) || hcache_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	got = kvs_hcache_evict(self->hc, (size_t)n);
	Py_END_ALLOW_THREADS
	if (got < 0)
		return kvs_raise("kvs_hcache_evict", NULL);
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
		return kvs_raise("kvs_hcache_reset", NULL);
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
		return kvs_raise("kvs_hcache_block", NULL);
	if (!has)
		return Py_BuildValue("(kO)", (unsigned long)ref, Py_None);
	return Py_BuildValue("(kN)", (unsigned long)ref, hash_bytes(&h));
}

static PyObject *hcache_stats(HCacheObject *self, PyObject *unused)
{
	kvs_hcache_stats_t st;

	(void)unused;
	if (hcache_check(self) < 0)
		return NULL;
	if (kvs_hcache_stats(self->hc, &st) < 0)
		return kvs_raise("kvs_hcache_stats", NULL);
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
		return kvs_raise("kvs_hcache_validate", NULL);
	Py_RETURN_NONE;
}

static PyMethodDef hcache_methods[] = {
	{"close", (PyCFunction)hcache_close, METH_NOARGS, "Destroy the cache (idempotent)."},
	{"alloc", (PyCFunction)hcache_alloc, METH_O, "alloc(n) -> new blocks, all or none."},
	{"free", (PyCFunction)hcache_free, METH_O, "Drop a reference of each block."},
	{"touch", (PyCFunction)hcache_touch, METH_O, "Reference cached blocks."},
	{"find", (PyCFunction)hcache_find, METH_O, "find(hash) -> block or None."},
	{"cache", (PyCFunction)(void (*)(void))hcache_cache, METH_VARARGS | METH_KEYWORDS,
	 "cache(blocks, hashes, parent=None, extra_key=0)"},
	{"lookup", (PyCFunction)hcache_lookup, METH_VARARGS,
	 "lookup(hashes, ntokens) -> hit blocks (referenced)"},
	{"evict", (PyCFunction)hcache_evict, METH_O, "evict(n) -> blocks evicted"},
	{"reset", (PyCFunction)hcache_reset, METH_NOARGS, "Forget every hash (none in use)."},
	{"block", (PyCFunction)hcache_block, METH_O, "block(id) -> (refcount, hash or None)"},
	{"stats", (PyCFunction)hcache_stats, METH_NOARGS, "kvs_hcache_stats() as a dict."},
	{"validate", (PyCFunction)hcache_validate, METH_NOARGS, "Check the invariants."},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject HCacheType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.HCache",
	.tp_doc = "HCache(pool): kvs_hcache_create(3).",
	.tp_basicsize = sizeof(HCacheObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)hcache_init,
	.tp_dealloc = (destructor)hcache_dealloc,
	.tp_methods = hcache_methods,
};

/* ---------------------------------------------------------------- module */

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
	(void)m;
	(void)unused;
	return PyUnicode_FromString(KVSLAB_VERSION_STRING);
}

static PyMethodDef module_methods[] = {
	{"version", mod_version, METH_NOARGS, "The library's version string."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef kvslab_module = {
	PyModuleDef_HEAD_INIT, "kvslab._kvslab", "kvslab's C binding.", -1, module_methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kvslab(void)
{
	PyObject *m;

	if (PyType_Ready(&DriverType) < 0 || PyType_Ready(&PoolType) < 0 ||
	    PyType_Ready(&RadixType) < 0 || PyType_Ready(&ReqtabType) < 0 ||
	    PyType_Ready(&HasherType) < 0 || PyType_Ready(&HCacheType) < 0)
		return NULL;
	m = PyModule_Create(&kvslab_module);
	if (!m)
		return NULL;
	KvsError = PyErr_NewExceptionWithDoc("kvslab.Error",
					     "A kvslab call failed: an OSError with its errno.",
					     PyExc_OSError, NULL);
	Py_INCREF(&DriverType);
	Py_INCREF(&PoolType);
	Py_INCREF(&RadixType);
	Py_INCREF(&ReqtabType);
	Py_INCREF(&HasherType);
	Py_INCREF(&HCacheType);
	if (!KvsError || PyModule_AddObject(m, "Error", KvsError) < 0 ||
	    PyModule_AddObject(m, "Driver", (PyObject *)&DriverType) < 0 ||
	    PyModule_AddObject(m, "Pool", (PyObject *)&PoolType) < 0 ||
	    PyModule_AddObject(m, "Radix", (PyObject *)&RadixType) < 0 ||
	    PyModule_AddObject(m, "Reqtab", (PyObject *)&ReqtabType) < 0 ||
	    PyModule_AddObject(m, "Hasher", (PyObject *)&HasherType) < 0 ||
	    PyModule_AddObject(m, "HCache", (PyObject *)&HCacheType) < 0 ||
	    PyModule_AddIntConstant(m, "HASH_SHA256_CBOR", KVS_HASH_SHA256_CBOR) < 0 ||
	    PyModule_AddIntConstant(m, "HASH_SHA256_CBOR_64", KVS_HASH_SHA256_CBOR_64) < 0 ||
	    PyModule_AddIntConstant(m, "HASH_XXH3_128", KVS_HASH_XXH3_128) < 0 ||
	    PyModule_AddIntConstant(m, "EVICT_LRU", KVS_EVICT_LRU) < 0 ||
	    PyModule_AddIntConstant(m, "EVICT_LFU", KVS_EVICT_LFU) < 0 ||
	    PyModule_AddIntConstant(m, "EVICT_FIFO", KVS_EVICT_FIFO) < 0 ||
	    PyModule_AddIntConstant(m, "EVICT_PRIORITY", KVS_EVICT_PRIORITY) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	Py_INCREF(KvsError); /* the module's reference was stolen; keep ours */
	return m;
}
