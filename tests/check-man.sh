#!/bin/sh
# SPDX-License-Identifier: MIT
# Every exported function has a section-3 page (its own or a .so link to the
# family page), kvslab(7) names it, and every page lints clean.
set -eu
src=${KVSLAB_TOP_SRCDIR:-.}
declared=$(cat "$src"/include/kvslab.h "$src"/include/kvslab/*.h | grep -o '\bkvs_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*(//' | sort -u)
fail=0
for f in $declared; do
	page=$(grep -l "^\.B $f\b\|^\.BR $f\b\|^$f\b\|\\\\fB$f\\\\fP" "$src"/man/man3/*.3 2>/dev/null | head -1 || true)
	if [ -z "$page" ] || ! grep -q "^\.SH NAME" "$page"; then
		echo "no man page names $f"; fail=1
	elif ! sed -n '/^\.SH NAME/,/^\.SH/p' "$page" | grep -q "\b$f\b"; then
		echo "$f is not in the NAME section of $page"; fail=1
	fi
	grep -q "\b$f\b" "$src"/man/man7/kvslab.7 || { echo "kvslab(7) does not list $f"; fail=1; }
done
if [ -n "${MANDOC:-}" ]; then
	for p in "$src"/man/man*/*.[1-8]; do
		out=$("$MANDOC" -Tlint -W warning "$p" 2>&1 || true)
		if [ -n "$out" ]; then echo "$out"; fail=1; fi
	done
else
	echo "mandoc not found: lint skipped"
fi
[ $fail -eq 0 ] && echo "man pages: $(echo $declared | wc -w) functions documented, pages lint clean"
exit $fail
