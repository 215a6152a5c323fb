/* SPDX-License-Identifier: Apache-2.0 */
/* watch.c - the server's inotify watches on layer dirs, and the directory
 * stat memo they make possible.
 *
 * A walk (lookup.c) proves that a handle still names what it named by the
 * stamps of every directory on its path (rcache.c rule 2): an fstat of each
 * layer's part of each directory, about ten for a file two levels down a
 * four-layer union, on every call.  A watch on a layer dir reports every
 * change of the dir's stat as it is made, so a stat taken since its last
 * event serves instead of a new one: one read of the inotify instance a
 * call, instead of an fstat a part.
 *
 * Rules:
 *  1. One inotify instance serves the server (readdir.c invariant 10); the
 *     kernel gives one wd per inode, and a watch is shared by its holders
 *     (listings, memo slots), the last of whom removes it.
 *  2. GEN counts the events about the dir's entries (a name's attributes,
 *     the name added, removed or renamed) and the dir's end; DGEN counts
 *     those that change the dir's own stat: a name added, removed or
 *     renamed (its mtime, ctime, size and link count) and every event about
 *     the dir itself (IN_ATTRIB: mode, owner, times, xattrs such as the
 *     opaque flag; IN_ACCESS: atime; its move, removal, or the end of the
 *     watch).  The syscall that makes a change queues its event before it
 *     returns, so a drain (un_watches_drain) counts every change whose
 *     syscall returned before it.  An overflow of the queue counts in
 *     LOST, which every holder compares too.
 *  3. A memo slot (un_dir_fstat) belongs to one instance of a directory
 *     object, and holds the stat an fstat of it gave, with the watch's DGEN
 *     and the set's LOST read before that fstat and after a drain.  It
 *     serves instead of an fstat when the caller's walk has drained once
 *     since it began, DGEN and LOST are as the slot read them, the watch is
 *     alive, and the stat is younger than UN_DIRSTAT_TTL_NS.  So what it
 *     serves is what the fstat would give: a change of the dir after the
 *     slot's fstat would have moved DGEN by the drain, and one between the
 *     drain that preceded it and the fstat shows in the stat itself.
 *  4. Only the resolve cache's directory objects have slots: they are
 *     shared and long-lived, and hold their descriptors (which pin the
 *     inodes, so a wd names the same dir as long as the slot holds it).
 *     The slots go with the object (un_dirmemo_free).  A slot is behind a
 *     try-lock: a busy one is an fstat, never a wait.
 *  5. Only layers on local filesystems (un_fs_local) get a watch; a slot
 *     whose watch cannot be had (no inotify, the watch limit) stats on
 *     every call.  The TTL bounds what no event would report that we do
 *     not know of: any stat is taken again at least that often.
 *  6. The kernel bounds the watches of a user (max_user_watches, shared by
 *     every program the server's user runs), so the watches held beyond
 *     the listings' own layer dirs (a listed directory's parts, memo
 *     slots) count in NENTRY and stay under a quarter of that bound
 *     (ENTRY_MAX); past it a slot stats on every call, as a listing's
 *     directory entry does.
 *  7. A file memo (un_file_fstatat) holds what fstatat of a name in a
 *     directory instance gave, with GEN of that instance's watch and LOST
 *     read before it (after a drain), and serves instead of it on the same
 *     terms as rule 3, with GEN for DGEN: GEN counts every event about a
 *     name of the dir (its attributes, data, atime; the name added,
 *     removed or renamed).  What reaches no watch of the dir is what
 *     readdir.c invariant 8 lists for a listing's remembered attributes (a
 *     link made to the file from another directory, a write through a
 *     shared mapping): only a file with one link is remembered, and the
 *     TTL bounds the rest, as there.  The memo holds its own reference to
 *     the watch, so it may outlive the directory object it was read in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>

#include "un_private.h"
#include "watch.h"

#define EVENTS_BUF	  (16u << 10)
#define UN_DIRSTAT_TTL_NS 1000000000u

/* A stat kept by either memo (rules 3, 7): ST holds while the watch's
 * count (DGEN for a directory's own stat, GEN for a name's) and the lost
 * count are as read before it was taken, AT (un_now_ns), no longer ago
 * than UN_DIRSTAT_TTL_NS. */
struct kept_stat {
	bool ok;
	uint64_t count, lost;
	uint64_t at;
	struct stat st;
};

/* One instance's memo (rule 3), behind BUSY. */
struct dirmemo_slot {
	atomic_bool busy;
	bool off;	    /* no watch to be had: fstat always */
	struct un_watch *w; /* a reference, once added */
	struct kept_stat k; /* its DGEN */
};

/* The memo of one name (rule 7), behind BUSY. */
struct un_filememo {
	atomic_bool busy;
	struct un_watches *ws;
	struct un_watch *w; /* a reference: the watch of the name's dir */
	struct kept_stat k; /* its GEN */
};

/* The slots of one directory object, one per instance (rule 4). */
struct un_dirmemo {
	struct un_watches *ws;
	size_t n;
	struct dirmemo_slot slot[];
};

/* A set of watches, its inotify instance not yet opened; NULL: ENOMEM. */
struct un_watches *un_watches_new(void)
{
	struct un_watches *ws = un_sys_calloc(1, sizeof(*ws));

	if (!ws)
		return NULL;
	pthread_mutex_init(&ws->lock, NULL);
	ws->fd = -EBADF; /* opened on first use: watches_open */
	return ws;
}

void un_watches_free(struct un_watches *ws)
{
	for (size_t i = 0; i < UN_WATCH_BUCKETS; i++)
		while (ws->buckets[i]) { /* only from listings a caller still holds */
			struct un_watch *w = ws->buckets[i];

			ws->buckets[i] = w->next;
			free(w);
		}
	un_sys_close(ws->fd);
	free(ws->events);
	pthread_mutex_destroy(&ws->lock);
	free(ws);
}

static struct un_watch **watch_slot(struct un_watches *ws, int wd)
{
	struct un_watch **pp = &ws->buckets[(unsigned)wd % UN_WATCH_BUCKETS];

	while (*pp && (*pp)->wd != wd)
		pp = &(*pp)->next;
	return pp;
}

/* The watch of WD, shared; with WS's lock held. */
struct un_watch *un_watch_get(struct un_watches *ws, int wd)
{
	struct un_watch **pp = watch_slot(ws, wd), *w = *pp;

	un_assert_locked(&ws->lock);
	if (w && w->dead) { /* an old wd number the kernel gave out again */
		*pp = w->next;
		w->next = NULL;
		w->wd = -1; /* its holders keep it, dead */
		w = NULL;
	}
	if (!w) {
		w = un_sys_calloc(1, sizeof(*w));
		if (!w)
			return NULL;
		w->wd = wd;
		w->next = ws->buckets[(unsigned)wd % UN_WATCH_BUCKETS];
		ws->buckets[(unsigned)wd % UN_WATCH_BUCKETS] = w;
	}
	w->refs++;
	return w;
}

void un_watch_put(struct un_watches *ws, struct un_watch *w)
{
	struct un_watch **pp;

	pthread_mutex_lock(&ws->lock);
	if (--w->refs == 0) {
		if (w->wd >= 0) {
			pp = watch_slot(ws, w->wd);
			if (*pp == w)
				*pp = w->next;
			if (!w->dead)
				un_sys_inotify_unwatch(ws->fd, w->wd);
		}
		free(w);
	}
	pthread_mutex_unlock(&ws->lock);
}

/* Counts EV into W (rule 2). */
static void count_event(struct un_watch *w, const struct inotify_event *ev)
{
	bool self = ev->len == 0;

	if (self || (ev->mask & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO)))
		w->dgen++;
	if (!self || (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)))
		w->gen++;
	if (ev->mask & IN_IGNORED)
		w->dead = true;
}

/* Counts the pending events into their watches; with WS's lock held. */
void un_watches_drain(struct un_watches *ws)
{
	const struct inotify_event *ev;
	struct un_watch *w;
	ssize_t n;

	un_assert_locked(&ws->lock);
	if (ws->fd < 0)
		return; /* no watch exists, so no attribute is remembered */
	while ((n = un_sys_inotify_read(ws->fd, ws->events, EVENTS_BUF)) > 0)
		for (ssize_t off = 0; off < n; off += (ssize_t)sizeof(*ev) + ev->len) {
			ev = (const struct inotify_event *)(ws->events + off);
			if (ev->mask & IN_Q_OVERFLOW) {
				ws->lost++;
				continue;
			}
			w = *watch_slot(ws, ev->wd);
			if (w)
				count_event(w, ev);
		}
	if (n < 0 && n != -EAGAIN)
		ws->lost++; /* events we could not read: trust nothing before */
}

bool un_fs_local(long type)
{
	switch (type) {
	case EXT4_SUPER_MAGIC: /* also ext2 and ext3 */
	case XFS_SUPER_MAGIC:
	case BTRFS_SUPER_MAGIC:
	case TMPFS_MAGIC:
	case F2FS_SUPER_MAGIC:
	case OVERLAYFS_SUPER_MAGIC: /* its own changes: its layers are not ours to change
				     */
		return true;
	default:
		return false;
	}
}

/* How many watches the holders beyond the listings' layer dirs may take
 * (rule 6): a quarter of what the kernel lets the server's user hold
 * (8,192 before Linux 5.11, more since, by memory). */
static size_t entry_watches_max(void)
{
	unsigned long n = 8192;
	FILE *f = fopen("/proc/sys/fs/inotify/max_user_watches", "re");

	if (f && fscanf(f, "%lu", &n) != 1)
		n = 8192;
	if (f)
		fclose(f);
	return n / 4;
}

/* Opens WS's inotify instance and event buffer on the first holder that
 * wants them; with WS's lock held.  Opened lazily, so that a state which never
 * remembers an attribute holds none, and opening the state never fails for
 * want of what is only an optimisation.  A failure is kept: without inotify no
 * attribute is remembered. */
int un_watches_open(struct un_watches *ws)
{
	un_assert_locked(&ws->lock);
	if (!ws->opened) {
		ws->opened = true;
		ws->entry_max = entry_watches_max();
		ws->events = un_sys_malloc(EVENTS_BUF);
		ws->fd = ws->events ? un_sys_inotify_init() : -ENOMEM;
	}
	return ws->fd < 0 ? ws->fd : 0;
}

/* ---- what both memos keep ---- */

/* Whether K holds now, COUNT being its watch's count now (the caller
 * drained); a dead watch counts nothing. */
static bool kept_holds(const struct kept_stat *k, const struct un_watches *ws,
		       const struct un_watch *w, uint64_t count, uint64_t now)
{
	return k->ok && !w->dead && count == k->count && ws->lost == k->lost &&
	       now - k->at < UN_DIRSTAT_TTL_NS;
}

/* Keeps ST, taken after COUNT and LOST were read, in K when KEEP. */
static void kept_fill(struct kept_stat *k, bool keep, uint64_t count, uint64_t lost,
		      uint64_t now, const struct stat *st)
{
	k->ok = keep;
	if (!keep)
		return;
	k->count = count;
	k->lost = lost;
	k->at = now;
	k->st = *st;
}

/* ---- the directory stat memo ---- */

void un_dirmemo_free(struct un_dirmemo *m)
{
	size_t held = 0;

	if (!m)
		return;
	for (size_t j = 0; j < m->n; j++)
		if (m->slot[j].w) {
			un_watch_put(m->ws, m->slot[j].w);
			held++;
		}
	if (held) {
		pthread_mutex_lock(&m->ws->lock);
		m->ws->nentry -= held;
		pthread_mutex_unlock(&m->ws->lock);
	}
	free(m);
}

/* O's slots, made on first use; NULL without memory. */
static struct un_dirmemo *memo_of(struct un_obj *o, struct un_watches *ws)
{
	struct un_dirmemo *m = atomic_load(&o->memo), *none = NULL;

	if (m)
		return m;
	m = un_sys_calloc(1, sizeof(*m) + o->ninst * sizeof(m->slot[0]));
	if (!m)
		return NULL;
	m->ws = ws;
	m->n = o->ninst;
	if (atomic_compare_exchange_strong(&o->memo, &none, m))
		return m;
	free(m); /* another thread's came first */
	return none;
}

/* Gives slot S a watch on FD, or turns it off for good (rule 5). */
static void slot_watch(struct un_watches *ws, struct dirmemo_slot *s, int fd)
{
	long type;
	int wd = un_sys_fstype(fd, &type);

	if (!wd && !un_fs_local(type))
		wd = -EOPNOTSUPP;
	pthread_mutex_lock(&ws->lock);
	if (!wd)
		wd = un_watches_open(ws);
	if (!wd && ws->nentry >= ws->entry_max)
		wd = -ENOSPC; /* rule 6 */
	if (!wd)
		wd = un_sys_inotify_watch(ws->fd, fd, UN_WATCH_MASK);
	if (wd >= 0)
		s->w = un_watch_get(ws, wd);
	if (s->w)
		ws->nentry++;
	pthread_mutex_unlock(&ws->lock);
	s->off = !s->w;
}

/* Fills slot S from an fstat of FD (rule 3: the counts read first). */
static int slot_fill(const struct un_watches *ws, struct dirmemo_slot *s, int fd,
		     uint64_t now, struct stat *st)
{
	uint64_t dgen = s->w->dgen, lost = ws->lost;
	int err = un_sys_fstat(fd, st);

	kept_fill(&s->k, !err, dgen, lost, now, st);
	return err;
}

/* Counts the pending events, once a walk (rule 3: *DRAINED). */
static void drain_once(struct un_watches *ws, bool *drained)
{
	if (*drained)
		return;
	pthread_mutex_lock(&ws->lock);
	un_watches_drain(ws);
	pthread_mutex_unlock(&ws->lock);
	*drained = true;
}

int un_dir_fstat(struct un_export *ex, struct un_obj *o, size_t j, bool *drained,
		 struct stat *st)
{
	struct un_watches *ws = un_state_watches(ex->st);
	struct un_dirmemo *m = ws ? memo_of(o, ws) : NULL;
	struct dirmemo_slot *s = m && j < m->n ? &m->slot[j] : NULL;
	uint64_t now;
	int err;

	if (!s || s->off || atomic_exchange(&s->busy, true))
		return un_sys_fstat(o->inst[j].fd, st);
	drain_once(ws, drained);
	now = un_now_ns();
	if (!s->w)
		slot_watch(ws, s, o->inst[j].fd);
	if (s->w && kept_holds(&s->k, ws, s->w, s->w->dgen, now)) {
		*st = s->k.st;
		err = 0;
	} else {
		err = s->w ? slot_fill(ws, s, o->inst[j].fd, now, st)
			   : un_sys_fstat(o->inst[j].fd, st);
	}
	atomic_store(&s->busy, false);
	return err;
}

/* ---- the file memo (rule 7) ---- */

void un_filememo_free(struct un_filememo *m)
{
	if (!m)
		return;
	if (m->w)
		un_watch_put(m->ws, m->w);
	free(m);
}

/* The watch on instance J of directory P, added if need be (a slot of
 * P's memo holds it), with a reference of the caller's; NULL when there is
 * none to be had now. */
static struct un_watch *dir_watch_ref(struct un_watches *ws, struct un_obj *p, size_t j)
{
	struct un_dirmemo *m = memo_of(p, ws);
	struct dirmemo_slot *s = m && j < m->n ? &m->slot[j] : NULL;
	struct un_watch *w = NULL;

	if (!s || s->off || atomic_exchange(&s->busy, true))
		return NULL;
	if (!s->w)
		slot_watch(ws, s, p->inst[j].fd);
	if (s->w) {
		w = s->w;
		pthread_mutex_lock(&ws->lock);
		w->refs++;
		pthread_mutex_unlock(&ws->lock);
	}
	atomic_store(&s->busy, false);
	return w;
}

/* M for the slot *SLOT, made on first use; NULL without memory. */
static struct un_filememo *filememo_of(_Atomic(struct un_filememo *) *slot,
				       struct un_watches *ws)
{
	struct un_filememo *m = atomic_load(slot), *none = NULL;

	if (m)
		return m;
	m = un_sys_calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->ws = ws;
	if (atomic_compare_exchange_strong(slot, &none, m))
		return m;
	free(m);
	return none;
}

/* fstatat of NAME in FD into ST, kept in M when a single-link
 * non-directory: the counts of M's watch read first (rule 7). */
static int filememo_fill(struct un_filememo *m, int fd, const char *name, uint64_t now,
			 struct stat *st)
{
	uint64_t gen = m->w->gen, lost = m->ws->lost;
	int err = un_sys_fstatat(fd, name, st, AT_SYMLINK_NOFOLLOW);

	kept_fill(&m->k, !err && !S_ISDIR(st->st_mode) && st->st_nlink == 1, gen, lost,
		  now, st);
	return err;
}

int un_file_fstatat(struct un_export *ex, struct un_obj *p, size_t j,
		    _Atomic(struct un_filememo *) *slot, const char *name, bool *drained,
		    struct stat *st)
{
	struct un_watches *ws = un_state_watches(ex->st);
	struct un_filememo *m = ws ? filememo_of(slot, ws) : NULL;
	uint64_t now;
	int err;

	if (!m || atomic_exchange(&m->busy, true))
		return un_sys_fstatat(p->inst[j].fd, name, st, AT_SYMLINK_NOFOLLOW);
	drain_once(ws, drained);
	if (!m->w)
		m->w = dir_watch_ref(ws, p, j); /* the reference is M's */
	now = un_now_ns();
	if (m->w && kept_holds(&m->k, ws, m->w, m->w->gen, now)) {
		*st = m->k.st;
		err = 0;
	} else if (m->w) {
		err = filememo_fill(m, p->inst[j].fd, name, now, st);
	} else {
		err = un_sys_fstatat(p->inst[j].fd, name, st, AT_SYMLINK_NOFOLLOW);
	}
	atomic_store(&m->busy, false);
	return err;
}
