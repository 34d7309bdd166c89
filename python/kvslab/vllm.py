# SPDX-License-Identifier: MIT
"""Drop-ins for vLLM v1's prefix-caching pieces (vllm/v1/core/kv_cache_utils.py
and block_pool.py).

``BlockPool`` is vLLM's block pool on kvslab's hashed block cache (see its
docstring for what differs).  vLLM's block hashes, byte for byte:

- ``init_none_hash(hash_fn, seed)``: vLLM's NONE_HASH, the root of every
  request's chain (``seed`` is PYTHONHASHSEED's value; without it vLLM draws
  a random root, pass it as ``root=`` to :class:`RequestBlockHasher`).
- ``hash_block_tokens(hasher, parent_block_hash, curr_block_token_ids,
  extra_keys)``: one block's hash, as vLLM's function computes it, with the
  hasher standing for vLLM's ``hash_function``; ``extra_keys`` may hold a
  LoRA name (first) and a cache salt (last), the keys vLLM's
  ``generate_block_hash_extra_keys`` makes for them.
- ``RequestBlockHasher``: vLLM's ``get_request_block_hasher``: called on a
  request (``all_token_ids``, optional ``lora_request.lora_name`` and
  ``cache_salt``) or a token list, it returns the hashes of the full blocks
  not hashed yet, as vLLM appends to ``request.block_hashes``.

Hash functions: ``"sha256_cbor"`` (vLLM's default), ``"xxhash_cbor"``
(xxh3-128) and ``"sha256_cbor_64bit"`` (the older 64-bit chain).  Multimodal
extra keys are not covered by this binding yet.  Followed: vLLM main of
2026-11 (the hashing of v0.11).
"""
from . import _kvslab

_FNS = {"sha256_cbor": _kvslab.HASH_SHA256_CBOR, "sha256": _kvslab.HASH_SHA256_CBOR,
        "xxhash_cbor": _kvslab.HASH_XXH3_128, "xxhash": _kvslab.HASH_XXH3_128,
        "sha256_cbor_64bit": _kvslab.HASH_SHA256_CBOR_64}


def _fn(name):
    try:
        return _FNS[name]
    except KeyError:
        raise ValueError("unknown hash function %r (one of %s)" %
                         (name, ", ".join(sorted(_FNS)))) from None


def _seed(seed):
    if seed is None:
        return None
    return seed.encode() if isinstance(seed, str) else bytes(seed)


class Hasher(_kvslab.Hasher):
    """A block hasher: ``Hasher("sha256_cbor", block_size=16, seed="0")``."""

    def __init__(self, hash_fn="sha256_cbor", block_size=16, seed=None, root=None):
        super().__init__(_fn(hash_fn), block_size, _seed(seed), root)


def init_none_hash(hash_fn="sha256_cbor", seed=None):
    """vLLM's NONE_HASH for PYTHONHASHSEED ``seed`` (a string)."""
    if seed is None:
        raise ValueError("without a seed vLLM's root is random: pass root= to the hasher")
    return Hasher(hash_fn, 1, seed).root


def _extra(extra_keys):
    lora = salt = None
    if extra_keys:
        keys = list(extra_keys)
        if len(keys) > 2 or not all(isinstance(k, str) for k in keys):
            raise NotImplementedError("kvslab.vllm: only LoRA name and cache salt extra keys")
        if len(keys) == 2:
            lora, salt = keys
        else:
            lora = keys[0]
    return lora, salt


def hash_block_tokens(hasher, parent_block_hash, curr_block_token_ids, extra_keys=None,
                      start=0):
    """One block's hash (bytes).  With one string extra key it is taken as the
    LoRA name; with two, the LoRA name and the cache salt (a salt alone counts
    only for the first block: pass start=0 and extra_keys=("", salt)
    only where vLLM would)."""
    lora, salt = _extra(extra_keys)
    return hasher.hash_block(parent_block_hash, list(curr_block_token_ids), start, lora, salt)


class RequestBlockHasher:
    """vLLM's request block hasher: ``RequestBlockHasher(16, "sha256_cbor",
    seed="0")(request)`` returns the hashes of its newly full blocks."""

    def __init__(self, block_size, hash_fn="sha256_cbor", seed=None, root=None):
        self._h = Hasher(hash_fn, block_size, seed, root)
        self.block_size = block_size

    @property
    def none_hash(self):
        return self._h.root

    def __call__(self, request):
        if isinstance(request, (list, tuple)) or hasattr(request, "__buffer__") or \
                hasattr(request, "dtype"):
            tokens, lora, salt, have = request, None, None, 0
        else:
            tokens = request.all_token_ids
            lr = getattr(request, "lora_request", None)
            lora = lr.lora_name if lr is not None else None
            salt = getattr(request, "cache_salt", None)
            have = len(getattr(request, "block_hashes", ()) or ())
        return self._h.hash_request(tokens, lora, salt)[have:]


class KVCacheBlock:
    """vLLM's KVCacheBlock, as a view of a kvslab block: ``block_id``, and
    ``ref_cnt`` and ``block_hash`` read from the cache."""

    __slots__ = ("block_id", "_hc")

    def __init__(self, block_id, hc):
        self.block_id = block_id
        self._hc = hc

    @property
    def ref_cnt(self):
        return self._hc.block(self.block_id)[0]

    @property
    def block_hash(self):
        return self._hc.block(self.block_id)[1]

    is_null = False

    def __eq__(self, other):
        return isinstance(other, KVCacheBlock) and other.block_id == self.block_id

    def __hash__(self):
        return self.block_id

    def __repr__(self):
        return "KVCacheBlock(block_id=%d)" % self.block_id


class BlockPool:
    """vLLM v1's BlockPool (vllm/v1/core/block_pool.py) on kvslab's hashed
    block cache (kvs_hcache_create(3)): ``get_cached_block``,
    ``cache_full_blocks``, ``get_new_blocks``, ``touch``, ``free_blocks``,
    ``reset_prefix_cache``, ``get_num_free_blocks``, ``get_usage``.

    What differs: the blocks are a kvslab pool's pages, so their number is
    ``num_gpu_blocks`` rounded up to whole slabs (``num_gpu_blocks`` gives
    the real count), and there is no null block; ``take_events()`` returns
    an empty list (the C cache's events reach Python in a later version);
    one KV cache group."""

    def __init__(self, num_gpu_blocks, enable_caching=True, enable_kv_cache_events=False,
                 block_size=16, model="tiny", driver=None):
        from . import Driver, Pool
        self._own_driver = driver is None
        self._drv = driver if driver is not None else Driver("host", granularity="64K")
        self._pool = Pool(self._drv, model, page_size=block_size,
                          max_tokens=num_gpu_blocks * block_size)
        self._hc = _kvslab.HCache(self._pool)
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.num_gpu_blocks = self._pool.capacity // block_size

    def close(self):
        self._hc.close()
        self._pool.close()
        if self._own_driver:
            self._drv.close()

    def _blk(self, i):
        return KVCacheBlock(i, self._hc)

    def get_cached_block(self, block_hash, kv_cache_group_ids=(0,)):
        b = self._hc.find(bytes(block_hash)) if self.enable_caching else None
        return None if b is None else [self._blk(b) for _ in kv_cache_group_ids]

    def cache_full_blocks(self, request, blocks, num_cached_blocks, num_full_blocks,
                          block_size=None, kv_cache_group_id=0):
        if not self.enable_caching or num_cached_blocks >= num_full_blocks:
            return
        hashes = [bytes(h) for h in request.block_hashes[num_cached_blocks:num_full_blocks]]
        parent = bytes(request.block_hashes[num_cached_blocks - 1]) if num_cached_blocks else None
        ids = [b.block_id for b in blocks[num_cached_blocks:num_full_blocks]]
        self._hc.cache(ids, hashes, parent)

    def get_new_blocks(self, num_blocks):
        if num_blocks > self.get_num_free_blocks():
            raise ValueError("Cannot get %d free blocks from the pool" % num_blocks)
        return [self._blk(i) for i in self._hc.alloc(num_blocks)]

    def touch(self, blocks):
        if blocks and isinstance(blocks[0], (list, tuple)):
            blocks = [b for group in blocks for b in group]
        if blocks:
            self._hc.touch([b.block_id for b in blocks])

    def free_blocks(self, ordered_blocks):
        ids = [b.block_id for b in ordered_blocks]
        if ids:
            self._hc.free(ids)

    def reset_prefix_cache(self):
        from . import Error
        try:
            self._hc.reset()
        except Error:
            return False
        return True

    def get_num_free_blocks(self):
        return self.num_gpu_blocks - self._hc.stats()["used_blocks"]

    def get_usage(self):
        return 1.0 - self.get_num_free_blocks() / self.num_gpu_blocks

    def take_events(self):
        return []
