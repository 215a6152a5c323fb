/* SPDX-License-Identifier: Apache-2.0 */
/* object.c - objects: what a lookup found under one name, their lifetime,
 * and what reading one gives (attributes, a symlink's text, the export's
 * statfs).
 *
 * An object (struct un_obj) is a node id plus its layer stack: for a
 * directory, an O_PATH descriptor of the directory in every layer it is
 * merged from (top-most first, down to and including the first opaque
 * one); for any other object, the one descriptor of its top-most instance.
 * lookup.c makes them; the resolve cache (rcache.c) shares directories'.
 *
 * Invariants:
 *  1. An object owns its descriptors and closes them with its last
 *     reference (un_obj_put); none outlives it.  A view owns none: it holds
 *     a reference to the object whose descriptors it borrows (its owner).
 *  2. Every object has room for one instance more than it was made with
 *     (un_obj_new), so that a copy-up can put an upper instance on top
 *     (un_obj_push_top) without moving it.
 *  3. A view is never changed: un_obj_push_top asserts it has no owner, so
 *     the stat a view carries (un_getattr) is never older than a change
 *     made through it.
 *  4. An object serves one request at a time: un_obj_push_top changes it
 *     in place without a lock.  An object the resolve cache shares is
 *     handed to a caller that may change it as a copy with descriptors of
 *     its own (un_obj_copy).
 *  5. A merged directory reports one link (un_getattr): the link counts of
 *     its instances are no count of its subdirectories.
 *  6. A merged directory reports as ctime the latest of its instances'
 *     ctimes, its nanoseconds moved by a hash of every instance's (dev,
 *     ino, mtime, ctime) in stack order (un_dir_times_add,
 *     un_dir_times_put).  The Linux NFSv3 client takes the ctime as the
 *     change attribute: it trusts its cached listing and the names it
 *     found absent while the ctime stays the same.  A name added to any
 *     part moves that part's ctime, and a part added, removed or swapped
 *     for another (a reload) changes the hash, even when the times are
 *     equal.  The same parts give the same ctime (no key, no counter), so
 *     a restart changes nothing and a rollback gives back the old one,
 *     which differs from that of the version rolled back from.  Its
 *     seconds are the latest part's own.  The mtime stays the top
 *     instance's, as in overlayfs: a time a client sets (SETATTR, which
 *     cannot set a ctime) reads back as set, whatever the lower parts'
 *     mtimes are.  readdir.c (attr_of) gives the same for an entry, and a
 *     view gives it from its stamps (rcache.c rule 10), without a stat.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "resolve.h"

struct un_obj *un_obj_new(size_t ninst, const struct un_obj_ident *who)
{
	struct un_obj *o =
	    un_sys_calloc(1, sizeof(*o) + (ninst + 1) * sizeof(o->inst[0]));

	if (!o)
		return NULL;
	atomic_init(&o->ref, 1);
	o->cap = ninst + 1; /* rule 2 */
	o->id = who->id;
	o->fileid = who->fileid;
	o->parent = who->parent;
	o->type = who->type;
	assert(who->len <= UN_NAME_MAX);
	o->namelen = (uint16_t)who->len;
	memcpy(o->name, who->name, who->len);
	return o;
}

size_t un_obj_bytes(const struct un_obj *o)
{
	return sizeof(*o) + o->cap * sizeof(o->inst[0]);
}

/* Puts a duplicate of FD, of layer LAYER, below O's instances. */
static int obj_add_dup(struct un_obj *o, int fd, uint16_t layer)
{
	int nfd = un_sys_dup(fd);

	if (nfd < 0)
		return nfd;
	assert(o->ninst < o->cap);
	o->inst[o->ninst++] = (struct un_inst){.fd = nfd, .layer = layer};
	return 0;
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
	assert(!o->owner && !o->bare); /* a view is never changed */
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
	else if (!o->bare)
		for (size_t i = 0; i < o->ninst; i++)
			un_sys_close(o->inst[i].fd);
	if (!o->owner)
		un_dirmemo_free(atomic_load(&o->memo));
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
	const struct un_obj_ident who = {
	    .id = ex->root_id,
	    .fileid = ex->root_id,
	    .parent = ex->root_id,
	    .type = S_IFDIR,
	    .name = "",
	};
	struct un_obj *o = un_obj_new(ex->nlayers, &who);
	int err = 0;

	if (!o)
		return -ENOMEM;
	/* The roots of all layers always merge, as in overlayfs. */
	for (size_t i = 0; i < ex->nlayers && !err; i++)
		err = obj_add_dup(o, ex->layers[i].fd, (uint16_t)i);
	if (err) {
		un_obj_put(o);
		return err;
	}
	*out = o;
	return 0;
}

/* A copy of O with descriptors of its own, for a caller that may change
 * it (a copy-up puts a new top instance on its object). */
int un_obj_copy(const struct un_obj *o, struct un_obj **out)
{
	const struct un_obj_ident who = {
	    .id = o->id,
	    .fileid = o->fileid,
	    .parent = o->parent,
	    .type = o->type,
	    .name = o->name,
	    .len = o->namelen,
	};
	struct un_obj *c;
	int err = 0;

	assert(!o->bare); /* never the cache's: a view's alone */
	c = un_obj_new(o->ninst, &who);
	if (!c)
		return -ENOMEM;
	c->retired = o->retired;
	for (size_t j = 0; j < o->ninst && !err; j++)
		err = obj_add_dup(c, o->inst[j].fd, o->inst[j].layer);
	if (err) {
		un_obj_put(c);
		return err;
	}
	*out = c;
	return 0;
}

static void attr_time(struct timespec *out, const struct timespec *in)
{
	*out = *in;
}

/* Rule 6: a 64-bit mix of each value, in order. */
static uint64_t times_mix(uint64_t h, uint64_t x)
{
	h = (h ^ x) * 0xff51afd7ed558ccdull;
	return h ^ h >> 33;
}

void un_dir_times_add(struct un_dir_times *t, uint64_t dev, uint64_t ino, long long mtime,
		      long long ctime)
{
	if (!t->n)
		t->mtime = mtime; /* the top part's */
	if (!t->n || ctime > t->ctime)
		t->ctime = ctime;
	t->h = times_mix(t->h, dev);
	t->h = times_mix(t->h, ino);
	t->h = times_mix(t->h, (uint64_t)mtime);
	t->h = times_mix(t->h, (uint64_t)ctime);
	t->n++;
}

void un_dir_times_add_stat(struct un_dir_times *t, const struct stat *st)
{
	un_dir_times_add(t, st->st_dev, st->st_ino, un_ts_ns(&st->st_mtim),
			 un_ts_ns(&st->st_ctim));
}

/* NS (since the epoch) as a timespec whose nanoseconds are moved by H
 * within their second. */
static struct timespec times_moved(long long ns, uint64_t h)
{
	long long sec = ns / 1000000000ll, nsec = ns % 1000000000ll;

	if (nsec < 0) {
		nsec += 1000000000ll;
		sec--;
	}
	nsec = (long long)(((uint64_t)nsec + h % 1000000000ull) % 1000000000ull);
	return (struct timespec){.tv_sec = (time_t)sec, .tv_nsec = (long)nsec};
}

void un_dir_times_put(const struct un_dir_times *t, struct un_attr *out)
{
	uint64_t h = times_mix(t->h, t->n);

	h ^= h >> 29;
	out->mtime = times_moved(t->mtime, 0);
	out->ctime = times_moved(t->ctime, h);
}

/* Rule 6 for merged directory O, whose top instance's stat is TOP: from a
 * view's stamps when it has them all, else by a stat of each lower one. */
static int merged_times(const struct un_obj *o, const struct stat *top,
			struct un_attr *out)
{
	struct un_dir_times t = {0};
	struct stat st;
	int err;

	if (o->have_top && o->nstamps == o->ninst) {
		for (size_t i = 0; i < o->ninst; i++)
			un_dir_times_add(&t, o->stamps[i].dev, o->stamps[i].ino,
					 o->stamps[i].mtime, o->stamps[i].ctime);
		un_dir_times_put(&t, out);
		return 0;
	}
	un_dir_times_add_stat(&t, top);
	for (size_t i = 1; i < o->ninst; i++) {
		err = un_sys_fstat(o->inst[i].fd, &st);
		if (err)
			return err;
		un_dir_times_add_stat(&t, &st);
	}
	un_dir_times_put(&t, out);
	return 0;
}

int un_getattr(struct un_export *ex, struct un_obj *o, struct un_attr *out)
{
	struct stat st;
	int err;

	if (o->have_top) { /* a view's: what its walk read (rcache.c rule 10) */
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
	if (S_ISDIR(st.st_mode) && o->ninst > 1)
		return merged_times(o, &st, out); /* rule 6 */
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
