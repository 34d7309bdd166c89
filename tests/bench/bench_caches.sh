#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/bench/bench_caches.sh - the radix cache (SGLang) and the hashed
# block cache (vLLM) side by side on the Mooncake conversation trace: the
# same serving loop, pages of 16, KV memory for 10%, 30% and 100% of the
# trace's unique tokens.  Prints each cache's hit ratio and completed
# requests per second of time spent in the cache's calls (match, extend,
# decode, finish; for the hashed cache, block hashing included: it runs
# inside the library's hashed flow).  Then slab-aware eviction's effect on
# the radix cache's hits and mapped memory, at 10% and 30%.
#
# Usage: bench_caches.sh [TRACE.jsonl]   (default: the conversation trace
# in $KVSLAB_SHARED/traces, else in a "shared" folder beside the source or
# one of its parents).  Exit 77 when there is no trace or no python3.
set -eu

top_build=${KVSLAB_TOP_BUILDDIR:-.}
replay="$top_build/tools/kvslab-replay"
bench=bench_caches
. "$(dirname "$0")/find_trace.sh"

echo "bench_caches: $trace, pages of 16, model tiny (KV bytes do not matter here)"
printf '%-9s %-17s %8s %12s %9s\n' capacity cache hit "req/s cache" preempt
for pct in 10 30 100; do
	for fn in sha256_cbor xxh3_128; do
		caches=radix,hash
		[ $fn = sha256_cbor ] || caches=hash
		"$replay" -q --no-progress -m tiny -M "$pct%" -s paged:16 --cache $caches \
			--block-hash $fn --json - "$trace" |
		python3 -c '
import json, sys
pct, fn = sys.argv[1], sys.argv[2]
for s in json.load(sys.stdin)["strategies"]:
    c = s["cache"] + ("/" + fn if s["cache"] == "hash" else "")
    print("%-9s %-17s %8.4f %12.0f %9d" % (pct + "%", c, s["hit_ratio"],
          s["cache_requests_per_s"], s["preempted"]))
' "$pct" "$fn"
	done
done

# Issue 26: what slab-aware eviction does to hits and to memory, so that a
# user can choose (the radix cache's default is on; SGLang's order is
# slab_aware 0).  llama-3-8b's KV, slab pages of 16, the replay's own
# comparison line: each run with and without it on the same requests.
echo "bench_caches: slab-aware eviction against the policy's order alone (kvslab-replay --slab-aware=both)"
for pct in 10 30; do
	printf '%-9s ' "$pct%"
	"$replay" --no-progress -M "$pct%" -s slab:16 --cache radix --slab-aware=both "$trace" |
		grep '^slab-aware eviction'
done
