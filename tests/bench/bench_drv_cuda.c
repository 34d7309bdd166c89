/* SPDX-License-Identifier: MIT */
/*
 * tests/bench/bench_drv_cuda.c - bench_drv --cuda: the cuda backend's costs
 * side by side with the raw driver calls they stand for, in one run, so a
 * machine with a GPU measures issue 23's table with one command
 * (make bench-gpu).
 *
 * The raw calls go to the same libcuda kvslab loaded ($KVSLAB_LIBCUDA or
 * libcuda.so.1), in the same primary context, on memory and a stream of
 * their own: cuMemCreate/Release, cuMemMap/SetAccess/Unmap of one
 * granule; scattered pages of 32 KiB and 2 KiB between device memory and
 * pinned host memory, one cuMemcpyAsync each (loop), one cuMemcpyBatchAsync,
 * and kvslab's gather/scatter kernel (kvslab only: it is kvslab's);
 * cuEventRecord + cuEventQuery and cuStreamWaitEvent.  Where no GPU is
 * found the libcuda test double stands in (make bench-gpu passes it as
 * $KVSLAB_BENCH_DOUBLE) and the output says so: its figures are the
 * double's mmap and memcpy, not a GPU's.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvslab.h>

#include "benchutil.h"

int bench_drv_cuda(int rounds);

/* The raw calls, by their ABI names (as drv/cuda.c loads them). */
static struct {
	CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			      unsigned long long);
	CUresult (*MemRelease)(CUmemGenericAllocationHandle);
	CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
				      unsigned long long);
	CUresult (*MemAddressFree)(CUdeviceptr, size_t);
	CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			   unsigned long long);
	CUresult (*MemUnmap)(CUdeviceptr, size_t);
	CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*MemHostAlloc)(void **, size_t, unsigned int);
	CUresult (*MemFreeHost)(void *);
	CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*StreamCreate)(CUstream *, unsigned int);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*StreamSynchronize)(CUstream);
	CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned int);
	CUresult (*EventCreate)(CUevent *, unsigned int);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*EventQuery)(CUevent);
	CUresult (*EventDestroy)(CUevent);
	CUresult (*MemcpyBatchAsync)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t,
				     CUmemcpyAttributes *, size_t *, size_t, CUstream);
} cu;

static int load(void *lib)
{
#define L(f, sym)                                                  \
	do {                                                       \
		*(void **)&cu.f = dlsym(lib, sym);                 \
		if (!cu.f) {                                       \
			fprintf(stderr, "no %s\n", sym);           \
			return -1;                                 \
		}                                                  \
	} while (0)
	L(MemCreate, "cuMemCreate");
	L(MemRelease, "cuMemRelease");
	L(MemAddressReserve, "cuMemAddressReserve");
	L(MemAddressFree, "cuMemAddressFree");
	L(MemMap, "cuMemMap");
	L(MemUnmap, "cuMemUnmap");
	L(MemSetAccess, "cuMemSetAccess");
	L(MemHostAlloc, "cuMemHostAlloc");
	L(MemFreeHost, "cuMemFreeHost");
	L(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	L(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	L(StreamCreate, "cuStreamCreate");
	L(StreamDestroy, "cuStreamDestroy_v2");
	L(StreamSynchronize, "cuStreamSynchronize");
	L(StreamWaitEvent, "cuStreamWaitEvent");
	L(EventCreate, "cuEventCreate");
	L(EventRecord, "cuEventRecord");
	L(EventQuery, "cuEventQuery");
	L(EventDestroy, "cuEventDestroy_v2");
#undef L
	*(void **)&cu.MemcpyBatchAsync = dlsym(lib, "cuMemcpyBatchAsync_v2");
	return 0;
}

#define CK(x)                                                                   \
	do {                                                                    \
		if ((x) != 0) {                                                 \
			fprintf(stderr, "bench_drv --cuda: %s failed (line %d)\n", #x, \
				__LINE__);                                      \
			exit(1);                                                \
		}                                                               \
	} while (0)

static double med_us(uint64_t *v, int n)
{
	return (double)bench_quantile(v, (size_t)n, 0.5) / 1e3;
}

static void row(const char *what, double raw, double kvs)
{
	if (raw > 0)
		printf("  %-44s %10.2f %10.2f %+9.1f%%\n", what, raw, kvs, (kvs / raw - 1) * 100);
	else
		printf("  %-44s %10s %10.2f\n", what, "-", kvs);
}

/* The VMM calls, one granule, each timed alone. */
static void vmm(kvs_drv_t *d, int rounds)
{
	size_t g = kvs_drv_granularity(d);
	uint64_t *t[10];
	CUmemAllocationProp prop;
	CUmemAccessDesc rw;
	CUdeviceptr va;
	kvs_devptr_t base;
	int i, r;

	for (i = 0; i < 10; i++)
		t[i] = calloc((size_t)rounds, sizeof(uint64_t));
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	memset(&rw, 0, sizeof(rw));
	rw.location = prop.location;
	rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CK(cu.MemAddressReserve(&va, g, g, 0, 0));
	CK(kvs_drv_reserve(d, g, &base));
	for (r = 0; r < rounds; r++) {
		CUmemGenericAllocationHandle h;
		kvs_chunk_t *c;
		uint64_t t0 = bench_ns();

		CK(cu.MemCreate(&h, g, &prop, 0));
		t[0][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(cu.MemMap(va, g, 0, h, 0));
		t[1][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(cu.MemSetAccess(va, g, &rw, 1));
		t[2][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(cu.MemUnmap(va, g));
		t[3][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(cu.MemRelease(h));
		t[4][r] = bench_ns() - t0;

		t0 = bench_ns();
		CK(kvs_drv_chunk_create(d, g, &c));
		t[5][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(kvs_drv_map(d, base, c));
		t[6][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(kvs_drv_set_access(d, base, g, KVS_ACCESS_RW));
		t[7][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(kvs_drv_unmap(d, base, g));
		t[8][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(kvs_drv_chunk_release(d, c));
		t[9][r] = bench_ns() - t0;
	}
	printf("\nVMM calls, one %zu KiB granule (median us)     raw driver     kvslab  overhead\n",
	       g >> 10);
	row("create (cuMemCreate)", med_us(t[0], rounds), med_us(t[5], rounds));
	row("map (cuMemMap)", med_us(t[1], rounds), med_us(t[6], rounds));
	row("set_access (cuMemSetAccess)", med_us(t[2], rounds), med_us(t[7], rounds));
	row("unmap (cuMemUnmap; no copy since the last)", med_us(t[3], rounds), med_us(t[8], rounds));
	row("release (cuMemRelease)", med_us(t[4], rounds), med_us(t[9], rounds));
	CK(cu.MemAddressFree(va, g));
	CK(kvs_drv_unreserve(d, base));
	for (i = 0; i < 10; i++)
		free(t[i]);
}

/* Device memory of @bytes in @d, mapped RW; the chunk is released (the
 * mapping keeps it) and goes with the driver. */
static kvs_devptr_t dev_region(kvs_drv_t *d, size_t bytes)
{
	size_t g = kvs_drv_granularity(d), sz = (bytes + g - 1) / g * g;
	kvs_devptr_t a;
	kvs_chunk_t *c;

	CK(kvs_drv_reserve(d, sz, &a));
	CK(kvs_drv_chunk_create(d, sz, &c));
	CK(kvs_drv_map(d, a, c));
	CK(kvs_drv_set_access(d, a, sz, KVS_ACCESS_RW));
	CK(kvs_drv_chunk_release(d, c));
	return a;
}

/*
 * @pages pages of @page bytes, device pages at a stride of two pages,
 * host pages packed, device to host (backup) and host to device (load):
 * one copy each (raw and kvslab), one batch (raw cuMemcpyBatchAsync and
 * kvslab's on a driver without kernels), kvslab's kernel.
 */
static void copies(kvs_drv_t *d, kvs_drv_t *nok, CUstream s, size_t page, size_t pages, int rounds)
{
	size_t bytes = page * pages, i;
	kvs_devptr_t a = dev_region(d, 2 * bytes), an = dev_region(nok, 2 * bytes);
	kvs_copy_t *cp = calloc(pages, sizeof(*cp));
	CUdeviceptr *dd = calloc(pages, sizeof(*dd)), *ss = calloc(pages, sizeof(*ss));
	size_t *sz = calloc(pages, sizeof(*sz)), idx = 0;
	uint64_t *t = calloc((size_t)rounds, sizeof(*t));
	CUmemcpyAttributes attr;
	void *hraw, *hk, *hn;
	double us[2][5];
	int kind, r, m;

	CK(cu.MemHostAlloc(&hraw, bytes, CU_MEMHOSTALLOC_PORTABLE));
	CK(kvs_drv_host_alloc(d, bytes, &hk));
	CK(kvs_drv_host_alloc(nok, bytes, &hn));
	memset(&attr, 0, sizeof(attr));
	attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	for (kind = 0; kind < 2; kind++) {
		int dtoh = kind == 0;

		for (m = 0; m < 5; m++) {
			for (r = 0; r < rounds; r++) {
				kvs_drv_t *dm = m == 3 ? nok : d;
				kvs_devptr_t dev = m == 3 ? an : a;
				char *host = m == 3 ? hn : m >= 2 ? hk : hraw;
				uint64_t t0;

				for (i = 0; i < pages; i++) {
					uint64_t dv = dev + 2 * i * page, hv = (uintptr_t)host + i * page;

					cp[i].dst = dtoh ? hv : dv;
					cp[i].src = dtoh ? dv : hv;
					cp[i].bytes = page;
					dd[i] = cp[i].dst;
					ss[i] = cp[i].src;
					sz[i] = page;
				}
				t0 = bench_ns();
				switch (m) {
				case 0:	/* raw, one call each */
					for (i = 0; i < pages; i++)
						CK(dtoh ? cu.MemcpyDtoHAsync((void *)(uintptr_t)cp[i].dst,
									     cp[i].src, page, s)
							: cu.MemcpyHtoDAsync(cp[i].dst,
									     (void *)(uintptr_t)cp[i].src,
									     page, s));
					CK(cu.StreamSynchronize(s));
					break;
				case 1:	/* raw batch */
					if (!cu.MemcpyBatchAsync)
						break;
					CK(cu.MemcpyBatchAsync(dd, ss, sz, pages, &attr, &idx, 1, s));
					CK(cu.StreamSynchronize(s));
					break;
				case 2:	/* kvslab, one call each */
					for (i = 0; i < pages; i++)
						CK(dtoh ? kvs_drv_copy_dtoh(dm, (void *)(uintptr_t)cp[i].dst,
									    cp[i].src, page, NULL)
							: kvs_drv_copy_htod(dm, cp[i].dst,
									    (void *)(uintptr_t)cp[i].src,
									    page, NULL));
					CK(kvs_drv_synchronize(dm));
					break;
				default: /* 3: kvslab batch, copy engines; 4: kernel */
					if (m == 4 && !(kvs_drv_caps(d) & KVS_DRV_CAP_KERNELS))
						break;
					CK(kvs_drv_copy_batch(dm, dtoh ? KVS_COPY_DTOH : KVS_COPY_HTOD,
							      cp, pages, NULL));
					CK(kvs_drv_synchronize(dm));
					break;
				}
				t[r] = bench_ns() - t0;
			}
			us[kind][m] = med_us(t, rounds);
			if ((m == 1 && !cu.MemcpyBatchAsync) ||
			    (m == 4 && !(kvs_drv_caps(d) & KVS_DRV_CAP_KERNELS)))
				us[kind][m] = 0;
		}
	}
	printf("\n%zu scattered pages of %zu KiB (%zu KiB), median us (GB/s)"
	       "       raw driver     kvslab  overhead\n", pages, page >> 10, bytes >> 10);
	for (kind = 0; kind < 2; kind++) {
		const char *dir = kind == 0 ? "device->host" : "host->device";
		char what[96];

		snprintf(what, sizeof(what), "%s, one copy each (%.1f GB/s kvslab)", dir,
			 bytes / us[kind][2] / 1e3);
		row(what, us[kind][0], us[kind][2]);
		snprintf(what, sizeof(what), "%s, one cuMemcpyBatchAsync (%.1f GB/s)", dir,
			 us[kind][3] > 0 ? bytes / us[kind][3] / 1e3 : 0.0);
		row(what, us[kind][1], us[kind][3]);
		snprintf(what, sizeof(what), "%s, kvslab kernel (%.1f GB/s)", dir,
			 us[kind][4] > 0 ? bytes / us[kind][4] / 1e3 : 0.0);
		if (us[kind][4] > 0)
			row(what, 0, us[kind][4]);
		else
			printf("  %-44s (no KVS_DRV_CAP_KERNELS)\n", what);
	}
	CK(cu.MemFreeHost(hraw));
	CK(kvs_drv_host_free(d, hk));
	CK(kvs_drv_host_free(nok, hn));
	free(cp);
	free(dd);
	free(ss);
	free(sz);
	free(t);
}

/* Event record + query, and a stream wait, raw and through kvslab. */
static void events(kvs_drv_t *d, CUstream s, int rounds)
{
	uint64_t *t[4];
	kvs_event_t *ev;
	CUevent e;
	int i, r;

	for (i = 0; i < 4; i++)
		t[i] = calloc((size_t)rounds, sizeof(uint64_t));
	CK(cu.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
	CK(kvs_event_create(d, &ev));
	for (r = 0; r < rounds; r++) {
		uint64_t t0 = bench_ns();

		CK(cu.EventRecord(e, s));
		(void)cu.EventQuery(e);
		t[0][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(cu.StreamWaitEvent(s, e, 0));
		t[1][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(kvs_event_record(ev, (kvs_stream_t)(uintptr_t)s));
		(void)kvs_event_query(ev);
		t[2][r] = bench_ns() - t0;
		t0 = bench_ns();
		CK(kvs_drv_stream_wait(d, ev));
		t[3][r] = bench_ns() - t0;
	}
	printf("\nEvents (median us)                                raw driver     kvslab  overhead\n");
	row("record on a stream + query", med_us(t[0], rounds), med_us(t[2], rounds));
	row("copy queue waits for it (cuStreamWaitEvent)", med_us(t[1], rounds), med_us(t[3], rounds));
	CK(cu.StreamSynchronize(s));
	CK(kvs_drv_synchronize(d));
	CK(cu.EventDestroy(e));
	CK(kvs_event_destroy(ev));
	for (i = 0; i < 4; i++)
		free(t[i]);
}

int bench_drv_cuda(int rounds)
{
	const char *dbl = getenv("KVSLAB_BENCH_DOUBLE"), *lib;
	kvs_drv_attr_t attr;
	kvs_drv_t *d, *nok;
	int is_double;
	CUstream s;
	void *h;

	kvs_drv_attr_init(&attr);
	d = kvs_drv_open("cuda", &attr);
	if (!d && dbl && *dbl) {
		printf("bench_drv --cuda: no GPU here (%s): measuring the libcuda test double\n",
		       kvs_drv_open_error());
		setenv("KVSLAB_LIBCUDA", dbl, 1);
		d = kvs_drv_open("cuda", &attr);
	}
	if (!d) {
		printf("bench_drv --cuda: cuda backend unavailable: %s\n", kvs_drv_open_error());
		return 77;
	}
	lib = getenv("KVSLAB_LIBCUDA");
	if (!lib || !*lib)
		lib = "libcuda.so.1";
	/* The library kvslab loaded: the same instance, the same context. */
	h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
	if (!h || load(h) < 0) {
		fprintf(stderr, "bench_drv --cuda: cannot reach %s\n", lib);
		return 1;
	}
	is_double = dlsym(h, "kvsdbl_calls") != NULL;
	attr.flags = KVS_DRV_F_NO_KERNELS;
	nok = kvs_drv_open("cuda", &attr);
	if (!nok)
		return 1;
	CK(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
	printf("bench_drv --cuda: %s (%s), caps 0x%x, %d rounds\n", lib,
	       is_double ? "THE LIBCUDA TEST DOUBLE, no GPU: its costs are mmap and memcpy, "
			   "not a GPU's; run make bench-gpu on a GPU machine"
			 : "the real driver",
	       kvs_drv_caps(d), rounds);
	vmm(d, rounds);
	copies(d, nok, s, 32 << 10, 256, rounds > 50 ? 50 : rounds);
	copies(d, nok, s, 2 << 10, 1024, rounds > 50 ? 50 : rounds);
	events(d, s, rounds);
	CK(cu.StreamDestroy(s));
	CK(kvs_drv_close(nok));
	CK(kvs_drv_close(d));
	dlclose(h);
	return 0;
}
