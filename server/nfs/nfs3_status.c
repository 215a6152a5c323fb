/* SPDX-License-Identifier: Apache-2.0 */
/* nfs3_status.c - the one map from errno to nfsstat3.
 *
 * The union engine speaks negative errno values; the handlers answer with
 * nfsstat3.  Every conversion goes through nfs3_status_from_errno, so the
 * protocol's view of a failure is decided in this one table.  A table rather
 * than a switch because several errno names share a value on Linux (EAGAIN
 * and EWOULDBLOCK, ENOTSUP and EOPNOTSUPP) and a switch would not compile
 * with both.
 */
#define _GNU_SOURCE /* the strerror_r that returns a string */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "nfs.h"

static const struct {
	int err;
	nfsstat3 status;
} nfs3_errno_map[] = {
    {0, NFS3_OK},
    {EPERM, NFS3ERR_PERM},
    {ENOENT, NFS3ERR_NOENT},
    {EIO, NFS3ERR_IO},
    {ENXIO, NFS3ERR_NXIO},
    {EACCES, NFS3ERR_ACCES},
    {EEXIST, NFS3ERR_EXIST},
    {EXDEV, NFS3ERR_XDEV},
    {ENODEV, NFS3ERR_NODEV},
    {ENOTDIR, NFS3ERR_NOTDIR},
    {EISDIR, NFS3ERR_ISDIR},
    {EINVAL, NFS3ERR_INVAL},
    {EFBIG, NFS3ERR_FBIG},
    {ENOSPC, NFS3ERR_NOSPC},
    {EROFS, NFS3ERR_ROFS},
    {EMLINK, NFS3ERR_MLINK},
    {ENAMETOOLONG, NFS3ERR_NAMETOOLONG},
    {ENOTEMPTY, NFS3ERR_NOTEMPTY},
    {EDQUOT, NFS3ERR_DQUOT},
    {ESTALE, NFS3ERR_STALE},
    /* The union engine's word for "these bytes are no handle of ours". */
    {EBADMSG, NFS3ERR_BADHANDLE},
    {ENOTSUP, NFS3ERR_NOTSUPP},
    {EOPNOTSUPP, NFS3ERR_NOTSUPP},
    /* A resource that is busy for now (a copy-up in progress, a lock held
     * elsewhere): the client retries later instead of failing. */
    {EAGAIN, NFS3ERR_JUKEBOX},
    {EWOULDBLOCK, NFS3ERR_JUKEBOX},
};

nfsstat3 nfs3_status_from_errno(int err)
{
	static struct rpc_log_limit limit;
	char buf[128];

	assert(err <= 0);
	for (size_t i = 0; i < sizeof(nfs3_errno_map) / sizeof(nfs3_errno_map[0]); i++)
		if (nfs3_errno_map[i].err == -err)
			return nfs3_errno_map[i].status;
	/* Anything else (ENOMEM, EMFILE, ELOOP, ...) is a fault of this server
	 * that the client cannot act on; say so in the log, where an operator
	 * can, under a limit: such a fault tends to fail every call. */
	rpc_log_limited(&limit, RPC_LOG_ERR,
			"nfs3: unexpected error %d (%s), answering SERVERFAULT", -err,
			strerror_r(-err, buf, sizeof(buf)));
	return NFS3ERR_SERVERFAULT;
}

/* ---- the status names (the metrics' errors by status) ---- */

#define ST(x)                                                                            \
	{                                                                                \
		x, #x                                                                    \
	}
const struct rpc_status_name nfs3_status_names[NFS3_NSTATUS_NAMES] = {
    ST(NFS3_OK),	   ST(NFS3ERR_PERM),	    ST(NFS3ERR_NOENT),
    ST(NFS3ERR_IO),	   ST(NFS3ERR_NXIO),	    ST(NFS3ERR_ACCES),
    ST(NFS3ERR_EXIST),	   ST(NFS3ERR_XDEV),	    ST(NFS3ERR_NODEV),
    ST(NFS3ERR_NOTDIR),	   ST(NFS3ERR_ISDIR),	    ST(NFS3ERR_INVAL),
    ST(NFS3ERR_FBIG),	   ST(NFS3ERR_NOSPC),	    ST(NFS3ERR_ROFS),
    ST(NFS3ERR_MLINK),	   ST(NFS3ERR_NAMETOOLONG), ST(NFS3ERR_NOTEMPTY),
    ST(NFS3ERR_DQUOT),	   ST(NFS3ERR_STALE),	    ST(NFS3ERR_REMOTE),
    ST(NFS3ERR_BADHANDLE), ST(NFS3ERR_NOT_SYNC),    ST(NFS3ERR_BAD_COOKIE),
    ST(NFS3ERR_NOTSUPP),   ST(NFS3ERR_TOOSMALL),    ST(NFS3ERR_SERVERFAULT),
    ST(NFS3ERR_BADTYPE),   ST(NFS3ERR_JUKEBOX),
};

/* Every NFSv3 result but NULL's begins with its nfsstat3. */
bool nfs3_result_status(const struct rpc_proc *p, const void *res, uint32_t *code)
{
	if (p->res_size < sizeof(nfsstat3))
		return false;
	*code = *(const nfsstat3 *)res;
	return true;
}
