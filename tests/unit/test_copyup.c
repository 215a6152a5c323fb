/* SPDX-License-Identifier: Apache-2.0 */
/* test_copyup.c - copy-up: data (FICLONE or copy_file_range), holes, xattrs
 * (not the union's markers), owner/mode/times, the parent chain, every
 * object type, node ids kept, a failure at every step (crash points), and
 * concurrent first writes that copy once. */
#include "test_wr.h"

#include <pthread.h>
#include <sodium.h>

#define MIB (1024 * 1024)

static void set_times(struct fx *fx, const char *rel, time_t at, time_t mt)
{
	struct timespec ts[2] = {{at, 111}, {mt, 222}};

	assert_int_equal(utimensat(AT_FDCWD, t_path(fx, rel), ts, AT_SYMLINK_NOFOLLOW),
			 0);
}

static void write_at(struct fx *fx, const char *rel, const void *buf, size_t n, off_t off)
{
	int fd = open(t_path(fx, rel), O_WRONLY | O_CREAT, 0644);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, n, off), (ssize_t)n);
	close(fd);
}

static void same_attrs(struct fx *fx, const char *a, const char *b)
{
	struct stat sa, sb;

	assert_int_equal(lstat(t_path(fx, a), &sa), 0);
	assert_int_equal(lstat(t_path(fx, b), &sb), 0);
	assert_int_equal(sa.st_mode, sb.st_mode);
	assert_int_equal(sa.st_uid, sb.st_uid);
	assert_int_equal(sa.st_gid, sb.st_gid);
	assert_int_equal(sa.st_mtim.tv_sec, sb.st_mtim.tv_sec);
	assert_int_equal(sa.st_mtim.tv_nsec, sb.st_mtim.tv_nsec);
	if (!S_ISLNK(sa.st_mode) && sa.st_atim.tv_sec != sb.st_atim.tv_sec)
		fail_msg("atime of %s %ld.%09ld, of %s %ld.%09ld", a,
			 (long)sa.st_atim.tv_sec, sa.st_atim.tv_nsec, b,
			 (long)sb.st_atim.tv_sec, sb.st_atim.tv_nsec);
	if (!S_ISDIR(sa.st_mode))
		assert_int_equal(sa.st_size, sb.st_size);
}

static bool same_content(struct fx *fx, const char *a, const char *b)
{
	char ha[64], hb[64];
	int fa = open(t_path(fx, a), O_RDONLY), fb = open(t_path(fx, b), O_RDONLY);

	assert_true(fa >= 0 && fb >= 0);
	w_file_hash(fa, ha, sizeof(ha));
	w_file_hash(fb, hb, sizeof(hb));
	close(fa);
	close(fb);
	return !strcmp(ha, hb);
}

static const uint8_t fcaps[20] = {0x01, 0, 0, 0x02, 0, 0x20};

/* A 3 MiB random file three directories down, with its own owner, mode,
 * times and xattrs, and directories of distinct modes and owners. */
static void deep_lower(struct fx *fx)
{
	static uint8_t data[3 * MIB];

	randombytes_buf(data, sizeof(data));
	t_mkdir(fx, "l2/a/b/c");
	write_at(fx, "l2/a/b/c/f", data, sizeof(data), 0);
	assert_int_equal(chown(t_path(fx, "l2/a/b/c/f"), 1234, 5678), 0);
	assert_int_equal(chmod(t_path(fx, "l2/a/b/c/f"), 0640), 0);
	t_xattr(fx, "l2/a/b/c/f", "user.colour", "blue");
	t_xattr(fx, "l2/a/b/c/f", "trusted.keep", "yes");
	t_xattr(fx, "l2/a", "user.dir", "a");
	/* file capabilities: VFS_CAP_REVISION_2, effective, CAP_NET_RAW */
	assert_int_equal(lsetxattr(t_path(fx, "l2/a/b/c/f"), "security.capability", fcaps,
				   sizeof(fcaps), 0),
			 0);
	assert_int_equal(chmod(t_path(fx, "l2/a"), 0751), 0);
	assert_int_equal(chmod(t_path(fx, "l2/a/b"), 0710), 0);
	assert_int_equal(chmod(t_path(fx, "l2/a/b/c"), 0705), 0);
	assert_int_equal(chown(t_path(fx, "l2/a/b"), 42, 43), 0);
	set_times(fx, "l2/a/b/c/f", 1000000, 2000000);
	set_times(fx, "l2/a/b/c", 3000000, 4000000);
	set_times(fx, "l2/a/b", 5000000, 6000000);
	set_times(fx, "l2/a", 7000000, 8000000);
}

static void test_data_attrs_parents(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o = NULL, *r = NULL;
	un_id id, ida;

	deep_lower(fx);
	t_file(fx, "l1/a/other", "merged");    /* a is merged from l1 and l2 */
	t_xattr(fx, "l1/a", "user.dir", "a1"); /* a's top-most instance is copied */
	w_export(fx);
	id = t_id(fx, "a/b/c/f");
	ida = t_id(fx, "a");
	assert_int_equal(t_walk(fx, "a/b/c/f", &o), 0);
	assert_false(un_obj_upper(fx->ex, o));
	assert_int_equal(un_copyup(fx->ex, NULL, o), 0);
	assert_true(un_obj_upper(fx->ex, o));
	assert_int_equal(un_obj_id(o), id);

	/* The file: owner, mode, times (before a read changes the atime), data,
	 * xattrs; the lower file's atime is untouched by the copy. */
	same_attrs(fx, "l2/a/b/c/f", "u/a/b/c/f");
	{
		struct stat st;

		assert_int_equal(stat(t_path(fx, "l2/a/b/c/f"), &st), 0);
		assert_int_equal(st.st_atim.tv_sec, 1000000);
	}
	assert_true(same_content(fx, "l2/a/b/c/f", "u/a/b/c/f"));
	assert_string_equal(w_xattr(fx, "u/a/b/c/f", "user.colour"), "blue");
	assert_string_equal(w_xattr(fx, "u/a/b/c/f", "trusted.keep"), "yes");
	{ /* kept through the chown of the copy */
		uint8_t caps[32];

		assert_int_equal(lgetxattr(t_path(fx, "u/a/b/c/f"), "security.capability",
					   caps, sizeof(caps)),
				 sizeof(fcaps));
		assert_memory_equal(caps, fcaps, sizeof(fcaps));
	}
	/* The parents, each with its own mode, owner and times, not opaque. */
	same_attrs(fx, "l2/a/b/c", "u/a/b/c");
	same_attrs(fx, "l2/a/b", "u/a/b");
	assert_string_equal(w_xattr(fx, "u/a", "user.dir"), "a1");
	same_attrs(fx, "l1/a", "u/a");
	assert_string_equal(w_xattr(fx, "u/a", "trusted.overlay.opaque"), "");
	assert_int_equal(w_count(fx, "w/work"), 0);
	un_obj_put(o);

	/* The ids stay, and the merge below a goes on. */
	assert_int_equal(t_id(fx, "a/b/c/f"), id);
	assert_int_equal(t_id(fx, "a"), ida);
	assert_int_equal(un_resolve(fx->ex, id, &r), 0);
	assert_true(un_obj_upper(fx->ex, r));
	un_obj_put(r);
	t_list_eq(fx, "a", "b,other");
	/* A second copy-up is a no-op. */
	assert_int_equal(t_walk(fx, "a/b/c/f", &o), 0);
	assert_int_equal(un_copyup(fx->ex, NULL, o), 0);
	un_obj_put(o);
}

static void test_sparse_kept(void **state)
{
	struct fx *fx = *state;
	char block[4096], buf[4096];
	struct un_obj *o = NULL;
	struct stat st;
	bool eof;

	memset(block, 'z', sizeof(block));
	t_mkdir(fx, "l1");
	write_at(fx, "l1/sparse", block, sizeof(block), 0);
	write_at(fx, "l1/sparse", block, sizeof(block), 32 * MIB);
	assert_int_equal(truncate(t_path(fx, "l1/sparse"), 64 * MIB), 0);
	w_export(fx);
	assert_int_equal(t_walk(fx, "sparse", &o), 0);
	assert_int_equal(un_copyup(fx->ex, NULL, o), 0);
	assert_int_equal(stat(t_path(fx, "u/sparse"), &st), 0);
	assert_int_equal(st.st_size, 64 * MIB);
	assert_true((uint64_t)st.st_blocks * 512 < 1 * MIB);
	assert_int_equal(un_read(fx->ex, o, buf, sizeof(buf), 32 * MIB, &eof), 4096);
	assert_memory_equal(buf, block, sizeof(buf));
	assert_int_equal(un_read(fx->ex, o, buf, sizeof(buf), 16 * MIB, &eof), 4096);
	assert_int_equal(buf[0], 0);
	un_obj_put(o);
	assert_true(same_content(fx, "l1/sparse", "u/sparse"));
}

static void test_types(void **state)
{
	static const char *const names[] = {"link", "fifo",  "null",
					    "sock", "empty", "dir"};
	struct fx *fx = *state;
	char target[64];

	t_mkdir(fx, "l1/dir");
	t_symlink(fx, "../some/where", "l1/link");
	assert_int_equal(mkfifo(t_path(fx, "l1/fifo"), 0620), 0);
	assert_int_equal(mknod(t_path(fx, "l1/null"), S_IFCHR | 0666, makedev(1, 3)), 0);
	assert_int_equal(mknod(t_path(fx, "l1/sock"), S_IFSOCK | 0600, 0), 0);
	t_file(fx, "l1/empty", "");
	set_times(fx, "l1/link", 10, 20);
	w_export(fx);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		struct un_obj *o;
		char l[32], u[32];

		assert_int_equal(t_walk(fx, names[i], &o), 0);
		assert_int_equal(un_copyup(fx->ex, NULL, o), 0);
		un_obj_put(o);
		snprintf(l, sizeof(l), "l1/%s", names[i]);
		snprintf(u, sizeof(u), "u/%s", names[i]);
		same_attrs(fx, l, u);
	}
	assert_int_equal(readlink(t_path(fx, "u/link"), target, sizeof(target)), 13);
	assert_memory_equal(target, "../some/where", 13);
	assert_false(w_is_whiteout(fx, "u/null"));
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* The union's own markers stay behind: a lower opaque dir copied up merges. */
static void test_markers_not_copied(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o = NULL;

	t_file(fx, "l1/d/top", "t");
	t_xattr(fx, "l1/d", "trusted.overlay.opaque", "y");
	t_xattr(fx, "l1/d", "user.overlay.foo", "bar");
	t_xattr(fx, "l1/d", "user.mine", "kept");
	t_file(fx, "l2/d/hidden", "h");
	w_export(fx);
	t_list_eq(fx, "d", "top");
	assert_int_equal(t_walk(fx, "d", &o), 0);
	assert_int_equal(un_copyup(fx->ex, NULL, o), 0);
	assert_int_equal(o->ninst, 2); /* the upper on top of the opaque lower */
	un_obj_put(o);
	assert_string_equal(w_xattr(fx, "u/d", "trusted.overlay.opaque"), "");
	assert_string_equal(w_xattr(fx, "u/d", "user.overlay.foo"), "");
	assert_string_equal(w_xattr(fx, "u/d", "user.mine"), "kept");
	t_list_eq(fx, "d", "top"); /* still opaque below the copy */
}

static void test_read_never_copies(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o = NULL;
	struct un_attr a;
	char buf[16];

	t_file(fx, "l1/d/f", "data");
	w_export(fx);
	assert_int_equal(t_read(fx, "d/f", buf, sizeof(buf)), 4);
	assert_int_equal(t_walk(fx, "d/f", &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	assert_int_equal(un_commit(fx->ex, o), 0);
	un_obj_put(o);
	t_list_eq(fx, "d", "f");
	assert_int_equal(w_count(fx, "u"), 0);
}

static void test_readonly_export(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o = NULL;

	t_file(fx, "l1/f", "x");
	t_export(fx, "l1", NULL, NULL);
	assert_int_equal(t_walk(fx, "f", &o), 0);
	assert_int_equal(un_copyup(fx->ex, NULL, o), -EROFS);
	un_obj_put(o);
}

static void test_stale_object(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o = NULL, *root = NULL;

	t_file(fx, "l1/f", "x");
	w_export(fx);
	assert_int_equal(t_walk(fx, "f", &o), 0);
	assert_int_equal(un_root(fx->ex, &root), 0);
	assert_int_equal(un_remove(SYNC_CX, fx->ex, root, "f"), 0);
	assert_int_equal(un_copyup(fx->ex, NULL, o), -ESTALE);
	un_obj_put(o);
	un_obj_put(root);
}

/* The fileid un_getattr reports for PATH. */
static un_id fileid_of(struct fx *fx, const char *path)
{
	struct un_obj *o = NULL;
	struct un_attr a;

	assert_int_equal(t_walk(fx, path, &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, &a), 0);
	un_obj_put(o);
	return a.fileid;
}

/* Two names of one lower inode are two nodes in a writable union (a write
 * through one handle copies up that name alone, as overlayfs without its
 * index) and report one fileid.  The copy-up of one parts them: the name
 * copied up keeps its node and fileid; the other name's node is stale, and
 * a lookup gives it a new node and fileid, with the lower data. */
static void test_lower_hardlinks(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o = NULL;
	un_id id1, id2, id3, fid;
	enum un_stable c;
	char buf[32];

	t_file(fx, "l2/d/h1", "shared");
	assert_int_equal(link(t_path(fx, "l2/d/h1"), t_path(fx, "l2/h2")), 0);
	assert_int_equal(link(t_path(fx, "l2/d/h1"), t_path(fx, "l2/d/h3")), 0);
	w_export(fx);
	id1 = t_id(fx, "d/h1");
	id2 = t_id(fx, "h2");
	assert_int_not_equal(id1, id2);
	fid = fileid_of(fx, "d/h1");
	assert_int_equal(fileid_of(fx, "h2"), fid);
	assert_int_equal(t_walk(fx, "h2", &o), 0);
	assert_int_equal(un_write(fx->ex, o, "SH", 2, 0, UN_UNSTABLE, &c), 2);
	un_obj_put(o);
	assert_int_equal(t_id(fx, "h2"), id2); /* the name written keeps both */
	assert_int_equal(fileid_of(fx, "h2"), fid);
	assert_int_equal(un_resolve(fx->ex, id1, &o), -ESTALE);
	id3 = t_id(fx, "d/h1");
	assert_true(id3 != id1 && id3 != id2);
	assert_true(fileid_of(fx, "d/h1") != fid);
	/* the names still linked below share a new fileid */
	assert_int_equal(fileid_of(fx, "d/h3"), fileid_of(fx, "d/h1"));
	assert_int_equal(t_read(fx, "h2", buf, sizeof(buf)), 6);
	assert_string_equal(buf, "SHared");
	assert_int_equal(t_read(fx, "d/h1", buf, sizeof(buf)), 6);
	assert_string_equal(buf, "shared");
	assert_int_equal(un_resolve(fx->ex, id3, &o), 0);
	assert_false(un_obj_upper(fx->ex, o));
	un_obj_put(o);

	/* A node table from a read-only run shares one node: in the writable
	 * union the other name gets a node of its own with that fileid, and
	 * the copy-up parts them. */
	t_export(fx, "l2", NULL, NULL);
	t_file(fx, "l2/x1", "x");
	assert_int_equal(link(t_path(fx, "l2/x1"), t_path(fx, "l2/x2")), 0);
	id1 = t_id(fx, "x1");
	assert_int_equal(t_id(fx, "x2"), id1);
	t_export(fx, "l2", "u", "w");
	assert_int_not_equal(t_id(fx, "x2"), id1);
	assert_int_equal(fileid_of(fx, "x2"), id1);
	assert_int_equal(t_walk(fx, "x1", &o), 0);
	assert_int_equal(un_copyup(fx->ex, NULL, o), 0);
	un_obj_put(o);
	assert_int_equal(t_id(fx, "x1"), id1);
	assert_int_equal(fileid_of(fx, "x1"), id1);
	assert_int_not_equal(fileid_of(fx, "x2"), id1);

	/* A lower file that gains a second name while served: the name seen
	 * before keeps its node and fileid, through the copy-up of the new one
	 * too (the known limit: the two report different fileids). */
	t_file(fx, "l2/y1", "y");
	id1 = t_id(fx, "y1");
	assert_int_equal(link(t_path(fx, "l2/y1"), t_path(fx, "l2/y2")), 0);
	id2 = t_id(fx, "y2");
	assert_int_not_equal(id2, id1);
	assert_int_equal(t_id(fx, "y1"), id1);
	assert_int_equal(fileid_of(fx, "y1"), id1);
	assert_int_equal(t_walk(fx, "y2", &o), 0);
	assert_int_equal(un_copyup(fx->ex, NULL, o), 0);
	un_obj_put(o);
	assert_int_equal(t_id(fx, "y1"), id1);
	assert_int_equal(fileid_of(fx, "y1"), id1);
	assert_int_equal(t_id(fx, "y2"), id2);
}

/* ---- crash points ---- */

static const char payload[] = "written after the copy-up";

static ssize_t crash_write(struct fx *fx)
{
	enum un_stable c;
	struct un_obj *o = NULL;
	ssize_t n;

	n = t_walk(fx, "a/b/c/f", &o);
	if (n)
		return n;
	n = un_write(fx->ex, o, payload, sizeof(payload), 100, UN_UNSTABLE, &c);
	un_obj_put(o);
	return n;
}

/* The merged file is the lower one, or the lower one written: never half. */
static void crash_check(struct fx *fx, bool written)
{
	static char want[3 * MIB];
	static char got[3 * MIB + 1];
	int fd = open(t_path(fx, "l2/a/b/c/f"), O_RDONLY);

	assert_int_equal(read(fd, want, sizeof(want)), (ssize_t)sizeof(want));
	close(fd);
	if (written)
		memcpy(want + 100, payload, sizeof(payload));
	un_sys_inject_reset();
	assert_int_equal(t_read(fx, "a/b/c/f", got, sizeof(got)), (ssize_t)sizeof(want));
	assert_memory_equal(got, want, sizeof(want));
	if (w_exists(fx, "u/a/b/c/f") && !written)
		assert_true(same_content(fx, "l2/a/b/c/f", "u/a/b/c/f"));
	assert_int_equal(w_count(fx, "w/work"), 0);
}

static void test_crash_points(void **state)
{
	struct fx *fx = *state;
	unsigned long calls;
	un_id id;
	int fds;

	deep_lower(fx);
	t_file(fx, "l1/a/b/side", "merged");
	w_export(fx);
	id = t_id(fx, "a/b/c/f");
	fds = t_nfds();
	un_sys_inject_reset();
	assert_int_equal(crash_write(fx), (ssize_t)sizeof(payload));
	calls = un_sys_calls(UN_SYS_ANY);
	assert_true(calls > 20);
	for (unsigned long n = 1; n <= calls; n++) {
		ssize_t rc;

		w_reset_upper(fx);
		un_sys_inject_reset();
		un_sys_inject(UN_SYS_ANY, n, EIO);
		rc = crash_write(fx);
		if (rc != -EIO && rc != -ENOMEM && rc != (ssize_t)sizeof(payload))
			fail_msg("call %lu: rc %zd", n, rc);
		crash_check(fx, rc > 0);
		assert_int_equal(t_nfds(), fds);
		/* A retry succeeds and keeps the id. */
		assert_int_equal(crash_write(fx), (ssize_t)sizeof(payload));
		crash_check(fx, true);
		assert_int_equal(t_id(fx, "a/b/c/f"), id);
	}
}

/* A crash (not a failure) leaves the temp in the work dir: the next export
 * open removes it, and the tree never showed it. */
static void test_crash_leftovers_cleaned(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l1/f", "x");
	w_export(fx);
	t_file(fx, "w/work/#un-0123456789abcdef", "half");
	t_file(fx, "w/work/#un-dir/inside", "more");
	t_export(fx, "l1", "u", "w");
	assert_int_equal(w_count(fx, "w/work"), 0);
}

/* A union over a new lower stack (un_export_restack; here l3 put on top
 * of w_export's lowers) takes the upper and work dirs over as they are: a
 * copy-up's temp of the old union stays (an open would empty it, as
 * above), the copied-up file still hides the new lower's, and a name the
 * old union resolved is resolved again over the new stack. */
static void test_restack_keeps_work(void **state)
{
	struct fx *fx = *state;
	const char *lowers[3];
	char l3[PATH_MAX], l1[PATH_MAX], l2[PATH_MAX], up[PATH_MAX], wk[PATH_MAX],
	    err[256], buf[64];
	struct un_export_cfg cfg = {.path = "/", .lowerdirs = lowers, .nlower = 3};
	struct un_export *nx = NULL, *old;
	const struct un_sattr grow = {.set_size = true, .size = 2};
	struct un_obj *o = NULL;

	t_file(fx, "l1/f", "x");
	t_file(fx, "l1/g", "old g");
	t_file(fx, "l3/f", "f of l3");
	t_file(fx, "l3/g", "g of l3");
	t_file(fx, "l3/n", "new");
	w_export(fx);
	assert_int_equal(t_walk(fx, "f", &o), 0);
	assert_int_equal(un_setattr(SYNC_CX, fx->ex, o, &grow), 0); /* copied up */
	un_obj_put(o);
	assert_int_equal(t_read(fx, "g", buf, sizeof(buf)), 5);
	assert_int_equal(t_lookup_rc(fx, "n"), -ENOENT);
	t_file(fx, "w/work/#un-0123456789abcdef", "a copy-up under way");
	snprintf(l3, sizeof(l3), "%s", t_path(fx, "l3"));
	snprintf(l1, sizeof(l1), "%s", t_path(fx, "l1"));
	snprintf(l2, sizeof(l2), "%s", t_path(fx, "l2"));
	snprintf(up, sizeof(up), "%s", t_path(fx, "u"));
	snprintf(wk, sizeof(wk), "%s", t_path(fx, "w"));
	lowers[0] = l3;
	lowers[1] = l1;
	lowers[2] = l2;
	cfg.upperdir = up;
	cfg.workdir = wk;
	assert_int_equal(un_export_restack(fx->ex, &cfg, &nx, err, sizeof(err)), 0);
	assert_int_equal(w_count(fx, "w/work"), 1);
	assert_int_equal(un_export_id(nx), un_export_id(fx->ex));
	old = fx->ex;
	fx->ex = nx;
	un_export_close(old);
	assert_int_equal(t_read(fx, "f", buf, sizeof(buf)), 2); /* the upper's */
	assert_int_equal(t_read(fx, "g", buf, sizeof(buf)), 7);
	assert_memory_equal(buf, "g of l3", 7);
	assert_int_equal(t_lookup_rc(fx, "n"), 0);
	/* the upper is kept, never given or taken away */
	cfg.upperdir = cfg.workdir = NULL;
	assert_int_equal(un_export_restack(fx->ex, &cfg, &nx, err, sizeof(err)), -EINVAL);
}

/* ---- concurrent first writes ---- */

#define WRITERS 8
#define CHUNK	(64 * 1024)

struct writer {
	struct fx *fx;
	un_id id;
	int i;
	pthread_barrier_t *go;
	ssize_t rc;
};

static void *writer_main(void *arg)
{
	static char bufs[WRITERS][CHUNK];
	struct writer *w = arg;
	enum un_stable c;
	struct un_obj *o = NULL;

	memset(bufs[w->i], 'A' + w->i, CHUNK);
	w->rc = un_resolve(w->fx->ex, w->id, &o); /* each its own lower object */
	pthread_barrier_wait(w->go);
	if (w->rc == 0) {
		w->rc = un_write(w->fx->ex, o, bufs[w->i], CHUNK, (uint64_t)w->i * CHUNK,
				 UN_UNSTABLE, &c);
		un_obj_put(o);
	}
	return NULL;
}

static void test_concurrent_first_writes(void **state)
{
	static char data[WRITERS * CHUNK + 1];
	struct fx *fx = *state;
	struct writer w[WRITERS];
	pthread_t th[WRITERS];
	pthread_barrier_t go;
	un_id id;

	memset(data, '.', WRITERS * CHUNK);
	data[WRITERS * CHUNK] = '\0';
	t_file(fx, "l2/d/e/f", data);
	w_export(fx);
	id = t_id(fx, "d/e/f");
	un_sys_inject_reset();
	pthread_barrier_init(&go, NULL, WRITERS);
	for (int i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){.fx = fx, .id = id, .i = i, .go = &go};
		pthread_create(&th[i], NULL, writer_main, &w[i]);
	}
	for (int i = 0; i < WRITERS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].rc, CHUNK);
	}
	pthread_barrier_destroy(&go);
	/* One copy-up: one attempt to clone (FICLONE, then its fallback). */
	assert_int_equal(un_sys_calls(UN_SYS_CLONE), 1);
	assert_int_equal(t_id(fx, "d/e/f"), id);
	assert_int_equal(t_read(fx, "d/e/f", data, sizeof(data)), WRITERS * CHUNK);
	for (int i = 0; i < WRITERS; i++)
		for (int k = 0; k < CHUNK; k += 4096)
			assert_int_equal(data[i * CHUNK + k], 'A' + i);
	assert_int_equal(w_count(fx, "w/work"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    W_TEST(test_data_attrs_parents),
	    W_TEST(test_sparse_kept),
	    W_TEST(test_types),
	    W_TEST(test_markers_not_copied),
	    W_TEST(test_read_never_copies),
	    W_TEST(test_readonly_export),
	    W_TEST(test_stale_object),
	    W_TEST(test_lower_hardlinks),
	    W_TEST(test_crash_points),
	    W_TEST(test_crash_leftovers_cleaned),
	    W_TEST(test_restack_keeps_work),
	    W_TEST(test_concurrent_first_writes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
