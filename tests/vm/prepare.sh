#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# prepare.sh - the guest kernel and base initramfs of the VM tests (tests/vm),
# made once per machine and cached (as root).
#
#   bash tests/vm/prepare.sh
#
# Debian's kernel package (the one linux-image-amd64 depends on) is fetched with
# apt-get download and unpacked into the cache with dpkg -x: nothing is
# installed on the host.  The base initramfs holds busybox-static (its applets
# as links) and the modules the guests load, uncompressed, with a modules.dep
# made by busybox depmod, so busybox modprobe resolves their dependencies:
#   virtio_pci virtio_net            the guest's network card
#   nfsv3 (nfs sunrpc lockd grace)   the NFSv3 client
#   virtio_blk ext4                  kvm_crash.sh's disk
#   xfs (libcrc32c)                  kvm_powercut.sh's XFS disk
# It has no /init: each guest appends a cpio of its own with init.sh as /init
# (or kvm_crash.sh's), its script and its files; the kernel unpacks the
# archives in order, a later file replacing an earlier one.
#
# VM_VMLINUX is the same kernel uncompressed (an ELF that qemu boots through
# its PVH entry): under software emulation the decompression of vmlinuz takes
# about 3 s of each boot, which kvm_powercut.sh, booting dozens of times,
# saves; empty when the kernel is not xz, zstd or gzip compressed.
#
# Writes $VM_CACHE/vm.env (VM_KVER, VM_KERNEL, VM_VMLINUX, VM_INITRD,
# VM_KCONFIG) last, so a cache with that file is complete.  Idempotent: a complete cache of this
# version is left alone (about 10 ms); two callers at once take turns on a lock
# and the second finds the cache made.
#
# Env: VM_CACHE (default /var/cache/union-nfsd-test/vm; ~450 MB), VM_KVER (a
# kernel ABI such as 6.1.0-57-amd64 instead of linux-image-amd64's).
set -euo pipefail
# Raise when the initramfs's contents change: caches of older versions are remade.
PREP_VERSION=2
CACHE=${VM_CACHE:-/var/cache/union-nfsd-test/vm}
BB=/bin/busybox
MODULES="virtio_pci virtio_net nfsv3 virtio_blk crc32c_generic ext4 xfs"

die() {
	echo "prepare.sh: $*" >&2
	exit 1
}
log() { echo "prepare.sh: $*" >&2; }

[ "$(id -u)" = 0 ] || die "run as root (apt-get download, dpkg -x into $CACHE)"
[ -x "$BB" ] || die "$BB missing (busybox-static)"
mkdir -p "$CACHE"
exec {lock}>"$CACHE/.lock"
flock -w 600 "$lock" || die "$CACHE/.lock held for 10 min"

if [ -f "$CACHE/vm.env" ] && grep -qx "VM_PREP_VERSION=$PREP_VERSION" "$CACHE/vm.env"; then
	exit 0
fi
rm -f "$CACHE/vm.env"

# kernel_abi: the ABI linux-image-amd64 depends on (6.1.0-57-amd64)
kernel_abi() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*-amd64\)$/\1/p' | head -1
}
KVER=${VM_KVER:-$(kernel_abi)}
if [ -z "$KVER" ]; then
	apt-get update >/dev/null 2>&1 || true
	KVER=$(kernel_abi)
fi
[ -n "$KVER" ] || die "no linux-image-amd64 in apt's lists; set VM_KVER"
KDIR=$CACHE/kernel-$KVER
MODROOT=$KDIR/lib/modules/$KVER

# fetch_kernel: the package, unpacked into KDIR (the -unsigned one has the same
# kernel without the signature; either will do)
fetch_kernel() {
	local dl=$CACHE/dl deb
	rm -rf "$dl" "$KDIR"
	mkdir -p "$dl"
	log "apt-get download linux-image-$KVER"
	(cd "$dl" && { apt-get download "linux-image-$KVER-unsigned" ||
		apt-get download "linux-image-$KVER"; }) >"$CACHE/download.log" 2>&1 ||
		die "apt-get download failed: $(tail -3 "$CACHE/download.log")"
	deb=$(ls "$dl"/*.deb)
	dpkg -x "$deb" "$KDIR.part"
	mv "$KDIR.part" "$KDIR"
	rm -rf "$dl" "$CACHE/download.log"
}
[ -f "$MODROOT/modules.order" ] || fetch_kernel
# the modules.dep of the full tree, to find each module's file and dependencies
[ -f "$MODROOT/modules.dep" ] || "$BB" depmod -b "$KDIR" "$KVER"

# module_closure NAME...: the module files (relative to MODROOT) of NAMEs and
# of what they depend on; names built into this kernel have no file
declare -A taken=()
module_files=()
add_file() {
	local f=$1 dep
	[ -z "${taken[$f]:-}" ] || return 0
	taken[$f]=1
	for dep in $(sed -n "s|^$f: *||p" "$MODROOT/modules.dep"); do
		add_file "$dep"
	done
	module_files+=("$f")
}
for m in $MODULES; do
	f=$(grep -E "(^|/)$m\.ko(\.xz|\.zst)?:" "$MODROOT/modules.dep" | cut -d: -f1 | head -1 || true)
	if [ -z "$f" ]; then
		grep -qE "/$m\.ko" "$MODROOT/modules.builtin" || die "no module $m in $KVER"
		continue
	fi
	add_file "$f"
done

# vmlinux_of VMLINUZ OUT: the kernel inside a bzImage, uncompressed: the
# payload starts at the first magic of its compressor (the decompressors stop
# at the payload's end and complain of what follows, hence the check of the
# ELF magic instead of their status)
vmlinux_of() {
	local magic tool off
	for magic in '\3757zXZ:xz' '\050\265\057\375:zstd' '\037\213\010:gzip'; do
		tool=${magic##*:}
		command -v "$tool" >/dev/null || continue
		off=$(LC_ALL=C grep -obUa "$(printf "${magic%:*}")" "$1" | head -1 | cut -d: -f1)
		[ -n "$off" ] || continue
		tail -c +$((off + 1)) "$1" | "$tool" -dc 2>/dev/null >"$2.part" || true
		if [ "$(head -c 4 "$2.part" | od -An -c | tr -d ' ')" = '177ELF' ]; then
			mv "$2.part" "$2"
			return 0
		fi
	done
	rm -f "$2.part"
	return 1
}
VMLINUX=$KDIR/vmlinux-$KVER
[ -f "$VMLINUX" ] || vmlinux_of "$KDIR/boot/vmlinuz-$KVER" "$VMLINUX" ||
	{ log "vmlinuz-$KVER: no compressed ELF found, VM_VMLINUX left empty"; VMLINUX=; }

# the base initramfs
S=$(mktemp -d "$CACHE/stage.XXXXXX")
trap 'rm -rf "$S"' EXIT
mkdir -p "$S"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,mnt,newroot,etc,vm}
cp "$BB" "$S/bin/busybox"
for a in $("$BB" --list); do
	[ "$a" = busybox ] || ln -s busybox "$S/bin/$a"
done
for f in "${module_files[@]}"; do
	d=$S/lib/modules/$KVER/$(dirname "$f")
	mkdir -p "$d"
	case $f in
	*.xz) xz -dc "$MODROOT/$f" >"$d/$(basename "$f" .xz)" ;;
	*.zst) zstd -qdc "$MODROOT/$f" >"$d/$(basename "$f" .zst)" ;;
	*) cp "$MODROOT/$f" "$d/" ;;
	esac
done
cp "$MODROOT/modules.builtin" "$S/lib/modules/$KVER/"
"$BB" depmod -b "$S" "$KVER"
# written aside and renamed: a test of an older checkout may be booting the
# one there
(cd "$S" && find . | LC_ALL=C sort | "$BB" cpio -o -H newc 2>/dev/null | gzip -6) \
	>"$CACHE/base-$KVER.cpio.gz.part"
mv "$CACHE/base-$KVER.cpio.gz.part" "$CACHE/base-$KVER.cpio.gz"

cat >"$CACHE/vm.env.part" <<EOF
VM_PREP_VERSION=$PREP_VERSION
VM_KVER=$KVER
VM_KERNEL=$KDIR/boot/vmlinuz-$KVER
VM_VMLINUX=$VMLINUX
VM_KCONFIG=$KDIR/boot/config-$KVER
VM_INITRD=$CACHE/base-$KVER.cpio.gz
EOF
mv "$CACHE/vm.env.part" "$CACHE/vm.env"
# kernels of other ABIs (linux-image-amd64 moved on) are not used any more
for d in "$CACHE"/kernel-*; do
	[ "$d" = "$KDIR" ] || rm -rf "$d"
done
find "$CACHE" -maxdepth 1 -name 'base-*.cpio.gz' ! -name "base-$KVER.cpio.gz" -delete
log "kernel $KVER, ${#module_files[@]} modules, initramfs" \
	"$(du -h "$CACHE/base-$KVER.cpio.gz" | cut -f1) in $CACHE"
