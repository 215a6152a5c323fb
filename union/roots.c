/* SPDX-License-Identifier: Apache-2.0 */
/* roots.c - which node is an export's root, found by the export id
 * without a lookup in the node table.
 *
 * Layout under the state dir:
 *   roots/<export id, 8 hex digits>  a symlink whose target is the root's
 *                                    node id in hex
 *
 * Why links beside the table and not a key in it: with client unions, a
 * server opens an export for every client address it has ever served, and
 * an export id is a hash of a path.  An index keyed by it spreads its keys
 * over all its leaves, so under a churn of new clients every leaf of that
 * index is read again within the second, and what was read since the last
 * trim stays in the process's RSS (state.c rule 4): the server's memory
 * grew with every client it had ever seen.  A new root is named by its own
 * id (node.c, UN_ROOT_NAME_FMT), so its names key lands beside the last
 * root's; the link that finds it is a directory entry, which the kernel
 * caches and reclaims, not the process.
 *
 * Rules:
 *  1. A new root's node is committed and the table flushed, and only then
 *     its link made and the roots dir fsynced, all before the export
 *     serves (root_make): a link never names an id the table may lose
 *     (the table hands out an id again only if it lost it, node.c
 *     invariant 1), and a root a client was shown has its link for good.
 *     A crash in between leaves a root no link names: never used, a record.
 *     A link whose run crashed before that fsync may still be in the page
 *     cache only: each start fsyncs the roots dir (un_roots_open) before
 *     any export serves.
 *  2. A link whose node is not a root (a state dir restored in parts) is
 *     replaced by a new root's, atomically (link_replace).
 *  3. A table written before the links holds roots named "export:<id>":
 *     the first open of such a table links every one of them, fsyncs the
 *     dir and then marks the table (un_node_roots_mark), so that no later
 *     open looks such a name up; a crash before the mark links them again.
 *     A new table is marked when made.
 *  4. Two opens of one export at once (not done by the server, which opens
 *     a client union once): the one whose link loses takes the winner's
 *     root and leaves its own unnamed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "un_private.h"

#define ROOTS_DIR "roots"

static void link_name(char name[9], uint32_t export_id)
{
	snprintf(name, 9, "%08" PRIx32, export_id);
}

/* The root id link NAME names into *ID; -ENOENT when there is none, -EIO
 * when it holds anything but a hex id. */
static int link_read(const struct un_state *st, const char *name, un_id *id)
{
	char buf[24], *end;
	ssize_t n;

	n = un_sys_readlinkat(st->roots_fd, name, buf, sizeof(buf) - 1);
	if (n < 0)
		return (int)n;
	buf[n] = '\0';
	errno = 0;
	*id = strtoull(buf, &end, 16);
	return n && *end == '\0' && !errno && *id != UN_ID_NONE ? 0 : -EIO;
}

static int link_write(const struct un_state *st, const char *name, un_id id)
{
	char target[24];

	snprintf(target, sizeof(target), "%" PRIx64, id);
	return un_sys_symlinkat(target, st->roots_fd, name);
}

/* Rule 2: the link written beside and renamed over the old one. */
static int link_replace(const struct un_state *st, const char *name, un_id id)
{
	char tmp[16];
	int rc;

	snprintf(tmp, sizeof(tmp), "%s.new", name);
	rc = un_sys_unlinkat(st->roots_fd, tmp, 0);
	if (rc && rc != -ENOENT)
		return rc;
	rc = link_write(st, tmp, id);
	return rc ? rc : un_sys_renameat2(st->roots_fd, tmp, st->roots_fd, name, 0);
}

/* True when ID is a root's node: a directory whose parent is none. */
static int root_is(struct un_state *st, un_id id, bool *is)
{
	struct un_node_hop *hops = NULL;
	size_t n = 0;
	int rc;

	rc = un_node_path(st, id, &hops, &n);
	*is = !rc && n == 1 && hops[0].parent == UN_ID_NONE && S_ISDIR(hops[0].type);
	free(hops);
	return rc == -ESTALE || rc == -ENOENT ? 0 : rc;
}

/* Rule 1: a new root for link NAME (STALE: the link there names none). */
static int root_make(struct un_state *st, const char *name, bool stale,
		     const struct un_node_obs *obs, un_id prefer, un_id *out)
{
	bool is = false;
	un_id id = UN_ID_NONE;
	int rc;

	rc = un_node_root_create(st, obs, prefer, &id);
	if (!rc)
		rc = un_state_sync(st);
	if (rc)
		return rc;
	rc = stale ? link_replace(st, name, id) : link_write(st, name, id);
	if (rc == -EEXIST) { /* rule 4 */
		rc = link_read(st, name, &id);
		if (!rc)
			rc = root_is(st, id, &is);
		if (!rc && !is)
			rc = -EIO;
	}
	if (!rc)
		rc = un_sys_fsync(st->roots_fd);
	if (!rc)
		*out = id;
	return rc;
}

int un_root_get(struct un_state *st, uint32_t export_id, const struct un_node_obs *obs,
		un_id prefer, un_id *out)
{
	char name[9];
	bool is = false;
	un_id id = UN_ID_NONE;
	int rc;

	link_name(name, export_id);
	rc = link_read(st, name, &id);
	if (!rc)
		rc = root_is(st, id, &is);
	else if (rc == -ENOENT || rc == -EIO)
		return root_make(st, name, rc == -EIO, obs, prefer, out);
	if (rc)
		return rc;
	if (!is)
		return root_make(st, name, true, obs, prefer, out);
	*out = id;
	return 0;
}

bool un_root_known(const struct un_state *st, uint32_t export_id)
{
	char name[9];
	un_id id;

	link_name(name, export_id);
	return link_read(st, name, &id) != -ENOENT; /* a damaged link: known too */
}

/* Rule 3: one old root's link (kept when a crash left it made). */
static int link_legacy(void *arg, uint32_t export_id, un_id root)
{
	const struct un_state *st = arg;
	char name[9];
	int rc;

	link_name(name, export_id);
	rc = link_write(st, name, root);
	return rc == -EEXIST ? 0 : rc;
}

int un_roots_open(struct un_state *st)
{
	int dirfd, rc, made, marked = 0;

	dirfd = un_sys_openat(AT_FDCWD, st->dir, O_RDONLY | O_DIRECTORY, 0);
	if (dirfd < 0)
		return dirfd;
	made = rc = un_sys_mkdirat(dirfd, ROOTS_DIR, 0700);
	if (rc == -EEXIST)
		rc = 0;
	if (!rc)
		rc = un_sys_openat(dirfd, ROOTS_DIR, O_RDONLY | O_DIRECTORY, 0);
	if (rc >= 0) {
		st->roots_fd = rc;
		rc = made == 0 ? un_sys_fsync(dirfd) : 0; /* its name, when new */
	}
	un_sys_close(dirfd);
	if (!rc)
		rc = marked = un_node_roots_legacy(st, link_legacy, st);
	if (rc >= 0) /* rules 1 and 3: durable before anything serves, or the mark */
		rc = un_sys_fsync(st->roots_fd);
	if (!rc && !marked)
		rc = un_node_roots_mark(st);
	return rc;
}
