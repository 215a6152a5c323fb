/* SPDX-License-Identifier: Apache-2.0 */
/* nfs_raw.h - libnfs' raw NFSv3 and MOUNT calls made synchronous, for the
 * integration tests that speak to union-nfsd handle by handle (test_protocol,
 * test_stable, test_handles, test_layer_swap, test_readdir_big, random_update,
 * crash_client, test_gateway_lock through netns_util) and the clients in bench/
 * (readdir_bench, and nfs_bench's set-up calls).
 *
 * A test queues a call with an rpc_*_async function, passing nfs_raw_on_reply
 * and a struct call, and hands the queue's answer to nfs_raw_finish, which
 * services the connection until the reply is in.  The call's keep function (run
 * only for an accepted reply) copies what the test wants out of libnfs' result
 * into the test's own struct: libnfs frees the result when the callback returns.
 *
 * Handles the server gives out are kept in struct fh.  NFSv3 handles are at most
 * 64 bytes (NFS3_FHSIZE); a longer one is a server bug, so it is kept as an empty
 * handle, which no server accepts, and the test fails at its next use instead of
 * going on with some other object's bytes.
 */
#ifndef NFS_RAW_H
#define NFS_RAW_H

#include <stdbool.h>
#include <stdint.h>

/* libnfs.h first: it defines what the raw headers use */
#include <nfsc/libnfs.h>

#include <nfsc/libnfs-raw-mount.h>
#include <nfsc/libnfs-raw-nfs.h>
#include <nfsc/libnfs-raw.h>

#define NFS_PROG       100003
#define MOUNT_PROG     100005
#define NFS_RAW_FH_MAX 64
/* how long nfs_raw_finish waits for a reply: long, for a busy machine */
#define NFS_RAW_WAIT_S	 60
#define NFS_RAW_ERR_SIZE 160

struct fh {
	uint32_t len;
	unsigned char d[NFS_RAW_FH_MAX];
};

/* One outstanding call.  Zero it (or set only keep and out) before queueing. */
struct call {
	bool done;
	int status;			     /* RPC_STATUS_*, once done */
	char err[NFS_RAW_ERR_SIZE];	     /* libnfs' message with RPC_STATUS_ERROR */
	void (*keep)(void *data, void *out); /* with RPC_STATUS_SUCCESS */
	void *out;
};

/* The callback for every rpc_*_async call; PRIV is the struct call. */
void nfs_raw_on_reply(struct rpc_context *rpc, int status, void *data, void *priv);

/* Services RPC until every call in cs[0..n) is done, SECONDS at most.  0, or -1
 * (with a line on stderr) if time ran out or the connection failed: the
 * connection is then of no further use. */
int nfs_raw_wait(struct rpc_context *rpc, struct call *cs, int n, int seconds);

/* Waits for call C, SECONDS at most; QUEUED is what the rpc_*_async function
 * returned.  0 if the server replied with an accepted RPC (the result went
 * through C->keep), else -1: not queued, no reply (see nfs_raw_wait; C->done is
 * false), or an RPC error (C->err holds libnfs' message, also printed). */
int nfs_raw_finish_within(struct rpc_context *rpc, struct call *c, int queued,
			  int seconds);
/* nfs_raw_finish_within with NFS_RAW_WAIT_S. */
int nfs_raw_finish(struct rpc_context *rpc, struct call *c, int queued);

/* A new connection to program PROG version VERS at HOST:PORT, or NULL (with a
 * line on stderr).  The caller destroys it (rpc_destroy_context). */
struct rpc_context *nfs_raw_connect_to(const char *host, int port, int prog, int vers);
/* nfs_raw_connect_to 127.0.0.1. */
struct rpc_context *nfs_raw_connect(int port, int prog, int vers);

/* The libnfs view of F; it points into F, so F must outlive the call. */
nfs_fh3 nfs_raw_fh3(const struct fh *f);
/* Keeps a handle of a reply; one longer than NFS_RAW_FH_MAX is kept empty. */
void nfs_raw_copy_fh(struct fh *dst, const nfs_fh3 *src);

/* MNT of export PATH through a new connection to the MOUNT program at PORT.
 * Returns the mountstat3 of the reply, or -1 if there was no accepted reply.
 * ROOT gets the root handle with MNT3_OK (empty if it was too long), else it
 * is empty. */
int nfs_raw_mnt(int port, const char *path, struct fh *root);

/* UMNT of export PATH through a new connection to the MOUNT program at PORT
 * (its reply is void): 0 with an accepted reply, else -1. */
int nfs_raw_umnt(int port, const char *path);

/* The name of an nfsstat3 ("NFS3ERR_JUKEBOX"), or of a mountstat3
 * ("MNT3ERR_SERVERFAULT"); -1 is "no reply", a value of neither kind
 * "status N" (in one of four static buffers, so that a printf may name
 * four such; not for tests that call from threads). */
/* CLOCK_MONOTONIC in seconds. */
double nfs_raw_now(void);
/* utime+stime of process PID in clock ticks (all threads), or -1. */
long long nfs_raw_cpu_ticks(int pid);
const char *nfs_raw_stat_name(int status);
const char *nfs_raw_mnt_stat_name(int status);

/* A struct call's keep for a result read only for its status (every NFSv3
 * result starts with it): OUT is an int. */
void nfs_raw_keep_status(void *data, void *out);

/* CREATE (UNCHECKED, mode 0644, empty) or REMOVE of NAME in directory DIR.
 * The nfsstat3 of the reply, or -1 if there was no accepted reply. */
int nfs_raw_create_or_remove(struct rpc_context *rpc, const struct fh *dir,
			     const char *name, bool create);

/* ---- one call, waited for: the calls the tests make handle by handle ----
 * Each returns the reply's nfsstat3, or -1 when there was no accepted reply
 * (a line on stderr says why; the connection may be of no further use). */

/* What a reply said of one object. */
struct nfs_raw_obj {
	int status;
	struct fh fh; /* LOOKUP's handle; GETATTR's: the one asked about */
	bool attrs;   /* the attributes below came with the reply */
	uint32_t type, mode, nlink;
	uint64_t fileid, fsid, size;
	uint32_t mtime_s, mtime_ns;
};

/* Fills O's attributes from A (O->attrs false when none followed). */
void nfs_raw_keep_attrs(struct nfs_raw_obj *o, const post_op_attr *a);
struct nfs_raw_obj nfs_raw_getattr(struct rpc_context *rpc, const struct fh *fh);
struct nfs_raw_obj nfs_raw_lookup(struct rpc_context *rpc, const struct fh *dir,
				  const char *name);
/* LOOKUP of each component of PATH ('/'-separated, relative) from DIR; the
 * reply of the last one, or of the first that failed. */
struct nfs_raw_obj nfs_raw_walk(struct rpc_context *rpc, const struct fh *dir,
				const char *path);

/* READ of COUNT bytes at OFFSET through FH into BUF; *GOT and *EOF as the
 * reply said (0 and false when it failed). */
int nfs_raw_read(struct rpc_context *rpc, const struct fh *fh, uint64_t offset,
		 uint32_t count, void *buf, uint32_t *got, bool *eof);

/* The first bytes of a file (READ) or a symlink's target (READLINK), NUL
 * terminated; NFS_RAW_TEXT_MAX bytes at most. */
#define NFS_RAW_TEXT_MAX 4096
struct nfs_raw_text {
	int status;
	uint32_t count;
	bool eof;
	char data[NFS_RAW_TEXT_MAX + 1];
};
struct nfs_raw_text nfs_raw_read_text(struct rpc_context *rpc, const struct fh *fh);
struct nfs_raw_text nfs_raw_readlink(struct rpc_context *rpc, const struct fh *fh);

/* WRITE (FILE_SYNC) of LEN bytes of DATA at OFFSET through FH. */
int nfs_raw_write(struct rpc_context *rpc, const struct fh *fh, uint64_t offset,
		  const void *data, uint32_t len);
/* MKDIR (mode 0755) of NAME in DIR: the new dir's handle and attributes. */
struct nfs_raw_obj nfs_raw_mkdir(struct rpc_context *rpc, const struct fh *dir,
				 const char *name);
/* RENAME of FNAME in FDIR to TNAME in TDIR. */
int nfs_raw_rename(struct rpc_context *rpc, const struct fh *fdir, const char *fname,
		   const struct fh *tdir, const char *tname);
/* LINK: a new name TNAME in TDIR for FILE. */
int nfs_raw_link(struct rpc_context *rpc, const struct fh *file, const struct fh *tdir,
		 const char *tname);
/* SETATTR of the mode alone. */
int nfs_raw_setattr_mode(struct rpc_context *rpc, const struct fh *fh, uint32_t mode);
/* ACCESS asking for WANT (ACCESS3_* bits): the bits granted in *GRANTED. */
int nfs_raw_access(struct rpc_context *rpc, const struct fh *fh, uint32_t want,
		   uint32_t *granted);

#endif
