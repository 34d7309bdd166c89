#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/tools/check-quotes.sh - the kvslab-replay outputs that README.md and
# kvslab-replay(1) quote are what the tool prints (tests/tools/check_quotes.py
# runs the quoted commands and compares the counts, hit ratios and
# percentages, not the times).  The quotes of a trace run when the traces
# are in $KVSLAB_SHARED/traces or a "shared" folder beside the source tree,
# as tests/bench/find_trace.sh finds them; skipped (77) without python3.
set -u
src=$(cd "${KVSLAB_TOP_SRCDIR:-.}" && pwd)
build=$(cd "${KVSLAB_TOP_BUILDDIR:-.}" && pwd)
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || { echo "check-quotes: no python3"; exit 77; }
traces=${KVSLAB_SHARED:+$KVSLAB_SHARED/traces}
if [ -z "$traces" ] || [ ! -d "$traces" ]; then
	d=$src
	traces=/nonexistent
	while [ "$d" != / ]; do
		d=$(dirname "$d")
		if [ -d "$d/shared/traces" ]; then
			traces=$d/shared/traces
			break
		fi
	done
fi
# Sanitized builds run the tool several times slower: the generator's
# quotes only.
[ -n "${KVSLAB_TEST_SCALE:-}" ] && traces=/nonexistent
exec "$py" "$src/tests/tools/check_quotes.py" "$build/tools/kvslab-replay" "$traces" \
	"$src/README.md" "$src/man/man1/kvslab-replay.1"
