#!/bin/sh
# SPDX-License-Identifier: MIT
# The Python package: build its C extension against the library of this
# tree (into the build tree, so a read-only source tree works), then run its
# pytest suites with /usr/bin/python3 (Debian's: a pyenv python3 on PATH
# lacks the packages).  Skips, saying why, without Python's headers, pytest
# or numpy, and under the sanitizers (an ASan library cannot be loaded into
# an uninstrumented interpreter).
set -u
src=$(cd "${KVSLAB_TOP_SRCDIR:-.}" && pwd)
build=$(cd "${KVSLAB_TOP_BUILDDIR:-.}" && pwd)
py=${KVSLAB_PYTHON:-/usr/bin/python3}
lib=$build/.libs/libkvslab.so
skip() { echo "SKIP check-python: $*"; exit 77; }
[ -f "$lib" ] || skip "no shared library at $lib"
[ -z "${KVSLAB_SAN_CFLAGS:-}" ] || skip "sanitizer build"
[ -x "$py" ] || skip "no $py"
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
[ -n "$inc" ] && [ -f "$inc/Python.h" ] || skip "no Python.h for $py (python3-dev)"
"$py" -c 'import pytest, numpy' 2>/dev/null || skip "$py lacks pytest or numpy (python3-pytest, python3-numpy)"
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
out=$build/python-build
mkdir -p "$out/kvslab" || exit 1
cp "$src"/python/kvslab/*.py "$out/kvslab/" || exit 1
chmod u+w "$out"/kvslab/*.py
# shellcheck disable=SC2086
${CC:-cc} -std=gnu11 -O2 -g -Wall -Wextra -Werror -fPIC -shared -I"$inc" \
	-I"$src/include" -I"$build/include" "$src"/python/kvslab/_*.c -lpthread \
	-o "$out/kvslab/_kvslab$suffix" "$lib" -Wl,-rpath,"$build/.libs" || exit 1
cd "$out" || exit 1
PYTHONPATH=$out PYTHONDONTWRITEBYTECODE=1 exec "$py" -m pytest -q -rs -p no:cacheprovider \
	"$src/python/tests"
