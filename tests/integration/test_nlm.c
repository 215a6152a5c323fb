/* SPDX-License-Identifier: Apache-2.0 */
/* test_nlm.c - the NLM server against a libtirpc client (issue 19, NLM).
 *
 * Runs under with_rpcbind.sh: a private network namespace with an rpcbind
 * of its own, where the server registers NLM and this test registers its
 * own lock manager (the callback service GRANTED goes to), as a client
 * host's lockd would.  The server finds it through the portmapper, as it
 * finds a real client's; it gets no port from the test.
 *
 *  - registration: rpcbind names the server's NLM port for v1, v3 and v4;
 *  - exclusive: owner A's lock makes B's TEST report A and B's LOCK
 *    DENIED; after A's UNLOCK B's LOCK is granted;
 *  - shared locks coexist, and an exclusive TEST sees them;
 *  - an UNLOCK in the middle of a lock splits it;
 *  - a blocking LOCK answers BLOCKED and the test's lock manager receives
 *    GRANTED once the holder unlocks; CANCEL removes a waiter (no GRANTED);
 *  - a GRANTED the client refuses releases the lock again;
 *  - LOCK_MSG over UDP: its LOCK_RES comes to the test's lock manager;
 *  - FREE_ALL frees a host's locks;
 *  - a version 1 LOCK and a version 4 TEST see one table;
 *  - a handle not of this server is NLM4_STALE_FH;
 *  - a flood of 100,000 distinct ranges from one owner: the first
 *    CAP are granted, the rest NLM4_DENIED_NOLOCKS, the server stays up
 *    and its memory bounded;
 *  - NSM: rpcbind names the server's NSM port, SM_STAT answers an odd
 *    state;
 *  - restart: a lock taken, the server SIGKILLed and started again on the
 *    same state dir: the test's own status monitor (on the callback
 *    service's port, as a client host's statd) receives SM_NOTIFY with a
 *    larger state; during grace a reclaim is granted, a reclaim that
 *    conflicts with it is NLM4_DENIED, a new lock and a TEST are
 *    NLM4_DENIED_GRACE_PERIOD; after grace another owner's lock is DENIED
 *    while the reclaimed one holds, granted after its UNLOCK;
 *  - SM_NOTIFY from a client address frees the locks taken from it: the
 *    blocked lock of a host at another address (127.0.0.2) gets GRANTED;
 *  - takeover (issue 30, nsm.c rules 8-10): with --nsm-dir, a lock taken
 *    through a floating address (192.0.2.10 on the loopback of the test's
 *    namespace) is recorded in that address's record; a datagram
 *    to it is answered from it, and GRANTED comes from it; a server
 *    SIGKILLed and started again where the address is takes it over by
 *    itself, and SM_NOTIFY comes from it with it as mon_name; giveup frees
 *    the locks taken through it, takeover (union-nfsctl's verbs, through
 *    the control socket) notifies again with a larger state, the reclaim
 *    is granted in its grace while every other new lock waits, and check
 *    answers ok.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <rpc/pmap_clnt.h>
#include <rpc/rpc.h>

#include "mount.h"
#include "nfs3_prot.h"
#include "nlm_prot.h"
#include "nsm_prot.h"
#include "start_server.h"

#define FLOOD	 100000
#define HOST_CAP 10000
/* The server's RSS after the flood, at most: under ASan its quarantine
 * of freed memory (256 MB) and shadow come on top. */
#ifdef __SANITIZE_ADDRESS__
#define RSS_MAX_KB (768 * 1024)
#else
#define RSS_MAX_KB (64 * 1024)
#endif

static const char *server_bin;
static struct test_server server = {.pid = -1};
static char tmp[64];
/* lockd's customary port: free in the test's own network namespace. */
#define NLM_PORT_S "4045"
static const int nlm_port = 4045;
#define NSM_PORT_S "4046"
static const int nsm_port = 4046;
/* Grace after the restart: long enough for the calls made in it on a busy
 * machine; the calls after it wait for its end, however long it takes. */
#define GRACE_S	  "6"
#define SECOND_IP "127.0.0.2" /* another client host, on the same loopback */
static char *restart_args[20];
static char state_dir[128];
static CLIENT *nlm4, *nlm1;
static char fh_bytes[NFS3_FHSIZE];
static u_int fh_len;
static struct timeval call_tv = {10, 0};

/* ---- the test's own lock manager: GRANTED calls it received ---- */

static pthread_mutex_t cb_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cb_cond = PTHREAD_COND_INITIALIZER;
static int cb_granted_svid = -1;
static unsigned cb_granted_count;
static char cb_granted_from[INET6_ADDRSTRLEN]; /* the address GRANTED came from */
static char cb_cookie[16];
static int cb_lock_res = -1; /* the stat of the last LOCK_RES */

/* The IPv4 address a call to XPRT came from, as text, into BUF. */
static void caller_text(SVCXPRT *xprt, char *buf, size_t len)
{
	const struct netbuf *nb = svc_getrpccaller(xprt);
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof(sin));
	memcpy(&sin, nb->buf, nb->len < sizeof(sin) ? nb->len : sizeof(sin));
	inet_ntop(AF_INET, &sin.sin_addr, buf, (socklen_t)len);
}

/* The client refuses GRANTED for this svid (it no longer wants the lock). */
#define SVID_REFUSES 99

/* LOCK_RES, the answer to a LOCK_MSG: its status kept, nothing replied. */
static void cb_lock_res_call(SVCXPRT *xprt)
{
	nlm4_res res;

	memset(&res, 0, sizeof(res));
	if (!svc_getargs(xprt, (xdrproc_t)xdr_nlm4_res, (char *)&res))
		return;
	pthread_mutex_lock(&cb_lock);
	cb_lock_res = res.stat.stat;
	pthread_cond_broadcast(&cb_cond);
	pthread_mutex_unlock(&cb_lock);
	svc_freeargs(xprt, (xdrproc_t)xdr_nlm4_res, (char *)&res);
}

static void cb_dispatch(struct svc_req *rq, SVCXPRT *xprt)
{
	nlm4_testargs args;
	nlm4_res res;

	if (rq->rq_proc == NLMPROC4_NULL) {
		svc_sendreply(xprt, (xdrproc_t)(void (*)(void))xdr_void, NULL);
		return;
	}
	if (rq->rq_proc == NLMPROC4_LOCK_RES) {
		cb_lock_res_call(xprt);
		return;
	}
	if (rq->rq_proc != NLMPROC4_GRANTED) {
		svcerr_noproc(xprt);
		return;
	}
	memset(&args, 0, sizeof(args));
	if (!svc_getargs(xprt, (xdrproc_t)xdr_nlm4_testargs, (char *)&args)) {
		svcerr_decode(xprt);
		return;
	}
	pthread_mutex_lock(&cb_lock);
	cb_granted_svid = args.alock.svid;
	cb_granted_count++;
	caller_text(xprt, cb_granted_from, sizeof(cb_granted_from));
	snprintf(cb_cookie, sizeof(cb_cookie), "%.*s", (int)args.cookie.nlm_obj_len,
		 args.cookie.nlm_obj_val);
	pthread_cond_broadcast(&cb_cond);
	pthread_mutex_unlock(&cb_lock);
	res.cookie = args.cookie;
	res.stat.stat = args.alock.svid == SVID_REFUSES ? NLM4_DENIED : NLM4_GRANTED;
	svc_sendreply(xprt, (xdrproc_t)xdr_nlm4_res, (char *)&res);
	svc_freeargs(xprt, (xdrproc_t)xdr_nlm4_testargs, (char *)&args);
}

/* ---- the test's own status monitor: SM_NOTIFY calls it received ---- */

static unsigned sm_notify_count;
static int sm_notify_state = -1;
static char sm_notify_name[64];
static char sm_notify_from[INET6_ADDRSTRLEN];

static void sm_dispatch(struct svc_req *rq, SVCXPRT *xprt)
{
	sm_stat_chge args;

	if (rq->rq_proc != SM_NOTIFY) {
		svcerr_noproc(xprt);
		return;
	}
	memset(&args, 0, sizeof(args));
	if (!svc_getargs(xprt, (xdrproc_t)xdr_sm_stat_chge, (char *)&args)) {
		svcerr_decode(xprt);
		return;
	}
	pthread_mutex_lock(&cb_lock);
	sm_notify_count++;
	sm_notify_state = args.state;
	snprintf(sm_notify_name, sizeof(sm_notify_name), "%s", args.mon_name);
	caller_text(xprt, sm_notify_from, sizeof(sm_notify_from));
	pthread_cond_broadcast(&cb_cond);
	pthread_mutex_unlock(&cb_lock);
	svc_sendreply(xprt, (xdrproc_t)(void (*)(void))xdr_void, NULL);
	svc_freeargs(xprt, (xdrproc_t)xdr_sm_stat_chge, (char *)&args);
}

static void *cb_main(void *arg)
{
	(void)arg;
	svc_run();
	return NULL;
}

static unsigned short cb_port;

/* Starts the callback service; cb_claim registers it. */
static int cb_start(void)
{
	SVCXPRT *x = svcudp_create(RPC_ANYSOCK);
	pthread_t t;

	if (!x || !svc_register(x, NLM_PROG, NLM4_VERS, cb_dispatch, 0) ||
	    !svc_register(x, SM_PROG, SM_VERS, sm_dispatch, 0))
		return -1;
	cb_port = x->xp_port;
	return pthread_create(&t, NULL, cb_main, NULL) == 0 ? 0 : -1;
}

/* The test is the client host, and server and client share this host's
 * rpcbind: the client's lock manager takes NLM v4's entry over UDP, where
 * the server looks for it, as a client host's lockd holds it on its own
 * host.  (Left to the server, GRANTED went to the server itself, which
 * refused it, and the lock was released: nlm_send.c, rule 3.) */
static void cb_claim(void)
{
	pmap_unset(NLM_PROG, NLM4_VERS);
	assert_true(pmap_set(NLM_PROG, NLM4_VERS, IPPROTO_UDP, cb_port));
}

/* The same for the test's status monitor: the server's SM_NOTIFY comes to
 * it, as to a client host's statd. */
static void sm_claim(void)
{
	pmap_unset(SM_PROG, SM_VERS);
	assert_true(pmap_set(SM_PROG, SM_VERS, IPPROTO_UDP, cb_port));
}

static struct timespec deadline(int ms)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	return until;
}

/* Waits up to MS for *COUNT to pass BEFORE (a callback counted under
 * cb_lock); then *VALUE, what the last one carried, else -1. */
static int counted_wait(const unsigned *count, const int *value, unsigned before, int ms)
{
	struct timespec until = deadline(ms);
	int got = -1;

	pthread_mutex_lock(&cb_lock);
	while (*count == before &&
	       pthread_cond_timedwait(&cb_cond, &cb_lock, &until) == 0)
		;
	if (*count > before)
		got = *value;
	pthread_mutex_unlock(&cb_lock);
	return got;
}

/* Waits up to MS for an SM_NOTIFY beyond the BEFORE-th; its state or -1. */
static int sm_wait(unsigned before, int ms)
{
	return counted_wait(&sm_notify_count, &sm_notify_state, before, ms);
}

/* Waits up to MS for a GRANTED beyond the BEFORE-th; its svid or -1. */
static int cb_wait(unsigned before, int ms)
{
	return counted_wait(&cb_granted_count, &cb_granted_svid, before, ms);
}

static unsigned cb_count(void)
{
	unsigned n;

	pthread_mutex_lock(&cb_lock);
	n = cb_granted_count;
	pthread_mutex_unlock(&cb_lock);
	return n;
}

/* ---- calls ---- */

static CLIENT *tcp_client(int port, unsigned long prog, unsigned long vers)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
	int sock = RPC_ANYSOCK;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return clnttcp_create(&sin, prog, vers, &sock, 0, 0);
}

/* A lock of owner SVID (its oh the same text) on [OFF, OFF + LEN). */
static nlm4_lock alock(const char *host, int svid, uint64_t off, uint64_t len)
{
	static char ohs[8][16];
	static unsigned next;
	char *oh = ohs[next++ % 8];

	snprintf(oh, 16, "owner-%d", svid);
	return (nlm4_lock){.caller_name = (char *)host,
			   .fh = {fh_len, fh_bytes},
			   .oh = {(u_int)strlen(oh), oh},
			   .svid = svid,
			   .l_offset = off,
			   .l_len = len};
}

static nlm_obj cookie(const char *c)
{
	return (nlm_obj){(u_int)strlen(c), (char *)c};
}

/* Calls PROC of the NLM through C with ARGS (encoded by ENC); the
 * nlm4_res's status. */
static nlm4_stats res_call(CLIENT *c, rpcproc_t proc, xdrproc_t enc, void *args)
{
	nlm4_res r = {0};
	nlm4_stats st;

	assert_int_equal(clnt_call(c, proc, enc, (char *)args, (xdrproc_t)xdr_nlm4_res,
				   (char *)&r, call_tv),
			 RPC_SUCCESS);
	st = r.stat.stat;
	xdr_free((xdrproc_t)xdr_nlm4_res, (char *)&r);
	return st;
}

/* LOCK through C, RECLAIM set or not. */
static nlm4_stats lock4_via(CLIENT *c, const char *host, int svid, bool excl, bool block,
			    bool reclaim, uint64_t off, uint64_t len)
{
	nlm4_lockargs a = {.cookie = cookie("ck-lock"),
			   .block = block,
			   .exclusive = excl,
			   .alock = alock(host, svid, off, len),
			   .reclaim = reclaim};

	return res_call(c, NLMPROC4_LOCK, (xdrproc_t)xdr_nlm4_lockargs, &a);
}

static nlm4_stats lock4(const char *host, int svid, bool excl, bool block, uint64_t off,
			uint64_t len)
{
	return lock4_via(nlm4, host, svid, excl, block, false, off, len);
}

static nlm4_stats unlock4_via(CLIENT *c, const char *host, int svid, uint64_t off,
			      uint64_t len)
{
	nlm4_unlockargs a = {.cookie = cookie("ck-unlock"),
			     .alock = alock(host, svid, off, len)};

	return res_call(c, NLMPROC4_UNLOCK, (xdrproc_t)xdr_nlm4_unlockargs, &a);
}

static nlm4_stats unlock4(const char *host, int svid, uint64_t off, uint64_t len)
{
	return unlock4_via(nlm4, host, svid, off, len);
}

static nlm4_stats cancel4(const char *host, int svid, bool excl, uint64_t off,
			  uint64_t len)
{
	nlm4_cancargs a = {.cookie = cookie("ck-cancel"),
			   .block = true,
			   .exclusive = excl,
			   .alock = alock(host, svid, off, len)};

	return res_call(nlm4, NLMPROC4_CANCEL, (xdrproc_t)xdr_nlm4_cancargs, &a);
}

/* TEST; a conflicting holder goes to *H (its oh not kept). */
static nlm4_stats test4(const char *host, int svid, bool excl, uint64_t off, uint64_t len,
			nlm4_holder *h)
{
	nlm4_testargs a = {.cookie = cookie("ck-test"),
			   .exclusive = excl,
			   .alock = alock(host, svid, off, len)};
	nlm4_testres r = {0};
	nlm4_stats st;

	assert_int_equal(clnt_call(nlm4, NLMPROC4_TEST, (xdrproc_t)xdr_nlm4_testargs,
				   (char *)&a, (xdrproc_t)xdr_nlm4_testres, (char *)&r,
				   call_tv),
			 RPC_SUCCESS);
	assert_int_equal(r.cookie.nlm_obj_len, strlen("ck-test"));
	st = r.stat.stat;
	if (st == NLM4_DENIED && h) {
		*h = r.stat.nlm4_testrply_u.holder;
		h->oh = (nlm_obj){0, NULL};
	}
	xdr_free((xdrproc_t)xdr_nlm4_testres, (char *)&r);
	return st;
}

static void free_all(const char *host)
{
	nlm4_notify a = {.name = (char *)host, .state = 0};

	assert_int_equal(clnt_call(nlm4, NLMPROC4_FREE_ALL, (xdrproc_t)xdr_nlm4_notify,
				   (char *)&a, (xdrproc_t)(void (*)(void))xdr_void, NULL,
				   call_tv),
			 RPC_SUCCESS);
}

/* ---- set-up: server, MNT, LOOKUP of the file ---- */

/* Reads the server's "listening" line into SERVER's ports: 0, or -1 until
 * it is written. */
static int read_ports(const char *state)
{
	char path[256], line[256];
	int nfs, mount, rc = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/stdout", state);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "listening nfs=%d mount=%d", &nfs, &mount) == 2) {
			server.nfs_port = nfs;
			server.mount_port = mount;
			rc = 0;
			break;
		}
	fclose(f);
	return rc;
}

static int lookup_file(void)
{
	CLIENT *m = tcp_client(server.mount_port, MOUNT_PROGRAM, MOUNT_V3);
	CLIENT *n = tcp_client(server.nfs_port, NFS_PROGRAM, NFS_V3);
	char *path = "/";
	mountres3 mr = {0};
	LOOKUP3args la = {0};
	LOOKUP3res lr = {0};
	int rc = -1;

	if (!m || !n)
		goto out;
	n->cl_auth = authunix_create_default();
	if (clnt_call(m, MOUNTPROC3_MNT, (xdrproc_t)xdr_dirpath, (char *)&path,
		      (xdrproc_t)xdr_mountres3, (char *)&mr, call_tv) != RPC_SUCCESS ||
	    mr.fhs_status != MNT3_OK)
		goto out;
	la.what.dir.data.data_len = mr.mountres3_u.mountinfo.fhandle.fhandle3_len;
	la.what.dir.data.data_val = mr.mountres3_u.mountinfo.fhandle.fhandle3_val;
	la.what.name = "f";
	if (clnt_call(n, NFSPROC3_LOOKUP, (xdrproc_t)xdr_LOOKUP3args, (char *)&la,
		      (xdrproc_t)xdr_LOOKUP3res, (char *)&lr, call_tv) != RPC_SUCCESS ||
	    lr.status != NFS3_OK)
		goto out;
	fh_len = lr.LOOKUP3res_u.resok.object.data.data_len;
	memcpy(fh_bytes, lr.LOOKUP3res_u.resok.object.data.data_val, fh_len);
	rc = 0;
	xdr_free((xdrproc_t)xdr_LOOKUP3res, (char *)&lr);
	xdr_free((xdrproc_t)xdr_mountres3, (char *)&mr);
out:
	if (m)
		clnt_destroy(m);
	if (n && n->cl_auth)
		auth_destroy(n->cl_auth);
	if (n)
		clnt_destroy(n);
	return rc;
}

/* Starts the server as start_server.c does, but registered with the
 * private rpcbind (start_server's servers never register). */
static int start_registered(const char *st, char *const *args)
{
	char out[192];
	pid_t pid;

	mkdir(st, 0700);
	snprintf(out, sizeof(out), "%s/stdout", st);
	unlink(out);
	pid = fork();
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
			_exit(126);
		execv(server_bin, args);
		_exit(127);
	}
	server.pid = pid;
	for (int i = 0; pid > 0 && i < START_WAIT_S * 20; i++) {
		if (read_ports(st) == 0)
			return 0;
		if (waitpid(pid, NULL, WNOHANG) == pid) {
			server.pid = -1;
			return -1;
		}
		usleep(50000);
	}
	return -1;
}

/* The server's arguments, kept for the restart, which adds --no-rpcbind:
 * the restarted server must not take back the status monitor's entry the
 * test claimed (server and client share one host and rpcbind here). */
static void keep_args(char *const *args)
{
	static char bufs[20][192];
	size_t i;

	for (i = 0; args[i] && i < 18; i++) {
		snprintf(bufs[i], sizeof(bufs[i]), "%s", args[i]);
		restart_args[i] = bufs[i];
	}
	restart_args[i++] = "--no-rpcbind";
	restart_args[i] = NULL;
}

static int setup(void **state)
{
	char lower[128], upper[128], work[128], *st = state_dir, f[160];
	char low_arg[160], up_arg[160], work_arg[160], st_arg[160];
	char *args[] = {(char *)server_bin,
			low_arg,
			up_arg,
			work_arg,
			st_arg,
			"--threads=4",
			"--nfs-port=0",
			"--mount-port=0",
			"--bind=127.0.0.1",
			"--foreground",
			"--nlm-port=" NLM_PORT_S,
			"--nsm-port=" NSM_PORT_S,
			"--grace-period=" GRACE_S,
			"--clients=" TEST_SERVER_CLIENTS,
			NULL};
	FILE *fp;

	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/test_nlm.XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(lower, sizeof(lower), "%s/lower", tmp);
	snprintf(upper, sizeof(upper), "%s/upper", tmp);
	snprintf(work, sizeof(work), "%s/work", tmp);
	snprintf(st, sizeof(state_dir), "%s/state", tmp);
	snprintf(f, sizeof(f), "%s/f", lower);
	mkdir(lower, 0755);
	mkdir(upper, 0755);
	mkdir(work, 0755);
	fp = fopen(f, "w");
	if (!fp)
		return -1;
	fputs("locked\n", fp);
	fclose(fp);
	snprintf(low_arg, sizeof(low_arg), "--lowerdir=%s", lower);
	snprintf(up_arg, sizeof(up_arg), "--upperdir=%s", upper);
	snprintf(work_arg, sizeof(work_arg), "--workdir=%s", work);
	snprintf(st_arg, sizeof(st_arg), "--state-dir=%s", st);
	keep_args(args);
	if (cb_start() < 0 || start_registered(st, args) < 0 || lookup_file() < 0)
		return -1;
	nlm4 = tcp_client(nlm_port, NLM_PROG, NLM4_VERS);
	nlm1 = tcp_client(nlm_port, NLM_PROG, NLM_VERS);
	return nlm4 && nlm1 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (nlm4)
		clnt_destroy(nlm4);
	if (nlm1)
		clnt_destroy(nlm1);
	pmap_unset(NLM_PROG, NLM4_VERS);
	pmap_unset(SM_PROG, SM_VERS);
	test_server_stop(&server);
	test_tmp_remove(tmp, "/tmp/test_nlm.");
	return 0;
}

/* ---- the tests ---- */

static void registered(void **state)
{
	struct sockaddr_in sin = {.sin_family = AF_INET};

	(void)state;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(pmap_getport(&sin, NLM_PROG, NLM4_VERS, IPPROTO_UDP), nlm_port);
	assert_int_equal(pmap_getport(&sin, NLM_PROG, NLM4_VERS, IPPROTO_TCP), nlm_port);
	assert_int_equal(pmap_getport(&sin, NLM_PROG, NLM_VERSX, IPPROTO_TCP), nlm_port);
	assert_int_equal(pmap_getport(&sin, NLM_PROG, NLM_VERS, IPPROTO_UDP), nlm_port);
}

static void exclusive(void **state)
{
	nlm4_holder h;

	(void)state;
	assert_int_equal(lock4("hostA", 1, true, false, 0, 100), NLM4_GRANTED);
	assert_int_equal(test4("hostA", 2, true, 50, 10, &h), NLM4_DENIED);
	assert_int_equal(h.svid, 1);
	assert_true(h.exclusive);
	assert_int_equal(h.l_offset, 0);
	assert_int_equal(h.l_len, 100);
	assert_int_equal(lock4("hostA", 2, true, false, 50, 10), NLM4_DENIED);
	assert_int_equal(lock4("hostA", 2, false, false, 99, 1), NLM4_DENIED);
	assert_int_equal(lock4("hostA", 2, true, false, 100, 10), NLM4_GRANTED);
	assert_int_equal(unlock4("hostA", 1, 0, 0), NLM4_GRANTED);
	assert_int_equal(lock4("hostA", 2, true, false, 50, 10), NLM4_GRANTED);
	assert_int_equal(unlock4("hostA", 2, 0, 0), NLM4_GRANTED);
	assert_int_equal(test4("hostA", 3, true, 0, 0, NULL), NLM4_GRANTED);
}

static void shared(void **state)
{
	nlm4_holder h;

	(void)state;
	assert_int_equal(lock4("hostA", 1, false, false, 0, 10), NLM4_GRANTED);
	assert_int_equal(lock4("hostB", 1, false, false, 5, 10), NLM4_GRANTED);
	assert_int_equal(test4("hostB", 2, false, 0, 20, NULL), NLM4_GRANTED);
	assert_int_equal(test4("hostB", 2, true, 12, 1, &h), NLM4_DENIED);
	assert_false(h.exclusive);
	assert_int_equal(lock4("hostB", 2, true, false, 0, 0), NLM4_DENIED);
	assert_int_equal(unlock4("hostA", 1, 0, 0), NLM4_GRANTED);
	assert_int_equal(unlock4("hostB", 1, 0, 0), NLM4_GRANTED);
}

static void split(void **state)
{
	nlm4_holder h;

	(void)state;
	assert_int_equal(lock4("hostA", 1, true, false, 0, 100), NLM4_GRANTED);
	assert_int_equal(unlock4("hostA", 1, 40, 20), NLM4_GRANTED);
	assert_int_equal(lock4("hostA", 2, true, false, 40, 20), NLM4_GRANTED);
	assert_int_equal(lock4("hostA", 2, true, false, 39, 1), NLM4_DENIED);
	assert_int_equal(test4("hostA", 3, true, 60, 5, &h), NLM4_DENIED);
	assert_int_equal(h.svid, 1);
	assert_int_equal(h.l_offset, 60);
	assert_int_equal(h.l_len, 40);
	assert_int_equal(unlock4("hostA", 1, 0, 0), NLM4_GRANTED);
	assert_int_equal(unlock4("hostA", 2, 0, 0), NLM4_GRANTED);
}

static void blocking_granted(void **state)
{
	unsigned before = cb_count();

	(void)state;
	cb_claim();
	assert_int_equal(lock4("hostA", 1, true, false, 0, 0), NLM4_GRANTED);
	assert_int_equal(lock4("hostB", 7, true, true, 10, 10), NLM4_BLOCKED);
	assert_int_equal(cb_wait(before, 500), -1); /* not while A holds it */
	assert_int_equal(unlock4("hostA", 1, 0, 0), NLM4_GRANTED);
	assert_int_equal(cb_wait(before, 5000), 7);
	pthread_mutex_lock(&cb_lock);
	assert_string_equal(cb_cookie, "ck-lock");
	pthread_mutex_unlock(&cb_lock);
	/* granted before GRANTED was sent: B holds it */
	assert_int_equal(lock4("hostA", 1, true, false, 15, 1), NLM4_DENIED);
	assert_int_equal(unlock4("hostB", 7, 0, 0), NLM4_GRANTED);
}

static void cancel(void **state)
{
	unsigned before = cb_count();

	(void)state;
	assert_int_equal(lock4("hostA", 1, true, false, 0, 0), NLM4_GRANTED);
	assert_int_equal(lock4("hostB", 8, true, true, 0, 10), NLM4_BLOCKED);
	assert_int_equal(cancel4("hostB", 8, true, 0, 10), NLM4_GRANTED);
	assert_int_equal(cancel4("hostB", 8, true, 0, 10), NLM4_DENIED);
	assert_int_equal(unlock4("hostA", 1, 0, 0), NLM4_GRANTED);
	assert_int_equal(cb_wait(before, 1500), -1);
	assert_int_equal(test4("hostC", 1, true, 0, 0, NULL), NLM4_GRANTED);
}

static void free_all_host(void **state)
{
	(void)state;
	assert_int_equal(lock4("hostX", 1, true, false, 0, 10), NLM4_GRANTED);
	assert_int_equal(lock4("hostX", 2, true, false, 20, 10), NLM4_GRANTED);
	assert_int_equal(lock4("hostY", 1, true, false, 0, 1), NLM4_DENIED);
	free_all("hostY"); /* another host's: nothing of X's goes */
	assert_int_equal(lock4("hostY", 1, true, false, 0, 1), NLM4_DENIED);
	free_all("hostX");
	assert_int_equal(lock4("hostY", 1, true, false, 0, 30), NLM4_GRANTED);
	assert_int_equal(unlock4("hostY", 1, 0, 0), NLM4_GRANTED);
}

static void version1(void **state)
{
	nlm_lockargs a = {.cookie = cookie("v1"),
			  .exclusive = true,
			  .alock = {.caller_name = "hostV",
				    .fh = {fh_len, fh_bytes},
				    .oh = {2, "v1"},
				    .svid = 11,
				    .l_offset = 1000,
				    .l_len = 0}};
	nlm_res r = {0};
	nlm4_holder h;

	(void)state;
	assert_int_equal(clnt_call(nlm1, NLM_LOCK, (xdrproc_t)xdr_nlm_lockargs,
				   (char *)&a, (xdrproc_t)xdr_nlm_res, (char *)&r,
				   call_tv),
			 RPC_SUCCESS);
	assert_int_equal(r.stat.stat, nlm_granted);
	xdr_free((xdrproc_t)xdr_nlm_res, (char *)&r);
	assert_int_equal(test4("hostA", 1, false, (uint64_t)1 << 40, 1, &h), NLM4_DENIED);
	assert_int_equal(h.svid, 11);
	assert_int_equal(h.l_offset, 1000);
	assert_int_equal(h.l_len, 0);
	free_all("hostV");
	assert_int_equal(test4("hostA", 1, true, 0, 0, NULL), NLM4_GRANTED);
}

static void stale_handle(void **state)
{
	nlm4_lockargs a = {.cookie = cookie("x"), .exclusive = true};
	char junk[32] = "no handle of ours";
	nlm4_res r = {0};

	(void)state;
	a.alock = alock("hostA", 1, 0, 1);
	a.alock.fh = (nlm_obj){sizeof(junk), junk};
	assert_int_equal(clnt_call(nlm4, NLMPROC4_LOCK, (xdrproc_t)xdr_nlm4_lockargs,
				   (char *)&a, (xdrproc_t)xdr_nlm4_res, (char *)&r,
				   call_tv),
			 RPC_SUCCESS);
	assert_int_equal(r.stat.stat, NLM4_STALE_FH);
	xdr_free((xdrproc_t)xdr_nlm4_res, (char *)&r);
}

/* A blocked lock whose GRANTED the client refuses is released again
 * (nlm_send.c, rule 3): another owner then gets it. */
static void granted_refused(void **state)
{
	unsigned before = cb_count();
	nlm4_stats st = NLM4_DENIED;

	(void)state;
	cb_claim();
	assert_int_equal(lock4("hostA", 1, true, false, 0, 0), NLM4_GRANTED);
	assert_int_equal(lock4("hostB", SVID_REFUSES, true, true, 0, 10), NLM4_BLOCKED);
	assert_int_equal(unlock4("hostA", 1, 0, 0), NLM4_GRANTED);
	assert_int_equal(cb_wait(before, 5000), SVID_REFUSES);
	for (int i = 0; i < 50 && st != NLM4_GRANTED; i++) {
		usleep(100000);
		st = lock4("hostC", 1, true, false, 0, 10);
	}
	assert_int_equal(st, NLM4_GRANTED);
	assert_int_equal(unlock4("hostC", 1, 0, 0), NLM4_GRANTED);
}

/* LOCK_MSG over UDP: no answer to the call itself; LOCK_RES comes to the
 * test's lock manager. */
static void lock_msg_udp(void **state)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(nlm_port)};
	struct timeval wait = {1, 0};
	nlm4_lockargs a = {.cookie = cookie("ck-msg"),
			   .exclusive = true,
			   .alock = alock("hostM", 1, 500, 10)};
	int sock = RPC_ANYSOCK, got = -1;
	struct timespec until;
	CLIENT *u;

	(void)state;
	cb_claim();
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	u = clntudp_create(&sin, NLM_PROG, NLM4_VERS, wait, &sock);
	assert_non_null(u);
	pthread_mutex_lock(&cb_lock);
	cb_lock_res = -1;
	pthread_mutex_unlock(&cb_lock);
	clnt_call(u, NLMPROC4_LOCK_MSG, (xdrproc_t)xdr_nlm4_lockargs, (char *)&a,
		  (xdrproc_t)(void (*)(void))xdr_void, NULL, call_tv);
	clnt_destroy(u);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	pthread_mutex_lock(&cb_lock);
	while (cb_lock_res < 0 && pthread_cond_timedwait(&cb_cond, &cb_lock, &until) == 0)
		;
	got = cb_lock_res;
	pthread_mutex_unlock(&cb_lock);
	assert_int_equal(got, NLM4_GRANTED);
	assert_int_equal(test4("hostA", 1, true, 505, 1, NULL), NLM4_DENIED);
	free_all("hostM");
}

static long server_rss_kb(void)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)server.pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static void flood(void **state)
{
	unsigned granted = 0, nolocks = 0, other = 0;
	long rss0 = server_rss_kb(), rss1;
	struct timespec t0, t1;
	nlm4_stats st;

	(void)state;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0; i < FLOOD; i++) {
		/* ranges apart, so that none merges with its neighbour */
		st = lock4("flood", 1, true, false, (uint64_t)i * 2, 1);
		granted += st == NLM4_GRANTED;
		nolocks += st == NLM4_DENIED_NOLOCKS;
		other += st != NLM4_GRANTED && st != NLM4_DENIED_NOLOCKS;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	rss1 = server_rss_kb();
	printf("flood: %u LOCKs in %.1f s: %u granted, %u NLM4_DENIED_NOLOCKS, %u other; "
	       "server RSS %ld -> %ld kB\n",
	       FLOOD, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
	       granted, nolocks, other, rss0, rss1);
	assert_int_equal(granted, HOST_CAP);
	assert_int_equal(nolocks, FLOOD - HOST_CAP);
	assert_true(test_server_alive(&server));
	assert_true(rss1 > 0 && rss1 < RSS_MAX_KB);
	/* another host is not held back by the flooder's cap */
	assert_int_equal(lock4("hostA", 1, true, false, 1, 1), NLM4_GRANTED);
	free_all("flood");
	assert_int_equal(unlock4("hostA", 1, 0, 0), NLM4_GRANTED);
	assert_int_equal(lock4("hostA", 1, true, false, 0, 0), NLM4_GRANTED);
	assert_int_equal(unlock4("hostA", 1, 0, 0), NLM4_GRANTED);
}

/* ---- NSM ---- */

static CLIENT *nsm_client(void)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(nsm_port)};
	int sock = RPC_ANYSOCK;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return clntudp_create(&sin, SM_PROG, SM_VERS, (struct timeval){1, 0}, &sock);
}

static int sm_stat_now(void)
{
	CLIENT *c = nsm_client();
	sm_name a = {.mon_name = "test"};
	sm_stat_res r = {0};

	assert_non_null(c);
	assert_int_equal(clnt_call(c, SM_STAT, (xdrproc_t)xdr_sm_name, (char *)&a,
				   (xdrproc_t)xdr_sm_stat_res, (char *)&r, call_tv),
			 RPC_SUCCESS);
	clnt_destroy(c);
	assert_int_equal(r.res_stat, STAT_SUCC);
	return r.state;
}

static void nsm_registered(void **state)
{
	struct sockaddr_in sin = {.sin_family = AF_INET};
	int st;

	(void)state;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(pmap_getport(&sin, SM_PROG, SM_VERS, IPPROTO_UDP), nsm_port);
	assert_int_equal(pmap_getport(&sin, SM_PROG, SM_VERS, IPPROTO_TCP), nsm_port);
	st = sm_stat_now();
	assert_true(st > 0 && st % 2 == 1);
}

/* An NLM v4 client over TCP from address SRC (a host of its own) to the
 * server's address DST. */
static CLIENT *tcp_client_between(const char *src, const char *dst)
{
	struct sockaddr_in from = {.sin_family = AF_INET};
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(nlm_port)};
	int sock = socket(AF_INET, SOCK_STREAM, 0);

	inet_pton(AF_INET, src, &from.sin_addr);
	inet_pton(AF_INET, dst, &to.sin_addr);
	if (sock < 0 || bind(sock, (struct sockaddr *)&from, sizeof(from)) < 0 ||
	    connect(sock, (struct sockaddr *)&to, sizeof(to)) < 0) {
		if (sock >= 0)
			close(sock);
		return NULL;
	}
	return clnttcp_create(&to, NLM_PROG, NLM4_VERS, &sock, 0, 0);
}

static CLIENT *tcp_client_from(const char *src)
{
	return tcp_client_between(src, "127.0.0.1");
}

/* SIGKILLs the server and starts it again on the same state dir. */
static void kill_restart(void)
{
	assert_int_equal(kill(server.pid, SIGKILL), 0);
	assert_int_equal(waitpid(server.pid, NULL, 0), server.pid);
	server.pid = -1;
	clnt_destroy(nlm4);
	nlm4 = NULL;
	assert_int_equal(start_registered(state_dir, restart_args), 0);
	nlm4 = tcp_client(nlm_port, NLM_PROG, NLM4_VERS);
	assert_non_null(nlm4);
}

static double since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static void restart_grace(void **state)
{
	int old_state = sm_stat_now(), new_state;
	unsigned before;
	struct timespec t0;
	nlm4_stats st;

	(void)state;
	assert_int_equal(lock4("hostA", 1, true, false, 0, 100), NLM4_GRANTED);
	sm_claim();
	pthread_mutex_lock(&cb_lock);
	before = sm_notify_count;
	pthread_mutex_unlock(&cb_lock);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	kill_restart();
	new_state = sm_wait(before, 60000);
	printf("restart: state %d -> %d, SM_NOTIFY %.1f s after the kill\n", old_state,
	       new_state, since(&t0));
	assert_true(new_state > old_state && new_state % 2 == 1);
	assert_int_equal(new_state, sm_stat_now());
	pthread_mutex_lock(&cb_lock);
	assert_true(sm_notify_name[0] != '\0');
	pthread_mutex_unlock(&cb_lock);
	/* in grace: the reclaim is granted, all else refused */
	assert_int_equal(lock4_via(nlm4, "hostA", 1, true, false, true, 0, 100),
			 NLM4_GRANTED);
	assert_int_equal(lock4_via(nlm4, "hostB", 2, true, false, true, 50, 10),
			 NLM4_DENIED);
	assert_int_equal(lock4("hostB", 2, true, false, 200, 10),
			 NLM4_DENIED_GRACE_PERIOD);
	assert_int_equal(test4("hostB", 2, true, 200, 10, NULL),
			 NLM4_DENIED_GRACE_PERIOD);
	printf("grace: calls in it done %.1f s after the kill\n", since(&t0));
	/* after grace, however long it takes to end */
	for (int i = 0; i < 600; i++) {
		st = lock4("hostB", 2, true, false, 50, 10);
		if (st != NLM4_DENIED_GRACE_PERIOD)
			break;
		usleep(100000);
	}
	printf("grace: over %.1f s after the kill\n", since(&t0));
	assert_int_equal(st, NLM4_DENIED);
	assert_int_equal(unlock4("hostA", 1, 0, 0), NLM4_GRANTED);
	assert_int_equal(lock4("hostB", 2, true, false, 50, 10), NLM4_GRANTED);
	assert_int_equal(unlock4("hostB", 2, 0, 0), NLM4_GRANTED);
}

static void sm_notify_frees(void **state)
{
	CLIENT *b = tcp_client_from(SECOND_IP), *c = nsm_client();
	sm_stat_chge a = {.mon_name = "hostA", .state = 3};
	unsigned before = cb_count();

	(void)state;
	assert_non_null(b);
	assert_non_null(c);
	cb_claim();
	assert_int_equal(lock4("hostA", 1, true, false, 0, 0), NLM4_GRANTED);
	assert_int_equal(lock4_via(b, "hostB", 9, true, true, false, 0, 10),
			 NLM4_BLOCKED);
	assert_int_equal(cb_wait(before, 500), -1); /* not while A holds it */
	/* hostA (127.0.0.1) restarted: its locks go, B's waiter is granted */
	assert_int_equal(clnt_call(c, SM_NOTIFY, (xdrproc_t)xdr_sm_stat_chge, (char *)&a,
				   (xdrproc_t)(void (*)(void))xdr_void, NULL, call_tv),
			 RPC_SUCCESS);
	assert_int_equal(cb_wait(before, 15000), 9);
	assert_int_equal(test4("hostA", 1, true, 0, 1, NULL), NLM4_DENIED);
	assert_int_equal(unlock4_via(b, "hostB", 9, 0, 0), NLM4_GRANTED);
	assert_int_equal(test4("hostA", 1, true, 0, 0, NULL), NLM4_GRANTED);
	clnt_destroy(c);
	clnt_destroy(b);
}

/* ---- takeover of a floating address ---- */

#define FLOAT_IP "192.0.2.10"

/* The server's arguments for a takeover: wildcard bound, with nsm-dir. */
static char *ha_args[24];
static char nsm_dir[160];

static void ha_args_make(void)
{
	static char nsm_arg[192];
	size_t i, n = 0;

	snprintf(nsm_dir, sizeof(nsm_dir), "%s/nsm", tmp);
	mkdir(nsm_dir, 0700);
	snprintf(nsm_arg, sizeof(nsm_arg), "--nsm-dir=%s", nsm_dir);
	for (i = 0; restart_args[i]; i++)
		ha_args[n++] = strncmp(restart_args[i], "--bind=", 7) == 0
				   ? "--bind=0.0.0.0"
				   : restart_args[i];
	ha_args[n++] = nsm_arg;
	ha_args[n] = NULL;
}

/* The address the answer to an NLM NULL datagram sent to DST came from. */
static void udp_answer_from(const char *dst, char *out, size_t len)
{
	uint32_t call[10] = {
	    htonl(0x7e57), 0, htonl(2), htonl(NLM_PROG), htonl(NLM4_VERS), 0, 0, 0, 0, 0};
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(nlm_port)};
	struct sockaddr_in from = {.sin_family = AF_INET};
	struct timeval tv = {10, 0};
	socklen_t flen = sizeof(from);
	uint8_t reply[256];
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	assert_true(fd >= 0);
	from.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&from, sizeof(from)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	inet_pton(AF_INET, dst, &to.sin_addr);
	assert_int_equal(
	    sendto(fd, call, sizeof(call), 0, (struct sockaddr *)&to, sizeof(to)),
	    (ssize_t)sizeof(call));
	assert_true(
	    recvfrom(fd, reply, sizeof(reply), 0, (struct sockaddr *)&from, &flen) > 0);
	inet_ntop(AF_INET, &from.sin_addr, out, (socklen_t)len);
	close(fd);
}

/* Asks the server's control socket REQUEST (union-nfsctl's line); its
 * reply into OUT. */
static void ctl_ask(const char *request, char *out, size_t len)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	size_t have = 0;
	ssize_t n;

	snprintf(sun.sun_path, sizeof(sun.sun_path), "%.90s/ctl.sock", state_dir);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(write(fd, request, strlen(request)), (ssize_t)strlen(request));
	while (have + 1 < len && (n = read(fd, out + have, len - 1 - have)) > 0)
		have += (size_t)n;
	out[have] = '\0';
	close(fd);
}

/* SIGKILLs the server and starts it with ARGS. */
static void kill_start(char *const *args)
{
	assert_int_equal(kill(server.pid, SIGKILL), 0);
	assert_int_equal(waitpid(server.pid, NULL, 0), server.pid);
	server.pid = -1;
	assert_int_equal(start_registered(state_dir, args), 0);
}

/* The next SM_NOTIFY: its state, mon_name and source checked. */
static int notify_from_float(unsigned before)
{
	int st = sm_wait(before, 60000);

	pthread_mutex_lock(&cb_lock);
	assert_string_equal(sm_notify_name, FLOAT_IP);
	assert_string_equal(sm_notify_from, FLOAT_IP);
	pthread_mutex_unlock(&cb_lock);
	assert_true(st % 2 == 1);
	return st;
}

static void takeover(void **state)
{
	char path[256], from[INET6_ADDRSTRLEN], reply[1024];
	struct stat sb;
	unsigned before;
	int st1, st2;
	CLIENT *f;
	nlm4_stats st;

	(void)state;
	assert_int_equal(system("ip addr add " FLOAT_IP "/32 dev lo"), 0);
	ha_args_make();
	kill_start(ha_args);
	cb_claim();
	sm_claim();
	f = tcp_client_between("127.0.0.1", FLOAT_IP);
	assert_non_null(f);
	/* Recorded under the address it came to (rule 8). */
	assert_int_equal(lock4_via(f, "hostF", 7, true, false, false, 0, 10),
			 NLM4_GRANTED);
	snprintf(path, sizeof(path), "%s/" FLOAT_IP, nsm_dir);
	assert_int_equal(stat(path, &sb), 0);
	/* A datagram's answer and a GRANTED leave from the address called. */
	udp_answer_from(FLOAT_IP, from, sizeof(from));
	assert_string_equal(from, FLOAT_IP);
	before = cb_count();
	assert_int_equal(lock4_via(f, "hostF", 8, true, true, false, 0, 10),
			 NLM4_BLOCKED);
	assert_int_equal(unlock4_via(f, "hostF", 7, 0, 0), NLM4_GRANTED);
	assert_int_equal(cb_wait(before, 15000), 8);
	pthread_mutex_lock(&cb_lock);
	assert_string_equal(cb_granted_from, FLOAT_IP);
	pthread_mutex_unlock(&cb_lock);
	assert_int_equal(unlock4_via(f, "hostF", 8, 0, 0), NLM4_GRANTED);
	assert_int_equal(lock4_via(f, "hostF", 7, true, false, false, 0, 10),
			 NLM4_GRANTED);
	clnt_destroy(f);

	/* Started again where the address is: taken over by itself (rule 9). */
	pthread_mutex_lock(&cb_lock);
	before = sm_notify_count;
	pthread_mutex_unlock(&cb_lock);
	kill_start(ha_args);
	st1 = notify_from_float(before);

	/* Given up, then taken over by the HA manager's call (rule 10). */
	ctl_ask("giveup " FLOAT_IP "\n", reply, sizeof(reply));
	assert_non_null(strstr(reply, "\"ok\": true"));
	pthread_mutex_lock(&cb_lock);
	before = sm_notify_count;
	pthread_mutex_unlock(&cb_lock);
	ctl_ask("takeover " FLOAT_IP "\n", reply, sizeof(reply));
	assert_non_null(strstr(reply, "1 host to notify"));
	st2 = notify_from_float(before);
	assert_true(st2 > st1);
	ctl_ask("takeover " FLOAT_IP "\n", reply, sizeof(reply));
	assert_non_null(strstr(reply, "already"));
	/* Its grace is the server's: the reclaim through the address is
	 * granted, a new lock through another waits (grace.c rule 3). */
	f = tcp_client_between("127.0.0.1", FLOAT_IP);
	assert_non_null(f);
	clnt_destroy(nlm4);
	nlm4 = tcp_client(nlm_port, NLM_PROG, NLM4_VERS);
	assert_non_null(nlm4);
	assert_int_equal(lock4_via(f, "hostF", 7, true, false, true, 0, 10),
			 NLM4_GRANTED);
	assert_int_equal(lock4("hostG", 9, true, false, 100, 10),
			 NLM4_DENIED_GRACE_PERIOD);
	for (int i = 0; i < 600; i++) {
		st = lock4("hostG", 9, true, false, 0, 10);
		if (st != NLM4_DENIED_GRACE_PERIOD)
			break;
		usleep(100000);
	}
	assert_int_equal(st, NLM4_DENIED); /* the reclaimed lock holds */
	/* Giving the address up frees the locks taken through it. */
	ctl_ask("giveup " FLOAT_IP "\n", reply, sizeof(reply));
	assert_non_null(strstr(reply, "locks of 1 host freed"));
	assert_int_equal(lock4("hostG", 9, true, false, 0, 10), NLM4_GRANTED);
	assert_int_equal(unlock4("hostG", 9, 0, 0), NLM4_GRANTED);
	ctl_ask("check\n", reply, sizeof(reply));
	assert_non_null(strstr(reply, "\"ok\": true"));
	clnt_destroy(f);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(registered),	cmocka_unit_test(exclusive),
	    cmocka_unit_test(shared),		cmocka_unit_test(split),
	    cmocka_unit_test(blocking_granted), cmocka_unit_test(cancel),
	    cmocka_unit_test(free_all_host),	cmocka_unit_test(version1),
	    cmocka_unit_test(stale_handle),	cmocka_unit_test(granted_refused),
	    cmocka_unit_test(lock_msg_udp),	cmocka_unit_test(flood),
	    cmocka_unit_test(nsm_registered),	cmocka_unit_test(restart_grace),
	    cmocka_unit_test(sm_notify_frees),	cmocka_unit_test(takeover),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	server_bin = argv[1];
	return cmocka_run_group_tests(tests, setup, teardown);
}
