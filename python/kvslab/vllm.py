# SPDX-License-Identifier: MIT
"""Drop-ins for vLLM v1's prefix-caching pieces (vllm/v1/core/kv_cache_utils.py).

This first part covers vLLM's block hashes, byte for byte:

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
