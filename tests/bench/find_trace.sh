# SPDX-License-Identifier: MIT
#
# tests/bench/find_trace.sh - sourced by the benchmark scripts: sets
# $trace to $1 if given, else to the conversation trace in
# $KVSLAB_SHARED/traces, else in a "shared" folder beside the source tree
# ($KVSLAB_TOP_SRCDIR) or one of its parents; exits 77 (skip) when there
# is none or python3 is missing.  $bench names the caller in messages.
trace=${1:-}
if [ -z "$trace" ]; then
	if [ -n "${KVSLAB_SHARED:-}" ]; then
		trace="$KVSLAB_SHARED/traces/conversation_trace.jsonl"
	else
		d=$(cd "${KVSLAB_TOP_SRCDIR:-.}" && pwd)
		while [ "$d" != / ]; do
			d=$(dirname "$d")
			if [ -f "$d/shared/traces/conversation_trace.jsonl" ]; then
				trace="$d/shared/traces/conversation_trace.jsonl"
				break
			fi
		done
	fi
fi
if [ -z "$trace" ] || [ ! -f "$trace" ]; then
	echo "$bench: no conversation trace (set KVSLAB_SHARED)" >&2
	exit 77
fi
command -v python3 >/dev/null || { echo "$bench: no python3" >&2; exit 77; }
