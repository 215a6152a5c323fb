/* SPDX-License-Identifier: Apache-2.0 */
/* rcache.c - the resolve cache: per export, the objects that walks found,
 * by node id (ex->rc) and by (parent, name) (ex->rn, which also holds names
 * found absent), so that a walk (lookup.c) can take a hop from an entry
 * instead of looking its name up again in every layer of its parent (an
 * openat2, an fstat, white-out and opaque checks and a table read per name
 * and layer).
 *
 * An entry keeps stamps (dev, ino, ctime, layer) of the instances of its
 * parent that its lookup read (the first nvis: down to the one that ended
 * the lookup) and of its own instances, and the node table's epoch read
 * before its walk.  A hop uses an entry when rules 1 to 3 hold.
 *
 * Invariants:
 *  1. The node still has the entry's parent and name (rc_same_name): the
 *     table's epoch is the one read before the walk that made the entry
 *     (node.c invariant 10), or, for a directory's entry on un_resolve's
 *     walk, the table's record of the hop names the entry's parent and name.
 *  2. Every stamp is equal now: the parent's (rc_valid_parent) and the
 *     entry's own (rc_hit_dir, rc_hit_file).  A walk takes a parent's
 *     stamps before it reads any name in it (un_rc_stamps), so equal stamps
 *     down the path mean every lookup of the walk would find what it found.
 *  3. Every parent stamp was settled when the entry was made
 *     (rc_parent_settled; opaque.c rule 2).  An own stamp that was not is
 *     kept as RC_UNSETTLED, which equals no ctime (rc_own_kept).
 *  4. An entry and its object never change once in a slot; entries are
 *     reference counted (un_rc_put).  A slot's try-lock guards only its
 *     pointers and a busy bucket is a miss (bucket_get, bucket_swap); an
 *     entry found stale leaves its slots at once (un_rc_evict).
 *  5. Only directories' entries hold descriptors, and the entries of all
 *     exports together hold at most UN_RC_FDS_MAX and a quarter of
 *     RLIMIT_NOFILE (rc_reserve): past that, a directory's entry is bare
 *     (rule 14), it never makes the server run out of descriptors.
 *  6. A non-directory's entry holds the parent instance it was found in
 *     and its stamp, no descriptor: a hit opens the name again there and
 *     takes the object only if it is the same (dev, ino, type) and still no
 *     white-out (rc_hit_file, rc_same_file).
 *  7. The name index holds the same entries by (parent, name) for
 *     un_lookup (un_rn_get); an entry says which (parent, name) it is, so a
 *     hash collision is a miss (rc_is_name).
 *  8. A walk takes a node's path from entries alone only when every hop up
 *     to the root has an entry of the epoch read before (un_rc_path); each
 *     hop is still checked as rule 2 says.
 *  9. A name found absent is remembered, in the name index only, when the
 *     absence rests on the entries of the parent's instances alone
 *     (un_rc_remember_absent; lookup_in says which).  A hit is -ENOENT.
 * 10. A view (un_resolve_view, un_lookup_view) borrows the descriptors of
 *     the object its walk ended at and carries what the walk read of it:
 *     inst[0]'s stat and its stamps, for the one call that made it
 *     (view_of in lookup.c).
 * 11. A directory's entry whose parent holds, but one of whose own
 *     instances shows another ctime (or RC_UNSETTLED), still holds if that
 *     instance's own opaque flag reads as its lookup read it
 *     (rc_same_dir_inst); rc_refresh then remembers the new ctimes once
 *     they are settled.
 * 12. The indexes grow with their entries, in the export's own mapping:
 *     the export, then UN_RC_BUCKETS pairs of buckets (one of each
 *     index) reserved as address space (un_rc_export_new), of which the
 *     first nb are usable; a key's bucket is the low bits of its hash.  An
 *     insert that leaves an index more than 3/4 full, or that replaced a
 *     way of a full bucket while it is more than half full, doubles nb
 *     (rc_grow, one thread at a time): the new half is made usable, the
 *     new nb published, then each old bucket B of each index, under its
 *     lock and that of B + the old nb, moves the entries whose hash now
 *     names the latter there (rc_split).  A lookup that read the old nb
 *     misses (as on a busy bucket); a swap reads nb again under its
 *     bucket's lock and changes nothing if it moved, so no entry is put
 *     where no lookup looks.  So an export that caches little holds three
 *     pages with its buckets (the shared exports and the client unions
 *     alike: un_export_open cannot tell which will be busy); the buckets
 *     never shrink, and un_rc_export_free unmaps them with the export: no
 *     allocation of the malloc heap is as large, so a union that goes
 *     leaves no hole there that the next one would not fill.
 * 13. An entry's bytes (its own, and a directory's object) count in
 *     ex->rc.bytes while it holds a slot of either index (e->slots goes
 *     from 0 to 1 and back); rc_total adds the usable buckets.  With a
 *     budget (ex->rc.budget: what un_export_cfg.mem_bytes leaves of the
 *     union's own part), an entry that would take the cache over it takes
 *     no empty way and the buckets do not grow: it only replaces its own
 *     key's entry, or the next way in turn of a full bucket, whose entry
 *     then leaves the other index too (its bytes go with its last slot),
 *     so the cache stays about at its budget and still follows the
 *     working set.
 * 14. A bare entry (a directory's, made when its descriptors would take the
 *     cache past rule 5's bound) holds no object, only its own instances'
 *     stamps, as a non-directory's does (rule 6).  It serves only the last
 *     hop of a walk to a view (W->view_end: un_resolve_view,
 *     un_lookup_view), whose callers read its attributes and id alone, and
 *     only while every own instance is the same (dev, ino, layer) with the
 *     same settled ctime, read by an fstatat of its name in the parent's
 *     instance of that layer (rc_hit_bare): the parent's stamps being
 *     equal, the name still opens those inodes, and their own ctimes equal
 *     mean their opaque flags are as the lookup read them (what rule 11
 *     reads again when a ctime moved, a bare hit takes for a miss).  The
 *     object it gives is bare (struct un_obj's BARE: no descriptor);
 *     un_lookup in it resolves it whole first (lookup.c).  So a GETATTR
 *     of a merged directory beyond the bound costs a stat a part by name,
 *     as within it by descriptor, where a full lookup read every layer
 *     (bench/README.md, "Merged directories as cheap as plain ones").
 * 15. A hit on a non-directory's entry that ends a view's walk (the server's
 *     GETATTR, ACCESS and LOOKUP read only its attributes and id) stats
 *     the name in the parent's instance (fstatat, no symlink followed: one
 *     validated component) instead of opening it: the object it gives has
 *     no descriptor (-1), which a view's callers never use (include/union.h,
 *     un_resolve_view).  Rule 6's check is the same, on the same stat.
 *     That stat comes from the entry's file memo while its parent's watch
 *     proves it unchanged (watch.c rule 7: a file of one link, at most a
 *     second old): the memo is the one part of an entry that changes.
 *
 * What ctime does not cover (opaque.c, "not covered") this does not either.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "resolve.h"

/* A resolved object, shared by the cache and the walks that use it; never
 * changes once in a slot (rule 4).  A directory's holds its object; a
 * non-directory's holds no descriptor, only what a hit checks (rule 6):
 * an O_PATH descriptor pins its inode, and a removed file's blocks should
 * not wait for its slot to be reused. */
struct un_rc_entry {
	atomic_uint ref;
	atomic_uint slots; /* slots of the two indexes it holds (rule 13) */
	uint32_t bytes;	   /* its allocation, and a directory's object */
	un_id id, parent, fileid;
	uint64_t epoch;	    /* node table epoch read before its walk */
	mode_t type;	    /* S_IFMT */
	struct un_obj *obj; /* a directory's, read only (rule 4); NULL */
	uint16_t namelen;
	char *name;  /* its name in PARENT, NUL-ended, after st[] */
	size_t nvis; /* instances of the parent the lookup read */
	bool open;   /* it read them all with no stop: more would be read too */
	int8_t opq;  /* a directory's last instance's own opaque flag as read;
		      * -1: not read (rule 11) */
	/* a non-directory's stat as its parent's watch proves it (rule 15),
	 * made on first use; it changes, as the object's memo (watch.c) */
	_Atomic(struct un_filememo *) fmemo;
	size_t nown; /* its own stamps: obj->ninst, a bare one's (rule 14), 1 */
	/* nvis of the parent's, then its own NOWN (ctime RC_UNSETTLED if it
	 * was not settled) */
	struct un_rc_stamp st[];
};

#define RC_UNSETTLED LLONG_MIN /* equals no ctime */

/* Descriptors held by entries of every export (rule 5), and the
 * bound on them, read once: a quarter of what the process may open. */
static atomic_size_t rc_nfds, rc_cap;

void un_rc_test_fds_max(size_t n)
{
	atomic_store(&rc_cap, n);
}

static size_t rc_fds_max(void)
{
	size_t cap = atomic_load(&rc_cap);
	struct rlimit rl;

	if (cap)
		return cap;
	cap = UN_RC_FDS_MAX;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur / 4 < cap)
		cap = (size_t)(rl.rlim_cur / 4);
	atomic_store(&rc_cap, cap ? cap : 1);
	return cap;
}

void un_rc_put(struct un_rc_entry *e)
{
	if (!e || atomic_fetch_sub(&e->ref, 1) != 1)
		return;
	if (e->obj) {
		atomic_fetch_sub(&rc_nfds, e->obj->ninst);
		un_obj_put(e->obj);
	}
	un_filememo_free(atomic_load(&e->fmemo));
	free(e);
}

/* Slots come in buckets of UN_RC_WAYS (one try-lock each, one cache line
 * or so): a key may sit in any way of its bucket, so a few keys that hash
 * alike do not evict each other on every use. */
static bool rc_is_id(const struct un_rc_entry *e, un_id id, const char *name, size_t len)
{
	(void)name;
	(void)len;
	return e->id == id;
}

static bool rc_is_name(const struct un_rc_entry *e, un_id parent, const char *name,
		       size_t len)
{
	return e->parent == parent && e->namelen == len && !memcmp(e->name, name, len);
}

typedef bool rc_match_fn(const struct un_rc_entry *e, un_id k, const char *name,
			 size_t len);

/* A key of either index: how an entry is recognised, and its hash, whose
 * low bits pick its bucket (rule 12). */
struct rc_key {
	rc_match_fn *match;
	un_id k;
	const char *name;
	size_t len;
	uint64_t hash;
};

static uint64_t rc_hash_id(un_id id)
{
	return (id * 0x9e3779b97f4a7c15ull) >> 40;
}

/* The name index's (rule 7): by (parent, name), for un_lookup, which has
 * no node id to go by; also the negative entries. */
static uint64_t rc_hash_name(un_id parent, const char *name, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull ^ parent;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 0x100000001b3ull;
	h ^= h >> 29;
	return (h * 0x9e3779b97f4a7c15ull) >> 40;
}

/* The hash of E's key in index T. */
static uint64_t rc_hash_of(const struct un_rc_table *t, const struct un_rc_entry *e)
{
	return t->by_name ? rc_hash_name(e->parent, e->name, e->namelen)
			  : rc_hash_id(e->id);
}

static bool slot_trylock(struct un_rc_slot *s)
{
	return !atomic_exchange_explicit(&s->busy, true, memory_order_acquire);
}

/* Only rc_split waits for a bucket: every holder holds it for a few
 * compares, never across a call that could block. */
static void slot_lock(struct un_rc_slot *s)
{
	while (!slot_trylock(s))
		;
}

static void slot_unlock(struct un_rc_slot *s)
{
	atomic_store_explicit(&s->busy, false, memory_order_release);
}

/* Where the pairs of buckets start in an export's mapping (rule 12). */
static size_t rc_head(void)
{
	return (sizeof(struct un_export) + 63) / 64 * 64;
}

/* The mapping of an export whose cache has NB pairs usable: the bytes
 * made usable, and reserved. */
static size_t rc_map_usable(size_t nb)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (rc_head() + nb * sizeof(struct un_rc_pair) + page - 1) / page * page;
}

static size_t rc_map_size(void)
{
	return rc_map_usable(UN_RC_BUCKETS);
}

static size_t rc_total(const struct un_rc *c)
{
	return atomic_load_explicit(&c->bytes, memory_order_relaxed) +
	       atomic_load_explicit(&c->nb, memory_order_relaxed) *
		   sizeof(struct un_rc_pair);
}

/* Whether ADD bytes more would take C over its budget (rule 13). */
static bool rc_over(const struct un_rc *c, size_t add)
{
	return c->budget && rc_total(c) + add > c->budget;
}

/* E (NULL: none) took a slot, or left one (rule 13). */
static void rc_hold(struct un_rc *c, struct un_rc_entry *e)
{
	if (e && atomic_fetch_add_explicit(&e->slots, 1, memory_order_relaxed) == 0)
		atomic_fetch_add_explicit(&c->bytes, e->bytes, memory_order_relaxed);
}

static void rc_unhold(struct un_rc *c, struct un_rc_entry *e)
{
	if (e && atomic_fetch_sub_explicit(&e->slots, 1, memory_order_relaxed) == 1)
		atomic_fetch_sub_explicit(&c->bytes, e->bytes, memory_order_relaxed);
}

/* Bucket I of index T of C. */
static struct un_rc_slot *rc_slot(struct un_rc *c, const struct un_rc_table *t, size_t i)
{
	return t->by_name ? &c->pairs[i].name : &c->pairs[i].id;
}

/* The bucket of K in index T of C as NB pairs place it. */
static struct un_rc_slot *rc_bucket(struct un_rc *c, const struct un_rc_table *t,
				    const struct rc_key *k, size_t nb)
{
	return rc_slot(c, t, k->hash & (nb - 1));
}

/* The entry of index T of C that K names, with a reference of the
 * caller's, or NULL. */
static struct un_rc_entry *bucket_get(struct un_rc *c, const struct un_rc_table *t,
				      const struct rc_key *k)
{
	struct un_rc_slot *s =
	    rc_bucket(c, t, k, atomic_load_explicit(&c->nb, memory_order_acquire));
	struct un_rc_entry *e = NULL;

	if (!slot_trylock(s))
		return NULL;
	for (unsigned i = 0; i < UN_RC_WAYS && !e; i++)
		if (s->e[i] && k->match(s->e[i], k->k, k->name, k->len)) {
			e = s->e[i];
			atomic_fetch_add(&e->ref, 1);
		}
	slot_unlock(s);
	return e;
}

/* The way of bucket S (locked) that E takes: that of OLD if it is still
 * there; without OLD, that of K's own entry, else an empty one if C has
 * room for E (rule 13), else the next in turn when S is full (*FULL set).
 * UN_RC_WAYS: none. */
static unsigned way_pick(const struct un_rc *c, struct un_rc_slot *s,
			 const struct rc_key *k, const struct un_rc_entry *e,
			 const struct un_rc_entry *old, bool *full)
{
	unsigned w;

	for (w = 0; w < UN_RC_WAYS; w++)
		if (old ? s->e[w] == old
			: s->e[w] && k->match(s->e[w], k->k, k->name, k->len))
			return w;
	if (old)
		return UN_RC_WAYS;
	for (w = 0; w < UN_RC_WAYS; w++)
		if (!s->e[w])
			return rc_over(c, e->bytes) ? UN_RC_WAYS : w;
	*full = true;
	return s->next++ % UN_RC_WAYS;
}

/* Whether C, of NB pairs, should double after an insert into index T
 * (rule 12); FULL: the insert replaced a way of a full bucket. */
static bool rc_wants_grow(const struct un_rc *c, const struct un_rc_table *t, size_t nb,
			  bool full)
{
	size_t used = atomic_load_explicit(&t->used, memory_order_relaxed);
	size_t room = nb * UN_RC_WAYS;

	if (nb >= UN_RC_BUCKETS || (full ? used * 2 <= room : used * 4 <= room * 3))
		return false;
	return !rc_over(c, nb * sizeof(struct un_rc_pair));
}

/* Moves the entries of bucket B of index T whose hash names B + NB now
 * (rule 12); one that finds no empty way there leaves the cache. */
static void rc_split(struct un_rc *c, struct un_rc_table *t, size_t b, size_t nb)
{
	struct un_rc_slot *lo = rc_slot(c, t, b), *hi = rc_slot(c, t, b + nb);
	struct un_rc_entry *drop[UN_RC_WAYS], *e;
	unsigned n = 0, h;

	slot_lock(lo);
	slot_lock(hi);
	for (unsigned w = 0; w < UN_RC_WAYS; w++) {
		e = lo->e[w];
		if (!e || !(rc_hash_of(t, e) & nb))
			continue;
		lo->e[w] = NULL;
		for (h = 0; h < UN_RC_WAYS && hi->e[h]; h++)
			;
		if (h < UN_RC_WAYS)
			hi->e[h] = e;
		else
			drop[n++] = e;
	}
	slot_unlock(hi);
	slot_unlock(lo);
	for (unsigned i = 0; i < n; i++) {
		atomic_fetch_sub_explicit(&t->used, 1, memory_order_relaxed);
		rc_unhold(c, drop[i]);
		un_rc_put(drop[i]);
	}
}

/* Doubles the pairs of buckets of EX's cache (rule 12), unless another
 * thread is at it or the cache has no room for them. */
static void rc_grow(struct un_export *ex)
{
	struct un_rc *c = &ex->rc;
	size_t nb;

	if (atomic_exchange(&c->growing, true))
		return;
	nb = atomic_load(&c->nb);
	if (nb < UN_RC_BUCKETS && !rc_over(c, nb * sizeof(struct un_rc_pair)) &&
	    un_sys_map_use(ex, rc_map_usable(2 * nb)) == 0) {
		atomic_store(&c->nb, 2 * nb);
		for (size_t b = 0; b < nb; b++) {
			rc_split(c, &c->id, b, nb);
			rc_split(c, &c->name, b, nb);
		}
	}
	atomic_store(&c->growing, false);
}

/* Puts E (the caller's reference moves; NULL: none) in index T of EX's
 * cache: in place of the entry of its own key K, else in an empty way,
 * else in place of the next in turn (way_pick).  With OLD: takes OLD's
 * place only if it is still there (NULL stays).  A busy bucket, or one
 * whose cache grew meanwhile (rule 12), changes nothing. */
static void bucket_swap(struct un_export *ex, struct un_rc_table *t,
			const struct rc_key *k, struct un_rc_entry *e,
			const struct un_rc_entry *old)
{
	struct un_rc *c = &ex->rc;
	size_t nb = atomic_load_explicit(&c->nb, memory_order_acquire);
	struct un_rc_slot *s = rc_bucket(c, t, k, nb);
	struct un_rc_entry *gone = e;
	bool full = false, grow = false, whole = false;
	unsigned w = UN_RC_WAYS;

	assert(e || old);
	if (!slot_trylock(s))
		goto out;
	if (atomic_load_explicit(&c->nb, memory_order_relaxed) == nb)
		w = way_pick(c, s, k, e, old, &full);
	if (w < UN_RC_WAYS) {
		gone = s->e[w];
		s->e[w] = e;
		rc_hold(c, e);
		rc_unhold(c, gone);
		if (!gone != !e)
			atomic_fetch_add_explicit(&t->used, e ? 1 : (size_t)-1,
						  memory_order_relaxed);
		grow = e && (!gone || full) && rc_wants_grow(c, t, nb, full);
		whole = gone && full && rc_over(c, 0); /* rule 13 */
	}
	slot_unlock(s);
out:
	if (whole)
		un_rc_evict(ex, gone);
	un_rc_put(gone);
	if (grow)
		rc_grow(ex);
}

static struct rc_key rc_key_id(un_id id)
{
	return (struct rc_key){.match = rc_is_id, .k = id, .hash = rc_hash_id(id)};
}

static struct rc_key rc_key_name(un_id parent, const char *name, size_t len)
{
	return (struct rc_key){.match = rc_is_name,
			       .k = parent,
			       .name = name,
			       .len = len,
			       .hash = rc_hash_name(parent, name, len)};
}

/* The entry of ID with a reference of the caller's, or NULL. */
struct un_rc_entry *un_rc_get(struct un_export *ex, un_id id)
{
	struct rc_key k = rc_key_id(id);

	return bucket_get(&ex->rc, &ex->rc.id, &k);
}

/* Puts E (the caller's reference moves) in the slot of ID, or, when OLD is
 * given, takes OLD's place only if it is still there (NULL stays). */
static void rc_swap(struct un_export *ex, un_id id, struct un_rc_entry *e,
		    const struct un_rc_entry *old)
{
	struct rc_key k = rc_key_id(id);

	bucket_swap(ex, &ex->rc.id, &k, e, old);
}

/* The entry of NAME in directory PARENT with a reference of the caller's,
 * or NULL. */
struct un_rc_entry *un_rn_get(struct un_export *ex, un_id parent, const char *name,
			      size_t len)
{
	struct rc_key k = rc_key_name(parent, name, len);

	return bucket_get(&ex->rc, &ex->rc.name, &k);
}

/* As rc_swap, in E's (or OLD's) slot of the name index. */
static void rn_swap(struct un_export *ex, struct un_rc_entry *e,
		    const struct un_rc_entry *old)
{
	const struct un_rc_entry *of = e ? e : old;
	struct rc_key k = rc_key_name(of->parent, of->name, of->namelen);

	bucket_swap(ex, &ex->rc.name, &k, e, old);
}

void un_rc_evict(struct un_export *ex, const struct un_rc_entry *e)
{
	rn_swap(ex, NULL, e); /* its descriptors go with its last reference */
	if (e->id != UN_ID_NONE)
		rc_swap(ex, e->id, NULL, e);
}

struct un_export *un_rc_export_new(void)
{
	size_t size = rc_map_size();
	struct un_export *ex = un_sys_map_reserve(size);

	if (ex && un_sys_map_use(ex, rc_map_usable(UN_RC_BUCKETS_MIN)) < 0) {
		un_sys_unmap(ex, size);
		ex = NULL;
	}
	if (!ex)
		return NULL;
	ex->rc.pairs = (struct un_rc_pair *)((char *)ex + rc_head());
	atomic_init(&ex->rc.nb, UN_RC_BUCKETS_MIN);
	ex->rc.name.by_name = true;
	return ex;
}

void un_rc_export_free(struct un_export *ex)
{
	size_t nb = atomic_load(&ex->rc.nb);

	un_obj_put(atomic_load(&ex->rc_root));
	for (size_t i = 0; i < nb; i++)
		for (unsigned w = 0; w < UN_RC_WAYS; w++) {
			un_rc_put(ex->rc.pairs[i].id.e[w]);
			un_rc_put(ex->rc.pairs[i].name.e[w]);
		}
	un_sys_unmap(ex, rc_map_size());
}

size_t un_rc_own_bytes(const struct un_export *ex)
{
	size_t nb = atomic_load_explicit(&ex->rc.nb, memory_order_relaxed);

	return rc_map_usable(nb) - nb * sizeof(struct un_rc_pair);
}

size_t un_rc_bytes(const struct un_export *ex)
{
	struct un_obj *root = atomic_load(&ex->rc_root);

	return rc_total(&ex->rc) + (root ? un_obj_bytes(root) : 0);
}

static struct un_rc_stamp rc_stamp_of(const struct stat *st, uint16_t layer)
{
	return (struct un_rc_stamp){.dev = st->st_dev,
				    .ino = st->st_ino,
				    .ctime = un_ts_ns(&st->st_ctim),
				    .mtime = un_ts_ns(&st->st_mtim),
				    .layer = layer};
}

/* The stamp of FD; its stat to *KEEP too when KEEP. */
/* The stamp of W's cur's instance J (and its stat in KEEP): from the
 * directory stat memo when cur is the cache's (watch.c rule 4). */
static int rc_stamp_cur(struct un_walk *w, size_t j, struct un_rc_stamp *out,
			struct stat *keep)
{
	struct stat st;
	int err = w->shared && S_ISDIR(w->cur->type)
		      ? un_dir_fstat(w->ex, w->cur, j, &w->drained, &st)
		      : un_sys_fstat(w->cur->inst[j].fd, &st);

	if (!err) {
		*out = rc_stamp_of(&st, w->cur->inst[j].layer);
		if (keep)
			*keep = st;
	}
	return err;
}

static bool rc_stamp_eq(const struct un_rc_stamp *a, const struct un_rc_stamp *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->ctime == b->ctime &&
	       a->layer == b->layer;
}

/* Stamps of cur's first N instances, taking those not known yet.  A walk
 * takes them before it reads any name in cur (walk_lookup), so a change
 * racing with that lookup leaves an older ctime in the entry it makes, and
 * the next check fails (rule 2). */
int un_rc_stamps(struct un_walk *w, size_t n)
{
	int err;

	for (; w->have < n; w->have++) {
		err =
		    rc_stamp_cur(w, w->have, &w->cst[w->have], w->have ? NULL : &w->ctop);
		if (err)
			return err; /* that one stays unknown */
		w->ctop_ok |= w->have == 0;
	}
	return 0;
}

/* Whether the node table still gives E's node E's parent and name: the
 * epoch is E's, or E is a directory's and HOP, the table's record of its
 * node read after W's epoch, names E's parent and name (rule 1).
 *
 * The record is read from the table after the walk's epoch, or from
 * entries of that epoch (rule 8).  It is enough for a directory: every
 * REMOVE moves the epoch, and a client working in one directory would
 * otherwise have its path walked through every layer on every call.  A
 * lookup of that name finding the same instances (rule 2) is given that
 * node, as un_node_assign keeps the node a name maps to while its object is
 * not replaced (node.c invariant 10), and a directory has one name: no
 * links, no groups, so no change of the table alone gives its name another
 * node or fileid (its copy-up keeps the node and adds an entry to the
 * parent's upper instance; a rename or removal changes a layer before the
 * table).  Not so for a non-directory, whose name a copy-up of another name
 * may give a new node and fileid with no change in its directory (node.c
 * invariant 9), nor for the name index (rule 7), which has no record to
 * compare: both keep to the epoch.  A new node (un_node_assign moves no
 * epoch) needs a change in a layer dir, which rule 2 sees. */
static bool rc_same_name(const struct un_walk *w, const struct un_rc_entry *e,
			 const struct un_node_hop *hop)
{
	if (e->epoch == w->epoch)
		return true;
	return hop && S_ISDIR(e->type) && hop->id == e->id && hop->parent == e->parent &&
	       hop->namelen == e->namelen && !memcmp(hop->name, e->name, e->namelen);
}

/* Whether what E's lookup read of cur is unchanged: the node's name in the
 * table (HOP: its record, or NULL), the same parent and the stamps of the
 * parent's instances it read (rules 1, 2).
 *
 * A lookup of a name reads only the parent instances it visited (their
 * entries: the name, its ".wh.NAME"; adding, removing or renaming either
 * changes that instance's ctime) and the found instances (type, white-out
 * xattr and size, the opaque xattr and ".wh..wh..opq": their own ctime).
 * The parent's instances were found by the previous hop, checked the same
 * way; the root's are the layer roots.  A lookup that read every instance
 * of the parent without a stop (E's OPEN) would read one more of a parent
 * that has more now (a layer below gained the parent's name): such an
 * entry holds only while the parent has exactly NVIS instances. */
static bool rc_valid_parent(struct un_walk *w, const struct un_rc_entry *e,
			    const struct un_node_hop *hop)
{
	if (!rc_same_name(w, e, hop) || e->parent != w->cur->id || e->nvis == 0 ||
	    e->nvis > w->cur->ninst || (e->open && e->nvis != w->cur->ninst) ||
	    un_rc_stamps(w, e->nvis))
		return false;
	for (size_t j = 0; j < e->nvis; j++)
		if (!rc_stamp_eq(&w->cst[j], &e->st[j]))
			return false;
	return true;
}

/* Whether own instance J of directory entry E, whose stat ST was just
 * taken, reads as it did for the lookup that made E (rule 11): the same
 * (dev, ino, layer) and ctime, or, when only the ctime differs, the same
 * own opaque flag read again now if a lookup reads it (*READ set).
 *
 * A directory a client makes and removes names in moves its ctime with
 * every call, and rule 2 alone would walk its path through every layer
 * each time.  Why the flag is enough: with the parent's stamps equal, the
 * lookup opens the same inodes under the name in the same parent instances
 * (their entries are unchanged; the entry's descriptors pin its inodes, so
 * their (dev, ino) cannot name another); a directory's type classifies it
 * without reading more; the OCI ".wh.NAME" beside it is its parent's entry.
 * What lookup_in reads of a kept directory instance beyond its stat is its
 * opaque flag, and only when the parent has an instance below it; it keeps
 * instances down to the first opaque one.  So it keeps the same list when
 * every instance but the last is still not opaque (it read each and went
 * on), and the last one's own flag is what that lookup read (E's OPQ), or
 * was not read (-1: the parent had no instance below it, and has none now,
 * rule 2's count).  The same instances give the same node id (rule 6's
 * reason).  The flag is read after the fstat that took the new stamp, so a
 * change after that read moves the ctime again.  Not covered: what rule 2
 * leaves out, for the parent's stamps; the directory's own entries, which
 * no lookup of its name reads (lookups in it check their entries against
 * stamps taken then, and nothing is remembered under an unsettled parent
 * stamp). */
static bool rc_same_dir_inst(struct un_walk *w, const struct un_rc_entry *e, size_t j,
			     const struct stat *st, bool *read)
{
	const struct un_rc_stamp *was = &e->st[e->nvis + j];
	const struct un_inst *in = &e->obj->inst[j];
	/* kept below: not opaque; the last: as the entry says */
	int want = j + 1 < e->obj->ninst ? 0 : e->opq;

	if (st->st_dev != was->dev || st->st_ino != was->ino || in->layer != was->layer)
		return false;
	if (un_ts_ns(&st->st_ctim) == was->ctime || want < 0)
		return true;
	*read = true;
	return un_opq_own(in->fd, st, w->ex->layers[in->layer].lower, &w->t0) == want;
}

/* After a hop that read flags again (rule 11): E is made again with the
 * ctimes W->nst took, if all are settled, so that the next hop reads none;
 * else E stays (entries never change, rule 4): its stamp is RC_UNSETTLED
 * or a settled ctime the instance has since moved from, neither equal to
 * any ctime read later, so every hop reads the flag again until the
 * directory settles. */
static void rc_refresh(struct un_walk *w, const struct un_rc_entry *e)
{
	struct un_lookup_read rd = {.nvis = e->nvis, .open = e->open, .opq = e->opq};

	for (size_t j = 0; j < e->obj->ninst; j++)
		if (!un_settled(w->nst[j].ctime, &w->t0))
			return;
	un_rc_remember(w, e->obj, &rd, e);
}

/* Directory entry E (parent valid) is what a lookup would give if its own
 * instances read as they did (rule 11); their stamps, taken now, go to
 * W->nst, and inst[0]'s stat to W->ntop: the walk goes on with what it read
 * now, so a view's stat and stamps (rule 10) are fresh, never E's. */
static bool rc_hit_dir(struct un_walk *w, const struct un_rc_entry *e,
		       struct un_obj **next)
{
	struct un_obj *o = e->obj; /* its memo changes (watch.c rule 4) */
	bool read = false;
	struct stat st;

	for (size_t j = 0; j < o->ninst; j++) {
		if (un_dir_fstat(w->ex, o, j, &w->drained, &st) ||
		    !rc_same_dir_inst(w, e, j, &st, &read))
			return false;
		w->nst[j] = rc_stamp_of(&st, o->inst[j].layer);
		if (j == 0)
			w->ntop = st;
	}
	w->ntop_ok = true;
	if (read)
		rc_refresh(w, e);
	*next = un_obj_get(e->obj);
	return true;
}

/* Whether ST, the object under E's name in the layer E found it in, is the
 * object E found and still no white-out (rule 6): a 0:0 character device is
 * never one of E's, and an empty regular file may have gained the white-out
 * xattr, so its ctime must be the remembered one, which is kept only when
 * settled (else RC_UNSETTLED, equal to none). */
static bool rc_same_file(const struct un_rc_entry *e, const struct stat *st)
{
	const struct un_rc_stamp *own = &e->st[e->nvis];

	if (st->st_dev != own->dev || st->st_ino != own->ino ||
	    (st->st_mode & S_IFMT) != e->type)
		return false;
	/* What un_whiteout_classify reads beyond the stat: the white-out
	 * xattr of an empty regular file, which its ctime covers. */
	if (S_ISREG(st->st_mode) && st->st_size == 0)
		return un_ts_ns(&st->st_ctim) == own->ctime;
	return !(S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0));
}

/* Who E's object is, for un_obj_new. */
static struct un_obj_ident rc_ident(const struct un_rc_entry *e)
{
	return (struct un_obj_ident){
	    .id = e->id,
	    .fileid = e->fileid,
	    .parent = e->parent,
	    .type = e->type,
	    .name = e->name,
	    .len = e->namelen,
	};
}

/* Non-directory entry E (parent valid): opens its name again in the
 * parent's instance it was found in (the last one its lookup read: a
 * non-directory ends a lookup), and makes the object from that descriptor
 * if it is E's object still (rule 6).  The rest of the file (data, size,
 * times, modes) is what the new descriptor reads, like any lookup's; the
 * node id is E's, as with the epoch unchanged the table maps the same name
 * and instance to the same node (node.c invariant 10).  So a file replaced
 * by another inode, a white-out made over it, or a rename in the layer
 * shows at once: the first two change the parent's ctime or the identity
 * the open finds, the last the parent's ctime and the open's result. */
static bool rc_hit_file(struct un_walk *w, struct un_rc_entry *e, struct un_obj **next)
{
	const struct un_inst *pi = &w->cur->inst[e->nvis - 1];
	/* a view's parent: the watches are its owner's (watch.c rule 4) */
	struct un_obj *p = w->cur->owner ? w->cur->owner : w->cur;
	const struct un_obj_ident who = rc_ident(e);
	struct un_obj *o = NULL;
	struct stat st;
	int fd;

	if (pi->layer != e->st[e->nvis].layer)
		return false;
	if (w->view_end) { /* rule 15 */
		fd = -1;
		if (pi->fd < 0 || un_file_fstatat(w->ex, p, e->nvis - 1, &e->fmemo,
						  e->name, &w->drained, &st))
			return false;
	} else {
		fd = un_sys_open_beneath(pi->fd, e->name, O_PATH);
		if (fd < 0 || un_sys_fstat(fd, &st)) {
			un_sys_close(fd);
			return false;
		}
	}
	if (rc_same_file(e, &st))
		o = un_obj_new(1, &who);
	if (!o) {
		un_sys_close(fd);
		return false;
	}
	o->inst[o->ninst++] = (struct un_inst){.fd = fd, .layer = pi->layer};
	w->nst[0] = rc_stamp_of(&st, pi->layer);
	w->ntop = st;
	w->ntop_ok = true;
	*next = o;
	return true;
}

/* The instance of cur in LAYER among its first N, or NULL. */
static const struct un_inst *rc_cur_inst(const struct un_walk *w, size_t n,
					 uint16_t layer)
{
	for (size_t i = 0; i < n && i < w->cur->ninst; i++)
		if (w->cur->inst[i].layer == layer)
			return &w->cur->inst[i];
	return NULL;
}

/* Bare directory entry E (parent valid) on the last hop of a walk to a
 * view (rule 14): each own instance stat'ed by name in the parent's
 * instance of its layer must be the one E remembers, at its settled ctime.
 * *NEXT is then a bare object (no descriptor) whose view carries those
 * stats: what un_getattr reads of it. */
static bool rc_hit_bare(struct un_walk *w, const struct un_rc_entry *e,
			struct un_obj **next)
{
	const struct un_rc_stamp *own = &e->st[e->nvis];
	const struct un_obj_ident who = rc_ident(e);
	const struct un_inst *pi;
	struct un_obj *o;
	struct stat st;

	if (!w->view_end)
		return false;
	for (size_t j = 0; j < e->nown; j++) {
		pi = rc_cur_inst(w, e->nvis, own[j].layer);
		if (!pi || un_sys_fstatat(pi->fd, e->name, &st, 0) ||
		    !S_ISDIR(st.st_mode))
			return false;
		w->nst[j] = rc_stamp_of(&st, own[j].layer);
		if (!rc_stamp_eq(&w->nst[j], &own[j]))
			return false;
		if (j == 0)
			w->ntop = st;
	}
	o = un_obj_new(e->nown, &who);
	if (!o)
		return false;
	o->bare = true;
	for (size_t j = 0; j < e->nown; j++)
		o->inst[o->ninst++] = (struct un_inst){.fd = -1, .layer = own[j].layer};
	w->ntop_ok = true;
	*next = o;
	return true;
}

/* What looking E's name up in cur would give now, from E, if E still
 * holds (HOP: the table's record of E's node, or NULL): *NEXT (a reference
 * of the caller's; *SHARED when it is the cache's object; NULL for a
 * negative entry: absent) and its stamps in W->nst.  Any failure is a
 * miss. */
bool un_rc_hit(struct un_walk *w, const struct un_rc_entry *e,
	       const struct un_node_hop *hop, struct un_obj **next, bool *shared)
{
	if (!rc_valid_parent(w, e, hop))
		return false;
	*shared = e->obj != NULL;
	if (e->id == UN_ID_NONE) {
		*next = NULL; /* the name is absent (rule 9) */
		return true;
	}
	if (e->obj)
		return rc_hit_dir(w, e, next);
	if (S_ISDIR(e->type))
		return rc_hit_bare(w, e, next);
	/* an entry never changes, but for its file memo (rule 15) */
	return rc_hit_file(w, (struct un_rc_entry *)e, next);
}

/* A new entry (one reference) for NAME in cur with NST stamps, the
 * parent's NVIS first, copied from W; the rest is the caller's to fill. */
static struct un_rc_entry *rc_entry_new(struct un_walk *w, const char *name, size_t len,
					size_t nvis, size_t nst)
{
	size_t bytes =
	    sizeof(struct un_rc_entry) + nst * sizeof(struct un_rc_stamp) + len + 1;
	struct un_rc_entry *e = un_sys_malloc(bytes);

	if (!e)
		return NULL;
	*e = (struct un_rc_entry){.parent = w->cur->id,
				  .epoch = w->epoch,
				  .nvis = nvis,
				  .bytes = (uint32_t)bytes};
	atomic_init(&e->ref, 1);
	atomic_init(&e->slots, 0);
	atomic_init(&e->fmemo, NULL);
	e->name = (char *)(e->st + nst);
	e->namelen = (uint16_t)len;
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	memcpy(e->st, w->cst, nvis * sizeof(e->st[0]));
	return e;
}

/* Whether the stamps of the first NVIS instances of cur, which a new
 * entry would hold, are settled (rule 3). */
static bool rc_parent_settled(const struct un_walk *w, size_t nvis)
{
	for (size_t j = 0; j < nvis; j++)
		if (!un_settled(w->cst[j].ctime, &w->t0))
			return false;
	return true;
}

/* The stamp an entry keeps of its own instance S: an unsettled ctime as
 * RC_UNSETTLED, which no hop takes for unchanged (rules 6, 11). */
static struct un_rc_stamp rc_own_kept(const struct un_walk *w,
				      const struct un_rc_stamp *s)
{
	struct un_rc_stamp k = *s;

	if (!un_settled(k.ctime, &w->t0))
		k.ctime = RC_UNSETTLED;
	return k;
}

/* Counts the descriptors a directory's entry will hold against the bound
 * (rule 5); false if they do not fit. */
static bool rc_reserve(const struct un_obj *next)
{
	if (atomic_fetch_add(&rc_nfds, next->ninst) + next->ninst > rc_fds_max()) {
		atomic_fetch_sub(&rc_nfds, next->ninst);
		return false;
	}
	return true;
}

/* Remembers NEXT, found by a lookup in cur that read what RD says (its
 * stamps in W), if the parent's stamps are settled (rule 3); with
 * OLD, in OLD's place only, if it is still there (rc_refresh).  True if
 * NEXT is now the cache's too. */
bool un_rc_remember(struct un_walk *w, struct un_obj *next,
		    const struct un_lookup_read *rd, const struct un_rc_entry *old)
{
	size_t nown = S_ISDIR(next->type) ? next->ninst : 1;
	struct un_rc_entry *e;
	bool dir;

	if (w->have < rd->nvis || !rc_parent_settled(w, rd->nvis) || next->bare)
		return false;
	dir = S_ISDIR(next->type) && rc_reserve(next); /* else bare (rule 14) */
	e = rc_entry_new(w, next->name, next->namelen, rd->nvis, rd->nvis + nown);
	if (!e) {
		if (dir)
			atomic_fetch_sub(&rc_nfds, next->ninst);
		return false;
	}
	e->id = next->id;
	e->fileid = next->fileid;
	e->type = next->type;
	e->open = rd->open;
	e->opq = rd->opq;
	e->nown = nown;
	e->obj = dir ? un_obj_get(next) : NULL; /* rules 6, 14 */
	if (dir)
		e->bytes += (uint32_t)un_obj_bytes(next);
	for (size_t j = 0; j < nown; j++)
		e->st[rd->nvis + j] = rc_own_kept(w, &w->nst[j]);
	atomic_fetch_add(&e->ref, 1);
	rn_swap(w->ex, e, old);
	rc_swap(w->ex, e->id, e, old);
	return dir;
}

/* Remembers that NAME is absent from cur, by a lookup that read what RD
 * says (nvis 0: one it may not remember; rule 9).  lookup_in gives a
 * nonzero nvis when the absence rests on the entries of the parent's
 * instances alone: no name, an OCI ".wh.NAME" beside it, or a 0:0 device
 * under it (whose inode cannot become anything else); not when a white-out
 * file ended it (the xattr form, which only its own ctime covers). */
void un_rc_remember_absent(struct un_walk *w, const char *name, size_t len,
			   const struct un_lookup_read *rd)
{
	struct un_rc_entry *e;

	if (w->have < rd->nvis || !rc_parent_settled(w, rd->nvis))
		return;
	e = rc_entry_new(w, name, len, rd->nvis, rd->nvis);
	if (!e)
		return;
	e->open = rd->open;
	rn_swap(w->ex, e, NULL);
}

/* The path of ID from the cache's entries alone (rule 8): HOPS gets at
 * most UN_RC_CHAIN_MAX of them, root first; false if any entry on the way
 * is missing or of another epoch than W's.  An entry's (parent, name) is
 * the table's record as read after that epoch, which no record changes
 * while it stands (node.c invariant 10), so the table would give the same
 * path; a hop that fails makes the next try read it from the table. */
bool un_rc_path(struct un_walk *w, un_id id, struct un_node_hop *hops, size_t *n)
{
	struct un_rc_entry *e;
	size_t k = UN_RC_CHAIN_MAX;

	while (id != w->ex->root_id) {
		if (k == 1)
			return false;
		e = un_rc_get(w->ex, id);
		if (!e || e->epoch != w->epoch) {
			un_rc_put(e);
			return false;
		}
		k--;
		hops[k] = (struct un_node_hop){.id = id,
					       .parent = e->parent,
					       .type = e->type,
					       .namelen = e->namelen};
		memcpy(hops[k].name, e->name, e->namelen);
		hops[k].name[e->namelen] = '\0';
		id = e->parent;
		un_rc_put(e);
	}
	hops[--k] = (struct un_node_hop){.id = id};
	*n = UN_RC_CHAIN_MAX - k;
	memmove(hops, hops + k, *n * sizeof(hops[0]));
	return true;
}

/* The export's root object, which walks share (its instances are the
 * layer roots, fixed for the export's life): no descriptors to dup and
 * close per walk.  A reference of the caller's. */
int un_rc_root(struct un_export *ex, struct un_obj **out)
{
	struct un_obj *root = atomic_load(&ex->rc_root), *none = NULL;
	int err;

	if (!root) {
		err = un_root(ex, &root);
		if (err)
			return err;
		if (!atomic_compare_exchange_strong(&ex->rc_root, &none, root)) {
			un_obj_put(root); /* another walk's came first */
			root = none;
		}
	}
	*out = un_obj_get(root);
	return 0;
}
