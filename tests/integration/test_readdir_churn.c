/* SPDX-License-Identifier: Apache-2.0 */
/* test_readdir_churn - READDIR and READDIRPLUS of a directory whose names
 * change while it is listed (issue 17).
 *
 *   test_readdir_churn UNION_NFSD
 *
 * A merged directory "d" (a lower and the upper part) holds NSTABLE names
 * that nobody touches: empty files, some in each layer.  Then, for
 * READDIR_CHURN_SECONDS (default 15), 4 clients create and remove names of
 * their own in "d" as fast as the server answers (each keeps about 8 at a
 * time: CREATE of one, REMOVE of the one made 8 before), while 2 clients
 * list "d" again and again, each alternating READDIR and READDIRPLUS with
 * small pages, keeping the cookie and verifier between pages.  Each
 * client has its own connection and thread.
 *
 * Checked: no READDIR or READDIRPLUS call fails (any status but NFS3_OK is
 * an error: the directory exists throughout); in every complete listing
 * each stable name appears exactly once, each churned name at most once,
 * "." and ".." once, and no other name; every READDIRPLUS entry of a
 * stable name carries a handle and attributes with the entry's fileid.  The
 * CREATEs and REMOVEs must succeed as well, and enough listings must
 * complete for the run to mean something.
 *
 * Empty files matter: the server reads an empty file's xattrs to tell a
 * white-out, a window in which a name removed meanwhile vanished.
 *
 * The server is stopped by pid and the temp dir removed also when a check
 * fails (group teardown; the server has PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nfs_raw.h"
#include "start_server.h"

#define TMP_PREFIX "/tmp/union-nfsd-rdchurn."

#define NSTABLE	 300 /* "s%04d": even ones in the lower, odd ones in the upper */
#define NCHURN	 4   /* clients creating and removing */
#define NLIST	 2   /* clients listing */
#define NSLOT	 64  /* "c%d_%02d": names a churning client cycles through */
#define KEEP	 8   /* names each churning client keeps at a time */
#define SECONDS	 15  /* default of READDIR_CHURN_SECONDS */
#define MAX_ERRS 8   /* statuses of failed calls printed */

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	struct test_union un; /* its options and state dir */
	struct test_server srv;
	struct fh root, dir;
	time_t deadline;
	atomic_bool stop;
} g;

/* ---- calls ---- */

static void keep_lookup(void *data, void *out)
{
	LOOKUP3res *r = data;
	struct fh *f = out;

	f->len = 0;
	if (r->status == NFS3_OK)
		nfs_raw_copy_fh(f, &r->LOOKUP3res_u.resok.object);
}

/* ---- the churning clients ---- */

struct churner {
	int id;
	unsigned calls, errs;
};

static void churn_name(char *buf, size_t len, int id, unsigned k)
{
	snprintf(buf, len, "c%d_%02u", id, k % NSLOT);
}

static void *churn(void *arg)
{
	struct churner *c = arg;
	struct rpc_context *rpc = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	char name[32];
	int st;

	if (!rpc) {
		c->errs++;
		return NULL;
	}
	for (unsigned k = 0; !atomic_load(&g.stop) && time(NULL) < g.deadline; k++) {
		churn_name(name, sizeof(name), c->id, k);
		st = nfs_raw_create_or_remove(rpc, &g.dir, name, true);
		c->calls++;
		if (st != NFS3_OK && c->errs++ < MAX_ERRS)
			fprintf(stderr, "CREATE %s: %d\n", name, st);
		if (k < KEEP)
			continue;
		churn_name(name, sizeof(name), c->id, k - KEEP);
		st = nfs_raw_create_or_remove(rpc, &g.dir, name, false);
		c->calls++;
		if (st != NFS3_OK && c->errs++ < MAX_ERRS)
			fprintf(stderr, "REMOVE %s: %d\n", name, st);
	}
	rpc_destroy_context(rpc);
	return NULL;
}

/* ---- the listing clients ---- */

/* What one listing saw, and what a lister counts over all of its listings. */
struct lister {
	int id;
	bool plus; /* of the listing under way */
	/* the listing under way */
	uint64_t cookie;
	char verf[NFS3_COOKIEVERFSIZE];
	bool eof;
	unsigned seen[NSTABLE], churned[NCHURN * NSLOT], dots, dotdots;
	/* totals */
	unsigned calls, errs, listings[2], missing, dup, extra, noattr;
};

/* The index of stable name NAME, or -1. */
static int stable_index(const char *name)
{
	char *end;
	long v;

	if (name[0] != 's' || strlen(name) != 5)
		return -1;
	v = strtol(name + 1, &end, 10);
	return *end || v < 0 || v >= NSTABLE ? -1 : (int)v;
}

/* The index of churned name NAME, or -1. */
static int churn_index(const char *name)
{
	int id;
	unsigned k;
	char tail;

	if (sscanf(name, "c%d_%2u%c", &id, &k, &tail) != 2 || id < 0 || id >= NCHURN ||
	    k >= NSLOT)
		return -1;
	return id * NSLOT + (int)k;
}

static void see(struct lister *ls, const char *name)
{
	int i;

	if (!strcmp(name, "."))
		ls->dots++;
	else if (!strcmp(name, ".."))
		ls->dotdots++;
	else if ((i = stable_index(name)) >= 0)
		ls->seen[i]++;
	else if ((i = churn_index(name)) >= 0)
		ls->churned[i]++;
	else if (ls->extra++ < MAX_ERRS)
		fprintf(stderr, "lister %d: unexpected name %s\n", ls->id, name);
}

static void keep_rd(void *data, void *out)
{
	READDIR3res *r = data;
	struct lister *ls = out;
	READDIR3resok *ok = &r->READDIR3res_u.resok;

	if (r->status != NFS3_OK) {
		if (ls->errs++ < MAX_ERRS)
			fprintf(stderr, "lister %d: READDIR at cookie %llu: %d\n", ls->id,
				(unsigned long long)ls->cookie, (int)r->status);
		return;
	}
	for (entry3 *e = ok->reply.entries; e; e = e->nextentry) {
		see(ls, e->name);
		ls->cookie = e->cookie;
	}
	memcpy(ls->verf, ok->cookieverf, NFS3_COOKIEVERFSIZE);
	ls->eof = ok->reply.eof;
}

static void keep_rdp(void *data, void *out)
{
	READDIRPLUS3res *r = data;
	struct lister *ls = out;
	READDIRPLUS3resok *ok = &r->READDIRPLUS3res_u.resok;

	if (r->status != NFS3_OK) {
		if (ls->errs++ < MAX_ERRS)
			fprintf(stderr, "lister %d: READDIRPLUS at cookie %llu: %d\n",
				ls->id, (unsigned long long)ls->cookie, (int)r->status);
		return;
	}
	for (entryplus3 *e = ok->reply.entries; e; e = e->nextentry) {
		see(ls, e->name);
		ls->cookie = e->cookie;
		if (stable_index(e->name) >= 0 &&
		    (!e->name_handle.handle_follows ||
		     !e->name_attributes.attributes_follow ||
		     e->name_attributes.post_op_attr_u.attributes.fileid != e->fileid))
			ls->noattr++;
	}
	memcpy(ls->verf, ok->cookieverf, NFS3_COOKIEVERFSIZE);
	ls->eof = ok->reply.eof;
}

/* One page of the listing under way; false when the call got no reply. */
static bool page(struct rpc_context *rpc, struct lister *ls)
{
	struct call c = {.keep = ls->plus ? keep_rdp : keep_rd, .out = ls};
	unsigned errs = ls->errs;
	int rc;

	ls->calls++;
	if (ls->plus) {
		READDIRPLUS3args a = {.dir = nfs_raw_fh3(&g.dir),
				      .cookie = ls->cookie,
				      .dircount = 256,
				      .maxcount = 2048};
		memcpy(a.cookieverf, ls->verf, NFS3_COOKIEVERFSIZE);
		rc = nfs_raw_finish(
		    rpc, &c, rpc_nfs3_readdirplus_async(rpc, nfs_raw_on_reply, &a, &c));
	} else {
		READDIR3args a = {
		    .dir = nfs_raw_fh3(&g.dir), .cookie = ls->cookie, .count = 512};
		memcpy(a.cookieverf, ls->verf, NFS3_COOKIEVERFSIZE);
		rc = nfs_raw_finish(
		    rpc, &c, rpc_nfs3_readdir_async(rpc, nfs_raw_on_reply, &a, &c));
	}
	if (rc)
		ls->errs++;
	return !rc && ls->errs == errs;
}

/* Adds what the complete listing just made got wrong to the totals. */
static void listing_check(struct lister *ls)
{
	for (int i = 0; i < NSTABLE; i++) {
		if (ls->seen[i] == 0 && ls->missing++ < MAX_ERRS)
			fprintf(stderr, "lister %d: s%04d missing\n", ls->id, i);
		if (ls->seen[i] > 1 && ls->dup++ < MAX_ERRS)
			fprintf(stderr, "lister %d: s%04d %u times\n", ls->id, i,
				ls->seen[i]);
	}
	for (int i = 0; i < NCHURN * NSLOT; i++)
		if (ls->churned[i] > 1 && ls->dup++ < MAX_ERRS)
			fprintf(stderr, "lister %d: c%d_%02d %u times\n", ls->id,
				i / NSLOT, i % NSLOT, ls->churned[i]);
	if (ls->dots != 1 || ls->dotdots != 1)
		ls->dup++;
	ls->listings[ls->plus]++;
}

static void listing_start(struct lister *ls, bool plus)
{
	ls->plus = plus;
	ls->cookie = 0;
	memset(ls->verf, 0, sizeof(ls->verf));
	ls->eof = false;
	memset(ls->seen, 0, sizeof(ls->seen));
	memset(ls->churned, 0, sizeof(ls->churned));
	ls->dots = ls->dotdots = 0;
}

static void *list(void *arg)
{
	struct lister *ls = arg;
	struct rpc_context *rpc = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	bool plus = ls->id % 2;

	if (!rpc) {
		ls->errs++;
		return NULL;
	}
	while (time(NULL) < g.deadline) {
		listing_start(ls, plus);
		while (!ls->eof && page(rpc, ls))
			;
		if (ls->eof)
			listing_check(ls);
		else if (ls->errs > 10 * MAX_ERRS)
			break; /* the rest would say the same */
		plus = !plus;
	}
	rpc_destroy_context(rpc);
	return NULL;
}

/* ---- set-up ---- */

static void fail_setup(const char *what, const char *path)
{
	fprintf(stderr, "%s %s: %s\n", what, path, strerror(errno));
	exit(errno == EPERM ? 77 : 1);
}

static void make_dir(const char *sub)
{
	char path[PATH_MAX + 32];

	snprintf(path, sizeof(path), "%s/%s", g.tmp, sub);
	if (mkdir(path, 0755))
		fail_setup("mkdir", path);
}

/* The stable names, empty files: even ones in the lower, odd in the upper. */
static void make_stable(void)
{
	char path[PATH_MAX + 32];
	FILE *f;

	for (int i = 0; i < NSTABLE; i++) {
		snprintf(path, sizeof(path), "%s/%s/d/s%04d", g.tmp,
			 i % 2 ? "upper" : "lower", i);
		if (!(f = fopen(path, "w")))
			fail_setup("create", path);
		fclose(f);
	}
}

static void make_union(void)
{
	snprintf(g.tmp, sizeof(g.tmp), TMP_PREFIX "XXXXXX");
	if (!mkdtemp(g.tmp))
		fail_setup("mkdtemp", g.tmp);
	make_dir("lower");
	make_dir("lower/d");
	make_dir("upper");
	make_dir("upper/d");
	make_dir("work");
	make_stable();
	test_union_init(&g.un, g.tmp, "lower");
}

static int lookup_dir(void)
{
	struct rpc_context *rpc = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	struct call c = {.keep = keep_lookup, .out = &g.dir};
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(&g.root), .name = "d"}};
	int rc;

	if (!rpc)
		return -1;
	rc =
	    nfs_raw_finish(rpc, &c, rpc_nfs3_lookup_async(rpc, nfs_raw_on_reply, &a, &c));
	rpc_destroy_context(rpc);
	return rc || !g.dir.len ? -1 : 0;
}

static int seconds(void)
{
	const char *s = getenv("READDIR_CHURN_SECONDS");
	int n = s ? atoi(s) : SECONDS;

	return n > 0 ? n : SECONDS;
}

/* ---- the test ---- */

static void test_churn(void **state)
{
	struct churner cs[NCHURN] = {0};
	struct lister ls[NLIST];
	pthread_t tc[NCHURN], tl[NLIST];
	unsigned lerrs = 0, cerrs = 0, ccalls = 0, lcalls = 0, done[2] = {0, 0};
	unsigned missing = 0, dup = 0, extra = 0, noattr = 0;

	(void)state;
	memset(ls, 0, sizeof(ls));
	g.deadline = time(NULL) + seconds();
	for (int i = 0; i < NCHURN; i++) {
		cs[i].id = i;
		assert_int_equal(pthread_create(&tc[i], NULL, churn, &cs[i]), 0);
	}
	for (int i = 0; i < NLIST; i++) {
		ls[i].id = i;
		assert_int_equal(pthread_create(&tl[i], NULL, list, &ls[i]), 0);
	}
	for (int i = 0; i < NLIST; i++) {
		pthread_join(tl[i], NULL);
		lerrs += ls[i].errs, lcalls += ls[i].calls;
		done[0] += ls[i].listings[0], done[1] += ls[i].listings[1];
		missing += ls[i].missing, dup += ls[i].dup, extra += ls[i].extra;
		noattr += ls[i].noattr;
	}
	atomic_store(&g.stop, true);
	for (int i = 0; i < NCHURN; i++) {
		pthread_join(tc[i], NULL);
		cerrs += cs[i].errs, ccalls += cs[i].calls;
	}
	fprintf(stderr,
		"%d s: %u CREATE/REMOVE (%u failed); %u READDIR/READDIRPLUS calls "
		"(%u failed), %u READDIR and %u READDIRPLUS listings complete; "
		"stable names missing %u, duplicated %u, unexpected %u, without "
		"attributes %u\n",
		seconds(), ccalls, cerrs, lcalls, lerrs, done[0], done[1], missing, dup,
		extra, noattr);
	assert_int_equal(lerrs, 0);
	assert_int_equal(cerrs, 0);
	assert_int_equal(missing, 0);
	assert_int_equal(dup, 0);
	assert_int_equal(extra, 0);
	assert_int_equal(noattr, 0);
	assert_true(done[0] >= 2 && done[1] >= 2);
	assert_true(ccalls >= 100);
}

static int group_teardown(void **state)
{
	(void)state;
	test_server_stop(&g.srv);
	test_tmp_remove(g.tmp, TMP_PREFIX);
	return 0;
}

static int group_setup(void **state)
{

	(void)state;
	if (geteuid() != 0) {
		fprintf(stderr, "needs root\n");
		exit(77);
	}
	make_union();
	if (test_server_start(g.bin, g.un.state, g.un.args, &g.srv) ||
	    nfs_raw_mnt(g.srv.mount_port, "/", &g.root) != MNT3_OK || !g.root.len ||
	    lookup_dir()) {
		group_teardown(state); /* cmocka runs no teardown after a failed setup */
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_churn),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	g.bin = argv[1];
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
