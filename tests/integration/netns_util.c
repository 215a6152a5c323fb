/* SPDX-License-Identifier: Apache-2.0 */
/* netns_util.c - network namespaces for the gateway tests; see netns_util.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netns_util.h"

bool netns_enter(int fd)
{
	if (!setns(fd, CLONE_NEWNET))
		return true;
	fprintf(stderr, "netns: setns: %s\n", strerror(errno));
	return false;
}

/* Brings up the loopback of the thread's namespace. */
static int lo_up(void)
{
	struct ifreq r = {0};
	int e, fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	snprintf(r.ifr_name, sizeof(r.ifr_name), "lo");
	if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &r))
		goto fail;
	r.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &r))
		goto fail;
	close(fd);
	return 0;
fail:
	e = errno;
	fprintf(stderr, "netns: loopback up: %s\n", strerror(e));
	if (fd >= 0)
		close(fd);
	errno = e;
	return -1;
}

int netns_new(int home)
{
	int e = 0, fd;

	if (unshare(CLONE_NEWNET)) {
		e = errno;
		fprintf(stderr, "netns: unshare CLONE_NEWNET: %s\n", strerror(e));
		errno = e;
		return -1;
	}
	fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || lo_up()) {
		e = errno;
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	if (home >= 0 && !netns_enter(home))
		return -1; /* errno from setns */
	if (fd < 0)
		errno = e;
	return fd;
}

/* Back to HOME after a call in another namespace: false (with a line) when
 * the thread is stranded there. */
static bool go_home(int home)
{
	if (netns_enter(home))
		return true;
	fprintf(stderr, "netns: cannot go back to the test's network namespace\n");
	return false;
}

struct rpc_context *netns_connect(int ns, int home, int port, int prog, int vers)
{
	struct rpc_context *rpc = NULL;

	if (netns_enter(ns))
		rpc = nfs_raw_connect(port, prog, vers);
	if (!go_home(home) && rpc) {
		rpc_destroy_context(rpc);
		rpc = NULL;
	}
	return rpc;
}

int netns_mnt(int ns, int home, int port, const char *path, struct fh *root)
{
	int status = -1;

	root->len = 0;
	if (netns_enter(ns))
		status = nfs_raw_mnt(port, path, root);
	return go_home(home) ? status : -1;
}

int netns_umnt(int ns, int home, int port, const char *path)
{
	int rc = -1;

	if (netns_enter(ns))
		rc = nfs_raw_umnt(port, path);
	return go_home(home) ? rc : -1;
}
