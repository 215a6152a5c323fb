/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_unions.c - per-client unions are released, and reopen with the
 * same handles (issue 17, part 1).
 *
 * One per-client export (upper TMP/c/%a/upper, work TMP/c/%a/work) over a
 * lower layer with a file "f"; client rules admit 127.0.0.1 and
 * 127.1.0.0/16.  Loopback lets a socket bound to any 127/8 address before
 * connect() be another client.  Whether a client's union is open is read
 * from the server's descriptors: an open union holds its upper dir.
 *
 *  - churn: with the limit on open files at 1,024, 5,000 addresses each
 *    connect, MNT, GETATTR, UMNT and close.  Every MNT succeeds, the
 *    server's descriptors stay under a bound that a growing number of open
 *    unions would pass, and a new connection from 127.0.0.1 is served every
 *    250 addresses;
 *  - handles: with --max-client-unions=2, a client's union is released when
 *    others mount, and its handles (of the root and of a file) then answer
 *    with the same fileids;
 *  - foreign: a handle of client B's union answers ACCES to client A, both
 *    while B's union is open and once it is released, and A's call does not
 *    reopen it; B's own call does;
 *  - failed MNT: a MNT of a path that does not exist leaves no dir for its
 *    client;
 *  - idle: a client that unmounted has its union released once it has been
 *    unused for --client-union-idle seconds; a client still mounted keeps its.
 *  - concurrent: with --max-client-unions=2, 6 threads of 5 clients each call
 *    at once, so unions are released and reopened under calls, and every
 *    call must succeed with its handles' first fileids (in the ASan tree this
 *    is the registry's use-after-free and race check).
 *
 * Runs as root.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "rawrpc.h"
#include "start_server.h"

#define SERVER_NOFILE  1024
#define CHURN	       5000
#define CHURN_CHECK    250 /* addresses between checks of 127.0.0.1 and the fds */
#define UNION_FDS      6   /* an open union over one lower: 2 * 2 layers + 2 */
#define THREADS	       8
#define NFS3ERR_ACCES  13
#define MNT3ERR_NOENT  2
#define IDLE_S	       2
#define RELEASE_WAIT_S 30 /* for the reaper, on a busy machine */
#define CC_THREADS     6
#define CC_CLIENTS     5    /* per thread */
#define CC_ROUNDS      1500 /* calls per thread, each on one of its clients */
#define CLIENTS	       "127.0.0.1(rw,no_root_squash,insecure) 127.1.0.0/16(rw,insecure)"

static const char *server_bin;
static struct test_server server = {.pid = -1};
static char tmp[64];

/* A client: its address, its connection, its root handle. */
struct client {
	char addr[32];
	int fd;
	unsigned char root[64];
	uint32_t rootlen;
};

/* The upper dir the template gives ADDR. */
static void upper_of(const char *addr, char *out, size_t len)
{
	snprintf(out, len, "%s/c/%s/upper", tmp, addr);
}

/* True when the server holds ADDR's upper dir open: its union is open. */
static bool union_open(const char *addr)
{
	char upper[128];

	upper_of(addr, upper, sizeof(upper));
	return test_server_holds(&server, upper);
}

/* Waits up to SECONDS for ADDR's union to be open (WANT) or not. */
static bool wait_union(const char *addr, bool want, double seconds)
{
	double end = it_now_s() + seconds;

	while (union_open(addr) != want && it_now_s() < end)
		it_sleep_ms(100);
	return union_open(addr) == want;
}

/* Connects C from ADDR and mounts PATH; returns the MNT status (-1: none). */
static int client_mount(struct client *c, const char *addr, const char *path)
{
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	c->fd = raw_connect_from(addr, server.nfs_port);
	if (c->fd < 0)
		return -1;
	return raw_mnt(c->fd, RAW_TCP, path, c->root, &c->rootlen);
}

static void client_close(struct client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* A client that mounts "/" and goes away mounted. */
static void mount_and_leave(const char *addr)
{
	struct client c;

	assert_int_equal(client_mount(&c, addr, "/"), 0);
	client_close(&c);
}

static void start(const char *extra)
{
	char lower[128], state[128], low_arg[160], up_arg[160], work_arg[160];
	const char *args[] = {low_arg,	     up_arg,
			      work_arg,	     "--clients=" CLIENTS,
			      "--threads=8", "--client-union-idle=2",
			      extra,	     NULL};
	FILE *f;

	snprintf(lower, sizeof(lower), "%s/lower", tmp);
	snprintf(state, sizeof(state), "%s/state", tmp);
	snprintf(low_arg, sizeof(low_arg), "--lowerdir=%s", lower);
	snprintf(up_arg, sizeof(up_arg), "--upperdir=%s/c/%%a/upper", tmp);
	snprintf(work_arg, sizeof(work_arg), "--workdir=%s/c/%%a/work", tmp);
	assert_int_equal(mkdir(lower, 0755), 0);
	snprintf(state, sizeof(state), "%s/lower/f", tmp);
	f = fopen(state, "w");
	assert_non_null(f);
	fputs("lower\n", f);
	fclose(f);
	snprintf(state, sizeof(state), "%s/state", tmp);
	assert_int_equal(test_server_start_nofile(server_bin, state, args, false,
						  SERVER_NOFILE, &server),
			 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/test_client_unions.XXXXXX");
	return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	test_server_stop(&server);
	test_tmp_remove(tmp, "/tmp/test_client_unions.");
	return 0;
}

/* ---- the tests ---- */

/* MNT and GETATTR of the root from a new connection from 127.0.0.1. */
static bool localhost_served(void)
{
	struct client c;
	uint64_t fileid;
	bool ok;

	ok = client_mount(&c, "127.0.0.1", "/") == 0 &&
	     raw_getattr(c.fd, RAW_TCP, c.root, c.rootlen, &fileid) == 0;
	client_close(&c);
	return ok;
}

static void churn(void **state)
{
	unsigned base, fds, max_fds = 0, bound, mnt_fail = 0, served = 0, checks = 0;
	char addr[32];
	struct client c;
	uint64_t fileid;
	double t0;

	(void)state;
	start(NULL);
	assert_true(localhost_served());
	base = test_server_fds(&server);
	/* the default cap: an eighth of the limit over a union's descriptors */
	bound = base + (SERVER_NOFILE / 8 / UNION_FDS + THREADS) * UNION_FDS;
	t0 = it_now_s();
	for (unsigned i = 0; i < CHURN; i++) {
		snprintf(addr, sizeof(addr), "127.1.%u.%u", i / 250, 1 + i % 250);
		if (client_mount(&c, addr, "/") != 0 ||
		    raw_getattr(c.fd, RAW_TCP, c.root, c.rootlen, &fileid) != 0 ||
		    raw_umnt(c.fd, RAW_TCP, "/") != 0)
			mnt_fail++;
		client_close(&c);
		if (i % CHURN_CHECK == CHURN_CHECK - 1) {
			checks++;
			served += localhost_served();
			fds = test_server_fds(&server);
			max_fds = fds > max_fds ? fds : max_fds;
		}
	}
	printf("churn: %u addresses in %.1f s, %u failed; server held %u descriptors "
	       "at the start, at most %u after (bound %u); 127.0.0.1 served %u of %u "
	       "times\n",
	       CHURN, it_now_s() - t0, mnt_fail, base, max_fds, bound, served, checks);
	assert_int_equal(mnt_fail, 0);
	assert_int_equal(served, checks);
	assert_true(max_fds <= bound);
	assert_true(test_server_alive(&server));
}

static void handles(void **state)
{
	unsigned char f[64];
	uint32_t flen = 0;
	uint64_t root_id, f_id, id;
	struct client a;
	char addr[32];

	(void)state;
	start("--max-client-unions=2");
	assert_int_equal(client_mount(&a, "127.1.200.1", "/"), 0);
	assert_int_equal(raw_lookup(a.fd, RAW_TCP, a.root, a.rootlen, "f", f, &flen), 0);
	assert_int_equal(raw_getattr(a.fd, RAW_TCP, a.root, a.rootlen, &root_id), 0);
	assert_int_equal(raw_getattr(a.fd, RAW_TCP, f, flen, &f_id), 0);
	assert_true(union_open(a.addr));
	for (unsigned i = 1; i <= 4; i++) {
		snprintf(addr, sizeof(addr), "127.1.201.%u", i);
		mount_and_leave(addr);
	}
	assert_true(wait_union(a.addr, false, RELEASE_WAIT_S));
	assert_int_equal(raw_getattr(a.fd, RAW_TCP, f, flen, &id), 0);
	assert_int_equal(id, f_id);
	assert_int_equal(raw_getattr(a.fd, RAW_TCP, a.root, a.rootlen, &id), 0);
	assert_int_equal(id, root_id);
	assert_true(union_open(a.addr));
	printf("handles: the union of %s released and reopened; root and f kept "
	       "fileids %llu and %llu\n",
	       a.addr, (unsigned long long)root_id, (unsigned long long)f_id);
	client_close(&a);
}

static void foreign(void **state)
{
	struct client a, b;
	uint64_t id;
	char addr[32];

	(void)state;
	start("--max-client-unions=2");
	assert_int_equal(client_mount(&a, "127.1.202.1", "/"), 0);
	assert_int_equal(client_mount(&b, "127.1.202.2", "/"), 0);
	assert_int_equal(raw_getattr(a.fd, RAW_TCP, b.root, b.rootlen, &id),
			 NFS3ERR_ACCES);
	for (unsigned i = 1; i <= 4; i++) {
		snprintf(addr, sizeof(addr), "127.1.203.%u", i);
		mount_and_leave(addr);
	}
	assert_true(wait_union(b.addr, false, RELEASE_WAIT_S));
	assert_int_equal(raw_getattr(a.fd, RAW_TCP, b.root, b.rootlen, &id),
			 NFS3ERR_ACCES);
	assert_false(union_open(b.addr));
	assert_int_equal(raw_getattr(b.fd, RAW_TCP, b.root, b.rootlen, &id), 0);
	assert_true(union_open(b.addr));
	client_close(&a);
	client_close(&b);
}

static void failed_mnt(void **state)
{
	char dir[128];
	struct client c;
	struct stat st;

	(void)state;
	start(NULL);
	assert_int_equal(client_mount(&c, "127.1.204.1", "/no/such/dir"), MNT3ERR_NOENT);
	client_close(&c);
	snprintf(dir, sizeof(dir), "%s/c/127.1.204.1", tmp);
	assert_int_equal(stat(dir, &st), -1);
	assert_int_equal(errno, ENOENT);
	assert_false(union_open("127.1.204.1"));
	/* the same client's good MNT makes them */
	assert_int_equal(client_mount(&c, "127.1.204.1", "/"), 0);
	assert_int_equal(stat(dir, &st), 0);
	/* and once it mounted, a failed MNT after its UMNT leaves them */
	assert_int_equal(raw_umnt(c.fd, RAW_TCP, "/"), 0);
	assert_int_equal(raw_mnt(c.fd, RAW_TCP, "/no/such/dir", c.root, &c.rootlen),
			 MNT3ERR_NOENT);
	assert_int_equal(stat(dir, &st), 0);
	client_close(&c);
}

static void idle(void **state)
{
	struct client gone, stays;
	double t0;

	(void)state;
	start(NULL);
	assert_int_equal(client_mount(&gone, "127.1.205.1", "/"), 0);
	assert_int_equal(client_mount(&stays, "127.1.205.2", "/"), 0);
	assert_int_equal(raw_umnt(gone.fd, RAW_TCP, "/"), 0);
	client_close(&gone);
	assert_true(union_open(gone.addr));
	t0 = it_now_s();
	assert_true(wait_union(gone.addr, false, IDLE_S + RELEASE_WAIT_S));
	printf("idle: the union of %s, unmounted, released after %.1f s (idle time %d "
	       "s)\n",
	       gone.addr, it_now_s() - t0, IDLE_S);
	assert_true(it_now_s() - t0 >= IDLE_S - 1);
	assert_true(union_open(stays.addr));
	client_close(&stays);
}

/* One of a thread's clients: mounted, its handles and their first fileids. */
struct cc_client {
	struct client c;
	unsigned char f[64];
	uint32_t flen;
	uint64_t root_id, f_id;
};

static bool cc_mount(struct cc_client *k, const char *addr)
{
	return client_mount(&k->c, addr, "/") == 0 &&
	       raw_lookup(k->c.fd, RAW_TCP, k->c.root, k->c.rootlen, "f", k->f,
			  &k->flen) == 0;
}

/* Calls on K; false when one fails or a fileid changed. */
static bool cc_call(struct cc_client *k)
{
	uint64_t root_id, f_id;

	if (raw_getattr(k->c.fd, RAW_TCP, k->c.root, k->c.rootlen, &root_id) != 0 ||
	    raw_getattr(k->c.fd, RAW_TCP, k->f, k->flen, &f_id) != 0)
		return false;
	if (!k->root_id)
		k->root_id = root_id, k->f_id = f_id;
	return root_id == k->root_id && f_id == k->f_id;
}

static void *cc_thread(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg, bad = 0;
	struct cc_client k[CC_CLIENTS] = {0};
	char addr[32];

	for (unsigned i = 0; i < CC_ROUNDS; i++) {
		struct cc_client *c = &k[i % CC_CLIENTS];

		snprintf(addr, sizeof(addr), "127.1.%u.%u", 210 + t, 1 + i % CC_CLIENTS);
		if (!c->c.rootlen && !cc_mount(c, addr))
			bad++;
		else if (!cc_call(c))
			bad++;
		if (i % 7 == 6 && c->c.rootlen) { /* unmount, and come back */
			raw_umnt(c->c.fd, RAW_TCP, "/");
			client_close(&c->c);
			c->c.rootlen = 0;
		}
	}
	for (unsigned j = 0; j < CC_CLIENTS; j++)
		if (k[j].c.rootlen)
			client_close(&k[j].c);
	return (void *)(uintptr_t)bad;
}

static void concurrent(void **state)
{
	pthread_t th[CC_THREADS];
	unsigned bad = 0;
	void *ret;
	double t0;

	(void)state;
	start("--max-client-unions=2");
	t0 = it_now_s();
	for (unsigned t = 0; t < CC_THREADS; t++)
		assert_int_equal(
		    pthread_create(&th[t], NULL, cc_thread, (void *)(uintptr_t)t), 0);
	for (unsigned t = 0; t < CC_THREADS; t++) {
		pthread_join(th[t], &ret);
		bad += (unsigned)(uintptr_t)ret;
	}
	printf("concurrent: %u threads x %u calls on %u clients over 2 open unions in "
	       "%.1f s: %u failed\n",
	       CC_THREADS, CC_ROUNDS, CC_THREADS * CC_CLIENTS, it_now_s() - t0, bad);
	assert_int_equal(bad, 0);
	assert_true(test_server_alive(&server));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(handles, setup, teardown),
	    cmocka_unit_test_setup_teardown(foreign, setup, teardown),
	    cmocka_unit_test_setup_teardown(failed_mnt, setup, teardown),
	    cmocka_unit_test_setup_teardown(idle, setup, teardown),
	    cmocka_unit_test_setup_teardown(concurrent, setup, teardown),
	    cmocka_unit_test_setup_teardown(churn, setup, teardown),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "test_client_unions: needs root\n");
		return 77;
	}
	server_bin = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
