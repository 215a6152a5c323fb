/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - union-nfsd: parse the options, open the exports, serve.
 *
 * Start-up is ordered so that every problem a user can fix (a bad flag, a
 * missing layer, a port in use) is reported on the terminal as one line
 * "union-nfsd: <problem>" before the server detaches, and so that scripts can
 * read the "listening nfs=P mount=M" line from stdout.  Without --foreground
 * the process forks first, before any thread exists (the union engine starts
 * threads when the state opens, and fork keeps only the calling one); the
 * parent waits on a pipe until the child serves, then exits 0, or exits with
 * the child's status if it failed.
 *
 * SIGHUP re-reads the command line's --config file (and the flags, which
 * still override it) on a thread of its own that waits for the signal with
 * sigwait: every other thread blocks SIGHUP, so a reload never runs inside a
 * signal handler, and the new exports are swapped in by srv_reload
 * (exports/table.c says how calls in flight stay safe).  A bad new file leaves the
 * running exports alone and says why in the log.
 *
 * Under systemd (ops/notify.c) the service manager hears READY=1 where the parent
 * of a detached server would, RELOADING=1 and READY=1 around a reload, and
 * STOPPING=1 when a stop signal ends the loop.
 *
 * The control socket (ops/ctl.c, union-nfsctl) starts once the ports are
 * published and stops first; its `reload` runs the reload that SIGHUP
 * runs, one at a time (reloader.lock), and hears its one-line outcome.
 *
 * Exit status: 0 after SIGINT/SIGTERM, 2 for bad arguments or exports, 1 for
 * other failures (ports, threads).
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args.h"
#include "lockd.h"
#include "nfs.h"
#include "ops.h"
#include "serve.h"

#define EXIT_BAD_ARGS 2

static struct rpc_loop *volatile running_loop;

static void on_stop_signal(int sig)
{
	(void)sig;
	if (running_loop)
		rpc_loop_stop(running_loop);
}

static void set_signals(void)
{
	struct sigaction sa = {.sa_handler = on_stop_signal};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* After the loop ends: a second signal must not touch the loop being freed. */
static void block_stop_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
}

/* ---- SIGHUP: reload ---- */

struct reloader {
	pthread_t thread;
	struct srv *srv;
	struct srv_metrics *metrics; /* NULL: counting off */
	int argc;
	char **argv;
	atomic_bool stop;     /* set before the thread is woken to end */
	pthread_mutex_t lock; /* one reload at a time: SIGHUP's, the socket's */
	bool started;
	bool detached;		  /* the daemon lives in "/" */
	char start_cwd[PATH_MAX]; /* relative flags and --config mean this */
	const char *state_dir;	  /* the one opened at start (main's options) */
};

/* Blocks SIGHUP in this thread and in every thread started after: only the
 * reloader takes it, by sigwait. */
static void block_sighup(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* What a reload applies besides the exports: the log level (so that a
 * running server can be made to say more, and quiet again); the state dir
 * holds the node table every handle names, so it stays, with a warning. */
static void reload_settings(const struct reloader *r, const struct srv_opts *o)
{
	enum rpc_log_level was = rpc_log_level;

	if (strcmp(o->state_dir, r->state_dir) != 0)
		rpc_log(RPC_LOG_WARN,
			"reload: the state dir changes only with a restart; %s stays",
			r->state_dir);
	if (o->log_level == was)
		return;
	/* The line goes out at the more verbose of the two levels. */
	if (o->log_level > was)
		rpc_log_level = o->log_level;
	rpc_log(RPC_LOG_INFO, "reload: log level %s (was %s)",
		rpc_log_level_name(o->log_level), rpc_log_level_name(was));
	rpc_log_level = o->log_level;
}

/* Parses the command line again, config file included, and swaps in its
 * exports; anything wrong keeps the running ones.  0 with MSG saying what
 * was loaded, or -1 with MSG naming the problem.  WHO: what asked. */
static int reload(struct reloader *r, const char *who, char *msg, size_t msglen)
{
	struct srv_opts o;
	char err[1024];
	const char *status = "serving (the last reload failed: see the log)";
	int ret = -1;

	pthread_mutex_lock(&r->lock);
	srv_notify_reloading();
	rpc_log(RPC_LOG_INFO, "%s: reloading", who);
	/* Only while parsing (args.c makes every path absolute): no call uses
	 * the working directory. */
	if (chdir(r->start_cwd) < 0)
		rpc_log(RPC_LOG_WARN, "reload: cannot enter %s: %s", r->start_cwd,
			strerror(errno));
	if (srv_args_parse(r->argc, r->argv, &o, err, sizeof(err)) != SRV_ARGS_RUN ||
	    srv_reload(r->srv, &o, err, sizeof(err)) < 0) {
		rpc_log(RPC_LOG_ERR, "reload failed, the running exports stay: %s", err);
		snprintf(msg, msglen, "%s", err);
		goto out;
	}
	reload_settings(r, &o);
	if (!srv_metrics_serves(r->metrics, o.metrics))
		rpc_log(RPC_LOG_WARN, "reload: metrics changes only with a restart; "
				      "the endpoint stays as it is");
	snprintf(msg, msglen, "reloaded: %zu export%s", o.nexports,
		 o.nexports == 1 ? "" : "s");
	rpc_log(RPC_LOG_INFO, "%s", msg);
	status = "serving (reloaded)";
	ret = 0;
out:
	if (r->detached && chdir("/") < 0)
		rpc_log(RPC_LOG_WARN, "chdir /: %s", strerror(errno));
	srv_opts_free(&o);
	srv_notify_ready(status); /* serving either way */
	pthread_mutex_unlock(&r->lock);
	return ret;
}

/* The control socket's reload (struct srv_ctl_hooks). */
static int reload_by_ctl(void *arg, char *msg, size_t msglen)
{
	return reload(arg, "control socket", msg, msglen);
}

static void *reloader_main(void *arg)
{
	struct reloader *r = arg;
	char msg[1024];
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	while (sigwait(&set, &sig) == 0 && !atomic_load(&r->stop))
		reload(r, "SIGHUP", msg, sizeof(msg));
	return NULL;
}

static void reloader_start(struct reloader *r)
{
	r->started = pthread_create(&r->thread, NULL, reloader_main, r) == 0;
	if (!r->started)
		rpc_log(RPC_LOG_WARN, "no reload thread: SIGHUP does nothing");
}

static void reloader_stop(struct reloader *r)
{
	if (!r->started)
		return;
	atomic_store(&r->stop, true);
	pthread_kill(r->thread, SIGHUP);
	pthread_join(r->thread, NULL);
}

/* Serves the control socket (ctl.c) unless it is off.  False when it was
 * asked for by name and cannot be served; the default one only warns. */
static bool ctl_start(struct srv_daemon *d, struct reloader *r, const struct srv_opts *o,
		      struct srv_ctl **out)
{
	struct srv_ctl_hooks hooks = {.reload = reload_by_ctl, .arg = r};
	struct srv_ctl_view v = {
	    .srv = &d->srv, .svc = d->svc, .metrics = r->metrics, .nlm = d->nlm};
	char err[1024];

	*out = NULL;
	if (!o->control_socket ||
	    srv_ctl_start(&v, o->control_socket, &hooks, out, err, sizeof(err)) == 0)
		return true;
	if (o->control_socket_default) {
		rpc_log(RPC_LOG_WARN, "%s: union-nfsctl cannot reach this server", err);
		return true;
	}
	rpc_log_fail("%s", err);
	return false;
}

/* Each connection is an fd: allow as many as the hard limit lets us. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* Forks; the parent waits for the child's "ready" byte on a pipe and exits
 * with 0, or with the child's status when the child ends without it.  The
 * child returns the pipe's write end (to srv_detach) in a new session. */
static int daemon_fork(void)
{
	int p[2], status;
	pid_t pid;
	char b;

	if (pipe2(p, O_CLOEXEC) < 0 || (pid = fork()) < 0) {
		rpc_log_fail("cannot fork: %s", strerror(errno));
		exit(1);
	}
	if (pid == 0) {
		close(p[0]);
		setsid();
		return p[1];
	}
	close(p[1]);
	if (read(p[0], &b, 1) == 1)
		_exit(0);
	if (waitpid(pid, &status, 0) == pid && WIFEXITED(status))
		_exit(WEXITSTATUS(status));
	_exit(1);
}

/* Child side: stdio to /dev/null, then tell the parent we serve. */
static void detach(int ready_fd)
{
	int fd = open("/dev/null", O_RDWR);

	if (chdir("/") < 0)
		rpc_log(RPC_LOG_WARN, "chdir /: %s", strerror(errno));
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	if (write(ready_fd, "r", 1) != 1) {
		/* the parent is gone: nobody to tell */
	}
	close(ready_fd);
}

/* `secure` trusts a source port below 1024 to come from root; a host that
 * lets anyone bind such ports (net.ipv4.ip_unprivileged_port_start lowered)
 * breaks that, and the log must say so. */
static void warn_low_port_start(void)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_unprivileged_port_start", "r");
	unsigned start = 1024;

	if (!f)
		return;
	if (fscanf(f, "%u", &start) == 1 && start < 1024)
		rpc_log(RPC_LOG_WARN,
			"net.ipv4.ip_unprivileged_port_start is %u: on this host "
			"ports %u-1023 do not prove a root caller, so 'secure' rules "
			"are weaker for local clients",
			start, start);
	fclose(f);
}

/* Gives the ports out: by the built-in portmapper when it holds 111 (then no
 * rpcbind runs here), else by registering with the running rpcbind.  Before
 * the loop runs. */
static void publish_ports(struct srv_daemon *d, struct rpc_loop *l,
			  const struct srv_opts *o)
{
	if (rpc_loop_port(l, "portmapper"))
		rpc_log(RPC_LOG_INFO,
			"portmapper on port 111: nfs %u, mount %u, nlm %u, nsm %u",
			rpc_loop_port(l, "nfs"), rpc_loop_port(l, "mount"),
			rpc_loop_port(l, "nlm"), rpc_loop_port(l, "nsm"));
	else if (o->cfg.register_rpcbind)
		rpc_rpcbind_register(d->svc);
}

static void announce(struct rpc_loop *l, const struct srv_opts *o)
{
	uint16_t nfs = rpc_loop_port(l, "nfs"), mount = rpc_loop_port(l, "mount");

	for (size_t i = 0; i < o->nexports; i++) {
		const struct srv_export_opts *e = &o->exports[i];

		rpc_log(RPC_LOG_INFO, "exporting %s (%zu lower layer%s%s%s) to %s",
			e->path, e->nlower, e->nlower == 1 ? "" : "s",
			srv_lowers_per_client(e) ? ", some per client" : "",
			!e->upperdir		       ? ", read-only"
			: srv_is_template(e->upperdir) ? ", an upper per client"
						       : ", upper",
			e->clients ? e->clients : SRV_LOOPBACK_CLIENTS);
		if (!e->clients)
			rpc_log(RPC_LOG_WARN,
				"export %s: no clients given: serving this host only "
				"(loopback, reserved ports); --clients or clients = "
				"names who else may mount it",
				e->path);
	}
	warn_low_port_start();
	printf("listening nfs=%u mount=%u\n", nfs, mount);
	fflush(stdout);
}

/* The service manager's status line once the server serves. */
static void notify_serving(struct rpc_loop *l, const struct srv_opts *o)
{
	uint16_t nfs = rpc_loop_port(l, "nfs"), mount = rpc_loop_port(l, "mount");
	char status[128];

	snprintf(status, sizeof(status), "serving %zu export%s: nfs %u, mount %u",
		 o->nexports, o->nexports == 1 ? "" : "s", nfs, mount);
	srv_notify_ready(status);
}

/* Opens, serves until a stop signal, closes.  Returns the exit status. */
static int serve(const struct srv_opts *o, int ready_fd, int argc, char **argv)
{
	struct srv_daemon d = {0};
	struct rpc_loop *l = NULL;
	struct srv_ctl *ctl = NULL;
	struct reloader r = {.srv = &d.srv,
			     .argc = argc,
			     .argv = argv,
			     .lock = PTHREAD_MUTEX_INITIALIZER,
			     .state_dir = o->state_dir};
	char err[1024];
	int status = EXIT_BAD_ARGS;

	block_sighup(); /* before any thread exists, so all inherit it */
	if (!getcwd(r.start_cwd, sizeof(r.start_cwd)))
		strcpy(r.start_cwd, "/");
	r.detached = ready_fd >= 0;
	if (srv_daemon_open(&d, o, err, sizeof(err)) < 0) {
		rpc_log_fail("%s", err);
		goto out;
	}
	status = 1;
	/* counting serves the control socket's stats too (ops/metrics.c) */
	if ((o->metrics || o->control_socket) &&
	    srv_metrics_start(&d.srv, d.svc, o->metrics, &r.metrics, err, sizeof(err)) <
		0) {
		rpc_log_fail("%s", err);
		goto out_srv;
	}
	if (srv_daemon_loop(&d, o, &l, err, sizeof(err)) < 0) {
		rpc_log_fail("%s", err);
		goto out_srv;
	}
	running_loop = l;
	set_signals();
	publish_ports(&d, l, o);
	if (!ctl_start(&d, &r, o, &ctl)) { /* before "listening": one line */
		rpc_rpcbind_unregister();
		rpc_loop_free(l);
		goto out_srv;
	}
	announce(l, o);
	srv_nlm_announce(d.nlm);
	if (ready_fd >= 0)
		detach(ready_fd);
	notify_serving(l, o);
	reloader_start(&r);
	status = rpc_loop_run(l) < 0 ? 1 : 0;
	block_stop_signals();
	srv_notify_stopping();
	srv_ctl_stop(ctl);
	reloader_stop(&r);
	running_loop = NULL;
	rpc_log(RPC_LOG_INFO, "shutting down");
	rpc_rpcbind_unregister();
	srv_metrics_stop(r.metrics);
	rpc_loop_free(l);
out_srv:
	srv_metrics_free(r.metrics);
	srv_daemon_close(&d);
out:
	return status;
}

/* TEST ONLY: UNION_NFSD_TEST_HASH_BITS=N narrows the readdir cookie hash to N
 * bits so that integration tests can force cookie collisions on a real server
 * (tests/integration/test_readdir_big.c).  Never set it in production: cookies
 * then collide often and pages must carry whole groups of names.
 * UNION_NFSD_TEST_NO_SYNC=1 keeps the node table from ever being flushed
 * (un_state_test_no_sync), for the OS crash test
 * (tests/integration/kvm_crash.sh).  UNION_NFSD_TEST_LAZY_STABLE=1 answers
 * stable WRITEs before their data is synced (nfs3_test_lazy_stable), for the
 * power-cut soak's by-hand check that it catches a reply sent before its
 * sync (tests/integration/kvm_powercut.sh).  All are read here, before the
 * state is opened: the engine reads no environment. */
static void test_hooks_from_env(void)
{
	const char *bits = getenv("UNION_NFSD_TEST_HASH_BITS"), *nosync, *lazy;

	if (bits && *bits) {
		un_readdir_test_hash_bits((unsigned)strtoul(bits, NULL, 10));
		rpc_log(RPC_LOG_WARN,
			"test-only: readdir cookie hash narrowed to %s bits", bits);
	}
	nosync = getenv("UNION_NFSD_TEST_NO_SYNC");
	if (nosync && !strcmp(nosync, "1")) {
		un_state_test_no_sync(true);
		rpc_log(RPC_LOG_WARN,
			"test-only: the node table is never flushed to disk");
	}
	lazy = getenv("UNION_NFSD_TEST_LAZY_STABLE");
	if (lazy && !strcmp(lazy, "1")) {
		nfs3_test_lazy_stable(true);
		rpc_log(RPC_LOG_WARN,
			"test-only: stable WRITEs are answered before they sync");
	}
}

int main(int argc, char **argv)
{
	struct srv_opts o;
	char err[1024];
	int status = EXIT_BAD_ARGS, ready_fd = -1;

	/* First, so that even a bad flag reaches the journal as an error. */
	rpc_log_set_journal(rpc_log_stderr_is_journal(getenv("JOURNAL_STREAM")));
	switch (srv_args_parse(argc, argv, &o, err, sizeof(err))) {
	case SRV_ARGS_ERROR:
		rpc_log_fail("%s", err);
		goto out;
	case SRV_ARGS_EXIT:
		status = 0;
		goto out;
	case SRV_ARGS_RUN:
		break;
	}
	rpc_log_level = o.log_level;
	signal(SIGPIPE, SIG_IGN);
	un_malloc_policy();
	raise_fd_limit();
	test_hooks_from_env();
	if (!o.foreground)
		ready_fd = daemon_fork();
	status = serve(&o, ready_fd, argc, argv);
out:
	srv_opts_free(&o);
	return status;
}
