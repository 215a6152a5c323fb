#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# install-deps.sh [GROUP...] - install the Debian 12 packages that union-nfsd's
# build, tests and benchmark need, by group (as root):
#
#   build  build union-nfsd and serve and mount the demo (etc/demo.sh)
#   tests  what tests/run.sh runs beyond that: the integration tests' tools, the
#          kernel client in qemu, the fuzzer, the reference server
#   bench  what bench/run.sh, bench/readdir_bench.sh and bench/bootstorm.sh
#          run beyond build
#
#   bash etc/install-deps.sh build          # etc/demo.sh
#   bash etc/install-deps.sh build tests    # tests/run.sh
#   bash etc/install-deps.sh build bench    # bench/run.sh
#
# No GROUP means all three.  Idempotent: packages already installed are left
# alone, and apt-get runs only when something is missing.  Never asks: it runs
# with no terminal and no stdin (CI).
set -euo pipefail

# build: the compiler, rpcgen (rpcsvc-proto) and the libraries CMakeLists.txt
# requires.  libnfs-dev and libcmocka-dev only link the tests and benchmarks,
# but the one CMake project configures those with the server, and requires both.
# The run part: the demo finds free ports with ss (iproute2) and prints two
# clients to mount it with: libnfs' nfs-ls (libnfs-utils) and the kernel's
# `mount -t nfs`, which needs mount.nfs (nfs-common): without it mount(8) calls
# mount(2) directly, and the kernel refuses an NFS mount whose server address
# no mount.nfs resolved (addr=).  libsystemd-dev is optional: found, the
# server tells systemd when it is ready (sd_notify, the unit's Type=notify);
# file and dpkg-dev (dpkg-shlibdeps; build-essential brings it) let
# `cpack -G DEB` compute the package's Depends.  libmicrohttpd-dev: the
# --metrics endpoint's HTTP server (server/ops/metrics.c).  libjansson-dev: the
# control socket's JSON replies (server/ctl.c) and union-nfsctl (ctl/).
BUILD=(
	build-essential cmake pkg-config rpcsvc-proto
	libtirpc-dev liblmdb-dev libsodium-dev libinih-dev libnfs-dev libcmocka-dev
	libsystemd-dev file dpkg-dev libmicrohttpd-dev libjansson-dev
	iproute2 libnfs-utils nfs-common
)
# tests: tests/integration/*.sh and tests/run.sh.
TESTS=(
	# mklayers.sh, kvm_write.sh: trusted.* xattrs (setfattr); the oracles'
	# overlay mounts (modprobe overlay), namespaces (unshare, ip), diff
	attr util-linux mount iproute2 kmod diffutils findutils coreutils
	# kvm_readdir.sh's layers; bench_smoke (ctest runs bench/run.sh --smoke)
	python3
	# the kernel client tests (kvm_*.sh) and their VM harness (tests/vm):
	# qemu; busybox-static, the guests' userland, whose cpio and depmod also
	# build their initramfs; the kernel's modules unpacked (xz); kvm_crash.sh
	# makes the guest's ext4 image on the host (mkfs.ext4 -d); kvm_write.sh
	# boots a Debian root made by debootstrap; kvm_readdir.sh and
	# kvm_two_clients.sh build their guest helpers static (libc6-dev's libc.a)
	qemu-system-x86 busybox-static xz-utils e2fsprogs debootstrap libc6-dev
	# kvm_powercut.sh's XFS disk: mkfs.xfs (from a prototype file) and
	# xfs_repair -n after the last boot
	xfsprogs
	# kvm_locks.sh copies the host's rpcbind, rpc.statd (nfs-common, in
	# BUILD) and sqlite3 into its guests; the server side's rpcbind is below
	sqlite3
	# kvm_failover.sh moves a floating address as keepalived does: the
	# gratuitous ARP of the gateway that takes it (arping -U)
	iputils-arping
	# tests/run.sh's fuzzing (fuzz/): clang and libFuzzer's runtime
	clang libclang-rt-14-dev
	# the reference server: bench_smoke; ORACLE_SERVER=ganesha (oracle.sh),
	# DIFF_SERVER=ganesha (diff_oracle.sh) and with_ganesha.sh check the
	# test tools against it.  Ganesha 4.3 needs an rpcbind.  The NLM and NSM
	# tests (with_rpcbind.sh) run one of their own; rpcbind listens on port
	# 111 only when /etc/services names it, which netbase provides (a minimal
	# Debian has none, and rpcbind does not depend on it)
	nfs-ganesha nfs-ganesha-vfs rpcbind netbase
	# the packaging tests (tests/pkg/): the man pages checked by mandoc and
	# rendered by man (man-db), the .deb checked by lintian and its unit by
	# systemd-analyze (systemd); pkg/systemd_vm boots the .deb in a Debian
	# root made by debootstrap, on an image made by mkfs.ext4 (both above)
	mandoc man-db lintian systemd
	# integration/metrics: promtool (prometheus) checks the metrics page
	prometheus
	# integration/keepalived: etc/keepalived.conf moving a floating address
	keepalived
)
# bench: bench/run.sh (its table and data set in python3, its private network
# and mount namespace), bench/readdir_bench.sh and bench/bootstorm.sh.
BENCH=(
	# the server compared with, and the private rpcbind it needs (with
	# netbase's /etc/services, as in the tests group)
	nfs-ganesha nfs-ganesha-vfs rpcbind netbase
	# the loopback TCP limit (READ's yardstick); the reflink filesystem of
	# the XFS copy-up row
	iperf3 xfsprogs
	python3 util-linux mount iproute2
	# bench/bootstorm.sh: the VM harness's guests (qemu, busybox-static,
	# xz-utils for the kernel's modules), the Debian root they boot
	# (debootstrap), and the rule that puts two gateways behind one address
	# (nftables); tcpdump for its BOOTSTORM_PCAP
	qemu-system-x86 busybox-static xz-utils debootstrap nftables tcpdump
)

say() { echo "install-deps.sh: $*" >&2; }

[ "$(id -u)" = 0 ] || { say "run as root"; exit 1; }
[ $# -gt 0 ] || set -- build tests bench
want=()
for g in "$@"; do
	case $g in
	build) want+=("${BUILD[@]}") ;;
	tests) want+=("${TESTS[@]}") ;;
	bench) want+=("${BENCH[@]}") ;;
	*)
		say "unknown group '$g' (build, tests, bench)"
		exit 2
		;;
	esac
done
mapfile -t want < <(printf '%s\n' "${want[@]}" | sort -u)
# NFS-Ganesha's VFS export reads the mount table from /etc/mtab, which a Debian
# system links to /proc/self/mounts (systemd-tmpfiles makes the link); a root
# made without systemd (a debootstrap --variant=minbase chroot) lacks it, and
# ganesha then refuses every export.
if [[ " ${want[*]} " == *" nfs-ganesha "* ]] && [ ! -e /etc/mtab ]; then
	ln -sfn ../proc/self/mounts /etc/mtab
	say "made /etc/mtab -> ../proc/self/mounts (NFS-Ganesha reads it)"
fi
missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps.sh: $*: all ${#want[@]} packages present"
	exit 0
fi
echo "install-deps.sh: $*: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update </dev/null
apt-get install -y --no-install-recommends -o Dpkg::Options::=--force-confdef \
	-o Dpkg::Options::=--force-confold "${missing[@]}" </dev/null
# Debian enables nfs-ganesha's service on install, and it would take ports 2049
# and 20048 from union-nfsd.  The tests and benchmarks run ganesha by hand in
# private namespaces, so the service is stopped and disabled again when this
# script installed it, whichever group asked for it.  (rpcbind may keep
# running: union-nfsd registers with it when it is there.)
if [[ " ${missing[*]} " == *" nfs-ganesha "* ]] && [ -d /run/systemd/system ]; then
	systemctl disable --now nfs-ganesha.service 2>/dev/null || true
fi
# The same for keepalived: integration/keepalived runs its own in namespaces,
# and the host's must move no address of this machine.
if [[ " ${missing[*]} " == *" keepalived "* ]] && [ -d /run/systemd/system ]; then
	systemctl disable --now keepalived.service 2>/dev/null || true
fi
