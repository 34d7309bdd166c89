#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tests/bench/peer_vllm_blockpool.py - vLLM's own BlockPool (vllm/v1/core/
block_pool.py and kv_cache_utils.py, loaded from a vLLM source tree, not
shipped here) on bench_hashcache's workload, so that the two print figures
of the same work:

 - lookup: get_cached_block() of a 64-block request's hashes, then touch()
   of the hit blocks (every one on the free queue, refcount 0 -> 1), and
   free: free_blocks() of them, last first;
 - match:  get_cached_block() of the same hashes only;
 - evict:  get_new_blocks(64) with every block but the null block cached on
   the free queue, so that each block evicts the queue's head;
   cache:  cache_full_blocks() of them under fresh 32-byte hashes;
   free:   free_blocks(), last first, back to the queue's tail.

Each point is the median over the repetitions of the ns per block of one
repetition (at least 256k blocks, or all N), as bench_hashcache counts them.
The modules vLLM's two files import (its logger, envs, events, request,
metrics) are replaced by small stand-ins defined here; no event is queued
(enable_kv_cache_events=False, as bench_hashcache sets no callback).

Usage: peer_vllm_blockpool.py VLLM_SRC [max_blocks [reps [points]]]
  VLLM_SRC: a directory holding vllm/v1/core/block_pool.py (a vLLM checkout);
  points: "all" (max/1024, max*100/1024, max, as bench_hashcache), "max",
  or "one": max only, its figures on one line with no header (what
  bench_hashcache reads when it runs this beside itself).
Exit 77 when VLLM_SRC has no block_pool.py.
"""
import gc
import importlib.util
import logging
import os
import random
import sys
import time
import types

REQ, PS, MIN_OPS = 64, 16, 256 << 10


def stub(name, **attrs):
    m = types.ModuleType(name)
    m.__path__ = []
    for k, v in attrs.items():
        setattr(m, k, v)
    sys.modules[name] = m
    return m


class _Event:
    def __init__(self, *a, **k):
        pass


def load(src):
    core = os.path.join(src, "vllm", "v1", "core")
    if not os.path.isfile(os.path.join(core, "block_pool.py")):
        return None
    stub("vllm")
    stub("vllm.envs", VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=False)
    sys.modules["vllm"].envs = sys.modules["vllm.envs"]
    stub("vllm.logger", init_logger=logging.getLogger)
    stub("vllm.utils")
    stub("vllm.utils.hashing", xxhash=lambda x: b"", xxhash_cbor=lambda x: b"")
    stub("vllm.v1")
    stub("vllm.v1.core")
    stub("vllm.v1.request", Request=object)
    stub("vllm.distributed")
    stub("vllm.distributed.kv_events", MEDIUM_GPU="GPU", AllBlocksCleared=_Event,
         BlockRemoved=_Event, BlockStored=_Event, KVCacheEvent=_Event)
    stub("vllm.v1.core.kv_cache_metrics", KVCacheMetricsCollector=object)
    for mod in ("kv_cache_utils", "block_pool"):
        name = "vllm.v1.core." + mod
        spec = importlib.util.spec_from_file_location(name, os.path.join(core, mod + ".py"))
        m = importlib.util.module_from_spec(spec)
        sys.modules[name] = m
        spec.loader.exec_module(m)
    return sys.modules["vllm.v1.core.block_pool"]


class Req:
    """What cache_full_blocks() reads of a request."""
    lora_request = None
    all_token_ids = ()

    def __init__(self, hashes):
        self.block_hashes = hashes


def run_point(bp, n, reps, seed):
    rnd = random.Random(seed)
    pool = bp.BlockPool(n + 1, True, PS)
    hashes = [rnd.randbytes(32) for _ in range(n)]
    nreq = n // REQ
    for r in range(nreq):
        blk = pool.get_new_blocks(REQ)
        pool.cache_full_blocks(Req(hashes[r * REQ:(r + 1) * REQ]), blk, 0, REQ, PS, 0)
        pool.free_blocks(blk[::-1])
    order = list(range(nreq))
    rnd.shuffle(order)
    reqs = max(n, MIN_OPS) // REQ
    ns = time.perf_counter_ns
    get = pool.get_cached_block
    res = {k: [] for k in ("lookup", "lfree", "match", "evict", "ecache", "efree")}
    gc.disable()
    for _ in range(reps):
        tl = tf = 0
        for q in range(reqs):
            i = order[q % nreq] * REQ
            hs = hashes[i:i + REQ]
            a = ns()
            blk = []
            for h in hs:
                c = get(h, [0])
                if c is None:
                    break
                blk.append(c[0])
            pool.touch(blk)
            b = ns()
            rev = blk[::-1]
            c = ns()
            pool.free_blocks(rev)
            tl += b - a
            tf += ns() - c
            if len(blk) != REQ:
                raise SystemExit("lookup missed")
        res["lookup"].append(tl / (reqs * REQ))
        res["lfree"].append(tf / (reqs * REQ))
        a = ns()
        for q in range(reqs):
            i = order[q % nreq] * REQ
            for h in hashes[i:i + REQ]:
                if get(h, [0]) is None:
                    break
        res["match"].append((ns() - a) / (reqs * REQ))
    for _ in range(reps):
        te = tc = tf = 0
        for q in range(reqs):
            fresh = [rnd.randbytes(32) for _ in range(REQ)]
            r = Req(fresh)
            a = ns()
            blk = pool.get_new_blocks(REQ)
            b = ns()
            pool.cache_full_blocks(r, blk, 0, REQ, PS, 0)
            c = ns()
            rev = blk[::-1]
            d = ns()
            pool.free_blocks(rev)
            te += b - a
            tc += c - b
            tf += ns() - d
        res["evict"].append(te / (reqs * REQ))
        res["ecache"].append(tc / (reqs * REQ))
        res["efree"].append(tf / (reqs * REQ))
    gc.enable()
    if len(pool.cached_block_hash_to_block) != n:
        raise SystemExit("eviction did not keep the population")
    return {k: sorted(v)[len(v) // 2] for k, v in res.items()}


def main():
    if len(sys.argv) < 2:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    bp = load(sys.argv[1])
    if bp is None:
        print("peer_vllm_blockpool: no vllm/v1/core/block_pool.py under %s" % sys.argv[1])
        return 77
    mx = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    pts = sys.argv[4] if len(sys.argv) > 4 else "all"
    rnd = lambda x: max(REQ, (x + REQ - 1) // REQ * REQ)
    ns = [rnd(mx)] if pts in ("max", "one") else [rnd(mx // 1024), rnd(mx * 100 // 1024), rnd(mx)]
    if pts == "one":
        p = run_point(bp, ns[0], reps, ns[0])
        print("%.1f %.1f %.1f %.1f %.1f %.1f" % (p["lookup"], p["lfree"], p["match"], p["evict"],
                                                 p["ecache"], p["efree"]))
        return 0
    print("vLLM BlockPool (%s), %d-token blocks, %d-block requests, median ns/block of %d "
          "repetitions" % (sys.argv[1], PS, REQ, reps))
    print("%9s | %7s %7s %7s | %7s %7s %7s" % ("blocks", "lookup", "free", "match", "evict",
                                                "cache", "free"))
    for n in ns:
        p = run_point(bp, n, reps, n)
        print("%9d | %7.1f %7.1f %7.1f | %7.1f %7.1f %7.1f" % (
            n, p["lookup"], p["lfree"], p["match"], p["evict"], p["ecache"], p["efree"]),
            flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
