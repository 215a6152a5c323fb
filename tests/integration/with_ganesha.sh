#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# with_ganesha.sh DIR CMD [ARGS...] - run CMD while nfs-ganesha exports DIR (NFSv3).
#
# A reference server for the integration tools: whatever nfs_tree or test_protocol
# say about ganesha serving a plain directory is what a correct server says.  CMD
# runs with NFS_PORT, MOUNT_PORT and NFS_URL (a libnfs URL of the export) set.
#
# Everything happens in a private network namespace (only its loopback) and a private
# mount namespace with its own /run: ganesha 4.3 will not start without rpcbind, and
# this rpcbind must not meet the host's.  Both are stopped by pid when CMD ends; the
# namespaces die with their last process.  Needs root, nfs-ganesha-vfs and rpcbind.
set -euo pipefail
if [ "${WITH_GANESHA_INNER:-}" != 1 ]; then
	[ $# -ge 2 ] || { echo "usage: with_ganesha.sh DIR CMD [ARGS...]" >&2; exit 2; }
	exec unshare -m -n --propagation private env WITH_GANESHA_INNER=1 "$0" "$@"
fi
DIR=$(realpath "$1")
shift
PLUGINS=$(dirname "$(dpkg -L nfs-ganesha-vfs 2>/dev/null | grep 'libfsalvfs.so$' | head -1)")
[ -d "$PLUGINS" ] || { echo "with_ganesha.sh: nfs-ganesha-vfs not installed" >&2; exit 1; }
ip link set lo up
mount -t tmpfs -o mode=0755 tmpfs /run
G=/run/ganesha-test
mkdir -p "$G/recovery" /run/ganesha
export NFS_PORT=2049 MOUNT_PORT=20048
cat >"$G/ganesha.conf" <<CONF
NFS_CORE_PARAM {
	Protocols = 3;
	NFS_Port = $NFS_PORT;
	MNT_Port = $MOUNT_PORT;
	Enable_NLM = false;
	Enable_RQUOTA = false;
	Enable_UDP = true;
	Plugins_Dir = $PLUGINS;
}
NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = $G/recovery; }
LOG { Default_Log_Level = EVENT; }
EXPORT {
	Export_Id = 1;
	Path = $DIR;
	Pseudo = $DIR;
	Access_Type = RO;
	Squash = No_Root_Squash;
	SecType = sys;
	Protocols = 3;
	Transports = TCP, UDP;
	Disable_ACL = true;
	Manage_Gids = false;
	CLIENT { Clients = *; Access_Type = RO; Squash = No_Root_Squash; }
	FSAL { Name = VFS; }
}
CONF
rpcbind -f &
RPCBIND_PID=$!
GANESHA_PID=
finish() {
	local rc=$?
	[ -n "$GANESHA_PID" ] && kill "$GANESHA_PID" 2>/dev/null && wait "$GANESHA_PID" 2>/dev/null
	kill "$RPCBIND_PID" 2>/dev/null && wait "$RPCBIND_PID" 2>/dev/null
	exit "$rc"
}
trap finish EXIT
for _ in $(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.05; done
ganesha.nfsd -F -f "$G/ganesha.conf" -L "$G/ganesha.log" -p "$G/ganesha.pid" -N NIV_EVENT &
GANESHA_PID=$!
for _ in $(seq 200); do
	ss -ltn | grep -q ":$NFS_PORT " && ss -ltn | grep -q ":$MOUNT_PORT " && break
	kill -0 "$GANESHA_PID" 2>/dev/null || { cat "$G/ganesha.log" >&2; exit 1; }
	sleep 0.05
done
# ganesha answers MOUNT only after its grace period logic settled; wait for a NULL
sleep 1
export NFS_URL="nfs://127.0.0.1$DIR?nfsport=$NFS_PORT&mountport=$MOUNT_PORT&version=3"
"$@"
