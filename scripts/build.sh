#!/bin/sh
# SPDX-License-Identifier: MIT
# Generate, configure and build in the source tree (extra configure args
# pass through), then install: the library, its tools and man pages, and
# the Python package for Debian's /usr/bin/python3 (under the prefix,
# /usr/local by default, whose dist-packages /usr/bin/python3 searches).
set -eu
cd "$(dirname "$0")/.."
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure "$@"
make -j"$(nproc)"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO make install >/dev/null
$SUDO ldconfig 2>/dev/null || true
if grep -q '^install-exec-local:' Makefile; then  # configure built the Python package
	(cd / && /usr/bin/python3 -c "import kvslab, kvslab.sglang, kvslab.vllm") ||
		{ echo "build.sh: the installed kvslab package does not import" >&2; exit 1; }
	echo "build.sh: installed; /usr/bin/python3 imports kvslab $(cd / && /usr/bin/python3 -c 'import kvslab; print(kvslab.version())')"
else
	echo "build.sh: installed; the Python package was left out (configure found no Python.h)"
fi
