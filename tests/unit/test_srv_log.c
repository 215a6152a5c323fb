/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_log.c - the log's limit on repeated lines, and its lines into
 * the journal (server/log.c).
 *
 * rpc_log_limit_pass_at takes the clock as an argument, so the windows are
 * exact here; the lines themselves (rpc_log_limited, RPC_LOG_LIMITED) are
 * read back from stderr, redirected to a temp file, within one window of the
 * real clock.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "rpc.h"

/* Passes (true) and the quiet counts they report, over CALLS calls at NOW. */
static unsigned passes_at(struct rpc_log_limit *lim, long long now, unsigned calls,
			  unsigned long *quiet_sum)
{
	unsigned long quiet;
	unsigned n = 0;

	for (unsigned i = 0; i < calls; i++) {
		quiet = 0;
		if (rpc_log_limit_pass_at(lim, now, &quiet)) {
			n++;
			*quiet_sum += quiet;
		}
	}
	return n;
}

/* A zeroed limit lets the first lines through, even at second 0. */
static void test_zeroed_passes(void **state)
{
	struct rpc_log_limit lim = {0};
	unsigned long quiet = 99;

	(void)state;
	assert_true(rpc_log_limit_pass_at(&lim, 0, &quiet));
	assert_int_equal(quiet, 0);
}

/* A burst per window, then nothing; the next window's first line carries
 * the count of those left out, the others none. */
static void test_burst_then_count(void **state)
{
	struct rpc_log_limit lim = {0};
	unsigned long quiet = 0;

	(void)state;
	assert_int_equal(passes_at(&lim, 100, 1000, &quiet), RPC_LOG_BURST);
	assert_int_equal(quiet, 0);
	/* still the same window at its last second */
	assert_int_equal(
	    passes_at(&lim,
		      100 / RPC_LOG_WINDOW_S * RPC_LOG_WINDOW_S + RPC_LOG_WINDOW_S - 1,
		      10, &quiet),
	    0);
	assert_true(rpc_log_limit_pass_at(&lim, 100 + RPC_LOG_WINDOW_S, &quiet));
	assert_int_equal(quiet, 1000 - RPC_LOG_BURST + 10);
	quiet = 0;
	assert_int_equal(passes_at(&lim, 100 + RPC_LOG_WINDOW_S, 50, &quiet),
			 RPC_LOG_BURST - 1);
	assert_int_equal(quiet, 0);
}

/* After a long silence the count is still there, for the next line. */
static void test_count_survives_silence(void **state)
{
	struct rpc_log_limit lim = {0};
	unsigned long quiet = 0;

	(void)state;
	passes_at(&lim, 7, RPC_LOG_BURST + 3, &quiet);
	assert_true(rpc_log_limit_pass_at(&lim, 86400, &quiet));
	assert_int_equal(quiet, 3);
}

/* Over a flood of 10 s, at most the burst of each window it touches. */
static void test_flood_bound(void **state)
{
	struct rpc_log_limit lim = {0};
	unsigned long quiet = 0;
	unsigned lines = 0;

	(void)state;
	for (long long ms = 1234; ms < 1234 + 10000; ms++) /* one a millisecond */
		lines += passes_at(&lim, ms / 1000, 1, &quiet);
	assert_true(lines <= (10 / RPC_LOG_WINDOW_S + 1) * RPC_LOG_BURST);
	assert_int_equal(lines + quiet + lim.quiet, 10000);
}

struct racer {
	struct rpc_log_limit *lim;
	unsigned passed;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	unsigned long quiet = 0;

	r->passed = passes_at(r->lim, 42, 20000, &quiet);
	return NULL;
}

/* Threads at once in one window: the burst, not one line more, and every
 * line left out is counted. */
static void test_threads(void **state)
{
	struct rpc_log_limit lim = {0};
	struct racer r[4];
	pthread_t t[4];
	unsigned long quiet = 0;
	unsigned total = 0;

	(void)state;
	for (int i = 0; i < 4; i++) {
		r[i] = (struct racer){.lim = &lim};
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		total += r[i].passed;
	}
	assert_int_equal(total, RPC_LOG_BURST);
	assert_true(rpc_log_limit_pass_at(&lim, 42 + RPC_LOG_WINDOW_S, &quiet));
	assert_int_equal(quiet, 4 * 20000 - RPC_LOG_BURST);
}

/* ---- the lines on stderr ---- */

static long long window_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec / RPC_LOG_WINDOW_S;
}

/* Runs FN with stderr into a temp file, within one window of the real clock
 * (tried again when a window turned meanwhile); returns what it wrote. */
static char *capture(void (*fn)(void))
{
	enum rpc_log_level saved_level = rpc_log_level;
	char *buf = calloc(1, 65536);
	int saved = dup(STDERR_FILENO);
	long long w;
	FILE *f;
	ssize_t n;

	assert_non_null(buf);
	rpc_log_level = RPC_LOG_INFO;
	do {
		f = tmpfile();
		assert_non_null(f);
		w = window_now();
		assert_true(dup2(fileno(f), STDERR_FILENO) >= 0);
		fn();
		dup2(saved, STDERR_FILENO);
		n = pread(fileno(f), buf, 65535, 0);
		fclose(f);
	} while (window_now() != w);
	close(saved);
	rpc_log_level = saved_level;
	assert_true(n >= 0);
	buf[n] = '\0';
	return buf;
}

static unsigned count(const char *s, const char *what)
{
	unsigned n = 0;

	while ((s = strstr(s, what)) != NULL) {
		n++;
		s += strlen(what);
	}
	return n;
}

static struct rpc_log_limit lines_limit;

static void log_twelve(void)
{
	lines_limit = (struct rpc_log_limit){0};
	for (int i = 1; i <= 12; i++)
		rpc_log_limited(&lines_limit, RPC_LOG_WARN, "refused %d", i);
}

/* The burst reaches stderr, one line each; the rest does not. */
static void test_limited_lines(void **state)
{
	char *out = capture(log_twelve);
	char want[64];

	(void)state;
	assert_int_equal(count(out, "\n"), RPC_LOG_BURST);
	for (int i = 1; i <= RPC_LOG_BURST; i++) {
		snprintf(want, sizeof(want), "warn: refused %d\n", i);
		assert_non_null(strstr(out, want));
	}
	assert_null(strstr(out, "refused 12"));
	free(out);
}

static void log_after_quiet(void)
{
	unsigned long quiet = 0;

	lines_limit = (struct rpc_log_limit){0};
	passes_at(&lines_limit, 0, RPC_LOG_BURST + 7, &quiet); /* an old window */
	rpc_log_limited(&lines_limit, RPC_LOG_WARN, "refused again");
}

/* The count of the lines left out ends the next line that passes. */
static void test_count_on_next_line(void **state)
{
	char *out = capture(log_after_quiet);

	(void)state;
	assert_non_null(
	    strstr(out, "warn: refused again (and 7 more since the last such line)\n"));
	assert_int_equal(count(out, "\n"), 1);
	free(out);
}

static void twice_each_site(void)
{
	for (int i = 0; i < 20; i++) {
		RPC_LOG_LIMITED(RPC_LOG_INFO, "site a %d", i);
		RPC_LOG_LIMITED(RPC_LOG_INFO, "site b %d", i);
	}
}

/* Each RPC_LOG_LIMITED has a limit of its own: one site's flood does not
 * silence another. */
static void test_sites_apart(void **state)
{
	char *out = capture(twice_each_site);

	(void)state;
	assert_int_equal(count(out, "site a "), RPC_LOG_BURST);
	assert_int_equal(count(out, "site b "), RPC_LOG_BURST);
	free(out);
}

/* Debug lines under a level that drops them take no place of the burst. */
static void test_level_off_takes_nothing(void **state)
{
	struct rpc_log_limit lim = {0};
	enum rpc_log_level saved = rpc_log_level;
	unsigned long quiet = 0;

	(void)state;
	rpc_log_level = RPC_LOG_INFO;
	for (int i = 0; i < 100; i++)
		rpc_log_limited(&lim, RPC_LOG_DEBUG, "trace %d", i);
	rpc_log_level = saved;
	assert_int_equal(lim.quiet, 0);
	assert_true(rpc_log_limit_pass(&lim, &quiet));
	assert_int_equal(quiet, 0);
}

/* ---- the journal's stream (JOURNAL_STREAM) ---- */

/* stderr is the journal's stream only when DEV:INO name it exactly. */
static void test_journal_stream_match(void **state)
{
	int saved = dup(STDERR_FILENO);
	FILE *f = tmpfile();
	struct stat st;
	char id[64], other[80];

	(void)state;
	assert_non_null(f);
	assert_int_equal(fstat(fileno(f), &st), 0);
	snprintf(id, sizeof(id), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	snprintf(other, sizeof(other), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino + 1);
	assert_true(dup2(fileno(f), STDERR_FILENO) >= 0);
	assert_true(rpc_log_stderr_is_journal(id));
	assert_false(rpc_log_stderr_is_journal(other));
	assert_false(rpc_log_stderr_is_journal(NULL));
	assert_false(rpc_log_stderr_is_journal(""));
	snprintf(other, sizeof(other), "%sx", id); /* trailing junk */
	assert_false(rpc_log_stderr_is_journal(other));
	dup2(saved, STDERR_FILENO);
	close(saved);
	fclose(f);
	assert_false(rpc_log_stderr_is_journal(id)); /* stderr moved on */
}

static void log_each_level(void)
{
	rpc_log_set_journal(true);
	rpc_log(RPC_LOG_ERR, "e %d", 1);
	rpc_log(RPC_LOG_WARN, "w");
	rpc_log(RPC_LOG_INFO, "i");
	rpc_log(RPC_LOG_DEBUG, "d"); /* below the level: nothing */
	lines_limit = (struct rpc_log_limit){0};
	rpc_log_limited(&lines_limit, RPC_LOG_WARN, "limited");
	rpc_log_fail("cannot %s", "start");
	rpc_log_set_journal(false);
	rpc_log(RPC_LOG_INFO, "plain");
}

/* Into the journal, a line is its syslog priority, the level and the
 * message: the journal adds time and pid. */
static void test_journal_lines(void **state)
{
	char *out = capture(log_each_level);
	const char *plain;

	(void)state;
	assert_non_null(strstr(out, "<3>err: e 1\n<4>warn: w\n<6>info: i\n"
				    "<4>warn: limited\n<3>union-nfsd: cannot start\n"));
	assert_null(strstr(out, "<7>"));
	plain = strstr(out, "cannot start\n");
	assert_non_null(plain);
	plain += strlen("cannot start\n");
	assert_true(plain[0] >= '0' && plain[0] <= '9'); /* the time first again */
	assert_non_null(strstr(plain, " info: plain\n"));
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_zeroed_passes),
	    cmocka_unit_test(test_burst_then_count),
	    cmocka_unit_test(test_count_survives_silence),
	    cmocka_unit_test(test_flood_bound),
	    cmocka_unit_test(test_threads),
	    cmocka_unit_test(test_limited_lines),
	    cmocka_unit_test(test_count_on_next_line),
	    cmocka_unit_test(test_sites_apart),
	    cmocka_unit_test(test_level_off_takes_nothing),
	    cmocka_unit_test(test_journal_stream_match),
	    cmocka_unit_test(test_journal_lines),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
