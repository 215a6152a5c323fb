# SPDX-License-Identifier: Apache-2.0
# gateways.cmake: tests of one area, included from CMakeLists.txt.

# ---- issue 30: three gateways, one set of handles (test_gateways.c).  Three
# union-nfsd in network namespaces of their own, all on 127.0.0.1:2049, each
# with its own copy of three lower layers (~10,700 objects), its own state
# dir and the same --key-file: every handle, fileid, READDIR(PLUS) cookie and
# verifier of gateway A works on B and C (GETATTR, pages resumed from A's
# cookies, their own walks), also after each restarts, after C rebuilds its
# layer indexes and after A loses its whole state dir.  Runs as root.  Until
# union-nfsd has key-file, gateway A refuses to start and the test fails;
# GATEWAYS_NO_KEY_FILE=1 runs it without the option (the checks then fail).
# ~8 s, ~15 s in the ASan tree, ~30 s there beside two CPU-bound processes.
add_executable(test_gateways test_gateways.c)
target_link_libraries(test_gateways PRIVATE it_server it_util it_netns PkgConfig::CMOCKA)
target_compile_options(test_gateways PRIVATE ${IT_WARN} -fno-sanitize=alignment)
add_test(NAME integration/gateways
         COMMAND test_gateways $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/gateways PROPERTIES
                     LABELS integration TIMEOUT 300 COST 20 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")
