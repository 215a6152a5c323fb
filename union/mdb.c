/* SPDX-License-Identifier: Apache-2.0 */
/* mdb.c - LMDB's return codes in the engine's terms: 0 or -errno.
 *
 * Both users of LMDB share it, the node table (node.c, state.c, sync.c,
 * stats.c) and the layer indexes (lindex.c), so it calls nothing: every
 * file that talks to LMDB may call it without calling up.
 */
#include <errno.h>

#include "un_private.h"

int un_mdb_err(int rc)
{
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_MAP_FULL:
	case MDB_DBS_FULL:
		return -ENOSPC;
	case MDB_READERS_FULL:
	case MDB_TXN_FULL:
		return -EAGAIN;
	default:
		/* LMDB passes system errors through as positive errnos. */
		return rc > 0 ? -rc : -EIO;
	}
}
