#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The quickstart's question from Python: how much KV memory does a slab
save against a static pool, and at what cost in driver calls?

scripts/quickstart.sh answers it with kvslab-replay(1) and its built-in
generator.  This example asks the same question of the kvslab package:

1. It generates the same requests as kvslab-replay's built-in generator
   (a port of tools/replay/trace_gen.c: splitmix64, lognormal lengths,
   Zipf(1) shared prefixes; the same seed and options give the same
   requests) and prints the same header line ("trace: built-in generator,
   N requests, U unique tokens, ideal hit H") as kvslab-replay does for
   the same options.

2. It serves them twice through a small serving loop modelled on the
   tool's (tools/replay/sim.c, scaled down: page size 1, no chunked
   prefill, one decode token a request a step): admission in arrival
   order while memory lasts, a prefill that caches the input in a
   kvslab.Radix prefix cache, a decode step that allocates one token a
   running request, finished requests cached, the cache's evictable part
   capped at --cache-max per cent of the capacity.  Once over a "static" pool (a
   kvslab.Pool whose whole capacity is allocated at the start and handed
   out from a free list here, as a static allocator holds its memory), once
   over the slab pool itself, which maps slabs as demand grows.

3. It reports the mean and peak memory mapped of each, the driver calls
   they cost (the Driver's and Pool's stats dicts), and draws the mapped
   memory over simulated time with matplotlib when it is installed.

The slab pool has kvslab-replay's settings (min_empty 1, max_empty 4,
shrink_quiet 4096 pages, no time-based give-back), and the loop calls its
``reclaim()`` between steps as sim.c calls kvs_slab_reclaim(): it maps slabs
as demand grows and gives empty ones back as it falls.

Run it with the package on the path, e.g. from a built tree:
``PYTHONPATH=python-build /usr/bin/python3 python/examples/replay.py``.
"""
import argparse
import errno
import math
import sys
import time

import numpy as np

import kvslab

# ----------------------------------------------------------------- generator
#
# A port of tools/replay/trace_gen.c.  Every draw is the C code's, in the
# same order and with the same double arithmetic (math.log, exp, sqrt and cos
# are the C library's), so the same options give the same requests.  (A C
# compiler that fused mu + sigma * z into one multiply-add, as on aarch64,
# could round a length differently when a draw lands on a boundary; the
# tests compare the two on the machine that builds them.)

RP_BLOCK = 512                  # tokens a block (trace.h)
RP_MAX_BLOCK_ID = 1 << 22       # block ids stay below this
RP_OUTPUT_BASE = 0x40000000     # output token ids start here, never shared
LEN_MAX = 2 ** 31 - 1
SYNTH_SIGMA = 0.8
_M64 = (1 << 64) - 1

# kvslab-replay's defaults for the generator (rp_synth_defaults() and the
# tool's --rate 2); see kvslab-replay(1), DEFAULTS.
GEN_DEFAULTS = dict(seed=1, requests=2000, rate=2.0, input_mean=2048, input_max=16384,
                    output_mean=256, output_max=2048, shared_ratio=0.5, prefixes=16)


class Request:
    """One generated request: arrival (ms), lengths and its input's block ids."""
    __slots__ = ("arrival_ms", "input_len", "output_len", "blocks")

    def __init__(self, arrival_ms, input_len, output_len, blocks):
        self.arrival_ms = arrival_ms
        self.input_len = input_len
        self.output_len = output_len
        self.blocks = blocks

    def input_tokens(self):
        """Token j of block h is h * 512 + j (rp_req_input()), as int32."""
        j = np.arange(self.input_len, dtype=np.int64)
        blocks = np.asarray(self.blocks, dtype=np.int64)
        return (blocks[j // RP_BLOCK] * RP_BLOCK + j % RP_BLOCK).astype(np.int32)


class _SplitMix64:
    """splitmix64, one add a draw, as sm64() and unif() in trace_gen.c."""

    def __init__(self, seed):
        self.s = seed & _M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & _M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    def unif(self):
        """Uniform in (0, 1), never 0."""
        return (float(self.next() >> 11) + 0.5) * 2.0 ** -53

    def gauss(self):
        """Standard normal by Box-Muller (one of the pair)."""
        u1 = self.unif()
        u2 = self.unif()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def length(self, mean, top):
        """Lognormal with mean @mean, rounded, clipped to [1, top]."""
        mu = math.log(float(mean)) - SYNTH_SIGMA * SYNTH_SIGMA / 2
        x = math.floor(math.exp(mu + SYNTH_SIGMA * self.gauss()) + 0.5)
        if not x >= 1:
            return 1
        if x >= top:
            return top
        return int(x)


def generate(seed=1, requests=2000, rate=2.0, input_mean=2048, input_max=16384,
             output_mean=256, output_max=2048, shared_ratio=0.5, prefixes=16):
    """The requests rp_trace_synth() makes for these options (a list of
    Request).  Raises ValueError where it fails with EINVAL, MemoryError
    where with ENOMEM (more than 2^22 distinct blocks)."""
    if (not requests or not rate >= 0 or not math.isfinite(rate) or not input_mean or
            not input_max or input_mean > input_max or not output_mean or not output_max or
            output_mean > output_max or input_max > LEN_MAX or output_max > LEN_MAX or
            not 0 <= shared_ratio <= 1 or (shared_ratio > 0 and not prefixes)):
        raise ValueError("inconsistent generator options")
    pblocks = int(math.floor(shared_ratio * input_max)) // RP_BLOCK if shared_ratio > 0 else 0
    pool_ids = pblocks * prefixes if pblocks else 0
    if pool_ids > RP_MAX_BLOCK_ID:
        raise MemoryError("more than 2^22 distinct blocks")
    cdf = []
    if pblocks:         # Zipf(1): prefix p is drawn with weight 1 / (p + 1)
        total = 0.0
        for i in range(prefixes):
            total += 1.0 / (i + 1)
            cdf.append(total)
        cdf = [c / total for c in cdf]
        cdf[-1] = 1.0
    g = _SplitMix64(seed)
    nxt = pool_ids      # prefix p's block k is p * pblocks + k; fresh ids follow
    now = 0.0
    out = []
    for _ in range(requests):
        if rate > 0:
            now += -math.log(g.unif()) / rate * 1000.0
        if not math.isfinite(now):
            raise ValueError("arrivals so sparse that time overflows")
        input_len = g.length(input_mean, input_max)
        output_len = g.length(output_mean, output_max)
        nblocks = (input_len + RP_BLOCK - 1) // RP_BLOCK
        shared = prefix = 0
        if pblocks:
            u = g.unif()
            lo, hi = 0, prefixes - 1
            while lo < hi:      # the first p with cdf[p] >= u
                mid = lo + (hi - lo) // 2
                if cdf[mid] >= u:
                    hi = mid
                else:
                    lo = mid + 1
            prefix = lo
            shared = min(int(math.floor(shared_ratio * input_len)) // RP_BLOCK, pblocks)
        if nxt + (nblocks - shared) > RP_MAX_BLOCK_ID:
            raise MemoryError("more than 2^22 distinct blocks")
        blocks = [prefix * pblocks + k for k in range(shared)]
        blocks.extend(range(nxt, nxt + nblocks - shared))
        nxt += nblocks - shared
        out.append(Request(now, input_len, output_len, blocks))
    return out


def ideal_hit(reqs):
    """(ideal hit ratio, unique tokens) with an infinite cache and page size 1,
    as rp_trace_ideal_hit(t, 1, &unique) computes them: per block id, the
    longest run of it seen so far."""
    seen = {}
    matched = total = 0
    for r in reqs:
        m = 0
        for k, b in enumerate(r.blocks):
            run = min(RP_BLOCK, r.input_len - k * RP_BLOCK)
            have = seen.get(b, 0)
            if have < run:
                m += have
                break
            m += run
        matched += m
        total += r.input_len
        for k, b in enumerate(r.blocks):
            run = min(RP_BLOCK, r.input_len - k * RP_BLOCK)
            if seen.get(b, 0) < run:
                seen[b] = run
    return (matched / total if total else 0.0), sum(seen.values())


def header(reqs):
    """kvslab-replay's first report line for the built-in generator."""
    hit, unique = ideal_hit(reqs)
    return "trace: built-in generator, %d requests, %d unique tokens, ideal hit %.4f" % (
        len(reqs), unique, hit)


# ------------------------------------------------------------- the two pools

# The host driver commits nothing ahead of use (KVS_DRV_F_LAZY), so gigabytes
# of a model's KV are accounted, never touched, as kvslab-replay opens it.
DRV_F_LAZY = kvslab.DRV_F_LAZY


def cell_bytes(model):
    """KV bytes a token of @model: a probe pool's first slab, over its tokens."""
    with kvslab.Driver("host", flags=DRV_F_LAZY) as d, \
            kvslab.Pool(d, model, page_size=1, max_tokens=1) as p:
        p.free(p.alloc(1))
        st = p.stats()
        return st["bytes_mapped"] // st["objs_per_slab"]


class SlabStrategy:
    """The slab pool: maps a slab when demand needs one and gives empty slabs
    back between steps (kvslab-replay's watermarks); the radix cache frees
    what it evicts straight into it."""
    name = "slab"

    def __init__(self, model, capacity, budget):
        self.driver = kvslab.Driver("host", flags=DRV_F_LAZY)
        self.pool = kvslab.Pool(self.driver, model, page_size=1, max_tokens=capacity,
                                max_mapped=budget, min_empty=1, max_empty=4,
                                shrink_quiet=4096, decay_ms=0)
        self.radix = kvslab.Radix(self.pool, slab_aware=1)
        self.capacity = min(capacity, self.pool.capacity)
        self._reclaim = self.pool.reclaim

    def alloc(self, n):
        """n locations, or None when the pool is short."""
        try:
            return self.pool.alloc(n)
        except kvslab.Error as e:
            if e.errno != errno.ENOMEM:
                raise
            return None

    def free(self, locs):
        if len(locs):
            self.pool.free(locs)

    def available(self):
        return self.pool.available()

    def evict(self, tokens):
        got, _ = self.radix.evict_locations(tokens)   # over a pool: freed into it
        return got

    def between_steps(self):
        if self._reclaim:
            self._reclaim()

    def close(self):
        self.radix.close()
        self.pool.close()
        self.driver.close()


class StaticStrategy(SlabStrategy):
    """A static pool: the whole capacity allocated at the start and handed out
    from a free list here; the radix cache over no pool gives what it evicts
    back to that list."""
    name = "static"

    def __init__(self, model, capacity, budget):
        self.driver = kvslab.Driver("host", flags=DRV_F_LAZY)
        self.pool = kvslab.Pool(self.driver, model, page_size=1, max_tokens=capacity,
                                max_mapped=budget)
        self.capacity = min(capacity, self.pool.capacity)
        self.freelist = self.pool.alloc(self.capacity)
        self.top = self.capacity
        self.radix = kvslab.Radix(None, page_size=1)
        self._reclaim = None

    def alloc(self, n):
        if n > self.top:
            return None
        self.top -= n
        return self.freelist[self.top:self.top + n].copy()

    def free(self, locs):
        n = len(locs)
        self.freelist[self.top:self.top + n] = locs
        self.top += n

    def available(self):
        return self.top

    def evict(self, tokens):
        got, locs = self.radix.evict_locations(tokens)
        self.free(locs)
        return got

    def close(self):
        self.radix.close()
        self.pool.free(self.freelist[:self.top])
        self.pool.close()
        self.driver.close()


# ------------------------------------------------------------ serving loop


class _Running:
    """A request being served: its key (input then output ids), its token
    locations, and the radix node that locks its cached prefix."""
    __slots__ = ("idx", "key", "locs", "input", "out", "generated", "kv_len", "cached",
                 "node", "prefilled")

    def __init__(self, idx, req, out_base):
        self.idx = idx
        self.input = req.input_len
        self.out = req.output_len
        n = self.input + self.out
        self.key = np.empty(n, dtype=np.int32)
        self.key[:self.input] = req.input_tokens()
        self.key[self.input:] = RP_OUTPUT_BASE + (
            (out_base + np.arange(self.out, dtype=np.int64)) % (1 << 29)).astype(np.int32)
        self.locs = np.empty(n, dtype=np.int32)
        self.generated = 0
        self.kv_len = 0         # tokens with a location
        self.cached = 0         # leading tokens the tree owns (locked by node)
        self.node = 0
        self.prefilled = False


class Loop:
    """A serving loop over one strategy, a scaled-down tools/replay/sim.c."""

    def __init__(self, strat, reqs, cell, max_running=128, reserve=64, reserve_ratio=0.7,
                 step_ms=25.0, cache_max=0.10):
        self.s = strat
        self.reqs = reqs
        self.cell = cell
        self.max_running = max_running
        self.reserve = reserve
        self.reserve_ratio = reserve_ratio
        self.step_ms = step_ms
        self.cache_max = cache_max
        self.run = []
        self.requeue = []
        self.next = 0
        self.t_ms = 0.0
        self.out_next = 0
        self.counted = set()
        self.hit_tokens = self.req_tokens = 0
        self.done = self.preempted = self.rejected = 0
        self.times, self.mapped, self.held = [], [], []

    # --- the cache's side
    def _release(self, r):
        """Give back what r owns, unlock its prefix."""
        self.s.free(r.locs[r.cached:r.kv_len])
        if r.node:
            self.s.radix.unlock(r.node)
            r.node = 0

    def _cache(self, r, n, lock):
        """Insert r's first n tokens; free the duplicates; lock the new node."""
        radix = self.s.radix
        p, node = radix.insert(r.key[:n], r.locs[:n], lock=lock)
        if p > r.cached:
            self.s.free(r.locs[r.cached:p])     # the tree had them already
            if lock:                            # use the tree's locations
                radix.match(r.key[:n], out=r.locs)
        if r.node:
            radix.unlock(r.node)
        r.node = node if lock else 0
        r.cached = n if lock else 0

    def _alloc(self, n):
        """n locations, evicting from the cache when short, None if still short."""
        short = n - self.s.available()
        if short > 0 and self.s.radix.evictable():
            self.s.evict(short)
        return self.s.alloc(n)

    def _preempt_newest(self):
        r = self.run.pop()
        self._release(r)
        self.requeue.append(r.idx)
        self.preempted += 1

    # --- one step
    def _decode_reserve(self, out, gen):
        left = max(out - gen, 0)
        r = int(left * self.reserve_ratio)
        if r < self.reserve:
            r = min(self.reserve, left)
        return r

    def _waiting(self):
        if self.requeue:
            return self.requeue[-1]
        if self.next < len(self.reqs) and self.reqs[self.next].arrival_ms <= self.t_ms:
            return self.next
        return None

    def _pop_waiting(self):
        if self.requeue:
            self.requeue.pop()
        else:
            self.next += 1

    def admit(self):
        reserved = sum(self._decode_reserve(r.out, r.generated) for r in self.run)
        while len(self.run) < self.max_running:
            idx = self._waiting()
            if idx is None:
                break
            req = self.reqs[idx]
            if req.input_len + req.output_len > self.s.capacity:
                self._pop_waiting()     # can never fit
                self.rejected += 1
                continue
            r = _Running(idx, req, self.out_next)
            # At most input - 1 tokens: the last is always computed (SGLang,
            # kvs_flow_match(3)), so that the prefill has a token to emit.
            m, node = self.s.radix.match(r.key[:r.input - 1], out=r.locs, lock=True)
            need = r.input - m + self._decode_reserve(r.out, 0)
            avail = self.s.available() + self.s.radix.evictable()
            if need + reserved > avail and self.run:
                if node:
                    self.s.radix.unlock(node)
                break           # the head of the queue waits for memory
            self.out_next += r.out
            r.node, r.cached, r.kv_len = node, m, m
            if idx not in self.counted:
                self.counted.add(idx)
                self.hit_tokens += m
                self.req_tokens += r.input
            reserved += self._decode_reserve(r.out, 0)
            self._pop_waiting()
            self.run.append(r)

    def prefill(self):
        i = 0
        while i < len(self.run):
            r = self.run[i]
            if r.prefilled:
                i += 1
                continue
            locs = self._alloc(r.input - r.kv_len)
            if locs is None:
                self._preempt_newest()  # may be r itself
                continue
            r.locs[r.kv_len:r.input] = locs
            r.kv_len = r.input
            r.prefilled = True
            r.generated = 1 if r.out else 0
            if r.out > 1:       # SGLang's cache_unfinished after a prefill
                self._cache(r, r.input, lock=True)
            i += 1

    def decode(self):
        while True:
            batch = [r for r in self.run if r.prefilled and r.generated < r.out]
            if not batch:
                break
            locs = self._alloc(len(batch))
            if locs is None:
                self._preempt_newest()
                continue
            for r, loc in zip(batch, locs.tolist()):
                r.locs[r.kv_len] = loc
                r.kv_len += 1
                r.generated += 1
            break
        still = []
        for r in self.run:
            if r.prefilled and r.generated >= r.out:
                self._cache(r, r.kv_len, lock=False)   # cache_finished
                self.done += 1
            else:
                still.append(r)
        self.run = still

    def trim(self):
        ev = self.s.radix.evictable()
        cap = int(self.cache_max * self.s.capacity)
        if ev > cap:
            self.s.evict(ev - cap)

    def serve(self):
        reqs = self.reqs
        while self.next < len(reqs) or self.requeue or self.run:
            if not self.run and not self.requeue and reqs[self.next].arrival_ms > self.t_ms:
                self.t_ms = reqs[self.next].arrival_ms     # idle: skip ahead
            self.admit()
            self.prefill()
            self.decode()
            self.trim()
            self.s.between_steps()
            st = self.s.pool.stats()
            self.times.append(self.t_ms)
            self.mapped.append(st["bytes_mapped"])
            self.held.append((self.s.capacity - self.s.available()) * self.cell)
            self.t_ms += self.step_ms
        return self


# ------------------------------------------------------------------- report

GIB = float(1 << 30)


def run_one(cls, reqs, model, cell, budget, opts):
    capacity = budget // cell
    strat = cls(model, capacity, budget)
    try:
        loop = Loop(strat, reqs, cell, max_running=opts.max_running, reserve=opts.reserve,
                    reserve_ratio=opts.reserve_ratio, step_ms=opts.step_ms,
                    cache_max=opts.cache_max / 100.0)
        t0 = time.monotonic()
        loop.serve()
        loop.wall_s = time.monotonic() - t0
        loop.drv = strat.driver.stats()
        loop.slab = strat.pool.stats()
        loop.radix_stats = strat.radix.stats()
        loop.name = strat.name
        loop.capacity = strat.capacity
        strat.radix.validate()
        # Everything served: once the cache is emptied, every location is free.
        strat.evict(strat.radix.tokens())
        if strat.radix.tokens() or strat.available() != strat.capacity:
            raise RuntimeError("%s: %d tokens cached, %d of %d free after the replay" % (
                strat.name, strat.radix.tokens(), strat.available(), strat.capacity))
    finally:
        strat.close()
    return loop


def summary(loop):
    m = np.asarray(loop.mapped, dtype=np.float64)
    return float(m.mean()), float(m.max())


def plot(loops, path):
    """Mapped memory over simulated time; False (and why) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return False, str(e)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for lp in loops:
        t = np.asarray(lp.times) / 1000.0
        ax.plot(t, np.asarray(lp.mapped) / GIB, label="%s: mapped" % lp.name)
    lp = loops[-1]
    ax.plot(np.asarray(lp.times) / 1000.0, np.asarray(lp.held) / GIB,
            label="%s: tokens held" % lp.name, linewidth=0.8, alpha=0.7)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("GiB")
    ax.set_title("KV memory mapped: static pool vs slab (kvslab, Python)")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True, None


def parse_args(argv):
    d = GEN_DEFAULTS
    ap = argparse.ArgumentParser(
        description="Replay kvslab-replay's built-in generator through the kvslab package: "
                    "memory mapped by a static pool vs the slab, and the driver calls.")
    g = ap.add_argument_group("generator (kvslab-replay's options and defaults)")
    g.add_argument("--requests", type=int, default=d["requests"], help="requests [2000]")
    g.add_argument("--rate", type=float, default=d["rate"], help="arrivals a second [2]")
    g.add_argument("--input-mean", type=int, default=d["input_mean"])
    g.add_argument("--input-max", type=int, default=d["input_max"])
    g.add_argument("--output-mean", type=int, default=d["output_mean"])
    g.add_argument("--output-max", type=int, default=d["output_max"])
    g.add_argument("--shared-ratio", type=float, default=d["shared_ratio"])
    g.add_argument("--prefixes", type=int, default=d["prefixes"])
    g.add_argument("--seed", type=int, default=d["seed"])
    g.add_argument("--trace-only", action="store_true",
                   help="print the trace line and stop")
    s = ap.add_argument_group("serving loop")
    s.add_argument("-m", "--model", default="llama-3-8b", help="a model preset [llama-3-8b]")
    s.add_argument("-M", "--kv-mem", default="8G", help="KV memory budget [8G]")
    s.add_argument("--max-running", type=int, default=128)
    s.add_argument("--reserve", type=int, default=64)
    s.add_argument("--reserve-ratio", type=float, default=0.7)
    s.add_argument("--step-ms", type=float, default=25.0)
    s.add_argument("--cache-max", type=float, default=10.0,
                   help="cap the cache's evictable tokens at this %% of the capacity [10]")
    s.add_argument("--plot", default="replay-python.png",
                   help="where to draw the plot [replay-python.png]")
    s.add_argument("--no-plot", action="store_true")
    return ap.parse_args(argv)


def main(argv=None):
    o = parse_args(argv)
    try:
        reqs = generate(seed=o.seed, requests=o.requests, rate=o.rate,
                        input_mean=o.input_mean, input_max=o.input_max,
                        output_mean=o.output_mean, output_max=o.output_max,
                        shared_ratio=o.shared_ratio, prefixes=o.prefixes)
    except (ValueError, MemoryError) as e:
        print("replay.py: generator: %s" % e, file=sys.stderr)
        return 2
    print(header(reqs))
    if o.trace_only:
        return 0
    try:
        budget = kvslab.parse_size(o.kv_mem)
        cell = cell_bytes(o.model)
    except (ValueError, kvslab.Error) as e:
        print("replay.py: --kv-mem %s, --model %s: %s" % (o.kv_mem, o.model, e), file=sys.stderr)
        return 2
    if budget < cell:
        print("replay.py: --kv-mem %s holds no token of %s" % (o.kv_mem, o.model), file=sys.stderr)
        return 2
    print("model: %s, %d bytes of KV a token; KV memory %.1f GiB; driver host (lazy)" %
          (o.model, cell, budget / GIB))
    print("loop: at most %d running, decode reserve %d tokens or %g of the rest, steps of "
          "%g ms, page size 1; radix prefix cache capped at %g%% of the capacity, LRU "
          "(the slab's slab-aware, as kvslab-replay's)" % (
              o.max_running, o.reserve, o.reserve_ratio, o.step_ms, o.cache_max))
    try:
        loops = [run_one(cls, reqs, o.model, cell, budget, o)
                 for cls in (StaticStrategy, SlabStrategy)]
    except kvslab.Error as e:
        print("replay.py: %s" % e, file=sys.stderr)
        return 1
    base_mean, base_peak = summary(loops[0])
    print("\n%-8s %9s %11s %11s %8s %8s %8s %8s %10s %8s" % (
        "pool", "capacity", "mean mapd", "peak mapd", "hit", "done", "preempt", "rejected",
        "drv calls", "drv ms"))
    print("%-8s %9s %11s %11s" % ("", "tokens", "GiB", "GiB"))
    for lp in loops:
        mean, peak = summary(lp)
        hit = lp.hit_tokens / lp.req_tokens if lp.req_tokens else 0.0
        print("%-8s %9d %11.2f %11.2f %8.4f %8d %8d %8d %10d %8.1f" % (
            lp.name, lp.capacity, mean / GIB, peak / GIB, hit, lp.done, lp.preempted,
            lp.rejected, lp.slab["drv_calls"], lp.slab["drv_ns"] / 1e6))
    print("\ndriver calls (Driver.stats()):")
    keys = ("reserve_calls", "create_calls", "map_calls", "set_access_calls", "unmap_calls",
            "release_calls")
    print("%-8s " % "pool" + " ".join("%11s" % k.replace("_calls", "") for k in keys))
    for lp in loops:
        print("%-8s " % lp.name + " ".join("%11d" % lp.drv[k] for k in keys))
    print("\nslab maps/unmaps (Pool.stats()): " + ", ".join(
        "%s %d/%d" % (lp.name, lp.slab["slab_maps"], lp.slab["slab_unmaps"]) for lp in loops))
    slab = loops[1]
    mean, peak = summary(slab)
    print("\nverdict: the slab maps %.2f GiB on average against the static pool's %.2f "
          "(%.1f%% saved), %.2f GiB at peak (%.2f), for %d driver calls against %d" % (
              mean / GIB, base_mean / GIB, 100.0 * (1 - mean / base_mean) if base_mean else 0.0,
              peak / GIB, base_peak / GIB, slab.slab["drv_calls"], loops[0].slab["drv_calls"]))
    print("served in %.1f s (static) and %.1f s (slab), %d steps each" % (
        loops[0].wall_s, slab.wall_s, len(slab.times)))
    if o.no_plot:
        return 0
    ok, why = plot(loops, o.plot)
    if ok:
        print("plot: %s" % o.plot)
    else:
        print("plot: skipped, matplotlib is not available (%s)" % why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
