#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kvm_handles.sh UNION_NFSD NFS_POKE - the kernel client test of issue 4
# (handles and fileids that clients can trust).
#
# A Debian kernel in qemu (tests/vm) mounts a
# writable union of two lower layers that share a deep directory (merged at every
# level), hard and with actimeo=0,lookupcache=none so that every probe goes to
# the server with the handles the client holds.  The guest (guest_handles.sh)
# keeps a lower file open and its cwd in the deepest merged directory, and
# probes both in a loop while the host
#   1. SIGKILLs union-nfsd and starts it again on the same state dir (after a
#      second with no server at all),
#   2. copies the file up: nfs_poke rewrites its first byte through a separate
#      libnfs client that looks the file up from the export root,
#   3. stops union-nfsd with SIGTERM (it must exit 0) and starts it again.
# Guest and host take turns through handshake files in the export root (sig-K
# from the guest, ack-K from the host, both created through union-nfsd), so the
# probes provably span each event.  The guest must see no error (no ESTALE), one
# inode number for the file, the open descriptor and the cwd throughout, and at
# least MIN_READS good probes before the first event and after each one.  The
# host checks that the copy-up happened (the file is in the upper layer, same
# bytes) and that the fileid nfs_poke saw is the guest's inode number.
#
# The server command is a supervisor (written to $T/supervisor.sh) that runs
# union-nfsd in the foreground inside the harness's namespace, restarts it, and
# stops qemu at once should union-nfsd die by itself (a hard mount would hang).
#
# Env: KVMH_KEEP=1 (keep the temp dir and print where it is).
# Exit: 0 passed, 1 failed, 77 skipped (no root, /dev/net/tun or qemu).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_handles.sh UNION_NFSD NFS_POKE}")
NFS_POKE=$(realpath "${2:?usage: kvm_handles.sh UNION_NFSD NFS_POKE}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"

vm_require_host

vm_test_init kvmh 540 "${KVMH_KEEP:-0}" # ctest TIMEOUT is 600
t0=$SECONDS

# ---- the layers ----------------------------------------------------------------------
# l1 over l2, both holding lvl1/.../lvl5 with a file of their own at each level, so
# every level is a merged directory; the file under test is in the bottom layer.
DEEP=lvl1/lvl2/lvl3/lvl4/lvl5 FILE=data.bin
L1=$T/l1 L2=$T/l2 U=$T/upper W=$T/work
mkdir -p "$L1/$DEEP" "$L2/$DEEP" "$U" "$W" "$T/files"
chmod 755 "$T" "$U"
d=
for lvl in ${DEEP//\// }; do
	d=${d:+$d/}$lvl
	echo "top $d" >"$L1/$d/top-$lvl"
	echo "bottom $d" >"$L2/$d/bottom-$lvl"
done
head -c 300001 /dev/urandom >"$L2/$DEEP/$FILE"
SUM=$(md5sum <"$L2/$DEEP/$FILE" | cut -d' ' -f1)
LISTING="bottom-lvl5 $FILE top-lvl5 " # ls . in the guest, one line, as tr makes it

cat >"$T/files/handles.env" <<EOF
DEEP='$DEEP'
FILE='$FILE'
SUM='$SUM'
LISTING='$LISTING'
MIN_READS=20
PHASE_CS=700
WAIT_CS=6000
EOF

# ---- the supervisor: union-nfsd's server command ----------------------------------------
cat >"$T/server.cfg" <<EOF
UNION_NFSD='$UNION_NFSD'
NFS_POKE='$NFS_POKE'
T='$T'
LOWER='$L1:$L2'
U='$U'
W='$W'
DEEP='$DEEP'
FILE='$FILE'
GUEST_IP='$(vm_guest_ip 1)'
EOF
cat >"$T/supervisor.sh" <<'EOF'
# supervisor.sh CFG - union-nfsd under kvm_handles.sh, in the harness's namespace.
set -u
. "$1"
URL="nfs://$VM_SERVER_IP/?nfsport=$VM_PORT&mountport=$VM_MOUNTPORT&version=3"
gen=0 SRV=

log() { echo "$(date +%s.%N | cut -c1-14) $*" >>"$T/events"; }

# stop_qemu MSG: union-nfsd is gone for good; the guest would hang on its hard
# mount, so everything else in the namespace is stopped (qemu among it)
stop_qemu() {
	log "FAIL: $*: stopping qemu"
	for q in $(ip netns pids "$VM_NS"); do
		[ "$q" = $$ ] || kill "$q" 2>/dev/null
	done
	exit 1
}

start() {
	local i
	gen=$((gen + 1))
	"$UNION_NFSD" --lowerdir="$LOWER" --upperdir="$U" --workdir="$W" \
		--nfs-port="$VM_PORT" --mount-port="$VM_MOUNTPORT" \
		--bind="$VM_SERVER_IP" --state-dir="$VM_WORK/state" --foreground \
		--clients="$GUEST_IP(rw,no_root_squash) $VM_SERVER_IP(rw,no_root_squash)" \
		--no-rpcbind --no-portmapper >"$T/srv-$gen.out" 2>"$T/srv-$gen.err" &
	SRV=$!
	for ((i = 0; i < 200; i++)); do
		grep -q '^listening ' "$T/srv-$gen.out" && { log "union-nfsd $gen started (pid $SRV)"; return 0; }
		kill -0 "$SRV" 2>/dev/null || break
		sleep 0.05
	done
	stop_qemu "union-nfsd $gen did not start"
}

# stop SIG: stops union-nfsd with SIG; the status goes to the log
stop() {
	local st=0
	kill "-$1" "$SRV" 2>/dev/null
	wait "$SRV" || st=$?
	log "union-nfsd $gen stopped by SIG$1: status $st"
	echo "$st" >"$T/srv-$gen.status"
}

# wait_sig K: until the guest has created sig-K (it lands in the upper layer)
wait_sig() {
	until [ -e "$U/sig-$1" ]; do
		kill -0 "$SRV" 2>/dev/null || stop_qemu "union-nfsd $gen ended by itself"
		sleep 0.1
	done
	log "sig-$1 seen"
}

ack() {
	"$NFS_POKE" "$URL" create "/ack-$1" >>"$T/poke.log" 2>&1 || stop_qemu "could not create ack-$1"
	log "ack-$1 created"
}

# vm_server_stop ends us with SIGTERM to the process group: union-nfsd must exit 0
trap 'stop TERM; exit 0' TERM

start
wait_sig 1
stop KILL
sleep 1 # the guest's requests meet no server at all for a while
start
ack 1

wait_sig 2
if "$NFS_POKE" "$URL" rewrite "/$DEEP/$FILE" >>"$T/poke.log" 2>&1; then
	log "copy-up: $(tail -1 "$T/poke.log")"
else
	stop_qemu "nfs_poke rewrite failed: $(tail -1 "$T/poke.log")"
fi
ack 2

wait_sig 3
stop TERM
start
ack 3

while :; do
	wait "$SRV" && st=0 || st=$?
	kill -0 "$SRV" 2>/dev/null && continue # a trapped signal interrupted wait
	echo "$st" >"$T/srv-$gen.status"
	stop_qemu "union-nfsd $gen ended by itself (status $st)"
done
EOF

echo "layers ready after $((SECONDS - t0)) s: $DEEP merged from 2 lowers," \
	"$FILE ($(stat -c %s "$L2/$DEEP/$FILE") bytes) in the bottom one"

# ---- the guest ---------------------------------------------------------------------------
t1=$SECONDS
run_rc=0
vm_net_up
vm_server_start "bash '$T/supervisor.sh' '$T/server.cfg'" &&
	vm_guest_start 1 "$HERE/guest_handles.sh" --opts actimeo=0,lookupcache=none \
		--file "$T/files/handles.env" --timeout 400 &&
	vm_guest_wait 1 2>"$T/guest.err" || run_rc=$?
vm_server_stop
cp "$VM_WORK/g1.out" "$T/guest.out" 2>/dev/null || : >"$T/guest.out"
echo "guest run took $((SECONDS - t1)) s, exit $run_rc"

# the timeline: the host's events, the guest's phases
echo "host events (host clock):"
sed 's/^/  /' "$T/events" 2>/dev/null || true
echo "guest (seconds since its loop started):"
grep -E '^(cwd|phase|  [0-9]|sig-|guest loop|inodes|RESULT|BAD|FAIL|  stderr)' "$T/guest.out" |
	sed 's/^/  /' || true

fail() {
	echo "FAIL: $*"
	echo "--- guest output (last 30 lines):"
	tail -30 "$T/guest.out"
	echo "--- the harness (last 30 lines):"
	tail -30 "$T/guest.err"
	for f in "$T"/srv-*.err "$T/poke.log" "$VM_WORK/server.log"; do
		[ -s "$f" ] || continue
		echo "--- $(basename "$f") (last 20 lines):"
		tail -20 "$f"
	done
	exit 1
}
[ "$run_rc" = 0 ] || fail "the guest ended with status $run_rc"
grep -q '^RESULT PASS' "$T/guest.out" || fail "the guest's result is not PASS"
for k in 1 2 3; do
	grep -q " ack-$k created$" "$T/events" || fail "the host never did event $k"
done
[ "$(cat "$T/srv-2.status" 2>/dev/null)" = 0 ] ||
	fail "union-nfsd 2 exited $(cat "$T/srv-2.status" 2>/dev/null) on SIGTERM (want 0)"
[ "$(cat "$T/srv-3.status" 2>/dev/null)" = 0 ] ||
	fail "union-nfsd 3 exited $(cat "$T/srv-3.status" 2>/dev/null) on SIGTERM (want 0)"

# the guest had requests in flight while no server ran (the second of event 1)
long=$(sed -n 's/^phase 1-after-event-1: .*longest probe \([0-9]*\)\.\([0-9]*\) s$/\1\2/p' \
	"$T/guest.out")
[ -n "$long" ] && [ "$((10#$long))" -ge 50 ] ||
	fail "no guest probe waited for the restarted server (longest in phase 1: $long cs)"

# the copy-up happened, kept the bytes, and kept the fileid the guest saw
[ -f "$U/$DEEP/$FILE" ] || fail "no upper copy of $DEEP/$FILE after the rewrite"
[ "$(md5sum <"$U/$DEEP/$FILE" | cut -d' ' -f1)" = "$SUM" ] ||
	fail "the upper copy of $FILE differs from the lower file"
ino=$(sed -n 's/^inodes file: //p' "$T/guest.out")
re="fileid ([0-9]+) before, ([0-9]+) after"
[[ $(grep rewrote "$T/poke.log") =~ $re ]] || fail "no fileids from nfs_poke rewrite"
[ "${BASH_REMATCH[1]}" = "$ino" ] && [ "${BASH_REMATCH[2]}" = "$ino" ] ||
	fail "nfs_poke saw fileid ${BASH_REMATCH[1]} before and ${BASH_REMATCH[2]} after" \
		"the copy-up, the guest inode $ino"
echo "PASS: no error in $(sed -n 's/^guest loop: [^,]*, \([0-9]*\) probes.*/\1/p' \
	"$T/guest.out") probes across 2 restarts and a copy-up; inode $ino throughout;" \
	"total $((SECONDS - t0)) s"
