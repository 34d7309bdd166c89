# SPDX-License-Identifier: MIT
"""Drop-ins for SGLang's memory managers (python/sglang/srt/mem_cache/).

``RadixCache`` has the methods and return types SGLang's scheduler calls on
its ``RadixCache`` (radix_cache.py, SGLang v0.4.x/v0.5 main as of 2026-11):
``match_prefix`` returning a ``MatchResult`` (device indices, last device
node, last host node), ``insert`` returning the cached prefix length,
``evict``, ``inc_lock_ref`` / ``dec_lock_ref`` returning the change of the
protected size, ``evictable_size``, ``protected_size``, ``total_size``,
``reset`` and ``pretty_print``.  The tree is kvslab's (kvs_radix_create(3)):
LRU over leaves, no slab-aware reordering (SGLang's order; pass
``slab_aware=1`` for kvslab's).

What differs, and why:

- Device indices come back as a numpy int64 array, or a torch int64 tensor
  when torch is installed (SGLang returns torch tensors).
- Keys are lists (or sequences) of token ids, or objects with ``token_ids``
  and ``extra_key`` (SGLang's RadixKey); a plain string is taken as the
  sequence of its characters' code points, as SGLang's own unit tests use
  strings.  Extra keys must be ints (kvslab hashes them as 64-bit keys).
- Evicted indices go to ``token_to_kv_pool_allocator.free()`` in one call
  per ``evict()``, where SGLang calls it once per evicted leaf.
- ``insert(key)`` without a value: SGLang stores the token ids themselves
  as the "indices" (its self-test does this); kvslab's tree holds KV
  locations, which are distinct within a key, so the drop-in stores fresh
  distinct placeholder locations instead.  Lengths and sizes are the same.
- Nodes are handles: compare them, pass them back; they carry no children.
"""
from collections import namedtuple

from . import Radix, Reqtab, EVICT_LRU, _np

try:
    import torch as _torch
except ImportError:  # torch is optional
    _torch = None

MatchResult = namedtuple("MatchResult", ["device_indices", "last_device_node",
                                         "last_host_node", "host_hit_length"],
                         defaults=(0,))


class TreeNode:
    """A node of the tree: a handle, equal to the same node returned again."""

    __slots__ = ("_h",)

    def __init__(self, handle):
        self._h = handle

    def __eq__(self, other):
        return isinstance(other, TreeNode) and other._h == self._h

    def __hash__(self):
        return hash(self._h)

    def __repr__(self):
        return "TreeNode(0x%x)" % self._h


def _indices(arr32):
    a = _np.asarray(arr32, dtype=_np.int64)
    if _torch is not None:
        return _torch.from_numpy(a)
    return a


def _key_of(key):
    extra = 0
    if hasattr(key, "token_ids"):
        extra = getattr(key, "extra_key", None) or 0
        if not isinstance(extra, int):
            raise TypeError("kvslab: extra keys must be ints")
        key = key.token_ids
    if isinstance(key, str):
        key = [ord(c) for c in key]
    return key, extra


class RadixCache:
    """SGLang's RadixCache on kvslab's radix tree.

    ``RadixCache(req_to_token_pool, token_to_kv_pool_allocator, page_size=1,
    disable=False)`` as SGLang constructs it; with a
    :class:`TokenToKVPoolAllocator` of this module the tree frees into its
    kvslab pool directly, with any other allocator (or None) the evicted
    indices go to its ``free()``.
    """

    def __init__(self, req_to_token_pool=None, token_to_kv_pool_allocator=None, page_size=1,
                 disable=False, enable_kv_cache_events=False, eviction_policy="lru",
                 slab_aware=0):
        if eviction_policy != "lru":
            raise ValueError("kvslab.sglang.RadixCache: only the lru policy is followed")
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.page_size = page_size
        self.disable = disable
        pool = getattr(token_to_kv_pool_allocator, "_kvslab_pool", None)
        self._free_to = None if pool is not None else token_to_kv_pool_allocator
        self._tree = Radix(pool, page_size=page_size, policy=EVICT_LRU, disabled=disable,
                           slab_aware=slab_aware)
        self._root = TreeNode(self._tree.match([], None)[1])
        self._next_fake = 1 << 24  # placeholder locations of insert(key)

    # -- lifecycle
    def reset(self):
        self._tree.reset()

    def close(self):
        self._tree.close()

    @property
    def root_node(self):
        return self._root

    # -- matching and inserting
    def match_prefix(self, key, **kwargs):
        key, extra = _key_of(key)
        out = _np.empty(len(key), dtype=_np.int32)
        n, node = self._tree.match(key, out, extra_key=extra)
        return MatchResult(_indices(out[:n]), TreeNode(node), TreeNode(node))

    def insert(self, key, value=None, chunked=False, priority=0):
        key, extra = _key_of(key)
        if value is None:
            value = _np.arange(self._next_fake, self._next_fake + len(key), dtype=_np.int32)
            self._next_fake += len(key)
        vals = _np.asarray(value.cpu().numpy() if hasattr(value, "cpu") else value,
                           dtype=_np.int32)
        prefix, _ = self._tree.insert(key, vals, priority=priority, extra_key=extra)
        return prefix

    # -- requests (SGLang's Req: req_pool_idx, origin_input_ids,
    #    output_ids, fill_ids, prefix_indices, last_node)
    def cache_finished_req(self, req, is_insert=True):
        """Cache a finished request's tokens and give back its row and the
        locations the tree already had (SGLang's cache_finished_req)."""
        token_ids = (list(req.origin_input_ids) + list(req.output_ids))[:-1]
        kv = _np.array(self.req_to_token_pool.req_to_token[req.req_pool_idx, :len(token_ids)],
                       dtype=_np.int32)
        if self.disable or not is_insert:
            self._free(kv)
            self.req_to_token_pool.free(req.req_pool_idx)
            self.dec_lock_ref(req.last_node)
            return
        aligned = len(kv) // self.page_size * self.page_size
        if aligned < len(kv):
            self._free(kv[aligned:])
        new_prefix = self.insert(token_ids[:aligned], kv[:aligned])
        self._free(kv[len(req.prefix_indices):new_prefix])
        self.req_to_token_pool.free(req.req_pool_idx)
        self.dec_lock_ref(req.last_node)

    def cache_unfinished_req(self, req, chunked=False):
        """Cache what a running request computed so far and lock it: the row
        is rewritten with the tree's locations (SGLang's cache_unfinished_req)."""
        if self.disable:
            return
        token_ids = list(req.fill_ids)
        kv = _np.array(self.req_to_token_pool.req_to_token[req.req_pool_idx, :len(token_ids)],
                       dtype=_np.int32)
        aligned = len(kv) // self.page_size * self.page_size
        new_prefix = self.insert(token_ids[:aligned], kv[:aligned])
        self._free(kv[len(req.prefix_indices):new_prefix])
        m = self.match_prefix(token_ids[:aligned])
        new_idx = _np.asarray(m.device_indices, dtype=_np.int32)
        start = len(req.prefix_indices)
        if len(new_idx) > start:
            self.req_to_token_pool.write((req.req_pool_idx, slice(start, len(new_idx))),
                                         new_idx[start:])
        self.dec_lock_ref(req.last_node)
        self.inc_lock_ref(m.last_device_node)
        tail = kv[aligned:]
        req.prefix_indices = _indices(_np.concatenate([new_idx, tail]))
        req.last_node = m.last_device_node

    def _free(self, idx):
        if len(idx) == 0:
            return
        if self.token_to_kv_pool_allocator is not None:
            self.token_to_kv_pool_allocator.free(_indices(idx))

    # -- eviction and locks
    def evict(self, num_tokens):
        got, raw = self._tree.evict(num_tokens)
        if raw and self._free_to is not None:
            self._free_to.free(_indices(_np.frombuffer(raw, dtype=_np.int32)))
        return got

    def inc_lock_ref(self, node):
        before = self._tree.protected()
        self._tree.lock(node._h)
        return self._tree.protected() - before

    def dec_lock_ref(self, node, swa_uuid_for_lock=None):
        before = self._tree.protected()
        self._tree.unlock(node._h)
        return before - self._tree.protected()

    # -- sizes
    def evictable_size(self):
        return self._tree.evictable()

    def protected_size(self):
        return self._tree.protected()

    def total_size(self):
        return self._tree.tokens()

    def pretty_print(self):
        st = self._tree.stats()
        print("#tokens: %d, #nodes: %d, evictable %d, protected %d" %
              (self.total_size(), self._tree.nodes(), self.evictable_size(),
               self.protected_size()))
        return st


class TokenToKVPoolAllocator:
    """SGLang's token-to-KV allocator (allocator.py) over a kvslab Pool:
    ``alloc(need_size)`` returns int64 indices or None when short, ``free``,
    ``available_size``; a RadixCache given this allocator frees into the
    pool itself."""

    def __init__(self, pool):
        self._kvslab_pool = pool
        self.page_size = pool.page_size

    @property
    def size(self):
        return self._kvslab_pool.capacity

    def available_size(self):
        return self._kvslab_pool.available()

    def alloc(self, need_size):
        from . import Error
        try:
            return _indices(self._kvslab_pool.alloc(need_size))
        except Error:
            return None

    def free(self, free_index):
        if hasattr(free_index, "cpu"):
            free_index = free_index.cpu().numpy()
        if len(free_index):
            self._kvslab_pool.free(_np.asarray(free_index, dtype=_np.int32))


class ReqToTokenPool:
    """SGLang's ReqToTokenPool (memory_pool.py) on a kvslab request table:
    ``alloc(need_size)`` returns slot indices or None, ``free(idx)`` takes one
    slot or a list, ``write((slot, slice), values)`` writes a row's entries,
    ``req_to_token`` is a (size, max_context_len) int32 read-only view of the
    host mirror (SGLang's is a device tensor), ``available_size()``,
    ``clear()``."""

    def __init__(self, size, max_context_len, driver, device="cpu", enable_memory_saver=False):
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        self._tab = Reqtab(driver, size, max_context_len)
        self.req_to_token = self._tab.table()
        self._held = set()

    def available_size(self):
        return self._tab.available()

    def alloc(self, need_size=1):
        slots = self._tab.alloc(need_size)
        if slots is not None:
            self._held.update(slots)
        return slots

    def free(self, free_index):
        if isinstance(free_index, int):
            free_index = [free_index]
        for i in free_index:
            self._tab.free(int(i))
            self._held.discard(int(i))

    def write(self, indices, values):
        slot, cols = indices
        if isinstance(cols, slice):
            start = cols.start or 0
        else:
            start = int(cols)
        vals = values.cpu().numpy() if hasattr(values, "cpu") else values
        self._tab.write(int(slot), start, _np.asarray(vals, dtype=_np.int32))

    def clear(self):
        for i in list(self._held):
            self.free(i)

    def close(self):
        self.req_to_token = None
        self._tab.close()
