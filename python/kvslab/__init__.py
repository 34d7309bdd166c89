# SPDX-License-Identifier: MIT
"""kvslab for Python: the KV-cache memory manager's objects with Python's manners.

Objects own their handles and close them (``with`` blocks, ``close()``, or
the collector); errors raise :class:`Error`, an :class:`OSError` carrying the
library's errno; sizes accept strings such as ``"8G"``; statistics are dicts;
arrays of token ids and locations cross without copies when they are int32
buffers (numpy arrays, ``array('i')``), and are converted when they are
lists.  Drop-ins for the engines are :mod:`kvslab.sglang`.
"""
import array as _array

from . import _kvslab
from ._kvslab import Error

__all__ = ["Error", "Driver", "Pool", "Radix", "Reqtab", "parse_size", "version", "int32_array",
           "EVICT_LRU", "EVICT_LFU", "EVICT_FIFO", "EVICT_PRIORITY", "KV_STORED", "KV_REMOVED",
           "KV_ALL_CLEARED", "MEDIUM_GPU", "MEDIUM_CPU", "KV_K", "KV_V", "KV_LATENT", "View",
           "HiRadix", "WRITE_THROUGH", "WRITE_THROUGH_SELECTIVE", "WRITE_BACK"]

EVICT_LRU = _kvslab.EVICT_LRU
EVICT_LFU = _kvslab.EVICT_LFU
EVICT_FIFO = _kvslab.EVICT_FIFO
EVICT_PRIORITY = _kvslab.EVICT_PRIORITY
KV_STORED = _kvslab.KV_STORED
KV_REMOVED = _kvslab.KV_REMOVED
KV_ALL_CLEARED = _kvslab.KV_ALL_CLEARED
MEDIUM_GPU = _kvslab.MEDIUM_GPU
MEDIUM_CPU = _kvslab.MEDIUM_CPU
KV_K = _kvslab.KV_K
KV_V = _kvslab.KV_V
KV_LATENT = _kvslab.KV_LATENT
View = _kvslab.View
_WHICH = {"k": KV_K, "v": KV_V, "latent": KV_LATENT}


def _which(which):
    if isinstance(which, str):
        try:
            return _WHICH[which.lower()]
        except KeyError:
            raise ValueError("which is 'k', 'v' or 'latent'") from None
    return which


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("kvslab: torch tensors need torch (Debian's python3-torch)") from None
    return torch

try:  # optional: locations come back as numpy arrays when numpy is there
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is a test dependency
    _np = None

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
          "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30,
          "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}


def version():
    """The library's version string."""
    return _kvslab.version()


def parse_size(size):
    """Bytes from an int or a string such as ``"8G"``, ``"1.5G"``, ``"512MiB"``
    (binary units, as kvslab-replay(1) reads them)."""
    if isinstance(size, bool):
        raise TypeError("a size is an int or a string")
    if isinstance(size, int):
        if size < 0:
            raise ValueError("negative size: %d" % size)
        return size
    if not isinstance(size, str):
        raise TypeError("a size is an int or a string")
    s = size.strip().upper()
    i = len(s)
    while i > 0 and s[i - 1].isalpha():
        i -= 1
    num, unit = s[:i].strip(), s[i:]
    if unit not in _UNITS or not num:
        raise ValueError("not a size: %r" % size)
    try:
        v = float(num)
    except ValueError:
        raise ValueError("not a size: %r" % size) from None
    if v < 0 or v != v or v == float("inf"):
        raise ValueError("not a size: %r" % size)
    return int(v * _UNITS[unit])


def int32_array(n):
    """A zeroed int32 array of n entries: numpy when installed, else array('i')."""
    if _np is not None:
        return _np.zeros(n, dtype=_np.int32)
    return _array.array("i", bytes(4 * n))


class _Closing:
    """Context-manager manners for the handle types."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Driver(_Closing, _kvslab.Driver):
    """A driver: ``Driver("host")``, ``Driver("cuda", device=...)``; see kvs_drv_open(3).

    ``mem_limit`` and ``granularity`` take sizes ("8G")."""

    def __init__(self, name=None, granularity=0, mem_limit=0, flags=0, device=0):
        super().__init__(name, parse_size(granularity), parse_size(mem_limit), flags, device)


class Pool(_Closing, _kvslab.Pool):
    """A KV pool of a model preset ("tiny", "llama3-8b", ...): kvs_pool_create(3).

    ``max_tokens`` is the capacity; ``max_mapped`` (a size) bounds what is mapped."""

    def __init__(self, driver, model="tiny", page_size=1, max_tokens=0, max_mapped=0,
                 slab_granules=0):
        super().__init__(driver, model, page_size, max_tokens, parse_size(max_mapped),
                         slab_granules)

    def alloc(self, n):
        """n token locations (all or nothing) as an int32 array."""
        out = int32_array(n)
        if n:
            self.alloc_into(out)
        return out

    def stats(self):
        """The slab allocator's statistics (kvs_slab_stat(3)) as a dict."""
        return self.slab_stats()

    def kv_view(self, layer, which="k", dtype=None):
        """A :class:`View` of layer ``layer``'s K (``"k"``), V (``"v"``) or MLA
        latent (``"latent"``) buffer, without a copy: shape (capacity, heads,
        width), strides in bytes as kvs_pool_buffer(3) lays them out, so row
        ``loc`` is token location ``loc``.  ``dtype`` names the element type
        ("float16", "bfloat16", "float32", "uint8", ...; default: by the
        model's element size, 2 bytes read as float16).  Only allocated
        locations are mapped: read no other row.  The pool refuses to close
        while a view (or a tensor made from one) is alive."""
        return super().kv_view(layer, _which(which), dtype)

    def kv_array(self, layer, which="k", dtype=None):
        """``kv_view()`` as a numpy array (host driver; numpy has no bfloat16)."""
        return _np.asarray(self.kv_view(layer, which, dtype))

    def kv_tensor(self, layer, which="k", dtype=None):
        """``kv_view()`` as a torch tensor through DLPack: a CPU tensor on the
        host driver, a CUDA tensor on the cuda driver; bfloat16 included."""
        return _torch().from_dlpack(self.kv_view(layer, which, dtype))


class Radix(_Closing, _kvslab.Radix):
    """A radix prefix cache (kvs_radix_create(3)) over a Pool, or over no pool:
    then ``evict()`` returns the locations it freed for the caller's allocator.

    Eviction follows the policy's order alone unless ``slab_aware`` is set.
    With ``events=True`` the tree's KV events (one a page stored or removed,
    one when everything is cleared) queue until ``take_events()`` returns
    them: tuples ``(type, hash, parent_hash, token_ids, medium, extra_key)``,
    ``type`` one of :data:`KV_STORED`, :data:`KV_REMOVED`,
    :data:`KV_ALL_CLEARED`; ``token_ids`` a tuple for stored pages, else
    None; ``medium`` :data:`MEDIUM_GPU` (or :data:`MEDIUM_CPU`)."""

    def __init__(self, pool=None, page_size=0, policy=EVICT_LRU, disabled=False,
                 slab_aware=0, events=False):
        super().__init__(pool, page_size, policy, disabled, slab_aware, events)

    def evict_locations(self, tokens):
        """Evict at least ``tokens`` tokens (whole leaves); (evicted, int32 array of
        the freed locations; empty over a pool, which took them back)."""
        got, raw = self.evict(tokens)
        if _np is not None:
            return got, _np.frombuffer(raw, dtype=_np.int32).copy()
        return got, _array.array("i", raw)


WRITE_THROUGH = _kvslab.WRITE_THROUGH
WRITE_THROUGH_SELECTIVE = _kvslab.WRITE_THROUGH_SELECTIVE
WRITE_BACK = _kvslab.WRITE_BACK
_POLICIES = {"write_through": WRITE_THROUGH, "write_through_selective": WRITE_THROUGH_SELECTIVE,
             "write_back": WRITE_BACK}
_LAYOUTS = {"layer_first": _kvslab.HPOOL_LAYER_FIRST, "page_first": _kvslab.HPOOL_PAGE_FIRST}
_PREFETCH = {"best_effort": _kvslab.PREFETCH_BEST_EFFORT,
             "wait_complete": _kvslab.PREFETCH_WAIT_COMPLETE,
             "timeout": _kvslab.PREFETCH_TIMEOUT}


def _choice(table, value, what):
    if isinstance(value, str):
        try:
            return table[value]
        except KeyError:
            raise ValueError("%s is one of %s" % (what, ", ".join(sorted(table)))) from None
    return value


class HiRadix(_Closing, _kvslab.HiRadix):
    """The hierarchical cache (kvs_hiradix_create(3)): a prefix tree over the
    device ``pool`` (L1), a host pool (L2) of ``host_ratio`` times the device
    pool or of ``host_size`` bytes ("64G"), and optionally a store (L3) named
    by ``storage`` ("file:///dir", "redis://host:port").  ``write_policy`` is
    "write_through" (default), "write_through_selective" or "write_back", as
    SGLang's --hicache-write-policy; ``layout`` "layer_first" or
    "page_first"; ``threaded=True`` lets a background thread submit and poll
    the copies (kvslab's option; without it, calls and ``poll()`` do).

    ``match(key)`` returns ``(device_len, host_hit, last_device, last_node,
    last_host)``: the device prefix's length and locations (into ``out``),
    the tokens past it found on the host, and nodes; ``load_back(last_node)``
    brings the host part back onto the device (then ``match`` returns it).
    With ``events=True``, ``take_events()`` returns the KV events of both
    tiers (medium :data:`MEDIUM_GPU` or :data:`MEDIUM_CPU`)."""

    def __init__(self, pool, host_ratio=2.0, host_size=0, layout="layer_first",
                 write_policy="write_through", hit_threshold=2, load_back_threshold=10,
                 storage=None, prefetch_policy="best_effort", prefetch_threshold=256,
                 threaded=False, events=False):
        flags = _kvslab.HIRADIX_THREAD if threaded else 0
        super().__init__(pool, float(host_ratio), parse_size(host_size),
                         _choice(_LAYOUTS, layout, "layout"),
                         _choice(_POLICIES, write_policy, "write_policy"), hit_threshold,
                         load_back_threshold, flags, storage,
                         _choice(_PREFETCH, prefetch_policy, "prefetch_policy"),
                         prefetch_threshold, events)


class Reqtab(_Closing, _kvslab.Reqtab):
    """A request table (kvs_reqtab_create(3)): rows of token locations that
    attention kernels read.  ``table()`` is a read-only (max_reqs, max_context)
    int32 numpy view of the host mirror, without a copy; rows change through
    ``write(slot, pos, locs)``."""

    def __init__(self, driver, max_reqs, max_context):
        super().__init__(driver, max_reqs, max_context)
        self.max_reqs = max_reqs
        self.max_context = max_context

    def table(self):
        if _np is None:  # pragma: no cover
            return memoryview(self)
        return _np.asarray(memoryview(self))

    def device_view(self):
        """A read-only :class:`View` of the table the kernels read (device
        memory on the cuda driver, after ``sync()`` or the engine's ordering
        on the copy queue): int32 (max_reqs, max_context)."""
        return super().device_view()

    def device_tensor(self):
        """``device_view()`` as a torch tensor (DLPack)."""
        return _torch().from_dlpack(self.device_view())
