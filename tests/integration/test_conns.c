/* SPDX-License-Identifier: Apache-2.0 */
/* test_conns.c - connection limits under a flood (issue 17, part 2).
 *
 * The server runs with its limit on open files at 1,024 (soft and hard), an
 * idle timeout of IDLE_S seconds and client rules that admit 127.0.0.1 and
 * 127.1.0.0/16 only.  Loopback lets a socket bound to any 127/8 address
 * before connect() be another client.
 *
 *  - unadmitted: 5,000 idle connections from 127.0.0.2..127.0.0.21 are
 *    closed by the server at once; its descriptors stay far under the limit,
 *    and 100 new connections from 127.0.0.1 each get MNT and GETATTR served;
 *  - cap: 1,500 idle connections from 100 admitted addresses (15 each) take
 *    the server to its connection cap; it closes the least recently used idle
 *    ones, never runs out of descriptors, and new connections from
 *    127.0.0.1 are all served;
 *  - idle: every connection left idle is closed within the timeout (plus the
 *    sweep's granularity), while one that makes a call a second stays;
 *  - per address: with --max-connections-per-address=4, the 5th connection
 *    from one address closes that address's oldest idle one.
 *
 * Runs as root (a raised limit on open files for the test's own sockets).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "rawrpc.h"
#include "start_server.h"

#define SERVER_NOFILE 1024
#define IDLE_S	      3
#define FLOOD	      5000
#define FLOOD_ADDRS   20
#define CAP_CONNS     1500
#define CAP_ADDRS     100
#define SERVED	      100
#define CLIENTS	      "127.0.0.1(rw,no_root_squash,insecure) 127.1.0.0/16(rw,insecure)"

static const char *server_bin;
static struct test_server server = {.pid = -1};
static char tmp[64];
static int *held; /* the test's idle sockets, closed by teardown */
static size_t nheld;

/* ---- helpers ---- */

/* A TCP connection from SRC to the server's NFS port; -1 if connect fails. */
static int connect_from(const char *src)
{
	return raw_connect_from(src, server.nfs_port);
}

static void hold(int fd)
{
	held[nheld++] = fd;
}

static void close_held(void)
{
	for (size_t i = 0; i < nheld; i++)
		close(held[i]);
	nheld = 0;
}

/* True when the server closed FD: EOF or a reset waits to be read. */
static bool closed_by_server(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char b;
	ssize_t n;

	if (poll(&p, 1, 0) != 1)
		return false;
	n = recv(fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
	return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* How many of held[FROM..TO) the server has closed. */
static size_t count_closed(size_t from, size_t to)
{
	size_t n = 0;

	for (size_t i = from; i < to; i++)
		n += closed_by_server(held[i]);
	return n;
}

/* Waits up to SECONDS for the server to close WANT of held[FROM..TO); returns
 * how many it closed.  The server accepts at its own pace: on a busy machine
 * it is still working through the listen backlog when the clients are done. */
static size_t wait_closed(size_t from, size_t to, size_t want, double seconds)
{
	double end = it_now_s() + seconds;
	size_t n;

	while ((n = count_closed(from, to)) < want && it_now_s() < end)
		it_sleep_ms(100);
	return n;
}

static unsigned server_fds(void)
{
	return test_server_fds(&server);
}

/* MNT and GETATTR of the root over FD; true when both succeed. */
static bool served(int fd)
{
	unsigned char fh[64];
	uint32_t fhlen = 0;
	uint64_t fileid;

	return raw_mnt(fd, RAW_TCP, "/", fh, &fhlen) == 0 &&
	       raw_getattr(fd, RAW_TCP, fh, fhlen, &fileid) == 0;
}

/* How many of COUNT new connections from 127.0.0.1 are served. */
static unsigned serve_new(unsigned count)
{
	unsigned ok = 0;
	int fd;

	for (unsigned i = 0; i < count; i++) {
		fd = connect_from("127.0.0.1");
		if (fd < 0)
			continue;
		ok += served(fd);
		close(fd);
	}
	return ok;
}

static void start(const char *extra)
{
	char lower[128], state[128], low_arg[160];
	const char *args[] = {
	    low_arg, "--clients=" CLIENTS, "--idle-timeout=3", "--threads=8", extra,
	    NULL};

	snprintf(lower, sizeof(lower), "%s/lower", tmp);
	snprintf(state, sizeof(state), "%s/state", tmp);
	snprintf(low_arg, sizeof(low_arg), "--lowerdir=%s", lower);
	mkdir(lower, 0755);
	assert_int_equal(test_server_start_nofile(server_bin, state, args, false,
						  SERVER_NOFILE, &server),
			 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/test_conns.XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	held = calloc(FLOOD + CAP_CONNS + SERVED, sizeof(*held));
	return held ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	close_held();
	test_server_stop(&server);
	test_tmp_remove(tmp, "/tmp/test_conns.");
	free(held);
	return 0;
}

/* ---- the tests ---- */

static void unadmitted_flood(void **state)
{
	char src[32];
	size_t closed;
	unsigned fds, ok;
	int fd;

	(void)state;
	start(NULL);
	for (unsigned i = 0; i < FLOOD; i++) {
		snprintf(src, sizeof(src), "127.0.0.%u", 2 + i % FLOOD_ADDRS);
		fd = connect_from(src);
		if (fd >= 0)
			hold(fd);
	}
	closed = wait_closed(0, nheld, nheld, 60);
	fds = server_fds();
	ok = serve_new(SERVED);
	printf("unadmitted: %zu connected, %zu closed by the server, server holds %u "
	       "descriptors; %u of %u new connections from 127.0.0.1 served\n",
	       nheld, closed, fds, ok, SERVED);
	assert_int_equal(ok, SERVED);
	assert_int_equal(closed, nheld);
	assert_true(fds < SERVER_NOFILE / 2);
	assert_true(test_server_alive(&server));
}

static void cap_and_idle(void **state)
{
	char src[32];
	size_t open_before, closed;
	unsigned fds, max_fds = 0, ok;
	double t0;
	int busy;

	(void)state;
	start(NULL);
	for (unsigned i = 0; i < CAP_CONNS; i++) {
		snprintf(src, sizeof(src), "127.1.0.%u", 1 + i % CAP_ADDRS);
		busy = connect_from(src);
		if (busy >= 0)
			hold(busy);
		if (i % 100 == 99) {
			fds = server_fds();
			max_fds = fds > max_fds ? fds : max_fds;
		}
	}
	assert_int_equal(nheld, CAP_CONNS);
	/* the cap is under the limit: at least the rest are closed */
	closed = wait_closed(0, nheld, CAP_CONNS - SERVER_NOFILE, 60);
	ok = serve_new(SERVED);
	printf("cap: %zu of %u idle connections closed to make room, %u of %u new "
	       "ones served, server held at most %u descriptors\n",
	       closed, CAP_CONNS, ok, SERVED, max_fds);
	assert_int_equal(ok, SERVED);
	assert_true(closed >= CAP_CONNS - SERVER_NOFILE);
	assert_true(max_fds < SERVER_NOFILE);

	/* idle: a connection making a call a second stays; the others go */
	busy = connect_from("127.0.0.1");
	assert_true(busy >= 0);
	assert_true(served(busy));
	for (unsigned i = 0; i < 20; i++) {
		int fd = connect_from("127.0.0.1");

		if (fd >= 0)
			hold(fd);
	}
	open_before = nheld - count_closed(0, nheld);
	t0 = it_now_s();
	while (count_closed(0, nheld) < nheld && it_now_s() - t0 < IDLE_S + 3) {
		assert_true(served(busy));
		it_sleep_ms(1000);
	}
	closed = count_closed(0, nheld);
	printf("idle: %zu open idle connections, all but %zu closed after %.1f s "
	       "(timeout %d s)\n",
	       open_before, nheld - closed, it_now_s() - t0, IDLE_S);
	assert_int_equal(closed, nheld);
	assert_false(closed_by_server(busy));
	assert_true(served(busy));
	close(busy);
}

static void per_address(void **state)
{
	(void)state;
	start("--max-connections-per-address=4");
	for (unsigned i = 0; i < 10; i++) {
		int fd = connect_from("127.0.0.1");

		assert_true(fd >= 0);
		hold(fd);
		it_sleep_ms(20);
	}
	/* the first 6 make room for the last 4, oldest first */
	assert_int_equal(wait_closed(0, 6, 6, 30), 6);
	assert_int_equal(count_closed(6, 10), 0);
	for (unsigned i = 6; i < 10; i++)
		assert_true(served(held[i]));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(unadmitted_flood, setup, teardown),
	    cmocka_unit_test_setup_teardown(cap_and_idle, setup, teardown),
	    cmocka_unit_test_setup_teardown(per_address, setup, teardown),
	};
	struct rlimit rl;

	if (argc < 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "test_conns: needs root\n");
		return 77;
	}
	server_bin = argv[1];
	/* the test's own sockets: thousands */
	rl.rlim_cur = rl.rlim_max = 2 * (FLOOD + CAP_CONNS + SERVED) + 1024;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		fprintf(stderr, "test_conns: cannot raise the limit on open files\n");
		return 77;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
