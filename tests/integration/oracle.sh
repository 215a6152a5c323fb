#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# oracle.sh UNION_NFSD NFS_TREE - the overlayfs oracle test.
#
# Generates layers (mklayers.sh), mounts their kernel copy with overlayfs (lowerdir
# only, read-only), serves the original with union-nfsd, reads both trees with the
# same program (nfs_tree --local / --nfs) and requires the listings to be identical:
# names, types, modes, sizes, sha256 of contents and symlink targets, devices, and
# which names are hard links of each other.  On a difference the diff is printed
# ("-" the kernel overlay, "+" union-nfsd).
#
# ORACLE_SERVER=ganesha serves a flat copy of the overlay mount with nfs-ganesha
# instead: a check of the test's own tools against a known-good server.
# Exit: 0 identical, 1 different or failed, 77 skipped (no root, no overlayfs).
set -euo pipefail
UNION_NFSD=${1:?usage: oracle.sh UNION_NFSD NFS_TREE}
NFS_TREE=${2:?usage: oracle.sh UNION_NFSD NFS_TREE}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

it_overlay_test oracle 660 "$@" # ctest TIMEOUT is 720
T=$IT_TMP
t0=$SECONDS

# the kernel's copy of the layers on a tmpfs: written and read in memory, not
# through a disk's journal, which a busy machine makes slow
K=$T/layers/kern O=$T/layers/orig
mkdir -p "$K"
mount -t tmpfs -o mode=0755 tmpfs "$K"
it_on_exit "unmount_path '$K'"
bash "$HERE/mklayers.sh" "$T/layers"
it_overlay_ro "$T/mnt" "$K/l1:$K/l2:$K/l3"
echo "layers generated and mounted in $((SECONDS - t0)) s"

if ! "$NFS_TREE" --local "$T/mnt" >"$T/expected" 2>"$T/expected.err"; then
	echo "nfs_tree --local failed on the overlay mount:" >&2
	cat "$T/expected.err" >&2
	exit 1
fi

t1=$SECONDS
rc=0
if [ "${ORACLE_SERVER:-union-nfsd}" = ganesha ]; then
	cp -a "$T/mnt" "$T/flat"
	"$HERE/with_ganesha.sh" "$T/flat" \
		bash -c '"$1" --nfs "$NFS_URL" >"$2" 2>"$3"' _ "$NFS_TREE" "$T/actual" \
		"$T/actual.err" 2>"$T/ganesha.err" || rc=$?
else
	start_union_nfsd "$UNION_NFSD" --lowerdir="$O/l1:$O/l2:$O/l3"
	"$NFS_TREE" --nfs "$(nfs_url /)" >"$T/actual" 2>"$T/actual.err" || rc=$?
fi
echo "tree read over NFS in $((SECONDS - t1)) s: $(wc -l <"$T/actual") objects" \
	"(overlay: $(wc -l <"$T/expected"))"

if [ "$rc" != 0 ]; then
	echo "FAIL: nfs_tree --nfs exited $rc; its complaints (first 50):"
	head -50 "$T/actual.err"
fi
if ! diff -u --label overlayfs --label union-nfsd "$T/expected" "$T/actual" >"$T/diff"; then
	echo "FAIL: the NFS tree differs from the overlay mount" \
		"($(grep -c '^[-+][^-+]' "$T/diff") lines; first 200 lines of the diff):"
	head -200 "$T/diff"
	rc=1
fi
if [ -n "${SRV_PID:-}" ]; then
	if ! kill -0 "$SRV_PID" 2>/dev/null; then
		echo "FAIL: union-nfsd died during the test; its log:"
		tail -50 "$SRV_LOG"
		rc=1
	else
		stop_union_nfsd || rc=1
	fi
fi
[ "$rc" = 0 ] && echo "PASS: $(wc -l <"$T/expected") objects identical"
exit "$rc"
