/* SPDX-License-Identifier: Apache-2.0 */
/* failover_writer.c - the write workload of kvm_failover.sh and its check
 * (built static by that test: it runs in a guest of tests/vm, and the check
 * also on the host).
 *
 *   failover_writer write DIR N MS MANIFEST
 *       makes DIR and N files in subdirectories of it (d00/f000, d00/f001,
 *       ..., FILES_PER_DIR to a subdirectory), file i starting no sooner
 *       than i * MS / N ms after the first, so that the run spans what the
 *       host does meanwhile (a gateway's failover).  File i is written in
 *       CHUNK-byte write(2)s of bytes that depend on (i, offset) alone; every
 *       FSYNC_EVERY-th is fsync'd before its close, every APPEND_EVERY-th is
 *       opened again with O_APPEND and given a tail, every RENAME_EVERY-th
 *       is renamed to rNNN in its subdirectory.  Prints "work progress I
 *       t=S" every PROGRESS_EVERY files, and at the end "work done files=N
 *       bytes=B seconds=S replays=R"; MANIFEST gets one line per file,
 *       "PATH SIZE HASH" (PATH under DIR, HASH the FNV-1a 64 of the bytes
 *       meant to be there).
 *   failover_writer check DIR MANIFEST
 *       reads each file of MANIFEST under DIR: its size and hash must be the
 *       manifest's; and no name under DIR (at both depths) that MANIFEST does
 *       not list.  "check OK files=N bytes=B", or a "check BAD ..." line per
 *       difference and exit 1.
 *
 * Every system call's result is checked: a failure prints "work ERR CALL
 * PATH ERRNO" (errno by name: ESTALE, EIO...) and exits 1.  But two answers
 * are what a retransmission gets from a gateway that did not execute the
 * first transmission, its duplicate request cache lost with the dead one
 * (docs/gateways.md, part 3): mkdir's EEXIST when the directory is there,
 * and rename's ENOENT when the source is gone and the target there.  Those
 * are counted as replays (a "work replay" line each), not errors.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum {
	FILES_PER_DIR = 50,
	CHUNK = 4096,
	SIZE_MIN = 1000,
	SIZE_SPAN = 24000, /* sizes SIZE_MIN .. SIZE_MIN + SIZE_SPAN - 1 */
	TAIL_MIN = 700,
	FSYNC_EVERY = 3,
	APPEND_EVERY = 5,
	RENAME_EVERY = 7,
	PROGRESS_EVERY = 20,
	MAX_FILES = 10000,
	PATH_LEN = 64, /* "dNN/fNNNN" and DIR's own length aside */
};

static unsigned replays;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* The byte at OFF of file I: a function of both alone, so that the check
 * needs nothing but the manifest. */
static unsigned char content(unsigned i, size_t off)
{
	return (unsigned char)(mix(((uint64_t)i << 32) | (off / 8)) >> ((off % 8) * 8));
}

static size_t body_size(unsigned i)
{
	return SIZE_MIN + mix(i) % SIZE_SPAN;
}

static size_t tail_size(unsigned i)
{
	return TAIL_MIN + i % 100;
}

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
	while (n--) {
		h ^= *p++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

#define FNV_INIT 0xcbf29ce484222325ULL

static void die(const char *call, const char *path)
{
	printf("work ERR %s %s %s\n", call, path, strerrorname_np(errno));
	exit(1);
}

static void write_range(int fd, const char *path, unsigned i, size_t from, size_t to,
			uint64_t *h)
{
	unsigned char buf[CHUNK];

	while (from < to) {
		size_t n = to - from < CHUNK ? to - from : CHUNK, k;
		ssize_t w;

		for (k = 0; k < n; k++)
			buf[k] = content(i, from + k);
		w = write(fd, buf, n);
		if (w < 0)
			die("write", path);
		if ((size_t)w != n) { /* a short write to NFS: reported, not retried */
			errno = EIO;
			die("write(short)", path);
		}
		*h = fnv(*h, buf, n);
		from += n;
	}
}

/* mkdir, a retransmission's EEXIST counted as a replay */
static void make_dir(const char *path, int first)
{
	struct stat st;

	if (mkdir(path, 0755) == 0)
		return;
	if (errno != EEXIST || first)
		die("mkdir", path);
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		die("mkdir(EEXIST)", path);
	printf("work replay mkdir %s: EEXIST, the directory is there\n", path);
	replays++;
}

/* rename, a retransmission's ENOENT (source gone, target there) a replay */
static void move(const char *from, const char *to)
{
	struct stat st;
	int e;

	if (rename(from, to) == 0)
		return;
	e = errno;
	if (e != ENOENT || lstat(to, &st) < 0 || lstat(from, &st) == 0 ||
	    errno != ENOENT) {
		errno = e;
		die("rename", from);
	}
	printf("work replay rename %s: ENOENT, the target is there\n", from);
	replays++;
}

static int do_write(const char *dir, unsigned n, unsigned ms, const char *manifest)
{
	char sub[PATH_MAX], path[PATH_MAX + PATH_LEN], to[PATH_MAX + PATH_LEN];
	double t0 = now_s(), period = ms / 1e3 / n;
	unsigned long long bytes = 0;
	FILE *m;
	unsigned i;

	if (n == 0 || n > MAX_FILES || strlen(dir) > PATH_MAX - PATH_LEN) {
		fprintf(stderr, "failover_writer: N must be 1..%d, DIR short\n",
			MAX_FILES);
		return 2;
	}
	m = fopen(manifest, "w");
	if (!m)
		die("fopen", manifest);
	make_dir(dir, 1);
	for (i = 0; i < n; i++) {
		double wait = t0 + i * period - now_s();
		uint64_t h = FNV_INIT;
		size_t size = body_size(i);
		const char *name = path;
		int fd;

		if (wait > 0)
			usleep((useconds_t)(wait * 1e6));
		if (i % PROGRESS_EVERY == 0)
			printf("work progress %u t=%.1f\n", i, now_s() - t0);
		snprintf(sub, sizeof(sub), "%s/d%02u", dir, i / FILES_PER_DIR);
		if (i % FILES_PER_DIR == 0)
			make_dir(sub, 0);
		snprintf(path, sizeof(path), "%s/f%03u", sub, i);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			die("open", path);
		write_range(fd, path, i, 0, size, &h);
		if (i % FSYNC_EVERY == 0 && fsync(fd) < 0)
			die("fsync", path);
		if (close(fd) < 0)
			die("close", path);
		if (i % APPEND_EVERY == 0) {
			fd = open(path, O_WRONLY | O_APPEND);
			if (fd < 0)
				die("open(O_APPEND)", path);
			write_range(fd, path, i, size, size + tail_size(i), &h);
			size += tail_size(i);
			if (close(fd) < 0)
				die("close", path);
		}
		if (i % RENAME_EVERY == 0) {
			snprintf(to, sizeof(to), "%s/r%03u", sub, i);
			move(path, to);
			name = to;
		}
		fprintf(m, "%s %zu %016llx\n", name + strlen(dir) + 1, size,
			(unsigned long long)h);
		bytes += size;
	}
	if (fclose(m))
		die("fclose", manifest);
	printf("work done files=%u bytes=%llu seconds=%.1f replays=%u\n", n, bytes,
	       now_s() - t0, replays);
	return 0;
}

struct entry {
	char path[PATH_LEN];
	size_t size;
	unsigned long long hash;
	int seen;
};

static int bad(const char *what, const char *path)
{
	printf("check BAD %s %s\n", path, what);
	return 1;
}

/* file E under DIR: its size and hash; 0 or 1 */
static int check_file(const char *dir, struct entry *e, unsigned long long *bytes)
{
	char path[PATH_MAX], msg[128];
	unsigned char buf[CHUNK];
	uint64_t h = FNV_INIT;
	size_t size = 0;
	ssize_t r;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, e->path);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return bad(strerrorname_np(errno), e->path);
	while ((r = read(fd, buf, sizeof(buf))) > 0) {
		h = fnv(h, buf, (size_t)r);
		size += (size_t)r;
	}
	if (r < 0) {
		snprintf(msg, sizeof(msg), "read: %s", strerrorname_np(errno));
		close(fd);
		return bad(msg, e->path);
	}
	close(fd);
	*bytes += size;
	if (size != e->size || h != e->hash) {
		snprintf(msg, sizeof(msg), "size %zu hash %016llx, want %zu %016llx",
			 size, (unsigned long long)h, e->size, e->hash);
		return bad(msg, e->path);
	}
	return 0;
}

static int dots(const char *name)
{
	return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

static struct entry *find(struct entry *v, size_t n, const char *path)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(v[i].path, path) == 0)
			return &v[i];
	return NULL;
}

/* every name in DIR and its subdirectories is in the manifest; 0 or the
 * number of names that are not */
static int check_names(const char *dir, struct entry *v, size_t n)
{
	char path[PATH_MAX], rel[PATH_MAX];
	struct dirent *d, *s;
	DIR *top, *sub;
	int nbad = 0;

	top = opendir(dir);
	if (!top)
		return bad(strerrorname_np(errno), ".");
	while ((d = readdir(top))) {
		if (dots(d->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		sub = opendir(path);
		if (!sub) {
			nbad += bad("not in the manifest", d->d_name);
			continue;
		}
		while ((s = readdir(sub))) {
			if (dots(s->d_name))
				continue;
			snprintf(rel, sizeof(rel), "%s/%s", d->d_name, s->d_name);
			if (!find(v, n, rel))
				nbad += bad("not in the manifest", rel);
		}
		closedir(sub);
	}
	closedir(top);
	return nbad;
}

static int do_check(const char *dir, const char *manifest)
{
	static struct entry v[MAX_FILES];
	unsigned long long bytes = 0;
	size_t n = 0, i;
	int nbad = 0;
	FILE *m = fopen(manifest, "r");

	if (!m)
		return bad(strerrorname_np(errno), manifest);
	while (n < MAX_FILES &&
	       fscanf(m, "%63s %zu %llx", v[n].path, &v[n].size, &v[n].hash) == 3)
		n++;
	fclose(m);
	if (n == 0)
		return bad("no entries", manifest);
	for (i = 0; i < n; i++)
		nbad += check_file(dir, &v[i], &bytes);
	nbad += check_names(dir, v, n);
	if (nbad)
		return 1;
	printf("check OK files=%zu bytes=%llu\n", n, bytes);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* a line is one write to the port */
	if (argc == 6 && strcmp(argv[1], "write") == 0)
		return do_write(argv[2], (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]),
				argv[5]);
	if (argc == 4 && strcmp(argv[1], "check") == 0)
		return do_check(argv[2], argv[3]);
	fprintf(stderr, "usage: failover_writer write DIR N MS MANIFEST\n"
			"       failover_writer check DIR MANIFEST\n");
	return 2;
}
