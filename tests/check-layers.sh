#!/bin/sh
# SPDX-License-Identifier: MIT
# The layers of kvslab, kept: every #include of the sources is an arrow,
# and none may point up a layer or close a circle.
#
#   0 common/          (the shim's and the core's shared inlines)
#   1 drv/             (the driver shim: nothing of lib/)
#   2 lib/internal.h   (what every core file shares; lib/stats.[ch], the
#                      statistics module, beside it)
#   3 lib/mem/         slab, pool, planner, request table, fence
#   4 lib/tier/        host pool, storage and its backends
#   5 lib/cache/       the trees, the hashed cache, eviction, events, hashes
#   6 lib/elastic/     limits and compaction
#   7 lib/flow/        request flows
#   8 lib/ops/         metrics, control socket, event publisher
#   9 tools/, tests/   the public headers only (and their own folder's);
#                      tests/regression/ also lib/'s and common/'s
#
# Public headers count at their subsystem's layer (kvslab/pool.h is mem,
# kvslab/radix.h cache, ...), so a layer cannot reach up through them
# either.  Exit 0, or 1 with every offending arrow printed.
set -u
top=${KVSLAB_TOP_SRCDIR:-$(dirname "$0")/..}
cd "$top" || exit 1

rank_of() { # path (as written in the tree) -> rank, or "" when unknown
	case $1 in
	common/*) echo 0 ;;
	drv/*) echo 1 ;;
	lib/internal.h | lib/stats.h | lib/stats.c) echo 2 ;;
	lib/mem/*) echo 3 ;;
	lib/tier/*) echo 4 ;;
	lib/cache/*) echo 5 ;;
	lib/elastic/*) echo 6 ;;
	lib/flow/*) echo 7 ;;
	lib/ops/*) echo 8 ;;
	include/kvslab/version.h | include/kvslab/stats.h | include/kvslab/drv.h | \
	include/kvslab/fault.h) echo 1 ;;
	include/kvslab/slab.h | include/kvslab/pool.h | include/kvslab/reqtab.h) echo 3 ;;
	include/kvslab/hostpool.h | include/kvslab/storage.h) echo 4 ;;
	include/kvslab/radix.h | include/kvslab/hashcache.h | include/kvslab/hiradix.h | \
	include/kvslab/blockhash.h) echo 5 ;;
	include/kvslab/elastic.h) echo 6 ;;
	include/kvslab/flow.h) echo 7 ;;
	include/kvslab/metrics.h | include/kvslab/ctl.h | include/kvslab/kvpub.h) echo 8 ;;
	include/kvslab.h) echo 9 ;;
	tools/* | tests/*) echo 9 ;;
	*) echo "" ;;
	esac
}

# Resolve an include as the compiler would: the file's folder, then the
# include path of its kind (tools and tests: include/ and their helpers).
resolve() { # file name
	for d in "$(dirname "$1")" include; do
		[ -f "$d/$2" ] && { echo "$d/$2"; return; }
	done
	case $1 in
	tests/regression/*) dirs="tests/common lib common" ;;
	tools/* | tests/*) dirs="tests/common tools/replay" ;;
	*) dirs="lib common drv" ;;
	esac
	for d in $dirs; do
		[ -f "$d/$2" ] && { echo "$d/$2"; return; }
	done
	echo ""
}

bad=0
edges=$(mktemp)
trap 'rm -f "$edges" "$edges.err"' EXIT
files=$(find common drv lib include tools tests -name '*.[ch]' -o -name '*.cc' | sort)
for f in $files; do
	fr=$(rank_of "$f")
	[ -n "$fr" ] || { echo "check-layers: $f: in no layer"; bad=1; continue; }
	for inc in $(sed -n -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/p
			     s/^[[:space:]]*#[[:space:]]*include[[:space:]]*<(kvslab[^>]*)>.*/\1/p' "$f"); do
		t=$(resolve "$f" "$inc")
		# A system header, or one the build makes.
		[ -n "$t" ] || continue
		tr=$(rank_of "$t")
		[ -n "$tr" ] || continue
		echo "$f $t" >>"$edges"
		if [ "$tr" -gt "$fr" ]; then
			echo "check-layers: $f (layer $fr) includes $t (layer $tr): up a layer"
			bad=1
		fi
		case $f in
		tools/replay/* | tests/tools/*)
			case $t in
			include/* | tools/replay/* | tests/common/*) ;;
			*) echo "check-layers: $f includes the private header $t"; bad=1 ;;
			esac ;;
		tests/regression/*)
			# Regression programs of the library's internals (linked
			# with the static library) may include lib/'s private
			# headers too: they are tests of that layer's insides.
			case $t in
			include/* | lib/* | common/* | "$(dirname "$f")"/* | tests/common/*) ;;
			*) echo "check-layers: $f includes the private header $t"; bad=1 ;;
			esac ;;
		tools/* | tests/*)
			case $t in
			include/* | "$(dirname "$f")"/* | tests/common/*) ;;
			*) echo "check-layers: $f includes the private header $t"; bad=1 ;;
			esac ;;
		drv/*)
			case $t in
			lib/*) echo "check-layers: $f includes $t: the shim reaches into lib/"; bad=1 ;;
			esac ;;
		esac
	done
done
if ! tsort "$edges" >/dev/null 2>"$edges.err"; then
	echo "check-layers: the includes close a circle:"
	cat "$edges.err"
	bad=1
fi
[ $bad -eq 0 ] && echo "check-layers: $(wc -l <"$edges") arrows, none up a layer, no circle"
exit $bad
