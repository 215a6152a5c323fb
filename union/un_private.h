/* SPDX-License-Identifier: Apache-2.0 */
/* un_private.h - the union engine's private header: a map of union/, grouped
 * by file.
 *
 * Layering inside the engine: sys.c is the only file that calls the kernel;
 * mdb.c maps LMDB's return codes and report.c carries the engine's reports
 * to the server, leaves that any file may call; state.c owns the state dir
 * (LMDB env, secret, derived keys), and the node tables opened beside it
 * that share its keys, and starts what lives as long as each;
 * node.c keeps the node table, and roots.c which of its nodes is each
 * export's root; layer.c opens and checks the layer stack of an export,
 * layerid.c gives its lowers their indexes (lindex.c), shared through
 * lxcache.c, and retire.c keeps the lowers a reload retired; whiteout.c
 * knows the on-disk markers (white-outs, opaque dirs, OCI names) and the
 * one merge rule; object.c holds objects and reads them; lookup.c
 * resolves names and ids to objects, through the opaque memo (opaque.c) and
 * the resolve cache (rcache.c), which share resolve.h; readdir.c builds,
 * caches and serves merged listings; read.c reads file data, copied or
 * spliced; handle.c encodes and checks file handles.  The write side:
 * copyup.c copies objects into the upper layer through temps in the work
 * dir (workdir.c, which layer.c opens); dir.c changes names (create,
 * remove, rename, link) and writes white-outs and opaque markers; write.c
 * changes attributes and data; sync.c runs the node table's flushes and
 * makes changes durable before their replies, sharing fsyncs and flushes
 * between them.
 *
 * Calls run one way only, from the write side and the readers down to the
 * node table, the layers and sys.c: no file calls a file that calls it,
 * however far round.
 *
 * A function whose comment says a lock must be held asserts it on entry
 * (un_assert_locked, un_assert_rwlocked), in builds without NDEBUG.
 *
 * Every function here returns 0 (or a count) on success and a negative errno
 * on failure, like union.h, unless its comment says otherwise.
 */
#ifndef UN_PRIVATE_H
#define UN_PRIVATE_H

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "union.h"

/* Tunables. */
#define UN_LAYERS_MAX                                                                    \
	128		/* layers per export (upper + lowers); Docker's limit is 127     \
			 */
#define UN_NAME_MAX 255 /* bytes in one name, as NAME_MAX */
/* LMDB map: address space only, the file grows as used; a build for
 * valgrind, whose address space is smaller, may set it lower. */
#ifndef UN_MAP_SIZE
#define UN_MAP_SIZE (64ull << 30)
#endif
#define UN_SYNC_PERIOD_S       1	   /* background mdb_env_sync period */
#define UN_LISTING_CACHE_BYTES (64u << 20) /* bound on the memory of cached listings */
/* A listing is cached only when every layer dir of it last changed at least
 * this long ago: a change within one timestamp tick of the build would not
 * change the version, so a listing built inside that tick could go stale
 * unnoticed.  One second covers the coarsest timestamps we expect. */
#define UN_LISTING_SETTLE_NS 1000000000ll
/* The same bound for the memo of opaque flags (opaque.c) and the resolve
 * cache (rcache.c), both keyed by ctime. */
#define UN_OPAQUE_SETTLE_NS 1000000000ll
/* ... for a ctime with nanoseconds: ten ticks of the coarsest kernel clock
 * a filesystem stamps it from (opaque.c, settle_of) */
#define UN_SETTLE_FINE_NS 100000000ll
/* Resolve cache slots per export and index (rcache.c), in buckets of
 * UN_RC_WAYS: a working set of tens of thousands of files fits.  The
 * buckets of the two indexes come in pairs, after the export in its own
 * mapping: UN_RC_BUCKETS_MIN pairs (2.5 KiB, which with the export make
 * three pages) to begin with, doubling as they fill, up to 1.25 MiB at
 * UN_RC_BUCKETS (rcache.c rule 12); entries ~100-200 bytes each. */
#define UN_RC_SLOTS	  65536
#define UN_RC_WAYS	  4
#define UN_RC_BUCKETS	  (UN_RC_SLOTS / UN_RC_WAYS)
#define UN_RC_BUCKETS_MIN 32
/* Descriptors the entries hold, all exports together, and at most a
 * quarter of RLIMIT_NOFILE (rcache.c rule 5).  A merged directory's entry
 * holds one a part: with 4096, 1,024 directories of 4 parts filled it, and
 * every GETATTR of a directory past them walked its name through every
 * layer (22 us of server CPU against 7 for a file, bench/README.md, "Merged
 * directories as cheap as plain ones").  An O_PATH descriptor costs the
 * kernel a struct file and pins its (cached) inode. */
#define UN_RC_FDS_MAX 65536

/* ---- sys.c: the syscall seam ----
 *
 * Every call into the kernel (and every allocation) of the engine goes through
 * here.  Each returns what the libc call would, except that failures return
 * -errno instead of -1 (allocators return NULL).  Tests can make the Nth call
 * of one kind fail with a chosen errno (un_sys_inject). */

enum un_sys_op {
	UN_SYS_OPEN,	  /* openat, openat2, reopen, dup */
	UN_SYS_STAT,	  /* fstatat, fstat */
	UN_SYS_XATTR,	  /* getxattr */
	UN_SYS_GETDENTS,  /* getdents64 */
	UN_SYS_READ,	  /* pread, splice */
	UN_SYS_READLINK,  /* readlinkat */
	UN_SYS_STATFS,	  /* fstatvfs */
	UN_SYS_WRITE,	  /* write */
	UN_SYS_SYNC,	  /* fsync */
	UN_SYS_MKDIR,	  /* mkdirat */
	UN_SYS_RENAME,	  /* renameat2 */
	UN_SYS_ALLOC,	  /* malloc, calloc, realloc, strdup */
	UN_SYS_MDB,	  /* LMDB transactions (node.c asks un_sys_fault) */
	UN_SYS_UNLINK,	  /* unlinkat */
	UN_SYS_MKNOD,	  /* mknodat */
	UN_SYS_SYMLINK,	  /* symlinkat */
	UN_SYS_LINK,	  /* linkat */
	UN_SYS_SETATTR,	  /* fchmodat, fchownat, utimensat */
	UN_SYS_TRUNCATE,  /* ftruncate */
	UN_SYS_SETXATTR,  /* setxattr */
	UN_SYS_LISTXATTR, /* listxattr */
	UN_SYS_CLONE,	  /* ioctl FICLONE */
	UN_SYS_COPY,	  /* copy_file_range */
	UN_SYS_SEEK,	  /* lseek SEEK_DATA / SEEK_HOLE */
	UN_SYS_LOCK,	  /* fcntl F_OFD_SETLK */
	UN_SYS_WATCH,	  /* inotify_init1, inotify_add_watch */
	UN_SYS_ANY,	  /* not a call: arms "the Nth seam call of any kind" */
	UN_SYS_NOPS
};

int un_sys_openat(int dirfd, const char *name, int flags, mode_t mode);
/* Opens the single component NAME of DIRFD without following a symlink and
 * without leaving DIRFD (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS where the
 * kernel has it, O_NOFOLLOW otherwise).  O_NOFOLLOW|O_CLOEXEC are added. */
int un_sys_open_beneath(int dirfd, const char *name, int flags);
/* Opens the object of O_PATH descriptor FD again with FLAGS (via /proc). */
int un_sys_reopen(int fd, int flags);
int un_sys_dup(int fd);
void un_sys_close(int fd);
/* NAME "" stats DIRFD itself. */
int un_sys_fstatat(int dirfd, const char *name, struct stat *st, int flags);
int un_sys_fstat(int fd, struct stat *st);
/* Reads extended attribute ATTR of NAME in DIRFD, never following a symlink
 * NAME; NAME "" reads DIRFD's own (which may be an O_PATH descriptor). */
ssize_t un_sys_getxattrat(int dirfd, const char *name, const char *attr, void *buf,
			  size_t size);
ssize_t un_sys_getdents(int fd, void *buf, size_t size);
ssize_t un_sys_pread(int fd, void *buf, size_t n, off_t off);
/* splice(2) of up to N bytes at OFF of FD into pipe PIPEFD without waiting
 * for room in it (-EAGAIN when full); counted as a read (UN_SYS_READ). */
ssize_t un_sys_splice_read(int fd, off_t off, int pipefd, size_t n);
ssize_t un_sys_readlinkat(int dirfd, const char *name, char *buf, size_t size);
int un_sys_fstatvfs(int fd, struct statvfs *out);
/* The filesystem type (statfs's f_type) of FD. */
int un_sys_fstype(int fd, long *type);
/* inotify (readdir.c's attribute cache): a non-blocking instance, a watch
 * on the directory of (O_PATH) descriptor FD (its wd), its removal, and
 * read, which gives -EAGAIN when no event is pending. */
int un_sys_inotify_init(void);
int un_sys_inotify_watch(int ifd, int fd, uint32_t mask);
/* A watch on directory NAME (one component, not followed) in DIRFD. */
int un_sys_inotify_watch_at(int ifd, int dirfd, const char *name, uint32_t mask);
void un_sys_inotify_unwatch(int ifd, int wd);
/* Reads pending events of inotify instance IFD (nonblocking). */
ssize_t un_sys_inotify_read(int ifd, void *buf, size_t n);
ssize_t un_sys_read(int fd, void *buf, size_t n);
int un_sys_mkdirat(int dirfd, const char *name, mode_t mode);
/* Writes all N bytes (retrying short writes). */
ssize_t un_sys_write(int fd, const void *buf, size_t n);
int un_sys_fsync(int fd);
int un_sys_syncfs(int fd); /* the filesystem FD is on (not O_PATH) */
int un_sys_fdatasync(int fd);
/* Writes all N bytes at OFF (retrying short writes). */
ssize_t un_sys_pwrite(int fd, const void *buf, size_t n, off_t off);
int un_sys_ftruncate(int fd, off_t len);
/* Takes an OFD write lock on all of FD (open for writing) without waiting:
 * -EAGAIN when another open file description holds one. */
int un_sys_ofd_trylock(int fd);
off_t un_sys_lseek(int fd, off_t off, int whence);
/* ioctl(DST, FICLONE, SRC): shares SRC's blocks where the filesystem can. */
int un_sys_clone(int dst, int src);
ssize_t un_sys_copy_range(int src, off_t *src_off, int dst, off_t *dst_off, size_t n);
int un_sys_mknodat(int dirfd, const char *name, mode_t mode, dev_t dev);
int un_sys_symlinkat(const char *target, int dirfd, const char *name);
/* A new name NAME in DIRFD for the object of O_PATH descriptor FD. */
int un_sys_link_fd(int fd, int dirfd, const char *name);
/* Attribute changes of the object of (O_PATH) descriptor FD itself, never
 * following a symlink.  un_sys_chmod_fd answers -EOPNOTSUPP for a symlink. */
int un_sys_chmod_fd(int fd, mode_t mode);
int un_sys_chown_fd(int fd, uid_t uid, gid_t gid);
int un_sys_utimens_fd(int fd, const struct timespec ts[2]);
/* Extended attributes of the object of (O_PATH) descriptor FD itself. */
int un_sys_fsetxattr_fd(int fd, const char *attr, const void *val, size_t size,
			int flags);
ssize_t un_sys_listxattr_fd(int fd, char *buf, size_t size);
ssize_t un_sys_getxattr_fd(int fd, const char *attr, void *buf, size_t size);
int un_sys_renameat2(int odir, const char *oname, int ndir, const char *nname,
		     unsigned flags);
int un_sys_unlinkat(int dirfd, const char *name, int flags);
/* Whether the filesystem holding PATH has no block left for this process
 * (root may use the blocks reserved for it): LMDB answers a write cut short
 * by a full disk with EIO, which this turns into the ENOSPC it was. */
bool un_sys_disk_full(const char *path);
void *un_sys_malloc(size_t n);
/* Address space of N bytes, none of it usable yet and none charged
 * (PROT_NONE); un_sys_map_use makes its first N bytes usable, zero-filled
 * where new, and un_sys_unmap gives it all back.  Counted as allocations
 * (UN_SYS_ALLOC): map NULL, use -ENOMEM when a test injects. */
void *un_sys_map_reserve(size_t n);
int un_sys_map_use(void *p, size_t n);
void un_sys_unmap(void *p, size_t n);
void *un_sys_calloc(size_t n, size_t size);
void *un_sys_realloc(void *p, size_t n);
char *un_sys_strdup(const char *s);
/* For seams that are not syscalls (LMDB): 0, or the errno the caller is to
 * fail with because a test injected it. */
int un_sys_fault(enum un_sys_op op);
#define UN_SYS_KILL (-1)

/* Test hooks: the NTH call of OP from now on (1 = the next) fails with ERR
 * (UN_SYS_KILL: the process is killed with SIGKILL before that call, a
 * crash between two steps); NTH 0 disarms OP.  un_sys_calls counts the calls of OP since
 * the last un_sys_inject_reset.  The seam does nothing, and counts nothing, until the
 * first un_sys_inject or un_sys_inject_reset of the process. */
void un_sys_inject(enum un_sys_op op, unsigned long nth, int err);
void un_sys_inject_reset(void);
unsigned long un_sys_calls(enum un_sys_op op);
/* Test hook: use plain openat with O_NOFOLLOW as on kernels without openat2. */
void un_sys_test_no_openat2(bool on);
/* Test hook: read xattrs through /proc only, as on kernels without getxattrat. */
void un_sys_test_no_getxattrat(bool on);
/* Whether un_state_test_no_sync switched the node table's flushes off
 * (state.c asks when it opens a state, sync.c when it flushes). */
bool un_sys_test_no_sync_on(void);
/* Test hook: FN (NULL: none) is called on the calling thread just before
 * each fsync of un_sys_fsync (BEGIN true) and just after it (false), so a
 * test can see which fsyncs began after a change, and hold one; an errno
 * it returns before an fsync fails that fsync instead (after: ignored). */
void un_sys_test_fsync_hook(int (*fn)(int fd, bool begin));

/* Filesystem identity of the calling thread.  Requests may run with a
 * client's fsuid/fsgid; the engine's own work (copy-up, white-outs, the work
 * dir) runs with the server's: un_sys_creds_override switches the calling
 * thread to the process's effective ids and saves the previous ones,
 * un_sys_creds_revert restores them.  Raw syscalls: the libc wrappers would
 * change every thread. */
struct un_creds {
	uid_t fsuid;
	gid_t fsgid;
};
void un_sys_creds_override(struct un_creds *saved);
void un_sys_creds_revert(const struct un_creds *saved);
/* The calling thread's fsuid/fsgid, unchanged. */
void un_sys_creds_current(struct un_creds *out);
/* True if the calling thread's fsgid or a supplementary group is GID. */
bool un_sys_in_group(gid_t gid);

/* ---- sync.c: run series (group commit) ---- */

/* Numbered runs of one job (an fsync, a flush), one at a time, shared by
 * the callers that wait for them: sync.c's design notes. */
struct un_seq {
	pthread_mutex_t lock;	  /* taken to start a run */
	_Atomic uint64_t started; /* runs begun so far */
	atomic_bool running;	  /* a run is under way */
	_Atomic uint32_t ended;	  /* runs ended (mod 2^32): a futex word */
	_Atomic uint64_t failed;  /* number of the last run that failed, or 0 */
	atomic_int err;		  /* its error */
	atomic_uint sleepers;	  /* waiters in (or entering) a futex wait */
};
void un_seq_init(struct un_seq *s);
void un_seq_destroy(struct un_seq *s);
/* The number of the first run to begin after now. */
uint64_t un_seq_ticket(struct un_seq *s);
/* Returns once run TICKET or a later one has ended, with 0 or the error of
 * a failed run numbered at least TICKET; runs the next run (RUN(ARG)) on the
 * calling thread when none is under way. */
int un_seq_wait(struct un_seq *s, uint64_t ticket, int (*run)(void *), void *arg);

/* ---- stats.c: counters (union.h, struct un_stats) ---- */

/* Events that cost a system call or more: shared, one atomic add each
 * (stats.c, note 1). */
struct un_counters {
	_Atomic uint64_t commits, commit_ns, flushes, flush_ns, fsyncs, fsync_ns;
	_Atomic uint64_t copyups, copyup_bytes, copyup_ns;
};
void un_count_add(_Atomic uint64_t *c, uint64_t n);
/* One more in COUNT and the time since SINCE (un_now_ns) in NS. */
void un_count_timed(_Atomic uint64_t *count, _Atomic uint64_t *ns, uint64_t since);
uint64_t un_now_ns(void); /* CLOCK_MONOTONIC */
/* Look-ups of every call: per thread (stats.c, note 2). */
void un_count_rcache(bool hit);
void un_count_listing(bool hit);

/* ---- state.c: the state dir ---- */

struct un_listing_cache; /* readdir.c */
struct un_dirmemo;	 /* watch.c */
struct un_filememo;	 /* watch.c */
struct un_change;	 /* sync.c */

/* What every node table of a server shares (state.c rule 5 says why each
 * part is here and not in a table): made and freed by the main state, the
 * one un_state_open made; a table un_state_open_table opened points at it. */
struct un_shared {
	char *dir; /* the main state dir: layers/ (layerid.c) and secret */
	/* Keys derived from the secret file, one per purpose (state.c). */
	uint8_t key_handle[32];	 /* handle MAC (generichash) */
	uint8_t key_cookie[16];	 /* readdir cookies (siphash) */
	uint8_t key_verf[16];	 /* cookie verifier MAC (siphash) */
	uint8_t key_version[16]; /* directory version hash (siphash) */
	uint8_t key_lower[16];	 /* lower ids' tags (lowerid.c; siphash) */
	bool lower_ids;		 /* opened with a key file (lowerid.c rule 1) */
	/* node.c: a lower id was found held by another export's node (tags
	 * of two exports collide), said once */
	atomic_bool lower_clash_said;
	/* The tables opened from the main state and not yet closed: the main
	 * state is closed only once they all are (un_state_close asserts). */
	atomic_uint tables;
	_Atomic(un_state_error_fn *) on_error;	 /* un_state_on_error, or NULL */
	_Atomic(un_state_notice_fn *) on_notice; /* un_state_on_notice, or NULL */
	/* lxcache.c: the open layer indexes, shared by the exports */
	pthread_mutex_t lx_lock;
	struct un_lxc *lx_open;
	struct un_counters counters; /* stats.c */
	/* retire.c: the ids of the exports opened since the start (sorted),
	 * the retired lower layers of those that have any, and how long they
	 * are kept (seconds, 0: until exit) */
	pthread_mutex_t rt_lock;
	uint32_t *rt_seen;
	size_t rt_nseen, rt_capseen;
	struct un_rt_export *rt_exports;
	_Atomic int64_t retire_s;
	/* sync.c: the one syncer thread, which flushes every table of the
	 * server in turn (sync.c rule 5) */
	pthread_t syncer;
	bool syncer_on;		      /* started (un_syncer_start) */
	pthread_mutex_t sync_lock;    /* guards the fields below and the */
	pthread_cond_t sync_cond;     /* tables' sync_* and kicked; wakes it */
	pthread_cond_t sync_done;     /* sync_busy went back to NULL */
	bool sync_stopping;	      /* un_syncer_stop */
	struct un_state *sync_tables; /* the open tables (sync_next) */
	struct un_state *sync_busy;   /* the table it flushes now, or NULL */
};

/* One node table, and the part every table of the server shares (SH). */
struct un_state {
	struct un_shared *sh;  /* the main state's; its own when MAIN is NULL */
	struct un_state *main; /* the state this table was opened from, or NULL */
	MDB_env *env;
	MDB_dbi db_meta, db_nodes, db_names, db_links, db_groups, db_parted, db_aliases,
	    db_intents; /* node.c */
	/* node.c: this process's run, in the intents it writes: an intent of
	 * another run is a leftover of a crash, one of this run may be a
	 * change still under way (intent.c) */
	uint64_t run;
	_Atomic uint64_t intent_seq; /* node.c: the last intent's number */
	bool node_adopted;	     /* node.c's writer: a batch adopted an intent */
	/* readdir.c: listings are keyed by this table's node ids and remember
	 * its nodes (state.c rule 5) */
	struct un_listing_cache *cache;
	/* node.c: grows after every commit that may change the node an existing
	 * name maps to (all but un_node_assign's); readdir.c trusts the nodes a
	 * listing remembers only while it stands still */
	_Atomic uint64_t node_epoch;
	/* node.c: the jobs that may change such a name (all but
	 * un_node_assign's) queued and not yet ended; while there are any, the
	 * table may still say what the layers no longer do, and a read alone
	 * does not decide (node.c invariant 13) */
	_Atomic uint64_t node_pending;
	/* node.c's writer: the write transactions queued (un_node_job), run
	 * as one batch a commit by one of the threads waiting for them */
	pthread_mutex_t wq_lock;
	struct un_node_job *wq_head, **wq_tail;
	bool wq_running; /* a thread runs a batch, or was handed the turn */
	/* node.c: intents whose changes are durable, deleted by the next batch
	 * (un_node_intent_done; under wq_lock) */
	struct un_intent_done *intents_done;
	/* node.c: lookups' nodes queued and answered ahead of their commit
	 * (invariant 16), not yet run */
	atomic_uint ahead;

	/* sync.c: the table's place among the syncer's (sh->sync_lock) */
	struct un_state *sync_next, *sync_prev;
	bool kicked;	      /* flush now (un_state_sync_kick) */
	uint64_t sync_due_ns; /* its next flush by the period (un_now_ns) */
	uint64_t sync_began;  /* when the syncer last chose it: who waited most */
	/* sync.c: top-level commits made (node.c's writer), and their count
	 * when the last flush that succeeded began: a table whose two agree is
	 * whole on disk, and the syncer's period leaves it alone */
	_Atomic uint64_t commits, flushed;
	uint64_t trimmed_size;	  /* state.c: the table's size at the last trim, */
	uint64_t trimmed_ns;	  /* and its time (un_now_ns) */
	void *map_addr;		  /* state.c: the table's map (NULL: not found) */
	struct un_seq flushes;	  /* the table's flushes (group commit) */
	struct un_fsyncs *fsyncs; /* sync.c: fsyncs of upper inodes, shared */
	char *dir;		  /* the table's dir, for the reports (report.c) */
	int roots_fd;		  /* roots.c: the roots dir, or -1 */
	/* state.c rule 6: the unions that hold a table opened from the main
	 * state (un_state_table_get); it closes with the last */
	atomic_uint refs;
};

/* ---- mdb.c: LMDB's return codes ---- */

/* Maps an LMDB return code to 0 or -errno. */
int un_mdb_err(int rc);

/* ---- report.c: what the engine tells the server ---- */

/* Tells the un_state_on_error function that the table failed (ERR < 0). */
void un_state_failed(struct un_state *st, int err, const char *what);
/* One line for the un_state_on_notice function, if any. */
void un_notice(struct un_state *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- node.c: the node table ---- */

struct un_devino {
	uint64_t dev, ino;
};

/* How the names of a non-directory with several links map to nodes
 * (node.c's design notes say why; un_links_of decides). */
enum un_links {
	UN_LINKS_NONE,	 /* one link, or a directory: a node per name */
	UN_LINKS_SHARED, /* one node for all names: read-only union, upper layer */
	UN_LINKS_GROUP,	 /* a lower file in a writable union: a node per name,
			  * one fileid for all until a copy-up parts them */
};

/* What a lookup (or a readdir) saw of one name: the input of the table. */
struct un_node_obs {
	un_id root; /* the export's root (UN_ID_NONE for the root itself) */
	un_id parent;
	const char *name;
	size_t namelen;
	mode_t type;		      /* S_IFMT bits */
	const struct un_devino *inst; /* layer instances, top-most first (>= 1) */
	/* The raw (st_dev, st_ino) of each of INST (NULL: INST are raw): a
	 * record written before the layer indexes holds those (node.c). */
	const struct un_devino *raw;
	size_t ninst;
	enum un_links links;
	bool pinned; /* an export root: never "replaced" */
	/* The export whose layers' tags make lower ids (lowerid.c); NULL:
	 * the object takes a counter id. */
	const struct un_export *ex;
	/* UN_LINKS_GROUP: the objnum of this name's own path in the top
	 * instance's index (un_layer_pathnum), 0 when unknown. */
	uint64_t pathnum;
};

/* One step of the path from an export root to a node. */
struct un_node_hop {
	un_id id, parent;
	mode_t type;
	struct un_devino di;
	uint16_t namelen;
	char name[UN_NAME_MAX + 1];
	un_id fileid; /* what getattr reports (node.c's design notes) */
};

/* Opens (creating) the named databases in TXN, a write transaction. */
int un_node_init(struct un_state *st, MDB_txn *txn);
/* The node ids (IDS[i]) and fileids (FILEIDS[i]; either array may be NULL)
 * of the objects OBS[0..n-1] describe, assigning a node where a name is new
 * or its object was replaced, with at most one write transaction, committed
 * before the call returns. */
int un_node_assign(struct un_state *st, const struct un_node_obs *obs, size_t n,
		   un_id *ids, un_id *fileids);
/* Export roots (roots.c).  A new root is named UN_ROOT_NAME_FMT with its
 * own id; roots of older tables "export:" and 8 hex digits of the export id
 * (UN_LEGACY_ROOT_LEN bytes). */
#define UN_ROOT_NAME_FMT   "root:%016" PRIx64
#define UN_LEGACY_ROOT_LEN 15
/* Creates a root node with OBS's type and instances (its name and parents
 * are the root's own), with the id PREFER when that is not UN_ID_NONE and
 * free, committed before the call returns. */
int un_node_root_create(struct un_state *st, const struct un_node_obs *obs, un_id prefer,
			un_id *id);
typedef int un_node_root_fn(void *arg, uint32_t export_id, un_id root);
/* Calls FN for each root named after its export id, in a read transaction;
 * 1 without calling it when the table is marked as having none to link,
 * else 0 or FN's first error. */
int un_node_roots_legacy(struct un_state *st, un_node_root_fn *fn, void *arg);
/* Marks the table: its roots are all linked. */
int un_node_roots_mark(struct un_state *st);
/* un_node_assign's node id of one object, and of a batch. */
int un_node_get_or_create(struct un_state *st, const struct un_node_obs *obs, un_id *out);
int un_node_ids_batch(struct un_state *st, const struct un_node_obs *obs, size_t n,
		      un_id *ids);
/* The hops from the export root down to ID, root first: *out (caller frees)
 * gets *n hops.  -ESTALE when ID or an ancestor is unknown. */
int un_node_path(struct un_state *st, un_id id, struct un_node_hop **out, size_t *n);

/* One name of a node: a directory's id and a name in it. */
struct un_node_name {
	un_id parent;
	const char *name;
	size_t len;
};

/* The object of node ID now has TOP as its top-most layer instance (after a
 * copy-up); ORIGIN (NULL: none) is the instance it was copied from.  The
 * record matches an observation of either from now on.  NM (NULL: keep)
 * becomes the record's name. */
int un_node_set_inst(struct un_state *st, un_id id, struct un_devino top,
		     const struct un_devino *origin, const struct un_node_name *nm);
/* A copy-up of one name of a lower file with several links (inode LOWER of
 * the export whose root is ROOT) has made that name a file of its own, as
 * overlayfs without its index does: node ID keeps its fileid and forgets
 * its origin; the other names of LOWER get new nodes and a new fileid. */
int un_node_part(struct un_state *st, un_id root, un_id id, struct un_devino lower);
/* Node ID was renamed from FROM to TO: TO names ID, FROM nothing; a node TO
 * named before is forgotten as by un_node_remove.  The records below ID are
 * untouched (they name ID as their parent). */
int un_node_rename(struct un_state *st, un_id id, const struct un_node_name *from,
		   const struct un_node_name *to);
/* ---- node.c: intents, written before a change on disk (intent.c) ---- */

enum un_intent_kind {
	UN_INTENT_RENAME = 1, /* the node moves from one name to another */
	UN_INTENT_LINK = 2,   /* the node gets a second name */
	UN_INTENT_REMOVE = 3, /* one of the node's several names goes */
};
/* Before a RENAME (FROM given) or a LINK (FROM NULL) changes the disk: TO
 * is about to name node ID of the export whose root is ROOT.  Committed
 * when this returns (durable once the table is flushed), so a crash after
 * the change on disk and before its job leaves the intent, and the name TO
 * is adopted by ID once a lookup finds ID's object there (un_node_assign,
 * and intent.c at the next start): the node id of a live object never
 * changes because the table lagged the disk.  *SEQ gets the intent's
 * number, for un_node_intent_done. */
int un_node_intent(struct un_state *st, enum un_intent_kind kind, un_id root, un_id id,
		   const struct un_node_name *from, const struct un_node_name *to,
		   uint64_t *seq);
/* One intent as un_node_intents lists it. */
struct un_node_intent_ref {
	enum un_intent_kind kind;
	un_id id, parent; /* the node and the directory of the name TO */
	uint16_t len;
	char name[UN_NAME_MAX + 1];
	uint64_t run, seq; /* the run that wrote it, and its number there */
	bool this_run;
};
/* Takes back, if the table holds it, the change of REF (an intent of an
 * earlier run): a rename's move, a link's name, a removal's forgetting
 * (node.c invariant 15).  The intent stays, for the lookup that re-applies
 * the change if the disk has it (intent.c). */
int un_node_intent_undo(struct un_state *st, const struct un_node_intent_ref *ref);
/* The intents of the export whose root is ROOT (of node ID only, unless ID
 * is UN_ID_NONE): *out (caller frees) gets *n of them. */
int un_node_intents(struct un_state *st, un_id root, un_id id,
		    struct un_node_intent_ref **out, size_t *n);
/* Applies the intent REF if the table still holds it, as the disk shows
 * it: PRESENT, a lookup found its node's object at its name by another way
 * than the name's own entry (a name of an inode with several links matches
 * by its inode), so no lookup adopted it: the rename or link happened, and
 * of a removal that carries the rename before it only that rename; else
 * the name is gone: the removal happened.  1 when it was applied, 0 when
 * there was nothing to apply, or -errno. */
int un_node_intent_apply(struct un_state *st, const struct un_node_intent_ref *ref,
			 bool present);
/* Deletes the intent of TO if it is still number SEQ of run RUN: its
 * change did not happen, or a settle decided it. */
int un_node_intent_del(struct un_state *st, const struct un_node_name *to, uint64_t run,
		       uint64_t seq);
/* The change of intent SEQ of this run, of name TO, is durable: the intent
 * goes with the next batch of the writer (node.c invariant 15). */
void un_node_intent_done(struct un_state *st, const struct un_node_name *to,
			 uint64_t seq);
/* An intent list of un_node_intent_done awaiting a batch. */
struct un_intent_done {
	struct un_intent_done *next;
	uint64_t seq;
	un_id parent;
	uint16_t len;
	char name[UN_NAME_MAX];
};
/* Commits the jobs queued ahead (node.c invariant 16), if any: they name
 * their export, which closes only after them. */
void un_node_ahead_commit(struct un_state *st);
/* Commits the deletions un_node_intent_done queued (at a clean close). */
void un_node_dones_commit(struct un_state *st);
/* Frees the intents_done list of ST (what it lists stays in the table for
 * the next start to settle). */
void un_node_dones_free(struct un_state *st);

/* A write of the table queued in the order of the caller's change and
 * waited for once the caller's locks are dropped, so that the changes of one
 * directory commit together (node.c, the writer).  The fields are node.c's;
 * the caller owns the memory until un_node_job_wait returns. */
struct un_node_job {
	int (*fn)(struct un_state *st, MDB_txn *txn, struct un_node_job *job);
	int (*call)(struct un_state *st, MDB_txn *txn, const void *arg);
	const void *arg;
	struct un_node_obs obs; /* un_node_assign_queue's */
	struct un_devino di;
	un_id id, fileid;	      /* un_node_assign_queue's answer */
	un_id root;		      /* un_node_link_queue's, _remove_queue's */
	uint64_t seq;		      /* un_node_remove_queue's intent number */
	struct un_node_name from, to; /* un_node_rename_queue's, _link_queue's,
					 _remove_queue's */
	struct un_node_job *next;
	int err;
	bool bump;
	uint64_t flush;	   /* the first flush to begin after its commit */
	bool taken;	   /* in a batch (node.c, under st->wq_lock) */
	bool ahead;	   /* nobody waits: the batch frees it (invariant 16) */
	bool waiting;	   /* its owner waits for it (node.c, under st->wq_lock) */
	_Atomic int state; /* node.c: queued (its owner asleep or not), its batch's
			      runner, done */
};
/* un_node_assign of one object OBS (one instance) as a queued job: OBS is
 * copied, its name must stay valid until the wait; JOB's id and fileid
 * are the answer once un_node_job_wait returned 0. */
void un_node_assign_queue(struct un_state *st, const struct un_node_obs *obs,
			  struct un_node_job *job);
/* A rename's and a link's writes as queued jobs: the names' bytes must
 * stay valid until the wait. */
void un_node_rename_queue(struct un_state *st, un_id id, const struct un_node_name *from,
			  const struct un_node_name *to, struct un_node_job *job);
void un_node_link_queue(struct un_state *st, un_id root, un_id id,
			const struct un_node_name *nm, struct un_devino di,
			struct un_node_job *job);
/* The node names(NM) maps to, read in a read transaction: 0, -ENOENT, or
 * -errno. */
int un_node_name_id(struct un_state *st, const struct un_node_name *nm, un_id *id);
/* One object of an upper layer that a reset discards (reset.c): its name,
 * its raw (dev, ino), and for a directory that merges a lower one, that
 * one's raw (dev, ino) (0 0: none). */
struct un_node_upper {
	un_id parent;
	const char *name;
	size_t len;
	struct un_devino raw, lower;
};
/* Forgets, in one write transaction, the nodes of those of UP[0..n-1] whose
 * record is the upper object's own (made there, never copied up): their
 * handles are stale from then on, whatever a new upper holds later under
 * their names or inode numbers.  A merged directory's node that was first
 * seen with its upper part keeps its node, with the lower one as its
 * origin.  *FORGOT gets how many nodes were forgotten. */
int un_node_forget_upper(struct un_state *st, const struct un_node_upper *up, size_t n,
			 size_t *forgot);
/* un_node_remove of NM (which must stay valid until the wait) as a job;
 * JOB's seq is its intent's number. */
void un_node_remove_queue(struct un_state *st, un_id root, const struct un_node_name *nm,
			  struct un_node_job *job);
/* Returns once JOB's batch has committed, with JOB's result; runs a batch
 * itself when none is running. */
int un_node_job_wait(struct un_state *st, struct un_node_job *job);
/* Runs the queued jobs as one batch, unless a batch is under way or none
 * is queued: a sync run's (sync.c), so that the changes it serves find
 * their jobs committed when they wake and sleep once, not twice. */
void un_node_jobs_drain(struct un_state *st);
/* NM was removed: it names nothing; its node is forgotten (un_resolve
 * answers -ESTALE for it from now on, whatever appears under NM later),
 * unless the node keeps another name that LINK recorded.  A REMOVE intent
 * of NM (number *SEQ) keeps the node's record until the removal is
 * durable (un_node_intent_done).  ROOT: the export's. */
int un_node_remove(struct un_state *st, un_id root, const struct un_node_name *nm,
		   uint64_t *seq);
/* Before NM is removed from the disk (or renamed over): when NM's node
 * has another name that LINK recorded, its record moves to the other name
 * if it holds NM, and with INTENT a REMOVE intent of NM is written, in one
 * commit (node.c invariant 14): a crash between the removal and
 * un_node_remove leaves the node's handle resolving, and the name gone
 * from its aliases once the intent is settled.  ROOT: the export's.  1
 * when it wrote (to be made durable before the disk changes), 0 when
 * there was nothing to do. */
int un_node_remove_ahead(struct un_state *st, un_id root, const struct un_node_name *nm,
			 bool intent);

/* ---- lowerid.c: node ids computed from the layer index ---- */

/* True for an id with the lower bit set (never a counter id). */
bool un_id_is_lower(un_id id);
/* The lower id the object OBS describes takes when it is first recorded
 * (rules 1, 2, 6, 7), or UN_ID_NONE for a counter id. */
un_id un_lower_id_of(const struct un_node_obs *obs);
/* The fileid of the names of OBS's lower inode in a writable union (OBS's
 * links UN_LINKS_GROUP): its link leader's lower id (rule 7), or
 * UN_ID_NONE. */
un_id un_lower_fileid_of(const struct un_node_obs *obs);
/* Gives EX's lower layers their tags, after its root id is known, and
 * logs a layer whose tag a layer below it holds (rule 6). */
void un_lower_tags(struct un_export *ex);
/* Test hook: narrow the tags to BITS bits (24 = normal), so that tags
 * collide. */
void un_lower_test_tag_bits(unsigned bits);
/* The lower id of EX's root (rule 3), or UN_ID_NONE. */
un_id un_lower_root_id(const struct un_export *ex);
/* The path from EX's root ("a/b/c"; "" for the root; malloc'd into *OUT)
 * that lower id ID names in its layer's index (rule 5); -ESTALE for an id
 * of no layer of EX or an objnum its index does not know. */
int un_lower_path(const struct un_export *ex, un_id id, char **out);

/* ---- roots.c: export roots ---- */

/* Opens (making) the state dir's roots dir and links the roots of an older
 * table (roots.c rule 3); the syncer must be running. */
int un_roots_open(struct un_state *st);
/* The root node of export EXPORT_ID into *OUT, made from OBS (its type and
 * instances) when the export has none, with the id PREFER when that is not
 * UN_ID_NONE and no node holds it yet, durable before the call returns. */
int un_root_get(struct un_state *st, uint32_t export_id, const struct un_node_obs *obs,
		un_id prefer, un_id *out);
/* True when ST links a root for export EXPORT_ID: the export was opened on
 * ST before (workdir.c rule 4 asks it of the main state). */
bool un_root_known(const struct un_state *st, uint32_t export_id);

/* ---- layer.c: exports and their layer stacks ---- */

struct un_lxc; /* lxcache.c: one open layer index */

struct un_layer {
	int fd; /* O_PATH root of the layer */
	bool lower;
	struct un_devino di;
	char *dir;	    /* as configured, for messages */
	struct un_lxc *lxc; /* a lower's index (layerid.c), or NULL */
	uint64_t key_dev;   /* the dev of its keys: UN_KEY_DEV | lineage */
	/* lowerid.c rule 6: the tag of its lower ids in this export (set by
	 * un_lower_tags for a lower with an index, on a keyed state), and
	 * whether its objects take them: no layer below shares the tag */
	uint32_t tag;
	bool tagged;
};

/* ---- lxcache.c: the open layer indexes of a state ---- */

struct un_lx; /* lindex.h */

/* With ST->lx_lock held: the open index of FILE whose layer root is inode
 * ROOT_INO, with a reference of the caller's, or NULL. */
struct un_lxc *un_lxc_find(struct un_state *st, const char *file, uint64_t root_ino);
/* With ST->lx_lock held: the open index of FILE, whatever its root, without
 * a reference (valid while the lock is held), or NULL. */
struct un_lx *un_lxc_file(struct un_state *st, const char *file);
/* With ST->lx_lock held: adds LX (ownership moves, closed on failure) as
 * FILE's open index, into *OUT with the caller's reference. */
int un_lxc_add(struct un_state *st, const char *file, struct un_lx *lx,
	       struct un_lxc **out);
/* The index FILE of the layer whose root is inode ROOT_INO, open already or
 * opened now, with a reference of the caller's (for a retired layer):
 * -ESTALE when FILE was built on another root. */
int un_lxc_get(struct un_state *st, const char *file, uint64_t root_ino,
	       struct un_lxc **out);
/* Releases a reference; the last one closes the index. */
void un_lxc_put(struct un_state *st, struct un_lxc *c);
/* The index an entry holds. */
struct un_lx *un_lxc_lx(const struct un_lxc *c);

/* ---- layerid.c: the identity of lower objects ---- */

/* The dev of a key; no real st_dev is that large (layerid.c rule 6). */
#define UN_KEY_DEV 0xffff000000000000ull

/* True when DI is a key (un_layer_key found it in a layer's index), not a
 * raw (st_dev, st_ino). */
static inline bool un_devino_is_key(struct un_devino di)
{
	return (di.dev & UN_KEY_DEV) == UN_KEY_DEV;
}

/* Finds or builds the index of every lower layer of EX (layerid.c's
 * rules), unless the export was opened without; ERR as un_export_open.
 * BEST_EFFORT (rule 7): an index that cannot be had leaves EX known by
 * inode numbers, said through the notice callback, and returns 0.
 * DEFER: the stack record and the retiring are left in EX->pending for
 * un_stack_commit (rule 5), else done before it returns. */
int un_layers_index(struct un_export *ex, bool best_effort, bool defer, char *err,
		    size_t errlen);
/* Releases EX's indexes (and a commit still pending). */
void un_layers_unindex(struct un_export *ex);
/* The identity of the instance ST of layer LAYER of EX in the node table
 * into *OUT: its index key, or the raw (st_dev, st_ino) (layerid.c rule
 * 6).  0, or -errno when the index cannot be read (never a raw pair in
 * place of a key: that would take the object for another). */
int un_layer_key(const struct un_export *ex, uint16_t layer, const struct stat *st,
		 struct un_devino *out);
/* The objnum of the path NAME (LEN bytes) of directory DIRFD, the instance
 * in layer LAYER of EX of a directory, when that path is a name of the
 * inode whose key is KEY (a link leader's): its own objnum, not the
 * leader's (lowerid.c rule 7).  0 when EX computes no lower ids or the
 * index does not know the path as such. */
uint64_t un_layer_pathnum(const struct un_export *ex, uint16_t layer, int dirfd,
			  const char *name, size_t len, struct un_devino key);

/* ---- retire.c: retired lower layers ---- */

/* Whether export ID was opened before in this process (a reload), noting
 * that it has been: only a reload retires (retire.c rule 2). */
bool un_retire_seen(struct un_state *st, uint32_t id);
/* Layer PATH (O_PATH root ROOTFD, stat ROOT; index C whose keys have dev
 * KEY_DEV) left the lower stack of export ID (path EXPATH, for the log),
 * replaced by BY (NULL: removed): it is retired, taking ROOTFD and the
 * reference to C. */
void un_retire_add(struct un_state *st, uint32_t id, const char *expath, const char *path,
		   int rootfd, const struct stat *root, struct un_lxc *c,
		   uint64_t key_dev, const char *by);
/* Node ID of EX as its retired layers hold it, when the walk found it
 * gone or replaced (retire.c rule 3): -ESTALE when none does. */
int un_retire_resolve(struct un_export *ex, un_id id, struct un_obj **out);
/* Releases every retired layer of ST (un_state_close). */
void un_retire_fini(struct un_state *st);

#define UN_LOCK_STRIPES 64 /* per-export lock stripes, keyed by node id */

/* Asserts that a lock a function requires is held, by some thread: the
 * trylock finds it busy.  Cheap enough for the functions whose contract says
 * "with X held"; compiled out under NDEBUG (RelWithDebInfo, Release). */
#ifdef NDEBUG
#define un_assert_locked(m)   ((void)sizeof(m))
#define un_assert_rwlocked(l) ((void)sizeof(l))
#else
static inline void un_assert_locked(pthread_mutex_t *m)
{
	int r = pthread_mutex_trylock(m);

	if (r == 0)
		pthread_mutex_unlock(m);
	assert(r == EBUSY);
}

/* Held for reading or for writing. */
static inline void un_assert_rwlocked(pthread_rwlock_t *l)
{
	int r = pthread_rwlock_trywrlock(l);

	if (r == 0)
		pthread_rwlock_unlock(l);
	assert(r == EBUSY);
}
#endif

/* The lock stripe of node ID (a multiplicative hash: ids are sequential). */
static inline size_t un_stripe(un_id id)
{
	_Static_assert(UN_LOCK_STRIPES == 64, "the stripe is the top 6 bits");
	return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 58);
}

/* The resolve cache of an export (rcache.c): two indexes, whose buckets
 * come in pairs (one of each) after the export in the export's own mapping,
 * UN_RC_BUCKETS pairs of it reserved and the first NB usable, which grows as
 * they fill (rule 12); and what its entries hold (rule 13). */
struct un_rc_slot {
	_Atomic bool busy; /* try-lock of the bucket */
	uint8_t next;	   /* the way the next new key replaces */
	struct un_rc_entry *e[UN_RC_WAYS];
};
struct un_rc_pair {
	struct un_rc_slot id, name;
};
struct un_rc_table {
	atomic_size_t used; /* ways holding an entry */
	bool by_name;	    /* the name index (rule 7), else the id index */
};
struct un_rc {
	struct un_rc_pair *pairs; /* after the export, in its mapping */
	_Atomic size_t nb;	  /* pairs usable: a power of 2 */
	atomic_bool growing;	  /* a thread is doubling NB */
	struct un_rc_table id, name;
	atomic_size_t bytes; /* of the entries in its slots, each counted once */
	size_t budget;	     /* bound on them and the buckets' bytes; 0: none */
};

struct un_export {
	struct un_state *st;
	char *path;
	uint32_t id;
	un_id root_id;
	const char *xattr_prefix; /* namespace our own markers are written in */
	int workfd;		  /* -1 when read-only */
	int tmpfd;		  /* O_PATH of WORKDIR/work: temps live here (copyup.c) */
	int lockfd;		  /* WORKDIR's lock (workdir.c rule 3), or -1 */
	/* the union's own table (workdir.c rule 4), which EX->st then is,
	 * a reference of its own (un_state_table_get); NULL: none */
	struct un_state *table;
	bool dirsync_orders;  /* a dir's fsync carries new inodes (sync.c) */
	bool lower_ids;	      /* computes lower ids (lowerid.c rule 1) */
	atomic_bool wh_xattr; /* write white-outs in the xattr form (dir.c) */
	atomic_bool gone;     /* its upper or work dir was removed (reset.c) */
	/* What opening its indexes leaves to do: its stack record and the
	 * retiring of the layers that left it (layerid.c rule 5), or NULL. */
	struct un_stack_commit *pending;
	size_t nlayers;
	struct un_layer
	    *layers; /* upper (when writable) first, then lowers top-most first */
	/* Copy-up of one object at a time (copyup.c); changes of the names in
	 * one directory at a time (dir.c).  Separate tables: a copy-up runs
	 * under a directory lock, never the other way round. */
	pthread_mutex_t cu_locks[UN_LOCK_STRIPES];
	pthread_rwlock_t ns_locks[UN_LOCK_STRIPES]; /* shared: name_locks */
	/* One name of a directory that merges nothing, for a create or a
	 * remove there, under its directory's stripe held shared (dir.c). */
	pthread_mutex_t name_locks[UN_LOCK_STRIPES];
	pthread_mutex_t rename_lock; /* cross-directory renames, as the VFS's */
	/* The root object walks share, and objects a walk resolved, by node
	 * id and by (parent, name), the latter with names found absent too
	 * (rcache.c). */
	_Atomic(struct un_obj *) rc_root;
	struct un_rc rc;
};

/* ---- whiteout.c: on-disk markers and the merge rule ---- */

#define UN_OCI_WH     ".wh."
#define UN_OCI_WH_LEN 4
#define UN_OCI_OPQ    ".wh..wh..opq"

/* What one layer holds under a name. */
enum un_seen {
	UN_SEEN_NONE,	  /* nothing */
	UN_SEEN_WHITEOUT, /* a white-out (either form, or OCI .wh.NAME) */
	UN_SEEN_DIR,	  /* a directory */
	UN_SEEN_OTHER,	  /* any other object */
};

/* The merge of one name across layers, top-most first (STYLE item 6). */
struct un_merge {
	unsigned nfound; /* instances kept so far */
	bool is_dir;	 /* the kept instances are directories */
	bool stop;	 /* no lower layer can add anything */
};

/* Folds what the next layer holds into M.  Returns true if that layer's
 * instance joins the result.  The caller then sets M->stop if a kept directory
 * is opaque. */
bool un_merge_step(struct un_merge *m, enum un_seen seen);
/* True for names that are layer-private in a lower layer (".wh." prefix). */
bool un_name_private(const char *name, size_t len);
/* Classifies the object ST of NAME in DIRFD (NAME "" : DIRFD is the object):
 * a white-out is a 0:0 character device or an empty regular file carrying an
 * overlay.whiteout xattr (trusted. or user.).  Returns the seen kind or -errno. */
int un_whiteout_classify(int dirfd, const char *name, const struct stat *st);
/* 1 if lower layer dir DIRFD holds the OCI white-out ".wh.NAME", 0 if not. */
int un_oci_whiteout_exists(int dirfd, const char *name, size_t len);
/* 1 if directory DIR (named NAME in PARENT) hides the layers below it:
 * overlay.opaque "y" (trusted. or user.; "x" only marks xattr white-outs) or,
 * in a lower layer, the OCI marker ".wh..wh..opq" inside or ".wh.NAME" beside. */
int un_dir_opaque(int dir, int parent, const char *name, size_t len, bool lower);
/* The part of un_dir_opaque that DIR itself carries (its xattr, and in a
 * lower layer the ".wh..wh..opq" inside): what DIR's ctime covers. */
int un_dir_opaque_own(int dir, bool lower);
/* ---- opaque.c: the opaque memo ---- */

/* Test hook: how long a directory must be unchanged before its opaque flag
 * or a resolved object is remembered (default, or -1: by its ctime,
 * UN_SETTLE_FINE_NS or UN_OPAQUE_SETTLE_NS; LLONG_MAX: never). */
void un_lookup_test_settle_ns(long long ns);
/* TEST ONLY: the bound on the resolve cache's descriptors (rcache.c rule
 * 5); 0: UN_RC_FDS_MAX and RLIMIT_NOFILE again. */
void un_rc_test_fds_max(size_t n);

/* ---- rcache.c: the resolve cache ---- */

/* A new export, zeroed but for its resolve cache, empty and with no budget
 * (ex->rc.budget, rule 13, is the opener's to set before the cache is
 * used): the export and its cache's buckets share one mapping (rule 12).
 * NULL without memory. */
struct un_export *un_rc_export_new(void);
/* Drops the resolve cache of EX and unmaps EX (un_export_close, last). */
void un_rc_export_free(struct un_export *ex);
/* The usable bytes of EX's mapping that are not its cache's buckets: the
 * export itself, and the rest of the last page. */
size_t un_rc_own_bytes(const struct un_export *ex);
/* The bytes EX's resolve cache holds: its buckets and its entries (their
 * objects included), and the root object walks share. */
size_t un_rc_bytes(const struct un_export *ex);

/* ---- object.c: objects ---- */

struct un_inst {
	int fd;		/* O_PATH, owned by the object */
	uint16_t layer; /* index into un_export.layers */
};

/* An object is used by one request at a time: the changes of copyup.c
 * update it in place (un_obj_push_top) without a lock. */
struct un_obj {
	atomic_uint ref;
	un_id id, parent;
	un_id fileid; /* what un_getattr reports: node.c's design notes */
	mode_t type;
	uint16_t namelen;
	char name[UN_NAME_MAX + 1]; /* its name in PARENT; "" for the root */
	size_t ninst;		    /* 1 for a non-directory */
	size_t cap;		    /* room in inst[]: one more than found, for copy-up */
	/* A view's (un_resolve_view, un_lookup_view; never changed): OWNER
	 * holds the descriptors inst[] names, and what the view's walk read
	 * serves the same call: inst[0]'s stat (TOP, if HAVE_TOP) for
	 * un_getattr, the stamps of its NSTAMPS instances for un_lookup in it
	 * (rcache.c rule 10).  NULL, false, 0 for any other object. */
	struct un_obj *owner;
	bool have_top;
	struct stat top;
	size_t nstamps;
	struct un_rc_stamp *stamps;
	/* Served from a retired layer (retire.c): read only, never copied
	 * up; inst[0] is its file there, with the layer of the export's
	 * bottom-most lower, which no write path takes for the upper. */
	bool retired;
	/* A directory found from a bare entry of the resolve cache (rcache.c
	 * rule 14), or a view of one: every inst[].fd is -1; only its id,
	 * type and (a view's) attributes are read, and un_lookup in it
	 * resolves it whole first. */
	bool bare;
	/* The stat memo of a directory the resolve cache shares (watch.c
	 * rule 4), made on first use, freed with the object; NULL in a view. */
	_Atomic(struct un_dirmemo *) memo;
	struct un_inst inst[]; /* top-most first; a directory down to its first opaque */
};

/* Who an object is: what un_obj_new puts in a new one. */
struct un_obj_ident {
	un_id id, fileid, parent;
	mode_t type;
	const char *name; /* its name in PARENT, LEN bytes, not NUL-ended */
	size_t len;
};
/* A new object WHO (one reference) with no instance yet and room for
 * NINST and one more, which a copy-up may put on top (object.c rule 2);
 * NULL without memory. */
struct un_obj *un_obj_new(size_t ninst, const struct un_obj_ident *who);
/* The bytes O was allocated with. */
size_t un_obj_bytes(const struct un_obj *o);
/* A copy of O with descriptors of its own, for a caller that may change
 * it (a copy-up puts a new top instance on its object). */
int un_obj_copy(const struct un_obj *o, struct un_obj **out);
/* 0, -EINVAL (empty, or a '/') or -ENAMETOOLONG. */
int un_name_check(const char *name, size_t *len);
/* How the names of the object ST, whose top-most instance is in layer
 * LAYER, map to nodes: a non-directory with several links shares one node
 * in a read-only union and in the upper layer of a writable one; in a lower
 * layer of a writable union each name is a node of its own, as a copy-up of
 * one name makes it a file of its own (overlayfs without its index), and
 * they share one fileid until then. */
enum un_links un_links_of(const struct un_export *ex, uint16_t layer,
			  const struct stat *st);
/* True if O's top-most instance is in the upper layer of EX. */
bool un_obj_upper(const struct un_export *ex, const struct un_obj *o);
/* Makes FD (O_PATH, ownership moves to O) O's top-most instance, in the upper
 * layer: a non-directory's replaces the old one, a directory's goes on top
 * of its lower ones. */
void un_obj_push_top(struct un_obj *o, int fd);

/* The times a merged directory reports (object.c rule 6), folded from its
 * instances in stack order, top-most first: zeroed, then un_dir_times_add
 * for each (times in ns), then un_dir_times_put into the attributes. */
struct un_dir_times {
	long long mtime; /* the top part's */
	long long ctime; /* the latest so far */
	uint64_t h;
	size_t n;
};
void un_dir_times_add(struct un_dir_times *t, uint64_t dev, uint64_t ino, long long mtime,
		      long long ctime);
/* un_dir_times_add of the instance whose stat is ST. */
void un_dir_times_add_stat(struct un_dir_times *t, const struct stat *st);
void un_dir_times_put(const struct un_dir_times *t, struct un_attr *out);

/* ---- workdir.c: the work dir ---- */

/* Creates (or empties what a crash left in) WORKDIR/work and opens it into
 * EX->tmpfd.  Called by un_export_open; ERR as there. */
int un_work_open(struct un_export *ex, const char *workdir, char *err, size_t errlen);
/* Opens EX's own node table in WORKDIR/UN_WORK_STATE_NAME, once EX holds
 * the work dir's lock, when workdir.c rule 4 says it has one: EX->st is
 * then that table, held in EX->table.  Called by un_export_open. */
int un_work_table_open(struct un_export *ex, const struct un_export_cfg *cfg, char *err,
		       size_t errlen);
/* A fresh temp name for the work dir. */
void un_work_tmpname(char buf[32]);
/* Removes NAME from directory DIRFD, and if it is a directory what it holds
 * first (DEPTH levels at most): clean-up in the work dir. */
int un_work_remove(int dirfd, const char *name, int depth);

/* ---- copyup.c: copy-up ---- */

/* Makes O's top-most instance an upper one, copying O (ancestors first) up
 * unless it is already; O then names its upper instance.  -ESTALE when O's
 * name no longer holds O.  A copy no fsync reaches (a symlink, a device)
 * sets CH->fs, for the sync of the change that caused it; CH may be NULL
 * only where O is a directory or a regular file, whose copies their own
 * fsyncs make durable (no note can come of them). */
int un_copyup(struct un_export *ex, struct un_change *ch, struct un_obj *o);
/* Copies every extended attribute of SRC to DST except the union's own
 * markers (overlay.* in the trusted. and user. namespaces). */
int un_copy_xattrs(int src, int dst);

/* ---- intent.c: renames and links a crash cut short ---- */

/* At an export's open: the intents earlier runs left are looked up (the
 * lookups adopt those whose change happened) and deleted; -errno only when
 * the table cannot be read. */
int un_intents_settle_open(struct un_export *ex);
/* For a node ID that resolves to nothing: its intents looked up; true
 * when one was adopted, so that a resolve again may find ID. */
bool un_intents_settle_id(struct un_export *ex, un_id id);

/* ---- dir.c: names ---- */

/* 1 if NAME in directory DIR exists in a layer below the upper (so removing
 * or moving it needs a white-out), 0 if not. */
int un_lower_has(struct un_export *ex, const struct un_obj *dir, const char *name,
		 size_t len);
/* un_setattr without the sync: for changes that sync once at their end. */
int un_setattr_nosync(struct un_export *ex, struct un_change *ch, struct un_obj *o,
		      const struct un_sattr *sa);
/* Whether SA sets anything. */
bool un_sattr_any(const struct un_sattr *sa);
/* Test hook: write white-outs in the xattr form (as when mknod is refused). */
void un_dir_test_xattr_whiteouts(struct un_export *ex, bool on);

/* ---- sync.c: changes durable before the reply ---- */

/* One change on its way to stable storage, from the engine call that makes
 * it to its sync: the caller's context (union.h), and what the change
 * learned on the way.  Each call that changes names or attributes keeps
 * one on its stack (UN_CHANGE) and passes it down to the steps that can
 * add to it; nothing else holds it. */
struct un_change {
	const struct un_ctx *cx;
	/* The change made an inode no fsync reaches (a white-out, a copied-up
	 * symlink or device): its sync is a syncfs of the upper filesystem. */
	bool fs;
};
#define UN_CHANGE(ctx) ((struct un_change){.cx = (ctx)})

/* Makes a change durable before its reply: syncs the upper instances of A
 * and then B (either may be NULL; a lower one has nothing pending; A first:
 * pass a new object before the directory that names it), then the node
 * table; concurrent changes share these syncs.  An upper A or B that cannot
 * be opened (symlink, device), or CH->fs, makes it a syncfs of the upper
 * filesystem instead.  dir.c's changes of names and un_setattr end with it.
 * Does nothing for an `async` caller (CH->cx). */
int un_sync_change(struct un_export *ex, struct un_change *ch, struct un_obj *a,
		   struct un_obj *b);
/* un_sync_change(EX, CH, O, DIR) of a change that made O's entry in DIR and
 * changed O no more after it (a create that set no attributes later): where
 * a directory's fsync orders (un_sync_probe_fs), DIR's shared fsync alone
 * makes O durable too. */
int un_sync_made(struct un_export *ex, struct un_change *ch, struct un_obj *o,
		 struct un_obj *dir);
/* un_sync_change whatever the caller's context, FS as CH->fs: un_commit. */
int un_sync_now(struct un_export *ex, bool fs, struct un_obj *a, struct un_obj *b);
/* un_sync_change (un_sync_made when MADE) of a change whose table write is
 * JOB, queued and not yet waited for: the upper's syncs first, whose run
 * commits the queued jobs before it syncs (un_node_jobs_drain), then the
 * wait for JOB and for a flush begun after its commit; so a change
 * usually sleeps once, for the shared run (where a directory's fsync
 * orders; else the wait for JOB comes first: sync.c).  JOB's own failure
 * first, else the syncs'; JOB is done on return whatever the result. */
int un_sync_queued(struct un_export *ex, struct un_change *ch, bool made,
		   struct un_obj *a, struct un_obj *b, struct un_node_job *job);
/* Learns whether a directory's fsync on EX's upper filesystem also makes
 * durable every inode made before it (ext4 with its journal, xfs), so that
 * a change needs no syncfs for an inode no fsync reaches.  0 or -errno. */
int un_sync_probe_fs(struct un_export *ex);
/* A shared fsync of the inode FD (O_PATH, regular file or directory) names,
 * begun after the call, without the node table, whatever the caller's
 * context (an `async` caller's COMMIT promises a copied-up file's entry
 * too): copy-ups make what they create durable (copyup.c). */
int un_sync_inode(struct un_export *ex, int fd);
/* How many shared fsync runs of ST's exports have failed so far.  A run
 * reopens its inode, and a writeback error an earlier run already reported
 * is not reported again to that new descriptor: a writer that read this
 * count before its write and finds it changed after its run fails too
 * (write.c rule 4), a false alarm at worst, never a false success. */
unsigned un_sync_failures(struct un_state *st);
/* The shared fsyncs of a state (un_state_open). */
int un_fsyncs_new(struct un_fsyncs **out);
void un_fsyncs_free(struct un_fsyncs *t);
/* Test hook: how many changes wait for (or run) a shared fsync now. */
unsigned un_fsyncs_test_users(struct un_state *st);
/* Threads asleep in the fsync slots' waits: each took its ticket first. */
unsigned un_fsyncs_test_sleepers(struct un_state *st);
/* The syncer thread of a server, which flushes each of its tables once a
 * period after a commit (sync.c rule 5): started with the main state's
 * shared part, stopped when that is freed, after every table left it. */
int un_syncer_start(struct un_shared *sh);
void un_syncer_stop(struct un_shared *sh);
/* A table joins the syncer's once open (un_state_open, un_state_open_table)
 * and leaves before it closes (un_state_close): once un_syncer_remove
 * returns, no flush of the syncer's runs on it. */
void un_syncer_add(struct un_state *st);
void un_syncer_remove(struct un_state *st);
/* un_state_sync in two halves: a ticket taken after the commit to make
 * durable, and the wait for a flush that began after it. */
int un_state_sync_ticket(struct un_state *st, uint64_t *ticket);
int un_state_sync_wait(struct un_state *st, uint64_t ticket);
/* Has the syncer thread start a flush now, unless one is under way: a caller
 * about to fsync other files lets the flush it will wait for run beside them. */
void un_state_sync_kick(struct un_state *st);
/* Lets the node table's pages go from the process's mapping once the
 * table grew by a few hundred KiB since they last went (state.c rule 4);
 * the writer's, after a commit (node.c; one thread at a time). */
void un_state_map_trim(struct un_state *st);
/* Another reference to TABLE, one un_state_open_table opened (state.c
 * rule 6): a union's successor shares its table (layer.c rule 4), and
 * un_state_close drops one. */
void un_state_table_get(struct un_state *table);

/* ---- write.c: attributes and data ----
 * Besides the functions of union.h (un_setattr, un_write, un_commit): */

/* What opening O for writing does on overlayfs (un_create of an existing
 * file): a lower regular file is copied up now, not at its first change, if
 * the caller may write it.  0 also when nothing was copied (not a lower
 * regular file, or the caller may not write it). */
int un_open_write(struct un_export *ex, struct un_obj *o);

/* ---- readdir.c: merged listings ---- */

/* A listing cache of its own; its inotify watches are MAIN's (a table's
 * cache borrows the main table's, readdir.c invariant 10), or its own when
 * MAIN is NULL.  A cache is freed before the MAIN it borrows from. */
int un_listing_cache_new(struct un_listing_cache *main, struct un_listing_cache **out);
/* The server's inotify watches (watch.h), which ST's listings use. */
struct un_watches *un_state_watches(const struct un_state *st);
void un_listing_cache_free(struct un_listing_cache *c);
/* Sets the bound on the memory of ST's cached listings (evicting at once). */
void un_listing_cache_limit(struct un_state *st, size_t bytes);
/* Test hooks: narrow the cookie hash to BITS bits (63 = normal) so that
 * collisions can be forced; change the settle time of UN_LISTING_SETTLE_NS. */
void un_readdir_test_hash_bits(unsigned bits);
void un_readdir_test_settle_ns(long long ns);
/* True while L is in the cache; the memory L is accounted for (tests). */
bool un_listing_cached(const struct un_listing *l);
size_t un_listing_bytes(const struct un_listing *l);

/* ---- handle.c: file handles ---- */

#define UN_FH_VERSION 1
#define UN_FH_LEN     32

/* ---- watch.c: the directory stat memo ---- */

/* What fstat of instance J of directory O, an object the resolve cache
 * shares, gives now: from O's memo where its watch proves it unchanged,
 * else an fstat, remembered (watch.c rule 3).  *DRAINED: whether the
 * caller's walk has drained the watches' events yet (set when this does). */
int un_dir_fstat(struct un_export *ex, struct un_obj *o, size_t j, bool *drained,
		 struct stat *st);
void un_dirmemo_free(struct un_dirmemo *m);
/* What fstatat of NAME (no symlink followed) in instance J of directory P
 * gives now: from the memo *SLOT (made on first use) where P's watch on
 * that instance proves it unchanged, else an fstatat, remembered (watch.c
 * rule 7).  *DRAINED as un_dir_fstat's. */
int un_file_fstatat(struct un_export *ex, struct un_obj *p, size_t j,
		    _Atomic(struct un_filememo *) *slot, const char *name, bool *drained,
		    struct stat *st);
void un_filememo_free(struct un_filememo *m);

#endif
