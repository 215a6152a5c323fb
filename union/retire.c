/* SPDX-License-Identifier: Apache-2.0 */
/* retire.c - retired lower layers: the old version of a layer a reload
 * replaced or removed, kept open so that the handles of its objects that
 * the new stack no longer shows read the old bytes, as a local filesystem
 * keeps an unlinked file a process has open.
 *
 * Rules:
 *  1. The registry is memory only: per export id (st->sh->rt_exports), the
 *     layers retired since the start, newest first, each its old path, an
 *     O_PATH descriptor of its root, a reference to its index (layerid.c)
 *     and the time it was retired.  A restart forgets them all.  An export
 *     is in it only once a layer of it is retired.
 *  2. Only a reload retires: un_retire_seen tells layerid.c whether the
 *     export was opened before in this process (layerid.c rule 8), by the
 *     sorted ids of those opened (st->sh->rt_seen): four bytes an export, as
 *     every client union ever opened is one, and a server that thousands
 *     of clients came and went from keeps them all.  A reload retires
 *     only once it switches to the new stack (layerid.c rule 5): one that
 *     fails leaves the registry as it was.
 *  3. A retired layer serves only a node whose walk found it gone or
 *     replaced (un_resolve, after its tries), whose record holds an index
 *     key (layerid.c rule 6) of the layer's lineage, for a regular file or
 *     a symlink.  Directories stay stale: a directory's handle would need
 *     a merged listing of layers that are no longer a stack.  The object's
 *     path in the retired layer is its index's (un_lx_get up the parent
 *     chain), opened one component at a time beneath the layer's root
 *     without following a symlink, and the file opened must be the key's
 *     object by the index's inode table (retired_open).  Of the layers of
 *     one lineage the newest that holds the object serves it.
 *  4. A retired object is read only (struct un_obj's retired): every path
 *     that would change it, or copy it up, answers -EROFS (write.c,
 *     copyup.c); the server reports no write access for it.  It is known
 *     by a flag rather than by a layer index of its own: ex->layers is the
 *     stack every lookup, listing and copy-up walks, and a retired layer
 *     appended there would have to be skipped by each of those loops, and
 *     could not come or go while the export is served.  Its inst[0] names
 *     the export's bottom-most lower, so code that looks at its layer sees
 *     a lower one (never the upper: un_obj_upper is false).
 *  5. A retired layer is usable while its old path still holds the
 *     directory it was (same device and inode: images laid out side by
 *     side and never rewritten in place) and while it is younger than
 *     retire-time (un_state_retire_time; 0: until exit).  Each use checks
 *     both; one that fails releases the layer with one log line, as does
 *     un_state_retire_time for every layer past a new, shorter time, and
 *     un_state_retire_release for those an admin releases (union-nfsctl).
 *  6. A layer leaves the registry under rt_lock; its descriptor and index
 *     are released with its last reference (rt_put), outside the lock, so
 *     a resolve that took one before goes on with it.  rt_lock is never
 *     held while lx_lock is taken.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lindex.h"
#include "un_private.h"

#define RT_DEPTH_MAX 1024 /* components of a path in a retired layer */
#define RT_TRY_MAX   8	  /* retired layers of one lineage tried per resolve */

struct un_retired {
	atomic_uint refs; /* the registry's, and each resolve's using it */
	char *path;
	int fd; /* O_PATH of its root */
	struct un_devino root;
	struct un_lxc *lxc;
	uint64_t key_dev;
	int64_t since;			  /* CLOCK_MONOTONIC, ns */
	const struct un_rt_export *owner; /* its export's entry, for the log */
	struct un_retired *next;
};

struct un_rt_export {
	uint32_t id;
	char *path; /* the export's, for the log */
	struct un_retired *layers;
	struct un_rt_export *next;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void rt_put(struct un_state *st, struct un_retired *l)
{
	if (atomic_fetch_sub(&l->refs, 1) != 1)
		return;
	un_sys_close(l->fd);
	un_lxc_put(st, l->lxc);
	free(l->path);
	free(l);
}

/* Under rt_lock. */
static struct un_rt_export *rt_find(struct un_state *st, uint32_t id)
{
	for (struct un_rt_export *e = st->sh->rt_exports; e; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

/* Whether ID is in st->sh->rt_seen, and where it is or would go (*AT); under
 * rt_lock. */
static bool seen_has(const struct un_state *st, uint32_t id, size_t *at)
{
	size_t lo = 0, hi = st->sh->rt_nseen;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (st->sh->rt_seen[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	*at = lo;
	return lo < st->sh->rt_nseen && st->sh->rt_seen[lo] == id;
}

/* Notes ID at AT of st->sh->rt_seen (without memory it is not noted: the
 * export's next open retires nothing, as after a restart); under rt_lock. */
static void seen_add(struct un_state *st, uint32_t id, size_t at)
{
	size_t cap = st->sh->rt_capseen ? 2 * st->sh->rt_capseen : 64;
	uint32_t *ids;

	if (st->sh->rt_nseen == st->sh->rt_capseen) {
		ids = un_sys_realloc(st->sh->rt_seen, cap * sizeof(*ids));
		if (!ids)
			return;
		st->sh->rt_seen = ids;
		st->sh->rt_capseen = cap;
	}
	memmove(st->sh->rt_seen + at + 1, st->sh->rt_seen + at,
		(st->sh->rt_nseen - at) * sizeof(*st->sh->rt_seen));
	st->sh->rt_seen[at] = id;
	st->sh->rt_nseen++;
}

bool un_retire_seen(struct un_state *st, uint32_t id)
{
	size_t at;
	bool seen;

	pthread_mutex_lock(&st->sh->rt_lock);
	seen = seen_has(st, id, &at);
	if (!seen)
		seen_add(st, id, at);
	pthread_mutex_unlock(&st->sh->rt_lock);
	return seen;
}

/* Export ID's entry (path EXPATH), made if it has none; NULL without
 * memory.  Under rt_lock. */
static struct un_rt_export *rt_entry(struct un_state *st, uint32_t id, const char *expath)
{
	struct un_rt_export *e = rt_find(st, id);

	if (e)
		return e;
	e = un_sys_calloc(1, sizeof(*e));
	if (e && !(e->path = un_sys_strdup(expath))) {
		free(e);
		e = NULL;
	}
	if (e) {
		e->id = id;
		e->next = st->sh->rt_exports;
		st->sh->rt_exports = e;
	}
	return e;
}

/* Moves the layers of E that are past retire-time (rule 5), or all with
 * ALL, onto *GONE; under rt_lock. */
static void rt_expire(struct un_state *st, struct un_rt_export *e, bool all,
		      struct un_retired **gone)
{
	int64_t keep = atomic_load(&st->sh->retire_s) * 1000000000, now = now_ns();
	struct un_retired **p = &e->layers, *l;

	while ((l = *p)) {
		if (all || (keep > 0 && now - l->since >= keep)) {
			*p = l->next;
			l->next = *gone;
			*gone = l;
		} else {
			p = &l->next;
		}
	}
}

/* Logs and drops the layers of GONE (out of rt_lock), released because
 * WHY. */
static void rt_release(struct un_state *st, struct un_retired *gone, const char *why)
{
	struct un_retired *next;

	for (; gone; gone = next) {
		next = gone->next;
		un_notice(st,
			  "export %s: retired layer %s released (%s); the handles it "
			  "served are stale",
			  gone->owner->path, gone->path, why);
		rt_put(st, gone);
	}
}

/* A new entry for layer PATH (ROOTFD, C: ownership moves to it), or
 * NULL without memory (both released). */
static struct un_retired *rt_new(struct un_state *st, const char *path, int rootfd,
				 struct un_lxc *c)
{
	struct un_retired *l = un_sys_calloc(1, sizeof(*l));
	char *copy = un_sys_strdup(path);

	if (!l || !copy) {
		free(l);
		free(copy);
		un_sys_close(rootfd);
		un_lxc_put(st, c);
		return NULL;
	}
	*l = (struct un_retired){.refs = 1, .path = copy, .fd = rootfd, .lxc = c};
	return l;
}

void un_retire_add(struct un_state *st, uint32_t id, const char *expath, const char *path,
		   int rootfd, const struct stat *root, struct un_lxc *c,
		   uint64_t key_dev, const char *by)
{
	struct un_retired *l = rt_new(st, path, rootfd, c), *gone = NULL;
	struct un_rt_export *e;

	if (!l) {
		un_notice(st, "export %s: layer %s not retired: out of memory", expath,
			  path);
		return;
	}
	*l = (struct un_retired){.refs = 1,
				 .path = l->path,
				 .fd = rootfd,
				 .root = {.dev = root->st_dev, .ino = root->st_ino},
				 .lxc = c,
				 .key_dev = key_dev,
				 .since = now_ns()};
	pthread_mutex_lock(&st->sh->rt_lock);
	e = rt_entry(st, id, expath);
	if (e) {
		/* the same directory retired again (a version served twice):
		 * the newer entry replaces the older one */
		for (struct un_retired **p = &e->layers; *p; p = &(*p)->next) {
			if ((*p)->root.dev == l->root.dev &&
			    (*p)->root.ino == l->root.ino) {
				gone = *p;
				*p = gone->next;
				gone->next = NULL;
				break;
			}
		}
		l->owner = e;
		l->next = e->layers;
		e->layers = l;
		l = NULL;
	}
	pthread_mutex_unlock(&st->sh->rt_lock);
	if (gone)
		rt_put(st, gone);
	if (l) { /* no memory for the export's entry */
		un_notice(st, "export %s: layer %s not retired: out of memory", expath,
			  path);
		rt_put(st, l);
		return;
	}
	un_notice(
	    st, "export %s: layer %s retired (%s%s): old handles of its files read it",
	    expath, path, by ? "replaced by " : "removed from the stack", by ? by : "");
}

void un_state_retire_time(struct un_state *st, unsigned seconds)
{
	struct un_retired *gone = NULL;

	atomic_store(&st->sh->retire_s, (int64_t)seconds);
	pthread_mutex_lock(&st->sh->rt_lock);
	for (struct un_rt_export *e = st->sh->rt_exports; e; e = e->next)
		rt_expire(st, e, false, &gone);
	pthread_mutex_unlock(&st->sh->rt_lock);
	rt_release(st, gone, "past retire-time");
}

void un_state_retired_list(struct un_state *st, un_retired_fn *fn, void *arg)
{
	int64_t now = now_ns();
	struct un_retired_info info;

	pthread_mutex_lock(&st->sh->rt_lock);
	for (const struct un_rt_export *e = st->sh->rt_exports; e; e = e->next)
		for (const struct un_retired *l = e->layers; l; l = l->next) {
			info = (struct un_retired_info){
			    .export_path = e->path,
			    .export_id = e->id,
			    .layer = l->path,
			    .age_s = (uint64_t)(now - l->since) / 1000000000u};
			fn(&info, arg);
		}
	pthread_mutex_unlock(&st->sh->rt_lock);
}

/* Moves E's layers whose path is LAYER (NULL: all) onto *GONE; under
 * rt_lock.  Returns how many. */
static size_t rt_take(struct un_rt_export *e, const char *layer, struct un_retired **gone)
{
	struct un_retired **p = &e->layers, *l;
	size_t n = 0;

	while ((l = *p)) {
		if (layer && strcmp(l->path, layer) != 0) {
			p = &l->next;
			continue;
		}
		*p = l->next;
		l->next = *gone;
		*gone = l;
		n++;
	}
	return n;
}

size_t un_state_retire_release(struct un_state *st, const char *layer)
{
	struct un_retired *gone = NULL;
	size_t n = 0;

	pthread_mutex_lock(&st->sh->rt_lock);
	for (struct un_rt_export *e = st->sh->rt_exports; e; e = e->next)
		n += rt_take(e, layer, &gone);
	pthread_mutex_unlock(&st->sh->rt_lock);
	rt_release(st, gone, "by an admin");
	return n;
}

void un_retire_fini(struct un_state *st)
{
	struct un_rt_export *e, *next;
	struct un_retired *gone;

	for (e = st->sh->rt_exports; e; e = next) {
		next = e->next;
		gone = NULL;
		rt_expire(st, e, true, &gone);
		for (struct un_retired *n; gone; gone = n) {
			n = gone->next;
			rt_put(st, gone);
		}
		free(e->path);
		free(e);
	}
	st->sh->rt_exports = NULL;
	free(st->sh->rt_seen);
	st->sh->rt_seen = NULL;
	st->sh->rt_nseen = st->sh->rt_capseen = 0;
}

/* ---- resolving (rule 3) ---- */

/* The layers of export ID whose keys have dev KEY_DEV, newest first, with
 * a reference each, into L (room for RT_TRY_MAX); expired ones released. */
static size_t rt_candidates(struct un_state *st, uint32_t id, uint64_t key_dev,
			    struct un_retired **l)
{
	struct un_retired *gone = NULL;
	struct un_rt_export *e;
	size_t n = 0;

	pthread_mutex_lock(&st->sh->rt_lock);
	e = rt_find(st, id);
	if (e) {
		rt_expire(st, e, false, &gone);
		for (struct un_retired *r = e->layers; r && n < RT_TRY_MAX; r = r->next) {
			if (r->key_dev != key_dev)
				continue;
			atomic_fetch_add(&r->refs, 1);
			l[n++] = r;
		}
	}
	pthread_mutex_unlock(&st->sh->rt_lock);
	rt_release(st, gone, "past retire-time");
	return n;
}

/* L leaves export ID's registry, if still in it (rule 5). */
static void rt_drop(struct un_state *st, uint32_t id, struct un_retired *l,
		    const char *why)
{
	struct un_rt_export *e;
	bool found = false;

	pthread_mutex_lock(&st->sh->rt_lock);
	e = rt_find(st, id);
	for (struct un_retired **p = e ? &e->layers : NULL; p && *p; p = &(*p)->next) {
		if (*p == l) {
			*p = l->next;
			l->next = NULL;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&st->sh->rt_lock);
	if (found)
		rt_release(st, l, why);
}

/* The objnums from OBJNUM's up to (not including) the root's in L's
 * index, OBJNUM first, into CHAIN (RT_DEPTH_MAX long): their count. */
static int rt_chain(struct un_lx *lx, uint64_t objnum, uint32_t type, uint64_t *chain)
{
	struct un_lx_entry ent;
	int n = 0, err;

	for (uint64_t o = objnum; o != UN_LX_ROOT; o = ent.parent) {
		if (n == RT_DEPTH_MAX)
			return -ELOOP;
		err = un_lx_get(lx, o, &ent);
		if (err)
			return err == -ENOENT ? -ESTALE : err;
		if (o == objnum && ent.type != type)
			return -ESTALE;
		if (ent.parent == 0)
			return -ESTALE; /* a root that is not UN_LX_ROOT: damaged */
		chain[n++] = o;
	}
	return n;
}

/* Opens the object OBJNUM (TYPE) of retired layer L into *FD (O_PATH):
 * -ENOENT when L's directory is no longer there (rule 5), -ESTALE when
 * the object is not in it. */
static int retired_open(struct un_retired *l, uint64_t objnum, uint32_t type, int *fd)
{
	struct un_lx *lx = un_lxc_lx(l->lxc);
	uint64_t *chain = NULL, got;
	struct un_lx_entry ent;
	struct stat st;
	uint32_t t;
	int cur = -1, next, n, err;

	err = un_sys_fstatat(AT_FDCWD, l->path, &st, AT_SYMLINK_NOFOLLOW);
	if (err || st.st_dev != l->root.dev || st.st_ino != l->root.ino)
		return -ENOENT;
	chain = un_sys_malloc(RT_DEPTH_MAX * sizeof(*chain));
	err = chain ? (n = rt_chain(lx, objnum, type, chain)) : -ENOMEM;
	if (err < 0)
		goto out;
	err = cur = un_sys_dup(l->fd);
	for (int i = n - 1; i >= 0 && cur >= 0; i--) {
		err = un_lx_get(lx, chain[i], &ent);
		if (err)
			break;
		err = next = un_sys_open_beneath(cur, ent.name, O_PATH);
		un_sys_close(cur);
		cur = next;
	}
	if (cur < 0 || err < 0)
		goto out;
	err = un_sys_fstat(cur, &st);
	if (!err && ((uint32_t)(st.st_mode & S_IFMT) != type || st.st_dev != l->root.dev))
		err = -ESTALE;
	if (!err)
		err = un_lx_ino(lx, st.st_ino, &got, &t);
	if (!err && (got != objnum || t != type))
		err = -ESTALE;
out:
	free(chain);
	if (!err) {
		*fd = cur;
		return 0;
	}
	if (cur >= 0)
		un_sys_close(cur);
	return err == -ENOENT || err == -ENOTDIR || err == -ELOOP ? -ESTALE : err;
}

/* The object of hop H (node ID's record) from EX's retired layers. */
static int retire_open_obj(struct un_export *ex, const struct un_node_hop *h,
			   struct un_obj **out)
{
	struct un_retired *cand[RT_TRY_MAX];
	const struct un_obj_ident who = {
	    .id = h->id,
	    .fileid = h->fileid,
	    .parent = h->parent,
	    .type = h->type,
	    .name = h->name,
	    .len = h->namelen,
	};
	size_t n = rt_candidates(ex->st, ex->id, h->di.dev, cand);
	struct un_obj *o;
	int fd = -1, err = -ESTALE;

	for (size_t i = 0; i < n; i++) {
		if (fd < 0 && err == -ESTALE) {
			err = retired_open(cand[i], h->di.ino, (uint32_t)h->type, &fd);
			if (err == -ENOENT) {
				rt_drop(ex->st, ex->id, cand[i],
					"its directory is no longer there");
				err = -ESTALE;
			}
		}
		rt_put(ex->st, cand[i]);
	}
	if (err)
		return err;
	o = un_obj_new(1, &who);
	if (!o) {
		un_sys_close(fd);
		return -ENOMEM;
	}
	o->inst[0] = (struct un_inst){.fd = fd, .layer = (uint16_t)(ex->nlayers - 1)};
	o->ninst = 1;
	o->retired = true;
	*out = o;
	return 0;
}

static bool rt_any(struct un_state *st, uint32_t id)
{
	struct un_rt_export *e;
	bool any;

	pthread_mutex_lock(&st->sh->rt_lock);
	e = rt_find(st, id);
	any = e && e->layers;
	pthread_mutex_unlock(&st->sh->rt_lock);
	return any;
}

int un_retire_resolve(struct un_export *ex, un_id id, struct un_obj **out)
{
	struct un_node_hop *hops = NULL, *h;
	size_t n;
	int err;

	if (!rt_any(ex->st, ex->id))
		return -ESTALE;
	err = un_node_path(ex->st, id, &hops, &n);
	if (err)
		return err;
	h = &hops[n - 1];
	err = -ESTALE;
	if (n >= 2 && hops[0].id == ex->root_id &&
	    (S_ISREG(h->type) || S_ISLNK(h->type)) && un_devino_is_key(h->di))
		err = retire_open_obj(ex, h, out);
	free(hops);
	return err;
}

bool un_obj_retired(const struct un_obj *o)
{
	return o->retired;
}
