# SPDX-License-Identifier: MIT
"""kvslab.sglang against the behaviour of SGLang's RadixCache and its
token-to-KV allocator, in scenarios written from SGLang's own unit tests
(test/srt/test_radix_cache_unit.py and the radix_cache.py self-test):
same prefix lengths, sizes and lock accounting."""
import numpy as np
import pytest

import kvslab
from kvslab.sglang import RadixCache, TokenToKVPoolAllocator, MatchResult, ReqToTokenPool


class FakeAllocator:
    """What SGLang's RadixCache frees into; records what it got."""

    def __init__(self):
        self.freed = []

    def free(self, idx):
        self.freed.extend(np.asarray(idx).tolist())


def test_strings_like_sglangs_self_test():
    tree = RadixCache(None, None, page_size=1, disable=False)
    assert tree.insert("Hello") == 0
    assert tree.insert("Hello") == 5
    assert tree.insert("Hello_L.A.!") == 5
    assert tree.insert("Hello_world! Happy") == 6
    assert tree.insert("I love you!") == 0
    m = tree.match_prefix("I love you! aha")
    assert isinstance(m, MatchResult)
    assert len(m.device_indices) == 11
    assert str(m.device_indices.dtype) in ("int64", "torch.int64")
    # Without values, distinct placeholder locations (see the module's notes).
    assert len(set(m.device_indices.tolist())) == 11
    assert tree.total_size() == 5 + 1 + 5 + 12 + 11
    assert tree.evictable_size() == tree.total_size()
    assert tree.protected_size() == 0


def test_match_empty_and_partial():
    tree = RadixCache(None, None)
    m = tree.match_prefix([1, 2, 3])
    assert len(m.device_indices) == 0
    assert m.last_device_node == tree.root_node
    tree.insert([1, 2, 3], [7, 8, 9])
    m = tree.match_prefix([1, 2, 4])
    assert m.device_indices.tolist() == [7, 8]


def test_lock_ref_accounting():
    tree = RadixCache(None, None)
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    tree.insert([1, 2, 5], [10, 11, 14])
    m = tree.match_prefix([1, 2, 3, 4])
    # SGLang's deltas: the change of the evictable size.
    assert tree.inc_lock_ref(m.last_device_node) == -4
    assert tree.protected_size() == 4 and tree.evictable_size() == 1
    m2 = tree.match_prefix([1, 2, 5])
    assert tree.inc_lock_ref(m2.last_device_node) == -1  # [1, 2] locked already
    assert tree.dec_lock_ref(m.last_device_node) == 2
    assert tree.dec_lock_ref(m2.last_device_node) == 3
    assert tree.protected_size() == 0


def test_evict_lru_frees_through_the_allocator():
    alloc = FakeAllocator()
    tree = RadixCache(None, alloc)
    tree.insert([1, 2, 3], [100, 101, 102])
    tree.insert([4, 5], [200, 201])
    tree.insert([6], [300])
    tree.match_prefix([1, 2, 3])  # touched: most recently used
    assert tree.evict(2) >= 2
    assert sorted(alloc.freed) == [200, 201]  # the least recently used leaf
    assert tree.match_prefix([1, 2, 3]).device_indices.tolist() == [100, 101, 102]
    # A locked leaf is never evicted.
    m = tree.match_prefix([1, 2, 3])
    tree.inc_lock_ref(m.last_device_node)
    tree.evict(100)
    assert sorted(alloc.freed) == [200, 201, 300]
    assert tree.total_size() == 3
    tree.dec_lock_ref(m.last_device_node)
    tree.evict(100)
    assert sorted(alloc.freed) == [100, 101, 102, 200, 201, 300]
    assert tree.total_size() == 0


def test_page_size_truncates_like_sglang():
    tree = RadixCache(None, None, page_size=4)
    assert tree.insert(list(range(10)), list(range(100, 110))) == 0
    # Only whole pages are cached, and matched.
    assert tree.total_size() == 8
    assert len(tree.match_prefix(list(range(10))).device_indices) == 8
    assert len(tree.match_prefix(list(range(7))).device_indices) == 4


def test_disabled_cache():
    tree = RadixCache(None, None, disable=True)
    assert tree.insert([1, 2, 3]) == 0
    assert len(tree.match_prefix([1, 2, 3]).device_indices) == 0
    assert tree.total_size() == 0


def test_reset_drops_everything():
    tree = RadixCache(None, None)
    tree.insert([1, 2, 3])
    tree.reset()
    assert tree.total_size() == 0
    assert len(tree.match_prefix([1, 2, 3]).device_indices) == 0


def test_allocator_over_a_kvslab_pool():
    with kvslab.Driver("host", granularity="64K") as d, \
            kvslab.Pool(d, "tiny", page_size=1, max_tokens=4096) as p:
        alloc = TokenToKVPoolAllocator(p)
        size = alloc.available_size()
        idx = alloc.alloc(32)
        assert str(idx.dtype) in ("int64", "torch.int64") and len(idx) == 32
        assert alloc.alloc(size) is None  # short: None, as SGLang's
        tree = RadixCache(None, alloc)
        key = list(range(500, 532))
        assert tree.insert(key, idx) == 0
        assert alloc.available_size() == size - 32
        assert tree.evict(32) == 32  # freed into the pool by the tree
        assert alloc.available_size() == size
        tree.close()


def test_extra_keys_separate_prefixes():
    class Key:
        def __init__(self, ids, extra):
            self.token_ids, self.extra_key = ids, extra
    tree = RadixCache(None, None)
    tree.insert(Key([1, 2, 3], 0), [7, 8, 9])
    assert len(tree.match_prefix(Key([1, 2, 3], 5)).device_indices) == 0
    assert len(tree.match_prefix(Key([1, 2, 3], 0)).device_indices) == 3
    # SGLang's extra keys are strings (LoRA ids, cache salts).
    tree.insert(Key([1, 2, 3], "lora-a"), [4, 5, 6])
    assert np.asarray(tree.match_prefix(Key([1, 2, 3], "lora-a")).device_indices).tolist() \
        == [4, 5, 6]
    assert len(tree.match_prefix(Key([1, 2, 3], "lora-b")).device_indices) == 0
    with pytest.raises(TypeError):
        tree.match_prefix(Key([1], 2.5))


class Req:
    """The fields of SGLang's Req that the cache reads and writes."""

    def __init__(self, input_ids):
        self.origin_input_ids = list(input_ids)
        self.output_ids = []
        self.fill_ids = list(input_ids)
        self.prefix_indices = np.zeros(0, dtype=np.int64)
        self.last_node = None
        self.req_pool_idx = None


def _serve(tree, rtp, alloc, req):
    """What SGLang's scheduler does for a request's prefill."""
    m = tree.match_prefix(req.fill_ids)
    req.prefix_indices, req.last_node = m.device_indices, m.last_device_node
    tree.inc_lock_ref(req.last_node)
    req.req_pool_idx = rtp.alloc(1)[0]
    n = len(req.fill_ids) - len(req.prefix_indices)
    new = alloc.alloc(n)
    rtp.write((req.req_pool_idx, slice(0, len(req.prefix_indices))), req.prefix_indices)
    rtp.write((req.req_pool_idx, slice(len(req.prefix_indices), len(req.fill_ids))), new)
    return new


def _decode(rtp, alloc, req, outputs):
    """Decode steps: each generated token but the last gets its KV location."""
    pos = len(req.fill_ids)
    for t in outputs[:-1]:
        loc = alloc.alloc(1)
        rtp.write((req.req_pool_idx, slice(pos, pos + 1)), loc)
        pos += 1
    req.output_ids = list(outputs)


def test_requests_through_the_scheduler_calls():
    with kvslab.Driver("host", granularity="64K") as d, \
            kvslab.Pool(d, "tiny", page_size=1, max_tokens=4096) as p:
        alloc = TokenToKVPoolAllocator(p)
        rtp = ReqToTokenPool(8, 256, d)
        tree = RadixCache(rtp, alloc)
        free0 = alloc.available_size()
        a = Req(range(100, 140))
        _serve(tree, rtp, alloc, a)
        _decode(rtp, alloc, a, [7, 8, 9])
        tree.cache_finished_req(a)  # caches input + outputs[:-1]
        rtp.free(a.req_pool_idx)  # the scheduler's, after the cache's call
        assert tree.total_size() == 42
        assert rtp.available_size() == 8
        # B shares A's first 30 tokens: a prefix hit of 30.
        b = Req(list(range(100, 130)) + list(range(900, 920)))
        new_b = _serve(tree, rtp, alloc, b)
        assert len(b.prefix_indices) == 30 and len(new_b) == 20
        row = rtp.req_to_token[b.req_pool_idx, :50]
        assert row[:30].tolist() == list(b.prefix_indices)
        # Chunked prefill: cache the 50 computed so far, keep them locked.
        tree.cache_unfinished_req(b)
        assert len(b.prefix_indices) == 50
        assert tree.protected_size() == 50
        assert rtp.req_to_token[b.req_pool_idx, :50].tolist() == list(b.prefix_indices)
        _decode(rtp, alloc, b, [1])
        tree.cache_finished_req(b)
        rtp.free(b.req_pool_idx)
        assert tree.protected_size() == 0
        assert rtp.available_size() == 8
        # Every location is the tree's or free: nothing leaked.
        assert alloc.available_size() + tree.total_size() == free0
        tree.evict(tree.total_size())
        assert alloc.available_size() == free0
        tree.close()
        del row  # a view of the table keeps it open
        rtp.close()
        with pytest.raises(ValueError):
            rtp.available_size()
