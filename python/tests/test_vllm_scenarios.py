# SPDX-License-Identifier: MIT
"""kvslab.vllm.BlockPool in the scenarios of vLLM's
tests/v1/core/test_prefix_caching.py (commit 003df2961dd8), written anew at
the BlockPool level (the calls vLLM's KVCacheManager makes): each test
names the vLLM test it mirrors.  Block ids are kvslab pool pages, so the
tests check which blocks are hit, held, cached and evicted, never the ids
vLLM would number 1, 2, 3."""
import gc
import sys

import pytest

from kvslab import vllm
from kvslab.vllm import BlockPool, RequestBlockHasher, get_block_hash, get_group_id

BS = 16
needs_events = pytest.mark.skipif(not vllm._events_supported(),
                                  reason="this _kvslab has no KV events yet (HCache events=)")


class Request:
    """The fields of vLLM's Request that the pool and the hasher read."""

    def __init__(self, tokens, hasher, cache_salt=None, lora_request=None):
        self.all_token_ids = list(tokens)
        self.cache_salt = cache_salt
        self.lora_request = lora_request
        self.block_hashes = []
        self.block_hashes = hasher(self)
        self.blocks = []


@pytest.fixture
def hasher():
    return RequestBlockHasher(BS, "sha256_cbor", seed="0")


def admit(pool, req):
    """vLLM's get_computed_blocks + allocate_slots on the pool: the hits
    (touched), then new blocks for the rest; caches the full blocks."""
    hits = []
    for h in req.block_hashes[:(len(req.all_token_ids) - 1) // BS]:
        b = pool.get_cached_block(h, [0])
        if b is None:
            break
        hits.append(b[0])
    pool.touch((hits,))
    need = -(-len(req.all_token_ids) // BS) - len(hits)
    req.blocks = hits + pool.get_new_blocks(need)
    pool.cache_full_blocks(req, req.blocks, len(hits), len(req.all_token_ids) // BS, BS, 0)
    return hits


def release(pool, req):
    """vLLM's KVCacheManager.free: the blocks, last first."""
    pool.free_blocks(reversed(req.blocks))
    req.blocks = []


def common(n):
    return [i for i in range(n) for _ in range(BS)]


def test_prefill(hasher):
    """test_prefill: full blocks get the chained hashes, the partial block
    none; a second request hits the common prefix while the first holds it
    and after it freed it; then a miss evicts the cached blocks last, the
    end of the longest prefix first."""
    pool = BlockPool(11, True, block_size=BS)
    assert pool.get_num_free_blocks() == 10  # the null block is used
    r0 = Request(common(3) + [3] * 7, hasher)
    assert admit(pool, r0) == []
    assert len(r0.block_hashes) == 3 and len(r0.blocks) == 4
    parent = None
    for i, b in enumerate(r0.blocks[:3]):
        parent = vllm.hash_block_tokens(hasher._h, parent, r0.all_token_ids[i * BS:(i + 1) * BS],
                                        start=i * BS)
        assert get_block_hash(b.block_hash) == parent and get_group_id(b.block_hash) == 0
        assert b.ref_cnt == 1
    assert r0.blocks[3].block_hash is None and r0.blocks[3].ref_cnt == 1
    # Hit while r0 still holds the blocks.
    r1 = Request(common(3) + [3] * 5, hasher)
    hits = admit(pool, r1)
    assert hits == r0.blocks[:3] and all(b.ref_cnt == 2 for b in hits)
    assert len(r1.blocks) == 4 and r1.blocks[3] not in r0.blocks
    assert pool.get_num_free_blocks() == 5
    release(pool, r0)
    release(pool, r1)
    assert pool.get_num_free_blocks() == 10
    # Hit after they were freed: they leave the free queue.
    r2 = Request(common(3) + [3] * 6, hasher)
    assert admit(pool, r2) == hits
    assert pool.get_num_free_blocks() == 6 and all(b.ref_cnt == 1 for b in hits)
    release(pool, r2)
    # A miss of 8 blocks takes the 7 never-cached ones and evicts one
    # cached block: the end of the prefix (freed first).
    r3 = Request([99] * (BS * 8), hasher)
    assert admit(pool, r3) == []
    assert pool.get_cached_block(r2.block_hashes[2], [0]) is None
    assert pool.get_cached_block(r2.block_hashes[1], [0]) == [hits[1]]
    assert pool.get_cached_block(r2.block_hashes[0], [0]) == [hits[0]]
    # The evicted block went to r3, which cached it under its own hash.
    assert hits[2] in r3.blocks and get_block_hash(hits[2].block_hash) in r3.block_hashes
    assert pool.get_num_free_blocks() == 2
    release(pool, r3)
    pool.close()


def test_prefill_not_enough_free_blocks(hasher):
    """test_prefill_not_enough_free_blocks_with_computed_blocks: a request
    that cannot get its blocks gets none, and the pool is as it was."""
    pool = BlockPool(5, True, block_size=BS)
    r0 = Request(common(3), hasher)
    admit(pool, r0)
    free = pool.get_num_free_blocks()
    with pytest.raises(ValueError):
        pool.get_new_blocks(free + 1)
    assert pool.get_num_free_blocks() == free
    assert all(pool.get_cached_block(h, [0]) for h in r0.block_hashes)
    release(pool, r0)
    pool.close()


def test_evict_lru_across_requests(hasher):
    """test_evict: blocks freed earlier are evicted earlier."""
    pool = BlockPool(9, True, block_size=BS)
    a = Request([1] * BS + [2] * BS, hasher)
    b = Request([5] * BS + [6] * BS, hasher)
    admit(pool, a)
    admit(pool, b)
    release(pool, a)  # a's blocks queue first
    release(pool, b)
    assert pool.get_num_free_blocks() == 8
    taken = pool.get_new_blocks(6)  # 4 never cached + 2 evicted
    assert [pool.get_cached_block(h, [0]) is None for h in a.block_hashes] == [True, True]
    assert all(pool.get_cached_block(h, [0]) for h in b.block_hashes)
    pool.free_blocks(taken)
    pool.close()


def test_hash_block_correct_reuse(hasher):
    """test_hash_block_correct_reuse: a cached block evicted and handed out
    again carries no hash, and its old hash no longer finds it."""
    pool = BlockPool(2, True, block_size=BS)  # one usable block
    r = Request(list(range(BS)), hasher)
    admit(pool, r)
    cached = r.blocks[0]
    release(pool, r)
    [again] = pool.get_new_blocks(1)
    assert again is cached and again.block_hash is None
    assert pool.get_cached_block(r.block_hashes[0], [0]) is None
    pool.free_blocks([again])
    pool.close()


def test_computed_blocks_not_evicted(hasher):
    """test_computed_blocks_not_evicted: a cached block a request holds is
    never evicted, however many blocks are allocated."""
    pool = BlockPool(4, True, block_size=BS)
    a = Request([7] * BS, hasher)
    admit(pool, a)
    b = Request([8] * BS, hasher)
    admit(pool, b)
    release(pool, b)
    rest = pool.get_new_blocks(pool.get_num_free_blocks())
    assert pool.get_cached_block(a.block_hashes[0], [0]) == a.blocks
    assert pool.get_cached_block(b.block_hashes[0], [0]) is None
    pool.free_blocks(rest)
    release(pool, a)
    pool.close()


def test_basic_prefix_caching_disabled(hasher):
    """test_basic_prefix_caching_disabled: nothing is cached, nothing hit."""
    pool = BlockPool(6, False, block_size=BS)
    r = Request(common(3), hasher)
    admit(pool, r)
    assert all(b.block_hash is None for b in r.blocks)
    release(pool, r)
    assert pool.get_cached_block(r.block_hashes[0], [0]) is None
    r2 = Request(common(3), hasher)
    assert admit(pool, r2) == []
    release(pool, r2)
    assert pool.get_num_free_blocks() == 5
    pool.close()


def test_cache_key_salting(hasher):
    """test_cache_key_salting: a salt changes the first block's hash and so
    the chain; requests of different salts share nothing."""
    pool = BlockPool(16, True, block_size=BS)
    plain = Request(common(3), hasher)
    salted = Request(common(3), hasher, cache_salt="salt1")
    other = Request(common(3), hasher, cache_salt="salt2")
    hs = [r.block_hashes for r in (plain, salted, other)]
    for i in range(3):
        assert len({h[i] for h in hs}) == 3
    admit(pool, salted)
    later = [Request(common(3) + [1], hasher, cache_salt=s) for s in ("salt1", "salt2", None)]
    assert [admit(pool, r) for r in later] == [salted.blocks[:3], [], []]
    for r in [salted] + later:
        release(pool, r)
    pool.close()


def test_duplicate_hashes_not_deduplicated(hasher):
    """test_maybe_evict_cached_block (the BlockHashToBlockMap cases): two
    blocks may hold one hash; evicting one leaves the other found."""
    pool = BlockPool(3, True, block_size=BS)  # two usable blocks
    a = Request([4] * BS, hasher)
    b = Request([4] * BS, hasher)
    a.blocks = pool.get_new_blocks(1)
    b.blocks = pool.get_new_blocks(1)
    pool.cache_full_blocks(a, a.blocks, 0, 1, BS, 0)
    pool.cache_full_blocks(b, b.blocks, 0, 1, BS, 0)  # no dedup: both cached
    assert a.blocks[0].block_hash == b.blocks[0].block_hash
    a_blk, b_blk = a.blocks[0], b.blocks[0]
    release(pool, a)
    release(pool, b)
    [x] = pool.get_new_blocks(1)  # evicts a's (freed first)
    assert x is a_blk
    assert pool.get_cached_block(b.block_hashes[0], [0]) == [b_blk]
    [y] = pool.get_new_blocks(1)
    assert pool.get_cached_block(b.block_hashes[0], [0]) is None
    pool.free_blocks([x, y])
    pool.close()


def test_reset_prefix_cache(hasher):
    """test_reset_prefix_cache: refused while a request holds blocks; then
    every hash is forgotten."""
    pool = BlockPool(10, True, block_size=BS)
    r = Request(common(2) + [1], hasher)
    admit(pool, r)
    assert pool.reset_prefix_cache() is False
    assert pool.get_cached_block(r.block_hashes[0], [0]) is not None
    release(pool, r)
    assert pool.reset_prefix_cache() is True
    assert all(pool.get_cached_block(h, [0]) is None for h in r.block_hashes)
    assert pool.get_num_free_blocks() == 9 and pool.get_usage() == 0.0
    pool.close()


def test_usage_counts_the_null_block():
    pool = BlockPool(5, True, block_size=BS)
    assert pool.null_block.is_null and pool.null_block.block_id == 0
    assert pool.get_num_free_blocks() == 4 and pool.get_usage() == 0.0
    got = pool.get_new_blocks(2)
    assert pool.null_block not in got and pool.get_usage() == 0.5
    pool.touch([pool.null_block])  # the null block is never counted
    pool.free_blocks(got + [pool.null_block])
    assert pool.get_num_free_blocks() == 4
    with pytest.raises(ValueError):
        pool.get_new_blocks(5)
    pool.close()


@needs_events
@pytest.mark.parametrize("blocks_to_cache", [2, 3, 10])
def test_kv_cache_events(hasher, blocks_to_cache):
    """test_kv_cache_events: one BlockStored per cache_full_blocks with all
    its hashes and tokens; BlockRemoved per evicted block; AllBlocksCleared
    on reset; take_events empties the queue."""
    pool = BlockPool(blocks_to_cache + 1, True, True, block_size=BS)
    r = Request(list(range(BS * blocks_to_cache)), hasher)
    admit(pool, r)
    ev = pool.take_events()
    assert len(ev) == 1 and isinstance(ev[0], vllm.BlockStored)
    st = ev[0]
    assert len(st.block_hashes) == blocks_to_cache
    assert st.block_hashes == [vllm.maybe_convert_block_hash(h) for h in r.block_hashes]
    assert st.parent_block_hash is None and st.lora_id is None and st.medium == "GPU"
    assert st.token_ids == r.all_token_ids and st.block_size == BS
    assert pool.take_events() == []
    release(pool, r)
    r2 = Request([99] * (BS * blocks_to_cache), hasher)
    admit(pool, r2)  # evicts every cached block of r
    ev = pool.take_events()
    removed = [e for e in ev if isinstance(e, vllm.BlockRemoved)]
    assert sorted(h for e in removed for h in e.block_hashes) == sorted(st.block_hashes)
    assert isinstance(ev[-1], vllm.BlockStored)  # r2's, after the removals
    release(pool, r2)
    assert pool.reset_prefix_cache()
    ev = pool.take_events()
    assert [type(e).__name__ for e in ev] == ["AllBlocksCleared"]
    pool.close()


@needs_events
def test_kv_cache_events_chained_parent(hasher):
    pool = BlockPool(8, True, True, block_size=BS)
    r = Request(common(3), hasher)
    r.blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(r, r.blocks, 0, 1, BS, 0)
    pool.cache_full_blocks(r, r.blocks, 1, 3, BS, 0)
    ev = pool.take_events()
    assert [len(e.block_hashes) for e in ev] == [1, 2]
    assert ev[1].parent_block_hash == vllm.maybe_convert_block_hash(r.block_hashes[0])
    assert ev[1].token_ids == r.all_token_ids[BS:3 * BS]
    release(pool, r)
    pool.close()


def test_events_off():
    pool = BlockPool(4, True, False, block_size=BS)
    got = pool.get_new_blocks(1)
    assert pool.take_events() == []
    with pytest.raises(RuntimeError):
        pool.close()  # a block is still held: refused, nothing changed
    pool.free_blocks(got)
    assert pool.get_num_free_blocks() == 3
    pool.close()


def test_refcounts_of_returned_objects(hasher):
    """One object per block, as vLLM's pool.blocks: the same block comes
    back as the same object, and the calls leave no references behind."""
    pool = BlockPool(8, True, block_size=BS)
    r = Request(common(2), hasher)
    admit(pool, r)
    a = pool.get_cached_block(r.block_hashes[0], [0])
    b = pool.get_cached_block(r.block_hashes[0], [0])
    assert a is not b and a[0] is b[0] is r.blocks[0]  # fresh lists, shared blocks
    blk = r.blocks[0]
    h = r.block_hashes[0]
    gc.collect()
    counts = sys.getrefcount(blk), sys.getrefcount(h), sys.getrefcount(pool)
    for _ in range(300):
        pool.get_cached_block(h, [0])
        pool.touch([blk])
        pool.free_blocks([blk])
        blk.ref_cnt
        blk.block_hash
        x = pool.get_new_blocks(1)
        pool.free_blocks(x)
    del x
    gc.collect()
    assert (sys.getrefcount(blk), sys.getrefcount(h), sys.getrefcount(pool)) == counts
    # Hashes returned are fresh bytes: equal, and the caller's own.
    assert blk.block_hash == blk.block_hash
    release(pool, r)
    pool.close()
