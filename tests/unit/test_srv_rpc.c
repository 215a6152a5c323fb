/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_rpc.c - rpc_process driven with hand-built call records: the RPC
 * errors of RFC 5531 (version, auth, program, procedure, arguments) and the
 * MOUNT v3 program over a read-only union in temp dirs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "nfs.h"
#include "serve.h"
#include "test_fs.h"

static char tmp_root[64], lower[128], upper[128], work[128], state_dir[128];
static struct srv_daemon srv_d;
static struct sockaddr_storage peer;

/* ---- fixture ---- */

static int mkdir_in(const char *dir, const char *rel)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	return mkdir(p, 0755);
}

static int chmod_in(const char *dir, const char *rel, mode_t mode)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	return chmod(p, mode);
}

static int file_in(const char *dir, const char *rel)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	f = fopen(p, "w");
	return f && fclose(f) == 0 ? 0 : -1;
}

static int setup(void **state)
{
	char err[512];
	char *lowers[] = {lower};
	struct srv_export_opts eo = {.path = "/",
				     .upperdir = upper,
				     .workdir = work,
				     .lowerdirs = lowers,
				     .nlower = 1};
	struct srv_opts o = {.state_dir = state_dir, .exports = &eo, .nexports = 1};
	struct sockaddr_in *sin = (struct sockaddr_in *)&peer;
	int rc;

	(void)state;
	snprintf(tmp_root, sizeof(tmp_root), "/tmp/test_srv_rpc.XXXXXX");
	if (!mkdtemp(tmp_root))
		return -1;
	snprintf(lower, sizeof(lower), "%s/lower", tmp_root);
	snprintf(state_dir, sizeof(state_dir), "%s/state", tmp_root);
	snprintf(upper, sizeof(upper), "%s/upper", tmp_root);
	snprintf(work, sizeof(work), "%s/work", tmp_root);
	if (mkdir(lower, 0755) < 0 || mkdir(upper, 0755) < 0 || mkdir(work, 0755) < 0)
		return -1;
	/* a directory every caller may write in (the calls run as uid 1000) */
	if (mkdir_in(lower, "pub") < 0 || chmod_in(lower, "pub", 0777) < 0)
		return -1;
	if (mkdir_in(lower, "sub") < 0 || mkdir_in(lower, "sub/deeper") < 0 ||
	    file_in(lower, "sub/file") < 0)
		return -1;
	o.cfg.nthreads = 1;
	rc = srv_daemon_open(&srv_d, &o, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "srv_open: %s\n", err);
		return -1;
	}
	sin->sin_family = AF_INET;
	sin->sin_port = htons(700);
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	rpc_log_level = RPC_LOG_ERR; /* rejected calls log at info: keep output clean */
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	srv_daemon_close(&srv_d);
	t_rm_rf(tmp_root);
	return 0;
}

/* ---- building calls ---- */

struct call_spec {
	uint32_t xid, rpcvers, prog, vers, proc;
	uint32_t cred_flavor;
	const uint8_t *cred_body; /* NULL: a valid AUTH_SYS body for SYS, else empty */
	uint32_t cred_len;
	xdrproc_t args_proc;
	void *args;
};

static struct call_spec spec(uint32_t prog, uint32_t vers, uint32_t proc)
{
	return (struct call_spec){.xid = 0x1234,
				  .rpcvers = 2,
				  .prog = prog,
				  .vers = vers,
				  .proc = proc,
				  .cred_flavor = AUTH_SYS};
}

/* An authsys_parms body: stamp, "tester", uid 1000, gid 100, groups {100, 27}. */
static uint32_t authsys_body(uint8_t *buf, size_t cap, uint32_t ngroups)
{
	XDR x;
	uint32_t stamp = 7, uid = 1000, gid = 100, g = 27;
	char *machine = "tester";
	uint32_t pos;

	xdrmem_create(&x, (char *)buf, (u_int)cap, XDR_ENCODE);
	assert_true(xdr_u_int(&x, &stamp));
	assert_true(xdr_string(&x, &machine, 255));
	assert_true(xdr_u_int(&x, &uid));
	assert_true(xdr_u_int(&x, &gid));
	assert_true(xdr_u_int(&x, &ngroups));
	for (uint32_t i = 0; i < ngroups; i++)
		assert_true(xdr_u_int(&x, &g));
	pos = xdr_getpos(&x);
	xdr_destroy(&x);
	return pos;
}

static size_t build_call(const struct call_spec *s, uint8_t *buf, size_t cap)
{
	uint8_t body[512];
	uint32_t call = CALL, len = s->cred_len, none = AUTH_NONE, zero = 0;
	uint32_t flavor = s->cred_flavor;
	const uint8_t *b = s->cred_body;
	XDR x;
	size_t pos;

	if (!b && flavor == AUTH_SYS) {
		len = authsys_body(body, sizeof(body), 2);
		b = body;
	}
	xdrmem_create(&x, (char *)buf, (u_int)cap, XDR_ENCODE);
	assert_true(xdr_u_int(&x, (u_int *)&s->xid));
	assert_true(xdr_u_int(&x, &call));
	assert_true(xdr_u_int(&x, (u_int *)&s->rpcvers));
	assert_true(xdr_u_int(&x, (u_int *)&s->prog));
	assert_true(xdr_u_int(&x, (u_int *)&s->vers));
	assert_true(xdr_u_int(&x, (u_int *)&s->proc));
	assert_true(xdr_u_int(&x, &flavor));
	assert_true(xdr_u_int(&x, &len));
	if (len)
		assert_true(xdr_opaque(&x, (char *)b, len));
	assert_true(xdr_u_int(&x, &none)); /* verifier */
	assert_true(xdr_u_int(&x, &zero));
	if (s->args_proc)
		assert_true(s->args_proc(&x, s->args));
	pos = xdr_getpos(&x);
	xdr_destroy(&x);
	return pos;
}

/* ---- reading replies ---- */

struct parsed_reply {
	uint32_t xid, reply_stat;
	uint32_t stat; /* accept_stat, reject_stat */
	uint32_t auth_stat;
	uint32_t low, high;
	XDR x; /* positioned at the results when stat == SUCCESS */
};

static void parse_reply(const struct rpc_buf *b, struct parsed_reply *r)
{
	uint32_t mtype, vflavor, vlen;

	memset(r, 0, sizeof(*r));
	xdrmem_create(&r->x, (char *)b->data, (u_int)b->len, XDR_DECODE);
	assert_true(xdr_u_int(&r->x, &r->xid));
	assert_true(xdr_u_int(&r->x, &mtype));
	assert_int_equal(mtype, REPLY);
	assert_true(xdr_u_int(&r->x, &r->reply_stat));
	if (r->reply_stat == MSG_ACCEPTED) {
		assert_true(xdr_u_int(&r->x, &vflavor));
		assert_true(xdr_u_int(&r->x, &vlen));
		assert_int_equal(vflavor, AUTH_NONE);
		assert_int_equal(vlen, 0);
		assert_true(xdr_u_int(&r->x, &r->stat));
		if (r->stat == PROG_MISMATCH) {
			assert_true(xdr_u_int(&r->x, &r->low));
			assert_true(xdr_u_int(&r->x, &r->high));
		}
		return;
	}
	assert_int_equal(r->reply_stat, MSG_DENIED);
	assert_true(xdr_u_int(&r->x, &r->stat));
	if (r->stat == RPC_MISMATCH) {
		assert_true(xdr_u_int(&r->x, &r->low));
		assert_true(xdr_u_int(&r->x, &r->high));
	} else {
		assert_int_equal(r->stat, AUTH_ERROR);
		assert_true(xdr_u_int(&r->x, &r->auth_stat));
	}
}

/* Runs the call record and parses its reply (which must exist). */
static void roundtrip(const uint8_t *call, size_t len, struct rpc_buf *reply,
		      struct parsed_reply *r)
{
	assert_true(rpc_process(srv_d.svc, call, len, &peer, sizeof(struct sockaddr_in),
				IPPROTO_TCP, reply));
	parse_reply(reply, r);
}

static void call_spec_rt(const struct call_spec *s, struct rpc_buf *reply,
			 struct parsed_reply *r)
{
	uint8_t buf[4096];

	roundtrip(buf, build_call(s, buf, sizeof(buf)), reply, r);
	assert_int_equal(r->xid, s->xid);
}

/* ---- RPC errors ---- */

static void test_null_call(void **state)
{
	struct call_spec s = spec(NFS_PROGRAM, NFS_V3, 0);
	struct rpc_buf reply = {0};
	struct parsed_reply r;

	(void)state;
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.reply_stat, MSG_ACCEPTED);
	assert_int_equal(r.stat, SUCCESS);
	assert_int_equal(reply.len, 24); /* header only: NULL returns void */
	s = spec(MOUNT_PROGRAM, MOUNT_V3, 0);
	s.cred_flavor = AUTH_NONE;
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.stat, SUCCESS);
	rpc_buf_free(&reply);
}

static void test_rpc_version_mismatch(void **state)
{
	struct call_spec s = spec(NFS_PROGRAM, NFS_V3, 0);
	struct rpc_buf reply = {0};
	struct parsed_reply r;

	(void)state;
	s.rpcvers = 3;
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.reply_stat, MSG_DENIED);
	assert_int_equal(r.stat, RPC_MISMATCH);
	assert_int_equal(r.low, 2);
	assert_int_equal(r.high, 2);
	rpc_buf_free(&reply);
}

static void test_prog_unavail(void **state)
{
	struct call_spec s = spec(100099, 1, 0);
	struct rpc_buf reply = {0};
	struct parsed_reply r;

	(void)state;
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.reply_stat, MSG_ACCEPTED);
	assert_int_equal(r.stat, PROG_UNAVAIL);
	rpc_buf_free(&reply);
}

static void test_prog_mismatch(void **state)
{
	const uint32_t tries[][2] = {
	    {NFS_PROGRAM, 2}, {NFS_PROGRAM, 4}, {MOUNT_PROGRAM, 1}};
	struct rpc_buf reply = {0};
	struct parsed_reply r;
	struct call_spec s;

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		s = spec(tries[i][0], tries[i][1], 0);
		call_spec_rt(&s, &reply, &r);
		assert_int_equal(r.reply_stat, MSG_ACCEPTED);
		assert_int_equal(r.stat, PROG_MISMATCH);
		assert_int_equal(r.low, 3);
		assert_int_equal(r.high, 3);
	}
	rpc_buf_free(&reply);
}

static void test_proc_unavail(void **state)
{
	struct call_spec s = spec(NFS_PROGRAM, NFS_V3, 99);
	struct rpc_buf reply = {0};
	struct parsed_reply r;

	(void)state;
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.stat, PROC_UNAVAIL);
	s = spec(MOUNT_PROGRAM, MOUNT_V3, 6);
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.stat, PROC_UNAVAIL);
	rpc_buf_free(&reply);
}

static void test_garbage_args(void **state)
{
	struct call_spec s = spec(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT);
	struct rpc_buf reply = {0};
	struct parsed_reply r;
	uint8_t buf[256];
	uint32_t n = htonl(100);
	size_t len;

	(void)state;
	/* A dirpath announcing 100 bytes, with 4 present. */
	len = build_call(&s, buf, sizeof(buf));
	memcpy(buf + len, &n, 4);
	memcpy(buf + len + 4, "/abc", 4);
	roundtrip(buf, len + 8, &reply, &r);
	assert_int_equal(r.reply_stat, MSG_ACCEPTED);
	assert_int_equal(r.stat, GARBAGE_ARGS);
	/* No arguments at all, and a path over MNTPATHLEN. */
	roundtrip(buf, len, &reply, &r);
	assert_int_equal(r.stat, GARBAGE_ARGS);
	n = htonl(MNTPATHLEN + 1);
	memcpy(buf + len, &n, 4);
	roundtrip(buf, len + 8, &reply, &r);
	assert_int_equal(r.stat, GARBAGE_ARGS);
	/* NFS GETATTR with a handle announcing 65 bytes. */
	s = spec(NFS_PROGRAM, NFS_V3, 1);
	len = build_call(&s, buf, sizeof(buf));
	n = htonl(65);
	memcpy(buf + len, &n, 4);
	memset(buf + len + 4, 0, 68);
	roundtrip(buf, len + 72, &reply, &r);
	assert_int_equal(r.stat, GARBAGE_ARGS);
	rpc_buf_free(&reply);
}

static void test_auth_flavours(void **state)
{
	const uint32_t weak[] = {AUTH_DH, RPCSEC_GSS, 2 /* AUTH_SHORT */, 7, 390003};
	uint8_t body[512];
	struct call_spec s = spec(NFS_PROGRAM, NFS_V3, 0);
	struct rpc_buf reply = {0};
	struct parsed_reply r;

	(void)state;
	memset(body, 0, sizeof(body));
	for (size_t i = 0; i < sizeof(weak) / sizeof(weak[0]); i++) {
		s.cred_flavor = weak[i];
		s.cred_body = body;
		s.cred_len = 16;
		call_spec_rt(&s, &reply, &r);
		assert_int_equal(r.reply_stat, MSG_DENIED);
		assert_int_equal(r.stat, AUTH_ERROR);
		assert_int_equal(r.auth_stat, AUTH_TOOWEAK);
	}
	/* AUTH_SYS with 17 groups, with a trailing word, and a body over 400. */
	s.cred_flavor = AUTH_SYS;
	s.cred_len = authsys_body(body, sizeof(body), 17);
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.auth_stat, AUTH_BADCRED);
	s.cred_len = authsys_body(body, sizeof(body), 2) + 4;
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.auth_stat, AUTH_BADCRED);
	s.cred_len = 404;
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.auth_stat, AUTH_BADCRED);
	/* A 16-group AUTH_SYS credential is fine. */
	s.cred_len = authsys_body(body, sizeof(body), 16);
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.reply_stat, MSG_ACCEPTED);
	assert_int_equal(r.stat, SUCCESS);
	rpc_buf_free(&reply);
}

static void test_truncated_header(void **state)
{
	struct call_spec s = spec(NFS_PROGRAM, NFS_V3, 0);
	struct rpc_buf reply = {0};
	struct parsed_reply r;
	uint8_t buf[256];
	size_t len = build_call(&s, buf, sizeof(buf));

	(void)state;
	/* No xid, or no message type: nothing to answer. */
	for (size_t cut = 0; cut < 8; cut++)
		assert_false(rpc_process(srv_d.svc, buf, cut, &peer,
					 sizeof(struct sockaddr_in), IPPROTO_UDP,
					 &reply));
	/* A header cut anywhere after the message type: AUTH_ERROR. */
	for (size_t cut = 8; cut < len; cut += 4) {
		roundtrip(buf, cut, &reply, &r);
		assert_int_equal(r.reply_stat, MSG_DENIED);
		assert_int_equal(r.stat, AUTH_ERROR);
	}
	/* An RPC reply sent to us is dropped. */
	buf[7] = REPLY;
	assert_false(rpc_process(srv_d.svc, buf, len, &peer, sizeof(struct sockaddr_in),
				 IPPROTO_UDP, &reply));
	rpc_buf_free(&reply);
}

/* ---- the duplicate request cache ---- */

static nfs_fh3 pub_handle(uint8_t fh[UN_FH_MAX])
{
	struct un_export *ux = srv_d.srv.exports[0]->ux;
	struct un_obj *root, *pub;
	nfs_fh3 h;

	assert_int_equal(un_root(ux, &root), 0);
	assert_int_equal(un_lookup(ux, root, "pub", &pub), 0);
	h.data.data_len = (u_int)un_handle_encode(ux, un_obj_id(pub), fh);
	h.data.data_val = (char *)fh;
	un_obj_put(pub);
	un_obj_put(root);
	return h;
}

static uint32_t mkdir_status(const struct rpc_buf *reply)
{
	struct parsed_reply r;
	uint32_t status;

	parse_reply(reply, &r);
	assert_int_equal(r.stat, SUCCESS);
	assert_true(xdr_u_int(&r.x, &status));
	return status;
}

/* A retransmitted MKDIR (same client, xid and arguments) gets the first reply,
 * byte for byte, instead of a second execution (which would say EXIST); a new
 * xid runs again.  Idempotent procedures are never cached. */
static void test_drc_replays_mkdir(void **state)
{
	uint8_t fh[UN_FH_MAX], buf[1024];
	MKDIR3args a = {.where = {.dir = pub_handle(fh), .name = "dup"}};
	struct call_spec s = spec(NFS_PROGRAM, NFS_V3, NFSPROC3_MKDIR);
	struct rpc_buf first = {0}, again = {0};
	size_t len;

	(void)state;
	s.xid = 0x5150;
	s.args_proc = (xdrproc_t)xdr_MKDIR3args;
	s.args = &a;
	len = build_call(&s, buf, sizeof(buf));
	assert_true(rpc_process(srv_d.svc, buf, len, &peer, sizeof(struct sockaddr_in),
				IPPROTO_TCP, &first));
	assert_int_equal(mkdir_status(&first), NFS3_OK);
	assert_true(rpc_process(srv_d.svc, buf, len, &peer, sizeof(struct sockaddr_in),
				IPPROTO_TCP, &again));
	assert_int_equal(again.len, first.len);
	assert_memory_equal(again.data, first.data, first.len);
	/* Another client port is another client: executed, EXIST. */
	struct sockaddr_storage other = peer;
	((struct sockaddr_in *)&other)->sin_port = htons(701);
	assert_true(rpc_process(srv_d.svc, buf, len, &other, sizeof(struct sockaddr_in),
				IPPROTO_TCP, &again));
	assert_int_equal(mkdir_status(&again), NFS3ERR_EXIST);
	/* A new xid is a new call. */
	s.xid = 0x5151;
	len = build_call(&s, buf, sizeof(buf));
	assert_true(rpc_process(srv_d.svc, buf, len, &peer, sizeof(struct sockaddr_in),
				IPPROTO_TCP, &again));
	assert_int_equal(mkdir_status(&again), NFS3ERR_EXIST);
	rpc_buf_free(&first);
	rpc_buf_free(&again);
}

/* The cache itself: in progress, done, eviction of the oldest done entry. */
static void test_drc_entries(void **state)
{
	struct rpc_drc *d;
	struct rpc_drc_key k1, k2, k3;
	struct rpc_buf out = {0}, r = {.data = (uint8_t *)"reply", .len = 5};

	(void)state;
	assert_int_equal(rpc_drc_new(2, &d), 0);
	rpc_drc_key_init(d, &k1, &peer, 1, NFS_PROGRAM, 3, 9, (const uint8_t *)"a", 1);
	rpc_drc_key_init(d, &k2, &peer, 2, NFS_PROGRAM, 3, 9, (const uint8_t *)"a", 1);
	rpc_drc_key_init(d, &k3, &peer, 1, NFS_PROGRAM, 3, 9, (const uint8_t *)"b", 1);
	assert_int_equal(rpc_drc_begin(d, &k1, &out), RPC_DRC_NEW);
	assert_int_equal(rpc_drc_begin(d, &k1, &out), RPC_DRC_BUSY);
	rpc_drc_done(d, &k1, &r);
	assert_int_equal(rpc_drc_begin(d, &k1, &out), RPC_DRC_REPLAY);
	assert_int_equal(out.len, 5);
	assert_memory_equal(out.data, "reply", 5);
	/* same xid, other arguments: a different call */
	assert_int_equal(rpc_drc_begin(d, &k3, &out), RPC_DRC_NEW);
	/* full, and the only done entry is evicted for k2 */
	assert_int_equal(rpc_drc_begin(d, &k2, &out), RPC_DRC_NEW);
	assert_int_equal(rpc_drc_begin(d, &k1, &out), RPC_DRC_UNCACHED);
	/* a call that sent no reply is forgotten */
	rpc_drc_done(d, &k2, NULL);
	assert_int_equal(rpc_drc_begin(d, &k2, &out), RPC_DRC_NEW);
	rpc_drc_free(d);
	rpc_buf_free(&out);
}

/* The key of a big WRITE: its length counts, its bytes only as far as the
 * hashed prefix (drc.c, invariant 1), so a 1 MiB call costs no 1 MiB hash. */
static void test_drc_key_prefix(void **state)
{
	enum { BIG = 1024 * 1024 };
	uint8_t *args = calloc(1, BIG);
	struct rpc_drc *d;
	struct rpc_drc_key k1, k2;

	(void)state;
	assert_non_null(args);
	assert_int_equal(rpc_drc_new(4, &d), 0);
	rpc_drc_key_init(d, &k1, &peer, 7, NFS_PROGRAM, 3, 7, args, BIG);
	args[BIG - 1] = 1; /* beyond the prefix: the same key */
	rpc_drc_key_init(d, &k2, &peer, 7, NFS_PROGRAM, 3, 7, args, BIG);
	assert_memory_equal(&k1, &k2, sizeof(k1));
	rpc_drc_key_init(d, &k2, &peer, 7, NFS_PROGRAM, 3, 7, args, BIG - 4);
	assert_memory_not_equal(&k1, &k2, sizeof(k1));
	args[12] = 1; /* within it (a WRITE's offset): another key */
	rpc_drc_key_init(d, &k2, &peer, 7, NFS_PROGRAM, 3, 7, args, BIG);
	assert_memory_not_equal(&k1, &k2, sizeof(k1));
	rpc_drc_free(d);
	free(args);
}

/* ---- MOUNT ---- */

static void mnt(const char *path, struct rpc_buf *reply, mountres3 *res)
{
	struct call_spec s = spec(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT);
	struct parsed_reply r;
	char *p = (char *)path;

	s.args_proc = (xdrproc_t)xdr_dirpath;
	s.args = &p;
	call_spec_rt(&s, reply, &r);
	assert_int_equal(r.stat, SUCCESS);
	memset(res, 0, sizeof(*res));
	assert_true(xdr_mountres3(&r.x, res));
}

static void test_mnt_root(void **state)
{
	struct rpc_buf reply = {0};
	mountres3 res;
	mountres3_ok *ok = &res.mountres3_u.mountinfo;
	uint32_t export_id;
	un_id id;

	(void)state;
	mnt("/", &reply, &res);
	assert_int_equal(res.fhs_status, MNT3_OK);
	assert_true(ok->fhandle.fhandle3_len > 0);
	assert_true(ok->fhandle.fhandle3_len <= 64);
	assert_int_equal(ok->auth_flavors.auth_flavors_len, 1);
	assert_int_equal(ok->auth_flavors.auth_flavors_val[0], AUTH_SYS);
	assert_int_equal(un_handle_decode(srv_d.srv.state,
					  (uint8_t *)ok->fhandle.fhandle3_val,
					  ok->fhandle.fhandle3_len, &export_id, &id),
			 0);
	assert_int_equal(export_id, un_export_id(srv_d.srv.exports[0]->ux));
	xdr_free((xdrproc_t)xdr_mountres3, &res);
	/* Slashes are normalised: "//" is "/". */
	mnt("//", &reply, &res);
	assert_int_equal(res.fhs_status, MNT3_OK);
	xdr_free((xdrproc_t)xdr_mountres3, &res);
	rpc_buf_free(&reply);
}

static void test_mnt_noent(void **state)
{
	struct rpc_buf reply = {0};
	mountres3 res;

	(void)state;
	mnt("/nope", &reply, &res);
	assert_int_equal(res.fhs_status, MNT3ERR_NOENT);
	mnt("relative", &reply, &res);
	assert_int_equal(res.fhs_status, MNT3ERR_NOENT);
	rpc_buf_free(&reply);
}

static size_t dump(struct rpc_buf *reply, mountlist *out)
{
	struct call_spec s = spec(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_DUMP);
	struct parsed_reply r;
	size_t n = 0;

	call_spec_rt(&s, reply, &r);
	assert_int_equal(r.stat, SUCCESS);
	*out = NULL;
	assert_true(xdr_mountlist(&r.x, out));
	for (mountbody *b = *out; b; b = b->ml_next)
		n++;
	return n;
}

static void simple_call(uint32_t proc, const char *path)
{
	struct call_spec s = spec(MOUNT_PROGRAM, MOUNT_V3, proc);
	struct rpc_buf reply = {0};
	struct parsed_reply r;
	char *p = (char *)path;

	if (path) {
		s.args_proc = (xdrproc_t)xdr_dirpath;
		s.args = &p;
	}
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.stat, SUCCESS);
	rpc_buf_free(&reply);
}

/* A directory below the export mounts, as with Linux mountd; a file, a missing
 * name and ".." do not. */
static void test_mnt_subdir(void **state)
{
	struct rpc_buf reply = {0};
	mountres3 res;
	mountres3_ok *ok = &res.mountres3_u.mountinfo;
	uint32_t export_id;
	un_id id, root_id;

	(void)state;
	mnt("/", &reply, &res);
	assert_int_equal(res.fhs_status, MNT3_OK);
	assert_int_equal(un_handle_decode(srv_d.srv.state,
					  (uint8_t *)ok->fhandle.fhandle3_val,
					  ok->fhandle.fhandle3_len, &export_id, &root_id),
			 0);
	xdr_free((xdrproc_t)xdr_mountres3, &res);
	mnt("/sub//deeper/", &reply, &res);
	assert_int_equal(res.fhs_status, MNT3_OK);
	assert_int_equal(un_handle_decode(srv_d.srv.state,
					  (uint8_t *)ok->fhandle.fhandle3_val,
					  ok->fhandle.fhandle3_len, &export_id, &id),
			 0);
	assert_true(id != root_id);
	xdr_free((xdrproc_t)xdr_mountres3, &res);
	mnt("/sub/file", &reply, &res);
	assert_int_equal(res.fhs_status, MNT3ERR_NOTDIR);
	mnt("/sub/none", &reply, &res);
	assert_int_equal(res.fhs_status, MNT3ERR_NOENT);
	mnt("/sub/../..", &reply, &res);
	assert_int_equal(res.fhs_status, MNT3ERR_ACCES);
	simple_call(MOUNTPROC3_UMNTALL, NULL);
	rpc_buf_free(&reply);
}

static void test_dump_umnt(void **state)
{
	struct rpc_buf reply = {0};
	mountres3 res;
	mountlist ml;

	(void)state;
	mnt("/", &reply, &res);
	xdr_free((xdrproc_t)xdr_mountres3, &res);
	assert_int_equal(dump(&reply, &ml), 1);
	assert_string_equal(ml->ml_hostname, "127.0.0.1");
	assert_string_equal(ml->ml_directory, "/");
	xdr_free((xdrproc_t)xdr_mountlist, &ml);
	simple_call(MOUNTPROC3_UMNT, "/");
	assert_int_equal(dump(&reply, &ml), 0);
	mnt("/", &reply, &res);
	xdr_free((xdrproc_t)xdr_mountres3, &res);
	simple_call(MOUNTPROC3_UMNTALL, NULL);
	assert_int_equal(dump(&reply, &ml), 0);
	rpc_buf_free(&reply);
}

static void test_export_list(void **state)
{
	struct call_spec s = spec(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_EXPORT);
	struct rpc_buf reply = {0};
	struct parsed_reply r;
	exports ex = NULL;

	(void)state;
	call_spec_rt(&s, &reply, &r);
	assert_int_equal(r.stat, SUCCESS);
	assert_true(xdr_exports(&r.x, &ex));
	assert_non_null(ex);
	assert_string_equal(ex->ex_dir, "/");
	assert_non_null(ex->ex_groups);
	/* no clients given: the loopback default, a group per rule */
	assert_string_equal(ex->ex_groups->gr_name, "127.0.0.0/8");
	assert_non_null(ex->ex_groups->gr_next);
	assert_string_equal(ex->ex_groups->gr_next->gr_name, "::1");
	assert_null(ex->ex_groups->gr_next->gr_next);
	assert_null(ex->ex_next);
	xdr_free((xdrproc_t)xdr_exports, &ex);
	rpc_buf_free(&reply);
}

/* ---- helpers of exports/table.c ---- */

static void test_export_lookup(void **state)
{
	struct rpc_req rq = {0};
	struct srv_req req = {.rpc = &rq, .srv = &srv_d.srv};

	(void)state;
	assert_non_null(srv_export_by_path(&srv_d.srv, "/"));
	assert_non_null(srv_export_by_path(&srv_d.srv, "///"));
	assert_null(srv_export_by_path(&srv_d.srv, "/x"));
	assert_null(srv_export_by_path(&srv_d.srv, ""));
	assert_ptr_equal(
	    srv_export_for_handle(&req, un_export_id(srv_d.srv.exports[0]->ux)),
	    srv_d.srv.exports[0]);
	assert_null(
	    srv_export_for_handle(&req, un_export_id(srv_d.srv.exports[0]->ux) + 1));
}

static void test_arena(void **state)
{
	struct rpc_arena *a = rpc_arena_new();
	char *big, *s;
	long *small;

	(void)state;
	assert_non_null(a);
	for (int i = 0; i < 5000; i++) {
		small = rpc_arena_alloc(a, sizeof(*small) * 3);
		assert_non_null(small);
		assert_int_equal(small[0] | small[1] | small[2], 0);
		assert_int_equal((uintptr_t)small % _Alignof(max_align_t), 0);
		small[0] = small[1] = small[2] = -1;
	}
	big = rpc_arena_alloc(a, RPC_MAX_IO);
	assert_non_null(big);
	assert_int_equal(big[RPC_MAX_IO - 1], 0);
	s = rpc_arena_strndup(a, "abcdef", 3);
	assert_string_equal(s, "abc");
	rpc_arena_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_null_call),
	    cmocka_unit_test(test_rpc_version_mismatch),
	    cmocka_unit_test(test_prog_unavail),
	    cmocka_unit_test(test_prog_mismatch),
	    cmocka_unit_test(test_proc_unavail),
	    cmocka_unit_test(test_garbage_args),
	    cmocka_unit_test(test_auth_flavours),
	    cmocka_unit_test(test_truncated_header),
	    cmocka_unit_test(test_mnt_root),
	    cmocka_unit_test(test_mnt_noent),
	    cmocka_unit_test(test_drc_replays_mkdir),
	    cmocka_unit_test(test_drc_entries),
	    cmocka_unit_test(test_drc_key_prefix),
	    cmocka_unit_test(test_mnt_subdir),
	    cmocka_unit_test(test_dump_umnt),
	    cmocka_unit_test(test_export_list),
	    cmocka_unit_test(test_export_lookup),
	    cmocka_unit_test(test_arena),
	};

	return cmocka_run_group_tests_name("srv_rpc", tests, setup, teardown);
}
