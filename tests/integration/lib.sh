# SPDX-License-Identifier: Apache-2.0
# lib.sh - shared helpers of the integration test scripts (source it; bash only).
#
#   it_private_mounts "$@"    first thing in a script that mounts: run the script
#                             again in a mount namespace of its own, so that no
#                             mount of it outlives it, even when it is SIGKILLed
#   it_init NAME              make $IT_TMP, install the EXIT/INT/TERM cleanup trap
#   it_on_exit CMD...         run CMD at exit (last registered runs first)
#   start_union_nfsd BIN ARGS...
#                             start BIN --nfs-port=0 --mount-port=0 --bind=127.0.0.1
#                             --state-dir=... --foreground ARGS in the background,
#                             wait (60 s at most: a loaded machine, an ASan
#                             build) for its "listening nfs=P mount=M" line; sets
#                             SRV_PID, NFS_PORT, MOUNT_PORT, SRV_LOG; stopped at exit.
#                             Without --clients in ARGS the server's default holds:
#                             loopback callers on reserved ports (libnfs run as root
#                             binds one), as themselves; a client run as another
#                             user needs --clients='127.0.0.1(rw,insecure)'
#   it_overlay_test NAME SECONDS "$@"
#                             the start of a test that mounts kernel overlayfs:
#                             skip without root or overlayfs, then
#                             it_private_mounts, it_init NAME, it_watchdog SECONDS
#   it_overlay_ro MNT LOWERS  a read-only kernel overlayfs of LOWERS (':' list, top
#                             first) on MNT (made here), unmounted at exit
#   stop_pid PID [SECONDS]    SIGTERM, wait up to SECONDS (default 30), then SIGKILL
#   nfs_url EXPORT            libnfs URL of the running server
#   skip MSG                  print MSG, exit 77 (ctest SKIP_RETURN_CODE)
#   it_watchdog SECONDS       stop this script (cleanly, through its trap) after
#                             SECONDS, and every process it started, the whole
#                             tree: set it below the ctest TIMEOUT, whose SIGKILL
#                             no trap survives
#
# Processes are stopped by pid, mounts unmounted by path, temp dirs removed: every
# test leaves the machine as it found it, also when it fails.

IT_EXIT_CMDS=()

it_private_mounts() {
	[ "${IT_PRIVATE_MOUNTS:-}" = $$ ] && return 0
	# exec keeps the pid, so ctest and the watchdog still see the same process;
	# the namespace (and every mount in it) goes when its last process exits
	IT_PRIVATE_MOUNTS=$$ exec unshare -m --propagation private bash "$0" "$@"
}

it_cleanup() {
	local rc=$? i
	trap - EXIT INT TERM HUP
	for ((i = ${#IT_EXIT_CMDS[@]} - 1; i >= 0; i--)); do
		eval "${IT_EXIT_CMDS[i]}" || true
	done
	exit "$rc"
}

it_on_exit() {
	IT_EXIT_CMDS+=("$*")
}

it_init() {
	IT_NAME=$1
	IT_TMP=$(mktemp -d "/tmp/union-nfsd-$IT_NAME.XXXXXX")
	it_on_exit "rm -rf '$IT_TMP'"
	trap it_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
}

# it_tree PID SKIP: the pids of PID's descendants, parents first, leaving out
# SKIP and its descendants
it_tree() {
	local c
	for c in $(ps -o pid= --ppid "$1"); do
		[ "$c" = "$2" ] && continue
		echo "$c"
		it_tree "$c" "$2"
	done
}

it_watchdog() {
	mkfifo "$IT_TMP/.watchdog"
	# a process of its own, which dies with the script (pdeathsig): a script
	# SIGKILLed by ctest leaves no watchdog behind to keep its mount namespace
	# alive and to signal, much later, a pid that is no longer the test's
	setpriv --pdeathsig KILL bash -c "$(declare -f it_tree)"'
		me=$1 secs=$2 name=$3 fifo=$4
		# wait with a builtin (read on a FIFO nobody writes), not a sleep
		# child: a child could outlive the watchdog and hold the test output
		# open, and ctest would wait for it
		read -r -t "$secs" <>"$fifo" || true
		echo "watchdog: $name still running after ${secs} s: stopping it" >&2
		# everything below the script, grandchildren too (a client that a
		# pipeline or a subshell started), taken before the script trap
		# starts its cleanup commands, which must run to their end
		tree=$(it_tree "$me" "$$")
		# the script first (its trap runs once its foreground child is gone),
		# then the tree: no hung process holds the trap back, none outlives it
		kill -TERM "$me" 2>/dev/null
		[ -z "$tree" ] || kill -TERM $tree 2>/dev/null
	' it_watchdog "$$" "$1" "$IT_NAME" "$IT_TMP/.watchdog" &
	IT_WATCHDOG=$!
	it_on_exit "kill $IT_WATCHDOG 2>/dev/null"
}

skip() {
	echo "SKIP: $*"
	exit 77
}

it_overlay_test() {
	local name=$1 secs=$2
	shift 2
	[ "$(id -u)" = 0 ] || skip "needs root (mknod, trusted.* xattrs, mount)"
	grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
		grep -qw overlay /proc/filesystems || skip "no overlayfs in this kernel"
	it_private_mounts "$@"
	it_init "$name"
	it_watchdog "$secs"
}

# stop_pid PID [SECONDS]: sets STOP_STATUS to the exit status (wait's: 128+N for a
# signal), or "" if PID was not ours or already reaped
stop_pid() {
	local pid=$1 secs=${2:-30} i
	STOP_STATUS=
	kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null && STOP_STATUS=0 || STOP_STATUS=$?; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 20; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null && STOP_STATUS=0 || STOP_STATUS=$?
			return 0
		fi
		sleep 0.05
	done
	echo "pid $pid ignored SIGTERM for ${secs}s: SIGKILL" >&2
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null && STOP_STATUS=0 || STOP_STATUS=$?
}

# stop_union_nfsd: SIGTERM the server started by start_union_nfsd; fails (with its
# log's tail) unless it exits 0 - under ASan a leak or a UB report shows up here
stop_union_nfsd() {
	stop_pid "$SRV_PID"
	if [ "$STOP_STATUS" != 0 ]; then
		echo "FAIL: union-nfsd exited $STOP_STATUS on SIGTERM (want 0); its log:"
		tail -40 "$SRV_LOG"
		return 1
	fi
}

# unmount_path DIR: unmount if mounted (lazily as a last resort, so a busy mount
# cannot keep the temp dir from going away).
unmount_path() {
	mountpoint -q "$1" 2>/dev/null || return 0
	umount "$1" 2>/dev/null || umount -l "$1"
}

it_overlay_ro() {
	mkdir "$1"
	mount -t overlay overlay -o "ro,lowerdir=$2" "$1"
	it_on_exit "unmount_path '$1'"
}

start_union_nfsd() {
	local bin=$1 i line=""
	shift
	SRV_LOG=$(mktemp "$IT_TMP/server.XXXXXX.log")
	local out=$SRV_LOG.out
	mkdir -p "$IT_TMP/state"
	# --pdeathsig: the server dies with this script, even if it is SIGKILLed
	setpriv --pdeathsig TERM "$bin" --nfs-port=0 --mount-port=0 --bind=127.0.0.1 --state-dir="$IT_TMP/state" \
		--foreground --no-rpcbind --no-portmapper "$@" >"$out" 2>"$SRV_LOG" &
	SRV_PID=$!
	it_on_exit "stop_pid $SRV_PID"
	for ((i = 0; i < 1200; i++)); do # up to 60 s
		line=$(grep -m1 '^listening ' "$out" 2>/dev/null || true)
		[ -n "$line" ] && break
		if ! kill -0 "$SRV_PID" 2>/dev/null; then
			echo "union-nfsd exited before listening; its stderr:" >&2
			cat "$SRV_LOG" >&2
			return 1
		fi
		sleep 0.05
	done
	if [[ ! $line =~ ^listening\ nfs=([0-9]+)\ mount=([0-9]+)$ ]]; then
		echo "union-nfsd printed no 'listening nfs=P mount=M' line in 60 s (got '$line'); stderr:" >&2
		cat "$SRV_LOG" >&2
		return 1
	fi
	NFS_PORT=${BASH_REMATCH[1]}
	MOUNT_PORT=${BASH_REMATCH[2]}
}

nfs_url() {
	echo "nfs://127.0.0.1${1:-/}?nfsport=$NFS_PORT&mountport=$MOUNT_PORT&version=3"
}
