/* SPDX-License-Identifier: Apache-2.0 */
/* test_log_flood - what a peer sends must not decide how much the log grows
 * (issue 17, part 3).
 *
 *   test_log_flood UNION_NFSD
 *
 * The server's stderr, its log, goes to a file in a temp dir.  Hand-made
 * traffic (rawrpc.[ch]) from one peer then repeats lines the peer can cause:
 *
 *   1. 10,000 TCP connections, each sending one record mark of 2 GiB - 1
 *      bytes (over the server's largest record) and closing: at most the
 *      limit's burst per window the flood spans, plus a few other lines; then
 *      after a new window one more such mark gets a line that counts the
 *      ones left out, and the lines plus their counts add up to every mark
 *      sent.
 *   2. 2,000 MNTs of a path that no export has, 2,000 UMNTs and 2,000
 *      datagrams of junk to the NFS UDP port: each kind a burst per window.
 *
 * After each, the server still answers: NULL, and GETATTR of the root.
 * The server is stopped by pid and the temp dir removed in the group
 * teardown.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "rawrpc.h"
#include "start_server.h"

/* The server's limit (rpc/rpc.h): lines per window of seconds. */
#define LOG_WINDOW_S 5
#define LOG_BURST    5
/* Lines a flood may add besides its own kind's: a MNT, a connection error. */
#define OTHER_LINES 10

#define FLOOD_MARKS 10000
#define FLOOD_CALLS 2000

#define MOUNT_PROG 100005u
#define NFS_PROG   100003u
#define FH_MAX	   64

static struct {
	const char *bin;
	char tmp[32]; /* /tmp/logflood.XXXXXX */
	char log[64];
	char state[64];
	struct test_server srv;
	uint32_t xid;
} g;

/* The log as it is now (malloc'd, NUL-terminated). */
static char *read_log(void)
{
	FILE *f = fopen(g.log, "r");
	char *buf = NULL;
	size_t len = 0, n;
	char chunk[65536];

	assert_non_null(f);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		buf = realloc(buf, len + n + 1);
		assert_non_null(buf);
		memcpy(buf + len, chunk, n);
		len += n;
	}
	fclose(f);
	if (!buf)
		buf = calloc(1, 1);
	buf[len] = '\0';
	return buf;
}

static unsigned count_lines(const char *log, size_t from, const char *with)
{
	unsigned n = 0;

	for (const char *p = log + from; *p;) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (!with || memmem(p, len, with, strlen(with)))
			n++;
		p += len + (end ? 1 : 0);
	}
	return n;
}

/* The "(and N more since the last such line)" counts of the lines WITH. */
static unsigned long sum_quiet(const char *log, size_t from, const char *with)
{
	unsigned long sum = 0, q;

	for (const char *p = log + from; (p = strstr(p, with)) != NULL; p++) {
		const char *end = strchr(p, '\n');
		const char *and = strstr(p, "(and ");

		if (and&&(!end || and < end) && sscanf(and, "(and %lu more", &q) == 1)
			sum += q;
	}
	return sum;
}

static size_t log_size(void)
{
	struct stat st;

	assert_int_equal(stat(g.log, &st), 0);
	return (size_t)st.st_size;
}

/* At most the burst of each window that SECONDS of flood can touch. */
static unsigned bound(double seconds)
{
	return LOG_BURST * ((unsigned)(seconds / LOG_WINDOW_S) + 2);
}

/* NULL over TCP and UDP, then MNT and GETATTR of the root. */
static void still_serves(void)
{
	struct raw_call c = {.rpcvers = 2, .prog = NFS_PROG, .vers = 3, .proc = 0};
	unsigned char fh[FH_MAX];
	uint32_t fhlen = 0;
	struct raw_reply r;
	uint64_t fileid = 0;
	int fd;

	for (int p = RAW_TCP; p <= RAW_UDP; p++) {
		fd = raw_connect((enum raw_proto)p, g.srv.nfs_port);
		assert_true(fd >= 0);
		c.xid = ++g.xid;
		assert_int_equal(raw_call(fd, (enum raw_proto)p, &c, &r), 0);
		assert_int_equal(r.reply_stat, RAW_ACCEPTED);
		assert_int_equal(r.accept_stat, RAW_SUCCESS);
		raw_reply_free(&r);
		close(fd);
	}
	fd = raw_connect(RAW_TCP, g.srv.mount_port);
	assert_true(fd >= 0);
	assert_int_equal(raw_mnt(fd, RAW_TCP, "/", fh, &fhlen), 0);
	close(fd);
	fd = raw_connect(RAW_TCP, g.srv.nfs_port);
	assert_true(fd >= 0);
	assert_int_equal(raw_getattr(fd, RAW_TCP, fh, fhlen, &fileid), 0);
	assert_true(fileid != 0);
	close(fd);
}

/* One connection, one record mark of 2 GiB - 1 bytes (last fragment), closed. */
static void oversized_mark(void)
{
	static const unsigned char mark[4] = {0xff, 0xff, 0xff, 0xff};
	int fd = raw_connect(RAW_TCP, g.srv.nfs_port);

	assert_true(fd >= 0);
	assert_int_equal(raw_send_all(fd, mark, sizeof(mark)), 0);
	close(fd);
}

/* Sleeps into the next window of the server's limit (windows are
 * CLOCK_MONOTONIC seconds / LOG_WINDOW_S, the same clock here). */
static void next_window(void)
{
	long long w = (long long)it_now_s() / LOG_WINDOW_S;

	while ((long long)it_now_s() / LOG_WINDOW_S == w)
		usleep(100000);
}

static void test_oversized_marks(void **state)
{
	const char *what = "record over";
	size_t from = log_size();
	unsigned lines, kind;
	double t0, secs;
	char *log;

	(void)state;
	t0 = it_now_s();
	for (int i = 0; i < FLOOD_MARKS; i++)
		oversized_mark();
	secs = it_now_s() - t0;
	still_serves();
	usleep(500000); /* the last connections' reads */
	log = read_log();
	lines = count_lines(log, from, NULL);
	kind = count_lines(log, from, what);
	printf("%d oversized record marks in %.1f s: %u log lines (%u of them "
	       "\"%s\"), %zu bytes\n",
	       FLOOD_MARKS, secs, lines, kind, what, strlen(log) - from);
	free(log);
	assert_true(kind <= bound(secs));
	assert_true(lines <= bound(secs) + OTHER_LINES);

	/* A later window: one line again, with the count of the others. */
	next_window();
	oversized_mark();
	usleep(500000);
	log = read_log();
	kind = count_lines(log, from, what);
	printf("after a new window: %u lines, counts adding up to %lu\n", kind,
	       sum_quiet(log, from, what));
	assert_int_equal(kind + sum_quiet(log, from, what), FLOOD_MARKS + 1);
	free(log);
	still_serves();
}

static void mount_call(int fd, uint32_t proc, const char *path)
{
	unsigned char args[1100];
	struct raw_call c = {.xid = ++g.xid,
			     .rpcvers = 2,
			     .prog = MOUNT_PROG,
			     .vers = 3,
			     .proc = proc,
			     .flavor = 1,
			     .args = args};
	struct raw_reply r;

	c.arglen = raw_enc_string(args, path);
	assert_int_equal(raw_call(fd, RAW_TCP, &c, &r), 0);
	assert_int_equal(r.accept_stat, RAW_SUCCESS);
	raw_reply_free(&r);
}

/* FLOOD_CALLS junk datagrams: random bytes, a few to a few hundred. */
static void udp_junk(void)
{
	unsigned char junk[512];
	int fd = raw_connect(RAW_UDP, g.srv.nfs_port);
	size_t len;

	assert_true(fd >= 0);
	for (int i = 0; i < FLOOD_CALLS; i++) {
		len = 1 + (size_t)rand() % sizeof(junk);
		for (size_t k = 0; k < len; k++)
			junk[k] = (unsigned char)rand();
		send(fd, junk, len, 0);
		if (i % 64 == 63)
			usleep(
			    1000); /* the socket buffer, not the limit, would drop them */
	}
	close(fd);
}

#define NKINDS 3

static void test_refusals_and_junk(void **state)
{
	static const char *const kinds[NKINDS] = {": MNT /no/such/export ", ": UMNT ",
						  "udp record"};
	size_t from = log_size();
	unsigned lines, kind[NKINDS];
	double t0, secs;
	char *log;
	int fd, one = 1;

	(void)state;
	t0 = it_now_s();
	fd = raw_connect(RAW_TCP, g.srv.mount_port);
	assert_true(fd >= 0);
	/* rawrpc writes a record in pieces: without this, each call waits
	 * for a delayed ACK */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (int i = 0; i < FLOOD_CALLS; i++)
		mount_call(fd, 1, "/no/such/export");
	for (int i = 0; i < FLOOD_CALLS; i++)
		mount_call(fd, 3, "/no/such/export");
	close(fd);
	udp_junk();
	secs = it_now_s() - t0;
	still_serves();
	usleep(500000);
	log = read_log();
	lines = count_lines(log, from, NULL);
	printf("%d MNTs, %d UMNTs, %d junk datagrams in %.1f s: %u log lines\n",
	       FLOOD_CALLS, FLOOD_CALLS, FLOOD_CALLS, secs, lines);
	for (size_t k = 0; k < NKINDS; k++) {
		kind[k] = count_lines(log, from, kinds[k]);
		printf("  \"%s\": %u\n", kinds[k], kind[k]);
	}
	free(log);
	for (size_t k = 0; k < NKINDS; k++)
		assert_true(kind[k] <= bound(secs));
	assert_true(lines <= 3 * bound(secs) + OTHER_LINES);
}

/* ---- set-up ---- */

/* Starts the server with its stderr on g.log. */
static int start_logged(const char *const *args)
{
	int logfd, saved, rc;

	logfd = open(g.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (logfd < 0)
		return -1;
	saved = dup(STDERR_FILENO);
	if (saved < 0 || dup2(logfd, STDERR_FILENO) < 0) {
		close(logfd);
		return -1;
	}
	rc = test_server_start(g.bin, g.state, args, &g.srv);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(logfd);
	return rc;
}

static int group_setup(void **state)
{
	char lo[128], up[128], wk[128], st[128];
	const char *args[] = {lo, up, wk, st, NULL};

	(void)state;
	g.xid = ((uint32_t)time(NULL) << 8) ^ (uint32_t)getpid();
	srand(g.xid);
	if (it_tmp_layers(g.tmp, sizeof(g.tmp), "/tmp/logflood.XXXXXX"))
		return -1;
	snprintf(g.log, sizeof(g.log), "%s/log", g.tmp);
	snprintf(g.state, sizeof(g.state), "%s/state", g.tmp);
	snprintf(lo, sizeof(lo), "--lowerdir=%s/lower", g.tmp);
	snprintf(up, sizeof(up), "--upperdir=%s/upper", g.tmp);
	snprintf(wk, sizeof(wk), "--workdir=%s/work", g.tmp);
	snprintf(st, sizeof(st), "--log-level=info");
	return start_logged(args);
}

static int group_teardown(void **state)
{
	(void)state;
	test_server_stop(&g.srv);
	test_tmp_remove(g.tmp, "/tmp/logflood.");
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_oversized_marks),
	    cmocka_unit_test(test_refusals_and_junk),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: test_log_flood UNION_NFSD\n");
		return 2;
	}
	g.bin = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0); /* the figures before cmocka's verdicts */
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
