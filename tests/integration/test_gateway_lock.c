/* SPDX-License-Identifier: Apache-2.0 */
/* test_gateway_lock - issue 30's second check: two gateways that both try
 * to serve one client's union.  The second is refused with a log line, the
 * upper is never written by both (checked on disk), and the second takes
 * the union over within seconds of the first's death (docs/gateways.md,
 * part 2).
 *
 *   test_gateway_lock UNION_NFSD
 *
 * Gateways A and B are two hosts behind one floating address: each
 * union-nfsd runs in a network namespace of its own (netns_util.h) on
 * 127.0.0.1, NFS port 2049 and MOUNT port 20048 there, so the test, their
 * client, has the address 127.0.0.1 on both and the template's %a gives one
 * union dir.  Both export /export: one lower layer (TMP/lower, a few files
 * and dirs) under per-client dirs in one shared dir (--upperdir=
 * TMP/shared/%a/upper --workdir=TMP/shared/%a/work), each with its own
 * state dir, both with one key file (--key-file: a lower object's handle
 * from A is B's too) and --client-union-idle=IDLE_S.
 *
 * The interface under test: a server that opens a writable union takes an
 * OFD write lock on WORKDIR/union-nfsd.lock before it touches the work dir,
 * writes "pid N host H" into it and keeps it while the union is open.  One
 * whose lock is refused leaves the union's dirs alone, logs a line naming
 * the union and the holder's pid, refuses MNT with MNT3ERR_SERVERFAULT and
 * answers calls with the union's handles NFS3ERR_JUKEBOX; once the holder
 * dies or releases the union, its next call opens it.
 *
 *   step 2  A: MNT, CREATE fromA, WRITE FILE_SYNC; fromA on disk; the lock
 *           file names A's pid and is locked.  Then the client's tree: a
 *           second file, a dir and a file in it, a file renamed into the
 *           dir, a LINK of the second file; every handle and fileid (root,
 *           files, dir) is recorded, as made and as LOOKUP gives it.  A
 *           sentinel in WORKDIR/work/ stands for a copy-up temp of A's in
 *           flight, and the union's dirs are recorded (each entry's type,
 *           mode, size, inode, link count, mtime, ctime and bytes).  A has
 *           as many threads as before the MNT: the union's own table
 *           starts none (union/sync.c rule 5).
 *   step 3  B, started now: MNT refused with MNT3ERR_SERVERFAULT; GETATTR,
 *           LOOKUP and CREATE with A's root handle NFS3ERR_JUKEBOX; B's log
 *           has a line naming the union (its dir or 127.0.0.1) and A's pid;
 *           the upper holds fromA with A's bytes and the tree, nothing
 *           else, and nothing in the upper or the work dir changed: the
 *           sentinel is there.
 *   step 4  A SIGKILLed: B answers GETATTR of A's root handle (asked every
 *           RETRY_MS) with NFS3_OK within TAKEOVER_MAX_S (the time is
 *           printed); then via B: CREATE and WRITE fromB, fromA read back
 *           with A's bytes, a lower file read by A's handle; the lock file
 *           names B's pid; the upper holds fromA and fromB; B's MNT.
 *           B's state dir never saw the union, so the tree's handles
 *           resolve only through the union's own table in its work dir:
 *           each answers GETATTR with its fileid, READ with its bytes, and
 *           LOOKUP of its path from the root gives its handle and fileid.
 *   step 5  A sentinel of B's in WORKDIR/work/, the union's dirs recorded,
 *           and A restarted on its state dir: GETATTR and LOOKUP via A answer
 *           NFS3ERR_JUKEBOX while B holds the union, A's log names B's pid,
 *           the union's dirs are unchanged; B's client unmounts (UMNT), and
 *           once B has released the idle union, A's GETATTR (every RETRY_MS,
 *           RELEASE_MAX_S at most) succeeds; the lock file names A's new
 *           pid, and A reads fromA and fromB; the tree and B's fromB
 *           resolve on A as in step 4, and A adds fromA2.
 *   step 6  A stopped cleanly (SIGTERM), B stopped, its state dir removed
 *           and B started afresh: B serves the union at once, the tree
 *           (with fromB and fromA2) resolves as in step 4, MNT gives the
 *           same root handle, and a new CREATE works.
 *
 * A step whose premise an earlier one did not give is skipped (3 needs A
 * serving, 4 B not serving, 5 B's takeover, 6 A back).  A failed step
 * prints every check that failed (what was answered, what was expected)
 * and the gateways' logs.  Every server is stopped by pid in the group
 * teardown, also when a check fails (and has PR_SET_PDEATHSIG should this
 * process die); the namespaces go with their descriptors and the temp dir is
 * removed.  Exit 77 (skipped) without root or namespaces.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "netns_util.h"
#include "nfs_raw.h"
#include "start_server.h"

#define TMP_PREFIX	"/tmp/union-nfsd-gwlock."
#define EXPORT		"/export"
#define NFS_PORT	2049 /* the same on both gateways, as behind one address */
#define MOUNT_PORT	20048
#define STR_(x)		#x
#define STR(x)		STR_(x)
#define CLIENT		"127.0.0.1" /* the test's address on both: what %a gives */
#define LOCK_NAME	"union-nfsd.lock"
#define SENTINEL	"#un-inflight" /* in WORKDIR/work/, as a copy-up temp */
#define KEY_BYTES	32
#define IDLE_S		2
#define RETRY_MS	100
#define TAKEOVER_MAX_S	10
#define TAKEOVER_WAIT_S 30	      /* B is asked this long: a late takeover is timed */
#define RELEASE_MAX_S	(IDLE_S + 30) /* B's idle release, on a busy machine */
#define LOG_WAIT_S	5
#define DIR_LEN		96 /* the temp dir's paths are short: TMP_PREFIX... */
#define SNAP_MAX	64 /* entries of a union dir that a record keeps */
#define DATA_A		"fromA: written by gateway A, WRITE FILE_SYNC"
#define DATA_B		"fromB: written by gateway B after A's death"
#define DATA_A2		"fromA2: written by gateway A after B's release"
#define LOWER_FILE	"docs/readme"
#define LOWER_DATA	"a file of the lower layer"
#define TREE_MAX	16 /* the client's objects whose handles are followed */

enum { A, B, NGW };

struct gw {
	const char *name; /* "A", "B" */
	char state[DIR_LEN + 16];
	char lower_arg[DIR_LEN + 16], upper_arg[DIR_LEN + 32], work_arg[DIR_LEN + 32];
	char key_arg[DIR_LEN + 16];
	const char *args[12];
	int ns; /* its network namespace */
	struct test_server srv;
	struct rpc_context *rpc; /* NFS, made in its namespace */
};

/* A union dir as it was on disk: one line per entry, "PATH\tWHAT", sorted
 * by path ("." the dir itself). */
struct snap {
	char *line[SNAP_MAX];
	size_t n;
	bool overflow;
};

/* The checks of one step: each counted, a failed one printed. */
struct verdict {
	const char *step;
	unsigned checks, bad;
	char first[512];
};

enum outcome { NOT_RUN, PASSED, FAILED, SKIPPED };

static const char *const outcome_name[] = {
    [NOT_RUN] = "not run", [PASSED] = "ok", [FAILED] = "FAILED", [SKIPPED] = "skipped"};

static struct {
	const char *bin;
	char tmp[DIR_LEN - 32];
	char lower[DIR_LEN], shared[DIR_LEN], key[DIR_LEN];
	char udir[DIR_LEN + 16]; /* SHARED/127.0.0.1: the client's union dirs */
	char upper[DIR_LEN + 32], work[DIR_LEN + 32], lock[DIR_LEN + 48];
	int home_ns; /* the test's own network namespace */
	struct gw gw[NGW];
	struct fh root;	    /* A's root handle of the client's union */
	struct fh lower_fh; /* A's handle of LOWER_FILE */
	struct snap upper_snap, work_snap;
	struct obj {
		const char *path; /* from the union's root */
		const char *data; /* its bytes; NULL for a dir */
		struct fh made;	  /* as its maker first gave it (before a RENAME) */
		struct fh fh;	  /* as LOOKUP of PATH gave it on its maker */
		uint64_t fileid;
	} tree[TREE_MAX];
	size_t ntree;
	uint64_t root_fileid;
	bool a_serves, b_not_serving, b_took_over, a_back;
	enum outcome step[7]; /* by the numbers of the steps above */
	double takeover_s, retake_s, t0;
} g;

/* ---- small things ---- */

static void cleanup(void);

/* A set-up step failed: it_setup_failed with this test's cleanup. */
static void fail_setup(const char *what, const char *path)
{
	it_setup_failed(what, path, cleanup);
}

static void write_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len || close(fd))
		fail_setup("write", path);
}

/* The first LEN - 1 bytes of file PATH, NUL-terminated in BUF: their
 * number, or -1 (errno set) when it cannot be read. */
static ssize_t read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	buf[0] = '\0';
	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

/* ---- the checks of a step ---- */

static void check(struct verdict *v, bool ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check(struct verdict *v, bool ok, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	v->checks++;
	if (ok)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "  %s: %s\n", v->step, msg);
	if (!v->bad++)
		snprintf(v->first, sizeof(v->first), "%s", msg);
}

/* WHO's answer GOT to WHAT, expected WANT (nfsstat3s). */
static void check_nfs(struct verdict *v, const char *who, const char *what, int got,
		      int want)
{
	check(v, got == want, "%s answered %s to %s, expected %s", who,
	      nfs_raw_stat_name(got), what, nfs_raw_stat_name(want));
}

static void print_logs(void)
{
	for (int i = 0; i < NGW; i++) {
		char name[16];

		snprintf(name, sizeof(name), "gateway %s", g.gw[i].name);
		test_server_print_log(g.gw[i].state, name);
	}
}

/* The end of step N: one line, and with a failed check the logs and the
 * test's failure, naming the first. */
static void verdict_end(struct verdict *v, int n, double t0)
{
	fprintf(stderr, "%s: %u checks, %u failed (%.1f s)\n", v->step, v->checks, v->bad,
		it_now_s() - t0);
	g.step[n] = v->bad ? FAILED : PASSED;
	if (!v->bad)
		return;
	print_logs();
	fail_msg("%s: %u of %u checks failed; the first: %s", v->step, v->bad, v->checks,
		 v->first);
}

/* Step N does not run: its premise, WHY, is missing. */
static void skip_step(int n, const char *why)
{
	fprintf(stderr, "step %d not run: %s\n", n, why);
	g.step[n] = SKIPPED;
	skip();
}

/* ---- a union dir recorded ---- */

static struct snap *snap_cur;
static size_t snap_root_len;

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 1099511628211ull;
	return h;
}

/* What an entry's bytes are: a hash of a file's, a symlink's target. */
static void content_of(const char *path, const struct stat *st, char *out, size_t len)
{
	uint64_t h = 1469598103934665603ull;
	char buf[4096];
	ssize_t n;
	int fd;

	out[0] = '\0';
	if (S_ISLNK(st->st_mode)) {
		n = readlink(path, buf, sizeof(buf) - 1);
		snprintf(out, len, " -> %.*s", n < 0 ? 0 : (int)n, buf);
		return;
	}
	if (!S_ISREG(st->st_mode))
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(out, len, " unreadable: %s", strerror(errno));
		return;
	}
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		h = fnv(buf, (size_t)n, h);
	close(fd);
	snprintf(out, len, " bytes %016" PRIx64, h);
}

static int snap_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	char bytes[PATH_MAX + 16], *line;
	const char *rel = path[snap_root_len] ? path + snap_root_len + 1 : ".";
	char type = S_ISDIR(st->st_mode)   ? 'd'
		    : S_ISREG(st->st_mode) ? 'f'
		    : S_ISLNK(st->st_mode) ? 'l'
					   : '?';
	(void)flag;
	(void)ftw;

	if (snap_cur->n == SNAP_MAX) {
		snap_cur->overflow = true;
		return 0;
	}
	content_of(path, st, bytes, sizeof(bytes));
	if (asprintf(&line,
		     "%s\t%c mode %04o size %jd inode %ju links %ju mtime %jd.%09ld "
		     "ctime %jd.%09ld%s",
		     rel, type, (unsigned)(st->st_mode & 07777), (intmax_t)st->st_size,
		     (uintmax_t)st->st_ino, (uintmax_t)st->st_nlink,
		     (intmax_t)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
		     (intmax_t)st->st_ctim.tv_sec, st->st_ctim.tv_nsec, bytes) < 0)
		return -1;
	snap_cur->line[snap_cur->n++] = line;
	return 0;
}

static int line_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void snap_free(struct snap *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->line[i]);
	*s = (struct snap){0};
}

/* Records DIR (an empty record when it does not exist). */
static void snap_take(struct snap *s, const char *dir)
{
	snap_free(s);
	snap_cur = s;
	snap_root_len = strlen(dir);
	if (nftw(dir, snap_entry, 16, FTW_PHYS) && errno != ENOENT)
		fail_msg("cannot record %s: %s", dir, strerror(errno));
	qsort(s->line, s->n, sizeof(s->line[0]), line_cmp);
}

/* The length of the path that starts LINE. */
static size_t path_len(const char *line)
{
	return strcspn(line, "\t");
}

/* Compares DIR now with its record WAS: each entry that appeared, went or
 * changed is a failed check of V (WHAT names the dir). */
static void check_unchanged(struct verdict *v, const char *what, const char *dir,
			    const struct snap *was)
{
	struct snap now = {0};
	size_t i = 0, j = 0;

	snap_take(&now, dir);
	check(v, !now.overflow && !was->overflow, "%s holds more than %d entries", what,
	      SNAP_MAX);
	while (i < was->n || j < now.n) {
		const char *a = i < was->n ? was->line[i] : NULL;
		const char *b = j < now.n ? now.line[j] : NULL;
		size_t la = a ? path_len(a) : 0, lb = b ? path_len(b) : 0;
		int c = !a ? 1 : !b ? -1 : strncmp(a, b, la < lb ? la + 1 : lb + 1);

		if (c < 0) {
			check(v, false, "%s: '%.*s' is gone (was %s)", what, (int)la, a,
			      a + la + 1);
			i++;
		} else if (c > 0) {
			check(v, false, "%s: '%.*s' appeared (%s)", what, (int)lb, b,
			      b + lb + 1);
			j++;
		} else {
			check(v, !strcmp(a, b), "%s: '%.*s' changed: was %s, now %s",
			      what, (int)la, a, a + la + 1, b + lb + 1);
			i++, j++;
		}
	}
	snap_free(&now);
}

/* ---- what is on disk ---- */

struct want_file {
	const char *name;
	const char *data;
};

/* The tree's path P, of LEN bytes: the client's tree is checked through
 * NFS (check_tree), not on disk. */
static bool in_tree(const char *p, size_t len)
{
	for (size_t i = 0; i < g.ntree; i++)
		if (strlen(g.tree[i].path) == len && !strncmp(g.tree[i].path, p, len))
			return true;
	return false;
}

/* The upper holds exactly the files W[0..N) (names and bytes) and the
 * client's tree, nothing else; WHEN says at which point. */
static void check_upper(struct verdict *v, const char *when, const struct want_file *w,
			size_t n)
{
	struct snap s = {0};
	char p[PATH_MAX], buf[512], names[128] = "";

	for (size_t k = 0; k < n; k++)
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
			 k ? " and " : "", w[k].name);
	snap_take(&s, g.upper);
	for (size_t i = 0; i < s.n; i++) {
		size_t len = path_len(s.line[i]), k = 0;

		if (!strncmp(s.line[i], ".\t", 2) || in_tree(s.line[i], len))
			continue;
		while (k < n &&
		       (strlen(w[k].name) != len || strncmp(w[k].name, s.line[i], len)))
			k++;
		check(v, k < n, "%s, the upper holds '%.*s'; expected %s only", when,
		      (int)len, s.line[i], names);
	}
	for (size_t k = 0; k < n; k++) {
		snprintf(p, sizeof(p), "%s/%s", g.upper, w[k].name);
		if (read_file(p, buf, sizeof(buf)) < 0)
			check(v, false, "%s, the upper has no %s: %s", when, w[k].name,
			      strerror(errno));
		else
			check(v, !strcmp(buf, w[k].data),
			      "%s, the upper's %s holds \"%s\", expected \"%s\"", when,
			      w[k].name, buf, w[k].data);
	}
	snap_free(&s);
}

/* The lock file names HOLDER's pid ("pid N host H") and some open file
 * description holds a lock on it. */
static void check_lock(struct verdict *v, const struct gw *holder)
{
	char text[256], host[128];
	long pid = 0;
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	int fd;

	if (read_file(g.lock, text, sizeof(text)) < 0) {
		check(v, false, "no lock file %s (%s) while gateway %s serves the union",
		      g.lock, strerror(errno), holder->name);
		return;
	}
	text[strcspn(text, "\n")] = '\0';
	check(v,
	      sscanf(text, "pid %ld host %127s", &pid, host) == 2 &&
		  pid == holder->srv.pid,
	      "the lock file %s says \"%s\", expected \"pid %d host H\" (gateway %s)",
	      g.lock, text, (int)holder->srv.pid, holder->name);
	fd = open(g.lock, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fcntl(fd, F_OFD_GETLK, &fl)) {
		check(v, false, "F_OFD_GETLK on %s: %s", g.lock, strerror(errno));
	} else {
		check(v, fl.l_type != F_UNLCK,
		      "nobody holds a lock on %s while gateway %s serves the union",
		      g.lock, holder->name);
	}
	if (fd >= 0)
		close(fd);
}

/* GW has no descriptor of the client's upper dir, which an open union
 * holds (test_client_unions.c): it does not serve the union.  WHEN says at
 * which point. */
static void check_not_open(struct verdict *v, const struct gw *gw, const char *when)
{
	check(v, !test_server_holds(&gw->srv, g.upper),
	      "gateway %s holds the upper dir %s open %s", gw->name, g.upper, when);
}

/* True when LINE holds the number N, not as a part of a longer number or
 * word (a hex string, a name). */
static bool has_number(const char *line, long n)
{
	char d[24];
	size_t len = (size_t)snprintf(d, sizeof(d), "%ld", n);

	for (const char *p = strstr(line, d); p; p = strstr(p + 1, d))
		if ((p == line || !isalnum((unsigned char)p[-1])) &&
		    !isalnum((unsigned char)p[len]))
			return true;
	return false;
}

/* A line of GW's log naming the client's union (its dir holds the client's
 * address) and pid PID, waited for LOG_WAIT_S; the temp dir's name and the
 * address are left out of the search for the pid. */
static bool log_names(const struct gw *gw, pid_t pid, char *found, size_t len)
{
	char p[PATH_MAX], line[2048];
	double end = it_now_s() + LOG_WAIT_S;

	snprintf(p, sizeof(p), "%s/stderr", gw->state);
	do {
		FILE *f = fopen(p, "r");

		while (f && fgets(line, sizeof(line), f)) {
			char *t;

			if (!strstr(line, CLIENT))
				continue;
			line[strcspn(line, "\n")] = '\0';
			snprintf(found, len, "%s", line);
			while ((t = strstr(line, g.tmp)))
				memset(t, '/', strlen(g.tmp));
			while ((t = strstr(line, CLIENT)))
				memset(t, 'x', strlen(CLIENT));
			if (has_number(line, pid)) {
				fclose(f);
				return true;
			}
		}
		if (f)
			fclose(f);
		it_sleep_ms(RETRY_MS);
	} while (it_now_s() < end);
	found[0] = '\0';
	return false;
}

static void check_log(struct verdict *v, const struct gw *gw, const struct gw *holder,
		      pid_t pid)
{
	char line[2048];
	bool ok = log_names(gw, pid, line, sizeof(line));

	check(v, ok,
	      "gateway %s's log (%s/stderr) has no line naming the union (%s or %s) and "
	      "gateway %s's pid %d",
	      gw->name, gw->state, g.udir, CLIENT, holder->name, (int)pid);
	if (ok)
		fprintf(stderr, "gateway %s's log: %s\n", gw->name, line);
}

/* A temp of HOLDER's copy-up in flight, as the other gateway would find
 * it: the sentinel file in WORKDIR/work/. */
static void put_sentinel(const struct gw *holder)
{
	char p[PATH_MAX];
	int fd;

	snprintf(p, sizeof(p), "%s/work/" SENTINEL, g.work);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, holder->name, 1) != 1 || close(fd))
		fail_msg("cannot put the sentinel %s into %s's work dir: %s", p,
			 holder->name, strerror(errno));
}

/* The sentinel of HOLDER is still there: GW, refused, emptied nothing. */
static void check_sentinel(struct verdict *v, const struct gw *gw,
			   const struct gw *holder)
{
	char p[PATH_MAX];
	struct stat st;

	snprintf(p, sizeof(p), "%s/work/" SENTINEL, g.work);
	check(v, !lstat(p, &st), "the sentinel %s is gone: %s emptied %s's work dir", p,
	      gw->name, holder->name);
}

/* ---- the gateways ---- */

static void gw_disconnect(struct gw *gw)
{
	if (gw->rpc)
		rpc_destroy_context(gw->rpc);
	gw->rpc = NULL;
}

static struct rpc_context *gw_connect(struct gw *gw)
{
	gw_disconnect(gw);
	gw->rpc = netns_connect(gw->ns, g.home_ns, NFS_PORT, NFS_PROG, 3);
	if (!gw->rpc)
		fail_msg("no connection to gateway %s", gw->name);
	return gw->rpc;
}

static int gw_mnt(const struct gw *gw, struct fh *root)
{
	return netns_mnt(gw->ns, g.home_ns, MOUNT_PORT, EXPORT, root);
}

static int gw_start(struct gw *gw)
{
	char name[16];

	if (!test_server_start_netns(g.bin, gw->state, gw->args, gw->ns, &gw->srv))
		return 0;
	snprintf(name, sizeof(name), "gateway %s", gw->name);
	test_server_print_log(gw->state, name);
	fprintf(stderr, "gateway %s did not start\n", gw->name);
	return -1;
}

/* SIGKILL, by pid: no chance to release anything.  The wait status. */
static int gw_kill(struct gw *gw)
{
	int st = -1;

	gw_disconnect(gw);
	if (gw->srv.pid > 0 && !kill(gw->srv.pid, SIGKILL))
		waitpid(gw->srv.pid, &st, 0);
	gw->srv.pid = -1;
	return st;
}

static void gw_init(struct gw *gw, int i)
{
	int k = 0;

	gw->name = i == A ? "A" : "B";
	snprintf(gw->state, sizeof(gw->state), "%s/state%s", g.tmp, gw->name);
	snprintf(gw->lower_arg, sizeof(gw->lower_arg), "--lowerdir=%s", g.lower);
	snprintf(gw->upper_arg, sizeof(gw->upper_arg), "--upperdir=%s/%%a/upper",
		 g.shared);
	snprintf(gw->work_arg, sizeof(gw->work_arg), "--workdir=%s/%%a/work", g.shared);
	snprintf(gw->key_arg, sizeof(gw->key_arg), "--key-file=%s", g.key);
	gw->args[k++] = gw->lower_arg;
	gw->args[k++] = gw->upper_arg;
	gw->args[k++] = gw->work_arg;
	gw->args[k++] = "--export=" EXPORT;
	gw->args[k++] = "--nfs-port=" STR(NFS_PORT);
	gw->args[k++] = "--mount-port=" STR(MOUNT_PORT);
	gw->args[k++] = gw->key_arg;
	gw->args[k++] = "--client-union-idle=" STR(IDLE_S);
	gw->args[k] = NULL;
	gw->ns = netns_new(g.home_ns);
	if (gw->ns < 0)
		fail_setup("make a network", "namespace");
}

/* GETATTR of FH through GW every RETRY_MS until NFS3_OK, SECONDS at most:
 * the seconds it took, or -1.  *JUKEBOX counts the NFS3ERR_JUKEBOX answers
 * before; *ODD is the first other answer (NFS3_OK when none). */
static double getattr_until_ok(struct gw *gw, const struct fh *fh, double seconds,
			       unsigned *jukebox, int *odd)
{
	double t0 = it_now_s();

	*jukebox = 0;
	*odd = NFS3_OK;
	for (;;) {
		int st = gw->rpc ? nfs_raw_getattr(gw->rpc, fh).status : -1;

		if (st == NFS3_OK)
			return it_now_s() - t0;
		if (st == NFS3ERR_JUKEBOX)
			(*jukebox)++;
		else if (*odd == NFS3_OK)
			*odd = st;
		if (st == -1) /* the connection is of no further use */
			gw_disconnect(gw);
		if (it_now_s() - t0 > seconds)
			return -1;
		it_sleep_ms(RETRY_MS);
		if (!gw->rpc)
			gw->rpc = netns_connect(gw->ns, g.home_ns, NFS_PORT, NFS_PROG, 3);
	}
}

/* LOOKUP of NAME in the union's root through GW, and READ of it: its bytes
 * must be DATA. */
static void check_read(struct verdict *v, struct gw *gw, const char *name,
		       const char *data)
{
	char what[64];
	struct nfs_raw_obj o = nfs_raw_lookup(gw->rpc, &g.root, name);
	struct nfs_raw_text t;

	snprintf(what, sizeof(what), "LOOKUP of %s", name);
	check_nfs(v, gw->name, what, o.status, NFS3_OK);
	if (o.status != NFS3_OK)
		return;
	t = nfs_raw_read_text(gw->rpc, &o.fh);
	snprintf(what, sizeof(what), "READ of %s", name);
	check_nfs(v, gw->name, what, t.status, NFS3_OK);
	if (t.status == NFS3_OK)
		check(v, !strcmp(t.data, data), "%s read \"%s\" from %s, expected \"%s\"",
		      gw->name, t.data, name, data);
}

/* ---- the client's tree, followed across gateways ---- */

/* Adds PATH, made through GW with handle MADE, to the tree: its LOOKUP from
 * the root there gives the handle and fileid the other gateways must give. */
static void tree_add(struct gw *gw, const char *path, const char *data,
		     const struct fh *made)
{
	struct obj *t = &g.tree[g.ntree];
	struct nfs_raw_obj o = nfs_raw_walk(gw->rpc, &g.root, path);

	if (g.ntree == TREE_MAX)
		fail_msg("more than %d objects in the tree", TREE_MAX);
	if (o.status != NFS3_OK || !o.attrs)
		fail_msg("%s answered %s to LOOKUP of %s, expected NFS3_OK", gw->name,
			 nfs_raw_stat_name(o.status), path);
	*t = (struct obj){
	    .path = path, .data = data, .made = *made, .fh = o.fh, .fileid = o.fileid};
	g.ntree++;
}

/* A file NAME in DIR made through GW with DATA written FILE_SYNC: its
 * handle, or the test fails. */
static struct fh make_file(struct gw *gw, const struct fh *dir, const char *name,
			   const char *data)
{
	struct nfs_raw_obj o;
	int st = nfs_raw_create_or_remove(gw->rpc, dir, name, true);

	if (st != NFS3_OK)
		fail_msg("%s answered %s to CREATE of %s, expected NFS3_OK", gw->name,
			 nfs_raw_stat_name(st), name);
	o = nfs_raw_lookup(gw->rpc, dir, name);
	if (o.status != NFS3_OK)
		fail_msg("%s answered %s to LOOKUP of %s, expected NFS3_OK", gw->name,
			 nfs_raw_stat_name(o.status), name);
	st = nfs_raw_write(gw->rpc, &o.fh, 0, data, (uint32_t)strlen(data));
	if (st != NFS3_OK)
		fail_msg("%s answered %s to WRITE FILE_SYNC of %s, expected NFS3_OK",
			 gw->name, nfs_raw_stat_name(st), name);
	return o.fh;
}

/* The client's tree made through A: beside fromA (FROM_A, its handle), a
 * second file and its LINK, a dir with a file in it, and a file renamed
 * into the dir, whose handle from before the RENAME is the one followed. */
static void make_tree(struct gw *a, const struct fh *from_a)
{
	struct fh f2, inner, old;
	struct nfs_raw_obj d, r;
	int st;

	r = nfs_raw_getattr(a->rpc, &g.root);
	if (r.status != NFS3_OK)
		fail_msg("A answered %s to GETATTR of the root, expected NFS3_OK",
			 nfs_raw_stat_name(r.status));
	g.root_fileid = r.fileid;
	f2 = make_file(a, &g.root, "second", "second: two names, one file");
	d = nfs_raw_mkdir(a->rpc, &g.root, "dir");
	if (d.status != NFS3_OK || !d.fh.len)
		fail_msg("A answered %s to MKDIR of dir, expected NFS3_OK and a handle",
			 nfs_raw_stat_name(d.status));
	inner = make_file(a, &d.fh, "inner", "inner: a file in a dir made by A");
	old = make_file(a, &g.root, "old", "renamed: made as old, renamed into dir");
	st = nfs_raw_rename(a->rpc, &g.root, "old", &d.fh, "renamed");
	if (st != NFS3_OK)
		fail_msg(
		    "A answered %s to RENAME of old to dir/renamed, expected NFS3_OK",
		    nfs_raw_stat_name(st));
	st = nfs_raw_link(a->rpc, &f2, &g.root, "second-link");
	if (st != NFS3_OK)
		fail_msg(
		    "A answered %s to LINK of second as second-link, expected NFS3_OK",
		    nfs_raw_stat_name(st));
	tree_add(a, "fromA", DATA_A, from_a);
	tree_add(a, "second", "second: two names, one file", &f2);
	tree_add(a, "second-link", "second: two names, one file", &f2);
	tree_add(a, "dir", NULL, &d.fh);
	tree_add(a, "dir/inner", "inner: a file in a dir made by A", &inner);
	tree_add(a, "dir/renamed", "renamed: made as old, renamed into dir", &old);
}

static bool fh_eq(const struct fh *x, const struct fh *y)
{
	return x->len == y->len && !memcmp(x->d, y->d, x->len);
}

/* Every object of the tree through GW: the root's and each handle (as made
 * and as looked up) answer GETATTR with the recorded fileid, a file's READ
 * gives its bytes, and LOOKUP of its path gives the recorded handle bytes
 * and fileid. */
static void check_tree(struct verdict *v, struct gw *gw)
{
	struct nfs_raw_obj r = nfs_raw_getattr(gw->rpc, &g.root);

	check_nfs(v, gw->name, "GETATTR of the root handle", r.status, NFS3_OK);
	if (r.status == NFS3_OK)
		check(v, r.fileid == g.root_fileid,
		      "%s gave the root fileid %" PRIu64 ", expected %" PRIu64, gw->name,
		      r.fileid, g.root_fileid);
	for (size_t i = 0; i < g.ntree; i++) {
		const struct obj *t = &g.tree[i];
		const struct fh *hs[2] = {&t->made, &t->fh};
		char what[96];

		for (int k = 0; k < 2; k++) {
			struct nfs_raw_text d;

			snprintf(what, sizeof(what), "GETATTR of %s's handle (%s)",
				 t->path, k ? "looked up" : "as made");
			r = nfs_raw_getattr(gw->rpc, hs[k]);
			check_nfs(v, gw->name, what, r.status, NFS3_OK);
			if (r.status == NFS3_OK)
				check(v, r.fileid == t->fileid,
				      "%s: %s gave fileid %" PRIu64 ", expected %" PRIu64,
				      gw->name, what, r.fileid, t->fileid);
			if (!t->data)
				continue;
			d = nfs_raw_read_text(gw->rpc, hs[k]);
			snprintf(what, sizeof(what), "READ of %s's handle (%s)", t->path,
				 k ? "looked up" : "as made");
			check_nfs(v, gw->name, what, d.status, NFS3_OK);
			if (d.status == NFS3_OK)
				check(v, !strcmp(d.data, t->data),
				      "%s: %s read \"%s\", expected \"%s\"", gw->name,
				      what, d.data, t->data);
		}
		r = nfs_raw_walk(gw->rpc, &g.root, t->path);
		snprintf(what, sizeof(what), "LOOKUP of %s from the root", t->path);
		check_nfs(v, gw->name, what, r.status, NFS3_OK);
		if (r.status != NFS3_OK)
			continue;
		check(v, fh_eq(&r.fh, &t->fh),
		      "%s: %s gave a handle of %u bytes other than the recorded one "
		      "(%u bytes)",
		      gw->name, what, r.fh.len, t->fh.len);
		check(v, r.fileid == t->fileid,
		      "%s: %s gave fileid %" PRIu64 ", expected %" PRIu64, gw->name, what,
		      r.fileid, t->fileid);
	}
	fprintf(stderr, "gateway %s: the root and %zu objects of the tree checked\n",
		gw->name, g.ntree);
}

/* ---- the steps ---- */

/* 2. A serves the client's union and holds its lock. */
/* The threads of process PID (/proc/PID/status), or -1. */
static long threads_of(pid_t pid)
{
	char path[64], line[128];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "Threads:", 8))
			n = atol(line + 8);
	if (f)
		fclose(f);
	return n;
}

static void test_a_serves(void **state)
{
	struct verdict v = {.step = "step 2 (A serves)"};
	struct gw *a = &g.gw[A];
	struct rpc_context *rpc;
	struct nfs_raw_obj o;
	struct fh fh_a;
	double t0 = it_now_s();
	long threads = threads_of(a->srv.pid);
	int st;
	(void)state;

	g.step[2] = FAILED; /* until its verdict */
	st = gw_mnt(a, &g.root);
	if (st != MNT3_OK)
		fail_msg("A answered %s to MNT of " EXPORT ", expected MNT3_OK",
			 nfs_raw_mnt_stat_name(st));
	rpc = gw_connect(a);
	st = nfs_raw_create_or_remove(rpc, &g.root, "fromA", true);
	if (st != NFS3_OK)
		fail_msg("A answered %s to CREATE of fromA, expected NFS3_OK",
			 nfs_raw_stat_name(st));
	o = nfs_raw_lookup(rpc, &g.root, "fromA");
	if (o.status != NFS3_OK)
		fail_msg("A answered %s to LOOKUP of fromA, expected NFS3_OK",
			 nfs_raw_stat_name(o.status));
	fh_a = o.fh;
	st = nfs_raw_write(rpc, &o.fh, 0, DATA_A, sizeof(DATA_A) - 1);
	if (st != NFS3_OK)
		fail_msg("A answered %s to WRITE FILE_SYNC of fromA, expected NFS3_OK",
			 nfs_raw_stat_name(st));
	o = nfs_raw_walk(rpc, &g.root, LOWER_FILE);
	if (o.status != NFS3_OK)
		fail_msg("A answered %s to LOOKUP of " LOWER_FILE ", expected NFS3_OK",
			 nfs_raw_stat_name(o.status));
	g.lower_fh = o.fh;
	make_tree(a, &fh_a);

	put_sentinel(a);
	g.a_serves = true;

	check_upper(&v, "after A's WRITE", (const struct want_file[]){{"fromA", DATA_A}},
		    1);
	check_lock(&v, a);
	/* the union's own table is flushed by the server's one syncer thread
	 * (union/sync.c rule 5): a union opened starts no thread */
	check(&v, threads_of(a->srv.pid) == threads,
	      "A has %ld threads with the union open, %ld before its MNT",
	      threads_of(a->srv.pid), threads);
	snap_take(&g.upper_snap, g.upper);
	snap_take(&g.work_snap, g.work);
	fprintf(stderr,
		"A (pid %d) serves %s: %zu entries in the upper, %zu in the work dir\n",
		(int)a->srv.pid, g.udir, g.upper_snap.n, g.work_snap.n);
	verdict_end(&v, 2, t0);
}

/* 3. B, started while A holds the union, is refused and touches nothing. */
static void test_b_refused(void **state)
{
	struct verdict v = {.step = "step 3 (B refused)"};
	struct gw *a = &g.gw[A], *b = &g.gw[B];
	struct fh broot;
	int mnt, ga, lk, cr;
	double t0 = it_now_s();
	(void)state;

	if (!g.a_serves)
		skip_step(3, "A did not serve the client's union in step 2");
	g.step[3] = FAILED; /* until its verdict */
	if (gw_start(b))
		fail_msg("gateway B did not start");
	fprintf(stderr, "B: pid %d, started while A (pid %d) holds the union\n",
		(int)b->srv.pid, (int)a->srv.pid);
	mnt = gw_mnt(b, &broot);
	check(&v, mnt == MNT3ERR_SERVERFAULT,
	      "B answered %s to MNT of " EXPORT ", expected MNT3ERR_SERVERFAULT",
	      nfs_raw_mnt_stat_name(mnt));
	gw_connect(b);
	ga = nfs_raw_getattr(b->rpc, &g.root).status;
	check_nfs(&v, "B", "GETATTR of A's root handle", ga, NFS3ERR_JUKEBOX);
	lk = nfs_raw_lookup(b->rpc, &g.root, "fromA").status;
	check_nfs(&v, "B", "LOOKUP of fromA in A's root handle", lk, NFS3ERR_JUKEBOX);
	cr = nfs_raw_create_or_remove(b->rpc, &g.root, "fromB-refused", true);
	check_nfs(&v, "B", "CREATE of fromB-refused in A's root handle", cr,
		  NFS3ERR_JUKEBOX);
	g.b_not_serving =
	    mnt != MNT3_OK && ga != NFS3_OK && lk != NFS3_OK && cr != NFS3_OK;

	check_not_open(&v, b, "while A holds the union");
	check_log(&v, b, a, a->srv.pid);
	check_sentinel(&v, b, a);
	check_upper(&v, "with B refused", (const struct want_file[]){{"fromA", DATA_A}},
		    1);
	check_unchanged(&v, "the upper", g.upper, &g.upper_snap);
	check_unchanged(&v, "the work dir", g.work, &g.work_snap);
	verdict_end(&v, 3, t0);
}

/* 4. A dies; B takes the union over within seconds. */
static void test_b_takes_over(void **state)
{
	struct verdict v = {.step = "step 4 (B takes over)"};
	struct gw *a = &g.gw[A], *b = &g.gw[B];
	const struct want_file both[] = {{"fromA", DATA_A}, {"fromB", DATA_B}};
	struct nfs_raw_obj o;
	struct nfs_raw_text t;
	struct fh broot;
	unsigned jukebox;
	int st, odd;
	double t0 = it_now_s();
	(void)state;

	if (!g.b_not_serving)
		skip_step(4, "B served the client's union beside A in step 3");
	g.step[4] = FAILED; /* until its verdict */
	st = gw_kill(a);
	check(&v, st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	      "A ended with wait status 0x%x, not by SIGKILL", st);
	g.takeover_s = getattr_until_ok(b, &g.root, TAKEOVER_WAIT_S, &jukebox, &odd);
	if (g.takeover_s < 0) {
		check(&v, false,
		      "B answered no GETATTR of A's root handle with NFS3_OK in the %d s "
		      "after A's death (%u NFS3ERR_JUKEBOX, the first other answer %s)",
		      TAKEOVER_WAIT_S, jukebox, nfs_raw_stat_name(odd));
		verdict_end(&v, 4, t0);
	}
	fprintf(stderr,
		"B took the union over %.2f s after A's death (%u GETATTRs answered "
		"NFS3ERR_JUKEBOX before)\n",
		g.takeover_s, jukebox);
	check(&v, g.takeover_s < TAKEOVER_MAX_S,
	      "B took the union over %.1f s after A's death, expected less than %d s",
	      g.takeover_s, TAKEOVER_MAX_S);
	check(&v, odd == NFS3_OK,
	      "B answered %s to a GETATTR of A's root handle before NFS3_OK, expected "
	      "NFS3ERR_JUKEBOX",
	      nfs_raw_stat_name(odd));
	if (!b->rpc)
		gw_connect(b);

	st = nfs_raw_create_or_remove(b->rpc, &g.root, "fromB", true);
	check_nfs(&v, "B", "CREATE of fromB", st, NFS3_OK);
	o = nfs_raw_lookup(b->rpc, &g.root, "fromB");
	check_nfs(&v, "B", "LOOKUP of fromB", o.status, NFS3_OK);
	if (o.status == NFS3_OK)
		check_nfs(&v, "B", "WRITE FILE_SYNC of fromB",
			  nfs_raw_write(b->rpc, &o.fh, 0, DATA_B, sizeof(DATA_B) - 1),
			  NFS3_OK);
	check_tree(&v, b);
	if (o.status == NFS3_OK)
		tree_add(b, "fromB", DATA_B, &o.fh);
	check_read(&v, b, "fromA", DATA_A);
	t = nfs_raw_read_text(b->rpc, &g.lower_fh);
	check_nfs(&v, "B", "READ of " LOWER_FILE " by A's handle", t.status, NFS3_OK);
	if (t.status == NFS3_OK)
		check(&v, !strcmp(t.data, LOWER_DATA),
		      "B read \"%s\" from " LOWER_FILE ", expected \"%s\"", t.data,
		      LOWER_DATA);
	check_lock(&v, b);
	check_upper(&v, "after B's WRITE", both, 2);
	st = gw_mnt(b, &broot);
	check(&v, st == MNT3_OK, "B answered %s to MNT of " EXPORT ", expected MNT3_OK",
	      nfs_raw_mnt_stat_name(st));
	g.b_took_over = g.takeover_s >= 0 && st == MNT3_OK;
	verdict_end(&v, 4, t0);
}

/* 5. A, restarted, waits until B releases the union, then serves it. */
static void test_a_waits_for_b(void **state)
{
	struct verdict v = {.step = "step 5 (A waits for B)"};
	struct gw *a = &g.gw[A], *b = &g.gw[B];
	const struct want_file both[] = {{"fromA", DATA_A}, {"fromB", DATA_B}};
	unsigned jukebox;
	struct fh fh;
	int odd;
	double t0 = it_now_s();
	(void)state;

	if (!g.b_took_over)
		skip_step(5, "B did not take the union over in step 4");
	g.step[5] = FAILED; /* until its verdict */
	put_sentinel(b);
	snap_take(&g.upper_snap, g.upper);
	snap_take(&g.work_snap, g.work);
	if (gw_start(a))
		fail_msg("gateway A did not start again");
	fprintf(stderr,
		"A: pid %d, started again on its state dir while B (pid %d) holds "
		"the union\n",
		(int)a->srv.pid, (int)b->srv.pid);
	gw_connect(a);
	check_nfs(&v, "the new A", "GETATTR of the root handle",
		  nfs_raw_getattr(a->rpc, &g.root).status, NFS3ERR_JUKEBOX);
	check_nfs(&v, "the new A", "LOOKUP of fromB",
		  nfs_raw_lookup(a->rpc, &g.root, "fromB").status, NFS3ERR_JUKEBOX);
	check_not_open(&v, a, "while B holds the union");
	check_log(&v, a, b, b->srv.pid);
	check_sentinel(&v, a, b);
	check_unchanged(&v, "the upper", g.upper, &g.upper_snap);
	check_unchanged(&v, "the work dir", g.work, &g.work_snap);

	check(&v, !netns_umnt(b->ns, g.home_ns, MOUNT_PORT, EXPORT),
	      "B did not answer UMNT of " EXPORT);
	g.retake_s = getattr_until_ok(a, &g.root, RELEASE_MAX_S, &jukebox, &odd);
	if (g.retake_s < 0) {
		check(&v, false,
		      "A answered no GETATTR of the root handle with NFS3_OK in the %d s "
		      "after B's client unmounted (--client-union-idle=%d; %u "
		      "NFS3ERR_JUKEBOX, the first other answer %s)",
		      RELEASE_MAX_S, IDLE_S, jukebox, nfs_raw_stat_name(odd));
		verdict_end(&v, 5, t0);
	}
	fprintf(
	    stderr,
	    "A served the union %.2f s after B's client unmounted (idle time %d s; %u "
	    "GETATTRs answered NFS3ERR_JUKEBOX before)\n",
	    g.retake_s, IDLE_S, jukebox);
	check(&v, odd == NFS3_OK,
	      "A answered %s to a GETATTR of the root handle before NFS3_OK, expected "
	      "NFS3ERR_JUKEBOX",
	      nfs_raw_stat_name(odd));
	if (!a->rpc)
		gw_connect(a);
	check_not_open(&v, b, "once A serves the union again");
	check_lock(&v, a);
	check_read(&v, a, "fromA", DATA_A);
	check_read(&v, a, "fromB", DATA_B);
	check_upper(&v, "with A back", both, 2);
	check_tree(&v, a);
	fh = make_file(a, &g.root, "fromA2", DATA_A2);
	tree_add(a, "fromA2", DATA_A2, &fh);
	g.a_back = !v.bad;
	verdict_end(&v, 5, t0);
}

/* 6. A stops cleanly; B, started afresh on an empty state dir, serves the
 * union with every handle the client has. */
static void test_b_fresh(void **state)
{
	struct verdict v = {.step = "step 6 (B afresh after A's stop)"};
	struct gw *a = &g.gw[A], *b = &g.gw[B];
	struct fh broot;
	unsigned jukebox;
	double t0 = it_now_s(), took;
	int st, odd;
	(void)state;

	if (!g.a_back)
		skip_step(6, "A did not serve the union again in step 5");
	g.step[6] = FAILED; /* until its verdict */
	gw_disconnect(a);
	st = test_server_stop(&a->srv);
	check(&v, st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "A ended its clean stop with wait status 0x%x, expected exit 0", st);
	gw_disconnect(b);
	test_server_stop(&b->srv);
	/* a B that never saw the union: no handle of it can come from B's own
	 * state, only from the table in the union's work dir */
	if (test_tree_remove(b->state))
		fail_msg("cannot remove B's state dir %s: %s", b->state, strerror(errno));
	if (gw_start(b))
		fail_msg("gateway B did not start again");
	fprintf(stderr, "B: pid %d, started on an empty state dir after A's stop\n",
		(int)b->srv.pid);
	gw_connect(b);
	took = getattr_until_ok(b, &g.root, TAKEOVER_WAIT_S, &jukebox, &odd);
	check(&v, took >= 0 && jukebox == 0 && odd == NFS3_OK,
	      "B answered the root's GETATTR with NFS3_OK after %.1f s, %u "
	      "NFS3ERR_JUKEBOX and first %s before; expected at once",
	      took, jukebox, nfs_raw_stat_name(odd));
	if (took < 0)
		verdict_end(&v, 6, t0);
	if (!b->rpc)
		gw_connect(b);
	check_tree(&v, b);
	st = gw_mnt(b, &broot);
	check(&v, st == MNT3_OK && fh_eq(&broot, &g.root),
	      "B answered %s to MNT of " EXPORT ", expected MNT3_OK and A's root handle",
	      nfs_raw_mnt_stat_name(st));
	st = nfs_raw_create_or_remove(b->rpc, &g.root, "fromB2", true);
	check_nfs(&v, "B", "CREATE of fromB2", st, NFS3_OK);
	check_lock(&v, b);
	verdict_end(&v, 6, t0);
}

/* ---- set-up and teardown ---- */

static void make_lower(void)
{
	char p[PATH_MAX];
	unsigned char key[KEY_BYTES];

	if (mkdir(g.lower, 0755) || mkdir(g.shared, 0755))
		fail_setup("mkdir", g.lower);
	snprintf(p, sizeof(p), "%s/hello", g.lower);
	write_file(p, "hello\n", 6, 0644);
	snprintf(p, sizeof(p), "%s/docs", g.lower);
	if (mkdir(p, 0755))
		fail_setup("mkdir", p);
	snprintf(p, sizeof(p), "%s/docs/sub", g.lower);
	if (mkdir(p, 0755))
		fail_setup("mkdir", p);
	snprintf(p, sizeof(p), "%s/docs/sub/deep", g.lower);
	write_file(p, "deep\n", 5, 0644);
	snprintf(p, sizeof(p), "%s/" LOWER_FILE, g.lower);
	write_file(p, LOWER_DATA, sizeof(LOWER_DATA) - 1, 0644);
	snprintf(p, sizeof(p), "%s/link", g.lower);
	if (symlink("hello", p))
		fail_setup("symlink", p);
	if (getrandom(key, sizeof(key), 0) != sizeof(key))
		fail_setup("getrandom", "key");
	write_file(g.key, key, sizeof(key), 0600);
}

static int group_setup(void **state)
{
	(void)state;
	g.t0 = it_now_s();
	if (geteuid() != 0) {
		fprintf(stderr, "needs root (network namespaces)\n");
		exit(77);
	}
	/* the test's own network namespace: nothing it does reaches the host's */
	g.home_ns = netns_new(-1);
	if (g.home_ns < 0)
		fail_setup("make a network", "namespace");
	snprintf(g.tmp, sizeof(g.tmp), TMP_PREFIX "XXXXXX");
	if (!mkdtemp(g.tmp))
		fail_setup("mkdtemp", g.tmp);
	snprintf(g.lower, sizeof(g.lower), "%s/lower", g.tmp);
	snprintf(g.shared, sizeof(g.shared), "%s/shared", g.tmp);
	snprintf(g.key, sizeof(g.key), "%s/key", g.tmp);
	snprintf(g.udir, sizeof(g.udir), "%s/" CLIENT, g.shared);
	snprintf(g.upper, sizeof(g.upper), "%s/upper", g.udir);
	snprintf(g.work, sizeof(g.work), "%s/work", g.udir);
	snprintf(g.lock, sizeof(g.lock), "%s/" LOCK_NAME, g.work);
	make_lower();
	for (int i = 0; i < NGW; i++)
		gw_init(&g.gw[i], i);
	sleep(1); /* no layer dir changed within the second before a gateway lists it */
	if (gw_start(&g.gw[A])) {
		cleanup();
		return -1;
	}
	fprintf(stderr, "A: pid %d; the client's union dir %s\n", (int)g.gw[A].srv.pid,
		g.udir);
	return 0;
}

/* Stops every server by pid, lets the namespaces go and removes the temp
 * dir; once, from wherever it is called. */
static void cleanup(void)
{
	static bool done;

	if (done)
		return;
	done = true;
	for (int i = 0; i < NGW; i++) {
		struct gw *gw = &g.gw[i];
		pid_t pid = gw->srv.pid;
		int st;

		gw_disconnect(gw);
		st = test_server_stop(&gw->srv);
		if (st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			fprintf(stderr,
				"gateway %s (pid %d) ended with wait status 0x%x\n",
				gw->name, (int)pid, st);
		if (gw->ns >= 0)
			close(gw->ns);
	}
	if (g.tmp[0]) {
		char took[64] = "no takeover", back[64] = "A not back";

		if (g.takeover_s >= 0)
			snprintf(took, sizeof(took), "B took over %.2f s after A's death",
				 g.takeover_s);
		if (g.retake_s >= 0)
			snprintf(back, sizeof(back), "A back %.2f s after B's UMNT",
				 g.retake_s);
		fprintf(stderr,
			"summary: step 2 (A serves) %s, step 3 (B refused) %s, step 4 (B "
			"takes over) %s, step 5 (A waits for B) %s, step 6 (B afresh "
			"after A's stop) %s; %s, %s; %.1f s in all\n",
			outcome_name[g.step[2]], outcome_name[g.step[3]],
			outcome_name[g.step[4]], outcome_name[g.step[5]],
			outcome_name[g.step[6]], took, back, it_now_s() - g.t0);
	}
	snap_free(&g.upper_snap);
	snap_free(&g.work_snap);
	if (g.home_ns >= 0)
		close(g.home_ns);
	test_tmp_remove(g.tmp, TMP_PREFIX);
}

static int group_teardown(void **state)
{
	(void)state;
	cleanup();
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_serves),	 cmocka_unit_test(test_b_refused),
	    cmocka_unit_test(test_b_takes_over), cmocka_unit_test(test_a_waits_for_b),
	    cmocka_unit_test(test_b_fresh),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	g.bin = argv[1];
	g.home_ns = -1;
	for (int i = 0; i < NGW; i++)
		g.gw[i].srv.pid = -1, g.gw[i].ns = -1;
	g.takeover_s = g.retake_s = -1;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
