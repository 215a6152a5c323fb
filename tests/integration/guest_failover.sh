# SPDX-License-Identifier: Apache-2.0
# guest_failover.sh - run by both guests of kvm_failover.sh (busybox sh).
#
#   1. unpacks $VM_FILES/tools.tar (the host's rpcbind, rpcinfo and
#      rpc.statd with their libraries) over the initramfs and starts rpcbind
#      and rpc.statd, as guest_locks.sh does: the kernel's lockd registers
#      with this rpcbind (the gateway sends GRANTED and SM_NOTIFY through
#      it), and statd, which monitors the floating address, hands the new
#      gateway's SM_NOTIFY to lockd, which then reclaims its locks.
#   2. unmounts the harness's nolock mount and mounts $VM_SERVER (the
#      floating address) WITHOUT nolock and without ports (the gateway's own
#      portmapper names them): /shared on /s, and on guest 1 /clientexport,
#      its union, on /c; prints "agent READY" (lock_agent's first line)
#   3. lock_agent runs in /s, fed through a FIFO, and the host's lines are:
#        work N MS  (guest 1) failover_writer write /c/w N MS in the
#                background: its lines ("work progress", "work done",
#                "work ERR"), then "sum PATH SIZE HASH" for each line of its
#                manifest and "work exit STATUS"
#        check   (guest 1, after "work exit 0") the page cache dropped, so
#                that the files are read from the gateway, and
#                failover_writer check /c/w: "check OK ...", or its
#                "check BAD" lines and "check ERR"
#        end     "quit" to the agent; the script ends, 1 if the work failed
#        other   to lock_agent (lock, lockw, unlock-wait...)
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
mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak /run/rpcbind
# the kernel's lockd registers through /var/run/rpcbind.sock
[ -e /var/run ] || ln -s /run /var/run
rpcbind -f >/tmp/rpcbind.log 2>&1 &
i=0
until [ -S /run/rpcbind.sock ]; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "rpcbind did not start: $(cat /tmp/rpcbind.log)"
	usleep 100000
done
# -L: no sm-notify, this guest has no hosts of an earlier boot to tell
rpc.statd -F -L -d >/tmp/statd.log 2>&1 &
i=0
until rpcinfo -p 127.0.0.1 2>/dev/null | grep -q ' status$'; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "rpc.statd did not register: $(cat /tmp/statd.log)"
	usleep 100000
done
echo "rpcbind and rpc.statd up at $(up) s"

# mount_locks EXPORT DIR
mount_locks() {
	mkdir -p "$2"
	err=$(mount -t nfs -o "vers=3,proto=tcp,addr=$VM_SERVER" "$VM_SERVER:$1" "$2" 2>&1) ||
		fail "mount $1 without nolock: $err"
	grep " $2 nfs " /proc/mounts | grep -q nolock && fail "$2 has nolock"
	echo "mounted with locks at $(up) s: $(grep " $2 " /proc/mounts)"
}
mount_locks /shared /s
[ "$me" = 1 ] && mount_locks /clientexport /c

mkfifo /tmp/agent.in || fail "mkfifo"
(cd /s && exec "$VM_FILES/lock_agent") </tmp/agent.in &
agent=$!
exec 4>/tmp/agent.in
work=

run_work() {
	st=0
	"$VM_FILES/failover_writer" write /c/w "$1" "$2" /tmp/manifest || st=$?
	[ $st != 0 ] || sed 's/^/sum /' /tmp/manifest
	echo "work exit $st"
	return $st
}

while read -r line <&3; do
	case $line in
	work\ *)
		set -- $line
		run_work "$2" "$3" &
		work=$!
		;;
	check)
		sync
		echo 3 >/proc/sys/vm/drop_caches
		"$VM_FILES/failover_writer" check /c/w /tmp/manifest || echo "check ERR"
		;;
	end)
		echo quit >&4
		wait $agent || fail "lock_agent exited $?"
		[ -z "$work" ] || wait "$work" || fail "the write workload failed"
		exit 0
		;;
	*) echo "$line" >&4 ;;
	esac
done
fail "the host's lines ended"
