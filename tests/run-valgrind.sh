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
# Tests that valgrind cannot host as they are (it refuses to lower the
# descriptor limit) check this.
KVSLAB_UNDER_VALGRIND=1
export CK_FORK CK_TIMEOUT_MULTIPLIER KVSLAB_TEST_SCALE KVSLAB_UNDER_VALGRIND
# --fair-sched=yes: valgrind runs one thread at a time, and its default lock
# lets a spinning thread take it back at once, starving the others.
# timeout: CK_FORK=no turns off check's own timeouts, so a hang must still end.
exec timeout -k 30 "${KVSLAB_VALGRIND_TIMEOUT:-1200}" \
	valgrind --quiet --fair-sched=yes --error-exitcode=99 --leak-check=full \
	--errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
	--suppressions="$src/valgrind.supp" "$@"
