/* SPDX-License-Identifier: Apache-2.0 */
/* test_gateways - issue 30's first check: three gateways over the same
 * read-only layers hand out interchangeable handles, fileids, READDIR
 * cookies and cookie verifiers (docs/gateways.md, part 1).
 *
 *   test_gateways UNION_NFSD
 *
 * The layers: three lower layers (l1 top-most, l2, l3) of about 10,700
 * objects, made once in TMP/src: directories merged across the layers at
 * several levels, a 3,000-name directory merged from all three, small files
 * of distinct contents shadowing one another, symlinks (one dangling), hard
 * links of 2 and 3 names inside one layer (one of them shadowed in its
 * directory by a higher layer), 0/0 character-device white-outs in l1
 * hiding files of l3, and an opaque directory (trusted.overlay.opaque=y) in
 * l1 over l2's and l3's.
 *
 * The gateways A, B and C are three hosts: each has its own tmpfs
 * (TMP/gwX), its own `cp -a` copy of the layers there (other st_dev, inode
 * numbers and ctimes; the same names, contents and mtimes), its own state
 * dir and its own copy of one 32-byte key file (mode 0600), and its own
 * network namespace, where union-nfsd listens on 127.0.0.1, NFS port 2049
 * and MOUNT port 20048 on all three: the address a floating IP would
 * be.  Each exports its lowers read-only at /export, with --key-file.  The
 * test itself sits in a network namespace of its own and enters a
 * gateway's (setns) only to make a connection to it: a socket stays in the
 * namespace it was made in.
 *
 *   walk A         READDIRPLUS (dircount 512, maxcount 2048: several pages
 *                  for any directory of more than ~10 names) and READDIR
 *                  (count 1024) of every directory, LOOKUP of every name:
 *                  each object's handle bytes, fileid and type, each page's
 *                  cookie, verifier and entries (name, cookie, fileid; for
 *                  READDIRPLUS the entry's handle and attributes' fileid
 *                  and type).  The objects counted must be the layers'.
 *   B, C fresh     on a gateway asked nothing before: (1) GETATTR of every
 *                  handle of A, in a shuffled order: NFS3_OK, A's fileid and
 *                  type; (2) every page of A again, asked with A's directory
 *                  handle, A's cookie and A's verifier: not
 *                  NFS3ERR_BAD_COOKIE, the same entries, verifier and eof;
 *                  (3) MNT gives A's root handle, and the gateway's own walk
 *                  gives A's handle bytes, fileids, types, pages, cookies and
 *                  verifiers for every path.
 *   restarts       A, B and C restarted on their state dirs: (1)-(3) on each.
 *   index rebuilt  C restarted without STATE/layers/ (its layer indexes made
 *                  again from nothing): (1)-(3).
 *   state rebuilt  A restarted on an empty state dir: (1)-(3).
 *
 * Each gateway also serves a writable union of the same lowers at /rw,
 * its upper and work dir its own (TMP/gwX/rw), where each name of a lower
 * inode with several links is a node of its own (lowerid.c rule 7):
 *
 *   links A        LOOKUP of every such name (links/, tree/d05/m0,
 *                  tree/d06/m0): their handles differ, the names of one
 *                  inode share a fileid and report its links.
 *   links B, C     on gateways asked nothing of /rw before: GETATTR of A's
 *                  handles (B first, C after a READDIRPLUS of links/ and
 *                  the LOOKUPs in the reverse order): A's fileids, and
 *                  A's handle bytes from READDIRPLUS and LOOKUP.
 *   links again    the same on each gateway after the restarts and the
 *                  rebuilds above.
 *
 * A failed check prints the first SHOW_MAX differences of each kind (the
 * path, both handles in hex, both fileids) and the counts, and goes on to
 * the next check; the summary prints objects, directories, pages, calls and
 * time.  GATEWAYS_SEED repeats a shuffle (the seed is printed);
 * GATEWAYS_NO_KEY_FILE=1 leaves --key-file out, each gateway then keyed by
 * its own state dir's secret: how the checks fail on a server without the
 * feature.  Exit 77 (skipped) without root or namespaces.
 *
 * Every server is stopped by pid in the group teardown, also when a check
 * fails (and has PR_SET_PDEATHSIG should this process die); the namespaces
 * go with their last process and descriptor; the tmpfs mounts are in a
 * mount namespace of the test's own, and the temp dir is removed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "netns_util.h"
#include "nfs_raw.h"
#include "start_server.h"

#define TMP_PREFIX "/tmp/union-nfsd-gw."
#define EXPORT	   "/export"
#define RW_EXPORT  "/rw"
#define NFS_PORT   2049 /* the same on every gateway, as behind one address */
#define MOUNT_PORT 20048
#define STR_(x)	   #x
#define STR(x)	   STR_(x)
#define CLIENTS	   "--clients=127.0.0.0/8(ro,no_root_squash,insecure)"
#define NGW	   3
#define DIR_LEN	   128 /* the temp dir's paths are short: TMP_PREFIX... */
#define KEY_BYTES  32

/* page sizes: small, so that a directory of more than ~10 names takes
 * several READDIRPLUS pages and one of more than ~30 several READDIR pages */
#define RD_COUNT     1024
#define RDP_DIRCOUNT 512
#define RDP_MAXCOUNT 2048
#define PAGES_MAX    100000 /* a listing that never ends is a failure */
#define BATCH	     64	    /* calls in flight on one connection */
#define WAIT_S	     120    /* for a batch's replies, on a busy machine */
#define SHOW_MAX     5	    /* differences printed per kind and check */

/* ---- the layers: l1 top-most, l3 at the bottom ----
 * l3  tree/dNN (NDIRS) / sM (NSUB) / fNN (NFILES files), lN (NLINKS
 *     symlinks to fNN); big/n0000..n1499; links/: aN (10), bN a second
 *     name of aN, cN (N < 5) a third, far a second name of
 *     tree/d00/s0/f00, dangling a symlink to nothing
 * l2  tree/dNN for NN < MID_DIRS: in each sM gNN (MID_NEW) and f00..f04
 *     over l3's; m0/ with MID_NEW files; d05/m0/h0 = h1, d06/m0/h0 = h1 =
 *     h2 (hard links); big/n1200..n2199
 * l1  tree/dNN for NN < TOP_DIRS: in sM (M < TOP_SUBS) tNN (TOP_NEW), f05
 *     and g05 over the lower ones, s1/f10 a white-out (c 0 0) of l3's;
 *     t_link a symlink; d04/s2 opaque with OPAQUE_NEW files; big/n2000..
 *     n2999 and white-outs of n0100..n0109 (l3's)
 * all tree/d00/s0/deep/x/y merged in all three: leafK, same, x/midK */
#define NDIRS	   40
#define NSUB	   4
#define NFILES	   36
#define NLINKS	   4
#define MID_DIRS   20
#define MID_NEW	   10
#define MID_OVER   5
#define TOP_DIRS   10
#define TOP_SUBS   2
#define TOP_NEW	   5
#define OPAQUE_NEW 5
#define BIG_NAMES  3000
#define BIG_WH	   10
#define NLINKS_DIR 28 /* links/ and what it holds */
#define NDEEP	   10 /* deep, x, y, leaf1-3, same, mid1-3 */

/* The objects the union shows (the root included), by the layout above. */
static size_t expected_objects(void)
{
	/* l3's tree/, its dirs and subdirs, their files and symlinks */
	long base = 1 + NDIRS + NDIRS * NSUB + NDIRS * NSUB * (NFILES + NLINKS);
	/* l2's gNN, m0/ and its files, and h0-h1, h0-h2 (its f00..f04 shadow) */
	long mid = MID_DIRS * NSUB * MID_NEW + MID_DIRS * (1 + MID_NEW) + 5;
	/* l1's tNN and t_link, less the l3 files the s1/f10 white-outs hide */
	long top = TOP_DIRS * TOP_SUBS * TOP_NEW + TOP_DIRS - TOP_DIRS;
	/* d04/s2: l1's files instead of l3's and l2's */
	long opaque = OPAQUE_NEW - (NFILES + NLINKS + MID_NEW);
	long big = 1 + BIG_NAMES - BIG_WH;

	return (size_t)(1 /* the root */ + base + mid + top + opaque + NDEEP + big +
			NLINKS_DIR);
}

/* ---- what a walk records ---- */

/* One entry of a READDIR or READDIRPLUS page. */
struct entry {
	char *name;
	uint64_t cookie, fileid;
	bool has_fh, has_attrs; /* READDIRPLUS only */
	struct fh fh;
	uint64_t attr_fileid;
	uint32_t attr_type;
};

/* One page: what was asked and what came back. */
struct page {
	uint64_t cookie; /* asked from */
	char verf_in[NFS3_COOKIEVERFSIZE];
	int status; /* nfsstat3, or -1: no reply */
	char verf[NFS3_COOKIEVERFSIZE];
	bool eof;
	struct entry *e;
	size_t n;
};

struct listing {
	struct page *p;
	size_t n;
};

enum { PLAIN, PLUS }; /* READDIR, READDIRPLUS: index of a dir's listings */

struct dir {
	size_t obj;
	struct listing ls[2];
};

struct obj {
	char *path; /* below the export's root; "" for the root */
	struct fh fh;
	uint64_t fileid;
	uint32_t type;
};

/* A gateway's tree as a walk saw it; objects found by path. */
struct record {
	struct obj *o;
	size_t n, cap;
	struct dir *d;
	size_t nd, capd;
	size_t *slot; /* open addressing: index + 1, 0 empty */
	size_t nslot;
	size_t pages;
};

/* ---- the gateways ---- */

struct gw {
	char name; /* 'A', 'B', 'C' */
	char dir[DIR_LEN];
	char state[DIR_LEN + 8];
	char lower_arg[4 * DIR_LEN], key_arg[DIR_LEN + 16], conf_arg[DIR_LEN + 24];
	const char *args[9];
	int ns; /* its network namespace */
	struct test_server srv;
};

/* The differences one check counts. */
enum kind {
	K_GA_STATUS,
	K_GA_FILEID,
	K_GA_TYPE,
	K_RD_STATUS,
	K_RD_PAGE,
	K_RD_VERF,
	K_ROOT,
	K_LIST,
	K_LOOKUP,
	K_MISSING,
	K_EXTRA,
	K_FH,
	K_FILEID,
	K_TYPE,
	K_PAGES,
	K_COOKIES,
	K_VERF,
	NKINDS
};

static const char *const kind_name[NKINDS] = {
    [K_GA_STATUS] = "A's handle not accepted by GETATTR",
    [K_GA_FILEID] = "GETATTR fileid differs",
    [K_GA_TYPE] = "GETATTR type differs",
    [K_RD_STATUS] = "A's cookie or verifier not accepted",
    [K_RD_PAGE] = "page after A's cookie differs",
    [K_RD_VERF] = "verifier after A's cookie differs",
    [K_ROOT] = "MNT root handle differs",
    [K_LIST] = "listing failed",
    [K_LOOKUP] = "LOOKUP failed",
    [K_MISSING] = "path of A not found",
    [K_EXTRA] = "path A does not have",
    [K_FH] = "LOOKUP handle differs",
    [K_FILEID] = "LOOKUP fileid differs",
    [K_TYPE] = "LOOKUP type differs",
    [K_PAGES] = "number of pages differs",
    [K_COOKIES] = "page (cookies, entries) differs",
    [K_VERF] = "page verifier differs",
};

/* A name of a lower inode with several links in /rw, as A showed it. */
struct linked {
	char path[48];
	struct fh fh;
	uint64_t fileid;
	uint32_t nlink;
};

#define NLINKED 31 /* links/: a0-a9, b0-b9, c0-c4, far; h0, h1; h0-h2 */

struct tally {
	const char *what; /* "B fresh" */
	unsigned long n[NKINDS];
	unsigned long getattrs, resumed, objects;
};

static struct {
	const char *bin;
	char tmp[DIR_LEN - 8];
	char src[DIR_LEN];
	bool mounted;
	int home_ns; /* the test's own network namespace */
	struct rpc_context *rpc;
	struct gw gw[NGW];
	bool key_file;
	struct record ref;     /* A's first walk */
	struct record walk;    /* the walk being checked */
	struct page *resumed;  /* a batch of pages being checked */
	struct obj **shuffled; /* A's objects in the order of GETATTR */
	struct linked lk[NLINKED];
	bool have_lk; /* A's LOOKUPs of them succeeded */
	uint64_t rng, seed;
	unsigned long calls;
	unsigned checks;
	double t0, t_layers, t_copies;
} g;

/* ---- small things ---- */

static void cleanup(void);

/* A set-up step failed: it_setup_failed with this test's cleanup. */
static void fail_setup(const char *what, const char *path)
{
	it_setup_failed(what, path, cleanup);
}

static const char *hex(const struct fh *f, char *buf, size_t len)
{
	size_t k = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < f->len && k + 3 <= len; i++)
		k += (size_t)snprintf(buf + k, len - k, "%02x", f->d[i]);
	if (!f->len)
		snprintf(buf, len, "(none)");
	return buf;
}

#define HEX_LEN (2 * NFS_RAW_FH_MAX + 8)

static const char *verf_hex(const char *v, char *buf, size_t len)
{
	size_t k = 0;

	for (int i = 0; i < NFS3_COOKIEVERFSIZE && k + 3 <= len; i++)
		k += (size_t)snprintf(buf + k, len - k, "%02x", (unsigned char)v[i]);
	return buf;
}

static bool fh_equal(const struct fh *a, const struct fh *b)
{
	return a->len == b->len && !memcmp(a->d, b->d, a->len);
}

static uint64_t rnd(void)
{
	g.rng ^= g.rng << 13;
	g.rng ^= g.rng >> 7;
	g.rng ^= g.rng << 17;
	return g.rng;
}

/* A check's difference of kind K: counted, and printed SHOW_MAX times. */
static void differ(struct tally *t, enum kind k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void differ(struct tally *t, enum kind k, const char *fmt, ...)
{
	va_list ap;

	if (t->n[k]++ >= SHOW_MAX)
		return;
	fprintf(stderr, "  %s: %s: ", t->what, kind_name[k]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- the layers ---- */

/* mkdir -p of PATH's parent. */
static void make_parents(const char *path)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s", path);
	for (char *s = strchr(p + strlen(g.src) + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (mkdir(p, 0755) && errno != EEXIST)
			fail_setup("mkdir", p);
		*s = '/';
	}
}

static void layer_path(char *out, size_t len, int layer, const char *path)
{
	snprintf(out, len, "%s/l%d/%s", g.src, layer, path);
}

/* A regular file PATH of LAYER whose bytes name both. */
static void put(int layer, const char *path)
{
	char full[PATH_MAX], text[PATH_MAX + 16];
	int fd, len;

	layer_path(full, sizeof(full), layer, path);
	make_parents(full);
	len = snprintf(text, sizeof(text), "l%d %s\n", layer, path);
	fd = open(full, O_WRONLY | O_CREAT | O_EXCL, 0644);
	if (fd < 0 || write(fd, text, (size_t)len) != len || close(fd))
		fail_setup("write", full);
}

static void put_dir(int layer, const char *path)
{
	char full[PATH_MAX];

	layer_path(full, sizeof(full), layer, path);
	make_parents(full);
	if (mkdir(full, 0755) && errno != EEXIST)
		fail_setup("mkdir", full);
}

static void put_symlink(int layer, const char *path, const char *target)
{
	char full[PATH_MAX];

	layer_path(full, sizeof(full), layer, path);
	make_parents(full);
	if (symlink(target, full))
		fail_setup("symlink", full);
}

/* Another name NEW of LAYER's OLD. */
static void put_link(int layer, const char *old, const char *new)
{
	char o[PATH_MAX], n[PATH_MAX];

	layer_path(o, sizeof(o), layer, old);
	layer_path(n, sizeof(n), layer, new);
	make_parents(n);
	if (link(o, n))
		fail_setup("link", n);
}

static void put_whiteout(int layer, const char *path)
{
	char full[PATH_MAX];

	layer_path(full, sizeof(full), layer, path);
	make_parents(full);
	if (mknod(full, S_IFCHR | 0644, makedev(0, 0)))
		fail_setup("mknod", full);
}

static void put_opaque(int layer, const char *path)
{
	char full[PATH_MAX];

	put_dir(layer, path);
	layer_path(full, sizeof(full), layer, path);
	if (setxattr(full, "trusted.overlay.opaque", "y", 1, 0))
		fail_setup("setxattr trusted.overlay.opaque", full);
}

static void make_tree(void)
{
	char p[128], q[128]; /* paths in a layer */

	for (int d = 0; d < NDIRS; d++)
		for (int s = 0; s < NSUB; s++) {
			for (int f = 0; f < NFILES; f++) {
				snprintf(p, sizeof(p), "tree/d%02d/s%d/f%02d", d, s, f);
				put(3, p);
			}
			for (int l = 0; l < NLINKS; l++) {
				snprintf(p, sizeof(p), "tree/d%02d/s%d/l%d", d, s, l);
				snprintf(q, sizeof(q), "f%02d", l);
				put_symlink(3, p, q);
			}
		}
	for (int d = 0; d < MID_DIRS; d++) {
		for (int s = 0; s < NSUB; s++) {
			for (int f = 0; f < MID_NEW; f++) {
				snprintf(p, sizeof(p), "tree/d%02d/s%d/g%02d", d, s, f);
				put(2, p);
			}
			for (int f = 0; f < MID_OVER; f++) {
				snprintf(p, sizeof(p), "tree/d%02d/s%d/f%02d", d, s, f);
				put(2, p);
			}
		}
		for (int f = 0; f < MID_NEW; f++) {
			snprintf(p, sizeof(p), "tree/d%02d/m0/m%02d", d, f);
			put(2, p);
		}
	}
	for (int d = 0; d < TOP_DIRS; d++) {
		for (int s = 0; s < TOP_SUBS; s++) {
			for (int f = 0; f < TOP_NEW; f++) {
				snprintf(p, sizeof(p), "tree/d%02d/s%d/t%02d", d, s, f);
				put(1, p);
			}
			snprintf(p, sizeof(p), "tree/d%02d/s%d/f05", d, s);
			put(1, p);
			snprintf(p, sizeof(p), "tree/d%02d/s%d/g05", d, s);
			put(1, p);
		}
		snprintf(p, sizeof(p), "tree/d%02d/s1/f10", d);
		put_whiteout(1, p);
		snprintf(p, sizeof(p), "tree/d%02d/t_link", d);
		put_symlink(1, p, "s0/f00");
	}
	put_opaque(1, "tree/d04/s2");
	for (int f = 0; f < OPAQUE_NEW; f++) {
		snprintf(p, sizeof(p), "tree/d04/s2/o%d", f);
		put(1, p);
	}
	for (int k = 1; k <= 3; k++) {
		snprintf(p, sizeof(p), "tree/d00/s0/deep/x/y/leaf%d", k);
		put(k, p);
		put(k, "tree/d00/s0/deep/x/y/same");
		snprintf(p, sizeof(p), "tree/d00/s0/deep/x/mid%d", k);
		put(k, p);
	}
}

static void make_big_and_links(void)
{
	char p[128], q[128]; /* paths in a layer */

	for (int i = 0; i < 1500; i++) {
		snprintf(p, sizeof(p), "big/n%04d", i);
		put(3, p);
	}
	for (int i = 1200; i < 2200; i++) {
		snprintf(p, sizeof(p), "big/n%04d", i);
		put(2, p);
	}
	for (int i = 2000; i < BIG_NAMES; i++) {
		snprintf(p, sizeof(p), "big/n%04d", i);
		put(1, p);
	}
	for (int i = 100; i < 100 + BIG_WH; i++) {
		snprintf(p, sizeof(p), "big/n%04d", i);
		put_whiteout(1, p);
	}
	for (int i = 0; i < 10; i++) {
		snprintf(p, sizeof(p), "links/a%d", i);
		put(3, p);
		snprintf(q, sizeof(q), "links/b%d", i);
		put_link(3, p, q);
		if (i < 5) {
			snprintf(q, sizeof(q), "links/c%d", i);
			put_link(3, p, q);
		}
	}
	put_link(3, "tree/d00/s0/f00", "links/far");
	put_symlink(3, "links/dangling", "nowhere");
	put(2, "tree/d05/m0/h0");
	put_link(2, "tree/d05/m0/h0", "tree/d05/m0/h1");
	put(2, "tree/d06/m0/h0");
	put_link(2, "tree/d06/m0/h0", "tree/d06/m0/h1");
	put_link(2, "tree/d06/m0/h0", "tree/d06/m0/h2");
}

static void run_cp(const char *from, const char *to)
{
	int st;
	pid_t pid = fork();

	if (pid == 0) {
		execlp("cp", "cp", "-a", from, to, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "cp -a %s %s failed\n", from, to);
		cleanup();
		exit(1);
	}
}

/* The copy must keep what the layers mean: the opaque xattr, the white-out. */
static void check_copy(const struct gw *gw)
{
	char p[PATH_MAX + 64], v[8];
	struct stat a, b;

	snprintf(p, sizeof(p), "%s/layers/l1/tree/d04/s2", gw->dir);
	if (getxattr(p, "trusted.overlay.opaque", v, sizeof(v)) != 1 || v[0] != 'y')
		fail_setup("cp -a lost trusted.overlay.opaque of", p);
	snprintf(p, sizeof(p), "%s/layers/l1/big/n0100", gw->dir);
	if (lstat(p, &b) || !S_ISCHR(b.st_mode) || b.st_rdev != makedev(0, 0))
		fail_setup("cp -a lost the white-out", p);
	snprintf(p, sizeof(p), "%s/l3/links/a0", g.src);
	if (lstat(p, &a))
		fail_setup("stat", p);
	snprintf(p, sizeof(p), "%s/layers/l3/links/a0", gw->dir);
	if (lstat(p, &b) || b.st_nlink != 3 || b.st_mtim.tv_sec != a.st_mtim.tv_sec ||
	    b.st_mtim.tv_nsec != a.st_mtim.tv_nsec || b.st_dev == a.st_dev)
		fail_setup("cp -a: links, mtime or device not as planned for", p);
}

/* ---- namespaces (netns_util.h) ---- */

/* A new network namespace with its loopback up, kept alive by the
 * descriptor returned; the calling thread goes back to the test's own
 * namespace, once that exists. */
static int new_ns(void)
{
	int fd = netns_new(g.home_ns);

	if (fd < 0)
		fail_setup("make a network", "namespace");
	return fd;
}

/* ---- the gateways ---- */

static void disconnect(void)
{
	if (g.rpc)
		rpc_destroy_context(g.rpc);
	g.rpc = NULL;
}

static void print_log(const struct gw *gw)
{
	char name[16];

	snprintf(name, sizeof(name), "gateway %c", gw->name);
	test_server_print_log(gw->state, name);
}

static int gw_start(struct gw *gw)
{
	if (!test_server_start_netns(g.bin, gw->state, gw->args, gw->ns, &gw->srv))
		return 0;
	print_log(gw);
	fprintf(stderr,
		"gateway %c did not start.  If its log says \"unknown option "
		"'--key-file...'\", this union-nfsd lacks the key file of issue 30 "
		"(docs/gateways.md, part 1), which every check here needs "
		"(GATEWAYS_NO_KEY_FILE=1 runs them without it, to fail).\n",
		gw->name);
	return -1;
}

static void gw_stop(struct gw *gw)
{
	int st;

	disconnect();
	st = test_server_stop(&gw->srv);

	if (st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		print_log(gw);
		fail_msg("gateway %c ended with status 0x%x", gw->name, st);
	}
}

/* GW's writable union of the same lowers at RW_EXPORT: its upper and
 * work dir, and the config file that names them. */
static void rw_init(const struct gw *gw)
{
	char p[PATH_MAX + 64];
	FILE *f;

	snprintf(p, sizeof(p), "%s/rw", gw->dir);
	if (mkdir(p, 0755))
		fail_setup("mkdir", p);
	snprintf(p, sizeof(p), "%s/rw/upper", gw->dir);
	if (mkdir(p, 0755))
		fail_setup("mkdir", p);
	snprintf(p, sizeof(p), "%s/rw/work", gw->dir);
	if (mkdir(p, 0755))
		fail_setup("mkdir", p);
	snprintf(p, sizeof(p), "%s/rw.conf", gw->dir);
	f = fopen(p, "w");
	if (!f)
		fail_setup("write", p);
	fprintf(f,
		"[export]\npath = " RW_EXPORT "\n"
		"lowerdir = %s/layers/l1:%s/layers/l2:%s/layers/l3\n"
		"upperdir = %s/rw/upper\nworkdir = %s/rw/work\n"
		"clients = 127.0.0.0/8(rw,no_root_squash,insecure)\n",
		gw->dir, gw->dir, gw->dir, gw->dir, gw->dir);
	if (fclose(f))
		fail_setup("write", p);
}

static void gw_init(struct gw *gw, int i)
{
	char p[PATH_MAX + 64];
	int k = 0;

	gw->name = (char)('A' + i);
	snprintf(gw->dir, sizeof(gw->dir), "%s/gw%c", g.tmp, gw->name);
	snprintf(gw->state, sizeof(gw->state), "%s/state", gw->dir);
	snprintf(gw->lower_arg, sizeof(gw->lower_arg),
		 "--lowerdir=%s/layers/l1:%s/layers/l2:%s/layers/l3", gw->dir, gw->dir,
		 gw->dir);
	snprintf(gw->key_arg, sizeof(gw->key_arg), "--key-file=%s/key", gw->dir);
	snprintf(gw->conf_arg, sizeof(gw->conf_arg), "--config=%s/rw.conf", gw->dir);
	gw->args[k++] = gw->lower_arg;
	gw->args[k++] = gw->conf_arg;
	gw->args[k++] = "--export=" EXPORT;
	gw->args[k++] = CLIENTS;
	gw->args[k++] = "--nfs-port=" STR(NFS_PORT);
	gw->args[k++] = "--mount-port=" STR(MOUNT_PORT);
	if (g.key_file)
		gw->args[k++] = gw->key_arg;
	gw->args[k] = NULL;
	if (mkdir(gw->dir, 0755))
		fail_setup("mkdir", gw->dir);
	if (mount("tmpfs", gw->dir, "tmpfs", 0, "mode=0755"))
		fail_setup("mount tmpfs on", gw->dir);
	snprintf(p, sizeof(p), "%s/layers", gw->dir);
	run_cp(g.src, p);
	check_copy(gw);
	rw_init(gw);
}

/* Each gateway's own copy of one key: 32 random bytes, mode 0600. */
static void write_keys(void)
{
	unsigned char key[KEY_BYTES];
	char p[PATH_MAX + 16];

	if (getrandom(key, sizeof(key), 0) != sizeof(key))
		fail_setup("getrandom", "key");
	for (int i = 0; i < NGW; i++) {
		int fd;

		snprintf(p, sizeof(p), "%s/key", g.gw[i].dir);
		fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, key, sizeof(key)) != sizeof(key) || close(fd))
			fail_setup("write", p);
	}
}

/* The one connection the test has open (g.rpc, which a failed check may
 * leave open: the next connection or the cleanup closes it), made in
 * GW's network namespace. */
static struct rpc_context *gw_connect(const struct gw *gw)
{
	disconnect();
	g.rpc = netns_connect(gw->ns, g.home_ns, NFS_PORT, NFS_PROG, 3);
	if (!g.rpc)
		fail_msg("no connection to gateway %c", gw->name);
	return g.rpc;
}

static int gw_mnt(const struct gw *gw, const char *path, struct fh *root)
{
	g.calls++;
	return netns_mnt(gw->ns, g.home_ns, MOUNT_PORT, path, root);
}

/* ---- the record ---- */

static uint64_t path_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return h;
}

static void rec_index(struct record *r, size_t i)
{
	size_t m = r->nslot - 1, k = path_hash(r->o[i].path) & m;

	while (r->slot[k])
		k = (k + 1) & m;
	r->slot[k] = i + 1;
}

/* The index of PATH in R, or SIZE_MAX. */
static size_t rec_find(const struct record *r, const char *path)
{
	size_t m, k;

	if (!r->nslot)
		return SIZE_MAX;
	m = r->nslot - 1;
	for (k = path_hash(path) & m; r->slot[k]; k = (k + 1) & m)
		if (!strcmp(r->o[r->slot[k] - 1].path, path))
			return r->slot[k] - 1;
	return SIZE_MAX;
}

static size_t rec_add(struct record *r, char *path, const struct nfs_raw_obj *o)
{
	size_t i = r->n;

	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 1024;
		r->o = realloc(r->o, r->cap * sizeof(*r->o));
		assert_non_null(r->o);
	}
	if (2 * (r->n + 1) > r->nslot) {
		free(r->slot);
		r->nslot = r->nslot ? 2 * r->nslot : 4096;
		r->slot = calloc(r->nslot, sizeof(*r->slot));
		assert_non_null(r->slot);
		for (size_t j = 0; j < r->n; j++)
			rec_index(r, j);
	}
	r->o[i] =
	    (struct obj){.path = path, .fh = o->fh, .fileid = o->fileid, .type = o->type};
	r->n++;
	rec_index(r, i);
	if (o->type == NF3DIR) {
		if (r->nd == r->capd) {
			r->capd = r->capd ? 2 * r->capd : 256;
			r->d = realloc(r->d, r->capd * sizeof(*r->d));
			assert_non_null(r->d);
		}
		r->d[r->nd++] = (struct dir){.obj = i};
	}
	return i;
}

static void page_free(struct page *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->e[i].name);
	free(p->e);
	p->e = NULL;
	p->n = 0;
}

static void rec_free(struct record *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->o[i].path);
	for (size_t i = 0; i < r->nd; i++)
		for (int k = PLAIN; k <= PLUS; k++) {
			for (size_t j = 0; j < r->d[i].ls[k].n; j++)
				page_free(&r->d[i].ls[k].p[j]);
			free(r->d[i].ls[k].p);
		}
	free(r->o);
	free(r->d);
	free(r->slot);
	memset(r, 0, sizeof(*r));
}

/* ---- calls, up to BATCH in flight ---- */

static void keep_getattr(void *data, void *out)
{
	GETATTR3res *r = data;
	struct nfs_raw_obj *o = out;
	post_op_attr a = {.attributes_follow = 1};

	o->status = (int)r->status;
	if (r->status != NFS3_OK)
		return;
	a.post_op_attr_u.attributes = r->GETATTR3res_u.resok.obj_attributes;
	nfs_raw_keep_attrs(o, &a);
}

static void keep_lookup(void *data, void *out)
{
	LOOKUP3res *r = data;
	struct nfs_raw_obj *o = out;

	o->status = (int)r->status;
	if (r->status != NFS3_OK)
		return;
	nfs_raw_copy_fh(&o->fh, &r->LOOKUP3res_u.resok.object);
	nfs_raw_keep_attrs(o, &r->LOOKUP3res_u.resok.obj_attributes);
}

static void keep_readdir(void *data, void *out)
{
	READDIR3res *r = data;
	struct page *p = out;
	size_t n = 0;

	p->status = (int)r->status;
	if (r->status != NFS3_OK)
		return;
	for (entry3 *e = r->READDIR3res_u.resok.reply.entries; e; e = e->nextentry)
		n++;
	p->e = calloc(n ? n : 1, sizeof(*p->e));
	assert_non_null(p->e);
	for (entry3 *e = r->READDIR3res_u.resok.reply.entries; e; e = e->nextentry) {
		struct entry *x = &p->e[p->n++];

		x->name = strdup(e->name);
		assert_non_null(x->name);
		x->cookie = e->cookie;
		x->fileid = e->fileid;
	}
	memcpy(p->verf, r->READDIR3res_u.resok.cookieverf, NFS3_COOKIEVERFSIZE);
	p->eof = r->READDIR3res_u.resok.reply.eof;
}

static void keep_readdirplus(void *data, void *out)
{
	READDIRPLUS3res *r = data;
	READDIRPLUS3resok *ok = &r->READDIRPLUS3res_u.resok;
	struct page *p = out;
	size_t n = 0;

	p->status = (int)r->status;
	if (r->status != NFS3_OK)
		return;
	for (entryplus3 *e = ok->reply.entries; e; e = e->nextentry)
		n++;
	p->e = calloc(n ? n : 1, sizeof(*p->e));
	assert_non_null(p->e);
	for (entryplus3 *e = ok->reply.entries; e; e = e->nextentry) {
		struct entry *x = &p->e[p->n++];
		const fattr3 *a = &e->name_attributes.post_op_attr_u.attributes;

		x->name = strdup(e->name);
		assert_non_null(x->name);
		x->cookie = e->cookie;
		x->fileid = e->fileid;
		x->has_fh = e->name_handle.handle_follows;
		if (x->has_fh)
			nfs_raw_copy_fh(&x->fh, &e->name_handle.post_op_fh3_u.handle);
		x->has_attrs = e->name_attributes.attributes_follow;
		if (x->has_attrs) {
			x->attr_fileid = a->fileid;
			x->attr_type = a->type;
		}
	}
	memcpy(p->verf, ok->cookieverf, NFS3_COOKIEVERFSIZE);
	p->eof = ok->reply.eof;
}

/* Waits for the N calls of CS; a connection lost fails the test. */
static void wait_all(struct rpc_context *rpc, struct call *cs, int n)
{
	if (nfs_raw_wait(rpc, cs, n, WAIT_S))
		fail_msg("no replies (%d calls in flight)", n);
	for (int i = 0; i < n; i++)
		if (cs[i].status != RPC_STATUS_SUCCESS)
			fail_msg("RPC failed: %s", cs[i].err[0] ? cs[i].err : "(none)");
}

static void queued(struct rpc_context *rpc, int rc)
{
	if (rc)
		fail_msg("call not queued: %s", rpc_get_error(rpc));
	g.calls++;
}

static void queue_getattr(struct rpc_context *rpc, const struct fh *fh, struct call *c,
			  struct nfs_raw_obj *o)
{
	GETATTR3args a = {.object = nfs_raw_fh3(fh)};

	*o = (struct nfs_raw_obj){.status = -1, .fh = *fh};
	*c = (struct call){.keep = keep_getattr, .out = o};
	queued(rpc, rpc_nfs3_getattr_async(rpc, nfs_raw_on_reply, &a, c));
}

static void queue_lookup(struct rpc_context *rpc, const struct fh *dir, const char *name,
			 struct call *c, struct nfs_raw_obj *o)
{
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};

	*o = (struct nfs_raw_obj){.status = -1};
	*c = (struct call){.keep = keep_lookup, .out = o};
	queued(rpc, rpc_nfs3_lookup_async(rpc, nfs_raw_on_reply, &a, c));
}

/* A page of directory DIR from P's cookie and verifier (set by the caller). */
static void queue_page(struct rpc_context *rpc, const struct fh *dir, int kind,
		       struct call *c, struct page *p)
{
	p->status = -1;
	if (kind == PLUS) {
		READDIRPLUS3args a = {.dir = nfs_raw_fh3(dir),
				      .cookie = p->cookie,
				      .dircount = RDP_DIRCOUNT,
				      .maxcount = RDP_MAXCOUNT};

		memcpy(a.cookieverf, p->verf_in, NFS3_COOKIEVERFSIZE);
		*c = (struct call){.keep = keep_readdirplus, .out = p};
		queued(rpc, rpc_nfs3_readdirplus_async(rpc, nfs_raw_on_reply, &a, c));
	} else {
		READDIR3args a = {
		    .dir = nfs_raw_fh3(dir), .cookie = p->cookie, .count = RD_COUNT};

		memcpy(a.cookieverf, p->verf_in, NFS3_COOKIEVERFSIZE);
		*c = (struct call){.keep = keep_readdir, .out = p};
		queued(rpc, rpc_nfs3_readdir_async(rpc, nfs_raw_on_reply, &a, c));
	}
}

/* ---- a walk ---- */

/* Lists directory DIR page by page from cookie 0 into LS.  False when a
 * page failed (it is kept, with its status) or the listing never ended. */
static bool list_dir(struct rpc_context *rpc, const struct fh *dir, int kind,
		     struct listing *ls, size_t *pages)
{
	struct page next = {0};

	for (;;) {
		struct call c;
		struct page *p;

		if (ls->n == PAGES_MAX)
			return false;
		ls->p = realloc(ls->p, (ls->n + 1) * sizeof(*ls->p));
		assert_non_null(ls->p);
		p = &ls->p[ls->n++];
		*p = next;
		queue_page(rpc, dir, kind, &c, p);
		wait_all(rpc, &c, 1);
		(*pages)++;
		if (p->status != NFS3_OK)
			return false;
		if (p->eof)
			return true;
		if (!p->n) /* not at eof and nothing to go on from */
			return false;
		next = (struct page){.cookie = p->e[p->n - 1].cookie};
		memcpy(next.verf_in, p->verf, NFS3_COOKIEVERFSIZE);
	}
}

static char *join(const char *dir, const char *name)
{
	char *s;

	if (asprintf(&s, "%s%s%s", dir, *dir ? "/" : "", name) < 0)
		fail_msg("out of memory");
	return s;
}

/* LOOKUP of every name of directory D's READDIRPLUS listing, BATCH at a
 * time, each object found added to R, each failure counted in T. */
static void lookup_names(struct rpc_context *rpc, struct record *r, size_t d,
			 struct tally *t)
{
	const struct listing *ls = &r->d[d].ls[PLUS];
	const size_t dir = r->d[d].obj;
	struct call cs[BATCH];
	struct nfs_raw_obj os[BATCH];
	const char **names; /* the entries' own strings: rec_add moves no page */
	size_t n = 0;

	for (size_t pg = 0; pg < ls->n; pg++)
		n += ls->p[pg].n;
	names = calloc(n ? n : 1, sizeof(*names));
	assert_non_null(names);
	n = 0;
	for (size_t pg = 0; pg < ls->n; pg++)
		for (size_t i = 0; i < ls->p[pg].n; i++)
			if (strcmp(ls->p[pg].e[i].name, ".") &&
			    strcmp(ls->p[pg].e[i].name, ".."))
				names[n++] = ls->p[pg].e[i].name;
	for (size_t i = 0; i < n; i += BATCH) {
		const struct fh fh = r->o[dir].fh; /* r->o moves as it grows */
		int b = n - i < BATCH ? (int)(n - i) : BATCH;

		for (int k = 0; k < b; k++)
			queue_lookup(rpc, &fh, names[i + (size_t)k], &cs[k], &os[k]);
		wait_all(rpc, cs, b);
		for (int k = 0; k < b; k++) {
			char *path = join(r->o[dir].path, names[i + (size_t)k]);

			if (os[k].status == NFS3_OK && os[k].attrs && os[k].fh.len) {
				rec_add(r, path, &os[k]);
				continue;
			}
			differ(t, K_LOOKUP, "'%s': %s%s", path,
			       nfs_raw_stat_name(os[k].status),
			       os[k].status == NFS3_OK ? " without handle or attributes"
						       : "");
			free(path);
		}
	}
	free(names);
}

/* Walks the tree of the export whose root handle is ROOT into R: every
 * directory listed (READDIRPLUS, then READDIR), every name looked up; a
 * call that failed is counted in T (K_LIST, K_LOOKUP). */
static void walk(struct rpc_context *rpc, const struct fh *root, struct record *r,
		 struct tally *t)
{
	struct call c;
	struct nfs_raw_obj o;

	queue_getattr(rpc, root, &c, &o);
	wait_all(rpc, &c, 1);
	if (o.status != NFS3_OK) {
		differ(t, K_LOOKUP, "GETATTR of the root: %s",
		       nfs_raw_stat_name(o.status));
		return;
	}
	rec_add(r, strdup(""), &o);
	for (size_t d = 0; d < r->nd; d++) {
		for (int k = PLUS; k >= PLAIN; k--) {
			const struct listing *ls = &r->d[d].ls[k];
			struct fh dir = r->o[r->d[d].obj].fh;

			if (!list_dir(rpc, &dir, k, &r->d[d].ls[k], &r->pages))
				differ(t, K_LIST, "%s of '%s' at page %zu: %s",
				       k == PLUS ? "READDIRPLUS" : "READDIR",
				       r->o[r->d[d].obj].path, ls->n - 1,
				       nfs_raw_stat_name(ls->p[ls->n - 1].status));
		}
		lookup_names(rpc, r, d, t);
	}
}

/* ---- comparisons ---- */

/* Compares page B with A's page A; false with WHY filled when their status,
 * entries or eof differ (the verifier is compared apart). */
static bool same_page(const struct page *a, const struct page *b, char *why, size_t len)
{
	char ha[HEX_LEN], hb[HEX_LEN];

	if (a->status != b->status) {
		snprintf(why, len, "status %s, A's %s", nfs_raw_stat_name(b->status),
			 nfs_raw_stat_name(a->status));
		return false;
	}
	for (size_t i = 0; i < a->n || i < b->n; i++) {
		const struct entry *x = i < a->n ? &a->e[i] : NULL;
		const struct entry *y = i < b->n ? &b->e[i] : NULL;

		if (!x || !y) {
			snprintf(why, len, "%zu entries, A's %zu: entry %zu '%s' %s",
				 b->n, a->n, i, x ? x->name : y->name,
				 x ? "missing" : "not on A's page");
			return false;
		}
		if (strcmp(x->name, y->name) || x->cookie != y->cookie ||
		    x->fileid != y->fileid) {
			snprintf(why, len,
				 "entry %zu: '%s' cookie 0x%" PRIx64 " fileid 0x%" PRIx64
				 ", A's '%s' cookie 0x%" PRIx64 " fileid 0x%" PRIx64,
				 i, y->name, y->cookie, y->fileid, x->name, x->cookie,
				 x->fileid);
			return false;
		}
		if (x->has_fh != y->has_fh || (x->has_fh && !fh_equal(&x->fh, &y->fh))) {
			snprintf(why, len, "entry %zu '%s': handle %s, A's %s", i,
				 x->name,
				 y->has_fh ? hex(&y->fh, hb, sizeof(hb)) : "(none)",
				 x->has_fh ? hex(&x->fh, ha, sizeof(ha)) : "(none)");
			return false;
		}
		if (x->has_attrs != y->has_attrs ||
		    (x->has_attrs && (x->attr_fileid != y->attr_fileid ||
				      x->attr_type != y->attr_type))) {
			snprintf(why, len,
				 "entry %zu '%s': attributes fileid 0x%" PRIx64
				 " type %u, A's 0x%" PRIx64 " type %u",
				 i, x->name, y->attr_fileid, y->attr_type, x->attr_fileid,
				 x->attr_type);
			return false;
		}
	}
	if (a->eof != b->eof) {
		snprintf(why, len, "eof %d, A's %d", b->eof, a->eof);
		return false;
	}
	return true;
}

static const char *list_name(int kind)
{
	return kind == PLUS ? "READDIRPLUS" : "READDIR";
}

/* (1) GETATTR of every handle of A, in a shuffled order. */
static void check_getattrs(struct rpc_context *rpc, struct tally *t)
{
	const struct record *ref = &g.ref;
	struct call cs[BATCH];
	struct nfs_raw_obj os[BATCH];
	char ha[HEX_LEN];

	for (size_t i = ref->n; i > 1; i--) {
		size_t j = rnd() % i;
		struct obj *x = g.shuffled[i - 1];

		g.shuffled[i - 1] = g.shuffled[j];
		g.shuffled[j] = x;
	}
	for (size_t i = 0; i < ref->n; i += BATCH) {
		int n = ref->n - i < BATCH ? (int)(ref->n - i) : BATCH;

		for (int k = 0; k < n; k++)
			queue_getattr(rpc, &g.shuffled[i + (size_t)k]->fh, &cs[k],
				      &os[k]);
		wait_all(rpc, cs, n);
		for (int k = 0; k < n; k++) {
			const struct obj *x = g.shuffled[i + (size_t)k];

			t->getattrs++;
			if (os[k].status != NFS3_OK)
				differ(t, K_GA_STATUS, "'%s' handle %s: %s", x->path,
				       hex(&x->fh, ha, sizeof(ha)),
				       nfs_raw_stat_name(os[k].status));
			else if (os[k].fileid != x->fileid)
				differ(t, K_GA_FILEID,
				       "'%s' handle %s: fileid 0x%" PRIx64
				       ", A's 0x%" PRIx64,
				       x->path, hex(&x->fh, ha, sizeof(ha)), os[k].fileid,
				       x->fileid);
			else if (os[k].type != x->type)
				differ(t, K_GA_TYPE, "'%s': type %u, A's %u", x->path,
				       os[k].type, x->type);
		}
	}
}

/* One page of A (directory D, listing KIND, page PG) in a batch. */
struct resume {
	size_t d, pg;
	int kind;
};

static void check_resumed(struct rpc_context *rpc, struct tally *t,
			  const struct resume *rs, int n)
{
	struct call cs[BATCH];
	char why[512], va[24], vb[24];

	for (int i = 0; i < n; i++) {
		const struct dir *d = &g.ref.d[rs[i].d];
		const struct page *a = &d->ls[rs[i].kind].p[rs[i].pg];
		struct page *p = &g.resumed[i];

		*p = (struct page){.cookie = a->cookie};
		memcpy(p->verf_in, a->verf_in, NFS3_COOKIEVERFSIZE);
		queue_page(rpc, &g.ref.o[d->obj].fh, rs[i].kind, &cs[i], p);
	}
	wait_all(rpc, cs, n);
	for (int i = 0; i < n; i++) {
		const struct dir *d = &g.ref.d[rs[i].d];
		const struct page *a = &d->ls[rs[i].kind].p[rs[i].pg];
		const struct page *p = &g.resumed[i];
		const char *path = g.ref.o[d->obj].path;

		t->resumed++;
		if (p->status != NFS3_OK)
			differ(t, K_RD_STATUS,
			       "%s of '%s' page %zu from cookie 0x%" PRIx64
			       " verifier %s: %s",
			       list_name(rs[i].kind), path, rs[i].pg, a->cookie,
			       verf_hex(a->verf_in, va, sizeof(va)),
			       nfs_raw_stat_name(p->status));
		else if (!same_page(a, p, why, sizeof(why)))
			differ(t, K_RD_PAGE,
			       "%s of '%s' page %zu from cookie 0x%" PRIx64 ": %s",
			       list_name(rs[i].kind), path, rs[i].pg, a->cookie, why);
		else if (memcmp(a->verf, p->verf, NFS3_COOKIEVERFSIZE))
			differ(t, K_RD_VERF, "%s of '%s' page %zu: verifier %s, A's %s",
			       list_name(rs[i].kind), path, rs[i].pg,
			       verf_hex(p->verf, vb, sizeof(vb)),
			       verf_hex(a->verf, va, sizeof(va)));
		page_free(&g.resumed[i]);
	}
}

/* (2) Every page of A asked again with A's handle, cookie and verifier. */
static void check_pages(struct rpc_context *rpc, struct tally *t)
{
	struct resume rs[BATCH];
	int n = 0;

	for (size_t d = 0; d < g.ref.nd; d++)
		for (int k = PLAIN; k <= PLUS; k++)
			for (size_t pg = 0; pg < g.ref.d[d].ls[k].n; pg++) {
				rs[n++] = (struct resume){.d = d, .pg = pg, .kind = k};
				if (n == BATCH) {
					check_resumed(rpc, t, rs, n);
					n = 0;
				}
			}
	if (n)
		check_resumed(rpc, t, rs, n);
}

/* The listings of A's directory DA and of the gateway's GD. */
static void compare_listings(struct tally *t, const char *path, const struct dir *da,
			     const struct dir *gd)
{
	char why[512], va[24], vb[24];

	for (int k = PLAIN; k <= PLUS; k++) {
		const struct listing *a = &da->ls[k], *b = &gd->ls[k];

		if (a->n != b->n)
			differ(t, K_PAGES, "%s of '%s': %zu pages, A's %zu", list_name(k),
			       path, b->n, a->n);
		for (size_t pg = 0; pg < a->n && pg < b->n; pg++) {
			const struct page *x = &a->p[pg], *y = &b->p[pg];

			if (x->cookie != y->cookie ||
			    !same_page(x, y, why, sizeof(why))) {
				if (x->cookie != y->cookie)
					snprintf(why, sizeof(why),
						 "asked from cookie 0x%" PRIx64
						 ", A from 0x%" PRIx64,
						 y->cookie, x->cookie);
				differ(t, K_COOKIES, "%s of '%s' page %zu: %s",
				       list_name(k), path, pg, why);
				break;
			}
			if (memcmp(x->verf, y->verf, NFS3_COOKIEVERFSIZE)) {
				differ(t, K_VERF,
				       "%s of '%s' page %zu: verifier %s, A's %s",
				       list_name(k), path, pg,
				       verf_hex(y->verf, vb, sizeof(vb)),
				       verf_hex(x->verf, va, sizeof(va)));
				break;
			}
		}
	}
}

/* (3) The gateway's own walk W against A's. */
static void compare_walks(struct tally *t, const struct record *w)
{
	const struct record *ref = &g.ref;
	char ha[HEX_LEN], hb[HEX_LEN];
	size_t *dir_of = calloc(w->n ? w->n : 1, sizeof(*dir_of));

	assert_non_null(dir_of);
	for (size_t d = 0; d < w->nd; d++)
		dir_of[w->d[d].obj] = d + 1;
	for (size_t i = 0; i < ref->n; i++) {
		const struct obj *a = &ref->o[i];
		size_t j = rec_find(w, a->path);
		const struct obj *b = j == SIZE_MAX ? NULL : &w->o[j];

		if (!b) {
			differ(t, K_MISSING, "'%s' (A's handle %s)", a->path,
			       hex(&a->fh, ha, sizeof(ha)));
			continue;
		}
		if (!fh_equal(&a->fh, &b->fh))
			differ(t, K_FH,
			       "'%s': handle %s fileid 0x%" PRIx64 ", A's %s 0x%" PRIx64,
			       a->path, hex(&b->fh, hb, sizeof(hb)), b->fileid,
			       hex(&a->fh, ha, sizeof(ha)), a->fileid);
		if (a->fileid != b->fileid)
			differ(t, K_FILEID, "'%s': fileid 0x%" PRIx64 ", A's 0x%" PRIx64,
			       a->path, b->fileid, a->fileid);
		if (a->type != b->type)
			differ(t, K_TYPE, "'%s': type %u, A's %u", a->path, b->type,
			       a->type);
	}
	for (size_t j = 0; j < w->n; j++)
		if (rec_find(ref, w->o[j].path) == SIZE_MAX)
			differ(t, K_EXTRA, "'%s'", w->o[j].path);
	for (size_t d = 0; d < ref->nd; d++) {
		const char *path = ref->o[ref->d[d].obj].path;
		size_t j = rec_find(w, path);

		if (j != SIZE_MAX && dir_of[j])
			compare_listings(t, path, &ref->d[d], &w->d[dir_of[j] - 1]);
	}
	free(dir_of);
}

static unsigned long tally_sum(const struct tally *t)
{
	unsigned long n = 0;

	for (int k = 0; k < NKINDS; k++)
		n += t->n[k];
	return n;
}

static void print_tally(const struct tally *t, double secs)
{
	unsigned long bad = tally_sum(t);

	fprintf(stderr,
		"%s: %lu GETATTRs of A's handles, %lu pages from A's cookies, a walk "
		"of %lu objects: %s (%.1f s)\n",
		t->what, t->getattrs, t->resumed, t->objects,
		bad ? "DIFFERENT" : "all as on A", secs);
	for (int k = 0; k < NKINDS; k++)
		if (t->n[k])
			fprintf(stderr, "  %s: %lu x %s\n", t->what, t->n[k],
				kind_name[k]);
}

/* Checks (1), (2) and (3) against gateway GW, asked nothing before.
 * Returns the differences from A (each kind printed SHOW_MAX times). */
static unsigned long check_gateway(struct gw *gw, const char *what)
{
	struct tally t = {.what = what};
	struct rpc_context *rpc = gw_connect(gw);
	struct fh root;
	char ha[HEX_LEN], hb[HEX_LEN];
	double t0 = it_now_s();
	int status;

	g.checks++;
	rec_free(&g.walk); /* left over if an earlier check failed midway */
	check_getattrs(rpc, &t);
	check_pages(rpc, &t);
	status = gw_mnt(gw, EXPORT, &root);
	if (status != MNT3_OK)
		differ(&t, K_ROOT, "MNT %s: status %d", EXPORT, status);
	else if (!fh_equal(&root, &g.ref.o[0].fh))
		differ(&t, K_ROOT, "%s, A's %s", hex(&root, hb, sizeof(hb)),
		       hex(&g.ref.o[0].fh, ha, sizeof(ha)));
	if (status == MNT3_OK) {
		walk(rpc, &root, &g.walk, &t);
		t.objects = g.walk.n;
		compare_walks(&t, &g.walk);
	}
	rec_free(&g.walk);
	disconnect();
	print_tally(&t, it_now_s() - t0);
	return tally_sum(&t);
}

static void expect_same(unsigned long bad, const char *what)
{
	if (bad)
		fail_msg("%s: %lu differences from gateway A (listed above)", what, bad);
}

static void restart(struct gw *gw)
{
	gw_stop(gw);
	assert_int_equal(gw_start(gw), 0);
}

/* ---- the tests ---- */

static void test_walk_a(void **state)
{
	struct rpc_context *rpc = gw_connect(&g.gw[0]);
	struct fh root;
	struct tally t = {.what = "A"};
	size_t most = 0, want = expected_objects();
	double t0 = it_now_s();
	(void)state;

	assert_int_equal(gw_mnt(&g.gw[0], EXPORT, &root), MNT3_OK);
	walk(rpc, &root, &g.ref, &t);
	disconnect();
	for (size_t d = 0; d < g.ref.nd; d++)
		if (g.ref.d[d].ls[PLUS].n > most)
			most = g.ref.d[d].ls[PLUS].n;
	fprintf(stderr,
		"A: %zu objects, %zu directories, %zu pages (READDIRPLUS of the "
		"biggest: %zu) in %.1f s\n",
		g.ref.n, g.ref.nd, g.ref.pages, most, it_now_s() - t0);
	if (tally_sum(&t))
		fail_msg("A: %lu calls of its walk failed", tally_sum(&t));
	if (g.ref.n != want)
		fail_msg("A shows %zu objects, the layers %zu", g.ref.n, want);
	assert_true(most >= 3);
	g.shuffled = calloc(g.ref.n, sizeof(*g.shuffled));
	assert_non_null(g.shuffled);
	for (size_t i = 0; i < g.ref.n; i++)
		g.shuffled[i] = &g.ref.o[i];
}

static void need_walk_a(void)
{
	if (!g.shuffled)
		fail_msg("no record of gateway A (its walk failed)");
}

static void test_fresh_b(void **state)
{
	(void)state;
	need_walk_a();
	expect_same(check_gateway(&g.gw[1], "B fresh"), "B fresh");
}

static void test_fresh_c(void **state)
{
	(void)state;
	need_walk_a();
	expect_same(check_gateway(&g.gw[2], "C fresh"), "C fresh");
}

static void test_restarted(void **state)
{
	static const char *const what[NGW] = {"A restarted", "B restarted",
					      "C restarted"};
	unsigned long bad = 0;
	(void)state;

	need_walk_a();
	for (int i = 0; i < NGW; i++)
		restart(&g.gw[i]);
	for (int i = 0; i < NGW; i++) /* each, also after another's differences */
		bad += check_gateway(&g.gw[i], what[i]);
	expect_same(bad, "A, B and C restarted");
}

static void test_index_rebuilt(void **state)
{
	struct gw *gw = &g.gw[2];
	char p[PATH_MAX + 16];
	(void)state;

	need_walk_a();
	gw_stop(gw);
	snprintf(p, sizeof(p), "%s/layers", gw->state);
	assert_int_equal(test_tree_remove(p), 0);
	assert_int_equal(gw_start(gw), 0);
	expect_same(check_gateway(gw, "C without layers/"), "C without layers/");
}

static void test_state_rebuilt(void **state)
{
	struct gw *gw = &g.gw[0];
	(void)state;

	need_walk_a();
	gw_stop(gw);
	assert_int_equal(test_tree_remove(gw->state), 0);
	assert_int_equal(gw_start(gw), 0);
	expect_same(check_gateway(gw, "A without its state dir"),
		    "A without its state dir");
}

/* ---- the linked names of the writable union ---- */

/* The names of lower inodes with several links (make_big_and_links). */
static void linked_paths(void)
{
	size_t n = 0;

	_Static_assert(NLINKED == 10 + 10 + 5 + 1 + 2 + 3, "the names below");
	for (int i = 0; i < 10; i++) {
		snprintf(g.lk[n++].path, sizeof(g.lk[0].path), "links/a%d", i);
		snprintf(g.lk[n++].path, sizeof(g.lk[0].path), "links/b%d", i);
		if (i < 5)
			snprintf(g.lk[n++].path, sizeof(g.lk[0].path), "links/c%d", i);
	}
	snprintf(g.lk[n++].path, sizeof(g.lk[0].path), "links/far");
	for (int d = 5; d <= 6; d++)
		for (int h = 0; h <= d - 4; h++)
			snprintf(g.lk[n++].path, sizeof(g.lk[0].path),
				 "tree/d%02d/m0/h%d", d, h);
	assert_int_equal(n, NLINKED);
}

/* The entry of G.LK for PATH, or NULL. */
static const struct linked *linked_find(const char *path)
{
	for (size_t i = 0; i < NLINKED; i++)
		if (strcmp(g.lk[i].path, path) == 0)
			return &g.lk[i];
	return NULL;
}

/* Counts a name whose handle (FH, NULL: not compared) or fileid differs
 * from A's L. */
static unsigned long linked_differs(const struct gw *gw, const char *how,
				    const struct linked *l, int status,
				    const struct fh *fh, uint64_t fileid)
{
	char ha[HEX_LEN], hb[HEX_LEN];

	if (status == NFS3_OK && (!fh || fh_equal(fh, &l->fh)) && fileid == l->fileid)
		return 0;
	fprintf(stderr,
		"  %c %s %s: status %d, handle %s (A's %s), fileid %" PRIu64
		" (A's %" PRIu64 ")\n",
		gw->name, how, l->path, status, fh ? hex(fh, hb, sizeof(hb)) : "-",
		hex(&l->fh, ha, sizeof(ha)), fileid, l->fileid);
	return 1;
}

/* GETATTR of each of A's handles of the linked names on GW. */
static unsigned long linked_getattrs(const struct gw *gw, struct rpc_context *rpc)
{
	unsigned long bad = 0;

	for (size_t i = 0; i < NLINKED; i++) {
		struct nfs_raw_obj o = nfs_raw_getattr(rpc, &g.lk[i].fh);

		g.calls++;
		bad += linked_differs(gw, "GETATTR", &g.lk[i], o.status, NULL, o.fileid);
	}
	return bad;
}

/* READDIRPLUS of /rw's links/ on GW: each linked name's handle and fileid. */
static unsigned long linked_listing(const struct gw *gw, struct rpc_context *rpc,
				    const struct fh *root)
{
	struct nfs_raw_obj dir = nfs_raw_walk(rpc, root, "links");
	struct listing ls = {0};
	unsigned long bad = 0;
	size_t pages = 0, seen = 0;
	char path[PATH_MAX];

	if (dir.status != NFS3_OK || !list_dir(rpc, &dir.fh, PLUS, &ls, &pages)) {
		fprintf(stderr, "  %c: READDIRPLUS of %s/links failed\n", gw->name,
			RW_EXPORT);
		bad++;
	}
	g.calls += pages + 1;
	for (size_t p = 0; p < ls.n; p++) {
		for (size_t i = 0; i < ls.p[p].n; i++) {
			const struct entry *e = &ls.p[p].e[i];
			const struct linked *l;

			snprintf(path, sizeof(path), "links/%s", e->name);
			l = linked_find(path);
			if (!l)
				continue;
			seen++;
			bad +=
			    linked_differs(gw, "READDIRPLUS", l, e->has_fh ? NFS3_OK : -1,
					   &e->fh, e->fileid);
		}
		page_free(&ls.p[p]);
	}
	free(ls.p);
	return bad + (seen != 26); /* a0-a9, b0-b9, c0-c4, far */
}

/* LOOKUPs of the linked names on GW, the last one first. */
static unsigned long linked_lookups(const struct gw *gw, struct rpc_context *rpc,
				    const struct fh *root)
{
	unsigned long bad = 0;

	for (size_t i = NLINKED; i-- > 0;) {
		struct nfs_raw_obj o = nfs_raw_walk(rpc, root, g.lk[i].path);

		g.calls += 3;
		bad += linked_differs(gw, "LOOKUP", &g.lk[i], o.status, &o.fh, o.fileid);
	}
	return bad;
}

/* A's handles and fileids of the linked names on GW: GETATTR first, or
 * (LISTING_FIRST) after a READDIRPLUS and the LOOKUPs; the differences. */
static unsigned long check_links(struct gw *gw, bool listing_first)
{
	struct rpc_context *rpc = gw_connect(gw);
	unsigned long bad = 0;
	struct fh root;
	int status;

	if (!listing_first)
		bad += linked_getattrs(gw, rpc);
	status = gw_mnt(gw, RW_EXPORT, &root);
	if (status != MNT3_OK) {
		fprintf(stderr, "  %c: MNT %s: status %d\n", gw->name, RW_EXPORT, status);
		disconnect();
		return bad + 1;
	}
	bad += linked_listing(gw, rpc, &root);
	bad += linked_lookups(gw, rpc, &root);
	if (listing_first)
		bad += linked_getattrs(gw, rpc);
	disconnect();
	fprintf(stderr, "%c: %d linked names of %s, %lu differences from A\n", gw->name,
		NLINKED, RW_EXPORT, bad);
	return bad;
}

/* The names of one inode in A's walk: their own handles, one fileid. */
static void linked_expect_group(const char *a, const char *b, uint32_t nlink)
{
	const struct linked *la = linked_find(a), *lb = linked_find(b);

	assert_true(la && lb);
	assert_false(fh_equal(&la->fh, &lb->fh));
	assert_int_equal(la->fileid, lb->fileid);
	assert_int_equal(la->nlink, nlink);
	assert_int_equal(lb->nlink, nlink);
}

static void test_links_a(void **state)
{
	struct rpc_context *rpc = gw_connect(&g.gw[0]);
	struct fh root;
	(void)state;

	linked_paths();
	assert_int_equal(gw_mnt(&g.gw[0], RW_EXPORT, &root), MNT3_OK);
	for (size_t i = 0; i < NLINKED; i++) {
		struct nfs_raw_obj o = nfs_raw_walk(rpc, &root, g.lk[i].path);

		g.calls += 3;
		if (o.status != NFS3_OK || !o.attrs)
			fail_msg("A: LOOKUP %s%s: status %d", RW_EXPORT, g.lk[i].path,
				 o.status);
		g.lk[i].fh = o.fh;
		g.lk[i].fileid = o.fileid;
		g.lk[i].nlink = o.nlink;
	}
	disconnect();
	linked_expect_group("links/a0", "links/b0", 3);
	linked_expect_group("links/a0", "links/c0", 3);
	linked_expect_group("links/a7", "links/b7", 2);
	linked_expect_group("tree/d05/m0/h0", "tree/d05/m0/h1", 2);
	linked_expect_group("tree/d06/m0/h1", "tree/d06/m0/h2", 3);
	assert_int_not_equal(linked_find("links/a0")->fileid,
			     linked_find("links/a1")->fileid);
	g.have_lk = true;
}

static void need_links_a(void)
{
	if (!g.have_lk)
		fail_msg("no record of gateway A's linked names (its LOOKUPs failed)");
}

static void test_links_fresh(void **state)
{
	unsigned long bad;
	(void)state;

	need_links_a();
	bad = check_links(&g.gw[1], false);
	bad += check_links(&g.gw[2], true);
	if (bad)
		fail_msg("linked names on B and C: %lu differences from A", bad);
}

static void test_links_again(void **state)
{
	unsigned long bad = 0;
	(void)state;

	need_links_a();
	for (int i = 0; i < NGW; i++)
		bad += check_links(&g.gw[i], i == 2);
	if (bad)
		fail_msg("linked names after the restarts: %lu differences from A", bad);
}

/* ---- set-up and teardown ---- */

static void make_layers(void)
{
	double t0 = it_now_s();

	snprintf(g.src, sizeof(g.src), "%s/src", g.tmp);
	if (mkdir(g.src, 0755))
		fail_setup("mkdir", g.src);
	for (int l = 1; l <= 3; l++) {
		char p[PATH_MAX + 16];

		snprintf(p, sizeof(p), "%s/l%d", g.src, l);
		if (mkdir(p, 0755))
			fail_setup("mkdir", p);
	}
	make_tree();
	make_big_and_links();
	g.t_layers = it_now_s() - t0;
}

/* The network namespace of process PID (0: this one), by inode. */
static ino_t ns_of(pid_t pid)
{
	char p[64];
	struct stat st;

	if (pid)
		snprintf(p, sizeof(p), "/proc/%d/ns/net", (int)pid);
	else
		snprintf(p, sizeof(p), "/proc/thread-self/ns/net");
	return stat(p, &st) ? 0 : st.st_ino;
}

/* Each gateway in a network namespace of its own, none the test's. */
static bool print_namespaces(void)
{
	ino_t ns[NGW + 1] = {ns_of(0)};

	for (int i = 0; i < NGW; i++) {
		ns[i + 1] = ns_of(g.gw[i].srv.pid);
		fprintf(stderr, "gateway %c: pid %d, net:[%lu], 127.0.0.1 port %d\n",
			g.gw[i].name, (int)g.gw[i].srv.pid, (unsigned long)ns[i + 1],
			g.gw[i].srv.nfs_port);
		for (int j = 0; j <= i; j++)
			if (!ns[i + 1] || ns[i + 1] == ns[j]) {
				fprintf(stderr, "gateway %c shares a network namespace\n",
					g.gw[i].name);
				return false;
			}
	}
	return true;
}

static int group_setup(void **state)
{
	double t0;
	const char *seed = getenv("GATEWAYS_SEED");
	(void)state;

	g.t0 = it_now_s();
	if (geteuid() != 0) {
		fprintf(stderr, "needs root (namespaces, mknod, trusted xattrs)\n");
		exit(77);
	}
	g.key_file = !getenv("GATEWAYS_NO_KEY_FILE");
	g.seed =
	    seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
	g.rng = g.seed ? g.seed : 1;
	fprintf(stderr, "GATEWAYS_SEED=%" PRIu64 "%s\n", g.seed,
		g.key_file ? "" : "; GATEWAYS_NO_KEY_FILE: no --key-file");

	/* the test's own mount namespace (the tmpfs mounts) and network
	 * namespace (nothing it does reaches the host's network) */
	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		fail_setup("unshare", "CLONE_NEWNS");
	g.home_ns = new_ns();

	snprintf(g.tmp, sizeof(g.tmp), TMP_PREFIX "XXXXXX");
	if (!mkdtemp(g.tmp))
		fail_setup("mkdtemp", g.tmp);
	if (mount("tmpfs", g.tmp, "tmpfs", 0, "mode=0755"))
		fail_setup("mount tmpfs on", g.tmp);
	g.mounted = true;
	make_layers();

	t0 = it_now_s();
	for (int i = 0; i < NGW; i++)
		gw_init(&g.gw[i], i);
	write_keys();
	g.t_copies = it_now_s() - t0;
	fprintf(stderr, "layers made in %.1f s, copied to 3 gateways in %.1f s\n",
		g.t_layers, g.t_copies);
	sleep(1); /* no layer dir changed within the second before a gateway lists it */

	for (int i = 0; i < NGW; i++) {
		g.gw[i].ns = new_ns();
		if (gw_start(&g.gw[i])) {
			cleanup();
			return -1;
		}
	}
	if (!print_namespaces()) {
		cleanup();
		return -1;
	}
	g.resumed = calloc(BATCH, sizeof(*g.resumed));
	return g.resumed ? 0 : -1;
}

/* Stops every server by pid, lets the namespaces go, unmounts the tmpfs
 * mounts and removes the temp dir; once, from wherever it is called. */
static void cleanup(void)
{
	static bool done;
	size_t plain = 0;

	if (done)
		return;
	done = true;
	disconnect();
	for (int i = 0; i < NGW; i++) {
		test_server_stop(&g.gw[i].srv);
		if (g.gw[i].ns >= 0)
			close(g.gw[i].ns);
		if (g.mounted && g.gw[i].dir[0] && umount2(g.gw[i].dir, MNT_DETACH) &&
		    errno != EINVAL && errno != ENOENT)
			fprintf(stderr, "umount %s: %s\n", g.gw[i].dir, strerror(errno));
	}
	for (size_t d = 0; d < g.ref.nd; d++)
		plain += g.ref.d[d].ls[PLAIN].n;
	if (g.ref.n)
		fprintf(stderr,
			"summary: %zu objects, %zu directories, %zu pages a walk (%zu of "
			"them READDIR), %u gateway checks, %lu calls, %.1f s in all\n",
			g.ref.n, g.ref.nd, g.ref.pages, plain, g.checks, g.calls,
			it_now_s() - g.t0);
	rec_free(&g.ref);
	rec_free(&g.walk);
	free(g.shuffled);
	free(g.resumed);
	if (g.home_ns >= 0)
		close(g.home_ns);
	if (g.mounted && umount2(g.tmp, MNT_DETACH))
		fprintf(stderr, "umount %s: %s\n", g.tmp, strerror(errno));
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
	    cmocka_unit_test(test_walk_a),	  cmocka_unit_test(test_fresh_b),
	    cmocka_unit_test(test_fresh_c),	  cmocka_unit_test(test_links_a),
	    cmocka_unit_test(test_links_fresh),	  cmocka_unit_test(test_restarted),
	    cmocka_unit_test(test_links_again),	  cmocka_unit_test(test_index_rebuilt),
	    cmocka_unit_test(test_state_rebuilt), cmocka_unit_test(test_links_again),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	g.bin = argv[1];
	g.home_ns = -1;
	for (int i = 0; i < NGW; i++)
		g.gw[i].srv.pid = -1, g.gw[i].ns = -1;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
