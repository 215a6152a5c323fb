#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# systemd_vm.sh BUILD_DIR - the .deb in a Debian 12 guest booted with systemd
# as init (issue 21).
#
# The .deb that `cpack -G DEB` makes from the build tree is installed with
# `apt-get install ./union-nfsd_*.deb` (in a chroot, offline: its
# dependencies are in the root already) into a Debian 12 root: debootstrap
# --variant=minbase with systemd, systemd-sysv, man-db (for the unit's
# Documentation=) and the .deb's Depends.  The root goes onto an ext4 disk
# image (mkfs.ext4 -d) that tests/vm's kernel boots in qemu, with an
# initramfs of tests/vm's base and systemd_init.sh as /init (it loads the
# virtio, ext4 and NFS client modules the root does not have) handing over
# to /lib/systemd/systemd.  A unit of the test in the image runs
# systemd_guest.sh after the boot: the service off until configured,
# enable --now (READY=1), a mount by the guest's kernel NFS client,
# `systemctl reload` of a changed config seen through the mount, a bad
# config refused, a clean stop, `systemd-analyze verify`, the journal's
# priorities.  Its PASS/FAIL lines come on the guest's second serial port;
# this script prints them and fails on any FAIL or a missing end.  lintian
# checks the same .deb meanwhile on the host (when installed).
#
# The guest has no network card: client and server talk over its loopback.
#
# The root is built once per build tree and the .deb's dependencies, and
# cached as $BUILD/pkg-systemd-vm/root-KEY.tar (~260 MB; about 40 s and
# ~60 MB downloaded the first time); KEY hashes ROOT_VERSION and the package
# list, so a change of either builds a new one and removes the old.
#
# Env: SDVM_KEEP=1 (keep the temp dir: disk image, console logs).
# Exit: 0 passed, 1 failed, 77 skipped (no root, qemu, cpack, mkfs.ext4 or
# debootstrap, or debootstrap could not download).
set -euo pipefail
BUILD=$(cd "${1:?usage: systemd_vm.sh BUILD_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"
it_private_mounts "$@"

# Raise when the root's making changes: cached roots of older versions are remade.
ROOT_VERSION=1
BASE_PKGS="systemd systemd-sysv man-db"

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, the VM kernel cache)"
for tool in qemu-system-x86_64 cpack dpkg-deb mkfs.ext4 debootstrap chroot; do
	command -v $tool >/dev/null || skip "$tool not installed (etc/install-deps.sh tests)"
done
[ -x /bin/busybox ] || skip "/bin/busybox missing (busybox-static)"

vm_test_init sdvm 840 "${SDVM_KEEP:-0}" # ctest TIMEOUT is 900
t0=$SECONDS
elapsed() { echo "$((SECONDS - t0)) s"; }
fail() {
	echo "FAIL: $*"
	exit 1
}

# ---- the .deb ----
(cd "$BUILD" && cpack -G DEB -B "$T/deb") >"$T/cpack.log" 2>&1 || {
	cat "$T/cpack.log"
	fail "cpack -G DEB"
}
DEB=$(ls "$T"/deb/union-nfsd_*.deb)
# its Depends as package names: versions and alternatives left out
DEPS=$(dpkg-deb -f "$DEB" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/ //g' | grep . | sort -u)
echo "$(basename "$DEB") built after $(elapsed); Depends: $(echo $DEPS)"
LINTIAN_PID=
if command -v lintian >/dev/null; then
	lintian --fail-on error,warning "$DEB" >"$T/lintian" 2>&1 &
	LINTIAN_PID=$!
	it_on_exit "kill $LINTIAN_PID 2>/dev/null"
fi

# ---- the Debian root, cached ----
PKGS=$(printf '%s\n' $BASE_PKGS $DEPS | sort -u | tr '\n' ,)
PKGS=${PKGS%,}
CACHE=$BUILD/pkg-systemd-vm
KEY=$(echo "bookworm minbase $ROOT_VERSION $PKGS" | sha256sum | cut -c1-12)
ROOT_TAR=$CACHE/root-$KEY.tar

# download_failed LOG: debootstrap's LOG says it could not fetch
download_failed() {
	grep -qiE "Failed getting release file|Couldn't download|Temporary failure resolving|Could not resolve|Connection (refused|timed out)|Network is unreachable|Failed to fetch" \
		"$1"
}

build_root() {
	local b=$CACHE/build.$$
	rm -rf "$b"
	mkdir -p "$b"
	it_on_exit "rm -rf '$b'"
	echo "building the Debian root (once per build tree): debootstrap --variant=minbase" \
		"--include=$PKGS bookworm"
	if ! debootstrap --variant=minbase --include="$PKGS" bookworm "$b/root" >"$b/log" 2>&1; then
		cat "$b/root/debootstrap/debootstrap.log" >>"$b/log" 2>/dev/null || true
		download_failed "$b/log" && skip "debootstrap could not download (no network?): $(grep -m1 -iE 'fail|couldn' "$b/log")"
		tail -30 "$b/log"
		fail "debootstrap"
	fi
	rm -rf "$b/root/var/cache/apt/archives/"*.deb "$b/root/var/lib/apt/lists/"*
	tar --numeric-owner -C "$b/root" -cf "$ROOT_TAR.part" . || fail "could not write $ROOT_TAR"
	mv "$ROOT_TAR.part" "$ROOT_TAR"
	rm -rf "$b"
	find "$CACHE" -maxdepth 1 -name 'root-*.tar' ! -name "root-$KEY.tar" -delete
	echo "root cached as $ROOT_TAR after $(elapsed)"
}

mkdir -p "$CACHE"
exec {lock}>"$CACHE/.lock"
flock -w 600 "$lock" || fail "$CACHE/.lock held for 10 min"
[ -f "$ROOT_TAR" ] || build_root
flock -u "$lock"

R=$T/root
mkdir "$R"
tar --numeric-owner -C "$R" -xf "$ROOT_TAR"

# ---- the .deb installed as an admin would, offline ----
cp "$DEB" "$R/tmp/"
mount -t proc proc "$R/proc"
it_on_exit "umount '$R/proc' 2>/dev/null"
chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
	apt-get install -y --no-install-recommends -o Acquire::Languages=none \
	"/tmp/$(basename "$DEB")" </dev/null >"$T/apt.log" 2>&1 || {
	cat "$T/apt.log"
	fail "apt-get install ./$(basename "$DEB") in the root"
}
umount "$R/proc"
rm -f "$R/tmp/$(basename "$DEB")"
echo "installed in the root after $(elapsed)"

# ---- the guest's test: a unit that runs systemd_guest.sh once booted ----
install -m 0755 "$HERE/systemd_guest.sh" "$R/usr/local/sbin/unfsd-vmtest"
cat >"$R/etc/systemd/system/unfsd-vmtest.service" <<'EOF'
[Unit]
Description=union-nfsd systemd VM test (tests/pkg/systemd_vm.sh)
After=multi-user.target
[Service]
Type=exec
ExecStart=/usr/local/sbin/unfsd-vmtest
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/ttyS1
EOF
ln -s ../unfsd-vmtest.service "$R/etc/systemd/system/multi-user.target.wants/"
# what the test does not need and a slow emulated boot should not wait for:
# a login on the console (a getty waits for its device, and without udev it
# never comes) and the timers (a first boot runs the persistent ones)
ln -sf /dev/null "$R/etc/systemd/system/getty.target"
rm -f "$R/etc/systemd/system/timers.target.wants/"*
echo unfsd-vm >"$R/etc/hostname"

# ---- the disk and the initramfs ----
MB=$(($(du -sm "$R" | cut -f1) + 256))
mkfs.ext4 -q -F -L root -d "$R" "$T/disk.img" "${MB}M" >/dev/null || fail "mkfs.ext4 -d"
rm -rf "$R"
mkdir -p "$T/rd"
install -m 0755 "$HERE/systemd_init.sh" "$T/rd/init"
{
	cat "$VM_INITRD"
	(cd "$T/rd" && find . | LC_ALL=C sort | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1)
} >"$T/initrd"
echo "disk image (${MB} MB) ready after $(elapsed)"

# ---- the boot ----
t1=$SECONDS
: >"$T/console"
: >"$T/g.out"
timeout -k 5 600 qemu-system-x86_64 "${VM_QEMU[@]}" -m 1024 -nic none \
	-initrd "$T/initrd" -pidfile "$T/qemu.pid" \
	-drive "file=$T/disk.img,format=raw,if=virtio,cache=unsafe" \
	-append "$VM_APPEND systemd.show_status=1" \
	-serial "file:$T/console" -serial "file:$T/g.out" \
	</dev/null >"$T/qemu.log" 2>&1 &
QPID=$!
it_on_exit "kill $QPID 2>/dev/null; p=\$(cat '$T/qemu.pid' 2>/dev/null) && kill \$p 2>/dev/null; wait $QPID 2>/dev/null"
qrc=0
wait $QPID || qrc=$?
echo "guest ran $((SECONDS - t1)) s (qemu exit $qrc)"
tr -d '\r' <"$T/g.out" >"$T/out.txt"
grep -E '^(PASS|FAIL|system |test unit|Type=|root )' "$T/out.txt" || true
rc=$(sed -n 's/.*@@VM_RC=\([0-9]*\)@@.*/\1/p' "$T/out.txt" | tail -1)
bad=0
if [ -z "$rc" ]; then
	echo "FAIL: the guest's test did not finish (qemu exit $qrc; 124: stopped by its timeout)"
	grep -h '@@VM_FAIL' "$T/console" || true
	echo "--- the end of the guest's console:"
	tr -d '\r' <"$T/console" | tail -40
	echo "--- the end of the test's output:"
	tail -40 "$T/out.txt"
	bad=1
elif [ "$rc" != 0 ]; then
	echo "FAIL: $rc check(s) failed in the guest; its journal's end:"
	sed -n '/^--- journalctl/,/@@VM_RC/p' "$T/out.txt"
	bad=1
fi

if [ -n "$LINTIAN_PID" ]; then
	lrc=0
	wait "$LINTIAN_PID" || lrc=$?
	if [ "$lrc" != 0 ] || grep -q '^[EW]: ' "$T/lintian"; then
		cat "$T/lintian"
		echo "FAIL: lintian (exit $lrc)"
		bad=1
	else
		echo "PASS: lintian: no error, no warning"
	fi
fi
[ "$bad" = 0 ] || exit 1
echo "systemd_vm: all passed after $(elapsed)"
