/* state.c - the state dir: the LMDB environment of the node table, the secret
 * key, and the thread that makes the table durable.
 *
 * Layout of DIR (mode 0700):
 *   data.mdb, lock.mdb   the LMDB environment (node.c says what is in it)
 *   secret               32 random bytes, mode 0600, written once
 *
 * Durability: the environment runs with MDB_NOSYNC, so a commit is in the page
 * cache when it returns (a crash of the process loses nothing) and a thread
 * flushes it to disk once a second; un_state_sync flushes at once, for replies
 * that promise stable storage.
 *
 * Group commit: a flush (mdb_env_sync: one fdatasync of data.mdb) makes
 * durable every transaction committed before it began, so callers share
 * them: the flushes are a run series (struct un_seq, sync.c's design notes
 * and invariants), and un_state_sync waits for the first flush that begins
 * after it was called, running it on its own thread when none is under way.
 * Under load, N concurrent callers cost two flushes instead of N, and a lone
 * caller still costs exactly one.  A change of a sync export takes its
 * ticket before it fsyncs the upper layer (un_state_sync_ticket, then
 * un_state_sync_wait), so a flush another change begins meanwhile serves it.
 * The syncer thread flushes through the same series once a second.
 *
 * Known risk, not closed: MDB_NOSYNC keeps the table intact across an OS
 * crash only if the filesystem writes the file in the order LMDB wrote it
 * (LMDB's documentation of MDB_NOSYNC).  A commit pwrites its new pages and
 * then a meta page pointing at them; ext4 (data=ordered) and xfs overwrite
 * blocks in place in no particular order, and a flush submits the file's
 * pages in offset order, the two meta pages first.  An OS crash or power cut
 * while a flush is in flight (or while the kernel writes back on its own,
 * which the 1 s syncer makes rare: dirty pages expire after 30 s) can leave
 * a meta page on disk that points at pages that are not, or at reused pages
 * since overwritten: a corrupt table, every handle lost.  The window is the
 * length of each flush (about a millisecond a second here).  Evaluated
 * (2026-12-03, measured on this project's VM with nfs_bench, 1 layer):
 *  - MDB_NOMETASYNC (each commit fdatasyncs its pages before it writes the
 *    meta page; keeps integrity, loses at most the last commit): one
 *    fdatasync per write transaction, inside LMDB's writer lock, so commits
 *    no longer share flushes.  Read paths write too: the first LOOKUP of a
 *    name assigns its node (one transaction), READDIRPLUS one per reply
 *    with new names.  Cold LOOKUPs (3,000 names, 32 outstanding) fell from
 *    20,000-34,000/s at 23-27 us of server CPU each to 1,400-2,200/s at
 *    100 us; CREATE+REMOVE pairs on an `async` export from 2,300-4,600/s
 *    to 260-410/s.  Not cheap: not taken.
 *  - MDB_WRITEMAP (with MDB_NOSYNC; MDB_MAPASYNC matters only without it):
 *    closes nothing, LMDB grants integrity under MDB_NOSYNC only without
 *    it.  Tried for its cost (commits 4c6f83c..bd79187, reverted): a
 *    commit with pwrite costs five system calls (pwrite64 of single pages,
 *    lseek + writev of runs, pwrite64 of the meta page; ten per
 *    CREATE+REMOVE pair, inside the directory's name lock), through the map
 *    none, and a flush becomes msync(MS_SYNC), which Linux runs as
 *    fdatasync of the range.  Crash guarantees: a process crash, as now;
 *    an OS crash on a filesystem that writes a file's pages back in no
 *    order (ext4 without data=journal, xfs), the same states can reach the
 *    disk (the page cache holds the same bytes after a commit; a page
 *    stored mid-transaction is a free one, like a reused page pwritten at
 *    commit; a half-stamped meta page misleads as a whole one sent early
 *    does); but on a filesystem that keeps a file's writes in order (the
 *    remedy below) the map loses that order, so it would need a probe of
 *    the filesystem; and a store into a hole of the sparse 64 GiB file on a
 *    full disk is a SIGBUS, not ENOSPC, so it needs the file fallocated
 *    ahead of the table.  Measured with all that (journaled ext4 image,
 *    run.sh A/B alternating, 6 runs each, medians): u4a CREATE+REMOVE
 *    15,757 -> 19,748 pairs/s at 57 -> 45 us CPU a pair, but small files
 *    (CREATE, WRITE, COMMIT) on u4a 5,228 -> 4,042 files/s at 135 -> 166
 *    us, and u4 unchanged (149 -> 147 us a pair).  Every flush cleans the
 *    pages it writes and so write-protects them in the map: the next
 *    commit faults on each (3-4 minor faults a file in small files, whose
 *    COMMITs flush; none in async CREATE+REMOVE), and the kernel shoots
 *    down their TLB entries on the other CPU.  A gain only where flushes
 *    are rare: not taken.
 *  - Syncing only some commits with NOMETASYNC does not help: one unordered
 *    commit is enough to leave a meta page ahead of its data.
 * What would close it: libmdbx's MDBX_SAFE_NOSYNC (lazy flushes that keep
 * the last flushed snapshot's pages from reuse, so a crash returns to it) in
 * place of LMDB, or a state dir on a filesystem that keeps a file's writes
 * in order across a crash (btrfs with data copy-on-write, ext4
 * data=journal); the README says so.
 *
 * TEST ONLY: UNION_NFSD_TEST_NO_SYNC=1 in the environment when the state is
 * opened turns both flushes into no-ops (the commits still reach the page
 * cache), so that the OS crash test (tests/integration/kvm_crash.sh) can show
 * that it notices lost handles.  Never set it in production: an OS crash then
 * loses every node made since the last clean shutdown.
 *
 * Keys: the secret never leaves this file.  Each purpose gets its own key,
 * derived with crypto_kdf under the context "unfsd-k1" and a fixed subkey id,
 * so the handle MAC, the cookie hash and the verifier MAC cannot be played
 * against one another, and they all survive restarts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "un_private.h"

#define SECRET_FILE  "secret"
#define SECRET_TMP   "secret.tmp"
#define SECRET_BYTES 32
#define KDF_CONTEXT  "unfsd-k1"
#define MAX_DBS	     8
#define MAX_READERS  512

/* Subkey ids: never renumber, or every handle and cookie issued changes. */
enum {
	KEY_ID_HANDLE = 1,
	KEY_ID_COOKIE = 2,
	KEY_ID_VERF = 3,
	KEY_ID_VERSION = 4,
};

/* Set by un_state_open from UNION_NFSD_TEST_NO_SYNC (design notes). */
static bool test_no_sync;

_Static_assert(SECRET_BYTES == crypto_kdf_KEYBYTES, "the secret is a kdf master key");
_Static_assert(sizeof(KDF_CONTEXT) - 1 == crypto_kdf_CONTEXTBYTES, "kdf context size");

int un_mdb_err(int rc)
{
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_MAP_FULL:
	case MDB_DBS_FULL:
		return -ENOSPC;
	case MDB_READERS_FULL:
	case MDB_TXN_FULL:
		return -EAGAIN;
	default:
		/* LMDB passes system errors through as positive errnos. */
		return rc > 0 ? -rc : -EIO;
	}
}

/* Reads the secret; -ENOENT when there is none yet, -EINVAL when the file is
 * not exactly SECRET_BYTES long (a damaged state dir is not silently reset:
 * that would turn every handle clients hold stale). */
static int secret_read(int dirfd, uint8_t key[SECRET_BYTES])
{
	uint8_t buf[SECRET_BYTES + 1];
	ssize_t n;
	int fd, err;

	fd = un_sys_openat(dirfd, SECRET_FILE, O_RDONLY | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd;
	n = un_sys_pread(fd, buf, sizeof(buf), 0);
	err = n < 0 ? (int)n : n != SECRET_BYTES ? -EINVAL : 0;
	if (!err)
		memcpy(key, buf, SECRET_BYTES);
	sodium_memzero(buf, sizeof(buf));
	un_sys_close(fd);
	return err;
}

/* Writes KEY to FD and makes it durable. */
static int secret_write(int fd, const uint8_t key[SECRET_BYTES])
{
	ssize_t n = un_sys_write(fd, key, SECRET_BYTES);

	return n < 0 ? (int)n : un_sys_fsync(fd);
}

/* Creates the secret: a temp file written and synced, renamed into place
 * without replacing (a concurrent creator's secret wins: -EEXIST), then the
 * directory synced so the name is durable too.  A failure leaves no temp. */
static int secret_create(int dirfd, uint8_t key[SECRET_BYTES])
{
	int fd, err;

	randombytes_buf(key, SECRET_BYTES);
	fd = un_sys_openat(dirfd, SECRET_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW,
			   0600);
	if (fd < 0)
		return fd;
	err = secret_write(fd, key);
	un_sys_close(fd);
	if (!err)
		err = un_sys_renameat2(dirfd, SECRET_TMP, dirfd, SECRET_FILE,
				       RENAME_NOREPLACE);
	if (err) {
		un_sys_unlinkat(dirfd, SECRET_TMP, 0);
		return err;
	}
	return un_sys_fsync(dirfd);
}

static int secret_get(int dirfd, uint8_t key[SECRET_BYTES])
{
	int err = secret_read(dirfd, key);

	if (err != -ENOENT)
		return err;
	err = secret_create(dirfd, key);
	if (err == -EEXIST)
		err = secret_read(dirfd, key);
	return err;
}

static void keys_derive(struct un_state *st, const uint8_t secret[SECRET_BYTES])
{
	crypto_kdf_derive_from_key(st->key_handle, sizeof(st->key_handle), KEY_ID_HANDLE,
				   KDF_CONTEXT, secret);
	crypto_kdf_derive_from_key(st->key_cookie, sizeof(st->key_cookie), KEY_ID_COOKIE,
				   KDF_CONTEXT, secret);
	crypto_kdf_derive_from_key(st->key_verf, sizeof(st->key_verf), KEY_ID_VERF,
				   KDF_CONTEXT, secret);
	crypto_kdf_derive_from_key(st->key_version, sizeof(st->key_version),
				   KEY_ID_VERSION, KDF_CONTEXT, secret);
}

/* Opens (creating) DIR and derives ST's keys from its secret. */
static int state_dir_open(struct un_state *st, const char *dir)
{
	uint8_t secret[SECRET_BYTES];
	int dirfd, err;

	err = un_sys_mkdirat(AT_FDCWD, dir, 0700);
	if (err < 0 && err != -EEXIST)
		return err;
	dirfd = un_sys_openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY, 0);
	if (dirfd < 0)
		return dirfd;
	err = secret_get(dirfd, secret);
	if (!err)
		keys_derive(st, secret);
	sodium_memzero(secret, sizeof(secret));
	un_sys_close(dirfd);
	return err;
}

static int env_open(struct un_state *st, const char *dir)
{
	int dead, rc;

	rc = mdb_env_create(&st->env);
	if (rc)
		return un_mdb_err(rc);
	if ((rc = mdb_env_set_maxdbs(st->env, MAX_DBS)) ||
	    (rc = mdb_env_set_mapsize(st->env, UN_MAP_SIZE)) ||
	    (rc = mdb_env_set_maxreaders(st->env, MAX_READERS)))
		return un_mdb_err(rc);
	/* MDB_NOTLS: read transactions belong to the call, not the thread, so
	 * any worker may run any request. */
	rc = mdb_env_open(st->env, dir, MDB_NOSYNC | MDB_NOTLS, 0600);
	if (!rc)
		mdb_reader_check(st->env, &dead); /* slots of crashed processes */
	return un_mdb_err(rc);
}

/* Creates or checks the node table's databases. */
static int tables_init(struct un_state *st)
{
	MDB_txn *txn;
	int err;

	err = un_mdb_err(mdb_txn_begin(st->env, NULL, 0, &txn));
	if (err)
		return err;
	err = un_node_init(st, txn);
	if (err)
		mdb_txn_abort(txn);
	else
		err = un_mdb_err(mdb_txn_commit(txn));
	return err;
}

/* The job of the table's flushes (un_seq): one mdb_env_sync. */
static int flush_job(void *arg)
{
	struct un_state *st = arg;

	return test_no_sync ? 0 : un_mdb_err(mdb_env_sync(st->env, 1));
}

/* Returns once a flush that began after the call has ended (design notes,
 * group commit). */
static int flush_after_now(struct un_state *st)
{
	return un_seq_wait(&st->flushes, un_seq_ticket(&st->flushes), flush_job, st);
}

static void *syncer_main(void *arg)
{
	struct un_state *st = arg;
	struct timespec deadline;

	pthread_mutex_lock(&st->sync_lock);
	while (!st->stopping) {
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += UN_SYNC_PERIOD_S;
		while (!st->kicked && !st->stopping &&
		       pthread_cond_timedwait(&st->sync_cond, &st->sync_lock,
					      &deadline) != ETIMEDOUT)
			;
		if (st->stopping)
			break;
		st->kicked = false;
		pthread_mutex_unlock(&st->sync_lock);
		flush_after_now(st); /* a failure is retried next period */
		pthread_mutex_lock(&st->sync_lock);
	}
	pthread_mutex_unlock(&st->sync_lock);
	return NULL;
}

static int syncer_start(struct un_state *st)
{
	pthread_condattr_t ca;
	int rc;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st->sync_cond, &ca);
	pthread_condattr_destroy(&ca);
	un_seq_init(&st->flushes);
	pthread_mutex_init(&st->sync_lock, NULL);
	rc = pthread_create(&st->syncer, NULL, syncer_main, st);
	if (rc) {
		un_seq_destroy(&st->flushes);
		pthread_cond_destroy(&st->sync_cond);
		pthread_mutex_destroy(&st->sync_lock);
		return -rc;
	}
	return 0;
}

static void syncer_stop(struct un_state *st)
{
	pthread_mutex_lock(&st->sync_lock);
	st->stopping = true;
	pthread_cond_signal(&st->sync_cond);
	pthread_mutex_unlock(&st->sync_lock);
	pthread_join(st->syncer, NULL);
	un_seq_destroy(&st->flushes);
	pthread_cond_destroy(&st->sync_cond);
	pthread_mutex_destroy(&st->sync_lock);
}

/* Frees what state_open built so far (the syncer is not running). */
static void state_free(struct un_state *st)
{
	if (st->cache)
		un_listing_cache_free(st->cache);
	un_fsyncs_free(st->fsyncs);
	if (st->env)
		mdb_env_close(st->env);
	pthread_mutex_destroy(&st->wq_lock);
	sodium_memzero(st, sizeof(*st));
	free(st);
}

int un_state_open(const char *dir, struct un_state **out)
{
	const char *nosync;
	struct un_state *st;
	int err = -EIO;

	if (sodium_init() < 0)
		return err;
	nosync = getenv("UNION_NFSD_TEST_NO_SYNC");
	test_no_sync = nosync && !strcmp(nosync, "1");
	err = -ENOMEM;
	st = un_sys_calloc(1, sizeof(*st));
	if (!st)
		return err;
	pthread_mutex_init(&st->wq_lock, NULL);
	st->wq_tail = &st->wq_head;
	err = state_dir_open(st, dir);
	if (err)
		goto fail;
	err = env_open(st, dir);
	if (err)
		goto fail;
	err = tables_init(st);
	if (err)
		goto fail;
	err = un_listing_cache_new(&st->cache);
	if (err)
		goto fail;
	err = un_fsyncs_new(&st->fsyncs);
	if (err)
		goto fail;
	err = syncer_start(st);
	if (err)
		goto fail;
	*out = st;
	return 0;
fail:
	state_free(st);
	return err;
}

void un_state_close(struct un_state *st)
{
	if (!st)
		return;
	syncer_stop(st);
	mdb_env_sync(st->env, 1);
	state_free(st);
}

int un_state_sync(struct un_state *st)
{
	uint64_t ticket;
	int err = un_state_sync_ticket(st, &ticket);

	return err ? err : un_state_sync_wait(st, ticket);
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
	if (atomic_load(&st->flushes.running))
		return;
	pthread_mutex_lock(&st->sync_lock);
	st->kicked = true;
	pthread_cond_signal(&st->sync_cond);
	pthread_mutex_unlock(&st->sync_lock);
}

int un_state_sync_wait(struct un_state *st, uint64_t ticket)
{
	return un_seq_wait(&st->flushes, ticket, flush_job, st);
}
