# SPDX-License-Identifier: MIT
"""Drop-ins for SGLang's memory managers (python/sglang/srt/mem_cache/).

Peer followed: sgl-project/sglang, radix_cache.py at commit 006b0e3d317f
(the ``CacheInitParams`` / ``MatchPrefixParams`` / ``InsertParams`` /
``EvictParams`` interface, KV events from ``sglang.srt.disaggregation.
kv_events``), allocator.py at 02e29cb18ae1 (``TokenToKVPoolAllocator`` and
``PagedTokenToKVPoolAllocator``) and memory_pool.py at 000ccdba94d4
(``ReqToTokenPool``).  The older positional calls SGLang's own unit tests
still make (``RadixCache(req_to_token_pool, allocator, page_size=...)``,
``insert(key, value)``, ``match_prefix(key)``, ``evict(n)``) are accepted as
well; a call in the params form returns the params-form result
(``InsertResult``, ``EvictResult``), a positional call the plain int.

Covered, with SGLang's return types: ``RadixCache`` (``match_prefix``,
``insert``, ``evict``, ``inc_lock_ref``, ``dec_lock_ref``,
``cache_finished_req``, ``cache_unfinished_req``, ``evictable_size``,
``protected_size``, ``total_size``, ``reset``, ``pretty_print``,
``take_events``, ``root_node``, ``device``, ``create_simulated``);
``TokenToKVPoolAllocator`` (``alloc``, ``free``, ``available_size``,
``backup_state``, ``restore_state``, ``free_group_begin``, ``free_group_end``,
``clear``, ``size``, ``page_size``, ``device``) and, with ``page_size > 1``,
``PagedTokenToKVPoolAllocator`` (the same plus ``alloc_extend`` and
``alloc_decode``); ``ReqToTokenPool`` (``alloc``, ``free``, ``write``,
``available_size``, ``clear``, ``req_to_token``); ``HiRadixCache`` (see its
docstring).  Defaults are SGLang's: LRU eviction, no slab-aware reordering
(pass ``slab_aware=1`` for kvslab's), location 0 (page 0) never handed out
(SGLang's padded slot).  Not offered: ``all_values_flatten``, the "mru" and
"filo" policies, EAGLE bigram keys, the SWA / Mamba / unified caches,
``get_cpu_copy`` / ``load_cpu_copy`` (KV bytes go through the pool).

Example (what SGLang's scheduler does for one request)::

    drv = kvslab.Driver("host")           # or Driver("cuda")
    pool = kvslab.Pool(drv, "llama-3-8b", page_size=16, max_tokens=1 << 20)
    alloc = PagedTokenToKVPoolAllocator(kvcache=pool, page_size=16)
    rtp = ReqToTokenPool(256, 8192, drv)
    tree = RadixCache(CacheInitParams(req_to_token_pool=rtp,
                                      token_to_kv_pool_allocator=alloc, page_size=16))
    m = tree.match_prefix(MatchPrefixParams(key=RadixKey(req.fill_ids)))
    req.prefix_indices, req.last_node = m.device_indices, m.last_device_node
    tree.inc_lock_ref(req.last_node)
    ... alloc.alloc_extend(...) / alloc.alloc_decode(...), rtp.write(...) ...
    tree.cache_finished_req(req); rtp.free(req.req_pool_idx)

What differs, and why:

- Device indices are torch int64 CPU tensors when torch is installed, numpy
  int64 arrays otherwise (SGLang returns tensors on the allocator's device;
  kvslab's tree and pool live in host memory).
- ``extra_key`` may be a string (SGLang's LoRA id / cache salt) or an int:
  kvslab keys extra keys by 64 bits, so a string is reduced to a 64-bit
  BLAKE2b digest (distinct strings collide with probability 2**-64).
- ``insert(key)`` without a value: SGLang stores the token ids themselves as
  the "indices" (its tests do this); kvslab's tree holds KV locations, which
  are distinct within a key, so the drop-in stores fresh distinct
  placeholder locations instead (over no pool only).  Lengths, sizes and
  events are the same; ``all_values_flatten`` is not offered.
- Evicted indices go to a foreign allocator's ``free()`` in one call per
  ``evict()``, where SGLang calls it once per evicted leaf; with this
  module's allocator the tree frees into the kvslab pool itself.
- Nodes are handles (``TreeNode``): compare them and pass them back; they
  carry no children, key or value.  A handle of a node that an eviction or a
  reset removed raises ``ValueError`` when locked or unlocked (SGLang would
  touch a detached node).
- ``dec_lock_ref`` of a node that is not locked raises ``kvslab.Error``
  (SGLang lets the count go negative).
- ``TokenToKVPoolAllocator.restore_state`` gives back what was allocated
  since ``backup_state``; a free made in between stays made (SGLang's
  snapshot of its free list would take the free back, leaking the slots).
  ``clear()`` works only when nothing is allocated (SGLang drops every
  allocation, which kvslab's reference-counted pool cannot).
- KV event hashes are SGLang's (SHA-256 chained per page, first 8 bytes as a
  signed int64), computed in Python from the tokens the library reports;
  ``eviction_policy`` "mru" and "filo" and EAGLE bigram keys are not offered.
"""
import hashlib as _hashlib
from collections import namedtuple
from dataclasses import dataclass
from typing import Any, List, Optional

from . import Reqtab, EVICT_LRU, EVICT_LFU, EVICT_FIFO, EVICT_PRIORITY, _np
from . import _kvslab

try:
    import torch as _torch
except ImportError:  # torch is optional
    _torch = None

_POLICIES = {"lru": EVICT_LRU, "lfu": EVICT_LFU, "fifo": EVICT_FIFO,
             "priority": EVICT_PRIORITY}

# -- SGLang's data shapes (base_prefix_cache.py, kv_events.py)

MatchResult = namedtuple("MatchResult", ["device_indices", "last_device_node",
                                         "last_host_node", "host_hit_length"],
                         defaults=(0,))
MatchResult.__doc__ = "SGLang's MatchResult: device indices, last device/host node, host hit."


@dataclass
class MatchPrefixParams:
    """SGLang's MatchPrefixParams."""
    key: Any
    cow_mamba: bool = False
    req: Any = None


@dataclass
class InsertParams:
    """SGLang's InsertParams."""
    key: Any = None
    value: Any = None
    mamba_value: Any = None
    prev_prefix_len: int = 0
    swa_evicted_seqlen: int = 0
    chunked: bool = False
    priority: int = 0


@dataclass
class InsertResult:
    """SGLang's InsertResult."""
    prefix_len: int
    mamba_exist: bool = False


@dataclass
class EvictParams:
    """SGLang's EvictParams."""
    num_tokens: int = 0
    swa_num_tokens: int = 0
    mamba_num: int = 0


@dataclass
class EvictResult:
    """SGLang's EvictResult."""
    num_tokens_evicted: int = 0
    swa_num_tokens_evicted: int = 0
    mamba_num_evicted: int = 0


@dataclass
class CacheInitParams:
    """SGLang's CacheInitParams (the fields RadixCache reads), plus
    ``slab_aware`` (kvslab's slab-aware eviction; 0, SGLang's order, by default)."""
    disable: bool = False
    req_to_token_pool: Any = None
    token_to_kv_pool_allocator: Any = None
    page_size: int = 1
    enable_kv_cache_events: bool = False
    is_eagle: bool = False
    disable_finished_insert: bool = False
    eviction_policy: str = "lru"
    enable_metrics: bool = False
    slab_aware: int = 0


MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"


@dataclass
class BlockStored:
    """SGLang's (vLLM's) BlockStored KV event."""
    block_hashes: List[int]
    parent_block_hash: Optional[int]
    token_ids: List[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str] = MEDIUM_GPU


@dataclass
class BlockRemoved:
    """SGLang's BlockRemoved KV event."""
    block_hashes: List[int]
    medium: Optional[str] = MEDIUM_GPU


@dataclass
class AllBlocksCleared:
    """SGLang's AllBlocksCleared KV event."""


class RadixKey:
    """SGLang's RadixKey: token ids and an optional extra key (namespace)."""

    __slots__ = ("token_ids", "extra_key", "is_bigram")

    def __init__(self, token_ids, extra_key=None, is_bigram=False):
        self.token_ids = token_ids
        self.extra_key = extra_key
        self.is_bigram = is_bigram

    def __len__(self):
        return len(self.token_ids)

    def __iter__(self):
        return iter(self.token_ids)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return RadixKey(self.token_ids[idx], self.extra_key)
        return RadixKey([self.token_ids[idx]], self.extra_key)

    def __repr__(self):
        head = list(self.token_ids[:10])
        return "RadixKey(extra_key=%r, token_ids=%s%s)" % (
            self.extra_key, head, "..." if len(self.token_ids) > 10 else "")


BaseKey = RadixKey  # the name SGLang's newer unit tests use


class TreeNode:
    """A node of the tree: a handle, equal to the same node returned again."""

    __slots__ = ("_h", "_epoch", "_key", "_len", "_extra")

    def __init__(self, handle, epoch=0, key=None, length=0, extra=0):
        self._h = handle
        self._epoch = epoch
        self._key = key
        self._len = length
        self._extra = extra

    @property
    def id(self):
        return self._h

    def __eq__(self, other):
        return isinstance(other, TreeNode) and other._h == self._h

    def __hash__(self):
        return hash(self._h)

    def __repr__(self):
        return "TreeNode(0x%x)" % self._h


def _indices(arr):
    """int64 device indices: a torch tensor when torch is there, numpy otherwise."""
    a = _np.asarray(arr, dtype=_np.int64)
    if _torch is not None:
        return _torch.from_numpy(a)
    return a


_RANGE = "kvslab: locations must be ints in [0, 2**31)"


def _as_locs(value):
    """Locations as an int32 or int64 numpy array, without a copy where it
    already is one (a CPU torch tensor's numpy view included): the extension
    converts int64 itself, range-checked (OverflowError, which the callers
    turn into ValueError); negatives are refused here."""
    if hasattr(value, "cpu"):
        value = value.cpu().numpy()
    a = _np.asarray(value)
    if a.dtype != _np.int64 and a.dtype != _np.int32:
        if a.size and a.dtype.kind not in "iu":
            raise ValueError(_RANGE)
        a = a.astype(_np.int64)
    if a.size and a.min() < 0:
        raise ValueError(_RANGE)
    return a


def _extra_int(extra):
    if extra is None:
        return 0
    if isinstance(extra, bool):
        raise TypeError("kvslab: an extra key is a str or an int")
    if isinstance(extra, int):
        if not 0 <= extra < 1 << 64:
            raise ValueError("kvslab: an int extra key is in [0, 2**64)")
        return extra
    if isinstance(extra, str):
        d = _hashlib.blake2b(extra.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(d, "little") or 1  # 0 is "no extra key"
    raise TypeError("kvslab: an extra key is a str or an int")


def _key_of(key):
    """(token ids, 64-bit extra key) of a RadixKey, an object with token_ids,
    a sequence of ints or a string (its characters' code points)."""
    extra = 0
    if hasattr(key, "token_ids"):
        if getattr(key, "is_bigram", False):
            raise NotImplementedError("kvslab.sglang: EAGLE bigram keys are not offered")
        extra = _extra_int(getattr(key, "extra_key", None))
        key = key.token_ids
    if isinstance(key, str):
        key = [ord(c) for c in key]
    return key, extra


def _sglang_page_hash(tokens, prior_hex):
    """SGLang's get_hash_str: SHA-256 of the prior digest and the tokens as
    4-byte little-endian words."""
    h = _hashlib.sha256()
    if prior_hex:
        h.update(bytes.fromhex(prior_hex))
    for t in tokens:
        h.update(int(t).to_bytes(4, "little", signed=False))
    return h.hexdigest()


def _hex_to_int64(hex_str):
    """SGLang's hash_str_to_int64: the first 16 hex digits as a signed int64."""
    v = int(hex_str[:16], 16)
    return v - (1 << 64) if v >= 1 << 63 else v


class _EventTranslator:
    """Turns the library's per-page events (kvslab's 64-bit chain) into
    SGLang's event objects with SGLang's hashes: a map from kvslab's hash of
    each page stored (on any tier) to SGLang's hex digest of it, and how many
    tiers hold it, gives the parents."""

    def __init__(self, medium_names):
        self.sg = {}
        self.medium_names = medium_names

    def translate(self, raw):
        out = []
        sg = self.sg
        for kind, h, parent, tokens, medium, _extra in raw:
            medium = self.medium_names.get(medium, MEDIUM_GPU)
            if kind == _kvslab.KV_STORED:
                phex = sg[parent][0] if parent in sg else None
                ent = sg.get(h)
                if ent is None:
                    ent = sg[h] = [_sglang_page_hash(tokens, phex), 0]
                ent[1] += 1
                out.append(BlockStored(block_hashes=[_hex_to_int64(ent[0])],
                                       parent_block_hash=None if phex is None
                                       else _hex_to_int64(phex),
                                       token_ids=list(tokens), block_size=len(tokens),
                                       lora_id=None, medium=medium))
            elif kind == _kvslab.KV_REMOVED:
                ent = sg.get(h)
                if ent is not None:
                    ent[1] -= 1
                    if ent[1] <= 0:
                        del sg[h]
                out.append(BlockRemoved(block_hashes=[_hex_to_int64(ent[0]) if ent else h],
                                        medium=medium))
            elif kind == _kvslab.KV_ALL_CLEARED:
                sg.clear()
                out.append(AllBlocksCleared())
        return out


def _events_supported():
    return hasattr(_kvslab, "KV_STORED")


def _tree_params(args, kwargs):
    """RadixCache's arguments in either of SGLang's forms: one
    CacheInitParams, or (req_to_token_pool, token_to_kv_pool_allocator,
    page_size, disable, enable_kv_cache_events, ...)."""
    if len(args) == 1 and not kwargs.keys() - {"slab_aware"} and \
            hasattr(args[0], "token_to_kv_pool_allocator") and hasattr(args[0], "page_size"):
        p = args[0]
        return dict(req_to_token_pool=p.req_to_token_pool,
                    token_to_kv_pool_allocator=p.token_to_kv_pool_allocator,
                    page_size=p.page_size, disable=p.disable,
                    enable_kv_cache_events=getattr(p, "enable_kv_cache_events", False),
                    eviction_policy=getattr(p, "eviction_policy", "lru"),
                    is_eagle=getattr(p, "is_eagle", False),
                    disable_finished_insert=getattr(p, "disable_finished_insert", False),
                    slab_aware=kwargs.get("slab_aware", getattr(p, "slab_aware", 0)))
    names = ("req_to_token_pool", "token_to_kv_pool_allocator", "page_size", "disable",
             "enable_kv_cache_events", "eviction_policy")
    if len(args) > len(names):
        raise TypeError("RadixCache takes at most %d positional arguments" % len(names))
    d = dict(req_to_token_pool=None, token_to_kv_pool_allocator=None, page_size=1,
             disable=False, enable_kv_cache_events=False, eviction_policy="lru",
             is_eagle=False, disable_finished_insert=False, slab_aware=0)
    for n, v in zip(names, args):
        d[n] = v
    for n, v in kwargs.items():
        if n not in d:
            raise TypeError("RadixCache got an unexpected keyword argument %r" % n)
        d[n] = v
    return d


class RadixCache:
    """SGLang's RadixCache on kvslab's radix tree (kvs_radix_create(3)).

    ``RadixCache(CacheInitParams(...))`` as SGLang's current scheduler builds
    it, or ``RadixCache(req_to_token_pool, token_to_kv_pool_allocator,
    page_size=1, disable=False, enable_kv_cache_events=False,
    eviction_policy="lru", slab_aware=0)``.  With a
    :class:`TokenToKVPoolAllocator` of this module the tree holds and frees
    pages of its kvslab pool directly; with any other allocator (or None) the
    evicted indices go to that allocator's ``free()``.
    """

    def __init__(self, *args, **kwargs):
        p = _tree_params(args, kwargs)
        policy = str(p["eviction_policy"]).lower()
        if policy not in _POLICIES:
            raise ValueError("kvslab.sglang.RadixCache: eviction policy %r is not offered "
                             "(one of %s)" % (policy, ", ".join(sorted(_POLICIES))))
        if p["is_eagle"]:
            raise NotImplementedError("kvslab.sglang: EAGLE bigram keys are not offered")
        if p["page_size"] < 1:
            raise ValueError("page_size must be at least 1")
        self.req_to_token_pool = p["req_to_token_pool"]
        alloc = p["token_to_kv_pool_allocator"]
        self.token_to_kv_pool_allocator = alloc
        self.page_size = p["page_size"]
        self.disable = bool(p["disable"])
        self.enable_kv_cache_events = bool(p["enable_kv_cache_events"])
        self.disable_finished_insert = bool(p["disable_finished_insert"])
        self.eviction_policy = policy
        self.is_eagle = False
        if alloc is not None and getattr(alloc, "device", None) is not None:
            self.device = alloc.device
        else:
            self.device = _torch.device("cpu") if _torch is not None else "cpu"
        pool = getattr(alloc, "_kvslab_pool", None)
        self._free_to = None if pool is not None else alloc
        self._pooled = pool is not None
        events = self.enable_kv_cache_events
        if events and not _events_supported():
            raise NotImplementedError("kvslab.sglang: this build of the extension has no "
                                      "KV events")
        # The extension's type itself: the events flag is its sixth argument.
        targs = (pool, self.page_size, _POLICIES[policy], self.disable, p["slab_aware"])
        self._tree = _kvslab.Radix(*(targs + (True,) if events else targs))
        self._epoch = 0
        self._held_locks = {}  # handle -> locks taken through this object
        self._root = TreeNode(self._tmatch([], None, 0)[1])
        self._next_fake = 1 << 24  # placeholder locations of insert(key)
        self._events = _EventTranslator({getattr(_kvslab, "MEDIUM_GPU", 0): MEDIUM_GPU,
                                         getattr(_kvslab, "MEDIUM_CPU", 1): MEDIUM_CPU})
        # SGLang's constructor calls reset(), which queues AllBlocksCleared.
        self._pending = [AllBlocksCleared()] if events else []

    @classmethod
    def create_simulated(cls, disable=False, mock_allocator=None, page_size=1,
                         enable_kv_cache_events=False):
        """A cache without memory pools (SGLang's create_simulated)."""
        return cls(CacheInitParams(disable=disable, token_to_kv_pool_allocator=mock_allocator,
                                   page_size=page_size,
                                   enable_kv_cache_events=enable_kv_cache_events))

    # -- lifecycle
    def reset(self):
        """Drop every node (none may be locked), as SGLang's reset()."""
        if self.enable_kv_cache_events:
            self._pending.extend(self._drain())
        self._tree.reset()
        self._epoch += 1
        self._held_locks.clear()
        if self.enable_kv_cache_events:
            # SGLang queues AllBlocksCleared alone, no removal per page.
            self._tree.take_events()
            self._events.sg.clear()
            self._pending.append(AllBlocksCleared())

    def close(self):
        self._tree.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def root_node(self):
        return self._root

    def is_chunk_cache(self):
        return False

    # -- matching and inserting
    def match_prefix(self, key, **kwargs):
        """The longest cached prefix of ``key`` (a RadixKey, a token list or
        a MatchPrefixParams): a MatchResult with its device indices (int64)
        and the node that ends it."""
        if hasattr(key, "key") and not hasattr(key, "token_ids"):
            key = key.key
        ids, extra = _key_of(key)
        n = len(ids)
        if self.disable or n == 0:
            return MatchResult(_indices(()), self._root, self._root)
        out = _np.empty(n, dtype=_np.int64)  # written as int64 by the extension
        got, node = self._tmatch(ids, out, extra)
        node = TreeNode(node, self._epoch, ids, got, extra)
        return MatchResult(_indices(out[:got]), node, node)

    def insert(self, key, value=None, chunked=False, priority=0):
        """Cache ``key`` with its locations ``value``; returns how many
        leading tokens were cached already (an InsertResult when called with
        InsertParams).  The caller frees those duplicates, as in SGLang."""
        params = hasattr(key, "key") and not hasattr(key, "token_ids")
        if params:
            value, priority = key.value, key.priority
            key = key.key
        prefix = self._insert(key, value, priority)
        return InsertResult(prefix_len=prefix) if params else prefix

    def _insert(self, key, value, priority):
        if self.disable:
            return 0
        ids, extra = _key_of(key)
        if value is None:
            if self._pooled:
                raise ValueError("kvslab.sglang: insert over a kvslab pool needs the locations")
            ps = self.page_size
            value = _np.arange(self._next_fake, self._next_fake + len(ids), dtype=_np.int32)
            self._next_fake += (len(ids) + ps - 1) // ps * ps
        vals = _as_locs(value)
        try:
            return self._tinsert(ids, vals, priority or 0, extra)
        except OverflowError:
            raise ValueError(_RANGE) from None

    # -- the tree's calls, which HiRadixCache replaces
    def _tmatch(self, ids, out, extra):
        return self._tree.match(ids, out, extra_key=extra)

    def _tinsert(self, ids, vals, priority, extra):
        return self._tree.insert(ids, vals, priority=priority, extra_key=extra)[0]

    def _tevict(self, n):
        return self._tree.evict(n)

    def _tlock(self, node):
        before = self.protected_size()
        self._tree.lock(node._h)
        return before - self.protected_size()

    def _tunlock(self, node):
        before = self.protected_size()
        self._tree.unlock(node._h)
        return before - self.protected_size()

    # -- requests (SGLang's Req: req_pool_idx, origin_input_ids, output_ids,
    #    fill_ids, prefix_indices, last_node, cache_protected_len, extra_key)
    def _row(self, req, n):
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx, :n]
        if hasattr(row, "cpu"):
            row = row.cpu().numpy()
        return _np.array(row, dtype=_np.int32)

    @staticmethod
    def _protected_len(req):
        n = getattr(req, "cache_protected_len", None)
        return len(req.prefix_indices) if n is None else n

    def cache_finished_req(self, req, is_insert=True, **kwargs):
        """Cache a finished request's committed tokens, free the locations
        the tree had already and the unaligned tail, and unlock its node
        (SGLang's cache_finished_req; the request's row is the scheduler's
        to free)."""
        if self.disable_finished_insert:
            is_insert = False
        if hasattr(req, "pop_committed_kv_cache"):
            committed = req.pop_committed_kv_cache()
        else:
            committed = len(req.origin_input_ids) + len(req.output_ids) - 1
        if self.disable:
            self._free(self._row(req, committed))
            return
        token_ids = (list(req.origin_input_ids) + list(req.output_ids))[:committed]
        kv = self._row(req, len(token_ids))
        aligned = len(token_ids) // self.page_size * self.page_size
        protected = self._protected_len(req)
        if is_insert:
            key = RadixKey(token_ids[:aligned], getattr(req, "extra_key", None))
            new_prefix = self._insert(key, kv[:aligned], getattr(req, "priority", 0) or 0)
            self._free(kv[protected:new_prefix])
        else:
            self._free(kv[protected:aligned])
        self._free(kv[aligned:])
        self.dec_lock_ref(req.last_node)

    def cache_unfinished_req(self, req, chunked=False, **kwargs):
        """Cache what a running request computed so far and move its lock
        there; its row is rewritten with the tree's locations (SGLang's
        cache_unfinished_req)."""
        if self.disable:
            return
        token_ids = list(req.fill_ids)
        kv = self._row(req, len(token_ids))
        aligned = len(token_ids) // self.page_size * self.page_size
        key = RadixKey(token_ids[:aligned], getattr(req, "extra_key", None))
        new_prefix = self._insert(key, kv[:aligned], getattr(req, "priority", 0) or 0)
        protected = self._protected_len(req)
        self._free(kv[protected:new_prefix])
        m = self.match_prefix(key)
        new_idx = _np.asarray(m.device_indices, dtype=_np.int32)
        if len(new_idx) != aligned:
            raise RuntimeError("kvslab.sglang: cached %d of %d tokens" % (len(new_idx), aligned))
        if len(new_idx) > protected:
            self.req_to_token_pool.write((req.req_pool_idx, slice(protected, len(new_idx))),
                                         _indices(new_idx[protected:]))
        req.cache_protected_len = len(new_idx)
        self.dec_lock_ref(req.last_node)
        self.inc_lock_ref(m.last_device_node)
        if len(new_idx) < len(kv):
            req.prefix_indices = _indices(_np.concatenate([new_idx, kv[len(new_idx):]]))
        else:
            req.prefix_indices = m.device_indices
        req.last_node = m.last_device_node

    def _free(self, idx):
        if len(idx) == 0 or self.token_to_kv_pool_allocator is None:
            return
        self.token_to_kv_pool_allocator.free(_indices(idx))

    # -- eviction and locks
    def evict(self, num_tokens):
        """Evict at least ``num_tokens`` tokens, whole leaves, in the policy's
        order; returns the tokens evicted (an EvictResult when called with
        EvictParams)."""
        params = not isinstance(num_tokens, int)
        n = num_tokens.num_tokens if params else num_tokens
        got = 0
        if not self.disable and n > 0:
            got, raw = self._tevict(n)
            if got:
                self._epoch += 1
            if raw and self._free_to is not None:
                self._free_to.free(_indices(_np.frombuffer(raw, dtype=_np.int32)))
        return EvictResult(num_tokens_evicted=got) if params else got

    def _node(self, node):
        """The handle of a node of this tree, checked to be still there when
        an eviction or reset came after it was returned."""
        if not isinstance(node, TreeNode):
            raise TypeError("kvslab.sglang: not a node of this cache: %r" % (node,))
        if node._epoch == self._epoch or node._h in self._held_locks or \
                node._h == self._root._h:
            return node._h  # a locked node cannot have been evicted
        got, h = self._tmatch(node._key[:node._len], None, node._extra) \
            if node._key is not None else (-1, None)
        if got != node._len or h != node._h:
            raise ValueError("kvslab.sglang: %r is no longer in the cache" % (node,))
        node._epoch = self._epoch
        return h

    def inc_lock_ref(self, node):
        """Lock ``node`` and its ancestors; returns the change of the
        evictable size (0 or negative), as SGLang's."""
        if self.disable:
            return 0
        self._node(node)
        delta = self._tlock(node)
        self._held_locks[node._h] = self._held_locks.get(node._h, 0) + 1
        return delta

    def dec_lock_ref(self, node, *args, **kwargs):
        """Unlock ``node`` and its ancestors; returns the change of the
        evictable size (0 or positive), as SGLang's."""
        if self.disable:
            return 0
        self._node(node)
        delta = self._tunlock(node)
        c = self._held_locks.get(node._h, 0) - 1
        if c > 0:
            self._held_locks[node._h] = c
        else:
            self._held_locks.pop(node._h, None)
        return delta

    # -- sizes
    def _nodes(self):
        return self._tree.nodes()

    def evictable_size(self):
        return self._tree.evictable()

    def protected_size(self):
        return self._tree.protected()

    def total_size(self):
        return self._tree.tokens()

    def pretty_print(self):
        """Print the cache's sizes (kvslab's tree is not walked from Python)."""
        print("#tokens: %d, #nodes: %d, evictable: %d, protected: %d" %
              (self.total_size(), self._nodes(), self.evictable_size(),
               self.protected_size()))

    # -- KV events
    def _drain(self):
        if not self.enable_kv_cache_events:
            return []
        return self._events.translate(self._tree.take_events())

    def take_events(self):
        """The KV events since the last call (BlockStored per page stored,
        BlockRemoved per page evicted, AllBlocksCleared per reset), as
        SGLang's take_events(); [] when events are off."""
        if not self.enable_kv_cache_events:
            return []
        out = self._pending
        self._pending = []
        out.extend(self._drain())
        return out


_HI_LAYOUTS = {"layer_first": "layer_first", "page_first": "page_first",
               "page_first_direct": "page_first"}


def _storage_uri(backend, extra):
    """A kvslab store URI from SGLang's --hicache-storage-backend: "file"
    (its directory from SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR, as SGLang's
    HiCacheFile, default /tmp/hicache), or a kvslab URI (file://, redis://)."""
    import os
    if backend is None or backend == "":
        return None
    if "://" in backend:
        return backend
    if backend == "file":
        d = (extra or {}).get("storage_dir") if isinstance(extra, dict) else None
        d = d or os.environ.get("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", "/tmp/hicache")
        os.makedirs(d, exist_ok=True)
        return "file://" + os.path.abspath(d)
    raise ValueError("kvslab.sglang: storage backend %r is not offered (file, or a kvslab "
                     "URI: file:///dir, redis://host:port)" % backend)


class HiRadixCache(RadixCache):
    """SGLang's HiRadixCache (hiradix_cache.py) on kvslab's hierarchical
    cache (kvs_hiradix_create(3)): device pool (L1), host pool (L2) of
    ``hicache_ratio`` times the device pool or ``hicache_size`` GB, and an
    optional store (L3).

    ``HiRadixCache(params_or_req_to_token_pool, token_to_kv_pool_allocator,
    page_size=1, ..., hicache_ratio=2.0, hicache_size=0,
    hicache_write_policy="write_through", hicache_io_backend="kernel",
    hicache_mem_layout="layer_first", hicache_storage_backend=None,
    hicache_storage_prefetch_policy="best_effort",
    hicache_storage_backend_extra_config=None, threaded=False)``; the
    allocator must be this module's (the tree holds device pages of its
    kvslab pool).  ``match_prefix`` returns the device prefix and, as
    ``host_hit_length`` and ``last_host_node``, what the host adds;
    ``init_load_back(last_host_node, host_hit_length, mem_quota)`` brings it
    onto the device and returns ``(its device indices, last node)``;
    ``evict`` evicts from the device (write-through nodes stay on the host),
    ``evict_host`` from the host; ``prefetch_from_storage`` /
    ``check_prefetch_progress`` / ``terminate_prefetch`` run L3 prefetches.

    What differs, and why: the copies run on kvslab's host pool (``poll()``
    from ``check_hicache_events``/``ready_to_load_host_cache``, or a
    background thread with ``threaded=True``), not SGLang's cache
    controller; ``hicache_io_backend`` is ignored; storage backends are
    kvslab's stores (file, redis); the protected size is counted in Python
    over the locked paths (the library's hierarchical tree keeps no such
    counter), which gives SGLang's numbers; ``reset`` is not offered;
    priority and eviction policy other than LRU are not offered.
    """

    def __init__(self, *args, hicache_ratio=2.0, hicache_size=0,
                 hicache_write_policy="write_through", hicache_io_backend="kernel",
                 hicache_mem_layout="layer_first", hicache_storage_backend=None,
                 hicache_storage_prefetch_policy="best_effort",
                 hicache_storage_backend_extra_config=None, threaded=False,
                 load_back_threshold=10, prefetch_threshold=256, **kwargs):
        from . import HiRadix
        p = _tree_params(args, kwargs)
        if str(p["eviction_policy"]).lower() != "lru":
            raise ValueError("kvslab.sglang.HiRadixCache: LRU eviction only")
        alloc = p["token_to_kv_pool_allocator"]
        pool = getattr(alloc, "_kvslab_pool", None)
        if pool is None:
            raise TypeError("HiRadixCache needs this module's TokenToKVPoolAllocator")
        if hicache_mem_layout not in _HI_LAYOUTS:
            raise ValueError("hicache_mem_layout is one of %s" % ", ".join(_HI_LAYOUTS))
        if p["is_eagle"]:
            raise NotImplementedError("kvslab.sglang: EAGLE bigram keys are not offered")
        if p["page_size"] != pool.page_size:
            raise ValueError("page_size %d is not the pool's %d" % (p["page_size"],
                                                                  pool.page_size))
        self.req_to_token_pool = p["req_to_token_pool"]
        self.token_to_kv_pool_allocator = alloc
        self.page_size = p["page_size"]
        self.disable = bool(p["disable"])
        if self.disable:
            raise ValueError("kvslab.sglang.HiRadixCache: a disabled cache is RadixCache's")
        self.enable_kv_cache_events = bool(p["enable_kv_cache_events"])
        self.disable_finished_insert = bool(p["disable_finished_insert"])
        self.eviction_policy = "lru"
        self.is_eagle = False
        self.device = getattr(alloc, "device", "cpu")
        self.hicache_write_policy = hicache_write_policy
        self.hicache_storage_backend = hicache_storage_backend
        self._free_to = None
        self._pooled = True
        self._tree = HiRadix(pool, host_ratio=hicache_ratio,
                             host_size="%dG" % hicache_size if hicache_size else 0,
                             layout=_HI_LAYOUTS[hicache_mem_layout],
                             write_policy=hicache_write_policy,
                             load_back_threshold=load_back_threshold,
                             storage=_storage_uri(hicache_storage_backend,
                                                  hicache_storage_backend_extra_config),
                             prefetch_policy=hicache_storage_prefetch_policy,
                             prefetch_threshold=prefetch_threshold, threaded=threaded,
                             events=self.enable_kv_cache_events)
        self._epoch = 0
        self._held_locks = {}  # handle -> locks taken through this object
        self._root = TreeNode(self._tree.root())
        self._events = _EventTranslator({getattr(_kvslab, "MEDIUM_GPU", 0): MEDIUM_GPU,
                                         getattr(_kvslab, "MEDIUM_CPU", 1): MEDIUM_CPU})
        self._pending = [AllBlocksCleared()] if self.enable_kv_cache_events else []
        self._locked = {}  # (extra, path tuple) -> lock count
        self._protected = 0
        self._prefetch_ids = {}
        self._next_prefetch = 1

    # -- the tree's calls
    def _tmatch(self, ids, out, extra):
        got, _host, last_dev = self._tree.match(ids, out, extra_key=extra)[:3]
        return got, last_dev

    def _tinsert(self, ids, vals, priority, extra):
        return self._tree.insert(ids, vals, extra_key=extra)[0]

    def _tevict(self, n):
        return self._tree.evict_device(n), b""

    def _nodes(self):
        return self._tree.usage()["nodes"]

    @staticmethod
    def _union(paths):
        """Distinct non-empty prefixes of a set of token paths (per extra key)."""
        total = 0
        prev = None
        for extra, path in sorted(paths):
            n = len(path)
            if prev is not None and prev[0] == extra:
                q = prev[1]
                m = min(n, len(q))
                i = 0
                while i < m and path[i] == q[i]:
                    i += 1
                n -= i
            total += n
            prev = (extra, path)
        return total

    def _path(self, node):
        return (node._extra, tuple(int(t) for t in node._key[:node._len]))

    def _tlock(self, node):
        self._tree.lock(node._h)
        if node._h == self._root._h:
            return 0
        k = self._path(node)
        self._locked[k] = self._locked.get(k, 0) + 1
        before, self._protected = self._protected, self._union(self._locked)
        return before - self._protected

    def _tunlock(self, node):
        self._tree.unlock(node._h)
        if node._h == self._root._h:
            return 0
        k = self._path(node)
        c = self._locked.get(k, 0) - 1
        if c > 0:
            self._locked[k] = c
        else:
            self._locked.pop(k, None)
        before, self._protected = self._protected, self._union(self._locked)
        return before - self._protected

    # -- SGLang's HiRadixCache calls
    def match_prefix(self, key, **kwargs):
        """The device prefix (indices, last device node) and what the host
        adds past it (host_hit_length, last_host_node)."""
        if hasattr(key, "key") and not hasattr(key, "token_ids"):
            key = key.key
        ids, extra = _key_of(key)
        n = len(ids)
        if n == 0:
            return MatchResult(_indices(()), self._root, self._root, 0)
        out = _np.empty(n, dtype=_np.int32)
        got, host_hit, last_dev, last_node, _last_host = self._tree.match(ids, out,
                                                                          extra_key=extra)
        dev = TreeNode(last_dev, self._epoch, ids, got, extra)
        host = TreeNode(last_node, self._epoch, ids, got + host_hit, extra) \
            if host_hit else dev
        return MatchResult(_indices(out[:got]), dev, host, host_hit)

    def init_load_back(self, last_node, host_hit_length=0, mem_quota=None, **kwargs):
        """Load the host part ending at ``last_node`` onto the device; returns
        (the device indices of what was loaded, the node to lock)."""
        if hasattr(last_node, "best_match_node"):  # InitLoadBackParams
            last_node, host_hit_length, mem_quota = (last_node.best_match_node,
                                                     last_node.host_hit_length,
                                                     last_node.mem_quota)
        if not isinstance(last_node, TreeNode) or last_node._key is None:
            return _indices(()), last_node
        got = self._tree.load_back(last_node._h, quota=mem_quota or 0, wait=True)
        key = RadixKey(list(last_node._key[:last_node._len]), None)
        ids = key.token_ids
        out = _np.empty(len(ids), dtype=_np.int32)
        dlen, _host, last_dev = self._tree.match(ids, out, extra_key=last_node._extra)[:3]
        node = TreeNode(last_dev, self._epoch, ids, dlen, last_node._extra)
        start = last_node._len - host_hit_length if host_hit_length else dlen
        if got <= 0 or dlen <= start:
            return _indices(()), node
        return _indices(out[start:dlen]), node

    def ready_to_load_host_cache(self):
        """Start the loads queued (SGLang's cache controller's producer index: 0)."""
        self._tree.submit()
        return 0

    def check_hicache_events(self):
        """Take in the copies that completed (write-through backups, loads)."""
        self._tree.poll()

    def evict_host(self, num_tokens):
        """Evict at least ``num_tokens`` host tokens of nodes not on the device."""
        return self._tree.evict_host(num_tokens)

    def total_size(self):
        return self._tree.usage()["device_tokens"]

    def protected_size(self):
        return self._protected

    def evictable_size(self):
        return self.total_size() - self._protected

    def reset(self):
        raise NotImplementedError("kvslab.sglang.HiRadixCache: reset is not offered; "
                                  "close it and make another")

    # -- L3 (storage) prefetch
    def prefetch_from_storage(self, req_id, last_host_node, new_input_tokens, last_hash=None,
                              prefix_keys=None):
        """Start reading from the store what follows ``last_host_node``:
        ``new_input_tokens`` are the tokens past it.  Returns the tokens
        the store will read."""
        if self._tree is None:
            return 0
        pid = self._next_prefetch
        self._next_prefetch += 1
        self._prefetch_ids[req_id] = pid
        head = list(last_host_node._key[:last_host_node._len]) \
            if isinstance(last_host_node, TreeNode) and last_host_node._key is not None else []
        return self._tree.prefetch(pid, head + list(new_input_tokens))

    def check_prefetch_progress(self, req_id):
        """True when the request's prefetch is done (its pages are on the host)."""
        pid = self._prefetch_ids.get(req_id)
        if pid is None:
            return True
        done, _tokens = self._tree.prefetch_done(pid)
        if done:
            del self._prefetch_ids[req_id]
        return bool(done)

    def terminate_prefetch(self, req_id):
        pid = self._prefetch_ids.pop(req_id, None)
        if pid is not None:
            self._tree.prefetch_revoke(pid)

    release_aborted_request = terminate_prefetch



class _GroupedFrees:
    """free_group_begin/free_group_end of SGLang's allocators."""

    def free_group_begin(self):
        self.is_not_in_free_group = False
        self.free_group = []

    def free_group_end(self):
        self.is_not_in_free_group = True
        if self.free_group:
            group, self.free_group = self.free_group, []
            self.free(_np.concatenate(group))


class TokenToKVPoolAllocator(_GroupedFrees):
    """SGLang's token-to-KV allocator (allocator.py) over a kvslab Pool.

    ``TokenToKVPoolAllocator(pool)``, or SGLang's
    ``TokenToKVPoolAllocator(size, dtype, device, kvcache, need_sort)`` with
    ``kvcache`` a kvslab Pool (or None: a host pool of ``size`` tokens is
    made).  ``alloc(need_size)`` returns int64 indices or None when short,
    ``free`` gives locations back (a whole page per page touched, once, as
    SGLang's paged allocator), ``available_size`` counts free tokens.  Page 0
    is held by the allocator, as SGLang keeps slot 0 for padded tokens, and
    pages beyond ``size`` are held too, so that ``available_size()`` starts
    at ``size`` exactly.  A RadixCache given this allocator frees into the
    pool itself.
    """

    def __init__(self, size=None, dtype=None, device="cpu", kvcache=None, need_sort=False,
                 page_size=None):
        from . import Driver, Pool
        self._own = []
        if hasattr(size, "alloc_into"):  # TokenToKVPoolAllocator(pool)
            size, kvcache = None, size
        if kvcache is None:
            if size is None:
                raise TypeError("TokenToKVPoolAllocator needs a kvslab Pool or a size")
            drv = Driver("host", granularity="64K")
            kvcache = Pool(drv, "tiny", page_size=page_size or 1,
                           max_tokens=size + (page_size or 1))
            self._own = [kvcache, drv]
        pool = kvcache
        self._kvslab_pool = pool
        self.page_size = pool.page_size
        if page_size is not None and page_size != self.page_size:
            raise ValueError("page_size %d is not the pool's (%d)" % (page_size, self.page_size))
        self.dtype = dtype
        self.device = device
        self.need_sort = need_sort
        self.is_not_in_free_group = True
        self.free_group = []
        self._journal = None
        ps = self.page_size
        self._held = _np.zeros(0, dtype=_np.int32)
        # SGLang's padded slot: page 0, when the pool still has it free.
        if pool.available() == pool.capacity:
            first = pool.alloc(ps)
            if first[0] == 0:
                self._held = first
            else:
                pool.free(first)
        usable = pool.available()
        if size is None:
            size = usable // ps * ps
        size = size // ps * ps
        if size > usable:
            self._release_held()
            raise ValueError("size %d is more than the pool's %d free tokens" % (size, usable))
        if usable > size:  # hold what SGLang's size leaves out
            self._held = _np.concatenate([self._held, pool.alloc((usable - size) // ps * ps)])
        self.size = size

    def _release_held(self):
        if len(self._held):
            self._kvslab_pool.free(self._held)
            self._held = self._held[:0]

    def close(self):
        """Give back the held pages and close what this allocator made."""
        if self._kvslab_pool is None:
            return
        self._release_held()
        for o in self._own:
            o.close()
        self._own = []
        self._kvslab_pool = None

    @property
    def size_full(self):
        return self.size

    def debug_print(self):
        return ""

    def get_kvcache(self):
        return self._kvslab_pool

    def available_size(self):
        return self._kvslab_pool.available()

    def alloc(self, need_size):
        """``need_size`` locations (a multiple of the page size) as int64
        indices, or None when fewer are free (SGLang's alloc)."""
        from . import Error
        try:
            # SGLang's paged allocator gives need_size // page_size pages.
            out = _np.empty(need_size // self.page_size * self.page_size, dtype=_np.int64)
            if len(out):
                self._kvslab_pool.alloc_into(out)  # int64, as SGLang's indices are
        except Error:
            return None
        if self._journal is not None:
            self._journal.append(out)
        return _indices(out)

    def _pages_once(self, idx):
        """One location per page touched (SGLang's unique(free_index // page_size))."""
        ps = self.page_size
        if ps == 1:
            return idx
        return _np.unique(idx // ps).astype(_np.int32) * ps

    def free(self, free_index):
        """Give back locations: every page they touch, once."""
        idx = _as_locs(free_index)
        if idx.ndim != 1:
            idx = idx.reshape(-1)
        if len(idx) == 0:
            return
        if not self.is_not_in_free_group:
            self.free_group.append(idx)
            return
        try:
            self._kvslab_pool.free(self._pages_once(idx))
        except OverflowError:
            raise ValueError(_RANGE) from None

    def backup_state(self):
        """A mark that restore_state() returns to: what is allocated after
        it is given back there (see the module's notes for frees)."""
        if self._journal is None:
            self._journal = []
        return ("kvslab-alloc-state", len(self._journal), id(self))

    def restore_state(self, state):
        """Free what was allocated since ``state`` and is still allocated."""
        tag, mark, owner = state
        if tag != "kvslab-alloc-state" or owner != id(self) or self._journal is None \
                or mark > len(self._journal):
            raise ValueError("kvslab: not a state of this allocator")
        since = self._journal[mark:]
        del self._journal[mark:]
        if since:
            self._free_still_held(_np.concatenate(since))
        if mark == 0:
            self._journal = None

    def _free_still_held(self, locs):
        from . import Error
        pages = self._pages_once(locs)
        try:
            self._kvslab_pool.free(pages)
        except Error:
            # Some were freed since: give back the others one page at a time.
            for p in pages:
                try:
                    self._kvslab_pool.free(_np.array([p], dtype=_np.int32))
                except Error:
                    pass

    def merge_and_sort_free(self):
        """Nothing to merge: kvslab's pool keeps no release list."""

    def clear(self):
        """Make every location free again: possible only when nothing is
        allocated (kvslab's pool counts references; see the module's notes)."""
        self.is_not_in_free_group = True
        self.free_group = []
        self._journal = None
        if self.available_size() != self.size:
            raise RuntimeError("kvslab: clear() while %d tokens are allocated"
                               % (self.size - self.available_size()))

    # -- the paged allocator's batch calls (PagedTokenToKVPoolAllocator)
    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                     extend_num_tokens):
        """Locations for extending each request from prefix_lens[i] to
        seq_lens[i] tokens: first the rest of its last page (after
        last_loc[i]), then new pages; None when too few pages are free (SGLang's
        alloc_extend; the new pages are allocated all or none)."""
        ps = self.page_size
        pre = _np.asarray(_cpu(prefix_lens_cpu), dtype=_np.int64)
        seq = _np.asarray(_cpu(seq_lens_cpu), dtype=_np.int64)
        last = _np.asarray(_cpu(last_loc), dtype=_np.int64)
        if not len(pre) == len(seq) == len(last):
            raise ValueError("kvslab: alloc_extend's lengths differ")
        if _np.any(seq < pre) or int((seq - pre).sum()) != extend_num_tokens:
            raise ValueError("kvslab: alloc_extend's extend_num_tokens is not sum(seq - prefix)")
        new_pages = (seq + ps - 1) // ps - (pre + ps - 1) // ps
        total = int(new_pages.sum())
        pages = self.alloc(total * ps) if total else _np.zeros(0, dtype=_np.int64)
        if pages is None:
            return None
        pages = _np.asarray(_cpu(pages), dtype=_np.int64)[::ps]  # first of each page
        out = _np.empty(extend_num_tokens, dtype=_np.int64)
        o = p = 0
        for i in range(len(pre)):
            a, b = int(pre[i]), int(seq[i])
            first = min(b, (a + ps - 1) // ps * ps) - a  # rest of the last page
            if first:
                out[o:o + first] = last[i] + 1 + _np.arange(first)
                o += first
            a += first
            while a < b:
                k = min(ps, b - a)
                out[o:o + k] = pages[p] + _np.arange(k)
                o += k
                a += k
                p += 1
        return _indices(out)

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc):
        """One location per request for its token seq_lens[i] - 1: the next
        of its last page, or the first of a new page (SGLang's alloc_decode);
        None when too few pages are free."""
        ps = self.page_size
        seq = _np.asarray(_cpu(seq_lens_cpu), dtype=_np.int64)
        last = _np.asarray(_cpu(last_loc), dtype=_np.int64)
        if len(seq) != len(last):
            raise ValueError("kvslab: alloc_decode's lengths differ")
        need = (seq - 1) % ps == 0
        n = int(need.sum())
        pages = self.alloc(n * ps) if n else _np.zeros(0, dtype=_np.int64)
        if pages is None:
            return None
        pages = _np.asarray(_cpu(pages), dtype=_np.int64)[::ps]  # first of each page
        out = last + 1
        out[need] = pages
        return _indices(out)

    def get_cpu_copy(self, *args, **kwargs):
        raise NotImplementedError("kvslab: KV copies go through the pool (kvs_pool_get_kv)")

    def load_cpu_copy(self, *args, **kwargs):
        raise NotImplementedError("kvslab: KV copies go through the pool (kvs_pool_set_kv)")


class PagedTokenToKVPoolAllocator(TokenToKVPoolAllocator):
    """SGLang's PagedTokenToKVPoolAllocator: ``(size, page_size, dtype,
    device, kvcache, need_sort)``, kvcache a kvslab Pool of that page size
    (or None: a host pool is made).  The same object as
    :class:`TokenToKVPoolAllocator`, whose pages are the pool's."""

    def __init__(self, size=None, page_size=1, dtype=None, device="cpu", kvcache=None,
                 need_sort=False):
        super().__init__(size, dtype, device, kvcache, need_sort, page_size=page_size)


def _cpu(x):
    if hasattr(x, "cpu"):
        return x.cpu().numpy()
    return x


class ReqToTokenPool:
    """SGLang's ReqToTokenPool (memory_pool.py) on a kvslab request table:
    ``alloc(need_size)`` returns slot indices or None, ``free(idx)`` takes one
    slot or a list, ``write((slot, slice), values)`` writes a row's entries,
    ``req_to_token`` is a (size, max_context_len) int32 read-only view of the
    host mirror (SGLang's is a device tensor), ``available_size()``,
    ``clear()``."""

    def __init__(self, size, max_context_len, driver=None, device="cpu",
                 enable_memory_saver=False):
        from . import Driver
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        if isinstance(driver, str) or driver is None:
            if driver is not None:
                device = driver
            driver = Driver("host", granularity="64K")
            self._own_driver = driver
        else:
            self._own_driver = None
        self._tab = Reqtab(driver, size, max_context_len)
        self.req_to_token = self._tab.table()
        self._held = set()

    def available_size(self):
        return self._tab.available()

    def alloc(self, need_size=1):
        if not isinstance(need_size, int):  # alloc(reqs), as newer SGLang calls it
            need_size = len(need_size)
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
        vals = _as_locs(values)
        try:
            self._tab.write(int(slot), start, vals.reshape(-1))
        except OverflowError:
            raise ValueError(_RANGE) from None

    def clear(self):
        for i in list(self._held):
            self.free(i)

    def close(self):
        self.req_to_token = None
        self._tab.close()
        if self._own_driver is not None:
            self._own_driver.close()
            self._own_driver = None


__all__ = ["RadixCache", "RadixKey", "BaseKey", "TreeNode", "MatchResult", "MatchPrefixParams",
           "InsertParams", "InsertResult", "EvictParams", "EvictResult", "CacheInitParams",
           "BlockStored", "BlockRemoved", "AllBlocksCleared", "MEDIUM_GPU", "MEDIUM_CPU",
           "TokenToKVPoolAllocator", "PagedTokenToKVPoolAllocator", "ReqToTokenPool",
           "HiRadixCache"]

