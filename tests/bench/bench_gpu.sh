#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/bench/bench_gpu.sh - make bench-gpu: the GPU data path on the cuda
# backend, each figure beside what it should approach, in one command:
#  - bench_drv --cuda: the VMM calls through kvslab beside the raw driver's,
#    scattered pages one copy each / one cuMemcpyBatchAsync / the gather
#    kernel, events and stream waits;
#  - bench_reqtab: a decode step of 128 requests, one write per request
#    against one batch a step (host time, driver calls a step);
#  - bench_hostpool: host-pool backups and loads, layer_first and
#    page_first, beside one memcpy of the same bytes;
#  - kvslab-replay: the built-in generator's requests on cuda and on host,
#    static:1 (no driver call on the allocation path), alloc p50 of both.
# On a machine without a GPU the libcuda test double ($1) stands in, and
# every part says so: its figures are mmap and memcpy, not a GPU's.
# Usage: bench_gpu.sh DOUBLE [ROUNDS]; exit 77 when no cuda backend is built.
dbl=$1
rounds=$2

KVSLAB_BENCH_DOUBLE=$dbl tests/bench/bench_drv --cuda $rounds
rc=$?
[ $rc -eq 0 ] || exit $rc

# The real libcuda when the cuda backend opens with it, else the double.
if KVSLAB_DRIVER=cuda tests/bench/bench_reqtab 4 2 >/dev/null 2>&1; then
	echo "== on the real driver"
else
	echo "== on THE LIBCUDA TEST DOUBLE (no GPU): figures are memcpy, not PCIe"
	KVSLAB_LIBCUDA=$dbl
	KVSLAB_CUDA_DOUBLE=$dbl
	export KVSLAB_LIBCUDA KVSLAB_CUDA_DOUBLE
fi
echo
echo "== request table: a decode step of 128 requests (target on an H200: <= 25 us, p99 <= 50 us)"
KVSLAB_DRIVER=cuda tests/bench/bench_reqtab 2000 128 || exit 1
echo
echo "== host pool (target on an H200: page_first 16-token pages >= 45 GB/s; PCIe 55 GB/s)"
KVSLAB_DRIVER=cuda tests/bench/bench_hostpool || exit 1
echo
echo "== replay alloc latency, static:1 (target: cuda within 2x of host)"
for drv in host cuda; do
	printf '%-5s ' $drv
	tools/kvslab-replay -q --driver $drv -m tiny -M 256M -s static:1 --requests 500 --json - 2>/dev/null |
		/usr/bin/python3 -c '
import json, sys
for s in json.load(sys.stdin)["strategies"]:
    print("%-9s alloc p50 %.1f us, p99 %.1f us" %
          (s["name"], s["alloc_p50_ns"] / 1e3, s["alloc_p99_ns"] / 1e3))
' || echo "(replay failed)"
done
exit 0
