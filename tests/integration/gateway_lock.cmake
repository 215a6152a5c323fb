# SPDX-License-Identifier: Apache-2.0
# gateway_lock.cmake: tests of one area, included from CMakeLists.txt.

# ---- issue 30: one client's union, one gateway at a time
# (test_gateway_lock.c).  Two union-nfsd, A and B, each in a network
# namespace of its own on 127.0.0.1:2049/20048 (the client's address the
# same on both, as behind a floating address), per-client uppers from one
# template in one shared dir, separate state dirs, one --key-file.  A
# serves the client's union and holds the lock WORKDIR/union-nfsd.lock; B,
# started then, refuses MNT (MNT3ERR_SERVERFAULT) and answers the union's
# handles NFS3ERR_JUKEBOX, logs a line naming the union and A's pid, and
# leaves the upper and the work dir as they were (a sentinel in work/work
# stays).  A SIGKILLed: B serves within 10 s and the lock names it; A
# restarted gets NFS3ERR_JUKEBOX until B's client unmounts and B releases
# the idle union.  A client's tree made through A (files written
# FILE_SYNC, a dir, a RENAME, a LINK) keeps its handles, fileids and bytes
# on B after A's death, on A again, and on a B started on an empty state
# dir after A's SIGTERM; with union tables off (srv->union_tables false)
# step 4 fails, A's handles naming other files on B.  Runs as root.  Until
# union-nfsd has the lock, it fails at step 2 (no lock file) and step 3 (B
# serves the union beside A), and skips steps 4 to 6.  ~4 s, the same
# beside two CPU-bound processes; ~7 s when it fails (a log line is waited
# for 5 s).
add_executable(test_gateway_lock test_gateway_lock.c)
target_link_libraries(test_gateway_lock PRIVATE it_server it_util it_netns PkgConfig::CMOCKA)
target_compile_options(test_gateway_lock PRIVATE ${IT_WARN} -fno-sanitize=alignment)
add_test(NAME integration/gateway_lock
         COMMAND test_gateway_lock $<TARGET_FILE:union-nfsd>)
set_tests_properties(integration/gateway_lock PROPERTIES
                     LABELS integration TIMEOUT 300 COST 10 SKIP_RETURN_CODE 77
                     ENVIRONMENT "LSAN_OPTIONS=suppressions=${IT_DIR}/lsan.supp")
