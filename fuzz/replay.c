/* SPDX-License-Identifier: Apache-2.0 */
/* replay.c - runs a fuzz target once over every file of the corpus dirs named
 * on the command line, without libFuzzer, so the seeds (and every crash ever
 * found, once added to the corpus) run in ctest under any compiler. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads all of PATH into a malloc'd buffer (*len bytes); NULL on failure. */
static uint8_t *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0)
		goto out;
	buf = malloc(n ? (size_t)n : 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	*len = (size_t)n;
out:
	fclose(f);
	return buf;
}

/* Runs every regular file of DIR; returns the count, or -1 on an I/O error. */
static int replay_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4096];
	int n = 0;

	if (!d) {
		perror(dir);
		return -1;
	}
	while ((e = readdir(d))) {
		uint8_t *buf;
		size_t len;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		buf = read_all(path, &len);
		if (!buf) {
			perror(path);
			n = -1;
			break;
		}
		LLVMFuzzerTestOneInput(buf, len);
		free(buf);
		n++;
	}
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	int total = 0;

	LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		int n = replay_dir(argv[i]);

		if (n < 0)
			return 1;
		total += n;
	}
	printf("replayed %d inputs\n", total);
	return total > 0 ? 0 : 1;
}
