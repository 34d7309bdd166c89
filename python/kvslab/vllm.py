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
extra keys are not covered by this binding yet.

Peer followed: vllm-project/vllm main as of 2026-11: vllm/v1/core/
block_pool.py (the one-group BlockPool: null block 0, free queue, events),
kv_cache_utils.py (hashing as of v0.11, ``BlockHashWithGroupId``,
``maybe_convert_block_hash``), vllm/distributed/kv_events.py, and the
scenarios of tests/v1/core/test_prefix_caching.py at commit 003df2961dd8.

Covered of ``BlockPool``: ``get_cached_block``, ``cache_full_blocks``,
``get_new_blocks``, ``touch``, ``free_blocks``, ``reset_prefix_cache``,
``get_num_free_blocks``, ``get_usage``, ``take_events``, ``null_block``,
``num_gpu_blocks``, ``enable_caching``, ``blocks``.  Not covered:
``evict_blocks`` (kvslab's cache evicts from the head of its free queue
only; dropping the hash of a named block needs a library call it lacks),
``cache_partial_block``, ``move_block_hashes``, ``emit_cached_block_events``,
more than one KV cache group.  See :class:`BlockPool` for what differs.

Example (vLLM's KVCacheManager calls, one request)::

    pool = BlockPool(num_gpu_blocks, True, enable_kv_cache_events=True, block_size=16)
    hasher = RequestBlockHasher(16, "sha256_cbor", seed="0")
    req.block_hashes = hasher(req)
    hits = []
    for h in req.block_hashes:
        b = pool.get_cached_block(h, [0])
        if b is None:
            break
        hits.append(b[0])
    pool.touch((hits,))
    blocks = hits + pool.get_new_blocks(n_needed - len(hits))
    pool.cache_full_blocks(req, blocks, len(hits), n_full, 16, 0)
    ...
    pool.free_blocks(reversed(blocks)); events = pool.take_events()
"""
import os as _os

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


def make_block_hash_with_group_id(block_hash, group_id):
    """vLLM's BlockHashWithGroupId: the hash and the group id as 4 bytes."""
    return bytes(block_hash) + int(group_id).to_bytes(4, "big", signed=False)


def get_block_hash(key):
    """The BlockHash of a BlockHashWithGroupId."""
    return key[:-4]


def get_group_id(key):
    """The group id of a BlockHashWithGroupId."""
    return int.from_bytes(key[-4:], "big", signed=False)


def maybe_convert_block_hash(hash_bytes):
    """vLLM's external form of a block hash in KV events: the low 64 bits of
    its big-endian value, unless VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0."""
    if _os.environ.get("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1") in ("0", ""):
        return bytes(hash_bytes)
    return int.from_bytes(hash_bytes, "big") & ((1 << 64) - 1)


MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"


class _Event:
    __slots__ = ()

    def __eq__(self, other):
        return type(other) is type(self) and all(
            getattr(self, f) == getattr(other, f) for f in self.__slots__)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % (f, getattr(self, f)) for f in self.__slots__))


class BlockStored(_Event):
    """vLLM's BlockStored KV event."""
    __slots__ = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                 "medium")

    def __init__(self, block_hashes, parent_block_hash, token_ids, block_size, lora_id,
                 medium=MEDIUM_GPU):
        self.block_hashes = block_hashes
        self.parent_block_hash = parent_block_hash
        self.token_ids = token_ids
        self.block_size = block_size
        self.lora_id = lora_id
        self.medium = medium


class BlockRemoved(_Event):
    """vLLM's BlockRemoved KV event."""
    __slots__ = ("block_hashes", "medium")

    def __init__(self, block_hashes, medium=MEDIUM_GPU):
        self.block_hashes = block_hashes
        self.medium = medium


class AllBlocksCleared(_Event):
    """vLLM's AllBlocksCleared KV event."""
    __slots__ = ()


class KVCacheBlock:
    """vLLM's KVCacheBlock, as a view of a kvslab block: ``block_id``, and
    ``ref_cnt`` and ``block_hash`` (a BlockHashWithGroupId of group 0, or
    None) read from the cache.  One object per block id, as vLLM's
    ``BlockPool.blocks``."""

    __slots__ = ("block_id", "_hc", "is_null")

    def __init__(self, block_id, hc, is_null=False):
        self.block_id = block_id
        self._hc = hc
        self.is_null = is_null

    @property
    def ref_cnt(self):
        return self._hc.block(self.block_id)[0]

    @property
    def block_hash(self):
        h = self._hc.block(self.block_id)[1]
        return None if h is None else h + b"\0\0\0\0"

    def __repr__(self):
        return "KVCacheBlock(block_id=%d)" % self.block_id


def _lora_id(request):
    lr = getattr(request, "lora_request", None)
    if lr is None:
        return None
    for name in ("adapter_id", "lora_int_id", "id"):
        v = getattr(lr, name, None)
        if v is not None:
            return v
    return None


def _events_supported():
    return hasattr(_kvslab, "KV_STORED")


class BlockPool:
    """vLLM v1's BlockPool (vllm/v1/core/block_pool.py) on kvslab's hashed
    block cache (kvs_hcache_create(3)), one KV cache group.

    ``BlockPool(num_gpu_blocks, enable_caching, enable_kv_cache_events=False,
    block_size=16, model="tiny", driver=None)``; ``hash_block_size`` (vLLM's
    newer third argument) is taken as ``block_size``.  As in vLLM, block 0
    is the null block (never handed out, counted as used), so
    ``get_num_free_blocks()`` starts at ``num_gpu_blocks - 1``; freed blocks
    with a hash go to the free queue's tail in the order given, blocks
    without one are reused first; allocation evicts from the queue's head.

    What differs, and why: the blocks are a kvslab pool's pages, allocated
    slab by slab, so their ids are pool page numbers (not 1, 2, 3... in
    order) and run up to the pool's capacity; the pages past
    ``num_gpu_blocks`` are held by the pool object so that the counts are
    vLLM's.  ``get_cached_block`` answers for group 0 only.  Events carry
    vLLM's hashes (``maybe_convert_block_hash``) and the request's tokens.
    """

    def __init__(self, num_gpu_blocks, enable_caching=True, enable_kv_cache_events=False,
                 block_size=16, model="tiny", driver=None, hash_block_size=None,
                 metrics_collector=None):
        from . import Driver, Pool
        if not isinstance(enable_kv_cache_events, bool):  # vLLM's newer (n, caching, hbs)
            hash_block_size, enable_kv_cache_events = enable_kv_cache_events, False
        if hash_block_size is not None:
            block_size = hash_block_size
        if not isinstance(num_gpu_blocks, int) or num_gpu_blocks < 1:
            raise ValueError("num_gpu_blocks must be a positive int")
        self._own_driver = driver is None
        self._drv = driver if driver is not None else Driver("host", granularity="64K")
        self._pool = Pool(self._drv, model, page_size=block_size,
                          max_tokens=num_gpu_blocks * block_size)
        self.enable_kv_cache_events = bool(enable_kv_cache_events)
        if self.enable_kv_cache_events:
            if not _events_supported():
                self.close()
                raise NotImplementedError("kvslab.vllm: this build of the extension has no "
                                          "KV events")
            self._hc = _kvslab.HCache(self._pool, True)
        else:
            self._hc = _kvslab.HCache(self._pool)
        self.block_size = block_size
        self.hash_block_size = block_size
        self._enable_caching = bool(enable_caching)
        self.num_gpu_blocks = num_gpu_blocks
        total = self._pool.capacity // block_size
        if total < num_gpu_blocks:
            self.close()
            raise ValueError("the pool has %d blocks, fewer than %d" % (total, num_gpu_blocks))
        self.blocks = [KVCacheBlock(i, self._hc) for i in range(total)]
        # Block 0, vLLM's null block: the first a fresh cache gives.
        null = self._hc.alloc(1)[0]
        self.null_block = self.blocks[null]
        self.null_block.is_null = True
        # The pages past num_gpu_blocks, held for good.
        self._surplus = self._hc.alloc(total - num_gpu_blocks) if total > num_gpu_blocks \
            else []
        self._held = 1 + len(self._surplus)
        self._install_getter()
        self._pending = []
        self._stored_info = []  # (token_ids, lora_id) of each cache() call, for its event

    def close(self):
        """Give the pool back; refused (RuntimeError) while a block is held."""
        hc = getattr(self, "_hc", None)
        if hc is not None and hasattr(self, "null_block") and \
                self.get_num_free_blocks() != self.num_gpu_blocks - 1:
            raise RuntimeError("kvslab.vllm: %d blocks are still held" %
                               (self.num_gpu_blocks - 1 - self.get_num_free_blocks()))
        if hc is not None:
            held = [self.null_block.block_id] + list(self._surplus) \
                if hasattr(self, "null_block") else []
            if held:
                hc.free(held)
            hc.close()
            self._hc = None
            self._install_getter()
        if getattr(self, "_pool", None) is not None:
            self._pool.close()
            self._pool = None
        if self._own_driver and getattr(self, "_drv", None) is not None:
            self._drv.close()
            self._drv = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def enable_caching(self):
        """Whether blocks are cached by their hashes (vLLM's flag)."""
        return self._enable_caching

    @enable_caching.setter
    def enable_caching(self, on):
        self._enable_caching = bool(on)
        self._install_getter()

    def _install_getter(self):
        # get_cached_block() is what a scheduler calls once a block along a
        # request's hash chain: with caching on and the cache open, an
        # instance attribute made in C (HCache.getter) answers the common
        # call (a bytes hash, group 0) with one lookup, and hands any other
        # call to the method below.
        self.__dict__.pop("get_cached_block", None)
        hc = getattr(self, "_hc", None)
        if getattr(self, "_enable_caching", False) and hc is not None and hasattr(self, "blocks"):
            self.get_cached_block = hc.getter(self.blocks, self._get_cached_block)

    def get_cached_block(self, block_hash, kv_cache_group_ids=(0,)):
        """The cached block of ``block_hash`` for each group, or None on a miss."""
        return self._get_cached_block(block_hash, kv_cache_group_ids)

    def _get_cached_block(self, block_hash, kv_cache_group_ids=(0,)):
        if not self.enable_caching:
            return None
        one = kv_cache_group_ids == (0,) or kv_cache_group_ids == [0]
        if not one and any(g != 0 for g in kv_cache_group_ids):
            raise NotImplementedError("kvslab.vllm: one KV cache group (0)")
        # A BlockHash is bytes (or a subclass): the extension reads it as is.
        b = self._hc.find(block_hash if isinstance(block_hash, bytes) else bytes(block_hash))
        if b is None:
            return None
        blk = self.blocks[b]
        return [blk] if one else [blk for _ in kv_cache_group_ids]

    def cache_full_blocks(self, request, blocks, num_cached_blocks, num_full_blocks,
                          block_size=None, kv_cache_group_id=0, block_mask=None):
        """Give blocks[num_cached_blocks:num_full_blocks] the request's block
        hashes and enter them in the cache (null and masked-out blocks skipped)."""
        if not self.enable_caching or num_cached_blocks >= num_full_blocks:
            return
        if kv_cache_group_id != 0:
            raise NotImplementedError("kvslab.vllm: one KV cache group (0)")
        bs = block_size or self.block_size
        new = blocks[num_cached_blocks:num_full_blocks]
        hashes = request.block_hashes
        if len(hashes) < num_full_blocks:
            raise ValueError("the request has %d block hashes, fewer than %d"
                             % (len(hashes), num_full_blocks))
        if block_mask is None and self.null_block not in new:
            # The common case, without a per-block Python loop: the blocks'
            # ids and the hashes as they are (bytes, or a subclass).
            ids = [b.block_id for b in new]
            hs = hashes[num_cached_blocks:num_full_blocks]
        else:
            ids, hs = [], []
            for i, b in enumerate(new):
                if b.is_null or (block_mask is not None and not block_mask[i]):
                    continue
                ids.append(b.block_id)
                hs.append(hashes[num_cached_blocks + i])
        if not ids:
            return
        parent = bytes(hashes[num_cached_blocks - 1]) if num_cached_blocks else None
        self._hc.cache(ids, hs, parent)
        if self.enable_kv_cache_events:
            toks = list(request.all_token_ids[num_cached_blocks * bs:num_full_blocks * bs])
            self._stored_info.append((toks, _lora_id(request), bs))

    def get_new_blocks(self, num_blocks):
        """``num_blocks`` blocks of refcount 1, evicting cached free blocks
        from the queue's head when no free page is left; ValueError when
        fewer are free."""
        if num_blocks > self.get_num_free_blocks():
            raise ValueError("Cannot get %d free blocks from the pool" % num_blocks)
        return list(map(self.blocks.__getitem__, self._hc.alloc(num_blocks)))

    def touch(self, blocks):
        """Reference blocks a request hit (a list, or one list per group)."""
        if blocks and isinstance(blocks[0], (list, tuple)):
            blocks = [b for group in blocks for b in group]
        ids = [b.block_id for b in blocks if not b.is_null]
        if ids:
            self._hc.touch(ids)

    def free_blocks(self, ordered_blocks):
        """Drop a reference of each block, first evicted first."""
        if not isinstance(ordered_blocks, list):
            ordered_blocks = list(ordered_blocks)
        if self.null_block in ordered_blocks:
            ids = [b.block_id for b in ordered_blocks if not b.is_null]
        else:
            ids = [b.block_id for b in ordered_blocks]
        if ids:
            self._hc.free(ids)

    def reset_prefix_cache(self):
        """Forget every hash when no block is in use (True), else False."""
        if self.get_num_free_blocks() != self.num_gpu_blocks - 1:
            return False
        if self.enable_kv_cache_events:
            self._pending.extend(self._drain())
        self._hc.evict(len(self.blocks))
        if self.enable_kv_cache_events:
            self._hc.take_events()  # vLLM sends AllBlocksCleared alone
            self._pending.append(AllBlocksCleared())
        return True

    def get_num_free_blocks(self):
        return self.num_gpu_blocks - (self._hc.used_blocks() - self._held) - 1

    def get_usage(self):
        total = self.num_gpu_blocks - 1
        if not total:
            return 0
        return 1.0 - self.get_num_free_blocks() / total

    def _drain(self):
        out = []
        for kind, hashes, parent, tokens, bs, _extra in self._hc.take_events():
            if kind == _kvslab.KV_STORED:
                toks, lora, bsz = self._stored_info.pop(0) if self._stored_info \
                    else (None, None, bs)
                out.append(BlockStored(
                    block_hashes=[maybe_convert_block_hash(h) for h in hashes],
                    parent_block_hash=None if parent is None
                    else maybe_convert_block_hash(parent),
                    token_ids=list(tokens) if tokens is not None else toks,
                    block_size=bs or bsz, lora_id=lora, medium=MEDIUM_GPU))
            elif kind == _kvslab.KV_REMOVED:
                out.append(BlockRemoved(block_hashes=[maybe_convert_block_hash(h)
                                                      for h in hashes], medium=MEDIUM_GPU))
            elif kind == _kvslab.KV_ALL_CLEARED:
                out.append(AllBlocksCleared())
        return out

    def take_events(self):
        """The KV events since the last call, as vLLM's take_events(); []
        when events are off."""
        if not self.enable_kv_cache_events:
            return []
        out = self._pending
        self._pending = []
        out.extend(self._drain())
        return out
