/* SPDX-License-Identifier: Apache-2.0 */
/* test_readdir_reload - READDIR cookies keep their places across a layer
 * update by SIGHUP (issue 20; docs/readdir.md), through libnfs' raw
 * READDIR and READDIRPLUS.
 *
 *   test_readdir_reload UNION_NFSD
 *
 * The merged root of a union of an upper and two lower layers (top T, bottom
 * B1) holds 2,100 names: "n0000".."n1499" in B1, "n1000".."n1999" in T,
 * "n1800".."n2099" in the upper.  Both a READDIR and a READDIRPLUS listing
 * go halfway with small pages; then B1 is replaced in the config by B2, a
 * copy of it with every 10th name removed (hidden where nothing shadows it),
 * every 10th file grown and 100 names added, and the server reloads by
 * SIGHUP.  Each listing goes on from its last cookie with the verifier of
 * the old version.  The continued part must not fail (no
 * NFS3ERR_BAD_COOKIE), and:
 *
 *   - no name is listed twice, in the two parts together;
 *   - every name of both versions whose cookie is past the resume cookie is
 *     in the continued part once, so that the two parts together hold every
 *     name of both versions;
 *   - no removed name is in the continued part; an added one may be;
 *   - every name keeps its cookie (full listings before and after), and an
 *     unchanged name its fileid, in every listing.
 *
 * The server is stopped by pid and the temp dir removed also when a test
 * fails (group teardown; the server has PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <errno.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "nfs_raw.h"
#include "start_server.h"

#define TMP_PREFIX "/tmp/union-nfsd-rdreload."
#define CLIENTS	   "127.0.0.0/8(rw,no_root_squash,insecure)"
#define RELOAD_S   60

/* "n%04d" for [0, NN), then "a%04d" for [0, NA) (only in B2) */
#define NN   2100
#define NA   100
#define NIDX (NN + NA)

/* What a name is across the update. */
enum fate { KEPT, CHANGED, REMOVED, ADDED };

/* One listing: its place, and per name index how often and with what cookie
 * and fileid it was seen. */
struct listing {
	bool plus;
	uint64_t cookie;
	char verf[NFS3_COOKIEVERFSIZE];
	bool eof;
	int status;
	unsigned nent, extra, pages;
	unsigned seen[NIDX];
	uint64_t cookie_of[NIDX], fileid_of[NIDX];
};

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	char conf[PATH_MAX + 16], config_arg[PATH_MAX + 32], state[PATH_MAX + 16];
	struct test_server srv;
	struct rpc_context *nfs;
	struct fh root;
	unsigned char fate[NIDX];
} g;

/* ---- the layers ---- */

static const char *at(const char *fmt, ...)
{
	static char p[PATH_MAX + 160];
	char rel[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	return p;
}

static int put(const char *path, const char *text, const char *mode)
{
	FILE *f = fopen(path, mode);

	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

static int put_range(const char *layer, int from, int to)
{
	char text[64];

	for (int i = from; i < to; i++) {
		snprintf(text, sizeof(text), "n%04d of %s\n", i, layer);
		if (put(at("%s/n%04d", layer, i), text, "w"))
			return -1;
	}
	return 0;
}

static int make_layers(void)
{
	static const char *dirs[] = {"T", "B1", "upper", "work"};

	for (size_t i = 0; i < 4; i++)
		if (mkdir(at("%s", dirs[i]), 0755))
			return -1;
	if (put_range("B1", 0, 1500) || put_range("T", 1000, 2000) ||
	    put_range("upper", 1800, NN))
		return -1;
	for (int i = 0; i < NIDX; i++)
		g.fate[i] = i < NN ? KEPT : ADDED;
	return 0;
}

/* B2: B1's copy with every 10th name (from 3) removed, every 10th (from 5)
 * grown, and "a0000".."a0099" added.  Only the names B1 alone shows change
 * what the union shows. */
static void new_version(void)
{
	char cmd[2 * PATH_MAX + 32];

	snprintf(cmd, sizeof(cmd), "cp -a %s/B1 %s/B2", g.tmp, g.tmp);
	assert_int_equal(system(cmd), 0);
	for (int i = 0; i < 1500; i++) {
		bool alone = i < 1000;

		if (i % 10 == 3) {
			assert_int_equal(unlink(at("B2/n%04d", i)), 0);
			if (alone)
				g.fate[i] = REMOVED;
		} else if (i % 10 == 5) {
			assert_int_equal(put(at("B2/n%04d", i), "grown\n", "a"), 0);
			if (alone)
				g.fate[i] = CHANGED;
		}
	}
	for (int i = 0; i < NA; i++)
		assert_int_equal(put(at("B2/a%04d", i), "added\n", "w"), 0);
}

static bool in_old(int i)
{
	return g.fate[i] != ADDED;
}

static bool in_new(int i)
{
	return g.fate[i] != REMOVED;
}

static void write_config(const char *bottom)
{
	FILE *f = fopen(g.conf, "w");

	assert_non_null(f);
	fprintf(f,
		"[export]\npath = /\nlowerdir = %s/T:%s/%s\nupperdir = %s/upper\n"
		"workdir = %s/work\nclients = " CLIENTS "\n",
		g.tmp, g.tmp, bottom, g.tmp, g.tmp);
	fclose(f);
}

/* ---- a listing, page by page ---- */

/* The index of NAME, or -1 for a name the test never made. */
static int name_index(const char *name)
{
	char *end;
	long v;

	if ((name[0] != 'n' && name[0] != 'a') || strlen(name) != 5)
		return -1;
	v = strtol(name + 1, &end, 10);
	if (*end || v < 0)
		return -1;
	if (name[0] == 'n')
		return v < NN ? (int)v : -1;
	return v < NA ? NN + (int)v : -1;
}

static void see(struct listing *ls, const char *name, uint64_t cookie, uint64_t fileid)
{
	int i = name_index(name);

	ls->nent++;
	ls->cookie = cookie;
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return;
	if (i < 0) {
		ls->extra++;
		fprintf(stderr, "unexpected name %s\n", name);
		return;
	}
	ls->seen[i]++;
	ls->cookie_of[i] = cookie;
	ls->fileid_of[i] = fileid;
}

static void keep_rd(void *data, void *out)
{
	READDIR3res *r = data;
	struct listing *ls = out;

	ls->status = (int)r->status;
	if (r->status != NFS3_OK)
		return;
	for (entry3 *e = r->READDIR3res_u.resok.reply.entries; e; e = e->nextentry)
		see(ls, e->name, e->cookie, e->fileid);
	memcpy(ls->verf, r->READDIR3res_u.resok.cookieverf, NFS3_COOKIEVERFSIZE);
	ls->eof = r->READDIR3res_u.resok.reply.eof;
}

static void keep_rdp(void *data, void *out)
{
	READDIRPLUS3res *r = data;
	struct listing *ls = out;
	READDIRPLUS3resok *ok = &r->READDIRPLUS3res_u.resok;

	ls->status = (int)r->status;
	if (r->status != NFS3_OK)
		return;
	for (entryplus3 *e = ok->reply.entries; e; e = e->nextentry)
		see(ls, e->name, e->cookie, e->fileid);
	memcpy(ls->verf, ok->cookieverf, NFS3_COOKIEVERFSIZE);
	ls->eof = ok->reply.eof;
}

/* One small page of LS from its cookie and verifier: the NFS status, or -1
 * when there was no reply. */
static int page(struct listing *ls)
{
	struct call c = {.keep = ls->plus ? keep_rdp : keep_rd, .out = ls};
	int queued;

	ls->status = -1;
	if (ls->plus) {
		READDIRPLUS3args a = {.dir = nfs_raw_fh3(&g.root),
				      .cookie = ls->cookie,
				      .dircount = 1024,
				      .maxcount = 4096};
		memcpy(a.cookieverf, ls->verf, NFS3_COOKIEVERFSIZE);
		queued = rpc_nfs3_readdirplus_async(g.nfs, nfs_raw_on_reply, &a, &c);
	} else {
		READDIR3args a = {
		    .dir = nfs_raw_fh3(&g.root), .cookie = ls->cookie, .count = 1024};
		memcpy(a.cookieverf, ls->verf, NFS3_COOKIEVERFSIZE);
		queued = rpc_nfs3_readdir_async(g.nfs, nfs_raw_on_reply, &a, &c);
	}
	if (nfs_raw_finish(g.nfs, &c, queued))
		return -1;
	ls->pages++;
	return ls->status;
}

static struct listing *listing_new(bool plus)
{
	struct listing *ls = calloc(1, sizeof(*ls));

	assert_non_null(ls);
	ls->plus = plus;
	return ls;
}

/* Pages LS until eof, or until it has seen STOP names (0: no stop). */
static void list_until(struct listing *ls, unsigned stop)
{
	while (!ls->eof && (!stop || ls->nent < stop)) {
		int st = page(ls);

		if (st != NFS3_OK)
			fail_msg("%s page %u: status %d",
				 ls->plus ? "READDIRPLUS" : "READDIR", ls->pages, st);
	}
}

/* A whole listing from cookie 0. */
static struct listing *list_all(bool plus)
{
	struct listing *ls = listing_new(plus);

	list_until(ls, 0);
	assert_int_equal(ls->extra, 0);
	return ls;
}

/* ---- set-up ---- */

static int start(void)
{
	const char *args[] = {g.config_arg, NULL};

	if (test_server_start(g.bin, g.state, args, &g.srv))
		return -1;
	g.nfs = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	if (!g.nfs)
		return -1;
	return nfs_raw_mnt(g.srv.mount_port, "/", &g.root) == MNT3_OK && g.root.len ? 0
										    : -1;
}

static int setup(void **state)
{
	(void)state;
	snprintf(g.tmp, sizeof(g.tmp), TMP_PREFIX "XXXXXX");
	if (!mkdtemp(g.tmp))
		return -1;
	snprintf(g.conf, sizeof(g.conf), "%s/conf", g.tmp);
	snprintf(g.config_arg, sizeof(g.config_arg), "--config=%s", g.conf);
	snprintf(g.state, sizeof(g.state), "%s/state", g.tmp);
	if (make_layers())
		return -1;
	write_config("B1");
	return start();
}

static int teardown(void **state)
{
	(void)state;
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	test_server_stop(&g.srv);
	test_tmp_remove(g.tmp, TMP_PREFIX);
	return 0;
}

/* B1 replaced by B2, once the server shows an added name. */
static void reload(void)
{
	double t0 = it_now_s();

	new_version();
	write_config("B2");
	assert_int_equal(kill(g.srv.pid, SIGHUP), 0);
	while (nfs_raw_lookup(g.nfs, &g.root, "a0000").status != NFS3_OK) {
		if (it_now_s() - t0 > RELOAD_S)
			fail_msg("reload: a0000 never appeared");
		it_sleep_ms(20);
	}
}

/* ---- checks ---- */

/* LS holds exactly the names of the old (NEW false) or new version. */
static void check_full(const struct listing *ls, bool new)
{
	unsigned bad = 0;

	for (int i = 0; i < NIDX; i++) {
		unsigned want = (new ? in_new(i) : in_old(i)) ? 1 : 0;

		if (ls->seen[i] != want && bad++ < 5)
			fprintf(stderr, "%s listing: index %d seen %u times\n",
				new ? "new" : "old", i, ls->seen[i]);
	}
	assert_int_equal(bad, 0);
}

/* Name I's cookie and fileid in LS against the full listings: its cookie is
 * the same in both, and an unchanged name's fileid too. */
static unsigned check_place(const struct listing *ls, int i, const struct listing *old,
			    const struct listing *new)
{
	unsigned bad = 0;

	if (in_old(i) && ls->cookie_of[i] != old->cookie_of[i])
		bad++;
	if (in_new(i) && ls->cookie_of[i] != new->cookie_of[i])
		bad++;
	if (g.fate[i] == KEPT && ls->fileid_of[i] != old->fileid_of[i])
		bad++;
	if (bad)
		fprintf(stderr,
			"index %d: cookie %ju fileid %ju, old %ju %ju, new %ju %ju\n", i,
			(uintmax_t)ls->cookie_of[i], (uintmax_t)ls->fileid_of[i],
			(uintmax_t)old->cookie_of[i], (uintmax_t)old->fileid_of[i],
			(uintmax_t) new->cookie_of[i], (uintmax_t) new->fileid_of[i]);
	return bad;
}

/* The first part P1 (before the reload, stopped after cookie RESUME) and the
 * continued part P2, against the full listings OLD and NEW. */
static void check_parts(const char *what, const struct listing *p1,
			const struct listing *p2, uint64_t resume,
			const struct listing *old, const struct listing *new)
{
	unsigned twice = 0, missing = 0, removed = 0, added = 0, places = 0;

	for (int i = 0; i < NIDX; i++) {
		unsigned n = p1->seen[i] + p2->seen[i];
		bool common = in_old(i) && in_new(i);

		twice += n > 1;
		if (common &&
		    (n != 1 || (new->cookie_of[i] > resume && p2->seen[i] != 1))) {
			if (missing++ < 5)
				fprintf(stderr, "%s: index %d seen %u + %u times\n", what,
					i, p1->seen[i], p2->seen[i]);
		}
		removed += !in_new(i) && p2->seen[i];
		added += g.fate[i] == ADDED && p2->seen[i];
		if (p1->seen[i])
			places += check_place(p1, i, old, new);
		if (p2->seen[i])
			places += check_place(p2, i, old, new);
	}
	fprintf(stderr,
		"%s: %u + %u pages, %u names before the reload, %u after (%u added), "
		"twice %u, missing %u, removed %u, misplaced %u\n",
		what, p1->pages, p2->pages, p1->nent, p2->nent, added, twice, missing,
		removed, places);
	assert_int_equal(p2->extra, 0);
	assert_int_equal(twice, 0);
	assert_int_equal(missing, 0);
	assert_int_equal(removed, 0);
	assert_int_equal(places, 0);
}

/* ---- the test ---- */

static void test_reload(void **state)
{
	struct listing *old, *new, *p1[2], *p2[2];
	uint64_t resume[2];

	(void)state;
	old = list_all(true);
	check_full(old, false);
	for (int k = 0; k < 2; k++) {
		p1[k] = listing_new(k == 1);
		list_until(p1[k], NN / 2);
		assert_false(p1[k]->eof);
		resume[k] = p1[k]->cookie;
	}
	reload();
	for (int k = 0; k < 2; k++) {
		/* the old version's cookie and verifier */
		p2[k] = listing_new(k == 1);
		p2[k]->cookie = resume[k];
		memcpy(p2[k]->verf, p1[k]->verf, NFS3_COOKIEVERFSIZE);
		list_until(p2[k], 0);
		/* the listing changed version, so the old verifier was tried */
		assert_memory_not_equal(p1[k]->verf, p2[k]->verf, NFS3_COOKIEVERFSIZE);
	}
	new = list_all(false);
	check_full(new, true);
	check_parts("READDIR", p1[0], p2[0], resume[0], old, new);
	check_parts("READDIRPLUS", p1[1], p2[1], resume[1], old, new);
	for (int i = 0; i < NIDX; i++)
		if (in_old(i) && in_new(i))
			assert_int_equal(check_place(new, i, old, new), 0);
	for (int k = 0; k < 2; k++) {
		free(p1[k]);
		free(p2[k]);
	}
	free(old);
	free(new);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reload),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "needs root\n");
		return 77;
	}
	g.bin = argv[1];
	return cmocka_run_group_tests(tests, setup, teardown);
}
