/* SPDX-License-Identifier: Apache-2.0 */
/* lxcache.c - the open layer indexes of a server: one open index
 * (lindex.c) per index file and layer root, shared by every export of
 * every node table (layerid.c rule 4, state.c rule 5) and by the layers a
 * reload retired (retire.c).
 *
 * Rules:
 *  1. The list (st->sh->lx_open) changes only under st->sh->lx_lock; the
 *     functions whose comment says so run with it held (asserted), so
 *     that layerid.c can find, build and add an index in one hold.
 *     un_lxc_get and un_lxc_put take it themselves.
 *  2. Every user holds a reference (un_lxc_find, un_lxc_add, un_lxc_get);
 *     the index is closed with the last one (un_lxc_put).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lindex.h"
#include "un_private.h"

/* One open index, shared. */
struct un_lxc {
	char *file;
	uint64_t root_ino;
	struct un_lx *lx;
	unsigned refs; /* under lx_lock */
	struct un_lxc *next;
};

struct un_lxc *un_lxc_find(struct un_state *st, const char *file, uint64_t root_ino)
{
	un_assert_locked(&st->sh->lx_lock);
	for (struct un_lxc *c = st->sh->lx_open; c; c = c->next) {
		if (c->root_ino == root_ino && !strcmp(c->file, file)) {
			c->refs++;
			return c;
		}
	}
	return NULL;
}

struct un_lx *un_lxc_file(struct un_state *st, const char *file)
{
	un_assert_locked(&st->sh->lx_lock);
	for (struct un_lxc *c = st->sh->lx_open; c; c = c->next)
		if (!strcmp(c->file, file))
			return c->lx;
	return NULL;
}

int un_lxc_add(struct un_state *st, const char *file, struct un_lx *lx,
	       struct un_lxc **out)
{
	struct un_lxc *c = un_sys_calloc(1, sizeof(*c));
	struct un_lx_info info;

	un_assert_locked(&st->sh->lx_lock);
	if (!c || !(c->file = un_sys_strdup(file))) {
		free(c);
		un_lx_close(lx);
		return -ENOMEM;
	}
	un_lx_info(lx, &info);
	c->root_ino = info.root_ino;
	c->lx = lx;
	c->refs = 1;
	c->next = st->sh->lx_open;
	st->sh->lx_open = c;
	*out = c;
	return 0;
}

int un_lxc_get(struct un_state *st, const char *file, uint64_t root_ino,
	       struct un_lxc **out)
{
	struct un_lx *lx = NULL;
	struct un_lx_info info;
	int rc = 0;

	pthread_mutex_lock(&st->sh->lx_lock);
	*out = un_lxc_find(st, file, root_ino);
	if (*out)
		goto out;
	rc = un_lx_open(file, &lx);
	if (rc)
		goto out;
	un_lx_info(lx, &info);
	if (info.root_ino != root_ino) {
		un_lx_close(lx);
		rc = -ESTALE;
		goto out;
	}
	rc = un_lxc_add(st, file, lx, out);
out:
	pthread_mutex_unlock(&st->sh->lx_lock);
	return rc;
}

void un_lxc_put(struct un_state *st, struct un_lxc *c)
{
	struct un_lxc **p;

	pthread_mutex_lock(&st->sh->lx_lock);
	if (--c->refs == 0) {
		for (p = &st->sh->lx_open; *p != c; p = &(*p)->next)
			;
		*p = c->next;
		un_lx_close(c->lx);
		free(c->file);
		free(c);
	}
	pthread_mutex_unlock(&st->sh->lx_lock);
}

struct un_lx *un_lxc_lx(const struct un_lxc *c)
{
	return c->lx;
}
