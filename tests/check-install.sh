#!/bin/sh
# SPDX-License-Identifier: MIT
# Install into a scratch DESTDIR, then compile and run a program with nothing
# but `pkg-config --cflags --libs kvslab`.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
make -C "$top" install DESTDIR="$dest" >/dev/null
prefix=$(sed -n 's/^prefix=//p' "$top/kvslab.pc")
libdir=$(sed -n 's/^libdir=//p' "$top/kvslab.pc" | sed "s|\${exec_prefix}|$prefix|")
export PKG_CONFIG_PATH="$dest$libdir/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$dest"
cat > "$dest/prog.c" <<'C'
#include <kvslab.h>
#include <stdio.h>
int main(void)
{
	kvs_drv_t *d = kvs_drv_open("host", NULL);
	kvs_devptr_t base;
	kvs_chunk_t *c;

	if (!d || kvs_drv_reserve(d, kvs_drv_granularity(d), &base) ||
	    kvs_drv_chunk_create(d, kvs_drv_granularity(d), &c) || kvs_drv_map(d, base, c))
		return 1;
	printf("linked kvslab %s: mapped %llu bytes\n", KVSLAB_VERSION_STRING,
	       (unsigned long long)kvs_drv_stat(d, KVS_DRV_STAT_bytes_mapped));
	return kvs_drv_close(d);
}
C
# shellcheck disable=SC2046
cc -o "$dest/prog" "$dest/prog.c" $(pkg-config --cflags --libs kvslab)
LD_LIBRARY_PATH="$dest$libdir" "$dest/prog"
for p in kvs_drv_open kvs_drv_map kvslab; do
	f=$(find "$dest" -name "$p.[37]" | head -1)
	[ -n "$f" ] || { echo "man page $p not installed"; exit 1; }
done
# The Python package, where configure built it: importable from the
# install, its extension finding the installed library.
pyline=
pydir=$(sed -n 's/^kvslabpydir = //p' "$top/Makefile" | sed "s|\${prefix}|$prefix|")
if grep -q '^install-exec-local:' "$top/Makefile" && [ -n "$pydir" ]; then
	py=$(sed -n 's/^KVSLAB_PYTHON = //p' "$top/Makefile")
	[ -f "$dest$pydir/__init__.py" ] || { echo "python package not installed in $pydir"; exit 1; }
	(cd "$dest" && PYTHONPATH="$dest$(dirname "$pydir")" LD_LIBRARY_PATH="$dest$libdir" \
		"$py" -c 'import kvslab, kvslab.sglang, kvslab.vllm; kvslab.Radix(None).close()') ||
		{ echo "the installed python package does not import"; exit 1; }
	pyline="; python package imports"
fi
# CMake, where it is installed: find_package(kvslab CONFIG) from the
# installed kvslabConfig.cmake, and the FindPkgConfig recipe the README gives.
cmline=
if command -v cmake >/dev/null 2>&1; then
	for how in config pkgconfig; do
		proj="$dest/cmake-$how"
		mkdir -p "$proj"
		cp "$dest/prog.c" "$proj/prog.c"
		if [ $how = config ]; then
			cat > "$proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.13)
project(kvslab_consumer C)
find_package(kvslab 0.1 CONFIG REQUIRED)
add_executable(prog prog.c)
target_link_libraries(prog PRIVATE kvslab::kvslab)
CM
		else
			cat > "$proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.13)
project(kvslab_consumer C)
find_package(PkgConfig REQUIRED)
pkg_check_modules(KVSLAB REQUIRED IMPORTED_TARGET kvslab)
add_executable(prog prog.c)
target_link_libraries(prog PRIVATE PkgConfig::KVSLAB)
CM
		fi
		# The pkg-config recipe as for a custom prefix: kvslab.pc's prefix
		# moved to where the files lie, no sysroot (it would move the
		# system's include paths too).
		mkdir -p "$dest/pc"
		sed "s|^prefix=.*|prefix=$dest$prefix|" "$dest$libdir/pkgconfig/kvslab.pc" > "$dest/pc/kvslab.pc"
		PKG_CONFIG_SYSROOT_DIR= PKG_CONFIG_PATH="$dest/pc" \
		cmake -S "$proj" -B "$proj/build" -DCMAKE_PREFIX_PATH="$dest$prefix" >"$proj/log" 2>&1 &&
			cmake --build "$proj/build" >>"$proj/log" 2>&1 &&
			LD_LIBRARY_PATH="$dest$libdir" "$proj/build/prog" >>"$proj/log" 2>&1 ||
			{ echo "cmake ($how) could not build and run a program against the install:"; cat "$proj/log"; exit 1; }
	done
	cmline="; CMake find_package(kvslab CONFIG) and pkg_check_modules programs ran"
else
	cmline="; (no cmake: the CMake checks were skipped)"
fi
echo "install check: pkg-config program linked and ran; man pages installed$pyline$cmline"
