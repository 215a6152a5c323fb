#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# systemd_init.sh - /init of systemd_vm.sh's guest (busybox sh, in tests/vm's
# base initramfs).  Debian's kernel has virtio, ext4 and NFS as modules and
# the Debian root on the disk holds none of them: this loads them from the
# initramfs (the NFS client too, for the in-guest mount), mounts the disk as
# the root and hands over to systemd as PID 1.  A failure here is
# "@@VM_FAIL=WHY@@" on the console, and the guest powers off.
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() {
	echo "@@VM_FAIL=$*@@" >/dev/console
	poweroff -f
	sleep 10
}
for m in virtio_pci virtio_blk crc32c_generic ext4 nfsv3; do
	modprobe $m || fail "modprobe $m"
done
i=0
until [ -b /dev/vda ]; do
	i=$((i + 1))
	[ $i -le 200 ] || fail "no /dev/vda"
	usleep 50000
done
mount -t ext4 -o rw /dev/vda /newroot || fail "mount /dev/vda"
[ -x /newroot/lib/systemd/systemd ] || fail "no /lib/systemd/systemd on /dev/vda"
echo "vm-init: root on /dev/vda, starting systemd at $(cut -d' ' -f1 /proc/uptime) s" >/dev/console
# systemd mounts these itself
umount /dev /sys /proc
exec switch_root /newroot /lib/systemd/systemd
