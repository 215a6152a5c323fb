#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# ganesha65.sh [--check] - the Debian 13 ("trixie") root bench/run.sh runs
# NFS-Ganesha 6.x from (its server g65), made once per machine and cached.
#
# The root: debootstrap --variant=minbase trixie (debootstrap's default
# mirror), then, chrooted, apt-get install --no-install-recommends
# nfs-ganesha nfs-ganesha-vfs, rpcbind, nfs-common (rpcinfo, rpc.statd) and
# netbase (/etc/services: Ganesha's lock manager looks up "sunrpc" to find
# rpc.statd).  The host's apt sources are not touched: apt inside reads the
# root's own sources.list, the one debootstrap wrote.  Services are not
# started inside (policy-rc.d says no).  About 130 MB and 40 s once, most of
# it downloads, on a fast link.
#
# Made in a directory beside the cache and renamed into place; the marker
# $G65_CACHE/complete is written last, so a root without it is not used.
# Idempotent: a complete root of this version is left alone (under 0.1 s); two
# callers at once take turns on $G65_CACHE/.lock and the second finds it made.
#
# Prints the root's directory on stdout and Ganesha's version on stderr.
# --check: makes nothing; exit 0 when a complete root is cached, 1 otherwise
# (bench/run.sh --smoke, which ctest runs, must not debootstrap).
# Env: G65_CACHE (default /var/cache/union-nfsd-bench/trixie-ganesha).
set -euo pipefail
# Raise when what the root holds changes: roots of older versions are remade.
G65_VERSION=3
CACHE=${G65_CACHE:-/var/cache/union-nfsd-bench/trixie-ganesha}
ROOT=$CACHE/root
PKGS="nfs-ganesha nfs-ganesha-vfs rpcbind nfs-common netbase"

die() {
	echo "ganesha65.sh: $*" >&2
	exit 1
}
say() { echo "ganesha65.sh: $*" >&2; }

complete() { [ -d "$ROOT" ] && grep -qsx "G65_VERSION=$G65_VERSION" "$CACHE/complete"; }

# version: Ganesha's own word on its release inside the root (V6.5)
version() {
	chroot "$ROOT" ganesha.nfsd -v 2>&1 | sed -n 's/.*Release = \(V[0-9.]*\).*/\1/p' | head -1
}

# install_inside ROOT: the packages, chrooted, in a mount namespace of its
# own so that the /proc apt's scripts read goes when it ends
install_inside() {
	printf '#!/bin/sh\nexit 101\n' >"$1/usr/sbin/policy-rc.d"
	chmod 755 "$1/usr/sbin/policy-rc.d"
	unshare -m --propagation private sh -euc '
		mount -t proc proc "$1/proc"
		export DEBIAN_FRONTEND=noninteractive LC_ALL=C
		chroot "$1" apt-get update
		chroot "$1" apt-get install -y --no-install-recommends $2
		chroot "$1" apt-get clean
	' sh "$1" "$PKGS" </dev/null
}

# make_root: debootstrap and install into CACHE/build.PID, then rename
make_root() {
	local b=$CACHE/build.$$ r
	r=$b/root
	rm -rf "$b"
	mkdir -p "$b"
	trap 'rm -rf "$b"' EXIT
	say "making the trixie root (once): debootstrap --variant=minbase trixie, then $PKGS"
	if ! debootstrap --variant=minbase trixie "$r" >"$b/log" 2>&1; then
		tail -30 "$b/log" >&2
		[ ! -f "$r/debootstrap/debootstrap.log" ] || tail -30 "$r/debootstrap/debootstrap.log" >&2
		die "debootstrap failed"
	fi
	install_inside "$r" >>"$b/log" 2>&1 || { tail -30 "$b/log" >&2; die "apt-get install in the root failed"; }
	# Ganesha's VFS export reads the mount table from /etc/mtab (see
	# etc/install-deps.sh); a root made without systemd lacks the link
	ln -sfn ../proc/self/mounts "$r/etc/mtab"
	# Ganesha's lock manager finds rpc.statd at "localhost"; debootstrap
	# writes no hosts file
	printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$r/etc/hosts"
	rm -rf "$r/var/lib/apt/lists/"* "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/info"
	rm -rf "$ROOT"
	mv "$r" "$ROOT"
	trap - EXIT
	rm -rf "$b"
	echo "G65_VERSION=$G65_VERSION" >"$CACHE/complete"
	say "root cached in $ROOT ($(du -sh "$ROOT" | cut -f1))"
}

if [ "${1:-}" = --check ]; then
	complete || exit 1
	echo "$ROOT"
	exit 0
fi
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot)"
command -v debootstrap >/dev/null || die "debootstrap missing (etc/install-deps.sh bench)"
mkdir -p "$CACHE"
exec {lock}>"$CACHE/.lock"
flock -w 1800 "$lock" || die "$CACHE/.lock held for 30 min"
if ! complete; then
	rm -f "$CACHE/complete"
	make_root
fi
v=$(version)
case $v in
V6.*) say "NFS-Ganesha $v in $ROOT" ;;
*) die "the root's ganesha.nfsd says '${v:-nothing}', not V6.x" ;;
esac
echo "$ROOT"
