# SPDX-License-Identifier: Apache-2.0
# ---- issue 17: a log that a peer cannot flood (test_log_flood.c).  10,000
# oversized record marks, each on a new TCP connection, then MNT and UMNT
# refusals and UDP junk from one peer: each kind of line stays within the
# log limit's burst per window, the counts of the lines left out add up, and
# the server still answers NULL and GETATTR.  ~15 s (it waits for a window
# of the limit to turn).
add_executable(test_log_flood test_log_flood.c)
target_link_libraries(test_log_flood PRIVATE it_rawrpc PkgConfig::CMOCKA)
target_compile_options(test_log_flood PRIVATE ${IT_WARN})
add_test(NAME integration/log_flood
         COMMAND test_log_flood $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/log_flood PROPERTIES
  LABELS integration TIMEOUT 300 COST 20 SKIP_RETURN_CODE 77
  ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")
