/* SPDX-License-Identifier: Apache-2.0 */
/* test_access.c - exports and client rules through the real server (issue 6):
 *
 *  - the default without --clients: loopback callers on reserved ports only,
 *    as themselves;
 *  - an access matrix over MNT and NFS calls from several client addresses
 *    (127.0.0.2 ... on loopback: any 127/8 address is this host's, so a
 *    socket bound to one before connect() is a second client) and from
 *    reserved and unreserved source ports: allowed / denied, ro / rw,
 *    root_squash / all_squash / no_root_squash, anonuid / anongid, secure;
 *    a caller no rule admits has its TCP connection closed at once and its
 *    UDP calls refused;
 *    owners checked on the upper layer itself;
 *  - the owner of a file chmod'ed 0277, 0177, 0077 gets from ACCESS what the
 *    owner's mode bits give (a client's open() follows ACCESS), and READ and
 *    WRITE still work for it (the owner override);
 *  - two clients of a per-client-upper export write the same path: each sees
 *    its own file, the shared lower is unchanged, a handle of one client's
 *    union gives the other nothing, and after a restart the old handles
 *    still work and are refused (NFS3ERR_ACCES) to another client even
 *    before their union is open again;
 *  - a read-only export with a per-client lower (hosts/%a) over a shared
 *    one: each client reads its own etc/hostname, a client without a layer
 *    the shared one, a handle of one client's union is refused to another
 *    (also after a restart, before its union opens), handles survive a
 *    restart and a layer's coming, and a layer's going is seen after SIGHUP;
 *  - SIGHUP with a changed file: a new export is mountable, a removed one
 *    answers MNT with an error, a bad file keeps the old exports, and a
 *    client READing in a loop meanwhile never sees an error;
 *  - config errors name FILE:LINE, and the server does not start.
 *
 * The calls are built with libtirpc and the server's own rpcgen routines, on
 * sockets bound here, so every source address and port is the test's choice.
 * Runs as root (reserved ports, files of other owners).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <rpc/rpc.h>

#include "mount.h"
#include "nfs3_prot.h"
#include "start_server.h"

static const char *server_bin;
/* The server of the test running, stopped by teardown if a check failed. */
static struct test_server *running;
static char tmp[64];

/* ---- files ---- */

static void path_of(char *out, size_t len, const char *rel)
{
	snprintf(out, len, "%s/%s", tmp, rel);
}

static void mkdir_in(const char *rel, mode_t mode)
{
	char p[256];

	path_of(p, sizeof(p), rel);
	assert_int_equal(mkdir(p, mode), 0);
	assert_int_equal(chmod(p, mode), 0);
}

static void file_in(const char *rel, const char *text)
{
	char p[256];
	FILE *f;

	path_of(p, sizeof(p), rel);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int rename_in(const char *from, const char *to)
{
	char a[256], b[256];

	path_of(a, sizeof(a), from);
	path_of(b, sizeof(b), to);
	return rename(a, b);
}

static bool exists_in(const char *rel, struct stat *st)
{
	char p[256];
	struct stat s;

	path_of(p, sizeof(p), rel);
	return lstat(p, st ? st : &s) == 0;
}

/* ---- clients ---- */

/* A connection from SRC (an address in 127/8), from a reserved source port
 * or not, with AUTH_SYS UID/GID. */
struct client {
	CLIENT *nfs, *mnt;
};

static int bound_socket(const char *src, bool reserved)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(inet_pton(AF_INET, src, &a.sin_addr), 1);
	if (!reserved) {
		assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
		return fd;
	}
	for (int port = 1023; port >= 600; port--) {
		a.sin_port = htons((uint16_t)port);
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return fd;
	}
	fail_msg("no reserved port free on %s", src);
	return -1;
}

static CLIENT *rpc_client(const char *src, bool reserved, int port, rpcprog_t prog,
			  rpcvers_t vers, uid_t uid, gid_t gid)
{
	struct sockaddr_in to = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port)};
	int fd = bound_socket(src, reserved);
	CLIENT *c;

	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	c = clnttcp_create(&to, prog, vers, &fd, 0, 0);
	assert_non_null(c);
	clnt_control(c, CLSET_FD_CLOSE, NULL);
	auth_destroy(c->cl_auth);
	c->cl_auth = authunix_create("test", uid, gid, 0, NULL);
	return c;
}

/* An RPC client of PROG over UDP from SRC to TO_PORT, from a reserved port or
 * not. */
static CLIENT *udp_client(const char *src, bool reserved, int to_port, rpcprog_t prog,
			  rpcvers_t vers)
{
	struct sockaddr_in to = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)to_port)};
	struct sockaddr_in a = {.sin_family = AF_INET};
	struct timeval wait = {1, 0};
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	CLIENT *c;

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, src, &a.sin_addr), 1);
	for (int port = reserved ? 1023 : 0; port >= (reserved ? 600 : 0); port--) {
		a.sin_port = htons((uint16_t)port);
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			break;
	}
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c = clntudp_create(&to, prog, vers, wait, &fd);
	assert_non_null(c);
	clnt_control(c, CLSET_FD_CLOSE, NULL);
	auth_destroy(c->cl_auth);
	c->cl_auth = authunix_create("test", 0, 0, 0, NULL);
	return c;
}

/* A MOUNT client over UDP from SRC, from a reserved port or not. */
static CLIENT *udp_mount_client(const struct test_server *s, const char *src,
				bool reserved)
{
	return udp_client(src, reserved, s->mount_port, MOUNT_PROGRAM, MOUNT_V3);
}

static void udp_client_free(CLIENT *c)
{
	auth_destroy(c->cl_auth);
	clnt_destroy(c);
}

static struct client client_new(const struct test_server *s, const char *src,
				bool reserved, uid_t uid, gid_t gid)
{
	struct client c;

	c.nfs = rpc_client(src, reserved, s->nfs_port, NFS_PROGRAM, NFS_V3, uid, gid);
	c.mnt =
	    rpc_client(src, reserved, s->mount_port, MOUNT_PROGRAM, MOUNT_V3, uid, gid);
	return c;
}

/* As client_new, over UDP as root: no connection to be refused, so every
 * call is checked on its own. */
static struct client udp_client_new(const struct test_server *s, const char *src,
				    bool reserved)
{
	struct client c;

	c.nfs = udp_client(src, reserved, s->nfs_port, NFS_PROGRAM, NFS_V3);
	c.mnt = udp_client(src, reserved, s->mount_port, MOUNT_PROGRAM, MOUNT_V3);
	return c;
}

static void client_free(struct client *c)
{
	auth_destroy(c->nfs->cl_auth);
	auth_destroy(c->mnt->cl_auth);
	clnt_destroy(c->nfs);
	clnt_destroy(c->mnt);
}

static const struct timeval tmo = {10, 0};

/* The arguments or results of a NULL procedure. */
static bool_t no_data(XDR *x, ...)
{
	(void)x;
	return TRUE;
}

/* A handle, copied out of a reply. */
struct fh {
	char data[NFS3_FHSIZE];
	u_int len;
};

static nfs_fh3 fh3(struct fh *f)
{
	nfs_fh3 h = {.data = {.data_len = f->len, .data_val = f->data}};
	return h;
}

/* A call that must get an accepted reply: the status inside is for the caller
 * to judge.  The failure names the procedure, as the caller's line would. */
static void call_ok(CLIENT *cl, rpcproc_t proc, xdrproc_t xargs, void *args,
		    xdrproc_t xres, void *res)
{
	enum clnt_stat st = clnt_call(cl, proc, xargs, args, xres, res, tmo);

	if (st != RPC_SUCCESS)
		fail_msg("procedure %u: %s", (unsigned)proc, clnt_sperrno(st));
}

/* Keeps a handle of a reply.  One longer than NFSv3 allows (a server bug) is
 * kept empty, so the next call with it fails instead of the copy overrunning. */
static void keep_fh(struct fh *out, const char *bytes, u_int len)
{
	out->len = len > NFS3_FHSIZE ? 0 : len;
	memcpy(out->data, bytes, out->len);
}

static int mnt(struct client *c, const char *path, struct fh *out)
{
	mountres3 r = {0};
	dirpath p = (dirpath)path;
	int st;

	call_ok(c->mnt, MOUNTPROC3_MNT, (xdrproc_t)xdr_dirpath, &p,
		(xdrproc_t)xdr_mountres3, &r);
	st = r.fhs_status;
	if (st == MNT3_OK && out) {
		fhandle3 *h = &r.mountres3_u.mountinfo.fhandle;
		keep_fh(out, h->fhandle3_val, h->fhandle3_len);
	}
	xdr_free((xdrproc_t)xdr_mountres3, (char *)&r);
	return st;
}

static int getattr(struct client *c, struct fh *f, fattr3 *out)
{
	GETATTR3args a = {.object = fh3(f)};
	GETATTR3res r = {0};
	int st;

	call_ok(c->nfs, NFSPROC3_GETATTR, (xdrproc_t)xdr_GETATTR3args, &a,
		(xdrproc_t)xdr_GETATTR3res, &r);
	st = r.status;
	if (!st && out)
		*out = r.GETATTR3res_u.resok.obj_attributes;
	xdr_free((xdrproc_t)xdr_GETATTR3res, (char *)&r);
	return st;
}

static int lookup(struct client *c, struct fh *dir, const char *fname, struct fh *out)
{
	LOOKUP3args a = {.what = {.dir = fh3(dir), .name = (char *)fname}};
	LOOKUP3res r = {0};
	int st;

	call_ok(c->nfs, NFSPROC3_LOOKUP, (xdrproc_t)xdr_LOOKUP3args, &a,
		(xdrproc_t)xdr_LOOKUP3res, &r);
	st = r.status;
	if (!st && out) {
		nfs_fh3 *h = &r.LOOKUP3res_u.resok.object;
		keep_fh(out, h->data.data_val, h->data.data_len);
	}
	xdr_free((xdrproc_t)xdr_LOOKUP3res, (char *)&r);
	return st;
}

static int create(struct client *c, struct fh *dir, const char *fname, struct fh *out)
{
	CREATE3args a = {.where = {.dir = fh3(dir), .name = (char *)fname}};
	CREATE3res r = {0};
	int st;

	a.how.mode = UNCHECKED;
	a.how.createhow3_u.obj_attributes.mode.set_it = TRUE;
	a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
	call_ok(c->nfs, NFSPROC3_CREATE, (xdrproc_t)xdr_CREATE3args, &a,
		(xdrproc_t)xdr_CREATE3res, &r);
	st = r.status;
	if (!st && out) {
		post_op_fh3 *h = &r.CREATE3res_u.resok.obj;
		assert_true(h->handle_follows);
		keep_fh(out, h->post_op_fh3_u.handle.data.data_val,
			h->post_op_fh3_u.handle.data.data_len);
	}
	xdr_free((xdrproc_t)xdr_CREATE3res, (char *)&r);
	return st;
}

static int write_text(struct client *c, struct fh *f, const char *text)
{
	WRITE3args a = {
	    .file = fh3(f), .count = (count3)strlen(text), .stable = FILE_SYNC};
	WRITE3res r = {0};
	int st;

	a.data.data_len = (u_int)strlen(text);
	a.data.data_val = (char *)text;
	call_ok(c->nfs, NFSPROC3_WRITE, (xdrproc_t)xdr_WRITE3args, &a,
		(xdrproc_t)xdr_WRITE3res, &r);
	st = r.status;
	xdr_free((xdrproc_t)xdr_WRITE3res, (char *)&r);
	return st;
}

/* READs F from 0 into BUF (LEN bytes, NUL-terminated); the status. */
static int read_text(struct client *c, struct fh *f, char *buf, size_t len)
{
	READ3args a = {.file = fh3(f), .count = (count3)(len - 1)};
	READ3res r = {0};
	int st;

	if (clnt_call(c->nfs, NFSPROC3_READ, (xdrproc_t)xdr_READ3args, (char *)&a,
		      (xdrproc_t)xdr_READ3res, (char *)&r, tmo) != RPC_SUCCESS)
		return -1;
	st = r.status;
	buf[0] = '\0';
	if (!st) {
		u_int n = r.READ3res_u.resok.data.data_len;
		memcpy(buf, r.READ3res_u.resok.data.data_val, n < len ? n : len - 1);
		buf[n < len ? n : len - 1] = '\0';
	}
	xdr_free((xdrproc_t)xdr_READ3res, (char *)&r);
	return st;
}

static int setattr_mode(struct client *c, struct fh *f, mode3 mode)
{
	SETATTR3args a = {.object = fh3(f)};
	SETATTR3res r = {0};
	int st;

	a.new_attributes.mode.set_it = TRUE;
	a.new_attributes.mode.set_mode3_u.mode = mode;
	call_ok(c->nfs, NFSPROC3_SETATTR, (xdrproc_t)xdr_SETATTR3args, &a,
		(xdrproc_t)xdr_SETATTR3res, &r);
	st = r.status;
	xdr_free((xdrproc_t)xdr_SETATTR3res, (char *)&r);
	return st;
}

static int remove_name(struct client *c, struct fh *dir, const char *fname)
{
	REMOVE3args a = {.object = {.dir = fh3(dir), .name = (char *)fname}};
	REMOVE3res r = {0};
	int st;

	call_ok(c->nfs, NFSPROC3_REMOVE, (xdrproc_t)xdr_REMOVE3args, &a,
		(xdrproc_t)xdr_REMOVE3res, &r);
	st = r.status;
	xdr_free((xdrproc_t)xdr_REMOVE3res, (char *)&r);
	return st;
}

/* The ACCESS bits granted of every bit asked for, or -status. */
static long access_bits(struct client *c, struct fh *f)
{
	ACCESS3args a = {.object = fh3(f), .access = 0x3f};
	ACCESS3res r = {0};
	long bits;

	call_ok(c->nfs, NFSPROC3_ACCESS, (xdrproc_t)xdr_ACCESS3args, &a,
		(xdrproc_t)xdr_ACCESS3res, &r);
	bits = r.status ? -(long)r.status : (long)r.ACCESS3res_u.resok.access;
	xdr_free((xdrproc_t)xdr_ACCESS3res, (char *)&r);
	return bits;
}

/* The exports EXPORT lists to C, space-separated, into BUF. */
static const char *export_list(struct client *c, char *buf, size_t len)
{
	exports ex = NULL;

	call_ok(c->mnt, MOUNTPROC3_EXPORT, (xdrproc_t)(void (*)(void))xdr_void, NULL,
		(xdrproc_t)xdr_exports, &ex);
	buf[0] = '\0';
	for (exportnode *e = ex; e; e = e->ex_next)
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? " " : "",
			 e->ex_dir);
	xdr_free((xdrproc_t)xdr_exports, (char *)&ex);
	return buf;
}

static bool null_call(struct client *c)
{
	return clnt_call(c->nfs, NFSPROC3_NULL, (xdrproc_t)(void (*)(void))xdr_void, NULL,
			 (xdrproc_t)(void (*)(void))xdr_void, NULL, tmo) == RPC_SUCCESS;
}

/* ---- fixtures ---- */

static int setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/test_access.XXXXXX");
	return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (running && running->pid > 0)
		test_server_stop(running);
	running = NULL;
	return test_tree_remove(tmp);
}

/* lower (with a 0777 dir "pub" and a file "f"), upper, work, state */
static void make_layers(void)
{
	mkdir_in("lower", 0755);
	mkdir_in("lower/pub", 0777);
	file_in("lower/f", "lower\n");
	mkdir_in("upper", 0755);
	mkdir_in("work", 0700);
}

static void start(struct test_server *s, bool test_clients, const char *clients,
		  const char *upper, const char *work)
{
	char lower[300], up[300], wk[300], state[300], cl[600];
	const char *args[8];
	size_t n = 0;

	snprintf(lower, sizeof(lower), "--lowerdir=%s/lower", tmp);
	snprintf(state, sizeof(state), "%s/state", tmp);
	args[n++] = lower;
	if (upper) {
		snprintf(up, sizeof(up), "--upperdir=%s/%s", tmp, upper);
		snprintf(wk, sizeof(wk), "--workdir=%s/%s", tmp, work);
		args[n++] = up;
		args[n++] = wk;
	}
	if (clients) {
		snprintf(cl, sizeof(cl), "--clients=%s", clients);
		args[n++] = cl;
	}
	args[n] = NULL;
	assert_int_equal(test_server_start_opts(server_bin, state, args, test_clients, s),
			 0);
}

/* ---- the default ---- */

static void test_default_loopback(void **state)
{
	struct test_server s;
	struct client root, insecure, other;
	struct fh fh, f;
	struct stat st;

	(void)state;
	make_layers();
	start(&s, false, NULL, "upper", "work");
	root = client_new(&s, "127.0.0.1", true, 0, 0);
	insecure = client_new(&s, "127.0.0.1", false, 0, 0);
	other = client_new(&s, "127.0.0.9", true, 0, 0);
	/* loopback root on a reserved port: in, as root */
	assert_int_equal(mnt(&root, "/", &fh), MNT3_OK);
	assert_int_equal(create(&root, &fh, "by-root", &f), NFS3_OK);
	assert_true(exists_in("upper/by-root", &st));
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(mnt(&other, "/", NULL), MNT3_OK); /* all of 127/8 */
	/* from an unreserved port: nothing, whatever handle it holds */
	assert_int_equal(mnt(&insecure, "/", NULL), MNT3ERR_ACCES);
	assert_int_equal(getattr(&insecure, &fh, NULL), NFS3ERR_ACCES);
	assert_int_equal(create(&insecure, &fh, "by-insecure", NULL), NFS3ERR_ACCES);
	assert_false(exists_in("upper/by-insecure", NULL));
	assert_true(null_call(&insecure)); /* NULL names no export */
	/* the same over UDP */
	struct client udp = {.mnt = udp_mount_client(&s, "127.0.0.1", false)};
	assert_int_equal(mnt(&udp, "/", NULL), MNT3ERR_ACCES);
	udp_client_free(udp.mnt);
	udp.mnt = udp_mount_client(&s, "127.0.0.1", true);
	assert_int_equal(mnt(&udp, "/", NULL), MNT3_OK);
	udp_client_free(udp.mnt);
	client_free(&root);
	client_free(&insecure);
	client_free(&other);
	assert_int_equal(test_server_stop(&s), 0);
}

/* ---- the matrix ---- */

#define MODIFY_BITS (ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE)

static void test_matrix(void **state)
{
	const char *rules =
	    "127.0.0.2(rw,no_root_squash,insecure) 127.0.0.3(ro,insecure) "
	    "127.0.0.4(rw,insecure) "
	    "127.0.0.5(rw,all_squash,anonuid=1234,anongid=4321,insecure) "
	    "127.0.0.6(rw,no_root_squash) 127.0.0.7(rw,anonuid=77,anongid=78)";
	struct test_server s;
	struct client rw, ro, rsq, all, all_user, sec_ok, sec_bad, none, rsq_user, anon;
	struct fh root, pub, f, ro_root;
	struct stat st;
	char buf[64];

	(void)state;
	make_layers();
	start(&s, false, rules, "upper", "work");
	rw = client_new(&s, "127.0.0.2", false, 0, 0);
	ro = client_new(&s, "127.0.0.3", false, 0, 0);
	rsq = client_new(&s, "127.0.0.4", false, 0, 0);
	rsq_user = client_new(&s, "127.0.0.4", false, 1000, 1000);
	all = client_new(&s, "127.0.0.5", false, 0, 0);
	all_user = client_new(&s, "127.0.0.5", false, 1000, 1000);
	sec_ok = client_new(&s, "127.0.0.6", true, 0, 0);
	sec_bad = client_new(&s, "127.0.0.6", false, 0, 0);
	none = udp_client_new(&s, "127.0.0.9", true);
	anon = client_new(&s, "127.0.0.7", true, 0, 0);

	/* rw, no_root_squash: root creates as root */
	assert_int_equal(mnt(&rw, "/", &root), MNT3_OK);
	assert_int_equal(lookup(&rw, &root, "pub", &pub), NFS3_OK);
	assert_int_equal(create(&rw, &pub, "rw", &f), NFS3_OK);
	assert_int_equal(write_text(&rw, &f, "rw\n"), NFS3_OK);
	assert_true(exists_in("upper/pub/rw", &st));
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_gid, 0);
	assert_int_equal(access_bits(&rw, &f) & MODIFY_BITS,
			 ACCESS3_MODIFY | ACCESS3_EXTEND);

	/* ro: mounts and reads, every change is ROFS, ACCESS grants no change */
	assert_int_equal(mnt(&ro, "/", &ro_root), MNT3_OK);
	assert_int_equal(read_text(&ro, &f, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "rw\n");
	assert_int_equal(create(&ro, &pub, "ro", NULL), NFS3ERR_ROFS);
	assert_int_equal(write_text(&ro, &f, "ro\n"), NFS3ERR_ROFS);
	assert_int_equal(setattr_mode(&ro, &f, 0600), NFS3ERR_ROFS);
	assert_int_equal(remove_name(&ro, &pub, "rw"), NFS3ERR_ROFS);
	assert_int_equal(access_bits(&ro, &f) & MODIFY_BITS, 0);
	assert_true(access_bits(&ro, &f) & ACCESS3_READ);
	assert_false(exists_in("upper/pub/ro", NULL));

	/* root_squash (default): root becomes 65534, others stay themselves */
	assert_int_equal(create(&rsq, &pub, "squashed", NULL), NFS3_OK);
	assert_true(exists_in("upper/pub/squashed", &st));
	assert_int_equal(st.st_uid, 65534);
	assert_int_equal(st.st_gid, 65534);
	assert_int_equal(create(&rsq_user, &pub, "user", NULL), NFS3_OK);
	assert_true(exists_in("upper/pub/user", &st));
	assert_int_equal(st.st_uid, 1000);
	/* squashed root may not touch root's 0644 file */
	assert_int_equal(write_text(&rsq, &f, "x"), NFS3ERR_ACCES);
	/* root_squash with anonuid/anongid */
	assert_int_equal(create(&anon, &pub, "anon", NULL), NFS3_OK);
	assert_true(exists_in("upper/pub/anon", &st));
	assert_int_equal(st.st_uid, 77);
	assert_int_equal(st.st_gid, 78);

	/* all_squash: everyone is anonuid/anongid */
	assert_int_equal(create(&all, &pub, "all-root", NULL), NFS3_OK);
	assert_int_equal(create(&all_user, &pub, "all-user", NULL), NFS3_OK);
	assert_true(exists_in("upper/pub/all-root", &st));
	assert_int_equal(st.st_uid, 1234);
	assert_int_equal(st.st_gid, 4321);
	assert_true(exists_in("upper/pub/all-user", &st));
	assert_int_equal(st.st_uid, 1234);
	assert_int_equal(st.st_gid, 4321);

	/* secure: a reserved port is in, the same address from another is not */
	assert_int_equal(mnt(&sec_ok, "/", NULL), MNT3_OK);
	assert_int_equal(getattr(&sec_ok, &root, NULL), NFS3_OK);
	assert_int_equal(mnt(&sec_bad, "/", NULL), MNT3ERR_ACCES);
	assert_int_equal(getattr(&sec_bad, &root, NULL), NFS3ERR_ACCES);
	assert_int_equal(create(&sec_bad, &pub, "sec-bad", NULL), NFS3ERR_ACCES);

	/* no rule: a TCP connection is closed at once; over UDP a handle
	 * another client was given is worth nothing, and EXPORT does not list
	 * what it may not mount */
	{
		struct client tcp_none = client_new(&s, "127.0.0.9", true, 0, 0);

		assert_int_not_equal(clnt_call(tcp_none.nfs, NFSPROC3_NULL, no_data, NULL,
					       no_data, NULL, tmo),
				     RPC_SUCCESS);
		client_free(&tcp_none);
	}
	assert_string_equal(export_list(&rw, buf, sizeof(buf)), "/");
	assert_string_equal(export_list(&none, buf, sizeof(buf)), "");
	assert_string_equal(export_list(&sec_bad, buf, sizeof(buf)), "");
	assert_int_equal(mnt(&none, "/", NULL), MNT3ERR_ACCES);
	assert_int_equal(getattr(&none, &root, NULL), NFS3ERR_ACCES);
	assert_int_equal(lookup(&none, &root, "f", NULL), NFS3ERR_ACCES);
	assert_int_equal(read_text(&none, &f, buf, sizeof(buf)), NFS3ERR_ACCES);
	assert_int_equal(create(&none, &pub, "none", NULL), NFS3ERR_ACCES);
	assert_int_equal(remove_name(&none, &pub, "rw"), NFS3ERR_ACCES);
	assert_false(exists_in("upper/pub/none", NULL));
	assert_true(exists_in("upper/pub/rw", NULL));

	client_free(&rw);
	client_free(&ro);
	client_free(&rsq);
	client_free(&rsq_user);
	client_free(&all);
	client_free(&all_user);
	client_free(&sec_ok);
	client_free(&sec_bad);
	client_free(&none);
	client_free(&anon);
	assert_int_equal(test_server_stop(&s), 0);
}

/* ---- the owner's mode ---- */

static void test_owner_mode(void **state)
{
	static const struct {
		mode3 mode;
		long access; /* of READ, MODIFY, EXTEND, EXECUTE */
	} cases[] = {
	    {0277, ACCESS3_MODIFY | ACCESS3_EXTEND},
	    {0177, ACCESS3_EXECUTE},
	    {0077, 0},
	    {0677, ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND},
	};
	const long asked =
	    ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_EXECUTE;
	static struct test_server s; /* outlives a failed check, for teardown */
	struct client user;
	struct fh root, pub, f;
	char buf[64];

	(void)state;
	make_layers();
	start(&s, false, "127.0.0.4(rw,insecure)", "upper", "work");
	running = &s;
	user = client_new(&s, "127.0.0.4", false, 1000, 1000);
	assert_int_equal(mnt(&user, "/", &root), MNT3_OK);
	assert_int_equal(lookup(&user, &root, "pub", &pub), NFS3_OK);
	assert_int_equal(create(&user, &pub, "mine", &f), NFS3_OK);
	assert_int_equal(write_text(&user, &f, "mine\n"), NFS3_OK);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(setattr_mode(&user, &f, cases[i].mode), NFS3_OK);
		if ((access_bits(&user, &f) & asked) != cases[i].access)
			fail_msg("mode %#o: ACCESS gives the owner %#lx, not %#lx",
				 cases[i].mode, access_bits(&user, &f) & asked,
				 cases[i].access);
		assert_int_equal(read_text(&user, &f, buf, sizeof(buf)), NFS3_OK);
		assert_string_equal(buf, "mine\n");
		assert_int_equal(write_text(&user, &f, "mine\n"), NFS3_OK);
	}
	client_free(&user);
	assert_int_equal(test_server_stop(&s), 0);
	running = NULL;
}

/* ---- host names ---- */

/* True when this host's resolver maps 127.0.0.1 to "localhost" and back. */
static bool localhost_resolves(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	struct addrinfo hints = {.ai_family = AF_INET}, *res;
	char host[256];
	bool ok;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (getnameinfo((struct sockaddr *)&a, sizeof(a), host, sizeof(host), NULL, 0,
			NI_NAMEREQD) != 0 ||
	    strcmp(host, "localhost") != 0 ||
	    getaddrinfo("localhost", NULL, &hints, &res))
		return false;
	ok = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr == a.sin_addr.s_addr;
	freeaddrinfo(res);
	return ok;
}

static void test_host_names(void **state)
{
	struct test_server s;
	struct client named, pattern, unnamed;
	struct fh root;

	(void)state;
	if (!localhost_resolves())
		skip(); /* the rules need a name this host resolves both ways */
	make_layers();
	/* 127.0.0.1 is "localhost": by name it is rw; 127.0.0.3 has no name
	 * (and no address rule), so neither the name nor the pattern admit it */
	start(&s, false,
	      "localhost(rw,no_root_squash,insecure) local*(ro,insecure) *.invalid(rw)",
	      "upper", "work");
	named = client_new(&s, "127.0.0.1", false, 0, 0);
	unnamed = client_new(&s, "127.0.0.3", false, 0, 0);
	assert_int_equal(mnt(&named, "/", &root), MNT3_OK);
	/* the host name outranks the pattern: rw */
	assert_int_equal(create(&named, &root, "by-name", NULL), NFS3_OK);
	assert_int_equal(mnt(&unnamed, "/", NULL), MNT3ERR_ACCES);
	assert_int_equal(getattr(&unnamed, &root, NULL), NFS3ERR_ACCES);
	client_free(&named);
	client_free(&unnamed);
	assert_int_equal(test_server_stop(&s), 0);

	/* without the name rule, the pattern applies: ro */
	start(&s, false, "local*(ro,insecure)", "upper", "work");
	pattern = client_new(&s, "127.0.0.1", false, 0, 0);
	assert_int_equal(mnt(&pattern, "/", &root), MNT3_OK);
	assert_int_equal(create(&pattern, &root, "by-pattern", NULL), NFS3ERR_ROFS);
	client_free(&pattern);
	assert_int_equal(test_server_stop(&s), 0);
}

/* ---- per-client uppers ---- */

static void test_per_client_upper(void **state)
{
	struct test_server s;
	struct client a, b, c;
	struct fh ra, rb, fa, fb, x;
	struct stat st;
	char buf[64];

	(void)state;
	make_layers();
	mkdir_in("clients", 0755);
	start(&s, false, "127.0.0.2(rw,no_root_squash,insecure) 127.0.0.3(rw,insecure)",
	      "clients/%a/upper", "clients/%a/work");
	a = client_new(&s, "127.0.0.2", false, 0, 0);
	b = client_new(&s, "127.0.0.3", false, 1000, 1000);
	assert_int_equal(mnt(&a, "/", &ra), MNT3_OK);
	assert_int_equal(mnt(&b, "/", &rb), MNT3_OK);
	/* each client's own union: different roots */
	assert_true(ra.len != rb.len || memcmp(ra.data, rb.data, ra.len) != 0);
	assert_true(exists_in("clients/127.0.0.2/upper", &st));
	assert_int_equal(st.st_mode & 07777, 0755); /* as the lower's root */
	assert_true(exists_in("clients/127.0.0.3/work", NULL));

	/* the same path, written by both */
	assert_int_equal(lookup(&a, &ra, "pub", &x), NFS3_OK);
	assert_int_equal(create(&a, &x, "same", &fa), NFS3_OK);
	assert_int_equal(write_text(&a, &fa, "from a\n"), NFS3_OK);
	assert_int_equal(lookup(&b, &rb, "pub", &x), NFS3_OK);
	assert_int_equal(create(&b, &x, "same", &fb), NFS3_OK);
	assert_int_equal(write_text(&b, &fb, "from b\n"), NFS3_OK);
	assert_int_equal(read_text(&a, &fa, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "from a\n");
	assert_int_equal(read_text(&b, &fb, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "from b\n");
	/* by path too */
	assert_int_equal(lookup(&a, &ra, "pub", &x), NFS3_OK);
	assert_int_equal(lookup(&a, &x, "same", &x), NFS3_OK);
	assert_int_equal(read_text(&a, &x, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "from a\n");
	/* the shared lower is unchanged */
	assert_false(exists_in("lower/pub/same", NULL));
	assert_true(exists_in("clients/127.0.0.2/upper/pub/same", &st));
	assert_int_equal(st.st_uid, 0);
	assert_true(exists_in("clients/127.0.0.3/upper/pub/same", &st));
	assert_int_equal(st.st_uid, 1000);
	/* a handle of one client's union gives the other nothing */
	assert_int_equal(read_text(&b, &fa, buf, sizeof(buf)), NFS3ERR_ACCES);
	assert_int_equal(getattr(&b, &ra, NULL), NFS3ERR_ACCES);
	assert_int_equal(write_text(&a, &fb, "a into b"), NFS3ERR_ACCES);
	client_free(&a);
	client_free(&b);
	assert_int_equal(test_server_stop(&s), 0);

	/* after a restart, before any MNT, the old handles find their unions;
	 * a newly admitted client that never mounted gets nothing from them,
	 * and no upper */
	start(&s, false,
	      "127.0.0.2(rw,no_root_squash,insecure) 127.0.0.3(rw,insecure) "
	      "127.0.0.4(rw,insecure)",
	      "clients/%a/upper", "clients/%a/work");
	a = client_new(&s, "127.0.0.2", false, 0, 0);
	b = client_new(&s, "127.0.0.3", false, 1000, 1000);
	c = client_new(&s, "127.0.0.4", false, 0, 0);
	/* a's union is not open yet, and still the handle is another
	 * client's: refused as when it is open (docs/client-unions.md) */
	assert_int_equal(read_text(&c, &fa, buf, sizeof(buf)), NFS3ERR_ACCES);
	assert_int_equal(getattr(&c, &ra, NULL), NFS3ERR_ACCES);
	assert_false(exists_in("clients/127.0.0.4", NULL));
	assert_int_equal(read_text(&b, &fb, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "from b\n");
	assert_int_equal(read_text(&a, &fb, buf, sizeof(buf)), NFS3ERR_ACCES);
	assert_int_equal(read_text(&a, &fa, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "from a\n");
	/* now that it is open: refused outright */
	assert_int_equal(read_text(&c, &fa, buf, sizeof(buf)), NFS3ERR_ACCES);
	assert_false(exists_in("clients/127.0.0.4", NULL));
	client_free(&a);
	client_free(&b);
	client_free(&c);
	assert_int_equal(test_server_stop(&s), 0);
}

/* ---- per-client lowers ---- */

/* A read-only export over TMP/hosts/%a (one layer per client) and the shared
 * TMP/lower, for 127.0.0.2 ... 127.0.0.4. */
static void start_client_lowers(struct test_server *s)
{
	char lower[300], state[300];
	const char *args[] = {lower,
			      "--clients=127.0.0.2(ro,insecure) 127.0.0.3(ro,insecure) "
			      "127.0.0.4(ro,insecure)",
			      NULL};

	snprintf(lower, sizeof(lower), "--lowerdir=%s/hosts/%%a:%s/lower", tmp, tmp);
	snprintf(state, sizeof(state), "%s/state", tmp);
	assert_int_equal(test_server_start_opts(server_bin, state, args, false, s), 0);
	running = s;
}

/* READs ROOT/etc/hostname as C into BUF (its handle into F); the status. */
static int read_hostname(struct client *c, struct fh *root, struct fh *f, char *buf,
			 size_t len)
{
	struct fh etc;
	int st = lookup(c, root, "etc", &etc);

	if (st == NFS3_OK)
		st = lookup(c, &etc, "hostname", f);
	return st == NFS3_OK ? read_text(c, f, buf, len) : st;
}

/* Waits (START_WAIT_S at most) until ROOT/etc/hostname as C reads WANT. */
static bool hostname_becomes(struct client *c, struct fh *root, const char *want)
{
	char buf[64];
	struct fh f;

	for (int i = 0; i < START_WAIT_S * 20; i++) {
		if (read_hostname(c, root, &f, buf, sizeof(buf)) == NFS3_OK &&
		    strcmp(buf, want) == 0)
			return true;
		usleep(50000);
	}
	return false;
}

static void test_per_client_lower(void **state)
{
	struct test_server s;
	struct client a, b, c;
	struct fh ra, rb, rc, fa, fb, fc, x;
	char buf[64];

	(void)state;
	make_layers();
	mkdir_in("lower/etc", 0755);
	file_in("lower/etc/hostname", "builder\n");
	mkdir_in("hosts", 0755);
	mkdir_in("hosts/127.0.0.2", 0755);
	mkdir_in("hosts/127.0.0.2/etc", 0755);
	file_in("hosts/127.0.0.2/etc/hostname", "two\n");
	mkdir_in("hosts/127.0.0.3", 0755);
	mkdir_in("hosts/127.0.0.3/etc", 0755);
	file_in("hosts/127.0.0.3/etc/hostname", "three\n");
	start_client_lowers(&s);
	a = client_new(&s, "127.0.0.2", false, 0, 0);
	b = client_new(&s, "127.0.0.3", false, 0, 0);
	c = client_new(&s, "127.0.0.4", false, 0, 0);
	assert_int_equal(mnt(&a, "/", &ra), MNT3_OK);
	assert_int_equal(mnt(&b, "/", &rb), MNT3_OK);
	assert_int_equal(mnt(&c, "/", &rc), MNT3_OK);
	/* each client's own union: its layer over the shared one */
	assert_true(ra.len != rb.len || memcmp(ra.data, rb.data, ra.len) != 0);
	assert_int_equal(read_hostname(&a, &ra, &fa, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "two\n");
	assert_int_equal(read_hostname(&b, &rb, &fb, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "three\n");
	/* no layer of its own: the shared file */
	assert_int_equal(read_hostname(&c, &rc, &fc, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "builder\n");
	assert_int_equal(lookup(&a, &ra, "f", &x), NFS3_OK);
	assert_int_equal(read_text(&a, &x, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "lower\n");
	/* a handle of one client's union gives another nothing */
	assert_int_equal(read_text(&b, &fa, buf, sizeof(buf)), NFS3ERR_ACCES);
	assert_int_equal(getattr(&a, &rb, NULL), NFS3ERR_ACCES);
	assert_int_equal(read_text(&a, &fc, buf, sizeof(buf)), NFS3ERR_ACCES);
	client_free(&a);
	client_free(&b);
	client_free(&c);
	assert_int_equal(test_server_stop(&s), 0);

	/* 127.0.0.4 gets a layer; after a restart, before any MNT, the old
	 * handles find their unions (the same ids: the layer's coming does not
	 * enter them), and another client's are refused while closed */
	mkdir_in("hosts/127.0.0.4", 0755);
	mkdir_in("hosts/127.0.0.4/etc", 0755);
	file_in("hosts/127.0.0.4/etc/hostname", "four\n");
	start_client_lowers(&s);
	a = client_new(&s, "127.0.0.2", false, 0, 0);
	b = client_new(&s, "127.0.0.3", false, 0, 0);
	c = client_new(&s, "127.0.0.4", false, 0, 0);
	assert_int_equal(read_text(&b, &fa, buf, sizeof(buf)), NFS3ERR_ACCES);
	assert_int_equal(read_text(&a, &fa, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "two\n");
	assert_int_equal(read_text(&b, &fb, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "three\n");
	assert_int_equal(read_hostname(&c, &rc, &fc, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "four\n");

	/* the layer goes away: the open union keeps its stack until a reload
	 * looks again, and the root handle stays valid */
	assert_int_equal(rename_in("hosts/127.0.0.2", "hosts/old-127.0.0.2"), 0);
	assert_int_equal(read_hostname(&a, &ra, &x, buf, sizeof(buf)), NFS3_OK);
	assert_string_equal(buf, "two\n");
	assert_int_equal(kill(s.pid, SIGHUP), 0);
	assert_true(hostname_becomes(&a, &ra, "builder\n"));
	client_free(&a);
	client_free(&b);
	client_free(&c);
	assert_int_equal(test_server_stop(&s), 0);
	running = NULL;
}

/* ---- SIGHUP ---- */

static void write_conf(const char *conf, const char *text_buf)
{
	char p[256];
	FILE *f;

	path_of(p, sizeof(p), conf);
	f = fopen(p, "w");
	assert_non_null(f);
	fprintf(f, "[server]\nlog-level = info\n%s", text_buf);
	fclose(f);
}

struct reader {
	struct client c;
	struct fh f;
	atomic_bool stop;
	atomic_long reads, failures;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char buf[64];

	while (!atomic_load(&r->stop)) {
		if (read_text(&r->c, &r->f, buf, sizeof(buf)) != NFS3_OK ||
		    strcmp(buf, "lower\n") != 0)
			atomic_fetch_add(&r->failures, 1);
		atomic_fetch_add(&r->reads, 1);
	}
	return NULL;
}

/* Waits (START_WAIT_S at most: a reload on a busy machine) until MNT of PATH
 * by C answers WANT. */
static bool mnt_becomes(struct client *c, const char *path, int want)
{
	for (int i = 0; i < START_WAIT_S * 20; i++) {
		if (mnt(c, path, NULL) == want)
			return true;
		usleep(50000);
	}
	return false;
}

static void test_sighup(void **state)
{
	char text_buf[1024], arg[300], state_dir[300];
	const char *args[2] = {arg, NULL};
	struct test_server s;
	struct client c;
	struct reader r = {0};
	struct fh root;
	pthread_t t;
	long before;

	(void)state;
	make_layers();
	mkdir_in("lower2", 0755);
	snprintf(
	    text_buf, sizeof(text_buf),
	    "[export]\npath = /a\nlowerdir = %s/lower\nclients = 127.0.0.2(ro,insecure)\n"
	    "[export]\npath = /b\nlowerdir = %s/lower2\nclients = 127.0.0.2(insecure)\n",
	    tmp, tmp);
	write_conf("conf", text_buf);
	snprintf(arg, sizeof(arg), "--config=%s/conf", tmp);
	snprintf(state_dir, sizeof(state_dir), "%s/state", tmp);
	assert_int_equal(test_server_start_opts(server_bin, state_dir, args, false, &s),
			 0);
	c = client_new(&s, "127.0.0.2", false, 0, 0);
	r.c = client_new(&s, "127.0.0.2", false, 0, 0);
	assert_int_equal(mnt(&c, "/a", &root), MNT3_OK);
	assert_int_equal(lookup(&c, &root, "f", &r.f), NFS3_OK);
	assert_int_equal(mnt(&c, "/c", NULL), MNT3ERR_NOENT);
	assert_int_equal(pthread_create(&t, NULL, reader_main, &r), 0);

	/* /b goes, /c comes, /a stays (its rule changes: the reader stays in) */
	snprintf(
	    text_buf, sizeof(text_buf),
	    "[export]\npath = /a\nlowerdir = %s/lower\n"
	    "clients = 127.0.0.2(ro,insecure) 127.0.0.3(ro)\n"
	    "[export]\npath = /c\nlowerdir = %s/lower2\nclients = 127.0.0.2(insecure)\n",
	    tmp, tmp);
	write_conf("conf", text_buf);
	assert_int_equal(kill(s.pid, SIGHUP), 0);
	assert_true(mnt_becomes(&c, "/c", MNT3_OK));
	assert_int_equal(mnt(&c, "/b", NULL), MNT3ERR_NOENT);
	assert_int_equal(mnt(&c, "/a", NULL), MNT3_OK);

	/* a bad file: refused as a whole, the running text_buf stay */
	write_conf("conf", "[export]\npath = /d\nlowerdir = /nonexistent\n"
			   "clients = 127.0.0.2(bogus)\n");
	assert_int_equal(kill(s.pid, SIGHUP), 0);
	usleep(300000);
	assert_true(test_server_alive(&s));
	assert_int_equal(mnt(&c, "/c", NULL), MNT3_OK);
	assert_int_equal(mnt(&c, "/d", NULL), MNT3ERR_NOENT);

	/* a layer that is not there is refused too */
	snprintf(
	    text_buf, sizeof(text_buf),
	    "[export]\npath = /a\nlowerdir = %s/lower\nclients = 127.0.0.2(ro,insecure)\n"
	    "[export]\npath = /e\nlowerdir = %s/no-such-layer\n",
	    tmp, tmp);
	write_conf("conf", text_buf);
	assert_int_equal(kill(s.pid, SIGHUP), 0);
	usleep(300000);
	assert_int_equal(mnt(&c, "/c", NULL), MNT3_OK);
	assert_int_equal(mnt(&c, "/e", NULL), MNT3ERR_NOENT);

	/* /a changes its layers: a new union under the same path (so the same
	 * export id), the reader's handle goes on naming the same file */
	snprintf(
	    text_buf, sizeof(text_buf),
	    "[export]\npath = /a\nlowerdir = %s/lower2:%s/lower\n"
	    "clients = 127.0.0.2(ro,insecure)\n"
	    "[export]\npath = /c\nlowerdir = %s/lower2\nclients = 127.0.0.2(insecure)\n",
	    tmp, tmp, tmp);
	write_conf("conf", text_buf);
	before = atomic_load(&r.reads);
	assert_int_equal(kill(s.pid, SIGHUP), 0);
	usleep(300000);
	assert_int_equal(mnt(&c, "/a", NULL), MNT3_OK);
	assert_true(atomic_load(&r.reads) > before);

	/* many reloads in a row while the reader reads */
	snprintf(text_buf, sizeof(text_buf),
		 "[export]\npath = /a\nlowerdir = %s/lower\nclients = "
		 "127.0.0.2(ro,insecure)\n",
		 tmp);
	write_conf("conf", text_buf);
	before = atomic_load(&r.reads);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(kill(s.pid, SIGHUP), 0);
		usleep(20000);
	}
	assert_true(mnt_becomes(&c, "/c", MNT3ERR_NOENT));
	usleep(100000);
	atomic_store(&r.stop, true);
	pthread_join(t, NULL);
	fprintf(stderr,
		"test_sighup: %ld READs during the reloads (%ld in the last "
		"20), %ld failed\n",
		atomic_load(&r.reads), atomic_load(&r.reads) - before,
		atomic_load(&r.failures));
	assert_true(atomic_load(&r.reads) - before > 20);
	assert_int_equal(atomic_load(&r.failures), 0);
	client_free(&c);
	client_free(&r.c);
	assert_int_equal(test_server_stop(&s), 0);
}

/* ---- config errors ---- */

/* Runs the server on config CONF; returns its exit status, its stderr in ERR. */
static int run_conf(const char *conf, char *err, size_t len)
{
	char arg[300], errpath[300], state[300];
	int st, fd;
	pid_t pid;
	ssize_t n;

	snprintf(arg, sizeof(arg), "--config=%s/%s", tmp, conf);
	snprintf(errpath, sizeof(errpath), "%s/stderr", tmp);
	snprintf(state, sizeof(state), "--state-dir=%s/state", tmp);
	pid = fork();
	if (pid == 0) {
		fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, STDERR_FILENO);
		execl(server_bin, server_bin, arg, state, "--nfs-port=0",
		      "--mount-port=0", "--bind=127.0.0.1", "--foreground",
		      "--no-rpcbind", "--no-portmapper", (char *)NULL);
		_exit(127);
	}
	/* a server that starts would serve: stop it after a while (long: a
	 * refused config ends the process at once, but a busy machine may take
	 * seconds to run an ASan build that far) */
	for (int i = 0; i < START_WAIT_S * 50 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(20000);
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGTERM);
		waitpid(pid, &st, 0);
		return -1;
	}
	fd = open(errpath, O_RDONLY);
	n = read(fd, err, len - 1);
	err[n > 0 ? n : 0] = '\0';
	close(fd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void expect_conf_error(const char *text, int line, const char *words)
{
	char text_buf[1024], err[1024], where[300];

	snprintf(text_buf, sizeof(text_buf), text, tmp, tmp);
	write_conf("bad.conf", text_buf);
	assert_int_equal(run_conf("bad.conf", err, sizeof(err)), 2);
	snprintf(where, sizeof(where), "union-nfsd: %s/bad.conf:%d: ", tmp, line);
	if (strncmp(err, where, strlen(where)) != 0 || !strstr(err, words) ||
	    strchr(err, '\n') != err + strlen(err) - 1)
		fail_msg("stderr '%s', want one line '%s...%s'", err, where, words);
}

static void test_config_errors(void **state)
{
	char err[1024];

	(void)state;
	make_layers();
	/* (write_conf puts 2 lines of [server] first) */
	expect_conf_error("[export]\nlowerdir = %s/lower\nclients = 10.0.0.0/8(rw,rx)\n",
			  5, "unknown or malformed option 'rx'");
	expect_conf_error("[export]\nlowerdir = %s/lower\n\nclients = 10.0.0.1/40\n", 6,
			  "bad client '10.0.0.1/40'");
	expect_conf_error("[export]\nlowerdir = %s/lower\nupperdir = %s/u/%%a\n"
			  "workdir = /w\n",
			  3, "both be per client");
	expect_conf_error("[export]\nlowerdir = %s/lower\nclients = *\ncolour = red\n", 6,
			  "unknown key 'colour'");
	expect_conf_error("[export]\nlowerdir = %s/h/%%x:%s/lower\n", 3, "lowerdir '");
	expect_conf_error("[export]\nlowerdir = %s/h/%%a:%s/lower\nupperdir = /u\n"
			  "workdir = /w\n",
			  3, "needs a per-client upperdir");
	expect_conf_error("[export]\nlowerdir = %s/h/%%a:%s/g/%%h\n", 3,
			  "a layer shared by all");
	/* a missing layer of a per-client export stops the start too */
	write_conf("bad.conf", "[export]\nlowerdir = /nonexistent\nupperdir = /u/%a\n"
			       "workdir = /w/%a\n");
	assert_int_equal(run_conf("bad.conf", err, sizeof(err)), 2);
	assert_non_null(strstr(err, "lowerdir /nonexistent"));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_default_loopback, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_matrix, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_owner_mode, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_host_names, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_per_client_upper, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_per_client_lower, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sighup, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_config_errors, setup, teardown),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	if (geteuid() != 0) {
		printf("SKIP: needs root (reserved ports, files of other owners)\n");
		return 77;
	}
	server_bin = argv[1];
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
