#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# keepalived.sh UNION_NFSD UNION_NFSCTL - etc/keepalived.conf and
# etc/union-nfsd-ha at work (issue 30, docs/gateways.md part 3): keepalived
# moves a floating address between two union-nfsd gateways and its notify
# hooks move the address's lock state with it.
#
#   netns P-br: bridge br0 ─┬─ P-a  gateway A, 10.9.0.1, keepalived priority 150
#                           ├─ P-b  gateway B, 10.9.0.2, keepalived priority 100
#                           └─ P-c  a client host, 10.9.0.50
#   floating address 10.9.0.100/24; the gateways share T/shared (nsm-dir)
#
# Each gateway's keepalived runs with etc/keepalived.conf as it is but for
# the address, the priority and the script's path (a wrapper that gives
# union-nfsd-ha the gateway's union-nfsctl and control socket).  The address's
# lock record starts with one host recorded at state 5, as a gateway that
# died with clients' locks leaves it.  Steps, each "step NAME: PASS" or FAIL:
#   master      A gets the address; its notify_master's takeover takes the
#               record (state 7, 1 host to notify, grace); the client's
#               rpcinfo reaches the gateway's portmapper at the address
#   failover    A's union-nfsd is SIGKILLed: A's check fails, keepalived
#               drops the address, B gets it and takes the record over
#               (state 9) within FAILOVER_MAX_S of the kill; the client
#               reaches the address again
#   failback    A's union-nfsd started again: A's check passes, A (higher
#               priority) takes the address back: B's notify_backup gives
#               it up, A takes it over (state 11)
# Env: FAILOVER_MAX_S (default 45: a busy machine's keepalived timers and
# union-nfsd start), KA_KEEP=1 keep the temp dir.
# Exit: 0 pass, 1 fail, 77 skipped (not root).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: keepalived.sh UNION_NFSD UNION_NFSCTL}")
NFSCTL=$(realpath "${2:?usage: keepalived.sh UNION_NFSD UNION_NFSCTL}")
HERE=$(cd "$(dirname "$0")" && pwd)
ETC=$(cd "$HERE/../../etc" && pwd)
. "$HERE/lib.sh"
FAILOVER_MAX_S=${FAILOVER_MAX_S:-45}
VIP=10.9.0.100
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
for b in keepalived rpcinfo ip; do
	command -v "$b" >/dev/null || {
		echo "FAIL: $b missing (etc/install-deps.sh tests: keepalived, rpcbind, iproute2)"
		exit 1
	}
done
it_init keepalived
it_watchdog 270 # ctest TIMEOUT is 300
T=$IT_TMP
[ "${KA_KEEP:-0}" = 1 ] && it_on_exit "echo kept $T; IT_TMP=/nonexistent"
P=uka$$
NSS=()

fail() {
	echo "FAIL: $*"
	for g in a b; do
		echo "---- gateway $g: union-nfsd"
		tail -n 30 "$T/$g/server.log" 2>/dev/null || true
		echo "---- gateway $g: keepalived"
		tail -n 30 "$T/$g/keepalived.log" 2>/dev/null || true
	done
	exit 1
}
pass() { echo "step $1: PASS${2:+ ($2)}"; }

# ---- the network: a bridge and three hosts ----

netns_cleanup() {
	local ns p
	for ns in "${NSS[@]}"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
		ip netns del "$ns" 2>/dev/null || true
	done
}
it_on_exit netns_cleanup
ip netns add "$P-br"
NSS+=("$P-br")
ip -n "$P-br" link add br0 type bridge
ip -n "$P-br" link set br0 up
host_add() { # NAME ADDRESS
	ip netns add "$P-$1"
	NSS+=("$P-$1")
	ip -n "$P-br" link add "v$1" type veth peer name eth0 netns "$P-$1"
	ip -n "$P-br" link set "v$1" master br0 up
	ip -n "$P-$1" link set lo up
	ip -n "$P-$1" addr add "$2/24" dev eth0
	ip -n "$P-$1" link set eth0 up
}
host_add a 10.9.0.1
host_add b 10.9.0.2
host_add c 10.9.0.50

# ---- the gateways: union-nfsd, its HA script, keepalived ----

mkdir -p "$T/lower/d" "$T/shared/nsm"
echo served >"$T/lower/d/f"
# One host recorded through the address, at state 5 (nsm.c rule 1: hex keys).
host=$(printf 'client@10.9.0.50 via %s' "$VIP" | od -An -tx1 | tr -d ' \n')
printf 'union-nfsd-nsm 1\nstate 5\nhost %s\n' "$host" >"$T/shared/nsm/$VIP"

declare -A SRV_PIDS KA_PIDS
server_start() { # GATEWAY
	local g=$1
	mkdir -p "$T/$g/state"
	setsid ip netns exec "$P-$g" "$UNION_NFSD" --foreground --no-rpcbind \
		--lowerdir="$T/lower" --export=/ro --clients='10.9.0.0/24(ro)' \
		--state-dir="$T/$g/state" --control-socket="$T/$g/ctl.sock" \
		--nsm-dir="$T/shared/nsm" --grace-period=5 \
		</dev/null >>"$T/$g/server.log" 2>&1 &
	SRV_PIDS[$g]=$!
	for _ in $(seq 1 600); do
		grep -q '^listening nfs=' "$T/$g/server.log" 2>/dev/null && return 0
		kill -0 "${SRV_PIDS[$g]}" 2>/dev/null || fail "gateway $g's union-nfsd exited"
		sleep 0.1
	done
	fail "gateway $g's union-nfsd did not start in 60 s"
}
servers_stop() {
	local g
	for g in "${!SRV_PIDS[@]}"; do stop_pid "${SRV_PIDS[$g]}" 10; done
}
it_on_exit servers_stop

keepalived_start() { # GATEWAY PRIORITY
	local g=$1 conf=$T/$1/keepalived.conf ha=$T/$1/ha
	printf '#!/bin/sh\nUNION_NFSCTL=%s UNION_NFSD_SOCKET=%s exec %s "$@"\n' \
		"$NFSCTL" "$T/$g/ctl.sock" "$ETC/union-nfsd-ha" >"$ha"
	chmod 700 "$ha"
	# The example as shipped, but for the address, the priority and the
	# script's path: what an admin edits.
	sed -e "s|192\.0\.2\.10/24|$VIP/24|; s|192\.0\.2\.10|$VIP|g" \
		-e "s|^\( *priority\) 100 .*|\1 $2|" \
		-e "s|/usr/libexec/union-nfsd/union-nfsd-ha|$ha|g" \
		"$ETC/keepalived.conf" >"$conf"
	grep -q "priority $2" "$conf" || fail "keepalived.conf: priority not set"
	setsid ip netns exec "$P-$g" keepalived --dont-fork --log-console --log-detail \
		--vrrp --use-file="$conf" --pid="$T/$g/ka.pid" --vrrp_pid="$T/$g/vrrp.pid" \
		</dev/null >"$T/$g/keepalived.log" 2>&1 &
	KA_PIDS[$g]=$!
}
keepalived_stop() {
	local g
	for g in "${!KA_PIDS[@]}"; do stop_pid "${KA_PIDS[$g]}" 10; done
}
it_on_exit keepalived_stop

has_vip() { ip -n "$P-$1" -4 addr show dev eth0 | grep -q " $VIP/"; }
state_now() { sed -n 's/^state //p' "$T/shared/nsm/$VIP"; }
# wait_for SECONDS CMD...: 0 once CMD succeeds, 1 after SECONDS
wait_for() {
	local until=$((SECONDS + $1))
	shift
	while ! "$@"; do
		[ $SECONDS -lt $until ] || return 1
		sleep 0.2
	done
}
logged() { grep -q "$2" "$T/$1/server.log"; }
client_reaches() { ip netns exec "$P-c" timeout 10 rpcinfo -p "$VIP" 2>/dev/null | grep -q nfs; }

server_start a
server_start b
keepalived_start a 150
keepalived_start b 100

# ---- master ----
wait_for 60 has_vip a || fail "master: A never got $VIP"
wait_for 30 logged a "union-nfsctl takeover: $VIP taken over: state 7, 1 host to notify, grace period begins" ||
	fail "master: A's notify_master did not take $VIP over"
has_vip b && fail "master: B holds $VIP too"
[ "$(state_now)" = 7 ] || fail "master: record state $(state_now), not 7"
wait_for 20 client_reaches || fail "master: the client cannot reach $VIP's portmapper"
pass master

# ---- failover ----
t0=$SECONDS
kill -KILL "${SRV_PIDS[a]}"
wait "${SRV_PIDS[a]}" 2>/dev/null || true
unset 'SRV_PIDS[a]'
wait_for "$FAILOVER_MAX_S" logged b "union-nfsctl takeover: $VIP taken over: state 9" ||
	fail "failover: B did not take $VIP over within $FAILOVER_MAX_S s"
took=$((SECONDS - t0))
has_vip b || fail "failover: B took over without the address"
wait_for 10 bash -c "! ip -n $P-a -4 addr show dev eth0 | grep -q ' $VIP/'" ||
	fail "failover: A kept $VIP"
wait_for 20 client_reaches || fail "failover: the client cannot reach $VIP at B"
pass failover "B serves $VIP ${took} s after A's kill"

# ---- failback ----
server_start a
wait_for 60 logged b "NSM: address $VIP given up" ||
	fail "failback: B's notify_backup did not give $VIP up"
wait_for 30 logged a "union-nfsctl takeover: $VIP taken over: state 11" ||
	fail "failback: A did not take $VIP over again"
wait_for 10 has_vip a || fail "failback: A lacks $VIP"
has_vip b && fail "failback: B kept $VIP"
wait_for 20 client_reaches || fail "failback: the client cannot reach $VIP at A"
pass failback
echo "keepalived: all steps passed"
