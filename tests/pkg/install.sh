#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# install.sh BUILD_DIR - `cmake --install` into a DESTDIR puts exactly the
# files below, and nothing else (no state dir, no /etc):
#   PREFIX/sbin/union-nfsd and PREFIX/sbin/union-nfsctl (both run),
#   UNITDIR/union-nfsd.service (its ExecStart the installed binary),
#   PREFIX/share/man/man8/union-nfsd.8.gz and union-nfsctl.8.gz,
#   PREFIX/share/man/man5/union-nfsd.conf.5.gz (both mdoc that man reads),
#   PREFIX/share/doc/union-nfsd/examples/union-nfsd.conf and keepalived.conf,
#   PREFIX/libexec/union-nfsd/union-nfsd-ha (what an HA manager runs).
# Exit: 0 passed, 1 failed.
set -euo pipefail
BUILD=${1:?usage: install.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
pkg_tmp install

PREFIX=$(cache CMAKE_INSTALL_PREFIX)
UNITDIR=$(cache SYSTEMD_UNITDIR)
case $UNITDIR in /*) ;; *) UNITDIR=$PREFIX/$UNITDIR ;; esac
DESTDIR=$T/root cmake --install "$BUILD" >"$T/log" 2>&1 || {
	cat "$T/log"
	fail "cmake --install failed"
}

want=$(printf '%s\n' "$PREFIX/sbin/union-nfsd" "$UNITDIR/union-nfsd.service" \
	"$PREFIX/sbin/union-nfsctl" "$PREFIX/share/man/man8/union-nfsctl.8.gz" \
	"$PREFIX/share/man/man8/union-nfsd.8.gz" \
	"$PREFIX/share/man/man5/union-nfsd.conf.5.gz" \
	"$PREFIX/share/doc/union-nfsd/examples/union-nfsd.conf" \
	"$PREFIX/share/doc/union-nfsd/examples/keepalived.conf" \
	"$PREFIX/libexec/union-nfsd/union-nfsd-ha" | sort)
got=$(cd "$T/root" && find . ! -type d | sed 's|^\.||' | sort)
[ "$got" = "$want" ] || fail "installed files differ: $(diff <(echo "$want") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
# Directories only on the way to those files: nothing made for the state.
extra=$(cd "$T/root" && find . -type d -empty | sed 's|^\.||')
[ -z "$extra" ] || fail "empty directories installed: $extra"

R=$T/root
if [ -x "$R$PREFIX/sbin/union-nfsd" ]; then
	"$R$PREFIX/sbin/union-nfsd" --version | grep -q '^union-nfsd ' ||
		fail "the installed binary does not run"
	"$R$PREFIX/sbin/union-nfsctl" --version | grep -q '^union-nfsctl ' ||
		fail "the installed union-nfsctl does not run"
fi
unit=$R$UNITDIR/union-nfsd.service
if [ -f "$unit" ]; then
	grep -qx "ExecStart=$PREFIX/sbin/union-nfsd --foreground --config=/etc/union-nfsd.conf" "$unit" ||
		fail "ExecStart is not the installed binary: $(grep ExecStart= "$unit")"
	! grep -q @ "$unit" || fail "unit has an unfilled @...@: $(grep @ "$unit")"
	[ "$(stat -c %a "$unit")" = 644 ] || fail "unit mode $(stat -c %a "$unit")"
fi
for gz in "$R$PREFIX"/share/man/man*/*.gz; do
	zcat "$gz" | grep -q '^\.Dt ' || fail "$gz: not an mdoc page"
	if command -v man >/dev/null; then
		[ "$(MANWIDTH=80 man -l "$gz" 2>/dev/null | wc -l)" -gt 20 ] ||
			fail "$gz: man -l renders almost nothing"
	fi
done
pkg_end
echo "install: all passed ($(echo "$want" | wc -l) files under $PREFIX and $UNITDIR)"
