#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kvm_write.sh UNION_NFSD - the kernel client test of issue 3 (writes).
#
# A Debian kernel in qemu (tests/vm) boots with
# its ROOT on union-nfsd's export: the thin-client netboot case.  The union is
#   lower 1  the test layer: /srv/kvmw (a tarball of ~3000 files, guest_prog.c,
#            the expected output of guest_prog, list_tree.sh) and part of /srv/ltree
#            (with a white-out and an opaque directory of its own)
#   lower 2  the rest of /srv/ltree
#   lower 3  a Debian 12 minbase root with gcc (debootstrap; built once per machine
#            and cached as a tarball, see below)
#   upper    empty at the start of every run
# The guest (guest_write.sh, run by the root's own dash) unpacks the tarball,
# compiles and runs a C program with gcc, deletes half the tree, renames a few
# hundred files, changes the lower tree, and prints list_tree.sh's listing.  Then
# union-nfsd gets SIGTERM (it must exit 0), kernel overlayfs mounts the same lower
# layers with the upper union-nfsd wrote, list_tree.sh runs again with the same
# Debian tools (chroot into the overlay mount), and the two listings must be equal.
#
# The root: debootstrap --variant=minbase --include=gcc,libc6-dev bookworm (~40 s
# and ~100 MB downloaded), stored as $KVMW_CACHE/root-$ROOT_VERSION.tar
# (default /var/cache/union-nfsd-test; ~330 MB); changing ROOT_VERSION builds a new
# one and removes the old.  A lock lets parallel runs build it once.
#
# Env: KVMW_CACHE, KVMW_MIRROR
# (debootstrap's mirror; unset, debootstrap's default), KVMW_KEEP=1 (keep the
# temp dir and print where it is).
# Exit: 0 equal, 1 different or failed, 77 skipped (no root, /dev/net/tun, qemu).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_write.sh UNION_NFSD}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"
it_private_mounts "$@"

ROOT_VERSION=bookworm-minbase-gcc-1
CACHE_DIR=${KVMW_CACHE:-/var/cache/union-nfsd-test}
ROOT_TAR=$CACHE_DIR/root-$ROOT_VERSION.tar
MIRROR=${KVMW_MIRROR:-}

vm_require_host "overlay mount" "chroot"
command -v cc >/dev/null || { echo "FAIL: no host C compiler (cc) for guest_prog.c"; exit 1; }
command -v setfattr >/dev/null || { echo "FAIL: setfattr missing (apt-get install attr)"; exit 1; }

vm_test_init kvmw 1440 "${KVMW_KEEP:-0}" # ctest TIMEOUT is 1500
t0=$SECONDS
elapsed() { echo "$((SECONDS - t0)) s"; }

# ---- the Debian root, built once per machine --------------------------------------

# build_root: debootstrap into a temp dir beside the cache, trim it, tar it.
build_root() {
	local b
	if ! command -v debootstrap >/dev/null; then
		echo "installing debootstrap"
		export DEBIAN_FRONTEND=noninteractive
		apt_install() { apt-get install -y --no-install-recommends debootstrap; }
		{ apt_install || { apt-get update && apt_install; }; } </dev/null >"$T/apt.log" 2>&1 ||
			{ tail -20 "$T/apt.log"; return 1; }
	fi
	b=$(mktemp -d "$CACHE_DIR/build.XXXXXX") && [ -d "$b" ] || return 1
	it_on_exit "rm -rf '$b'"
	echo "building the Debian root (one time): debootstrap${MIRROR:+ from $MIRROR}"
	if ! debootstrap --variant=minbase --include=gcc,libc6-dev bookworm "$b/root" \
		${MIRROR:+"$MIRROR"} >"$b/log" 2>&1; then
		echo "debootstrap failed; the end of its log:"
		tail -30 "$b/log"
		[ -f "$b/root/debootstrap/debootstrap.log" ] && tail -30 "$b/root/debootstrap/debootstrap.log"
		return 1
	fi
	# what the test never reads: the .debs, the package lists, documentation
	rm -rf "$b/root/var/cache/apt/archives/"*.deb "$b/root/var/lib/apt/lists/"* \
		"$b/root/usr/share/doc" "$b/root/usr/share/man" "$b/root/usr/share/info"
	it_on_exit "rm -f '$ROOT_TAR.part$$'"
	# (called after ||, where set -e does not act: each step checked here)
	tar --numeric-owner -C "$b/root" -cf "$ROOT_TAR.part$$" . &&
		mv "$ROOT_TAR.part$$" "$ROOT_TAR" || { echo "could not write $ROOT_TAR"; return 1; }
	rm -rf "$b"
	find "$CACHE_DIR" -maxdepth 1 -name 'root-*.tar' ! -name "root-$ROOT_VERSION.tar" -delete
}

ensure_root() {
	local lock
	mkdir -p "$CACHE_DIR"
	exec {lock}>"$CACHE_DIR/.lock"
	if ! flock -w 900 "$lock"; then
		echo "FAIL: $CACHE_DIR/.lock held for 15 min"
		return 1
	fi
	local rc=0
	# with the lock held, a build dir or part file is left from a killed run
	rm -rf "$CACHE_DIR"/build.* "$CACHE_DIR"/root-*.tar.part*
	[ -f "$ROOT_TAR" ] || build_root || rc=$?
	exec {lock}>&-
	return "$rc"
}

ensure_root || { echo "FAIL: no Debian root"; exit 1; }
echo "Debian root $ROOT_TAR ready after $(elapsed)"

# ---- the layers ----------------------------------------------------------------------

LT=$T/ltest LM=$T/lmid LR=$T/lroot U=$T/upper W=$T/work
mkdir -p "$LT/srv/kvmw" "$LM" "$LR" "$U" "$W" "$T/gen"
chmod 755 "$T" "$U" # the upper's root is the merged root's attributes
tar --numeric-owner -C "$LR" -xf "$ROOT_TAR"
echo "root extracted after $(elapsed)"

# gen_tree DIR: the tarball's ~3000 objects: 30 directories of files of one size
# each (37 bytes to 9 KB), empty files, odd names, symlinks (relative, absolute,
# dangling), hard links, modes, owners, a deep path, two larger files, old times
gen_tree() {
	local top=$1 i sz sizes=(37 512 1500 4096 6001 9000)
	for i in $(seq -w 0 29); do
		mkdir -p "$top/d$i/sub"
		sz=${sizes[$((10#$i % 6))]}
		head -c $((sz * 80 - 11)) /dev/urandom | split -b "$sz" -a 2 -d - "$top/d$i/f"
		head -c $((sz * 15)) /dev/urandom | split -b "$sz" -a 2 -d - "$top/d$i/sub/g"
		: >"$top/d$i/empty"
	done
	: >"$top/d01/name with spaces"
	echo "unicode" >"$top/d02/ünïcödé-名前"
	echo "dash" >"$top/d03/-leading-dash"
	for i in $(seq 0 9); do
		ln -s "f0$i" "$top/d04/rel$i"
		ln -s "../d05/f1$i" "$top/d04/up$i"
		ln "$top/d06/f2$i" "$top/d06/hard$i"
		ln "$top/d08/f3$i" "$top/d09/hard-from-d08-$i"
	done
	ln -s /etc/hostname "$top/d04/absolute"
	ln -s nowhere "$top/d04/dangling"
	chmod 600 "$top"/d10/f*
	chmod 444 "$top"/d11/f0*
	chmod 755 "$top"/d12/f1*
	chmod 1777 "$top/d14"
	chmod 700 "$top/d15"
	chown -R 1000:1000 "$top/d16"
	chown 65534:65534 "$top"/d17/f0*
	mkdir -p "$top/d18/a/b/c/d/e/f/g/h"
	echo deep >"$top/d18/a/b/c/d/e/f/g/h/leaf"
	head -c 1500000 /dev/urandom >"$top/d19/big1"
	head -c 300001 /dev/urandom >"$top/d24/big2"
	touch -d '2020-02-29 12:34:56.123456789' "$top"/d25/f*
	touch -d '1999-12-31 23:59:59' "$top/d26"
}

# gen_ltree MID TOP: /srv/ltree over two lower layers, with the top's own white-out
# (of a name below) and opaque directory
gen_ltree() {
	local mid=$1/srv/ltree top=$2/srv/ltree a m
	for a in 0 1 2 3 4 5 6 7 8 9; do
		mkdir -p "$mid/a$a"
		for m in $(seq -w 0 19); do
			printf 'lower file a%s/m%s\n%*s\n' "$a" "$m" "$((10#$m * 97))" x >"$mid/a$a/m$m"
		done
	done
	echo "linked" >"$mid/a3/h1"
	ln "$mid/a3/h1" "$mid/a3/h2"
	mkdir -p "$mid/a5/sub/deep" "$mid/a8/inner"
	echo "in a5" >"$mid/a5/sub/deep/x"
	echo "in a8" >"$mid/a8/inner/y"
	for a in 0 1 2 3 4; do
		mkdir -p "$top/a$a"
		for m in $(seq -w 0 9); do
			printf 'top file a%s/t%s\n' "$a" "$m" >"$top/a$a/t$m"
		done
	done
	echo "top wins" >"$top/a0/m05"
	mknod "$top/a1/m07" c 0 0
	setfattr -n trusted.overlay.opaque -v y "$top/a2"
	mkdir -p "$top/a8" "$top/a9"
	echo "top part of a8" >"$top/a8/top-file"
	for m in 0 1 2 3 4; do ln -s "m0$m" "$top/a9/s$m"; done
}

gen_tree "$T/gen/tree"
tar --format=posix --numeric-owner -C "$T/gen" -cf "$LT/srv/kvmw/tree.tar" tree
gen_ltree "$LM" "$LT"
cp "$HERE/guest_prog.c" "$HERE/list_tree.sh" "$LT/srv/kvmw/"
# the output the guest's build of guest_prog must print, from the host's build
cc -O2 -Wall -Werror -o "$T/gen/guest_prog" "$HERE/guest_prog.c"
"$T/gen/guest_prog" "$T/gen/tree" "$T/gen/out" >"$LT/srv/kvmw/prog.expected"
echo "layers ready after $(elapsed): $(find "$T/gen/tree" | wc -l) objects in the tarball;" \
	"guest_prog on the host: $(head -1 "$LT/srv/kvmw/prog.expected")"

# ---- the guest -------------------------------------------------------------------------

# union-nfsd in the harness's namespace, on its ports, its state dir in the
# harness's work dir.  vm_server_stop ends it with SIGTERM to its process group;
# the wrapper waits for it and keeps its exit status.  Should the server end by itself, the wrapper stops
# qemu at once: under the hard mount the guest would hang until --timeout.
cat >"$T/server.sh" <<EOF
'$UNION_NFSD' --lowerdir='$LT:$LM:$LR' --upperdir='$U' --workdir='$W' \\
	$VM_SERVER_ARGS \\
	--clients="$(vm_guest_ip 1)(rw,no_root_squash)" &
p=\$!
trap 'wait \$p; echo \$? >"$T/server.status"; exit 0' TERM
wait \$p
echo \$? >"$T/server.status"
echo "kvm_write: union-nfsd ended by itself (status \$(cat "$T/server.status")): stopping qemu"
for q in \$(ip netns pids "\$VM_NS"); do [ "\$q" = \$\$ ] || kill "\$q" 2>/dev/null; done
EOF

t1=$SECONDS
run_rc=0
vm_net_up
vm_run_guest "bash '$T/server.sh'" "$T/guest.out" "$T/guest.err" "$HERE/guest_write.sh" \
	--root --mem 512 --timeout 1100 || run_rc=$?
vm_server_stop
echo "guest run took $((SECONDS - t1)) s, exit $run_rc; its steps:"
grep -E '^(step|unpacked|guest_prog|deleted|renamed|lower tree)' "$T/guest.out" | sed 's/^/  /' || true

fail() {
	echo "FAIL: $*"
	echo "--- guest output (last 40 lines, listing left out):"
	sed '/^@@LIST-BEGIN@@$/,/^@@LIST-END@@$/d' "$T/guest.out" | tail -40
	echo "--- the harness (last 30 lines):"
	tail -30 "$T/guest.err"
	echo "--- server log (last 40 lines):"
	tail -40 "$VM_WORK/server.log"
	exit 1
}
[ "$run_rc" = 0 ] || fail "the guest ended with status $run_rc"
status=$(cat "$T/server.status" 2>/dev/null || echo none)
[ "$status" = 0 ] || fail "union-nfsd's exit status after SIGTERM: $status (want 0)"
sed -n '/^@@LIST-BEGIN@@$/,/^@@LIST-END@@$/p' "$T/guest.out" | sed '1d;$d' >"$T/guest.list"
grep -q '^@@END@@ [0-9]' "$T/guest.list" || fail "no complete listing from the guest"

# ---- the upper union-nfsd wrote, under kernel overlayfs ---------------------------------

mkdir "$T/ovl" "$T/ovl-work"
mount -t overlay overlay -o "lowerdir=$LT:$LM:$LR,upperdir=$U,workdir=$T/ovl-work" "$T/ovl"
it_on_exit "unmount_path '$T/ovl'"
chroot "$T/ovl" /bin/sh /srv/kvmw/list_tree.sh /scratch /srv/ltree >"$T/overlay.list"
unmount_path "$T/ovl"

if ! diff -u --label overlayfs --label guest "$T/overlay.list" "$T/guest.list" >"$T/diff"; then
	echo "FAIL: the overlay mount of the layers differs from what the guest saw" \
		"(first 100 lines of the diff):"
	head -100 "$T/diff"
	exit 1
fi
echo "PASS: $(tail -1 "$T/guest.list" | cut -d' ' -f2) objects identical in the guest" \
	"and on the overlay mount; total $(elapsed)"
