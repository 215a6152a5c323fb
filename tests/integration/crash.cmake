# SPDX-License-Identifier: Apache-2.0
# crash.cmake: tests of one area, included from CMakeLists.txt.

# ---- issue 4: durability against an OS crash (kvm_crash.sh, guest_crash.sh,
# crash_client.c).  union-nfsd and a libnfs client run inside a VM on an ext4
# disk image; the kernel is crashed (sysrq c) after COMMIT, FILE_SYNC, a lookup
# left alone for 1.5 s, and after CREATE/MKDIR/SYMLINK/LINK/RENAME/REMOVE/RMDIR/
# SETATTR replies; the next boot checks every saved handle, fileid and the data.
# Three boots, 20-40 s under TCG (plus prepare.sh once).  KVMC_NOSYNC=1 by hand
# shows it fail.  kvm_crash_nojournal: the same on ext4 without a journal,
# e2fsck -fy after each crash (KVMC_NOJOURNAL=1): only what was fsynced itself
# survives there (union/dir.c, step 7).
# it_nfs_raw is static: kvm_crash.sh copies crash_client with the shared
# libraries ldd names into the VM, and a static library needs no copying.
add_executable(crash_client crash_client.c)
target_link_libraries(crash_client PRIVATE it_nfs_raw)
target_compile_options(crash_client PRIVATE ${IT_WARN} -fno-sanitize=alignment)
add_test(NAME integration/kvm_crash
         COMMAND bash ${IT_DIR}/kvm_crash.sh $<TARGET_FILE:union-nfsd>
                 $<TARGET_FILE:crash_client>)
set_tests_properties(integration/kvm_crash PROPERTIES
                     LABELS "integration;kvm" TIMEOUT 600 SKIP_RETURN_CODE 77)
add_test(NAME integration/kvm_crash_nojournal
         COMMAND bash ${IT_DIR}/kvm_crash.sh $<TARGET_FILE:union-nfsd>
                 $<TARGET_FILE:crash_client>)
set_tests_properties(integration/kvm_crash_nojournal PROPERTIES
                     LABELS "integration;kvm" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT KVMC_NOJOURNAL=1)
