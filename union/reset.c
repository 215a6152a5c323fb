/* SPDX-License-Identifier: Apache-2.0 */
/* reset.c - an upper layer discarded while the union is served, and one
 * that vanished behind the engine's back.
 *
 * A reset (the server's `reset CLIENT`) empties a client's upper layer so
 * that its union shows the lowers again.  Its nodes must follow: a handle
 * of an object the client made must be stale, also once the new upper
 * holds a new object under that name or a reused inode number (node.c,
 * known limits: identity in the upper is its raw (dev, ino)).  So before
 * the layer is emptied, un_export_forget_upper walks it and forgets the
 * node of every object the upper made itself (un_node_forget_upper); a
 * copied-up object's node keeps its origin and finds the lower object
 * again, as does every node of a lower object.
 *
 * Rules:
 *  1. The walk reads the upper by descriptors, never following a symlink
 *     and never leaving the upper's filesystem; it descends only into
 *     directories the table knows (a name without a node has no node
 *     below it either).
 *  2. A directory of the upper that merges a lower one (not opaque, a
 *     directory below it) is no object of the upper's own: a node first
 *     seen with both parts keeps its id, with the lower part as its origin
 *     (lower_dirs), so that it finds the lower directory after the reset.
 *     All forgetting is one write transaction, after the walk: one commit
 *     whatever the size of the upper.
 *  3. A vanished upper or work dir (rm -rf while serving) is seen by the
 *     link count of the descriptors the export holds: a removed directory
 *     keeps no link.  It is sticky: the export takes no more changes, and
 *     the caller decides to reopen it over new dirs or to refuse.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "un_private.h"

#define WALK_DEPTH_MAX 512 /* deeper dirs keep their nodes: stale by path */

/* The objects a walk found, with their names, in one growing array. */
struct upper_walk {
	struct un_state *st;
	dev_t dev; /* the upper's filesystem (rule 1) */
	size_t nlower;
	struct un_node_upper *up;
	size_t n, cap;
};

static void walk_free(struct upper_walk *w)
{
	for (size_t i = 0; i < w->n; i++)
		free((char *)w->up[i].name);
	free(w->up);
}

static int walk_add(struct upper_walk *w, un_id parent, const char *name,
		    const struct stat *st, struct un_devino lower)
{
	struct un_node_upper *up;
	size_t cap;
	char *copy;

	if (w->n == w->cap) {
		cap = w->cap ? 2 * w->cap : 256;
		up = realloc(w->up, cap * sizeof(*up));
		if (!up)
			return -ENOMEM;
		w->up = up;
		w->cap = cap;
	}
	copy = strdup(name);
	if (!copy)
		return -ENOMEM;
	w->up[w->n++] = (struct un_node_upper){
	    .parent = parent,
	    .name = copy,
	    .len = strlen(name),
	    .raw = {.dev = st->st_dev, .ino = st->st_ino},
	    .lower = lower,
	};
	return 0;
}

static void fds_close(int *fds, size_t n)
{
	for (size_t k = 0; fds && k < n; k++)
		un_sys_close(fds[k]);
	free(fds);
}

/* The lower dirs that upper dir NAME merges (unless it is OPAQUE): into
 * *OUT one descriptor per lower layer (-1: none there), the first one's
 * raw (dev, ino) into *FIRST.  A lower object that is no directory hides
 * the layers below it (rule 2). */
static int lower_dirs(const struct upper_walk *w, const int *lower, const char *name,
		      bool opaque, int **out, struct un_devino *first)
{
	struct stat st;
	bool hidden = opaque;
	int *fds = malloc(w->nlower * sizeof(*fds) + 1);

	*out = fds;
	if (!fds)
		return -ENOMEM;
	for (size_t k = 0; k < w->nlower; k++) {
		fds[k] = -1;
		if (hidden || lower[k] < 0 ||
		    un_sys_fstatat(lower[k], name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		hidden = !S_ISDIR(st.st_mode);
		if (hidden)
			continue;
		if (!first->dev && !first->ino)
			*first = (struct un_devino){.dev = st.st_dev, .ino = st.st_ino};
		fds[k] =
		    un_sys_openat(lower[k], name, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0);
	}
	return 0;
}

static int walk_dir(struct upper_walk *w, int dirfd, un_id id, const int *lower,
		    unsigned depth);

/* Records NAME of DIRFD (node ID; LOWER: the lower dirs it merges) and
 * walks it when it is a directory the table knows (rule 1). */
static int walk_entry(struct upper_walk *w, int dirfd, un_id id, const int *lower,
		      const char *name, unsigned depth)
{
	struct un_node_name nm = {id, name, strlen(name)};
	struct un_devino first = {0, 0};
	int fd = -1, *sub = NULL, err;
	struct stat st;
	un_id child;

	if (un_sys_fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0; /* gone meanwhile: nothing to forget by its inode */
	if (S_ISDIR(st.st_mode) && st.st_dev == w->dev && depth < WALK_DEPTH_MAX)
		fd = un_sys_openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
	err = fd < 0 ? 0
		     : lower_dirs(w, lower, name, un_dir_opaque_own(fd, false) == 1, &sub,
				  &first);
	if (!err)
		err = walk_add(w, id, name, &st, first);
	if (!err && fd >= 0 && un_node_name_id(w->st, &nm, &child) == 0) {
		err = walk_dir(w, fd, child, sub, depth + 1);
		fd = -1; /* the walk's */
	}
	un_sys_close(fd);
	fds_close(sub, w->nlower);
	return err;
}

/* Walks directory FD (node ID; the walk owns FD). */
static int walk_dir(struct upper_walk *w, int fd, un_id id, const int *lower,
		    unsigned depth)
{
	DIR *d = fdopendir(fd);
	struct dirent *de;
	int err = 0;

	if (!d) {
		un_sys_close(fd);
		return -errno;
	}
	while (!err && (de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			err = walk_entry(w, dirfd(d), id, lower, de->d_name, depth);
	closedir(d);
	return err;
}

int un_export_forget_upper(struct un_export *ex, size_t *forgot)
{
	struct upper_walk w = {.st = ex->st};
	int *lower = NULL, fd, err;
	struct stat st;

	*forgot = 0;
	if (ex->workfd < 0)
		return 0; /* read-only: nothing of its own */
	w.nlower = ex->nlayers - 1;
	lower = malloc(w.nlower * sizeof(*lower) + 1);
	if (!lower)
		return -ENOMEM;
	for (size_t k = 0; k < w.nlower; k++)
		lower[k] = ex->layers[k + 1].fd;
	fd = un_sys_openat(ex->layers[0].fd, ".", O_RDONLY | O_DIRECTORY, 0);
	err = fd < 0 ? fd : un_sys_fstat(fd, &st);
	if (err) {
		un_sys_close(fd);
		free(lower);
		return err;
	}
	w.dev = st.st_dev;
	err = walk_dir(&w, fd, ex->root_id, lower, 0);
	if (!err)
		err = un_node_forget_upper(ex->st, w.up, w.n, forgot);
	walk_free(&w);
	free(lower);
	return err;
}

/* True when the directory of FD has no link left. */
static bool dir_unlinked(int fd)
{
	struct stat st;

	return fd >= 0 && un_sys_fstat(fd, &st) == 0 && st.st_nlink == 0;
}

bool un_export_vanished(struct un_export *ex)
{
	if (ex->workfd < 0)
		return false;
	if (atomic_load(&ex->gone))
		return true;
	if (!dir_unlinked(ex->layers[0].fd) && !dir_unlinked(ex->tmpfd))
		return false;
	atomic_store(&ex->gone, true);
	return true;
}
