/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_nfs3.c - the NFSv3 handlers, called through nfs3_program's table
 * on a server with one export: a read-only union of two lower layers in temp
 * dirs.
 *
 * lower0 (top):  a.txt "top-a", d/x, d/wonly (0200 uid 1000), gone (white-out 0/0),
 * .wh.ocigone, link -> a.txt, secret (0600 root), big (100 KiB), sparse (1.5 MiB hole),
 * priv/ (0700) with p, rnox/ (0744) with inner, vdir/ with v1 lower1:        a.txt
 * "bottom-a", gone, ocigone, b.txt, d/y, f000..f099, many/m0000..m4999
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <rpc/xdr.h>

#include "test_nfs3.h"
#include "un_private.h" /* un_sys_inject: a layer that cannot splice */

#define BIG_SIZE    (100 * 1024)
#define SPARSE_SIZE (1536 * 1024)
#define NFILES	    100
#define NMANY	    5000

/* ---- fixture: layers on disk and a server over them ---- */

static void put_file(const char *dir, const char *nm, const void *data, size_t len,
		     mode_t mode)
{
	char p[PATH_MAX];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, nm);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void make_layers(void)
{
	char p[256], nm[32];
	char *big = malloc(BIG_SIZE);
	int fd;

	assert_non_null(big);
	for (size_t i = 0; i < BIG_SIZE; i++)
		big[i] = (char)(i * 7 + 3);

	put_file(lower0, "a.txt", "top-a", 5, 0644);
	put_dir(lower0, "d", 0755);
	put_file(lower0, "d/x", "x", 1, 0644);
	put_file(lower0, "d/wonly", "w", 1, 0200);
	snprintf(p, sizeof(p), "%s/d/wonly", lower0);
	assert_int_equal(chown(p, 1000, 1000), 0);
	snprintf(p, sizeof(p), "%s/gone", lower0);
	assert_int_equal(mknod(p, S_IFCHR | 0600, makedev(0, 0)), 0);
	put_file(lower0, ".wh.ocigone", "", 0, 0644);
	snprintf(p, sizeof(p), "%s/link", lower0);
	assert_int_equal(symlink("a.txt", p), 0);
	put_file(lower0, "secret", "s3cret", 6, 0600);
	put_file(lower0, "big", big, BIG_SIZE, 0644);
	snprintf(p, sizeof(p), "%s/sparse", lower0);
	fd = open(p, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, SPARSE_SIZE), 0);
	close(fd);
	put_dir(lower0, "priv", 0700);
	put_file(lower0, "priv/p", "p", 1, 0644);
	put_dir(lower0, "rnox", 0744);
	put_file(lower0, "rnox/inner", "i", 1, 0644);
	put_dir(lower0, "vdir", 0755);
	put_file(lower0, "vdir/v1", "v", 1, 0644);

	put_file(lower1, "a.txt", "bottom-a", 8, 0644);
	put_file(lower1, "gone", "hidden", 6, 0644);
	put_file(lower1, "ocigone", "hidden", 6, 0644);
	put_file(lower1, "b.txt", "b", 1, 0644);
	put_dir(lower1, "d", 0755);
	put_file(lower1, "d/y", "y", 1, 0644);
	for (int i = 0; i < NFILES; i++) {
		snprintf(nm, sizeof(nm), "f%03d", i);
		put_file(lower1, nm, nm, 4, 0644);
	}
	put_dir(lower1, "many", 0755);
	for (int i = 0; i < NMANY; i++) {
		snprintf(nm, sizeof(nm), "many/m%04d", i);
		put_file(lower1, nm, "", 0, 0644);
	}
	free(big);
}

static int group_setup(void **state)
{
	(void)state;
	return nfs3_fx_open("test_srv_nfs3", false, make_layers);
}

/* ---- calling handlers ---- */

static void call_as(struct test_req *req, uint32_t proc, void *args, void *res)
{
	const struct rpc_proc *p = &nfs3_program.procs[proc];
	struct rpc_req *rq = test_req_tie(req);

	rq->proc = proc;
	memset(res, 0, p->res_size);
	/* As the dispatcher: the handle admitted, then the handler with the
	 * caller's identity on this thread. */
	if (test_req_admit(req, p, args, res))
		assert_true(srv_call_handler(&nfs3_program, p, rq, args, res));
}

static void call(uint32_t proc, void *args, void *res)
{
	struct test_req req = req_as(0, 0);

	call_as(&req, proc, args, res);
}

static nfs_fh3 lookup_fh(nfs_fh3 dir, const char *nm)
{
	LOOKUP3args a = {.what = {.dir = dir, .name = (char *)nm}};
	LOOKUP3res r;

	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	return r.LOOKUP3res_u.resok.object;
}

static fattr3 getattr(nfs_fh3 fh)
{
	GETATTR3args a = {.object = fh};
	GETATTR3res r;

	call(NFSPROC3_GETATTR, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	return r.GETATTR3res_u.resok.obj_attributes;
}

/* ---- the table ---- */

static void test_table(void **state)
{
	(void)state;
	assert_int_equal(nfs3_program.prog, 100003);
	assert_int_equal(nfs3_program.vers, 3);
	assert_int_equal(nfs3_program.nprocs, 22);
	for (size_t i = 0; i < nfs3_program.nprocs; i++) {
		const struct rpc_proc *p = &nfs3_program.procs[i];
		/* SETATTR too: a replayed truncation destroys later writes;
		 * and WRITE: a replayed WRITE overwrites a later one. */
		bool cached = i == NFSPROC3_CREATE || i == NFSPROC3_MKDIR ||
			      i == NFSPROC3_SYMLINK || i == NFSPROC3_MKNOD ||
			      i == NFSPROC3_REMOVE || i == NFSPROC3_RMDIR ||
			      i == NFSPROC3_RENAME || i == NFSPROC3_LINK ||
			      i == NFSPROC3_SETATTR || i == NFSPROC3_WRITE;

		assert_non_null(p->name);
		assert_non_null(p->handler);
		assert_non_null(p->decode_args);
		assert_non_null(p->encode_res);
		assert_int_equal(p->idempotent, !cached);
	}
	assert_string_equal(nfs3_program.procs[NFSPROC3_READDIRPLUS].name, "READDIRPLUS");
}

static void test_status_map(void **state)
{
	(void)state;
	assert_int_equal(nfs3_status_from_errno(0), NFS3_OK);
	assert_int_equal(nfs3_status_from_errno(-ENOENT), NFS3ERR_NOENT);
	assert_int_equal(nfs3_status_from_errno(-EBADMSG), NFS3ERR_BADHANDLE);
	assert_int_equal(nfs3_status_from_errno(-ESTALE), NFS3ERR_STALE);
	assert_int_equal(nfs3_status_from_errno(-EDQUOT), NFS3ERR_DQUOT);
	assert_int_equal(nfs3_status_from_errno(-ENOSPC), NFS3ERR_NOSPC);
	assert_int_equal(nfs3_status_from_errno(-EOPNOTSUPP), NFS3ERR_NOTSUPP);
	assert_int_equal(nfs3_status_from_errno(-EWOULDBLOCK), NFS3ERR_JUKEBOX);
	assert_int_equal(nfs3_status_from_errno(-ENOMEM), NFS3ERR_SERVERFAULT);
}

/* ---- GETATTR, LOOKUP, handles ---- */

static void test_null_getattr_root(void **state)
{
	fattr3 a;

	(void)state;
	nfs3_program.procs[NFSPROC3_NULL].handler(NULL, NULL, NULL);
	a = getattr(root_fh);
	assert_int_equal(a.type, NF3DIR);
	assert_int_equal(a.mode, 0755);
	assert_int_equal(a.fsid, un_export_id(srv.exports[0]->ux));
	assert_true(a.fileid != 0);
}

static void test_lookup(void **state)
{
	LOOKUP3args a = {.what = {.dir = root_fh, .name = "a.txt"}};
	LOOKUP3res r;
	fattr3 root = getattr(root_fh);

	(void)state;
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_true(r.LOOKUP3res_u.resok.obj_attributes.attributes_follow);
	assert_int_equal(
	    r.LOOKUP3res_u.resok.obj_attributes.post_op_attr_u.attributes.size, 5);
	assert_true(r.LOOKUP3res_u.resok.dir_attributes.attributes_follow);
	assert_int_equal(
	    r.LOOKUP3res_u.resok.dir_attributes.post_op_attr_u.attributes.fileid,
	    root.fileid);
	/* The handle names the same object: GETATTR agrees. */
	assert_int_equal(
	    getattr(r.LOOKUP3res_u.resok.object).fileid,
	    r.LOOKUP3res_u.resok.obj_attributes.post_op_attr_u.attributes.fileid);

	a.what.name = "nope";
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NOENT);
	assert_true(r.LOOKUP3res_u.resfail.dir_attributes.attributes_follow);
	assert_int_equal(
	    r.LOOKUP3res_u.resfail.dir_attributes.post_op_attr_u.attributes.fileid,
	    root.fileid);

	/* White-outs of both forms hide the lower name; OCI markers are not
	 * names of the union. */
	a.what.name = "gone";
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NOENT);
	a.what.name = "ocigone";
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NOENT);
	a.what.name = ".wh.ocigone";
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NOENT);

	/* Lookup in a file, bad names. */
	a.what.dir = lookup_fh(root_fh, "a.txt");
	a.what.name = "x";
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NOTDIR);
	a.what.dir = root_fh;
	a.what.name = "d/x";
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3ERR_ACCES);
	a.what.name = "";
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3ERR_ACCES);
	char longname[300];
	memset(longname, 'n', 256);
	longname[256] = '\0';
	a.what.name = longname;
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NAMETOOLONG);
	longname[255] = '\0'; /* legal length, absent */
	call(NFSPROC3_LOOKUP, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NOENT);
}

static void test_lookup_merged_dir_and_dots(void **state)
{
	nfs_fh3 d = lookup_fh(root_fh, "d");
	fattr3 root = getattr(root_fh);

	(void)state;
	lookup_fh(d, "x"); /* from lower0 */
	lookup_fh(d, "y"); /* from lower1: the directories merge */
	assert_int_equal(getattr(lookup_fh(d, "..")).fileid, root.fileid);
	assert_int_equal(getattr(lookup_fh(root_fh, "..")).fileid, root.fileid);
	assert_int_equal(getattr(lookup_fh(d, ".")).fileid, getattr(d).fileid);
}

static void test_bad_handles(void **state)
{
	uint8_t bytes[UN_FH_MAX];
	nfs_fh3 fh = {
	    .data = {.data_len = root_fh.data.data_len, .data_val = (char *)bytes}};
	GETATTR3args a = {.object = fh};
	GETATTR3res r;

	(void)state;
	/* Every flipped byte: bytes that are no handle of ours. */
	for (u_int i = 0; i < root_fh.data.data_len; i++) {
		memcpy(bytes, root_fh_bytes, root_fh.data.data_len);
		bytes[i] ^= 0x40;
		call(NFSPROC3_GETATTR, &a, &r);
		assert_int_equal(r.status, NFS3ERR_BADHANDLE);
	}
	/* Short, empty, long. */
	memcpy(bytes, root_fh_bytes, root_fh.data.data_len);
	a.object.data.data_len = root_fh.data.data_len - 1;
	call(NFSPROC3_GETATTR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_BADHANDLE);
	a.object.data.data_len = 0;
	call(NFSPROC3_GETATTR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_BADHANDLE);
	/* A genuine handle of a node that never existed: stale. */
	a.object.data.data_len =
	    (u_int)un_handle_encode(srv.exports[0]->ux, (un_id)1 << 60, bytes);
	call(NFSPROC3_GETATTR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_STALE);

	/* Handlers with result attributes leave them out on a bad handle. */
	LOOKUP3args la = {.what = {.dir = fh, .name = "a.txt"}};
	LOOKUP3res lr;
	bytes[0] ^= 0xff;
	la.what.dir.data.data_len = root_fh.data.data_len;
	call(NFSPROC3_LOOKUP, &la, &lr);
	assert_int_equal(lr.status, NFS3ERR_BADHANDLE);
	assert_false(lr.LOOKUP3res_u.resfail.dir_attributes.attributes_follow);
}

/* ---- ACCESS and the permission checks of the read path ---- */

static uint32_t access_as(uid_t uid, nfs_fh3 fh, uint32_t want)
{
	struct test_req req = req_as(uid, uid);
	ACCESS3args a = {.object = fh, .access = want};
	ACCESS3res r;

	call_as(&req, NFSPROC3_ACCESS, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_true(r.ACCESS3res_u.resok.obj_attributes.attributes_follow);
	return r.ACCESS3res_u.resok.access;
}

#define ACCESS_ALL                                                                       \
	(ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND |               \
	 ACCESS3_DELETE | ACCESS3_EXECUTE)

static void test_access(void **state)
{
	nfs_fh3 secret = lookup_fh(root_fh, "secret");
	nfs_fh3 d = lookup_fh(root_fh, "d");

	(void)state;
	/* Root: everything but executing a file without x bits, and nothing
	 * that writes on a read-only union. */
	assert_int_equal(access_as(0, secret, ACCESS_ALL), ACCESS3_READ);
	assert_int_equal(access_as(0, d, ACCESS_ALL), ACCESS3_READ | ACCESS3_LOOKUP);
	/* uid 1000 on a 0600 root-owned file: nothing. */
	assert_int_equal(access_as(1000, secret, ACCESS_ALL), 0);
	/* Only requested bits come back. */
	assert_int_equal(access_as(1000, d, ACCESS3_LOOKUP), ACCESS3_LOOKUP);
	assert_int_equal(access_as(1000, lookup_fh(root_fh, "a.txt"), ACCESS_ALL),
			 ACCESS3_READ);

	/* What ACCESS denies, the operation refuses. */
	struct test_req req = req_as(1000, 1000);
	READ3args ra = {.file = secret, .offset = 0, .count = 10};
	READ3res rr;
	call_as(&req, NFSPROC3_READ, &ra, &rr);
	assert_int_equal(rr.status, NFS3ERR_ACCES);
	assert_true(rr.READ3res_u.resfail.file_attributes.attributes_follow);

	/* ACCESS gives the owner of a file it may only write no READ (a new
	 * open obeys the mode), but READ lets the owner read it (NFS owner
	 * override); others may not. */
	nfs_fh3 wonly = lookup_fh(d, "wonly");
	assert_int_equal(access_as(1000, wonly, ACCESS_ALL), 0);
	assert_int_equal(access_as(1001, wonly, ACCESS_ALL), 0);
	ra.file = wonly;
	call_as(&req, NFSPROC3_READ, &ra, &rr);
	assert_int_equal(rr.status, NFS3_OK);
	assert_int_equal(rr.READ3res_u.resok.count, 1);

	nfs_fh3 priv = lookup_fh(root_fh, "priv");
	assert_int_equal(access_as(1000, priv, ACCESS_ALL), 0);
	LOOKUP3args la = {.what = {.dir = priv, .name = "p"}};
	LOOKUP3res lr;
	call_as(&req, NFSPROC3_LOOKUP, &la, &lr);
	assert_int_equal(lr.status, NFS3ERR_ACCES);
	READDIR3args da = {.dir = priv, .count = 4096};
	READDIR3res dr;
	call_as(&req, NFSPROC3_READDIR, &da, &dr);
	assert_int_equal(dr.status, NFS3ERR_ACCES);
	assert_true(dr.READDIR3res_u.resfail.dir_attributes.attributes_follow);
}

/* ---- READ, READLINK ---- */

static READ3res read_at(nfs_fh3 fh, uint64_t off, uint32_t count)
{
	READ3args a = {.file = fh, .offset = off, .count = count};
	READ3res r;

	call(NFSPROC3_READ, &a, &r);
	return r;
}

static void test_read(void **state)
{
	nfs_fh3 big = lookup_fh(root_fh, "big");
	READ3res r;

	(void)state;
	r = read_at(lookup_fh(root_fh, "a.txt"), 0, 100);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(r.READ3res_u.resok.count, 5);
	assert_memory_equal(r.READ3res_u.resok.data.data_val, "top-a", 5);
	assert_true(r.READ3res_u.resok.eof);
	assert_true(r.READ3res_u.resok.file_attributes.attributes_follow);

	r = read_at(big, 0, 1000);
	assert_int_equal(r.READ3res_u.resok.count, 1000);
	assert_false(r.READ3res_u.resok.eof);
	assert_int_equal((uint8_t)r.READ3res_u.resok.data.data_val[999],
			 (uint8_t)(999 * 7 + 3));
	/* Ending exactly at the end is eof. */
	r = read_at(big, BIG_SIZE - 100, 100);
	assert_int_equal(r.READ3res_u.resok.count, 100);
	assert_true(r.READ3res_u.resok.eof);
	r = read_at(big, 0, BIG_SIZE);
	assert_int_equal(r.READ3res_u.resok.count, BIG_SIZE);
	assert_true(r.READ3res_u.resok.eof);
	/* Past the end: nothing, and eof. */
	r = read_at(big, BIG_SIZE, 100);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(r.READ3res_u.resok.count, 0);
	assert_int_equal(r.READ3res_u.resok.data.data_len, 0);
	assert_true(r.READ3res_u.resok.eof);
	r = read_at(big, 1ull << 40, 100);
	assert_int_equal(r.READ3res_u.resok.count, 0);
	assert_true(r.READ3res_u.resok.eof);
	/* The count is capped at rtmax. */
	r = read_at(lookup_fh(root_fh, "sparse"), 0, 4 * RPC_MAX_IO);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(r.READ3res_u.resok.count, RPC_MAX_IO);
	assert_int_equal(r.READ3res_u.resok.data.data_len, RPC_MAX_IO);
	assert_false(r.READ3res_u.resok.eof);
	/* Over UDP, at the datagram-sized rtmax. */
	struct test_req udp = req_as(0, 0);
	READ3args ua = {.file = big, .offset = 0, .count = BIG_SIZE};
	udp.rpc.proto = IPPROTO_UDP;
	call_as(&udp, NFSPROC3_READ, &ua, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(r.READ3res_u.resok.count, RPC_MAX_UDP_IO);
	assert_false(r.READ3res_u.resok.eof);
	/* Not a regular file. */
	r = read_at(lookup_fh(root_fh, "d"), 0, 10);
	assert_int_equal(r.status, NFS3ERR_ISDIR);
	r = read_at(lookup_fh(root_fh, "link"), 0, 10);
	assert_int_equal(r.status, NFS3ERR_INVAL);
}

/* A READ of BIG_SIZE's bytes at OFF..OFF+COUNT over a transport that takes
 * its payload from a pipe; returns the payload the handler left. */
static struct rpc_payload *read_piped(nfs_fh3 fh, uint64_t off, uint32_t count)
{
	struct test_req req = req_as(0, 0);
	READ3args a = {.file = fh, .offset = off, .count = count};
	READ3res r;

	req.rpc.payload_pipe = true;
	call_as(&req, NFSPROC3_READ, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(r.READ3res_u.resok.count, count);
	assert_non_null(req.rpc.payload);
	return req.rpc.payload;
}

static void assert_big_bytes(const uint8_t *p, uint64_t off, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)((off + i) * 7 + 3))
			fail_msg("byte %zu of the READ at %llu differs", i,
				 (unsigned long long)off);
}

/* Over TCP the data is spliced into the payload's pipe (no copy in the
 * server); a layer that cannot splice (EINVAL) is read into memory. */
static void test_read_pipe(void **state)
{
	nfs_fh3 big = lookup_fh(root_fh, "big");
	static uint8_t got[BIG_SIZE];
	struct rpc_payload *p;

	(void)state;
	p = read_piped(big, 3, 1001);
	assert_int_equal(p->piped, 1001);
	assert_int_equal(p->len, 0);
	assert_int_equal(read(p->pipe[0], got, sizeof(got)), 1001);
	assert_big_bytes(got, 3, 1001);
	p->in_pipe = 0; /* drained by hand: the pipe may be reused */

	un_sys_inject(UN_SYS_READ, 1, EINVAL); /* the first splice */
	p = read_piped(big, 5, 999);
	un_sys_inject_reset();
	assert_int_equal(p->piped, 0);
	assert_int_equal(p->len, 999);
	assert_big_bytes(p->data, 5, 999);
}

static void test_readlink(void **state)
{
	READLINK3args a = {.symlink = lookup_fh(root_fh, "link")};
	READLINK3res r;

	(void)state;
	call(NFSPROC3_READLINK, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_string_equal(r.READLINK3res_u.resok.data, "a.txt");
	assert_true(r.READLINK3res_u.resok.symlink_attributes.attributes_follow);
	assert_int_equal(
	    r.READLINK3res_u.resok.symlink_attributes.post_op_attr_u.attributes.type,
	    NF3LNK);
	a.symlink = lookup_fh(root_fh, "a.txt");
	call(NFSPROC3_READLINK, &a, &r);
	assert_int_equal(r.status, NFS3ERR_INVAL);
}

/* ---- READDIR, READDIRPLUS ---- */

static const char *expected_root[] = {
    ".",    "..",   "a.txt", "b.txt",  "big",	 "d",	 "link",
    "many", "priv", "rnox",  "secret", "sparse", "vdir",
};
#define NEXPECTED (sizeof(expected_root) / sizeof(expected_root[0]) + NFILES)

struct seen {
	char *names[NEXPECTED + 16];
	size_t n;
};

static void seen_add(struct seen *s, const char *nm)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->names[i], nm))
			fail_msg("%s listed twice", nm);
	assert_true(s->n < sizeof(s->names) / sizeof(s->names[0]));
	s->names[s->n++] = strdup(nm);
}

static bool seen_has(const struct seen *s, const char *nm)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->names[i], nm))
			return true;
	return false;
}

/* Every visible name exactly once, nothing else. */
static void seen_check_and_free(struct seen *s)
{
	char nm[16];

	for (size_t i = 0; i < sizeof(expected_root) / sizeof(expected_root[0]); i++)
		if (!seen_has(s, expected_root[i]))
			fail_msg("%s missing", expected_root[i]);
	for (int i = 0; i < NFILES; i++) {
		snprintf(nm, sizeof(nm), "f%03d", i);
		if (!seen_has(s, nm))
			fail_msg("%s missing", nm);
	}
	assert_int_equal(s->n, NEXPECTED);
	for (size_t i = 0; i < s->n; i++)
		free(s->names[i]);
	s->n = 0;
}

static size_t entry3_size(const char *nm)
{
	return 4 + 8 + 4 + ((strlen(nm) + 3) & ~(size_t)3) + 8;
}

static void test_readdir_toosmall(void **state)
{
	READDIR3args a = {.dir = root_fh, .count = 50};
	READDIR3res r;

	(void)state;
	call(NFSPROC3_READDIR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_TOOSMALL);
	/* The fixed part fits, the first entry does not. */
	a.count = 4 + 4 + 84 + 8 + 4 + 4 + 20;
	call(NFSPROC3_READDIR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_TOOSMALL);
	assert_true(r.READDIR3res_u.resfail.dir_attributes.attributes_follow);
	a.count += 8; /* now "." fits */
	call(NFSPROC3_READDIR, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_non_null(r.READDIR3res_u.resok.reply.entries);
	assert_string_equal(r.READDIR3res_u.resok.reply.entries->name, ".");
	assert_null(r.READDIR3res_u.resok.reply.entries->nextentry);
	assert_true(xdr_sizeof((xdrproc_t)xdr_READDIR3res, &r) <= a.count);
}

/* Lists the root in pages of COUNT bytes; returns the number of pages.  Each
 * page fits COUNT, and is full: the first entry of the next page would not
 * have fitted in it. */
/* The encoder the table names for PROC writes the bytes rpcgen's GENERIC
 * writes for RES, and xdr_sizeof agrees (READDIR and READDIRPLUS have
 * encoders of their own). */
static void same_encoding(uint32_t proc, xdrproc_t generic, void *res)
{
	xdrproc_t enc = nfs3_program.procs[proc].encode_res;
	size_t n = xdr_sizeof(generic, res);
	char *want = malloc(n), *got = malloc(n);
	XDR x;

	assert_non_null(want);
	assert_non_null(got);
	xdrmem_create(&x, want, (u_int)n, XDR_ENCODE);
	assert_true(generic(&x, res));
	xdr_destroy(&x);
	xdrmem_create(&x, got, (u_int)n, XDR_ENCODE);
	assert_true(enc(&x, res));
	assert_int_equal(xdr_getpos(&x), n);
	xdr_destroy(&x);
	assert_int_equal(xdr_sizeof(enc, res), n);
	assert_memory_equal(got, want, n);
	free(want);
	free(got);
}

static int readdir_all(uint32_t count)
{
	READDIR3args a = {.dir = root_fh, .count = count};
	fattr3 root = getattr(root_fh);
	struct seen s = {.n = 0};
	uint64_t last_cookie = 0;
	size_t prev_size = 0;
	bool eof = false;
	int pages;

	for (pages = 0; !eof; pages++) {
		READDIR3res r;
		entry3 *first;

		assert_true(pages < 1000);
		call(NFSPROC3_READDIR, &a, &r);
		assert_int_equal(r.status, NFS3_OK);
		same_encoding(NFSPROC3_READDIR, (xdrproc_t)xdr_READDIR3res, &r);
		first = r.READDIR3res_u.resok.reply.entries;
		if (pages > 0 && first)
			assert_true(prev_size + entry3_size(first->name) > count);
		prev_size = xdr_sizeof((xdrproc_t)xdr_READDIR3res, &r);
		assert_true(prev_size <= count);
		eof = r.READDIR3res_u.resok.reply.eof;
		if (!eof)
			assert_non_null(first);
		for (entry3 *e = first; e; e = e->nextentry) {
			seen_add(&s, e->name);
			assert_true(e->cookie >= last_cookie);
			last_cookie = e->cookie;
			if (!strcmp(e->name, ".") || !strcmp(e->name, ".."))
				assert_int_equal(e->fileid, root.fileid);
			else
				assert_int_equal(
				    e->fileid,
				    getattr(lookup_fh(root_fh, e->name)).fileid);
			a.cookie = e->cookie;
		}
		memcpy(a.cookieverf, r.READDIR3res_u.resok.cookieverf,
		       NFS3_COOKIEVERFSIZE);
	}
	seen_check_and_free(&s);
	return pages;
}

static void test_readdir_paging(void **state)
{
	(void)state;
	/* One entry a page: every name its own page. */
	assert_int_equal(readdir_all(4 + 4 + 84 + 8 + 4 + 4 + 32), NEXPECTED);
	assert_true(readdir_all(400) > 5);
	assert_true(readdir_all(1024) > 2);
	assert_int_equal(readdir_all(64 * 1024), 1);
}

/* The XDR size of entryplus3 E. */
static size_t entryplus3_size(const entryplus3 *e)
{
	size_t size = entry3_size(e->name) + 4 + 4;

	if (e->name_attributes.attributes_follow)
		size += 84;
	if (e->name_handle.handle_follows)
		size +=
		    4 + ((e->name_handle.post_op_fh3_u.handle.data.data_len + 3) & ~3u);
	return size;
}

/* As readdir_all, for READDIRPLUS with DIRCOUNT and MAXCOUNT. */
static int readdirplus_all(uint32_t dircount, uint32_t maxcount)
{
	READDIRPLUS3args a = {.dir = root_fh, .dircount = dircount, .maxcount = maxcount};
	fattr3 root = getattr(root_fh);
	struct seen s = {.n = 0};
	size_t prev_size = 0, prev_dirbytes = 0;
	bool eof = false;
	int pages;

	for (pages = 0; !eof; pages++) {
		READDIRPLUS3res r;
		entryplus3 *first;
		size_t dirbytes = 0;

		assert_true(pages < 1000);
		call(NFSPROC3_READDIRPLUS, &a, &r);
		assert_int_equal(r.status, NFS3_OK);
		same_encoding(NFSPROC3_READDIRPLUS, (xdrproc_t)xdr_READDIRPLUS3res, &r);
		first = r.READDIRPLUS3res_u.resok.reply.entries;
		if (pages > 0 && first)
			assert_true(prev_size + entryplus3_size(first) > maxcount ||
				    prev_dirbytes + entry3_size(first->name) > dircount);
		prev_size = xdr_sizeof((xdrproc_t)xdr_READDIRPLUS3res, &r);
		assert_true(prev_size <= maxcount);
		eof = r.READDIRPLUS3res_u.resok.reply.eof;
		if (!eof)
			assert_non_null(first);
		for (entryplus3 *e = first; e; e = e->nextentry) {
			fattr3 *fa = &e->name_attributes.post_op_attr_u.attributes;

			seen_add(&s, e->name);
			dirbytes += entry3_size(e->name);
			assert_true(e->name_attributes.attributes_follow);
			assert_true(e->name_handle.handle_follows);
			assert_int_equal(fa->fileid, e->fileid);
			assert_int_equal(
			    getattr(e->name_handle.post_op_fh3_u.handle).fileid,
			    e->fileid);
			if (!strcmp(e->name, ".") || !strcmp(e->name, ".."))
				assert_int_equal(e->fileid, root.fileid);
			if (!strcmp(e->name, "big"))
				assert_int_equal(fa->size, BIG_SIZE);
			a.cookie = e->cookie;
		}
		assert_true(dirbytes <= dircount);
		prev_dirbytes = dirbytes;
		memcpy(a.cookieverf, r.READDIRPLUS3res_u.resok.cookieverf,
		       NFS3_COOKIEVERFSIZE);
	}
	seen_check_and_free(&s);
	return pages;
}

static void test_readdirplus_paging(void **state)
{
	READDIRPLUS3args a = {.dir = root_fh, .dircount = 10, .maxcount = 8192};
	READDIRPLUS3res r;

	(void)state;
	call(NFSPROC3_READDIRPLUS, &a, &r);
	assert_int_equal(r.status, NFS3ERR_TOOSMALL);
	a.dircount = 8192;
	a.maxcount = 200; /* the fixed part fits, no entry with its attributes */
	call(NFSPROC3_READDIRPLUS, &a, &r);
	assert_int_equal(r.status, NFS3ERR_TOOSMALL);

	assert_true(readdirplus_all(300, 64 * 1024) > 5);  /* dircount binds */
	assert_true(readdirplus_all(64 * 1024, 900) > 10); /* maxcount binds */
	assert_true(readdirplus_all(512, 2000) > 5);
	assert_int_equal(readdirplus_all(64 * 1024, 1024 * 1024), 1);
}

/* A caller who may read a directory but not search it gets the names without
 * handles or attributes, as the kernel would let it. */
static void test_readdirplus_no_search(void **state)
{
	struct test_req req = req_as(1000, 1000);
	READDIRPLUS3args a = {
	    .dir = lookup_fh(root_fh, "rnox"), .dircount = 4096, .maxcount = 8192};
	READDIRPLUS3res r;
	int n = 0;

	(void)state;
	call_as(&req, NFSPROC3_READDIRPLUS, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_true(r.READDIRPLUS3res_u.resok.reply.eof);
	for (entryplus3 *e = r.READDIRPLUS3res_u.resok.reply.entries; e;
	     e = e->nextentry) {
		assert_false(e->name_attributes.attributes_follow);
		assert_false(e->name_handle.handle_follows);
		n++;
	}
	assert_int_equal(n, 3); /* ".", "..", "inner" */
}

static void test_readdir_verifier(void **state)
{
	nfs_fh3 vdir = lookup_fh(root_fh, "vdir");
	READDIR3args a = {.dir = vdir, .count = 4096};
	READDIR3res r;
	char old_verf[NFS3_COOKIEVERFSIZE];

	(void)state;
	call(NFSPROC3_READDIR, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_true(r.READDIR3res_u.resok.reply.eof);
	memcpy(old_verf, r.READDIR3res_u.resok.cookieverf, NFS3_COOKIEVERFSIZE);
	assert_memory_not_equal(old_verf, "\0\0\0\0\0\0\0\0", 8);

	/* Cookie 0 takes any verifier; cookie 2 ("..") with verifier 0 too. */
	memset(a.cookieverf, 0x5a, NFS3_COOKIEVERFSIZE);
	call(NFSPROC3_READDIR, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	a.cookie = 2;
	memset(a.cookieverf, 0, NFS3_COOKIEVERFSIZE);
	call(NFSPROC3_READDIR, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_string_equal(r.READDIR3res_u.resok.reply.entries->name, "v1");

	/* A verifier never issued: BAD_COOKIE. */
	memset(a.cookieverf, 0x5a, NFS3_COOKIEVERFSIZE);
	call(NFSPROC3_READDIR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_BAD_COOKIE);
	assert_true(r.READDIR3res_u.resfail.dir_attributes.attributes_follow);
	READDIRPLUS3args pa = {
	    .dir = vdir, .cookie = 2, .dircount = 4096, .maxcount = 8192};
	READDIRPLUS3res pr;
	memset(pa.cookieverf, 0x5a, NFS3_COOKIEVERFSIZE);
	call(NFSPROC3_READDIRPLUS, &pa, &pr);
	assert_int_equal(pr.status, NFS3ERR_BAD_COOKIE);

	/* The directory changes: the old verifier still resumes, answered
	 * from the new listing. */
	put_file(lower0, "vdir/v2", "v", 1, 0644);
	memcpy(a.cookieverf, old_verf, NFS3_COOKIEVERFSIZE);
	a.cookie = 2;
	call(NFSPROC3_READDIR, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	int n = 0;
	for (entry3 *e = r.READDIR3res_u.resok.reply.entries; e; e = e->nextentry)
		n++;
	assert_int_equal(n, 2); /* v1 and v2 */
	assert_true(r.READDIR3res_u.resok.reply.eof);

	/* READDIR of a file. */
	a.dir = lookup_fh(root_fh, "a.txt");
	a.cookie = 0;
	call(NFSPROC3_READDIR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NOTDIR);
}

/* Encodes RES with PROC into a buffer as the dispatcher would; returns the
 * encoded size.  rpcgen's entry lists encode recursively, so this also shows
 * that a page of the largest size the server builds encodes on one stack. */
static size_t encode(xdrproc_t proc, void *res)
{
	static char buf[2 * RPC_MAX_IO];
	XDR x;
	size_t len;

	xdrmem_create(&x, buf, sizeof(buf), XDR_ENCODE);
	assert_true(proc(&x, res));
	len = xdr_getpos(&x);
	xdr_destroy(&x);
	return len;
}

/* A directory larger than one page of the largest count: pages hold at most
 * NFS3_DIR_MAX_ENTRIES (4096) entries, and the whole listing comes through. */
static void test_readdir_large(void **state)
{
	READDIR3args a = {.dir = lookup_fh(root_fh, "many"), .count = 4 * RPC_MAX_IO};
	READDIRPLUS3args pa = {
	    .dir = a.dir, .dircount = 4 * RPC_MAX_IO, .maxcount = 4 * RPC_MAX_IO};
	READDIR3res r;
	READDIRPLUS3res pr;
	size_t n = 0, pages = 0;

	(void)state;
	do {
		call(NFSPROC3_READDIR, &a, &r);
		assert_int_equal(r.status, NFS3_OK);
		assert_true(encode((xdrproc_t)xdr_READDIR3res, &r) <= RPC_MAX_IO);
		for (entry3 *e = r.READDIR3res_u.resok.reply.entries; e;
		     e = e->nextentry) {
			a.cookie = e->cookie;
			n++;
		}
		memcpy(a.cookieverf, r.READDIR3res_u.resok.cookieverf,
		       NFS3_COOKIEVERFSIZE);
		assert_true(++pages < 10);
	} while (!r.READDIR3res_u.resok.reply.eof);
	assert_int_equal(n, NMANY + 2);
	assert_int_equal(pages, 2);

	n = pages = 0;
	do {
		call(NFSPROC3_READDIRPLUS, &pa, &pr);
		assert_int_equal(pr.status, NFS3_OK);
		assert_true(encode((xdrproc_t)xdr_READDIRPLUS3res, &pr) <= RPC_MAX_IO);
		for (entryplus3 *e = pr.READDIRPLUS3res_u.resok.reply.entries; e;
		     e = e->nextentry) {
			assert_true(e->name_handle.handle_follows);
			pa.cookie = e->cookie;
			n++;
		}
		memcpy(pa.cookieverf, pr.READDIRPLUS3res_u.resok.cookieverf,
		       NFS3_COOKIEVERFSIZE);
		assert_true(++pages < 10);
	} while (!pr.READDIRPLUS3res_u.resok.reply.eof);
	assert_int_equal(n, NMANY + 2);
	assert_int_equal(pages, 2);
}

/* ---- FSSTAT, FSINFO, PATHCONF ---- */

static void test_fs_info(void **state)
{
	FSSTAT3args sa = {.fsroot = root_fh};
	FSSTAT3res sr;
	FSINFO3args ia = {.fsroot = root_fh};
	FSINFO3res ir;
	PATHCONF3args pa = {.object = root_fh};
	PATHCONF3res pr;

	(void)state;
	call(NFSPROC3_FSSTAT, &sa, &sr);
	assert_int_equal(sr.status, NFS3_OK);
	assert_true(sr.FSSTAT3res_u.resok.tbytes > 0);
	assert_true(sr.FSSTAT3res_u.resok.obj_attributes.attributes_follow);
	assert_int_equal(sr.FSSTAT3res_u.resok.invarsec, 0);

	call(NFSPROC3_FSINFO, &ia, &ir);
	assert_int_equal(ir.status, NFS3_OK);
	assert_int_equal(ir.FSINFO3res_u.resok.rtmax, RPC_MAX_IO);
	assert_int_equal(ir.FSINFO3res_u.resok.wtmax, RPC_MAX_IO);
	assert_true(ir.FSINFO3res_u.resok.dtpref >= 64 * 1024);
	assert_int_equal(ir.FSINFO3res_u.resok.time_delta.nseconds, 1);
	assert_int_equal(ir.FSINFO3res_u.resok.properties,
			 FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME);

	/* Over UDP every reply must fit one datagram. */
	struct test_req udp = req_as(0, 0);
	udp.rpc.proto = IPPROTO_UDP;
	call_as(&udp, NFSPROC3_FSINFO, &ia, &ir);
	assert_int_equal(ir.status, NFS3_OK);
	assert_int_equal(ir.FSINFO3res_u.resok.rtmax, RPC_MAX_UDP_IO);
	assert_int_equal(ir.FSINFO3res_u.resok.wtmax, RPC_MAX_UDP_IO);
	assert_true(ir.FSINFO3res_u.resok.dtpref <= RPC_MAX_UDP_IO);

	call(NFSPROC3_PATHCONF, &pa, &pr);
	assert_int_equal(pr.status, NFS3_OK);
	assert_int_equal(pr.PATHCONF3res_u.resok.name_max, 255);
	assert_true(pr.PATHCONF3res_u.resok.no_trunc);
	assert_true(pr.PATHCONF3res_u.resok.case_preserving);
	assert_false(pr.PATHCONF3res_u.resok.case_insensitive);
}

/* ---- the modifying procedures on a read-only union ---- */

static void assert_wcc(const wcc_data *w)
{
	assert_true(w->before.attributes_follow);
	assert_true(w->after.attributes_follow);
	assert_int_equal(w->before.pre_op_attr_u.attributes.size,
			 w->after.post_op_attr_u.attributes.size);
}

static void test_modifying_rofs(void **state)
{
	nfs_fh3 file = lookup_fh(root_fh, "a.txt");
	diropargs3 where = {.dir = root_fh, .name = "new"};

	(void)state;
	SETATTR3args sa = {.object = file};
	SETATTR3res sr;
	call(NFSPROC3_SETATTR, &sa, &sr);
	assert_int_equal(sr.status, NFS3ERR_ROFS);
	assert_wcc(&sr.SETATTR3res_u.resfail.obj_wcc);

	WRITE3args wa = {
	    .file = file, .count = 1, .data = {.data_len = 1, .data_val = "x"}};
	WRITE3res wr;
	call(NFSPROC3_WRITE, &wa, &wr);
	assert_int_equal(wr.status, NFS3ERR_ROFS);
	assert_wcc(&wr.WRITE3res_u.resfail.file_wcc);

	CREATE3args ca = {.where = where};
	CREATE3res cr;
	call(NFSPROC3_CREATE, &ca, &cr);
	assert_int_equal(cr.status, NFS3ERR_ROFS);
	assert_wcc(&cr.CREATE3res_u.resfail.dir_wcc);

	MKDIR3args ma = {.where = where};
	MKDIR3res mr;
	call(NFSPROC3_MKDIR, &ma, &mr);
	assert_int_equal(mr.status, NFS3ERR_ROFS);
	assert_wcc(&mr.MKDIR3res_u.resfail.dir_wcc);

	SYMLINK3args ya = {.where = where, .symlink = {.symlink_data = "t"}};
	SYMLINK3res yr;
	call(NFSPROC3_SYMLINK, &ya, &yr);
	assert_int_equal(yr.status, NFS3ERR_ROFS);
	assert_wcc(&yr.SYMLINK3res_u.resfail.dir_wcc);

	MKNOD3args na = {.where = where, .what = {.type = NF3FIFO}};
	MKNOD3res nr;
	call(NFSPROC3_MKNOD, &na, &nr);
	assert_int_equal(nr.status, NFS3ERR_ROFS);
	assert_wcc(&nr.MKNOD3res_u.resfail.dir_wcc);

	REMOVE3args ra = {.object = {.dir = root_fh, .name = "a.txt"}};
	REMOVE3res rr;
	call(NFSPROC3_REMOVE, &ra, &rr);
	assert_int_equal(rr.status, NFS3ERR_ROFS);
	assert_wcc(&rr.REMOVE3res_u.resfail.dir_wcc);

	RMDIR3args da = {.object = {.dir = root_fh, .name = "d"}};
	RMDIR3res dr;
	call(NFSPROC3_RMDIR, &da, &dr);
	assert_int_equal(dr.status, NFS3ERR_ROFS);
	assert_wcc(&dr.RMDIR3res_u.resfail.dir_wcc);

	RENAME3args na2 = {.from = {.dir = root_fh, .name = "a.txt"},
			   .to = {.dir = lookup_fh(root_fh, "d"), .name = "z"}};
	RENAME3res nr2;
	call(NFSPROC3_RENAME, &na2, &nr2);
	assert_int_equal(nr2.status, NFS3ERR_ROFS);
	assert_wcc(&nr2.RENAME3res_u.resfail.fromdir_wcc);
	assert_wcc(&nr2.RENAME3res_u.resfail.todir_wcc);

	LINK3args la = {.file = file, .link = where};
	LINK3res lr;
	call(NFSPROC3_LINK, &la, &lr);
	assert_int_equal(lr.status, NFS3ERR_ROFS);
	assert_true(lr.LINK3res_u.resfail.file_attributes.attributes_follow);
	assert_wcc(&lr.LINK3res_u.resfail.linkdir_wcc);

	COMMIT3args ma2 = {.file = file};
	COMMIT3res mr2;
	call(NFSPROC3_COMMIT, &ma2, &mr2);
	assert_int_equal(mr2.status, NFS3ERR_ROFS);
	assert_wcc(&mr2.COMMIT3res_u.resfail.file_wcc);

	/* A bad handle is BADHANDLE before it is ROFS. */
	uint8_t bytes[UN_FH_MAX];
	memcpy(bytes, root_fh_bytes, root_fh.data.data_len);
	bytes[root_fh.data.data_len - 1] ^= 1;
	ra.object.dir.data.data_val = (char *)bytes;
	call(NFSPROC3_REMOVE, &ra, &rr);
	assert_int_equal(rr.status, NFS3ERR_BADHANDLE);
	assert_false(rr.REMOVE3res_u.resfail.dir_wcc.before.attributes_follow);
	assert_false(rr.REMOVE3res_u.resfail.dir_wcc.after.attributes_follow);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table),
	    cmocka_unit_test(test_status_map),
	    NFS3_TEST(test_null_getattr_root),
	    NFS3_TEST(test_lookup),
	    NFS3_TEST(test_lookup_merged_dir_and_dots),
	    NFS3_TEST(test_bad_handles),
	    NFS3_TEST(test_access),
	    NFS3_TEST(test_read),
	    NFS3_TEST(test_read_pipe),
	    NFS3_TEST(test_readlink),
	    NFS3_TEST(test_readdir_toosmall),
	    NFS3_TEST(test_readdir_paging),
	    NFS3_TEST(test_readdirplus_paging),
	    NFS3_TEST(test_readdirplus_no_search),
	    NFS3_TEST(test_readdir_large),
	    NFS3_TEST(test_fs_info),
	    NFS3_TEST(test_modifying_rofs),
	    /* Last: it changes a layer. */
	    NFS3_TEST(test_readdir_verifier),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
