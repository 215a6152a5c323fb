/* SPDX-License-Identifier: Apache-2.0 */
/* netns_util.h - servers standing for several hosts behind one address:
 * each union-nfsd in a network namespace of its own (test_server_start_netns),
 * all on 127.0.0.1, for the tests of issue 30 (test_gateways,
 * test_gateway_lock).
 *
 * A namespace lives as long as a descriptor of it (an open
 * /proc/.../ns/net) or a process in it.  The test sits in a namespace of
 * its own, HOME, so that nothing it does reaches the host's network; a
 * socket stays in the namespace it was made in, so the test enters a
 * server's namespace only to make a connection, and goes home at once.
 * setns moves the calling thread: call these from the test's one thread.
 * Every function leaves the thread in HOME unless it says it failed to go
 * back, and prints a line on stderr for each failure.
 */
#ifndef NETNS_UTIL_H
#define NETNS_UTIL_H

#include <stdbool.h>

#include "nfs_raw.h"

/* Moves the calling thread into the network namespace FD. */
bool netns_enter(int fd);
/* A new network namespace with its loopback up: its descriptor (O_CLOEXEC),
 * or -1 with errno set.  The thread then goes back to HOME; with HOME -1 it
 * stays in the new namespace (how a test makes its own). */
int netns_new(int home);
/* nfs_raw_connect (127.0.0.1:PORT, program PROG version VERS) made in the
 * namespace NS; NULL when there was no connection or no way back home. */
struct rpc_context *netns_connect(int ns, int home, int port, int prog, int vers);
/* nfs_raw_mnt of PATH at MOUNT port PORT in NS: the mountstat3, or -1. */
int netns_mnt(int ns, int home, int port, const char *path, struct fh *root);
/* nfs_raw_umnt of PATH at MOUNT port PORT in NS: 0, or -1. */
int netns_umnt(int ns, int home, int port, const char *path);

#endif
