/* SPDX-License-Identifier: Apache-2.0 */
/* rpc_private.h - what the files of rpc/ share beyond rpc.h: the registry
 * (svc.c), the counters' entry points (count.c), and what the loop tells the
 * registry (the ports bound, the pool, the connections open), which the
 * portmapper (pmap.c), rpcbind.c and the counters read.
 */
#ifndef RPC_PRIVATE_H
#define RPC_PRIVATE_H

#include "rpc.h"

#define RPC_SVC_MAX_SERVICES 8

struct rpc_counts;

/* One registered program version (svc.c). */
struct rpc_reg {
	const struct rpc_program *prog;
	const char *service; /* whose port serves it */
	void *arg;
};

struct rpc_svc {
	struct rpc_reg regs[RPC_SVC_MAX_PROGRAMS];
	size_t nregs;
	struct rpc_drc *drc; /* owned; NULL: no duplicate request cache */
	/* Set by rpc_loop_new before it serves (svc_bound), read by any
	 * thread after: the ports bound, by service name. */
	struct rpc_port {
		const char *name;
		uint16_t port;
	} ports[RPC_SVC_MAX_SERVICES];
	size_t nports;
	const char *bind_addr; /* the loop's (pmap.c answers with it) */
	/* The counters (count.c); NULL until rpc_counts_start. */
	struct rpc_counts *counts;
	/* What the transport shows of itself: the connections open (the
	 * loop thread's count, stored for other threads to read), the pool. */
	atomic_uint conns_open;
	struct rpc_pool *_Atomic pool;
};

/* ---- count.c ---- */

/* One call, counted by the thread that runs it: begun once its procedure
 * is known, ended after its reply is encoded.  Nothing when off. */
struct rpc_ccall {
	struct rpc_cthread *t; /* NULL: not counted */
	uint64_t t0;	       /* CLOCK_MONOTONIC ns */
};
void rpc_count_begin(struct rpc_svc *svc, struct rpc_ccall *cc);
/* Ends CC: the call of registered program PI and procedure P, whose
 * results RES were encoded when ACCEPT is SUCCESS (an accept_stat
 * otherwise). */
void rpc_count_end(struct rpc_ccall *cc, size_t pi, const struct rpc_program *prog,
		   const struct rpc_proc *p, const void *res, uint32_t accept);
/* A retransmission answered from the duplicate request cache. */
void rpc_count_drc_hit(struct rpc_svc *svc);
void rpc_counts_free(struct rpc_counts *c);

#endif
