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
 * Exit status: 0 after SIGINT/SIGTERM, 2 for bad arguments or exports, 1 for
 * other failures (ports, threads).
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "srv.h"

#define EXIT_BAD_ARGS 2

static struct srv_loop *volatile running_loop;

static void on_stop_signal(int sig)
{
	(void)sig;
	if (running_loop)
		srv_loop_stop(running_loop);
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
		fprintf(stderr, "union-nfsd: cannot fork: %s\n", strerror(errno));
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
		srv_log(SRV_LOG_WARN, "chdir /: %s", strerror(errno));
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

static void announce(struct srv_loop *l, const struct srv_opts *o)
{
	uint16_t nfs, mount;

	srv_loop_ports(l, &nfs, &mount);
	if (o->cfg.register_rpcbind)
		srv_rpcbind_register(nfs, mount);
	for (size_t i = 0; i < o->nexports; i++)
		srv_log(SRV_LOG_INFO, "exporting %s (%zu lower layer%s%s)",
			o->exports[i].path, o->exports[i].nlower,
			o->exports[i].nlower == 1 ? "" : "s",
			o->exports[i].upperdir ? ", upper" : ", read-only");
	printf("listening nfs=%u mount=%u\n", nfs, mount);
	fflush(stdout);
}

/* Opens, serves until a stop signal, closes.  Returns the exit status. */
static int serve(const struct srv_opts *o, int ready_fd)
{
	struct srv s = {0};
	struct srv_loop *l = NULL;
	char err[1024];
	int status = EXIT_BAD_ARGS;

	if (srv_open(&s, o, err, sizeof(err)) < 0) {
		fprintf(stderr, "union-nfsd: %s\n", err);
		goto out;
	}
	status = 1;
	if (srv_loop_new(&s, &l, err, sizeof(err)) < 0) {
		fprintf(stderr, "union-nfsd: %s\n", err);
		goto out_srv;
	}
	running_loop = l;
	set_signals();
	announce(l, o);
	if (ready_fd >= 0)
		detach(ready_fd);
	status = srv_loop_run(l) < 0 ? 1 : 0;
	block_stop_signals();
	running_loop = NULL;
	srv_log(SRV_LOG_INFO, "shutting down");
	srv_rpcbind_unregister();
	srv_loop_free(l);
out_srv:
	srv_close(&s);
out:
	return status;
}

/* TEST ONLY: UNION_NFSD_TEST_HASH_BITS=N narrows the readdir cookie hash to N
 * bits so that integration tests can force cookie collisions on a real server
 * (tests/integration/test_readdir_big.c).  Never set it in production: cookies
 * then collide often and pages must carry whole groups of names. */
static void test_hooks_from_env(void)
{
	const char *bits = getenv("UNION_NFSD_TEST_HASH_BITS");

	if (bits && *bits) {
		un_readdir_test_hash_bits((unsigned)strtoul(bits, NULL, 10));
		srv_log(SRV_LOG_WARN,
			"test-only: readdir cookie hash narrowed to %s bits", bits);
	}
}

int main(int argc, char **argv)
{
	struct srv_opts o;
	char err[1024];
	int status = EXIT_BAD_ARGS, ready_fd = -1;

	switch (srv_args_parse(argc, argv, &o, err, sizeof(err))) {
	case SRV_ARGS_ERROR:
		fprintf(stderr, "union-nfsd: %s\n", err);
		goto out;
	case SRV_ARGS_EXIT:
		status = 0;
		goto out;
	case SRV_ARGS_RUN:
		break;
	}
	srv_log_level = o.log_level;
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();
	test_hooks_from_env();
	if (!o.foreground)
		ready_fd = daemon_fork();
	status = serve(&o, ready_fd);
out:
	srv_opts_free(&o);
	return status;
}
