/* SPDX-License-Identifier: Apache-2.0 */
/* test_lookup.c - lookup across layers, objects and their attributes, data
 * and links, export checks, and failures injected through the sys seam. */
#include "test_un.h"

#include <pthread.h>

static void layers(struct fx *fx, const char *names)
{
	char list[256], *save = NULL;

	snprintf(list, sizeof(list), "%s", names);
	for (char *t = strtok_r(list, ":", &save); t; t = strtok_r(NULL, ":", &save))
		t_mkdir(fx, t);
}

static void test_order_and_shadowing(void **state)
{
	struct fx *fx = *state;
	char buf[64];

	layers(fx, "u:w:l1:l2:l3");
	t_file(fx, "l1/f", "one");
	t_file(fx, "l2/f", "two");
	t_file(fx, "l3/f", "three");
	t_file(fx, "l2/g", "g2");
	t_file(fx, "l3/g", "g3");
	t_file(fx, "l3/h", "h3");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	assert_int_equal(t_read(fx, "f", buf, sizeof(buf)), 3);
	assert_string_equal(buf, "one");
	t_read(fx, "g", buf, sizeof(buf));
	assert_string_equal(buf, "g2");
	t_read(fx, "h", buf, sizeof(buf));
	assert_string_equal(buf, "h3");
	assert_int_equal(t_lookup_rc(fx, "nope"), -ENOENT);

	t_file(fx, "u/f", "upper");
	t_export(fx, "l1:l2:l3", "u", "w");
	t_read(fx, "f", buf, sizeof(buf));
	assert_string_equal(buf, "upper");
	t_read(fx, "g", buf, sizeof(buf));
	assert_string_equal(buf, "g2");
}

static void test_merge_depth(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	struct un_attr a;
	char buf[64];

	t_file(fx, "l1/a/b/c/x", "x1");
	t_file(fx, "l2/a/b/c/y", "y2");
	t_file(fx, "l3/a/b/z", "z3");
	t_file(fx, "l3/a/b/c/x", "x3");
	t_file(fx, "l3/only/deep/file", "d");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	t_read(fx, "a/b/c/x", buf, sizeof(buf));
	assert_string_equal(buf, "x1");
	t_read(fx, "a/b/c/y", buf, sizeof(buf));
	assert_string_equal(buf, "y2");
	t_read(fx, "a/b/z", buf, sizeof(buf));
	assert_string_equal(buf, "z3");
	t_list_eq(fx, "a/b/c", "x,y");
	t_list_eq(fx, "a/b", "c,z");

	/* A merged dir reports nlink 1; a dir of one layer its own count. */
	assert_int_equal(t_walk(fx, "a/b", &o), 0);
	assert_int_equal(o->ninst, 3);
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	assert_int_equal(a.nlink, 1);
	assert_true(S_ISDIR(a.mode));
	un_obj_put(o);
	assert_int_equal(t_walk(fx, "only", &o), 0);
	assert_int_equal(o->ninst, 1);
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	assert_int_equal(a.nlink, 3);
	un_obj_put(o);
}

/* A change of a lower directory's opaque flag, xattr or OCI marker, shows
 * at the next lookup although opaque.c remembered the flag (settle time 0
 * here, so the memo holds the flag at once; each change waits out a
 * timestamp tick, which the real settle time does for it). */
static void test_opaque_memo_follows_changes(void **state)
{
	struct fx *fx = *state;

	un_lookup_test_settle_ns(0);
	t_file(fx, "l1/d/a", "a");
	t_file(fx, "l2/d/b", "b");
	t_export(fx, "l1:l2", NULL, NULL);
	usleep(20000);
	assert_int_equal(t_lookup_rc(fx, "d/b"), 0);
	assert_int_equal(t_lookup_rc(fx, "d/b"), 0); /* from the memo */
	t_xattr(fx, "l1/d", "trusted.overlay.opaque", "y");
	assert_int_equal(t_lookup_rc(fx, "d/b"), -ENOENT);
	assert_int_equal(t_lookup_rc(fx, "d/a"), 0);
	usleep(20000);
	assert_int_equal(lremovexattr(t_path(fx, "l1/d"), "trusted.overlay.opaque"), 0);
	assert_int_equal(t_lookup_rc(fx, "d/b"), 0);
	usleep(20000);
	t_file(fx, "l1/d/.wh..wh..opq", "");
	assert_int_equal(t_lookup_rc(fx, "d/b"), -ENOENT);
	usleep(20000);
	t_rm(fx, "l1/d/.wh..wh..opq");
	assert_int_equal(t_lookup_rc(fx, "d/b"), 0);
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

static void test_file_hides_dir_below(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;

	t_file(fx, "l1/a", "file");
	t_file(fx, "l2/a/x", "below");
	t_export(fx, "l1:l2", NULL, NULL);
	assert_int_equal(t_walk(fx, "a", &o), 0);
	assert_int_equal(un_obj_type(o), S_IFREG);
	un_obj_put(o);
	assert_int_equal(t_lookup_rc(fx, "a/x"), -ENOTDIR);
}

static void test_dir_above_file(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;

	t_file(fx, "l1/a/y", "y");
	t_file(fx, "l2/a", "file");
	t_file(fx, "l3/a/z", "z");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	assert_int_equal(t_walk(fx, "a", &o), 0);
	assert_int_equal(un_obj_type(o), S_IFDIR);
	assert_int_equal(o->ninst, 1); /* the file below ends the merge */
	un_obj_put(o);
	assert_int_equal(t_lookup_rc(fx, "a/z"), -ENOENT);
	t_list_eq(fx, "a", "y");
}

static void test_symlinks_not_followed(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	char buf[64];
	size_t len;

	t_symlink(fx, "/etc", "l1/etc");
	t_symlink(fx, "..", "l1/d/up");
	t_symlink(fx, "../../..", "l1/d/upup");
	t_file(fx, "l2/s/inner", "lower");
	t_symlink(fx, "/tmp", "l1/s");
	t_export(fx, "l1:l2", NULL, NULL);

	assert_int_equal(t_walk(fx, "etc", &o), 0);
	assert_int_equal(un_obj_type(o), S_IFLNK);
	assert_int_equal(un_readlink(fx->ex, o, buf, sizeof(buf), &len), 0);
	assert_int_equal(len, 4);
	assert_memory_equal(buf, "/etc", 4);
	un_obj_put(o);
	assert_int_equal(t_lookup_rc(fx, "etc/passwd"), -ENOTDIR);
	assert_int_equal(t_lookup_rc(fx, "d/up/d"), -ENOTDIR);
	assert_int_equal(t_lookup_rc(fx, "d/upup/etc"), -ENOTDIR);
	/* A symlink above a directory hides it like any non-directory. */
	assert_int_equal(t_lookup_rc(fx, "s/inner"), -ENOTDIR);
	assert_int_equal(t_walk(fx, "s", &o), 0);
	assert_int_equal(un_obj_type(o), S_IFLNK);
	un_obj_put(o);
}

/* The same on a kernel without openat2. */
static void test_symlinks_not_followed_openat(void **state)
{
	un_sys_test_no_openat2(true);
	test_symlinks_not_followed(state);
	un_sys_test_no_openat2(false);
}

static void test_name_validation(void **state)
{
	struct fx *fx = *state;
	struct un_obj *root, *o;
	char name[300];

	t_file(fx, "l1/f", "x");
	t_export(fx, "l1", NULL, NULL);
	assert_int_equal(un_root(fx->ex, &root), 0);
	assert_int_equal(un_lookup(fx->ex, root, "", &o), -EINVAL);
	assert_int_equal(un_lookup(fx->ex, root, "a/b", &o), -EINVAL);
	assert_int_equal(un_lookup(fx->ex, root, "/", &o), -EINVAL);
	memset(name, 'n', sizeof(name));
	name[256] = '\0';
	assert_int_equal(un_lookup(fx->ex, root, name, &o), -ENAMETOOLONG);
	name[255] = '\0';
	assert_int_equal(un_lookup(fx->ex, root, name, &o), -ENOENT);
	assert_int_equal(un_lookup(fx->ex, root, "f", &o), 0);
	struct un_obj *f = o;
	assert_int_equal(un_lookup(fx->ex, f, "x", &o), -ENOTDIR);
	assert_int_equal(un_lookup(fx->ex, f, ".", &o), -ENOTDIR);
	un_obj_put(f);
	un_obj_put(root);
}

static void test_dots(void **state)
{
	struct fx *fx = *state;
	struct un_obj *root, *b, *o;

	t_file(fx, "l1/a/b/f", "x");
	t_file(fx, "l2/a/b/g", "y");
	t_export(fx, "l1:l2", NULL, NULL);
	assert_int_equal(un_root(fx->ex, &root), 0);
	assert_int_equal(un_obj_parent_id(root), un_obj_id(root));
	assert_int_equal(un_lookup(fx->ex, root, "..", &o), 0);
	assert_int_equal(un_obj_id(o), un_obj_id(root));
	un_obj_put(o);
	assert_int_equal(un_lookup(fx->ex, root, ".", &o), 0);
	assert_ptr_equal(o, root);
	un_obj_put(o);

	assert_int_equal(t_walk(fx, "a/b", &b), 0);
	assert_int_equal(un_obj_parent_id(b), t_id(fx, "a"));
	assert_int_equal(un_lookup(fx->ex, b, "..", &o), 0);
	assert_int_equal(un_obj_id(o), t_id(fx, "a"));
	assert_int_equal(o->ninst, 2); /* a full merged object, not a stub */
	un_obj_put(o);
	un_obj_put(b);
	un_obj_put(root);
}

static void test_getattr(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	struct un_attr a;
	struct stat st;

	t_file(fx, "l1/f", "12345");
	t_chr0(fx, "l2/dev-not-wh"); /* a 0:0 device at the bottom is still a white-out */
	t_export(fx, "l1:l2", NULL, NULL);
	assert_int_equal(t_walk(fx, "f", &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	assert_int_equal(stat(t_path(fx, "l1/f"), &st), 0);
	assert_int_equal(a.fileid, un_obj_id(o));
	assert_int_equal(a.fsid, un_export_id(fx->ex));
	assert_int_equal(a.size, 5);
	assert_int_equal(a.mode, st.st_mode);
	assert_int_equal(a.uid, st.st_uid);
	assert_int_equal(a.nlink, 1);
	assert_int_equal(a.mtime.tv_sec, st.st_mtim.tv_sec);
	assert_int_equal(a.mtime.tv_nsec, st.st_mtim.tv_nsec);
	un_obj_put(o);
	assert_int_equal(t_lookup_rc(fx, "dev-not-wh"), -ENOENT);
}

static void test_readlink(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	char buf[8];
	size_t len;

	t_symlink(fx, "12345678", "l1/ln");
	t_file(fx, "l1/f", "x");
	t_export(fx, "l1", NULL, NULL);
	assert_int_equal(t_walk(fx, "ln", &o), 0);
	assert_int_equal(un_readlink(fx->ex, o, buf, 7, &len), -ENAMETOOLONG);
	assert_int_equal(un_readlink(fx->ex, o, buf, 8, &len), 0);
	assert_int_equal(len, 8);
	assert_memory_equal(buf, "12345678", 8);
	un_obj_put(o);
	assert_int_equal(t_walk(fx, "f", &o), 0);
	assert_int_equal(un_readlink(fx->ex, o, buf, 8, &len), -EINVAL);
	un_obj_put(o);
}

static void test_read_eof(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	char buf[32];
	bool eof;

	t_file(fx, "l1/f", "0123456789");
	t_file(fx, "l1/empty", "");
	t_symlink(fx, "f", "l1/ln");
	t_mkdir(fx, "l1/d");
	t_export(fx, "l1", NULL, NULL);
	assert_int_equal(t_walk(fx, "f", &o), 0);
	assert_int_equal(un_read(fx->ex, o, buf, 10, 0, &eof), 10);
	assert_true(eof);
	assert_int_equal(un_read(fx->ex, o, buf, 5, 0, &eof), 5);
	assert_false(eof);
	assert_memory_equal(buf, "01234", 5);
	assert_int_equal(un_read(fx->ex, o, buf, 5, 5, &eof), 5);
	assert_true(eof);
	assert_memory_equal(buf, "56789", 5);
	assert_int_equal(un_read(fx->ex, o, buf, 32, 3, &eof), 7);
	assert_true(eof);
	assert_int_equal(un_read(fx->ex, o, buf, 5, 20, &eof), 0);
	assert_true(eof);
	assert_int_equal(un_read(fx->ex, o, buf, 5, UINT64_MAX - 2, &eof), 0);
	assert_true(eof);
	un_obj_put(o);
	assert_int_equal(t_walk(fx, "empty", &o), 0);
	eof = false;
	assert_int_equal(un_read(fx->ex, o, buf, 5, 0, &eof), 0);
	assert_true(eof);
	un_obj_put(o);
	assert_int_equal(t_walk(fx, "ln", &o), 0);
	assert_int_equal(un_read(fx->ex, o, buf, 5, 0, &eof), -EINVAL);
	un_obj_put(o);
	assert_int_equal(t_walk(fx, "d", &o), 0);
	assert_int_equal(un_read(fx->ex, o, buf, 5, 0, &eof), -EISDIR);
	un_obj_put(o);
}

static void test_statfs(void **state)
{
	struct fx *fx = *state;
	struct un_statfs s;

	t_mkdir(fx, "l1");
	t_export(fx, "l1", NULL, NULL);
	assert_int_equal(un_statfs(fx->ex, &s), 0);
	assert_true(s.tbytes > 0 && s.tbytes >= s.fbytes && s.fbytes >= s.abytes);
	assert_int_equal(s.namemax, 255);
	assert_false(un_export_writable(fx->ex));
	assert_string_equal(un_export_path(fx->ex), "/");
}

static void expect_export_error(struct fx *fx, const char *lowers, const char *upper,
				const char *work, int rc, const char *want)
{
	char err[512] = "", exp[512];

	assert_int_equal(t_export_try(fx, lowers, upper, work, err, sizeof(err)), rc);
	snprintf(exp, sizeof(exp), want, fx->base, fx->base);
	assert_string_equal(err, exp);
	assert_null(fx->ex);
}

static void test_export_errors(void **state)
{
	struct fx *fx = *state;
	char err[256];

	t_mkdir(fx, "l1/inner");
	t_mkdir(fx, "u/sub");
	t_mkdir(fx, "w");
	t_file(fx, "file", "x");
	expect_export_error(fx, "missing", NULL, NULL, -ENOENT,
			    "lowerdir %s/missing: no such directory");
	expect_export_error(fx, "file", NULL, NULL, -ENOTDIR,
			    "lowerdir %s/file: not a directory");
	expect_export_error(fx, "l1", "l1/inner", "w", -EINVAL,
			    "upperdir %s/l1/inner is inside lowerdir %s/l1");
	expect_export_error(fx, "u/sub", "u", "w", -EINVAL,
			    "lowerdir %s/u/sub is inside upperdir %s/u");
	expect_export_error(fx, "l1", "l1", "w", -EINVAL,
			    "upperdir %s/l1 is the same directory as lowerdir %s/l1");
	expect_export_error(fx, "l1", "u", "u/sub", -EINVAL,
			    "workdir %s/u/sub is inside upperdir %s/u");
	expect_export_error(fx, "l1", "u", NULL, -EINVAL,
			    "upperdir %s/u needs a workdir");
	expect_export_error(fx, "l1", "u", "missing", -ENOENT,
			    "workdir %s/missing: no such directory");

	/* A workdir on another filesystem (/proc is one on any Linux). */
	const char *low[] = {t_path(fx, "l1")};
	char up[PATH_MAX];
	snprintf(up, sizeof(up), "%s", t_path(fx, "u"));
	struct un_export_cfg cfg = {.path = "/",
				    .upperdir = up,
				    .workdir = "/proc",
				    .lowerdirs = low,
				    .nlower = 1};
	assert_int_equal(un_export_open(fx->st, &cfg, &fx->ex, err, sizeof(err)), -EXDEV);
	assert_non_null(
	    strstr(err, "workdir /proc is not on the same filesystem as upperdir"));
	cfg.nlower = 0;
	assert_int_equal(un_export_open(fx->st, &cfg, &fx->ex, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "no lowerdir given");

	/* A good stack opens; its id follows from the path alone. */
	t_export(fx, "l1", "u", "w");
	assert_true(un_export_writable(fx->ex));
	uint32_t id = un_export_id(fx->ex);
	assert_int_not_equal(id, 0);
	cfg = (struct un_export_cfg){.path = "/", .lowerdirs = low, .nlower = 1};
	struct un_export *ex2, *ex3;
	assert_int_equal(un_export_open(fx->st, &cfg, &ex2, err, sizeof(err)), 0);
	assert_int_equal(un_export_id(ex2), id);
	cfg.path = "/other";
	assert_int_equal(un_export_open(fx->st, &cfg, &ex3, err, sizeof(err)), 0);
	assert_int_not_equal(un_export_id(ex3), id);
	un_export_close(ex2);
	un_export_close(ex3);
}

static void test_resolve(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	un_id id, root;

	t_file(fx, "l1/a/b/c", "x");
	t_file(fx, "l2/a/d", "y");
	t_export(fx, "l1:l2", NULL, NULL);
	id = t_id(fx, "a/b/c");
	root = t_id(fx, "");
	assert_int_equal(un_resolve(fx->ex, id, &o), 0);
	assert_int_equal(un_obj_id(o), id);
	assert_int_equal(un_obj_type(o), S_IFREG);
	assert_int_equal(un_obj_parent_id(o), t_id(fx, "a/b"));
	un_obj_put(o);
	assert_int_equal(un_resolve(fx->ex, root, &o), 0);
	assert_int_equal(o->ninst, 2);
	un_obj_put(o);
	assert_int_equal(un_resolve(fx->ex, 0, &o), -ESTALE);
	assert_int_equal(un_resolve(fx->ex, 999999, &o), -ESTALE);
	assert_int_equal(un_resolve(fx->ex, t_id(fx, "a/d"), &o), 0);
	un_obj_put(o);
}

/* un_resolve of ID: 0 and the object's number of instances, or -errno. */
static int resolve_ninst(struct fx *fx, un_id id)
{
	struct un_obj *o;
	int rc = un_resolve(fx->ex, id, &o);

	if (rc)
		return rc;
	rc = (int)o->ninst;
	un_obj_put(o);
	return rc;
}

/* The resolve cache (rcache.c) follows changes an administrator makes in
 * the lower layers of a path it remembers: an opaque flag set on a
 * directory above, a white-out beside it, a directory renamed, each at the
 * next resolve (settle time 0 here; each change waits out a tick). */
static void test_resolve_cache_follows_changes(void **state)
{
	struct fx *fx = *state;
	un_id f, b;

	un_lookup_test_settle_ns(0);
	t_file(fx, "l1/a/x", "x");
	t_file(fx, "l2/a/b/f", "f");
	t_file(fx, "l3/a/b/g", "g");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	f = t_id(fx, "a/b/f");
	b = t_id(fx, "a/b");
	usleep(20000);
	assert_int_equal(resolve_ninst(fx, f), 1); /* remembers a and a/b */
	assert_int_equal(resolve_ninst(fx, b), 2);
	assert_int_equal(resolve_ninst(fx, b), 2); /* from the cache */
	assert_int_equal(resolve_ninst(fx, f), 1);
	/* l2/a opaque: a/b is l2's alone */
	usleep(20000);
	t_xattr(fx, "l2/a", "trusted.overlay.opaque", "y");
	assert_int_equal(resolve_ninst(fx, b), 1);
	assert_int_equal(resolve_ninst(fx, f), 1);
	usleep(20000);
	assert_int_equal(lremovexattr(t_path(fx, "l2/a"), "trusted.overlay.opaque"), 0);
	assert_int_equal(resolve_ninst(fx, b), 2);
	/* an OCI white-out of b in l1: a/b is gone */
	usleep(20000);
	t_file(fx, "l1/a/.wh.b", "");
	assert_int_equal(resolve_ninst(fx, f), -ESTALE);
	assert_int_equal(resolve_ninst(fx, b), -ESTALE);
	usleep(20000);
	t_rm(fx, "l1/a/.wh.b");
	assert_int_equal(resolve_ninst(fx, b), 2);
	/* l2's b renamed away: a/b is l3's alone, and f is gone */
	usleep(20000);
	assert_int_equal(rename(t_path(fx, "l2/a/b"), t_path(fx, "l2/a/moved")), 0);
	assert_int_equal(resolve_ninst(fx, f), -ESTALE);
	/* (a directory whose top instance changed is another node) */
	assert_int_equal(resolve_ninst(fx, t_id(fx, "a/b")), 1);
}

/* A directory's entry whose lookup read every instance of its parent
 * (rcache.c rule 2) misses once the parent has an instance more below
 * them, which that lookup would read too: a/b gains l3's instance, and a
 * name remembered absent in a/b appears in it (settle time 0; each change
 * waits out a tick). */
static void test_resolve_cache_parent_gains_layer(void **state)
{
	struct fx *fx = *state;
	un_id b;

	un_lookup_test_settle_ns(0);
	t_file(fx, "l1/a/b/x", "x");
	t_file(fx, "l2/a/b/y", "y");
	t_mkdir(fx, "l3");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	b = t_id(fx, "a/b");
	usleep(20000);
	assert_int_equal(resolve_ninst(fx, b), 2); /* remembers a and a/b */
	assert_int_equal(resolve_ninst(fx, b), 2);
	assert_int_equal(t_lookup_rc(fx, "a/b/z"), -ENOENT); /* remembered absent */
	usleep(20000);
	t_file(fx, "l3/a/b/z", "z");
	assert_int_equal(resolve_ninst(fx, b), 3);
	assert_int_equal(t_lookup_rc(fx, "a/b/z"), 0);
	t_list_eq(fx, "a/b", "x,y,z");
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* Opens and getxattr calls of one resolve of ID to a view (no dup of the
 * cache's descriptors), which gives NINST instances. */
static void resolve_calls(struct fx *fx, un_id id, int ninst, unsigned long *opens,
			  unsigned long *xattrs)
{
	unsigned long o = un_sys_calls(UN_SYS_OPEN), x = un_sys_calls(UN_SYS_XATTR);
	struct un_obj *v;

	assert_int_equal(un_resolve_view(fx->ex, id, &v), 0);
	assert_int_equal(v->ninst, ninst);
	un_obj_put(v);
	*opens = un_sys_calls(UN_SYS_OPEN) - o;
	*xattrs = un_sys_calls(UN_SYS_XATTR) - x;
}

#define SETTLE_TEST_NS 100000000ll /* 100 ms */
#define SETTLE_WAIT_US 150000

/* A directory whose own instance's ctime moves (entries made and removed
 * in it) stays in the resolve cache (rcache.c rule 11): a hop re-reads
 * only the instance's opaque flag (the two getxattr of an upper instance)
 * and opens nothing, whether the entry was made settled or not; once the
 * ctime has settled the entry is replaced and a hop reads nothing again.
 * A view of the directory gives its fresh stat. */
/* The settle time by default (settle_of): a directory whose ctime has
 * nanoseconds (this filesystem's) is remembered once UN_SETTLE_FINE_NS
 * has passed since its last change, not a whole second. */
static void test_resolve_cache_settle_by_ctime(void **state)
{
	struct fx *fx = *state;
	unsigned long opens, xattrs;
	struct stat st;
	un_id d;

	un_lookup_test_settle_ns(-1);
	t_file(fx, "u/d/x", "x");
	t_mkdir(fx, "l1");
	t_mkdir(fx, "w");
	t_export(fx, "l1", "u", "w");
	d = t_id(fx, "d");
	assert_int_equal(stat(t_path(fx, "u"), &st), 0);
	assert_true(st.st_ctim.tv_nsec != 0); /* (1 in 10^9 it is not) */
	usleep(UN_SETTLE_FINE_NS / 1000 + 50000);
	resolve_calls(fx, d, 1, &opens, &xattrs); /* remembers d */
	resolve_calls(fx, d, 1, &opens, &xattrs);
	assert_int_equal(opens, 0);
	/* changed now: not settled, so not remembered anew */
	t_rm(fx, "u/d/x");
	t_export(fx, "l1", "u", "w");
	t_file(fx, "u/y", "y"); /* the parent of d changes: d's hop misses */
	resolve_calls(fx, d, 1, &opens, &xattrs);
	resolve_calls(fx, d, 1, &opens, &xattrs);
	assert_true(opens > 0);
	un_lookup_test_settle_ns(LLONG_MAX);
}

/* The times un_getattr gives a directory merged from PARTS (layer dirs,
 * ":"-separated, top-most first), from a stat of each (object.c rule 6). */
static void merged_times(struct fx *fx, const char *parts, struct un_attr *out)
{
	struct un_dir_times t = {0};
	char list[256], *save = NULL;
	struct stat st;

	snprintf(list, sizeof(list), "%s", parts);
	for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
		assert_int_equal(stat(t_path(fx, p), &st), 0);
		un_dir_times_add(&t, st.st_dev, st.st_ino,
				 st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec,
				 st.st_ctim.tv_sec * 1000000000ll + st.st_ctim.tv_nsec);
	}
	un_dir_times_put(&t, out);
}

static void test_resolve_cache_dir_ctime_moves(void **state)
{
	struct fx *fx = *state;
	unsigned long opens, xattrs;
	struct un_obj *o, *f;
	struct un_attr a, b;
	un_id d;

	un_lookup_test_settle_ns(SETTLE_TEST_NS);
	t_file(fx, "u/d/x", "x");
	t_file(fx, "l1/d/y", "y");
	t_mkdir(fx, "l2");
	t_mkdir(fx, "w");
	t_export(fx, "l1:l2", "u", "w");
	d = t_id(fx, "d");
	usleep(SETTLE_WAIT_US);
	resolve_calls(fx, d, 2, &opens, &xattrs); /* remembers d, settled */
	assert_true(opens > 0);
	resolve_calls(fx, d, 2, &opens, &xattrs);
	assert_int_equal(opens, 0);
	assert_int_equal(xattrs, 0);
	/* a name made in d's upper instance: only its flag is read again */
	t_file(fx, "u/d/new", "n");
	for (int i = 0; i < 2; i++) {
		resolve_calls(fx, d, 2, &opens, &xattrs);
		assert_int_equal(opens, 0);
		assert_int_equal(xattrs, 2);
	}
	/* settled: the entry is made again with the new ctime */
	usleep(SETTLE_WAIT_US);
	resolve_calls(fx, d, 2, &opens, &xattrs);
	assert_int_equal(xattrs, 2);
	resolve_calls(fx, d, 2, &opens, &xattrs);
	assert_int_equal(opens, 0);
	assert_int_equal(xattrs, 0);
	/* an entry first made while d's ctime moves (RC_UNSETTLED) */
	t_export(fx, "l1:l2", "u", "w");
	t_rm(fx, "u/d/new");
	resolve_calls(fx, d, 2, &opens, &xattrs);
	assert_true(opens > 0);
	resolve_calls(fx, d, 2, &opens, &xattrs);
	assert_int_equal(opens, 0);
	assert_int_equal(xattrs, 2);
	/* a create and a remove through the engine: the view's stat is the
	 * upper instance's as it is after them */
	assert_int_equal(un_resolve(fx->ex, d, &o), 0);
	assert_int_equal(un_create(SYNC_CX, fx->ex, o, "c", 0644, true, NULL, &f), 0);
	un_obj_put(f);
	un_obj_put(o);
	resolve_calls(fx, d, 2, &opens, &xattrs);
	assert_int_equal(opens, 0);
	assert_int_equal(un_resolve(fx->ex, d, &o), 0);
	assert_int_equal(un_remove(SYNC_CX, fx->ex, o, "c"), 0);
	un_obj_put(o);
	assert_int_equal(un_resolve_view(fx->ex, d, &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	un_obj_put(o);
	merged_times(fx, "u/d:l1/d", &b);
	assert_int_equal(a.ctime.tv_sec, b.ctime.tv_sec);
	assert_int_equal(a.ctime.tv_nsec, b.ctime.tv_nsec);
	assert_int_equal(a.mtime.tv_nsec, b.mtime.tv_nsec);
	t_list_eq(fx, "d", "x,y");
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* Directory DIR (instances u/DIR, l1/DIR) gets the opaque xattr on its
 * upper instance, set on the layer with no other change: the next resolve
 * and lookup see the lower entries gone, with SETTLE as the settle time.
 * TOUCH: a name is made in u/DIR just before the cache remembers it, so
 * the entry is made with its ctime unsettled and the xattr comes within
 * the same timestamp tick. */
static void opaque_set_on_upper(struct fx *fx, const char *dir, long long settle,
				bool touch)
{
	char p[64], want[64];
	un_id d;

	un_lookup_test_settle_ns(settle);
	d = t_id(fx, dir);
	if (touch) {
		snprintf(p, sizeof(p), "u/%s/t", dir);
		t_file(fx, p, "t");
	}
	assert_int_equal(resolve_ninst(fx, d), 2);
	assert_int_equal(resolve_ninst(fx, d), 2);
	snprintf(p, sizeof(p), "%s/y", dir);
	assert_int_equal(t_lookup_rc(fx, p), 0);
	if (!touch)
		usleep(20000); /* a settled ctime: the change waits out a tick */
	snprintf(p, sizeof(p), "u/%s", dir);
	t_xattr(fx, p, "trusted.overlay.opaque", "y");
	assert_int_equal(resolve_ninst(fx, d), 1);
	snprintf(p, sizeof(p), "%s/y", dir);
	assert_int_equal(t_lookup_rc(fx, p), -ENOENT);
	snprintf(want, sizeof(want), "%sx", touch ? "t," : "");
	t_list_eq(fx, dir, want);
}

static void test_resolve_cache_opaque_on_upper(void **state)
{
	struct fx *fx = *state;
	static const char *const dirs[] = {"d0", "d1", "d2", "d3"};
	char p[64];

	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "u/%s/x", dirs[i]);
		t_file(fx, p, "x");
		snprintf(p, sizeof(p), "l1/%s/y", dirs[i]);
		t_file(fx, p, "y");
	}
	t_mkdir(fx, "l2");
	t_mkdir(fx, "w");
	t_export(fx, "l1:l2", "u", "w");
	usleep(SETTLE_WAIT_US);
	opaque_set_on_upper(fx, "d0", 0, false);
	opaque_set_on_upper(fx, "d1", LLONG_MAX, false);
	opaque_set_on_upper(fx, "d2", SETTLE_TEST_NS, true);
	opaque_set_on_upper(fx, "d3", 0, true);
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* The opaque flags of lower instances, re-read when only their ctime
 * moved: an OCI ".wh..wh..opq" made in a middle instance cuts the stack
 * there; the flag of the last instance, which no lookup reads (no layer of
 * the parent below it), changes nothing; removing the flag that cut the
 * stack brings the instances below back (settle time 0; each change
 * waits out a tick). */
static void test_resolve_cache_lower_opaque(void **state)
{
	struct fx *fx = *state;
	unsigned long opens, xattrs;
	un_id d;

	un_lookup_test_settle_ns(0);
	t_file(fx, "l1/d/x", "x");
	t_file(fx, "l2/d/y", "y");
	t_file(fx, "l3/d/z", "z");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	d = t_id(fx, "d");
	usleep(20000);
	assert_int_equal(resolve_ninst(fx, d), 3);
	usleep(20000);
	t_file(fx, "l2/d/.wh..wh..opq", "");
	assert_int_equal(resolve_ninst(fx, d), 2);
	t_list_eq(fx, "d", "x,y");
	usleep(20000);
	t_rm(fx, "l2/d/.wh..wh..opq");
	assert_int_equal(resolve_ninst(fx, d), 3);
	usleep(20000);
	t_xattr(fx, "l3/d", "trusted.overlay.opaque", "y");
	resolve_calls(fx, d, 3, &opens, &xattrs);
	assert_int_equal(opens, 0);
	assert_int_equal(xattrs, 0); /* nothing read of the last */
	usleep(20000);
	t_xattr(fx, "l2/d", "trusted.overlay.opaque", "y");
	assert_int_equal(resolve_ninst(fx, d), 2);
	assert_int_equal(resolve_ninst(fx, d), 2);
	usleep(20000);
	assert_int_equal(lremovexattr(t_path(fx, "l2/d"), "trusted.overlay.opaque"), 0);
	assert_int_equal(resolve_ninst(fx, d), 3);
	t_list_eq(fx, "d", "x,y,z");
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* A directory's entry holds across changes of the node table elsewhere
 * (every removal moves its epoch) while the table still gives its node the
 * entry's parent and name (rcache.c rule 1): after a removal in another
 * directory a resolve opens and reads nothing, after one in the directory
 * itself it reads its upper instance's flag.  A rename in the table alone
 * (no layer changes) is not taken: the node is looked for under its new
 * name (settle time 0). */
static void test_resolve_cache_table_changes(void **state)
{
	struct fx *fx = *state;
	unsigned long opens, xattrs;
	struct un_node_name from, to;
	struct un_obj *o;
	un_id d, e;

	un_lookup_test_settle_ns(0);
	t_file(fx, "u/d/x", "x");
	t_file(fx, "u/d/z", "z");
	t_file(fx, "l1/d/y", "y");
	t_file(fx, "u/e/f", "f");
	t_mkdir(fx, "l2");
	t_mkdir(fx, "w");
	t_export(fx, "l1:l2", "u", "w");
	d = t_id(fx, "d");
	e = t_id(fx, "e");
	usleep(20000);
	resolve_calls(fx, d, 2, &opens, &xattrs); /* remembers d */
	assert_int_equal(un_resolve(fx->ex, e, &o), 0);
	assert_int_equal(un_remove(SYNC_CX, fx->ex, o, "f"), 0);
	un_obj_put(o);
	resolve_calls(fx, d, 2, &opens, &xattrs);
	assert_int_equal(opens, 0);
	assert_int_equal(xattrs, 0);
	usleep(20000);
	assert_int_equal(un_resolve(fx->ex, d, &o), 0);
	assert_int_equal(un_remove(SYNC_CX, fx->ex, o, "z"), 0);
	un_obj_put(o);
	resolve_calls(fx, d, 2, &opens, &xattrs);
	assert_int_equal(opens, 0);
	assert_int_equal(xattrs, 2);
	t_list_eq(fx, "d", "x,y");
	from = (struct un_node_name){fx->ex->root_id, "d", 1};
	to = (struct un_node_name){fx->ex->root_id, "d2", 2};
	assert_int_equal(un_node_rename(fx->st, d, &from, &to), 0);
	assert_int_equal(resolve_ninst(fx, d), -ESTALE);
	assert_int_equal(un_node_rename(fx->st, d, &to, &from), 0);
	assert_int_equal(resolve_ninst(fx, d), 2);
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* How many opens resolving ID (0 expected) takes. */
static unsigned long resolve_opens(struct fx *fx, un_id id)
{
	unsigned long before = un_sys_calls(UN_SYS_OPEN);

	assert_int_equal(resolve_ninst(fx, id), 1);
	return un_sys_calls(UN_SYS_OPEN) - before;
}

/* The resolve cache's entries of non-directories, the name index and the
 * names remembered absent (rcache.c rules 6 to 9) follow changes
 * made directly in the layers, at the next call: a file replaced by
 * another inode, a white-out made over it (an OCI one in a layer above, the
 * xattr form on an empty file), a rename in its layer, a name that appears
 * in a layer below (settle time 0; each change waits out a tick). */
static void test_file_cache_follows_changes(void **state)
{
	struct fx *fx = *state;
	unsigned long cold;
	un_id f, e;

	un_lookup_test_settle_ns(0);
	t_file(fx, "l1/a/x", "x");
	t_file(fx, "l2/a/f", "f");
	t_file(fx, "l2/a/e", "");
	t_mkdir(fx, "l3/a");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	f = t_id(fx, "a/f");
	e = t_id(fx, "a/e");
	usleep(20000);
	cold = resolve_opens(fx, f);		  /* remembers a and a/f */
	assert_true(resolve_opens(fx, f) < cold); /* one open: the cache's */
	assert_int_equal(t_lookup_rc(fx, "a/f"), 0);
	assert_int_equal(t_lookup_rc(fx, "a/nope"), -ENOENT); /* remembered absent */
	assert_int_equal(resolve_ninst(fx, e), 1);
	/* the xattr white-out on the empty file: its ctime, not its parent's */
	usleep(20000);
	t_xattr(fx, "l2/a/e", "trusted.overlay.whiteout", "");
	assert_int_equal(resolve_ninst(fx, e), -ESTALE);
	assert_int_equal(t_lookup_rc(fx, "a/e"), -ENOENT);
	/* an OCI white-out in the layer above */
	usleep(20000);
	t_file(fx, "l1/a/.wh.f", "");
	assert_int_equal(resolve_ninst(fx, f), -ESTALE);
	assert_int_equal(t_lookup_rc(fx, "a/f"), -ENOENT);
	usleep(20000);
	t_rm(fx, "l1/a/.wh.f");
	assert_int_equal(resolve_ninst(fx, f), 1);
	assert_int_equal(t_lookup_rc(fx, "a/f"), 0);
	/* replaced by another inode in its layer: the old node is stale */
	usleep(20000);
	t_file(fx, "l2/a/f.new", "new");
	assert_int_equal(rename(t_path(fx, "l2/a/f.new"), t_path(fx, "l2/a/f")), 0);
	assert_int_equal(resolve_ninst(fx, f), -ESTALE);
	f = t_id(fx, "a/f");
	usleep(20000);
	assert_int_equal(resolve_ninst(fx, f), 1);
	assert_int_equal(resolve_ninst(fx, f), 1);
	/* renamed in its layer */
	usleep(20000);
	assert_int_equal(rename(t_path(fx, "l2/a/f"), t_path(fx, "l2/a/g")), 0);
	assert_int_equal(resolve_ninst(fx, f), -ESTALE);
	assert_int_equal(t_lookup_rc(fx, "a/f"), -ENOENT);
	assert_int_equal(t_lookup_rc(fx, "a/g"), 0);
	/* a name remembered absent appears in the bottom layer */
	t_file(fx, "l3/a/nope", "n");
	assert_int_equal(t_lookup_rc(fx, "a/nope"), 0);
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* Opens the export "/" over LOWER alone with its memory bound to MEM
 * (un_export_cfg.mem_bytes), closing the one open before. */
static void export_bounded(struct fx *fx, const char *lower, size_t mem)
{
	const char *lowers[] = {t_path(fx, lower)};
	struct un_export_cfg cfg = {
	    .path = "/", .lowerdirs = lowers, .nlower = 1, .mem_bytes = mem};
	char err[256];

	t_export_close(fx);
	if (un_export_open(fx->st, &cfg, &fx->ex, err, sizeof(err)))
		fail_msg("un_export_open: %s", err);
}

/* Resolves IDS[0..N-1]; how many hops the resolve cache could not serve
 * (a hit of the directory above counts too: only the misses tell). */
static unsigned long cache_misses(struct fx *fx, const un_id *ids, size_t n)
{
	struct un_stats before, after;

	assert_int_equal(un_state_stats(fx->st, &before), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(resolve_ninst(fx, ids[i]), 1);
	assert_int_equal(un_state_stats(fx->st, &after), 0);
	return (unsigned long)(after.rcache_misses - before.rcache_misses);
}

/* The resolve cache's buckets grow with its entries from a few pages, and
 * with a bound on the export's memory it stays within it, still serving
 * some (rcache.c rules 12, 13; settle time 0). */
static void test_resolve_cache_grows_within_bound(void **state)
{
	enum { N = 1500, BOUND = 64 << 10 };
	static un_id ids[N];
	struct fx *fx = *state;
	size_t empty, full;
	unsigned long misses;
	char rel[32];

	un_lookup_test_settle_ns(0);
	for (int i = 0; i < N; i++) {
		snprintf(rel, sizeof(rel), "l1/a/f%d", i);
		t_file(fx, rel, "");
	}
	usleep(20000);
	t_export(fx, "l1", NULL, NULL);
	empty = un_export_mem(fx->ex);
	assert_true(empty < 16384);
	for (int i = 0; i < N; i++) {
		snprintf(rel, sizeof(rel), "a/f%d", i);
		ids[i] = t_id(fx, rel);
	}
	misses = cache_misses(fx, ids, N);
	full = un_export_mem(fx->ex);
	assert_true(atomic_load(&fx->ex->rc.nb) >= 4 * UN_RC_BUCKETS_MIN);
	assert_true(full > empty + N * 100);
	assert_true(misses <= N / 10);
	export_bounded(fx, "l1", BOUND);
	for (int i = 0; i < N; i++) {
		snprintf(rel, sizeof(rel), "a/f%d", i);
		ids[i] = t_id(fx, rel);
	}
	misses = cache_misses(fx, ids, N);
	/* about: the export's own part grows by a page rounding, an entry may
	 * overshoot */
	assert_true(un_export_mem(fx->ex) <= BOUND + 4096);
	assert_true(un_export_mem(fx->ex) > BOUND / 2);
	assert_true(misses > N / 2 && misses < N);
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* Threads resolving the same names at once while the buckets grow under
 * them (rcache.c rule 12): each finds its objects, a miss at worst. */
enum { GROW_N = 2000, GROW_THREADS = 4, GROW_ROUNDS = 3 };

struct grow_arg {
	struct fx *fx;
	const un_id *ids;
	unsigned off, bad;
	pthread_t t;
};

static void *grow_run(void *arg)
{
	struct grow_arg *a = arg;
	struct un_obj *o;

	for (unsigned r = 0; r < GROW_ROUNDS; r++)
		for (unsigned i = 0; i < GROW_N; i++) {
			unsigned k = (i * 7 + a->off * 499 + r) % GROW_N;

			if (un_resolve(a->fx->ex, a->ids[k], &o)) {
				a->bad++;
				continue;
			}
			a->bad += un_obj_id(o) != a->ids[k] || un_obj_type(o) != S_IFREG;
			un_obj_put(o);
		}
	return NULL;
}

static void test_resolve_cache_grows_under_walks(void **state)
{
	static un_id ids[GROW_N];
	struct grow_arg a[GROW_THREADS];
	struct fx *fx = *state;
	unsigned bad = 0;
	char rel[32];

	un_lookup_test_settle_ns(0);
	for (int i = 0; i < GROW_N; i++) {
		snprintf(rel, sizeof(rel), "l1/d%d/f", i % 50);
		t_mkdir(fx, rel);
		snprintf(rel, sizeof(rel), "l1/d%d/f/%d", i % 50, i);
		t_file(fx, rel, "");
	}
	usleep(20000);
	t_export(fx, "l1", NULL, NULL);
	for (int i = 0; i < GROW_N; i++) {
		snprintf(rel, sizeof(rel), "d%d/f/%d", i % 50, i);
		ids[i] = t_id(fx, rel);
	}
	t_export(fx, "l1", NULL, NULL); /* a cold cache again */
	for (unsigned k = 0; k < GROW_THREADS; k++) {
		a[k] = (struct grow_arg){.fx = fx, .ids = ids, .off = k};
		assert_int_equal(pthread_create(&a[k].t, NULL, grow_run, &a[k]), 0);
	}
	for (unsigned k = 0; k < GROW_THREADS; k++) {
		pthread_join(a[k].t, NULL);
		bad += a[k].bad;
	}
	assert_int_equal(bad, 0);
	assert_true(atomic_load(&fx->ex->rc.nb) >= 8 * UN_RC_BUCKETS_MIN);
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* Stat calls of one resolve of ID to a view, and the view's mode (or
 * -errno). */
static int resolve_stats(struct fx *fx, un_id id, unsigned long *stats)
{
	unsigned long s = un_sys_calls(UN_SYS_STAT);
	struct un_obj *v;
	struct un_attr a;
	int rc = un_resolve_view(fx->ex, id, &v);

	if (!rc) {
		rc = un_getattr(fx->ex, v, &a);
		un_obj_put(v);
	}
	*stats = un_sys_calls(UN_SYS_STAT) - s;
	return rc ? rc : (int)(a.mode & 07777);
}

/* The directory stat memo (watch.c rule 3): a walk through directories the
 * resolve cache holds stats none of them while their watches report
 * nothing, and a change made in a layer behind the server's back shows at
 * the next call: a mode changed (an event about the dir itself), a
 * white-out made over the directory in the upper (an entry of its
 * parent's), and a stat older than the TTL is taken again. */
static void test_dir_stat_memo(void **state)
{
	struct fx *fx = *state;
	unsigned long stats;
	un_id d;

	un_lookup_test_settle_ns(SETTLE_TEST_NS);
	t_file(fx, "l1/a/d/x", "x");
	t_mkdir(fx, "u/a");
	t_mkdir(fx, "w");
	assert_int_equal(chmod(t_path(fx, "l1/a/d"), 0755), 0);
	t_export(fx, "l1", "u", "w");
	d = t_id(fx, "a/d");
	usleep(SETTLE_WAIT_US);
	assert_int_equal(resolve_stats(fx, d, &stats), 0755); /* remembers a, d */
	assert_int_equal(resolve_stats(fx, d, &stats), 0755);
	assert_int_equal(resolve_stats(fx, d, &stats), 0755);
	assert_int_equal(stats, 0);
	assert_int_equal(chmod(t_path(fx, "l1/a/d"), 0700), 0);
	assert_int_equal(resolve_stats(fx, d, &stats), 0700);
	assert_true(stats > 0);
	usleep(SETTLE_WAIT_US);
	assert_int_equal(resolve_stats(fx, d, &stats), 0700);
	assert_int_equal(resolve_stats(fx, d, &stats), 0700);
	assert_int_equal(stats, 0);
	usleep(1100000); /* UN_DIRSTAT_TTL_NS */
	assert_int_equal(resolve_stats(fx, d, &stats), 0700);
	assert_true(stats > 0);
	t_chr0(fx, "u/a/d"); /* a white-out over d */
	assert_int_equal(resolve_stats(fx, d, &stats), -ESTALE);
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* A view of a non-directory that the resolve cache finds (rcache.c rule
 * 15) opens nothing: its name is stat'ed in the parent's instance, and a
 * change of the file (its size) or of its name (another file put there)
 * shows at the next call. */
static void test_file_view_opens_nothing(void **state)
{
	struct fx *fx = *state;
	unsigned long opens, xattrs, stats;
	struct un_obj *v;
	struct un_attr a;
	un_id f;
	int rc;

	un_lookup_test_settle_ns(SETTLE_TEST_NS);
	t_file(fx, "l1/a/f", "four");
	assert_int_equal(chmod(t_path(fx, "l1/a/f"), 0644), 0);
	t_mkdir(fx, "u");
	t_mkdir(fx, "w");
	t_export(fx, "l1", "u", "w");
	f = t_id(fx, "a/f");
	usleep(SETTLE_WAIT_US);
	resolve_calls(fx, f, 1, &opens, &xattrs); /* remembers a and f */
	resolve_calls(fx, f, 1, &opens, &xattrs);
	assert_int_equal(opens, 0);
	assert_int_equal(resolve_stats(fx, f, &stats), 0644);
	assert_int_equal(stats, 0);	 /* the file memo (watch.c rule 7) */
	t_file(fx, "l1/a/f", "seven!!"); /* the same inode, rewritten */
	assert_int_equal(un_resolve_view(fx->ex, f, &v), 0);
	assert_int_equal(un_getattr(fx->ex, v, &a), 0);
	assert_int_equal(a.size, 7);
	un_obj_put(v);
	assert_int_equal(chmod(t_path(fx, "l1/a/f"), 0600), 0);
	assert_int_equal(resolve_stats(fx, f, &stats), 0600);
	t_rm(fx, "l1/a/f");
	t_file(fx, "l1/a/f", "x"); /* another file under the name */
	assert_int_equal(chmod(t_path(fx, "l1/a/f"), 0640), 0);
	/* Never the old file's stat: the node stands with the new size, or is
	 * stale, as the new file is or is not taken for the old object (the
	 * outcome varies between runs here, with the inode number the
	 * filesystem hands out, it seems). */
	rc = un_resolve_view(fx->ex, f, &v);
	if (rc == -ESTALE)
		goto out;
	assert_int_equal(rc, 0);
	assert_int_equal(un_getattr(fx->ex, v, &a), 0);
	assert_int_equal(a.size, 1);
	un_obj_put(v);
	/* a second link, made where no watch of a/ sees it: shown once the
	 * TTL passed, and never remembered, each call stats (last: whether a
	 * lookup saw the two links decides which node the name keeps) */
	assert_int_equal(link(t_path(fx, "l1/a/f"), t_path(fx, "l1/f2")), 0);
	usleep(1100000);
	assert_int_equal(resolve_stats(fx, f, &stats), 0640);
	assert_int_equal(resolve_stats(fx, f, &stats), 0640);
	assert_true(stats > 0);
out:
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* The size un_getattr gives of NAME in the view of directory DIR (or
 * -errno), looked up as the server's LOOKUP does: views both. */
static long long view_size(struct fx *fx, un_id dir, const char *name)
{
	struct un_obj *d, *o;
	struct un_attr a;
	int rc;

	rc = un_resolve_view(fx->ex, dir, &d);
	if (rc)
		return rc;
	rc = un_lookup_view(fx->ex, d, name, &o);
	un_obj_put(d);
	if (rc)
		return rc;
	rc = un_getattr(fx->ex, o, &a);
	un_obj_put(o);
	return rc ? rc : (long long)a.size;
}

/* Views (rcache.c rule 10) borrow the cache's descriptors (none left open
 * when they go) and show a change made in a layer at the next call: a
 * file's new size, a white-out, a name that appears. */
static void test_views_follow_changes(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	struct un_attr a;
	un_id d, f;
	int fds;

	un_lookup_test_settle_ns(0);
	t_file(fx, "l1/d/x", "x");
	t_file(fx, "l2/d/f", "ff");
	t_export(fx, "l1:l2", NULL, NULL);
	d = t_id(fx, "d");
	f = t_id(fx, "d/f");
	usleep(20000);
	for (int i = 0; i < 3; i++) /* cold, then from the cache */
		assert_int_equal(view_size(fx, d, "f"), 2);
	fds = t_nfds();
	assert_int_equal(un_resolve_view(fx->ex, f, &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	assert_int_equal(a.size, 2);
	un_obj_put(o);
	t_file(fx, "l2/d/f", "fff"); /* same inode, new size */
	assert_int_equal(view_size(fx, d, "f"), 3);
	assert_int_equal(un_resolve_view(fx->ex, f, &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	assert_int_equal(a.size, 3);
	un_obj_put(o);
	assert_int_equal(view_size(fx, d, "new"), -ENOENT);
	usleep(20000);
	t_file(fx, "l2/d/new", "n");
	t_chr0(fx, "l1/d/f");
	assert_int_equal(view_size(fx, d, "new"), 1);
	assert_int_equal(view_size(fx, d, "f"), -ENOENT);
	assert_int_equal(un_resolve_view(fx->ex, f, &o), -ESTALE);
	assert_int_equal(view_size(fx, d, "new"), 1);
	assert_int_equal(t_nfds(), fds); /* the cache's d, made again */
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* The attributes of directory ID, through a view (from its walk's
 * stamps) and through an object of its own (a stat of each part): the
 * same, returned in *OUT. */
static void dir_attr(struct fx *fx, un_id id, struct un_attr *out)
{
	struct un_attr b;
	struct un_obj *o;

	assert_int_equal(un_resolve_view(fx->ex, id, &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, out), 0);
	un_obj_put(o);
	assert_int_equal(un_resolve(fx->ex, id, &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, &b), 0);
	un_obj_put(o);
	assert_memory_equal(out, &b, sizeof(b));
}

static bool times_equal(const struct un_attr *a, const struct un_attr *b)
{
	return a->mtime.tv_sec == b->mtime.tv_sec &&
	       a->mtime.tv_nsec == b->mtime.tv_nsec &&
	       a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* A directory whose entry would take the resolve cache past its bound on
 * descriptors (here 1) is remembered bare (rcache.c rule 14): a view of it
 * opens nothing and holds no descriptor, gives what un_resolve's whole
 * object gives (a stat of each part, object.c rule 6), and a name is
 * looked up in it; a walk through it, and un_resolve, look it up.  Each
 * change shows at the next resolve: a name added to a lower part (its
 * ctime), a part made in the middle layer (the parent's), the opaque flag
 * set on the upper part, which moves only that part's own ctime (settle
 * time 0; each change waits out a tick). */
static void test_resolve_cache_bare_dirs(void **state)
{
	struct fx *fx = *state;
	unsigned long opens, xattrs;
	struct un_obj *v, *o;
	struct un_attr a, b;
	struct stat st;
	un_id d;

	un_lookup_test_settle_ns(0);
	un_rc_test_fds_max(1);
	t_file(fx, "u/d/x", "x");
	t_file(fx, "l1/d/y", "y");
	t_file(fx, "l3/d/z", "z");
	t_mkdir(fx, "l2");
	t_mkdir(fx, "w");
	t_export(fx, "l1:l2:l3", "u", "w");
	d = t_id(fx, "d");
	usleep(20000);
	resolve_calls(fx, d, 3, &opens, &xattrs); /* remembers d, bare */
	resolve_calls(fx, d, 3, &opens, &xattrs);
	assert_int_equal(opens, 0);
	assert_int_equal(un_resolve_view(fx->ex, d, &v), 0);
	assert_true(v->bare);
	assert_int_equal(un_lookup_view(fx->ex, v, "z", &o), 0);
	assert_int_equal(un_obj_id(o), t_id(fx, "d/z"));
	un_obj_put(o);
	un_obj_put(v);
	assert_int_equal(un_resolve(fx->ex, d, &o), 0);
	assert_false(o->bare);
	un_obj_put(o);
	assert_int_equal(resolve_ninst(fx, t_id(fx, "d/y")), 1);
	dir_attr(fx, d, &a);
	merged_times(fx, "u/d:l1/d:l3/d", &b);
	assert_true(times_equal(&a, &b));
	assert_int_equal(a.nlink, 1);

	usleep(20000);
	t_file(fx, "l3/d/n", "n");
	dir_attr(fx, d, &a);
	merged_times(fx, "u/d:l1/d:l3/d", &b);
	assert_true(times_equal(&a, &b));

	usleep(20000);
	t_file(fx, "l2/d/m", "m");
	assert_int_equal(resolve_ninst(fx, d), 4);
	usleep(20000);
	resolve_calls(fx, d, 4, &opens, &xattrs);
	resolve_calls(fx, d, 4, &opens, &xattrs);
	assert_int_equal(opens, 0);

	usleep(20000);
	t_xattr(fx, "u/d", "trusted.overlay.opaque", "y");
	resolve_calls(fx, d, 1, &opens, &xattrs);
	dir_attr(fx, d, &a);
	assert_int_equal(stat(t_path(fx, "u/d"), &st), 0);
	assert_int_equal(a.ctime.tv_sec, st.st_ctim.tv_sec); /* its own, unmoved */
	assert_int_equal(a.ctime.tv_nsec, st.st_ctim.tv_nsec);
	assert_int_equal(a.nlink, st.st_nlink);
	un_rc_test_fds_max(0);
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* A merged directory's ctime changes with any of its parts (a client
 * trusts its cached listing and the names it found absent while it stays):
 * a name added to the lower part of a directory whose upper part exists,
 * and a lower part swapped for one with the same times; the same parts
 * give the same ctime again after the export is opened anew.  Its seconds
 * are the latest part's; the mtime is the top part's, to the nanosecond
 * (object.c rule 6). */
static void test_merged_dir_times(void **state)
{
	struct fx *fx = *state;
	struct timespec future[2] = {{.tv_sec = 4000000000}, {.tv_sec = 4000000000}};
	struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
	struct un_attr a, b, c;
	struct stat st;
	un_id d;

	un_lookup_test_settle_ns(0);
	t_file(fx, "u/etc/local", "x");
	t_file(fx, "l1/etc/passwd", "p");
	t_file(fx, "l2/etc/passwd", "p");
	t_mkdir(fx, "w");
	assert_int_equal(utimensat(AT_FDCWD, t_path(fx, "l1/etc"), old, 0), 0);
	assert_int_equal(utimensat(AT_FDCWD, t_path(fx, "l2/etc"), old, 0), 0);
	t_export(fx, "l1", "u", "w");
	d = t_id(fx, "etc");
	dir_attr(fx, d, &a);
	assert_int_equal(stat(t_path(fx, "u/etc"), &st), 0);
	assert_int_equal(a.mtime.tv_sec, st.st_mtim.tv_sec); /* the top part's */
	assert_int_equal(a.mtime.tv_nsec, st.st_mtim.tv_nsec);
	assert_int_equal(a.ctime.tv_sec, st.st_ctim.tv_sec); /* the latest */
	merged_times(fx, "u/etc:l1/etc", &b);
	assert_true(times_equal(&a, &b));
	usleep(20000);
	dir_attr(fx, d, &b); /* from the cache, and unchanged */
	assert_true(times_equal(&a, &b));

	/* a name added to the lower part */
	usleep(20000);
	t_file(fx, "l1/etc/new.conf", "n");
	dir_attr(fx, d, &b);
	assert_false(a.ctime.tv_sec == b.ctime.tv_sec &&
		     a.ctime.tv_nsec == b.ctime.tv_nsec);
	assert_int_equal(stat(t_path(fx, "l1/etc"), &st), 0);
	assert_int_equal(b.ctime.tv_sec, st.st_ctim.tv_sec);
	assert_true(a.mtime.tv_sec == b.mtime.tv_sec &&
		    a.mtime.tv_nsec == b.mtime.tv_nsec);

	/* the upper part's times the latest: a lower part swapped for another
	 * whose times equal it (l2/etc is made ctime-older than u/etc) */
	t_file(fx, "l2/etc/new.conf", "n");
	assert_int_equal(utimensat(AT_FDCWD, t_path(fx, "l1/etc"), old, 0), 0);
	assert_int_equal(utimensat(AT_FDCWD, t_path(fx, "l2/etc"), old, 0), 0);
	usleep(20000);
	assert_int_equal(utimensat(AT_FDCWD, t_path(fx, "u/etc"), future, 0), 0);
	t_export(fx, "l1", "u", "w");
	dir_attr(fx, d, &a);
	t_export(fx, "l1", "u", "w"); /* opened again: the same times */
	dir_attr(fx, d, &b);
	assert_true(times_equal(&a, &b));
	t_export(fx, "l2", "u", "w");
	dir_attr(fx, d, &c);
	assert_int_equal(c.mtime.tv_sec, 4000000000); /* as set on the top part */
	assert_int_equal(c.mtime.tv_nsec, 0);
	assert_int_equal(c.ctime.tv_sec, a.ctime.tv_sec);
	assert_false(times_equal(&a, &c));
	t_export(fx, "l1", "u", "w"); /* rolled back: the old times */
	dir_attr(fx, d, &b);
	assert_true(times_equal(&a, &b));
	un_lookup_test_settle_ns(UN_OPAQUE_SETTLE_NS);
}

/* Runs a lookup, a getattr, a read and a readlink of a merged tree. */
static int exercise(struct fx *fx)
{
	struct un_obj *o;
	struct un_attr a;
	char buf[64];
	size_t len;
	bool eof;
	int rc;

	rc = t_walk(fx, "a/b/c", &o);
	if (rc)
		return rc;
	rc = un_getattr(fx->ex, o, &a);
	if (!rc)
		rc = (int)un_read(fx->ex, o, buf, sizeof(buf), 0, &eof);
	un_obj_put(o);
	if (rc < 0)
		return rc;
	rc = t_walk(fx, "ln", &o);
	if (rc)
		return rc;
	rc = un_readlink(fx->ex, o, buf, sizeof(buf), &len);
	un_obj_put(o);
	return rc;
}

static void test_injected_failures(void **state)
{
	static const enum un_sys_op ops[] = {UN_SYS_OPEN, UN_SYS_STAT,	   UN_SYS_XATTR,
					     UN_SYS_READ, UN_SYS_READLINK, UN_SYS_ALLOC,
					     UN_SYS_MDB};
	struct fx *fx = *state;
	int fds, rc;

	t_file(fx, "l1/a/b/c", "data");
	t_file(fx, "l2/a/b/x", "");
	t_file(fx, "l3/a/b/c", "hidden");
	t_mkdir(fx, "l3/a/b/y");
	t_symlink(fx, "target", "l2/ln");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	assert_int_equal(exercise(fx), 0); /* warm: the nodes exist */
	fds = t_nfds();
	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
		unsigned long calls;

		un_sys_inject_reset();
		assert_int_equal(exercise(fx), 0);
		calls = un_sys_calls(ops[k]);
		assert_true(calls > 0); /* every kind is on the path */
		for (unsigned long n = 1; n <= calls; n++) {
			un_sys_inject_reset();
			un_sys_inject(ops[k], n, EIO);
			rc = exercise(fx);
			if (rc != -EIO && rc != -ENOMEM)
				fail_msg("op %zu call %lu: rc %d", k, n, rc);
			assert_int_equal(t_nfds(), fds);
		}
	}
	un_sys_inject_reset();
	assert_int_equal(exercise(fx), 0);
}

static void test_export_open_faults(void **state)
{
	static const enum un_sys_op ops[] = {UN_SYS_OPEN, UN_SYS_STAT, UN_SYS_ALLOC,
					     UN_SYS_MDB};
	struct fx *fx = *state;
	char err[256];
	int fds, rc;

	layers(fx, "u:w:l1:l2");
	/* warm: the layer indexes exist, so every open makes the same calls */
	t_export(fx, "l1:l2", "u", "w");
	t_export_close(fx);
	fds = t_nfds();
	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
		unsigned long calls;

		un_sys_inject_reset();
		t_export(fx, "l1:l2", "u", "w");
		calls = un_sys_calls(ops[k]);
		t_export_close(fx);
		assert_true(calls > 0);
		for (unsigned long n = 1; n <= calls; n++) {
			un_sys_inject_reset();
			un_sys_inject(ops[k], n, EIO);
			err[0] = '\0';
			rc = t_export_try(fx, "l1:l2", "u", "w", err, sizeof(err));
			assert_true(rc == -EIO || rc == -ENOMEM);
			assert_true(err[0] != '\0'); /* always a message */
			assert_null(fx->ex);
			assert_int_equal(t_nfds(), fds);
		}
	}
	un_sys_inject_reset();
	t_export(fx, "l1:l2", "u", "w");
}

static void sh(struct fx *fx, const char *fmt, const char *a, const char *b)
{
	char cmd[3 * PATH_MAX];

	snprintf(cmd, sizeof(cmd), fmt, t_path(fx, a), b ? t_path(fx, b) : "");
	assert_int_equal(system(cmd), 0);
}

/* The object of ID, which must be served from a retired layer, reads
 * WANT and nothing can change it (retire.c rule 4). */
static void retired_reads(struct fx *fx, un_id id, const char *want)
{
	const struct un_sattr sa = {.set_mode = true, .mode = 0600};
	enum un_stable how;
	struct un_obj *o, *root;
	struct un_attr a;
	char buf[64];
	bool eof;
	ssize_t n;

	assert_int_equal(un_resolve(fx->ex, id, &o), 0);
	assert_true(un_obj_retired(o));
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	assert_int_equal(a.fileid, id);
	assert_int_equal(a.size, strlen(want));
	n = un_read(fx->ex, o, buf, sizeof(buf) - 1, 0, &eof);
	assert_int_equal(n, (ssize_t)strlen(want));
	buf[n] = '\0';
	assert_string_equal(buf, want);
	assert_int_equal(un_write(fx->ex, o, "x", 1, 0, UN_FILE_SYNC, &how), -EROFS);
	assert_int_equal(un_setattr(SYNC_CX, fx->ex, o, &sa), -EROFS);
	assert_int_equal(un_root(fx->ex, &root), 0);
	assert_int_equal(un_link(SYNC_CX, fx->ex, o, root, "another"), -EROFS);
	un_obj_put(root);
	un_obj_put(o);
}

/* An export opened again over a new version of its layer (a reload)
 * retires the old one: the old ids of a changed, a removed and a file in
 * a removed directory read the old bytes, read only; the directory's id
 * is stale; the new path is a new node; a shorter retire-time releases
 * the layer (retire.c). */
static void test_retired_layer(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	un_id changed, removed, dir, below;
	char buf[64];

	t_file(fx, "v1/f", "old bytes\n");
	t_file(fx, "v1/g", "removed\n");
	t_file(fx, "v1/d/h", "in dir\n");
	t_symlink(fx, "f", "v1/s");
	t_mkdir(fx, "u");
	t_mkdir(fx, "w");
	t_export(fx, "v1", "u", "w");
	changed = t_id(fx, "f");
	removed = t_id(fx, "g");
	dir = t_id(fx, "d");
	below = t_id(fx, "d/h");
	sh(fx, "cp -a '%s' '%s'", "v1", "v2");
	t_file(fx, "v2/f", "new, longer bytes\n");
	sh(fx, "rm -r '%s' '%s'", "v2/g", "v2/d");
	t_export(fx, "v2", "u", "w");
	retired_reads(fx, changed, "old bytes\n");
	retired_reads(fx, removed, "removed\n");
	retired_reads(fx, below, "in dir\n");
	assert_int_equal(un_resolve_view(fx->ex, dir, &o), -ESTALE);
	assert_true(t_id(fx, "f") != changed);
	assert_int_equal(t_read(fx, "f", buf, sizeof(buf)), 18);
	assert_string_equal(buf, "new, longer bytes\n");
	/* an unchanged symlink is the current one */
	assert_int_equal(un_resolve(fx->ex, t_id(fx, "s"), &o), 0);
	assert_false(un_obj_retired(o));
	un_obj_put(o);
	usleep(1100 * 1000);
	un_state_retire_time(fx->st, 1);
	assert_int_equal(un_resolve(fx->ex, changed, &o), -ESTALE);
	assert_int_equal(un_resolve(fx->ex, below, &o), -ESTALE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_order_and_shadowing),
	    T_TEST(test_merge_depth),
	    T_TEST(test_opaque_memo_follows_changes),
	    T_TEST(test_file_hides_dir_below),
	    T_TEST(test_dir_above_file),
	    T_TEST(test_symlinks_not_followed),
	    T_TEST(test_symlinks_not_followed_openat),
	    T_TEST(test_name_validation),
	    T_TEST(test_dots),
	    T_TEST(test_getattr),
	    T_TEST(test_readlink),
	    T_TEST(test_read_eof),
	    T_TEST(test_statfs),
	    T_TEST(test_export_errors),
	    T_TEST(test_resolve),
	    T_TEST(test_resolve_cache_follows_changes),
	    T_TEST(test_file_cache_follows_changes),
	    T_TEST(test_resolve_cache_grows_within_bound),
	    T_TEST(test_resolve_cache_grows_under_walks),
	    T_TEST(test_resolve_cache_parent_gains_layer),
	    T_TEST(test_resolve_cache_settle_by_ctime),
	    T_TEST(test_dir_stat_memo),
	    T_TEST(test_file_view_opens_nothing),
	    T_TEST(test_resolve_cache_dir_ctime_moves),
	    T_TEST(test_resolve_cache_opaque_on_upper),
	    T_TEST(test_resolve_cache_lower_opaque),
	    T_TEST(test_resolve_cache_table_changes),
	    T_TEST(test_merged_dir_times),
	    T_TEST(test_resolve_cache_bare_dirs),
	    T_TEST(test_views_follow_changes),
	    T_TEST(test_injected_failures),
	    T_TEST(test_export_open_faults),
	    T_TEST(test_retired_layer),
	};

	return cmocka_run_group_tests_name("lookup", tests, NULL, NULL);
}
