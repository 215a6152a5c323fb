#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# init.sh - /init of a guest of tests/vm (busybox sh, from the base initramfs).
#
# The kernel command line gives the network: vm.ip=ADDR/PREFIX (this guest's
# eth0) and vm.server=ADDR (the NFS server, on the host's bridge).  The guest's
# own cpio (lib.sh's vm_guest_start) adds /vm/env (VM_GUEST, VM_PORT, VM_MODE=
# script or root, VM_EXPORT, VM_OPTS: the kernel's NFS mount options),
# /vm/script and /vm/files.
#
#   script mode  the export is mounted on /mnt; /vm/script runs under busybox
#                sh with cwd /mnt
#   root mode    the export is mounted as the root (a Debian root over NFS):
#                /vm is copied to a tmpfs on its /run (nothing is written to
#                the export), and after switch_root the script runs under the
#                root's own /bin/sh with cwd /
# The script's stdout and stderr go to ttyS1 (raw: the host gets its bytes as
# they are); ttyS2 is a line from the host (vm_guest_send), as $VM_IN.  Its
# exit status goes to the console (ttyS0) as "@@VM_RC=N@@", a failure of this
# init as "@@VM_FAIL=WHY@@", and the guest powers off.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp

say() { echo "vm-init: $*" >/dev/console; }
up() { cut -d' ' -f1 /proc/uptime; }
off() {
	sync
	poweroff -f
	echo o >/proc/sysrq-trigger
	sleep 10
}
fail() {
	echo "@@VM_FAIL=$*@@" >/dev/console
	off
}

. /vm/env
for w in $(cat /proc/cmdline); do
	case $w in
	vm.ip=*) IP=${w#vm.ip=} ;;
	vm.server=*) SERVER=${w#vm.server=} ;;
	esac
done
[ -n "${IP:-}" ] && [ -n "${SERVER:-}" ] || fail "no vm.ip= or vm.server= on the command line"

for m in virtio_pci virtio_net nfsv3; do
	modprobe $m || fail "modprobe $m"
done
stty -F /dev/ttyS1 raw -echo
stty -F /dev/ttyS2 raw -echo

i=0
until [ -e /sys/class/net/eth0 ]; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "no eth0"
	usleep 50000
done
ip link set lo up
ip addr add "$IP" dev eth0
ip link set eth0 up
say "guest $VM_GUEST: eth0 $IP at $(up) s"

MP=/mnt
[ "$VM_MODE" = root ] && MP=/newroot
# the server listens before any guest starts; a few retries cover a slow link
i=0
until err=$(mount -t nfs -o "$VM_OPTS" "$SERVER:$VM_EXPORT" $MP 2>&1); do
	i=$((i + 1))
	[ $i -le 20 ] || fail "mount $SERVER:$VM_EXPORT ($VM_OPTS): $err"
	sleep 1
done
say "mounted $SERVER:$VM_EXPORT on $MP at $(up) s"

if [ "$VM_MODE" != root ]; then
	export VM_FILES=/vm/files VM_IN=/dev/ttyS2 VM_GUEST VM_PORT \
		VM_SERVER="$SERVER" NFS_MNT=/mnt
	(cd /mnt && exec sh /vm/script) </dev/null >/dev/ttyS1 2>&1
	rc=$?
	say "script exited $rc at $(up) s"
	cd /
	umount /mnt || say "umount /mnt failed"
	echo "@@VM_RC=$rc@@" >/dev/console
	off
fi

for d in proc sys dev run; do
	[ -d /newroot/$d ] || fail "the exported root has no /$d"
done
mount -t tmpfs -o mode=0755 tmpfs /newroot/run
cp -a /vm /newroot/run/vm
cat >/newroot/run/vm/stage2 <<'EOF'
# stage2 - after switch_root, under the exported root's /bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
. /run/vm/env
export VM_GUEST VM_PORT VM_FILES=/run/vm/files VM_IN=/dev/ttyS2 NFS_MNT=/
mount -t tmpfs tmpfs /tmp
(cd / && exec /bin/sh /run/vm/script) </dev/null >/dev/ttyS1 2>&1
rc=$?
echo "@@VM_RC=$rc@@" >/dev/console
sync
echo o >/proc/sysrq-trigger
sleep 10
EOF
say "switch_root to the NFS root at $(up) s"
umount /tmp
for d in dev sys proc; do
	mount --move /$d /newroot/$d
done
exec switch_root /newroot /bin/sh /run/vm/stage2
