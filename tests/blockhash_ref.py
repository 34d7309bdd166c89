#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reference block hashes for tests/cache/test_blockhash.c, computed the way
vLLM v1 does (vllm/v1/core/kv_cache_utils.py: generate_block_hash_extra_keys,
hash_block_tokens, init_none_hash; vllm/utils/hashing.py: sha256_cbor,
xxhash_cbor) and, for sha256_cbor_64, the way vLLM's older sha256_cbor_64bit
chained 64-bit hashes (as llm-d's first indexers did too).

Reads one case from stdin, lines of:
    fn sha256_cbor | sha256_cbor_64 | xxh3_128
    block_size N
    seed HEX            (PYTHONHASHSEED's bytes)
    root HEX            (instead of seed: NONE_HASH itself, e.g. vLLM's
                         unseeded os.urandom(32))
    tokens T T T ...
    lora HEX            (optional)
    salt HEX            (optional)
    mm HEXID OFFSET LENGTH   (any number, sorted by offset)
and prints the hex hash of each full block, one a line.
Exit status 77 when cbor2 (or xxhash, for xxh3_128) is missing.
"""
import hashlib
import sys

try:
    import cbor2
except ImportError:
    print("python3 cbor2 module missing", file=sys.stderr)
    sys.exit(77)


def sha256_cbor(x):
    return hashlib.sha256(cbor2.dumps(x, canonical=True)).digest()


def xxhash_cbor(x):
    import xxhash
    return xxhash.xxh3_128_digest(cbor2.dumps(x, canonical=True))


def sha256_cbor_64(x):
    return int.from_bytes(sha256_cbor(x), "big") & ((1 << 64) - 1)


class MM:
    def __init__(self, identifier, offset, length):
        self.identifier, self.offset, self.length = identifier, offset, length


def gen_mm_extra_keys(mm, start, end, start_mm_idx):
    # As _gen_mm_extra_hash_keys.
    keys = []
    if not mm:
        return keys, start_mm_idx
    last = mm[-1]
    if last.offset + last.length <= start:
        return keys, start_mm_idx
    if start_mm_idx < 0:
        start_mm_idx = len(mm) + start_mm_idx
    idx = start_mm_idx
    while idx < len(mm):
        f = mm[idx]
        if end > f.offset:
            if start >= f.offset + f.length:
                idx += 1
                continue
            keys.append((f.identifier, f.offset - start))
            if end >= f.offset + f.length:
                idx += 1
            else:
                break
        else:
            break
    return keys, idx


def extra_keys(case, start, end, mm_idx):
    # As generate_block_hash_extra_keys (no prompt embeddings).
    mm_keys, mm_idx = gen_mm_extra_keys(case["mm"], start, end, mm_idx)
    lora = [case["lora"]] if case["lora"] is not None else []
    salt = [case["salt"]] if (start == 0 and case["salt"]) else []
    keys = lora + mm_keys + salt
    return (tuple(keys) if keys else None), mm_idx


def main():
    case = {"lora": None, "salt": None, "mm": [], "seed": None, "root": None, "tokens": []}
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        if w[0] == "fn":
            case["fn"] = w[1]
        elif w[0] == "block_size":
            case["bs"] = int(w[1])
        elif w[0] == "seed":
            case["seed"] = bytes.fromhex(w[1] if len(w) > 1 else "").decode()
        elif w[0] == "root":
            case["root"] = bytes.fromhex(w[1])
        elif w[0] == "tokens":
            case["tokens"] = [int(t) for t in w[1:]]
        elif w[0] == "lora":
            case["lora"] = bytes.fromhex(w[1] if len(w) > 1 else "").decode()
        elif w[0] == "salt":
            case["salt"] = bytes.fromhex(w[1] if len(w) > 1 else "").decode()
        elif w[0] == "mm":
            case["mm"].append(MM(bytes.fromhex(w[1]).decode(), int(w[2]), int(w[3])))
    fn = case["fn"]
    if fn == "xxh3_128":
        try:
            import xxhash  # noqa: F401
        except ImportError:
            print("python3 xxhash module missing", file=sys.stderr)
            sys.exit(77)
        h = xxhash_cbor
    elif fn == "sha256_cbor":
        h = sha256_cbor
    else:
        h = sha256_cbor_64
    if case["root"] is not None:
        none_hash = case["root"]  # init_none_hash without PYTHONHASHSEED
    else:
        none_hash = h(case["seed"])  # init_none_hash with PYTHONHASHSEED set
    bs, tokens = case["bs"], case["tokens"]
    parent, mm_idx, start = None, 0, 0
    while start + bs <= len(tokens):
        keys, mm_idx = extra_keys(case, start, start + bs, mm_idx)
        # hash_block_tokens
        p = none_hash if parent is None else parent
        parent = h((p, tuple(tokens[start:start + bs]), keys))
        if fn == "sha256_cbor_64":
            print("%016x" % parent)
        else:
            print(parent.hex())
        start += bs


if __name__ == "__main__":
    main()
