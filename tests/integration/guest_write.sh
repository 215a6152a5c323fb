#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# guest_write.sh - the guest side of kvm_write.sh.
#
# Runs in a qemu guest whose root file system is union-nfsd's export (NFSv3): a
# Debian root (bottom lower layer) under a test layer (the upper lower layers,
# with /srv/kvmw and /srv/ltree), writes going to a fresh upper layer.  So /bin/sh
# is Debian's dash, and every tool and library here is read from union-nfsd.
#
#   /scratch  (new, all in the upper layer): unpack a tarball of ~3000 files,
#             compile guest_prog.c with gcc and run it (output checked against the
#             host's run of the same source), delete half the tree (every other
#             name of a sorted list), rename a few hundred files (within and across
#             directories, over existing names) and some directories
#   /srv/ltree (in the lower layers): deletes (white-outs), renames (copy-up),
#             appends, truncates, chmod/chown/utimes (metadata copy-up), links, a
#             removed and re-made directory (opaque), a merged directory moved
#             (the server answers EXDEV, mv copies), special files
#
# Then it prints list_tree.sh's listing of both between @@LIST-BEGIN@@ and
# @@LIST-END@@, and syncs.  "step NAME at Ts" lines give the guest's uptime.
# A failing command ends the script (set -e) with its status.
set -eu
export LC_ALL=C
K=/srv/kvmw
S=/scratch
step() { echo "step $1 at $(cut -d' ' -f1 /proc/uptime)s"; }

step unpack
mkdir "$S"
cd "$S"
tar -xf "$K/tree.tar" # as root: owners, modes and times from the archive
echo "unpacked: $(find tree | wc -l) objects"

step compile
mkdir build
# the compiler's temp files on NFS too (the harness put a tmpfs on /tmp)
TMPDIR=$S/build gcc -O2 -Wall -Werror -c -o build/guest_prog.o "$K/guest_prog.c"
TMPDIR=$S/build gcc -o build/guest_prog build/guest_prog.o

step run
build/guest_prog "$S/tree" "$S/out" >build/prog.out
if ! cmp -s build/prog.out "$K/prog.expected"; then
	echo "FAIL: guest_prog's output differs from the host's run:"
	diff "$K/prog.expected" build/prog.out || true
	exit 1
fi
echo "guest_prog output as on the host ($(wc -l <build/prog.out) lines)"

step delete
# every other non-directory of the sorted list, then two whole subtrees
find tree ! -type d | sort | awk 'NR % 2 == 0' >/tmp/del.list
tr '\n' '\0' </tmp/del.list | xargs -0 rm -f
rm -r tree/d07 tree/d13/sub
echo "deleted $(wc -l </tmp/del.list) names and 2 subtrees; $(find tree | wc -l) objects left"

step rename
n=0
# across directories: every 7th file of dNN moves into dNN+1 (some land on names
# that exist there: rename over an existing file), one mv per directory
for d in tree/d*/; do
	d=${d%/}
	i=${d#tree/d}
	j=$(printf '%02d' $(((${i#0} + 1) % 30)))
	[ -d "tree/d$j" ] || continue
	find "$d" -maxdepth 1 -type f | sort | awk 'NR % 7 == 3' >/tmp/mv.list
	[ -s /tmp/mv.list ] || continue
	tr '\n' '\0' </tmp/mv.list | xargs -0 mv -f -t "tree/d$j"
	n=$((n + $(wc -l </tmp/mv.list)))
done
# within a directory: new names, and over an existing neighbour
find tree -type f | sort | awk 'NR % 11 == 5' >/tmp/ren.list
while read -r f; do
	mv "$f" "$f.renamed"
	n=$((n + 1))
done </tmp/ren.list
find tree -type f -name 'f*' | sort | awk 'NR % 13 == 1' >/tmp/over.list
prev=
while read -r f; do
	if [ -n "$prev" ] && [ "$(dirname "$prev")" = "$(dirname "$f")" ]; then
		mv -f "$prev" "$f"
		n=$((n + 1))
	fi
	prev=$f
done </tmp/over.list
# directories (all upper): rename, move into another, replace an empty one
mv tree/d20 tree/d20-renamed
mv tree/d21 tree/d22/d21-inside
mkdir tree/empty-target
mv -T tree/d23/sub tree/empty-target
echo "renamed $n files and 3 directories"

step ltree
L=/srv/ltree
# white-outs: every other name in four merged directories (one opaque below)
find "$L/a0" "$L/a1" "$L/a2" "$L/a9" ! -type d | sort | awk 'NR % 2 == 1' >/tmp/ldel.list
tr '\n' '\0' </tmp/ldel.list | xargs -0 rm -f
echo "deleted $(wc -l </tmp/ldel.list) lower names"
# renames of lower files (copy-up, then a white-out where the name was)
find "$L/a0" "$L/a1" "$L/a2" -type f | sort | awk 'NR % 4 == 0' >/tmp/lren.list
while read -r f; do
	mv "$f" "$f.moved"
done </tmp/lren.list
mv "$L/a3/m00" "$L/a0/from-a3"  # across directories
mv -f "$L/a3/m02" "$L/a3/m04"   # over a lower name
rm "$L/a3/m06"
mv "$L/a3/h1" "$L/a3/m06"       # over a white-out; h1 has a hard link h2
# overlayfs breaks a lower hard link on copy-up: h2 keeps the lower data
echo "appended after the rename" >>"$L/a3/m06"
echo "renamed $(($(wc -l </tmp/lren.list) + 3)) lower files"
# data and metadata of lower files
echo "appended in the guest" >>"$L/a6/m00"
truncate -s 3 "$L/a6/m10"
truncate -s 100000 "$L/a6/m12"
chmod 600 "$L/a6/m14"
chown 1234:4321 "$L/a6/m16"
touch -m -d '2001-02-03 04:05:06.789' "$L/a6/m18"
ln "$L/a7/m02" "$L/a7/m02.hardlink"
ln -s ../a7/m02 "$L/a6/link-to-m02"
# a merged directory removed and made again (opaque), one moved away (EXDEV:
# mv copies and removes), one emptied and removed
rm -r "$L/a4"
mkdir "$L/a4"
echo "new in an opaque dir" >"$L/a4/m00"
mv "$L/a5" "$L/a5-moved"
rm -r "$L/a8"/*
rmdir "$L/a8"
# special files
mkfifo "$L/fifo"
mknod "$L/null-dev" c 1 3
echo "lower tree changed"

step sync
sync
step list
echo "@@LIST-BEGIN@@"
sh "$K/list_tree.sh" "$S" "$L"
echo "@@LIST-END@@"
step done
