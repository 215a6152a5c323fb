#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kvm_readdir.sh UNION_NFSD - the kernel client test of merged READDIR.
#
# Three read-only layers whose directory big/ merges to 20,000 names (shadowed
# duplicates, merged subdirectories, 0:0 white-outs in the upper two layers,
# some hiding nothing) are exported by union-nfsd to a Linux kernel in qemu
# (tests/vm).  In the guest, readdir_walk.c (built static here)
# reads big/ recording telldir positions, seekdirs back to every 97th and reads
# the same names again, and checks no name comes twice; `ls big | wc -l`,
# `ls -a big | wc -l` and `find . | wc -l` must equal those of a kernel overlayfs
# mount (read-only) of the same layers on the host.
# Exit: 0 pass, 1 fail, 77 skipped (no root, /dev/net/tun, qemu or gcc -static).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_readdir.sh UNION_NFSD}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"
it_private_mounts "$@"

vm_require_host "overlay mount"
vm_need_busybox
vm_test_init kvmrd 540 # ctest TIMEOUT is 600
gcc -static -O2 -o "$T/readdir_walk" "$HERE/readdir_walk.c" ||
	skip "gcc -static failed (no static libc?)"

# l3 (bottom): f[0,12000)        l2: f[8000,16000), 0:0 white-outs f[0,2000)
# l1 (top):    f[14000,24000), 0:0 white-outs f[2000,4000) and g[0,300)
# visible: f[4000,24000) = 20,000 names; d[0,10) directories in all three, with
# a file of each layer inside.
python3 - "$T/layers" <<'PY'
import os, sys, stat
top = sys.argv[1]
def mk(layer, fmt, a, b, kind):
    d = os.path.join(top, layer, "big")
    os.makedirs(d, exist_ok=True)
    for i in range(a, b):
        p = os.path.join(d, fmt % i)
        if kind == "f":
            os.mknod(p, 0o644 | stat.S_IFREG)
        elif kind == "w":
            os.mknod(p, stat.S_IFCHR, os.makedev(0, 0))
        else:
            os.mkdir(p)
            os.mknod(os.path.join(p, "in_" + layer), 0o644 | stat.S_IFREG)
mk("l3", "f%06d", 0, 12000, "f")
mk("l2", "f%06d", 8000, 16000, "f")
mk("l2", "f%06d", 0, 2000, "w")
mk("l1", "f%06d", 14000, 24000, "f")
mk("l1", "f%06d", 2000, 4000, "w")
mk("l1", "g%06d", 0, 300, "w")
for l in ("l1", "l2", "l3"):
    mk(l, "d%02d", 0, 10, "d")
PY
L=$T/layers
it_overlay_ro "$T/mnt" "$L/l1:$L/l2:$L/l3"
vm_busybox_run "$T/mnt" "$HERE/guest_readdir.sh" ls find wc sh >"$T/expected"
echo "overlay mount: $(tr '\n' ' ' <"$T/expected")"
(cd "$T/mnt" && "$T/readdir_walk" big) | sed 's/^/overlay walk: /'
sleep 1 # settled layer dirs: the listing is cached from the first READDIR

# (the guest is no loopback client: it must be named; its root reads as root)
SERVER_CMD=$(vm_server_cmd "$UNION_NFSD" --lowerdir="$L/l1:$L/l2:$L/l3" \
	--clients="$(vm_guest_ip 1)(ro,no_root_squash)")
run_rc=0
t1=$SECONDS
vm_net_up
vm_run_guest "$SERVER_CMD" "$T/guest" "$T/guest.err" "$HERE/guest_readdir.sh" \
	--file "$T/readdir_walk" --timeout 400 || run_rc=$?
echo "guest run took $((SECONDS - t1)) s, exit $run_rc: $(tr '\n' ' ' <"$T/guest")"
rc=0
if [ "$run_rc" != 0 ]; then
	echo "FAIL: the guest ended with status $run_rc"
	tail -30 "$T/guest.err"
	tail -20 "$VM_WORK/server.log"
	rc=1
fi
if ! diff -u --label overlayfs --label guest "$T/expected" \
	<(grep -E '^(ls|ls_a|find) ' "$T/guest"); then
	echo "FAIL: the guest's counts differ from the overlay mount's"
	rc=1
fi
grep -q '^seek_bad 0$' "$T/guest" && grep -q '^dups 0$' "$T/guest" &&
	grep -q '^entries 20012$' "$T/guest" || { echo "FAIL: readdir_walk in the guest"; rc=1; }
[ "$rc" = 0 ] && echo "PASS: 20,000 merged names, telldir/seekdir and counts as overlayfs"
exit "$rc"
