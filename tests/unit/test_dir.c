/* SPDX-License-Identifier: Apache-2.0 */
/* test_dir.c - changing names: white-outs (both forms) and opaque
 * directories, rmdir emptiness across layers, rename (files, directories,
 * over names and white-outs, EXDEV and the POSIX errors), link, create
 * (exclusive with a verifier), symlink, mknod, credentials, node ids through
 * all of it; and scripted sequences checked against kernel overlayfs. */
#include "test_wr.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>

/* Script lines leave trailing fields out on purpose. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static struct un_obj *walk(struct fx *fx, const char *path)
{
	struct un_obj *o = NULL;

	assert_int_equal(t_walk(fx, path, &o), 0);
	return o;
}

/* The helpers below pass a failed lookup on (fault sweeps inject them). */
static int rm(struct fx *fx, const char *dir, const char *name)
{
	struct un_obj *d = NULL;
	int rc = t_walk(fx, dir, &d);

	if (!rc)
		rc = un_remove(SYNC_CX, fx->ex, d, name);
	un_obj_put(d);
	return rc;
}

static int rmd(struct fx *fx, const char *dir, const char *name)
{
	struct un_obj *d = NULL;
	int rc = t_walk(fx, dir, &d);

	if (!rc)
		rc = un_rmdir(SYNC_CX, fx->ex, d, name);
	un_obj_put(d);
	return rc;
}

static int mkd(struct fx *fx, const char *dir, const char *name, mode_t mode)
{
	struct un_obj *d = NULL, *o = NULL;
	int rc = t_walk(fx, dir, &d);

	if (!rc)
		rc = un_mkdir(SYNC_CX, fx->ex, d, name, mode, &o);
	un_obj_put(o);
	un_obj_put(d);
	return rc;
}

static int mv(struct fx *fx, const char *fdir, const char *fname, const char *tdir,
	      const char *tname)
{
	struct un_obj *f = NULL, *t = NULL;
	int rc = t_walk(fx, fdir, &f);

	if (!rc)
		rc = t_walk(fx, tdir, &t);
	if (!rc)
		rc = un_rename(SYNC_CX, fx->ex, f, fname, t, tname);
	un_obj_put(f);
	un_obj_put(t);
	return rc;
}

static int creat_in(struct fx *fx, const char *dir, const char *name, bool excl)
{
	struct un_obj *d = walk(fx, dir), *o = NULL;
	int rc = un_create(SYNC_CX, fx->ex, d, name, 0644, excl, NULL, &o);

	un_obj_put(o);
	un_obj_put(d);
	return rc;
}

static void stale(struct fx *fx, un_id id)
{
	struct un_obj *o = NULL;

	assert_int_equal(un_resolve(fx->ex, id, &o), -ESTALE);
}

/* ---- white-outs ---- */

static void test_remove_kinds(void **state)
{
	struct fx *fx = *state;
	un_id lower, upper, both;

	t_file(fx, "l2/d/lower", "l");
	t_file(fx, "l1/d/both", "l");
	t_file(fx, "u/d/both", "u");
	t_file(fx, "u/d/upper", "u");
	w_export(fx);
	lower = t_id(fx, "d/lower");
	upper = t_id(fx, "d/upper");
	both = t_id(fx, "d/both");

	assert_int_equal(rm(fx, "d", "lower"), 0);
	assert_true(w_is_whiteout(fx, "u/d/lower"));
	assert_int_equal(rm(fx, "d", "upper"), 0);
	assert_false(w_exists(fx, "u/d/upper")); /* only upper: just gone */
	assert_int_equal(rm(fx, "d", "both"), 0);
	assert_true(w_is_whiteout(fx, "u/d/both"));
	t_list_eq(fx, "d", "");
	assert_int_equal(t_lookup_rc(fx, "d/lower"), -ENOENT);
	stale(fx, lower);
	stale(fx, upper);
	stale(fx, both);
	assert_int_equal(rm(fx, "d", "lower"), -ENOENT);
	assert_int_equal(rm(fx, "", "d"), -EISDIR);
	assert_int_equal(w_count(fx, "w/work"), 0);

	/* A new object under a removed name is a new node. */
	assert_int_equal(creat_in(fx, "d", "lower", true), 0);
	assert_int_not_equal(t_id(fx, "d/lower"), lower);
	stale(fx, lower);
}

static void test_remove_parent_chain(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l2/a/b/c/f", "x");
	assert_int_equal(chmod(t_path(fx, "l2/a/b"), 0711), 0);
	w_export(fx);
	assert_int_equal(rm(fx, "a/b/c", "f"), 0);
	assert_true(w_is_whiteout(fx, "u/a/b/c/f"));
	t_list_eq(fx, "a/b/c", "");
	struct stat st;
	assert_int_equal(stat(t_path(fx, "u/a/b"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0711);
}

static void test_xattr_whiteouts(void **state)
{
	struct fx *fx = *state;
	struct stat st;

	t_file(fx, "l2/d/f", "l");
	t_file(fx, "l2/d/g", "l");
	t_file(fx, "l2/d/keep", "l");
	t_file(fx, "l1/d/h", "l");
	w_export(fx);
	un_dir_test_xattr_whiteouts(fx->ex, true);
	assert_int_equal(rm(fx, "d", "f"), 0);
	assert_int_equal(lstat(t_path(fx, "u/d/f"), &st), 0);
	assert_true(S_ISREG(st.st_mode) && st.st_size == 0);
	assert_string_equal(w_xattr(fx, "u/d/f", "trusted.overlay.whiteout"), "y");
	assert_string_equal(w_xattr(fx, "u/d", "trusted.overlay.opaque"), "x");
	assert_int_equal(t_lookup_rc(fx, "d/f"), -ENOENT);
	/* An upper entry replaced; a rename leaving one behind. */
	t_file(fx, "u/d/g", "upper");
	assert_int_equal(rm(fx, "d", "g"), 0);
	assert_string_equal(w_xattr(fx, "u/d/g", "trusted.overlay.whiteout"), "y");
	assert_int_equal(mv(fx, "d", "h", "d", "h2"), 0);
	assert_string_equal(w_xattr(fx, "u/d/h", "trusted.overlay.whiteout"), "y");
	t_list_eq(fx, "d", "h2,keep");
	/* A new file over an xattr white-out is a plain file again. */
	assert_int_equal(creat_in(fx, "d", "f", true), 0);
	assert_string_equal(w_xattr(fx, "u/d/f", "trusted.overlay.whiteout"), "");
	t_list_eq(fx, "d", "f,h2,keep");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

static void test_mkdir_over_whiteout_opaque(void **state)
{
	struct fx *fx = *state;
	un_id old;

	t_file(fx, "l2/d/x", "x");
	t_file(fx, "l1/d/y", "y");
	w_export(fx);
	old = t_id(fx, "d");
	assert_int_equal(rmd(fx, "", "d"), -ENOTEMPTY);
	assert_int_equal(rm(fx, "d", "x"), 0);
	assert_int_equal(rm(fx, "d", "y"), 0);
	assert_int_equal(rmd(fx, "", "d"), 0); /* only white-outs in the upper */
	assert_true(w_is_whiteout(fx, "u/d"));
	stale(fx, old);
	assert_int_equal(mkd(fx, "", "d", 0750), 0);
	assert_string_equal(w_xattr(fx, "u/d", "trusted.overlay.opaque"), "y");
	t_list_eq(fx, "d", "");
	assert_int_equal(t_lookup_rc(fx, "d/x"), -ENOENT);
	assert_int_not_equal(t_id(fx, "d"), old);
	/* mkdir where nothing was below: a plain upper dir */
	assert_int_equal(mkd(fx, "", "new", 0700), 0);
	assert_string_equal(w_xattr(fx, "u/new", "trusted.overlay.opaque"), "");
	assert_int_equal(mkd(fx, "", "new", 0700), -EEXIST);
	assert_int_equal(mkd(fx, "", ".", 0700), -EEXIST);
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* Mode and owner of REL, as "02775 0:100". */
static const char *mode_owner(struct fx *fx, const char *rel)
{
	static __thread char buf[32];
	struct stat st;

	assert_int_equal(lstat(t_path(fx, rel), &st), 0);
	snprintf(buf, sizeof(buf), "%05o %u:%u", st.st_mode & 07777, st.st_uid,
		 st.st_gid);
	return buf;
}

/* Makes REL a set-gid directory of group GID with MODE's permissions. */
static void sgid_dir(struct fx *fx, const char *rel, gid_t gid, mode_t mode)
{
	assert_int_equal(chown(t_path(fx, rel), 0, gid), 0);
	assert_int_equal(chmod(t_path(fx, rel), S_ISGID | mode), 0);
}

/* MKDIR keeps the permission and sticky bits of the mode asked for, and
 * gets S_ISGID from a set-gid parent only, as vfs_mkdir gives it: also
 * where the directory is built in the work dir, over a white-out. */
static void test_mkdir_sgid_mode(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l2/p/w1", "1");
	t_file(fx, "l2/p/w2", "2");
	w_export(fx);
	assert_int_equal(rm(fx, "p", "w1"), 0);
	assert_int_equal(rm(fx, "p", "w2"), 0);
	assert_int_equal(mkd(fx, "p", "plain", 02775), 0);
	assert_string_equal(mode_owner(fx, "u/p/plain"), "00775 0:0");
	assert_int_equal(mkd(fx, "p", "w1", 03775), 0); /* over a white-out */
	assert_string_equal(mode_owner(fx, "u/p/w1"), "01775 0:0");
	assert_string_equal(w_xattr(fx, "u/p/w1", "trusted.overlay.opaque"), "y");
	sgid_dir(fx, "u/p", 4243, 0755);
	assert_int_equal(mkd(fx, "p", "w2", 0750), 0);
	assert_string_equal(mode_owner(fx, "u/p/w2"), "02750 0:4243");
	assert_int_equal(mkd(fx, "p", "plain2", 0750), 0);
	assert_string_equal(mode_owner(fx, "u/p/plain2"), "02750 0:4243");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

struct sgid_create {
	struct fx *fx;
	gid_t fsgid;
	const char *name;
	int rc;
};

/* A CREATE of NAME (mode 02755) in s, as fsuid 4242 and FSGID. */
static void *sgid_create_main(void *arg)
{
	struct sgid_create *c = arg;
	struct un_obj *d = NULL, *o = NULL;

	syscall(SYS_setfsgid, c->fsgid);
	syscall(SYS_setfsuid, 4242);
	c->rc = t_walk(c->fx, "s", &d);
	if (!c->rc)
		c->rc = un_create(SYNC_CX, c->fx->ex, d, c->name, 02755, true, NULL, &o);
	un_obj_put(o);
	un_obj_put(d);
	return NULL;
}

static int sgid_create(struct fx *fx, const char *name, gid_t fsgid)
{
	struct sgid_create c = {.fx = fx, .fsgid = fsgid, .name = name};
	pthread_t th;

	pthread_create(&th, NULL, sgid_create_main, &c);
	pthread_join(th, NULL);
	return c.rc;
}

/* In a set-gid directory, the white-outs of REMOVE and RMDIR are made in
 * the work dir, as overlayfs makes them: 0:0, not of the directory's
 * group.  RENAME's comes from RENAME_WHITEOUT in the directory and takes
 * its group, as overlayfs's does.  A file created there over a white-out
 * loses S_ISGID when its creator is not in its group (mode_strip_sgid). */
static void test_whiteout_owner_sgid(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l2/s/f", "lower");
	t_file(fx, "l2/s/g", "lower");
	t_file(fx, "l2/s/r", "lower");
	t_mkdir(fx, "l2/s/dd");
	t_file(fx, "u/s/f", "upper"); /* present in the upper: exchanged */
	t_mkdir(fx, "u/s/dd");
	sgid_dir(fx, "l2/s", 4243, 0777);
	sgid_dir(fx, "u/s", 4243, 0777);
	w_export(fx);
	assert_int_equal(rm(fx, "s", "f"), 0);
	assert_int_equal(rm(fx, "s", "g"), 0);
	assert_int_equal(rmd(fx, "s", "dd"), 0);
	assert_int_equal(mv(fx, "s", "r", "s", "r2"), 0);
	assert_true(w_is_whiteout(fx, "u/s/f"));
	assert_string_equal(mode_owner(fx, "u/s/f"), "00000 0:0");
	assert_string_equal(mode_owner(fx, "u/s/g"), "00000 0:0");
	assert_string_equal(mode_owner(fx, "u/s/dd"), "00000 0:0");
	assert_true(w_is_whiteout(fx, "u/s/r"));
	assert_string_equal(mode_owner(fx, "u/s/r"), "00000 0:4243");
	/* creates over those white-outs, as a user of another group, of the
	 * directory's, and as root */
	assert_int_equal(sgid_create(fx, "f", 4242), 0);
	assert_string_equal(mode_owner(fx, "u/s/f"), "00755 4242:4243");
	assert_int_equal(sgid_create(fx, "g", 4243), 0);
	assert_string_equal(mode_owner(fx, "u/s/g"), "02755 4242:4243");
	assert_int_equal(sgid_create(fx, "new", 4242), 0); /* no white-out: the kernel */
	assert_string_equal(mode_owner(fx, "u/s/new"), "00755 4242:4243");
	assert_int_equal(creat_in(fx, "s", "r", true), 0);
	assert_string_equal(mode_owner(fx, "u/s/r"), "00644 0:4243");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

static void test_rmdir(void **state)
{
	struct fx *fx = *state;

	t_mkdir(fx, "l2/lonly");
	t_mkdir(fx, "l1/merged");
	t_mkdir(fx, "l2/merged");
	t_file(fx, "l2/full/f", "f");
	t_file(fx, "l1/f", "f");
	t_mkdir(fx, "u/uonly");
	t_mkdir(fx, "u/stalewh");
	t_chr0(fx, "u/stalewh/ghost"); /* an upper-only dir holding a white-out */
	w_export(fx);
	assert_int_equal(rmd(fx, "", "lonly"), 0);
	assert_true(w_is_whiteout(fx, "u/lonly"));
	assert_int_equal(rmd(fx, "", "merged"), 0);
	assert_true(w_is_whiteout(fx, "u/merged"));
	assert_int_equal(rmd(fx, "", "full"), -ENOTEMPTY);
	assert_int_equal(rmd(fx, "", "f"), -ENOTDIR);
	assert_int_equal(rmd(fx, "", "none"), -ENOENT);
	assert_int_equal(rmd(fx, "", "uonly"), 0);
	assert_false(w_exists(fx, "u/uonly"));
	assert_int_equal(rmd(fx, "", "stalewh"), 0);
	assert_false(w_exists(fx, "u/stalewh"));
	assert_int_equal(rmd(fx, "", "."), -EINVAL);
	assert_int_equal(rmd(fx, "", ".."), -ENOTEMPTY);
	t_list_eq(fx, "", "f,full");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* ---- rename ---- */

static void test_rename_files(void **state)
{
	struct fx *fx = *state;
	un_id f, g, over, low, p;

	t_file(fx, "l2/d/f", "lower f");
	t_file(fx, "l2/d/p", "lower p");
	t_file(fx, "l1/d/q", "lower q");
	t_file(fx, "l2/d/low", "lower target");
	t_file(fx, "u/d/g", "upper g");
	t_file(fx, "u/d/over", "to be overwritten");
	t_mkdir(fx, "l1/e");
	w_export(fx);
	f = t_id(fx, "d/f");
	g = t_id(fx, "d/g");
	over = t_id(fx, "d/over");
	low = t_id(fx, "d/low");

	/* a lower file: copied up, a white-out left behind, the id kept */
	assert_int_equal(mv(fx, "d", "f", "d", "f2"), 0);
	assert_true(w_is_whiteout(fx, "u/d/f"));
	assert_int_equal(t_id(fx, "d/f2"), f);
	/* an upper-only file over an upper file: no white-out, the target stale */
	assert_int_equal(mv(fx, "d", "g", "d", "over"), 0);
	assert_false(w_exists(fx, "u/d/g"));
	assert_int_equal(t_id(fx, "d/over"), g);
	stale(fx, over);
	/* across directories, over a lower-only file */
	assert_int_equal(mv(fx, "d", "over", "d", "low"), 0);
	stale(fx, low);
	assert_int_equal(mv(fx, "d", "low", "e", "moved"), 0);
	assert_int_equal(t_id(fx, "e/moved"), g);
	/* over a white-out, from a name only in the upper */
	assert_int_equal(mv(fx, "d", "f2", "d", "f"), 0);
	assert_false(w_is_whiteout(fx, "u/d/f"));
	assert_false(w_exists(fx, "u/d/f2"));
	assert_int_equal(t_id(fx, "d/f"), f);
	/* over a white-out, from a name that is also below: they swap */
	p = t_id(fx, "d/p");
	assert_int_equal(rm(fx, "d", "q"), 0);
	assert_int_equal(mv(fx, "d", "p", "d", "q"), 0);
	assert_true(w_is_whiteout(fx, "u/d/p"));
	assert_false(w_is_whiteout(fx, "u/d/q"));
	assert_int_equal(t_id(fx, "d/q"), p);
	/* onto itself */
	assert_int_equal(mv(fx, "d", "f", "d", "f"), 0);
	assert_int_equal(mv(fx, "d", "nope", "d", "x"), -ENOENT);
	t_list_eq(fx, "d", "f,q");
	t_list_eq(fx, "e", "moved");
	char buf[32];
	assert_int_equal(t_read(fx, "e/moved", buf, sizeof(buf)), 7);
	assert_string_equal(buf, "upper g");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

static void test_rename_dirs(void **state)
{
	struct fx *fx = *state;
	un_id pu, child;

	t_file(fx, "l2/lower/x", "x");
	t_file(fx, "l1/merged/y", "y");
	t_file(fx, "u/merged/z", "z");
	t_file(fx, "u/pu/inner", "i"); /* a pure upper dir */
	t_file(fx, "l2/full/f", "f");
	t_file(fx, "l1/file", "file");
	t_mkdir(fx, "l2/emptylow");
	w_export(fx);
	pu = t_id(fx, "pu");
	child = t_id(fx, "pu/inner");

	assert_int_equal(mv(fx, "", "lower", "", "l2"), -EXDEV);
	assert_int_equal(mv(fx, "", "merged", "", "m2"), -EXDEV);
	assert_int_equal(mv(fx, "", "pu", "", "full"), -ENOTEMPTY);
	assert_int_equal(mv(fx, "", "pu", "", "file"), -ENOTDIR);
	assert_int_equal(mv(fx, "", "file", "", "pu"), -EISDIR);
	assert_int_equal(mv(fx, "", "pu", "pu", "sub"), -EINVAL);
	assert_int_equal(mv(fx, "", "merged", "merged", "sub"), -EINVAL);

	/* A pure upper dir moves; into a merged parent it becomes opaque. */
	assert_int_equal(mv(fx, "", "pu", "merged", "pu2"), 0);
	assert_string_equal(w_xattr(fx, "u/merged/pu2", "trusted.overlay.opaque"), "y");
	assert_int_equal(t_id(fx, "merged/pu2"), pu);
	assert_int_equal(t_id(fx, "merged/pu2/inner"), child); /* subtree untouched */
	/* over an empty lower-only dir: the lower one must stay hidden */
	assert_int_equal(mv(fx, "merged", "pu2", "", "emptylow"), 0);
	assert_string_equal(w_xattr(fx, "u/emptylow", "trusted.overlay.opaque"), "y");
	t_list_eq(fx, "emptylow", "inner");
	assert_int_equal(t_id(fx, "emptylow/inner"), child);
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* A pure upper directory moving into a merged parent is marked opaque
 * before the move, also when the move then fails because its pure upper
 * target is not empty (ovl_rename leaves that check to the upper's
 * rename).  The target keeps what it holds. */
static void test_rename_opaque_enotempty(void **state)
{
	struct fx *fx = *state;

	t_mkdir(fx, "l2/m");
	t_mkdir(fx, "u/m/src");
	t_file(fx, "u/m/dst/x", "x");
	t_mkdir(fx, "u/m/wh");
	t_chr0(fx, "u/m/wh/ghost"); /* empty in the merged view */
	t_mkdir(fx, "u/plain/src");
	t_file(fx, "u/plain/dst/x", "x");
	w_export(fx);
	assert_int_equal(mv(fx, "m", "src", "m", "dst"), -ENOTEMPTY);
	assert_string_equal(w_xattr(fx, "u/m/src", "trusted.overlay.opaque"), "y");
	t_list_eq(fx, "m", "dst,src,wh");
	t_list_eq(fx, "m/dst", "x");
	/* a parent that merges nothing: no mark */
	assert_int_equal(mv(fx, "plain", "src", "plain", "dst"), -ENOTEMPTY);
	assert_string_equal(w_xattr(fx, "u/plain/src", "trusted.overlay.opaque"), "");
	t_list_eq(fx, "plain/dst", "x");
	/* a pure upper target holding only white-outs is replaced */
	assert_int_equal(mv(fx, "m", "src", "m", "wh"), 0);
	t_list_eq(fx, "m", "dst,wh");
	t_list_eq(fx, "m/wh", "");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* The table calls of renaming directory NAME (in the root) to NAME2, with
 * the directory objects already looked up. */
static unsigned long rename_mdb_calls(struct fx *fx, const char *name, const char *name2)
{
	struct un_obj *root = NULL;
	unsigned long n;

	assert_int_equal(un_root(fx->ex, &root), 0);
	un_sys_inject_reset();
	assert_int_equal(un_rename(SYNC_CX, fx->ex, root, name, root, name2), 0);
	n = un_sys_calls(UN_SYS_MDB);
	un_obj_put(root);
	return n;
}

/* A directory rename costs the same table work whatever the directory holds:
 * the records below it name their parent by id and are not touched, and
 * every id of the subtree stays. */
static void test_rename_dir_cost(void **state)
{
	struct fx *fx = *state;
	char path[64];
	un_id ids[3][10], sub;
	unsigned long small, big;

	t_mkdir(fx, "u/small");
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 10; j++) {
			snprintf(path, sizeof(path), "u/big/s%d/t/f%d", i, j);
			t_file(fx, path, "x");
		}
	w_export(fx);
	t_id(fx, "small");
	sub = t_id(fx, "big/s1/t");
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 10; j++) {
			snprintf(path, sizeof(path), "big/s%d/t/f%d", i, j);
			ids[i][j] = t_id(fx, path);
		}
	small = rename_mdb_calls(fx, "small", "small2");
	big = rename_mdb_calls(fx, "big", "big2");
	assert_int_equal(big, small);
	assert_int_equal(t_id(fx, "big2/s1/t"), sub);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 10; j++) {
			struct un_obj *o = NULL;

			assert_int_equal(un_resolve(fx->ex, ids[i][j], &o), 0);
			un_obj_put(o);
			snprintf(path, sizeof(path), "big2/s%d/t/f%d", i, j);
			assert_int_equal(t_id(fx, path), ids[i][j]);
		}
}

/* A directory moved over a merged directory that is empty but whose upper
 * part holds white-outs: the target is cleared first. */
static void test_rename_over_whiteout_dir(void **state)
{
	struct fx *fx = *state;
	un_id t;

	t_file(fx, "l2/t/a", "a");
	t_file(fx, "u/src/keep", "k");
	w_export(fx);
	t = t_id(fx, "t");
	assert_int_equal(mv(fx, "", "src", "", "t"), -ENOTEMPTY);
	assert_int_equal(rm(fx, "t", "a"), 0);
	assert_true(w_is_whiteout(fx, "u/t/a"));
	assert_int_equal(mv(fx, "", "src", "", "t"), 0);
	stale(fx, t);
	t_list_eq(fx, "t", "keep");
	t_list_eq(fx, "", "t");
	assert_string_equal(w_xattr(fx, "u/t", "trusted.overlay.opaque"), "y");
	assert_int_equal(w_count(fx, "w/work"), 0);
	/* and a directory renamed over a white-out name */
	assert_int_equal(mkd(fx, "", "n", 0755), 0);
	assert_int_equal(rmd(fx, "", "t"), -ENOTEMPTY);
	assert_int_equal(rm(fx, "t", "keep"), 0);
	assert_false(w_exists(fx, "u/t/keep")); /* t is opaque: nothing below */
	assert_int_equal(rmd(fx, "", "t"), 0);
	assert_true(w_is_whiteout(fx, "u/t"));
	assert_int_equal(mv(fx, "", "n", "", "t"), 0);
	assert_false(w_exists(fx, "u/n")); /* the white-out did not land there */
	t_list_eq(fx, "", "t");
	t_list_eq(fx, "t", "");
}

/* ---- link ---- */

static void test_link(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o, *d;
	struct un_attr a;
	enum un_stable c;
	char buf[32];
	un_id id;

	t_file(fx, "l2/d/f", "lower");
	t_mkdir(fx, "l1/e");
	w_export(fx);
	id = t_id(fx, "d/f");
	o = walk(fx, "d/f");
	d = walk(fx, "e");
	assert_int_equal(un_link(SYNC_CX, fx->ex, o, d, "g"), 0);
	assert_int_equal(un_link(SYNC_CX, fx->ex, o, d, "g"), -EEXIST);
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	assert_int_equal(a.nlink, 2);
	assert_int_equal(t_id(fx, "e/g"), id);
	assert_int_equal(t_id(fx, "d/f"), id);
	assert_int_equal(un_write(fx->ex, o, "UP", 2, 0, UN_UNSTABLE, &c), 2);
	assert_int_equal(t_read(fx, "e/g", buf, sizeof(buf)), 5);
	assert_string_equal(buf, "UPwer");
	un_obj_put(o);
	/* The name the node record holds goes: the node lives on. */
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "g"), 0);
	o = walk(fx, "d/f");
	assert_int_equal(un_link(SYNC_CX, fx->ex, o, d, "g2"), 0);
	un_obj_put(o);
	un_obj_put(d);
	assert_int_equal(rm(fx, "d", "f"), 0);
	assert_true(w_is_whiteout(fx, "u/d/f"));
	assert_int_equal(un_resolve(fx->ex, id, &o), 0);
	assert_int_equal(un_obj_id(o), id);
	un_obj_put(o);
	assert_int_equal(t_id(fx, "e/g2"), id);
	/* and once the last name goes, the node is stale */
	assert_int_equal(rm(fx, "e", "g2"), 0);
	stale(fx, id);
	o = walk(fx, "e");
	assert_int_equal(un_link(SYNC_CX, fx->ex, o, o, "x"), -EPERM);
	un_obj_put(o);
}

/* The names of a linked node through renames and removals. */
static void test_link_names(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o, *d;
	un_id id;

	t_file(fx, "u/d/f", "f");
	t_mkdir(fx, "u/e");
	w_export(fx);
	id = t_id(fx, "d/f");
	o = walk(fx, "d/f");
	d = walk(fx, "e");
	assert_int_equal(un_link(SYNC_CX, fx->ex, o, d, "g"), 0);
	un_obj_put(o);
	un_obj_put(d);
	assert_int_equal(mv(fx, "e", "g", "e", "g"), 0);
	assert_int_equal(mv(fx, "d", "f", "e", "g"), 0); /* same node: nothing */
	assert_true(w_exists(fx, "u/d/f"));
	assert_int_equal(mv(fx, "d", "f", "d", "h"), 0);  /* the record's name moves */
	assert_int_equal(mv(fx, "e", "g", "", "top"), 0); /* the second name moves */
	assert_int_equal(t_id(fx, "d/h"), id);
	assert_int_equal(t_id(fx, "top"), id);
	assert_int_equal(rm(fx, "d", "h"), 0);
	assert_int_equal(un_resolve(fx->ex, id, &o), 0); /* via "top" */
	un_obj_put(o);
	assert_int_equal(t_id(fx, "top"), id);
	/* a new file over the last name: the node is gone */
	t_file(fx, "u/new", "n");
	assert_int_equal(mv(fx, "", "new", "", "top"), 0);
	stale(fx, id);
	assert_int_not_equal(t_id(fx, "top"), id);
}

/* The record's own name is renamed, then removed: the node lives on under
 * its other name (the alias of the renamed name must move with it). */
static void test_link_rename_remove(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o, *d;
	un_id id;

	t_file(fx, "u/d/q", "q");
	w_export(fx);
	id = t_id(fx, "d/q");
	o = walk(fx, "d/q");
	d = walk(fx, "d");
	assert_int_equal(un_link(SYNC_CX, fx->ex, o, d, "r"), 0);
	un_obj_put(o);
	un_obj_put(d);
	assert_int_equal(mv(fx, "d", "q", "d", "s"), 0);
	assert_int_equal(rm(fx, "d", "s"), 0);
	assert_int_equal(un_resolve(fx->ex, id, &o), 0);
	un_obj_put(o);
	assert_int_equal(t_id(fx, "d/r"), id);
}

/* ---- create ---- */

static void test_create(void **state)
{
	struct fx *fx = *state;
	struct un_obj *d, *o = NULL;
	struct un_sattr sa = {.set_size = true, .size = 0};
	struct stat st;

	t_file(fx, "l2/d/f", "lower data");
	t_file(fx, "l2/d/gone", "x");
	w_export(fx);
	d = walk(fx, "d");
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "f", 0600, true, NULL, &o),
			 -EEXIST);
	/* UNCHECKED over an existing file opens it, truncating when asked */
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "f", 0600, false, &sa, &o), 0);
	assert_int_equal(un_obj_id(o), t_id(fx, "d/f"));
	un_obj_put(o);
	assert_int_equal(stat(t_path(fx, "u/d/f"), &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "new", 0640, true, NULL, &o), 0);
	un_obj_put(o);
	assert_int_equal(stat(t_path(fx, "u/d/new"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	/* over a white-out */
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "gone"), 0);
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "gone", 0604, true, NULL, &o), 0);
	un_obj_put(o);
	assert_int_equal(lstat(t_path(fx, "u/d/gone"), &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0604);
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "a/b", 0600, true, NULL, &o),
			 -EINVAL);
	un_obj_put(d);
	t_list_eq(fx, "d", "f,gone,new");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* ---- directories that merge nothing (dir.c invariant 6) ---- */

/* Node and fileid of REL, as a lookup from the root gives them, are O's. */
static void same_as_lookup(struct fx *fx, struct un_obj *o, const char *rel)
{
	struct un_obj *l = walk(fx, rel);
	struct un_attr a, b;

	assert_int_equal(un_obj_id(o), un_obj_id(l));
	assert_int_equal(un_obj_type(o), un_obj_type(l));
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	assert_int_equal(un_getattr(fx->ex, l, &b), 0);
	assert_int_equal(a.fileid, b.fileid);
	assert_int_equal(a.mode, b.mode);
	un_obj_put(l);
}

/* In a directory whose only instance is the upper one, CREATE and REMOVE
 * decide from the upper: white-outs (both forms) are absent, a created
 * object is the one a lookup finds, with its mode exact. */
static void test_upper_only(void **state)
{
	static const uint8_t v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct fx *fx = *state;
	struct un_sattr sa = {.set_size = true, .size = 0};
	struct un_obj *d, *o = NULL, *o2 = NULL;
	struct stat st;
	un_id id;

	t_file(fx, "u/p/old", "data");
	t_chr0(fx, "u/p/wh");
	t_file(fx, "u/p/xwh", "");
	t_xattr(fx, "u/p/xwh", "trusted.overlay.whiteout", "y");
	t_mkdir(fx, "u/p/sub");
	w_export(fx);
	d = walk(fx, "p");
	t_list_eq(fx, "p", "old,sub");
	umask(022); /* a mode the umask cut is made exact */
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "f", 0666, true, NULL, &o), 0);
	umask(0);
	assert_int_equal(stat(t_path(fx, "u/p/f"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0666);
	same_as_lookup(fx, o, "p/f");
	id = un_obj_id(o);
	un_obj_put(o);
	/* present: GUARDED fails, UNCHECKED opens (truncating) */
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "old", 0600, true, NULL, &o),
			 -EEXIST);
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "sub", 0600, true, NULL, &o),
			 -EEXIST);
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, ".", 0600, true, NULL, &o),
			 -EEXIST);
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "old", 0600, false, &sa, &o), 0);
	same_as_lookup(fx, o, "p/old");
	un_obj_put(o);
	assert_int_equal(stat(t_path(fx, "u/p/old"), &st), 0);
	assert_int_equal(st.st_size, 0);
	/* white-outs are absent: removing one leaves it */
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "wh"), -ENOENT);
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "xwh"), -ENOENT);
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "none"), -ENOENT);
	assert_true(w_is_whiteout(fx, "u/p/wh"));
	assert_string_equal(w_xattr(fx, "u/p/xwh", "trusted.overlay.whiteout"), "y");
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "sub"), -EISDIR);
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "."), -EISDIR);
	/* and making a name over one replaces it */
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "wh", 0640, true, NULL, &o), 0);
	same_as_lookup(fx, o, "p/wh");
	un_obj_put(o);
	assert_int_equal(lstat(t_path(fx, "u/p/wh"), &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(un_mkdir(SYNC_CX, fx->ex, d, "xwh", 0750, &o), 0);
	same_as_lookup(fx, o, "p/xwh");
	un_obj_put(o);
	assert_string_equal(w_xattr(fx, "u/p/xwh", "trusted.overlay.opaque"), "y");
	/* an exclusive create and its retransmission */
	assert_int_equal(un_create_verf(SYNC_CX, fx->ex, d, "v", v, &o), 0);
	same_as_lookup(fx, o, "p/v");
	assert_int_equal(un_create_verf(SYNC_CX, fx->ex, d, "v", v, &o2), 0);
	assert_int_equal(un_obj_id(o2), un_obj_id(o));
	un_obj_put(o);
	un_obj_put(o2);
	assert_int_equal(un_symlink(SYNC_CX, fx->ex, d, "sl", "old", &o), 0);
	same_as_lookup(fx, o, "p/sl");
	un_obj_put(o);
	assert_int_equal(un_mkdir(SYNC_CX, fx->ex, d, "nd", 0700, &o), 0);
	same_as_lookup(fx, o, "p/nd");
	un_obj_put(o);
	/* a removed name's node is forgotten */
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "f"), 0);
	assert_false(w_exists(fx, "u/p/f"));
	stale(fx, id);
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "sl"), 0);
	un_obj_put(d);
	t_list_eq(fx, "p", "nd,old,sub,v,wh,xwh");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* In a merged directory too, a create's object is the one a lookup gives
 * (dir.c invariant 7): a new directory where a lower white-out hides a
 * lower directory merges nothing. */
static void test_create_merged_objects(void **state)
{
	struct fx *fx = *state;
	struct un_obj *d, *o = NULL;
	struct un_listing *l;

	t_file(fx, "l2/d/gone", "g");
	t_file(fx, "l2/d/hid/x", "x");
	t_chr0(fx, "l1/d/hid");
	t_file(fx, "l1/d/keep", "k");
	w_export(fx);
	d = walk(fx, "d");
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "new", 0640, true, NULL, &o), 0);
	same_as_lookup(fx, o, "d/new");
	un_obj_put(o);
	assert_int_equal(un_mkdir(SYNC_CX, fx->ex, d, "hid", 0750, &o), 0);
	same_as_lookup(fx, o, "d/hid");
	assert_int_equal(un_listing_get(fx->ex, o, &l), 0);
	assert_int_equal(un_listing_count(l), 2); /* "." and ".." */
	un_listing_put(l);
	un_obj_put(o);
	t_list_eq(fx, "d/hid", "");
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "gone"), 0);
	assert_int_equal(un_symlink(SYNC_CX, fx->ex, d, "gone", "keep", &o), 0);
	same_as_lookup(fx, o, "d/gone");
	un_obj_put(o);
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, "keep", 0600, true, NULL, &o),
			 -EEXIST);
	un_obj_put(d);
	t_list_eq(fx, "d", "gone,hid,keep,new");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* What they cost there: a create makes the file and reads it once (no
 * white-out probes of a file it made), a remove reads the name once. */
static void test_upper_only_cost(void **state)
{
	struct fx *fx = *state;
	struct un_obj *d, *o = NULL;

	t_mkdir(fx, "u/p");
	w_export(fx);
	d = walk(fx, "p");
	un_sys_inject_reset(); /* async below: no fsyncs counted */
	assert_int_equal(un_create(ASYNC_CX, fx->ex, d, "f", 0644, true, NULL, &o), 0);
	assert_int_equal(un_sys_calls(UN_SYS_MKNOD), 1);
	assert_int_equal(un_sys_calls(UN_SYS_OPEN), 1);
	assert_int_equal(un_sys_calls(UN_SYS_STAT), 1);
	assert_int_equal(un_sys_calls(UN_SYS_XATTR), 0);
	un_obj_put(o);
	un_sys_inject_reset();
	assert_int_equal(un_remove(ASYNC_CX, fx->ex, d, "f"), 0);
	assert_int_equal(un_sys_calls(UN_SYS_OPEN), 0);
	assert_int_equal(un_sys_calls(UN_SYS_STAT), 1);
	assert_int_equal(un_sys_calls(UN_SYS_XATTR), 2); /* an empty file */
	assert_int_equal(un_sys_calls(UN_SYS_UNLINK), 1);
	un_obj_put(d);
}

/* ---- durability: shared fsyncs ---- */

/* What the fsync hook of test_sync_shared saw. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int begun, ended; /* fsyncs */
	bool hold;	  /* the first fsync waits for release */
	bool released;
	int fail_second;      /* errno the second fsync fails with, or 0 */
	bool marked;	      /* every change of the test was made */
	int ended_after_mark; /* fsyncs that began after the mark and ended */
} sh = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static _Thread_local bool sh_after_mark; /* this thread's fsync began after it */

/* Counts and holds the fsyncs of directories only: a create fsyncs its new
 * file first, unshared, and then the directory, whose fsync is shared. */
static int sh_hook(int fd, bool begin)
{
	struct stat st;
	int err = 0;

	if (fstat(fd, &st) || !S_ISDIR(st.st_mode))
		return 0;
	pthread_mutex_lock(&sh.lock);
	if (begin) {
		sh_after_mark = sh.marked;
		if (++sh.begun == 1 && sh.hold) {
			pthread_cond_broadcast(&sh.cond);
			while (!sh.released)
				pthread_cond_wait(&sh.cond, &sh.lock);
		}
		if (sh.begun == 2)
			err = sh.fail_second;
	} else {
		sh.ended++;
		sh.ended_after_mark += sh_after_mark;
	}
	pthread_mutex_unlock(&sh.lock);
	return err;
}

struct sh_change {
	struct fx *fx;
	struct un_obj *dir;
	const char *name;
	int rc;
	int ended_after_mark; /* when un_create returned */
};

static void *sh_create(void *arg)
{
	struct sh_change *c = arg;
	struct un_obj *o = NULL;

	c->rc = un_create(SYNC_CX, c->fx->ex, c->dir, c->name, 0644, true, NULL, &o);
	un_obj_put(o);
	pthread_mutex_lock(&sh.lock);
	c->ended_after_mark = sh.ended_after_mark;
	pthread_mutex_unlock(&sh.lock);
	return NULL;
}

/* Polls (bounded) until DONE(fx) holds. */
static bool sh_until(struct fx *fx, bool (*done)(struct fx *))
{
	for (int i = 0; i < 2000; i++) {
		if (done(fx))
			return true;
		usleep(5000);
	}
	return false;
}

static bool sh_made(struct fx *fx)
{
	return w_exists(fx, "u/d/b") && w_exists(fx, "u/d/c");
}

/* B and C asleep on d's fsyncs, so both took their tickets while A's run
 * was held (a count of users would also count a create still fsyncing its
 * new file, whose ticket for d may come after the release: seen failing
 * under load). */
static bool sh_all_wait(struct fx *fx)
{
	return un_fsyncs_test_sleepers(fx->st) == 2;
}

/* A holds the first fsync of d while B and C create in d; then it is let go
 * and the three creates end (the second fsync fails with FAIL, if not 0). */
static void sh_scenario(struct fx *fx, int fail, struct sh_change *a, struct sh_change *b,
			struct sh_change *c)
{
	pthread_t ta, tb, tc;

	t_file(fx, "u/d/x", "");
	w_export(fx);
	*a = (struct sh_change){.fx = fx, .name = "a", .dir = walk(fx, "d")};
	*b = (struct sh_change){.fx = fx, .name = "b", .dir = a->dir};
	*c = (struct sh_change){.fx = fx, .name = "c", .dir = a->dir};
	sh.begun = sh.ended = sh.ended_after_mark = 0;
	sh.hold = true;
	sh.released = sh.marked = false;
	sh.fail_second = fail;
	un_sys_test_fsync_hook(sh_hook);
	assert_int_equal(pthread_create(&ta, NULL, sh_create, a), 0);
	pthread_mutex_lock(&sh.lock);
	while (sh.begun == 0)
		pthread_cond_wait(&sh.cond, &sh.lock);
	pthread_mutex_unlock(&sh.lock);
	assert_int_equal(pthread_create(&tb, NULL, sh_create, b), 0);
	assert_int_equal(pthread_create(&tc, NULL, sh_create, c), 0);
	assert_true(sh_until(fx, sh_made));
	pthread_mutex_lock(&sh.lock);
	sh.marked = true;
	pthread_mutex_unlock(&sh.lock);
	assert_true(sh_until(fx, sh_all_wait)); /* A runs, B and C wait */
	pthread_mutex_lock(&sh.lock);
	sh.released = true;
	pthread_cond_broadcast(&sh.cond);
	pthread_mutex_unlock(&sh.lock);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	pthread_join(tc, NULL);
	un_sys_test_fsync_hook(NULL);
	assert_int_equal(un_fsyncs_test_users(fx->st), 0);
}

/* Concurrent changes of one directory share its fsyncs, and none is
 * answered on an fsync that began before it was made (sync.c, invariant 1):
 * when A's held fsync ends, B and C must still wait for a second fsync,
 * which they share. */
static void test_sync_shared(void **state)
{
	struct fx *fx = *state;
	struct sh_change a, b, c;

	sh_scenario(fx, 0, &a, &b, &c);
	assert_int_equal(a.rc, 0);
	assert_int_equal(b.rc, 0);
	assert_int_equal(c.rc, 0);
	assert_int_equal(b.ended_after_mark, 1);
	assert_int_equal(c.ended_after_mark, 1);
	assert_int_equal(sh.begun, 2); /* A's, then one for B and C */
	un_obj_put(a.dir);
	t_list_eq(fx, "d", "a,b,c,x");
}

/* A failed shared fsync fails every change it served, not only the one
 * that ran it (invariant 2), and the next change runs a new one. */
static void test_sync_shared_error(void **state)
{
	struct fx *fx = *state;
	struct sh_change a, b, c;
	struct un_obj *o = NULL;

	sh_scenario(fx, EIO, &a, &b, &c);
	assert_int_equal(a.rc, 0);
	assert_int_equal(b.rc, -EIO);
	assert_int_equal(c.rc, -EIO);
	assert_int_equal(sh.begun, 2);
	un_sys_test_fsync_hook(sh_hook); /* counting only */
	assert_int_equal(un_create(SYNC_CX, fx->ex, a.dir, "d", 0644, true, NULL, &o), 0);
	un_sys_test_fsync_hook(NULL);
	assert_int_equal(sh.begun, 3);
	un_obj_put(o);
	un_obj_put(a.dir);
}

/* Fsyncs of regular files and of directories, counted by fs_count_hook. */
static atomic_int fsyncs_reg, fsyncs_dir;

static int fs_count_hook(int fd, bool begin)
{
	struct stat st;

	if (begin && !fstat(fd, &st))
		atomic_fetch_add(S_ISDIR(st.st_mode) ? &fsyncs_dir : &fsyncs_reg, 1);
	return 0;
}

/* Creates NAME in D (MODE, SA) and checks that it fsynced REG regular files
 * and one directory. */
static void made_fsyncs(struct fx *fx, struct un_obj *d, const char *name, mode_t mode,
			bool excl, const struct un_sattr *sa, int reg)
{
	struct un_obj *o = NULL;

	atomic_store(&fsyncs_reg, 0);
	atomic_store(&fsyncs_dir, 0);
	un_sys_test_fsync_hook(fs_count_hook);
	assert_int_equal(un_create(SYNC_CX, fx->ex, d, name, mode, excl, sa, &o), 0);
	un_sys_test_fsync_hook(NULL);
	un_obj_put(o);
	assert_int_equal(atomic_load(&fsyncs_reg), reg);
	assert_int_equal(atomic_load(&fsyncs_dir), 1);
}

/* Where a directory's fsync orders (a journal), a create that changed its
 * new file no more after making its entry fsyncs only the directory
 * (un_sync_made); the new file is fsynced too where it does not, when the
 * create set attributes or fixed the mode after the entry, and when an
 * UNCHECKED create truncated an existing file. */
static void test_sync_made_dir_only(void **state)
{
	struct fx *fx = *state;
	struct un_sattr mtime = {.set_mtime = true, .mtime = {.tv_nsec = UTIME_NOW}};
	mode_t mask = umask(022);
	struct un_obj *d;
	struct stat st;

	t_file(fx, "u/d/x", "data");
	w_export(fx);
	d = walk(fx, "d");
	fx->ex->dirsync_orders = true;
	made_fsyncs(fx, d, "a", 0644, true, NULL, 0);
	made_fsyncs(fx, d, "b", 0644, true, &mtime, 1);
	made_fsyncs(fx, d, "c", 0666, true, NULL, 1); /* the umask took 022 */
	made_fsyncs(fx, d, "x", 0644, false, &(struct un_sattr){.set_size = true}, 1);
	fx->ex->dirsync_orders = false;
	made_fsyncs(fx, d, "e", 0644, true, NULL, 1);
	umask(mask);
	assert_int_equal(stat(t_path(fx, "u/d/c"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0666);
	un_obj_put(d);
}

/* Threads creating and removing the same few names of one upper-only
 * directory, whose changes take the directory's lock shared and a lock of
 * their name (dir.c, ns_lock_name): afterwards every name the directory
 * holds resolves, by lookup and by its id, to the file there with the id
 * its create answered, and every other name is absent: the table followed
 * each name's changes in order.  The upper's filesystem hands a removed
 * inode number out again at once, so a create's lookup often meets a
 * remove of its name still queued (test_lookup_after_queued_remove). */
struct churn {
	struct fx *fx;
	struct un_obj *dir;
	unsigned seed;
	int rc;
	size_t made;	/* creates that succeeded: */
	ino_t ino[400]; /* the file each made */
	un_id id[400];	/* and the id it answered */
};

static void *churn_names(void *arg)
{
	struct churn *c = arg;
	struct un_obj *o;
	char name[8];
	int err;

	for (int i = 0; i < 400 && !c->rc; i++) {
		snprintf(name, sizeof(name), "n%u", rand_r(&c->seed) % 6);
		o = NULL;
		err = rand_r(&c->seed) % 2 ? un_create(ASYNC_CX, c->fx->ex, c->dir, name,
						       0644, true, NULL, &o)
					   : un_remove(ASYNC_CX, c->fx->ex, c->dir, name);
		if (!err && o) {
			struct stat st;

			if (fstat(o->inst[0].fd, &st))
				c->rc = -errno;
			c->ino[c->made] = st.st_ino;
			c->id[c->made++] = un_obj_id(o);
		}
		un_obj_put(o);
		if (err && err != -EEXIST && err != -ENOENT)
			c->rc = err;
	}
	return NULL;
}

/* The id the last create that made inode INO answered (ids only grow; an
 * inode number may come back), or UN_ID_NONE. */
static un_id made_id(const struct churn *c, size_t n, ino_t ino)
{
	un_id id = UN_ID_NONE;

	for (size_t t = 0; t < n; t++)
		for (size_t i = 0; i < c[t].made; i++)
			if (c[t].ino[i] == ino && (id == UN_ID_NONE || c[t].id[i] > id))
				id = c[t].id[i];
	return id;
}

static void test_names_side_by_side(void **state)
{
	struct fx *fx = *state;
	struct churn c[4];
	pthread_t th[4];
	struct un_obj *d, *o, *r;
	struct stat st;
	char name[8], rel[16];
	int err;

	t_mkdir(fx, "u/d");
	w_export(fx);
	d = walk(fx, "d");
	for (int t = 0; t < 4; t++) {
		c[t] = (struct churn){.fx = fx, .dir = d, .seed = (unsigned)t + 1};
		assert_int_equal(pthread_create(&th[t], NULL, churn_names, &c[t]), 0);
	}
	for (int t = 0; t < 4; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(c[t].rc, 0);
	}
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		snprintf(rel, sizeof(rel), "u/d/%s", name);
		o = NULL;
		err = un_lookup(fx->ex, d, name, &o);
		if (stat(t_path(fx, rel), &st)) {
			assert_int_equal(err, -ENOENT);
			continue;
		}
		assert_int_equal(err, 0);
		/* the handle its create answered is the one a lookup gives */
		assert_int_equal(un_obj_id(o), made_id(c, 4, st.st_ino));
		assert_int_equal(un_resolve(fx->ex, un_obj_id(o), &r), 0);
		assert_int_equal(un_obj_id(r), un_obj_id(o));
		un_obj_put(r);
		un_obj_put(o);
	}
	un_obj_put(d);
}

/* A remove's table change is committed after its name's lock is dropped
 * (dir.c, step 6), and a file made at once at that name may get the inode
 * number of the one removed (ext4 and xfs reuse a freed inode at once):
 * the lookup of the new file, while the remove is still queued, must not
 * answer the old file's id, which the remove then forgets (node.c
 * invariant 13).  The reuse is made certain here by keeping the inode
 * through a second link while its name is gone. */
static void test_lookup_after_queued_remove(void **state)
{
	struct un_node_name nm = {0, "f", 1};
	struct fx *fx = *state;
	struct un_obj *d, *o = NULL, *o2 = NULL, *r = NULL;
	struct un_node_job job;
	un_id old;

	t_mkdir(fx, "u/d");
	w_export(fx);
	d = walk(fx, "d");
	assert_int_equal(un_create(ASYNC_CX, fx->ex, d, "f", 0644, true, NULL, &o), 0);
	old = un_obj_id(o);
	un_obj_put(o);
	/* un_remove's steps 5 and 6, its job not yet waited for; then the same
	 * inode back at the name, alone again (nlink 1) */
	assert_int_equal(link(t_path(fx, "u/d/f"), t_path(fx, "u/keep")), 0);
	assert_int_equal(unlink(t_path(fx, "u/d/f")), 0);
	nm.parent = d->id;
	un_node_remove_queue(fx->st, fx->ex->root_id, &nm, &job);
	assert_int_equal(link(t_path(fx, "u/keep"), t_path(fx, "u/d/f")), 0);
	assert_int_equal(unlink(t_path(fx, "u/keep")), 0);
	o = NULL;
	assert_int_equal(un_lookup(fx->ex, d, "f", &o), 0);
	assert_int_equal(un_node_job_wait(fx->st, &job), 0);
	assert_int_not_equal(un_obj_id(o), old);
	/* and the id it answered stands after the remove committed */
	assert_int_equal(un_lookup(fx->ex, d, "f", &o2), 0);
	assert_int_equal(un_obj_id(o2), un_obj_id(o));
	assert_int_equal(un_resolve(fx->ex, un_obj_id(o), &r), 0);
	assert_int_equal(un_obj_id(r), un_obj_id(o));
	un_obj_put(r);
	un_obj_put(o2);
	un_obj_put(o);
	un_obj_put(d);
}

static void test_create_verf(void **state)
{
	static const uint8_t v1[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	static const uint8_t v2[8] = {1, 2, 3, 4, 5, 6, 7, 9};
	struct fx *fx = *state;
	struct un_obj *d, *o = NULL, *o2 = NULL;
	struct un_sattr sa = {.set_mode = true,
			      .mode = 0644,
			      .set_mtime = true,
			      .mtime = {.tv_nsec = UTIME_NOW}};

	t_file(fx, "l1/d/exists", "x");
	w_export(fx);
	d = walk(fx, "d");
	assert_int_equal(un_create_verf(SYNC_CX, fx->ex, d, "f", v1, &o), 0);
	assert_int_equal(un_create_verf(SYNC_CX, fx->ex, d, "f", v1, &o2),
			 0); /* retransmit */
	assert_int_equal(un_obj_id(o2), un_obj_id(o));
	un_obj_put(o2);
	assert_int_equal(un_create_verf(SYNC_CX, fx->ex, d, "f", v2, &o2), -EEXIST);
	assert_int_equal(un_create_verf(SYNC_CX, fx->ex, d, "exists", v1, &o2), -EEXIST);
	/* the client's SETATTR replaces the verifier */
	assert_int_equal(un_setattr(SYNC_CX, fx->ex, o, &sa), 0);
	assert_int_equal(un_create_verf(SYNC_CX, fx->ex, d, "f", v1, &o2), -EEXIST);
	un_obj_put(o);
	/* over a white-out too */
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "exists"), 0);
	assert_int_equal(un_create_verf(SYNC_CX, fx->ex, d, "exists", v2, &o), 0);
	assert_int_equal(un_create_verf(SYNC_CX, fx->ex, d, "exists", v2, &o2), 0);
	un_obj_put(o);
	un_obj_put(o2);
	un_obj_put(d);
	assert_int_equal(w_count(fx, "w/work"), 0);
}

static void test_symlink_mknod(void **state)
{
	struct fx *fx = *state;
	struct un_obj *r, *o = NULL;
	struct stat st;
	char buf[64];
	size_t len;

	w_export(fx);
	r = walk(fx, "");
	assert_int_equal(un_symlink(SYNC_CX, fx->ex, r, "ln", "../x/y", &o), 0);
	assert_int_equal(un_readlink(fx->ex, o, buf, sizeof(buf), &len), 0);
	assert_int_equal(len, 6);
	un_obj_put(o);
	assert_int_equal(un_symlink(SYNC_CX, fx->ex, r, "ln2", "", &o), -ENOENT);
	assert_int_equal(un_mknod(SYNC_CX, fx->ex, r, "fifo", S_IFIFO | 0640, 0, 0, &o),
			 0);
	un_obj_put(o);
	assert_int_equal(un_mknod(SYNC_CX, fx->ex, r, "sock", S_IFSOCK | 0600, 0, 0, &o),
			 0);
	un_obj_put(o);
	assert_int_equal(un_mknod(SYNC_CX, fx->ex, r, "null", S_IFCHR | 0666, 1, 3, &o),
			 0);
	assert_int_equal(un_obj_type(o), S_IFCHR);
	un_obj_put(o);
	assert_int_equal(un_mknod(SYNC_CX, fx->ex, r, "wh", S_IFCHR | 0666, 0, 0, &o),
			 -EPERM);
	assert_int_equal(un_mknod(SYNC_CX, fx->ex, r, "reg", S_IFREG | 0666, 0, 0, &o),
			 -EINVAL);
	un_obj_put(r);
	assert_int_equal(lstat(t_path(fx, "u/fifo"), &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0640);
	assert_int_equal(lstat(t_path(fx, "u/null"), &st), 0);
	assert_int_equal(st.st_rdev, makedev(1, 3));
	t_list_eq(fx, "", "fifo,ln,null,sock");
}

static void test_readonly(void **state)
{
	struct fx *fx = *state;
	struct un_obj *r, *o = NULL;

	t_file(fx, "l1/f", "x");
	t_export(fx, "l1", NULL, NULL);
	r = walk(fx, "");
	assert_int_equal(un_create(SYNC_CX, fx->ex, r, "n", 0644, true, NULL, &o),
			 -EROFS);
	assert_int_equal(un_remove(SYNC_CX, fx->ex, r, "f"), -EROFS);
	assert_int_equal(un_rename(SYNC_CX, fx->ex, r, "f", r, "g"), -EROFS);
	un_obj_put(r);
}

/* ---- credentials ---- */

struct as_user {
	struct fx *fx;
	int rc_direct, rc_over;
	uid_t during, after;
};

/* Runs as fsuid/fsgid 4242 on this thread only. */
static void *as_user_main(void *arg)
{
	struct as_user *u = arg;
	struct un_obj *d = NULL, *o = NULL;
	struct un_creds saved, now;

	syscall(SYS_setfsgid, 4242);
	syscall(SYS_setfsuid, 4242);
	un_sys_creds_override(&saved);
	un_sys_creds_current(&now);
	u->during = now.fsuid;
	un_sys_creds_revert(&saved);
	un_sys_creds_current(&now);
	u->after = now.fsuid;
	u->rc_direct = t_walk(u->fx, "d", &d);
	if (!u->rc_direct)
		u->rc_direct =
		    un_create(SYNC_CX, u->fx->ex, d, "direct", 0644, true, NULL, &o);
	un_obj_put(o);
	o = NULL;
	if (!u->rc_direct)
		u->rc_over =
		    un_create(SYNC_CX, u->fx->ex, d, "gone", 0644, true, NULL, &o);
	un_obj_put(o);
	un_obj_put(d);
	return NULL;
}

static void test_creds(void **state)
{
	struct fx *fx = *state;
	struct as_user u = {.fx = fx};
	struct un_obj *d;
	struct stat st;
	pthread_t th;

	t_file(fx, "l2/d/gone", "x");
	w_export(fx);
	d = walk(fx, "d");
	assert_int_equal(un_remove(SYNC_CX, fx->ex, d, "gone"), 0); /* copies d up too */
	un_obj_put(d);
	assert_int_equal(chmod(t_path(fx, "u/d"), 0777), 0);
	pthread_create(&th, NULL, as_user_main, &u);
	pthread_join(th, NULL);
	assert_int_equal(u.during, geteuid());
	assert_int_equal(u.after, 4242);
	assert_int_equal(u.rc_direct, 0);
	assert_int_equal(u.rc_over, 0);
	assert_int_equal(lstat(t_path(fx, "u/d/direct"), &st), 0);
	assert_int_equal(st.st_uid, 4242);
	assert_int_equal(st.st_gid, 4242);
	assert_int_equal(lstat(t_path(fx, "u/d/gone"), &st), 0); /* via the work dir */
	assert_int_equal(st.st_uid, 4242);
	assert_int_equal(st.st_gid, 4242);
}

struct denied {
	struct fx *fx;
	int rm_lower, rm_upper, mkdir_over, rename_wh, write_other, write_own;
	int open_other; /* an UNCHECKED create of d/lower */
};

/* As fsuid/fsgid 4242: what the permissions of the merged tree refuse. */
static void *denied_main(void *arg)
{
	struct denied *d = arg;
	struct un_obj *o = NULL;
	enum un_stable c;

	syscall(SYS_setfsgid, 4242);
	syscall(SYS_setfsuid, 4242);
	d->rm_lower = rm(d->fx, "d", "lower");
	d->rm_upper = rm(d->fx, "d", "upper");
	d->mkdir_over = mkd(d->fx, "d", "gone", 0755);
	d->rename_wh = mv(d->fx, "own", "f", "own", "g");
	d->write_other = t_walk(d->fx, "d/lower", &o);
	if (!d->write_other)
		d->write_other = (int)un_write(d->fx->ex, o, "x", 1, 0, UN_UNSTABLE, &c);
	un_obj_put(o);
	o = NULL;
	d->open_other = t_walk(d->fx, "d", &o);
	if (!d->open_other) {
		struct un_obj *f = NULL;

		d->open_other =
		    un_create(SYNC_CX, d->fx->ex, o, "lower", 0644, false, NULL, &f);
		un_obj_put(f);
	}
	un_obj_put(o);
	o = NULL;
	d->write_own = t_walk(d->fx, "own/g", &o);
	if (!d->write_own)
		d->write_own = (int)un_write(d->fx->ex, o, "x", 1, 0, UN_UNSTABLE, &c);
	un_obj_put(o);
	return NULL;
}

static void test_creds_denied(void **state)
{
	struct fx *fx = *state;
	struct denied d = {.fx = fx};
	pthread_t th;

	t_file(fx, "l2/d/lower", "l");
	t_file(fx, "l2/d/gone", "g");
	t_file(fx, "l2/own/f", "mine");
	assert_int_equal(chown(t_path(fx, "l2/own"), 4242, 4242), 0);
	assert_int_equal(chown(t_path(fx, "l2/own/f"), 4242, 4242), 0);
	t_file(fx, "u/d/upper", "u");
	t_chr0(fx, "u/d/gone");
	assert_int_equal(chmod(t_path(fx, "u/d"), 0755), 0);
	w_export(fx);
	pthread_create(&th, NULL, denied_main, &d);
	pthread_join(th, NULL);
	assert_int_equal(d.rm_lower, -EACCES);	 /* a white-out needs write on d */
	assert_int_equal(d.rm_upper, -EACCES);	 /* the kernel says so */
	assert_int_equal(d.mkdir_over, -EACCES); /* built in the work dir: checked */
	assert_int_equal(d.rename_wh, 0);	 /* own dir: a white-out is left */
	assert_int_equal(d.write_other, -EACCES);
	/* no error (the WRITE that follows gets it), and no copy-up */
	assert_int_equal(d.open_other, 0);
	assert_false(w_exists(fx, "u/d/lower")); /* refused before any copy-up */
	assert_int_equal(d.write_own, 1);
	t_list_eq(fx, "d", "lower,upper");
	t_list_eq(fx, "own", "g");
	assert_true(w_is_whiteout(fx, "u/own/f"));
	assert_int_equal(lstat(t_path(fx, "u/own/g"), &(struct stat){0}), 0);
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* ---- a failure at every step ---- */

/* One change to sweep: SETUP builds the layers, OP makes the change, and the
 * listing of DIR is BEFORE until it succeeds and AFTER from then on. */
struct sweep {
	void (*setup)(struct fx *);
	int (*op)(struct fx *);
	const char *dir, *before, *after;
};

static void sweep_layers(struct fx *fx)
{
	t_file(fx, "l2/d/lower", "l");
	t_file(fx, "l1/d/both", "l");
	t_file(fx, "u/d/both", "u");
	t_file(fx, "l2/d/gone", "g");
	t_chr0(fx, "u/d/gone");
	t_file(fx, "l2/d/sub/x", "x");
	t_chr0(fx, "u/d/sub/x");
	t_mkdir(fx, "u/d/pure");
}

static int sweep_remove(struct fx *fx)
{
	return rm(fx, "d", "lower");
}

static int sweep_remove_both(struct fx *fx)
{
	return rm(fx, "d", "both");
}

static int sweep_rmdir(struct fx *fx)
{
	return rmd(fx, "d", "sub");
}

static int sweep_mkdir_over(struct fx *fx)
{
	return mkd(fx, "d", "gone", 0750);
}

static int sweep_rename_over(struct fx *fx)
{
	return mv(fx, "d", "lower", "d", "gone");
}

static int sweep_rename_dir(struct fx *fx)
{
	return mv(fx, "d", "pure", "d", "sub");
}

static int sweep_link(struct fx *fx)
{
	struct un_obj *o = NULL, *d = NULL;
	int rc = t_walk(fx, "d/lower", &o);

	if (!rc)
		rc = t_walk(fx, "d", &d);
	if (!rc)
		rc = un_link(SYNC_CX, fx->ex, o, d, "gone");

	un_obj_put(o);
	un_obj_put(d);
	return rc;
}

/* A directory of the upper alone (invariant 6 of dir.c). */
static void sweep_upper(struct fx *fx)
{
	t_file(fx, "u/p/a", "a");
	t_chr0(fx, "u/p/gone");
}

static int sweep_create_in(struct fx *fx, const char *name)
{
	struct un_obj *d = NULL, *o = NULL;
	int rc = t_walk(fx, "p", &d);

	if (!rc)
		rc = un_create(SYNC_CX, fx->ex, d, name, 0644, true, NULL, &o);
	un_obj_put(o);
	un_obj_put(d);
	return rc;
}

static int sweep_create_upper(struct fx *fx)
{
	return sweep_create_in(fx, "new");
}

static int sweep_create_upper_over(struct fx *fx)
{
	return sweep_create_in(fx, "gone");
}

static int sweep_remove_upper(struct fx *fx)
{
	return rm(fx, "p", "a");
}

static int sweep_verf(struct fx *fx)
{
	static const uint8_t v[8] = {9, 8, 7, 6, 5, 4, 3, 2};
	struct un_obj *d = NULL, *o = NULL;
	int rc = t_walk(fx, "d", &d);

	if (!rc)
		rc = un_create_verf(SYNC_CX, fx->ex, d, "gone", v, &o);

	un_obj_put(o);
	un_obj_put(d);
	return rc;
}

static void sweep_reset(struct fx *fx, const struct sweep *sw)
{
	static const char *const dirs[] = {"l1", "l2", "u", "w"};
	char p[PATH_MAX];

	t_export_close(fx);
	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s", t_path(fx, dirs[i]));
		t_rm_rf(p);
		t_mkdir(fx, dirs[i]);
	}
	sw->setup(fx);
	t_export(fx, "l1:l2", "u", "w");
}

static void sweep_run(struct fx *fx, const struct sweep *sw)
{
	unsigned long calls;
	int fds;

	sweep_reset(fx, sw);
	fds = t_nfds();
	un_sys_inject_reset();
	assert_int_equal(sw->op(fx), 0);
	calls = un_sys_calls(UN_SYS_ANY);
	t_list_eq(fx, sw->dir, sw->after);
	for (unsigned long n = 1; n <= calls; n++) {
		char *got;
		int rc;

		sweep_reset(fx, sw);
		un_sys_inject_reset();
		un_sys_inject(UN_SYS_ANY, n, EIO);
		rc = sw->op(fx);
		un_sys_inject_reset();
		got = t_list(fx, sw->dir);
		if (strcmp(got, sw->after) && (rc == 0 || strcmp(got, sw->before)))
			fail_msg("call %lu of %lu: rc %d, listing %s", n, calls, rc, got);
		free(got);
		/* A failed change leaves no garbage; a change that succeeded but
		 * could not clean up may (the next export open removes it). */
		if (rc && w_count(fx, "w/work"))
			fail_msg("call %lu of %lu: rc %d, the work dir is not empty", n,
				 calls, rc);
		assert_int_equal(t_nfds(), fds);
		rc = sw->op(fx); /* a retry, unless the change was made */
		t_list_eq(fx, sw->dir, sw->after);
	}
}

static void test_fault_sweeps(void **state)
{
	static const struct sweep sweeps[] = {
	    {sweep_layers, sweep_remove, "d", "both,lower,pure,sub", "both,pure,sub"},
	    {sweep_layers, sweep_remove_both, "d", "both,lower,pure,sub",
	     "lower,pure,sub"},
	    {sweep_layers, sweep_rmdir, "d", "both,lower,pure,sub", "both,lower,pure"},
	    {sweep_layers, sweep_mkdir_over, "d", "both,lower,pure,sub",
	     "both,gone,lower,pure,sub"},
	    {sweep_layers, sweep_rename_over, "d", "both,lower,pure,sub",
	     "both,gone,pure,sub"},
	    {sweep_layers, sweep_rename_dir, "d", "both,lower,pure,sub",
	     "both,lower,sub"},
	    {sweep_layers, sweep_link, "d", "both,lower,pure,sub",
	     "both,gone,lower,pure,sub"},
	    {sweep_layers, sweep_verf, "d", "both,lower,pure,sub",
	     "both,gone,lower,pure,sub"},
	    {sweep_upper, sweep_create_upper, "p", "a", "a,new"},
	    {sweep_upper, sweep_create_upper_over, "p", "a", "a,gone"},
	    {sweep_upper, sweep_remove_upper, "p", "a", ""},
	};

	for (size_t i = 0; i < sizeof(sweeps) / sizeof(sweeps[0]); i++)
		sweep_run(*state, &sweeps[i]);
}

/* ---- against kernel overlayfs ---- */

static void populate(struct fx *fx, const char *side)
{
	char p[PATH_MAX];

#define P(rel) (snprintf(p, sizeof(p), "%s/%s", side, rel), p)
	t_mkdir(fx, P("u"));
	t_mkdir(fx, P("w"));
	t_file(fx, P("l2/d/x"), "x in l2");
	t_file(fx, P("l2/d/y"), "y in l2");
	t_file(fx, P("l1/d/z"), "z in l1");
	t_file(fx, P("l1/f"), "top file");
	t_file(fx, P("l2/e/g"), "g");
	t_mkdir(fx, P("l2/empty"));
	t_mkdir(fx, P("l1/me"));
	t_mkdir(fx, P("l2/me"));
	t_symlink(fx, "f", P("l1/sl"));
	t_file(fx, P("l1/both"), "both in l1");
	t_file(fx, P("l2/both"), "both in l2");
	t_file(fx, P("l2/gone"), "whited out in l1");
	t_chr0(fx, P("l1/gone"));
	t_file(fx, P("l1/op/shown"), "s");
	t_xattr(fx, P("l1/op"), "trusted.overlay.opaque", "y");
	t_file(fx, P("l2/op/hidden"), "h");
#undef P
}

static void oracle(void **state, const struct w_op *ops, size_t n)
{
	if (!w_oracle(*state, populate, ops, n))
		skip();
}

#define ORACLE(state, ops) oracle(state, ops, sizeof(ops) / sizeof(ops[0]))

static void test_oracle_remove(void **state)
{
	static const struct w_op ops[] = {
	    {'u', "f"},	   {'u', "d/x"},	   {'u', "nonexist"},
	    {'u', "d"},	   {'r', "empty"},	   {'r', "me"},
	    {'r', "d"},	   {'u', "d/y"},	   {'u', "d/z"},
	    {'r', "d"},	   {'m', "d", 0, 0755},	   {'c', "d/new", 0, 0640},
	    {'r', "e"},	   {'u', "e/g"},	   {'r', "e"},
	    {'u', "gone"}, {'c', "gone", 0, 0600}, {'u', "op/shown"},
	    {'r', "op"},   {'m', "op", 0, 0700},   {'u', "sl"},
	    {'r', "sl"},   {'u', "both"},	   {'c', "both", 0, 0644},
	};

	ORACLE(state, ops);
}

static void test_oracle_rename(void **state)
{
	static const struct w_op ops[] = {
	    {'n', "f", "f2"},		{'n', "both", "d/both"}, {'n', "d/x", "d/z"},
	    {'n', "e", "d/e2"},		{'m', "nd", 0, 0700},	 {'c', "nd/in", 0, 0600},
	    {'n', "nd", "d/nd"},	{'n', "d/nd/in", "top"}, {'n', "top", "f2"},
	    {'n', "sl", "d/sl"},	{'n', "d/y", "me"},	 {'m', "m2", 0, 0755},
	    {'n', "m2", "d/y"},		{'n', "m2", "m2/sub"},	 {'n', "zz", "x"},
	    {'n', "f2", "f2"},		{'u', "d/both"},	 {'n', "d/z", "d/both"},
	    {'n', "d/both", "e/g"},	{'n', "m2", "empty"},	 {'n', "d/nd", "me"},
	    {'n', "op/shown", "op/s2"}, {'n', "op", "op3"},	 {'n', "me", "op"},
	};

	ORACLE(state, ops);
}

static void test_oracle_over_whiteouts(void **state)
{
	static const struct w_op ops[] = {
	    {'u', "f"},
	    {'n', "both", "f"},
	    {'n', "d/z", "f"},
	    {'u', "d/x"},
	    {'u', "d/y"},
	    {'m', "nd3", 0, 0755},
	    {'c', "nd3/k", 0, 0644},
	    {'n', "nd3", "d"},
	    {'m', "nd4", 0, 0711},
	    {'r', "e"},
	    {'u', "e/g"},
	    {'r', "e"},
	    {'n', "nd4", "e"},
	    {'s', "e/ln", "../f"},
	    {'f', "e/fifo", 0, 0600},
	    {'n', "e/fifo", "gone"},
	    {'u', "me"},
	    {'m', "me/sub", 0, 0700},
	};

	ORACLE(state, ops);
}

static void test_oracle_link_attrs(void **state)
{
	static const struct w_op ops[] = {
	    {'c', "f", 0, 0644},
	    {'c', "newf", 0, 0640},
	    {'w', "newf", 0, 0, "hello"},
	    {'l', "f", "d/hard"},
	    {'l', "f", "d/hard"},
	    {'w', "d/hard", 0, 2, "XY"},
	    {'u', "f"},
	    {'l', "d/hard", "f"},
	    {'l', "e", "e2"},
	    {'s', "link2", "target"},
	    {'f', "fifo1", 0, 0644},
	    {'m', "d/sub", 0, 0711},
	    {'x', "d/sub", 0, 0700},
	    {'t', "both", 0, 3},
	    {'t', "d/y", 0, 100000},
	    {'x', "e", 0, 0700},
	    {'o', "d/x", 0, 77},
	    {'i', "d/z", 0, 12345},
	    {'w', "e/g", 0, 5, "tail"},
	    {'t', "nonexist", 0, 1},
	    {'w', "d", 0, 0, "x"},
	    {'l', "d/y", "d/x"},
	    {'l', "nope", "n2"},
	    {'x', "op/shown", 0, 0600},
	};

	ORACLE(state, ops);
}

/* SIDE/TO as a second name of SIDE/FROM. */
static void link_in(struct fx *fx, const char *side, const char *from, const char *to)
{
	char a[PATH_MAX], b[PATH_MAX];

	snprintf(a, sizeof(a), "%s/%s/%s", fx->base, side, from);
	snprintf(b, sizeof(b), "%s/%s/%s", fx->base, side, to);
	if (link(a, b))
		fail_msg("link %s: %s", b, strerror(errno));
}

/* Lower files with a second name: l2/a/c = l2/g/c, l1/f = l1/f2. */
static void populate_links(struct fx *fx, const char *side)
{
	char p[PATH_MAX];

#define P(rel) (snprintf(p, sizeof(p), "%s/%s", side, rel), p)
	t_mkdir(fx, P("u"));
	t_mkdir(fx, P("w"));
	t_file(fx, P("l2/a/c"), "two names in l2");
	t_mkdir(fx, P("l2/g"));
	t_file(fx, P("l1/b"), "one name in l1");
	t_file(fx, P("l2/d/x"), "in a lower-only dir");
	t_file(fx, P("l1/f"), "two names in l1");
#undef P
	link_in(fx, side, "l2/a/c", "l2/g/c");
	link_in(fx, side, "l1/f", "l1/f2");
}

/* An UNCHECKED create of an existing file opens it for writing, which
 * overlayfs copies up there and then: the name of a lower pair parts from
 * the other (nlink 1 and 2, each its own file from then on). */
static void test_oracle_create_unchecked(void **state)
{
	static const struct w_op ops[] = {
	    {'C', "a/c", 0, 0600}, {'w', "g/c", 0, 0, "G"}, {'C', "b", 0, 0600},
	    {'C', "d/x", 0, 0644}, {'C', "f2", 0, 0644},    {'C', "f2", 0, 0644},
	    {'w', "f", 0, 0, "F"}, {'C', "new", 0, 0640},   {'C', "new", 0, 0600},
	    {'c', "a/c", 0, 0600},
	};

	if (!w_oracle(*state, populate_links, ops, sizeof(ops) / sizeof(ops[0])))
		skip();
}

/* ---- random sequences against kernel overlayfs ---- */

static void populate_rand(struct fx *fx, const char *side)
{
	char p[PATH_MAX];

#define P(rel) (snprintf(p, sizeof(p), "%s/%s", side, rel), p)
	t_mkdir(fx, P("u"));
	t_mkdir(fx, P("w"));
	t_file(fx, P("l2/a/b"), "l2 a/b");
	t_file(fx, P("l2/a/c"), "l2 a/c");
	t_file(fx, P("l1/a/d"), "l1 a/d");
	t_file(fx, P("l2/b"), "l2 b");
	t_file(fx, P("l2/c/a/b"), "l2 c/a/b");
	t_mkdir(fx, P("l1/c"));
	t_file(fx, P("l2/d"), "l2 d");
	t_chr0(fx, P("l1/d"));
	t_file(fx, P("l1/e"), "l1 e");
	t_mkdir(fx, P("l2/e"));
	t_file(fx, P("l1/f/e"), "l1 f/e");
	t_xattr(fx, P("l1/f"), "trusted.overlay.opaque", "y");
	t_file(fx, P("l2/f/a"), "hidden");
	t_mkdir(fx, P("l2/g"));
	/* two names of one lower inode */
	if (link(t_path(fx, P("l2/a/c")), t_path(fx, P("l2/g/c"))))
		fail_msg("link: %s", strerror(errno));
#undef P
}

static uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static const char *rnd_path(uint64_t *s, char *buf)
{
	static const char names[] = "abcdefg";

	switch (rnd_next(s) % 7) {
	case 0:
	case 1:
	case 2:
		snprintf(buf, 8, "%c", names[rnd_next(s) % 7]);
		break;
	case 6:
		snprintf(buf, 8, "%c/%c/%c", names[rnd_next(s) % 7],
			 names[rnd_next(s) % 7], names[rnd_next(s) % 7]);
		break;
	default:
		snprintf(buf, 8, "%c/%c", names[rnd_next(s) % 7], names[rnd_next(s) % 7]);
	}
	return buf;
}

/* True if OP would make the kernel follow a symlink (in a path, or the
 * object of a write, truncate or chmod), which the engine never does, or
 * open a FIFO (which blocks). */
static bool follows_symlink(const char *mnt, const struct w_op *op)
{
	const char *paths[2] = {op->a, op->op == 'n' || op->op == 'l' ? op->b : NULL};
	char p[PATH_MAX];
	struct stat st;

	for (int k = 0; k < 2 && paths[k]; k++)
		for (const char *sl = strchr(paths[k], '/'); sl;
		     sl = strchr(sl + 1, '/')) {
			snprintf(p, sizeof(p), "%s/%.*s", mnt, (int)(sl - paths[k]),
				 paths[k]);
			if (lstat(p, &st) == 0 && S_ISLNK(st.st_mode))
				return true;
		}
	snprintf(p, sizeof(p), "%s/%s", mnt, op->a);
	return strchr("wtx", op->op) && lstat(p, &st) == 0 &&
	       (S_ISLNK(st.st_mode) || S_ISFIFO(st.st_mode));
}

static struct w_op rnd_op(uint64_t *s, char bufs[2][8])
{
	static const char ops[] = "cccwwwttmmmsfuuurrnnnnnnllxoi";
	static const mode_t modes[] = {0644, 0600, 0755, 0700};
	static const char *const data[] = {"1", "22", "three", "four4", "fifty-five"};
	struct w_op op = {.op = ops[rnd_next(s) % (sizeof(ops) - 1)]};

	op.a = rnd_path(s, bufs[0]);
	if (op.op == 'n' || op.op == 'l')
		op.b = rnd_path(s, bufs[1]);
	if (op.op == 's')
		op.b = rnd_next(s) % 2 ? "../x" : "b";
	op.n = strchr("cmfx", op.op) ? (long)modes[rnd_next(s) % 4]
				     : (long)(rnd_next(s) % 24);
	if (op.op == 'w')
		op.data = data[rnd_next(s) % 5];
	return op;
}

static void random_run(void **state, uint64_t seed, size_t count)
{
	struct w_op *ops = calloc(count, sizeof(*ops));
	char(*bufs)[2][8] = calloc(count, sizeof(*bufs));
	struct fx *fx = *state;
	char mnt[PATH_MAX];
	uint64_t s = seed;
	size_t n = 0;

	/* Generate against the kernel side, dropping what follows symlinks. */
	populate_rand(fx, "C");
	if (w_mount(fx, "C/l1:C/l2", "C/u", "C/w", "mnt")) {
		free(ops), free(bufs);
		skip();
	}
	snprintf(mnt, sizeof(mnt), "%s", t_path(fx, "mnt"));
	for (size_t i = 0; i < count; i++) {
		ops[n] = rnd_op(&s, bufs[n]);
		if (follows_symlink(mnt, &ops[n]))
			continue;
		if (getenv("UN_TEST_DEBUG"))
			print_message("%zu: %c %s %s %lo %d\n", n, ops[n].op, ops[n].a,
				      ops[n].b ? ops[n].b : "-", ops[n].n,
				      w_apply_kernel(mnt, &ops[n]));
		else
			w_apply_kernel(mnt, &ops[n]);
		n++;
	}
	w_umount(fx, "mnt");
	print_message("seed %llu: %zu ops\n", (unsigned long long)seed, n);
	assert_true(w_oracle(fx, populate_rand, ops, n));
	free(ops);
	free(bufs);
}

/* Five fixed seeds; UN_TEST_SEEDS=N adds the seeds 100..100+N-1 for a
 * longer search (UN_TEST_OPS=M ops each, default 300). */
static void test_oracle_random(void **state)
{
	static const uint64_t seeds[] = {1, 7, 42, 1234567, 0xdeadbeef};
	const char *more = getenv("UN_TEST_SEEDS"), *ops = getenv("UN_TEST_OPS");
	size_t extra = more ? strtoul(more, NULL, 10) : 0;
	size_t count = ops ? strtoul(ops, NULL, 10) : 300;

	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]) + extra; i++) {
		w_teardown(state);
		w_setup(state);
		random_run(state, i < 5 ? seeds[i] : 100 + (i - 5), count);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    W_TEST(test_remove_kinds),
	    W_TEST(test_remove_parent_chain),
	    W_TEST(test_xattr_whiteouts),
	    W_TEST(test_mkdir_over_whiteout_opaque),
	    W_TEST(test_mkdir_sgid_mode),
	    W_TEST(test_whiteout_owner_sgid),
	    W_TEST(test_rmdir),
	    W_TEST(test_rename_files),
	    W_TEST(test_rename_dirs),
	    W_TEST(test_rename_opaque_enotempty),
	    W_TEST(test_rename_dir_cost),
	    W_TEST(test_rename_over_whiteout_dir),
	    W_TEST(test_link),
	    W_TEST(test_link_rename_remove),
	    W_TEST(test_link_names),
	    W_TEST(test_create),
	    W_TEST(test_upper_only),
	    W_TEST(test_create_merged_objects),
	    W_TEST(test_upper_only_cost),
	    W_TEST(test_sync_shared),
	    W_TEST(test_sync_shared_error),
	    W_TEST(test_sync_made_dir_only),
	    W_TEST(test_names_side_by_side),
	    W_TEST(test_lookup_after_queued_remove),
	    W_TEST(test_create_verf),
	    W_TEST(test_symlink_mknod),
	    W_TEST(test_readonly),
	    W_TEST(test_creds),
	    W_TEST(test_creds_denied),
	    W_TEST(test_fault_sweeps),
	    W_TEST(test_oracle_remove),
	    W_TEST(test_oracle_rename),
	    W_TEST(test_oracle_over_whiteouts),
	    W_TEST(test_oracle_link_attrs),
	    W_TEST(test_oracle_create_unchecked),
	    W_TEST(test_oracle_random),
	};

	/* One test run again and again, as a flaky one needs: a glob. */
	cmocka_set_test_filter(getenv("UN_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
