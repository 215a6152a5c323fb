#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# random_update.sh UNION_NFSD NFS_TREE RANDOM_UPDATE - issue 20's check of
# handles and fileids across seeded random updates of the lower layers.
#
# Runs RANDOM_UPDATE (random_update.c: the layers, the server, the NFS calls
# and every check of handles) in a private mount namespace on a tmpfs of its
# own, so that the layers, the upper and the state dir are written in memory
# and the kernel overlay mounts below cannot outlive the test.  After each
# update the driver calls this script back as
#
#   random_update.sh --oracle NFS_TREE URL DIR LOWERS UPPER
#
# which mounts kernel overlayfs over LOWERS (':' list, top first) with a copy
# of UPPER in DIR, lists it and the export at URL with NFS_TREE (oracle.sh's
# format: names, types, modes, sizes, sha256 of contents and targets) and
# requires the two listings to be equal ("-" the kernel, "+" union-nfsd).
#
#   RANDOM_UPDATE_SEED=N          the seed (printed; default: from the clock)
#   RANDOM_UPDATE_SERVER_ARGS=..  more server options (--no-layer-index makes
#                                 the copy step fail: the check can fail)
#   RANDOM_UPDATE_DIRS=N          top-level dirs of the base layer (103:
#                                 about 10,100 objects)
# Exit: 0 passed, 1 failed, 77 skipped (no root, no overlayfs).
set -euo pipefail
OVL_OPTS=redirect_dir=off,index=off,metacopy=off,xino=off

# The overlayfs oracle for one state of the stack (called by the driver).
oracle() {
	local nfs_tree=$1 url=$2 dir=$3 lowers=$4 upper=$5 rc=0 lrc=0 t0=$SECONDS pid
	rm -rf "$dir"
	mkdir -p "$dir/work" "$dir/mnt"
	cp -a "$upper" "$dir/upper"
	mount -t overlay overlay \
		-o "lowerdir=$lowers,upperdir=$dir/upper,workdir=$dir/work,$OVL_OPTS" "$dir/mnt"
	# both listings at once: each is one client's sequence of calls, and
	# the machine has a CPU for each
	"$nfs_tree" --local "$dir/mnt" >"$dir/expected" 2>"$dir/expected.err" &
	pid=$!
	"$nfs_tree" --nfs "$url" >"$dir/actual" 2>"$dir/actual.err" || rc=$?
	wait "$pid" || lrc=$?
	umount "$dir/mnt"
	if [ "$lrc" != 0 ]; then
		echo "oracle: nfs_tree --local failed on the overlay mount:" >&2
		head -20 "$dir/expected.err" >&2
		return 1
	fi
	if [ "$rc" != 0 ]; then
		echo "oracle: nfs_tree --nfs failed (first 20 complaints):" >&2
		head -20 "$dir/actual.err" >&2
	fi
	if ! diff -u --label overlayfs --label union-nfsd "$dir/expected" "$dir/actual" \
		>"$dir/diff"; then
		echo "oracle: the NFS tree differs from kernel overlayfs" \
			"(first 60 lines of the diff):" >&2
		head -60 "$dir/diff" >&2
		rc=1
	fi
	[ "$rc" = 0 ] && echo "oracle: $(wc -l <"$dir/expected") objects equal to kernel" \
		"overlayfs ($((SECONDS - t0)) s)"
	return "$rc"
}

if [ "${1:-}" = --oracle ]; then
	shift
	oracle "$@"
	exit
fi

UNION_NFSD=${1:?usage: random_update.sh UNION_NFSD NFS_TREE RANDOM_UPDATE}
NFS_TREE=${2:?usage: random_update.sh UNION_NFSD NFS_TREE RANDOM_UPDATE}
DRIVER=${3:?usage: random_update.sh UNION_NFSD NFS_TREE RANDOM_UPDATE}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

it_overlay_test randupd 480 "$@" # ctest TIMEOUT is 540

# one tmpfs for every layer, the upper and the oracle's copies: overlayfs
# then sees one filesystem (inode numbers unique without xino)
mkdir "$IT_TMP/fs"
mount -t tmpfs -o mode=0755 tmpfs "$IT_TMP/fs"
it_on_exit "unmount_path '$IT_TMP/fs'"
"$DRIVER" "$UNION_NFSD" "$NFS_TREE" "$HERE/random_update.sh" "$IT_TMP/fs"
