/* SPDX-License-Identifier: Apache-2.0 */
/* nfs3_write.c - the NFSv3 procedures that change the union: SETATTR, WRITE,
 * COMMIT, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK.  Their
 * entries are in the one table of nfs3_proc.c.
 *
 * Design notes.
 *
 *  1. Every handler checks in the same order: resolve every handle
 *     (BADHANDLE, STALE), the export takes changes (ROFS), the types of the
 *     objects (NOTDIR, ISDIR, INVAL), the names, the other arguments, the
 *     caller's permission on the merged directories whose names change
 *     (nfs3_access_check, the sticky rules), and only then the union engine.
 *     Nothing reaches the engine that a check refused.
 *  2. wcc_data: the pre-op attributes are those read when the handle was
 *     resolved, the post-op ones are read again after the engine returned,
 *     on success and on failure alike (nfs3_wcc_changed), since a failed
 *     call may still have copied an object up.  Every directory and file a
 *     procedure changes gets them: RENAME both directories, LINK the file
 *     (post-op) and the directory.
 *  3. Stable storage: a reply that promises it (WRITE with committed
 *     DATA_SYNC or FILE_SYNC, COMMIT) is filled in only after un_write or
 *     un_commit returned, and they return only when the data is durable; the
 *     dispatcher encodes the reply after the handler returns, so no promise
 *     leaves before the sync.  `committed` is what the engine says, never
 *     what the client asked.
 *  4. Identity: every handler runs with the caller's filesystem identity
 *     (the program's invoke sets it: exports/cred.c), so new objects get the caller's uid
 *     and gid and the kernel's setgid-directory rule, and the kernel checks
 *     what the caller does to an object: SETATTR, WRITE, the truncation of
 *     an UNCHECKED CREATE (the engine checks the merged attributes first so
 *     that a refused change copies nothing up), and it clears set-id bits
 *     as it does for any process without CAP_FSETID.  The directories whose
 *     names change are checked here first, on their merged attributes, as
 *     the kernel checks an overlayfs inode before the layers are touched.
 *     The one step taken with the server's identity is the owner override
 *     (nfs3_owner_override): the owner writing or truncating its own file
 *     that the kernel refused, after which the set-id bits are cleared here
 *     (nfs3_override_killpriv).
 *
 * Decisions where RFC 1813 leaves a choice (knfsd's answer unless said):
 *  - "." and "..": CREATE, MKDIR, SYMLINK, MKNOD and LINK answer
 *    NFS3ERR_EXIST (both names always exist); RMDIR and RENAME answer
 *    NFS3ERR_INVAL (rmdir(2) and rename(2) say EINVAL; the RFC lists INVAL
 *    for both); REMOVE answers NFS3ERR_ACCES (INVAL is not among REMOVE's
 *    errors in the RFC).
 *  - Attributes of a new object: the mode at creation (0 when the client
 *    sends none); uid and gid only from a root caller, dropped silently for
 *    anyone else; times, and CREATE's size, after.  SYMLINK ignores the mode:
 *    Linux symlinks are 0777.
 *  - UNCHECKED CREATE over an existing regular file applies only a size of
 *    0, which needs write permission on that file.  EXCLUSIVE keeps the
 *    verifier with the file (un_create_verf); the client sends the
 *    attributes in a SETATTR after.
 *  - WRITE: a count above the data sent is NFS3ERR_INVAL; data beyond count
 *    is ignored; count 0 succeeds without touching the file.  A write range
 *    ending beyond 2^63 - 1 is NFS3ERR_FBIG.
 *  - SETATTR of the mode of a symlink is ignored.
 *  - A sticky directory: removing, or renaming over, another's entry is
 *    NFS3ERR_PERM unless the caller owns the directory (or is root), as
 *    unlink(2) says EPERM.  Moving a directory to another parent needs write
 *    permission on it (its ".." changes), as rename(2).
 *  - LINK of a directory is NFS3ERR_ISDIR.  MKNOD of a character or block
 *    device by a caller other than root is NFS3ERR_PERM (no CAP_MKNOD);
 *    NF3REG, NF3DIR, NF3LNK and unknown types are NFS3ERR_BADTYPE.  RENAME
 *    and LINK across exports are NFS3ERR_XDEV.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "nfs.h"
#include "nfs3_util.h"

/* ---- shared steps ---- */

/* Fills the wcc of F (resolved, or cleared by a failed nfs3_call_file) into
 * the arm of the reply that status ST selects, and drops F. */
static void nfs3_file_done(struct nfs3_file *f, nfsstat3 st, wcc_data *ok_wcc,
			   wcc_data *fail_wcc)
{
	if (!f->obj)
		return;
	nfs3_wcc_changed(f, st ? fail_wcc : ok_wcc);
	nfs3_file_put(f);
}

static bool nfs3_is_dot(const char *fname)
{
	return !strcmp(fname, ".") || !strcmp(fname, "..");
}

/* What every procedure that changes entry FNAME of DIR needs of them: a
 * writable export, a directory, a valid name; "." and ".." get DOT_ERR. */
static nfsstat3 nfs3_dirop_check(const struct nfs3_file *dir, const char *fname,
				 int dot_err)
{
	nfsstat3 st = nfs3_writable(dir);

	if (!st && !S_ISDIR(dir->attr.mode))
		st = nfs3_status_from_errno(-ENOTDIR);
	if (!st)
		st = nfs3_name_check(fname);
	if (!st && nfs3_is_dot(fname))
		st = nfs3_status_from_errno(dot_err);
	return st;
}

/* Reads the attributes of entry FNAME of DIR into A; 0 or -errno. */
static int nfs3_entry_attr(const struct nfs3_file *dir, const char *fname,
			   struct un_attr *a)
{
	struct un_obj *o;
	int err;

	err = un_lookup(dir->ex->ux, dir->obj, fname, &o);
	if (err)
		return err;
	err = un_getattr(dir->ex->ux, o, a);
	un_obj_put(o);
	return err;
}

/* True if the sticky bit of DIR keeps REQ's caller from removing or
 * replacing its entries it does not own (it may remove its own). */
static bool nfs3_sticky_applies(const struct srv_req *req, const struct nfs3_file *dir)
{
	return (dir->attr.mode & S_ISVTX) && req->rpc->cred.uid != 0 &&
	       req->rpc->cred.uid != dir->attr.uid;
}

/* What removing entry FNAME from DIR needs: DELETE on the directory and, in a
 * sticky directory, owning the entry. */
static nfsstat3 nfs3_delete_check(const struct srv_req *req, const struct nfs3_file *dir,
				  const char *fname)
{
	nfsstat3 st = nfs3_access_check(req, dir, ACCESS3_DELETE);
	struct un_attr a;
	int err;

	if (st || !nfs3_sticky_applies(req, dir))
		return st;
	err = nfs3_entry_attr(dir, fname, &a);
	if (!err && a.uid != req->rpc->cred.uid)
		err = -EPERM;
	return nfs3_status_from_errno(err);
}

/* ---- SETATTR ---- */

static bool nfs3_sattr_any(const struct un_sattr *sa)
{
	return sa->set_mode || sa->set_uid || sa->set_gid || sa->set_size ||
	       sa->set_atime || sa->set_mtime;
}

/* RFC 1813: with guard.check, the change happens only if the object's ctime
 * is still the one the client names. */
static bool nfs3_guard_ok(const sattrguard3 *g, const struct un_attr *a)
{
	fattr3 now;

	if (!g->check)
		return true;
	nfs3_fattr(a, &now);
	return now.ctime.seconds == g->sattrguard3_u.obj_ctime.seconds &&
	       now.ctime.nseconds == g->sattrguard3_u.obj_ctime.nseconds;
}

/* Everything SETATTR checks before the engine changes F as SA says (the
 * caller's permission is the engine's and the kernel's to check). */
static nfsstat3 nfs3_setattr_check(const struct nfs3_file *f, const SETATTR3args *args,
				   struct un_sattr *sa)
{
	if (S_ISLNK(f->attr.mode))
		sa->set_mode = false; /* Linux symlinks have no mode of their own */
	if (sa->set_size && S_ISDIR(f->attr.mode))
		return nfs3_status_from_errno(-EISDIR);
	if (sa->set_size && !S_ISREG(f->attr.mode))
		return nfs3_status_from_errno(-EINVAL);
	if (!nfs3_guard_ok(&args->guard, &f->attr))
		return NFS3ERR_NOT_SYNC;
	return NFS3_OK;
}

/* After the owner override wrote to or truncated F as the server (which
 * keeps set-id bits), clears them as the kernel would have for the caller.
 * The data is changed whether this succeeds or not, so a failure is only
 * logged. */
static void nfs3_override_killpriv(const struct srv_req *req, struct nfs3_file *f)
{
	struct un_sattr sa = {.set_mode = true};
	int err;

	sa.mode = nfs3_mode_killpriv(f->attr.mode);
	if (sa.mode == (f->attr.mode & 07777))
		return;
	err = un_setattr(&req->un, f->ex->ux, f->obj, &sa);
	if (err)
		RPC_LOG_LIMITED(RPC_LOG_WARN,
				"nfs3: clearing set-id bits of node %llu: %s",
				(unsigned long long)un_obj_id(f->obj), strerror(-err));
}

/* un_setattr as the caller; a truncation the kernel refused to the owner
 * goes through with the server's identity when it changes nothing the
 * server's identity would let pass beyond it (owner, group or mode). */
static int nfs3_setattr_as(const struct srv_req *req, struct nfs3_file *f,
			   const struct un_sattr *sa)
{
	struct srv_ident saved;
	int err = un_setattr(&req->un, f->ex->ux, f->obj, sa);

	if (err != -EACCES || !sa->set_size || sa->set_uid || sa->set_gid ||
	    sa->set_mode || !nfs3_owner_override(req, f))
		return err;
	srv_ident_server(&saved);
	err = un_setattr(&req->un, f->ex->ux, f->obj, sa);
	srv_ident_leave(&saved);
	if (!err)
		nfs3_override_killpriv(req, f);
	return err;
}

void nfs3_setattr(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	SETATTR3args *args = argp;
	SETATTR3res *res = resp;
	struct nfs3_file f;
	struct un_sattr sa;
	nfsstat3 st;

	st = nfs3_call_file(req, &f);
	if (!st)
		st = nfs3_writable(&f);
	if (!st)
		st = nfs3_sattr_get(&args->new_attributes, &sa);
	if (!st)
		st = nfs3_setattr_check(&f, args, &sa);
	/* Nothing to set is a success that changes nothing (and copies
	 * nothing up). */
	if (!st && nfs3_sattr_any(&sa))
		st = nfs3_status_from_errno(nfs3_setattr_as(req, &f, &sa));
	nfs3_file_done(&f, st, &res->SETATTR3res_u.resok.obj_wcc,
		       &res->SETATTR3res_u.resfail.obj_wcc);
	res->status = st;
}

/* ---- WRITE, COMMIT ---- */

/* WRITE's arguments that are wrong whatever the file (design notes). */
static nfsstat3 nfs3_write_args_check(const WRITE3args *args)
{
	if (args->count > args->data.data_len)
		return nfs3_status_from_errno(-EINVAL);
	if ((unsigned)args->stable > FILE_SYNC)
		return nfs3_status_from_errno(-EINVAL);
	if (args->offset > (uint64_t)INT64_MAX - args->count)
		return nfs3_status_from_errno(-EFBIG);
	return NFS3_OK;
}

static stable_how nfs3_stable_how(enum un_stable s)
{
	switch (s) {
	case UN_UNSTABLE:
		return UNSTABLE;
	case UN_DATA_SYNC:
		return DATA_SYNC;
	case UN_FILE_SYNC:
		break;
	}
	return FILE_SYNC;
}

static enum un_stable nfs3_un_stable(stable_how s)
{
	return s == UNSTABLE ? UN_UNSTABLE : s == DATA_SYNC ? UN_DATA_SYNC : UN_FILE_SYNC;
}

/* TEST ONLY (nfs3_test_lazy_stable): stable WRITEs are written UNSTABLE and
 * answered as asked, a reply sent before the sync it promises. */
static atomic_bool lazy_stable;

void nfs3_test_lazy_stable(bool on)
{
	atomic_store(&lazy_stable, on);
}

/* un_write of ARGS' data as the caller, or as the server where the owner
 * override applies. */
static ssize_t nfs3_write_as(const struct srv_req *req, struct nfs3_file *f,
			     const WRITE3args *args, enum un_stable *committed)
{
	enum un_stable how = atomic_load_explicit(&lazy_stable, memory_order_relaxed)
				 ? UN_UNSTABLE
				 : nfs3_un_stable(args->stable);
	struct srv_ident saved;
	ssize_t n = un_write(f->ex->ux, f->obj, args->data.data_val, args->count,
			     args->offset, how, committed);

	if (n != -EACCES || !nfs3_owner_override(req, f))
		return n;
	srv_ident_server(&saved);
	n = un_write(f->ex->ux, f->obj, args->data.data_val, args->count, args->offset,
		     how, committed);
	srv_ident_leave(&saved);
	if (n >= 0)
		nfs3_override_killpriv(req, f);
	return n;
}

/* Writes ARGS' data to F and fills OK's count, committed and verifier. */
static nfsstat3 nfs3_write_data(struct srv_req *req, struct nfs3_file *f,
				const WRITE3args *args, WRITE3resok *ok)
{
	/* Nothing written is nothing volatile. */
	enum un_stable committed = UN_FILE_SYNC;
	ssize_t n = 0;

	if (args->count) {
		n = nfs3_write_as(req, f, args, &committed);
		if (n < 0)
			return nfs3_status_from_errno((int)n);
		if (atomic_load_explicit(&lazy_stable, memory_order_relaxed) &&
		    committed < nfs3_un_stable(args->stable))
			committed = nfs3_un_stable(args->stable); /* the lie */
		assert(committed >= nfs3_un_stable(args->stable) &&
		       (size_t)n <= args->count);
	}
	ok->count = (count3)n;
	req->bytes_written = (uint64_t)n;
	ok->committed = nfs3_stable_how(committed);
	memcpy(ok->verf, req->srv->write_verf, NFS3_WRITEVERFSIZE);
	return NFS3_OK;
}

void nfs3_write(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	WRITE3args *args = argp;
	WRITE3res *res = resp;
	WRITE3resok *ok = &res->WRITE3res_u.resok;
	struct nfs3_file f;
	nfsstat3 st;

	st = nfs3_call_file(req, &f);
	if (!st)
		st = nfs3_writable(&f);
	if (!st)
		st = nfs3_write_args_check(args);
	if (!st)
		st = nfs3_data_check(&f);
	if (!st)
		st = nfs3_write_data(req, &f, args, ok);
	nfs3_file_done(&f, st, &ok->file_wcc, &res->WRITE3res_u.resfail.file_wcc);
	res->status = st;
}

void nfs3_commit(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	COMMIT3res *res = resp;
	COMMIT3resok *ok = &res->COMMIT3res_u.resok;
	struct nfs3_file f;
	nfsstat3 st;

	(void)argp;
	/* The whole file is made durable whatever offset and count say: the
	 * RFC allows flushing more than asked. */
	st = nfs3_call_file(req, &f);
	if (!st)
		st = nfs3_data_check(&f);
	if (!st)
		st = nfs3_status_from_errno(un_commit(f.ex->ux, f.obj));
	if (!st)
		memcpy(ok->verf, req->srv->write_verf, NFS3_WRITEVERFSIZE);
	nfs3_file_done(&f, st, &ok->file_wcc, &res->COMMIT3res_u.resfail.file_wcc);
	res->status = st;
}

/* ---- CREATE, MKDIR, SYMLINK, MKNOD ---- */

/* One object to make: its type, what the type needs, and its attributes. */
struct nfs3_new {
	mode_t type;	       /* S_IFREG, S_IFDIR, S_IFLNK, S_IFCHR, ... */
	const char *target;    /* S_IFLNK */
	uint32_t major, minor; /* S_IFCHR, S_IFBLK */
	mode_t mode;	       /* permission bits, at creation */
	struct un_sattr sa;    /* the rest, applied after creation */
};

/* Where a creating procedure's reply puts things: CREATE3res, MKDIR3res,
 * SYMLINK3res and MKNOD3res have one shape under four names. */
struct nfs3_new_res {
	nfsstat3 *status;
	post_op_fh3 *obj;
	post_op_attr *obj_attributes;
	wcc_data *ok_wcc, *fail_wcc;
};

#define NFS3_NEW_RES(res, T)                                                             \
	{                                                                                \
		.status = &(res)->status, .obj = &(res)->T##res_u.resok.obj,             \
		.obj_attributes = &(res)->T##res_u.resok.obj_attributes,                 \
		.ok_wcc = &(res)->T##res_u.resok.dir_wcc,                                \
		.fail_wcc = &(res)->T##res_u.resfail.dir_wcc,                            \
	}

/* Resolves the directory of WHERE and checks that REQ's caller may add an
 * entry to it.  On failure DIR may still hold the directory (for its wcc). */
static nfsstat3 nfs3_new_begin(struct srv_req *req, const diropargs3 *where,
			       struct nfs3_file *dir)
{
	nfsstat3 st = nfs3_call_file(req, dir);

	if (!st)
		st = nfs3_dirop_check(dir, where->name, -EEXIST);
	if (!st)
		st = nfs3_access_check(req, dir, ACCESS3_MODIFY | ACCESS3_EXTEND);
	return st;
}

/* Splits the client's attributes SA for a new object into N's mode and the
 * rest (design notes: uid and gid from root only; a size only for a regular
 * file). */
static nfsstat3 nfs3_new_attrs(const struct srv_req *req, const sattr3 *sa,
			       struct nfs3_new *n)
{
	nfsstat3 st = nfs3_sattr_get(sa, &n->sa);

	if (st)
		return st;
	n->mode = n->sa.set_mode ? n->sa.mode : 0;
	n->sa.set_mode = false;
	if (req->rpc->cred.uid != 0)
		n->sa.set_uid = n->sa.set_gid = false;
	if (n->type != S_IFREG)
		n->sa.set_size = false;
	return NFS3_OK;
}

/* Fills the handle and attributes of OBJ, just made in DIR's export.  A part
 * that cannot be had is left out, as the RFC allows: the client then looks
 * the name up. */
static void nfs3_new_obj(struct srv_req *req, const struct nfs3_file *dir,
			 struct un_obj *obj, const struct nfs3_new_res *r)
{
	struct un_attr a;

	if (!nfs3_fh_set(req, dir->ex, un_obj_id(obj), &r->obj->post_op_fh3_u.handle))
		r->obj->handle_follows = TRUE;
	if (!un_getattr(dir->ex->ux, obj, &a))
		nfs3_post_op(&a, r->obj_attributes);
}

/* Fills a creating procedure's reply R for status ST and drops DIR and OBJ
 * (either may be unset). */
static void nfs3_new_reply(struct srv_req *req, struct nfs3_file *dir, struct un_obj *obj,
			   nfsstat3 st, const struct nfs3_new_res *r)
{
	if (!st)
		nfs3_new_obj(req, dir, obj, r);
	nfs3_file_done(dir, st, r->ok_wcc, r->fail_wcc);
	if (obj)
		un_obj_put(obj);
	*r->status = st;
}

static int nfs3_new_make(const struct un_ctx *cx, struct nfs3_file *dir,
			 const char *fname, const struct nfs3_new *n, struct un_obj **out)
{
	switch (n->type) {
	case S_IFDIR:
		return un_mkdir(cx, dir->ex->ux, dir->obj, fname, n->mode, out);
	case S_IFLNK:
		return un_symlink(cx, dir->ex->ux, dir->obj, fname, n->target, out);
	default:
		return un_mknod(cx, dir->ex->ux, dir->obj, fname, n->type | n->mode,
				n->major, n->minor, out);
	}
}

/* Makes N as FNAME in DIR, then applies the rest of its attributes (the
 * caller's uid and gid only from root: nfs3_new_attrs).  *OUT is set when
 * the object was made, even if its attributes then failed. */
static nfsstat3 nfs3_new_node(const struct srv_req *req, struct nfs3_file *dir,
			      const char *fname, const struct nfs3_new *n,
			      struct un_obj **out)
{
	int err;

	err = nfs3_new_make(&req->un, dir, fname, n, out);
	if (!err && nfs3_sattr_any(&n->sa))
		err = un_setattr(&req->un, dir->ex->ux, *out, &n->sa);
	return nfs3_status_from_errno(err);
}

/* CREATE's work in DIR, once the directory passed nfs3_new_begin. */
static nfsstat3 nfs3_create_file(const struct srv_req *req, struct nfs3_file *dir,
				 const CREATE3args *args, struct un_obj **out)
{
	const char *fname = args->where.name;
	struct nfs3_new n = {.type = S_IFREG};
	nfsstat3 st;

	if (args->how.mode == EXCLUSIVE)
		return nfs3_status_from_errno(
		    un_create_verf(&req->un, dir->ex->ux, dir->obj, fname,
				   (const uint8_t *)args->how.createhow3_u.verf, out));
	if (args->how.mode != UNCHECKED && args->how.mode != GUARDED)
		return nfs3_status_from_errno(-EINVAL);
	st = nfs3_new_attrs(req, &args->how.createhow3_u.obj_attributes, &n);
	if (st)
		return st;
	/* UNCHECKED over an existing file truncates it as the caller: the
	 * kernel checks the write permission. */
	return nfs3_status_from_errno(un_create(&req->un, dir->ex->ux, dir->obj, fname,
						n.mode, args->how.mode == GUARDED, &n.sa,
						out));
}

void nfs3_create(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	CREATE3args *args = argp;
	CREATE3res *res = resp;
	const struct nfs3_new_res r = NFS3_NEW_RES(res, CREATE3);
	struct un_obj *obj = NULL;
	struct nfs3_file dir;
	nfsstat3 st;

	st = nfs3_new_begin(req, &args->where, &dir);
	if (!st)
		st = nfs3_create_file(req, &dir, args, &obj);
	nfs3_new_reply(req, &dir, obj, st, &r);
}

void nfs3_mkdir(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	MKDIR3args *args = argp;
	MKDIR3res *res = resp;
	const struct nfs3_new_res r = NFS3_NEW_RES(res, MKDIR3);
	struct nfs3_new n = {.type = S_IFDIR};
	struct un_obj *obj = NULL;
	struct nfs3_file dir;
	nfsstat3 st;

	st = nfs3_new_begin(req, &args->where, &dir);
	if (!st)
		st = nfs3_new_attrs(req, &args->attributes, &n);
	if (!st)
		st = nfs3_new_node(req, &dir, args->where.name, &n, &obj);
	nfs3_new_reply(req, &dir, obj, st, &r);
}

void nfs3_symlink(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	SYMLINK3args *args = argp;
	SYMLINK3res *res = resp;
	const struct nfs3_new_res r = NFS3_NEW_RES(res, SYMLINK3);
	struct nfs3_new n = {.type = S_IFLNK, .target = args->symlink.symlink_data};
	struct un_obj *obj = NULL;
	struct nfs3_file dir;
	nfsstat3 st;

	st = nfs3_new_begin(req, &args->where, &dir);
	/* symlink(2) refuses an empty target with ENOENT. */
	if (!st && (!n.target || !n.target[0]))
		st = nfs3_status_from_errno(-ENOENT);
	if (!st)
		st = nfs3_new_attrs(req, &args->symlink.symlink_attributes, &n);
	if (!st)
		st = nfs3_new_node(req, &dir, args->where.name, &n, &obj);
	nfs3_new_reply(req, &dir, obj, st, &r);
}

/* MKNOD's type and attributes into N: NFS3ERR_BADTYPE for what MKNOD does
 * not make, NFS3ERR_PERM for a device from a caller other than root. */
static nfsstat3 nfs3_mknod_what(const struct srv_req *req, const mknoddata3 *what,
				struct nfs3_new *n)
{
	const sattr3 *sa;

	switch (what->type) {
	case NF3CHR:
	case NF3BLK:
		if (req->rpc->cred.uid != 0)
			return nfs3_status_from_errno(-EPERM);
		n->type = what->type == NF3CHR ? S_IFCHR : S_IFBLK;
		n->major = what->mknoddata3_u.device.spec.specdata1;
		n->minor = what->mknoddata3_u.device.spec.specdata2;
		sa = &what->mknoddata3_u.device.dev_attributes;
		break;
	case NF3FIFO:
	case NF3SOCK:
		n->type = what->type == NF3FIFO ? S_IFIFO : S_IFSOCK;
		sa = &what->mknoddata3_u.pipe_attributes;
		break;
	default:
		return NFS3ERR_BADTYPE;
	}
	return nfs3_new_attrs(req, sa, n);
}

void nfs3_mknod(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	MKNOD3args *args = argp;
	MKNOD3res *res = resp;
	const struct nfs3_new_res r = NFS3_NEW_RES(res, MKNOD3);
	struct nfs3_new n = {0};
	struct un_obj *obj = NULL;
	struct nfs3_file dir;
	nfsstat3 st;

	st = nfs3_new_begin(req, &args->where, &dir);
	if (!st)
		st = nfs3_mknod_what(req, &args->what, &n);
	if (!st)
		st = nfs3_new_node(req, &dir, args->where.name, &n, &obj);
	nfs3_new_reply(req, &dir, obj, st, &r);
}

/* ---- REMOVE, RMDIR ---- */

/* REMOVE and RMDIR: the same checks, with DOT_ERR for "." and ".."
 * (nfs3_dirop_check), then DEL of WHAT's name; the directory's wcc data to
 * OK or FAIL. */
static nfsstat3 nfs3_delete(struct srv_req *req, const diropargs3 *what, int dot_err,
			    int (*del)(const struct un_ctx *, struct un_export *,
				       struct un_obj *, const char *),
			    wcc_data *ok, wcc_data *fail)
{
	struct nfs3_file dir;
	nfsstat3 st;

	st = nfs3_call_file(req, &dir);
	if (!st)
		st = nfs3_dirop_check(&dir, what->name, dot_err);
	if (!st)
		st = nfs3_delete_check(req, &dir, what->name);
	if (!st)
		st = nfs3_status_from_errno(
		    del(&req->un, dir.ex->ux, dir.obj, what->name));
	nfs3_file_done(&dir, st, ok, fail);
	return st;
}

void nfs3_remove(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	REMOVE3args *args = argp;
	REMOVE3res *res = resp;

	res->status = nfs3_delete(req, &args->object, -EACCES, un_remove,
				  &res->REMOVE3res_u.resok.dir_wcc,
				  &res->REMOVE3res_u.resfail.dir_wcc);
}

void nfs3_rmdir(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	RMDIR3args *args = argp;
	RMDIR3res *res = resp;

	res->status = nfs3_delete(req, &args->object, -EINVAL, un_rmdir,
				  &res->RMDIR3res_u.resok.dir_wcc,
				  &res->RMDIR3res_u.resfail.dir_wcc);
}

/* ---- RENAME, LINK ---- */

/* What moving entry FNAME of FROM to TNAME in TO needs beyond the
 * directories' DELETE and EXTEND: the sticky rules for the entry and for
 * what it replaces, and write permission on a directory that changes
 * parent.  Root passes them all, and is spared the lookups. */
static nfsstat3 nfs3_rename_entries_check(const struct srv_req *req,
					  const struct nfs3_file *from, const char *fname,
					  const struct nfs3_file *to, const char *tname)
{
	struct un_attr a;
	int err;

	if (req->rpc->cred.uid == 0)
		return NFS3_OK;
	err = nfs3_entry_attr(from, fname, &a);
	if (!err && nfs3_sticky_applies(req, from) && a.uid != req->rpc->cred.uid)
		err = -EPERM;
	if (!err && S_ISDIR(a.mode) && un_obj_id(from->obj) != un_obj_id(to->obj) &&
	    !(nfs3_access_mask(&req->rpc->cred, &a, true) & ACCESS3_MODIFY))
		err = -EACCES;
	if (err || !nfs3_sticky_applies(req, to))
		return nfs3_status_from_errno(err);
	err = nfs3_entry_attr(to, tname, &a);
	if (err == -ENOENT)
		return NFS3_OK; /* nothing replaced */
	if (!err && a.uid != req->rpc->cred.uid)
		err = -EPERM;
	return nfs3_status_from_errno(err);
}

static nfsstat3 nfs3_rename_check(const struct srv_req *req, const RENAME3args *args,
				  const struct nfs3_file *from,
				  const struct nfs3_file *to)
{
	nfsstat3 st = nfs3_dirop_check(from, args->from.name, -EINVAL);

	if (!st)
		st = nfs3_dirop_check(to, args->to.name, -EINVAL);
	if (!st && from->ex != to->ex)
		st = nfs3_status_from_errno(-EXDEV);
	if (!st)
		st = nfs3_access_check(req, from, ACCESS3_DELETE);
	if (!st)
		st = nfs3_access_check(req, to, ACCESS3_EXTEND | ACCESS3_DELETE);
	if (!st)
		st = nfs3_rename_entries_check(req, from, args->from.name, to,
					       args->to.name);
	return st;
}

void nfs3_rename(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	RENAME3args *args = argp;
	RENAME3res *res = resp;
	RENAME3resok *ok = &res->RENAME3res_u.resok;
	RENAME3resfail *fail = &res->RENAME3res_u.resfail;
	struct nfs3_file from, to = {0};
	nfsstat3 st;

	/* Both handles first: each directory gets its wcc on any later
	 * failure. */
	st = nfs3_call_file(req, &from);
	if (!st)
		st = nfs3_file_get(req, &args->to.dir, &to);
	if (!st)
		st = nfs3_rename_check(req, args, &from, &to);
	if (!st)
		st = nfs3_status_from_errno(un_rename(&req->un, from.ex->ux, from.obj,
						      args->from.name, to.obj,
						      args->to.name));
	nfs3_file_done(&from, st, &ok->fromdir_wcc, &fail->fromdir_wcc);
	nfs3_file_done(&to, st, &ok->todir_wcc, &fail->todir_wcc);
	res->status = st;
}

static nfsstat3 nfs3_link_check(const struct srv_req *req, const struct nfs3_file *file,
				const struct nfs3_file *dir, const char *fname)
{
	nfsstat3 st = nfs3_dirop_check(dir, fname, -EEXIST);

	if (!st && file->ex != dir->ex)
		st = nfs3_status_from_errno(-EXDEV);
	if (!st && S_ISDIR(file->attr.mode))
		st = nfs3_status_from_errno(-EISDIR);
	if (!st)
		st = nfs3_access_check(req, dir, ACCESS3_MODIFY | ACCESS3_EXTEND);
	return st;
}

void nfs3_link(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	LINK3args *args = argp;
	LINK3res *res = resp;
	LINK3resok *ok = &res->LINK3res_u.resok;
	LINK3resfail *fail = &res->LINK3res_u.resfail;
	struct nfs3_file file, dir = {0};
	nfsstat3 st;

	st = nfs3_call_file(req, &file);
	if (!st)
		st = nfs3_file_get(req, &args->link.dir, &dir);
	if (!st)
		st = nfs3_link_check(req, &file, &dir, args->link.name);
	if (!st)
		st = nfs3_status_from_errno(
		    un_link(&req->un, dir.ex->ux, file.obj, dir.obj, args->link.name));
	if (file.obj) {
		/* The file changed too (its link count, maybe a copy-up). */
		if (nfs3_file_refresh(&file))
			nfs3_post_op(&file.attr,
				     st ? &fail->file_attributes : &ok->file_attributes);
		nfs3_file_put(&file);
	}
	nfs3_file_done(&dir, st, &ok->linkdir_wcc, &fail->linkdir_wcc);
	res->status = st;
}
