/* SPDX-License-Identifier: Apache-2.0 */
/* nfs3_util.h - helpers shared by the NFSv3 handlers (nfs3_util.c).
 *
 * Every helper that can fail returns an nfsstat3: errno values from the union
 * engine are turned into a status by nfs3_status_from_errno at the call site,
 * and nowhere else.  Reply data (handles, strings) is allocated from the
 * request's arena, so nothing here is freed by the handlers.
 */
#ifndef NFS3_UTIL_H
#define NFS3_UTIL_H

#include "nfs.h"

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
	bool client_ro; /* the caller's client rule is ro (srv_req.client) */
};

/* Resolves handle FH: its bytes must be a handle of this server
 * (NFS3ERR_BADHANDLE otherwise), name a served export and a node that still
 * exists (NFS3ERR_STALE otherwise).  On NFS3_OK, F holds a reference that the
 * caller drops with nfs3_file_put; on failure F is cleared and owns nothing. */
nfsstat3 nfs3_file_get(struct srv_req *req, const nfs_fh3 *fh, struct nfs3_file *f);
/* nfs3_file_get for a handler that only reads F->obj (its attributes, a
 * lookup in it, its id): the object may be the engine's shared one
 * (un_resolve_view), which nothing may change. */
nfsstat3 nfs3_file_view(struct srv_req *req, const nfs_fh3 *fh, struct nfs3_file *f);
/* nfs3_file_get of the handle the call is about (its table entry's), as
 * nfs3_admit resolved it: no second decoding, no second look-up of its
 * export.  A handle admit found no export for answers its status. */
nfsstat3 nfs3_call_file(struct srv_req *req, struct nfs3_file *f);
/* nfs3_call_file, with the engine's shared object (nfs3_file_view). */
nfsstat3 nfs3_call_file_view(struct srv_req *req, struct nfs3_file *f);
void nfs3_file_put(struct nfs3_file *f);
/* Whether F's export takes changes from this caller: a writable union and a
 * client rule that says rw. */
bool nfs3_file_writable(const struct nfs3_file *f);
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
 * export that is WRITABLE or not.  The procedures agree with it: LOOKUP,
 * READDIR and the changes of names check it on the merged directory (as the
 * kernel checks an overlayfs inode before acting on the layers), and the
 * calls on the layers themselves run with the caller's identity, where the
 * kernel checks the same bits on the same attributes.  Beyond it, READ and
 * WRITE let the owner of a regular file read and write it whatever its mode
 * says (nfs3_owner_override), but this mask, and so ACCESS, gives the owner
 * only what the owner's mode bits give, as knfsd's ACCESS does: a client
 * decides a new open() from ACCESS and must see a 0277 file refused for
 * reading, while its reads of the pages it wrote must not fail. */
uint32_t nfs3_access_mask(const struct rpc_cred *cred, const struct un_attr *a,
			  bool writable);
/* NFS3_OK if the caller holds every bit of WANT on F, else NFS3ERR_ACCES. */
nfsstat3 nfs3_access_check(const struct srv_req *req, const struct nfs3_file *f,
			   uint32_t want);

/* ---- the modifying procedures (nfs3_util.c) ---- */

/* NFS3ERR_ROFS unless F's export takes changes.  Checked right after the
 * handles are resolved, so a read-only union answers ROFS before any other
 * check, as knfsd does for a read-only export. */
nfsstat3 nfs3_writable(const struct nfs3_file *f);
/* What WRITE and COMMIT need of F: a regular file (NFS3ERR_ISDIR for a
 * directory, NFS3ERR_INVAL for anything else) in a writable export.  Whether
 * the caller may write it is the kernel's to say when WRITE writes; COMMIT
 * only makes durable what was written, which asks no permission of its
 * own (the engine syncs with its identity). */
nfsstat3 nfs3_data_check(const struct nfs3_file *f);
/* True when an operation on F that the kernel refused to REQ's caller with
 * EACCES is to be done again with the server's identity: the caller owns
 * F, a regular file.  A client that created a file 0444 and writes through
 * its open descriptor must be able to flush and read back its pages
 * (knfsd's owner override); a new open is checked by ACCESS, which grants
 * the owner neither READ nor WRITE beyond the mode bits. */
bool nfs3_owner_override(const struct srv_req *req, const struct nfs3_file *f);

/* Fills wcc_data OUT for F, which was changed (or may have been) since its
 * attributes were read: the attributes held in F before, the object's
 * attributes now after (F then holds them).  When they cannot be read the
 * post-op part says so instead of repeating the old ones. */
void nfs3_wcc_changed(struct nfs3_file *f, wcc_data *out);

/* Converts the client's SA into OUT: times SET_TO_SERVER_TIME become
 * UTIME_NOW.  NFS3ERR_INVAL for a client time with nseconds >= 10^9 or a
 * time_how outside the enum. */
nfsstat3 nfs3_sattr_get(const sattr3 *sa, struct un_sattr *out);
/* MODE's permission bits after a write or truncation by a caller without
 * CAP_FSETID: set-user-id and group-executable set-group-id cleared, as the
 * kernel does (for the owner override, which writes as the server). */
mode_t nfs3_mode_killpriv(mode_t mode);

/* ---- nfs3_write.c: the handlers of the modifying procedures ---- */
void nfs3_setattr(struct rpc_req *rq, void *argp, void *resp);
void nfs3_write(struct rpc_req *rq, void *argp, void *resp);
/* WRITE's arguments as the dispatcher holds them (the table's args_size):
 * the decoded WRITE3args first, so that the handler and the access check
 * read them as every procedure's, and what the decoder lent them. */
struct nfs3_write_args {
	WRITE3args a;
	bool lent; /* a.data's bytes are the call record's, not a copy */
};
void nfs3_create(struct rpc_req *rq, void *argp, void *resp);
void nfs3_mkdir(struct rpc_req *rq, void *argp, void *resp);
void nfs3_symlink(struct rpc_req *rq, void *argp, void *resp);
void nfs3_mknod(struct rpc_req *rq, void *argp, void *resp);
void nfs3_remove(struct rpc_req *rq, void *argp, void *resp);
void nfs3_rmdir(struct rpc_req *rq, void *argp, void *resp);
void nfs3_rename(struct rpc_req *rq, void *argp, void *resp);
void nfs3_link(struct rpc_req *rq, void *argp, void *resp);
void nfs3_commit(struct rpc_req *rq, void *argp, void *resp);

/* ---- nfs3_util.c: the access check ---- */
/* nfs3_program.admit: the caller's client rule for the export FH names, and
 * its squash (the contract at srv_req); false with NFS3ERR_ACCES in RES's
 * status when the caller gets nothing. */
bool nfs3_admit(struct rpc_req *rq, const void *fhp, void *res);

/* ---- nfs3_wire.c: wire code written by hand (the rest is rpcgen's) ---- */
/* WRITE's arguments as xdr_WRITE3args decodes them but for the data: its
 * bytes stay in the call record (xdr_inline), which outlives the arguments
 * (rpc/svc.c, 3), instead of a buffer the decoder allocates, zeroes and fills:
 * two passes over every byte written less.  A stream that cannot lend its
 * bytes (xdrmem over an unaligned buffer) gets the copy; XDR_FREE frees
 * only a copy, as W->lent says which it is. */
bool_t nfs3_xdr_write_args(XDR *x, struct nfs3_write_args *w);
/* READ's results as xdr_READ3res encodes them, but for the data's bytes,
 * which the reply carries as its payload (rpc/svc.c, 7). */
bool_t nfs3_xdr_read_res(XDR *x, READ3res *r);
/* READDIR's and READDIRPLUS's results as rpcgen encodes them, in one loop
 * over the entries instead of one recursion each. */
bool_t nfs3_xdr_readdir_res(XDR *x, READDIR3res *r);
bool_t nfs3_xdr_readdirplus_res(XDR *x, READDIRPLUS3res *r);

#endif
