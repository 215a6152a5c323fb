/* un_private.h - the union engine's private header: a map of union/, grouped
 * by file.
 *
 * Layering inside the engine: sys.c is the only file that calls the kernel;
 * state.c owns the state dir (LMDB env, secret, derived keys); node.c keeps the
 * node table; layer.c opens and checks the layer stack of an export;
 * whiteout.c knows the on-disk markers (white-outs, opaque dirs, OCI names) and
 * the one merge rule; lookup.c resolves names and ids to objects and reads
 * them; readdir.c builds, caches and serves merged listings; handle.c encodes
 * and checks file handles.
 *
 * Every function here returns 0 (or a count) on success and a negative errno
 * on failure, like union.h, unless its comment says otherwise.
 */
#ifndef UN_PRIVATE_H
#define UN_PRIVATE_H

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
#define UN_MAP_SIZE                                                                      \
	(64ull << 30) /* LMDB map: address space only, the file grows as used */
#define UN_SYNC_PERIOD_S       1	   /* background mdb_env_sync period */
#define UN_LISTING_CACHE_BYTES (64u << 20) /* bound on the memory of cached listings */
/* A listing is cached only when every layer dir of it last changed at least
 * this long ago: a change within one timestamp tick of the build would not
 * change the version, so a listing built inside that tick could go stale
 * unnoticed.  One second covers the coarsest timestamps we expect. */
#define UN_LISTING_SETTLE_NS 1000000000ll

/* ---- sys.c: the syscall seam ----
 *
 * Every call into the kernel (and every allocation) of the engine goes through
 * here.  Each returns what the libc call would, except that failures return
 * -errno instead of -1 (allocators return NULL).  Tests can make the Nth call
 * of one kind fail with a chosen errno (un_sys_inject). */

enum un_sys_op {
	UN_SYS_OPEN,	 /* openat, openat2, reopen, dup */
	UN_SYS_STAT,	 /* fstatat, fstat */
	UN_SYS_XATTR,	 /* getxattr */
	UN_SYS_GETDENTS, /* getdents64 */
	UN_SYS_READ,	 /* pread */
	UN_SYS_READLINK, /* readlinkat */
	UN_SYS_STATFS,	 /* fstatvfs */
	UN_SYS_WRITE,	 /* write */
	UN_SYS_SYNC,	 /* fsync */
	UN_SYS_MKDIR,	 /* mkdirat */
	UN_SYS_RENAME,	 /* renameat2 */
	UN_SYS_ALLOC,	 /* malloc, calloc, realloc, strdup */
	UN_SYS_MDB,	 /* LMDB transactions (node.c asks un_sys_fault) */
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
ssize_t un_sys_readlinkat(int dirfd, const char *name, char *buf, size_t size);
int un_sys_fstatvfs(int fd, struct statvfs *out);
int un_sys_mkdirat(int dirfd, const char *name, mode_t mode);
/* Writes all N bytes (retrying short writes). */
ssize_t un_sys_write(int fd, const void *buf, size_t n);
int un_sys_fsync(int fd);
int un_sys_renameat2(int odir, const char *oname, int ndir, const char *nname,
		     unsigned flags);
int un_sys_unlinkat(int dirfd, const char *name, int flags);
void *un_sys_malloc(size_t n);
void *un_sys_calloc(size_t n, size_t size);
void *un_sys_realloc(void *p, size_t n);
char *un_sys_strdup(const char *s);
/* For seams that are not syscalls (LMDB): 0, or the errno the caller is to
 * fail with because a test injected it. */
int un_sys_fault(enum un_sys_op op);

/* Test hooks: the NTH call of OP from now on (1 = the next) fails with ERR;
 * NTH 0 disarms OP.  un_sys_calls counts the calls of OP since the last
 * un_sys_inject_reset. */
void un_sys_inject(enum un_sys_op op, unsigned long nth, int err);
void un_sys_inject_reset(void);
unsigned long un_sys_calls(enum un_sys_op op);
/* Test hook: use plain openat with O_NOFOLLOW as on kernels without openat2. */
void un_sys_test_no_openat2(bool on);

/* ---- state.c: the state dir ---- */

struct un_listing_cache; /* readdir.c */

struct un_state {
	MDB_env *env;
	MDB_dbi db_meta, db_nodes, db_names, db_links; /* node.c */
	/* Keys derived from the secret file, one per purpose (state.c). */
	uint8_t key_handle[32];		/* handle MAC (generichash) */
	uint8_t key_cookie[16];		/* readdir cookies (siphash) */
	uint8_t key_verf[16];		/* cookie verifier MAC (siphash) */
	uint8_t key_version[16];	/* directory version hash (siphash) */
	struct un_listing_cache *cache; /* readdir.c */

	pthread_t syncer;
	pthread_mutex_t sync_lock; /* guards stopping */
	pthread_cond_t sync_cond;
	bool stopping;
};

/* Maps an LMDB return code to 0 or -errno. */
int un_mdb_err(int rc);

/* ---- node.c: the node table ---- */

struct un_devino {
	uint64_t dev, ino;
};

/* What a lookup (or a readdir) saw of one name: the input of the table. */
struct un_node_obs {
	un_id parent;
	const char *name;
	size_t namelen;
	mode_t type;		      /* S_IFMT bits */
	const struct un_devino *inst; /* layer instances, top-most first (>= 1) */
	size_t ninst;
	bool linked; /* a non-directory with more than one link */
	bool pinned; /* an export root: never "replaced" */
};

/* One step of the path from an export root to a node. */
struct un_node_hop {
	un_id id, parent;
	mode_t type;
	struct un_devino di;
	uint16_t namelen;
	char name[UN_NAME_MAX + 1];
};

/* Opens (creating) the named databases in TXN, a write transaction. */
int un_node_init(struct un_state *st, MDB_txn *txn);
/* The id of the object OBS describes, assigning one when the name is new or
 * its object was replaced. */
int un_node_get_or_create(struct un_state *st, const struct un_node_obs *obs, un_id *out);
/* The same for OBS[0..n-1], with at most one write transaction. */
int un_node_ids_batch(struct un_state *st, const struct un_node_obs *obs, size_t n,
		      un_id *ids);
/* The hops from the export root down to ID, root first: *out (caller frees)
 * gets *n hops.  -ESTALE when ID or an ancestor is unknown. */
int un_node_path(struct un_state *st, un_id id, struct un_node_hop **out, size_t *n);

/* ---- layer.c: exports and their layer stacks ---- */

struct un_layer {
	int fd; /* O_PATH root of the layer */
	bool lower;
	struct un_devino di;
	char *dir; /* as configured, for messages */
};

struct un_export {
	struct un_state *st;
	char *path;
	uint32_t id;
	un_id root_id;
	const char *xattr_prefix; /* namespace our own markers are written in */
	int workfd;		  /* -1 when read-only */
	size_t nlayers;
	struct un_layer
	    *layers; /* upper (when writable) first, then lowers top-most first */
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

/* ---- lookup.c: objects ---- */

struct un_inst {
	int fd;		/* O_PATH, owned by the object */
	uint16_t layer; /* index into un_export.layers */
};

struct un_obj {
	atomic_uint ref;
	un_id id, parent;
	mode_t type;
	size_t ninst;	       /* 1 for a non-directory */
	struct un_inst inst[]; /* top-most first; a directory down to its first opaque */
};

/* 0, -EINVAL (empty, or a '/') or -ENAMETOOLONG. */
int un_name_check(const char *name, size_t *len);

/* ---- readdir.c: merged listings ---- */

int un_listing_cache_new(struct un_listing_cache **out);
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

#endif
