/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_nsm.c - the status monitor's records (server/lockd/nsm.c): the
 * state number is odd and grows at each open, hosts recorded survive a
 * reopen (hex-encoded: any bytes of a caller_name), grace runs only when a
 * host was recorded, and a record that is not ours is refused (rules 1-4);
 * with nsm-dir, a record per address of ours, taken at open when this host
 * holds the address, at its first lock, or by a takeover (rules 8-10).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nlm.h"
#include "test_fs.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_srv_nsm.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	t_rm_rf(dir);
	return 0;
}

/* The grace period the last open started (grace.c). */
static struct nlm_grace grace;

static struct nsm *open_ok(unsigned grace_s)
{
	struct nsm *sm = NULL;
	char err[256] = "";

	memset(&grace, 0, sizeof(grace));
	assert_int_equal(
	    nsm_open(dir, false, "server", grace_s, &grace, &sm, err, sizeof(err)), 0);
	assert_non_null(sm);
	return sm;
}

/* The text of record NAME. */
static void read_named(const char *file, char *buf, size_t len)
{
	char path[128];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "r");
	assert_non_null(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* The single record's text. */
static void read_record(char *buf, size_t len)
{
	read_named("nsm", buf, len);
}

static void states_and_hosts(void **state)
{
	struct nsm *sm;
	char text[1024];

	(void)state;
	sm = open_ok(60);
	assert_false(nlm_grace_active(&grace)); /* nothing recorded: no grace (rule 4) */
	read_record(text, sizeof(text));
	assert_non_null(strstr(text, "state 1\n"));
	assert_int_equal(nsm_monitor(sm, "hostA@127.0.0.1"), 0);
	assert_int_equal(nsm_monitor(sm, "hostA@127.0.0.1"), 0); /* once */
	assert_int_equal(nsm_monitor(sm, "we ird\nname@10.0.0.2"), 0);
	read_record(text, sizeof(text));
	assert_null(strstr(text, "we ird")); /* client bytes are hex */
	nsm_close(sm);

	sm = open_ok(60);
	assert_true(nlm_grace_active(&grace));
	read_record(text, sizeof(text));
	assert_non_null(strstr(text, "state 3\n"));
	assert_non_null(strstr(text, "host 686f737441403132372e302e302e31\n"));
	nsm_close(sm);

	sm = open_ok(0); /* --grace-period=0: none, hosts or not */
	assert_false(nlm_grace_active(&grace));
	nsm_close(sm);
	read_record(text, sizeof(text));
	assert_non_null(strstr(text, "state 5\n"));
}

static void foreign_record(void **state)
{
	struct nsm *sm = NULL;
	char path[128], err[256] = "";
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/nsm", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("union-nfsd-nsm 1\nstate 7\nhost 6x\n", f);
	fclose(f);
	assert_int_not_equal(
	    nsm_open(dir, false, "server", 60, &grace, &sm, err, sizeof(err)), 0);
	assert_null(sm);
	assert_non_null(strstr(err, "line 3"));
}

static struct nsm *open_per_address(void)
{
	struct nsm *sm = NULL;
	char err[256] = "";

	memset(&grace, 0, sizeof(grace));
	assert_int_equal(nsm_open(dir, true, "server", 60, &grace, &sm, err, sizeof(err)),
			 0);
	return sm;
}

/* Rules 8 to 10: a record per address, taken at its first lock, at an open
 * on the host that holds it (127.0.0.1, loopback's), or by a takeover. */
static void per_address(void **state)
{
	struct nsm *sm = open_per_address();
	char text[1024], msg[256];

	(void)state;
	assert_false(nlm_grace_active(&grace)); /* nothing recorded anywhere */
	/* A key that does not say which address it came to has no record. */
	assert_int_equal(nsm_monitor(sm, "hostA@10.0.0.5"), -EADDRNOTAVAIL);
	assert_int_equal(nsm_monitor(sm, "hostA@10.0.0.5 via 127.0.0.1"), 0);
	assert_int_equal(nsm_monitor(sm, "hostB@10.0.0.6 via 192.0.2.77"), 0);
	assert_false(nlm_grace_active(&grace)); /* both records were empty */
	read_named("127.0.0.1", text, sizeof(text));
	assert_non_null(strstr(text, "state 1\n"));
	read_named("192.0.2.77", text, sizeof(text));
	assert_non_null(strstr(text, "state 1\n"));
	nsm_close(sm);

	/* This host holds 127.0.0.1, not 192.0.2.77: only the first is taken. */
	sm = open_per_address();
	assert_true(nlm_grace_active(&grace));
	read_named("127.0.0.1", text, sizeof(text));
	assert_non_null(strstr(text, "state 3\n"));
	read_named("192.0.2.77", text, sizeof(text));
	assert_non_null(strstr(text, "state 1\n"));
	assert_int_equal(nsm_takeover(sm, "192.0.2.77", msg, sizeof(msg)), 0);
	assert_non_null(strstr(msg, "1 host to notify"));
	read_named("192.0.2.77", text, sizeof(text));
	assert_non_null(strstr(text, "state 3\n"));
	/* Twice is once. */
	assert_int_equal(nsm_takeover(sm, "192.0.2.77", msg, sizeof(msg)), 0);
	assert_non_null(strstr(msg, "already"));
	read_named("192.0.2.77", text, sizeof(text));
	assert_non_null(strstr(text, "state 3\n"));
	assert_int_equal(nsm_takeover(sm, "no-address", msg, sizeof(msg)), -EINVAL);
	nsm_close(sm);

	/* Without nsm-dir there is nothing to take over. */
	sm = open_ok(60);
	assert_int_equal(nsm_takeover(sm, "192.0.2.77", msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "nsm-dir"));
	nsm_close(sm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(states_and_hosts, setup, teardown),
	    cmocka_unit_test_setup_teardown(foreign_record, setup, teardown),
	    cmocka_unit_test_setup_teardown(per_address, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
