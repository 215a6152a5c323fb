#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# list_tree.sh DIR... - one line per fact about every object under each DIR, sorted.
#
# kvm_write.sh runs it twice with the same Debian userland (the debootstrap root
# that is the union's bottom layer): in the guest, over its NFS root served by
# union-nfsd, and on the host in a chroot into a kernel overlay mount of the same
# layers and the upper layer union-nfsd wrote.  The two listings must be equal.
#
# Facts: type, mode, owner, link count and mtime (to the nanosecond: NFSv3 carries
# it) of every object; sizes of non-directories; symlink targets; device numbers;
# an md5 of each file's data.  Directory mtimes are compared too: the guest's
# cached attributes of a directory come from the wcc_data of its last change, so
# they show whether the server's post-op attributes told the truth.  Left out:
# atime (reads change it) and directory sizes (they differ between filesystems).
# Batched (find -printf, one md5sum for all files): a fork per object would take
# minutes in an emulated guest.  Names must not contain newlines.
# Ends with "@@END@@ N" (N = the number of objects), so a listing cut short cannot
# pass for a complete one.
set -eu
export LC_ALL=C
n=0
for top in "$@"; do
	cd "$top"
	{
		find . -type d -printf "obj $top/%P d %m %U:%G %n %T@\n"
		find . -type f -printf "obj $top/%P f %m %U:%G %s %n %T@\n"
		find . -type l -printf "obj $top/%P l %U:%G %n %T@ -> %l\n"
		find . \( -type p -o -type s \) -printf "obj $top/%P %y %m %U:%G %n %T@\n"
		find . \( -type b -o -type c \) -exec stat -c "obj %n %F %a %u:%g %t:%T" {} + |
			sed "s|^obj \./|obj $top/|"
		find . -type f -print0 | xargs -0r md5sum | sed "s|^\([0-9a-f]*\)  \./|md5 \1 $top/|"
	} | sort
	n=$((n + $(find . | wc -l)))
done
echo "@@END@@ $n"
