#!/bin/bash
# install-deps.sh - install every Debian package union-nfsd's build, tests and demo
# use (Debian 12).  Idempotent: packages already installed are left alone, and
# apt-get runs only when something is missing.  Never asks: it runs with no
# terminal and no stdin (CI).  Needs root.
set -euo pipefail
PKGS=(
	# build
	build-essential cmake pkg-config git rpcsvc-proto
	libtirpc-dev liblmdb-dev libsodium-dev libnfs-dev libcmocka-dev libinih-dev
	# tests: overlayfs oracle, xattrs, namespaces, mounts
	attr util-linux mount iproute2 kmod diffutils findutils coreutils
	# the clients the demo prints: libnfs' nfs-ls, the kernel's mount.nfs
	libnfs-utils nfs-common
	# kernel client test (../shared/kvm-nfs): qemu, the guest's busybox, kernel unpacking
	qemu-system-x86 busybox-static xz-utils
	# the OS crash test makes the guest's ext4 disk image on the host (mkfs.ext4 -d)
	e2fsprogs
	# the thin-client write test boots a Debian root (with gcc) served by union-nfsd
	debootstrap
	# the fuzz target (fuzz/): clang with libFuzzer's runtime
	clang libclang-rt-14-dev
	# reference server for the test tools and the benchmark
	nfs-ganesha nfs-ganesha-vfs rpcbind
	# bench/run.sh: the loopback TCP limit, the reflink filesystem for copy-up
	iperf3 xfsprogs
)
[ "$(id -u)" = 0 ] || { echo "install-deps.sh: run as root" >&2; exit 1; }
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps.sh: all ${#PKGS[@]} packages present"
	exit 0
fi
echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update </dev/null
apt-get install -y --no-install-recommends -o Dpkg::Options::=--force-confdef \
	-o Dpkg::Options::=--force-confold "${missing[@]}" </dev/null
# Debian enables nfs-ganesha's service on install, and it would take ports 2049 and
# 20048 from union-nfsd.  The tests run ganesha by hand in private namespaces, so
# the service is stopped and disabled again when this script installed it.
# (rpcbind may keep running: union-nfsd registers with it when it is there.)
if [[ " ${missing[*]} " == *" nfs-ganesha "* ]] && [ -d /run/systemd/system ]; then
	systemctl disable --now nfs-ganesha.service 2>/dev/null || true
fi
