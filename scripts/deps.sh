#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the packages kvslab needs, when they are missing, on Debian (12)
# and on Ubuntu (22.04, 24.04: the CUDA and PyTorch images engine teams
# build in, which lack libtool, liburcu and the rest).
# Usage: scripts/deps.sh [--dry-run] [extra packages...]
#   --dry-run: print what would be installed, install nothing.
set -eu
dry=
if [ "${1:-}" = "--dry-run" ]; then
	dry=1
	shift
fi
# A name with alternatives (a|b) is where the distributions differ: the
# first one installed counts, else the first one apt knows is installed.
pkgs="build-essential autoconf automake libtool pkg-config check liburcu-dev \
libssl-dev libxxhash-dev libhiredis-dev redis-server mandoc valgrind gnuplot-nox \
libzmq3-dev libmsgpack-dev|libmsgpack-c-dev python3-zmq python3-msgpack python3-cbor2 \
python3-xxhash python3-dev python3-setuptools python3-pytest python3-numpy cmake \
libmicrohttpd-dev prometheus $*"

installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
known() {
	apt-cache show "$1" >/dev/null 2>&1
}

missing=""
for p in $pkgs; do
	have=
	for a in $(echo "$p" | tr '|' ' '); do
		installed "$a" && have=1 && break
	done
	[ -n "$have" ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 ||
		{ echo "deps.sh: not root and no sudo: install as root:$missing" >&2; exit 1; }
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
[ -n "$dry" ] || $SUDO apt-get update -qq
want=""
for p in $missing; do
	pick=
	for a in $(echo "$p" | tr '|' ' '); do
		if known "$a"; then
			pick=$a
			break
		fi
	done
	# Unknown everywhere: name the first, so apt says what is wrong.
	want="$want ${pick:-${p%%|*}}"
done
echo "installing:$want"
[ -z "$dry" ] || exit 0
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $want </dev/null
