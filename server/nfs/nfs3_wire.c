/* SPDX-License-Identifier: Apache-2.0 */
/* nfs3_wire.c - the NFSv3 wire code written by hand, beside what rpcgen
 * makes of rpc/nfs3_prot.x in the build tree: WRITE's decoder, READ's and
 * the directory listings' encoders.  Each writes or reads the same bytes as
 * rpcgen's routine of the same type, which it calls for every other
 * direction (XDR_FREE, XDR_DECODE of results, ...) and for the cases it
 * does not take.  The procedure table (nfs3_proc.c) names them.  (Not
 * named *_xdr.c: that is rpcgen's name for what it writes in build/gen/.)
 *
 * Rules:
 *  1. Bytes on the wire are rpcgen's: a procedure decoded or encoded here is
 *     decoded or encoded as xdr_<TYPE> would, which the unit tests check
 *     reply by reply (test_srv_nfs3.c).
 *  2. WRITE's data is lent, not copied: nfs3_xdr_write_args points the
 *     arguments into the call record, which outlives them (rpc/svc.c, 3), and
 *     XDR_FREE frees only a copy (the lent flag beside them says which).
 *  3. READ's data is not encoded: nfs3_xdr_read_res writes the opaque's
 *     length and the transport sends the bytes from the request's payload
 *     (rpc/svc.c, 7).
 *  4. A directory entry is written with one XDR_PUTBYTES from a buffer of
 *     NFS3_ENTRYPLUS3_MAX bytes (nfs3_xdr_entry3, nfs3_xdr_entryplus3); an
 *     entry that could not fit (a name or handle over the limits) goes
 *     through rpcgen's routines.
 */
#include <arpa/inet.h>
#include <string.h>

#include "nfs3_util.h"

/* ---- WRITE arguments ---- */

bool_t nfs3_xdr_write_args(XDR *x, struct nfs3_write_args *w)
{
	WRITE3args *a = &w->a;
	u_int len, pos;
	char *bytes;

	if (x->x_op == XDR_FREE && w->lent) {
		w->lent = false;
		a->data.data_val = NULL; /* the record's, not ours to free */
	}
	if (x->x_op != XDR_DECODE)
		return xdr_WRITE3args(x, a);
	w->lent = false;
	if (!xdr_nfs_fh3(x, &a->file) || !xdr_offset3(x, &a->offset) ||
	    !xdr_count3(x, &a->count) || !xdr_stable_how(x, &a->stable))
		return FALSE;
	pos = xdr_getpos(x);
	if (!xdr_u_int(x, &len) || len > NFS3_MAXDATA)
		return FALSE;
	/* len <= NFS3_MAXDATA: rounding it up to the XDR unit cannot wrap */
	bytes = (char *)xdr_inline(x, (len + 3) & ~3u);
	if (!bytes) /* a stream that cannot lend (or too short): the copy */
		return xdr_setpos(x, pos) &&
		       xdr_bytes(x, &a->data.data_val, &a->data.data_len, NFS3_MAXDATA);
	a->data.data_len = len;
	a->data.data_val = bytes;
	w->lent = true;
	return TRUE;
}

/* ---- READ results ---- */

/* READ's results as xdr_READ3res encodes them but for the data's bytes: the
 * opaque's length is written here, its bytes go out from the request's
 * payload (set on NFS3_OK only), not copied into the reply (rpc/svc.c, 7). */
bool_t nfs3_xdr_read_res(XDR *x, READ3res *r)
{
	READ3resok *ok = &r->READ3res_u.resok;

	if (x->x_op != XDR_ENCODE || r->status != NFS3_OK)
		return xdr_READ3res(x, r);
	return xdr_nfsstat3(x, &r->status) && xdr_post_op_attr(x, &ok->file_attributes) &&
	       xdr_count3(x, &ok->count) && xdr_bool(x, &ok->eof) &&
	       xdr_u_int(x, &ok->data.data_len);
}

/* ---- encoding READDIR and READDIRPLUS results ----
 *
 * rpcgen's encoders walk an entry list by recursion, one xdr_pointer frame
 * and a dozen calls per entry, and the dispatcher runs the encoder twice
 * (xdr_sizeof, then the encoding).  These write the same bytes in one
 * loop, one XDR_PUTBYTES per entry.  Anything but encoding goes to rpcgen's
 * functions. */

static uint32_t *nfs3_put32(uint32_t *p, uint32_t v)
{
	*p = htonl(v);
	return p + 1;
}

static uint32_t *nfs3_put64(uint32_t *p, uint64_t v)
{
	return nfs3_put32(nfs3_put32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

/* Writes LEN bytes of DATA as XDR opaque data: length, bytes, zero pad. */
static uint32_t *nfs3_put_opaque(uint32_t *p, const void *data, size_t len)
{
	p = nfs3_put32(p, (uint32_t)len);
	if (len % NFS3_XDR_UNIT)
		p[len / NFS3_XDR_UNIT] = 0;
	memcpy(p, data, len);
	return p + NFS3_XDR_RNDUP(len) / NFS3_XDR_UNIT;
}

static uint32_t *nfs3_put_time(uint32_t *p, const nfstime3 *t)
{
	return nfs3_put32(nfs3_put32(p, t->seconds), t->nseconds);
}

static uint32_t *nfs3_put_fattr(uint32_t *p, const fattr3 *a)
{
	p = nfs3_put32(p, (uint32_t)a->type);
	p = nfs3_put32(p, a->mode);
	p = nfs3_put32(p, a->nlink);
	p = nfs3_put32(p, a->uid);
	p = nfs3_put32(p, a->gid);
	p = nfs3_put64(p, a->size);
	p = nfs3_put64(p, a->used);
	p = nfs3_put32(p, a->rdev.specdata1);
	p = nfs3_put32(p, a->rdev.specdata2);
	p = nfs3_put64(p, a->fsid);
	p = nfs3_put64(p, a->fileid);
	p = nfs3_put_time(p, &a->atime);
	p = nfs3_put_time(p, &a->mtime);
	return nfs3_put_time(p, &a->ctime);
}

/* Writes the entry3 part of an entry, with the "value follows" word before
 * it, into P, which has nfs3_entry3_size(NAMELEN) bytes. */
static uint32_t *nfs3_put_entry3(uint32_t *p, uint64_t fileid, const char *fname,
				 size_t namelen, uint64_t cookie)
{
	p = nfs3_put32(p, TRUE);
	p = nfs3_put64(p, fileid);
	p = nfs3_put_opaque(p, fname, namelen);
	return nfs3_put64(p, cookie);
}

/* The largest entryplus3 with its "value follows" word: a 255-byte name,
 * attributes and a 64-byte handle. */
#define NFS3_ENTRYPLUS3_MAX                                                              \
	(4 * NFS3_XDR_UNIT + 8 + NFS3_XDR_RNDUP(NFS3_NAME_MAX) + 8 + NFS3_XDR_FATTR3 +   \
	 NFS3_FHSIZE)

/* Each entry is put together in a buffer of ours and handed to the stream
 * in one XDR_PUTBYTES: a copy into the reply for xdrmem, a mere count for
 * xdr_sizeof (whose XDR_INLINE would malloc a scratch buffer per entry). */
static bool nfs3_xdr_entry3(XDR *x, entry3 *e)
{
	uint32_t buf[NFS3_ENTRYPLUS3_MAX / NFS3_XDR_UNIT], *p;
	size_t len = strlen(e->name);
	bool_t more = TRUE;

	if (len > NFS3_NAME_MAX)
		return xdr_bool(x, &more) && xdr_fileid3(x, &e->fileid) &&
		       xdr_filename3(x, &e->name) && xdr_cookie3(x, &e->cookie);
	p = nfs3_put_entry3(buf, e->fileid, e->name, len, e->cookie);
	return XDR_PUTBYTES(x, (char *)buf, (u_int)((char *)p - (char *)buf));
}

static bool nfs3_xdr_entryplus3(XDR *x, entryplus3 *e)
{
	uint32_t buf[NFS3_ENTRYPLUS3_MAX / NFS3_XDR_UNIT], *p;
	const nfs_fh3 *fh = &e->name_handle.post_op_fh3_u.handle;
	size_t len = strlen(e->name);
	bool_t more = TRUE;

	if (len > NFS3_NAME_MAX || fh->data.data_len > NFS3_FHSIZE)
		return xdr_bool(x, &more) && xdr_fileid3(x, &e->fileid) &&
		       xdr_filename3(x, &e->name) && xdr_cookie3(x, &e->cookie) &&
		       xdr_post_op_attr(x, &e->name_attributes) &&
		       xdr_post_op_fh3(x, &e->name_handle);
	p = nfs3_put_entry3(buf, e->fileid, e->name, len, e->cookie);
	p = nfs3_put32(p, e->name_attributes.attributes_follow);
	if (e->name_attributes.attributes_follow)
		p = nfs3_put_fattr(p, &e->name_attributes.post_op_attr_u.attributes);
	p = nfs3_put32(p, e->name_handle.handle_follows);
	if (e->name_handle.handle_follows)
		p = nfs3_put_opaque(p, fh->data.data_val, fh->data.data_len);
	return XDR_PUTBYTES(x, (char *)buf, (u_int)((char *)p - (char *)buf));
}

/* The list's end marker and eof. */
static bool nfs3_xdr_list_end(XDR *x, bool_t eof)
{
	bool_t more = FALSE;

	return xdr_bool(x, &more) && xdr_bool(x, &eof);
}

bool_t nfs3_xdr_readdir_res(XDR *x, READDIR3res *r)
{
	READDIR3resok *ok = &r->READDIR3res_u.resok;

	if (x->x_op != XDR_ENCODE || r->status != NFS3_OK)
		return xdr_READDIR3res(x, r);
	if (!xdr_nfsstat3(x, &r->status) || !xdr_post_op_attr(x, &ok->dir_attributes) ||
	    !xdr_cookieverf3(x, ok->cookieverf))
		return FALSE;
	for (entry3 *e = ok->reply.entries; e; e = e->nextentry)
		if (!nfs3_xdr_entry3(x, e))
			return FALSE;
	return nfs3_xdr_list_end(x, ok->reply.eof);
}

bool_t nfs3_xdr_readdirplus_res(XDR *x, READDIRPLUS3res *r)
{
	READDIRPLUS3resok *ok = &r->READDIRPLUS3res_u.resok;

	if (x->x_op != XDR_ENCODE || r->status != NFS3_OK)
		return xdr_READDIRPLUS3res(x, r);
	if (!xdr_nfsstat3(x, &r->status) || !xdr_post_op_attr(x, &ok->dir_attributes) ||
	    !xdr_cookieverf3(x, ok->cookieverf))
		return FALSE;
	for (entryplus3 *e = ok->reply.entries; e; e = e->nextentry)
		if (!nfs3_xdr_entryplus3(x, e))
			return FALSE;
	return nfs3_xdr_list_end(x, ok->reply.eof);
}
