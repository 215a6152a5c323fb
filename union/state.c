/* SPDX-License-Identifier: Apache-2.0 */
/* state.c - the state dir: the LMDB environment of the node table and the
 * secret key; it starts and stops the thread that makes the table durable
 * (sync.c, un_syncer_start) with them.
 *
 * Layout of DIR (mode 0700):
 *   data.mdb, lock.mdb   the LMDB environment (node.c says what is in it)
 *   secret               32 random bytes, mode 0600, written once
 *   layers/              the lower layers' indexes and each export's lower
 *                        stack (layerid.c)
 *   roots/               a link per export naming its root node (roots.c)
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
	crypto_kdf_derive_from_key(st->key_lower, sizeof(st->key_lower), KEY_ID_LOWER,
				   KDF_CONTEXT, secret);
}

/* Opens (creating) DIR and derives ST's keys from its secret, or from
 * KEY_FILE when not NULL. */
static int state_dir_open(struct un_state *st, const char *dir, const char *key_file)
{
	uint8_t secret[SECRET_BYTES];
	int dirfd, err;

	err = un_sys_mkdirat(AT_FDCWD, dir, 0700);
	if (err < 0 && err != -EEXIST)
		return err;
	dirfd = un_sys_openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY, 0);
	if (dirfd < 0)
		return dirfd;
	err = key_file ? key_read(AT_FDCWD, key_file, true, secret)
		       : secret_get(dirfd, secret);
	st->lower_ids = key_file != NULL; /* lowerid.c rule 1 */
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
	 * any worker may run any request.  MDB_NOMETASYNC: rule 2. */
	rc = mdb_env_open(
	    st->env, dir,
	    (un_sys_test_no_sync_on() ? MDB_NOSYNC : MDB_NOMETASYNC) | MDB_NOTLS, 0600);
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

/* Frees what state_open built so far (the syncer is not running). */
static void state_free(struct un_state *st)
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
	un_retire_fini(st);
	pthread_mutex_destroy(&st->rt_lock);
	pthread_mutex_destroy(&st->lx_lock);
	free(st->dir);
	sodium_memzero(st, sizeof(*st));
	free(st);
}

int un_state_open(const char *dir, struct un_state **out)
{
	return un_state_open_keyed(dir, NULL, out);
}

int un_state_open_keyed(const char *dir, const char *key_file, struct un_state **out)
{
	struct un_state *st;
	int err = -EIO;

	if (sodium_init() < 0)
		return err;
	err = -ENOMEM;
	st = un_sys_calloc(1, sizeof(*st));
	if (!st)
		return err;
	pthread_mutex_init(&st->wq_lock, NULL);
	pthread_mutex_init(&st->lx_lock, NULL);
	pthread_mutex_init(&st->rt_lock, NULL);
	atomic_init(&st->retire_s, 0);
	atomic_init(&st->on_notice, NULL);
	st->wq_tail = &st->wq_head;
	st->roots_fd = -1;
	atomic_init(&st->on_error, NULL);
	randombytes_buf(&st->run, sizeof(st->run)); /* node.c: intents */
	st->dir = un_sys_strdup(dir);
	err = st->dir ? state_dir_open(st, dir, key_file) : -ENOMEM;
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
	err = un_syncer_start(st);
	if (err)
		goto fail;
	err = un_roots_open(st);
	if (err) {
		un_syncer_stop(st);
		goto fail;
	}
	*out = st;
	return 0;
fail:
	state_free(st);
	return err;
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

void un_state_close(struct un_state *st)
{
	if (!st)
		return;
	un_node_dones_commit(st);
	un_syncer_stop(st);
	mdb_env_sync(st->env, 1);
	state_free(st);
}
