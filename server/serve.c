/* SPDX-License-Identifier: Apache-2.0 */
/* serve.c - the rooms wired into one server: the exports opened, the lock
 * manager made, every program registered with the RPC layer on its
 * service, and the loop configured with the exports' admission hook.  The
 * RPC layer learns of the programs only here (docs/architecture.md).
 *
 * The order of registration is the order of look-up: NFS first, as most
 * calls are NFS calls.
 */
#include <string.h>

#include "lockd.h"
#include "nfs.h"
#include "serve.h"

int srv_daemon_open(struct srv_daemon *d, const struct srv_opts *o, char *err,
		    size_t errlen)
{
	int rc = srv_open(&d->srv, o, err, errlen);

	if (rc < 0)
		return rc;
	/* After the exports: arguments refused take no new NSM state. */
	rc = srv_nlm_new(&d->srv, o->state_dir, o->nsm_dir, &d->nlm, err, errlen);
	if (rc < 0)
		goto fail;
	rc = rpc_svc_new(RPC_DRC_CAPACITY, &d->svc);
	if (rc == 0)
		rc = nfs_register(d->svc, &d->srv);
	if (rc == 0)
		rc = lockd_register(d->svc, d->nlm);
	if (rc == 0)
		rc = rpc_pmap_register(d->svc);
	if (rc < 0) {
		snprintf(err, errlen, "programs: %s", strerror(-rc));
		goto fail;
	}
	return 0;
fail:
	srv_daemon_close(d);
	return rc;
}

int srv_daemon_loop(struct srv_daemon *d, const struct srv_opts *o, struct rpc_loop **out,
		    char *err, size_t errlen)
{
	const struct srv_config *c = &o->cfg;
	struct rpc_loop_config lc = {
	    .bind_addr = c->bind_addr,
	    .nthreads = c->nthreads,
	    .services = d->services,
	    .nservices = sizeof(d->services) / sizeof(d->services[0]),
	    .portmapper = c->portmapper,
	    .max_conns = c->max_conns,
	    .max_conns_per_addr = c->max_conns_per_addr,
	    .idle_timeout = c->idle_timeout,
	    .fds_kept_divisor = SRV_UNIONS_FDS_PART,
	    .admit_conn = srv_access_admits_conn,
	    .admit_arg = &d->srv,
	};

	d->services[0] = (struct rpc_service){"nfs", c->nfs_port};
	d->services[1] = (struct rpc_service){"mount", c->mount_port};
	d->services[2] = (struct rpc_service){"nlm", c->nlm_port};
	d->services[3] = (struct rpc_service){"nsm", c->nsm_port};
	return rpc_loop_new(d->svc, &lc, out, err, errlen);
}

void srv_daemon_close(struct srv_daemon *d)
{
	rpc_svc_free(d->svc);
	srv_nlm_free(d->nlm);
	srv_close(&d->srv);
	d->svc = NULL;
	d->nlm = NULL;
}
