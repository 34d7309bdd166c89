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
make -s check-summary
make check-valgrind
make -s check-summary
tests/check-install.sh
make -j"$(nproc)" distcheck
echo "kvslab: all test stages passed"
