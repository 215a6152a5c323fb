/* SPDX-License-Identifier: Apache-2.0 */
/* start_server.c - run union-nfsd for a test (see start_server.h). */
#define _GNU_SOURCE
#include "start_server.h"
#include "it_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* True unless ARGS say who the clients are (see start_server.h). */
static bool wants_test_clients(const char *const *args)
{
	for (size_t i = 0; args && args[i]; i++)
		if (!strncmp(args[i], "--clients", 9) || !strncmp(args[i], "--config", 8))
			return false;
	return true;
}

/* How a server is started: the flags start_server.c adds. */
struct spawn_how {
	bool test_clients;
	unsigned long nofile;
	/* The built-in portmapper left on (its default), stderr to
	 * STATE_DIR/stderr; else --no-portmapper: the tests run in parallel in
	 * one network namespace, and none may take port 111 there. */
	bool portmapper;
	/* stderr (the log) to STATE_DIR/stderr, with or without the portmapper */
	bool log_file;
	/* the server runs in the network namespace of NETNS_FD */
	bool netns;
	int netns_fd;
};

/* In the child: stdout to OUT_PATH, and stderr to STATE_DIR/stderr when HOW
 * says. */
static bool redirect(const char *out_path, const char *state_dir,
		     const struct spawn_how *how)
{
	char err_path[4096];
	int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
		return false;
	close(fd);
	if (!how->portmapper && !how->log_file)
		return true;
	snprintf(err_path, sizeof(err_path), "%s/stderr", state_dir);
	fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
		return false;
	close(fd);
	return true;
}

static pid_t spawn(const char *bin, const char *state_dir, const char *const *args,
		   const struct spawn_how *how, const char *out_path)
{
	struct rlimit rl = {how->nofile, how->nofile};
	size_t n = 0, k = 7;
	while (args && args[n])
		n++;
	char **argv = calloc(n + 10, sizeof(*argv));
	char *state_arg = NULL;
	pid_t pid;
	if (!argv || asprintf(&state_arg, "--state-dir=%s", state_dir) < 0) {
		free(argv);
		return -1;
	}
	argv[0] = (char *)bin;
	argv[1] = "--nfs-port=0";
	argv[2] = "--mount-port=0";
	argv[3] = "--bind=127.0.0.1";
	argv[4] = state_arg;
	argv[5] = "--foreground";
	argv[6] = "--no-rpcbind"; /* never touch the host's rpcbind */
	if (!how->portmapper)
		argv[k++] = "--no-portmapper";
	if (how->test_clients && wants_test_clients(args))
		argv[k++] = "--clients=" TEST_SERVER_CLIENTS;
	for (size_t i = 0; i < n; i++)
		argv[k + i] = (char *)args[i];
	pid = fork();
	if (pid == 0) {
		/* the server must not outlive a test that crashed or was killed (it
		 * would also hold the test's stderr, and ctest waits for that) */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (how->nofile && setrlimit(RLIMIT_NOFILE, &rl) < 0)
			_exit(125);
		if (how->netns && setns(how->netns_fd, CLONE_NEWNET) < 0)
			_exit(124);
		if (!redirect(out_path, state_dir, how))
			_exit(126);
		execv(bin, argv);
		fprintf(stderr, "start_server: exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	free(state_arg);
	free(argv);
	return pid;
}

/* Looks for the "listening" line in the server's stdout file. */
static int read_ports(const char *out_path, struct test_server *s)
{
	char line[256];
	int rc = -1;
	FILE *f = fopen(out_path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "listening nfs=%d mount=%d", &s->nfs_port,
			   &s->mount_port) == 2) {
			rc = 0;
			break;
		}
	}
	fclose(f);
	return rc;
}

int test_server_start(const char *bin, const char *state_dir, const char *const *args,
		      struct test_server *s)
{
	return test_server_start_opts(bin, state_dir, args, true, s);
}

int test_server_start_opts(const char *bin, const char *state_dir,
			   const char *const *args, bool test_clients,
			   struct test_server *s)
{
	return test_server_start_nofile(bin, state_dir, args, test_clients, 0, s);
}

static int start(const char *bin, const char *state_dir, const char *const *args,
		 const struct spawn_how *how, struct test_server *s)
{
	char *out_path = NULL;
	int rc = -1;
	memset(s, 0, sizeof(*s));
	s->pid = -1;
	mkdir(state_dir, 0700);
	if (asprintf(&out_path, "%s/stdout", state_dir) < 0)
		return -1;
	unlink(out_path); /* the line of an earlier run must not be read as ours */
	s->pid = spawn(bin, state_dir, args, how, out_path);
	if (s->pid < 0)
		goto out;
	for (int i = 0; i < START_WAIT_S * 20; i++) {
		int st;
		if (read_ports(out_path, s) == 0) {
			rc = 0;
			goto out;
		}
		if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
			fprintf(
			    stderr,
			    "start_server: %s exited (status 0x%x) before listening\n",
			    bin, st);
			s->pid = -1;
			goto out;
		}
		it_sleep_ms(50);
	}
	fprintf(stderr,
		"start_server: no 'listening nfs=P mount=M' line from %s in %d s\n", bin,
		START_WAIT_S);
	test_server_stop(s);
out:
	free(out_path);
	return rc;
}

int test_server_start_nofile(const char *bin, const char *state_dir,
			     const char *const *args, bool test_clients,
			     unsigned long nofile, struct test_server *s)
{
	const struct spawn_how how = {.test_clients = test_clients, .nofile = nofile};
	return start(bin, state_dir, args, &how, s);
}

int test_server_start_portmapper(const char *bin, const char *state_dir,
				 const char *const *args, struct test_server *s)
{
	const struct spawn_how how = {.test_clients = true, .portmapper = true};
	return start(bin, state_dir, args, &how, s);
}

int test_server_start_logged(const char *bin, const char *state_dir,
			     const char *const *args, struct test_server *s)
{
	const struct spawn_how how = {.test_clients = true, .log_file = true};
	return start(bin, state_dir, args, &how, s);
}

int test_server_start_netns(const char *bin, const char *state_dir,
			    const char *const *args, int netns_fd, struct test_server *s)
{
	const struct spawn_how how = {
	    .test_clients = true, .log_file = true, .netns = true, .netns_fd = netns_fd};
	return start(bin, state_dir, args, &how, s);
}

void test_server_print_log(const char *state_dir, const char *name)
{
	char p[4096], line[1024];
	FILE *f;

	snprintf(p, sizeof(p), "%s/stderr", state_dir);
	f = fopen(p, "r");
	if (!f)
		return;
	fprintf(stderr, "---- %s's log (%s):\n", name, p);
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "  %s", line);
	fprintf(stderr, "----\n");
	fclose(f);
}

int test_server_stop(struct test_server *s)
{
	int st = -1;
	if (s->pid <= 0)
		return -1;
	kill(s->pid, SIGTERM);
	for (int i = 0; i < STOP_WAIT_S * 20; i++) {
		if (waitpid(s->pid, &st, WNOHANG) == s->pid)
			goto out;
		it_sleep_ms(50);
	}
	fprintf(stderr, "start_server: pid %d ignored SIGTERM for %d s: SIGKILL\n",
		s->pid, STOP_WAIT_S);
	kill(s->pid, SIGKILL);
	waitpid(s->pid, &st, 0);
out:
	s->pid = -1;
	return st;
}

bool test_server_alive(const struct test_server *s)
{
	int st;
	if (s->pid <= 0)
		return false;
	return waitpid(s->pid, &st, WNOHANG) == 0;
}

unsigned test_server_fds(const struct test_server *s)
{
	char path[64];
	unsigned n = 0;
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)s->pid);
	d = opendir(path);
	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

bool test_server_holds(const struct test_server *s, const char *file)
{
	char dir[32], path[320], link[4096];
	struct dirent *e;
	bool found = false;
	ssize_t n;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)s->pid);
	d = opendir(dir);
	while (d && !found && (e = readdir(d)) != NULL) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = '\0';
			found = strcmp(link, file) == 0;
		}
	}
	if (d)
		closedir(d);
	return found;
}

static int remove_entry(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int test_tree_remove(const char *dir)
{
	/* children first (FTW_DEPTH), links as links (FTW_PHYS) */
	return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void test_tmp_remove(const char *dir, const char *prefix)
{
	if (!dir[0] || strncmp(dir, prefix, strlen(prefix)) != 0)
		return;
	if (test_tree_remove(dir) != 0)
		fprintf(stderr, "could not remove %s: %s\n", dir, strerror(errno));
}

void test_union_init(struct test_union *u, const char *tmp, const char *lowers)
{
	char list[PATH_MAX], *save = NULL;
	const char *sep = "";
	size_t len = (size_t)snprintf(u->lower, sizeof(u->lower), "--lowerdir=");

	snprintf(list, sizeof(list), "%s", lowers);
	for (char *t = strtok_r(list, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
		len += (size_t)snprintf(u->lower + len, sizeof(u->lower) - len, "%s%s/%s",
					sep, tmp, t);
		sep = ":";
	}
	snprintf(u->upper, sizeof(u->upper), "--upperdir=%s/upper", tmp);
	snprintf(u->work, sizeof(u->work), "--workdir=%s/work", tmp);
	snprintf(u->state, sizeof(u->state), "%s/state", tmp);
	u->args[0] = u->lower;
	u->args[1] = u->upper;
	u->args[2] = u->work;
	u->args[3] = NULL;
}
