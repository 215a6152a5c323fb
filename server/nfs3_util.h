/* nfs3_util.h - helpers shared by the NFSv3 handlers (nfs3_util.c).
 *
 * Every helper that can fail returns an nfsstat3: errno values from the union
 * engine are turned into a status by nfs3_status_from_errno at the call site,
 * and nowhere else.  Reply data (handles, strings) is allocated from the
 * request's arena, so nothing here is freed by the handlers.
 */
#ifndef NFS3_UTIL_H
#define NFS3_UTIL_H

#include "srv.h"

/* The longest name a client may use for one path component.  The XDR layer
 * lets longer names through (filename3<1024>) so that they get
 * NFS3ERR_NAMETOOLONG here instead of GARBAGE_ARGS. */
#define NFS3_NAME_MAX 255

/* Encoded XDR sizes (RFC 1813 section 2.5), for reply size accounting. */
#define NFS3_XDR_UNIT	    4u
#define NFS3_XDR_FATTR3	    84u /* 5 x uint32 + 8 x 8-byte fields */
#define NFS3_XDR_RNDUP(len) (((size_t)(len) + 3u) & ~(size_t)3u)

/* One object named by a client's file handle, with its attributes as they were
 * when it was resolved (the pre-operation attributes). */
struct nfs3_file {
	struct srv_export *ex;
	struct un_obj *obj; /* owned: nfs3_file_put */
	struct un_attr attr;
};

/* Resolves handle FH: its bytes must be a handle of this server
 * (NFS3ERR_BADHANDLE otherwise), name a served export and a node that still
 * exists (NFS3ERR_STALE otherwise).  On NFS3_OK, F holds a reference that the
 * caller drops with nfs3_file_put; on failure F is cleared and owns nothing. */
nfsstat3 nfs3_file_get(struct srv_req *req, const nfs_fh3 *fh, struct nfs3_file *f);
void nfs3_file_put(struct nfs3_file *f);
/* Re-reads F's attributes (after an operation that may have changed them);
 * false if they could not be read, F's old attributes then stay. */
bool nfs3_file_refresh(struct nfs3_file *f);

/* Sets FH to the handle of node ID of EX, its bytes in the request's arena. */
nfsstat3 nfs3_fh_set(struct srv_req *req, const struct srv_export *ex, un_id id,
		     nfs_fh3 *fh);

/* Attribute conversions: union attributes to fattr3, post-op and wcc forms. */
void nfs3_fattr(const struct un_attr *a, fattr3 *out);
void nfs3_post_op(const struct un_attr *a, post_op_attr *out);
/* wcc_data from the attributes BEFORE and AFTER an operation (the same
 * attributes for an operation that changed nothing). */
void nfs3_wcc(const struct un_attr *before, const struct un_attr *after, wcc_data *out);
/* The XDR size of a post-op attribute as set (with or without attributes). */
size_t nfs3_post_op_xdr_size(const post_op_attr *p);

/* Checks FNAME for use as one path component inside a directory:
 * NFS3ERR_ACCES for an empty name or one holding '/' (what knfsd answers, and
 * an error RFC 1813 allows for every procedure taking a name),
 * NFS3ERR_NAMETOOLONG above NFS3_NAME_MAX bytes. */
nfsstat3 nfs3_name_check(const char *fname);

/* The ACCESS3_* bits that CRED holds on an object with attributes A in an
 * export that is WRITABLE or not.  This one function decides every permission
 * of the read path, so what ACCESS promises is what the operations then do. */
uint32_t nfs3_access_mask(const struct srv_cred *cred, const struct un_attr *a,
			  bool writable);
/* NFS3_OK if the caller holds every bit of WANT on F, else NFS3ERR_ACCES. */
nfsstat3 nfs3_access_check(const struct srv_req *req, const struct nfs3_file *f,
			   uint32_t want);

/* The answer of every modifying procedure until the union engine has a write
 * API: NFS3ERR_ROFS.  The write issue replaces the calls of this function by
 * the union's write operations. */
nfsstat3 nfs3_write_unsupported(const struct nfs3_file *f);

#endif
