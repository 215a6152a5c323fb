/* SPDX-License-Identifier: Apache-2.0 */
/* resolve.h - what the files that resolve names and node ids share, and no
 * other file of union/ needs: a walk (lookup.c), the resolve cache it goes
 * through (rcache.c) and the settle rule of the opaque memo (opaque.c).
 * Objects themselves are un_private.h's (object.c).
 *
 * Like un_private.h: 0 (or a count) on success, a negative errno on
 * failure, unless a comment says otherwise.
 */
#ifndef UN_RESOLVE_H
#define UN_RESOLVE_H

#include <time.h>

#include "un_private.h"

#define UN_RC_CHAIN_MAX	  16 /* hops of a path the cache may give */
#define UN_RC_WALK_STAMPS 17 /* a walk's stamps on its stack: 16 layers */

static inline long long un_ts_ns(const struct timespec *t)
{
	return (long long)t->tv_sec * 1000000000ll + t->tv_nsec;
}

/* One instance as the resolve cache knows it: a stamp (rcache.c rule 2). */
struct un_rc_stamp {
	uint64_t dev, ino;
	long long ctime; /* ns */
	long long mtime; /* ns: no part of the check, for un_getattr of a view */
	uint16_t layer;
};

/* What a lookup read, for the resolve cache. */
struct un_lookup_read {
	size_t nvis; /* DIR's instances read; for -ENOENT, 0 when the absence
		      * rests on more than their entries (rcache.c rule 9) */
	bool open;   /* no stop: a DIR with more instances would have more read */
	int8_t opq;  /* the own opaque flag of the result's last instance as
		      * read; -1: not read (rcache.c rule 11) */
	struct un_rc_stamp *stamps; /* the result's instances'; room for
				     * DIR->ninst */
};

/* A walk from the root: the object reached so far and its instances'
 * stamps, each taken before any name in it was read (rcache.c rule 2). */
struct un_walk {
	struct un_export *ex;
	uint64_t epoch;	    /* read before the table was */
	struct timespec t0; /* clock before any stamp was taken */
	struct un_obj *cur;
	bool shared;		 /* cur is (also) the cache's */
	bool drained;		 /* the watches' events were counted (watch.c rule 3) */
	bool view_end;		 /* the next hop ends a view's walk: it may give an
				  * object with no descriptor (rcache.c rules 14, 15) */
	size_t have;		 /* stamps of cur known: cst[0..have-1] */
	struct un_rc_stamp *cst; /* cur's, nlayers + 1 long */
	struct un_rc_stamp *nst; /* the next object's, as long */
	void *buf;		 /* what cst and nst point into: SBUF or malloc'd */
	struct un_rc_stamp sbuf[2 * UN_RC_WALK_STAMPS];
	/* inst[0]'s stat, of cur and of the next object, when read */
	bool ctop_ok, ntop_ok;
	struct stat ctop, ntop;
};

/* ---- opaque.c: the opaque memo and the settle rule ---- */

/* Whether CTIME (ns) is settled at T0, the clock read before it was read:
 * no later change can get the same ctime (opaque.c rule 2). */
bool un_settled(long long ctime, const struct timespec *t0);
/* un_dir_opaque_own of the directory FD whose stat ST was taken after the
 * clock read T0: from the memo where it holds, else read and remembered
 * if settled. */
int un_opq_own(int fd, const struct stat *st, bool lower, const struct timespec *t0);

/* ---- rcache.c: the resolve cache ---- */

/* The entry of node ID (the id index), or of NAME in directory PARENT (the
 * name index, rcache.c rule 7), with a reference of the caller's, or NULL. */
struct un_rc_entry *un_rc_get(struct un_export *ex, un_id id);
struct un_rc_entry *un_rn_get(struct un_export *ex, un_id parent, const char *name,
			      size_t len);
/* Drops a reference to E (NULL: nothing). */
void un_rc_put(struct un_rc_entry *e);
/* E was found stale: it leaves its slots in both indexes (rule 4). */
void un_rc_evict(struct un_export *ex, const struct un_rc_entry *e);
/* Stamps of W's cur's first N instances, taking those not known yet. */
int un_rc_stamps(struct un_walk *w, size_t n);
/* What looking E's name up in W's cur would give now, from E, if E still
 * holds (HOP: the table's record of E's node, or NULL): *NEXT (a reference
 * of the caller's; *SHARED when it is the cache's object; NULL for a
 * negative entry: absent) and its stamps in W->nst.  Any failure is a
 * miss. */
bool un_rc_hit(struct un_walk *w, const struct un_rc_entry *e,
	       const struct un_node_hop *hop, struct un_obj **next, bool *shared);
/* Remembers NEXT, found by a lookup in W's cur that read what RD says (its
 * stamps in W), if the parent's stamps are settled (rule 3); with OLD, in
 * OLD's place only, if it is still there.  True if NEXT is now the cache's
 * too. */
bool un_rc_remember(struct un_walk *w, struct un_obj *next,
		    const struct un_lookup_read *rd, const struct un_rc_entry *old);
/* Remembers that NAME is absent from W's cur (rule 9). */
void un_rc_remember_absent(struct un_walk *w, const char *name, size_t len,
			   const struct un_lookup_read *rd);
/* The path of ID from the cache's entries alone (rule 8), root first, in
 * HOPS (room for UN_RC_CHAIN_MAX); false if it cannot be had. */
bool un_rc_path(struct un_walk *w, un_id id, struct un_node_hop *hops, size_t *n);
/* The export's root object, which walks share; a reference of the caller's. */
int un_rc_root(struct un_export *ex, struct un_obj **out);

#endif
