/* SPDX-License-Identifier: MIT */
/*
 * python/kvslab/_kvslab.h - what the C extension's files share: the error
 * type and its raiser, int32 vectors from Python objects, the stats dicts,
 * and the Driver and Pool objects the other types hang on.
 *
 * The extension's files: _kvslab.c (module, Driver, Pool, Radix, Reqtab),
 * _hash.c (Hasher, HCache), _events.c (the KV event queues of Radix and
 * HCache), _views.c (zero-copy views of the pool's buffers and the request
 * table: numpy, DLPack, __cuda_array_interface__), _hiradix.c (HiRadix).
 */
#ifndef KVSLAB_PY_KVSLAB_H
#define KVSLAB_PY_KVSLAB_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>

#include <kvslab.h>

extern PyObject *KvsError;

/* Raise kvslab.Error(errno, "what: strerror[: detail]"); returns NULL. */
PyObject *kvpy_raise(const char *what, kvs_drv_t *drv);

/*
 * An int32 vector from a Python object: a C-contiguous buffer of 4-byte
 * integers (no copy), a buffer of 8-byte ones (converted, range-checked;
 * written back after the call by ivec_writeback() when writable), or any
 * sequence of ints (converted).  release() after.
 */
struct ivec {
	Py_buffer view;
	int has_view;
	int32_t *own;
	const int32_t *v;
	Py_ssize_t n;
	int wide;		/* an int64 buffer: v is an int32 copy */
	size_t owncap;		/* entries of own when it came from ivec_scratch() */
};

void ivec_release(struct ivec *iv);
/* A scratch vector of at least @n entries as iv->own (kept warm between
 * calls), or NULL with MemoryError set; ivec_release() gives it back. */
int32_t *ivec_scratch(struct ivec *iv, size_t n);
int ivec_get(PyObject *o, struct ivec *iv, int writable);
/* Write an int64 buffer's first @n entries back from the int32 copy (a
 * writable int64 buffer ivec_get() took); nothing for an int32 one. */
void ivec_writeback(struct ivec *iv, Py_ssize_t n);

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

typedef struct {
	PyObject_HEAD
	kvs_drv_t *d;
	int device;		/* cuda: the ordinal it was opened on */
	Py_ssize_t users;	/* Pools and Reqtabs over it: close() waits for none */
} DriverObject;

typedef struct {
	PyObject_HEAD
	kvs_pool_t *p;
	DriverObject *drv;
	kvs_model_t model;
	char model_name[64];	/* the preset's name: a store's namespace */
	Py_ssize_t views;	/* live Views of its buffers: close() waits for none */
	Py_ssize_t users;	/* caches over it (Radix, HCache, HiRadix), likewise */
} PoolObject;

/*
 * A dependent object's strong reference to the Driver or Pool it hangs on,
 * counted in the owner's users: the owner's close() refuses (EBUSY) while
 * one is open, so that nothing is destroyed under a live handle.  RELEASE
 * at the dependent's close or dealloc.
 */
#define KVPY_HOLD(field, obj)                                                  \
	do {                                                                   \
		Py_INCREF(obj);                                                \
		(obj)->users++;                                                \
		(field) = (obj);                                               \
	} while (0)
#define KVPY_RELEASE(field)                                                    \
	do {                                                                   \
		if (field) {                                                   \
			(field)->users--;                                      \
			Py_CLEAR(field);                                       \
		}                                                              \
	} while (0)

/*
 * The request table: its host mirror is the object's read-only buffer
 * (exports counts the buffers and Views alive; close() refuses while any).
 */
typedef struct {
	PyObject_HEAD
	kvs_reqtab_t *t;
	DriverObject *drv;
	Py_ssize_t shape[2], strides[2];
	Py_ssize_t exports;
} ReqtabObject;


extern PyTypeObject DriverType, PoolType, HasherType, HCacheType, ViewType, HiRadixType;

int driver_check(DriverObject *self);
int pool_check(PoolObject *self);
int reqtab_check(ReqtabObject *self);

/* _views.c */
PyObject *kvpy_pool_kv_view(PoolObject *self, PyObject *args, PyObject *kw);
PyObject *kvpy_reqtab_device_view(ReqtabObject *self, PyObject *unused);

/* A KV event queue (_events.c): filled by the callbacks with the GIL
 * released, emptied by take_events() with it held. */
struct kvpy_evq {
	pthread_mutex_t mu;
	unsigned char *buf;
	size_t len, cap;
	uint64_t lost;		/* events dropped for want of memory */
};

int kvpy_evq_init(struct kvpy_evq *q);
void kvpy_evq_destroy(struct kvpy_evq *q);
void kvpy_evq_kv_cb(void *arg, const kvs_kv_event_t *ev);
void kvpy_evq_hcache_cb(void *arg, const kvs_hcache_event_t *ev);
/* The queued events as a list of tuples (radix form, or hcache form with
 * @hcache), the queue emptied; NULL with kvslab.Error(ENOMEM) when some
 * were lost. */
PyObject *kvpy_evq_take(struct kvpy_evq *q, int hcache);

#endif /* KVSLAB_PY_KVSLAB_H */
