#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tree_busybox.sh - list and checksum the tree under the current directory with
# busybox alone (find, stat, sha256sum, sort), one line per fact, sorted.
#
# kvm_client.sh runs it twice with the same busybox-static binary: in the guest,
# over the NFS mount, and on the host, over the kernel overlay mount; the outputs
# must be equal.  Batched (find -exec ... +): a fork per object would take minutes
# in an emulated guest.  Directories get no size: it differs between filesystems.
# Ends with a line "@@END@@ N" (N = the number of objects), so a listing cut short
# by a crash cannot pass for a complete one.
export LC_ALL=C
{
	find . -type d -exec stat -c 'obj %n %F %a' {} +
	find . ! -type d -exec stat -c 'obj %n %F %a %s' {} +
	find . \( -type c -o -type b \) -exec stat -c 'dev %n %t:%T' {} +
	find . -type l -exec stat -c 'lnk %N' {} +
	find . -type f -exec sha256sum {} + | sed 's/^\([0-9a-f]*\)  /sha \1 /'
} | sort
echo "@@END@@ $(find . | wc -l)"
