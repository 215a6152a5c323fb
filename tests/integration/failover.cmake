# SPDX-License-Identifier: Apache-2.0
# failover.cmake: tests of one area, included from CMakeLists.txt.

# ---- issue 30: a kernel client across a gateway's failover (kvm_failover.sh,
# guest_failover.sh, lock_agent.c and failover_writer.c built static by the
# script).  Gateways A and B in network namespaces of their own on the VM
# harness's bridge, one shared storage dir, one key file, nsm-dir; a guest
# mounts the floating address, holds a lock on /shared and writes to its
# per-client union while A is SIGKILLed and the address moves to B (ip addr,
# arping -U, B started, union-nfsctl takeover): no call fails, the data is
# all there (through B and on disk), the lock is reclaimed in B's grace
# while a second guest's F_SETLKW waits, and is granted to it on unlock.
# Two boots at once, the workload (30 s) and the grace (20 s): ~1.5 min
# under TCG, ~2.5 min beside two CPU-bound processes; its watchdog stops it
# at 840 s.
add_test(NAME integration/kvm_failover
         COMMAND bash ${IT_DIR}/kvm_failover.sh $<TARGET_FILE:union-nfsd>
                 $<TARGET_FILE:union-nfsctl>)
set_tests_properties(integration/kvm_failover PROPERTIES
                     LABELS "integration;kvm" TIMEOUT 900 COST 60 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")
