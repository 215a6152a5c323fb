/* it_util.c - small helpers the integration tests share (see it_util.h). */
#define _GNU_SOURCE
#include "it_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

void it_sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

double it_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

char it_type_char(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return 'f';
	case S_IFDIR:
		return 'd';
	case S_IFLNK:
		return 'l';
	case S_IFCHR:
		return 'c';
	case S_IFBLK:
		return 'b';
	case S_IFIFO:
		return 'p';
	case S_IFSOCK:
		return 's';
	}
	return '?';
}

int it_tmp_layers(char *tmp, size_t len, const char *template)
{
	char p[4096];

	snprintf(tmp, len, "%s", template);
	if (!mkdtemp(tmp)) {
		tmp[0] = '\0';
		return -1;
	}
	for (const char *d = "lower\0upper\0work\0"; *d; d += strlen(d) + 1) {
		snprintf(p, sizeof(p), "%s/%s", tmp, d);
		if (mkdir(p, 0755))
			return -1;
	}
	return 0;
}
