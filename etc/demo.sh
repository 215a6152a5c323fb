#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# demo.sh - from a fresh clone to a served union, in one command (Debian 12, root):
#
#   bash etc/demo.sh
#
# Installs the packages it needs (etc/install-deps.sh build: the compiler, the
# libraries, and the clients it prints), builds a Release tree in build/,
# creates two demo layers under /tmp/union-nfsd-demo - "os" (a small OS-like tree)
# and "site" above it (it overrides etc/motd and whites out one file) - and runs
# union-nfsd in the foreground on the default ports 2049 (NFS) and 20048 (MOUNT),
# or on free ones if those are taken.  Before serving it prints how to mount the
# union with libnfs and with the Linux kernel client.  Ctrl-C stops it.
#
# Env: DEMO_BUILD_DIR (default build), DEMO_BIND (default 127.0.0.1; 0.0.0.0 serves
# the network), DEMO_SKIP_DEPS=1 to skip the package check.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${DEMO_BUILD_DIR:-build}
BIND=${DEMO_BIND:-127.0.0.1}
D=/tmp/union-nfsd-demo

say() { echo "demo: $*" >&2; }

[ "$(id -u)" = 0 ] || { say "run me as root (packages, ports 2049/20048)"; exit 1; }
[ "${DEMO_SKIP_DEPS:-}" = 1 ] || bash etc/install-deps.sh build </dev/null >&2
say "building (Release) in $BUILD/"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target union-nfsd union-nfsctl -j"$(nproc)" >/dev/null

# ---- the demo layers
rm -rf "$D"
mkdir -p "$D/os/etc" "$D/os/usr/bin" "$D/os/usr/share/doc/demo" "$D/site/etc" \
	"$D/site/usr/share/doc/demo" "$D/site/srv/www" "$D/state"
cat >"$D/os/etc/os-release" <<'EOT'
NAME="Demo OS"
VERSION_ID="1"
EOT
echo "Welcome to Demo OS (from the os layer)." >"$D/os/etc/motd"
echo "Welcome to this site (the site layer overrides the os layer's motd)." \
	>"$D/site/etc/motd"
printf '#!/bin/sh\necho hello from the os layer\n' >"$D/os/usr/bin/hello"
chmod 755 "$D/os/usr/bin/hello"
echo "Shipped with the OS; the site layer whites this file out." \
	>"$D/os/usr/share/doc/demo/REMOVED-BY-SITE"
echo "Shipped with the OS and still visible." >"$D/os/usr/share/doc/demo/README"
# an overlayfs white-out: a 0/0 character device with the name it hides
mknod "$D/site/usr/share/doc/demo/REMOVED-BY-SITE" c 0 0
echo "<h1>site content, only in the site layer</h1>" >"$D/site/srv/www/index.html"
ln -s ../../etc/motd "$D/site/srv/www/motd"

# ---- ports: the defaults, unless something already listens there
busy() { ss -Hltun 2>/dev/null | awk '{print $5}' | grep -qE "[:.]$1\$"; }
free_port() {
	local p=$1
	while busy "$p"; do p=$((p + 1)); done
	echo "$p"
}
NFS_PORT=2049 MOUNT_PORT=20048
if busy 2049 || busy 20048; then
	NFS_PORT=$(free_port 32049)
	MOUNT_PORT=$(free_port $((NFS_PORT + 1)))
	say "port 2049 or 20048 is already in use (another NFS server?): using" \
		"NFS port $NFS_PORT and MOUNT port $MOUNT_PORT instead"
fi

cat >&2 <<EOT

union-nfsd demo: serving the union of $D/site over $D/os
(read-only, bound to $BIND), export path /.

Mount it with libnfs:
  nfs-ls 'nfs://127.0.0.1/?version=3&nfsport=$NFS_PORT&mountport=$MOUNT_PORT'
  nfs-ls -R 'nfs://127.0.0.1/?version=3&nfsport=$NFS_PORT&mountport=$MOUNT_PORT'
  nfs-cat 'nfs://127.0.0.1/etc/motd?version=3&nfsport=$NFS_PORT&mountport=$MOUNT_PORT'

or with the Linux kernel client (from another shell):
  mkdir -p /mnt/demo
  mount -t nfs -o vers=3,proto=tcp,port=$NFS_PORT,mountport=$MOUNT_PORT,mountproto=tcp,nolock 127.0.0.1:/ /mnt/demo
  cat /mnt/demo/etc/motd; ls /mnt/demo/usr/share/doc/demo; umount /mnt/demo
(nolock: union-nfsd is this host's lock manager and status monitor now, so
a client on this host locks locally; clients on other hosts of a server
bound to their network mount with locks and no options:
  mount -t nfs -o vers=3 SERVER:/ /mnt)

Ask the server what it serves and who mounted it (as root):
  $BUILD/union-nfsctl --socket=$D/state/ctl.sock status
  $BUILD/union-nfsctl --socket=$D/state/ctl.sock clients

Ctrl-C stops the server.

EOT
exec "$BUILD/union-nfsd" --lowerdir="$D/site:$D/os" --nfs-port="$NFS_PORT" \
	--mount-port="$MOUNT_PORT" --bind="$BIND" --state-dir="$D/state" --foreground
