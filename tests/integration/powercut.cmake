# SPDX-License-Identifier: Apache-2.0
# powercut.cmake: tests of one area, included from CMakeLists.txt.

# ---- issue 29: power cuts at random moments under load (kvm_powercut.sh,
# guest_powercut.sh, powercut_client.c and its parts).  union-nfsd and a
# libnfs client with four workers run inside a VM whose disk holds the
# layers, the work dir and the state dir; the guest is cut off at random
# moments (qemu SIGKILLed, the disk cache=none, or the kernel crashed with
# sysrq c) and each next boot checks every acknowledged change from an ack
# log on a second disk, then drives the next load.  One test per filesystem.
# it_nfs_raw is static: the script copies the client with the shared
# libraries ldd names into the VM.
add_executable(powercut_client powercut_client.c powercut_check.c powercut_model.c
                               powercut_nfs.c)
target_link_libraries(powercut_client PRIVATE it_nfs_raw Threads::Threads)
target_compile_options(powercut_client PRIVATE ${IT_WARN} -fno-sanitize=alignment)
# 30 cuts each: 4.8 and 5.2 min side by side under ctest -j2 on the 2-core
# VM busy with other jobs (load 6), 8 min for ext4 with three CPU hogs beside
# that; the TIMEOUT leaves room above.
# Not in the sanitizer trees: the soak's worth is the number of cuts, and a
# second run there would double its cost in tests/run.sh; kvm_crash runs the
# crash recovery under ASan.  KVMP_CUTS=300 by hand is the long run.
if(NOT CMAKE_BUILD_TYPE MATCHES "^(asan|tsan)$")
  foreach(fs ext4 xfs)
    add_test(NAME integration/kvm_powercut_${fs}
             COMMAND bash ${IT_DIR}/kvm_powercut.sh ${fs} $<TARGET_FILE:union-nfsd>
                     $<TARGET_FILE:powercut_client>)
    set_tests_properties(integration/kvm_powercut_${fs} PROPERTIES
                         LABELS "integration;kvm" TIMEOUT 1500 COST 150 SKIP_RETURN_CODE 77)
  endforeach()
endif()
