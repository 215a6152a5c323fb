/* SPDX-License-Identifier: Apache-2.0 */
/* test_protocol - protocol edge cases against a running server.
 *
 *   test_protocol UNION_NFSD        build a two-layer union in a temp dir, start
 *                                   UNION_NFSD on it (ports picked by the server),
 *                                   run the tests, stop it
 *   PROTO_ATTACH=NFSPORT:MOUNTPORT:/EXPORT test_protocol
 *                                   run the tests against a server already running
 *                                   on 127.0.0.1 that exports a tree made by
 *   test_protocol --make-tree DIR   (the union's layers written into one dir)
 *
 * The attach mode checks these tests against a reference server (nfs-ganesha,
 * see with_ganesha.sh); the few tests of union-nfsd's own promises skip there.
 *
 * NFS procedures go through libnfs' raw API (an independent XDR implementation);
 * calls that no well-behaved client sends (unknown program, version, procedure or
 * auth flavour, garbage arguments, truncated and fragmented records) are built by
 * hand in rawrpc.c.  After all the bad input the server must still be alive.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nfs_raw.h"
#include "rawrpc.h"
#include "start_server.h"

#define FILE_SIZE    (1572864 + 123) /* 1.5 MiB and a bit: more than one rtmax of 1 MiB */
#define NENTRIES     300
#define LONGNAME_LEN 200

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	char state[PATH_MAX + 16];
	struct test_server srv;
	bool attached;
	int nfs_port, mount_port;
	char export[PATH_MAX];
	struct fh root;
	struct rpc_context *nfs; /* libnfs raw connection to the NFS program */
	bool nfs_broken;	 /* it failed: the next test reconnects */
	uint32_t xid;
} g;

/* ---- the tree: the same bytes in both modes ---- */

static unsigned char pattern(uint64_t off)
{
	return (unsigned char)((off * 7 + (off >> 13)) & 0xff);
}

static void write_file(const char *path, uint64_t size)
{
	unsigned char buf[65536];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	uint64_t off = 0;
	if (fd < 0) {
		perror(path);
		exit(1);
	}
	while (off < size) {
		size_t n = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(off + i);
		if (write(fd, buf, n) != (ssize_t)n) {
			perror(path);
			exit(1);
		}
		off += n;
	}
	close(fd);
}

static void put(const char *dir, const char *name, const char *content)
{
	char p[PATH_MAX];
	FILE *f;
	if (snprintf(p, sizeof(p), "%s/%s", dir, name) >= (int)sizeof(p)) {
		fprintf(stderr, "path too long: %s/%s\n", dir, name);
		exit(1);
	}
	f = fopen(p, "w");
	if (!f || fputs(content, f) < 0 || fclose(f)) {
		perror(p);
		exit(1);
	}
}

static void entry_name(int i, char *buf, size_t cap)
{
	snprintf(buf, cap, "entry-%03d", i);
}

static void long_name(char *buf)
{
	memset(buf, 'x', LONGNAME_LEN);
	memcpy(buf, "long-", 5);
	buf[LONGNAME_LEN] = '\0';
}

/* top and bottom may be the same dir (attach mode: a flat copy of the union). */
static void make_tree(const char *top, const char *bottom)
{
	char p[PATH_MAX], name[LONGNAME_LEN + 8], ltop[PATH_MAX], lbot[PATH_MAX];
	snprintf(p, sizeof(p), "%s/file", bottom);
	write_file(p, FILE_SIZE);
	put(top, "small", "hello\n");
	snprintf(ltop, sizeof(ltop), "%s/dir", top);
	snprintf(lbot, sizeof(lbot), "%s/dir", bottom);
	mkdir(ltop, 0755);
	mkdir(lbot, 0755);
	for (int i = 0; i < NENTRIES; i++) {
		entry_name(i, name, sizeof(name));
		put(i % 2 ? ltop : lbot, name, name);
	}
	put(ltop, "entry-000", "shadows the bottom one");
	long_name(name);
	put(ltop, name, "long");
	snprintf(p, sizeof(p), "%s/link", top);
	if (symlink("file", p) && errno != EEXIST) {
		perror(p);
		exit(1);
	}
}

/* ---- calls (nfs_raw.h makes them synchronous) ---- */

/* nfs_raw_finish, marking a connection to the NFS program that gave no reply
 * broken: the next test reconnects. */
static int finish(struct rpc_context *rpc, struct call *c, int queued)
{
	if (!nfs_raw_finish(rpc, c, queued))
		return 0;
	if (!c->done && !queued && rpc == g.nfs)
		g.nfs_broken = true;
	return -1;
}

static int libnfs_mnt(int port, const char *path, struct fh *out)
{
	return nfs_raw_mnt(port, path, out) == MNT3_OK && out->len ? 0 : -1;
}

/* STATUS of a call through nfs_raw.h on g.nfs: -1 when there was no accepted
 * reply, after which the next test reconnects (an RPC error, which leaves the
 * connection usable, is taken as a broken one too). */
static int checked(int status)
{
	if (status < 0)
		g.nfs_broken = true;
	return status;
}

static struct nfs_raw_obj getattr(const struct fh *f)
{
	struct nfs_raw_obj o = nfs_raw_getattr(g.nfs, f);

	checked(o.status);
	return o;
}

static struct nfs_raw_obj lookup(const struct fh *dir, const char *name)
{
	struct nfs_raw_obj o = nfs_raw_lookup(g.nfs, dir, name);

	checked(o.status);
	return o;
}

/* A LOOKUP whose directory attributes test_lookup_attrs looks at (nfs_raw.h
 * keeps only the object's). */
struct lookup_out {
	int status;
	struct fh obj;
	post_op_attr obj_attr, dir_attr;
};

static void keep_lookup(void *data, void *out)
{
	LOOKUP3res *r = data;
	struct lookup_out *o = out;
	o->status = r->status;
	if (r->status == NFS3_OK) {
		nfs_raw_copy_fh(&o->obj, &r->LOOKUP3res_u.resok.object);
		o->obj_attr = r->LOOKUP3res_u.resok.obj_attributes;
		o->dir_attr = r->LOOKUP3res_u.resok.dir_attributes;
	} else {
		o->dir_attr = r->LOOKUP3res_u.resfail.dir_attributes;
	}
}

static int lookup_dir_attrs(const struct fh *dir, const char *name, struct lookup_out *o)
{
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct call c = {.keep = keep_lookup, .out = o};
	memset(o, 0, sizeof(*o));
	return finish(g.nfs, &c, rpc_nfs3_lookup_async(g.nfs, nfs_raw_on_reply, &a, &c));
}

static void lookup_ok(const struct fh *dir, const char *name, struct fh *out)
{
	struct nfs_raw_obj o = lookup(dir, name);

	assert_int_equal(o.status, NFS3_OK);
	*out = o.fh;
}

/* What the READ tests look at beyond nfs_raw_read: the reply's count against
 * its data length, and its attributes; keep_read also serves the calls
 * test_outstanding_calls keeps in flight at once. */
struct read_out {
	int status;
	uint32_t count;
	bool eof;
	bool attrs;
	unsigned char *data;
	uint32_t datalen;
};

static void keep_read(void *data, void *out)
{
	READ3res *r = data;
	struct read_out *o = out;
	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	o->count = r->READ3res_u.resok.count;
	o->eof = r->READ3res_u.resok.eof;
	o->attrs = r->READ3res_u.resok.file_attributes.attributes_follow;
	o->datalen = r->READ3res_u.resok.data.data_len;
	o->data = malloc(o->datalen + 1);
	if (o->data)
		memcpy(o->data, r->READ3res_u.resok.data.data_val, o->datalen);
}

static int nfs3_read(const struct fh *f, uint64_t off, uint32_t count, struct read_out *o)
{
	READ3args a = {.file = nfs_raw_fh3(f), .offset = off, .count = count};
	struct call c = {.keep = keep_read, .out = o};
	memset(o, 0, sizeof(*o));
	return finish(g.nfs, &c, rpc_nfs3_read_async(g.nfs, nfs_raw_on_reply, &a, &c));
}

static void keep_copy_fsinfo(void *data, void *out)
{
	memcpy(out, data, sizeof(FSINFO3res));
}

/* A listing: names, cookies and (READDIRPLUS) what came with each entry. */
struct entry_out {
	char *name;
	uint64_t cookie, fileid;
	bool attrs, handle;
	uint64_t attr_fileid;
	struct fh fh;
};

struct list_out {
	int status;
	bool eof;
	char verf[NFS3_COOKIEVERFSIZE];
	struct entry_out *e;
	size_t n;
};

static void list_add(struct list_out *o, const char *name, uint64_t cookie, uint64_t id)
{
	struct entry_out *e;
	o->e = realloc(o->e, (o->n + 1) * sizeof(*o->e));
	assert_non_null(o->e);
	e = &o->e[o->n++];
	memset(e, 0, sizeof(*e));
	e->name = strdup(name);
	e->cookie = cookie;
	e->fileid = id;
}

static void list_free(struct list_out *o)
{
	for (size_t i = 0; i < o->n; i++)
		free(o->e[i].name);
	free(o->e);
	memset(o, 0, sizeof(*o));
}

static void keep_readdir(void *data, void *out)
{
	READDIR3res *r = data;
	struct list_out *o = out;
	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	memcpy(o->verf, r->READDIR3res_u.resok.cookieverf, sizeof(o->verf));
	o->eof = r->READDIR3res_u.resok.reply.eof;
	for (entry3 *e = r->READDIR3res_u.resok.reply.entries; e; e = e->nextentry)
		list_add(o, e->name, e->cookie, e->fileid);
}

static void keep_readdirplus(void *data, void *out)
{
	READDIRPLUS3res *r = data;
	struct list_out *o = out;
	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	memcpy(o->verf, r->READDIRPLUS3res_u.resok.cookieverf, sizeof(o->verf));
	o->eof = r->READDIRPLUS3res_u.resok.reply.eof;
	for (entryplus3 *e = r->READDIRPLUS3res_u.resok.reply.entries; e;
	     e = e->nextentry) {
		struct entry_out *x;
		list_add(o, e->name, e->cookie, e->fileid);
		x = &o->e[o->n - 1];
		x->attrs = e->name_attributes.attributes_follow;
		if (x->attrs)
			x->attr_fileid =
			    e->name_attributes.post_op_attr_u.attributes.fileid;
		x->handle = e->name_handle.handle_follows;
		if (x->handle)
			nfs_raw_copy_fh(&x->fh, &e->name_handle.post_op_fh3_u.handle);
	}
}

static int nfs3_readdir(const struct fh *dir, uint64_t cookie, const char *verf,
			uint32_t count, struct list_out *o)
{
	READDIR3args a = {.dir = nfs_raw_fh3(dir), .cookie = cookie, .count = count};
	struct call c = {.keep = keep_readdir, .out = o};
	int rc;
	memcpy(a.cookieverf, verf, NFS3_COOKIEVERFSIZE);
	memset(o, 0, sizeof(*o));
	rc = finish(g.nfs, &c, rpc_nfs3_readdir_async(g.nfs, nfs_raw_on_reply, &a, &c));
	return rc;
}

static int nfs3_readdirplus(const struct fh *dir, uint64_t cookie, const char *verf,
			    uint32_t dircount, uint32_t maxcount, struct list_out *o)
{
	READDIRPLUS3args a = {.dir = nfs_raw_fh3(dir),
			      .cookie = cookie,
			      .dircount = dircount,
			      .maxcount = maxcount};
	struct call c = {.keep = keep_readdirplus, .out = o};
	memcpy(a.cookieverf, verf, NFS3_COOKIEVERFSIZE);
	memset(o, 0, sizeof(*o));
	return finish(g.nfs, &c,
		      rpc_nfs3_readdirplus_async(g.nfs, nfs_raw_on_reply, &a, &c));
}

/* A behaviour RFC 5531/1813 asks for and union-nfsd promises.  Against a
 * reference server (attach mode) a difference is reported, not failed: the
 * test then documents where that server differs. */
#define EXPECT(cond, ...)                                                                \
	do {                                                                             \
		if (!(cond)) {                                                           \
			if (!g.attached)                                                 \
				fail_msg(__VA_ARGS__);                                   \
			print_message("reference server differs: ");                     \
			print_message(__VA_ARGS__);                                      \
			print_message("\n");                                             \
		}                                                                        \
	} while (0)

/* ---- raw helpers ---- */

static int raw_simple(int port, enum raw_proto proto, const struct raw_call *c,
		      struct raw_reply *r)
{
	int fd = raw_connect(proto, port);
	int rc;
	if (fd < 0)
		return -1;
	rc = raw_call(fd, proto, c, r);
	close(fd);
	return rc;
}

static struct raw_call mkcall(uint32_t prog, uint32_t vers, uint32_t proc)
{
	struct raw_call c = {.xid = ++g.xid,
			     .rpcvers = 2,
			     .prog = prog,
			     .vers = vers,
			     .proc = proc,
			     .flavor = 1};
	return c;
}

/* An accepted reply with the given accept_stat. */
static void expect_accept(int port, enum raw_proto proto, struct raw_call c, int stat)
{
	struct raw_reply r;
	assert_int_equal(raw_simple(port, proto, &c, &r), 0);
	assert_int_equal(r.reply_stat, RAW_ACCEPTED);
	assert_int_equal(r.accept_stat, stat);
	raw_reply_free(&r);
}

static void null_ok(int port, enum raw_proto proto)
{
	expect_accept(port, proto, mkcall(NFS_PROG, 3, 0), RAW_SUCCESS);
}

/* ---- setup ---- */

static int parse_attach(const char *s)
{
	if (sscanf(s, "%d:%d:%4095s", &g.nfs_port, &g.mount_port, g.export) != 3) {
		fprintf(stderr, "PROTO_ATTACH=NFSPORT:MOUNTPORT:/EXPORT, not '%s'\n", s);
		return -1;
	}
	g.attached = true;
	return 0;
}

static int start_union(void)
{
	char top[PATH_MAX + 8], bottom[PATH_MAX + 8], lower[2 * PATH_MAX + 32];
	const char *args[2] = {lower, NULL};
	snprintf(g.tmp, sizeof(g.tmp), "/tmp/union-nfsd-protocol.XXXXXX");
	if (!mkdtemp(g.tmp))
		return -1;
	snprintf(top, sizeof(top), "%s/top", g.tmp);
	snprintf(bottom, sizeof(bottom), "%s/bottom", g.tmp);
	snprintf(g.state, sizeof(g.state), "%s/state", g.tmp);
	mkdir(top, 0755);
	mkdir(bottom, 0755);
	make_tree(top, bottom);
	snprintf(lower, sizeof(lower), "--lowerdir=%s:%s", top, bottom);
	if (test_server_start(g.bin, g.state, args, &g.srv))
		return -1;
	g.nfs_port = g.srv.nfs_port;
	g.mount_port = g.srv.mount_port;
	strcpy(g.export, "/");
	return 0;
}

static int connect_nfs(void)
{
	if (libnfs_mnt(g.mount_port, g.export, &g.root)) {
		fprintf(stderr, "MNT %s on port %d failed\n", g.export, g.mount_port);
		return -1;
	}
	g.nfs = nfs_raw_connect(g.nfs_port, NFS_PROG, 3);
	return g.nfs ? 0 : -1;
}

static int group_setup(void **state)
{
	const char *attach = getenv("PROTO_ATTACH");
	(void)state;
	g.xid = (uint32_t)time(NULL) << 8;
	if (attach ? parse_attach(attach) : start_union())
		return -1;
	return connect_nfs();
}

/* Each test starts with a working connection, whatever the last one did to it. */
static int test_setup(void **state)
{
	(void)state;
	if (g.nfs && !g.nfs_broken)
		return 0;
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	g.nfs_broken = false;
	g.nfs = nfs_raw_connect(g.nfs_port, NFS_PROG, 3);
	return g.nfs ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	g.nfs = NULL;
	if (!g.attached)
		test_server_stop(&g.srv);
	test_tmp_remove(g.tmp, "/tmp/union-nfsd-protocol.");
	return 0;
}

/* ---- RPC level ---- */

static void test_null(void **state)
{
	(void)state;
	null_ok(g.nfs_port, RAW_TCP);
	null_ok(g.nfs_port, RAW_UDP);
	expect_accept(g.mount_port, RAW_TCP, mkcall(MOUNT_PROG, 3, 0), RAW_SUCCESS);
	expect_accept(g.mount_port, RAW_UDP, mkcall(MOUNT_PROG, 3, 0), RAW_SUCCESS);
}

static void test_unknown_program(void **state)
{
	(void)state;
	expect_accept(g.nfs_port, RAW_TCP, mkcall(100099, 1, 0), RAW_PROG_UNAVAIL);
	expect_accept(g.nfs_port, RAW_UDP, mkcall(100099, 1, 0), RAW_PROG_UNAVAIL);
	expect_accept(g.mount_port, RAW_TCP, mkcall(100099, 1, 0), RAW_PROG_UNAVAIL);
}

static void expect_prog_mismatch(int port, uint32_t prog, uint32_t vers, uint32_t good)
{
	struct raw_call c = mkcall(prog, vers, 0);
	struct raw_reply r;
	assert_int_equal(raw_simple(port, RAW_TCP, &c, &r), 0);
	assert_int_equal(r.reply_stat, RAW_ACCEPTED);
	assert_int_equal(r.accept_stat, RAW_PROG_MISMATCH);
	/* the supported range holds the version we speak and not the one we sent */
	assert_true(r.low <= good && good <= r.high);
	assert_false(r.low <= vers && vers <= r.high);
	raw_reply_free(&r);
}

static void test_unknown_version(void **state)
{
	(void)state;
	expect_prog_mismatch(g.nfs_port, NFS_PROG, 2, 3);
	expect_prog_mismatch(g.nfs_port, NFS_PROG, 5, 3);
	expect_prog_mismatch(g.mount_port, MOUNT_PROG, 4, 3);
}

static void test_unknown_procedure(void **state)
{
	(void)state;
	expect_accept(g.nfs_port, RAW_TCP, mkcall(NFS_PROG, 3, 22), RAW_PROC_UNAVAIL);
	expect_accept(g.nfs_port, RAW_TCP, mkcall(NFS_PROG, 3, 0x7fffffff),
		      RAW_PROC_UNAVAIL);
	expect_accept(g.nfs_port, RAW_UDP, mkcall(NFS_PROG, 3, 1000), RAW_PROC_UNAVAIL);
	expect_accept(g.mount_port, RAW_TCP, mkcall(MOUNT_PROG, 3, 6), RAW_PROC_UNAVAIL);
}

static void test_rpc_version(void **state)
{
	struct raw_call c = mkcall(NFS_PROG, 3, 0);
	struct raw_reply r;
	int rc;
	(void)state;
	c.rpcvers = 3;
	rc = raw_simple(g.nfs_port, RAW_TCP, &c, &r);
	EXPECT(rc == 0, "RPC version 3: no reply, want MSG_DENIED/RPC_MISMATCH");
	if (rc)
		return;
	assert_int_equal(r.reply_stat, RAW_DENIED);
	assert_int_equal(r.reject_stat, RAW_RPC_MISMATCH);
	assert_int_equal(r.low, 2);
	assert_int_equal(r.high, 2);
	raw_reply_free(&r);
}

static void test_auth_flavor(void **state)
{
	int flavors[] = {3 /* AUTH_DH */, 4 /* AUTH_KERB4 */, 390003 /* unassigned */};
	(void)state;
	for (size_t i = 0; i < sizeof(flavors) / sizeof(flavors[0]); i++) {
		struct raw_call c = mkcall(NFS_PROG, 3, 0);
		struct raw_reply r;
		c.flavor = flavors[i];
		assert_int_equal(raw_simple(g.nfs_port, RAW_TCP, &c, &r), 0);
		if (r.reply_stat != RAW_DENIED || r.reject_stat != RAW_AUTH_ERROR)
			fail_msg(
			    "flavour %d: reply_stat %d reject_stat %d accept_stat %d, "
			    "want MSG_DENIED/AUTH_ERROR",
			    flavors[i], r.reply_stat, r.reject_stat, r.accept_stat);
		raw_reply_free(&r);
	}
	/* AUTH_NONE is accepted */
	struct raw_call c = mkcall(NFS_PROG, 3, 0);
	c.flavor = 0;
	expect_accept(g.nfs_port, RAW_TCP, c, RAW_SUCCESS);
}

static void test_garbage_args(void **state)
{
	unsigned char args[4096];
	struct raw_reply r;
	int fd = raw_connect(RAW_TCP, g.nfs_port);
	struct raw_call c;
	(void)state;
	assert_true(fd >= 0);
	/* GETATTR with 3 bytes of arguments: not even a length word */
	c = mkcall(NFS_PROG, 3, 1);
	memset(args, 0, sizeof(args));
	c.args = args;
	c.arglen = 3;
	assert_int_equal(raw_call(fd, RAW_TCP, &c, &r), 0);
	assert_int_equal(r.reply_stat, RAW_ACCEPTED);
	assert_int_equal(r.accept_stat, RAW_GARBAGE_ARGS);
	raw_reply_free(&r);
	/* a handle of 100 bytes (NFS3_FHSIZE is 64) */
	c = mkcall(NFS_PROG, 3, 1);
	c.args = args;
	c.arglen = raw_enc_fh(args, args + 1024, 100);
	assert_int_equal(raw_call(fd, RAW_TCP, &c, &r), 0);
	assert_int_equal(r.accept_stat, RAW_GARBAGE_ARGS);
	raw_reply_free(&r);
	/* a LOOKUP whose name length runs past the end of the call */
	c = mkcall(NFS_PROG, 3, 3);
	c.args = args;
	c.arglen = raw_enc_fh(args, g.root.d, g.root.len);
	args[c.arglen] = 0x00, args[c.arglen + 1] = 0x00, args[c.arglen + 2] = 0x10;
	args[c.arglen + 3] = 0x00; /* 4096 bytes announced, 4 sent */
	memcpy(args + c.arglen + 4, "abcd", 4);
	c.arglen += 8;
	assert_int_equal(raw_call(fd, RAW_TCP, &c, &r), 0);
	assert_int_equal(r.accept_stat, RAW_GARBAGE_ARGS);
	raw_reply_free(&r);
	/* READ with the count missing */
	c = mkcall(NFS_PROG, 3, 6);
	c.args = args;
	c.arglen = raw_enc_fh(args, g.root.d, g.root.len) + 8;
	assert_int_equal(raw_call(fd, RAW_TCP, &c, &r), 0);
	assert_int_equal(r.accept_stat, RAW_GARBAGE_ARGS);
	raw_reply_free(&r);
	/* MNT of a path longer than MNTPATHLEN (1024), on the MOUNT port */
	memset(args + 2048, 'a', 1500);
	args[2048 + 1500] = '\0';
	c = mkcall(MOUNT_PROG, 3, 1);
	c.args = args;
	c.arglen = raw_enc_string(args, (char *)args + 2048);
	assert_int_equal(raw_simple(g.mount_port, RAW_TCP, &c, &r), 0);
	assert_int_equal(r.accept_stat, RAW_GARBAGE_ARGS);
	raw_reply_free(&r);
	/* the connection still works */
	c = mkcall(NFS_PROG, 3, 0);
	assert_int_equal(raw_call(fd, RAW_TCP, &c, &r), 0);
	assert_int_equal(r.accept_stat, RAW_SUCCESS);
	raw_reply_free(&r);
	close(fd);
}

static void test_truncated_record(void **state)
{
	unsigned char buf[256];
	struct raw_call c = mkcall(NFS_PROG, 3, 0);
	size_t len = raw_encode_call(&c, buf, sizeof(buf));
	uint32_t mark = htonl(0x80000000u | 1000);
	int fd = raw_connect(RAW_TCP, g.nfs_port);
	(void)state;
	assert_true(fd >= 0 && len > 0);
	/* a record announcing 1000 bytes, 40 of them sent, then end of stream */
	assert_int_equal(raw_send_all(fd, &mark, 4), 0);
	assert_int_equal(raw_send_all(fd, buf, 40 < len ? 40 : len), 0);
	shutdown(fd, SHUT_WR);
	EXPECT(raw_wait_closed(fd), "half a record, then end of stream: the connection "
				    "stays open for 5 s");
	close(fd);
	/* a record mark announcing 2 GiB */
	fd = raw_connect(RAW_TCP, g.nfs_port);
	assert_true(fd >= 0);
	mark = htonl(0xffffffffu);
	assert_int_equal(raw_send_all(fd, &mark, 4), 0);
	assert_int_equal(raw_send_all(fd, buf, len), 0);
	EXPECT(raw_wait_closed(fd), "a record mark of 2 GiB: the connection stays open");
	close(fd);
	/* the call header itself cut short, in a complete record */
	fd = raw_connect(RAW_TCP, g.nfs_port);
	assert_true(fd >= 0);
	assert_int_equal(raw_send_fragment(fd, buf, 10, true), 0);
	{
		struct raw_reply r;
		/* closing is right; a GARBAGE_ARGS or a denial would do too */
		if (raw_recv_reply(fd, RAW_TCP, &r) == 0) {
			if (r.reply_stat == RAW_ACCEPTED &&
			    r.accept_stat != RAW_GARBAGE_ARGS)
				fail_msg(
				    "a call header cut short: accepted with status %d",
				    r.accept_stat);
			raw_reply_free(&r);
		}
	}
	close(fd);
	null_ok(g.nfs_port, RAW_TCP);
	null_ok(g.nfs_port, RAW_UDP);
}

/* Sends a NULL call cut into fragments at the given offsets; true if answered. */
static bool null_in_fragments(const size_t *cuts, int ncuts)
{
	unsigned char buf[256];
	struct raw_call c = mkcall(NFS_PROG, 3, 0);
	size_t len = raw_encode_call(&c, buf, sizeof(buf)), at = 0;
	struct raw_reply r;
	bool ok = false;
	int fd = raw_connect(RAW_TCP, g.nfs_port);
	assert_true(fd >= 0 && len > 40);
	for (int i = 0; i < ncuts; i++) {
		assert_int_equal(raw_send_fragment(fd, buf + at, cuts[i] - at, false), 0);
		at = cuts[i];
	}
	assert_int_equal(raw_send_fragment(fd, buf + at, len - at, true), 0);
	if (raw_recv_reply(fd, RAW_TCP, &r) == 0) {
		ok = r.xid == c.xid && r.accept_stat == RAW_SUCCESS;
		raw_reply_free(&r);
	}
	close(fd);
	return ok;
}

static void test_fragmented_record(void **state)
{
	const size_t words[] = {8, 24}, bytes[] = {1, 11, 30};
	(void)state;
	/* cut between XDR words, then anywhere (even inside the xid) */
	assert_true(null_in_fragments(words, 2));
	EXPECT(null_in_fragments(bytes, 3), "a call in fragments of 1, 10, 19 and the "
					    "rest bytes: no reply");
}

/* ---- handles ---- */

/* A handle that is not one the server gave out: BADHANDLE or STALE.  (A reference
 * server may ignore some bytes of its handles; it must then still name the same
 * object.) */
static void expect_bad_handle(const struct fh *f, const char *what, uint64_t fileid)
{
	struct nfs_raw_obj res = getattr(f);

	if (res.status < 0) {
		EXPECT(0, "GETATTR with %s: no NFS status (the RPC error is above)",
		       what);
		return;
	}
	if (g.attached && res.status == NFS3_OK && res.fileid == fileid)
		return;
	if (res.status != NFS3ERR_BADHANDLE && res.status != NFS3ERR_STALE)
		fail_msg(
		    "GETATTR with %s: status %d, want BADHANDLE (10001) or STALE (70)",
		    what, res.status);
}

static void test_flipped_handle(void **state)
{
	struct fh f, file;
	char what[64];
	struct nfs_raw_obj res;
	uint64_t id;
	(void)state;
	lookup_ok(&g.root, "file", &file);
	res = getattr(&file);
	assert_int_equal(res.status, NFS3_OK);
	id = res.fileid;
	for (uint32_t i = 0; i < file.len; i++) {
		for (int bit = 0; bit < 8; bit += 7) {
			f = file;
			f.d[i] ^= (unsigned char)(1u << bit);
			snprintf(what, sizeof(what), "bit %d of byte %u of %u flipped",
				 bit, i, file.len);
			expect_bad_handle(&f, what, id);
		}
	}
	f = file;
	f.len = file.len - 1;
	expect_bad_handle(&f, "the last byte cut off", id);
	f.len = 1;
	expect_bad_handle(&f, "a 1-byte handle", id);
	f.len = 0;
	expect_bad_handle(&f, "an empty handle", id);
	f.len = 64;
	for (int i = 0; i < 64; i++)
		f.d[i] = (unsigned char)(i * 37 + 11);
	expect_bad_handle(&f, "64 bytes of junk", id);
	/* the server is still there and the real handle still works */
	res = getattr(&file);
	assert_int_equal(res.status, NFS3_OK);
	assert_int_equal(res.size, FILE_SIZE);
}

/* ---- READ ---- */

static void check_data(const struct read_out *o, uint64_t off)
{
	assert_int_equal(o->datalen, o->count);
	for (uint32_t i = 0; i < o->datalen; i++)
		if (o->data[i] != pattern(off + i))
			fail_msg("byte %" PRIu64 " is 0x%02x, want 0x%02x", off + i,
				 o->data[i], pattern(off + i));
}

static void test_read_eof(void **state)
{
	struct fh file;
	struct read_out o;
	(void)state;
	lookup_ok(&g.root, "file", &file);
	/* past EOF: nothing, eof */
	assert_int_equal(nfs3_read(&file, FILE_SIZE + 100, 100, &o), 0);
	assert_int_equal(o.status, NFS3_OK);
	assert_int_equal(o.count, 0);
	assert_true(o.eof);
	free(o.data);
	/* at EOF exactly */
	assert_int_equal(nfs3_read(&file, FILE_SIZE, 100, &o), 0);
	assert_int_equal(o.count, 0);
	assert_true(o.eof);
	free(o.data);
	/* the last 10 bytes, asked for exactly: eof */
	assert_int_equal(nfs3_read(&file, FILE_SIZE - 10, 10, &o), 0);
	assert_int_equal(o.count, 10);
	assert_true(o.eof);
	check_data(&o, FILE_SIZE - 10);
	free(o.data);
	/* crossing EOF: short, eof */
	assert_int_equal(nfs3_read(&file, FILE_SIZE - 10, 4096, &o), 0);
	assert_int_equal(o.count, 10);
	assert_true(o.eof);
	check_data(&o, FILE_SIZE - 10);
	free(o.data);
	/* stopping one byte short of EOF: no eof */
	assert_int_equal(nfs3_read(&file, FILE_SIZE - 11, 10, &o), 0);
	assert_int_equal(o.count, 10);
	assert_false(o.eof);
	check_data(&o, FILE_SIZE - 11);
	free(o.data);
	/* a small file read whole in one call: eof, attributes */
	struct fh small;
	lookup_ok(&g.root, "small", &small);
	assert_int_equal(nfs3_read(&small, 0, 6, &o), 0);
	assert_int_equal(o.count, 6);
	assert_true(o.eof);
	assert_true(o.attrs);
	assert_memory_equal(o.data, "hello\n", 6);
	free(o.data);
}

static void test_read_rtmax(void **state)
{
	FSINFO3args a = {.fsroot = nfs_raw_fh3(&g.root)};
	FSINFO3res res;
	struct call c = {.keep = keep_copy_fsinfo, .out = &res};
	struct fh file;
	struct read_out o;
	uint64_t off = 0;
	int calls = 0;
	(void)state;
	assert_int_equal(
	    finish(g.nfs, &c, rpc_nfs3_fsinfo_async(g.nfs, nfs_raw_on_reply, &a, &c)), 0);
	assert_int_equal(res.status, NFS3_OK);
	uint32_t rtmax = res.FSINFO3res_u.resok.rtmax;
	lookup_ok(&g.root, "file", &file);
	/* ask for more than rtmax at a time: each reply is capped at rtmax, the bytes
	 * are right and eof comes exactly with the last byte.  libnfs takes replies of
	 * up to 1 MiB + 4 KiB, so a server whose rtmax is that big is asked for
	 * exactly rtmax. */
	uint32_t ask = rtmax <= (1u << 20) - 65536 ? rtmax + 65536 : (1u << 20);
	while (calls++ < 64) {
		assert_int_equal(nfs3_read(&file, off, ask, &o), 0);
		assert_int_equal(o.status, NFS3_OK);
		assert_true(o.count <= rtmax);
		assert_true(o.count > 0 || o.eof);
		check_data(&o, off);
		off += o.count;
		free(o.data);
		assert_int_equal(o.eof, off == FILE_SIZE);
		if (o.eof)
			break;
	}
	assert_int_equal(off, FILE_SIZE);
}

/* ---- READDIR / READDIRPLUS ---- */

/* The names the directory "dir" must list, "." and ".." included. */
static bool expected_name(const char *name)
{
	char lname[LONGNAME_LEN + 1];
	int i;
	long_name(lname);
	if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, lname))
		return true;
	return sscanf(name, "entry-%d", &i) == 1 && i >= 0 && i < NENTRIES;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Each expected name exactly once, nothing else. */
static void check_names(char **names, size_t n, const char *how)
{
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (i && !strcmp(names[i], names[i - 1]))
			fail_msg("%s: '%s' listed twice", how, names[i]);
		if (!expected_name(names[i]))
			fail_msg("%s: unexpected name '%s'", how, names[i]);
	}
	if (n != NENTRIES + 3)
		fail_msg("%s: %zu names, want %d", how, n, NENTRIES + 3);
}

static void test_readdir_tiny(void **state)
{
	struct fh dir;
	struct list_out o;
	char verf[NFS3_COOKIEVERFSIZE] = {0};
	(void)state;
	lookup_ok(&g.root, "dir", &dir);
	/* READDIR whose count cannot hold a reply: TOOSMALL, or at least one entry */
	assert_int_equal(nfs3_readdir(&dir, 0, verf, 1, &o), 0);
	if (o.status == NFS3_OK)
		EXPECT(o.n >= 1, "READDIR count 1: OK with no entry (eof %d)", o.eof);
	else
		assert_int_equal(o.status, NFS3ERR_TOOSMALL);
	list_free(&o);
	/* READDIRPLUS with a dircount of 1 and room in maxcount */
	assert_int_equal(nfs3_readdirplus(&dir, 0, verf, 1, 32768, &o), 0);
	if (o.status == NFS3_OK)
		EXPECT(o.n >= 1, "READDIRPLUS dircount 1: OK with no entry (eof %d)",
		       o.eof);
	else
		assert_int_equal(o.status, NFS3ERR_TOOSMALL);
	list_free(&o);
	/* READDIRPLUS whose maxcount cannot hold a reply */
	assert_int_equal(nfs3_readdirplus(&dir, 0, verf, 8192, 16, &o), 0);
	if (o.status == NFS3_OK)
		EXPECT(o.n >= 1, "READDIRPLUS maxcount 16: OK with no entry (eof %d)",
		       o.eof);
	else
		assert_int_equal(o.status, NFS3ERR_TOOSMALL);
	list_free(&o);
}

static void page_through(bool plus, uint32_t count)
{
	struct fh dir;
	struct list_out o;
	char verf[NFS3_COOKIEVERFSIZE] = {0};
	char **names = NULL;
	size_t n = 0;
	uint64_t cookie = 0;
	int pages = 0;
	char how[64];
	snprintf(how, sizeof(how), "%s paging by %u bytes",
		 plus ? "READDIRPLUS" : "READDIR", count);
	lookup_ok(&g.root, "dir", &dir);
	for (;;) {
		int rc = plus ? nfs3_readdirplus(&dir, cookie, verf, count / 4, count, &o)
			      : nfs3_readdir(&dir, cookie, verf, count, &o);
		assert_int_equal(rc, 0);
		if (o.status != NFS3_OK)
			fail_msg("%s: page %d (cookie %" PRIu64 "): status %d", how,
				 pages, cookie, o.status);
		if (!o.n && !o.eof)
			fail_msg("%s: page %d is empty without eof", how, pages);
		for (size_t i = 0; i < o.n; i++) {
			struct entry_out *e = &o.e[i];
			names = realloc(names, (n + 1) * sizeof(*names));
			names[n++] = strdup(e->name);
			if (plus && e->attrs && e->attr_fileid != e->fileid)
				fail_msg("%s: %s: entry fileid %" PRIu64
					 ", attributes %" PRIu64,
					 how, e->name, e->fileid, e->attr_fileid);
			if (plus && strcmp(e->name, ".") && strcmp(e->name, "..") &&
			    (!e->attrs || !e->handle))
				fail_msg("%s: %s came without attributes or handle", how,
					 e->name);
			cookie = e->cookie;
		}
		memcpy(verf, o.verf, sizeof(verf));
		bool eof = o.eof;
		list_free(&o);
		if (eof)
			break;
		if (++pages > 2000)
			fail_msg("%s: no eof after 2000 pages", how);
	}
	check_names(names, n, how);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static void test_readdir_paging(void **state)
{
	(void)state;
	page_through(false, 512);
	page_through(false, 65536);
}

static void test_readdirplus_paging(void **state)
{
	(void)state;
	page_through(true, 1024);
	page_through(true, 65536);
}

/* A handle from READDIRPLUS, one from LOOKUP: the same object, the same fileid. */
static void test_readdirplus_handles(void **state)
{
	struct fh dir, looked;
	struct list_out o;
	char verf[NFS3_COOKIEVERFSIZE] = {0};
	struct nfs_raw_obj a, b;
	(void)state;
	lookup_ok(&g.root, "dir", &dir);
	assert_int_equal(nfs3_readdirplus(&dir, 0, verf, 8192, 65536, &o), 0);
	assert_int_equal(o.status, NFS3_OK);
	for (size_t i = 0, checked = 0; i < o.n && checked < 20; i++) {
		if (!o.e[i].handle || o.e[i].name[0] == '.')
			continue;
		checked++;
		lookup_ok(&dir, o.e[i].name, &looked);
		a = getattr(&o.e[i].fh);
		b = getattr(&looked);
		assert_int_equal(a.status, NFS3_OK);
		assert_int_equal(b.status, NFS3_OK);
		assert_int_equal(a.fileid, o.e[i].fileid);
		assert_int_equal(b.fileid, o.e[i].fileid);
	}
	list_free(&o);
}

/* ---- other procedures ---- */

static void test_lookup_attrs(void **state)
{
	struct lookup_out o;
	struct nfs_raw_obj obj, dir, e;
	(void)state;
	assert_int_equal(lookup_dir_attrs(&g.root, "file", &o), 0);
	assert_int_equal(o.status, NFS3_OK);
	assert_true(o.obj_attr.attributes_follow);
	assert_true(o.dir_attr.attributes_follow);
	assert_int_equal(o.obj_attr.post_op_attr_u.attributes.type, NF3REG);
	assert_int_equal(o.obj_attr.post_op_attr_u.attributes.size, FILE_SIZE);
	obj = getattr(&o.obj);
	dir = getattr(&g.root);
	assert_int_equal(obj.status, NFS3_OK);
	assert_int_equal(dir.status, NFS3_OK);
	assert_int_equal(obj.fileid, o.obj_attr.post_op_attr_u.attributes.fileid);
	assert_int_equal(dir.fileid, o.dir_attr.post_op_attr_u.attributes.fileid);
	assert_int_equal(dir.type, NF3DIR);
	/* a name that is not there: NOENT, with the directory's attributes */
	assert_int_equal(lookup_dir_attrs(&g.root, "no-such-name", &o), 0);
	assert_int_equal(o.status, NFS3ERR_NOENT);
	assert_true(o.dir_attr.attributes_follow);
	/* a name in the lower layer only, and one shadowing a lower one */
	struct fh d, e2;
	lookup_ok(&g.root, "dir", &d);
	lookup_ok(&d, "entry-002", &e2);
	e = lookup(&d, "entry-000");
	assert_int_equal(e.status, NFS3_OK);
	assert_true(e.attrs);
	assert_int_equal(e.size, strlen("shadows the bottom one"));
}

struct readlink_out {
	int status;
	char target[64];
};

static void keep_readlink(void *data, void *out)
{
	READLINK3res *r = data;
	struct readlink_out *o = out;
	o->status = r->status;
	if (r->status == NFS3_OK)
		snprintf(o->target, sizeof(o->target), "%s",
			 r->READLINK3res_u.resok.data);
}

struct access_out {
	int status;
	uint32_t access;
	bool attrs;
};

static void keep_access(void *data, void *out)
{
	ACCESS3res *r = data;
	struct access_out *o = out;
	o->status = r->status;
	if (r->status == NFS3_OK) {
		o->access = r->ACCESS3res_u.resok.access;
		o->attrs = r->ACCESS3res_u.resok.obj_attributes.attributes_follow;
	}
}

static void test_readlink_access(void **state)
{
	struct fh link, file;
	READLINK3args ra;
	ACCESS3args aa;
	struct readlink_out rl = {.status = -1};
	struct access_out acc = {.status = -1};
	struct call c;
	(void)state;
	lookup_ok(&g.root, "link", &link);
	ra.symlink = nfs_raw_fh3(&link);
	c = (struct call){.keep = keep_readlink, .out = &rl};
	assert_int_equal(
	    finish(g.nfs, &c, rpc_nfs3_readlink_async(g.nfs, nfs_raw_on_reply, &ra, &c)),
	    0);
	assert_int_equal(rl.status, NFS3_OK);
	assert_string_equal(rl.target, "file");
	/* ACCESS: reading a 0644 file is granted, with post-op attributes */
	lookup_ok(&g.root, "file", &file);
	aa.object = nfs_raw_fh3(&file);
	aa.access = ACCESS3_READ;
	c = (struct call){.keep = keep_access, .out = &acc};
	assert_int_equal(
	    finish(g.nfs, &c, rpc_nfs3_access_async(g.nfs, nfs_raw_on_reply, &aa, &c)),
	    0);
	assert_int_equal(acc.status, NFS3_OK);
	assert_true(acc.access & ACCESS3_READ);
	assert_true(acc.attrs);
}

static void test_fsinfo(void **state)
{
	FSINFO3args a = {.fsroot = nfs_raw_fh3(&g.root)};
	FSINFO3res res;
	struct call c = {.keep = keep_copy_fsinfo, .out = &res};
	(void)state;
	assert_int_equal(
	    finish(g.nfs, &c, rpc_nfs3_fsinfo_async(g.nfs, nfs_raw_on_reply, &a, &c)), 0);
	assert_int_equal(res.status, NFS3_OK);
	FSINFO3resok *ok = &res.FSINFO3res_u.resok;
	if (ok->rtmax < 65536 || ok->wtmax < 65536 || ok->rtpref > ok->rtmax ||
	    ok->maxfilesize == 0)
		fail_msg(
		    "FSINFO rtmax %u rtpref %u wtmax %u dtpref %u maxfilesize %" PRIu64,
		    ok->rtmax, ok->rtpref, ok->wtmax, ok->dtpref, ok->maxfilesize);
	if (!g.attached && ok->dtpref < 65536)
		fail_msg("FSINFO dtpref %u, want >= 65536", ok->dtpref);
}

static void test_read_only(void **state)
{
	struct fh file;
	int status;
	struct call c;
	(void)state;
	lookup_ok(&g.root, "file", &file);
	assert_int_equal(checked(nfs_raw_write(g.nfs, &file, 0, "overwrite", 9)),
			 NFS3ERR_ROFS);
	assert_int_equal(
	    checked(nfs_raw_create_or_remove(g.nfs, &g.root, "new-file", true)),
	    NFS3ERR_ROFS);

	MKDIR3args mk;
	memset(&mk, 0, sizeof(mk));
	mk.where.dir = nfs_raw_fh3(&g.root);
	mk.where.name = "new-dir";
	c = (struct call){.keep = nfs_raw_keep_status, .out = &status};
	assert_int_equal(
	    finish(g.nfs, &c, rpc_nfs3_mkdir_async(g.nfs, nfs_raw_on_reply, &mk, &c)), 0);
	assert_int_equal(status, NFS3ERR_ROFS);

	assert_int_equal(
	    checked(nfs_raw_create_or_remove(g.nfs, &g.root, "small", false)),
	    NFS3ERR_ROFS);
	assert_int_equal(checked(nfs_raw_setattr_mode(g.nfs, &file, 0600)), NFS3ERR_ROFS);

	/* nothing changed */
	struct read_out o;
	assert_int_equal(nfs3_read(&file, 0, 16, &o), 0);
	check_data(&o, 0);
	free(o.data);
	assert_int_equal(lookup(&g.root, "small").status, NFS3_OK);
	assert_int_equal(lookup(&g.root, "new-file").status, NFS3ERR_NOENT);
}

/* ---- MOUNT ---- */

static void test_mount_on_nfs_port(void **state)
{
	struct fh f;
	unsigned char raw[64];
	uint32_t rawlen = 0;
	int fd;
	(void)state;
	if (g.attached)
		skip(); /* a union-nfsd promise: MOUNT is served on the NFS port too */
	assert_int_equal(libnfs_mnt(g.nfs_port, g.export, &f), 0);
	assert_int_equal(f.len, g.root.len);
	assert_memory_equal(f.d, g.root.d, f.len);
	fd = raw_connect(RAW_UDP, g.nfs_port);
	assert_true(fd >= 0);
	assert_int_equal(raw_mnt(fd, RAW_UDP, g.export, raw, &rawlen), 0);
	close(fd);
	assert_int_equal(rawlen, g.root.len);
	/* and the libnfs high-level mount with mountport=nfsport */
	struct nfs_context *nfs = nfs_init_context();
	char url[PATH_MAX + 128];
	struct nfs_url *u;
	struct nfs_stat_64 st;
	assert_non_null(nfs);
	nfs_set_timeout(nfs, 10000);
	nfs_set_autoreconnect(nfs, 0);
	snprintf(url, sizeof(url), "nfs://127.0.0.1%s?nfsport=%d&mountport=%d&version=3",
		 g.export, g.nfs_port, g.nfs_port);
	u = nfs_parse_url_dir(nfs, url);
	assert_non_null(u);
	if (nfs_mount(nfs, u->server, u->path))
		fail_msg("nfs_mount %s: %s", url, nfs_get_error(nfs));
	assert_int_equal(nfs_stat64(nfs, "/file", &st), 0);
	assert_int_equal(st.nfs_size, FILE_SIZE);
	nfs_umount(nfs);
	nfs_destroy_url(u);
	nfs_destroy_context(nfs);
}

static void keep_exports(void *data, void *out)
{
	exports ex = *(exports *)data;
	bool *found = out;
	for (; ex; ex = ex->ex_next)
		if (!strcmp(ex->ex_dir, g.export))
			*found = true;
}

static void test_mount_procs(void **state)
{
	struct rpc_context *rpc = nfs_raw_connect(g.mount_port, MOUNT_PROG, 3);
	bool found = false;
	struct call c = {.keep = keep_exports, .out = &found};
	(void)state;
	assert_non_null(rpc);
	assert_int_equal(
	    finish(rpc, &c, rpc_mount3_export_async(rpc, nfs_raw_on_reply, &c)), 0);
	assert_true(found);
	c = (struct call){0};
	assert_int_equal(
	    finish(rpc, &c, rpc_mount3_dump_async(rpc, nfs_raw_on_reply, &c)), 0);
	c = (struct call){0};
	assert_int_equal(
	    finish(rpc, &c,
		   rpc_mount3_umnt_async(rpc, nfs_raw_on_reply, (char *)g.export, &c)),
	    0);
	/* MNT of a path that is not exported */
	struct fh f;
	assert_int_not_equal(libnfs_mnt(g.mount_port, "/no/such/export", &f), 0);
	rpc_destroy_context(rpc);
}

/* ---- UDP ---- */

static void test_udp(void **state)
{
	unsigned char fh[64];
	uint32_t fhlen = 0;
	uint64_t id_udp = 0;
	struct nfs_raw_obj tcp;
	int fd = raw_connect(RAW_UDP, g.mount_port);
	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_mnt(fd, RAW_UDP, g.export, fh, &fhlen), 0);
	close(fd);
	assert_int_equal(fhlen, g.root.len);
	assert_memory_equal(fh, g.root.d, fhlen);
	fd = raw_connect(RAW_UDP, g.nfs_port);
	assert_true(fd >= 0);
	assert_int_equal(raw_getattr(fd, RAW_UDP, fh, fhlen, &id_udp), 0);
	close(fd);
	tcp = getattr(&g.root);
	assert_int_equal(tcp.status, NFS3_OK);
	assert_int_equal(tcp.fileid, id_udp);
}

/* ---- concurrency ---- */

static void test_outstanding_calls(void **state)
{
	enum { N = 32, CHUNK = 8192 };
	struct fh file;
	struct call cs[N];
	struct read_out os[N];
	READ3args a[N];
	(void)state;
	lookup_ok(&g.root, "file", &file);
	for (int i = 0; i < N; i++) {
		/* spread over the file, the last ones crossing EOF */
		uint64_t off = (uint64_t)(N - 1 - i) * (FILE_SIZE / N);
		a[i] = (READ3args){
		    .file = nfs_raw_fh3(&file), .offset = off, .count = CHUNK};
		memset(&os[i], 0, sizeof(os[i]));
		cs[i] = (struct call){.keep = keep_read, .out = &os[i]};
		assert_int_equal(
		    rpc_nfs3_read_async(g.nfs, nfs_raw_on_reply, &a[i], &cs[i]), 0);
	}
	assert_true(rpc_queue_length(g.nfs) >= 1);
	if (nfs_raw_wait(g.nfs, cs, N, NFS_RAW_WAIT_S)) {
		g.nfs_broken = true;
		fail_msg("no reply to %d READs", N);
	}
	for (int i = 0; i < N; i++) {
		uint64_t want =
		    FILE_SIZE - a[i].offset < CHUNK ? FILE_SIZE - a[i].offset : CHUNK;
		assert_int_equal(cs[i].status, RPC_STATUS_SUCCESS);
		assert_int_equal(os[i].status, NFS3_OK);
		assert_int_equal(os[i].count, want);
		check_data(&os[i], a[i].offset);
		free(os[i].data);
	}
}

/* ---- still alive ---- */

static void test_still_serving(void **state)
{
	(void)state;
	if (!g.attached && !test_server_alive(&g.srv))
		fail_msg("union-nfsd is gone");
	null_ok(g.nfs_port, RAW_TCP);
	null_ok(g.nfs_port, RAW_UDP);
	assert_int_equal(getattr(&g.root).status, NFS3_OK);
}

/* A handle from before a restart resolves to the same object after it. */
static void test_handle_after_restart(void **state)
{
	struct fh file, entry, d;
	struct nfs_raw_obj before, after;
	char lower[2 * PATH_MAX + 32];
	const char *args[2] = {lower, NULL};
	(void)state;
	if (g.attached)
		skip();
	lookup_ok(&g.root, "file", &file);
	lookup_ok(&g.root, "dir", &d);
	lookup_ok(&d, "entry-123", &entry);
	before = getattr(&entry);
	assert_int_equal(before.status, NFS3_OK);
	rpc_destroy_context(g.nfs);
	g.nfs = NULL;
	int st = test_server_stop(&g.srv);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("union-nfsd ended with wait status 0x%x on SIGTERM, want exit 0",
			 st);
	snprintf(lower, sizeof(lower), "--lowerdir=%s/top:%s/bottom", g.tmp, g.tmp);
	assert_int_equal(test_server_start(g.bin, g.state, args, &g.srv), 0);
	g.nfs_port = g.srv.nfs_port;
	g.mount_port = g.srv.mount_port;
	g.nfs = nfs_raw_connect(g.nfs_port, NFS_PROG, 3);
	assert_non_null(g.nfs);
	/* no MNT, no LOOKUP: the old handles are used directly */
	after = getattr(&entry);
	assert_int_equal(after.status, NFS3_OK);
	assert_int_equal(after.fileid, before.fileid);
	after = getattr(&file);
	assert_int_equal(after.status, NFS3_OK);
	assert_int_equal(after.size, FILE_SIZE);
}

/* SIGTERM ends the server with status 0 (under ASan: no leak, no error report). */
static void test_clean_exit(void **state)
{
	int st;
	(void)state;
	if (g.attached)
		skip();
	rpc_destroy_context(g.nfs);
	g.nfs = NULL;
	st = test_server_stop(&g.srv);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("union-nfsd ended with wait status 0x%x on SIGTERM, want exit 0",
			 st);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_null, test_setup),
	    cmocka_unit_test_setup(test_unknown_program, test_setup),
	    cmocka_unit_test_setup(test_unknown_version, test_setup),
	    cmocka_unit_test_setup(test_unknown_procedure, test_setup),
	    cmocka_unit_test_setup(test_rpc_version, test_setup),
	    cmocka_unit_test_setup(test_auth_flavor, test_setup),
	    cmocka_unit_test_setup(test_garbage_args, test_setup),
	    cmocka_unit_test_setup(test_truncated_record, test_setup),
	    cmocka_unit_test_setup(test_fragmented_record, test_setup),
	    cmocka_unit_test_setup(test_flipped_handle, test_setup),
	    cmocka_unit_test_setup(test_still_serving, test_setup),
	    cmocka_unit_test_setup(test_read_eof, test_setup),
	    cmocka_unit_test_setup(test_read_rtmax, test_setup),
	    cmocka_unit_test_setup(test_readdir_tiny, test_setup),
	    cmocka_unit_test_setup(test_readdir_paging, test_setup),
	    cmocka_unit_test_setup(test_readdirplus_paging, test_setup),
	    cmocka_unit_test_setup(test_readdirplus_handles, test_setup),
	    cmocka_unit_test_setup(test_lookup_attrs, test_setup),
	    cmocka_unit_test_setup(test_readlink_access, test_setup),
	    cmocka_unit_test_setup(test_fsinfo, test_setup),
	    cmocka_unit_test_setup(test_read_only, test_setup),
	    cmocka_unit_test_setup(test_mount_on_nfs_port, test_setup),
	    cmocka_unit_test_setup(test_mount_procs, test_setup),
	    cmocka_unit_test_setup(test_udp, test_setup),
	    cmocka_unit_test_setup(test_outstanding_calls, test_setup),
	    cmocka_unit_test_setup(test_still_serving, test_setup),
	    cmocka_unit_test_setup(test_handle_after_restart, test_setup),
	    cmocka_unit_test(test_clean_exit),
	};
	signal(SIGPIPE, SIG_IGN);
	if (argc == 3 && !strcmp(argv[1], "--make-tree")) {
		make_tree(argv[2], argv[2]);
		return 0;
	}
	if (argc == 2 && !getenv("PROTO_ATTACH")) {
		g.bin = argv[1];
	} else if (argc != 1 || !getenv("PROTO_ATTACH")) {
		fprintf(stderr,
			"usage: test_protocol UNION_NFSD\n"
			"       PROTO_ATTACH=NFSPORT:MOUNTPORT:/EXPORT test_protocol\n"
			"       test_protocol --make-tree DIR\n");
		return 2;
	}
	if (getenv("PROTO_FILTER"))
		cmocka_set_test_filter(getenv("PROTO_FILTER"));
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
