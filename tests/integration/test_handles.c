/* SPDX-License-Identifier: Apache-2.0 */
/* test_handles - the handle and fileid promises of issue 4, through libnfs' raw
 * NFSv3 calls, keeping raw handles across events.
 *
 *   test_handles UNION_NFSD
 *
 * Builds a writable union in a temp dir (two lower layers, an upper and a work
 * dir) and a second, read-only export over a layer of its own, writes a config
 * file with both [export] sections, starts UNION_NFSD on it, and checks, with
 * the handles and fileids saved before each event:
 *
 *   durable     a LOOKUP of a name never seen before, then SIGKILL at once and
 *               a restart: the handle of that reply resolves (the node was in a
 *               committed table transaction before the reply left);
 *   restart     SIGKILL + restart on the same state dir: GETATTR (and READ, or
 *               READDIRPLUS for directories) through the saved handles of a
 *               lower file, an upper file, a merged directory, a deep merged
 *               directory and the root; fileids unchanged;
 *   copyup      a second client looks a lower file up from the export root and
 *               WRITEs it (the copy-up); the handle the first client saved from
 *               a READDIRPLUS still resolves, READ shows the new bytes, same
 *               fileid;
 *   rename      rename of a lower file (copy-up and move) and of a pure-upper
 *               directory holding a subtree: the saved handles of the file and
 *               of everything below the directory resolve, fileids unchanged;
 *               renaming a merged directory answers XDEV;
 *   remove      REMOVE of a lower and of an upper file: the saved handles
 *               answer STALE, also once a new file has the same name (which
 *               gets a new fileid), and after a restart;
 *   hardlinks   a pair of names of one inode in a lower layer, one in the
 *               upper, one made by LINK: one fileid per pair and the right
 *               nlink, in LOOKUP and in READDIRPLUS (entry fileid and
 *               attributes); then a WRITE through one name of the lower pair
 *               copies that name up alone (overlayfs without its index): it
 *               keeps its handle and fileid, the other name's old handle is
 *               STALE and a LOOKUP gives it a new fileid and the old bytes;
 *   lowerchange an administrator changes a lower layer under the running
 *               server: an added file is found by the next LOOKUP, a removed
 *               one is NOENT and its saved handle STALE, a file added in a
 *               higher layer over a lower one shows at once (the old handle is
 *               STALE: that name is another file now);
 *   badhandles every byte of a handle changed (three ways each), shorter and
 *               longer handles: BADHANDLE or STALE, never another object, and
 *               the server keeps serving; a handle of the other export (see
 *               test_cross_export for why it names that export's object); a
 *               handle whose export id was changed: BADHANDLE;
 *   wiped       a restart with an emptied state dir: every saved handle is
 *               BADHANDLE or STALE;
 *   clean exit  SIGTERM ends the server with status 0.
 *
 * The server is stopped by pid and the temp dir removed also when a test fails
 * (group teardown; the server has PR_SET_PDEATHSIG should this process die).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nfs_raw.h"
#include "start_server.h"

#define RDP_MAX 64 /* entries kept from one READDIRPLUS */

/* One object the tests keep: where it is, its handle and fileid. */
struct saved {
	const char *what;
	struct fh fh;
	uint64_t fileid;
	const char *data; /* a regular file's bytes, NULL for others */
};

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	char state[PATH_MAX + 16];
	char config_arg[PATH_MAX + 32];
	struct test_server srv;
	struct rpc_context *nfs;
	struct fh root, root_b;
	/* test_restart's objects, checked again after every restart */
	struct saved lowerf, upperf, merged, deep, rootdir, fresh;
} g;

/* ---- calls (nfs_raw.h makes them synchronous) ---- */

/* The root handle of export PATH. */
static struct fh mnt(const char *path)
{
	struct fh root;
	int status = nfs_raw_mnt(g.srv.mount_port, path, &root);
	if (status != MNT3_OK || root.len == 0)
		fail_msg("MNT %s: status %d", path, status);
	return root;
}

static struct nfs_raw_obj getattr(const struct fh *fh)
{
	return nfs_raw_getattr(g.nfs, fh);
}

/* LOOKUP of NAME in DIR, which must succeed with attributes. */
static struct nfs_raw_obj lookup_ok(const struct fh *dir, const char *name)
{
	struct nfs_raw_obj o = nfs_raw_lookup(g.nfs, dir, name);
	if (o.status != NFS3_OK || !o.attrs)
		fail_msg("LOOKUP %s: status %d", name, o.status);
	return o;
}

/* LOOKUP of every component of PATH from DIR, which must succeed. */
static struct nfs_raw_obj walk_on(struct rpc_context *rpc, const struct fh *dir,
				  const char *path)
{
	struct nfs_raw_obj o = nfs_raw_walk(rpc, dir, path);
	if (o.status != NFS3_OK)
		fail_msg("LOOKUP of %s: status %d", path, o.status);
	return o;
}

static struct nfs_raw_obj walk(const char *path)
{
	return walk_on(g.nfs, &g.root, path);
}

/* WRITE of TEXT at offset 0 through FH on RPC (FILE_SYNC); the status. */
static int write_on(struct rpc_context *rpc, const struct fh *fh, const char *text)
{
	return nfs_raw_write(rpc, fh, 0, text, (uint32_t)strlen(text));
}

/* The bytes behind FH, which must be WANT. */
static void read_is(const struct fh *fh, const char *want, const char *what)
{
	struct nfs_raw_text r = nfs_raw_read_text(g.nfs, fh);
	if (r.status != NFS3_OK)
		fail_msg("READ %s: status %d", what, r.status);
	if (r.count != strlen(want) || memcmp(r.data, want, r.count) || !r.eof)
		fail_msg("READ %s: '%s', want '%s'", what, r.data, want);
}

static void keep_create(void *data, void *out)
{
	CREATE3res *r = data;
	struct nfs_raw_obj *o = out;
	o->status = r->status;
	if (r->status != NFS3_OK || !r->CREATE3res_u.resok.obj.handle_follows)
		return;
	nfs_raw_copy_fh(&o->fh, &r->CREATE3res_u.resok.obj.post_op_fh3_u.handle);
	nfs_raw_keep_attrs(o, &r->CREATE3res_u.resok.obj_attributes);
}

/* CREATE (GUARDED, 0644) of DIR/NAME with TEXT written into it. */
static struct nfs_raw_obj create_ok(const struct fh *dir, const char *name,
				    const char *text)
{
	CREATE3args a;
	struct nfs_raw_obj o = {0};
	struct call c = {.keep = keep_create, .out = &o};
	memset(&a, 0, sizeof(a));
	a.where.dir = nfs_raw_fh3(dir);
	a.where.name = (char *)name;
	a.how.mode = GUARDED;
	a.how.createhow3_u.obj_attributes.mode.set_it = 1;
	a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_create_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	if (o.status != NFS3_OK || o.fh.len == 0 || !o.attrs)
		fail_msg("CREATE %s: status %d", name, o.status);
	if (*text)
		assert_int_equal(write_on(g.nfs, &o.fh, text), NFS3_OK);
	return o;
}

static struct nfs_raw_obj mkdir_ok(const struct fh *dir, const char *name)
{
	struct nfs_raw_obj o = nfs_raw_mkdir(g.nfs, dir, name);

	if (o.status != NFS3_OK || o.fh.len == 0 || !o.attrs)
		fail_msg("MKDIR %s: status %d", name, o.status);
	return o;
}

static int rename_st(const struct fh *fdir, const char *fname, const struct fh *tdir,
		     const char *tname)
{
	int st = nfs_raw_rename(g.nfs, fdir, fname, tdir, tname);

	assert_int_not_equal(st, -1); /* no answer */
	return st;
}

static int remove_st(const struct fh *dir, const char *name)
{
	REMOVE3args a = {.object = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	int st = -1;
	struct call c = {.keep = nfs_raw_keep_status, .out = &st};
	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_remove_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	return st;
}

static int link_st(const struct fh *file, const struct fh *dir, const char *name)
{
	int st = nfs_raw_link(g.nfs, file, dir, name);

	assert_int_not_equal(st, -1); /* no answer */
	return st;
}

/* One READDIRPLUS entry as the tests look at it. */
struct rdp_ent {
	char name[64];
	uint64_t fileid;
	struct nfs_raw_obj obj; /* name_attributes and name_handle */
};

struct rdp {
	int status;
	size_t n;
	bool eof;
	uint64_t cookie;
	cookieverf3 verf;
	struct rdp_ent e[RDP_MAX];
};

static void keep_rdp(void *data, void *out)
{
	READDIRPLUS3res *r = data;
	struct rdp *o = out;
	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	memcpy(o->verf, r->READDIRPLUS3res_u.resok.cookieverf, sizeof(o->verf));
	o->eof = r->READDIRPLUS3res_u.resok.reply.eof;
	for (entryplus3 *e = r->READDIRPLUS3res_u.resok.reply.entries; e;
	     e = e->nextentry) {
		struct rdp_ent *x = &o->e[o->n];
		o->cookie = e->cookie;
		if (o->n == RDP_MAX)
			continue;
		snprintf(x->name, sizeof(x->name), "%s", e->name);
		x->fileid = e->fileid;
		memset(&x->obj, 0, sizeof(x->obj));
		nfs_raw_keep_attrs(&x->obj, &e->name_attributes);
		if (e->name_handle.handle_follows)
			nfs_raw_copy_fh(&x->obj.fh, &e->name_handle.post_op_fh3_u.handle);
		o->n++;
	}
}

/* READDIRPLUS of all of DIR (small directories: one or a few pages). */
static struct rdp *readdirplus(const struct fh *dir)
{
	struct rdp *o = calloc(1, sizeof(*o));
	assert_non_null(o);
	do {
		READDIRPLUS3args a = {.dir = nfs_raw_fh3(dir),
				      .cookie = o->cookie,
				      .dircount = 4096,
				      .maxcount = 32768};
		struct call c = {.keep = keep_rdp, .out = o};
		memcpy(a.cookieverf, o->verf, sizeof(a.cookieverf));
		assert_int_equal(nfs_raw_finish(g.nfs, &c,
						rpc_nfs3_readdirplus_async(
						    g.nfs, nfs_raw_on_reply, &a, &c)),
				 0);
		if (o->status != NFS3_OK)
			break;
	} while (!o->eof);
	return o;
}

static const struct rdp_ent *rdp_find(const struct rdp *r, const char *name)
{
	for (size_t i = 0; i < r->n; i++)
		if (!strcmp(r->e[i].name, name))
			return &r->e[i];
	fail_msg("READDIRPLUS: no entry %s", name);
	return NULL;
}

/* ---- checks of saved objects ---- */

static void save(struct saved *s, const char *what, const struct nfs_raw_obj *o,
		 const char *data)
{
	s->what = what;
	s->fh = o->fh;
	s->fileid = o->fileid;
	s->data = data;
}

/* S's handle still names S: GETATTR answers its fileid, and READ its bytes
 * (a directory: READDIRPLUS answers). */
static void check_saved(const struct saved *s, const char *event)
{
	struct nfs_raw_obj a = getattr(&s->fh);
	if (a.status != NFS3_OK)
		fail_msg("%s after %s: GETATTR status %d", s->what, event, a.status);
	if (a.fileid != s->fileid)
		fail_msg("%s after %s: fileid %" PRIu64 ", was %" PRIu64, s->what, event,
			 a.fileid, s->fileid);
	if (s->data) {
		read_is(&s->fh, s->data, s->what);
	} else if (a.type == NF3DIR) {
		struct rdp *r = readdirplus(&s->fh);
		int st = r->status;
		free(r);
		if (st != NFS3_OK)
			fail_msg("%s after %s: READDIRPLUS status %d", s->what, event,
				 st);
	}
}

/* FH answers STALE (or BADHANDLE where ALSO_BAD) to GETATTR and READ. */
static void check_gone(const struct fh *fh, const char *what, bool also_bad)
{
	struct nfs_raw_obj a = getattr(fh);
	struct nfs_raw_text r = nfs_raw_read_text(g.nfs, fh);
	bool ok_a =
	    a.status == NFS3ERR_STALE || (also_bad && a.status == NFS3ERR_BADHANDLE);
	bool ok_r =
	    r.status == NFS3ERR_STALE || (also_bad && r.status == NFS3ERR_BADHANDLE);
	if (!ok_a || !ok_r)
		fail_msg("%s: GETATTR status %d, READ status %d, want STALE%s", what,
			 a.status, r.status, also_bad ? " or BADHANDLE" : "");
}

/* ---- the union and the server ---- */

static void mkdirs(const char *rel);

/* Writes TEXT into the new file REL (its directories made as needed). */
static void put(const char *rel, const char *text)
{
	char p[PATH_MAX + 64], dir[PATH_MAX];
	const char *slash = strrchr(rel, '/');
	int fd;
	if (slash) {
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - rel), rel);
		mkdirs(dir);
	}
	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) ||
	    close(fd)) {
		perror(p);
		exit(1);
	}
}

static void mkdirs(const char *rel)
{
	char p[PATH_MAX + 64], *s;
	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	for (s = p + strlen(g.tmp) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		mkdir(p, 0755);
		*s = '/';
	}
	if (mkdir(p, 0755) && errno != EEXIST) {
		perror(p);
		exit(1);
	}
}

static void hardlink(const char *from, const char *to)
{
	char a[PATH_MAX + 64], b[PATH_MAX + 64];
	snprintf(a, sizeof(a), "%s/%s", g.tmp, from);
	snprintf(b, sizeof(b), "%s/%s", g.tmp, to);
	if (link(a, b)) {
		perror(b);
		exit(1);
	}
}

static void rm(const char *rel)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	if (unlink(p)) {
		perror(p);
		exit(1);
	}
}

static bool exists(const char *rel)
{
	char p[PATH_MAX + 64];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	return lstat(p, &st) == 0;
}

/* Export "/" is l1:l2 under upper u (work dir w); export "/b" is lb alone. */
static void make_union(void)
{
	char conf[PATH_MAX + 16];
	FILE *f;
	snprintf(g.tmp, sizeof(g.tmp), "/tmp/union-nfsd-handles.XXXXXX");
	if (!mkdtemp(g.tmp)) {
		perror("mkdtemp");
		exit(1);
	}
	mkdirs("u");
	mkdirs("w");
	put("l2/lower.txt", "a lower file\n");
	put("u/upper.txt", "an upper file\n");
	put("l1/merged/top.txt", "top\n");
	put("l2/merged/bottom.txt", "bottom\n");
	put("l2/merged/gone.txt", "removed by the administrator\n");
	put("l2/merged/shadow.txt", "the lower shadow.txt\n");
	mkdirs("l1/deep/a/b/c");
	put("l2/deep/a/b/c/leaf.txt", "a deep leaf\n");
	put("l2/fresh.txt", "never looked up before the kill\n");
	put("l2/cu/victim.txt", "before the copy-up\n");
	put("l2/mv/file.txt", "moved\n");
	mkdirs("l1/mv");
	put("l2/rm/lower.txt", "removed lower\n");
	put("l2/hl/p1", "lower pair\n");
	hardlink("l2/hl/p1", "l2/hl/p2");
	put("u/uh/q1", "upper pair\n");
	hardlink("u/uh/q1", "u/uh/q2");
	put("lb/only-b.txt", "export b's file\n");

	snprintf(g.state, sizeof(g.state), "%s/state", g.tmp);
	snprintf(conf, sizeof(conf), "%s/union-nfsd.conf", g.tmp);
	f = fopen(conf, "w");
	if (!f) {
		perror(conf);
		exit(1);
	}
	fprintf(f,
		"[export]\npath = /\nlowerdir = %s/l1:%s/l2\nupperdir = %s/u\n"
		"workdir = %s/w\n\n[export]\npath = /b\nlowerdir = %s/lb\n",
		g.tmp, g.tmp, g.tmp, g.tmp, g.tmp);
	fclose(f);
	snprintf(g.config_arg, sizeof(g.config_arg), "--config=%s", conf);
}

static int start(void)
{
	const char *args[] = {g.config_arg, NULL};
	if (test_server_start(g.bin, g.state, args, &g.srv))
		return -1;
	g.nfs = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	return g.nfs ? 0 : -1;
}

static void disconnect(void)
{
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	g.nfs = NULL;
}

/* SIGKILL (no chance to flush or close anything), then the same command. */
static void kill_restart(void)
{
	int st;
	disconnect();
	assert_int_equal(kill(g.srv.pid, SIGKILL), 0);
	assert_int_equal(waitpid(g.srv.pid, &st, 0), g.srv.pid);
	g.srv.pid = -1;
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	assert_int_equal(start(), 0);
}

static int group_setup(void **state)
{
	(void)state;
	make_union();
	if (start())
		return -1;
	g.root = mnt("/");
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	disconnect();
	test_server_stop(&g.srv);
	test_tmp_remove(g.tmp, "/tmp/union-nfsd-handles.");
	return 0;
}

static void check_all_saved(const char *event)
{
	check_saved(&g.rootdir, event);
	check_saved(&g.lowerf, event);
	check_saved(&g.upperf, event);
	check_saved(&g.merged, event);
	check_saved(&g.deep, event);
	check_saved(&g.fresh, event);
}

/* ---- the tests ---- */

/* A LOOKUP reply's handle survives a SIGKILL right after it. */
static void test_durable_lookup(void **state)
{
	struct nfs_raw_obj o, root = getattr(&g.root);
	(void)state;
	assert_int_equal(root.status, NFS3_OK);
	save(&g.rootdir, "the root", &root, NULL);
	o = lookup_ok(&g.root, "fresh.txt");
	save(&g.fresh, "fresh.txt (looked up just before the kill)", &o,
	     "never looked up before the kill\n");
	kill_restart();
	check_saved(&g.fresh, "SIGKILL right after its LOOKUP");
}

/* (a) SIGKILL + restart: every kind of object keeps handle and fileid. */
static void test_restart(void **state)
{
	struct nfs_raw_obj o;
	(void)state;
	o = lookup_ok(&g.root, "lower.txt");
	save(&g.lowerf, "lower.txt", &o, "a lower file\n");
	o = lookup_ok(&g.root, "upper.txt");
	save(&g.upperf, "upper.txt", &o, "an upper file\n");
	o = lookup_ok(&g.root, "merged");
	save(&g.merged, "merged/", &o, NULL);
	o = walk("deep/a/b/c");
	save(&g.deep, "deep/a/b/c/", &o, NULL);
	check_all_saved("the first lookups");
	kill_restart();
	check_all_saved("SIGKILL + restart");
	/* the handles still match the names */
	assert_int_equal(walk("deep/a/b/c").fileid, g.deep.fileid);
	assert_int_equal(lookup_ok(&g.root, "lower.txt").fileid, g.lowerf.fileid);
}

/* (b) a copy-up by a WRITE through another client's handle. */
static void test_copyup(void **state)
{
	struct rpc_context *other;
	struct nfs_raw_obj cu = lookup_ok(&g.root, "cu"), o, viaother;
	struct rdp *r = readdirplus(&cu.fh);
	const struct rdp_ent *e;
	struct fh other_root;
	struct saved v;
	(void)state;
	assert_int_equal(r->status, NFS3_OK);
	e = rdp_find(r, "victim.txt");
	assert_true(e->obj.fh.len > 0 && e->obj.attrs);
	assert_int_equal(e->fileid, e->obj.fileid);
	save(&v, "cu/victim.txt (from READDIRPLUS)", &e->obj, "before the copy-up\n");
	free(r);
	check_saved(&v, "READDIRPLUS");

	/* the other client: its own MNT, its own walk from the root */
	other_root = mnt("/");
	other = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	assert_non_null(other);
	viaother = walk_on(other, &other_root, "cu/victim.txt");
	assert_int_equal(viaother.fileid, v.fileid);
	assert_int_equal(write_on(other, &viaother.fh, "AFTER"), NFS3_OK);
	rpc_destroy_context(other);
	assert_true(exists("u/cu/victim.txt"));

	v.data = "AFTERe the copy-up\n";
	check_saved(&v, "the copy-up by another client");
	o = walk("cu/victim.txt");
	assert_int_equal(o.fileid, v.fileid);
	kill_restart();
	check_saved(&v, "the copy-up and a restart");
}

/* (c) renames of a file and of a directory with a subtree. */
static void test_rename(void **state)
{
	struct nfs_raw_obj mv = lookup_ok(&g.root, "mv"), d, sub, subsub, f, g1, o;
	struct saved file, sd[4];
	(void)state;
	/* a lower file: copied up and moved, first within its directory, then
	 * into another one */
	o = lookup_ok(&mv.fh, "file.txt");
	save(&file, "mv/file.txt", &o, "moved\n");
	assert_int_equal(rename_st(&mv.fh, "file.txt", &mv.fh, "renamed.txt"), NFS3_OK);
	check_saved(&file, "a rename in its directory");
	assert_int_equal(rename_st(&mv.fh, "renamed.txt", &g.root, "moved.txt"), NFS3_OK);
	check_saved(&file, "a rename into another directory");
	assert_int_equal(lookup_ok(&g.root, "moved.txt").fileid, file.fileid);
	assert_int_equal(nfs_raw_lookup(g.nfs, &mv.fh, "file.txt").status, NFS3ERR_NOENT);

	/* a pure-upper directory with a subtree */
	d = mkdir_ok(&g.root, "ren");
	sub = mkdir_ok(&d.fh, "sub");
	subsub = mkdir_ok(&sub.fh, "subsub");
	f = create_ok(&subsub.fh, "f.txt", "deep in a moved tree\n");
	g1 = create_ok(&d.fh, "g.txt", "near the top\n");
	save(&sd[0], "ren/", &d, NULL);
	save(&sd[1], "ren/sub/", &sub, NULL);
	save(&sd[2], "ren/sub/subsub/f.txt", &f, "deep in a moved tree\n");
	save(&sd[3], "ren/g.txt", &g1, "near the top\n");
	assert_int_equal(rename_st(&g.root, "ren", &g.root, "ren2"), NFS3_OK);
	for (int i = 0; i < 4; i++)
		check_saved(&sd[i], "the rename of ren to ren2");
	/* and into another directory */
	assert_int_equal(rename_st(&g.root, "ren2", &g.deep.fh, "ren3"), NFS3_OK);
	for (int i = 0; i < 4; i++)
		check_saved(&sd[i], "the rename of ren2 into deep/a/b/c");
	assert_int_equal(walk("deep/a/b/c/ren3/sub/subsub/f.txt").fileid, f.fileid);
	kill_restart();
	for (int i = 0; i < 4; i++)
		check_saved(&sd[i], "the renames and a restart");
	check_saved(&file, "the renames and a restart");

	/* a merged directory does not move: overlayfs without redirect_dir */
	assert_int_equal(rename_st(&g.root, "merged", &g.root, "merged2"), NFS3ERR_XDEV);
	check_saved(&g.merged, "a refused rename");
}

/* (d) removal: STALE, also once a new file has the name, also after a
 * restart. */
static void test_remove(void **state)
{
	struct nfs_raw_obj rmd = lookup_ok(&g.root, "rm"), lo, up, again;
	(void)state;
	lo = lookup_ok(&rmd.fh, "lower.txt");
	up = create_ok(&rmd.fh, "upper.txt", "removed upper\n");
	assert_int_equal(remove_st(&rmd.fh, "lower.txt"), NFS3_OK);
	assert_int_equal(remove_st(&rmd.fh, "upper.txt"), NFS3_OK);
	check_gone(&lo.fh, "a removed lower file", false);
	check_gone(&up.fh, "a removed upper file", false);
	assert_int_equal(nfs_raw_lookup(g.nfs, &rmd.fh, "lower.txt").status,
			 NFS3ERR_NOENT);

	again = create_ok(&rmd.fh, "lower.txt", "a new file under the old name\n");
	assert_int_not_equal(again.fileid, lo.fileid);
	assert_int_not_equal(again.fileid, up.fileid);
	check_gone(&lo.fh, "a removed lower file, its name taken again", false);
	again = create_ok(&rmd.fh, "upper.txt", "another new file\n");
	assert_int_not_equal(again.fileid, up.fileid);
	check_gone(&up.fh, "a removed upper file, its name taken again", false);

	kill_restart();
	check_gone(&lo.fh, "a removed lower file, after a restart", false);
	check_gone(&up.fh, "a removed upper file, after a restart", false);
	assert_int_equal(lookup_ok(&rmd.fh, "upper.txt").fileid, again.fileid);
}

/* Both names of a pair report one fileid and nlink NLINK, in LOOKUP and in
 * READDIRPLUS (the entry's fileid and its attributes). */
static void check_pair(const struct fh *dir, const char *n1, const char *n2,
		       uint32_t nlink)
{
	struct nfs_raw_obj a = lookup_ok(dir, n1), b = lookup_ok(dir, n2);
	struct rdp *r = readdirplus(dir);
	const struct rdp_ent *e1, *e2;
	if (a.fileid != b.fileid || a.nlink != nlink || b.nlink != nlink)
		fail_msg("LOOKUP %s, %s: fileids %" PRIu64 ", %" PRIu64 ", nlink %u, %u",
			 n1, n2, a.fileid, b.fileid, a.nlink, b.nlink);
	assert_int_equal(r->status, NFS3_OK);
	e1 = rdp_find(r, n1);
	e2 = rdp_find(r, n2);
	if (e1->fileid != a.fileid || e2->fileid != a.fileid ||
	    e1->obj.fileid != a.fileid || e2->obj.fileid != a.fileid ||
	    e1->obj.nlink != nlink || e2->obj.nlink != nlink)
		fail_msg("READDIRPLUS %s, %s: entry fileids %" PRIu64 ", %" PRIu64
			 ", attribute fileids %" PRIu64 ", %" PRIu64
			 ", nlink %u, %u; LOOKUP said %" PRIu64,
			 n1, n2, e1->fileid, e2->fileid, e1->obj.fileid, e2->obj.fileid,
			 e1->obj.nlink, e2->obj.nlink, a.fileid);
	free(r);
}

/* (f) hard links: a lower pair, an upper pair, a pair made by LINK; then a
 * WRITE through one name of the lower pair parts it. */
static void test_hardlinks(void **state)
{
	struct nfs_raw_obj hl = lookup_ok(&g.root, "hl"), uh = lookup_ok(&g.root, "uh");
	struct nfs_raw_obj p1, p2, r1, p1new;
	struct rdp *r;
	(void)state;
	check_pair(&hl.fh, "p1", "p2", 2);
	check_pair(&uh.fh, "q1", "q2", 2);
	r1 = create_ok(&uh.fh, "r1", "linked by LINK\n");
	assert_int_equal(link_st(&r1.fh, &uh.fh, "r2"), NFS3_OK);
	check_pair(&uh.fh, "r1", "r2", 2);
	assert_int_equal(getattr(&r1.fh).fileid, r1.fileid);
	/* LINK of a lower file with one name: copied up, then linked */
	assert_int_equal(link_st(&g.lowerf.fh, &g.root, "lower-link.txt"), NFS3_OK);
	check_pair(&g.root, "lower.txt", "lower-link.txt", 2);
	assert_int_equal(lookup_ok(&g.root, "lower-link.txt").fileid, g.lowerf.fileid);
	check_saved(&g.lowerf, "a LINK to it");

	/* the lower pair across a restart */
	p1 = lookup_ok(&hl.fh, "p1");
	p2 = lookup_ok(&hl.fh, "p2");
	kill_restart();
	check_pair(&hl.fh, "p1", "p2", 2);
	assert_int_equal(getattr(&p1.fh).fileid, p1.fileid);
	assert_int_equal(getattr(&p2.fh).fileid, p1.fileid);

	/* A WRITE through p2 copies p2 up alone, as overlayfs without its index
	 * does: p2 keeps its handle and fileid; p1 stays the lower file, now a
	 * file of its own - its old handle is stale (the one fileid that
	 * changes: the link is gone on disk) and a LOOKUP gives a new one. */
	assert_int_equal(write_on(g.nfs, &p2.fh, "LOWER"), NFS3_OK);
	assert_true(exists("u/hl/p2") && !exists("u/hl/p1"));
	read_is(&p2.fh, "LOWER pair\n", "p2 after its copy-up");
	assert_int_equal(getattr(&p2.fh).fileid, p2.fileid);
	assert_int_equal(getattr(&p2.fh).nlink, 1);
	check_gone(&p1.fh, "p1's handle after p2's copy-up", false);
	p1new = lookup_ok(&hl.fh, "p1");
	assert_int_not_equal(p1new.fileid, p1.fileid);
	assert_int_equal(p1new.nlink, 2); /* the lower file, as overlayfs shows it */
	read_is(&p1new.fh, "lower pair\n", "p1 after p2's copy-up");
	r = readdirplus(&hl.fh);
	assert_int_equal(rdp_find(r, "p1")->fileid, p1new.fileid);
	assert_int_equal(rdp_find(r, "p2")->fileid, p2.fileid);
	free(r);
	kill_restart();
	assert_int_equal(getattr(&p1new.fh).fileid, p1new.fileid);
	assert_int_equal(getattr(&p2.fh).fileid, p2.fileid);
}

/* (h) an administrator changes lower layers while the server runs. */
static void test_lower_change(void **state)
{
	struct nfs_raw_obj merged = lookup_ok(&g.root, "merged"), gone, shadow, o;
	struct rdp *r;
	(void)state;
	gone = lookup_ok(&merged.fh, "gone.txt");
	shadow = lookup_ok(&merged.fh, "shadow.txt");
	assert_int_equal(nfs_raw_lookup(g.nfs, &merged.fh, "added.txt").status,
			 NFS3ERR_NOENT);
	r = readdirplus(&merged.fh); /* a listing built before the changes */
	free(r);

	put("l2/merged/added.txt", "added by the administrator\n");
	rm("l2/merged/gone.txt");
	put("l1/merged/shadow.txt", "the new top shadow.txt\n");

	o = lookup_ok(&merged.fh, "added.txt");
	read_is(&o.fh, "added by the administrator\n", "a file added to a lower layer");
	assert_int_equal(nfs_raw_lookup(g.nfs, &merged.fh, "gone.txt").status,
			 NFS3ERR_NOENT);
	check_gone(&gone.fh, "a file removed from a lower layer", false);
	o = lookup_ok(&merged.fh, "shadow.txt");
	read_is(&o.fh, "the new top shadow.txt\n", "a file shadowed in a higher layer");
	assert_int_not_equal(o.fileid, shadow.fileid);
	check_gone(&shadow.fh, "a file shadowed in a higher layer", false);
	/* the listing shows the changes too (a new directory version) */
	r = readdirplus(&merged.fh);
	assert_int_equal(r->status, NFS3_OK);
	rdp_find(r, "added.txt");
	for (size_t i = 0; i < r->n; i++)
		assert_string_not_equal(r->e[i].name, "gone.txt");
	assert_int_equal(rdp_find(r, "shadow.txt")->fileid, o.fileid);
	free(r);
	check_saved(&g.merged, "changes of its lower parts");
}

/* GETATTR through bytes that are no handle of this server's objects: the
 * status must be BADHANDLE or STALE. */
static void expect_refused(const struct fh *fh, const char *what, size_t pos)
{
	struct nfs_raw_obj a = getattr(fh);
	if (a.status != NFS3ERR_BADHANDLE && a.status != NFS3ERR_STALE)
		fail_msg("%s (byte %zu): GETATTR status %d, fileid %" PRIu64
			 ", want BADHANDLE or STALE",
			 what, pos, a.status, a.fileid);
}

/* (e) changed bytes: every byte position, three changes each, and other
 * lengths. */
static void test_flipped_handles(void **state)
{
	static const unsigned char flips[] = {0x01, 0x80, 0xff};
	const struct saved *objs[] = {&g.lowerf, &g.rootdir, &g.deep};
	(void)state;
	for (size_t k = 0; k < sizeof(objs) / sizeof(objs[0]); k++) {
		const struct fh *orig = &objs[k]->fh;
		assert_true(orig->len > 0 && orig->len <= NFS_RAW_FH_MAX);
		for (size_t i = 0; i < orig->len; i++)
			for (size_t j = 0; j < sizeof(flips); j++) {
				struct fh h = *orig;
				h.d[i] ^= flips[j];
				expect_refused(&h, objs[k]->what, i);
			}
		for (uint32_t len = 0; len <= NFS_RAW_FH_MAX; len++) {
			struct fh h = *orig;
			if (len == orig->len)
				continue;
			if (len > orig->len)
				memset(h.d + orig->len, 0, len - orig->len);
			h.len = len;
			expect_refused(&h, "a handle of another length", len);
		}
	}
	assert_true(test_server_alive(&g.srv));
	check_all_saved("bad handles");
}

/* (e) handles and exports.  The server decodes the export from the handle:
 * NFSv3 has no notion of "the export a client mounted" in a request, so a
 * handle of export B sent by a client that mounted A names B's object - and
 * that is right, because the MAC proves the server minted that handle for B
 * (the client was given it, by B's MOUNT or a LOOKUP in B).  Whether that
 * client may use B at all is B's access control (issue 6), as with knfsd,
 * which also finds the export from the handle.  What must never happen is
 * that the bytes name another object than the one they were minted for: a
 * handle whose export id was changed fails its MAC (BADHANDLE), and a node
 * of one export is never resolved under another (the engine's own check,
 * unit-tested in test_lookup/test_node, since a client cannot forge a MAC). */
static void test_cross_export(void **state)
{
	struct nfs_raw_obj rootb, fb, roota = getattr(&g.root), a;
	struct fh h;
	(void)state;
	g.root_b = mnt("/b");
	rootb = getattr(&g.root_b);
	assert_int_equal(rootb.status, NFS3_OK);
	assert_int_not_equal(rootb.fsid, roota.fsid);
	assert_int_not_equal(rootb.fileid, roota.fileid);
	fb = lookup_ok(&g.root_b, "only-b.txt");
	assert_int_equal(fb.fsid, rootb.fsid);
	assert_int_equal(nfs_raw_lookup(g.nfs, &g.root, "only-b.txt").status,
			 NFS3ERR_NOENT);

	/* B's handle on the connection that mounted A: B's object */
	a = getattr(&fb.fh);
	assert_int_equal(a.status, NFS3_OK);
	assert_int_equal(a.fsid, rootb.fsid);
	assert_int_equal(a.fileid, fb.fileid);
	read_is(&fb.fh, "export b's file\n", "export b's file through its handle");

	/* B's handle with A's export id (bytes 4..7 of the handle format), and
	 * A's handles with B's: the MAC no longer matches. */
	assert_true(fb.fh.len == g.root.len && fb.fh.len >= 8);
	h = fb.fh;
	memcpy(h.d + 4, g.root.d + 4, 4);
	assert_int_equal(getattr(&h).status, NFS3ERR_BADHANDLE);
	h = g.lowerf.fh;
	memcpy(h.d + 4, fb.fh.d + 4, 4);
	assert_int_equal(getattr(&h).status, NFS3ERR_BADHANDLE);
	h = g.root;
	memcpy(h.d + 4, g.root_b.d + 4, 4);
	assert_int_equal(getattr(&h).status, NFS3ERR_BADHANDLE);
	/* B is read-only, whatever handle a client uses */
	assert_int_equal(write_on(g.nfs, &fb.fh, "X"), NFS3ERR_ROFS);
}

/* (e) a state dir that was wiped: a new secret, a new table. */
static void test_wiped_state(void **state)
{
	int st;
	const struct saved *objs[] = {&g.rootdir, &g.lowerf, &g.upperf,
				      &g.merged,  &g.deep,   &g.fresh};
	struct nfs_raw_obj o;
	(void)state;
	disconnect();
	st = test_server_stop(&g.srv);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(test_tree_remove(g.state), 0);
	assert_int_equal(start(), 0);
	for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++)
		check_gone(&objs[i]->fh, objs[i]->what, true);
	/* the objects are there, under new handles */
	g.root = mnt("/");
	o = lookup_ok(&g.root, "lower.txt");
	read_is(&o.fh, "a lower file\n", "lower.txt under a new state dir");
}

/* SIGTERM ends the server with status 0 (under ASan: no leak, no error). */
static void test_clean_exit(void **state)
{
	int st;
	(void)state;
	disconnect();
	st = test_server_stop(&g.srv);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("union-nfsd ended with wait status 0x%x on SIGTERM, want exit 0",
			 st);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_durable_lookup), cmocka_unit_test(test_restart),
	    cmocka_unit_test(test_copyup),	   cmocka_unit_test(test_rename),
	    cmocka_unit_test(test_remove),	   cmocka_unit_test(test_hardlinks),
	    cmocka_unit_test(test_lower_change),   cmocka_unit_test(test_flipped_handles),
	    cmocka_unit_test(test_cross_export),   cmocka_unit_test(test_wiped_state),
	    cmocka_unit_test(test_clean_exit),
	};
	signal(SIGPIPE, SIG_IGN);
	if (argc != 2) {
		fprintf(stderr, "usage: test_handles UNION_NFSD\n");
		return 2;
	}
	if (geteuid() != 0) {
		printf("SKIP: needs root (trusted.* xattrs, white-outs)\n");
		return 77;
	}
	g.bin = argv[1];
	return cmocka_run_group_tests_name("integration/handles", tests, group_setup,
					   group_teardown);
}
