# SPDX-License-Identifier: Apache-2.0
# guest_locks.sh - run by both guests of kvm_locks.sh at once (busybox sh).
#
#   1. unpacks $VM_FILES/tools.tar (rpcbind, rpcinfo, rpc.statd, sm-notify
#      and sqlite3 of the host, with their libraries) over the initramfs.
#      With a disk (/dev/vda, guest 1), /var/lib/nfs is on it: the status
#      monitor's state number and the hosts it watches survive a reset, as
#      on a client with a disk.  Starts rpcbind, sm-notify (which tells the
#      hosts recorded before a reset that this one restarted: the server then
#      frees this guest's old locks) and rpc.statd.
#   2. mounts the export again on /mnt WITHOUT nolock and without ports (the
#      kernel asks the server's portmapper for them): the harness's own
#      mount has nolock; prints "agent READY" (lock_agent's first line)
#   3. then runs the host's lines, one at a time:
#        agent    lock_agent in /mnt on the host's lines, until its "quit"
#        sqlite   sqlite3 adds 1 to the counter in counter.db 1,000 times, one
#                 transaction each: "sqlite done ..."
#        remount  /mnt unmounted and mounted again, no ports: "remount OK"
#        end      the script ends
# A failed step prints "FAIL: guest N: ..." and ends the script with 1.
set -u
me=$VM_GUEST
fail() {
	echo "FAIL: guest $me: $*"
	exit 1
}
up() { cut -d' ' -f1 /proc/uptime; }
# the host's lines; opened now, as the port drops what came before
exec 3<"$VM_IN"

cd / && umount /mnt || fail "cannot unmount the harness's nolock mount"
tar -xf "$VM_FILES/tools.tar" -C / || fail "cannot unpack tools.tar"
hostname "guest$me"
mkdir -p /var/lib/nfs /run/rpcbind
# the kernel's lockd registers through /var/run/rpcbind.sock
[ -e /var/run ] || ln -s /run /var/run
# a virtio disk is PCI device 1af4:1001
if grep -qx 0x1001 /sys/bus/pci/devices/*/device 2>/dev/null; then
	for m in virtio_blk crc32c_generic ext4; do modprobe $m || fail "cannot load $m"; done
	i=0
	until [ -e /sys/block/vda ]; do
		i=$((i + 1))
		[ $i -le 100 ] || fail "a virtio disk but no /sys/block/vda"
		usleep 100000
	done
	[ -b /dev/vda ] || mknod /dev/vda b $(tr : ' ' </sys/block/vda/dev) ||
		fail "no /dev/vda"
	mount -t ext4 /dev/vda /var/lib/nfs || fail "cannot mount /dev/vda on /var/lib/nfs"
	echo "statd's dir on disk: $(ls /var/lib/nfs/sm 2>/dev/null | wc -l) host(s) recorded"
fi
mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak

rpcbind -f >/tmp/rpcbind.log 2>&1 &
i=0
until [ -S /run/rpcbind.sock ]; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "rpcbind did not start: $(cat /tmp/rpcbind.log)"
	usleep 100000
done
# sm-notify before statd, as a booting client runs it: it takes the next
# state number and tells the hosts recorded before a reset (it waits for
# their answers, a minute at most); its log is this script's output
sm-notify -d -m 1 2>&1 | sed 's/^/sm-notify: /'
rpc.statd -F -L -d >/tmp/statd.log 2>&1 &
i=0
until rpcinfo -p 127.0.0.1 2>/dev/null | grep -q ' status$'; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "rpc.statd did not register: $(cat /tmp/statd.log)"
	usleep 100000
done
echo "rpcbind and rpc.statd up at $(up) s"

mount_nfs() {
	err=$(mount -t nfs -o "vers=3,proto=tcp,addr=$VM_SERVER" "$VM_SERVER:/" /mnt 2>&1) ||
		fail "mount without nolock: $err"
	grep " /mnt nfs " /proc/mounts | grep -q nolock && fail "/mnt has nolock: $(grep ' /mnt ' /proc/mounts)"
	echo "mounted with locks at $(up) s: $(grep ' /mnt ' /proc/mounts)"
}
mount_nfs
echo "lockd in this guest: $(rpcinfo -p 127.0.0.1 | grep -c nlockmgr) registrations"

sqlite_run() {
	i=0
	while [ $i -lt 1000 ]; do
		echo "BEGIN IMMEDIATE; UPDATE c SET v = v + 1; COMMIT;"
		i=$((i + 1))
	done >/tmp/inc.sql
	t0=$(up)
	# the journal truncated rather than deleted: the same locks, without a
	# CREATE and a REMOVE per transaction (~100 s down to ~65 s for both
	# guests, TCG)
	printf '.bail on\n.timeout 600000\nPRAGMA journal_mode=TRUNCATE;\n.read /tmp/inc.sql\n' |
		sqlite3 /mnt/counter.db || fail "sqlite3 failed at $(up) s"
	echo "sqlite done: 1000 increments from $t0 s to $(up) s"
}

next=agent
while :; do
	case $next in
	agent) (cd /mnt && exec "$VM_FILES/lock_agent") <&3 || fail "lock_agent exited $?" ;;
	sqlite) sqlite_run ;;
	remount)
		umount /mnt || fail "cannot unmount /mnt: $(grep ' /mnt ' /proc/mounts)"
		mount_nfs
		echo "remount OK"
		;;
	end) exit 0 ;;
	*) fail "unknown line '$next'" ;;
	esac
	read -r next <&3 || exit 0
done
