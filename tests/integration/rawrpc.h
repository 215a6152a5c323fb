/* SPDX-License-Identifier: Apache-2.0 */
/* rawrpc.h - hand-built ONC RPC calls over TCP and UDP, for the protocol tests.
 *
 * libnfs always sends well-formed calls; the cases an NFS server must survive
 * (unknown program/version/procedure, a bad RPC version, an unknown auth flavour,
 * truncated and fragmented records, garbage arguments) need calls built by hand.
 * rawrpc.c builds them with libtirpc's XDR and decodes the reply header with
 * xdr_replymsg.  This header includes nothing of libtirpc, so the libnfs side of
 * the tests (whose headers redefine the RPC types) can use it.
 */
#ifndef RAWRPC_H
#define RAWRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum raw_proto { RAW_TCP, RAW_UDP };

/* The reply header, decoded.  Fields that a reply kind does not carry are 0. */
struct raw_reply {
	uint32_t xid;
	int reply_stat;	     /* 0 MSG_ACCEPTED, 1 MSG_DENIED */
	int accept_stat;     /* SUCCESS 0, PROG_UNAVAIL 1, PROG_MISMATCH 2,
				PROC_UNAVAIL 3, GARBAGE_ARGS 4, SYSTEM_ERR 5 */
	int reject_stat;     /* RPC_MISMATCH 0, AUTH_ERROR 1 */
	int auth_stat;	     /* with AUTH_ERROR */
	uint32_t low, high;  /* with PROG_MISMATCH or RPC_MISMATCH */
	unsigned char *body; /* the results after the header (malloc'd) */
	size_t bodylen;
};

/* How to build the call header. */
struct raw_call {
	uint32_t xid;
	uint32_t rpcvers; /* 2; anything else tests RPC_MISMATCH */
	uint32_t prog, vers, proc;
	int flavor;	  /* 0 AUTH_NONE, 1 AUTH_SYS (uid/gid 0), other: opaque junk */
	const void *args; /* already XDR-encoded arguments */
	size_t arglen;
};

#define RAW_ACCEPTED	  0
#define RAW_DENIED	  1
#define RAW_SUCCESS	  0
#define RAW_PROG_UNAVAIL  1
#define RAW_PROG_MISMATCH 2
#define RAW_PROC_UNAVAIL  3
#define RAW_GARBAGE_ARGS  4
#define RAW_RPC_MISMATCH  0
#define RAW_AUTH_ERROR	  1

/* XDR's unsigned int at P: big-endian, 4 bytes (put returns 4), for the
 * arguments and results the tests build and read by hand. */
size_t raw_put32(unsigned char *p, uint32_t v);
uint32_t raw_get32(const unsigned char *p);

/* A socket connected to 127.0.0.1:port, with 5 s send/receive timeouts;
 * -1 on failure. */
int raw_connect(enum raw_proto proto, int port);

/* A TCP socket bound to source address SRC (any 127/8 address on loopback
 * is another client) and connected to 127.0.0.1:port, 5 s timeouts; -1 on
 * failure. */
int raw_connect_from(const char *src, int port);

/* Encodes call header + args into buf (capacity cap); returns the length or 0. */
size_t raw_encode_call(const struct raw_call *c, unsigned char *buf, size_t cap);

/* Sends one call (one record on TCP, one datagram on UDP) and reads the reply
 * with the same xid.  Returns 0, or -1 if the connection closed, timed out or the
 * reply did not decode. */
int raw_call(int fd, enum raw_proto proto, const struct raw_call *c, struct raw_reply *r);

/* TCP pieces for hand-made records. */
int raw_send_all(int fd, const void *buf, size_t len);
int raw_send_fragment(int fd, const void *buf, size_t len, bool last);
/* Reads one whole record (all fragments) and decodes its reply header. */
int raw_recv_reply(int fd, enum raw_proto proto, struct raw_reply *r);
/* True if the peer closed the connection (read returns 0 or ECONNRESET) within
 * the receive timeout, after discarding up to one reply. */
bool raw_wait_closed(int fd);

void raw_reply_free(struct raw_reply *r);

/* ---- argument encoders (XDR by hand; return the length) ---- */
size_t raw_enc_fh(unsigned char *buf, const void *fh, uint32_t len);
size_t raw_enc_string(unsigned char *buf, const char *s);
/* MOUNT3 MNT of path over a connected socket; the root handle into fh (64 bytes),
 * its length into *fhlen; returns the mountstat3 or -1. */
int raw_mnt(int fd, enum raw_proto proto, const char *path, unsigned char *fh,
	    uint32_t *fhlen);
/* MOUNT3 UMNT of path; 0 when answered, -1 if not. */
int raw_umnt(int fd, enum raw_proto proto, const char *path);
/* NFSv3 LOOKUP of NAME in DIR; returns the nfsstat3 or -1, and the handle
 * (64 bytes at most) when OK. */
int raw_lookup(int fd, enum raw_proto proto, const unsigned char *dir, uint32_t dirlen,
	       const char *name, unsigned char *fh, uint32_t *fhlen);
/* NFSv3 GETATTR; returns the nfsstat3 or -1, and the fileid when OK. */
int raw_getattr(int fd, enum raw_proto proto, const unsigned char *fh, uint32_t fhlen,
		uint64_t *fileid);
/* A reply body's first word (the status of most results), or -1. */
int raw_body_status(const struct raw_reply *r);
/* NFSv3 procedure PROC with the encoded ARGS, as root: the status its
 * result starts with (an nfsstat3), or -1 when it was not answered so. */
int raw_nfs3(int fd, enum raw_proto proto, uint32_t proc, const unsigned char *args,
	     size_t len);

#endif
