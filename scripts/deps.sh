#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian packages kvslab needs, when they are missing.
# Usage: scripts/deps.sh [extra packages...]
set -eu
pkgs="build-essential autoconf automake libtool pkg-config check liburcu-dev \
libssl-dev libxxhash-dev libhiredis-dev redis-server mandoc valgrind gnuplot-nox \
libzmq3-dev libmsgpack-dev python3-zmq python3-msgpack python3-cbor2 python3-xxhash \
python3-dev python3-setuptools python3-pytest python3-numpy libmicrohttpd-dev $*"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing </dev/null
