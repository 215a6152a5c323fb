/* SPDX-License-Identifier: Apache-2.0 */
/* reset_srv.h - union-nfsd's server run inside the test process, so that a
 * test can call srv_unions_reset directly (the function union-nfsctl's
 * `reset CLIENT` runs).  Kept apart from the test: the server's RPC types
 * and libnfs' never meet in one translation unit.
 *
 * Two exports over TMP/lower: "/" with a per-client upper TMP/c/%a/upper
 * (work TMP/c/%a/work), and "/static" with the fixed upper TMP/supper
 * (work TMP/swork); loopback clients rw, no_root_squash, insecure.
 */
#ifndef RESET_SRV_H
#define RESET_SRV_H

#include <stddef.h>
#include <stdint.h>

/* Opens and starts serving on loopback, ephemeral ports.  0 or -1 (with a
 * line on stderr). */
int reset_srv_start(const char *tmp, uint16_t *nfs_port, uint16_t *mount_port);
/* srv_unions_reset of the running server. */
int reset_srv_reset(const char *client, char *msg, size_t msglen);
void reset_srv_stop(void);

#endif
