/* SPDX-License-Identifier: Apache-2.0 */
/* client_tables - N distinct clients each make files and list their union,
 * for client_tables.sh: what open client unions cost the server.
 *
 *   client_tables PORT N
 *
 * Client I speaks from 127.5.(I / 250).(1 + I % 250) (loopback takes any
 * 127/8 source address, and the server sees another client for each).
 * First pass: every client connects, MNTs "/" and CREATEs three files in
 * its root.  Then a pause longer than the listing cache's settle time, so
 * that the roots' listings are cached and remember attributes.  Second
 * pass: every client connects again, MNTs and asks READDIRPLUS of its root
 * twice (the second from the cache).  No UMNT: the unions stay open.
 * THREADS clients at a time.  Prints the calls that failed; exit 1 if any.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rawrpc.h"

#define THREADS	    4
#define FILES	    3
#define NFS_CREATE  8
#define NFS_RDPLUS  17
#define SETTLE_US   1500000 /* more than the listing cache's settle time */
#define RDPLUS_DIRC 4096
#define RDPLUS_MAXC 32768

struct part {
	pthread_t t;
	int port;
	unsigned n, off, failed;
	int pass;
};

/* CREATE3 NAME in DIR, UNCHECKED, no attributes set: the nfsstat3. */
static int create(int fd, const unsigned char *dir, uint32_t dirlen, const char *name)
{
	unsigned char a[512];
	size_t len = raw_enc_fh(a, dir, dirlen);

	len += raw_enc_string(a + len, name);
	len += raw_put32(a + len, 0); /* UNCHECKED */
	for (int i = 0; i < 6; i++)   /* sattr3: nothing set */
		len += raw_put32(a + len, 0);
	return raw_nfs3(fd, RAW_TCP, NFS_CREATE, a, len);
}

/* READDIRPLUS3 of DIR from cookie 0: the nfsstat3. */
static int rdplus(int fd, const unsigned char *dir, uint32_t dirlen)
{
	unsigned char a[128];
	size_t len = raw_enc_fh(a, dir, dirlen);

	memset(a + len, 0, 16); /* cookie, cookieverf */
	len += 16;
	len += raw_put32(a + len, RDPLUS_DIRC);
	len += raw_put32(a + len, RDPLUS_MAXC);
	return raw_nfs3(fd, RAW_TCP, NFS_RDPLUS, a, len);
}

static unsigned visit(int port, unsigned i, int pass)
{
	unsigned char root[64];
	uint32_t rootlen = 0;
	unsigned failed = 0;
	char addr[32], name[32];
	int fd;

	snprintf(addr, sizeof(addr), "127.5.%u.%u", i / 250, 1 + i % 250);
	fd = raw_connect_from(addr, port);
	if (fd < 0 || raw_mnt(fd, RAW_TCP, "/", root, &rootlen) != 0) {
		if (fd >= 0)
			close(fd);
		return 1;
	}
	for (int k = 0; pass == 1 && k < FILES; k++) {
		snprintf(name, sizeof(name), "file%d", k);
		failed += create(fd, root, rootlen, name) != 0;
	}
	for (int k = 0; pass == 2 && k < 2; k++)
		failed += rdplus(fd, root, rootlen) != 0;
	close(fd);
	return failed;
}

static void *part_run(void *arg)
{
	struct part *p = arg;

	for (unsigned i = p->off; i < p->n; i += THREADS)
		p->failed += visit(p->port, i, p->pass);
	return NULL;
}

static unsigned run_pass(int port, unsigned n, int pass)
{
	struct part p[THREADS];
	unsigned failed = 0;

	for (unsigned k = 0; k < THREADS; k++) {
		p[k] = (struct part){.port = port, .n = n, .off = k, .pass = pass};
		if (pthread_create(&p[k].t, NULL, part_run, &p[k]))
			exit(2);
	}
	for (unsigned k = 0; k < THREADS; k++) {
		pthread_join(p[k].t, NULL);
		failed += p[k].failed;
	}
	return failed;
}

int main(int argc, char **argv)
{
	unsigned failed;
	int port;
	long n;

	if (argc != 3 || (port = atoi(argv[1])) <= 0 || (n = atol(argv[2])) <= 0 ||
	    n > 250 * 250) {
		fprintf(stderr, "usage: client_tables PORT N\n");
		return 2;
	}
	failed = run_pass(port, (unsigned)n, 1);
	usleep(SETTLE_US);
	failed += run_pass(port, (unsigned)n, 2);
	printf("failed %u\n", failed);
	return failed ? 1 : 0;
}
