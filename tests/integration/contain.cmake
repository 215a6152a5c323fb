# SPDX-License-Identifier: Apache-2.0
# contain.cmake: tests of one area, included from CMakeLists.txt.

# ---- issue 6: containment and identities (test_contain.c): symlinks out of the
# layer are returned, never followed; ".." at the root; malformed names (NUL
# inside through hand-made calls); another server's handles; uid 1000 against
# root's file, its own new files, supplementary groups; root squash; a snapshot
# of a directory outside the export unchanged.  Runs as root (it makes files of
# other owners).  A few seconds.
add_executable(test_contain test_contain.c)
target_link_libraries(test_contain PRIVATE it_rawrpc PkgConfig::NFS PkgConfig::CMOCKA)
target_compile_options(test_contain PRIVATE ${IT_WARN} -fno-sanitize=alignment)
add_test(NAME integration/contain
         COMMAND test_contain $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/contain PROPERTIES
  LABELS integration TIMEOUT 300 COST 30
  ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")

# ---- issue 6: the duplicate request cache (test_drc.c): a CREATE and a REMOVE
# retransmitted with one xid over UDP and TCP get the first reply again (same
# bytes, NFS3_OK) and run once; the same CREATE under a new xid gets
# NFS3ERR_EXIST; a WRITE retransmitted after a later WRITE to its range (1 MiB
# over TCP, 16 KiB over UDP) gets its first reply and leaves the later data.
# A second or two.
add_executable(test_drc test_drc.c)
target_link_libraries(test_drc PRIVATE it_rawrpc PkgConfig::CMOCKA)
target_compile_options(test_drc PRIVATE ${IT_WARN})
add_test(NAME integration/drc
         COMMAND test_drc $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/drc PROPERTIES
  LABELS integration TIMEOUT 120
  ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")
