/* SPDX-License-Identifier: Apache-2.0 */
/* test_readdir_big - the large merged READDIR test of issue 5.
 *
 *   test_readdir_big UNION_NFSD
 *
 * Builds a writable union of 3 layers (upper, l1, l2) whose root directory
 * merges to 100,000 names: overlapping ranges of names (shadowed duplicates,
 * some of them directories in two layers), OCI ".wh.NAME" white-outs and 0:0
 * character-device white-outs in a lower layer, 0:0 white-outs in the upper
 * (some hiding nothing).  The expected set is computed while the layers are
 * made.  Then, through libnfs' raw READDIR and READDIRPLUS with small pages,
 * keeping the cookie and verifier between pages:
 *
 *   1. READDIR and READDIRPLUS list each visible name exactly once, none
 *      hidden, none extra; cookies rise strictly from page to page; every
 *      READDIRPLUS reply (its XDR size computed from the decoded reply, which
 *      is how XDR encodes it) stays within maxcount and its entries within
 *      dircount, no reply is empty before eof, and every entry of an
 *      unchanged name has a handle and attributes with the entry's fileid;
 *   2. verifiers: 0 with a non-zero cookie is accepted; a non-zero verifier
 *      the server never issued is NFS3ERR_BAD_COOKIE; the verifier of a
 *      version from before a change resumes after the same cookie;
 *   3. the server is SIGKILLed in the middle of a listing and restarted on the
 *      same state dir; the listing goes on with the saved handle, cookie and
 *      verifier and is still exact;
 *   4. the server is restarted with UNION_NFSD_TEST_HASH_BITS=12 (test-only:
 *      ~25 names per cookie): small pages lose nothing and no cookie group is
 *      split between two replies;
 *   5. while a second client creates 500 names and removes 500 between pages,
 *      every unchanged name is listed exactly once, a changed one at most once.
 *
 * The server is stopped by pid and the temp dir removed also when a test
 * fails (group teardown; the server has PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nfs_raw.h"
#include "start_server.h"

#define TMP_PREFIX "/tmp/union-nfsd-rdbig."

/* Names "f%06d" for [0, NF) and "n%04d" for [0, NN) (created by test 5). */
#define NF   112000
#define NN   1000
#define NIDX (NF + NN)
#define NCHG 500 /* names created, and names removed, by test 5 */

enum want { ABSENT, VISIBLE, CHANGED };

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	struct test_union un; /* its options and state dir */
	struct test_server srv;
	struct rpc_context *nfs;
	struct fh root;
	unsigned char want[NIDX];
	size_t nvisible;
} g;

/* ---- calls (nfs_raw.h makes them synchronous) ---- */

/* A listing of 100,000 names may take its time under ASan. */
static int finish(struct rpc_context *rpc, struct call *c, int queued)
{
	return nfs_raw_finish_within(rpc, c, queued, 30);
}

static int mnt_root(void)
{
	int status = nfs_raw_mnt(g.srv.mount_port, "/", &g.root);
	return status == MNT3_OK && g.root.len ? 0 : -1;
}

/* ---- the layers ---- */

static void fail_setup(const char *what, const char *path)
{
	fprintf(stderr, "%s %s: %s\n", what, path, strerror(errno));
	exit(errno == EPERM ? 77 : 1);
}

/* Makes TMP/LAYER/NAME: a regular file, a directory or a 0:0 white-out. */
static void make(const char *layer, const char *name, mode_t type)
{
	char path[2 * PATH_MAX];
	int rc;
	snprintf(path, sizeof(path), "%s/%s/%s", g.tmp, layer, name);
	if (type == S_IFDIR)
		rc = mkdir(path, 0755);
	else
		rc = mknod(path, type | (type == S_IFCHR ? 0 : 0644), makedev(0, 0));
	if (rc)
		fail_setup("make", path);
}

static void make_range(const char *layer, const char *fmt, int from, int to, mode_t type)
{
	char name[64];
	for (int i = from; i < to; i++) {
		snprintf(name, sizeof(name), fmt, i);
		make(layer, name, type);
	}
}

static void mark(int from, int to, enum want w)
{
	for (int i = from; i < to; i++)
		g.want[i] = (unsigned char)w;
}

/*   l2 (bottom): f[0,60000) files
 *   l1:          f[40000,90000) files (f[85000,85010) directories),
 *                ".wh.f" for [0,5000), 0:0 white-outs f[5000,7000)
 *   upper:       f[80000,112000) files (f[85000,85010) directories),
 *                0:0 white-outs f[10000,15000) and g[0,500) (hiding nothing)
 * visible: f[7000,10000) and f[15000,112000): 100,000 names. */
static void make_union(void)
{
	static const char *dirs[] = {"l1", "l2", "upper", "work"};
	char path[PATH_MAX + 16];

	snprintf(g.tmp, sizeof(g.tmp), TMP_PREFIX "XXXXXX");
	if (!mkdtemp(g.tmp))
		fail_setup("mkdtemp", g.tmp);
	for (size_t i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/%s", g.tmp, dirs[i]);
		if (mkdir(path, 0755))
			fail_setup("mkdir", path);
	}
	make_range("l2", "f%06d", 0, 60000, S_IFREG);
	make_range("l1", "f%06d", 40000, 85000, S_IFREG);
	make_range("l1", "f%06d", 85000, 85010, S_IFDIR);
	make_range("l1", "f%06d", 85010, 90000, S_IFREG);
	make_range("l1", ".wh.f%06d", 0, 5000, S_IFREG);
	make_range("l1", "f%06d", 5000, 7000, S_IFCHR);
	make_range("upper", "f%06d", 80000, 85000, S_IFREG);
	make_range("upper", "f%06d", 85000, 85010, S_IFDIR);
	make_range("upper", "f%06d", 85010, NF, S_IFREG);
	make_range("upper", "f%06d", 10000, 15000, S_IFCHR);
	make_range("upper", "g%04d", 0, 500, S_IFCHR);
	mark(7000, 10000, VISIBLE);
	mark(15000, NF, VISIBLE);
	g.nvisible = 100000;

	test_union_init(&g.un, g.tmp, "l1:l2");
}

static int start(void)
{
	if (test_server_start(g.bin, g.un.state, g.un.args, &g.srv))
		return -1;
	g.nfs = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	return g.nfs && !mnt_root() ? 0 : -1;
}

static void disconnect(void)
{
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	g.nfs = NULL;
}

/* Stops the server (SIGKILL first when HARD) and starts it again. */
static void restart(bool hard)
{
	if (hard)
		kill(g.srv.pid, SIGKILL);
	disconnect();
	test_server_stop(&g.srv);
	assert_int_equal(start(), 0);
}

/* ---- a listing, page by page ---- */

/* The index of NAME in g.want, or -1 for a name the test never made visible. */
static int name_index(const char *name)
{
	char *end;
	long v;
	if ((name[0] != 'f' && name[0] != 'n') || !name[1])
		return -1;
	v = strtol(name + 1, &end, 10);
	if (*end || v < 0)
		return -1;
	if (name[0] == 'f')
		return strlen(name) == 7 && v < NF ? (int)v : -1;
	return strlen(name) == 5 && v < NN ? NF + (int)v : -1;
}

struct listing {
	bool plus;
	uint32_t count, dircount, maxcount; /* count is READDIR's */
	/* state carried between pages */
	uint64_t cookie;
	char verf[NFS3_COOKIEVERFSIZE];
	uint64_t last_cookie; /* of the previous page, 0 before the first */
	bool eof;
	/* what was seen */
	unsigned *seen; /* by name_index */
	unsigned dots, dotdots, extra, pages, split, unsorted, oversize, empty;
	unsigned noattr; /* READDIRPLUS entries of unchanged names without a handle
			    and attributes (with the entry's fileid) */
	size_t max_group, group_len;
	uint64_t group_cookie;
	/* the last reply */
	int status;
	unsigned nent;
	uint64_t first_cookie;
};

static void see_entry(struct listing *ls, const char *name, uint64_t cookie)
{
	int i = name_index(name);

	if (ls->nent++ == 0) {
		ls->first_cookie = cookie;
		if (ls->last_cookie && cookie <= ls->last_cookie)
			ls->split++; /* a group split between replies, or disorder */
	} else if (cookie < ls->last_cookie) {
		ls->unsorted++;
	}
	if (cookie == ls->group_cookie) {
		ls->group_len++;
	} else {
		ls->group_cookie = cookie;
		ls->group_len = 1;
	}
	if (ls->group_len > ls->max_group)
		ls->max_group = ls->group_len;
	ls->last_cookie = cookie;
	ls->cookie = cookie;
	if (!strcmp(name, "."))
		ls->dots++;
	else if (!strcmp(name, ".."))
		ls->dotdots++;
	else if (i < 0)
		ls->extra++, fprintf(stderr, "unexpected name %s\n", name);
	else
		ls->seen[i]++;
}

static size_t rnd4(size_t n)
{
	return (n + 3) & ~(size_t)3;
}

static size_t post_op_size(const post_op_attr *a)
{
	return 4 + (a->attributes_follow ? 84 : 0); /* fattr3 is 84 bytes */
}

static void keep_rd(void *data, void *out)
{
	READDIR3res *r = data;
	struct listing *ls = out;
	ls->status = (int)r->status;
	ls->nent = 0;
	if (r->status != NFS3_OK)
		return;
	for (entry3 *e = r->READDIR3res_u.resok.reply.entries; e; e = e->nextentry)
		see_entry(ls, e->name, e->cookie);
	memcpy(ls->verf, r->READDIR3res_u.resok.cookieverf, NFS3_COOKIEVERFSIZE);
	ls->eof = r->READDIR3res_u.resok.reply.eof;
	if (!ls->nent && !ls->eof)
		ls->empty++;
}

static void keep_rdp(void *data, void *out)
{
	READDIRPLUS3res *r = data;
	struct listing *ls = out;
	READDIRPLUS3resok *ok = &r->READDIRPLUS3res_u.resok;
	size_t size, dir = 0;

	ls->status = (int)r->status;
	ls->nent = 0;
	if (r->status != NFS3_OK)
		return;
	size = 4 + post_op_size(&ok->dir_attributes) + NFS3_COOKIEVERFSIZE + 4 + 4;
	for (entryplus3 *e = ok->reply.entries; e; e = e->nextentry) {
		size_t e3 = 4 + 8 + 4 + rnd4(strlen(e->name)) + 8;

		int idx = name_index(e->name);

		see_entry(ls, e->name, e->cookie);
		if ((idx < 0 || g.want[idx] != CHANGED) &&
		    (!e->name_handle.handle_follows ||
		     !e->name_attributes.attributes_follow ||
		     e->name_attributes.post_op_attr_u.attributes.fileid != e->fileid))
			ls->noattr++;
		dir += e3;
		size += e3 + post_op_size(&e->name_attributes) + 4 +
			(e->name_handle.handle_follows
			     ? 4 + rnd4(e->name_handle.post_op_fh3_u.handle.data.data_len)
			     : 0);
	}
	if (size > ls->maxcount || dir > ls->dircount)
		ls->oversize++;
	memcpy(ls->verf, ok->cookieverf, NFS3_COOKIEVERFSIZE);
	ls->eof = ok->reply.eof;
	if (!ls->nent && !ls->eof)
		ls->empty++;
}

/* One page of LS from its cookie and verifier; the NFS status (or -1). */
static int page(struct rpc_context *rpc, struct listing *ls)
{
	struct call c = {.keep = ls->plus ? keep_rdp : keep_rd, .out = ls};
	int rc;

	ls->status = -1;
	if (ls->plus) {
		READDIRPLUS3args a = {.dir = nfs_raw_fh3(&g.root),
				      .cookie = ls->cookie,
				      .dircount = ls->dircount,
				      .maxcount = ls->maxcount};
		memcpy(a.cookieverf, ls->verf, NFS3_COOKIEVERFSIZE);
		rc = finish(rpc, &c,
			    rpc_nfs3_readdirplus_async(rpc, nfs_raw_on_reply, &a, &c));
	} else {
		READDIR3args a = {.dir = nfs_raw_fh3(&g.root),
				  .cookie = ls->cookie,
				  .count = ls->count};
		memcpy(a.cookieverf, ls->verf, NFS3_COOKIEVERFSIZE);
		rc = finish(rpc, &c,
			    rpc_nfs3_readdir_async(rpc, nfs_raw_on_reply, &a, &c));
	}
	if (rc)
		return -1;
	ls->pages++;
	return ls->status;
}

static void listing_init(struct listing *ls, bool plus, uint32_t count, uint32_t dircount,
			 uint32_t maxcount)
{
	memset(ls, 0, sizeof(*ls));
	ls->plus = plus;
	ls->count = count;
	ls->dircount = dircount;
	ls->maxcount = maxcount;
	ls->seen = calloc(NIDX, sizeof(*ls->seen));
	assert_non_null(ls->seen);
}

/* Pages until eof; BETWEEN (if any) runs after every page. */
static void list_all(struct listing *ls, void (*between)(struct listing *ls))
{
	while (!ls->eof) {
		assert_int_equal(page(g.nfs, ls), NFS3_OK);
		if (between)
			between(ls);
	}
}

/* Every VISIBLE name exactly once, every CHANGED at most once, no other. */
static void check_exact(const struct listing *ls)
{
	size_t missing = 0, dup = 0, hidden = 0;

	for (int i = 0; i < NIDX; i++) {
		unsigned s = ls->seen[i];
		if (g.want[i] == VISIBLE && s != 1) {
			if (s == 0 && missing++ < 5)
				fprintf(stderr, "missing index %d\n", i);
			dup += s > 1;
		}
		if (g.want[i] == CHANGED && s > 1)
			dup++;
		if (g.want[i] == ABSENT && s && hidden++ < 5)
			fprintf(stderr, "hidden name listed: index %d\n", i);
	}
	fprintf(stderr,
		"%s: %u pages, missing %zu, duplicated %zu, hidden %zu, extra %u, "
		"largest cookie group %zu\n",
		ls->plus ? "READDIRPLUS" : "READDIR", ls->pages, missing, dup, hidden,
		ls->extra, ls->max_group);
	assert_int_equal(missing, 0);
	assert_int_equal(dup, 0);
	assert_int_equal(hidden, 0);
	assert_int_equal(ls->extra, 0);
	assert_int_equal(ls->dots, 1);
	assert_int_equal(ls->dotdots, 1);
	assert_int_equal(ls->split, 0);
	assert_int_equal(ls->unsorted, 0);
	assert_int_equal(ls->oversize, 0);
	assert_int_equal(ls->empty, 0);
	assert_int_equal(ls->noattr, 0);
}

static void listing_free(struct listing *ls)
{
	free(ls->seen);
	ls->seen = NULL;
}

/* ---- the tests ---- */

static void test_readdir_exact(void **state)
{
	struct listing ls;
	(void)state;
	listing_init(&ls, false, 2048, 0, 0);
	list_all(&ls, NULL);
	check_exact(&ls);
	listing_free(&ls);
}

static void test_readdirplus_exact(void **state)
{
	struct listing ls;
	(void)state;
	/* maxcount 2000 is not a multiple of 4 and fits ~10 entries */
	listing_init(&ls, true, 0, 600, 2002);
	list_all(&ls, NULL);
	check_exact(&ls);
	listing_free(&ls);
}

static void test_verifiers(void **state)
{
	struct listing ls;
	uint64_t cookie;
	char verf[NFS3_COOKIEVERFSIZE];
	(void)state;

	listing_init(&ls, false, 4096, 0, 0);
	assert_int_equal(page(g.nfs, &ls), NFS3_OK);
	assert_int_equal(page(g.nfs, &ls), NFS3_OK);
	cookie = ls.cookie;
	memcpy(verf, ls.verf, sizeof(verf));

	/* a zero verifier with a non-zero cookie: accepted, resumes after it */
	memset(ls.verf, 0, sizeof(ls.verf));
	assert_int_equal(page(g.nfs, &ls), NFS3_OK);
	assert_true(ls.nent > 0 && ls.first_cookie > cookie);

	/* a verifier the server never issued */
	ls.cookie = cookie;
	memcpy(ls.verf, "\x5a\x11\x22\x33\x44\x55\x66\x77", NFS3_COOKIEVERFSIZE);
	assert_int_equal(page(g.nfs, &ls), NFS3ERR_BAD_COOKIE);
	memcpy(ls.verf, verf, sizeof(verf)); /* the right version half, a wrong MAC */
	ls.verf[7] ^= 1;
	assert_int_equal(page(g.nfs, &ls), NFS3ERR_BAD_COOKIE);

	/* the verifier of the version before a change */
	assert_int_equal(nfs_raw_create_or_remove(g.nfs, &g.root, "n0999", true),
			 NFS3_OK);
	g.want[NF + 999] = CHANGED;
	ls.cookie = cookie;
	ls.last_cookie = cookie;
	memcpy(ls.verf, verf, sizeof(verf));
	assert_int_equal(page(g.nfs, &ls), NFS3_OK);
	assert_true(ls.nent > 0 && ls.first_cookie > cookie);
	assert_memory_not_equal(ls.verf, verf, sizeof(verf));
	assert_int_equal(nfs_raw_create_or_remove(g.nfs, &g.root, "n0999", false),
			 NFS3_OK);
	g.want[NF + 999] = ABSENT;
	listing_free(&ls);
}

static void kill_halfway(struct listing *ls)
{
	if (ls->pages == 1500) {
		fprintf(stderr, "SIGKILL at cookie %llx\n",
			(unsigned long long)ls->cookie);
		restart(true);
	}
}

static void test_restart_midway(void **state)
{
	struct listing ls;
	(void)state;
	listing_init(&ls, true, 0, 1024, 4096);
	list_all(&ls, kill_halfway);
	assert_true(ls.pages > 1500);
	check_exact(&ls);
	listing_free(&ls);
}

static void test_collisions(void **state)
{
	struct listing rd, rdp;
	(void)state;
	setenv("UNION_NFSD_TEST_HASH_BITS", "12", 1);
	restart(false);
	unsetenv("UNION_NFSD_TEST_HASH_BITS");

	/* groups of ~25 names, ~100 for cookie 3 (0, 1 and 2 are raised to 3):
	 * 8 KB pages take a few groups */
	listing_init(&rd, false, 8192, 0, 0);
	list_all(&rd, NULL);
	check_exact(&rd);
	assert_true(rd.max_group > 1);
	listing_init(&rdp, true, 0, 8192, 32768);
	list_all(&rdp, NULL);
	check_exact(&rdp);
	listing_free(&rd);
	listing_free(&rdp);
	restart(false);
}

/* Test 5's other client: 50 changes after every 8th page, 1000 in all. */
static struct rpc_context *other;
static int nchanges;

static void change_some(struct listing *ls)
{
	char name[16];

	if (ls->pages % 8 || nchanges >= 2 * NCHG)
		return;
	for (int k = 0; k < 50; k++, nchanges++) {
		int j = nchanges / 2;
		if (nchanges % 2) {
			snprintf(name, sizeof(name), "f%06d", 20000 + 7 * j);
			assert_int_equal(
			    nfs_raw_create_or_remove(other, &g.root, name, false),
			    NFS3_OK);
		} else {
			snprintf(name, sizeof(name), "n%04d", j);
			assert_int_equal(
			    nfs_raw_create_or_remove(other, &g.root, name, true),
			    NFS3_OK);
		}
	}
}

static void test_concurrent_changes(void **state)
{
	struct listing ls;
	(void)state;
	other = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	assert_non_null(other);
	for (int j = 0; j < NCHG; j++) {
		g.want[20000 + 7 * j] = CHANGED;
		g.want[NF + j] = CHANGED;
	}
	nchanges = 0;
	listing_init(&ls, false, 8192, 0, 0);
	list_all(&ls, change_some);
	assert_int_equal(nchanges, 2 * NCHG);
	check_exact(&ls);
	listing_free(&ls);
	rpc_destroy_context(other);
	other = NULL;

	/* and afterwards the new state, exactly */
	for (int j = 0; j < NCHG; j++) {
		g.want[20000 + 7 * j] = ABSENT;
		g.want[NF + j] = VISIBLE;
	}
	listing_init(&ls, true, 0, 8192, 32768);
	list_all(&ls, NULL);
	check_exact(&ls);
	listing_free(&ls);
}

static int group_setup(void **state)
{
	struct timespec t0, t1;
	(void)state;
	if (geteuid() != 0) {
		fprintf(stderr, "needs root (mknod of white-outs)\n");
		exit(77);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	make_union();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	fprintf(stderr, "layers made in %.1f s\n",
		(double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	sleep(1); /* let the layer dirs settle, so the listing is cached */
	return start();
}

static int group_teardown(void **state)
{
	(void)state;
	if (other)
		rpc_destroy_context(other);
	disconnect();
	test_server_stop(&g.srv);
	test_tmp_remove(g.tmp, TMP_PREFIX);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_readdir_exact),
	    cmocka_unit_test(test_readdirplus_exact),
	    cmocka_unit_test(test_verifiers),
	    cmocka_unit_test(test_restart_midway),
	    cmocka_unit_test(test_collisions),
	    cmocka_unit_test(test_concurrent_changes),
	};
	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	g.bin = argv[1];
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
