#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kvm_failover.sh UNION_NFSD UNION_NFSCTL - issue 30's failover test: a
# kernel client writing to its union and holding a lock through a floating
# address keeps both when the gateway behind the address is SIGKILLed and
# the address moves to another gateway, as keepalived moves it
# (docs/gateways.md, part 3).
#
# Two gateways, A and B, are hosts of their own on the VM harness's bridge
# (vm_ns_add: a network namespace each, eth0 a veth into br0): A 10.0.2.2,
# B 10.0.2.3, and the floating address F, 10.0.2.100, first on A's eth0.
# Each runs union-nfsd with the same config (gw.conf) but its own state
# dir: the wildcard address, the default ports, its own portmapper on port
# 111 (no rpcbind; /run a tmpfs of a private mount namespace, so that the
# host's rpcbind socket is not seen), one key-file (32 bytes, mode 0600) and
# a short grace-period, and nsm-dir in the shared storage.  The shared
# storage is one dir of this test's ($T/storage), which both namespaces see:
#   /clientexport  per-client unions: upperdir and workdir templates with %a
#   /shared        one fixed upper; lockfile is in its lower layer, so that
#                  its handle is a lower id, the same on every gateway (the
#                  upper objects of a fixed upper are nodes of each
#                  gateway's main table: only a client union has a table
#                  that moves with it)
#   nsm/           nsm-dir: the NSM records, one per address locked through
# A starts with F on its eth0, and `union-nfsctl takeover F` runs on it, as
# keepalived's notify script runs it on the address's first master.  B
# cannot run beside A: a fixed upper is served by one server at a time (its
# work dir's lock), and a union-nfsd that finds it held does not start.  So
# B starts once A is dead and F is on its eth0, as a notify script starts
# the service after keepalived moved the address.
#
# The guests (guest_failover.sh) run rpcbind and rpc.statd and mount F
# without nolock and without ports; the host drives their lock_agent
# (lock_agent.c) line by line.  Guest 1 mounts /clientexport and /shared,
# guest 2 /shared.  The steps, each a "step NAME: PASS" line or the failure:
#   lock_held   guest 1's F_SETLK of /shared/lockfile: granted; guest 2's
#               F_SETLK: EAGAIN; guest 2's F_SETLKW blocks (no answer in 2 s)
#   failover    guest 1 writes FO_FILES files over FO_WORK_MS ms to its union
#               (failover_writer.c: chunked writes, every 3rd fsync'd, every
#               5th appended to, every 7th renamed); at its FO_KILL_AT-th
#               file A is SIGKILLed by pid, F deleted from A's eth0 and added
#               to B's, a gratuitous ARP sent from B (arping -U), B started
#               and `union-nfsctl takeover F` run on it (the notify script's
#               call); then the workload makes progress through B (the time
#               from the SIGKILL is printed)
#   reclaim     B's log has its grace's end with exactly 1 reclaim granted
#               (guest 1's lock: B's SM_NOTIFY from F made its lockd
#               reclaim), and guest 2's F_SETLKW has not returned
#   waiter      after the grace, once B has had guest 2's LOCK again (B's
#               NLM4_LOCK calls, `union-nfsctl stats`, beyond the reclaim
#               and the refusals; Linux's lockd sends a blocked request
#               again every 5 s in grace and every 30 s), guest 2 still waits;
#               guest 1 unlocks, and guest 2's F_SETLKW returns within
#               LOCKW_MAX_MS (default 3000) of that, measured on guest 1's
#               clock up to guest 2's datagram
#   workload    the workload ends with every call answered: no ESTALE, no
#               EIO, no other error (a mkdir's EEXIST or a rename's ENOENT
#               that a retransmission meets after the failover, the DRC
#               lost with A, counted as replays and printed)
#   data_guest  every file read back through the mount, on B, the page
#               cache dropped: each size and hash as written, no name more
#   data_disk   the same of the union's upper on disk (the manifest from
#               guest 1's output)
#   b_exit      B exits 0 on SIGTERM
# With FO_LOCKS=0 (a server without nsm-dir and takeover), reclaim and
# waiter are not run, guest 2 does not wait for the lock, and gw.conf has
# no nsm-dir.
#
# Every process the test starts is stopped by pid (the guests, the
# gateways), then whatever still runs in its namespaces, which are deleted:
# also on failure and when the watchdog stops it.
#
# Env: FO_LOCKS (1), FO_GRACE (20 s), FO_FILES (300), FO_WORK_MS (30000),
# FO_KILL_AT (100, a multiple of 20: the file at which A is killed),
# LOCKW_MAX_MS (3000), FO_KEEP=1 (keep the temp dir: the gateways' logs,
# the storage).
# Exit: 0 pass, 1 fail, 77 skipped (no root, /dev/net/tun, qemu, static libc).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_failover.sh UNION_NFSD UNION_NFSCTL}")
NFSCTL=$(realpath "${2:?usage: kvm_failover.sh UNION_NFSD UNION_NFSCTL}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"
FO_LOCKS=${FO_LOCKS:-1}
GRACE=${FO_GRACE:-20}
FILES=${FO_FILES:-300}
WORK_MS=${FO_WORK_MS:-30000}
KILL_AT=${FO_KILL_AT:-100}
LOCKW_MAX_MS=${LOCKW_MAX_MS:-3000}
FLOAT=10.0.2.100
GW_IP_A=10.0.2.2
GW_IP_B=10.0.2.3
G1=$(vm_guest_ip 1)
declare -A GW_PID=()

vm_require_host "gateway namespaces, arping"
for b in rpcbind rpcinfo rpc.statd arping; do
	command -v "$b" >/dev/null || {
		echo "FAIL: $b missing (etc/install-deps.sh tests: rpcbind, nfs-common, iputils-arping)"
		exit 1
	}
done

vm_test_init kvmfo 840 "${FO_KEEP:-0}" # ctest TIMEOUT is 900
t0=$SECONDS
for p in lock_agent failover_writer; do
	cc -static -O2 -Wall -Wextra -Werror -o "$T/$p" "$HERE/$p.c" ||
		skip "cc -static failed (no static libc?)"
done
vm_tools_tar "$T/tools.tar" rpcbind rpcinfo rpc.statd
echo "tools.tar: $(du -h "$T/tools.tar" | cut -f1), ready after $((SECONDS - t0)) s"

S=$T/storage
mkdir -p "$S/base" "$S/shared-lower" "$S/clients" "$S/shared/upper" "$S/shared/work" "$S/nsm"
chmod 755 "$T" "$S"
echo "a file of the base layer" >"$S/base/readme"
: >"$S/shared-lower/lockfile"
chmod 666 "$S/shared-lower/lockfile"
head -c 32 /dev/urandom >"$T/key"
chmod 600 "$T/key"
{
	echo "[server]"
	echo "key-file = $T/key"
	echo "grace-period = $GRACE"
	[ "$FO_LOCKS" = 0 ] || echo "nsm-dir = $S/nsm"
	echo "[export]"
	echo "path = /clientexport"
	echo "lowerdir = $S/base"
	echo "upperdir = $S/clients/%a/upper"
	echo "workdir = $S/clients/%a/work"
	echo "clients = $VM_NETWORK(rw,no_root_squash)"
	echo "[export]"
	echo "path = /shared"
	echo "lowerdir = $S/shared-lower"
	echo "upperdir = $S/shared/upper"
	echo "workdir = $S/shared/work"
	echo "clients = $VM_NETWORK(rw,no_root_squash)"
} >"$T/gw.conf"

fail() {
	local g
	echo "FAIL: $*"
	for n in 1 2; do
		[ -f "$VM_WORK/g$n.out" ] || continue
		echo "--- guest $n's output (last 30 lines):"
		grep -v '^sum ' "$VM_WORK/g$n.out" | tail -30 || true
		[ ! -s "$T/g$n.err" ] || cat "$T/g$n.err"
	done
	for g in a b; do
		[ -s "$T/gw-$g.log" ] || continue
		echo "--- gateway ${g^}'s log (last 20 lines):"
		tail -20 "$T/gw-$g.log"
	done
	exit 1
}
step() { echo "step $1: PASS ($2)"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

gw_listening() {
	ip netns exec "$VM_NS-$1" ss -Hltn "sport = :$2" 2>/dev/null | grep -q .
}

# gw_start G: union-nfsd of gateway G in its namespace, in a session of its
# own, until its NFS, MOUNT and portmapper ports listen; GW_PID[G] is its pid
# (ip netns exec, unshare and bash exec, so it is the job's)
gw_start() {
	local g=$1 i
	setsid ip netns exec "$VM_NS-$g" unshare -m --propagation private bash -c \
		"mount -t tmpfs -o mode=0755 tmpfs /run && exec '$UNION_NFSD' \
		--config='$T/gw.conf' --state-dir='$T/state-$g' --foreground" \
		</dev/null >>"$T/gw-$g.log" 2>&1 &
	GW_PID[$g]=$!
	for ((i = 0; i < 600; i++)); do # 60 s: a loaded machine
		gw_listening "$g" 2049 && gw_listening "$g" 20048 && gw_listening "$g" 111 && break
		kill -0 "${GW_PID[$g]}" 2>/dev/null || break
		sleep 0.1
	done
	gw_listening "$g" 2049 && gw_listening "$g" 20048 && gw_listening "$g" 111 ||
		fail "gateway ${g^} does not listen on ports 2049, 20048 and 111"
	[ "$(cat "/proc/${GW_PID[$g]}/comm" 2>/dev/null)" = union-nfsd ] ||
		fail "gateway ${g^}'s pid ${GW_PID[$g]} is not union-nfsd's"
}

# gw_stop G: SIGTERM, SIGKILL after 10 s; GW_STATUS is its exit status
gw_stop() {
	local pid=${GW_PID[$1]:-}
	GW_STATUS=
	[ -n "$pid" ] || return 0
	stop_pid "$pid" 10
	GW_STATUS=$STOP_STATUS
	GW_PID[$1]=
}

vm_net_up
vm_ns_add a "$GW_IP_A/24"
vm_ns_add b "$GW_IP_B/24"
it_on_exit 'gw_stop a; gw_stop b'
# takeover G: union-nfsctl takeover F on gateway G, as keepalived's notify
# script runs it on the gateway that became the address's master
takeover() {
	local out
	[ "$FO_LOCKS" != 0 ] || return 0
	out=$("$NFSCTL" --socket="$T/state-$1/ctl.sock" takeover "$FLOAT" 2>&1) ||
		fail "union-nfsctl takeover $FLOAT on ${1^}: $out"
	echo "${1^}: union-nfsctl takeover $FLOAT: $out"
}

ip -n "$VM_NS-a" addr add "$FLOAT/24" dev eth0
gw_start a
takeover a
echo "gateway A serves $FLOAT: $(grep -o 'portmapper on port 111.*' "$T/gw-a.log")"

# ask N LINE ERE [S]: LINE to guest N's agent; its answer (a line starting
# with LINE's first word and a result) must match ERE within S s (default 60);
# the answer is in ANSWER
ask() {
	local before
	before=$(wc -l <"$VM_WORK/g$1.out")
	vm_guest_send "$1" "$2"
	answer_after "$1" "$before" "${2%% *}" "$3" "${4:-60}"
}

# answer_after N LINES CMD ERE S: the first answer to CMD in guest N's
# output after its first LINES lines must match ERE
answer_after() {
	local n=$1 before=$2 i
	ANSWER=
	for ((i = 0; i < $5 * 10; i++)); do
		ANSWER=$(tail -n +"$((before + 1))" "$VM_WORK/g$n.out" |
			grep -E "^$3 (OK|EAGAIN|ERR|WAITING)" | head -1 || true)
		[ -z "$ANSWER" ] || break
		grep -q '^FAIL' "$VM_WORK/g$n.out" && break
		sleep 0.1
	done
	[[ "$ANSWER" =~ $4 ]] || fail "guest $n answered '${ANSWER:-nothing}' to $3, want /$4/"
}

# log_wait G ERE S: until a line of gateway G's log matches ERE (S s at most)
log_wait() {
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -qE "$2" "$T/gw-$1.log" && return 0
		sleep 0.1
	done
	fail "gateway ${1^} logged no line like /$2/ in $3 s"
}

# lockw_returned: whether guest 2's F_SETLKW has returned
lockw_returned() {
	tail -n +"$((LOCKW_LINE + 1))" "$VM_WORK/g2.out" | grep -qE '^lockw (OK|ERR|EAGAIN)'
}

# nlm_locks G: the NLM4_LOCK calls gateway G served
nlm_locks() {
	"$NFSCTL" --socket="$T/state-$1/ctl.sock" stats 2>/dev/null |
		awk '$2 == "NLM4_LOCK" { n += $3 } END { print n + 0 }'
}

vm_guest_start 1 "$HERE/guest_failover.sh" --server "$FLOAT" --export /clientexport \
	--file "$T/lock_agent" --file "$T/failover_writer" --file "$T/tools.tar" \
	--mem 384 --timeout 780
vm_guest_start 2 "$HERE/guest_failover.sh" --server "$FLOAT" --export /shared \
	--file "$T/lock_agent" --file "$T/tools.tar" --mem 384 --timeout 780
for n in 1 2; do
	vm_guest_expect "$n" '^agent READY|^FAIL' 300 && ! grep -q '^FAIL' "$VM_WORK/g$n.out" ||
		fail "guest $n's agent did not get ready"
done
echo "both guests ready after $((SECONDS - t0)) s"
grep -E '^mounted' "$VM_WORK/g1.out" | sed 's/^/guest 1: /'

# ---- lock_held
ask 1 "lock lockfile" '^lock OK$'
ask 2 "lock lockfile" '^lock EAGAIN$'
if [ "$FO_LOCKS" != 0 ]; then
	LOCKW_LINE=$(wc -l <"$VM_WORK/g2.out")
	ask 2 "lockw lockfile $G1" '^lockw WAITING$'
	sleep 2
	! lockw_returned || fail "guest 2's F_SETLKW returned while guest 1 held the lock"
	step lock_held "guest 1 holds the lock through A; guest 2's F_SETLK refused, its F_SETLKW waits"
else
	step lock_held "guest 1 holds the lock through A; guest 2's F_SETLK refused"
fi

# ---- failover
vm_guest_send 1 "work $FILES $WORK_MS"
vm_guest_expect 1 "^work progress $KILL_AT |^work (ERR|exit)|^FAIL" 300 ||
	fail "guest 1's workload did not get to file $KILL_AT"
grep -qE '^work (ERR|exit)|^FAIL' "$VM_WORK/g1.out" &&
	fail "guest 1's workload ended before the failover"
progress_before=$(grep -c '^work progress' "$VM_WORK/g1.out")
t_kill=$(now_ms)
kill -KILL "${GW_PID[a]}"
st=0
wait "${GW_PID[a]}" 2>/dev/null || st=$? # no "Killed" line from bash
GW_PID[a]=
[ "$st" = 137 ] || fail "gateway A exited $st, not by the SIGKILL"
# what keepalived does on B once A is silent: the address, then a
# gratuitous ARP, so that the guests' ARP caches name B's eth0
ip -n "$VM_NS-a" addr del "$FLOAT/24" dev eth0
ip -n "$VM_NS-b" addr add "$FLOAT/24" dev eth0
ip netns exec "$VM_NS-b" arping -q -U -c 2 -I eth0 "$FLOAT" ||
	fail "arping -U from gateway B failed"
# and its notify script: the service, then the takeover of the address
gw_start b
t_b_up=$(now_ms)
takeover b
echo "A SIGKILLed; $FLOAT on B, which serves $((t_b_up - t_kill)) ms after the kill"
for ((i = 0; i < 1200; i++)); do
	[ "$(grep -c '^work progress' "$VM_WORK/g1.out")" -gt "$progress_before" ] && break
	grep -qE '^work (ERR|exit)|^FAIL' "$VM_WORK/g1.out" && break
	sleep 0.1
done
[ "$(grep -c '^work progress' "$VM_WORK/g1.out")" -gt "$progress_before" ] ||
	grep -q '^work exit 0' "$VM_WORK/g1.out" ||
	fail "guest 1's workload made no progress through B in 120 s"
step failover "the workload went on through B $(($(now_ms) - t_kill)) ms after A's SIGKILL"
grep -E 'NSM' "$T/gw-b.log" | sed 's/^.*\] [a-z]*: /B: /' || true

# ---- reclaim, waiter
if [ "$FO_LOCKS" != 0 ]; then
	log_wait b 'NSM: grace period over' $((GRACE + 120))
	line=$(grep -E 'NSM: grace period over' "$T/gw-b.log" | tail -1)
	echo "B: ${line#*NSM: }"
	[[ "$line" =~ over:\ 1\ reclaim\ granted, ]] ||
		fail "want exactly 1 reclaim (guest 1's) in B's grace: '$line'"
	! lockw_returned || fail "guest 2's F_SETLKW returned in B's grace"
	step reclaim "guest 1's lock reclaimed in B's grace; guest 2 still waits"

	# B has guest 2's waiter once it had a LOCK beyond guest 1's reclaim and
	# the grace's refusals (guest 2's, every 5 s): one that came between the
	# grace's end and its line counts; else the next, lockd's 30 s poll
	refused=0
	[[ "$line" =~ granted,\ ([0-9]+)\ call ]] && refused=${BASH_REMATCH[1]}
	locks0=$(nlm_locks b)
	for ((i = 0; i < 450; i++)); do # 45 s
		n=$(nlm_locks b)
		[ "$n" -ge $((1 + refused + 1)) ] || [ "$n" -gt "$locks0" ] && break
		sleep 0.1
	done
	[ "$n" -ge $((1 + refused + 1)) ] || [ "$n" -gt "$locks0" ] ||
		fail "no LOCK came to B after its grace (guest 2's)"
	sleep 1
	! lockw_returned || fail "guest 2's F_SETLKW returned while guest 1 held the lock (after the grace)"
	ask 1 "unlock-wait lockfile" '^unlock-wait OK latency=' 120
	latency=${ANSWER#*latency=}
	answer_after 2 "$((LOCKW_LINE + 1))" lockw '^lockw OK waited=' 10
	echo "guest 2's F_SETLKW: granted $latency ms after guest 1's unlock; blocked ${ANSWER#*waited=} ms"
	[ "${latency%.*}" -le "$LOCKW_MAX_MS" ] ||
		fail "guest 2's F_SETLKW returned $latency ms after guest 1's unlock (limit $LOCKW_MAX_MS ms)"
	ask 2 "unlock lockfile" '^unlock OK$'
	step waiter "guest 2 waited through the grace and got the lock $latency ms after guest 1's unlock"
fi

# ---- workload, data_guest, data_disk
vm_guest_expect 1 '^work exit|^FAIL' 600 || fail "guest 1's workload did not end"
grep -E '^work (done|replay|ERR|exit)' "$VM_WORK/g1.out" | sed 's/^/guest 1: /'
! grep -qE '^work ERR' "$VM_WORK/g1.out" || fail "a call of the workload failed"
grep -q '^work exit 0$' "$VM_WORK/g1.out" || fail "the workload failed"
step workload "$(sed -n 's/^work done //p' "$VM_WORK/g1.out"), no call failed"

ask 1 check '^check OK' 300
step data_guest "read back through B: ${ANSWER#check OK }"
sed -n 's/^sum //p' "$VM_WORK/g1.out" >"$T/manifest"
[ "$(wc -l <"$T/manifest")" = "$FILES" ] || fail "guest 1 printed $(wc -l <"$T/manifest") sums, want $FILES"
out=$("$T/failover_writer" check "$S/clients/$G1/upper/w" "$T/manifest") ||
	fail "the upper on disk: $out"
step data_disk "the upper on disk: ${out#check OK }"

# ---- b_exit
for n in 1 2; do vm_guest_send "$n" end; done
for n in 1 2; do
	st=0
	vm_guest_wait "$n" 2>"$T/g$n.err" || st=$?
	[ "$st" = 0 ] || fail "guest $n ended with status $st"
done
gw_stop b
[ "$GW_STATUS" = 0 ] || fail "gateway B exited $GW_STATUS on SIGTERM (want 0)"
step b_exit "B exited 0 on SIGTERM"
echo "PASS: a write workload and a lock through $FLOAT across A's SIGKILL and" \
	"the address's move to B; total $((SECONDS - t0)) s"
