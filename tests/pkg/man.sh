#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# man.sh CHECK SRCDIR [UNION_NFSD UNION_NFSCTL] - the man pages (man/), by CHECK:
#   lint     mandoc -T lint -W warning reports nothing for each page
#   render   man -l renders each page with no message on stderr
#   options  every long option of `union-nfsd --help` is a .Fl entry of
#            union-nfsd.8, and every config key that server/args.c reads is
#            a .Cm entry of union-nfsd.conf.5; every long option of
#            `union-nfsctl --help` is a .Fl entry of union-nfsctl.8 and
#            every command it lists a .Cm entry: the pages cannot fall behind
# Exit: 0 passed, 1 failed, 77 skipped (the tool is not installed).
set -euo pipefail
CHECK=${1:?usage: man.sh lint|render|options SRCDIR [UNION_NFSD]}
SRCDIR=${2:?usage: man.sh lint|render|options SRCDIR [UNION_NFSD]}
PAGES=("$SRCDIR"/man/*.[0-9])
. "$(dirname "$0")/lib.sh"

case $CHECK in
lint)
	command -v mandoc >/dev/null || { echo "SKIP: no mandoc"; exit 77; }
	for p in "${PAGES[@]}"; do
		out=$(mandoc -T lint -W warning "$p" 2>&1) || fail "$p: mandoc: $out"
		[ -z "$out" ] || fail "$p: $out"
	done
	;;
render)
	command -v man >/dev/null || { echo "SKIP: no man"; exit 77; }
	for p in "${PAGES[@]}"; do
		err=$(MANWIDTH=80 man -l "$p" 2>&1 >/dev/null) || fail "$p: man -l failed: $err"
		[ -z "$err" ] || fail "$p: man -l said: $err"
		[ "$(MANWIDTH=80 man -l "$p" 2>/dev/null | wc -l)" -gt 20 ] ||
			fail "$p: rendered almost nothing"
	done
	;;
options)
	BIN=${3:?options needs UNION_NFSD}
	opts=$("$BIN" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
	[ "$(echo "$opts" | wc -l)" -gt 20 ] || fail "too few options in --help: $opts"
	for o in $opts --help --version; do
		grep -q -- "^\.It Fl -${o#--}\( \|$\)" "$SRCDIR/man/union-nfsd.8" ||
			fail "union-nfsd.8 has no '.It Fl $o' entry"
	done
	keys=$(grep -o 'strcmp(key, "[a-z-]*")' "$SRCDIR/server/args.c" |
		sed 's/.*"\(.*\)")/\1/' | sort -u)
	[ "$(echo "$keys" | wc -l)" -gt 15 ] || fail "too few keys in args.c: $keys"
	for k in $keys; do
		grep -q -- "^\.It Cm $k\( \|$\)" "$SRCDIR/man/union-nfsd.conf.5" ||
			fail "union-nfsd.conf.5 has no '.It Cm $k' entry"
	done
	CTL=${4:?options needs UNION_NFSCTL}
	page=$SRCDIR/man/union-nfsctl.8
	opts=$("$CTL" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
	[ "$(echo "$opts" | wc -l)" -ge 4 ] || fail "too few options in nfsctl --help: $opts"
	for o in $opts; do
		grep -q -- "^\.It .*Fl -${o#--}\( \|$\)" "$page" ||
			fail "union-nfsctl.8 has no '.It ... Fl $o' entry"
	done
	cmds=$("$CTL" --help | sed -n '/Commands:$/,/^Options:/p' | sed -n 's/^  \([a-z][a-z]*\).*/\1/p')
	[ "$(echo "$cmds" | wc -l)" -ge 6 ] || fail "too few commands in nfsctl --help: $cmds"
	for c in $cmds; do
		grep -q -- "^\.It Cm $c\( \|$\)" "$page" ||
			fail "union-nfsctl.8 has no '.It Cm $c' entry"
	done
	;;
*)
	echo "unknown check $CHECK"
	exit 2
	;;
esac
pkg_end
echo "man $CHECK: all passed"
