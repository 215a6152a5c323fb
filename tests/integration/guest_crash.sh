#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# guest_crash.sh - /init of the VM of kvm_crash.sh (busybox sh, from the base
# initramfs of tests/vm, whose modules it loads).
#
# Loads the virtio disk and ext4 modules, mounts the test disk (/dev/vda) on
# /disk, starts union-nfsd on it on loopback (the layers and the state dir are
# on the disk), and runs crash_client for this boot's phase.  /crash/env says
# which (PHASE, CRASH=--crash or empty, NOSYNC=1 for the test-only switch);
# /crash/saved holds what earlier boots were told.  With --crash the client
# crashes the kernel after its last reply: nothing is synced or stopped.
# Otherwise union-nfsd is stopped with SIGTERM (its status is reported), the
# disk unmounted, and the VM powered off.
#
# Every line for the host starts with "CRASH " and goes through /dev/kmsg, so it
# reaches the serial console in order with the kernel's, also just before a
# panic.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp

say() { echo "CRASH $*" >/dev/kmsg; }
up() { cut -d' ' -f1 /proc/uptime; }
# report a file's lines (union-nfsd's log) on the console
show() { while IFS= read -r l; do say "$1: $l"; done <"$2"; }
off() {
	say "$*"
	sync
	poweroff -f
	echo o >/proc/sysrq-trigger
	sleep 10
}

. /crash/env
for m in virtio_pci virtio_blk crc32c_generic ext4; do
	modprobe $m || off "FAIL modprobe $m"
done
i=0
while [ ! -b /dev/vda ]; do
	i=$((i + 1))
	[ $i -gt 200 ] && off "FAIL no /dev/vda"
	usleep 50000
done
mkdir -p /disk
mount -t ext4 /dev/vda /disk || off "FAIL mount /dev/vda"
# what ext4 said (journal recovery after a crash) at a level the console skips
dmesg | grep 'EXT4-fs (vda)' | while IFS= read -r l; do say "kernel: $l"; done
ip link set lo up

[ "${NOSYNC:-0}" = 1 ] && export UNION_NFSD_TEST_NO_SYNC=1
export LSAN_OPTIONS=suppressions=/crash/lsan.supp
/crash/union-nfsd --lowerdir=/disk/l1:/disk/l2 --upperdir=/disk/upper \
	--workdir=/disk/work --state-dir=/disk/state --nfs-port=2049 \
	--mount-port=20048 --bind=127.0.0.1 --foreground --no-rpcbind --no-portmapper \
	>/tmp/srv.out 2>/tmp/srv.err &
SRV=$!
i=0
until grep -q '^listening ' /tmp/srv.out; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 $SRV 2>/dev/null; then
		show srv /tmp/srv.err
		off "FAIL union-nfsd did not start"
	fi
	usleep 50000
done
say "STEP phase $PHASE: union-nfsd up at $(up) s"

/crash/crash_client "$PHASE" 2049 20048 /crash/saved $CRASH >/dev/kmsg 2>&1
rc=$?
# only without --crash (or when the crash failed)
kill -TERM $SRV
wait $SRV
st=$?
[ $st = 0 ] || show srv /tmp/srv.err
say "CLIENT EXIT $rc"
say "SERVER EXIT $st"
umount /disk || say "FAIL umount /disk"
off "DONE at $(up) s"
