/* SPDX-License-Identifier: Apache-2.0 */
/* test_swap_stress - a lower stack flipped under clients that keep calling:
 * each call sees the old stack or the new one, never a mix (issue 20;
 * exports/table.c invariant 3).
 *
 *   test_swap_stress UNION_NFSD [FLIPS]
 *
 * Two stacks of one bottom layer B (common, both, hidden, dir/b1):
 *   A  lowers X:B, X holding f ("v1"), onlyx and dir/x1;
 *   B  lowers Y:B, Y holding f ("v2" and longer: another object, another
 *      fileid), onlyy, dir/y1 and a white-out of hidden.
 * Export "/" has an upper of its own (empty); "/pc" is per client
 * (lowerdir TMP/hosts/%a:X:B, or Y), its client's layer holding "mine".
 * WORKERS threads, each on a connection of its own and half of them on
 * each export, call in a loop: LOOKUP f and READ it (the bytes and the
 * fileid of one reply are v1 or v2, and a fileid once seen with one
 * version is never seen with the other, LOOKUP's included), LOOKUP and
 * READ common (always its bytes and fileid), one READDIRPLUS of the root
 * and one READDIR of dir, each taken whole in one call (the names are A's
 * or B's set, never a mix).  Meanwhile the test flips the config between
 * A and B by SIGHUP FLIPS times (default 50), waiting for each "reloaded"
 * line.  Any other status (a stale handle, an I/O error), a failed reload,
 * a worker that saw one stack only, or a server that does not exit with 0
 * and no sanitizer report fails the test.
 *
 * A watchdog (alarm) kills the server so that every call ends; the server
 * is stopped by pid and the temp dir removed on every path out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it_util.h"
#include "nfs_raw.h"
#include "start_server.h"

#define TMP_PREFIX "/tmp/union-nfsd-swapstress."
#define WORKERS	   4
#define FLIPS	   50
#define WAIT_S	   15
#define WATCHDOG_S 30 /* ctest TIMEOUT is 40 */
#define LIST_MAX   16
#define IDS_MAX	   4096
#define V1	   "v1\n"
#define V2	   "v2, a longer version\n"
#define COMMON	   "common to both stacks\n"

/* What one export shows over stack A (0) and B (1). */
struct view {
	const char *path;
	struct fh root;
	uint64_t common_id;
	const char *root_names[2][LIST_MAX], *dir_names[2][LIST_MAX];
};

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	char conf[PATH_MAX + 16], config_arg[PATH_MAX + 32], state[PATH_MAX + 16];
	char log[PATH_MAX + 32]; /* STATE/stderr */
	struct test_server srv;
	struct view v[2]; /* "/" and "/pc" */
	atomic_bool stop;
	pthread_mutex_t lock;
	char first_err[512];
	unsigned errors;
	struct id_seen {
		uint64_t fileid;
		int version;
	} ids[IDS_MAX]; /* f's fileids, by version (fileid_is) */
	size_t nids;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static volatile sig_atomic_t srv_pid;

/* ---- failures ---- */

/* Counts a failure; the first one is kept for the report. */
static void bad(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&g.lock);
	if (g.errors++ == 0) {
		va_start(ap, fmt);
		vsnprintf(g.first_err, sizeof(g.first_err), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&g.lock);
}

static void on_alarm(int sig)
{
	(void)sig;
	if (srv_pid > 0)
		kill(srv_pid, SIGKILL);
}

/* ---- files ---- */

static int put(const char *rel, const char *text)
{
	char p[PATH_MAX + 64];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	f = fopen(p, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "%s: %s\n", p, strerror(errno));
		return -1;
	}
	return 0;
}

static int mkdirs(const char *rel)
{
	char cmd[PATH_MAX + 64];

	snprintf(cmd, sizeof(cmd), "mkdir -p %s/%s", g.tmp, rel);
	return system(cmd) == 0 ? 0 : -1;
}

/* A white-out in the overlayfs form: a character device 0/0. */
static int whiteout(const char *rel)
{
	char p[PATH_MAX + 64];

	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	if (mknod(p, S_IFCHR | 0600, makedev(0, 0)) == 0)
		return 0;
	fprintf(stderr, "mknod %s: %s\n", p, strerror(errno));
	return -1;
}

static int layers(void)
{
	if (mkdirs("X/dir") || mkdirs("Y/dir") || mkdirs("B/dir") || mkdirs("upper") ||
	    mkdirs("work") || mkdirs("hosts/127.0.0.1"))
		return -1;
	if (put("B/common", COMMON) || put("B/both", "b\n") || put("B/hidden", "h\n") ||
	    put("B/dir/b1", "b1\n") || put("X/f", V1) || put("X/onlyx", "x\n") ||
	    put("X/dir/x1", "x1\n") || put("Y/f", V2) || put("Y/onlyy", "y\n") ||
	    put("Y/dir/y1", "y1\n") || put("hosts/127.0.0.1/mine", "mine\n"))
		return -1;
	return whiteout("Y/hidden");
}

/* The config over stack TOP:B (TOP "X" or "Y"). */
static int write_config(const char *top)
{
	FILE *f = fopen(g.conf, "w");

	if (!f)
		return -1;
	fprintf(f,
		"[server]\nretire-time = 0\n\n"
		"[export]\npath = /\nlowerdir = %s/%s:%s/B\nupperdir = %s/upper\n"
		"workdir = %s/work\nclients = " TEST_SERVER_CLIENTS "\n\n"
		"[export]\npath = /pc\nlowerdir = %s/hosts/%%a:%s/%s:%s/B\n"
		"clients = " TEST_SERVER_CLIENTS "\n",
		g.tmp, top, g.tmp, g.tmp, g.tmp, g.tmp, g.tmp, top, g.tmp);
	return fclose(f) == 0 ? 0 : -1;
}

/* ---- the log ---- */

static int log_count(const char *needle)
{
	FILE *f = fopen(g.log, "r");
	char *line = NULL;
	size_t cap = 0;
	int n = 0;

	if (!f)
		return 0;
	while (getline(&line, &cap, f) > 0)
		n += strstr(line, needle) != NULL;
	free(line);
	fclose(f);
	return n;
}

/* ---- calls ---- */

struct rd {
	int status;
	bool attrs;
	uint64_t fileid;
	char data[64];
};

static void keep_read(void *data, void *out)
{
	READ3res *r = data;
	struct rd *o = out;
	size_t n;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	o->attrs = r->READ3res_u.resok.file_attributes.attributes_follow;
	if (o->attrs)
		o->fileid =
		    r->READ3res_u.resok.file_attributes.post_op_attr_u.attributes.fileid;
	n = r->READ3res_u.resok.data.data_len;
	n = n < sizeof(o->data) - 1 ? n : sizeof(o->data) - 1;
	memcpy(o->data, r->READ3res_u.resok.data.data_val, n);
	o->data[n] = '\0';
}

/* READ of FH: its bytes and its fileid from one reply. */
static struct rd read_one(struct rpc_context *rpc, const struct fh *fh)
{
	struct rd o = {.status = -1};
	struct call c = {.keep = keep_read, .out = &o};
	READ3args a = {.file = nfs_raw_fh3(fh), .count = sizeof(o.data) - 1};

	nfs_raw_finish(rpc, &c, rpc_nfs3_read_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

/* A listing taken in one call: its names, sorted. */
struct ls {
	int status;
	bool eof;
	size_t n;
	char names[LIST_MAX][32];
};

static void see(struct ls *o, const char *name)
{
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return;
	if (o->n == LIST_MAX) {
		o->status = -2;
		return;
	}
	snprintf(o->names[o->n++], sizeof(o->names[0]), "%s", name);
}

static void keep_rdp(void *data, void *out)
{
	READDIRPLUS3res *r = data;
	struct ls *o = out;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	for (entryplus3 *e = r->READDIRPLUS3res_u.resok.reply.entries; e;
	     e = e->nextentry)
		see(o, e->name);
	o->eof = r->READDIRPLUS3res_u.resok.reply.eof;
}

static void keep_rd(void *data, void *out)
{
	READDIR3res *r = data;
	struct ls *o = out;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	for (entry3 *e = r->READDIR3res_u.resok.reply.entries; e; e = e->nextentry)
		see(o, e->name);
	o->eof = r->READDIR3res_u.resok.reply.eof;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The whole of directory FH in one READDIRPLUS (PLUS) or READDIR call. */
static struct ls list_one(struct rpc_context *rpc, const struct fh *fh, bool plus)
{
	struct ls o = {.status = -1};
	struct call c = {.keep = plus ? keep_rdp : keep_rd, .out = &o};
	int q;

	if (plus) {
		READDIRPLUS3args a = {
		    .dir = nfs_raw_fh3(fh), .dircount = 8192, .maxcount = 32768};
		q = rpc_nfs3_readdirplus_async(rpc, nfs_raw_on_reply, &a, &c);
	} else {
		READDIR3args a = {.dir = nfs_raw_fh3(fh), .count = 8192};
		q = rpc_nfs3_readdir_async(rpc, nfs_raw_on_reply, &a, &c);
	}
	nfs_raw_finish(rpc, &c, q);
	qsort(o.names, o.n, sizeof(o.names[0]), by_name);
	return o;
}

/* Which of the sorted name sets SETS[2] the listing L is: 0, 1, or -1. */
static int which_set(const struct ls *l, const char *const sets[2][LIST_MAX])
{
	for (int s = 0; s < 2; s++) {
		size_t k = 0;

		while (k < l->n && sets[s][k] && !strcmp(sets[s][k], l->names[k]))
			k++;
		if (k == l->n && !sets[s][k])
			return s;
	}
	return -1;
}

static void ls_text(const struct ls *l, char *out, size_t len)
{
	size_t off = 0;

	out[0] = '\0';
	for (size_t i = 0; i < l->n && off < len; i++)
		off += (size_t)snprintf(out + off, len - off, "%s ", l->names[i]);
}

/* ---- the workers ---- */

/* True when FILEID was never seen with the other version than S (each
 * flip gives the changed f a fileid of its own: the first READ of one
 * says which version it is). */
static bool fileid_is(uint64_t fileid, int s)
{
	bool ok = true;
	size_t i;

	pthread_mutex_lock(&g.lock);
	for (i = 0; i < g.nids && g.ids[i].fileid != fileid; i++)
		;
	if (i < g.nids)
		ok = g.ids[i].version == s;
	else if (g.nids < IDS_MAX)
		g.ids[g.nids++] = (struct id_seen){fileid, s};
	pthread_mutex_unlock(&g.lock);
	return ok;
}

struct worker {
	pthread_t t;
	int n;
	struct view *v;
	unsigned ops, seen[2]; /* calls that showed stack A, B */
};

/* LOOKUP f and READ it: v1 with A's fileid or v2 with B's. */
static void check_f(struct worker *w, struct rpc_context *rpc)
{
	struct nfs_raw_obj o = nfs_raw_lookup(rpc, &w->v->root, "f");
	struct rd r;
	int s;

	if (o.status != NFS3_OK) {
		bad("%s: LOOKUP f: status %d", w->v->path, o.status);
		return;
	}
	r = read_one(rpc, &o.fh);
	if (r.status != NFS3_OK || !r.attrs) {
		bad("%s: READ f: status %d (attributes: %d)", w->v->path, r.status,
		    r.attrs);
		return;
	}
	s = !strcmp(r.data, V1) ? 0 : !strcmp(r.data, V2) ? 1 : -1;
	if (s < 0 || !fileid_is(r.fileid, s) || !fileid_is(o.fileid, s))
		bad("%s: READ f: \"%.20s\" with fileid %ju (LOOKUP's %ju)", w->v->path,
		    r.data, (uintmax_t)r.fileid, (uintmax_t)o.fileid);
	else
		w->seen[s]++;
}

/* LOOKUP and READ common: the same whatever the stack. */
static void check_common(struct worker *w, struct rpc_context *rpc)
{
	struct nfs_raw_obj o = nfs_raw_lookup(rpc, &w->v->root, "common");
	struct rd r;

	if (o.status != NFS3_OK || o.fileid != w->v->common_id) {
		bad("%s: LOOKUP common: status %d, fileid %ju", w->v->path, o.status,
		    (uintmax_t)o.fileid);
		return;
	}
	r = read_one(rpc, &o.fh);
	if (r.status != NFS3_OK || strcmp(r.data, COMMON) || r.fileid != w->v->common_id)
		bad("%s: READ common: status %d, \"%.20s\"", w->v->path, r.status,
		    r.data);
}

/* One listing of DIR (NAME for messages) that must be one of SETS. */
static void check_list(struct worker *w, struct rpc_context *rpc, const struct fh *dir,
		       const char *name, bool plus, const char *const sets[2][LIST_MAX])
{
	struct ls l = list_one(rpc, dir, plus);
	char text[LIST_MAX * 33];
	int s;

	if (l.status != NFS3_OK || !l.eof) {
		bad("%s: %s of %s: status %d, eof %d", w->v->path,
		    plus ? "READDIRPLUS" : "READDIR", name, l.status, l.eof);
		return;
	}
	s = which_set(&l, sets);
	if (s < 0) {
		ls_text(&l, text, sizeof(text));
		bad("%s: %s of %s: a mix of the stacks: %s", w->v->path,
		    plus ? "READDIRPLUS" : "READDIR", name, text);
		return;
	}
	w->seen[s]++;
}

static void one_round(struct worker *w, struct rpc_context *rpc)
{
	struct nfs_raw_obj d;

	check_f(w, rpc);
	check_common(w, rpc);
	check_list(w, rpc, &w->v->root, "the root", true,
		   (const char *const(*)[LIST_MAX])w->v->root_names);
	d = nfs_raw_lookup(rpc, &w->v->root, "dir");
	if (d.status != NFS3_OK)
		bad("%s: LOOKUP dir: status %d", w->v->path, d.status);
	else
		check_list(w, rpc, &d.fh, "dir", w->ops % 2,
			   (const char *const(*)[LIST_MAX])w->v->dir_names);
	w->ops++;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct rpc_context *rpc = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);

	if (!rpc) {
		bad("worker %d: no connection", w->n);
		return NULL;
	}
	while (!atomic_load(&g.stop) && g.errors < 20)
		one_round(w, rpc);
	rpc_destroy_context(rpc);
	return NULL;
}

/* ---- set-up ---- */

static void view_init(struct view *v, const char *path, bool mine)
{
	static const char *const root[2][LIST_MAX] = {
	    {"both", "common", "dir", "f", "hidden", "onlyx"},
	    {"both", "common", "dir", "f", "onlyy"}};
	static const char *const root_pc[2][LIST_MAX] = {
	    {"both", "common", "dir", "f", "hidden", "mine", "onlyx"},
	    {"both", "common", "dir", "f", "mine", "onlyy"}};
	static const char *const dir[2][LIST_MAX] = {{"b1", "x1"}, {"b1", "y1"}};

	v->path = path;
	memcpy(v->root_names, mine ? root_pc : root, sizeof(root));
	memcpy(v->dir_names, dir, sizeof(dir));
}

/* Starts the server with its stderr in g.log. */
static int start(void)
{
	const char *args[] = {g.config_arg, NULL};
	int rc = test_server_start_logged(g.bin, g.state, args, &g.srv);

	srv_pid = g.srv.pid;
	return rc;
}

/* SIGHUP with the config over TOP; waits for the Nth "reloaded" line. */
static int flip(const char *top, int n)
{
	double t0 = it_now_s();

	if (write_config(top) || kill(g.srv.pid, SIGHUP))
		return -1;
	while (log_count("reloaded: ") < n) {
		if (log_count("reload failed") || it_now_s() - t0 > WAIT_S ||
		    !test_server_alive(&g.srv))
			return -1;
		it_sleep_ms(5);
	}
	return 0;
}

/* Each export's fileids of f (version S) and common (quiet: no worker). */
static int learn(int s)
{
	struct rpc_context *rpc = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	struct nfs_raw_obj o;
	int rc = 0;

	if (!rpc)
		return -1;
	for (int i = 0; i < 2 && !rc; i++) {
		o = nfs_raw_lookup(rpc, &g.v[i].root, "f");
		rc = o.status == NFS3_OK && fileid_is(o.fileid, s) ? 0 : -1;
		o = nfs_raw_lookup(rpc, &g.v[i].root, "common");
		if (s == 0)
			g.v[i].common_id = o.fileid;
		if (o.status != NFS3_OK || o.fileid != g.v[i].common_id)
			rc = -1;
	}
	rpc_destroy_context(rpc);
	return rc;
}

static int setup(void)
{
	snprintf(g.tmp, sizeof(g.tmp), TMP_PREFIX "XXXXXX");
	if (!mkdtemp(g.tmp))
		return -1;
	snprintf(g.conf, sizeof(g.conf), "%s/conf", g.tmp);
	snprintf(g.config_arg, sizeof(g.config_arg), "--config=%s", g.conf);
	snprintf(g.state, sizeof(g.state), "%s/state", g.tmp);
	snprintf(g.log, sizeof(g.log), "%s/stderr", g.state);
	view_init(&g.v[0], "/", false);
	view_init(&g.v[1], "/pc", true);
	if (layers() || write_config("X") || start())
		return -1;
	for (int i = 0; i < 2; i++)
		if (nfs_raw_mnt(g.srv.mount_port, g.v[i].path, &g.v[i].root) != MNT3_OK)
			return -1;
	return learn(0) || flip("Y", 1) || learn(1) ? -1 : 0;
}

/* ---- the test ---- */

static int stress(int flips)
{
	struct worker w[WORKERS] = {0};
	double t0 = it_now_s();
	int rc = 0, started = 0, k;

	for (int i = 0; i < WORKERS; i++, started++) {
		w[i].n = i;
		w[i].v = &g.v[i % 2];
		if (pthread_create(&w[i].t, NULL, work, &w[i]))
			break;
	}
	for (k = 0; k < flips && !rc && g.errors == 0; k++) {
		it_sleep_ms(20);
		rc = flip(k % 2 ? "Y" : "X", k + 2);
		if (rc)
			bad("flip %d: no \"reloaded\" line (or \"reload failed\")",
			    k + 1);
	}
	it_sleep_ms(50);
	atomic_store(&g.stop, true);
	for (int i = 0; i < started; i++)
		pthread_join(w[i].t, NULL);
	for (int i = 0; i < started; i++) {
		printf("worker %d (%s): %u rounds, %u answers of A, %u of B\n", i,
		       w[i].v->path, w[i].ops, w[i].seen[0], w[i].seen[1]);
		if (g.errors == 0 && (!w[i].seen[0] || !w[i].seen[1]))
			bad("worker %d saw one stack only", i);
	}
	printf("%d flips in %.1f s\n", k, it_now_s() - t0);
	return rc;
}

int main(int argc, char **argv)
{
	int flips = argc > 2 ? atoi(argv[2]) : FLIPS, status;
	bool ran;

	if (argc < 2 || argc > 3 || flips < 2) {
		fprintf(stderr, "usage: %s UNION_NFSD [FLIPS]\n", argv[0]);
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "needs root (a white-out is a device node)\n");
		return 77;
	}
	g.bin = argv[1];
	signal(SIGALRM, on_alarm);
	alarm(WATCHDOG_S);
	if (setup() < 0)
		bad("set-up failed (see above and %s)", g.log);
	else
		stress(flips);
	ran = g.srv.pid > 0;
	status = test_server_stop(&g.srv);
	srv_pid = 0;
	if (ran && (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0))
		bad("the server ended with status %#x", status);
	if (log_count("Sanitizer") || log_count("runtime error"))
		bad("the server's log has a sanitizer report");
	if (g.errors) {
		char cmd[sizeof(g.log) + 16];

		snprintf(cmd, sizeof(cmd), "tail -n 30 %s", g.log);
		if (system(cmd) < 0)
			perror("tail");
		fprintf(stderr, "FAIL: %u errors, the first: %s\n", g.errors,
			g.first_err);
	}
	test_tmp_remove(g.tmp, TMP_PREFIX);
	return g.errors ? 1 : 0;
}
