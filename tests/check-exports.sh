#!/bin/sh
# SPDX-License-Identifier: MIT
# Every symbol libkvslab.so exports starts with kvs_, and every kvs_ function
# declared in the public headers is exported.
set -eu
top=${KVSLAB_TOP_BUILDDIR:-.}
src=${KVSLAB_TOP_SRCDIR:-.}
so=$top/.libs/libkvslab.so
[ -f "$so" ] || { echo "no shared library at $so"; exit 77; }
exported=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sed 's/@.*//' | sort -u)
bad=$(printf '%s\n' "$exported" | grep -v '^kvs_' || true)
if [ -n "$bad" ]; then
	echo "exported without the kvs_ prefix:"; echo "$bad"; exit 1
fi
# The functions the headers declare: written out, or four a family by
# KVS_STATS_DECLARE(F, ...) of kvslab/stats.h (kvs_F_stat, _stat_get,
# _stat_name, _stats_print).
declared=$({
	cat "$src"/include/kvslab.h "$src"/include/kvslab/*.h |
		grep -o '\bkvs_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*(//'
	sed -n 's/^KVS_STATS_DECLARE(\([a-z0-9_]*\),.*/\1/p' "$src"/include/kvslab/*.h |
		sed 's/.*/kvs_&_stat\nkvs_&_stat_get\nkvs_&_stat_name\nkvs_&_stats_print/'
} | sort -u)
missing=""
for f in $declared; do
	printf '%s\n' "$exported" | grep -qx "$f" || missing="$missing $f"
done
if [ -n "$missing" ]; then
	echo "declared but not exported:$missing"; exit 1
fi
echo "$(printf '%s\n' "$exported" | wc -l) exported symbols, all kvs_, all declared ones present"
