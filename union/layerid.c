/* SPDX-License-Identifier: Apache-2.0 */
/* layerid.c - the identity of lower objects: each lower layer's index
 * (lindex.c), found or built when an export opens, shared by the exports
 * of a state, and the key a lower instance is known by in the node table.
 *
 * Layout under the state dir:
 *   layers/<32 hex digits>.lx  the index of the layer whose real path hashes
 *                              to the name (index_file)
 *   layers/stack-<export id>   the export's lower stack as last opened,
 *                              bottom-up, a line "<index file>\t<path>" a
 *                              layer (stack_write; replaced atomically)
 *
 * Rules:
 *  1. Only lower layers have an index; the upper is written while served.
 *  2. A layer's index is the file named after its real path when that
 *     file's root inode number is the layer root's; another one (a layer
 *     replaced wholesale at the same path) is built again, inheriting from
 *     the file that was there (index_get).
 *  3. Inheritance by stack position (stack_pair): a layer whose path is in
 *     the export's recorded stack keeps its index; the paths new to the
 *     stack pair with the paths gone from it in order, bottom-up, the k-th
 *     new one with the k-th gone one, and each new one is built inheriting
 *     from the index of the one it replaces.  A new path without a partner
 *     is a fresh build (an added layer); a gone one without a partner is
 *     dropped.  A fresh build of a copy numbers it as the original anyway
 *     (lindex.c rule 3); inheritance is what keeps the numbers of the
 *     unchanged paths of a new version.
 *  4. Open indexes are shared by every export of the state (lxcache.c: a
 *     refcounted list keyed by file and root inode, under lx_lock): a
 *     thousand client unions over one image map its index once.  Builds
 *     run under lx_lock (layers_prepare), so two exports that need one
 *     index build it once.
 *  5. The stack record is written only once every index of the export is
 *     open, so an open that fails changes nothing the next one reads.
 *     Opening the indexes (layers_prepare) leaves the record's write and
 *     the retiring (rule 8) in a struct un_stack_commit: a start or a
 *     client's mount does both at once (un_stack_commit); a reload
 *     (defer_commit, un_export_restack) retires as it swaps the new union
 *     in (un_stack_retire) and writes the record after, so a reload that
 *     fails after preparing its unions (its table refused) leaves both as
 *     they were: the unions it drops drop their commit undone.
 *  6. A key (un_layer_key) is {UN_KEY_DEV | 48 bits of the lineage, objnum
 *     of the link leader} for an instance the layer's index knows by its
 *     inode number, with the same type; anything else keeps its raw
 *     (st_dev, st_ino): the upper, an object added to a layer while
 *     served, a mount inside a layer.  No st_dev is as large as UN_KEY_DEV,
 *     so a key never equals a raw pair.  A name of an inode with several
 *     links has, besides, its own path's objnum (un_layer_pathnum: found
 *     by its directory's key and its name), which only lower ids use
 *     (lowerid.c rule 7).
 *  7. An export opened with best effort (a start, a client's mount: there
 *     is no old stack to keep) whose indexes cannot be had, a full or
 *     failing state dir, is served by inode numbers, as with
 *     --no-layer-index, and says so once (un_layers_index); its next
 *     open tries again.  A reload is not best effort: it changes nothing.
 *  8. A reload that takes a path out of the stack (replaced by a new
 *     version, or removed) retires its layer (retire_gone): the layer's
 *     directory, opened again by its path and checked against the root
 *     inode its index recorded, and a reference to its index go to the
 *     export's retired layers (retire.c), which serve the old handles of
 *     its objects; the old stack is the record as the open read it (rule
 *     5).  Only a reload retires (un_retire_seen): a restart
 *     starts with none.  A layer replaced at its own path is not retired:
 *     its old directory is no longer there to be opened.
 *  9. An index that no stack record names and no export holds open (the
 *     layer left every stack and its retirement is over) is removed by
 *     un_state_sweep_indexes, after a start and after each reload.  A layer that
 *     comes back later is indexed again; a copy numbers as before (rule 3).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lindex.h"
#include "un_private.h"

#define LAYERS_DIR    "layers"
#define STACK_HEADER  "union-nfsd lower stack 1\n"
#define STACK_MAX     (64u << 10)
#define INDEX_NAME_SZ (2 * 16 + sizeof(".lx"))
#define LINEAGE_BITS  0xffffffffffffull

/* One layer of a recorded or an opened stack, bottom-up. */
struct stack_ent {
	char *path, *file; /* real path; index file (NULL: none) */
	char *from;	   /* the index to inherit from (rule 3), or NULL */
};

struct stack {
	struct stack_ent *e;
	size_t n;
};

static void stack_free(struct stack *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->e[i].path);
		free(s->e[i].file);
		free(s->e[i].from);
	}
	free(s->e);
	s->e = NULL;
	s->n = 0;
}

/* STATE/layers/<hash of PATH>.lx, to free. */
static char *index_file(const struct un_state *st, const char *path)
{
	uint8_t h[16];
	char name[INDEX_NAME_SZ], *out;
	size_t len = strlen(st->sh->dir) + sizeof(LAYERS_DIR) + sizeof(name) + 2;

	crypto_generichash(h, sizeof(h), (const uint8_t *)path, strlen(path), NULL, 0);
	for (size_t i = 0; i < sizeof(h); i++)
		snprintf(name + 2 * i, 3, "%02x", h[i]);
	out = un_sys_malloc(len);
	if (out)
		snprintf(out, len, "%s/" LAYERS_DIR "/%s.lx", st->sh->dir, name);
	return out;
}

static char *layers_path(const struct un_state *st, const char *name)
{
	size_t len = strlen(st->sh->dir) + sizeof(LAYERS_DIR) + strlen(name) + 3;
	char *out = un_sys_malloc(len);

	if (out)
		snprintf(out, len, "%s/" LAYERS_DIR "/%s", st->sh->dir, name);
	return out;
}

/* ---- building ---- */

/* An open index of FILE, whatever its root, into *LX: one in the cache,
 * else the file opened (*OWNED then set: the caller closes it); NULL when
 * there is none or it is no index of this format (it is built again).
 * Another failure is returned: an index that cannot be read now must not
 * be replaced by a fresh build, which would lose what it inherited. */
static int any_index(struct un_state *st, const char *file, struct un_lx **lx,
		     bool *owned)
{
	int rc;

	*owned = false;
	*lx = un_lxc_file(st, file);
	if (*lx)
		return 0;
	rc = un_lx_open(file, lx);
	*owned = rc == 0;
	return rc == -ENOENT || rc == -EPROTO ? 0 : rc;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Builds layer L's index into FILE, inheriting from FROM (NULL: fresh). */
static int index_build(struct un_state *st, const struct un_layer *l, const char *path,
		       const char *file, struct un_lx *from, const char *from_file,
		       char *err, size_t errlen)
{
	double t0 = now_s();
	int fd = un_sys_openat(l->fd, ".", O_RDONLY | O_DIRECTORY, 0), rc;

	if (fd < 0) {
		snprintf(err, errlen, "lowerdir %s: %s", l->dir, strerror(-fd));
		return fd;
	}
	rc = un_lx_build(fd, from, file, 0, err, errlen);
	un_sys_close(fd);
	if (!rc)
		un_notice(st, "layer index: built %s for %s in %.2f s (%s%s)", file, path,
			  now_s() - t0, from ? "inheriting from " : "fresh",
			  from ? from_file : "");
	return rc;
}

/* Whether the index LX at E->file may serve layer L (rule 2, rule 3: with
 * a partner, only an index of the partner's lineage). */
static bool index_fits(struct un_lx *lx, const struct un_layer *l, struct un_lx *from)
{
	struct un_lx_info i, f;

	un_lx_info(lx, &i);
	if (i.root_ino != l->di.ino)
		return false;
	if (!from)
		return true;
	un_lx_info(from, &f);
	return i.lineage == f.lineage;
}

/* Finds or builds the index of layer L (stack entry E), under lx_lock. */
static int index_get_locked(struct un_state *st, const struct un_layer *l,
			    const struct stack_ent *e, struct un_lxc **out, char *err,
			    size_t errlen)
{
	struct un_lx *lx = NULL, *from = NULL, *here = NULL;
	bool from_owned = false, here_owned = false;
	const char *from_file = e->from;
	int rc = 0;

	*out = un_lxc_find(st, e->file, l->di.ino);
	if (*out)
		return 0;
	if (e->from)
		rc = any_index(st, e->from, &from, &from_owned);
	if (!rc)
		rc = any_index(st, e->file, &here, &here_owned);
	if (rc) {
		snprintf(err, errlen, "layer index %s: %s",
			 e->from && !from ? e->from : e->file, strerror(-rc));
		goto out;
	}
	if (here && index_fits(here, l, from) && here_owned) {
		rc = un_lxc_add(st, e->file, here, out);
		here = NULL;
		goto out;
	}
	if (!from && here) { /* rule 2: another directory at that path */
		from = here, from_owned = here_owned, from_file = e->file;
		here = NULL, here_owned = false;
	}
	rc = index_build(st, l, e->path, e->file, from, from_file, err, errlen);
	if (!rc)
		rc = un_lx_open(e->file, &lx);
	if (!rc)
		rc = un_lxc_add(st, e->file, lx, out);
	else
		snprintf(err, errlen, "layer index %s of %s: %s", e->file, e->path,
			 strerror(-rc));
out:
	if (from_owned)
		un_lx_close(from);
	if (here_owned)
		un_lx_close(here);
	return rc;
}

/* ---- the stack record (rules 3, 5) ---- */

static char *stack_name(const struct un_export *ex)
{
	char name[32];

	snprintf(name, sizeof(name), "stack-%08x", ex->id);
	return layers_path(ex->st, name);
}

static int stack_push(struct stack *s, const char *path, const char *file)
{
	struct stack_ent *e = un_sys_realloc(s->e, (s->n + 1) * sizeof(*e));

	if (!e)
		return -ENOMEM;
	s->e = e;
	e = &s->e[s->n];
	*e = (struct stack_ent){un_sys_strdup(path), file ? un_sys_strdup(file) : NULL,
				NULL};
	s->n++;
	return e->path && (!file || e->file) ? 0 : -ENOMEM;
}

/* Parses the record's lines into S; a damaged record is an empty one. */
static int stack_parse(char *buf, struct stack *s)
{
	char *line, *save = NULL, *tab;
	int rc = 0;

	if (strncmp(buf, STACK_HEADER, sizeof(STACK_HEADER) - 1))
		return 0;
	for (line = strtok_r(buf + sizeof(STACK_HEADER) - 1, "\n", &save); line && !rc;
	     line = strtok_r(NULL, "\n", &save)) {
		tab = strchr(line, '\t');
		if (!tab)
			continue;
		*tab = '\0';
		rc = stack_push(s, tab + 1, line);
	}
	return rc;
}

/* The stack recorded in the file NAME (empty: none there). */
static int stack_load(const char *name, struct stack *s)
{
	char *buf = un_sys_malloc(STACK_MAX + 1);
	ssize_t n = 0;
	int fd = -ENOMEM, rc = -ENOMEM;

	if (buf)
		fd = un_sys_openat(AT_FDCWD, name, O_RDONLY | O_CLOEXEC, 0);
	if (fd >= 0) {
		n = un_sys_pread(fd, buf, STACK_MAX, 0);
		un_sys_close(fd);
	}
	if (n < 0)
		rc = (int)n;
	else if (fd >= 0 || fd == -ENOENT) {
		buf[n] = '\0';
		rc = stack_parse(buf, s);
	} else {
		rc = fd;
	}
	free(buf);
	return rc;
}

/* Writes S as the record NAME of state ST: a temp file synced, renamed,
 * the dir synced. */
static int stack_write(struct un_state *st, const char *name, const struct stack *s)
{
	char *tmp = NULL, *dir = layers_path(st, ".");
	size_t len;
	int fd = -ENOMEM, rc = -ENOMEM;
	FILE *f;

	if (!name || !dir || !(tmp = un_sys_malloc((len = strlen(name) + 8))))
		goto out;
	snprintf(tmp, len, "%s.tmp", name);
	fd = un_sys_openat(AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		rc = fd < 0 ? fd : -errno;
		goto out;
	}
	fd = -1;
	fputs(STACK_HEADER, f);
	for (size_t i = 0; i < s->n; i++)
		if (s->e[i].file && !strpbrk(s->e[i].path, "\n"))
			fprintf(f, "%s\t%s\n", s->e[i].file, s->e[i].path);
	rc = fflush(f) || fsync(fileno(f)) ? -errno : 0;
	fclose(f);
	if (!rc)
		rc = un_sys_renameat2(AT_FDCWD, tmp, AT_FDCWD, name, 0);
	if (!rc) {
		fd = un_sys_openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY, 0);
		rc = fd < 0 ? fd : un_sys_fsync(fd);
	}
out:
	if (rc && tmp)
		un_sys_unlinkat(AT_FDCWD, tmp, 0);
	if (fd >= 0)
		un_sys_close(fd);
	free(tmp);
	free(dir);
	return rc;
}

/* Whether the record holds S already: OLD, as read, has the lines
 * stack_write would write, in order.  Then nothing is written: a reopen of
 * an unchanged stack (a client union's mount, a reload that kept the
 * layers) costs no fsyncs. */
static bool stack_recorded(const struct stack *old, const struct stack *s)
{
	size_t k = 0;

	for (size_t i = 0; i < s->n; i++) {
		if (!s->e[i].file || strpbrk(s->e[i].path, "\n"))
			continue;
		if (k == old->n || strcmp(old->e[k].file, s->e[i].file) ||
		    strcmp(old->e[k].path, s->e[i].path))
			return false;
		k++;
	}
	return k == old->n;
}

static bool stack_has(const struct stack *s, const char *path)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->e[i].path, path))
			return true;
	return false;
}

/* Rule 3: gives each new path of NOW the index file of the gone path of
 * OLD it pairs with, in order, bottom-up. */
static int stack_pair(const struct stack *old, struct stack *now)
{
	size_t g = 0;

	for (size_t i = 0; i < now->n; i++) {
		if (stack_has(old, now->e[i].path))
			continue;
		while (g < old->n && (stack_has(now, old->e[g].path) || !old->e[g].file))
			g++;
		if (g == old->n)
			break;
		now->e[i].from = un_sys_strdup(old->e[g++].file);
		if (!now->e[i].from)
			return -ENOMEM;
	}
	return 0;
}

/* EX's lowers, bottom-up, by real path, with their index files. */
static int stack_of(const struct un_export *ex, struct stack *s, char *err, size_t errlen)
{
	char *real, *file;
	int rc = 0;

	for (size_t i = ex->nlayers; i-- > 0 && !rc;) {
		if (!ex->layers[i].lower)
			continue;
		real = realpath(ex->layers[i].dir, NULL);
		if (!real) {
			rc = -errno;
			snprintf(err, errlen, "lowerdir %s: %s", ex->layers[i].dir,
				 strerror(-rc));
			break;
		}
		file = index_file(ex->st, real);
		rc = file ? stack_push(s, real, file) : -ENOMEM;
		free(real);
		free(file);
	}
	return rc;
}

/* ---- retiring the layers that left the stack (rule 8) ---- */

static uint64_t lxc_lineage(const struct un_lxc *c)
{
	struct un_lx_info i;

	un_lx_info(un_lxc_lx(c), &i);
	return i.lineage;
}

/* What un_layers_index leaves to un_stack_commit (rule 5): the export's
 * recorded stack as it was read and the one it opened.  It names the
 * export by state, id and path, not by its union, so a commit may run
 * after that union was closed (a client union released meanwhile). */
struct un_stack_commit {
	struct un_state *st;
	uint32_t id;
	char *path;
	char *record; /* the record's file name */
	struct stack old, now;
	bool retired; /* un_stack_retire ran */
};

/* Retires the layer of E, gone from C's stack and replaced by BY (NULL:
 * removed), if its directory is still there with its index's root. */
static void retire_one(const struct un_stack_commit *c, const struct stack_ent *e,
		       const char *by)
{
	struct un_lxc *lxc = NULL;
	struct stat root;
	int fd, rc;

	fd = un_sys_openat(AT_FDCWD, e->path, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
	rc = fd < 0 ? fd : un_sys_fstat(fd, &root);
	if (!rc)
		rc = un_lxc_get(c->st, e->file, root.st_ino, &lxc);
	if (rc) {
		un_notice(c->st,
			  "export %s: layer %s left the stack (%s%s) and is not retired: "
			  "%s; its old handles are stale",
			  c->path, e->path, by ? "replaced by " : "removed", by ? by : "",
			  rc == -ESTALE ? "another directory is there now"
					: strerror(-rc));
		if (fd >= 0)
			un_sys_close(fd);
		return;
	}
	un_retire_add(c->st, c->id, c->path, e->path, fd, &root, lxc,
		      UN_KEY_DEV | (lxc_lineage(lxc) & LINEAGE_BITS), by);
}

/* Retires every path of C's old stack that its new one no longer holds,
 * with the path that replaced it (stack_pair) for the log. */
static void retire_gone(const struct un_stack_commit *c)
{
	const struct stack *old = &c->old, *now = &c->now;
	const char *by;

	for (size_t g = 0; g < old->n; g++) {
		if (!old->e[g].file || stack_has(now, old->e[g].path))
			continue;
		by = NULL;
		for (size_t i = 0; i < now->n && !by; i++)
			if (now->e[i].from && !strcmp(now->e[i].from, old->e[g].file))
				by = now->e[i].path;
		retire_one(c, &old->e[g], by);
	}
}

static void commit_free(struct un_stack_commit *c)
{
	if (!c)
		return;
	stack_free(&c->old);
	stack_free(&c->now);
	free(c->path);
	free(c->record);
	free(c);
}

/* ---- the API ---- */

/* Rule 7: EX, whose indexes could not be had (ERR says why), by inode
 * numbers. */
static int index_forgo(struct un_export *ex, int rc, char *err)
{
	un_layers_unindex(ex);
	un_notice(ex->st,
		  "%s; export %s served by inode numbers until it is opened again",
		  err[0] ? err : strerror(-rc), ex->path);
	err[0] = '\0';
	return 0;
}

/* Opens the index of every lower of EX, and leaves in EX->pending what
 * the commit writes and retires. */
static int layers_prepare(struct un_export *ex, char *err, size_t errlen)
{
	struct un_stack_commit *c = un_sys_calloc(1, sizeof(*c));
	struct un_layer *l;
	size_t k = 0;
	int rc = -ENOMEM;

	if (!c || !(c->path = un_sys_strdup(ex->path)) || !(c->record = stack_name(ex))) {
		commit_free(c);
		snprintf(err, errlen, "out of memory");
		return rc;
	}
	c->st = ex->st;
	c->id = ex->id;
	ex->pending = c; /* freed with the indexes (un_layers_unindex) */
	rc = stack_of(ex, &c->now, err, errlen);
	if (!rc && (rc = stack_load(c->record, &c->old)))
		snprintf(err, errlen, "stack record of export %s: %s", ex->path,
			 strerror(-rc));
	if (!rc && (rc = stack_pair(&c->old, &c->now)))
		snprintf(err, errlen, "out of memory");
	pthread_mutex_lock(&ex->st->sh->lx_lock);
	for (size_t i = ex->nlayers; !rc && i-- > 0;) {
		l = &ex->layers[i];
		if (!l->lower)
			continue;
		rc = index_get_locked(ex->st, l, &c->now.e[k++], &l->lxc, err, errlen);
		if (!rc)
			l->key_dev = UN_KEY_DEV | (lxc_lineage(l->lxc) & LINEAGE_BITS);
	}
	pthread_mutex_unlock(&ex->st->sh->lx_lock);
	return rc;
}

int un_layers_index(struct un_export *ex, bool best_effort, bool defer, char *err,
		    size_t errlen)
{
	char *dir = layers_path(ex->st, "");
	int rc = dir ? un_sys_mkdirat(AT_FDCWD, dir, 0700) : -ENOMEM;

	free(dir);
	if (errlen)
		err[0] = '\0';
	if (rc && rc != -EEXIST) {
		snprintf(err, errlen, "state dir %s: %s: %s", ex->st->sh->dir, LAYERS_DIR,
			 strerror(-rc));
		return rc;
	}
	rc = layers_prepare(ex, err, errlen);
	if (!rc && !defer)
		rc = un_stack_commit(un_export_commit_take(ex), err, errlen);
	if (rc && errlen && !err[0])
		snprintf(err, errlen, "layer indexes of export %s: %s", ex->path,
			 strerror(-rc));
	return rc && best_effort && errlen ? index_forgo(ex, rc, err) : rc;
}

struct un_stack_commit *un_export_commit_take(struct un_export *ex)
{
	struct un_stack_commit *c = ex->pending;

	ex->pending = NULL;
	return c;
}

void un_stack_retire(struct un_stack_commit *c)
{
	if (!c || c->retired)
		return;
	c->retired = true;
	if (un_retire_seen(c->st, c->id)) /* rule 8: a reload */
		retire_gone(c);
}

int un_stack_commit(struct un_stack_commit *c, char *err, size_t errlen)
{
	int rc = 0;

	if (!c)
		return 0;
	if (!stack_recorded(&c->old, &c->now) &&
	    (rc = stack_write(c->st, c->record, &c->now)))
		snprintf(err, errlen, "stack record of export %s: %s", c->path,
			 strerror(-rc));
	if (!rc)
		un_stack_retire(c);
	commit_free(c);
	return rc;
}

void un_stack_commit_drop(struct un_stack_commit *c)
{
	commit_free(c);
}

void un_layers_unindex(struct un_export *ex)
{
	commit_free(un_export_commit_take(ex));
	for (size_t i = 0; ex->layers && i < ex->nlayers; i++) {
		if (ex->layers[i].lxc)
			un_lxc_put(ex->st, ex->layers[i].lxc);
		ex->layers[i].lxc = NULL;
	}
}

int un_layer_key(const struct un_export *ex, uint16_t layer, const struct stat *st,
		 struct un_devino *out)
{
	const struct un_layer *l = &ex->layers[layer];
	uint64_t objnum;
	uint32_t type;
	int err;

	*out = (struct un_devino){.dev = st->st_dev, .ino = st->st_ino};
	if (!l->lxc || st->st_dev != l->di.dev)
		return 0;
	err = un_lx_ino(un_lxc_lx(l->lxc), st->st_ino, &objnum, &type);
	if (err)
		return err == -ENOENT ? 0 : err; /* a failure must not change it */
	if (type == (st->st_mode & S_IFMT))
		*out = (struct un_devino){.dev = l->key_dev, .ino = objnum};
	return 0;
}

uint64_t un_layer_pathnum(const struct un_export *ex, uint16_t layer, int dirfd,
			  const char *name, size_t len, struct un_devino key)
{
	const struct un_layer *l = &ex->layers[layer];
	char nul[UN_LX_NAME_MAX + 1];
	struct un_lx_entry e;
	struct un_devino dk;
	struct stat st;

	if (!ex->lower_ids || !l->lxc || key.dev != l->key_dev || len > UN_LX_NAME_MAX ||
	    un_sys_fstat(dirfd, &st) || un_layer_key(ex, layer, &st, &dk) ||
	    dk.dev != l->key_dev)
		return 0;
	memcpy(nul, name, len);
	nul[len] = '\0';
	if (un_lx_lookup(un_lxc_lx(l->lxc), dk.ino, nul, &e) || e.leader != key.ino)
		return 0;
	return e.objnum;
}

/* ---- removing the indexes no stack holds (rule 9) ---- */

/* Every index file that a stack record in D (the layers dir DIR) names,
 * into ALL, one stack: -errno when a record cannot be read, and then
 * nothing is removed. */
static int sweep_recorded(DIR *d, const char *dir, struct stack *all)
{
	struct dirent *de;
	int rc = 0;

	while (!rc && (de = readdir(d))) {
		char path[PATH_MAX];

		if (strncmp(de->d_name, "stack-", 6) || strchr(de->d_name, '.'))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		rc = stack_load(path, all);
	}
	return rc;
}

static bool sweep_named(const struct stack *all, const char *file)
{
	for (size_t i = 0; i < all->n; i++)
		if (!strcmp(all->e[i].file, file))
			return true;
	return false;
}

/* Removes the unnamed, unopened indexes of the layers dir D (DIR), under
 * lx_lock: no open can start using one while it goes. */
static void sweep_locked(struct un_state *st, DIR *d, const char *dir)
{
	char file[PATH_MAX];
	struct stack all = {0};
	struct dirent *de;
	size_t len;

	if (sweep_recorded(d, dir, &all) == 0) {
		rewinddir(d);
		while ((de = readdir(d))) {
			len = strlen(de->d_name);
			if (len != INDEX_NAME_SZ - 1 ||
			    strcmp(de->d_name + len - 3, ".lx"))
				continue;
			snprintf(file, sizeof(file), "%s/" LAYERS_DIR "/%s", st->sh->dir,
				 de->d_name);
			if (un_lxc_file(st, file) || sweep_named(&all, file))
				continue;
			if (un_sys_unlinkat(dirfd(d), de->d_name, 0) == 0)
				un_notice(st,
					  "layer index %s removed: no export's stack "
					  "holds it",
					  file);
		}
	}
	stack_free(&all);
}

void un_state_sweep_indexes(struct un_state *st)
{
	char *dir = layers_path(st, ".");
	DIR *d = dir ? opendir(dir) : NULL;

	if (d) {
		pthread_mutex_lock(&st->sh->lx_lock);
		sweep_locked(st, d, dir);
		pthread_mutex_unlock(&st->sh->lx_lock);
		closedir(d);
	}
	free(dir);
}
