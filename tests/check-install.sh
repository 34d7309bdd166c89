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
echo "install check: pkg-config program linked and ran; man pages installed$pyline"
