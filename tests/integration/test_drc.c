/* SPDX-License-Identifier: Apache-2.0 */
/* test_drc - the duplicate request cache against the real server (issue 6).
 *
 *   test_drc UNION_NFSD
 *
 * A client that hears no reply sends the call again with the same xid; for a
 * non-idempotent procedure the server must answer with the first reply instead
 * of running it twice (server/drc.c).  Over one socket (the cache knows a client
 * by address and port), once over UDP and once over TCP, with hand-made calls
 * (rawrpc.[ch], AUTH_SYS root) to a writable union in a temp dir:
 *
 *   1. a GUARDED CREATE of a new name, sent twice with one xid, gets two
 *      NFS3_OK replies with the same bytes (a second execution would answer
 *      NFS3ERR_EXIST); the upper dir then holds that one file and nothing else,
 *      and LOOKUP gives the handle the CREATE reply carried;
 *   2. the same CREATE with a new xid gets NFS3ERR_EXIST (the control: the
 *      server does refuse a second create, so the OK of 1 was a replay);
 *   3. a REMOVE of that name, sent twice with one xid, gets two NFS3_OK
 *      replies with the same bytes (a second execution would answer
 *      NFS3ERR_NOENT); the upper dir is empty and LOOKUP answers NFS3ERR_NOENT;
 *   4. a WRITE of one range, a second WRITE of the same range with other
 *      bytes, then the first WRITE again with its xid (a client that lost the
 *      first reply): the retransmission gets the first reply's bytes and the
 *      file holds the second WRITE's data (a second execution would bring the
 *      first data back).  1 MiB writes over TCP (wtmax), 16 KiB over UDP.
 *
 * The server is stopped by pid and the temp dir removed in the group teardown.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "rawrpc.h"
#include "start_server.h"

#define NFS_PROG 100003u
#define P_LOOKUP 3u
#define P_WRITE	 7u
#define P_CREATE 8u
#define P_REMOVE 12u

#define FILE_SYNC 2

#define NFS3_OK	      0
#define NFS3ERR_NOENT 2
#define NFS3ERR_EXIST 17

#define FH_MAX 64

static struct {
	const char *bin;
	char tmp[32]; /* /tmp/drc.XXXXXX */
	char upper[64];
	struct test_server srv;
	unsigned char root[FH_MAX];
	uint32_t rootlen;
	uint32_t xid;
} g;

/* diropargs3: the root's handle and NAME. */
static size_t put_dirop(unsigned char *p, const char *name)
{
	size_t n = raw_enc_fh(p, g.root, g.rootlen);

	return n + raw_enc_string(p + n, name);
}

/* CREATE3args, GUARDED, mode 0644 and nothing else set. */
static size_t create_args(unsigned char *p, const char *name)
{
	size_t n = put_dirop(p, name);

	n += raw_put32(p + n, 1); /* GUARDED */
	n += raw_put32(p + n, 1); /* set_mode */
	n += raw_put32(p + n, 0644);
	for (int i = 0; i < 5; i++) /* uid, gid, size, atime, mtime: unset */
		n += raw_put32(p + n, 0);
	return n;
}

static struct raw_call nfs_call(uint32_t proc, const unsigned char *args, size_t len)
{
	struct raw_call c = {.xid = ++g.xid,
			     .rpcvers = 2,
			     .prog = NFS_PROG,
			     .vers = 3,
			     .proc = proc,
			     .flavor = 1,
			     .args = args,
			     .arglen = len};
	return c;
}

/* Sends C twice on FD, as a client that heard nothing the first time would;
 * checks that both replies are accepted, carry STATUS and are the same bytes. */
static void send_twice(int fd, enum raw_proto proto, const struct raw_call *c, int status,
		       struct raw_reply *first)
{
	struct raw_reply again;

	assert_int_equal(raw_call(fd, proto, c, first), 0);
	assert_int_equal(raw_body_status(first), status);
	assert_int_equal(raw_call(fd, proto, c, &again), 0);
	if (raw_body_status(&again) != status)
		fail_msg("the retransmission of xid %#x was executed again: status %d",
			 c->xid, raw_body_status(&again));
	assert_int_equal(again.xid, first->xid);
	assert_int_equal(again.reply_stat, first->reply_stat);
	assert_int_equal(again.accept_stat, first->accept_stat);
	assert_int_equal(again.bodylen, first->bodylen);
	assert_memory_equal(again.body, first->body, first->bodylen);
	raw_reply_free(&again);
}

/* LOOKUP of NAME in the root: the status, and the handle into FH when OK. */
static int lookup(int fd, enum raw_proto proto, const char *name, unsigned char *fh,
		  uint32_t *fhlen)
{
	unsigned char args[FH_MAX + NAME_MAX + 16];
	struct raw_call c = nfs_call(P_LOOKUP, args, put_dirop(args, name));
	struct raw_reply r;
	int st;

	assert_int_equal(raw_call(fd, proto, &c, &r), 0);
	st = raw_body_status(&r);
	if (st == NFS3_OK) {
		assert_true(r.bodylen >= 8);
		*fhlen = raw_get32(r.body + 4);
		assert_true(*fhlen <= FH_MAX && 8 + *fhlen <= r.bodylen);
		memcpy(fh, r.body + 8, *fhlen);
	}
	raw_reply_free(&r);
	return st;
}

/* The names in the upper dir, as "a,b," in readdir order (the tests expect
 * one name or none). */
static void upper_names(char *buf, size_t cap)
{
	DIR *d = opendir(g.upper);
	struct dirent *e;
	size_t len = 0;

	assert_non_null(d);
	buf[0] = '\0';
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		len += (size_t)snprintf(buf + len, cap - len, "%s,", e->d_name);
		assert_true(len < cap);
	}
	closedir(d);
}

static void create_remove_twice(enum raw_proto proto, const char *name)
{
	unsigned char args[FH_MAX + NAME_MAX + 64], fh[FH_MAX];
	char want[NAME_MAX + 2], names[1024], path[PATH_MAX];
	struct raw_call c = nfs_call(P_CREATE, args, create_args(args, name));
	struct raw_reply created, removed;
	struct stat st;
	uint32_t fhlen = 0;
	int fd = raw_connect(proto, g.srv.nfs_port);

	assert_true(fd >= 0);
	/* 1: the retransmitted CREATE is answered from the cache */
	send_twice(fd, proto, &c, NFS3_OK, &created);
	snprintf(want, sizeof(want), "%s,", name);
	upper_names(names, sizeof(names));
	assert_string_equal(names, want);
	snprintf(path, sizeof(path), "%s/%s", g.upper, name);
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(lookup(fd, proto, name, fh, &fhlen), NFS3_OK);
	/* CREATE3resok starts with post_op_fh3: status, handle_follows, handle */
	assert_true(created.bodylen >= 12 + fhlen);
	assert_int_equal(raw_get32(created.body + 4), 1);
	assert_int_equal(raw_get32(created.body + 8), fhlen);
	assert_memory_equal(created.body + 12, fh, fhlen);
	raw_reply_free(&created);

	/* 2: the same call under a new xid is a new call, and is refused */
	c = nfs_call(P_CREATE, args, create_args(args, name));
	assert_int_equal(raw_call(fd, proto, &c, &created), 0);
	assert_int_equal(raw_body_status(&created), NFS3ERR_EXIST);
	raw_reply_free(&created);

	/* 3: the retransmitted REMOVE is answered from the cache */
	c = nfs_call(P_REMOVE, args, put_dirop(args, name));
	send_twice(fd, proto, &c, NFS3_OK, &removed);
	raw_reply_free(&removed);
	upper_names(names, sizeof(names));
	assert_string_equal(names, "");
	assert_int_equal(lookup(fd, proto, name, fh, &fhlen), NFS3ERR_NOENT);
	close(fd);
}

/* REMOVE of NAME (a new xid), so the upper dir is empty for the next test. */
static void remove_name(int fd, enum raw_proto proto, const char *name)
{
	unsigned char args[FH_MAX + NAME_MAX + 16];
	struct raw_call c = nfs_call(P_REMOVE, args, put_dirop(args, name));
	struct raw_reply r;

	assert_int_equal(raw_call(fd, proto, &c, &r), 0);
	assert_int_equal(raw_body_status(&r), NFS3_OK);
	raw_reply_free(&r);
}

/* CREATE of NAME (GUARDED, a new xid); its handle into FH. */
static uint32_t create_file(int fd, enum raw_proto proto, const char *name,
			    unsigned char *fh)
{
	unsigned char args[FH_MAX + NAME_MAX + 64];
	struct raw_call c = nfs_call(P_CREATE, args, create_args(args, name));
	struct raw_reply r;
	uint32_t fhlen;

	assert_int_equal(raw_call(fd, proto, &c, &r), 0);
	assert_int_equal(raw_body_status(&r), NFS3_OK);
	assert_true(r.bodylen >= 12);
	assert_int_equal(raw_get32(r.body + 4), 1); /* handle_follows */
	fhlen = raw_get32(r.body + 8);
	assert_true(fhlen <= FH_MAX && 12 + fhlen <= r.bodylen);
	memcpy(fh, r.body + 12, fhlen);
	raw_reply_free(&r);
	return fhlen;
}

/* WRITE3args at offset 0, FILE_SYNC, of LEN bytes of FILL; malloc'd into
 * *ARGS, whose length is returned. */
static size_t write_args(unsigned char **args, const unsigned char *fh, uint32_t fhlen,
			 int fill, size_t len)
{
	unsigned char *p = malloc(FH_MAX + 32 + len);
	size_t n;

	assert_non_null(p);
	n = raw_enc_fh(p, fh, fhlen);
	n += raw_put32(p + n, 0); /* offset, high word */
	n += raw_put32(p + n, 0);
	n += raw_put32(p + n, (uint32_t)len);
	n += raw_put32(p + n, FILE_SYNC);
	n += raw_put32(p + n, (uint32_t)len);
	memset(p + n, fill, len); /* len is a multiple of 4: no padding */
	*args = p;
	return n + len;
}

/* The upper file NAME holds LEN bytes of FILL and nothing else. */
static void assert_upper_filled(const char *name, int fill, size_t len)
{
	char path[PATH_MAX];
	unsigned char *buf = malloc(len + 1);
	FILE *f;
	size_t n, i;

	assert_non_null(buf);
	snprintf(path, sizeof(path), "%s/%s", g.upper, name);
	f = fopen(path, "rb");
	assert_non_null(f);
	n = fread(buf, 1, len + 1, f);
	fclose(f);
	assert_int_equal(n, len);
	for (i = 0; i < len && buf[i] == fill; i++)
		;
	if (i < len)
		fail_msg("%s: byte %zu is %#x, not the second WRITE's %#x", name, i,
			 buf[i], fill);
	free(buf);
}

static void write_twice_then_first(enum raw_proto proto, const char *name, size_t len)
{
	unsigned char fh[FH_MAX], *args1, *args2;
	struct raw_reply first, second, again;
	int fd = raw_connect(proto, g.srv.nfs_port);
	uint32_t fhlen;
	struct raw_call c1, c2;

	assert_true(fd >= 0);
	fhlen = create_file(fd, proto, name, fh);
	c1 = nfs_call(P_WRITE, NULL, 0);
	c1.arglen = write_args(&args1, fh, fhlen, 'A', len);
	c1.args = args1;
	c2 = nfs_call(P_WRITE, NULL, 0);
	c2.arglen = write_args(&args2, fh, fhlen, 'B', len);
	c2.args = args2;

	assert_int_equal(raw_call(fd, proto, &c1, &first), 0);
	assert_int_equal(raw_body_status(&first), NFS3_OK);
	assert_int_equal(raw_call(fd, proto, &c2, &second), 0);
	assert_int_equal(raw_body_status(&second), NFS3_OK);
	assert_upper_filled(name, 'B', len);
	/* the first WRITE again, as a client that never heard its reply */
	assert_int_equal(raw_call(fd, proto, &c1, &again), 0);
	assert_int_equal(raw_body_status(&again), NFS3_OK);
	assert_upper_filled(name, 'B', len);
	assert_int_equal(again.bodylen, first.bodylen);
	assert_memory_equal(again.body, first.body, first.bodylen);

	raw_reply_free(&first);
	raw_reply_free(&second);
	raw_reply_free(&again);
	free(args1);
	free(args2);
	remove_name(fd, proto, name);
	close(fd);
}

static void test_drc_udp(void **state)
{
	(void)state;
	create_remove_twice(RAW_UDP, "drc-udp");
}

static void test_drc_tcp(void **state)
{
	(void)state;
	create_remove_twice(RAW_TCP, "drc-tcp");
}

static void test_drc_write_udp(void **state)
{
	(void)state;
	write_twice_then_first(RAW_UDP, "drc-write-udp", 16 * 1024);
}

static void test_drc_write_tcp(void **state)
{
	(void)state;
	write_twice_then_first(RAW_TCP, "drc-write-tcp", 1024 * 1024);
}

/* ---- set-up ---- */

static int group_setup(void **state)
{
	char lo[128], up[128], wk[128], st[128];
	const char *args[] = {lo, up, wk, NULL};
	int fd, rc;

	(void)state;
	g.xid = ((uint32_t)time(NULL) << 8) ^ (uint32_t)getpid();
	if (it_tmp_layers(g.tmp, sizeof(g.tmp), "/tmp/drc.XXXXXX"))
		return -1;
	snprintf(g.upper, sizeof(g.upper), "%s/upper", g.tmp);
	snprintf(lo, sizeof(lo), "--lowerdir=%s/lower", g.tmp);
	snprintf(up, sizeof(up), "--upperdir=%s", g.upper);
	snprintf(wk, sizeof(wk), "--workdir=%s/work", g.tmp);
	snprintf(st, sizeof(st), "%s/state", g.tmp);
	if (test_server_start(g.bin, st, args, &g.srv))
		return -1;
	fd = raw_connect(RAW_TCP, g.srv.mount_port);
	if (fd < 0)
		return -1;
	rc = raw_mnt(fd, RAW_TCP, "/", g.root, &g.rootlen);
	close(fd);
	return rc == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	test_server_stop(&g.srv);
	if (g.tmp[0])
		test_tree_remove(g.tmp);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_drc_udp),
	    cmocka_unit_test(test_drc_tcp),
	    cmocka_unit_test(test_drc_write_udp),
	    cmocka_unit_test(test_drc_write_tcp),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: test_drc UNION_NFSD\n");
		return 2;
	}
	g.bin = argv[1];
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
