#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""python/bench/bench_dropins.py - kvslab's Python drop-ins against the
engines' own Python code, on a Mooncake trace, side by side in one run.

SGLang.  Per request, the sequence tests/bench/bench_radix.c replays (token
j of block id h is h * 512 + j, the last block holds input_length - 512 *
(n - 1) tokens): match the prefix, lock the matched node, allocate the
missing tokens from the pool (evicting the shortfall first), insert the
whole input, free the locations the insert found already cached, unlock.
kvslab.sglang.RadixCache runs it over kvslab.sglang.TokenToKVPoolAllocator
(a kvslab pool), at SGLang's defaults (page 1, LRU, no slab-aware order).
With --sglang PATH/radix_cache.py, SGLang's own RadixCache runs the same
sequence in the same process over a free list of int64 tensors (SGLang's
TokenToKVPoolAllocator without sorting: alloc slices the head, free
concatenates), its imports stubbed at run time (torch is needed).
Capacities: 10%, 30% and 100% of the trace's unique tokens (the tokens of
every block id at the longest length it appears with: the size of the full
radix tree), to the token: the kvslab pool rounds up to whole slabs, and
the bench allocates the excess once and holds it.

vLLM.  Per request, what vLLM's KVCacheManager does with prefix caching at
block_size 16: the request block hasher (sha256_cbor, the seed vLLM uses
without PYTHONHASHSEED) hashes the full blocks; the cached prefix is looked
up block by block along the hash chain (get_cached_block, stopping at the
first miss, at most (num_tokens - 1) // 16 blocks as vLLM caps the hit);
touch; get_new_blocks for the rest (evicting as the free queue hands out
cached blocks); cache_full_blocks; at the request's end free_blocks in
reverse order.  kvslab.vllm.BlockPool against vLLM's v1 BlockPool from
--vllm ROOT (ROOT/vllm/v1/core/block_pool.py and kv_cache_utils.py, the
rest of vllm stubbed at run time).  Capacities: 10%, 30% and 100% of the
trace's unique full 16-token blocks, to the block (vLLM's pool gets one
more for its null block).  The hashing is timed apart, once per repeat
(its result does not depend on the capacity): the req/s are given without
it and with it.

Each figure is requests per second over the time of the cache calls and the
allocation alone (the expansion of the keys into token ids is not timed);
the hit ratio is tokens matched / tokens requested.  The two sides' hit
ratios must be identical; the bench says so and fails when they are not.
Each configuration runs --repeat times (3); printed are the median and the
range.  Without --sglang, the traces README's SGLang figures are printed,
labelled as such (they time match+insert only).

Usage:
  bench_dropins.py [--sglang PATH/radix_cache.py] [--vllm VLLM_ROOT]
                   [--only sglang|vllm] [--capacity 10|30|100]
                   [--repeat N] [--requests N] [--profile] [TRACE.jsonl]

  TRACE defaults to the conversation trace: $KVSLAB_SHARED/traces, else a
  "shared/traces" folder beside the source tree ($KVSLAB_TOP_SRCDIR, else
  this file's) or any folder above it.  The kvslab package is imported from
  $KVSLAB_TOP_BUILDDIR/python-build when that is set (tests/check-python.sh
  builds it there; make bench sets it), else from sys.path.
  $KVSLAB_PEER_SGLANG and $KVSLAB_PEER_VLLM stand for --sglang and --vllm.
  Exits 77 when there is no trace, no kvslab package or no numpy; 1 when
  the hit ratios (or the block hashes) differ.  --profile runs cProfile over
  the first kvslab run of each part and prints the top functions.

  Example (make bench runs it without peers):
    PYTHONPATH=python-build /usr/bin/python3 python/bench/bench_dropins.py \\
        --sglang /tmp/peer/sglang/radix_cache.py --vllm /tmp/peer/vllm
"""
import argparse
import dataclasses
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import re
import sys
import time
import types
from typing import Any, NamedTuple

FRACTIONS = ((10, 0.10), (30, 0.30), (100, 1.00))
BLOCK = 512     # tokens of a trace block
VBS = 16        # vLLM block size


def skip(msg):
    print("bench_dropins: %s: skipped" % msg, file=sys.stderr)
    sys.exit(77)


# ------------------------------------------------------------------ trace

def find_trace():
    shared = os.environ.get("KVSLAB_SHARED")
    if shared:
        return os.path.join(shared, "traces", "conversation_trace.jsonl")
    start = os.environ.get("KVSLAB_TOP_SRCDIR") or os.path.dirname(os.path.abspath(__file__))
    d = os.path.abspath(start)
    while True:
        p = os.path.join(d, "shared", "traces", "conversation_trace.jsonl")
        if os.path.isfile(p):
            return p
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def load_trace(path, limit):
    """[(input_length, [hash ids])], with bench_radix's filter."""
    reqs = []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
                n, ids = int(r["input_length"]), [int(h) for h in r["hash_ids"]]
            except (ValueError, KeyError, TypeError):
                continue
            if not ids or n <= 0 or n > BLOCK * len(ids):
                continue
            reqs.append((n, ids))
            if limit and len(reqs) >= limit:
                break
    return reqs


def block_len(n, ids, b):
    return BLOCK if b + 1 < len(ids) else n - BLOCK * (len(ids) - 1)


def unique_counts(reqs):
    """Unique tokens (per block id the longest length seen) and unique full
    16-token blocks (per block id the most full 16-blocks seen)."""
    longest = {}
    for n, ids in reqs:
        for b, h in enumerate(ids):
            ln = block_len(n, ids, b)
            if longest.get(h, 0) < ln:
                longest[h] = ln
    return sum(longest.values()), sum(v // VBS for v in longest.values())


def expand(np, n, ids):
    """int32 token ids of a request: h * 512 + j."""
    base = np.asarray(ids, dtype=np.int64) * BLOCK
    return (base[:, None] + np.arange(BLOCK, dtype=np.int64)).ravel()[:n].astype(np.int32)


# ------------------------------------------------------------ peer loading

class _Stub(types.ModuleType):
    """A stand-in module: a name it lacks is a submodule the loader knows, or
    an inert class (the peers import types they use only for annotations,
    metrics and events, which the bench leaves off)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        full = self.__name__ + "." + name
        if full in _Loader.known:
            return importlib.import_module(full)
        cls = type(name, (), {"__init__": lambda self, *a, **k: None})
        setattr(self, name, cls)
        return cls


class _Loader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports under the given roots: files named in ``real`` from their
    paths, modules in ``fill`` as stubs with those attributes, any other as
    an empty stub package."""
    known = set()

    def __init__(self, roots, real, fill):
        self.roots, self.real, self.fill = roots, real, fill
        _Loader.known.update(real, fill)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in self.roots:
            return None
        if fullname in self.real:
            return importlib.util.spec_from_file_location(fullname, self.real[fullname])
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        m = _Stub(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        for k, v in self.fill.get(module.__name__, {}).items():
            setattr(module, k, v)


def load_sglang(path):
    """SGLang's RadixCache class and its parameter types from radix_cache.py
    at PATH (an evict_policy.py beside it is used, else a stub of LRU's)."""
    import torch

    @dataclasses.dataclass
    class CacheInitParams:
        disable: bool = False
        req_to_token_pool: Any = None
        token_to_kv_pool_allocator: Any = None
        page_size: int = 1
        enable_kv_cache_events: bool = False
        is_eagle: bool = False
        disable_finished_insert: bool = False
        eviction_policy: str = "lru"
        enable_metrics: bool = False

    @dataclasses.dataclass
    class MatchPrefixParams:
        key: Any = None
        cow_mamba: bool = False
        req: Any = None

    @dataclasses.dataclass
    class InsertParams:
        key: Any = None
        value: Any = None
        chunked: bool = False
        priority: int = 0

    @dataclasses.dataclass
    class InsertResult:
        prefix_len: int = 0

    @dataclasses.dataclass
    class EvictParams:
        num_tokens: int = 0

    @dataclasses.dataclass
    class EvictResult:
        num_tokens_evicted: int = 0

    class MatchResult(NamedTuple):
        device_indices: Any
        last_device_node: Any
        last_host_node: Any
        best_match_node: Any = None
        host_hit_length: int = 0

    class BasePrefixCache:
        metrics_collector = None

        def init_metrics_collector(self):
            pass

        def update_eviction_metrics(self, num_evicted, start_time):
            pass

    class LRUStrategy:
        def get_priority(self, node):
            return node.last_access_time

    mc = "sglang.srt.mem_cache"
    real = {mc + ".radix_cache": path}
    policy = os.path.join(os.path.dirname(os.path.abspath(path)), "evict_policy.py")
    fill = {
        mc + ".cache_init_params": {"CacheInitParams": CacheInitParams},
        mc + ".base_prefix_cache": {
            "BasePrefixCache": BasePrefixCache, "MatchPrefixParams": MatchPrefixParams,
            "InsertParams": InsertParams, "InsertResult": InsertResult,
            "EvictParams": EvictParams, "EvictResult": EvictResult, "MatchResult": MatchResult},
        "sglang.srt.disaggregation.kv_events": {"MEDIUM_GPU": "GPU"},
    }
    if os.path.isfile(policy):
        real[mc + ".evict_policy"] = policy
    else:
        fill[mc + ".evict_policy"] = {"LRUStrategy": LRUStrategy}
    sys.meta_path.insert(0, _Loader({"sglang"}, real, fill))
    mod = importlib.import_module(mc + ".radix_cache")
    if "params" not in mod.RadixCache.__init__.__code__.co_varnames[:2]:
        raise SystemExit("bench_dropins: %s: not the CacheInitParams-era RadixCache "
                         "(SGLang 006b0e3d or later is followed)" % path)
    return types.SimpleNamespace(mod=mod, torch=torch, CacheInitParams=CacheInitParams,
                                 MatchPrefixParams=MatchPrefixParams,
                                 InsertParams=InsertParams, EvictParams=EvictParams)


def load_vllm(root):
    """vLLM's BlockPool, request block hasher and init_none_hash from ROOT."""
    import hashlib
    import cbor2

    def sha256_cbor(obj):
        return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()

    def sha256(obj):
        import pickle
        return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()

    def xxhash(obj):  # only compared against, never called
        raise NotImplementedError

    def cdiv(a, b):
        return -(a // -b)

    core = os.path.join(root, "vllm", "v1", "core")
    real = {"vllm.v1.core.block_pool": os.path.join(core, "block_pool.py"),
            "vllm.v1.core.kv_cache_utils": os.path.join(core, "kv_cache_utils.py")}
    for p in real.values():
        if not os.path.isfile(p):
            raise SystemExit("bench_dropins: --vllm: no %s" % p)
    fill = {"vllm.envs": {"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": False},
            "vllm.logger": {"init_logger": logging.getLogger},
            "vllm.utils.hashing": {"sha256_cbor": sha256_cbor, "sha256": sha256,
                                   "xxhash": xxhash, "xxhash_cbor": xxhash},
            "vllm.utils.math_utils": {"cdiv": cdiv},
            "vllm.utils": {"cdiv": cdiv, "sha256": sha256, "GiB_bytes": 1 << 30},
            "vllm.distributed.kv_events": {"MEDIUM_GPU": "GPU"}}
    sys.meta_path.insert(0, _Loader({"vllm"}, real, fill))
    utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    pool = importlib.import_module("vllm.v1.core.block_pool")
    utils.init_none_hash(sha256_cbor)
    return types.SimpleNamespace(utils=utils, BlockPool=pool.BlockPool, sha256_cbor=sha256_cbor)


# --------------------------------------------------------------- SGLang

class FreeList:
    """SGLang's TokenToKVPoolAllocator as a free list of int64 tensors (its
    need_sort=False path): alloc slices the head, free concatenates."""

    def __init__(self, torch, size):
        self.torch = torch
        self.device = torch.device("cpu")
        self.size = size
        self.free_pages = torch.arange(1, size + 1, dtype=torch.int64)

    def available_size(self):
        return len(self.free_pages)

    def alloc(self, need_size):
        if need_size > len(self.free_pages):
            return None
        select = self.free_pages[:need_size]
        self.free_pages = self.free_pages[need_size:]
        return select

    def free(self, free_index):
        if free_index.numel() == 0:
            return
        self.free_pages = self.torch.cat((self.free_pages, free_index))


def replay_kvslab_radix(kvslab, np, reqs, cap):
    """(busy ns, tokens matched, tokens requested, evicted) of the drop-in."""
    from kvslab.sglang import RadixCache, TokenToKVPoolAllocator
    torch = __import__("torch") if kvslab.sglang._torch is not None else None
    drv = kvslab.Driver("host")
    pool = kvslab.Pool(drv, "tiny", page_size=1, max_tokens=cap)
    alloc = TokenToKVPoolAllocator(pool)
    excess = alloc.available_size() - cap
    held = pool.alloc(excess) if excess > 0 else None  # the capacity asked, to the token
    assert alloc.available_size() == cap, (alloc.available_size(), cap)
    cache = RadixCache(None, alloc, page_size=1)
    cat = torch.cat if torch is not None else np.concatenate
    busy = hit = asked = evicted = 0
    clock = time.perf_counter_ns
    for n, ids in reqs:
        key = expand(np, n, ids)
        t0 = clock()
        m = cache.match_prefix(key)
        node = m.last_device_node
        cache.inc_lock_ref(node)
        got = len(m.device_indices)
        need = n - got
        avail = alloc.available_size()
        if need > avail:
            evicted += cache.evict(need - avail)
        new = alloc.alloc(need) if need else m.device_indices[:0]
        if new is None:
            cache.dec_lock_ref(node)
            busy += clock() - t0
            hit += got
            asked += n
            continue
        value = cat((m.device_indices, new))
        prefix = cache.insert(key, value)
        if prefix > got:
            alloc.free(value[got:prefix])
        cache.dec_lock_ref(node)
        busy += clock() - t0
        hit += got
        asked += n
    cache.close()
    del held
    pool.close()
    drv.close()
    return busy, hit, asked, evicted


def replay_sglang(sg, np, reqs, cap):
    """The same sequence through SGLang's RadixCache."""
    RadixKey = sg.mod.RadixKey
    alloc = FreeList(sg.torch, cap)
    cache = sg.mod.RadixCache(sg.CacheInitParams(token_to_kv_pool_allocator=alloc, page_size=1,
                                                 eviction_policy="lru"))
    MP, IP, EP, cat = sg.MatchPrefixParams, sg.InsertParams, sg.EvictParams, sg.torch.cat
    busy = hit = asked = evicted = 0
    clock = time.perf_counter_ns
    for n, ids in reqs:
        key = RadixKey(expand(np, n, ids).tolist())
        t0 = clock()
        m = cache.match_prefix(MP(key=key))
        node = m.last_device_node
        cache.inc_lock_ref(node)
        got = len(m.device_indices)
        need = n - got
        avail = alloc.available_size()
        if need > avail:
            evicted += cache.evict(EP(num_tokens=need - avail)).num_tokens_evicted
        new = alloc.alloc(need) if need else m.device_indices[:0]
        if new is None:
            cache.dec_lock_ref(node)
            busy += clock() - t0
            hit += got
            asked += n
            continue
        value = cat((m.device_indices, new))
        prefix = cache.insert(IP(key=key, value=value)).prefix_len
        if prefix > got:
            alloc.free(value[got:prefix])
        cache.dec_lock_ref(node)
        busy += clock() - t0
        hit += got
        asked += n
    return busy, hit, asked, evicted


# ----------------------------------------------------------------- vLLM

class VReq:
    """What the hasher and cache_full_blocks read of vLLM's Request."""
    __slots__ = ("request_id", "all_token_ids", "num_tokens", "block_hashes",
                 "lora_request", "cache_salt", "mm_features", "prompt_embeds")

    def __init__(self, rid, tokens):
        self.request_id = rid
        self.all_token_ids = tokens
        self.num_tokens = len(tokens) if tokens is not None else 0
        self.block_hashes = []
        self.lora_request = None
        self.cache_salt = None
        self.mm_features = []
        self.prompt_embeds = None


def hash_all(np, reqs, hasher):
    """Block hashes of every request (VReq with all_token_ids a list of
    ints, as vLLM's Request has) and the ns the hasher took."""
    out, busy, clock = [], 0, time.perf_counter_ns
    for i, (n, ids) in enumerate(reqs):
        r = VReq(i, expand(np, n, ids).tolist())
        t0 = clock()
        hs = hasher(r)
        busy += clock() - t0
        out.append(hs)
    return out, busy


def replay_blockpool(pool, reqs, hashes, free_cap):
    """vLLM's KVCacheManager sequence over one BlockPool; (busy ns, matched
    tokens, requested tokens, skipped requests)."""
    busy = hit = asked = skipped = 0
    clock = time.perf_counter_ns
    groups = [0]
    for i, (n, ids) in enumerate(reqs):
        req = VReq(i, None)
        req.num_tokens = n
        req.block_hashes = hashes[i]
        t0 = clock()
        computed = []
        for h in req.block_hashes[:(n - 1) // VBS]:
            c = pool.get_cached_block(h, groups)
            if c is None:
                break
            computed.append(c[0])
        if computed:
            pool.touch(computed)
        need = -(n // -VBS) - len(computed)
        if need > pool.get_num_free_blocks():
            pool.free_blocks(reversed(computed))
            skipped += 1
        else:
            blocks = computed + pool.get_new_blocks(need)
            pool.cache_full_blocks(req, blocks, len(computed), n // VBS, VBS, 0)
            pool.free_blocks(reversed(blocks))
        busy += clock() - t0
        hit += len(computed) * VBS
        asked += n
    return busy, hit, asked, skipped


def kvslab_blockpool(kvslab, cap):
    from kvslab.vllm import BlockPool
    # One more for vLLM's null block (block 0), as vLLM's pool gets.
    pool = BlockPool(cap + 1, block_size=VBS)
    excess = pool.get_num_free_blocks() - cap
    pool.bench_held = pool.get_new_blocks(excess) if excess > 0 else []
    assert pool.get_num_free_blocks() == cap, (pool.get_num_free_blocks(), cap)
    return pool


# ----------------------------------------------------------------- report

def med(v):
    s = sorted(v)
    return s[len(s) // 2]


def rps_line(label, runs, nreq):
    r = [nreq / (b / 1e9) for b in runs]
    return "%s %9.0f req/s (runs %.0f to %.0f)" % (label, med(r), min(r), max(r)), med(r)


def readme_peer(trace):
    """The traces README's SGLang RadixCache rows: {pct: (hit, text)}."""
    out = {}
    try:
        with open(os.path.join(os.path.dirname(trace), "README.md")) as f:
            text = f.read()
    except OSError:
        return out
    part = text.split("## Peer baseline", 1)
    if len(part) < 2:
        return out
    for line in part[1].splitlines():
        m = re.match(r"\|\s*(\d+)% \(([^)]*)\)\s*\|\s*([0-9.]+)\s*\|(.*)\|\s*$", line)
        if m:
            cells = [c.strip() for c in m.group(4).split("|")]
            out[int(m.group(1))] = (float(m.group(3)), cells[-1], m.group(2))
    return out


def profile_first(fn, *args):
    import cProfile
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    res = fn(*args)
    pr.disable()
    st = pstats.Stats(pr)
    st.sort_stats("tottime").print_stats(14)
    return res


# ------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--sglang", default=os.environ.get("KVSLAB_PEER_SGLANG"),
                    help="SGLang's radix_cache.py (006b0e3d era)")
    ap.add_argument("--vllm", default=os.environ.get("KVSLAB_PEER_VLLM"),
                    help="vLLM source root (vllm/v1/core/block_pool.py)")
    ap.add_argument("--only", choices=("sglang", "vllm"))
    ap.add_argument("--capacity", type=int, choices=(10, 30, 100))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=0, help="first N requests only")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")

    trace = a.trace or find_trace()
    if not trace or not os.path.isfile(trace):
        skip("no conversation trace (set KVSLAB_SHARED)")
    try:
        import numpy as np
    except ImportError:
        skip("no numpy")
    build = os.environ.get("KVSLAB_TOP_BUILDDIR")
    if build:  # make bench: this build's package, not one installed elsewhere
        if not os.path.isdir(os.path.join(build, "python-build", "kvslab")):
            skip("no built kvslab package in %s/python-build (make check builds it)" % build)
        sys.path.insert(0, os.path.join(build, "python-build"))
    try:
        import kvslab
        import kvslab.sglang
        import kvslab.vllm
    except ImportError as e:
        skip("no built kvslab package (%s; tests/check-python.sh builds it into "
             "python-build/)" % e)

    reqs = load_trace(trace, a.requests)
    if not reqs:
        skip("no request in %s" % trace)
    utok, ublk = unique_counts(reqs)
    print("%s: %d requests, %d tokens requested; unique tokens %d, unique full %d-token "
          "blocks %d" % (trace, len(reqs), sum(n for n, _ in reqs), utok, VBS, ublk))
    print("kvslab %s at %s; python %s" % (kvslab.version(), os.path.dirname(kvslab.__file__),
                                           sys.version.split()[0]))
    caps = [(p, f) for p, f in FRACTIONS if a.capacity in (None, p)]
    mismatch = []
    summary = []
    gc.collect()
    gc.freeze()  # the trace's objects stay out of the collector's passes

    if a.only in (None, "sglang"):
        sg = load_sglang(a.sglang) if a.sglang else None
        peer_readme = None if sg else readme_peer(trace)
        print("\nSGLang RadixCache sequence (page 1, LRU): capacity = N%% of %d unique tokens"
              % utok)
        if sg:
            print("  peer: SGLang RadixCache from %s over a free list of int64 tensors, "
                  "measured here" % a.sglang)
        for pct, frac in caps:
            cap = int(round(frac * utok))
            kb, sb, khit, shit = [], [], None, None
            for rep in range(a.repeat):
                fn = replay_kvslab_radix
                if a.profile and rep == 0:
                    print("  cProfile of the kvslab drop-in at %d%%:" % pct)
                    b, h, q, e = profile_first(fn, kvslab, np, reqs, cap)
                else:
                    b, h, q, e = fn(kvslab, np, reqs, cap)
                kb.append(b)
                khit = (h, q)
                gc.collect()
                if sg:
                    b, h, q, e2 = replay_sglang(sg, np, reqs, cap)
                    sb.append(b)
                    shit = (h, q)
                    gc.collect()
            kl, kr = rps_line("kvslab drop-in", kb, len(reqs))
            print("  %4d%% (%d tokens): hit %.4f  %s" % (pct, cap, khit[0] / khit[1], kl))
            if sg:
                sl, sr = rps_line("SGLang        ", sb, len(reqs))
                same = shit == khit
                print("  %4d%% %*s hit %.4f  %s   ratio %.1fx  hit ratios %s" %
                      (pct, len(str(cap)) + 10, "", shit[0] / shit[1], sl, kr / sr,
                       "identical" if same else "DIFFER (%d vs %d tokens)" % (khit[0], shit[0])))
                if not same:
                    mismatch.append("sglang %d%%" % pct)
                summary.append("  SGLang %4d%%: kvslab %9.0f req/s, SGLang %8.0f req/s, %5.1fx; "
                               "hit %.4f / %.4f" % (pct, kr, sr, kr / sr, khit[0] / khit[1],
                                                    shit[0] / shit[1]))
            else:
                row = (peer_readme or {}).get(pct)
                if row:
                    print("  %4d%% SGLang per the traces README (commit 006b0e3d, another run, "
                          "match+insert only): hit %.4f, %s ops/s" % (pct, row[0], row[1]))
                summary.append("  SGLang %4d%%: kvslab %9.0f req/s, hit %.4f (no peer measured)"
                               % (pct, kr, khit[0] / khit[1]))

    if a.only in (None, "vllm"):
        vl = load_vllm(a.vllm) if a.vllm else None
        from kvslab.vllm import RequestBlockHasher
        print("\nvLLM KVCacheManager sequence (block 16, sha256_cbor): capacity = N%% of %d "
              "unique full blocks" % ublk)
        khasher = RequestBlockHasher(VBS, "sha256_cbor", seed="vllm-none-hash")
        vhasher = vl.utils.get_request_block_hasher(VBS, vl.sha256_cbor) if vl else None
        khash_ns, vhash_ns, hashes = [], [], None
        for rep in range(a.repeat):
            hs, ns = hash_all(np, reqs, khasher)
            khash_ns.append(ns)
            if vl:
                vhs, ns = hash_all(np, reqs, vhasher)
                vhash_ns.append(ns)
                if rep == 0 and vhs != hs:
                    print("  block hashes: kvslab's and vLLM's DIFFER")
                    mismatch.append("vllm hashes")
                elif rep == 0:
                    print("  block hashes: kvslab's and vLLM's byte-identical (%d blocks)"
                          % sum(len(x) for x in hs))
                del vhs
            if hashes is None:
                hashes = hs
            del hs
            gc.collect()
        kl, khr = rps_line("kvslab hasher", khash_ns, len(reqs))
        print("  hashing alone: %s" % kl)
        if vl:
            vlr, vhr = rps_line("vLLM hasher  ", vhash_ns, len(reqs))
            print("  hashing alone: %s   ratio %.1fx" % (vlr, khr / vhr))
        kh, vh = med(khash_ns), med(vhash_ns) if vl else 0
        gc.collect()
        gc.freeze()  # the hashes are input, as the trace is: out of the collector's passes
        for pct, frac in caps:
            cap = int(round(frac * ublk))
            kb, vb, khit, vhit = [], [], None, None
            for rep in range(a.repeat):
                pool = kvslab_blockpool(kvslab, cap)
                if a.profile and rep == 0:
                    print("  cProfile of the kvslab drop-in at %d%%:" % pct)
                    b, h, q, s = profile_first(replay_blockpool, pool, reqs, hashes, cap)
                else:
                    b, h, q, s = replay_blockpool(pool, reqs, hashes, cap)
                pool.free_blocks(pool.bench_held)
                pool.close()
                kb.append(b)
                khit = (h, q, s)
                gc.collect()
                if vl:
                    vpool = vl.BlockPool(cap + 1, True, VBS)
                    b, h, q, s = replay_blockpool(vpool, reqs, hashes, cap)
                    del vpool
                    vb.append(b)
                    vhit = (h, q, s)
                    gc.collect()
            kl, kr = rps_line("kvslab BlockPool", kb, len(reqs))
            kw = len(reqs) / ((med(kb) + kh) / 1e9)
            print("  %4d%% (%d blocks): hit %.4f  %s; with hashing %.0f req/s" %
                  (pct, cap, khit[0] / khit[1], kl, kw))
            if vl:
                vls, vr = rps_line("vLLM BlockPool  ", vb, len(reqs))
                vw = len(reqs) / ((med(vb) + vh) / 1e9)
                same = vhit == khit
                print("  %4d%% %*s hit %.4f  %s; with hashing %.0f req/s   ratio %.1fx "
                      "(%.1fx with hashing)  hit ratios %s" %
                      (pct, len(str(cap)) + 10, "", vhit[0] / vhit[1], vls, vw, kr / vr,
                       kw / vw, "identical" if same else
                       "DIFFER (%d vs %d tokens)" % (khit[0], vhit[0])))
                if not same:
                    mismatch.append("vllm %d%%" % pct)
                summary.append("  vLLM   %4d%%: kvslab %9.0f req/s, vLLM %8.0f req/s, %5.1fx "
                               "(with hashing %.0f / %.0f, %.1fx); hit %.4f / %.4f" %
                               (pct, kr, vr, kr / vr, kw, vw, kw / vw, khit[0] / khit[1],
                                vhit[0] / vhit[1]))
            else:
                summary.append("  vLLM   %4d%%: kvslab %9.0f req/s (with hashing %.0f), hit %.4f "
                               "(no peer measured)" % (pct, kr, kw, khit[0] / khit[1]))

    print("\nsummary (medians of %d runs, req/s over the cache calls and allocation):" % a.repeat)
    print("\n".join(summary))
    if mismatch:
        print("bench_dropins: the two sides differ: %s" % ", ".join(mismatch))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
