#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
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
. "$HERE/../vm/lib.sh"
it_private_mounts "$@"

vm_require_host "overlay mount"
vm_need_busybox

vm_test_init kvm 1140 # ctest TIMEOUT is 1200
t0=$SECONDS
bash "$HERE/mklayers.sh" "$T/layers"
K=$T/layers/kern O=$T/layers/orig
it_overlay_ro "$T/mnt" "$K/l1:$K/l2:$K/l3"

# the expected listing: tree_busybox.sh on the overlay mount, busybox applets only
vm_busybox_run "$T/mnt" "$HERE/tree_busybox.sh" find stat sort sha256sum sed wc sh >"$T/expected"
echo "layers ready and listed on the overlay mount in $((SECONDS - t0)) s" \
	"($(tail -1 "$T/expected"))"

# union-nfsd in the harness's network namespace, one server per run; its state
# dir in the harness's work dir
# (the guest is no loopback client: it must be named; its root reads as root)
SERVER_CMD=$(vm_server_cmd "$UNION_NFSD" --lowerdir="$O/l1:$O/l2:$O/l3" \
	--clients="$(vm_guest_ip 1)(ro,no_root_squash)")

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
	vm_run_guest "$SERVER_CMD" "$T/guest-$proto" "$T/guest-$proto.err" \
		"$HERE/tree_busybox.sh" --timeout 400 "${opts[@]}" || run_rc=$?
	vm_server_stop
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
