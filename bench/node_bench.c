/* SPDX-License-Identifier: Apache-2.0 */
/* node_bench.c - the node table under a million nodes, through the engine's
 * private API (un_private.h): no layers, no NFS, only the LMDB table.
 *
 *   node_bench [--files N] [--batch N] [--dir DIR] [--keep]
 *
 * Builds a fresh state dir in a temp dir under DIR ($TMPDIR, else /var/tmp) and
 * fills it as clients listing a tree would: leaf directories of PER_DIR files
 * ("file-000123"), 100 leaf directories per top directory, the top directories in
 * the export root, so every file is at depth 3 (root / top / leaf / file).  The
 * nodes are assigned with un_node_ids_batch, BATCH names per call, as
 * READDIRPLUS pages assign them; directories are merged from two layers (two
 * instances), files come from one.  The (dev, ino) of every object is made up
 * but unique, as the table needs.  Then it measures
 *   open     un_state_open of the filled state dir, median of OPEN_RUNS
 *   lookup   un_node_get_or_create for existing names in random order (the
 *            read-only path of LOOKUP), 1 and 2 threads, FILES calls in all
 *   path     un_node_path of random file ids (the table part of resolving a
 *            handle: 4 records read), 1 and 2 threads, FILES calls in all
 *   size     data.mdb's apparent and allocated size, per node
 * and prints a table.  Every answer is checked (an id that differs from the one
 * the fill gave is a failure: exit 1).  Exit 2 on bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "un_private.h"

#define PER_DIR	       1000 /* files per leaf directory */
#define LEAVES_PER_TOP 100  /* leaf directories per top directory */
#define OPEN_RUNS      5
#define NTHREADS_MAX   2
#define DEV_UPPER      0x10001u /* made-up devices of the two layers */
#define DEV_LOWER      0x10002u
#define INO_DIR0       1000u	 /* directories' inode numbers start here */
#define INO_FILE0      10000000u /* files' inode numbers start here */
#define NAME_BUF       32	 /* "file-" or "dir-" and a number */
#define WRONG_ANSWER   (-EDOM)	 /* an id that is not the one the fill gave */

struct opts {
	size_t files, batch;
	const char *dir;
	bool keep;
};

/* The tree as filled: the ids the table gave, by position. */
struct tree {
	size_t files, leaves, tops;
	un_id root;
	un_id *leaf_ids; /* [leaves] */
	un_id *file_ids; /* [files] */
};

/* One worker's share of a timed phase. */
struct job {
	struct un_state *st;
	const struct tree *t;
	const uint32_t *order; /* file indexes to visit */
	size_t n;
	size_t bad; /* answers that were not the fill's */
	int err;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the made-up objects ---- */

/* The observation of file I in its leaf directory; NAME is its buffer. */
static struct un_node_obs file_obs(const struct tree *t, size_t i, char name[NAME_BUF],
				   struct un_devino *di)
{
	*di = (struct un_devino){DEV_LOWER, INO_FILE0 + i};
	return (struct un_node_obs){
	    .parent = t->leaf_ids[i / PER_DIR],
	    .name = name,
	    .namelen = (size_t)snprintf(name, NAME_BUF, "file-%06zu", i),
	    .type = S_IFREG,
	    .inst = di,
	    .ninst = 1,
	};
}

/* The observation of directory NAME (made-up inode INO) in PARENT: merged
 * from both layers. */
static struct un_node_obs dir_obs(un_id parent, const char *name, uint64_t ino,
				  struct un_devino di[2])
{
	di[0] = (struct un_devino){DEV_UPPER, ino};
	di[1] = (struct un_devino){DEV_LOWER, ino};
	return (struct un_node_obs){
	    .parent = parent,
	    .name = name,
	    .namelen = strlen(name),
	    .type = S_IFDIR,
	    .inst = di,
	    .ninst = 2,
	};
}

/* ---- the fill ---- */

static int fill_root(struct un_state *st, struct tree *t)
{
	struct un_devino di[2];
	struct un_node_obs o = dir_obs(UN_ID_NONE, "export:00000001", INO_DIR0, di);

	o.pinned = true;
	return un_node_get_or_create(st, &o, &t->root);
}

/* The top and leaf directories, one call each (there are few). */
static int fill_dirs(struct un_state *st, struct tree *t)
{
	struct un_devino di[2];
	struct un_node_obs o;
	char name[NAME_BUF];
	un_id top = UN_ID_NONE;
	int err = 0;

	for (size_t j = 0; j < t->leaves && !err; j++) {
		if (j % LEAVES_PER_TOP == 0) {
			snprintf(name, sizeof(name), "dir-%06zu", j / LEAVES_PER_TOP);
			o = dir_obs(t->root, name, INO_DIR0 + 1 + j / LEAVES_PER_TOP, di);
			err = un_node_get_or_create(st, &o, &top);
			if (err)
				break;
		}
		snprintf(name, sizeof(name), "dir-%06zu", j);
		o = dir_obs(top, name, INO_DIR0 + 1 + t->tops + j, di);
		err = un_node_get_or_create(st, &o, &t->leaf_ids[j]);
	}
	return err;
}

/* The files, BATCH names per un_node_ids_batch call, never across a leaf
 * directory (a page of a listing is of one directory). */
static int fill_files(struct un_state *st, struct tree *t, size_t batch)
{
	struct un_node_obs *obs = calloc(batch, sizeof(*obs));
	struct un_devino *di = calloc(batch, sizeof(*di));
	char(*names)[NAME_BUF] = calloc(batch, sizeof(*names));
	int err = -ENOMEM;

	if (!obs || !di || !names)
		goto out;
	err = 0;
	for (size_t i = 0; i < t->files && !err;) {
		size_t end = i - i % PER_DIR + PER_DIR, n = 0;

		while (n < batch && i + n < end) {
			obs[n] = file_obs(t, i + n, names[n], &di[n]);
			n++;
		}
		err = un_node_ids_batch(st, obs, n, &t->file_ids[i]);
		i += n;
	}
out:
	free(names);
	free(di);
	free(obs);
	return err;
}

static int fill(const char *state, struct tree *t, size_t batch, double *secs)
{
	struct un_state *st;
	double t0 = now_s();
	int err;

	err = un_state_open(state, &st);
	if (err)
		return err;
	if (!(err = fill_root(st, t)) && !(err = fill_dirs(st, t)) &&
	    !(err = fill_files(st, t, batch)))
		err = un_state_sync(st);
	un_state_close(st);
	*secs = now_s() - t0;
	return err;
}

/* ---- the measurements ---- */

static int measure_open(const char *state, double *med, double *lo, double *hi)
{
	double v[OPEN_RUNS], t0;
	struct un_state *st;
	int err;

	for (size_t i = 0; i < OPEN_RUNS; i++) {
		t0 = now_s();
		err = un_state_open(state, &st);
		v[i] = now_s() - t0;
		if (err)
			return err;
		un_state_close(st);
	}
	*med = median(v, OPEN_RUNS);
	*lo = v[0];
	*hi = v[OPEN_RUNS - 1];
	return 0;
}

static void *lookup_job(void *arg)
{
	struct job *j = arg;
	struct un_devino di;
	struct un_node_obs o;
	char name[NAME_BUF];
	un_id id;

	for (size_t k = 0; k < j->n && !j->err; k++) {
		size_t i = j->order[k];

		o = file_obs(j->t, i, name, &di);
		j->err = un_node_get_or_create(j->st, &o, &id);
		j->bad += !j->err && id != j->t->file_ids[i];
	}
	return NULL;
}

static void *path_job(void *arg)
{
	struct job *j = arg;
	struct un_node_hop *h;
	size_t n;

	for (size_t k = 0; k < j->n && !j->err; k++) {
		un_id id = j->t->file_ids[j->order[k]];

		j->err = un_node_path(j->st, id, &h, &n);
		if (j->err)
			break;
		j->bad += n != 4 || h[3].id != id || h[0].id != j->t->root;
		free(h);
	}
	return NULL;
}

/* Runs FN over ORDER[0..t->files-1] split among NTHR threads; *rate gets calls
 * per second of wall time.  WRONG_ANSWER if an answer was wrong. */
static int run_jobs(struct un_state *st, const struct tree *t, const uint32_t *order,
		    void *(*fn)(void *), size_t nthr, double *rate)
{
	struct job jobs[NTHREADS_MAX];
	pthread_t th[NTHREADS_MAX];
	size_t per = t->files / nthr;
	double t0 = now_s();
	int err = 0;

	for (size_t i = 0; i < nthr; i++) {
		jobs[i] =
		    (struct job){.st = st, .t = t, .order = order + i * per, .n = per};
		if (i == nthr - 1)
			jobs[i].n = t->files - i * per;
		if (pthread_create(&th[i], NULL, fn, &jobs[i]))
			return -EAGAIN; /* (the ones started would run on: fatal) */
	}
	for (size_t i = 0; i < nthr; i++) {
		pthread_join(th[i], NULL);
		if (!err)
			err = jobs[i].err ? jobs[i].err : jobs[i].bad ? WRONG_ANSWER : 0;
	}
	*rate = (double)t->files / (now_s() - t0);
	return err;
}

/* A random order of 0..N-1 (xorshift64, fixed seed: runs are comparable). */
static uint32_t *shuffled(size_t n)
{
	uint32_t *v = malloc(n * sizeof(*v));
	uint64_t x = 0x9e3779b97f4a7c15ull;

	if (!v)
		return NULL;
	for (size_t i = 0; i < n; i++)
		v[i] = (uint32_t)i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j;
		uint32_t tmp;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		j = (size_t)(x % (i + 1));
		tmp = v[i];
		v[i] = v[j];
		v[j] = tmp;
	}
	return v;
}

/* ---- the driver ---- */

struct results {
	double fill_s, open_med, open_lo, open_hi;
	double lookup[NTHREADS_MAX + 1], path[NTHREADS_MAX + 1];
	off_t size, alloc;
};

static int measure(const char *state, const struct tree *t, struct results *r)
{
	struct un_state *st = NULL;
	uint32_t *order = shuffled(t->files);
	int err = -ENOMEM;

	if (!order)
		return err;
	err = measure_open(state, &r->open_med, &r->open_lo, &r->open_hi);
	if (err)
		goto out;
	err = un_state_open(state, &st);
	for (size_t n = 1; n <= NTHREADS_MAX && !err; n++) {
		err = run_jobs(st, t, order, lookup_job, n, &r->lookup[n]);
		if (!err)
			err = run_jobs(st, t, order, path_job, n, &r->path[n]);
	}
out:
	un_state_close(st);
	free(order);
	return err;
}

static int data_size(const char *state, struct results *r)
{
	char path[PATH_MAX + 32];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/data.mdb", state);
	if (stat(path, &sb))
		return -errno;
	r->size = sb.st_size;
	r->alloc = (off_t)sb.st_blocks * 512;
	return 0;
}

static void report(const struct tree *t, const struct opts *o, const struct results *r)
{
	size_t nodes = 1 + t->tops + t->leaves + t->files;

	printf("node_bench: %zu nodes (%zu files in %zu dirs of %d, %zu top dirs, root);"
	       " batch %zu\n",
	       nodes, t->files, t->leaves, PER_DIR, t->tops, o->batch);
	printf("  %-30s %12.2f s   %10.0f nodes/s\n", "fill (un_node_ids_batch)",
	       r->fill_s, (double)nodes / r->fill_s);
	printf("  %-30s %12.3f ms  (min %.3f, max %.3f)\n", "open (median of 5)",
	       r->open_med * 1e3, r->open_lo * 1e3, r->open_hi * 1e3);
	for (size_t n = 1; n <= NTHREADS_MAX; n++)
		printf("  lookup, %zu thread%-17s %12.0f /s  %8.3f us/call/thread\n", n,
		       n > 1 ? "s" : "", r->lookup[n], (double)n * 1e6 / r->lookup[n]);
	for (size_t n = 1; n <= NTHREADS_MAX; n++)
		printf(
		    "  path (depth 3), %zu thread%-9s %12.0f /s  %8.3f us/call/thread\n",
		    n, n > 1 ? "s" : "", r->path[n], (double)n * 1e6 / r->path[n]);
	printf("  %-30s %12jd B   %10.1f B/node\n", "data.mdb apparent size",
	       (intmax_t)r->size, (double)r->size / (double)nodes);
	printf("  %-30s %12jd B   %10.1f B/node\n", "data.mdb allocated (du)",
	       (intmax_t)r->alloc, (double)r->alloc / (double)nodes);
}

static int usage(void)
{
	fprintf(stderr,
		"usage: node_bench [--files N] [--batch N] [--dir DIR] [--keep]\n"
		"  N files: a multiple of %d (default 1000000); batch default 128\n",
		PER_DIR);
	return 2;
}

static int parse(int argc, char **argv, struct opts *o)
{
	const char *tmp = getenv("TMPDIR");

	*o = (struct opts){.files = 1000000, .batch = 128, .dir = tmp ? tmp : "/var/tmp"};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--keep"))
			o->keep = true;
		else if (i + 1 < argc && !strcmp(argv[i], "--files"))
			o->files = strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(argv[i], "--batch"))
			o->batch = strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(argv[i], "--dir"))
			o->dir = argv[++i];
		else
			return -1;
	}
	if (!o->files || o->files % PER_DIR || o->files > UINT32_MAX || !o->batch)
		return -1;
	return 0;
}

static int tree_new(struct tree *t, size_t files)
{
	t->files = files;
	t->leaves = files / PER_DIR;
	t->tops = (t->leaves + LEAVES_PER_TOP - 1) / LEAVES_PER_TOP;
	t->leaf_ids = calloc(t->leaves, sizeof(*t->leaf_ids));
	t->file_ids = calloc(files, sizeof(*t->file_ids));
	return t->leaf_ids && t->file_ids ? 0 : -ENOMEM;
}

static void tree_free(struct tree *t)
{
	free(t->leaf_ids);
	free(t->file_ids);
}

/* Removes the state dir and its temp dir (nothing else is in them). */
static void cleanup(const char *top, const char *state)
{
	const char *files[] = {"data.mdb", "lock.mdb", "secret"};
	char path[PATH_MAX + 32];

	for (size_t i = 0; i < sizeof(files) / sizeof(*files); i++) {
		snprintf(path, sizeof(path), "%s/%s", state, files[i]);
		unlink(path);
	}
	rmdir(state);
	rmdir(top);
}

int main(int argc, char **argv)
{
	char top[PATH_MAX], state[PATH_MAX + 8];
	struct results r = {0};
	struct tree t = {0};
	struct opts o;
	int err;

	if (parse(argc, argv, &o))
		return usage();
	snprintf(top, sizeof(top), "%s/node_bench.XXXXXX", o.dir);
	if (!mkdtemp(top)) {
		perror(top);
		return 1;
	}
	snprintf(state, sizeof(state), "%s/state", top);
	err = tree_new(&t, o.files);
	if (!err)
		err = fill(state, &t, o.batch, &r.fill_s);
	if (!err)
		err = measure(state, &t, &r);
	if (!err)
		err = data_size(state, &r);
	if (err)
		fprintf(stderr, "node_bench: %s\n",
			err == WRONG_ANSWER ? "a wrong answer from the table"
					    : strerror(-err));
	else
		report(&t, &o, &r);
	if (o.keep)
		printf("state dir kept: %s\n", state);
	else
		cleanup(top, state);
	tree_free(&t);
	return err ? 1 : 0;
}
