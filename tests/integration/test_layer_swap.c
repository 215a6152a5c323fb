/* SPDX-License-Identifier: Apache-2.0 */
/* test_layer_swap - handles and fileids across a lower layer replaced by a
 * copy or a new version (union/layerid.c), through libnfs' raw NFSv3 calls.
 *
 *   test_layer_swap UNION_NFSD
 *
 * A writable union of two lower layers (top T, bottom B0) and an upper, with
 * about 400 objects: directories, files, symlinks, a pair of hard links, a
 * file copied up through the server and a name whited out in T.  Every
 * object's handle and fileid is taken by LOOKUP, then:
 *
 *   copy      the server stopped, B0 replaced in the config by B1, a `cp -a`
 *             copy at a new path, the server started: every saved handle
 *             resolves (GETATTR) with its fileid, and a LOOKUP of every path
 *             gives the same fileid;
 *   reload    B1 replaced by B2, a copy with 5% of its files changed in
 *             size, 5% removed, a symlink changed, one directory removed
 *             and some files added, by SIGHUP with the changed config:
 *             unchanged paths keep handle and fileid; B1 is retired
 *             (union/retire.c), so the old handles of changed and removed
 *             files and the symlink read B1's bytes (target) with B1's size
 *             and their old fileid and answer NFS3ERR_ROFS to WRITE and
 *             SETATTR, while the removed directory's is stale; a reload
 *             that sets retire-time = 1 releases B1 at once;
 *             a changed path has a new fileid and the new bytes, an added
 *             one a fileid never seen; after a restart the old handles are
 *             stale;
 *   restart   the same from B2 to B3 by a restart: the old handles of
 *             changed and removed files are stale (nothing is retired);
 *   same path B3 replaced by a copy at its own path (another root inode):
 *             its index is built again, every handle resolves;
 *   upgrade   a state dir written with --no-layer-index, then served with
 *             the indexes: every handle resolves with its fileid;
 *   gone dir  B3 removed before the reload to B4: not retired, its old
 *             handles are stale and the server goes on;
 *   retire-time  with --retire-time=2, B4 replaced by B5: the old handles
 *             read B4 at once, and are stale 3 s after the reload.
 *
 * The server is stopped by pid and the temp dir removed also when a test
 * fails (group teardown; the server has PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <dirent.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "nfs_raw.h"
#include "start_server.h"

#define NDIRS	   12
#define NFILES	   25
#define OBJS_MAX   (NDIRS * (NFILES + 4) + 64)
#define TMP_PREFIX "/tmp/union-nfsd-layerswap."
#define RELOAD_S   60

enum kind { K_DIR, K_FILE, K_LINK };

/* One path of the union and what the tests saw of it. */
struct obj {
	char path[64];
	enum kind kind;
	bool mutable; /* a bottom-layer file a new version may change */
	struct fh fh;
	uint64_t fileid;
	bool gone; /* removed by the last version */
};

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	char state[PATH_MAX + 16];
	char conf[PATH_MAX + 32];
	char config_arg[PATH_MAX + 48];
	struct test_server srv;
	struct rpc_context *nfs;
	struct fh root;
	struct obj objs[OBJS_MAX];
	size_t n;
	/* the handles of changed files before the last version (saved by
	 * version_checks, which moves objs[i].fh to the new one) */
	struct fh old[OBJS_MAX];
	bool had_old[OBJS_MAX];
	int version;	      /* of the bottom layer: B<version> */
	unsigned retire_time; /* in the config's [server] */
} g;

/* ---- files ---- */

static const char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const char *at(const char *fmt, ...)
{
	static char buf[4][2 * PATH_MAX];
	static int k;
	char rel[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", g.tmp, rel);
	return buf[k];
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0 || fclose(f))
		fail_msg("write %s: %s", path, strerror(errno));
}

static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void run(const char *fmt, ...)
{
	char cmd[4 * PATH_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("%s: failed", cmd);
}

static void add(const char *path, enum kind kind, bool mutable)
{
	struct obj *o = &g.objs[g.n++];

	assert_true(g.n <= OBJS_MAX);
	*o = (struct obj){.kind = kind, .mutable = mutable};
	snprintf(o->path, sizeof(o->path), "%s", path);
}

/* B0, T, upper, work; the object list. */
static void make_layers(void)
{
	char rel[64], text[64];

	run("mkdir -p %s %s %s %s", at("B0"), at("T/t"), at("upper"), at("work"));
	for (int d = 0; d < NDIRS; d++) {
		snprintf(rel, sizeof(rel), "d%02d", d);
		run("mkdir -p %s", at("B0/%s/sub", rel));
		add(rel, K_DIR, false);
		snprintf(rel, sizeof(rel), "d%02d/sub", d);
		add(rel, K_DIR, false);
		for (int f = 0; f < NFILES; f++) {
			snprintf(rel, sizeof(rel), "d%02d/f%02d", d, f);
			snprintf(text, sizeof(text), "file %d.%d%.*s\n", d, f, f,
				 "xxxxxxxxxxxxxxxxxxxxxxxxx");
			put(at("B0/%s", rel), text);
			add(rel, K_FILE, !(d == 0 && f < 2));
		}
		snprintf(rel, sizeof(rel), "d%02d/s", d);
		if (symlink("f00", at("B0/%s", rel)))
			fail_msg("symlink: %s", strerror(errno));
		add(rel, K_LINK, false);
		snprintf(rel, sizeof(rel), "d%02d/sub/g", d);
		put(at("B0/%s", rel), "deep\n");
		add(rel, K_FILE, false);
	}
	/* hard links (never changed: their fileid is their group's) */
	put(at("B0/d00/h1"), "linked\n");
	if (link(at("B0/d00/h1"), at("B0/d01/h2")))
		fail_msg("link: %s", strerror(errno));
	add("d00/h1", K_FILE, false);
	add("d01/h2", K_FILE, false);
	/* the top layer: its own dir, a file over B0's, a white-out (OCI) */
	run("mkdir -p %s %s", at("T/d02"), at("T/d03"));
	put(at("T/t/top"), "top\n");
	add("t", K_DIR, false);
	add("t/top", K_FILE, false);
	put(at("T/d02/f05"), "top over bottom\n");
	put(at("T/d03/.wh.f06"), "");
	for (size_t i = 0; i < g.n; i++) /* d02/f05 is T's now; d03/f06 hidden */
		if (!strcmp(g.objs[i].path, "d02/f05") ||
		    !strcmp(g.objs[i].path, "d03/f06"))
			g.objs[i].mutable = false;
	for (size_t i = 0; i < g.n; i++)
		if (!strcmp(g.objs[i].path, "d03/f06"))
			g.objs[i] = g.objs[--g.n];
}

static void write_config(int version, bool index)
{
	FILE *f = fopen(g.conf, "w");

	if (!f)
		fail_msg("%s: %s", g.conf, strerror(errno));
	fprintf(f,
		"[server]\nlayer-index = %s\nretire-time = %u\n\n[export]\npath = /\n"
		"lowerdir = %s/T:%s/B%d\nupperdir = %s/upper\nworkdir = %s/work\n",
		index ? "yes" : "no", g.retire_time, g.tmp, g.tmp, version, g.tmp, g.tmp);
	fclose(f);
	g.version = version;
}

/* ---- calls (nfs_raw.h makes them synchronous; a missing reply is status -1) ---- */

/* LOOKUP of every component of PATH from the root. */
static struct nfs_raw_obj walk(const char *path)
{
	return nfs_raw_walk(g.nfs, &g.root, path);
}

static struct nfs_raw_obj getattr(const struct fh *fh)
{
	return nfs_raw_getattr(g.nfs, fh);
}

static int write_text(const struct fh *fh, const char *text)
{
	return nfs_raw_write(g.nfs, fh, 0, text, (uint32_t)strlen(text));
}

/* The ACCESS bits granted of READ and MODIFY; bit 31 for an error. */
static uint32_t access_rm(const struct fh *fh)
{
	uint32_t got;

	if (nfs_raw_access(g.nfs, fh, ACCESS3_READ | ACCESS3_MODIFY, &got) != NFS3_OK)
		return 0x80000000u;
	return got;
}

/* READ of a file's first bytes, or READLINK of a symlink. */
static struct nfs_raw_text content_fh(const struct fh *fh, enum kind kind)
{
	return kind == K_LINK ? nfs_raw_readlink(g.nfs, fh)
			      : nfs_raw_read_text(g.nfs, fh);
}

/* The bytes of PATH (a file of the test's layers, or a symlink's target),
 * and its size. */
static size_t slurp(const char *path, char *buf)
{
	ssize_t len = readlink(path, buf, NFS_RAW_TEXT_MAX);
	FILE *f;
	size_t n;

	if (len >= 0) {
		buf[len] = '\0';
		return (size_t)len;
	}
	f = fopen(path, "r");
	if (!f)
		fail_msg("%s: %s", path, strerror(errno));
	n = fread(buf, 1, NFS_RAW_TEXT_MAX, f);
	fclose(f);
	buf[n] = '\0';
	return n;
}

/* ---- the server ---- */

static void start(const char *extra)
{
	const char *args[] = {g.config_arg, extra, NULL};

	if (test_server_start(g.bin, g.state, args, &g.srv))
		fail_msg("server did not start");
	g.nfs = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	assert_non_null(g.nfs);
	assert_int_equal(nfs_raw_mnt(g.srv.mount_port, "/", &g.root), MNT3_OK);
}

static void stop(void)
{
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	g.nfs = NULL;
	assert_int_equal(test_server_stop(&g.srv), 0);
}

/* ---- checks ---- */

/* Takes every object's handle and fileid. */
static void take_all(void)
{
	for (size_t i = 0; i < g.n; i++) {
		struct obj *o = &g.objs[i];
		struct nfs_raw_obj r = walk(o->path);

		if (r.status != NFS3_OK)
			fail_msg("LOOKUP %s: status %d", o->path, r.status);
		o->fh = r.fh;
		o->fileid = r.fileid;
		o->gone = false;
	}
}

/* Every saved handle resolves with its fileid, and so does every path
 * (but those the last version removed). */
static void all_kept(const char *event)
{
	size_t stale = 0, moved = 0;

	for (size_t i = 0; i < g.n; i++) {
		struct nfs_raw_obj a, l;

		if (g.objs[i].gone)
			continue;
		a = getattr(&g.objs[i].fh);
		l = walk(g.objs[i].path);
		if (a.status != NFS3_OK) {
			fprintf(stderr,
				"%s: %s: GETATTR %d (LOOKUP %d fileid %ju, was %ju)\n",
				event, g.objs[i].path, a.status, l.status,
				(uintmax_t)l.fileid, (uintmax_t)g.objs[i].fileid);
			stale++;
		} else if (a.fileid != g.objs[i].fileid || l.fileid != g.objs[i].fileid) {
			fprintf(stderr, "%s: %s: fileid %ju / %ju, was %ju\n", event,
				g.objs[i].path, (uintmax_t)a.fileid, (uintmax_t)l.fileid,
				(uintmax_t)g.objs[i].fileid);
			moved++;
		}
	}
	if (stale || moved)
		fail_msg("%s: %zu of %zu handles stale, %zu fileids changed", event,
			 stale, g.n, moved);
}

static bool seen_fileid(uint64_t id)
{
	for (size_t i = 0; i < g.n; i++)
		if (g.objs[i].fileid == id)
			return true;
	return false;
}

/* B<to>: a copy of B<from> with every 20th mutable file grown, the next
 * 20th removed, and a new file in each directory.  Marks the objects. */
static void new_version(int from, int to, bool *changed, size_t *nadded)
{
	size_t m = 0;

	run("cp -a %s %s", at("B%d", from), at("B%d", to));
	for (size_t i = 0; i < g.n; i++) {
		struct obj *o = &g.objs[i];

		changed[i] = false;
		if (!o->mutable || o->gone)
			continue;
		if (m % 20 == 3) {
			FILE *f = fopen(at("B%d/%s", to, o->path), "a");

			assert_non_null(f);
			fputs("grown\n", f);
			fclose(f);
			changed[i] = true;
		} else if (m % 20 == 11) {
			assert_int_equal(unlink(at("B%d/%s", to, o->path)), 0);
			o->gone = true;
		}
		m++;
	}
	*nadded = 0;
	for (int d = 0; d < NDIRS; d++, (*nadded)++)
		put(at("B%d/d%02d/new%d", to, d, to), "new\n");
}

/* The old handle of O (its file in B<FROM>, gone or changed since) is
 * served from the retired layer: the old bytes, size and fileid, read
 * only. */
static void retired_ok(const char *event, const struct obj *o, int from,
		       const struct nfs_raw_obj *a)
{
	char want[NFS_RAW_TEXT_MAX + 1];
	size_t n = slurp(at("B%d/%s", from, o->path), want);
	struct nfs_raw_text r = content_fh(&o->fh, o->kind);

	if (a->status != NFS3_OK || a->fileid != o->fileid || a->size != n)
		fail_msg("%s: old handle of %s: GETATTR %d fileid %ju size %ju, want "
			 "fileid %ju size %zu",
			 event, o->path, a->status, (uintmax_t)a->fileid,
			 (uintmax_t)a->size, (uintmax_t)o->fileid, n);
	if (r.status != NFS3_OK || r.count != n || memcmp(r.data, want, n))
		fail_msg("%s: old handle of %s: READ %d '%s', want '%s'", event, o->path,
			 r.status, r.data, want);
}

/* The current handle of O reads the file of the current version. */
static void new_bytes(const char *event, const struct obj *o)
{
	char want[NFS_RAW_TEXT_MAX + 1];
	size_t n = slurp(at("B%d/%s", g.version, o->path), want);
	struct nfs_raw_text r = content_fh(&o->fh, o->kind);

	if (r.status != NFS3_OK || r.count != n || memcmp(r.data, want, n))
		fail_msg("%s: new handle of %s: READ %d '%s', want '%s'", event, o->path,
			 r.status, r.data, want);
}

/* After the switch to B<to>: the checks of the reload and restart tests.
 * RETIRED_FROM: the version a reload retired (old handles of changed and
 * removed files read it), or -1: those handles are stale. */
static void version_checks(const char *event, const bool *changed, int retired_from)
{
	size_t kept = 0, nchanged = 0, ngone = 0, added = 0;
	char rel[64];

	for (size_t i = 0; i < g.n; i++) {
		struct obj *o = &g.objs[i];
		struct nfs_raw_obj a = getattr(&o->fh), l = walk(o->path);
		bool old_served = retired_from >= 0 && o->kind != K_DIR;

		if (o->gone) {
			if (old_served && l.status == NFS3ERR_NOENT)
				retired_ok(event, o, retired_from, &a);
			else if (a.status != NFS3ERR_STALE || l.status != NFS3ERR_NOENT)
				fail_msg("%s: removed %s: GETATTR %d, LOOKUP %d", event,
					 o->path, a.status, l.status);
			ngone++;
		} else if (changed[i]) {
			if (old_served)
				retired_ok(event, o, retired_from, &a);
			else if (a.status != NFS3ERR_STALE)
				fail_msg("%s: changed %s: old handle: GETATTR %d", event,
					 o->path, a.status);
			if (l.status != NFS3_OK || seen_fileid(l.fileid))
				fail_msg(
				    "%s: changed %s: GETATTR %d, LOOKUP %d fileid %ju "
				    "(was %ju)",
				    event, o->path, a.status, l.status,
				    (uintmax_t)l.fileid, (uintmax_t)o->fileid);
			g.old[i] = o->fh;
			g.had_old[i] = true;
			o->fh = l.fh;
			o->fileid = l.fileid;
			a = getattr(&o->fh);
			if (a.status != NFS3_OK || a.fileid != o->fileid)
				fail_msg("%s: changed %s: its new handle: GETATTR %d",
					 event, o->path, a.status);
			new_bytes(event, o);
			nchanged++;
		} else {
			if (a.status != NFS3_OK || a.fileid != o->fileid ||
			    l.fileid != o->fileid)
				fail_msg(
				    "%s: unchanged %s: GETATTR %d fileid %ju / %ju, was "
				    "%ju",
				    event, o->path, a.status, (uintmax_t)a.fileid,
				    (uintmax_t)l.fileid, (uintmax_t)o->fileid);
			kept++;
		}
	}
	for (int d = 0; d < NDIRS; d++, added++) {
		struct nfs_raw_obj r;

		snprintf(rel, sizeof(rel), "d%02d/new%d", d, g.version);
		r = walk(rel);
		if (r.status != NFS3_OK || seen_fileid(r.fileid))
			fail_msg("%s: added %s: status %d fileid %ju", event, rel,
				 r.status, (uintmax_t)r.fileid);
	}
	printf("%s: %zu kept, %zu changed, %zu removed, %zu added\n", event, kept,
	       nchanged, ngone, added);
	assert_true(nchanged > 0 && ngone > 0 && kept > g.n / 2);
}

/* Points symlink REL of B<version> at TARGET, and marks it changed. */
static void relink(const char *rel, const char *target, int version, bool *changed)
{
	assert_int_equal(unlink(at("B%d/%s", version, rel)), 0);
	assert_int_equal(symlink(target, at("B%d/%s", version, rel)), 0);
	for (size_t i = 0; i < g.n; i++)
		if (!strcmp(g.objs[i].path, rel))
			changed[i] = true;
}

/* Removes directory REL from B<version> and marks it and what it held. */
static void remove_dir(const char *rel, int version)
{
	size_t len = strlen(rel);

	run("rm -rf %s", at("B%d/%s", version, rel));
	for (size_t i = 0; i < g.n; i++)
		if (!strncmp(g.objs[i].path, rel, len) &&
		    (g.objs[i].path[len] == '\0' || g.objs[i].path[len] == '/'))
			g.objs[i].gone = true;
}

/* The old handles that read a retired layer answer NFS3ERR_ROFS to WRITE
 * and SETATTR, and stay unchanged; a removed directory's is stale. */
static void old_read_only(const char *event)
{
	size_t files = 0, dirs = 0;

	for (size_t i = 0; i < g.n; i++) {
		const struct obj *o = &g.objs[i];
		const struct fh *fh = g.had_old[i] ? &g.old[i] : o->gone ? &o->fh : NULL;
		int w, sa;

		if (!fh)
			continue;
		if (o->kind == K_DIR) {
			if (getattr(fh).status != NFS3ERR_STALE)
				fail_msg("%s: removed dir %s: not stale", event, o->path);
			dirs++;
			continue;
		}
		if (o->kind != K_FILE || files >= 4)
			continue;
		if (access_rm(fh) != ACCESS3_READ)
			fail_msg("%s: old handle of %s: ACCESS %#x, want READ alone",
				 event, o->path, access_rm(fh));
		w = write_text(fh, "new bytes\n");
		sa = nfs_raw_setattr_mode(g.nfs, fh, 0600);
		if (w != NFS3ERR_ROFS || sa != NFS3ERR_ROFS)
			fail_msg("%s: old handle of %s: WRITE %d SETATTR %d, want ROFS",
				 event, o->path, w, sa);
		files++;
	}
	printf("%s: %zu old handles read only, %zu removed dirs stale\n", event, files,
	       dirs);
	assert_true(files > 0 && dirs > 0);
}

/* Every old handle of a changed or removed object is stale. */
static void old_stale(const char *event)
{
	size_t n = 0;

	for (size_t i = 0; i < g.n; i++) {
		const struct fh *fh = g.had_old[i]     ? &g.old[i]
				      : g.objs[i].gone ? &g.objs[i].fh
						       : NULL;
		struct nfs_raw_obj a;

		if (!fh)
			continue;
		a = getattr(fh);
		if (a.status != NFS3ERR_STALE)
			fail_msg("%s: old handle of %s: GETATTR %d, want STALE", event,
				 g.objs[i].path, a.status);
		n++;
	}
	printf("%s: %zu old handles stale\n", event, n);
	assert_true(n > 0);
}

/* A reload that shortens retire-time below the age of the retired layer
 * DIR releases it at once, with no handle used. */
static void shorter_retire_time(const char *dir)
{
	double t0;

	if (!test_server_holds(&g.srv, dir))
		fail_msg("retired %s: not held by the server", dir);
	it_sleep_ms(1100);
	g.retire_time = 1;
	write_config(g.version, true);
	assert_int_equal(kill(g.srv.pid, SIGHUP), 0);
	for (t0 = it_now_s(); test_server_holds(&g.srv, dir); it_sleep_ms(20))
		if (it_now_s() - t0 > RELOAD_S)
			fail_msg("retire-time 1: %s still held", dir);
	g.retire_time = 0;
	write_config(g.version, true);
}

/* The layer indexes in DIR. */
static size_t indexes_in(const char *event, const char *dir)
{
	struct dirent *de;
	size_t n = 0, len;
	DIR *d;

	d = opendir(dir);
	if (!d)
		fail_msg("%s: %s: %s", event, dir, strerror(errno));
	while ((de = readdir(d)))
		n += (len = strlen(de->d_name)) > 3 &&
		     !strcmp(de->d_name + len - 3, ".lx");
	closedir(d);
	return n;
}

/* The layer indexes in the state dir: one a lower of the stack once
 * those of the layers that left it are swept (layerid.c rule 9).  The
 * sweep follows the release of a retired layer within the same reload, so
 * a test that saw the release waits for it, RELOAD_S at most. */
static void indexes_are_the_stacks(const char *event)
{
	char dir[sizeof(g.state) + 16];
	double t0 = it_now_s();
	size_t n;

	snprintf(dir, sizeof(dir), "%s/layers", g.state);
	while ((n = indexes_in(event, dir)) != 2 && it_now_s() - t0 < RELOAD_S)
		it_sleep_ms(20);
	if (n != 2)
		fail_msg("%s: %zu layer indexes in %s, want the stack's 2", event, n,
			 dir);
}

/* Forgets the objects the last version removed, and the old handles. */
static void compact(void)
{
	size_t k = 0;

	for (size_t i = 0; i < g.n; i++)
		if (!g.objs[i].gone)
			g.objs[k++] = g.objs[i];
	g.n = k;
	memset(g.had_old, 0, sizeof(g.had_old));
}

/* The switch from B<from> to B<to> by SIGHUP, once the server shows it. */
static void reload_to(int to)
{
	char rel[64];
	double t0;

	write_config(to, true);
	assert_int_equal(kill(g.srv.pid, SIGHUP), 0);
	snprintf(rel, sizeof(rel), "d00/new%d", to);
	for (t0 = it_now_s(); walk(rel).status != NFS3_OK; it_sleep_ms(20))
		if (it_now_s() - t0 > RELOAD_S)
			fail_msg("reload: %s never appeared", rel);
}

/* Saves the handles of the objects CHANGED marks as old ones. */
static void save_old(const bool *changed)
{
	for (size_t i = 0; i < g.n; i++) {
		g.had_old[i] = changed[i];
		if (changed[i])
			g.old[i] = g.objs[i].fh;
	}
}

/* ---- tests ---- */

static void test_copy(void **state)
{
	struct nfs_raw_obj r;

	(void)state;
	/* a copy-up through the server, before any handle is taken */
	r = walk("d00/f00");
	assert_int_equal(r.status, NFS3_OK);
	assert_int_equal(write_text(&r.fh, "copied up\n"), NFS3_OK);
	assert_int_equal(walk("d03/f06").status, NFS3ERR_NOENT);
	take_all();
	stop();
	run("cp -a %s %s", at("B0"), at("B1"));
	write_config(1, true);
	start(NULL);
	all_kept("copy");
}

static void test_reload(void **state)
{
	bool changed[OBJS_MAX];
	size_t nadded;
	char rel[64];
	double t0;

	(void)state;
	new_version(1, 2, changed, &nadded);
	relink("d10/s", "f01", 2, changed);
	remove_dir("d11/sub", 2);
	memset(g.had_old, 0, sizeof(g.had_old));
	write_config(2, true);
	assert_int_equal(kill(g.srv.pid, SIGHUP), 0);
	snprintf(rel, sizeof(rel), "d00/new%d", 2);
	for (t0 = it_now_s(); walk(rel).status != NFS3_OK; it_sleep_ms(50))
		if (it_now_s() - t0 > RELOAD_S)
			fail_msg("reload: %s never appeared", rel);
	version_checks("reload", changed, 1);
	old_read_only("reload");
	shorter_retire_time(at("B1"));
	indexes_are_the_stacks("retired layer released");
	/* a restart on the same config changes nothing, and retires nothing */
	stop();
	start(NULL);
	all_kept("restart after reload");
	old_stale("restart after reload");
	indexes_are_the_stacks("restart after reload");
}

static void test_restart(void **state)
{
	bool changed[OBJS_MAX];
	size_t nadded;

	(void)state;
	new_version(2, 3, changed, &nadded);
	stop();
	write_config(3, true);
	start(NULL);
	version_checks("restart", changed, -1);
}

static void test_same_path(void **state)
{
	(void)state;
	stop();
	run("mv %s %s && cp -a %s %s", at("B3"), at("B3.old"), at("B3.old"), at("B3"));
	start(NULL);
	all_kept("same path");
}

static void test_upgrade(void **state)
{
	(void)state;
	stop();
	/* a new state dir, written without indexes */
	snprintf(g.state, sizeof(g.state), "%s/state-old", g.tmp);
	write_config(3, false);
	start(NULL);
	for (size_t i = 0; i < g.n; i++)
		g.objs[i].gone = walk(g.objs[i].path).status == NFS3ERR_NOENT;
	{
		size_t k = 0;

		for (size_t i = 0; i < g.n; i++)
			if (!g.objs[i].gone)
				g.objs[k++] = g.objs[i];
		g.n = k;
	}
	take_all();
	stop();
	write_config(3, true);
	start(NULL);
	all_kept("upgrade");
	stop();
	write_config(3, false);
	start("--no-layer-index");
	all_kept("downgrade");
}

/* A layer whose directory is gone before the reload that replaces it is
 * not retired: its old handles are stale, and the server goes on. */
static void test_retire_gone_dir(void **state)
{
	bool changed[OBJS_MAX];
	size_t nadded;

	(void)state;
	stop();
	write_config(3, true);
	start(NULL);
	compact();
	take_all();
	new_version(3, 4, changed, &nadded);
	save_old(changed);
	run("rm -rf %s", at("B3"));
	reload_to(4);
	old_stale("gone dir");
	assert_int_equal(getattr(&g.root).status, NFS3_OK);
}

/* With retire-time, a retired layer serves until that time has passed,
 * then its handles are stale. */
static void test_retire_time(void **state)
{
	bool changed[OBJS_MAX];
	size_t nadded, served = 0;
	double t0;

	(void)state;
	stop();
	start("--retire-time=2");
	compact();
	take_all();
	new_version(4, 5, changed, &nadded);
	save_old(changed);
	t0 = it_now_s();
	reload_to(5);
	for (size_t i = 0; i < g.n && it_now_s() - t0 < 1.5; i++) {
		struct obj o = g.objs[i];

		if (!g.had_old[i] || o.kind != K_FILE)
			continue;
		o.fh = g.old[i];
		{
			struct nfs_raw_obj a = getattr(&o.fh);

			retired_ok("retire-time", &o, 4, &a);
		}
		served++;
	}
	printf("retire-time: %zu old handles served in %.2f s\n", served,
	       it_now_s() - t0);
	assert_true(served > 0);
	it_sleep_ms((long)((t0 + 3.0 - it_now_s()) * 1000) + 1);
	old_stale("retire-time");
}

/* ---- set-up ---- */

static int group_setup(void **state)
{
	(void)state;
	if (it_tmp_layers(g.tmp, sizeof(g.tmp), TMP_PREFIX "XXXXXX") < 0) {
		perror("temp dir");
		return -1;
	}
	make_layers();
	snprintf(g.state, sizeof(g.state), "%s/state", g.tmp);
	snprintf(g.conf, sizeof(g.conf), "%s/union-nfsd.conf", g.tmp);
	snprintf(g.config_arg, sizeof(g.config_arg), "--config=%s", g.conf);
	write_config(0, true);
	start(NULL);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	test_server_stop(&g.srv);
	test_tmp_remove(g.tmp, TMP_PREFIX);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_copy),	cmocka_unit_test(test_reload),
	    cmocka_unit_test(test_restart),	cmocka_unit_test(test_same_path),
	    cmocka_unit_test(test_upgrade),	cmocka_unit_test(test_retire_gone_dir),
	    cmocka_unit_test(test_retire_time),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	g.bin = argv[1];
	g.srv.pid = -1;
	return cmocka_run_group_tests_name("integration/layer_swap", tests, group_setup,
					   group_teardown);
}
