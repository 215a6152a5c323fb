#!/bin/bash
# kvm_locks.sh UNION_NFSD - the kernel client lock tests of issue 19: two
# Linux guests at once lock files on one export of union-nfsd, mounted
# WITHOUT nolock, so every lock goes to union-nfsd's NLM.
#
# The server host (the harness's network namespace) runs a private rpcbind,
# started before union-nfsd so that NFS, MOUNT and NLM register there.  Each
# guest (guest_locks.sh) runs rpcbind and rpc.statd of its own: the kernel's
# lockd registers with the guest's rpcbind (the server sends GRANTED to it
# through that portmapper) and asks rpc.statd to monitor the server (without
# statd a lock fails with ENOLCK).  They are the host's binaries, copied with
# their libraries into the guest's initramfs (tools.tar, ~10 MB, made per run
# in well under a second: nothing to download, so nothing to cache).  The
# guests mount with `vers=3,proto=tcp` and no ports: the kernel finds MOUNT,
# NFS and NLM through the server's rpcbind.
#
# The host drives both guests' lock_agent (lock_agent.c, built static here)
# line by line; the steps, each a "step NAME: PASS" line or the failure:
#   fcntl_eagain   A holds an fcntl write lock; B's F_SETLK gets EAGAIN
#   setlkw_wakeup  B's F_SETLKW blocks (no answer in 2 s); A unlocks; B gets
#                  the lock within LOCKW_MAX_MS (default 3000: a second, and
#                  room for a busy machine) of A's unlock, measured on A's
#                  clock up to B's datagram
#   flock          A's flock(LOCK_EX) makes B's flock(LOCK_EX|LOCK_NB) fail
#                  (Linux maps flock on NFS to a whole-file POSIX lock); once
#                  A releases it, B gets it
#   sqlite         both guests at once add 1 to one counter 1,000 times, one
#                  transaction each: the final value is 2,000
# Then union-nfsd must exit 0 on SIGTERM.
# Not here yet: union-nfsd restarted while A holds a lock (reclaim in grace),
# a reset guest (its statd's SM_NOTIFY frees its locks), and the mount against
# a host with no rpcbind (the built-in portmapper): they wait for NSM.
#
# Env: LOCKW_MAX_MS, KVML_STEPS (the steps to run, default all four: to see
# one fail by itself), KVML_KEEP=1 (keep the temp dir).
# Exit: 0 pass, 1 fail, 77 skipped (no root, /dev/net/tun, qemu, static libc).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_locks.sh UNION_NFSD}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"
LOCKW_MAX_MS=${LOCKW_MAX_MS:-3000}
KVML_STEPS=${KVML_STEPS:-fcntl_eagain setlkw_wakeup flock sqlite}
want() { [[ " $KVML_STEPS " == *" $1 "* ]]; }

vm_require_host "private rpcbind"
for b in rpcbind rpcinfo rpc.statd sqlite3; do
	command -v "$b" >/dev/null || {
		echo "FAIL: $b missing (etc/install-deps.sh tests: rpcbind, nfs-common, sqlite3)"
		exit 1
	}
done

vm_test_init kvml 1440 "${KVML_KEEP:-0}" # ctest TIMEOUT is 1500
t0=$SECONDS
cc -static -O2 -Wall -Wextra -Werror -o "$T/lock_agent" "$HERE/lock_agent.c" ||
	skip "cc -static failed (no static libc?)"

# make_tools: the guests' rpcbind, rpcinfo, rpc.statd and sqlite3 with every
# library ldd names, and the files their libc and libtirpc read
make_tools() {
	local r=$T/tools b p lib
	mkdir -p "$r/usr/sbin" "$r/etc"
	for b in rpcbind rpcinfo rpc.statd sqlite3; do
		p=$(command -v "$b")
		cp -L "$p" "$r/usr/sbin/$b"
		for lib in $(ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
			[ -e "$r$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$r$lib"
		done
	done
	cp /etc/netconfig /etc/protocols /etc/services /etc/rpc "$r/etc/" 2>/dev/null || true
	[ -f "$r/etc/netconfig" ] || { echo "FAIL: no /etc/netconfig (libtirpc) on the host"; return 1; }
	printf 'hosts: files\npasswd: files\ngroup: files\n' >"$r/etc/nsswitch.conf"
	printf '127.0.0.1 localhost\n' >"$r/etc/hosts"
	printf 'root:x:0:0::/:/bin/sh\n_rpc:x:0:0::/:/bin/false\nstatd:x:0:0::/:/bin/false\n' >"$r/etc/passwd"
	printf 'root:x:0:\n' >"$r/etc/group"
	tar -C "$r" -cf "$T/tools.tar" .
}
make_tools
echo "tools.tar: $(du -h "$T/tools.tar" | cut -f1), ready after $((SECONDS - t0)) s"

mkdir -p "$T/lower" "$T/upper" "$T/work"
chmod 755 "$T" "$T/upper"
sqlite3 "$T/upper/counter.db" 'CREATE TABLE c(v INTEGER); INSERT INTO c VALUES (0);'
chmod 666 "$T/upper/counter.db"

# the server's own rpcbind, its /run a tmpfs of a private mount namespace, so
# nothing meets the host's; rpcbind and union-nfsd share vm_server_stop's
# process group
cat >"$T/server.sh" <<EOF
mount -t tmpfs -o mode=0755 tmpfs /run
rpcbind -f >"\$VM_WORK/rpcbind.log" 2>&1 &
for _ in \$(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.05; done
[ -S /run/rpcbind.sock ] || { echo "kvm_locks: the server's rpcbind did not start"; exit 1; }
exec '$UNION_NFSD' --lowerdir='$T/lower' --upperdir='$T/upper' --workdir='$T/work' \\
	--nfs-port=\$VM_PORT --mount-port=\$VM_MOUNTPORT --bind=\$VM_SERVER_IP \\
	--state-dir=\$VM_WORK/state --foreground \\
	--clients="\$VM_NETWORK(rw,no_root_squash)"
EOF
vm_net_up
vm_server_start "exec unshare -m --propagation private bash '$T/server.sh'"
ip netns exec "$VM_NS" rpcinfo -p "$VM_SERVER_IP" | grep -q nlockmgr || {
	echo "FAIL: union-nfsd registered no NLM with the server's rpcbind:"
	ip netns exec "$VM_NS" rpcinfo -p "$VM_SERVER_IP" || true
	tail -20 "$VM_WORK/server.log"
	exit 1
}

fail() { vm_fail_two "$@"; }

# ask N LINE ERE [S]: LINE to guest N's agent; its answer must match ERE
# (within S s, default 60); the answer is in ANSWER
ask() {
	local n=$1 before
	before=$(wc -l <"$VM_WORK/g$n.out")
	vm_guest_send "$n" "$2"
	answer_after "$n" "$before" "$3" "${4:-60}"
}

# answer_after N LINES ERE S: a line of guest N's output after its first
# LINES, that starts with the command's name; it must match ERE
answer_after() {
	local n=$1 before=$2 i
	ANSWER=
	for ((i = 0; i < $4 * 10; i++)); do
		ANSWER=$(tail -n +"$((before + 1))" "$VM_WORK/g$n.out" | grep -E '^[a-z-]+ (OK|EAGAIN|ERR|WAITING)' | head -1 || true)
		[ -z "$ANSWER" ] || break
		grep -q '^FAIL' "$VM_WORK/g$n.out" && break
		sleep 0.1
	done
	[[ "$ANSWER" =~ $3 ]] || fail "guest $n answered '${ANSWER:-nothing}', want /$3/"
}

step() { echo "step $1: PASS ($2)"; }

for n in 1 2; do
	vm_guest_start "$n" "$HERE/guest_locks.sh" --file "$T/lock_agent" --file "$T/tools.tar" \
		--mem 384 --timeout 1380
done
for n in 1 2; do
	vm_guest_expect "$n" '^agent READY|^FAIL' 600 && ! grep -q '^FAIL' "$VM_WORK/g$n.out" ||
		fail "guest $n did not get ready"
done
echo "both guests ready after $((SECONDS - t0)) s"
grep -E '^(rpcbind|mounted|lockd)' "$VM_WORK/g1.out" | sed 's/^/guest 1: /'

step_fcntl_eagain() {
	ask 1 "lock f1" '^lock OK$'
	ask 2 "lock f1" '^lock EAGAIN$'
	ask 1 "unlock f1" '^unlock OK$'
	step fcntl_eagain "B's F_SETLK: EAGAIN while A holds the write lock"
}

step_setlkw_wakeup() {
	local before latency
	ask 1 "lock f1" '^lock OK$'
	before=$(wc -l <"$VM_WORK/g2.out")
	ask 2 "lockw f1 $(vm_guest_ip 1)" '^lockw WAITING$'
	sleep 2
	if tail -n +"$((before + 1))" "$VM_WORK/g2.out" | grep -q '^lockw OK'; then
		fail "B's F_SETLKW returned while A held the lock"
	fi
	ask 1 "unlock-wait f1" '^unlock-wait OK latency=' 120
	latency=${ANSWER#*latency=}
	answer_after 2 "$((before + 1))" '^lockw OK waited=' 10
	echo "B's F_SETLKW: granted ${latency} ms after A's unlock (A's clock); blocked ${ANSWER#*waited=} ms"
	[ "${latency%.*}" -le "$LOCKW_MAX_MS" ] ||
		fail "B's F_SETLKW returned ${latency} ms after A's unlock (limit $LOCKW_MAX_MS ms)"
	ask 2 "unlock f1" '^unlock OK$'
	ask 1 "lock f1" '^lock OK$'
	ask 1 "unlock f1" '^unlock OK$'
	step setlkw_wakeup "$latency ms from unlock to grant"
}

step_flock() {
	ask 1 "flock f2" '^flock OK$'
	ask 2 "flock f2" '^flock EAGAIN$'
	ask 1 "funlock f2" '^funlock OK$'
	ask 2 "flock f2" '^flock OK$'
	ask 2 "funlock f2" '^funlock OK$'
	step flock "B's flock fails while A holds it, succeeds after"
}

for s in fcntl_eagain setlkw_wakeup flock; do
	if want "$s"; then "step_$s"; fi
done

# the agents quit; then both guests run sqlite at once, or end
ask 1 quit '^quit OK$'
ask 2 quit '^quit OK$'
t1=$SECONDS
next=end
want sqlite && next=sqlite
vm_guest_send 1 "$next"
vm_guest_send 2 "$next"
for n in 1 2; do
	st=0
	vm_guest_wait "$n" 2>"$T/g$n.err" || st=$?
	grep -E '^sqlite' "$VM_WORK/g$n.out" | sed "s/^/guest $n: /" || true
	[ "$st" = 0 ] || fail "guest $n ended with status $st"
done
vm_server_stop
[ "$VM_SERVER_STATUS" = 0 ] || fail "union-nfsd exited $VM_SERVER_STATUS on SIGTERM (want 0)"
if want sqlite; then
	v=$(sqlite3 "$T/upper/counter.db" 'SELECT v FROM c;')
	[ "$v" = 2000 ] || fail "the counter is '$v' after 2 x 1,000 increments, want 2000"
	step sqlite "2 x 1,000 increments at once: 2000, in $((SECONDS - t1)) s"
fi
echo "PASS: $KVML_STEPS, across two kernel clients; total $((SECONDS - t0)) s"
