#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run.sh [--smoke] UNION_NFSD NFS_BENCH - union-nfsd beside NFS-Ganesha (and unfs3).
#
# Sets up identical data, starts every server on loopback at once, and runs each
# workload of nfs_bench.c against each server in turn (A B C A B C ...), ROUNDS
# times; prints a table of medians (rate, and the server's CPU time per
# operation from /proc/PID/stat) with ratios, the loopback TCP limit (iperf3),
# memcpy bandwidth and how loaded the machine was.  Servers:
#   u1   union-nfsd, 1 lower layer + upper
#   u4   union-nfsd, 4 lower layers + upper: the same tree spread over the
#        layers, with white-outs (OCI .wh. files and 0/0 devices), an opaque
#        directory (trusted.overlay.opaque) and an OCI-opaque one (.wh..wh..opq)
#   u4a  u4's lower layers under an upper of its own, exported with the
#        exports(5) rule option `async`: changes are answered before they
#        reach the disk (u4 is `sync`, the default: durable at the reply)
#   gan  NFS-Ganesha (nfs-ganesha-vfs), NFSv3 only, on the plain tree
#   g65  NFS-Ganesha 6.5 (Debian 13's), chrooted in a cached debootstrap root
#        (bench/ganesha65.sh), gan's settings, the same plain tree
#   unfs unfs3, if `unfsd` is installed (Debian 12 has no unfs3 package)
# Each server has two exports: the tree on the local filesystem (whatever holds
# $TMPDIR, default /var/tmp) and the copy-up files on a loop-mounted XFS image
# (reflinks).  `cp` of a file of the same size on each filesystem, alone and
# followed by an fsync of the copy, is timed as the copy-up's yardstick.
#
# Everything runs in a private network and mount namespace: the private
# rpcbind Ganesha insists on, its /run, and the XFS mount die with it.
#
# Sizes (env): ROUNDS=3 N_NULL1=30000 N_NULL=200000 N_ATTR=10000 (files)
# N_ATTR_OPS=200000 N_ONE=60000 (calls of the rows at 1 in flight)
# N_LISTS=20000 (listings of the 50-name dir50/) R4K=8388608 (the file read4k
# reads) N_BIG=100000 PASSES=2 N_PAIRS=20000 N_SMALL=10000
# N_LOCKS=200000 SEQ=1073741824 CU=1073741824 DEPTH=32 IO_DEPTH=16 CONNS=1.
# ONLY_ROWS="getattr lookup" and ONLY_SERVERS="u4 gan" narrow a run;
# PERF_DIR=/abs/dir records a perf profile (cpu-clock, DWARF call graphs) of
# the server during each run: PERF_DIR/SERVER-ROW-rROUND.data (PERF_EVENT=
# another event); TRACE_DIR=/abs/dir counts its system calls (strace -c) in
# TRACE_DIR/SERVER-ROW-rROUND.txt (slows the server: rates mean nothing then);
# TRACE_OPTS replaces strace's -c (e.g. "-e trace=%file,%desc" for every call).
# Beside the table: the kernel's own CREATE+REMOVE rate on the data's
# filesystem (nfs_bench localpairs): without fsyncs, with an fsync per
# change, and with a syncfs shared by the changes in flight (kernel_alone).
# The same for the smallfiles row (nfs_bench localsmall, kernel_alone).
# UNION_THREADS=N gives every union-nfsd N worker threads (default: its own).
# GANESHA_ENTRIES=N sets Ganesha's MDCACHE Entries_HWMark (default 100,000,
# which this data set exceeds: see bench/README.md).
# The lockpairs row speaks NLM: every union-nfsd gets an NLM port of its own;
# Ganesha's lock manager (NLM_Port 32803) needs a status monitor, a private
# rpc.statd on the private rpcbind (it refuses every LOCK, NLM4_DENIED_NOLOCKS,
# when SM_MON fails).  GANESHA_NLM=apart (default): a second Ganesha with NLM
# answers gan's lockpairs row, gan itself runs without, as before; on: one
# Ganesha with NLM for every row; off: no lock row for Ganesha.  g65 alike
# (g65l its second Ganesha, on gan's rpc.statd).
# The bootreplay row (bench/bootreplay.sh) replays a recorded Debian boot's
# NFS calls when a trace is cached ($BOOTREPLAY_CACHE, default
# /var/cache/union-nfsd-bench/bootreplay; `bootreplay.sh record` boots a VM
# to make it), else it is skipped with a note.
# --smoke: tiny sizes, 2 rounds; checks that every workload's checks pass (~30 s).
# A full run first installs what it needs (etc/install-deps.sh build bench) and
# makes g65's root if it is not cached (bench/ganesha65.sh, about 40 s);
# --smoke installs nothing (ctest runs it, after tests/run.sh installed build and
# tests) and leaves g65 out unless its root is cached (G65_CACHE: where).
# Exit 77 (skipped) when not root or nfs-ganesha-vfs is missing.
set -euo pipefail
SMOKE=0
[ "${1:-}" = --smoke ] && { SMOKE=1; shift; }
[ "${1:-}" = --full ] && shift
[ $# = 2 ] || { echo "usage: run.sh [--smoke] UNION_NFSD NFS_BENCH" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (namespaces, mounts); skipped" >&2; exit 77; }
[ "$SMOKE" = 1 ] || [ "${NFS_BENCH_INNER:-}" = 1 ] ||
	bash "$(dirname "$(realpath "$0")")/../etc/install-deps.sh" build bench </dev/null >&2
# g65's root, made outside the private network namespace (debootstrap downloads)
[ "$SMOKE" = 1 ] || [ "${NFS_BENCH_INNER:-}" = 1 ] ||
	bash "$(dirname "$(realpath "$0")")/ganesha65.sh" </dev/null >/dev/null ||
	echo "run.sh: no trixie root for g65 (bench/ganesha65.sh failed); g65 left out" >&2
dpkg -L nfs-ganesha-vfs 2>/dev/null | grep -q 'libfsalvfs.so$' ||
	{ echo "run.sh: nfs-ganesha-vfs not installed; skipped" >&2; exit 77; }
command -v rpcbind >/dev/null || { echo "run.sh: rpcbind missing; skipped" >&2; exit 77; }
if [ "${NFS_BENCH_INNER:-}" != 1 ]; then
	exec unshare -m -n --propagation private env NFS_BENCH_INNER=1 bash "$(realpath "$0")" \
		"$([ "$SMOKE" = 1 ] && echo --smoke || echo --full)" "$(realpath "$1")" "$(realpath "$2")"
fi
UNION_NFSD=$1 NFS_BENCH=$2

if [ "$SMOKE" = 1 ]; then
	: "${ROUNDS:=2}" "${N_NULL1:=300}" "${N_NULL:=2000}" "${N_ATTR:=200}" "${N_ATTR_OPS:=2000}"
	: "${N_BIG:=2000}" "${PASSES:=1}" "${N_PAIRS:=300}" "${N_SMALL:=200}" "${N_LOCKS:=300}"
	: "${SEQ:=$((4 << 20))}" "${CU:=$((8 << 20))}" "${IPERF_SECS:=1}"
	: "${N_ONE:=300}" "${N_LISTS:=100}" "${R4K:=$((64 << 10))}"
fi
: "${ROUNDS:=3}" "${N_NULL1:=30000}" "${N_NULL:=200000}" "${N_ATTR:=10000}"
: "${N_ATTR_OPS:=200000}" "${N_BIG:=100000}" "${PASSES:=2}" "${N_PAIRS:=20000}"
: "${N_SMALL:=10000}" "${N_LOCKS:=200000}" "${SEQ:=1073741824}" "${CU:=1073741824}"
: "${DEPTH:=32}" "${GANESHA_NLM:=apart}"
: "${N_ONE:=60000}" "${N_LISTS:=20000}" "${R4K:=$((8 << 20))}"
export DEPTH # the table's labels name it
: "${IO_DEPTH:=16}" "${CONNS:=1}" "${IPERF_SECS:=5}"

T=$(mktemp -d "${TMPDIR:-/var/tmp}/nfs-bench.XXXXXX")
X=$T/xfs # mount point of the reflink filesystem
PIDS=()
UMOUNTS=() # unmounted in reverse order, after every server stopped
cleanup() {
	local rc=$?
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
	for ((i = ${#UMOUNTS[@]} - 1; i >= 0; i--)); do umount -R "${UMOUNTS[i]}" || true; done
	mountpoint -q "$X" && umount "$X"
	rm -rf "$T"
	exit "$rc"
}
trap cleanup EXIT
log() { printf '%s\n' "$*" >&2; }

ip link set lo up
mount -t tmpfs -o mode=0755 tmpfs /run # rpcbind's socket, away from the host's

# ---- data ----

# gen_tree DIR LAYOUT: the benchmark tree, as one plain directory ("plain") or
# spread over DIR/l0..l3, top-most first ("four").  The visible tree is the same.
gen_tree() {
	python3 - "$1" "$2" "$N_ATTR" "$N_BIG" "$ROUNDS" <<'PY'
import os, stat, sys
top, layout, nattr, nbig, rounds = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
def d(p):
    os.makedirs(p, exist_ok=True)
    return p
def f(p, size=0):
    with open(p, "wb") as o:
        o.truncate(size)
def wh_dev(p):
    os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(0, 0))
if layout == "plain":
    a, b = d(top + "/attr"), d(top + "/big")
    for i in range(nattr):
        f("%s/f%05d" % (a, i), i % 997)
    for i in range(nbig):
        os.mknod("%s/file%07d" % (b, i), 0o644 | stat.S_IFREG)
    for s in ("seq", "cu", "work"):
        d(top + "/" + s)
    for i in range(50):
        f("%s/file%07d" % (d(top + "/dir50"), i))
    sys.exit(0)
L = [top + "/l%d" % k for k in range(4)]
# attr: f%05d over l0..l2; l2/attr is opaque (xattr), so l3's stale%05d and
# its decoy f%05d (size 2) are hidden; gone%05d in l2 is whited out in l0
# (OCI for even i, a 0/0 device for odd i); l1 has decoys under l0's files
A = [d(l + "/attr") for l in L]
os.setxattr(A[2], "trusted.overlay.opaque", b"y")
for i in range(nattr):
    f("%s/f%05d" % (A[i % 3], i), i % 997)
    if i % 3 == 0:
        f("%s/f%05d" % (A[1], i), 1)
    f("%s/gone%05d" % (A[2], i), 5)
    if i % 2 == 0:
        f("%s/.wh.gone%05d" % (A[0], i))
    else:
        wh_dev("%s/gone%05d" % (A[0], i))
    f("%s/stale%05d" % (A[3], i), 7)
    f("%s/f%05d" % (A[3], i), 2)
# big: layer k holds a quarter plus 5% of the next, so names repeat across
# layers; 2% more names live in l3 only and are whited out in l1
B = [d(l + "/big") for l in L]
q = max(1, nbig // 4)
for k in range(4):
    for i in range(k * q, min(nbig, (k + 1) * q + nbig // 20) if k < 3 else nbig):
        os.mknod("%s/file%07d" % (B[k], i), 0o644 | stat.S_IFREG)
for i in range(nbig // 50):
    os.mknod("%s/hidden%07d" % (B[3], i), 0o644 | stat.S_IFREG)
    f("%s/.wh.hidden%07d" % (B[1], i))
# seq: merged from l0, l2 (the data) and l3; cu: the copy-up files in l3;
# work (where the writes go): opaque in l1 (OCI), l3's junk hidden
for k in (0, 2, 3):
    d(L[k] + "/seq")
d(L[3] + "/cu")
d(L[1] + "/work")
f(L[1] + "/work/.wh..wh..opq")
d(L[3] + "/work")
for i in range(50):
    f(L[3] + "/work/junk%02d" % i, 1)
# dir50: a merged directory in every layer, file i in layer i % 4, with
# decoys of a quarter of them in l2 under l0's and 10 names of l3 whited
# out in l1 (OCI)
D = [d(l + "/dir50") for l in L]
for i in range(50):
    f("%s/file%07d" % (D[i % 4], i))
    if i % 4 == 0:
        f("%s/file%07d" % (D[2], i), 3)
for i in range(10):
    f("%s/hidden%02d" % (D[3], i))
    f("%s/.wh.hidden%02d" % (D[1], i))
PY
}

# put_big SRC DEST...: the first DEST gets a copy of SRC, every other one a copy
# (a reflink where the filesystem shares blocks) of the first
put_big() {
	local src=$1 first=$2
	shift 2
	cp "$src" "$first"
	for d in "$@"; do cp --reflink=auto "$first" "$d"; done
}

setup_local() {
	log "== data: $T (local: $(df -T "$T" | awk 'NR==2 {print $2}'))"
	gen_tree "$T/plain" plain
	gen_tree "$T/u1/lower" plain
	gen_tree "$T/u4" four
	log "   trees: $((SECONDS - t_setup)) s"
	mkdir -p "$T/u1/upper" "$T/u1/work" "$T/u4/upper" "$T/u4/work"
	"$NFS_BENCH" genfile "$T/pattern-seq" "$SEQ"
	"$NFS_BENCH" genfile "$T/pattern-r4k" "$R4K"
	"$NFS_BENCH" genfile "$T/pattern-cu" "$CU"
	put_big "$T/pattern-seq" "$T/plain/seq/data" "$T/u1/lower/seq/data" "$T/u4/l2/seq/data"
	put_big "$T/pattern-r4k" "$T/plain/seq/small" "$T/u1/lower/seq/small" "$T/u4/l3/seq/small"
	# Ganesha changes no layer: one file under every round's name will do
	cp "$T/pattern-cu" "$T/plain/cu/f1"
	for r in $(seq 2 "$ROUNDS"); do ln "$T/plain/cu/f1" "$T/plain/cu/f$r"; done
	for r in $(seq "$ROUNDS"); do
		cp "$T/pattern-cu" "$T/u1/lower/cu/f$r"
		cp "$T/pattern-cu" "$T/u4/l3/cu/f$r"
	done
	log "   files: $((SECONDS - t_setup)) s"
}

HAVE_XFS=0
setup_xfs() {
	command -v mkfs.xfs >/dev/null || { log "== no mkfs.xfs: reflink rows skipped"; return 0; }
	# room for one copy of the file plus the log; reflinks cost no data blocks
	truncate -s $(((CU >> 20) + 600))M "$T/xfs.img"
	mkfs.xfs -q -m reflink=1 "$T/xfs.img"
	mkdir -p "$X"
	mount -o loop "$T/xfs.img" "$X"
	mkdir -p "$X/plain/cu" "$X/u1/lower/cu" "$X/u1/upper" "$X/u1/work" \
		"$X/u4/l0" "$X/u4/l1" "$X/u4/l2" "$X/u4/l3/cu" "$X/u4/upper" "$X/u4/work"
	cp "$T/pattern-cu" "$X/plain/cu/f1"
	for r in $(seq 2 "$ROUNDS"); do ln "$X/plain/cu/f1" "$X/plain/cu/f$r"; done
	for r in $(seq "$ROUNDS"); do
		cp --reflink=always "$X/plain/cu/f1" "$X/u1/lower/cu/f$r"
		cp --reflink=always "$X/plain/cu/f1" "$X/u4/l3/cu/f$r"
	done
	HAVE_XFS=1
}

# ---- servers ----

declare -A NFS_PORT MOUNT_PORT NLM_PORT SPID EXP_LOCAL EXP_XFS
SERVERS=()

# start_union NAME LOWERDIRS(relative, ':') [TREE [RULE_OPTS]]: union-nfsd with
# exports /local and /xfs; the lowers are TREE's (default NAME's: lower layers
# are only read, so servers may share them), the upper and work dir NAME's own;
# RULE_OPTS are added to the options of the clients rule (127.0.0.0/8, rw,
# no_root_squash, as the default rule of a config without clients)
start_union() {
	local n=$1 lowers=$2 tree=${3:-$1} conf=$T/$1.conf ports
	local ll=$T/$tree/${lowers//:/:$T/$tree/} xl=$X/$tree/${lowers//:/:$X/$tree/}
	local clients="127.0.0.0/8(rw,no_root_squash${4:+,$4})"
	# NLM on a port of its own (the NFS port serves it too), as clients
	# find it through rpcbind: 4045 (lockd's usual port) and up
	local nlm=$((4045 + ${#SERVERS[@]}))
	mkdir -p "$T/state-$n" "$T/$n/upper" "$T/$n/work"
	[ "$HAVE_XFS" = 1 ] && mkdir -p "$X/$n/upper" "$X/$n/work"
	cat >"$conf" <<CONF
[server]
nfs-port = 0
mount-port = 0
nlm-port = $nlm
bind = 127.0.0.1
state-dir = $T/state-$n
log-level = warn
${UNION_THREADS:+threads = $UNION_THREADS}
[export]
path = /local
lowerdir = $ll
upperdir = $T/$n/upper
workdir = $T/$n/work
clients = $clients
CONF
	[ "$HAVE_XFS" = 1 ] && cat >>"$conf" <<CONF
[export]
path = /xfs
lowerdir = $xl
upperdir = $X/$n/upper
workdir = $X/$n/work
clients = $clients
CONF
	# The backgrounded shell makes out-$n itself, perhaps after the loop below
	# first reads it: make it here.
	: >"$T/out-$n"
	"$UNION_NFSD" --config="$conf" --foreground --no-rpcbind --no-portmapper >"$T/out-$n" 2>"$T/err-$n" &
	SPID[$n]=$!
	PIDS+=("${SPID[$n]}")
	for _ in $(seq 200); do
		ports=$(sed -n 's/^listening nfs=\([0-9]*\) mount=\([0-9]*\)$/\1 \2/p' "$T/out-$n")
		[ -n "$ports" ] && break
		sleep 0.05
	done
	[ -n "$ports" ] || { log "union-nfsd $n did not start:"; cat "$T/err-$n" >&2; exit 1; }
	NFS_PORT[$n]=${ports% *} MOUNT_PORT[$n]=${ports#* } NLM_PORT[$n]=$nlm
	EXP_LOCAL[$n]=/local EXP_XFS[$n]=/xfs
	SERVERS+=("$n")
}

start_rpcbind() {
	mkdir -p /run/ganesha
	rpcbind -f &
	PIDS+=($!)
	for _ in $(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.05; done
}

# start_ganesha NAME NFS_PORT MNT_PORT NLM_PORT [ROOT]: a Ganesha on the plain
# tree, its lock manager on NLM_PORT (0: none).  NAME gan is the table's; ganl, a
# second one with NLM (GANESHA_NLM=apart), serves only gan's lockpairs row.
# ROOT: the Ganesha chrooted there (g65), where $T is /srv (start_g65).
start_ganesha() {
	local n=$1 nfs=$2 mnt=$3 nlm=$4 root=${5:-} plugins top=$T in=() g
	[ -n "$root" ] && top=/srv in=(chroot "$root")
	g=$top/ganesha-$n
	plugins=$(dirname "$("${in[@]}" dpkg -L nfs-ganesha-vfs | grep 'libfsalvfs.so$' | head -1)")
	mkdir -p "$T/ganesha-$n/recovery"
	export_block() { # ID PATH
		cat <<CONF
EXPORT {
	Export_Id = $1; Path = $2; Pseudo = $2;
	Access_Type = RW; Squash = No_Root_Squash; SecType = sys;
	Protocols = 3; Transports = TCP; Disable_ACL = true; Manage_Gids = false;
	CLIENT { Clients = *; Access_Type = RW; Squash = No_Root_Squash; }
	FSAL { Name = VFS; }
}
CONF
	}
	{
		cat <<CONF
NFS_CORE_PARAM {
	Protocols = 3; NFS_Port = $nfs; MNT_Port = $mnt; # the namespace has only lo
	NLM_Port = $nlm; Enable_NLM = $([ "$nlm" != 0 ] && echo true || echo false);
	Enable_RQUOTA = false; Enable_UDP = false;
	Plugins_Dir = $plugins;$([ -n "$root" ] && printf '\n\t%s' "$G65_CORE")
}
NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = $g/recovery; }
LOG { Default_Log_Level = EVENT; }
CONF
		[ -n "${GANESHA_ENTRIES:-}" ] &&
			printf 'MDCACHE { Entries_HWMark = %s; }\n' "$GANESHA_ENTRIES"
		export_block 1 "$top/plain"
		[ "$HAVE_XFS" = 1 ] && [[ $n == @(gan|g65) ]] && export_block 2 "$top/xfs/plain"
	} >"$T/ganesha-$n/ganesha.conf"
	"${in[@]}" ganesha.nfsd -F -f "$g/ganesha.conf" -L "$g/ganesha.log" -p "$g/ganesha.pid" -N NIV_EVENT &
	SPID[$n]=$!
	PIDS+=("${SPID[$n]}")
	NFS_PORT[$n]=$nfs MOUNT_PORT[$n]=$mnt
	[ "$nlm" != 0 ] && NLM_PORT[$n]=$nlm
	EXP_LOCAL[$n]=$top/plain EXP_XFS[$n]=$top/xfs/plain
	# ganesha answers MOUNT only once its exports are up: wait for a NULL that works
	for _ in $(seq 100); do
		if "$NFS_BENCH" --nfs-port="$nfs" --mount-port="$mnt" --export="$top/plain" --count=1 \
			null >/dev/null 2>&1; then
			[[ $n == @(gan|g65) ]] && SERVERS+=("$n")
			return 0
		fi
		kill -0 "${SPID[$n]}" 2>/dev/null || break
		sleep 0.2
	done
	log "ganesha $n did not start:"
	cat "$T/ganesha-$n/ganesha.log" >&2
	exit 1
}

# start_ganeshas: Ganesha's lock manager (GANESHA_NLM) off, on for every
# row, or (apart, the default) on in a second Ganesha for the lockpairs
# row only, so that gan's other rows run the Ganesha they always ran
# (whether NLM changes them could not be told apart from Ganesha's own
# swings on this machine: bench/README.md, "LOCK+UNLOCK (NLM)").
start_ganeshas() {
	start_rpcbind
	if [ "$GANESHA_NLM" != off ] && ! command -v rpc.statd >/dev/null; then
		log "== no rpc.statd (nfs-common): Ganesha without NLM, no lock row for it"
		GANESHA_NLM=off
	fi
	case $GANESHA_NLM in
	off) start_ganesha gan 2049 20048 0 ;;
	on) start_statd && start_ganesha gan 2049 20048 32803 ;;
	apart)
		start_ganesha gan 2049 20048 0
		start_statd
		start_ganesha ganl 2051 20051 32803
		;;
	*) log "GANESHA_NLM: off, on or apart" && exit 2 ;;
	esac
}

# start_statd: the NSM Ganesha's NLM asks to monitor each client host
# (SM_MON) before it grants a lock, on the private rpcbind; its records in
# $T/statd, no SM_NOTIFY sent at start (-L)
start_statd() {
	mkdir -p "$T/statd/sm" "$T/statd/sm.bak"
	rpc.statd -F -L -P "$T/statd" -p 32765 -o 32766 >"$T/out-statd" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 100); do
		rpcinfo -p 127.0.0.1 2>/dev/null | grep -q ' status$' && return 0
		sleep 0.05
	done
	log "rpc.statd did not register:"
	cat "$T/out-statd" >&2
	exit 1
}

# ---- g65: NFS-Ganesha 6.5, chrooted in Debian 13's root ----

# start_g65: the Ganesha of the cached trixie root (bench/ganesha65.sh; a full
# run made it before it entered the namespace, --smoke only uses one made
# before), with gan's settings on the same plain tree: the chroot sees $T as
# /srv and has an rpcbind of its own (bench/g65root.sh).  Its lock manager as gan's (GANESHA_NLM; apart: a
# second one, g65l, answers g65's lockpairs row) asks gan's rpc.statd, which
# it finds as the root's rpc.statd would, through the rpcbind on port 111.
G65_NOTE=
# shellcheck source=bench/g65root.sh
. "$(dirname "$(realpath "$0")")/g65root.sh"
start_g65() {
	local r
	if ! r=$(bash "$(dirname "$(realpath "$0")")/ganesha65.sh" --check); then
		G65_NOTE="g65: no cached trixie root (bench/ganesha65.sh makes it; --smoke does not); skipped"
		return 0
	fi
	g65_mount "$r" "$T"
	g65_rpcbind "$r" "$T" || { log "g65's rpcbind did not start" && exit 1; }
	case $GANESHA_NLM in
	off) start_ganesha g65 2052 20052 0 "$r" ;;
	on) start_ganesha g65 2052 20052 32804 "$r" ;;
	*)
		start_ganesha g65 2052 20052 0 "$r"
		start_ganesha g65l 2053 20053 32804 "$r"
		;;
	esac
}

UNFS_NOTE=
start_unfs() {
	if ! command -v unfsd >/dev/null; then
		UNFS_NOTE="unfs3: not installed (Debian 12 has no unfs3 package: apt-cache policy unfs3 shows no candidate); skipped"
		return 0
	fi
	printf '%s 127.0.0.1(rw,no_root_squash)\n' "$T/plain-unfs" >"$T/unfs.exports"
	[ "$HAVE_XFS" = 1 ] && printf '%s 127.0.0.1(rw,no_root_squash)\n' "$X/plain" >>"$T/unfs.exports"
	cp -a "$T/plain" "$T/plain-unfs"
	# -d foreground, -p no portmapper, -t TCP only, -n/-m ports, -l bind address
	unfsd -d -p -t -n 2050 -m 20050 -l 127.0.0.1 -e "$T/unfs.exports" >"$T/out-unfs" 2>&1 &
	SPID[unfs]=$!
	PIDS+=("${SPID[unfs]}")
	NFS_PORT[unfs]=2050 MOUNT_PORT[unfs]=20050
	EXP_LOCAL[unfs]=$T/plain-unfs EXP_XFS[unfs]=$X/plain
	sleep 1
	SERVERS+=(unfs)
}

# ---- workloads ----

# bench SERVER WORKLOAD ROUND: one nfs_bench run; appends to $T/results
bench() {
	local s=$1 w=$2 r=$3 exp=${EXP_LOCAL[$1]} args out t0=$SECONDS t=$1
	[ "$w" = bootreplay ] && { bootreplay_row "$s" "$r"; return 0; }
	# gan's lock row is answered by the Ganesha with NLM (start_ganeshas)
	[ "$w" = lockpairs ] && [ -n "${SPID[ganl]:-}" ] && [ "$s" = gan ] && t=ganl
	[ "$w" = lockpairs ] && [ -n "${SPID[g65l]:-}" ] && [ "$s" = g65 ] && t=g65l
	case $w in
	null1) args=(--depth=1 --count="$N_NULL1" null) ;;
	null32) args=(--depth="$DEPTH" --count="$N_NULL" null) ;;
	getattr | lookup) args=(--depth="$DEPTH" --dir=attr --files="$N_ATTR" --count="$N_ATTR_OPS" "$w") ;;
	getattr1 | lookup1 | access1) args=(--dir=attr --files="$N_ATTR" --count="$N_ONE" "${w%1}") ;;
	access32) args=(--depth="$DEPTH" --dir=attr --files="$N_ATTR" --count="$N_ATTR_OPS" access) ;;
	read4k1) args=(--io=4096 --dir=seq --name=small --size="$R4K" --count="$N_ONE" reads) ;;
	read4k32) args=(--depth="$DEPTH" --io=4096 --dir=seq --name=small --size="$R4K" --count="$N_ATTR_OPS" reads) ;;
	dir50-1) args=(--dir=dir50 --files=50 --count="$N_LISTS" listings) ;;
	dir50-32) args=(--depth="$DEPTH" --dir=dir50 --files=50 --count="$N_LISTS" listings) ;;
	readdirplus) args=(--dir=big --files="$N_BIG" --passes="$PASSES" readdirplus) ;;
	createremove) args=(--depth="$DEPTH" --dir=work --name="cr-$r" --count="$N_PAIRS" createremove) ;;
	smallfiles) args=(--depth="$DEPTH" --dir=work --name="sf-$r" --count="$N_SMALL" smallfiles) ;;
	write) args=(--depth="$IO_DEPTH" --dir=work --name="seq-$r" --size="$SEQ" write) ;;
	read) args=(--depth="$IO_DEPTH" --dir=seq --name=data --size="$SEQ" read) ;;
	copyup-local) args=(--dir=cu --name="f$r" --size="$CU" copyup) ;;
	copyup-xfs) exp=${EXP_XFS[$s]} args=(--dir=cu --name="f$r" --size="$CU" copyup) ;;
	lockpairs)
		[ -n "${NLM_PORT[$t]:-}" ] || return 0 # no lock manager (unfs3, GANESHA_NLM=off)
		args=(--depth="$DEPTH" --dir=attr --name=f00001 --count="$N_LOCKS"
			--nlm-port="${NLM_PORT[$t]}" lockpairs)
		;;
	esac
	# gan and g65 share one tree: g65's directories of new files are its own
	[ "$s" = g65 ] && [[ $w == @(createremove|smallfiles) ]] && args=("${args[@]/#--name=/--name=g65-}")
	case $w in
	copyup-*) warm "$(lower_of "$s" "$w" "$r")" ;;
	read) warm "$(read_file_of "$s")" ;;
	read4k*) warm "$(read_file_of "$s" small)" ;;
	esac
	local prof=() tracer=
	# PERF_DIR: a profile of the server while nfs_bench runs (PERF_EVENT,
	# default cpu-clock)
	[ -n "${PERF_DIR:-}" ] && prof=(perf record -q -F 999 -e "${PERF_EVENT:-cpu-clock}"
		--call-graph dwarf,32768 -p "${SPID[$t]}" -o "$PERF_DIR/$s-$w-r$r.data" --)
	# TRACE_DIR: the server's system calls counted (strace -c) meanwhile
	if [ -n "${TRACE_DIR:-}" ]; then
		strace ${TRACE_OPTS:--c} -f -q -p "${SPID[$t]}" -o "$TRACE_DIR/$s-$w-r$r.txt" &
		tracer=$!
		sleep 1 # attached to every thread before the first call
	fi
	if ! out=$("${prof[@]}" "$NFS_BENCH" --nfs-port="${NFS_PORT[$t]}" --mount-port="${MOUNT_PORT[$t]}" \
		--export="$exp" --conns="$CONNS" --pid="${SPID[$t]}" "${args[@]}" 2>"$T/bench.err"); then
		[ -n "$tracer" ] && { kill -INT "$tracer"; wait "$tracer" || true; }
		log "FAILED: $s $w round $r: $(cat "$T/bench.err")"
		FAILED=$((FAILED + 1))
		return 0
	fi
	[ -n "$tracer" ] && { kill -INT "$tracer"; wait "$tracer" || true; }
	echo "$out" | sed -n "s/^RESULT /server=$s round=$r row=$w /p" >>"$T/results"
	log "   $s $w: $(echo "$out" | sed -n 's/.* rate=\([^ ]*\) unit=\([^ ]*\) .*/\1 \2/p') ($((SECONDS - t0)) s)"
	[[ $w == dir50-* ]] && log "      $(cat "$T/bench.err")" # calls a listing
	drop_written "$s" "$w" "$r"
}

# ---- the boot replay row (bench/bootreplay.sh, bench/README.md "Boot replay") ----

# bootreplay_rows: adds the row when a boot's trace is cached on this machine
# (bootreplay.sh record makes it, booting a VM: never here), else a note
bootreplay_rows() {
	local c=${BOOTREPLAY_CACHE:-/var/cache/union-nfsd-bench/bootreplay}
	if [ -e "$c/complete" ] && [ -d "$(cat "$c/root")" ] && [ -x "$(dirname "$NFS_BENCH")/boot_replay" ]; then
		ROWS+=(bootreplay)
	else
		log "== no boot trace in $c (bench/bootreplay.sh record): bootreplay row skipped"
	fi
}

# bootreplay_row SERVER ROUND: the trace replayed against a server started
# for it on the boot's root, fresh (bootreplay.sh one): u1 is union-nfsd
# over the root in one layer, sync; u4a the same under the async rule; gan
# Ganesha on a copy of the root, g65 Ganesha 6.5 alike in its chroot (whose
# /srv is $T: start_g65).  u4 and unfs have no cell.
bootreplay_row() {
	local s=$1 r=$2 kind out
	case $s in
	u1) kind=u1 ;;
	u4a) kind=u1a ;;
	gan | g65) kind=$s ;;
	*) return 0 ;;
	esac
	if ! out=$(bash "$(dirname "$0")/bootreplay.sh" one "$kind" "$UNION_NFSD" \
		"$(dirname "$NFS_BENCH")/boot_replay" "$T/bootreplay-$s" 2061 20061 2>"$T/bench.err"); then
		log "FAILED: $s bootreplay round $r: $(cat "$T/bench.err")"
		FAILED=$((FAILED + 1))
		return 0
	fi
	echo "$out" | sed -n "s/^RESULT /server=$s round=$r row=bootreplay /p" >>"$T/results"
	log "   $s bootreplay: $(echo "$out" | sed -n 's/.* secs=\([^ ]*\) .*/\1 s/p')"
}

# lower_of SERVER ROW ROUND: the file a copy-up row changes, as the server sees it
lower_of() {
	local top=$T
	[ "$2" = copyup-xfs ] && top=$X
	case $1 in
	u1) echo "$top/u1/lower/cu/f$3" ;;
	u4 | u4a) echo "$top/u4/l3/cu/f$3" ;;
	gan | g65) echo "$top/plain/cu/f$3" ;;
	*) echo "$top/plain-unfs/cu/f$3" ;;
	esac
}

# read_file_of SERVER [NAME]: the file the READ row (read4k's: NAME small)
# reads, as it lies on disk.  Each server's READ starts with it in the page
# cache and no writeback under way, so the row measures the server and the
# network, not the disk: the 4-layer servers share one file, and whichever
# read it first in a round paid for the cache the write and copy-up rows had
# taken (u4 1,000-1,200 MB/s, u4a after it on the same file 2,100-2,300).
read_file_of() {
	local n=${2:-data} l=l2
	[ "$n" = small ] && l=l3
	case $1 in
	u1) echo "$T/u1/lower/seq/$n" ;;
	u4 | u4a) echo "$T/u4/$l/seq/$n" ;;
	gan | g65) echo "$T/plain/seq/$n" ;;
	*) echo "$T/plain-unfs/seq/$n" ;;
	esac
}

# The copy-up rows and cp start alike: no writeback of earlier rows under way
# (sync), the source in the page cache.
warm() {
	sync
	cat "$1" >/dev/null
}

# The 1 GiB files a run wrote are not needed again: give the disk back.
drop_written() {
	local up=$T/$1/upper
	[[ $1 == @(gan|g65) ]] && up=$T/plain
	[ "$1" = unfs ] && up=$T/plain-unfs
	case $2 in
	write) rm -f "$up/work/seq-$3" ;;
	copyup-local) [[ $1 == @(gan|g65|unfs) ]] || rm -f "$up/cu/f$3" ;;
	copyup-xfs) [[ $1 == @(gan|g65|unfs) ]] || rm -f "$X/$1/upper/cu/f$3" ;;
	esac
}

# time_cp ROW SRC DIR ROUND: the yardsticks of copy-up: cp of the same file
# ("cp"), and cp followed by an fsync of the copy ("cp+sync", coreutils' sync
# FILE), as a copy-up syncs its data before it renames the copy into place
time_cp() {
	local t0 t1
	warm "$2"
	t0=$(date +%s.%N)
	cp "$2" "$3/cp-test"
	t1=$(date +%s.%N)
	cp_row cp "$1" "$4" "$(awk "BEGIN {print $t1 - $t0}")"
	cmp -s "$2" "$3/cp-test" || { log "cp made a different file"; FAILED=$((FAILED + 1)); }
	rm -f "$3/cp-test"
	warm "$2"
	t0=$(date +%s.%N)
	cp "$2" "$3/cp-test"
	sync "$3/cp-test"
	t1=$(date +%s.%N)
	cp_row cp+sync "$1" "$4" "$(awk "BEGIN {print $t1 - $t0}")"
	rm -f "$3/cp-test"
}

cp_row() { # NAME ROW ROUND SECS
	echo "server=$1 round=$3 row=$2 workload=cp ops=$CU secs=$4 rate=0 unit=MB/s cpu_s=-1 cpu_us_per_op=-1 io=0 client_cpu_s=-1" >>"$T/results"
}

loopback_limit() {
	command -v iperf3 >/dev/null || { echo "iperf3: not installed"; return 0; }
	iperf3 -s -1 -B 127.0.0.1 >/dev/null 2>&1 &
	local p=$!
	sleep 0.5
	iperf3 -c 127.0.0.1 -t "$IPERF_SECS" -J 2>/dev/null |
		python3 -c 'import json,sys; j=json.load(sys.stdin); print("iperf3 loopback TCP, 1 stream: %.0f MB/s" % (j["end"]["sum_received"]["bits_per_second"]/8e6))' ||
		echo "iperf3: failed"
	wait "$p" 2>/dev/null || true
}

# kernel_alone ROW WORKLOAD COUNT WHAT UNIT: a row's yardstick, what the
# kernel alone does of the same work on the same filesystem (nfs_bench
# WORKLOAD: DEPTH threads, COUNT items), as answered before the disk, with an
# fsync of each change (what a durable server asks of it, unshared), and
# with each change waiting for a syncfs begun after it, run back to back by
# one thread (group commit: the ceiling of any durable server at this
# depth).  createremove's is localpairs; smallfiles' is localsmall, each
# file made, then 4 KiB written, each of the two waiting so.
kernel_alone() {
	local row=$1 wl=$2 n=$3 what=$4 unit=$5 fs m line
	[[ " ${ROWS[*]} " == *" $row "* ]] || return 0
	fs=$(findmnt -n -o FSTYPE,SOURCE -T "$T" | tr -s ' ' | tr ' ' ,)
	for m in "" sync group; do
		line=$("$NFS_BENCH" "$wl" "$T" "$n" "$DEPTH" $m) || { echo "$wl: failed"; return 0; }
		awk -v fs="$fs" -v m="$m" -v d="$DEPTH" -v what="$what" -v unit="$unit" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
			printf "kernel alone, %s (%s, %s threads, %s): %.0f %ss/s, %.1f us CPU a %s\n",
			what, fs, d, m == "sync" ? "fsync of each change" : m == "group" ? "a shared syncfs after each change" : "no fsync",
			v["rate"], unit, v["cpu_us_per_op"], unit }' <<<"$line"
	done
}

# only_servers NAME...: SERVERS narrowed to these, in this order, less those
# not running (g65 without its root)
only_servers() {
	local s
	SERVERS=()
	for s; do
		if [ -n "${NFS_PORT[$s]:-}" ]; then
			SERVERS+=("$s")
		else
			log "== ONLY_SERVERS: $s is not running; left out"
		fi
	done
}

# ---- main ----

START=$(date -u '+%Y-%m-%d %H:%M UTC')
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
t_setup=$SECONDS
setup_local
setup_xfs
log "   xfs: $((SECONDS - t_setup)) s"
sync
log "== setup took $((SECONDS - t_setup)) s"
start_union u1 lower
start_union u4 l0:l1:l2:l3
start_union u4a l0:l1:l2:l3 u4 async
start_ganeshas
start_g65
start_unfs
[ -n "$UNFS_NOTE" ] && log "== $UNFS_NOTE"
[ -n "$G65_NOTE" ] && log "== $G65_NOTE"
log "== servers: ${SERVERS[*]} (pids ${SPID[*]})"

ROWS=(null1 null32 getattr1 getattr lookup1 lookup access1 access32 read4k1 read4k32 dir50-1 dir50-32
	readdirplus createremove lockpairs smallfiles write read copyup-local)
[ "$HAVE_XFS" = 1 ] && ROWS+=(copyup-xfs)
bootreplay_rows
# ONLY_ROWS / ONLY_SERVERS (space-separated) narrow a run, e.g. for a profile
[ -n "${ONLY_ROWS:-}" ] && read -ra ROWS <<<"$ONLY_ROWS"
[ -n "${ONLY_SERVERS:-}" ] && read -ra only <<<"$ONLY_SERVERS" && only_servers "${only[@]}"
FAILED=0
: >"$T/results"
LOADS=()
# Each round starts with the next server (u1 u4 u4a gan, then u4 u4a gan
# u1, ...), so that what the first run of a row after a pause meets does
# not fall on one server every round: here a 1 GiB WRITE or copy-up often
# cost 3-8x the CPU of the same run seconds later (strace: 3.3 ms a 1 MiB
# pwrite, where a fast run spends 0.55 ms of CPU a MB in all), whichever
# server it was, the first of a row after a pause most often;
# bench/README.md, "Reading the table".
for r in $(seq "$ROUNDS"); do
	t_round=$SECONDS
	k=$(((r - 1) % ${#SERVERS[@]}))
	round_order=("${SERVERS[@]:k}" "${SERVERS[@]:0:k}")
	for w in "${ROWS[@]}"; do
		[ "$w" = copyup-local ] && time_cp copyup-local "$T/pattern-cu" "$T" "$r"
		[ "$w" = copyup-xfs ] && time_cp copyup-xfs "$X/plain/cu/f1" "$X" "$r"
		for s in "${round_order[@]}"; do bench "$s" "$w" "$r"; done
	done
	LOADS+=("$(cut -d' ' -f1 /proc/loadavg)")
	log "== round $r: $((SECONDS - t_round)) s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done

echo
echo "nfs_bench, $START, $(nproc) CPUs; load average before: $LOAD0, after each round: ${LOADS[*]}"
echo "sizes: rounds=$ROUNDS null1=$N_NULL1 null32=$N_NULL attr files=$N_ATTR ops=$N_ATTR_OPS" \
	"one=$N_ONE lists=$N_LISTS r4k=$R4K" \
	"big=$N_BIG x$PASSES pairs=$N_PAIRS locks=$N_LOCKS small=$N_SMALL seq=$SEQ cu=$CU depth=$DEPTH" \
	"io_depth=$IO_DEPTH conns=$CONNS"
python3 - "$T/results" "${SERVERS[*]}" <<'PY'
import os, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(x.split("=", 1) for x in line.split())
    rows.setdefault((kv["row"], kv["server"]), []).append(kv)
servers = sys.argv[2].split()
order = ["null1", "null32", "getattr1", "getattr", "lookup1", "lookup", "access1",
         "access32", "read4k1", "read4k32", "dir50-1", "dir50-32", "readdirplus", "createremove",
         "lockpairs", "smallfiles", "write", "read", "copyup-local", "copyup-xfs",
         "bootreplay"]
D = os.environ.get("DEPTH", "32")  # calls in flight of the rows not at 1
label = {"null1": "NULL, 1 outstanding", "null32": "NULL, %s outstanding" % D,
         "getattr1": "GETATTR, 1 outstanding", "getattr": "GETATTR, %s outst." % D,
         "lookup1": "LOOKUP, 1 outstanding", "lookup": "LOOKUP, %s outst." % D,
         "access1": "ACCESS, 1 outstanding", "access32": "ACCESS, %s outst." % D,
         "read4k1": "READ 4k, 1 outstanding", "read4k32": "READ 4k, %s outst." % D,
         "dir50-1": "READDIRPLUS 50, 1 outst.", "dir50-32": "READDIRPLUS 50, %s outst." % D,
         "readdirplus": "READDIRPLUS 100k dir", "createremove": "CREATE+REMOVE pairs",
         "lockpairs": "LOCK+UNLOCK pairs",
         "smallfiles": "small files C+W4k+C", "write": "seq WRITE+COMMIT, 16",
         "read": "seq READ, 16 outst.", "copyup-local": "copy-up 1st WRITE, local",
         "copyup-xfs": "copy-up 1st WRITE, XFS",
         "bootreplay": "boot replay, ms"}
def med(row, s, key):
    v = [float(k[key]) for k in rows.get((row, s), [])]
    return statistics.median(v) if v else None
def rate(row, s):
    if row.startswith("copyup") or row == "bootreplay":  # ms, lower is better
        v = med(row, s, "secs")
        return None if v is None else v * 1000
    return med(row, s, "rate")
def cpu(row, s):
    if row.startswith("copyup"):
        v = med(row, s, "cpu_s")
        return None if v is None or v < 0 else v * 1000
    v = med(row, s, "cpu_us_per_op")
    return None if v is None or v < 0 else v
def client(row, s):  # the client's CPU per second of the run: 1.0 = a core
    v = [float(k["client_cpu_s"]) / float(k["secs"]) for k in rows.get((row, s), [])
         if float(k.get("client_cpu_s", -1)) >= 0 and float(k["secs"]) > 0]
    return statistics.median(v) if v else None
def f(x, w=9):
    if x is None: return "-".rjust(w)
    return (("%.0f" if x >= 100 else "%.1f" if x >= 10 else "%.2f") % x).rjust(w)
cols = servers + [c for c in ("cp", "cp+sync") if any(r[1] == c for r in rows)]
print()
print("rate: ops/s (pairs/s, files/s, entries/s), MB/s for WRITE/READ, ms for copy-up")
print("and the boot replay (its ratio: Ganesha's ms over the union's, cpu per call)")
print("cpu: server CPU us per op (per MB for WRITE/READ; ms per copy-up); medians")
print("client: nfs_bench's own CPU seconds per second of the run, the highest over the")
print("servers (near 1.0: the client, not the server, may be the limit)")
print()
hdr = "| %-24s |" % "workload" + "".join(" %9s |" % (s + " rate") for s in cols) + \
      "".join(" %9s |" % (s + " cpu") for s in servers) + \
      " u4/gan rate | u4/gan cpu | u4a/gan rate | u4a/gan cpu |" + \
      " u4/g65 rate | u4/g65 cpu | u4a/g65 rate | u4a/g65 cpu | client |"
print(hdr)
print("|" + "---|" * (1 + len(cols) + len(servers) + 9))
# u4/gan compares the default (every change durable at its reply) with
# Ganesha, which answers changes before the disk; u4a/gan compares the same
# promise (the union's async rule).  None on the copy-up rows: Ganesha's is
# a plain 1-byte write.  u4/g65 and u4a/g65: the same against Ganesha 6.5.
def ratios(row, u, g="gan"):
    a, b = rate(row, u), rate(row, g)
    ca, cb = cpu(row, u), cpu(row, g)
    copyup = row.startswith("copyup")
    r = "-" if copyup or not (a and b) else "%.2fx" % ((b / a) if row == "bootreplay" else (a / b))
    c = "-" if copyup or not (ca and cb) else "%.2fx" % (ca / cb)
    return " %*s | %*s |" % (len(u) + 9, r, len(u) + 8, c)
for row in order:
    if not any((row, s) in rows for s in cols):
        continue
    line = "| %-24s |" % label[row]
    line += "".join(" %s |" % f(rate(row, s)) for s in cols)
    line += "".join(" %s |" % f(cpu(row, s)) for s in servers)
    line += ratios(row, "u4") + ratios(row, "u4a")
    line += ratios(row, "u4", "g65") + ratios(row, "u4a", "g65")
    c = [x for x in (client(row, s) for s in servers) if x is not None]
    line += " %6s |" % (("%.2f" % max(c)) if c else "-")
    print(line)
PY
if [ "$FAILED" != 0 ]; then
	echo "run.sh: $FAILED runs FAILED their checks (see above)"
	exit 1
fi
echo "all runs passed their checks"
loopback_limit
"$NFS_BENCH" memcpy 256
kernel_alone createremove localpairs "$N_PAIRS" CREATE+REMOVE pair
kernel_alone smallfiles localsmall "$N_SMALL" "small files" file
[ -n "$UNFS_NOTE" ] && echo "$UNFS_NOTE"
[ -n "$G65_NOTE" ] && echo "$G65_NOTE"
exit 0
