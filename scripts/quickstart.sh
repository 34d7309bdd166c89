#!/bin/sh
# SPDX-License-Identifier: MIT
# The main job: install what is missing, build, and run kvslab on the embedded
# default (host driver).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
./tools/kvslab-demo "$@"
