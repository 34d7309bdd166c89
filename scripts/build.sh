#!/bin/sh
# SPDX-License-Identifier: MIT
# Generate, configure and build in the source tree (extra configure args pass through).
set -eu
cd "$(dirname "$0")/.."
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure "$@"
make -j"$(nproc)"
