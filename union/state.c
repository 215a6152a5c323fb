/* SPDX-License-Identifier: Apache-2.0 */
/* state.c - the state dir: the LMDB environment of the node table and the
 * secret key; it starts and stops the thread that makes the tables durable
 * (sync.c, un_syncer_start) with them, one for the main state and every
 * table opened from it.  Besides the main state (the state
 * dir, un_state_open) a server may open more node tables in dirs of their
 * own that share the main state's keys, layer indexes and counters
 * (un_state_open_table, rule 5): a writable union's own table, which moves
 * with it (docs/gateways.md, part 2).
 *
 * Layout of DIR (mode 0700):
 *   data.mdb, lock.mdb   the LMDB environment (node.c says what is in it)
 *   secret               32 random bytes, mode 0600, written once
 *   layers/              the lower layers' indexes and each export's lower
 *                        stack (layerid.c)
 *   roots/               a link per export naming its root node (roots.c)
 *
 * Layout of a table's DIR (un_state_open_table; mode 0700): data.mdb,
 * lock.mdb and roots/ as above, for the exports opened on that table.
 *
 * Rules:
 *  1. The secret never leaves this file.  It is written once, 0600, and
 *     read on every later open (secret_get), unless a key file is given
 *     (un_state_open_keyed: 32 bytes, readable by its owner only, read
 *     instead, so that gateways given one file derive the same keys and
 *     serve the same handles, docs/gateways.md); each purpose gets its own key,
 *     derived with crypto_kdf under the context "unfsd-k1" and a fixed
 *     subkey id (keys_derive), so the handle MAC, the cookie hash and the
 *     verifier MAC cannot be played against one another, and all of them
 *     survive restarts.
 *  2. The file on disk holds the last or the second-to-last commit, each
 *     whole: the environment runs with MDB_NOMETASYNC (env_open), so a
 *     commit fdatasyncs its pages before the meta page that points at them,
 *     and LMDB keeps the pages of the last two commits from reuse.  A
 *     process crash loses nothing; an OS crash at most the last commit.
 *  3. TEST ONLY: un_state_test_no_sync(true) before the state is opened
 *     (the server calls it for UNION_NFSD_TEST_NO_SYNC=1) runs the
 *     environment with MDB_NOSYNC (env_open) and makes the flushes no-ops
 *     (sync.c, flush_job), so that the OS crash test
 *     (tests/integration/kvm_crash.sh) can show that it notices lost
 *     handles.  Never in production: an OS crash then loses every node
 *     made since the last clean shutdown.
 *  4. The table's pages are mapped (LMDB reads through its map), and every
 *     page a lookup touched would count in the process's RSS for good: a
 *     server that serves new clients (each one's handles are recorded for
 *     good) would grow by the table's growth, in what `ps`, the kernel's
 *     OOM score and the admin's eyes take for the server's memory.  So
 *     once the table's file grew by TRIM_BYTES since the last time, at
 *     most once a second, the writer drops the whole map from the
 *     process's page tables (un_state_map_trim, MADV_DONTNEED): the map is
 *     shared, read-only and never dirty (no MDB_WRITEMAP: commits write
 *     with pwrite), so its pages stay in the page cache and the next read
 *     of one faults it back in, with its current contents; a reader in the
 *     middle of a transaction sees the same bytes.  What a busy server
 *     reads often comes back at the cost of a minor fault a page, at most
 *     once a second and only while the table grows.
 *  5. A struct un_state is one node table and a pointer to what every
 *     table of the server shares (struct un_shared), which the main state
 *     owns: a table opened from it (un_state_open_table) is freed alone,
 *     and the main state is closed only after its tables (asserted in
 *     un_state_close).  Each part of the state sits where what it holds
 *     is named:
 *       - per table: the environment and its databases, the writer's
 *         queue and the intents with run and intent_seq (they name the
 *         table's node ids), node_epoch and node_pending (they speak of
 *         the table's commits), the flushes with their counts of commits
 *         and the table's place among the syncer's (a flush is an
 *         fdatasync of the table's data.mdb), the map trim fields, roots/
 *         (a root is a node of the table that holds it), the dir (a report
 *         names the table that failed);
 *       - per table too: the listing cache (readdir.c), keyed by directory
 *         node id and remembering each entry's node under the table's
 *         node epoch, so two tables' ids, which their counters hand out
 *         alike, must not meet in one cache (but its inotify watches are
 *         the main table's cache's, one instance for the server: they
 *         name layer dirs, no node, readdir.c invariant 10); and the
 *         fsyncs of upper inodes (sync.c), which serve a union's changes
 *         before its own table's flush;
 *       - shared: the keys and lower_ids (rule 1: derived once from the
 *         main dir's secret or the key file, so that a union's handles,
 *         cookies, verifiers and lower ids are those of the server and
 *         of every gateway given the key file, whichever table records
 *         the union's nodes); the open layer indexes and layers/ (an index
 *         belongs to a layer, which every union over it shares: a
 *         thousand client unions map one index once, layerid.c rule 4);
 *         the counters (stats.c: the server's totals); the syncer thread
 *         (sync.c rule 5: a thread a table would cost a gateway one a
 *         client union, each waking once a period); the retired layers
 *         (retire.c: they are layers with their indexes, found by export
 *         id and index keys, no table's node ids); on_error and on_notice
 *         (the server's log).
 *     A table without a key file gives its objects counter ids of its own,
 *     which mean nothing in another table; with one, a lower object gets
 *     the same lower id in every table (lowerid.c), as on every gateway.
 *  6. A table opened from the main state is closed by its last holder: a
 *     union's own table (workdir.c rule 4) is held by the union and by its
 *     successor at a reload (layer.c rule 4), each of which closes it
 *     (un_state_table_get, un_state_close), so whichever of the two goes
 *     last closes it, before it lets the work dir's lock go.
 *  7. A table opened from the main state starts its counter at a random
 *     id below 2^61 (node.c, un_node_init), not at the first id: a
 *     union's table goes with its upper at a reset and is made anew, and
 *     the ids the old one handed out under the union's export id must not
 *     name the new one's objects (node.c invariant 1: ids are never
 *     reused).  Two starts meet only if they fall within a table's length
 *     of each other, about 2^-40 for a million nodes.
 *  8. A table in a union's work dir runs LMDB with its lock file
 *     (lock.mdb), not MDB_NOLOCK: LMDB's reader table is what keeps the
 *     writer from reusing the pages that the worker threads' read
 *     transactions still read (MDB_NOLOCK leaves that to the caller), so
 *     it is needed within the process.  It is not needed across hosts:
 *     the union's OFD lock (workdir.c rule 3) lets one process open the
 *     table at a time, and is taken before it, so LMDB's own fcntl lock on
 *     lock.mdb is always free and the opener, finding itself the only
 *     user, resets the reader table of a dead holder (mdb_env_open).  Its
 *     map of lock.mdb is shared with no other process, so the storage's
 *     coherence of shared maps is never relied on.
 *
 * Why not MDB_NOSYNC: a commit then reaches only the page cache, and the
 * table is whole after an OS crash only if the filesystem writes the file in
 * the order LMDB wrote it, which ext4 and xfs do not promise for overwrites:
 * a flush, or the kernel's own writeback, can put a meta page on disk ahead
 * of the pages it points at, or ahead of a reused page's new contents, and a
 * power cut then leaves a corrupt table (every handle lost).  A `sync`
 * export's changes wait for a flush anyway; an `async` one's wait for their
 * commit's fdatasync, which node.c's writer shares among the jobs of a
 * batch (bench/README.md has the cost).  MDB_WRITEMAP is not used: it closes
 * nothing under MDB_NOSYNC, and every commit after a flush would fault on
 * the pages the flush write-protected.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "un_private.h"

#define SECRET_FILE  "secret"
#define SECRET_TMP   "secret.tmp"
#define SECRET_BYTES 32
#define KDF_CONTEXT  "unfsd-k1"
#define MAX_DBS	     8
#define MAX_READERS  512
#define TRIM_BYTES   (64u << 10)   /* rule 4: growth of the file, */
#define TRIM_NS	     1000000000ull /* at most once a second */

/* Subkey ids: never renumber, or every handle and cookie issued changes. */
enum {
	KEY_ID_HANDLE = 1,
	KEY_ID_COOKIE = 2,
	KEY_ID_VERF = 3,
	KEY_ID_VERSION = 4,
	KEY_ID_LOWER = 5,
};

_Static_assert(SECRET_BYTES == crypto_kdf_KEYBYTES, "the secret is a kdf master key");
_Static_assert(sizeof(KDF_CONTEXT) - 1 == crypto_kdf_CONTEXTBYTES, "kdf context size");

/* Reads the SECRET_BYTES key file NAME of DIRFD into KEY: -EINVAL when it
 * is not exactly that long (a damaged state dir is not silently reset:
 * that would turn every handle clients hold stale), -EACCES with
 * OWNER_ONLY when it is not a regular file or others may read it (a key
 * others can read lets them forge handles). */
static int key_read(int dirfd, const char *name, bool owner_only,
		    uint8_t key[SECRET_BYTES])
{
	uint8_t buf[SECRET_BYTES + 1];
	struct stat sb;
	ssize_t n = 0;
	int fd, err = 0;

	fd = un_sys_openat(dirfd, name, O_RDONLY | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd;
	if (owner_only)
		err = un_sys_fstat(fd, &sb);
	if (!err && owner_only && (!S_ISREG(sb.st_mode) || (sb.st_mode & 077)))
		err = -EACCES;
	if (!err)
		n = un_sys_pread(fd, buf, sizeof(buf), 0);
	if (!err)
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
	int err = key_read(dirfd, SECRET_FILE, false, key);

	if (err != -ENOENT) /* -ENOENT: none yet */
		return err;
	err = secret_create(dirfd, key);
	if (err == -EEXIST) /* a concurrent creator's */
		err = key_read(dirfd, SECRET_FILE, false, key);
	return err;
}

static void keys_derive(struct un_shared *sh, const uint8_t secret[SECRET_BYTES])
{
	crypto_kdf_derive_from_key(sh->key_handle, sizeof(sh->key_handle), KEY_ID_HANDLE,
				   KDF_CONTEXT, secret);
	crypto_kdf_derive_from_key(sh->key_cookie, sizeof(sh->key_cookie), KEY_ID_COOKIE,
				   KDF_CONTEXT, secret);
	crypto_kdf_derive_from_key(sh->key_verf, sizeof(sh->key_verf), KEY_ID_VERF,
				   KDF_CONTEXT, secret);
	crypto_kdf_derive_from_key(sh->key_version, sizeof(sh->key_version),
				   KEY_ID_VERSION, KDF_CONTEXT, secret);
	crypto_kdf_derive_from_key(sh->key_lower, sizeof(sh->key_lower), KEY_ID_LOWER,
				   KDF_CONTEXT, secret);
}

/* Makes DIR (mode 0700) unless it exists. */
static int dir_make(const char *dir)
{
	int err = un_sys_mkdirat(AT_FDCWD, dir, 0700);

	return err == -EEXIST ? 0 : err;
}

/* Opens (creating) the main state dir DIR and derives SH's keys from its
 * secret, or from KEY_FILE when not NULL. */
static int keys_open(struct un_shared *sh, const char *dir, const char *key_file)
{
	uint8_t secret[SECRET_BYTES];
	int dirfd, err;

	err = dir_make(dir);
	if (err)
		return err;
	dirfd = un_sys_openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY, 0);
	if (dirfd < 0)
		return dirfd;
	err = key_file ? key_read(AT_FDCWD, key_file, true, secret)
		       : secret_get(dirfd, secret);
	sh->lower_ids = key_file != NULL; /* lowerid.c rule 1 */
	if (!err)
		keys_derive(sh, secret);
	sodium_memzero(secret, sizeof(secret));
	un_sys_close(dirfd);
	return err;
}

/* The allocator.  node.c's writer runs each job of a batch in a nested
 * write transaction, and LMDB mallocs a 2 MiB dirty list and a 1 MiB
 * free-page list for every one.  Taken from a mapping each, that is an
 * mmap, page faults, and an munmap whose TLB shootdown reaches every CPU
 * the server runs on, several times a durable change; from a thread's
 * arena, kept there by a trim threshold above them, it is a few pointer
 * moves (CREATE+REMOVE, sync, 32 in flight: 4,100 -> 5,200 pairs/s and
 * 320 -> 260 us of server CPU a pair, bench/README.md).  So blocks up to
 * ARENA_BLOCK_MAX come from the arenas (un_malloc_policy).
 *
 * Except what an environment's open allocates (env_open_mapped): LMDB
 * callocs a 2 MiB dirty list for every environment (a client union's own
 * table, docs/gateways.md part 2), and calloc clears a block taken from an
 * arena page by page, making it resident for as long as the table is
 * open; from a fresh mapping it is zero pages the kernel fills only as
 * write transactions touch them (500 client unions: 46 MB against 674,
 * bench/README.md, "Client unions with tables of their own").  The opens
 * take turns on mapped_lock, which only they take, and the threshold is
 * lowered for the open only: another thread's block taken meanwhile comes
 * from a mapping, as every large block once did. */
#define ARENA_BLOCK_MAX (4u << 20)   /* a nested transaction's lists, 3 MiB */
#define ARENA_TRIM_MIN	(16u << 20)  /* a heap's free top kept up to this */
#define MAPPED_MIN	(256u << 10) /* while an environment opens */

static pthread_mutex_t mapped_lock = PTHREAD_MUTEX_INITIALIZER;

void un_malloc_policy(void)
{
	mallopt(M_MMAP_THRESHOLD, ARENA_BLOCK_MAX);
	mallopt(M_TRIM_THRESHOLD, ARENA_TRIM_MIN);
}

/* mdb_env_open, its blocks from their own mappings (the allocator, above) */
static int env_open_mapped(MDB_env *env, const char *dir, unsigned flags)
{
	int rc;

	pthread_mutex_lock(&mapped_lock);
	mallopt(M_MMAP_THRESHOLD, MAPPED_MIN);
	rc = mdb_env_open(env, dir, flags, 0600);
	mallopt(M_MMAP_THRESHOLD, ARENA_BLOCK_MAX);
	pthread_mutex_unlock(&mapped_lock);
	return rc;
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
	 * any worker may run any request.  MDB_NOMETASYNC: rule 2. */
	rc = env_open_mapped(st->env, dir,
			     (un_sys_test_no_sync_on() ? MDB_NOSYNC : MDB_NOMETASYNC) |
				 MDB_NOTLS);
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

/* Frees what shared_open built (no table uses SH any more). */
static void shared_free(struct un_shared *sh)
{
	un_syncer_stop(sh);
	pthread_mutex_destroy(&sh->rt_lock);
	pthread_mutex_destroy(&sh->lx_lock);
	free(sh->dir);
	sodium_memzero(sh, sizeof(*sh));
	free(sh);
}

/* The shared part of a main state in DIR, keyed from its secret or KEY_FILE
 * (rule 1). */
static int shared_open(const char *dir, const char *key_file, struct un_shared **out)
{
	struct un_shared *sh = un_sys_calloc(1, sizeof(*sh));
	int err;

	if (!sh)
		return -ENOMEM;
	pthread_mutex_init(&sh->lx_lock, NULL);
	pthread_mutex_init(&sh->rt_lock, NULL);
	atomic_init(&sh->retire_s, 0);
	atomic_init(&sh->tables, 0);
	atomic_init(&sh->on_error, NULL);
	atomic_init(&sh->on_notice, NULL);
	sh->dir = un_sys_strdup(dir);
	err = sh->dir ? keys_open(sh, dir, key_file) : -ENOMEM;
	if (!err)
		err = un_syncer_start(sh);
	if (err) {
		shared_free(sh);
		return err;
	}
	*out = sh;
	return 0;
}

/* A table not yet opened, sharing SH (NULL: set by the caller). */
static struct un_state *table_new(struct un_shared *sh)
{
	struct un_state *st = un_sys_calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->sh = sh;
	pthread_mutex_init(&st->wq_lock, NULL);
	st->wq_tail = &st->wq_head;
	st->roots_fd = -1;
	randombytes_buf(&st->run, sizeof(st->run)); /* node.c: intents */
	return st;
}

/* Frees what table_open built so far (not among the syncer's tables), and
 * the shared part with a main state's table. */
static void table_free(struct un_state *st)
{
	if (st->cache)
		un_listing_cache_free(st->cache);
	un_fsyncs_free(st->fsyncs);
	if (st->roots_fd >= 0)
		un_sys_close(st->roots_fd);
	if (st->env)
		mdb_env_close(st->env);
	un_node_dones_free(st);
	pthread_mutex_destroy(&st->wq_lock);
	if (!st->main && st->sh) { /* rule 5: the shared part is the main's */
		un_retire_fini(st);
		shared_free(st->sh);
	}
	free(st->dir);
	sodium_memzero(st, sizeof(*st));
	free(st);
}

/* Opens ST's node table in DIR, which exists: the environment, its
 * databases, its listing cache and fsyncs, its place in the syncer's
 * tables, its roots. */
static int table_open(struct un_state *st, const char *dir)
{
	int err;

	st->dir = un_sys_strdup(dir);
	err = st->dir ? env_open(st, dir) : -ENOMEM;
	if (!err)
		err = tables_init(st);
	if (!err)
		err = un_listing_cache_new(st->main ? st->main->cache : NULL, &st->cache);
	if (!err)
		err = un_fsyncs_new(&st->fsyncs);
	if (err)
		return err;
	un_syncer_add(st);
	err = un_roots_open(st);
	if (err)
		un_syncer_remove(st);
	return err;
}

int un_state_open(const char *dir, struct un_state **out)
{
	return un_state_open_keyed(dir, NULL, out);
}

int un_state_open_keyed(const char *dir, const char *key_file, struct un_state **out)
{
	struct un_state *st;
	int err;

	if (sodium_init() < 0)
		return -EIO;
	st = table_new(NULL);
	if (!st)
		return -ENOMEM;
	err = shared_open(dir, key_file, &st->sh);
	if (!err)
		err = table_open(st, dir);
	if (err) {
		table_free(st);
		return err;
	}
	*out = st;
	return 0;
}

int un_state_open_table(struct un_state *main, const char *dir, struct un_state **out)
{
	struct un_state *st;
	int err;

	assert(main && !main->main); /* rule 5: tables hang off the main state */
	st = table_new(main->sh);
	if (!st)
		return -ENOMEM;
	st->main = main;
	atomic_init(&st->refs, 1);
	err = dir_make(dir);
	if (!err)
		err = table_open(st, dir);
	if (err) {
		table_free(st);
		return err;
	}
	atomic_fetch_add(&main->sh->tables, 1);
	*out = st;
	return 0;
}

/* The address of the table's map in this process: LMDB does not tell it
 * (mdb_env_info's me_mapaddr is the fixed address the file asks for, NULL),
 * so it is looked up in /proc/self/maps by data.mdb's inode, at offset 0;
 * NULL when not found. */
static void *map_find(struct un_state *st)
{
	unsigned long lo, hi, off, ino;
	unsigned maj, mnr;
	char line[512];
	struct stat sb;
	void *addr = NULL;
	FILE *f;
	int fd;

	if (mdb_env_get_fd(st->env, &fd) || fstat(fd, &sb))
		return NULL;
	f = fopen("/proc/self/maps", "re");
	if (!f)
		return NULL;
	while (!addr && fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx %*s %lx %x:%x %lu", &lo, &hi, &off, &maj, &mnr,
			   &ino) == 6 &&
		    ino == sb.st_ino && makedev(maj, mnr) == sb.st_dev && off == 0)
			addr = (void *)lo;
	fclose(f);
	return addr;
}

void un_state_map_trim(struct un_state *st)
{
	uint64_t now = un_now_ns();
	struct stat sb;
	int fd;

	if (now - st->trimmed_ns < TRIM_NS || mdb_env_get_fd(st->env, &fd) ||
	    fstat(fd, &sb) || (uint64_t)sb.st_size < st->trimmed_size + TRIM_BYTES)
		return;
	if (!st->map_addr)
		st->map_addr = map_find(st);
	st->trimmed_size = (uint64_t)sb.st_size;
	st->trimmed_ns = now;
	if (st->map_addr)
		madvise(st->map_addr, (size_t)sb.st_size, MADV_DONTNEED);
}

void un_state_table_get(struct un_state *table)
{
	assert(table->main && atomic_load(&table->refs) > 0);
	atomic_fetch_add(&table->refs, 1);
}

void un_state_close(struct un_state *st)
{
	if (!st)
		return;
	if (st->main && atomic_fetch_sub(&st->refs, 1) > 1)
		return; /* rule 6: another union still serves through it */
	/* rule 5: the tables share the main state's part, freed with it */
	assert(st->main || atomic_load(&st->sh->tables) == 0);
	un_node_dones_commit(st);
	un_syncer_remove(st);
	mdb_env_sync(st->env, 1);
	if (st->main)
		atomic_fetch_sub(&st->sh->tables, 1);
	table_free(st);
}
