/* SPDX-License-Identifier: Apache-2.0 */
/* fixture_wr.c - the write-side fixture and the overlayfs oracle (test_wr.h). */
#include "test_wr.h"

/* Cached listings are only used for settled directories, as in production:
 * these tests change directories faster than the timestamp tick. */
int w_setup(void **state)
{
	int rc = t_setup(state);

	un_readdir_test_settle_ns(UN_LISTING_SETTLE_NS);
	umask(0); /* NFS has no umask; the kernel side of the oracle then agrees */
	return rc;
}

int w_teardown(void **state)
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
void w_export(struct fx *fx)
{
	t_mkdir(fx, "l1");
	t_mkdir(fx, "l2");
	t_mkdir(fx, "u");
	t_mkdir(fx, "w");
	t_export(fx, "l1:l2", "u", "w");
}

void w_reset_upper(struct fx *fx)
{
	t_export_close(fx);
	t_rm_rf(t_path(fx, "u"));
	t_mkdir(fx, "u");
	t_export(fx, "l1:l2", "u", "w");
}

/* ---- namespace changes through the engine, as a `sync` caller ---- */

static int walk2(struct fx *fx, const char *a, struct un_obj **oa, const char *b,
		 struct un_obj **ob)
{
	int rc = t_walk(fx, a, oa);

	return rc ? rc : t_walk(fx, b, ob);
}

int w_rename(struct fx *fx, const char *fdir, const char *fname, const char *tdir,
	     const char *tname)
{
	struct un_obj *f = NULL, *t = NULL;
	int rc = walk2(fx, fdir, &f, tdir, &t);

	if (!rc)
		rc = un_rename(SYNC_CX, fx->ex, f, fname, t, tname);
	un_obj_put(f);
	un_obj_put(t);
	return rc;
}

int w_link(struct fx *fx, const char *path, const char *dir, const char *name)
{
	struct un_obj *o = NULL, *d = NULL;
	int rc = walk2(fx, path, &o, dir, &d);

	if (!rc)
		rc = un_link(SYNC_CX, fx->ex, o, d, name);
	un_obj_put(o);
	un_obj_put(d);
	return rc;
}

int w_remove(struct fx *fx, const char *dir, const char *name, bool isdir)
{
	struct un_obj *d = NULL;
	int rc = t_walk(fx, dir, &d);

	if (!rc)
		rc = isdir ? un_rmdir(SYNC_CX, fx->ex, d, name)
			   : un_remove(SYNC_CX, fx->ex, d, name);
	un_obj_put(d);
	return rc;
}

int w_create(struct fx *fx, const char *dir, const char *name)
{
	struct un_obj *d = NULL, *o = NULL;
	int rc = t_walk(fx, dir, &d);

	if (!rc)
		rc = un_create(SYNC_CX, fx->ex, d, name, 0644, true, NULL, &o);
	un_obj_put(o);
	un_obj_put(d);
	return rc;
}

bool w_exists(struct fx *fx, const char *rel)
{
	struct stat st;

	return lstat(t_path(fx, rel), &st) == 0;
}

/* Entries of the dir REL (without . and ..). */
int w_count(struct fx *fx, const char *rel)
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

bool w_is_whiteout(struct fx *fx, const char *rel)
{
	struct stat st;

	return lstat(t_path(fx, rel), &st) == 0 && S_ISCHR(st.st_mode) &&
	       st.st_rdev == makedev(0, 0);
}

/* The value of xattr NAME of REL ("" if absent). */
const char *w_xattr(struct fx *fx, const char *rel, const char *name)
{
	static __thread char buf[64];
	ssize_t n = lgetxattr(t_path(fx, rel), name, buf, sizeof(buf) - 1);

	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static uint64_t w_fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* ---- tree dumps: one line per object, sorted, no times ---- */

static void w_dump_add(struct w_dump *d, const char *fmt, ...)
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

void w_dump_free(struct w_dump *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->lines[i]);
	free(d->lines);
	*d = (struct w_dump){0};
}

/* One object: PATH, type, permissions, owner, size (not of directories),
 * nlink (not of directories), and the content hash or symlink target. */
static void w_dump_obj(struct w_dump *d, const char *path, mode_t mode, uid_t uid,
		       gid_t gid, uint64_t size, unsigned nlink, const char *extra)
{
	if (S_ISDIR(mode))
		w_dump_add(d, "%s d %04o %u:%u", path, mode & 07777, uid, gid);
	else
		w_dump_add(d, "%s %o %04o %u:%u size=%llu nlink=%u %s", path, mode >> 12,
			   mode & 07777, uid, gid, (unsigned long long)size, nlink,
			   extra);
}

static void w_dump_sort(struct w_dump *d)
{
	qsort(d->lines, d->n, sizeof(*d->lines), t_strcmp_ptr);
}

void w_file_hash(int fd, char *out, size_t outlen)
{
	uint64_t h = 0xcbf29ce484222325ull;
	char buf[65536];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		h = w_fnv(h, buf, (size_t)n);
	snprintf(out, outlen, "h=%016llx", (unsigned long long)h);
}

/* The merged view of the engine below directory object DIR named PATH. */
static void w_dump_engine_dir(struct fx *fx, struct un_obj *dir, const char *path,
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

void w_dump_engine(struct fx *fx, struct w_dump *d)
{
	struct un_obj *root;

	assert_int_equal(un_root(fx->ex, &root), 0);
	w_dump_engine_dir(fx, root, "", d);
	un_obj_put(root);
	w_dump_sort(d);
}

/* Calls VISIT for every object below the real directory ABS, named PATH
 * (its path below the walk's top, from "/"), parents before children. */
static void w_walk(const char *abs, const char *path,
		   void (*visit)(const char *abs, const char *path, const struct stat *st,
				 void *arg),
		   void *arg)
{
	char cabs[PATH_MAX], child[PATH_MAX];
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
		visit(cabs, child, &st, arg);
		if (S_ISDIR(st.st_mode))
			w_walk(cabs, child, visit, arg);
	}
	closedir(dir);
}

/* One object of a real directory tree (an overlay mount); ARG is the dump. */
static void w_dump_real_obj(const char *abs, const char *path, const struct stat *st,
			    void *arg)
{
	char extra[PATH_MAX + 8] = "";

	if (S_ISREG(st->st_mode)) {
		int fd = open(abs, O_RDONLY);

		assert_true(fd >= 0);
		w_file_hash(fd, extra, sizeof(extra));
		close(fd);
	} else if (S_ISLNK(st->st_mode)) {
		ssize_t n = readlink(abs, extra + 2, PATH_MAX);

		assert_true(n >= 0);
		extra[0] = '-', extra[1] = '>';
		extra[n + 2] = '\0';
	} else if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) {
		snprintf(extra, sizeof(extra), "rdev=%u:%u", major(st->st_rdev),
			 minor(st->st_rdev));
	}
	w_dump_obj(arg, path, st->st_mode, st->st_uid, st->st_gid, (uint64_t)st->st_size,
		   (unsigned)st->st_nlink, extra);
}

void w_dump_real(const char *abs, struct w_dump *d)
{
	w_walk(abs, "", w_dump_real_obj, d);
	w_dump_sort(d);
}

/* An upper layer as stored: white-outs and opaque markers besides what
 * w_dump_obj shows, for one object.  An opaque marker is shown only where a lower layer
 * (of LOWERS, NULL-terminated) has a directory at the same path: elsewhere it changes
 * nothing, and kernel overlayfs leaves some behind (it marks a directory it is about to
 * move into a merged parent, and keeps the mark when the rename then fails). */
struct w_upper_walk {
	const char *const *lowers;
	struct w_dump *d;
};

static void w_dump_upper_obj(const char *abs, const char *path, const struct stat *st,
			     void *arg)
{
	const struct w_upper_walk *w = arg;
	char low[PATH_MAX], op[8];
	struct stat ls;
	bool below = false;
	ssize_t n;

	for (size_t i = 0; w->lowers[i]; i++) {
		snprintf(low, sizeof(low), "%s%s", w->lowers[i], path);
		below = below || (lstat(low, &ls) == 0 && S_ISDIR(ls.st_mode));
	}
	n = lgetxattr(abs, "trusted.overlay.opaque", op, sizeof(op) - 1);
	op[n > 0 && below ? n : 0] = '\0';
	if (S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0))
		w_dump_add(w->d, "%s whiteout", path);
	else if (S_ISDIR(st->st_mode))
		w_dump_add(w->d, "%s d %04o opaque=%s", path, st->st_mode & 07777, op);
	else
		w_dump_add(w->d, "%s %o %04o size=%llu", path, st->st_mode >> 12,
			   st->st_mode & 07777, (unsigned long long)st->st_size);
}

void w_dump_upper(const char *abs, const char *const *lowers, struct w_dump *d)
{
	w_walk(abs, "", w_dump_upper_obj, &(struct w_upper_walk){lowers, d});
	w_dump_sort(d);
}

/* Fails the test, printing both dumps, unless they are equal. */
void w_dump_eq(const struct w_dump *a, const struct w_dump *b, const char *what)
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
int w_mount(struct fx *fx, const char *lowers, const char *upper, const char *work,
	    const char *mnt)
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

void w_umount(struct fx *fx, const char *mnt)
{
	assert_int_equal(umount(t_path(fx, mnt)), 0);
}

/* ---- scripted sequences, applied to the engine and to a kernel mount ---- */

/* Looks up the directory part of PATH into *dir; *name points into PATH. */
static int w_parent(struct fx *fx, const char *path, struct un_obj **dir,
		    const char **name)
{
	char p[PATH_MAX], *slash;
	int rc;

	snprintf(p, sizeof(p), "%s", path);
	slash = strrchr(p, '/');
	*name = slash ? path + (slash - p) + 1 : path;
	if (slash)
		*slash = '\0';
	rc = t_walk(fx, slash ? p : "", dir);
	if (!rc && !S_ISDIR(un_obj_type(*dir))) { /* as path resolution says */
		un_obj_put(*dir);
		*dir = NULL;
		rc = -ENOTDIR;
	}
	return rc;
}

static int w_sattr(struct fx *fx, const struct w_op *op, struct un_sattr *sa)
{
	struct un_obj *o = NULL;
	int rc = t_walk(fx, op->a, &o);

	if (!rc)
		rc = un_setattr(SYNC_CX, fx->ex, o, sa);
	un_obj_put(o);
	return rc;
}

static int w_engine_write(struct fx *fx, const struct w_op *op)
{
	struct un_obj *o = NULL;
	enum un_stable c;
	ssize_t n = t_walk(fx, op->a, &o);

	if (!n)
		n = un_write(fx->ex, o, op->data, strlen(op->data), (uint64_t)op->n,
			     UN_UNSTABLE, &c);
	un_obj_put(o);
	return n < 0 ? (int)n : 0;
}

static int w_engine_link(struct fx *fx, const struct w_op *op)
{
	struct un_obj *o = NULL, *dir = NULL;
	const char *name;
	int rc = t_walk(fx, op->a, &o);

	if (!rc)
		rc = w_parent(fx, op->b, &dir, &name);
	if (!rc)
		rc = un_link(SYNC_CX, fx->ex, o, dir, name);
	un_obj_put(o);
	un_obj_put(dir);
	return rc;
}

static int w_engine_rename(struct fx *fx, const struct w_op *op)
{
	struct un_obj *fd = NULL, *td = NULL;
	const char *fn, *tn;
	int rc = w_parent(fx, op->a, &fd, &fn);

	if (!rc)
		rc = w_parent(fx, op->b, &td, &tn);
	if (!rc)
		rc = un_rename(SYNC_CX, fx->ex, fd, fn, td, tn);
	un_obj_put(fd);
	un_obj_put(td);
	return rc;
}

/* Operations that name one new or removed entry of a directory ('c' an
 * exclusive create, 'C' an UNCHECKED one: open(O_CREAT) for writing). */
static int w_engine_name(struct fx *fx, const struct w_op *op)
{
	struct un_obj *dir = NULL, *o = NULL;
	const char *name;
	int rc = w_parent(fx, op->a, &dir, &name);

	if (rc)
		return rc;
	switch (op->op) {
	case 'c':
	case 'C':
		rc = un_create(SYNC_CX, fx->ex, dir, name, (mode_t)op->n, op->op == 'c',
			       NULL, &o);
		break;
	case 'm':
		rc = un_mkdir(SYNC_CX, fx->ex, dir, name, (mode_t)op->n, &o);
		break;
	case 's':
		rc = un_symlink(SYNC_CX, fx->ex, dir, name, op->b, &o);
		break;
	case 'f':
		rc = un_mknod(SYNC_CX, fx->ex, dir, name, S_IFIFO | (mode_t)op->n, 0, 0,
			      &o);
		break;
	case 'u':
		rc = un_remove(SYNC_CX, fx->ex, dir, name);
		break;
	case 'r':
		rc = un_rmdir(SYNC_CX, fx->ex, dir, name);
		break;
	}
	un_obj_put(o);
	un_obj_put(dir);
	return rc;
}

/* Applies OP through the engine: 0 or -errno. */
int w_apply_engine(struct fx *fx, const struct w_op *op)
{
	struct un_sattr sa = {0};

	switch (op->op) {
	case 'w':
		return w_engine_write(fx, op);
	case 't':
		sa = (struct un_sattr){.set_size = true, .size = (uint64_t)op->n};
		return w_sattr(fx, op, &sa);
	case 'x':
		sa = (struct un_sattr){.set_mode = true, .mode = (mode_t)op->n};
		return w_sattr(fx, op, &sa);
	case 'o':
		sa = (struct un_sattr){.set_uid = true,
				       .uid = (uid_t)op->n,
				       .set_gid = true,
				       .gid = (gid_t)op->n};
		return w_sattr(fx, op, &sa);
	case 'i':
		sa = (struct un_sattr){.set_atime = true,
				       .atime = {op->n, 0},
				       .set_mtime = true,
				       .mtime = {op->n, 0}};
		return w_sattr(fx, op, &sa);
	case 'n':
		return w_engine_rename(fx, op);
	case 'l':
		return w_engine_link(fx, op);
	default:
		return w_engine_name(fx, op);
	}
}

/* Applies OP with system calls below the mount MNT: 0 or -errno. */
int w_apply_kernel(const char *mnt, const struct w_op *op)
{
	char a[PATH_MAX], b[PATH_MAX];
	struct timespec ts[2] = {{op->n, 0}, {op->n, 0}};
	int fd, rc = 0;

	snprintf(a, sizeof(a), "%s/%s", mnt, op->a);
	snprintf(b, sizeof(b), "%s/%s", mnt, op->b ? op->b : "");
	switch (op->op) {
	case 'c':
	case 'C':
	case 'w':
		fd = open(a,
			  op->op == 'c'	  ? O_CREAT | O_EXCL | O_WRONLY
			  : op->op == 'C' ? O_CREAT | O_WRONLY
					  : O_WRONLY,
			  (mode_t)op->n);
		if (fd < 0)
			return -errno;
		if (op->op == 'w' && pwrite(fd, op->data, strlen(op->data), op->n) < 0)
			rc = -errno;
		close(fd);
		return rc;
	case 't':
		rc = truncate(a, op->n);
		break;
	case 'x':
		rc = chmod(a, (mode_t)op->n);
		break;
	case 'o':
		rc = lchown(a, (uid_t)op->n, (gid_t)op->n);
		break;
	case 'i':
		rc = utimensat(AT_FDCWD, a, ts, AT_SYMLINK_NOFOLLOW);
		break;
	case 'm':
		rc = mkdir(a, (mode_t)op->n);
		break;
	case 's':
		rc = symlink(op->b, a);
		break;
	case 'f':
		rc = mkfifo(a, (mode_t)op->n);
		break;
	case 'u':
		rc = unlink(a);
		break;
	case 'r':
		rc = rmdir(a);
		break;
	case 'n':
		rc = rename(a, b);
		break;
	case 'l':
		rc = link(a, b);
		break;
	}
	return rc ? -errno : 0;
}

/* The upper layers A/u (the engine's) and B/u (kernel overlayfs's). */
static void w_compare_uppers(struct fx *fx)
{
	char la[2][PATH_MAX], lb[2][PATH_MAX];
	const char *lowa[3] = {la[0], la[1], NULL}, *lowb[3] = {lb[0], lb[1], NULL};
	struct w_dump a = {0}, b = {0};

	snprintf(la[0], PATH_MAX, "%s", t_path(fx, "A/l1"));
	snprintf(la[1], PATH_MAX, "%s", t_path(fx, "A/l2"));
	snprintf(lb[0], PATH_MAX, "%s", t_path(fx, "B/l1"));
	snprintf(lb[1], PATH_MAX, "%s", t_path(fx, "B/l2"));
	w_dump_upper(t_path(fx, "A/u"), lowa, &a);
	w_dump_upper(t_path(fx, "B/u"), lowb, &b);
	w_dump_eq(&a, &b, "upper layers");
	w_dump_free(&a);
	w_dump_free(&b);
}

/* The oracle: POPULATE builds the layers l1, l2 (and an empty u, w) under a
 * side dir ("A" for the engine, "B" for kernel overlayfs); every op must
 * give the same result on both, then the merged trees and the upper layers
 * as stored must match; last, kernel overlayfs mounted over the engine's
 * layers (its upper and work dir as written) must show the tree the
 * engine shows.  Returns false (skipped) where overlayfs cannot be mounted. */
bool w_oracle(struct fx *fx, void (*populate)(struct fx *, const char *),
	      const struct w_op *ops, size_t n)
{
	struct w_dump eng = {0}, ker = {0};
	char mnt[PATH_MAX];

	populate(fx, "A");
	populate(fx, "B");
	t_export(fx, "A/l1:A/l2", "A/u", "A/w");
	if (w_mount(fx, "B/l1:B/l2", "B/u", "B/w", "mnt"))
		return false;
	snprintf(mnt, sizeof(mnt), "%s", t_path(fx, "mnt"));
	for (size_t i = 0; i < n; i++) {
		int re = w_apply_engine(fx, &ops[i]), rk = w_apply_kernel(mnt, &ops[i]);

		if (re != rk && getenv("UN_TEST_DEBUG")) {
			char cmd[PATH_MAX + 16];

			snprintf(cmd, sizeof(cmd), "ls -lR %s >&2", mnt);
			if (system(cmd))
				print_message("ls failed\n");
		}
		if (re != rk)
			fail_msg("op %zu (%c %s %s): engine %d (%s), kernel %d (%s)", i,
				 ops[i].op, ops[i].a, ops[i].b ? ops[i].b : "", re,
				 strerror(-re), rk, strerror(-rk));
	}
	w_dump_engine(fx, &eng);
	w_dump_real(mnt, &ker);
	w_dump_eq(&eng, &ker, "merged trees");
	w_umount(fx, "mnt");
	w_dump_free(&ker);

	w_compare_uppers(fx);

	t_export_close(fx);
	assert_int_equal(w_mount(fx, "A/l1:A/l2", "A/u", "A/w", "mnt2"), 0);
	w_dump_real(t_path(fx, "mnt2"), &ker);
	w_dump_eq(&eng, &ker, "the engine's upper under kernel overlayfs");
	w_umount(fx, "mnt2");
	w_dump_free(&eng);
	w_dump_free(&ker);
	return true;
}
