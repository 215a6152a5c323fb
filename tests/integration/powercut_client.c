/* SPDX-License-Identifier: Apache-2.0 */
/* powercut_client - the client of kvm_powercut.sh, inside the VM with
 * union-nfsd: each boot it checks what the ack log says the server promised
 * before the last cut (powercut_check.c), logs what it found as the new
 * snapshot, and then drives the load that the next cut interrupts.
 *
 *   powercut_client mklower DIR COUNT
 *       writes the pool files DIR/p0000... (on the host, before mkfs): their
 *       sectors carry the lower data the check knows (powercut.h)
 *   powercut_client dump LOGIMG [FROM]
 *       prints the ack log's records (the log disk's image, on the host)
 *   powercut_client run BOOT LOGDEV FROM POOL CLAIMS MODE CUT_MS SEED
 *       BOOT: this boot's number (1...); LOGDEV: the ack log's disk; FROM:
 *       the sector of a snapshot to read the log from (0 at first); POOL:
 *       the pool files' number; CLAIMS: how many this boot may copy up;
 *       MODE: check (no load), kill (load until qemu is killed) or sysrq
 *       (load, then crash the kernel CUT_MS after it began)
 *
 * The load: PC_NW workers, each on its own connection with its own names
 * (up/wW-K in an upper-only dir, mg/wW-K in a merged one, and the pool files
 * it claimed), call after call, each chosen from what the worker's model
 * says is there: CREATE (GUARDED), WRITE FILE_SYNC, WRITE UNSTABLE and
 * COMMIT, RENAME to a free name or over a file (also across the dirs),
 * REMOVE, LINK, SETATTR of the mode, and the claim of a lower pool file
 * (LOOKUP) followed by its copy-up: a WRITE into it, a RENAME or LINK of it
 * to a slot, or a SETATTR.  Each call's intent is logged before it is sent
 * and its ack after the reply.
 *
 * Lines for the host start with "PC " on stdout (the guest points it at
 * /dev/kmsg): PC RESULT (the check's counts), PC LOSS / PC STALE / PC FAIL
 * (what went wrong), PC SNAP (where the snapshot starts), PC LOAD START.
 * Exit: 0 (check mode: all checks passed), 1 otherwise, 2 usage.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "powercut.h"

/* Paths and texts here are short and bounded (PC_PATH); one cut short
 * would fail the check anyway. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define MAX_WRITE  (64u << 10)
#define SLOT_SPAN  (256u << 10) /* where a slot file's writes start */
#define LOAD_CAP_S 900		/* kill mode: the host kills long before */

static struct pc_model model;
static struct pc_log plog;
static struct fh root;
static int nfs_port = 2049, mount_port = 20048;
static atomic_int claims_left;
static atomic_uint next_pool;
static unsigned pool_count;
static atomic_bool stopping;

/* ---- mklower ---- */

static int mklower(const char *dir, unsigned count)
{
	unsigned char sec[PC_SECTOR];
	char path[4096];

	for (unsigned p = 0; p < count; p++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/p%04u", dir, p);
		f = fopen(path, "w");
		if (!f) {
			perror(path);
			return 1;
		}
		for (uint64_t s = 0; s < pc_pool_size(p) / PC_SECTOR; s++) {
			pc_fill(PC_LOWER | p, s, sec);
			fwrite(sec, 1, sizeof(sec), f);
		}
		if (fclose(f)) {
			perror(path);
			return 1;
		}
	}
	return 0;
}

/* ---- a worker ---- */

struct worker {
	int id;
	pthread_t t;
	struct pc_worker *w;
	struct rpc_context *rpc;
	uint64_t seq, rng;
	int calls;
	int claimed; /* the name of a pool file just claimed, or -1 */
	unsigned char data[MAX_WRITE];
};

static uint64_t rnd(struct worker *k)
{
	uint64_t x = k->rng;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return k->rng = x;
}

static unsigned below(struct worker *k, unsigned n)
{
	return n ? (unsigned)(rnd(k) % n) : 0;
}

/* Indexes of K's names that hold an object (FULL) or are free slots. */
static int pick_names(struct worker *k, bool full, int *out)
{
	int n = 0;

	for (int i = 0; i < k->w->nnames; i++) {
		bool slot = strncmp(k->w->names[i].path, "pool/", 5) != 0;

		if (full ? k->w->names[i].obj >= 0 : slot && k->w->names[i].obj < 0)
			out[n++] = i;
	}
	return n;
}

static struct pc_obj *obj_of(struct worker *k, const char *path)
{
	int i = pc_name_find(k->w, path);

	return i < 0 || k->w->names[i].obj < 0 ? NULL : &k->w->objs[k->w->names[i].obj];
}

/* The size O has after every write so far. */
static uint64_t cur_size(const struct pc_obj *o)
{
	uint64_t s = o->size;

	for (int i = 0; i < o->nwl; i++)
		if (o->wl[i].off + o->wl[i].len > s)
			s = o->wl[i].off + o->wl[i].len;
	return s;
}

static bool has_pending(const struct pc_obj *o)
{
	for (int i = 0; i < o->nwl; i++)
		if (o->wl[i].st == PC_PENDING)
			return true;
	return false;
}

static void op_init(struct worker *k, struct pc_op *op, char kind, const char *a,
		    const char *b)
{
	*op = (struct pc_op){.op = ((uint64_t)plog.boot << 32) | ((uint64_t)k->id << 24) |
				   ++k->seq,
			     .kind = kind};
	snprintf(op->a, PC_PATH, "%s", a);
	snprintf(op->b, PC_PATH, "%s", b ? b : "");
}

static void choose_write(struct worker *k, struct pc_op *op, const char *path,
			 bool stable)
{
	const struct pc_obj *o = obj_of(k, path);
	uint64_t span = o->pool >= 0 ? cur_size(o) + MAX_WRITE : SLOT_SPAN,
		 len = (1 + below(k, MAX_WRITE / PC_SECTOR)) * PC_SECTOR;

	if (span + len > PC_MAXSIZE)
		span = PC_MAXSIZE - len;
	op_init(k, op, 'W', path, NULL);
	op->off = below(k, (unsigned)(span / PC_SECTOR)) * PC_SECTOR;
	op->len = len;
	op->stable = stable ? FILE_SYNC : UNSTABLE;
}

static const uint32_t modes[] = {0600, 0640, 0644};

/* A call on the object at name index I: data, attributes or its names. */
static void choose_on(struct worker *k, struct pc_op *op, int i, int *free_, int nfree,
		      int *full, int nfull)
{
	const char *a = k->w->names[i].path;
	unsigned r = below(k, 100);
	int j = nfull > 1 ? full[below(k, (unsigned)nfull)] : -1;

	if (r < 24)
		choose_write(k, op, a, true);
	else if (r < 48)
		choose_write(k, op, a, false);
	else if (r < 62 && nfree)
		op_init(k, op, 'R', a,
			k->w->names[free_[below(k, (unsigned)nfree)]].path);
	else if (r < 72 && j >= 0 && k->w->names[j].obj != k->w->names[i].obj &&
		 strncmp(k->w->names[j].path, "pool/", 5))
		op_init(k, op, 'R', a, k->w->names[j].path);
	else if (r < 82)
		op_init(k, op, 'D', a, NULL);
	else if (r < 92 && nfree)
		op_init(k, op, 'L', a,
			k->w->names[free_[below(k, (unsigned)nfree)]].path);
	else {
		op_init(k, op, 'S', a, NULL);
		op->mode = modes[below(k, 3)];
	}
}

/* A claim: LOOKUP of the next pool file (its copy-up is the next call). */
static bool choose_claim(struct worker *k, struct pc_op *op)
{
	unsigned p;
	char path[PC_PATH];

	if (k->w->nnames >= PC_MAXNAME || atomic_fetch_sub(&claims_left, 1) <= 0)
		return false;
	p = atomic_fetch_add(&next_pool, 1);
	if (p >= pool_count)
		return false;
	snprintf(path, sizeof(path), "pool/p%04u", p);
	op_init(k, op, 'P', path, NULL);
	op->off = p;
	k->claimed = pc_name_add(k->w, path);
	return true;
}

/* The copy-up of the pool file just claimed, name index I. */
static void choose_copyup(struct worker *k, struct pc_op *op, int i)
{
	int fr[PC_MAXNAME], nfr = pick_names(k, false, fr), full[PC_MAXNAME];
	int nfull = pick_names(k, true, full);

	choose_on(k, op, i, fr, nfr, full, nfull);
}

static void choose(struct worker *k, struct pc_op *op)
{
	int fr[PC_MAXNAME], nfr = pick_names(k, false, fr), full[PC_MAXNAME];
	int nfull = pick_names(k, true, full);
	unsigned r = below(k, 100);

	for (int i = 0; i < nfull && r < 12; i++) {
		const char *a = k->w->names[full[i]].path;

		if (has_pending(obj_of(k, a))) {
			op_init(k, op, 'M', a, NULL);
			return;
		}
	}
	if (r >= 12 && r < 18 && choose_claim(k, op))
		return;
	if (nfr && (r < 36 || !nfull)) {
		op_init(k, op, 'C', k->w->names[fr[below(k, (unsigned)nfr)]].path, NULL);
		return;
	}
	if (!nfull) {
		op_init(k, op, 'C', k->w->names[0].path, NULL);
		return;
	}
	choose_on(k, op, full[below(k, (unsigned)nfull)], fr, nfr, full, nfull);
}

/* ---- sending a call ---- */

static const struct fh *dir_of(const char *path, const char **base)
{
	return &model.dir_fh[pc_split(path, base)];
}

static const struct fh *fh_of(struct worker *k, const char *path)
{
	struct pc_obj *o = obj_of(k, path);

	return o && o->nfh ? &o->fh[0] : NULL;
}

static struct pc_res send_write(struct worker *k, const struct pc_op *op)
{
	for (uint64_t s = 0; s < op->len / PC_SECTOR; s++)
		pc_fill(op->op, op->off / PC_SECTOR + s, k->data + s * PC_SECTOR);
	return pc_write(k->rpc, fh_of(k, op->a), op->off, k->data, (uint32_t)op->len,
			op->stable);
}

static struct pc_res send_op(struct worker *k, const struct pc_op *op)
{
	const char *ba, *bb;
	const struct fh *da = dir_of(op->a, &ba),
			*db = op->b[0] ? dir_of(op->b, &bb) : NULL;

	switch (op->kind) {
	case 'C':
		return pc_create(k->rpc, da, ba);
	case 'P':
		return pc_lookup(k->rpc, da, ba);
	case 'W':
		return send_write(k, op);
	case 'M':
		return pc_commit(k->rpc, fh_of(k, op->a));
	case 'R':
		return pc_rename(k->rpc, da, ba, db, bb);
	case 'D':
		return pc_remove(k->rpc, da, ba);
	case 'L':
		return pc_link(k->rpc, fh_of(k, op->a), db, bb);
	default:
		return pc_setmode(k->rpc, fh_of(k, op->a), op->mode);
	}
}

static int log_intent(const struct pc_op *op, int w)
{
	return pc_log_put(&plog,
			  "I %d %" PRIx64 " %c %s %s %" PRIu64 " %" PRIu64 " %u %o", w,
			  op->op, op->kind, op->a, op->b[0] ? op->b : "-", op->off,
			  op->len, op->stable, op->mode);
}

static int log_ack(const struct pc_op *op, int w, const struct pc_res *r)
{
	char h[2 * NFS_RAW_FH_MAX + 1] = "-";

	if (r->fh.len)
		pc_hex(r->fh.d, r->fh.len, h);
	return pc_log_put(&plog, "A %d %" PRIx64 " %d %" PRIu64 " %s %s", w, op->op,
			  r->status, r->fileid, h, r->verf[0] ? r->verf : "-");
}

/* An acked call's reply as the model keeps it; false if the reply breaks
 * what the model says (printed). */
static bool take_reply(struct worker *k, struct pc_op *op, const struct pc_res *r)
{
	op->acked = true;
	op->status = r->status;
	op->fileid = r->fileid;
	op->fh = r->fh;
	snprintf(op->verf, sizeof(op->verf), "%s", r->verf);
	if (r->status != NFS3_OK) {
		printf("PC FAIL w%d %c %s %s (op %" PRIx64 "): status %d\n", k->id,
		       op->kind, op->a, op->b, op->op, r->status);
		return false;
	}
	if (op->kind == 'W' && op->stable && r->committed != FILE_SYNC) {
		printf("PC FAIL w%d WRITE FILE_SYNC answered committed %u\n", k->id,
		       r->committed);
		return false;
	}
	if ((op->kind == 'W' || op->kind == 'M') &&
	    strcmp(r->verf, model.verfs[model.nverf - 1])) {
		printf("PC FAIL w%d %c: verifier %s, this boot's is %s\n", k->id,
		       op->kind, r->verf, model.verfs[model.nverf - 1]);
		return false;
	}
	return true;
}

/* Sends OP; false when the worker must stop. */
static bool run_op(struct worker *k, struct pc_op *op)
{
	struct pc_res r;

	if (log_intent(op, k->id))
		return false;
	r = send_op(k, op);
	if (r.status < 0) {
		if (!atomic_load(&stopping))
			printf("PC FAIL w%d %c %s: no reply\n", k->id, op->kind, op->a);
		return false;
	}
	if (log_ack(op, k->id, &r) || !take_reply(k, op, &r))
		return false;
	pc_apply(k->w, op);
	k->calls++;
	return true;
}

static void *worker_main(void *arg)
{
	struct worker *k = arg;
	struct pc_op op;

	while (!atomic_load(&stopping)) {
		int claimed = k->claimed;

		k->claimed = -1;
		if (claimed >= 0 && k->w->names[claimed].obj >= 0)
			choose_copyup(k, &op, claimed);
		else
			choose(k, &op);
		if (!run_op(k, &op))
			break;
	}
	return NULL;
}

/* ---- the boot ---- */

static struct worker workers[PC_NW];

static int start_workers(uint64_t seed)
{
	for (int i = 0; i < PC_NW; i++) {
		struct worker *k = &workers[i];

		k->id = i;
		k->claimed = -1;
		k->w = &model.w[i];
		k->rng = (seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)) ^
			  ((uint64_t)plog.boot << 40)) |
			 1;
		k->rpc = nfs_raw_connect(nfs_port, NFS_PROGRAM, NFS_V3);
		if (!k->rpc) {
			printf("PC FAIL worker %d: no connection\n", i);
			return -1;
		}
	}
	printf("PC LOAD START\n");
	for (int i = 0; i < PC_NW; i++)
		pthread_create(&workers[i].t, NULL, worker_main, &workers[i]);
	return 0;
}

static void sysrq_crash(void)
{
	int fd = open("/proc/sysrq-trigger", O_WRONLY);

	if (fd >= 0 && write(fd, "c", 1) == 1)
		pause();
	printf("PC FAIL sysrq c: %s\n", strerror(errno));
}

static void sleep_ms(unsigned ms)
{
	struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

	while (nanosleep(&t, &t) && errno == EINTR)
		;
}

/* The load until the cut; returns only when something failed. */
static void load(const char *mode, unsigned cut_ms, uint64_t seed)
{
	int calls = 0;

	if (start_workers(seed))
		return;
	if (!strcmp(mode, "sysrq")) {
		sleep_ms(cut_ms);
		for (int i = 0; i < PC_NW; i++)
			calls += workers[i].calls;
		printf("PC CUT sysrq after %u ms, %d calls answered\n", cut_ms, calls);
		sysrq_crash();
		return;
	}
	sleep_ms(LOAD_CAP_S * 1000);
	printf("PC FAIL not cut after %d s\n", LOAD_CAP_S);
}

static void print_result(uint32_t boot, const struct pc_counts *c)
{
	printf("PC RESULT boot=%u acked=%d synced=%d committed=%d names=%d inflight=%d "
	       "applied=%d objects=%d lost=%d stale=%d stale_inflight=%d split=%d "
	       "halfstale=%d renewed=%d fails=%d work=%d verf=%s verf_new=%d\n",
	       boot, c->acked, c->synced, c->committed, c->names, c->inflight, c->applied,
	       c->objects, c->lost, c->stale, c->stale_inflight, c->split, c->halfstale,
	       c->renewed, c->fails, c->work, c->verf, c->verf_new);
}

/* The entries of the union's work dir (PC_WORKDIR): none once union-nfsd
 * serves and before any change, whatever the cut left there. */
static void work_clean(struct pc_counts *c)
{
	const char *path = getenv("PC_WORKDIR");
	DIR *d = path ? opendir(path) : NULL;
	struct dirent *e;

	if (!d) {
		printf("PC FAIL the work dir %s: %s\n",
		       path ? path : "(PC_WORKDIR unset)", strerror(errno));
		c->fails++;
		return;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			if (c->work++ < 5)
				printf("PC LOSS the work dir holds %s after start-up\n",
				       e->d_name);
	closedir(d);
}

static int connect_check(uint32_t boot, struct rpc_context **rpc, struct pc_counts *c)
{
	int st = nfs_raw_mnt(mount_port, "/", &root);

	if (st != MNT3_OK || !root.len) {
		printf("PC FAIL MNT /: status %d\n", st);
		return -1;
	}
	*rpc = nfs_raw_connect(nfs_port, NFS_PROGRAM, NFS_V3);
	if (!*rpc) {
		printf("PC FAIL no NFS connection\n");
		return -1;
	}
	if (pc_check(&model, *rpc, &root, c))
		return -1;
	work_clean(c);
	print_result(boot, c);
	return 0;
}

static int run(int argc, char **argv)
{
	uint32_t boot = (uint32_t)atoi(argv[2]);
	const char *dev = argv[3], *mode = argv[7];
	struct pc_counts c = {0};
	struct rpc_context *rpc = NULL;
	int err;

	(void)argc;
	pool_count = (unsigned)atoi(argv[5]);
	atomic_store(&claims_left, atoi(argv[6]));
	if (pc_model_load(&model, dev, strtoull(argv[4], NULL, 10)))
		return 1;
	err = pc_log_open(&plog, dev, boot);
	if (err) {
		printf("PC FAIL open %s: %s\n", dev, strerror(-err));
		return 1;
	}
	plog.next = model.log_end;
	if (connect_check(boot, &rpc, &c) || pc_snapshot(&model, &plog, boot))
		return 1;
	atomic_store(&next_pool, model.next_pool);
	if (strcmp(mode, "check"))
		load(mode, (unsigned)atoi(argv[8]), strtoull(argv[9], NULL, 0));
	atomic_store(&stopping, true);
	rpc_destroy_context(rpc);
	return strcmp(mode, "check") || c.lost || c.stale || c.split || c.halfstale ||
		       c.fails || c.work
		   ? 1
		   : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "mklower"))
		return mklower(argv[2], (unsigned)atoi(argv[3]));
	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "dump"))
		return pc_log_dump(argv[2], argc == 4 ? strtoull(argv[3], NULL, 10) : 0)
			   ? 1
			   : 0;
	if (argc == 10 && !strcmp(argv[1], "run"))
		return run(argc, argv);
	fprintf(stderr, "usage: powercut_client mklower DIR COUNT\n"
			"       powercut_client dump LOGIMG [FROM]\n"
			"       powercut_client run BOOT LOGDEV FROM POOL CLAIMS "
			"check|kill|sysrq CUT_MS SEED\n");
	return 2;
}
