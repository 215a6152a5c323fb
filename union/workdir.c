/* SPDX-License-Identifier: Apache-2.0 */
/* workdir.c - the work dir: WORKDIR/work, where copy-ups (copyup.c) and
 * the changes of names (dir.c) make their temps before a rename shows them.
 *
 * The work dir is laid out as kernel overlayfs lays it out, and it lives
 * beside the layer code that opens it (layer.c, as overlayfs'
 * ovl_make_workdir lives in its super.c), below both that code and the
 * code that writes into it, so that neither has to call the other.
 *
 * Rules:
 *  1. The work dir is emptied when an export opens its upper (un_work_open),
 *     as kernel overlayfs empties it when it mounts: what is there was left
 *     by a crash, temps that no name in the tree shows.  A successor of a
 *     reload takes the work dir over instead, without emptying it (layer.c
 *     rule 4).
 *  2. A temp's name is "#un-" and 64 random bits (un_work_tmpname), so the
 *     temps that threads make at the same time do not collide.
 *  3. One server at a time writes an upper (docs/gateways.md, part 2): the
 *     open takes an OFD write lock on WORKDIR/union-nfsd.lock before it
 *     empties anything (work_lock) and the export holds it while open (a
 *     successor of a reload shares it, layer.c rule 4).  The lock goes
 *     with its holder's death; a dir on NFS, CephFS or GFS2 locks across
 *     hosts.  A server that finds it held answers -EAGAIN, touches nothing
 *     and names the holder, whose pid and host the file holds, in ERR.
 *  4. A union given own_table keeps its nodes in a table of its own,
 *     WORKDIR/union-nfsd.state (un_work_table_open), which moves with the
 *     dirs to the next server: rule 1 empties only WORKDIR/work and rule 3
 *     locks only WORKDIR/union-nfsd.lock, so both leave it alone, and it
 *     is opened only once the lock is held (the lock is what lets one
 *     server at a time write it; state.c rule 8) and closed before the
 *     lock goes (un_export_close).  A work dir that holds one is always
 *     opened on it; one that does not gets one only when the main table
 *     has no root for the union's export id: a union served before from
 *     the main table (a server that was given a key file since) keeps
 *     its nodes there, as its clients' handles name those ids.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "un_private.h"

#define WORK_NAME	 "work"
#define HOLDER_MAX	 (HOST_NAME_MAX + 48)
#define WORK_CLEAN_DEPTH 8
#define DENTS_BUF	 (16u << 10)

void un_work_tmpname(char buf[32])
{
	uint8_t r[8];

	randombytes_buf(r, sizeof(r));
	snprintf(buf, 32, "#un-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3],
		 r[4], r[5], r[6], r[7]);
}

static bool dot_or_dotdot(const char *n)
{
	return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

/* Removes every entry of directory DIRFD/NAME (DEPTH levels down). */
static int work_empty(int dirfd, const char *name, int depth)
{
	struct dirent64 *d;
	char *buf;
	ssize_t n;
	int fd, err = -ENOMEM;

	buf = un_sys_malloc(DENTS_BUF);
	if (!buf)
		return err;
	err = fd = un_sys_open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		goto out;
	while ((n = un_sys_getdents(fd, buf, DENTS_BUF)) > 0) {
		for (ssize_t off = 0; off < n; off += d->d_reclen) {
			d = (struct dirent64 *)(buf + off);
			if (!dot_or_dotdot(d->d_name))
				un_work_remove(fd, d->d_name, depth);
		}
	}
	err = n < 0 ? (int)n : 0;
	un_sys_close(fd);
out:
	free(buf);
	return err;
}

int un_work_remove(int dirfd, const char *name, int depth)
{
	int err = un_sys_unlinkat(dirfd, name, 0);

	if (err != -EISDIR && err != -EPERM)
		return err;
	if (depth > 0)
		work_empty(dirfd, name, depth - 1);
	return un_sys_unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* Rule 3: writes who holds the lock into its file FD, for the next one. */
static int holder_write(int fd)
{
	char who[HOLDER_MAX], host[HOST_NAME_MAX + 1] = "";
	int n;
	ssize_t w;

	gethostname(host, sizeof(host) - 1);
	n = snprintf(who, sizeof(who), "pid %ld host %s\n", (long)getpid(), host);
	w = un_sys_pwrite(fd, who, (size_t)n, 0);
	if (w < 0)
		return (int)w;
	return un_sys_ftruncate(fd, w);
}

/* Rule 3: who the lock file FD names, into WHO (a line, or "?"). */
static void holder_read(int fd, char who[HOLDER_MAX])
{
	ssize_t n = un_sys_pread(fd, who, HOLDER_MAX - 1, 0);

	who[n > 0 ? n : 0] = '\0';
	who[strcspn(who, "\n")] = '\0';
	if (!who[0])
		snprintf(who, HOLDER_MAX, "?");
}

/* Rule 3: EX's lock on its work dir, into ex->lockfd. */
static int work_lock(struct un_export *ex, const char *workdir, char *err, size_t errlen)
{
	char who[HOLDER_MAX];
	int fd, rc;

	fd = un_sys_openat(ex->workfd, UN_WORK_LOCK_NAME,
			   O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		rc = fd;
	else if ((rc = un_sys_ofd_trylock(fd)) == 0)
		rc = holder_write(fd);
	if (rc == -EAGAIN && err && errlen) {
		holder_read(fd, who);
		snprintf(err, errlen, "workdir %s: served by another server (%s)",
			 workdir, who);
	} else if (rc && err && errlen) {
		snprintf(err, errlen, "workdir %s/%s: %s", workdir, UN_WORK_LOCK_NAME,
			 strerror(-rc));
	}
	if (rc && fd >= 0)
		un_sys_close(fd);
	if (!rc)
		ex->lockfd = fd;
	return rc;
}

/* Rule 4: whether EX (its work dir locked, its id known) gets a table of
 * its own: 1 or 0, or -errno when the work dir cannot say. */
static int table_wanted(const struct un_export *ex, const struct un_export_cfg *cfg,
			struct un_state *main)
{
	struct stat sb;
	int rc;

	rc = un_sys_fstatat(ex->workfd, UN_WORK_STATE_NAME, &sb, AT_SYMLINK_NOFOLLOW);
	if (rc != -ENOENT)
		return rc ? rc : 1;
	return cfg->own_table && !un_root_known(main, ex->id);
}

int un_work_table_open(struct un_export *ex, const struct un_export_cfg *cfg, char *err,
		       size_t errlen)
{
	struct un_state *main = ex->st->main ? ex->st->main : ex->st;
	char dir[PATH_MAX];
	int rc;

	rc = table_wanted(ex, cfg, main);
	if (rc == 0)
		return 0;
	if (rc > 0 && snprintf(dir, sizeof(dir), "%s/%s", cfg->workdir,
			       UN_WORK_STATE_NAME) >= (int)sizeof(dir))
		rc = -ENAMETOOLONG;
	if (rc > 0)
		rc = un_state_open_table(main, dir, &ex->table);
	if (rc) {
		if (err && errlen)
			snprintf(err, errlen, "workdir %s/%s: %s", cfg->workdir,
				 UN_WORK_STATE_NAME, strerror(-rc));
		return rc;
	}
	ex->st = ex->table;
	return 0;
}

int un_work_open(struct un_export *ex, const char *workdir, char *err, size_t errlen)
{
	int rc;

	rc = work_lock(ex, workdir, err, errlen);
	if (rc)
		return rc;
	rc = un_sys_mkdirat(ex->workfd, WORK_NAME, 0700);
	if (rc == -EEXIST)
		rc = 0;
	if (!rc)
		rc = ex->tmpfd =
		    un_sys_open_beneath(ex->workfd, WORK_NAME, O_PATH | O_DIRECTORY);
	if (rc >= 0) /* what a crash left: temps never named in the tree */
		rc = work_empty(ex->workfd, WORK_NAME, WORK_CLEAN_DEPTH);
	if (rc >= 0)
		rc = un_sync_probe_fs(ex);
	if (rc < 0 && err && errlen)
		snprintf(err, errlen, "workdir %s/%s: %s", workdir, WORK_NAME,
			 strerror(-rc));
	return rc < 0 ? rc : 0;
}
