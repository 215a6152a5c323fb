/* SPDX-License-Identifier: Apache-2.0 */
/* nfs3_util.c - file handles, attributes, names and permissions for the
 * NFSv3 handlers (see nfs3_util.h for the contracts). */
#include "nfs3_util.h"

#define _GNU_SOURCE /* UTIME_NOW */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

/* Object ID of export EX into F, with the engine's shared object when VIEW:
 * what resolving a handle does once its export is found. */
static nfsstat3 file_in(struct srv_req *req, struct srv_export *ex, un_id id, bool view,
			struct nfs3_file *f)
{
	int err;

	f->ex = ex;
	err =
	    view ? un_resolve_view(ex->ux, id, &f->obj) : un_resolve(ex->ux, id, &f->obj);
	if (err)
		goto fail;
	err = un_getattr(ex->ux, f->obj, &f->attr);
	if (err)
		goto fail_put;
	f->client_ro = req->client && !req->client->rw;
	return NFS3_OK;

fail_put:
	un_obj_put(f->obj);
fail:
	memset(f, 0, sizeof(*f));
	return nfs3_status_from_errno(err);
}

/* nfs3_file_get, with the engine's shared object when VIEW. */
static nfsstat3 nfs3_file_resolve(struct srv_req *req, const nfs_fh3 *fh, bool view,
				  struct nfs3_file *f)
{
	struct srv_export *ex;
	uint32_t export_id;
	un_id id;
	int err;

	memset(f, 0, sizeof(*f));
	err = un_handle_decode(req->srv->state, (const uint8_t *)fh->data.data_val,
			       fh->data.data_len, &export_id, &id);
	if (err)
		return nfs3_status_from_errno(err);
	/* A well-formed handle of an export we no longer serve is stale, not
	 * bad: the client held it legitimately. */
	ex = srv_export_for_handle(req, export_id);
	if (!ex) /* held by another server: the client retries (unions.c rule 13) */
		return req->union_err == -EAGAIN ? NFS3ERR_JUKEBOX : NFS3ERR_STALE;
	return file_in(req, ex, id, view, f);
}

nfsstat3 nfs3_file_get(struct srv_req *req, const nfs_fh3 *fh, struct nfs3_file *f)
{
	return nfs3_file_resolve(req, fh, false, f);
}

nfsstat3 nfs3_file_view(struct srv_req *req, const nfs_fh3 *fh, struct nfs3_file *f)
{
	return nfs3_file_resolve(req, fh, true, f);
}

/* nfs3_call_file, with the engine's shared object when VIEW. */
static nfsstat3 call_file(struct srv_req *req, bool view, struct nfs3_file *f)
{
	/* every procedure whose handler asks names its handle (has_fh) */
	assert(req->fh.seen);
	memset(f, 0, sizeof(*f));
	if (!req->ex)
		return nfs3_status_from_errno(req->fh.err ? req->fh.err : -ESTALE);
	return file_in(req, req->ex, req->fh.id, view, f);
}

nfsstat3 nfs3_call_file(struct srv_req *req, struct nfs3_file *f)
{
	return call_file(req, false, f);
}

nfsstat3 nfs3_call_file_view(struct srv_req *req, struct nfs3_file *f)
{
	return call_file(req, true, f);
}

/* No look for a vanished upper here: every LOOKUP and ACCESS asks this,
 * and that look costs two fstat calls; a change asks it (nfs3_writable). */
bool nfs3_file_writable(const struct nfs3_file *f)
{
	return un_export_writable(f->ex->ux) && !f->client_ro &&
	       !(f->obj && un_obj_retired(f->obj));
}

void nfs3_file_put(struct nfs3_file *f)
{
	if (f->obj)
		un_obj_put(f->obj);
	f->obj = NULL;
}

bool nfs3_file_refresh(struct nfs3_file *f)
{
	struct un_attr a;

	if (un_getattr(f->ex->ux, f->obj, &a))
		return false;
	f->attr = a;
	return true;
}

nfsstat3 nfs3_fh_set(struct srv_req *req, const struct srv_export *ex, un_id id,
		     nfs_fh3 *fh)
{
	uint8_t buf[UN_FH_MAX];
	size_t len;
	char *data;

	len = un_handle_encode(ex->ux, id, buf);
	assert(len > 0 && len <= NFS3_FHSIZE);
	data = rpc_arena_alloc(req->rpc->arena, len);
	if (!data)
		return nfs3_status_from_errno(-ENOMEM);
	memcpy(data, buf, len);
	fh->data.data_len = (u_int)len;
	fh->data.data_val = data;
	return NFS3_OK;
}

static ftype3 nfs3_ftype(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return NF3DIR;
	case S_IFBLK:
		return NF3BLK;
	case S_IFCHR:
		return NF3CHR;
	case S_IFLNK:
		return NF3LNK;
	case S_IFSOCK:
		return NF3SOCK;
	case S_IFIFO:
		return NF3FIFO;
	default:
		return NF3REG;
	}
}

static nfstime3 nfs3_time(const struct timespec *ts)
{
	/* NFSv3 times are unsigned 32-bit seconds: wraps in 2106, and times
	 * before 1970 wrap too; every NFSv3 server shares this. */
	nfstime3 t = {.seconds = (uint32)ts->tv_sec, .nseconds = (uint32)ts->tv_nsec};
	return t;
}

void nfs3_fattr(const struct un_attr *a, fattr3 *out)
{
	out->type = nfs3_ftype(a->mode);
	out->mode = a->mode & 07777;
	out->nlink = a->nlink;
	out->uid = a->uid;
	out->gid = a->gid;
	out->size = a->size;
	out->used = a->used;
	out->rdev.specdata1 = a->rdev_major;
	out->rdev.specdata2 = a->rdev_minor;
	out->fsid = a->fsid;
	out->fileid = a->fileid;
	out->atime = nfs3_time(&a->atime);
	out->mtime = nfs3_time(&a->mtime);
	out->ctime = nfs3_time(&a->ctime);
}

void nfs3_post_op(const struct un_attr *a, post_op_attr *out)
{
	out->attributes_follow = TRUE;
	nfs3_fattr(a, &out->post_op_attr_u.attributes);
}

void nfs3_wcc(const struct un_attr *before, const struct un_attr *after, wcc_data *out)
{
	wcc_attr *w = &out->before.pre_op_attr_u.attributes;

	out->before.attributes_follow = TRUE;
	w->size = before->size;
	w->mtime = nfs3_time(&before->mtime);
	w->ctime = nfs3_time(&before->ctime);
	nfs3_post_op(after, &out->after);
}

size_t nfs3_post_op_xdr_size(const post_op_attr *p)
{
	return NFS3_XDR_UNIT + (p->attributes_follow ? NFS3_XDR_FATTR3 : 0);
}

nfsstat3 nfs3_name_check(const char *fname)
{
	size_t len;

	/* A name holding a NUL never gets here: its call fails to decode
	 * (nfs3_xdr_string, rpc/nfs3_prot.x).  '/' would make the name a
	 * path. */
	if (!fname || !fname[0] || strchr(fname, '/'))
		return nfs3_status_from_errno(-EACCES);
	len = strnlen(fname, NFS3_NAME_MAX + 1);
	if (len > NFS3_NAME_MAX)
		return nfs3_status_from_errno(-ENAMETOOLONG);
	return NFS3_OK;
}

static bool nfs3_cred_in_group(const struct rpc_cred *c, gid_t gid)
{
	if (c->gid == gid)
		return true;
	for (uint32_t i = 0;
	     i < c->ngroups && i < sizeof(c->groups) / sizeof(c->groups[0]); i++)
		if (c->groups[i] == gid)
			return true;
	return false;
}

/* The rwx bits (4 = r, 2 = w, 1 = x) that apply to CRED on A. */
static unsigned nfs3_rwx(const struct rpc_cred *c, const struct un_attr *a)
{
	unsigned rwx;

	if (c->uid == 0) {
		/* Root passes every check, except that it cannot execute a
		 * file nobody may execute (as the kernel's own rule). */
		rwx = 6;
		if (S_ISDIR(a->mode) || (a->mode & 0111))
			rwx |= 1;
		return rwx;
	}
	/* The owner gets its mode bits and no more: the owner override
	 * (nfs3_owner_override) is READ's and WRITE's, not ACCESS's, so that a
	 * client refuses a new open of a 0277 file for reading (knfsd asks
	 * the same without NFSD_MAY_OWNER_OVERRIDE in nfsd_access). */
	if (c->uid == a->uid)
		return (a->mode >> 6) & 7;
	if (nfs3_cred_in_group(c, a->gid))
		return (a->mode >> 3) & 7;
	return a->mode & 7;
}

uint32_t nfs3_access_mask(const struct rpc_cred *cred, const struct un_attr *a,
			  bool writable)
{
	unsigned rwx = nfs3_rwx(cred, a);
	uint32_t m = 0;

	if (rwx & 4)
		m |= ACCESS3_READ;
	if (S_ISDIR(a->mode)) {
		/* RFC 1813: LOOKUP is searching the directory; MODIFY,
		 * EXTEND and DELETE change its entries, which needs both
		 * write and search.  EXECUTE means nothing for a directory. */
		if (rwx & 1)
			m |= ACCESS3_LOOKUP;
		if ((rwx & 3) == 3)
			m |= ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE;
	} else {
		/* DELETE and LOOKUP mean nothing for a non-directory;
		 * executing is only for regular files. */
		if (rwx & 2)
			m |= ACCESS3_MODIFY | ACCESS3_EXTEND;
		if (S_ISREG(a->mode) && (rwx & 1))
			m |= ACCESS3_EXECUTE;
	}
	if (!writable)
		m &= ~(uint32_t)(ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE);
	return m;
}

nfsstat3 nfs3_access_check(const struct srv_req *req, const struct nfs3_file *f,
			   uint32_t want)
{
	uint32_t have =
	    nfs3_access_mask(&req->rpc->cred, &f->attr, nfs3_file_writable(f));

	if ((have & want) != want)
		return nfs3_status_from_errno(-EACCES);
	return NFS3_OK;
}

nfsstat3 nfs3_writable(const struct nfs3_file *f)
{
	/* (only a change asks whether the upper vanished: two fstat calls) */
	return nfs3_file_writable(f) && !srv_export_gone(f->ex)
		   ? NFS3_OK
		   : nfs3_status_from_errno(-EROFS);
}

nfsstat3 nfs3_data_check(const struct nfs3_file *f)
{
	nfsstat3 st = nfs3_writable(f);

	if (st)
		return st;
	if (S_ISDIR(f->attr.mode))
		return nfs3_status_from_errno(-EISDIR);
	if (!S_ISREG(f->attr.mode))
		return nfs3_status_from_errno(-EINVAL);
	return NFS3_OK;
}

bool nfs3_owner_override(const struct srv_req *req, const struct nfs3_file *f)
{
	return S_ISREG(f->attr.mode) && req->rpc->cred.uid == f->attr.uid;
}

void nfs3_wcc_changed(struct nfs3_file *f, wcc_data *out)
{
	struct un_attr before = f->attr;

	nfs3_wcc(&before, &before, out);
	if (nfs3_file_refresh(f))
		nfs3_post_op(&f->attr, &out->after);
	else
		out->after.attributes_follow = FALSE;
}

/* One time of a sattr3: HOW and the client's time T into *SET and *OUT. */
static nfsstat3 nfs3_sattr_time(time_how how, const nfstime3 *t, bool *set,
				struct timespec *out)
{
	switch (how) {
	case DONT_CHANGE:
		return NFS3_OK;
	case SET_TO_SERVER_TIME:
		*set = true;
		out->tv_sec = 0;
		out->tv_nsec = UTIME_NOW;
		return NFS3_OK;
	case SET_TO_CLIENT_TIME:
		if (t->nseconds >= 1000000000u)
			return nfs3_status_from_errno(-EINVAL);
		*set = true;
		/* Unsigned 32-bit seconds, as nfs3_time sends them. */
		out->tv_sec = (time_t)t->seconds;
		out->tv_nsec = (long)t->nseconds;
		return NFS3_OK;
	}
	return nfs3_status_from_errno(-EINVAL);
}

nfsstat3 nfs3_sattr_get(const sattr3 *sa, struct un_sattr *out)
{
	nfsstat3 st;

	memset(out, 0, sizeof(*out));
	if (sa->mode.set_it) {
		out->set_mode = true;
		out->mode = sa->mode.set_mode3_u.mode & 07777;
	}
	if (sa->uid.set_it) {
		out->set_uid = true;
		out->uid = sa->uid.set_uid3_u.uid;
	}
	if (sa->gid.set_it) {
		out->set_gid = true;
		out->gid = sa->gid.set_gid3_u.gid;
	}
	if (sa->size.set_it) {
		out->set_size = true;
		out->size = sa->size.set_size3_u.size;
	}
	st = nfs3_sattr_time(sa->atime.set_it, &sa->atime.set_atime_u.atime,
			     &out->set_atime, &out->atime);
	if (!st)
		st = nfs3_sattr_time(sa->mtime.set_it, &sa->mtime.set_mtime_u.mtime,
				     &out->set_mtime, &out->mtime);
	return st;
}

mode_t nfs3_mode_killpriv(mode_t mode)
{
	mode &= 07777;
	/* Set-group-id without group execute marks mandatory locking, not a
	 * privilege: the kernel keeps it, and so do we. */
	if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))
		mode &= ~(mode_t)S_ISGID;
	return mode & ~(mode_t)S_ISUID;
}

/* ---- the access check (srv_req's contract) ---- */

/* The results of every procedure with a handle start with their status
 * (nfs3_admit writes a refusal there); the table's offsets name the handle. */
_Static_assert(offsetof(GETATTR3res, status) == 0 && offsetof(READ3res, status) == 0 &&
		   offsetof(WRITE3res, status) == 0 && offsetof(COMMIT3res, status) == 0,
	       "NFSv3 results start with their status");

bool nfs3_admit(struct rpc_req *rq, const void *fhp, void *res)
{
	struct srv_req *req = srv_req_of(rq);
	const nfs_fh3 *fh = fhp;
	char addr[INET6_ADDRSTRLEN + 16];
	const struct srv_client_rule *r;
	struct srv_export *ex;
	uint32_t export_id;
	nfsstat3 *status = res;
	un_id id;

	/* A handle that is no handle of ours, or names no export we serve, is
	 * answered by the handler (BADHANDLE, STALE) before it touches a file:
	 * req->fh.err says which (nfs3_call_file). */
	req->fh = (struct srv_fh_seen){.seen = true};
	req->fh.err =
	    un_handle_decode(req->srv->state, (const uint8_t *)fh->data.data_val,
			     fh->data.data_len, &export_id, &id);
	if (req->fh.err)
		return true;
	req->fh.export_id = export_id;
	req->fh.id = id;
	req->fh.err = -ESTALE; /* until its export is found and admits */
	ex = srv_export_for_handle(req, export_id);
	if (!ex && req->union_err == -EAGAIN) { /* unions.c rule 13 */
		*status = NFS3ERR_JUKEBOX;
		return false;
	}
	if (!ex && srv_export_id_is_client_union(req->srv, export_id)) {
		/* another client's union, not open (yet, or again): refused as
		 * when it is open, never STALE to one caller and ACCES to the next */
		RPC_LOG_LIMITED(RPC_LOG_WARN,
				"NFS call from %s with a handle of another client's "
				"union: refused",
				req->rpc->peer ? rpc_addr_str(req->rpc->peer, true, addr,
							      sizeof(addr))
					       : "-");
		*status = NFS3ERR_ACCES;
		return false;
	}
	if (!ex)
		return true;
	r = srv_access_rule(req->srv, ex, req->rpc->peer, "NFS call");
	if (r && !srv_export_is_callers(req, ex))
		r = NULL;
	if (!r) {
		*status = NFS3ERR_ACCES;
		return false;
	}
	req->client = &r->opts;
	req->ex = ex;
	req->fh.err = 0;
	srv_cred_squash(&req->rpc->cred, &r->opts);
	return true;
}
