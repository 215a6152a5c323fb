#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kvm_crash.sh UNION_NFSD CRASH_CLIENT - issue 4's durability promise
# against an OS crash: handles (and COMMITted / FILE_SYNC data, and the results
# of namespace operations) survive a kernel crash that syncs nothing.
#
# union-nfsd runs inside a VM (qemu; the Debian kernel of tests/vm) on an ext4
# disk image that holds its layers and its state dir; the client
# (crash_client.c, libnfs raw calls) runs in the same VM over loopback.  The
# initramfs is tests/vm's base (busybox, the modules of the virtio disk and
# ext4) plus guest_crash.sh as /init and the two programs with the shared
# libraries ldd lists (copied to the same paths, so the programs' own loader
# runs them).  Three boots of one disk:
#   1. CREATE + WRITE UNSTABLE + COMMIT (created); WRITE FILE_SYNC into a
#      lower file, its copy-up (copyup); LOOKUP of a deep lower file in a
#      merged tree no call touched before, and 1.5 s of nothing, so only the
#      node table's syncer (period 1 s) can have made those handles durable
#      (deep, deepdir); then the kernel is crashed (sysrq c: no sync, the
#      guest's page cache is lost);
#   2. every saved handle: GETATTR NFS3_OK, same fileid, size and mode, READ
#      gives the saved bytes, LOOKUP by path finds the same fileid; then CREATE,
#      MKDIR, SYMLINK, LINK, RENAME, REMOVE, RMDIR and SETATTR back to back
#      (LINK, RENAME and SETATTR of lower objects: copy-ups), and a crash within
#      milliseconds of the last reply;
#   3. everything saved in boots 1 and 2 checked again (a renamed or removed
#      name must be NOENT); union-nfsd stops with SIGTERM and must exit 0.
# Boots 2 and 3 must see ext4 recover its journal as it mounts the disk (so the
# crash left it unclean).
#
# With KVMC_NOJOURNAL=1 the disk is ext4 without a journal (mkfs -O
# ^has_journal), where an fsync writes only its own inode and blocks: a new
# file's inode is durable only if it was fsynced itself (union/dir.c, step 7).
# After each crash the host runs `e2fsck -fy` on the image, as a system boots
# such a filesystem (fstab pass 2): the crash must have left it not clean, and
# fsck repairs what the kernel left half-written (bitmaps, counts), while an
# entry that names an inode never written is cleared, so a result the server
# answered for but did not make durable shows as LOST in the next boot's
# checks.  Without the repair a later boot could allocate blocks the lost
# bitmaps show free and damage files that were durable.  The guest's lines reach
# this script through the serial console; each boot's checks and SAVE lines are
# printed.
#
# Env:
#   KVMC_NOSYNC=1  run union-nfsd with the test-only UNION_NFSD_TEST_NO_SYNC=1
#                  (the node table is never flushed): the checks must then
#                  report lost handles and the test fail - a by-hand check
#                  that this test can fail, not part of ctest;
#   KVMC_NOJOURNAL=1  the disk without a journal, checked by e2fsck -fy after
#                  each crash (above; test integration/kvm_crash_nojournal);
#   KVMC_KEEP=1    keep the temp dir (disk image, console logs).
# Exit: 0 passed, 1 failed, 77 skipped (no root, qemu or mkfs.ext4).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_crash.sh UNION_NFSD CRASH_CLIENT}")
CLIENT=$(realpath "${2:?usage: kvm_crash.sh UNION_NFSD CRASH_CLIENT}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root (the kernel cache, files owned by root on the disk)"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed"
command -v mkfs.ext4 >/dev/null || skip "mkfs.ext4 not installed (e2fsprogs)"
NOJOURNAL=${KVMC_NOJOURNAL:-0}
if [ "$NOJOURNAL" = 1 ]; then
	for p in e2fsck dumpe2fs; do
		command -v $p >/dev/null || skip "$p not installed (e2fsprogs)"
	done
fi
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] || skip "$BUSYBOX missing (busybox-static)"

vm_test_init kvmcrash 540 "${KVMC_KEEP:-0}" # ctest TIMEOUT is 600
t0=$SECONDS

# ---- the disk: two lower layers merged down to a deep directory, an upper, a
# work dir and the state dir, made into an ext4 image on the host ---------------
# (d1/... for the created file, e1/... for the deep lookup)
F=$T/fs
mkdir -p "$F/upper" "$F/work" "$F/state"
for top in d e; do
	d=
	for lvl in 1 2 3 4 5; do
		d=${d:+$d/}$top$lvl
		mkdir -p "$F/l1/$d" "$F/l2/$d"
		echo "top $d" >"$F/l1/$d/top.txt"
		echo "bottom $d" >"$F/l2/$d/bottom.txt"
	done
done
head -c 200000 /dev/urandom >"$F/l2/e1/e2/e3/e4/e5/deep.bin"
head -c 50000 /dev/urandom >"$F/l2/d1/d2/copy.bin"
echo "to be removed" >"$F/l1/gone.txt"
echo "to be renamed" >"$F/l1/old.txt"
echo "mode 0644 until SETATTR" >"$F/l2/chmod.txt"
chmod 0644 "$F/l2/chmod.txt"
echo "linked by LINK" >"$F/l2/linksrc.txt"
mkdir "$F/l2/rmme"
mkfs_opts=()
[ "$NOJOURNAL" = 1 ] && mkfs_opts=(-O ^has_journal)
mkfs.ext4 -q -F -L crash "${mkfs_opts[@]}" -d "$F" "$T/disk.img" 64M >/dev/null

# ---- the initramfs part of ours -------------------------------------------------------
R=$T/rd
mkdir -p "$R/crash"
install -m 0755 "$HERE/guest_crash.sh" "$R/init"
cp "$UNION_NFSD" "$R/crash/union-nfsd"
cp "$CLIENT" "$R/crash/crash_client"
cp "$HERE/lsan.supp" "$R/crash/lsan.supp"
# the shared libraries and the loader, at the paths ldd names
for lib in $(for b in "$UNION_NFSD" "$CLIENT"; do
	ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u); do
	mkdir -p "$R$(dirname "$lib")"
	cp -L "$lib" "$R$lib"
done
cpio_of() { (cd "$1" && find . | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1); }
cpio_of "$R" >"$T/crash.cpio.gz"
echo "disk and initramfs ready after $((SECONDS - t0)) s:" \
	"$(find "$R/lib" "$R/lib64" "$R/usr" -type f 2>/dev/null | wc -l) libraries"

# ---- the boots -----------------------------------------------------------------------------
: >"$T/saved"
fail() {
	echo "FAIL: $*"
	[ -f "$T/console-$phase.log" ] && {
		echo "--- console of boot $phase (last 40 lines):"
		tr -d '\r' <"$T/console-$phase.log" | tail -40
	}
	exit 1
}

# boot PHASE CRASHARG: one boot of the disk; its CRASH lines in $T/out-PHASE
boot() {
	local P=$T/ph$1 rc=0
	mkdir -p "$P/crash"
	printf 'PHASE=%s\nCRASH=%s\nNOSYNC=%s\n' "$1" "$2" "${KVMC_NOSYNC:-0}" >"$P/crash/env"
	cp "$T/saved" "$P/crash/saved"
	cpio_of "$P" >"$T/ph$1.cpio.gz"
	cat "$VM_INITRD" "$T/crash.cpio.gz" "$T/ph$1.cpio.gz" >"$T/initrd-$1"
	timeout -k 5 300 qemu-system-x86_64 "${VM_QEMU[@]}" -m 512 -initrd "$T/initrd-$1" \
		-append "console=ttyS0 loglevel=5 printk.devkmsg=on panic=-1 mitigations=off no_timer_check random.trust_cpu=on" \
		-serial "file:$T/console-$1.log" \
		-drive "file=$T/disk.img,format=raw,if=virtio,cache=writeback" \
		</dev/null >"$T/qemu-$1.out" 2>&1 || rc=$?
	tr -d '\r' <"$T/console-$1.log" | grep -o 'CRASH .*' >"$T/out-$1" || true
	sed 's/^CRASH /  /' "$T/out-$1"
	[ "$rc" = 0 ] || fail "qemu exited $rc in boot $1 ($(head -c 300 "$T/qemu-$1.out"))"
}

# checks PHASE N: boot PHASE checked N saved objects, all ok
checks() {
	local good lost
	good=$(grep -c '^CRASH CHECK [^ ]* ok' "$T/out-$1" || true)
	lost=$(grep -c '^CRASH CHECK [^ ]* LOST' "$T/out-$1" || true)
	echo "boot $1: $good of $2 saved objects and names as promised, $lost lost"
	[ "$good" = "$2" ] && [ "$lost" = 0 ] || fail "boot $1: $lost lost, $good of $2 ok"
}

# crashed PHASE: the client got to the crash with no failure, and the kernel panicked
crashed() {
	grep -q '^CRASH FAIL' "$T/out-$1" && fail "boot $1: the client failed"
	grep -q '^CRASH STEP crashing the kernel now' "$T/out-$1" ||
		fail "boot $1 never reached its crash"
	grep -q 'Kernel panic - not syncing: sysrq triggered crash' "$T/console-$1.log" ||
		fail "boot $1: no panic from sysrq c on the console"
	grep '^CRASH SAVE ' "$T/out-$1" | sed 's/^CRASH //' >>"$T/saved"
	echo "boot $1: crashed after $(grep -c '^CRASH SAVE ' "$T/out-$1") promises"
}

# fsck_disk PHASE: the journal-less disk after boot PHASE's crash: not clean,
# then repaired by e2fsck -fy (what it fixed is printed)
fsck_disk() {
	local state rc=0
	state=$(dumpe2fs -h "$T/disk.img" 2>/dev/null | sed -n 's/^Filesystem state: *//p')
	echo "disk after the crash of boot $1: state '$state'"
	[ "$state" = "not clean" ] || fail "boot $1: the crash left the disk '$state'"
	e2fsck -fy "$T/disk.img" >"$T/fsck-$1.log" 2>&1 || rc=$?
	grep -vE '^(Pass [1-5]|e2fsck [0-9]|crash: [0-9]+/[0-9]+ files)' "$T/fsck-$1.log" |
		sed 's/^/  fsck: /' | head -30
	[ "$rc" -lt 4 ] || fail "boot $1: e2fsck -fy exited $rc"
}

[ "$NOJOURNAL" = 1 ] && echo "NOTE: KVMC_NOJOURNAL=1: ext4 without a journal, e2fsck -fy after each crash"
[ "${KVMC_NOSYNC:-0}" = 1 ] &&
	echo "NOTE: KVMC_NOSYNC=1: union-nfsd never flushes its node table; expect lost handles"
for phase in 1 2 3; do
	tb=$SECONDS
	echo "boot $phase:"
	[ $phase -gt 1 ] && [ "$NOJOURNAL" = 1 ] && fsck_disk $((phase - 1))
	if [ $phase -lt 3 ]; then boot $phase --crash; else boot $phase ""; fi
	echo "boot $phase took $((SECONDS - tb)) s"
	# the crash was real: ext4 replayed its journal when it mounted the disk
	# again (without one: fsck_disk found the disk not clean)
	[ $phase -gt 1 ] && [ "$NOJOURNAL" != 1 ] && {
		grep -q '^CRASH kernel: .*EXT4-fs (vda): recovery complete' "$T/out-$phase" ||
			fail "boot $phase: ext4 did not recover its journal"
	}
	[ $phase -gt 1 ] && checks $phase "$(wc -l <"$T/saved")"
	[ $phase -lt 3 ] && crashed $phase
done
grep -q '^CRASH SERVER EXIT 0$' "$T/out-3" || fail "union-nfsd did not exit 0 on SIGTERM in boot 3"
grep -q '^CRASH CLIENT EXIT 0$' "$T/out-3" || fail "crash_client failed in boot 3"
echo "PASS: $(wc -l <"$T/saved") handles and names survived two kernel crashes;" \
	"total $((SECONDS - t0)) s"
