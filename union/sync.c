/* sync.c - changes made durable before their replies, in batches shared by
 * the changes that run at the same time.
 *
 * Design notes
 * ------------
 * A sync export answers a change of names or attributes only once it is on
 * stable storage (dir.c's design notes, step 7): an fsync of each changed
 * upper inode, then a flush of the node table (state.c).  An fsync makes
 * durable what was written to its inode before the fsync began, a flush
 * every commit before it began; one already running when a change was made
 * may have missed it.
 *
 * Changes share that work in batches (group commit), numbered and run one at
 * a time.  A change (un_sync_now) names the inodes it needs synced in the
 * next batch's set (each inode once: one fsync of a directory serves every
 * change made in it) and takes that batch's number as its ticket; then it
 * waits until the batch has ended.  The batch is run by the first of its
 * changes to find no batch running (batch_run, the leader): it takes the
 * set, fsyncs each inode of it, flushes the table (un_state_sync) and wakes
 * every change of the batch.  Changes that arrive meanwhile gather in the
 * set of the batch after it.  The leader flushes the table itself rather
 * than beside its fsyncs on the syncer thread: a batch takes longer, but a
 * wake-up of another thread per batch costs more CPU than it saves time
 * here, and the longer a batch runs the more changes the next one serves.
 * A client creating and removing files in one directory with 32 calls
 * outstanding then costs one fsync of the directory and one flush of the
 * table per batch (as many changes as there are worker threads, at best),
 * not per change; a lone change still costs exactly one of each.
 *
 * Waiting costs CPU too (a context switch is dear on a VM): a change sleeps
 * once, on a futex over the count of ended batches, and wakes up only to
 * read it; the mutex is taken to name inodes and to start a batch, never to
 * learn that one ended, so the end of a batch wakes no herd on the mutex.
 *
 * An fsync runs on a descriptor opened for it from the O_PATH instance of
 * the change that named the inode: that change waits for the batch, so its
 * object (and the descriptor) outlives the batch's use of it.  A set full
 * of inodes (SET_MAX) takes no more: a change that cannot name its inode
 * there fsyncs it itself, unshared, and joins the batch for the table.
 *
 * Invariants
 *  1. A change returns success only once the batch of its ticket has ended
 *     without error; that batch began after the change named its inodes,
 *     which is after the change was made (and after its commit to the
 *     table), and its fsyncs and its flush began after that (batch_run).
 *  2. The set of the next batch holds only inodes of changes whose ticket is
 *     that batch: the leader takes the whole set when it takes the batch's
 *     number (batch_run), under the lock.
 *  3. A failed fsync or flush fails every change of its batch (and of any
 *     earlier batch still waiting: failed >= ticket), so no change sees
 *     success from a batch that did not make it durable.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "un_private.h"

#define SET_MAX 64 /* inodes one batch fsyncs */

/* An inode a batch fsyncs: its identity, and an O_PATH descriptor of it
 * borrowed from a change waiting for the batch. */
struct inode_ref {
	uint64_t dev, ino;
	int fd;
};

struct un_syncq {
	pthread_mutex_t lock;	       /* guards started, running and the set */
	uint64_t started;	       /* batches begun so far */
	bool running;		       /* a batch is running */
	size_t nset;		       /* inodes in set[] */
	struct inode_ref set[SET_MAX]; /* what the next batch fsyncs */
	/* Read without the lock: a change woken by the end of its batch
	 * leaves without taking it (no herd on the mutex). */
	_Atomic uint32_t ended;	 /* batches ended (mod 2^32): a futex word */
	_Atomic uint64_t failed; /* number of the last batch that failed, or 0 */
	_Atomic int err;	 /* its error */
	atomic_uint users;	 /* changes between naming their inodes and leaving */
};

int un_syncq_new(struct un_syncq **out)
{
	struct un_syncq *q = un_sys_calloc(1, sizeof(*q));

	if (!q)
		return -ENOMEM;
	pthread_mutexattr_t ma;

	/* Held for a few loads and stores: spin a little before sleeping. */
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&q->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	*out = q;
	return 0;
}

void un_syncq_free(struct un_syncq *q)
{
	if (!q)
		return;
	pthread_mutex_destroy(&q->lock);
	free(q);
}

unsigned un_syncq_test_users(struct un_state *st)
{
	return atomic_load(&st->syncq->users);
}

/* True once batch TICKET has ended (the count wraps at 2^32; fewer than
 * 2^31 batches are ever in flight). */
static bool ended_since(uint32_t ended, uint64_t ticket)
{
	return (int32_t)(ended - (uint32_t)ticket) >= 0;
}

/* Sleeps while *WORD is SEEN (or until a signal or a spurious wake-up). */
static void word_wait(_Atomic uint32_t *word, uint32_t seen)
{
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void word_wake_all(_Atomic uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Opens FD (O_PATH) for reading and fsyncs it. */
static int fsync_fd(int fd)
{
	int rfd = un_sys_reopen(fd, O_RDONLY | O_NOCTTY), err;

	if (rfd < 0)
		return rfd;
	err = un_sys_fsync(rfd);
	un_sys_close(rfd);
	return err;
}

/* Fills R with the upper instance of O when it has one to fsync: 1, or 0
 * when it has none (only regular files and directories can be opened for
 * it; the sync of its parent carries any other object's inode). */
static int ref_of(struct un_export *ex, struct un_obj *o, struct inode_ref *r)
{
	struct stat st;
	int err;

	if (!o || !un_obj_upper(ex, o) || !(S_ISREG(o->type) || S_ISDIR(o->type)))
		return 0;
	err = un_sys_fstat(o->inst[0].fd, &st);
	if (err)
		return err;
	*r = (struct inode_ref){.dev = st.st_dev, .ino = st.st_ino, .fd = o->inst[0].fd};
	return 1;
}

/* Names R in the next batch's set: true, or false when the set is full.
 * Lock held. */
static bool set_add(struct un_syncq *q, const struct inode_ref *r)
{
	for (size_t i = 0; i < q->nset; i++)
		if (q->set[i].dev == r->dev && q->set[i].ino == r->ino)
			return true;
	if (q->nset == SET_MAX)
		return false;
	q->set[q->nset++] = *r;
	return true;
}

/* Makes the inodes of SET and the node table durable. */
static int batch_io(struct un_state *st, const struct inode_ref *set, size_t n)
{
	struct un_creds saved;
	int err = 0;

	/* A sync is no access of the caller's, and needs a descriptor the
	 * caller may not be allowed to open (a file of mode 0200). */
	un_sys_creds_override(&saved);
	for (size_t i = 0; i < n && !err; i++)
		err = fsync_fd(set[i].fd);
	un_sys_creds_revert(&saved);
	return err ? err : un_state_sync(st);
}

/* Runs the next batch (lock held on entry and return, not during its I/O);
 * the caller wakes the changes waiting for it once it has dropped the lock. */
static void batch_run(struct un_state *st, struct un_syncq *q)
{
	struct inode_ref set[SET_MAX];
	uint64_t n = ++q->started;
	size_t nset = q->nset;
	int err;

	memcpy(set, q->set, nset * sizeof(set[0]));
	q->nset = 0;
	q->running = true;
	pthread_mutex_unlock(&q->lock);
	err = batch_io(st, set, nset);
	pthread_mutex_lock(&q->lock);
	q->running = false;
	if (err) {
		atomic_store(&q->err, err);
		atomic_store(&q->failed, n);
	}
	atomic_store_explicit(&q->ended, (uint32_t)n, memory_order_release);
}

/* Names what R[0..N) holds in the next batch; those that do not fit are
 * fsynced at once (unlocked).  Returns the batch's number in *TICKET. */
static int batch_join(struct un_syncq *q, struct inode_ref *r, size_t n, uint64_t *ticket)
{
	struct un_creds saved;
	size_t own = 0;
	int err = 0;

	pthread_mutex_lock(&q->lock);
	for (size_t i = 0; i < n; i++)
		if (!set_add(q, &r[i]))
			r[own++] = r[i];
	*ticket = q->started + 1;
	atomic_fetch_add(&q->users, 1);
	pthread_mutex_unlock(&q->lock);
	un_sys_creds_override(&saved);
	for (size_t i = 0; i < own && !err; i++)
		err = fsync_fd(r[i].fd);
	un_sys_creds_revert(&saved);
	return err;
}

/* Waits for batch TICKET to end, running the next batch when none runs. */
static int batch_wait(struct un_state *st, struct un_syncq *q, uint64_t ticket)
{
	uint32_t seen;
	int err = 0;

	for (;;) {
		seen = atomic_load_explicit(&q->ended, memory_order_acquire);
		if (ended_since(seen, ticket))
			break;
		if (!atomic_load(&q->running)) {
			pthread_mutex_lock(&q->lock);
			/* ended cannot move while the lock is held and no
			 * batch runs */
			if (!q->running && !ended_since(atomic_load(&q->ended), ticket)) {
				batch_run(st, q);
				pthread_mutex_unlock(&q->lock);
				word_wake_all(&q->ended);
				continue;
			}
			pthread_mutex_unlock(&q->lock);
		}
		word_wait(&q->ended, seen);
	}
	if (atomic_load(&q->failed) >= ticket)
		err = atomic_load(&q->err);
	atomic_fetch_sub(&q->users, 1);
	return err;
}

/* Whether this thread's changes wait for stable storage (un_thread_sync). */
static _Thread_local bool thread_async;

void un_thread_sync(bool sync)
{
	thread_async = !sync;
}

int un_sync_change(struct un_export *ex, struct un_obj *a, struct un_obj *b)
{
	return thread_async ? 0 : un_sync_now(ex, a, b);
}

int un_sync_now(struct un_export *ex, struct un_obj *a, struct un_obj *b)
{
	struct un_syncq *q = ex->st->syncq;
	struct inode_ref r[2];
	size_t n = 0;
	uint64_t ticket;
	int err, own;

	own = ref_of(ex, a, &r[n]);
	if (own < 0)
		return own;
	n += (size_t)own;
	own = b != a ? ref_of(ex, b, &r[n]) : 0;
	if (own < 0)
		return own;
	n += (size_t)own;
	err = batch_join(q, r, n, &ticket);
	/* Even after a failed fsync of its own: the batch may hold the
	 * change's other inode, and it is counted among the users. */
	own = batch_wait(ex->st, q, ticket);
	return err ? err : own;
}
