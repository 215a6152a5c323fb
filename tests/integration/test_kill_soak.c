/* SPDX-License-Identifier: Apache-2.0 */
/* test_kill_soak - union-nfsd SIGKILLed at random moments under load: the
 * identity of every live object survives (issue 29).
 *
 *   test_kill_soak UNION_NFSD
 *
 * A writable union (two lower layers merged in directory m, an upper and a
 * work dir) is served; each round starts union-nfsd, lets WORKERS client
 * processes (libnfs raw calls, one connection and one call in flight each)
 * check what the rounds before left, then run creates, FILE_SYNC writes,
 * renames (to new names, over names of their own, lower files across
 * directories: copy-ups), links and removes in m and its subdirectory s,
 * and SIGKILLs the server at a random moment 50-650 ms into the load.
 * Each worker keeps a model of its objects (name, handle, fileid, the
 * version of its data) and the one call it had in flight when the
 * connection broke; the next round's check, after the restart:
 *   - every object the model holds live answers GETATTR through the
 *     handle it was given, with its fileid (a live object's handle never
 *     goes stale, whatever call was cut short: a RENAME or LINK in flight
 *     may have happened or not, never given the object a new identity);
 *   - LOOKUP of its name (the old or the new one of a RENAME in flight)
 *     gives that fileid; a REMOVE in flight is done or not, never half;
 *   - its data is what the last acknowledged FILE_SYNC WRITE wrote (or the
 *     one in flight), a lower file's is the lower file's whole: never a
 *     half copy-up;
 *   - the union's work dir is empty once the server is up again.
 * The summary line counts the calls cut short by kind.  Each worker keeps
 * a history of its calls (TMP/history<k>: round, call, names, fileid,
 * answer); a failed check prints the failing worker's last lines.
 *
 * Env: KILL_SOAK_ROUNDS (default 30), KILL_SOAK_SEED (default: the time).
 * Exit: 0 passed, 1 failed, 77 skipped.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "it_util.h"
#include "nfs_raw.h"
#include "start_server.h"

#define WORKERS	   4
#define OBJS_MAX   48
#define LOWERS	   6	       /* lower files per worker */
#define LOWER_SIZE (96 * 1024) /* a copy-up of several READ sizes */
#define DATA_SIZE  4096
#define NAME_MAX_  32
#define ROUNDS_DEF 30
#define TMP_PREFIX "/tmp/union-nfsd-killsoak."

/* Paths below the temp dir are short; a truncated one fails the test. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

enum op {
	OP_NONE,
	OP_CREATE,
	OP_WRITE,
	OP_RENAME,
	OP_RENAME_OVER,
	OP_LINK,
	OP_REMOVE,
	OP_KINDS
};
static const char *const op_names[OP_KINDS] = {"none",	      "create", "write", "rename",
					       "rename-over", "link",	"remove"};

/* One object of a worker's: a name it gave or was given. */
struct obj {
	bool live;
	bool lower;  /* a lower file never written: its data is the lower one */
	bool linked; /* shares its inode with another name: data not checked */
	char dir;    /* 'm' or 's' (m/s) */
	char name[NAME_MAX_];
	struct fh fh;
	uint64_t fileid;
	uint32_t version; /* of its data, DATA_SIZE bytes (0: empty) */
};

/* The call in flight when the connection broke. */
struct pending {
	enum op op;
	int a, b;	      /* objects (b: RENAME_OVER's target, LINK's new) */
	char dir;	      /* the new name's directory */
	char name[NAME_MAX_]; /* the new name */
	uint32_t version;     /* WRITE's */
};

struct model {
	uint32_t seq; /* names made so far */
	int nobj;
	struct obj o[OBJS_MAX];
	struct pending p;
};

struct soak {
	const char *bin;
	char tmp[PATH_MAX];
	struct test_union un;
	struct test_server srv;
	unsigned seed, seed0; /* the run's, as it goes; as given */
	int rounds;
	unsigned long cut[OP_KINDS]; /* calls in flight at a kill, by kind */
	unsigned long acked;
};

static struct soak g;

static void mkdir_p(const char *path)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			mkdir(p, 0755);
			*s = '/';
		}
	mkdir(p, 0755);
}

static int write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, data, len);
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

/* ---- a worker: its connection, its model ---- */

struct worker {
	int k;
	struct model m;
	struct rpc_context *rpc;
	struct fh root, mdir, sdir;
	unsigned seed;
	unsigned long acked;
	char path[PATH_MAX];
	FILE *history; /* line-buffered: _exit loses nothing */
	int round;
};

#define HISTORY_TAIL 60

/* Prints the last HISTORY_TAIL lines of W's history to stderr. */
static void history_tail(struct worker *w)
{
	static char lines[HISTORY_TAIL][160];
	char p[PATH_MAX];
	unsigned long n = 0;
	FILE *f;

	snprintf(p, sizeof(p), "%s/history%d", g.tmp, w->k);
	f = fopen(p, "r");
	if (!f)
		return;
	while (fgets(lines[n % HISTORY_TAIL], sizeof(lines[0]), f))
		n++;
	fclose(f);
	fprintf(stderr, "worker %d's last calls:\n", w->k);
	for (unsigned long i = n > HISTORY_TAIL ? n - HISTORY_TAIL : 0; i < n; i++)
		fprintf(stderr, "  %s", lines[i % HISTORY_TAIL]);
}

static void wfail(struct worker *w, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FAIL worker %d: ", w->k);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (w->history)
		fprintf(w->history, "FAIL\n");
	history_tail(w);
	_exit(1);
}

/* Appends a line to W's history. */
static void note(struct worker *w, const char *fmt, ...)
{
	va_list ap;

	if (!w->history)
		return;
	fprintf(w->history, "r%d ", w->round);
	va_start(ap, fmt);
	vfprintf(w->history, fmt, ap);
	va_end(ap);
	fputc('\n', w->history);
}

static void pattern(char *buf, int k, int idx, uint32_t version)
{
	for (size_t i = 0; i < DATA_SIZE; i++)
		buf[i] = (char)('a' + (k * 7 + idx * 13 + version * 31 + i) % 26);
}

static void lower_pattern(char *buf, size_t len, int k, int idx, size_t off)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)('A' + (k * 3 + idx * 5 + (off + i) / 512) % 26);
}

static const struct fh *dir_fh(struct worker *w, char dir)
{
	return dir == 's' ? &w->sdir : &w->mdir;
}

static int model_io(struct worker *w, bool save)
{
	int fd = open(w->path, save ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY, 0600);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = save ? write(fd, &w->m, sizeof(w->m)) : read(fd, &w->m, sizeof(w->m));
	close(fd);
	return n == (ssize_t)sizeof(w->m) ? 0 : -1;
}

/* ---- the calls ---- */

/* ---- the check after a restart ---- */

/* The object at NAME of DIR: its LOOKUP reply. */
static struct nfs_raw_obj look(struct worker *w, char dir, const char *name)
{
	return nfs_raw_lookup(w->rpc, dir_fh(w, dir), name);
}

static bool at_name(struct worker *w, char dir, const char *name, uint64_t fileid)
{
	struct nfs_raw_obj l = look(w, dir, name);

	return l.status == NFS3_OK && l.attrs && l.fileid == fileid;
}

/* A free slot for a new object: a dead one's, or one more (choose keeps
 * one free for the call in flight). */
static int slot_new(struct worker *w)
{
	for (int i = 0; i < w->m.nobj; i++)
		if (!w->m.o[i].live)
			return i;
	return w->m.nobj++;
}

static int live_count(const struct worker *w)
{
	int n = 0;

	for (int i = 0; i < w->m.nobj; i++)
		n += w->m.o[i].live;
	return n;
}

/* Settles the call that was in flight: the model as it is now. */
static void settle_pending(struct worker *w)
{
	struct pending *p = &w->m.p;
	struct obj *a = p->a >= 0 ? &w->m.o[p->a] : NULL;
	struct nfs_raw_obj l;

	switch (p->op) {
	case OP_CREATE:
	case OP_LINK:
		l = look(w, p->dir, p->name);
		note(w, "settled: %c/%s answers %d fileid %llu", p->dir, p->name,
		     l.status, (unsigned long long)l.fileid);
		if (l.status == NFS3_OK) {
			struct obj *n = &w->m.o[slot_new(w)];

			*n = (struct obj){.live = true,
					  .dir = p->dir,
					  .fh = l.fh,
					  .fileid = l.fileid,
					  .linked = p->op == OP_LINK};
			snprintf(n->name, sizeof(n->name), "%s", p->name);
			if (p->op == OP_LINK) {
				a->linked = true;
				if (l.fileid != a->fileid)
					wfail(w,
					      "LINK cut short: %s has fileid %llu, its "
					      "source %s %llu",
					      p->name, (unsigned long long)l.fileid,
					      a->name, (unsigned long long)a->fileid);
			}
		}
		break;
	case OP_WRITE:
		break; /* the data check takes either version */
	case OP_RENAME:
	case OP_RENAME_OVER:
		if (at_name(w, p->dir, p->name, a->fileid)) {
			note(w, "settled: renamed");
			if (p->op == OP_RENAME_OVER)
				w->m.o[p->b].live = false;
			a->dir = p->dir;
			snprintf(a->name, sizeof(a->name), "%s", p->name);
		}
		break;
	case OP_REMOVE:
		if (look(w, a->dir, a->name).status == NFS3ERR_NOENT) {
			note(w, "settled: removed");
			a->live = false;
		}
		break;
	default:
		break;
	}
}

static void check_data(struct worker *w, int idx, const struct obj *o)
{
	static char want[LOWER_SIZE], got[LOWER_SIZE];
	uint32_t n = 0, v = o->version;
	bool eof = false;
	size_t len = o->lower ? LOWER_SIZE : v ? DATA_SIZE : 0;
	int st;

	if (o->linked)
		return;
	for (size_t off = 0; off < len; off += n) {
		st = nfs_raw_read(w->rpc, &o->fh, off, 32768, got + off, &n, &eof);
		if (st != NFS3_OK)
			wfail(w, "READ of %s: %d", o->name, st);
		if (!n)
			break;
	}
	if (o->lower)
		lower_pattern(want, len, w->k, idx, 0);
	else if (v)
		pattern(want, w->k, idx, v);
	if (!memcmp(want, got, len))
		return;
	if (w->m.p.op == OP_WRITE && w->m.p.a == idx) { /* the write in flight */
		pattern(want, w->k, idx, w->m.p.version);
		if (!memcmp(want, got, DATA_SIZE))
			return;
	}
	wfail(w, "%s (fileid %llu): its data is not what was acknowledged (version %u%s)",
	      o->name, (unsigned long long)o->fileid, v, o->lower ? ", lower" : "");
}

/* Whether object IDX's first DATA_SIZE bytes are version V's. */
static bool data_is(struct worker *w, int idx, uint32_t v)
{
	char want[DATA_SIZE], got[DATA_SIZE];
	uint32_t n = 0;
	bool eof;

	pattern(want, w->k, idx, v);
	return nfs_raw_read(w->rpc, &w->m.o[idx].fh, 0, DATA_SIZE, got, &n, &eof) ==
		   NFS3_OK &&
	       n == DATA_SIZE && !memcmp(want, got, DATA_SIZE);
}

static void check_obj(struct worker *w, int idx)
{
	struct obj *o = &w->m.o[idx];
	struct nfs_raw_obj ga = nfs_raw_getattr(w->rpc, &o->fh);

	if (ga.status != NFS3_OK || !ga.attrs || ga.fileid != o->fileid)
		wfail(w,
		      "%c/%s: its handle answers %d fileid %llu, was fileid %llu "
		      "(call in flight: %s)",
		      o->dir, o->name, ga.status, (unsigned long long)ga.fileid,
		      (unsigned long long)o->fileid, op_names[w->m.p.op]);
	if (!at_name(w, o->dir, o->name, o->fileid))
		wfail(w, "%c/%s (fileid %llu) is not found under its name", o->dir,
		      o->name, (unsigned long long)o->fileid);
	check_data(w, idx, o);
}

static void check_all(struct worker *w)
{
	note(w, "in flight at the kill: %s", op_names[w->m.p.op]);
	settle_pending(w);
	for (int i = 0; i < w->m.nobj; i++)
		if (w->m.o[i].live)
			check_obj(w, i);
	if (w->m.p.op == OP_WRITE && data_is(w, w->m.p.a, w->m.p.version)) {
		w->m.o[w->m.p.a].version = w->m.p.version; /* it happened */
		w->m.o[w->m.p.a].lower = false;
	}
	memset(&w->m.p, 0, sizeof(w->m.p));
	w->m.p.a = w->m.p.b = -1;
}

/* ---- the load ---- */

static int pick_live(struct worker *w, int not )
{
	int live[OBJS_MAX], n = 0;

	for (int i = 0; i < w->m.nobj; i++)
		if (w->m.o[i].live && i != not )
			live[n++] = i;
	return n ? live[rand_r(&w->seed) % n] : -1;
}

static void new_name(struct worker *w, struct pending *p)
{
	p->dir = rand_r(&w->seed) % 3 ? 'm' : 's';
	snprintf(p->name, sizeof(p->name), "w%d_%u", w->k, ++w->m.seq);
}

/* Chooses the next call into W->m.p (live objects permitting). */
static void choose(struct worker *w)
{
	struct pending *p = &w->m.p;
	int r = rand_r(&w->seed) % 100;
	bool room = live_count(w) < OBJS_MAX - 1;

	memset(p, 0, sizeof(*p));
	p->a = pick_live(w, -1);
	p->b = -1;
	if (p->a < 0 || (r < 15 && room))
		p->op = OP_CREATE;
	else if (r < 40)
		p->op = OP_WRITE;
	else if (r < 65)
		p->op = OP_RENAME;
	else if (r < 75)
		p->op = OP_RENAME_OVER;
	else if (r < 85 && room)
		p->op = OP_LINK;
	else
		p->op = OP_REMOVE;
	if (p->op == OP_RENAME_OVER) {
		p->b = pick_live(w, p->a);
		if (p->b < 0 || w->m.o[p->b].linked || w->m.o[p->a].linked ||
		    w->m.o[p->b].fileid == w->m.o[p->a].fileid)
			p->op = OP_RENAME;
	}
	if (p->op == OP_CREATE || p->op == OP_RENAME || p->op == OP_LINK)
		new_name(w, p);
	if (p->op == OP_RENAME_OVER) {
		p->dir = w->m.o[p->b].dir;
		snprintf(p->name, sizeof(p->name), "%s", w->m.o[p->b].name);
	}
	if (p->op == OP_WRITE)
		p->version = w->m.o[p->a].version + 1;
}

/* Sends W->m.p; false when the connection broke (the call stays in
 * flight in the model). */
static bool run_one(struct worker *w)
{
	struct pending *p = &w->m.p;
	struct obj *a = p->a >= 0 ? &w->m.o[p->a] : NULL;
	char buf[DATA_SIZE];
	struct nfs_raw_obj l = {0};
	int st = -1, n;

	note(w, "%s %c/%s (fileid %llu) -> %c/%s", op_names[p->op], a ? a->dir : '-',
	     a ? a->name : "-", a ? (unsigned long long)a->fileid : 0ull,
	     p->dir ? p->dir : '-', p->name[0] ? p->name : "-");
	switch (p->op) {
	case OP_CREATE:
		st = nfs_raw_create_or_remove(w->rpc, dir_fh(w, p->dir), p->name, true);
		break;
	case OP_WRITE:
		pattern(buf, w->k, p->a, p->version);
		st = nfs_raw_write(w->rpc, &a->fh, 0, buf, DATA_SIZE);
		break;
	case OP_RENAME:
	case OP_RENAME_OVER:
		st = nfs_raw_rename(w->rpc, dir_fh(w, a->dir), a->name, dir_fh(w, p->dir),
				    p->name);
		break;
	case OP_LINK:
		st = nfs_raw_link(w->rpc, &a->fh, dir_fh(w, p->dir), p->name);
		break;
	case OP_REMOVE:
		st = nfs_raw_create_or_remove(w->rpc, dir_fh(w, a->dir), a->name, false);
		break;
	default:
		break;
	}
	note(w, "  = %d", st);
	if (st < 0)
		return false;
	if (st != NFS3_OK)
		wfail(w, "%s of %c/%s (fileid %llu%s%s) answered %d", op_names[p->op],
		      a ? a->dir : p->dir, a ? a->name : p->name,
		      a ? (unsigned long long)a->fileid : 0ull,
		      a && a->linked ? ", linked" : "", a && a->lower ? ", lower" : "",
		      st);
	if (p->op == OP_CREATE || p->op == OP_LINK) { /* its handle, to follow it */
		l = look(w, p->dir, p->name);
		if (l.status < 0)
			return false;
		if (l.status != NFS3_OK)
			wfail(w, "LOOKUP of new %s answered %d", p->name, l.status);
		note(w, "  fileid %llu", (unsigned long long)l.fileid);
		if (p->op == OP_LINK && l.fileid != a->fileid)
			wfail(w, "LINK %s has fileid %llu, its source %llu", p->name,
			      (unsigned long long)l.fileid,
			      (unsigned long long)a->fileid);
	}
	switch (p->op) { /* acknowledged: the model follows */
	case OP_CREATE:
	case OP_LINK:
		n = slot_new(w);
		w->m.o[n] = (struct obj){.live = true,
					 .dir = p->dir,
					 .fh = l.fh,
					 .fileid = l.fileid,
					 .linked = p->op == OP_LINK};
		snprintf(w->m.o[n].name, NAME_MAX_, "%s", p->name);
		if (p->op == OP_LINK)
			a->linked = true;
		break;
	case OP_WRITE:
		a->version = p->version;
		a->lower = false;
		break;
	case OP_RENAME_OVER:
		w->m.o[p->b].live = false;
		/* fall through */
	case OP_RENAME:
		a->dir = p->dir;
		snprintf(a->name, sizeof(a->name), "%s", p->name);
		break;
	case OP_REMOVE:
		a->live = false;
		break;
	default:
		break;
	}
	w->acked++;
	memset(p, 0, sizeof(*p));
	return true;
}

/* The first round: the worker's lower files are its first objects. */
static void first_objects(struct worker *w)
{
	memset(&w->m, 0, sizeof(w->m));
	w->m.p.a = w->m.p.b = -1;
	for (int i = 0; i < LOWERS; i++) {
		struct obj *o = &w->m.o[w->m.nobj++];
		struct nfs_raw_obj l;

		snprintf(o->name, sizeof(o->name), "low%d_%d", w->k, i);
		o->dir = 'm';
		l = look(w, 'm', o->name);
		if (l.status != NFS3_OK)
			wfail(w, "LOOKUP of lower %s: %d", o->name, l.status);
		*o = (struct obj){.live = true,
				  .lower = true,
				  .dir = 'm',
				  .fh = l.fh,
				  .fileid = l.fileid};
		snprintf(o->name, sizeof(o->name), "low%d_%d", w->k, i);
	}
}

static void worker_connect(struct worker *w)
{
	struct nfs_raw_obj l;

	if (nfs_raw_mnt(g.srv.mount_port, "/", &w->root) != MNT3_OK)
		wfail(w, "MNT failed");
	w->rpc = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	if (!w->rpc)
		wfail(w, "no connection");
	l = nfs_raw_lookup(w->rpc, &w->root, "m");
	w->mdir = l.fh;
	l = nfs_raw_lookup(w->rpc, &w->mdir, "s");
	w->sdir = l.fh;
	if (l.status != NFS3_OK)
		wfail(w, "LOOKUP m/s: %d", l.status);
}

/* One worker's round: check, tell the parent (READY), load until the
 * connection breaks, save the model.  Exits 0, or 1 on a failed check. */
static void worker_main(int k, int round, int ready, bool check_only)
{
	struct worker w = {.k = k,
			   .seed = g.seed * 31 + (unsigned)round * 7 + (unsigned)k};

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	snprintf(w.path, sizeof(w.path), "%s/history%d", g.tmp, k);
	w.history = fopen(w.path, "a");
	if (w.history)
		setvbuf(w.history, NULL, _IOLBF, 0);
	w.round = round;
	note(&w, "start");
	snprintf(w.path, sizeof(w.path), "%s/model%d", g.tmp, k);
	worker_connect(&w);
	if (round == 0)
		first_objects(&w);
	else if (model_io(&w, false))
		wfail(&w, "cannot read its model");
	else
		check_all(&w);
	if (write(ready, "r", 1) != 1)
		_exit(2);
	close(ready); /* the parent reads to the end of the pipe */
	for (; !check_only;) {
		choose(&w);
		if (model_io(&w, true))
			wfail(&w, "cannot save its model");
		if (!run_one(&w))
			break;
	}
	if (model_io(&w, true))
		wfail(&w, "cannot save its model");
	printf("ACKED %d %lu %s\n", k, w.acked, op_names[w.m.p.op]);
	fflush(stdout);
	_exit(0);
}

/* ---- the rounds ---- */

static int work_left(void)
{
	char p[PATH_MAX];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(p, sizeof(p), "%s/work/work", g.tmp);
	d = opendir(p);
	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

/* Reads the workers' ACKED lines from FD: the calls they had in flight. */
static void tally(FILE *f)
{
	char line[128], kind[32];
	unsigned long acked;
	int k;

	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "ACKED %d %lu %31s", &k, &acked, kind) == 3) {
			g.acked += acked;
			for (int i = 0; i < OP_KINDS; i++)
				if (!strcmp(kind, op_names[i]))
					g.cut[i]++;
		}
}

/* One round: the server started, the workers' checks, their load (unless
 * LAST: the checks alone), the server SIGKILLed (LAST: stopped, exit 0). */
static int round_run(int round, bool last)
{
	int ready[2], out[2], failed = 0, st;
	pid_t pids[WORKERS];
	char c;
	FILE *f;

	if (test_server_start(g.bin, g.un.state, g.un.args, &g.srv))
		return -1;
	if (work_left()) {
		fprintf(stderr,
			"FAIL round %d: the work dir holds %d entries after the "
			"restart\n",
			round, work_left());
		return -1;
	}
	if (pipe(ready) || pipe(out))
		return -1;
	for (int k = 0; k < WORKERS; k++) {
		pids[k] = fork();
		if (pids[k] == 0) {
			close(ready[0]);
			close(out[0]);
			dup2(out[1], STDOUT_FILENO);
			worker_main(k, round, ready[1], last);
		}
	}
	close(ready[1]);
	close(out[1]);
	for (int k = 0; k < WORKERS; k++)
		if (read(ready[0], &c, 1) != 1)
			failed = 1; /* a worker's check failed */
	close(ready[0]);
	if (!failed && !last)
		it_sleep_ms(50 + rand_r(&g.seed) % 600);
	if (last) {
		f = fdopen(out[0], "r");
		tally(f);
		fclose(f);
		for (int k = 0; k < WORKERS; k++)
			waitpid(pids[k], &st, 0);
		st = test_server_stop(&g.srv);
		return failed || st != 0 ? -1 : 0;
	}
	kill(g.srv.pid, SIGKILL);
	waitpid(g.srv.pid, &st, 0);
	g.srv.pid = -1;
	f = fdopen(out[0], "r");
	tally(f);
	fclose(f);
	for (int k = 0; k < WORKERS; k++) {
		waitpid(pids[k], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed = 1;
	}
	return failed ? -1 : 0;
}

static void lower_files(void)
{
	char p[PATH_MAX], buf[LOWER_SIZE];

	for (int k = 0; k < WORKERS; k++)
		for (int i = 0; i < LOWERS; i++) {
			/* half in the bottom layer, half in the top lower */
			snprintf(p, sizeof(p), "%s/%s/m/low%d_%d", g.tmp,
				 i % 2 ? "l1" : "l2", k, i);
			lower_pattern(buf, LOWER_SIZE, k, i, 0);
			if (write_file(p, buf, LOWER_SIZE))
				exit(1);
		}
}

static int setup(void)
{
	char p[PATH_MAX];
	const char *e;

	snprintf(g.tmp, sizeof(g.tmp), TMP_PREFIX "XXXXXX");
	if (!mkdtemp(g.tmp))
		return -1;
	for (const char *const *d =
		 (const char *const[]){"l1/m/s", "l2/m", "upper", "work", NULL};
	     *d; d++) {
		snprintf(p, sizeof(p), "%s/%s", g.tmp, *d);
		mkdir_p(p);
	}
	lower_files();
	test_union_init(&g.un, g.tmp, "l1:l2");
	e = getenv("KILL_SOAK_ROUNDS");
	g.rounds = e ? atoi(e) : ROUNDS_DEF;
	e = getenv("KILL_SOAK_SEED");
	g.seed = e ? (unsigned)strtoul(e, NULL, 10) : (unsigned)time(NULL);
	g.seed0 = g.seed;
	return 0;
}

int main(int argc, char **argv)
{
	int rc = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: test_kill_soak UNION_NFSD\n");
		return 2;
	}
	g.bin = argv[1];
	g.srv.pid = -1;
	if (setup())
		return 1;
	printf("kill soak: %d rounds, %d workers, seed %u\n", g.rounds, WORKERS, g.seed);
	fflush(stdout);
	for (int r = 0; r < g.rounds && !rc; r++)
		rc = round_run(r, false);
	if (!rc) /* the last check, and a clean stop */
		rc = round_run(g.rounds, true);
	if (g.srv.pid > 0)
		test_server_stop(&g.srv);
	printf("kill soak: %lu calls acknowledged; cut short by a kill:", g.acked);
	for (int i = 1; i < OP_KINDS; i++)
		printf(" %s %lu", op_names[i], g.cut[i]);
	printf("\n%s (KILL_SOAK_SEED=%u)\n", rc ? "FAIL" : "PASS", g.seed0);
	if (!rc)
		test_tmp_remove(g.tmp, TMP_PREFIX);
	else
		fprintf(stderr, "kept %s\n", g.tmp);
	return rc ? 1 : 0;
}
