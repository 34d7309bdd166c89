#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/bench/bench_tiers.sh - the radix cache alone (L1) against the
# hierarchical radix cache with a host pool (L2) of 1x, 2x and 4x the
# device pool, on the Mooncake conversation trace: pages of 16, device
# memory for 10% and 30% of the trace's unique tokens, write-through.
# Prints L1 and L2 hit ratios, the input tokens recomputed, and completed
# requests per second of time spent in the cache's calls.  Then the 10%,
# 2x row twice more over a file store (L3) in a fresh directory, cold (an
# empty store) then warm (the first run's pages, as a second instance
# sharing L3 would find them), with the L3 hit ratio as well, on the
# trace's first 1000 requests: the store takes one file a page (the whole
# trace: about 6 million files, 25 GiB and ten minutes a run).  Skipped
# with less than 4 GiB free where it would go ($TMPDIR, else /tmp).
#
# Usage: bench_tiers.sh [TRACE.jsonl]   (default: the conversation trace
# in $KVSLAB_SHARED/traces, else in a "shared" folder beside the source or
# one of its parents).  Exit 77 when there is no trace or no python3.
set -eu

top_build=${KVSLAB_TOP_BUILDDIR:-.}
replay="$top_build/tools/kvslab-replay"
bench=bench_tiers
. "$(dirname "$0")/find_trace.sh"

echo "bench_tiers: $trace, pages of 16, model tiny, write_through"
printf '%-7s %-6s %8s %8s %8s %14s %12s\n' device L2 "L1 hit" "L2 hit" hit recomputed "req/s cache"
for pct in 10 30; do
	for host in none 1x 2x 4x; do
		opt=
		[ $host = none ] || opt="--host-pool $host"
		# shellcheck disable=SC2086
		"$replay" -q --no-progress -m tiny -M "$pct%" -s paged:16 $opt --json - "$trace" |
		python3 -c '
import json, sys
pct, host = sys.argv[1], sys.argv[2]
for s in json.load(sys.stdin)["strategies"]:
    l1 = s.get("l1_hit_ratio", s["hit_ratio"])
    l2 = s.get("l2_hit_ratio", 0.0)
    rec = s.get("recomputed_tokens")
    print("%-7s %-6s %8.4f %8.4f %8.4f %14s %12.0f" % (pct + "%", host, l1, l2, s["hit_ratio"],
          rec if rec is not None else "-", s["cache_requests_per_s"]))
' "$pct" "$host"
	done
done

# The file store: cold, then warm on the same directory.
tmp=${TMPDIR:-/tmp}
free_kib=$(df -Pk "$tmp" | awk 'NR == 2 { print $4 }')
if [ "${free_kib:-0}" -lt $((4 * 1024 * 1024)) ]; then
	echo "bench_tiers: file store rows skipped: less than 4 GiB free in $tmp"
	exit 0
fi
store=$(mktemp -d "$tmp/kvslab-bench-l3-XXXXXX")
head1k="$store.jsonl"
trap 'rm -rf "$store" "$head1k"' EXIT
head -n 1000 "$trace" > "$head1k"
echo
echo "bench_tiers: the first 1000 requests, 10%, host pool 2x, file store $store"
printf '%-7s %-6s %8s %8s %8s %8s %14s %12s\n' device store "L1 hit" "L2 hit" "L3 hit" hit \
	recomputed "req/s cache"
for run in cold warm; do
	"$replay" -q --no-progress -m tiny -M 10% -s paged:16 --host-pool 2x \
		--storage "file://$store" --json - "$head1k" |
	python3 -c '
import json, sys
for s in json.load(sys.stdin)["strategies"]:
    print("%-7s %-6s %8.4f %8.4f %8.4f %8.4f %14d %12.0f" % ("10%", sys.argv[1], s["l1_hit_ratio"],
          s["l2_hit_ratio"], s["l3_hit_ratio"], s["hit_ratio"], s["recomputed_tokens"],
          s["cache_requests_per_s"]))
' "$run"
done
