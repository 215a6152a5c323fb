#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# diff_oracle.sh UNION_NFSD DIFF_ORACLE [SEEDS [COUNT]] - the differential test of
# writable unions against kernel overlayfs (issue 3).
#
# For each seed: generate layers (diff_oracle gen), copy them (A for union-nfsd,
# B for the kernel), mount B with overlayfs, serve A with union-nfsd, and run
# COUNT random operations on both (diff_oracle run: every result must match, and
# the whole trees now and then and at the end).  Then stop union-nfsd, compare
# the two uppers on disk (diff_oracle uppers: opaque marks, white-outs, directory
# modes), mount A's lowers and the upper union-nfsd wrote with overlayfs, and
# compare that tree with B's: the upper must mean the same to the kernel.
#
#   SEEDS  a count N (seeds 1..N) or a list ("3 17 42", "3,17", "42,"); default
#          30, or $SEEDS
#   COUNT  operations per seed; default 400, or $COUNT
#   $SEED_BASE    added to each seed of a count (a different set of N seeds)
#   $CHECK_EVERY  whole-tree comparison every so many ops (default 25)
#   $KEEP=1       keep a failing seed's layers, trace and server log
#   $STOP_ON_FAIL=1  stop at the first failing seed (default: run them all)
#   $REPLAY=TRACE run the ops of a trace file instead of drawing them (with
#                 one seed: the seed that generates the layers)
#   $MINIMIZE=1   reduce each failing seed's trace to a short reproduction
#                 (delta debugging, every candidate replayed from fresh layers)
#   $VERBOSE=1    log every op and both results in the seed's run.out
#   $WEIGHTS=link=0,rename=30  change how often ops are drawn (diff_oracle run
#                 --weights): focus on some, or leave out one with a known bug
#   $LOWER_HARDLINKS=1  lower layers with hard links (diff_oracle gen
#                 --hardlinks); off by default: overlayfs with index=off breaks
#                 them on copy-up, a quirk union-nfsd need not share
#   $DIFF_WATCHDOG  stop the run (cleanly: every mount, process and temp dir)
#                 after so many seconds; default 1320, below the ctest
#                 TIMEOUT (1500), whose SIGKILL no trap survives; 0: none
#   $DIFF_SERVER=ganesha  serve A through nfs-ganesha exporting an overlayfs
#                 mount of A instead (a check of the harness against a known
#                 server; skips the second-mount comparison, and ignores two
#                 deviations of that setup: symlink times, and the index link
#                 overlayfs' nfs_export adds to nlink)
#
# A mismatch prints the seed, the op index, the op, both results and a trace
# (every op, replayable: diff_oracle run --replay TRACE ...).  Mounts, processes
# (by pid) and temp dirs are cleaned up on exit, failure and signals; the
# script runs in a mount namespace of its own, so that even a SIGKILL leaves
# no overlay mount behind, and its server and clients die with it (pdeathsig).
# Exit: 0 all seeds agree, 1 a seed differs or the server failed, 77 skipped.
set -euo pipefail
UNION_NFSD=${1:?usage: diff_oracle.sh UNION_NFSD DIFF_ORACLE [SEEDS [COUNT]]}
DIFF_ORACLE=${2:?usage: diff_oracle.sh UNION_NFSD DIFF_ORACLE [SEEDS [COUNT]]}
SEEDS=${3:-${SEEDS:-30}}
COUNT=${4:-${COUNT:-400}}
SEED_BASE=${SEED_BASE:-0}
CHECK_EVERY=${CHECK_EVERY:-25}
DIFF_SERVER=${DIFF_SERVER:-union-nfsd}
OVL_OPTS=redirect_dir=off,index=off,metacopy=off,xino=off
GANESHA_OVL_OPTS=redirect_dir=off,index=on,nfs_export=on,metacopy=off

if [ "$(id -u)" != 0 ]; then
	echo "SKIP: needs root (mount, mknod, trusted.* xattrs)"
	exit 77
fi
if ! grep -qw overlay /proc/filesystems && ! modprobe overlay 2>/dev/null; then
	echo "SKIP: no overlayfs in this kernel"
	exit 77
fi
if [ "${DIFF_ORACLE_INNER:-}" != $$ ]; then
	# a private mount namespace (exec keeps the pid ctest waits for); ganesha
	# 4.3 needs an rpcbind: a private one, in a private network namespace too
	net=()
	[ "$DIFF_SERVER" = ganesha ] && net=(-n)
	DIFF_ORACLE_INNER=$$ exec unshare -m "${net[@]}" --propagation private bash "$0" "$@"
fi
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh" # it_watchdog; this script's own stop_pid below replaces lib.sh's

# ---- cleanup: every mount, process and temp dir we made, in reverse ----
TMP=$(mktemp -d /tmp/union-nfsd-diff.XXXXXX)
MOUNTS=()
PIDS=()
KEEP_DIRS=()
cleanup() {
	local rc=$? i
	trap - EXIT INT TERM HUP
	[ -z "${IT_WATCHDOG:-}" ] || kill "$IT_WATCHDOG" 2>/dev/null || true
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[i]}"; done
	for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do unmount "${MOUNTS[i]}"; done
	if [ ${#KEEP_DIRS[@]} = 0 ]; then
		rm -rf "$TMP"
	else
		echo "kept for inspection: ${KEEP_DIRS[*]}"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# stop_pid PID: SIGTERM, 30 s, SIGKILL; STOP_STATUS = its exit status
stop_pid() {
	local pid=$1 i
	STOP_STATUS=
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 600; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "pid $pid ignored SIGTERM for 30 s: SIGKILL" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	wait "$pid" 2>/dev/null && STOP_STATUS=0 || STOP_STATUS=$?
	forget_pid "$pid"
}

forget_pid() {
	local p keep=()
	for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

unmount() {
	mountpoint -q "$1" 2>/dev/null || return 0
	umount "$1" 2>/dev/null || umount -l "$1" || true
}

# mount_overlay DIR UPPER WORK MNT [EXTRA_OPTS]: DIR's lowers l1..lK
mount_overlay() {
	local lowers
	lowers=$(ls -d "$1"/l[0-9] | paste -sd:)
	mkdir -p "$4"
	mount -t overlay overlay \
		-o "lowerdir=$lowers,upperdir=$2,workdir=$3,${5:-$OVL_OPTS}" "$4"
	MOUNTS+=("$4")
}

# ---- the servers ----

# start_union_nfsd SEEDDIR: sets SRV_PID, URL
start_union_nfsd() {
	local d=$1 i line=
	local lowers
	lowers=$(ls -d "$d"/A/l[0-9] | paste -sd:)
	mkdir -p "$d/state"
	setpriv --pdeathsig TERM "$UNION_NFSD" --nfs-port=0 --mount-port=0 --bind=127.0.0.1 --no-rpcbind --no-portmapper \
		--state-dir="$d/state" --foreground --lowerdir="$lowers" \
		--upperdir="$d/A/u" --workdir="$d/A/w" >"$d/server.out" 2>"$d/server.log" &
	SRV_PID=$!
	PIDS+=("$SRV_PID")
	for ((i = 0; i < 1200; i++)); do # 60 s
		line=$(grep -m1 '^listening ' "$d/server.out" 2>/dev/null || true)
		[ -n "$line" ] && break
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.05
	done
	if [[ ! $line =~ ^listening\ nfs=([0-9]+)\ mount=([0-9]+)$ ]]; then
		echo "union-nfsd did not start (got '$line'); its log:"
		tail -20 "$d/server.log"
		return 1
	fi
	URL="nfs://127.0.0.1/?nfsport=${BASH_REMATCH[1]}&mountport=${BASH_REMATCH[2]}&version=3"
}

ganesha_setup() {
	ip link set lo up
	mount -t tmpfs -o mode=0755 tmpfs /run # private: this mount namespace only
	mkdir -p /run/ganesha
	setpriv --pdeathsig TERM rpcbind -f &
	PIDS+=("$!")
	for _ in $(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.05; done
	GANESHA_PLUGINS=$(dirname "$(dpkg -L nfs-ganesha-vfs 2>/dev/null | grep 'libfsalvfs.so$' | head -1)")
}

# start_ganesha SEEDDIR: exports an overlayfs mount of A (nfs_export=on lets
# ganesha's VFS FSAL open it by handle); sets SRV_PID, URL
start_ganesha() {
	local d=$1 g=$1/ganesha
	mount_overlay "$d/A" "$d/A/u" "$d/A/w" "$d/mA" "$GANESHA_OVL_OPTS"
	mkdir -p "$g/recovery"
	cat >"$g/ganesha.conf" <<-CONF
		NFS_CORE_PARAM { Protocols = 3; NFS_Port = 2049; MNT_Port = 20048;
			Enable_NLM = false; Enable_RQUOTA = false; Enable_UDP = false;
			Plugins_Dir = $GANESHA_PLUGINS; }
		NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = $g/recovery; }
		LOG { Default_Log_Level = EVENT; }
		EXPORT { Export_Id = 1; Path = $d/mA; Pseudo = /x; Access_Type = RW;
			Squash = No_Root_Squash; SecType = sys; Protocols = 3; Transports = TCP;
			Disable_ACL = true; Manage_Gids = false;
			CLIENT { Clients = *; Access_Type = RW; Squash = No_Root_Squash; }
			FSAL { Name = VFS; } }
	CONF
	setpriv --pdeathsig TERM ganesha.nfsd -F -f "$g/ganesha.conf" -L "$d/server.log" -p "$g/pid" -N NIV_EVENT \
		2>>"$d/server.err" &
	SRV_PID=$!
	PIDS+=("$SRV_PID")
	for _ in $(seq 200); do
		ss -ltn | grep -q ':2049 ' && ss -ltn | grep -q ':20048 ' && break
		kill -0 "$SRV_PID" 2>/dev/null || { tail "$d/server.log"; return 1; }
		sleep 0.05
	done
	sleep 1 # ganesha answers MOUNT once its start-up settled
	URL="nfs://127.0.0.1$d/mA?nfsport=2049&mountport=20048&version=3"
}

# ---- one seed ----

# one_run SEED DIR [TRACE_TO_REPLAY]: layers, mounts, server, the ops, the
# second mount; leaves DIR/run.out and DIR/trace.  0 agree, 1 differ.
one_run() {
	local s=$1 d=$2 replay=${3:-} rc=0
	local bopts=$OVL_OPTS lenient=()
	mkdir -p "$d"
	# (set -e does not reach into a function called from a condition)
	"$DIFF_ORACLE" gen --seed "$s" ${LOWER_HARDLINKS:+--hardlinks} "$d/A" >/dev/null || return 1
	cp -a "$d/A" "$d/B" || return 1
	if [ "$DIFF_SERVER" = ganesha ]; then
		# B gets the options ganesha's export of A needs
		bopts=$GANESHA_OVL_OPTS
		lenient=(--ignore symlink-times --ignore nlink)
	fi
	mount_overlay "$d/B" "$d/B/u" "$d/B/w" "$d/mB" "$bopts" || return 1
	if [ "$DIFF_SERVER" = ganesha ]; then
		start_ganesha "$d" || return 1
	else
		start_union_nfsd "$d" || return 1
	fi
	DIFF_ORACLE_LABEL_A=$DIFF_SERVER setpriv --pdeathsig TERM "$DIFF_ORACLE" run --seed "$s" --count "$COUNT" \
		--check-every "$CHECK_EVERY" ${replay:+--replay "$replay"} ${VERBOSE:+--verbose} ${WEIGHTS:+--weights "$WEIGHTS"} \
		"${lenient[@]}" --trace "$d/trace" "nfs:$URL" "local:$d/mB" >"$d/run.out" 2>&1 ||
		rc=1
	if ! kill -0 "$SRV_PID" 2>/dev/null; then
		{
			echo "the server died; its log:"
			tail -30 "$d/server.log"
		} >>"$d/run.out"
		rc=1
	fi
	stop_pid "$SRV_PID"
	if [ "$DIFF_SERVER" = union-nfsd ] && [ "$STOP_STATUS" != 0 ]; then
		echo "union-nfsd exited $STOP_STATUS on SIGTERM (want 0)" >>"$d/run.out"
		rc=1
	fi
	if [ "$DIFF_SERVER" = union-nfsd ] && [ "$rc" = 0 ]; then
		# the two uppers on disk: opaque marks, white-outs, directory modes
		DIFF_ORACLE_LABEL_A=union-nfsd DIFF_ORACLE_LABEL_B=overlayfs \
			"$DIFF_ORACLE" uppers "$d/A/u" "$d/B/u" >>"$d/run.out" 2>&1 || rc=1
	fi
	if [ "$DIFF_SERVER" = union-nfsd ] && [ "$rc" = 0 ]; then
		# the upper union-nfsd wrote, read by the kernel (fresh work dir)
		mkdir "$d/A/w2"
		mount_overlay "$d/A" "$d/A/u" "$d/A/w2" "$d/mA" || return 1
		if ! DIFF_ORACLE_LABEL_A="overlayfs(upper of union-nfsd)" \
			DIFF_ORACLE_LABEL_B=overlayfs \
			"$DIFF_ORACLE" cmp "local:$d/mA" "local:$d/mB" >>"$d/run.out" 2>&1; then
			echo "(second mount: A's lowers and upper under kernel overlayfs)" >>"$d/run.out"
			rc=1
		fi
	fi
	unmount "$d/mA"
	unmount "$d/mB"
	return "$rc"
}

# run_seed SEED: 0 agree, 1 differ
run_seed() {
	local s=$1 d=$TMP/seed$1 rc=0 t0=$SECONDS
	one_run "$s" "$d" "${REPLAY:-}" || rc=1
	if [ "$rc" = 0 ]; then
		echo "seed $s: ok ($(grep -o '^[0-9]* operations agreed' "$d/run.out" | cut -d' ' -f1) ops, $((SECONDS - t0)) s)"
		rm -rf "$d"
		return 0
	fi
	echo "seed $s: FAIL ($((SECONDS - t0)) s)"
	sed 's/^/  | /' "$d/run.out" 2>/dev/null | head -60
	echo "  | trace (last 8 ops):"
	tail -8 "$d/trace" 2>/dev/null | sed 's/^/  | /'
	[ "${KEEP:-}" = 1 ] && KEEP_DIRS+=("$d")
	[ "${MINIMIZE:-}" = 1 ] && minimize "$s" "$d"
	return 1
}

# ---- reducing a failure to a short reproduction (MINIMIZE=1) ----

# The failure's signature: the failing op and both results, or the first
# difference of the trees.
signature() {
	if grep -q '^MISMATCH' "$1"; then
		grep -A2 '^MISMATCH' "$1" | sed 's/ op=#[0-9]*:/:/'
	else
		grep -m1 'DIFF' "$1"
	fi
}

# minimize SEED DIR: delta debugging over the ops before the failing one, each
# candidate replayed from fresh layers; prints the reduced trace.
minimize() {
	local s=$1 d=$2 sig n i chunk tries=0 last
	local -a ops keep cand
	sig=$(signature "$d/run.out")
	[ -n "$sig" ] || return 0
	mapfile -t ops < <(sed 's/ *#.*//' "$d/trace" | grep -v '^$')
	if grep -q '^MISMATCH' "$d/run.out"; then
		last=${ops[-1]}
		unset 'ops[-1]'
	else
		last=
	fi
	keep=("${ops[@]}")
	n=2
	echo "  minimizing: ${#keep[@]} ops before the failing one"
	while [ ${#keep[@]} -ge 1 ]; do
		chunk=$(((${#keep[@]} + n - 1) / n))
		local reduced=0
		for ((i = 0; i < ${#keep[@]}; i += chunk)); do
			cand=("${keep[@]:0:i}" "${keep[@]:i+chunk}")
			tries=$((tries + 1))
			if still_fails "$s" "$sig" "$last" "${cand[@]}"; then
				keep=("${cand[@]}")
				n=$((n > 2 ? n - 1 : 2))
				reduced=1
				break
			fi
		done
		[ "$reduced" = 1 ] && continue
		[ "$n" -ge ${#keep[@]} ] && break
		n=$((2 * n > ${#keep[@]} ? ${#keep[@]} : 2 * n))
	done
	echo "  reproduction of seed $s ($tries replays; layers: diff_oracle gen --seed $s):"
	printf '  | %s\n' "${keep[@]}" ${last:+"$last"}
	printf '%s\n' "${keep[@]}" ${last:+"$last"} >"$d/repro.trace"
	echo "  (replay: REPLAY=$d/repro.trace SEEDS='$s,' diff_oracle.sh ...)"
}

# still_fails SEED SIGNATURE LAST OPS...: replays OPS (+ LAST) from fresh layers
still_fails() {
	local s=$1 sig=$2 last=$3 m=$TMP/min rc=1
	shift 3
	rm -rf "$m"
	mkdir -p "$m"
	printf '%s\n' "$@" ${last:+"$last"} >"$m.trace"
	if ! one_run "$s" "$m/run" "$m.trace" && [ "$(signature "$m/run/run.out")" = "$sig" ]; then
		rc=0
	fi
	rm -rf "$m" "$m.trace"
	return "$rc"
}

if [ "${DIFF_WATCHDOG:-1320}" != 0 ]; then
	IT_NAME=diff_oracle IT_TMP=$TMP
	it_watchdog "${DIFF_WATCHDOG:-1320}"
fi
[ "$DIFF_SERVER" = ganesha ] && ganesha_setup
if [[ $SEEDS =~ ^[0-9]+$ ]]; then
	LIST=$(seq $((SEED_BASE + 1)) $((SEED_BASE + SEEDS)))
else
	LIST=$(echo "$SEEDS" | tr ',' ' ')
fi
echo "diff_oracle: server $DIFF_SERVER, seeds $(echo $LIST | tr '\n' ' '), $COUNT ops each"
FAILED=()
T0=$SECONDS
for s in $LIST; do
	if ! run_seed "$s"; then
		FAILED+=("$s")
		[ "${STOP_ON_FAIL:-}" = 1 ] && break
	fi
done
if [ ${#FAILED[@]} -gt 0 ]; then
	echo "FAIL: seeds ${FAILED[*]} differ ($((SECONDS - T0)) s)"
	exit 1
fi
echo "PASS: $(echo $LIST | wc -w) seeds x $COUNT ops agree ($((SECONDS - T0)) s)"
