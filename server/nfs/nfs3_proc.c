/* SPDX-License-Identifier: Apache-2.0 */
/* nfs3_proc.c - the NFSv3 program: its procedure table and handlers.
 *
 * A handler takes decoded arguments and a zeroed result, asks the union
 * engine, and fills the result; it never sees XDR or a socket (rpc/svc.c's
 * rpc_call_run does that from the table at the bottom of this file, run by
 * the program's dispatcher, nfs3_dispatch, inside srv_call_serve).  Reply data lives in
 * the request's arena.  Errors from the engine become statuses through
 * nfs3_status_from_errno only; the statuses that have no errno
 * (NFS3ERR_BAD_COOKIE, NFS3ERR_TOOSMALL here, NFS3ERR_NOT_SYNC and
 * NFS3ERR_BADTYPE in nfs3_write.c) are set where the protocol decides them.
 *
 * Decisions where RFC 1813 leaves a choice:
 *  - LOOKUP of an empty name or one holding '/' answers NFS3ERR_ACCES, as
 *    knfsd does; NFS3ERR_INVAL is not among LOOKUP's errors in the RFC.
 *    Names above 255 bytes answer NFS3ERR_NAMETOOLONG.
 *  - The modifying procedures are in nfs3_write.c, with their own notes;
 *    this table holds them too.  SETATTR goes through the duplicate request
 *    cache: replayed after a later WRITE, a truncation would destroy data.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#include "nfs.h"
#include "nfs3_util.h"

/* ---- NULL, GETATTR, LOOKUP, ACCESS, READLINK, READ ---- */

static void nfs3_null(struct rpc_req *rq, void *argp, void *resp)
{
	(void)rq;
	(void)argp;
	(void)resp;
}

static void nfs3_getattr(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	GETATTR3res *res = resp;
	struct nfs3_file f;

	(void)argp;
	res->status = nfs3_call_file_view(req, &f);
	if (res->status)
		return;
	nfs3_fattr(&f.attr, &res->GETATTR3res_u.resok.obj_attributes);
	nfs3_file_put(&f);
}

/* What LOOKUP needs of DIR before FNAME can be looked up in it.  (Names are
 * "fname" in this file: mount.h, from RFC 1813's mount.x, owns "name".) */
static nfsstat3 nfs3_lookup_check(const struct srv_req *req, const struct nfs3_file *dir,
				  const char *fname)
{
	nfsstat3 st;

	if (!S_ISDIR(dir->attr.mode))
		return nfs3_status_from_errno(-ENOTDIR);
	st = nfs3_name_check(fname);
	if (st)
		return st;
	return nfs3_access_check(req, dir, ACCESS3_LOOKUP);
}

/* Fills OK's handle and attributes for the object FNAME in DIR. */
static nfsstat3 nfs3_lookup_obj(struct srv_req *req, struct nfs3_file *dir,
				const char *fname, LOOKUP3resok *ok)
{
	struct un_obj *obj;
	struct un_attr a;
	nfsstat3 st;

	st = nfs3_status_from_errno(un_lookup_view(dir->ex->ux, dir->obj, fname, &obj));
	if (st)
		return st;
	st = nfs3_status_from_errno(un_getattr(dir->ex->ux, obj, &a));
	if (!st)
		st = nfs3_fh_set(req, dir->ex, un_obj_id(obj), &ok->object);
	if (!st)
		nfs3_post_op(&a, &ok->obj_attributes);
	un_obj_put(obj);
	return st;
}

static void nfs3_lookup(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	LOOKUP3args *args = argp;
	LOOKUP3res *res = resp;
	struct nfs3_file dir;
	nfsstat3 st;

	st = nfs3_call_file_view(req, &dir);
	if (st)
		goto out;
	st = nfs3_lookup_check(req, &dir, args->what.name);
	if (!st)
		st =
		    nfs3_lookup_obj(req, &dir, args->what.name, &res->LOOKUP3res_u.resok);
	/* The directory's attributes go with success and failure alike: a
	 * client caches negative lookups against them. */
	nfs3_post_op(&dir.attr, st ? &res->LOOKUP3res_u.resfail.dir_attributes
				   : &res->LOOKUP3res_u.resok.dir_attributes);
	nfs3_file_put(&dir);
out:
	res->status = st;
}

static void nfs3_access(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	ACCESS3args *args = argp;
	ACCESS3res *res = resp;
	ACCESS3resok *ok = &res->ACCESS3res_u.resok;
	struct nfs3_file f;

	res->status = nfs3_call_file_view(req, &f);
	if (res->status)
		return;
	/* RFC 1813: the reply holds the requested bits that are granted. */
	ok->access = args->access &
		     nfs3_access_mask(&req->rpc->cred, &f.attr, nfs3_file_writable(&f));
	nfs3_post_op(&f.attr, &ok->obj_attributes);
	nfs3_file_put(&f);
}

/* Longest symlink target a reply may carry (nfspath3<4096> in the .x). */
#define NFS3_PATH_MAX 4096

static void nfs3_readlink(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	READLINK3res *res = resp;
	struct nfs3_file f;
	size_t len;
	char *buf;
	nfsstat3 st;

	(void)argp;
	st = nfs3_call_file(req, &f);
	if (st)
		goto out;
	buf = rpc_arena_alloc(req->rpc->arena, NFS3_PATH_MAX + 1);
	st = nfs3_status_from_errno(
	    buf ? un_readlink(f.ex->ux, f.obj, buf, NFS3_PATH_MAX, &len) : -ENOMEM);
	if (!st) {
		buf[len] = '\0'; /* the arena zeroes, but len may be the size */
		res->READLINK3res_u.resok.data = buf;
	}
	nfs3_post_op(&f.attr, st ? &res->READLINK3res_u.resfail.symlink_attributes
				 : &res->READLINK3res_u.resok.symlink_attributes);
	nfs3_file_put(&f);
out:
	res->status = st;
}

/* What READ needs of F: a regular file.  Whether the caller may read it is
 * the kernel's to say when un_read opens it as the caller. */
static nfsstat3 nfs3_read_check(const struct nfs3_file *f)
{
	if (S_ISDIR(f->attr.mode))
		return nfs3_status_from_errno(-EISDIR);
	if (!S_ISREG(f->attr.mode))
		return nfs3_status_from_errno(-EINVAL);
	return NFS3_OK;
}

/* Reads into payload P: spliced into its pipe where the reply may carry one
 * (the server then copies no byte), else into its buffer.  Returns the byte
 * count or a negative errno. */
static ssize_t nfs3_read_into(const struct srv_req *req, struct nfs3_file *f,
			      struct rpc_payload *p, size_t count, uint64_t off,
			      bool *eof)
{
	int pfd = req->rpc->payload_pipe ? rpc_payload_pipe(p) : -1;
	ssize_t n;

	if (pfd >= 0) {
		n = un_read_pipe(f->ex->ux, f->obj, pfd, count, off, eof);
		if (n != -EINVAL) { /* -EINVAL: a layer that cannot splice */
			p->piped = p->in_pipe = n > 0 ? (size_t)n : 0;
			return n;
		}
	}
	n = un_read(f->ex->ux, f->obj, p->data, count, off, eof);
	p->len = n > 0 ? (size_t)n : 0;
	return n;
}

/* nfs3_read_into as the caller, or as the server where the owner override
 * of nfs3_owner_override applies. */
static ssize_t nfs3_read_as(const struct srv_req *req, struct nfs3_file *f,
			    struct rpc_payload *p, size_t count, uint64_t off, bool *eof)
{
	struct srv_ident saved;
	ssize_t n = nfs3_read_into(req, f, p, count, off, eof);

	if (n != -EACCES || !nfs3_owner_override(req, f))
		return n;
	srv_ident_server(&saved);
	n = nfs3_read_into(req, f, p, count, off, eof);
	srv_ident_leave(&saved);
	return n;
}

/* Reads ARGS' range of F into OK, the data in the request's payload, which
 * the reply carries behind the results nfs3_xdr_read_res encodes. */
static nfsstat3 nfs3_read_data(struct srv_req *req, struct nfs3_file *f,
			       const READ3args *args, READ3resok *ok)
{
	/* A count over rtmax gets a short read, which the RFC allows and every
	 * client handles. */
	size_t count =
	    args->count < rpc_max_io(req->rpc) ? args->count : rpc_max_io(req->rpc);
	struct rpc_payload *p = rpc_arena_payload(req->rpc->arena, count);
	bool eof = false;
	ssize_t n;

	if (!p)
		return nfs3_status_from_errno(-ENOMEM);
	n = nfs3_read_as(req, f, p, count, args->offset, &eof);
	if (n < 0)
		return nfs3_status_from_errno((int)n);
	req->rpc->payload = p;
	ok->count = (count3)n;
	req->bytes_read = (uint64_t)n;
	ok->eof = eof;
	ok->data.data_len = (u_int)n;
	/* Bytes in the pipe have no address; the encoder needs none. */
	ok->data.data_val = p->piped ? NULL : (char *)p->data;
	return NFS3_OK;
}

static void nfs3_read(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	READ3args *args = argp;
	READ3res *res = resp;
	struct nfs3_file f;
	nfsstat3 st;

	st = nfs3_call_file(req, &f);
	if (st)
		goto out;
	st = nfs3_read_check(&f);
	if (!st)
		st = nfs3_read_data(req, &f, args, &res->READ3res_u.resok);
	nfs3_file_refresh(&f); /* the read may have changed atime */
	nfs3_post_op(&f.attr, st ? &res->READ3res_u.resfail.file_attributes
				 : &res->READ3res_u.resok.file_attributes);
	nfs3_file_put(&f);
out:
	res->status = st;
}

/* ---- the modifying procedures: nfs3_write.c ---- */

/* ---- READDIR and READDIRPLUS ----
 *
 * Design notes.  A reply is one page of the directory's merged listing
 * (un_listing_*), which is ordered by cookie.
 *
 *  1. A page is a run of whole cookie groups.  Names sharing a cookie are
 *     adjacent, and resuming after cookie C skips every one of them, so a page
 *     ending inside a group would lose the group's rest.  nfs3_group_end finds
 *     the groups; nfs3_rd_page and nfs3_rdp_page take a group whole or end the
 *     page before it.
 *  2. A reply never exceeds the client's bounds.  READDIR's count and
 *     READDIRPLUS's maxcount bound the whole encoded result from its status
 *     word on (RFC 1813 says "the READDIR3resok structure ... including all
 *     XDR overhead"; the status word makes us 4 bytes stricter).
 *     READDIRPLUS's dircount bounds the directory part alone: each entry
 *     counted as the entry3 it would be in a READDIR reply, which is at least
 *     as large as the fileid, name and cookie the RFC means.  Sizes are
 *     computed exactly as XDR encodes them; the unit test checks each reply
 *     with xdr_sizeof.
 *  3. A page is never empty while an entry remains to be sent: when the first
 *     group does not fit, the answer is NFS3ERR_TOOSMALL.
 *  4. eof is TRUE exactly when the page ends with the listing's last entry.
 *  5. Cookie 0 starts at the listing's first entry; any other cookie resumes
 *     after itself.  A cookie is a hash of a name, so it names the same place
 *     in every version of the directory: a verifier of an older version is
 *     answered from the current listing, a verifier of 0 is accepted (some
 *     clients send it), and only a verifier this engine could never have
 *     issued for the directory is NFS3ERR_BAD_COOKIE.
 *  6. A page holds at most NFS3_DIR_MAX_ENTRIES entries.  rpcgen decodes
 *     and frees an entry list recursively (one xdr_pointer frame per entry),
 *     so this bounds the stack depth of any such walk (our encoders loop).
 *  7. Per entry a page costs no table read, no MAC and no stat once the
 *     listing served that entry and nothing changed (union.h: the listing
 *     remembers nodes, handles and attributes, and says how it stays
 *     coherent); the entries, names and handles of a page are a few arena
 *     arrays, and the reply is encoded by one loop (nfs3_wire.c).
 */

#define NFS3_DIR_MAX_ENTRIES 4096

/* The XDR size of the fixed part of a READDIR or READDIRPLUS reply: status,
 * directory attributes, verifier, the list's end marker and eof. */
static size_t nfs3_dir_reply_size(const post_op_attr *dir_attr)
{
	return NFS3_XDR_UNIT + nfs3_post_op_xdr_size(dir_attr) + NFS3_COOKIEVERFSIZE +
	       NFS3_XDR_UNIT + NFS3_XDR_UNIT;
}

/* The XDR size of one entry3: the "value follows" word before it, fileid,
 * name, cookie. */
static size_t nfs3_entry3_size(size_t namelen)
{
	return NFS3_XDR_UNIT + 8 + NFS3_XDR_UNIT + NFS3_XDR_RNDUP(namelen) + 8;
}

/* The XDR size of entryplus3 E beyond its entry3 part. */
static size_t nfs3_entryplus3_extra(const entryplus3 *e)
{
	size_t fh =
	    e->name_handle.handle_follows
		? NFS3_XDR_UNIT +
		      NFS3_XDR_RNDUP(e->name_handle.post_op_fh3_u.handle.data.data_len)
		: 0;

	return nfs3_post_op_xdr_size(&e->name_attributes) + NFS3_XDR_UNIT + fh;
}

static uint64_t nfs3_verf_get(const char v[NFS3_COOKIEVERFSIZE])
{
	uint64_t x = 0;

	for (int i = 0; i < NFS3_COOKIEVERFSIZE; i++)
		x = x << 8 | (uint8_t)v[i];
	return x;
}

static void nfs3_verf_put(uint64_t x, char v[NFS3_COOKIEVERFSIZE])
{
	for (int i = NFS3_COOKIEVERFSIZE - 1; i >= 0; i--, x >>= 8)
		v[i] = (char)(x & 0xff);
}

/* A directory being listed: the object, its listing, where the page starts. */
struct nfs3_dir {
	struct nfs3_file f;
	struct un_listing *l;
	size_t from;
};

/* Resolves the call's handle to a directory the caller may read, gets its
 * listing and finds where COOKIE resumes (notes 5).  On failure D->f may still hold the
 * directory, for its attributes; nfs3_dir_close releases D in every case. */
static nfsstat3 nfs3_dir_open(struct srv_req *req, cookie3 cookie, const char *verf,
			      struct nfs3_dir *d)
{
	uint64_t v = nfs3_verf_get(verf);
	nfsstat3 st;

	memset(d, 0, sizeof(*d));
	st = nfs3_call_file(req, &d->f);
	if (st)
		return st;
	if (!S_ISDIR(d->f.attr.mode))
		return nfs3_status_from_errno(-ENOTDIR);
	st = nfs3_access_check(req, &d->f, ACCESS3_READ);
	if (st)
		return st;
	st = nfs3_status_from_errno(un_listing_get(d->f.ex->ux, d->f.obj, &d->l));
	if (st)
		return st;
	if (cookie != 0 && v != 0 && v != un_listing_verf(d->l) &&
	    !un_listing_verf_valid(d->f.ex->ux, un_obj_id(d->f.obj), v))
		return NFS3ERR_BAD_COOKIE;
	d->from = cookie ? un_listing_seek(d->l, cookie) : 0;
	return NFS3_OK;
}

static void nfs3_dir_close(struct nfs3_dir *d)
{
	if (d->l)
		un_listing_put(d->l);
	d->l = NULL;
	nfs3_file_put(&d->f);
}

/* Fills LIST (a dirlist3 or dirlistplus3) with one page of D for ARGS (the
 * call's arguments) in a reply whose directory attributes are DIR_ATTR. */
typedef nfsstat3 (*nfs3_page_fn)(struct srv_req *req, struct nfs3_dir *d,
				 const void *args, const post_op_attr *dir_attr,
				 void *list);

/* What READDIR and READDIRPLUS share: opens the call's directory at COOKIE with
 * VERF (notes 5), has PAGE fill LIST and puts the listing's verifier in
 * VERF_OUT.  *DIR_ATTR gets the directory's attributes for the reply, which
 * carries them on success and failure alike. */
static nfsstat3 nfs3_dir_serve(struct srv_req *req, cookie3 cookie, const char *verf,
			       nfs3_page_fn page, const void *args, void *list,
			       post_op_attr *dir_attr, char *verf_out)
{
	struct nfs3_dir d;
	nfsstat3 st;

	dir_attr->attributes_follow = FALSE;
	st = nfs3_dir_open(req, cookie, verf, &d);
	if (d.f.obj)
		nfs3_post_op(&d.f.attr, dir_attr);
	if (!st)
		st = page(req, &d, args, dir_attr, list);
	if (!st)
		nfs3_verf_put(un_listing_verf(d.l), verf_out);
	nfs3_dir_close(&d);
	return st;
}

/* Index after the group of entries sharing the cookie of entry I (notes 1). */
static size_t nfs3_group_end(const struct un_listing *l, size_t i)
{
	size_t n = un_listing_count(l);
	uint64_t cookie = un_listing_at(l, i)->cookie;

	while (++i < n && un_listing_at(l, i)->cookie == cookie)
		;
	return i;
}

/* What a page knows of its entries, index 0 being D->from: node ids (what
 * handles name), fileids (they differ only for the names of a lower file
 * with several links, union.h), handles (FHLEN bytes each, UN_FH_MAX
 * apart; READDIRPLUS only) and a copy of the names, all in the arena. */
struct nfs3_page {
	size_t n;
	un_id *ids, *fileids;
	uint8_t *fh;
	size_t fhlen;
	char **names;
	/* READDIRPLUS: the attributes of the first HAVE entries (nfs3_rdp_attr) */
	struct un_attr *attr;
	int *attr_err;
	size_t have;
};

/* Fills P for the first N entries of D's page, with handles when WITH_FH;
 * the listing remembers nodes, so a page it served before reads no table
 * (union.h). */
static nfsstat3 nfs3_page_get(struct srv_req *req, struct nfs3_dir *d, size_t n,
			      bool with_fh, struct nfs3_page *p)
{
	struct rpc_arena *a = req->rpc->arena;
	size_t m = n ? n : 1, pool = 0;
	char *names;
	int rc;

	for (size_t i = 0; i < n; i++)
		pool += un_listing_at(d->l, d->from + i)->namelen + 1u;
	*p = (struct nfs3_page){.n = n};
	p->ids = rpc_arena_alloc(a, m * sizeof(*p->ids));
	p->fileids = rpc_arena_alloc(a, m * sizeof(*p->fileids));
	p->names = rpc_arena_alloc(a, m * sizeof(*p->names));
	p->fh = with_fh ? rpc_arena_alloc(a, m * UN_FH_MAX) : NULL;
	names = rpc_arena_alloc(a, pool + 1);
	if (!p->ids || !p->fileids || !p->names || !names || (with_fh && !p->fh))
		return nfs3_status_from_errno(-ENOMEM);
	for (size_t i = 0; i < n; i++) {
		const struct un_dirent *de = un_listing_at(d->l, d->from + i);

		p->names[i] = memcpy(names, de->name, de->namelen + 1u);
		names += de->namelen + 1u;
	}
	rc = n ? un_listing_handles(d->f.ex->ux, d->f.obj, d->l, d->from, n, p->ids,
				    p->fileids, p->fh)
	       : 0;
	if (rc < 0)
		return nfs3_status_from_errno(rc);
	p->fhlen = (size_t)rc;
	return NFS3_OK;
}

/* Fills LIST with one READDIR page of D within ARGS' count (notes 1-4, 6). */
static nfsstat3 nfs3_rd_page(struct srv_req *req, struct nfs3_dir *d, const void *argp,
			     const post_op_attr *dir_attr, void *listp)
{
	const READDIR3args *args = argp;
	size_t count =
	    args->count < rpc_max_io(req->rpc) ? args->count : rpc_max_io(req->rpc);
	size_t n = un_listing_count(d->l), used = nfs3_dir_reply_size(dir_attr);
	size_t i = d->from, j, end, size;
	dirlist3 *list = listp;
	struct nfs3_page p;
	entry3 *es;
	nfsstat3 st;

	for (; i < n; i = end) {
		end = nfs3_group_end(d->l, i);
		for (j = i, size = 0; j < end; j++)
			size += nfs3_entry3_size(un_listing_at(d->l, j)->namelen);
		if (used + size > count || end - d->from > NFS3_DIR_MAX_ENTRIES)
			break;
		used += size;
	}
	if (used > count || (i == d->from && i < n))
		return NFS3ERR_TOOSMALL;
	st = nfs3_page_get(req, d, i - d->from, false, &p);
	es = st ? NULL : rpc_arena_alloc(req->rpc->arena, (p.n ? p.n : 1) * sizeof(*es));
	if (!st && !es)
		st = nfs3_status_from_errno(-ENOMEM);
	for (j = 0; !st && j < p.n; j++) {
		es[j].name = p.names[j];
		es[j].fileid = p.fileids[j];
		es[j].cookie = un_listing_at(d->l, d->from + j)->cookie;
		es[j].nextentry = j + 1 < p.n ? &es[j + 1] : NULL;
	}
	list->entries = !st && p.n ? es : NULL;
	list->eof = (i == n);
	return st;
}

static void nfs3_readdir(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	READDIR3args *args = argp;
	READDIR3res *res = resp;
	READDIR3resok *ok = &res->READDIR3res_u.resok;
	post_op_attr dir_attr;
	nfsstat3 st;

	st = nfs3_dir_serve(req, args->cookie, args->cookieverf, nfs3_rd_page, args,
			    &ok->reply, &dir_attr, ok->cookieverf);
	if (!st)
		ok->dir_attributes = dir_attr;
	else
		res->READDIR3res_u.resfail.dir_attributes = dir_attr;
	res->status = st;
}

/* Entries whose attributes are asked for at once: few enough that a page
 * ending early wastes little, many enough to share one look at the
 * listing's watches. */
#define NFS3_ATTR_CHUNK 64

/* The attributes of ".." (I 1) by a lookup, or of "." (I 0): the
 * directory's own, as un_getattr gave them. */
static int nfs3_dot_attr(struct nfs3_dir *d, size_t i, struct un_attr *a)
{
	struct un_obj *obj;
	int err;

	if (i == 0) {
		*a = d->f.attr;
		return 0;
	}
	err = un_lookup(d->f.ex->ux, d->f.obj, "..", &obj);
	if (err)
		return err;
	err = un_getattr(d->f.ex->ux, obj, a);
	un_obj_put(obj);
	return err;
}

/* Makes sure P holds the attributes of its entry K, asking the listing for
 * the next NFS3_ATTR_CHUNK entries when it does not (un_listing_attrs):
 * from a stat of each top-most instance or from what the listing remembers
 * of it.  0, or the error of entry K. */
static int nfs3_rdp_attr(struct nfs3_dir *d, struct nfs3_page *p, size_t k)
{
	size_t from, n;
	int rc;

	while (k >= p->have) {
		for (; p->have < p->n && d->from + p->have < 2; p->have++)
			p->attr_err[p->have] =
			    nfs3_dot_attr(d, d->from + p->have, &p->attr[p->have]);
		from = p->have;
		n = p->n - from < NFS3_ATTR_CHUNK ? p->n - from : NFS3_ATTR_CHUNK;
		rc = n ? un_listing_attrs(d->f.ex->ux, d->f.obj, d->l, d->from + from, n,
					  p->fileids + from, p->attr + from,
					  p->attr_err + from)
		       : 0;
		for (size_t j = from; rc && j < from + n; j++)
			p->attr_err[j] = rc;
		p->have += n;
	}
	return p->attr_err[k];
}

/* Fills E, the READDIRPLUS entry of entry K of page P of D.  When WITH_OBJ,
 * the entry also gets the handle and attributes of the name (nfs3_rdp_attr).
 * An entry whose name changed since the listing was built goes without
 * them, as the RFC allows (the client will LOOKUP it). */
static void nfs3_rdp_entry(struct nfs3_dir *d, struct nfs3_page *p, size_t k,
			   bool with_obj, entryplus3 *e)
{
	memset(e, 0, sizeof(*e));
	e->name = p->names[k];
	e->cookie = un_listing_at(d->l, d->from + k)->cookie;
	e->fileid = p->fileids[k];
	if (!with_obj || nfs3_rdp_attr(d, p, k))
		return;
	e->name_handle.handle_follows = TRUE;
	e->name_handle.post_op_fh3_u.handle.data.data_len = (u_int)p->fhlen;
	e->name_handle.post_op_fh3_u.handle.data.data_val = (char *)p->fh + k * UN_FH_MAX;
	nfs3_post_op(&p->attr[k], &e->name_attributes);
}

/* The two READDIRPLUS budgets, in bytes left. */
struct nfs3_rdp_budget {
	size_t dir; /* of dircount */
	size_t max; /* of maxcount */
};

/* Builds the entries of the group I..END-1 of D into ES (ES[k] for entry
 * D->from + k) and charges them to B; false (B unchanged) if the group does
 * not fit. */
static bool nfs3_rdp_group(struct nfs3_dir *d, struct nfs3_page *p, size_t i, size_t end,
			   bool with_obj, struct nfs3_rdp_budget *b, entryplus3 *es)
{
	size_t dir = 0, max = 0;

	for (size_t k = i - d->from; k < end - d->from; k++) {
		size_t e3 = nfs3_entry3_size(un_listing_at(d->l, d->from + k)->namelen);

		nfs3_rdp_entry(d, p, k, with_obj, &es[k]);
		dir += e3;
		max += e3 + nfs3_entryplus3_extra(&es[k]);
	}
	if (dir > b->dir || max > b->max)
		return false;
	b->dir -= dir;
	b->max -= max;
	return true;
}

/* An upper bound on the entries of a READDIRPLUS page of D within B: each
 * entry costs at least its entry3 and, of maxcount, two "nothing follows"
 * words for absent attributes and handle. */
static size_t nfs3_rdp_bound(const struct nfs3_dir *d, struct nfs3_rdp_budget b)
{
	size_t n = un_listing_count(d->l), i, size;

	for (i = d->from; i < n && i - d->from < NFS3_DIR_MAX_ENTRIES; i++) {
		size = nfs3_entry3_size(un_listing_at(d->l, i)->namelen);
		if (size > b.dir || size + 2 * NFS3_XDR_UNIT > b.max)
			break;
		b.dir -= size;
		b.max -= size + 2 * NFS3_XDR_UNIT;
	}
	return i - d->from;
}

/* Fills LIST with one READDIRPLUS page of D within ARGS' dircount and
 * maxcount (notes 1-4, 6, 7).  The nodes and handles of every entry that
 * could fit come first, in one call (nfs3_page_get); attributes come from
 * the listing a chunk at a time (nfs3_rdp_attr), with no lookup and no
 * table access. */
static nfsstat3 nfs3_rdp_page(struct srv_req *req, struct nfs3_dir *d, const void *argp,
			      const post_op_attr *dir_attr, void *listp)
{
	const READDIRPLUS3args *args = argp;
	size_t n = un_listing_count(d->l), fixed = nfs3_dir_reply_size(dir_attr);
	size_t maxcount =
	    args->maxcount < rpc_max_io(req->rpc) ? args->maxcount : rpc_max_io(req->rpc);
	bool with_obj = nfs3_access_check(req, &d->f, ACCESS3_LOOKUP) == NFS3_OK;
	dirlistplus3 *list = listp;
	struct nfs3_rdp_budget b;
	size_t i = d->from, end;
	struct nfs3_page p;
	entryplus3 *es;
	nfsstat3 st;

	if (maxcount < fixed)
		return NFS3ERR_TOOSMALL;
	b.dir = args->dircount;
	b.max = maxcount - fixed;
	st = nfs3_page_get(req, d, nfs3_rdp_bound(d, b), with_obj, &p);
	if (st)
		return st;
	es = rpc_arena_alloc(req->rpc->arena, (p.n ? p.n : 1) * sizeof(*es));
	p.attr = rpc_arena_alloc(req->rpc->arena, (p.n ? p.n : 1) * sizeof(*p.attr));
	p.attr_err =
	    rpc_arena_alloc(req->rpc->arena, (p.n ? p.n : 1) * sizeof(*p.attr_err));
	p.have = 0;
	if (!es || !p.attr || !p.attr_err)
		return nfs3_status_from_errno(-ENOMEM);
	for (; i < n; i = end) {
		end = nfs3_group_end(d->l, i);
		if (end - d->from > p.n ||
		    !nfs3_rdp_group(d, &p, i, end, with_obj, &b, es))
			break;
	}
	if (i == d->from && i < n)
		return NFS3ERR_TOOSMALL;
	for (size_t k = 0; k + 1 < i - d->from; k++)
		es[k].nextentry = &es[k + 1];
	if (i > d->from)
		es[i - d->from - 1].nextentry = NULL; /* drops a group that did not fit */
	list->entries = i > d->from ? es : NULL;
	list->eof = (i == n);
	return NFS3_OK;
}

static void nfs3_readdirplus(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	READDIRPLUS3args *args = argp;
	READDIRPLUS3res *res = resp;
	READDIRPLUS3resok *ok = &res->READDIRPLUS3res_u.resok;
	post_op_attr dir_attr;
	nfsstat3 st;

	st = nfs3_dir_serve(req, args->cookie, args->cookieverf, nfs3_rdp_page, args,
			    &ok->reply, &dir_attr, ok->cookieverf);
	if (!st)
		ok->dir_attributes = dir_attr;
	else
		res->READDIRPLUS3res_u.resfail.dir_attributes = dir_attr;
	res->status = st;
}

/* ---- FSSTAT, FSINFO, PATHCONF ---- */

static void nfs3_fsstat(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	FSSTAT3res *res = resp;
	FSSTAT3resok *ok = &res->FSSTAT3res_u.resok;
	struct un_statfs sf;
	struct nfs3_file f;
	nfsstat3 st;

	(void)argp;
	st = nfs3_call_file(req, &f);
	if (st)
		goto out;
	st = nfs3_status_from_errno(un_statfs(f.ex->ux, &sf));
	if (!st) {
		ok->tbytes = sf.tbytes;
		ok->fbytes = sf.fbytes;
		ok->abytes = sf.abytes;
		ok->tfiles = sf.tfiles;
		ok->ffiles = sf.ffiles;
		ok->afiles = sf.afiles;
		ok->invarsec = 0; /* the layers may change under us at any time */
	}
	nfs3_post_op(&f.attr, st ? &res->FSSTAT3res_u.resfail.obj_attributes
				 : &ok->obj_attributes);
	nfs3_file_put(&f);
out:
	res->status = st;
}

static void nfs3_fsinfo(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	FSINFO3res *res = resp;
	FSINFO3resok *ok = &res->FSINFO3res_u.resok;
	struct nfs3_file f;

	(void)argp;
	res->status = nfs3_call_file(req, &f);
	if (res->status)
		return;
	nfs3_post_op(&f.attr, &ok->obj_attributes);
	/* Over UDP a reply must fit one datagram. */
	ok->rtmax = ok->rtpref = (uint32)rpc_max_io(req->rpc);
	ok->wtmax = ok->wtpref = (uint32)rpc_max_io(req->rpc);
	ok->rtmult = ok->wtmult = 4096;
	ok->dtpref = req->rpc->proto == IPPROTO_UDP ? 8 * 1024 : 64 * 1024;
	ok->maxfilesize = INT64_MAX; /* the largest off_t; layers say less by EFBIG */
	ok->time_delta.seconds = 0;
	ok->time_delta.nseconds = 1;
	ok->properties = FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME;
	nfs3_file_put(&f);
}

/* No link count the union can promise for every layer's filesystem: ext2/3
 * allow 32000, the smallest of the common ones (ext4 65000, btrfs 65535, xfs
 * and tmpfs more). */
#define NFS3_LINK_MAX 32000

static void nfs3_pathconf(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	PATHCONF3res *res = resp;
	PATHCONF3resok *ok = &res->PATHCONF3res_u.resok;
	struct nfs3_file f;

	(void)argp;
	res->status = nfs3_call_file(req, &f);
	if (res->status)
		return;
	nfs3_post_op(&f.attr, &ok->obj_attributes);
	ok->linkmax = NFS3_LINK_MAX;
	ok->name_max = NFS3_NAME_MAX;
	ok->no_trunc = TRUE; /* long names are refused, never cut */
	ok->chown_restricted = TRUE;
	ok->case_insensitive = FALSE;
	ok->case_preserving = TRUE;
	nfs3_file_put(&f);
}

/* ---- the table ----
 *
 * One row per procedure says its whole path: the decoder (rpcgen's xdr_*,
 * or nfs3_wire.c's), the handle the access check reads (FH_FIELD of the
 * args; nfs3_program.admit = nfs3_admit, nfs3_util.c), the handler, the
 * encoder, and whether the call is idempotent (false: through the duplicate
 * request cache, drc.c).  Unnamed decoders and encoders are rpcgen's. */

#define NFS3_PROC_ARGS(NAME, handler_fn, idem, fh_field, decoder, args_type, encoder)    \
	[NFSPROC3_##NAME] = {                                                            \
	    .name = #NAME,                                                               \
	    .has_fh = true,                                                              \
	    .fh_offset = offsetof(NAME##3args, fh_field),                                \
	    .decode_args = (xdrproc_t)decoder,                                           \
	    .args_size = sizeof(args_type),                                              \
	    .encode_res = (xdrproc_t)encoder,                                            \
	    .res_size = sizeof(NAME##3res),                                              \
	    .handler = handler_fn,                                                       \
	    .idempotent = idem,                                                          \
	}
#define NFS3_PROC_XDR(NAME, handler_fn, idem, fh_field, decoder, encoder)                \
	NFS3_PROC_ARGS(NAME, handler_fn, idem, fh_field, decoder, NAME##3args, encoder)
#define NFS3_PROC_ENC(NAME, handler_fn, idem, fh_field, encoder)                         \
	NFS3_PROC_XDR(NAME, handler_fn, idem, fh_field, xdr_##NAME##3args, encoder)
#define NFS3_PROC(NAME, handler_fn, idem, fh_field)                                      \
	NFS3_PROC_ENC(NAME, handler_fn, idem, fh_field, xdr_##NAME##3res)

static const struct rpc_proc nfs3_procs[] = {
    [NFSPROC3_NULL] =
	{
	    .name = "NULL",
	    .decode_args = (xdrproc_t)(void (*)(void))xdr_void,
	    .args_size = 0,
	    .encode_res = (xdrproc_t)(void (*)(void))xdr_void,
	    .res_size = 0,
	    .handler = nfs3_null,
	    .idempotent = true,
	},
    NFS3_PROC(GETATTR, nfs3_getattr, true, object),
    NFS3_PROC(SETATTR, nfs3_setattr, false, object),
    NFS3_PROC(LOOKUP, nfs3_lookup, true, what.dir),
    NFS3_PROC(ACCESS, nfs3_access, true, object),
    NFS3_PROC(READLINK, nfs3_readlink, true, symlink),
    NFS3_PROC_ENC(READ, nfs3_read, true, file, nfs3_xdr_read_res),
    /* Not idempotent: a retransmission must not undo a later WRITE (drc.c). */
    NFS3_PROC_ARGS(WRITE, nfs3_write, false, file, nfs3_xdr_write_args,
		   struct nfs3_write_args, xdr_WRITE3res),
    NFS3_PROC(CREATE, nfs3_create, false, where.dir),
    NFS3_PROC(MKDIR, nfs3_mkdir, false, where.dir),
    NFS3_PROC(SYMLINK, nfs3_symlink, false, where.dir),
    NFS3_PROC(MKNOD, nfs3_mknod, false, where.dir),
    NFS3_PROC(REMOVE, nfs3_remove, false, object.dir),
    NFS3_PROC(RMDIR, nfs3_rmdir, false, object.dir),
    NFS3_PROC(RENAME, nfs3_rename, false, from.dir),
    NFS3_PROC(LINK, nfs3_link, false, file),
    NFS3_PROC_ENC(READDIR, nfs3_readdir, true, dir, nfs3_xdr_readdir_res),
    NFS3_PROC_ENC(READDIRPLUS, nfs3_readdirplus, true, dir, nfs3_xdr_readdirplus_res),
    NFS3_PROC(FSSTAT, nfs3_fsstat, true, fsroot),
    NFS3_PROC(FSINFO, nfs3_fsinfo, true, fsroot),
    NFS3_PROC(PATHCONF, nfs3_pathconf, true, object),
    NFS3_PROC(COMMIT, nfs3_commit, true, file),
};

/* Whether procedure PROC may change the union: a name, data or attributes
 * (srv_req.writes). */
static bool nfs3_writes(uint32_t proc)
{
	static const bool writes[NFSPROC3_COMMIT + 1] = {
	    [NFSPROC3_SETATTR] = true, [NFSPROC3_WRITE] = true,
	    [NFSPROC3_CREATE] = true,  [NFSPROC3_MKDIR] = true,
	    [NFSPROC3_SYMLINK] = true, [NFSPROC3_MKNOD] = true,
	    [NFSPROC3_REMOVE] = true,  [NFSPROC3_RMDIR] = true,
	    [NFSPROC3_RENAME] = true,  [NFSPROC3_LINK] = true,
	    [NFSPROC3_COMMIT] = true,
	};

	return proc <= NFSPROC3_COMMIT && writes[proc];
}

/* Every NFS call is served against the exports (exports.h, call.c). */
static void nfs3_dispatch(struct rpc_call *call, struct rpc_req *rq)
{
	srv_call_serve(rq->arg, call, rq, nfs3_writes(rq->proc));
}

const struct rpc_program nfs3_program = {
    .name = "nfs",
    .prog = NFS_PROGRAM,
    .vers = NFS_V3,
    .procs = nfs3_procs,
    .nprocs = sizeof(nfs3_procs) / sizeof(nfs3_procs[0]),
    .dispatch = nfs3_dispatch,
    .invoke = srv_call_handler,
    .caller_identity = true,
    .admit = nfs3_admit,
    .result_status = nfs3_result_status,
    .statuses = nfs3_status_names,
    .nstatuses = NFS3_NSTATUS_NAMES,
};

int nfs_register(struct rpc_svc *svc, struct srv *s)
{
	int rc = rpc_svc_register(svc, &nfs3_program, "nfs", s);

	return rc < 0 ? rc : rpc_svc_register(svc, &mnt3_program, "mount", s);
}
