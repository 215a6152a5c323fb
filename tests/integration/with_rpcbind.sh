#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# with_rpcbind.sh [--none] CMD [ARGS...] - run CMD with an rpcbind of its own,
# or with --none in the same private namespaces with no rpcbind at all (port
# 111 free: for the server's built-in portmapper).
#
# For tests whose server and client find each other through the portmapper
# (NLM's callbacks to a client's lock manager): CMD runs in a private network
# namespace, whose loopback is up and empty, and a private mount namespace
# whose /run (rpcbind's socket) is a fresh tmpfs, so nothing registered there
# meets the host's rpcbind.  rpcbind is stopped by pid when CMD ends; the
# namespaces die with their last process.  Needs root and rpcbind (exit 77,
# skipped, without them).
set -euo pipefail
if [ "${WITH_RPCBIND_INNER:-}" != 1 ]; then
	NONE=0
	[ "${1:-}" = --none ] && { NONE=1; shift; }
	[ $# -ge 1 ] || { echo "usage: with_rpcbind.sh [--none] CMD [ARGS...]" >&2; exit 2; }
	[ $NONE = 1 ] || command -v rpcbind >/dev/null ||
		{ echo "with_rpcbind.sh: no rpcbind; skipped" >&2; exit 77; }
	[ "$(id -u)" = 0 ] || { echo "with_rpcbind.sh: needs root; skipped" >&2; exit 77; }
	exec unshare -m -n --propagation private env WITH_RPCBIND_INNER=1 \
		WITH_RPCBIND_NONE=$NONE "$0" "$@"
fi
ip link set lo up
mount -t tmpfs -o mode=0755 tmpfs /run
[ "${WITH_RPCBIND_NONE:-0}" = 1 ] && exec "$@"
rpcbind -f &
RPCBIND_PID=$!
finish() {
	local rc=$?
	kill "$RPCBIND_PID" 2>/dev/null && wait "$RPCBIND_PID" 2>/dev/null
	exit "$rc"
}
trap finish EXIT
for _ in $(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.05; done
[ -S /run/rpcbind.sock ] || { echo "with_rpcbind.sh: rpcbind did not start" >&2; exit 1; }
"$@"
