/* SPDX-License-Identifier: Apache-2.0 */
/* rpcbind.c - registration of every program registered with the server
 * (svc.c) with the local rpcbind.
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

#include "rpc_private.h"

#define PROBE_TIMEOUT_MS 300

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
	rpc_log(RPC_LOG_WARN, "rpcbind refused program %lu v%lu %s port %u", prog, vers,
		proto == IPPROTO_TCP ? "tcp" : "udp", port);
	return false;
}

/* Whether registration R is rpcbind's own business (the portmapper's). */
static bool is_portmapper(const struct rpc_reg *r)
{
	return r->prog->prog == PMAPPROG;
}

/* The registry registered with rpcbind (rpc_rpcbind_unregister takes it
 * back); NULL: none. */
static const struct rpc_svc *registered_svc;

/* Takes back every registration of SVC's programs (a crashed run of ours
 * leaves them). */
static void unset_all(const struct rpc_svc *svc)
{
	for (size_t i = 0; i < svc->nregs; i++)
		if (!is_portmapper(&svc->regs[i]))
			pmap_unset(svc->regs[i].prog->prog, svc->regs[i].prog->vers);
}

bool rpc_rpcbind_register(const struct rpc_svc *svc)
{
	char line[512];
	size_t used = 0;
	bool ok = true;

	if (!rpcbind_answers()) {
		rpc_log(RPC_LOG_INFO,
			"rpcbind is not running: serving without registration "
			"(clients must be told the ports)");
		return false;
	}
	unset_all(svc);
	registered_svc = svc;
	line[0] = '\0';
	for (size_t i = 0; i < svc->nregs; i++) {
		const struct rpc_reg *r = &svc->regs[i];
		uint16_t port = rpc_svc_port(svc, r->prog->prog, r->prog->vers);

		if (is_portmapper(r))
			continue;
		ok = set_one(r->prog->prog, r->prog->vers, IPPROTO_TCP, port) && ok;
		ok = set_one(r->prog->prog, r->prog->vers, IPPROTO_UDP, port) && ok;
		if (used < sizeof(line))
			used += (size_t)snprintf(line + used, sizeof(line) - used,
						 "%s%s v%u %u", used ? ", " : "",
						 r->prog->name, r->prog->vers, port);
	}
	if (ok)
		rpc_log(RPC_LOG_INFO, "registered with rpcbind: %s", line);
	return ok;
}

void rpc_rpcbind_unregister(void)
{
	if (!registered_svc)
		return;
	unset_all(registered_svc);
	registered_svc = NULL;
}
