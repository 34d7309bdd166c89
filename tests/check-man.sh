#!/bin/sh
# SPDX-License-Identifier: MIT
# Every exported function has a section-3 page named after it (its family
# page or a .so link to it) whose NAME section lists it; kvslab(7) names it;
# every real page lints clean with mandoc.
set -eu
src=${KVSLAB_TOP_SRCDIR:-.}
declared=$(cat "$src"/include/kvslab.h "$src"/include/kvslab/*.h | grep -o '\bkvs_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*(//' | sort -u)
fail=0
for f in $declared; do
	page="$src/man/man3/$f.3"
	if [ ! -f "$page" ]; then
		echo "no man page $f.3"; fail=1; continue
	fi
	target=$(sed -n '1s/^\.so  *//p' "$page")
	[ -n "$target" ] && page="$src/man/$target"
	if [ ! -f "$page" ]; then
		echo "$f.3 links to a missing page $target"; fail=1; continue
	fi
	if ! sed -n '/^\.SH NAME/,/^\.SH [^N]/p' "$page" | grep -q "\b$f\b"; then
		echo "$f is not in the NAME section of $page"; fail=1
	fi
	grep -q "\b$f\b" "$src"/man/man7/kvslab.7 || { echo "kvslab(7) does not list $f"; fail=1; }
done
if [ -n "${MANDOC:-}" ]; then
	for p in "$src"/man/man*/*.[1-8]; do
		head -1 "$p" | grep -q '^\.so ' && continue
		out=$("$MANDOC" -Tlint -W warning "$p" 2>&1 || true)
		if [ -n "$out" ]; then echo "$out"; fail=1; fi
	done
else
	echo "mandoc not found: lint skipped"
fi
[ $fail -eq 0 ] && echo "man pages: $(echo $declared | wc -w) functions documented, pages lint clean"
exit $fail
