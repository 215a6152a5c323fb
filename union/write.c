/* SPDX-License-Identifier: Apache-2.0 */
/* write.c - changing attributes and data: SETATTR, WRITE, COMMIT, and the
 * copy-up an open for writing makes.
 *
 * Rules:
 *  1. A change of a lower object is judged on its merged attributes first
 *     (may_modify), as overlayfs judges its own inode, so a refused change
 *     copies nothing up; then the object is copied up (un_copyup: once,
 *     whatever the number of concurrent writers) and the change runs on the
 *     upper instance with the caller's identity, so the kernel has the last
 *     word (setattr_upper, un_write).
 *  2. Data calls reopen the object's O_PATH descriptor through /proc with
 *     the mode they need (un_sys_reopen), so they act on the inode the
 *     lookup found, never on whatever holds its name now.
 *  3. An open for writing copies up as well, as overlayfs does at open(2)
 *     (un_open_write): the NFS form of it is an UNCHECKED CREATE of an
 *     existing file.
 *  4. A stable WRITE returns only once its data and the node table are
 *     durable (write_sync: an fsync of the inode begun after the write,
 *     then un_state_sync), so the handle the client writes through
 *     survives a crash with the data; COMMIT is a late FILE_SYNC
 *     (un_commit), also under `async`.  The fsync is shared (sync.c's
 *     slots): the stable WRITEs of one file in flight together (a kernel
 *     client writing back with FILE_SYNC keeps ten or more) wait for one
 *     run begun after them instead of one fsync each, and a DATA_SYNC
 *     write takes the fsync too.  A run that failed while the write was
 *     under way fails it (un_sync_failures).
 *  5. SETATTR, like every change of names (dir.c), is durable before it
 *     returns (un_setattr, un_sync_change) unless its caller's context is
 *     `async` (union.h, struct un_ctx).
 *
 * The rename that made a copied-up file visible is not synced separately:
 * the filesystems served from (ext4, xfs, btrfs) commit it with the journal
 * transaction the fsync of the file forces.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include "un_private.h"

/* The caller's view of O, for the checks below: whether it owns O and
 * which permission bits (rwx) apply to it. */
struct access {
	bool root, owner;
	unsigned bits;
	struct stat st;
	struct un_creds c;
};

static int access_get(const struct un_obj *o, struct access *a)
{
	int err;

	un_sys_creds_current(&a->c);
	a->root = a->c.fsuid == 0;
	err = un_sys_fstat(o->inst[0].fd, &a->st);
	if (err)
		return err;
	a->owner = a->c.fsuid == a->st.st_uid;
	a->bits = a->owner			  ? a->st.st_mode >> 6
		  : un_sys_in_group(a->st.st_gid) ? a->st.st_mode >> 3
						  : a->st.st_mode;
	return 0;
}

/* Whether the caller may make the change SA (NULL: write data) to O, judged
 * on O's merged attributes before a copy-up, as overlayfs judges its own
 * inode: a refused change copies nothing up.  The change itself runs as the
 * caller afterwards, so the kernel has the last word. */
static int may_modify(const struct un_obj *o, const struct un_sattr *sa)
{
	struct access a;
	bool now;
	int err = access_get(o, &a);

	if (err || a.root)
		return err;
	if ((!sa || sa->set_size) && !(a.bits & 2))
		return -EACCES;
	if (!sa)
		return 0;
	if ((sa->set_mode && !a.owner) || (sa->set_uid && sa->uid != a.st.st_uid) ||
	    (sa->set_gid && (!a.owner || !un_sys_in_group(sa->gid))))
		return -EPERM;
	/* Both times to "now" is a touch, which write permission allows
	 * (utimensat's rule); any other change of times needs the owner. */
	now = sa->set_atime && sa->atime.tv_nsec == UTIME_NOW && sa->set_mtime &&
	      sa->mtime.tv_nsec == UTIME_NOW;
	if ((sa->set_atime || sa->set_mtime) && !a.owner)
		return now && (a.bits & 2) ? 0 : now ? -EACCES : -EPERM;
	return 0;
}

static int setattr_size(struct un_obj *o, uint64_t size)
{
	int fd, err;

	if (size > INT64_MAX)
		return -EFBIG;
	fd = un_sys_reopen(o->inst[0].fd, O_WRONLY | O_NOCTTY);
	if (fd < 0)
		return fd == -ELOOP ? -EINVAL : fd;
	err = un_sys_ftruncate(fd, (off_t)size);
	un_sys_close(fd);
	return err;
}

static struct timespec sattr_time(bool set, const struct timespec *t)
{
	return set ? *t : (struct timespec){.tv_nsec = UTIME_OMIT};
}

/* Changes what SA asks of O's upper instance: size first (it sets mtime),
 * owner before mode (chown clears set-id bits), times last. */
static int setattr_upper(struct un_obj *o, const struct un_sattr *sa)
{
	int fd = o->inst[0].fd, err = 0;
	struct timespec ts[2];

	if (sa->set_size)
		err = setattr_size(o, sa->size);
	if (!err && (sa->set_uid || sa->set_gid))
		err = un_sys_chown_fd(fd, sa->set_uid ? sa->uid : (uid_t)-1,
				      sa->set_gid ? sa->gid : (gid_t)-1);
	/* A symlink has no mode of its own on Linux; knfsd ignores it too. */
	if (!err && sa->set_mode && !S_ISLNK(o->type))
		err = un_sys_chmod_fd(fd, sa->mode & 07777);
	if (!err && (sa->set_atime || sa->set_mtime)) {
		ts[0] = sattr_time(sa->set_atime, &sa->atime);
		ts[1] = sattr_time(sa->set_mtime, &sa->mtime);
		err = un_sys_utimens_fd(fd, ts);
	}
	return err;
}

bool un_sattr_any(const struct un_sattr *sa)
{
	return sa->set_mode || sa->set_uid || sa->set_gid || sa->set_size ||
	       sa->set_atime || sa->set_mtime;
}

int un_setattr_nosync(struct un_export *ex, struct un_change *ch, struct un_obj *o,
		      const struct un_sattr *sa)
{
	int err;

	if (!un_export_writable(ex) || o->retired)
		return -EROFS;
	if (sa->set_size && S_ISDIR(o->type))
		return -EISDIR;
	if (sa->set_size && !S_ISREG(o->type))
		return -EINVAL;
	if (!un_sattr_any(sa))
		return 0; /* nothing to change: no reason to copy up */
	err = un_obj_upper(ex, o) ? 0 : may_modify(o, sa);
	if (!err)
		err = un_copyup(ex, ch, o);
	return err ? err : setattr_upper(o, sa);
}

int un_setattr(const struct un_ctx *cx, struct un_export *ex, struct un_obj *o,
	       const struct un_sattr *sa)
{
	struct un_change ch = UN_CHANGE(cx);
	int err = un_setattr_nosync(ex, &ch, o, sa);

	return err ? err : un_sync_change(ex, &ch, o, NULL);
}

int un_open_write(struct un_export *ex, struct un_obj *o)
{
	int err;

	if (o->retired)
		return -EROFS;
	if (!S_ISREG(o->type) || !un_export_writable(ex) || un_obj_upper(ex, o))
		return 0;
	/* On overlayfs the open itself fails then, before any copy-up; an NFS
	 * CREATE of an existing file opens nothing, and the WRITE that follows
	 * gets the error. */
	err = may_modify(o, NULL);
	if (err == -EACCES)
		return 0;
	return err ? err : un_copyup(ex, NULL, o); /* a regular file: no note */
}

/* Makes O's data as durable as HOW asks, and with any stable write the
 * node table: the reply promises that the data is on stable storage, and
 * the handle the client writes through must survive with it.  FAILED: the
 * count of failed fsync runs before the write (rule 4). */
static int write_sync(struct un_export *ex, struct un_obj *o, enum un_stable how,
		      unsigned failed)
{
	int err;

	if (how == UN_UNSTABLE)
		return 0;
	err = un_sync_inode(ex, o->inst[0].fd);
	if (!err && un_sync_failures(ex->st) != failed)
		err = -EIO;
	return err ? err : un_state_sync(ex->st);
}

ssize_t un_write(struct un_export *ex, struct un_obj *o, const void *buf, size_t n,
		 uint64_t off, enum un_stable how, enum un_stable *committed)
{
	unsigned failed;
	ssize_t w;
	int fd, err;

	if (S_ISDIR(o->type))
		return -EISDIR;
	if (!S_ISREG(o->type))
		return -EINVAL;
	if (!un_export_writable(ex) || o->retired)
		return -EROFS;
	if (n > SSIZE_MAX || off > (uint64_t)INT64_MAX - n)
		return -EFBIG;
	err = un_obj_upper(ex, o) ? 0 : may_modify(o, NULL);
	if (!err)
		err = un_copyup(ex, NULL, o); /* a regular file: no note */
	if (err)
		return err;
	failed = un_sync_failures(ex->st);
	fd = un_sys_reopen(o->inst[0].fd, O_WRONLY | O_NOCTTY);
	if (fd < 0)
		return fd;
	w = un_sys_pwrite(fd, buf, n, (off_t)off);
	un_sys_close(fd);
	if (w >= 0) {
		err = write_sync(ex, o, how, failed);
		if (err)
			w = err;
		else
			*committed = how;
	}
	return w;
}

int un_commit(struct un_export *ex, struct un_obj *o)
{
	/* also under `async`: COMMIT's promise */
	return un_sync_now(ex, false, o, NULL);
}
