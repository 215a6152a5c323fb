# SPDX-License-Identifier: Apache-2.0
# lib.sh - the VM harness of the kernel client tests (bash, as root).  Source
# it alone: it brings tests/integration/lib.sh; call vm_test_init (or it_init)
# before the vm_* functions.
#
# Guests are Debian's kernel in qemu (prepare.sh, init.sh), NFSv3 clients of a
# server that runs in a network namespace this harness makes:
#
#   netns unfsd-vm-PID  (PID: the test script's; no route out)
#     br0 10.0.2.1/24 ── the server (vm_server_start), ports 2049 and 20048
#      ├─ vmtap1 ── qemu of guest 1, eth0 10.0.2.11, MAC 52:54:00:00:00:01
#      ├─ vmtap2 ── qemu of guest 2, eth0 10.0.2.12, MAC 52:54:00:00:00:02
#      └─ ...
#
#   vm_prepare                 prepare.sh (once per machine, cached), then its
#                              vm.env: VM_KVER VM_KERNEL VM_INITRD VM_KCONFIG;
#                              VM_QEMU: the qemu options every guest shares
#   vm_net_up                  the namespace and bridge; exports VM_NS
#                              VM_SERVER_IP VM_NETWORK VM_PORT VM_MOUNTPORT and
#                              VM_WORK (this run's dir, in $IT_TMP) for the
#                              server command; everything is undone at exit
#   vm_server_start CMD        bash -c CMD in the namespace, in a session of its
#                              own (stdout and stderr: $VM_WORK/server.log); waits
#                              until both ports listen.  CMD stays in the
#                              foreground and binds $VM_SERVER_IP
#   vm_server_stop             SIGTERM to the server's process group, SIGKILL
#                              after 10 s; VM_SERVER_STATUS is its exit status
#   vm_ns_add NAME ADDR/PFX    another host on the bridge: the namespace
#                              $VM_NS-NAME, its loopback up and its eth0
#                              (ADDR/PFX) a veth into br0; undone at exit as
#                              $VM_NS is (e.g. the gateways of kvm_failover.sh)
#   vm_guest_ip N              guest N's address (10.0.2.(10+N))
#   vm_guest_start N SCRIPT [--root] [--opts O] [--file F]... [--mem MB]
#                  [--timeout S] [--export P] [--disk IMG] [--server ADDR]
#                              boots guest N (1-89), which mounts P (default /)
#                              of ADDR (default $VM_SERVER_IP)
#                              with vers=3,proto=tcp,nolock (O appended: a later
#                              option wins) and runs SCRIPT (init.sh), F in
#                              $VM_FILES; --root boots with the export as its root
#                              filesystem; IMG is its /dev/vda (raw, virtio).
#                              qemu is killed after S s (default 300).
#                              The script gets VM_GUEST (N), VM_FILES, VM_IN,
#                              VM_PORT, NFS_MNT and (not with --root) VM_SERVER
#   vm_guest_wait N            until guest N is off; returns the script's exit
#                              status, 124 if qemu was killed by --timeout, 125
#                              if the guest failed before or around the script
#                              (its console's end on stderr).  The script's output
#                              is in $VM_WORK/gN.out, the console in gN.console
#   vm_guest_expect N ERE [S]  until a line of guest N's output matches ERE
#                              (default 120 s); fails when the guest is off
#   vm_guest_kill N            guest N's qemu SIGKILLed, as a reset: nothing in
#                              the guest shuts down; waits until it is gone
#   vm_guest_send N LINE       LINE to guest N's $VM_IN (its ttyS2): ask for it
#                              with a line vm_guest_expect waits for, as the
#                              guest's port drops what came before it opened it
#
# What the kvm_*.sh tests share on top:
#
#   vm_test_init NAME S [KEEP] it_init NAME, it_watchdog S, vm_prepare; T is the
#                              test's temp dir, kept (and named at exit) when
#                              KEEP is 1
#   vm_need_busybox            BUSYBOX: the busybox-static binary prepare.sh puts
#                              in the guest (the test fails without it)
#   vm_busybox_run DIR SCRIPT APPLET...
#                              sh SCRIPT in DIR with only busybox's APPLETs on
#                              PATH (the guest's tools, for an expected output)
#   vm_server_cmd BIN ARG...   prints the server command for vm_server_start:
#                              BIN ARGS on the harness's address and ports, its
#                              state dir in $VM_WORK; VM_SERVER_ARGS holds those
#                              options for commands written by hand
#   vm_tools_tar TAR BIN...    the host's BINs (rpcbind, rpc.statd...) with
#                              every library ldd names and the files their libc
#                              and libtirpc read, in TAR, for a guest to unpack
#                              over its /: nothing to download, nothing to cache
#   vm_run_guest CMD OUT ERR SCRIPT [OPTION...]
#                              vm_server_start CMD, guest 1 with SCRIPT and the
#                              vm_guest_start OPTIONs, vm_guest_wait (its stderr
#                              to ERR); guest 1's output is copied to OUT.  Returns
#                              the first failure's status; the server runs on
#                              (vm_server_stop)
#
# Processes are stopped by pid (guests, server), then whatever still runs in the
# namespaces, which are deleted: also when the test's watchdog stops it.  A
# namespace left by a SIGKILLed test (its PID gone) is removed by the next one.

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/../integration/lib.sh"
VM_CACHE=${VM_CACHE:-/var/cache/union-nfsd-test/vm}
VM_SERVER_IP=10.0.2.1
VM_NETWORK=10.0.2.0/24
VM_PORT=2049
VM_MOUNTPORT=20048
VM_NS=
VM_SERVER_PID=
declare -A VM_QPID=()
VM_EXTRA_NS=()

# vm_require_host [NEED...]: skips the test (exit 77) unless this host can run
# guests on a network: root, /dev/net/tun and qemu.  NEED names what else the
# test needs root for, for the skip message.
vm_require_host() {
	local why="network namespace, tap" need
	for need in "$@"; do why+=", $need"; done
	[ "$(id -u)" = 0 ] || skip "needs root ($why)"
	[ -c /dev/net/tun ] || skip "no /dev/net/tun"
	command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed"
}

vm_prepare() {
	bash "$VM_DIR/prepare.sh" || {
		echo "FAIL: tests/vm/prepare.sh failed"
		return 1
	}
	. "$VM_CACHE/vm.env"
	# kvm-pvm (a software KVM on hosts without VT-x or AMD-V) runs this kernel
	# far slower than plain emulation: only hardware KVM is used
	if [ -d /sys/module/kvm_pvm ] || ! grep -qwE 'vmx|svm' /proc/cpuinfo ||
		! { : <>/dev/kvm; } 2>/dev/null; then
		VM_QEMU=(-accel tcg -cpu max)
	else
		VM_QEMU=(-enable-kvm -cpu host)
	fi
	# no_timer_check: under emulation on a busy host the kernel can misjudge
	# its timer interrupt as broken and hang the boot
	VM_APPEND="console=ttyS0 quiet loglevel=4 panic=-1 mitigations=off no_timer_check random.trust_cpu=on"
	VM_QEMU+=(-smp 1 -M pc -nodefaults -no-user-config -display none -monitor none
		-no-reboot -kernel "$VM_KERNEL")
}

vm_guest_ip() { echo "10.0.2.$((10 + $1))"; }

vm_test_init() {
	it_init "$1"
	it_watchdog "$2"
	vm_prepare || return 1
	T=$IT_TMP
	if [ "${3:-0}" = 1 ]; then
		IT_EXIT_CMDS[0]="echo 'kept $T'" # instead of its removal
	fi
}

vm_need_busybox() {
	BUSYBOX=/bin/busybox
	[ -x "$BUSYBOX" ] || {
		echo "FAIL: $BUSYBOX missing (apt-get install busybox-static)"
		exit 1
	}
}

vm_busybox_run() {
	local dir=$1 script=$2 a
	shift 2
	mkdir -p "$IT_TMP/bb"
	for a in "$@"; do ln -sf "$BUSYBOX" "$IT_TMP/bb/$a"; done
	(cd "$dir" && env -i PATH="$IT_TMP/bb" "$BUSYBOX" sh "$script")
}

# expanded by the shell that runs the server, in the namespace
VM_SERVER_ARGS='--nfs-port=$VM_PORT --mount-port=$VM_MOUNTPORT --bind=$VM_SERVER_IP'
VM_SERVER_ARGS+=' --state-dir=$VM_WORK/state --foreground --no-rpcbind --no-portmapper'

vm_server_cmd() {
	local cmd=exec a
	for a in "$@"; do cmd+=" $(printf '%q' "$a")"; done
	echo "$cmd $VM_SERVER_ARGS"
}

vm_tools_tar() {
	local tar=$1 r b p lib
	shift
	r=$(mktemp -d "$IT_TMP/tools.XXXXXX")
	mkdir -p "$r/usr/sbin" "$r/etc"
	for b in "$@"; do
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
	tar -C "$r" -cf "$tar" . && rm -rf "$r"
}

vm_run_guest() {
	local cmd=$1 out=$2 err=$3 rc=0
	shift 3
	vm_server_start "$cmd" && vm_guest_start 1 "$@" && vm_guest_wait 1 2>"$err" || rc=$?
	cp "$VM_WORK/g1.out" "$out" 2>/dev/null || : >"$out"
	return "$rc"
}

# vm_ns_kill NS: whatever runs in NS stopped (SIGTERM for 3 s, then SIGKILL),
# and NS deleted
vm_ns_kill() {
	local p i
	for ((i = 0; i < 30; i++)); do
		p=$(ip netns pids "$1" 2>/dev/null)
		[ -n "$p" ] || break
		kill -TERM $p 2>/dev/null || true
		sleep 0.1
	done
	for p in $(ip netns pids "$1" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
	ip netns del "$1" 2>/dev/null || true
}

vm_remove_stale() {
	local ns owner p
	# unfsd-vm-PID and its hosts (vm_ns_add), unfsd-vm-PID-NAME
	for ns in $(ip netns list | awk '{print $1}' | grep -E '^unfsd-vm-[0-9]+(-[a-z0-9]+)?$' || true); do
		owner=${ns#unfsd-vm-}
		owner=${owner%%-*}
		kill -0 "$owner" 2>/dev/null && continue
		for p in $(ip netns pids "$ns"); do kill -KILL "$p" 2>/dev/null || true; done
		ip netns del "$ns" 2>/dev/null || true
	done
}

vm_net_up() {
	vm_remove_stale
	VM_WORK=$IT_TMP/vm
	mkdir -p "$VM_WORK"
	VM_NS=unfsd-vm-$$
	ip netns add "$VM_NS" || return 1
	it_on_exit vm_cleanup
	ip -n "$VM_NS" link set lo up &&
		ip -n "$VM_NS" link add br0 type bridge &&
		ip -n "$VM_NS" addr add "$VM_SERVER_IP/24" dev br0 &&
		ip -n "$VM_NS" link set br0 up || return 1
	export VM_NS VM_SERVER_IP VM_NETWORK VM_PORT VM_MOUNTPORT VM_WORK
}

vm_ns_add() {
	local ns=$VM_NS-$1 br=vh-$1
	ip netns add "$ns" || return 1
	VM_EXTRA_NS+=("$ns")
	ip -n "$VM_NS" link add "$br" type veth peer name eth0 netns "$ns" &&
		ip -n "$VM_NS" link set "$br" master br0 &&
		ip -n "$VM_NS" link set "$br" up &&
		ip -n "$ns" link set lo up &&
		ip -n "$ns" addr add "$2" dev eth0 &&
		ip -n "$ns" link set eth0 up
}

vm_listening() {
	ip netns exec "$VM_NS" ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

vm_server_start() {
	local i
	setsid ip netns exec "$VM_NS" bash -c "$1" </dev/null >"$VM_WORK/server.log" 2>&1 &
	VM_SERVER_PID=$!
	for ((i = 0; i < 600; i++)); do # 60 s: a loaded machine
		vm_listening "$VM_PORT" && vm_listening "$VM_MOUNTPORT" && return 0
		kill -0 "$VM_SERVER_PID" 2>/dev/null || break
		sleep 0.1
	done
	echo "FAIL: the server does not listen on $VM_SERVER_IP:$VM_PORT and $VM_MOUNTPORT; its log:"
	tail -30 "$VM_WORK/server.log"
	return 1
}

vm_server_stop() {
	local i
	VM_SERVER_STATUS=
	[ -n "$VM_SERVER_PID" ] || return 0
	kill -TERM -- "-$VM_SERVER_PID" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$VM_SERVER_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL -- "-$VM_SERVER_PID" 2>/dev/null || true
	wait "$VM_SERVER_PID" && VM_SERVER_STATUS=0 || VM_SERVER_STATUS=$?
	VM_SERVER_PID=
}

# vm_guest_initrd N SCRIPT MODE EXPORT OPTS FILE...: the base initramfs and the
# guest's own cpio, one file
vm_guest_initrd() {
	local n=$1 script=$2 mode=$3 export=$4 opts=$5 r=$VM_WORK/g$1.rd
	shift 5
	mkdir -p "$r/vm/files"
	install -m 0755 "$VM_DIR/init.sh" "$r/init"
	cp "$script" "$r/vm/script"
	[ $# -eq 0 ] || cp -p "$@" "$r/vm/files/"
	printf 'VM_GUEST=%s\nVM_PORT=%s\nVM_MODE=%s\nVM_EXPORT=%q\nVM_OPTS=%q\n' \
		"$n" "$VM_PORT" "$mode" "$export" "$opts" >"$r/vm/env"
	{
		cat "$VM_INITRD"
		(cd "$r" && find . | LC_ALL=C sort | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1)
	} >"$VM_WORK/g$n.initrd"
}

vm_guest_start() {
	local n=$1 script=$2 mode=script mem=256 secs=300 export=/ extra= files=() disk=() server=
	shift 2
	while [ $# -gt 0 ]; do
		case $1 in
		--root) mode=root ;;
		--opts) extra=,$2 && shift ;;
		--file) files+=("$2") && shift ;;
		--mem) mem=$2 && shift ;;
		--timeout) secs=$2 && shift ;;
		--export) export=$2 && shift ;;
		--disk) disk=(-drive "file=$2,format=raw,if=virtio,cache=writeback") && shift ;;
		--server) server=$2 && shift ;;
		*)
			echo "vm_guest_start: unknown option $1" >&2
			return 1
			;;
		esac
		shift
	done
	local s=${server:-$VM_SERVER_IP} tap=vmtap$n w=$VM_WORK/g$n
	local opts="vers=3,proto=tcp,port=$VM_PORT,mountport=$VM_MOUNTPORT,mountproto=tcp"
	opts+=",nolock,addr=$s,mountaddr=$s$extra"
	vm_guest_initrd "$n" "$script" "$mode" "$export" "$opts" "${files[@]}" || return 1
	ip -n "$VM_NS" link del "$tap" 2>/dev/null || true # an earlier guest N's
	ip -n "$VM_NS" tuntap add dev "$tap" mode tap &&
		ip -n "$VM_NS" link set "$tap" master br0 &&
		ip -n "$VM_NS" link set "$tap" up || return 1
	rm -f "$w.in.in" "$w.in.out"
	mkfifo "$w.in.in" "$w.in.out"
	: >"$w.console"
	: >"$w.out"
	ip netns exec "$VM_NS" timeout -k 5 "$secs" qemu-system-x86_64 "${VM_QEMU[@]}" -m "$mem" \
		-initrd "$w.initrd" -pidfile "$w.pid" "${disk[@]}" \
		-append "$VM_APPEND vm.ip=$(vm_guest_ip "$n")/24 vm.server=$s" \
		-serial "file:$w.console" -serial "file:$w.out" -serial "pipe:$w.in" \
		-netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
		-device "virtio-net-pci,netdev=n0,mac=52:54:00:00:00:$(printf %02x "$n")" \
		</dev/null >"$w.qemu" 2>&1 &
	VM_QPID[$n]=$!
}

vm_guest_wait() {
	local n=$1 w=$VM_WORK/g$1 rc=0 m
	wait "${VM_QPID[$n]}" || rc=$?
	VM_QPID[$n]=
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		echo "guest $n: stopped by its timeout; the end of its console:" >&2
		tail -20 "$w.console" >&2
		return 124
	fi
	m=$(tr -d '\r' <"$w.console" | sed -n 's/.*@@VM_RC=\([0-9]*\)@@.*/\1/p' | tail -1)
	[ -n "$m" ] && return "$m"
	echo "guest $n: no status (qemu exited $rc: $(head -c 300 "$w.qemu"));" \
		"the end of its console:" >&2
	tr -d '\r' <"$w.console" | tail -20 >&2
	return 125
}

vm_guest_expect() {
	local n=$1 ere=$2 i
	for ((i = 0; i < ${3:-120} * 10; i++)); do
		grep -qE "$ere" "$VM_WORK/g$n.out" && return 0
		kill -0 "${VM_QPID[$n]}" 2>/dev/null || break
		sleep 0.1
	done
	grep -qE "$ere" "$VM_WORK/g$n.out"
}

# vm_fail_two MSG...: a two-guest test's failure: MSG, both guests' output
# (and $T/gN.err, what the host side saw), the server log's end; exits 1.
vm_fail_two() {
	local n
	echo "FAIL: $*"
	for n in 1 2; do
		echo "--- guest $n's output:"
		cat "$VM_WORK/g$n.out"
		[ ! -s "$T/g$n.err" ] || cat "$T/g$n.err"
	done
	echo "--- server log (last 20 lines):"
	tail -20 "$VM_WORK/server.log"
	exit 1
}

vm_guest_kill() {
	local p
	p=$(cat "$VM_WORK/g$1.pid" 2>/dev/null) && kill -KILL "$p" 2>/dev/null || true
	[ -z "${VM_QPID[$1]:-}" ] || wait "${VM_QPID[$1]}" 2>/dev/null || true
	VM_QPID[$1]=
}

vm_guest_send() {
	printf '%s\n' "$2" >"$VM_WORK/g$1.in.in"
}

vm_cleanup() {
	local n p i
	for n in "${!VM_QPID[@]}"; do
		p=${VM_QPID[$n]}
		[ -n "$p" ] || continue
		kill -TERM "$p" 2>/dev/null || true
		p=$(cat "$VM_WORK/g$n.pid" 2>/dev/null) && kill -TERM "$p" 2>/dev/null || true
	done
	vm_server_stop
	for n in "${!VM_QPID[@]}"; do
		[ -z "${VM_QPID[$n]}" ] || wait "${VM_QPID[$n]}" 2>/dev/null || true
	done
	# anything else the server command started in the namespaces
	for ((i = ${#VM_EXTRA_NS[@]} - 1; i >= 0; i--)); do vm_ns_kill "${VM_EXTRA_NS[i]}"; done
	vm_ns_kill "$VM_NS"
}
