/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_lock.c - the lock table (server/lock.c): every overlap case of
 * split and merge, upgrade and downgrade, owner identity, ranges to the end
 * of the file and past 2^64, caps, freeing a host, waiters granted and
 * cancelled, and a randomized run against a per-byte reference model.
 *
 * LOCK_RANDOM_OPS sets the randomized run's length (default 1,000,000). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lock.h"

#define EOF_ 0 /* a length that runs to the end of the file */
#define S    LOCK_SHARED
#define X    LOCK_EXCLUSIVE

static const struct lock_file F1 = {1, 7}, F2 = {1, 8};
static const struct lock_limits NO_CAPS = {0, 0};

static struct lock_owner own(const char *host, int32_t svid, const char *oh)
{
	return (struct lock_owner){host, svid, oh, strlen(oh)};
}

static struct lock_range rng(uint64_t off, uint64_t len)
{
	return (struct lock_range){off, len};
}

static enum lock_result lk(struct lock_table *t, struct lock_owner o, enum lock_type type,
			   uint64_t off, uint64_t len)
{
	struct lock_range r = rng(off, len);

	return lock_acquire(t, &F1, &o, type, &r, NULL);
}

static enum lock_result un(struct lock_table *t, struct lock_owner o, uint64_t off,
			   uint64_t len)
{
	struct lock_range r = rng(off, len);

	return lock_release(t, &F1, &o, &r, NULL);
}

/* O's locks on F1 as "first-lastT ...", last "$" for the end of the file. */
static const char *held(struct lock_table *t, struct lock_owner o)
{
	static char buf[1024];
	struct lock_span sp[32];
	size_t n = lock_list(t, &F1, &o, sp, 32), len = 0;

	assert_true(n <= 32);
	buf[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		char last[32];

		if (sp[i].last == UINT64_MAX)
			snprintf(last, sizeof(last), "$");
		else
			snprintf(last, sizeof(last), "%llu",
				 (unsigned long long)sp[i].last);
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%llu-%s%c",
					i ? " " : "", (unsigned long long)sp[i].first,
					last, sp[i].type == X ? 'X' : 'S');
	}
	return buf;
}

static struct lock_table *table(void)
{
	struct lock_table *t = lock_table_new(&NO_CAPS);

	assert_non_null(t);
	return t;
}

static void check(struct lock_table *t)
{
	char why[128];

	if (lock_check(t, why, sizeof(why)))
		fail_msg("lock_check: %s", why);
}

/* Frees T after checking that nothing is left behind (memory in proportion
 * to locks held). */
static void empty_and_free(struct lock_table *t, const char *const *hosts)
{
	struct lock_stats st;

	check(t);
	for (; *hosts; hosts++)
		lock_free_host(t, *hosts, NULL);
	lock_get_stats(t, &st);
	assert_int_equal(
	    st.locks + st.waiters + st.shares + st.files + st.owners + st.hosts, 0);
	lock_table_free(t);
}

static const char *const HOSTS[] = {"a", "b", "c", NULL};

/* ---- split and merge: one owner, a lock 10-19 there, a new range ---- */

struct overlap_case {
	uint64_t off, len; /* the new range */
	const char *lock_s, *lock_x, *unlock;
};

static const struct overlap_case CASES[] = {
    /* before, apart */
    {0, 5, "0-4S 10-19S", "0-4X 10-19S", "10-19S"},
    /* adjacent before */
    {0, 10, "0-19S", "0-9X 10-19S", "10-19S"},
    /* overlapping the left end */
    {5, 8, "5-19S", "5-12X 13-19S", "13-19S"},
    /* inside */
    {12, 4, "10-19S", "10-11S 12-15X 16-19S", "10-11S 16-19S"},
    /* inside, sharing the first byte, and the last */
    {10, 3, "10-19S", "10-12X 13-19S", "13-19S"},
    {17, 3, "10-19S", "10-16S 17-19X", "10-16S"},
    /* exact */
    {10, 10, "10-19S", "10-19X", ""},
    /* covering */
    {5, 21, "5-25S", "5-25X", ""},
    /* overlapping the right end */
    {15, 11, "10-25S", "10-14S 15-25X", "10-14S"},
    /* adjacent after */
    {20, 10, "10-29S", "10-19S 20-29X", "10-19S"},
    /* after, apart */
    {25, 5, "10-19S 25-29S", "10-19S 25-29X", "10-19S"},
    /* to the end of the file, from inside and from before */
    {15, EOF_, "10-$S", "10-14S 15-$X", "10-14S"},
    {0, EOF_, "0-$S", "0-$X", ""},
    /* one byte */
    {19, 1, "10-19S", "10-18S 19-19X", "10-18S"},
};

static void test_overlap_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
		const struct overlap_case *c = &CASES[i];
		struct lock_owner a = own("a", 1, "x");
		const char *want[3] = {c->lock_s, c->lock_x, c->unlock};

		for (int op = 0; op < 3; op++) {
			struct lock_table *t = table();

			assert_int_equal(lk(t, a, S, 10, 10), LOCK_OK);
			if (op < 2)
				assert_int_equal(lk(t, a, op ? X : S, c->off, c->len),
						 LOCK_OK);
			else
				assert_int_equal(un(t, a, c->off, c->len), LOCK_OK);
			if (strcmp(held(t, a), want[op]))
				fail_msg("case %zu op %d: %s, want %s", i, op, held(t, a),
					 want[op]);
			empty_and_free(t, HOSTS);
		}
	}
}

static void test_merge_bridges_and_many(void **state)
{
	struct lock_owner a = own("a", 1, "x");
	struct lock_table *t = table();

	(void)state;
	/* a new lock joins two neighbours */
	lk(t, a, S, 0, 5);
	lk(t, a, S, 10, 5);
	assert_string_equal(held(t, a), "0-4S 10-14S");
	lk(t, a, S, 5, 5);
	assert_string_equal(held(t, a), "0-14S");
	/* an exclusive lock across the middle leaves shared ends */
	lk(t, a, X, 3, 9);
	assert_string_equal(held(t, a), "0-2S 3-11X 12-14S");
	/* one lock over many swallows them all */
	un(t, a, 0, EOF_);
	for (uint64_t i = 0; i < 20; i += 3)
		lk(t, a, i % 2 ? S : X, i, 2);
	assert_string_equal(held(t, a), "0-1X 3-4S 6-7X 9-10S 12-13X 15-16S 18-19X");
	lk(t, a, S, 0, 20);
	assert_string_equal(held(t, a), "0-19S");
	/* unlock in the middle splits; the pieces stay as they were */
	un(t, a, 5, 2);
	un(t, a, 12, 1);
	assert_string_equal(held(t, a), "0-4S 7-11S 13-19S");
	empty_and_free(t, HOSTS);
}

static void test_upgrade_downgrade(void **state)
{
	struct lock_owner a = own("a", 1, "x"), b = own("b", 1, "x");
	struct lock_table *t = table();

	(void)state;
	assert_int_equal(lk(t, a, X, 0, EOF_), LOCK_OK);
	/* downgrade in the middle: the exclusive ends stay */
	assert_int_equal(lk(t, a, S, 10, 10), LOCK_OK);
	assert_string_equal(held(t, a), "0-9X 10-19S 20-$X");
	/* another owner can now share the downgraded part, not more */
	assert_int_equal(lk(t, b, S, 10, 10), LOCK_OK);
	assert_int_equal(lk(t, b, S, 9, 2), LOCK_DENIED);
	assert_string_equal(held(t, b), "10-19S");
	/* upgrade refused while b shares; nothing changes */
	assert_int_equal(lk(t, a, X, 0, EOF_), LOCK_DENIED);
	assert_string_equal(held(t, a), "0-9X 10-19S 20-$X");
	un(t, b, 0, EOF_);
	assert_int_equal(lk(t, a, X, 0, EOF_), LOCK_OK);
	assert_string_equal(held(t, a), "0-$X");
	/* a whole downgrade */
	assert_int_equal(lk(t, a, S, 0, EOF_), LOCK_OK);
	assert_string_equal(held(t, a), "0-$S");
	empty_and_free(t, HOSTS);
}

/* ---- owner identity ---- */

static void test_owner_identity(void **state)
{
	struct lock_owner a = own("a", 1, "x");
	struct lock_owner others[] = {
	    own("a", 2, "x"),	/* same host and oh, other svid */
	    own("a", 1, "y"),	/* same host and svid, other oh */
	    own("b", 1, "x"),	/* same svid and oh, other host */
	    own("A", 1, "x"),	/* host names are bytes */
	    {"a", 1, "x\0", 2}, /* oh is bytes, not a string */
	    {"a", 1, "", 0},	own("a", -1, "x"),
	};
	struct lock_table *t = table();

	(void)state;
	assert_int_equal(lk(t, a, X, 0, 10), LOCK_OK);
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		assert_int_equal(lk(t, others[i], S, 5, 1), LOCK_DENIED);
		assert_int_equal(lk(t, others[i], S, 10, 1), LOCK_OK);
	}
	/* the same owner, named anew, is not a conflict: its lock is replaced */
	{
		char host[] = "a", oh[] = "x";
		struct lock_owner same = {host, 1, oh, 1};

		assert_int_equal(lk(t, same, S, 0, 10), LOCK_OK);
		assert_string_equal(held(t, a), "0-9S");
	}
	empty_and_free(t, (const char *const[]){"a", "b", "A", NULL});
}

static void test_test_reports_first_conflict(void **state)
{
	struct lock_owner a = own("a", 1, "x"), b = own("b", 7, "oh-b"),
			  c = own("c", 1, "x");
	struct lock_range all = rng(0, EOF_), r;
	struct lock_holder h;
	struct lock_table *t = table();

	(void)state;
	assert_int_equal(lock_test(t, &F1, &c, X, &all, &h), LOCK_OK);
	lk(t, a, X, 20, EOF_);
	lk(t, b, S, 5, 3);
	assert_int_equal(lock_test(t, &F1, &c, X, &all, &h), LOCK_DENIED);
	assert_string_equal(h.host, "b");
	assert_int_equal(h.svid, 7);
	assert_int_equal(h.oh_len, 4);
	assert_memory_equal(h.oh, "oh-b", 4);
	assert_int_equal(h.type, S);
	assert_int_equal(h.range.off, 5);
	assert_int_equal(h.range.len, 3);
	/* shared against shared passes; the exclusive one to EOF is found */
	assert_int_equal(lock_test(t, &F1, &c, S, &all, &h), LOCK_DENIED);
	assert_string_equal(h.host, "a");
	assert_int_equal(h.type, X);
	assert_int_equal(h.range.off, 20);
	assert_int_equal(h.range.len, 0);
	/* an owner never conflicts with itself; other files are apart */
	assert_int_equal(lock_test(t, &F1, &a, X, &(struct lock_range){8, 100}, NULL),
			 LOCK_OK);
	assert_int_equal(lock_test(t, &F2, &c, X, &all, NULL), LOCK_OK);
	r = rng(8, 12);
	assert_int_equal(lock_test(t, &F1, &c, X, &r, NULL), LOCK_OK);
	/* TEST holds nothing */
	assert_string_equal(held(t, c), "");
	empty_and_free(t, HOSTS);
}

/* ---- ranges to EOF and past 2^64 ---- */

static void test_eof_and_overflow(void **state)
{
	struct lock_owner a = own("a", 1, "x"), b = own("b", 1, "x");
	struct lock_span sp[4];
	struct lock_holder h;
	struct lock_range r;
	struct lock_table *t = table();

	(void)state;
	/* OFF + LEN past 2^64 runs to the end */
	assert_int_equal(lk(t, a, X, 100, UINT64_MAX), LOCK_OK);
	assert_string_equal(held(t, a), "100-$X");
	assert_int_equal(lk(t, b, S, UINT64_MAX, 1), LOCK_DENIED);
	un(t, a, 0, EOF_);
	assert_int_equal(lk(t, a, X, UINT64_MAX - 5, 100), LOCK_OK);
	assert_int_equal(lock_list(t, &F1, &a, sp, 4), 1);
	assert_true(sp[0].first == UINT64_MAX - 5 && sp[0].last == UINT64_MAX);
	un(t, a, 0, EOF_);
	/* 0 + (2^64 - 1) ends one byte short of the end: the last is free */
	assert_int_equal(lk(t, a, X, 0, UINT64_MAX), LOCK_OK);
	assert_int_equal(lk(t, b, X, UINT64_MAX, 1), LOCK_OK);
	assert_int_equal(lk(t, b, X, UINT64_MAX - 1, 1), LOCK_DENIED);
	r = rng(UINT64_MAX - 1, 1);
	assert_int_equal(lock_test(t, &F1, &b, S, &r, &h), LOCK_DENIED);
	assert_int_equal(h.range.off, 0);
	assert_int_equal(h.range.len, UINT64_MAX);
	/* the last byte alone, given as a one-byte range, is reported to EOF */
	r = rng(0, EOF_);
	assert_int_equal(lock_test(t, &F1, &a, S, &r, &h), LOCK_DENIED);
	assert_int_equal(h.range.off, UINT64_MAX);
	assert_int_equal(h.range.len, 0);
	/* an EOF lock merges with an adjacent one that reaches it */
	un(t, a, 0, EOF_);
	un(t, b, 0, EOF_);
	lk(t, a, S, 0, 10);
	lk(t, a, S, 10, EOF_);
	assert_string_equal(held(t, a), "0-$S");
	empty_and_free(t, HOSTS);
}

/* ---- caps ---- */

static void test_limits(void **state)
{
	struct lock_owner a = own("a", 1, "x"), a2 = own("a", 2, "x"),
			  b = own("b", 1, "x");
	struct lock_limits lim = {3, 5};
	struct lock_range r = rng(100, 1);
	struct lock_stats st;
	struct lock_table *t = lock_table_new(&lim);

	(void)state;
	assert_int_equal(lk(t, a, S, 0, 1), LOCK_OK);
	assert_int_equal(lk(t, a, S, 10, 1), LOCK_OK);
	assert_int_equal(lk(t, a2, S, 20, 1), LOCK_OK);
	/* the cap is per host, not per owner */
	assert_int_equal(lk(t, a, S, 30, 1), LOCK_NOLOCKS);
	assert_string_equal(held(t, a), "0-0S 10-10S");
	/* changes that add no entry still pass */
	assert_int_equal(lk(t, a, S, 1, 1), LOCK_OK);
	assert_int_equal(lk(t, a, X, 0, 2), LOCK_OK);
	assert_int_equal(lk(t, a, S, 2, 8), LOCK_OK);
	assert_string_equal(held(t, a), "0-1X 2-10S");
	/* a split needs an entry: refused whole, nothing changed */
	assert_int_equal(un(t, a, 5, 1), LOCK_NOLOCKS);
	assert_int_equal(lk(t, a, X, 5, 1), LOCK_NOLOCKS);
	assert_string_equal(held(t, a), "0-1X 2-10S");
	assert_int_equal(un(t, a, 2, 9), LOCK_OK);
	/* a waiter counts too */
	assert_int_equal(
	    lock_block(t, &F1, &b, X, &(struct lock_range){0, 1}, "k", 1, NULL),
	    LOCK_BLOCKED);
	assert_int_equal(lk(t, b, S, 50, 1), LOCK_OK);
	assert_int_equal(lk(t, b, S, 60, 1), LOCK_OK);
	/* total: a 2 + b 3 = 5 */
	assert_int_equal(lk(t, a, S, 40, 1), LOCK_NOLOCKS);
	assert_int_equal(lock_block(t, &F1, &b, S, &r, "k", 1, NULL), LOCK_NOLOCKS);
	lock_get_stats(t, &st);
	assert_int_equal(st.locks + st.waiters, 5);
	/* new caps count from then on */
	lock_set_limits(t, &NO_CAPS);
	assert_int_equal(lk(t, a, S, 40, 1), LOCK_OK);
	assert_int_equal(lk(t, b, S, 70, 1), LOCK_OK);
	empty_and_free(t, HOSTS);
}

/* ---- waiters ---- */

static struct lock_grant *pop(struct lock_grant **g)
{
	struct lock_grant *first = *g;

	assert_non_null(first);
	*g = first->next;
	first->next = NULL;
	return first;
}

static void expect_grant(struct lock_grant **g, const char *host, enum lock_type type,
			 uint64_t off, uint64_t len, const char *cookie)
{
	struct lock_grant *one = pop(g);

	assert_string_equal(one->lock.host, host);
	assert_int_equal(one->lock.type, type);
	assert_int_equal(one->lock.range.off, off);
	assert_int_equal(one->lock.range.len, len);
	assert_int_equal(one->cookie_len, strlen(cookie));
	assert_memory_equal(one->cookie, cookie, strlen(cookie));
	assert_int_equal(one->file.node_id, F1.node_id);
	lock_grants_free(one);
}

static enum lock_result blk(struct lock_table *t, struct lock_owner o,
			    enum lock_type type, uint64_t off, uint64_t len,
			    const char *cookie)
{
	struct lock_range r = rng(off, len);

	return lock_block(t, &F1, &o, type, &r, cookie, strlen(cookie), NULL);
}

static void test_waiters_granted_and_cancelled(void **state)
{
	struct lock_owner a = own("a", 1, "x"), b = own("b", 1, "x"),
			  c = own("c", 1, "x");
	struct lock_range r = rng(0, 10);
	struct lock_grant *g = NULL;
	struct lock_stats st;
	struct lock_table *t = table();

	(void)state;
	lk(t, a, S, 0, 10);
	/* no conflict: granted at once, no waiter */
	assert_int_equal(blk(t, c, S, 0, 5, "c0"), LOCK_OK);
	un(t, c, 0, EOF_);
	assert_int_equal(blk(t, b, X, 0, 10, "b1"), LOCK_BLOCKED);
	assert_int_equal(blk(t, b, X, 0, 10, "b1"), LOCK_BLOCKED); /* retransmitted */
	assert_int_equal(blk(t, c, S, 5, 1, "c1"), LOCK_OK);	   /* shares with a */
	assert_int_equal(blk(t, c, X, 20, EOF_, "c2"), LOCK_OK);
	assert_int_equal(blk(t, a, S, 30, 1, "a1"), LOCK_BLOCKED);
	lock_get_stats(t, &st);
	assert_int_equal(st.waiters, 2);
	/* a's unlock lets nothing through while c still shares byte 5 */
	assert_int_equal(lock_release(t, &F1, &a, &r, &g), LOCK_OK);
	assert_null(g);
	/* c's unlock of byte 5 lets b through; a still waits for c's EOF lock */
	r = rng(5, 1);
	assert_int_equal(lock_release(t, &F1, &c, &r, &g), LOCK_OK);
	expect_grant(&g, "b", X, 0, 10, "b1");
	assert_null(g);
	assert_string_equal(held(t, b), "0-9X");
	/* cancel removes the waiter once */
	r = rng(30, 1);
	assert_int_equal(lock_cancel(t, &F1, &a, X, &r), LOCK_DENIED); /* other type */
	assert_int_equal(lock_cancel(t, &F1, &b, S, &r), LOCK_DENIED); /* other owner */
	assert_int_equal(lock_cancel(t, &F1, &a, S, &r), LOCK_OK);
	assert_int_equal(lock_cancel(t, &F1, &a, S, &r), LOCK_DENIED);
	r = rng(0, EOF_);
	assert_int_equal(lock_release(t, &F1, &c, &r, &g), LOCK_OK);
	assert_null(g); /* the cancelled waiter is not granted */
	lock_get_stats(t, &st);
	assert_int_equal(st.waiters, 0);
	empty_and_free(t, HOSTS);
}

/* A downgrade wakes, and a grant that downgrades lets an earlier waiter
 * through on a second pass. */
static void test_waiters_downgrade_and_passes(void **state)
{
	struct lock_owner a = own("a", 1, "x"), b = own("b", 1, "x"),
			  c = own("c", 1, "x");
	struct lock_range r;
	struct lock_grant *g = NULL;
	struct lock_table *t = table();

	(void)state;
	lk(t, b, X, 0, 10);
	lk(t, a, X, 15, 5);
	assert_int_equal(blk(t, c, S, 0, 1, "c"), LOCK_BLOCKED);  /* behind b */
	assert_int_equal(blk(t, b, S, 0, 20, "b"), LOCK_BLOCKED); /* behind a */
	r = rng(0, EOF_);
	assert_int_equal(lock_release(t, &F1, &a, &r, &g), LOCK_OK);
	expect_grant(&g, "b", S, 0, 20, "b");
	expect_grant(&g, "c", S, 0, 1, "c");
	assert_null(g);
	assert_string_equal(held(t, b), "0-19S");
	/* a downgrade by lock_acquire wakes too */
	lk(t, c, X, 30, 10);
	assert_int_equal(blk(t, a, S, 35, 1, "a"), LOCK_BLOCKED);
	r = rng(30, 10);
	assert_int_equal(lock_acquire(t, &F1, &c, S, &r, &g), LOCK_OK);
	expect_grant(&g, "a", S, 35, 1, "a");
	assert_null(g);
	/* an upgrade waits for the other sharer, then is granted */
	assert_int_equal(blk(t, b, X, 0, 20, "up"), LOCK_BLOCKED);
	r = rng(0, EOF_);
	assert_int_equal(lock_release(t, &F1, &c, &r, &g), LOCK_OK);
	expect_grant(&g, "b", X, 0, 20, "up");
	assert_string_equal(held(t, b), "0-19X");
	empty_and_free(t, HOSTS);
}

static void test_free_host(void **state)
{
	struct lock_owner a1 = own("a", 1, "x"), a2 = own("a", 2, "y"),
			  b = own("b", 1, "x");
	struct lock_range r = rng(0, 10);
	struct lock_grant *g = NULL;
	struct lock_stats st;
	struct lock_table *t = table();

	(void)state;
	lk(t, a1, X, 0, 10);
	lock_acquire(t, &F2, &a2, S, &r, NULL);
	assert_int_equal(blk(t, a2, X, 5, 1, "a2"), LOCK_BLOCKED);
	assert_int_equal(blk(t, b, X, 0, 1, "b"), LOCK_BLOCKED);
	lk(t, b, S, 50, 1);
	lock_free_host(t, "nobody", &g);
	assert_null(g);
	lock_free_host(t, "a", &g);
	expect_grant(&g, "b", X, 0, 1, "b");
	assert_null(g);
	assert_string_equal(held(t, a1), "");
	assert_string_equal(held(t, b), "0-0X 50-50S");
	lock_get_stats(t, &st);
	assert_int_equal(st.locks, 2);
	assert_int_equal(st.waiters, 0);
	assert_int_equal(st.files, 1); /* F2 is gone with a's lock */
	assert_int_equal(st.owners, 1);
	assert_int_equal(st.hosts, 1);
	empty_and_free(t, HOSTS);
}

/* ---- share reservations ---- */

#define AR LOCK_ACCESS_READ
#define AW LOCK_ACCESS_WRITE
#define DR LOCK_DENY_READ
#define DW LOCK_DENY_WRITE

static void test_shares(void **state)
{
	struct lock_owner a = own("a", 1, "x"), a_svid = own("a", 9, "x"),
			  a_oh = own("a", 1, "y"), b = own("b", 1, "x");
	struct lock_limits lim = {2, 0};
	struct lock_stats st;
	struct lock_table *t = table();

	(void)state;
	/* a reads and denies writers */
	assert_int_equal(lock_share(t, &F1, &a, AR, DW), LOCK_OK);
	assert_int_equal(lock_share(t, &F1, &b, AW, 0), LOCK_DENIED);
	assert_int_equal(lock_share(t, &F1, &b, AR | AW, 0), LOCK_DENIED);
	assert_int_equal(lock_share(t, &F1, &b, AR, DR), LOCK_DENIED); /* a reads */
	assert_int_equal(lock_share(t, &F1, &b, AR, DW), LOCK_OK);
	/* another oh is another owner; another svid is the same owner */
	assert_int_equal(lock_share(t, &F1, &a_oh, AW, 0), LOCK_DENIED);
	assert_int_equal(lock_share(t, &F1, &a_svid, AR, 0), LOCK_OK); /* replaced */
	lock_get_stats(t, &st);
	assert_int_equal(st.shares, 2);
	/* other files are apart; byte-range locks are apart */
	assert_int_equal(lock_share(t, &F2, &a_oh, AW, DR | DW), LOCK_OK);
	assert_int_equal(lk(t, a_oh, X, 0, EOF_), LOCK_OK);
	/* b still denies writers: a cannot replace its own with a write */
	assert_int_equal(lock_share(t, &F1, &a, AW, 0), LOCK_DENIED);
	lock_unshare(t, &F1, &b);
	lock_unshare(t, &F1, &b); /* none: no harm */
	assert_int_equal(lock_share(t, &F1, &a, AW, 0), LOCK_OK);
	/* caps count shares and locks together, per host: b may hold 2 */
	lock_set_limits(t, &lim);
	assert_int_equal(lock_share(t, &F1, &b, 0, 0), LOCK_OK);
	assert_int_equal(lock_share(t, &F2, &b, 0, 0), LOCK_OK);
	assert_int_equal(lock_share(t, &(struct lock_file){5, 5}, &b, 0, 0),
			 LOCK_NOLOCKS);
	assert_int_equal(lock_acquire(t, &F2, &b, S, &(struct lock_range){100, 1}, NULL),
			 LOCK_NOLOCKS);
	assert_int_equal(lock_share(t, &F1, &b, AR, 0), LOCK_OK); /* a replacement */
	/* freeing a host frees its shares */
	lock_free_host(t, "a", NULL);
	assert_int_equal(lock_share(t, &F1, &b, AR | AW, DR | DW), LOCK_OK);
	lock_get_stats(t, &st);
	assert_int_equal(st.shares, 2);
	assert_int_equal(st.locks, 0);
	lock_unshare(t, &F1, &b);
	lock_unshare(t, &F2, &b);
	lock_get_stats(t, &st);
	assert_int_equal(st.files + st.owners + st.hosts, 0);
	empty_and_free(t, HOSTS);
}

/* A flood of distinct ranges from one client: each call stays cheap (the
 * file's tree), a cap stops it with NOLOCKS, and freeing the host takes
 * all.  Without the tree the 100,000 calls take minutes. */
static void test_flood(void **state)
{
	struct lock_owner a = own("a", 1, "x"), b = own("b", 1, "x");
	struct lock_limits lim = {50000, 0};
	struct lock_stats st;
	struct lock_table *t = table();

	(void)state;
	for (uint64_t i = 0; i < 100000; i++)
		assert_int_equal(lk(t, a, i % 3 ? S : X, 2 * i, 1), LOCK_OK);
	/* the first conflict is found among them, from both ends */
	assert_int_equal(lk(t, b, S, 199998, EOF_), LOCK_DENIED); /* a's last, X */
	assert_int_equal(lk(t, b, S, 1, 1), LOCK_OK);
	assert_int_equal(lk(t, b, X, 1, 2), LOCK_DENIED);
	check(t);
	lock_free_host(t, "a", NULL);
	lock_get_stats(t, &st);
	assert_int_equal(st.locks, 1);
	lock_set_limits(t, &lim);
	for (uint64_t i = 0; i < 49999; i++)
		assert_int_equal(lk(t, b, X, 1000 + 2 * i, 1), LOCK_OK);
	assert_int_equal(lk(t, b, X, 0, 1), LOCK_NOLOCKS);
	/* one lock over all of them merges them into one */
	assert_int_equal(lk(t, b, X, 0, EOF_), LOCK_OK);
	assert_string_equal(held(t, b), "0-$X");
	empty_and_free(t, HOSTS);
}

/* Freeing a table that still holds locks, waiters and shares of several
 * hosts frees them all (the asan tree's leak check sees it). */
static void test_table_free_with_state(void **state)
{
	struct lock_owner a = own("a", 1, "x"), b = own("b", 1, "x");
	struct lock_table *t = table();

	(void)state;
	lk(t, a, X, 0, 10);
	lk(t, a, S, 20, 10);
	assert_int_equal(blk(t, b, X, 0, 1, "b"), LOCK_BLOCKED);
	assert_int_equal(lock_share(t, &F2, &b, LOCK_ACCESS_READ, 0), LOCK_OK);
	lock_table_free(t);
}

/* Memory follows what is held: many files and hosts, all released, leave
 * nothing. */
static void test_memory_follows_locks(void **state)
{
	struct lock_table *t = table();
	struct lock_stats st;
	char host[32];

	(void)state;
	for (uint64_t i = 0; i < 2000; i++) {
		struct lock_file f = {i % 3, i};
		struct lock_range r = rng(i, 1);

		snprintf(host, sizeof(host), "h%llu", (unsigned long long)(i % 100));
		struct lock_owner o = own(host, (int32_t)i, "x");
		assert_int_equal(lock_acquire(t, &f, &o, X, &r, NULL), LOCK_OK);
	}
	lock_get_stats(t, &st);
	assert_int_equal(st.files, 2000);
	assert_int_equal(st.hosts, 100);
	for (uint64_t i = 0; i < 2000; i++) {
		struct lock_file f = {i % 3, i};
		struct lock_range r = rng(0, EOF_);

		snprintf(host, sizeof(host), "h%llu", (unsigned long long)(i % 100));
		struct lock_owner o = own(host, (int32_t)i, "x");
		assert_int_equal(lock_release(t, &f, &o, &r, NULL), LOCK_OK);
	}
	empty_and_free(t, HOSTS);
}

/* ---- the randomized run against a reference model ----
 *
 * The model keeps, per owner, a type per byte of 0..63 plus one slot for
 * 64..EOF (every range starts at or below 64 and ends below 64 or at EOF, so
 * the slot is exact), and the waiters in order of arrival.  The owners differ
 * from each other by one of host, svid or oh. */

#define M_BYTES	 65 /* slot 64: 64 to the end of the file */
#define M_OWNERS 4
#define M_WAITS	 16

enum { M_NONE, M_S, M_X };

struct m_range {
	uint64_t off, len;    /* as sent */
	unsigned first, last; /* slots */
};

struct m_waiter {
	int owner;
	enum lock_type type;
	struct m_range r;
	char cookie[24];
};

struct model {
	uint8_t held[M_OWNERS][M_BYTES];
	struct m_waiter w[M_WAITS];
	int nw;
	char grants[M_WAITS * 2][24]; /* cookies, in order granted */
	int ng;
	long seen[4], granted, peak; /* results, grants, most locks held */
};

static struct lock_owner m_owner(int i)
{
	static const struct lock_owner o[M_OWNERS] = {
	    {"a", 1, "p", 1}, {"a", 2, "p", 1}, {"a", 1, "q", 1}, {"b", 1, "p", 1}};

	return o[i];
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(uint64_t n)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state % n;
}

/* A random range in each of NLM's spellings: short, to EOF by length 0, and
 * to EOF by an offset + length past 2^64. */
static struct m_range m_rand_range(void)
{
	struct m_range r;
	uint64_t kind = rnd(10);

	r.first = (unsigned)rnd(M_BYTES);
	r.off = r.first;
	if (r.first == 64 || kind < 2) {
		r.len = 0;
		r.last = 64;
	} else if (kind < 3 && r.first >= 4) {
		r.len = UINT64_MAX - rnd(4);
		r.last = 64;
	} else {
		r.len = 1 + rnd(64 - r.first);
		r.last = r.first + (unsigned)r.len - 1;
	}
	return r;
}

static bool m_conflicts(const struct model *m, int owner, enum lock_type type,
			const struct m_range *r)
{
	for (int o = 0; o < M_OWNERS; o++)
		for (unsigned i = r->first; o != owner && i <= r->last; i++)
			if (m->held[o][i] == M_X || (m->held[o][i] == M_S && type == X))
				return true;
	return false;
}

static void m_set(struct model *m, int owner, uint8_t v, const struct m_range *r)
{
	memset(&m->held[owner][r->first], v, r->last - r->first + 1);
}

static void m_wake(struct model *m)
{
	bool any;

	do {
		any = false;
		for (int i = 0; i < m->nw; i++) {
			struct m_waiter *w = &m->w[i];

			if (m_conflicts(m, w->owner, w->type, &w->r))
				continue;
			m_set(m, w->owner, w->type == X ? M_X : M_S, &w->r);
			memcpy(m->grants[m->ng++], w->cookie, sizeof(w->cookie));
			memmove(w, w + 1, (size_t)(m->nw - i - 1) * sizeof(*w));
			m->nw--;
			i--;
			any = true;
		}
	} while (any);
}

static uint64_t m_last(unsigned slot)
{
	return slot == 64 ? UINT64_MAX : slot;
}

/* The table's list of owner O's locks equals the model's runs. */
static void m_check_held(struct lock_table *t, const struct model *m, int o, long op)
{
	struct lock_owner id = m_owner(o);
	struct lock_span sp[M_BYTES];
	size_t n = lock_list(t, &F1, &id, sp, M_BYTES), k = 0;

	for (unsigned i = 0; i < M_BYTES;) {
		unsigned j = i;

		if (!m->held[o][i]) {
			i++;
			continue;
		}
		while (j + 1 < M_BYTES && m->held[o][j + 1] == m->held[o][i])
			j++;
		if (k >= n || sp[k].first != i || sp[k].last != m_last(j) ||
		    sp[k].type != (m->held[o][i] == M_X ? X : S))
			fail_msg("op %ld: owner %d lock %zu differs (run %u-%u)", op, o,
				 k, i, j);
		k++;
		i = j + 1;
	}
	if (k != n)
		fail_msg("op %ld: owner %d holds %zu locks, model %zu", op, o, n, k);
}

/* TEST's answer is a conflicting lock of the model with the lowest first
 * byte. */
static void m_check_test(struct lock_table *t, const struct model *m, int owner,
			 enum lock_type type, const struct m_range *r, long op)
{
	struct lock_owner id = m_owner(owner);
	struct lock_range lr = {r->off, r->len};
	struct lock_holder h;
	enum lock_result res = lock_test(t, &F1, &id, type, &lr, &h);
	int who = -1;
	unsigned lowest = M_BYTES;

	for (int o = 0; o < M_OWNERS; o++)
		for (unsigned i = r->first; o != owner && i <= r->last; i++)
			if (m->held[o][i] == M_X || (m->held[o][i] == M_S && type == X)) {
				unsigned start = i;

				while (start > 0 &&
				       m->held[o][start - 1] == m->held[o][i])
					start--;
				lowest = start < lowest ? start : lowest;
				break;
			}
	if (lowest == M_BYTES) {
		assert_int_equal(res, LOCK_OK);
		return;
	}
	assert_int_equal(res, LOCK_DENIED);
	for (int o = 0; o < M_OWNERS; o++) {
		struct lock_owner c = m_owner(o);

		if (!strcmp(c.host, h.host) && c.svid == h.svid && h.oh_len == c.oh_len &&
		    !memcmp(h.oh, c.oh, c.oh_len))
			who = o;
	}
	if (who < 0 || who == owner || h.range.off != lowest ||
	    m->held[who][lowest] != (h.type == X ? M_X : M_S))
		fail_msg("op %ld: TEST answered owner %d at %llu, model's first at %u",
			 op, who, (unsigned long long)h.range.off, lowest);
}

/* One random call on table and model alike. */
static void m_step(struct lock_table *t, struct model *m, long op, struct lock_grant **g)
{
	int owner = (int)rnd(M_OWNERS);
	struct lock_owner id = m_owner(owner);
	enum lock_type type = rnd(2) ? X : S;
	struct m_range r = m_rand_range();
	struct lock_range lr = {r.off, r.len};
	uint64_t what = rnd(100);
	enum lock_result res;

	if (what < 35) {
		bool c = m_conflicts(m, owner, type, &r);

		res = lock_acquire(t, &F1, &id, type, &lr, g);
		m->seen[res]++;
		assert_int_equal(res, c ? LOCK_DENIED : LOCK_OK);
		if (!c)
			m_set(m, owner, type == X ? M_X : M_S, &r);
	} else if (what < 60) {
		assert_int_equal(lock_release(t, &F1, &id, &lr, g), LOCK_OK);
		m_set(m, owner, M_NONE, &r);
	} else if (what < 72) {
		struct m_waiter w = {owner, type, r, ""};
		bool c = m_conflicts(m, owner, type, &r), dup = false;

		snprintf(w.cookie, sizeof(w.cookie), "%ld", op);
		for (int i = 0; i < m->nw; i++)
			dup |= m->w[i].owner == owner && m->w[i].type == type &&
			       m->w[i].r.first == r.first && m->w[i].r.last == r.last;
		if (c && !dup && m->nw == M_WAITS)
			return; /* the model's queue is full: skip */
		res = lock_block(t, &F1, &id, type, &lr, w.cookie, strlen(w.cookie), g);
		m->seen[res]++;
		assert_int_equal(res, c ? LOCK_BLOCKED : LOCK_OK);
		if (!c)
			m_set(m, owner, type == X ? M_X : M_S, &r);
		else if (!dup)
			m->w[m->nw++] = w;
	} else if (what < 80) {
		int i = m->nw && rnd(4) ? (int)rnd((uint64_t)m->nw) : -1;

		if (i >= 0) { /* most cancels name a waiter, of its own or not */
			type = m->w[i].type;
			r = m->w[i].r;
			lr = (struct lock_range){r.off, r.len};
		}
		res = lock_cancel(t, &F1, &id, type, &lr);
		for (i = 0; i < m->nw; i++)
			if (m->w[i].owner == owner && m->w[i].type == type &&
			    m->w[i].r.first == r.first && m->w[i].r.last == r.last)
				break;
		assert_int_equal(res, i < m->nw ? LOCK_OK : LOCK_DENIED);
		if (i < m->nw)
			memmove(&m->w[i], &m->w[i + 1],
				(size_t)(m->nw - i - 1) * sizeof(m->w[0]));
		m->nw -= i < m->nw;
	} else if (what < 99) {
		m_check_test(t, m, owner, type, &r, op);
	} else {
		lock_free_host(t, id.host, g);
		for (int o = 0; o < M_OWNERS; o++)
			if (!strcmp(m_owner(o).host, id.host))
				memset(m->held[o], M_NONE, M_BYTES);
		for (int i = 0; i < m->nw; i++)
			if (!strcmp(m_owner(m->w[i].owner).host, id.host)) {
				memmove(&m->w[i], &m->w[i + 1],
					(size_t)(m->nw - i - 1) * sizeof(m->w[0]));
				m->nw--;
				i--;
			}
	}
	m_wake(m);
}

static void m_check_grants(struct model *m, struct lock_grant *g, long op)
{
	int i = 0;

	for (struct lock_grant *x = g; x; x = x->next, i++)
		if (i >= m->ng || x->cookie_len != strlen(m->grants[i]) ||
		    memcmp(x->cookie, m->grants[i], x->cookie_len))
			fail_msg("op %ld: grant %d is not the model's", op, i);
	if (i != m->ng)
		fail_msg("op %ld: %d grants, model %d", op, i, m->ng);
	m->ng = 0;
}

static void test_random_against_model(void **state)
{
	const char *env = getenv("LOCK_RANDOM_OPS");
	long ops = env ? atol(env) : 1000000;
	struct model *m = calloc(1, sizeof(*m));
	struct lock_table *t = table();
	struct lock_stats st;

	(void)state;
	assert_non_null(m);
	for (long op = 0; op < ops; op++) {
		struct lock_grant *g = NULL;

		m_step(t, m, op, &g);
		m->granted += m->ng;
		m_check_grants(m, g, op);
		lock_grants_free(g);
		for (int o = 0; o < M_OWNERS; o++)
			m_check_held(t, m, o, op);
		check(t);
		lock_get_stats(t, &st);
		assert_int_equal(st.waiters, m->nw);
		m->peak = (long)st.locks > m->peak ? (long)st.locks : m->peak;
	}
	print_message("%ld random operations, no divergence: %ld ok, %ld denied, "
		      "%ld blocked, %ld waiters granted, at most %ld locks\n",
		      ops, m->seen[LOCK_OK], m->seen[LOCK_DENIED], m->seen[LOCK_BLOCKED],
		      m->granted, m->peak);
	free(m);
	empty_and_free(t, HOSTS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_overlap_cases),
	    cmocka_unit_test(test_merge_bridges_and_many),
	    cmocka_unit_test(test_upgrade_downgrade),
	    cmocka_unit_test(test_owner_identity),
	    cmocka_unit_test(test_test_reports_first_conflict),
	    cmocka_unit_test(test_eof_and_overflow),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_waiters_granted_and_cancelled),
	    cmocka_unit_test(test_waiters_downgrade_and_passes),
	    cmocka_unit_test(test_free_host),
	    cmocka_unit_test(test_shares),
	    cmocka_unit_test(test_flood),
	    cmocka_unit_test(test_table_free_with_state),
	    cmocka_unit_test(test_memory_follows_locks),
	    cmocka_unit_test(test_random_against_model),
	};

	return cmocka_run_group_tests_name("lock", tests, NULL, NULL);
}
