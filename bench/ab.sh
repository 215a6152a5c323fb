#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# ab.sh NFS_BENCH NAME=UNION_NFSD [NAME=UNION_NFSD ...] - two or more builds of
# union-nfsd side by side on one tree, their server CPU per operation compared.
# A NAME's value may carry options after the binary, for one build run two
# ways: on="build/union-nfsd --metrics=127.0.0.1:0" off=build/union-nfsd.
#
# For "did this change cost anything": every build serves the same lower
# layer (each with an upper, work and state dir of its own) at once, and
# nfs_bench's rows run against each in turn, N times, so that a machine whose
# load comes and goes weighs on every build alike.  Prints one line per run
# (nfs_bench's RESULT) and then, per row, the median server CPU per
# operation of each build and its ratio to the first one's.
#
# Env: N=8 rounds; ROWS="getattr lookup readdirplus read" (of those, and
# write: 1 GiB of sequential WRITE+COMMIT into a new file of the upper,
# removed after each run; mgetattr, mreaddirplus: GETATTR of 10,000 merged
# directories and whole listings of a directory of 10,000 merged ones, each
# made in the lower layer and in every build's upper; createremove, renames:
# 20,000 CREATE+REMOVE pairs and CREATE+RENAME+REMOVE triples, 32 in flight,
# and renames1 2,000 triples one at a time, durable, in a new directory of
# the upper; smallfiles: 10,000 x CREATE, 4 KiB WRITE, COMMIT, there too);
# TMPDIR (default
# /var/tmp) for the data: 10,000 files, 100,000 names and a 1 GiB file;
# PORT (default 31000): the first of the loopback ports taken, 10 a build.
# Root not needed.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: ab.sh NFS_BENCH NAME=UNION_NFSD NAME=UNION_NFSD..." >&2; exit 2; }
NB=$1
shift
N=${N:-8}
ROWS=${ROWS:-"getattr lookup readdirplus read"}
D=$(mktemp -d "${TMPDIR:-/var/tmp}/ab.XXXXXX")
declare -A BIN PORT PID
NAMES=()
for a in "$@"; do
	NAMES+=("${a%%=*}")
	BIN[${a%%=*}]=${a#*=}
done
cleanup() {
	for s in "${NAMES[@]}"; do
		[ -n "${PID[$s]:-}" ] && kill "${PID[$s]}" 2>/dev/null && wait "${PID[$s]}" 2>/dev/null
	done
	rm -rf "$D"
}
trap cleanup EXIT

# the data: bench/run.sh's plain layout (nfs_bench checks sizes and names)
mkdir -p "$D/lower/attr" "$D/lower/big" "$D/lower/seq" "$D/lower/wr"
python3 - "$D/lower" <<'PY'
import sys
r = sys.argv[1]
for i in range(10000):
    with open("%s/attr/f%05d" % (r, i), "wb") as f:
        f.truncate(i % 997)
for i in range(100000):
    open("%s/big/file%07d" % (r, i), "wb").close()
PY
[[ " $ROWS " == *" read "* ]] && "$NB" genfile "$D/lower/seq/data" 1073741824
# merged directories: each name a directory in the lower and in every upper
merged_dirs() {
	python3 - "$1" <<'PY'
import os, sys
r = sys.argv[1]
for i in range(10000):
    os.makedirs("%s/mattr/f%05d" % (r, i))
    os.makedirs("%s/mbig/file%07d" % (r, i))
PY
}
[[ " $ROWS " == *" m"* ]] && merged_dirs "$D/lower"

port=${PORT:-31000}
for s in "${NAMES[@]}"; do
	mkdir -p "$D/$s/up" "$D/$s/work" "$D/$s/state"
	[[ " $ROWS " == *" m"* ]] && merged_dirs "$D/$s/up"
	read -ra cmd <<<"${BIN[$s]}" # the binary, then its own options
	"${cmd[@]}" --lowerdir="$D/lower" --upperdir="$D/$s/up" --workdir="$D/$s/work" \
		--state-dir="$D/$s/state" --nfs-port=$port --mount-port=$((port + 1)) \
		--bind=127.0.0.1 --foreground --no-rpcbind \
		--clients='127.0.0.1(rw,no_root_squash,insecure)' >"$D/$s.out" 2>"$D/$s.err" &
	PID[$s]=$!
	PORT[$s]=$port
	port=$((port + 10))
done
for s in "${NAMES[@]}"; do
	for _ in $(seq 600); do grep -q listening "$D/$s.out" && break; sleep 0.1; done
	grep -q listening "$D/$s.out" || { echo "ab.sh: $s did not start" >&2; cat "$D/$s.err" >&2; exit 1; }
done

for i in $(seq "$N"); do
	for w in $ROWS; do
		case $w in
		getattr | lookup) args=(--depth=32 --dir=attr --files=10000 --count=400000 "$w") ;;
		readdirplus) args=(--dir=big --files=100000 --passes=20 readdirplus) ;;
		mgetattr) args=(--depth=32 --dir=mattr --files=10000 --count=400000 --dirs getattr) ;;
		mreaddirplus) args=(--dir=mbig --files=10000 --passes=100 readdirplus) ;;
		read) args=(--depth=16 --dir=seq --name=data --size=1073741824 read) ;;
		write) args=(--depth=16 --dir=wr --name=seq --size=1073741824 write) ;;
		createremove) args=(--depth=32 --dir=wr --name="cr$i" --count=20000 createremove) ;;
		renames) args=(--depth=32 --dir=wr --name="rn$i" --count=20000 renames) ;;
		renames1) args=(--depth=1 --dir=wr --name="ro$i" --count=2000 renames) ;;
		smallfiles) args=(--depth=32 --dir=wr --name="sf$i" --count=10000 smallfiles) ;;
		*) echo "ab.sh: unknown row $w" >&2; exit 2 ;;
		esac
		order=("${NAMES[@]}")
		# every other round the other way round: a build that runs after
		# another pays for what that one left (writeback, a cold cache)
		((i % 2)) || mapfile -t order < <(printf '%s\n' "${NAMES[@]}" | tac)
		for s in "${order[@]}"; do
			# writes start with no writeback of earlier rows under way
			[ "$w" != write ] || sync
			out=$("$NB" --nfs-port="${PORT[$s]}" --mount-port=$((PORT[$s] + 1)) --export=/ \
				--pid="${PID[$s]}" "${args[@]}" 2>&1 | grep '^RESULT') ||
				{ echo "ab.sh: $s $w failed" >&2; exit 1; }
			echo "$i $w $s $out" | tee -a "$D/results"
			[ "$w" != write ] || rm -f "$D/$s/up/wr/seq"
		done
	done
done

python3 - "$D/results" "${NAMES[@]}" <<'PY'
import re, statistics, sys
res, names = sys.argv[1], sys.argv[2:]
cpu = {}
for line in open(res):
    p = line.split()
    cpu.setdefault((p[1], p[2]), []).append(
        float(re.search(r"cpu_us_per_op=([0-9.]+)", line).group(1)))
print("median server CPU per operation (us; per MB for read), and against %s:" % names[0])
for w in dict.fromkeys(k[0] for k in cpu):
    base = statistics.median(cpu[(w, names[0])])
    cols = ["%s %.3f (%+.1f%%)" % (s, statistics.median(cpu[(w, s)]),
                                   100 * (statistics.median(cpu[(w, s)]) / base - 1))
            for s in names]
    print("  %-12s %s" % (w, "  ".join(cols)))
PY
