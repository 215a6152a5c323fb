# SPDX-License-Identifier: Apache-2.0
# guest_two_clients.sh - run by both guests of kvm_two_clients.sh at once
# (busybox sh, cwd = the mount of an export with per-client uppers).
#
#   1. reads the lower file, writes "guest N" to the same path as the other
#      guest and a file of its own, prints "wrote"
#   2. waits for "go" from the host (both guests have written), drops its page
#      cache and reads back: its own data at the shared path, its own file and
#      not the other guest's
#   3. prints "HANDLE <hex>", the server's handle of the shared path in its own
#      union (rawfh), and checks GETATTR of it answers 0; then reads the other
#      guest's handle from the host and checks GETATTR of it answers 13
#      (NFS3ERR_ACCES): a handle of another client's union is refused
# A failed check prints "FAIL: guest N: ..." and ends the script with 1.
set -u
me=$VM_GUEST
other=$((3 - me))
fail() {
	echo "FAIL: guest $me: $*"
	exit 1
}
# the host's lines; opened now, as the port drops what came before
exec 3<"$VM_IN"

[ "$(cat lower.txt)" = "lower" ] || fail "lower.txt reads '$(cat lower.txt)'"
echo "guest $me" >same.txt || fail "cannot write same.txt"
echo "mine" >"only-$me" || fail "cannot create only-$me"
sync
echo "wrote"

read -r go <&3
[ "$go" = go ] || fail "the host said '$go', want go"
echo 3 >/proc/sys/vm/drop_caches
got=$(cat same.txt)
[ "$got" = "guest $me" ] || fail "same.txt reads '$got', want 'guest $me'"
[ "$(cat "only-$me")" = mine ] || fail "only-$me lost"
[ ! -e "only-$other" ] || fail "the other guest's only-$other is visible"
echo "read back: same.txt '$got'; $(ls | tr '\n' ' ')"

fh=$("$VM_FILES/rawfh" handle same.txt) || fail "no handle of same.txt"
echo "HANDLE $fh"
st=$("$VM_FILES/rawfh" getattr "$VM_SERVER" "$VM_PORT" "$fh")
[ "$st" = 0 ] || fail "its own handle answered status '$st', want 0"
read -r theirs <&3
[ -n "$theirs" ] && [ "$theirs" != "$fh" ] || fail "the host sent handle '$theirs'"
st=$("$VM_FILES/rawfh" getattr "$VM_SERVER" "$VM_PORT" "$theirs")
[ "$st" = 13 ] ||
	fail "a handle of the other guest's union answered status '$st', want 13 (NFS3ERR_ACCES)"
echo "the other guest's handle: status 13 (NFS3ERR_ACCES)"
echo "RESULT PASS"
