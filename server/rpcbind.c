/* SPDX-License-Identifier: Apache-2.0 */
/* rpcbind.c - registration of NFS v3, MOUNT v3, NLM v1, v3 and v4 and NSM
 * v1 with the local rpcbind.
 *
 * libtirpc's pmap_set retries for many seconds when no rpcbind listens, and a
 * server must start at once on a machine without one (containers, tests, a
 * client told the ports).  So we first ask, with a short timeout, whether
 * anything accepts connections on rpcbind's local socket or on port 111, and
 * only then register.  Registration replaces an older entry of ours (a crashed
 * run leaves one), as svc_reg does.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rpc/pmap_clnt.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "nlm.h"
#include "nsm_prot.h"

#define PROBE_TIMEOUT_MS 300

static bool registered;

/* True when a connect to ADDR completes within PROBE_TIMEOUT_MS. */
static bool can_connect(const struct sockaddr *addr, socklen_t len)
{
	int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int err = 0;
	socklen_t elen = sizeof(err);
	bool ok = false;

	if (fd < 0)
		return false;
	if (connect(fd, addr, len) == 0) {
		ok = true;
		goto out;
	}
	if (errno != EINPROGRESS)
		goto out;
	if (poll(&p, 1, PROBE_TIMEOUT_MS) != 1)
		goto out;
	ok = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0;
out:
	close(fd);
	return ok;
}

static bool rpcbind_answers(void)
{
	static const char *const socks[] = {"/run/rpcbind.sock", "/var/run/rpcbind.sock"};
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(111)};
	struct sockaddr_un sun = {.sun_family = AF_UNIX};

	for (size_t i = 0; i < sizeof(socks) / sizeof(socks[0]); i++) {
		strncpy(sun.sun_path, socks[i], sizeof(sun.sun_path) - 1);
		if (can_connect((struct sockaddr *)&sun, sizeof(sun)))
			return true;
	}
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return can_connect((struct sockaddr *)&sin, sizeof(sin));
}

static bool set_one(unsigned long prog, unsigned long vers, int proto, uint16_t port)
{
	if (pmap_set(prog, vers, proto, port))
		return true;
	srv_log(SRV_LOG_WARN, "rpcbind refused program %lu v%lu %s port %u", prog, vers,
		proto == IPPROTO_TCP ? "tcp" : "udp", port);
	return false;
}

/* The NLM versions a client may ask for (nlm_proc.c). */
static const unsigned long nlm_versions[] = {1, 3, 4};
#define NLM_NVERS (sizeof(nlm_versions) / sizeof(nlm_versions[0]))

static void unset_all(void)
{
	pmap_unset(NFS_PROGRAM, NFS_V3);
	pmap_unset(MOUNT_PROGRAM, MOUNT_V3);
	for (size_t i = 0; i < NLM_NVERS; i++)
		pmap_unset(NLM_PROG, nlm_versions[i]);
	pmap_unset(SM_PROG, SM_VERS);
}

static bool set_nlm(uint16_t nlm_port)
{
	bool ok = true;

	for (size_t i = 0; i < NLM_NVERS; i++) {
		ok = set_one(NLM_PROG, nlm_versions[i], IPPROTO_TCP, nlm_port) && ok;
		ok = set_one(NLM_PROG, nlm_versions[i], IPPROTO_UDP, nlm_port) && ok;
	}
	return ok;
}

bool srv_rpcbind_register(uint16_t nfs_port, uint16_t mount_port, uint16_t nlm_port,
			  uint16_t nsm_port)
{
	bool ok;

	if (!rpcbind_answers()) {
		srv_log(SRV_LOG_INFO,
			"rpcbind is not running: serving without registration "
			"(clients must be told the ports)");
		return false;
	}
	unset_all();
	registered = true;
	ok = set_one(NFS_PROGRAM, NFS_V3, IPPROTO_TCP, nfs_port);
	ok = set_one(NFS_PROGRAM, NFS_V3, IPPROTO_UDP, nfs_port) && ok;
	ok = set_one(MOUNT_PROGRAM, MOUNT_V3, IPPROTO_TCP, mount_port) && ok;
	ok = set_one(MOUNT_PROGRAM, MOUNT_V3, IPPROTO_UDP, mount_port) && ok;
	ok = set_nlm(nlm_port) && ok;
	ok = set_one(SM_PROG, SM_VERS, IPPROTO_TCP, nsm_port) && ok;
	ok = set_one(SM_PROG, SM_VERS, IPPROTO_UDP, nsm_port) && ok;
	if (ok)
		srv_log(SRV_LOG_INFO,
			"registered with rpcbind: nfs %u, mount %u, nlm %u, nsm %u",
			nfs_port, mount_port, nlm_port, nsm_port);
	return ok;
}

void srv_rpcbind_unregister(void)
{
	if (!registered)
		return;
	unset_all();
	registered = false;
}
