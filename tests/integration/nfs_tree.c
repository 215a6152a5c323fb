/* SPDX-License-Identifier: Apache-2.0 */
/* nfs_tree - print a directory tree as sorted lines, read over NFS or locally.
 *
 *   nfs_tree --nfs 'nfs://127.0.0.1/EXPORT?nfsport=P&mountport=M&version=3'
 *   nfs_tree --local DIR
 *
 * One line per object, sorted by path (bytewise):
 *
 *   PATH TYPE MODE SIZE DATA LINK
 *
 *   PATH  "/" for the root, "/a/b" below it; bytes <= 0x20, 0x7f and '\' are
 *         written as \ooo, so a line is always one object.
 *   TYPE  f d l c b p s
 *   MODE  the permission bits in octal (07777)
 *   SIZE  bytes for files and symlinks; "-" for directories (their sizes differ
 *         from one filesystem to another) and special files
 *   DATA  sha256 of a file's content or of a symlink's target; "MAJ:MIN" for
 *         devices; "-" otherwise
 *   LINK  for a non-directory that shares its inode number (fileid) with another
 *         object of the tree: the smallest such path ("=PATH"); else "-"
 *
 * The same program reads both sides of a comparison, so a difference in the output
 * comes from the servers, never from two ways of printing.  In NFS mode it also
 * checks what a single listing cannot show: the attributes READDIRPLUS returned for
 * each entry agree with GETATTR (type, mode, size, fileid), and a file reads exactly
 * its size.  Disagreements go to stderr and make the exit status 1.
 *
 * Exit status: 0 the tree was printed, 1 a read failed or a check disagreed
 * (the tree is still printed, as far as it could be read), 2 bad usage.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <nfsc/libnfs.h>

#include "it_util.h"
#include <sodium.h>

#define BUFSZ (1024 * 1024)

/* What the tree walk needs from a filesystem: the POSIX and libnfs backends
 * each fill one of these. */
struct attrs {
	uint32_t mode; /* S_IFMT | permission bits */
	uint64_t size;
	uint64_t ino;
	uint64_t rdev_major, rdev_minor;
};

/* A directory entry with the attributes the listing itself carried (READDIRPLUS),
 * if any, so they can be checked against GETATTR. */
struct dent {
	char *name;
	bool has_attrs;
	struct attrs attrs;
};

struct backend {
	int (*list)(void *ctx, const char *path, struct dent **out, size_t *n);
	int (*lstat)(void *ctx, const char *path, struct attrs *a);
	int (*hash_file)(void *ctx, const char *path, uint64_t *nread, char hex[65]);
	int (*readlink)(void *ctx, const char *path, char **target);
	void *ctx;
};

struct obj {
	char *path;
	struct attrs a;
	char data[80];
};

static struct obj *objs;
static size_t nobjs, capobjs;
static int status;

static void complain(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "nfs_tree: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	status = 1;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		perror("nfs_tree: malloc");
		exit(1);
	}
	return p;
}

static char *join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	bool root = dl == 1 && dir[0] == '/';
	char *p = xmalloc(dl + nl + 2);
	memcpy(p, dir, dl);
	if (!root)
		p[dl++] = '/';
	memcpy(p + dl, name, nl + 1);
	return p;
}

static void to_hex(const unsigned char md[crypto_hash_sha256_BYTES], char hex[65])
{
	sodium_bin2hex(hex, 65, md, crypto_hash_sha256_BYTES);
}

/* ---- local backend: POSIX calls on DIR ---- */

struct local_ctx {
	const char *root;
};

static char *local_path(void *ctx, const char *path)
{
	const struct local_ctx *lc = ctx;
	return join(lc->root, path[1] ? path + 1 : ".");
}

static void attrs_from_stat(const struct stat *st, struct attrs *a)
{
	a->mode = st->st_mode;
	a->size = (uint64_t)st->st_size;
	a->ino = st->st_ino;
	a->rdev_major = major(st->st_rdev);
	a->rdev_minor = minor(st->st_rdev);
}

static int local_list(void *ctx, const char *path, struct dent **out, size_t *n)
{
	char *p = local_path(ctx, path);
	DIR *d = opendir(p);
	struct dent *v = NULL;
	size_t cnt = 0, cap = 0;
	struct dirent *de;
	int err = -errno;
	free(p);
	if (!d)
		return err;
	errno = 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (cnt == cap) {
			cap = cap ? 2 * cap : 64;
			v = realloc(v, cap * sizeof(*v));
			if (!v) {
				perror("nfs_tree: realloc");
				exit(1);
			}
		}
		v[cnt++] = (struct dent){.name = strdup(de->d_name)};
	}
	err = -errno;
	closedir(d);
	*out = v;
	*n = cnt;
	return err;
}

static int local_lstat(void *ctx, const char *path, struct attrs *a)
{
	char *p = local_path(ctx, path);
	struct stat st;
	int err = lstat(p, &st) ? -errno : 0;
	free(p);
	if (!err)
		attrs_from_stat(&st, a);
	return err;
}

static int local_hash_file(void *ctx, const char *path, uint64_t *nread, char hex[65])
{
	char *p = local_path(ctx, path);
	int fd = open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
	crypto_hash_sha256_state h;
	unsigned char md[crypto_hash_sha256_BYTES];
	unsigned char *buf = NULL;
	ssize_t r = 0;
	int err = -errno;
	free(p);
	if (fd < 0)
		return err;
	buf = xmalloc(BUFSZ);
	crypto_hash_sha256_init(&h);
	*nread = 0;
	while ((r = read(fd, buf, BUFSZ)) > 0) {
		crypto_hash_sha256_update(&h, buf, (size_t)r);
		*nread += (uint64_t)r;
	}
	err = r < 0 ? -errno : 0;
	crypto_hash_sha256_final(&h, md);
	to_hex(md, hex);
	free(buf);
	close(fd);
	return err;
}

static int local_readlink(void *ctx, const char *path, char **target)
{
	char *p = local_path(ctx, path);
	char *buf = xmalloc(PATH_MAX + 1);
	ssize_t n = readlink(p, buf, PATH_MAX);
	int err = -errno;
	free(p);
	if (n < 0) {
		free(buf);
		return err;
	}
	buf[n] = '\0';
	*target = buf;
	return 0;
}

/* ---- NFS backend: the libnfs sync API ---- */

static int nfs_err(struct nfs_context *nfs, const char *what, const char *path, int rc)
{
	fprintf(stderr, "nfs_tree: %s %s: %s\n", what, path, nfs_get_error(nfs));
	return rc < 0 ? rc : -EIO;
}

static void attrs_from_nfs(const struct nfs_stat_64 *st, struct attrs *a)
{
	a->mode = (uint32_t)st->nfs_mode;
	a->size = st->nfs_size;
	a->ino = st->nfs_ino;
	a->rdev_major = major(st->nfs_rdev);
	a->rdev_minor = minor(st->nfs_rdev);
}

static int nfs_list(void *ctx, const char *path, struct dent **out, size_t *n)
{
	struct nfs_context *nfs = ctx;
	struct nfsdir *d = NULL;
	struct nfsdirent *de;
	struct dent *v = NULL;
	size_t cnt = 0, cap = 0;
	int rc = nfs_opendir(nfs, path, &d);
	if (rc)
		return nfs_err(nfs, "opendir", path, rc);
	while ((de = nfs_readdir(nfs, d))) {
		if (!strcmp(de->name, ".") || !strcmp(de->name, ".."))
			continue;
		if (cnt == cap) {
			cap = cap ? 2 * cap : 64;
			v = realloc(v, cap * sizeof(*v));
			if (!v) {
				perror("nfs_tree: realloc");
				exit(1);
			}
		}
		/* libnfs fills mode/size from READDIRPLUS when the server sent
		 * attributes; a zero mode means it did not */
		v[cnt] =
		    (struct dent){.name = strdup(de->name), .has_attrs = de->mode != 0};
		v[cnt].attrs.mode = de->mode;
		v[cnt].attrs.size = de->size;
		v[cnt].attrs.ino = de->inode;
		cnt++;
	}
	nfs_closedir(nfs, d);
	*out = v;
	*n = cnt;
	return 0;
}

static int nfs_lstat_(void *ctx, const char *path, struct attrs *a)
{
	struct nfs_context *nfs = ctx;
	struct nfs_stat_64 st;
	int rc = nfs_lstat64(nfs, path, &st);
	if (rc)
		return nfs_err(nfs, "lstat", path, rc);
	attrs_from_nfs(&st, a);
	return 0;
}

static int nfs_hash_file(void *ctx, const char *path, uint64_t *nread, char hex[65])
{
	struct nfs_context *nfs = ctx;
	struct nfsfh *fh = NULL;
	crypto_hash_sha256_state h;
	unsigned char md[crypto_hash_sha256_BYTES];
	unsigned char *buf;
	int r = nfs_open(nfs, path, O_RDONLY, &fh);
	if (r)
		return nfs_err(nfs, "open", path, r);
	buf = xmalloc(BUFSZ);
	crypto_hash_sha256_init(&h);
	*nread = 0;
	while ((r = nfs_read(nfs, fh, BUFSZ, buf)) > 0) {
		crypto_hash_sha256_update(&h, buf, (size_t)r);
		*nread += (uint64_t)r;
	}
	if (r < 0)
		r = nfs_err(nfs, "read", path, r);
	crypto_hash_sha256_final(&h, md);
	to_hex(md, hex);
	free(buf);
	nfs_close(nfs, fh);
	return r;
}

static int nfs_readlink_(void *ctx, const char *path, char **target)
{
	struct nfs_context *nfs = ctx;
	char *buf = NULL;
	int rc = nfs_readlink2(nfs, path, &buf);
	if (rc)
		return nfs_err(nfs, "readlink", path, rc);
	*target = buf;
	return 0;
}

/* ---- the walk ---- */

static void add_obj(const char *path, const struct attrs *a, const char *data)
{
	if (nobjs == capobjs) {
		capobjs = capobjs ? 2 * capobjs : 1024;
		objs = realloc(objs, capobjs * sizeof(*objs));
		if (!objs) {
			perror("nfs_tree: realloc");
			exit(1);
		}
	}
	objs[nobjs].path = strdup(path);
	objs[nobjs].a = *a;
	snprintf(objs[nobjs].data, sizeof(objs[nobjs].data), "%s", data);
	nobjs++;
}

/* The content column of one non-directory. */
static void describe(const struct backend *be, const char *path, const struct attrs *a,
		     char data[80])
{
	char *target = NULL;
	uint64_t nread = 0;
	char hex[65];
	unsigned char md[crypto_hash_sha256_BYTES];

	strcpy(data, "-");
	switch (a->mode & S_IFMT) {
	case S_IFREG:
		if (be->hash_file(be->ctx, path, &nread, hex)) {
			complain("cannot read %s", path);
			strcpy(data, "UNREADABLE");
			return;
		}
		if (nread != a->size)
			complain("%s: read %" PRIu64 " bytes, size says %" PRIu64, path,
				 nread, a->size);
		strcpy(data, hex);
		break;
	case S_IFLNK:
		if (be->readlink(be->ctx, path, &target)) {
			complain("cannot readlink %s", path);
			strcpy(data, "UNREADABLE");
			return;
		}
		crypto_hash_sha256(md, (const unsigned char *)target, strlen(target));
		to_hex(md, data);
		if (strlen(target) != a->size)
			complain("%s: target has %zu bytes, size says %" PRIu64, path,
				 strlen(target), a->size);
		free(target);
		break;
	case S_IFCHR:
	case S_IFBLK:
		snprintf(data, 80, "%" PRIu64 ":%" PRIu64, a->rdev_major, a->rdev_minor);
		break;
	}
}

/* Listing attributes (READDIRPLUS) must agree with GETATTR. */
static void check_dent(const char *path, const struct dent *d, const struct attrs *a)
{
	if (!d->has_attrs)
		return;
	if (d->attrs.mode != a->mode)
		complain("%s: readdirplus mode 0%o, getattr 0%o", path, d->attrs.mode,
			 a->mode);
	if (!S_ISDIR(a->mode) && d->attrs.size != a->size)
		complain("%s: readdirplus size %" PRIu64 ", getattr %" PRIu64, path,
			 d->attrs.size, a->size);
	if (d->attrs.ino != a->ino)
		complain("%s: readdir fileid %" PRIu64 ", getattr %" PRIu64, path,
			 d->attrs.ino, a->ino);
}

static int cmp_dent(const void *x, const void *y)
{
	return strcmp(((const struct dent *)x)->name, ((const struct dent *)y)->name);
}

static void walk(const struct backend *be, const char *path, const struct attrs *self)
{
	struct dent *v = NULL;
	size_t n = 0;

	add_obj(path, self, "-");
	if (be->list(be->ctx, path, &v, &n)) {
		complain("cannot list %s", path);
		return;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_dent);
	for (size_t i = 0; i < n; i++) {
		char *p = join(path, v[i].name);
		struct attrs a;
		char data[80];
		if (i && !strcmp(v[i].name, v[i - 1].name))
			complain("%s listed twice", p);
		if (be->lstat(be->ctx, p, &a)) {
			complain("cannot stat %s", p);
		} else if (S_ISDIR(a.mode)) {
			check_dent(p, &v[i], &a);
			walk(be, p, &a);
		} else {
			check_dent(p, &v[i], &a);
			describe(be, p, &a, data);
			add_obj(p, &a, data);
		}
		free(p);
	}
	for (size_t i = 0; i < n; i++)
		free(v[i].name);
	free(v);
}

/* ---- output ---- */

static void print_path(const char *p)
{
	for (const unsigned char *c = (const unsigned char *)p; *c; c++) {
		if (*c <= 0x20 || *c == 0x7f || *c == '\\')
			printf("\\%03o", *c);
		else
			putchar(*c);
	}
}

static int cmp_obj_path(const void *x, const void *y)
{
	return strcmp(((const struct obj *)x)->path, ((const struct obj *)y)->path);
}

static int cmp_obj_ino(const void *x, const void *y)
{
	const struct obj *a = *(struct obj *const *)x, *b = *(struct obj *const *)y;
	if (a->a.ino != b->a.ino)
		return a->a.ino < b->a.ino ? -1 : 1;
	return strcmp(a->path, b->path);
}

/* For each group of non-directories sharing an inode number, the smallest path;
 * returned per object index, NULL when alone. */
static const char **link_groups(void)
{
	const char **first = calloc(nobjs ? nobjs : 1, sizeof(*first));
	struct obj **byino = xmalloc((nobjs ? nobjs : 1) * sizeof(*byino));
	size_t m = 0;
	for (size_t i = 0; i < nobjs; i++)
		if (!S_ISDIR(objs[i].a.mode))
			byino[m++] = &objs[i];
	qsort(byino, m, sizeof(*byino), cmp_obj_ino);
	for (size_t i = 0; i < m;) {
		size_t j = i + 1;
		while (j < m && byino[j]->a.ino == byino[i]->a.ino)
			j++;
		for (size_t k = i; j - i > 1 && k < j; k++)
			first[byino[k] - objs] = byino[i]->path;
		i = j;
	}
	free(byino);
	return first;
}

static void print_tree(void)
{
	const char **first;
	qsort(objs, nobjs, sizeof(*objs), cmp_obj_path);
	first = link_groups();
	for (size_t i = 0; i < nobjs; i++) {
		const struct obj *o = &objs[i];
		bool sized = S_ISREG(o->a.mode) || S_ISLNK(o->a.mode);
		print_path(o->path);
		printf(" %c %04o ", it_type_char(o->a.mode), o->a.mode & 07777);
		if (sized)
			printf("%" PRIu64, o->a.size);
		else
			putchar('-');
		printf(" %s ", o->data);
		if (first[i]) {
			putchar('=');
			print_path(first[i]);
		} else {
			putchar('-');
		}
		putchar('\n');
	}
	free(first);
}

static int usage(void)
{
	fprintf(stderr, "usage: nfs_tree --nfs URL | --local DIR\n");
	return 2;
}

static int run(const struct backend *be)
{
	struct attrs root;
	if (be->lstat(be->ctx, "/", &root)) {
		complain("cannot stat the root");
		return 1;
	}
	if (!S_ISDIR(root.mode)) {
		complain("the root is not a directory");
		return 1;
	}
	walk(be, "/", &root);
	print_tree();
	return status;
}

static int run_nfs(const char *url_s)
{
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *url = NULL;
	struct backend be = {nfs_list, nfs_lstat_, nfs_hash_file, nfs_readlink_, nfs};
	int rc = 1;
	if (!nfs) {
		fprintf(stderr, "nfs_tree: nfs_init_context failed\n");
		return 1;
	}
	/* a dead or hung server must end the walk with an error, not hang it:
	 * libnfs' sync calls otherwise wait, and reconnect, forever */
	nfs_set_timeout(nfs, 60000);
	nfs_set_autoreconnect(nfs, 0);
	url = nfs_parse_url_dir(nfs, url_s);
	if (!url) {
		fprintf(stderr, "nfs_tree: bad URL %s: %s\n", url_s, nfs_get_error(nfs));
		goto out;
	}
	if (nfs_mount(nfs, url->server, url->path)) {
		fprintf(stderr, "nfs_tree: mount %s: %s\n", url_s, nfs_get_error(nfs));
		goto out;
	}
	rc = run(&be);
	nfs_umount(nfs);
out:
	if (url)
		nfs_destroy_url(url);
	nfs_destroy_context(nfs);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return usage();
	if (sodium_init() < 0) {
		fprintf(stderr, "nfs_tree: sodium_init failed\n");
		return 1;
	}
	if (!strcmp(argv[1], "--nfs"))
		return run_nfs(argv[2]);
	if (!strcmp(argv[1], "--local")) {
		struct local_ctx lc = {argv[2]};
		struct backend be = {local_list, local_lstat, local_hash_file,
				     local_readlink, &lc};
		return run(&be);
	}
	return usage();
}
