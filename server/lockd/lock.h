/* SPDX-License-Identifier: Apache-2.0 */
/* lock.h - the byte-range lock table behind NLM: who holds which range of
 * which file, who waits for one, and what an unlock lets through.
 *
 * Protocol-neutral: the NLM code maps its arguments to these types and the
 * results to nlm4_stats.  A file is named by two opaque 64-bit keys (the
 * union's export id and the node id); an owner by the client's host name, the
 * client's svid and its opaque owner handle.  lock.c states the rules.
 */
#ifndef LOCK_H
#define LOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* memcpy of bytes a decoder gave: an empty opaque may come as NULL, which
 * memcpy must not get even with a length of 0. */
static inline void lock_copy_bytes(void *dst, const void *src, size_t n)
{
	if (n)
		memcpy(dst, src, n);
}

#define LOCK_MAX_HOST	1024 /* bytes of a host name, as NLM's LM_MAXSTRLEN */
#define LOCK_MAX_OH	1024 /* bytes of an owner handle, as NLM's MAXNETOBJ_SZ */
#define LOCK_MAX_COOKIE 1024 /* bytes of a waiter's cookie */

/* Outcomes.  NOLOCKS is over a limit or out of memory: NLM4_DENIED_NOLOCKS. */
enum lock_result {
	LOCK_OK = 0,  /* granted, released, cancelled */
	LOCK_DENIED,  /* a conflicting lock is held; CANCEL: no such waiter */
	LOCK_BLOCKED, /* queued as a waiter */
	LOCK_NOLOCKS, /* a limit reached, or out of memory */
};

enum lock_type { LOCK_SHARED, LOCK_EXCLUSIVE };

struct lock_file {
	uint64_t export_id, node_id;
};

/* A lock owner as the caller names it; the table copies what it keeps. */
struct lock_owner {
	const char *host; /* NUL-terminated, at most LOCK_MAX_HOST bytes */
	int32_t svid;
	const void *oh;
	size_t oh_len; /* at most LOCK_MAX_OH */
};

/* A range as NLM4 sends it: LEN 0 runs to the end of the file, and so does
 * one whose OFF + LEN passes 2^64. */
struct lock_range {
	uint64_t off, len;
};

/* A lock or a waiter as the table reports it (copies, the caller's to keep). */
struct lock_holder {
	char host[LOCK_MAX_HOST + 1];
	int32_t svid;
	size_t oh_len;
	uint8_t oh[LOCK_MAX_OH];
	enum lock_type type;
	struct lock_range range; /* len 0: to the end of the file */
};

/* A waiter the table has just granted: the caller sends GRANTED for it, and
 * releases the range again if the client refuses.  A list, freed with
 * lock_grants_free. */
struct lock_grant {
	struct lock_grant *next;
	struct lock_file file;
	struct lock_holder lock;
	size_t cookie_len;
	uint8_t cookie[LOCK_MAX_COOKIE];
};

/* A lock held, as lock_list reports it: first and last byte. */
struct lock_span {
	uint64_t first, last; /* last UINT64_MAX: to the end of the file */
	enum lock_type type;
};

/* Caps on locks, waiters and share reservations together, per host and in
 * all.  0: no cap. */
struct lock_limits {
	size_t per_host, total;
};

struct lock_stats {
	size_t locks, waiters, shares, files, owners, hosts;
};

/* A share reservation's bits, as NLM's fsh4_access and fsh4_mode number
 * them: what the owner opens the file for, and what it denies others. */
enum {
	LOCK_ACCESS_READ = 1,
	LOCK_ACCESS_WRITE = 2,
	LOCK_DENY_READ = 1,
	LOCK_DENY_WRITE = 2,
};

struct lock_table;

/* A new, empty table with LIM, or NULL when out of memory. */
struct lock_table *lock_table_new(const struct lock_limits *lim);
/* Frees T and everything in it. */
void lock_table_free(struct lock_table *t);
/* Takes effect for later calls; entries already over a new cap stay. */
void lock_set_limits(struct lock_table *t, const struct lock_limits *lim);

/* OK when OWNER could take TYPE on R of F now, else DENIED with the first
 * conflicting lock (lowest first byte) in *CONFLICT (may be NULL). */
enum lock_result lock_test(struct lock_table *t, const struct lock_file *f,
			   const struct lock_owner *owner, enum lock_type type,
			   const struct lock_range *r, struct lock_holder *conflict);

/* Takes TYPE on R of F for OWNER, replacing what OWNER held there: OK,
 * DENIED (nothing changed) or NOLOCKS (nothing changed).  Waiters that the
 * change lets through are granted and appended to *GRANTS. */
enum lock_result lock_acquire(struct lock_table *t, const struct lock_file *f,
			      const struct lock_owner *owner, enum lock_type type,
			      const struct lock_range *r, struct lock_grant **grants);

/* As lock_acquire, but where it would be DENIED the request is queued as a
 * waiter carrying COOKIE (copied) and the answer is BLOCKED.  The same
 * request queued again (a retransmission) is queued once. */
enum lock_result lock_block(struct lock_table *t, const struct lock_file *f,
			    const struct lock_owner *owner, enum lock_type type,
			    const struct lock_range *r, const void *cookie,
			    size_t cookie_len, struct lock_grant **grants);

/* Removes the waiter of OWNER for TYPE on R of F: OK, or DENIED when there
 * was none. */
enum lock_result lock_cancel(struct lock_table *t, const struct lock_file *f,
			     const struct lock_owner *owner, enum lock_type type,
			     const struct lock_range *r);

/* Releases OWNER's locks on R of F (none held is OK): OK or NOLOCKS, when
 * splitting a lock would pass a cap (nothing changed).  Waiters let through
 * are granted and appended to *GRANTS. */
enum lock_result lock_release(struct lock_table *t, const struct lock_file *f,
			      const struct lock_owner *owner, const struct lock_range *r,
			      struct lock_grant **grants);

/* Drops every lock, waiter and share reservation of HOST (SM_NOTIFY, FREE_ALL); other
 * hosts' waiters let through are granted and appended to *GRANTS. */
void lock_free_host(struct lock_table *t, const char *host, struct lock_grant **grants);

void lock_grants_free(struct lock_grant *g);

/* A share reservation (NLM SHARE) of OWNER on F: ACCESS and DENY are
 * LOCK_ACCESS_* and LOCK_DENY_* bits.  The owner is host and oh; its svid is
 * not part of it.  OWNER's reservation on F, if any, is replaced.  OK,
 * DENIED when another's deny bits meet ACCESS or its access meets DENY
 * (nothing changed), or NOLOCKS. */
enum lock_result lock_share(struct lock_table *t, const struct lock_file *f,
			    const struct lock_owner *owner, unsigned access,
			    unsigned deny);
/* Removes OWNER's reservation on F (none is OK). */
void lock_unshare(struct lock_table *t, const struct lock_file *f,
		  const struct lock_owner *owner);

/* OWNER's locks on F in order of first byte, at most MAX of them in OUT;
 * returns how many there are. */
size_t lock_list(struct lock_table *t, const struct lock_file *f,
		 const struct lock_owner *owner, struct lock_span *out, size_t max);

void lock_get_stats(struct lock_table *t, struct lock_stats *st);

/* Checks rules 3, 4, 7 and 8 of lock.c over the whole table (for tests):
 * 0, or -1 with what is wrong in WHY. */
int lock_check(struct lock_table *t, char *why, size_t why_len);

#endif
