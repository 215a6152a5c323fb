# SPDX-License-Identifier: Apache-2.0
# nlm.cmake: tests of one area, included from CMakeLists.txt.

# ---- issue 19: the NLM server (test_nlm.c), under with_rpcbind.sh: a private
# network namespace and rpcbind where the server registers NLM and the test
# its own lock manager, which receives GRANTED.  Exclusive and shared locks,
# splits, blocking locks and CANCEL, FREE_ALL, version 1, a stale handle, and
# a flood of 100,000 ranges from one owner (the per-host cap, the server
# alive, its RSS bounded).  Runs as root.  ~20 s.
add_executable(test_nlm test_nlm.c)
target_link_libraries(test_nlm PRIVATE it_server xdr PkgConfig::TIRPC PkgConfig::CMOCKA Threads::Threads)
target_compile_options(test_nlm PRIVATE ${IT_WARN})
add_test(NAME integration/nlm
         COMMAND ${IT_DIR}/with_rpcbind.sh $<TARGET_FILE:test_nlm> $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/nlm PROPERTIES
                     LABELS integration TIMEOUT 300 COST 20 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")

# ---- issue 19: the built-in portmapper (test_pmap.c), under with_rpcbind.sh
# --none: a private network namespace with port 111 free.  A server with its
# defaults answers GETPORT, DUMP, GETADDR for its programs, refuses SET, leaves
# CALLIT unanswered; a second server finds 111 taken and serves.  Runs as
# root.  ~5 s.
add_executable(test_pmap test_pmap.c)
target_link_libraries(test_pmap PRIVATE it_server PkgConfig::TIRPC PkgConfig::CMOCKA)
target_compile_options(test_pmap PRIVATE ${IT_WARN})
add_test(NAME integration/pmap
         COMMAND ${IT_DIR}/with_rpcbind.sh --none $<TARGET_FILE:test_pmap> $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/pmap PROPERTIES
                     LABELS integration TIMEOUT 120 COST 5 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")
