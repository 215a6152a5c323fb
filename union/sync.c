/* SPDX-License-Identifier: Apache-2.0 */
/* sync.c - changes made durable before their replies, with the syncs shared
 * by the changes that run at the same time (group commit).
 *
 * Design notes
 * ------------
 * A sync export answers a change of names or attributes only once it is on
 * stable storage (dir.c's design notes, step 7): an fsync of each changed
 * upper inode, then a flush of the node table (flush_job).  An fsync makes
 * durable what was written to its inode before the fsync began, a flush
 * every commit before it began; one already running when a change was made
 * may have missed it.  So a change needs a sync that *began after* it, and
 * every sync serves all the changes made before it began.
 *
 * A run series (struct un_seq) shares one such job: runs are numbered and
 * run one at a time; a change takes as its ticket the number of the first
 * run to begin after now (un_seq_ticket) and waits until a run of that
 * number or a later one has ended, running it itself when none is running
 * (un_seq_wait).  Under load, N concurrent changes cost two runs instead of
 * N, and a lone change still costs exactly one.  The node table's flushes
 * are one series (st->flushes), the fsyncs of each upper inode another: changes
 * of one directory (a client creating files in it with 32 calls
 * outstanding) share its fsyncs, while the fsyncs of different inodes (the
 * COMMITs of different files) run side by side on their own threads.
 *
 * Waiting costs CPU (a context switch is dear on a VM): a waiter sleeps on
 * a futex over the count of ended runs and wakes up only to read it; the
 * mutex is taken to start a run, never to learn that one ended, so the end
 * of a run wakes no herd onto the mutex.  When run N ends, its waiters hold
 * ticket N or N + 1, told apart by the futex bit of the ticket's parity:
 * the end wakes all of N and one of N + 1, which begins that run, while
 * the others of N + 1 sleep on until it ends (seq_wake).
 *
 * A change takes its ticket of the table's flush first, then syncs its
 * inodes (fsync_shared), then waits for the flush: a flush begun meanwhile
 * by another change serves it too.  The run that fsyncs a change's last
 * inode also waits for a flush of the table begun after the run began
 * (fsync_run): the changes waiting for that run then find their flush done
 * when they wake, and sleep once instead of twice (once for the fsync, once
 * for the flush).  The run first kicks the syncer thread into that flush
 * (unless one is under way), so that it runs beside the fsync: a change's
 * wait is the longer of the two, not their sum, which is what a COMMIT of a
 * file no other change shares waits for; it costs a wake-up per run, not
 * per change.  When the syncer is busy with another table's flush, the
 * run finds no flush of its table begun and runs one itself (un_seq_wait):
 * the sum again, never a wait for the other table.
 *
 * A create's or a remove's node-table write is a job of node.c's writer,
 * queued under the directory's lock: the change goes to its fsyncs without
 * waiting for that job (un_sync_queued), and the run that fsyncs its last
 * inode first commits the queued jobs (un_node_jobs_drain) and then takes
 * its flush ticket, so the job's commit is covered by the flush the run
 * waits for.  Its waiters wake once, to find job, fsync and flush done,
 * where they slept for the commit and then for the fsync; a job a batch
 * under way missed is committed by its owner after the run (it waits for
 * a flush begun after that commit: the job notes the ticket).  Only such a
 * change's run drains the queue: a COMMIT's fsync, of a file no create
 * shares, would add a commit to its own wait and serve nobody.  Only where
 * a directory's fsync orders (un_sync_probe_fs): on ext4 without its
 * journal a create fsyncs its new file first, unshared, and there the
 * writer committing beside those fsyncs and the directory's runs kept
 * more in flight than runs that commit and then fsync (CREATE+REMOVE
 * 1,309 -> 979 pairs/s, bench/README.md); the change waits for its job
 * first there, as before.  Inodes meet
 * in a table of SLOTS series the state owns (one table for every export:
 * dev and ino name an inode on the machine); a slot serves one inode at a
 * time, bound to it while changes use it, and a change whose slot is bound
 * to another inode runs its own fsync, unshared.  An fsync runs on a
 * descriptor opened for the run, from the O_PATH instance of the change
 * that runs it.
 *
 * An inode no fsync can reach (a symlink, a device, a white-out: dir.c,
 * step 7) is made durable by a syncfs of the upper filesystem, run from the
 * work dir, except where the export's probe (un_sync_probe_fs, at open)
 * found ext4 running its journal or xfs: there the directory's fsync
 * commits the journal up to the change, and the inode with it; those runs are the series
 * of a slot bound to the filesystem's dev with inode number 0, which no inode has, so
 * concurrent such changes share them too.  Copy-ups fsync what they make through the same
 * slots (un_sync_inode), without the table.
 *
 * Invariants
 *  1. A change returns success only once a run numbered at least its ticket
 *     has ended without error, and that run began after the ticket was
 *     taken, which is after the change (un_seq_ticket, un_seq_wait).
 *  2. A failed run fails every waiter whose ticket it is or precedes
 *     (failed >= ticket): none sees success from a run that failed after
 *     its change was made.  (A waiter that slept may so see the failure of
 *     a run later than the one that served it: a false alarm, never a false
 *     success.  The one that ran its run takes that run's own result.)
 *  3. A slot's numbers are compared only between users of one binding: a
 *     slot takes another inode only when no change uses it (users == 0).
 *  4. A flush (flush_job: mdb_env_sync, one fdatasync of data.mdb) makes
 *     durable every commit before it began (state.c rule 2), and callers
 *     share flushes: they are a run series, and un_state_sync waits for the
 *     first flush that begins after it was called.  A change of a sync
 *     export takes its ticket before it fsyncs the upper layer
 *     (un_state_sync_ticket, then un_state_sync_wait), so a flush another
 *     change begins meanwhile serves it.
 *  5. A table is whole on disk within a period (UN_SYNC_PERIOD_S) of its
 *     last commit, whoever waits for it: one syncer thread a server
 *     (syncer_main; state.c starts it with the main state and stops it
 *     after every table left, un_syncer_start, un_syncer_stop) flushes
 *     each table of its list (un_syncer_add once a table is open,
 *     un_syncer_remove before it closes) a period after it last chose it,
 *     sooner when kicked (un_state_sync_kick).  A table whose commits
 *     (node.c's writer counts them) all began before a flush that
 *     succeeded is whole already, and its period passes without a flush:
 *     an idle client union costs no fdatasync a second.  Of the tables
 *     kicked or due, the one it chose longest ago goes first, so that a
 *     busy table's kicks hold back no other's period.  The flushes of
 *     different tables run one after another: with many tables committing
 *     at once on slow storage a table's period stretches to a flush of
 *     each; a change that waits for its flush (a sync export, a COMMIT)
 *     runs it itself when none is under way (rule 4), so only what an
 *     async change waits for grows.  A thread a table would cost a
 *     gateway a thread a client union (docs/gateways.md, part 2).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "un_private.h"

#define SLOTS 64 /* 2^6: slot_of takes the top 6 bits of a hash */

/* ---- run series ---- */

void un_seq_init(struct un_seq *s)
{
	pthread_mutexattr_t ma;

	/* Held for a few loads and stores: spin a little before sleeping. */
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&s->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	s->started = 0;
	atomic_init(&s->running, false);
	atomic_init(&s->ended, 0);
	atomic_init(&s->failed, 0);
	atomic_init(&s->err, 0);
	atomic_init(&s->sleepers, 0);
}

void un_seq_destroy(struct un_seq *s)
{
	pthread_mutex_destroy(&s->lock);
}

uint64_t un_seq_ticket(struct un_seq *s)
{
	return atomic_load(&s->started) + 1;
}

/* True once run TICKET has ended (the count wraps at 2^32; fewer than 2^31
 * runs are ever waited for at once). */
static bool ended_since(uint32_t ended, uint64_t ticket)
{
	return (int32_t)(ended - (uint32_t)ticket) >= 0;
}

/* Runs the next run of S (lock held on entry and return, not during RUN). */
static int seq_run(struct un_seq *s, int (*run)(void *), void *arg)
{
	uint64_t n = atomic_load(&s->started) + 1;
	int err;

	un_assert_locked(&s->lock);
	atomic_store(&s->started, n);
	atomic_store(&s->running, true);
	pthread_mutex_unlock(&s->lock);
	err = run(arg);
	pthread_mutex_lock(&s->lock);
	if (err) {
		atomic_store(&s->err, err);
		atomic_store(&s->failed, n);
	}
	atomic_store(&s->running, false);
	atomic_store(&s->ended, (uint32_t)n); /* seq_cst: seq_sleep */
	return err;
}

/* The futex bit of the sleepers of TICKET: when run N ends, every sleeper
 * holds ticket N or N + 1 (a ticket is the number of the run after the
 * last one begun, and runs go one at a time), so the parity tells them
 * apart. */
static uint32_t ticket_bit(uint64_t ticket)
{
	return 1u << (ticket & 1);
}

/* Sleeps while S's count of ended runs is SEEN, as the holder of TICKET.
 * The count of sleepers goes up before the futex reads the word, and
 * seq_wake reads it after the count moved (both sequentially consistent):
 * either the waker sees the sleeper, or the sleeper's futex sees the new
 * count and returns at once. */
static void seq_sleep(struct un_seq *s, uint32_t seen, uint64_t ticket)
{
	atomic_fetch_add(&s->sleepers, 1);
	syscall(SYS_futex, &s->ended, FUTEX_WAIT_BITSET_PRIVATE, seen, NULL, NULL,
		ticket_bit(ticket));
	atomic_fetch_sub(&s->sleepers, 1);
}

/* Wakes, once run N of S ended, every sleeper it served (ticket N) and one
 * of those of run N + 1 to begin it: the others of N + 1 sleep on until it
 * ends, instead of waking to find it begun (a wake-up is dear on a busy
 * machine).  No system call when no one sleeps. */
static void seq_wake(struct un_seq *s, uint64_t n)
{
	if (!atomic_load(&s->sleepers))
		return;
	syscall(SYS_futex, &s->ended, FUTEX_WAKE_BITSET_PRIVATE, INT_MAX, NULL, NULL,
		ticket_bit(n));
	syscall(SYS_futex, &s->ended, FUTEX_WAKE_BITSET_PRIVATE, 1, NULL, NULL,
		ticket_bit(n + 1));
}

int un_seq_wait(struct un_seq *s, uint64_t ticket, int (*run)(void *), void *arg)
{
	uint32_t seen;
	bool ran;
	int err = 0;

	for (;;) {
		seen = atomic_load_explicit(&s->ended, memory_order_acquire);
		if (ended_since(seen, ticket))
			break;
		ran = false;
		if (!atomic_load(&s->running)) {
			pthread_mutex_lock(&s->lock);
			/* ended cannot move while the lock is held and no
			 * run is under way */
			ran = !atomic_load(&s->running) &&
			      !ended_since(atomic_load(&s->ended), ticket);
			if (ran)
				err = seq_run(s, run, arg);
			pthread_mutex_unlock(&s->lock);
		}
		if (ran) {
			/* The run was number TICKET (none had ended since the
			 * ticket was taken): its own result is exact. */
			seq_wake(s, ticket);
			return err;
		}
		seq_sleep(s, seen, ticket);
	}
	return atomic_load(&s->failed) >= ticket ? atomic_load(&s->err) : 0;
}

/* ---- the node table's flushes ---- */

/* The job of the table's flushes (un_seq): one mdb_env_sync.  The commits
 * counted before it began are durable once it succeeds (rule 5). */
static int flush_job(void *arg)
{
	struct un_state *st = arg;
	uint64_t t0 = un_now_ns(), commits = atomic_load(&st->commits);
	int err = un_sys_test_no_sync_on() ? 0 : un_mdb_err(mdb_env_sync(st->env, 1));

	un_count_timed(&st->sh->counters.flushes, &st->sh->counters.flush_ns, t0);
	if (err)
		un_state_failed(st, err, "flush");
	else
		atomic_store(&st->flushed, commits); /* one run at a time */
	return err;
}

/* Returns once a flush that began after the call has ended (rule 4). */
static int flush_after_now(struct un_state *st)
{
	return un_seq_wait(&st->flushes, un_seq_ticket(&st->flushes), flush_job, st);
}

#define PERIOD_NS ((uint64_t)UN_SYNC_PERIOD_S * 1000000000u)

#define SLACK_NS (PERIOD_NS / 8)

/* Whether T committed since its last successful flush began. */
static bool table_dirty(struct un_state *t)
{
	return atomic_load(&t->commits) != atomic_load(&t->flushed);
}

/* The table the syncer flushes next: of those kicked or due by NOW, the one
 * it chose longest ago (rule 5); NULL when none is, with *WAKE lowered to
 * the next due time.  A due table that is whole on disk starts its next
 * period here, without a flush; a table due within SLACK_NS counts as due,
 * so that the periods of idle tables end together and the syncer wakes a
 * few times a period, not once a table.  With the syncer's lock held. */
static struct un_state *syncer_pick(struct un_shared *sh, uint64_t now, uint64_t *wake)
{
	struct un_state *pick = NULL;

	un_assert_locked(&sh->sync_lock);
	for (struct un_state *t = sh->sync_tables; t; t = t->sync_next) {
		if (!t->kicked && t->sync_due_ns <= now + SLACK_NS && !table_dirty(t))
			t->sync_due_ns = now + PERIOD_NS;
		if (t->kicked || t->sync_due_ns <= now + SLACK_NS) {
			if (!pick || t->sync_began < pick->sync_began)
				pick = t;
		} else if (t->sync_due_ns < *wake)
			*wake = t->sync_due_ns;
	}
	return pick;
}

/* Sleeps on the syncer's condition until WAKE (un_now_ns), a kick or a
 * stop; with its lock held. */
static void syncer_sleep(struct un_shared *sh, uint64_t wake)
{
	struct timespec deadline = {.tv_sec = (time_t)(wake / 1000000000u),
				    .tv_nsec = (long)(wake % 1000000000u)};

	pthread_cond_timedwait(&sh->sync_cond, &sh->sync_lock, &deadline);
}

static void *syncer_main(void *arg)
{
	struct un_shared *sh = arg;
	struct un_state *st;
	uint64_t now, wake;
	bool kicked;

	pthread_mutex_lock(&sh->sync_lock);
	while (!sh->sync_stopping) {
		now = un_now_ns();
		wake = now + PERIOD_NS;
		st = syncer_pick(sh, now, &wake);
		if (!st) {
			syncer_sleep(sh, wake);
			continue;
		}
		kicked = st->kicked;
		st->kicked = false;
		st->sync_began = now;
		st->sync_due_ns = now + PERIOD_NS;
		sh->sync_busy = st; /* un_syncer_remove waits for it */
		pthread_mutex_unlock(&sh->sync_lock);
		/* Lookups' nodes queued ahead (node.c invariant 16) commit
		 * first.  A failure is retried next period: flushed stays
		 * behind. */
		un_node_jobs_drain(st);
		if (kicked || table_dirty(st))
			flush_after_now(st);
		pthread_mutex_lock(&sh->sync_lock);
		sh->sync_busy = NULL;
		pthread_cond_broadcast(&sh->sync_done);
	}
	pthread_mutex_unlock(&sh->sync_lock);
	return NULL;
}

int un_syncer_start(struct un_shared *sh)
{
	pthread_condattr_t ca;
	int rc;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* as un_now_ns */
	pthread_cond_init(&sh->sync_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&sh->sync_done, NULL);
	pthread_mutex_init(&sh->sync_lock, NULL);
	rc = pthread_create(&sh->syncer, NULL, syncer_main, sh);
	if (rc) {
		pthread_cond_destroy(&sh->sync_cond);
		pthread_cond_destroy(&sh->sync_done);
		pthread_mutex_destroy(&sh->sync_lock);
		return -rc;
	}
	sh->syncer_on = true;
	return 0;
}

void un_syncer_stop(struct un_shared *sh)
{
	if (!sh->syncer_on)
		return;
	pthread_mutex_lock(&sh->sync_lock);
	assert(!sh->sync_tables); /* every table left first */
	sh->sync_stopping = true;
	pthread_cond_signal(&sh->sync_cond);
	pthread_mutex_unlock(&sh->sync_lock);
	pthread_join(sh->syncer, NULL);
	pthread_cond_destroy(&sh->sync_cond);
	pthread_cond_destroy(&sh->sync_done);
	pthread_mutex_destroy(&sh->sync_lock);
	sh->syncer_on = false;
}

void un_syncer_add(struct un_state *st)
{
	struct un_shared *sh = st->sh;

	un_seq_init(&st->flushes);
	/* the commit that made the table's databases is not counted: its
	 * first flush comes a period after it opened, as any commit's */
	atomic_store(&st->commits, 1);
	atomic_store(&st->flushed, 0);
	pthread_mutex_lock(&sh->sync_lock);
	st->sync_due_ns = un_now_ns() + PERIOD_NS;
	st->sync_began = 0;
	st->sync_prev = NULL;
	st->sync_next = sh->sync_tables;
	if (st->sync_next)
		st->sync_next->sync_prev = st;
	sh->sync_tables = st;
	pthread_mutex_unlock(&sh->sync_lock);
}

void un_syncer_remove(struct un_state *st)
{
	struct un_shared *sh = st->sh;

	pthread_mutex_lock(&sh->sync_lock);
	if (st->sync_prev)
		st->sync_prev->sync_next = st->sync_next;
	else
		sh->sync_tables = st->sync_next;
	if (st->sync_next)
		st->sync_next->sync_prev = st->sync_prev;
	st->sync_next = st->sync_prev = NULL;
	while (sh->sync_busy == st)
		pthread_cond_wait(&sh->sync_done, &sh->sync_lock);
	pthread_mutex_unlock(&sh->sync_lock);
	un_seq_destroy(&st->flushes);
}

/* A table that committed nothing since its last successful flush began is
 * whole on disk already (flush_job, rule 5): a stable WRITE to a file whose
 * node is long committed, the most common caller, needs no fdatasync of
 * the table (the boot replay: one a FILE_SYNC WRITE before). */
int un_state_sync(struct un_state *st)
{
	uint64_t ticket;
	int err = un_state_sync_ticket(st, &ticket);

	if (err || !table_dirty(st))
		return err;
	return un_state_sync_wait(st, ticket);
}

int un_state_sync_ticket(struct un_state *st, uint64_t *ticket)
{
	int err = un_sys_fault(UN_SYS_SYNC);

	if (err)
		return -err;
	*ticket = un_seq_ticket(&st->flushes);
	return 0;
}

void un_state_sync_kick(struct un_state *st)
{
	struct un_shared *sh = st->sh;

	if (atomic_load(&st->flushes.running))
		return;
	pthread_mutex_lock(&sh->sync_lock);
	st->kicked = true;
	pthread_cond_signal(&sh->sync_cond);
	pthread_mutex_unlock(&sh->sync_lock);
}

int un_state_sync_wait(struct un_state *st, uint64_t ticket)
{
	return un_seq_wait(&st->flushes, ticket, flush_job, st);
}

/* ---- shared fsyncs of upper inodes ---- */

struct slot {
	struct un_seq seq;
	uint64_t dev, ino; /* the inode bound, while users > 0 (seq.lock) */
	atomic_uint users; /* changes between taking a ticket and leaving */
};

struct un_fsyncs {
	struct slot slot[SLOTS];
	atomic_uint failed; /* runs whose fsync failed, ever (un_sync_failures) */
};

int un_fsyncs_new(struct un_fsyncs **out)
{
	struct un_fsyncs *t = un_sys_calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < SLOTS; i++)
		un_seq_init(&t->slot[i].seq);
	*out = t;
	return 0;
}

void un_fsyncs_free(struct un_fsyncs *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < SLOTS; i++)
		un_seq_destroy(&t->slot[i].seq);
	free(t);
}

unsigned un_fsyncs_test_users(struct un_state *st)
{
	unsigned n = 0;

	for (size_t i = 0; i < SLOTS; i++)
		n += atomic_load(&st->fsyncs->slot[i].users);
	return n;
}

unsigned un_fsyncs_test_sleepers(struct un_state *st)
{
	unsigned n = 0;

	for (size_t i = 0; i < SLOTS; i++)
		n += atomic_load(&st->fsyncs->slot[i].seq.sleepers);
	return n;
}

/* The job of a slot's runs: an fsync of FD's inode (FD: O_PATH), or when FS
 * a syncfs of its filesystem, then, when FLUSH, a flush of ST's table that
 * began after the run did; first, when DRAIN (the runner's change has a
 * table write queued: un_sync_queued), the writer's queue committed. */
struct fsync_job {
	int fd;
	struct un_state *st;
	bool flush, fs, drain;
};

/* Opens FD for reading and fsyncs it.  With the engine's identity: a sync
 * is no access of the caller's, and needs a descriptor the caller may not be
 * allowed to open (a file of mode 0200).  Only the change that runs an fsync
 * switches; those that wait for it do not. */
static int fsync_fd(int fd, bool fs)
{
	struct un_creds saved;
	int rfd, err;

	un_sys_creds_override(&saved);
	rfd = un_sys_reopen(fd, O_RDONLY | O_NOCTTY);
	err = rfd < 0 ? rfd : fs ? un_sys_syncfs(rfd) : un_sys_fsync(rfd);
	if (rfd >= 0)
		un_sys_close(rfd);
	un_sys_creds_revert(&saved);
	return err;
}

static int fsync_run(void *arg)
{
	const struct fsync_job *j = arg;
	uint64_t ticket, t0;
	int err;

	if (j->drain) /* commit what waits, for a flush begun after it */
		un_node_jobs_drain(j->st);
	ticket = un_seq_ticket(&j->st->flushes);
	if (j->flush)
		un_state_sync_kick(j->st);
	t0 = un_now_ns();
	err = fsync_fd(j->fd, j->fs);
	un_count_timed(&j->st->sh->counters.fsyncs, &j->st->sh->counters.fsync_ns, t0);
	if (err)
		atomic_fetch_add(&j->st->fsyncs->failed, 1);
	return err || !j->flush ? err : un_state_sync_wait(j->st, ticket);
}

/* The slot of the inode ST names (Fibonacci hashing: the top bits). */
static struct slot *slot_of(struct un_fsyncs *t, const struct stat *st)
{
	uint64_t h = ((uint64_t)st->st_ino ^ (uint64_t)st->st_dev << 40) *
		     UINT64_C(0x9e3779b97f4a7c15);

	return &t->slot[h >> 58];
}

/* Binds S to the inode ST names, unless another inode holds it: true when
 * bound (the caller is then one of its users). */
static bool slot_bind(struct slot *s, const struct stat *st)
{
	bool ok;

	pthread_mutex_lock(&s->seq.lock);
	ok = !atomic_load(&s->users) || (s->dev == st->st_dev && s->ino == st->st_ino);
	if (ok) {
		s->dev = st->st_dev;
		s->ino = st->st_ino;
		atomic_fetch_add(&s->users, 1);
	}
	pthread_mutex_unlock(&s->seq.lock);
	return ok;
}

/* Returns once an fsync of the inode that J->fd (O_PATH) names, begun after
 * the call, has ended (design notes), with its result; runs J when its turn
 * comes. */
static int fsync_shared(const struct fsync_job *j)
{
	struct stat st;
	struct slot *s;
	uint64_t ticket;
	int err;

	err = un_sys_fstat(j->fd, &st);
	if (err)
		return err;
	if (j->fs)
		st.st_ino = 0; /* the filesystem's series: no inode has number 0 */
	s = slot_of(j->st->fsyncs, &st);
	if (!slot_bind(s, &st))
		return fsync_run((void *)j); /* another inode's: not shared */
	ticket = un_seq_ticket(&s->seq);
	err = un_seq_wait(&s->seq, ticket, fsync_run, (void *)j);
	atomic_fetch_sub(&s->users, 1);
	return err;
}

/* Whether O's inode can be fsynced: only regular files and directories can
 * be opened for it without side effects. */
static bool syncable(const struct un_obj *o)
{
	return S_ISREG(o->type) || S_ISDIR(o->type);
}

/* Whether O has an upper inode no fsync can reach: a symlink or a device
 * takes a syncfs of the upper filesystem, as without a journal no fsync of
 * another inode writes its inode (dir.c, step 7). */
static bool needs_fs(struct un_export *ex, struct un_obj *o)
{
	return o && un_obj_upper(ex, o) && !syncable(o);
}

/* Flushes the upper instance of O, if it has one, and the table after it
 * when FLUSH, the queue before it when DRAIN too (struct fsync_job). */
static int sync_upper(struct un_export *ex, struct un_obj *o, bool flush, bool drain)
{
	struct fsync_job j = {.st = ex->st, .flush = flush, .drain = flush && drain};

	if (!o || !un_obj_upper(ex, o) || !syncable(o))
		return 0;
	j.fd = o->inst[0].fd;
	return fsync_shared(&j);
}

int un_sync_inode(struct un_export *ex, int fd)
{
	struct fsync_job j = {.fd = fd, .st = ex->st};

	return fsync_shared(&j);
}

unsigned un_sync_failures(struct un_state *st)
{
	return atomic_load(&st->fsyncs->failed);
}

int un_sync_made(struct un_export *ex, struct un_change *ch, struct un_obj *o,
		 struct un_obj *dir)
{
	/* Under a journal the transactions commit in order, and DIR's fsync
	 * commits the one that made O's entry and every one before it, which
	 * hold all of O's changes: O's own fsync would be a second commit,
	 * unshared (each new file has its own slot), that the concurrent
	 * changes of DIR could not join. */
	return un_sync_change(ex, ch, ex->dirsync_orders ? NULL : o, dir);
}

int un_sync_change(struct un_export *ex, struct un_change *ch, struct un_obj *a,
		   struct un_obj *b)
{
	return ch->cx->async ? 0 : un_sync_now(ex, ch->fs, a, b);
}

/* The syncfs a change takes instead of its fsyncs when one cannot reach
 * an inode it made or changed: it writes every inode and block of the upper
 * filesystem (the work dir's), A's and B's among them. */
static int sync_fs(struct un_export *ex, bool drain)
{
	struct fsync_job j = {
	    .fd = ex->tmpfd, .st = ex->st, .flush = true, .fs = true, .drain = drain};

	return fsync_shared(&j);
}

/* Whether the ext4 filesystem of device DEV runs its journal: jbd2 lists
 * each journal it runs as /proc/fs/jbd2/NAME-8 (8: the journal's inode),
 * NAME the block device's, which /sys/dev/block/MAJ:MIN links to.  1 yes,
 * 0 no or unknown (an external journal, no /sys), or -errno. */
static int ext4_journaled(dev_t dev)
{
	char link[PATH_MAX], path[PATH_MAX + 32];
	const char *name;
	struct stat st;
	ssize_t n;
	int err;

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u", major(dev), minor(dev));
	n = un_sys_readlinkat(AT_FDCWD, path, link, sizeof(link) - 1);
	if (n < 0)
		return n == -ENOENT ? 0 : (int)n;
	link[n] = '\0';
	name = strrchr(link, '/');
	name = name ? name + 1 : link;
	snprintf(path, sizeof(path), "/proc/fs/jbd2/%s-8", name);
	err = un_sys_fstatat(AT_FDCWD, path, &st, 0);
	if (err)
		return err == -ENOENT ? 0 : err;
	return 1;
}

int un_sync_probe_fs(struct un_export *ex)
{
	struct stat st;
	long type;
	int err;

	ex->dirsync_orders = false;
	err = un_sys_fstype(ex->tmpfd, &type);
	if (err)
		return err;
	if (type == XFS_SUPER_MAGIC) {
		ex->dirsync_orders = true;
		return 0;
	}
	if (type != EXT4_SUPER_MAGIC)
		return 0;
	err = un_sys_fstat(ex->tmpfd, &st);
	if (!err)
		err = ext4_journaled(st.st_dev);
	if (err < 0)
		return err;
	ex->dirsync_orders = err == 1;
	return 0;
}

/* Whether the change needs the syncfs: it made an inode no fsync reaches
 * (FS, or A or B is one), on a filesystem where a directory's fsync does
 * not carry it. */
static bool change_needs_fs(struct un_export *ex, bool fs, struct un_obj *a,
			    struct un_obj *b)
{
	bool made = fs || needs_fs(ex, a) || needs_fs(ex, b);

	return made && !ex->dirsync_orders;
}

/* The upper's part of un_sync_now: A's and then B's fsync, or the syncfs;
 * the last run waits for a flush of the table begun after it began
 * (fsync_run), and when DRAIN first commits the writer's queue. */
static int sync_uppers(struct un_export *ex, bool fs, struct un_obj *a, struct un_obj *b,
		       bool drain)
{
	int err;

	if (b == a)
		b = NULL;
	if (change_needs_fs(ex, fs, a, b))
		return sync_fs(ex, drain);
	err = sync_upper(ex, a, !b, drain);
	return err ? err : sync_upper(ex, b, true, drain);
}

int un_sync_now(struct un_export *ex, bool fs, struct un_obj *a, struct un_obj *b)
{
	uint64_t ticket;
	int err;

	/* The table's ticket first: a flush begun during the fsyncs below
	 * serves the change too. */
	err = un_state_sync_ticket(ex->st, &ticket);
	if (!err)
		err = sync_uppers(ex, fs, a, b, false);
	return err ? err : un_state_sync_wait(ex->st, ticket);
}

/* un_sync_queued where a directory's fsync does not order (ext4 without
 * its journal): JOB first, then un_sync_change. */
static int queued_then_sync(struct un_export *ex, struct un_change *ch, bool made,
			    struct un_obj *a, struct un_obj *b, struct un_node_job *job)
{
	int err = un_node_job_wait(ex->st, job);

	if (err)
		return err;
	return made ? un_sync_made(ex, ch, a, b) : un_sync_change(ex, ch, a, b);
}

int un_sync_queued(struct un_export *ex, struct un_change *ch, bool made,
		   struct un_obj *a, struct un_obj *b, struct un_node_job *job)
{
	int err, jerr;

	if (!ex->dirsync_orders) /* design notes: the job, then the syncs */
		return queued_then_sync(ex, ch, made, a, b, job);
	err = ch->cx->async ? 0 : -un_sys_fault(UN_SYS_SYNC);
	if (made)
		a = NULL; /* un_sync_made */
	if (!err && !ch->cx->async)
		err = sync_uppers(ex, ch->fs, a, b, true);
	jerr = un_node_job_wait(ex->st, job);
	if (jerr || err || ch->cx->async)
		return jerr ? jerr : err;
	/* The job's flush ticket was taken after its commit (node.c); the
	 * run that drained it usually flushed after that already. */
	return un_state_sync_wait(ex->st, job->flush);
}
