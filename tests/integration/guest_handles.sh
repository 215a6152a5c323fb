# SPDX-License-Identifier: Apache-2.0
# guest_handles.sh - the guest side of kvm_handles.sh (busybox sh in the VM, cwd /mnt).
#
# Keeps a lower file open (fd 3) and its working directory in a deep merged
# directory, and probes both in a loop while the host restarts union-nfsd twice and
# copies the file up.  Each probe reads the file through fd 3 (tail -c seeks the
# open file back to 0) and by its path relative to the cwd, stats the file, the
# open descriptor and the cwd, and lists the cwd; any message on stderr, a wrong
# checksum or listing is a failed probe.  (A state dir wiped at a restart fails
# every probe after it, with EBADHANDLE: "Unknown error 521" in busybox.)
#
# The host's events are driven by handshake files in the export root, so the
# probes provably span them: the guest creates sig-K through the mount, the
# host's supervisor sees it in the upper layer, does event K and then creates
# ack-K through union-nfsd; the guest probes on until it sees ack-K and then for
# another phase.  Events: 1 = SIGKILL and restart, 2 = copy-up of the file by a
# write through another client, 3 = SIGTERM and restart.
#
# $VM_FILES/handles.env sets DEEP FILE SUM LISTING MIN_READS PHASE_CS WAIT_CS.
# Exit 0: every probe passed, one inode number each for the file, the open
# descriptor and the cwd, at least MIN_READS good probes before the first event
# and after each one.  The last lines are a summary the host checks.
. "$VM_FILES/handles.env"
M=${NFS_MNT:-/mnt}
E1=/tmp/probe.err ERRS=/tmp/all.err
: >"$ERRS"
probes=0 bad=0 stale=0
INO_FILE='' INO_FD='' INO_DIR=''

# now: centiseconds of guest uptime into $NOW (no fork: a builtin read)
now() {
	read -r up _ </proc/uptime
	NOW=${up%.*}${up#*.}
	while [ "${#NOW}" -gt 1 ] && [ "${NOW#0}" != "$NOW" ]; do NOW=${NOW#0}; done
}
# fmt CS: seconds with two decimals
fmt() { printf '%d.%02d' $(($1 / 100)) $(($1 % 100)); }
# add_ino SETNAME VALUE: keep the distinct values seen, in the order seen
add_ino() {
	eval "cur=\$$1"
	case " $cur " in
	*" $2 "*) ;;
	*) eval "$1=\"\${cur:+\$cur }\$2\"" ;;
	esac
}

now
T0=$NOW
cd "$M/$DEEP" || { echo "FAIL: cd $M/$DEEP"; exit 1; }
exec 3<"$FILE" || { echo "FAIL: open $FILE"; exit 1; }
echo "cwd $(pwd -P), $FILE open as fd 3 at t=$(fmt $((NOW - T0))) s"

# probe: one round; sets OK to 1 or 0 and counts it
probe() {
	: >"$E1"
	s_fd=$(tail -c 1073741824 <&3 2>>"$E1" | md5sum 2>>"$E1")
	s_path=$(cat "./$FILE" 2>>"$E1" | md5sum 2>>"$E1")
	i_file=$(stat -c %i "$FILE" 2>>"$E1")
	i_fd=$(stat -L -c %i /proc/self/fd/3 2>>"$E1")
	i_dir=$(stat -c %i . 2>>"$E1")
	list=$(ls . 2>>"$E1" | tr '\n' ' ')
	cwd=$(pwd -P 2>>"$E1")
	probes=$((probes + 1))
	OK=1
	why=''
	[ "${s_fd%% *}" = "$SUM" ] || why="$why fd-read:${s_fd%% *}"
	[ "${s_path%% *}" = "$SUM" ] || why="$why path-read:${s_path%% *}"
	[ "$list" = "$LISTING" ] || why="$why ls:[$list]"
	[ "$cwd" = "$M/$DEEP" ] || why="$why pwd:$cwd"
	[ -n "$i_file" ] && add_ino INO_FILE "$i_file"
	[ -n "$i_fd" ] && add_ino INO_FD "$i_fd"
	[ -n "$i_dir" ] && add_ino INO_DIR "$i_dir"
	if [ -s "$E1" ] || [ -n "$why" ]; then
		OK=0
		bad=$((bad + 1))
		now
		# ESTALE, or EBADHANDLE (521, which the client passes up as it is)
		if grep -qiE 'stale|error 521' "$E1"; then stale=$((stale + 1)); fi
		if [ "$bad" -le 20 ]; then
			echo "BAD probe $probes at t=$(fmt $((NOW - T0))) s:$why"
			sed 's/^/  stderr: /' "$E1"
		fi
		cat "$E1" >>"$ERRS"
	fi
}

# phase NAME UNTIL: probes until UNTIL succeeds (a command), then on for at least
# MIN_READS good probes and PHASE_CS; prints the phase's span and counts
phase() {
	now
	p_start=$NOW p_good=0 p_n=0 p_long=0 p_seen=''
	[ -z "$2" ] && p_seen=$NOW
	while :; do
		b=$NOW
		probe
		now
		[ $((NOW - b)) -gt "$p_long" ] && p_long=$((NOW - b))
		p_n=$((p_n + 1))
		if [ "$bad" -gt 50 ]; then
			echo "FAIL: $1: more than 50 bad probes"
			return 1
		fi
		if [ -z "$p_seen" ]; then
			if eval "$2"; then
				p_seen=$NOW
				echo "  $1: ack seen at t=$(fmt $((NOW - T0))) s after $p_n probes" \
					"($(fmt $((NOW - p_start))) s)"
			elif [ $((NOW - p_start)) -gt "$WAIT_CS" ]; then
				echo "FAIL: $1: no ack within $(fmt "$WAIT_CS") s"
				return 1
			fi
			continue
		fi
		[ "$OK" = 1 ] && p_good=$((p_good + 1))
		[ "$p_good" -ge "$MIN_READS" ] && [ $((NOW - p_seen)) -ge "$PHASE_CS" ] && break
	done
	echo "phase $1: t=$(fmt $((p_start - T0)))..$(fmt $((NOW - T0))) s," \
		"$p_n probes, $p_good good after the event, longest probe $(fmt "$p_long") s"
	eval "GOOD_$3=$p_good"
}

rc=0
phase "0-before-events" "" 0 || rc=1
k=1
while [ "$rc" = 0 ] && [ "$k" -le 3 ]; do
	now
	if ! touch "$M/sig-$k" 2>>"$ERRS"; then
		echo "FAIL: touch $M/sig-$k"
		rc=1
		break
	fi
	echo "sig-$k sent at t=$(fmt $((NOW - T0))) s"
	phase "$k-after-event-$k" "[ -e '$M/ack-$k' ]" "$k" || rc=1
	k=$((k + 1))
done
exec 3<&-

n_file=$(echo $INO_FILE | wc -w)
n_fd=$(echo $INO_FD | wc -w)
n_dir=$(echo $INO_DIR | wc -w)
now
echo "guest loop: $(fmt $((NOW - T0))) s, $probes probes, $bad bad, $stale with ESTALE or EBADHANDLE"
echo "inodes file: $INO_FILE"
echo "inodes fd: $INO_FD"
echo "inodes dir: $INO_DIR"
if [ "$rc" = 0 ] && [ "$bad" = 0 ] && [ "$n_file" = 1 ] && [ "$n_fd" = 1 ] &&
	[ "$n_dir" = 1 ] && [ "$INO_FILE" = "$INO_FD" ]; then
	echo "RESULT PASS good=$GOOD_0/$GOOD_1/$GOOD_2/$GOOD_3"
	exit 0
fi
echo "RESULT FAIL (distinct inodes: file $n_file, fd $n_fd, dir $n_dir)"
[ -s "$ERRS" ] && { echo "distinct error messages:"; sort "$ERRS" | uniq -c | head -20; }
exit 1
