# SPDX-License-Identifier: Apache-2.0
# lib.sh - what the package tests share (sourced by deb.sh, install.sh,
# man.sh): failures are counted, not fatal, so one run lists them all.
#
#   pkg_tmp NAME    T: a temp dir, removed at exit
#   fail MSG...     "FAIL: MSG", counted
#   cache VAR       VAR's value in $BUILD/CMakeCache.txt
#   pkg_end         exit 1 with the count when anything failed, else 0
fails=0

pkg_tmp() {
	T=$(mktemp -d "/tmp/pkg-$1.XXXXXX")
	trap 'rm -rf "$T"' EXIT
}

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }

pkg_end() {
	[ "$fails" = 0 ] || {
		echo "$fails failed"
		exit 1
	}
}
