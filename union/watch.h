/* SPDX-License-Identifier: Apache-2.0 */
/* watch.h - the server's inotify watches on layer dirs (watch.c), shared by
 * the listings that remember their entries' attributes (readdir.c) and the
 * directory stat memo of the resolve cache's objects (watch.c). */
#ifndef UN_WATCH_H
#define UN_WATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/inotify.h>

#define UN_WATCH_BUCKETS 1024 /* one set for the server: a few watches a union */

/* What a watch on a layer dir reports: every change of an entry's
 * attributes made through a name in that dir (IN_ACCESS for atime), the
 * dir's own changes (IN_ATTRIB, IN_ACCESS of a listing) and its end. */
#define UN_WATCH_MASK                                                                    \
	(IN_ACCESS | IN_ATTRIB | IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE |    \
	 IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)

/* One inotify watch on a layer dir, shared by its holders (REFS).  GEN
 * counts the events about its entries' attributes and names, DGEN those
 * that change the dir's own stat (watch.c rule 2).  Both only grow, and
 * are read without the lock by the holders. */
struct un_watch {
	int wd;
	unsigned refs;
	_Atomic uint64_t gen, dgen;
	atomic_bool dead; /* the kernel dropped it (IN_IGNORED): never trusted again */
	struct un_watch *next;
};

/* The watches of a server, guarded by LOCK: one inotify instance for every
 * table (readdir.c invariant 10). */
struct un_watches {
	pthread_mutex_t lock;
	int fd;		       /* inotify; < 0: unavailable, so nothing is remembered */
	bool opened;	       /* fd and events were tried (un_watches_open) */
	_Atomic uint64_t lost; /* events the kernel dropped (IN_Q_OVERFLOW) */
	/* watches held beyond the listings' layer dirs: a listed directory
	 * entry's parts (readdir.c invariant 8) and memo slots (watch.c rule
	 * 6), and at most that many */
	size_t nentry, entry_max;
	struct un_watch *buckets[UN_WATCH_BUCKETS];
	char *events;
};

/* A set of watches, its inotify instance not yet opened; NULL: ENOMEM. */
struct un_watches *un_watches_new(void);
/* Frees WS and every watch in it: after every holder is gone. */
void un_watches_free(struct un_watches *ws);
/* Opens WS's inotify instance on first use; with WS's lock held. */
int un_watches_open(struct un_watches *ws);
/* The watch of WD (just added), shared; with WS's lock held; NULL: ENOMEM. */
struct un_watch *un_watch_get(struct un_watches *ws, int wd);
/* Drops a holder's reference to W (takes WS's lock). */
void un_watch_put(struct un_watches *ws, struct un_watch *w);
/* Counts the pending events into their watches; with WS's lock held. */
void un_watches_drain(struct un_watches *ws);
/* Whether every change of a filesystem of TYPE passes the local kernel, so
 * that inotify sees it (a network or FUSE filesystem changes elsewhere). */
bool un_fs_local(long type);

#endif
