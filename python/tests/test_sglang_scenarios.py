# SPDX-License-Identifier: MIT
"""kvslab.sglang in the scenarios of SGLang's own tests, written anew.

Each test names the SGLang test or code it mirrors: test/srt/
test_radix_cache_unit.py (TestRadixKey, TestRadixCache), the allocator
semantics of python/sglang/srt/mem_cache/allocator.py (TokenToKVPoolAllocator,
PagedTokenToKVPoolAllocator) and memory_pool.py (ReqToTokenPool), and the
scheduler's calls of radix_cache.py's cache_finished_req /
cache_unfinished_req.  Values are compared as lists so that the tests run
with torch (tensors) and without it (numpy arrays)."""
import contextlib
import gc
import sys

import numpy as np
import pytest

import kvslab
from kvslab import sglang
from kvslab.sglang import (RadixCache, RadixKey, MatchResult, InsertParams, InsertResult,
                           MatchPrefixParams, EvictParams, EvictResult, CacheInitParams,
                           TokenToKVPoolAllocator, PagedTokenToKVPoolAllocator,
                           ReqToTokenPool)

try:
    import torch
except ImportError:
    torch = None

needs_events = pytest.mark.skipif(not sglang._events_supported(),
                                  reason="this _kvslab has no KV events yet (Radix events=)")


@contextlib.contextmanager
def host_driver():
    """A host driver, closed at the end of a block that succeeded; after a
    failure it is left to the collector, which frees the pools over it
    first (they hold it), where closing it under them would crash."""
    d = kvslab.Driver("host", granularity="64K")
    yield d
    d.close()


def L(x):
    """A list of ints from a tensor, an array or a list."""
    return [int(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]


class Recorder:
    """A foreign allocator (SGLang's tests use a Mock): records frees."""

    def __init__(self):
        self.calls = []
        self.device = "cpu"

    def free(self, idx):
        self.calls.append(L(idx))

    @property
    def freed(self):
        return sorted(v for c in self.calls for v in c)


# -- TestRadixKey

def test_radix_key_like_sglangs():
    k = RadixKey([1, 2, 3, 4, 5], "extra")
    assert k.token_ids == [1, 2, 3, 4, 5] and k.extra_key == "extra"
    assert len(k) == 5 and list(k) == [1, 2, 3, 4, 5]
    s = k[1:4]
    assert isinstance(s, RadixKey) and s.token_ids == [2, 3, 4] and s.extra_key == "extra"
    assert k[-1].token_ids == [5] and isinstance(k[0], RadixKey)
    assert k[2:2].token_ids == []
    with pytest.raises(IndexError):
        RadixKey([1, 2, 3])[10]
    assert RadixKey([]).extra_key is None and len(RadixKey([])) == 0
    r = repr(RadixKey(list(range(15)), "t"))
    assert "extra_key='t'" in r and "..." in r


# -- TestRadixCache

@pytest.mark.parametrize("page_size,disable,events", [(1, False, False), (4, False, False),
                                                       (1, True, False)])
def test_init_variations(page_size, disable, events):
    """test_init_variations: both constructor forms keep the parameters."""
    for c in (RadixCache(None, None, page_size=page_size, disable=disable,
                         enable_kv_cache_events=events),
              RadixCache(CacheInitParams(page_size=page_size, disable=disable,
                                         enable_kv_cache_events=events)),
              RadixCache.create_simulated(disable=disable, page_size=page_size)):
        assert c.page_size == page_size and c.disable == disable
        assert c.enable_kv_cache_events == events
        assert c.root_node is not None
        assert str(c.device) == "cpu"
        assert c.total_size() == 0


def test_reset():
    c = RadixCache(None, None, page_size=1)
    c.insert(RadixKey([1, 2, 3]), np.array([10, 20, 30]))
    m = c.match_prefix(RadixKey([1, 2, 3]))
    assert c.total_size() == 3
    c.reset()
    assert (c.total_size(), c.evictable_size(), c.protected_size()) == (0, 0, 0)
    # A node from before the reset is gone: locking it is refused, not undefined.
    with pytest.raises(ValueError):
        c.inc_lock_ref(m.last_device_node)


@pytest.mark.parametrize("disable", [False, True])
def test_insert_and_match_basic(disable):
    c = RadixCache(None, None, page_size=1, disable=disable)
    assert c.insert(RadixKey([1, 2, 3]), np.array([10, 20, 30], dtype=np.int64)) == 0
    if disable:
        assert c.total_size() == 0
        assert len(c.match_prefix(RadixKey([1, 2, 3])).device_indices) == 0
        return
    assert c.total_size() == 3 and c.evictable_size() == 3
    m = c.match_prefix(RadixKey([1, 2, 3]))
    assert isinstance(m, MatchResult) and L(m.device_indices) == [10, 20, 30]
    assert L(c.match_prefix(RadixKey([1, 2])).device_indices) == [10, 20]
    assert m.last_host_node == m.last_device_node


def test_params_forms_return_params_results():
    """The current interface: MatchPrefixParams, InsertParams/InsertResult,
    EvictParams/EvictResult."""
    alloc = Recorder()
    c = RadixCache(CacheInitParams(token_to_kv_pool_allocator=alloc))
    r = c.insert(InsertParams(key=RadixKey([5, 6, 7]), value=np.array([1, 2, 3])))
    assert isinstance(r, InsertResult) and r.prefix_len == 0
    assert c.insert(InsertParams(key=RadixKey([5, 6, 8]), value=np.array([1, 2, 4]))) \
        == InsertResult(prefix_len=2)
    m = c.match_prefix(MatchPrefixParams(key=RadixKey([5, 6, 7, 9])))
    assert L(m.device_indices) == [1, 2, 3]
    e = c.evict(EvictParams(num_tokens=1))
    assert isinstance(e, EvictResult) and e.num_tokens_evicted >= 1
    assert alloc.freed  # what it evicted went to the allocator


def test_insert_with_none_value():
    c = RadixCache(None, None, page_size=1)
    assert c.insert(RadixKey([1, 2, 3]), None) == 0
    assert c.total_size() == 3
    # page_size 4: placeholders stay page-aligned across inserts.
    c4 = RadixCache(None, None, page_size=4)
    assert c4.insert(list(range(6))) == 0
    assert c4.insert([9] * 6) == 0
    assert c4.insert([9] * 4 + [7] * 4) == 4
    assert c4.total_size() == 12
    c4._tree.validate()


def test_total_size():
    c = RadixCache(None, None)
    assert c.total_size() == 0
    c.insert(RadixKey([1, 2, 3]), [10, 20, 30])
    assert c.total_size() == 3
    c.insert(RadixKey([4, 5]), [40, 50])
    assert c.total_size() == 5


def test_extra_key_isolation():
    """test_extra_key_isolation, with SGLang's string extra keys."""
    c = RadixCache(None, None)
    c.insert(RadixKey([1, 2, 3], "key1"), [10, 20, 30])
    c.insert(RadixKey([1, 2, 3], "key2"), [40, 50, 60])
    c.insert(RadixKey([1, 2, 3], None), [70, 80, 90])
    assert L(c.match_prefix(RadixKey([1, 2, 3], "key1")).device_indices) == [10, 20, 30]
    assert L(c.match_prefix(RadixKey([1, 2, 3], "key2")).device_indices) == [40, 50, 60]
    assert L(c.match_prefix(RadixKey([1, 2, 3], None)).device_indices) == [70, 80, 90]
    assert len(c.match_prefix(RadixKey([1, 2, 3], "nonexistent")).device_indices) == 0
    with pytest.raises(TypeError):
        c.match_prefix(RadixKey([1], 1.5))


def test_lock_ref_operations():
    """test_lock_ref_operations; the returned deltas are SGLang's: the change
    of the evictable size, negative on a lock."""
    c = RadixCache(None, None)
    c.insert(RadixKey([1, 2, 3]), [10, 20, 30])
    node = c.match_prefix(RadixKey([1, 2, 3])).last_device_node
    ev, pr = c.evictable_size(), c.protected_size()
    assert c.inc_lock_ref(node) == -3
    assert (c.protected_size(), c.evictable_size()) == (pr + 3, ev - 3)
    assert c.inc_lock_ref(node) == 0  # locked already
    assert c.dec_lock_ref(node) == 0
    assert c.dec_lock_ref(node) == 3
    assert (c.protected_size(), c.evictable_size()) == (pr, ev)
    assert c.inc_lock_ref(c.root_node) == 0  # the root is never counted
    # A disabled cache counts nothing.
    d = RadixCache(None, None, disable=True)
    assert d.inc_lock_ref(d.root_node) == 0 and d.dec_lock_ref(d.root_node) == 0


def test_evict_functionality():
    alloc = Recorder()
    c = RadixCache(None, alloc, page_size=1)
    c.insert(RadixKey([1, 2]), [10, 20])
    c.insert(RadixKey([3, 4]), [30, 40])
    before = c.total_size()
    assert c.evict(2) == 2
    assert alloc.calls and c.total_size() < before
    # LRU: [1, 2] was inserted first and not touched since.
    assert alloc.freed == [10, 20]


def test_evict_order_is_lru_and_spares_locked():
    """The self-test's eviction: least recently used leaf first, locked
    leaves never, a parent after its last child."""
    alloc = Recorder()
    c = RadixCache(None, alloc)
    c.insert([1, 2, 3], [100, 101, 102])
    c.insert([1, 2, 4], [100, 101, 103])
    c.insert([5], [200])
    c.match_prefix([1, 2, 3])  # now the most recent
    c.evict(1)
    assert alloc.freed == [103]
    lock = c.match_prefix([1, 2, 3]).last_device_node
    c.inc_lock_ref(lock)
    c.evict(100)
    assert alloc.freed == [103, 200]
    assert c.total_size() == 3 and c.evictable_size() == 0
    c.dec_lock_ref(lock)
    c.evict(100)
    assert alloc.freed == [100, 101, 102, 103, 200] and c.total_size() == 0


@pytest.mark.parametrize("page_size,n", [(1, 5), (2, 5), (4, 6)])
def test_page_alignment_boundary(page_size, n):
    c = RadixCache(None, None, page_size=page_size)
    toks = list(range(n))
    c.insert(RadixKey(toks), np.arange(64, 64 + n))
    got = len(c.match_prefix(RadixKey(toks)).device_indices)
    assert got > 0 and got % page_size == 0 and got == n // page_size * page_size


def test_pretty_print_basic(capsys):
    c = RadixCache(None, None)
    c.insert(RadixKey([1, 2, 3]), [10, 20, 30])
    c.pretty_print()
    assert "#tokens: 3" in capsys.readouterr().out


def test_locations_out_of_int32_refused():
    c = RadixCache(None, None)
    with pytest.raises(ValueError):
        c.insert([1, 2], np.array([1, 2 ** 31], dtype=np.int64))
    with pytest.raises(ValueError):
        c.insert([1, 2], [5, -1])
    assert c.total_size() == 0


def test_policies_offered():
    for p in ("lru", "lfu", "fifo", "priority", "LRU"):
        RadixCache(None, None, eviction_policy=p)
    for p in ("mru", "filo", "bogus"):
        with pytest.raises(ValueError):
            RadixCache(None, None, eviction_policy=p)


# -- KV events (test_kv_cache_events, test_kv_cache_events_with_eviction)

@needs_events
@pytest.mark.parametrize("page_size", [1, 2])
def test_kv_cache_events(page_size):
    c = RadixCache(None, None, page_size=page_size, enable_kv_cache_events=True)
    assert [type(e) for e in c.take_events()] == [sglang.AllBlocksCleared]
    c.insert(RadixKey([1, 2, 3, 4, 5]), None)
    ev = c.take_events()
    stored = [e for e in ev if isinstance(e, sglang.BlockStored)]
    assert len(stored) == 5 // page_size
    toks = [t for e in stored for t in e.token_ids]
    assert toks == [1, 2, 3, 4, 5][:5 // page_size * page_size]
    for i, e in enumerate(stored):
        assert len(e.token_ids) == e.block_size == page_size
        assert len(e.block_hashes) == 1 and e.medium == sglang.MEDIUM_GPU
        assert e.lora_id is None
        assert e.parent_block_hash == (None if i == 0 else stored[i - 1].block_hashes[0])
    assert c.take_events() == []  # taken


@needs_events
def test_kv_event_hashes_are_sglangs():
    """SGLang's hash: SHA-256 over the parent's digest and the page's tokens
    (4-byte little-endian), its first 8 bytes as a signed int64."""
    import hashlib

    def sg(tokens, prior):
        h = hashlib.sha256()
        if prior:
            h.update(bytes.fromhex(prior))
        for t in tokens:
            h.update(t.to_bytes(4, "little"))
        return h.hexdigest()

    def i64(hx):
        v = int(hx[:16], 16)
        return v - (1 << 64) if v >= 1 << 63 else v
    c = RadixCache(None, None, page_size=2, enable_kv_cache_events=True)
    c.take_events()
    c.insert([7, 8, 9, 10], [0, 1, 2, 3])
    c.insert([7, 8, 11, 12], [0, 1, 4, 5])  # under the first page
    ev = c.take_events()
    h1 = sg([7, 8], None)
    h2 = sg([9, 10], h1)
    h3 = sg([11, 12], h1)
    assert [e.block_hashes[0] for e in ev] == [i64(h1), i64(h2), i64(h3)]
    assert ev[2].parent_block_hash == i64(h1)


@needs_events
def test_kv_cache_events_with_eviction_and_reset():
    alloc = Recorder()
    c = RadixCache(None, alloc, page_size=1, enable_kv_cache_events=True)
    c.insert(RadixKey([1, 2, 3]), [10, 20, 30])
    c.evict(3)
    ev = c.take_events()
    names = [type(e).__name__ for e in ev]
    assert names.count("BlockStored") == 3 and names.count("BlockRemoved") == 3
    stored = {e.block_hashes[0] for e in ev if isinstance(e, sglang.BlockStored)}
    assert {e.block_hashes[0] for e in ev if isinstance(e, sglang.BlockRemoved)} == stored
    c.insert([4], [40])
    c.reset()
    ev = c.take_events()
    assert [type(e).__name__ for e in ev] == ["BlockStored", "AllBlocksCleared"]


def test_events_off_gives_empty_list():
    c = RadixCache(None, None, enable_kv_cache_events=False)
    c.insert([1, 2, 3])
    assert c.take_events() == []


# -- the allocators (allocator.py)

@pytest.fixture
def pool():
    """Pools over one host driver, left to the collector (see host_driver)."""
    d = kvslab.Driver("host", granularity="64K")
    return lambda page_size=1: kvslab.Pool(d, "tiny", page_size=page_size, max_tokens=4096)


def test_allocator_sizes_and_padded_slot(pool):
    """TokenToKVPoolAllocator: slot 0 is never handed out, available_size
    starts at size, alloc returns None when short and takes nothing."""
    a = TokenToKVPoolAllocator(1000, None, "cpu", pool(), False)
    assert a.size == 1000 and a.available_size() == 1000 and a.page_size == 1
    got = a.alloc(1000)
    assert len(got) == 1000 and 0 not in set(L(got))
    assert a.alloc(1) is None and a.available_size() == 0
    a.free(got[:10])
    assert a.available_size() == 10
    assert a.alloc(11) is None and a.available_size() == 10
    a.free(got[10:])
    assert a.available_size() == 1000
    a.free(got[:0])  # an empty free is nothing
    a.close()
    # Over a whole pool: every location but the padded slot's page.
    p = pool()
    a = TokenToKVPoolAllocator(p)
    assert a.size == p.capacity - 1
    got = a.alloc(a.size)
    assert len(got) == a.size and 0 not in set(L(got)) and a.alloc(1) is None
    a.free(got)
    a.close()


def test_allocator_free_group(pool):
    """free_group_begin/end: frees in between are held and made at the end."""
    a = TokenToKVPoolAllocator(pool())
    x, y = a.alloc(4), a.alloc(4)
    n = a.available_size()
    a.free_group_begin()
    a.free(x)
    a.free(y)
    assert a.available_size() == n
    a.free_group_end()
    assert a.available_size() == n + 8 and a.free_group == []
    a.close()


def test_allocator_backup_restore(pool):
    """backup_state/restore_state: what was allocated after the backup is
    free again after the restore (SGLang's speculative decoding)."""
    a = TokenToKVPoolAllocator(pool())
    keep = a.alloc(5)
    n = a.available_size()
    st = a.backup_state()
    a.alloc(7)
    b = a.alloc(3)
    a.free(b)  # a free in between stays made
    assert a.available_size() == n - 7
    a.restore_state(st)
    assert a.available_size() == n
    with pytest.raises(ValueError):
        a.restore_state(("nope", 0, 0))
    a.free(keep)
    a.close()


def test_paged_allocator_like_sglangs(pool):
    """PagedTokenToKVPoolAllocator: page-aligned allocations, whole pages
    in order; free() gives back every page touched, once, whatever the
    order and repetitions of its entries (SGLang's unique(idx // page))."""
    p = pool(4)
    a = PagedTokenToKVPoolAllocator(400, 4, None, "cpu", p, False)
    assert a.available_size() == 400
    got = L(a.alloc(8))
    assert len(got) == 8 and got[0] % 4 == 0 and got[:4] == list(range(got[0], got[0] + 4))
    assert 0 not in got
    assert len(a.alloc(6)) == 4  # need_size // page_size pages, as SGLang's
    assert a.available_size() == 400 - 12
    # Entries of one page, not adjacent and repeated: still one free per page.
    a.free(np.array([got[0], got[5], got[1], got[0] + 3, got[6]]))
    assert a.available_size() == 400 - 4
    a.close()


def test_alloc_extend_and_decode(pool):
    """alloc_extend fills the rest of each request's last page from last_loc
    and then new pages; alloc_decode gives the next slot of the last page or
    the first of a new one."""
    ps = 4
    a = PagedTokenToKVPoolAllocator(400, ps, kvcache=pool(ps))
    base = L(a.alloc(4))  # request 0 holds one page, 3 tokens used
    pre = np.array([3, 0])
    seq = np.array([9, 2])
    last = np.array([base[2], -1])
    n = a.available_size()
    out = L(a.alloc_extend(pre, pre, seq, seq, last, 8))
    assert len(out) == 8
    assert out[0] == base[3]  # the rest of request 0's page
    assert out[1] % ps == 0 and out[1:5] == list(range(out[1], out[1] + 4))
    assert out[5] % ps == 0  # request 0's third page, partial
    assert out[6] % ps == 0 and out[7] == out[6] + 1  # request 1: a new page
    assert a.available_size() == n - 3 * ps
    assert len(set(out)) == 8
    # Decode: request 0 is at 9 tokens (last at out[5]), request 1 at 2.
    seq = np.array([10, 3, 5])
    last = np.array([out[5], out[7], base[3]])
    d = L(a.alloc_decode(seq, seq, last))
    assert d[0] == out[5] + 1 and d[1] == out[7] + 1
    assert d[2] % ps == 0 and a.available_size() == n - 4 * ps  # 5th token: a new page
    # Short: None, nothing taken.
    m = a.available_size() // ps
    big = np.array([4 * (m + 1)])
    assert a.alloc_extend(np.array([0]), np.array([0]), big, big, np.array([-1]),
                          int(big[0])) is None
    assert a.available_size() == n - 4 * ps
    # What they gave are the allocator's pages: freeing them gives all back.
    a.free(np.array(base + out + d))
    assert a.available_size() == 400
    a.close()


def test_allocator_made_from_a_size():
    a = TokenToKVPoolAllocator(128)
    assert a.available_size() == 128
    x = a.alloc(128)
    assert a.alloc(1) is None
    a.free(x)
    a.clear()
    assert a.available_size() == 128
    y = a.alloc(1)
    with pytest.raises(RuntimeError):
        a.clear()  # an allocation is out
    a.free(y)
    a.close()


# -- ReqToTokenPool (memory_pool.py)

def test_req_to_token_pool_like_sglangs():
    with host_driver() as d:
        rtp = ReqToTokenPool(4, 32, d)
        assert rtp.available_size() == 4
        s = rtp.alloc(3)
        assert len(s) == 3 and rtp.available_size() == 1
        assert rtp.alloc(2) is None and rtp.available_size() == 1
        rtp.write((s[0], slice(2, 5)), np.array([7, 8, 9], dtype=np.int64))
        assert L(rtp.req_to_token[s[0], 2:5]) == [7, 8, 9]
        rtp.free(s[0])
        rtp.free(s[1:])
        assert rtp.available_size() == 4
        rtp.alloc(2)
        rtp.clear()
        assert rtp.available_size() == 4
        rtp.close()


# -- the scheduler's calls (radix_cache.py cache_finished_req / cache_unfinished_req)

class Req:
    """The fields of SGLang's Req that the cache reads and writes."""

    def __init__(self, ids, extra_key=None):
        self.origin_input_ids = list(ids)
        self.output_ids = []
        self.fill_ids = list(ids)
        self.prefix_indices = np.zeros(0, dtype=np.int64)
        self.last_node = None
        self.req_pool_idx = None
        self.extra_key = extra_key
        self.cache_protected_len = 0


class Engine:
    """Just enough of SGLang's scheduler to drive the three objects."""

    def __init__(self, drv, page_size):
        self.pool = kvslab.Pool(drv, "tiny", page_size=page_size, max_tokens=4096)
        self.alloc = TokenToKVPoolAllocator(self.pool)
        self.rtp = ReqToTokenPool(8, 512, drv)
        self.tree = RadixCache(self.rtp, self.alloc, page_size=page_size)
        self.ps = page_size
        self.free0 = self.alloc.available_size()

    def prefill(self, req, upto=None):
        """Match, lock, and give the request locations up to ``upto`` tokens
        (a chunk), partial last page included."""
        if req.req_pool_idx is None:
            m = self.tree.match_prefix(RadixKey(req.fill_ids, req.extra_key))
            req.prefix_indices, req.last_node = m.device_indices, m.last_device_node
            req.cache_protected_len = len(req.prefix_indices)
            self.tree.inc_lock_ref(req.last_node)
            req.req_pool_idx = self.rtp.alloc(1)[0]
            self.rtp.write((req.req_pool_idx, slice(0, len(req.prefix_indices))),
                           req.prefix_indices)
        have = len(req.prefix_indices)
        upto = len(req.origin_input_ids) if upto is None else upto
        self._extend(req, have, upto)
        req.fill_ids = req.origin_input_ids[:upto]

    def _extend(self, req, have, upto):
        ps = self.ps
        row = self.rtp.req_to_token[req.req_pool_idx]
        last = int(row[have - 1]) if have else -1
        pre = np.array([have])
        seq = np.array([upto])
        new = self.alloc.alloc_extend(pre, pre, seq, seq, np.array([last]), upto - have) \
            if ps > 1 else self.alloc.alloc(upto - have)
        assert new is not None
        self.rtp.write((req.req_pool_idx, slice(have, upto)), new)

    def decode(self, req, outputs):
        pos = len(req.origin_input_ids)
        for t in outputs[:-1]:
            self._extend(req, pos, pos + 1)
            pos += 1
        req.output_ids = list(outputs)

    def finish(self, req):
        self.tree.cache_finished_req(req)
        self.rtp.free(req.req_pool_idx)  # the scheduler's, after the cache's call

    def leaked(self):
        """Locations neither free nor the tree's (0 when nothing leaked)."""
        return self.free0 - self.alloc.available_size() - self.tree.total_size()

    def close(self):
        self.tree.close()
        self.rtp.close()
        self.alloc.close()
        self.pool.close()


@pytest.mark.parametrize("ps", [1, 4])
def test_requests_through_the_scheduler_calls(ps):
    with host_driver() as d:
        e = Engine(d, ps)
        a = Req(range(100, 141))
        e.prefill(a)
        e.decode(a, [7, 8, 9])
        e.finish(a)
        cached = (41 + 2) // ps * ps
        assert e.tree.total_size() == cached and e.leaked() == 0
        assert e.rtp.available_size() == 8
        # B shares A's first 30 tokens: the whole pages of them hit.
        b = Req(list(range(100, 130)) + list(range(900, 921)))
        e.prefill(b)
        assert len(b.prefix_indices) == 30 // ps * ps
        assert L(e.rtp.req_to_token[b.req_pool_idx, :len(b.prefix_indices)]) == \
            L(b.prefix_indices)
        assert e.tree.protected_size() == len(b.prefix_indices)
        e.decode(b, [1, 2])
        e.finish(b)
        assert e.tree.protected_size() == 0 and e.leaked() == 0
        e.tree.evict(e.tree.total_size())
        assert e.alloc.available_size() == e.free0
        e.close()


@pytest.mark.parametrize("ps", [1, 4])
def test_chunked_prefill_keeps_nothing_twice(ps):
    """Chunked prefill: cache_unfinished_req after each chunk rewrites the
    row with the tree's locations, moves the lock, and keeps the partial
    page with the request (cache_protected_len); nothing leaks and nothing
    is freed twice when a second request computed the same prefix."""
    with host_driver() as d:
        e = Engine(d, ps)
        ids = list(range(500, 563))  # 63 tokens
        twin = Req(ids[:30])
        e.prefill(twin)
        e.decode(twin, [5])
        r = Req(ids)
        e.prefill(r, 13)  # both computed [0, 13) separately
        e.tree.cache_finished_req(twin)  # twin's 30 (less the last) cached first
        e.rtp.free(twin.req_pool_idx)
        e.tree.cache_unfinished_req(r)
        assert r.cache_protected_len == 13 // ps * ps
        assert len(r.prefix_indices) == 13
        row = L(e.rtp.req_to_token[r.req_pool_idx, :13])
        assert row == L(r.prefix_indices)
        assert e.tree.protected_size() == r.cache_protected_len
        for upto in (29, 50, 63):
            e.prefill(r, upto)
            e.tree.cache_unfinished_req(r)
            assert r.cache_protected_len == upto // ps * ps
            # Held by the request alone: its partial last page.
            assert e.leaked() == (ps if upto % ps else 0)
        e.decode(r, [3])
        e.finish(r)
        assert e.tree.protected_size() == 0
        assert e.leaked() == 0
        e.tree.evict(e.tree.total_size())
        assert e.alloc.available_size() == e.free0
        e.close()


def test_disabled_cache_frees_the_request():
    with host_driver() as d:
        pool = kvslab.Pool(d, "tiny", max_tokens=4096)
        alloc = TokenToKVPoolAllocator(pool)
        rtp = ReqToTokenPool(2, 64, d)
        tree = RadixCache(rtp, alloc, disable=True)
        free0 = alloc.available_size()
        r = Req(range(10))
        m = tree.match_prefix(r.fill_ids)
        assert len(m.device_indices) == 0 and m.last_device_node == tree.root_node
        r.last_node = m.last_device_node
        r.req_pool_idx = rtp.alloc(1)[0]
        rtp.write((r.req_pool_idx, slice(0, 10)), alloc.alloc(10))
        r.output_ids = [1]
        # insert() of a disabled cache keeps nothing and frees nothing.
        assert tree.insert(list(range(10)), rtp.req_to_token[r.req_pool_idx, :10]) == 0
        assert alloc.available_size() == free0 - 10
        tree.cache_finished_req(r)
        assert alloc.available_size() == free0 and tree.total_size() == 0
        rtp.free(r.req_pool_idx)
        tree.close()
        rtp.close()
        alloc.close()
        pool.close()


# -- reference counts of what the drop-ins return

def _refcount_steady(fn, rounds=200):
    """Call fn() many times; the reference counts of what it returns and of
    the objects it is handed must not grow."""
    fn()
    gc.collect()
    before = sys.gettotalrefcount() if hasattr(sys, "gettotalrefcount") else None
    objs = [fn() for _ in range(3)]
    counts = [sys.getrefcount(o) for o in objs]
    for _ in range(rounds):
        fn()
    gc.collect()
    assert [sys.getrefcount(o) for o in objs] == counts
    if before is not None:  # a debug build: the interpreter's total too
        assert sys.gettotalrefcount() - before < 100


def test_refcounts_of_returned_objects():
    c = RadixCache(None, None)
    key = list(range(64))
    vals = np.arange(1000, 1064, dtype=np.int64)
    c.insert(key, vals)
    m1 = c.match_prefix(key)
    m2 = c.match_prefix(key)
    # Fresh objects each call, not one shared buffer that a later call rewrites.
    assert m1.device_indices is not m2.device_indices
    if torch is not None:
        assert m1.device_indices.data_ptr() != m2.device_indices.data_ptr()
    else:
        assert not np.shares_memory(m1.device_indices, m2.device_indices)
    assert m1.last_device_node == m2.last_device_node
    # What we handed in is not kept: its count is back where it was.
    rk, rv = sys.getrefcount(key), sys.getrefcount(vals)
    for _ in range(100):
        c.match_prefix(key)
        c.insert(key, vals)
    gc.collect()
    assert (sys.getrefcount(key), sys.getrefcount(vals)) == (rk, rv)
    _refcount_steady(lambda: c.match_prefix(key))
    _refcount_steady(lambda: c.match_prefix(key).device_indices)
    _refcount_steady(lambda: c.insert(InsertParams(key=RadixKey(key), value=vals)))
    with host_driver() as d, \
            kvslab.Pool(d, "tiny", max_tokens=4096) as p:
        a = TokenToKVPoolAllocator(p)

        def cycle():
            x = a.alloc(16)
            a.free(x)
            return x
        _refcount_steady(cycle)
        a.close()


# -- HiRadixCache (hiradix_cache.py): the host tier under the device tree

def _settle(tree, rounds=20000):
    """Poll until no copy is pending (write-through backups, loads)."""
    import time
    for _ in range(rounds):
        tree.check_hicache_events()
        u = tree._tree.usage()
        if not u["backups_pending"] and not u["loads_pending"]:
            return
        time.sleep(0.0005)
    raise AssertionError("copies never completed")


@pytest.fixture
def hicache():
    d = kvslab.Driver("host", granularity="64K")
    made = []

    def make(page_size=1, **kw):
        p = kvslab.Pool(d, "tiny", page_size=page_size, max_tokens=4096)
        a = TokenToKVPoolAllocator(p)
        t = sglang.HiRadixCache(CacheInitParams(token_to_kv_pool_allocator=a,
                                                page_size=page_size,
                                                enable_kv_cache_events=kw.pop("events",
                                                                              False)),
                                **kw)
        made.append((t, a, p))
        return t, a
    yield make
    for t, a, p in made:  # left to the collector after a failure (see host_driver)
        t.close()
        a.close()
        p.close()
    d.close()


@pytest.mark.parametrize("ps", [1, 4])
def test_hiradix_device_eviction_then_host_hit_and_load_back(hicache, ps):
    """SGLang's HiCache path: a write-through node evicted from the device is
    still matched on the host (host_hit_length, last_host_node); loading it
    back gives new device indices, and then the device match has it all."""
    t, a = hicache(ps, hicache_ratio=2.0, hicache_write_policy="write_through")
    key = list(range(300, 340))
    n = len(key) // ps * ps
    locs = a.alloc(n)
    assert t.insert(RadixKey(key[:n]), locs) == 0
    _settle(t)
    free = a.available_size()
    assert t.evict(n) == n and t.total_size() == 0
    assert a.available_size() == free + n  # the device pages went back
    m = t.match_prefix(RadixKey(key))
    assert len(m.device_indices) == 0 and m.host_hit_length == n
    assert m.last_device_node == t.root_node and m.last_host_node != t.root_node
    loaded, node = t.init_load_back(m.last_host_node, m.host_hit_length)
    _settle(t)
    assert len(loaded) == n and a.available_size() == free
    m2 = t.match_prefix(RadixKey(key))
    assert L(m2.device_indices) == L(loaded) and m2.host_hit_length == 0
    assert node == m2.last_device_node
    # Locks count what SGLang counts.
    assert t.inc_lock_ref(node) == -n and t.protected_size() == n
    assert t.evictable_size() == 0
    assert t.evict(n) == 0  # locked
    assert t.dec_lock_ref(node) == n and t.evictable_size() == n


def test_hiradix_lock_accounting_over_shared_paths(hicache):
    t, a = hicache(1)
    t.insert([1, 2, 3, 4], a.alloc(4))
    t.insert([1, 2, 5], np.concatenate([L(t.match_prefix([1, 2]).device_indices),
                                        L(a.alloc(1))]))
    n1 = t.match_prefix([1, 2, 3, 4]).last_device_node
    n2 = t.match_prefix([1, 2, 5]).last_device_node
    assert t.inc_lock_ref(n1) == -4
    assert t.inc_lock_ref(n2) == -1  # [1, 2] protected already
    assert t.inc_lock_ref(n2) == 0
    assert t.protected_size() == 5 and t.evictable_size() == 0
    assert t.dec_lock_ref(n1) == 2
    assert t.dec_lock_ref(n2) == 0
    assert t.dec_lock_ref(n2) == 3 and t.protected_size() == 0


def test_hiradix_host_eviction_and_events(hicache):
    """evict_host drops host copies of nodes not on the device; events
    come from both tiers (GPU for device pages, CPU for host copies)."""
    t, a = hicache(1, events=True)
    assert [type(e) for e in t.take_events()] == [sglang.AllBlocksCleared]
    t.insert([7, 8, 9], a.alloc(3))
    _settle(t)
    t.evict(3)
    assert t.evict_host(3) == 3
    assert t.match_prefix([7, 8, 9]).host_hit_length == 0
    ev = t.take_events()
    media = {(type(e).__name__, e.medium) for e in ev}
    assert media == {("BlockStored", "GPU"), ("BlockStored", "CPU"),
                     ("BlockRemoved", "GPU"), ("BlockRemoved", "CPU")}
    # One SGLang hash per page on both tiers.
    st = {e.medium: [x.block_hashes[0] for x in ev
                     if isinstance(x, sglang.BlockStored) and x.medium == e.medium]
          for e in ev}
    assert st["GPU"] == st["CPU"] and len(st["GPU"]) == 3


def test_hiradix_storage_prefetch(hicache, tmp_path):
    """--hicache-storage-backend file: a second cache finds the pages in
    the store, prefetches them to the host, then loads them."""
    t1, a1 = hicache(1, hicache_storage_backend="file",
                     hicache_storage_backend_extra_config={"storage_dir": str(tmp_path)},
                     hicache_storage_prefetch_policy="wait_complete", prefetch_threshold=16)
    key = list(range(9000, 9064))
    t1.insert(key, a1.alloc(64))
    _settle(t1)
    t1._tree.l3_wait()
    t2, a2 = hicache(1, hicache_storage_backend="file://%s" % tmp_path,
                     hicache_storage_prefetch_policy="wait_complete", prefetch_threshold=16)
    m = t2.match_prefix(key)
    assert len(m.device_indices) == 0 and m.host_hit_length == 0
    assert t2.prefetch_from_storage("rid-1", m.last_host_node, key) == 64
    import time
    end = time.monotonic() + 60
    while not t2.check_prefetch_progress("rid-1"):
        assert time.monotonic() < end
        time.sleep(0.001)
    m = t2.match_prefix(key)
    assert m.host_hit_length == 64
    loaded, node = t2.init_load_back(m.last_host_node, m.host_hit_length)
    _settle(t2)
    assert len(loaded) == 64


def test_hiradix_argument_errors():
    d = kvslab.Driver("host", granularity="64K")
    p = kvslab.Pool(d, "tiny", max_tokens=4096)
    with pytest.raises(TypeError):
        sglang.HiRadixCache(None, None)  # no kvslab allocator
    a = TokenToKVPoolAllocator(p)
    with pytest.raises(ValueError):
        sglang.HiRadixCache(None, a, hicache_storage_backend="mooncake")
    with pytest.raises(ValueError):
        sglang.HiRadixCache(None, a, hicache_write_policy="write_sometimes")
    with pytest.raises(ValueError):
        sglang.HiRadixCache(None, a, eviction_policy="lfu")
    a.close()
    p.close()
    d.close()
