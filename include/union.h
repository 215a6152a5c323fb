/* SPDX-License-Identifier: Apache-2.0 */
/* union.h - the union engine's public interface.
 *
 * The engine knows layers, names, attributes and node ids; it knows nothing of
 * NFS or RPC.  Every function returns 0 (or a non-negative count) on success and
 * a negative errno on failure; out-parameters are untouched on failure unless
 * the contract says otherwise.  All types are opaque except the small value
 * structs below.
 *
 * Thread safety: every function may be called from any thread concurrently,
 * except un_state_open/close and un_export_open/close.
 *
 * The request context (struct un_ctx): what an engine call depends on beyond
 * its arguments is passed to it, never left in the calling thread.
 *  1. The calls that change names or attributes (un_setattr, the creates,
 *     un_remove, un_rmdir, un_rename, un_link) take the caller's context
 *     first; no other call depends on one.  The server builds one per call
 *     from its request (server/cred.c, srv_call_handler).
 *  2. A context is the caller's and read-only: the engine keeps no pointer
 *     to it after the call returns, and what one change learns on its way
 *     (an inode only a syncfs reaches) travels in the engine's own per-call
 *     state (un_private.h, struct un_change), not in the context.
 *  3. A zeroed context is the safe one: sync, as exports(5)'s default.
 *  4. The caller's identity is not in the context: the kernel checks the
 *     thread's filesystem ids, which the caller gives the thread
 *     (un_ident_take) before the call.  Nor is the union: every call names
 *     its export (EX), a client's own union where the server serves one.
 *  5. No thread-local carries a request from one engine function to
 *     another.  The one that remains is a per-thread cache of what the
 *     kernel holds for the thread (sys.c's identity record), and says so
 *     where it is defined.
 */
#ifndef UNION_H
#define UNION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* A node id names one object of one export for its whole life (what a file
 * handle names); it is the NFS fileid, except that the names of a lower file
 * with several links in a writable union are a node each and share one
 * fileid (node.c).  Ids are never reused. */
typedef uint64_t un_id;
#define UN_ID_NONE ((un_id)0)

struct un_state;   /* a node table, and the keys and indexes it shares */
struct un_export;  /* one union of layers, served under one path */
struct un_obj;	   /* one resolved object of an export (refcounted) */
struct un_listing; /* one merged directory listing, one directory version */

/* ---- state dir (state.c, node.c) ---- */

/* Sets the process's malloc thresholds the engine is built for (state.c,
 * "The allocator"): a server calls it once, before it opens a state. */
void un_malloc_policy(void);
/* Opens (creating if needed) the state dir DIR: its LMDB node table and its
 * secret key.  One state may back many exports. */
int un_state_open(const char *dir, struct un_state **out);
/* un_state_open with the keys derived from KEY_FILE (32 bytes, readable by
 * its owner only: -EACCES otherwise, -EINVAL for another size) instead of
 * the state dir's secret: states opened with one key file give the objects
 * of the same read-only layers the same handles (docs/gateways.md). */
int un_state_open_keyed(const char *dir, const char *key_file, struct un_state **out);
/* Opens (creating, mode 0700) a node table of its own in DIR (its LMDB
 * environment, its roots, its syncer) that shares MAIN's keys, layer
 * indexes, counters, retired layers and report functions: the exports
 * opened on *OUT keep their nodes there (roots, counter ids, intents),
 * while with a key file a lower object gets the same id in every table.
 * MAIN is a state un_state_open made, and outlives its tables.  The
 * functions below that speak of what is shared (the report functions,
 * retire-time, retired layers, indexes, the counters of un_state_stats)
 * act on MAIN's when given a table. */
int un_state_open_table(struct un_state *main, const char *dir, struct un_state **out);
/* Closes a state: a table alone, or the main state once its tables are
 * closed. */
void un_state_close(struct un_state *st);
/* Makes every node handed out so far durable (the table is otherwise synced at
 * least once a second by a background thread).  Concurrent callers share
 * flushes (group commit). */
int un_state_sync(struct un_state *st);
/* Told each time the node table cannot be written or flushed (a full or
 * failing disk under the state dir), from whichever engine thread saw it:
 * ERR a negative errno, WHAT "write" or "flush", DIR the state dir.  The
 * engine has no log; the server makes these its log lines.  The calls
 * themselves answer the error as well. */
typedef void un_state_error_fn(int err, const char *what, const char *dir);
void un_state_on_error(struct un_state *st, un_state_error_fn *fn);
/* Told of what the engine did that an admin may want in the log: LINE is
 * one line (a layer index built: its file, layer and seconds). */
typedef void un_state_notice_fn(const char *line);
void un_state_on_notice(struct un_state *st, un_state_notice_fn *fn);
/* TEST ONLY: states opened after un_state_test_no_sync(true) never flush
 * the node table to disk (LMDB's MDB_NOSYNC; both flushes do nothing), so
 * that the OS crash test can show that it notices lost handles.  union-nfsd
 * calls it at start-up when UNION_NFSD_TEST_NO_SYNC=1 (server/main.c); the
 * switch is kept with the engine's other test switches (sys.c). */
void un_state_test_no_sync(bool on);
/* How long a lower layer a reload replaced or removed stays retired,
 * serving the old handles of its files (union/retire.c): SECONDS, 0 until
 * exit.  Releases at once every retired layer older than that, with a
 * line for the un_state_on_notice function each. */
void un_state_retire_time(struct un_state *st, unsigned seconds);
/* Removes the layer indexes (STATE/layers/) that no export's stack record
 * names and no open export or retired layer holds, with a line for the
 * un_state_on_notice function each: the indexes of images that left
 * service.  Called after the exports opened and after each reload. */
void un_state_sweep_indexes(struct un_state *st);
/* One retired layer (union/retire.c), as an admin sees it: the export's
 * path and id, the layer's old path, and the seconds since it was retired. */
struct un_retired_info {
	const char *export_path;
	uint32_t export_id;
	const char *layer;
	uint64_t age_s;
};
/* Calls FN(INFO, ARG) for every retired layer, newest of each export first,
 * under the registry's lock: FN copies what it keeps and calls no engine
 * function. */
typedef void un_retired_fn(const struct un_retired_info *info, void *arg);
void un_state_retired_list(struct un_state *st, un_retired_fn *fn, void *arg);
/* Releases now every retired layer whose old path is LAYER (NULL: all of
 * them), as retire-time would, with a line for the un_state_on_notice
 * function each; returns how many. */
size_t un_state_retire_release(struct un_state *st, const char *layer);

/* What the engine counted since the process started (stats.c), for the
 * server to show: plain numbers, totals that only grow, but NODES (the
 * node table's records now).  Times are in nanoseconds, summed.  COMMITS:
 * write transactions of the node table's writer; FLUSHES: its syncs to
 * disk (one fdatasync each); FSYNCS: fsyncs of upper inodes (sync.c);
 * COPYUPS and COPYUP_BYTES: copy-ups done and the file bytes they copied.
 * The resolve cache (rcache.c) hits when a handle or a name is served
 * from it; the listing cache (readdir.c) when a listing is. */
struct un_stats {
	uint64_t nodes;
	uint64_t commits, commit_ns, flushes, flush_ns, fsyncs, fsync_ns;
	uint64_t copyups, copyup_bytes, copyup_ns;
	uint64_t rcache_hits, rcache_misses, listing_hits, listing_misses;
};
/* Fills OUT; any thread, any time (a short read transaction). */
int un_state_stats(struct un_state *st, struct un_stats *out);

/* A request's context (the opening note's rules).  ASYNC: the call's
 * changes of names and attributes are not on stable storage before it
 * returns, as exports(5) `async`; they are left to the once-a-second flush
 * of the node table and the filesystem's writeback.  Stable WRITEs and
 * un_commit keep their promise either way.  False (zero): `sync`. */
struct un_ctx {
	bool async;
};

/* ---- exports and layers (layer.c) ---- */

struct un_export_cfg {
	const char *path;	      /* the path clients mount, e.g. "/" */
	const char *upperdir;	      /* NULL: a read-only union */
	const char *workdir;	      /* required with upperdir */
	const char *const *lowerdirs; /* read-only layers, top-most first */
	size_t nlower;
	/* Identity of lower objects by inode number, as before the layer
	 * indexes, for layers rewritten in place (docs/identity.md). */
	bool no_layer_index;
	/* An index that cannot be built or opened (a full or failing state
	 * dir) leaves the export known by inode numbers, with a notice,
	 * instead of failing the open: for a start and a client's mount,
	 * which have no old stack to keep serving.  A reload leaves it false,
	 * so that it changes nothing. */
	bool index_best_effort;
	/* The export's stack record is not written, nor the layers that
	 * left its stack retired, before un_stack_commit: a reload opens
	 * its new unions first and commits them only once they serve. */
	bool defer_commit;
	/* Bound on what un_export_mem counts: the resolve cache grows only
	 * into what the union's own part leaves of it (union/rcache.c rule
	 * 13), and caches nothing when that is none.  A client union's share
	 * of the memory its server gives them; 0: only the cache's slot
	 * count bounds it. */
	size_t mem_bytes;
	/* What the export id is derived from instead of PATH (NULL: PATH):
	 * exports with one id_name share their ids whatever their paths. */
	const char *id_name;
	/* A writable union gets a node table of its own in its work dir
	 * (UN_WORK_STATE_NAME), so that its nodes move with its dirs to
	 * another server given the same key file (docs/gateways.md, part 2),
	 * unless ST's table already holds the union's root (it was served
	 * from there before: its handles name that table's ids).  A work dir
	 * that holds such a table is opened on it whatever this says.  ST is
	 * the main state (or a table, whose main state is used). */
	bool own_table;
	/* Lower ids (union/lowerid.c) also without a key file: for the
	 * server's own exports, not client unions, whose nodes a server
	 * without a key file keeps in its main table in the order they come
	 * (lowerid.c rule 1). */
	bool lower_ids;
};

/* The files a writable union keeps in its workdir besides overlayfs' own
 * layout: the lock that lets one server at a time open it (workdir.c rule
 * 3), and its own node table. */
#define UN_WORK_LOCK_NAME "union-nfsd.lock"
/* The union's own node table (un_export_cfg.own_table, workdir.c rule 4),
 * a dir that the work dir's emptying leaves alone. */
#define UN_WORK_STATE_NAME "union-nfsd.state"

/* Opens every layer root and checks the stack: each layer exists and is a
 * directory, the upper is not inside a lower (nor a lower inside the upper), the
 * workdir is on the upper's filesystem.  A writable one takes the workdir's
 * lock first: -EAGAIN, touching nothing, while another server (or another
 * open here) holds it.  On failure writes one line naming the problem into
 * ERR (errlen bytes) and returns -errno. */
int un_export_open(struct un_state *st, const struct un_export_cfg *cfg,
		   struct un_export **out, char *err, size_t errlen);
/* A union over the lower stack CFG gives (the same path, and an upper dir
 * when FROM has one) that takes over FROM's upper and work dirs as they
 * are: their descriptors, the copies and white-outs in the upper, and the
 * temps of copy-ups FROM may still be running (the work dir is not
 * emptied).  Layer indexes inherit as for any open over a changed stack;
 * the stack record and the retiring of the old layers wait for
 * un_stack_commit (always deferred, as defer_commit).  The caller stops using FROM before
 * it serves a call through *OUT, then closes FROM: the two share no cache, so no call
 * through *OUT sees a result of FROM's stack.  CFG's upperdir and workdir
 * only name the dirs in messages.  ERR as un_export_open. */
int un_export_restack(struct un_export *from, const struct un_export_cfg *cfg,
		      struct un_export **out, char *err, size_t errlen);
void un_export_close(struct un_export *ex);
/* What a union opened with defer_commit, or by un_export_restack, left to
 * do: the layers that left its stack retired and the stack recorded (the
 * record the next open pairs layers with).  Taken out of EX (NULL when
 * nothing is left), it may be done after EX is closed.
 * un_stack_retire retires them, once: a reload calls it as it swaps the
 * union in, under the lock that keeps calls out, so that no call finds an
 * old handle's layer neither served nor retired.  un_stack_commit writes
 * the record, then retires if that was not done and the record is
 * written, and frees C: 0, or -errno with one line in ERR.
 * un_stack_commit_drop frees C undone: a reload that fails changes
 * neither the record nor the retired layers. */
struct un_stack_commit;
struct un_stack_commit *un_export_commit_take(struct un_export *ex);
void un_stack_retire(struct un_stack_commit *c);
int un_stack_commit(struct un_stack_commit *c, char *err, size_t errlen);
void un_stack_commit_drop(struct un_stack_commit *c);
/* A stable 32-bit id derived from the export path; also the export's fsid. */
uint32_t un_export_id(const struct un_export *ex);
/* The export id un_export_open gives a union whose cfg.path is PATH. */
uint32_t un_export_id_of(const char *path);
const char *un_export_path(const struct un_export *ex);
/* The bytes EX holds in memory, as far as it counts them: itself, its
 * layers and its resolve cache (buckets and entries).  The listing cache
 * and the layer indexes are the state's, shared by every export. */
size_t un_export_mem(const struct un_export *ex);
bool un_export_writable(const struct un_export *ex);

/* ---- the upper layer discarded or vanished (reset.c) ---- */

/* Forgets the nodes of every object only EX's upper layer holds (created
 * there, never copied up from a lower), before the caller empties that
 * layer: their handles answer -ESTALE from then on, while the nodes of
 * lower objects, copied up or not, stay and find the lower objects again.
 * EX must have no other user meanwhile.  *FORGOT gets how many nodes. */
int un_export_forget_upper(struct un_export *ex, size_t *forgot);
/* True when EX's upper root or work dir has been removed from under it
 * (its descriptor's directory has no link left): nothing written could
 * reach a name again.  From then on EX takes no changes
 * (un_export_writable is false).  Two fstat(2) calls. */
bool un_export_vanished(struct un_export *ex);

/* ---- objects (object.c; un_resolve and un_lookup: lookup.c) ---- */

/* Resolves the export root.  Caller owns *out (un_obj_put). */
int un_root(struct un_export *ex, struct un_obj **out);
/* Resolves node ID of EX; -ESTALE when the node is unknown or its object is gone
 * or was replaced, unless a layer a reload retired still holds that file or
 * symlink: *out is then that old object, read only (un_obj_retired).
 * Caller owns *out. */
int un_resolve(struct un_export *ex, un_id id, struct un_obj **out);
/* As un_resolve, for a caller that only reads *out (un_getattr, un_lookup
 * in it, its id) within one call (a request): *out is a view that shares
 * the descriptors of the engine's cache (no copy of them) and carries what
 * the resolve read (un_getattr gives the attributes the resolve saw).
 * Nothing may change it (no copy-up, no change of a name in it), and
 * nothing may read a non-directory's data through it: it may hold no
 * descriptor.  Caller owns a reference (un_obj_put). */
int un_resolve_view(struct un_export *ex, un_id id, struct un_obj **out);
/* Looks NAME up in DIR, top layer to bottom, stopping at a white-out, a
 * non-directory or an opaque directory.  "." and ".." are understood (".." of
 * the root is the root).  -ENOENT, -ENOTDIR, -ENAMETOOLONG, -EINVAL (a name with
 * '/').  Layer-private names (OCI ".wh." names) are -ENOENT.  Assigns the node id
 * of the result.  Caller owns *out. */
int un_lookup(struct un_export *ex, struct un_obj *dir, const char *name,
	      struct un_obj **out);
/* As un_lookup, with *out a view (see un_resolve_view): read only, used
 * within the caller's call. */
int un_lookup_view(struct un_export *ex, struct un_obj *dir, const char *name,
		   struct un_obj **out);
struct un_obj *un_obj_get(struct un_obj *o);
void un_obj_put(struct un_obj *o);
un_id un_obj_id(const struct un_obj *o);
/* The node id of the directory holding O (the root's is the root's). */
un_id un_obj_parent_id(const struct un_obj *o);
/* S_IFMT bits of the object. */
mode_t un_obj_type(const struct un_obj *o);
/* True if O is served from a retired layer (union/retire.c): a file or
 * symlink a reload replaced or removed, read through a handle taken
 * before.  Nothing can change it (-EROFS). */
bool un_obj_retired(const struct un_obj *o);

struct un_attr {
	mode_t mode; /* type and permission bits */
	uint32_t nlink;
	uid_t uid;
	gid_t gid;
	uint64_t size;
	uint64_t used; /* bytes allocated */
	uint32_t rdev_major, rdev_minor;
	uint64_t fsid; /* the export id: one filesystem per export */
	un_id fileid;  /* the node id, but the names of a lower file with
			* several links in a writable union share one
			* (node.c's design notes) */
	struct timespec atime, mtime, ctime;
};

/* Attributes as the union shows them: the top-most layer's inode, with the
 * fileid above, the export's fsid, and nlink 1 for a merged directory (as
 * overlayfs reports, so that tools do not trust a link count they cannot get). */
int un_getattr(struct un_export *ex, struct un_obj *o, struct un_attr *out);

/* Reads the target of symlink O into BUF (not NUL-terminated); *len gets its
 * length.  -EINVAL if O is no symlink, -ENAMETOOLONG if it does not fit. */
int un_readlink(struct un_export *ex, struct un_obj *o, char *buf, size_t size,
		size_t *len);

/* Reads up to COUNT bytes at OFF; returns the byte count; *eof is true when the
 * read reached the end of the file. -EISDIR, -EINVAL for non-regular files. */
ssize_t un_read(struct un_export *ex, struct un_obj *o, void *buf, size_t count,
		uint64_t off, bool *eof);
/* As un_read, but the bytes go into the pipe whose write end is PIPEFD, by
 * splice: the pipe takes references to the file's pages instead of a copy.
 * Fewer than COUNT bytes when the pipe fills up; *eof is true when the read
 * reached the end of the file.  -EINVAL (nothing read) when the layer's
 * filesystem cannot splice: un_read can. */
ssize_t un_read_pipe(struct un_export *ex, struct un_obj *o, int pipefd, size_t count,
		     uint64_t off, bool *eof);

struct un_statfs {
	uint64_t tbytes, fbytes, abytes;
	uint64_t tfiles, ffiles, afiles;
	uint32_t namemax;
};
/* Space of the layer that receives writes (the upper), else the top lower. */
int un_statfs(struct un_export *ex, struct un_statfs *out);

/* ---- changing the union (copyup.c, dir.c, write.c) ----
 *
 * Only on a writable export; -EROFS otherwise.  The first change to an object
 * that lives only in a lower layer copies it up (ancestors first); node ids
 * stay the same through copy-up and rename.  New objects are created with the
 * calling thread's filesystem identity (the server sets it per request); the
 * engine's own work (copy-up, white-outs, the work dir) runs with the server's
 * identity.  NAME arguments are single components (checked: -EINVAL,
 * -ENAMETOOLONG).  On success the objects passed in stay valid and describe
 * the new state (an object that was copied up now names its upper instance).
 * The changes of names and attributes take the caller's context first (the
 * opening note; struct un_ctx): an `async` one skips their sync before the
 * return.  un_write and un_commit take none: HOW and COMMIT say theirs. */

/* Which attributes un_setattr changes.  A time of UTIME_NOW in tv_nsec means
 * the server's clock. */
struct un_sattr {
	bool set_mode, set_uid, set_gid, set_size, set_atime, set_mtime;
	mode_t mode; /* permission bits only */
	uid_t uid;
	gid_t gid;
	uint64_t size;
	struct timespec atime, mtime;
};

enum un_stable { UN_UNSTABLE = 0, UN_DATA_SYNC = 1, UN_FILE_SYNC = 2 };

int un_setattr(const struct un_ctx *cx, struct un_export *ex, struct un_obj *o,
	       const struct un_sattr *sa);
/* Writes N bytes at OFF; returns the count written.  *committed gets how
 * durable the data is on return (never less than HOW). */
ssize_t un_write(struct un_export *ex, struct un_obj *o, const void *buf, size_t n,
		 uint64_t off, enum un_stable how, enum un_stable *committed);
/* Makes O's data and metadata, and the node table, durable. */
int un_commit(struct un_export *ex, struct un_obj *o);

/* Creates a regular file.  EXCL: -EEXIST if NAME exists; otherwise an existing
 * regular file is opened (and truncated if SA sets size 0), as UNCHECKED, and
 * copied up if it is a lower one (as an open for writing on overlayfs).
 * SA (may be NULL) is applied to the new file. */
int un_create(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	      const char *name, mode_t mode, bool excl, const struct un_sattr *sa,
	      struct un_obj **out);
/* Exclusive create with a client's 8-byte verifier kept with the file: a
 * retransmission (same name, same verifier) gets the same file again; another
 * verifier gets -EEXIST. */
int un_create_verf(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
		   const char *name, const uint8_t verf[8], struct un_obj **out);
int un_mkdir(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	     const char *name, mode_t mode, struct un_obj **out);
int un_symlink(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	       const char *name, const char *target, struct un_obj **out);
/* MODE holds the type (S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK) and permissions. */
int un_mknod(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	     const char *name, mode_t mode, uint32_t major, uint32_t minor,
	     struct un_obj **out);
int un_remove(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	      const char *name);
/* -ENOTEMPTY unless empty across all layers; -EXDEV never. */
int un_rmdir(const struct un_ctx *cx, struct un_export *ex, struct un_obj *dir,
	     const char *name);
/* -EXDEV for a directory with lower parts (as overlayfs without redirect_dir). */
int un_rename(const struct un_ctx *cx, struct un_export *ex, struct un_obj *fromdir,
	      const char *fromname, struct un_obj *todir, const char *toname);
/* A new name NAME in DIR for O (copied up first). */
int un_link(const struct un_ctx *cx, struct un_export *ex, struct un_obj *o,
	    struct un_obj *dir, const char *name);

/* ---- merged directory listings (readdir.c) ----
 *
 * A listing is the merged content of one directory at one version: white-outs,
 * layer-private names and shadowed names removed, "." and ".." included.  It is
 * ordered by cookie.  The cookie of "." is 1, of ".." is 2, of every other entry
 * a keyed 63-bit hash of its name (never below 3); two names may share a cookie,
 * and such names are adjacent.  Resuming after cookie C means starting at the
 * first entry whose cookie is greater than C. */

struct un_dirent {
	uint64_t cookie;
	const char *name; /* NUL-terminated, owned by the listing */
	uint16_t namelen;
	mode_t type; /* S_IFMT bits as the layer's readdir reported them */
};

/* Returns the listing of directory DIR at its current version, from the cache
 * when that version was built before.  Caller owns a reference (un_listing_put). */
int un_listing_get(struct un_export *ex, struct un_obj *dir, struct un_listing **out);
void un_listing_put(struct un_listing *l);
/* The cookie verifier of this version of the directory: never 0. */
uint64_t un_listing_verf(const struct un_listing *l);
/* True if VERF is a verifier this engine could have issued for directory DIR
 * (any version, any run of the server with this state dir). */
bool un_listing_verf_valid(struct un_export *ex, un_id dir, uint64_t verf);
size_t un_listing_count(const struct un_listing *l);
/* Index of the first entry whose cookie is greater than COOKIE (count if none). */
size_t un_listing_seek(const struct un_listing *l, uint64_t cookie);
const struct un_dirent *un_listing_at(const struct un_listing *l, size_t i);
/* Fills IDS[0..n-1] with the node ids of entries FROM..FROM+N-1 of listing L
 * of directory DIR, and FILEIDS[0..n-1] with their fileids (what un_getattr
 * reports; either array may be NULL), assigning missing ids in one table
 * transaction. */
int un_listing_nodes(struct un_export *ex, struct un_obj *dir, const struct un_listing *l,
		     size_t from, size_t n, un_id *ids, un_id *fileids);
/* un_listing_nodes, and when FH is not NULL the handle of each entry at
 * FH + i * UN_FH_MAX (un_handle_encode's bytes; all handles have the length
 * it returns).  IDS and FILEIDS must not be NULL.  A listing remembers the
 * nodes and handles it gave while the node table's answer for them cannot
 * have changed, so that a page it served before reads no table (readdir.c).
 * Returns the handles' length (0 when FH is NULL); on failure the arrays
 * hold garbage. */
int un_listing_handles(struct un_export *ex, struct un_obj *dir,
		       const struct un_listing *l, size_t from, size_t n, un_id *ids,
		       un_id *fileids, uint8_t *fh);
/* un_listing_nodes without the fileids. */
int un_listing_ids(struct un_export *ex, struct un_obj *dir, const struct un_listing *l,
		   size_t from, size_t n, un_id *ids);
/* The attributes of entry I (not "." or "..") of listing L of directory DIR,
 * whose fileid is ID (un_listing_nodes), from one fstatat of its top-most
 * instance: what un_getattr gives for that node, without a lookup.  -ESTALE
 * when the name is no longer that instance (it changed since the listing was
 * built). */
int un_listing_attr(struct un_export *ex, struct un_obj *dir, const struct un_listing *l,
		    size_t i, un_id id, struct un_attr *out);
/* un_listing_attr for entries FROM..FROM+N-1 (FROM >= 2), whose fileids are
 * FILEIDS: OUT[k] gets the attributes and ERRS[k] 0, or ERRS[k] the error of
 * that entry.  A listing remembers attributes while inotify says nothing
 * changed them, for at most a second (readdir.c, invariant 8).  Returns 0,
 * or -EINVAL for a bad range. */
int un_listing_attrs(struct un_export *ex, struct un_obj *dir, const struct un_listing *l,
		     size_t from, size_t n, const un_id *fileids, struct un_attr *out,
		     int *errs);
/* TEST ONLY: narrows the cookie hash to BITS bits (63 = normal, the default) so
 * that tests can force collisions.  Call before serving; union-nfsd calls it at
 * start-up when UNION_NFSD_TEST_HASH_BITS is set (see server/main.c). */
void un_readdir_test_hash_bits(unsigned bits);

/* ---- file handles (handle.c) ----
 *
 * A handle is version | export id | node id | MAC, the MAC a keyed hash with
 * the state dir's secret, so a client cannot forge one. */

#define UN_FH_MAX 64

/* Writes the handle of node ID of EX into OUT; returns its length. */
size_t un_handle_encode(const struct un_export *ex, un_id id, uint8_t out[UN_FH_MAX]);
/* Checks a handle's form and MAC: -EBADMSG for bytes that are no handle of this
 * server (wrong size, unknown version, bad MAC); on success gives the export id
 * and node id it names (which may since have gone: un_resolve says). */
int un_handle_decode(const struct un_state *st, const uint8_t *fh, size_t len,
		     uint32_t *export_id, un_id *id);

/* ---- the calling thread's filesystem identity (sys.c) ----
 * Requests run with their caller's fsuid, fsgid and groups, per thread.  Each
 * thread keeps a record of what it holds, kept by these calls, which are the
 * only ones that change it (sys.c, "the identity record"): reading it costs
 * no system call, and a switch to what the thread holds makes none. */

#define UN_IDENT_GROUPS_MAX 256
struct un_ident {
	uid_t fsuid;
	gid_t fsgid;
	int ngroups;			   /* -1: more than UN_IDENT_GROUPS_MAX */
	gid_t groups[UN_IDENT_GROUPS_MAX]; /* ascending */
};
/* What the calling thread holds (read from the kernel at its first use);
 * the thread's own, to be read before its next switch. */
const struct un_ident *un_ident_now(void);
/* Gives the calling thread GROUPS (NGROUPS of them, any order), fsgid GID
 * and fsuid UID, in that order, each only where it differs; reads back what
 * it changed.  True if the thread holds all three afterwards (a server that
 * is not root cannot switch). */
bool un_ident_take(uid_t uid, gid_t gid, size_t ngroups, const gid_t *groups);
/* Gives the calling thread back ids it held before, or the process's
 * effective ids: fsuid first (back to 0 gives the filesystem capabilities
 * back), then fsgid, then GROUPS unless NGROUPS is -1.  Such a switch
 * cannot fail. */
void un_ident_resume(uid_t uid, gid_t gid, int ngroups, const gid_t *groups);
/* For code that changed the calling thread's ids by other means (raw calls
 * of a test): the next use reads them from the kernel again. */
void un_ident_forget(void);

#endif
