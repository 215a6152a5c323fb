/* SPDX-License-Identifier: Apache-2.0 */
/* test_pmap.c - the built-in portmapper (server/pmap.c), asked with
 * libtirpc's client calls in a private network namespace with no rpcbind
 * (with_rpcbind.sh --none): a server started with its defaults takes port
 * 111 and answers GETPORT, DUMP and GETADDR for its own programs on the
 * ports it bound, refuses SET and UNSET, gives no reply to CALLIT; a second
 * server in the namespace finds 111 taken, says so and serves all the same.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <rpc/rpc.h> /* first: the protocol headers need its types */

#include <rpc/pmap_clnt.h>
#include <rpc/pmap_prot.h>
#include <rpc/rpcb_clnt.h>
#include <rpc/rpcb_prot.h>

#include "start_server.h"

#define NFS_PROG  100003
#define NLM_PROG  100021
#define NSM_PROG  100024
#define NLM_PORT  4045 /* fixed, so that the answers can be checked */
#define NSM_PORT  4046
#define NLM_PORTS "4045"
#define NSM_PORTS "4046"

/* xdr_void, cast through a function type without a prototype */
#define VOID ((xdrproc_t)(void (*)(void))xdr_void)

static const char *server_bin;
static char tmp[64];
static struct test_server first, second;

static struct sockaddr_in loopback(int port)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sin;
}

/* A client of PROG VERS on port PORT of loopback, over TCP or UDP. */
static CLIENT *client(int port, unsigned long prog, unsigned long vers, bool tcp)
{
	struct sockaddr_in sin = loopback(port);
	struct timeval wait = {1, 0};
	int sock = RPC_ANYSOCK;

	if (tcp)
		return clnttcp_create(&sin, prog, vers, &sock, 0, 0);
	return clntudp_create(&sin, prog, vers, wait, &sock);
}

static int start(const char *name, const char *const *extra, struct test_server *s)
{
	char st[128], low[160];
	const char *args[8] = {low};
	size_t n = 1;

	snprintf(low, sizeof(low), "--lowerdir=%s/lower", tmp);
	for (size_t i = 0; extra && extra[i] && n < 7; i++)
		args[n++] = extra[i];
	snprintf(st, sizeof(st), "%s/%s", tmp, name);
	return test_server_start_portmapper(server_bin, st, args, s);
}

static int setup(void **state)
{
	static const char *const fixed[] = {"--nlm-port=" NLM_PORTS,
					    "--nsm-port=" NSM_PORTS, NULL};
	char lower[96];

	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/test_pmap.XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(lower, sizeof(lower), "%s/lower", tmp);
	mkdir(lower, 0755);
	return start("first", fixed, &first);
}

static int teardown(void **state)
{
	(void)state;
	test_server_stop(&second);
	test_server_stop(&first);
	test_tmp_remove(tmp, "/tmp/test_pmap.");
	return 0;
}

/* ---- the tests ---- */

static unsigned short getport(unsigned long prog, unsigned long vers, int proto)
{
	struct sockaddr_in sin = loopback(PMAPPORT);

	return pmap_getport(&sin, prog, vers, (unsigned)proto);
}

static void getport_own_programs(void **state)
{
	(void)state;
	assert_int_equal(getport(NFS_PROG, 3, IPPROTO_TCP), first.nfs_port);
	assert_int_equal(getport(NFS_PROG, 3, IPPROTO_UDP), first.nfs_port);
	assert_int_equal(getport(100005, 3, IPPROTO_TCP), first.mount_port);
	assert_int_equal(getport(100005, 3, IPPROTO_UDP), first.mount_port);
	assert_int_equal(getport(NLM_PROG, 4, IPPROTO_TCP), NLM_PORT);
	assert_int_equal(getport(NLM_PROG, 4, IPPROTO_UDP), NLM_PORT);
	assert_int_equal(getport(NLM_PROG, 1, IPPROTO_UDP), NLM_PORT);
	assert_int_equal(getport(NSM_PROG, 1, IPPROTO_TCP), NSM_PORT);
	assert_int_equal(getport(NSM_PROG, 1, IPPROTO_UDP), NSM_PORT);
	assert_int_equal(getport(PMAPPROG, 2, IPPROTO_TCP), PMAPPORT);
	/* rpcbind's answer to a version not served: another one's port */
	assert_int_equal(getport(NFS_PROG, 2, IPPROTO_TCP), first.nfs_port);
	assert_int_equal(getport(100099, 1, IPPROTO_TCP), 0);
}

/* The port DUMP gives for PROG VERS PROT; -1 when it lists none. */
static int dumped(struct pmaplist *l, unsigned long prog, unsigned long vers,
		  unsigned long prot)
{
	for (; l; l = l->pml_next)
		if (l->pml_map.pm_prog == prog && l->pml_map.pm_vers == vers &&
		    l->pml_map.pm_prot == prot)
			return (int)l->pml_map.pm_port;
	return -1;
}

static void dump_lists_them(void **state)
{
	struct sockaddr_in sin = loopback(PMAPPORT);
	struct pmaplist *l = pmap_getmaps(&sin), *p;
	int n = 0;

	(void)state;
	assert_non_null(l);
	for (p = l; p; p = p->pml_next)
		n++;
	assert_int_equal(n, 18); /* 9 program versions, tcp and udp */
	assert_int_equal(dumped(l, NFS_PROG, 3, IPPROTO_TCP), first.nfs_port);
	assert_int_equal(dumped(l, NFS_PROG, 3, IPPROTO_UDP), first.nfs_port);
	assert_int_equal(dumped(l, 100005, 3, IPPROTO_UDP), first.mount_port);
	assert_int_equal(dumped(l, NLM_PROG, 4, IPPROTO_TCP), NLM_PORT);
	assert_int_equal(dumped(l, NLM_PROG, 3, IPPROTO_UDP), NLM_PORT);
	assert_int_equal(dumped(l, NSM_PROG, 1, IPPROTO_TCP), NSM_PORT);
	assert_int_equal(dumped(l, PMAPPROG, 4, IPPROTO_UDP), PMAPPORT);
	xdr_free((xdrproc_t)xdr_pmaplist, (char *)&l);
}

/* RPCBPROC (GETADDR or GETVERSADDR) of version VERS for PROG VERS2. */
static char *rpcb_call(unsigned long vers, rpcproc_t proc, rpcprog_t prog,
		       rpcvers_t vers2)
{
	CLIENT *c = client(PMAPPORT, RPCBPROG, vers, true);
	rpcb args = {.r_prog = prog,
		     .r_vers = vers2,
		     .r_netid = "tcp",
		     .r_addr = "",
		     .r_owner = ""};
	struct timeval t = {5, 0};
	char *uaddr = NULL;

	assert_non_null(c);
	assert_int_equal(clnt_call(c, proc, (xdrproc_t)xdr_rpcb, (char *)&args,
				   (xdrproc_t)xdr_wrapstring, (char *)&uaddr, t),
			 RPC_SUCCESS);
	clnt_destroy(c);
	return uaddr;
}

static void getaddr_gives_uaddr(void **state)
{
	struct netconfig *nc = getnetconfigent("udp");
	struct sockaddr_in got;
	struct netbuf nb = {.maxlen = sizeof(got), .buf = &got};
	char want[64], *u;

	(void)state;
	snprintf(want, sizeof(want), "127.0.0.1.%d.%d", first.nfs_port >> 8,
		 first.nfs_port & 0xff);
	u = rpcb_call(RPCBVERS, RPCBPROC_GETADDR, NFS_PROG, 3);
	assert_string_equal(u, want);
	free(u);
	u = rpcb_call(RPCBVERS4, RPCBPROC_GETADDR, NFS_PROG, 3);
	assert_string_equal(u, want);
	free(u);
	/* GETVERSADDR: that version only */
	u = rpcb_call(RPCBVERS4, RPCBPROC_GETVERSADDR, NFS_PROG, 2);
	assert_string_equal(u, "");
	free(u);
	/* and libtirpc's own look-up of it */
	assert_non_null(nc);
	assert_true(rpcb_getaddr(NLM_PROG, 4, nc, &nb, "127.0.0.1"));
	assert_int_equal(ntohs(got.sin_port), NLM_PORT);
	freenetconfigent(nc);
}

/* UADDR2TADDR and TADDR2UADDR: a uaddr to the host's socket address and
 * back; not an address, the empty answer. */
static void uaddr_translations(void **state)
{
	CLIENT *c = client(PMAPPORT, RPCBPROG, RPCBVERS, false);
	char *u = "127.0.0.1.8.1", *back = NULL, *junk = "no.such";
	struct netbuf nb = {0};
	struct sockaddr_in sin;
	struct timeval t = {5, 0};

	(void)state;
	assert_non_null(c);
	assert_int_equal(clnt_call(c, RPCBPROC_UADDR2TADDR, (xdrproc_t)xdr_wrapstring,
				   (char *)&u, (xdrproc_t)xdr_netbuf, (char *)&nb, t),
			 RPC_SUCCESS);
	assert_int_equal(nb.len, sizeof(sin));
	memcpy(&sin, nb.buf, sizeof(sin));
	assert_int_equal(sin.sin_family, AF_INET);
	assert_int_equal(ntohs(sin.sin_port), 2049);
	assert_int_equal(ntohl(sin.sin_addr.s_addr), INADDR_LOOPBACK);
	assert_int_equal(clnt_call(c, RPCBPROC_TADDR2UADDR, (xdrproc_t)xdr_netbuf,
				   (char *)&nb, (xdrproc_t)xdr_wrapstring, (char *)&back,
				   t),
			 RPC_SUCCESS);
	assert_string_equal(back, u);
	free(back);
	free(nb.buf);
	nb = (struct netbuf){0};
	assert_int_equal(clnt_call(c, RPCBPROC_UADDR2TADDR, (xdrproc_t)xdr_wrapstring,
				   (char *)&junk, (xdrproc_t)xdr_netbuf, (char *)&nb, t),
			 RPC_SUCCESS);
	assert_int_equal(nb.len, 0);
	free(nb.buf);
	clnt_destroy(c);
}

static void set_refused(void **state)
{
	CLIENT *v2 = client(PMAPPORT, PMAPPROG, PMAPVERS, false);
	CLIENT *v3 = client(PMAPPORT, RPCBPROG, RPCBVERS, true);
	struct pmap pm = {100099, 1, IPPROTO_TCP, 999};
	rpcb rb = {.r_prog = 100099,
		   .r_vers = 1,
		   .r_netid = "tcp",
		   .r_addr = "127.0.0.1.3.231",
		   .r_owner = "superuser"};
	struct timeval t = {5, 0};
	bool_t ok = TRUE;

	(void)state;
	assert_non_null(v2);
	assert_non_null(v3);
	assert_int_equal(clnt_call(v2, PMAPPROC_SET, (xdrproc_t)xdr_pmap, (char *)&pm,
				   (xdrproc_t)xdr_bool, (char *)&ok, t),
			 RPC_SUCCESS);
	assert_false(ok);
	ok = TRUE;
	assert_int_equal(clnt_call(v3, RPCBPROC_SET, (xdrproc_t)xdr_rpcb, (char *)&rb,
				   (xdrproc_t)xdr_bool, (char *)&ok, t),
			 RPC_SUCCESS);
	assert_false(ok);
	ok = TRUE;
	pm.pm_prog = NFS_PROG;
	assert_int_equal(clnt_call(v2, PMAPPROC_UNSET, (xdrproc_t)xdr_pmap, (char *)&pm,
				   (xdrproc_t)xdr_bool, (char *)&ok, t),
			 RPC_SUCCESS);
	assert_false(ok);
	assert_int_equal(getport(100099, 1, IPPROTO_TCP), 0);
	assert_int_equal(getport(NFS_PROG, 3, IPPROTO_TCP), first.nfs_port);
	clnt_destroy(v2);
	clnt_destroy(v3);
}

/* CALLIT is not forwarded and gets no reply; INDIRECT is not served. */
static void callit_unanswered(void **state)
{
	CLIENT *v2 = client(PMAPPORT, PMAPPROG, PMAPVERS, false);
	CLIENT *v4 = client(PMAPPORT, RPCBPROG, RPCBVERS4, true);
	struct timeval t = {1, 0};

	(void)state;
	assert_non_null(v2);
	assert_non_null(v4);
	assert_int_equal(clnt_call(v2, PMAPPROC_CALLIT, VOID, NULL, VOID, NULL, t),
			 RPC_TIMEDOUT);
	assert_int_equal(clnt_call(v4, RPCBPROC_INDIRECT, VOID, NULL, VOID, NULL, t),
			 RPC_PROCUNAVAIL);
	clnt_destroy(v2);
	clnt_destroy(v4);
}

static bool log_says(const char *name, const char *what)
{
	char path[160], line[512];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/stderr", tmp, name);
	f = fopen(path, "r");
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* A second server finds 111 taken, says so, and serves; it answers no
 * portmapper call on its own ports, and the first one's map is unchanged. */
static void second_server_serves(void **state)
{
	struct timeval t = {5, 0};
	CLIENT *c;

	(void)state;
	assert_int_equal(start("second", NULL, &second), 0);
	assert_true(log_says("second", "port 111 is taken"));
	assert_true(log_says("first", "portmapper on port 111"));
	c = client(second.nfs_port, NFS_PROG, 3, true);
	assert_non_null(c);
	assert_int_equal(clnt_call(c, 0, VOID, NULL, VOID, NULL, t), RPC_SUCCESS);
	clnt_destroy(c);
	c = client(second.nfs_port, PMAPPROG, PMAPVERS, true);
	assert_non_null(c);
	assert_int_equal(clnt_call(c, 0, VOID, NULL, VOID, NULL, t), RPC_PROGUNAVAIL);
	clnt_destroy(c);
	assert_int_equal(getport(NFS_PROG, 3, IPPROTO_TCP), first.nfs_port);
	assert_true(test_server_alive(&first));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(getport_own_programs), cmocka_unit_test(dump_lists_them),
	    cmocka_unit_test(getaddr_gives_uaddr),  cmocka_unit_test(set_refused),
	    cmocka_unit_test(uaddr_translations),   cmocka_unit_test(callit_unanswered),
	    cmocka_unit_test(second_server_serves),
	};
	const char *inner = getenv("WITH_RPCBIND_NONE");

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	/* Port 111 of the host is not the test's to take. */
	if (!inner || strcmp(inner, "1") != 0) {
		fprintf(stderr, "test_pmap: run under with_rpcbind.sh --none; skipped\n");
		return 77;
	}
	server_bin = argv[1];
	return cmocka_run_group_tests(tests, setup, teardown);
}
