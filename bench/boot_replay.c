/* SPDX-License-Identifier: Apache-2.0 */
/* boot_replay - replays a recorded NFSv3 client's calls against a server and
 * times the whole (issue 31's boot replay; bench/bootreplay.sh drives it).
 *
 *   boot_replay [--nfs-port=P] [--mount-port=P] [--export=PATH] [--pid=PID]
 *               [--wait=SECS] [--allow=PROC:REC:LIVE]... TRACE
 *
 * TRACE is what bench/bootreplay_trace.py made of a capture: the root handle,
 * then the calls and their replies in the order the capture saw them.
 *
 * Rules a reader needs:
 *  - Order: a call is sent only once every call whose reply the capture saw
 *    before this call was sent has been answered here.  A process waits for
 *    its answer before its next call, so its calls keep their order; calls
 *    that were in flight together in the capture may be in flight together
 *    here, no more.
 *  - Handles: each call's arguments are decoded with libnfs' own XDR
 *    routines, every handle in them replaced by this server's handle of the
 *    same object, and the call sent through libnfs' raw async API.  The map
 *    recorded handle -> this server's handle starts with the export's root
 *    (MNT, untimed) and grows from each reply here beside the recorded one:
 *    LOOKUP's object, CREATE/MKDIR/SYMLINK/MKNOD's new handle, READDIRPLUS's
 *    entries matched by name.  A READDIRPLUS cookie is mapped the same way
 *    (the entry's name, else where this server's page ended), with this
 *    server's cookie verifier.
 *  - Credentials: each call goes with its recorded AUTH_UNIX uid, gid and
 *    groups (services of the boot run as users of their own).
 *  - Checks: each reply's nfsstat3 must equal the recorded one, unless
 *    --allow=PROC:REC:LIVE (procedure number, recorded status, this server's
 *    status) says the pair may differ; a call whose handle was never learned
 *    (an earlier answer differed) is not sent and counts as a failure.  Any
 *    failure: exit 1 after the RESULT line, with the counts and the first
 *    mismatches on stderr.
 *  - Timing: from the first call sent to the last reply; with --pid the
 *    server's utime+stime (/proc/PID/stat) around it.  --calls=FILE writes
 *    each call's send time and wait, for finding where the time goes.
 *
 * Output: "RESULT workload=bootreplay ops=N secs=S rate=R unit=calls/s
 * cpu_s=C cpu_us_per_op=P mismatches=M allowed=A" (cpu fields -1 without
 * --pid).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nfs_raw.h"

#define MAP_SLOTS      (1u << 17) /* handles and cookies of one boot: ~10k */
#define MAX_GIDS       16
#define MAX_ALLOW      32
#define SHOW_MISMATCH  10
#define STALL_SECS     120
#define NFS_PROC_COUNT 22

struct replay;

struct rcall {
	struct replay *rp;
	uint32_t xid, proc, uid, gid, ngids;
	uint32_t gids[MAX_GIDS];
	const unsigned char *args, *res;
	uint32_t args_len, res_len;
	uint32_t deps; /* replies recorded before this call was sent */
	uint32_t rank; /* this call's reply's place among the recorded replies */
	double sent;   /* when it was sent here */
	double waited; /* seconds from send to reply here */
	int live;      /* this server's status */
	bool has_reply;
};

/* recorded handle -> this server's handle, or (dir, cookie) -> cookie */
struct slot {
	bool used;
	struct fh key;
	uint64_t kcookie;
	struct fh val;
	uint64_t vcookie;
	char verf[NFS3_COOKIEVERFSIZE];
};

struct allow {
	uint32_t proc;
	int rec, live;
};

struct replay {
	struct rpc_context *rpc;
	struct rcall *calls;
	uint32_t ncalls, nreplies;
	struct fh rec_root;
	struct slot *fhs, *cookies;
	struct slot *rec_only, *live_only; /* READDIRPLUS entries met on one side */
	bool *answered_rank;		   /* by recorded reply rank */
	uint32_t prefix;		   /* replies 0..prefix-1 all answered here */
	uint32_t next;			   /* the next call to send */
	uint32_t outstanding, answered;
	uint64_t mismatches, allowed, unmapped, rpc_errors;
	uint64_t by_proc[NFS_PROC_COUNT], bad_by_proc[NFS_PROC_COUNT];
	double wait_by_proc[NFS_PROC_COUNT]; /* seconds from send to reply, summed */
	struct allow allow[MAX_ALLOW];
	int nallow;
	uint32_t cred_uid, cred_gid, cred_n;
	uint32_t cred_gids[MAX_GIDS];
	bool cred_set;
	unsigned shown;
};

static const char *const proc_names[NFS_PROC_COUNT] = {
    "null",   "getattr", "setattr",  "lookup", "access",  "readlink",
    "read",   "write",	 "create",   "mkdir",  "symlink", "mknod",
    "remove", "rmdir",	 "rename",   "link",   "readdir", "readdirplus",
    "fsstat", "fsinfo",	 "pathconf", "commit"};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("boot_replay: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* ---- the trace ---- */

struct reader {
	const unsigned char *p, *end;
};

static uint32_t get_u32(struct reader *r)
{
	uint32_t v;
	if (r->end - r->p < 4)
		die("trace truncated");
	v = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 |
	    r->p[3];
	r->p += 4;
	return v;
}

static const unsigned char *get_bytes(struct reader *r, uint32_t n)
{
	const unsigned char *p = r->p;
	if ((size_t)(r->end - r->p) < n)
		die("trace truncated");
	r->p += n;
	return p;
}

static unsigned char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long n;

	if (!f)
		die("%s: %s", path, strerror(errno));
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		die("%s: cannot size it", path);
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		die("%s: cannot read it", path);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* the pending call of XID, the latest first (replies follow their calls) */
static struct rcall *call_of(struct replay *rp, uint32_t xid)
{
	for (uint32_t i = rp->ncalls; i-- > 0;)
		if (rp->calls[i].xid == xid && !rp->calls[i].has_reply)
			return &rp->calls[i];
	return NULL;
}

static void read_call(struct replay *rp, struct reader *r)
{
	struct rcall *c = &rp->calls[rp->ncalls++];
	c->xid = get_u32(r);
	c->proc = get_u32(r);
	c->uid = get_u32(r);
	c->gid = get_u32(r);
	c->ngids = get_u32(r);
	if (c->ngids > MAX_GIDS || c->proc >= NFS_PROC_COUNT)
		die("trace: bad call record");
	for (uint32_t i = 0; i < c->ngids; i++)
		c->gids[i] = get_u32(r);
	c->args_len = get_u32(r);
	c->args = get_bytes(r, c->args_len);
	c->deps = rp->nreplies;
}

static void load_trace(struct replay *rp, const unsigned char *buf, size_t len)
{
	struct reader r = {buf + 8, buf + len};
	size_t cap = len / 16 + 1;

	if (len < 8 || memcmp(buf, "BOOTRPL1", 8))
		die("not a boot trace (bootreplay_trace.py makes them)");
	rp->calls = calloc(cap, sizeof(*rp->calls));
	if (!rp->calls)
		die("out of memory");
	while (r.p < r.end) {
		uint32_t kind = get_u32(&r), xid, n;
		struct rcall *c;
		if (kind == 1) {
			n = get_u32(&r);
			if (n > NFS_RAW_FH_MAX)
				die("trace: root handle of %u bytes", n);
			rp->rec_root.len = n;
			memcpy(rp->rec_root.d, get_bytes(&r, n), n);
		} else if (kind == 2) {
			read_call(rp, &r);
		} else if (kind == 3) {
			xid = get_u32(&r);
			n = get_u32(&r);
			c = call_of(rp, xid);
			if (!c)
				die("trace: a reply to no call (xid %08x)", xid);
			c->res = get_bytes(&r, n);
			c->res_len = n;
			c->has_reply = true;
			c->rank = rp->nreplies++;
		} else {
			die("trace: record kind %u", kind);
		}
	}
	if (!rp->rec_root.len || rp->nreplies != rp->ncalls)
		die("trace: no root handle, or calls without replies");
}

/* ---- the maps ---- */

static uint64_t hash_bytes(const unsigned char *p, uint32_t n, uint64_t h)
{
	for (uint32_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static bool same_fh(const struct fh *a, const struct fh *b)
{
	return a->len == b->len && !memcmp(a->d, b->d, a->len);
}

/* KEY's slot in MAP (with COOKIE), a free one if it is not there */
static struct slot *find_slot(struct slot *map, const struct fh *key, uint64_t cookie)
{
	uint64_t h = hash_bytes(key->d, key->len, 14695981039346656037ull);
	uint32_t i = (uint32_t)(hash_bytes((const unsigned char *)&cookie, 8, h) &
				(MAP_SLOTS - 1));

	for (uint32_t n = 0; n < MAP_SLOTS; n++, i = (i + 1) & (MAP_SLOTS - 1))
		if (!map[i].used ||
		    (map[i].kcookie == cookie && same_fh(&map[i].key, key)))
			return &map[i];
	die("more than %u handles or cookies", MAP_SLOTS);
}

static void fh_of(struct fh *f, const nfs_fh3 *h)
{
	nfs_raw_copy_fh(f, h);
}

static void learn_fh(struct replay *rp, const nfs_fh3 *rec, const nfs_fh3 *live)
{
	struct fh k;
	struct slot *s;

	fh_of(&k, rec);
	s = find_slot(rp->fhs, &k, 0);
	s->used = true;
	s->key = k;
	fh_of(&s->val, live);
}

/* Rewrites H (pointing into the decoded arguments) to this server's handle;
 * false if it was never learned. */
static bool map_fh(struct replay *rp, nfs_fh3 *h)
{
	struct fh k;
	struct slot *s;

	fh_of(&k, h);
	s = find_slot(rp->fhs, &k, 0);
	if (!s->used)
		return false;
	h->data.data_len = s->val.len;
	h->data.data_val = (char *)s->val.d;
	return true;
}

static void learn_cookie(struct replay *rp, const struct fh *dir, uint64_t rec,
			 uint64_t live, const char *verf)
{
	struct slot *s = find_slot(rp->cookies, dir, rec);
	s->used = true;
	s->key = *dir;
	s->kcookie = rec;
	s->vcookie = live;
	memcpy(s->verf, verf, NFS3_COOKIEVERFSIZE);
}

/* ---- the calls: decode, rewrite, send ---- */

typedef bool (*fix_fn)(struct replay *rp, void *args);
typedef int (*send_fn)(struct rpc_context *rpc, rpc_cb cb, void *args, void *priv);
typedef bool (*xdr_fn)(ZDR *z, void *obj);
/* REC_FH: the recorded call's first handle (a READDIRPLUS's directory) */
typedef void (*learn_fn)(struct replay *rp, const struct fh *rec_fh, const void *rec,
			 const void *live);

struct proc_ops {
	size_t args_size, res_size;
	xdr_fn dec_args, dec_res;
	fix_fn fix;
	send_fn send;
	learn_fn learn;
};

#define XDR(T)                                                                           \
	static bool xdr_##T(ZDR *z, void *o)                                             \
	{                                                                                \
		return zdr_##T(z, (T *)o) != 0;                                          \
	}
#define SEND(P, T)                                                                       \
	static int send_##P(struct rpc_context *rpc, rpc_cb cb, void *a, void *priv)     \
	{                                                                                \
		return rpc_nfs3_##P##_async(rpc, cb, (T *)a, priv);                      \
	}
#define FIX1(P, T, F)                                                                    \
	static bool fix_##P(struct replay *rp, void *a)                                  \
	{                                                                                \
		return map_fh(rp, &((T *)a)->F);                                         \
	}

#define PROC(P, T)                                                                       \
	XDR(T##args)                                                                     \
	SEND(P, T##args)
PROC(getattr, GETATTR3)
PROC(setattr, SETATTR3)
PROC(lookup, LOOKUP3)
PROC(access, ACCESS3)
PROC(readlink, READLINK3)
PROC(read, READ3)
PROC(write, WRITE3)
PROC(create, CREATE3)
PROC(mkdir, MKDIR3)
PROC(symlink, SYMLINK3)
PROC(mknod, MKNOD3)
PROC(remove, REMOVE3)
PROC(rmdir, RMDIR3)
PROC(rename, RENAME3)
PROC(link, LINK3)
PROC(readdir, READDIR3)
PROC(readdirplus, READDIRPLUS3)
PROC(fsstat, FSSTAT3)
PROC(fsinfo, FSINFO3)
PROC(pathconf, PATHCONF3)
PROC(commit, COMMIT3)
XDR(LOOKUP3res)
XDR(CREATE3res)
XDR(MKDIR3res)
XDR(SYMLINK3res)
XDR(MKNOD3res)
XDR(READDIRPLUS3res)

FIX1(getattr, GETATTR3args, object)
FIX1(setattr, SETATTR3args, object)
FIX1(lookup, LOOKUP3args, what.dir)
FIX1(access, ACCESS3args, object)
FIX1(readlink, READLINK3args, symlink)
FIX1(read, READ3args, file)
FIX1(write, WRITE3args, file)
FIX1(create, CREATE3args, where.dir)
FIX1(mkdir, MKDIR3args, where.dir)
FIX1(symlink, SYMLINK3args, where.dir)
FIX1(mknod, MKNOD3args, where.dir)
FIX1(remove, REMOVE3args, object.dir)
FIX1(rmdir, RMDIR3args, object.dir)
FIX1(fsstat, FSSTAT3args, fsroot)
FIX1(fsinfo, FSINFO3args, fsroot)
FIX1(pathconf, PATHCONF3args, object)
FIX1(commit, COMMIT3args, file)

static bool fix_rename(struct replay *rp, void *a)
{
	RENAME3args *r = a;
	return map_fh(rp, &r->from.dir) && map_fh(rp, &r->to.dir);
}

static bool fix_link(struct replay *rp, void *a)
{
	LINK3args *l = a;
	return map_fh(rp, &l->file) && map_fh(rp, &l->link.dir);
}

/* cookie 0 starts a listing (verifier 0); a later one is this server's
 * cookie for the recorded one in the same directory */
static bool fix_cookie(struct replay *rp, nfs_fh3 *dir, cookie3 *cookie, char *verf)
{
	struct fh k;
	struct slot *s;

	fh_of(&k, dir);
	if (!map_fh(rp, dir))
		return false;
	if (*cookie == 0) {
		memset(verf, 0, NFS3_COOKIEVERFSIZE);
		return true;
	}
	s = find_slot(rp->cookies, &k, *cookie);
	if (!s->used)
		return false;
	*cookie = s->vcookie;
	memcpy(verf, s->verf, NFS3_COOKIEVERFSIZE);
	return true;
}

static bool fix_readdir(struct replay *rp, void *a)
{
	READDIR3args *r = a;
	return fix_cookie(rp, &r->dir, &r->cookie, r->cookieverf);
}

static bool fix_readdirplus(struct replay *rp, void *a)
{
	READDIRPLUS3args *r = a;
	return fix_cookie(rp, &r->dir, &r->cookie, r->cookieverf);
}

static void learn_lookup(struct replay *rp, const struct fh *rec_fh, const void *rec,
			 const void *live)
{
	const LOOKUP3res *r = rec, *l = live;
	(void)rec_fh;
	learn_fh(rp, &r->LOOKUP3res_u.resok.object, &l->LOOKUP3res_u.resok.object);
}

/* CREATE, MKDIR, SYMLINK and MKNOD's results begin alike: status, post_op_fh3 */
static void learn_made(struct replay *rp, const struct fh *rec_fh, const void *rec,
		       const void *live)
{
	const CREATE3res *r = rec, *l = live;
	const post_op_fh3 *rf = &r->CREATE3res_u.resok.obj,
			  *lf = &l->CREATE3res_u.resok.obj;
	(void)rec_fh;
	if (rf->handle_follows && lf->handle_follows)
		learn_fh(rp, &rf->post_op_fh3_u.handle, &lf->post_op_fh3_u.handle);
}

static const entryplus3 *entry_named(const entryplus3 *e, const char *name)
{
	for (; e; e = e->nextentry)
		if (!strcmp(e->name, name))
			return e;
	return NULL;
}

static uint64_t name_hash(const char *name)
{
	return hash_bytes((const unsigned char *)name, strlen(name),
			  14695981039346656037ull);
}

/* E, an entry of DIR in a page of one side only (RECORDED or live): its
 * handle is learnt when the other side had its name in an earlier page,
 * else kept for a later one.  Servers cut a directory into pages of their
 * own sizes (Ganesha 6.5 cuts the recorded boot's largest directory
 * elsewhere than union-nfsd did), and a later recorded page continues
 * where this server stopped, so a name can come in different pages on the
 * two sides. */
static void learn_across_pages(struct replay *rp, const struct fh *dir,
			       const entryplus3 *e, bool recorded)
{
	struct slot *mine = recorded ? rp->rec_only : rp->live_only;
	struct slot *theirs = recorded ? rp->live_only : rp->rec_only;
	uint64_t name = name_hash(e->name);
	struct slot *t = find_slot(theirs, dir, name), *s;
	struct fh h;

	if (!e->name_handle.handle_follows)
		return;
	fh_of(&h, &e->name_handle.post_op_fh3_u.handle);
	if (t->used) {
		s = find_slot(rp->fhs, recorded ? &h : &t->val, 0);
		s->used = true;
		s->key = recorded ? h : t->val;
		s->val = recorded ? t->val : h;
		return;
	}
	s = find_slot(mine, dir, name);
	s->used = true;
	s->key = *dir;
	s->kcookie = name;
	s->val = h;
}

/* Entries by name: handles, and cookies.  Where the recorded page went on
 * past this server's, its last cookie maps to this server's last, so that
 * the next recorded page continues where this server stopped. */
static void learn_readdirplus(struct replay *rp, const struct fh *dir, const void *rec,
			      const void *live)
{
	const READDIRPLUS3resok *r =
	    &((const READDIRPLUS3res *)rec)->READDIRPLUS3res_u.resok;
	const READDIRPLUS3resok *l =
	    &((const READDIRPLUS3res *)live)->READDIRPLUS3res_u.resok;
	const entryplus3 *e, *m, *rlast = NULL, *llast = NULL;
	bool last_mapped = false;

	for (e = l->reply.entries; e; e = e->nextentry) {
		llast = e;
		if (!entry_named(r->reply.entries, e->name))
			learn_across_pages(rp, dir, e, false);
	}
	for (e = r->reply.entries; e; e = e->nextentry) {
		rlast = e;
		m = entry_named(l->reply.entries, e->name);
		last_mapped = m != NULL;
		if (!m) {
			learn_across_pages(rp, dir, e, true);
			continue;
		}
		learn_cookie(rp, dir, e->cookie, m->cookie, l->cookieverf);
		if (e->name_handle.handle_follows && m->name_handle.handle_follows)
			learn_fh(rp, &e->name_handle.post_op_fh3_u.handle,
				 &m->name_handle.post_op_fh3_u.handle);
	}
	if (rlast && llast && !last_mapped)
		learn_cookie(rp, dir, rlast->cookie, llast->cookie, l->cookieverf);
}

static int send_null(struct rpc_context *rpc, rpc_cb cb, void *a, void *priv)
{
	(void)a;
	return rpc_nfs3_null_async(rpc, cb, priv);
}

#define OPS(P, T) sizeof(T##3args), 0, xdr_##T##3args, NULL, fix_##P, send_##P, NULL
#define OPS_LEARN(P, T, L)                                                               \
	sizeof(T##3args), sizeof(T##3res), xdr_##T##3args, xdr_##T##3res, fix_##P,       \
	    send_##P, L

static const struct proc_ops ops[NFS_PROC_COUNT] = {
    [0] = {0, 0, NULL, NULL, NULL, send_null, NULL},
    [1] = {OPS(getattr, GETATTR)},
    [2] = {OPS(setattr, SETATTR)},
    [3] = {OPS_LEARN(lookup, LOOKUP, learn_lookup)},
    [4] = {OPS(access, ACCESS)},
    [5] = {OPS(readlink, READLINK)},
    [6] = {OPS(read, READ)},
    [7] = {OPS(write, WRITE)},
    [8] = {OPS_LEARN(create, CREATE, learn_made)},
    [9] = {OPS_LEARN(mkdir, MKDIR, learn_made)},
    [10] = {OPS_LEARN(symlink, SYMLINK, learn_made)},
    [11] = {OPS_LEARN(mknod, MKNOD, learn_made)},
    [12] = {OPS(remove, REMOVE)},
    [13] = {OPS(rmdir, RMDIR)},
    [14] = {OPS(rename, RENAME)},
    [15] = {OPS(link, LINK)},
    [16] = {OPS(readdir, READDIR)},
    [17] = {OPS_LEARN(readdirplus, READDIRPLUS, learn_readdirplus)},
    [18] = {OPS(fsstat, FSSTAT)},
    [19] = {OPS(fsinfo, FSINFO)},
    [20] = {OPS(pathconf, PATHCONF)},
    [21] = {OPS(commit, COMMIT)},
};

/* ---- the replay ---- */

static void mark_answered(struct replay *rp, const struct rcall *c)
{
	rp->answered_rank[c->rank] = true;
	rp->answered++;
	while (rp->prefix < rp->nreplies && rp->answered_rank[rp->prefix])
		rp->prefix++;
}

static bool allowed(const struct replay *rp, uint32_t proc, int rec, int live)
{
	for (int i = 0; i < rp->nallow; i++)
		if (rp->allow[i].proc == proc && rp->allow[i].rec == rec &&
		    rp->allow[i].live == live)
			return true;
	return false;
}

static int rec_status(const struct rcall *c)
{
	if (c->proc == 0 || c->res_len < 4)
		return 0;
	return (int)((uint32_t)c->res[0] << 24 | (uint32_t)c->res[1] << 16 |
		     (uint32_t)c->res[2] << 8 | c->res[3]);
}

/* the recorded call's first handle: every NFSv3 call but NULL starts so */
static void rec_first_fh(const struct rcall *c, struct fh *f)
{
	uint32_t n = c->args_len < 4
			 ? 0
			 : ((uint32_t)c->args[0] << 24 | (uint32_t)c->args[1] << 16 |
			    (uint32_t)c->args[2] << 8 | c->args[3]);
	f->len = 0;
	if (n <= NFS_RAW_FH_MAX && n + 4 <= c->args_len) {
		f->len = n;
		memcpy(f->d, c->args + 4, n);
	}
}

/* Learns from this server's result LIVE beside the recorded one of C. */
static void learn(struct replay *rp, const struct rcall *c, const void *live)
{
	const struct proc_ops *o = &ops[c->proc];
	void *rec;
	struct fh dir;
	ZDR z;

	if (!o->learn || rec_status(c) != 0)
		return;
	rec = calloc(1, o->res_size);
	if (!rec)
		die("out of memory");
	zdrmem_create(&z, (char *)c->res, c->res_len, ZDR_DECODE);
	if (!o->dec_res(&z, rec))
		die("trace: a recorded %s reply does not decode", proc_names[c->proc]);
	rec_first_fh(c, &dir);
	o->learn(rp, &dir, rec, live);
	zdr_destroy(&z);
	free(rec);
}

static void mismatch(struct replay *rp, const struct rcall *c, int live)
{
	rp->mismatches++;
	rp->bad_by_proc[c->proc]++;
	if (rp->shown++ < SHOW_MISMATCH)
		fprintf(stderr, "boot_replay: call %td (%s): status %s, recorded %s\n",
			c - rp->calls, proc_names[c->proc], nfs_raw_stat_name(live),
			nfs_raw_stat_name(rec_status(c)));
}

static void on_reply(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct rcall *c = priv;
	struct replay *rp = c->rp;
	int live;

	(void)rpc;
	rp->outstanding--;
	c->waited = nfs_raw_now() - c->sent;
	rp->wait_by_proc[c->proc] += c->waited;
	if (status != RPC_STATUS_SUCCESS) {
		rp->rpc_errors++;
		fprintf(stderr, "boot_replay: call %td (%s): %s\n", c - rp->calls,
			proc_names[c->proc],
			status == RPC_STATUS_ERROR ? (char *)data : "cancelled");
	} else {
		live = c->proc == 0 ? 0 : *(const int *)data;
		c->live = live;
		if (live != rec_status(c)) {
			if (allowed(rp, c->proc, rec_status(c), live))
				rp->allowed++;
			else
				mismatch(rp, c, live);
		} else if (live == 0) {
			learn(rp, c, data);
		}
	}
	mark_answered(rp, c);
}

/* AUTH_UNIX of C, set only when it differs from the last call's */
static void set_cred(struct replay *rp, const struct rcall *c)
{
	struct AUTH *a;

	if (rp->cred_set && rp->cred_uid == c->uid && rp->cred_gid == c->gid &&
	    rp->cred_n == c->ngids && !memcmp(rp->cred_gids, c->gids, c->ngids * 4))
		return;
	a = authunix_create("bootreplay", c->uid, c->gid, c->ngids, (uint32_t *)c->gids);
	if (!a)
		die("authunix_create failed");
	rpc_set_auth(rp->rpc, a);
	rp->cred_set = true;
	rp->cred_uid = c->uid;
	rp->cred_gid = c->gid;
	rp->cred_n = c->ngids;
	memcpy(rp->cred_gids, c->gids, c->ngids * 4);
}

/* Decodes call C's arguments, rewrites their handles and sends it; a call
 * whose handle was never learned is counted and taken as answered. */
static void send_call(struct replay *rp, struct rcall *c)
{
	const struct proc_ops *o = &ops[c->proc];
	void *args = NULL;
	ZDR z;

	rp->by_proc[c->proc]++;
	zdrmem_create(&z, (char *)c->args, c->args_len, ZDR_DECODE);
	if (o->args_size) {
		args = calloc(1, o->args_size);
		if (!args)
			die("out of memory");
		if (!o->dec_args(&z, args))
			die("trace: call %td (%s) does not decode", c - rp->calls,
			    proc_names[c->proc]);
		if (!o->fix(rp, args)) {
			rp->unmapped++;
			rp->bad_by_proc[c->proc]++;
			if (rp->shown++ < SHOW_MISMATCH)
				fprintf(stderr,
					"boot_replay: call %td (%s): a handle or cookie "
					"never learned\n",
					c - rp->calls, proc_names[c->proc]);
			mark_answered(rp, c);
			goto out;
		}
	}
	set_cred(rp, c);
	c->sent = nfs_raw_now();
	if (o->send(rp->rpc, on_reply, args, c))
		die("call %td (%s) not queued: %s", c - rp->calls, proc_names[c->proc],
		    rpc_get_error(rp->rpc));
	rp->outstanding++;
out:
	zdr_destroy(&z);
	free(args);
}

/* Sends every call whose recorded predecessors are all answered. */
static void send_ready(struct replay *rp)
{
	while (rp->next < rp->ncalls && rp->calls[rp->next].deps <= rp->prefix)
		send_call(rp, &rp->calls[rp->next++]);
}

static void run(struct replay *rp)
{
	double last = nfs_raw_now();
	uint32_t seen = 0;

	send_ready(rp);
	while (rp->answered < rp->ncalls) {
		struct pollfd p = {rpc_get_fd(rp->rpc), (short)rpc_which_events(rp->rpc),
				   0};
		if (poll(&p, 1, 1000) < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (rpc_service(rp->rpc, p.revents) < 0)
			die("connection failed: %s", rpc_get_error(rp->rpc));
		send_ready(rp);
		if (rp->answered != seen) {
			seen = rp->answered;
			last = nfs_raw_now();
		} else if (nfs_raw_now() - last > STALL_SECS) {
			die("no reply for %d s (%u of %u calls answered)", STALL_SECS,
			    rp->answered, rp->ncalls);
		}
	}
}

struct opts {
	int nfs_port, mount_port, pid, wait_s;
	const char *export, *trace;
	const char *calls_out; /* --calls: one line per call, for a profile */
};

static void parse_allow(struct replay *rp, const char *s)
{
	struct allow *a = &rp->allow[rp->nallow];
	if (rp->nallow == MAX_ALLOW ||
	    sscanf(s, "%u:%d:%d", &a->proc, &a->rec, &a->live) != 3)
		die("--allow=PROC:REC:LIVE (numbers), at most %d", MAX_ALLOW);
	rp->nallow++;
}

static void parse_opts(int argc, char **argv, struct opts *o, struct replay *rp)
{
	static const struct option lo[] = {{"nfs-port", required_argument, 0, 'n'},
					   {"mount-port", required_argument, 0, 'm'},
					   {"export", required_argument, 0, 'e'},
					   {"pid", required_argument, 0, 'p'},
					   {"wait", required_argument, 0, 'w'},
					   {"allow", required_argument, 0, 'a'},
					   {"calls", required_argument, 0, 'c'},
					   {0, 0, 0, 0}};
	int c;

	*o = (struct opts){.nfs_port = 2049, .mount_port = 20048, .export = "/"};
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'n':
			o->nfs_port = atoi(optarg);
			break;
		case 'm':
			o->mount_port = atoi(optarg);
			break;
		case 'e':
			o->export = optarg;
			break;
		case 'p':
			o->pid = atoi(optarg);
			break;
		case 'w':
			o->wait_s = atoi(optarg);
			break;
		case 'a':
			parse_allow(rp, optarg);
			break;
		case 'c':
			o->calls_out = optarg;
			break;
		default:
			exit(2);
		}
	}
	if (optind != argc - 1) {
		fprintf(
		    stderr,
		    "usage: boot_replay [--nfs-port=P] [--mount-port=P] [--export=PATH]"
		    " [--pid=PID] [--wait=SECS] [--allow=PROC:REC:LIVE]..."
		    " [--calls=FILE] TRACE\n");
		exit(2);
	}
	o->trace = argv[optind];
}

/* MNT of the export, retried for --wait seconds (a server just started) */
static void mount_root(struct replay *rp, const struct opts *o)
{
	struct fh root;
	struct slot *s;
	double end = nfs_raw_now() + o->wait_s;
	int st;

	while ((st = nfs_raw_mnt(o->mount_port, o->export, &root)) != 0 &&
	       nfs_raw_now() < end)
		usleep(200 * 1000);
	if (st != 0 || !root.len)
		die("MNT %s: %s", o->export, nfs_raw_mnt_stat_name(st));
	s = find_slot(rp->fhs, &rp->rec_root, 0);
	s->used = true;
	s->key = rp->rec_root;
	s->val = root;
}

static void report(const struct replay *rp, double secs, long long ticks)
{
	double tck = (double)sysconf(_SC_CLK_TCK);
	double cpu = ticks < 0 ? -1 : (double)ticks / tck;

	fprintf(stderr, "boot_replay: %u calls:", rp->ncalls);
	for (int p = 0; p < NFS_PROC_COUNT; p++)
		if (rp->by_proc[p])
			fprintf(stderr, " %s %" PRIu64 "%s", proc_names[p],
				rp->by_proc[p],
				rp->bad_by_proc[p] ? " (some FAILED)" : "");
	fprintf(stderr, "\nboot_replay: ms from call to reply, summed:");
	for (int p = 0; p < NFS_PROC_COUNT; p++)
		if (rp->by_proc[p])
			fprintf(stderr, " %s %.1f", proc_names[p],
				rp->wait_by_proc[p] * 1e3);
	fprintf(stderr,
		"\nboot_replay: %" PRIu64 " statuses differ, %" PRIu64
		" allowed by --allow, %" PRIu64
		" calls not sent (handle unknown), %" PRIu64 " RPC errors\n",
		rp->mismatches, rp->allowed, rp->unmapped, rp->rpc_errors);
	printf("RESULT workload=bootreplay ops=%u secs=%.4f rate=%.1f unit=calls/s "
	       "cpu_s=%.3f"
	       " cpu_us_per_op=%.2f mismatches=%" PRIu64 " allowed=%" PRIu64 "\n",
	       rp->ncalls, secs, rp->ncalls / secs, cpu,
	       cpu < 0 ? -1.0 : cpu * 1e6 / rp->ncalls, rp->mismatches + rp->unmapped,
	       rp->allowed);
}

/* --calls=FILE: "index proc status sent_us waited_us" per call sent, the
 * send time from the first call; where a replay's time goes, call by call */
static void write_calls(const struct replay *rp, const char *path, double t0)
{
	FILE *f = fopen(path, "w");

	if (!f)
		die("%s: cannot write", path);
	for (uint32_t i = 0; i < rp->ncalls; i++) {
		const struct rcall *c = &rp->calls[i];

		if (c->sent > 0)
			fprintf(f, "%u %s %d %.1f %.1f\n", i, proc_names[c->proc],
				c->live, (c->sent - t0) * 1e6, c->waited * 1e6);
	}
	if (fclose(f))
		die("%s: cannot write", path);
}

int main(int argc, char **argv)
{
	struct replay rp = {0};
	struct opts o;
	unsigned char *buf;
	size_t len;
	long long c0;
	double t0, secs;

	parse_opts(argc, argv, &o, &rp);
	buf = read_all(o.trace, &len);
	load_trace(&rp, buf, len);
	for (uint32_t i = 0; i < rp.ncalls; i++)
		rp.calls[i].rp = &rp;
	rp.fhs = calloc(MAP_SLOTS, sizeof(*rp.fhs));
	rp.cookies = calloc(MAP_SLOTS, sizeof(*rp.cookies));
	rp.rec_only = calloc(MAP_SLOTS, sizeof(*rp.rec_only));
	rp.live_only = calloc(MAP_SLOTS, sizeof(*rp.live_only));
	rp.answered_rank = calloc(rp.nreplies + 1, 1);
	if (!rp.fhs || !rp.cookies || !rp.rec_only || !rp.live_only || !rp.answered_rank)
		die("out of memory");
	mount_root(&rp, &o);
	rp.rpc = nfs_raw_connect(o.nfs_port, NFS_PROG, 3);
	if (!rp.rpc)
		exit(1);
	c0 = nfs_raw_cpu_ticks(o.pid);
	t0 = nfs_raw_now();
	run(&rp);
	secs = nfs_raw_now() - t0;
	report(&rp, secs, c0 < 0 ? -1 : nfs_raw_cpu_ticks(o.pid) - c0);
	if (o.calls_out)
		write_calls(&rp, o.calls_out, t0);
	rpc_destroy_context(rp.rpc);
	free(rp.fhs);
	free(rp.rec_only);
	free(rp.live_only);
	free(rp.cookies);
	free(rp.answered_rank);
	free(rp.calls);
	free(buf);
	return rp.mismatches || rp.unmapped || rp.rpc_errors ? 1 : 0;
}
