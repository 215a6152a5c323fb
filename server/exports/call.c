/* SPDX-License-Identifier: Apache-2.0 */
/* call.c - a call served against the exports: the part of dispatch that the
 * programs of the exports (NFS, MOUNT, NLM) share, as fs/nfsd's programs
 * share nfsd_dispatch.  The RPC layer found the program and procedure; this
 * gives the call its server request, holds the export table for it, and
 * after the reply is encoded counts it and drops the client unions it
 * pinned.
 */
#include "exports.h"

void srv_call_serve(struct srv *s, struct rpc_call *call, struct rpc_req *rq, bool writes)
{
	struct srv_req req = {.rpc = rq, .srv = s, .writes = writes};

	rq->ctx = &req;
	srv_exports_read_begin(s); /* exports found stay open (table.c, 1) */
	rpc_call_run(call);
	if (req.ex && s->counting)
		srv_count_call(&req);
	srv_unions_unpin(&req);
	srv_exports_read_end(s);
	rq->ctx = NULL;
}
