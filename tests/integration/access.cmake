# SPDX-License-Identifier: Apache-2.0
# access.cmake: tests of one area, included from CMakeLists.txt.

# ---- issue 6: exports and client rules (test_access.c), through MNT and NFS
# calls made with libtirpc on sockets bound to chosen loopback addresses
# (127.0.0.2...) and source ports: the loopback-only default, an access matrix
# (allowed/denied, ro/rw, root_squash/all_squash/no_root_squash, anonuid,
# secure), the owner's ACCESS bits on its 0277/0177/0077 file while READ and
# WRITE still work, per-client upper layers (two clients, one path, a restart),
# a per-client lower layer (own hostname, shared fallback, ACCES, restart), SIGHUP
# with a changed, a bad and a missing-layer file while a client READs in a
# loop, and config errors naming FILE:LINE.  Runs as root.  ~5 s.
add_executable(test_access test_access.c)
target_link_libraries(test_access PRIVATE it_server xdr PkgConfig::TIRPC PkgConfig::CMOCKA
                      Threads::Threads)
target_compile_options(test_access PRIVATE ${IT_WARN})
add_test(NAME integration/access
         COMMAND test_access $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/access PROPERTIES
                     LABELS integration TIMEOUT 300 COST 40 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")

# ---- issue 16: per-client uppers seen by two Linux kernel clients at once
# (kvm_two_clients.sh, guest_two_clients.sh, tests/vm/rawfh.c built static by
# the script).  Two guests of tests/vm on one bridge write one path of an
# export with `%a` uppers and each reads back its own data; a handle of one
# guest's union, passed through the host, is refused for the other with
# NFS3ERR_ACCES.  ~20 s under TCG.
add_test(NAME integration/kvm_two_clients
         COMMAND bash ${IT_DIR}/kvm_two_clients.sh $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/kvm_two_clients PROPERTIES
                     LABELS "integration;kvm" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")
