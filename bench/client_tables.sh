#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# client_tables.sh UNION_NFSD CLIENT_TABLES [N...] - what open client unions
# cost a server, with and without a key file.
#
# One per-client export (upper T/c/%a/upper, work T/c/%a/work) over a lower
# layer holding a file and a dir, layer indexes on (the default).  For each
# N (default 50 200 500) and each mode, a fresh server and state dir:
#   keyed  --key-file (32 bytes, 0600): each client union keeps its node
#          table in its work dir (docs/gateways.md, part 2);
#   plain  no key file: every union's nodes in the main table.
# N clients (client_tables.c) each MNT, CREATE three files, and after the
# listing cache's settle time READDIRPLUS their root twice; their unions
# stay open.  Then one line per run, from /proc/PID, union-nfsctl and the
# metrics:
#   THREADS  the server's threads (/proc/PID/status)
#   FDS      its open descriptors
#   INOTIFY  its inotify instances (anon_inode:inotify among its fds)
#   RSS_KB   VmRSS
#   OPEN     client unions open (union-nfsctl status)
#   LHIT, LMISS  the listing cache's hits and misses (the metrics)
#   FLUSH/S  node table flushes a second while every client is idle (over
#          IDLE seconds, the metrics), and IDLE_CPU the server's CPU time
#          meanwhile, in percent of one CPU
#   NOWATCH  open unions whose listings found no inotify instance, so stat
#          every entry on every call: OPEN - INOTIFY when keyed and the
#          server holds more than one instance (one a table; the main table
#          lists nothing), 0 when one instance serves every table
# The inotify limit (fs.inotify.max_user_instances) is per user, shared
# with every other process of the server's user: printed with the number
# the others hold.  Needs root (source addresses, the control socket).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: client_tables.sh UNION_NFSD CLIENT_TABLES [N...]}")
CLIENT=$(realpath "${2:?usage: client_tables.sh UNION_NFSD CLIENT_TABLES [N...]}")
shift 2
NS=("$@")
[ ${#NS[@]} -gt 0 ] || NS=(50 200 500)
NFSCTL=$(dirname "$UNION_NFSD")/union-nfsctl
T=$(mktemp -d /tmp/client-tables.XXXXXX)
PID=
cleanup() {
	[ -z "$PID" ] || { kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true; }
	[ -n "${KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT

inotify_of() { find /proc/"$1"/fd -lname 'anon_inode:inotify' 2>/dev/null | wc -l; }
cpu_ticks() { awk '{print $14 + $15}' /proc/"$1"/stat; } # utime + stime
inotify_all() { find /proc/[0-9]*/fd -lname 'anon_inode:inotify' 2>/dev/null | wc -l; }

echo "date: $(date -u '+%F %H:%M UTC'); uptime: $(uptime)"
echo "commit: $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "inotify instances per user: $(cat /proc/sys/fs/inotify/max_user_instances)," \
	"held by other processes now: $(inotify_all)"
IDLE=${IDLE:-5}
printf '%-6s %5s %7s %6s %7s %8s %5s %6s %6s %7s %8s %8s\n' MODE N THREADS FDS INOTIFY \
	RSS_KB OPEN LHIT LMISS NOWATCH FLUSH/S IDLE_CPU

# run MODE N: one server, N clients, one line
run() {
	local mode=$1 n=$2 r=$T/run args ports st open lhit lmiss ino mport f0 f1 c0 c1
	rm -rf "$r"
	mkdir -p "$r/lower/d" "$r/c" "$r/state"
	echo lower >"$r/lower/f"
	args=(--lowerdir="$r/lower" --upperdir="$r/c/%a/upper" --workdir="$r/c/%a/work"
		--clients='127.0.0.0/8(rw,no_root_squash,insecure)' --log-level=warn
		--max-client-unions="$n")
	mport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	args+=(--metrics="127.0.0.1:$mport")
	if [ "$mode" = keyed ]; then
		head -c 32 /dev/urandom >"$r/key"
		chmod 0600 "$r/key"
		args+=(--key-file="$r/key")
	fi
	: >"$r/out"
	"$UNION_NFSD" --nfs-port=0 --mount-port=0 --bind=127.0.0.1 --state-dir="$r/state" \
		--foreground --no-rpcbind --no-portmapper "${args[@]}" >"$r/out" 2>"$r/err" &
	PID=$!
	ports=
	for _ in $(seq 200); do
		ports=$(sed -n 's/^listening nfs=\([0-9]*\) mount=.*$/\1/p' "$r/out")
		[ -n "$ports" ] && break
		sleep 0.05
	done
	[ -n "$ports" ] || { echo "union-nfsd did not start" >&2; cat "$r/err" >&2; exit 1; }
	"$CLIENT" "$ports" "$n" >"$r/client" || { echo "$mode $n: $(cat "$r/client")" >&2; }
	sleep 1
	st=$("$NFSCTL" --socket="$r/state/ctl.sock" --json status)
	open=$(jq '[.exports[].client_unions // 0] | add' <<<"$st")
	st=$(curl -s "http://127.0.0.1:$mport/metrics")
	lhit=$(awk '/^union_nfsd_listing_cache_hits_total/ {print $2}' <<<"$st")
	lmiss=$(awk '/^union_nfsd_listing_cache_misses_total/ {print $2}' <<<"$st")
	ino=$(inotify_of "$PID")
	f0=$(awk '/^union_nfsd_node_flush_seconds_count/ {print $2}' <<<"$st")
	c0=$(cpu_ticks "$PID")
	sleep "$IDLE"
	f1=$(curl -s "http://127.0.0.1:$mport/metrics" |
		awk '/^union_nfsd_node_flush_seconds_count/ {print $2}')
	c1=$(cpu_ticks "$PID")
	printf '%-6s %5s %7s %6s %7s %8s %5s %6s %6s %7s %8s %8s\n' "$mode" "$n" \
		"$(awk '/^Threads:/ {print $2}' /proc/"$PID"/status)" \
		"$(find /proc/"$PID"/fd | tail -n +2 | wc -l)" "$ino" \
		"$(awk '/^VmRSS:/ {print $2}' /proc/"$PID"/status)" "$open" "${lhit:-?}" \
		"${lmiss:-?}" \
		"$(if [ "$mode" = keyed ] && [ "$ino" -gt 1 ]; then
			echo $((open > ino ? open - ino : 0))
		else echo 0; fi)" \
		"$(((f1 - f0) / IDLE))" \
		"$(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v s="$IDLE" \
			'BEGIN {printf "%.1f%%", 100 * t / hz / s}')"
	kill "$PID"
	wait "$PID" 2>/dev/null || true
	PID=
}

for n in "${NS[@]}"; do
	run plain "$n"
	run keyed "$n"
done
