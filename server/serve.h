/* SPDX-License-Identifier: Apache-2.0 */
/* serve.h - the rooms wired into one server (serve.c): the exports, the
 * lock manager, the programs registered with the RPC layer, the loop's
 * services.  main.c runs it; tests and the fuzzers open the same.
 */
#ifndef SERVE_H
#define SERVE_H

#include "exports.h"

struct srv_nlm;

/* A server as main.c runs it. */
struct srv_daemon {
	struct srv srv;	     /* the exports */
	struct rpc_svc *svc; /* owned: the programs, NFS to the portmapper */
	struct srv_nlm *nlm; /* owned: the lock manager */
	/* The loop's services (the ports of --nfs-port and the others),
	 * which outlive it. */
	struct rpc_service services[4];
};

/* Opens O's exports and state, the lock manager whose record is in O's
 * state dir, and registers every program (NFS, MOUNT, NLM, NSM, the
 * portmapper) into D (zeroed by the caller).  On failure D holds nothing,
 * ERR one line, the result is a negative errno. */
int srv_daemon_open(struct srv_daemon *d, const struct srv_opts *o, char *err,
		    size_t errlen);
/* The loop for D as O configures it (ports, threads, limits), the client
 * rules deciding which connections stay; ERR as rpc_loop_new's. */
int srv_daemon_loop(struct srv_daemon *d, const struct srv_opts *o, struct rpc_loop **out,
		    char *err, size_t errlen);
/* Closes what srv_daemon_open opened (after the loop is freed). */
void srv_daemon_close(struct srv_daemon *d);

#endif
