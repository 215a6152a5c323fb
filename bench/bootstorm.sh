#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bootstorm.sh UNION_NFSD UNION_NFSCTL - a boot storm (issue 30): N qemu
# guests at once boot a Debian 12 systemd root over NFSv3 to multi-user,
# from one union-nfsd, from two union-nfsd gateways behind one address, and
# from NFS-Ganesha over kernel overlayfs; per run it prints the boot times,
# the NFS calls a boot makes (by procedure), the servers' CPU and the bytes
# a boot moves.  A benchmark, not a test: a round of the three took 6
# minutes on the quiet machine, 25 beside a test suite.
#
# The root: debootstrap --variant=minbase --include=systemd-sysv,udev,dbus
# bookworm (debootstrap's default mirror), no kernel inside, made once and
# cached as $BOOTSTORM_CACHE/root-V (V: ROOT_VERSION below; an older one is
# removed).  It gets a unit, bootstorm-mark.service, ordered after
# multi-user.target, that writes the guest's uptime, its NFS client's call
# counts (/proc/net/rpc/nfs) and the root mount's byte counts
# (/proc/self/mountstats) to the second serial port and powers the guest
# off.  The guest kernel and base initramfs are the VM harness's
# (tests/vm/prepare.sh: Debian's kernel, busybox, the NFS client modules);
# bootstorm_init.sh is appended as /init: it brings up eth0, mounts the root
# (vers=3, proto=tcp, nolock: the initramfs has no rpc.statd, and the
# root's own locks are its own anyway, its upper being its alone) and
# switch_root's to /sbin/init (systemd).
#
# Every guest writes to its root, so every server gives each guest a
# writable root of its own over the one shared read-only root, as a
# thin-client netboot does:
#   u1   one union-nfsd, one export with per-client dirs: lowerdir = the
#        root, upperdir = UP/%a, workdir = WORK/%a
#   u2   two union-nfsd gateways behind one address: the guests mount
#        10.0.2.1; nftables in the namespace DNATs each guest's packets to
#        gateway A (10.0.2.2) or B (10.0.2.3) by the low bit of its source
#        address (a hash that splits consecutive addresses evenly; a real
#        site would use jhash), so a client sticks to one gateway.  Both are
#        given the same key file, the same layers and the same per-client
#        dirs, each its own state dir
#   gan  NFS-Ganesha 4.3 (nfs-ganesha-vfs), NFSv3: one kernel overlayfs
#        mount per guest (the root as its lower, an upper and work dir of
#        its own; index=on,nfs_export=on, without which the VFS FSAL gets no
#        file handles from overlayfs) and one export per mount; its private
#        rpcbind and the overlays live in a mount namespace of its own
#
#   netns unfsd-vm-PID (tests/vm/lib.sh; no route out)
#     br0 10.0.2.1/24 (+ .2, .3 for u2) ── the server(s)
#      ├─ vmtap1 ── guest 1, 10.0.2.11
#      └─ ...
#
# What is measured, per run (all guests started at once):
#   boot     host seconds from qemu's start to the guest's multi-user line
#            on its serial port (polled every 0.2 s); "sw->mu": the guest's
#            own uptime from its switch_root to multi-user (systemd's part)
#   calls    the guests' NFS client counts, summed by procedure, per boot;
#            for union-nfsd also the server's own counts (union-nfsctl stats)
#   cpu      the server processes' utime+stime (/proc/PID/stat) over the
#            run, per boot; beside it each qemu's CPU seconds to multi-user
#            (the emulation's cost) and the machine's busy CPU seconds
#   bytes    per boot: READ payload (mountstats) and the bytes the host sent
#            on the guest's tap (every reply, with headers)
# The load average before and after each run is printed with it.
#
# Env:
#   BOOTSTORM_N        guests at once (default 8: see below)
#   BOOTSTORM_RUNS     runs of each configuration, taken in turns (default 1)
#   BOOTSTORM_SERVERS  which configurations, in order (default "u1 u2 gan")
#   BOOTSTORM_MEM      MB per guest (default 384)
#   BOOTSTORM_TIMEOUT  seconds a run's guests may take (default 1200)
#   BOOTSTORM_CACHE    where the root is cached (default
#                      /var/cache/union-nfsd-test/bootstorm; ~160 MB)
#   BOOTSTORM_AGAIN=1  after each run, the same guests boot a second time
#                      from the same server(s) and their own uppers, as a
#                      thin client reboots (a second row, KIND-again)
#   BOOTSTORM_PCAP     FILE: tcpdump of guest 1's NFS and MOUNT traffic in the first
#                      u1 run (needs tcpdump)
#   BOOTSTORM_KEEP=1   keep the temp dir (consoles, logs, uppers)
#
# Why N=8 by default: with no KVM here qemu emulates (TCG), and a guest's
# vCPU is one host thread busy for most of its boot: ~15 s of CPU alone,
# ~22 s with 7 others.  On 2 CPUs N guests at once take about N times 13 s,
# whatever the server, and longer on a machine shared with other work (16
# guests beside a test suite: 11 minutes a run).  Memory (384 MB a guest of
# the 24 GB) would hold ~50; the CPUs hold 8 to a run of a few minutes.
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: bootstorm.sh UNION_NFSD UNION_NFSCTL}")
UNION_NFSCTL=$(realpath "${2:?usage: bootstorm.sh UNION_NFSD UNION_NFSCTL}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../tests/vm/lib.sh"

# Raise when the root's recipe changes: the cached root is made again.
ROOT_VERSION=1
ROOT_PKGS=systemd-sysv,udev,dbus
N=${BOOTSTORM_N:-8}
RUNS=${BOOTSTORM_RUNS:-1}
SERVERS=${BOOTSTORM_SERVERS:-u1 u2 gan}
MEM=${BOOTSTORM_MEM:-384}
RUN_TIMEOUT=${BOOTSTORM_TIMEOUT:-1200}
CACHE=${BOOTSTORM_CACHE:-/var/cache/union-nfsd-test/bootstorm}
ROOT=$CACHE/root-$ROOT_VERSION

die() {
	echo "bootstorm: $*" >&2
	exit 1
}
say() { echo "bootstorm: $*" >&2; }

[ "$(id -u)" = 0 ] || die "run as root (namespaces, taps, debootstrap)"
for t in qemu-system-x86_64 debootstrap nft python3; do
	command -v $t >/dev/null || die "$t missing (etc/install-deps.sh bench)"
done
[[ " $SERVERS " != *" gan "* ]] || command -v ganesha.nfsd >/dev/null ||
	die "ganesha.nfsd missing (etc/install-deps.sh bench)"
[ -z "${BOOTSTORM_PCAP:-}" ] || command -v tcpdump >/dev/null || die "BOOTSTORM_PCAP needs tcpdump"
[ "$N" -ge 1 ] && [ "$N" -le 80 ] || die "BOOTSTORM_N=$N: 1 to 80"

# ---- the root, made once --------------------------------------------------------

# make_root: debootstrap into a temp dir beside the cache, the unit added,
# renamed into place when complete (a root dir exists only complete)
make_root() {
	local b=$CACHE/build.$$ r
	rm -rf "$b"
	mkdir -p "$b"
	it_on_exit "rm -rf '$b'"
	r=$b/root
	say "making the Debian root (once): debootstrap --variant=minbase --include=$ROOT_PKGS bookworm"
	if ! debootstrap --variant=minbase --include="$ROOT_PKGS" bookworm "$r" >"$b/log" 2>&1; then
		tail -30 "$b/log" >&2
		[ ! -f "$r/debootstrap/debootstrap.log" ] || tail -30 "$r/debootstrap/debootstrap.log" >&2
		die "debootstrap failed"
	fi
	# what no boot reads
	rm -rf "$r/var/cache/apt/archives/"*.deb "$r/var/lib/apt/lists/"* \
		"$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/info"
	echo bootstorm >"$r/etc/hostname"
	printf '# the root is mounted by the initramfs\n' >"$r/etc/fstab"
	cat >"$r/usr/local/sbin/bootstorm-mark" <<'EOF'
#!/bin/sh
# The guest reached multi-user: its uptime, its NFS client's counters, then off.
{
	echo "@@BS_MULTIUSER $(cut -d' ' -f1 /proc/uptime)@@"
	cat /proc/net/rpc/nfs
	echo "@@BS_MOUNTSTATS@@"
	cat /proc/self/mountstats
	echo "@@BS_END@@"
} >/dev/ttyS1
sync
echo o >/proc/sysrq-trigger
EOF
	chmod 755 "$r/usr/local/sbin/bootstorm-mark"
	cat >"$r/etc/systemd/system/bootstorm-mark.service" <<'EOF'
[Unit]
Description=bootstorm: multi-user reached
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/bootstorm-mark
EOF
	ln -s ../bootstorm-mark.service "$r/etc/systemd/system/multi-user.target.wants/"
	rm -rf "$ROOT"
	mv "$r" "$ROOT"
	rm -rf "$b"
	find "$CACHE" -mindepth 1 -maxdepth 1 -name 'root-*' ! -name "root-$ROOT_VERSION" \
		-exec rm -rf {} +
	say "root cached in $ROOT ($(du -sh "$ROOT" | cut -f1))"
}

it_init bootstorm
it_watchdog $((RUN_TIMEOUT * RUNS * 3 + 1800))
T=$IT_TMP
if [ "${BOOTSTORM_KEEP:-0}" = 1 ]; then
	IT_EXIT_CMDS[0]="echo 'kept $T'"
fi
mkdir -p "$CACHE"
exec {lock}>"$CACHE/.lock"
flock -w 1200 "$lock" || die "$CACHE/.lock held for 20 min"
[ -d "$ROOT" ] || make_root
flock -u "$lock"
vm_prepare
Q=() prev=
for a in "${VM_QEMU[@]}"; do
	# the uncompressed kernel (prepare.sh): saves each guest ~3 s of emulated
	# decompression, which says nothing of the server
	[ "$prev" = -kernel ] && a=${VM_VMLINUX:-$VM_KERNEL}
	Q+=("$a")
	prev=$a
done
mkdir -p "$T/rd"
install -m 0755 "$HERE/bootstorm_init.sh" "$T/rd/init"
{
	cat "$VM_INITRD"
	(cd "$T/rd" && find . | LC_ALL=C sort | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1)
} >"$T/initrd"
(umask 077 && head -c 32 /dev/urandom >"$T/key")
vm_net_up
# the gateways' own addresses (u2): the guests always mount 10.0.2.1, which
# is u1's and Ganesha's address and, for u2, the address nftables forwards
ip -n "$VM_NS" addr add 10.0.2.2/24 dev br0
ip -n "$VM_NS" addr add 10.0.2.3/24 dev br0
# every run reads the root from the page cache, the first as the others
tar -C "$ROOT" -cf - . | cat >/dev/null

# cpu_of PID...: utime+stime of the processes, in clock ticks
cpu_of() {
	local p s=0 f
	local -a v
	for p in "$@"; do
		f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		# the fields after "pid (comm) ", from state (field 3): utime and
		# stime are fields 14 and 15
		read -ra v <<<"${f##*) }"
		s=$((s + v[11] + v[12]))
	done
	echo $s
}
# busy: the machine's busy clock ticks (all CPUs: user, nice, system,
# irq, softirq, steal)
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- the servers ---------------------------------------------------------------

# union_cmd ADDR STATE CONF: the command of a union-nfsd bound to ADDR, with
# the state dir STATE, the exports of CONF and the run's key file
union_cmd() {
	local addr=$1 state=$2 conf=$3
	printf "%q --config=%q --key-file=%q --state-dir=%q --bind=%s" \
		"$UNION_NFSD" "$conf" "$T/key" "$state" "$addr"
	printf " --nfs-port=2049 --mount-port=20048 --foreground --no-rpcbind --no-portmapper"
}

# start_server KIND DIR: starts KIND's server(s) for a run in DIR; sets
# SRV_PIDS (the server processes whose CPU is counted) and EXPORT_PATH (the
# export every guest mounts, or for gan the prefix guest N's number ends)
start_server() {
	local kind=$1 d=$2 n
	mkdir -p "$d/up" "$d/work"
	case $kind in
	u1 | u2)
		cat >"$d/u.conf" <<CONF
[export]
path = /
lowerdir = $ROOT
upperdir = $d/up/%a
workdir = $d/work/%a
clients = $VM_NETWORK(rw,no_root_squash)
CONF
		if [ "$kind" = u1 ]; then
			cat >"$d/server.sh" <<SH
echo \$\$ >'$d/pids'
exec $(union_cmd 10.0.2.1 "$d/state-a" "$d/u.conf")
SH
		else
			cat >"$d/server.sh" <<SH
$(union_cmd 10.0.2.2 "$d/state-a" "$d/u.conf") >'$d/a.log' 2>&1 &
echo \$! >'$d/pids'
$(union_cmd 10.0.2.3 "$d/state-b" "$d/u.conf") >'$d/b.log' 2>&1 &
echo \$! >>'$d/pids'
wait
SH
			ip netns exec "$VM_NS" nft -f - <<NFT
table ip bootstorm {
	chain pre {
		type nat hook prerouting priority dstnat;
		ip daddr 10.0.2.1 tcp dport { 2049, 20048 } dnat to ip saddr & 0.0.0.1 map { 0.0.0.0 : 10.0.2.2, 0.0.0.1 : 10.0.2.3 }
	}
}
NFT
		fi
		EXPORT_PATH=/
		;;
	gan)
		local plugins
		plugins=$(dirname "$(dpkg -L nfs-ganesha-vfs 2>/dev/null | grep 'libfsalvfs.so$' | head -1)")
		{
			cat <<CONF
NFS_CORE_PARAM {
	Protocols = 3;
	NFS_Port = 2049;
	MNT_Port = 20048;
	Enable_NLM = false;
	Enable_RQUOTA = false;
	Plugins_Dir = $plugins;
}
NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = $d/recovery; }
LOG { Default_Log_Level = EVENT; }
CONF
			for ((n = 1; n <= N; n++)); do
				cat <<CONF
EXPORT {
	Export_Id = $n;
	Path = $d/mnt/g$n;
	Pseudo = /g$n;
	Access_Type = RW;
	Squash = No_Root_Squash;
	SecType = sys;
	Protocols = 3;
	Transports = TCP;
	Disable_ACL = true;
	Manage_Gids = false;
	FSAL { Name = VFS; }
}
CONF
			done
		} >"$d/ganesha.conf"
		cat >"$d/server.sh" <<SH
set -e
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/ganesha '$d/recovery'
for n in \$(seq $N); do
	mkdir -p '$d'/up/g\$n '$d'/work/g\$n '$d'/mnt/g\$n
	mount -t overlay overlay -o 'lowerdir=$ROOT',upperdir='$d'/up/g\$n,workdir='$d'/work/g\$n,index=on,nfs_export=on '$d'/mnt/g\$n
done
rpcbind -f &
for _ in \$(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.05; done
ganesha.nfsd -F -f '$d/ganesha.conf' -L '$d/ganesha.log' -p /run/ganesha/pid -N NIV_EVENT &
echo \$! >'$d/pids'
wait
SH
		EXPORT_PATH=$d/mnt/g
		;;
	esac
	if [ "$kind" = gan ]; then
		vm_server_start "exec unshare -m --propagation private bash '$d/server.sh'" || return 1
		# Ganesha answers MOUNT only once its start has settled
		sleep 2
	else
		vm_server_start "exec bash '$d/server.sh'" || return 1
	fi
	if [ "$kind" = u2 ]; then
		for ((n = 0; n < 600; n++)); do
			[ "$(ip netns exec "$VM_NS" ss -Hltn 'sport = :20048' | wc -l)" -ge 2 ] && break
			sleep 0.1
		done
	fi
	SRV_PIDS=$(cat "$d/pids")
}

stop_server() {
	vm_server_stop
	ip netns exec "$VM_NS" nft delete table ip bootstorm 2>/dev/null || true
}

# ---- the guests ---------------------------------------------------------------

# guest_start N DIR: guest N of the run in DIR, booted now
guest_start() {
	local n=$1 d=$2 tap=vmtap$1 e=$EXPORT_PATH
	[ "$e" = / ] || e=$e$n
	ip -n "$VM_NS" link del "$tap" 2>/dev/null || true
	ip -n "$VM_NS" tuntap add dev "$tap" mode tap &&
		ip -n "$VM_NS" link set "$tap" master br0 &&
		ip -n "$VM_NS" link set "$tap" up || return 1
	: >"$d/g$n.console"
	: >"$d/g$n.out"
	date +%s.%N >"$d/g$n.t0"
	ip netns exec "$VM_NS" timeout -k 5 "$RUN_TIMEOUT" qemu-system-x86_64 "${Q[@]}" \
		-m "$MEM" -initrd "$T/initrd" -pidfile "$d/g$n.pid" \
		-append "$VM_APPEND systemd.show_status=0 bs.ip=$(vm_guest_ip "$n")/24 bs.server=$VM_SERVER_IP bs.export=$e bs.opts=vers=3,proto=tcp,port=2049,mountport=20048,mountproto=tcp,nolock" \
		-serial "file:$d/g$n.console" -serial "file:$d/g$n.out" \
		-netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
		-device "virtio-net-pci,netdev=n0,mac=52:54:00:00:00:$(printf %02x "$n")" \
		</dev/null >"$d/g$n.qemu" 2>&1 &
	VM_QPID[$n]=$!
}

# watch_guests DIR: until every guest is off; as each reaches multi-user, the host
# time and its qemu's CPU ticks go to gN.mu.  A guest still on 60 s after it
# wrote its counters is stopped: its figures are in, and an emulated kernel
# on a loaded host can hang in its power-off (a soft lockup of ksoftirqd was
# seen once), which would hold the run until its timeout.
watch_guests() {
	local d=$1 n left qp
	while :; do
		left=0
		for ((n = 1; n <= N; n++)); do
			[ -n "${VM_QPID[$n]}" ] || continue
			if [ ! -e "$d/g$n.mu" ] && grep -q '@@BS_MULTIUSER' "$d/g$n.out"; then
				qp=$(cat "$d/g$n.pid" 2>/dev/null || echo 0)
				echo "$(date +%s.%N) $(cpu_of "$qp")" >"$d/g$n.mu"
			fi
			if [ -e "$d/g$n.mu" ] && [ "$(($(date +%s) - $(cut -d. -f1 "$d/g$n.mu")))" -gt 60 ] &&
				grep -q '@@BS_END@@' "$d/g$n.out"; then
				echo "bootstorm: guest $n still on 60 s after multi-user: stopped" >&2
				qp=$(cat "$d/g$n.pid" 2>/dev/null) && kill -TERM "$qp" 2>/dev/null || true
			fi
			if kill -0 "${VM_QPID[$n]}" 2>/dev/null; then
				left=$((left + 1))
			else
				wait "${VM_QPID[$n]}" 2>/dev/null || true
				VM_QPID[$n]=
			fi
		done
		[ "$left" -gt 0 ] || break
		sleep 0.2
	done
}

# ---- one run ---------------------------------------------------------------------

# boot_all D R: the N guests booted at once from the server(s) of the run
# in D, the round's files (guests, counters, info) in R
boot_all() {
	local d=$1 r=$2 n s c0 b0 t0
	mkdir -p "$r"
	if [ -e "$d/state-a" ]; then
		for s in "$d"/state-?; do
			"$UNION_NFSCTL" --socket="$s/ctl.sock" --json stats >"$r/${s##*/}.stats0" || return 1
		done
	fi
	echo "load $(loadavg)" >"$r/info"
	c0=$(cpu_of $SRV_PIDS)
	b0=$(busy)
	t0=$(date +%s.%N)
	for ((n = 1; n <= N; n++)); do
		guest_start "$n" "$r" || return 1
	done
	watch_guests "$r"
	{
		echo "secs $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
		echo "server_ticks $(($(cpu_of $SRV_PIDS) - c0))"
		echo "busy_ticks $(($(busy) - b0))"
		echo "load_after $(loadavg)"
	} >>"$r/info"
	for ((n = 1; n <= N; n++)); do
		echo "tap $n $(ip -n "$VM_NS" -j -s link show dev "vmtap$n" |
			python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["stats64"]; print(s["tx"]["bytes"], s["rx"]["bytes"])')" >>"$r/info"
	done
	if [ -e "$d/state-a" ]; then
		for s in "$d"/state-?; do
			"$UNION_NFSCTL" --socket="$s/ctl.sock" --json stats >"$r/${s##*/}.stats1" || return 1
		done
	fi
}

# run_one KIND K: N guests from KIND's server(s), run K; the results in
# $T/KIND-rK, and with BOOTSTORM_AGAIN=1 those of the second boot, on the
# same server and the same uppers, in $T/KIND-rK/again
run_one() {
	local kind=$1 k=$2 d=$T/$1-r$2 pcap_pid=
	mkdir -p "$d"
	start_server "$kind" "$d" || return 1
	if [ -n "${BOOTSTORM_PCAP:-}" ] && [ "$kind" = u1 ] && [ "$k" = 1 ]; then
		ip netns exec "$VM_NS" tcpdump -q -Z root -i br0 -s 0 -w "$BOOTSTORM_PCAP" \
			"host $(vm_guest_ip 1) and (tcp port 2049 or tcp port 20048)" 2>"$d/tcpdump.log" &
		pcap_pid=$!
		sleep 1
	fi
	boot_all "$d" "$d" || return 1
	if [ "$kind" = u2 ]; then
		echo "split $(grep -c 'MNT / from' "$d/a.log") $(grep -c 'MNT / from' "$d/b.log")" >>"$d/info"
	fi
	if [ -n "$pcap_pid" ]; then
		kill -INT "$pcap_pid" 2>/dev/null || true
		wait "$pcap_pid" 2>/dev/null || true
	fi
	if [ "${BOOTSTORM_AGAIN:-0}" = 1 ]; then
		boot_all "$d" "$d/again" || return 1
	fi
	stop_server
	report "$d" "$kind" "$k"
	[ "${BOOTSTORM_AGAIN:-0}" != 1 ] || report "$d/again" "$kind-again" "$k"
}

# ---- the report ------------------------------------------------------------------

# report DIR KIND K: the run's figures, printed and kept as DIR/summary.json
report() {
	python3 - "$@" "$N" <<'PY'
import json, os, re, statistics, sys
d, kind, k, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tck = os.sysconf("SC_CLK_TCK")
PROCS = ("null getattr setattr lookup access readlink read write create mkdir symlink "
         "mknod remove rmdir rename link readdir readdirplus fsstat fsinfo pathconf commit").split()
info = {}
taps = []
for line in open(f"{d}/info"):
    w = line.split()
    if w[0] == "tap":
        taps.append((int(w[2]), int(w[3])))
    else:
        info[w[0]] = w[1:]
boot, swmu, qcpu, rbytes, failed = [], [], [], [], []
calls = {p: 0 for p in PROCS}
for g in range(1, n + 1):
    out = open(f"{d}/g{g}.out", errors="replace").read().replace("\r", "")
    mu = re.search(r"@@BS_MULTIUSER ([0-9.]+)@@", out)
    sw = re.search(r"@@BS_SWITCH ([0-9.]+)@@", out)
    if not (mu and os.path.exists(f"{d}/g{g}.mu") and "@@BS_END@@" in out):
        failed.append(g)
        continue
    t0 = float(open(f"{d}/g{g}.t0").read())
    t1, ticks = open(f"{d}/g{g}.mu").read().split()
    boot.append(float(t1) - t0)
    qcpu.append(int(ticks) / tck)
    if sw:
        swmu.append(float(mu.group(1)) - float(sw.group(1)))
    m = re.search(r"^proc3 (\d+) (.*)$", out, re.M)
    for p, v in zip(PROCS, m.group(2).split()):
        calls[p] += int(v)
    ms = out.split("@@BS_MOUNTSTATS@@", 1)[1]
    dev = re.search(r"^device \S+ mounted on / with fstype nfs .*?(?=^device |\Z)", ms, re.M | re.S)
    b = re.search(r"^\s*bytes:\s+(.*)$", dev.group(0), re.M).group(1).split()
    rbytes.append(int(b[4]))
ok = len(boot)
S = {"kind": kind, "run": int(k), "n": n, "booted": ok, "failed": failed,
     "load_before": " ".join(info["load"]), "load_after": " ".join(info["load_after"]),
     "secs": float(info["secs"][0])}
if ok:
    tot = sum(calls.values())
    S.update({
        "boot_median": statistics.median(boot), "boot_max": max(boot),
        "swmu_median": statistics.median(swmu) if swmu else 0.0,
        "swmu_max": max(swmu) if swmu else 0.0,
        "client_calls_per_boot": tot / ok,
        "client_mix": {p: v / ok for p, v in calls.items() if v},
        "server_cpu_per_boot": int(info["server_ticks"][0]) / tck / ok,
        "server_cpu_us_per_call": int(info["server_ticks"][0]) / tck / tot * 1e6,
        "qemu_cpu_per_boot": statistics.median(qcpu),
        "busy_cpu_per_boot": int(info["busy_ticks"][0]) / tck / ok,
        "read_bytes_per_boot": sum(rbytes) / ok,
        "tap_tx_per_boot": sum(t[0] for t in taps) / ok,
        "tap_rx_per_boot": sum(t[1] for t in taps) / ok,
    })
    # the server's own counts (union-nfsd): NFS and MOUNT calls over the run
    srv = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".stats1"):
            continue
        for ph, sign in (("stats0", -1), ("stats1", 1)):
            for s in json.load(open(f"{d}/{f[:-6]}{ph}"))["samples"]:
                if s["name"] != "union_nfsd_rpc_calls_total":
                    continue
                l = s["labels"]
                key = f'{l.get("program", "?")}.{l.get("procedure", "?")}'
                srv[key] = srv.get(key, 0) + sign * s["value"]
    if srv:
        S["server_calls_per_boot"] = sum(v for key, v in srv.items()
                                         if key.startswith("NFS3.")) / ok
        S["server_mix"] = {key: v / ok for key, v in sorted(srv.items()) if v}
json.dump(S, open(f"{d}/summary.json", "w"), indent=1)
print(f"--- {kind} run {k}: {ok}/{n} guests reached multi-user in {S['secs']:.0f} s;"
      f" load {S['load_before']} -> {S['load_after']}")
if "split" in info:
    print(f"    guests on gateway A / B: {info['split'][0]} / {info['split'][1]}")
if failed:
    print(f"    FAILED guests: {failed} (their consoles: {d}/gN.console)")
if ok:
    print(f"    boot from qemu start: median {S['boot_median']:.1f} s, max {S['boot_max']:.1f} s;"
          f" switch_root to multi-user: median {S['swmu_median']:.1f} s, max {S['swmu_max']:.1f} s")
    print(f"    per boot: {S['client_calls_per_boot']:.0f} NFS calls (client's count),"
          f" server CPU {S['server_cpu_per_boot']:.3f} s ({S['server_cpu_us_per_call']:.0f} us a call),"
          f" qemu CPU {S['qemu_cpu_per_boot']:.1f} s, machine busy {S['busy_cpu_per_boot']:.1f} s")
    print(f"    per boot: READ {S['read_bytes_per_boot'] / 1e6:.1f} MB, on the wire"
          f" {S['tap_tx_per_boot'] / 1e6:.1f} MB to the guest, {S['tap_rx_per_boot'] / 1e6:.1f} MB from it")
    print("    client calls per boot: " + ", ".join(
        f"{p} {v:.0f}" for p, v in sorted(S["client_mix"].items(), key=lambda x: -x[1])))
    if "server_mix" in S:
        print(f"    server's count per boot: {S['server_calls_per_boot']:.0f} NFS calls; " + ", ".join(
            f"{p} {v:.0f}" for p, v in sorted(S["server_mix"].items(), key=lambda x: -x[1])))
PY
}

# ---- the runs, in turns ------------------------------------------------------------

echo "bootstorm: N=$N guests of $MEM MB, RUNS=$RUNS, servers: $SERVERS;" \
	"$(nproc) CPUs, $(free -g | awk '/^Mem:/{print $2}') GB; load $(loadavg); qemu ${Q[*]:0:4}"
echo "root: $ROOT ($(du -sh "$ROOT" | cut -f1)), kernel $VM_KVER"
for ((k = 1; k <= RUNS; k++)); do
	for kind in $SERVERS; do
		run_one "$kind" "$k" || die "$kind run $k failed; its files: $T/$kind-r$k"
	done
done

# the medians over the runs, one line per server
again=
[ "${BOOTSTORM_AGAIN:-0}" != 1 ] || again=$(printf '%s-again ' $SERVERS)
python3 - "$T" $SERVERS $again <<'PY'
import glob, json, statistics, sys
t, kinds = sys.argv[1], sys.argv[2:]
print("\n| server | runs | boot median (s) | boot max (s) | sw->mu median (s) | NFS calls a boot"
      " | server CPU a boot (s) | us a call | qemu CPU a boot (s) | READ MB a boot | wire MB a boot |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for kind in kinds:
    R = [json.load(open(f)) for f in sorted(glob.glob(f"{t}/{kind.replace('-again', '')}-r*/"
                                                     f"{'again/' if kind.endswith('-again') else ''}summary.json"))]
    R = [r for r in R if r["booted"]]
    if not R:
        continue
    m = lambda key: statistics.median(r[key] for r in R)
    print(f"| {kind} | {len(R)} | {m('boot_median'):.1f} | {m('boot_max'):.1f} | {m('swmu_median'):.1f}"
          f" | {m('client_calls_per_boot'):.0f} | {m('server_cpu_per_boot'):.3f}"
          f" | {m('server_cpu_us_per_call'):.0f} | {m('qemu_cpu_per_boot'):.1f}"
          f" | {m('read_bytes_per_boot') / 1e6:.1f} | {m('tap_tx_per_boot') / 1e6 + m('tap_rx_per_boot') / 1e6:.1f} |")
PY
