#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# fixed_moves.sh UNION_NFSD NFS_POKE - a fixed upper's handles move between
# gateways (issue 30, docs/gateways.md part 2): on servers given a key file,
# an export with a fixed upper keeps its nodes in its work dir's own table,
# as a client union does, so a handle of a file made through gateway A names
# that file on gateway B, which never saw it.
#
#   1. A (its own state dir, the key file) serves /fixed, whose upper and work
#      dir are in a dir both gateways reach; a client creates /a and /b
#      through A, and holds /a's handle (nfs_poke hold)
#   2. A is SIGKILLed; B starts on the same ports with a state dir of its own
#      and the same key file; a client creates /z through B (B's counter
#      would hand it the id A gave /a, were the nodes in B's own state)
#   3. the held handle, asked through B, answers GETATTR with /a's fileid and
#      READ with /a's bytes; /z's fileid is another
# Exit: 0 pass, 1 fail, 77 skipped (not root: the client binds a reserved
# port, as the server's default rule wants).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: fixed_moves.sh UNION_NFSD NFS_POKE}")
NFS_POKE=$(realpath "${2:?usage: fixed_moves.sh UNION_NFSD NFS_POKE}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (a reserved client port)"
it_init fixed_moves
it_watchdog 170 # ctest TIMEOUT is 200
T=$IT_TMP
fail() {
	echo "FAIL: $*"
	for f in "$T"/server.*.log; do
		echo "---- $f"
		tail -n 20 "$f"
	done
	exit 1
}

mkdir -p "$T/lower" "$T/shared/upper" "$T/shared/work" "$T/stateA" "$T/stateB"
(umask 077 && head -c 32 /dev/urandom >"$T/key")
COMMON=(--lowerdir="$T/lower" --upperdir="$T/shared/upper" --workdir="$T/shared/work"
	--export=/fixed --key-file="$T/key")

# ---- 1: A ----
start_union_nfsd "$UNION_NFSD" "${COMMON[@]}" --state-dir="$T/stateA"
PID_A=$SRV_PID
URL="nfs://127.0.0.1/fixed?nfsport=$NFS_PORT&mountport=$MOUNT_PORT&version=3"
"$NFS_POKE" "$URL" create /a >/dev/null || fail "create /a through A"
"$NFS_POKE" "$URL" create /b >/dev/null || fail "create /b through A"
echo "made by A" >"$T/shared/upper/a" # its bytes, to be read through B
mkfifo "$T/go"
"$NFS_POKE" "$URL" hold /a <"$T/go" >"$T/hold.out" 2>&1 &
HOLD=$!
it_on_exit "kill $HOLD 2>/dev/null || true"
exec 9>"$T/go" # the holder waits for a line on it
for _ in $(seq 1 200); do
	grep -q '^holding ' "$T/hold.out" && break
	sleep 0.05
done
FILEID_A=$(sed -n 's/^holding \([0-9]*\).*/\1/p' "$T/hold.out")
[ -n "$FILEID_A" ] || fail "nfs_poke hold /a: $(cat "$T/hold.out")"

# ---- 2: A dies, B serves ----
kill -KILL "$PID_A"
wait "$PID_A" 2>/dev/null || true
start_union_nfsd "$UNION_NFSD" "${COMMON[@]}" --state-dir="$T/stateB" \
	--nfs-port="$NFS_PORT" --mount-port="$MOUNT_PORT"
"$NFS_POKE" "$URL" create /z >/dev/null || fail "create /z through B"
FILEID_Z=$("$NFS_POKE" "$URL" fileid /z) || fail "fileid /z through B"

# ---- 3: A's handle through B ----
echo go >&9
exec 9>&-
wait "$HOLD" || fail "the held handle through B: $(cat "$T/hold.out")"
after=$(sed -n 's/^after: //p' "$T/hold.out")
[ "$after" = "ok $FILEID_A made by A" ] ||
	fail "A's handle of /a through B answered '$after', not 'ok $FILEID_A made by A'"
[ "$FILEID_Z" != "$FILEID_A" ] || fail "/z made through B has /a's fileid $FILEID_A"
echo "fixed_moves: /a's handle from A names /a on B (fileid $FILEID_A; /z $FILEID_Z)"
