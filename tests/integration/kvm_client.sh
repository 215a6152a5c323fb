#!/bin/bash
# kvm_client.sh UNION_NFSD - the Linux kernel client test.
#
# A Debian kernel in qemu (tests/vm) mounts union-nfsd's export of the oracle
# layers (mklayers.sh), once with vers=3,proto=tcp and once with
# proto=udp,mountproto=udp, and lists and checksums the whole tree with busybox
# (tree_busybox.sh).  The same script, run by the same busybox-static binary on
# the host over a kernel overlayfs mount of the same layers, gives the expected
# listing; each guest listing must equal it.
#
# Env: KVM_PROTOS="tcp udp" (default) to choose the runs.
# Exit: 0 equal, 1 different or failed, 77 skipped (no root, /dev/net/tun or qemu).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_client.sh UNION_NFSD}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
. "$HERE/../vm/lib.sh"
it_private_mounts "$@"

vm_require_host "overlay mount"
BUSYBOX=/bin/busybox # busybox-static: the binary prepare.sh puts in the guest
[ -x "$BUSYBOX" ] || { echo "FAIL: $BUSYBOX missing (apt-get install busybox-static)"; exit 1; }

it_init kvm
it_watchdog 1140 # ctest TIMEOUT is 1200
vm_prepare
T=$IT_TMP
t0=$SECONDS
bash "$HERE/mklayers.sh" "$T/layers"
K=$T/layers/kern O=$T/layers/orig
mkdir "$T/mnt"
mount -t overlay overlay -o "ro,lowerdir=$K/l1:$K/l2:$K/l3" "$T/mnt"
it_on_exit "unmount_path '$T/mnt'"

# the expected listing: tree_busybox.sh on the overlay mount, busybox applets only
mkdir "$T/bb"
for a in find stat sort sha256sum sed wc sh; do ln -s "$BUSYBOX" "$T/bb/$a"; done
(cd "$T/mnt" && env -i PATH="$T/bb" "$BUSYBOX" sh "$HERE/tree_busybox.sh") >"$T/expected"
echo "layers ready and listed on the overlay mount in $((SECONDS - t0)) s" \
	"($(tail -1 "$T/expected"))"

# union-nfsd in the harness's network namespace, one server per run; its state
# dir in the harness's work dir
SERVER_CMD="exec '$UNION_NFSD' --lowerdir='$O/l1:$O/l2:$O/l3'"
SERVER_CMD+=" --nfs-port=\$VM_PORT --mount-port=\$VM_MOUNTPORT"
SERVER_CMD+=" --bind=\$VM_SERVER_IP --state-dir=\$VM_WORK/state --foreground"
SERVER_CMD+=" --no-rpcbind"
# the guest is no loopback client: it must be named (its root reads as root)
SERVER_CMD+=" --clients=\"$(vm_guest_ip 1)(ro,no_root_squash)\""

# Debian's kernels are built with CONFIG_NFS_DISABLE_UDP_SUPPORT=y: their NFS
# client refuses proto=udp (EINVAL).  Its MOUNT client still speaks UDP, so with
# such a kernel the "udp" run mounts with mountproto=udp and reads over TCP; NFS
# over UDP itself is then covered by the protocol test's UDP calls only.
UDP_OPTS=proto=udp,mountproto=udp
if grep -qs '^CONFIG_NFS_DISABLE_UDP_SUPPORT=y' "$VM_KCONFIG"; then
	UDP_OPTS=mountproto=udp
	echo "NOTE: guest kernel $VM_KVER has no NFS-over-UDP client" \
		"(CONFIG_NFS_DISABLE_UDP_SUPPORT=y): the udp run uses MOUNT over UDP, NFS over TCP"
fi

vm_net_up
rc=0
for proto in ${KVM_PROTOS:-tcp udp}; do
	opts=()
	[ "$proto" = udp ] && opts=(--opts "$UDP_OPTS")
	t1=$SECONDS
	run_rc=0
	vm_server_start "$SERVER_CMD" && vm_guest_start 1 "$HERE/tree_busybox.sh" --timeout 400 \
		"${opts[@]}" && vm_guest_wait 1 2>"$T/guest-$proto.err" || run_rc=$?
	vm_server_stop
	cp "$VM_WORK/g1.out" "$T/guest-$proto" 2>/dev/null || : >"$T/guest-$proto"
	cp "$VM_WORK/server.log" "$T/server-$proto.log"
	echo "$proto: guest run took $((SECONDS - t1)) s, exit $run_rc," \
		"$(grep -c . "$T/guest-$proto" || true) lines"
	if [ "$run_rc" != 0 ]; then
		echo "FAIL ($proto): the guest ended with status $run_rc"
		tail -30 "$T/guest-$proto.err"
		echo "--- server log (last 30 lines):"
		tail -30 "$T/server-$proto.log"
		rc=1
		# a hung guest (a dead server under a hard mount) would hang again
		if [ "$run_rc" = 124 ]; then
			echo "the $proto run timed out: the remaining runs are skipped"
			break
		fi
		continue
	fi
	if [ "$VM_SERVER_STATUS" != 0 ]; then
		echo "FAIL ($proto): union-nfsd exited $VM_SERVER_STATUS on SIGTERM (want 0)"
		tail -30 "$T/server-$proto.log"
		rc=1
	fi
	if ! diff -u --label overlayfs --label "guest-$proto" "$T/expected" "$T/guest-$proto" \
		>"$T/diff-$proto"; then
		echo "FAIL ($proto): the guest's tree differs from the overlay mount" \
			"(first 100 lines of the diff):"
		head -100 "$T/diff-$proto"
		rc=1
	else
		echo "PASS ($proto): $(tail -1 "$T/expected" | cut -d' ' -f2) objects identical"
	fi
done
exit "$rc"
