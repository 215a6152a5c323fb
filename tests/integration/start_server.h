/* SPDX-License-Identifier: Apache-2.0 */
/* start_server.h - run union-nfsd for a test, on ports it picks itself.
 *
 * test_server_start() starts BIN --nfs-port=0 --mount-port=0 --bind=127.0.0.1
 * --state-dir=STATE --foreground ARGS..., waits (START_WAIT_S at most) for its
 * line "listening nfs=P mount=M" and fills in the pid and both ports.  The server's
 * stdout goes to STATE/stdout (a pipe could fill up or break), its stderr is the
 * test's.  test_server_stop() sends SIGTERM, waits STOP_WAIT_S, then SIGKILLs,
 * and returns how the process ended.  Both waits are long: on a busy machine
 * an ASan build takes many seconds to start; they end as soon as it is up.
 *
 * Unless ARGS hold --clients or --config, the server is also given
 * --clients=TEST_SERVER_CLIENTS: loopback callers as themselves from any port,
 * since tests send hand-made calls from unreserved ports (the built-in default
 * admits only reserved ones; tests/integration/test_access.c checks it).
 */
#ifndef START_SERVER_H
#define START_SERVER_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#define START_WAIT_S 60
#define STOP_WAIT_S  30

#define TEST_SERVER_CLIENTS "127.0.0.0/8(rw,no_root_squash,insecure)"

struct test_server {
	pid_t pid;
	int nfs_port;
	int mount_port;
};

/* args: NULL-terminated extra arguments.  Returns 0, or -1 with a message on
 * stderr (the process, if any, is stopped). */
int test_server_start(const char *bin, const char *state_dir, const char *const *args,
		      struct test_server *s);
/* The same, with TEST_CLIENTS false: ARGS exactly, so that the server's own
 * default (or what ARGS say) decides who its clients are. */
int test_server_start_opts(const char *bin, const char *state_dir,
			   const char *const *args, bool test_clients,
			   struct test_server *s);
/* The same, the server's limit on open files (soft and hard, so that the
 * server cannot raise it) set to NOFILE; 0: inherited. */
int test_server_start_nofile(const char *bin, const char *state_dir,
			     const char *const *args, bool test_clients,
			     unsigned long nofile, struct test_server *s);
/* The same with the built-in portmapper left on (every other start passes
 * --no-portmapper: port 111 of the shared network namespace is no test's),
 * its stderr in STATE_DIR/stderr; for a private network namespace only. */
int test_server_start_portmapper(const char *bin, const char *state_dir,
				 const char *const *args, struct test_server *s);
/* test_server_start with the server's stderr (its log) in STATE_DIR/stderr,
 * for a test that waits for a line of it. */
int test_server_start_logged(const char *bin, const char *state_dir,
			     const char *const *args, struct test_server *s);
/* test_server_start_logged in the network namespace NETNS_FD (an open
 * /proc/PID/ns/net): the server's sockets are there, and a client reaches it
 * only through a socket made in that namespace (setns on the thread that
 * makes it). */
int test_server_start_netns(const char *bin, const char *state_dir,
			    const char *const *args, int netns_fd, struct test_server *s);
/* Prints the log a logged start keeps (STATE_DIR/stderr) to the test's
 * stderr, each line indented, under the heading "---- NAME's log (PATH):";
 * nothing when there is no such file. */
void test_server_print_log(const char *state_dir, const char *name);
/* Returns the wait status (as waitpid), or -1 if there was no process. */
int test_server_stop(struct test_server *s);
bool test_server_alive(const struct test_server *s);
/* How many descriptors the server holds (0 when it cannot be read). */
unsigned test_server_fds(const struct test_server *s);
/* True when one of the server's descriptors is FILE (an absolute path, as
 * /proc/PID/fd shows it). */
bool test_server_holds(const struct test_server *s, const char *file);
/* A union under a test's temp dir, as server options: --lowerdir= the
 * ':'-separated LOWERS (names below the temp dir, top first), --upperdir=
 * TMP/upper and --workdir=TMP/work in ARGS (NULL-terminated), and the state
 * dir TMP/state.  ARGS points into the struct: keep it where it is. */
struct test_union {
	char state[PATH_MAX + 16];
	char lower[2 * PATH_MAX + 32], upper[PATH_MAX + 32], work[PATH_MAX + 32];
	const char *args[4];
};
void test_union_init(struct test_union *u, const char *tmp, const char *lowers);
/* Removes DIR and everything below it, never following a symlink; stops at
 * the first entry it cannot remove.  Returns 0, or -1 (nftw's result). */
int test_tree_remove(const char *dir);
/* test_tree_remove of a test's temp dir DIR, only when DIR starts with
 * PREFIX (a guard against removing anything else); a failure is printed. */
void test_tmp_remove(const char *dir, const char *prefix);

#endif
