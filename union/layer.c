/* SPDX-License-Identifier: Apache-2.0 */
/* layer.c - an export: its layer stack, opened once and checked, its id
 * and its root node.
 *
 * Rules:
 *  1. layers[] holds the upper (when there is one) and then the lowers,
 *     top-most first, each as an O_PATH descriptor of its root (layers_open).
 *     Every later access is relative to these descriptors, so renaming or
 *     unmounting a layer's path after the start changes nothing the engine
 *     sees.
 *  2. The export id is the first 4 bytes of a BLAKE2b hash of the export
 *     path (or of cfg->id_name, the server's fsid key, when given), keyed
 *     with the fixed context EXPORT_ID_KEY, never 0
 *     (export_id_of).  It is also the fsid clients see and lives in every
 *     handle, so it must not change when the state dir is recreated, and it
 *     carries no secret.
 *  3. No layer is inside another, and the work dir shares the upper's
 *     filesystem without nesting with it (upper_check, no_nesting); no
 *     directory is two lowers of one stack (lowers_distinct: its objects
 *     would have one identity in two layers, lowerid.c rule 6).  An export
 *     that breaks this is refused with one line saying why.
 *  4. A reload that changes only the lowers of a union opens a successor
 *     (un_export_restack): new lower roots and indexes, the same id, and
 *     the upper and work dirs taken over by descriptor, never reopened by
 *     path nor emptied, so a copy-up of the old union still under way
 *     finds its temp.  The successor starts with no resolve cache and no
 *     root object of its own (rcache.c): nothing it serves was read
 *     through the old stack.  Merged listings, cached per state, are found
 *     by a version over every layer's part of a directory (readdir.c), so
 *     a stack with a layer more, less or other is another version.  Its
 *     stack record and the retiring of the layers it leaves wait for the
 *     caller's un_stack_retire and un_stack_commit (layerid.c rule 5), as
 *     for an un_export_open with defer_commit.  It shares the union's own
 *     node table, when it has one (workdir.c rule 4), and holds it as the
 *     union does (state.c rule 6).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "un_private.h"

#define EXPORT_ID_KEY "union-nfsd export id, version 1"
#define WALK_UP_MAX   4096 /* bounds the ".." walk of inside() */

/* Writes one line into ERR and returns RC. */
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static struct un_devino devino(const struct stat *st)
{
	return (struct un_devino){.dev = st->st_dev, .ino = st->st_ino};
}

static bool same(struct un_devino a, struct un_devino b)
{
	return a.dev == b.dev && a.ino == b.ino;
}

/* Opens layer root DIR (KIND names it in messages) into *fd and *st. */
static int root_open(const char *kind, const char *dir, int *fd, struct stat *st,
		     char *err, size_t errlen)
{
	int rc;

	rc = un_sys_openat(AT_FDCWD, dir, O_PATH | O_DIRECTORY, 0);
	if (rc == -ENOENT)
		return fail(err, errlen, rc, "%s %s: no such directory", kind, dir);
	if (rc == -ENOTDIR)
		return fail(err, errlen, rc, "%s %s: not a directory", kind, dir);
	if (rc < 0)
		return fail(err, errlen, rc, "%s %s: %s", kind, dir, strerror(-rc));
	*fd = rc;
	rc = un_sys_fstat(*fd, st);
	if (rc < 0)
		return fail(err, errlen, rc, "%s %s: %s", kind, dir, strerror(-rc));
	return 0;
}

/* 1 if directory FD is ANC or lies below it, 0 if not: walks ".." up to the
 * root, comparing (dev, ino), so bind mounts and symlinked paths cannot hide
 * the nesting. */
static int inside(int fd, struct un_devino anc)
{
	struct stat st, up;
	int cur, next, rc = 0;

	cur = un_sys_dup(fd);
	if (cur < 0)
		return cur;
	for (int i = 0; i < WALK_UP_MAX && rc == 0; i++) {
		rc = un_sys_fstat(cur, &st);
		if (rc < 0)
			break;
		if (same(devino(&st), anc)) {
			rc = 1;
			break;
		}
		rc = next = un_sys_openat(cur, "..", O_PATH | O_DIRECTORY, 0);
		if (next < 0)
			break;
		un_sys_close(cur);
		cur = next;
		rc = un_sys_fstat(cur, &up);
		if (rc == 0 && same(devino(&up), devino(&st)))
			break; /* ".." of "/" is "/": not inside */
	}
	un_sys_close(cur);
	return rc;
}

/* One directory in a nesting check: its role and path name it in messages. */
struct side {
	const char *kind, *dir;
	struct un_devino di;
	int fd;
};

static struct side side_of(const char *kind, const struct un_layer *l)
{
	return (struct side){.kind = kind, .dir = l->dir, .di = l->di, .fd = l->fd};
}

/* Checks that A and B are different directories and neither is inside the
 * other. */
static int no_nesting(struct side a, struct side b, char *err, size_t errlen)
{
	int r;

	if (same(a.di, b.di))
		return fail(err, errlen, -EINVAL, "%s %s is the same directory as %s %s",
			    a.kind, a.dir, b.kind, b.dir);
	r = inside(a.fd, b.di);
	if (r == 1)
		return fail(err, errlen, -EINVAL, "%s %s is inside %s %s", a.kind, a.dir,
			    b.kind, b.dir);
	if (r == 0)
		r = inside(b.fd, a.di);
	if (r == 1)
		return fail(err, errlen, -EINVAL, "%s %s is inside %s %s", b.kind, b.dir,
			    a.kind, a.dir);
	if (r < 0)
		return fail(err, errlen, r, "%s %s: %s", a.kind, a.dir, strerror(-r));
	return 0;
}

static int cfg_check(const struct un_export_cfg *cfg, char *err, size_t errlen)
{
	if (!cfg->path || cfg->path[0] != '/')
		return fail(err, errlen, -EINVAL, "export path %s: not absolute",
			    cfg->path ? cfg->path : "(none)");
	if (cfg->nlower == 0)
		return fail(err, errlen, -EINVAL, "no lowerdir given");
	if (cfg->nlower + (cfg->upperdir != NULL) > UN_LAYERS_MAX)
		return fail(err, errlen, -EINVAL, "too many layers (at most %d)",
			    UN_LAYERS_MAX);
	if (cfg->upperdir && !cfg->workdir)
		return fail(err, errlen, -EINVAL, "upperdir %s needs a workdir",
			    cfg->upperdir);
	if (cfg->workdir && !cfg->upperdir)
		return fail(err, errlen, -EINVAL, "workdir %s given without an upperdir",
			    cfg->workdir);
	return 0;
}

/* Opens the upper root of CFG into EX->layers[0], or takes another
 * descriptor of FROM's (un_export_restack): the same directory, whatever
 * its path names now. */
static int upper_open(struct un_export *ex, const struct un_export_cfg *cfg,
		      const struct un_export *from, char *err, size_t errlen)
{
	struct un_layer *l = &ex->layers[0];
	struct stat st;
	int rc;

	l->dir = un_sys_strdup(cfg->upperdir);
	if (!l->dir)
		return fail(err, errlen, -ENOMEM, "out of memory");
	if (!from) {
		rc = root_open("upperdir", cfg->upperdir, &l->fd, &st, err, errlen);
		if (rc == 0)
			l->di = devino(&st);
		return rc;
	}
	rc = l->fd = un_sys_dup(from->layers[0].fd);
	if (rc < 0)
		return fail(err, errlen, rc, "upperdir %s: %s", cfg->upperdir,
			    strerror(-rc));
	l->di = from->layers[0].di;
	return 0;
}

/* Opens every layer root of CFG into EX->layers (the upper as upper_open). */
static int layers_open(struct un_export *ex, const struct un_export_cfg *cfg,
		       const struct un_export *from, char *err, size_t errlen)
{
	struct stat st;
	size_t i = 0;
	int rc;

	if (cfg->upperdir) {
		rc = upper_open(ex, cfg, from, err, errlen);
		if (rc)
			return rc;
		i = 1;
	}
	for (size_t l = 0; l < cfg->nlower; l++, i++) {
		ex->layers[i].dir = un_sys_strdup(cfg->lowerdirs[l]);
		ex->layers[i].lower = true;
		if (!ex->layers[i].dir)
			return fail(err, errlen, -ENOMEM, "out of memory");
		rc = root_open("lowerdir", cfg->lowerdirs[l], &ex->layers[i].fd, &st, err,
			       errlen);
		if (rc)
			return rc;
		ex->layers[i].di = devino(&st);
	}
	return 0;
}

/* No directory twice among the lowers (rule 3), from I on. */
static int lowers_distinct(const struct un_export *ex, size_t i, char *err, size_t errlen)
{
	for (; i < ex->nlayers; i++)
		for (size_t j = i + 1; j < ex->nlayers; j++)
			if (same(ex->layers[i].di, ex->layers[j].di))
				return fail(err, errlen, -EINVAL,
					    "lowerdir %s is the same directory as "
					    "lowerdir %s",
					    ex->layers[j].dir, ex->layers[i].dir);
	return 0;
}

/* The upper against every lower. */
static int lowers_check(struct un_export *ex, char *err, size_t errlen)
{
	struct side up = side_of("upperdir", &ex->layers[0]);
	int rc;

	for (size_t i = 1; i < ex->nlayers; i++) {
		rc = no_nesting(up, side_of("lowerdir", &ex->layers[i]), err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

/* The upper and the workdir against each other and against every lower. */
static int upper_check(struct un_export *ex, const struct un_export_cfg *cfg, char *err,
		       size_t errlen)
{
	struct side up = side_of("upperdir", &ex->layers[0]), work;
	struct stat st;
	int rc;

	rc = lowers_check(ex, err, errlen);
	if (rc)
		return rc;
	rc = root_open("workdir", cfg->workdir, &ex->workfd, &st, err, errlen);
	if (rc)
		return rc;
	work = (struct side){"workdir", cfg->workdir, devino(&st), ex->workfd};
	if (work.di.dev != up.di.dev)
		return fail(err, errlen, -EXDEV,
			    "workdir %s is not on the same filesystem as upperdir %s",
			    cfg->workdir, cfg->upperdir);
	return no_nesting(work, up, err, errlen);
}

static uint32_t export_id_of(const char *path)
{
	uint8_t h[crypto_generichash_BYTES_MIN];
	uint32_t id;

	_Static_assert(sizeof(EXPORT_ID_KEY) - 1 >= crypto_generichash_KEYBYTES_MIN,
		       "export id key length");
	crypto_generichash(h, sizeof(h), (const uint8_t *)path, strlen(path),
			   (const uint8_t *)EXPORT_ID_KEY, sizeof(EXPORT_ID_KEY) - 1);
	id = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
	return id ? id : 1; /* 0 is no export */
}

/* Gives the export root its node (roots.c: the same whatever the layers). */
static int root_node(struct un_export *ex)
{
	struct un_devino inst[UN_LAYERS_MAX];
	struct un_node_obs obs = {
	    .type = S_IFDIR,
	    .inst = inst,
	    .ninst = ex->nlayers,
	    .pinned = true,
	};

	for (size_t i = 0; i < ex->nlayers; i++)
		inst[i] = ex->layers[i].di;
	return un_root_get(ex->st, ex->id, &obs, un_lower_root_id(ex), &ex->root_id);
}

static struct un_export *export_alloc(struct un_state *st,
				      const struct un_export_cfg *cfg)
{
	struct un_export *ex = un_rc_export_new();
	size_t n = cfg->nlower + (cfg->upperdir != NULL);
	pthread_rwlockattr_t ra;

	if (!ex)
		return NULL;
	ex->st = st;
	ex->workfd = ex->tmpfd = ex->lockfd = -1;
	pthread_rwlockattr_init(&ra);
	/* A stream of creates must not hold off a rename (dir.c). */
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	for (size_t i = 0; i < UN_LOCK_STRIPES; i++) {
		pthread_mutex_init(&ex->cu_locks[i], NULL);
		pthread_rwlock_init(&ex->ns_locks[i], &ra);
		pthread_mutex_init(&ex->name_locks[i], NULL);
	}
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&ex->rename_lock, NULL);
	ex->layers = un_sys_calloc(n, sizeof(*ex->layers));
	if (ex->layers) { /* no descriptor yet: none for un_export_close to close */
		ex->nlayers = n;
		for (size_t i = 0; i < n; i++)
			ex->layers[i].fd = -1;
	}
	ex->path = un_sys_strdup(cfg->path);
	if (!ex->layers || !ex->path) {
		un_export_close(ex);
		return NULL;
	}
	return ex;
}

/* The work dir of EX's upper, taken over from FROM: its temps are those of
 * copy-ups FROM may still be running, so it is not emptied (un_work_open). */
static int work_take(struct un_export *ex, const struct un_export *from, char *err,
		     size_t errlen)
{
	int rc;

	rc = ex->workfd = un_sys_dup(from->workfd);
	if (rc >= 0)
		rc = ex->tmpfd = un_sys_dup(from->tmpfd);
	if (rc >= 0) /* one open file description: the lock stays (workdir.c rule 3) */
		rc = ex->lockfd = un_sys_dup(from->lockfd);
	if (rc < 0)
		return fail(err, errlen, rc, "workdir: %s", strerror(-rc));
	if (from->table) { /* already ex->st: export_open was given from->st */
		ex->table = from->table;
		un_state_table_get(ex->table); /* state.c rule 6 */
	}
	ex->dirsync_orders = from->dirsync_orders;
	atomic_store(&ex->wh_xattr, atomic_load(&from->wh_xattr));
	return 0;
}

/* Opens the layers of CFG into the new EX: FROM NULL as un_export_open,
 * else as un_export_restack. */
static int stack_open(struct un_export *ex, const struct un_export_cfg *cfg,
		      const struct un_export *from, char *err, size_t errlen)
{
	int rc;

	rc = layers_open(ex, cfg, from, err, errlen);
	if (!rc)
		rc = lowers_distinct(ex, cfg->upperdir != NULL, err, errlen);
	if (rc || !cfg->upperdir)
		return rc;
	if (from) {
		rc = lowers_check(ex, err, errlen);
		return rc ? rc : work_take(ex, from, err, errlen);
	}
	rc = upper_check(ex, cfg, err, errlen);
	if (!rc)
		rc = un_work_open(ex, cfg->workdir, err, errlen);
	return rc ? rc : un_work_table_open(ex, cfg, err, errlen);
}

/* The part of MEM (un_export_cfg.mem_bytes) that EX's resolve cache may
 * hold: what EX's own part (itself, its paths, its layers) leaves, at least
 * a byte, as 0 would mean no bound. */
static size_t cache_budget(const struct un_export *ex, size_t mem)
{
	size_t own = un_export_mem(ex) - un_rc_bytes(ex);

	return !mem ? 0 : mem > own ? mem - own : 1;
}

static int export_open(struct un_state *st, const struct un_export_cfg *cfg,
		       const struct un_export *from, struct un_export **out, char *err,
		       size_t errlen)
{
	struct un_export *ex;
	int rc;

	rc = cfg_check(cfg, err, errlen);
	if (rc)
		return rc;
	ex = export_alloc(st, cfg);
	if (!ex)
		return fail(err, errlen, -ENOMEM, "out of memory");
	ex->id = export_id_of(cfg->id_name ? cfg->id_name : cfg->path);
	rc = stack_open(ex, cfg, from, err, errlen); /* the id picks the table */
	if (rc)
		goto fail;
	ex->lower_ids = ex->st->sh->lower_ids || cfg->lower_ids;
	ex->rc.budget = cache_budget(ex, cfg->mem_bytes);
	if (!cfg->no_layer_index &&
	    (rc = un_layers_index(ex, cfg->index_best_effort,
				  cfg->defer_commit || from != NULL, err, errlen)))
		goto fail;
	/* Our own markers go where overlayfs would put them when mounted by
	 * the same user: trusted.* needs CAP_SYS_ADMIN. */
	ex->xattr_prefix = geteuid() == 0 ? "trusted.overlay." : "user.overlay.";
	rc = root_node(ex);
	if (!rc)
		un_lower_tags(ex); /* lowerid.c rule 6: they need the root id */
	if (!rc && !from && cfg->upperdir)
		rc = un_intents_settle_open(ex);
	if (rc) {
		fail(err, errlen, rc, "state dir: node table: %s", strerror(-rc));
		goto fail;
	}
	*out = ex;
	return 0;
fail:
	un_export_close(ex);
	return rc;
}

int un_export_open(struct un_state *st, const struct un_export_cfg *cfg,
		   struct un_export **out, char *err, size_t errlen)
{
	return export_open(st, cfg, NULL, out, err, errlen);
}

int un_export_restack(struct un_export *from, const struct un_export_cfg *cfg,
		      struct un_export **out, char *err, size_t errlen)
{
	if (strcmp(cfg->path, from->path) != 0 ||
	    (cfg->upperdir != NULL) != un_export_writable(from))
		return fail(err, errlen, -EINVAL,
			    "a new lower stack keeps the path and the upper dir");
	return export_open(from->st, cfg, from, out, err, errlen);
}

void un_export_close(struct un_export *ex)
{
	struct un_state *table;
	int lockfd;

	if (!ex)
		return;
	/* Jobs queued ahead name EX (node.c invariant 16): run before it goes. */
	if (ex->st)
		un_node_ahead_commit(ex->st);
	/* The union's own table outlives every object of the union (its
	 * listings are the table's) and goes before the lock does, which
	 * lets the next server open it (workdir.c rule 4). */
	table = ex->table;
	lockfd = ex->lockfd;
	un_layers_unindex(ex);
	for (size_t i = 0; ex->layers && i < ex->nlayers; i++) {
		un_sys_close(ex->layers[i].fd);
		free(ex->layers[i].dir);
	}
	un_sys_close(ex->workfd);
	un_sys_close(ex->tmpfd);
	for (size_t i = 0; i < UN_LOCK_STRIPES; i++) {
		pthread_mutex_destroy(&ex->cu_locks[i]);
		pthread_rwlock_destroy(&ex->ns_locks[i]);
		pthread_mutex_destroy(&ex->name_locks[i]);
	}
	pthread_mutex_destroy(&ex->rename_lock);
	free(ex->layers);
	free(ex->path);
	un_rc_export_free(ex);
	un_state_close(table);
	un_sys_close(lockfd);
}

size_t un_export_mem(const struct un_export *ex)
{
	size_t n = un_rc_own_bytes(ex) + strlen(ex->path) + 1 + un_rc_bytes(ex);

	for (size_t i = 0; i < ex->nlayers; i++)
		n += sizeof(ex->layers[i]) +
		     (ex->layers[i].dir ? strlen(ex->layers[i].dir) + 1 : 0);
	return n;
}

uint32_t un_export_id(const struct un_export *ex)
{
	return ex->id;
}

uint32_t un_export_id_of(const char *path)
{
	return export_id_of(path);
}

const char *un_export_path(const struct un_export *ex)
{
	return ex->path;
}

bool un_export_writable(const struct un_export *ex)
{
	return ex->workfd >= 0 && !atomic_load(&ex->gone);
}
