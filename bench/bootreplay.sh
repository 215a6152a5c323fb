#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bootreplay.sh - the boot replay of issue 31: what a kernel NFS client sends
# while booting the Debian 12 systemd root of the boot storm, recorded once,
# then replayed (boot_replay) against union-nfsd and NFS-Ganesha.
#
#   bootreplay.sh record UNION_NFSD UNION_NFSCTL
#       once per machine: one guest boots from union-nfsd (bootstorm.sh,
#       BOOTSTORM_N=1, u1) to multi-user while tcpdump records its NFS and
#       MOUNT traffic; bootreplay_trace.py makes the trace of it.  Kept in
#       $BOOTREPLAY_CACHE (default /var/cache/union-nfsd-bench/bootreplay):
#       boot.pcap, boot.trace, calls (by procedure), root (the root it
#       booted), and complete, written last; a lock keeps two from
#       recording at once.  Again only when complete is missing.
#   bootreplay.sh bench UNION_NFSD BOOT_REPLAY
#       ROUNDS (default 5) rounds, each replaying the trace against every
#       server of SERVERS (default "u1 u1a gan g65"; g65 left out with a
#       note when its root is not cached), the order turning each round,
#       in a private network and mount namespace; prints each RESULT and
#       the medians: whole-replay ms and server CPU us a call.
#   bootreplay.sh one KIND UNION_NFSD BOOT_REPLAY DIR NFS_PORT MOUNT_PORT
#       one replay against a server of KIND started for it in DIR (which it
#       fills), on 127.0.0.1 at the ports given; prints boot_replay's RESULT
#       line and exits with its status.  Expects to run in a namespace of
#       its own, with an rpcbind for Ganesha and, for g65, the chroot
#       ready with DIR's parent as its /srv (run.sh's bootreplay row).
#
# Env: BOOTREPLAY_CACHE (above), ROUNDS and SERVERS (bench),
# BOOTREPLAY_ALLOW (below), BOOTREPLAY_KEEP=1 keeps bench's temp dir,
# BOOTREPLAY_CALLS=PREFIX writes each replay's calls, one line each, to
# PREFIX.KIND.PID (boot_replay --calls).
#
# Every replay starts from the same tree, the root as the boot found it:
#   u1   union-nfsd, one export: lowerdir the cached root, a fresh empty
#        upper and work dir
#   u1a  the same, its clients rule `async` (exports(5)): changes answered
#        before they reach the disk, Ganesha's promise
#   gan  NFS-Ganesha 4.3 (nfs-ganesha-vfs) on a fresh copy of the root
#        (cp -a, a reflink where the filesystem shares blocks)
#   g65  NFS-Ganesha 6.5 chrooted in the cached trixie root
#        (bench/ganesha65.sh, bench/g65root.sh), gan's settings, on a fresh
#        copy of the root in DIR, which the chroot sees as /srv/DIR's name
# Each server is started for its replay and stopped after it, so each
# meets the boot's calls with cold caches of its own (the page cache of the
# root is warm for all: the root is read once first).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${BOOTREPLAY_CACHE:-/var/cache/union-nfsd-bench/bootreplay}
# shellcheck source=bench/g65root.sh
. "$HERE/g65root.sh"

die() {
	echo "bootreplay: $*" >&2
	exit 1
}

# ---- recording ---------------------------------------------------------------

record() {
	local nfsd=$1 ctl=$2 lock
	mkdir -p "$CACHE"
	exec {lock}>"$CACHE/.lock"
	flock -w 1800 "$lock" || die "$CACHE/.lock held for 30 min"
	if [ -e "$CACHE/complete" ]; then
		echo "bootreplay: trace cached in $CACHE: $(cat "$CACHE/calls")"
		return 0
	fi
	command -v tcpdump >/dev/null || die "recording needs tcpdump"
	rm -f "$CACHE/boot.pcap" "$CACHE/boot.trace"
	BOOTSTORM_N=1 BOOTSTORM_RUNS=1 BOOTSTORM_SERVERS=u1 BOOTSTORM_PCAP="$CACHE/boot.pcap" \
		bash "$HERE/bootstorm.sh" "$nfsd" "$ctl" >"$CACHE/bootstorm.log" 2>&1 ||
		{ tail -20 "$CACHE/bootstorm.log" >&2; die "the recorded boot failed"; }
	grep -q '1/1 guests reached multi-user' "$CACHE/bootstorm.log" ||
		die "the guest did not reach multi-user ($CACHE/bootstorm.log)"
	python3 "$HERE/bootreplay_trace.py" "$CACHE/boot.pcap" "$CACHE/boot.trace" 2>"$CACHE/calls.log"
	sed 's/^bootreplay_trace: //' "$CACHE/calls.log" >"$CACHE/calls"
	sed -n 's/^root: \([^ ]*\) .*/\1/p' "$CACHE/bootstorm.log" >"$CACHE/root"
	[ -d "$(cat "$CACHE/root")" ] || die "no root named in $CACHE/bootstorm.log"
	date -u +%FT%TZ >"$CACHE/complete"
	echo "bootreplay: recorded: $(cat "$CACHE/calls")"
}

# ---- one replay ------------------------------------------------------------------

# start_u1 DIR NFS MNT [RULE_OPTS]: union-nfsd over the root and a fresh
# upper, RULE_OPTS added to its clients rule; sets PID
start_u1() {
	local d=$1 nfs=$2 mnt=$3 opts=${4:+,$4}
	mkdir -p "$d/up" "$d/work" "$d/state"
	cat >"$d/u.conf" <<CONF
[server]
nfs-port = $nfs
mount-port = $mnt
bind = 127.0.0.1
state-dir = $d/state
log-level = warn
[export]
path = /
lowerdir = $ROOT
upperdir = $d/up
workdir = $d/work
clients = 127.0.0.0/8(rw,no_root_squash$opts)
CONF
	"$NFSD" --config="$d/u.conf" --foreground --no-rpcbind --no-portmapper \
		>"$d/out" 2>"$d/err" &
	PID=$!
}

# start_gan DIR NFS MNT [G65ROOT]: Ganesha on a fresh copy of the root, the
# host's, or (G65ROOT) the one chrooted there; sets PID, and G: DIR as the
# server sees it (g65_dir)
start_gan() {
	local d=$1 nfs=$2 mnt=$3 root=${4:-} plugins in=() core=
	G=$d
	if [ -n "$root" ]; then
		g65_dir "$root" "$d"
		in=(chroot "$root")
		core=$G65_CORE
	fi
	plugins=$(dirname "$("${in[@]}" dpkg -L nfs-ganesha-vfs | grep 'libfsalvfs.so$' | head -1)")
	mkdir -p "$d/recovery"
	cp -a --reflink=auto "$ROOT" "$d/tree"
	cat >"$d/ganesha.conf" <<CONF
NFS_CORE_PARAM {
	Protocols = 3; NFS_Port = $nfs; MNT_Port = $mnt;
	Enable_NLM = false; Enable_RQUOTA = false; Enable_UDP = false;
	Plugins_Dir = $plugins; $core
}
NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = $G/recovery; }
LOG { Default_Log_Level = EVENT; }
EXPORT {
	Export_Id = 1; Path = $G/tree; Pseudo = $G/tree;
	Access_Type = RW; Squash = No_Root_Squash; SecType = sys;
	Protocols = 3; Transports = TCP; Disable_ACL = true; Manage_Gids = false;
	CLIENT { Clients = *; Access_Type = RW; Squash = No_Root_Squash; }
	FSAL { Name = VFS; }
}
CONF
	"${in[@]}" ganesha.nfsd -F -f "$G/ganesha.conf" -L "$G/ganesha.log" -p "$G/ganesha.pid" -N NIV_EVENT &
	PID=$!
}

# g65_dir G65ROOT DIR: sets G to where the chroot sees DIR, /srv/NAME: the
# caller (bench, run.sh) bound DIR's parent there (g65_mount)
g65_dir() {
	local r=$1 d=$2
	[ "$r/srv/${d##*/}" -ef "$d" ] || die "g65: $d is not the chroot's /srv/${d##*/} (g65_mount)"
	G=/srv/${d##*/}
}

# one KIND DIR NFS MNT: the replay against a fresh server of KIND
one() {
	local kind=$1 d=$2 nfs=$3 mnt=$4 export=/ rc=0 a g65=
	local -a allow=()
	for a in ${BOOTREPLAY_ALLOW:-}; do allow+=(--allow="$a"); done
	[ -z "${BOOTREPLAY_CALLS:-}" ] || allow+=(--calls="$BOOTREPLAY_CALLS.$kind.$$")
	rm -rf "$d"
	mkdir -p "$d"
	case $kind in
	u1) start_u1 "$d" "$nfs" "$mnt" ;;
	u1a) start_u1 "$d" "$nfs" "$mnt" async ;;
	gan | g65)
		[ "$kind" = gan ] || g65=$(g65_root) || exit 1
		start_gan "$d" "$nfs" "$mnt" "$g65"
		export=$G/tree
		;;
	*) die "server $kind: u1, u1a, gan or g65" ;;
	esac
	"$REPLAY" --nfs-port="$nfs" --mount-port="$mnt" --export="$export" --pid="$PID" \
		--wait=60 "${allow[@]}" "$TRACE" 2>"$d/replay.err" || rc=$?
	kill "$PID" 2>/dev/null || true
	wait "$PID" 2>/dev/null || true
	[ "$rc" = 0 ] || sed 's/^/  /' "$d/replay.err" >&2
	rm -rf "$d/tree" "$d/up"
	return "$rc"
}

# g65_root: the cached trixie root, or die
g65_root() {
	bash "$HERE/ganesha65.sh" --check || die "g65: no cached trixie root (bench/ganesha65.sh makes it)"
}

# BOOTREPLAY_ALLOW="PROC:REC:LIVE ...": statuses that may differ between
# servers (boot_replay --allow); none is needed for the recorded boot (see
# bench/README.md, "Boot replay")

need_trace() {
	TRACE=$CACHE/boot.trace
	[ -e "$CACHE/complete" ] || die "no trace recorded in $CACHE (bootreplay.sh record)"
	ROOT=$(cat "$CACHE/root")
	[ -d "$ROOT" ] || die "the recorded boot's root $ROOT is gone: record again"
}

# ---- the benchmark: rounds, alternated --------------------------------------------

bench() {
	local r k s rc=0 order g65
	local -a servers
	read -ra servers <<<"${SERVERS:-u1 u1a gan g65}"
	if [[ " ${servers[*]} " == *" g65 "* ]] && ! g65=$(bash "$HERE/ganesha65.sh" --check); then
		echo "bootreplay: g65: no cached trixie root (bench/ganesha65.sh makes it); left out"
		read -ra servers <<<"${servers[*]/g65/}"
	fi
	mount -t tmpfs -o mode=0755 tmpfs /run
	ip link set lo up
	T=$(mktemp -d "${TMPDIR:-/var/tmp}/bootreplay.XXXXXX")
	PIDS=() UMOUNTS=()
	trap 'bench_cleanup' EXIT
	: >"$T/results"
	if [[ " ${servers[*]} " == *" g"* ]]; then
		mkdir -p /run/ganesha
		rpcbind -f &
		PIDS+=($!)
		for _ in $(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.05; done
	fi
	if [[ " ${servers[*]} " == *" g65 "* ]]; then
		g65_mount "$g65" "$T"
		g65_rpcbind "$g65" "$T" || die "g65's rpcbind did not start"
	fi
	tar -C "$ROOT" -cf - . | cat >/dev/null
	echo "bootreplay: $(cat "$CACHE/calls"); $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
	for ((r = 1; r <= ${ROUNDS:-5}; r++)); do
		k=$(((r - 1) % ${#servers[@]}))
		order=("${servers[@]:k}" "${servers[@]:0:k}")
		for s in "${order[@]}"; do
			if one "$s" "$T/$s-r$r" 2049 20048 >"$T/res"; then
				echo "server=$s round=$r $(cat "$T/res")" | tee -a "$T/results"
				sed -n 's/^boot_replay: \(ms from call to reply\)/    \1/p' "$T/$s-r$r/replay.err"
			else
				rc=1
				echo "server=$s round=$r FAILED: $(cat "$T/res")"
			fi
		done
	done
	python3 - "$T/results" <<'PY'
import statistics, sys
R = {}
for line in open(sys.argv[1]):
    kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
    R.setdefault(kv["server"], []).append(kv)
print("\n| server | replays | whole replay ms (median, min-max) | server CPU us a call (median) |")
print("|---|---|---|---|")
for s, v in R.items():
    ms = [float(k["secs"]) * 1000 for k in v]
    cpu = [float(k["cpu_us_per_op"]) for k in v]
    print(f"| {s} | {len(v)} | {statistics.median(ms):.0f} ({min(ms):.0f}-{max(ms):.0f})"
          f" | {statistics.median(cpu):.1f} |")
PY
	return "$rc"
}

# bench_cleanup: the servers of an unfinished replay, the rpcbinds, the
# chroot's mounts, the temp dir
bench_cleanup() {
	local p i
	for p in ${PID:-} "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for ((i = ${#UMOUNTS[@]} - 1; i >= 0; i--)); do umount -R "${UMOUNTS[i]}" || true; done
	if [ "${BOOTREPLAY_KEEP:-0}" = 1 ]; then
		echo "bootreplay: kept $T"
	else
		rm -rf "$T"
	fi
}

case ${1:-} in
record)
	[ "$(id -u)" = 0 ] || die "run as root (bootstorm.sh)"
	record "$(realpath "$2")" "$(realpath "$3")"
	;;
bench)
	[ "$(id -u)" = 0 ] || die "run as root (namespaces, Ganesha)"
	NFSD=$(realpath "$2") REPLAY=$(realpath "$3")
	need_trace
	if [ -z "${BOOTREPLAY_NS:-}" ]; then
		BOOTREPLAY_NS=1 exec unshare -n -m --propagation private bash "$0" "$@"
	fi
	bench
	;;
one)
	NFSD=$(realpath "$3") REPLAY=$(realpath "$4")
	need_trace
	one "$2" "$5" "$6" "$7"
	;;
*)
	echo "usage: bootreplay.sh record UNION_NFSD UNION_NFSCTL | bench UNION_NFSD BOOT_REPLAY" \
		"| one KIND UNION_NFSD BOOT_REPLAY DIR NFS_PORT MOUNT_PORT" >&2
	exit 2
	;;
esac
