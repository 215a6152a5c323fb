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
 * Group commit: a flush (mdb_env_sync: one fdatasync of data.mdb, or the
 * msync of its map where the table is written through it, below) makes
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
 *  - MDB_WRITEMAP: closes nothing (LMDB's documentation grants integrity
 *    under MDB_NOSYNC only without it); taken for its cost where it leaves
 *    the risk as it is (below).  MDB_MAPASYNC matters only without
 *    MDB_NOSYNC.
 *  - Syncing only some commits with NOMETASYNC does not help: one unordered
 *    commit is enough to leave a meta page ahead of its data.
 * What would close it: libmdbx's MDBX_SAFE_NOSYNC (lazy flushes that keep
 * the last flushed snapshot's pages from reuse, so a crash returns to it) in
 * place of LMDB, or a state dir on a filesystem that keeps a file's writes
 * in order across a crash (btrfs with data copy-on-write, ext4
 * data=journal); the README says so.
 *
 * Writes through the map: a commit with pwrite costs five system calls here
 * (pwrite64 of single pages, lseek and writev of runs, pwrite64 of the meta
 * page), ten per CREATE+REMOVE pair, under the directory's name lock
 * (dir.c).  With MDB_WRITEMAP LMDB builds its pages in the shared map and
 * stamps the meta page there, txnid last: a commit makes no system call,
 * and a flush is msync(MS_SYNC) of the map, which Linux runs as an
 * fdatasync of the file's range.  It is taken only where that changes no
 * crash guarantee (map_write_fits):
 *  - A process crash: as before.  A commit's bytes are in the page cache
 *    when it returns, as its pwrites were; a process that dies mid-commit
 *    leaves at most a meta page without its new txnid, and LMDB opens the
 *    other one.
 *  - An OS crash on a filesystem that writes a file's pages back in no
 *    particular order (ext4 without data=journal, xfs; tmpfs keeps nothing
 *    anyway): the same states can reach the disk in both modes.  After a
 *    commit the page cache holds the same bytes either way, and a flush or
 *    the kernel's own writeback sends dirty pages in offset order, meta
 *    pages first, nothing ordering one page against another.  So the known
 *    risk above is neither closed nor widened: a crash during a flush (or
 *    during writeback) can still leave a meta page ahead of its pages, or
 *    on pages overwritten since.  Two differences, neither new in kind: a
 *    page can go to disk while a transaction is still storing into it (it
 *    is a free page, which the disk's older snapshot may still use - as
 *    with the pwrite of a reused page at commit), and a meta page can go
 *    out half stamped (new roots under the txnid of two commits ago; LMDB
 *    ranks it below the other meta page, while pwrite could send a whole
 *    new meta page ahead of its pages: no worse).
 *  - An OS crash on a filesystem that keeps a file's writes in order (ext4
 *    data=journal; btrfs's copy-on-write data), the README's remedy for
 *    the known risk: there pwrite keeps LMDB's integrity and the map would
 *    not (stores reach the filesystem at writeback, in offset order), so
 *    the table keeps pwrite there, and on any filesystem the probe does not
 *    know.  (A per-file data journal, chattr +j, is not detected.)
 *  - A full disk: the pwrite of a commit fails with ENOSPC and the commit
 *    with it; a store into a hole of the map raises SIGBUS and kills the
 *    server (LMDB sizes data.mdb to the map, 64 GiB, sparse).  So every
 *    write transaction first keeps the file allocated (fallocate) at least
 *    MAP_HEADROOM beyond the table's last page (un_state_map_reserve,
 *    under LMDB's writer lock), and fails with -ENOSPC when it cannot: more
 *    than one transaction adds.  The largest is a READDIR reply's batch of
 *    new names: at most 1 MiB of reply (srv_max_io), so at most ~37,500
 *    entries of at least 28 bytes, each adding at most ~150 bytes of
 *    records and keys (nodes, names, groups), in pages half full at worst
 *    after splits: under 12 MiB.  The cost: the table's file holds up to
 *    20 MiB of blocks beyond its pages, and on a full disk it stops growing
 *    that much earlier (by hand, on a 40 MiB tmpfs: -ENOSPC after 22,970
 *    nodes of 250-byte names with the map, 46,058 with pwrite; SIGBUS
 *    without the reserve).  A state
 *    dir where the file cannot be 64 GiB long or allocated ahead opens with
 *    pwrite (env_open_mode).
 *  - A stray store through a pointer into the map would reach the file
 *    instead of faulting; the engine only reads what LMDB hands it.
 * A state dir may move between filesystems and modes: the format is one;
 * a file the map made 64 GiB long stays so, sparse.
 * Measured (2026-12-03, bench/run.sh with TRACE_DIR, 2,000 pairs, state dir
 * on ext4 without a journal: taken): system calls per CREATE+REMOVE pair,
 * u4a 97.6 -> 87.9, u4 121.5 -> 104.9 (pwrite64 6.0, lseek 2.1, writev 2.1
 * -> none; fdatasync -> msync); small files (u4a) 157 -> 149 per file.  The
 * table alone (a loop of un_node_get_or_create + un_node_remove, 1 thread,
 * no flush): 8.3-8.6 -> 2.9-3.0 us of CPU per pair.  Each flush now
 * write-protects the pages it cleaned, so the next commit takes a minor
 * fault on each page it stores into (3-7 a pair on a sync export, where
 * changes flush; about none on an async one).
 *
 * TEST ONLY: UNION_NFSD_TEST_MAP=write or =pwrite picks the mode instead of
 * the probe (test_node runs every test in both).
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
#include <limits.h>
#include <linux/magic.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "un_private.h"

#define SECRET_FILE  "secret"
#define SECRET_TMP   "secret.tmp"
#define SECRET_BYTES 32
#define KDF_CONTEXT  "unfsd-k1"
#define MAX_DBS	     8
#define MAX_READERS  512
#define MAP_HEADROOM (16 << 20) /* allocated beyond the table's last page */
#define MAP_STEP     (4 << 20)	/* fallocate's grain */

/* Subkey ids: never renumber, or every handle and cookie issued changes. */
enum {
	KEY_ID_HANDLE = 1,
	KEY_ID_COOKIE = 2,
	KEY_ID_VERF = 3,
	KEY_ID_VERSION = 4,
};

/* Set by un_state_open from UNION_NFSD_TEST_NO_SYNC (design notes). */
static bool test_no_sync;
/* Set by un_state_open from UNION_NFSD_TEST_MAP: 1 "write", 0 "pwrite",
 * -1 unset: the probe decides (design notes). */
static int test_map;

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

/* Whether the ext4 filesystem on device DEV writes file data outside its
 * journal: ext4 lists its options in /proc/fs/ext4/NAME/options, NAME the
 * block device's, which /sys/dev/block/MAJ:MIN links to; data=journal among
 * them where the data goes through the journal (no data= line at all
 * without a journal).  1 yes, 0 no or unknown, or -errno. */
static int ext4_data_unjournaled(dev_t dev)
{
	char link[PATH_MAX], path[PATH_MAX + 32], opts[4096];
	const char *name;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u", major(dev), minor(dev));
	n = un_sys_readlinkat(AT_FDCWD, path, link, sizeof(link) - 1);
	if (n < 0)
		return n == -ENOENT ? 0 : (int)n;
	link[n] = '\0';
	name = strrchr(link, '/');
	name = name ? name + 1 : link;
	snprintf(path, sizeof(path), "/proc/fs/ext4/%s/options", name);
	fd = un_sys_openat(AT_FDCWD, path, O_RDONLY, 0);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	n = un_sys_pread(fd, opts + 1, sizeof(opts) - 2, 0);
	un_sys_close(fd);
	if (n < 0)
		return (int)n;
	opts[0] = '\n';
	opts[n + 1] = '\0';
	return !strstr(opts, "\ndata=journal\n");
}

/* Whether the table of state dir DIRFD may be written through its map:
 * only where a flush writes data.mdb's pages in no particular order anyway
 * (design notes, writes through the map); false when unsure. */
static int map_write_fits(int dirfd, bool *fits)
{
	struct stat sb;
	long type;
	int err;

	*fits = false;
	if (test_map >= 0) {
		*fits = test_map == 1;
		return 0;
	}
	err = un_sys_fstype(dirfd, &type);
	if (err)
		return err;
	if (type == XFS_SUPER_MAGIC || type == TMPFS_MAGIC) {
		*fits = true;
		return 0;
	}
	if (type != EXT4_SUPER_MAGIC)
		return 0;
	err = un_sys_fstat(dirfd, &sb);
	if (!err)
		err = ext4_data_unjournaled(sb.st_dev);
	if (err < 0)
		return err;
	*fits = err == 1;
	return 0;
}

/* Opens (creating) DIR, derives ST's keys from its secret and decides
 * whether its table is written through the map (st->map_write). */
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
	if (!err)
		err = map_write_fits(dirfd, &st->map_write);
	un_sys_close(dirfd);
	return err;
}

/* Opens the environment, through a writable map when st->map_write. */
static int env_open(struct un_state *st, const char *dir)
{
	unsigned flags = MDB_NOSYNC | MDB_NOTLS | (st->map_write ? MDB_WRITEMAP : 0);
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
	rc = mdb_env_open(st->env, dir, flags, 0600);
	if (!rc)
		mdb_reader_check(st->env, &dead); /* slots of crashed processes */
	return un_mdb_err(rc);
}

/* Opens the environment as state_dir_open decided; where the writable map
 * cannot be had (the file cannot be 64 GiB long, or allocated ahead), with
 * pwrite after all. */
static int env_open_mode(struct un_state *st, const char *dir)
{
	int err;

	if (st->map_write) {
		err = env_open(st, dir);
		if (!err)
			err = un_state_map_reserve(st);
		if (!err)
			return 0;
		mdb_env_close(st->env);
		st->env = NULL;
		st->map_write = false;
		st->map_alloc = 0;
	}
	return env_open(st, dir);
}

int un_state_map_reserve(struct un_state *st)
{
	MDB_envinfo info;
	MDB_stat ms;
	off_t need, end;
	int fd, err;

	if (!st->map_write)
		return 0;
	mdb_env_info(st->env, &info);
	mdb_env_stat(st->env, &ms);
	need = (off_t)(info.me_last_pgno + 1) * ms.ms_psize + MAP_HEADROOM;
	if (need <= st->map_alloc)
		return 0;
	end = (need + MAP_STEP - 1) / MAP_STEP * MAP_STEP;
	/* LMDB does the file's I/O itself, past the seam; its fault point
	 * stands for this call too. */
	err = un_sys_fault(UN_SYS_MDB);
	if (!err && mdb_env_get_fd(st->env, &fd))
		err = EIO;
	if (!err && fallocate(fd, 0, st->map_alloc, end - st->map_alloc))
		err = errno;
	if (err)
		return -err;
	st->map_alloc = end;
	return 0;
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
	sodium_memzero(st, sizeof(*st));
	free(st);
}

int un_state_open(const char *dir, struct un_state **out)
{
	const char *nosync, *map;
	struct un_state *st;
	int err = -EIO;

	if (sodium_init() < 0)
		return err;
	nosync = getenv("UNION_NFSD_TEST_NO_SYNC");
	test_no_sync = nosync && !strcmp(nosync, "1");
	map = getenv("UNION_NFSD_TEST_MAP");
	test_map = !map			    ? -1
		   : !strcmp(map, "write")  ? 1
		   : !strcmp(map, "pwrite") ? 0
					    : -1;
	err = -ENOMEM;
	st = un_sys_calloc(1, sizeof(*st));
	if (!st)
		return err;
	err = state_dir_open(st, dir);
	if (err)
		goto fail;
	err = env_open_mode(st, dir);
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
