/* nfs3_proc.c - the NFSv3 program: its procedure table and handlers.
 *
 * A handler takes decoded arguments and a zeroed result, asks the union engine,
 * and fills the result; it never sees XDR or a socket (the dispatcher in rpc.c
 * does that from the table at the bottom of this file).  Reply data lives in
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
#include <string.h>
#include <sys/stat.h>

#include "nfs3_util.h"
#include "srv.h"

/* ---- NULL, GETATTR, LOOKUP, ACCESS, READLINK, READ ---- */

static void nfs3_null(struct srv_req *req, void *argp, void *resp)
{
	(void)req;
	(void)argp;
	(void)resp;
}

static void nfs3_getattr(struct srv_req *req, void *argp, void *resp)
{
	GETATTR3args *args = argp;
	GETATTR3res *res = resp;
	struct nfs3_file f;

	res->status = nfs3_file_get(req, &args->object, &f);
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

	st = nfs3_status_from_errno(un_lookup(dir->ex->ux, dir->obj, fname, &obj));
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

static void nfs3_lookup(struct srv_req *req, void *argp, void *resp)
{
	LOOKUP3args *args = argp;
	LOOKUP3res *res = resp;
	struct nfs3_file dir;
	nfsstat3 st;

	st = nfs3_file_get(req, &args->what.dir, &dir);
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

static void nfs3_access(struct srv_req *req, void *argp, void *resp)
{
	ACCESS3args *args = argp;
	ACCESS3res *res = resp;
	ACCESS3resok *ok = &res->ACCESS3res_u.resok;
	struct nfs3_file f;

	res->status = nfs3_file_get(req, &args->object, &f);
	if (res->status)
		return;
	/* RFC 1813: the reply holds the requested bits that are granted. */
	ok->access =
	    args->access & nfs3_access_mask(&req->cred, &f.attr, nfs3_file_writable(&f));
	nfs3_post_op(&f.attr, &ok->obj_attributes);
	nfs3_file_put(&f);
}

/* Longest symlink target a reply may carry (nfspath3<4096> in the .x). */
#define NFS3_PATH_MAX 4096

static void nfs3_readlink(struct srv_req *req, void *argp, void *resp)
{
	READLINK3args *args = argp;
	READLINK3res *res = resp;
	struct nfs3_file f;
	size_t len;
	char *buf;
	nfsstat3 st;

	st = nfs3_file_get(req, &args->symlink, &f);
	if (st)
		goto out;
	buf = srv_arena_alloc(req->arena, NFS3_PATH_MAX + 1);
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

/* un_read as the caller, or as the server where the owner override of
 * nfs3_owner_override applies. */
static ssize_t nfs3_read_as(const struct srv_req *req, struct nfs3_file *f, char *buf,
			    size_t count, uint64_t off, bool *eof)
{
	struct srv_ident saved;
	ssize_t n = un_read(f->ex->ux, f->obj, buf, count, off, eof);

	if (n != -EACCES || !nfs3_owner_override(req, f))
		return n;
	srv_ident_server(&saved);
	n = un_read(f->ex->ux, f->obj, buf, count, off, eof);
	srv_ident_leave(&saved);
	return n;
}

/* Reads ARGS' range of F into OK, the data in the request's arena. */
static nfsstat3 nfs3_read_data(struct srv_req *req, struct nfs3_file *f,
			       const READ3args *args, READ3resok *ok)
{
	/* A count over rtmax gets a short read, which the RFC allows and every
	 * client handles. */
	size_t count = args->count < srv_max_io(req) ? args->count : srv_max_io(req);
	char *buf = srv_arena_alloc(req->arena, count ? count : 1);
	bool eof = false;
	ssize_t n;

	if (!buf)
		return nfs3_status_from_errno(-ENOMEM);
	n = nfs3_read_as(req, f, buf, count, args->offset, &eof);
	if (n < 0)
		return nfs3_status_from_errno((int)n);
	ok->count = (count3)n;
	ok->eof = eof;
	ok->data.data_len = (u_int)n;
	ok->data.data_val = buf;
	return NFS3_OK;
}

static void nfs3_read(struct srv_req *req, void *argp, void *resp)
{
	READ3args *args = argp;
	READ3res *res = resp;
	struct nfs3_file f;
	nfsstat3 st;

	st = nfs3_file_get(req, &args->file, &f);
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
 *  6. A page holds at most NFS3_DIR_MAX_ENTRIES entries.  rpcgen encodes an
 *     entry list recursively (one xdr_pointer frame per entry), so this bounds
 *     the encoder's stack depth whatever count a client asks for.
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

/* Resolves FH to a directory the caller may read, gets its listing and finds
 * where COOKIE resumes (notes 5).  On failure D->f may still hold the
 * directory, for its attributes; nfs3_dir_close releases D in every case. */
static nfsstat3 nfs3_dir_open(struct srv_req *req, const nfs_fh3 *fh, cookie3 cookie,
			      const char *verf, struct nfs3_dir *d)
{
	uint64_t v = nfs3_verf_get(verf);
	nfsstat3 st;

	memset(d, 0, sizeof(*d));
	st = nfs3_file_get(req, fh, &d->f);
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

/* Index after the group of entries sharing the cookie of entry I (notes 1). */
static size_t nfs3_group_end(const struct un_listing *l, size_t i)
{
	size_t n = un_listing_count(l);
	uint64_t cookie = un_listing_at(l, i)->cookie;

	while (++i < n && un_listing_at(l, i)->cookie == cookie)
		;
	return i;
}

/* The node ids (for handles) and fileids (for entries and attributes) of
 * the N entries of D's page, in one table transaction; they differ only for
 * the names of a lower file with several links (union.h).  "." and ".." are
 * the directory and its parent whatever the table says. */
static nfsstat3 nfs3_page_ids(struct srv_req *req, struct nfs3_dir *d, size_t n,
			      un_id **ids_out, un_id **fileids_out)
{
	un_id *ids = srv_arena_alloc(req->arena, (n ? n : 1) * sizeof(*ids));
	un_id *fileids = srv_arena_alloc(req->arena, (n ? n : 1) * sizeof(*fileids));
	nfsstat3 st;

	if (!ids || !fileids)
		return nfs3_status_from_errno(-ENOMEM);
	st = nfs3_status_from_errno(
	    n ? un_listing_nodes(d->f.ex->ux, d->f.obj, d->l, d->from, n, ids, fileids)
	      : 0);
	for (size_t i = 0; !st && i < n; i++) {
		const char *nm = un_listing_at(d->l, d->from + i)->name;

		if (!strcmp(nm, "."))
			ids[i] = fileids[i] = un_obj_id(d->f.obj);
		else if (!strcmp(nm, ".."))
			ids[i] = fileids[i] = un_obj_parent_id(d->f.obj);
	}
	*ids_out = ids;
	*fileids_out = fileids;
	return st;
}

/* Fills LIST with one READDIR page of D within COUNT bytes of reply whose
 * directory attributes are DIR_ATTR (notes 1-4, 6). */
static nfsstat3 nfs3_rd_page(struct srv_req *req, struct nfs3_dir *d, size_t count,
			     const post_op_attr *dir_attr, dirlist3 *list)
{
	size_t n = un_listing_count(d->l), used = nfs3_dir_reply_size(dir_attr);
	entry3 **link = &list->entries;
	size_t i = d->from, j, end, size;
	un_id *ids, *fileids;
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
	st = nfs3_page_ids(req, d, i - d->from, &ids, &fileids);
	for (j = d->from; !st && j < i; j++) {
		const struct un_dirent *de = un_listing_at(d->l, j);
		entry3 *e = srv_arena_alloc(req->arena, sizeof(*e));

		if (!e ||
		    !(e->name = srv_arena_strndup(req->arena, de->name, de->namelen)))
			return nfs3_status_from_errno(-ENOMEM);
		e->fileid = fileids[j - d->from];
		e->cookie = de->cookie;
		*link = e;
		link = &e->nextentry;
	}
	list->eof = (i == n);
	return st;
}

static void nfs3_readdir(struct srv_req *req, void *argp, void *resp)
{
	READDIR3args *args = argp;
	READDIR3res *res = resp;
	READDIR3resok *ok = &res->READDIR3res_u.resok;
	post_op_attr dir_attr = {.attributes_follow = FALSE};
	size_t count = args->count < srv_max_io(req) ? args->count : srv_max_io(req);
	struct nfs3_dir d;
	nfsstat3 st;

	st = nfs3_dir_open(req, &args->dir, args->cookie, args->cookieverf, &d);
	if (d.f.obj)
		nfs3_post_op(&d.f.attr, &dir_attr);
	if (!st)
		st = nfs3_rd_page(req, &d, count, &dir_attr, &ok->reply);
	if (!st) {
		ok->dir_attributes = dir_attr;
		nfs3_verf_put(un_listing_verf(d.l), ok->cookieverf);
	} else {
		res->READDIR3res_u.resfail.dir_attributes = dir_attr;
	}
	nfs3_dir_close(&d);
	res->status = st;
}

/* Builds the READDIRPLUS entry of entry I of D's listing, whose node id is
 * ID (its handle) and fileid FILEID.  When WITH_OBJ, the entry also gets the
 * handle and attributes of the name: from one stat of its top-most instance
 * (un_listing_attr), or for "." and ".." by a lookup.  An entry whose name
 * changed since the listing was built goes without them, as the RFC allows
 * (the client will LOOKUP it). */
static entryplus3 *nfs3_rdp_entry(struct srv_req *req, struct nfs3_dir *d, size_t i,
				  un_id id, un_id fileid, bool with_obj)
{
	const struct un_dirent *de = un_listing_at(d->l, i);
	entryplus3 *e = srv_arena_alloc(req->arena, sizeof(*e));
	struct un_obj *obj = NULL;
	struct un_attr a;
	int err;

	if (!e || !(e->name = srv_arena_strndup(req->arena, de->name, de->namelen)))
		return NULL;
	e->cookie = de->cookie;
	e->fileid = fileid;
	if (!with_obj)
		return e;
	if (i >= 2) {
		err = un_listing_attr(d->f.ex->ux, d->f.obj, d->l, i, fileid, &a);
	} else {
		err = un_lookup(d->f.ex->ux, d->f.obj, e->name, &obj);
		if (!err)
			err = un_getattr(d->f.ex->ux, obj, &a);
	}
	if (!err &&
	    !nfs3_fh_set(req, d->f.ex, id, &e->name_handle.post_op_fh3_u.handle)) {
		e->name_handle.handle_follows = TRUE;
		nfs3_post_op(&a, &e->name_attributes);
	}
	if (obj)
		un_obj_put(obj);
	return e;
}

/* The two READDIRPLUS budgets, in bytes left. */
struct nfs3_rdp_budget {
	size_t dir; /* of dircount */
	size_t max; /* of maxcount */
};

/* Builds the entries of the group starting at I into *FIRST..*LAST and
 * charges them to B; false (B unchanged) if the group does not fit. */
static bool nfs3_rdp_group(struct srv_req *req, struct nfs3_dir *d, size_t i, size_t end,
			   const un_id *ids, const un_id *fileids, bool with_obj,
			   struct nfs3_rdp_budget *b, entryplus3 **first,
			   entryplus3 **last, nfsstat3 *st)
{
	size_t dir = 0, max = 0;
	entryplus3 **link = first, *e = NULL;

	for (; i < end; i++) {
		const struct un_dirent *de = un_listing_at(d->l, i);

		e = nfs3_rdp_entry(req, d, i, ids[i - d->from], fileids[i - d->from],
				   with_obj);
		if (!e) {
			*st = nfs3_status_from_errno(-ENOMEM);
			return false;
		}
		dir += nfs3_entry3_size(de->namelen);
		max += nfs3_entry3_size(de->namelen) + nfs3_entryplus3_extra(e);
		*link = e;
		link = &e->nextentry;
	}
	if (dir > b->dir || max > b->max)
		return false;
	b->dir -= dir;
	b->max -= max;
	*last = e;
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
 * maxcount, for a reply whose directory attributes are DIR_ATTR (notes 1-4,
 * 6).  The ids of every entry that could fit are assigned first, in one table
 * transaction; handles are made from them and attributes come from one stat
 * per entry (nfs3_rdp_entry), with no lookup and no other table access. */
static nfsstat3 nfs3_rdp_page(struct srv_req *req, struct nfs3_dir *d,
			      const READDIRPLUS3args *args, const post_op_attr *dir_attr,
			      dirlistplus3 *list)
{
	size_t n = un_listing_count(d->l), fixed = nfs3_dir_reply_size(dir_attr);
	size_t maxcount =
	    args->maxcount < srv_max_io(req) ? args->maxcount : srv_max_io(req);
	bool with_obj = nfs3_access_check(req, &d->f, ACCESS3_LOOKUP) == NFS3_OK;
	entryplus3 **link = &list->entries, *last = NULL;
	struct nfs3_rdp_budget b;
	size_t i = d->from, end, bound;
	un_id *ids, *fileids;
	nfsstat3 st;

	if (maxcount < fixed)
		return NFS3ERR_TOOSMALL;
	b.dir = args->dircount;
	b.max = maxcount - fixed;
	bound = nfs3_rdp_bound(d, b);
	st = nfs3_page_ids(req, d, bound, &ids, &fileids);
	for (; i < n && !st; i = end) {
		end = nfs3_group_end(d->l, i);
		if (end - d->from > bound ||
		    !nfs3_rdp_group(req, d, i, end, ids, fileids, with_obj, &b, link,
				    &last, &st))
			break;
		link = &last->nextentry;
	}
	*link = NULL; /* drops a group that was built but did not fit */
	if (st)
		return st;
	if (i == d->from && i < n)
		return NFS3ERR_TOOSMALL;
	list->eof = (i == n);
	return NFS3_OK;
}

static void nfs3_readdirplus(struct srv_req *req, void *argp, void *resp)
{
	READDIRPLUS3args *args = argp;
	READDIRPLUS3res *res = resp;
	READDIRPLUS3resok *ok = &res->READDIRPLUS3res_u.resok;
	post_op_attr dir_attr = {.attributes_follow = FALSE};
	struct nfs3_dir d;
	nfsstat3 st;

	st = nfs3_dir_open(req, &args->dir, args->cookie, args->cookieverf, &d);
	if (d.f.obj)
		nfs3_post_op(&d.f.attr, &dir_attr);
	if (!st)
		st = nfs3_rdp_page(req, &d, args, &dir_attr, &ok->reply);
	if (!st) {
		ok->dir_attributes = dir_attr;
		nfs3_verf_put(un_listing_verf(d.l), ok->cookieverf);
	} else {
		res->READDIRPLUS3res_u.resfail.dir_attributes = dir_attr;
	}
	nfs3_dir_close(&d);
	res->status = st;
}

/* ---- FSSTAT, FSINFO, PATHCONF ---- */

static void nfs3_fsstat(struct srv_req *req, void *argp, void *resp)
{
	FSSTAT3args *args = argp;
	FSSTAT3res *res = resp;
	FSSTAT3resok *ok = &res->FSSTAT3res_u.resok;
	struct un_statfs sf;
	struct nfs3_file f;
	nfsstat3 st;

	st = nfs3_file_get(req, &args->fsroot, &f);
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

static void nfs3_fsinfo(struct srv_req *req, void *argp, void *resp)
{
	FSINFO3args *args = argp;
	FSINFO3res *res = resp;
	FSINFO3resok *ok = &res->FSINFO3res_u.resok;
	struct nfs3_file f;

	res->status = nfs3_file_get(req, &args->fsroot, &f);
	if (res->status)
		return;
	nfs3_post_op(&f.attr, &ok->obj_attributes);
	/* Over UDP a reply must fit one datagram. */
	ok->rtmax = ok->rtpref = (uint32)srv_max_io(req);
	ok->wtmax = ok->wtpref = (uint32)srv_max_io(req);
	ok->rtmult = ok->wtmult = 4096;
	ok->dtpref = req->proto == IPPROTO_UDP ? 8 * 1024 : 64 * 1024;
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

static void nfs3_pathconf(struct srv_req *req, void *argp, void *resp)
{
	PATHCONF3args *args = argp;
	PATHCONF3res *res = resp;
	PATHCONF3resok *ok = &res->PATHCONF3res_u.resok;
	struct nfs3_file f;

	res->status = nfs3_file_get(req, &args->object, &f);
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

/* ---- the table ---- */

#define NFS3_PROC(NAME, handler_fn, idem)                                                \
	[NFSPROC3_##NAME] = {                                                            \
	    .name = #NAME,                                                               \
	    .decode_args = (xdrproc_t)xdr_##NAME##3args,                                 \
	    .args_size = sizeof(NAME##3args),                                            \
	    .encode_res = (xdrproc_t)xdr_##NAME##3res,                                   \
	    .res_size = sizeof(NAME##3res),                                              \
	    .handler = handler_fn,                                                       \
	    .idempotent = idem,                                                          \
	}

static const struct srv_proc nfs3_procs[] = {
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
    NFS3_PROC(GETATTR, nfs3_getattr, true),
    NFS3_PROC(SETATTR, nfs3_setattr, false),
    NFS3_PROC(LOOKUP, nfs3_lookup, true),
    NFS3_PROC(ACCESS, nfs3_access, true),
    NFS3_PROC(READLINK, nfs3_readlink, true),
    NFS3_PROC(READ, nfs3_read, true),
    NFS3_PROC(WRITE, nfs3_write, true),
    NFS3_PROC(CREATE, nfs3_create, false),
    NFS3_PROC(MKDIR, nfs3_mkdir, false),
    NFS3_PROC(SYMLINK, nfs3_symlink, false),
    NFS3_PROC(MKNOD, nfs3_mknod, false),
    NFS3_PROC(REMOVE, nfs3_remove, false),
    NFS3_PROC(RMDIR, nfs3_rmdir, false),
    NFS3_PROC(RENAME, nfs3_rename, false),
    NFS3_PROC(LINK, nfs3_link, false),
    NFS3_PROC(READDIR, nfs3_readdir, true),
    NFS3_PROC(READDIRPLUS, nfs3_readdirplus, true),
    NFS3_PROC(FSSTAT, nfs3_fsstat, true),
    NFS3_PROC(FSINFO, nfs3_fsinfo, true),
    NFS3_PROC(PATHCONF, nfs3_pathconf, true),
    NFS3_PROC(COMMIT, nfs3_commit, true),
};

const struct srv_program nfs3_program = {
    .name = "nfs",
    .prog = NFS_PROGRAM,
    .vers = NFS_V3,
    .procs = nfs3_procs,
    .nprocs = sizeof(nfs3_procs) / sizeof(nfs3_procs[0]),
    .caller_identity = true,
};
