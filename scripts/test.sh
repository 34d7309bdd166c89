#!/bin/sh
# SPDX-License-Identifier: MIT
# Install what is missing, build, and pass the whole test suite: the unit
# suites, the suites again under valgrind, an install that a pkg-config
# program links against, and make distcheck.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
make -j"$(nproc)" check
make -j"$(nproc)" check-valgrind
tests/check-install.sh
make -j"$(nproc)" distcheck
# One closing line for CI: the libcheck totals of the unit suites.
total=0 bad=0
for log in tests/*/test_*.log; do
	line=$(grep -h -E '^[0-9]+%: Checks: ' "$log" | tail -1)
	[ -n "$line" ] || continue
	c=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
	f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
	e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
	total=$((total + c))
	bad=$((bad + f + e))
done
echo "kvslab: all test stages passed"
echo "$((total - bad)) passed, $bad failed"
