/* SPDX-License-Identifier: Apache-2.0 */
/* reset_srv.c - the server in the test process (reset_srv.h). */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#include "reset_srv.h"
#include "serve.h"

static struct srv_daemon srv_d;
static struct rpc_loop *loop;
static pthread_t loop_thread;
static bool running;

static void *run_loop(void *arg)
{
	(void)arg;
	rpc_loop_run(loop);
	return NULL;
}

int reset_srv_start(const char *tmp, uint16_t *nfs_port, uint16_t *mount_port)
{
	static char lower[PATH_MAX], cu[PATH_MAX], cw[PATH_MAX], su[PATH_MAX],
	    sw[PATH_MAX], state[PATH_MAX];
	static char *lowers[] = {lower};
	static char clients[] = "127.0.0.0/8(rw,no_root_squash,insecure)";
	static char root[] = "/", fixed[] = "/static";
	static struct srv_export_opts eo[2];
	struct srv_opts o = {.state_dir = state, .exports = eo, .nexports = 2};
	char err[512];

	snprintf(lower, sizeof(lower), "%s/lower", tmp);
	snprintf(cu, sizeof(cu), "%s/c/%%a/upper", tmp);
	snprintf(cw, sizeof(cw), "%s/c/%%a/work", tmp);
	snprintf(su, sizeof(su), "%s/supper", tmp);
	snprintf(sw, sizeof(sw), "%s/swork", tmp);
	snprintf(state, sizeof(state), "%s/state", tmp);
	eo[0] = (struct srv_export_opts){.path = root,
					 .upperdir = cu,
					 .workdir = cw,
					 .lowerdirs = lowers,
					 .nlower = 1,
					 .clients = clients};
	eo[1] = (struct srv_export_opts){.path = fixed,
					 .upperdir = su,
					 .workdir = sw,
					 .lowerdirs = lowers,
					 .nlower = 1,
					 .clients = clients};
	signal(SIGPIPE, SIG_IGN); /* as main.c */
	o.cfg.bind_addr = "127.0.0.1";
	o.cfg.nthreads = 4;
	o.cfg.layer_index = true;
	o.cfg.client_union_idle = 60;
	if (srv_daemon_open(&srv_d, &o, err, sizeof(err)) < 0 ||
	    srv_daemon_loop(&srv_d, &o, &loop, err, sizeof(err)) < 0) {
		fprintf(stderr, "reset_srv_start: %s\n", err);
		return -1;
	}
	*nfs_port = rpc_loop_port(loop, "nfs");
	*mount_port = rpc_loop_port(loop, "mount");
	if (pthread_create(&loop_thread, NULL, run_loop, NULL) != 0)
		return -1;
	running = true;
	return 0;
}

int reset_srv_reset(const char *client, char *msg, size_t msglen)
{
	return srv_unions_reset(&srv_d.srv, client, msg, msglen);
}

void reset_srv_stop(void)
{
	if (!running)
		return;
	rpc_loop_stop(loop);
	pthread_join(loop_thread, NULL);
	rpc_loop_free(loop);
	srv_daemon_close(&srv_d);
	running = false;
}
