#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# readdir_bench.sh UNION_NFSD [N] - READDIRPLUS throughput of a merged listing.
#
# Lists a directory of N names (default 100,000) with readdir_bench.c over
# loopback TCP, PASSES passes each (default 5; the medians leave out the
# first, which builds and fills what the servers cache), with the server's
# CPU time per entry beside the wall rate:
#   union-nfsd, 1 lower layer holding the N names;
#   union-nfsd, 4 lower layers (each a quarter plus 5% overlap with the next);
#   nfs-ganesha (VFS FSAL, tests/integration/with_ganesha.sh) exporting the
#   1-layer directory as a plain directory;
# then the resident memory of union-nfsd before and after READDIR of a
# 1,000,000-name directory (the listing is cached; READDIR also puts the node
# ids in the node table).  Needs root (mknod speed, ganesha namespaces).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: readdir_bench.sh UNION_NFSD [N]}")
N=${2:-100000}
PASSES=${PASSES:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
IT=$HERE/../tests/integration
T=$(mktemp -d /tmp/readdir-bench.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT
cc -O2 -I"$IT" -o "$T/readdir_bench" "$HERE/readdir_bench.c" "$IT/nfs_raw.c" \
	$(pkg-config --cflags --libs libnfs)

python3 - "$T" "$N" <<'PY'
import os, sys, stat
top, n = sys.argv[1], int(sys.argv[2])
def mk(d, a, b):
    os.makedirs(d, exist_ok=True)
    for i in range(a, b):
        os.mknod(os.path.join(d, "file%07d" % i), 0o644 | stat.S_IFREG)
mk(top + "/one", 0, n)
q = n // 4
for k in range(4):
    mk(top + "/four/l%d" % k, k * q, min(n, (k + 1) * q + n // 20))
PY
sleep 1 # settled: the listing is cached from its first build

# start_server NAME ARGS...: union-nfsd with its own state dir; sets PORTS, PID
start_server() {
	local name=$1
	shift
	mkdir -p "$T/state-$name"
	: >"$T/out-$name" # exists before the server opens it: the loop below reads it
	"$UNION_NFSD" --nfs-port=0 --mount-port=0 --bind=127.0.0.1 \
		--state-dir="$T/state-$name" --foreground --no-rpcbind --no-portmapper "$@" \
		>"$T/out-$name" 2>"$T/err-$name" &
	PID=$!
	PIDS+=("$PID")
	for _ in $(seq 200); do
		PORTS=$(sed -n 's/^listening nfs=\([0-9]*\) mount=\([0-9]*\)$/\1 \2/p' "$T/out-$name")
		[ -n "$PORTS" ] && return 0
		sleep 0.05
	done
	echo "union-nfsd $name did not start" >&2
	cat "$T/err-$name" >&2
	return 1
}

# The machine may be shared: say how busy it was.
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"

echo "== union-nfsd, 1 layer, $N names, READDIRPLUS"
start_server one --lowerdir="$T/one"
"$T/readdir_bench" PLUS $PORTS / "$PASSES" "$PID"
kill "$PID"; wait "$PID" || true

echo "== union-nfsd, 4 layers, $N names merged, READDIRPLUS"
start_server four --lowerdir="$T/four/l0:$T/four/l1:$T/four/l2:$T/four/l3"
"$T/readdir_bench" PLUS $PORTS / "$PASSES" "$PID"
kill "$PID"; wait "$PID" || true

echo "== nfs-ganesha, plain directory of $N names, READDIRPLUS"
bash "$IT/with_ganesha.sh" "$T/one" sh -c \
	"'$T/readdir_bench' PLUS 2049 20048 '$T/one' $PASSES \$(cat /run/ganesha-test/ganesha.pid)"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ "${SKIP_MILLION:-0}" != 1 ]; then
	echo "== union-nfsd memory for a cached 1,000,000-name listing"
	python3 - "$T/million" <<'PY'
import os, sys, stat
d = sys.argv[1]
os.makedirs(d)
for i in range(1000000):
    os.mknod(os.path.join(d, "file%07d" % i), 0o644 | stat.S_IFREG)
PY
	sleep 1
	start_server million --lowerdir="$T/million"
	rss() { awk '/^(VmRSS|RssAnon|RssFile)/ {printf "%s %d MB  ", $1, $2 / 1024}' \
		"/proc/$PID/status"; }
	echo "before: $(rss)"
	"$T/readdir_bench" PLAIN $PORTS / 2
	echo "after:  $(rss)"
	echo "(RssAnon: the cached listing - names, entries and the nodes READDIR asked"
	echo " for - plus what malloc keeps of the build; RssFile: node table pages,"
	echo " $(du -sm "$T/state-million" | cut -f1) MB on disk)"
	kill "$PID"; wait "$PID" || true
fi
