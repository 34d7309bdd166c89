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
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "_kvslab.h"

PyObject *KvsError;

/* Raise kvslab.Error(errno, "what: strerror[: detail]"); returns NULL. */
PyObject *kvpy_raise(const char *what, kvs_drv_t *drv)
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
 * Scratch vectors (int64 buffers' int32 copies, lists' conversions, outputs
 * nobody asked for) come from a small cache of blocks kept warm between
 * calls: a fresh block of a long key costs page faults, several times the
 * conversion itself.  The GIL guards the cache (ivec_get() and
 * ivec_release() run with it held).
 */
#define IVEC_CACHE 8
#define IVEC_CACHE_MAX ((size_t)1 << 22) /* entries: larger blocks go back */
static struct {
	int32_t *p;
	size_t cap;
} ivec_cache[IVEC_CACHE];
static int ivec_ncache;

int32_t *ivec_scratch(struct ivec *iv, size_t n)
{
	int i;

	for (i = ivec_ncache - 1; i >= 0; i--) {
		if (ivec_cache[i].cap < n)
			continue;
		iv->own = ivec_cache[i].p;
		iv->owncap = ivec_cache[i].cap;
		ivec_cache[i] = ivec_cache[--ivec_ncache];
		return iv->own;
	}
	iv->own = PyMem_Malloc((n ? n : 1) * sizeof(int32_t));
	iv->owncap = iv->own ? (n ? n : 1) : 0;
	if (!iv->own)
		PyErr_NoMemory();
	return iv->own;
}

void ivec_release(struct ivec *iv)
{
	if (iv->has_view)
		PyBuffer_Release(&iv->view);
	if (iv->own && iv->owncap && iv->owncap <= IVEC_CACHE_MAX && ivec_ncache < IVEC_CACHE) {
		ivec_cache[ivec_ncache].p = iv->own;
		ivec_cache[ivec_ncache].cap = iv->owncap;
		ivec_ncache++;
	} else {
		PyMem_Free(iv->own);
	}
	memset(iv, 0, sizeof(*iv));
}

/*
 * An int64 buffer (SGLang's indices are int64 tensors): the library sees an
 * int32 copy, converted here with a range check; a writable one is written
 * back by ivec_writeback().
 */
/* Narrow @n int64 to int32; nonzero when one is out of range (unsigned:
 * above INT32_MAX).  Branch-free, so that the compiler vectorizes it. */
__attribute__((optimize("O3"))) static uint64_t narrow(int32_t *restrict d,
						       const int64_t *restrict w, size_t n,
						       int is_unsigned)
{
	uint64_t bad = 0, off = is_unsigned ? 0 : (uint64_t)1 << 31;
	uint64_t lim = is_unsigned ? (uint64_t)INT32_MAX : UINT32_MAX;
	size_t i;

	for (i = 0; i < n; i++) {
		bad |= ((uint64_t)w[i] + off) > lim;
		d[i] = (int32_t)w[i];
	}
	return bad;
}

static int ivec_widen(struct ivec *iv, int writable, int is_unsigned)
{
	Py_ssize_t n = iv->view.len / 8;

	if (!ivec_scratch(iv, (size_t)n)) {
		ivec_release(iv);
		return -1;
	}
	iv->wide = 1;
	iv->n = n;
	iv->v = iv->own;
	if (writable)
		return 0;
	if (narrow(iv->own, iv->view.buf, (size_t)n, is_unsigned)) {
		ivec_release(iv);
		PyErr_SetString(PyExc_OverflowError, "token or location out of int32 range");
		return -1;
	}
	return 0;
}

__attribute__((optimize("O3"))) static void widen(int64_t *restrict d, const int32_t *restrict v,
						  size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		d[i] = v[i];
}

void ivec_writeback(struct ivec *iv, Py_ssize_t n)
{
	if (!iv->wide || !iv->has_view)
		return;
	widen(iv->view.buf, iv->own, (size_t)(n < iv->n ? n : iv->n));
}

int ivec_get(PyObject *o, struct ivec *iv, int writable)
{
	char fmt;

	memset(iv, 0, sizeof(*iv));
	if (PyObject_CheckBuffer(o)) {
		int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);

		if (PyObject_GetBuffer(o, &iv->view, flags) < 0)
			return -1;
		iv->has_view = 1;
		fmt = iv->view.format ? iv->view.format[strlen(iv->view.format) - 1] : 0;
		if (fmt && iv->view.itemsize == 4 && strchr("iIlL", fmt) &&
		    !((fmt == 'l' || fmt == 'L') && sizeof(long) != 4)) {
			iv->v = iv->view.buf;
			iv->n = iv->view.len / 4;
			return 0;
		}
		if (fmt && iv->view.itemsize == 8 && strchr("qQlL", fmt) &&
		    !((fmt == 'l' || fmt == 'L') && sizeof(long) != 8))
			return ivec_widen(iv, writable, fmt == 'Q' || fmt == 'L');
		PyErr_SetString(PyExc_TypeError, "expected a buffer of int32 or int64");
		ivec_release(iv);
		return -1;
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
		if (!ivec_scratch(iv, (size_t)n)) {
			Py_DECREF(seq);
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


/* ---------------------------------------------------------------- Driver */


static int driver_init(DriverObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "granularity", "mem_limit", "flags", "device", NULL};
	const char *name = NULL;
	unsigned long long gran = 0, limit = 0;
	unsigned int flags = 0;
	int device = 0;
	kvs_drv_attr_t attr;
	kvs_drv_t *d;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zKKIi", kwlist, &name, &gran, &limit, &flags,
					 &device))
		return -1;
	if (self->d) {
		PyErr_SetString(PyExc_RuntimeError, "Driver already initialised");
		return -1;
	}
	kvs_drv_attr_init(&attr);
	attr.granularity = gran;
	attr.mem_limit = limit;
	attr.flags = flags;
	attr.device = device;
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
	self->device = device;
	return 0;
}

int driver_check(DriverObject *self)
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
	if (self->users) {
		errno = EBUSY;
		return kvpy_raise("Driver.close: pools or request tables over it are still open",
				  NULL);
	}
	self->d = NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_drv_close(d);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_drv_close", NULL);
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

PyTypeObject DriverType = {
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


static int pool_init(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"driver", "model", "page_size", "max_tokens", "max_mapped",
				 "slab_granules", "slab_flags", "min_empty", "max_empty",
				 "shrink_quiet", "decay_ms", NULL};
	DriverObject *drv;
	const char *model = "tiny";
	unsigned int page_size = 1, granules = 0, slab_flags = 0;
	unsigned long long max_tokens = 0, max_mapped = 0;
	int min_empty = -1, max_empty = -1, decay_ms = -1;
	long long shrink_quiet = -1;
	kvs_pool_attr_t attr;
	kvs_pool_t *p;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|sIKKIIiiLi", kwlist, &DriverType, &drv,
					 &model, &page_size, &max_tokens, &max_mapped, &granules,
					 &slab_flags, &min_empty, &max_empty, &shrink_quiet,
					 &decay_ms))
		return -1;
	if (self->p) {
		PyErr_SetString(PyExc_RuntimeError, "Pool already initialised");
		return -1;
	}
	if (driver_check(drv) < 0)
		return -1;
	kvs_pool_attr_init(&attr);
	if (kvs_model_preset(model, &attr.model) < 0) {
		kvpy_raise("kvs_model_preset", NULL);
		return -1;
	}
	attr.page_size = page_size;
	attr.max_tokens = max_tokens;
	attr.max_mapped = max_mapped;
	if (granules)
		attr.slab_granules = granules;
	attr.slab_flags = slab_flags;
	/* -1: the library's default (kvs_slab_create(3)). */
	if (min_empty >= 0)
		attr.min_empty = (uint32_t)min_empty;
	if (max_empty >= 0)
		attr.max_empty = (uint32_t)max_empty;
	if (shrink_quiet >= 0)
		attr.shrink_quiet = (uint64_t)shrink_quiet;
	if (decay_ms >= 0)
		attr.decay_ms = (uint32_t)decay_ms;
	Py_BEGIN_ALLOW_THREADS
	p = kvs_pool_create(drv->d, &attr);
	Py_END_ALLOW_THREADS
	if (!p) {
		kvpy_raise("kvs_pool_create", drv->d);
		return -1;
	}
	self->p = p;
	self->model = attr.model;
	snprintf(self->model_name, sizeof(self->model_name), "%s", model);
	KVPY_HOLD(self->drv, drv);
	return 0;
}

int pool_check(PoolObject *self)
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
	if (self->views) {
		errno = EBUSY;
		return kvpy_raise("Pool.close: views of its buffers are still alive", NULL);
	}
	if (self->users) {
		errno = EBUSY;
		return kvpy_raise("Pool.close: caches over it are still open", NULL);
	}
	self->p = NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_pool_destroy(p);
	Py_END_ALLOW_THREADS
	KVPY_RELEASE(self->drv);
	if (rc < 0)
		return kvpy_raise("kvs_pool_destroy", NULL);
	Py_RETURN_NONE;
}

static void pool_dealloc(PoolObject *self)
{
	if (self->p)
		kvs_pool_destroy(self->p);
	KVPY_RELEASE(self->drv);
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
	if (rc == 0)
		ivec_writeback(&iv, iv.n);
	ivec_release(&iv);
	if (rc < 0)
		return kvpy_raise("kvs_pool_alloc", self->drv->d);
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
		return kvpy_raise("kvs_pool_free", NULL);
	Py_RETURN_NONE;
}

static PyObject *pool_available(PoolObject *self, PyObject *unused)
{
	(void)unused;
	if (pool_check(self) < 0)
		return NULL;
	return PyLong_FromUnsignedLongLong(kvs_pool_available(self->p));
}

/* reclaim() -> slabs given back: empty slabs the give-back policy releases
 * (kvs_slab_reclaim(3)). */
static PyObject *pool_reclaim(PoolObject *self, PyObject *unused)
{
	int rc;

	(void)unused;
	if (pool_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_slab_reclaim(kvs_pool_slab(self->p));
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_slab_reclaim", self->drv->d);
	return PyLong_FromLong(rc);
}

/* shrink(): give back every empty slab above min_empty
 * (kvs_slab_shrink(3)). */
static PyObject *pool_shrink(PoolObject *self, PyObject *unused)
{
	int rc;

	(void)unused;
	if (pool_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = kvs_slab_shrink(kvs_pool_slab(self->p));
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return kvpy_raise("kvs_slab_shrink", self->drv->d);
	Py_RETURN_NONE;
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
	{"reclaim", (PyCFunction)pool_reclaim, METH_NOARGS,
	 "reclaim() -> slabs the give-back policy released (kvs_slab_reclaim(3))."},
	{"shrink", (PyCFunction)pool_shrink, METH_NOARGS,
	 "shrink(): release every empty slab above min_empty (kvs_slab_shrink(3))."},
	{"kv_view", (PyCFunction)(void (*)(void))kvpy_pool_kv_view, METH_VARARGS | METH_KEYWORDS,
	 "kv_view(layer, which=K, dtype=None) -> a View of one layer's K, V or latent buffer: "
	 "(capacity, heads, width), without a copy."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef pool_getset[] = {
	{"capacity", (getter)pool_get_capacity, NULL, "tokens the pool can hold", NULL},
	{"page_size", (getter)pool_get_page_size, NULL, "tokens per page", NULL},
	{"driver", (getter)pool_get_driver, NULL, "the driver", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PoolType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.Pool",
	.tp_doc = "Pool(driver, model='tiny', page_size=1, max_tokens=0, max_mapped=0, "
		  "slab_granules=0, slab_flags=0, min_empty=-1, max_empty=-1, shrink_quiet=-1, decay_ms=-1): "
		  "kvs_pool_create(3); -1: the library's default.",
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
	int has_events;
	struct kvpy_evq events;	/* with events=True */
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
	static char *kwlist[] = {"pool", "page_size", "policy", "disabled", "slab_aware", "events",
				 NULL};
	PyObject *pool = Py_None;
	unsigned int page_size = 0, slab_aware = 0;
	int policy = KVS_EVICT_LRU, disabled = 0, events = 0;
	kvs_radix_attr_t attr;
	kvs_radix_t *r;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OIipIp", kwlist, &pool, &page_size, &policy,
					 &disabled, &slab_aware, &events))
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
	if (events) {
		if (kvpy_evq_init(&self->events) < 0) {
			PyErr_NoMemory();
			return -1;
		}
		self->has_events = 1;
		attr.event_cb = kvpy_evq_kv_cb;
		attr.event_arg = &self->events;
	}
	Py_BEGIN_ALLOW_THREADS
	r = kvs_radix_create(pool == Py_None ? NULL : ((PoolObject *)pool)->p, &attr);
	Py_END_ALLOW_THREADS
	if (!r) {
		kvpy_raise("kvs_radix_create", NULL);
		if (self->has_events)
			kvpy_evq_destroy(&self->events);
		self->has_events = 0;
		return -1;
	}
	self->r = r;
	if (pool != Py_None) {
		KVPY_HOLD(self->pool, (PoolObject *)pool);
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
	KVPY_RELEASE(self->pool);
	free(self->evicted);
	self->evicted = NULL;
	self->nevicted = self->capevicted = 0;
	if (self->has_events)
		kvpy_evq_destroy(&self->events);
	self->has_events = 0;
	if (rc < 0)
		return kvpy_raise("kvs_radix_destroy", NULL);
	Py_RETURN_NONE;
}

static void radix_dealloc(RadixObject *self)
{
	if (self->r)
		kvs_radix_destroy(self->r);
	KVPY_RELEASE(self->pool);
	free(self->evicted);
	if (self->has_events)
		kvpy_evq_destroy(&self->events);
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
		if (!ivec_scratch(&o, (size_t)k.n)) {
			ivec_release(&k);
			return NULL;
		}
		o.v = o.own;
	}
	Py_BEGIN_ALLOW_THREADS
	got = (lock ? kvs_radix_match_lock : kvs_radix_match)(self->r, extra, k.v, (size_t)k.n,
							      (int32_t *)o.v, &last);
	Py_END_ALLOW_THREADS
	if (got > 0)
		ivec_writeback(&o, got);
	ivec_release(&k);
	ivec_release(&o);
	if (got < 0)
		return kvpy_raise("kvs_radix_match", NULL);
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
		return kvpy_raise("kvs_radix_insert", NULL);
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
		return kvpy_raise(lock ? "kvs_radix_lock" : "kvs_radix_unlock", NULL);
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
		return kvpy_raise("kvs_radix_evict", NULL);
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
		return kvpy_raise("kvs_radix_reset", NULL);
	Py_RETURN_NONE;
}

static PyObject *radix_validate(RadixObject *self, PyObject *unused)
{
	(void)unused;
	if (radix_check(self) < 0)
		return NULL;
	if (kvs_radix_validate(self->r) < 0)
		return kvpy_raise("kvs_radix_validate", NULL);
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

/* take_events() -> [(type, hash, parent_hash, token_ids, medium, extra_key)] */
static PyObject *radix_take_events(RadixObject *self, PyObject *unused)
{
	(void)unused;
	if (radix_check(self) < 0)
		return NULL;
	if (!self->has_events) {
		PyErr_SetString(PyExc_ValueError, "the cache was made without events=True");
		return NULL;
	}
	return kvpy_evq_take(&self->events, 0);
}

static PyMethodDef radix_methods[] = {
	{"take_events", (PyCFunction)radix_take_events, METH_NOARGS,
	 "take_events() -> the KV events queued since the last call, oldest first: "
	 "(type, hash, parent_hash, token_ids or None, medium, extra_key) each."},
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
	.tp_doc = "Radix(pool=None, page_size=0, policy=LRU, disabled=False, slab_aware=0, events=False): "
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
		kvpy_raise("kvs_reqtab_create", drv->d);
		return -1;
	}
	self->t = t;
	KVPY_HOLD(self->drv, drv);
	self->shape[0] = reqs;
	self->shape[1] = ctx;
	self->strides[0] = (Py_ssize_t)ctx * 4;
	self->strides[1] = 4;
	return 0;
}

int reqtab_check(ReqtabObject *self)
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
	KVPY_RELEASE(self->drv);
	if (rc < 0)
		return kvpy_raise("kvs_reqtab_destroy", NULL);
	Py_RETURN_NONE;
}

static void reqtab_dealloc(ReqtabObject *self)
{
	if (self->t)
		kvs_reqtab_destroy(self->t);
	KVPY_RELEASE(self->drv);
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
		return kvpy_raise("kvs_reqtab_alloc", NULL);
	}
	list = PyList_New(n);
	for (i = 0; list && i < n; i++) {
		PyObject *x = PyLong_FromUnsignedLong(slots[i]);

		if (!x)
			Py_CLEAR(list);
		else
			PyList_SET_ITEM(list, i, x);
	}
	if (!list) /* loses nothing: the slots go back */
		for (i = 0; i < n; i++)
			kvs_reqtab_free(self->t, slots[i]);
	PyMem_Free(slots);
	return list;
}

static PyObject *reqtab_free(ReqtabObject *self, PyObject *arg)
{
	unsigned long slot = PyLong_AsUnsignedLong(arg);

	if ((slot == (unsigned long)-1 && PyErr_Occurred()) || reqtab_check(self) < 0)
		return NULL;
	if (kvs_reqtab_free(self->t, (uint32_t)slot) < 0)
		return kvpy_raise("kvs_reqtab_free", NULL);
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
		return kvpy_raise("kvs_reqtab_write", self->drv->d);
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
		return kvpy_raise("kvs_reqtab_sync", self->drv->d);
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
	{"device_view", (PyCFunction)kvpy_reqtab_device_view, METH_NOARGS,
	 "device_view() -> a read-only View of the table the kernels read."},
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
	    PyType_Ready(&HasherType) < 0 || PyType_Ready(&HCacheType) < 0 ||
	    PyType_Ready(&ViewType) < 0 || PyType_Ready(&HiRadixType) < 0)
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
	Py_INCREF(&ViewType);
	Py_INCREF(&HiRadixType);
	if (!KvsError || PyModule_AddObject(m, "Error", KvsError) < 0 ||
	    PyModule_AddObject(m, "Driver", (PyObject *)&DriverType) < 0 ||
	    PyModule_AddObject(m, "Pool", (PyObject *)&PoolType) < 0 ||
	    PyModule_AddObject(m, "Radix", (PyObject *)&RadixType) < 0 ||
	    PyModule_AddObject(m, "Reqtab", (PyObject *)&ReqtabType) < 0 ||
	    PyModule_AddObject(m, "Hasher", (PyObject *)&HasherType) < 0 ||
	    PyModule_AddObject(m, "HCache", (PyObject *)&HCacheType) < 0 ||
	    PyModule_AddObject(m, "View", (PyObject *)&ViewType) < 0 ||
	    PyModule_AddObject(m, "HiRadix", (PyObject *)&HiRadixType) < 0 ||
	    PyModule_AddIntConstant(m, "WRITE_THROUGH", KVS_WRITE_THROUGH) < 0 ||
	    PyModule_AddIntConstant(m, "WRITE_THROUGH_SELECTIVE", KVS_WRITE_THROUGH_SELECTIVE) < 0 ||
	    PyModule_AddIntConstant(m, "WRITE_BACK", KVS_WRITE_BACK) < 0 ||
	    PyModule_AddIntConstant(m, "HIRADIX_DEFER", KVS_HIRADIX_DEFER) < 0 ||
	    PyModule_AddIntConstant(m, "HIRADIX_THREAD", KVS_HIRADIX_THREAD) < 0 ||
	    PyModule_AddIntConstant(m, "HPOOL_LAYER_FIRST", KVS_HPOOL_LAYER_FIRST) < 0 ||
	    PyModule_AddIntConstant(m, "HPOOL_PAGE_FIRST", KVS_HPOOL_PAGE_FIRST) < 0 ||
	    PyModule_AddIntConstant(m, "PREFETCH_BEST_EFFORT", KVS_PREFETCH_BEST_EFFORT) < 0 ||
	    PyModule_AddIntConstant(m, "PREFETCH_WAIT_COMPLETE", KVS_PREFETCH_WAIT_COMPLETE) < 0 ||
	    PyModule_AddIntConstant(m, "PREFETCH_TIMEOUT", KVS_PREFETCH_TIMEOUT) < 0 ||
	    PyModule_AddIntConstant(m, "KV_K", KVS_KV_K) < 0 ||
	    PyModule_AddIntConstant(m, "DRV_F_SYNC_UNMAP", KVS_DRV_F_SYNC_UNMAP) < 0 ||
	    PyModule_AddIntConstant(m, "DRV_F_NO_POPULATE", KVS_DRV_F_NO_POPULATE) < 0 ||
	    PyModule_AddIntConstant(m, "DRV_F_LAZY", KVS_DRV_F_LAZY) < 0 ||
	    PyModule_AddIntConstant(m, "DRV_F_RDMA", KVS_DRV_F_RDMA) < 0 ||
	    PyModule_AddIntConstant(m, "DRV_F_NO_KERNELS", KVS_DRV_F_NO_KERNELS) < 0 ||
	    PyModule_AddIntConstant(m, "SLAB_F_WORKER", KVS_SLAB_F_WORKER) < 0 ||
	    PyModule_AddIntConstant(m, "SLAB_F_STATIC", KVS_SLAB_F_STATIC) < 0 ||
	    PyModule_AddIntConstant(m, "KV_V", KVS_KV_V) < 0 ||
	    PyModule_AddIntConstant(m, "KV_LATENT", KVS_KV_LATENT) < 0 ||
	    PyModule_AddIntConstant(m, "HASH_SHA256_CBOR", KVS_HASH_SHA256_CBOR) < 0 ||
	    PyModule_AddIntConstant(m, "HASH_SHA256_CBOR_64", KVS_HASH_SHA256_CBOR_64) < 0 ||
	    PyModule_AddIntConstant(m, "HASH_XXH3_128", KVS_HASH_XXH3_128) < 0 ||
	    PyModule_AddIntConstant(m, "EVICT_LRU", KVS_EVICT_LRU) < 0 ||
	    PyModule_AddIntConstant(m, "EVICT_LFU", KVS_EVICT_LFU) < 0 ||
	    PyModule_AddIntConstant(m, "EVICT_FIFO", KVS_EVICT_FIFO) < 0 ||
	    PyModule_AddIntConstant(m, "EVICT_PRIORITY", KVS_EVICT_PRIORITY) < 0 ||
	    PyModule_AddIntConstant(m, "KV_STORED", KVS_KV_STORED) < 0 ||
	    PyModule_AddIntConstant(m, "KV_REMOVED", KVS_KV_REMOVED) < 0 ||
	    PyModule_AddIntConstant(m, "KV_ALL_CLEARED", KVS_KV_ALL_CLEARED) < 0 ||
	    PyModule_AddIntConstant(m, "MEDIUM_GPU", KVS_MEDIUM_GPU) < 0 ||
	    PyModule_AddIntConstant(m, "MEDIUM_CPU", KVS_MEDIUM_CPU) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	Py_INCREF(KvsError); /* the module's reference was stolen; keep ours */
	return m;
}
