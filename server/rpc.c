/* SPDX-License-Identifier: Apache-2.0 */
/* rpc.c - one call record in, one reply record out (RFC 5531).
 *
 * Design notes
 *
 * The transport hands srv_rpc_handle a complete call record; this file decodes
 * the call header, authenticates, finds the procedure in the program tables,
 * decodes the arguments with the procedure's rpcgen routine, runs the handler
 * and encodes the reply.  Every RPC-level error is decided here, in the order
 * the RFC and knfsd use: RPC version, then credentials, then program, version,
 * procedure, then arguments.
 *
 * Invariants:
 *  1. No reply without an xid, and no reply to a REPLY: both return false
 *     (srv_rpc_handle); nor to a call whose handler says so (req.no_reply,
 *     the portmapper's CALLIT).  Everything else gets exactly one reply
 *     record.
 *  2. Auth bodies are bounded by MAX_AUTH_BYTES (400) before a byte of them is
 *     copied (decode_opaque_auth); an AUTH_SYS body must decode exactly, with at
 *     most 16 groups and a machine name of at most 255 bytes (decode_authsys).
 *  3. Arguments are always released with xdr_free of their own decoder, also
 *     after a partial decode (run_call), and the arena is freed only after the
 *     reply has been encoded, since the results point into it.
 *  4. Dispatch is a table look-up (find_program, find_proc): no procedure
 *     number appears in this file.
 *  5. Every rejected call leaves one log line naming peer, xid and reason
 *     (log_reject).
 *  6. A handler runs with the caller's filesystem identity when its program
 *     asks for it, and the thread has the server's again when it returns
 *     (srv_call_handler in cred.c).
 *  7. A reply carries a payload (req.payload, READ's data) only when its
 *     results were encoded, by an encoder that wrote the opaque's length
 *     and left its bytes to the payload; XDR padding is added here
 *     (add_payload).  Only idempotent procedures set one, so a reply the
 *     duplicate request cache keeps is one flat buffer, and only over TCP
 *     may the payload be in a pipe (run_call sets req.payload_pipe).
 *  8. A payload goes in a pipe (spliced: the server copies none of it) only
 *     to a peer on another host.  To a loopback peer the receiver on this
 *     host then copies from page-cache pages no CPU cache holds, which is
 *     slower than the server's own copy from a reused buffer
 *     (payload_may_pipe; bench/README.md, GETATTR, LOOKUP and READ).
 */
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

#define RPC_VERSION	 2
#define NOBODY_ID	 65534
#define MACHINE_NAME_MAX 255

static const struct srv_program *const programs[] = {
    &nfs3_program, &mnt3_program,  &nlm4_program,  &nlm3_program,  &nlm1_program,
    &nsm1_program, &rpcb4_program, &rpcb3_program, &pmap2_program,
};
#define NPROGRAMS (sizeof(programs) / sizeof(programs[0]))

const struct srv_program *const *srv_rpc_programs(size_t *n)
{
	*n = NPROGRAMS;
	return programs;
}

/* The reply to send, decided step by step while reading the call. */
enum reply_kind {
	REPLY_NONE,	    /* drop the call */
	REPLY_RPC_MISMATCH, /* MSG_DENIED, RPC_MISMATCH */
	REPLY_AUTH_ERROR,   /* MSG_DENIED, AUTH_ERROR, stat = auth_stat */
	REPLY_ACCEPTED,	    /* MSG_ACCEPTED, stat = accept_stat */
};

struct verdict {
	enum reply_kind kind;
	uint32_t stat;
	uint32_t low, high; /* for RPC_MISMATCH and PROG_MISMATCH */
	const char *why;    /* for the log line of a rejected call */
};

struct opaque_auth_buf {
	uint32_t flavor;
	uint32_t len;
	char body[MAX_AUTH_BYTES];
};

/* One call in flight inside srv_rpc_handle. */
struct call {
	struct srv_req req;
	XDR xdr; /* the call record; positioned at the arguments after the header */
	struct opaque_auth_buf cred, verf;
	const struct srv_program *prog;
	size_t prog_index; /* in programs[] */
	const struct srv_proc *proc;
	void *args, *res;
};

static bool buf_reserve(struct srv_buf *b, size_t need)
{
	uint8_t *p;

	if (b->cap >= need)
		return true;
	p = realloc(b->data, need);
	if (!p)
		return false;
	b->data = p;
	b->cap = need;
	return true;
}

static const char *proto_name(int proto)
{
	return proto == IPPROTO_UDP ? "udp" : "tcp";
}

/* Rejected and dropped calls are logged under a limit each (a flood from
 * one client would bury the log), with a count of the rest. */
static struct srv_log_limit reject_limit, drop_limit;

static void log_reject(const struct call *c, const struct verdict *v)
{
	char peer[INET6_ADDRSTRLEN + 16] = "-";

	if (c->req.peer)
		srv_addr_str(c->req.peer, true, peer, sizeof(peer));
	srv_log_limited(&reject_limit, SRV_LOG_INFO,
			"rejected call from %s/%s xid %#x prog %u vers %u proc %u: %s",
			peer, proto_name(c->req.proto), c->req.xid, c->req.prog,
			c->req.vers, c->req.proc, v->why);
}

static void set_verdict(struct verdict *v, enum reply_kind kind, uint32_t stat,
			const char *why)
{
	v->kind = kind;
	v->stat = stat;
	v->why = why;
}

/* ---- call header ---- */

/* Reads an opaque_auth, refusing a body over MAX_AUTH_BYTES before copying it. */
static bool decode_opaque_auth(XDR *x, struct opaque_auth_buf *a)
{
	if (!xdr_u_int(x, &a->flavor) || !xdr_u_int(x, &a->len))
		return false;
	if (a->len > MAX_AUTH_BYTES)
		return false;
	return xdr_opaque(x, a->body, a->len);
}

/* Decodes an authsys_parms body (RFC 5531 appendix A) into CRED.  The body
 * must decode exactly: trailing bytes mean the client and we disagree. */
static bool decode_authsys(const struct opaque_auth_buf *a, struct srv_cred *cred)
{
	char machine[MACHINE_NAME_MAX + 1];
	uint32_t stamp, namelen, uid, gid, ngroups, g;
	XDR x;
	bool ok = false;

	xdrmem_create(&x, (char *)a->body, a->len, XDR_DECODE);
	if (!xdr_u_int(&x, &stamp) || !xdr_u_int(&x, &namelen))
		goto out;
	if (namelen > MACHINE_NAME_MAX || !xdr_opaque(&x, machine, namelen))
		goto out;
	if (!xdr_u_int(&x, &uid) || !xdr_u_int(&x, &gid) || !xdr_u_int(&x, &ngroups))
		goto out;
	if (ngroups > sizeof(cred->groups) / sizeof(cred->groups[0]))
		goto out;
	for (uint32_t i = 0; i < ngroups; i++) {
		if (!xdr_u_int(&x, &g))
			goto out;
		cred->groups[i] = g;
	}
	if (xdr_getpos(&x) != a->len)
		goto out;
	cred->flavor = AUTH_SYS;
	cred->uid = uid;
	cred->gid = gid;
	cred->ngroups = ngroups;
	ok = true;
out:
	xdr_destroy(&x);
	return ok;
}

/* Turns the call's credential into c->req.cred, or says why not. */
static bool authenticate(struct call *c, struct verdict *v)
{
	struct srv_cred *cred = &c->req.cred;

	switch (c->cred.flavor) {
	case AUTH_NONE:
		cred->flavor = AUTH_NONE;
		cred->uid = NOBODY_ID;
		cred->gid = NOBODY_ID;
		cred->ngroups = 0;
		return true;
	case AUTH_SYS:
		if (decode_authsys(&c->cred, cred))
			return true;
		set_verdict(v, REPLY_AUTH_ERROR, AUTH_BADCRED,
			    "malformed AUTH_SYS credential");
		return false;
	default:
		/* Well-formed but a flavour we do not serve (AUTH_DH, RPCSEC_GSS...). */
		set_verdict(v, REPLY_AUTH_ERROR, AUTH_TOOWEAK,
			    "unsupported auth flavour");
		return false;
	}
}

/* Reads xid and message type.  False: no reply can or must be sent. */
static bool decode_xid(struct call *c)
{
	uint32_t mtype;

	if (!xdr_u_int(&c->xdr, &c->req.xid)) {
		srv_log_limited(&drop_limit, SRV_LOG_INFO,
				"dropped a %s record of %u bytes: no xid",
				proto_name(c->req.proto), xdr_getpos(&c->xdr));
		return false;
	}
	if (!xdr_u_int(&c->xdr, &mtype) || mtype != CALL) {
		srv_log_limited(&drop_limit, SRV_LOG_INFO,
				"dropped %s record xid %#x: not an RPC call",
				proto_name(c->req.proto), c->req.xid);
		return false;
	}
	return true;
}

/* Reads RPC version, program, version, procedure and both auth fields, and
 * authenticates.  False with V set when the call is rejected. */
static bool decode_header(struct call *c, struct verdict *v)
{
	uint32_t rpcvers;

	if (!xdr_u_int(&c->xdr, &rpcvers)) {
		set_verdict(v, REPLY_AUTH_ERROR, AUTH_BADCRED, "truncated call header");
		return false;
	}
	if (rpcvers != RPC_VERSION) {
		set_verdict(v, REPLY_RPC_MISMATCH, 0, "RPC version not 2");
		v->low = v->high = RPC_VERSION;
		return false;
	}
	if (!xdr_u_int(&c->xdr, &c->req.prog) || !xdr_u_int(&c->xdr, &c->req.vers) ||
	    !xdr_u_int(&c->xdr, &c->req.proc) || !decode_opaque_auth(&c->xdr, &c->cred)) {
		set_verdict(v, REPLY_AUTH_ERROR, AUTH_BADCRED,
			    "truncated call header or credential over 400 bytes");
		return false;
	}
	if (!decode_opaque_auth(&c->xdr, &c->verf)) {
		set_verdict(v, REPLY_AUTH_ERROR, AUTH_BADVERF,
			    "truncated verifier or verifier over 400 bytes");
		return false;
	}
	return authenticate(c, v);
}

/* ---- dispatch ---- */

/* Finds the program and version of the call, or sets the verdict: PROG_UNAVAIL
 * if no version of the program is served, else PROG_MISMATCH with the range. */
static const struct srv_program *find_program(struct call *c, struct verdict *v)
{
	uint32_t low = UINT32_MAX, high = 0;

	for (size_t i = 0; i < NPROGRAMS; i++) {
		if (programs[i]->prog != c->req.prog ||
		    (programs[i]->served && !programs[i]->served(c->req.srv)))
			continue;
		if (programs[i]->vers == c->req.vers) {
			c->prog_index = i;
			return programs[i];
		}
		low = programs[i]->vers < low ? programs[i]->vers : low;
		high = programs[i]->vers > high ? programs[i]->vers : high;
	}
	if (low > high) {
		set_verdict(v, REPLY_ACCEPTED, PROG_UNAVAIL, "program not served");
	} else {
		set_verdict(v, REPLY_ACCEPTED, PROG_MISMATCH,
			    "program version not served");
		v->low = low;
		v->high = high;
	}
	return NULL;
}

/* A hole in a table built with designated initializers is all zeroes. */
static const struct srv_proc *find_proc(const struct srv_program *p, uint32_t proc,
					struct verdict *v)
{
	const struct srv_proc *sp;

	if (proc < p->nprocs) {
		sp = &p->procs[proc];
		if (sp->name || sp->handler || sp->decode_args)
			return sp;
	}
	set_verdict(v, REPLY_ACCEPTED, PROC_UNAVAIL, "procedure not served");
	return NULL;
}

static xdrproc_t or_void(xdrproc_t proc)
{
	return proc ? proc : (xdrproc_t)(void (*)(void))xdr_void;
}

static atomic_bool splice_loopback; /* test hook: splice to loopback peers too */

void srv_rpc_test_splice_loopback(bool on)
{
	atomic_store(&splice_loopback, on);
}

bool srv_addr_is_loopback(const struct sockaddr_storage *ss)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

	if (ss->ss_family == AF_INET)
		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family != AF_INET6)
		return false;
	if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
		return s6->sin6_addr.s6_addr[12] == 127;
	return IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
}

/* Whether C's payload may go in a pipe (invariants 7 and 8). */
static bool payload_may_pipe(const struct call *c)
{
	if (c->req.proto != IPPROTO_TCP || !c->proc->idempotent)
		return false;
	return !c->req.peer || !srv_addr_is_loopback(c->req.peer) ||
	       atomic_load(&splice_loopback);
}

/* Decodes the arguments and runs the handler; the args stay for run_call's
 * caller to release.  False with V set on GARBAGE_ARGS or no memory. */
static bool run_call(struct call *c, struct verdict *v)
{
	const struct srv_proc *p = c->proc;

	c->req.payload_pipe = payload_may_pipe(c);
	c->args = srv_arena_alloc(c->req.arena, p->args_size);
	c->res = srv_arena_alloc(c->req.arena, p->res_size);
	if (!c->args || !c->res) {
		set_verdict(v, REPLY_ACCEPTED, SYSTEM_ERR, "out of memory");
		return false;
	}
	if (!or_void(p->decode_args)(&c->xdr, c->args)) {
		set_verdict(v, REPLY_ACCEPTED, GARBAGE_ARGS, "arguments do not decode");
		return false;
	}
	srv_log(SRV_LOG_DEBUG, "xid %#x %s %s", c->req.xid, p->name ? p->name : "?",
		proto_name(c->req.proto));
	/* The program's access check of the handle the procedure names (both
	 * from the tables); a refused call is answered with the status the
	 * check put in its results. */
	if (p->has_fh && c->prog->admit &&
	    !c->prog->admit(&c->req, srv_proc_fh(p, c->args), c->res)) {
		set_verdict(v, REPLY_ACCEPTED, SUCCESS, NULL);
		return true;
	}
	if (!srv_call_handler(c->prog, p, &c->req, c->args, c->res)) {
		set_verdict(v, REPLY_ACCEPTED, SYSTEM_ERR, "caller's identity not taken");
		return false;
	}
	if (c->req.no_reply) {
		set_verdict(v, REPLY_NONE, 0, "answered with no reply");
		return false;
	}
	set_verdict(v, REPLY_ACCEPTED, SUCCESS, NULL);
	return true;
}

/* ---- reply ---- */

/* Largest reply header: xid, REPLY, MSG_ACCEPTED, verf (2), stat, low, high. */
#define REPLY_HDR_MAX (8 * 4)

static bool encode_header(XDR *x, uint32_t xid, const struct verdict *v)
{
	uint32_t w[8];
	size_t n = 0;
	bool ok = true;

	w[n++] = xid;
	w[n++] = REPLY;
	if (v->kind == REPLY_ACCEPTED) {
		w[n++] = MSG_ACCEPTED;
		w[n++] = AUTH_NONE; /* verifier: AUTH_NONE, empty */
		w[n++] = 0;
		w[n++] = v->stat;
		if (v->stat == PROG_MISMATCH) {
			w[n++] = v->low;
			w[n++] = v->high;
		}
	} else {
		w[n++] = MSG_DENIED;
		if (v->kind == REPLY_RPC_MISMATCH) {
			w[n++] = RPC_MISMATCH;
			w[n++] = v->low;
			w[n++] = v->high;
		} else {
			w[n++] = AUTH_ERROR;
			w[n++] = v->stat;
		}
	}
	for (size_t i = 0; i < n && ok; i++)
		ok = xdr_u_int(x, &w[i]);
	return ok;
}

/* Puts the payload C's handler left (invariant 7) behind the results encoded
 * in OUT, zero-padded to XDR's 4 bytes, as OUT's own payload. */
static void add_payload(const struct call *c, struct srv_buf *out)
{
	struct srv_payload *p = srv_arena_payload_take(c->req.arena, c->req.payload);
	size_t pad = (4 - ((p->piped + p->len) & 3)) & 3;

	/* The duplicate request cache copies a reply's bytes, not its payload:
	 * only idempotent procedures, which it never keeps, may set one. */
	assert(c->proc->idempotent);
	assert(p->len + pad <= p->cap);
	memset(p->data + p->len, 0, pad);
	p->len += pad;
	out->payload = p;
}

/* Encodes the reply for V (with the results when it is SUCCESS) into OUT.  An
 * encoder failure becomes SYSTEM_ERR; false only when out of memory. */
static bool encode_reply(const struct call *c, struct verdict *v, struct srv_buf *out)
{
	xdrproc_t enc = (v->stat == SUCCESS && v->kind == REPLY_ACCEPTED)
			    ? or_void(c->proc->encode_res)
			    : NULL;
	size_t size = REPLY_HDR_MAX;
	XDR x;
	bool ok;

	srv_payload_put(out->payload);
	out->payload = NULL;
	if (enc)
		size += xdr_sizeof(enc, c->res);
	if (!buf_reserve(out, size))
		return false;
	xdrmem_create(&x, (char *)out->data, (u_int)size, XDR_ENCODE);
	ok = encode_header(&x, c->req.xid, v) && (!enc || enc(&x, c->res));
	out->len = xdr_getpos(&x);
	xdr_destroy(&x);
	if (ok && enc && c->req.payload)
		add_payload(c, out);
	if (ok)
		return true;
	SRV_LOG_LIMITED(SRV_LOG_ERR, "xid %#x %s: results do not encode", c->req.xid,
			c->proc && c->proc->name ? c->proc->name : "?");
	set_verdict(v, REPLY_ACCEPTED, SYSTEM_ERR, "results do not encode");
	return encode_reply(c, v, out);
}

/* The duplicate request cache's word on call C, whose record is REC[0..len)
 * and whose arguments start where C's stream stands.  SRV_DRC_UNCACHED for
 * idempotent procedures; on SRV_DRC_REPLAY the first reply is in REPLY. */
static enum srv_drc_verdict drc_check(struct call *c, const uint8_t *rec, size_t len,
				      struct srv_drc_key *k, struct srv_buf *reply)
{
	struct srv_drc *d = c->req.srv->drc;
	u_int pos = xdr_getpos(&c->xdr);

	if (!d || c->proc->idempotent || !c->req.peer || pos > len)
		return SRV_DRC_UNCACHED;
	srv_drc_key_init(d, k, c->req.peer, c->req.xid, c->req.prog, c->req.vers,
			 c->req.proc, rec + pos, len - pos);
	return srv_drc_begin(d, k, reply);
}

bool srv_rpc_handle(struct srv *s, const uint8_t *call, size_t len,
		    const struct sockaddr_storage *peer, socklen_t peerlen, int proto,
		    struct srv_buf *reply)
{
	struct call c = {
	    .req = {.srv = s, .peer = peer, .peerlen = peerlen, .proto = proto},
	};
	struct verdict v = {.kind = REPLY_NONE};
	enum srv_drc_verdict drc = SRV_DRC_UNCACHED;
	struct srv_mcall mc = {0};
	struct srv_drc_key key;
	bool sent = false;

	reply->len = 0;
	if (len > UINT32_MAX)
		return false;
	srv_exports_read_begin(s); /* exports found stay open (server.c, 1) */
	xdrmem_create(&c.xdr, (char *)call, (u_int)len, XDR_DECODE);
	if (!decode_xid(&c))
		goto out_xdr;
	c.req.arena = srv_arena_new();
	if (!c.req.arena) {
		set_verdict(&v, REPLY_ACCEPTED, SYSTEM_ERR, "out of memory");
		goto reply;
	}
	if (!decode_header(&c, &v))
		goto reply;
	c.prog = find_program(&c, &v);
	if (!c.prog)
		goto reply;
	c.proc = find_proc(c.prog, c.req.proc, &v);
	if (!c.proc)
		goto reply;
	drc = drc_check(&c, call, len, &key, reply);
	if (drc == SRV_DRC_REPLAY || drc == SRV_DRC_BUSY) {
		SRV_LOG_LIMITED(SRV_LOG_INFO, "xid %#x: retransmission %s", c.req.xid,
				drc == SRV_DRC_REPLAY ? "answered from the cache"
						      : "dropped");
		sent = drc == SRV_DRC_REPLAY;
		if (sent)
			srv_metrics_drc_hit(s);
		goto out_arena;
	}
	srv_metrics_begin(s, &mc);
	run_call(&c, &v);
reply:
	if (v.kind != REPLY_ACCEPTED || v.stat != SUCCESS)
		log_reject(&c, &v);
	if (v.kind == REPLY_NONE)
		goto out_arena;
	sent = encode_reply(&c, &v, reply);
	if (!sent)
		SRV_LOG_LIMITED(SRV_LOG_ERR, "xid %#x: out of memory for the reply",
				c.req.xid);
	if (drc == SRV_DRC_NEW)
		srv_drc_done(s->drc, &key, sent ? reply : NULL);
	srv_metrics_end(&mc, c.prog_index, c.prog, c.proc, &c.req, c.res,
			v.kind == REPLY_ACCEPTED ? v.stat : SUCCESS);
out_arena:
	if (c.args)
		xdr_free(or_void(c.proc->decode_args), c.args);
	srv_arena_free(c.req.arena);
out_xdr:
	xdr_destroy(&c.xdr);
	srv_unions_unpin(&c.req);
	srv_exports_read_end(s);
	return sent;
}
