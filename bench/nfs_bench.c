/* SPDX-License-Identifier: Apache-2.0 */
/* nfs_bench - an NFSv3 load client on libnfs' raw async API.
 *
 *   nfs_bench [OPTIONS] WORKLOAD          against a server
 *   nfs_bench genfile PATH BYTES          write the pattern file the
 *                                         read and copy-up workloads check
 *   nfs_bench memcpy [MIB]                memcpy bandwidth of this machine
 *   nfs_bench localpairs DIR COUNT THREADS [sync|group]
 *                                         the kernel's own rate of the
 *                                         createremove row: THREADS threads
 *                                         make and remove COUNT empty files
 *                                         in a new directory below DIR, no
 *                                         NFS between; with sync each change
 *                                         fsyncs the directory (and a new
 *                                         file itself first) before the next,
 *                                         with group it waits for a syncfs
 *                                         begun after it, one thread running
 *                                         them back to back (group commit)
 *   nfs_bench localsmall DIR COUNT THREADS [sync|group]
 *                                         the same for the smallfiles row:
 *                                         each file made, then 4 KiB written
 *                                         to it, each of the two waiting as
 *                                         above (the write: the file's
 *                                         fdatasync with sync), the files
 *                                         removed untimed after
 *
 * Workloads (each checks what it got, so that a fast wrong answer fails):
 *   null         NULL calls
 *   getattr      GETATTR of the files DIR/f00000.. (handles looked up first,
 *                untimed); each size must be index % 997; with --dirs they
 *                are directories (of any size), such as merged ones
 *   lookup       LOOKUP in DIR of f%05d (must exist, size index % 997), and of
 *                gone%05d and stale%05d (must be NFS3ERR_NOENT: in the 4-layer
 *                union they are hidden by white-outs and an opaque directory)
 *   access       ACCESS of the files DIR/f00000.. (handles looked up first,
 *                untimed), asking for every right: READ, MODIFY and EXTEND
 *                must be granted (to root, on these 0644 files), EXECUTE
 *                and any right not asked for must not; post-op attributes,
 *                when present, checked as getattr's
 *   readdirplus  whole listings of DIR, one page at a time (a listing is a
 *                chain of cookies); exactly file0000000..file{N-1} must come
 *                back, once each, each with attributes and a handle
 *   listings     COUNT whole listings of a small DIR, DEPTH at once (each
 *                slot a listing of its own), checked as readdirplus's, one
 *                untimed first; counted per listing, and the READDIRPLUS
 *                calls they took are printed (one each when DIR fits a page)
 *   createremove CREATE (GUARDED) then REMOVE of a name, COUNT pairs, in a
 *                fresh directory DIR/NAME that must be empty at the end
 *   renames      CREATE (GUARDED), RENAME to another name, REMOVE of that
 *                name, COUNT triples, in a fresh directory DIR/NAME that must
 *                be empty at the end (a RENAME commits the node table twice:
 *                its intent, then the move)
 *   smallfiles   CREATE, 4 KiB WRITE (UNSTABLE), COMMIT of COUNT files in a
 *                fresh directory DIR/NAME; afterwards every file is listed
 *                and read back
 *   write        sequential WRITEs (UNSTABLE) of SIZE bytes to a new file
 *                DIR/NAME, then COMMIT; one write verifier throughout; then
 *                the size and every byte are read back
 *   read         sequential READs of DIR/NAME (SIZE bytes of the pattern);
 *                every byte is compared
 *   reads        COUNT READs of IO bytes of DIR/NAME (SIZE bytes of the
 *                pattern), item i at offset (i mod SIZE/IO) * IO, so a small
 *                file is read over and over; every byte is compared
 *   copyup       one 1-byte WRITE (UNSTABLE) in the middle of DIR/NAME, a
 *                lower file of SIZE bytes in a union (its first change copies
 *                it up); timed alone; then the byte, its neighbours, the
 *                first and last chunks and the size are read back
 *   lockpairs    NLM v4 LOCK (exclusive, non-blocking) then UNLOCK of a byte
 *                range of DIR/NAME (its handle looked up through NFS), COUNT
 *                pairs, on the NLM program at --nlm-port; each slot is one
 *                lock owner (svid, oh) of one client host with a range of
 *                its own, so no call conflicts: every reply must be
 *                NLM4_GRANTED with the call's cookie.  First, untimed, a
 *                probe: a second owner's LOCK of a range the first holds
 *                must be NLM4_DENIED, and GRANTED once the first unlocked
 *
 * Design notes
 * ------------
 * A workload is a set of items (calls, pairs, chunks) run by DEPTH slots;
 * each slot holds at most one call in flight, and when its item's last call
 * is answered it takes the next item.  The slots are spread over CONNS TCP
 * connections, all serviced by one poll loop.  With --pid, the server's
 * utime+stime (/proc/PID/stat) is read just before and after the timed part
 * only: set-up and checks are not charged to the server.
 *
 *  1. Nothing outside the timed part is counted: handle look-ups, directory
 *     creation and every check run before start_clock or after stop_clock.
 *  2. Any wrong answer (status, count, size, byte, verifier, name) stops the
 *     run and exits 1 with one line saying what was wrong.
 *  3. The file pattern is a function of the file offset (and a seed), so any
 *     chunk can be generated or checked on its own, in any order.
 *
 * Output: one line "RESULT workload=W ops=N secs=S rate=R unit=U cpu_s=C
 * cpu_us_per_op=P io=B client_cpu_s=K" (cpu fields -1 without --pid; K is
 * this client's own CPU time in the timed part).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nfs_raw.h"

#include <nfsc/libnfs-raw-nlm.h>

#define ATTR_MOD   997 /* sizes of DIR/f%05d in the getattr/lookup data */
#define SMALL_SIZE 4096
#define MAX_IO	   (1u << 20) /* libnfs 4 refuses larger replies */
#define STALL_SECS 120

struct bench;

/* Where a listing is: the cookie and verifier of its next page. */
struct page {
	uint64_t cookie;
	char verf[NFS3_COOKIEVERFSIZE];
	bool eof;
	const char *prefix; /* names must be PREFIX + decimal index */
	bool need_attr;
};

struct slot {
	struct bench *b;
	struct rpc_context *rpc;
	uint64_t item;
	int step;
	struct fh fh; /* the file this item made (smallfiles) */
	char verf[NFS3_WRITEVERFSIZE];
	struct page pg;	     /* listings: the listing under way */
	unsigned char *seen; /* listings: one byte per name, the slot's own */
	uint64_t listed;     /* listings: names of this listing so far */
};

/* Issues the first call of ITEM on slot S; returns 0 or -1. */
typedef int (*issue_fn)(struct slot *s);

struct bench {
	/* options */
	const char *host, *export, *dir, *name, *workload;
	int nfs_port, mount_port, nlm_port, depth, nconn, passes, pid;
	uint64_t count, files, size;
	unsigned io;
	/* connections */
	struct rpc_context **rpc;
	struct fh root, dirfh, file;
	/* the run */
	struct slot *slots;
	issue_fn issue;
	uint64_t next, total, answered;
	int busy;
	bool failed;
	char why[512];
	/* workload state */
	struct fh *handles;  /* getattr: DIR/f%05d; smallfiles: the files */
	unsigned char *seen; /* readdirplus / smallfiles listing: one per name */
	uint64_t listed;     /* entries listed */
	uint64_t pages;	     /* listings: READDIRPLUS calls */
	char verf[NFS3_WRITEVERFSIZE];
	bool have_verf;
	bool collect;  /* lookup: fill handles[] from f%05d */
	bool dirs;     /* getattr: DIR/f%05d are directories */
	uint64_t seed; /* pattern seed of the item being read */
	void *out;     /* where a set-up call's answer goes */
	char *buf;     /* one chunk of pattern for WRITE */
	/* timing */
	double t0, t1;
	long long cpu0, cpu1;
	double self0, self1; /* this client's own CPU seconds */
};

/* ---- failure and time ---- */

static void fail(struct bench *b, const char *fmt, ...)
{
	va_list ap;

	if (b->failed)
		return;
	b->failed = true;
	va_start(ap, fmt);
	vsnprintf(b->why, sizeof(b->why), fmt, ap);
	va_end(ap);
}

/* CPU seconds this process used so far: the client shares the machine's CPUs
 * with the server, so a row where it is near 1 per second is client-bound. */
static double self_cpu(void)
{
	struct rusage u;

	getrusage(RUSAGE_SELF, &u);
	return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec / 1e6 +
	       (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec / 1e6;
}

static void start_clock(struct bench *b)
{
	b->self0 = self_cpu();
	b->cpu0 = nfs_raw_cpu_ticks(b->pid);
	b->t0 = nfs_raw_now();
}

static void stop_clock(struct bench *b)
{
	b->t1 = nfs_raw_now();
	b->cpu1 = nfs_raw_cpu_ticks(b->pid);
	b->self1 = self_cpu();
}

/* ---- the pattern (invariant 3) ---- */

static uint64_t pattern_word(uint64_t seed, uint64_t off)
{
	return ((off / 8) + 1) * 0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull);
}

/* Fills LEN bytes at file offset OFF (both multiples of 8). */
static void pattern_fill(char *buf, uint64_t seed, uint64_t off, size_t len)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = pattern_word(seed, off + i);

		memcpy(buf + i, &w, 8);
	}
}

/* Index of the first byte of BUF (file offset OFF) that differs, or -1.
 * Word by word: this runs on every byte READ returns, on the same CPUs as the
 * server, so it must cost no more than the copy that brought the bytes. */
static long long pattern_check(const char *buf, uint64_t seed, uint64_t off, size_t len)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t got;

		memcpy(&got, buf + i, 8);
		if (got != pattern_word(seed, off + i))
			return (long long)i;
	}
	if (i < len) {
		uint64_t w = pattern_word(seed, off + i);

		if (memcmp(buf + i, &w, len - i))
			return (long long)i;
	}
	return -1;
}

/* ---- connections and the poll loop ---- */

/* Services every connection until DONE says so or the run failed. */
static int loop(struct bench *b, bool (*done)(struct bench *b, void *arg), void *arg)
{
	struct pollfd pfd[64];
	double last = nfs_raw_now();
	uint64_t seen = b->answered;

	while (!b->failed && !done(b, arg)) {
		for (int i = 0; i < b->nconn; i++) {
			pfd[i].fd = rpc_get_fd(b->rpc[i]);
			pfd[i].events = (short)rpc_which_events(b->rpc[i]);
			pfd[i].revents = 0;
		}
		if (poll(pfd, (nfds_t)b->nconn, 1000) < 0 && errno != EINTR) {
			fail(b, "poll: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < b->nconn && !b->failed; i++)
			if (pfd[i].revents && rpc_service(b->rpc[i], pfd[i].revents) < 0)
				fail(b, "connection %d: %s", i, rpc_get_error(b->rpc[i]));
		if (b->answered != seen) {
			seen = b->answered;
			last = nfs_raw_now();
		} else if (nfs_raw_now() - last > STALL_SECS) {
			fail(b, "no answer for %d s", STALL_SECS);
		}
	}
	return b->failed ? -1 : 0;
}

static bool wait_done(struct bench *b, void *arg)
{
	(void)b;
	return ((struct call *)arg)->done;
}

/* One call at a time on connection 0: the set-up and check steps. */
static int sync_wait(struct bench *b, struct call *c, int queued)
{
	if (queued) {
		fail(b, "cannot queue a call: %s", rpc_get_error(b->rpc[0]));
		return -1;
	}
	b->answered++;
	if (loop(b, wait_done, c))
		return -1;
	if (c->status != RPC_STATUS_SUCCESS) {
		fail(b, "rpc error: %s", c->err[0] ? c->err : "?");
		return -1;
	}
	return 0;
}

/* Keeps handle H in F; -1 if H is longer than an NFSv3 handle can be. */
static int fh_set(struct fh *f, const nfs_fh3 *h)
{
	nfs_raw_copy_fh(f, h);
	return f->len == h->data.data_len ? 0 : -1;
}

static void keep_mnt(void *data, void *out)
{
	struct bench *b = out;
	mountres3 *r = data;

	if (r->fhs_status != MNT3_OK ||
	    fh_set(&b->root, (nfs_fh3 *)&r->mountres3_u.mountinfo.fhandle))
		fail(b, "MNT %s: status %d", b->export, (int)r->fhs_status);
}

static void keep_fsinfo(void *data, void *out)
{
	struct bench *b = out;
	FSINFO3res *r = data;
	unsigned m;

	if (r->status != NFS3_OK) {
		fail(b, "FSINFO: status %d", (int)r->status);
		return;
	}
	m = r->FSINFO3res_u.resok.rtmax < r->FSINFO3res_u.resok.wtmax
		? r->FSINFO3res_u.resok.rtmax
		: r->FSINFO3res_u.resok.wtmax;
	if (m && m < b->io)
		b->io = m & ~7u;
}

/* Mounts the export and opens CONNS NFS connections. */
static int connect_all(struct bench *b)
{
	struct rpc_context *mnt =
	    nfs_raw_connect_to(b->host, b->mount_port, MOUNT_PROG, 3);
	struct call w = {.keep = keep_mnt, .out = b};
	int err;

	if (!mnt) {
		fail(b, "cannot connect to MOUNT on port %d", b->mount_port);
		return -1;
	}
	b->rpc = calloc((size_t)b->nconn, sizeof(*b->rpc));
	if (!b->rpc) {
		rpc_destroy_context(mnt);
		return -1;
	}
	b->rpc[0] = mnt;
	b->nconn = 1; /* loop() services the MOUNT connection alone for now */
	err = sync_wait(
	    b, &w, rpc_mount3_mnt_async(mnt, nfs_raw_on_reply, (char *)b->export, &w));
	b->nconn = 0;
	rpc_destroy_context(mnt);
	return err;
}

static int open_nfs(struct bench *b, int nconn)
{
	struct call w = {.keep = keep_fsinfo, .out = b};
	FSINFO3args a = {.fsroot = nfs_raw_fh3(&b->root)};

	for (int i = 0; i < nconn; i++) {
		b->rpc[i] = nfs_raw_connect_to(b->host, b->nfs_port, NFS_PROG, 3);
		if (!b->rpc[i]) {
			fail(b, "cannot connect to NFS on port %d", b->nfs_port);
			return -1;
		}
		b->nconn = i + 1;
	}
	return sync_wait(b, &w,
			 rpc_nfs3_fsinfo_async(b->rpc[0], nfs_raw_on_reply, &a, &w));
}

/* ---- single calls for set-up and checks ---- */

struct lookup_out {
	struct fh *fh;
	nfsstat3 status;
	fattr3 attr;
	bool have_attr;
};

static void keep_lookup(void *data, void *out)
{
	struct bench *b = out;
	LOOKUP3res *r = data;
	struct lookup_out *o = b->out;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	fh_set(o->fh, &r->LOOKUP3res_u.resok.object);
	o->have_attr = r->LOOKUP3res_u.resok.obj_attributes.attributes_follow;
	if (o->have_attr)
		o->attr = r->LOOKUP3res_u.resok.obj_attributes.post_op_attr_u.attributes;
}

static int lookup1(struct bench *b, const struct fh *dir, const char *name,
		   struct fh *out, fattr3 *attr)
{
	struct lookup_out o = {.fh = out};
	struct call w = {.keep = keep_lookup, .out = b};
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};

	b->out = &o;
	if (sync_wait(b, &w, rpc_nfs3_lookup_async(b->rpc[0], nfs_raw_on_reply, &a, &w)))
		return -1;
	b->out = NULL;
	if (o.status != NFS3_OK) {
		fail(b, "LOOKUP %s: status %d", name, (int)o.status);
		return -1;
	}
	if (attr && o.have_attr)
		*attr = o.attr;
	return 0;
}

/* Resolves a '/'-separated PATH below the root. */
static int lookup_path(struct bench *b, const char *path, struct fh *out)
{
	char copy[1024], *save = NULL;
	struct fh cur = b->root;

	snprintf(copy, sizeof(copy), "%s", path);
	for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save))
		if (lookup1(b, &cur, c, &cur, NULL))
			return -1;
	*out = cur;
	return 0;
}

static fattr3 got_attr;

static void keep_getattr(void *data, void *out)
{
	struct bench *b = out;
	GETATTR3res *r = data;

	if (r->status != NFS3_OK)
		fail(b, "GETATTR: status %d", (int)r->status);
	else
		got_attr = r->GETATTR3res_u.resok.obj_attributes;
}

static int getattr1(struct bench *b, const struct fh *f, fattr3 *attr)
{
	struct call w = {.keep = keep_getattr, .out = b};
	GETATTR3args a = {.object = nfs_raw_fh3(f)};

	if (sync_wait(b, &w, rpc_nfs3_getattr_async(b->rpc[0], nfs_raw_on_reply, &a, &w)))
		return -1;
	*attr = got_attr;
	return 0;
}

static struct fh *made_fh;

static void keep_create(void *data, void *out)
{
	struct bench *b = out;
	CREATE3res *r = data;

	if (r->status != NFS3_OK)
		fail(b, "CREATE/MKDIR %s: status %d", b->name, (int)r->status);
	else if (!r->CREATE3res_u.resok.obj.handle_follows)
		fail(b, "CREATE/MKDIR %s: no handle", b->name);
	else
		fh_set(made_fh, &r->CREATE3res_u.resok.obj.post_op_fh3_u.handle);
}

static void keep_mkdir(void *data, void *out)
{
	struct bench *b = out;
	MKDIR3res *r = data;

	if (r->status != NFS3_OK)
		fail(b, "MKDIR %s: status %d", b->name, (int)r->status);
	else if (!r->MKDIR3res_u.resok.obj.handle_follows)
		fail(b, "MKDIR %s: no handle", b->name);
	else
		fh_set(made_fh, &r->MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
}

static int mkdir1(struct bench *b, const struct fh *dir, const char *name, struct fh *out)
{
	struct call w = {.keep = keep_mkdir, .out = b};
	MKDIR3args a = {.where = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};

	a.attributes.mode.set_it = 1;
	a.attributes.mode.set_mode3_u.mode = 0755;
	made_fh = out;
	return sync_wait(b, &w,
			 rpc_nfs3_mkdir_async(b->rpc[0], nfs_raw_on_reply, &a, &w));
}

static int create1(struct bench *b, const struct fh *dir, const char *name,
		   struct fh *out)
{
	struct call w = {.keep = keep_create, .out = b};
	CREATE3args a = {.where = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};

	a.how.mode = UNCHECKED;
	a.how.createhow3_u.obj_attributes.mode.set_it = 1;
	a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
	made_fh = out;
	return sync_wait(b, &w,
			 rpc_nfs3_create_async(b->rpc[0], nfs_raw_on_reply, &a, &w));
}

static void keep_commit(void *data, void *out)
{
	struct bench *b = out;
	COMMIT3res *r = data;

	if (r->status != NFS3_OK)
		fail(b, "COMMIT: status %d", (int)r->status);
	else if (b->have_verf &&
		 memcmp(b->verf, r->COMMIT3res_u.resok.verf, NFS3_WRITEVERFSIZE))
		fail(b, "COMMIT: verifier differs from the WRITEs' (data lost)");
}

static int commit1(struct bench *b, const struct fh *f)
{
	struct call w = {.keep = keep_commit, .out = b};
	COMMIT3args a = {.file = nfs_raw_fh3(f)};

	return sync_wait(b, &w,
			 rpc_nfs3_commit_async(b->rpc[0], nfs_raw_on_reply, &a, &w));
}

/* ---- the slot engine ---- */

static bool all_idle(struct bench *b, void *arg)
{
	(void)arg;
	return b->busy == 0;
}

/* The slot's item is answered in full: take the next one or go idle. */
static void slot_next(struct slot *s)
{
	struct bench *b = s->b;

	if (b->failed || b->next >= b->total) {
		b->busy--;
		return;
	}
	s->item = b->next++;
	s->step = 0;
	if (b->issue(s)) {
		fail(b, "cannot queue a call: %s", rpc_get_error(s->rpc));
		b->busy--;
	}
}

/* Every reply goes through here first; returns false when the slot is done
 * (a transport error or a failed run). */
static bool slot_answered(struct slot *s, int status, void *data)
{
	s->b->answered++;
	if (status != RPC_STATUS_SUCCESS)
		fail(s->b, "rpc error: %s", data ? (const char *)data : "cancelled");
	if (s->b->failed) {
		s->b->busy--;
		return false;
	}
	return true;
}

/* Continues with the slot's next step: ISSUED is the queue call's result. */
static void slot_continue(struct slot *s, int queued)
{
	if (queued) {
		fail(s->b, "cannot queue a call: %s", rpc_get_error(s->rpc));
		s->b->busy--;
	}
}

/* Runs TOTAL items with ISSUE on DEPTH slots over every connection. */
static int run_items(struct bench *b, issue_fn issue, uint64_t total, int depth)
{
	b->issue = issue;
	b->next = 0;
	b->total = total;
	b->busy = depth;
	for (int i = 0; i < depth; i++) {
		b->slots[i] = (struct slot){.b = b, .rpc = b->rpc[i % b->nconn]};
		slot_next(&b->slots[i]);
	}
	return loop(b, all_idle, NULL);
}

/* ---- null ---- */

static void on_null(struct rpc_context *rpc, int status, void *data, void *priv)
{
	(void)rpc;
	if (slot_answered(priv, status, data))
		slot_next(priv);
}

static int issue_null(struct slot *s)
{
	return rpc_nfs3_null_async(s->rpc, on_null, s);
}

/* ---- getattr and lookup over DIR/f%05d ---- */

static void attr_name(char *buf, size_t len, uint64_t item, uint64_t files, int *expect)
{
	uint64_t i = item % files;

	/* one in eight names is hidden in the 4-layer union (white-out), one in
	 * eight lives only below its opaque directory: both must be NOENT */
	if (item % 8 == 6) {
		snprintf(buf, len, "gone%05" PRIu64, i);
		*expect = NFS3ERR_NOENT;
	} else if (item % 8 == 7) {
		snprintf(buf, len, "stale%05" PRIu64, i);
		*expect = NFS3ERR_NOENT;
	} else {
		snprintf(buf, len, "f%05" PRIu64, i);
		*expect = NFS3_OK;
	}
}

static bool check_attr(struct bench *b, const fattr3 *a, uint64_t i, const char *what)
{
	if (b->dirs && a->type == NF3DIR)
		return true;
	if (b->dirs || a->type != NF3REG || a->size != i % ATTR_MOD) {
		fail(b,
		     "%s f%05" PRIu64 ": type %d size %" PRIu64
		     ", want a file of %" PRIu64,
		     what, i, (int)a->type, (uint64_t)a->size, i % ATTR_MOD);
		return false;
	}
	return true;
}

static void on_lookup(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	struct bench *b = s->b;
	LOOKUP3res *r = data;
	char name[32];
	int expect;
	bool collect = b->collect;

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (collect)
		expect = NFS3_OK, snprintf(name, sizeof(name), "f%05" PRIu64, s->item);
	else
		attr_name(name, sizeof(name), s->item, b->files, &expect);
	if ((int)r->status != expect) {
		fail(b, "LOOKUP %s: status %d, want %d", name, (int)r->status, expect);
	} else if (expect == NFS3_OK) {
		post_op_attr *pa = &r->LOOKUP3res_u.resok.obj_attributes;

		if (pa->attributes_follow)
			check_attr(b, &pa->post_op_attr_u.attributes, s->item % b->files,
				   "LOOKUP");
		if (collect &&
		    fh_set(&b->handles[s->item], &r->LOOKUP3res_u.resok.object))
			fail(b, "LOOKUP %s: handle too long", name);
	}
	slot_next(s);
}

static int issue_lookup(struct slot *s)
{
	struct bench *b = s->b;
	char name[32];
	int expect;
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(&b->dirfh), .name = name}};

	if (b->collect)
		snprintf(name, sizeof(name), "f%05" PRIu64, s->item);
	else
		attr_name(name, sizeof(name), s->item, b->files, &expect);
	return rpc_nfs3_lookup_async(s->rpc, on_lookup, &a, s);
}

static void on_getattr(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	GETATTR3res *r = data;

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (r->status != NFS3_OK)
		fail(s->b, "GETATTR: status %d", (int)r->status);
	else
		check_attr(s->b, &r->GETATTR3res_u.resok.obj_attributes,
			   s->item % s->b->files, "GETATTR");
	slot_next(s);
}

static int issue_getattr(struct slot *s)
{
	struct bench *b = s->b;
	GETATTR3args a = {.object = nfs_raw_fh3(&b->handles[s->item % b->files])};

	return rpc_nfs3_getattr_async(s->rpc, on_getattr, &a, s);
}

/* Looks up every DIR/f%05d (untimed) so that GETATTR has the handles. */
static int collect_handles(struct bench *b)
{
	b->handles = calloc(b->files, sizeof(*b->handles));
	if (!b->handles)
		return -1;
	b->collect = true;
	if (run_items(b, issue_lookup, b->files, b->depth))
		return -1;
	b->collect = false;
	return 0;
}

/* ---- access over the handles of DIR/f%05d ---- */

/* Every right ACCESS can ask for. */
#define ACCESS_ASKED                                                                     \
	(ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND |               \
	 ACCESS3_DELETE | ACCESS3_EXECUTE)
/* What root holds on a 0644 regular file: reading and writing, never
 * executing (no one may).  LOOKUP and DELETE mean nothing for a
 * non-directory (RFC 1813), so a server may grant them or not. */
#define ACCESS_GRANTED (ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND)
#define ACCESS_DENIED  ACCESS3_EXECUTE

static void on_access(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	struct bench *b = s->b;
	ACCESS3res *r = data;
	ACCESS3resok *ok = &r->ACCESS3res_u.resok;
	uint64_t i = s->item % b->files;

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (r->status != NFS3_OK)
		fail(b, "ACCESS f%05" PRIu64 ": status %d", i, (int)r->status);
	else if ((ok->access & ACCESS_GRANTED) != ACCESS_GRANTED ||
		 (ok->access & (ACCESS_DENIED | ~(uint32_t)ACCESS_ASKED)))
		fail(b, "ACCESS f%05" PRIu64 ": granted 0x%x, want 0x%x and not 0x%x", i,
		     ok->access, ACCESS_GRANTED, ACCESS_DENIED);
	else if (ok->obj_attributes.attributes_follow)
		check_attr(b, &ok->obj_attributes.post_op_attr_u.attributes, i, "ACCESS");
	slot_next(s);
}

static int issue_access(struct slot *s)
{
	struct bench *b = s->b;
	ACCESS3args a = {.object = nfs_raw_fh3(&b->handles[s->item % b->files]),
			 .access = ACCESS_ASKED};

	return rpc_nfs3_access_async(s->rpc, on_access, &a, s);
}

/* ---- readdirplus: a listing is sequential (each page needs the cookie) ---- */

/* Records one listed NAME in SEEN (one byte per index) and LISTED; returns
 * false (and fails) on a wrong one. */
static bool list_name(struct bench *b, unsigned char *seen, uint64_t *listed,
		      const char *name, const char *prefix, const fattr3 *attr,
		      const nfs_fh3 *h)
{
	size_t pl = strlen(prefix);
	char *end;
	unsigned long long i;

	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return true;
	i = strncmp(name, prefix, pl) ? ~0ull : strtoull(name + pl, &end, 10);
	if (i >= b->files || *end) {
		fail(b, "listing: unexpected name %s", name);
		return false;
	}
	if (seen[i]) {
		fail(b, "listing: %s twice", name);
		return false;
	}
	seen[i] = 1;
	(*listed)++;
	if (b->handles && h && fh_set(&b->handles[i], h))
		fail(b, "listing: handle of %s too long", name);
	if (attr && b->size && attr->size != b->size)
		fail(b, "listing: %s has size %" PRIu64 ", want %" PRIu64, name,
		     (uint64_t)attr->size, b->size);
	return !b->failed;
}

/* Checks the entries of one page of listing P (each name once, each with
 * attributes and a handle) and moves P's cookie past them; false on a
 * wrong one.  The verifier and eof are the caller's to take. */
static bool page_entries(struct bench *b, struct page *p, unsigned char *seen,
			 uint64_t *listed, const READDIRPLUS3resok *ok)
{
	for (entryplus3 *e = ok->reply.entries; e; e = e->nextentry) {
		bool dot = !strcmp(e->name, ".") || !strcmp(e->name, "..");

		if (!dot && (!e->name_attributes.attributes_follow ||
			     !e->name_handle.handle_follows)) {
			fail(b, "READDIRPLUS: %s without attributes or handle", e->name);
			return false;
		}
		if (!list_name(b, seen, listed, e->name, p->prefix,
			       dot ? NULL : &e->name_attributes.post_op_attr_u.attributes,
			       dot ? NULL : &e->name_handle.post_op_fh3_u.handle))
			return false;
		p->cookie = e->cookie;
	}
	return true;
}

static void keep_rdp(void *data, void *out)
{
	struct bench *b = out;
	READDIRPLUS3res *r = data;
	struct page *p = b->out;

	if (r->status != NFS3_OK) {
		fail(b, "READDIRPLUS: status %d", (int)r->status);
		return;
	}
	if (!page_entries(b, p, b->seen, &b->listed, &r->READDIRPLUS3res_u.resok))
		return;
	memcpy(p->verf, r->READDIRPLUS3res_u.resok.cookieverf, NFS3_COOKIEVERFSIZE);
	p->eof = r->READDIRPLUS3res_u.resok.reply.eof;
}

/* Lists DIR once; the names must be PREFIX0..PREFIX{files-1}, each once. */
static int list_dir(struct bench *b, const char *prefix, uint64_t *pages)
{
	struct page p = {.prefix = prefix};

	memset(b->seen, 0, b->files);
	b->listed = 0;
	b->out = &p;
	while (!p.eof) {
		struct call w = {.keep = keep_rdp, .out = b};
		READDIRPLUS3args a = {.dir = nfs_raw_fh3(&b->dirfh),
				      .cookie = p.cookie,
				      .dircount = 16384,
				      .maxcount = 65536};

		memcpy(a.cookieverf, p.verf, NFS3_COOKIEVERFSIZE);
		if (sync_wait(
			b, &w,
			rpc_nfs3_readdirplus_async(b->rpc[0], nfs_raw_on_reply, &a, &w)))
			return -1;
		(*pages)++;
	}
	b->out = NULL;
	if (b->listed != b->files) {
		fail(b, "listing: %" PRIu64 " names, want %" PRIu64, b->listed, b->files);
		return -1;
	}
	return 0;
}

/* ---- listings: whole listings of a small directory, DEPTH at once ---- */

static void on_listing(struct rpc_context *rpc, int status, void *data, void *priv);

/* The next page of the slot's listing; step 0 starts a new listing. */
static int issue_listing(struct slot *s)
{
	struct bench *b = s->b;
	READDIRPLUS3args a = {
	    .dir = nfs_raw_fh3(&b->dirfh), .dircount = 16384, .maxcount = 65536};

	if (s->step == 0) {
		s->pg = (struct page){.prefix = "file"};
		memset(s->seen, 0, b->files);
		s->listed = 0;
	}
	a.cookie = s->pg.cookie;
	memcpy(a.cookieverf, s->pg.verf, NFS3_COOKIEVERFSIZE);
	return rpc_nfs3_readdirplus_async(s->rpc, on_listing, &a, s);
}

static void on_listing(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	struct bench *b = s->b;
	READDIRPLUS3res *r = data;
	READDIRPLUS3resok *ok = &r->READDIRPLUS3res_u.resok;

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	b->pages++;
	if (r->status != NFS3_OK) {
		fail(b, "READDIRPLUS listing %" PRIu64 ": status %d", s->item,
		     (int)r->status);
	} else if (page_entries(b, &s->pg, s->seen, &s->listed, ok) && !ok->reply.eof) {
		memcpy(s->pg.verf, ok->cookieverf, NFS3_COOKIEVERFSIZE);
		s->step++;
		slot_continue(s, issue_listing(s));
		return;
	} else if (!b->failed && s->listed != b->files) {
		fail(b, "listing %" PRIu64 ": %" PRIu64 " names, want %" PRIu64, s->item,
		     s->listed, b->files);
	}
	slot_next(s);
}

/* Runs COUNT listings on DEPTH slots, each slot checking its own names. */
static int run_listings(struct bench *b)
{
	b->issue = issue_listing;
	b->next = 0;
	b->total = b->count;
	b->busy = b->depth;
	for (int i = 0; i < b->depth; i++) {
		b->slots[i] = (struct slot){.b = b,
					    .rpc = b->rpc[i % b->nconn],
					    .seen = b->seen + (size_t)i * b->files};
		slot_next(&b->slots[i]);
	}
	return loop(b, all_idle, NULL);
}

/* ---- create + remove pairs ---- */

static void on_pair(struct rpc_context *rpc, int status, void *data, void *priv);

static int issue_pair(struct slot *s)
{
	struct bench *b = s->b;
	char name[32];
	int err;

	snprintf(name, sizeof(name), "n%07" PRIu64, s->item);
	if (s->step == 0) {
		CREATE3args a = {.where = {.dir = nfs_raw_fh3(&b->file), .name = name}};

		a.how.mode = GUARDED;
		a.how.createhow3_u.obj_attributes.mode.set_it = 1;
		a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
		err = rpc_nfs3_create_async(s->rpc, on_pair, &a, s);
	} else {
		REMOVE3args a = {.object = {.dir = nfs_raw_fh3(&b->file), .name = name}};

		err = rpc_nfs3_remove_async(s->rpc, on_pair, &a, s);
	}
	return err;
}

static void on_pair(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	nfsstat3 st = data ? *(nfsstat3 *)data : NFS3ERR_IO; /* status leads both */

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (st != NFS3_OK) {
		fail(s->b, "%s n%07" PRIu64 ": status %d", s->step ? "REMOVE" : "CREATE",
		     s->item, (int)st);
		slot_next(s);
	} else if (s->step++ == 0) {
		slot_continue(s, issue_pair(s));
	} else {
		slot_next(s);
	}
}

/* ---- create, rename, remove triples ---- */

static void on_triple(struct rpc_context *rpc, int status, void *data, void *priv);

static int issue_triple(struct slot *s)
{
	struct bench *b = s->b;
	char name[32], moved[32];

	snprintf(name, sizeof(name), "n%07" PRIu64, s->item);
	snprintf(moved, sizeof(moved), "r%07" PRIu64, s->item);
	if (s->step == 0) {
		CREATE3args a = {.where = {.dir = nfs_raw_fh3(&b->file), .name = name}};

		a.how.mode = GUARDED;
		a.how.createhow3_u.obj_attributes.mode.set_it = 1;
		a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
		return rpc_nfs3_create_async(s->rpc, on_triple, &a, s);
	}
	if (s->step == 1) {
		RENAME3args a = {.from = {.dir = nfs_raw_fh3(&b->file), .name = name},
				 .to = {.dir = nfs_raw_fh3(&b->file), .name = moved}};

		return rpc_nfs3_rename_async(s->rpc, on_triple, &a, s);
	}
	REMOVE3args a = {.object = {.dir = nfs_raw_fh3(&b->file), .name = moved}};

	return rpc_nfs3_remove_async(s->rpc, on_triple, &a, s);
}

static void on_triple(struct rpc_context *rpc, int status, void *data, void *priv)
{
	static const char *const steps[] = {"CREATE", "RENAME", "REMOVE"};
	struct slot *s = priv;
	nfsstat3 st = data ? *(nfsstat3 *)data : NFS3ERR_IO; /* status leads all */

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (st != NFS3_OK) {
		fail(s->b, "%s n%07" PRIu64 ": status %d", steps[s->step], s->item,
		     (int)st);
		slot_next(s);
	} else if (s->step++ < 2) {
		slot_continue(s, issue_triple(s));
	} else {
		slot_next(s);
	}
}

/* ---- small files: CREATE, WRITE 4 KiB, COMMIT ---- */

static void on_small(struct rpc_context *rpc, int status, void *data, void *priv);

static int issue_small(struct slot *s)
{
	struct bench *b = s->b;
	char name[32], buf[SMALL_SIZE];

	snprintf(name, sizeof(name), "s%06" PRIu64, s->item);
	if (s->step == 0) {
		CREATE3args a = {.where = {.dir = nfs_raw_fh3(&b->file), .name = name}};

		a.how.mode = UNCHECKED;
		a.how.createhow3_u.obj_attributes.mode.set_it = 1;
		a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
		return rpc_nfs3_create_async(s->rpc, on_small, &a, s);
	}
	if (s->step == 1) {
		WRITE3args a = {.file = nfs_raw_fh3(&s->fh),
				.count = SMALL_SIZE,
				.stable = UNSTABLE,
				.data = {.data_len = SMALL_SIZE, .data_val = buf}};

		pattern_fill(buf, s->item + 1, 0, SMALL_SIZE);
		return rpc_nfs3_write_async(s->rpc, on_small, &a, s);
	}
	COMMIT3args a = {.file = nfs_raw_fh3(&s->fh)};

	return rpc_nfs3_commit_async(s->rpc, on_small, &a, s);
}

/* Checks one answer of the small-file chain; returns false on a wrong one. */
static bool small_answer(struct slot *s, void *data)
{
	struct bench *b = s->b;

	if (*(nfsstat3 *)data != NFS3_OK) {
		fail(b, "small file %" PRIu64 " step %d: status %d", s->item, s->step,
		     (int)*(nfsstat3 *)data);
		return false;
	}
	if (s->step == 0) {
		CREATE3resok *ok = &((CREATE3res *)data)->CREATE3res_u.resok;

		if (!ok->obj.handle_follows ||
		    fh_set(&s->fh, &ok->obj.post_op_fh3_u.handle))
			fail(b, "CREATE s%06" PRIu64 ": no handle", s->item);
	} else if (s->step == 1) {
		WRITE3resok *ok = &((WRITE3res *)data)->WRITE3res_u.resok;

		if (ok->count != SMALL_SIZE)
			fail(b, "WRITE s%06" PRIu64 ": %u bytes", s->item, ok->count);
		memcpy(s->verf, ok->verf, NFS3_WRITEVERFSIZE);
	} else if (memcmp(s->verf, ((COMMIT3res *)data)->COMMIT3res_u.resok.verf,
			  NFS3_WRITEVERFSIZE)) {
		fail(b, "COMMIT s%06" PRIu64 ": verifier changed", s->item);
	}
	return !b->failed;
}

static void on_small(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (small_answer(s, data) && s->step++ < 2)
		slot_continue(s, issue_small(s));
	else
		slot_next(s);
}

/* ---- sequential WRITE and READ of chunks ---- */

static void on_write(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	struct bench *b = s->b;
	WRITE3res *r = data;

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (r->status != NFS3_OK) {
		fail(b, "WRITE chunk %" PRIu64 ": status %d", s->item, (int)r->status);
	} else if (r->WRITE3res_u.resok.count != b->io) {
		fail(b, "WRITE chunk %" PRIu64 ": %u of %u bytes", s->item,
		     r->WRITE3res_u.resok.count, b->io);
	} else if (!b->have_verf) {
		memcpy(b->verf, r->WRITE3res_u.resok.verf, NFS3_WRITEVERFSIZE);
		b->have_verf = true;
	} else if (memcmp(b->verf, r->WRITE3res_u.resok.verf, NFS3_WRITEVERFSIZE)) {
		fail(b, "WRITE chunk %" PRIu64 ": verifier changed", s->item);
	}
	slot_next(s);
}

static int issue_write(struct slot *s)
{
	struct bench *b = s->b;
	uint64_t off = s->item * b->io;
	WRITE3args a = {.file = nfs_raw_fh3(&b->file),
			.offset = off,
			.count = b->io,
			.stable = UNSTABLE,
			.data = {.data_len = b->io, .data_val = b->buf}};

	/* libnfs encodes the data into its own buffer before returning */
	pattern_fill(b->buf, b->seed, off, b->io);
	return rpc_nfs3_write_async(s->rpc, on_write, &a, s);
}

static uint64_t chunk_len(const struct bench *b, uint64_t item)
{
	uint64_t off = item * b->io;

	return b->size - off < b->io ? b->size - off : b->io;
}

static void on_read(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	struct bench *b = s->b;
	READ3res *r = data;
	uint64_t off = s->item * b->io, want = chunk_len(b, s->item);
	long long bad;

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (r->status != NFS3_OK) {
		fail(b, "READ at %" PRIu64 ": status %d", off, (int)r->status);
	} else if (r->READ3res_u.resok.count != want ||
		   r->READ3res_u.resok.data.data_len != want) {
		fail(b, "READ at %" PRIu64 ": %u bytes, want %" PRIu64, off,
		     r->READ3res_u.resok.count, want);
	} else if ((bad = pattern_check(r->READ3res_u.resok.data.data_val, b->seed, off,
					want)) >= 0) {
		fail(b, "READ: wrong data at offset %" PRIu64, off + (uint64_t)bad);
	} else {
		b->listed += want;
	}
	slot_next(s);
}

static int issue_read(struct slot *s)
{
	struct bench *b = s->b;
	READ3args a = {.file = nfs_raw_fh3(&b->file),
		       .offset = s->item * b->io,
		       .count = (count3)chunk_len(b, s->item)};

	return rpc_nfs3_read_async(s->rpc, on_read, &a, s);
}

/* Reads all of b->file and checks every byte and the size. */
static int read_all(struct bench *b, int depth)
{
	fattr3 attr;

	if (getattr1(b, &b->file, &attr))
		return -1;
	if (attr.size != b->size) {
		fail(b, "%s: size %" PRIu64 ", want %" PRIu64, b->name,
		     (uint64_t)attr.size, b->size);
		return -1;
	}
	b->listed = 0;
	if (run_items(b, issue_read, (b->size + b->io - 1) / b->io, depth))
		return -1;
	if (b->listed != b->size) {
		fail(b, "read %" PRIu64 " bytes, want %" PRIu64, b->listed, b->size);
		return -1;
	}
	return 0;
}

/* ---- reads: IO-byte READs cycling over a file ---- */

/* Item I reads the (I mod chunks)th whole chunk of IO bytes. */
static uint64_t reads_off(const struct bench *b, uint64_t item)
{
	return item % (b->size / b->io) * b->io;
}

static void on_reads(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	struct bench *b = s->b;
	READ3res *r = data;
	READ3resok *ok = &r->READ3res_u.resok;
	uint64_t off = reads_off(b, s->item);
	long long bad;

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (r->status != NFS3_OK)
		fail(b, "READ at %" PRIu64 ": status %d", off, (int)r->status);
	else if (ok->count != b->io || ok->data.data_len != b->io)
		fail(b, "READ at %" PRIu64 ": %u bytes, want %u", off, ok->count, b->io);
	else if ((bad = pattern_check(ok->data.data_val, 0, off, b->io)) >= 0)
		fail(b, "READ: wrong data at offset %" PRIu64, off + (uint64_t)bad);
	else if (ok->file_attributes.attributes_follow &&
		 ok->file_attributes.post_op_attr_u.attributes.size != b->size)
		fail(b, "READ at %" PRIu64 ": size %" PRIu64 ", want %" PRIu64, off,
		     (uint64_t)ok->file_attributes.post_op_attr_u.attributes.size,
		     b->size);
	slot_next(s);
}

static int issue_reads(struct slot *s)
{
	struct bench *b = s->b;
	READ3args a = {.file = nfs_raw_fh3(&b->file),
		       .offset = reads_off(b, s->item),
		       .count = b->io};

	return rpc_nfs3_read_async(s->rpc, on_reads, &a, s);
}

/* ---- copy-up ---- */

static void keep_write1(void *data, void *out)
{
	struct bench *b = out;
	WRITE3res *r = data;

	if (r->status != NFS3_OK || r->WRITE3res_u.resok.count != 1)
		fail(b, "copy-up WRITE: status %d", (int)r->status);
}

static uint64_t small_read_seed;
static uint64_t small_read_off;
static uint64_t small_read_flip; /* offset of the byte that must differ, or ~0 */

static void keep_read1(void *data, void *out)
{
	struct bench *b = out;
	READ3res *r = data;
	char want[SMALL_SIZE];
	uint64_t n;

	if (r->status != NFS3_OK) {
		fail(b, "READ: status %d", (int)r->status);
		return;
	}
	n = r->READ3res_u.resok.data.data_len;
	if (n > sizeof(want) || n != r->READ3res_u.resok.count) {
		fail(b, "READ: %" PRIu64 " bytes", n);
		return;
	}
	pattern_fill(want, small_read_seed, small_read_off, sizeof(want));
	if (small_read_flip != ~0ull)
		want[small_read_flip - small_read_off] ^= (char)0xff;
	if (memcmp(want, r->READ3res_u.resok.data.data_val, n))
		fail(b, "READ at %" PRIu64 ": wrong data", small_read_off);
	b->listed = n;
}

/* Reads LEN (<= 4 KiB) bytes at OFF of F and compares them with the pattern
 * of SEED (one byte at FLIP inverted). */
static int read_check(struct bench *b, const struct fh *f, uint64_t seed, uint64_t off,
		      unsigned len, uint64_t flip)
{
	struct call w = {.keep = keep_read1, .out = b};
	READ3args a = {.file = nfs_raw_fh3(f), .offset = off, .count = len};

	small_read_seed = seed;
	small_read_off = off;
	small_read_flip = flip;
	b->listed = 0;
	if (sync_wait(b, &w, rpc_nfs3_read_async(b->rpc[0], nfs_raw_on_reply, &a, &w)))
		return -1;
	if (b->listed != len) {
		fail(b, "READ at %" PRIu64 ": %" PRIu64 " of %u bytes", off, b->listed,
		     len);
		return -1;
	}
	return 0;
}

static int copyup_check(struct bench *b, uint64_t flip)
{
	fattr3 attr;
	uint64_t last = b->size >= SMALL_SIZE ? (b->size - SMALL_SIZE) & ~7ull : 0;
	unsigned tail =
	    (unsigned)(b->size - last < SMALL_SIZE ? b->size - last : SMALL_SIZE);

	if (getattr1(b, &b->file, &attr))
		return -1;
	if (attr.size != b->size) {
		fail(b, "after copy-up: size %" PRIu64 ", want %" PRIu64,
		     (uint64_t)attr.size, b->size);
		return -1;
	}
	return read_check(b, &b->file, 0, flip & ~4095ull, SMALL_SIZE, flip) ||
	       read_check(b, &b->file, 0, 0, SMALL_SIZE, ~0ull) ||
	       read_check(b, &b->file, 0, last, tail, ~0ull);
}

/* ---- the workloads ---- */

struct result {
	uint64_t ops;
	const char *unit;
	double scale; /* rate = ops * scale / secs */
};

static int w_null(struct bench *b, struct result *r)
{
	start_clock(b);
	if (run_items(b, issue_null, b->count, b->depth))
		return -1;
	stop_clock(b);
	*r = (struct result){b->count, "ops/s", 1};
	return 0;
}

static int w_getattr(struct bench *b, struct result *r)
{
	if (lookup_path(b, b->dir, &b->dirfh) || collect_handles(b))
		return -1;
	start_clock(b);
	if (run_items(b, issue_getattr, b->count, b->depth))
		return -1;
	stop_clock(b);
	*r = (struct result){b->count, "ops/s", 1};
	return 0;
}

static int w_lookup(struct bench *b, struct result *r)
{
	if (lookup_path(b, b->dir, &b->dirfh))
		return -1;
	start_clock(b);
	if (run_items(b, issue_lookup, b->count, b->depth))
		return -1;
	stop_clock(b);
	*r = (struct result){b->count, "ops/s", 1};
	return 0;
}

static int w_access(struct bench *b, struct result *r)
{
	if (lookup_path(b, b->dir, &b->dirfh) || collect_handles(b))
		return -1;
	start_clock(b);
	if (run_items(b, issue_access, b->count, b->depth))
		return -1;
	stop_clock(b);
	*r = (struct result){b->count, "ops/s", 1};
	return 0;
}

static int w_readdirplus(struct bench *b, struct result *r)
{
	uint64_t pages = 0;

	b->seen = malloc(b->files);
	b->size = 0;
	if (!b->seen || lookup_path(b, b->dir, &b->dirfh))
		return -1;
	if (list_dir(b, "file", &pages)) /* untimed: builds a server's listing */
		return -1;
	pages = 0;
	start_clock(b);
	for (int k = 0; k < b->passes; k++)
		if (list_dir(b, "file", &pages))
			return -1;
	stop_clock(b);
	fprintf(stderr, "readdirplus: %" PRIu64 " pages for %d passes\n", pages,
		b->passes);
	*r = (struct result){b->files * (uint64_t)b->passes, "entries/s", 1};
	return 0;
}

/* A listing counts once however many calls it took; the calls are printed
 * so that a reader knows whether its rate is one of calls. */
static int w_listings(struct bench *b, struct result *r)
{
	uint64_t pages = 0;

	b->seen = malloc(b->files * (size_t)b->depth);
	b->size = 0;
	if (!b->seen || lookup_path(b, b->dir, &b->dirfh))
		return -1;
	if (list_dir(b, "file", &pages)) /* untimed: builds a server's listing */
		return -1;
	b->pages = 0;
	start_clock(b);
	if (run_listings(b))
		return -1;
	stop_clock(b);
	fprintf(stderr,
		"listings: %" PRIu64 " READDIRPLUS calls for %" PRIu64
		" listings of %" PRIu64 " names (%.2f a listing)\n",
		b->pages, b->count, b->files, (double)b->pages / (double)b->count);
	*r = (struct result){b->count, "listings/s", 1};
	return 0;
}

/* With files = 0 every name but . and .. is a wrong one. */
static int dir_is_empty(struct bench *b)
{
	uint64_t pages = 0;

	b->files = 0;
	b->size = 0;
	b->seen = malloc(1);
	b->dirfh = b->file;
	return b->seen ? list_dir(b, "n", &pages) : -1;
}

static int w_createremove(struct bench *b, struct result *r)
{
	struct fh parent;

	if (lookup_path(b, b->dir, &parent) || mkdir1(b, &parent, b->name, &b->file))
		return -1;
	start_clock(b);
	if (run_items(b, issue_pair, b->count, b->depth))
		return -1;
	stop_clock(b);
	if (dir_is_empty(b))
		return -1;
	*r = (struct result){b->count, "pairs/s", 1};
	return 0;
}

static int w_renames(struct bench *b, struct result *r)
{
	struct fh parent;

	if (lookup_path(b, b->dir, &parent) || mkdir1(b, &parent, b->name, &b->file))
		return -1;
	start_clock(b);
	if (run_items(b, issue_triple, b->count, b->depth))
		return -1;
	stop_clock(b);
	if (dir_is_empty(b))
		return -1;
	*r = (struct result){b->count, "triples/s", 1};
	return 0;
}

static int small_read_all(struct bench *b);

static int w_smallfiles(struct bench *b, struct result *r)
{
	struct fh parent;
	uint64_t pages = 0;

	if (lookup_path(b, b->dir, &parent) || mkdir1(b, &parent, b->name, &b->file))
		return -1;
	start_clock(b);
	if (run_items(b, issue_small, b->count, b->depth))
		return -1;
	stop_clock(b);
	/* every file is listed once with its size, then read back */
	b->files = b->count;
	b->size = SMALL_SIZE;
	b->seen = malloc(b->files);
	b->handles = calloc(b->files, sizeof(*b->handles));
	b->dirfh = b->file;
	if (!b->seen || !b->handles || list_dir(b, "s", &pages) || small_read_all(b))
		return -1;
	*r = (struct result){b->count, "files/s", 1};
	return 0;
}

static int issue_small_read(struct slot *s);

static void on_small_read(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	READ3res *r = data;

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	if (r->status != NFS3_OK || r->READ3res_u.resok.data.data_len != SMALL_SIZE ||
	    pattern_check(r->READ3res_u.resok.data.data_val, s->item + 1, 0,
			  SMALL_SIZE) >= 0)
		fail(s->b, "s%06" PRIu64 ": wrong data read back", s->item);
	slot_next(s);
}

static int issue_small_read(struct slot *s)
{
	READ3args a = {.file = nfs_raw_fh3(&s->b->handles[s->item]), .count = SMALL_SIZE};

	return rpc_nfs3_read_async(s->rpc, on_small_read, &a, s);
}

static int small_read_all(struct bench *b)
{
	return run_items(b, issue_small_read, b->files, b->depth);
}

static int w_write(struct bench *b, struct result *r)
{
	struct fh parent;

	b->buf = malloc(b->io);
	if (!b->buf || b->size % b->io) {
		fail(b, "write: size must be a multiple of the I/O size %u", b->io);
		return -1;
	}
	if (lookup_path(b, b->dir, &parent) || create1(b, &parent, b->name, &b->file))
		return -1;
	start_clock(b);
	if (run_items(b, issue_write, b->size / b->io, b->depth) || commit1(b, &b->file))
		return -1;
	stop_clock(b);
	if (read_all(b, b->depth))
		return -1;
	*r = (struct result){b->size, "MB/s", 1e-6};
	return 0;
}

static int w_read(struct bench *b, struct result *r)
{
	char path[1024];
	fattr3 attr;

	snprintf(path, sizeof(path), "%s/%s", b->dir, b->name);
	if (lookup_path(b, path, &b->file) || getattr1(b, &b->file, &attr))
		return -1;
	if (attr.size != b->size) {
		fail(b, "%s: size %" PRIu64 ", want %" PRIu64, path, (uint64_t)attr.size,
		     b->size);
		return -1;
	}
	start_clock(b);
	if (read_all(b, b->depth))
		return -1;
	stop_clock(b);
	*r = (struct result){b->size, "MB/s", 1e-6};
	return 0;
}

static int w_reads(struct bench *b, struct result *r)
{
	char path[1024];
	fattr3 attr;

	snprintf(path, sizeof(path), "%s/%s", b->dir, b->name);
	if (lookup_path(b, path, &b->file) || getattr1(b, &b->file, &attr))
		return -1;
	if (attr.size != b->size || b->size < b->io) {
		fail(b, "%s: size %" PRIu64 ", want %" PRIu64 " (at least %u)", path,
		     (uint64_t)attr.size, b->size, b->io);
		return -1;
	}
	start_clock(b);
	if (run_items(b, issue_reads, b->count, b->depth))
		return -1;
	stop_clock(b);
	*r = (struct result){b->count, "ops/s", 1};
	return 0;
}

static int w_copyup(struct bench *b, struct result *r)
{
	char path[1024], one;
	fattr3 attr;
	uint64_t flip;
	struct call w = {.keep = keep_write1, .out = b};
	WRITE3args a = {.count = 1, .stable = UNSTABLE, .data = {1, &one}};
	uint64_t word;

	snprintf(path, sizeof(path), "%s/%s", b->dir, b->name);
	if (lookup_path(b, path, &b->file) || getattr1(b, &b->file, &attr))
		return -1;
	if (attr.size != b->size || b->size < 8) {
		fail(b, "%s: size %" PRIu64 ", want %" PRIu64, path, (uint64_t)attr.size,
		     b->size);
		return -1;
	}
	flip = b->size / 2 + 3;
	word = pattern_word(0, flip & ~7ull);
	one = (char)(((const char *)&word)[flip & 7] ^ 0xff);
	a.file = nfs_raw_fh3(&b->file);
	a.offset = flip;
	start_clock(b);
	if (sync_wait(b, &w, rpc_nfs3_write_async(b->rpc[0], nfs_raw_on_reply, &a, &w)))
		return -1;
	stop_clock(b);
	if (copyup_check(b, flip))
		return -1;
	*r = (struct result){b->size, "MB/s", 1e-6};
	return 0;
}

/* ---- lock pairs: NLM v4 LOCK then UNLOCK ---- */

/* Every owner is of one client host, as the processes of one NFS client
 * are: a server records a host with its status monitor at the host's first
 * LOCK (the untimed probe's), so the timed pairs measure the lock table.
 * An address, not a name: a statd will not monitor a name it cannot
 * resolve, and the bench's namespace has no resolver. */
#define LOCK_HOST   "127.0.0.1"
#define LOCK_STRIDE 4096 /* slot k holds [(k+1) * LOCK_STRIDE, +LOCK_STRIDE) */
#define PROBE_SVID  100000

/* One owner's lock of [OFF, OFF+LEN) of b->file; OH (a string) outlives the call. */
static nlm4_lock nlm_lock_of(struct bench *b, unsigned svid, char *oh, uint64_t off,
			     uint64_t len)
{
	return (nlm4_lock){.caller_name = LOCK_HOST,
			   .fh = {.data = {b->file.len, (char *)b->file.d}},
			   .oh = oh,
			   .svid = svid,
			   .l_offset = off,
			   .l_len = len};
}

/* The cookie of a call: the item and its step, so that a reply to another
 * call (or a server that does not echo it) fails the check. */
static void nlm_cookie_of(uint64_t item, int step, char buf[8])
{
	uint64_t v = item * 2 + (uint64_t)step;

	memcpy(buf, &v, 8);
}

static bool nlm_cookie_is(const nlm_cookie *c, const char want[8])
{
	return c->data.data_len == 8 && !memcmp(c->data.data_val, want, 8);
}

/* The slot's owner handle: what a client's lock manager makes per process. */
static void slot_oh(const struct slot *s, char *buf, size_t len)
{
	snprintf(buf, len, "nfs_bench-%d-%td", (int)getpid(), s - s->b->slots);
}

static void on_lockpair(struct rpc_context *rpc, int status, void *data, void *priv);

static int issue_lockpair(struct slot *s)
{
	struct bench *b = s->b;
	uint64_t k = (uint64_t)(s - b->slots);
	char oh[64], cookie[8];
	nlm4_lock l;

	slot_oh(s, oh, sizeof(oh));
	l = nlm_lock_of(b, (unsigned)k + 1, oh, (k + 1) * LOCK_STRIDE, LOCK_STRIDE);
	nlm_cookie_of(s->item, s->step, cookie);
	if (s->step == 0) {
		NLM4_LOCKargs a = {
		    .cookie = {.data = {8, cookie}}, .exclusive = 1, .lock = l};

		return rpc_nlm4_lock_async(s->rpc, on_lockpair, &a, s);
	}
	NLM4_UNLOCKargs a = {.cookie = {.data = {8, cookie}}, .lock = l};

	return rpc_nlm4_unlock_async(s->rpc, on_lockpair, &a, s);
}

static void on_lockpair(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct slot *s = priv;
	/* LOCK's and UNLOCK's results are alike: a cookie, then the status */
	NLM4_LOCKres *r = data;
	char cookie[8];

	(void)rpc;
	if (!slot_answered(s, status, data))
		return;
	nlm_cookie_of(s->item, s->step, cookie);
	if (r->status != NLM4_GRANTED || !nlm_cookie_is(&r->cookie, cookie)) {
		fail(s->b, "%s pair %" PRIu64 ": status %d%s, want NLM4_GRANTED",
		     s->step ? "UNLOCK" : "LOCK", s->item, (int)r->status,
		     nlm_cookie_is(&r->cookie, cookie) ? "" : ", another cookie");
		slot_next(s);
	} else if (s->step++ == 0) {
		slot_continue(s, issue_lockpair(s));
	} else {
		slot_next(s);
	}
}

/* What a set-up NLM call answered: its status, -1 for another cookie. */
static void keep_nlm(void *data, void *out)
{
	struct bench *b = out;
	NLM4_LOCKres *r = data;
	int *st = b->out;

	*st = nlm_cookie_is(&r->cookie, "probe-co") ? (int)r->status : -1;
}

static void keep_nlm_test(void *data, void *out)
{
	struct bench *b = out;
	NLM4_TESTres *r = data;
	int *st = b->out;

	*st = nlm_cookie_is(&r->cookie, "probe-co") ? (int)r->reply.status : -1;
}

/* One LOCK (LOCK true) or UNLOCK of [OFF, OFF+1) by probe owner WHO on
 * connection 0; fails unless it answers WANT. */
static int nlm_probe(struct bench *b, bool lock, int who, nlmstat4 want)
{
	char oh[16], cookie[8] = "probe-co";
	struct call w = {.keep = keep_nlm, .out = b};
	nlm4_lock l;
	int st = -1, queued;

	snprintf(oh, sizeof(oh), "probe-%c", 'a' + who);
	l = nlm_lock_of(b, PROBE_SVID + (unsigned)who, oh, 0, 1);
	b->out = &st;
	if (lock) {
		NLM4_LOCKargs a = {
		    .cookie = {.data = {8, cookie}}, .exclusive = 1, .lock = l};

		queued = rpc_nlm4_lock_async(b->rpc[0], nfs_raw_on_reply, &a, &w);
	} else {
		NLM4_UNLOCKargs a = {.cookie = {.data = {8, cookie}}, .lock = l};

		queued = rpc_nlm4_unlock_async(b->rpc[0], nfs_raw_on_reply, &a, &w);
	}
	if (sync_wait(b, &w, queued))
		return -1;
	if (st != (int)want) {
		fail(b, "probe: %s by owner %c: status %d, want %d",
		     lock ? "LOCK" : "UNLOCK", 'a' + who, st, (int)want);
		return -1;
	}
	return 0;
}

/* Untimed, before the pairs: a server that grants every LOCK fails here.
 * Owner a locks, b is denied, a unlocks, b gets it and unlocks. */
static int nlm_conflict_probe(struct bench *b)
{
	return nlm_probe(b, true, 0, NLM4_GRANTED) ||
	       nlm_probe(b, true, 1, NLM4_DENIED) ||
	       nlm_probe(b, false, 0, NLM4_GRANTED) ||
	       nlm_probe(b, true, 1, NLM4_GRANTED) ||
	       nlm_probe(b, false, 1, NLM4_GRANTED);
}

/* After the pairs: the whole file is free again for an exclusive lock. */
static int nlm_all_free(struct bench *b)
{
	char oh[] = "probe-c", cookie[8] = "probe-co";
	struct call w = {.keep = keep_nlm_test, .out = b};
	NLM4_TESTargs a = {.cookie = {.data = {8, cookie}},
			   .exclusive = 1,
			   .lock = nlm_lock_of(b, PROBE_SVID + 2, oh, 0, 0)};
	int st = -1;

	b->out = &st;
	if (sync_wait(b, &w, rpc_nlm4_test_async(b->rpc[0], nfs_raw_on_reply, &a, &w)))
		return -1;
	if (st != NLM4_GRANTED) {
		fail(b,
		     "TEST after the pairs: status %d, want NLM4_GRANTED (a lock left)",
		     st);
		return -1;
	}
	return 0;
}

/* Replaces the NFS connections by as many to the NLM program. */
static int open_nlm(struct bench *b)
{
	if (!b->nlm_port) {
		fail(b, "lockpairs needs --nlm-port");
		return -1;
	}
	for (int i = 0; i < b->nconn; i++) {
		rpc_destroy_context(b->rpc[i]);
		b->rpc[i] = nfs_raw_connect_to(b->host, b->nlm_port, NLM_PROGRAM, NLM_V4);
		if (!b->rpc[i]) {
			b->nconn = i; /* bench_free destroys those made */
			fail(b, "cannot connect to NLM on port %d", b->nlm_port);
			return -1;
		}
	}
	return 0;
}

static int w_lockpairs(struct bench *b, struct result *r)
{
	char path[1024];

	snprintf(path, sizeof(path), "%s/%s", b->dir, b->name);
	if (lookup_path(b, path, &b->file) || open_nlm(b) || nlm_conflict_probe(b))
		return -1;
	start_clock(b);
	if (run_items(b, issue_lockpair, b->count, b->depth))
		return -1;
	stop_clock(b);
	if (nlm_all_free(b))
		return -1;
	*r = (struct result){b->count, "pairs/s", 1};
	return 0;
}

/* ---- local helpers: pattern files and memcpy bandwidth ---- */

static int genfile(const char *path, uint64_t size)
{
	size_t chunk = 1u << 20;
	char *buf = malloc(chunk);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), rc = 0;

	if (!buf || fd < 0) {
		perror(path);
		free(buf);
		return 1;
	}
	for (uint64_t off = 0; off < size && !rc; off += chunk) {
		size_t n = size - off < chunk ? (size_t)(size - off) : chunk;

		pattern_fill(buf, 0, off, (n + 7) & ~(size_t)7);
		if (write(fd, buf, n) != (ssize_t)n)
			rc = 1;
	}
	if (close(fd) || rc)
		perror(path), rc = 1;
	free(buf);
	return rc;
}

static int memcpy_bw(size_t mib)
{
	size_t n = mib << 20;
	char *a = malloc(n), *c = malloc(n);
	double best = 0;

	if (!a || !c)
		return 1;
	memset(a, 1, n);
	memset(c, 2, n);
	for (int k = 0; k < 5; k++) {
		double t = nfs_raw_now();

		memcpy(c, a, n);
		t = nfs_raw_now() - t;
		if ((double)n / t > best)
			best = (double)n / t;
		a[k] = c[n - 1 - (size_t)k]; /* keeps the copies observable */
	}
	printf("memcpy %zu MiB: %.0f MB/s (best of 5)\n", mib, best / 1e6);
	free(a);
	free(c);
	return 0;
}

/* ---- local yardstick of CREATE+REMOVE ---- */

/* What the kernel itself does for the createremove row, so that its rates
 * can be read against a ceiling: the same names, a new empty file made with
 * mknodat as the servers make it, then removed, by THREADS threads in one
 * directory (the row's 32 outstanding pairs).  LOCAL_SYNC: each change waits
 * as a naive durable server would: the new file's fsync, then the
 * directory's (the kernel's journal shares what it can).  LOCAL_GROUP: each
 * change waits for a syncfs that began after it, and one thread runs them
 * back to back, so one syncfs serves every change made while the one
 * before ran: the most a durable server can share, with THREADS changes in
 * flight, without the protocol's costs. */
enum local_mode { LOCAL_NONE, LOCAL_SYNC, LOCAL_GROUP };

struct local_pairs {
	int dirfd, threads;
	uint64_t count;
	enum local_mode mode;
	bool small; /* localsmall: CREATE, WRITE 4 KiB, COMMIT */
	_Atomic uint64_t next;
	_Atomic int failed;
	/* LOCAL_GROUP: the syncfs runs, numbered; guarded by lock */
	pthread_mutex_t lock;
	pthread_cond_t asked, ended_cv;
	uint64_t started, ended;
	unsigned waiting;
	bool done;
};

static int fsync_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

/* Returns once a syncfs begun after the call has ended (LOCAL_GROUP). */
static int group_wait(struct local_pairs *lp)
{
	uint64_t ticket;

	pthread_mutex_lock(&lp->lock);
	ticket = lp->started + 1;
	lp->waiting++;
	pthread_cond_signal(&lp->asked);
	while (lp->ended < ticket)
		pthread_cond_wait(&lp->ended_cv, &lp->lock);
	lp->waiting--;
	pthread_mutex_unlock(&lp->lock);
	return 0;
}

/* The syncer of LOCAL_GROUP: a syncfs whenever a change waits. */
static void *group_syncer(void *arg)
{
	struct local_pairs *lp = arg;
	uint64_t n;

	pthread_mutex_lock(&lp->lock);
	for (;;) {
		while (!lp->waiting && !lp->done)
			pthread_cond_wait(&lp->asked, &lp->lock);
		if (lp->done)
			break;
		n = ++lp->started;
		pthread_mutex_unlock(&lp->lock);
		if (syncfs(lp->dirfd))
			lp->failed = errno;
		pthread_mutex_lock(&lp->lock);
		lp->ended = n;
		pthread_cond_broadcast(&lp->ended_cv);
	}
	pthread_mutex_unlock(&lp->lock);
	return NULL;
}

/* The wait of one change, as MODE asks (NAME: a file it made, or NULL). */
static int local_durable(struct local_pairs *lp, const char *name)
{
	switch (lp->mode) {
	case LOCAL_SYNC:
		return (name && fsync_at(lp->dirfd, name)) || fsync(lp->dirfd) ? -1 : 0;
	case LOCAL_GROUP:
		return group_wait(lp);
	default:
		return 0;
	}
}

static int local_pair(struct local_pairs *lp, uint64_t i)
{
	char name[32];

	snprintf(name, sizeof(name), "n%07" PRIu64, i);
	if (mknodat(lp->dirfd, name, S_IFREG | 0644, 0) || local_durable(lp, name))
		return -1;
	if (unlinkat(lp->dirfd, name, 0))
		return -1;
	return local_durable(lp, NULL);
}

/* localsmall's file I: made, durable (as a sync CREATE), 4 KiB written and
 * durable again (as a COMMIT). */
static int local_small(struct local_pairs *lp, uint64_t i)
{
	static const char data[4096];
	char name[32];
	int fd, rc;

	snprintf(name, sizeof(name), "s%07" PRIu64, i);
	fd = openat(lp->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	rc = local_durable(lp, name);
	if (!rc)
		rc = pwrite(fd, data, sizeof(data), 0) == (ssize_t)sizeof(data) ? 0 : -1;
	if (!rc)
		rc = lp->mode == LOCAL_SYNC ? fdatasync(fd) : local_durable(lp, NULL);
	close(fd);
	return rc;
}

static void *local_pairs_thread(void *arg)
{
	struct local_pairs *lp = arg;
	uint64_t i;

	while (!lp->failed && (i = lp->next++) < lp->count)
		if (lp->small ? local_small(lp, i) : local_pair(lp, i))
			lp->failed = errno;
	return NULL;
}

/* Removes localsmall's files (untimed), so that the directory can go. */
static void local_small_clean(struct local_pairs *lp)
{
	char name[32];

	for (uint64_t i = 0; i < lp->count; i++) {
		snprintf(name, sizeof(name), "s%07" PRIu64, i);
		unlinkat(lp->dirfd, name, 0);
	}
}

/* The mode localpairs' last argument names: "", "sync" or "group". */
static enum local_mode local_mode_of(const char *arg)
{
	return !strcmp(arg, "sync")    ? LOCAL_SYNC
	       : !strcmp(arg, "group") ? LOCAL_GROUP
				       : LOCAL_NONE;
}

/* Prints "LOCAL workload=localpairs ops=N secs=S rate=R unit=pairs/s
 * cpu_us_per_op=P" (localsmall, unit=files/s when SMALL) as the workloads
 * print their RESULT line. */
static int local_pairs(const char *dir, uint64_t count, int threads, enum local_mode mode,
		       bool small)
{
	static const char *const suffix[] = {"", "-sync", "-group"};
	struct local_pairs lp = {
	    .count = count, .threads = threads, .mode = mode, .small = small};
	char sub[64];
	pthread_t *t = calloc((size_t)threads, sizeof(*t)), syncer;
	int parent = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 1;
	double secs, cpu;

	snprintf(sub, sizeof(sub), "localpairs.%d", (int)getpid());
	lp.dirfd = -1;
	if (!t || threads < 1 || parent < 0 || mkdirat(parent, sub, 0755) ||
	    (lp.dirfd = openat(parent, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		perror(dir);
		goto out;
	}
	pthread_mutex_init(&lp.lock, NULL);
	pthread_cond_init(&lp.asked, NULL);
	pthread_cond_init(&lp.ended_cv, NULL);
	secs = nfs_raw_now();
	cpu = self_cpu();
	if (mode == LOCAL_GROUP)
		pthread_create(&syncer, NULL, group_syncer, &lp);
	for (int k = 0; k < threads; k++)
		pthread_create(&t[k], NULL, local_pairs_thread, &lp);
	for (int k = 0; k < threads; k++)
		pthread_join(t[k], NULL);
	if (mode == LOCAL_GROUP) {
		pthread_mutex_lock(&lp.lock);
		lp.done = true;
		pthread_cond_signal(&lp.asked);
		pthread_mutex_unlock(&lp.lock);
		pthread_join(syncer, NULL);
	}
	secs = nfs_raw_now() - secs;
	cpu = self_cpu() - cpu;
	if (lp.failed) {
		fprintf(stderr, "localpairs: %s\n", strerror(lp.failed));
		goto out;
	}
	printf("LOCAL workload=%s%s ops=%" PRIu64
	       " secs=%.3f rate=%.1f unit=%s/s cpu_us_per_op=%.2f\n",
	       small ? "localsmall" : "localpairs", suffix[mode], count, secs,
	       (double)count / secs, small ? "files" : "pairs",
	       cpu * 1e6 / (double)count);
	if (small)
		local_small_clean(&lp);
	rc = unlinkat(parent, sub, AT_REMOVEDIR) ? 1 : 0; /* must be empty again */
out:
	if (lp.dirfd >= 0)
		close(lp.dirfd);
	if (parent >= 0)
		close(parent);
	free(t);
	return rc;
}

/* ---- main ---- */

static void usage(void)
{
	fprintf(
	    stderr,
	    "usage: nfs_bench --nfs-port=P --mount-port=M --export=PATH [--host=H]\n"
	    "         [--depth=N] [--conns=N] [--count=N] [--files=N] [--size=BYTES]\n"
	    "         [--io=BYTES] [--dir=PATH] [--name=NAME] [--passes=N] [--pid=PID]\n"
	    "         [--nlm-port=P] [--dirs]\n"
	    "         "
	    "null|getattr|lookup|access|readdirplus|listings|createremove|renames|"
	    "smallfiles|write|read|reads|copyup|lockpairs\n"
	    "       nfs_bench genfile PATH BYTES\n"
	    "       nfs_bench memcpy [MIB]\n"
	    "       nfs_bench localpairs|localsmall DIR COUNT THREADS [sync|group]\n");
	exit(2);
}

static void parse(struct bench *b, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"host", 1, NULL, 'H'},	  {"nfs-port", 1, NULL, 'n'},
	    {"mount-port", 1, NULL, 'm'}, {"export", 1, NULL, 'e'},
	    {"depth", 1, NULL, 'q'},	  {"conns", 1, NULL, 'c'},
	    {"count", 1, NULL, 'N'},	  {"files", 1, NULL, 'F'},
	    {"size", 1, NULL, 's'},	  {"io", 1, NULL, 'i'},
	    {"dir", 1, NULL, 'd'},	  {"name", 1, NULL, 'a'},
	    {"passes", 1, NULL, 'P'},	  {"pid", 1, NULL, 'p'},
	    {"nlm-port", 1, NULL, 'l'},	  {"dirs", 0, NULL, 'D'},
	    {NULL, 0, NULL, 0},
	};
	int c;

	*b = (struct bench){.host = "127.0.0.1",
			    .export = "/",
			    .dir = ".",
			    .name = "bench",
			    .depth = 1,
			    .nconn = 1,
			    .passes = 2,
			    .count = 10000,
			    .files = 10000,
			    .io = MAX_IO};
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'H':
			b->host = optarg;
			break;
		case 'n':
			b->nfs_port = atoi(optarg);
			break;
		case 'm':
			b->mount_port = atoi(optarg);
			break;
		case 'e':
			b->export = optarg;
			break;
		case 'q':
			b->depth = atoi(optarg);
			break;
		case 'c':
			b->nconn = atoi(optarg);
			break;
		case 'N':
			b->count = strtoull(optarg, NULL, 0);
			break;
		case 'F':
			b->files = strtoull(optarg, NULL, 0);
			break;
		case 's':
			b->size = strtoull(optarg, NULL, 0);
			break;
		case 'i':
			b->io = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'd':
			b->dir = optarg;
			break;
		case 'a':
			b->name = optarg;
			break;
		case 'P':
			b->passes = atoi(optarg);
			break;
		case 'p':
			b->pid = atoi(optarg);
			break;
		case 'l':
			b->nlm_port = atoi(optarg);
			break;
		case 'D':
			b->dirs = true;
			break;
		default:
			usage();
		}
	}
	if (optind + 1 != argc || !b->nfs_port || !b->mount_port || b->depth < 1 ||
	    b->depth > 4096 || b->nconn < 1 || b->nconn > 64 || !b->files ||
	    b->passes < 1 || b->io < 8 || b->io > MAX_IO)
		usage();
	b->io &= ~7u;
	b->workload = argv[optind];
}

static const struct {
	const char *name;
	int (*run)(struct bench *b, struct result *r);
} workloads[] = {
    {"null", w_null},
    {"getattr", w_getattr},
    {"lookup", w_lookup},
    {"access", w_access},
    {"readdirplus", w_readdirplus},
    {"listings", w_listings},
    {"createremove", w_createremove},
    {"renames", w_renames},
    {"smallfiles", w_smallfiles},
    {"write", w_write},
    {"read", w_read},
    {"reads", w_reads},
    {"copyup", w_copyup},
    {"lockpairs", w_lockpairs},
};

static void bench_free(struct bench *b)
{
	for (int i = 0; i < b->nconn; i++)
		rpc_destroy_context(b->rpc[i]);
	free(b->rpc);
	free(b->slots);
	free(b->handles);
	free(b->seen);
	free(b->buf);
}

int main(int argc, char **argv)
{
	struct bench b;
	struct result r = {0};
	int (*run)(struct bench *, struct result *) = NULL;
	double secs, cpu = -1, per;
	int nconn;

	if (argc >= 4 && !strcmp(argv[1], "genfile"))
		return genfile(argv[2], strtoull(argv[3], NULL, 0));
	if (argc >= 2 && !strcmp(argv[1], "memcpy"))
		return memcpy_bw(argc > 2 ? strtoul(argv[2], NULL, 0) : 256);
	if (argc >= 5 &&
	    (!strcmp(argv[1], "localpairs") || !strcmp(argv[1], "localsmall")))
		return local_pairs(argv[2], strtoull(argv[3], NULL, 0), atoi(argv[4]),
				   local_mode_of(argc > 5 ? argv[5] : ""),
				   !strcmp(argv[1], "localsmall"));
	parse(&b, argc, argv);
	for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++)
		if (!strcmp(workloads[i].name, b.workload))
			run = workloads[i].run;
	if (!run)
		usage();
	nconn = b.nconn;
	b.slots = calloc((size_t)b.depth, sizeof(*b.slots));
	if (!b.slots || connect_all(&b) || open_nfs(&b, nconn) || run(&b, &r)) {
		fprintf(stderr, "nfs_bench %s: CHECK FAILED: %s\n", b.workload,
			b.failed ? b.why : "set-up failed");
		return 1;
	}
	secs = b.t1 - b.t0;
	if (b.cpu0 >= 0 && b.cpu1 >= 0)
		cpu = (double)(b.cpu1 - b.cpu0) / (double)sysconf(_SC_CLK_TCK);
	/* per operation; for the MB/s rows per MB moved */
	per = cpu < 0 ? -1.0 : cpu * 1e6 / ((double)r.ops * r.scale);
	printf("RESULT workload=%s ops=%" PRIu64
	       " secs=%.6f rate=%.1f unit=%s cpu_s=%.2f "
	       "cpu_us_per_op=%.3f io=%u client_cpu_s=%.2f\n",
	       b.workload, r.ops, secs, (double)r.ops * r.scale / secs, r.unit, cpu, per,
	       b.io, b.self1 - b.self0);
	bench_free(&b);
	return 0;
}
