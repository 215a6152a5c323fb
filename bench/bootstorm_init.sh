#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bootstorm_init.sh - /init of a bootstorm.sh guest (busybox sh, in the VM
# harness's base initramfs): a netboot client's initramfs.  It loads the
# network card's and the NFS client's modules (the root holds no kernel
# modules), brings up eth0, mounts the root over NFSv3 and hands over to
# systemd.  The kernel command line gives bs.ip=ADDR/PREFIX, bs.server=ADDR,
# bs.export=PATH and bs.opts=MOUNT_OPTIONS.  The guest's uptime at the
# switch_root goes to the second serial port as "@@BS_SWITCH SECONDS@@"; a
# failure goes to the console as "@@BS_FAIL=WHY@@" and the guest powers off.
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() {
	echo "@@BS_FAIL=$*@@" >/dev/console
	poweroff -f
	sleep 10
}
for w in $(cat /proc/cmdline); do
	case $w in
	bs.ip=*) IP=${w#bs.ip=} ;;
	bs.server=*) SERVER=${w#bs.server=} ;;
	bs.export=*) EXPORT=${w#bs.export=} ;;
	bs.opts=*) OPTS=${w#bs.opts=} ;;
	esac
done
[ -n "${IP:-}" ] && [ -n "${SERVER:-}" ] && [ -n "${EXPORT:-}" ] || fail "no bs.ip, bs.server or bs.export"
for m in virtio_pci virtio_net nfsv3; do
	modprobe $m || fail "modprobe $m"
done
i=0
until [ -e /sys/class/net/eth0 ]; do
	i=$((i + 1))
	[ $i -le 200 ] || fail "no eth0"
	usleep 50000
done
ip link set lo up
ip addr add "$IP" dev eth0
ip link set eth0 up
# the server listens before any guest starts; retries cover a slow link
i=0
until err=$(mount -t nfs -o "$OPTS,addr=$SERVER,mountaddr=$SERVER" "$SERVER:$EXPORT" /newroot 2>&1); do
	i=$((i + 1))
	[ $i -le 30 ] || fail "mount $SERVER:$EXPORT: $err"
	sleep 1
done
# (/sbin/init is an absolute link, meaningful only after the switch)
[ -x /newroot/lib/systemd/systemd ] || fail "no /lib/systemd/systemd in $SERVER:$EXPORT"
stty -F /dev/ttyS1 raw -echo
echo "@@BS_SWITCH $(cut -d' ' -f1 /proc/uptime)@@" >/dev/ttyS1
# systemd mounts these itself
umount /dev /sys /proc
exec switch_root /newroot /sbin/init
