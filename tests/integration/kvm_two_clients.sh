#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kvm_two_clients.sh UNION_NFSD - two Linux kernel clients at once on an export
# with per-client upper layers (upperdir and workdir with %a).
#
# Two guests of tests/vm boot together on one bridge and mount the same export
# of union-nfsd: a lower layer with lower.txt, and an upper per client address.
# Each guest (guest_two_clients.sh) writes the same path, same.txt, and a file
# of its own; once both have written (the host waits for both), each reads back
# its own same.txt and sees only its own file.  Then each presents, with rawfh
# (tests/vm/rawfh.c, built static here), the handle of same.txt in its own union
# (status 0) and the other guest's, passed through the host: that one must be
# refused with NFS3ERR_ACCES (13).  The host then checks the uppers on disk and
# that union-nfsd exits 0 on SIGTERM.
# Exit: 0 pass, 1 fail, 77 skipped (no root, /dev/net/tun, qemu or static libc).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_two_clients.sh UNION_NFSD}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"

vm_require_host

vm_test_init kvm2 540 # ctest TIMEOUT is 600
t0=$SECONDS
cc -static -O2 -o "$T/rawfh" "$VM_DIR/rawfh.c" || skip "cc -static failed (no static libc?)"
mkdir -p "$T/lower" "$T/clients"
chmod 755 "$T"
echo lower >"$T/lower/lower.txt"

SERVER_CMD=$(vm_server_cmd "$UNION_NFSD" --lowerdir="$T/lower" \
	--upperdir="$T/clients/%a/upper" --workdir="$T/clients/%a/work" \
	--clients="$VM_NETWORK(rw,no_root_squash)")
vm_net_up
vm_server_start "$SERVER_CMD"

fail() { vm_fail_two "$@"; }

# expect_both ERE: both guests printed a line matching ERE (a guest that
# failed instead shows its FAIL line)
expect_both() {
	local n
	for n in 1 2; do
		vm_guest_expect "$n" "$1|^FAIL" 300 && ! grep -q '^FAIL' "$VM_WORK/g$n.out" ||
			fail "guest $n did not get to '$1'"
	done
}

for n in 1 2; do
	vm_guest_start "$n" "$HERE/guest_two_clients.sh" --file "$T/rawfh" --timeout 400
done
expect_both '^wrote$'
echo "both guests wrote same.txt after $((SECONDS - t0)) s"
vm_guest_send 1 go
vm_guest_send 2 go
expect_both '^HANDLE [0-9a-f]+$'
h1=$(sed -n 's/^HANDLE //p' "$VM_WORK/g1.out")
h2=$(sed -n 's/^HANDLE //p' "$VM_WORK/g2.out")
echo "guest 1's handle of same.txt: $h1"
echo "guest 2's handle of same.txt: $h2"
vm_guest_send 1 "$h2"
vm_guest_send 2 "$h1"
for n in 1 2; do
	st=0
	vm_guest_wait "$n" 2>"$T/g$n.err" || st=$?
	grep -E '^(read back|the other|RESULT|FAIL)' "$VM_WORK/g$n.out" | sed "s/^/guest $n: /"
	[ "$st" = 0 ] || fail "guest $n ended with status $st"
done
vm_server_stop
[ "$VM_SERVER_STATUS" = 0 ] || fail "union-nfsd exited $VM_SERVER_STATUS on SIGTERM (want 0)"
for n in 1 2; do
	u=$T/clients/$(vm_guest_ip "$n")/upper
	[ "$(cat "$u/same.txt" 2>/dev/null)" = "guest $n" ] || fail "$u/same.txt is not guest $n's"
	[ -f "$u/only-$n" ] || fail "no only-$n in $u"
done
[ "$(cat "$T/lower/lower.txt")" = lower ] || fail "the lower layer changed"
echo "PASS: two clients at once, each with its own upper; a handle of one" \
	"client's union refused for the other; total $((SECONDS - t0)) s"
