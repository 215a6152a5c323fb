/* SPDX-License-Identifier: Apache-2.0 */
/* lindex_bench.c - the layer identity index (union/lindex.c) over a layer of
 * 100,000 files: what a build costs, fresh and inherited, with and without
 * content digests, how big the index is, and what a lookup costs.
 *
 *   lindex_bench [--files N] [--runs N] [--dir DIR] [--keep]
 *
 * Makes a temp dir under DIR ($TMPDIR, else /var/tmp) holding
 *   v1   N files of 0 to 4095 bytes, file I in leaf directory I % 320, the 320
 *        leaves in 20 top directories (341 directories)
 *   v2   `cp -a` of v1: new inodes, the same content and mtimes
 *   v3   `cp -a` of v1, then 5% of its files rewritten (same size, other
 *        bytes, new mtime; empty ones left alone) and another 5% removed
 * and measures, each the median of RUNS builds (the trees are in the page
 * cache, so a digest costs its hashing, not a disk read):
 *   fresh      v1 without a parent index
 *   same       v2 inheriting from v1's index
 *   changed    v3 inheriting from v1's index
 * each without and with UN_LX_DIGESTS (the inheriting builds inherit from a
 * v1 index built the same way), then 1,000,000 random un_lx_lookup and
 * un_lx_get calls on v1's index.  Every inherited build is checked: v2 keeps
 * every objnum, v3 every objnum but its changed and removed files' (exit 1
 * otherwise).  Exit 2 on bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lindex.h"

/* Paths under the bench dir are short; a truncated one fails its open. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define TOPS	     20
#define LEAVES	     320 /* in all, LEAVES / TOPS per top directory */
#define MAX_SIZE     4096
#define CALLS	     1000000
#define RUNS_MAX     9
#define CHANGE_EVERY 20 /* 5% */

struct opts {
	size_t files, runs;
	const char *dir;
	bool keep;
};

struct result {
	double secs;
	uint64_t count, kept, size;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

static void die(const char *what)
{
	fprintf(stderr, "lindex_bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void file_path(char *buf, size_t len, const char *base, const char *tree, size_t i)
{
	size_t leaf = i % LEAVES;

	snprintf(buf, len, "%s/%s/t%02zu/l%03zu/f%06zu", base, tree, leaf % TOPS, leaf,
		 i);
}

/* Writes file I of TREE with bytes from SEED. */
static void write_file(const char *base, const char *tree, size_t i, uint64_t seed)
{
	static uint8_t data[MAX_SIZE];
	size_t size = mix(i) % MAX_SIZE;
	char path[PATH_MAX];
	int fd;

	for (size_t k = 0; k < size; k += 8) {
		uint64_t w = mix(seed + i * MAX_SIZE + k);

		memcpy(data + k, &w, size - k < 8 ? size - k : 8);
	}
	file_path(path, sizeof(path), base, tree, i);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		die(path);
	close(fd);
}

static void make_dirs(const char *base, const char *tree)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", base, tree);
	if (mkdir(path, 0755))
		die(path);
	for (size_t t = 0; t < TOPS; t++) {
		snprintf(path, sizeof(path), "%s/%s/t%02zu", base, tree, t);
		if (mkdir(path, 0755))
			die(path);
	}
	for (size_t l = 0; l < LEAVES; l++) {
		snprintf(path, sizeof(path), "%s/%s/t%02zu/l%03zu", base, tree, l % TOPS,
			 l);
		if (mkdir(path, 0755))
			die(path);
	}
}

static void copy_tree(const char *base, const char *from, const char *to)
{
	char cmd[2 * PATH_MAX + 32];

	snprintf(cmd, sizeof(cmd), "cp -a '%s/%s' '%s/%s'", base, from, base, to);
	if (system(cmd) != 0)
		die(cmd);
}

/* v3's changes: every CHANGE_EVERY-th file rewritten, the next removed. */
static void change_tree(const char *base, size_t files, size_t *changed, size_t *removed)
{
	char path[PATH_MAX];

	for (size_t i = 0; i < files; i++) {
		/* An empty file cannot get other bytes of its size. */
		if (mix(i + 7) % CHANGE_EVERY == 0 && mix(i) % MAX_SIZE) {
			write_file(base, "v3", i, 0x5eed);
			*changed += 1;
		} else if (mix(i + 7) % CHANGE_EVERY == 1) {
			file_path(path, sizeof(path), base, "v3", i);
			if (unlink(path))
				die(path);
			*removed += 1;
		}
	}
}

static void make_trees(const struct opts *o, const char *base, size_t *changed,
		       size_t *removed)
{
	double t0 = now_s(), bytes = 0;

	make_dirs(base, "v1");
	for (size_t i = 0; i < o->files; i++) {
		write_file(base, "v1", i, 1);
		bytes += (double)(mix(i) % MAX_SIZE);
	}
	copy_tree(base, "v1", "v2");
	copy_tree(base, "v1", "v3");
	change_tree(base, o->files, changed, removed);
	printf("trees made in %.1f s: %zu files (%.0f MB), %d directories; v3: %zu "
	       "changed, %zu removed\n",
	       now_s() - t0, o->files, bytes / 1e6, 1 + TOPS + LEAVES, *changed,
	       *removed);
}

static struct un_lx *open_index(const char *path)
{
	struct un_lx *lx;

	errno = -un_lx_open(path, &lx);
	if (errno)
		die(path);
	return lx;
}

/* Objnums of NOW that FROM handed out already: the paths that kept theirs. */
static uint64_t count_kept(struct un_lx *now, struct un_lx *from)
{
	struct un_lx_info in, ifrom;
	struct un_lx_entry e;
	uint64_t kept = 0;

	un_lx_info(now, &in);
	un_lx_info(from, &ifrom);
	for (uint64_t n = 1; n <= ifrom.max_objnum; n++)
		kept += un_lx_get(now, n, &e) == 0;
	return kept;
}

/* One build of TREE into OUT, timed; FROM_PATH NULL: fresh. */
static struct result build_once(const char *base, const char *tree, const char *from_path,
				const char *out, unsigned flags)
{
	struct un_lx *from = from_path ? open_index(from_path) : NULL, *lx;
	struct result r = {0};
	char path[PATH_MAX], err[512];
	struct un_lx_info info;
	struct stat st;
	double t0;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%s", base, tree);
	fd = open(path, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		die(path);
	t0 = now_s();
	rc = un_lx_build(fd, from, out, flags, err, sizeof(err));
	r.secs = now_s() - t0;
	close(fd);
	if (rc) {
		fprintf(stderr, "lindex_bench: %s\n", err);
		exit(1);
	}
	lx = open_index(out);
	un_lx_info(lx, &info);
	r.count = info.count;
	r.kept = from ? count_kept(lx, from) : 0;
	if (stat(out, &st))
		die(out);
	r.size = (uint64_t)st.st_size;
	un_lx_close(lx);
	un_lx_close(from);
	return r;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* RUNS builds; the result of the last with the median time. */
static struct result build_median(const struct opts *o, const char *base,
				  const char *tree, const char *from, const char *out,
				  unsigned flags)
{
	double secs[RUNS_MAX];
	struct result r = {0};

	for (size_t k = 0; k < o->runs; k++) {
		r = build_once(base, tree, from, out, flags);
		secs[k] = r.secs;
	}
	qsort(secs, o->runs, sizeof(secs[0]), cmp_double);
	r.secs = secs[o->runs / 2];
	return r;
}

static void print_row(const char *what, bool digests, const struct result *r)
{
	printf("%-8s %-8s %8.3f s %10.0f paths/s %8.1f MB %6.1f B/path %10" PRIu64
	       " kept\n",
	       what, digests ? "digests" : "-", r->secs, (double)r->count / r->secs,
	       (double)r->size / 1e6, (double)r->size / (double)r->count, r->kept);
}

static int check_kept(const char *what, const struct result *r, uint64_t want)
{
	if (r->kept == want)
		return 0;
	fprintf(stderr, "lindex_bench: %s kept %" PRIu64 " objnums, want %" PRIu64 "\n",
		what, r->kept, want);
	return 1;
}

/* The builds of one flag setting; returns the number of failed checks. */
static int bench_builds(const struct opts *o, const char *base, unsigned flags,
			size_t changed, size_t removed)
{
	char v1[PATH_MAX], out[PATH_MAX];
	bool dg = flags & UN_LX_DIGESTS;
	struct result fresh, same, chg;

	snprintf(v1, sizeof(v1), "%s/v1%s.lx", base, dg ? "d" : "");
	snprintf(out, sizeof(out), "%s/out.lx", base);
	fresh = build_median(o, base, "v1", NULL, v1, flags);
	print_row("fresh", dg, &fresh);
	same = build_median(o, base, "v2", v1, out, flags);
	print_row("same", dg, &same);
	chg = build_median(o, base, "v3", v1, out, flags);
	print_row("changed", dg, &chg);
	return check_kept("same", &same, fresh.count) +
	       check_kept("changed", &chg, fresh.count - changed - removed);
}

struct pick {
	uint64_t parent, objnum;
	char name[UN_LX_NAME_MAX + 1];
};

static void bench_calls(const char *base)
{
	char path[PATH_MAX];
	struct un_lx_info info;
	struct un_lx_entry e;
	struct pick *p;
	struct un_lx *lx;
	uint64_t bad = 0;
	double t0, t_lookup, t_get;
	size_t npick = 4096;

	snprintf(path, sizeof(path), "%s/v1.lx", base);
	lx = open_index(path);
	un_lx_info(lx, &info);
	p = calloc(npick, sizeof(*p));
	for (size_t k = 0; k < npick; k++) {
		uint64_t n = 2 + mix(k) % (info.max_objnum - 1);

		bad += un_lx_get(lx, n, &e) != 0;
		p[k] = (struct pick){e.parent, n, ""};
		memcpy(p[k].name, e.name, e.namelen + 1u);
	}
	t0 = now_s();
	for (size_t k = 0; k < CALLS; k++) {
		const struct pick *q = &p[mix(k * 31) % npick];

		bad += un_lx_lookup(lx, q->parent, q->name, &e) != 0 ||
		       e.objnum != q->objnum;
	}
	t_lookup = now_s() - t0;
	t0 = now_s();
	for (size_t k = 0; k < CALLS; k++)
		bad += un_lx_get(lx, 1 + mix(k * 17) % info.max_objnum, &e) != 0;
	t_get = now_s() - t0;
	printf("lookup(parent, name): %.2f us   get(objnum): %.2f us   (%d random calls "
	       "each, 1 thread, %" PRIu64 " wrong)\n",
	       t_lookup * 1e6 / CALLS, t_get * 1e6 / CALLS, CALLS, bad);
	free(p);
	un_lx_close(lx);
	if (bad)
		exit(1);
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.files = 100000, .runs = 3};
	o->dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--keep"))
			o->keep = true;
		else if (i + 1 < argc && !strcmp(argv[i], "--files"))
			o->files = strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(argv[i], "--runs"))
			o->runs = strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(argv[i], "--dir"))
			o->dir = argv[++i];
		else
			return -1;
	}
	return o->files >= 2 && o->runs >= 1 && o->runs <= RUNS_MAX ? 0 : -1;
}

int main(int argc, char **argv)
{
	char base[PATH_MAX], cmd[PATH_MAX + 16];
	size_t changed = 0, removed = 0;
	struct opts o;
	int bad;

	if (parse(argc, argv, &o)) {
		fprintf(stderr,
			"usage: lindex_bench [--files N] [--runs N<=%d] [--dir DIR] "
			"[--keep]\n",
			RUNS_MAX);
		return 2;
	}
	snprintf(base, sizeof(base), "%s/lindex-bench-XXXXXX", o.dir);
	if (!mkdtemp(base))
		die(base);
	make_trees(&o, base, &changed, &removed);
	printf("build    flags    median (of %zu)   rate           index    size       "
	       "objnums\n",
	       o.runs);
	bad = bench_builds(&o, base, 0, changed, removed);
	bad += bench_builds(&o, base, UN_LX_DIGESTS, changed, removed);
	bench_calls(base);
	if (!o.keep) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
		if (system(cmd) != 0)
			die(cmd);
	} else {
		printf("kept %s\n", base);
	}
	return bad ? 1 : 0;
}
