# SPDX-License-Identifier: MIT
"""kvslab.vllm's block hashes against vLLM's own way of computing them
(tests/blockhash_ref.py, the project's transcription of vLLM v1's
kv_cache_utils and hashing modules): byte for byte."""
import os
import subprocess
import sys

import pytest

from kvslab import vllm

REF = os.path.join(os.environ.get("KVSLAB_TOP_SRCDIR", "."), "tests", "blockhash_ref.py")


def reference(fn, block_size, tokens, seed=None, root=None, lora=None, salt=None):
    lines = ["fn " + fn, "block_size %d" % block_size,
             "tokens " + " ".join(map(str, tokens))]
    if root is not None:
        lines.append("root " + root.hex())
    else:
        lines.append("seed " + seed.encode().hex())
    if lora is not None:
        lines.append("lora " + lora.encode().hex())
    if salt is not None:
        lines.append("salt " + salt.encode().hex())
    p = subprocess.run([sys.executable, REF], input="\n".join(lines) + "\n",
                       capture_output=True, text=True)
    if p.returncode == 77:
        pytest.skip("reference needs cbor2/xxhash: " + p.stderr.strip())
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


@pytest.mark.parametrize("fn,ref_fn", [("sha256_cbor", "sha256_cbor"),
                                       ("xxhash_cbor", "xxh3_128"),
                                       ("sha256_cbor_64bit", "sha256_cbor_64")])
def test_request_hashes_match_vllm(fn, ref_fn):
    tokens = [(i * 7919) % 50000 for i in range(100)]
    h = vllm.RequestBlockHasher(16, fn, seed="0")
    got = [b.hex() if fn != "sha256_cbor_64bit" else b.hex().rjust(16, "0") for b in h(tokens)]
    assert len(got) == 6  # full blocks only
    assert got == reference(ref_fn, 16, tokens, seed="0")


def test_lora_salt_and_root():
    tokens = list(range(40))
    root = bytes(range(32))

    class Lora:
        lora_name = "adapter-a"

    class Req:
        all_token_ids = tokens
        lora_request = Lora()
        cache_salt = "tenant-7"
        block_hashes = []
    h = vllm.RequestBlockHasher(8, "sha256_cbor", root=root)
    assert h.none_hash == root
    got = [b.hex() for b in h(Req())]
    assert got == reference("sha256_cbor", 8, tokens, root=root, lora="adapter-a",
                            salt="tenant-7")
    # Called again after some blocks were hashed: only the new ones.
    Req.block_hashes = [bytes.fromhex(x) for x in got[:3]]
    assert [b.hex() for b in h(Req())] == got[3:]


def test_hash_block_tokens_chains_like_the_request():
    hs = vllm.Hasher("sha256_cbor", 4, seed="42")
    toks = list(range(12))
    chain, parent = [], None
    for i in range(3):
        parent = vllm.hash_block_tokens(hs, parent, toks[4 * i:4 * i + 4], start=4 * i)
        chain.append(parent)
    assert chain == hs.hash_request(toks)
    assert vllm.init_none_hash("sha256_cbor", "42") == hs.root
    with pytest.raises(ValueError):
        vllm.hash_block_tokens(hs, None, [1, 2, 3])  # not a full block
    with pytest.raises(ValueError):
        vllm.Hasher("md5")


class FakeRequest:
    def __init__(self, tokens, hasher):
        self.all_token_ids = list(tokens)
        self.block_hashes = []
        self.block_hashes = hasher(self)


def test_block_pool_prefix_caching_like_vllm():
    """vLLM's test_prefix_caching shape: a request's full blocks cached, a
    second request with the same prefix finds and touches them, frees go to
    the free queue's tail, a reset is refused while blocks are in use."""
    pool = vllm.BlockPool(64, enable_caching=True, block_size=4)
    h = vllm.RequestBlockHasher(4, "sha256_cbor", seed="0")
    n = pool.num_gpu_blocks - 1  # block 0 is vLLM's null block
    assert pool.num_gpu_blocks == 64 and pool.get_num_free_blocks() == n
    a = FakeRequest(range(10), h)  # 2 full blocks + 2 tokens
    blocks = pool.get_new_blocks(3)
    assert [b.ref_cnt for b in blocks] == [1, 1, 1]
    pool.cache_full_blocks(a, blocks, 0, 2, 4, 0)
    assert vllm.get_block_hash(blocks[0].block_hash) == a.block_hashes[0]
    assert blocks[2].block_hash is None
    # B: the same first 8 tokens.
    b = FakeRequest(list(range(8)) + [99, 98, 97, 96, 95], h)
    assert b.block_hashes[:2] == a.block_hashes
    hit = [pool.get_cached_block(x)[0] for x in b.block_hashes[:2]]
    assert hit == blocks[:2]
    assert pool.get_cached_block(b.block_hashes[2]) is None
    pool.touch(hit)
    assert [x.ref_cnt for x in hit] == [2, 2]
    assert pool.get_num_free_blocks() == n - 3
    assert not pool.reset_prefix_cache()  # in use
    pool.free_blocks(blocks)
    pool.free_blocks(hit)
    assert pool.get_num_free_blocks() == n
    assert pool.get_usage() == 0.0
    # Still cached after the free, until evicted or reset.
    assert pool.get_cached_block(a.block_hashes[0]) is not None
    assert pool.reset_prefix_cache()
    assert pool.get_cached_block(a.block_hashes[0]) is None
    with pytest.raises(ValueError):
        pool.get_new_blocks(n + 1)
    assert pool.take_events() == []
    pool.close()


def test_get_cached_block_fast_path_answers_as_the_method():
    """get_cached_block is made in C (HCache.getter) while caching is on:
    every form of call answers as the Python method does, other forms go
    to the method, and the answer's reference counts do not drift."""
    pool = vllm.BlockPool(32, enable_caching=True, block_size=4)
    assert type(pool.get_cached_block).__name__ == "CachedBlockGetter"
    h = vllm.RequestBlockHasher(4, "sha256_cbor", seed="0")
    a = FakeRequest(range(12), h)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(a, blocks, 0, 3, 4, 0)
    slow = pool._get_cached_block

    class Sub(bytes):
        pass
    miss = b"\x01" * 32
    for key in list(a.block_hashes) + [miss, Sub(a.block_hashes[1]),
                                        bytearray(a.block_hashes[2])]:
        for groups in ((), ((0,),), ([0],), ((0, 0),), ([0, 0],)):
            assert pool.get_cached_block(key, *groups) == slow(key, *groups)
        assert pool.get_cached_block(key, kv_cache_group_ids=[0]) == slow(key, [0])
    assert pool.get_cached_block(a.block_hashes[1])[0] is blocks[1]
    assert pool.get_cached_block(miss) is None
    with pytest.raises(NotImplementedError):
        pool.get_cached_block(a.block_hashes[0], [1])
    with pytest.raises(TypeError):
        pool.get_cached_block()
    with pytest.raises(TypeError):
        pool.get_cached_block(a.block_hashes[0], [0], 5)
    with pytest.raises(ValueError):
        pool.get_cached_block(b"")  # a hash is 1 to 32 bytes
    counts = []
    for _ in range(3):
        for _ in range(1000):
            pool.get_cached_block(a.block_hashes[0], [0])
        counts.append(sys.getrefcount(blocks[0]))
    assert counts[0] == counts[1] == counts[2]
    # Caching off: the method's answer (None), and on again.
    pool.enable_caching = False
    assert pool.get_cached_block(a.block_hashes[0]) is None
    pool.enable_caching = True
    assert pool.get_cached_block(a.block_hashes[0]) == [blocks[0]]
    pool.free_blocks(blocks)
    pool.close()
    assert "get_cached_block" not in pool.__dict__
