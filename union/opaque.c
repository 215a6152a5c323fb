/* SPDX-License-Identifier: Apache-2.0 */
/* opaque.c - the opaque memo: whether a directory instance is opaque by
 * what it carries itself (its overlay.opaque xattrs, in a lower layer the
 * ".wh..wh..opq" inside it), remembered per (dev, ino, lower) for the ctime
 * it was read at; and the settle rule that the memo and the resolve cache
 * (rcache.c) trust a ctime by.
 *
 * Reading the flag costs two getxattr calls (trusted. and user.) and, in a
 * lower layer, a stat, for every merged directory on every walk: every
 * handle is resolved by walking its path again (lookup.c).
 *
 * Invariants:
 *  1. A flag is recalled only for the same (dev, ino, lower) and the same
 *     ctime (opq_recall): setting or removing an xattr changes a
 *     directory's ctime, and so does any change of an entry in it.  The OCI
 *     ".wh.NAME" beside it is its parent's entry, which the memo does not
 *     cover: lookup_opaque (lookup.c) checks it on every walk.
 *  2. Only a settled flag is remembered (opq_remember): the ctime is older,
 *     by a tick of the clock that made it (settle_of), than a clock read
 *     taken before the fstat, so no later change can get the same ctime
 *     (un_settled).
 *  3. The stat that keys a recall is taken on every walk, after the
 *     directory was opened (lookup_layer's fstat, passed to un_opq_own), so
 *     a change made before it shows as another ctime.
 *  4. A slot is a plain struct behind a try-lock (opq_recall,
 *     opq_remember): a busy slot is a miss, so no thread ever waits on the
 *     memo, and a replaced slot loses only speed.
 *
 * Not covered, here or in the resolve cache: a layer on a filesystem that
 * does not keep ctime (a network filesystem sees another client's change
 * only when its attributes are refreshed); a clock set back so that a later
 * change gets exactly the old ctime; two changes inside one tick, the
 * second after our clock read.
 */
#define _GNU_SOURCE
#include <stdatomic.h>

#include "resolve.h"

#define OPQ_SLOTS 1024 /* opaque memo slots: a power of 2 */

/* One remembered opaque flag (rule 1). */
struct opq_slot {
	_Atomic bool busy; /* the try-lock (rule 4) */
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

/* How long a ctime must be past before no later change can get it too
 * (rule 2): a tick of the clock it was taken from.  A filesystem
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
bool un_settled(long long ctime, const struct timespec *t0)
{
	return ctime < un_ts_ns(t0) - settle_of(ctime);
}

/* Remembers OPAQUE for directory ST if it is settled before T0 (rule 2). */
static void opq_remember(const struct stat *st, bool lower, bool opaque,
			 const struct timespec *t0)
{
	struct opq_slot *s = opq_slot_of(st);

	if (!un_settled(un_ts_ns(&st->st_ctim), t0))
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

/* un_dir_opaque_own of the directory FD whose stat ST was taken after the
 * clock read T0: from the memo where it holds, else read and remembered
 * if settled (rule 2). */
int un_opq_own(int fd, const struct stat *st, bool lower, const struct timespec *t0)
{
	int r = opq_recall(st, lower);

	if (r < 0) {
		r = un_dir_opaque_own(fd, lower);
		if (r >= 0)
			opq_remember(st, lower, r == 1, t0);
	}
	return r;
}
