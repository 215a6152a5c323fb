/* SPDX-License-Identifier: Apache-2.0 */
/* rawrpc.c - hand-built ONC RPC calls (see rawrpc.h). */
#define _GNU_SOURCE
#include "rawrpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <rpc/rpc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_RECORD (4u << 20)
#define MOUNT_PROG 100005u
#define NFS_PROG   100003u

int raw_connect(enum raw_proto proto, int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port)};
	struct timeval tv = {.tv_sec = 5};
	int fd = socket(AF_INET, proto == RAW_TCP ? SOCK_STREAM : SOCK_DGRAM, 0);
	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

int raw_connect_from(const char *src, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
	struct timeval tv = {.tv_sec = 5};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (inet_pton(AF_INET, src, &a.sin_addr) != 1 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	to.sin_port = htons((uint16_t)port);
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

/* The credential of a call: AUTH_SYS for uid/gid 0, or junk of another flavour. */
static void set_cred(struct opaque_auth *cred, int flavor, char *space, size_t cap)
{
	static char junk[8] = "junkjunk";
	XDR x;
	struct authunix_parms p = {.aup_time = 0, .aup_machname = "rawrpc"};
	cred->oa_flavor = flavor;
	cred->oa_base = NULL;
	cred->oa_length = 0;
	if (flavor == AUTH_UNIX) {
		xdrmem_create(&x, space, (u_int)cap, XDR_ENCODE);
		if (xdr_authunix_parms(&x, &p)) {
			cred->oa_base = space;
			cred->oa_length = xdr_getpos(&x);
		}
		xdr_destroy(&x);
	} else if (flavor != AUTH_NONE) {
		cred->oa_base = junk;
		cred->oa_length = sizeof(junk);
	}
}

size_t raw_encode_call(const struct raw_call *c, unsigned char *buf, size_t cap)
{
	char credspace[128];
	struct rpc_msg m = {0};
	XDR x;
	size_t len = 0;
	m.rm_xid = c->xid;
	m.rm_direction = CALL;
	m.rm_call.cb_rpcvers = 2; /* xdr_callmsg encodes nothing else; patched below */
	m.rm_call.cb_prog = c->prog;
	m.rm_call.cb_vers = c->vers;
	m.rm_call.cb_proc = c->proc;
	set_cred(&m.rm_call.cb_cred, c->flavor, credspace, sizeof(credspace));
	m.rm_call.cb_verf = _null_auth;
	xdrmem_create(&x, (char *)buf, (u_int)cap, XDR_ENCODE);
	if (xdr_callmsg(&x, &m))
		len = xdr_getpos(&x);
	xdr_destroy(&x);
	if (!len || len + c->arglen > cap)
		return 0;
	if (c->arglen)
		memcpy(buf + len, c->args, c->arglen);
	if (c->rpcvers != 2) { /* xid, direction, rpcvers: the third word */
		uint32_t v = htonl(c->rpcvers);
		memcpy(buf + 8, &v, 4);
	}
	return len + c->arglen;
}

int raw_send_all(int fd, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The mark and the bytes in one send: two would meet Nagle's algorithm and
 * the server's delayed ACK, 40 ms a call. */
int raw_send_fragment(int fd, const void *buf, size_t len, bool last)
{
	uint32_t mark = htonl((uint32_t)len | (last ? 0x80000000u : 0));
	unsigned char *rec = malloc(len + sizeof(mark));
	int rc;

	if (!rec)
		return -1;
	memcpy(rec, &mark, sizeof(mark));
	memcpy(rec + sizeof(mark), buf, len);
	rc = raw_send_all(fd, rec, len + sizeof(mark));
	free(rec);
	return rc;
}

static int recv_all(int fd, void *buf, size_t len)
{
	unsigned char *p = buf;
	while (len) {
		ssize_t n = recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One whole TCP record into a malloc'd buffer. */
static int recv_record(int fd, unsigned char **out, size_t *outlen)
{
	unsigned char *rec = NULL;
	size_t len = 0;
	uint32_t mark;
	bool last = false;
	while (!last) {
		uint32_t n;
		unsigned char *grown;
		if (recv_all(fd, &mark, sizeof(mark)))
			goto fail;
		mark = ntohl(mark);
		last = mark & 0x80000000u;
		n = mark & 0x7fffffffu;
		if (len + n > MAX_RECORD)
			goto fail;
		grown = realloc(rec, len + n + 1);
		if (!grown)
			goto fail;
		rec = grown;
		if (recv_all(fd, rec + len, n))
			goto fail;
		len += n;
	}
	*out = rec;
	*outlen = len;
	return 0;
fail:
	free(rec);
	return -1;
}

/* The results are left in place for the caller: decode no further. */
static bool_t no_results(XDR *x, ...)
{
	(void)x;
	return TRUE;
}

static int decode_reply(const unsigned char *msg, size_t len, struct raw_reply *r)
{
	struct rpc_msg m;
	XDR x;
	int rc = -1;
	memset(&m, 0, sizeof(m));
	memset(r, 0, sizeof(*r));
	m.acpted_rply.ar_verf = _null_auth;
	m.acpted_rply.ar_results.where = NULL;
	m.acpted_rply.ar_results.proc = no_results;
	xdrmem_create(&x, (char *)msg, (u_int)len, XDR_DECODE);
	if (!xdr_replymsg(&x, &m) || m.rm_direction != REPLY)
		goto out;
	r->xid = m.rm_xid;
	r->reply_stat = m.rm_reply.rp_stat;
	if (m.rm_reply.rp_stat == MSG_ACCEPTED) {
		r->accept_stat = m.acpted_rply.ar_stat;
		if (m.acpted_rply.ar_stat == PROG_MISMATCH) {
			r->low = (uint32_t)m.acpted_rply.ar_vers.low;
			r->high = (uint32_t)m.acpted_rply.ar_vers.high;
		}
	} else {
		r->reject_stat = m.rjcted_rply.rj_stat;
		if (m.rjcted_rply.rj_stat == RPC_MISMATCH) {
			r->low = (uint32_t)m.rjcted_rply.rj_vers.low;
			r->high = (uint32_t)m.rjcted_rply.rj_vers.high;
		} else {
			r->auth_stat = m.rjcted_rply.rj_why;
		}
	}
	r->bodylen = len - xdr_getpos(&x);
	r->body = malloc(r->bodylen + 1);
	if (!r->body)
		goto out;
	memcpy(r->body, msg + xdr_getpos(&x), r->bodylen);
	rc = 0;
out:
	if (m.rm_reply.rp_stat == MSG_ACCEPTED && m.acpted_rply.ar_verf.oa_base &&
	    m.acpted_rply.ar_verf.oa_base != _null_auth.oa_base)
		free(m.acpted_rply.ar_verf.oa_base);
	xdr_destroy(&x);
	return rc;
}

int raw_recv_reply(int fd, enum raw_proto proto, struct raw_reply *r)
{
	unsigned char *msg = NULL;
	size_t len = 0;
	int rc;
	if (proto == RAW_TCP) {
		if (recv_record(fd, &msg, &len))
			return -1;
	} else {
		ssize_t n;
		msg = malloc(65536);
		if (!msg)
			return -1;
		n = recv(fd, msg, 65536, 0);
		if (n <= 0) {
			free(msg);
			return -1;
		}
		len = (size_t)n;
	}
	rc = decode_reply(msg, len, r);
	free(msg);
	return rc;
}

int raw_call(int fd, enum raw_proto proto, const struct raw_call *c, struct raw_reply *r)
{
	size_t cap = c->arglen + 1024, len;
	unsigned char *buf = malloc(cap);
	int rc = -1;
	if (!buf)
		return -1;
	len = raw_encode_call(c, buf, cap);
	if (!len)
		goto out;
	if (proto == RAW_TCP ? raw_send_fragment(fd, buf, len, true)
			     : (send(fd, buf, len, 0) == (ssize_t)len ? 0 : -1))
		goto out;
	/* skip replies to earlier calls (a UDP retransmission, a late answer) */
	for (int i = 0; i < 8; i++) {
		if (raw_recv_reply(fd, proto, r))
			goto out;
		if (r->xid == c->xid) {
			rc = 0;
			goto out;
		}
		raw_reply_free(r);
	}
out:
	free(buf);
	return rc;
}

bool raw_wait_closed(int fd)
{
	unsigned char buf[4096];
	for (int i = 0; i < 64; i++) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return true;
		if (n < 0 && errno != EINTR)
			return false; /* timeout: still open */
	}
	return false;
}

void raw_reply_free(struct raw_reply *r)
{
	free(r->body);
	r->body = NULL;
	r->bodylen = 0;
}

size_t raw_put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
	return 4;
}

uint32_t raw_get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

size_t raw_enc_fh(unsigned char *buf, const void *fh, uint32_t len)
{
	size_t n = raw_put32(buf, len);
	memcpy(buf + n, fh, len);
	n += len;
	while (n % 4)
		buf[n++] = 0;
	return n;
}

size_t raw_enc_string(unsigned char *buf, const char *s)
{
	return raw_enc_fh(buf, s, (uint32_t)strlen(s));
}

int raw_body_status(const struct raw_reply *r)
{
	if (r->reply_stat != RAW_ACCEPTED || r->accept_stat != RAW_SUCCESS ||
	    r->bodylen < 4)
		return -1;
	return (int)raw_get32(r->body);
}

/* One AUTH_SYS call of version 3 of PROG, procedure PROC, with ARGS; 0 or -1
 * (no reply). */
static int call3(int fd, enum raw_proto proto, uint32_t prog, uint32_t proc,
		 const unsigned char *args, size_t arglen, struct raw_reply *r)
{
	struct raw_call c = {.xid = (prog << 8 ^ proc << 4) ^ (uint32_t)rand(),
			     .rpcvers = 2,
			     .prog = prog,
			     .vers = 3,
			     .proc = proc,
			     .flavor = AUTH_UNIX,
			     .args = args,
			     .arglen = arglen};

	return raw_call(fd, proto, &c, r);
}

int raw_nfs3(int fd, enum raw_proto proto, uint32_t proc, const unsigned char *args,
	     size_t len)
{
	struct raw_reply r;
	int st;

	if (call3(fd, proto, NFS_PROG, proc, args, len, &r))
		return -1;
	st = raw_body_status(&r);
	raw_reply_free(&r);
	return st;
}

/* R's status, and when 0 the handle after it (64 bytes at most) into FH;
 * frees R. */
static int status_and_fh(struct raw_reply *r, unsigned char *fh, uint32_t *fhlen)
{
	int st = raw_body_status(r);
	uint32_t n;

	if (st == 0) {
		n = r->bodylen >= 8 ? raw_get32(r->body + 4) : 65;
		if (n > 64 || 8 + n > r->bodylen) {
			st = -1;
		} else {
			memcpy(fh, r->body + 8, n);
			*fhlen = n;
		}
	}
	raw_reply_free(r);
	return st;
}

int raw_mnt(int fd, enum raw_proto proto, const char *path, unsigned char *fh,
	    uint32_t *fhlen)
{
	unsigned char args[1100];
	struct raw_reply r;

	if (strlen(path) > 1024 ||
	    call3(fd, proto, MOUNT_PROG, 1, args, raw_enc_string(args, path), &r))
		return -1;
	return status_and_fh(&r, fh, fhlen);
}

int raw_getattr(int fd, enum raw_proto proto, const unsigned char *fh, uint32_t fhlen,
		uint64_t *fileid)
{
	unsigned char args[80];
	struct raw_reply r;
	int st;

	if (fhlen > 64 ||
	    call3(fd, proto, NFS_PROG, 1, args, raw_enc_fh(args, fh, fhlen), &r))
		return -1;
	st = raw_body_status(&r);
	/* fattr3: type mode nlink uid gid (5 words) size used (2 hyper) rdev (2 words)
	 * fsid (hyper) fileid (hyper): fileid at offset 4 + 5*4 + 16 + 8 + 8 = 56 */
	if (st == 0 && r.bodylen >= 64 && fileid)
		*fileid =
		    ((uint64_t)raw_get32(r.body + 56) << 32) | raw_get32(r.body + 60);
	raw_reply_free(&r);
	return st;
}

int raw_umnt(int fd, enum raw_proto proto, const char *path)
{
	unsigned char args[1100];
	struct raw_reply r;
	int st;

	if (strlen(path) > 1024 ||
	    call3(fd, proto, MOUNT_PROG, 3, args, raw_enc_string(args, path), &r))
		return -1;
	st = r.reply_stat == RAW_ACCEPTED && r.accept_stat == RAW_SUCCESS ? 0 : -1;
	raw_reply_free(&r);
	return st;
}

int raw_lookup(int fd, enum raw_proto proto, const unsigned char *dir, uint32_t dirlen,
	       const char *name, unsigned char *fh, uint32_t *fhlen)
{
	unsigned char args[400];
	struct raw_reply r;
	size_t len;

	if (dirlen > 64 || strlen(name) > 255)
		return -1;
	len = raw_enc_fh(args, dir, dirlen);
	len += raw_enc_string(args + len, name);
	if (call3(fd, proto, NFS_PROG, 3, args, len, &r))
		return -1;
	return status_and_fh(&r, fh, fhlen); /* LOOKUP3resok starts with it */
}
