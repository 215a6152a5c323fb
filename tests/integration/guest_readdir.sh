# SPDX-License-Identifier: Apache-2.0
# guest_readdir.sh - run by the guest of kvm_readdir.sh (busybox sh, cwd = the
# mount), and by the host on the overlay mount for the expected counts.
# Prints "ls N", "ls_a N", "find N"; the guest also runs readdir_walk.
echo "ls $(ls big | wc -l)"
echo "ls_a $(ls -a big | wc -l)"
echo "find $(find . | wc -l)"
if [ -n "${VM_FILES:-}" ]; then
	"$VM_FILES/readdir_walk" big
fi
