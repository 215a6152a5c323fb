/* SPDX-License-Identifier: Apache-2.0 */
/* readdir_bench - entries per second of a whole-directory listing over NFSv3.
 *
 *   readdir_bench PLUS|PLAIN NFS_PORT MOUNT_PORT EXPORT [PASSES [SERVER_PID]]
 *
 * Mounts EXPORT of the server on 127.0.0.1 (MOUNT v3), then lists its root
 * PASSES times (default 3) with READDIRPLUS (dircount 16384, maxcount 65536,
 * about what the Linux client asks for) or READDIR (count 65536), one call
 * at a time as a client does, keeping cookie and verifier.  Prints one line
 * per pass: "pass K: N entries in S s = R entries/s (P pages)", with the
 * server's CPU time per entry when SERVER_PID is given (the run time of all
 * its threads from /proc/PID/task/T/schedstat, which is steadier than wall
 * time on a shared machine), then the medians of the passes after the
 * first.  The first pass of union-nfsd includes building the merged
 * listing.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nfs_raw.h"

/* s; the first page of a pass may wait for the server to merge a listing of a
 * million names. */
#define CALL_WAIT_S 300

struct page {
	int status;
	size_t n;
	uint64_t cookie;
	char verf[NFS3_COOKIEVERFSIZE];
	bool eof;
};

static struct fh root;

/* Waits for call C; 0 if it had an accepted reply. */
static int finish(struct rpc_context *rpc, struct call *c, int queued)
{
	return nfs_raw_finish_within(rpc, c, queued, CALL_WAIT_S);
}

static void keep_rdp(void *data, void *out)
{
	READDIRPLUS3res *r = data;
	struct page *p = out;

	p->status = (int)r->status;
	if (r->status != NFS3_OK)
		return;
	for (entryplus3 *e = r->READDIRPLUS3res_u.resok.reply.entries; e;
	     e = e->nextentry, p->n++)
		p->cookie = e->cookie;
	memcpy(p->verf, r->READDIRPLUS3res_u.resok.cookieverf, NFS3_COOKIEVERFSIZE);
	p->eof = r->READDIRPLUS3res_u.resok.reply.eof;
}

static void keep_rd(void *data, void *out)
{
	READDIR3res *r = data;
	struct page *p = out;

	p->status = (int)r->status;
	if (r->status != NFS3_OK)
		return;
	for (entry3 *e = r->READDIR3res_u.resok.reply.entries; e;
	     e = e->nextentry, p->n++)
		p->cookie = e->cookie;
	memcpy(p->verf, r->READDIR3res_u.resok.cookieverf, NFS3_COOKIEVERFSIZE);
	p->eof = r->READDIR3res_u.resok.reply.eof;
}

static int one_page(struct rpc_context *rpc, bool plus, struct page *p)
{
	struct call c = {.keep = plus ? keep_rdp : keep_rd, .out = p};
	nfs_fh3 dir = nfs_raw_fh3(&root);

	p->status = -1;
	if (plus) {
		READDIRPLUS3args a = {.dir = dir,
				      .cookie = p->cookie,
				      .dircount = 16384,
				      .maxcount = 65536};

		memcpy(a.cookieverf, p->verf, NFS3_COOKIEVERFSIZE);
		if (finish(rpc, &c,
			   rpc_nfs3_readdirplus_async(rpc, nfs_raw_on_reply, &a, &c)))
			return -1;
	} else {
		READDIR3args a = {.dir = dir, .cookie = p->cookie, .count = 65536};

		memcpy(a.cookieverf, p->verf, NFS3_COOKIEVERFSIZE);
		if (finish(rpc, &c,
			   rpc_nfs3_readdir_async(rpc, nfs_raw_on_reply, &a, &c)))
			return -1;
	}
	return p->status;
}

/* Nanoseconds PID's threads have run, or -1. */
static double cpu_ns(int pid)
{
	char path[64];
	struct dirent *t;
	double sum = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((t = readdir(d))) {
		unsigned long long ns;
		FILE *f;

		if (t->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/schedstat", pid,
			 t->d_name);
		f = fopen(path, "r");
		if (f && fscanf(f, "%llu", &ns) == 1)
			sum += (double)ns;
		if (f)
			fclose(f);
	}
	closedir(d);
	return sum;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct rpc_context *nfs;
	double rate[64], cpu[64];
	bool plus;
	int passes, pid;

	if (argc < 5) {
		fprintf(stderr,
			"usage: readdir_bench PLUS|PLAIN NFS_PORT MOUNT_PORT EXPORT "
			"[PASSES]\n");
		return 2;
	}
	plus = !strcmp(argv[1], "PLUS");
	passes = argc > 5 ? atoi(argv[5]) : 3;
	pid = argc > 6 ? atoi(argv[6]) : 0;
	if (passes < 1 || passes > 64) {
		fprintf(stderr, "readdir_bench: 1 to 64 passes\n");
		return 2;
	}
	if (nfs_raw_mnt(atoi(argv[3]), argv[4], &root) != MNT3_OK || !root.len) {
		fprintf(stderr, "readdir_bench: MNT %s failed\n", argv[4]);
		return 1;
	}
	nfs = nfs_raw_connect(atoi(argv[2]), NFS_PROG, 3);
	if (!nfs)
		return 1;
	for (int k = 1; k <= passes; k++) {
		struct page p = {0};
		size_t pages = 0;
		double t0 = now(), c0 = pid ? cpu_ns(pid) : -1, dt, c1;

		while (!p.eof) {
			int st = one_page(nfs, plus, &p);

			if (st) {
				fprintf(stderr, "readdir_bench: status %d\n", st);
				return 1;
			}
			pages++;
		}
		dt = now() - t0;
		c1 = c0 >= 0 ? cpu_ns(pid) : -1;
		rate[k - 1] = (double)p.n / dt;
		cpu[k - 1] = c1 >= 0 ? (c1 - c0) / 1e3 / (double)p.n : -1;
		printf("pass %d: %zu entries in %.3f s = %.0f entries/s (%zu pages)", k,
		       p.n, dt, rate[k - 1], pages);
		if (cpu[k - 1] >= 0)
			printf(", server cpu %.3f us/entry", cpu[k - 1]);
		printf("\n");
		fflush(stdout);
	}
	if (passes > 1) {
		printf("median of passes 2-%d: %.0f entries/s", passes,
		       median(rate + 1, passes - 1));
		if (cpu[1] >= 0)
			printf(", server cpu %.3f us/entry", median(cpu + 1, passes - 1));
		printf("\n");
	}
	rpc_destroy_context(nfs);
	return 0;
}
