#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# cli.sh UNION_NFSD NFS_TREE SRCDIR NFS_POKE - the command line, the example
# config, start/stop, and full filesystems, from outside the process.
#
#  - each bad invocation (missing layer, layer that is a file, upper inside a
#    lower, workdir on another filesystem than the upper, no --lowerdir, an
#    unknown flag) exits 2 with exactly one stderr line "union-nfsd: ..." and
#    prints nothing on stdout;
#  - a good one prints exactly one stdout line "listening nfs=P mount=M", serves,
#    and exits 0 on SIGTERM;
#  - etc/union-nfsd.conf, with its /srv paths, state dir and ports moved into a
#    temp dir, starts a server that serves both of its exports; SIGHUP with a
#    new log level and state dir applies the level and keeps the dir;
#  - a full state dir fails the calls that need new nodes, says so in the log
#    (rate-limited), and the server recovers once there is room;
#  - a full upper fails a copy-up cleanly (nothing left in the upper or the
#    work dir, the lower file as it was) and the same write works once there
#    is room;
#  - out of descriptors, the server closes the connections it cannot take
#    instead of spinning on them, logs that once, and serves again after.
# Exit: 0 all passed, 1 a check failed, 77 skipped (not root).
set -euo pipefail
UNION_NFSD=${1:?usage: cli.sh UNION_NFSD NFS_TREE SRCDIR NFS_POKE}
NFS_TREE=${2:?usage: cli.sh UNION_NFSD NFS_TREE SRCDIR NFS_POKE}
SRCDIR=${3:?usage: cli.sh UNION_NFSD NFS_TREE SRCDIR NFS_POKE}
NFS_POKE=${4:?usage: cli.sh UNION_NFSD NFS_TREE SRCDIR NFS_POKE}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (a tmpfs for the other-filesystem case)"
it_private_mounts "$@"
it_init cli
it_watchdog 540 # ctest TIMEOUT is 600
T=$IT_TMP
fails=0
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

mkdir -p "$T/l1" "$T/l2" "$T/upper" "$T/work" "$T/l1/sub" "$T/other"
echo top >"$T/l1/a"
echo bottom >"$T/l2/a"
echo below >"$T/l2/b"
: >"$T/afile"
mount -t tmpfs tmpfs "$T/other"
it_on_exit "unmount_path '$T/other'"
mkdir "$T/other/work"

# bad_args NAME ARGS...: exit 2, one "union-nfsd: " line on stderr, empty stdout
bad_args() {
	local name=$1 rc=0
	shift
	timeout 60 setpriv --pdeathsig TERM "$UNION_NFSD" --nfs-port=0 --mount-port=0 --bind=127.0.0.1 \
		--state-dir="$T/state-bad" --foreground --no-rpcbind --no-portmapper "$@" \
		>"$T/out" 2>"$T/err" </dev/null || rc=$?
	if [ "$rc" != 2 ]; then
		fail "$name: exit $rc, want 2 (stderr: $(head -3 "$T/err"))"
	elif [ "$(wc -l <"$T/err")" != 1 ] || ! grep -q '^union-nfsd: ' "$T/err"; then
		fail "$name: stderr is not one 'union-nfsd: ...' line: $(head -5 "$T/err")"
	elif [ -s "$T/out" ]; then
		fail "$name: printed on stdout: $(head -3 "$T/out")"
	else
		echo "ok: $name -> $(cat "$T/err")"
	fi
}

bad_args "missing layer" --lowerdir="$T/l1:$T/nonexistent"
bad_args "layer that is a file" --lowerdir="$T/l1:$T/afile"
bad_args "upper inside a lower" --lowerdir="$T/l1:$T/l2" --upperdir="$T/l1/sub" \
	--workdir="$T/work"
bad_args "workdir on another filesystem" --lowerdir="$T/l2" --upperdir="$T/upper" \
	--workdir="$T/other/work"
bad_args "upperdir without workdir" --lowerdir="$T/l2" --upperdir="$T/upper"
bad_args "no lowerdir" --export=/x
bad_args "unknown flag" --lowerdir="$T/l1" --no-such-flag
bad_args "bad port" --lowerdir="$T/l1" --nfs-port=70000
bad_args "missing config file" --config="$T/nonexistent.conf"

# a good start: one line on stdout, serves, SIGTERM -> exit 0
start_union_nfsd "$UNION_NFSD" --lowerdir="$T/l1:$T/l2"
if [ "$(wc -l <"$SRV_LOG.out")" != 1 ]; then
	fail "stdout has more than the listening line: $(head -5 "$SRV_LOG.out")"
fi
if "$NFS_TREE" --nfs "$(nfs_url /)" >"$T/tree" 2>"$T/tree.err" &&
	grep -q '^/a f 0644 4 ' "$T/tree" && grep -q '^/b f ' "$T/tree"; then
	echo "ok: serves the union (a from the top layer, b from below)"
else
	fail "the union is not served right: $(cat "$T/tree" "$T/tree.err" | head -10)"
fi
if ! kill -0 "$SRV_PID" 2>/dev/null; then
	fail "union-nfsd died while serving; its log: $(tail -20 "$SRV_LOG")"
fi
kill -TERM "$SRV_PID" 2>/dev/null || true
rc=0
for _ in $(seq 600); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$SRV_PID" 2>/dev/null; then
	fail "still running 30 s after SIGTERM"
else
	wait "$SRV_PID" || rc=$?
	[ "$rc" = 0 ] && echo "ok: SIGTERM -> exit 0" || fail "SIGTERM -> exit $rc, want 0"
fi

# wait_log PATTERN: true once the config server's stderr has a line matching
# PATTERN (30 s at most)
wait_log() {
	for _ in $(seq 600); do
		grep -q "$1" "$T/conf.err" && return 0
		sleep 0.05
	done
	return 1
}

# reload_settings: SIGHUP applies a new log level (a connection is logged at
# debug only) and keeps the state dir, saying so
reload_settings() {
	if grep -q 'connection from' "$T/conf.err"; then
		fail "a connection was logged at log level info"
	fi
	sed -i -e 's|^\(log-level *=\).*|\1 debug|' \
		-e "s|^\(state-dir *=\).*|\1 $T/state-moved|" "$T/test.conf"
	kill -HUP "$CPID"
	if wait_log 'reload: log level debug (was info)' &&
		wait_log 'state dir changes only with a restart'; then
		echo "ok: SIGHUP applies the log level and keeps the state dir"
	else
		fail "SIGHUP: no log level or state dir line; stderr: $(tail -5 "$T/conf.err")"
	fi
	"$NFS_TREE" --nfs "$(nfs_url /)" >/dev/null 2>&1 || true
	wait_log 'connection from' && echo "ok: log level debug after SIGHUP" ||
		fail "no debug line after SIGHUP raised the log level"
	[ -e "$T/state-moved" ] && fail "SIGHUP opened the new state dir"
	return 0
}

# the example config, moved into the temp dir
CONF=$SRCDIR/etc/union-nfsd.conf
if [ ! -f "$CONF" ]; then
	fail "$CONF missing"
else
	mkdir -p "$T/srv/layers/site" "$T/srv/layers/base" "$T/srv/uppers/scratch" \
		"$T/srv/uppers/scratch.work"
	echo site >"$T/srv/layers/site/motd"
	echo base >"$T/srv/layers/base/motd"
	echo base-only >"$T/srv/layers/base/only"
	sed -e "s|/srv/|$T/srv/|g" -e "s|^\(state-dir *=\).*|\1 $T/state-conf|" \
		-e "s|^\(nfs-port *=\).*|\1 0|" -e "s|^\(mount-port *=\).*|\1 0|" \
		-e "s|^\(bind *=\).*|\1 127.0.0.1|" "$CONF" >"$T/test.conf"
	out=$T/conf.out
	setpriv --pdeathsig TERM "$UNION_NFSD" --config="$T/test.conf" --foreground --no-rpcbind --no-portmapper >"$out" 2>"$T/conf.err" &
	CPID=$!
	it_on_exit "stop_pid $CPID"
	line=
	for _ in $(seq 1200); do # 60 s
		line=$(grep -m1 '^listening ' "$out" 2>/dev/null || true)
		[ -n "$line" ] && break
		kill -0 "$CPID" 2>/dev/null || break
		sleep 0.05
	done
	if [[ ! $line =~ ^listening\ nfs=([0-9]+)\ mount=([0-9]+)$ ]]; then
		fail "etc/union-nfsd.conf (moved to $T): no listening line; stderr: $(head -5 "$T/conf.err")"
	else
		NFS_PORT=${BASH_REMATCH[1]} MOUNT_PORT=${BASH_REMATCH[2]}
		for exp in / /scratch; do
			if "$NFS_TREE" --nfs "$(nfs_url "$exp")" >"$T/conf.tree" 2>"$T/conf.tree.err" &&
				grep -q '^/motd f ' "$T/conf.tree"; then
				echo "ok: etc/union-nfsd.conf: export $exp served"
			else
				fail "etc/union-nfsd.conf: export $exp: $(cat "$T/conf.tree.err" | head -5)"
			fi
		done
		if grep -q "^/motd f 0644 5 $(printf 'site\n' | sha256sum | cut -d' ' -f1)" \
			<("$NFS_TREE" --nfs "$(nfs_url /)" 2>/dev/null); then
			echo "ok: etc/union-nfsd.conf: / shows the site layer over the base"
		else
			fail "etc/union-nfsd.conf: / does not show site/motd over base/motd"
		fi
		reload_settings
	fi
	stop_pid "$CPID"
fi

# a full state dir: a listing that needs new nodes fails with an error the
# client sees, the log says why (under the log's limit, however many calls
# fail), the server goes on, and once there is room it serves every name
mkdir -p "$T/fullstate" "$T/many"
mount -t tmpfs -o size=512k tmpfs "$T/fullstate"
it_on_exit "unmount_path '$T/fullstate'"
# the 20,000 names on a tmpfs too: made and listed in memory, not through a
# disk's journal, which a busy machine makes slow
mount -t tmpfs -o mode=0755 tmpfs "$T/many"
it_on_exit "unmount_path '$T/many'"
mkdir "$T/many/d"
(cd "$T/many/d" && for i in $(seq 20000); do : >"f$i"; done)
start_union_nfsd "$UNION_NFSD" --lowerdir="$T/many" --state-dir="$T/fullstate"
# no room for the layer's index either: the export is served by inode numbers
grep -q 'layer index .*No space left on device; export / served by inode numbers' "$SRV_LOG" &&
	echo "ok: full state dir: no layer index, the export served by inode numbers" ||
	fail "full state dir: no line says the layer index could not be built; log: $(tail -3 "$SRV_LOG")"
start=$SECONDS
failed=0
for _ in 1 2 3 4 5 6; do
	"$NFS_TREE" --nfs "$(nfs_url /)" >/dev/null 2>"$T/full.err" || failed=$((failed + 1))
done
lines=$(grep -c 'node table in .*fullstate: write failed: No space left on device' "$SRV_LOG" || true)
if [ "$failed" != 6 ]; then
	fail "full state dir: $((6 - failed)) of 6 listings succeeded"
# the log's limit: 5 lines of a kind per 5-second window (docs/operations.md, "The log")
elif [ "$lines" -lt 1 ] || [ "$lines" -gt $((5 * ((SECONDS - start) / 5 + 2))) ]; then
	fail "full state dir: $lines log lines in $((SECONDS - start)) s; log: $(tail -3 "$SRV_LOG")"
else
	echo "ok: full state dir: listings fail, $lines log line(s) say why"
fi
mount -o remount,size=64m "$T/fullstate"
n=$("$NFS_TREE" --nfs "$(nfs_url /)" 2>"$T/full.err" | grep -c '^/d/f' || true)
[ "$n" = 20000 ] && echo "ok: with room again, all 20000 names are listed" ||
	fail "with room again: $n of 20000 names listed; $(head -3 "$T/full.err")"
stop_union_nfsd || fails=$((fails + 1))

# a full upper: the copy-up of a 3 MB lower file into a 1 MB tmpfs fails
mkdir -p "$T/cu/lower" "$T/cu/u"
head -c 3000000 /dev/urandom >"$T/cu/lower/big"
mount -t tmpfs -o size=1m tmpfs "$T/cu/u"
it_on_exit "unmount_path '$T/cu/u'"
mkdir "$T/cu/u/upper" "$T/cu/u/work"
start_union_nfsd "$UNION_NFSD" --lowerdir="$T/cu/lower" --upperdir="$T/cu/u/upper" \
	--workdir="$T/cu/u/work"
left=
if "$NFS_POKE" "$(nfs_url /)" rewrite /big >"$T/cu.out" 2>&1; then
	fail "full upper: the copy-up of a 3 MB file into 1 MB succeeded"
elif left=$(find "$T/cu/u" -type f ! -path "$T/cu/u/work/union-nfsd.lock" | head -3) &&
	[ -n "$left" ]; then
	fail "full upper: a failed copy-up left files behind: $left"
elif [ "$(sha256sum <"$T/cu/lower/big")" != "$("$NFS_TREE" --nfs "$(nfs_url /)" |
	awk '$1 == "/big" {print $5 "  -"}')" ]; then
	fail "full upper: /big does not show the lower file's contents"
else
	echo "ok: full upper: the copy-up fails and leaves nothing behind"
fi
mount -o remount,size=16m "$T/cu/u"
if "$NFS_POKE" "$(nfs_url /)" rewrite /big >"$T/cu.out" 2>&1 &&
	cmp -s "$T/cu/lower/big" "$T/cu/u/upper/big"; then
	echo "ok: with room again, the write copies the file up whole"
else
	fail "with room again: $(cat "$T/cu.out")"
fi
stop_union_nfsd || fails=$((fails + 1))

# cpu_ticks PID: user + system time of PID, in clock ticks
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# out of descriptors: 120 connections to a server allowed 64 open files
start_union_nfsd "$UNION_NFSD" --lowerdir="$T/l1"
prlimit --pid "$SRV_PID" --nofile=64:64
conns=()
for _ in $(seq 120); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$NFS_PORT" && conns+=("$fd")
done
sleep 0.5
before=$(cpu_ticks "$SRV_PID")
sleep 2
spent=$(($(cpu_ticks "$SRV_PID") - before))
for fd in "${conns[@]}"; do exec {fd}<&-; done
lines=$(grep -c 'nfs accept: Too many open files: closed' "$SRV_LOG" || true)
if [ "$spent" -gt 20 ]; then
	fail "out of descriptors: the server spent $spent ticks in 2 s (spinning)"
# at most two windows of the log's limit (5 lines each) in these ~3 s
elif [ "$lines" -lt 1 ] || [ "$lines" -gt 10 ]; then
	fail "out of descriptors: $lines log lines; log: $(tail -3 "$SRV_LOG")"
else
	echo "ok: out of descriptors: new connections closed, $spent ticks in 2 s, $lines log line(s)"
fi
sleep 0.5
"$NFS_TREE" --nfs "$(nfs_url /)" >"$T/fd.tree" 2>&1 && grep -q '^/a f ' "$T/fd.tree" &&
	echo "ok: serves again once connections closed" ||
	fail "out of descriptors: no listing after the connections closed: $(head -3 "$T/fd.tree")"
stop_union_nfsd || fails=$((fails + 1))

[ "$fails" = 0 ] && echo "PASS" || echo "$fails check(s) failed"
[ "$fails" = 0 ]
