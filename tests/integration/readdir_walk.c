/* SPDX-License-Identifier: Apache-2.0 */
/* readdir_walk - the guest side of kvm_readdir.sh (built static on the host).
 *
 *   readdir_walk DIR
 *
 * Reads DIR once with readdir, recording for every entry the telldir position
 * taken just before it was read; then seekdirs back to every 97th position and
 * reads 5 entries again, which must be the same names in the same order (the
 * page cache is dropped first, so that the kernel must ask the server with
 * the cookies it kept; the write fails harmlessly when not root).  Also
 * checks that no name came twice.  Prints "entries N", "seeks S", "seek_bad B",
 * "dups D"; exits 1 when B or D is not 0.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ent {
	long pos;
	char *name;
};

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct ent *)a)->name, ((const struct ent *)b)->name);
}

static void drop_caches(void)
{
	FILE *f = fopen("/proc/sys/vm/drop_caches", "w");

	if (f) {
		fputs("3\n", f);
		fclose(f);
	}
}

int main(int argc, char **argv)
{
	size_t n = 0, cap = 1024, seeks = 0, bad = 0, dups = 0;
	struct ent *e = malloc(cap * sizeof(*e));
	struct dirent *d;
	DIR *dir;

	if (argc != 2 || !e || !(dir = opendir(argv[1]))) {
		perror("readdir_walk");
		return 2;
	}
	for (;;) {
		long pos = telldir(dir);

		if (!(d = readdir(dir)))
			break;
		if (n == cap && !(e = realloc(e, (cap *= 2) * sizeof(*e))))
			return 2;
		e[n].pos = pos;
		e[n++].name = strdup(d->d_name);
	}
	drop_caches();
	for (size_t i = 0; i < n; i += 97) {
		seekdir(dir, e[i].pos);
		seeks++;
		for (size_t k = i; k < i + 5 && k < n; k++) {
			d = readdir(dir);
			if (!d || strcmp(d->d_name, e[k].name)) {
				if (bad++ < 5)
					printf("seek to entry %zu: read %s, want %s\n", k,
					       d ? d->d_name : "(end)", e[k].name);
				break;
			}
		}
	}
	closedir(dir);
	qsort(e, n, sizeof(*e), by_name);
	for (size_t i = 1; i < n; i++)
		dups += !strcmp(e[i - 1].name, e[i].name);
	printf("entries %zu\nseeks %zu\nseek_bad %zu\ndups %zu\n", n, seeks, bad, dups);
	return bad || dups;
}
