/* SPDX-License-Identifier: Apache-2.0 */
/* it_util.c - small helpers the integration tests share (see it_util.h). */
#define _GNU_SOURCE
#include "it_util.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

int it_free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

void it_setup_failed(const char *what, const char *path, void (*cleanup)(void))
{
	int e = errno;

	fprintf(stderr, "%s %s: %s\n", what, path, strerror(e));
	cleanup();
	exit(e == EPERM ? 77 : 1);
}
