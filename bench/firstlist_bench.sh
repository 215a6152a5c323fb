#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# firstlist_bench.sh UNION_NFSD [N] - the first READDIRPLUS listing of a big
# merged directory, against a fresh state dir.
#
# Makes N names (default 1,000,000) in one directory merged from 2 lower
# layers (the first half plus 5% in the bottom one, the rest in the top
# one), starts union-nfsd on them with an empty state dir (the layer
# indexes are built before it listens, so the listing meets identities fixed
# ahead of serving), and lists the directory twice with readdir_bench
# (READDIRPLUS, dircount 16 KiB, maxcount 64 KiB, one call at a time): the
# first pass writes a node for every name, the second finds them all.  Then
# the state dir's size, and with GANESHA=1 NFS-Ganesha's two listings of the
# same N names in one plain directory (tests/integration/with_ganesha.sh,
# default settings, as bench/run.sh starts it).  PERF=FILE records the
# server (perf record -g) during the first pass.  Also says how much the
# server wrote during each listing (/proc/PID/io).  ERRLOG=FILE keeps the
# server's stderr.  Needs root.
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: firstlist_bench.sh UNION_NFSD [N]}")
N=${2:-1000000}
HERE=$(cd "$(dirname "$0")" && pwd)
IT=$HERE/../tests/integration
T=$(mktemp -d "${TMPDIR:-/var/tmp}/firstlist-bench.XXXXXX")
PID=
PERF_PID=
cleanup() {
	[ -n "$PERF_PID" ] && kill -INT "$PERF_PID" 2>/dev/null && wait "$PERF_PID" 2>/dev/null
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
cc -O2 -I"$IT" -o "$T/readdir_bench" "$HERE/readdir_bench.c" "$IT/nfs_raw.c" \
	$(pkg-config --cflags --libs libnfs)

python3 - "$T" "$N" "${GANESHA:-0}" <<'PY'
import os, sys, stat
top, n, plain = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def mk(d, a, b):
    os.makedirs(d, exist_ok=True)
    for i in range(a, b):
        os.mknod(os.path.join(d, "file%07d" % i), 0o644 | stat.S_IFREG)
h = n // 2
mk(top + "/l0", 0, min(n, h + n // 20))
mk(top + "/l1", h, n)
if plain:
    mk(top + "/plain", 0, n)
PY
sleep 1 # settled: the listing is cached from its first build

echo "$(uptime) ($(nproc) CPUs)"
mkdir -p "$T/state"
: >"$T/out"
t0=$(date +%s.%N)
"$UNION_NFSD" --nfs-port=0 --mount-port=0 --bind=127.0.0.1 --state-dir="$T/state" \
	--foreground --no-rpcbind --no-portmapper --lowerdir="$T/l1:$T/l0" \
	>"$T/out" 2>"${ERRLOG:-$T/err}" &
PID=$!
PORTS=
for _ in $(seq 2400); do
	PORTS=$(sed -n 's/^listening nfs=\([0-9]*\) mount=\([0-9]*\)$/\1 \2/p' "$T/out")
	[ -n "$PORTS" ] && break
	sleep 0.05
done
[ -n "$PORTS" ] || { echo "union-nfsd did not start" >&2; cat "$T/err" >&2; exit 1; }
echo "== union-nfsd, $N names merged from 2 layers, fresh state dir" \
	"(started in $(echo "$(date +%s.%N) - $t0" | bc) s, layer indexes built)"
# wrote: MB the server has written (write_bytes of /proc/PID/io) so far
wrote() { awk '/^write_bytes/ {printf "%.0f", $2 / 1048576}' "/proc/$PID/io"; }
w0=$(wrote)
if [ -n "${PERF:-}" ]; then
	perf record -g -F 999 -o "$PERF" -p "$PID" 2>/dev/null &
	PERF_PID=$!
	sleep 0.5
fi
"$T/readdir_bench" PLUS $PORTS / 1 "$PID" | sed 's/^pass 1/first /'
if [ -n "$PERF_PID" ]; then
	kill -INT "$PERF_PID"; wait "$PERF_PID" || true
	PERF_PID=
fi
w1=$(wrote)
"$T/readdir_bench" PLUS $PORTS / 1 "$PID" | sed 's/^pass 1/second/'
echo "server wrote $((w1 - w0)) MB during the first listing, $(($(wrote) - w1)) MB during the second"
echo "state dir: $(du -sm "$T/state" | cut -f1) MB;" \
	"$(cd "$T/state" && du -sm -- * | awk '{printf "%s %s MB  ", $2, $1}')"
kill "$PID"; wait "$PID" || true
PID=
if [ "${GANESHA:-0}" = 1 ]; then
	echo "== nfs-ganesha, $N names in one plain directory"
	bash "$IT/with_ganesha.sh" "$T/plain" sh -c \
		"'$T/readdir_bench' PLUS 2049 20048 '$T/plain' 2 \$(cat /run/ganesha-test/ganesha.pid)"
fi
echo "$(uptime)"
