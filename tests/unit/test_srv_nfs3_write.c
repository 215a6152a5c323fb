/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_nfs3_write.c - the modifying NFSv3 procedures, called through
 * nfs3_program's table on a server with one writable export: an upper layer
 * and its work dir over two lower layers, in temp dirs.
 *
 * Every test works on names of its own, so the order of the tests does not
 * matter.  The wcc_data of every reply is checked against GETATTR before and
 * after the call.
 *
 * lower0 (top): f.txt, w.txt, fid.txt, own.txt (1000, 0644), ro.txt (1000,
 *   0444), other.txt (1001), suid.bin suid2.bin (1000, 06755), sgid.txt (1000),
 *   m0277.txt m0177.txt m0077.txt (1000, modes as named),
 *   sym -> f.txt, d/ with x,
 *   merged/ with m0, pub/ (0777), sticky/ (01777) with theirs (1001) and
 *   mine (1000), ldir/ with a, rn/ with r1 r2 r3 r4, lk.txt, rm.txt, gone.txt
 * lower1: b.txt, merged/ with m1, emptylow/
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
#include <unistd.h>

#include <cmocka.h>

#include "test_nfs3.h"
#include "un_private.h" /* un_sys_calls: the syncs a call issued */

/* ---- fixture ---- */

static void put_file(const char *dir, const char *nm, const char *data, mode_t mode,
		     uid_t uid, gid_t gid)
{
	char p[PATH_MAX];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, nm);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	assert_int_equal(fchown(fd, uid, gid), 0);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void make_layers(void)
{
	char p[PATH_MAX];

	put_file(lower0, "f.txt", "lower-f", 0644, 0, 0);
	put_file(lower0, "w.txt", "0123456789", 0644, 0, 0);
	put_file(lower0, "fid.txt", "fid", 0644, 0, 0);
	put_file(lower0, "own.txt", "own", 0644, 1000, 1000);
	put_file(lower0, "ro.txt", "ro", 0444, 1000, 1000);
	put_file(lower0, "other.txt", "other", 0644, 1001, 1001);
	put_file(lower0, "suid.bin", "#!", 06755, 1000, 1000);
	put_file(lower0, "suid2.bin", "#!", 06755, 1000, 1000);
	put_file(lower0, "sgid.txt", "g", 0644, 1000, 1000);
	put_file(lower0, "m0277.txt", "m0277", 0277, 1000, 1000);
	put_file(lower0, "m0177.txt", "m0177", 0177, 1000, 1000);
	put_file(lower0, "m0077.txt", "m0077", 0077, 1000, 1000);
	put_file(lower0, "lk.txt", "link me", 0644, 0, 0);
	put_file(lower0, "rm.txt", "rm", 0644, 0, 0);
	put_file(lower0, "gone.txt", "gone", 0644, 0, 0);
	snprintf(p, sizeof(p), "%s/sym", lower0);
	assert_int_equal(symlink("f.txt", p), 0);
	put_dir(lower0, "d", 0755);
	put_file(lower0, "d/x", "x", 0644, 0, 0);
	put_dir(lower0, "merged", 0755);
	put_file(lower0, "merged/m0", "m0", 0644, 0, 0);
	put_dir(lower0, "pub", 0777);
	put_dir(lower0, "sticky", 01777);
	put_file(lower0, "sticky/theirs", "t", 0666, 1001, 1001);
	put_file(lower0, "sticky/mine", "m", 0666, 1000, 1000);
	put_dir(lower0, "ldir", 0755);
	put_file(lower0, "ldir/a", "a", 0644, 0, 0);
	put_dir(lower0, "rn", 0777);
	put_file(lower0, "rn/r1", "r1", 0644, 0, 0);
	put_file(lower0, "rn/r2", "r2", 0644, 0, 0);
	put_file(lower0, "rn/r3", "r3", 0644, 0, 0);
	put_file(lower0, "rn/r4", "r4", 0644, 0, 0);

	put_file(lower1, "b.txt", "lower1-b", 0644, 0, 0);
	put_dir(lower1, "merged", 0755);
	put_file(lower1, "merged/m1", "m1", 0644, 0, 0);
	put_dir(lower1, "emptylow", 0755);
}

static int group_setup(void **state)
{
	(void)state;
	return nfs3_fx_open("test_srv_nfs3_write", true, make_layers);
}

/* ---- calling handlers ---- */

static void call_as(uid_t uid, uint32_t proc, void *args, void *res)
{
	const struct rpc_proc *p = &nfs3_program.procs[proc];
	struct test_req req = req_as(uid, uid);
	struct rpc_req *rq = test_req_tie(&req);

	rq->proc = proc;
	memset(res, 0, p->res_size);
	/* As the dispatcher: the handle admitted, then the handler with the
	 * caller's identity on this thread. */
	if (test_req_admit(&req, p, args, res))
		assert_true(srv_call_handler(&nfs3_program, p, rq, args, res));
}

static void call(uint32_t proc, void *args, void *res)
{
	call_as(0, proc, args, res);
}

static nfsstat3 lookup_st(nfs_fh3 dir, const char *nm, nfs_fh3 *out)
{
	LOOKUP3args a = {.what = {.dir = dir, .name = (char *)nm}};
	LOOKUP3res r;

	call(NFSPROC3_LOOKUP, &a, &r);
	if (out && r.status == NFS3_OK)
		*out = r.LOOKUP3res_u.resok.object;
	return r.status;
}

static nfs_fh3 lookup_fh(nfs_fh3 dir, const char *nm)
{
	nfs_fh3 fh = {{0, NULL}};

	assert_int_equal(lookup_st(dir, nm, &fh), NFS3_OK);
	return fh;
}

static fattr3 getattr(nfs_fh3 fh)
{
	GETATTR3args a = {.object = fh};
	GETATTR3res r;

	call(NFSPROC3_GETATTR, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	return r.GETATTR3res_u.resok.obj_attributes;
}

static void assert_time_eq(nfstime3 a, nfstime3 b)
{
	assert_int_equal(a.seconds, b.seconds);
	assert_int_equal(a.nseconds, b.nseconds);
}

static void assert_fattr_eq(const fattr3 *a, const fattr3 *b)
{
	assert_int_equal(a->type, b->type);
	assert_int_equal(a->mode, b->mode);
	assert_int_equal(a->nlink, b->nlink);
	assert_int_equal(a->uid, b->uid);
	assert_int_equal(a->gid, b->gid);
	assert_int_equal(a->size, b->size);
	assert_int_equal(a->fsid, b->fsid);
	assert_int_equal(a->fileid, b->fileid);
	assert_time_eq(a->mtime, b->mtime);
	assert_time_eq(a->ctime, b->ctime);
}

/* W's pre-op part is BEFORE's size and times, its post-op part AFTER. */
static void assert_wcc(const wcc_data *w, const fattr3 *before, const fattr3 *after)
{
	const wcc_attr *pre = &w->before.pre_op_attr_u.attributes;

	assert_true(w->before.attributes_follow);
	assert_int_equal(pre->size, before->size);
	assert_time_eq(pre->mtime, before->mtime);
	assert_time_eq(pre->ctime, before->ctime);
	assert_true(w->after.attributes_follow);
	assert_fattr_eq(&w->after.post_op_attr_u.attributes, after);
}

static READ3res read_fh(nfs_fh3 fh)
{
	READ3args a = {.file = fh, .offset = 0, .count = 4096};
	READ3res r;

	call(NFSPROC3_READ, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	return r;
}

static void assert_content_n(nfs_fh3 fh, const char *want, size_t len)
{
	READ3res r = read_fh(fh);

	assert_int_equal(r.READ3res_u.resok.count, len);
	assert_memory_equal(r.READ3res_u.resok.data.data_val, want, len);
}

static void assert_content(nfs_fh3 fh, const char *want)
{
	assert_content_n(fh, want, strlen(want));
}

static void upper_path(const char *nm, char *p, size_t len)
{
	snprintf(p, len, "%s/%s", upper, nm);
}

/* ---- ACCESS on a writable union ---- */

#define ACCESS_ALL                                                                       \
	(ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND |               \
	 ACCESS3_DELETE | ACCESS3_EXECUTE)

static uint32_t access_as(uid_t uid, nfs_fh3 fh, uint32_t want)
{
	ACCESS3args a = {.object = fh, .access = want};
	ACCESS3res r;

	call_as(uid, NFSPROC3_ACCESS, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	return r.ACCESS3res_u.resok.access;
}

static void test_access_writable(void **state)
{
	nfs_fh3 d = lookup_fh(root_fh, "d"), pub = lookup_fh(root_fh, "pub");

	(void)state;
	assert_int_equal(access_as(0, d, ACCESS_ALL),
			 ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND |
			     ACCESS3_DELETE);
	assert_int_equal(access_as(1000, d, ACCESS_ALL), ACCESS3_READ | ACCESS3_LOOKUP);
	assert_int_equal(access_as(1000, pub, ACCESS_ALL),
			 ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND |
			     ACCESS3_DELETE);
	assert_int_equal(access_as(1000, lookup_fh(root_fh, "own.txt"), ACCESS_ALL),
			 ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND);
	assert_int_equal(access_as(1000, lookup_fh(root_fh, "fid.txt"), ACCESS_ALL),
			 ACCESS3_READ);
	/* The owner's 0444 file: no MODIFY for a new open, though WRITE lets
	 * the owner flush (test_write_permissions). */
	assert_int_equal(access_as(1000, lookup_fh(root_fh, "ro.txt"), ACCESS_ALL),
			 ACCESS3_READ);
}

/* ---- SETATTR ---- */

static SETATTR3res setattr_as(uid_t uid, nfs_fh3 fh, const sattr3 *sa,
			      const nfstime3 *guard)
{
	SETATTR3args a = {.object = fh, .new_attributes = *sa};
	SETATTR3res r;

	if (guard) {
		a.guard.check = TRUE;
		a.guard.sattrguard3_u.obj_ctime = *guard;
	}
	call_as(uid, NFSPROC3_SETATTR, &a, &r);
	return r;
}

static sattr3 sattr_mode(mode3 mode)
{
	sattr3 sa = {.mode = {.set_it = TRUE, .set_mode3_u.mode = mode}};
	return sa;
}

static void test_setattr_mode_guard(void **state)
{
	nfs_fh3 f = lookup_fh(root_fh, "f.txt");
	fattr3 before = getattr(f), after;
	sattr3 sa = sattr_mode(0600);
	nfstime3 wrong = before.ctime;
	SETATTR3res r;
	struct stat st;
	char p[PATH_MAX];

	(void)state;
	/* A guard that does not match changes nothing. */
	wrong.seconds += 1;
	r = setattr_as(0, f, &sa, &wrong);
	assert_int_equal(r.status, NFS3ERR_NOT_SYNC);
	assert_wcc(&r.SETATTR3res_u.resfail.obj_wcc, &before, &before);
	assert_int_equal(getattr(f).mode, 0644);

	/* A matching guard: the lower file is copied up and changed; its
	 * fileid stays. */
	r = setattr_as(0, f, &sa, &before.ctime);
	assert_int_equal(r.status, NFS3_OK);
	after = getattr(f);
	assert_int_equal(after.mode, 0600);
	assert_int_equal(after.fileid, before.fileid);
	assert_wcc(&r.SETATTR3res_u.resok.obj_wcc, &before, &after);
	upper_path("f.txt", p, sizeof(p));
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_content(f, "lower-f");

	/* Nothing to set: OK, nothing changes. */
	sattr3 none = {0};
	r = setattr_as(0, f, &none, NULL);
	assert_int_equal(r.status, NFS3_OK);
	assert_wcc(&r.SETATTR3res_u.resok.obj_wcc, &after, &after);
}

static void test_setattr_size_owner_times(void **state)
{
	nfs_fh3 w = lookup_fh(root_fh, "own.txt");
	fattr3 before = getattr(w), after;
	sattr3 sa = {.size = {.set_it = TRUE, .set_size3_u.size = 1}};
	SETATTR3res r;

	(void)state;
	/* The owner truncates. */
	r = setattr_as(1000, w, &sa, NULL);
	assert_int_equal(r.status, NFS3_OK);
	after = getattr(w);
	assert_int_equal(after.size, 1);
	assert_wcc(&r.SETATTR3res_u.resok.obj_wcc, &before, &after);
	assert_content(w, "o");
	/* Growing makes a hole of zeros. */
	sa.size.set_size3_u.size = 3;
	assert_int_equal(setattr_as(1000, w, &sa, NULL).status, NFS3_OK);
	assert_content_n(w, "o\0\0", 3);

	/* Explicit times by the owner. */
	sattr3 t = {.atime = {.set_it = SET_TO_CLIENT_TIME,
			      .set_atime_u.atime = {.seconds = 1000000, .nseconds = 5}},
		    .mtime = {.set_it = SET_TO_CLIENT_TIME,
			      .set_mtime_u.mtime = {.seconds = 2000000, .nseconds = 7}}};
	assert_int_equal(setattr_as(1000, w, &t, NULL).status, NFS3_OK);
	after = getattr(w);
	assert_int_equal(after.atime.seconds, 1000000);
	assert_int_equal(after.atime.nseconds, 5);
	assert_int_equal(after.mtime.seconds, 2000000);
	assert_int_equal(after.mtime.nseconds, 7);
	/* The server's clock. */
	sattr3 now = {.atime = {.set_it = SET_TO_SERVER_TIME},
		      .mtime = {.set_it = SET_TO_SERVER_TIME}};
	assert_int_equal(setattr_as(1000, w, &now, NULL).status, NFS3_OK);
	after = getattr(w);
	assert_true(after.mtime.seconds > 2000000);
	/* A client time with nseconds out of range. */
	t.mtime.set_mtime_u.mtime.nseconds = 1000000000;
	assert_int_equal(setattr_as(1000, w, &t, NULL).status, NFS3ERR_INVAL);

	/* Others: no explicit times, no touch without write permission, no
	 * truncation without it. */
	t.mtime.set_mtime_u.mtime.nseconds = 0;
	assert_int_equal(setattr_as(1001, w, &t, NULL).status, NFS3ERR_PERM);
	assert_int_equal(setattr_as(1001, w, &now, NULL).status, NFS3ERR_ACCES);
	assert_int_equal(setattr_as(1001, w, &sa, NULL).status, NFS3ERR_ACCES);
	/* A size on a directory. */
	assert_int_equal(setattr_as(0, lookup_fh(root_fh, "d"), &sa, NULL).status,
			 NFS3ERR_ISDIR);
	assert_int_equal(setattr_as(0, lookup_fh(root_fh, "sym"), &sa, NULL).status,
			 NFS3ERR_INVAL);
}

static void test_setattr_owner_rules(void **state)
{
	nfs_fh3 o = lookup_fh(root_fh, "other.txt");
	sattr3 chmod = sattr_mode(0666);
	sattr3 chown = {.uid = {.set_it = TRUE, .set_uid3_u.uid = 1000}};
	sattr3 chgrp = {.gid = {.set_it = TRUE, .set_gid3_u.gid = 1000}};
	fattr3 a;

	(void)state;
	/* Not the owner: no chmod, no chown, no chgrp. */
	assert_int_equal(setattr_as(1000, o, &chmod, NULL).status, NFS3ERR_PERM);
	assert_int_equal(setattr_as(1000, o, &chown, NULL).status, NFS3ERR_PERM);
	assert_int_equal(setattr_as(1000, o, &chgrp, NULL).status, NFS3ERR_PERM);
	/* The owner: chmod yes, chown to someone else no, chgrp to a group
	 * it is not in no, to its own group yes. */
	assert_int_equal(setattr_as(1001, o, &chmod, NULL).status, NFS3_OK);
	assert_int_equal(setattr_as(1001, o, &chown, NULL).status, NFS3ERR_PERM);
	assert_int_equal(setattr_as(1001, o, &chgrp, NULL).status, NFS3ERR_PERM);
	chgrp.gid.set_gid3_u.gid = 1001;
	assert_int_equal(setattr_as(1001, o, &chgrp, NULL).status, NFS3_OK);
	/* Root: anything. */
	chown.gid = (set_gid3){.set_it = TRUE, .set_gid3_u.gid = 1002};
	assert_int_equal(setattr_as(0, o, &chown, NULL).status, NFS3_OK);
	a = getattr(o);
	assert_int_equal(a.uid, 1000);
	assert_int_equal(a.gid, 1002);
	assert_int_equal(a.mode, 0666);
}

static void test_setattr_setid(void **state)
{
	nfs_fh3 suid2 = lookup_fh(root_fh, "suid2.bin"),
		g = lookup_fh(root_fh, "sgid.txt");
	nfs_fh3 sym = lookup_fh(root_fh, "sym");
	sattr3 trunc = {.size = {.set_it = TRUE, .set_size3_u.size = 0}};
	sattr3 setgid = sattr_mode(02755);

	(void)state;
	/* A truncation by the owner (not root) clears the set-id bits. */
	assert_int_equal(setattr_as(1000, suid2, &trunc, NULL).status, NFS3_OK);
	assert_int_equal(getattr(suid2).mode, 0755);
	/* Set-group-id from a caller outside the file's group is dropped;
	 * from one inside it, kept. */
	sattr3 chgrp = {.gid = {.set_it = TRUE, .set_gid3_u.gid = 1005}};
	assert_int_equal(setattr_as(0, g, &chgrp, NULL).status, NFS3_OK);
	assert_int_equal(setattr_as(1000, g, &setgid, NULL).status, NFS3_OK);
	assert_int_equal(getattr(g).mode, 0755);
	chgrp.gid.set_gid3_u.gid = 1000;
	assert_int_equal(setattr_as(0, g, &chgrp, NULL).status, NFS3_OK);
	assert_int_equal(setattr_as(1000, g, &setgid, NULL).status, NFS3_OK);
	assert_int_equal(getattr(g).mode, 02755);
	/* The mode of a symlink is ignored, the call succeeds. */
	fattr3 before = getattr(sym);
	assert_int_equal(setattr_as(0, sym, &setgid, NULL).status, NFS3_OK);
	assert_int_equal(getattr(sym).mode, before.mode);
}

/* ---- WRITE, COMMIT ---- */

static WRITE3res write_as(uid_t uid, nfs_fh3 fh, uint64_t off, const char *data,
			  stable_how how)
{
	WRITE3args a = {
	    .file = fh,
	    .offset = off,
	    .count = (count3)strlen(data),
	    .stable = how,
	    .data = {.data_len = (u_int)strlen(data), .data_val = (char *)data}};
	WRITE3res r;

	call_as(uid, NFSPROC3_WRITE, &a, &r);
	return r;
}

static void test_write(void **state)
{
	nfs_fh3 w = lookup_fh(root_fh, "w.txt");
	fattr3 before = getattr(w), after;
	WRITE3res r;

	(void)state;
	r = write_as(0, w, 2, "ab", UNSTABLE);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(r.WRITE3res_u.resok.count, 2);
	assert_true(r.WRITE3res_u.resok.committed >= UNSTABLE &&
		    r.WRITE3res_u.resok.committed <= FILE_SYNC);
	assert_memory_equal(r.WRITE3res_u.resok.verf, srv.write_verf, NFS3_WRITEVERFSIZE);
	after = getattr(w);
	/* The copy-up kept the fileid. */
	assert_int_equal(after.fileid, before.fileid);
	assert_wcc(&r.WRITE3res_u.resok.file_wcc, &before, &after);
	assert_content(w, "01ab456789");

	r = write_as(0, w, 10, "XY", FILE_SYNC);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(r.WRITE3res_u.resok.committed, FILE_SYNC);
	r = write_as(0, w, 0, "Z", DATA_SYNC);
	assert_int_equal(r.status, NFS3_OK);
	assert_true(r.WRITE3res_u.resok.committed >= DATA_SYNC);
	assert_content(w, "Z1ab456789XY");

	/* Data beyond count is not written. */
	WRITE3args a = {.file = w,
			.offset = 0,
			.count = 1,
			.stable = FILE_SYNC,
			.data = {.data_len = 3, .data_val = "qrs"}};
	call(NFSPROC3_WRITE, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(r.WRITE3res_u.resok.count, 1);
	assert_content(w, "q1ab456789XY");
	/* count above the data: INVAL, nothing written. */
	before = getattr(w);
	a.count = 4;
	call(NFSPROC3_WRITE, &a, &r);
	assert_int_equal(r.status, NFS3ERR_INVAL);
	assert_wcc(&r.WRITE3res_u.resfail.file_wcc, &before, &before);
	/* count 0: OK, nothing written. */
	a.count = 0;
	call(NFSPROC3_WRITE, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(r.WRITE3res_u.resok.count, 0);
	assert_content(w, "q1ab456789XY");
	/* A range beyond the largest offset. */
	a.count = 1;
	a.offset = UINT64_MAX - 1;
	call(NFSPROC3_WRITE, &a, &r);
	assert_int_equal(r.status, NFS3ERR_FBIG);

	/* Not a regular file. */
	assert_int_equal(write_as(0, lookup_fh(root_fh, "d"), 0, "x", UNSTABLE).status,
			 NFS3ERR_ISDIR);
	assert_int_equal(write_as(0, lookup_fh(root_fh, "sym"), 0, "x", UNSTABLE).status,
			 NFS3ERR_INVAL);
}

static void test_write_permissions(void **state)
{
	nfs_fh3 ro = lookup_fh(root_fh, "ro.txt"), suid = lookup_fh(root_fh, "suid.bin");
	nfs_fh3 fid = lookup_fh(root_fh, "fid.txt");
	fattr3 a;

	(void)state;
	/* Another user without write permission. */
	assert_int_equal(write_as(1000, fid, 0, "x", UNSTABLE).status, NFS3ERR_ACCES);
	assert_int_equal(write_as(1001, ro, 0, "x", UNSTABLE).status, NFS3ERR_ACCES);
	/* The owner writes its 0444 file (owner override). */
	assert_int_equal(write_as(1000, ro, 0, "R", FILE_SYNC).status, NFS3_OK);
	assert_content(ro, "Ro");
	assert_int_equal(getattr(ro).mode, 0444);
	/* A write by someone other than root clears the set-id bits. */
	assert_int_equal(write_as(1000, suid, 2, "x", UNSTABLE).status, NFS3_OK);
	a = getattr(suid);
	assert_int_equal(a.mode, 0755);
}

/* ACCESS gives the owner what the owner's mode bits give (a new open obeys
 * them: pjdfstest open/06 through the Linux client), while READ and WRITE
 * keep the owner override for a client's already open files. */
static void test_access_owner_mode(void **state)
{
	nfs_fh3 m277 = lookup_fh(root_fh, "m0277.txt");
	nfs_fh3 m177 = lookup_fh(root_fh, "m0177.txt");
	nfs_fh3 m077 = lookup_fh(root_fh, "m0077.txt");
	READ3args ra = {.file = m277, .count = 64};
	READ3res rr;

	(void)state;
	assert_int_equal(access_as(1000, m277, ACCESS_ALL),
			 ACCESS3_MODIFY | ACCESS3_EXTEND);
	assert_int_equal(access_as(1000, m177, ACCESS_ALL), ACCESS3_EXECUTE);
	assert_int_equal(access_as(1000, m077, ACCESS_ALL), 0);
	/* Root reads and writes anything, and executes what has an x bit. */
	assert_int_equal(access_as(0, m077, ACCESS_ALL), ACCESS3_READ | ACCESS3_MODIFY |
							     ACCESS3_EXTEND |
							     ACCESS3_EXECUTE);
	assert_int_equal(access_as(0, lookup_fh(root_fh, "own.txt"), ACCESS_ALL),
			 ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND);
	/* The owner override: READ of the 0277 file, WRITE of the 0077 one. */
	call_as(1000, NFSPROC3_READ, &ra, &rr);
	assert_int_equal(rr.status, NFS3_OK);
	assert_int_equal(rr.READ3res_u.resok.count, 5);
	assert_memory_equal(rr.READ3res_u.resok.data.data_val, "m0277", 5);
	assert_int_equal(write_as(1000, m077, 0, "M", FILE_SYNC).status, NFS3_OK);
	assert_content(m077, "M0077");
	assert_int_equal(getattr(m077).mode, 0077);
}

static void test_commit(void **state)
{
	nfs_fh3 b = lookup_fh(root_fh, "b.txt");
	COMMIT3args ca = {.file = b};
	COMMIT3res cr;
	fattr3 before, after;

	(void)state;
	assert_int_equal(write_as(0, b, 0, "L", UNSTABLE).status, NFS3_OK);
	before = getattr(b);
	call(NFSPROC3_COMMIT, &ca, &cr);
	assert_int_equal(cr.status, NFS3_OK);
	assert_memory_equal(cr.COMMIT3res_u.resok.verf, srv.write_verf,
			    NFS3_WRITEVERFSIZE);
	after = getattr(b);
	assert_wcc(&cr.COMMIT3res_u.resok.file_wcc, &before, &after);
	assert_content(b, "Lower1-b");

	ca.file = lookup_fh(root_fh, "d");
	call(NFSPROC3_COMMIT, &ca, &cr);
	assert_int_equal(cr.status, NFS3ERR_ISDIR);
}

/* ---- CREATE ---- */

static CREATE3res create_as(uid_t uid, nfs_fh3 dir, const char *nm, createmode3 how,
			    const sattr3 *sa, const char *verf)
{
	CREATE3args a = {.where = {.dir = dir, .name = (char *)nm}, .how = {.mode = how}};
	CREATE3res r;

	if (how == EXCLUSIVE)
		memcpy(a.how.createhow3_u.verf, verf, NFS3_CREATEVERFSIZE);
	else if (sa)
		a.how.createhow3_u.obj_attributes = *sa;
	call_as(uid, NFSPROC3_CREATE, &a, &r);
	return r;
}

static void test_create(void **state)
{
	fattr3 dir_before = getattr(root_fh), dir_after, a;
	/* Group and other write bits: the server's umask must not apply. */
	sattr3 sa = sattr_mode(0666), s644 = sattr_mode(0644);
	CREATE3res r;
	CREATE3resok *ok = &r.CREATE3res_u.resok;

	(void)state;
	r = create_as(0, root_fh, "new.txt", UNCHECKED, &sa, NULL);
	assert_int_equal(r.status, NFS3_OK);
	dir_after = getattr(root_fh);
	assert_wcc(&ok->dir_wcc, &dir_before, &dir_after);
	assert_true(ok->obj.handle_follows);
	assert_true(ok->obj_attributes.attributes_follow);
	a = getattr(ok->obj.post_op_fh3_u.handle);
	assert_fattr_eq(&ok->obj_attributes.post_op_attr_u.attributes, &a);
	assert_int_equal(a.type, NF3REG);
	assert_int_equal(a.mode, 0666);
	assert_int_equal(a.size, 0);
	nfs_fh3 looked = lookup_fh(root_fh, "new.txt");
	assert_int_equal(looked.data.data_len,
			 ok->obj.post_op_fh3_u.handle.data.data_len);
	assert_memory_equal(looked.data.data_val,
			    ok->obj.post_op_fh3_u.handle.data.data_val,
			    looked.data.data_len);

	/* GUARDED over an existing name: EXIST, wcc still there. */
	dir_before = getattr(root_fh);
	r = create_as(0, root_fh, "new.txt", GUARDED, &sa, NULL);
	assert_int_equal(r.status, NFS3ERR_EXIST);
	assert_wcc(&r.CREATE3res_u.resfail.dir_wcc, &dir_before, &dir_before);
	r = create_as(0, root_fh, "f.txt", GUARDED, &sa, NULL);
	assert_int_equal(r.status, NFS3ERR_EXIST);

	/* UNCHECKED over an existing file with size 0 truncates it (a lower
	 * file: copied up first). */
	nfs_fh3 gone = lookup_fh(root_fh, "gone.txt");
	uint64_t fileid = getattr(gone).fileid;
	sattr3 trunc = {.size = {.set_it = TRUE, .set_size3_u.size = 0}};
	r = create_as(0, root_fh, "gone.txt", UNCHECKED, &trunc, NULL);
	assert_int_equal(r.status, NFS3_OK);
	a = getattr(gone);
	assert_int_equal(a.size, 0);
	assert_int_equal(a.fileid, fileid);
	/* ... which needs write permission on the file. */
	r = create_as(1000, lookup_fh(root_fh, "pub"), "x", UNCHECKED, &s644, NULL);
	assert_int_equal(r.status, NFS3_OK);
	r = create_as(1001, lookup_fh(root_fh, "pub"), "x", UNCHECKED, &trunc, NULL);
	assert_int_equal(r.status, NFS3ERR_ACCES);

	/* Names. */
	assert_int_equal(create_as(0, root_fh, ".", UNCHECKED, &sa, NULL).status,
			 NFS3ERR_EXIST);
	assert_int_equal(create_as(0, root_fh, "..", GUARDED, &sa, NULL).status,
			 NFS3ERR_EXIST);
	assert_int_equal(create_as(0, root_fh, "a/b", UNCHECKED, &sa, NULL).status,
			 NFS3ERR_ACCES);
	char longname[300];
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	assert_int_equal(create_as(0, root_fh, longname, UNCHECKED, &sa, NULL).status,
			 NFS3ERR_NAMETOOLONG);
	/* Not a directory; no permission. */
	assert_int_equal(
	    create_as(0, lookup_fh(root_fh, "f.txt"), "z", UNCHECKED, &sa, NULL).status,
	    NFS3ERR_NOTDIR);
	assert_int_equal(create_as(1000, root_fh, "z", UNCHECKED, &sa, NULL).status,
			 NFS3ERR_ACCES);
}

static void test_create_owner(void **state)
{
	nfs_fh3 pub = lookup_fh(root_fh, "pub");
	sattr3 sa = sattr_mode(0600);
	CREATE3res r;
	fattr3 a;
	struct stat st;
	char p[PATH_MAX];

	(void)state;
	/* A new object belongs to its creator; uid and gid in the attributes
	 * count only from root. */
	sa.uid = (set_uid3){.set_it = TRUE, .set_uid3_u.uid = 0};
	r = create_as(1000, pub, "mine", GUARDED, &sa, NULL);
	assert_int_equal(r.status, NFS3_OK);
	a = r.CREATE3res_u.resok.obj_attributes.post_op_attr_u.attributes;
	assert_int_equal(a.uid, 1000);
	assert_int_equal(a.gid, 1000);
	assert_int_equal(a.mode, 0600);
	upper_path("pub/mine", p, sizeof(p));
	assert_int_equal(lstat(p, &st), 0);
	assert_int_equal(st.st_uid, 1000);

	sa.uid.set_uid3_u.uid = 1234;
	sa.gid = (set_gid3){.set_it = TRUE, .set_gid3_u.gid = 4321};
	sa.mtime.set_it = SET_TO_CLIENT_TIME;
	sa.mtime.set_mtime_u.mtime = (nfstime3){.seconds = 1234567, .nseconds = 89};
	r = create_as(0, pub, "given", GUARDED, &sa, NULL);
	assert_int_equal(r.status, NFS3_OK);
	a = r.CREATE3res_u.resok.obj_attributes.post_op_attr_u.attributes;
	assert_int_equal(a.uid, 1234);
	assert_int_equal(a.gid, 4321);
	assert_int_equal(a.mtime.seconds, 1234567);
	assert_int_equal(a.mtime.nseconds, 89);

	/* MKDIR: the same rules, the times applied after creation. */
	MKDIR3args ma = {.where = {.dir = pub, .name = "mydir"}, .attributes = sa};
	MKDIR3res mr;
	call_as(1000, NFSPROC3_MKDIR, &ma, &mr);
	assert_int_equal(mr.status, NFS3_OK);
	a = getattr(mr.MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
	assert_int_equal(a.uid, 1000);
	assert_int_equal(a.gid, 1000);
	assert_int_equal(a.mode, 0600);
	assert_int_equal(a.mtime.seconds, 1234567);
	assert_fattr_eq(&mr.MKDIR3res_u.resok.obj_attributes.post_op_attr_u.attributes,
			&a);
}

static void test_create_exclusive(void **state)
{
	CREATE3res r;
	uint64_t fileid;
	fattr3 dir_before = getattr(root_fh), dir_after;

	(void)state;
	r = create_as(0, root_fh, "excl", EXCLUSIVE, NULL, "verf-one");
	assert_int_equal(r.status, NFS3_OK);
	dir_after = getattr(root_fh);
	assert_wcc(&r.CREATE3res_u.resok.dir_wcc, &dir_before, &dir_after);
	assert_true(r.CREATE3res_u.resok.obj_attributes.attributes_follow);
	fileid = r.CREATE3res_u.resok.obj_attributes.post_op_attr_u.attributes.fileid;
	/* The retransmission: the same file. */
	r = create_as(0, root_fh, "excl", EXCLUSIVE, NULL, "verf-one");
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(
	    r.CREATE3res_u.resok.obj_attributes.post_op_attr_u.attributes.fileid, fileid);
	/* Another client's create: EXIST. */
	r = create_as(0, root_fh, "excl", EXCLUSIVE, NULL, "verf-two");
	assert_int_equal(r.status, NFS3ERR_EXIST);
	/* An existing name never created exclusively: EXIST. */
	r = create_as(0, root_fh, "b.txt", EXCLUSIVE, NULL, "verf-one");
	assert_int_equal(r.status, NFS3ERR_EXIST);
	/* Then the client sets the attributes. */
	nfs_fh3 fh = lookup_fh(root_fh, "excl");
	sattr3 sa = sattr_mode(0644);
	sa.atime.set_it = SET_TO_SERVER_TIME;
	sa.mtime.set_it = SET_TO_SERVER_TIME;
	assert_int_equal(setattr_as(0, fh, &sa, NULL).status, NFS3_OK);
	assert_int_equal(getattr(fh).mode, 0644);
	assert_int_equal(getattr(fh).fileid, fileid);
}

/* ---- MKDIR, SYMLINK, MKNOD ---- */

static void test_mkdir(void **state)
{
	MKDIR3args a = {.where = {.dir = root_fh, .name = "newdir"},
			.attributes = sattr_mode(0750)};
	MKDIR3res r;
	fattr3 before = getattr(root_fh), after, o;

	(void)state;
	call(NFSPROC3_MKDIR, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	after = getattr(root_fh);
	assert_wcc(&r.MKDIR3res_u.resok.dir_wcc, &before, &after);
	assert_true(r.MKDIR3res_u.resok.obj.handle_follows);
	o = getattr(r.MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
	assert_int_equal(o.type, NF3DIR);
	assert_int_equal(o.mode, 0750);
	assert_fattr_eq(&r.MKDIR3res_u.resok.obj_attributes.post_op_attr_u.attributes,
			&o);

	/* Over an existing name (upper, lower, merged). */
	call(NFSPROC3_MKDIR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_EXIST);
	assert_wcc(&r.MKDIR3res_u.resfail.dir_wcc, &after, &after);
	a.where.name = "merged";
	call(NFSPROC3_MKDIR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_EXIST);
	a.where.name = "..";
	call(NFSPROC3_MKDIR, &a, &r);
	assert_int_equal(r.status, NFS3ERR_EXIST);
	/* In a lower directory: it is copied up, the new one is in the upper. */
	a.where.dir = lookup_fh(root_fh, "d");
	a.where.name = "sub";
	call(NFSPROC3_MKDIR, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	char p[PATH_MAX];
	struct stat st;
	upper_path("d/sub", p, sizeof(p));
	assert_int_equal(stat(p, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	lookup_fh(a.where.dir, "x");
}

static void test_symlink(void **state)
{
	SYMLINK3args a = {.where = {.dir = root_fh, .name = "newlink"},
			  .symlink = {.symlink_attributes = sattr_mode(0600),
				      .symlink_data = "some/where"}};
	SYMLINK3res r;
	fattr3 before = getattr(root_fh), after;

	(void)state;
	call(NFSPROC3_SYMLINK, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	after = getattr(root_fh);
	assert_wcc(&r.SYMLINK3res_u.resok.dir_wcc, &before, &after);
	nfs_fh3 fh = r.SYMLINK3res_u.resok.obj.post_op_fh3_u.handle;
	assert_int_equal(getattr(fh).type, NF3LNK);
	assert_int_equal(getattr(fh).mode, 0777); /* the mode was ignored */
	READLINK3args ra = {.symlink = fh};
	READLINK3res rr;
	call(NFSPROC3_READLINK, &ra, &rr);
	assert_int_equal(rr.status, NFS3_OK);
	assert_string_equal(rr.READLINK3res_u.resok.data, "some/where");

	call(NFSPROC3_SYMLINK, &a, &r);
	assert_int_equal(r.status, NFS3ERR_EXIST);
	a.where.name = "emptylink";
	a.symlink.symlink_data = "";
	call(NFSPROC3_SYMLINK, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NOENT);
}

static MKNOD3res mknod_as(uid_t uid, const char *nm, ftype3 type, uint32_t major,
			  uint32_t minor)
{
	MKNOD3args a = {.where = {.dir = lookup_fh(root_fh, "pub"), .name = (char *)nm},
			.what = {.type = type}};
	MKNOD3res r;

	if (type == NF3CHR || type == NF3BLK) {
		a.what.mknoddata3_u.device.dev_attributes = sattr_mode(0640);
		a.what.mknoddata3_u.device.spec.specdata1 = major;
		a.what.mknoddata3_u.device.spec.specdata2 = minor;
	} else if (type == NF3FIFO || type == NF3SOCK) {
		a.what.mknoddata3_u.pipe_attributes = sattr_mode(0640);
	}
	call_as(uid, NFSPROC3_MKNOD, &a, &r);
	return r;
}

static void test_mknod(void **state)
{
	nfs_fh3 pub = lookup_fh(root_fh, "pub");
	fattr3 before = getattr(pub), after, o;
	MKNOD3res r;

	(void)state;
	r = mknod_as(1000, "fifo", NF3FIFO, 0, 0);
	assert_int_equal(r.status, NFS3_OK);
	after = getattr(pub);
	assert_wcc(&r.MKNOD3res_u.resok.dir_wcc, &before, &after);
	o = getattr(r.MKNOD3res_u.resok.obj.post_op_fh3_u.handle);
	assert_int_equal(o.type, NF3FIFO);
	assert_int_equal(o.mode, 0640);
	assert_int_equal(o.uid, 1000);

	r = mknod_as(1000, "sock", NF3SOCK, 0, 0);
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(getattr(r.MKNOD3res_u.resok.obj.post_op_fh3_u.handle).type,
			 NF3SOCK);

	/* Devices: root, where the server may (it runs as root here). */
	r = mknod_as(0, "chr", NF3CHR, 1, 3);
	if (r.status == NFS3_OK) {
		o = getattr(r.MKNOD3res_u.resok.obj.post_op_fh3_u.handle);
		assert_int_equal(o.type, NF3CHR);
		assert_int_equal(o.rdev.specdata1, 1);
		assert_int_equal(o.rdev.specdata2, 3);
	} else {
		assert_int_equal(r.status, NFS3ERR_PERM);
	}
	r = mknod_as(0, "blk", NF3BLK, 7, 0);
	assert_true(r.status == NFS3_OK || r.status == NFS3ERR_PERM);
	assert_int_equal(mknod_as(1000, "chr2", NF3CHR, 1, 3).status, NFS3ERR_PERM);
	assert_int_equal(lookup_st(pub, "chr2", NULL), NFS3ERR_NOENT);

	/* What MKNOD does not make. */
	assert_int_equal(mknod_as(0, "reg", NF3REG, 0, 0).status, NFS3ERR_BADTYPE);
	assert_int_equal(mknod_as(0, "dir", NF3DIR, 0, 0).status, NFS3ERR_BADTYPE);
	assert_int_equal(mknod_as(0, "lnk", NF3LNK, 0, 0).status, NFS3ERR_BADTYPE);
	assert_int_equal(mknod_as(0, "fifo", NF3FIFO, 0, 0).status, NFS3ERR_EXIST);
}

/* ---- REMOVE, RMDIR ---- */

static REMOVE3res remove_as(uid_t uid, nfs_fh3 dir, const char *nm)
{
	REMOVE3args a = {.object = {.dir = dir, .name = (char *)nm}};
	REMOVE3res r;

	call_as(uid, NFSPROC3_REMOVE, &a, &r);
	return r;
}

static void test_remove(void **state)
{
	fattr3 before = getattr(root_fh), after;
	REMOVE3res r;

	(void)state;
	/* A lower file: gone from the merged tree (a white-out keeps it so). */
	r = remove_as(0, root_fh, "rm.txt");
	assert_int_equal(r.status, NFS3_OK);
	after = getattr(root_fh);
	assert_wcc(&r.REMOVE3res_u.resok.dir_wcc, &before, &after);
	assert_int_equal(lookup_st(root_fh, "rm.txt", NULL), NFS3ERR_NOENT);
	r = remove_as(0, root_fh, "rm.txt");
	assert_int_equal(r.status, NFS3ERR_NOENT);
	assert_wcc(&r.REMOVE3res_u.resfail.dir_wcc, &after, &after);

	/* An upper-only file. */
	sattr3 sa = sattr_mode(0644);
	assert_int_equal(create_as(0, root_fh, "tmp.rm", GUARDED, &sa, NULL).status,
			 NFS3_OK);
	assert_int_equal(remove_as(0, root_fh, "tmp.rm").status, NFS3_OK);
	assert_int_equal(lookup_st(root_fh, "tmp.rm", NULL), NFS3ERR_NOENT);

	assert_int_equal(remove_as(0, root_fh, ".").status, NFS3ERR_ACCES);
	assert_int_equal(remove_as(0, root_fh, "").status, NFS3ERR_ACCES);
	assert_int_equal(remove_as(1000, root_fh, "b.txt").status, NFS3ERR_ACCES);

	/* A sticky directory: one's own entries only. */
	nfs_fh3 sticky = lookup_fh(root_fh, "sticky");
	assert_int_equal(remove_as(1000, sticky, "theirs").status, NFS3ERR_PERM);
	assert_int_equal(lookup_st(sticky, "theirs", NULL), NFS3_OK);
	assert_int_equal(remove_as(1000, sticky, "mine").status, NFS3_OK);
	assert_int_equal(remove_as(0, sticky, "theirs").status, NFS3_OK);
}

static RMDIR3res rmdir_as(uid_t uid, nfs_fh3 dir, const char *nm)
{
	RMDIR3args a = {.object = {.dir = dir, .name = (char *)nm}};
	RMDIR3res r;

	call_as(uid, NFSPROC3_RMDIR, &a, &r);
	return r;
}

static bool time_eq(nfstime3 a, nfstime3 b)
{
	return a.seconds == b.seconds && a.nseconds == b.nseconds;
}

/* A merged directory's wcc data is what GETATTR gives before and after,
 * and its times move with a change of any part (object.c rule 6): the
 * CREATE that copies its upper part up, and a REMOVE in that part. */
static void test_merged_dir_wcc(void **state)
{
	nfs_fh3 dir = lookup_fh(root_fh, "merged");
	fattr3 before = getattr(dir), after;
	sattr3 sa = sattr_mode(0644);
	CREATE3res r;
	REMOVE3res rr;

	(void)state;
	usleep(20000); /* past the tick of the layers' making */
	r = create_as(0, dir, "wcc.txt", GUARDED, &sa, NULL);
	assert_int_equal(r.status, NFS3_OK);
	after = getattr(dir);
	assert_wcc(&r.CREATE3res_u.resok.dir_wcc, &before, &after);
	assert_false(time_eq(before.mtime, after.mtime));
	assert_false(time_eq(before.ctime, after.ctime));
	before = after;
	usleep(20000);
	rr = remove_as(0, dir, "wcc.txt");
	assert_int_equal(rr.status, NFS3_OK);
	after = getattr(dir);
	assert_wcc(&rr.REMOVE3res_u.resok.dir_wcc, &before, &after);
	assert_false(time_eq(before.ctime, after.ctime));
}

static void test_rmdir(void **state)
{
	fattr3 before = getattr(root_fh), after;
	RMDIR3res r;

	(void)state;
	/* Non-empty across the layers. */
	r = rmdir_as(0, root_fh, "merged");
	assert_int_equal(r.status, NFS3ERR_NOTEMPTY);
	assert_wcc(&r.RMDIR3res_u.resfail.dir_wcc, &before, &before);
	/* An empty lower directory. */
	r = rmdir_as(0, root_fh, "emptylow");
	assert_int_equal(r.status, NFS3_OK);
	after = getattr(root_fh);
	assert_wcc(&r.RMDIR3res_u.resok.dir_wcc, &before, &after);
	assert_int_equal(lookup_st(root_fh, "emptylow", NULL), NFS3ERR_NOENT);
	/* A new one. */
	MKDIR3args ma = {.where = {.dir = root_fh, .name = "tmpdir"},
			 .attributes = sattr_mode(0755)};
	MKDIR3res mr;
	call(NFSPROC3_MKDIR, &ma, &mr);
	assert_int_equal(mr.status, NFS3_OK);
	assert_int_equal(rmdir_as(1000, root_fh, "tmpdir").status, NFS3ERR_ACCES);
	assert_int_equal(rmdir_as(0, root_fh, "tmpdir").status, NFS3_OK);

	assert_int_equal(rmdir_as(0, root_fh, "b.txt").status, NFS3ERR_NOTDIR);
	assert_int_equal(rmdir_as(0, root_fh, "nothere").status, NFS3ERR_NOENT);
	assert_int_equal(rmdir_as(0, root_fh, ".").status, NFS3ERR_INVAL);
	assert_int_equal(rmdir_as(0, root_fh, "..").status, NFS3ERR_INVAL);
}

/* ---- RENAME, LINK ---- */

static RENAME3res rename_as(uid_t uid, nfs_fh3 from, const char *fnm, nfs_fh3 to,
			    const char *tnm)
{
	RENAME3args a = {.from = {.dir = from, .name = (char *)fnm},
			 .to = {.dir = to, .name = (char *)tnm}};
	RENAME3res r;

	call_as(uid, NFSPROC3_RENAME, &a, &r);
	return r;
}

static void test_rename(void **state)
{
	nfs_fh3 rn = lookup_fh(root_fh, "rn"), d = lookup_fh(root_fh, "d");
	uint64_t id1 = getattr(lookup_fh(rn, "r1")).fileid;
	fattr3 rn_before = getattr(rn), d_before = getattr(d), rn_after, d_after;
	RENAME3res r;

	(void)state;
	/* Within a directory, over an existing name. */
	r = rename_as(0, rn, "r1", rn, "r2");
	assert_int_equal(r.status, NFS3_OK);
	rn_after = getattr(rn);
	assert_wcc(&r.RENAME3res_u.resok.fromdir_wcc, &rn_before, &rn_after);
	assert_wcc(&r.RENAME3res_u.resok.todir_wcc, &rn_before, &rn_after);
	assert_int_equal(lookup_st(rn, "r1", NULL), NFS3ERR_NOENT);
	nfs_fh3 r2 = lookup_fh(rn, "r2");
	assert_int_equal(getattr(r2).fileid, id1);
	assert_content(r2, "r1");

	/* Across directories. */
	rn_before = rn_after;
	r = rename_as(0, rn, "r3", d, "moved");
	assert_int_equal(r.status, NFS3_OK);
	rn_after = getattr(rn);
	d_after = getattr(d);
	assert_wcc(&r.RENAME3res_u.resok.fromdir_wcc, &rn_before, &rn_after);
	assert_wcc(&r.RENAME3res_u.resok.todir_wcc, &d_before, &d_after);
	assert_content(lookup_fh(d, "moved"), "r3");
	assert_int_equal(lookup_st(rn, "r3", NULL), NFS3ERR_NOENT);

	/* Failures: a missing source, a directory with lower parts, names,
	 * permission. */
	r = rename_as(0, rn, "nothere", rn, "x");
	assert_int_equal(r.status, NFS3ERR_NOENT);
	assert_wcc(&r.RENAME3res_u.resfail.fromdir_wcc, &rn_after, &rn_after);
	assert_wcc(&r.RENAME3res_u.resfail.todir_wcc, &rn_after, &rn_after);
	assert_int_equal(rename_as(0, root_fh, "ldir", root_fh, "ldir2").status,
			 NFS3ERR_XDEV);
	assert_int_equal(rename_as(0, rn, ".", rn, "x").status, NFS3ERR_INVAL);
	assert_int_equal(rename_as(0, rn, "r4", rn, "..").status, NFS3ERR_INVAL);
	assert_int_equal(rename_as(1000, root_fh, "b.txt", root_fh, "c.txt").status,
			 NFS3ERR_ACCES);
	/* A user may rename in a 0777 directory. */
	assert_int_equal(rename_as(1000, rn, "r4", rn, "r5").status, NFS3_OK);
	/* A file over a directory. */
	assert_int_equal(rename_as(0, rn, "r5", root_fh, "d").status, NFS3ERR_ISDIR);

	/* A sticky directory: not over someone else's entry. */
	nfs_fh3 sticky = lookup_fh(root_fh, "sticky");
	sattr3 sa = sattr_mode(0644);
	assert_int_equal(create_as(1001, sticky, "t2", GUARDED, &sa, NULL).status,
			 NFS3_OK);
	assert_int_equal(create_as(1000, sticky, "m2", GUARDED, &sa, NULL).status,
			 NFS3_OK);
	assert_int_equal(rename_as(1000, sticky, "m2", sticky, "t2").status,
			 NFS3ERR_PERM);
	assert_int_equal(rename_as(1000, sticky, "t2", sticky, "t3").status,
			 NFS3ERR_PERM);
	assert_int_equal(rename_as(1000, sticky, "m2", sticky, "m3").status, NFS3_OK);
}

static void test_link(void **state)
{
	nfs_fh3 f = lookup_fh(root_fh, "lk.txt"), d = lookup_fh(root_fh, "d");
	LINK3args a = {.file = f, .link = {.dir = d, .name = "hard"}};
	LINK3res r;
	fattr3 f_before = getattr(f), d_before = getattr(d), f_after, d_after;

	(void)state;
	assert_int_equal(f_before.nlink, 1);
	call(NFSPROC3_LINK, &a, &r);
	assert_int_equal(r.status, NFS3_OK);
	f_after = getattr(f);
	d_after = getattr(d);
	assert_int_equal(f_after.nlink, 2);
	assert_int_equal(f_after.fileid, f_before.fileid);
	assert_true(r.LINK3res_u.resok.file_attributes.attributes_follow);
	assert_fattr_eq(&r.LINK3res_u.resok.file_attributes.post_op_attr_u.attributes,
			&f_after);
	assert_wcc(&r.LINK3res_u.resok.linkdir_wcc, &d_before, &d_after);
	nfs_fh3 h = lookup_fh(d, "hard");
	assert_content(h, "link me");
	/* The same node: one fileid for both names. */
	assert_int_equal(getattr(h).fileid, f_before.fileid);

	/* Over an existing name, a directory, dots, permission. */
	call(NFSPROC3_LINK, &a, &r);
	assert_int_equal(r.status, NFS3ERR_EXIST);
	assert_true(r.LINK3res_u.resfail.file_attributes.attributes_follow);
	assert_wcc(&r.LINK3res_u.resfail.linkdir_wcc, &d_after, &d_after);
	a.link.name = ".";
	call(NFSPROC3_LINK, &a, &r);
	assert_int_equal(r.status, NFS3ERR_EXIST);
	a.file = d;
	a.link.name = "dirlink";
	call(NFSPROC3_LINK, &a, &r);
	assert_int_equal(r.status, NFS3ERR_ISDIR);
	a.file = f;
	call_as(1000, NFSPROC3_LINK, &a, &r);
	assert_int_equal(r.status, NFS3ERR_ACCES);
	a.link.dir = f;
	call(NFSPROC3_LINK, &a, &r);
	assert_int_equal(r.status, NFS3ERR_NOTDIR);
}

/* ---- exports(5) sync / async ---- */

/* Runs PROC as root under client rule RULE, as the dispatcher does after its
 * access check; returns how many syncs the engine issued meanwhile. */
static unsigned long call_rule(const struct srv_client_opts *rule, uint32_t proc,
			       void *args, void *res)
{
	const struct rpc_proc *p = &nfs3_program.procs[proc];
	struct test_req req = req_as(0, 0);
	struct rpc_req *rq = test_req_tie(&req);

	rq->proc = proc;
	memset(res, 0, p->res_size);
	assert_true(test_req_admit(&req, p, args, res));
	req.srv.client = rule; /* the rule under test, not the export's */
	un_sys_inject_reset();
	assert_true(srv_call_handler(&nfs3_program, p, rq, args, res));
	return un_sys_calls(UN_SYS_SYNC);
}

/* An `async` rule reaches the engine: CREATE, SETATTR and REMOVE reply
 * without a sync; COMMIT still syncs.  The default rule (sync) syncs each,
 * and so does a call after an async one on the same thread. */
static void test_async_rule(void **state)
{
	struct srv_clients c;
	char err[256];
	sattr3 sa = sattr_mode(0640);
	CREATE3args ca = {.where = {.dir = root_fh, .name = "async.txt"},
			  .how = {.mode = GUARDED}};
	SETATTR3args sa_args = {.new_attributes = sattr_mode(0600)};
	REMOVE3args ra = {.object = {.dir = root_fh, .name = "async.txt"}};
	COMMIT3args cm = {0};
	CREATE3res cr;
	SETATTR3res sr;
	REMOVE3res rr;
	COMMIT3res cmr;

	(void)state;
	assert_int_equal(srv_clients_parse("127.0.0.1(rw,no_root_squash,async) "
					   "*(rw,no_root_squash)",
					   &c, err, sizeof(err)),
			 0);
	assert_false(c.rules[0].opts.sync);
	assert_true(c.rules[1].opts.sync);
	ca.how.createhow3_u.obj_attributes = sa;

	assert_int_equal(call_rule(&c.rules[0].opts, NFSPROC3_CREATE, &ca, &cr), 0);
	assert_int_equal(cr.status, NFS3_OK);
	sa_args.object = cr.CREATE3res_u.resok.obj.post_op_fh3_u.handle;
	cm.file = sa_args.object;
	assert_int_equal(call_rule(&c.rules[0].opts, NFSPROC3_SETATTR, &sa_args, &sr), 0);
	assert_int_equal(sr.status, NFS3_OK);
	assert_true(call_rule(&c.rules[0].opts, NFSPROC3_COMMIT, &cm, &cmr) > 0);
	assert_int_equal(cmr.status, NFS3_OK);
	assert_int_equal(call_rule(&c.rules[0].opts, NFSPROC3_REMOVE, &ra, &rr), 0);
	assert_int_equal(rr.status, NFS3_OK);

	assert_true(call_rule(&c.rules[1].opts, NFSPROC3_CREATE, &ca, &cr) > 0);
	assert_int_equal(cr.status, NFS3_OK);
	sa_args.object = cr.CREATE3res_u.resok.obj.post_op_fh3_u.handle;
	assert_true(call_rule(&c.rules[1].opts, NFSPROC3_SETATTR, &sa_args, &sr) > 0);
	assert_int_equal(sr.status, NFS3_OK);
	assert_true(call_rule(&c.rules[1].opts, NFSPROC3_REMOVE, &ra, &rr) > 0);
	assert_int_equal(rr.status, NFS3_OK);
	srv_clients_free(&c);
}

int main(void)
{
#define T(fn) NFS3_TEST(fn)
	const struct CMUnitTest tests[] = {
	    T(test_access_writable),
	    T(test_access_owner_mode),
	    T(test_setattr_mode_guard),
	    T(test_setattr_size_owner_times),
	    T(test_setattr_owner_rules),
	    T(test_setattr_setid),
	    T(test_write),
	    T(test_write_permissions),
	    T(test_commit),
	    T(test_create),
	    T(test_create_owner),
	    T(test_create_exclusive),
	    T(test_mkdir),
	    T(test_symlink),
	    T(test_mknod),
	    T(test_remove),
	    T(test_merged_dir_wcc),
	    T(test_rmdir),
	    T(test_rename),
	    T(test_link),
	    T(test_async_rule),
	};
#undef T

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
