/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_cred.c - the caller's identity on a worker thread (server/cred.c).
 *
 * Needs root (it switches to other ids); skipped otherwise.  Checks that
 * srv_ident_enter gives the calling thread, and only it, the caller's fsuid,
 * fsgid and groups; that the kernel then holds it to them; that
 * srv_ident_server and srv_ident_leave restore; and that srv_call_handler
 * runs a handler with the caller's identity exactly when its program asks;
 * and that the thread's identity record (un_ident_now), which every switch
 * reads instead of the kernel, says what the kernel says after any sequence
 * of switches, failed ones included, in new threads and forked children.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "exports.h"
#include "un_private.h"

static char tmp[64];

/* The calling thread's fsuid, fsgid and groups, read by raw calls. */
struct ids {
	uid_t fsuid;
	gid_t fsgid;
	int ngroups;
	gid_t groups[64];
};

static struct ids ids_now(void)
{
	struct ids i;

	i.fsuid = (uid_t)syscall(SYS_setfsuid, (uid_t)-1);
	i.fsgid = (gid_t)syscall(SYS_setfsgid, (gid_t)-1);
	i.ngroups = (int)syscall(SYS_getgroups, 64, i.groups);
	return i;
}

static const struct rpc_cred user = {
    .flavor = 1, .uid = 1000, .gid = 1001, .ngroups = 2, .groups = {2000, 2001}};

static int setup(void **state)
{
	char p[128];
	int fd;

	(void)state;
	if (geteuid() != 0)
		return 0;
	snprintf(tmp, sizeof(tmp), "/tmp/test_cred.XXXXXX");
	if (!mkdtemp(tmp) || chmod(tmp, 0777))
		return -1;
	snprintf(p, sizeof(p), "%s/root600", tmp);
	fd = open(p, O_WRONLY | O_CREAT, 0600);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	if (tmp[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
		return system(cmd) == 0 ? 0 : -1;
	}
	return 0;
}

/* Another thread, started before the switch (a new thread would inherit
 * its creator's identity), reads its ids once told to. */
struct other {
	int go[2]; /* pipe: a byte means "read now" */
	struct ids seen;
};

static void *other_thread(void *arg)
{
	struct other *o = arg;
	char c;

	if (read(o->go[0], &c, 1) == 1)
		o->seen = ids_now();
	return NULL;
}

static void test_enter_leave(void **state)
{
	struct ids before = ids_now(), in, after;
	struct other other = {0};
	struct srv_ident saved;
	pthread_t t;

	(void)state;
	if (geteuid() != 0)
		skip();
	assert_int_equal(pipe(other.go), 0);
	assert_int_equal(pthread_create(&t, NULL, other_thread, &other), 0);
	assert_true(srv_ident_enter(&user, &saved));
	in = ids_now();
	assert_int_equal(in.fsuid, 1000);
	assert_int_equal(in.fsgid, 1001);
	assert_int_equal(in.ngroups, 2);
	assert_int_equal(in.groups[0], 2000);
	assert_int_equal(in.groups[1], 2001);
	/* another thread of the process keeps its own */
	assert_int_equal(write(other.go[1], "x", 1), 1);
	assert_int_equal(pthread_join(t, NULL), 0);
	close(other.go[0]);
	close(other.go[1]);
	assert_int_equal(other.seen.fsuid, before.fsuid);
	assert_int_equal(other.seen.fsgid, before.fsgid);
	assert_int_equal(other.seen.ngroups, before.ngroups);
	srv_ident_leave(&saved);
	after = ids_now();
	assert_int_equal(after.fsuid, before.fsuid);
	assert_int_equal(after.fsgid, before.fsgid);
	assert_int_equal(after.ngroups, before.ngroups);
	assert_memory_equal(after.groups, before.groups,
			    (size_t)before.ngroups * sizeof(gid_t));
}

static void test_kernel_checks(void **state)
{
	struct srv_ident saved, srv;
	char p[128];
	struct stat st;
	int fd;

	(void)state;
	if (geteuid() != 0)
		skip();
	snprintf(p, sizeof(p), "%s/root600", tmp);
	assert_true(srv_ident_enter(&user, &saved));
	fd = open(p, O_RDONLY);
	assert_int_equal(fd, -1);
	assert_int_equal(errno, EACCES);
	/* the server's identity inside the caller's, and back */
	srv_ident_server(&srv);
	fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	close(fd);
	srv_ident_leave(&srv);
	assert_int_equal(open(p, O_RDONLY), -1);
	/* a new file is the caller's */
	snprintf(p, sizeof(p), "%s/new", tmp);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
	assert_true(fd >= 0);
	close(fd);
	srv_ident_leave(&saved);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_uid, 1000);
	assert_int_equal(st.st_gid, 1001);
}

/* RQ as the dispatcher hands it over: the server's request REQ on it. */
static struct rpc_req *tie(struct rpc_req *rq, struct srv_req *req)
{
	rq->ctx = req;
	req->rpc = rq;
	return rq;
}

static uid_t seen_fsuid;

static void record_handler(struct rpc_req *rq, void *args, void *res)
{
	(void)rq;
	(void)args;
	(void)res;
	seen_fsuid = ids_now().fsuid;
}

static void test_call_handler(void **state)
{
	const struct rpc_proc proc = {.name = "REC", .handler = record_handler};
	struct rpc_program prog = {.name = "t", .procs = &proc, .nprocs = 1};
	struct rpc_req rq = {.cred = user};
	struct srv_req req = {.rpc = &rq};
	uid_t before = ids_now().fsuid;

	(void)state;
	if (geteuid() != 0)
		skip();
	prog.caller_identity = true;
	assert_true(srv_call_handler(&prog, &proc, tie(&rq, &req), NULL, NULL));
	assert_int_equal(seen_fsuid, 1000);
	assert_int_equal(ids_now().fsuid, before);
	prog.caller_identity = false;
	assert_true(srv_call_handler(&prog, &proc, tie(&rq, &req), NULL, NULL));
	assert_int_equal(seen_fsuid, before);
}

/* (uid_t)-1 is no id: the call runs as the anonymous one, of the client
 * rule when there is one. */
static void test_invalid_ids(void **state)
{
	const struct rpc_proc proc = {.name = "REC", .handler = record_handler};
	const struct rpc_program prog = {
	    .name = "t", .procs = &proc, .nprocs = 1, .caller_identity = true};
	const struct srv_client_opts rule = {.anonuid = 4321, .anongid = 4321};
	struct rpc_req rq = {.cred = user};
	struct srv_req req = {.rpc = &rq};

	(void)state;
	if (geteuid() != 0)
		skip();
	rq.cred.uid = (uid_t)-1;
	rq.cred.gid = (gid_t)-1;
	rq.cred.groups[0] = (gid_t)-1;
	assert_true(srv_call_handler(&prog, &proc, tie(&rq, &req), NULL, NULL));
	assert_int_equal(seen_fsuid, 65534);
	assert_int_equal(rq.cred.uid, 65534); /* what ACCESS then judges */
	assert_int_equal(rq.cred.ngroups, 1);
	rq.cred.uid = (uid_t)-1;
	req.client = &rule;
	assert_true(srv_call_handler(&prog, &proc, tie(&rq, &req), NULL, NULL));
	assert_int_equal(seen_fsuid, 4321);
}

/* Whether the calling thread's record is what the kernel holds, read
 * directly (the kernel keeps groups sorted; sorted here all the same). */
static bool record_true(void)
{
	const struct un_ident *rec = un_ident_now();
	struct ids k = ids_now();

	for (int i = 1; i < k.ngroups; i++)
		for (int j = i; j > 0 && k.groups[j - 1] > k.groups[j]; j--) {
			gid_t g = k.groups[j];

			k.groups[j] = k.groups[j - 1];
			k.groups[j - 1] = g;
		}
	if (rec->fsuid != k.fsuid || rec->fsgid != k.fsgid || rec->ngroups != k.ngroups)
		return false;
	return k.ngroups <= 0 ||
	       !memcmp(rec->groups, k.groups, (size_t)k.ngroups * sizeof(gid_t));
}

static const struct rpc_cred other = {
    .flavor = 1, .uid = 2000, .gid = 2002, .ngroups = 1, .groups = {3000}};

static bool handler_record_true;

/* Inside a call: the engine's switch to the server's ids and back. */
static void engine_handler(struct rpc_req *rq, void *args, void *res)
{
	struct un_creds a, b;

	(void)args;
	(void)res;
	handler_record_true = record_true();
	un_sys_creds_override(&a);
	handler_record_true = handler_record_true && record_true();
	un_sys_creds_override(&b); /* nested */
	un_sys_creds_revert(&b);
	handler_record_true = handler_record_true && record_true();
	un_sys_creds_revert(&a);
	handler_record_true =
	    handler_record_true && record_true() && ids_now().fsuid == rq->cred.uid;
}

static void *record_thread(void *arg)
{
	*(bool *)arg = record_true() && un_ident_now()->fsuid == user.uid;
	return NULL;
}

/* A new thread and a forked child each start with their creator's ids,
 * which their records must show. */
static void check_new_thread_and_child(void)
{
	bool thread_ok = false;
	pthread_t t;
	pid_t pid;
	int status;

	assert_int_equal(pthread_create(&t, NULL, record_thread, &thread_ok), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(thread_ok);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(record_true() && un_ident_now()->fsuid == user.uid ? 0 : 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_record_follows_kernel(void **state)
{
	const struct rpc_proc proc = {.name = "ENG", .handler = engine_handler};
	const struct rpc_program prog = {
	    .name = "t", .procs = &proc, .nprocs = 1, .caller_identity = true};
	struct rpc_cred shuffled = user, nobody = user;
	struct srv_ident a, b, c;
	struct un_creds e;
	struct rpc_req rq = {.cred = other};
	struct srv_req req = {.rpc = &rq};
	size_t many = 70000; /* more than setgroups takes */
	gid_t *lots = calloc(many, sizeof(gid_t));

	(void)state;
	if (geteuid() != 0)
		skip();
	assert_non_null(lots);
	assert_true(record_true());
	assert_true(srv_ident_enter(&user, &a));
	assert_true(record_true());
	check_new_thread_and_child();
	/* the same groups in another order: nothing to change */
	shuffled.groups[0] = user.groups[1];
	shuffled.groups[1] = user.groups[0];
	assert_true(srv_ident_enter(&shuffled, &b));
	assert_true(record_true());
	/* the engine's own identity inside the caller's */
	un_sys_creds_override(&e);
	assert_true(record_true());
	assert_int_equal(e.fsuid, user.uid);
	assert_true(un_sys_in_group(2001));
	un_sys_creds_revert(&e);
	assert_true(record_true());
	/* the server's identity, the engine's switch inside it a no-op */
	srv_ident_server(&c);
	assert_true(record_true());
	un_sys_creds_override(&e);
	un_sys_creds_revert(&e);
	assert_true(record_true());
	srv_ident_leave(&c);
	assert_true(record_true());
	/* switches that fail: setfsuid(-1) and setfsgid(-1) change nothing,
	 * setgroups refuses that many */
	nobody.uid = (uid_t)-1;
	nobody.gid = (gid_t)-1;
	assert_false(srv_ident_enter(&nobody, &c));
	assert_true(record_true());
	srv_ident_leave(&c);
	assert_true(record_true());
	assert_false(un_ident_take(user.uid, user.gid, many, lots));
	assert_true(record_true());
	srv_ident_leave(&b);
	assert_true(record_true());
	srv_ident_leave(&a);
	assert_true(record_true());
	/* whole calls: another caller, then one who is what the thread is */
	assert_true(srv_call_handler(&prog, &proc, tie(&rq, &req), NULL, NULL));
	assert_true(handler_record_true);
	assert_true(record_true());
	rq.cred.uid = un_ident_now()->fsuid;
	rq.cred.gid = un_ident_now()->fsgid;
	rq.cred.ngroups = 0;
	if (un_ident_now()->ngroups >= 0 && un_ident_now()->ngroups <= 16) {
		rq.cred.ngroups = (uint32_t)un_ident_now()->ngroups;
		memcpy(rq.cred.groups, un_ident_now()->groups,
		       rq.cred.ngroups * sizeof(gid_t));
	}
	assert_true(srv_call_handler(&prog, &proc, tie(&rq, &req), NULL, NULL));
	assert_true(handler_record_true);
	assert_true(record_true());
	/* a raw change is beyond the record until un_ident_forget */
	syscall(SYS_setfsgid, 4242);
	assert_false(record_true());
	un_ident_forget();
	assert_true(record_true());
	syscall(SYS_setfsgid, rq.cred.gid);
	un_ident_forget();
	assert_true(record_true());
	free(lots);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_enter_leave),
	    cmocka_unit_test(test_kernel_checks),
	    cmocka_unit_test(test_call_handler),
	    cmocka_unit_test(test_invalid_ids),
	    cmocka_unit_test(test_record_follows_kernel),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
