/* SPDX-License-Identifier: Apache-2.0 */
/* dir.c - changing names: create, mkdir, symlink, mknod, remove, rmdir,
 * rename and link, and the markers they leave (white-outs, opaque dirs).
 *
 * Design notes
 * ------------
 * Every change of names has one shape:
 *   1. check the arguments: a writable export, one valid name;
 *   2. lock the names of the directories involved (ns_lock: read-write
 *      locks striped by node id, taken for writing; a cross-directory
 *      rename first takes ex->rename_lock, as the VFS serialises those, so
 *      its loop check stays true).  A create or remove in a directory that
 *      merges nothing (invariant 6) takes its directory's stripe for
 *      reading and a mutex of its name (ns_lock_name), so that the changes
 *      of different names there run side by side, as the kernel runs them
 *      in the upper directory; one of the same name waits, and anything
 *      else changing the directory excludes them all.  When the upper alone
 *      cannot decide, the change drops that lock and takes the other;
 *   3. look the names up in the merged view and decide as the same system
 *      call on an overlayfs mount would: same errno, same order of checks
 *      (in a directory that merges nothing, its upper decides: invariant 6);
 *   4. copy up what must be in the upper: the parent directories, a
 *      non-directory that is linked or moved, and an existing file that an
 *      UNCHECKED create opens (create_existing);
 *   5. change the upper layer in one visible step (one rename, with
 *      RENAME_WHITEOUT, RENAME_EXCHANGE or RENAME_NOREPLACE); what must be
 *      ready before it shows (a white-out, an opaque directory, a file over a
 *      white-out) is built in the work dir first;
 *   6. tell the node table (un_node_remove, un_node_rename, un_node_link);
 *      a remove, and a create in a directory that merges nothing, only
 *      queue their write under the lock (un_node_remove_queue,
 *      un_node_assign_queue) and wait for its commit after dropping it, so
 *      that the changes of one directory share commits (node.c, the
 *      writer; its queue keeps their order); a sync one waits only after
 *      its syncs of step 7, whose shared run commits the queue first
 *      (un_sync_queued: one sleep a change, not two);
 *   7. after the locks are dropped, make the change durable before the
 *      reply (un_sync_change): the upper instances of the objects it made
 *      or changed, each before the directory whose entry names it, then the
 *      changed directories, then the node table.  NFS has its procedures
 *      synchronous (RFC 1094 section 2; NFSv3 relaxed only WRITE, with
 *      UNSTABLE and COMMIT), and knfsd commits the metadata of the parent
 *      and of the new child on a sync export.  A journal (ext4's jbd2, xfs)
 *      commits in order, so there the fsync of a directory alone would
 *      carry a new child; ext4 without a journal writes at an fsync only
 *      that inode and its blocks, and a new file's inode would be lost
 *      while its entry survives.  So: create, mkdir and an UNCHECKED create
 *      of an existing file fsync the object and then the directory; link
 *      the object (its link count) and then the directory; rename both
 *      directories (the moved inode is not new; a directory's ".." and a
 *      replaced target's link count are left to the fsck such a filesystem
 *      needs after a crash anyway, which loses no name).  What no fsync
 *      can reach (a symlink, a device, a white-out that remove, rmdir or
 *      rename leaves: struct un_change's fs) makes the sync a syncfs of the
 *      upper filesystem instead, unless the export's probe found a
 *      filesystem whose directory fsync carries it (ext4 with its journal,
 *      xfs: un_sync_probe_fs); a syncfs writes every dirty page of the
 *      filesystem, other clients' uppers' too, so it is kept for where it
 *      is needed.  Directories a copy-up makes on the way are durable,
 *      each before its entry, when the copy-up returns (copyup.c).
 *      Fsyncing the child first keeps any entry from reaching the disk
 *      before the inode it names.  On such a journal a create whose new
 *      object was last changed by making its entry fsyncs the directory
 *      alone (un_sync_made): that commit carries the object, and the
 *      concurrent creates of the directory share it, where each object's
 *      own fsync was a commit of its own (a mode fixed or attributes set
 *      after the entry keep the object's fsync: struct newobj's changed).
 *      Concurrent changes share these fsyncs and the flushes of the node
 *      table (sync.c, group commit).  Once durable, a rename, link, remove
 *      or rmdir lets the intent its table write kept go (change_durable,
 *      node.c invariant 15); the intent of a rename or link was flushed
 *      before step 5 (table_durable).  A call whose context is `async`
 *      (exports(5); union.h, struct un_ctx) skips step 7: the 1-second flush of
 *      the table and the filesystem's own writeback bound the loss, as on
 *      knfsd.
 *
 * Markers are written as kernel overlayfs writes them, so that it can mount
 * the upper layer:
 *   white-out   a 0:0 character device (Linux lets anyone make that one since
 *               5.8); where mknod is refused, the xattr form: an empty file
 *               with <prefix>whiteout, its parent marked <prefix>opaque = "x"
 *               (prefix: ex->xattr_prefix, trusted.overlay. as root).
 *               Remove and rmdir make it in the work dir, the engine's, and
 *               exchange it in (whiteout_put); rename leaves the one
 *               RENAME_WHITEOUT makes in the source directory, which takes
 *               a set-gid directory's group: the same owners as overlayfs's
 *   opaque dir  <prefix>opaque = "y"; set on a directory before it moves
 *               into a merged parent, even when the move then fails
 *               (rename_do: a pure upper target's ENOTEMPTY comes from the
 *               upper's rename, as in ovl_rename)
 * A name needs a white-out when removing or moving it would let an entry of
 * a lower layer show through (un_lower_has).
 *
 * Invariants
 *  1. Each change of the merged view is one atomic rename or unlink; a crash
 *     between steps, or a clean-up that fails after the change, leaves
 *     garbage in the work dir only, which the next un_work_open removes
 *     (whiteout_put, create_over, clear_dir).  Exception: where RENAME_WHITEOUT is
 * refused (a filesystem without it, or the xattr form) the source's white-out follows the
 * rename in a second step (rename_move).
 *  2. A directory made over a white-out is opaque before it shows
 *     (create_over); a directory moved into a merged parent is made opaque
 *     before it moves, as overlayfs does, so no lower entry of its new name
 *     leaks into it (rename_do).
 *  3. A directory with lower parts never moves: -EXDEV (rename_check), as
 *     overlayfs without redirect_dir.
 *  4. The engine's identity (un_sys_creds_override) only for what the caller
 *     cannot do itself: the work dir, white-outs (RENAME_WHITEOUT needs
 *     CAP_MKNOD), markers.  Such steps follow the caller's permission check
 *     on the merged directory (may_change), as overlayfs checks its own inode
 *     before it acts with the mounter's credentials.  Plain steps run as the
 *     caller, and the kernel checks them.
 *  5. The node table learns of a change after it succeeded on disk, under
 *     the same directory locks.
 *  6. A directory whose only instance is its upper one (upper_only: it is
 *     in the upper and merges nothing below) shows exactly the names of
 *     that instance less its white-outs, since un_lookup in it reads that
 *     instance and no other (lookup.c walks DIR's own instances).  There
 *     CREATE and REMOVE of one name decide from the upper alone, without
 *     the merged lookup (step 3):
 *     - upper_kind read with the engine's identity (upper_probe), as the
 *       lookup reads layers, says what the lookup would: absent or a
 *       white-out is absent from the merged view, anything else present.
 *       A probe that fails goes the merged way, so errors stay the
 *       lookup's; so does a CREATE that finds the name present (an
 *       existing object's checks need its object).
 *       (create_in reads the kind as the caller: the two differ only on a
 *       user.* white-out xattr the caller may not read, which the caller's
 *       read took for an entry, failing a create with -EEXIST where the
 *       merged view shows nothing.)
 *     - REMOVE of a present non-directory is a plain unlinkat, as
 *       remove_nondir decides: no lower instance can show through
 *       (un_lower_has finds none) and the entry is the upper's.
 *  7. A create builds the object it made from what it made (made_obj),
 *     instead of looking the name up again under the directory's lock:
 *     - Without a verifier it first makes the object as the caller
 *       (nb_make), which succeeds only where the upper holds nothing, and
 *       that is where create_in would make the same object after reading
 *       the kind; a failure reads the kind and goes on as create_in, with
 *       the failure as the answer where the name was absent after all.
 *     - The name is opened and read once, as the lookup opens it, and the
 *       table gets the lookup's observation of it: one instance, in the
 *       upper (un_links_of).  That is all the lookup would find: a fresh
 *       non-directory ends a lookup's walk, and a fresh directory merges
 *       nothing, since the merged view showed nothing at the name under
 *       the lock (every layer below had nothing there, or the top-most
 *       that had something had a white-out, which ends the walk; a
 *       directory made over a white-out is opaque anyway).  The lookup's
 *       white-out probes are left out: the object is a fresh mknod, mkdir,
 *       symlink or device, or a rename of one from the work dir, carrying
 *       no overlay xattr, and no other request changes the names of the
 *       directory while its lock is held (a change made to the layers
 *       behind the server's back races with any lookup alike).
 *     - That lookup could not have filled the resolve cache: the
 *       directory's upper ctime had just changed, so it was not settled
 *       (rcache.c rule 3).
 *
 * EXCLUSIVE create keeps the client's verifier in the new file's atime and
 * mtime seconds, as knfsd does: it lives exactly as long as the client needs
 * it (the client's SETATTR that follows replaces it), it survives copy-up
 * (times are copied), and it leaves no foreign xattr for kernel overlayfs or
 * a later layer roll-up to carry.  The file is built in the work dir with
 * the verifier and renamed into place, so no file without it ever shows.
 * A read that updates the atime before the SETATTR makes a retransmission
 * fail with -EEXIST (knfsd has the same window).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include "un_private.h"

#define LOCK_TRIES 4 /* re-lookups before a churned name gives -EAGAIN */
#define ATTR_MAX   48

/* What the upper layer holds under a name. */
enum up_kind { UP_ABSENT, UP_WHITEOUT, UP_DIR, UP_OTHER };

/* An object to make. */
struct newobj {
	mode_t mode;	     /* type and permission bits */
	dev_t rdev;	     /* devices */
	const char *target;  /* symlinks */
	int linkfd;	     /* hard links: O_PATH of the object, else -1 */
	const uint8_t *verf; /* exclusive create: the verifier to keep */
	/* Set by the create: it changed the object after making its entry (a
	 * mode fixed, attributes set), which then needs its own fsync
	 * (un_sync_made). */
	bool changed;
};

/* What to do when the name to create exists. */
enum on_exist { EXIST_FAIL, EXIST_OPEN, EXIST_VERF };

/* Locked stripes of ex->ns_locks, ascending. */
struct nslocks {
	size_t n;
	size_t idx[4];
	bool rename; /* ex->rename_lock held too */
	int name;    /* the stripe of ex->name_locks held (its idx[0] shared), or -1 */
};

void un_dir_test_xattr_whiteouts(struct un_export *ex, bool on)
{
	atomic_store(&ex->wh_xattr, on);
}

/* ---- locks ---- */

static void ns_lock(struct un_export *ex, struct nslocks *l, const un_id *ids, size_t n)
{
	size_t s, j;

	l->n = 0;
	l->name = -1;
	for (size_t i = 0; i < n; i++) {
		s = un_stripe(ids[i]);
		for (j = 0; j < l->n && l->idx[j] < s; j++)
			;
		if (j < l->n && l->idx[j] == s)
			continue;
		memmove(&l->idx[j + 1], &l->idx[j], (l->n - j) * sizeof(l->idx[0]));
		l->idx[j] = s;
		l->n++;
	}
	for (size_t i = 0; i < l->n; i++)
		pthread_rwlock_wrlock(&ex->ns_locks[l->idx[i]]);
}

/* The stripe of NAME in directory ID. */
static int name_stripe(un_id id, const char *name)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325) ^ id; /* FNV-1a over the name */

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * UINT64_C(0x100000001b3);
	return (int)un_stripe(h);
}

/* Locks one NAME of directory ID for a create or remove decided by the
 * directory's upper alone (invariant 6): the directory's stripe shared, so
 * that the changes of other names in it go on side by side (the kernel
 * orders them in the directory), and NAME's own. */
static void ns_lock_name(struct un_export *ex, struct nslocks *l, un_id id,
			 const char *name)
{
	l->n = 1;
	l->idx[0] = un_stripe(id);
	l->name = name_stripe(id, name);
	pthread_rwlock_rdlock(&ex->ns_locks[l->idx[0]]);
	pthread_mutex_lock(&ex->name_locks[l->name]);
}

static void ns_unlock(struct un_export *ex, struct nslocks *l)
{
	if (l->name >= 0)
		pthread_mutex_unlock(&ex->name_locks[l->name]);
	l->name = -1;
	while (l->n)
		pthread_rwlock_unlock(&ex->ns_locks[l->idx[--l->n]]);
}

/* Asserts step 2 for a function that changes DIR's names: its stripe is
 * held, shared (with its name's mutex, NAME given) or exclusive. */
static void ns_assert_locked(struct un_export *ex, const struct un_obj *dir,
			     const char *name)
{
	un_assert_rwlocked(&ex->ns_locks[un_stripe(dir->id)]);
	if (name)
		un_assert_locked(&ex->name_locks[name_stripe(dir->id, name)]);
}

/* un_lookup, with an absent name as success and *out NULL. */
static int lookup_opt(struct un_export *ex, struct un_obj *dir, const char *name,
		      struct un_obj **out)
{
	int err = un_lookup(ex, dir, name, out);

	if (err == -ENOENT) {
		*out = NULL;
		return 0;
	}
	return err;
}

static un_id id_or_none(const struct un_obj *o)
{
	return o ? o->id : UN_ID_NONE;
}

/* One try of lock_with: 1 when the lookups before and under the locks
 * agree (the locks held, *out set), 0 when they do not (nothing held), or
 * -errno (nothing held). */
static int lock_try(struct un_export *ex, struct nslocks *l, un_id *ids, size_t n,
		    struct un_obj *dir, const char *name, struct un_obj **out)
{
	struct un_obj *before = NULL, *now = NULL;
	int err = lookup_opt(ex, dir, name, &before);

	if (err)
		return err;
	ids[n] = before ? before->id : ids[0];
	ns_lock(ex, l, ids, n + 1);
	err = lookup_opt(ex, dir, name, &now);
	if (!err && id_or_none(now) == id_or_none(before)) {
		*out = now; /* ownership moves to the caller */
		now = NULL;
		err = 1;
	} else {
		ns_unlock(ex, l);
	}
	un_obj_put(before);
	un_obj_put(now);
	return err;
}

/* Locks IDS[0..n-1] (IDS has room for one more) and what NAME in DIR
 * holds (*out, NULL when absent): the name is looked up before and again
 * under the locks until both agree.  -EAGAIN if it keeps changing. */
static int lock_with(struct un_export *ex, struct nslocks *l, un_id *ids, size_t n,
		     struct un_obj *dir, const char *name, struct un_obj **out)
{
	int r = 0;

	for (int tries = 0; tries < LOCK_TRIES && r == 0; tries++)
		r = lock_try(ex, l, ids, n, dir, name, out);
	return r == 1 ? 0 : r == 0 ? -EAGAIN : r;
}

/* ---- checks ---- */

static int args_check(struct un_export *ex, const char *name, size_t *len)
{
	if (!un_export_writable(ex))
		return -EROFS;
	return un_name_check(name, len);
}

/* args_check for a change of NAME in DIR, which must be a directory. */
static int dir_args_check(struct un_export *ex, const struct un_obj *dir,
			  const char *name, size_t *len)
{
	int err = args_check(ex, name, len);

	return !err && !S_ISDIR(dir->type) ? -ENOTDIR : err;
}

static bool is_dots(const char *name)
{
	return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]));
}

/* 0 if the caller may add and remove names in DIR (write and search on the
 * merged directory's attributes) and, when VICTIM is given, remove it under
 * a sticky bit; checked before steps taken with the engine's identity. */
static int may_change(const struct un_obj *dir, const struct un_obj *victim)
{
	struct un_creds c;
	struct stat ds, vs;
	unsigned bits;
	int err;

	un_sys_creds_current(&c);
	if (c.fsuid == 0)
		return 0; /* CAP_DAC_OVERRIDE and CAP_FOWNER */
	err = un_sys_fstat(dir->inst[0].fd, &ds);
	if (err)
		return err;
	bits = c.fsuid == ds.st_uid	    ? ds.st_mode >> 6
	       : un_sys_in_group(ds.st_gid) ? ds.st_mode >> 3
					    : ds.st_mode;
	if ((bits & 3) != 3)
		return -EACCES;
	if (!victim || !(ds.st_mode & S_ISVTX) || c.fsuid == ds.st_uid)
		return 0;
	err = un_sys_fstat(victim->inst[0].fd, &vs);
	if (err)
		return err;
	return c.fsuid == vs.st_uid ? 0 : -EPERM;
}

static int upper_kind(int udir, const char *name)
{
	struct stat st;
	int err = un_sys_fstatat(udir, name, &st, 0);

	if (err == -ENOENT)
		return UP_ABSENT;
	if (err)
		return err;
	err = un_whiteout_classify(udir, name, &st);
	if (err < 0)
		return err;
	return err == UN_SEEN_WHITEOUT ? UP_WHITEOUT
	       : err == UN_SEEN_DIR    ? UP_DIR
				       : UP_OTHER;
}

/* Whether DIR's names are those of its upper instance alone, less its
 * white-outs (invariant 6): DIR is in the upper and merges nothing below.
 * The dots are left to un_lookup. */
static bool upper_only(const struct un_export *ex, const struct un_obj *dir,
		       const char *name)
{
	return dir->ninst == 1 && un_obj_upper(ex, dir) && !is_dots(name);
}

/* upper_kind read with the engine's identity, as un_lookup reads layers. */
static int upper_probe(int udir, const char *name)
{
	struct un_creds saved;
	int kind;

	un_sys_creds_override(&saved);
	kind = upper_kind(udir, name);
	un_sys_creds_revert(&saved);
	return kind;
}

/* What one lower layer holds under a name. */
enum low_kind { LOW_NONE, LOW_ENTRY, LOW_WHITEOUT };

/* What lower layer dir FD holds under NAME: an enum low_kind or -errno. */
static int lower_entry(int fd, const char *name, size_t len)
{
	struct stat st;
	int err = un_sys_fstatat(fd, name, &st, 0);

	if (err == -ENOENT) {
		err = un_oci_whiteout_exists(fd, name, len);
		return err < 0 ? err : err ? LOW_WHITEOUT : LOW_NONE;
	}
	if (err)
		return err;
	err = un_whiteout_classify(fd, name, &st);
	if (err < 0)
		return err;
	return err == UN_SEEN_WHITEOUT ? LOW_WHITEOUT : LOW_ENTRY;
}

int un_lower_has(struct un_export *ex, const struct un_obj *dir, const char *name,
		 size_t len)
{
	int r = LOW_NONE;

	if (un_name_private(name, len))
		return 0; /* absent from every lower layer */
	for (size_t i = 0; i < dir->ninst && r == LOW_NONE; i++)
		if (ex->layers[dir->inst[i].layer].lower)
			r = lower_entry(dir->inst[i].fd, name, len);
	return r < 0 ? r : r == LOW_ENTRY;
}

static bool has_lower(const struct un_export *ex, const struct un_obj *o)
{
	for (size_t i = 0; i < o->ninst; i++)
		if (ex->layers[o->inst[i].layer].lower)
			return true;
	return false;
}

/* Whether O lives in the upper alone (overlayfs' ovl_pure_upper): its
 * upper instance shows all it holds. */
static bool pure_upper(const struct un_export *ex, const struct un_obj *o)
{
	return o->ninst == 1 && un_obj_upper(ex, o);
}

/* -ENOTEMPTY unless directory O is empty across all its layers. */
static int dir_empty(struct un_export *ex, struct un_obj *o)
{
	struct un_listing *l;
	size_t n;
	int err = un_listing_get(ex, o, &l);

	if (err)
		return err;
	n = un_listing_count(l); /* "." and ".." always */
	un_listing_put(l);
	return n > 2 ? -ENOTEMPTY : 0;
}

/* 1 if node ANC is ID or one of its ancestors, 0 if not. */
static int is_ancestor(struct un_export *ex, un_id anc, un_id id)
{
	struct un_node_hop *hops = NULL;
	size_t n;
	int err;

	if (anc == id)
		return 1;
	err = un_node_path(ex->st, id, &hops, &n);
	for (size_t i = 0; !err && i < n; i++)
		if (hops[i].id == anc)
			err = 1;
	free(hops);
	return err;
}

/* ---- markers ---- */

static int marker_set(struct un_export *ex, int fd, const char *key, const char *val,
		      int flags)
{
	char attr[ATTR_MAX];

	strcpy(attr, ex->xattr_prefix);
	strcat(attr, key);
	return un_sys_fsetxattr_fd(fd, attr, val, strlen(val), flags);
}

static int set_opaque(struct un_export *ex, int fd)
{
	return marker_set(ex, fd, "opaque", "y", 0);
}

/* Marks upper dir UDIR as holding xattr white-outs, unless it is marked. */
static int mark_xwhiteouts(struct un_export *ex, int udir)
{
	int err = marker_set(ex, udir, "opaque", "x", XATTR_CREATE);

	return err == -EEXIST ? 0 : err;
}

/* Makes a white-out named TMP in the work dir: 0 a 0:0 device, 1 the xattr
 * form (whose parent must be marked), or -errno. */
static int wh_make(struct un_export *ex, char tmp[32])
{
	int fd, err;

	un_work_tmpname(tmp);
	if (!atomic_load(&ex->wh_xattr)) {
		err = un_sys_mknodat(ex->tmpfd, tmp, S_IFCHR, makedev(0, 0));
		if (err != -EPERM)
			return err;
		atomic_store(&ex->wh_xattr, true); /* no mknod for us: from now on */
	}
	fd = un_sys_openat(ex->tmpfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd;
	err = marker_set(ex, fd, "whiteout", "y", 0);
	un_sys_close(fd);
	if (err)
		un_sys_unlinkat(ex->tmpfd, tmp, 0);
	return err ? err : 1;
}

/* Puts a white-out at NAME of upper dir UDIR, with the engine's identity.
 * PRESENT: an entry is there now; it moves into the work dir, atomically
 * replaced by the white-out, and is removed there (a directory with the
 * white-outs it holds).  The white-out is made in the work dir, as
 * overlayfs makes the white-outs of unlink and rmdir: it is the engine's,
 * 0:0, where RENAME_WHITEOUT would make it in UDIR and give it a set-gid
 * UDIR's group. */
static int whiteout_put(struct un_export *ex, struct un_change *ch, int udir,
			const char *name, bool present)
{
	char tmp[32];
	int err;

	err = wh_make(ex, tmp);
	if (err < 0)
		return err;
	if (err == 1)
		err = mark_xwhiteouts(ex, udir);
	if (!err)
		err = un_sys_renameat2(ex->tmpfd, tmp, udir, name,
				       present ? RENAME_EXCHANGE : RENAME_NOREPLACE);
	/* The white-out on failure, the old entry after an exchange. */
	if (err || present)
		un_work_remove(ex->tmpfd, tmp, 2);
	if (!err)
		ch->fs = true; /* a new white-out: step 7 */
	return err;
}

/* The same, where a racing copy-up may have put an entry at NAME since the
 * lookup that found none (copy-up does not take directory locks). */
static int whiteout_put_any(struct un_export *ex, struct un_change *ch, int udir,
			    const char *name, bool present)
{
	int err = whiteout_put(ex, ch, udir, name, present);

	return err == -EEXIST && !present ? whiteout_put(ex, ch, udir, name, true) : err;
}

/* Copies owner, mode and times of FROM to TO (both O_PATH). */
static int attrs_like(int from, int to)
{
	struct stat st;
	int err = un_sys_fstat(from, &st);

	if (!err)
		err = un_sys_chown_fd(to, st.st_uid, st.st_gid);
	if (!err)
		err = un_sys_chmod_fd(to, st.st_mode & 07777);
	if (!err)
		err = un_sys_utimens_fd(
		    to, (const struct timespec[2]){st.st_atim, st.st_mtim});
	return err;
}

/* Replaces upper dir NAME of UDIR, empty in the merged view but holding
 * white-outs, by an empty opaque one with its attributes (so a rename can
 * replace it), and removes the old one: engine identity. */
static int clear_dir(struct un_export *ex, int udir, const char *name)
{
	int fd = -1, old = -1, err;
	char tmp[32];

	un_work_tmpname(tmp);
	err = un_sys_mkdirat(ex->tmpfd, tmp, 0700);
	if (err)
		return err;
	err = fd = un_sys_open_beneath(ex->tmpfd, tmp, O_PATH);
	if (fd >= 0)
		err = old = un_sys_open_beneath(udir, name, O_PATH | O_DIRECTORY);
	if (old >= 0)
		err = attrs_like(old, fd);
	if (!err)
		err = set_opaque(ex, fd);
	if (!err)
		err = un_sys_renameat2(ex->tmpfd, tmp, udir, name, RENAME_EXCHANGE);
	un_sys_close(fd);
	un_sys_close(old);
	un_work_remove(ex->tmpfd, tmp, 2); /* the new dir on failure, else the old */
	return err;
}

/* ---- making objects ---- */

static int nb_make(int dirfd, const char *name, const struct newobj *nb)
{
	int fd;

	if (nb->linkfd >= 0)
		return un_sys_link_fd(nb->linkfd, dirfd, name);
	switch (nb->mode & S_IFMT) {
	case S_IFREG:
		/* mknod(2) of a regular file is the filesystem's create, as
		 * open(O_CREAT|O_EXCL) is (and as knfsd and overlayfs call it),
		 * without a descriptor to close.  Where it is refused (a seccomp
		 * filter), the open gives the answer. */
		fd = un_sys_mknodat(dirfd, name, S_IFREG | (nb->mode & 07777), 0);
		if (fd != -EPERM && fd != -ENOSYS)
			return fd;
		fd = un_sys_openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW,
				   nb->mode & 07777);
		un_sys_close(fd);
		return fd < 0 ? fd : 0;
	case S_IFDIR:
		return un_sys_mkdirat(dirfd, name, nb->mode & 07777);
	case S_IFLNK:
		return un_sys_symlinkat(nb->target, dirfd, name);
	default:
		return un_sys_mknodat(dirfd, name, nb->mode, nb->rdev);
	}
}

/* The process umask may have dropped permission bits the caller asked for:
 * NFS has no umask (the client applied its own), so the mode is exact.  FD
 * (O_PATH) is the new object, ST its stat. */
static int nb_fix_mode_fd(int fd, const struct stat *st, struct newobj *nb)
{
	if (nb->linkfd >= 0 || S_ISLNK(nb->mode) ||
	    (st->st_mode & 0777) == (nb->mode & 0777))
		return 0;
	nb->changed = true;
	return un_sys_chmod_fd(fd, (st->st_mode & 07000) | (nb->mode & 0777));
}

/* The same for the new object NAME of UDIR. */
static int nb_fix_mode(int udir, const char *name, struct newobj *nb)
{
	struct stat st;
	int fd, err;

	if (nb->linkfd >= 0 || S_ISLNK(nb->mode))
		return 0;
	err = un_sys_fstatat(udir, name, &st, 0);
	if (err || (st.st_mode & 0777) == (nb->mode & 0777))
		return err;
	fd = un_sys_open_beneath(udir, name, O_PATH);
	if (fd < 0)
		return fd;
	err = nb_fix_mode_fd(fd, &st, nb);
	un_sys_close(fd);
	return err;
}

/* Half I of an EXCLUSIVE create's verifier, as the seconds it is kept in
 * (0: atime, 1: mtime; see the notes). */
static time_t verf_half(const uint8_t v[8], int i)
{
	const uint8_t *p = v + 4 * i;

	return (time_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
			(uint32_t)p[2] << 8 | p[3]);
}

/* Who creates, as the kernel's create checks see them: the caller's ids,
 * the upper parent's attributes, and whether the caller may keep S_ISGID
 * on a file of the parent's group (in_group_or_capable: fsuid 0 keeps
 * CAP_FSETID, any other fsuid drops it). */
struct maker {
	struct un_creds caller;
	struct stat parent;
	bool sgid_ok;
};

/* Fills M for a create in upper dir UDIR; called as the caller. */
static int maker_get(int udir, struct maker *m)
{
	int err;

	un_sys_creds_current(&m->caller);
	err = un_sys_fstat(udir, &m->parent);
	m->sgid_ok = !err && (m->caller.fsuid == 0 || un_sys_in_group(m->parent.st_gid));
	return err;
}

/* The mode creating NB in M's parent gives, as the VFS gives it: a
 * directory keeps its permission and sticky bits and gets S_ISGID from a
 * set-gid parent only (vfs_mkdir); a group-executable file asked with
 * S_ISGID loses it in a set-gid parent unless the caller is in the group or
 * privileged (mode_strip_sgid). */
static mode_t nb_mode(const struct newobj *nb, const struct maker *m)
{
	bool sgid_parent = m->parent.st_mode & S_ISGID;
	mode_t mode = nb->mode & 07777;

	if (S_ISDIR(nb->mode))
		return (mode & (0777 | S_ISVTX)) | (sgid_parent ? S_ISGID : 0);
	if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) && sgid_parent &&
	    !m->sgid_ok)
		mode &= ~(mode_t)S_ISGID;
	return mode;
}

/* Gives FD, made in the work dir for M's caller, what creating it in M's
 * parent as the caller would have: owner (and a set-gid parent's group),
 * mode; and the verifier's times, and opaqueness for a directory
 * (invariant 2). */
static int nb_attrs(struct un_export *ex, int fd, const struct newobj *nb,
		    const struct maker *m)
{
	gid_t gid = m->parent.st_mode & S_ISGID ? m->parent.st_gid : m->caller.fsgid;
	struct timespec ts[2];
	int err;

	if (nb->linkfd >= 0)
		return 0; /* an existing object */
	err = un_sys_chown_fd(fd, m->caller.fsuid, gid);
	if (!err && !S_ISLNK(nb->mode))
		err = un_sys_chmod_fd(fd, nb_mode(nb, m));
	if (!err && S_ISDIR(nb->mode))
		err = set_opaque(ex, fd);
	if (!err && nb->verf) {
		ts[0] = (struct timespec){.tv_sec = verf_half(nb->verf, 0)};
		ts[1] = (struct timespec){.tv_sec = verf_half(nb->verf, 1)};
		err = un_sys_utimens_fd(fd, ts);
	}
	return err;
}

/* Makes NB at NAME of DIR's upper through the work dir, with the engine's
 * identity: over a white-out (exchanged with it, OVER_WH) or, for an
 * exclusive create, where nothing is (RENAME_NOREPLACE). */
static int create_over(struct un_export *ex, struct un_obj *dir, const char *name,
		       const struct newobj *nb, bool over_wh)
{
	int udir = dir->inst[0].fd, fd = -1, err;
	struct un_creds saved;
	struct maker m;
	bool made = false;
	char tmp[32];

	err = may_change(dir, NULL);
	if (!err)
		err = maker_get(udir, &m);
	if (!err && (S_ISCHR(nb->mode) || S_ISBLK(nb->mode)) && m.caller.fsuid != 0)
		err = -EPERM; /* what mknod as the caller would say */
	if (err)
		return err;
	un_sys_creds_override(&saved);
	un_work_tmpname(tmp);
	err = nb_make(ex->tmpfd, tmp, nb);
	made = !err;
	if (!err)
		err = fd = un_sys_open_beneath(ex->tmpfd, tmp, O_PATH);
	if (fd >= 0)
		err = nb_attrs(ex, fd, nb, &m);
	if (!err)
		err = un_sys_renameat2(ex->tmpfd, tmp, udir, name,
				       over_wh ? RENAME_EXCHANGE : RENAME_NOREPLACE);
	made = made && (err || over_wh); /* the white-out, after an exchange */
	un_sys_close(fd);
	if (made)
		un_work_remove(ex->tmpfd, tmp, 0);
	un_sys_creds_revert(&saved);
	return err;
}

/* Makes NB at NAME of DIR, whose upper instance exists; NAME is absent from
 * the merged view. */
static int create_in(struct un_export *ex, struct un_obj *dir, const char *name,
		     struct newobj *nb)
{
	int udir = dir->inst[0].fd, kind, err;

	ns_assert_locked(ex, dir, NULL);
	kind = upper_kind(udir, name);
	if (kind < 0)
		return kind;
	if (kind == UP_WHITEOUT)
		return create_over(ex, dir, name, nb, true);
	if (kind != UP_ABSENT)
		return -EEXIST; /* changed under us */
	if (nb->verf)
		return create_over(ex, dir, name, nb, false);
	err = nb_make(udir, name, nb);
	return err ? err : nb_fix_mode(udir, name, nb);
}

/* True if regular file O carries verifier V (nb_attrs wrote it). */
static int verf_match(const struct un_obj *o, const uint8_t v[8])
{
	struct stat st;
	int err;

	if (!S_ISREG(o->type))
		return 0;
	err = un_sys_fstat(o->inst[0].fd, &st);
	if (err)
		return err;
	return st.st_size == 0 && st.st_atim.tv_sec == verf_half(v, 0) &&
	       st.st_mtim.tv_sec == verf_half(v, 1);
}

/* The existing object C at the name to create: *out, or -EEXIST. */
static int create_existing(struct un_export *ex, struct un_obj *c, enum on_exist how,
			   const struct newobj *nb, const struct un_sattr *sa,
			   struct un_obj **out)
{
	struct un_sattr trunc = {.set_size = true};
	int err = -EEXIST;

	if (how == EXIST_OPEN && S_ISREG(c->type))
		err = 0;
	if (how == EXIST_VERF) {
		err = verf_match(c, nb->verf);
		err = err < 0 ? err : err ? 0 : -EEXIST;
	}
	/* UNCHECKED stands for open(O_CREAT) of the file, which overlayfs
	 * copies up at once when it is for writing (or O_TRUNC): a lower file
	 * with hard links then parts from its other names now, not at its first
	 * change.  NFS does not say what the open is for; a read-only
	 * open(O_CREAT) is rare, and a client opens for writing what it
	 * creates. */
	if (!err && how == EXIST_OPEN)
		err = sa && sa->set_size && sa->size == 0
			  ? un_setattr_nosync(ex, NULL, c, &trunc) /* regular */
			  : un_open_write(ex, c);
	if (!err)
		*out = un_obj_get(c);
	return err;
}

/* An object of one instance, FD (ownership moves to it on success), the
 * entry NAME (LEN) of DIR's upper instance that stat ST describes; its node
 * from the table as a lookup's observation of it gives it (lookup_obj).
 * With PEND the node is only queued (PEND, node.c's writer): the caller
 * waits for it after its locks and sets the object's id and fileid. */
static int obj_made(struct un_export *ex, const struct un_obj *dir, const char *name,
		    size_t len, int fd, const struct stat *st, struct un_node_job *pend,
		    struct un_obj **out)
{
	uint16_t layer = dir->inst[0].layer;
	struct un_devino di = {.dev = st->st_dev, .ino = st->st_ino};
	struct un_node_obs obs = {
	    .root = ex->root_id,
	    .parent = dir->id,
	    .name = name,
	    .namelen = len,
	    .type = st->st_mode & S_IFMT,
	    .inst = &di,
	    .ninst = 1,
	    .links = un_links_of(ex, layer, st),
	};
	struct un_obj_ident who = {
	    .id = UN_ID_NONE,
	    .fileid = UN_ID_NONE,
	    .parent = dir->id,
	    .type = obs.type,
	    .name = name,
	    .len = len,
	};
	struct un_obj *o;
	int err = 0;

	if (pend)
		un_node_assign_queue(ex->st, &obs, pend);
	else
		err = un_node_assign(ex->st, &obs, 1, &who.id, &who.fileid);
	if (err)
		return err;
	o = un_obj_new(1, &who);
	if (!o)
		return -ENOMEM;
	o->inst[0] = (struct un_inst){.fd = fd, .layer = layer};
	o->ninst = 1;
	*out = o;
	return 0;
}

/* The object NB became at NAME (LEN) of DIR's upper, made by this call
 * under DIR's lock: opened and read once as un_lookup would, without its
 * white-out probes (invariant 7); its mode made exact when FIX. */
static int made_obj(struct un_export *ex, struct un_obj *dir, const char *name,
		    size_t len, struct newobj *nb, bool fix, struct un_node_job *pend,
		    struct un_obj **out)
{
	struct stat st;
	int fd, err;

	fd = un_sys_open_beneath(dir->inst[0].fd, name, O_PATH);
	if (fd < 0)
		return fd;
	err = un_sys_fstat(fd, &st);
	if (!err && fix)
		err = nb_fix_mode_fd(fd, &st, nb);
	if (!err)
		err = obj_made(ex, dir, name, len, fd, &st, pend, out);
	if (err)
		un_sys_close(fd);
	return err;
}

/* What create_in does, giving the new object (*out) as a lookup in DIR
 * would find it (invariant 7): NB is made first where the upper holds
 * nothing, then as the kind of NAME in DIR's upper says.  PROBE: DIR is
 * upper-only and the kind decides whether NAME is present (invariant 6):
 * 1 when it is, or could not be read (the merged way answers then);
 * else the merged view showed nothing, and the kind is read as the
 * caller, as create_in reads it. */
static int create_made(struct un_export *ex, struct un_obj *dir, const char *name,
		       size_t len, struct newobj *nb, bool probe,
		       struct un_node_job *pend, struct un_obj **out)
{
	int udir = dir->inst[0].fd, kind, err = 0;

	ns_assert_locked(ex, dir, probe ? name : NULL);
	if (!nb->verf) {
		err = nb_make(udir, name, nb);
		if (!err)
			return made_obj(ex, dir, name, len, nb, true, pend, out);
	}
	kind = probe ? upper_probe(udir, name) : upper_kind(udir, name);
	if (kind != UP_ABSENT && kind != UP_WHITEOUT)
		return probe ? 1 : kind < 0 ? kind : -EEXIST; /* changed under us */
	if (kind == UP_ABSENT && !nb->verf)
		return err; /* what making it answered */
	err = create_over(ex, dir, name, nb, kind == UP_WHITEOUT);
	return err ? err : made_obj(ex, dir, name, len, nb, false, NULL, out);
}

/* create_obj's decision in the merged view: *out gets the existing object
 * (create_existing) or the new one (*made set). */
static int create_merged(struct un_export *ex, struct un_obj *dir, const char *name,
			 size_t len, struct newobj *nb, enum on_exist how,
			 const struct un_sattr *sa, struct un_obj **out, bool *made)
{
	struct un_obj *c = NULL;
	int err = lookup_opt(ex, dir, name, &c);

	ns_assert_locked(ex, dir, NULL);
	if (!err && c) {
		err = create_existing(ex, c, how, nb, sa, out);
	} else if (!err) {
		*made = true;
		err = un_copyup(ex, NULL, dir); /* a directory: no note */
		if (!err)
			err = create_made(ex, dir, name, len, nb, false, NULL, out);
	}
	un_obj_put(c);
	return err;
}

/* Creates NB at NAME in DIR (see un_create for HOW and SA) for a caller
 * whose context is CX; *out (may be NULL) gets the object. */
static int create_obj(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
		      const char *name, struct newobj *nb, enum on_exist how,
		      const struct un_sattr *sa, struct un_obj **out)
{
	struct un_change ch = UN_CHANGE(cx);
	struct un_node_job job = {0};
	struct un_obj *o = NULL;
	struct nslocks l;
	bool made = true;
	size_t len;
	int err;

	err = dir_args_check(ex, dir, name, &len);
	if (err)
		return err;
	err = 1;
	if (upper_only(ex, dir, name)) {
		ns_lock_name(ex, &l, dir->id, name);
		err = create_made(ex, dir, name, len, nb, true, &job, &o);
		if (err == 1)
			ns_unlock(ex, &l); /* the merged way decides, exclusive */
	}
	if (err == 1) {
		made = false;
		ns_lock(ex, &l, &dir->id, 1);
		err = create_merged(ex, dir, name, len, nb, how, sa, &o, &made);
	}
	if (!err && made && sa && un_sattr_any(sa)) {
		nb->changed = true;
		err = un_setattr_nosync(ex, &ch, o, sa);
	}
	ns_unlock(ex, &l);
	/* The object before the entry that names it (design notes, step 7);
	 * a queued job (create_made's: the new object's node) commits in the
	 * syncs' run. */
	if (job.fn && err)
		(void)un_node_job_wait(ex->st, &job); /* the change failed */
	else if (job.fn) {
		err = un_sync_queued(ex, &ch, made && !nb->changed, o, dir, &job);
		if (!job.err) {
			o->id = job.id;
			o->fileid = job.fileid;
		}
	} else if (!err)
		err = made && !nb->changed ? un_sync_made(ex, &ch, o, dir)
					   : un_sync_change(ex, &ch, o, dir);
	if (!err && out)
		*out = o;
	else
		un_obj_put(o);
	return err;
}

int un_create(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	      const char *name, mode_t mode, bool excl, const struct un_sattr *sa,
	      struct un_obj **out)
{
	struct newobj nb = {.mode = S_IFREG | (mode & 07777), .linkfd = -1};

	return create_obj(cx, ex, dir, name, &nb, excl ? EXIST_FAIL : EXIST_OPEN, sa,
			  out);
}

int un_create_verf(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
		   const char *name, const uint8_t verf[8], struct un_obj **out)
{
	/* The client sets the real mode with the SETATTR that follows. */
	struct newobj nb = {.mode = S_IFREG | 0600, .linkfd = -1, .verf = verf};

	return create_obj(cx, ex, dir, name, &nb, EXIST_VERF, NULL, out);
}

int un_mkdir(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	     const char *name, mode_t mode, struct un_obj **out)
{
	struct newobj nb = {.mode = S_IFDIR | (mode & 07777), .linkfd = -1};

	return create_obj(cx, ex, dir, name, &nb, EXIST_FAIL, NULL, out);
}

int un_symlink(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	       const char *name, const char *target, struct un_obj **out)
{
	struct newobj nb = {.mode = S_IFLNK | 0777, .linkfd = -1, .target = target};
	size_t tlen = strnlen(target, PATH_MAX);

	if (tlen == 0)
		return -ENOENT; /* as symlink(2) */
	if (tlen >= PATH_MAX)
		return -ENAMETOOLONG;
	return create_obj(cx, ex, dir, name, &nb, EXIST_FAIL, NULL, out);
}

int un_mknod(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	     const char *name, mode_t mode, uint32_t major, uint32_t minor,
	     struct un_obj **out)
{
	struct newobj nb = {.mode = mode, .linkfd = -1};

	switch (mode & S_IFMT) {
	case S_IFCHR:
		if (major == 0 && minor == 0)
			return -EPERM; /* that would be a white-out (as overlayfs) */
				       /* fall through */
	case S_IFBLK:
		nb.rdev = makedev(major, minor);
		break;
	case S_IFIFO:
	case S_IFSOCK:
		break;
	default:
		return -EINVAL;
	}
	return create_obj(cx, ex, dir, name, &nb, EXIST_FAIL, NULL, out);
}

/* Step 7 of a change whose table write kept intent SEQ of name NM (node.c
 * invariant 15), which goes once the change is durable. */
static int change_durable(struct un_export *ex, struct un_change *ch, struct un_obj *a,
			  struct un_obj *b, const struct un_node_name *nm, uint64_t seq)
{
	int err = un_sync_change(ex, ch, a, b);

	if (!err)
		un_node_intent_done(ex->st, nm, seq);
	return err;
}

/* ---- removing ---- */

/* What the node table wrote ahead of a change (an intent, a record moved
 * off a name) on stable storage before the upper changes (node.c
 * invariant 14), unless the call is async. */
static int table_durable(struct un_export *ex, const struct un_change *ch)
{
	return ch->cx->async ? 0 : un_state_sync(ex->st);
}

/* Removes C, the non-directory NAME of DIR (whose upper instance exists). */
static int remove_nondir(struct un_export *ex, struct un_change *ch, struct un_obj *dir,
			 struct un_obj *c, const char *name, size_t len)
{
	int udir = dir->inst[0].fd, lower, err;
	struct un_creds saved;

	ns_assert_locked(ex, dir, NULL);
	lower = un_lower_has(ex, dir, name, len);
	if (lower < 0)
		return lower;
	if (!lower && un_obj_upper(ex, c))
		return un_sys_unlinkat(udir, name, 0); /* only in the upper */
	err = may_change(dir, c);
	if (err)
		return err;
	un_sys_creds_override(&saved);
	err = whiteout_put_any(ex, ch, udir, name, un_obj_upper(ex, c));
	un_sys_creds_revert(&saved);
	return err;
}

/* Removes the non-directory NAME of upper-only DIR (upper_only: its upper
 * instance alone decides, invariant 6), as remove_nondir would: nothing
 * below can show through, and the entry is in the upper.  1 when the
 * merged way must decide (NAME could not be read: the lookup gives its own
 * answer). */
static int remove_fast(struct un_export *ex, struct un_obj *dir, const char *name)
{
	int udir = dir->inst[0].fd, kind;

	ns_assert_locked(ex, dir, name);
	kind = upper_probe(udir, name);
	switch (kind) {
	case UP_ABSENT:
	case UP_WHITEOUT:
		return -ENOENT;
	case UP_DIR:
		return -EISDIR;
	case UP_OTHER:
		return un_sys_unlinkat(udir, name, 0);
	default:
		return 1;
	}
}

/* un_remove's decision in the merged view, and the removal. */
static int remove_merged(struct un_export *ex, struct un_change *ch, struct un_obj *dir,
			 const char *name, size_t len)
{
	struct un_obj *c = NULL;
	int err = un_lookup(ex, dir, name, &c);

	if (!err && S_ISDIR(c->type))
		err = -EISDIR;
	if (!err)
		err = un_copyup(ex, NULL, dir); /* a directory: no note */
	if (!err)
		err = remove_nondir(ex, ch, dir, c, name, len);
	un_obj_put(c);
	return err;
}

int un_remove(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	      const char *name)
{
	struct un_node_name nm = {dir->id, name, 0};
	struct un_change ch = UN_CHANGE(cx);
	struct un_node_job job;
	struct nslocks l;
	int err;

	err = dir_args_check(ex, dir, name, &nm.len);
	if (!err) /* no lock needed: the record moves to a name of its own */
		err = un_node_remove_ahead(ex->st, ex->root_id, &nm, true);
	if (err == 1)
		err = table_durable(ex, &ch);
	if (err)
		return err;
	err = 1;
	if (upper_only(ex, dir, name)) {
		ns_lock_name(ex, &l, dir->id, name);
		err = remove_fast(ex, dir, name);
		if (err == 1)
			ns_unlock(ex, &l); /* the merged way decides, exclusive */
	}
	if (err == 1) {
		ns_lock(ex, &l, &dir->id, 1);
		err = remove_merged(ex, &ch, dir, name, nm.len);
	}
	/* Queued in the order of the removal, committed after the lock
	 * (node.c, the writer), by the run of the syncs (un_sync_queued). */
	if (!err)
		un_node_remove_queue(ex->st, ex->root_id, &nm, &job);
	ns_unlock(ex, &l);
	if (!err)
		err = un_sync_queued(ex, &ch, false, dir, NULL, &job);
	if (!err) /* durable: the intent goes (change_durable) */
		un_node_intent_done(ex->st, &nm, job.seq);
	return err;
}

/* Moves upper dir NAME of UDIR into the work dir and removes it there with
 * the white-outs it holds (engine identity). */
static int rmdir_upper(struct un_export *ex, int udir, const char *name)
{
	char tmp[32];
	int err;

	un_work_tmpname(tmp);
	err = un_sys_renameat2(udir, name, ex->tmpfd, tmp, RENAME_NOREPLACE);
	if (!err)
		un_work_remove(ex->tmpfd, tmp, 2);
	return err;
}

/* Removes C, the directory NAME of DIR, empty in the merged view. */
static int remove_dir(struct un_export *ex, struct un_change *ch, struct un_obj *dir,
		      struct un_obj *c, const char *name, size_t len)
{
	int udir = dir->inst[0].fd, lower, err;
	bool upper = un_obj_upper(ex, c);
	struct un_creds saved;

	ns_assert_locked(ex, dir, NULL);
	lower = un_lower_has(ex, dir, name, len);
	if (lower < 0)
		return lower;
	if (!lower && upper) {
		err = un_sys_unlinkat(udir, name, AT_REMOVEDIR);
		if (err != -ENOTEMPTY && err != -EEXIST)
			return err; /* else it holds white-outs */
	}
	err = may_change(dir, c);
	if (err)
		return err;
	un_sys_creds_override(&saved);
	if (lower)
		err = whiteout_put_any(ex, ch, udir, name, upper);
	else
		err = rmdir_upper(ex, udir, name);
	un_sys_creds_revert(&saved);
	return err;
}

int un_rmdir(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	     const char *name)
{
	struct un_change ch = UN_CHANGE(cx);
	struct un_obj *c = NULL;
	struct nslocks l;
	un_id ids[2] = {dir->id};
	uint64_t seq = 0;
	size_t len;
	int err;

	err = dir_args_check(ex, dir, name, &len);
	if (!err && is_dots(name))
		err = name[1] ? -ENOTEMPTY : -EINVAL; /* as rmdir(2) */
	if (err)
		return err;
	err = lock_with(ex, &l, ids, 1, dir, name, &c);
	if (err)
		return err;
	err = !c ? -ENOENT : !S_ISDIR(c->type) ? -ENOTDIR : 0;
	if (!err)
		err = dir_empty(ex, c);
	if (!err)
		err = un_copyup(ex, NULL, dir); /* a directory: no note */
	if (!err)
		err = remove_dir(ex, &ch, dir, c, name, len);
	if (!err)
		err = un_node_remove(ex->st, ex->root_id,
				     &(struct un_node_name){dir->id, name, len}, &seq);
	ns_unlock(ex, &l);
	un_obj_put(c);
	return err ? err
		   : change_durable(ex, &ch, dir, NULL,
				    &(struct un_node_name){dir->id, name, len}, seq);
}

/* ---- renaming ---- */

struct rn {
	struct un_export *ex;
	struct un_change ch;
	struct un_obj *fdir, *tdir, *src, *dst; /* dst NULL: nothing there */
	const char *fname, *tname;
	size_t flen, tlen;
	struct un_node_job job; /* the table's move, waited for after the locks */
	bool queued;
	un_id intent;	/* the node the rename's intent is for (UN_ID_NONE: none) */
	uint64_t seq;	/* its number */
	bool attempted; /* the upper was asked to change: the intent stays */
};

/* The checks of rename(2) on overlayfs, in its order: 1 for a rename of an
 * object onto itself (nothing to do), 0 to go on, or -errno. */
static int rename_check(struct rn *r)
{
	bool sdir = S_ISDIR(r->src->type), ddir = r->dst && S_ISDIR(r->dst->type);
	int err;

	/* One inode under both names, as rename(2) sees it: the same name, or
	 * a node shared by two upper links.  Two lower links are two inodes
	 * to overlayfs (without its index): that rename goes on, copying up. */
	if (r->dst && r->dst->id == r->src->id &&
	    ((r->fdir->id == r->tdir->id && r->flen == r->tlen &&
	      !memcmp(r->fname, r->tname, r->flen)) ||
	     (un_obj_upper(r->ex, r->src) && un_obj_upper(r->ex, r->dst))))
		return 1;
	if (sdir) { /* not into itself */
		err = is_ancestor(r->ex, r->src->id, r->tdir->id);
		if (err)
			return err < 0 ? err : -EINVAL;
	}
	if (ddir) { /* not over an ancestor of the source */
		err = is_ancestor(r->ex, r->dst->id, r->fdir->id);
		if (err)
			return err < 0 ? err : -ENOTEMPTY;
	}
	if (r->dst && sdir && !ddir)
		return -ENOTDIR;
	if (r->dst && !sdir && ddir)
		return -EISDIR;
	if (sdir && has_lower(r->ex, r->src))
		return -EXDEV; /* invariant 3 */
	/* A pure upper target is left to the upper's rename (rename_do), as
	 * overlayfs leaves it: what goes before that rename happens first. */
	return ddir && !pure_upper(r->ex, r->dst) ? dir_empty(r->ex, r->dst) : 0;
}

/* The rename in the upper; where RENAME_WHITEOUT is not to be had, a plain
 * rename and then a white-out (invariant 1's exception). */
static int rename_move(struct rn *r, unsigned flags)
{
	int fu = r->fdir->inst[0].fd, tu = r->tdir->inst[0].fd, err = -EINVAL;

	if (!(flags & RENAME_WHITEOUT) || !atomic_load(&r->ex->wh_xattr))
		err = un_sys_renameat2(fu, r->fname, tu, r->tname, flags);
	if (!err && (flags & RENAME_WHITEOUT))
		r->ch.fs = true; /* a new white-out: step 7 */
	if (!(flags & RENAME_WHITEOUT) ||
	    (err != -EINVAL && err != -EPERM && err != -EOPNOTSUPP))
		return err;
	err = un_sys_renameat2(fu, r->fname, tu, r->tname, flags & ~RENAME_WHITEOUT);
	return err ? err : whiteout_put(r->ex, &r->ch, fu, r->fname, false);
}

/* The flags of the upper rename for a target of kind TK, as overlayfs picks
 * them; *cleanup: a white-out lands on the source name and must go. */
static unsigned rename_flags(bool slower, bool sdir, int tk, bool *cleanup)
{
	*cleanup = false;
	if (tk == UP_WHITEOUT) {
		if (slower) /* the white-out moves to the source */
			return RENAME_EXCHANGE;
		*cleanup = sdir; /* a directory cannot replace a device */
		return sdir ? RENAME_EXCHANGE : 0;
	}
	return (slower ? RENAME_WHITEOUT : 0) | (tk == UP_ABSENT ? RENAME_NOREPLACE : 0);
}

/* Makes the moving directory opaque when it lands in a merged parent
 * (invariant 2), unless it is. */
static int rename_opaque(struct rn *r)
{
	int fd = r->src->inst[0].fd, op;

	if (!S_ISDIR(r->src->type) || r->tdir->ninst < 2)
		return 0;
	op = un_dir_opaque(fd, -1, r->fname, r->flen, false);
	return op < 0 ? op : op ? 0 : set_opaque(r->ex, fd);
}

/* After the upper's rename said -ENOTEMPTY, of target kind TK: 1 if the
 * target is empty in the merged view all the same (it holds white-outs),
 * 0 if it is not, or -errno.  rename_check found the target empty unless
 * it is pure upper. */
static int target_whiteouts_only(struct rn *r, int tk)
{
	int err;

	if (tk != UP_DIR)
		return 0;
	if (!r->dst || !pure_upper(r->ex, r->dst))
		return 1;
	err = dir_empty(r->ex, r->dst);
	return err == -ENOTEMPTY ? 0 : err < 0 ? err : 1;
}

/* Moves what the checks allowed (both parents and the source in the upper);
 * TK: what the target's upper holds, SLOWER: the source name is below too. */
static int rename_do(struct rn *r, int tk, bool slower)
{
	int fu = r->fdir->inst[0].fd, tu = r->tdir->inst[0].fd, err;
	bool cleanup;
	unsigned flags = rename_flags(slower, S_ISDIR(r->src->type), tk, &cleanup);

	if (slower && atomic_load(&r->ex->wh_xattr) && (flags & RENAME_EXCHANGE))
		err = mark_xwhiteouts(r->ex, fu);
	else
		err = 0;
	if (!err)
		err = rename_opaque(r);
	if (!err)
		err = rename_move(r, flags);
	if (err == -ENOTEMPTY) {
		err = target_whiteouts_only(r, tk);
		if (err == 1)
			err = clear_dir(r->ex, tu, r->tname);
		else if (!err)
			err = -ENOTEMPTY;
		if (!err)
			err = rename_move(r, flags);
	}
	if (!err && cleanup)
		err = un_sys_unlinkat(fu, r->fname, 0);
	return err;
}

/* Copies up what the rename needs and runs it; engine identity where the
 * step needs it (invariant 4). */
static int rename_upper(struct rn *r)
{
	struct un_creds saved;
	bool engine;
	int tk, slower, err;

	ns_assert_locked(r->ex, r->fdir, NULL);
	ns_assert_locked(r->ex, r->tdir, NULL);
	if (r->fdir->id != r->tdir->id)
		un_assert_locked(&r->ex->rename_lock);
	err = un_copyup(r->ex, NULL, r->fdir);
	if (!err)
		err = un_copyup(r->ex, NULL, r->tdir);
	if (!err)
		err = un_copyup(r->ex, &r->ch, r->src);
	if (err)
		return err;
	slower = un_lower_has(r->ex, r->fdir, r->fname, r->flen);
	tk = upper_kind(r->tdir->inst[0].fd, r->tname);
	if (slower < 0 || tk < 0)
		return slower < 0 ? slower : tk;
	engine = slower || tk == UP_WHITEOUT || tk == UP_DIR ||
		 (S_ISDIR(r->src->type) && r->tdir->ninst > 1);
	if (!engine)
		return rename_do(r, tk, false);
	err = may_change(r->fdir, r->src);
	if (!err)
		err = may_change(r->tdir, r->dst);
	if (err)
		return err;
	un_sys_creds_override(&saved);
	err = rename_do(r, tk, slower);
	un_sys_creds_revert(&saved);
	return err;
}

/* The names of R's rename, as the table knows them. */
static void rename_names(const struct rn *r, struct un_node_name *from,
			 struct un_node_name *to)
{
	*from = (struct un_node_name){r->fdir->id, r->fname, r->flen};
	*to = (struct un_node_name){r->tdir->id, r->tname, r->tlen};
}

/* Writes the intent of R's rename for node ID (node.c invariant 14),
 * replacing one for another node, durable before the upper changes. */
static int rename_intent(struct rn *r, un_id id)
{
	struct un_node_name from, to;
	int err;

	rename_names(r, &from, &to);
	if (r->intent != UN_ID_NONE)
		un_node_intent_del(r->ex->st, &to, r->ex->st->run, r->seq);
	r->intent = UN_ID_NONE;
	err = un_node_intent(r->ex->st, UN_INTENT_RENAME, r->ex->root_id, id, &from, &to,
			     &r->seq);
	if (!err)
		err = table_durable(r->ex, &r->ch);
	if (!err)
		r->intent = id;
	return err;
}

/* The intent for the object the source name holds now, written before the
 * locks: renames in one directory then share its commit instead of each
 * waiting for one under the directories' lock (rename_run writes another
 * if the source changed meanwhile).  Best effort: a lookup that fails here
 * fails again under the locks. */
static void rename_intent_early(struct rn *r)
{
	struct un_obj *o = NULL;

	if (!un_lookup(r->ex, r->fdir, r->fname, &o))
		rename_intent(r, o->id);
	un_obj_put(o);
}

/* The intent of a rename that never reached the upper goes.  One that
 * failed there may have changed it (a rename, then a white-out that
 * failed): its intent stays for the next lookup or start to settle (a
 * leftover is harmless: node.c invariant 14). */
static void rename_intent_drop(struct rn *r)
{
	struct un_node_name from, to;

	if (r->intent == UN_ID_NONE || r->queued || r->attempted)
		return;
	rename_names(r, &from, &to);
	un_node_intent_del(r->ex->st, &to, r->ex->st->run, r->seq);
}

/* The checked rename: its intent on disk, the upper's change, then the
 * table's move, queued (step 6) and waited for after the locks. */
static int rename_run(struct rn *r)
{
	struct un_node_name from, to;
	int err;

	rename_names(r, &from, &to);
	/* A target with another name keeps a record that names a live one. */
	err = r->dst ? un_node_remove_ahead(r->ex->st, r->ex->root_id, &to, false) : 0;
	if (err == 1)
		err = table_durable(r->ex, &r->ch);
	if (!err && r->intent != r->src->id)
		err = rename_intent(r, r->src->id);
	r->attempted = !err;
	if (!err)
		err = rename_upper(r);
	if (err)
		return err;
	un_node_rename_queue(r->ex->st, r->src->id, &from, &to, &r->job);
	r->queued = true;
	return 0;
}

/* Locks both parents (and the rename lock across directories) and what
 * the target name holds (R->dst). */
static int rename_lock(struct rn *r, struct nslocks *l)
{
	un_id ids[3] = {r->fdir->id, r->tdir->id};
	int err;

	l->rename = r->fdir->id != r->tdir->id;
	if (l->rename)
		pthread_mutex_lock(&r->ex->rename_lock);
	err = lock_with(r->ex, l, ids, 2, r->tdir, r->tname, &r->dst);
	if (err && l->rename)
		pthread_mutex_unlock(&r->ex->rename_lock);
	return err;
}

static void rename_unlock(struct rn *r, struct nslocks *l)
{
	ns_unlock(r->ex, l);
	if (l->rename)
		pthread_mutex_unlock(&r->ex->rename_lock);
}

int un_rename(const struct un_ctx *cx, struct un_export *ex, struct un_obj *fromdir,
	      const char *fromname, struct un_obj *todir, const char *toname)
{
	struct rn r = {.ex = ex,
		       .ch = UN_CHANGE(cx),
		       .fdir = fromdir,
		       .tdir = todir,
		       .fname = fromname,
		       .tname = toname,
		       .intent = UN_ID_NONE};
	struct nslocks l;
	int err;

	err = args_check(ex, fromname, &r.flen);
	if (!err)
		err = args_check(ex, toname, &r.tlen);
	if (!err && (!S_ISDIR(fromdir->type) || !S_ISDIR(todir->type)))
		err = -ENOTDIR;
	if (!err && (is_dots(fromname) || is_dots(toname)))
		err = -EINVAL;
	if (!err)
		rename_intent_early(&r);
	if (!err)
		err = rename_lock(&r, &l);
	if (!err) {
		err = un_lookup(ex, fromdir, fromname, &r.src);
		if (!err)
			err = rename_check(&r);
		if (!err)
			err = rename_run(&r);
		rename_unlock(&r, &l);
	}
	if (r.queued)
		err = un_node_job_wait(ex->st, &r.job);
	rename_intent_drop(&r);
	un_obj_put(r.src);
	un_obj_put(r.dst);
	if (!err && r.queued)
		err = change_durable(ex, &r.ch, fromdir, todir,
				     &(struct un_node_name){todir->id, toname, r.tlen},
				     r.seq);
	else if (!err) /* 1: a rename onto itself changed nothing */
		err = un_sync_change(ex, &r.ch, fromdir, todir);
	return err < 0 ? err : 0;
}

/* ---- linking ---- */

/* Makes NB (the link to O) at NM of DIR, the upper's change, then the
 * table's write, queued in JOB (step 6).  Once it runs, the link's intent
 * stays whatever it answers: the upper may have changed. */
static int link_run(struct un_export *ex, struct un_obj *o, struct un_obj *dir,
		    const struct un_node_name *nm, struct newobj *nb,
		    struct un_node_job *job)
{
	struct stat st;
	int err;

	err = create_in(ex, dir, nm->name, nb);
	if (!err)
		err = un_sys_fstat(o->inst[0].fd, &st);
	if (!err)
		un_node_link_queue(ex->st, ex->root_id, o->id, nm,
				   (struct un_devino){.dev = st.st_dev, .ino = st.st_ino},
				   job);
	return err;
}

int un_link(const struct un_ctx *cx, struct un_export *ex, struct un_obj *o,
	    struct un_obj *dir, const char *name)
{
	struct newobj nb = {.mode = o->type};
	struct un_change ch = UN_CHANGE(cx);
	struct un_node_job job = {0};
	struct un_obj *c = NULL;
	struct nslocks l;
	uint64_t seq = 0;
	bool attempted;
	size_t len;
	int err;

	err = dir_args_check(ex, dir, name, &len);
	/* The intent on disk before the link (node.c invariant 14), written
	 * before the lock, so that links in one directory share its commit. */
	if (!err)
		err = un_node_intent(ex->st, UN_INTENT_LINK, ex->root_id, o->id, NULL,
				     &(struct un_node_name){dir->id, name, len}, &seq);
	if (!err)
		err = table_durable(ex, &ch);
	if (err)
		return err;
	ns_lock(ex, &l, &dir->id, 1);
	err = lookup_opt(ex, dir, name, &c);
	if (!err && c)
		err = -EEXIST;
	if (!err && S_ISDIR(o->type))
		err = -EPERM; /* as link(2), after the new name's checks */
	if (!err)
		err = un_copyup(ex, &ch, o);
	if (!err)
		err = un_copyup(ex, NULL, dir); /* a directory: no note */
	nb.linkfd = o->inst[0].fd;
	attempted = !err;
	if (!err)
		err = link_run(ex, o, dir, &(struct un_node_name){dir->id, name, len},
			       &nb, &job);
	ns_unlock(ex, &l);
	if (job.fn)
		err = un_node_job_wait(ex->st, &job);
	else if (!attempted) /* no link: its intent goes (a leftover is harmless) */
		un_node_intent_del(ex->st, &(struct un_node_name){dir->id, name, len},
				   ex->st->run, seq);
	un_obj_put(c);
	/* The link count before the entry that adds to it (step 7). */
	return err ? err
		   : change_durable(ex, &ch, o, dir,
				    &(struct un_node_name){dir->id, name, len}, seq);
}
