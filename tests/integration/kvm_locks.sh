#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kvm_locks.sh UNION_NFSD - the kernel client lock tests of issue 19: two
# Linux guests at once lock files on one export of union-nfsd, mounted
# WITHOUT nolock, so every lock goes to union-nfsd's NLM.
#
# Each guest (guest_locks.sh) runs rpcbind and rpc.statd of its own: the
# kernel's lockd registers with the guest's rpcbind (the server sends GRANTED
# and SM_NOTIFY to it through that portmapper) and asks rpc.statd to monitor
# the server (without statd a lock fails with ENOLCK).  They are the host's
# binaries, copied with their libraries into the guest's initramfs (tools.tar,
# ~10 MB, made per run in well under a second: nothing to download, so
# nothing to cache).  Guest 1 keeps statd's /var/lib/nfs on a disk of its own
# (an ext4 image here), so that a reset guest tells the server it restarted.
# The guests mount with `vers=3,proto=tcp` and no ports: the kernel finds
# MOUNT, NFS and NLM through the server's portmapper.
#
# Two server hosts, one after the other, in the harness's network namespace:
#   1. a private rpcbind (its /run a tmpfs of a private mount namespace, so
#      nothing meets the host's), started before union-nfsd so that NFS,
#      MOUNT, NLM and NSM register there; union-nfsd runs under a loop that
#      starts it again when the test SIGKILLs it (as systemd's Restart=);
#   2. nothing but union-nfsd (no rpcbind; a /run of its own too): its
#      built-in portmapper answers on port 111, and its state dir is new.
#
# The host drives both guests' lock_agent (lock_agent.c, built static here)
# line by line; the steps, each a "step NAME: PASS" line or the failure.
# On server host 1 (rpcbind):
#   fcntl_eagain   A holds an fcntl write lock; B's F_SETLK gets EAGAIN
#   setlkw_wakeup  B's F_SETLKW blocks (no answer in 2 s); A unlocks; B gets
#                  the lock within LOCKW_MAX_MS (default 3000: a second, and
#                  room for a busy machine) of A's unlock, measured on A's
#                  clock up to B's datagram
#   flock          A's flock(LOCK_EX) makes B's flock(LOCK_EX|LOCK_NB) fail
#                  (Linux maps flock on NFS to a whole-file POSIX lock); once
#                  A releases it, B gets it
#   sqlite         both guests at once add 1 to one counter 1,000 times, one
#                  transaction each: the final value is 2,000
#   restart_reclaim  A holds a lock; union-nfsd is SIGKILLed and started
#                  again with --grace-period=KVML_GRACE (default 30 s).  Its
#                  SM_NOTIFY makes A's lockd reclaim the lock in grace; B's
#                  new lock of another file is refused until grace ends (its
#                  F_SETLKW answers no sooner); the server logs the grace's
#                  end with exactly 1 reclaim granted; then B's F_SETLKW of
#                  A's file blocks (A still holds it) and is granted once A
#                  unlocks
# On server host 2 (no rpcbind):
#   no_rpcbind     both guests unmount and mount again with no ports; rpcinfo
#                  lists the programs from union-nfsd's own portmapper; A's
#                  lock makes B's F_SETLK fail, and B gets it after A unlocks
#   reset          A holds a lock and B waits for it (F_SETLKW); A's qemu is
#                  killed (nothing shuts down) and A boots again: its statd's
#                  sm-notify tells the server, which frees A's lock, and B's
#                  F_SETLKW returns; A, up again, finds the lock B's
# union-nfsd must exit 0 on SIGTERM, on each host.
#
# Env: LOCKW_MAX_MS, KVML_GRACE, KVML_STEPS (the steps to run, default all:
# to see one fail by itself; reset runs on host 2, so with no_rpcbind),
# KVML_KEEP=1 (keep the temp dir).
# Exit: 0 pass, 1 fail, 77 skipped (no root, /dev/net/tun, qemu, static libc).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_locks.sh UNION_NFSD}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"
LOCKW_MAX_MS=${LOCKW_MAX_MS:-3000}
GRACE=${KVML_GRACE:-30}
KVML_STEPS=${KVML_STEPS:-fcntl_eagain setlkw_wakeup flock sqlite restart_reclaim no_rpcbind reset}
want() { [[ " $KVML_STEPS " == *" $1 "* ]]; }

vm_require_host "private rpcbind"
for b in rpcbind rpcinfo rpc.statd sm-notify sqlite3 mkfs.ext4; do
	command -v "$b" >/dev/null || {
		echo "FAIL: $b missing (etc/install-deps.sh tests: rpcbind, nfs-common, sqlite3, e2fsprogs)"
		exit 1
	}
done

vm_test_init kvml 1440 "${KVML_KEEP:-0}" # ctest TIMEOUT is 1500
t0=$SECONDS
cc -static -O2 -Wall -Wextra -Werror -o "$T/lock_agent" "$HERE/lock_agent.c" ||
	skip "cc -static failed (no static libc?)"

# the guests' rpcbind, rpcinfo, rpc.statd, sm-notify (which statd runs from
# /usr/sbin) and sqlite3
vm_tools_tar "$T/tools.tar" rpcbind rpcinfo rpc.statd sm-notify sqlite3
echo "tools.tar: $(du -h "$T/tools.tar" | cut -f1), ready after $((SECONDS - t0)) s"

mkdir -p "$T/lower" "$T/upper" "$T/work"
chmod 755 "$T" "$T/upper"
sqlite3 "$T/upper/counter.db" 'CREATE TABLE c(v INTEGER); INSERT INTO c VALUES (0);'
chmod 666 "$T/upper/counter.db"

mkfs.ext4 -q -F -L statd "$T/g1disk.img" 16M >/dev/null

args="--lowerdir='$T/lower' --upperdir='$T/upper' --workdir='$T/work'"
args+=" --nfs-port=\$VM_PORT --mount-port=\$VM_MOUNTPORT --bind=\$VM_SERVER_IP"
args+=" --grace-period=$GRACE --foreground --clients=\"\$VM_NETWORK(rw,no_root_squash)\""
# server host 1: rpcbind, then union-nfsd, started again while
# $VM_WORK/restart exists when it ends; the shell ends with its status
cat >"$T/server1.sh" <<EOF
mount -t tmpfs -o mode=0755 tmpfs /run
rpcbind -f >"\$VM_WORK/rpcbind.log" 2>&1 &
for _ in \$(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.05; done
[ -S /run/rpcbind.sock ] || { echo "kvm_locks: the server's rpcbind did not start"; exit 1; }
stop=0
trap 'stop=1' TERM
while :; do
	'$UNION_NFSD' $args --state-dir=\$VM_WORK/state &
	pid=\$!
	echo \$pid >"\$VM_WORK/nfsd.pid"
	st=0
	wait \$pid || st=\$?
	# a TERM ends the wait early: the status comes with the next one
	while kill -0 \$pid 2>/dev/null; do st=0; wait \$pid || st=\$?; done
	[ \$stop = 0 ] && [ -e "\$VM_WORK/restart" ] || exit \$st
	rm -f "\$VM_WORK/restart"
done
EOF
# server host 2: union-nfsd alone, its portmapper on; a new state dir
cat >"$T/server2.sh" <<EOF
mount -t tmpfs -o mode=0755 tmpfs /run
exec '$UNION_NFSD' $args --state-dir=\$VM_WORK/state2
EOF
vm_net_up
vm_server_start "exec unshare -m --propagation private bash '$T/server1.sh'"
rpc_has() {
	ip netns exec "$VM_NS" rpcinfo -p "$VM_SERVER_IP" 2>/dev/null | grep -q " $1\$"
}
rpc_has nlockmgr || {
	echo "FAIL: union-nfsd registered no NLM with the server's rpcbind:"
	ip netns exec "$VM_NS" rpcinfo -p "$VM_SERVER_IP" || true
	tail -20 "$VM_WORK/server.log"
	exit 1
}

fail() { vm_fail_two "$@"; }

# ask N LINE ERE [S]: LINE to guest N's agent; its answer must match ERE
# (within S s, default 60); the answer is in ANSWER
ask() {
	local n=$1 before
	before=$(wc -l <"$VM_WORK/g$n.out")
	vm_guest_send "$n" "$2"
	answer_after "$n" "$before" "$3" "${4:-60}"
}

# answer_after N LINES ERE S: a line of guest N's output after its first
# LINES, that starts with the command's name; it must match ERE
answer_after() {
	local n=$1 before=$2 i
	ANSWER=
	for ((i = 0; i < $4 * 10; i++)); do
		ANSWER=$(tail -n +"$((before + 1))" "$VM_WORK/g$n.out" | grep -E '^[a-z-]+ (OK|EAGAIN|ERR|WAITING)' | head -1 || true)
		[ -z "$ANSWER" ] || break
		grep -q '^FAIL' "$VM_WORK/g$n.out" && break
		sleep 0.1
	done
	[[ "$ANSWER" =~ $3 ]] || fail "guest $n answered '${ANSWER:-nothing}', want /$3/"
}

step() { echo "step $1: PASS ($2)"; }

# agent_ready N BEFORE: guest N's lock_agent up (a line "agent READY" after
# its first BEFORE lines of output)
agent_ready() {
	local i
	for ((i = 0; i < 6000; i++)); do
		tail -n +"$(($2 + 1))" "$VM_WORK/g$1.out" | grep -qE '^agent READY|^FAIL' && break
		kill -0 "${VM_QPID[$1]}" 2>/dev/null || break
		sleep 0.1
	done
	tail -n +"$(($2 + 1))" "$VM_WORK/g$1.out" | grep -q '^agent READY' ||
		fail "guest $1's agent did not get ready"
}

# agents_quit, agents_start: the lock_agents end, so that the guests run
# another line (guest_locks.sh), and start again
agents_quit() {
	ask 1 quit '^quit OK$'
	ask 2 quit '^quit OK$'
}
agents_start() {
	local b1 b2
	b1=$(wc -l <"$VM_WORK/g1.out")
	b2=$(wc -l <"$VM_WORK/g2.out")
	vm_guest_send 1 agent
	vm_guest_send 2 agent
	agent_ready 1 "$b1"
	agent_ready 2 "$b2"
}

guest_start() {
	local disk=()
	[ "$1" = 1 ] && disk=(--disk "$T/g1disk.img")
	vm_guest_start "$1" "$HERE/guest_locks.sh" --file "$T/lock_agent" --file "$T/tools.tar" \
		--mem 384 --timeout 1380 "${disk[@]}"
}

# log_wait ERE S: until a line of the server log matches ERE (S s at most)
log_wait() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		grep -qE "$1" "$VM_WORK/server.log" && return 0
		sleep 0.1
	done
	fail "the server logged no line like /$1/ in $2 s"
}

guest_start 1
guest_start 2
agent_ready 1 0
agent_ready 2 0
echo "both guests ready after $((SECONDS - t0)) s"
grep -E '^(rpcbind|mounted|lockd|statd)' "$VM_WORK/g1.out" | sed 's/^/guest 1: /'

step_fcntl_eagain() {
	ask 1 "lock f1" '^lock OK$'
	ask 2 "lock f1" '^lock EAGAIN$'
	ask 1 "unlock f1" '^unlock OK$'
	step fcntl_eagain "B's F_SETLK: EAGAIN while A holds the write lock"
}

# lockw_after_unlock FILE: B's F_SETLKW of FILE, which A holds, blocks; A
# unlocks; B has it within LOCKW_MAX_MS.  LATENCY: the time in ms.
lockw_after_unlock() {
	local before
	before=$(wc -l <"$VM_WORK/g2.out")
	ask 2 "lockw $1 $(vm_guest_ip 1)" '^lockw WAITING$'
	sleep 2
	if tail -n +"$((before + 1))" "$VM_WORK/g2.out" | grep -q '^lockw OK'; then
		fail "B's F_SETLKW returned while A held the lock"
	fi
	ask 1 "unlock-wait $1" '^unlock-wait OK latency=' 120
	LATENCY=${ANSWER#*latency=}
	answer_after 2 "$((before + 1))" '^lockw OK waited=' 10
	echo "B's F_SETLKW: granted ${LATENCY} ms after A's unlock (A's clock); blocked ${ANSWER#*waited=} ms"
	[ "${LATENCY%.*}" -le "$LOCKW_MAX_MS" ] ||
		fail "B's F_SETLKW returned ${LATENCY} ms after A's unlock (limit $LOCKW_MAX_MS ms)"
	ask 2 "unlock $1" '^unlock OK$'
}

step_setlkw_wakeup() {
	ask 1 "lock f1" '^lock OK$'
	lockw_after_unlock f1
	ask 1 "lock f1" '^lock OK$'
	ask 1 "unlock f1" '^unlock OK$'
	step setlkw_wakeup "$LATENCY ms from unlock to grant"
}

step_flock() {
	ask 1 "flock f2" '^flock OK$'
	ask 2 "flock f2" '^flock EAGAIN$'
	ask 1 "funlock f2" '^funlock OK$'
	ask 2 "flock f2" '^flock OK$'
	ask 2 "funlock f2" '^funlock OK$'
	step flock "B's flock fails while A holds it, succeeds after"
}

step_sqlite() {
	local n b1 b2 t1=$SECONDS v
	agents_quit
	b1=$(wc -l <"$VM_WORK/g1.out")
	b2=$(wc -l <"$VM_WORK/g2.out")
	vm_guest_send 1 sqlite
	vm_guest_send 2 sqlite
	for n in 1 2; do
		[ "$n" = 1 ] && b=$b1 || b=$b2
		vm_guest_expect "$n" '^sqlite done|^FAIL' 1200 &&
			! grep -q '^FAIL' "$VM_WORK/g$n.out" || fail "guest $n: sqlite did not end"
		tail -n +"$((b + 1))" "$VM_WORK/g$n.out" | grep -E '^sqlite' | sed "s/^/guest $n: /"
	done
	v=$(sqlite3 "$T/upper/counter.db" 'SELECT v FROM c;')
	[ "$v" = 2000 ] || fail "the counter is '$v' after 2 x 1,000 increments, want 2000"
	agents_start
	step sqlite "2 x 1,000 increments at once: 2000, in $((SECONDS - t1)) s"
}

# server_restarted OLDPID: a new union-nfsd under server1.sh's loop, its
# ports listening and NLM registered
server_restarted() {
	local i pid
	for ((i = 0; i < 600; i++)); do
		pid=$(cat "$VM_WORK/nfsd.pid" 2>/dev/null || true)
		[ -n "$pid" ] && [ "$pid" != "$1" ] && vm_listening "$VM_PORT" &&
			vm_listening "$VM_MOUNTPORT" && rpc_has nlockmgr && return 0
		sleep 0.1
	done
	fail "union-nfsd did not come back after its SIGKILL"
}

step_restart_reclaim() {
	local pid t_kill b2 t_b line
	ask 1 "lock f3" '^lock OK$'
	ask 2 "lock f3" '^lock EAGAIN$'
	pid=$(cat "$VM_WORK/nfsd.pid")
	touch "$VM_WORK/restart"
	t_kill=$SECONDS
	kill -KILL "$pid"
	server_restarted "$pid"
	echo "union-nfsd SIGKILLed and up again after $((SECONDS - t_kill)) s"
	# B's new lock, of a file nobody holds, in grace: refused (its kernel
	# tries again every 5 s) until grace ends
	b2=$(wc -l <"$VM_WORK/g2.out")
	ask 2 "lockw f5 $(vm_guest_ip 1)" '^lockw WAITING$'
	log_wait 'NSM: grace period over' $((GRACE + 120))
	line=$(grep -E 'NSM: grace period over' "$VM_WORK/server.log" | tail -1)
	echo "server: ${line#*NSM: }"
	[[ "$line" =~ over:\ 1\ reclaim\ granted,\ [1-9][0-9]*\ calls?\ refused ]] ||
		fail "want 1 reclaim (A's) and B's calls refused in grace: '$line'"
	answer_after 2 "$((b2 + 1))" '^lockw OK waited=' 60
	t_b=$((SECONDS - t_kill))
	[ "$t_b" -ge "$GRACE" ] || fail "B's new lock was granted $t_b s after the kill, in grace ($GRACE s)"
	echo "B's new lock granted $t_b s after the kill (grace $GRACE s)"
	ask 2 "unlock f5" '^unlock OK$'
	# A's reclaimed lock holds: B waits for it until A unlocks
	lockw_after_unlock f3
	step restart_reclaim "A reclaimed in grace; B refused for ${GRACE} s, then granted ${LATENCY} ms after A's unlock"
}

# host 2: union-nfsd alone, its own portmapper on port 111
server2_start() {
	agents_quit
	vm_server_stop
	[ "$VM_SERVER_STATUS" = 0 ] || fail "union-nfsd (host 1) exited $VM_SERVER_STATUS on SIGTERM (want 0)"
	vm_server_start "exec unshare -m --propagation private bash '$T/server2.sh'"
	grep -q 'portmapper on port 111' "$VM_WORK/server.log" ||
		log_wait 'portmapper on port 111' 30
	for p in nfs mountd nlockmgr status; do
		rpc_has "$p" || fail "union-nfsd's portmapper does not list $p"
	done
	for p in $(ip netns pids "$VM_NS"); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" != rpcbind ] || fail "an rpcbind runs on host 2"
	done
	echo "host 2: $(grep -o 'portmapper on port 111.*' "$VM_WORK/server.log" | tail -1)"
}

step_no_rpcbind() {
	local n
	server2_start
	for n in 1 2; do
		ask "$n" remount '^remount OK$' 120
	done
	agents_start
	ask 1 "lock f6" '^lock OK$'
	ask 2 "lock f6" '^lock EAGAIN$'
	ask 1 "unlock f6" '^unlock OK$'
	ask 2 "lock f6" '^lock OK$'
	ask 2 "unlock f6" '^unlock OK$'
	step no_rpcbind "mounted with no ports and locked through union-nfsd's portmapper"
}

step_reset() {
	local b2 t_reset
	ask 1 "lock f4" '^lock OK$'
	b2=$(wc -l <"$VM_WORK/g2.out")
	ask 2 "lockw f4 $(vm_guest_ip 1)" '^lockw WAITING$'
	ask 1 sync '^sync OK$'
	sleep 2
	tail -n +"$((b2 + 1))" "$VM_WORK/g2.out" | grep -q '^lockw OK' &&
		fail "B's F_SETLKW returned while A held the lock"
	t_reset=$SECONDS
	vm_guest_kill 1
	guest_start 1
	answer_after 2 "$((b2 + 1))" '^lockw OK waited=' 600
	echo "B's F_SETLKW granted $((SECONDS - t_reset)) s after A's reset"
	grep -E "NSM: (SM_NOTIFY from $(vm_guest_ip 1)|$(vm_guest_ip 1) restarted)" \
		"$VM_WORK/server.log" | sed 's/^/server: /'
	grep -qE "NSM: $(vm_guest_ip 1) restarted: locks of [1-9]" "$VM_WORK/server.log" ||
		fail "the server did not free A's locks on its SM_NOTIFY"
	agent_ready 1 0
	grep -E '^statd' "$VM_WORK/g1.out" | sed 's/^/guest 1, booted again: /'
	ask 1 "lock f4" '^lock EAGAIN$'
	ask 2 "unlock f4" '^unlock OK$'
	ask 1 "lock f4" '^lock OK$'
	ask 1 "unlock f4" '^unlock OK$'
	step reset "A's statd notified the server after a reset; B got A's lock"
}

on_host2=0
for s in fcntl_eagain setlkw_wakeup flock sqlite restart_reclaim no_rpcbind reset; do
	want "$s" || continue
	[ "$s" != reset ] || [ "$on_host2" = 1 ] || fail "reset needs no_rpcbind before it"
	"step_$s"
	[ "$s" != no_rpcbind ] || on_host2=1
done
agents_quit
vm_guest_send 1 end
vm_guest_send 2 end
for n in 1 2; do
	st=0
	vm_guest_wait "$n" 2>"$T/g$n.err" || st=$?
	[ "$st" = 0 ] || fail "guest $n ended with status $st"
done
vm_server_stop
[ "$VM_SERVER_STATUS" = 0 ] || fail "union-nfsd exited $VM_SERVER_STATUS on SIGTERM (want 0)"
echo "PASS: $KVML_STEPS, across two kernel clients; total $((SECONDS - t0)) s"
