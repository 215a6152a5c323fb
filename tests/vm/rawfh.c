/* SPDX-License-Identifier: Apache-2.0 */
/* rawfh.c - raw NFSv3 file handles in a guest of tests/vm (built static by
 * the test that uses it, since the guest has no C library).
 *
 *   rawfh handle PATH            the server's handle of PATH on an NFS mount,
 *                                in hex, as the Linux client holds it
 *   rawfh getattr ADDR PORT HEX  GETATTR of handle HEX from this host, as root
 *                                and from a reserved port: prints the nfsstat3
 *                                of the reply (0 NFS3_OK, 13 NFS3ERR_ACCES, ...)
 *
 * A test can so present one client's handle from another client, which the
 * kernel client never does by itself.  Exit: 0 done (whatever the status),
 * 1 failure (message on stderr), 2 usage.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
	FH_MAX = 64,	    /* NFS3_FHSIZE */
	LINUX_FH_OFF = 12,  /* the Linux NFS client's export handle: three */
	LINUX_FH_DATA = 14, /* 32-bit words, then a 16-bit size and the bytes */
	NFS_PROG = 100003,
	NFS_GETATTR = 1,
	AUTH_UNIX = 1,
};

static int fail(const char *what)
{
	fprintf(stderr, "rawfh: %s: %s\n", what, strerror(errno));
	return 1;
}

static int print_handle(const char *path)
{
	union {
		struct file_handle h;
		char room[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	} u;
	unsigned short size;
	int mount_id;

	u.h.handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(AT_FDCWD, path, &u.h, &mount_id, 0) != 0)
		return fail(path);
	if (u.h.handle_bytes < LINUX_FH_DATA)
		return fail("handle too short for the NFS client's layout");
	memcpy(&size, u.h.f_handle + LINUX_FH_OFF, sizeof(size));
	if (size == 0 || size > FH_MAX ||
	    LINUX_FH_DATA + (unsigned)size > u.h.handle_bytes) {
		errno = EINVAL;
		return fail("no NFS handle inside the client's handle");
	}
	for (unsigned i = 0; i < size; i++)
		printf("%02x", u.h.f_handle[LINUX_FH_DATA + i]);
	printf("\n");
	return 0;
}

/* put32: appends V (XDR: big-endian) at *P */
static void put32(unsigned char **p, uint32_t v)
{
	v = htonl(v);
	memcpy(*p, &v, 4);
	*p += 4;
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return ntohl(v);
}

/* build_call: a GETATTR call of handle FH (LEN bytes) at BUF, after the record
 * mark; returns its length */
static size_t build_call(unsigned char *buf, const unsigned char *fh, size_t len)
{
	unsigned char *p = buf + 4;

	put32(&p, 0x5eed0001); /* xid */
	put32(&p, 0);	       /* CALL */
	put32(&p, 2);	       /* RPC version */
	put32(&p, NFS_PROG);
	put32(&p, 3);
	put32(&p, NFS_GETATTR);
	put32(&p, AUTH_UNIX);
	put32(&p, 20); /* stamp, empty machine name, uid, gid, no groups */
	put32(&p, 0);
	put32(&p, 0);
	put32(&p, 0);
	put32(&p, 0);
	put32(&p, 0);
	put32(&p, 0); /* verifier: AUTH_NONE */
	put32(&p, 0);
	put32(&p, (uint32_t)len);
	memcpy(p, fh, len);
	p += (len + 3) & ~(size_t)3;
	size_t n = (size_t)(p - buf);
	unsigned char *m = buf;
	put32(&m, 0x80000000u | (uint32_t)(n - 4));
	return n;
}

/* connect_reserved: a TCP socket from a port below 1024 to ADDR:PORT */
static int connect_reserved(const char *addr, int port)
{
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = -1;

	if (inet_pton(AF_INET, addr, &to.sin_addr) != 1) {
		errno = EINVAL;
		return -1;
	}
	for (int lport = 1023; lport >= 600; lport--) {
		struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons(lport)};

		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			return -1;
		if (bind(fd, (struct sockaddr *)&me, sizeof(me)) == 0 &&
		    connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0)
			return fd;
		close(fd);
	}
	errno = EADDRINUSE;
	return -1;
}

static int read_full(int fd, unsigned char *buf, size_t len)
{
	while (len > 0) {
		ssize_t r = read(fd, buf, len);

		if (r <= 0)
			return -1;
		buf += r;
		len -= (size_t)r;
	}
	return 0;
}

/* parse_hex: HEX into FH; returns its length, or 0 if it is no handle */
static size_t parse_hex(const char *hex, unsigned char *fh)
{
	size_t n = strlen(hex) / 2;

	if (n == 0 || n > FH_MAX || strlen(hex) % 2)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (sscanf(hex + 2 * i, "%2hhx", &fh[i]) != 1)
			return 0;
	return n;
}

static int getattr(const char *addr, int port, const char *hex)
{
	unsigned char fh[FH_MAX], call[128], reply[512];
	size_t len = parse_hex(hex, fh), n;
	int fd, rc = 1;

	if (len == 0) {
		errno = EINVAL;
		return fail("handle");
	}
	fd = connect_reserved(addr, port);
	if (fd < 0)
		return fail("connect");
	n = build_call(call, fh, len);
	if (write(fd, call, n) != (ssize_t)n || read_full(fd, reply, 4) != 0) {
		fail("call");
		goto out;
	}
	n = get32(reply) & 0x7fffffff;
	/* xid, REPLY, MSG_ACCEPTED, verifier (flavor, empty), SUCCESS, status */
	if (n < 28 || n > sizeof(reply) || read_full(fd, reply, n) != 0) {
		errno = EPROTO;
		fail("reply");
		goto out;
	}
	if (get32(reply + 4) != 1 || get32(reply + 8) != 0 || get32(reply + 16) != 0 ||
	    get32(reply + 20) != 0) {
		errno = EPROTO;
		fail("the call was not accepted");
		goto out;
	}
	printf("%u\n", get32(reply + 24));
	rc = 0;
out:
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "handle") == 0)
		return print_handle(argv[2]);
	if (argc == 5 && strcmp(argv[1], "getattr") == 0)
		return getattr(argv[2], atoi(argv[3]), argv[4]);
	fprintf(stderr, "usage: rawfh handle PATH | rawfh getattr ADDR PORT HEX\n");
	return 2;
}
