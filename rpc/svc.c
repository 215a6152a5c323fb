/* SPDX-License-Identifier: Apache-2.0 */
/* svc.c - the programs registered, and one call record in, one reply
 * record out (RFC 5531).
 *
 * Design notes
 *
 * Programs register themselves (rpc_svc_register); this file knows none of
 * them.  The transport hands rpc_process a complete call record; it decodes
 * the call header, authenticates, finds the program and procedure among the
 * registered ones and hands the call to the program's dispatcher, which
 * runs it with rpc_call_run inside what the program needs around it (its
 * locks, its context, its counters): the duplicate request cache's check,
 * the arguments decoded with the procedure's rpcgen routine, the program's
 * admission check, the handler, the reply encoded.  Every RPC-level error is
 * decided here, in the order the RFC and knfsd use: RPC version, then
 * credentials, then program, version, procedure, then arguments.
 *
 * Invariants:
 *  1. No reply without an xid, and no reply to a REPLY: both return false
 *     (rpc_process); nor to a call whose handler says so (req.no_reply,
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
 *  6. A handler runs through its program's invoke hook when it has one (the
 *     exports' srv_call_handler gives it the caller's filesystem identity,
 *     and the server's again when it returns); a hook that cannot run it
 *     makes the call SYSTEM_ERR (invoke, run_call).
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
 *  9. A call whose program and procedure were found runs rpc_call_run once,
 *     from its program's dispatcher (or bare, without one), and its reply
 *     is encoded inside it, while what the dispatcher holds around it (the
 *     exports' lock, the pins of the unions the results point into) still
 *     holds; the arguments and the arena are freed after the dispatcher
 *     returned (rpc_process asserts it ran).
 */
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_private.h"

#define RPC_VERSION	 2
#define NOBODY_ID	 65534
#define MACHINE_NAME_MAX 255

/* ---- the registry ---- */

int rpc_svc_new(size_t drc_capacity, struct rpc_svc **out)
{
	struct rpc_svc *svc = calloc(1, sizeof(*svc));

	*out = NULL;
	if (!svc)
		return -ENOMEM;
	if (drc_capacity && rpc_drc_new(drc_capacity, &svc->drc) < 0) {
		free(svc);
		return -ENOMEM;
	}
	*out = svc;
	return 0;
}

void rpc_svc_free(struct rpc_svc *svc)
{
	if (!svc)
		return;
	rpc_counts_free(svc->counts);
	rpc_drc_free(svc->drc);
	free(svc);
}

int rpc_svc_register(struct rpc_svc *svc, const struct rpc_program *prog,
		     const char *service, void *arg)
{
	for (size_t i = 0; i < svc->nregs; i++)
		if (svc->regs[i].prog->prog == prog->prog &&
		    svc->regs[i].prog->vers == prog->vers)
			return -EEXIST;
	if (svc->nregs == RPC_SVC_MAX_PROGRAMS)
		return -ENOSPC;
	svc->regs[svc->nregs] =
	    (struct rpc_reg){.prog = prog, .service = service, .arg = arg};
	svc->nregs++;
	return 0;
}

size_t rpc_svc_nprograms(const struct rpc_svc *svc)
{
	return svc->nregs;
}

const struct rpc_program *rpc_svc_program(const struct rpc_svc *svc, size_t i)
{
	return i < svc->nregs ? svc->regs[i].prog : NULL;
}

void rpc_svc_bound(struct rpc_svc *svc, const char *service, uint16_t port)
{
	if (svc->nports < RPC_SVC_MAX_SERVICES)
		svc->ports[svc->nports++] = (struct rpc_port){service, port};
}

uint16_t rpc_svc_service_port(const struct rpc_svc *svc, const char *service)
{
	for (size_t i = 0; i < svc->nports; i++)
		if (!strcmp(svc->ports[i].name, service))
			return svc->ports[i].port;
	return 0;
}

uint16_t rpc_svc_port(const struct rpc_svc *svc, uint32_t prog, uint32_t vers)
{
	for (size_t i = 0; i < svc->nregs; i++)
		if (svc->regs[i].prog->prog == prog &&
		    (!vers || svc->regs[i].prog->vers == vers))
			return rpc_svc_service_port(svc, svc->regs[i].service);
	return 0;
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

/* One call in flight inside rpc_process. */
struct rpc_call {
	struct rpc_svc *svc;
	struct rpc_req req;
	XDR xdr; /* the call record; positioned at the arguments after the header */
	const uint8_t *rec; /* the record, LEN bytes */
	size_t len;
	struct opaque_auth_buf cred, verf;
	const struct rpc_program *prog;
	size_t prog_index; /* in the registry */
	const struct rpc_proc *proc;
	void *args, *res;
	struct verdict v;
	struct rpc_buf *reply;
	bool sent; /* REPLY holds the reply to send */
	bool ran;  /* rpc_call_run ran */
};

static bool buf_reserve(struct rpc_buf *b, size_t need)
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
static struct rpc_log_limit reject_limit, drop_limit;

static void log_reject(const struct rpc_call *c, const struct verdict *v)
{
	char peer[INET6_ADDRSTRLEN + 16] = "-";

	if (c->req.peer)
		rpc_addr_str(c->req.peer, true, peer, sizeof(peer));
	rpc_log_limited(&reject_limit, RPC_LOG_INFO,
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
static bool decode_authsys(const struct opaque_auth_buf *a, struct rpc_cred *cred)
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
static bool authenticate(struct rpc_call *c, struct verdict *v)
{
	struct rpc_cred *cred = &c->req.cred;

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
static bool decode_xid(struct rpc_call *c)
{
	uint32_t mtype;

	if (!xdr_u_int(&c->xdr, &c->req.xid)) {
		rpc_log_limited(&drop_limit, RPC_LOG_INFO,
				"dropped a %s record of %u bytes: no xid",
				proto_name(c->req.proto), xdr_getpos(&c->xdr));
		return false;
	}
	if (!xdr_u_int(&c->xdr, &mtype) || mtype != CALL) {
		rpc_log_limited(&drop_limit, RPC_LOG_INFO,
				"dropped %s record xid %#x: not an RPC call",
				proto_name(c->req.proto), c->req.xid);
		return false;
	}
	return true;
}

/* Reads RPC version, program, version, procedure and both auth fields, and
 * authenticates.  False with V set when the call is rejected. */
static bool decode_header(struct rpc_call *c, struct verdict *v)
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
static const struct rpc_program *find_program(struct rpc_call *c, struct verdict *v)
{
	uint32_t low = UINT32_MAX, high = 0;

	const struct rpc_svc *svc = c->svc;

	for (size_t i = 0; i < svc->nregs; i++) {
		const struct rpc_reg *r = &svc->regs[i];

		if (r->prog->prog != c->req.prog ||
		    (r->prog->served && !r->prog->served(r->arg)))
			continue;
		if (r->prog->vers == c->req.vers) {
			c->prog_index = i;
			c->req.arg = r->arg;
			return r->prog;
		}
		low = r->prog->vers < low ? r->prog->vers : low;
		high = r->prog->vers > high ? r->prog->vers : high;
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
static const struct rpc_proc *find_proc(const struct rpc_program *p, uint32_t proc,
					struct verdict *v)
{
	const struct rpc_proc *sp;

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

void rpc_test_splice_loopback(bool on)
{
	atomic_store(&splice_loopback, on);
}

bool rpc_addr_is_loopback(const struct sockaddr_storage *ss)
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
static bool payload_may_pipe(const struct rpc_call *c)
{
	if (c->req.proto != IPPROTO_TCP || !c->proc->idempotent)
		return false;
	return !c->req.peer || !rpc_addr_is_loopback(c->req.peer) ||
	       atomic_load(&splice_loopback);
}

/* Runs C's handler through its program's invoke hook (rule 6); false when
 * the program could not run it. */
static bool invoke(struct rpc_call *c)
{
	if (c->prog->invoke)
		return c->prog->invoke(c->prog, c->proc, &c->req, c->args, c->res);
	if (c->proc->handler)
		c->proc->handler(&c->req, c->args, c->res);
	return true;
}

/* Decodes the arguments and runs the handler; the args stay for run_call's
 * caller to release.  False with V set on GARBAGE_ARGS or no memory. */
static bool run_call(struct rpc_call *c, struct verdict *v)
{
	const struct rpc_proc *p = c->proc;

	c->req.payload_pipe = payload_may_pipe(c);
	c->args = rpc_arena_alloc(c->req.arena, p->args_size);
	c->res = rpc_arena_alloc(c->req.arena, p->res_size);
	if (!c->args || !c->res) {
		set_verdict(v, REPLY_ACCEPTED, SYSTEM_ERR, "out of memory");
		return false;
	}
	if (!or_void(p->decode_args)(&c->xdr, c->args)) {
		set_verdict(v, REPLY_ACCEPTED, GARBAGE_ARGS, "arguments do not decode");
		return false;
	}
	rpc_log(RPC_LOG_DEBUG, "xid %#x %s %s", c->req.xid, p->name ? p->name : "?",
		proto_name(c->req.proto));
	/* The program's access check of the handle the procedure names (both
	 * from the tables); a refused call is answered with the status the
	 * check put in its results. */
	if (p->has_fh && c->prog->admit &&
	    !c->prog->admit(&c->req, rpc_proc_fh(p, c->args), c->res)) {
		set_verdict(v, REPLY_ACCEPTED, SUCCESS, NULL);
		return true;
	}
	if (!invoke(c)) {
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
static void add_payload(const struct rpc_call *c, struct rpc_buf *out)
{
	struct rpc_payload *p = rpc_arena_payload_take(c->req.arena, c->req.payload);
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
static bool encode_reply(const struct rpc_call *c, struct verdict *v, struct rpc_buf *out)
{
	xdrproc_t enc = (v->stat == SUCCESS && v->kind == REPLY_ACCEPTED)
			    ? or_void(c->proc->encode_res)
			    : NULL;
	size_t size = REPLY_HDR_MAX;
	XDR x;
	bool ok;

	rpc_payload_put(out->payload);
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
	RPC_LOG_LIMITED(RPC_LOG_ERR, "xid %#x %s: results do not encode", c->req.xid,
			c->proc && c->proc->name ? c->proc->name : "?");
	set_verdict(v, REPLY_ACCEPTED, SYSTEM_ERR, "results do not encode");
	return encode_reply(c, v, out);
}

/* The duplicate request cache's word on call C, whose arguments start where
 * C's stream stands.  RPC_DRC_UNCACHED for idempotent procedures; on
 * RPC_DRC_REPLAY the first reply is in C's reply. */
static enum rpc_drc_verdict drc_check(struct rpc_call *c, struct rpc_drc_key *k)
{
	struct rpc_drc *d = c->svc->drc;
	u_int pos = xdr_getpos(&c->xdr);

	if (!d || c->proc->idempotent || !c->req.peer || pos > c->len)
		return RPC_DRC_UNCACHED;
	rpc_drc_key_init(d, k, c->req.peer, c->req.xid, c->req.prog, c->req.vers,
			 c->req.proc, c->rec + pos, c->len - pos);
	return rpc_drc_begin(d, k, c->reply);
}

/* Logs C's verdict when it is a refusal and encodes its reply, unless none
 * is due. */
static void finish(struct rpc_call *c)
{
	if (c->v.kind != REPLY_ACCEPTED || c->v.stat != SUCCESS)
		log_reject(c, &c->v);
	if (c->v.kind == REPLY_NONE)
		return;
	c->sent = encode_reply(c, &c->v, c->reply);
	if (!c->sent)
		RPC_LOG_LIMITED(RPC_LOG_ERR, "xid %#x: out of memory for the reply",
				c->req.xid);
}

void rpc_call_run(struct rpc_call *c)
{
	enum rpc_drc_verdict drc;
	struct rpc_ccall cc = {0};
	struct rpc_drc_key key;

	assert(!c->ran);
	c->ran = true;
	drc = drc_check(c, &key);
	if (drc == RPC_DRC_REPLAY || drc == RPC_DRC_BUSY) {
		RPC_LOG_LIMITED(RPC_LOG_INFO, "xid %#x: retransmission %s", c->req.xid,
				drc == RPC_DRC_REPLAY ? "answered from the cache"
						      : "dropped");
		c->sent = drc == RPC_DRC_REPLAY;
		if (c->sent)
			rpc_count_drc_hit(c->svc);
		return;
	}
	rpc_count_begin(c->svc, &cc);
	run_call(c, &c->v);
	finish(c);
	if (drc == RPC_DRC_NEW)
		rpc_drc_done(c->svc->drc, &key, c->sent ? c->reply : NULL);
	rpc_count_end(&cc, c->prog_index, c->prog, c->proc, c->res,
		      c->v.kind == REPLY_ACCEPTED ? c->v.stat : SUCCESS);
}

const void *rpc_call_results(const struct rpc_call *c)
{
	return c->ran ? c->res : NULL;
}

/* Reads C's header and finds its program and procedure; false with C's
 * verdict set when the call is refused before its program sees it. */
static bool call_begin(struct rpc_call *c)
{
	c->req.arena = rpc_arena_new();
	if (!c->req.arena) {
		set_verdict(&c->v, REPLY_ACCEPTED, SYSTEM_ERR, "out of memory");
		return false;
	}
	if (!decode_header(c, &c->v))
		return false;
	c->prog = find_program(c, &c->v);
	if (!c->prog)
		return false;
	c->proc = find_proc(c->prog, c->req.proc, &c->v);
	return c->proc != NULL;
}

bool rpc_process_from(struct rpc_svc *svc, const uint8_t *call, size_t len,
		      const struct rpc_from *from, struct rpc_buf *reply)
{
	struct rpc_call c = {
	    .svc = svc,
	    .req = {.peer = from->peer,
		    .peerlen = from->peerlen,
		    .peer_addr = from->addr,
		    .local = from->local,
		    .proto = from->proto},
	    .rec = call,
	    .len = len,
	    .v = {.kind = REPLY_NONE},
	    .reply = reply,
	};

	reply->len = 0;
	if (len > UINT32_MAX)
		return false;
	xdrmem_create(&c.xdr, (char *)call, (u_int)len, XDR_DECODE);
	if (!decode_xid(&c))
		goto out_xdr;
	if (!call_begin(&c))
		finish(&c);
	else if (c.prog->dispatch)
		c.prog->dispatch(&c, &c.req);
	else
		rpc_call_run(&c);
	assert(!c.proc || c.ran);
	if (c.args)
		xdr_free(or_void(c.proc->decode_args), c.args);
	rpc_arena_free(c.req.arena);
out_xdr:
	xdr_destroy(&c.xdr);
	return c.sent;
}

bool rpc_process(struct rpc_svc *svc, const uint8_t *call, size_t len,
		 const struct sockaddr_storage *peer, socklen_t peerlen, int proto,
		 struct rpc_buf *reply)
{
	char addr[INET6_ADDRSTRLEN + 16] = "-";
	struct rpc_from from = {peer, peerlen, proto, addr, NULL};

	if (peer)
		rpc_addr_str(peer, false, addr, sizeof(addr));
	return rpc_process_from(svc, call, len, &from, reply);
}
