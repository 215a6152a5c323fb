/* test_wr.h - fixtures for the tests of the engine's write side
 * (test_copyup.c, test_dir.c, test_write.c): a writable export, tree dumps
 * of the engine's merged view and of a real directory, and kernel overlayfs
 * as the oracle (mounted over a second copy of the same layers).
 *
 * Header-only, on top of test_un.h, for the same reason: every test file is
 * one executable.
 */
#ifndef TEST_WR_H
#define TEST_WR_H

#include "test_un.h"

#include <sys/mount.h>
#include <sys/wait.h>

/* Cached listings are only used for settled directories, as in production:
 * these tests change directories faster than the timestamp tick. */
static inline int w_setup(void **state)
{
	int rc = t_setup(state);

	un_readdir_test_settle_ns(UN_LISTING_SETTLE_NS);
	umask(0); /* NFS has no umask; the kernel side of the oracle then agrees */
	return rc;
}

static inline int w_teardown(void **state)
{
	struct fx *fx = *state;
	char mnt[PATH_MAX];

	/* An oracle test that failed half-way leaves its mount: never the tree. */
	snprintf(mnt, sizeof(mnt), "%s/mnt", fx->base);
	umount2(mnt, MNT_DETACH);
	snprintf(mnt, sizeof(mnt), "%s/mnt2", fx->base);
	umount2(mnt, MNT_DETACH);
	return t_teardown(state);
}

/* The usual writable export: lowers l1 (top) and l2, upper u, work w. */
static inline void w_export(struct fx *fx)
{
	t_mkdir(fx, "l1");
	t_mkdir(fx, "l2");
	t_mkdir(fx, "u");
	t_mkdir(fx, "w");
	t_export(fx, "l1:l2", "u", "w");
}

static inline bool w_exists(struct fx *fx, const char *rel)
{
	struct stat st;

	return lstat(t_path(fx, rel), &st) == 0;
}

/* Entries of the dir REL (without . and ..). */
static inline int w_count(struct fx *fx, const char *rel)
{
	DIR *d = opendir(t_path(fx, rel));
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

static inline bool w_is_whiteout(struct fx *fx, const char *rel)
{
	struct stat st;

	return lstat(t_path(fx, rel), &st) == 0 && S_ISCHR(st.st_mode) &&
	       st.st_rdev == makedev(0, 0);
}

/* The value of xattr NAME of REL ("" if absent). */
static inline const char *w_xattr(struct fx *fx, const char *rel, const char *name)
{
	static __thread char buf[64];
	ssize_t n = lgetxattr(t_path(fx, rel), name, buf, sizeof(buf) - 1);

	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static inline uint64_t w_fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* ---- tree dumps: one line per object, sorted, no times ---- */

struct w_dump {
	char **lines;
	size_t n, cap;
};

static inline void w_dump_add(struct w_dump *d, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	assert_true(vasprintf(&s, fmt, ap) >= 0);
	va_end(ap);
	if (d->n == d->cap) {
		d->cap = d->cap ? 2 * d->cap : 64;
		d->lines = realloc(d->lines, d->cap * sizeof(*d->lines));
	}
	d->lines[d->n++] = s;
}

static inline void w_dump_free(struct w_dump *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->lines[i]);
	free(d->lines);
	*d = (struct w_dump){0};
}

/* One object: PATH, type, permissions, owner, size (not of directories),
 * nlink (not of directories), and the content hash or symlink target. */
static inline void w_dump_obj(struct w_dump *d, const char *path, mode_t mode, uid_t uid,
			      gid_t gid, uint64_t size, unsigned nlink, const char *extra)
{
	if (S_ISDIR(mode))
		w_dump_add(d, "%s d %04o %u:%u", path, mode & 07777, uid, gid);
	else
		w_dump_add(d, "%s %o %04o %u:%u size=%llu nlink=%u %s", path, mode >> 12,
			   mode & 07777, uid, gid, (unsigned long long)size, nlink,
			   extra);
}

static inline void w_dump_sort(struct w_dump *d)
{
	qsort(d->lines, d->n, sizeof(*d->lines), t_strcmp_ptr);
}

static inline void w_file_hash(int fd, char *out, size_t outlen)
{
	uint64_t h = 0xcbf29ce484222325ull;
	char buf[65536];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		h = w_fnv(h, buf, (size_t)n);
	snprintf(out, outlen, "h=%016llx", (unsigned long long)h);
}

/* The merged view of the engine below directory object DIR named PATH. */
static inline void w_dump_engine_dir(struct fx *fx, struct un_obj *dir, const char *path,
				     struct w_dump *d)
{
	struct un_listing *l;
	char child[PATH_MAX], extra[PATH_MAX + 8];

	assert_int_equal(un_listing_get(fx->ex, dir, &l), 0);
	for (size_t i = 2; i < un_listing_count(l); i++) {
		const struct un_dirent *e = un_listing_at(l, i);
		struct un_obj *o;
		struct un_attr a;

		snprintf(child, sizeof(child), "%s/%s", path, e->name);
		assert_int_equal(un_lookup(fx->ex, dir, e->name, &o), 0);
		assert_int_equal(un_getattr(fx->ex, o, &a), 0);
		extra[0] = '\0';
		if (S_ISREG(a.mode)) {
			uint64_t h = 0xcbf29ce484222325ull;
			char buf[65536];
			bool eof = false;
			uint64_t off = 0;
			ssize_t n;

			do {
				n = un_read(fx->ex, o, buf, sizeof(buf), off, &eof);
				assert_true(n >= 0);
				h = w_fnv(h, buf, (size_t)n);
				off += (uint64_t)n;
			} while (!eof && n > 0);
			snprintf(extra, sizeof(extra), "h=%016llx",
				 (unsigned long long)h);
		} else if (S_ISLNK(a.mode)) {
			size_t len = 0;

			assert_int_equal(
			    un_readlink(fx->ex, o, extra + 2, PATH_MAX, &len), 0);
			extra[0] = '-', extra[1] = '>';
			extra[len + 2] = '\0';
		} else if (S_ISCHR(a.mode) || S_ISBLK(a.mode)) {
			snprintf(extra, sizeof(extra), "rdev=%u:%u", a.rdev_major,
				 a.rdev_minor);
		}
		w_dump_obj(d, child, a.mode, a.uid, a.gid, a.size, a.nlink, extra);
		if (S_ISDIR(a.mode))
			w_dump_engine_dir(fx, o, child, d);
		un_obj_put(o);
	}
	un_listing_put(l);
}

static inline void w_dump_engine(struct fx *fx, struct w_dump *d)
{
	struct un_obj *root;

	assert_int_equal(un_root(fx->ex, &root), 0);
	w_dump_engine_dir(fx, root, "", d);
	un_obj_put(root);
	w_dump_sort(d);
}

/* A real directory tree (an overlay mount) below ABS, named PATH. */
static inline void w_dump_real_dir(const char *abs, const char *path, struct w_dump *d)
{
	char cabs[PATH_MAX], child[PATH_MAX], extra[PATH_MAX + 8];
	DIR *dir = opendir(abs);
	struct dirent *e;
	struct stat st;

	assert_non_null(dir);
	while ((e = readdir(dir))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(cabs, sizeof(cabs), "%s/%s", abs, e->d_name);
		snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
		assert_int_equal(lstat(cabs, &st), 0);
		extra[0] = '\0';
		if (S_ISREG(st.st_mode)) {
			int fd = open(cabs, O_RDONLY);

			assert_true(fd >= 0);
			w_file_hash(fd, extra, sizeof(extra));
			close(fd);
		} else if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlink(cabs, extra + 2, PATH_MAX);

			assert_true(n >= 0);
			extra[0] = '-', extra[1] = '>';
			extra[n + 2] = '\0';
		} else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
			snprintf(extra, sizeof(extra), "rdev=%u:%u", major(st.st_rdev),
				 minor(st.st_rdev));
		}
		w_dump_obj(d, child, st.st_mode, st.st_uid, st.st_gid,
			   (uint64_t)st.st_size, (unsigned)st.st_nlink, extra);
		if (S_ISDIR(st.st_mode))
			w_dump_real_dir(cabs, child, d);
	}
	closedir(dir);
}

static inline void w_dump_real(const char *abs, struct w_dump *d)
{
	w_dump_real_dir(abs, "", d);
	w_dump_sort(d);
}

/* An upper layer as stored: white-outs, opaque markers and the overlay
 * xattrs that matter for the merge, besides what w_dump_obj shows. */
static inline void w_dump_upper_dir(const char *abs, const char *path, struct w_dump *d)
{
	char cabs[PATH_MAX], child[PATH_MAX], op[8];
	DIR *dir = opendir(abs);
	struct dirent *e;
	struct stat st;
	ssize_t n;

	assert_non_null(dir);
	while ((e = readdir(dir))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(cabs, sizeof(cabs), "%s/%s", abs, e->d_name);
		snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
		assert_int_equal(lstat(cabs, &st), 0);
		n = lgetxattr(cabs, "trusted.overlay.opaque", op, sizeof(op) - 1);
		op[n > 0 ? n : 0] = '\0';
		if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0))
			w_dump_add(d, "%s whiteout", child);
		else if (S_ISDIR(st.st_mode))
			w_dump_add(d, "%s d %04o opaque=%s", child, st.st_mode & 07777,
				   op);
		else
			w_dump_add(d, "%s %o %04o size=%llu", child, st.st_mode >> 12,
				   st.st_mode & 07777, (unsigned long long)st.st_size);
		if (S_ISDIR(st.st_mode))
			w_dump_upper_dir(cabs, child, d);
	}
	closedir(dir);
}

static inline void w_dump_upper(const char *abs, struct w_dump *d)
{
	w_dump_upper_dir(abs, "", d);
	w_dump_sort(d);
}

/* Fails the test, printing both dumps, unless they are equal. */
static inline void w_dump_eq(const struct w_dump *a, const struct w_dump *b,
			     const char *what)
{
	bool same = a->n == b->n;

	for (size_t i = 0; same && i < a->n; i++)
		same = !strcmp(a->lines[i], b->lines[i]);
	if (same)
		return;
	print_message("%s differ:\n--- engine (%zu)\n", what, a->n);
	for (size_t i = 0; i < a->n; i++)
		print_message("  %s\n", a->lines[i]);
	print_message("--- kernel (%zu)\n", b->n);
	for (size_t i = 0; i < b->n; i++)
		print_message("  %s\n", b->lines[i]);
	fail_msg("%s differ", what);
}

/* ---- the kernel overlayfs oracle ---- */

/* Mounts overlayfs over LOWERS (a ':' list, base-relative) with UPPER/WORK
 * on MNT; 0 or -errno (a machine without overlayfs skips the oracle). */
static inline int w_mount(struct fx *fx, const char *lowers, const char *upper,
			  const char *work, const char *mnt)
{
	char opts[4 * PATH_MAX], low[2 * PATH_MAX] = "", list[PATH_MAX], *save = NULL;

	snprintf(list, sizeof(list), "%s", lowers);
	for (char *t = strtok_r(list, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
		if (low[0])
			strcat(low, ":");
		strcat(low, t_path(fx, t));
	}
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s", low,
		 t_path(fx, upper), t_path(fx, work));
	t_mkdir(fx, mnt);
	return mount("overlay", t_path(fx, mnt), "overlay", 0, opts) ? -errno : 0;
}

static inline void w_umount(struct fx *fx, const char *mnt)
{
	assert_int_equal(umount(t_path(fx, mnt)), 0);
}

#endif
