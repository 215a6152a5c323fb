/* SPDX-License-Identifier: Apache-2.0 */
/* guest_prog.c - the small C program of the kernel client test (kvm_write.sh).
 *
 *   guest_prog TREE OUTDIR
 *
 * The guest compiles it with gcc on its NFS root and runs it there; the host
 * compiles the same file and runs it on the tree the tarball was made from.  The
 * outputs must be equal, so nothing printed depends on paths, times or inode
 * numbers:
 *   - a walk of TREE: counts per type, total bytes, and an order-independent sum
 *     of a hash of every file's name and data (every byte read through NFS);
 *   - OUTDIR/pwrite.bin written with pwrite in a scrambled block order, with a
 *     hole, extended and cut back by ftruncate, fsync'd, then read back;
 *   - OUTDIR/mmap.bin written through a shared mapping, msync'd, read back;
 *   - OUTDIR/append.log written with O_APPEND; a hard link and a rename.
 * Exit status 0 when every step worked (a failed step prints why and exits 1).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK	4099
#define NBLOCKS 64
#define MAPLEN	(256 * 1024)

static struct {
	uint64_t files, dirs, links, others, bytes, sum;
} walk;

static void die(const char *what)
{
	printf("FAILED: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ULL;
	return h;
}

#define FNV_INIT 14695981039346656037ULL

static uint64_t hash_fd(int fd, uint64_t *size)
{
	static unsigned char buf[65536];
	uint64_t h = FNV_INIT;
	ssize_t n;
	*size = 0;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		h = fnv(h, buf, (size_t)n);
		*size += (uint64_t)n;
	}
	if (n < 0)
		die("read");
	return h;
}

static int visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	uint64_t size, h;
	int fd;
	(void)type;
	if (ftw->level == 0)
		return 0;
	if (S_ISDIR(st->st_mode)) {
		walk.dirs++;
	} else if (S_ISLNK(st->st_mode)) {
		walk.links++;
	} else if (S_ISREG(st->st_mode)) {
		fd = open(path, O_RDONLY);
		if (fd < 0)
			die(path);
		h = hash_fd(fd, &size);
		close(fd);
		if (size != (uint64_t)st->st_size) {
			printf("FAILED: %s: read %" PRIu64 " bytes, stat says %jd\n",
			       path, size, (intmax_t)st->st_size);
			exit(1);
		}
		/* the name from the tree's top down, so the sum ignores where it is */
		h = fnv(h, path + ftw->base, strlen(path + ftw->base));
		walk.files++;
		walk.bytes += size;
		walk.sum += h;
	} else {
		walk.others++;
	}
	return 0;
}

static unsigned char byte_at(uint64_t off, unsigned seed)
{
	return (unsigned char)((off * 2654435761u + seed) >> 7);
}

/* OUT/NAME's data hashed, after a fresh open. */
static uint64_t rehash(const char *out, const char *name, uint64_t *size)
{
	char p[4096];
	int fd;
	uint64_t h;
	snprintf(p, sizeof(p), "%s/%s", out, name);
	fd = open(p, O_RDONLY);
	if (fd < 0)
		die(p);
	h = hash_fd(fd, size);
	close(fd);
	return h;
}

static void pwrite_test(const char *out)
{
	unsigned char buf[BLOCK];
	char p[4096];
	uint64_t size, h;
	int fd;
	snprintf(p, sizeof(p), "%s/pwrite.bin", out);
	fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0640);
	if (fd < 0)
		die(p);
	for (unsigned i = 0; i < NBLOCKS; i++) {
		unsigned b = (i * 37) % NBLOCKS; /* 37 is prime to 64: a permutation */
		if (b % 8 == 5)
			continue; /* holes */
		for (unsigned j = 0; j < BLOCK; j++)
			buf[j] = byte_at((uint64_t)b * BLOCK + j, 1);
		if (pwrite(fd, buf, BLOCK, (off_t)b * BLOCK) != BLOCK)
			die("pwrite");
	}
	if (ftruncate(fd, (off_t)NBLOCKS * BLOCK + 100000) ||
	    ftruncate(fd, 50000 + BLOCK))
		die("ftruncate");
	if (fsync(fd) || close(fd))
		die("fsync/close");
	h = rehash(out, "pwrite.bin", &size);
	printf("pwrite size=%" PRIu64 " fnv=%016" PRIx64 "\n", size, h);
}

static void mmap_test(const char *out)
{
	char p[4096];
	unsigned char *m;
	uint64_t size, h;
	int fd;
	snprintf(p, sizeof(p), "%s/mmap.bin", out);
	fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die(p);
	if (ftruncate(fd, MAPLEN))
		die("ftruncate");
	m = mmap(NULL, MAPLEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		die("mmap");
	for (size_t i = 0; i < MAPLEN; i += 3)
		m[i] = byte_at(i, 2);
	if (msync(m, MAPLEN, MS_SYNC) || munmap(m, MAPLEN) || close(fd))
		die("msync/munmap/close");
	h = rehash(out, "mmap.bin", &size);
	printf("mmap size=%" PRIu64 " fnv=%016" PRIx64 "\n", size, h);
}

static void append_test(const char *out)
{
	char p[4096], line[64];
	uint64_t size, h;
	int fd;
	snprintf(p, sizeof(p), "%s/append.log", out);
	for (int i = 0; i < 50; i++) {
		int n = snprintf(line, sizeof(line), "line %d of the append log\n", i);
		fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd < 0 || write(fd, line, (size_t)n) != n || close(fd))
			die("append");
	}
	h = rehash(out, "append.log", &size);
	printf("append size=%" PRIu64 " fnv=%016" PRIx64 "\n", size, h);
}

static void names_test(const char *out)
{
	char a[4096], b[4096];
	struct stat st;
	snprintf(a, sizeof(a), "%s/mmap.bin", out);
	snprintf(b, sizeof(b), "%s/mmap.link", out);
	if (link(a, b))
		die("link");
	snprintf(a, sizeof(a), "%s/pwrite.bin", out);
	snprintf(b, sizeof(b), "%s/pwrite.renamed", out);
	if (rename(a, b))
		die("rename");
	if (stat(a, &st) == 0 || errno != ENOENT)
		die("old name still there");
	if (stat(b, &st))
		die("stat of the new name");
	printf("names nlink=%ju\n", (uintmax_t)st.st_nlink);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: guest_prog TREE OUTDIR\n");
		return 2;
	}
	if (nftw(argv[1], visit, 32, FTW_PHYS))
		die("nftw");
	printf("tree files=%" PRIu64 " dirs=%" PRIu64 " links=%" PRIu64 " others=%" PRIu64
	       " bytes=%" PRIu64 " sum=%016" PRIx64 "\n",
	       walk.files, walk.dirs, walk.links, walk.others, walk.bytes, walk.sum);
	if (mkdir(argv[2], 0755) && errno != EEXIST)
		die(argv[2]);
	pwrite_test(argv[2]);
	mmap_test(argv[2]);
	append_test(argv[2]);
	names_test(argv[2]);
	printf("guest_prog done\n");
	return 0;
}
