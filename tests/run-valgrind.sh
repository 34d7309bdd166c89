#!/bin/sh
# SPDX-License-Identifier: MIT
# LOG_COMPILER for make check-valgrind (run through libtool --mode=execute, so
# $1 is the real binary, not its wrapper): memcheck, unforked so leaks in test
# bodies count, failing on any error or definite leak.
src=$(dirname "$0")
CK_FORK=no
CK_TIMEOUT_MULTIPLIER=20
# Long seeded loops run a quarter as long: memcheck is ~30x slower.
KVSLAB_TEST_SCALE=${KVSLAB_TEST_SCALE:-0.25}
export CK_FORK CK_TIMEOUT_MULTIPLIER KVSLAB_TEST_SCALE
exec valgrind --quiet --error-exitcode=99 --leak-check=full \
	--errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
	--suppressions="$src/valgrind.supp" "$@"
