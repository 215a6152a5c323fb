/* SPDX-License-Identifier: Apache-2.0 */
/* powercut.h - the parts of powercut_client (kvm_powercut.sh's client) that
 * speak no NFS: the data every sector carries, the ack log on its own disk,
 * and the model of what the server promised, rebuilt from the log.
 *
 * Data.  Every 512-byte sector a client writes (and every sector of the
 * lower pool files, written on the host) names the operation that wrote it
 * and its own index in the file, and is filled from those two: a sector read
 * back says which write it came from, or that it is torn or foreign.  Zeros
 * are a hole.
 *
 * The log.  One text record per sector of a disk of its own, written with
 * O_DIRECT|O_DSYNC one at a time, each after the one before it completed, so
 * the valid records are a prefix: a cut loses at most the record being
 * written.  A record is made only after what it records: an intent ("I")
 * before the call is sent, an ack ("A") after its reply came in.  A lost ack
 * makes an acknowledged call look like one in flight, whose effect is allowed
 * either way; never the reverse.  Each boot's checker writes a snapshot of
 * what it verified (S ... E); the next boot's model is the last complete
 * snapshot and the calls logged after it.
 */
#ifndef POWERCUT_H
#define POWERCUT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "nfs_raw.h"

#define PC_SECTOR  512
#define PC_NW	   4  /* workers, each with its own names and connection */
#define PC_SLOTS   4  /* names per worker in each of the two slot dirs */
#define PC_MAXNAME 24 /* a worker's names: 2 * PC_SLOTS + claimed pool files */
#define PC_MAXOBJ  32
#define PC_MAXFH   4
#define PC_PATH	   24
/* op id of the lower content of pool file P: PC_LOWER | P */
#define PC_LOWER (UINT64_C(1) << 62)
/* a sector of unknown content (kept after a reported loss): not checked */
#define PC_ANY UINT64_MAX
/* a sector that is neither zeros nor one whole written sector */
#define PC_BAD (UINT64_MAX - 1)
/* the most a file grows to: the largest pool file and a write past it */
#define PC_MAXSIZE ((2u << 20) + (128u << 10))

/* ---- data ---- */

/* Size of pool file P: 256 KiB, 512 KiB, 1 MiB or 2 MiB by P. */
uint64_t pc_pool_size(unsigned p);
/* The sector SEC of a file as write OP leaves it. */
void pc_fill(uint64_t op, uint64_t sec, unsigned char out[PC_SECTOR]);
/* Which op wrote IN, read at sector SEC: 0 for zeros, PC_BAD otherwise. */
uint64_t pc_decode(const unsigned char in[PC_SECTOR], uint64_t sec);

/* ---- the log ---- */

struct pc_log {
	int fd;
	uint64_t next; /* sector of the next record */
	uint32_t boot;
	pthread_mutex_t lock;
	void *buf; /* one aligned sector */
};

/* Opens DEV for records of BOOT.  0 or -errno. */
int pc_log_open(struct pc_log *l, const char *dev, uint32_t boot);
/* Appends one record (a line of at most PC_SECTOR - 32 bytes): 0 once it is
 * on the disk, -1 (a line on stdout) otherwise. */
int pc_log_put(struct pc_log *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- the model ---- */

/* A write since the snapshot: pending (UNSTABLE, acked, not committed),
 * certain, or in flight. */
enum pc_wstate { PC_PENDING, PC_CERTAIN, PC_INFLIGHT };

struct pc_write {
	uint64_t op, off, len;
	enum pc_wstate st;
};

struct pc_obj {
	bool used;
	uint64_t fileid; /* 0: not known (a create or a claim in flight) */
	struct fh fh[PC_MAXFH];
	int nfh;
	uint32_t mode, mode_alt; /* mode_alt: a SETATTR in flight, else 0 */
	bool promised;		 /* its handles must survive: a sync call since */
	uint64_t old_fileid;	 /* before the check found it under a new one */
	char newid_by;		 /* the kind of the call in flight then, or 0 */
	bool newid_applied;	 /* and that call had happened */
	int pool;		 /* the pool file it was, or -1 */
	uint64_t size;		 /* of the snapshot */
	uint64_t *sec;		 /* the snapshot's content, PC_MAXSIZE / 512 */
	struct pc_write *wl;	 /* writes since, in order */
	int nwl, wlcap;
};

/* One call of a worker, as logged. */
struct pc_op {
	uint64_t op;
	char kind; /* C W M R D L S P */
	char a[PC_PATH], b[PC_PATH];
	uint64_t off, len;
	uint32_t stable, mode;
	bool acked;
	int status;
	uint64_t fileid;
	struct fh fh;
	char verf[17];
};

struct pc_name {
	char path[PC_PATH];
	int obj; /* -1: no such name */
};

struct pc_worker {
	struct pc_name names[PC_MAXNAME];
	int nnames;
	struct pc_obj objs[PC_MAXOBJ];
	/* the calls since the snapshot (replay), the last one maybe in flight */
	struct pc_op *ops;
	int nops, opcap;
};

#define PC_MAXVERF 1024
struct pc_model {
	uint32_t boot; /* of the snapshot */
	bool have_snap;
	struct pc_worker w[PC_NW];
	/* the export's directories: up, mg, pool */
	uint64_t dir_fileid[3];
	struct fh dir_fh[3];
	unsigned next_pool;
	char verfs[PC_MAXVERF][17];
	int nverf;
	uint64_t log_end; /* the first sector after the valid records */
};

extern const char *const pc_dirs[3];

/* Reads the log on DEV from sector FROM: the last complete snapshot and the
 * calls after it, into M (zeroed first).  0, or -1 with a line on stdout. */
int pc_model_load(struct pc_model *m, const char *dev, uint64_t from);
void pc_model_free(struct pc_model *m);
/* Prints the records of the log on DEV from sector FROM (a debugging aid). */
int pc_log_dump(const char *dev, uint64_t from);

int pc_name_find(const struct pc_worker *w, const char *path);
/* Adds PATH (absent) to W's names if it is not there; its index or -1. */
int pc_name_add(struct pc_worker *w, const char *path);
/* A free object of W, its content zero; -1 when there is none. */
int pc_obj_new(struct pc_worker *w);
void pc_obj_drop(struct pc_obj *o);
/* Remembers handle F of O (a new one: O keeps up to PC_MAXFH). */
void pc_obj_add_fh(struct pc_obj *o, const struct fh *f);
void pc_obj_add_write(struct pc_obj *o, uint64_t op, uint64_t off, uint64_t len,
		      enum pc_wstate st);
/* Writes of O pending until now become certain (an acked COMMIT). */
void pc_obj_commit(struct pc_obj *o);
/* How many of W's names NAMES name object OBJ. */
int pc_links(const struct pc_name *names, int n, int obj);

/* Applies call OP of W to its names (CREATE, RENAME, REMOVE, LINK and the
 * claim of a pool file); NEWOBJ is the object a CREATE makes. */
void pc_apply_names(struct pc_name *names, int n, const struct pc_op *op, int newobj);
/* Applies the acknowledged or in-flight call OP to W (names, objects). */
void pc_apply(struct pc_worker *w, const struct pc_op *op);

void pc_hex(const unsigned char *p, uint32_t n, char *out);
bool pc_unhex_fh(const char *s, struct fh *f);

/* ---- the calls (powercut_nfs.c): each waits for its reply ---- */

#define PC_CALL_S 120 /* s: software emulation on a busy machine */

/* What a reply said; status -1: no reply. */
struct pc_res {
	int status;
	struct fh fh;
	bool attrs;
	uint64_t fileid, size;
	uint32_t mode, nlink, type, count;
	uint32_t committed;
	bool eof;
	char verf[17];	    /* WRITE, COMMIT */
	unsigned char *buf; /* READ: where the data goes */
};

struct pc_res pc_getattr(struct rpc_context *rpc, const struct fh *f);
struct pc_res pc_lookup(struct rpc_context *rpc, const struct fh *dir, const char *name);
struct pc_res pc_read(struct rpc_context *rpc, const struct fh *f, uint64_t off,
		      uint32_t count, unsigned char *buf);
struct pc_res pc_write(struct rpc_context *rpc, const struct fh *f, uint64_t off,
		       const unsigned char *data, uint32_t n, uint32_t stable);
struct pc_res pc_commit(struct rpc_context *rpc, const struct fh *f);
/* CREATE GUARDED, mode 0644 */
struct pc_res pc_create(struct rpc_context *rpc, const struct fh *dir, const char *name);
struct pc_res pc_rename(struct rpc_context *rpc, const struct fh *fdir, const char *from,
			const struct fh *tdir, const char *to);
struct pc_res pc_remove(struct rpc_context *rpc, const struct fh *dir, const char *name);
struct pc_res pc_link(struct rpc_context *rpc, const struct fh *f, const struct fh *dir,
		      const char *name);
struct pc_res pc_setmode(struct rpc_context *rpc, const struct fh *f, uint32_t mode);

/* The directory (an index of pc_dirs) and the base name of PATH ("up/w1-0"). */
int pc_split(const char *path, const char **base);

/* ---- the check of a boot (powercut_check.c) ---- */

struct pc_counts {
	int acked, synced, committed, names, inflight, applied;
	int lost, stale, renewed, objects, fails;
	int stale_inflight; /* of stale: the object of the call in flight */
	int split;	    /* a LINK in flight gave its new name a fileid of its own */
	int halfstale;	    /* a handle GETATTR takes but a COMMIT refuses */
	int work;	    /* entries in the work dir after start-up */
	bool verf_new;
	char verf[17];
};

/* Checks everything the log says the server promised against the export
 * (ROOT through RPC), counting into C and printing a line for each loss,
 * and makes M the state it found.  0, or -1 when the export could not be
 * read at all. */
int pc_check(struct pc_model *m, struct rpc_context *rpc, const struct fh *root,
	     struct pc_counts *c);
/* Logs M as the snapshot of boot BOOT: prints "PC SNAP <sector>" once it is
 * complete.  0 or -1. */
int pc_snapshot(struct pc_model *m, struct pc_log *l, uint32_t boot);

#endif
