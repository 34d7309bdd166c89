/* SPDX-License-Identifier: MIT */
/*
 * python/kvslab/_views.c - zero-copy views of the memory the library lays
 * out for attention kernels: one layer's K, V (or MLA latent) buffer of a
 * pool, and the request table's device copy.
 *
 * A View describes memory it does not own: an address in the driver's
 * address space, a shape, byte strides and an element type.  It speaks the
 * protocols the array libraries read:
 *
 *  - on the host driver, __array_interface__ (numpy.asarray(view): a numpy
 *    array over the same bytes; torch.from_numpy of it a CPU tensor);
 *  - on the cuda driver, __cuda_array_interface__ (CuPy, Numba, and
 *    torch.as_tensor(view, device="cuda"));
 *  - on both, DLPack: __dlpack__() and __dlpack_device__(), so that
 *    torch.from_dlpack(view) gives a tensor on the right device, bfloat16
 *    included (which numpy cannot express).
 *
 * Lifetime.  A View holds a reference to its Pool or Reqtab and counts as
 * one of its exports: close() of the owner fails with EBUSY while a view is
 * alive, so that no tensor outlives the mapping it reads.  A DLPack capsule
 * holds a reference to the View until the consumer's tensor is freed (its
 * deleter takes the GIL to drop it).
 *
 * Unmapped memory.  A pool's view spans its whole reservation (capacity
 * tokens), but only the slabs that hold allocated pages are mapped: a read
 * of a row whose location is not allocated faults, on a GPU as on the host
 * driver (SIGSEGV there).  Index the views by allocated locations only, as
 * attention kernels do.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "_kvslab.h"

/* DLPack's ABI (dlpack.h, version 0.8: the DLManagedTensor that
 * __dlpack__ capsules carry), declared here to need no header. */
enum { DL_CPU = 1, DL_CUDA = 2 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4 };

struct dl_device {
	int32_t device_type;
	int32_t device_id;
};

struct dl_dtype {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
};

struct dl_tensor {
	void *data;
	struct dl_device device;
	int32_t ndim;
	struct dl_dtype dtype;
	int64_t *shape;
	int64_t *strides;	/* in elements */
	uint64_t byte_offset;
};

struct dl_managed {
	struct dl_tensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct dl_managed *self);
};

/* The element types a view can be read as. */
static const struct vtype {
	const char *name;
	const char *typestr;	/* array interface; NULL: none (bfloat16) */
	uint8_t code, bits;
} vtypes[] = {
	{"float16", "<f2", DL_FLOAT, 16},
	{"bfloat16", NULL, DL_BFLOAT, 16},
	{"float32", "<f4", DL_FLOAT, 32},
	{"float64", "<f8", DL_FLOAT, 64},
	{"int8", "|i1", DL_INT, 8},
	{"uint8", "|u1", DL_UINT, 8},
	{"int16", "<i2", DL_INT, 16},
	{"int32", "<i4", DL_INT, 32},
	{"int64", "<i8", DL_INT, 64},
};

#define VIEW_MAXDIM 3

typedef struct {
	PyObject_HEAD
	PyObject *owner;	/* the Pool or Reqtab */
	Py_ssize_t *exports;	/* the owner's count of live views */
	uint64_t ptr;
	int ndim;
	Py_ssize_t shape[VIEW_MAXDIM], strides[VIEW_MAXDIM];	/* strides in bytes */
	const struct vtype *vt;
	int device_type, device_id;
	int readonly;
} ViewObject;

static void view_dealloc(ViewObject *self)
{
	if (self->exports)
		(*self->exports)--;
	Py_CLEAR(self->owner);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *tuple_of(const Py_ssize_t *v, int n)
{
	PyObject *t = PyTuple_New(n);
	int i;

	for (i = 0; t && i < n; i++) {
		PyObject *x = PyLong_FromSsize_t(v[i]);

		if (!x) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SET_ITEM(t, i, x);
	}
	return t;
}

/* The dict of the array interface protocols (version 3). */
static PyObject *interface_dict(ViewObject *self, int cuda)
{
	if (!self->vt->typestr) {
		PyErr_Format(PyExc_TypeError, "%s has no array-interface type: use DLPack "
			     "(torch.from_dlpack(view))", self->vt->name);
		return NULL;
	}
	(void)cuda; /* the same keys; no "stream": nothing to order */
	return Py_BuildValue("{sNsssNsNsi}", "shape",
			     tuple_of(self->shape, self->ndim), "typestr", self->vt->typestr,
			     "data", Py_BuildValue("(KO)", (unsigned long long)self->ptr,
						   self->readonly ? Py_True : Py_False),
			     "strides", tuple_of(self->strides, self->ndim), "version", 3);
}

static PyObject *view_get_array_interface(ViewObject *self, void *c)
{
	(void)c;
	if (self->device_type != DL_CPU) {
		PyErr_SetString(PyExc_AttributeError,
				"__array_interface__: the view is in device memory "
				"(use __cuda_array_interface__ or DLPack)");
		return NULL;
	}
	return interface_dict(self, 0);
}

static PyObject *view_get_cuda_interface(ViewObject *self, void *c)
{
	(void)c;
	if (self->device_type != DL_CUDA) {
		PyErr_SetString(PyExc_AttributeError,
				"__cuda_array_interface__: the view is in host memory (host driver)");
		return NULL;
	}
	return interface_dict(self, 1);
}

static PyObject *view_get_ptr(ViewObject *self, void *c)
{
	(void)c;
	return PyLong_FromUnsignedLongLong(self->ptr);
}

static PyObject *view_get_shape(ViewObject *self, void *c)
{
	(void)c;
	return tuple_of(self->shape, self->ndim);
}

static PyObject *view_get_strides(ViewObject *self, void *c)
{
	(void)c;
	return tuple_of(self->strides, self->ndim);
}

static PyObject *view_get_dtype(ViewObject *self, void *c)
{
	(void)c;
	return PyUnicode_FromString(self->vt->name);
}

static PyObject *view_get_device(ViewObject *self, void *c)
{
	(void)c;
	if (self->device_type == DL_CPU)
		return PyUnicode_FromString("cpu");
	return PyUnicode_FromFormat("cuda:%d", self->device_id);
}

/* The DLPack capsule's context: the managed tensor and what it points to. */
struct dl_ctx {
	struct dl_managed m;
	int64_t shape[VIEW_MAXDIM], strides[VIEW_MAXDIM];
	PyObject *view;
};

static void dl_deleter(struct dl_managed *m)
{
	struct dl_ctx *x = m->manager_ctx;
	PyGILState_STATE g = PyGILState_Ensure();

	Py_XDECREF(x->view);
	PyGILState_Release(g);
	free(x);
}

/* The capsule's destructor: a capsule no consumer took still owns it. */
static void dl_capsule_destructor(PyObject *cap)
{
	struct dl_managed *m;

	if (!PyCapsule_IsValid(cap, "dltensor"))
		return; /* renamed "used_dltensor": the consumer owns it */
	m = PyCapsule_GetPointer(cap, "dltensor");
	if (m && m->deleter)
		m->deleter(m);
}

/* __dlpack__(stream=None, ...): a DLPack capsule of the view.  The memory
 * has no pending work of the library's (it is the engine's own): nothing is
 * ordered on the consumer's stream. */
static PyObject *view_dlpack(ViewObject *self, PyObject *args, PyObject *kw)
{
	struct dl_ctx *x;
	PyObject *cap;
	int i, es = self->vt->bits / 8;

	(void)args;
	(void)kw;
	x = calloc(1, sizeof(*x));
	if (!x)
		return PyErr_NoMemory();
	for (i = 0; i < self->ndim; i++) {
		x->shape[i] = self->shape[i];
		x->strides[i] = self->strides[i] / es;
	}
	x->m.dl_tensor.data = (void *)(uintptr_t)self->ptr;
	x->m.dl_tensor.device.device_type = self->device_type;
	x->m.dl_tensor.device.device_id = self->device_id;
	x->m.dl_tensor.ndim = self->ndim;
	x->m.dl_tensor.dtype.code = self->vt->code;
	x->m.dl_tensor.dtype.bits = self->vt->bits;
	x->m.dl_tensor.dtype.lanes = 1;
	x->m.dl_tensor.shape = x->shape;
	x->m.dl_tensor.strides = x->strides;
	x->m.manager_ctx = x;
	x->m.deleter = dl_deleter;
	x->view = (PyObject *)self;
	Py_INCREF(self);
	cap = PyCapsule_New(&x->m, "dltensor", dl_capsule_destructor);
	if (!cap) {
		Py_DECREF(self);
		free(x);
	}
	return cap;
}

static PyObject *view_dlpack_device(ViewObject *self, PyObject *unused)
{
	(void)unused;
	return Py_BuildValue("(ii)", self->device_type, self->device_id);
}

static PyMethodDef view_methods[] = {
	{"__dlpack__", (PyCFunction)(void (*)(void))view_dlpack, METH_VARARGS | METH_KEYWORDS,
	 "A DLPack capsule of the view (the stream argument is accepted and not needed)."},
	{"__dlpack_device__", (PyCFunction)view_dlpack_device, METH_NOARGS,
	 "(device type, device id): (1, 0) for host memory, (2, ordinal) for CUDA."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef view_getset[] = {
	{"__array_interface__", (getter)view_get_array_interface, NULL,
	 "numpy's array interface (host driver only)", NULL},
	{"__cuda_array_interface__", (getter)view_get_cuda_interface, NULL,
	 "the CUDA array interface (cuda driver only)", NULL},
	{"ptr", (getter)view_get_ptr, NULL, "the address of element 0", NULL},
	{"shape", (getter)view_get_shape, NULL, "the shape", NULL},
	{"strides", (getter)view_get_strides, NULL, "strides in bytes", NULL},
	{"dtype", (getter)view_get_dtype, NULL, "the element type's name", NULL},
	{"device", (getter)view_get_device, NULL, "'cpu' or 'cuda:N'", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ViewType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvslab._kvslab.View",
	.tp_doc = "A zero-copy view of a pool's layer buffer or the request table "
		  "(Pool.kv_view(), Reqtab.device_view()).",
	.tp_basicsize = sizeof(ViewObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)view_dealloc,
	.tp_methods = view_methods,
	.tp_getset = view_getset,
};

/* The element type @name, or the default of @size bytes (1: uint8,
 * 2: float16, 4: float32, 8: float64), checked against @size. */
static const struct vtype *vtype_of(const char *name, int size)
{
	static const char *defaults[9] = {[1] = "uint8", [2] = "float16", [4] = "float32",
					  [8] = "float64"};
	size_t i;

	if (!name && (size < 1 || size > 8 || !defaults[size])) {
		PyErr_Format(PyExc_ValueError, "no default dtype of %d bytes: pass dtype=", size);
		return NULL;
	}
	if (!name)
		name = defaults[size];
	for (i = 0; i < sizeof(vtypes) / sizeof(vtypes[0]); i++) {
		if (strcmp(name, vtypes[i].name) != 0)
			continue;
		if (vtypes[i].bits / 8 != size) {
			PyErr_Format(PyExc_ValueError, "dtype %s is %d bytes; the elements are %d bytes",
				     name, vtypes[i].bits / 8, size);
			return NULL;
		}
		return &vtypes[i];
	}
	PyErr_Format(PyExc_ValueError, "unknown dtype %s", name);
	return NULL;
}

static ViewObject *view_new(PyObject *owner, Py_ssize_t *exports, DriverObject *drv)
{
	ViewObject *v = PyObject_New(ViewObject, &ViewType);

	if (!v)
		return NULL;
	v->owner = owner;
	Py_INCREF(owner);
	v->exports = exports;
	(*exports)++;
	v->device_type = strcmp(kvs_drv_name(drv->d), "cuda") == 0 ? DL_CUDA : DL_CPU;
	v->device_id = v->device_type == DL_CUDA ? drv->device : 0;
	v->readonly = 0;
	v->ndim = 0;
	v->vt = NULL;
	return v;
}

/* Pool.kv_view(layer, which=0, dtype=None) */
PyObject *kvpy_pool_kv_view(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"layer", "which", "dtype", NULL};
	unsigned int layer;
	int which = KVS_KV_K;
	const char *dtype = NULL;
	const kvs_model_t *m = &self->model;
	const struct vtype *vt;
	kvs_devptr_t ptr;
	size_t stride, width;
	uint32_t heads;
	ViewObject *v;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "I|iz", kwlist, &layer, &which, &dtype))
		return NULL;
	if (pool_check(self) < 0)
		return NULL;
	if (kvs_pool_buffer(self->p, layer, which, &ptr, &stride) < 0)
		return kvpy_raise("kvs_pool_buffer", NULL);
	vt = vtype_of(dtype, (int)m->dtype_size);
	if (!vt)
		return NULL;
	if (m->attn == KVS_ATTN_MLA) {
		heads = 1;
		width = m->kv_lora_rank + m->qk_rope_head_dim;
	} else {
		heads = kvs_model_kv_heads_per_rank(m);
		width = m->head_dim;
	}
	if (!heads || (size_t)heads * width * m->dtype_size != stride) {
		errno = EINVAL;
		return kvpy_raise("kv_view: the buffer's token stride is not heads x width x dtype",
				  NULL);
	}
	v = view_new((PyObject *)self, &self->views, self->drv);
	if (!v)
		return NULL;
	v->ptr = ptr;
	v->vt = vt;
	v->ndim = 3;
	v->shape[0] = (Py_ssize_t)kvs_pool_capacity(self->p);
	v->shape[1] = heads;
	v->shape[2] = (Py_ssize_t)width;
	v->strides[0] = (Py_ssize_t)stride;
	v->strides[1] = (Py_ssize_t)(width * m->dtype_size);
	v->strides[2] = (Py_ssize_t)m->dtype_size;
	return (PyObject *)v;
}

/* Reqtab.device_view(): the table the kernels read, read-only. */
PyObject *kvpy_reqtab_device_view(ReqtabObject *self, PyObject *unused)
{
	kvs_devptr_t ptr;
	size_t row;
	ViewObject *v;

	(void)unused;
	if (reqtab_check(self) < 0)
		return NULL;
	if (kvs_reqtab_table(self->t, &ptr, &row) < 0)
		return kvpy_raise("kvs_reqtab_table", NULL);
	v = view_new((PyObject *)self, &self->exports, self->drv);
	if (!v)
		return NULL;
	v->ptr = ptr;
	v->vt = vtype_of("int32", 4);
	v->ndim = 2;
	v->readonly = 1;
	v->shape[0] = (Py_ssize_t)kvs_reqtab_max_reqs(self->t);
	v->shape[1] = (Py_ssize_t)kvs_reqtab_max_context(self->t);
	v->strides[0] = (Py_ssize_t)row;
	v->strides[1] = 4;
	return (PyObject *)v;
}
