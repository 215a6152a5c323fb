#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# guest_powercut.sh - /init of the VM of kvm_powercut.sh (busybox sh, from the
# base initramfs of tests/vm, whose modules it loads).
#
# The kernel command line says what this boot does: pc.fs (ext4 or xfs),
# pc.boot, pc.mode (kill: load until the host kills qemu; sysrq: load, then
# the client crashes the kernel after pc.cut ms; check: the last boot, no
# load, and a clean stop), pc.from (where the ack log's last known snapshot
# starts), pc.pool and pc.claims (pool files, and how many this boot may copy
# up), pc.seed, and pc.nosync=1 or pc.lazy=1 for the test-only
# UNION_NFSD_TEST_NO_SYNC or UNION_NFSD_TEST_LAZY_STABLE.
#
# Mounts the test disk (/dev/vda: layers, work dir, state dir) on /disk,
# counts what the last cut left in the work dir, starts union-nfsd on
# loopback and runs powercut_client with the ack log on /dev/vdb.  Every line
# for the host starts with "PC " and goes through /dev/kmsg, so it reaches the
# serial console in order with the kernel's, also just before a panic.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp

say() { echo "PC $*" >/dev/kmsg; }
up() { cut -d' ' -f1 /proc/uptime; }
show() { while IFS= read -r l; do say "$1: $l"; done <"$2"; }
off() {
	say "$*"
	sync
	poweroff -f
	echo o >/proc/sysrq-trigger
	sleep 10
}

T0=$(up)
FS=ext4 BOOT=0 MODE=check CUT=0 FROM=0 POOL=0 CLAIMS=0 SEED=1 NOSYNC=0 LAZY=0
for w in $(cat /proc/cmdline); do
	case $w in
	pc.fs=*) FS=${w#*=} ;;
	pc.boot=*) BOOT=${w#*=} ;;
	pc.mode=*) MODE=${w#*=} ;;
	pc.cut=*) CUT=${w#*=} ;;
	pc.from=*) FROM=${w#*=} ;;
	pc.pool=*) POOL=${w#*=} ;;
	pc.claims=*) CLAIMS=${w#*=} ;;
	pc.seed=*) SEED=${w#*=} ;;
	pc.nosync=*) NOSYNC=${w#*=} ;;
	pc.lazy=*) LAZY=${w#*=} ;;
	esac
done

for m in virtio_pci virtio_blk crc32c_generic $FS; do
	modprobe $m || off "FAIL modprobe $m"
done
i=0
while [ ! -b /dev/vda ] || [ ! -b /dev/vdb ]; do
	i=$((i + 1))
	[ $i -gt 200 ] && off "FAIL no /dev/vda or /dev/vdb"
	usleep 50000
done
say "STEP init at $T0 s, modules loaded at $(up) s"
mkdir -p /disk
mount -t "$FS" /dev/vda /disk || off "FAIL mount -t $FS /dev/vda"
# what the filesystem said (journal or log recovery after a cut)
dmesg | grep -E 'EXT4-fs \(vda\)|XFS \(vda\)' | while IFS= read -r l; do say "kernel: $l"; done
T1=$(up)
say "WORK before start-up: $(ls -A /disk/work/work 2>/dev/null | wc -l) entries"
ip link set lo up

[ "$NOSYNC" = 1 ] && export UNION_NFSD_TEST_NO_SYNC=1
[ "$LAZY" = 1 ] && export UNION_NFSD_TEST_LAZY_STABLE=1
export LSAN_OPTIONS=suppressions=/pc/lsan.supp
/pc/union-nfsd --lowerdir=/disk/l1:/disk/l2 --upperdir=/disk/upper \
	--workdir=/disk/work --state-dir=/disk/state --nfs-port=2049 \
	--mount-port=20048 --bind=127.0.0.1 --foreground --no-rpcbind --no-portmapper \
	>/tmp/srv.out 2>/tmp/srv.err &
SRV=$!
i=0
until grep -qs '^listening ' /tmp/srv.out; do
	i=$((i + 1))
	if [ $i -gt 1200 ] || ! kill -0 $SRV 2>/dev/null; then
		show srv /tmp/srv.err
		off "FAIL union-nfsd did not start"
	fi
	usleep 50000
done
say "STEP boot $BOOT ($MODE): mounted at $T1 s, union-nfsd up at $(up) s"

PC_WORKDIR=/disk/work/work /pc/powercut_client run "$BOOT" /dev/vdb "$FROM" "$POOL" \
	"$CLAIMS" "$MODE" "$CUT" "$SEED" >/dev/kmsg 2>&1
rc=$?
# check mode (or a load that failed)
kill -TERM $SRV
wait $SRV
st=$?
[ $st = 0 ] || show srv /tmp/srv.err
say "CLIENT EXIT $rc"
say "SERVER EXIT $st"
umount /disk || say "FAIL umount /disk"
off "DONE at $(up) s"
