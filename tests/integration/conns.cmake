# SPDX-License-Identifier: Apache-2.0
# conns.cmake: tests of one area, included from CMakeLists.txt.

# ---- issue 17: connection limits (test_conns.c).  The server's limit on open
# files at 1,024: 5,000 idle connections from addresses no rule admits are
# closed at once and 127.0.0.1 is served; 1,500 idle admitted connections meet
# the cap, which closes the least recently used idle ones; idle connections
# close within the timeout (3 s) while a busy one stays; a per-address cap.
# Runs as root.  ~15 s.
add_executable(test_conns test_conns.c)
target_link_libraries(test_conns PRIVATE it_rawrpc PkgConfig::CMOCKA)
target_compile_options(test_conns PRIVATE ${IT_WARN})
add_test(NAME integration/conns
         COMMAND test_conns $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/conns PROPERTIES
                     LABELS integration TIMEOUT 300 COST 30 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")

# ---- issue 17: client unions released and reopened (test_client_unions.c).
# 5,000 addresses MNT, GETATTR and UMNT a per-client export with the server's
# limit on open files at 1,024; a released union's handles keep their fileids;
# a handle of another client's union is refused whether it is open or not; a
# failed MNT leaves no dirs; an unmounted client's union goes after its idle
# time.  Runs as root.  ~40 s, several minutes in the ASan tree on a busy
# machine.
add_executable(test_client_unions test_client_unions.c)
target_link_libraries(test_client_unions PRIVATE it_rawrpc PkgConfig::CMOCKA Threads::Threads)
target_compile_options(test_client_unions PRIVATE ${IT_WARN})
add_test(NAME integration/client_unions
         COMMAND test_client_unions $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/client_unions PROPERTIES
                     LABELS integration TIMEOUT 900 COST 50 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")

# ---- issue 29: the memory of client unions (test_client_union_churn.c).
# 20,000 addresses MNT, call and UMNT a per-client export with the server's
# limit on open files at 20,000: every call served, the cap reached, the
# server's anonymous memory growing by less than 5% over the last 10,000
# (printed, not checked, in the ASan tree); the unions released for
# idleness give their memory back; --client-unions-memory sets the cap.
# Runs as root.  ~1 min, ~2 min in the ASan tree, on a busy machine.
add_executable(test_client_union_churn test_client_union_churn.c)
target_link_libraries(test_client_union_churn PRIVATE it_rawrpc PkgConfig::CMOCKA
                      PkgConfig::JANSSON Threads::Threads)
target_compile_options(test_client_union_churn PRIVATE ${IT_WARN})
add_test(NAME integration/client_union_churn
         COMMAND test_client_union_churn $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/client_union_churn PROPERTIES
                     LABELS integration TIMEOUT 600 COST 60 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")
