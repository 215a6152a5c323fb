/* SPDX-License-Identifier: Apache-2.0 */
/* test_nfs3.h - the fixture of the NFSv3 handler tests (test_srv_nfs3.c,
 * test_srv_nfs3_write.c): a server with one export "/" over two lower layers
 * (and, if writable, an upper layer and its work dir) in a temp dir, the
 * export's root handle, and a request arena per test.
 *
 * The bodies live in fixture_nfs3.c (library test_fixtures_srv).  Every test
 * program is one process, so the fixture's state is one set of globals.  The
 * test file builds its layers (make_layers, given to nfs3_fx_open) and names
 * its cmocka group setup, which calls nfs3_fx_open.
 */
#ifndef TEST_NFS3_H
#define TEST_NFS3_H

#define _GNU_SOURCE
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "nfs.h"
#include "test_fs.h"

/* The temp dir and the layer dirs in it; upper and work exist only if
 * the fixture is writable. */
extern char tmp_root[64], upper[128], work[128], lower0[128], lower1[128], state_dir[128];
extern struct srv srv;
extern struct rpc_arena *arena; /* the running test's (test_setup) */
extern uint8_t root_fh_bytes[UN_FH_MAX];
extern nfs_fh3 root_fh; /* the export's root, over root_fh_bytes */

/* Makes directory NM in DIR with exactly MODE (umask aside). */
void put_dir(const char *dir, const char *nm, mode_t mode);

/* Makes TMP_ROOT (/tmp/PREFIX.XXXXXX) and the layer dirs in it (upper and work
 * only if WRITABLE; their paths are set either way), lets make_layers fill the
 * lower ones, and opens the server with umask 022 (what the tests' modes
 * assume).  0, or -1 with a line on stderr; group_teardown cleans up either
 * way. */
int nfs3_fx_open(const char *prefix, bool writable, void (*make_layers)(void));
int group_teardown(void **state);

/* A fresh request arena per test. */
int test_setup(void **state);
int test_teardown(void **state);
/* A cmocka test run between test_setup and test_teardown. */
#define NFS3_TEST(f) cmocka_unit_test_setup_teardown(f, test_setup, test_teardown)

/* A call as the dispatcher makes it: the RPC layer's request and the
 * server's, which test_req_tie points at each other where the struct
 * stands (it may have been copied). */
struct test_req {
	struct rpc_req rpc;
	struct srv_req srv;
};
/* A request of the AUTH_SYS caller UID:GID over TCP, with the test's arena. */
struct test_req req_as(uid_t uid, gid_t gid);
/* Ties T's two requests; returns the RPC layer's, as handlers take it. */
struct rpc_req *test_req_tie(struct test_req *t);
/* What the dispatcher does before P's handler (T tied): the program's
 * admission check of the handle P names in ARGS; false when it refused the
 * call, RES then holding the refusal. */
bool test_req_admit(struct test_req *t, const struct rpc_proc *p, void *args, void *res);

#endif
