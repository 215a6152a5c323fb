#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kvm_powercut.sh FS UNION_NFSD POWERCUT_CLIENT - power cuts at random moments
# under load (issue 29): after each cut, every change union-nfsd acknowledged
# is there, on FS (ext4 or xfs).
#
# union-nfsd runs inside a VM (qemu; the Debian kernel of tests/vm, booted
# uncompressed) whose first disk holds two lower layers, the upper, the work
# dir and the state dir; its client (powercut_client, libnfs, four workers on
# their own connections) runs in the same VM over loopback and logs each call
# it sends and each reply it gets on a second disk (the ack log: O_DIRECT,
# one record at a time, a record only after what it records).  Each boot is
# the check of the cut before it and the load of the next one:
#   1. the disk is mounted (the journal or log replayed), the work dir's
#      leftovers counted, union-nfsd started; its work dir must then be
#      empty;
#   2. powercut_client checks what the log says was acknowledged since the
#      last check: every name created, renamed, linked or removed, with its
#      fileid; every handle a reply gave for a live object (GETATTR: NFS3_OK,
#      same fileid); every FILE_SYNC and COMMITted byte; pool files copied
#      up hold the whole lower file with the writes over it, never a half
#      copy-up; each file takes a COMMIT through its handle; the write
#      verifier differs from every earlier boot's.  A call in flight at the
#      cut may have happened or not, as a whole (powercut_check.c); what it
#      found becomes the next snapshot in the log;
#   3. the load: CREATE, WRITE FILE_SYNC, WRITE UNSTABLE + COMMIT, RENAME
#      (to free names and over files, across directories), REMOVE, LINK,
#      SETATTR, and copy-ups of lower pool files (256 KiB - 2 MiB) by a
#      WRITE, RENAME, LINK or SETATTR of them;
#   4. the cut, at a random moment of the load: odd cuts kill qemu (SIGKILL,
#      the disk cache=none: only the guest's page cache is lost), one in six
#      of them at a random moment of the boot or the check instead; even
#      cuts crash the kernel from inside (sysrq c, nothing synced).
# A last boot checks the last cut and stops union-nfsd (it must exit 0); the
# image must then pass fsck (e2fsck -fn, xfs_repair -n), and most boots must
# have replayed a journal or log.  The test fails on any loss or stale handle
# (a file split into two fileids by a LINK counts as one), a failed call, a
# work dir not emptied, a verifier seen before, or a boot that did not get as
# far as it should.  ~6 s a boot under TCG on an idle 2-core machine.
#
# Env:
#   KVMP_CUTS=N      cuts (default 30; ctest runs 30 per filesystem)
#   KVMP_SEED=N      the random choices (printed; the same seed repeats the
#                    same cut modes and delays, not the same timing)
#   KVMP_LOAD_MS=N   a cut falls 50..N ms into the load (default 2500)
#   KVMP_NOSYNC=1    run union-nfsd with the test-only UNION_NFSD_TEST_NO_SYNC=1
#                    (the node table is never flushed): handles must then go
#                    stale and the test fail - a by-hand check that this test
#                    can fail, not part of ctest
#   KVMP_LAZY=1      run union-nfsd with the test-only UNION_NFSD_TEST_LAZY_STABLE=1
#                    (FILE_SYNC WRITEs answered before their data is synced):
#                    FILE_SYNC bytes must then be lost and the test fail (by
#                    hand, as KVMP_NOSYNC)
#   KVMP_ALLOW_INFLIGHT_STALE=1
#                    stale handles of the file of a call in flight at the cut
#                    (a RENAME or REMOVE that gave the file a new fileid, a
#                    LINK whose new name got one of its own: the identity bug
#                    of issue 29) are printed and counted but do not fail the
#                    test; any other stale handle still does
#   KVMP_KEEP=1      keep the temp dir (images, console logs)
# Exit: 0 passed, 1 failed, 77 skipped (no root, qemu, mkfs.FS or fsck).
set -euo pipefail
FS=${1:?usage: kvm_powercut.sh ext4|xfs UNION_NFSD POWERCUT_CLIENT}
UNION_NFSD=$(realpath "${2:?usage: kvm_powercut.sh FS UNION_NFSD POWERCUT_CLIENT}")
CLIENT=$(realpath "${3:?usage: kvm_powercut.sh FS UNION_NFSD POWERCUT_CLIENT}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"

case $FS in
ext4) TOOLS="mkfs.ext4 e2fsck" ;;
xfs) TOOLS="mkfs.xfs xfs_repair" ;;
*)
	echo "FAIL: unknown filesystem '$FS' (ext4 or xfs)"
	exit 1
	;;
esac
[ "$(id -u)" = 0 ] || skip "needs root (the kernel cache, files owned by root on the disk)"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed"
for t in $TOOLS; do
	command -v "$t" >/dev/null || skip "$t not installed"
done
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] || skip "$BUSYBOX missing (busybox-static)"

CUTS=${KVMP_CUTS:-30}
SEED=${KVMP_SEED:-$((RANDOM * 32768 + RANDOM))}
LOAD_MS=${KVMP_LOAD_MS:-2500}
CLAIMS=2             # copy-ups of pool files per boot
BOOT_S=240           # one boot, at most (software emulation, a busy host)
POOL=$((CLAIMS * (CUTS + 1) + 8))
# ctest's TIMEOUT is 1500; a long run gets 40 s a cut
vm_test_init "powercut-$FS" $((CUTS > 35 ? CUTS * 40 + 300 : 1440)) "${KVMP_KEEP:-0}"
RANDOM=$SEED
t0=$SECONDS
echo "kvm_powercut: $FS, $CUTS cuts, seed $SEED, cuts 50-$LOAD_MS ms into the load"
[ "${KVMP_NOSYNC:-0}" = 1 ] &&
	echo "NOTE: KVMP_NOSYNC=1: union-nfsd never flushes its node table; expect stale handles"
[ "${KVMP_LAZY:-0}" = 1 ] &&
	echo "NOTE: KVMP_LAZY=1: union-nfsd answers FILE_SYNC before the sync; expect lost data"

# ---- the disks: layers, work dir and state dir on one; the ack log -------------
# l2 (the lower) has the merged dir mg and the pool files; l1 a part of mg;
# the upper the upper-only dir up and verf.bin (the check's COMMIT)
F=$T/fs
mkdir -p "$F/l1/mg" "$F/l2/mg" "$F/l2/pool" "$F/upper/up" "$F/work" "$F/state"
echo "lower" >"$F/l2/mg/lower.txt"
echo "upper of the lowers" >"$F/l1/mg/top.txt"
: >"$F/upper/verf.bin"
"$CLIENT" mklower "$F/l2/pool" "$POOL"
SIZE_MB=$(($(du -sm "$F" | cut -f1) + 320))

# protofile DIR INDENT: DIR's tree in mkfs.xfs's prototype syntax (files,
# directories; root-owned, modes as they are)
protofile() {
	local e mode
	for e in "$1"/*; do
		[ -e "$e" ] || continue
		mode=$(stat -c %a "$e")
		if [ -d "$e" ]; then
			echo "$2$(basename "$e") d--$mode 0 0"
			protofile "$e" "$2  "
			echo "$2\$"
		else
			echo "$2$(basename "$e") ---$mode 0 0 $e"
		fi
	done
}
if [ "$FS" = ext4 ]; then
	mkfs.ext4 -q -F -L pc -d "$F" "$T/disk.img" "${SIZE_MB}M" >/dev/null
else
	{
		echo powercut
		echo "0 0"
		echo "d--755 0 0"
		protofile "$F" "  "
		echo "\$"
	} >"$T/proto"
	truncate -s "${SIZE_MB}M" "$T/disk.img"
	mkfs.xfs -q -f -L pc -p "$T/proto" "$T/disk.img" >/dev/null
fi
rm -rf "$F"
# about 1 MB of records a boot; sparse
truncate -s $((16 + 2 * (CUTS + 1)))M "$T/log.img"

# ---- the initramfs part of ours ------------------------------------------------------
R=$T/rd
mkdir -p "$R/pc"
install -m 0755 "$HERE/guest_powercut.sh" "$R/init"
# without their debug info: less for every boot to unpack
strip --strip-debug -o "$R/pc/union-nfsd" "$UNION_NFSD" 2>/dev/null || cp "$UNION_NFSD" "$R/pc/union-nfsd"
strip --strip-debug -o "$R/pc/powercut_client" "$CLIENT" 2>/dev/null || cp "$CLIENT" "$R/pc/powercut_client"
cp "$HERE/lsan.supp" "$R/pc/lsan.supp"
for lib in $(for b in "$UNION_NFSD" "$CLIENT"; do
	ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u); do
	mkdir -p "$R$(dirname "$lib")"
	cp -L "$lib" "$R$lib"
done
# uncompressed: the guest unpacks it at once, where gunzip under emulation
# would cost a second of every boot.  The kernel reads an uncompressed archive
# only from a 4-byte boundary, and skips the zeros that pad the gzip one to it.
cat "$VM_INITRD" >"$T/initrd"
head -c $(((4 - $(stat -c %s "$T/initrd") % 4) % 4)) /dev/zero >>"$T/initrd"
(cd "$R" && find . | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc 2>/dev/null) >>"$T/initrd"
rm -rf "$R"
# the qemu options of the harness with the uncompressed kernel (prepare.sh)
QEMU=() prev=
for a in "${VM_QEMU[@]}"; do
	[ "$prev" = -kernel ] && a=${VM_VMLINUX:-$VM_KERNEL}
	QEMU+=("$a")
	prev=$a
done
echo "disks ($SIZE_MB MB $FS, $POOL pool files) and initramfs ready after $((SECONDS - t0)) s"

# ---- the boots ---------------------------------------------------------------------------
FROM=0
QPID=
declare -A TOTAL=()
kill_qemu() {
	[ -z "$QPID" ] || { kill -KILL "$QPID" 2>/dev/null || true; wait "$QPID" 2>/dev/null || true; }
	QPID=
}
it_on_exit kill_qemu

fail() {
	echo "FAIL: $*"
	[ -f "$T/console-$boot.log" ] && {
		echo "--- console of boot $boot (last 40 lines):"
		tr -d '\r' <"$T/console-$boot.log" | tail -40
	}
	exit 1
}

# start_vm BOOT MODE CUT_MS: qemu in the background (QPID)
start_vm() {
	local append="console=ttyS0 loglevel=5 printk.devkmsg=on panic=-1 mitigations=off"
	append+=" no_timer_check"
	append+=" random.trust_cpu=on pc.fs=$FS pc.boot=$1 pc.mode=$2 pc.cut=$3 pc.from=$FROM"
	append+=" pc.pool=$POOL pc.claims=$CLAIMS pc.seed=$RANDOM$RANDOM pc.nosync=${KVMP_NOSYNC:-0}"
	append+=" pc.lazy=${KVMP_LAZY:-0}"
	qemu-system-x86_64 "${QEMU[@]}" -m 384 -initrd "$T/initrd" -append "$append" \
		-serial "file:$T/console-$1.log" \
		-drive "file=$T/disk.img,format=raw,if=virtio,cache=none" \
		-drive "file=$T/log.img,format=raw,if=virtio,cache=unsafe" \
		</dev/null >"$T/qemu-$1.out" 2>&1 &
	QPID=$!
}

# console BOOT: the guest's PC lines of boot BOOT
console() { tr -d '\r' 2>/dev/null <"$T/console-$1.log" | grep -ao 'PC .*' || true; }

# wait_for BOOT ERE: until a PC line of BOOT matches ERE; 1 if qemu ended first
wait_for() {
	local end=$((SECONDS + BOOT_S))
	while [ $SECONDS -lt $end ]; do
		console "$1" | grep -qE "$2" && return 0
		kill -0 "$QPID" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# wait_off: until qemu exits by itself (BOOT_S at most)
wait_off() {
	local end=$((SECONDS + BOOT_S))
	while kill -0 "$QPID" 2>/dev/null; do
		[ $SECONDS -lt $end ] || { kill_qemu; return 1; }
		sleep 0.1
	done
	wait "$QPID" 2>/dev/null || true
	QPID=
}

ms_sleep() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# tally BOOT: adds boot BOOT's RESULT counts to TOTAL, prints its findings
tally() {
	local l kv
	console "$1" | grep -E '^PC (LOSS|STALE|NEWID|SPLIT|HALFSTALE|RENEWED|FAIL)' | sed 's/^/  /' | head -40
	l=$(console "$1" | grep '^PC RESULT' | tail -1)
	[ -n "$l" ] || return 1
	# every failure, the load's too (the check's are in its fails)
	TOTAL[fails]=$((${TOTAL[fails]:-0} + $(console "$1" | grep -c '^PC FAIL' || true)))
	for kv in ${l#PC RESULT }; do
		case ${kv%%=*} in
		boot | verf | fails) ;;
		*) TOTAL[${kv%%=*}]=$((${TOTAL[${kv%%=*}]:-0} + ${kv#*=})) ;;
		esac
	done
	echo "  ${l#PC RESULT }"
}

# the end of boot BOOT's log: where the next one reads the log from
next_from() {
	local s
	s=$(console "$1" | sed -n 's/^PC SNAP \([0-9]*\)$/\1/p' | tail -1)
	[ -z "$s" ] || FROM=$s
}

recovered=0 kills=0 sysrqs=0 early=0 load_at=8
for ((boot = 1; boot <= CUTS + 1; boot++)); do
	tb=$SECONDS
	if [ $boot -gt "$CUTS" ]; then
		mode=check
	elif [ $((boot % 2)) = 1 ]; then
		mode="kill"
	else
		mode=sysrq
	fi
	cut=$((50 + RANDOM % (LOAD_MS - 49)))
	[ "$mode" = kill ] && [ $((RANDOM % 6)) = 0 ] && [ $boot -gt 1 ] && mode=early
	start_vm $boot "${mode/early/kill}" $cut
	case $mode in
	kill)
		wait_for $boot '^PC LOAD START' || fail "boot $boot: the load never started"
		load_at=$((SECONDS - tb))
		ms_sleep $cut
		kill_qemu
		kills=$((kills + 1))
		what="killed $cut ms into the load"
		;;
	early)
		cut=$((RANDOM % (load_at * 1000)))
		ms_sleep $cut
		kill_qemu
		early=$((early + 1))
		what="killed $cut ms after qemu started"
		;;
	sysrq)
		wait_off || fail "boot $boot: still running after $BOOT_S s"
		console $boot | grep -q '^PC CUT sysrq' && grep -aq 'sysrq triggered crash' "$T/console-$boot.log" ||
			fail "boot $boot: no crash by sysrq c"
		sysrqs=$((sysrqs + 1))
		what="crashed $cut ms into the load"
		;;
	check)
		wait_off || fail "boot $boot: still running after $BOOT_S s"
		what="checked, stopped"
		;;
	esac
	console $boot | grep -qE 'PC kernel: .*(EXT4-fs \(vda\): recovery complete|XFS \(vda\): Ending recovery)' &&
		recovered=$((recovered + 1))
	echo "boot $boot: $what after $((SECONDS - tb)) s"
	if ! tally $boot; then
		[ "$mode" = early ] || fail "boot $boot: no check result"
		console $boot | grep '^PC kernel' | sed 's/^/  /' || true
	fi
	next_from $boot
done

console $((CUTS + 1)) | grep -q '^PC SERVER EXIT 0$' || fail "union-nfsd did not exit 0 on SIGTERM"
# the cuts were real: most boots found a journal or a log to replay
[ $((recovered * 2)) -ge "$CUTS" ] || fail "only $recovered of $CUTS boots replayed a journal or log"
if [ "$FS" = ext4 ]; then
	e2fsck -fn "$T/disk.img" >"$T/fsck.log" 2>&1 || fail "e2fsck -fn: $(tail -5 "$T/fsck.log")"
else
	xfs_repair -n "$T/disk.img" >"$T/fsck.log" 2>&1 || fail "xfs_repair -n: $(tail -5 "$T/fsck.log")"
fi
echo "$FS: $CUTS cuts ($kills qemu kills in the load, $early in the boot or check," \
	"$sysrqs kernel crashes), $recovered boots replayed a journal or log"
echo "acknowledged calls checked: ${TOTAL[acked]:-0} (${TOTAL[synced]:-0} FILE_SYNC writes," \
	"${TOTAL[committed]:-0} COMMITs, ${TOTAL[names]:-0} name changes); in flight at a cut:" \
	"${TOTAL[inflight]:-0}, of which ${TOTAL[applied]:-0} name changes had happened"
echo "lost: ${TOTAL[lost]:-0}, stale handles: ${TOTAL[stale]:-0}" \
	"(${TOTAL[stale_inflight]:-0} of the file of the call in flight), files split by a LINK" \
	"in flight: ${TOTAL[split]:-0}, handles that take no change: ${TOTAL[halfstale]:-0}," \
	"renewed LOOKUP handles: ${TOTAL[renewed]:-0}, failed calls: ${TOTAL[fails]:-0}," \
	"work dir entries: ${TOTAL[work]:-0}"
# the stale handles by the call in flight
for ((b = 1; b <= CUTS + 1; b++)); do console $b; done | grep '^PC STALE' |
	sed -n 's/.*(the file of the \(.*\) in flight, which \(.*\))$/\1 in flight, which \2/p' |
	sort | uniq -c | sed 's/^ */  stale: /' || true
stale=${TOTAL[stale]:-0}
if [ "${KVMP_ALLOW_INFLIGHT_STALE:-0}" = 1 ]; then
	stale=$((stale - ${TOTAL[stale_inflight]:-0}))
	echo "NOTE: KVMP_ALLOW_INFLIGHT_STALE=1: ${TOTAL[stale_inflight]:-0} stale handles of" \
		"the file of a call in flight do not fail the test"
fi
split=${TOTAL[split]:-0}
[ "${KVMP_ALLOW_INFLIGHT_STALE:-0}" = 1 ] && split=0
bad=$((${TOTAL[lost]:-0} + stale + split + ${TOTAL[halfstale]:-0} + ${TOTAL[fails]:-0} + ${TOTAL[work]:-0}))
[ $bad = 0 ] || fail "$bad acknowledged changes lost, stale handles or failures"
echo "PASS: total $((SECONDS - t0)) s, $(((SECONDS - t0) / (CUTS + 1))) s a boot"
