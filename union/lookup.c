/* SPDX-License-Identifier: Apache-2.0 */
/* lookup.c - looking names up: one name across the layers of its parent
 * (lookup_in), and the walks that resolve a node id (un_resolve) or a name
 * in a directory (un_lookup) hop by hop, through the resolve cache
 * (rcache.c) where its entries hold.
 *
 * A lookup walks the parent's stack top-most first and folds what each
 * layer holds under the name into one struct lookup (STYLE item 6) with
 * un_merge_step, the rule readdir.c shares:
 *   - a white-out ends the walk: the name is gone unless a directory was
 *     kept above, which then merges no further;
 *   - a non-directory is the result if nothing was kept above, and is
 *     hidden (ending the walk) below a directory;
 *   - a directory joins the result; an opaque one ends the walk;
 *   - in a lower layer, an absent name with an OCI ".wh.NAME" is a
 *     white-out, and a ".wh." name is private: absent.
 *
 * Invariants:
 *  1. Every open is of one validated component with O_PATH|O_NOFOLLOW,
 *     beneath the parent instance (lookup_layer): a symlink is an object
 *     whose target we return, never a path we follow.
 *  2. A lookup reads the clock before any layer (lookup_in), and a walk
 *     the node table's epoch and the clock before the table or any stamp
 *     (walk_init, resolve_once), so nothing the caches remember from them
 *     is dated later than what was read.
 *  3. Walks run with the engine's identity (resolve, lookup): a handle
 *     names its object whatever the caller may search on the way, as in
 *     knfsd, and the caller's right to search a directory is judged on the
 *     merged directory by the server.
 *  4. A hop that is gone or names another node makes the whole handle
 *     stale (walk_hop); resolve walks again, RESOLVE_TRIES times at most,
 *     as a rename changes the layer before the table.
 *  5. An object handed out is the caller's to change, unless it is a view
 *     (walk_out): the cache's own object goes out as a copy.
 *  6. A node that every try found gone or replaced may still be served
 *     from a retired layer (resolve, retire.c): read only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "resolve.h"

#define RESOLVE_TRIES 3 /* walks of a path whose names change meanwhile */

struct lookup {
	struct un_export *ex;
	const struct un_obj *dir;
	const char *name;
	size_t len;
	bool private;	    /* a ".wh." name: absent from every lower layer */
	bool wh_file;	    /* ended by an xattr white-out: its ctime matters */
	int8_t opq;	    /* the last kept one's own opaque flag; -1: not read */
	struct timespec t0; /* clock before any layer was read (opaque.c rule 2) */
	struct un_merge m;
	struct un_inst *found; /* kept instances, descriptors owned */
	struct un_devino *di;  /* their raw (dev, ino); all four dir->ninst long */
	struct un_devino *key; /* their identities (un_layer_key) */
	long long *ct, *mt;    /* their ctimes and mtimes, ns (stamps) */
	struct stat top;       /* of found[0] */
};

/* Keeps descriptor FD (ownership moves to LK) as the next instance. */
static void lookup_keep(struct lookup *lk, int fd, uint16_t layer, const struct stat *st,
			struct un_devino key)
{
	unsigned n = lk->m.nfound - 1;

	lk->found[n] = (struct un_inst){.fd = fd, .layer = layer};
	lk->di[n] = (struct un_devino){.dev = st->st_dev, .ino = st->st_ino};
	lk->key[n] = key;
	lk->ct[n] = un_ts_ns(&st->st_ctim);
	lk->mt[n] = un_ts_ns(&st->st_mtim);
	lk->opq = -1;
	if (n == 0)
		lk->top = *st;
}

/* The name is absent from layer dir PI: a white-out if OCI says so. */
static int lookup_absent(struct lookup *lk, const struct un_inst *pi, bool lower)
{
	int r = 0;

	if (lower && !lk->private)
		r = un_oci_whiteout_exists(pi->fd, lk->name, lk->len);
	if (r < 0)
		return r;
	un_merge_step(&lk->m, r ? UN_SEEN_WHITEOUT : UN_SEEN_NONE);
	return 0;
}

/* un_dir_opaque of the kept directory FD (stat ST) named LK->name in PFD;
 * its own part goes to LK->opq (rcache.c rule 11). */
static int lookup_opaque(struct lookup *lk, int fd, int pfd, const struct stat *st,
			 bool lower)
{
	int r = un_opq_own(fd, st, lower, &lk->t0);

	if (r < 0)
		return r;
	lk->opq = (int8_t)r;
	if (r || !lower)
		return r;
	return un_oci_whiteout_exists(pfd, lk->name, lk->len);
}

/* Folds layer I of the parent's stack into LK. */
static int lookup_layer(struct lookup *lk, size_t i)
{
	const struct un_inst *pi = &lk->dir->inst[i];
	bool lower = lk->ex->layers[pi->layer].lower;
	struct un_devino key;
	struct stat st;
	int fd, seen, err;

	if (lower && lk->private)
		return lookup_absent(lk, pi, lower);
	fd = un_sys_open_beneath(pi->fd, lk->name, O_PATH);
	if (fd == -ENOENT)
		return lookup_absent(lk, pi, lower);
	if (fd < 0)
		return fd;
	err = un_sys_fstat(fd, &st);
	if (err)
		goto out;
	err = seen = un_whiteout_classify(fd, "", &st);
	if (err < 0)
		goto out;
	err = 0;
	if (seen == UN_SEEN_WHITEOUT && S_ISREG(st.st_mode))
		lk->wh_file = true;
	if (!un_merge_step(&lk->m, (enum un_seen)seen))
		goto out;
	err = un_layer_key(lk->ex, pi->layer, &st, &key);
	if (err) {
		lk->m.nfound--; /* not kept */
		goto out;
	}
	lookup_keep(lk, fd, pi->layer, &st, key);
	/* Opaqueness matters only when the parent has a layer below this one. */
	if (seen == UN_SEEN_DIR && i + 1 < lk->dir->ninst && !lk->m.stop) {
		err = lookup_opaque(lk, fd, pi->fd, &st, lower);
		lk->m.stop = err == 1;
		err = err < 0 ? err : 0;
	}
	fd = -1; /* kept: LK owns it */
out:
	un_sys_close(fd);
	return err;
}

/* The objnum of the path of LK's name in the index of its top instance's
 * layer (lowerid.c rule 7), or 0. */
static uint64_t lookup_pathnum(const struct lookup *lk)
{
	uint16_t layer = lk->found[0].layer;

	for (size_t i = 0; i < lk->dir->ninst; i++)
		if (lk->dir->inst[i].layer == layer)
			return un_layer_pathnum(lk->ex, layer, lk->dir->inst[i].fd,
						lk->name, lk->len, lk->key[0]);
	return 0;
}

/* Makes the object LK found, giving it its node id; LK's descriptors move
 * into it on success. */
static int lookup_obj(struct lookup *lk, struct un_obj **out)
{
	struct un_node_obs obs = {
	    .root = lk->ex->root_id,
	    .parent = lk->dir->id,
	    .name = lk->name,
	    .namelen = lk->len,
	    .type = lk->top.st_mode & S_IFMT,
	    .inst = lk->key,
	    .raw = lk->di,
	    .ninst = lk->m.nfound,
	    .links = un_links_of(lk->ex, lk->found[0].layer, &lk->top),
	    .ex = lk->ex,
	};
	struct un_obj_ident who = {
	    .parent = lk->dir->id,
	    .type = obs.type,
	    .name = lk->name,
	    .len = lk->len,
	};
	struct un_obj *o;
	int err;

	if (obs.links == UN_LINKS_GROUP)
		obs.pathnum = lookup_pathnum(lk);
	err = un_node_assign(lk->ex->st, &obs, 1, &who.id, &who.fileid);
	if (err)
		return err;
	o = un_obj_new(lk->m.nfound, &who);
	if (!o)
		return -ENOMEM;
	o->ninst = lk->m.nfound;
	memcpy(o->inst, lk->found, o->ninst * sizeof(o->inst[0]));
	lk->m.nfound = 0;
	*out = o;
	return 0;
}

/* "." and "..": ".." of the root is the root. */
static int lookup_dots(struct un_export *ex, struct un_obj *dir, size_t len, bool view,
		       struct un_obj **out)
{
	un_id id = dir->id == ex->root_id ? dir->id : dir->parent;

	if (len == 1) {
		*out = un_obj_get(dir);
		return 0;
	}
	return view ? un_resolve_view(ex, id, out) : un_resolve(ex, id, out);
}

/* un_lookup of a name other than "." and "..", which un_name_check
 * passed (LEN), with the engine's identity already taken; with RD, what it
 * read, for the resolve cache. */
static int lookup_in(struct un_export *ex, const struct un_obj *dir, const char *name,
		     size_t len, struct un_obj **out, struct un_lookup_read *rd)
{
	struct lookup *lk;
	size_t i;
	int err = 0;

	/* One allocation for LK and its arrays, as long as DIR's stack. */
	lk = un_sys_malloc(sizeof(*lk) +
			   dir->ninst * (sizeof(lk->found[0]) + 2 * sizeof(lk->di[0]) +
					 2 * sizeof(lk->ct[0])));
	if (!lk)
		return -ENOMEM;
	*lk = (struct lookup){.ex = ex, .dir = dir, .name = name, .len = len, .opq = -1};
	lk->di = (struct un_devino *)(lk + 1);
	lk->key = lk->di + dir->ninst;
	lk->ct = (long long *)(lk->key + dir->ninst);
	lk->mt = lk->ct + dir->ninst;
	lk->found = (struct un_inst *)(lk->mt + dir->ninst);
	lk->private = un_name_private(name, len);
	clock_gettime(CLOCK_REALTIME, &lk->t0);
	for (i = 0; i < dir->ninst && !lk->m.stop && !err; i++)
		err = lookup_layer(lk, i);
	if (!err && lk->m.nfound == 0)
		err = -ENOENT;
	for (unsigned k = 0; !err && rd && k < lk->m.nfound; k++)
		rd->stamps[k] = (struct un_rc_stamp){.dev = lk->di[k].dev,
						     .ino = lk->di[k].ino,
						     .ctime = lk->ct[k],
						     .mtime = lk->mt[k],
						     .layer = lk->found[k].layer};
	if (!err)
		err = lookup_obj(lk, out);
	if (rd) {
		/* an absence that rests on a white-out file's xattr: none */
		rd->nvis = err == -ENOENT && lk->wh_file ? 0 : i;
		rd->open = !lk->m.stop;
		rd->opq = lk->opq;
	}
	for (unsigned k = 0; k < lk->m.nfound; k++) /* left only on failure */
		un_sys_close(lk->found[k].fd);
	free(lk);
	return err;
}

/* Sets W up for a walk in EX: the epoch and the clock read before anything
 * else, room for the stamps (on W itself for up to 16 layers). */
static int walk_init(struct un_walk *w, struct un_export *ex)
{
	w->ex = ex;
	w->cur = NULL;
	w->have = 0;
	w->shared = w->ctop_ok = w->ntop_ok = w->drained = w->view_end = false;
	w->buf = w->sbuf;
	if (ex->nlayers + 1 > UN_RC_WALK_STAMPS)
		w->buf = un_sys_malloc(2 * (ex->nlayers + 1) * sizeof(w->cst[0]));
	if (!w->buf)
		return -ENOMEM;
	w->cst = w->buf;
	w->nst = w->cst + ex->nlayers + 1;
	w->epoch = atomic_load(&ex->st->node_epoch);
	clock_gettime(CLOCK_REALTIME, &w->t0);
	return 0;
}

static void walk_fini(struct un_walk *w)
{
	un_obj_put(w->cur);
	if (w->buf != w->sbuf)
		free(w->buf);
}

/* Moves W on to NEXT (reference moves), whose stamps are in W->nst. */
static void walk_advance(struct un_walk *w, struct un_obj *next, bool shared)
{
	struct un_rc_stamp *t = w->cst;

	un_obj_put(w->cur);
	w->cur = next;
	w->shared = shared;
	w->have = S_ISDIR(next->type) ? next->ninst : 1;
	w->cst = w->nst;
	w->nst = t;
	w->ctop = w->ntop;
	w->ctop_ok = w->ntop_ok;
	w->ntop_ok = false;
}

/* Looks NAME (checked: LEN) up in cur, the parent's stamps taken first
 * (rcache.c rule 2), and remembers the result if it may; W moves on to it. */
static int walk_lookup(struct un_walk *w, const char *name, size_t len)
{
	struct un_lookup_read rd = {.stamps = w->nst};
	struct un_obj *next;
	int err;

	w->ntop_ok = false;
	err = un_rc_stamps(w, w->cur->ninst);
	if (!err)
		err = lookup_in(w->ex, w->cur, name, len, &next, &rd);
	if (err == -ENOENT && rd.nvis)
		un_rc_remember_absent(w, name, len, &rd);
	if (err)
		return err;
	walk_advance(w, next, un_rc_remember(w, next, &rd, NULL));
	return 0;
}

/* Moves W on from the cache's entry E if it holds (a reference of the
 * caller's, which this drops; HOP as rc_hit says): 1, or -ENOENT from a
 * negative entry; 0 for a miss, and a stale entry leaves its slots. */
static int walk_cached(struct un_walk *w, struct un_rc_entry *e,
		       const struct un_node_hop *hop)
{
	struct un_obj *next = NULL;
	bool shared = false;
	int r = 0;

	if (!e) {
		un_count_rcache(false);
		return 0;
	}
	if (!un_rc_hit(w, e, hop, &next, &shared)) {
		un_count_rcache(false);
		un_rc_evict(w->ex, e);
	} else if (next) {
		un_count_rcache(true);
		walk_advance(w, next, shared);
		r = 1;
	} else {
		un_count_rcache(true);
		r = -ENOENT;
	}
	un_rc_put(e);
	return r;
}

/* One hop: from the cache where its entry holds, else by a lookup. */
static int walk_hop(struct un_walk *w, const struct un_node_hop *hop)
{
	size_t len;
	int err;

	if (walk_cached(w, un_rc_get(w->ex, hop->id), hop) == 1)
		return 0; /* (only the name index holds negative entries) */
	if (!S_ISDIR(w->cur->type) || un_name_check(hop->name, &len) ||
	    len != hop->namelen ||
	    (hop->name[0] == '.' && (len == 1 || (len == 2 && hop->name[1] == '.'))))
		return -ESTALE; /* the table names no such hop */
	err = walk_lookup(w, hop->name, len);
	if (err == -ENOENT || err == -ENOTDIR || err == -EINVAL || err == -ENAMETOOLONG)
		err = -ESTALE;
	if (!err && w->cur->id != hop->id)
		err = -ESTALE; /* replaced: that name is another node now */
	return err;
}

/* A view of cur (rcache.c rule 10): its descriptors stay cur's, and what
 * W read of it (inst[0]'s stat, its stamps) goes with it.  It serves the
 * one call that made it: un_getattr of it gives that stat, and un_lookup in
 * it compares entries with those stamps instead of taking them again, both
 * as they were a few microseconds earlier in the same call; a change racing
 * with the call may or may not show, as with any lookup, and the next call
 * sees it.  Nothing changes a view (object.c rule 3). */
static int view_of(struct un_walk *w, struct un_obj **out)
{
	const struct un_obj *c = w->cur;
	size_t off = (sizeof(*c) + c->ninst * sizeof(c->inst[0]) + 7) & ~(size_t)7;
	struct un_obj *v = un_sys_malloc(off + c->ninst * sizeof(w->cst[0]));

	if (!v)
		return -ENOMEM;
	memcpy(v, c, sizeof(*c) + c->ninst * sizeof(c->inst[0]));
	atomic_init(&v->ref, 1);
	v->cap = c->ninst;
	v->owner = un_obj_get(w->cur);
	atomic_init(&v->memo, NULL);
	v->have_top = w->ctop_ok;
	if (w->ctop_ok)
		v->top = w->ctop;
	v->nstamps = 0;
	v->stamps = (struct un_rc_stamp *)((char *)v + off);
	if (w->have >= c->ninst) {
		memcpy(v->stamps, w->cst, c->ninst * sizeof(w->cst[0]));
		v->nstamps = c->ninst;
	}
	*out = v;
	return 0;
}

/* Hands W's object out (rule 5): a view when VIEW, else the object, or a
 * copy of it when it is the cache's (rcache.c rule 4), since a caller may
 * change it (a copy-up puts a new top instance on it).  A view saves a dup
 * and a close per instance for the calls that only read the object (the
 * server's GETATTR, ACCESS and the directory of LOOKUP). */
static int walk_out(struct un_walk *w, bool view, struct un_obj **out)
{
	if (view)
		return view_of(w, out);
	if (w->shared)
		return un_obj_copy(w->cur, out);
	*out = un_obj_get(w->cur);
	return 0;
}

/* Walks HOPS[1..n-1] down from the root; any hop that is gone or names
 * another node makes the whole handle stale. */
static int resolve_walk(struct un_walk *w, const struct un_node_hop *hops, size_t n,
			bool view, struct un_obj **out)
{
	int err;

	w->have = 0;
	w->shared = true;
	w->ctop_ok = w->ntop_ok = false;
	err = un_rc_root(w->ex, &w->cur);
	for (size_t i = 1; i < n && !err; i++) {
		/* only a view's last hop may give no descriptor (rcache.c
		 * rules 14, 15) */
		w->view_end = view && i == n - 1;
		err = walk_hop(w, &hops[i]);
	}
	w->view_end = false;
	if (!err)
		err = walk_out(w, view, out);
	un_obj_put(w->cur);
	w->cur = NULL;
	return err;
}

/* One walk to ID: the path from the cache when it has every hop (only on
 * a first try: a later one reads the table), else from the table. */
static int resolve_once(struct un_walk *w, un_id id, bool first, bool view,
			struct un_obj **out)
{
	struct un_node_hop *hops = NULL, chain[UN_RC_CHAIN_MAX];
	size_t n;
	int err;

	w->epoch = atomic_load(&w->ex->st->node_epoch); /* before the table */
	if (first && un_rc_path(w, id, chain, &n))
		return resolve_walk(w, chain, n, view, out);
	err = un_node_path(w->ex->st, id, &hops, &n);
	if (err)
		return err;
	err = -ESTALE; /* a node of another export */
	if (n >= 2 && hops[0].id == w->ex->root_id)
		err = resolve_walk(w, hops, n, view, out);
	free(hops);
	return err;
}

static int lookup(struct un_export *ex, struct un_obj *dir, const char *name, bool view,
		  struct un_obj **out);

/* An id the table does not hold that a layer index computes (lowerid.c
 * rule 5): walked to from the root by the path the index gives, as a first
 * LOOKUP would, and standing only if the walk ends at a node of that id. */
static int lower_resolve(struct un_export *ex, un_id id, struct un_obj **out)
{
	struct un_obj *cur = NULL, *next;
	char *path, *save = NULL;
	int err;

	err = un_lower_path(ex, id, &path);
	if (!err)
		err = un_root(ex, &cur);
	for (char *t = err ? NULL : strtok_r(path, "/", &save); t && !err;
	     t = strtok_r(NULL, "/", &save)) {
		err = lookup(ex, cur, t, false, &next);
		un_obj_put(cur);
		cur = err ? NULL : next;
	}
	free(path);
	if (!err && cur->id != id)
		err = -ESTALE;
	if (err) {
		if (cur)
			un_obj_put(cur);
		return err == -ENOENT || err == -ENOTDIR ? -ESTALE : err;
	}
	*out = cur;
	return 0;
}

static int resolve(struct un_export *ex, un_id id, bool view, struct un_obj **out)
{
	struct un_creds saved;
	struct un_walk w;
	int err;

	if (id == ex->root_id)
		return view ? un_rc_root(ex, out) : un_root(ex, out);
	err = walk_init(&w, ex);
	if (err)
		return err;
	/* A handle names its object whatever the caller may search on the way
	 * (as knfsd): the walk runs with the engine's identity. */
	un_sys_creds_override(&saved);
	/* A rename (dir.c) changes the layer first and the table after it:
	 * a walk in between finds the old name gone.  The path read again
	 * names the new place; a node really gone stays -ESTALE. */
	err = -ESTALE;
	for (int tries = 0; tries < RESOLVE_TRIES && err == -ESTALE; tries++)
		err = resolve_once(&w, id, tries == 0, view, out);
	/* A rename or link whose table commit a crash or a failure cut short:
	 * adopted now (intent.c), then the path read again names the object. */
	if (err == -ESTALE && un_intents_settle_id(ex, id))
		err = resolve_once(&w, id, false, view, out);
	/* Gone or replaced: the old object, if a retired layer holds it
	 * (retire.c rule 3); never a view, which is no loss to its caller. */
	if (err == -ESTALE)
		err = un_retire_resolve(ex, id, out);
	if (err == -ESTALE && un_id_is_lower(id))
		err = lower_resolve(ex, id, out);
	un_sys_creds_revert(&saved);
	walk_fini(&w);
	return err;
}

int un_resolve(struct un_export *ex, un_id id, struct un_obj **out)
{
	return resolve(ex, id, false, out);
}

int un_resolve_view(struct un_export *ex, un_id id, struct un_obj **out)
{
	return resolve(ex, id, true, out);
}

/* un_lookup of NAME (checked: LEN) in DIR through the cache: an entry
 * found by the name index (rcache.c rule 7) when it holds, else a lookup
 * whose result the cache may remember. */
static int lookup_cached(struct un_export *ex, struct un_obj *dir, const char *name,
			 size_t len, bool view, struct un_obj **out)
{
	struct un_walk w;
	int err;

	err = walk_init(&w, ex);
	if (err)
		return err;
	w.cur = un_obj_get(dir);
	w.shared = false;
	if (dir->nstamps == dir->ninst) { /* a view: its walk's (rcache.c rule 10) */
		memcpy(w.cst, dir->stamps, dir->ninst * sizeof(w.cst[0]));
		w.have = dir->ninst;
	}
	w.view_end = view;
	err = walk_cached(&w, un_rn_get(ex, dir->id, name, len), NULL);
	w.view_end = false;
	if (err == 0)
		err = walk_lookup(&w, name, len);
	else if (err == 1)
		err = 0;
	if (!err)
		err = walk_out(&w, view, out);
	walk_fini(&w);
	return err;
}

/* lookup in bare DIR (rcache.c rule 14), which has no descriptor to look
 * in: in DIR resolved whole. */
static int lookup_whole(struct un_export *ex, struct un_obj *dir, const char *name,
			bool view, struct un_obj **out)
{
	struct un_obj *whole;
	int err = un_resolve(ex, dir->id, &whole);

	if (err)
		return err;
	err = lookup(ex, whole, name, view, out);
	un_obj_put(whole);
	return err;
}

static int lookup(struct un_export *ex, struct un_obj *dir, const char *name, bool view,
		  struct un_obj **out)
{
	struct un_creds saved;
	size_t len;
	int err;

	if (!S_ISDIR(dir->type))
		return -ENOTDIR;
	if (dir->bare)
		return lookup_whole(ex, dir, name, view, out);
	err = un_name_check(name, &len);
	if (err)
		return err;
	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return lookup_dots(ex, dir, len, view, out);
	/* As overlayfs: the caller's right to search DIR is judged on the
	 * merged directory (the server's LOOKUP check), the layers are searched
	 * with the engine's identity, since a lower instance may carry other
	 * modes than the merged one. */
	un_sys_creds_override(&saved);
	err = lookup_cached(ex, dir, name, len, view, out);
	un_sys_creds_revert(&saved);
	return err;
}

int un_lookup(struct un_export *ex, struct un_obj *dir, const char *name,
	      struct un_obj **out)
{
	return lookup(ex, dir, name, false, out);
}

int un_lookup_view(struct un_export *ex, struct un_obj *dir, const char *name,
		   struct un_obj **out)
{
	return lookup(ex, dir, name, true, out);
}
