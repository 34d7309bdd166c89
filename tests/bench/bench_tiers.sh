#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/bench/bench_tiers.sh - the radix cache alone (L1) against the
# hierarchical radix cache with a host pool (L2) of 1x, 2x and 4x the
# device pool, on the Mooncake conversation trace: pages of 16, device
# memory for 10% and 30% of the trace's unique tokens, write-through.
# Prints L1 and L2 hit ratios, the input tokens recomputed, and completed
# requests per second of time spent in the cache's calls.  Then the 2x
# row twice more over a file store (L3) in a fresh directory, cold (an
# empty store) then warm (the first run's pages, as a second instance
# sharing L3 would find them), with the L3 hit ratio as well, on the
# trace's first 1000 requests: the store takes one file a page (the whole
# trace: about 6 million files, 25 GiB and ten minutes a run).  Those rows
# give the device 20%, not 10%: 10% of these requests' unique tokens is
# 2.1 MiB with model tiny, less than one slab (4 MiB), which the replay
# refuses.  Skipped with less than 4 GiB free where it would go ($TMPDIR,
# else /tmp).
#
# A row that cannot be measured (the replay fails, its output does not
# parse) says so, with the replay's own message, and the others go on;
# the script then exits 1.
#
# Usage: bench_tiers.sh [TRACE.jsonl]   (default: the conversation trace
# in $KVSLAB_SHARED/traces, else in a "shared" folder beside the source or
# one of its parents).  Exit 77 when there is no trace or no python3.
set -eu

top_build=${KVSLAB_TOP_BUILDDIR:-.}
replay="$top_build/tools/kvslab-replay"
bench=bench_tiers
. "$(dirname "$0")/find_trace.sh"

out=$(mktemp "${TMPDIR:-/tmp}/kvslab-bench-tiers-XXXXXX")
err="$out.err"
store=
head1k=
trap 'rm -rf "$out" "$err" ${store:+"$store"} ${head1k:+"$head1k"}' EXIT
failed=0

# row LABEL FORMAT ARGS...: run the replay on ARGS, then print its JSON
# summary's strategies with the Python FORMAT (a function of s, the
# strategy, and label); or say why the row cannot be measured.
row() {
	label=$1
	fmt=$2
	shift 2
	if "$replay" -q --no-progress --json "$out" "$@" > /dev/null 2> "$err" &&
		python3 -c '
import json, sys
label = sys.argv[2]
for s in json.load(open(sys.argv[1]))["strategies"]:
    print(eval(sys.argv[3]))
' "$out" "$label" "$fmt" 2>> "$err"; then
		return 0
	fi
	echo "$label cannot measure: $(grep -v "^$" "$err" | tail -n 1)"
	failed=1
}

echo "bench_tiers: $trace, pages of 16, model tiny, write_through"
printf '%-7s %-6s %8s %8s %8s %14s %12s\n' device L2 "L1 hit" "L2 hit" hit recomputed "req/s cache"
for pct in 10 30; do
	for host in none 1x 2x 4x; do
		opt=
		[ $host = none ] || opt="--host-pool $host"
		# shellcheck disable=SC2086
		row "$(printf '%-7s %-6s' "$pct%" $host)" \
			'"%s %8.4f %8.4f %8.4f %14s %12.0f" % (label, s.get("l1_hit_ratio", s["hit_ratio"]),
			  s.get("l2_hit_ratio", 0.0), s["hit_ratio"],
			  s.get("recomputed_tokens", "-"), s["cache_requests_per_s"])' \
			-m tiny -M "$pct%" -s paged:16 $opt "$trace"
	done
done

# The file store: cold, then warm on the same directory.
tmp=${TMPDIR:-/tmp}
free_kib=$(df -Pk "$tmp" | awk 'NR == 2 { print $4 }')
if [ "${free_kib:-0}" -lt $((4 * 1024 * 1024)) ]; then
	echo "bench_tiers: file store rows skipped: less than 4 GiB free in $tmp"
	exit $failed
fi
store=$(mktemp -d "$tmp/kvslab-bench-l3-XXXXXX")
head1k="$store.jsonl"
head -n 1000 "$trace" > "$head1k"
echo
echo "bench_tiers: the first 1000 requests, 20%, host pool 2x, file store $store"
printf '%-7s %-6s %8s %8s %8s %8s %14s %12s\n' device store "L1 hit" "L2 hit" "L3 hit" hit \
	recomputed "req/s cache"
for run in cold warm; do
	row "$(printf '%-7s %-6s' 20% $run)" \
		'"%s %8.4f %8.4f %8.4f %8.4f %14d %12.0f" % (label, s["l1_hit_ratio"],
		  s["l2_hit_ratio"], s["l3_hit_ratio"], s["hit_ratio"], s["recomputed_tokens"],
		  s["cache_requests_per_s"])' \
		-m tiny -M 20% -s paged:16 --host-pool 2x --storage "file://$store" "$head1k"
done
exit $failed
