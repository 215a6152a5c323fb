/* SPDX-License-Identifier: Apache-2.0 */
/* diff_oracle - the differential test of writable unions against kernel overlayfs.
 *
 *   diff_oracle gen --seed N [--hardlinks] DIR
 *       Generates the layers DIR/l1..lK (K = 2 or 3, top-most first), an empty
 *       upper DIR/u and an empty work dir DIR/w.  Same seed, same layers.
 *       --hardlinks gives some files a second name in their layer.
 *   diff_oracle run --seed N --count N [--check-every N] [--trace FILE]
 *                   [--replay FILE] [--weights OP=N,...] [--verbose]
 *                   [--ignore symlink-times|nlink]
 *                   SIDE_A SIDE_B
 *       Draws N operations from a seeded PRNG over the current tree (as side B
 *       shows it), applies each to both sides, and stops at the first result
 *       that differs.  Every --check-every operations and at the end the two
 *       whole trees are compared.  --replay runs the operations of a trace file
 *       instead of drawing them (a reproduction, or a reduced one).
 *   diff_oracle cmp SIDE_A SIDE_B
 *       Compares two whole trees.
 *   diff_oracle uppers UPPER_A UPPER_B
 *       Compares two upper layers on disk (design note 7).
 *
 *   SIDE is nfs:URL (libnfs, e.g. nfs://127.0.0.1/?nfsport=P&mountport=M&version=3)
 *   or local:DIR (system calls on DIR, e.g. a kernel overlayfs mount).  Side A is
 *   the system under test (union-nfsd), side B the oracle (kernel overlayfs).
 *
 * Exit status: 0 the sides agree, 1 they differ (the first difference is on
 * stdout, with the seed, the op index, the op and both results), 2 bad usage or
 * a failure of the test itself.
 *
 * Design notes
 *
 * 1. Both sides get the same operation, and an operation is drawn from side B's
 *    tree before it runs, so the sequence depends only on the seed and on the
 *    oracle - as long as the sides agree, which is what the test checks.
 * 2. libnfs is a client with opinions: it resolves symlinks in paths itself
 *    (an absolute target leaves the export: ENOENT), follows a final symlink in
 *    chmod/truncate/utimes/link/open/opendir, opens directories and FIFOs
 *    without complaint (open is LOOKUP + ACCESS), sends only the rwx bits of a
 *    MKNOD's mode, returns (size - offset) for a READ past EOF, and reports
 *    every failed WRITE as -EFAULT.  The generator never asks for what libnfs
 *    cannot express the way a kernel does: no op goes through a symlink except
 *    the ones that act on the link itself (unlink, rename, rmdir, lutimes,
 *    lstat, O_EXCL create); plain create, write, read and truncate target
 *    regular files or missing names (truncate: directories too); readdir and
 *    link never name a symlink; FIFOs are made with rwx bits only; reads are
 *    clamped to the size.  Parents are always directories found by walking
 *    real directories.
 * 3. Errors must be the same errno.  libnfs maps NFS3ERR_x with
 *    nfsstat3_to_errno(); where that mapping cannot reproduce the local errno,
 *    the pair is accepted by the table `equivalent[]` below, with its reason.
 *    Everything else is a mismatch.
 * 4. After every changing op both sides lstat the names it touched (type,
 *    permission bits, owner, size and link count of non-directories); a
 *    utimes is followed by a check of atime and mtime to the nanosecond; a
 *    write, truncate, chmod, utimes, link or rename must keep the fileid of its
 *    object on side A whenever side B keeps its inode number (copy-up and
 *    rename keep node ids).  Times are not compared otherwise: writes, copy-up
 *    and readdir move them on each side independently.
 * 5. The whole-tree comparison walks both trees in step: the same names in
 *    every directory; for each object type, permission bits and owner; for
 *    non-directories size and link count; file contents byte for byte; symlink
 *    targets; and which names are hard links of one another (fileids vs inode
 *    numbers, compared as partitions of the names).  Directory sizes and link
 *    counts differ between filesystems (overlayfs says 1 for merged dirs) and
 *    are not compared.
 * 6. Generated layers keep the kernel a fair oracle: a white-out only where its
 *    directory is merged (overlayfs lists the white-outs of a directory that
 *    lives in one layer only), and no hard links inside lower layers unless
 *    --hardlinks asks for them (overlayfs with index=off breaks such a link on
 *    copy-up: the copied name changes, the other keeps the lower data - a
 *    documented quirk a server may or may not imitate).
 *    Some generated directories are set-gid, of group 100 or 1000.
 * 7. The merged trees can agree while the uppers differ where the kernel
 *    would see it: an opaque mark missing hides nothing today, but a lower
 *    layer that gains the name would show through.  So after a run the two
 *    uppers are compared on disk, name by name where both have the name:
 *    the type, a directory's mode, owner and opaque mark, and a white-out's
 *    mode and owner (overlayfs makes those of unlink and rmdir in its work
 *    dir, 0:0; a rename's white-out comes from RENAME_WHITEOUT, in its
 *    directory).  A name in one upper only is not a difference: a failed
 *    op may copy up on one side and not on the other.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <nfsc/libnfs.h>

#include "it_util.h"

#define MAX_PATH	 512
#define MAX_DEPTH	 3 /* generated dirs; ops create one level deeper */
#define MAX_TREE	 4000
#define MAX_WRITE	 70000
#define MAX_DIFFS	 40
#define NFS_TIMEOUT_MS	 30000
#define OPAQUE_XATTR	 "trusted.overlay.opaque"
#define DEFAULT_CHECK_EV 25

static const char *const name_pool[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
#define NPOOL (sizeof(name_pool) / sizeof(name_pool[0]))
static const char *const link_targets[] = {"a",		  "../b",    "c/d",
					   "/etc/passwd", "nowhere", "."};
#define NTARGETS (sizeof(link_targets) / sizeof(link_targets[0]))
static const mode_t file_modes[] = {0644, 0644, 0644, 0600, 0755, 0444, 0640, 04755};
/* (mkdir(2) drops S_ISGID: a directory gets it from a set-gid parent only) */
static const mode_t dir_modes[] = {0755, 0755, 0755, 0700, 0775, 01777, 0750, 02775};

/* ---- small helpers ---- */

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "diff_oracle: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("out of memory");
	return p;
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		die("out of memory");
	return p;
}

static char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		die("out of memory");
	return p;
}

/* "/" + "a" = "/a", "/a" + "b" = "/a/b" */
static void join(char out[MAX_PATH], const char *dir, const char *name)
{
	if (snprintf(out, MAX_PATH, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", name) >=
	    MAX_PATH)
		die("path too long: %s/%s", dir, name);
}

static int path_depth(const char *p)
{
	int d = 0;
	if (!strcmp(p, "/"))
		return 0;
	for (; *p; p++)
		d += *p == '/';
	return d;
}

/* "0" or "-ENOENT" or "17 bytes" */
static const char *errname(int e)
{
	switch (e) {
#define E(x)                                                                             \
	case x:                                                                          \
		return #x
		E(EPERM);
		E(ENOENT);
		E(EIO);
		E(ENXIO);
		E(EACCES);
		E(EFAULT);
		E(EBUSY);
		E(EEXIST);
		E(EXDEV);
		E(ENODEV);
		E(ENOTDIR);
		E(EISDIR);
		E(EINVAL);
		E(EFBIG);
		E(ENOSPC);
		E(EROFS);
		E(EMLINK);
		E(ENAMETOOLONG);
		E(ENOTEMPTY);
		E(ELOOP);
		E(ESTALE);
		E(EINTR);
		E(EAGAIN);
		E(EOPNOTSUPP);
		E(ERANGE);
		E(ENOMEM);
		E(ETXTBSY);
#undef E
	}
	return "E?";
}

static void fmt_rc(char *out, size_t n, int rc)
{
	if (rc < 0)
		snprintf(out, n, "-%s (%d)", errname(-rc), rc);
	else
		snprintf(out, n, "%d", rc);
}

/* ---- the PRNG: xorshift64* (deterministic, seedable, good enough) ---- */

struct rng {
	uint64_t s;
};

static void rng_seed(struct rng *r, uint64_t seed)
{
	r->s = seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL;
	if (!r->s)
		r->s = 1;
}

static uint64_t rng_next(struct rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * 0x2545F4914F6CDD1DULL;
}

/* uniform-ish in [0, n) */
static uint64_t rng_below(struct rng *r, uint64_t n)
{
	return n ? rng_next(r) % n : 0;
}

static bool rng_pct(struct rng *r, unsigned pct)
{
	return rng_below(r, 100) < pct;
}

static void fill_bytes(uint64_t seed, unsigned char *buf, size_t n)
{
	struct rng r;
	rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)(rng_next(&r) >> 56);
}

/* ---- the two sides: one interface, a local and an NFS backend ---- */

struct fattr {
	uint32_t mode; /* S_IFMT | permission bits */
	uint32_t uid, gid;
	uint64_t size, ino, nlink;
	int64_t atime_s, mtime_s;
	uint32_t atime_ns, mtime_ns;
};

struct names {
	char **v;
	size_t n;
};

struct side;
/* Every function returns 0 (or a byte count) or -errno. */
struct side_ops {
	int (*lstat)(struct side *s, const char *p, struct fattr *a);
	int (*open_create)(struct side *s, const char *p, int flags, mode_t mode);
	int (*write)(struct side *s, const char *p, bool append, uint64_t off,
		     const void *buf, size_t n);
	int (*read)(struct side *s, const char *p, uint64_t off, void *buf, size_t n);
	int (*truncate)(struct side *s, const char *p, uint64_t len);
	int (*chmod)(struct side *s, const char *p, mode_t mode);
	int (*utimes)(struct side *s, const char *p, bool nofollow,
		      const struct timeval tv[2]);
	int (*mkdir)(struct side *s, const char *p, mode_t mode);
	int (*rmdir)(struct side *s, const char *p);
	int (*unlink)(struct side *s, const char *p);
	int (*rename)(struct side *s, const char *from, const char *to);
	int (*link)(struct side *s, const char *from, const char *to);
	int (*symlink)(struct side *s, const char *target, const char *p);
	int (*mkfifo)(struct side *s, const char *p, mode_t mode);
	int (*readlink)(struct side *s, const char *p, char *buf, size_t n);
	int (*list)(struct side *s, const char *p, struct names *out);
};

struct side {
	const char *label;
	const char *spec;
	const struct side_ops *ops;
	char *root;		 /* local */
	struct nfs_context *nfs; /* nfs */
	struct nfs_url *url;	 /* nfs */
};

static long num_arg(const char *v)
{
	char *end;
	long n = strtol(v, &end, 10);
	if (!*v || *end || n < 0)
		die("not a number: %s", v);
	return n;
}

static void names_add(struct names *n, const char *name)
{
	n->v = xrealloc(n->v, (n->n + 1) * sizeof(*n->v));
	n->v[n->n++] = xstrdup(name);
}

static void names_free(struct names *n)
{
	for (size_t i = 0; i < n->n; i++)
		free(n->v[i]);
	free(n->v);
	n->v = NULL;
	n->n = 0;
}

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

static void names_sort(struct names *n)
{
	if (n->n > 1) /* (qsort of NULL, even for 0 items, is undefined) */
		qsort(n->v, n->n, sizeof(*n->v), cmp_str);
}

/* -- local: system calls under a root directory -- */

static void lpath(struct side *s, char out[MAX_PATH], const char *p)
{
	if (snprintf(out, MAX_PATH, "%s%s", s->root, strcmp(p, "/") ? p : "") >= MAX_PATH)
		die("path too long: %s%s", s->root, p);
}

#define LP(var, p)                                                                       \
	char var[MAX_PATH];                                                              \
	lpath(s, var, p)

static int neg(int rc)
{
	return rc < 0 ? -errno : rc;
}

static int l_lstat(struct side *s, const char *p, struct fattr *a)
{
	struct stat st;
	LP(lp, p);
	if (lstat(lp, &st))
		return -errno;
	*a = (struct fattr){
	    .mode = st.st_mode,
	    .uid = st.st_uid,
	    .gid = st.st_gid,
	    .size = (uint64_t)st.st_size,
	    .ino = st.st_ino,
	    .nlink = st.st_nlink,
	    .atime_s = st.st_atim.tv_sec,
	    .atime_ns = (uint32_t)st.st_atim.tv_nsec,
	    .mtime_s = st.st_mtim.tv_sec,
	    .mtime_ns = (uint32_t)st.st_mtim.tv_nsec,
	};
	return 0;
}

static int l_open_create(struct side *s, const char *p, int flags, mode_t mode)
{
	LP(lp, p);
	int fd = open(lp, flags | O_NONBLOCK, mode);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static int l_write(struct side *s, const char *p, bool append, uint64_t off,
		   const void *buf, size_t n)
{
	LP(lp, p);
	/* O_NONBLOCK: a FIFO must fail (ENXIO), never hang the test */
	int fd = open(lp, O_WRONLY | O_NONBLOCK | (append ? O_APPEND : 0));
	size_t done = 0;
	int rc = 0;
	if (fd < 0)
		return -errno;
	while (done < n) {
		ssize_t w = append ? write(fd, (const char *)buf + done, n - done)
				   : pwrite(fd, (const char *)buf + done, n - done,
					    (off_t)(off + done));
		if (w <= 0) {
			rc = w < 0 ? -errno : -EIO;
			break;
		}
		done += (size_t)w;
	}
	close(fd);
	return rc ? rc : (int)done;
}

static int l_read(struct side *s, const char *p, uint64_t off, void *buf, size_t n)
{
	LP(lp, p);
	int fd = open(lp, O_RDONLY | O_NONBLOCK);
	size_t done = 0;
	int rc = 0;
	if (fd < 0)
		return -errno;
	while (done < n) {
		ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
		if (r < 0)
			rc = -errno;
		if (r <= 0)
			break;
		done += (size_t)r;
	}
	close(fd);
	return rc ? rc : (int)done;
}

static int l_truncate(struct side *s, const char *p, uint64_t len)
{
	LP(lp, p);
	return neg(truncate(lp, (off_t)len));
}

static int l_chmod(struct side *s, const char *p, mode_t mode)
{
	LP(lp, p);
	return neg(chmod(lp, mode));
}

static int l_utimes(struct side *s, const char *p, bool nofollow,
		    const struct timeval tv[2])
{
	LP(lp, p);
	return neg(nofollow ? lutimes(lp, tv) : utimes(lp, tv));
}

static int l_mkdir(struct side *s, const char *p, mode_t mode)
{
	LP(lp, p);
	return neg(mkdir(lp, mode));
}

static int l_rmdir(struct side *s, const char *p)
{
	LP(lp, p);
	return neg(rmdir(lp));
}

static int l_unlink(struct side *s, const char *p)
{
	LP(lp, p);
	return neg(unlink(lp));
}

static int l_rename(struct side *s, const char *from, const char *to)
{
	LP(lf, from);
	LP(lt, to);
	return neg(rename(lf, lt));
}

static int l_link(struct side *s, const char *from, const char *to)
{
	LP(lf, from);
	LP(lt, to);
	return neg(link(lf, lt));
}

static int l_symlink(struct side *s, const char *target, const char *p)
{
	LP(lp, p);
	return neg(symlink(target, lp));
}

static int l_mkfifo(struct side *s, const char *p, mode_t mode)
{
	LP(lp, p);
	return neg(mkfifo(lp, mode));
}

static int l_readlink(struct side *s, const char *p, char *buf, size_t n)
{
	LP(lp, p);
	ssize_t r = readlink(lp, buf, n - 1);
	if (r < 0)
		return -errno;
	buf[r] = '\0';
	return (int)r;
}

static int l_list(struct side *s, const char *p, struct names *out)
{
	LP(lp, p);
	DIR *d = opendir(lp);
	struct dirent *de;
	if (!d)
		return -errno;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			names_add(out, de->d_name);
	closedir(d);
	names_sort(out);
	return 0;
}

static const struct side_ops local_ops = {
    .lstat = l_lstat,
    .open_create = l_open_create,
    .write = l_write,
    .read = l_read,
    .truncate = l_truncate,
    .chmod = l_chmod,
    .utimes = l_utimes,
    .mkdir = l_mkdir,
    .rmdir = l_rmdir,
    .unlink = l_unlink,
    .rename = l_rename,
    .link = l_link,
    .symlink = l_symlink,
    .mkfifo = l_mkfifo,
    .readlink = l_readlink,
    .list = l_list,
};

/* -- nfs: the libnfs sync API; every call returns 0/count or -errno -- */

static int n_lstat(struct side *s, const char *p, struct fattr *a)
{
	struct nfs_stat_64 st;
	int rc = nfs_lstat64(s->nfs, p, &st);
	if (rc)
		return rc;
	*a = (struct fattr){
	    .mode = (uint32_t)st.nfs_mode,
	    .uid = (uint32_t)st.nfs_uid,
	    .gid = (uint32_t)st.nfs_gid,
	    .size = st.nfs_size,
	    .ino = st.nfs_ino,
	    .nlink = st.nfs_nlink,
	    .atime_s = (int64_t)st.nfs_atime,
	    .atime_ns = (uint32_t)st.nfs_atime_nsec,
	    .mtime_s = (int64_t)st.nfs_mtime,
	    .mtime_ns = (uint32_t)st.nfs_mtime_nsec,
	};
	return 0;
}

static int n_open_create(struct side *s, const char *p, int flags, mode_t mode)
{
	struct nfsfh *fh = NULL;
	int rc = nfs_create(s->nfs, p, flags, (int)mode, &fh);
	if (rc)
		return rc;
	return nfs_close(s->nfs, fh);
}

static int n_write(struct side *s, const char *p, bool append, uint64_t off,
		   const void *buf, size_t n)
{
	struct nfsfh *fh = NULL;
	size_t done = 0;
	int rc = nfs_open(s->nfs, p, O_WRONLY | (append ? O_APPEND : 0), &fh);
	if (rc)
		return rc;
	while (done < n) {
		const char *b = (const char *)buf + done;
		int w = append ? nfs_write(s->nfs, fh, n - done, b)
			       : nfs_pwrite(s->nfs, fh, off + done, n - done, b);
		if (w <= 0) {
			rc = w < 0 ? w : -EIO;
			break;
		}
		done += (size_t)w;
	}
	/* close sends COMMIT for the UNSTABLE writes */
	int c = nfs_close(s->nfs, fh);
	if (!rc && c < 0)
		rc = c;
	return rc ? rc : (int)done;
}

static int n_read(struct side *s, const char *p, uint64_t off, void *buf, size_t n)
{
	struct nfsfh *fh = NULL;
	size_t done = 0;
	struct nfs_stat_64 st;
	int rc = nfs_open(s->nfs, p, O_RDONLY, &fh);
	if (rc)
		return rc;
	/* libnfs 4.0's pread at or past EOF returns (size - offset), negative,
	 * rather than 0: ask only for bytes below the size */
	if ((rc = nfs_fstat64(s->nfs, fh, &st)))
		goto out;
	n = off >= st.nfs_size ? 0
			       : (size_t)(n < st.nfs_size - off ? n : st.nfs_size - off);
	while (done < n) {
		int r = nfs_pread(s->nfs, fh, off + done, n - done, (char *)buf + done);
		if (r < 0)
			rc = r;
		if (r <= 0)
			break;
		done += (size_t)r;
	}
out:
	nfs_close(s->nfs, fh);
	return rc ? rc : (int)done;
}

static int n_truncate(struct side *s, const char *p, uint64_t len)
{
	return nfs_truncate(s->nfs, p, len);
}

static int n_chmod(struct side *s, const char *p, mode_t mode)
{
	return nfs_chmod(s->nfs, p, (int)mode);
}

static int n_utimes(struct side *s, const char *p, bool nofollow,
		    const struct timeval tv[2])
{
	struct timeval t[2] = {tv[0], tv[1]};
	return nofollow ? nfs_lutimes(s->nfs, p, t) : nfs_utimes(s->nfs, p, t);
}

static int n_mkdir(struct side *s, const char *p, mode_t mode)
{
	return nfs_mkdir2(s->nfs, p, (int)mode);
}

static int n_rmdir(struct side *s, const char *p)
{
	return nfs_rmdir(s->nfs, p);
}

static int n_unlink(struct side *s, const char *p)
{
	return nfs_unlink(s->nfs, p);
}

static int n_rename(struct side *s, const char *from, const char *to)
{
	return nfs_rename(s->nfs, from, to);
}

static int n_link(struct side *s, const char *from, const char *to)
{
	return nfs_link(s->nfs, from, to);
}

static int n_symlink(struct side *s, const char *target, const char *p)
{
	return nfs_symlink(s->nfs, target, p);
}

static int n_mkfifo(struct side *s, const char *p, mode_t mode)
{
	return nfs_mknod(s->nfs, p, (int)(S_IFIFO | mode), 0);
}

static int n_readlink(struct side *s, const char *p, char *buf, size_t n)
{
	char *t = NULL;
	int rc = nfs_readlink2(s->nfs, p, &t);
	if (rc)
		return rc;
	snprintf(buf, n, "%s", t);
	rc = (int)strlen(buf);
	free(t);
	return rc;
}

static int n_list(struct side *s, const char *p, struct names *out)
{
	struct nfsdir *d = NULL;
	struct nfsdirent *de;
	int rc = nfs_opendir(s->nfs, p, &d);
	if (rc)
		return rc;
	while ((de = nfs_readdir(s->nfs, d)))
		if (strcmp(de->name, ".") && strcmp(de->name, ".."))
			names_add(out, de->name);
	nfs_closedir(s->nfs, d);
	names_sort(out);
	return 0;
}

static const struct side_ops nfs_ops = {
    .lstat = n_lstat,
    .open_create = n_open_create,
    .write = n_write,
    .read = n_read,
    .truncate = n_truncate,
    .chmod = n_chmod,
    .utimes = n_utimes,
    .mkdir = n_mkdir,
    .rmdir = n_rmdir,
    .unlink = n_unlink,
    .rename = n_rename,
    .link = n_link,
    .symlink = n_symlink,
    .mkfifo = n_mkfifo,
    .readlink = n_readlink,
    .list = n_list,
};

static void side_open_nfs(struct side *s, const char *url)
{
	s->ops = &nfs_ops;
	s->nfs = nfs_init_context();
	if (!s->nfs)
		die("nfs_init_context failed");
	/* no client-side caching and no silent retries: every call is one
	 * round trip to the server, and a dead server is an error, not a hang */
	nfs_set_dircache(s->nfs, 0);
	nfs_set_pagecache(s->nfs, 0);
	nfs_set_readahead(s->nfs, 0);
	nfs_set_autoreconnect(s->nfs, 0);
	nfs_set_timeout(s->nfs, NFS_TIMEOUT_MS);
	s->url = nfs_parse_url_dir(s->nfs, url);
	if (!s->url)
		die("bad URL %s: %s", url, nfs_get_error(s->nfs));
	if (nfs_mount(s->nfs, s->url->server, s->url->path))
		die("mount %s: %s", url, nfs_get_error(s->nfs));
}

static void side_open(struct side *s, const char *label, const char *spec)
{
	memset(s, 0, sizeof(*s));
	s->label = label;
	s->spec = spec;
	if (!strncmp(spec, "nfs:", 4)) {
		side_open_nfs(s, spec + 4);
	} else if (!strncmp(spec, "local:", 6)) {
		s->ops = &local_ops;
		s->root = xstrdup(spec + 6);
	} else {
		die("a side is nfs:URL or local:DIR, not %s", spec);
	}
}

static void side_close(struct side *s)
{
	if (s->nfs) {
		nfs_umount(s->nfs);
		nfs_destroy_url(s->url);
		nfs_destroy_context(s->nfs);
	}
	free(s->root);
}

/* ---- gen: the layers ---- */

enum ltype { LT_NONE, LT_DIR, LT_REG, LT_LNK, LT_FIFO, LT_WH, LT_OTHER };

struct gen {
	struct rng r;
	const char *dir;
	int nlower;
};

static void layer_path(const struct gen *g, char out[MAX_PATH], int k, const char *rel)
{
	if (snprintf(out, MAX_PATH, "%s/l%d%s", g->dir, k, strcmp(rel, "/") ? rel : "") >=
	    MAX_PATH)
		die("path too long");
}

static enum ltype ltype_at(const struct gen *g, int k, const char *rel)
{
	char lp[MAX_PATH];
	struct stat st;
	layer_path(g, lp, k, rel);
	if (lstat(lp, &st))
		return LT_NONE;
	if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0))
		return LT_WH;
	if (S_ISDIR(st.st_mode))
		return LT_DIR;
	if (S_ISREG(st.st_mode))
		return LT_REG;
	if (S_ISLNK(st.st_mode))
		return LT_LNK;
	return S_ISFIFO(st.st_mode) ? LT_FIFO : LT_OTHER;
}

static bool is_opaque(const struct gen *g, int k, const char *rel)
{
	char lp[MAX_PATH], v[8];
	layer_path(g, lp, k, rel);
	ssize_t n = lgetxattr(lp, OPAQUE_XATTR, v, sizeof(v));
	return n == 1 && v[0] == 'y';
}

/* What a lookup meets first below layer K at REL (a rough guide for the
 * generator only; the sanitizer below is exact). */
static enum ltype type_below(const struct gen *g, int k, const char *rel)
{
	for (int j = k + 1; j <= g->nlower; j++) {
		enum ltype t = ltype_at(g, j, rel);
		if (t != LT_NONE)
			return t;
	}
	return LT_NONE;
}

static void names_below(const struct gen *g, int k, const char *rel, struct names *out)
{
	for (int j = k + 1; j <= g->nlower; j++) {
		char lp[MAX_PATH];
		DIR *d;
		struct dirent *de;
		layer_path(g, lp, j, rel);
		d = opendir(lp);
		if (!d)
			continue;
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				names_add(out, de->d_name);
		closedir(d);
	}
}

static size_t gen_size(struct gen *g)
{
	uint64_t roll = rng_below(&g->r, 100);
	if (roll < 10)
		return 0;
	if (roll < 40)
		return 1 + rng_below(&g->r, 64);
	if (roll < 75)
		return 64 + rng_below(&g->r, 4096);
	if (roll < 97)
		return 4096 + rng_below(&g->r, 40000);
	return 100000 + rng_below(&g->r, 200000);
}

static void gen_owner(struct gen *g, const char *lp)
{
	uint64_t roll = rng_below(&g->r, 100);
	uid_t id = roll < 8 ? 65534 : roll < 12 ? 1000 : 0;
	if (id && lchown(lp, id, id))
		die("chown %s: %s", lp, strerror(errno));
}

static void gen_file(struct gen *g, const char *lp)
{
	size_t n = gen_size(g);
	unsigned char *buf = xmalloc(n);
	mode_t mode = file_modes[rng_below(&g->r, sizeof(file_modes) / sizeof(mode_t))];
	int fd = open(lp, O_WRONLY | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		die("create %s: %s", lp, strerror(errno));
	fill_bytes(rng_next(&g->r), buf, n);
	if (write(fd, buf, n) != (ssize_t)n)
		die("write %s: %s", lp, strerror(errno));
	close(fd);
	free(buf);
	gen_owner(g, lp);
	if (chmod(lp, mode)) /* after chown, which clears set-id bits */
		die("chmod %s: %s", lp, strerror(errno));
}

static void gen_dir(struct gen *g, int k, const char *rel, int depth);

/* Some directories are set-gid, of a group other than root's: what is made
 * in them takes that group, except what overlayfs makes in its work dir
 * (white-outs), which the uppers comparison checks. */
static void gen_dir_sgid(struct gen *g, const char *lp)
{
	struct stat st;
	gid_t gid = rng_pct(&g->r, 50) ? 100 : 1000;

	if (!rng_pct(&g->r, 15))
		return;
	if (lstat(lp, &st) || lchown(lp, 0, gid) ||
	    chmod(lp, (st.st_mode & 07777) | S_ISGID))
		die("set-gid %s: %s", lp, strerror(errno));
}

/* Makes one object at REL in layer K: a directory (filled recursively, maybe
 * opaque), a file, a symlink, a FIFO or a white-out - mostly over what the
 * layers below have at that name, so that names collide across layers. */
static void gen_entry(struct gen *g, int k, const char *rel, int depth)
{
	enum ltype bt = type_below(g, k, rel);
	uint64_t roll = rng_below(&g->r, 100);
	enum ltype t;
	bool opaque = false;
	char lp[MAX_PATH];

	layer_path(g, lp, k, rel);
	if (bt == LT_DIR)
		t = roll < 75 ? LT_DIR : roll < 85 ? LT_WH : roll < 93 ? LT_REG : LT_LNK;
	else if (bt != LT_NONE && bt != LT_WH)
		t = roll < 40	? LT_REG
		    : roll < 55 ? LT_WH
		    : roll < 85 ? LT_DIR
		    : roll < 95 ? LT_LNK
				: LT_FIFO;
	else
		t = roll < 50	? LT_DIR
		    : roll < 85 ? LT_REG
		    : roll < 93 ? LT_LNK
		    : roll < 96 ? LT_FIFO
				: LT_WH;
	if (t == LT_DIR && depth > MAX_DEPTH)
		t = LT_REG;
	if (t == LT_DIR && bt == LT_DIR)
		opaque = rng_pct(&g->r, 20);

	switch (t) {
	case LT_DIR:
		if (mkdir(
			lp,
			dir_modes[rng_below(&g->r, sizeof(dir_modes) / sizeof(mode_t))]))
			die("mkdir %s: %s", lp, strerror(errno));
		if (opaque && lsetxattr(lp, OPAQUE_XATTR, "y", 1, 0))
			die("setxattr %s: %s", lp, strerror(errno));
		gen_dir_sgid(g, lp);
		gen_dir(g, k, rel, depth);
		break;
	case LT_REG:
		gen_file(g, lp);
		break;
	case LT_LNK:
		if (symlink(link_targets[rng_below(&g->r, NTARGETS)], lp))
			die("symlink %s: %s", lp, strerror(errno));
		break;
	case LT_FIFO:
		if (mkfifo(lp, 0644))
			die("mkfifo %s: %s", lp, strerror(errno));
		break;
	default:
		if (mknod(lp, S_IFCHR, makedev(0, 0)))
			die("mknod %s: %s", lp, strerror(errno));
		break;
	}
}

static void gen_dir(struct gen *g, int k, const char *rel, int depth)
{
	struct names below = {0};
	uint64_t n = depth == 0 ? 6 + rng_below(&g->r, 5) : 2 + rng_below(&g->r, 4);

	names_below(g, k, rel, &below);
	for (uint64_t i = 0; i < n; i++) {
		const char *name = below.n && rng_pct(&g->r, 60)
				       ? below.v[rng_below(&g->r, below.n)]
				       : name_pool[rng_below(&g->r, NPOOL)];
		char child[MAX_PATH];
		join(child, rel, name);
		if (ltype_at(g, k, child) == LT_NONE)
			gen_entry(g, k, child, depth + 1);
	}
	names_free(&below);
}

/* Walks the merged tree as overlayfs' lookup does and removes every white-out
 * that a directory living in one layer only would list (design note 6).
 * LAYERS are the layers (top first) whose directory REL takes part. */
static void sanitize(const struct gen *g, const char *rel, const int *layers, int n)
{
	struct names all = {0};
	for (int i = 0; i < n; i++) {
		char lp[MAX_PATH];
		DIR *d;
		struct dirent *de;
		layer_path(g, lp, layers[i], rel);
		if (!(d = opendir(lp)))
			die("opendir %s: %s", lp, strerror(errno));
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				names_add(&all, de->d_name);
		closedir(d);
	}
	names_sort(&all);
	for (size_t i = 0; i < all.n; i++) {
		char child[MAX_PATH];
		int sub[8], nsub = 0;
		bool found = false;
		if (i && !strcmp(all.v[i], all.v[i - 1]))
			continue;
		join(child, rel, all.v[i]);
		for (int j = 0; j < n; j++) {
			enum ltype t = ltype_at(g, layers[j], child);
			if (t == LT_NONE)
				continue;
			if (t == LT_WH && !found && n == 1) {
				char lp[MAX_PATH];
				layer_path(g, lp, layers[j], child);
				if (unlink(lp))
					die("unlink %s: %s", lp, strerror(errno));
			}
			if (t != LT_DIR)
				break;
			found = true;
			sub[nsub++] = layers[j];
			if (is_opaque(g, layers[j], child))
				break;
		}
		if (nsub)
			sanitize(g, child, sub, nsub);
	}
	names_free(&all);
}

static void mkdir_or_die(const char *p, mode_t mode)
{
	if (mkdir(p, mode) && errno != EEXIST)
		die("mkdir %s: %s", p, strerror(errno));
}

/* Collects layer K's regular files and directories below REL (layer-relative). */
static void layer_objects(const struct gen *g, int k, const char *rel,
			  struct names *files, struct names *dirs)
{
	char lp[MAX_PATH];
	DIR *d;
	struct dirent *de;
	names_add(dirs, rel);
	layer_path(g, lp, k, rel);
	if (!(d = opendir(lp)))
		die("opendir %s: %s", lp, strerror(errno));
	while ((de = readdir(d))) {
		char child[MAX_PATH];
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		join(child, rel, de->d_name);
		if (ltype_at(g, k, child) == LT_DIR)
			layer_objects(g, k, child, files, dirs);
		else if (ltype_at(g, k, child) == LT_REG)
			names_add(files, child);
	}
	closedir(d);
}

/* --hardlinks: a second name, inside the same layer, for a fifth of a layer's
 * files.  Off by default (design note 6): overlayfs with index=off breaks such
 * a link on copy-up, which a server need not imitate. */
static void gen_hardlinks(struct gen *g, int k)
{
	struct names files = {0}, dirs = {0};
	layer_objects(g, k, "/", &files, &dirs);
	names_sort(&files);
	names_sort(&dirs);
	for (size_t i = 0; i < files.n / 5 + 1 && files.n; i++) {
		char from[MAX_PATH], to[MAX_PATH], lf[MAX_PATH], lt[MAX_PATH];
		snprintf(from, sizeof(from), "%s", files.v[rng_below(&g->r, files.n)]);
		join(to, dirs.v[rng_below(&g->r, dirs.n)],
		     name_pool[rng_below(&g->r, NPOOL)]);
		if (ltype_at(g, k, to) != LT_NONE)
			continue;
		layer_path(g, lf, k, from);
		layer_path(g, lt, k, to);
		if (link(lf, lt))
			die("link %s %s: %s", lf, lt, strerror(errno));
	}
	names_free(&files);
	names_free(&dirs);
}

static int cmd_gen(uint64_t seed, const char *dir, bool hardlinks)
{
	struct gen g = {.dir = dir};
	int layers[8];
	char p[MAX_PATH];

	rng_seed(&g.r, seed);
	g.nlower = 2 + (int)rng_below(&g.r, 2);
	mkdir_or_die(dir, 0755);
	for (int k = 1; k <= g.nlower; k++) {
		layer_path(&g, p, k, "/");
		mkdir_or_die(p, 0755);
		layers[k - 1] = k;
	}
	snprintf(p, sizeof(p), "%s/u", dir);
	mkdir_or_die(p, 0755);
	snprintf(p, sizeof(p), "%s/w", dir);
	mkdir_or_die(p, 0755);
	for (int k = g.nlower; k >= 1; k--) {
		gen_dir(&g, k, "/", 0);
		if (hardlinks)
			gen_hardlinks(&g, k);
	}
	sanitize(&g, "/", layers, g.nlower);
	printf("%d\n", g.nlower);
	return 0;
}

/* ---- trees: the walk behind op selection, and the whole-tree comparison ---- */

struct entry {
	char *path;
	uint32_t mode;
	uint64_t size;
};

struct tree {
	struct entry *v;
	size_t n;
	size_t ndirs;
};

static void tree_add(struct tree *t, const char *p, const struct fattr *a)
{
	if (t->n >= MAX_TREE)
		die("the tree grew beyond %d objects", MAX_TREE);
	t->v = xrealloc(t->v, (t->n + 1) * sizeof(*t->v));
	t->v[t->n++] = (struct entry){xstrdup(p), a->mode, a->size};
	t->ndirs += S_ISDIR(a->mode);
}

static void tree_free(struct tree *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].path);
	free(t->v);
	memset(t, 0, sizeof(*t));
}

/* Side B is the oracle: a failure to read it is a failure of the test. */
static void tree_walk(struct side *s, const char *p, const struct fattr *self,
		      struct tree *t)
{
	struct names ns = {0};
	int rc;
	tree_add(t, p, self);
	if (!S_ISDIR(self->mode))
		return;
	if ((rc = s->ops->list(s, p, &ns)))
		die("%s: cannot list %s: %s", s->label, p, strerror(-rc));
	for (size_t i = 0; i < ns.n; i++) {
		char child[MAX_PATH];
		struct fattr a;
		join(child, p, ns.v[i]);
		if ((rc = s->ops->lstat(s, child, &a)))
			die("%s: cannot lstat %s: %s", s->label, child, strerror(-rc));
		tree_walk(s, child, &a, t);
	}
	names_free(&ns);
}

static const struct entry *tree_find(const struct tree *t, const char *p)
{
	for (size_t i = 0; i < t->n; i++)
		if (!strcmp(t->v[i].path, p))
			return &t->v[i];
	return NULL;
}

static void fmt_attr(char *out, size_t n, int rc, const struct fattr *a)
{
	if (rc) {
		fmt_rc(out, n, rc);
		return;
	}
	if (S_ISDIR(a->mode))
		snprintf(out, n, "d %04o %u:%u", a->mode & 07777, a->uid, a->gid);
	else
		snprintf(out, n, "%c %04o %u:%u size=%" PRIu64 " nlink=%" PRIu64,
			 it_type_char(a->mode), a->mode & 07777, a->uid, a->gid, a->size,
			 a->nlink);
}

/* --ignore symlink-times: nfs-ganesha's VFS backend sets a symlink's times to
 * now, whatever it is asked.  --ignore nlink: overlayfs with nfs_export=on,
 * exported by ganesha, counts its index link in a copied-up file's nlink.
 * Deviations of that reference setup only (DIFF_SERVER=ganesha). */
static bool ignore_symlink_times, ignore_nlink;

/* The attributes both sides must agree on (design note 5). */
static bool attrs_agree(int ra, const struct fattr *a, int rb, const struct fattr *b)
{
	if (ra || rb)
		return ra == rb;
	if (a->mode != b->mode || a->uid != b->uid || a->gid != b->gid)
		return false;
	if (S_ISDIR(a->mode))
		return true;
	return a->size == b->size && (a->nlink == b->nlink || ignore_nlink);
}

struct idpair {
	char *path;
	uint64_t ino_a, ino_b;
};

struct cmp {
	struct side *a, *b;
	int ndiffs;
	struct idpair *ids;
	size_t nids;
};

static void diff_line(struct cmp *c, const char *fmt, ...)
{
	va_list ap;
	if (c->ndiffs++ >= MAX_DIFFS)
		return;
	va_start(ap, fmt);
	printf("  DIFF ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
}

/* Reads all of a file (SIZE bytes expected; reads on past it to see EOF). */
static int slurp(struct side *s, const char *p, uint64_t size, unsigned char **out)
{
	size_t cap = (size_t)size + 1;
	unsigned char *buf = xmalloc(cap);
	int rc = s->ops->read(s, p, 0, buf, cap);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*out = buf;
	return rc;
}

static void cmp_file(struct cmp *c, const char *p, uint64_t size)
{
	unsigned char *da = NULL, *db = NULL;
	int ra = slurp(c->a, p, size, &da), rb = slurp(c->b, p, size, &db);
	if (ra < 0 || rb < 0 || ra != rb || memcmp(da, db, (size_t)ra)) {
		size_t off = 0;
		while (ra >= 0 && rb >= 0 && off < (size_t)ra && off < (size_t)rb &&
		       da[off] == db[off])
			off++;
		diff_line(
		    c,
		    "%s: content: %s read %d bytes, %s read %d; first difference at %zu",
		    p, c->a->label, ra, c->b->label, rb, off);
	}
	free(da);
	free(db);
}

static void cmp_symlink(struct cmp *c, const char *p)
{
	char ta[PATH_MAX], tb[PATH_MAX];
	int ra = c->a->ops->readlink(c->a, p, ta, sizeof(ta));
	int rb = c->b->ops->readlink(c->b, p, tb, sizeof(tb));
	if (ra < 0 || rb < 0 || strcmp(ta, tb))
		diff_line(c, "%s: symlink target: %s '%s' (%d), %s '%s' (%d)", p,
			  c->a->label, ra < 0 ? "" : ta, ra, c->b->label,
			  rb < 0 ? "" : tb, rb);
}

static void cmp_object(struct cmp *c, const char *p);

static void cmp_listing(struct cmp *c, const char *p)
{
	struct names na = {0}, nb = {0};
	int ra = c->a->ops->list(c->a, p, &na), rb = c->b->ops->list(c->b, p, &nb);
	size_t i = 0, j = 0;
	if (ra || rb) {
		diff_line(c, "%s: readdir: %s %d, %s %d", p, c->a->label, ra, c->b->label,
			  rb);
		goto out;
	}
	while (i < na.n || j < nb.n) {
		int d = i == na.n ? 1 : j == nb.n ? -1 : strcmp(na.v[i], nb.v[j]);
		char child[MAX_PATH];
		if (d < 0) {
			join(child, p, na.v[i++]);
			diff_line(c, "%s: only on %s", child, c->a->label);
		} else if (d > 0) {
			join(child, p, nb.v[j++]);
			diff_line(c, "%s: only on %s", child, c->b->label);
		} else {
			join(child, p, na.v[i]);
			i++, j++;
			cmp_object(c, child);
		}
	}
out:
	names_free(&na);
	names_free(&nb);
}

static void cmp_object(struct cmp *c, const char *p)
{
	struct fattr fa, fb;
	int ra = c->a->ops->lstat(c->a, p, &fa), rb = c->b->ops->lstat(c->b, p, &fb);
	if (!attrs_agree(ra, &fa, rb, &fb)) {
		char da[128], db[128];
		fmt_attr(da, sizeof(da), ra, &fa);
		fmt_attr(db, sizeof(db), rb, &fb);
		diff_line(c, "%s: %s [%s], %s [%s]", p, c->a->label, da, c->b->label, db);
	}
	if (ra || rb || (fa.mode & S_IFMT) != (fb.mode & S_IFMT))
		return;
	if (S_ISDIR(fa.mode)) {
		cmp_listing(c, p);
		return;
	}
	c->ids = xrealloc(c->ids, (c->nids + 1) * sizeof(*c->ids));
	c->ids[c->nids++] = (struct idpair){xstrdup(p), fa.ino, fb.ino};
	if (S_ISREG(fa.mode))
		cmp_file(c, p, fa.size > fb.size ? fa.size : fb.size);
	else if (S_ISLNK(fa.mode))
		cmp_symlink(c, p);
}

/* Hard links: two names are one object on side A iff they are on side B. */
static void cmp_link_groups(struct cmp *c)
{
	for (size_t i = 0; i < c->nids; i++)
		for (size_t j = i + 1; j < c->nids; j++) {
			bool la = c->ids[i].ino_a == c->ids[j].ino_a;
			bool lb = c->ids[i].ino_b == c->ids[j].ino_b;
			if (la != lb)
				diff_line(c, "%s and %s: one object on %s: %s, on %s: %s",
					  c->ids[i].path, c->ids[j].path, c->a->label,
					  la ? "yes" : "no", c->b->label,
					  lb ? "yes" : "no");
		}
}

/* Returns the number of differences (printed, the first MAX_DIFFS of them). */
static int compare_trees(struct side *a, struct side *b)
{
	struct cmp c = {.a = a, .b = b};
	cmp_object(&c, "/");
	cmp_link_groups(&c);
	for (size_t i = 0; i < c.nids; i++)
		free(c.ids[i].path);
	free(c.ids);
	if (c.ndiffs > MAX_DIFFS)
		printf("  ... %d differences in all\n", c.ndiffs);
	return c.ndiffs;
}

/* ---- uppers: the two upper layers on disk (design note 7) ---- */

/* What the comparison of uppers looks at in one entry: its type; for a
 * directory its mode, owner and opaque mark; for a white-out its mode and
 * owner.  The rest means the same in the merged trees, which compare_trees
 * checks. */
static void upper_describe(const char *lp, const struct stat *st, char *out, size_t n)
{
	char v[16];
	ssize_t len;

	if (S_ISDIR(st->st_mode)) {
		len = lgetxattr(lp, OPAQUE_XATTR, v, sizeof(v) - 1);
		v[len > 0 ? len : 0] = '\0';
		snprintf(out, n, "d %04o %u:%u opaque=%s", st->st_mode & 07777,
			 st->st_uid, st->st_gid, len >= 0 ? v : "-");
	} else if (S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0)) {
		snprintf(out, n, "white-out %04o %u:%u", st->st_mode & 07777, st->st_uid,
			 st->st_gid);
	} else {
		snprintf(out, n, "%c", it_type_char(st->st_mode));
	}
}

static void upper_list(const char *lp, struct names *out)
{
	DIR *d = opendir(lp);
	struct dirent *de;

	if (!d)
		die("opendir %s: %s", lp, strerror(errno));
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			names_add(out, de->d_name);
	closedir(d);
	names_sort(out);
}

/* Compares entry REL of the uppers A and B, and below it.  A name in one
 * upper only is left alone: the two may copy up at different times (a
 * failed op, a read), which the merged trees do not show. */
static void upper_cmp(struct cmp *c, const char *ua, const char *ub, const char *rel)
{
	char pa[MAX_PATH], pb[MAX_PATH], da[128], db[128];
	struct names na = {0}, nb = {0};
	struct stat sa, sb;
	size_t i = 0, j = 0;

	if (snprintf(pa, sizeof(pa), "%s%s", ua, rel) >= MAX_PATH ||
	    snprintf(pb, sizeof(pb), "%s%s", ub, rel) >= MAX_PATH)
		die("path too long: %s", rel);
	if (lstat(pa, &sa) || lstat(pb, &sb))
		die("lstat %s: %s", rel, strerror(errno));
	upper_describe(pa, &sa, da, sizeof(da));
	upper_describe(pb, &sb, db, sizeof(db));
	if (strcmp(da, db))
		diff_line(c, "%s: upper of %s [%s], of %s [%s]", rel, c->a->label, da,
			  c->b->label, db);
	if (!S_ISDIR(sa.st_mode) || !S_ISDIR(sb.st_mode))
		return;
	upper_list(pa, &na);
	upper_list(pb, &nb);
	while (i < na.n && j < nb.n) {
		int d = strcmp(na.v[i], nb.v[j]);
		char child[MAX_PATH];

		if (d) {
			i += d < 0;
			j += d > 0;
			continue;
		}
		join(child, strcmp(rel, "") ? rel : "/", na.v[i]);
		upper_cmp(c, ua, ub, child);
		i++, j++;
	}
	names_free(&na);
	names_free(&nb);
}

/* Returns the number of differences between upper dirs UA and UB. */
static int compare_uppers(const char *ua, const char *ub)
{
	struct side a = {.label = getenv("DIFF_ORACLE_LABEL_A")},
		    b = {.label = getenv("DIFF_ORACLE_LABEL_B")};
	struct cmp c = {.a = &a, .b = &b};

	a.label = a.label ? a.label : "A";
	b.label = b.label ? b.label : "B";
	upper_cmp(&c, ua, ub, "");
	if (c.ndiffs > MAX_DIFFS)
		printf("  ... %d differences in all\n", c.ndiffs);
	return c.ndiffs;
}

/* ---- operations ---- */

enum op_kind {
	OP_CREATE_EXCL,
	OP_CREATE,
	OP_WRITE,
	OP_APPEND,
	OP_TRUNCATE,
	OP_CHMOD,
	OP_UTIMES,
	OP_MKDIR,
	OP_RMDIR,
	OP_UNLINK,
	OP_RENAME,
	OP_LINK,
	OP_SYMLINK,
	OP_MKFIFO,
	OP_READ,
	OP_READDIR,
	OP_STAT,
	OP_NKINDS
};

/* weight: how often the generator draws it (relative to the sum; --weights
 * overrides); two: takes a second path; changes: changes the tree; keeps_id:
 * the object's fileid must survive */
static const struct op_info {
	const char *name;
	unsigned weight;
	bool two, changes, keeps_id;
} op_info[OP_NKINDS] = {
    [OP_CREATE_EXCL] = {"create_excl", 7, false, true, false},
    [OP_CREATE] = {"create", 6, false, true, false},
    [OP_WRITE] = {"write", 10, false, true, true},
    [OP_APPEND] = {"append", 5, false, true, true},
    [OP_TRUNCATE] = {"truncate", 7, false, true, true},
    [OP_CHMOD] = {"chmod", 5, false, true, true},
    [OP_UTIMES] = {"utimes", 4, false, true, true},
    [OP_MKDIR] = {"mkdir", 7, false, true, false},
    [OP_RMDIR] = {"rmdir", 7, false, true, false},
    [OP_UNLINK] = {"unlink", 9, false, true, false},
    [OP_RENAME] = {"rename", 12, true, true, true},
    [OP_LINK] = {"link", 4, true, true, true},
    [OP_SYMLINK] = {"symlink", 4, false, true, false},
    [OP_MKFIFO] = {"mkfifo", 3, false, true, false},
    [OP_READ] = {"read", 5, false, false, false},
    [OP_READDIR] = {"readdir", 5, false, false, false},
    [OP_STAT] = {"stat", 2, false, false, false},
};

struct op {
	enum op_kind kind;
	char path[MAX_PATH], path2[MAX_PATH], target[64];
	uint64_t off, len, data;
	uint32_t mode;
	bool trunc, nofollow;
	struct timeval tv[2]; /* atime, mtime */
};

/* One line, the format --replay reads back. */
static void op_format(const struct op *op, char *out, size_t n)
{
	const char *k = op_info[op->kind].name;
	switch (op->kind) {
	case OP_CREATE_EXCL:
	case OP_MKDIR:
	case OP_MKFIFO:
	case OP_CHMOD:
		snprintf(out, n, "%s %s mode=%04o", k, op->path, op->mode);
		break;
	case OP_CREATE:
		snprintf(out, n, "%s %s mode=%04o trunc=%d", k, op->path, op->mode,
			 op->trunc);
		break;
	case OP_WRITE:
	case OP_READ:
		snprintf(out, n, "%s %s off=%" PRIu64 " len=%" PRIu64 " data=%" PRIu64, k,
			 op->path, op->off, op->len, op->data);
		break;
	case OP_APPEND:
		snprintf(out, n, "%s %s len=%" PRIu64 " data=%" PRIu64, k, op->path,
			 op->len, op->data);
		break;
	case OP_TRUNCATE:
		snprintf(out, n, "%s %s len=%" PRIu64, k, op->path, op->len);
		break;
	case OP_UTIMES:
		snprintf(out, n, "%s %s atime=%ld.%06ld mtime=%ld.%06ld nofollow=%d", k,
			 op->path, (long)op->tv[0].tv_sec, (long)op->tv[0].tv_usec,
			 (long)op->tv[1].tv_sec, (long)op->tv[1].tv_usec, op->nofollow);
		break;
	case OP_RENAME:
	case OP_LINK:
		snprintf(out, n, "%s %s %s", k, op->path, op->path2);
		break;
	case OP_SYMLINK:
		snprintf(out, n, "%s %s target=%s", k, op->path, op->target);
		break;
	default:
		snprintf(out, n, "%s %s", k, op->path);
		break;
	}
}

static bool parse_kv(struct op *op, const char *tok)
{
	const char *v = strchr(tok, '=');
	long s0, u0;
	if (!v)
		return false;
	v++;
	if (!strncmp(tok, "mode=", 5))
		op->mode = (uint32_t)strtoul(v, NULL, 8);
	else if (!strncmp(tok, "trunc=", 6))
		op->trunc = atoi(v);
	else if (!strncmp(tok, "nofollow=", 9))
		op->nofollow = atoi(v);
	else if (!strncmp(tok, "off=", 4))
		op->off = strtoull(v, NULL, 10);
	else if (!strncmp(tok, "len=", 4))
		op->len = strtoull(v, NULL, 10);
	else if (!strncmp(tok, "data=", 5))
		op->data = strtoull(v, NULL, 10);
	else if (!strncmp(tok, "target=", 7))
		snprintf(op->target, sizeof(op->target), "%s", v);
	else if (sscanf(tok, "atime=%ld.%ld", &s0, &u0) == 2)
		op->tv[0] = (struct timeval){s0, u0};
	else if (sscanf(tok, "mtime=%ld.%ld", &s0, &u0) == 2)
		op->tv[1] = (struct timeval){s0, u0};
	else
		return false;
	return true;
}

/* Parses what op_format wrote (a trace line; "#" starts a comment). */
static bool op_parse(const char *line, struct op *op)
{
	char buf[4 * MAX_PATH], *save = NULL, *tok;
	int i = 0;
	memset(op, 0, sizeof(*op));
	snprintf(buf, sizeof(buf), "%s", line);
	if ((tok = strchr(buf, '#')))
		*tok = '\0';
	if (!(tok = strtok_r(buf, " \t\n", &save)))
		return false;
	for (i = 0; i < OP_NKINDS && strcmp(op_info[i].name, tok); i++)
		;
	if (i == OP_NKINDS)
		die("unknown op in trace: %s", line);
	op->kind = (enum op_kind)i;
	if (!(tok = strtok_r(NULL, " \t\n", &save)))
		die("no path in trace line: %s", line);
	snprintf(op->path, sizeof(op->path), "%s", tok);
	if (op_info[op->kind].two) {
		if (!(tok = strtok_r(NULL, " \t\n", &save)))
			die("no second path in trace line: %s", line);
		snprintf(op->path2, sizeof(op->path2), "%s", tok);
	}
	while ((tok = strtok_r(NULL, " \t\n", &save)))
		if (!parse_kv(op, tok))
			die("bad field '%s' in trace line: %s", tok, line);
	return true;
}

/* What an op did on one side. */
struct result {
	int rc;
	unsigned char *buf; /* read */
	struct names names; /* readdir */
	struct fattr attr;  /* stat */
};

static void result_free(struct result *r)
{
	free(r->buf);
	names_free(&r->names);
	memset(r, 0, sizeof(*r));
}

static int apply_write(struct side *s, const struct op *op)
{
	unsigned char *buf = xmalloc(op->len);
	int rc;
	fill_bytes(op->data, buf, op->len);
	rc = s->ops->write(s, op->path, op->kind == OP_APPEND, op->off, buf, op->len);
	free(buf);
	return rc;
}

static void apply(struct side *s, const struct op *op, struct result *r)
{
	const struct side_ops *o = s->ops;
	const char *p = op->path;
	memset(r, 0, sizeof(*r));
	switch (op->kind) {
	case OP_CREATE_EXCL:
		r->rc = o->open_create(s, p, O_CREAT | O_EXCL | O_WRONLY, op->mode);
		break;
	case OP_CREATE:
		r->rc = o->open_create(
		    s, p, O_CREAT | O_WRONLY | (op->trunc ? O_TRUNC : 0), op->mode);
		break;
	case OP_WRITE:
	case OP_APPEND:
		r->rc = apply_write(s, op);
		break;
	case OP_TRUNCATE:
		r->rc = o->truncate(s, p, op->len);
		break;
	case OP_CHMOD:
		r->rc = o->chmod(s, p, op->mode);
		break;
	case OP_UTIMES:
		r->rc = o->utimes(s, p, op->nofollow, op->tv);
		break;
	case OP_MKDIR:
		r->rc = o->mkdir(s, p, op->mode);
		break;
	case OP_RMDIR:
		r->rc = o->rmdir(s, p);
		break;
	case OP_UNLINK:
		r->rc = o->unlink(s, p);
		break;
	case OP_RENAME:
		r->rc = o->rename(s, p, op->path2);
		break;
	case OP_LINK:
		r->rc = o->link(s, p, op->path2);
		break;
	case OP_SYMLINK:
		r->rc = o->symlink(s, op->target, p);
		break;
	case OP_MKFIFO:
		r->rc = o->mkfifo(s, p, op->mode);
		break;
	case OP_READ:
		r->buf = xmalloc(op->len);
		r->rc = o->read(s, p, op->off, r->buf, op->len);
		break;
	case OP_READDIR:
		r->rc = o->list(s, p, &r->names);
		break;
	case OP_STAT:
		r->rc = o->lstat(s, p, &r->attr);
		break;
	case OP_NKINDS:
		break;
	}
}

/* ---- drawing an op from side B's tree (design note 2) ---- */

enum {
	M_REG = 1,
	M_DIR = 2,
	M_LNK = 4,
	M_FIFO = 8,
	M_OTHER = 16,
	M_NONDIR = M_REG | M_LNK | M_FIFO | M_OTHER,
	M_ANY = M_NONDIR | M_DIR,
};

static const mode_t chmod_modes[] = {0644,  0600,  0755,  0700, 0444, 0640,
				     01777, 04755, 02755, 0000, 0711};

static unsigned type_bit(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return M_REG;
	case S_IFDIR:
		return M_DIR;
	case S_IFLNK:
		return M_LNK;
	case S_IFIFO:
		return M_FIFO;
	}
	return M_OTHER;
}

struct picker {
	struct rng *r;
	const struct tree *t;
};

/* A random object whose type is in MASK (the root only if ROOT_OK), or NULL. */
static const struct entry *pick_existing(struct picker *pk, unsigned mask, bool root_ok)
{
	size_t n = 0, k;
	for (size_t i = 0; i < pk->t->n; i++)
		n += (type_bit(pk->t->v[i].mode) & mask) &&
		     (root_ok || strcmp(pk->t->v[i].path, "/"));
	if (!n)
		return NULL;
	k = rng_below(pk->r, n);
	for (size_t i = 0; i < pk->t->n; i++)
		if ((type_bit(pk->t->v[i].mode) & mask) &&
		    (root_ok || strcmp(pk->t->v[i].path, "/")) && k-- == 0)
			return &pk->t->v[i];
	return NULL;
}

/* A pool name in a random directory not deeper than MAX_DEPTH; it may exist. */
static void pick_name(struct picker *pk, char out[MAX_PATH])
{
	const struct entry *d;
	do
		d = pick_existing(pk, M_DIR, true);
	while (path_depth(d->path) > MAX_DEPTH);
	join(out, d->path, name_pool[rng_below(pk->r, NPOOL)]);
}

/* A name that does not exist now, in an existing directory. */
static void pick_missing(struct picker *pk, char out[MAX_PATH])
{
	for (int i = 0; i < 20; i++) {
		pick_name(pk, out);
		if (!tree_find(pk->t, out))
			return;
	}
	/* every pool name tried exists: a name outside the pool */
	for (int i = 0;; i++) {
		snprintf(out, MAX_PATH, "/missing%d", i);
		if (!tree_find(pk->t, out))
			return;
	}
}

/* An existing object of MASK with probability PCT, else a missing name. */
static void pick_target(struct picker *pk, unsigned mask, bool root_ok, unsigned pct,
			char out[MAX_PATH])
{
	const struct entry *e =
	    rng_pct(pk->r, pct) ? pick_existing(pk, mask, root_ok) : NULL;
	if (e)
		snprintf(out, MAX_PATH, "%s", e->path);
	else
		pick_missing(pk, out);
}

/* A new name: mostly missing, sometimes any pool name (which may exist), and
 * sometimes an existing object of any type - for EEXIST. */
static void pick_new(struct picker *pk, unsigned pct_missing, char out[MAX_PATH])
{
	uint64_t roll = rng_below(pk->r, 100);
	if (roll < pct_missing)
		pick_missing(pk, out);
	else if (roll < pct_missing + (100 - pct_missing) / 2)
		pick_name(pk, out);
	else
		pick_target(pk, M_ANY, false, 100, out);
}

static uint64_t size_of(struct picker *pk, const char *p)
{
	const struct entry *e = tree_find(pk->t, p);
	return e ? e->size : 0;
}

static unsigned type_of(struct picker *pk, const char *p)
{
	const struct entry *e = tree_find(pk->t, p);
	return e ? type_bit(e->mode) : 0;
}

static void rand_time(struct rng *r, struct timeval *tv)
{
	tv->tv_sec = (time_t)(1000000000 + rng_below(r, 700000000));
	tv->tv_usec = (suseconds_t)rng_below(r, 1000000);
}

/* plain create: never over a directory, FIFO or symlink (libnfs would open
 * those; design note 2) */
static void draw_create(struct picker *pk, struct op *op)
{
	for (int i = 0; i < 10; i++) {
		pick_new(pk, 50, op->path);
		if (type_of(pk, op->path) == 0 || type_of(pk, op->path) == M_REG)
			return;
	}
	pick_missing(pk, op->path);
}

static void draw_truncate(struct picker *pk, struct op *op)
{
	uint64_t size, roll = rng_below(pk->r, 100);
	if (roll < 3)
		pick_target(pk, M_DIR, false, 100, op->path);
	else
		pick_target(pk, M_REG, false, 96, op->path);
	size = size_of(pk, op->path);
	roll = rng_below(pk->r, 100);
	op->len = roll < 35   ? rng_below(pk->r, size + 1)
		  : roll < 70 ? size + 1 + rng_below(pk->r, MAX_WRITE)
		  : roll < 85 ? 0
			      : rng_below(pk->r, 200000);
}

static void draw_rw(struct picker *pk, struct op *op)
{
	pick_target(pk, M_REG, false, 95, op->path);
	op->off = rng_below(pk->r, size_of(pk, op->path) + 5000);
	op->len = 1 + rng_below(pk->r, rng_pct(pk->r, 10) ? MAX_WRITE : 8192);
	op->data = rng_next(pk->r);
}

static void draw_paths(struct picker *pk, struct op *op)
{
	uint64_t roll = rng_below(pk->r, 100);
	switch (op->kind) {
	case OP_CREATE_EXCL:
		pick_new(pk, 40, op->path);
		break;
	case OP_CREATE:
		draw_create(pk, op);
		break;
	case OP_WRITE:
	case OP_APPEND:
	case OP_READ:
		draw_rw(pk, op);
		break;
	case OP_TRUNCATE:
		draw_truncate(pk, op);
		break;
	case OP_CHMOD:
		pick_target(pk, M_REG | M_DIR | M_FIFO, true, 95, op->path);
		break;
	case OP_UTIMES:
		pick_target(pk, M_ANY, true, 95, op->path);
		op->nofollow = type_of(pk, op->path) == M_LNK;
		break;
	case OP_MKDIR:
	case OP_SYMLINK:
	case OP_MKFIFO:
		pick_new(pk, 60, op->path);
		break;
	case OP_RMDIR:
		pick_target(pk, roll < 88 ? M_DIR : M_NONDIR, false, 88, op->path);
		break;
	case OP_UNLINK:
		pick_target(pk, roll < 90 ? M_NONDIR : M_DIR, false, 88, op->path);
		break;
	case OP_RENAME:
		if (roll < 30) { /* a directory, often onto another one */
			pick_target(pk, M_DIR, false, 92, op->path);
			if (rng_pct(pk->r, 50))
				pick_target(pk, M_DIR, false, 100, op->path2);
			else
				pick_new(pk, 40, op->path2);
			break;
		}
		pick_target(pk, M_ANY, false, 92, op->path);
		pick_new(pk, 20, op->path2);
		break;
	case OP_LINK:
		pick_target(pk, roll < 94 ? M_REG | M_FIFO : M_DIR, false, 90, op->path);
		pick_new(pk, 70, op->path2);
		break;
	case OP_READDIR:
		/* not a symlink: libnfs resolves it (an absolute target leaves the
		 * export: ENOENT), the kernel follows it (ENOTDIR) */
		pick_target(pk, roll < 95 ? M_DIR : M_REG | M_FIFO, true, 96, op->path);
		break;
	default:
		pick_target(pk, M_ANY, true, 85, op->path);
		break;
	}
}

static unsigned weights[OP_NKINDS];

/* --weights link=0,rename=30: focus on some ops, or leave out one whose known
 * bug would hide the others */
static void set_weights(const char *spec)
{
	char buf[512], *save = NULL, *tok;
	for (int i = 0; i < OP_NKINDS; i++)
		weights[i] = op_info[i].weight;
	snprintf(buf, sizeof(buf), "%s", spec ? spec : "");
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		int i;
		if (!eq)
			die("--weights: want NAME=N, not %s", tok);
		*eq = '\0';
		for (i = 0; i < OP_NKINDS && strcmp(op_info[i].name, tok); i++)
			;
		if (i == OP_NKINDS)
			die("--weights: no op named %s", tok);
		weights[i] = (unsigned)num_arg(eq + 1);
	}
}

static void draw_op(struct rng *r, const struct tree *t, struct op *op)
{
	struct picker pk = {r, t};
	unsigned total = 0, roll;
	memset(op, 0, sizeof(*op));
	for (int i = 0; i < OP_NKINDS; i++)
		total += weights[i];
	roll = (unsigned)rng_below(r, total);
	for (op->kind = 0; roll >= weights[op->kind]; op->kind++)
		roll -= weights[op->kind];
	draw_paths(&pk, op);
	op->trunc = rng_pct(r, 50);
	op->mode = op->kind == OP_MKDIR
		       ? dir_modes[rng_below(r, sizeof(dir_modes) / sizeof(mode_t))]
		   : op->kind == OP_CHMOD
		       ? chmod_modes[rng_below(r, sizeof(chmod_modes) / sizeof(mode_t))]
		       : file_modes[rng_below(r, sizeof(file_modes) / sizeof(mode_t))];
	if (op->kind == OP_MKFIFO)
		op->mode &= 0777; /* libnfs' MKNOD sends only the rwx bits */
	snprintf(op->target, sizeof(op->target), "%s",
		 link_targets[rng_below(r, NTARGETS)]);
	rand_time(r, &op->tv[0]);
	rand_time(r, &op->tv[1]);
}

/* ---- comparing results ---- */

/* Error pairs that differ only because of the client library (design note 3):
 * side A's errno (through libnfs), side B's errno (0: any), and why. */
static const struct equiv {
	enum op_kind kind; /* OP_NKINDS: any op */
	int err_a, err_b;
	const char *why;
} equivalent[] = {
    {OP_WRITE, EFAULT, 0, "libnfs reports every failed WRITE3 as -EFAULT"},
    {OP_APPEND, EFAULT, 0, "libnfs reports every failed WRITE3 as -EFAULT"},
    /* Linux refuses these in the VFS, before any filesystem or NFS client is
     * asked, so no kernel client ever sends them; a server's NFS3ERR_INVAL
     * (ganesha) or NFS3ERR_ISDIR is as good an answer as any */
    {OP_TRUNCATE, EINVAL, EISDIR, "SETATTR of a directory's size: Linux says EISDIR"},
    {OP_LINK, EINVAL, EPERM, "LINK of a directory: Linux says EPERM in the VFS"},
    {OP_LINK, EISDIR, EPERM, "LINK of a directory: Linux says EPERM in the VFS"},
    /* ... and when the new name exists, Linux says EEXIST before it looks at
     * the source (a server may check the source first) */
    {OP_LINK, EINVAL, EEXIST, "LINK of a directory over an existing name"},
    {OP_LINK, EISDIR, EEXIST, "LINK of a directory over an existing name"},
    {OP_LINK, EPERM, EEXIST, "LINK of a directory over an existing name"},
};

static bool errors_equivalent(enum op_kind kind, int ea, int eb)
{
	for (size_t i = 0; i < sizeof(equivalent) / sizeof(equivalent[0]); i++) {
		const struct equiv *q = &equivalent[i];
		if ((q->kind == OP_NKINDS || q->kind == kind) && q->err_a == ea &&
		    (q->err_b == 0 || q->err_b == eb))
			return true;
	}
	return false;
}

static bool names_equal(const struct names *a, const struct names *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->v[i], b->v[i]))
			return false;
	return true;
}

static void fmt_names(char *out, size_t n, const struct names *ns)
{
	size_t used = 0;
	out[0] = '\0';
	for (size_t i = 0; i < ns->n && used + 2 < n; i++)
		used += (size_t)snprintf(out + used, n - used, "%s%s", i ? " " : "",
					 ns->v[i]);
}

/* Fills WHY and returns false when the two results differ. */
static bool results_agree(const struct op *op, const struct result *a,
			  const struct result *b, char *why, size_t n)
{
	if (a->rc != b->rc) {
		if (a->rc < 0 && b->rc < 0 && errors_equivalent(op->kind, -a->rc, -b->rc))
			return true;
		snprintf(why, n, "results differ");
		return false;
	}
	if (a->rc < 0)
		return true;
	if (op->kind == OP_READ && memcmp(a->buf, b->buf, (size_t)a->rc)) {
		snprintf(why, n, "read returned different bytes");
		return false;
	}
	if (op->kind == OP_READDIR && !names_equal(&a->names, &b->names)) {
		char la[900], lb[900];
		fmt_names(la, sizeof(la), &a->names);
		fmt_names(lb, sizeof(lb), &b->names);
		snprintf(why, n, "readdir names differ: [%s] vs [%s]", la, lb);
		return false;
	}
	if (op->kind == OP_STAT && !attrs_agree(a->rc, &a->attr, b->rc, &b->attr)) {
		char da[128], db[128];
		fmt_attr(da, sizeof(da), a->rc, &a->attr);
		fmt_attr(db, sizeof(db), b->rc, &b->attr);
		snprintf(why, n, "lstat differs: [%s] vs [%s]", da, db);
		return false;
	}
	return true;
}

/* After a change: each name it touched looks the same on both sides. */
static bool post_check(struct side *a, struct side *b, const struct op *op, char *why,
		       size_t n)
{
	const char *paths[2] = {op->path, op_info[op->kind].two ? op->path2 : NULL};
	for (int i = 0; i < 2 && paths[i]; i++) {
		struct fattr fa, fb;
		int ra = a->ops->lstat(a, paths[i], &fa),
		    rb = b->ops->lstat(b, paths[i], &fb);
		if (!attrs_agree(ra, &fa, rb, &fb)) {
			char da[128], db[128];
			fmt_attr(da, sizeof(da), ra, &fa);
			fmt_attr(db, sizeof(db), rb, &fb);
			snprintf(why, n, "afterwards lstat %s: [%s] vs [%s]", paths[i],
				 da, db);
			return false;
		}
		if (op->kind == OP_UTIMES && i == 0 && !ra &&
		    !(S_ISLNK(fa.mode) && ignore_symlink_times) &&
		    (fa.atime_s != fb.atime_s || fa.atime_ns != fb.atime_ns ||
		     fa.mtime_s != fb.mtime_s || fa.mtime_ns != fb.mtime_ns)) {
			snprintf(why, n,
				 "afterwards times of %s: atime %" PRId64
				 ".%09u mtime %" PRId64 ".%09u vs atime %" PRId64
				 ".%09u mtime %" PRId64 ".%09u",
				 paths[i], fa.atime_s, fa.atime_ns, fa.mtime_s,
				 fa.mtime_ns, fb.atime_s, fb.atime_ns, fb.mtime_s,
				 fb.mtime_ns);
			return false;
		}
	}
	return true;
}

struct ids {
	int ra, rb;
	uint64_t a, b;
};

static void ids_of(struct side *a, struct side *b, const char *p, struct ids *out)
{
	struct fattr fa, fb;
	out->ra = a->ops->lstat(a, p, &fa);
	out->rb = b->ops->lstat(b, p, &fb);
	out->a = out->ra ? 0 : fa.ino;
	out->b = out->rb ? 0 : fb.ino;
}

/* The object keeps its fileid through copy-up and rename wherever overlayfs
 * keeps its inode number; a new link names the same object on both sides. */
static bool ids_kept(struct side *a, struct side *b, const struct op *op,
		     const struct ids *before, char *why, size_t n)
{
	struct ids after;
	if (before->ra || before->rb)
		return true;
	ids_of(a, b, op->kind == OP_RENAME ? op->path2 : op->path, &after);
	if (after.ra || after.rb)
		return true;
	if (after.b == before->b && after.a != before->a) {
		snprintf(why, n,
			 "fileid changed on %s (%" PRIu64 " -> %" PRIu64
			 "), inode number kept on %s",
			 a->label, before->a, after.a, b->label);
		return false;
	}
	if (op->kind == OP_LINK) {
		struct ids l;
		ids_of(a, b, op->path2, &l);
		if (!l.ra && !l.rb && (l.a == after.a) != (l.b == after.b)) {
			snprintf(why, n,
				 "new link %s is %sthe same object on %s, %son %s",
				 op->path2, l.a == after.a ? "" : "not ", a->label,
				 l.b == after.b ? "" : "not ", b->label);
			return false;
		}
	}
	return true;
}

/* Applies OP to both sides; false (and WHY) on the first disagreement. */
static bool run_one(struct side *a, struct side *b, const struct op *op,
		    struct result *ra, struct result *rb, char *why, size_t n)
{
	struct ids before = {-1, -1, 0, 0};
	bool ok;
	if (op_info[op->kind].keeps_id)
		ids_of(a, b, op->path, &before);
	apply(a, op, ra);
	apply(b, op, rb);
	ok = results_agree(op, ra, rb, why, n);
	if (ok && op_info[op->kind].changes)
		ok = post_check(a, b, op, why, n);
	if (ok && op_info[op->kind].keeps_id && ra->rc >= 0)
		ok = ids_kept(a, b, op, &before, why, n);
	return ok;
}

/* ---- commands ---- */

struct run_opts {
	uint64_t seed;
	long count;
	long check_every;
	const char *trace, *replay, *weights;
	bool verbose, hardlinks;
};

static void print_result(const char *label, const struct result *r)
{
	char rc[64];
	fmt_rc(rc, sizeof(rc), r->rc);
	printf("  %-12s %s\n", label, rc);
}

static void report_mismatch(const struct run_opts *o, long i, const char *line,
			    struct side *a, struct side *b, const struct result *ra,
			    const struct result *rb, const char *why)
{
	printf("MISMATCH seed=%" PRIu64 " op=#%ld: %s\n", o->seed, i, line);
	print_result(a->label, ra);
	print_result(b->label, rb);
	printf("  what: %s\n", why);
	if (o->trace)
		printf("  trace: %s (ops #0..#%ld; replay with --replay)\n", o->trace, i);
}

/* Reads the next op of a trace file; false at its end. */
static bool next_replayed(FILE *f, struct op *op)
{
	char line[4 * MAX_PATH];
	while (fgets(line, sizeof(line), f))
		if (op_parse(line, op))
			return true;
	return false;
}

static bool next_drawn(struct side *b, struct rng *r, struct op *op)
{
	struct tree t = {0};
	struct fattr root;
	int rc = b->ops->lstat(b, "/", &root);
	if (rc)
		die("%s: cannot lstat the root: %s", b->label, strerror(-rc));
	tree_walk(b, "/", &root, &t);
	draw_op(r, &t, op);
	tree_free(&t);
	return true;
}

static int check_trees(const struct run_opts *o, long i, struct side *a, struct side *b)
{
	int nd = compare_trees(a, b);
	if (nd)
		printf("TREES DIFFER seed=%" PRIu64
		       " after op #%ld: %d differences (above)\n",
		       o->seed, i, nd);
	return nd ? 1 : 0;
}

static int run_ops(const struct run_opts *o, struct side *a, struct side *b, FILE *trace,
		   FILE *replay)
{
	struct rng r;
	long i;
	rng_seed(&r, o->seed ^ 0x5bd1e995);
	set_weights(o->weights);
	for (i = 0; o->replay || i < o->count; i++) {
		struct op op;
		struct result ra, rb;
		char line[3 * MAX_PATH], why[2048] = "", rca[64], rcb[64];
		bool ok;
		if (!(replay ? next_replayed(replay, &op) : next_drawn(b, &r, &op)))
			break;
		op_format(&op, line, sizeof(line));
		ok = run_one(a, b, &op, &ra, &rb, why, sizeof(why));
		fmt_rc(rca, sizeof(rca), ra.rc);
		fmt_rc(rcb, sizeof(rcb), rb.rc);
		if (trace) {
			fprintf(trace, "%s # #%ld %s %s%s\n", line, i, rca, rcb,
				ok ? "" : " MISMATCH");
			fflush(trace);
		}
		if (o->verbose)
			printf("#%ld %s -> %s / %s\n", i, line, rca, rcb);
		if (!ok)
			report_mismatch(o, i, line, a, b, &ra, &rb, why);
		result_free(&ra);
		result_free(&rb);
		if (!ok)
			return 1;
		if (o->check_every && (i + 1) % o->check_every == 0 &&
		    check_trees(o, i, a, b))
			return 1;
	}
	printf("%ld operations agreed (seed %" PRIu64 ")\n", i, o->seed);
	return check_trees(o, i - 1, a, b);
}

static int cmd_run(const struct run_opts *o, const char *spec_a, const char *spec_b)
{
	struct side a, b;
	FILE *trace = NULL, *replay = NULL;
	int rc;
	if (o->trace && !(trace = fopen(o->trace, "w")))
		die("%s: %s", o->trace, strerror(errno));
	if (o->replay && !(replay = fopen(o->replay, "r")))
		die("%s: %s", o->replay, strerror(errno));
	side_open(&a, "A", spec_a);
	side_open(&b, "B", spec_b);
	a.label =
	    getenv("DIFF_ORACLE_LABEL_A") ? getenv("DIFF_ORACLE_LABEL_A") : "union-nfsd";
	b.label =
	    getenv("DIFF_ORACLE_LABEL_B") ? getenv("DIFF_ORACLE_LABEL_B") : "overlayfs";
	rc = run_ops(o, &a, &b, trace, replay);
	side_close(&a);
	side_close(&b);
	if (trace)
		fclose(trace);
	if (replay)
		fclose(replay);
	return rc;
}

static int cmd_cmp(const char *spec_a, const char *spec_b)
{
	struct side a, b;
	int nd;
	side_open(&a, getenv("DIFF_ORACLE_LABEL_A") ? getenv("DIFF_ORACLE_LABEL_A") : "A",
		  spec_a);
	side_open(&b, getenv("DIFF_ORACLE_LABEL_B") ? getenv("DIFF_ORACLE_LABEL_B") : "B",
		  spec_b);
	nd = compare_trees(&a, &b);
	if (nd)
		printf("TREES DIFFER: %d differences (above)\n", nd);
	else
		printf("trees agree\n");
	side_close(&a);
	side_close(&b);
	return nd ? 1 : 0;
}

static int cmd_uppers(const char *ua, const char *ub)
{
	int nd = compare_uppers(ua, ub);

	printf(nd ? "UPPERS DIFFER: %d differences (above)\n" : "uppers agree\n", nd);
	return nd ? 1 : 0;
}

static int usage(void)
{
	fprintf(
	    stderr,
	    "usage: diff_oracle gen --seed N [--hardlinks] DIR\n"
	    "       diff_oracle run --seed N --count N [--check-every N] [--trace FILE]\n"
	    "                       [--replay FILE] [--weights OP=N,...] [--verbose]\n"
	    "                       [--ignore symlink-times|nlink] SIDE_A SIDE_B\n"
	    "       diff_oracle cmp SIDE_A SIDE_B\n"
	    "       diff_oracle uppers UPPER_A UPPER_B\n"
	    "SIDE: nfs:URL or local:DIR\n");
	return 2;
}

/* Parses the --options of gen and run; leaves the positional ones in POS. */
static int parse_opts(int argc, char **argv, struct run_opts *o, char **pos, int maxpos)
{
	int npos = 0;
	for (int i = 2; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--verbose")) {
			o->verbose = true;
			continue;
		}
		if (!strcmp(argv[i], "--hardlinks")) {
			o->hardlinks = true;
			continue;
		}
		if (argv[i][0] != '-') {
			if (npos == maxpos)
				return -1;
			pos[npos++] = argv[i];
			continue;
		}
		if (!v)
			return -1;
		if (!strcmp(argv[i], "--seed"))
			o->seed = (uint64_t)num_arg(v);
		else if (!strcmp(argv[i], "--count"))
			o->count = num_arg(v);
		else if (!strcmp(argv[i], "--check-every"))
			o->check_every = num_arg(v);
		else if (!strcmp(argv[i], "--trace"))
			o->trace = v;
		else if (!strcmp(argv[i], "--replay"))
			o->replay = v;
		else if (!strcmp(argv[i], "--weights"))
			o->weights = v;
		else if (!strcmp(argv[i], "--ignore") && !strcmp(v, "symlink-times"))
			ignore_symlink_times = true;
		else if (!strcmp(argv[i], "--ignore") && !strcmp(v, "nlink"))
			ignore_nlink = true;
		else
			return -1;
		i++;
	}
	return npos;
}

int main(int argc, char **argv)
{
	struct run_opts o = {.count = 300, .check_every = DEFAULT_CHECK_EV};
	char *pos[2];
	int npos;
	if (argc < 2)
		return usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	umask(0); /* modes are given explicitly, on both sides */
	npos = parse_opts(argc, argv, &o, pos, 2);
	if (!strcmp(argv[1], "gen") && npos == 1)
		return cmd_gen(o.seed, pos[0], o.hardlinks);
	if (!strcmp(argv[1], "run") && npos == 2)
		return cmd_run(&o, pos[0], pos[1]);
	if (!strcmp(argv[1], "cmp") && npos == 2)
		return cmd_cmp(pos[0], pos[1]);
	if (!strcmp(argv[1], "uppers") && npos == 2)
		return cmd_uppers(pos[0], pos[1]);
	return usage();
}
