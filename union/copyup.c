/* SPDX-License-Identifier: Apache-2.0 */
/* copyup.c - copy-up: the first change to an object that lives only in a
 * lower layer copies it into the upper layer.
 *
 * Design notes
 * ------------
 * A copy-up is a context (struct copyup) run as a pipeline by cu_run; each
 * step is one function:
 *
 *   cu_make    create the temp in the work dir: a file (0600), a directory
 *              (0700), the symlink with the same target, or the device,
 *              FIFO or socket
 *   cu_data    regular files: ioctl(FICLONE) where the filesystems share
 *              blocks, else copy_file_range over each data extent
 *              (SEEK_DATA / SEEK_HOLE), so holes stay holes; then the size
 *   cu_attrs   owner, then mode (chown clears set-id bits), then every
 *              extended attribute except the union's own markers (after the
 *              chown, which would drop security.capability), then times last
 *              (everything before changes them)
 *   cu_sync    regular files with data: fsync the temp, so the commit can
 *              never reach the disk before the bytes it shows (a journal
 *              orders a file's metadata with the rename, not its data: after
 *              an OS crash the upper copy would shadow the lower file with
 *              holes); overlayfs syncs its copy-ups too, unless volatile.
 *              Other files and directories: a shared fsync of the temp,
 *              as a filesystem without a journal writes no inode before its
 *              own fsync (dir.c, step 7), and no entry may name an inode
 *              not on disk; symlinks and devices, which no fsync reaches,
 *              leave a note in the change (struct un_change) for its
 *              syncfs (sync.c)
 *   cu_node    the node record learns the temp's (dev, ino), keeping the
 *              lower one as its origin; a lower file with several links is
 *              one file per name after copy-up (as in overlayfs without its
 *              index): the name copied up keeps its node and fileid, and
 *              the commit parts the group (un_node_part), so the other
 *              names get new nodes and a new fileid
 *   cu_commit  rename into the upper parent with RENAME_NOREPLACE: the
 *              commit point; then the parent's times are put back, as a
 *              copy-up is no change of the parent
 *
 * and un_copyup around it: ancestors first (copyup_parent walks the path
 * from the root, copying up each directory that has no upper part yet), then
 * the object under its stripe lock (copyup_locked).
 *
 * The temps live in the work dir (workdir.c), which no lookup sees.
 *
 * Invariants
 *  1. Nothing is visible in the merged tree before cu_commit: the temp lives
 *     in the work dir, which no lookup sees (cu_make).
 *  2. A failure before the commit removes the temp and points the node record
 *     back at the lower instance (cu_run's clean-up); after the commit nothing
 *     can fail (restoring the parent's times is best effort).  A crash leaves
 *     at most a temp in the work dir, removed at the next un_work_open.
 *  3. One copy-up per object at a time: the stripe lock of its node id is
 *     held from the re-check to the commit, and the re-check looks at the
 *     upper again (copyup_recheck): a lost race copies nothing and adopts
 *     the winner's copy.
 *  4. Ancestors first: an object's copy-up begins only once its parent has
 *     an upper instance (copyup_parent).  No thread holds two stripe locks.
 *  5. The node id survives: from cu_node on, the record matches the lower
 *     instance (origin) and the upper one, so a lookup before, during or
 *     after the commit gets the same id.
 *  6. The union's markers (trusted./user.overlay.*) are never copied
 *     (un_copy_xattrs): a copied-up directory is not opaque, it merges with
 *     its lower parts.
 *  7. The pipeline runs with the server's identity (un_sys_creds_override):
 *     the copy is the union's business, not the caller's; the caller's
 *     permission for the change that caused it is checked by that change.
 *
 * The rename is the commit point of the tree, and what it shows is on disk
 * before it (cu_sync): a crash leaves no file or the whole temp in the work
 * dir, or the whole copy.  After the commit the parent is fsynced
 * (copyup_locked), so the entry is durable before the change goes on: a
 * copy-up of a path makes each directory durable and then the entry naming
 * it, top-down, and the change's own sync covers only the directory it
 * changes.  These fsyncs are shared (sync.c), also for an `async` caller (a
 * COMMIT there promises the entry too); the change that caused the copy-up
 * then makes itself durable (write.c, un_sync_change).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "un_private.h"

#define WALK_TRIES	  3 /* reads of the path when an ancestor moves meanwhile */
#define COPY_CHUNK	  (1ul << 30) /* bytes per copy_file_range call */
#define BOUNCE_BUF	  (256u << 10)
#define XATTR_LIST_LIMIT  (64u << 10)
#define XATTR_VALUE_LIMIT (64u << 10)
#define OVERLAY_TRUSTED	  "trusted.overlay."
#define OVERLAY_USER	  "user.overlay."

struct copyup {
	struct un_export *ex;
	struct un_obj *o; /* gets its upper instance on success */
	int pdir;	  /* upper instance of the parent (borrowed) */
	int src;	  /* O's lower instance (borrowed) */
	struct stat st;	  /* of SRC */
	char tmp[32];	  /* the temp's name in the work dir */
	bool made;	  /* the temp exists */
	bool noded;	  /* the node record names the temp */
	int datafd;	  /* writable temp (regular files) */
	int tmpfd;	  /* O_PATH of the temp: O's upper instance to be */
	struct un_devino di;
	/* The change that caused the copy-up, for its note (may be NULL). */
	struct un_change *ch;
};

/* ---- extended attributes ---- */

static bool xattr_ours(const char *name)
{
	return !strncmp(name, OVERLAY_TRUSTED, sizeof(OVERLAY_TRUSTED) - 1) ||
	       !strncmp(name, OVERLAY_USER, sizeof(OVERLAY_USER) - 1);
}

/* Copies attribute NAME of SRC to DST through BUF (XATTR_VALUE_LIMIT). */
static int xattr_copy_one(int src, int dst, const char *name, char *buf)
{
	ssize_t n = un_sys_getxattr_fd(src, name, buf, XATTR_VALUE_LIMIT);

	if (n == -ENODATA)
		return 0; /* removed since the listing */
	if (n < 0)
		return (int)n;
	n = un_sys_fsetxattr_fd(dst, name, buf, (size_t)n, 0);
	return n == -EOPNOTSUPP ? 0 : (int)n; /* a namespace DST's fs lacks */
}

int un_copy_xattrs(int src, int dst)
{
	char *list = NULL, *val = NULL;
	ssize_t n;
	int err = -ENOMEM;

	list = un_sys_malloc(XATTR_LIST_LIMIT);
	val = un_sys_malloc(XATTR_VALUE_LIMIT);
	if (!list || !val)
		goto out;
	n = un_sys_listxattr_fd(src, list, XATTR_LIST_LIMIT);
	err = n == -EOPNOTSUPP ? 0 : (int)(n < 0 ? n : 0);
	for (ssize_t off = 0; n > 0 && off < n && !err; off += strlen(list + off) + 1)
		if (!xattr_ours(list + off))
			err = xattr_copy_one(src, dst, list + off, val);
out:
	free(list);
	free(val);
	return err;
}

/* ---- data ---- */

/* Copies [FROM, TO) of IN to OUT with pread/pwrite (another filesystem). */
static int copy_bounce(int in, int out, off_t from, off_t to)
{
	char *buf = un_sys_malloc(BOUNCE_BUF);
	ssize_t n = 0;
	int err = -ENOMEM;

	if (!buf)
		return err;
	for (err = 0; from < to && !err; from += n) {
		size_t want =
		    (size_t)(to - from) < BOUNCE_BUF ? (size_t)(to - from) : BOUNCE_BUF;

		n = un_sys_pread(in, buf, want, from);
		if (n <= 0) { /* 0: the lower file shrank under us */
			err = n < 0 ? (int)n : -EIO;
			break;
		}
		n = un_sys_pwrite(out, buf, (size_t)n, from);
		err = n < 0 ? (int)n : 0;
	}
	free(buf);
	return err;
}

/* Copies [FROM, TO) of IN to OUT at the same offsets. */
static int copy_range(int in, int out, off_t from, off_t to)
{
	off_t ioff = from, ooff = from;
	ssize_t n;

	while (ioff < to) {
		size_t want =
		    (size_t)(to - ioff) < COPY_CHUNK ? (size_t)(to - ioff) : COPY_CHUNK;

		n = un_sys_copy_range(in, &ioff, out, &ooff, want);
		if ((n == -EXDEV || n == -EINVAL || n == -EOPNOTSUPP || n == -ENOSYS) &&
		    ioff == from)
			return copy_bounce(in, out, from, to);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EIO; /* the lower file shrank under us */
	}
	return 0;
}

/* Copies the data extents of IN (SIZE bytes) to OUT, leaving holes. */
static int copy_sparse(int in, int out, off_t size)
{
	off_t off = 0, data, hole;
	int err = 0;

	while (off < size && !err) {
		data = un_sys_lseek(in, off, SEEK_DATA);
		if (data == -ENXIO)
			break; /* a hole up to the end */
		if (data < 0)
			return (int)data;
		hole = un_sys_lseek(in, data, SEEK_HOLE);
		if (hole < 0)
			return (int)hole;
		if (hole > size)
			hole = size;
		err = copy_range(in, out, data, hole);
		off = hole;
	}
	return err;
}

static bool clone_unsupported(int err)
{
	return err == -EOPNOTSUPP || err == -EXDEV || err == -EINVAL || err == -ENOTTY ||
	       err == -ENOSYS;
}

static int cu_data(struct copyup *c)
{
	int in, err;

	if (c->st.st_size == 0)
		return 0;
	/* Copying is no access of the lower file: keep its atime where we may
	 * (O_NOATIME needs its owner or CAP_FOWNER). */
	in = un_sys_reopen(c->src, O_RDONLY | O_NOCTTY | O_NOATIME);
	if (in == -EPERM)
		in = un_sys_reopen(c->src, O_RDONLY | O_NOCTTY);
	if (in < 0)
		return in;
	err = un_sys_clone(c->datafd, in);
	if (clone_unsupported(err))
		err = copy_sparse(in, c->datafd, c->st.st_size);
	if (!err) /* a hole at the end has no extent to copy */
		err = un_sys_ftruncate(c->datafd, c->st.st_size);
	un_sys_close(in);
	return err;
}

/* ---- the pipeline ---- */

static int make_symlink(struct copyup *c)
{
	char target[PATH_MAX];
	ssize_t n = un_sys_readlinkat(c->src, "", target, sizeof(target));

	if (n < 0)
		return (int)n;
	if ((size_t)n == sizeof(target))
		return -ENAMETOOLONG;
	target[n] = '\0';
	return un_sys_symlinkat(target, c->ex->tmpfd, c->tmp);
}

static int cu_make(struct copyup *c)
{
	int wfd = c->ex->tmpfd, err;
	struct stat st;

	un_work_tmpname(c->tmp);
	switch (c->st.st_mode & S_IFMT) {
	case S_IFREG:
		err = c->datafd = un_sys_openat(
		    wfd, c->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
		break;
	case S_IFDIR:
		err = un_sys_mkdirat(wfd, c->tmp, 0700);
		break;
	case S_IFLNK:
		err = make_symlink(c);
		break;
	default:
		err = un_sys_mknodat(wfd, c->tmp, (c->st.st_mode & S_IFMT) | 0600,
				     c->st.st_rdev);
	}
	if (err < 0)
		return err;
	c->made = true;
	err = c->tmpfd = un_sys_open_beneath(wfd, c->tmp, O_PATH);
	if (err < 0)
		return err;
	err = un_sys_fstat(c->tmpfd, &st);
	c->di = (struct un_devino){.dev = st.st_dev, .ino = st.st_ino};
	return err;
}

static int cu_sync(struct copyup *c)
{
	if (S_ISREG(c->st.st_mode) && c->st.st_size)
		return un_sys_fsync(c->datafd); /* also when async: the order */
	if (S_ISREG(c->st.st_mode) || S_ISDIR(c->st.st_mode))
		return un_sync_inode(c->ex, c->tmpfd);
	if (c->ch) /* no fsync reaches it: the change's syncfs */
		c->ch->fs = true;
	return 0;
}

static int cu_attrs(struct copyup *c)
{
	const struct timespec ts[2] = {c->st.st_atim, c->st.st_mtim};
	int err;

	err = un_sys_chown_fd(c->tmpfd, c->st.st_uid, c->st.st_gid);
	if (!err && !S_ISLNK(c->st.st_mode))
		err = un_sys_chmod_fd(c->tmpfd, c->st.st_mode & 07777);
	if (!err)
		err = un_copy_xattrs(c->src, c->tmpfd);
	if (!err)
		err = un_sys_utimens_fd(c->tmpfd, ts);
	return err;
}

/* True for a lower file with other names: its copy-up breaks the link. */
static bool cu_shared(const struct copyup *c)
{
	return !S_ISDIR(c->st.st_mode) && c->st.st_nlink > 1;
}

static int cu_node(struct copyup *c)
{
	struct un_devino lower = {.dev = c->st.st_dev, .ino = c->st.st_ino};
	struct un_node_name nm = {c->o->parent, c->o->name, c->o->namelen};
	int err;

	/* The record follows the name copied up, the others part at commit. */
	err = un_node_set_inst(c->ex->st, c->o->id, c->di, &lower,
			       cu_shared(c) ? &nm : NULL);
	c->noded = !err;
	return err;
}

static int cu_commit(struct copyup *c)
{
	struct stat pst;
	int err;

	err = un_sys_fstat(c->pdir, &pst);
	if (!err)
		err = un_sys_renameat2(c->ex->tmpfd, c->tmp, c->pdir, c->o->name,
				       RENAME_NOREPLACE);
	if (err)
		return err;
	c->made = false;
	/* Best effort, after the commit point (invariant 2). */
	un_sys_utimens_fd(c->pdir, (const struct timespec[2]){pst.st_atim, pst.st_mtim});
	if (cu_shared(c))
		un_node_part(
		    c->ex->st, c->ex->root_id, c->o->id,
		    (struct un_devino){.dev = c->st.st_dev, .ino = c->st.st_ino});
	return 0;
}

/* Runs the pipeline for C; on success O names the new upper instance. */
static int cu_run(struct copyup *c)
{
	struct un_counters *n = &c->ex->st->sh->counters;
	uint64_t t0 = un_now_ns();
	struct un_devino lower;
	int err;

	un_assert_locked(&c->ex->cu_locks[un_stripe(c->o->id)]); /* rule 3 */
	err = un_sys_fstat(c->src, &c->st);
	if (!err)
		err = cu_make(c);
	if (!err && S_ISREG(c->st.st_mode))
		err = cu_data(c);
	if (!err)
		err = cu_attrs(c);
	if (!err)
		err = cu_sync(c);
	if (!err)
		err = cu_node(c);
	if (!err)
		err = cu_commit(c);
	if (err)
		goto out;
	un_obj_push_top(c->o, c->tmpfd);
	c->tmpfd = -1; /* owned by the object now */
	un_count_timed(&n->copyups, &n->copyup_ns, t0);
	if (S_ISREG(c->st.st_mode))
		un_count_add(&n->copyup_bytes, (uint64_t)c->st.st_size);
out:
	un_sys_close(c->datafd);
	un_sys_close(c->tmpfd);
	if (err && c->made)
		un_work_remove(c->ex->tmpfd, c->tmp, 0);
	if (err && c->noded) { /* the origin matches meanwhile: best effort */
		lower = (struct un_devino){.dev = c->st.st_dev, .ino = c->st.st_ino};
		un_node_set_inst(c->ex->st, c->o->id, lower, NULL, NULL);
	}
	return err;
}

/* ---- ancestors, locking, the entry point ---- */

/* Under O's stripe lock: 1 if O has an upper instance now (another thread
 * copied it up: O adopts it), 0 if the copy-up is ours to do. */
static int copyup_recheck(struct un_export *ex, struct un_obj *parent, struct un_obj *o)
{
	struct un_obj *now;
	int fd, err;

	un_assert_locked(&ex->cu_locks[un_stripe(o->id)]);
	if (un_obj_upper(ex, o))
		return 1;
	err = un_lookup(ex, parent, o->name, &now);
	if (err)
		return err == -ENOENT ? -ESTALE : err;
	err = -ESTALE; /* the name holds another object now */
	if (now->id == o->id)
		err = 0;
	if (!err && un_obj_upper(ex, now)) {
		err = fd = un_sys_dup(now->inst[0].fd);
		if (fd >= 0) {
			un_obj_push_top(o, fd);
			err = 1;
		}
	}
	un_obj_put(now);
	return err;
}

/* Copies O, a child of PARENT (which has an upper instance), up, for the
 * change CH (may be NULL: a directory, or a regular file). */
static int copyup_locked(struct un_export *ex, struct un_change *ch,
			 struct un_obj *parent, struct un_obj *o)
{
	pthread_mutex_t *lock = &ex->cu_locks[un_stripe(o->id)];
	struct copyup c = {
	    .ex = ex,
	    .ch = ch,
	    .o = o,
	    .pdir = parent->inst[0].fd,
	    .src = o->inst[0].fd,
	    .datafd = -1,
	    .tmpfd = -1,
	};
	int err;

	assert(un_obj_upper(ex, parent)); /* rule 4: ancestors first */
	pthread_mutex_lock(lock);
	err = copyup_recheck(ex, parent, o);
	if (err == 0)
		err = cu_run(&c);
	pthread_mutex_unlock(lock);
	/* The entry, ours or the one a racing copy-up just made. */
	return err < 0 ? err : un_sync_inode(ex, c.pdir);
}

/* Walks HOPS[1..n-1] from the root, copying up every directory on the way
 * that has no upper part (invariant 4); *out gets the last one. */
static int copyup_walk(struct un_export *ex, const struct un_node_hop *hops, size_t n,
		       struct un_obj **out)
{
	struct un_obj *cur = NULL, *next;
	int err;

	err = un_root(ex, &cur);
	for (size_t i = 1; i < n && !err; i++) {
		err = un_lookup(ex, cur, hops[i].name, &next);
		if (err == -ENOENT || err == -ENOTDIR)
			err = -ESTALE;
		if (err)
			break;
		if (next->id != hops[i].id || !S_ISDIR(next->type))
			err = -ESTALE;
		if (!err && !un_obj_upper(ex, next))
			err = copyup_locked(ex, NULL, cur, next); /* a directory */
		un_obj_put(cur);
		cur = next;
	}
	if (err)
		un_obj_put(cur);
	else
		*out = cur;
	return err;
}

/* The parent PID, with an upper instance (ancestors copied up first). */
static int copyup_parent(struct un_export *ex, un_id pid, struct un_obj **out)
{
	struct un_node_hop *hops = NULL;
	size_t n;
	int err;

	if (pid == ex->root_id)
		return un_root(ex, out);
	err = un_node_path(ex->st, pid, &hops, &n);
	if (err)
		return err;
	err = -ESTALE;
	if (n >= 2 && hops[0].id == ex->root_id)
		err = copyup_walk(ex, hops, n, out);
	free(hops);
	return err;
}

int un_copyup(struct un_export *ex, struct un_change *ch, struct un_obj *o)
{
	struct un_obj *parent = NULL;
	struct un_creds saved;
	int err;

	if (!un_export_writable(ex) || o->retired)
		return -EROFS; /* a retired layer's file is read only (retire.c) */
	if (un_obj_upper(ex, o))
		return 0;
	if (o->id == ex->root_id)
		return -EIO; /* the upper root always exists: a broken object */
	un_sys_creds_override(&saved);
	/* A rename of an ancestor between reading the path and walking it
	 * shows as -ESTALE: the path read again names the new place. */
	for (int tries = 0; tries < WALK_TRIES; tries++) {
		err = copyup_parent(ex, o->parent, &parent);
		if (err != -ESTALE)
			break;
	}
	if (!err)
		err = copyup_locked(ex, ch, parent, o);
	un_obj_put(parent);
	un_sys_creds_revert(&saved);
	return err;
}
