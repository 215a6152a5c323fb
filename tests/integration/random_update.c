/* SPDX-License-Identifier: Apache-2.0 */
/* random_update - handles and fileids across seeded random updates of the
 * lower layers (issue 20), through libnfs' raw NFSv3 calls.
 *
 *   random_update UNION_NFSD NFS_TREE ORACLE_SCRIPT DIR
 *
 * Run by random_update.sh, in a private mount namespace with DIR on a tmpfs.
 * Makes a writable union of two lower layers (base, about 10,100 objects:
 * files of 16 bytes to 128 KiB, directories, symlinks; app above it:
 * files over base's, white-outs, an opaque directory) and an upper with
 * white-outs and an opaque directory, serves it with UNION_NFSD from a
 * config file, copies a few files up through NFS, and walks the union
 * (READDIR, LOOKUP, READ or READLINK) keeping every handle, fileid, size
 * and digest of the bytes.  Each file's bytes (and each symlink's target)
 * begin with the tag of the layer that holds them ("[B]", "[A]", "[T]",
 * "[U]" once copied up), so the walk knows which layer shows each path.
 *
 * Then three updates, each a new layer dir beside the old ones, the config
 * changed and SIGHUP (the log's "reloaded:" line waited for):
 *
 *   1 top     a new top layer: files added in merged directories, a new
 *             directory, a few files and a symlink over lower ones;
 *   2 copy    app replaced by its `cp -a` copy;
 *   3 version base replaced by a new version: 5% of the files base shows
 *             changed (a new size, or the same size and a new mtime), 5%
 *             removed, symlinks among them, chosen by the seed; files
 *             added; files hidden by higher layers changed too.
 *
 * After each: every saved handle of an unchanged path answers GETATTR with
 * its fileid and size, and a LOOKUP of its name gives the same fileid (0
 * STALE); the old handle of a changed or removed path reads its old bytes
 * (after 3: from the retired layer; after 1 a handle of a file a new top
 * layer covers may also be STALE, never the new bytes); a LOOKUP of a
 * changed path gives a fileid never seen and the new bytes; an added path
 * a fileid never seen; and the merged tree read over NFS equals kernel
 * overlayfs over the new stack with a copy of the upper
 * (ORACLE_SCRIPT --oracle).  Last, a reload with retire-time = 1 releases
 * the retired layers: the old handles of step 3 answer NFS3ERR_STALE, the
 * others still resolve.
 *
 * RANDOM_UPDATE_SEED (printed; default from the clock), RANDOM_UPDATE_DIRS
 * (base's top-level dirs, 64 or more; default 103: 10,100 objects) and
 * RANDOM_UPDATE_SERVER_ARGS (more server options, space-separated) change
 * the run.  Exit: 0 passed, 1 a check failed.  The server has
 * PR_SET_PDEATHSIG and is stopped by pid on every exit path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "it_util.h"
#include "nfs_raw.h"
#include "start_server.h"

#define RELOAD_WAIT_S 120
#define READ_CHUNK    32768
#define DIRS_MIN      64
#define SHOW_MAX      10 /* failures printed per kind and step */
#define TAG_LEN	      3	 /* "[B]" */

enum kind { K_DIR, K_FILE, K_LINK };
/* What the update being checked did to a path. */
enum fate { F_KEEP, F_CHANGED, F_REMOVED, F_COVERED };

/* One path of the union and what the client saw of it. */
struct ent {
	char *path; /* relative to the export; "" for the root */
	size_t parent;
	enum kind kind;
	char owner; /* the tag's letter; 0 for a directory */
	struct fh fh;
	uint64_t fileid, size, digest;
	enum fate fate;
	const char *new_layer; /* where a changed path's new bytes are */
	bool gone;
	bool has_old; /* old* hold the handle the last update replaced */
	struct fh old_fh;
	uint64_t old_fileid;
};

/* Fileids handed out so far (open addressing; 0 is never a fileid). */
struct idset {
	uint64_t *v;
	size_t cap, n;
};

static struct {
	const char *bin, *nfs_tree, *script, *dir;
	char state[PATH_MAX], conf[PATH_MAX], config_arg[PATH_MAX + 16];
	char lowers[4 * PATH_MAX];
	const char *extra[16];
	unsigned retire_time;
	struct test_server srv;
	struct rpc_context *nfs;
	struct fh root;
	struct ent *e;
	size_t n, cap;
	struct idset ids;
	uint64_t rng;
	int dirs;
} g;

/* ---- small things ---- */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("FAIL: ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	fflush(stdout);
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	test_server_stop(&g.srv);
	exit(1);
}

static uint64_t rnd(void)
{
	/* splitmix64: one seed gives one run, on every machine */
	uint64_t z = (g.rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

#define FNV_INIT 0xcbf29ce484222325ull

static const char *at(const char *layer, const char *rel)
{
	static char buf[4][2 * PATH_MAX];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s/%s", g.dir, layer, rel);
	return buf[k];
}

static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void run(const char *fmt, ...)
{
	char cmd[8 * PATH_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	fflush(stdout);
	if (system(cmd) != 0)
		die("%s: failed", cmd);
}

static bool ids_has(const struct idset *s, uint64_t id)
{
	if (!s->cap)
		return false;
	for (size_t i = id & (s->cap - 1); s->v[i]; i = (i + 1) & (s->cap - 1))
		if (s->v[i] == id)
			return true;
	return false;
}

static void ids_add(struct idset *s, uint64_t id)
{
	size_t i;

	if (id == 0 || ids_has(s, id))
		return;
	if (2 * (s->n + 1) > s->cap) {
		struct idset t = {.cap = s->cap ? 2 * s->cap : 1 << 15};

		t.v = calloc(t.cap, sizeof(*t.v));
		if (!t.v)
			die("out of memory");
		for (size_t k = 0; k < s->cap; k++)
			if (s->v[k])
				ids_add(&t, s->v[k]);
		free(s->v);
		*s = t;
	}
	for (i = id & (s->cap - 1); s->v[i]; i = (i + 1) & (s->cap - 1))
		;
	s->v[i] = id;
	s->n++;
}

/* ---- the layers on disk ---- */

static void mkdirs(const char *path)
{
	run("mkdir -p '%s'", path);
}

/* A file of LAYER: its tag and path, then filler to a random size, a
 * random mode and an mtime with nanoseconds. */
static void put_file(const char *layer, char tag, const char *rel)
{
	uint64_t r = rnd() % 100;
	size_t size = r < 80   ? 16 + rnd() % 1024
		      : r < 98 ? 1024 + rnd() % 15360
			       : 16384 + rnd() % 114688;
	static const mode_t modes[] = {0644, 0600, 0755, 0640, 0444};
	struct timespec ts[2] = {
	    {1700000000 + (time_t)(rnd() % 1000000), (long)(rnd() % 1000000000)}};
	char *buf = malloc(size + 64);
	int n, fd;

	if (!buf)
		die("out of memory");
	n = snprintf(buf, 64, "[%c] %s\n", tag, rel);
	for (size_t i = (size_t)n; i < size; i++)
		buf[i] = (char)('a' + rnd() % 26);
	if ((size_t)n > size)
		size = (size_t)n;
	fd = open(at(layer, rel), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, buf, size) != (ssize_t)size || close(fd))
		die("write %s: %s", at(layer, rel), strerror(errno));
	free(buf);
	ts[1] = ts[0];
	if (chmod(at(layer, rel), modes[rnd() % 5]) ||
	    utimensat(AT_FDCWD, at(layer, rel), ts, 0))
		die("chmod/utimensat %s: %s", at(layer, rel), strerror(errno));
}

static void put_link(const char *layer, char tag, const char *rel, const char *to)
{
	char target[256];

	snprintf(target, sizeof(target), "[%c]%s", tag, to);
	unlink(at(layer, rel));
	if (symlink(target, at(layer, rel)))
		die("symlink %s: %s", at(layer, rel), strerror(errno));
}

/* A white-out in kernel overlayfs' form: a character device 0/0. */
static void put_whiteout(const char *layer, const char *rel)
{
	if (mknod(at(layer, rel), S_IFCHR | 0, makedev(0, 0)))
		die("mknod %s: %s", at(layer, rel), strerror(errno));
}

static void put_opaque_dir(const char *layer, const char *rel)
{
	mkdirs(at(layer, rel));
	if (setxattr(at(layer, rel), "trusted.overlay.opaque", "y", 1, 0))
		die("setxattr %s: %s", at(layer, rel), strerror(errno));
}

#define BASE0 "base-2026-11-02"
#define APP0  "app-2026-11-02"
#define TOP1  "top-2026-12-01"
#define APP1  "app-2026-12-02"
#define BASE1 "base-2026-12-04"

static void make_base(void)
{
	char rel[128];

	for (int d = 0; d < g.dirs; d++) {
		snprintf(rel, sizeof(rel), "d%03d/s0", d);
		mkdirs(at(BASE0, rel));
		snprintf(rel, sizeof(rel), "d%03d/s1", d);
		mkdirs(at(BASE0, rel));
		for (int f = 0; f < 60; f++) {
			snprintf(rel, sizeof(rel), "d%03d/f%03d", d, f);
			put_file(BASE0, 'B', rel);
		}
		for (int f = 0; f < 5; f++) {
			char to[16];

			snprintf(rel, sizeof(rel), "d%03d/l%d", d, f);
			snprintf(to, sizeof(to), "f%03d", f);
			put_link(BASE0, 'B', rel, to);
		}
		for (int s = 0; s < 2; s++)
			for (int f = 0; f < 15; f++) {
				snprintf(rel, sizeof(rel), "d%03d/s%d/g%02d", d, s, f);
				put_file(BASE0, 'B', rel);
			}
	}
}

/* app: files over base's and of its own in d000..d019, white-outs, an
 * opaque d020, a directory of its own. */
static void make_app(void)
{
	char rel[128];

	for (int d = 0; d < 20; d++) {
		snprintf(rel, sizeof(rel), "d%03d", d);
		mkdirs(at(APP0, rel));
		for (int f = 0; f < 15; f++) {
			snprintf(rel, sizeof(rel), f < 5 ? "d%03d/f%03d" : "d%03d/a%03d",
				 d, f);
			put_file(APP0, 'A', rel);
		}
		snprintf(rel, sizeof(rel), "d%03d/f010", d);
		put_whiteout(APP0, rel);
		snprintf(rel, sizeof(rel), "d%03d/f011", d);
		put_whiteout(APP0, rel);
	}
	put_link(APP0, 'A', "d001/l0", "over");
	put_opaque_dir(APP0, "d020");
	for (int f = 0; f < 5; f++) {
		snprintf(rel, sizeof(rel), "d020/a%03d", f);
		put_file(APP0, 'A', rel);
	}
	mkdirs(at(APP0, "app/sub"));
	for (int f = 0; f < 50; f++) {
		snprintf(rel, sizeof(rel), f < 40 ? "app/a%03d" : "app/sub/a%03d", f);
		put_file(APP0, 'A', rel);
	}
}

/* The upper before the server starts: white-outs in d030, an opaque d031. */
static void make_upper(void)
{
	char rel[128];

	mkdirs(at("upper", "d030"));
	mkdirs(at("work", ""));
	for (int f = 0; f < 5; f++) {
		snprintf(rel, sizeof(rel), "d030/f%03d", f);
		put_whiteout("upper", rel);
	}
	put_opaque_dir("upper", "d031");
	put_file("upper", 'U', "d031/u0");
	put_file("upper", 'U', "d031/u1");
}

/* The new top layer of update 1. */
static void make_top(void)
{
	char rel[128];

	for (int d = 0; d < 10; d++) {
		snprintf(rel, sizeof(rel), "d%03d", d);
		mkdirs(at(TOP1, rel));
		for (int f = 0; f < 10; f++) {
			snprintf(rel, sizeof(rel), "d%03d/t%03d", d, f);
			put_file(TOP1, 'T', rel);
		}
	}
	mkdirs(at(TOP1, "top"));
	for (int f = 0; f < 20; f++) {
		snprintf(rel, sizeof(rel), "top/t%03d", f);
		put_file(TOP1, 'T', rel);
	}
	mkdirs(at(TOP1, "d050"));
	for (int f = 0; f < 10; f++) {
		snprintf(rel, sizeof(rel), "d050/f%03d", f);
		put_file(TOP1, 'T', rel);
	}
	mkdirs(at(TOP1, "d060/s0"));
	for (int f = 0; f < 5; f++) {
		snprintf(rel, sizeof(rel), "d060/s0/t%02d", f);
		put_file(TOP1, 'T', rel);
	}
	mkdirs(at(TOP1, "d061"));
	put_link(TOP1, 'T', "d061/l1", "over");
}

/* ---- the server ---- */

static void write_config(void)
{
	FILE *f = fopen(g.conf, "w");

	if (!f)
		die("%s: %s", g.conf, strerror(errno));
	fprintf(f,
		"[server]\nretire-time = %u\n\n[export]\npath = /\nlowerdir = %s\n"
		"upperdir = %s/upper\nworkdir = %s/work\n",
		g.retire_time, g.lowers, g.dir, g.dir);
	if (fclose(f))
		die("%s: %s", g.conf, strerror(errno));
}

/* LAYERS: the lower layers' dir names, top first, ':'-separated. */
static void set_lowers(const char *layers)
{
	char buf[PATH_MAX], *save = NULL;
	size_t len = 0;

	snprintf(buf, sizeof(buf), "%s", layers);
	g.lowers[0] = '\0';
	for (char *t = strtok_r(buf, ":", &save); t; t = strtok_r(NULL, ":", &save))
		len += (size_t)snprintf(g.lowers + len, sizeof(g.lowers) - len, "%s%s/%s",
					len ? ":" : "", g.dir, t);
}

static void start(void)
{
	const char *args[20] = {g.config_arg};

	for (size_t i = 0; g.extra[i]; i++)
		args[i + 1] = g.extra[i];
	if (test_server_start_logged(g.bin, g.state, args, &g.srv))
		die("the server did not start");
	g.nfs = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	if (!g.nfs || nfs_raw_mnt(g.srv.mount_port, "/", &g.root) != MNT3_OK)
		die("no NFS connection or MNT of /");
}

/* How many lines of the server's log hold WHAT. */
static unsigned log_lines(const char *what)
{
	char path[PATH_MAX + 16], line[1024];
	unsigned n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/stderr", g.state);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

/* The config rewritten, SIGHUP, and the log's "reloaded:" line waited for. */
static void reload(void)
{
	unsigned before = log_lines("reloaded:"), failed = log_lines("reload failed");
	double t0 = it_now_s();

	write_config();
	if (kill(g.srv.pid, SIGHUP))
		die("SIGHUP: %s", strerror(errno));
	while (log_lines("reloaded:") == before) {
		if (log_lines("reload failed") != failed)
			die("the reload failed (see the server's log)");
		if (it_now_s() - t0 > RELOAD_WAIT_S)
			die("no 'reloaded:' line in %d s", RELOAD_WAIT_S);
		it_sleep_ms(20);
	}
	printf("reloaded in %.2f s: %s\n", it_now_s() - t0, g.lowers);
}

/* ---- reading through NFS ---- */

/* The digest of the bytes behind FH (a file's, or a symlink's target),
 * its size, and the letter of its tag.  The NFS status. */
static int nfs_digest(const struct fh *fh, enum kind kind, uint64_t *digest,
		      uint64_t *size, char *owner)
{
	static char buf[READ_CHUNK];
	uint64_t off = 0, h = FNV_INIT;
	uint32_t got;
	bool eof = false;
	int st;

	if (kind == K_LINK) {
		struct nfs_raw_text t = nfs_raw_readlink(g.nfs, fh);

		*digest = fnv(h, t.data, t.count);
		*size = t.count;
		*owner = t.count >= TAG_LEN ? t.data[1] : '?';
		return t.status;
	}
	*owner = '?';
	do {
		st = nfs_raw_read(g.nfs, fh, off, READ_CHUNK, buf, &got, &eof);
		if (st != NFS3_OK)
			return st;
		if (off == 0 && got >= TAG_LEN)
			*owner = buf[1];
		h = fnv(h, buf, got);
		off += got;
	} while (!eof && got > 0);
	*digest = h;
	*size = off;
	return NFS3_OK;
}

/* The digest of a file (or a symlink's target) on disk. */
static uint64_t disk_digest(const char *path)
{
	static char buf[READ_CHUNK];
	uint64_t h = FNV_INIT;
	ssize_t n = readlink(path, buf, sizeof(buf));
	int fd;

	if (n >= 0)
		return fnv(h, buf, (size_t)n);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		die("%s: %s", path, strerror(errno));
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		h = fnv(h, buf, (size_t)n);
	close(fd);
	return h;
}

/* ---- the walk ---- */

static size_t add_ent(const char *path, size_t parent)
{
	struct ent *e;

	if (g.n == g.cap) {
		g.cap = g.cap ? 2 * g.cap : 16384;
		g.e = realloc(g.e, g.cap * sizeof(*g.e));
		if (!g.e)
			die("out of memory");
	}
	e = &g.e[g.n];
	memset(e, 0, sizeof(*e));
	e->path = strdup(path);
	e->parent = parent;
	if (!e->path)
		die("out of memory");
	return g.n++;
}

static const char *base_name(const struct ent *e)
{
	const char *s = strrchr(e->path, '/');

	return s ? s + 1 : e->path;
}

/* LOOKUP of entry I's name in its parent; fills in what the reply and a
 * read of its bytes say.  The LOOKUP's status. */
static int observe(size_t i)
{
	struct ent *e = &g.e[i];
	struct nfs_raw_obj o = nfs_raw_lookup(g.nfs, &g.e[e->parent].fh, base_name(e));
	int st;

	if (o.status != NFS3_OK)
		return o.status;
	if (!o.attrs)
		die("LOOKUP %s: no attributes", e->path);
	e->fh = o.fh;
	e->fileid = o.fileid;
	e->kind = o.type == NF3DIR ? K_DIR : o.type == NF3LNK ? K_LINK : K_FILE;
	e->size = o.size;
	e->owner = 0;
	if (e->kind == K_DIR)
		return NFS3_OK;
	st = nfs_digest(&e->fh, e->kind, &e->digest, &e->size, &e->owner);
	if (st != NFS3_OK)
		die("READ %s: status %d", e->path, st);
	return NFS3_OK;
}

/* Names of one READDIR page, kept by keep_names. */
struct names {
	int status;
	char **v;
	size_t n, cap;
	uint64_t cookie;
	cookieverf3 verf;
	bool eof;
};

static void keep_names(void *data, void *out)
{
	READDIR3res *r = data;
	struct names *o = out;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	memcpy(o->verf, r->READDIR3res_u.resok.cookieverf, sizeof(o->verf));
	o->eof = r->READDIR3res_u.resok.reply.eof;
	for (entry3 *x = r->READDIR3res_u.resok.reply.entries; x; x = x->nextentry) {
		o->cookie = x->cookie;
		if (!strcmp(x->name, ".") || !strcmp(x->name, ".."))
			continue;
		if (o->n == o->cap) {
			o->cap = o->cap ? 2 * o->cap : 64;
			o->v = realloc(o->v, o->cap * sizeof(*o->v));
		}
		o->v[o->n++] = strdup(x->name);
	}
}

/* Every name of directory FH, in N (the caller frees them). */
static void list_dir(const struct fh *fh, const char *path, struct names *n)
{
	memset(n, 0, sizeof(*n));
	do {
		READDIR3args a = {
		    .dir = nfs_raw_fh3(fh), .cookie = n->cookie, .count = 8192};
		struct call c = {.keep = keep_names, .out = n};

		memcpy(a.cookieverf, n->verf, sizeof(a.cookieverf));
		if (nfs_raw_finish(
			g.nfs, &c,
			rpc_nfs3_readdir_async(g.nfs, nfs_raw_on_reply, &a, &c)) ||
		    n->status != NFS3_OK)
			die("READDIR %s: status %d", path, n->status);
	} while (!n->eof);
}

/* Every object of the union, breadth first from the root. */
static void walk_all(void)
{
	struct nfs_raw_obj r = nfs_raw_getattr(g.nfs, &g.root);
	double t0 = it_now_s();
	size_t files = 0;

	if (r.status != NFS3_OK)
		die("GETATTR of the root: %d", r.status);
	add_ent("", 0);
	g.e[0].fh = g.root;
	g.e[0].fileid = r.fileid;
	ids_add(&g.ids, r.fileid);
	for (size_t i = 0; i < g.n; i++) {
		struct names n;
		char path[PATH_MAX];

		if (g.e[i].kind != K_DIR)
			continue;
		list_dir(&g.e[i].fh, g.e[i].path, &n);
		for (size_t k = 0; k < n.n; k++) {
			size_t j;

			snprintf(path, sizeof(path), "%s%s%s", g.e[i].path, i ? "/" : "",
				 n.v[k]);
			j = add_ent(path, i);
			if (observe(j) != NFS3_OK)
				die("LOOKUP %s failed", path);
			ids_add(&g.ids, g.e[j].fileid);
			files += g.e[j].kind != K_DIR;
			free(n.v[k]);
		}
		free(n.v);
	}
	printf("walked %zu objects (%zu files and symlinks) in %.1f s\n", g.n, files,
	       it_now_s() - t0);
}

static size_t find(const char *path)
{
	for (size_t i = 0; i < g.n; i++)
		if (!strcmp(g.e[i].path, path))
			return i;
	die("%s: not among the walked paths", path);
}

/* A few files copied up by WRITEs through NFS (their tag becomes [U]). */
static void copy_ups(void)
{
	static const char *const paths[] = {"d040/f000",   "d040/f001", "d040/f002",
					    "d040/f003",   "d040/f004", "d000/f000",
					    "d000/s0/g00", "app/a001"};

	for (size_t i = 0; i < sizeof(paths) / sizeof(*paths); i++) {
		struct nfs_raw_obj o = nfs_raw_walk(g.nfs, &g.root, paths[i]);

		if (o.status != NFS3_OK ||
		    nfs_raw_write(g.nfs, &o.fh, 0, "[U]", 3) != NFS3_OK)
			die("copy-up of %s: LOOKUP %d or WRITE failed", paths[i],
			    o.status);
	}
}

/* ---- the checks after an update ---- */

struct tally {
	size_t kept, stale, moved, changed, removed, old_ok, old_stale, added;
	size_t bad;
};

static void bad(struct tally *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void bad(struct tally *t, const char *fmt, ...)
{
	va_list ap;

	if (t->bad++ >= SHOW_MAX)
		return;
	va_start(ap, fmt);
	fputs("  ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
}

static void check_kept(struct ent *e, const struct nfs_raw_obj *a,
		       const struct nfs_raw_obj *l, struct tally *t)
{
	if (a->status == NFS3ERR_STALE) {
		t->stale++;
		bad(t,
		    "unchanged %s: its handle is STALE (LOOKUP %d, fileid %ju, was %ju)",
		    e->path, l->status, (uintmax_t)l->fileid, (uintmax_t)e->fileid);
	} else if (a->status != NFS3_OK || l->status != NFS3_OK ||
		   a->fileid != e->fileid || l->fileid != e->fileid ||
		   (e->kind != K_DIR && a->size != e->size)) {
		t->moved++;
		bad(t,
		    "unchanged %s: GETATTR %d fileid %ju size %ju, LOOKUP %d fileid %ju; "
		    "was fileid %ju size %ju",
		    e->path, a->status, (uintmax_t)a->fileid, (uintmax_t)a->size,
		    l->status, (uintmax_t)l->fileid, (uintmax_t)e->fileid,
		    (uintmax_t)e->size);
	} else {
		t->kept++;
	}
}

/* The old handle of E (changed or removed): the old bytes under the old
 * fileid; with STALE_OK, NFS3ERR_STALE will do too. */
static void check_old(struct ent *e, const struct nfs_raw_obj *a, bool stale_ok,
		      struct tally *t)
{
	uint64_t digest = 0, size = 0;
	char owner;
	int st = -1;

	if (a->status == NFS3ERR_STALE && stale_ok) {
		t->old_stale++;
		return;
	}
	if (a->status == NFS3_OK)
		st = nfs_digest(&e->fh, e->kind, &digest, &size, &owner);
	if (a->status != NFS3_OK || st != NFS3_OK || a->fileid != e->fileid ||
	    size != e->size || digest != e->digest) {
		bad(t,
		    "%s %s: old handle: GETATTR %d fileid %ju, READ %d size %ju, "
		    "digest %s; want fileid %ju size %ju and the old bytes",
		    e->fate == F_REMOVED ? "removed" : "changed", e->path, a->status,
		    (uintmax_t)a->fileid, st, (uintmax_t)size,
		    digest == e->digest ? "old" : "other", (uintmax_t)e->fileid,
		    (uintmax_t)e->size);
		return;
	}
	t->old_ok++;
}

/* The path of a changed E, looked up again: a new fileid, the new bytes. */
static void check_new(struct ent *e, const struct nfs_raw_obj *l, struct tally *t)
{
	struct ent was = *e;
	size_t i = (size_t)(e - g.e);
	uint64_t want = disk_digest(at(e->new_layer, e->path));

	if (l->status != NFS3_OK || ids_has(&g.ids, l->fileid)) {
		bad(t, "changed %s: LOOKUP %d fileid %ju (was %ju; want one never seen)",
		    e->path, l->status, (uintmax_t)l->fileid, (uintmax_t)e->fileid);
		return;
	}
	if (observe(i) != NFS3_OK || e->digest != want) {
		bad(t, "changed %s: its new handle does not read the new bytes", e->path);
		return;
	}
	ids_add(&g.ids, e->fileid);
	e->has_old = true;
	e->old_fh = was.fh;
	e->old_fileid = was.fileid;
	t->changed++;
}

static void check_one(struct ent *e, bool stale_ok, struct tally *t)
{
	struct nfs_raw_obj a = nfs_raw_getattr(g.nfs, &e->fh);
	struct nfs_raw_obj l = nfs_raw_lookup(g.nfs, &g.e[e->parent].fh, base_name(e));

	if (e == g.e) /* the root: no parent to look it up in */
		l = a;
	switch (e->fate) {
	case F_KEEP:
		check_kept(e, &a, &l, t);
		break;
	case F_COVERED:
	case F_CHANGED:
		check_old(e, &a, stale_ok || e->fate == F_COVERED, t);
		check_new(e, &l, t);
		break;
	case F_REMOVED:
		check_old(e, &a, stale_ok, t);
		if (l.status != NFS3ERR_NOENT)
			bad(t, "removed %s: LOOKUP %d, want NOENT", e->path, l.status);
		e->gone = true;
		e->has_old = true;
		e->old_fh = e->fh;
		e->old_fileid = e->fileid;
		t->removed++;
		break;
	}
	e->fate = F_KEEP;
}

/* Paths the update added (in the layer's dir LAYER): found, new fileids,
 * and kept from now on. */
static void check_added(const char *layer, const char *const *paths, size_t n,
			struct tally *t)
{
	for (size_t k = 0; k < n; k++) {
		char parent[PATH_MAX], *slash;
		size_t i;

		snprintf(parent, sizeof(parent), "%s", paths[k]);
		slash = strrchr(parent, '/');
		*slash = '\0';
		i = add_ent(paths[k], find(parent));
		if (observe(i) != NFS3_OK || ids_has(&g.ids, g.e[i].fileid) ||
		    g.e[i].digest != disk_digest(at(layer, paths[k]))) {
			bad(t, "added %s: LOOKUP failed, an old fileid or other bytes",
			    paths[k]);
			continue;
		}
		ids_add(&g.ids, g.e[i].fileid);
		t->added++;
	}
}

/* The merged tree read over NFS equals kernel overlayfs over the same
 * stack and a copy of the upper (random_update.sh --oracle). */
static void oracle(const char *name)
{
	char cmd[8 * PATH_MAX];
	double t0 = it_now_s();

	snprintf(cmd, sizeof(cmd),
		 "bash '%s' --oracle '%s' 'nfs://127.0.0.1/?nfsport=%d&mountport=%d"
		 "&version=3' '%s/oracle' '%s' '%s/upper'",
		 g.script, g.nfs_tree, g.srv.nfs_port, g.srv.mount_port, g.dir, g.lowers,
		 g.dir);
	run("%s", cmd);
	printf("%s: oracle in %.1f s\n", name, it_now_s() - t0);
}

/* Every path after update NAME; STALE_OK: the old handles of changed paths
 * may be stale.  Then the oracle. */
static void check_update(const char *name, bool stale_ok)
{
	struct tally t = {0};
	double t0 = it_now_s();

	printf("%s: checking %zu paths\n", name, g.n);
	for (size_t i = 0; i < g.n; i++)
		g.e[i].has_old = false;
	for (size_t i = 0; i < g.n; i++)
		if (!g.e[i].gone)
			check_one(&g.e[i], stale_ok, &t);
	printf("%s: %zu unchanged kept (%zu STALE, %zu other), %zu changed, %zu removed "
	       "(old handles: %zu old bytes, %zu STALE), %.1f s\n",
	       name, t.kept, t.stale, t.moved, t.changed, t.removed, t.old_ok,
	       t.old_stale, it_now_s() - t0);
	if (t.bad) {
		printf("%s: %zu failed checks\n", name, t.bad);
		die("%s: the handles did not survive the update", name);
	}
	oracle(name);
}

/* ---- the updates ---- */

/* The paths update 1 added (make_top's, but for those over lower ones):
 * found, with new fileids, and kept from now on. */
static void check_top_added(void)
{
	static const char *added[40];
	static char bufs[40][32];
	struct tally t = {0};
	size_t n = 0, top;

	for (int d = 0; d < 10; d++, n++) {
		snprintf(bufs[n], sizeof(bufs[n]), "d%03d/t%03d", d, d);
		added[n] = bufs[n];
	}
	for (int f = 0; f < 20; f++, n++) {
		snprintf(bufs[n], sizeof(bufs[n]), "top/t%03d", f);
		added[n] = bufs[n];
	}
	for (int f = 0; f < 5; f++, n++) {
		snprintf(bufs[n], sizeof(bufs[n]), "d060/s0/t%02d", f);
		added[n] = bufs[n];
	}
	/* "top" is a directory new to the union: its entry first */
	top = add_ent("top", 0);
	if (observe(top) != NFS3_OK || ids_has(&g.ids, g.e[top].fileid))
		die("1 top: LOOKUP of the new dir top failed, or an old fileid");
	ids_add(&g.ids, g.e[top].fileid);
	check_added(TOP1, added, n, &t);
	printf("1 top: %zu added paths with new fileids\n", t.added);
	if (t.bad)
		die("1 top: added paths");
}

static void update_top(void)
{
	make_top();
	for (size_t i = 0; i < g.n; i++)
		if ((!strncmp(g.e[i].path, "d050/f00", 8) ||
		     !strcmp(g.e[i].path, "d061/l1")) &&
		    !g.e[i].gone) {
			g.e[i].fate = F_COVERED;
			g.e[i].new_layer = TOP1;
		}
	set_lowers(TOP1 ":" APP0 ":" BASE0);
	reload();
	check_update("1 top", true);
	check_top_added();
}

static void update_copy(void)
{
	run("cp -a '%s/%s' '%s/%s'", g.dir, APP0, g.dir, APP1);
	set_lowers(TOP1 ":" APP1 ":" BASE0);
	reload();
	check_update("2 copy", false);
}

/* Changes the file (or symlink) of E in BASE1: a new size, or the same
 * size and a new mtime. */
static void change_in_base(const struct ent *e)
{
	const char *p = at(BASE1, e->path);
	struct stat st;
	int fd;

	if (e->kind == K_LINK) {
		put_link(BASE1, 'B', e->path, "changed");
		return;
	}
	if (stat(p, &st) || (fd = open(p, O_WRONLY)) < 0)
		die("%s: %s", p, strerror(errno));
	if (rnd() % 2 || st.st_size <= 8) {
		if (pwrite(fd, "changed\n", 8, st.st_size) != 8)
			die("%s: %s", p, strerror(errno));
	} else {
		struct timespec ts[2] = {st.st_atim, st.st_mtim};

		/* the same size: another byte, and a time a second later */
		if (pwrite(fd, "#", 1, st.st_size - 2) != 1)
			die("%s: %s", p, strerror(errno));
		ts[1].tv_sec++;
		if (futimens(fd, ts))
			die("%s: %s", p, strerror(errno));
	}
	close(fd);
}

/* Files base holds under paths other layers show: changed, the union must
 * not see it. */
static void change_hidden(void)
{
	static const char *const hidden[] = {"d040/f000", "d030/f000", "d020/f000",
					     "d050/f001", "d005/f001", "d000/s0/g00"};

	for (size_t i = 0; i < sizeof(hidden) / sizeof(*hidden); i++) {
		int fd = open(at(BASE1, hidden[i]), O_WRONLY | O_APPEND);

		if (fd < 0 || write(fd, "hidden change\n", 14) != 14)
			die("%s: %s", at(BASE1, hidden[i]), strerror(errno));
		close(fd);
	}
}

/* In BASE1, a copy of BASE0: 5% of the files and symlinks the union shows
 * from base changed, 5% removed, chosen by the seed; marks their fates. */
static void mutate_base(void)
{
	size_t *cand = malloc(g.n * sizeof(*cand)), k = 0, nch, nrm;

	if (!cand)
		die("out of memory");
	for (size_t i = 0; i < g.n; i++)
		if (!g.e[i].gone && g.e[i].owner == 'B')
			cand[k++] = i;
	nch = k * 5 / 100;
	nrm = k * 5 / 100;
	for (size_t j = 0; j < nch + nrm; j++) { /* a partial Fisher-Yates */
		size_t r = j + rnd() % (k - j), x = cand[r];
		struct ent *e = &g.e[x];

		cand[r] = cand[j];
		cand[j] = x;
		if (j < nch) {
			change_in_base(e);
			e->fate = F_CHANGED;
			e->new_layer = BASE1;
		} else {
			if (unlink(at(BASE1, e->path)))
				die("%s: %s", at(BASE1, e->path), strerror(errno));
			e->fate = F_REMOVED;
		}
	}
	printf("3 version: of %zu files and symlinks base shows, %zu changed and %zu "
	       "removed\n",
	       k, nch, nrm);
	free(cand);
}

static void update_version(void)
{
	static const char *added[10];
	static char bufs[10][32];
	struct tally t = {0};

	run("cp -a '%s/%s' '%s/%s'", g.dir, BASE0, g.dir, BASE1);
	mutate_base();
	change_hidden();
	for (int d = 0; d < 10; d++) {
		snprintf(bufs[d], sizeof(bufs[d]), "d%03d/s1/n%02d", 70 + d, d);
		put_file(BASE1, 'B', bufs[d]);
		added[d] = bufs[d];
	}
	set_lowers(TOP1 ":" APP1 ":" BASE1);
	reload();
	check_update("3 version", false);
	check_added(BASE1, added, 10, &t);
	printf("3 version: %zu added paths with new fileids\n", t.added);
	if (t.bad)
		die("3 version: added paths");
}

/* A reload with retire-time = 1, more than a second after the last one:
 * the retired layers are released, the old handles of update 3 are STALE. */
static void release(void)
{
	struct tally t = {0};
	size_t stale = 0, olds = 0;

	it_sleep_ms(1200);
	g.retire_time = 1;
	reload();
	for (size_t i = 0; i < g.n; i++) {
		struct ent *e = &g.e[i];

		if (e->has_old) {
			struct nfs_raw_obj a = nfs_raw_getattr(g.nfs, &e->old_fh);

			olds++;
			if (a.status == NFS3ERR_STALE)
				stale++;
			else
				bad(&t,
				    "%s: old handle after the release: GETATTR %d fileid "
				    "%ju",
				    e->path, a.status, (uintmax_t)a.fileid);
		}
		if (!e->gone)
			check_one(e, false, &t);
	}
	printf("release: %zu of %zu old handles STALE; log: %u retired, %u released\n",
	       stale, olds, log_lines("retired ("), log_lines("released"));
	if (t.bad || olds == 0)
		die("release: %zu failed checks", t.bad);
}

/* ---- set-up ---- */

static void parse_env(void)
{
	const char *seed = getenv("RANDOM_UPDATE_SEED");
	const char *dirs = getenv("RANDOM_UPDATE_DIRS");
	char *extra = getenv("RANDOM_UPDATE_SERVER_ARGS");
	size_t n = 0;

	g.rng = seed && *seed ? strtoull(seed, NULL, 0)
			      : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	printf("seed %ju (RANDOM_UPDATE_SEED=%ju to run it again)\n", (uintmax_t)g.rng,
	       (uintmax_t)g.rng);
	g.dirs = dirs && *dirs ? atoi(dirs) : 103;
	if (g.dirs < DIRS_MIN)
		g.dirs = DIRS_MIN;
	if (extra) {
		extra = strdup(extra);
		for (char *save = NULL, *t = strtok_r(extra, " ", &save);
		     t && n + 1 < sizeof(g.extra) / sizeof(*g.extra);
		     t = strtok_r(NULL, " ", &save))
			g.extra[n++] = t;
		if (n)
			printf("server options: %s\n",
			       getenv("RANDOM_UPDATE_SERVER_ARGS"));
	}
}

static void make_layers(void)
{
	double t0 = it_now_s();

	make_base();
	make_app();
	make_upper();
	printf("layers made in %.1f s\n", it_now_s() - t0);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s UNION_NFSD NFS_TREE ORACLE_SCRIPT DIR\n",
			argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	g.bin = argv[1];
	g.nfs_tree = argv[2];
	g.script = argv[3];
	g.dir = argv[4];
	g.srv.pid = -1;
	snprintf(g.state, sizeof(g.state), "%s/state", g.dir);
	snprintf(g.conf, sizeof(g.conf), "%s/union-nfsd.conf", g.dir);
	snprintf(g.config_arg, sizeof(g.config_arg), "--config=%s", g.conf);
	parse_env();
	make_layers();
	set_lowers(APP0 ":" BASE0);
	write_config();
	start();
	copy_ups();
	walk_all();
	oracle("0 start");
	update_top();
	update_copy();
	update_version();
	release();
	rpc_destroy_context(g.nfs);
	g.nfs = NULL;
	if (test_server_stop(&g.srv) != 0)
		die("the server did not exit 0 on SIGTERM");
	printf("PASS\n");
	return 0;
}
