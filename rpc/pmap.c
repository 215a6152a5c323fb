/* SPDX-License-Identifier: Apache-2.0 */
/* pmap.c - the built-in portmapper: program 100000, version 2 (portmap) and
 * versions 3 and 4 (rpcbind), answered for this server's own programs only,
 * when no rpcbind runs (listen.c binds port 111 for it; its answers come
 * from the registry of svc.c).
 *
 * A client that mounts with no ports given asks the portmapper of the server
 * host for MOUNT, NFS and, to lock, NLM and NSM.  A host that runs nothing
 * but union-nfsd then needs these answers from union-nfsd itself.
 *
 * Rules:
 *  1. The map is the registry: the programs registered, on their services'
 *     ports (map_find, port_of), the portmapper itself on 111.  SET and UNSET
 *     answer false to everyone: nothing else may register here (rpcbind lets
 *     only local callers register; we keep no registrations at all).
 *  2. CALLIT (v2, v3) and BCAST (v4) get no reply, which is rpcbind's answer
 *     to a call over TCP and to a program it does not know.  Forwarding is
 *     left out on purpose: it would make this port a relay that any host can
 *     aim at our own programs with the portmapper's address as the source,
 *     around the client rules (rpcbind forbids NFS and MOUNT there for that
 *     reason), and a broadcast answered by every host floods the caller.
 *     INDIRECT and GETSTAT are PROC_UNAVAIL.
 *  3. A look-up is answered as rpcbind answers it: the transport the call
 *     came on decides the protocol (rpcbind also ignores GETADDR's netid); a
 *     version not served finds another version of the program (the client
 *     then gets PROG_MISMATCH from it), except for GETVERSADDR.
 *  4. Addresses are universal addresses of the address the caller reaches
 *     us on: the bind address, or with a wildcard bind the local address the
 *     kernel routes to the caller from (local_addr), as rpcbind merges a
 *     wildcard registration with the caller's address.
 *  5. Strings and netbufs in arguments are bounded before libtirpc's
 *     decoders allocate them (bounded_rpcb, bounded_uaddr, bounded_netbuf):
 *     they allocate the length the client claims before reading a byte.
 */
#include <rpc/rpc.h> /* first: the protocol headers need its types */

#include <arpa/inet.h>
#include <rpc/pmap_prot.h>
#include <rpc/rpcb_prot.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rpc_private.h"

#define PMAP_PORT    111
#define UADDR_MAX    (INET6_ADDRSTRLEN + 8) /* "h.h.h.h.p1.p2", or v6 */
#define RPCB_STR_MAX 255		    /* netid, uaddr, owner (rule 5) */

static const int PROTOS[] = {IPPROTO_TCP, IPPROTO_UDP};

/* The registration of PROG and VERS (rule 3): the exact version, else,
 * unless EXACT, another version of PROG; NULL when PROG is not served. */
static const struct rpc_reg *map_find(const struct rpc_svc *svc, uint32_t prog,
				      uint32_t vers, bool exact)
{
	const struct rpc_reg *hit = NULL;

	for (size_t i = 0; i < svc->nregs; i++) {
		if (svc->regs[i].prog->prog != prog)
			continue;
		if (svc->regs[i].prog->vers == vers)
			return &svc->regs[i];
		hit = exact ? hit : &svc->regs[i];
	}
	return hit;
}

static uint16_t port_of(const struct rpc_svc *svc, const struct rpc_reg *r)
{
	return rpc_svc_port(svc, r->prog->prog, r->prog->vers);
}

/* ---- addresses (rule 4) ---- */

/* The family of the listeners: that of the bind address. */
static int listen_family(const struct rpc_svc *s)
{
	struct in6_addr a6;

	return s->bind_addr && inet_pton(AF_INET6, s->bind_addr, &a6) == 1 ? AF_INET6
									   : AF_INET;
}

static bool is_wildcard(const struct sockaddr_storage *ss)
{
	static const struct in6_addr any6 = IN6ADDR_ANY_INIT;

	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == INADDR_ANY;
	return !memcmp(&((const struct sockaddr_in6 *)ss)->sin6_addr, &any6,
		       sizeof(any6));
}

/* The address of ours that REQ's caller reaches: the bind address, else
 * the one the call came to (a floating address, where the host has
 * several), else the one the kernel would send to the caller from (a
 * connect(2) of a UDP socket sends nothing); the wildcard when none is
 * known. */
static void local_addr(const struct rpc_req *req, struct sockaddr_storage *out)
{
	const struct rpc_svc *svc = req->arg;
	const char *bind = svc->bind_addr ? svc->bind_addr : "0.0.0.0";
	socklen_t len = sizeof(*out);
	int fd;

	memset(out, 0, sizeof(*out));
	out->ss_family = (sa_family_t)listen_family(req->arg);
	inet_pton(out->ss_family, bind,
		  out->ss_family == AF_INET
		      ? (void *)&((struct sockaddr_in *)out)->sin_addr
		      : (void *)&((struct sockaddr_in6 *)out)->sin6_addr);
	if (!is_wildcard(out))
		return;
	if (req->local && req->local->ss_family == out->ss_family) {
		*out = *req->local;
		return;
	}
	if (!req->peer || req->peer->ss_family != out->ss_family)
		return;
	fd = socket(out->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (connect(fd, (const struct sockaddr *)req->peer, req->peerlen) == 0)
		getsockname(fd, (struct sockaddr *)out, &len);
	close(fd);
}

/* The universal address of ADDR with PORT into BUF (UADDR_MAX bytes). */
static void uaddr_format(const struct sockaddr_storage *addr, uint16_t port, char *buf)
{
	const void *a =
	    addr->ss_family == AF_INET
		? (const void *)&((const struct sockaddr_in *)addr)->sin_addr
		: (const void *)&((const struct sockaddr_in6 *)addr)->sin6_addr;
	char host[INET6_ADDRSTRLEN] = "";

	inet_ntop(addr->ss_family, a, host, sizeof(host));
	snprintf(buf, UADDR_MAX, "%s.%u.%u", host, port >> 8, port & 0xff);
}

/* An arena copy of the uaddr of PORT for REQ's caller; NULL: no memory. */
static char *uaddr_new(struct rpc_req *req, const struct sockaddr_storage *local,
		       uint16_t port)
{
	char *u = rpc_arena_alloc(req->arena, UADDR_MAX);

	if (u)
		uaddr_format(local, port, u);
	return u;
}

static const char *netid_of(int family, int proto)
{
	if (proto == IPPROTO_TCP)
		return family == AF_INET6 ? "tcp6" : "tcp";
	return family == AF_INET6 ? "udp6" : "udp";
}

/* ---- argument bounds (rule 5) ---- */

/* Skips one XDR string of at most RPCB_STR_MAX bytes. */
static bool skip_bounded_string(XDR *x)
{
	u_int len;

	if (!xdr_u_int(x, &len) || len > RPCB_STR_MAX)
		return false;
	return xdr_setpos(x, xdr_getpos(x) + ((len + 3) & ~3u));
}

/* xdr_rpcb, once its three strings are known to be short. */
static bool_t bounded_rpcb(XDR *x, rpcb *r)
{
	u_int start, prog, vers;
	bool ok;

	if (x->x_op != XDR_DECODE)
		return xdr_rpcb(x, r); /* xdr_free's stream has no position */
	start = xdr_getpos(x);
	ok = xdr_u_int(x, &prog) && xdr_u_int(x, &vers) && skip_bounded_string(x) &&
	     skip_bounded_string(x) && skip_bounded_string(x);
	return ok && xdr_setpos(x, start) && xdr_rpcb(x, r);
}

/* A uaddr argument (UADDR2TADDR), bounded as rpcb's strings are. */
static bool_t bounded_uaddr(XDR *x, char **u)
{
	u_int start;

	if (x->x_op != XDR_DECODE)
		return xdr_wrapstring(x, u);
	start = xdr_getpos(x);
	return skip_bounded_string(x) && xdr_setpos(x, start) && xdr_wrapstring(x, u);
}

/* A netbuf argument (TADDR2UADDR): no larger than any socket address, before
 * xdr_netbuf allocates the size it claims. */
static bool_t bounded_netbuf(XDR *x, struct netbuf *nb)
{
	u_int start, maxlen;

	if (x->x_op != XDR_DECODE)
		return xdr_netbuf(x, nb);
	start = xdr_getpos(x);
	if (!xdr_u_int(x, &maxlen) || maxlen > sizeof(struct sockaddr_storage))
		return false;
	return xdr_setpos(x, start) && xdr_netbuf(x, nb);
}

/* ---- version 2 ---- */

/* ARG: the registry; served while the loop holds port 111. */
static bool pmap_served(void *arg)
{
	return rpc_svc_port(arg, PMAPPROG, 0) != 0;
}

static void pmap_do_nothing(struct rpc_req *req, void *args, void *res)
{
	(void)req, (void)args, (void)res;
}

/* SET, UNSET of every version (rule 1): false, already zeroed. */
static void pmap_do_refuse(struct rpc_req *req, void *args, void *res)
{
	(void)args, (void)res;
	RPC_LOG_LIMITED(RPC_LOG_INFO, "portmapper: refused a registration (xid %#x)",
			req->xid);
}

/* CALLIT, BCAST: no reply (rule 2). */
static void pmap_do_drop(struct rpc_req *req, void *args, void *res)
{
	(void)args, (void)res;
	req->no_reply = true;
}

static void pmap_do_getport(struct rpc_req *req, void *args, void *res)
{
	const struct pmap *pm = args;
	const struct rpc_reg *e =
	    map_find(req->arg, (uint32_t)pm->pm_prog, (uint32_t)pm->pm_vers, false);
	u_long *port = res;

	if (e && (pm->pm_prot == IPPROTO_TCP || pm->pm_prot == IPPROTO_UDP))
		*port = port_of(req->arg, e);
}

static void pmap_do_dump(struct rpc_req *req, void *args, void *res)
{
	const struct rpc_svc *svc = req->arg;
	struct pmaplist **head = res, *l;

	(void)args;
	for (size_t i = svc->nregs; i-- > 0;) {
		for (size_t p = 0; p < 2; p++) {
			l = rpc_arena_alloc(req->arena, sizeof(*l));
			if (!l)
				return; /* what fits */
			l->pml_map = (struct pmap){
			    svc->regs[i].prog->prog, svc->regs[i].prog->vers,
			    (u_long)PROTOS[p], port_of(svc, &svc->regs[i])};
			l->pml_next = *head;
			*head = l;
		}
	}
}

/* One version of program 100000, served while the portmapper is on. */
#define PMAP_PROGRAM(var, NAME, VERS, PROCS)                                             \
	const struct rpc_program var = {.name = NAME,                                    \
					.prog = PMAPPROG,                                \
					.vers = VERS,                                    \
					.procs = PROCS,                                  \
					.nprocs = sizeof(PROCS) / sizeof(PROCS[0]),      \
					.served = pmap_served}

#define PMAP_PROC(N, NAME, fn, dec, args_t, enc, res_t)                                  \
	[N] = {.name = NAME,                                                             \
	       .decode_args = (xdrproc_t)dec,                                            \
	       .args_size = sizeof(args_t),                                              \
	       .encode_res = (xdrproc_t)enc,                                             \
	       .res_size = sizeof(res_t),                                                \
	       .handler = fn,                                                            \
	       .idempotent = true}
/* NULL, CALLIT: neither arguments (CALLIT's are not read) nor results. */
#define PMAP_VOID_PROC(N, NAME, fn)                                                      \
	[N] = {.name = NAME, .handler = fn, .idempotent = true}

static const struct rpc_proc pmap2_procs[] = {
    PMAP_VOID_PROC(PMAPPROC_NULL, "PMAPPROC_NULL", pmap_do_nothing),
    PMAP_PROC(PMAPPROC_SET, "PMAPPROC_SET", pmap_do_refuse, xdr_pmap, struct pmap,
	      xdr_bool, bool_t),
    PMAP_PROC(PMAPPROC_UNSET, "PMAPPROC_UNSET", pmap_do_refuse, xdr_pmap, struct pmap,
	      xdr_bool, bool_t),
    PMAP_PROC(PMAPPROC_GETPORT, "PMAPPROC_GETPORT", pmap_do_getport, xdr_pmap,
	      struct pmap, xdr_u_long, u_long),
    PMAP_PROC(PMAPPROC_DUMP, "PMAPPROC_DUMP", pmap_do_dump, NULL, char, xdr_pmaplist,
	      struct pmaplist *),
    PMAP_VOID_PROC(PMAPPROC_CALLIT, "PMAPPROC_CALLIT", pmap_do_drop),
};
PMAP_PROGRAM(pmap2_program, "PORTMAP", PMAPVERS, pmap2_procs);

/* ---- versions 3 and 4 ---- */

/* GETADDR, GETVERSADDR (EXACT): the uaddr, or "" when not served. */
static void rpcb_getaddr_common(struct rpc_req *req, const rpcb *r, char **res,
				bool exact)
{
	const struct rpc_reg *e = map_find(req->arg, r->r_prog, r->r_vers, exact);
	struct sockaddr_storage local;

	*res = "";
	if (!e)
		return;
	local_addr(req, &local);
	*res = uaddr_new(req, &local, port_of(req->arg, e));
	if (!*res)
		*res = "";
}

static void rpcb_do_getaddr(struct rpc_req *req, void *args, void *res)
{
	rpcb_getaddr_common(req, args, res, false);
}

static void rpcb_do_getversaddr(struct rpc_req *req, void *args, void *res)
{
	rpcb_getaddr_common(req, args, res, true);
}

static const char *owner_name(struct rpc_req *req)
{
	char *o;

	if (geteuid() == 0)
		return "superuser"; /* what rpcbind says of root's registrations */
	o = rpc_arena_alloc(req->arena, 16);
	if (o)
		snprintf(o, 16, "%u", (unsigned)geteuid());
	return o ? o : "";
}

static void rpcb_do_dump(struct rpc_req *req, void *args, void *res)
{
	const struct rpc_svc *svc = req->arg;
	int family = listen_family(svc);
	const char *owner = owner_name(req);
	struct sockaddr_storage local;
	rpcblist_ptr *head = res, l;

	(void)args;
	local_addr(req, &local);
	for (size_t i = svc->nregs; i-- > 0;) {
		for (size_t p = 0; p < 2; p++) {
			l = rpc_arena_alloc(req->arena, sizeof(*l));
			if (!l)
				return; /* what fits */
			l->rpcb_map = (rpcb){
			    .r_prog = svc->regs[i].prog->prog,
			    .r_vers = svc->regs[i].prog->vers,
			    .r_netid = (char *)netid_of(family, PROTOS[p]),
			    .r_addr = uaddr_new(req, &local, port_of(svc, &svc->regs[i])),
			    .r_owner = (char *)owner,
			};
			if (!l->rpcb_map.r_addr)
				return;
			l->rpcb_next = *head;
			*head = l;
		}
	}
}

static void rpcb_do_gettime(struct rpc_req *req, void *args, void *res)
{
	(void)req, (void)args;
	*(u_int *)res = (u_int)time(NULL);
}

/* GETADDRLIST: the version's address on each protocol ("" for none). */
static void rpcb_do_getaddrlist(struct rpc_req *req, void *args, void *res)
{
	const rpcb *r = args;
	const struct rpc_reg *e = map_find(req->arg, r->r_prog, r->r_vers, true);
	int family = listen_family(req->arg);
	struct sockaddr_storage local;
	rpcb_entry_list_ptr *head = res, l;

	if (!e)
		return;
	local_addr(req, &local);
	for (size_t p = 0; p < 2; p++) {
		l = rpc_arena_alloc(req->arena, sizeof(*l));
		if (!l)
			return;
		l->rpcb_entry_map = (rpcb_entry){
		    .r_maddr = uaddr_new(req, &local, port_of(req->arg, e)),
		    .r_nc_netid = (char *)netid_of(family, PROTOS[p]),
		    .r_nc_semantics =
			PROTOS[p] == IPPROTO_TCP ? NC_TPI_COTS_ORD : NC_TPI_CLTS,
		    .r_nc_protofmly = family == AF_INET6 ? "inet6" : "inet",
		    .r_nc_proto = PROTOS[p] == IPPROTO_TCP ? "tcp" : "udp",
		};
		if (!l->rpcb_entry_map.r_maddr)
			return;
		l->rpcb_entry_next = *head;
		*head = l;
	}
}

/* The uaddr U's address and port into SS (the listeners' family); false
 * when U is not one. */
static bool uaddr_parse(const struct rpc_svc *s, const char *u,
			struct sockaddr_storage *ss)
{
	const char *p2 = strrchr(u, '.'), *p1 = p2;
	char host[INET6_ADDRSTRLEN];
	unsigned hi, lo;
	void *addr;

	while (p1 && p1 > u && *--p1 != '.')
		;
	if (!p2 || !p1 || *p1 != '.' || (size_t)(p1 - u) >= sizeof(host) ||
	    sscanf(p1, ".%u.%u", &hi, &lo) != 2 || hi > 255 || lo > 255)
		return false;
	memcpy(host, u, (size_t)(p1 - u));
	host[p1 - u] = '\0';
	ss->ss_family = (sa_family_t)listen_family(s);
	if (ss->ss_family == AF_INET) {
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)(hi << 8 | lo));
		addr = &((struct sockaddr_in *)ss)->sin_addr;
	} else {
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)(hi << 8 | lo));
		addr = &((struct sockaddr_in6 *)ss)->sin6_addr;
	}
	return inet_pton(ss->ss_family, host, addr) == 1;
}

static socklen_t sockaddr_len(int family)
{
	return family == AF_INET    ? sizeof(struct sockaddr_in)
	       : family == AF_INET6 ? sizeof(struct sockaddr_in6)
				    : 0;
}

/* UADDR2TADDR: the socket address (the host's struct, as rpcbind gives it)
 * of a uaddr of the listeners' family; empty when it is not one. */
static void rpcb_do_uaddr2taddr(struct rpc_req *req, void *args, void *res)
{
	struct sockaddr_storage *ss = rpc_arena_alloc(req->arena, sizeof(*ss));
	struct netbuf *nb = res;

	if (!ss || !uaddr_parse(req->arg, *(char **)args, ss))
		return;
	nb->maxlen = nb->len = sockaddr_len(ss->ss_family);
	nb->buf = ss;
}

/* TADDR2UADDR: the uaddr of a socket address; "" when it is none. */
static void rpcb_do_taddr2uaddr(struct rpc_req *req, void *args, void *res)
{
	const struct netbuf *nb = args;
	struct sockaddr_storage ss = {0};
	char **u = res;

	*u = "";
	if (nb->len < sizeof(sa_family_t) || nb->len > sizeof(ss))
		return;
	memcpy(&ss, nb->buf, nb->len);
	if (nb->len != sockaddr_len(ss.ss_family))
		return;
	*u = uaddr_new(req, &ss,
		       ntohs(ss.ss_family == AF_INET
				 ? ((struct sockaddr_in *)&ss)->sin_port
				 : ((struct sockaddr_in6 *)&ss)->sin6_port));
	if (!*u)
		*u = "";
}

#define RPCB_COMMON_PROCS                                                                \
	PMAP_VOID_PROC(0 /* RPCBPROC_NULL */, "RPCBPROC_NULL", pmap_do_nothing),         \
	    PMAP_PROC(RPCBPROC_SET, "RPCBPROC_SET", pmap_do_refuse, bounded_rpcb, rpcb,  \
		      xdr_bool, bool_t),                                                 \
	    PMAP_PROC(RPCBPROC_UNSET, "RPCBPROC_UNSET", pmap_do_refuse, bounded_rpcb,    \
		      rpcb, xdr_bool, bool_t),                                           \
	    PMAP_PROC(RPCBPROC_GETADDR, "RPCBPROC_GETADDR", rpcb_do_getaddr,             \
		      bounded_rpcb, rpcb, xdr_wrapstring, char *),                       \
	    PMAP_PROC(RPCBPROC_DUMP, "RPCBPROC_DUMP", rpcb_do_dump, NULL, char,          \
		      xdr_rpcblist_ptr, rpcblist_ptr),                                   \
	    PMAP_VOID_PROC(RPCBPROC_CALLIT, "RPCBPROC_CALLIT", pmap_do_drop),            \
	    PMAP_PROC(RPCBPROC_GETTIME, "RPCBPROC_GETTIME", rpcb_do_gettime, NULL, char, \
		      xdr_u_int, u_int),                                                 \
	    PMAP_PROC(RPCBPROC_UADDR2TADDR, "RPCBPROC_UADDR2TADDR", rpcb_do_uaddr2taddr, \
		      bounded_uaddr, char *, xdr_netbuf, struct netbuf),                 \
	    PMAP_PROC(RPCBPROC_TADDR2UADDR, "RPCBPROC_TADDR2UADDR", rpcb_do_taddr2uaddr, \
		      bounded_netbuf, struct netbuf, xdr_wrapstring, char *)

static const struct rpc_proc rpcb3_procs[] = {RPCB_COMMON_PROCS};

static const struct rpc_proc rpcb4_procs[] = {
    RPCB_COMMON_PROCS,
    PMAP_PROC(RPCBPROC_GETVERSADDR, "RPCBPROC_GETVERSADDR", rpcb_do_getversaddr,
	      bounded_rpcb, rpcb, xdr_wrapstring, char *),
    PMAP_PROC(RPCBPROC_GETADDRLIST, "RPCBPROC_GETADDRLIST", rpcb_do_getaddrlist,
	      bounded_rpcb, rpcb, xdr_rpcb_entry_list_ptr, rpcb_entry_list_ptr),
};

PMAP_PROGRAM(rpcb3_program, "RPCBIND", RPCBVERS, rpcb3_procs);
PMAP_PROGRAM(rpcb4_program, "RPCBIND", RPCBVERS4, rpcb4_procs);

int rpc_pmap_register(struct rpc_svc *svc)
{
	static const struct rpc_program *const pmap[] = {&rpcb4_program, &rpcb3_program,
							 &pmap2_program};
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < sizeof(pmap) / sizeof(pmap[0]); i++)
		rc = rpc_svc_register(svc, pmap[i], "portmapper", svc);
	return rc;
}
