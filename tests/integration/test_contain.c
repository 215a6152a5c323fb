/* SPDX-License-Identifier: Apache-2.0 */
/* test_contain - containment and identity (issue 6).
 *
 *   test_contain UNION_NFSD
 *
 * Builds in a temp dir a writable union (lower, upper, work) beside a
 * directory OUTSIDE that no export holds, and a second union served by a
 * second server with its own state dir.  The lower layer holds symlinks
 * that point out of it: absolute, relative (../outside, ../../../..), to
 * /etc/shadow, to a directory outside, and a dangling one to a name outside.
 * Through hand-made RPC calls (rawrpc.[ch], AUTH_SYS root) it checks that:
 *
 *   1. a symlink is an object of its own: LOOKUP gives a symlink whose size is
 *      the length of its text, READLINK gives the text, READ, WRITE and a
 *      SETATTR of the size are refused, a mode change does not reach the target;
 *   2. a symlink to a directory is no directory: LOOKUP, CREATE, MKDIR,
 *      REMOVE, RENAME and READDIR through it answer NFS3ERR_NOTDIR;
 *   3. CREATE, MKDIR over a symlink, or a dangling one, make nothing outside;
 *      LINK of a symlink links the symlink;
 *   4. ".." of the export root is the root; MNT of a path with ".." is refused;
 *   5. malformed names: '/' and empty (NFS3ERR_ACCES), 256 bytes
 *      (NFS3ERR_NAMETOOLONG), "." and ".." per procedure, a NUL inside a name
 *      or a symlink text and a name over 1024 bytes (GARBAGE_ARGS), and the
 *      name before the NUL is not made;
 *   6. handles of the other server's export are refused and give none of its
 *      data;
 * and through libnfs with AUTH_SYS uid 1000 that:
 *   7. uid 1000 can neither write, truncate, chmod nor remove root's 0644
 *      file; a file it creates is its own (over NFS and on disk); a
 *      supplementary group opens a group directory, its absence does not;
 *      ACCESS answers each time as the operation then does;
 *   8. with root_squash and anonuid/anongid 4321, root's new file is
 *      4321:4321 (skipped while the server has no --clients option);
 * and last:
 *   9. a snapshot of OUTSIDE (names, modes, sizes, contents, mtimes) taken
 *      before the first test equals one taken after the others.
 *
 * Servers are stopped by pid and the temp dir removed in the group teardown.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* libnfs.h first: it defines what the raw header uses */
#include <nfsc/libnfs.h>

#include <nfsc/libnfs-raw.h>

#include "rawrpc.h"
#include "start_server.h"

#define NFS_PROG   100003
#define SECRET	   "the secret outside the export\n"
#define ROOT_TEXT  "root's file\n"
#define ANON_ID	   4321
#define SNAP_MAX   (64 * 1024)
#define NAME_LONG  256	/* one over NAME_MAX */
#define NAME_XDR   1025 /* one over filename3<1024> */
#define FATTR_SIZE 84

/* nfsstat3 values (RFC 1813) */
enum {
	OK = 0,
	ERR_PERM = 1,
	ERR_NOENT = 2,
	ERR_ACCES = 13,
	ERR_EXIST = 17,
	ERR_NOTDIR = 20,
	ERR_INVAL = 22,
	ERR_NAMETOOLONG = 63,
	ERR_STALE = 70,
	ERR_BADHANDLE = 10001,
};

/* NFSv3 procedures */
enum {
	P_GETATTR = 1,
	P_SETATTR = 2,
	P_LOOKUP = 3,
	P_READLINK = 5,
	P_READ = 6,
	P_WRITE = 7,
	P_CREATE = 8,
	P_MKDIR = 9,
	P_SYMLINK = 10,
	P_REMOVE = 12,
	P_RMDIR = 13,
	P_RENAME = 14,
	P_LINK = 15,
	P_READDIR = 16,
};

#define NF3LNK 5

struct rfh {
	uint32_t len;
	unsigned char d[64];
};

/* What a reply says, decoded as far as these tests need. */
struct res {
	int accept; /* accept_stat; -1: no reply */
	int status; /* nfsstat3, with accept 0 */
	struct rfh fh;
	bool attrs;
	uint32_t type, mode, uid, gid;
	uint64_t size, fileid;
	char text[4200]; /* READLINK */
	size_t textlen;
};

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	char outside[PATH_MAX + 16];
	struct test_server a, b;
	int fd; /* raw TCP connection to server A */
	struct rfh root, b_root, b_file;
	char snap[SNAP_MAX];
} g;

/* ---- the tree ---- */

static void put(const char *path, const char *text, mode_t mode, uid_t uid, gid_t gid)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchown(fd, uid, gid), 0);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void dir(const char *path, mode_t mode, uid_t uid, gid_t gid)
{
	assert_int_equal(mkdir(path, mode), 0);
	assert_int_equal(chown(path, uid, gid), 0);
	assert_int_equal(chmod(path, mode), 0);
}

static void sym(const char *target, const char *path)
{
	assert_int_equal(symlink(target, path), 0);
}

static char *tpath(char *buf, const char *fmt, ...)
{
	size_t n = strlen(g.tmp);
	va_list ap;

	/* g.tmp is short: mkdtemp of a fixed 19-byte template */
	memcpy(buf, g.tmp, n);
	buf[n] = '/';
	va_start(ap, fmt);
	vsnprintf(buf + n + 1, PATH_MAX - n - 1, fmt, ap);
	va_end(ap);
	return buf;
}

static void make_tree(void)
{
	char p[PATH_MAX], t[PATH_MAX];

	dir(tpath(p, "outside"), 0755, 0, 0);
	snprintf(g.outside, sizeof(g.outside), "%s", p);
	put(tpath(p, "outside/secret.txt"), SECRET, 0600, 0, 0);
	put(tpath(p, "outside/world.txt"), "world\n", 0666, 0, 0);
	dir(tpath(p, "outside/sub"), 0777, 0, 0);
	for (const char *d = "lower\0upper\0work\0"; *d; d += strlen(d) + 1)
		dir(tpath(p, "%s", d), 0755, 0, 0);
	put(tpath(p, "lower/root644.txt"), ROOT_TEXT, 0644, 0, 0);
	dir(tpath(p, "lower/pub"), 0777, 0, 0);
	dir(tpath(p, "lower/grp"), 0770, 0, 2000);
	dir(tpath(p, "lower/pub/deep"), 0755, 0, 0);
	sym(tpath(t, "outside/secret.txt"), tpath(p, "lower/abs"));
	sym("../outside/secret.txt", tpath(p, "lower/rel"));
	sym("../../../../../../../../../../etc/passwd", tpath(p, "lower/pub/deep/far"));
	sym("/etc/shadow", tpath(p, "lower/shadow"));
	sym(tpath(t, "outside"), tpath(p, "lower/dirlink"));
	sym("../outside/sub", tpath(p, "lower/reldir"));
	sym(tpath(t, "outside/new.txt"), tpath(p, "lower/dangle"));
	/* the other server's union */
	for (const char *d = "b_lower\0b_state\0"; *d; d += strlen(d) + 1)
		dir(tpath(p, "%s", d), 0755, 0, 0);
	put(tpath(p, "b_lower/b.txt"), "only server B has this\n", 0644, 0, 0);
}

/* ---- the snapshot of OUTSIDE ---- */

static size_t snap_len;

static int snap_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	char buf[256] = "";
	size_t left = SNAP_MAX - snap_len;
	int fd, n;

	(void)flag;
	(void)ftw;
	if (S_ISREG(st->st_mode) && (fd = open(path, O_RDONLY)) >= 0) {
		n = (int)read(fd, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = '\0';
		close(fd);
	}
	n = snprintf(g.snap + snap_len, left, "%s %o %u:%u %lld %lld.%09ld [%s]\n", path,
		     (unsigned)st->st_mode, (unsigned)st->st_uid, (unsigned)st->st_gid,
		     (long long)st->st_size, (long long)st->st_mtim.tv_sec,
		     st->st_mtim.tv_nsec, buf);
	if (n < 0 || (size_t)n >= left)
		return 1;
	snap_len += (size_t)n;
	return 0;
}

/* The snapshot of OUTSIDE as text into g.snap; 0 or -1. */
static int snapshot(void)
{
	snap_len = 0;
	g.snap[0] = '\0';
	return nftw(g.outside, snap_one, 16, FTW_PHYS) ? -1 : 0;
}

/* ---- raw calls ---- */

static void put32(unsigned char **p, uint32_t v)
{
	(*p)[0] = (unsigned char)(v >> 24);
	(*p)[1] = (unsigned char)(v >> 16);
	(*p)[2] = (unsigned char)(v >> 8);
	(*p)[3] = (unsigned char)v;
	*p += 4;
}

static void put64(unsigned char **p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p, (uint32_t)v);
}

/* Counted bytes, padded: a name may hold a NUL here. */
static void putb(unsigned char **p, const void *data, size_t len)
{
	put32(p, (uint32_t)len);
	memcpy(*p, data, len);
	memset(*p + len, 0, (4 - len % 4) % 4);
	*p += (len + 3) & ~(size_t)3;
}

static void putfh(unsigned char **p, const struct rfh *f)
{
	putb(p, f->d, f->len);
}

static void putname(unsigned char **p, const struct rfh *dirfh, const char *name,
		    size_t len)
{
	putfh(p, dirfh);
	putb(p, name, len);
}

/* sattr3 setting MODE (or nothing for (uint32_t)-1) and SIZE (or nothing
 * for UINT64_MAX). */
static void putsattr(unsigned char **p, uint32_t mode, uint64_t size)
{
	put32(p, mode != (uint32_t)-1);
	if (mode != (uint32_t)-1)
		put32(p, mode);
	put32(p, 0); /* uid */
	put32(p, 0); /* gid */
	put32(p, size != UINT64_MAX);
	if (size != UINT64_MAX)
		put64(p, size);
	put32(p, 0); /* atime: DONT_CHANGE */
	put32(p, 0); /* mtime */
}

struct rd {
	const unsigned char *p;
	size_t left;
	bool bad;
};

static uint32_t get32(struct rd *r)
{
	uint32_t v;

	if (r->left < 4) {
		r->bad = true;
		return 0;
	}
	v = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 |
	    r->p[3];
	r->p += 4;
	r->left -= 4;
	return v;
}

static uint64_t get64(struct rd *r)
{
	uint64_t hi = get32(r);

	return hi << 32 | get32(r);
}

static void getbytes(struct rd *r, void *out, size_t cap, size_t *len)
{
	uint32_t n = get32(r);
	size_t padded = ((size_t)n + 3) & ~(size_t)3;

	if (r->bad || n > cap || padded > r->left) {
		r->bad = true;
		return;
	}
	memcpy(out, r->p, n);
	*len = n;
	r->p += padded;
	r->left -= padded;
}

static void getfattr(struct rd *r, struct res *o)
{
	o->attrs = true;
	o->type = get32(r);
	o->mode = get32(r);
	get32(r); /* nlink */
	o->uid = get32(r);
	o->gid = get32(r);
	o->size = get64(r);
	get64(r); /* used */
	get64(r); /* rdev */
	get64(r); /* fsid */
	o->fileid = get64(r);
	for (int i = 0; i < 3; i++)
		get64(r);
}

static void getpostop(struct rd *r, struct res *o)
{
	if (get32(r))
		getfattr(r, o);
}

/* Decodes what PROC's successful result holds that the tests look at. */
static void decode_ok(uint32_t proc, struct rd *r, struct res *o)
{
	size_t len = 0;

	switch (proc) {
	case P_GETATTR:
		getfattr(r, o);
		break;
	case P_LOOKUP:
		getbytes(r, o->fh.d, sizeof(o->fh.d), &len);
		o->fh.len = (uint32_t)len;
		getpostop(r, o);
		break;
	case P_READLINK:
		getpostop(r, o);
		getbytes(r, o->text, sizeof(o->text) - 1, &o->textlen);
		o->text[o->textlen] = '\0';
		break;
	case P_READ:
		getpostop(r, o);
		get32(r); /* count */
		get32(r); /* eof */
		getbytes(r, o->text, sizeof(o->text) - 1, &o->textlen);
		o->text[o->textlen] = '\0';
		break;
	default:
		break;
	}
}

/* Sends NFSv3 procedure PROC with ARGS[0..len) to server A as root. */
static struct res call(uint32_t proc, const unsigned char *args, size_t len)
{
	struct raw_call c = {.xid = 0x636f6e00u ^ (uint32_t)rand(),
			     .rpcvers = 2,
			     .prog = NFS_PROG,
			     .vers = 3,
			     .proc = proc,
			     .flavor = 1,
			     .args = args,
			     .arglen = len};
	struct raw_reply r;
	struct res o = {.accept = -1, .status = -1};
	struct rd rd;

	if (raw_call(g.fd, RAW_TCP, &c, &r))
		return o;
	o.accept = r.reply_stat == RAW_ACCEPTED ? r.accept_stat : 100 + r.reject_stat;
	if (o.accept == RAW_SUCCESS) {
		rd = (struct rd){.p = r.body, .left = r.bodylen};
		o.status = (int)get32(&rd);
		if (o.status == OK)
			decode_ok(proc, &rd, &o);
		if (rd.bad)
			o.accept = -2;
	}
	raw_reply_free(&r);
	return o;
}

static unsigned char argbuf[8192];

static struct res lookup_n(const struct rfh *d, const char *name, size_t len)
{
	unsigned char *p = argbuf;

	putname(&p, d, name, len);
	return call(P_LOOKUP, argbuf, (size_t)(p - argbuf));
}

static struct res lookup(const struct rfh *d, const char *name)
{
	return lookup_n(d, name, strlen(name));
}

static struct rfh fh_of(const struct rfh *d, const char *name)
{
	struct res r = lookup(d, name);

	assert_int_equal(r.accept, 0);
	assert_int_equal(r.status, OK);
	return r.fh;
}

static struct res on_fh(uint32_t proc, const struct rfh *f)
{
	unsigned char *p = argbuf;

	putfh(&p, f);
	if (proc == P_READ) {
		put64(&p, 0);
		put32(&p, 4096);
	} else if (proc == P_WRITE) {
		put64(&p, 0);
		put32(&p, 4);
		put32(&p, 2); /* FILE_SYNC */
		putb(&p, "evil", 4);
	} else if (proc == P_READDIR) {
		put64(&p, 0);
		put64(&p, 0);
		put32(&p, 4096);
	}
	return call(proc, argbuf, (size_t)(p - argbuf));
}

static struct res setattr(const struct rfh *f, uint32_t mode, uint64_t size)
{
	unsigned char *p = argbuf;

	putfh(&p, f);
	putsattr(&p, mode, size);
	put32(&p, 0); /* no guard */
	return call(P_SETATTR, argbuf, (size_t)(p - argbuf));
}

/* CREATE UNCHECKED (truncating to 0 when TRUNC) of NAME[0..len) in D. */
static struct res create_n(const struct rfh *d, const char *name, size_t len, bool trunc)
{
	unsigned char *p = argbuf;

	putname(&p, d, name, len);
	put32(&p, 0); /* UNCHECKED */
	putsattr(&p, 0644, trunc ? 0 : UINT64_MAX);
	return call(P_CREATE, argbuf, (size_t)(p - argbuf));
}

static struct res create(const struct rfh *d, const char *name, bool trunc)
{
	return create_n(d, name, strlen(name), trunc);
}

static struct res mkdir_n(const struct rfh *d, const char *name, size_t len)
{
	unsigned char *p = argbuf;

	putname(&p, d, name, len);
	putsattr(&p, 0755, UINT64_MAX);
	return call(P_MKDIR, argbuf, (size_t)(p - argbuf));
}

static struct res symlink_n(const struct rfh *d, const char *name, size_t len,
			    const char *target, size_t tlen)
{
	unsigned char *p = argbuf;

	putname(&p, d, name, len);
	putsattr(&p, (uint32_t)-1, UINT64_MAX);
	putb(&p, target, tlen);
	return call(P_SYMLINK, argbuf, (size_t)(p - argbuf));
}

static struct res dirop(uint32_t proc, const struct rfh *d, const char *name, size_t len)
{
	unsigned char *p = argbuf;

	putname(&p, d, name, len);
	return call(proc, argbuf, (size_t)(p - argbuf));
}

static struct res rename_n(const struct rfh *fd, const char *from, const struct rfh *td,
			   const char *to, size_t tolen)
{
	unsigned char *p = argbuf;

	putname(&p, fd, from, strlen(from));
	putname(&p, td, to, tolen);
	return call(P_RENAME, argbuf, (size_t)(p - argbuf));
}

static struct res link_n(const struct rfh *f, const struct rfh *d, const char *name,
			 size_t len)
{
	unsigned char *p = argbuf;

	putfh(&p, f);
	putname(&p, d, name, len);
	return call(P_LINK, argbuf, (size_t)(p - argbuf));
}

static void assert_status(struct res r, int status)
{
	if (r.accept != 0 || r.status != status)
		fprintf(stderr, "accept %d status %d, want status %d\n", r.accept,
			r.status, status);
	assert_int_equal(r.accept, 0);
	assert_int_equal(r.status, status);
}

static void assert_garbage(struct res r)
{
	assert_int_equal(r.accept, RAW_GARBAGE_ARGS);
}

/* ---- set-up ---- */

static int start(struct test_server *s, const char *state, const char *const *args)
{
	char st[PATH_MAX];

	tpath(st, "%s", state);
	return test_server_start(g.bin, st, args, s);
}

static int mnt(struct test_server *s, struct rfh *root)
{
	int fd = raw_connect(RAW_TCP, s->mount_port), st;

	if (fd < 0)
		return -1;
	st = raw_mnt(fd, RAW_TCP, "/", root->d, &root->len);
	close(fd);
	return st;
}

static int group_setup(void **state)
{
	char lo[PATH_MAX + 16], up[PATH_MAX + 16], wk[PATH_MAX + 16], blo[PATH_MAX + 16];
	char p[PATH_MAX];
	const char *a_args[] = {lo, up, wk, NULL}, *b_args[] = {blo, NULL};

	(void)state;
	snprintf(g.tmp, sizeof(g.tmp), "/tmp/contain.XXXXXX");
	if (!mkdtemp(g.tmp))
		return -1;
	assert_int_equal(chmod(g.tmp, 0755), 0);
	make_tree();
	if (snapshot())
		return -1;
	snprintf(lo, sizeof(lo), "--lowerdir=%s", tpath(p, "lower"));
	snprintf(up, sizeof(up), "--upperdir=%s", tpath(p, "upper"));
	snprintf(wk, sizeof(wk), "--workdir=%s", tpath(p, "work"));
	snprintf(blo, sizeof(blo), "--lowerdir=%s", tpath(p, "b_lower"));
	if (start(&g.a, "a_state", a_args) || start(&g.b, "b_state", b_args))
		return -1;
	if (mnt(&g.a, &g.root) != 0 || mnt(&g.b, &g.b_root) != 0)
		return -1;
	g.fd = raw_connect(RAW_TCP, g.a.nfs_port);
	return g.fd < 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (g.fd > 0)
		close(g.fd);
	test_server_stop(&g.a);
	test_server_stop(&g.b);
	if (g.tmp[0])
		test_tree_remove(g.tmp);
	return 0;
}

/* ---- 1-3: symlinks ---- */

static void check_link(const char *name, const char *target)
{
	struct res r = lookup(&g.root, name);
	struct rfh f;

	assert_status(r, OK);
	assert_true(r.attrs);
	assert_int_equal(r.type, NF3LNK);
	assert_int_equal(r.size, strlen(target)); /* the link's, not the target's */
	f = r.fh;
	r = on_fh(P_READLINK, &f);
	assert_status(r, OK);
	assert_string_equal(r.text, target);
	r = on_fh(P_GETATTR, &f);
	assert_status(r, OK);
	assert_int_equal(r.type, NF3LNK);
	assert_status(on_fh(P_READ, &f), ERR_INVAL);
	assert_status(on_fh(P_WRITE, &f), ERR_INVAL);
	assert_status(setattr(&f, UINT32_MAX, 0), ERR_INVAL);
	assert_status(setattr(&f, 0777, UINT64_MAX), OK); /* ignored, as knfsd */
}

static void test_symlinks_returned(void **state)
{
	char t[PATH_MAX];
	struct rfh pub, deep;
	struct res r;

	(void)state;
	check_link("abs", tpath(t, "outside/secret.txt"));
	check_link("rel", "../outside/secret.txt");
	check_link("shadow", "/etc/shadow");
	check_link("dangle", tpath(t, "outside/new.txt"));
	pub = fh_of(&g.root, "pub");
	deep = fh_of(&pub, "deep");
	r = lookup(&deep, "far");
	assert_status(r, OK);
	assert_int_equal(r.type, NF3LNK);
}

static void test_dir_links_no_dirs(void **state)
{
	const char *links[] = {"dirlink", "reldir"};
	struct rfh f;

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		f = fh_of(&g.root, links[i]);
		assert_status(lookup(&f, "secret.txt"), ERR_NOTDIR);
		assert_status(create(&f, "planted.txt", false), ERR_NOTDIR);
		assert_status(mkdir_n(&f, "planted", 7), ERR_NOTDIR);
		assert_status(dirop(P_REMOVE, &f, "world.txt", 9), ERR_NOTDIR);
		assert_status(rename_n(&f, "world.txt", &g.root, "stolen", 6),
			      ERR_NOTDIR);
		assert_status(on_fh(P_READDIR, &f), ERR_NOTDIR);
	}
}

static void test_create_over_links(void **state)
{
	char p[PATH_MAX];
	struct rfh f;
	struct res r;

	(void)state;
	/* UNCHECKED over a symlink: no open through it, nothing truncated */
	assert_status(create(&g.root, "abs", true), ERR_EXIST);
	assert_status(create(&g.root, "dangle", false), ERR_EXIST);
	assert_status(mkdir_n(&g.root, "dangle", 6), ERR_EXIST);
	assert_int_equal(access(tpath(p, "outside/new.txt"), F_OK), -1);
	/* a symlink may be made, and is returned as made */
	assert_status(symlink_n(&g.root, "mine", 4, "/etc/shadow", 11), OK);
	r = lookup(&g.root, "mine");
	assert_status(r, OK);
	assert_int_equal(r.type, NF3LNK);
	/* LINK of a symlink names the symlink */
	f = fh_of(&g.root, "abs");
	assert_status(link_n(&f, &g.root, "abs2", 4), OK);
	r = lookup(&g.root, "abs2");
	assert_status(r, OK);
	assert_int_equal(r.type, NF3LNK);
	assert_int_equal(r.size, strlen(tpath(p, "outside/secret.txt")));
}

/* ---- 4: ".." ---- */

static void test_dotdot_at_root(void **state)
{
	struct res root = on_fh(P_GETATTR, &g.root), r;
	struct rfh pub;
	unsigned char fh[64];
	uint32_t fhlen;
	int fd;

	(void)state;
	assert_status(root, OK);
	r = lookup(&g.root, "..");
	assert_status(r, OK);
	assert_int_equal(r.fileid, root.fileid);
	r = lookup(&r.fh, "..");
	assert_status(r, OK);
	assert_int_equal(r.fileid, root.fileid);
	pub = fh_of(&g.root, "pub");
	r = lookup(&pub, "..");
	assert_status(r, OK);
	assert_int_equal(r.fileid, root.fileid);
	fd = raw_connect(RAW_TCP, g.a.mount_port);
	assert_true(fd >= 0);
	assert_true(raw_mnt(fd, RAW_TCP, "/..", fh, &fhlen) != 0);
	assert_true(raw_mnt(fd, RAW_TCP, "/pub/../..", fh, &fhlen) != 0);
	assert_true(raw_mnt(fd, RAW_TCP, "/dirlink", fh, &fhlen) != 0);
	close(fd);
}

/* ---- 5: names ---- */

static void test_malformed_names(void **state)
{
	char longname[NAME_XDR + 1];
	struct rfh pub = fh_of(&g.root, "pub"), f = fh_of(&g.root, "root644.txt");

	(void)state;
	memset(longname, 'n', sizeof(longname));
	/* '/' and empty: ACCES, for every procedure taking a name */
	assert_status(lookup(&g.root, "pub/deep"), ERR_ACCES);
	assert_status(lookup(&g.root, ""), ERR_ACCES);
	assert_status(create(&pub, "../escape", false), ERR_ACCES);
	assert_status(create(&pub, "", false), ERR_ACCES);
	assert_status(mkdir_n(&pub, "a/b", 3), ERR_ACCES);
	assert_status(symlink_n(&pub, "../x", 4, "t", 1), ERR_ACCES);
	assert_status(dirop(P_REMOVE, &g.root, "pub/deep", 8), ERR_ACCES);
	assert_status(dirop(P_RMDIR, &g.root, "pub/deep", 8), ERR_ACCES);
	assert_status(rename_n(&g.root, "root644.txt", &pub, "../x", 4), ERR_ACCES);
	assert_status(link_n(&f, &pub, "a/b", 3), ERR_ACCES);
	/* over NAME_MAX */
	assert_status(lookup_n(&g.root, longname, NAME_LONG), ERR_NAMETOOLONG);
	assert_status(create_n(&pub, longname, NAME_LONG, false), ERR_NAMETOOLONG);
	assert_status(mkdir_n(&pub, longname, NAME_LONG), ERR_NAMETOOLONG);
	/* "." and ".." where they cannot be */
	assert_status(create(&pub, ".", false), ERR_EXIST);
	assert_status(create(&pub, "..", false), ERR_EXIST);
	assert_status(mkdir_n(&pub, "..", 2), ERR_EXIST);
	assert_status(symlink_n(&pub, ".", 1, "t", 1), ERR_EXIST);
	assert_status(link_n(&f, &pub, "..", 2), ERR_EXIST);
	assert_status(dirop(P_REMOVE, &pub, "..", 2), ERR_ACCES);
	assert_status(dirop(P_RMDIR, &pub, ".", 1), ERR_INVAL);
	assert_status(dirop(P_RMDIR, &pub, "..", 2), ERR_INVAL);
	assert_status(rename_n(&pub, "deep", &pub, "..", 2), ERR_INVAL);
	/* a NUL inside a name or a symlink text, and over filename3's bound:
	 * refused before anything runs */
	assert_garbage(lookup_n(&g.root, "abs\0/etc/shadow", 15));
	assert_garbage(create_n(&pub, "cut\0tail", 8, false));
	assert_garbage(mkdir_n(&pub, "cut\0tail", 8));
	assert_garbage(symlink_n(&pub, "cut", 3, "/etc\0/shadow", 12));
	assert_garbage(dirop(P_REMOVE, &g.root, "root644.txt\0x", 13));
	assert_garbage(lookup_n(&g.root, longname, NAME_XDR));
	assert_status(lookup(&pub, "cut"), ERR_NOENT);
	assert_status(lookup(&g.root, "root644.txt"), OK);
	/* the connection is still served */
	assert_status(on_fh(P_GETATTR, &g.root), OK);
}

/* ---- 6: another export's handles ---- */

static void test_foreign_handles(void **state)
{
	int fd = raw_connect(RAW_TCP, g.b.nfs_port), saved = g.fd;
	struct rfh bf;
	struct res r;

	(void)state;
	assert_true(fd >= 0);
	g.fd = fd; /* server B */
	bf = fh_of(&g.b_root, "b.txt");
	g.fd = saved;
	close(fd);
	for (int i = 0; i < 2; i++) {
		const struct rfh *h = i ? &bf : &g.b_root;

		r = on_fh(P_GETATTR, h);
		assert_int_equal(r.accept, 0);
		assert_true(r.status == ERR_BADHANDLE || r.status == ERR_STALE);
		r = on_fh(P_READ, h);
		assert_int_equal(r.accept, 0);
		assert_true(r.status == ERR_BADHANDLE || r.status == ERR_STALE);
		r = lookup(h, "b.txt");
		assert_true(r.status == ERR_BADHANDLE || r.status == ERR_STALE);
		r = create(h, "planted", false);
		assert_true(r.status == ERR_BADHANDLE || r.status == ERR_STALE);
	}
}

/* ---- 7, 8: identities through libnfs ---- */

/* A libnfs context mounted on server S's export as UID:GID. */
static struct nfs_context *as_user(const struct test_server *s, int uid, int gid)
{
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *url;
	char u[256];

	assert_non_null(nfs);
	nfs_set_dircache(nfs, 0);
	nfs_set_timeout(nfs, 5000);
	snprintf(u, sizeof(u), "nfs://127.0.0.1/?version=3&nfsport=%d&mountport=%d",
		 s->nfs_port, s->mount_port);
	url = nfs_parse_url_dir(nfs, u);
	assert_non_null(url);
	nfs_set_uid(nfs, uid);
	nfs_set_gid(nfs, gid);
	if (nfs_mount(nfs, url->server, url->path))
		fprintf(stderr, "mount: %s\n", nfs_get_error(nfs));
	nfs_destroy_url(url);
	return nfs;
}

/* Sets NFS's AUTH_SYS to UID:GID with the NGROUPS GROUPS. */
static void set_auth(struct nfs_context *nfs, uint32_t uid, uint32_t gid,
		     uint32_t ngroups, uint32_t *groups)
{
	rpc_set_auth(nfs_get_rpc_context(nfs),
		     libnfs_authunix_create("contain", uid, gid, ngroups, groups));
}

static void assert_root_file_intact(void)
{
	char p[PATH_MAX], buf[64] = "";
	struct stat st;
	int fd;

	assert_int_equal(stat(tpath(p, "lower/root644.txt"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	assert_true(read(fd, buf, sizeof(buf) - 1) > 0);
	close(fd);
	assert_string_equal(buf, ROOT_TEXT);
	/* and no copy of it was made in the upper layer */
	assert_int_equal(access(tpath(p, "upper/root644.txt"), F_OK), -1);
}

static void test_uid1000(void **state)
{
	struct nfs_context *nfs = as_user(&g.a, 1000, 1000);
	struct nfsfh *fh = NULL;
	struct nfs_stat_64 st;
	struct stat dst;
	uint32_t grp = 2000;
	char p[PATH_MAX];

	(void)state;
	/* root's 0644 file: readable, not writable, and ACCESS says so */
	assert_int_equal(nfs_access(nfs, "/root644.txt", R_OK), 0);
	assert_true(nfs_access(nfs, "/root644.txt", W_OK) < 0);
	assert_true(nfs_access(nfs, "/grp", W_OK) < 0);
	if (nfs_open(nfs, "/root644.txt", O_WRONLY, &fh) == 0) {
		assert_true(nfs_write(nfs, fh, 4, "evil") < 0);
		nfs_close(nfs, fh);
	}
	assert_true(nfs_truncate(nfs, "/root644.txt", 0) < 0);
	assert_true(nfs_chmod(nfs, "/root644.txt", 0666) < 0);
	assert_true(nfs_chown(nfs, "/root644.txt", 1000, 1000) < 0);
	assert_true(nfs_unlink(nfs, "/root644.txt") < 0);
	assert_true(nfs_creat(nfs, "/planted.txt", 0644, &fh) < 0);
	assert_root_file_intact();
	/* its own new file */
	assert_int_equal(nfs_creat(nfs, "/pub/mine.txt", 0640, &fh), 0);
	assert_int_equal(nfs_write(nfs, fh, 5, "mine\n"), 5);
	nfs_close(nfs, fh);
	assert_int_equal(nfs_stat64(nfs, "/pub/mine.txt", &st), 0);
	assert_int_equal(st.nfs_uid, 1000);
	assert_int_equal(st.nfs_gid, 1000);
	assert_int_equal(stat(tpath(p, "upper/pub/mine.txt"), &dst), 0);
	assert_int_equal(dst.st_uid, 1000);
	assert_int_equal(dst.st_gid, 1000);
	assert_int_equal(nfs_access(nfs, "/pub/mine.txt", R_OK | W_OK), 0);
	assert_int_equal(nfs_mkdir(nfs, "/pub/mydir"), 0);
	assert_int_equal(stat(tpath(p, "upper/pub/mydir"), &dst), 0);
	assert_int_equal(dst.st_uid, 1000);
	/* a group directory: only with the group among the supplementary ones */
	assert_true(nfs_creat(nfs, "/grp/nogroup.txt", 0644, &fh) < 0);
	set_auth(nfs, 1000, 1000, 1, &grp);
	assert_int_equal(nfs_access(nfs, "/grp", R_OK | W_OK | X_OK), 0);
	assert_int_equal(nfs_creat(nfs, "/grp/group.txt", 0644, &fh), 0);
	nfs_close(nfs, fh);
	assert_int_equal(stat(tpath(p, "upper/grp/group.txt"), &dst), 0);
	assert_int_equal(dst.st_uid, 1000);
	assert_int_equal(access(tpath(p, "upper/grp/nogroup.txt"), F_OK), -1);
	nfs_destroy_context(nfs);
}

static void test_root_squash(void **state)
{
	char lo[PATH_MAX + 16], up[PATH_MAX + 16], wk[PATH_MAX + 16], p[PATH_MAX];
	char clients[128];
	const char *args[] = {lo, up, wk, clients, NULL};
	struct test_server c = {0};
	struct nfs_context *nfs;
	struct nfsfh *fh;
	struct stat st;

	(void)state;
	snprintf(clients, sizeof(clients),
		 "--clients=127.0.0.0/8(rw,root_squash,insecure,anonuid=%d,anongid=%d)",
		 ANON_ID, ANON_ID);
	for (const char *d = "c_lower\0c_upper\0c_work\0"; *d; d += strlen(d) + 1)
		dir(tpath(p, "%s", d), 0777, 0, 0);
	snprintf(lo, sizeof(lo), "--lowerdir=%s", tpath(p, "c_lower"));
	snprintf(up, sizeof(up), "--upperdir=%s", tpath(p, "c_upper"));
	snprintf(wk, sizeof(wk), "--workdir=%s", tpath(p, "c_work"));
	if (start(&c, "c_state", args)) {
		skip(); /* no --clients yet: squashing is another change's */
		return;
	}
	nfs = as_user(&c, 0, 0);
	assert_int_equal(nfs_creat(nfs, "/squashed.txt", 0644, &fh), 0);
	nfs_close(nfs, fh);
	nfs_destroy_context(nfs);
	test_server_stop(&c);
	assert_int_equal(stat(tpath(p, "c_upper/squashed.txt"), &st), 0);
	assert_int_equal(st.st_uid, ANON_ID);
	assert_int_equal(st.st_gid, ANON_ID);
}

/* ---- 9: nothing outside changed ---- */

static void test_outside_unchanged(void **state)
{
	char before[SNAP_MAX];

	(void)state;
	memcpy(before, g.snap, sizeof(before));
	assert_int_equal(snapshot(), 0);
	assert_string_equal(g.snap, before);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_symlinks_returned),
	    cmocka_unit_test(test_dir_links_no_dirs),
	    cmocka_unit_test(test_create_over_links),
	    cmocka_unit_test(test_dotdot_at_root),
	    cmocka_unit_test(test_malformed_names),
	    cmocka_unit_test(test_foreign_handles),
	    cmocka_unit_test(test_uid1000),
	    cmocka_unit_test(test_root_squash),
	    cmocka_unit_test(test_outside_unchanged),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: test_contain UNION_NFSD\n");
		return 2;
	}
	g.bin = argv[1];
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
