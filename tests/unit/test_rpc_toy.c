/* SPDX-License-Identifier: Apache-2.0 */
/* test_rpc_toy.c - the RPC layer alone (rpc/), serving a toy program of this
 * test's own, called by libtirpc's client over TCP and UDP.
 *
 * It links the rpc library and nothing of NFS, MOUNT, the lock manager or
 * the union engine (tests/CMakeLists.txt gives it no include path of theirs),
 * so it shows that the layer knows no program: the toy registers itself
 * (rpc_svc_register) on a service of its own, dispatches its own calls
 * (its dispatcher hangs a context on the request and counts), and the layer
 * answers what is not served with the RPC errors RFC 5531 names.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rpc.h"

#define TOY_PROG	0x20000777u
#define TOY_VERS	1u
#define TOY_NULL	0u
#define TOY_ADD		1u
#define TOY_ECHO	2u
#define TOY_ECHO_MAX	256u
#define TOY_UNKNOWN_PRC 9u

struct toy_pair {
	uint32_t a, b;
};

static bool_t xdr_toy_pair(XDR *x, struct toy_pair *p)
{
	return xdr_u_int(x, &p->a) && xdr_u_int(x, &p->b);
}

/* A bounded string, as a program's own wire code bounds its arguments. */
static bool_t xdr_toy_string(XDR *x, char **s)
{
	return xdr_string(x, s, TOY_ECHO_MAX);
}

/* No arguments, no results (xdr_void as libtirpc's xdrproc_t). */
static bool_t xdr_toy_void(XDR *x, void *p)
{
	(void)x;
	(void)p;
	return TRUE;
}

/* What the toy's dispatcher keeps per call, and in all. */
struct toy_ctx {
	uint32_t seen_proc;
};
static atomic_uint toy_dispatched, toy_ctx_seen;

static void toy_null(struct rpc_req *rq, void *args, void *res)
{
	(void)args;
	(void)res;
	if (rq->ctx)
		atomic_fetch_add(&toy_ctx_seen, 1);
}

static void toy_add(struct rpc_req *rq, void *args, void *res)
{
	const struct toy_pair *p = args;
	struct toy_ctx *ctx = rq->ctx;

	if (ctx && ctx->seen_proc == rq->proc)
		atomic_fetch_add(&toy_ctx_seen, 1);
	*(uint32_t *)res = p->a + p->b;
}

/* Echoes its argument from the request's arena (freed after the reply). */
static void toy_echo(struct rpc_req *rq, void *args, void *res)
{
	const char *in = *(char **)args;
	size_t n = strlen(in);
	char *out = rpc_arena_alloc(rq->arena, n + 1);

	if (out)
		memcpy(out, in, n + 1);
	*(char **)res = out ? out : "";
}

/* The toy's own dispatcher, as a program with state of its own has: a
 * context on the request for its handlers, a count of its calls. */
static void toy_dispatch(struct rpc_call *call, struct rpc_req *rq)
{
	struct toy_ctx ctx = {.seen_proc = rq->proc};

	assert_ptr_equal(rq->arg, &toy_dispatched);
	rq->ctx = &ctx;
	rpc_call_run(call);
	rq->ctx = NULL;
	atomic_fetch_add(&toy_dispatched, 1);
}

static const struct rpc_proc toy_procs[] = {
    [TOY_NULL] = {.name = "NULL", .handler = toy_null, .idempotent = true},
    [TOY_ADD] = {.name = "ADD",
		 .decode_args = (xdrproc_t)xdr_toy_pair,
		 .args_size = sizeof(struct toy_pair),
		 .encode_res = (xdrproc_t)xdr_u_int,
		 .res_size = sizeof(uint32_t),
		 .handler = toy_add,
		 .idempotent = true},
    [TOY_ECHO] = {.name = "ECHO",
		  .decode_args = (xdrproc_t)xdr_toy_string,
		  .args_size = sizeof(char *),
		  .encode_res = (xdrproc_t)xdr_toy_string,
		  .res_size = sizeof(char *),
		  .handler = toy_echo,
		  .idempotent = true},
};

static const struct rpc_program toy_program = {
    .name = "TOY",
    .prog = TOY_PROG,
    .vers = TOY_VERS,
    .procs = toy_procs,
    .nprocs = sizeof(toy_procs) / sizeof(toy_procs[0]),
    .dispatch = toy_dispatch,
};

static struct rpc_svc *svc;
static struct rpc_loop *loop;
static pthread_t loop_thread;
static uint16_t toy_port;

static void *run_loop(void *arg)
{
	(void)arg;
	rpc_loop_run(loop);
	return NULL;
}

static int setup(void **state)
{
	static const struct rpc_service services[] = {{"toy", 0}};
	const struct rpc_loop_config cfg = {
	    .bind_addr = "127.0.0.1",
	    .nthreads = 2,
	    .services = services,
	    .nservices = 1,
	};
	char err[256];

	(void)state;
	rpc_log_level = RPC_LOG_ERR; /* the refused calls log at info */
	if (rpc_svc_new(64, &svc) < 0 ||
	    rpc_svc_register(svc, &toy_program, "toy", &toy_dispatched) < 0)
		return -1;
	if (rpc_loop_new(svc, &cfg, &loop, err, sizeof(err)) < 0) {
		fprintf(stderr, "rpc_loop_new: %s\n", err);
		return -1;
	}
	toy_port = rpc_loop_port(loop, "toy");
	if (toy_port == 0 || rpc_svc_port(svc, TOY_PROG, TOY_VERS) != toy_port)
		return -1;
	return pthread_create(&loop_thread, NULL, run_loop, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	rpc_loop_stop(loop);
	pthread_join(loop_thread, NULL);
	rpc_loop_free(loop);
	rpc_svc_free(svc);
	return 0;
}

/* A libtirpc client of PROG, VERS on the toy's port over PROTO. */
static CLIENT *toy_client(int proto, uint32_t prog, uint32_t vers)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(toy_port)};
	int sock = RPC_ANYSOCK;
	CLIENT *c;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (proto == IPPROTO_TCP)
		c = clnttcp_create(&sin, prog, vers, &sock, 0, 0);
	else
		c = clntudp_create(&sin, prog, vers, (struct timeval){1, 0}, &sock);
	assert_non_null(c);
	return c;
}

static enum clnt_stat call(CLIENT *c, uint32_t proc, xdrproc_t in, void *args,
			   xdrproc_t out, void *res)
{
	struct timeval tmo = {10, 0};

	return clnt_call(c, proc, in, args, out, res, tmo);
}

/* NULL, ADD and ECHO over PROTO, each through the toy's own dispatcher. */
static void toy_calls(int proto)
{
	CLIENT *c = toy_client(proto, TOY_PROG, TOY_VERS);
	struct toy_pair p = {40, 2};
	char *msg = "over the toy's own program", *echoed = NULL;
	unsigned before = atomic_load(&toy_dispatched), seen = atomic_load(&toy_ctx_seen);
	uint32_t sum = 0;

	assert_int_equal(call(c, TOY_NULL, (xdrproc_t)xdr_toy_void, NULL,
			      (xdrproc_t)xdr_toy_void, NULL),
			 RPC_SUCCESS);
	assert_int_equal(
	    call(c, TOY_ADD, (xdrproc_t)xdr_toy_pair, &p, (xdrproc_t)xdr_u_int, &sum),
	    RPC_SUCCESS);
	assert_int_equal(sum, 42);
	assert_int_equal(call(c, TOY_ECHO, (xdrproc_t)xdr_toy_string, &msg,
			      (xdrproc_t)xdr_toy_string, &echoed),
			 RPC_SUCCESS);
	assert_string_equal(echoed, msg);
	clnt_freeres(c, (xdrproc_t)xdr_toy_string, (char *)&echoed);
	assert_int_equal(atomic_load(&toy_dispatched) - before, 3);
	assert_int_equal(atomic_load(&toy_ctx_seen) - seen, 2); /* NULL's, ADD's */
	clnt_destroy(c);
}

static void test_tcp(void **state)
{
	(void)state;
	toy_calls(IPPROTO_TCP);
}

static void test_udp(void **state)
{
	(void)state;
	toy_calls(IPPROTO_UDP);
}

/* What is not served: another version (PROG_MISMATCH, with the range
 * served), an unknown procedure (PROC_UNAVAIL), another program
 * (PROG_UNAVAIL), arguments that do not decode (GARBAGE_ARGS). */
static void refusals(int proto)
{
	CLIENT *c = toy_client(proto, TOY_PROG, TOY_VERS + 1);
	struct rpc_err e;
	uint32_t n = 7, sum;

	assert_int_equal(call(c, TOY_NULL, (xdrproc_t)xdr_toy_void, NULL,
			      (xdrproc_t)xdr_toy_void, NULL),
			 RPC_PROGVERSMISMATCH);
	clnt_geterr(c, &e);
	assert_int_equal(e.re_vers.low, TOY_VERS);
	assert_int_equal(e.re_vers.high, TOY_VERS);
	clnt_destroy(c);
	c = toy_client(proto, TOY_PROG, TOY_VERS);
	assert_int_equal(call(c, TOY_UNKNOWN_PRC, (xdrproc_t)xdr_toy_void, NULL,
			      (xdrproc_t)xdr_toy_void, NULL),
			 RPC_PROCUNAVAIL);
	/* one word where ADD takes two */
	assert_int_equal(
	    call(c, TOY_ADD, (xdrproc_t)xdr_u_int, &n, (xdrproc_t)xdr_u_int, &sum),
	    RPC_CANTDECODEARGS);
	clnt_destroy(c);
	c = toy_client(proto, TOY_PROG + 1, TOY_VERS);
	assert_int_equal(call(c, TOY_NULL, (xdrproc_t)xdr_toy_void, NULL,
			      (xdrproc_t)xdr_toy_void, NULL),
			 RPC_PROGUNAVAIL);
	clnt_destroy(c);
}

static void test_refusals_tcp(void **state)
{
	(void)state;
	refusals(IPPROTO_TCP);
}

static void test_refusals_udp(void **state)
{
	(void)state;
	refusals(IPPROTO_UDP);
}

/* The registry: a program and version once, the service's port for it. */
static void test_registry(void **state)
{
	(void)state;
	assert_int_equal(rpc_svc_register(svc, &toy_program, "toy", NULL), -EEXIST);
	assert_int_equal(rpc_svc_nprograms(svc), 1);
	assert_ptr_equal(rpc_svc_program(svc, 0), &toy_program);
	assert_null(rpc_svc_program(svc, 1));
	assert_int_equal(rpc_svc_port(svc, TOY_PROG, 0), toy_port);
	assert_int_equal(rpc_svc_port(svc, TOY_PROG + 1, 0), 0);
	assert_int_equal(rpc_svc_service_port(svc, "toy"), toy_port);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tcp),		 cmocka_unit_test(test_udp),
	    cmocka_unit_test(test_refusals_tcp), cmocka_unit_test(test_refusals_udp),
	    cmocka_unit_test(test_registry),
	};

	return cmocka_run_group_tests_name("rpc_toy", tests, setup, teardown);
}
