#!/bin/sh
# SPDX-License-Identifier: MIT
# The main job: install what is missing, build, and replay the built-in
# trace generator's requests through kvslab on the embedded default (host
# driver), printing the fragmentation report and writing replay.png.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
./tools/kvslab-replay --plot replay.png "$@"
