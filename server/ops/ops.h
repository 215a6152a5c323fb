/* SPDX-License-Identifier: Apache-2.0 */
/* ops.h - the operations surface (server/ops/): the Prometheus endpoint
 * (metrics.c), the control socket of union-nfsctl (ctl.c) and what the
 * service manager is told (notify.c).  They read the counters the RPC layer
 * and the exports keep; nothing in the serving path calls into this room.
 */
#ifndef OPS_H
#define OPS_H

#include "exports.h"

/* ---- metrics.c: the counters in Prometheus' text format (--metrics) ---- */

struct srv_metrics;
/* Starts counting (the RPC layer's, the exports') and, when ADDR is not
 * NULL, serving GET /metrics at ADDR, after srv_open, before rpc_loop_new
 * starts the workers; *OUT for the rest.  ERR names the problem on
 * failure. */
int srv_metrics_start(struct srv *s, struct rpc_svc *svc, const char *addr,
		      struct srv_metrics **out, char *err, size_t errlen);
/* Stops serving (before rpc_loop_free: a scrape shows the pool); the
 * workers count on.  M may be NULL. */
void srv_metrics_stop(struct srv_metrics *m);
/* Frees M (after rpc_loop_free); NULL: nothing. */
void srv_metrics_free(struct srv_metrics *m);
/* Whether M's endpoint is the one ADDR asks for (NULL: none). */
bool srv_metrics_serves(const struct srv_metrics *m, const char *addr);
/* The whole page in the text format, NULL when out of memory; the caller
 * frees it.  Any thread. */
char *srv_metrics_text(struct srv_metrics *m, size_t *len);

/* ---- ctl.c: the control socket (union-nfsctl) ---- */

/* What the control socket asks of main.c. */
struct srv_ctl_hooks {
	/* Runs a reload as SIGHUP does: 0 with MSG saying what it did, or -1
	 * with MSG naming the problem (the running exports then stay). */
	int (*reload)(void *arg, char *msg, size_t msglen);
	void *arg;
};
/* What the control socket shows: the exports, the registry (ports), the
 * counters (NULL: counting off). */
struct srv_ctl_view {
	struct srv *srv;
	const struct rpc_svc *svc;
	struct srv_metrics *metrics;
	struct srv_nlm *nlm; /* the lock manager: takeover, giveup, check */
};
struct srv_ctl;
/* Serves V's control socket at PATH on a thread of its own (after the
 * ports are published, so that `status` shows them); *OUT for
 * srv_ctl_stop.  On failure ERR holds one line, the result is a negative
 * errno. */
int srv_ctl_start(const struct srv_ctl_view *v, const char *path,
		  const struct srv_ctl_hooks *hooks, struct srv_ctl **out, char *err,
		  size_t errlen);
/* Ends the thread and removes the socket; C may be NULL. */
void srv_ctl_stop(struct srv_ctl *c);

/* ---- notify.c: the service manager told what the server does ---- */

/* Each does nothing unless the build has libsystemd and a service manager
 * started the server (NOTIFY_SOCKET); STATUS is a line systemctl shows. */
void srv_notify_ready(const char *status); /* serving: READY=1 */
void srv_notify_reloading(void);	   /* a reload begins: RELOADING=1 */
void srv_notify_stopping(void);		   /* shutting down: STOPPING=1 */

#endif
