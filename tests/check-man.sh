#!/bin/sh
# SPDX-License-Identifier: MIT
# Every exported function has a section-3 page named after it (its family
# page or a .so link to it) whose NAME section lists it; kvslab(7) names it;
# kvs_slab_create(3), kvs_pool_create(3), kvs_hpool_create(3), kvs_hiradix_create(3)
# and kvs_store_open(3) show their
# attribute structs as the headers declare them;
# every real page lints clean with mandoc.
set -eu
src=${KVSLAB_TOP_SRCDIR:-.}
# The functions the headers declare: written out, or four a family by
# KVS_STATS_DECLARE(F, ...) of kvslab/stats.h (kvs_F_stat, _stat_get,
# _stat_name, _stats_print).
declared=$({
	cat "$src"/include/kvslab.h "$src"/include/kvslab/*.h |
		grep -o '\bkvs_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*(//'
	sed -n 's/^KVS_STATS_DECLARE(\([a-z0-9_]*\),.*/\1/p' "$src"/include/kvslab/*.h |
		sed 's/.*/kvs_&_stat\nkvs_&_stat_get\nkvs_&_stat_name\nkvs_&_stats_print/'
} | sort -u)
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

# The attribute structs as the pages show them (their first .EX block that
# defines one) and as the headers declare them: member by member, type and
# name in order, comments stripped and whitespace normalised.
struct_members() { # FILE NAME: one "type|name" line per member
	awk -v name="$2" '
	/^\.EX/ { ex = 1; next }
	/^\.EE/ { ex = 0; if (done) exit; next }
	FILENAME ~ /\.[1-8]$/ && !ex { next }
	{ sub(/\/\/.*/, ""); text = text " " $0 }
	index(text, "} " name "_t;") || index(text, "}" name "_t;") { done = 1 }
	done && !(FILENAME ~ /\.[1-8]$/) { exit }
	END {
		gsub(/\\-/, "-", text); gsub(/\\e/, "\\", text)
		s = index(text, "typedef struct " name " {")
		if (!s) exit 1
		text = substr(text, s + length("typedef struct " name " {"))
		e = index(text, "} " name "_t;")
		if (!e) exit 1
		body = substr(text, 1, e - 1)
		while ((i = index(body, "/*")) > 0) {
			j = index(substr(body, i + 2), "*/")
			if (!j) exit 1
			body = substr(body, 1, i - 1) " " substr(body, i + j + 3)
		}
		gsub(/\*/, " * ", body); gsub(/\[/, "[", body); gsub(/[ \t]+/, " ", body)
		gsub(/ *\[ */, "[", body); gsub(/ *\] */, "]", body)
		n = split(body, decl, ";")
		for (k = 1; k <= n; k++) {
			d = decl[k]; gsub(/^ +| +$/, "", d)
			if (d == "") continue
			m = split(d, parts, ",")
			# the type is all but the first declarator, stars excluded
			first = parts[1]; gsub(/ +$/, "", first)
			t = first; sub(/[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])*$/, "", t)
			dn = substr(first, length(t) + 1)
			base = t; gsub(/^ +| +$/, "", base)
			stars = base; sub(/^[^*]*/, "", stars); gsub(/ /, "", stars)
			sub(/[ *]+$/, "", base)
			print base (stars == "" ? "" : " " stars) "|" dn
			for (q = 2; q <= m; q++) {
				dq = parts[q]; gsub(/^ +| +$/, "", dq)
				st = dq; sub(/[^*]*$/, "", st); gsub(/ /, "", st)
				sub(/^[* ]+/, "", dq)
				print base (st == "" ? "" : " " st) "|" dq
			}
		}
	}' "$1"
}
# HEADER:PAGE[:STEM]: the struct kvs_STEM_attr (STEM defaults to HEADER).
for pair in slab:kvs_slab_create pool:kvs_pool_create hostpool:kvs_hpool_create:hpool \
	hiradix:kvs_hiradix_create storage:kvs_store_open:store; do
	hdr="$src/include/kvslab/${pair%%:*}.h"
	rest=${pair#*:}
	stem=${rest#*:}
	[ "$stem" = "$rest" ] && stem=${pair%%:*}
	pair=${pair%%:*}:${rest%%:*}
	page="$src/man/man3/${pair#*:}.3"
	name="kvs_${stem}_attr"
	if ! want=$(struct_members "$hdr" "$name") || [ -z "$want" ]; then
		echo "cannot read $name from $hdr"; fail=1; continue
	fi
	if ! got=$(struct_members "$page" "$name") || [ -z "$got" ]; then
		echo "${pair#*:}(3) shows no $name struct"; fail=1; continue
	fi
	if [ "$want" != "$got" ]; then
		diff=$(printf '%s\n' "$want" | awk -v got="$got" '
		BEGIN { ng = split(got, g, "\n") }
		{ w[NR] = $0 }
		END {
			n = NR > ng ? NR : ng
			for (k = 1; k <= n; k++)
				if (w[k] != g[k]) {
					printf "member %d: header has \"%s\", page has \"%s\"\n", k,
					    k <= NR ? w[k] : "(end)", k <= ng ? g[k] : "(end)"
					exit
				}
		}')
		echo "${pair#*:}(3) shows $name unlike $hdr: $diff" | sed 's/|/ /g'
		fail=1
	fi
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
