#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# nfsctl.sh UNION_NFSD UNION_NFSCTL NFS_POKE - union-nfsctl against a running
# server (its control socket, server/ctl.c):
#
#  - status: version, ports, exports and their layers, as a table and as
#    JSON (--json parsed by python3);
#  - clients: a client that mounted shows in the mount list with its calls
#    and bytes (those of its address on the export), and its union of the
#    per-client export with its calls (the same), its memory and its upper's
#    size; status then shows that union's memory and the unions' limits;
#  - stats: the counters, the NFS calls made among them, and the calls by
#    export and client address;
#  - reload: a new lower layer in the config file is served after it, and
#    the replaced one is retired; a broken config file fails the reload
#    with one line and exit 1, the exports staying;
#  - reset: a client that holds handles of a file it made and of a lower
#    file; after `reset 127.0.0.1` the first answers stale, the second
#    still serves, its upper is empty and its made file gone; an unknown
#    client is an error;
#  - release: the retired layer, by name; a layer that is not retired is an
#    error;
#  - errors: an unknown command, a missing or extra argument, a socket
#    where none is: one stderr line "union-nfsctl: ..." and a non-zero
#    exit; a garbage request to the socket gets a one-line JSON error and
#    the server goes on;
#  - root only: another uid cannot connect (mode 0600); with the mode
#    opened, the server refuses it by its credentials and logs it.
# Exit: 0 all passed, 1 a check failed, 77 skipped (not root).
set -euo pipefail
UNION_NFSD=${1:?usage: nfsctl.sh UNION_NFSD UNION_NFSCTL NFS_POKE}
NFSCTL=${2:?usage: nfsctl.sh UNION_NFSD UNION_NFSCTL NFS_POKE}
NFS_POKE=${3:?usage: nfsctl.sh UNION_NFSD UNION_NFSCTL NFS_POKE}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (the control socket serves root only)"
command -v python3 >/dev/null || skip "needs python3 (to read --json)"
it_init nfsctl
it_watchdog 240 # ctest TIMEOUT is 300
T=$IT_TMP
chmod 755 "$T" # the other uid must reach the socket's directory
fails=0
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

mkdir -p "$T/v1" "$T/v2" "$T/base" "$T/up" "$T/work" "$T/pc"
echo one >"$T/v1/f"
echo two >"$T/v2/f"
echo "old bytes" >"$T/v1/changed" # another size: another object (layerid.c)
echo "new, longer bytes" >"$T/v2/changed"
echo base >"$T/base/b"
write_config() { # LOWER_OF_/ [BROKEN]
	cat >"$T/conf" <<-EOF
		[server]
		log-level = info
		${2:-}
		[export]
		path = /
		lowerdir = $1:$T/base
		upperdir = $T/up
		workdir = $T/work
		[export]
		path = /pc
		lowerdir = $T/base
		upperdir = $T/pc/%a/upper
		workdir = $T/pc/%a/work
	EOF
}
write_config "$T/v1"
SOCK=$T/ctl.sock
start_union_nfsd "$UNION_NFSD" --config="$T/conf" --control-socket="$SOCK"
CTL=("$NFSCTL" --socket="$SOCK")

# ok NAME CMD...: exit 0, output into $T/out
ok() {
	local name=$1 rc=0
	shift
	"$@" >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" = 0 ] || fail "$name: exit $rc: $(head -3 "$T/err")"
}
# refused NAME STATUS CMD...: exit STATUS, one stderr line "union-nfsctl: "
refused() {
	local name=$1 want=$2 rc=0
	shift 2
	"$@" >"$T/out" 2>"$T/err" || rc=$?
	if [ "$rc" != "$want" ]; then
		fail "$name: exit $rc, want $want ($(head -3 "$T/err"))"
	elif [ "$(wc -l <"$T/err")" != 1 ] || ! grep -q '^union-nfsctl: ' "$T/err"; then
		fail "$name: stderr is not one 'union-nfsctl: ' line: $(head -5 "$T/err")"
	fi
}
# jget EXPR: EXPR of the JSON reply in $T/out (python, the reply is r)
jget() {
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
		"$T/out" "$1"
}

# ---- status ----
[ "$(stat -c %a "$SOCK")" = 600 ] || fail "socket mode $(stat -c %a "$SOCK"), want 600"
ok status "${CTL[@]}" status
grep -q "^union-nfsd [0-9]" "$T/out" || fail "status: no version line: $(head -3 "$T/out")"
grep -q "ports: nfs $NFS_PORT, mount $MOUNT_PORT" "$T/out" ||
	fail "status: no ports line: $(cat "$T/out")"
grep -q "lower    $T/v1" "$T/out" || fail "status: no lower $T/v1: $(cat "$T/out")"
ok status_json "${CTL[@]}" --json status
[ "$(jget 'r["ports"]["nfs"]')" = "$NFS_PORT" ] || fail "status --json: nfs port"
[ "$(jget '[e["path"] for e in r["exports"]]')" = "['/', '/pc']" ] ||
	fail "status --json: exports $(jget 'r["exports"]')"
[ "$(jget 'r["exports"][0]["lowers"]')" = "['$T/v1', '$T/base']" ] ||
	fail "status --json: lowers $(jget 'r["exports"][0]["lowers"]')"
[ "$(jget 'r["exports"][1]["per_client"]')" = True ] || fail "status --json: /pc per client"

# ---- clients: a mount and a client union ----
"$NFS_POKE" "$(nfs_url /pc)" create /made >/dev/null || fail "nfs_poke create /pc/made"
"$NFS_POKE" "$(nfs_url /)" fileid /f >/dev/null || fail "nfs_poke fileid /f"
ok clients "${CTL[@]}" clients
grep -q "^127.0.0.1 .* /pc " "$T/out" || fail "clients: no mount of /pc: $(cat "$T/out")"
grep -Eq "$T/pc/127.0.0.1/upper +open +yes +[0-9]+s +[0-9]+ +[0-9.]+ KiB " "$T/out" ||
	fail "clients: no open union of /pc with its memory: $(cat "$T/out")"
# and in status: the open union's memory, the limits
ok status_unions "${CTL[@]}" status
grep -Eq "^  client unions open  1, holding [0-9.]+ KiB$" "$T/out" ||
	fail "status: no client union of /pc with its memory: $(cat "$T/out")"
grep -Eq "^client unions: at most [0-9]+ open, holding at most [0-9.]+ [KMGT]iB together, [0-9.]+ [KMGT]iB each$" "$T/out" ||
	fail "status: no limits of the client unions: $(cat "$T/out")"
ok status_unions_json "${CTL[@]}" --json status
[ "$(jget 'r["exports"][1]["client_unions"] == 1 and r["exports"][1]["client_unions_memory_bytes"] >= 12288')" = True ] ||
	fail "status --json: /pc's unions $(jget 'r["exports"][1]')"
[ "$(jget 'r["client_union_limits"]["max_open"] >= 16 and r["client_union_limits"]["union_bytes"] * r["client_union_limits"]["max_open"] <= r["client_union_limits"]["memory_bytes"]')" = True ] ||
	fail "status --json: limits $(jget 'r["client_union_limits"]')"
ok clients_json "${CTL[@]}" --json clients
# libnfs sends UMNT as it ends: /pc's MNT is on the list, / may not be
[ "$(jget '"/pc" in [m["path"] for m in r["mounts"]] and all(m["host"] == "127.0.0.1" and abs(m["since"] - __import__("time").time()) < 600 for m in r["mounts"])')" = True ] ||
	fail "clients --json: mounts $(jget 'r["mounts"]')"
[ "$(jget 'r["unions"][0]["upper"]')" = "$T/pc/127.0.0.1/upper" ] ||
	fail "clients --json: union $(jget 'r["unions"]')"
[ "$(jget 'r["unions"][0]["calls"] > 0 and r["unions"][0]["upper_entries"] >= 2')" = True ] ||
	fail "clients --json: calls and upper size $(jget 'r["unions"]')"
# its memory: at least the mapping of the union and its buckets (12 KiB)
[ "$(jget '12288 <= r["unions"][0]["memory_bytes"] < 1 << 20')" = True ] ||
	fail "clients --json: memory $(jget 'r["unions"]')"
# the mount's calls are its address's on /pc: all of them its union's
[ "$(jget '[(m["calls"], m["read_bytes"], m["written_bytes"]) for m in r["mounts"] if m["path"] == "/pc"] == [(r["unions"][0]["calls"], 0, 0)]')" = True ] ||
	fail "clients --json: the mount's calls $(jget 'r["mounts"]'), union's $(jget 'r["unions"][0]["calls"]')"
pc_calls=$(jget 'r["unions"][0]["calls"]')
ok clients "${CTL[@]}" clients
grep -Eq "^127.0.0.1 +/pc +[0-9-]+ [0-9:]+ +$pc_calls +0 B +0 B\$" "$T/out" ||
	fail "clients: no calls of the mount of /pc ($pc_calls): $(cat "$T/out")"

# ---- stats ----
ok stats "${CTL[@]}" stats
grep -Eq '^NFS3 +CREATE +[1-9]' "$T/out" || fail "stats: no CREATE calls: $(head -20 "$T/out")"
grep -Eq '^nodes +[1-9]' "$T/out" || fail "stats: no nodes counter: $(cat "$T/out")"
grep -Eq "^/pc +127.0.0.1 +$pc_calls +0 B +0 B\$" "$T/out" ||
	fail "stats: no calls of 127.0.0.1 on /pc ($pc_calls): $(cat "$T/out")"
ok stats_json "${CTL[@]}" --json stats
[ "$(jget 'sum(s["value"] for s in r["samples"] if s["name"] == "union_nfsd_rpc_calls_total" and s["labels"]["procedure"] == "MNT")')" -ge 2 ] ||
	fail "stats --json: MNT calls"
[ "$(jget '[s["value"] for s in r["samples"] if s["name"] == "union_nfsd_client_calls_total" and s["labels"] == {"export": "/pc", "client": "127.0.0.1"}]')" = "[$pc_calls]" ] ||
	fail "stats --json: calls of 127.0.0.1 on /pc, want $pc_calls"

# ---- a reload that fails after it prepared the new stacks ----
# / over v2 (prepared: its index built) and /pc exported twice, which the
# table check refuses: the stack records stay as they were, nothing is
# retired (exports/table.c invariant 2), and v1 is retired by the next reload
mkfifo "$T/held_f.in"
"$NFS_POKE" "$(nfs_url /)" hold /changed <"$T/held_f.in" >"$T/held_f.out" 2>&1 &
echo $! >"$T/held_f.pid"
exec 7>"$T/held_f.in"
for _ in $(seq 100); do grep -q holding "$T/held_f.out" && break; sleep 0.1; done
mkdir "$T/records"
cp "$IT_TMP"/state/layers/stack-* "$T/records/"
write_config "$T/v2" "$(printf '[export]\npath = /pc\nlowerdir = %s' "$T/base")"
refused reload_twice 1 "${CTL[@]}" reload
grep -q "reload failed.*exported twice" "$T/err" || fail "reload_twice: said $(cat "$T/err")"
[ "$(cd "$IT_TMP/state/layers" && ls stack-*)" = "$(cd "$T/records" && ls)" ] ||
	fail "failed reload: stack records $(ls "$IT_TMP/state/layers")"
for r in "$T"/records/stack-*; do
	cmp -s "$r" "$IT_TMP/state/layers/${r##*/}" ||
		fail "failed reload: ${r##*/} changed: $(cat "$IT_TMP/state/layers/${r##*/}")"
done
ok status_failed "${CTL[@]}" --json status
[ "$(jget 'r["retired"]')" = "[]" ] || fail "failed reload: retired $(jget 'r["retired"]')"
[ "$(jget 'r["exports"][0]["lowers"][0]')" = "$T/v1" ] || fail "failed reload: lowers changed"

# ---- reload: v1 replaced by v2 (retired), then a broken config ----
write_config "$T/v2"
ok reload "${CTL[@]}" reload
grep -q "^reloaded: 2 exports$" "$T/out" || fail "reload: said $(cat "$T/out")"
"$NFS_POKE" "$(nfs_url /)" fileid /f >/dev/null 2>&1 || fail "after reload: /f not served"
ok status_retired "${CTL[@]}" --json status
[ "$(jget 'r["exports"][0]["lowers"][0]')" = "$T/v2" ] || fail "reload: lowers not v2"
[ "$(jget '[l["layer"] for l in r["retired"]]')" = "['$T/v1']" ] ||
	fail "reload: retired $(jget 'r["retired"]')"
echo go >&7
exec 7>&-
wait "$(cat "$T/held_f.pid")" || true
grep -q "^after: ok [0-9]* old bytes$" "$T/held_f.out" ||
	fail "reload: the held handle of /changed does not read v1: $(cat "$T/held_f.out")"
write_config "$T/v2" "no-such-key = 1"
refused reload_broken 1 "${CTL[@]}" reload
grep -q "reload failed.*no-such-key" "$T/err" || fail "reload_broken: said $(cat "$T/err")"
ok status_after_broken "${CTL[@]}" --json status
[ "$(jget 'len(r["exports"])')" = 2 ] || fail "broken reload changed the exports"

# ---- reset: while a client holds handles ----
# hold PATH NAME: nfs_poke holding PATH open on /pc, its stdin the fifo
# $T/NAME.in (kept open on fd 9 or 8 by the caller), output in $T/NAME.out
hold() {
	mkfifo "$T/$2.in"
	"$NFS_POKE" "$(nfs_url /pc)" hold "$1" <"$T/$2.in" >"$T/$2.out" 2>&1 &
	echo $! >"$T/$2.pid"
}
hold /made held_made
exec 9>"$T/held_made.in"
hold /b held_lower
exec 8>"$T/held_lower.in"
for _ in $(seq 100); do
	grep -q holding "$T/held_made.out" && grep -q holding "$T/held_lower.out" && break
	sleep 0.1
done
ok reset "${CTL[@]}" reset 127.0.0.1
grep -q "^reset 127.0.0.1: 1 union reset" "$T/out" || fail "reset: said $(cat "$T/out")"
echo go >&9
echo go >&8
exec 9>&- 8>&-
wait "$(cat "$T/held_made.pid")" "$(cat "$T/held_lower.pid")" || true
grep -qi "^after: .*stale" "$T/held_made.out" ||
	fail "reset: the held handle of /made: $(cat "$T/held_made.out")"
grep -q "^after: ok" "$T/held_lower.out" ||
	fail "reset: the held handle of lower /b: $(cat "$T/held_lower.out")"
[ -z "$(ls -A "$T/pc/127.0.0.1/upper")" ] ||
	fail "reset: upper not empty: $(ls -A "$T/pc/127.0.0.1/upper")"
"$NFS_POKE" "$(nfs_url /pc)" fileid /made >/dev/null 2>&1 && fail "reset: /made still served"
refused reset_unknown 1 "${CTL[@]}" reset 192.0.2.9

# ---- release ----
refused release_unknown 1 "${CTL[@]}" release "$T/nowhere"
ok release "${CTL[@]}" release "$T/v1"
grep -q "^released 1 retired layer$" "$T/out" || fail "release: said $(cat "$T/out")"
grep -q "retired layer $T/v1 released (by an admin)" "$SRV_LOG" ||
	fail "release: no log line"
ok status_released "${CTL[@]}" --json status
[ "$(jget 'r["retired"]')" = "[]" ] || fail "release: still retired $(jget 'r["retired"]')"

# ---- errors ----
refused no_command 2 "${CTL[@]}"
refused unknown_command 2 "${CTL[@]}" frobnicate
refused extra_arg 2 "${CTL[@]}" status now
refused reset_no_client 2 "${CTL[@]}" reset
refused no_socket 1 "$NFSCTL" --socket="$T/none.sock" status
reply=$(printf 'frobnicate\n' | timeout 10 python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(sys.stdin.buffer.read()); s.shutdown(socket.SHUT_WR)
print(b"".join(iter(lambda: s.recv(4096), b"")).decode())' "$SOCK")
[ "$(echo "$reply" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["ok"], r["error"])')" = "False unknown command 'frobnicate'" ] ||
	fail "raw garbage: reply $reply"
ok status_after_garbage "${CTL[@]}" status

# ---- root only ----
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
refused nonroot_mode 1 "${NOBODY[@]}" "${CTL[@]}" status
grep -q "Permission denied" "$T/err" || fail "nonroot_mode: said $(cat "$T/err")"
chmod 666 "$SOCK" # as if an admin opened it: the credentials still count
refused nonroot_cred 1 "${NOBODY[@]}" "${CTL[@]}" status
grep -q "serves root only" "$T/err" || fail "nonroot_cred: said $(cat "$T/err")"
grep -q "control socket: refused uid 65534" "$SRV_LOG" || fail "nonroot_cred: no log line"
chmod 600 "$SOCK"
ok status_end "${CTL[@]}" status

kill -0 "$SRV_PID" || fail "the server died"
stop_pid "$SRV_PID"
[ ! -e "$SOCK" ] || fail "the socket outlived the server"
if [ "$fails" != 0 ]; then
	echo "--- server log"
	cat "$SRV_LOG"
	echo "nfsctl: $fails check(s) failed"
	exit 1
fi
echo "nfsctl: all passed"
