#!/bin/sh
# SPDX-License-Identifier: MIT
# Every example program in the man pages (an .EX block with a main) is
# extracted, compiled against the built library and run: the pages'
# examples, kvslab(7)'s request flow among them, cannot rot.
set -u
src=$(cd "${KVSLAB_TOP_SRCDIR:-.}" && pwd)
build=$(cd "${KVSLAB_TOP_BUILDDIR:-.}" && pwd)
lib=$build/.libs/libkvslab.so
[ -f "$lib" ] || { echo "no shared library at $lib"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0 n=0
for page in "$src"/man/man*/*.[1-8]; do
	head -1 "$page" | grep -q '^\.so ' && continue
	grep -q '^main(\|^int main(' "$page" || continue
	# Split the page's .EX blocks into files; keep those with a main().
	awk -v dir="$work" -v base="$(basename "$page")" '
		/^\.EX/ { inb = 1; k++; f = sprintf("%s/%s.%d.c", dir, base, k); next }
		/^\.EE/ { inb = 0; close(f); next }
		inb { print > f }
	' "$page"
	for c in "$work/$(basename "$page")".*.c; do
		[ -f "$c" ] || continue
		grep -q '^main(\|^int main(' "$c" || { rm -f "$c"; continue; }
		# Undo the roff escapes used in code.
		sed -i -e 's/\\e/\\/g' -e 's/\\-/-/g' -e "s/\\\\(aq/'/g" -e 's/\\(dq/"/g' \
			-e 's/\\(ti/~/g' -e 's/\\(ha/^/g' -e 's/\\&//g' -e 's/\\(rs/\\/g' "$c"
		n=$((n + 1))
		name=$(basename "$c" .c)
		# shellcheck disable=SC2086
		if ! cc -std=gnu11 -Wall -Wextra -Werror ${KVSLAB_SAN_CFLAGS:-} -I"$src/include" -I"$build/include" \
			-o "$work/$name" "$c" "$lib" -Wl,-rpath,"$build/.libs" -lpthread 2>"$work/$name.err"; then
			echo "$name: does not compile:"; head -20 "$work/$name.err"; fail=1; continue
		fi
		if ! (cd "$work" && timeout 120 "./$name" >"$work/$name.out" 2>&1); then
			echo "$name: failed when run:"; tail -20 "$work/$name.out"; fail=1
		fi
	done
done
[ $fail -eq 0 ] && echo "man page examples: $n programs compiled and ran"
[ $n -gt 0 ] || { echo "no example found"; exit 1; }
exit $fail
