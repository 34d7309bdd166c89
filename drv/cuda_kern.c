/* SPDX-License-Identifier: MIT */
/*
 * drv/cuda_kern.c - the cuda backend's gather/scatter kernel: a batch of
 * many small copies moved by one kernel launch instead of one DMA per copy.
 *
 * Why.  The copy engines start each copy at a cost: on an H200, 32 KiB
 * device-to-host pages copied one cuMemcpyAsync each move 10.9 GB/s, and
 * one cuMemcpyBatchAsync of them 24.6 GB/s, against 55 GB/s for one large
 * copy.  A kernel whose thread blocks each move one page through the
 * device's mapping of pinned host memory (zero-copy) keeps the PCIe link
 * busy with many requests in flight, as SGLang's and LMCache's transfer
 * kernels do.
 *
 * The code.  drv/kernels/copy.cu, built to PTX by nvcc when the build has
 * it (the PTX kept in the tree otherwise), reaches us as the string
 * kvsi_ptx_copy (generated C) and is loaded with cuModuleLoadData when the
 * driver opens.  Every call it needs is optional (CUDA_OPT_FNS): a driver
 * without them, or one that refuses the module, leaves the kernel off and
 * kvs_drv_caps() without KVS_DRV_CAP_KERNELS; nothing else changes.
 *
 * Policy (kvs_drv_copy_batch(3) documents it): a batch runs as a kernel
 * when the kernel is loaded (not with KVS_DRV_F_NO_KERNELS, which leaves it
 * unloaded), it has at least CUDA_KERN_MIN_N entries averaging at
 * most CUDA_KERN_MAX_MEAN bytes (large copies are the copy engines' job),
 * every host side lies in a pinned block of this driver (kvs_drv_host_alloc
 * memory, allocated device-mapped; its device address comes from
 * cuMemHostGetDevicePointer, kept per block in p->pins), and enough slots
 * of the descriptor ring are free.  Otherwise the caller falls back to
 * cuMemcpyBatchAsync, then to one copy at a time.
 *
 * The ring.  Descriptors (kvs_copy_t, with host sides translated to device
 * addresses) are written into pinned, device-mapped memory that the kernel
 * reads directly: CUDA_KERN_SLOTS slots of CUDA_KERN_SLOT entries, one
 * launch per slot, an event recorded on the copy stream after each.  A
 * slot is reused only once cuEventQuery says its launch is done; a batch
 * that finds too few free slots is not run as a kernel (the driver lock is
 * held here, and it is never held across a wait for the device).  Slots
 * are taken in turn from `next`, so the oldest launches are tried first.
 *
 * Locking.  The ring belongs to drv->lock (kvsi_cuda_kern_batch() is called
 * from cuda_copy_batch(), under it); the pinned blocks have their own
 * mutex, taken after drv->lock, since kvs_drv_host_alloc() and
 * kvs_drv_host_free() call us without it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* Fewer entries than this: the copy engines' own batch is as good. */
#define CUDA_KERN_MIN_N 8
/* Entries larger than this on average: the copy engines are faster. */
#define CUDA_KERN_MAX_MEAN ((uint64_t)256 << 10)
/* Threads per block: each block moves one copy at a time. */
#define CUDA_KERN_THREADS 256
/* The kernel's entry, versioned with its descriptor layout. */
#define CUDA_KERN_NAME "kvslab_copy_batch_v1"

/* drv/kernels/copy_ptx.c, generated from drv/kernels/copy.ptx. */
extern const char kvsi_ptx_copy[];

_Static_assert(sizeof(kvs_copy_t) == 24, "kvs_copy_t is not the kernel's descriptor");

/**
 * kvsi_cuda_kern_open() - load the kernel and set up its ring, if possible.
 * @drv: the driver being opened; its context is current.
 * @p: its private state.
 *
 * Any failure leaves the kernel off (p->kern.fn NULL) with everything
 * given back; the driver opens regardless.
 *
 * Context: cuda_open(), the context bound.
 */
void kvsi_cuda_kern_open(struct kvs_drv *drv, struct cuda_priv *p)
{
	struct cuda_kern *k = &p->kern;
	const struct cuda_fns *cu = &p->cu;
	void *ring = NULL;
	int i;

	(void)drv;
	if (!cu->ModuleLoadData || !cu->ModuleGetFunction || !cu->ModuleUnload ||
	    !cu->LaunchKernel || !cu->MemHostGetDevicePointer)
		return;
	if (cu->ModuleLoadData(&k->mod, kvsi_ptx_copy) != CUDA_SUCCESS) {
		k->mod = NULL;
		return;
	}
	if (cu->ModuleGetFunction(&k->fn, k->mod, CUDA_KERN_NAME) != CUDA_SUCCESS)
		goto out_module;
	if (cu->MemHostAlloc(&ring, CUDA_KERN_SLOTS * CUDA_KERN_SLOT * sizeof(kvs_copy_t),
			     CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) != CUDA_SUCCESS)
		goto out_module;
	if (cu->MemHostGetDevicePointer(&k->ring_dev, ring, 0) != CUDA_SUCCESS)
		goto out_ring;
	for (i = 0; i < CUDA_KERN_SLOTS; i++) {
		if (cu->EventCreate(&k->done[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
			goto out_events;
	}
	k->ring = ring;
	k->next = 0;
	return;

out_events:
	while (i--)
		cu->EventDestroy(k->done[i]);
out_ring:
	cu->MemFreeHost(ring);
out_module:
	cu->ModuleUnload(k->mod);
	memset(k, 0, sizeof(*k));
}

/**
 * kvsi_cuda_kern_close() - give back the kernel's module, ring and events.
 * @p: the driver's private state; the copy stream is idle.
 *
 * Context: cuda_close(), the context bound.
 */
void kvsi_cuda_kern_close(struct cuda_priv *p)
{
	struct cuda_kern *k = &p->kern;
	int i;

	if (k->fn) {
		for (i = 0; i < CUDA_KERN_SLOTS; i++)
			p->cu.EventDestroy(k->done[i]);
		p->cu.MemFreeHost(k->ring);
		p->cu.ModuleUnload(k->mod);
	}
	memset(k, 0, sizeof(*k));
	free(p->pins.v);
	p->pins.v = NULL;
	p->pins.n = p->pins.cap = 0;
}

/* Index of the first pinned block whose start is above @a.  pins.lock. */
static size_t pin_upper(const struct cuda_pins *ps, uintptr_t a)
{
	size_t lo = 0, hi = ps->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ps->v[mid].host <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/**
 * kvsi_cuda_pin_add() - remember a pinned block the kernel may reach.
 * @p: the driver's private state.
 * @host: the block, from cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP.
 * @size: its bytes.
 *
 * Without the kernel, or when the device address cannot be had or the
 * table cannot grow, the block is simply not remembered: batches through
 * it take the copy engines.  Never fails.
 *
 * Context: Any thread, the context bound; takes pins.lock.
 */
void kvsi_cuda_pin_add(struct cuda_priv *p, void *host, size_t size)
{
	struct cuda_pins *ps = &p->pins;
	CUdeviceptr dev;
	size_t i;

	if (!p->kern.fn || p->cu.MemHostGetDevicePointer(&dev, host, 0) != CUDA_SUCCESS)
		return;
	pthread_mutex_lock(&ps->lock);
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? 2 * ps->cap : 16;
		struct cuda_pin *v = realloc(ps->v, cap * sizeof(*v));

		if (!v) {
			pthread_mutex_unlock(&ps->lock);
			return;
		}
		ps->v = v;
		ps->cap = cap;
	}
	i = pin_upper(ps, (uintptr_t)host);
	memmove(&ps->v[i + 1], &ps->v[i], (ps->n - i) * sizeof(*ps->v));
	ps->v[i] = (struct cuda_pin){ (uintptr_t)host, size, dev };
	ps->n++;
	pthread_mutex_unlock(&ps->lock);
}

/* Forget @host before it is freed.  Context: any thread; pins.lock. */
void kvsi_cuda_pin_remove(struct cuda_priv *p, void *host)
{
	struct cuda_pins *ps = &p->pins;
	size_t i;

	pthread_mutex_lock(&ps->lock);
	i = pin_upper(ps, (uintptr_t)host);
	if (i && ps->v[i - 1].host == (uintptr_t)host) {
		memmove(&ps->v[i - 1], &ps->v[i], (ps->n - i) * sizeof(*ps->v));
		ps->n--;
	}
	pthread_mutex_unlock(&ps->lock);
}

/* The device address of host range [h, h + n), or 0 when it is not inside
 * one pinned block.  pins.lock held. */
static CUdeviceptr pin_dev(const struct cuda_pins *ps, uint64_t h, uint64_t n)
{
	size_t i = pin_upper(ps, (uintptr_t)h);
	const struct cuda_pin *b;

	if (!i)
		return 0;
	b = &ps->v[i - 1];
	if (h - b->host >= b->size || n > b->size - (h - b->host))
		return 0;
	return b->dev + (h - b->host);
}

/*
 * Write the descriptors of @c into the ring from slot @first on, host sides
 * translated.  False when a host side is not in a pinned block; the slots
 * are free, so what was written is harmless.
 */
static bool kern_fill(struct cuda_priv *p, int kind, const kvs_copy_t *c, size_t n,
		      unsigned int first)
{
	struct cuda_kern *k = &p->kern;
	bool ok = true;
	size_t i;

	pthread_mutex_lock(&p->pins.lock);
	for (i = 0; i < n && ok; i++) {
		size_t slot = (first + i / CUDA_KERN_SLOT) % CUDA_KERN_SLOTS;
		kvs_copy_t *d = &k->ring[slot * CUDA_KERN_SLOT + i % CUDA_KERN_SLOT];

		*d = c[i];
		if (kind == KVS_COPY_DTOH)
			d->dst = pin_dev(&p->pins, c[i].dst, c[i].bytes);
		else if (kind == KVS_COPY_HTOD)
			d->src = pin_dev(&p->pins, c[i].src, c[i].bytes);
		ok = d->dst && d->src;
	}
	pthread_mutex_unlock(&p->pins.lock);
	return ok;
}

/**
 * kvsi_cuda_kern_batch() - run a batch as the gather/scatter kernel.
 * @drv: the driver.
 * @p: its private state.
 * @kind: KVS_COPY_HTOD, KVS_COPY_DTOH or KVS_COPY_DTOD.
 * @c: the entries, checked by the generic layer.
 * @n: entries, at least 1.
 *
 * Context: cuda_copy_batch(), drv->lock held, the context bound.
 * Return: 1 when the batch was launched; 0 when the policy (file comment)
 * says no, and nothing was submitted; -1 with errno when a launch failed
 * (launches made before it were waited for: nothing of the batch runs any
 * more).
 */
int kvsi_cuda_kern_batch(struct kvs_drv *drv, struct cuda_priv *p, int kind,
			 const kvs_copy_t *c, size_t n)
{
	struct cuda_kern *k = &p->kern;
	size_t slots = (n + CUDA_KERN_SLOT - 1) / CUDA_KERN_SLOT, s, i;
	uint64_t total = 0;
	CUresult r;

	if (!k->fn || n < CUDA_KERN_MIN_N ||
	    slots > CUDA_KERN_SLOTS)
		return 0;
	for (i = 0; i < n; i++)
		total += c[i].bytes;
	if (total / n > CUDA_KERN_MAX_MEAN)
		return 0;
	for (s = 0; s < slots; s++)
		if (p->cu.EventQuery(k->done[(k->next + s) % CUDA_KERN_SLOTS]) != CUDA_SUCCESS)
			return 0;
	if (!kern_fill(p, kind, c, n, k->next))
		return 0;
	for (s = 0; s < slots; s++) {
		unsigned int slot = (k->next + s) % CUDA_KERN_SLOTS;
		CUdeviceptr desc = k->ring_dev + (CUdeviceptr)slot * CUDA_KERN_SLOT * sizeof(kvs_copy_t);
		unsigned long long cnt = s + 1 < slots ? CUDA_KERN_SLOT : n - s * CUDA_KERN_SLOT;
		void *args[] = { &desc, &cnt };

		r = p->cu.LaunchKernel(k->fn, (unsigned int)cnt, 1, 1, CUDA_KERN_THREADS, 1, 1, 0,
				       p->stream, args, NULL);
		if (r == CUDA_SUCCESS)
			r = p->cu.EventRecord(k->done[slot], p->stream);
		if (r != CUDA_SUCCESS) {
			int err;

			(void)kvsi_cuda_fail(drv, p, r, "cuLaunchKernel");
			err = errno;
			(void)p->cu.StreamSynchronize(p->stream);
			k->next = (k->next + s) % CUDA_KERN_SLOTS;
			errno = err;
			return -1;
		}
	}
	k->next = (k->next + slots) % CUDA_KERN_SLOTS;
	return 1;
}
