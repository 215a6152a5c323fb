/* lookup.c - objects: resolving names and node ids, and reading objects.
 *
 * An object (struct un_obj) is a node id plus its layer stack: for a
 * directory, an O_PATH descriptor of the directory in every layer it is merged
 * from (top-most first, down to and including the first opaque one); for any
 * other object, the one descriptor of its top-most instance.  Objects hold no
 * descriptor beyond their own lifetime, so a change in a layer shows on the
 * next lookup.
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
 *  2. Only a settled flag is remembered: the directory's ctime is at least
 *     UN_OPAQUE_SETTLE_NS older than a clock read taken before its fstat.
 *     A change made after that read gets a ctime no older than the read
 *     minus one timestamp tick, so it cannot equal the remembered ctime; two
 *     changes inside one tick, the second after our read, could.
 *  3. The stat that keys a recall is taken on every walk, after the
 *     directory was opened (the fstat lookup_layer makes anyway), so a change
 *     before it shows as another ctime and misses the memo.
 *  4. A slot is a plain struct behind a try-lock: a busy slot is a miss (the
 *     flag is read from the layer), so no thread ever waits on the memo.
 *     A replaced slot loses only speed.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
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
	struct timespec t0; /* clock before any layer was read (memo inv. 2) */
	struct un_merge m;
	struct un_inst *found; /* kept instances, descriptors owned */
	struct un_devino *di;  /* their identities; both dir->ninst long */
	struct stat top;       /* of found[0] */
};

/* One remembered opaque flag (design notes). */
struct opq_slot {
	_Atomic bool busy; /* the try-lock (invariant 4) */
	bool used, lower, opaque;
	dev_t dev;
	ino_t ino;
	struct timespec ctime;
};

static struct opq_slot opq_memo[OPQ_SLOTS];
static _Atomic long long opq_settle_ns = UN_OPAQUE_SETTLE_NS;

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

/* Remembers OPAQUE for directory ST if it is settled before T0 (inv. 2). */
static void opq_remember(const struct stat *st, bool lower, bool opaque,
			 const struct timespec *t0)
{
	struct opq_slot *s = opq_slot_of(st);

	if (ts_ns(t0) - ts_ns(&st->st_ctim) < atomic_load(&opq_settle_ns))
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

/* un_dir_opaque of the kept directory FD (stat ST) named LK->name in PFD,
 * its own part from the memo where it holds (design notes). */
static int lookup_opaque(const struct lookup *lk, int fd, int pfd, const struct stat *st,
			 bool lower)
{
	int r = opq_recall(st, lower);

	if (r < 0) {
		r = un_dir_opaque_own(fd, lower);
		if (r < 0)
			return r;
		opq_remember(st, lower, r == 1, &lk->t0);
	}
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
static int lookup_dots(struct un_export *ex, struct un_obj *dir, size_t len,
		       struct un_obj **out)
{
	if (len == 1) {
		*out = un_obj_get(dir);
		return 0;
	}
	if (dir->id == ex->root_id)
		return un_root(ex, out);
	return un_resolve(ex, dir->parent, out);
}

int un_lookup(struct un_export *ex, struct un_obj *dir, const char *name,
	      struct un_obj **out)
{
	struct lookup *lk;
	struct un_creds saved;
	size_t len;
	int err;

	if (!S_ISDIR(dir->type))
		return -ENOTDIR;
	err = un_name_check(name, &len);
	if (err)
		return err;
	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return lookup_dots(ex, dir, len, out);
	/* One allocation for LK and its arrays, as long as DIR's stack. */
	lk = un_sys_malloc(sizeof(*lk) +
			   dir->ninst * (sizeof(lk->found[0]) + sizeof(lk->di[0])));
	if (!lk)
		return -ENOMEM;
	*lk = (struct lookup){.ex = ex, .dir = dir, .name = name, .len = len};
	lk->found = (struct un_inst *)(lk + 1);
	lk->di = (struct un_devino *)(lk->found + dir->ninst);
	lk->private = un_name_private(name, len);
	clock_gettime(CLOCK_REALTIME, &lk->t0);
	/* As overlayfs: the caller's right to search DIR is judged on the
	 * merged directory (the server's LOOKUP check), the layers are searched
	 * with the engine's identity, since a lower instance may carry other
	 * modes than the merged one. */
	un_sys_creds_override(&saved);
	for (size_t i = 0; i < dir->ninst && !lk->m.stop && !err; i++)
		err = lookup_layer(lk, i);
	un_sys_creds_revert(&saved);
	if (!err && lk->m.nfound == 0)
		err = -ENOENT;
	if (!err)
		err = lookup_obj(lk, out);
	for (unsigned i = 0; i < lk->m.nfound; i++) /* left only on failure */
		un_sys_close(lk->found[i].fd);
	free(lk);
	return err;
}

/* Walks HOPS[1..n-1] down from the root; any hop that is gone or names
 * another node makes the whole handle stale. */
static int resolve_walk(struct un_export *ex, const struct un_node_hop *hops, size_t n,
			struct un_obj **out)
{
	struct un_obj *cur = NULL, *next;
	int err;

	err = un_root(ex, &cur);
	for (size_t i = 1; i < n && !err; i++) {
		err = un_lookup(ex, cur, hops[i].name, &next);
		if (err == -ENOENT || err == -ENOTDIR || err == -EINVAL ||
		    err == -ENAMETOOLONG)
			err = -ESTALE;
		if (err)
			break;
		un_obj_put(cur);
		cur = next;
		if (cur->id != hops[i].id)
			err = -ESTALE; /* replaced: that name is another node now */
	}
	if (err)
		un_obj_put(cur);
	else
		*out = cur;
	return err;
}

static int resolve_once(struct un_export *ex, un_id id, struct un_obj **out)
{
	struct un_node_hop *hops = NULL;
	size_t n;
	int err;

	err = un_node_path(ex->st, id, &hops, &n);
	if (err)
		return err;
	err = -ESTALE; /* a node of another export */
	if (n >= 2 && hops[0].id == ex->root_id)
		err = resolve_walk(ex, hops, n, out);
	free(hops);
	return err;
}

int un_resolve(struct un_export *ex, un_id id, struct un_obj **out)
{
	struct un_creds saved;
	int err = -ESTALE;

	if (id == ex->root_id)
		return un_root(ex, out);
	/* A handle names its object whatever the caller may search on the way
	 * (as knfsd): the walk runs with the engine's identity. */
	un_sys_creds_override(&saved);
	/* A rename (dir.c) changes the layer first and the table after it:
	 * a walk in between finds the old name gone.  The path read again
	 * names the new place; a node really gone stays -ESTALE. */
	for (int tries = 0; tries < RESOLVE_TRIES && err == -ESTALE; tries++)
		err = resolve_once(ex, id, out);
	un_sys_creds_revert(&saved);
	return err;
}

static void attr_time(struct timespec *out, const struct timespec *in)
{
	*out = *in;
}

int un_getattr(struct un_export *ex, struct un_obj *o, struct un_attr *out)
{
	struct stat st;
	int err;

	err = un_sys_fstat(o->inst[0].fd, &st);
	if (err)
		return err;
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

/* Reads up to COUNT bytes at OFF of FD, retrying short reads. */
static ssize_t read_full(int fd, char *buf, size_t count, uint64_t off)
{
	size_t got = 0;
	ssize_t n;

	while (got < count) {
		n = un_sys_pread(fd, buf + got, count - got, (off_t)(off + got));
		if (n == -EINTR)
			continue;
		if (n < 0)
			return n;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

ssize_t un_read(struct un_export *ex, struct un_obj *o, void *buf, size_t count,
		uint64_t off, bool *eof)
{
	struct stat st;
	ssize_t n;
	int fd;

	(void)ex;
	if (S_ISDIR(o->type))
		return -EISDIR;
	if (!S_ISREG(o->type))
		return -EINVAL;
	if (count > SSIZE_MAX)
		count = SSIZE_MAX;
	if (off >= (uint64_t)INT64_MAX - count)
		count = 0; /* nothing can live past off_t's range */
	/* The O_PATH descriptor pins the inode, so this opens the very file
	 * the lookup found, whatever happened to its name since. */
	fd = un_sys_reopen(o->inst[0].fd, O_RDONLY | O_NOCTTY);
	if (fd < 0)
		return fd;
	n = read_full(fd, buf, count, off);
	if (n >= 0) {
		int err = un_sys_fstat(fd, &st);

		if (err)
			n = err;
		else
			*eof = (size_t)n < count ||
			       off + (uint64_t)n >= (uint64_t)st.st_size;
	}
	un_sys_close(fd);
	return n;
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
