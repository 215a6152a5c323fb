#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# reload_bench.sh UNION_NFSD [N] - how long a reload that replaces a lower
# layer of N files (default 100,000, in 200 directories) takes: from SIGHUP
# to the server's "reloaded" line, which comes after the new layer's index
# is built (inheriting from the old one's) and the stack is swapped.
#
# Rounds (ROUNDS, default 3), each on a fresh state dir: the server starts on
# layer v1 (its fresh index built at start, timed from the start to its
# "listening" line), then reloads onto v2, a `cp -a` copy of v1 beside it
# (every object unchanged), then onto v3, a copy with 5% of the files
# rewritten and 5% removed.  Prints each time and the medians.  The trees
# are made once, in $TMPDIR; the page cache holds them (a cold disk adds its
# reads).  Needs nothing but union-nfsd; no client is involved.
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: reload_bench.sh UNION_NFSD [N]}")
N=${2:-100000}
ROUNDS=${ROUNDS:-3}
T=$(mktemp -d "${TMPDIR:-/tmp}/reload-bench.XXXXXX")
PID=
cleanup() {
	[ -z "$PID" ] || { kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; } || true
	rm -rf "$T"
}
trap cleanup EXIT

python3 - "$T" "$N" <<'PY'
import os, sys
top, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(top, "v1", "d%03d" % (i % 200))
    if i < 200:
        os.makedirs(d)
    with open(os.path.join(d, "f%06d" % i), "w") as f:
        f.write("x" * (i % 64))
PY
cp -a "$T/v1" "$T/v2"
cp -a "$T/v1" "$T/v3"
python3 - "$T/v3" "$N" <<'PY'
import os, sys
top, n = sys.argv[1], int(sys.argv[2])
for i in range(0, n, 20):  # 5% rewritten, 5% removed
    p = os.path.join(top, "d%03d" % (i % 200), "f%06d" % i)
    with open(p, "w") as f:
        f.write("changed")
    os.unlink(os.path.join(top, "d%03d" % ((i + 1) % 200), "f%06d" % (i + 1)))
PY

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# wait_line PATTERN COUNT: until the log holds COUNT lines matching PATTERN
wait_line() {
	while [ "$(grep -c "$1" "$T/log" || true)" -lt "$2" ]; do
		kill -0 "$PID" 2>/dev/null || { cat "$T/log"; exit 1; }
		sleep 0.01
	done
}
conf() { printf '[export]\npath = /\nlowerdir = %s\n' "$T/$1" >"$T/conf"; }

starts=() copies=() versions=()
for ((r = 1; r <= ROUNDS; r++)); do
	rm -rf "$T/state"
	conf v1
	t0=$(now)
	"$UNION_NFSD" --config="$T/conf" --state-dir="$T/state" --nfs-port=0 --mount-port=0 \
		--bind=127.0.0.1 --foreground --no-rpcbind --no-portmapper >"$T/log" 2>&1 &
	PID=$!
	wait_line '^listening' 1
	starts+=("$(since "$t0")")
	for v in v2 v3; do
		conf "$v"
		n=$(grep -c 'reloaded:' "$T/log" || true)
		t0=$(now)
		kill -HUP "$PID"
		wait_line 'reloaded:' $((n + 1))
		t=$(since "$t0")
		[ "$v" = v2 ] && copies+=("$t") || versions+=("$t")
	done
	kill "$PID" && wait "$PID" || true
	PID=
	echo "round $r: start ${starts[-1]} s, reload onto a copy ${copies[-1]} s," \
		"onto a new version ${versions[-1]} s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
echo "median of $ROUNDS, $N files: start $(median "${starts[@]}") s," \
	"reload onto a copy $(median "${copies[@]}") s, onto a new version $(median "${versions[@]}") s"
grep -E 'layer index: built' "$T/log" | sed 's/^.*info: /last round: /'
