#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reference page keys for tests/tier/test_storage.c, computed the way
SGLang's HiCache does (python/sglang/srt/mem_cache/hicache_storage.py,
get_hash_str): SHA-256 over the previous page's digest (32 raw bytes,
nothing for the first page), then each token id as 4 bytes little-endian
unsigned; one hex digest per whole page, chained.

Reads from stdin: the page size, the previous key in hex or "-", then the
token ids; prints one hex key per whole page.  SGLang's to_bytes(signed=False)
refuses negative ids; kvslab hashes an int32 id as its 32-bit two's
complement, which is what "& 0xffffffff" gives here.
"""
import hashlib
import sys

words = sys.stdin.read().split()
page_size = int(words[0])
prev = None if words[1] == "-" else bytes.fromhex(words[1])
tokens = [int(w) for w in words[2:]]
for i in range(len(tokens) // page_size):
    h = hashlib.sha256()
    if prev is not None:
        h.update(prev)
    for t in tokens[i * page_size:(i + 1) * page_size]:
        h.update((t & 0xFFFFFFFF).to_bytes(4, byteorder="little", signed=False))
    prev = h.digest()
    print(h.hexdigest())
