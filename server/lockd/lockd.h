/* SPDX-License-Identifier: Apache-2.0 */
/* lockd.h - the lock manager (server/lockd/): NLM versions 1, 3 and 4, the
 * status monitor NSM, the lock table, the sender of callbacks and the grace
 * period; what the daemon needs of it.  nlm.h is the room's own header.
 */
#ifndef LOCKD_H
#define LOCKD_H

#include "exports.h"

struct srv_nlm;

/* ---- nlm_proc.c: the NLM program, versions 1, 3 and 4 ---- */
extern const struct rpc_program nlm1_program, nlm3_program, nlm4_program;
/* nsm.c: the NSM program, version 1 */
extern const struct rpc_program nsm1_program;

/* The lock manager of S's exports and its status monitor, whose record is
 * in STATE_DIR, or its records per address in NSM_DIR when not NULL, into
 * *OUT; ERR says why not. */
int srv_nlm_new(struct srv *s, const char *state_dir, const char *nsm_dir,
		struct srv_nlm **out, char *err, size_t errlen);
/* The HA manager's verbs (union-nfsctl takeover, giveup): take over the
 * lock state of address ADDR of ours, or give it up (nsm.c rule 10); 0 or
 * -errno, MSG saying what was done or why not. */
int srv_nlm_takeover(struct srv_nlm *n, const char *addr, char *msg, size_t len);
int srv_nlm_giveup(struct srv_nlm *n, const char *addr, char *msg, size_t len);
/* 0 when the lock records can be written; -errno with MSG naming why not. */
int srv_nlm_check(struct srv_nlm *n, char *msg, size_t len);
/* Registers NLM v4, v3, v1 on SVC's service "nlm" and NSM v1 on "nsm". */
int lockd_register(struct rpc_svc *svc, struct srv_nlm *n);
/* Sends SM_NOTIFY to the hosts the last run recorded: once the server is
 * registered, so that their reclaims find it.  N may be NULL. */
void srv_nlm_announce(struct srv_nlm *n);
void srv_nlm_free(struct srv_nlm *n);

#endif
