/* lookup.c - objects: resolving names and node ids, and reading objects.
 *
 * An object (struct un_obj) is a node id plus its layer stack: for a
 * directory, an O_PATH descriptor of the directory in every layer it is merged
 * from (top-most first, down to and including the first opaque one); for any
 * other object, the one descriptor of its top-most instance.  Objects hold no
 * descriptor beyond their own lifetime; the resolve cache below holds
 * directories' objects, and uses one only after checking that no layer
 * changed under it, so a change in a layer shows on the next lookup.
 *
 * A lookup walks the parent's stack top-most first and folds what each layer
 * holds under the name into one struct lookup (STYLE item 6) with
 * un_merge_step, the rule readdir.c shares:
 *   - a white-out ends the walk: the name is gone unless a directory was kept
 *     above, which then merges no further;
 *   - a non-directory is the result if nothing was kept above, and is hidden
 *     (ending the walk) below a directory;
 *   - a directory joins the result; an opaque one ends the walk;
 *   - in a lower layer, an absent name with an OCI ".wh.NAME" is a white-out,
 *     and a ".wh." name is private: absent.
 * Every open is of one validated component with O_PATH|O_NOFOLLOW, beneath
 * the parent: a symlink is an object whose target we return, never a path we
 * follow.
 *
 * Design notes: the opaque memo
 *
 * Whether a kept directory is opaque costs two getxattr calls (trusted. and
 * user.) and, in a lower layer, a stat of ".wh..wh..opq" inside it, for
 * every merged directory on every walk (every handle is resolved by walking
 * its path again).  The part the directory itself carries is remembered in
 * a small table keyed by (dev, ino, lower), valid only for the ctime it was
 * read at:
 *  1. ctime covers everything remembered: setting or removing an xattr
 *     changes the directory's ctime, and so does adding, removing or
 *     renaming an entry in it (".wh..wh..opq").  It does not cover the OCI
 *     ".wh.NAME" beside the directory (the parent's entry): that one is
 *     checked on every walk, uncached.  Nor does it cover a layer on a
 *     filesystem that does not keep ctime (a network filesystem sees
 *     another client's change only when its attributes are refreshed), or a
 *     clock set back so that a later change gets exactly the old ctime.
 *  2. Only a settled flag is remembered: the directory's ctime is older,
 *     by its settle time (settle_of: UN_SETTLE_FINE_NS for a ctime with
 *     nanoseconds, UN_OPAQUE_SETTLE_NS for whole seconds), than a clock
 *     read taken before its fstat.  A change made after that read gets a
 *     ctime no older than the read minus one timestamp tick, which the
 *     settle time exceeds, so it cannot equal the remembered ctime; two
 *     changes inside one tick, the second after our read, could.
 *  3. The stat that keys a recall is taken on every walk, after the
 *     directory was opened (the fstat lookup_layer makes anyway), so a change
 *     before it shows as another ctime and misses the memo.
 *  4. A slot is a plain struct behind a try-lock: a busy slot is a miss (the
 *     flag is read from the layer), so no thread ever waits on the memo.
 *     A replaced slot loses only speed.
 *
 * Design notes: the resolve cache
 *
 * Every call with a handle resolves it (un_resolve): the node table gives
 * the path, and each name of it was looked up again in every layer of its
 * parent (an openat2, an fstat, white-out and opaque checks, a table read
 * per name and layer).  The export keeps, per node id (ex->rc, UN_RC_SLOTS
 * slots by hash), the directory object a walk found, with stamps
 * (dev, ino, ctime, layer) of the instances of its parent the lookup read
 * (the first nvis: down to the one that ended the walk) and of its own
 * instances.  A walk uses the entry for a hop instead of a lookup when:
 *  1. The node table's epoch is the one read before the walk that made the
 *     entry (node.c invariant 10): no rename, removal or relink since, so
 *     the node still has that parent and name.  A new node (un_node_assign
 *     moves no epoch) needs a change in a layer dir, which rule 2 sees.
 *     A directory's entry also holds for a hop of un_resolve's walk
 *     (walk_hop) whose record of the node, read from the table after the
 *     walk's epoch (or from entries of that epoch, rule 8), names the
 *     entry's parent and name: every REMOVE moves the epoch, and a client
 *     working in one directory would have its path walked through every
 *     layer on every call.  The table says the node has that parent and
 *     name now; a lookup of that name finding the same instances (rule 2)
 *     is given that node, as un_node_assign keeps the node a name maps to
 *     while its object is not replaced (node.c invariant 10), and a
 *     directory has one name: no links, no groups, so no change of the
 *     table alone gives its name another node or fileid (its copy-up keeps
 *     the node and adds an entry to the parent's upper instance; a rename
 *     or removal changes a layer before the table).  Not so for a
 *     non-directory, whose name a copy-up of another name may give a new
 *     node and fileid with no change in its directory (node.c invariant
 *     9), nor for the name index (rule 7), which has no record to compare:
 *     both keep the epoch.
 *  2. Every stamp is equal now (a directory's own ones: or the flags they
 *     cover read again, rule 11).  A lookup of a name in a directory reads
 *     only the parent instances it visited (their entries: the name, its
 *     ".wh.NAME"; adding, removing or renaming either changes that
 *     instance's ctime) and the found instances (type, white-out xattr and
 *     size, the opaque xattr and ".wh..wh..opq": their own ctime).  The
 *     parent's instances were themselves found by the previous hop, checked
 *     the same way, and the root's are the layer roots.  So equal stamps
 *     down the path mean every lookup of the walk would find what it found.
 *     Parent stamps are taken before the names in it are read (walk_hop),
 *     so a change racing with the lookup leaves an older ctime in the entry
 *     and fails the next check.  A lookup that read every instance of the
 *     parent without a stop (the entry's OPEN) would read one more of a
 *     parent that has more now (a layer below gained the parent's name):
 *     such an entry holds only while the parent has exactly NVIS
 *     instances.  What ctime does not cover is the memo's invariant 1 (a
 *     filesystem without it, a clock set back).
 *  3. Every parent stamp was settled when the entry was made: its ctime
 *     older, by its settle time, than the clock read before the walk, so
 *     no later change can leave the same ctime (memo invariant 2).  An
 *     own stamp that was not settled is kept as RC_UNSETTLED, which equals
 *     no ctime: a file's then always opens again (rule 6), a directory's
 *     always reads its flag again (rule 11).
 *  4. An entry's object is shared by the cache and walks in progress and is
 *     never changed: the object un_resolve returns is a copy with its own
 *     descriptors when the cache shares it, since callers may change theirs
 *     (a copy-up puts a new top instance on it).  un_resolve_view hands the
 *     shared object itself to a caller that only reads it (the server's
 *     GETATTR, ACCESS and the directory of LOOKUP), saving a dup and a
 *     close per instance.  Entries are reference counted; a slot's
 *     try-lock guards only its pointer, and a busy slot is a miss.  An
 *     entry found stale leaves its slots at once.
 *  5. Only directories' entries hold descriptors: an O_PATH descriptor
 *     pins its inode, and a removed file's blocks should not wait for its
 *     slot to be reused.  At most UN_RC_SLOTS directory objects per export,
 *     and the entries of all exports (per-client unions are many) hold at
 *     most UN_RC_FDS_MAX, and no more than a quarter of RLIMIT_NOFILE,
 *     descriptors together (rc_nfds): a full cache stops remembering, it
 *     never makes the server run out of descriptors.
 *  6. A non-directory's entry holds no descriptor but which of the
 *     parent's instances the lookup found it in (the last one it read:
 *     a non-directory ends the walk, so nothing was kept above it) and its
 *     stamp.  A hit checks the parent as rule 2 says, opens the name again
 *     in that instance (one O_PATH|O_NOFOLLOW open beneath it) and takes
 *     the object only if the descriptor's (dev, ino, type) are the entry's
 *     and the stat says it is no white-out: a 0:0 character device never
 *     is one of the entry's, and an empty regular file may have gained the
 *     white-out xattr, so its ctime must be the remembered one, which is
 *     kept only when settled (else RC_UNSETTLED, equal to none).  The rest
 *     of the file (data, size, times, modes) is what the new descriptor
 *     reads, like any lookup's.  The node id is the entry's: with the epoch
 *     unchanged the table maps the same name and instance to the same
 *     node (node.c invariant 10).  So a file replaced by another inode, a
 *     white-out made over it, or a rename in the layer shows at once: the
 *     first two change the parent's ctime or the identity the open finds,
 *     the last the parent's ctime and the open's result.
 *  7. The name index (ex->rn, by (parent, name)) holds the same entries
 *     for un_lookup, which has a name rather than an id; un_lookup takes
 *     the directory's stamps before it reads a name (rule 2) and checks an
 *     entry as a walk does.  An index slot is keyed by hash and the entry
 *     says which (parent, name) it is: a collision is a miss.
 *  8. A walk takes the path of a node from the entries alone when every
 *     hop from the node up to the root has one of the epoch read before
 *     (rc_path): an entry's (parent, name) is the table's record as read
 *     after that epoch, which no record changes while it stands (node.c
 *     invariant 10), so the table would give the same path.  Each hop is
 *     still checked against the layers as rule 2 says; a hop that fails
 *     makes the next try read the path from the table.
 *  9. A name found absent is remembered in the name index (an entry
 *     without id) with the stamps of the parent's instances the lookup
 *     read, when the absence rests on their entries alone: no name, an OCI
 *     ".wh.NAME" beside it, or a 0:0 device under it (whose inode cannot
 *     become anything else).  An absence ended by a white-out file (the
 *     xattr form, which only its own ctime covers) is not remembered.  A
 *     hit is -ENOENT with no name opened at all.
 * 10. A view (un_resolve_view, un_lookup_view) is a private object that
 *     borrows the descriptors of the object its walk ended at (an entry's,
 *     which stays open while the view holds it) and keeps what the walk
 *     read of its instances: inst[0]'s stat and the stamps of every
 *     instance, taken (or checked equal to an entry's) during the walk.
 *     It serves the one call that made it: un_getattr of it gives that
 *     stat, and un_lookup in it compares entries with those stamps instead
 *     of taking them again, both as they were a few microseconds earlier
 *     in the same call; a change racing with the call may or may not show,
 *     as with any lookup, and the next call sees it.  Nothing changes a
 *     view (un_obj_push_top asserts it), so the stat cannot be older than
 *     a change made through it.
 * 11. A directory entry whose parent holds (rules 1, 2) but one of whose
 *     own instances shows another ctime with the same (dev, ino, layer),
 *     or kept RC_UNSETTLED (rule 3), is checked by reading again what that
 *     ctime covers and a lookup reads: the instance's own opaque flag (the
 *     opaque xattrs; in a lower layer, ".wh..wh..opq" inside it).  A
 *     directory a client makes and removes names in moves its ctime with
 *     every call, and rule 2 alone would walk its path through every layer
 *     each time.  Why this is enough: with the parent's stamps equal, the
 *     lookup opens the same inodes under the name in the same parent
 *     instances (their entries are unchanged; the entry's descriptors pin
 *     its inodes, so their (dev, ino) cannot name another); a directory's
 *     type classifies it without reading more; the OCI ".wh.NAME" beside it
 *     is its parent's entry.  What lookup_in reads of a kept directory
 *     instance beyond its stat is its opaque flag, and only when the parent
 *     has an instance below it; it keeps instances down to the first opaque
 *     one.  So it keeps the same list when every instance but the last is
 *     still not opaque (it read each and went on), and the last one's own
 *     flag is what that lookup read (the entry's OPQ), or was not read (-1:
 *     the parent had no instance below it, and has none now, rule 2's
 *     count).  The same instances give the same node id while rule 1
 *     holds (rule 6's reason).  The flag is read after the fstat that took the
 *     new stamp, so a change after that read moves the ctime again.  What
 *     is not covered: what rule 2 leaves out, for the parent's stamps; the
 *     directory's own entries, which no lookup of its name reads (lookups
 *     in it check their entries against the stamps taken now, and a walk
 *     never remembers anything under an unsettled parent stamp).  The
 *     walk goes on with the stamps and inst[0]'s stat taken now (W->nst,
 *     W->ntop): a view's stat and stamps (rule 10) are fresh, never the
 *     entry's.  Entries are never changed (rule 4): when every own ctime
 *     taken now is settled, rc_refresh puts a new entry with them in the
 *     old one's slots, so the next hop reads no flag; otherwise the entry
 *     stays: its stamp is RC_UNSETTLED, or a settled ctime the instance
 *     has since moved from, neither equal to any ctime read later, so every
 *     hop reads the flag again until the directory settles.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "un_private.h"

#define RESOLVE_TRIES 3	   /* walks of a path whose names change meanwhile */
#define OPQ_SLOTS     1024 /* opaque memo slots: a power of 2 */

struct lookup {
	struct un_export *ex;
	const struct un_obj *dir;
	const char *name;
	size_t len;
	bool private;	    /* a ".wh." name: absent from every lower layer */
	bool wh_file;	    /* ended by an xattr white-out: its ctime matters */
	int8_t opq;	    /* the last kept one's own opaque flag; -1: not read */
	struct timespec t0; /* clock before any layer was read (memo inv. 2) */
	struct un_merge m;
	struct un_inst *found; /* kept instances, descriptors owned */
	struct un_devino *di;  /* their identities; all three dir->ninst long */
	long long *ct;	       /* their ctimes, ns (the resolve cache's stamps) */
	struct stat top;       /* of found[0] */
};

/* One instance as the resolve cache knows it (design notes). */
struct rc_stamp {
	uint64_t dev, ino;
	long long ctime; /* ns */
	uint16_t layer;
};

/* A resolved object, shared by the cache and the walks that use it; never
 * changes once in a slot.  A directory's holds its object; a
 * non-directory's holds no descriptor, only what a hit checks (rc
 * invariant 6). */
struct un_rc_entry {
	atomic_uint ref;
	un_id id, parent, fileid;
	uint64_t epoch;	    /* node table epoch read before its walk */
	mode_t type;	    /* S_IFMT */
	struct un_obj *obj; /* a directory's, read only (rc invariant 4); NULL */
	uint16_t namelen;
	char *name;  /* its name in PARENT, NUL-ended, after st[] */
	size_t nvis; /* instances of the parent the lookup read */
	bool open;   /* it read them all with no stop: more would be read too */
	int8_t opq;  /* a directory's last instance's own opaque flag as read;
		      * -1: not read (rc invariant 11) */
	/* nvis of the parent's, then its own: obj->ninst, or one for a
	 * non-directory (ctime RC_UNSETTLED if it was not settled) */
	struct rc_stamp st[];
};

#define RC_UNSETTLED   LLONG_MIN /* equals no ctime */
#define RC_CHAIN_MAX   16	 /* hops of a path the cache may give */
#define RC_WALK_STAMPS 17	 /* a walk's stamps on its stack: 16 layers */

/* One remembered opaque flag (design notes). */
struct opq_slot {
	_Atomic bool busy; /* the try-lock (invariant 4) */
	bool used, lower, opaque;
	dev_t dev;
	ino_t ino;
	struct timespec ctime;
};

static struct opq_slot opq_memo[OPQ_SLOTS];
/* The settle time tests set (un_lookup_test_settle_ns); -1: settle_of's. */
static _Atomic long long opq_settle_ns = -1;

void un_lookup_test_settle_ns(long long ns)
{
	atomic_store(&opq_settle_ns, ns);
}

static struct opq_slot *opq_slot_of(const struct stat *st)
{
	uint64_t h =
	    ((uint64_t)st->st_ino ^ ((uint64_t)st->st_dev << 40)) * 0x9e3779b97f4a7c15ull;

	return &opq_memo[h >> 54 & (OPQ_SLOTS - 1)];
}

/* The remembered flag of directory ST (1 or 0), or -1: unknown, changed
 * since (another ctime), or the slot busy. */
static int opq_recall(const struct stat *st, bool lower)
{
	struct opq_slot *s = opq_slot_of(st);
	int r = -1;

	if (atomic_exchange_explicit(&s->busy, true, memory_order_acquire))
		return -1;
	if (s->used && s->dev == st->st_dev && s->ino == st->st_ino &&
	    s->lower == lower && s->ctime.tv_sec == st->st_ctim.tv_sec &&
	    s->ctime.tv_nsec == st->st_ctim.tv_nsec)
		r = s->opaque;
	atomic_store_explicit(&s->busy, false, memory_order_release);
	return r;
}

static long long ts_ns(const struct timespec *t)
{
	return (long long)t->tv_sec * 1000000000ll + t->tv_nsec;
}

/* How long a ctime must be past before no later change can get it too
 * (memo invariant 2): a tick of the clock it was taken from.  A filesystem
 * that keeps sub-second times stamps them from the kernel's coarse clock,
 * whose tick is at most 10 ms (HZ >= 100): a ctime with nanoseconds is
 * settled after UN_SETTLE_FINE_NS.  A ctime of whole seconds may come from
 * a filesystem that keeps no finer ones (ext4 with 128-byte inodes, FAT),
 * whose next change can get the same second: UN_OPAQUE_SETTLE_NS. */
static long long settle_of(long long ctime)
{
	long long t = atomic_load(&opq_settle_ns);

	if (t >= 0)
		return t;
	return ctime % 1000000000ll ? UN_SETTLE_FINE_NS : UN_OPAQUE_SETTLE_NS;
}

/* Whether CTIME (ns) is settled at T0, the clock read before it was read. */
static bool settled(long long ctime, const struct timespec *t0)
{
	return ctime < ts_ns(t0) - settle_of(ctime);
}

/* Remembers OPAQUE for directory ST if it is settled before T0 (inv. 2). */
static void opq_remember(const struct stat *st, bool lower, bool opaque,
			 const struct timespec *t0)
{
	struct opq_slot *s = opq_slot_of(st);

	if (!settled(ts_ns(&st->st_ctim), t0))
		return;
	if (atomic_exchange_explicit(&s->busy, true, memory_order_acquire))
		return;
	s->used = true;
	s->dev = st->st_dev;
	s->ino = st->st_ino;
	s->lower = lower;
	s->opaque = opaque;
	s->ctime = st->st_ctim;
	atomic_store_explicit(&s->busy, false, memory_order_release);
}

/* An object with room for NINST instances and one more, which a copy-up
 * may put on top (un_obj_push_top). */
static struct un_obj *obj_alloc(size_t ninst)
{
	struct un_obj *o =
	    un_sys_calloc(1, sizeof(*o) + (ninst + 1) * sizeof(o->inst[0]));

	if (o) {
		atomic_init(&o->ref, 1);
		o->cap = ninst + 1;
	}
	return o;
}

enum un_links un_links_of(const struct un_export *ex, uint16_t layer,
			  const struct stat *st)
{
	if (S_ISDIR(st->st_mode) || st->st_nlink < 2)
		return UN_LINKS_NONE;
	return ex->workfd < 0 || !ex->layers[layer].lower ? UN_LINKS_SHARED
							  : UN_LINKS_GROUP;
}

bool un_obj_upper(const struct un_export *ex, const struct un_obj *o)
{
	return ex->workfd >= 0 && o->ninst && o->inst[0].layer == 0;
}

void un_obj_push_top(struct un_obj *o, int fd)
{
	assert(!o->owner); /* a view is never changed */
	if (!S_ISDIR(o->type)) {
		un_sys_close(o->inst[0].fd);
		o->inst[0] = (struct un_inst){.fd = fd, .layer = 0};
		return;
	}
	assert(o->ninst < o->cap);
	memmove(&o->inst[1], &o->inst[0], o->ninst * sizeof(o->inst[0]));
	o->inst[0] = (struct un_inst){.fd = fd, .layer = 0};
	o->ninst++;
}

struct un_obj *un_obj_get(struct un_obj *o)
{
	atomic_fetch_add(&o->ref, 1);
	return o;
}

void un_obj_put(struct un_obj *o)
{
	if (!o || atomic_fetch_sub(&o->ref, 1) != 1)
		return;
	if (o->owner) /* a view: the descriptors are the owner's */
		un_obj_put(o->owner);
	else
		for (size_t i = 0; i < o->ninst; i++)
			un_sys_close(o->inst[i].fd);
	free(o);
}

un_id un_obj_id(const struct un_obj *o)
{
	return o->id;
}

un_id un_obj_parent_id(const struct un_obj *o)
{
	return o->parent;
}

mode_t un_obj_type(const struct un_obj *o)
{
	return o->type;
}

int un_name_check(const char *name, size_t *len)
{
	size_t n = strnlen(name, UN_NAME_MAX + 1);

	if (n == 0 || memchr(name, '/', n))
		return -EINVAL;
	if (n > UN_NAME_MAX)
		return -ENAMETOOLONG;
	*len = n;
	return 0;
}

int un_root(struct un_export *ex, struct un_obj **out)
{
	struct un_obj *o;
	int fd;

	o = obj_alloc(ex->nlayers);
	if (!o)
		return -ENOMEM;
	o->id = o->parent = o->fileid = ex->root_id;
	o->type = S_IFDIR;
	/* The roots of all layers always merge, as in overlayfs. */
	for (size_t i = 0; i < ex->nlayers; i++) {
		fd = un_sys_dup(ex->layers[i].fd);
		if (fd < 0) {
			un_obj_put(o);
			return fd;
		}
		o->inst[o->ninst++] = (struct un_inst){.fd = fd, .layer = (uint16_t)i};
	}
	*out = o;
	return 0;
}

/* Keeps descriptor FD (ownership moves to LK) as the next instance. */
static void lookup_keep(struct lookup *lk, int fd, uint16_t layer, const struct stat *st)
{
	unsigned n = lk->m.nfound - 1;

	lk->found[n] = (struct un_inst){.fd = fd, .layer = layer};
	lk->di[n] = (struct un_devino){.dev = st->st_dev, .ino = st->st_ino};
	lk->ct[n] = ts_ns(&st->st_ctim);
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

/* un_dir_opaque_own of the directory FD whose stat ST was taken after the
 * clock read T0: from the memo where it holds, else read and remembered
 * if settled (design notes). */
static int opq_own(int fd, const struct stat *st, bool lower, const struct timespec *t0)
{
	int r = opq_recall(st, lower);

	if (r < 0) {
		r = un_dir_opaque_own(fd, lower);
		if (r >= 0)
			opq_remember(st, lower, r == 1, t0);
	}
	return r;
}

/* un_dir_opaque of the kept directory FD (stat ST) named LK->name in PFD;
 * its own part goes to LK->opq (rc invariant 11). */
static int lookup_opaque(struct lookup *lk, int fd, int pfd, const struct stat *st,
			 bool lower)
{
	int r = opq_own(fd, st, lower, &lk->t0);

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
	lookup_keep(lk, fd, pi->layer, &st);
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
	    .inst = lk->di,
	    .ninst = lk->m.nfound,
	    .links = un_links_of(lk->ex, lk->found[0].layer, &lk->top),
	};
	struct un_obj *o;
	un_id id, fileid;
	int err;

	err = un_node_assign(lk->ex->st, &obs, 1, &id, &fileid);
	if (err)
		return err;
	o = obj_alloc(lk->m.nfound);
	if (!o)
		return -ENOMEM;
	o->id = id;
	o->fileid = fileid;
	o->parent = lk->dir->id;
	o->type = obs.type;
	o->namelen = (uint16_t)lk->len;
	memcpy(o->name, lk->name, lk->len);
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

/* What a lookup read, for the resolve cache. */
struct lookup_read {
	size_t nvis; /* DIR's instances read; for -ENOENT, 0 when the absence
		      * rests on more than their entries (rc invariant 9) */
	bool open;   /* no stop: a DIR with more instances would have more read */
	int8_t opq;  /* the own opaque flag of the result's last instance as
		      * read; -1: not read (rc invariant 11) */
	struct rc_stamp *stamps; /* the result's instances'; room for
				  * DIR->ninst */
};

/* un_lookup of a name other than "." and "..", which un_name_check
 * passed (LEN), with the engine's identity already taken; with RD, what it
 * read, for the resolve cache. */
static int lookup_in(struct un_export *ex, const struct un_obj *dir, const char *name,
		     size_t len, struct un_obj **out, struct lookup_read *rd)
{
	struct lookup *lk;
	size_t i;
	int err = 0;

	/* One allocation for LK and its arrays, as long as DIR's stack. */
	lk = un_sys_malloc(
	    sizeof(*lk) +
	    dir->ninst * (sizeof(lk->found[0]) + sizeof(lk->di[0]) + sizeof(lk->ct[0])));
	if (!lk)
		return -ENOMEM;
	*lk = (struct lookup){.ex = ex, .dir = dir, .name = name, .len = len, .opq = -1};
	lk->di = (struct un_devino *)(lk + 1);
	lk->ct = (long long *)(lk->di + dir->ninst);
	lk->found = (struct un_inst *)(lk->ct + dir->ninst);
	lk->private = un_name_private(name, len);
	clock_gettime(CLOCK_REALTIME, &lk->t0);
	for (i = 0; i < dir->ninst && !lk->m.stop && !err; i++)
		err = lookup_layer(lk, i);
	if (!err && lk->m.nfound == 0)
		err = -ENOENT;
	for (unsigned k = 0; !err && rd && k < lk->m.nfound; k++)
		rd->stamps[k] = (struct rc_stamp){.dev = lk->di[k].dev,
						  .ino = lk->di[k].ino,
						  .ctime = lk->ct[k],
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

/* ---- the resolve cache (design notes, rc invariants) ---- */

/* Descriptors held by entries of every export (rc invariant 5), and the
 * bound on them, read once: a quarter of what the process may open. */
static atomic_size_t rc_nfds, rc_cap;

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

static void rc_put(struct un_rc_entry *e)
{
	if (!e || atomic_fetch_sub(&e->ref, 1) != 1)
		return;
	if (e->obj) {
		atomic_fetch_sub(&rc_nfds, e->obj->ninst);
		un_obj_put(e->obj);
	}
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

static struct un_rc_slot *rc_slot_of(struct un_export *ex, un_id id)
{
	return &ex->rc[(id * 0x9e3779b97f4a7c15ull) >> 40 & (UN_RC_BUCKETS - 1)];
}

/* The name index (rc invariant 7): entries by (parent, name), for
 * un_lookup, which has no node id to go by; also the negative ones. */
static struct un_rc_slot *rn_slot_of(struct un_export *ex, un_id parent, const char *name,
				     size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull ^ parent;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 0x100000001b3ull;
	h ^= h >> 29;
	return &ex->rn[(h * 0x9e3779b97f4a7c15ull) >> 40 & (UN_RC_BUCKETS - 1)];
}

/* The entry of bucket S that MATCH says is (K, NAME), with a reference of
 * the caller's, or NULL. */
static struct un_rc_entry *bucket_get(struct un_rc_slot *s, rc_match_fn *match, un_id k,
				      const char *name, size_t len)
{
	struct un_rc_entry *e = NULL;

	if (atomic_exchange_explicit(&s->busy, true, memory_order_acquire))
		return NULL;
	for (unsigned i = 0; i < UN_RC_WAYS && !e; i++)
		if (s->e[i] && match(s->e[i], k, name, len)) {
			e = s->e[i];
			atomic_fetch_add(&e->ref, 1);
		}
	atomic_store_explicit(&s->busy, false, memory_order_release);
	return e;
}

/* Puts E (the caller's reference moves) in bucket S: in place of the entry
 * of its own key (K, NAME), else in an empty way, else in place of the
 * next in turn.  With OLD: takes OLD's place only if it is still there
 * (NULL stays).  A busy bucket changes nothing. */
static void bucket_swap(struct un_rc_slot *s, rc_match_fn *match, un_id k,
			const char *name, size_t len, struct un_rc_entry *e,
			const struct un_rc_entry *old)
{
	struct un_rc_entry *gone = e;
	unsigned w = UN_RC_WAYS;

	if (atomic_exchange_explicit(&s->busy, true, memory_order_acquire)) {
		rc_put(gone);
		return;
	}
	for (unsigned i = 0; i < UN_RC_WAYS && w == UN_RC_WAYS; i++)
		if (old ? s->e[i] == old : s->e[i] && match(s->e[i], k, name, len))
			w = i;
	for (unsigned i = 0; !old && i < UN_RC_WAYS && w == UN_RC_WAYS; i++)
		if (!s->e[i])
			w = i;
	if (!old && w == UN_RC_WAYS)
		w = s->next++ % UN_RC_WAYS;
	if (w < UN_RC_WAYS) {
		gone = s->e[w];
		s->e[w] = e;
	}
	atomic_store_explicit(&s->busy, false, memory_order_release);
	rc_put(gone);
}

/* The entry of ID with a reference of the caller's, or NULL. */
static struct un_rc_entry *rc_get(struct un_export *ex, un_id id)
{
	return bucket_get(rc_slot_of(ex, id), rc_is_id, id, NULL, 0);
}

/* Puts E (the caller's reference moves) in the slot of ID, or, when OLD is
 * given, takes OLD's place only if it is still there (NULL stays). */
static void rc_swap(struct un_export *ex, un_id id, struct un_rc_entry *e,
		    const struct un_rc_entry *old)
{
	bucket_swap(rc_slot_of(ex, id), rc_is_id, id, NULL, 0, e, old);
}

/* The entry of NAME in directory PARENT with a reference of the caller's,
 * or NULL. */
static struct un_rc_entry *rn_get(struct un_export *ex, un_id parent, const char *name,
				  size_t len)
{
	return bucket_get(rn_slot_of(ex, parent, name, len), rc_is_name, parent, name,
			  len);
}

/* As rc_swap, in E's (or OLD's) slot of the name index. */
static void rn_swap(struct un_export *ex, struct un_rc_entry *e,
		    const struct un_rc_entry *old)
{
	const struct un_rc_entry *k = e ? e : old;

	bucket_swap(rn_slot_of(ex, k->parent, k->name, k->namelen), rc_is_name, k->parent,
		    k->name, k->namelen, e, old);
}

void un_rc_clear(struct un_export *ex)
{
	un_obj_put(atomic_load(&ex->rc_root));
	atomic_store(&ex->rc_root, NULL);
	for (size_t i = 0; i < UN_RC_BUCKETS; i++)
		for (unsigned w = 0; w < UN_RC_WAYS; w++) {
			rc_put(ex->rc[i].e[w]);
			ex->rc[i].e[w] = NULL;
			rc_put(ex->rn[i].e[w]);
			ex->rn[i].e[w] = NULL;
		}
}

static struct rc_stamp rc_stamp_of(const struct stat *st, uint16_t layer)
{
	return (struct rc_stamp){.dev = st->st_dev,
				 .ino = st->st_ino,
				 .ctime = ts_ns(&st->st_ctim),
				 .layer = layer};
}

/* The stamp of FD; its stat to *KEEP too when KEEP. */
static int rc_stamp_fd(int fd, uint16_t layer, struct rc_stamp *out, struct stat *keep)
{
	struct stat st;
	int err = un_sys_fstat(fd, &st);

	if (!err) {
		*out = rc_stamp_of(&st, layer);
		if (keep)
			*keep = st;
	}
	return err;
}

static bool rc_stamp_eq(const struct rc_stamp *a, const struct rc_stamp *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->ctime == b->ctime &&
	       a->layer == b->layer;
}

/* A walk from the root: the object reached so far and its instances'
 * stamps, each taken before any name in it was read (rc invariant 2). */
struct walk {
	struct un_export *ex;
	uint64_t epoch;	    /* read before the table was */
	struct timespec t0; /* clock before any stamp was taken */
	struct un_obj *cur;
	bool shared;	      /* cur is (also) the cache's */
	size_t have;	      /* stamps of cur known: cst[0..have-1] */
	struct rc_stamp *cst; /* cur's, nlayers + 1 long */
	struct rc_stamp *nst; /* the next object's, as long */
	void *buf;	      /* what cst and nst point into: SBUF or malloc'd */
	struct rc_stamp sbuf[2 * RC_WALK_STAMPS];
	/* inst[0]'s stat, of cur and of the next object, when read */
	bool ctop_ok, ntop_ok;
	struct stat ctop, ntop;
};

/* Sets W up for a walk in EX: the epoch and the clock read before anything
 * else, room for the stamps (on W itself for up to 16 layers). */
static int walk_init(struct walk *w, struct un_export *ex)
{
	w->ex = ex;
	w->cur = NULL;
	w->have = 0;
	w->shared = w->ctop_ok = w->ntop_ok = false;
	w->buf = w->sbuf;
	if (ex->nlayers + 1 > RC_WALK_STAMPS)
		w->buf = un_sys_malloc(2 * (ex->nlayers + 1) * sizeof(w->cst[0]));
	if (!w->buf)
		return -ENOMEM;
	w->cst = w->buf;
	w->nst = w->cst + ex->nlayers + 1;
	w->epoch = atomic_load(&ex->st->node_epoch);
	clock_gettime(CLOCK_REALTIME, &w->t0);
	return 0;
}

static void walk_fini(struct walk *w)
{
	un_obj_put(w->cur);
	if (w->buf != w->sbuf)
		free(w->buf);
}

/* Stamps of cur's first N instances, taking those not known yet. */
static int walk_stamps(struct walk *w, size_t n)
{
	int err;

	for (; w->have < n; w->have++) {
		err = rc_stamp_fd(w->cur->inst[w->have].fd, w->cur->inst[w->have].layer,
				  &w->cst[w->have], w->have ? NULL : &w->ctop);
		if (err)
			return err; /* that one stays unknown */
		w->ctop_ok |= w->have == 0;
	}
	return 0;
}

/* Whether the node table still gives E's node E's parent and name: the
 * epoch is E's, or E is a directory's and HOP, the table's record of its
 * node read after W's epoch, names E's parent and name (rc invariant 1). */
static bool rc_same_name(const struct walk *w, const struct un_rc_entry *e,
			 const struct un_node_hop *hop)
{
	if (e->epoch == w->epoch)
		return true;
	return hop && e->obj && hop->id == e->id && hop->parent == e->parent &&
	       hop->namelen == e->namelen && !memcmp(hop->name, e->name, e->namelen);
}

/* Whether what E's lookup read of cur is unchanged: the node's name in the
 * table (HOP: its record, or NULL), the same parent and the stamps of the
 * parent's instances it read. */
static bool rc_valid_parent(struct walk *w, const struct un_rc_entry *e,
			    const struct un_node_hop *hop)
{
	if (!rc_same_name(w, e, hop) || e->parent != w->cur->id || e->nvis == 0 ||
	    e->nvis > w->cur->ninst || (e->open && e->nvis != w->cur->ninst) ||
	    walk_stamps(w, e->nvis))
		return false;
	for (size_t j = 0; j < e->nvis; j++)
		if (!rc_stamp_eq(&w->cst[j], &e->st[j]))
			return false;
	return true;
}

/* Whether own instance J of directory entry E, whose stat ST was just
 * taken, reads as it did for the lookup that made E (rc invariant 11): the
 * same (dev, ino, layer) and ctime, or, when only the ctime differs, the
 * same own opaque flag read again now if a lookup reads it (*READ set). */
static bool rc_same_dir_inst(struct walk *w, const struct un_rc_entry *e, size_t j,
			     const struct stat *st, bool *read)
{
	const struct rc_stamp *was = &e->st[e->nvis + j];
	const struct un_inst *in = &e->obj->inst[j];
	/* kept below: not opaque; the last: as the entry says */
	int want = j + 1 < e->obj->ninst ? 0 : e->opq;

	if (st->st_dev != was->dev || st->st_ino != was->ino || in->layer != was->layer)
		return false;
	if (ts_ns(&st->st_ctim) == was->ctime || want < 0)
		return true;
	*read = true;
	return opq_own(in->fd, st, w->ex->layers[in->layer].lower, &w->t0) == want;
}

static bool rc_remember(struct walk *w, struct un_obj *next, const struct lookup_read *rd,
			const struct un_rc_entry *old);

/* After a hop that read flags again (rc invariant 11): E is made again
 * with the ctimes W->nst took, if all are settled, so that the next hop
 * reads none; else E stays, its stamps equal to none of them. */
static void rc_refresh(struct walk *w, const struct un_rc_entry *e)
{
	struct lookup_read rd = {.nvis = e->nvis, .open = e->open, .opq = e->opq};

	for (size_t j = 0; j < e->obj->ninst; j++)
		if (!settled(w->nst[j].ctime, &w->t0))
			return;
	rc_remember(w, e->obj, &rd, e);
}

/* Directory entry E (parent valid) is what a lookup would give if its own
 * instances read as they did (rc invariant 11); their stamps, taken now,
 * go to W->nst, and inst[0]'s stat to W->ntop. */
static bool rc_hit_dir(struct walk *w, const struct un_rc_entry *e, struct un_obj **next)
{
	const struct un_obj *o = e->obj;
	bool read = false;
	struct stat st;

	for (size_t j = 0; j < o->ninst; j++) {
		if (un_sys_fstat(o->inst[j].fd, &st) ||
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
 * object E found and still no white-out (rc invariant 6). */
static bool rc_same_file(const struct un_rc_entry *e, const struct stat *st)
{
	const struct rc_stamp *own = &e->st[e->nvis];

	if (st->st_dev != own->dev || st->st_ino != own->ino ||
	    (st->st_mode & S_IFMT) != e->type)
		return false;
	/* What un_whiteout_classify reads beyond the stat: the white-out
	 * xattr of an empty regular file, which its ctime covers. */
	if (S_ISREG(st->st_mode) && st->st_size == 0)
		return ts_ns(&st->st_ctim) == own->ctime;
	return !(S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0));
}

/* Non-directory entry E (parent valid): opens its name again in the
 * parent's instance it was found in, and makes the object from that
 * descriptor if it is E's object still. */
static bool rc_hit_file(struct walk *w, const struct un_rc_entry *e, struct un_obj **next)
{
	const struct un_inst *pi = &w->cur->inst[e->nvis - 1];
	struct un_obj *o = NULL;
	struct stat st;
	int fd;

	if (pi->layer != e->st[e->nvis].layer)
		return false;
	fd = un_sys_open_beneath(pi->fd, e->name, O_PATH);
	if (fd < 0)
		return false;
	if (!un_sys_fstat(fd, &st) && rc_same_file(e, &st))
		o = obj_alloc(1);
	if (!o) {
		un_sys_close(fd);
		return false;
	}
	o->id = e->id;
	o->fileid = e->fileid;
	o->parent = e->parent;
	o->type = e->type;
	o->namelen = e->namelen;
	memcpy(o->name, e->name, e->namelen);
	o->inst[o->ninst++] = (struct un_inst){.fd = fd, .layer = pi->layer};
	w->nst[0] = rc_stamp_of(&st, pi->layer);
	w->ntop = st;
	w->ntop_ok = true;
	*next = o;
	return true;
}

/* What looking E's name up in cur would give now, from E, if E still
 * holds (HOP: the table's record of E's node, or NULL): *NEXT (a reference
 * of the caller's; *SHARED when it is the cache's object; NULL for a
 * negative entry: absent) and its stamps in W->nst.  Any failure is a
 * miss. */
static bool rc_hit(struct walk *w, const struct un_rc_entry *e,
		   const struct un_node_hop *hop, struct un_obj **next, bool *shared)
{
	if (!rc_valid_parent(w, e, hop))
		return false;
	*shared = e->obj != NULL;
	if (e->id == UN_ID_NONE) {
		*next = NULL; /* the name is absent (rc invariant 9) */
		return true;
	}
	return e->obj ? rc_hit_dir(w, e, next) : rc_hit_file(w, e, next);
}

/* A new entry (one reference) for NAME in cur with NST stamps, the
 * parent's NVIS first, copied from W; the rest is the caller's to fill. */
static struct un_rc_entry *rc_entry_new(struct walk *w, const char *name, size_t len,
					size_t nvis, size_t nst)
{
	struct un_rc_entry *e =
	    un_sys_malloc(sizeof(*e) + nst * sizeof(e->st[0]) + len + 1);

	if (!e)
		return NULL;
	*e = (struct un_rc_entry){.parent = w->cur->id, .epoch = w->epoch, .nvis = nvis};
	atomic_init(&e->ref, 1);
	e->name = (char *)(e->st + nst);
	e->namelen = (uint16_t)len;
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	memcpy(e->st, w->cst, nvis * sizeof(e->st[0]));
	return e;
}

/* Whether the stamps of the first NVIS instances of cur, which a new
 * entry would hold, are settled (rc invariant 3). */
static bool rc_parent_settled(const struct walk *w, size_t nvis)
{
	for (size_t j = 0; j < nvis; j++)
		if (!settled(w->cst[j].ctime, &w->t0))
			return false;
	return true;
}

/* The stamp an entry keeps of its own instance S: an unsettled ctime as
 * RC_UNSETTLED, which no hop takes for unchanged (rc invariants 6, 11). */
static struct rc_stamp rc_own_kept(const struct walk *w, const struct rc_stamp *s)
{
	struct rc_stamp k = *s;

	if (!settled(k.ctime, &w->t0))
		k.ctime = RC_UNSETTLED;
	return k;
}

/* Counts the descriptors a directory's entry will hold against the bound
 * (rc invariant 5); false if they do not fit. */
static bool rc_reserve(const struct un_obj *next)
{
	if (!S_ISDIR(next->type))
		return true;
	if (atomic_fetch_add(&rc_nfds, next->ninst) + next->ninst > rc_fds_max()) {
		atomic_fetch_sub(&rc_nfds, next->ninst);
		return false;
	}
	return true;
}

/* Remembers NEXT, found by a lookup in cur that read what RD says (its
 * stamps in W), if the parent's stamps are settled (rc invariant 3); with
 * OLD, in OLD's place only, if it is still there (rc_refresh).  True if
 * NEXT is now the cache's too. */
static bool rc_remember(struct walk *w, struct un_obj *next, const struct lookup_read *rd,
			const struct un_rc_entry *old)
{
	bool dir = S_ISDIR(next->type);
	size_t nown = dir ? next->ninst : 1;
	struct un_rc_entry *e;

	if (w->have < rd->nvis || !rc_parent_settled(w, rd->nvis) || !rc_reserve(next))
		return false;
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
	e->obj = dir ? un_obj_get(next) : NULL; /* rc invariant 6 */
	for (size_t j = 0; j < nown; j++)
		e->st[rd->nvis + j] = rc_own_kept(w, &w->nst[j]);
	atomic_fetch_add(&e->ref, 1);
	rn_swap(w->ex, e, old);
	rc_swap(w->ex, e->id, e, old);
	return dir;
}

/* Remembers that NAME is absent from cur, by a lookup that read what RD
 * says (nvis 0: one it may not remember; rc invariant 9). */
static void rc_remember_absent(struct walk *w, const char *name, size_t len,
			       const struct lookup_read *rd)
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

/* Moves W on to NEXT (reference moves), whose stamps are in W->nst. */
static void walk_advance(struct walk *w, struct un_obj *next, bool shared)
{
	struct rc_stamp *t = w->cst;

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
 * (rc invariant 2), and remembers the result if it may; W moves on to it. */
static int walk_lookup(struct walk *w, const char *name, size_t len)
{
	struct lookup_read rd = {.stamps = w->nst};
	struct un_obj *next;
	int err;

	w->ntop_ok = false;
	err = walk_stamps(w, w->cur->ninst);
	if (!err)
		err = lookup_in(w->ex, w->cur, name, len, &next, &rd);
	if (err == -ENOENT && rd.nvis)
		rc_remember_absent(w, name, len, &rd);
	if (err)
		return err;
	walk_advance(w, next, rc_remember(w, next, &rd, NULL));
	return 0;
}

/* Moves W on from the cache's entry E if it holds (a reference of the
 * caller's, which this drops; HOP as rc_hit says): 1, or -ENOENT from a
 * negative entry; 0 for a miss, and a stale entry leaves its slots. */
static int walk_cached(struct walk *w, struct un_rc_entry *e,
		       const struct un_node_hop *hop)
{
	struct un_obj *next = NULL;
	bool shared = false;
	int r = 0;

	if (!e)
		return 0;
	if (!rc_hit(w, e, hop, &next, &shared)) {
		rn_swap(w->ex, NULL, e); /* stale: its descriptors go */
		if (e->id != UN_ID_NONE)
			rc_swap(w->ex, e->id, NULL, e);
	} else if (next) {
		walk_advance(w, next, shared);
		r = 1;
	} else {
		r = -ENOENT;
	}
	rc_put(e);
	return r;
}

/* One hop: from the cache where its entry holds, else by a lookup. */
static int walk_hop(struct walk *w, const struct un_node_hop *hop)
{
	size_t len;
	int err;

	if (walk_cached(w, rc_get(w->ex, hop->id), hop) == 1)
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

/* A copy of O with descriptors of its own, for a caller that may change
 * it (a copy-up puts a new top instance on its object). */
static int obj_copy(const struct un_obj *o, struct un_obj **out)
{
	struct un_obj *c = obj_alloc(o->ninst);
	int fd;

	if (!c)
		return -ENOMEM;
	c->id = o->id;
	c->parent = o->parent;
	c->fileid = o->fileid;
	c->type = o->type;
	c->namelen = o->namelen;
	memcpy(c->name, o->name, o->namelen);
	for (size_t j = 0; j < o->ninst; j++) {
		fd = un_sys_dup(o->inst[j].fd);
		if (fd < 0) {
			un_obj_put(c);
			return fd;
		}
		c->inst[c->ninst++] =
		    (struct un_inst){.fd = fd, .layer = o->inst[j].layer};
	}
	*out = c;
	return 0;
}

/* The export's root object, which walks share (its instances are the
 * layer roots, fixed for the export's life): no descriptors to dup and
 * close per walk.  A reference of the caller's. */
static int shared_root(struct un_export *ex, struct un_obj **out)
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

/* A view of cur (rc invariant 10): its descriptors stay cur's, and what
 * W read of it (inst[0]'s stat, its stamps) goes with it. */
static int view_of(struct walk *w, struct un_obj **out)
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
	v->have_top = w->ctop_ok;
	if (w->ctop_ok)
		v->top = w->ctop;
	v->nstamps = 0;
	v->stamps = (struct rc_stamp *)((char *)v + off);
	if (w->have >= c->ninst) {
		memcpy(v->stamps, w->cst, c->ninst * sizeof(w->cst[0]));
		v->nstamps = c->ninst;
	}
	*out = v;
	return 0;
}

/* Hands W's object out: a view when VIEW, else the object, or a copy of
 * it when it is the cache's (rc invariant 4). */
static int walk_out(struct walk *w, bool view, struct un_obj **out)
{
	if (view)
		return view_of(w, out);
	if (w->shared)
		return obj_copy(w->cur, out);
	*out = un_obj_get(w->cur);
	return 0;
}

/* Walks HOPS[1..n-1] down from the root; any hop that is gone or names
 * another node makes the whole handle stale. */
static int resolve_walk(struct walk *w, const struct un_node_hop *hops, size_t n,
			bool view, struct un_obj **out)
{
	int err;

	w->have = 0;
	w->shared = true;
	w->ctop_ok = w->ntop_ok = false;
	err = shared_root(w->ex, &w->cur);
	for (size_t i = 1; i < n && !err; i++)
		err = walk_hop(w, &hops[i]);
	if (!err)
		err = walk_out(w, view, out);
	un_obj_put(w->cur);
	w->cur = NULL;
	return err;
}

/* The path of ID from the cache's entries alone (rc invariant 8): HOPS
 * gets at most RC_CHAIN_MAX of them, root first; false if any entry on the
 * way is missing or of another epoch than W's. */
static bool rc_path(struct walk *w, un_id id, struct un_node_hop *hops, size_t *n)
{
	struct un_rc_entry *e;
	size_t k = RC_CHAIN_MAX;

	while (id != w->ex->root_id) {
		if (k == 1)
			return false;
		e = rc_get(w->ex, id);
		if (!e || e->epoch != w->epoch) {
			rc_put(e);
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
		rc_put(e);
	}
	hops[--k] = (struct un_node_hop){.id = id};
	*n = RC_CHAIN_MAX - k;
	memmove(hops, hops + k, *n * sizeof(hops[0]));
	return true;
}

/* One walk to ID: the path from the cache when it has every hop (only on
 * a first try: a later one reads the table), else from the table. */
static int resolve_once(struct walk *w, un_id id, bool first, bool view,
			struct un_obj **out)
{
	struct un_node_hop *hops = NULL, chain[RC_CHAIN_MAX];
	size_t n;
	int err;

	w->epoch = atomic_load(&w->ex->st->node_epoch); /* before the table */
	if (first && rc_path(w, id, chain, &n))
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

static int resolve(struct un_export *ex, un_id id, bool view, struct un_obj **out)
{
	struct un_creds saved;
	struct walk w;
	int err;

	if (id == ex->root_id)
		return view ? shared_root(ex, out) : un_root(ex, out);
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
 * found by the name index (rc invariant 7) when it holds, else a lookup
 * whose result the cache may remember. */
static int lookup_cached(struct un_export *ex, struct un_obj *dir, const char *name,
			 size_t len, bool view, struct un_obj **out)
{
	struct walk w;
	int err;

	err = walk_init(&w, ex);
	if (err)
		return err;
	w.cur = un_obj_get(dir);
	w.shared = false;
	if (dir->nstamps == dir->ninst) { /* a view: its walk's (rc inv. 10) */
		memcpy(w.cst, dir->stamps, dir->ninst * sizeof(w.cst[0]));
		w.have = dir->ninst;
	}
	err = walk_cached(&w, rn_get(ex, dir->id, name, len), NULL);
	if (err == 0)
		err = walk_lookup(&w, name, len);
	else if (err == 1)
		err = 0;
	if (!err)
		err = walk_out(&w, view, out);
	walk_fini(&w);
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

static void attr_time(struct timespec *out, const struct timespec *in)
{
	*out = *in;
}

int un_getattr(struct un_export *ex, struct un_obj *o, struct un_attr *out)
{
	struct stat st;
	int err;

	if (o->have_top) { /* a view's: what its walk read (rc invariant 10) */
		st = o->top;
	} else {
		err = un_sys_fstat(o->inst[0].fd, &st);
		if (err)
			return err;
	}
	*out = (struct un_attr){
	    .mode = st.st_mode,
	    /* A merged directory's link count is no count of its subdirs. */
	    .nlink = S_ISDIR(st.st_mode) && o->ninst > 1 ? 1 : (uint32_t)st.st_nlink,
	    .uid = st.st_uid,
	    .gid = st.st_gid,
	    .size = (uint64_t)st.st_size,
	    .used = (uint64_t)st.st_blocks * 512,
	    .rdev_major = major(st.st_rdev),
	    .rdev_minor = minor(st.st_rdev),
	    .fsid = ex->id,
	    .fileid = o->fileid,
	};
	attr_time(&out->atime, &st.st_atim);
	attr_time(&out->mtime, &st.st_mtim);
	attr_time(&out->ctime, &st.st_ctim);
	return 0;
}

int un_readlink(struct un_export *ex, struct un_obj *o, char *buf, size_t size,
		size_t *len)
{
	char tmp[PATH_MAX];
	ssize_t n;

	(void)ex;
	if (!S_ISLNK(o->type))
		return -EINVAL;
	n = un_sys_readlinkat(o->inst[0].fd, "", tmp, sizeof(tmp));
	if (n < 0)
		return (int)n;
	if ((size_t)n == sizeof(tmp) || (size_t)n > size)
		return -ENAMETOOLONG;
	memcpy(buf, tmp, (size_t)n);
	*len = (size_t)n;
	return 0;
}

int un_statfs(struct un_export *ex, struct un_statfs *out)
{
	struct statvfs sv;
	int err;

	/* layers[0] is the upper when there is one, else the top-most lower. */
	err = un_sys_fstatvfs(ex->layers[0].fd, &sv);
	if (err)
		return err;
	*out = (struct un_statfs){
	    .tbytes = (uint64_t)sv.f_blocks * sv.f_frsize,
	    .fbytes = (uint64_t)sv.f_bfree * sv.f_frsize,
	    .abytes = (uint64_t)sv.f_bavail * sv.f_frsize,
	    .tfiles = sv.f_files,
	    .ffiles = sv.f_ffree,
	    .afiles = sv.f_favail,
	    .namemax = sv.f_namemax < UN_NAME_MAX ? (uint32_t)sv.f_namemax : UN_NAME_MAX,
	};
	return 0;
}
