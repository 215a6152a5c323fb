#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# mklayers.sh DIR - generate the overlayfs-oracle layers.
#
# Writes three lower layers, top-most first, twice:
#   DIR/orig/{l1,l2,l3}  as union-nfsd serves them (overlayfs AND OCI white-outs)
#   DIR/kern/{l1,l2,l3}  the same tree for kernel overlayfs, which does not read the
#                        OCI form: .wh.NAME becomes a 0/0 character device NAME and
#                        .wh..wh..opq becomes trusted.overlay.opaque=y on its dir.
# Mount the second with: mount -t overlay overlay -o ro,lowerdir=K/l1:K/l2:K/l3 MNT
#
# Rules the layout keeps, so that kernel overlayfs is a fair oracle:
#  - every white-out sits in a directory that is merged (present in two or more
#    layers): the kernel lists white-outs of a directory that lives in one layer
#    only, although lookup hides them; union-nfsd always hides them.
#  - everything root owns is world-readable, and the 0600/0700 objects belong to
#    uid 65534: a server that squashes root to nobody reads exactly what local
#    root reads.
#  - no file names with a newline (the guest-side listing is line based).
# The script forks little (bash builtins write the files, one setfattr sets many
# xattrs): on a busy machine every fork and exec costs, and the 10,000-name
# directory once took 100 s to make that way.
# Needs root (mknod, trusted.* xattrs, chown) and setfattr (Debian: attr).
set -euo pipefail
umask 022
OUT=${1:?usage: mklayers.sh DIR}
[ "$(id -u)" = 0 ] || { echo "mklayers.sh: needs root" >&2; exit 1; }
command -v setfattr >/dev/null || { echo "mklayers.sh: setfattr missing (apt-get install attr)" >&2; exit 1; }
[ ! -e "$OUT/orig" ] || { echo "mklayers.sh: $OUT/orig exists" >&2; exit 1; }
O=$OUT/orig
L1=$O/l1 L2=$O/l2 L3=$O/l3
mkdir -p "$L1" "$L2" "$L3"

parent() { [ -d "${1%/*}" ] || mkdir -p "${1%/*}"; } # parent FILE: make FILE's dir
put() { # put FILE CONTENT: write CONTENT (printf %s) to FILE, creating parents
	parent "$1"
	printf '%s' "$2" >"$1"
}
wh_dev() { parent "$1"; mknod "$1" c 0 0; }
wh_oci() { parent "$1"; : >"${1%/*}/.wh.${1##*/}"; }
wh_xattr() { # a 0-byte file marked as white-out; its dir says it holds such files
	parent "$1"
	: >"$1"
	setfattr -n trusted.overlay.whiteout -v y "$1"
	setfattr -n trusted.overlay.opaque -v x "${1%/*}"
}
# xattr white-outs in bulk: mark FILE... (made empty) as white-outs with one
# setfattr (its --restore format), and their dirs as holding such files
wh_xattr_many() {
	local f dump='' dirs=()
	for f in "$@"; do
		: >"$f"
		dump+="# file: $f"$'\n''trusted.overlay.whiteout="y"'$'\n\n'
		[[ " ${dirs[*]} " == *" ${f%/*} "* ]] || dirs+=("${f%/*}")
	done
	for f in "${dirs[@]}"; do
		dump+="# file: $f"$'\n''trusted.overlay.opaque="x"'$'\n\n'
	done
	setfattr --restore=- <<<"$dump"
}
rand() { parent "$1"; head -c "$2" /dev/urandom >"$1"; }

# ---- files shadowing files, merged dirs at several depths
for l in 1 2 3; do
	L=$O/l$l
	put "$L/common/from_l$l" "only in layer $l"
	put "$L/common/shared.txt" "shared.txt from layer $l"
	put "$L/common/deep/x/y/z/leaf_l$l" "leaf $l"
	put "$L/common/deep/x/y/z/same" "deep same from $l"
	put "$L/common/deep/x/mid_l$l" "mid $l"
done
put "$L2/common/deep/x/y/only_l2.txt" "l2"
put "$L3/etc/hostname" "bottom"
put "$L1/etc/hostname" "top"
put "$L2/etc/motd" "middle motd"
mkdir -p "$L1/empty_top" "$L3/empty_top"
put "$L3/empty_top/below" "below an empty top dir"
mkdir -p "$L2/emptydir"
: >"$L3/emptyfile"

# ---- a file above a dir, a dir above a file, a symlink above a dir
put "$L1/fad" "file above dir"
put "$L2/fad/hidden" "hidden by the file above"
put "$L1/daf/x" "dir above file"
put "$L3/daf" "file below dir"
mkdir -p "$L2/mid"
put "$L2/mid/in_mid" "dir in the middle"
ln -s somewhere "$L3/mid"
ln -s common "$L1/lad"
put "$L2/lad/hidden" "hidden by a symlink"

# ---- white-outs: overlayfs character device form
mkdir -p "$L1/wh_dev" "$L3/wh_dev"
put "$L3/wh_dev/victim" "whited out by a 0/0 device"
put "$L3/wh_dev/survivor" "survives"
wh_dev "$L2/wh_dev/victim"
put "$L1/wh_dev/top" "top"
wh_dev "$L1/wh_dev/ghost" # hides nothing: still hidden
put "$L3/gone_dir/a/b" "a whole dir whited out"
wh_dev "$L1/gone_dir"
# a white-out in the middle, a new directory above it: the dir above is all that shows
put "$L3/recreated/old" "below a white-out"
wh_dev "$L2/recreated"
put "$L1/recreated/new" "above a white-out"

# ---- white-outs: xattr form (0-byte file + trusted.overlay.whiteout, dir opaque=x)
put "$L3/wh_xattr/victim" "whited out by an xattr white-out"
put "$L3/wh_xattr/survivor" "survives"
wh_xattr "$L2/wh_xattr/victim"
put "$L2/wh_xattr/mine" "l2"

# ---- white-outs: OCI form
put "$L3/wh_oci/victim" "whited out by .wh.victim"
put "$L3/wh_oci/survivor" "survives"
put "$L2/wh_oci/mine" "l2"
wh_oci "$L2/wh_oci/victim"
put "$L3/gone_oci/a/b" "a whole dir whited out, OCI form"
wh_oci "$L1/gone_oci"
mkdir -p "$L1/wh_oci"
wh_oci "$L1/wh_oci/ghost" # hides nothing

# ---- opaque directories
put "$L3/opq_xattr/hidden" "hidden by opaque=y"
put "$L2/opq_xattr/visible" "in the opaque dir"
setfattr -n trusted.overlay.opaque -v y "$L2/opq_xattr"
put "$L1/opq_xattr/top" "above the opaque dir"
put "$L3/opq_oci/hidden" "hidden by .wh..wh..opq"
put "$L3/opq_oci/sub/deep" "hidden too"
put "$L2/opq_oci/visible" "in the opaque dir"
: >"$L2/opq_oci/.wh..wh..opq"
put "$L1/opq_oci/top" "above the opaque dir"

# ---- symlinks
mkdir -p "$L1/links" "$L3/links"
ln -s ../common/shared.txt "$L1/links/rel"
ln -s /etc/passwd "$L1/links/abs"
ln -s does/not/exist "$L1/links/dangling"
ln -s ../../../../../../../../etc/shadow "$L3/links/escape"
ln -s ../common "$L3/links/to_dir"
ln -s loop "$L3/links/loop"
ln -s "$(printf 'long/%.0s' $(seq 200))end" "$L3/links/long" # 1003 bytes
ln -s "below" "$L3/links/shadowed"
ln -s "above" "$L1/links/shadowed"

# ---- hard links (one shadowed by the layer above)
put "$L2/hard/one" "hard linked"
ln "$L2/hard/one" "$L2/hard/two"
ln "$L2/hard/one" "$L2/hard/three"
put "$L1/hard/three" "shadows one name of the link"
ln -s one "$L2/hard/sym"
ln "$L2/hard/sym" "$L2/hard/sym2"

# ---- big, odd-sized and sparse files
rand "$L3/big/r1.bin" 1048576
rand "$L2/big/r2.bin" 1048576
rand "$L1/big/r2.bin" 1048576 # shadows a different r2.bin
rand "$L1/big/odd.bin" 1048577
rand "$L2/big/small_odd.bin" 65537
truncate -s 64M "$L3/big/sparse.bin"
for off in 0 1 4095 8193; do # 4 KiB blocks at 0, 4 MiB, ~16 MiB, 32 MiB
	head -c 4096 /dev/urandom | dd of="$L3/big/sparse.bin" bs=4096 seek="$off" conv=notrunc status=none
done
head -c 100 /dev/urandom | dd of="$L3/big/sparse.bin" bs=1 seek=$((64 * 1048576 - 100)) conv=notrunc status=none

# ---- a directory of 10,000 names split across the layers; white-outs of all
# three forms in it (a few device nodes: each is a fork of mknod)
mkdir -p "$L1/many" "$L2/many" "$L3/many"
wh_many=()
for ((i = 0; i < 10000; i++)); do
	printf -v n "e%05d" "$i"
	case $((i % 3)) in
	0) printf 'l3 %d\n' "$i" >"$L3/many/$n" ;;
	1) printf 'l2 %d\n' "$i" >"$L2/many/$n" ;;
	2) printf 'l1 %d\n' "$i" >"$L1/many/$n" ;;
	esac
	if ((i % 3 == 0 && i % 210 == 0)); then
		mknod "$L2/many/$n" c 0 0
	elif ((i % 3 == 0 && i % 7 == 0)); then
		wh_many+=("$L2/many/$n")
	fi
	if ((i % 3 == 1 && i % 11 == 0)); then
		: >"$L1/many/.wh.$n"
	elif ((i % 3 != 2 && i % 10 == 5)); then
		printf "shadow %d\n" "$i" >"$L1/many/$n"
	fi
done
wh_xattr_many "${wh_many[@]}"
mkdir "$L2/many/subdir"

# ---- odd names
mkdir -p "$L1/names" "$L2/names"
put "$L1/names/with space" "space"
put "$L1/names/ünïcødé-名前.txt" "utf-8"
put "$L2/names/-dash" "dash"
put "$L2/names/back\\slash" "backslash"
put "$L2/names/star*?[x]" "glob"
put "$L2/names/quote'\"" "quotes"
put "$L2/names/$(printf 'n%.0s' $(seq 255))" "255 bytes"
put "$L1/names/$(printf 'é%.0s' $(seq 127))x" "255 bytes of UTF-8"
put "$L2/names/..dots" "dots"

# ---- modes
mkdir -p "$L1/modes" "$L3/modes/tmp"
put "$L1/modes/setuid" "4755"
chmod 4755 "$L1/modes/setuid"
put "$L1/modes/setgid" "2755"
chmod 2755 "$L1/modes/setgid"
put "$L1/modes/ro" "0444"
chmod 0444 "$L1/modes/ro"
put "$L1/modes/exec" "0755"
chmod 0755 "$L1/modes/exec"
chmod 1777 "$L3/modes/tmp"
put "$L3/modes/nobody_secret" "0600, owned by 65534"
chmod 0600 "$L3/modes/nobody_secret"
chown 65534:65534 "$L3/modes/nobody_secret"
mkdir -p "$L3/modes/private"
put "$L3/modes/private/inside" "in a 0700 dir of 65534"
chown -R 65534:65534 "$L3/modes/private"
chmod 0600 "$L3/modes/private/inside"
chmod 0700 "$L3/modes/private"
mkdir -p "$L1/modes/dirmode" "$L3/modes/dirmode" # the top-most dir's mode wins
put "$L3/modes/dirmode/f" "x"
chmod 0775 "$L1/modes/dirmode"
chmod 0751 "$L3/modes/dirmode"

# ---- special files
mkdir -p "$L2/misc" "$L3/misc"
mknod "$L3/misc/null" c 1 3
mknod "$L3/misc/loop7" b 7 7
mkfifo "$L2/misc/fifo"

# ---- the kernel's copy, OCI forms converted: .wh..wh..opq to opaque=y,
# .wh.NAME to an xattr white-out NAME (all of them by one setfattr), or to a
# 0/0 device where the kernel would not look for xattr white-outs (a layer's
# root, an opaque dir)
K=$OUT/kern
mkdir -p "$K"
cp -a "$O/l1" "$O/l2" "$O/l3" "$K/"
mapfile -d '' opq < <(find "$K" -name '.wh..wh..opq' -print0)
mapfile -d '' oci < <(find "$K" -name '.wh.*' ! -name '.wh..wh..opq' -print0)
wh_many=()
for f in "${opq[@]}"; do
	setfattr -n trusted.overlay.opaque -v y "${f%/*}"
done
[ ${#opq[@]} = 0 ] || rm -f "${opq[@]}"
[ ${#oci[@]} = 0 ] || rm -f "${oci[@]}"
for f in "${oci[@]}"; do
	d=${f%/*} n=${f##*/.wh.}
	if [[ $d == "$K"/l[0-9] ]] || [[ " ${opq[*]} " == *" $d/.wh..wh..opq "* ]]; then
		mknod "$d/$n" c 0 0
	else
		wh_many+=("$d/$n")
	fi
done
[ ${#wh_many[@]} = 0 ] || wh_xattr_many "${wh_many[@]}"
