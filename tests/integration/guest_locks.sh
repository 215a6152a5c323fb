# guest_locks.sh - run by both guests of kvm_locks.sh at once (busybox sh).
#
#   1. unpacks $VM_FILES/tools.tar (rpcbind, rpcinfo, rpc.statd and sqlite3
#      of the host, with their libraries) over the initramfs, starts rpcbind
#      and rpc.statd, and mounts the export again on /mnt WITHOUT nolock and
#      without ports (the kernel asks the server's rpcbind for them): the
#      harness's own mount has nolock
#   2. prints "ready" and runs lock_agent in /mnt on the host's lines: the
#      host drives the lock steps of both guests (kvm_locks.sh)
#   3. after the agent's "quit", the host's next line: "sqlite" runs sqlite3,
#      which adds 1 to the counter in counter.db 1,000 times, one transaction
#      each, and prints "sqlite done"; "end" ends the script
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
mkdir -p /var /run/rpcbind /var/lib/nfs/sm /var/lib/nfs/sm.bak
# the kernel's lockd registers through /var/run/rpcbind.sock
[ -e /var/run ] || ln -s /run /var/run

rpcbind -f >/tmp/rpcbind.log 2>&1 &
i=0
until [ -S /run/rpcbind.sock ]; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "rpcbind did not start: $(cat /tmp/rpcbind.log)"
	usleep 100000
done
rpc.statd -F -L -d >/tmp/statd.log 2>&1 &
i=0
until rpcinfo -p 127.0.0.1 2>/dev/null | grep -q ' status$'; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "rpc.statd did not register: $(cat /tmp/statd.log)"
	usleep 100000
done
echo "rpcbind and rpc.statd up at $(up) s"

err=$(mount -t nfs -o "vers=3,proto=tcp,addr=$VM_SERVER" "$VM_SERVER:/" /mnt 2>&1) ||
	fail "mount without nolock: $err"
grep " /mnt nfs " /proc/mounts | grep -q nolock && fail "/mnt has nolock: $(grep ' /mnt ' /proc/mounts)"
echo "mounted with locks at $(up) s: $(grep ' /mnt ' /proc/mounts)"
echo "lockd in this guest: $(rpcinfo -p 127.0.0.1 | grep -c nlockmgr) registrations"

cd /mnt || fail "no /mnt"
echo ready
"$VM_FILES/lock_agent" <&3 || fail "lock_agent exited $?"
read -r next <&3
[ "$next" = sqlite ] || exit 0
i=0
while [ $i -lt 1000 ]; do
	echo "BEGIN IMMEDIATE; UPDATE c SET v = v + 1; COMMIT;"
	i=$((i + 1))
done >/tmp/inc.sql
t0=$(up)
# the journal truncated rather than deleted: the same locks, without a CREATE
# and a REMOVE per transaction (~100 s down to ~65 s for both guests, TCG)
printf '.bail on\n.timeout 600000\nPRAGMA journal_mode=TRUNCATE;\n.read /tmp/inc.sql\n' | sqlite3 counter.db ||
	fail "sqlite3 failed at $(up) s"
echo "sqlite done: 1000 increments from $t0 s to $(up) s"
cd /
