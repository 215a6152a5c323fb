# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# g65root.sh - sourced by bench/run.sh and bench/bootreplay.sh: how a
# Ganesha 6.5 of the cached trixie root (bench/ganesha65.sh) is run
# chrooted, in the caller's private network and mount namespaces.
#
# The chroot sees the caller's temp dir TOP as /srv, /proc and /dev are
# the host's, /run a tmpfs of its own for its own rpcbind.  The caller
# keeps PIDS (processes it kills at exit) and UMOUNTS (unmounted in reverse
# order, after them).

# Ganesha 6 asks the kernel to treat it as an I/O flusher (prctl
# PR_SET_IO_FLUSHER, which needs CAP_SYS_RESOURCE, missing in some
# containers) and will not start when refused unless told it may
# shellcheck disable=SC2034 # used by the scripts that source this one
G65_CORE="Allow_Set_Io_Flusher_Fail = true;"

# g65_mount ROOT TOP: TOP at ROOT/srv, and ROOT's /proc, /dev and /run
g65_mount() {
	mount --rbind "$2" "$1/srv"
	UMOUNTS+=("$1/srv")
	mount -t proc proc "$1/proc"
	UMOUNTS+=("$1/proc")
	mount --rbind /dev "$1/dev"
	UMOUNTS+=("$1/dev")
	mount -t tmpfs -o mode=0755 tmpfs "$1/run"
	UMOUNTS+=("$1/run")
}

# g65_rpcbind ROOT TOP: the chroot's own rpcbind, which Ganesha registers
# with (it will not start without one), on ROOT/run/rpcbind.sock only;
# returns 1 when it did not start.  rpcbind binds port 111 on every address
# for TCP whatever -h says (-h covers UDP and always adds 127.0.0.1), and
# the private rpcbind of gan holds it: this one reads, in a mount namespace
# of its own, a netconfig that lists only the local transports (kept in
# TOP), so it opens no port; Ganesha's own netconfig is the root's, and it
# registers through the socket.
g65_rpcbind() {
	grep -E '^(local|unix)[[:space:]]' "$1/etc/netconfig" >"$2/g65-netconfig"
	unshare -m --propagation private sh -c 'mount --bind "$1" "$2/etc/netconfig" && exec chroot "$2" rpcbind -f' \
		sh "$2/g65-netconfig" "$1" &
	PIDS+=($!)
	for _ in $(seq 100); do [ -S "$1/run/rpcbind.sock" ] && return 0; sleep 0.05; done
	return 1
}
