/* SPDX-License-Identifier: Apache-2.0 */
/* listen.c - the listeners: the ports of the services the server names
 * (rpc_loop_config.services) bound for TCP and UDP, TCP connections accepted
 * and admitted under the limits, UDP datagrams read into calls.  All of it
 * runs on the loop thread (loop.c dispatches to it).
 *
 * Any host that reaches the port could otherwise open connections until the
 * process has no descriptor left, and then no client is served and no MNT
 * can open a layer.  So:
 *
 * Rules:
 *  1. A connection from an address that no client rule of any export could
 *     admit is closed as soon as it is accepted (admit_conn, through the
 *     loop's admit_conn hook, the exports' srv_access_admits_conn): it costs
 *     a descriptor for no time at all.
 *     (No port here must answer everyone, not even the built-in portmapper's
 *     111: a host that may mount nothing needs no port numbers.)
 *  2. At most l->max_conns connections are open, and at most
 *     l->max_per_addr from one address (make_room).  A connection over a cap
 *     closes the least recently active idle one (no call in flight, nothing
 *     to send) of the address, or of all, as knfsd does, so that clients that
 *     went away without a FIN cannot lock out the ones that came back; when
 *     none is idle the new one is refused.  The default cap is the
 *     descriptor limit less a reserve (conn_room) for what else holds
 *     descriptors: the lookup cache (a quarter of the limit, union/rcache.c),
 *     the payload pipes (an eighth, arena.c), the server's own part
 *     (fds_kept_divisor: an eighth for the client unions,
 *     server/exports/unions.c), each worker's open file, the listeners, and the spare
 *     descriptor of shed_conns.
 *  3. A connection idle for idle_timeout seconds is closed by the sweep
 *     (rpc_conns_sweep_idle) the loop thread runs between batches every
 *     SWEEP_DIV-th of the timeout (loop_tick, loop.c).  Activity costs the
 *     hot path one relaxed load and store (conn_touch: c->active from
 *     l->now, the loop thread's coarse clock): no system call.  Only the
 *     loop thread touches nconns and the address table (as the conns list,
 *     conn.c rule 1).
 *  4. Out of descriptors, a listener's backlog is drained and closed with
 *     the spare descriptor (shed_conns), so the loop never spins on a
 *     listener it cannot accept from.
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "transport.h"

#define BIND_RETRIES	    8 /* tries for a TCP+UDP pair on one ephemeral port */
#define UDP_SOCKBUF	    (4 * 1024 * 1024)
#define CONNS_CEILING	    65536 /* default cap however high the limit */
#define CONNS_FIXED_RESERVE 64	  /* descriptors: listeners, epoll, logs, MNT */
#define PER_ADDR_MIN	    16	  /* default per-address cap, at least */
#define PER_ADDR_PART	    8	  /* ... else an 8th of the global cap */

/* ---- connection limits (rules 1-3) ---- */

/* Whether C has no call in flight and nothing to send: closing it loses
 * nothing (the client reconnects when it has a call to make). */
static bool conn_idle(struct rpc_conn *c)
{
	bool idle;

	pthread_mutex_lock(&c->lock);
	idle = !c->closed && c->inflight == 0 && !c->out_head && !c->sending;
	pthread_mutex_unlock(&c->lock);
	return idle;
}

static unsigned conn_active(const struct rpc_conn *c)
{
	return atomic_load_explicit(&c->active, memory_order_relaxed);
}

/* Of BEST (idle, or NULL) and C, the idle one least recently active; on a
 * tie the one further down the list, which was accepted earlier. */
static struct rpc_conn *older_idle(struct rpc_conn *best, struct rpc_conn *c)
{
	if (best && conn_active(c) > conn_active(best))
		return best;
	return conn_idle(c) ? c : best;
}

/* Makes room for a connection from PEER (rule 2): when PEER's address,
 * or the server, is at its cap, closes the least recently active idle
 * connection there.  False when none is idle: the new one is refused. */
static bool make_room(struct rpc_loop *l, const struct sockaddr_storage *peer)
{
	struct rpc_conn *c, *victim = NULL;
	char peername[INET6_ADDRSTRLEN + 16];
	unsigned same = 0;
	bool per_addr;

	for (c = *rpc_conn_addr_chain(l, peer); c; c = c->anext)
		same += rpc_same_addr(&c->peer, peer);
	per_addr = same >= l->max_per_addr;
	if (!per_addr && l->nconns < l->max_conns)
		return true;
	for (c = per_addr ? *rpc_conn_addr_chain(l, peer) : l->conns; c;
	     c = per_addr ? c->anext : c->next)
		if (!per_addr || rpc_same_addr(&c->peer, peer))
			victim = older_idle(victim, c);
	RPC_LOG_LIMITED(RPC_LOG_WARN, "connection from %s: %u connections%s open: %s",
			rpc_addr_str(peer, false, peername, sizeof(peername)),
			per_addr ? l->max_per_addr : l->max_conns,
			per_addr ? " of its address" : "",
			victim ? "closed the least recently used idle one"
			       : "none idle, refused the new one");
	if (victim)
		rpc_conn_close(l, victim);
	return victim != NULL;
}

/* Whether a connection just accepted from PEER may stay (rules 1, 2). */
static bool admit_conn(struct rpc_loop *l, const struct sockaddr_storage *peer)
{
	char peername[INET6_ADDRSTRLEN + 16];

	if (!l->cfg.admit_conn || l->cfg.admit_conn(l->cfg.admit_arg, peer))
		return make_room(l, peer);
	RPC_LOG_LIMITED(RPC_LOG_INFO,
			"connection from %s closed: no client rule admits it",
			rpc_addr_str(peer, false, peername, sizeof(peername)));
	return false;
}

/* Closes FD with a reset: a refused peer leaves no TIME_WAIT behind. */
static void refuse_conn(int fd)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

void rpc_conns_sweep_idle(struct rpc_loop *l, unsigned now)
{
	struct rpc_conn *c, *next;

	for (c = l->conns; c; c = next) {
		next = c->next; /* rpc_conn_close moves C to l->dead */
		if (now - conn_active(c) > l->idle_timeout && conn_idle(c))
			rpc_conn_close(l, c);
	}
}

/* The descriptors connections may have: the limit less what the rest of the
 * server may hold at once (rule 2), but at least an 8th of it. */
static unsigned long conn_room(const struct rpc_loop_config *cfg)
{
	unsigned long fds = 1024, reserve;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		fds =
		    rl.rlim_cur == RLIM_INFINITY ? 1ul << 20 : (unsigned long)rl.rlim_cur;
	reserve = fds / 4 + fds / 8 +
		  (cfg->fds_kept_divisor ? fds / cfg->fds_kept_divisor : 0) +
		  2ul * cfg->nthreads + CONNS_FIXED_RESERVE;
	return fds > reserve + fds / 8 ? fds - reserve : fds / 8 + 1;
}

int rpc_conn_limits(struct rpc_loop *l, const struct rpc_loop_config *cfg)
{
	unsigned long room = conn_room(cfg);
	size_t chains = 64;

	l->max_conns = (unsigned)(room < CONNS_CEILING ? room : CONNS_CEILING);
	if (cfg->max_conns && cfg->max_conns <= room)
		l->max_conns = cfg->max_conns;
	else if (cfg->max_conns)
		rpc_log(RPC_LOG_WARN,
			"max-connections %u: only %lu fit the limit on open files "
			"with room for the rest of the server; using %lu",
			cfg->max_conns, room, room);
	l->max_per_addr = cfg->max_conns_per_addr;
	if (!l->max_per_addr)
		l->max_per_addr = l->max_conns / PER_ADDR_PART > PER_ADDR_MIN
				      ? l->max_conns / PER_ADDR_PART
				      : PER_ADDR_MIN;
	if (l->max_per_addr > l->max_conns)
		l->max_per_addr = l->max_conns;
	l->idle_timeout = cfg->idle_timeout;
	while (chains < l->max_conns / 4)
		chains *= 2;
	l->by_addr = calloc(chains, sizeof(*l->by_addr));
	l->addr_mask = chains - 1;
	rpc_log(RPC_LOG_INFO,
		"connections: at most %u, %u per address; idle ones closed after %u s "
		"(0: never)",
		l->max_conns, l->max_per_addr, l->idle_timeout);
	return l->by_addr ? 0 : -ENOMEM;
}

/* ---- TCP: accepting ---- */

/* Out of descriptors (EMFILE, ENFILE): the connections waiting in LIS's
 * backlog keep it readable, and the loop would spin on it, failing to
 * accept.  The spare descriptor, closed, makes room to take each and close
 * it at once (the client sees the connection end, and retries), then is
 * taken back.  When even that finds no room (another thread took the
 * descriptor), the loop thread pauses: 100 tries a second at most. */
static void shed_conns(struct rpc_loop *l, struct listener *lis, int err)
{
	static struct rpc_log_limit limit;
	unsigned shed = 0;
	int fd;

	if (l->spare_fd >= 0)
		close(l->spare_fd);
	while ((fd = accept4(lis->fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		close(fd);
		shed++;
	}
	l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (!shed)
		usleep(10000);
	rpc_log_limited(&limit, RPC_LOG_ERR,
			"%s accept: %s: closed %u new connection%s; raise the limit on "
			"open files",
			lis->service, strerror(err), shed, shed == 1 ? "" : "s");
}

void rpc_listen_accept(struct rpc_loop *l, struct listener *lis)
{
	struct sockaddr_storage peer;
	socklen_t len;
	int fd;

	for (int i = 0; i < 64; i++) {
		len = sizeof(peer);
		fd = accept4(lis->fd, (struct sockaddr *)&peer, &len,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
			shed_conns(l, lis, errno);
			return;
		}
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				RPC_LOG_LIMITED(RPC_LOG_WARN, "%s accept: %s",
						lis->service, strerror(errno));
			return;
		}
		if (admit_conn(l, &peer))
			rpc_conn_add(l, fd, &peer, len);
		else
			refuse_conn(fd);
	}
}

/* ---- UDP ---- */

void rpc_listen_read_udp(struct rpc_loop *l, struct listener *lis)
{
	struct batch b = {.tailp = &b.head};
	struct sockaddr_storage peer, local;
	union {
		struct cmsghdr align;
		char buf[RPC_UDP_CMSG_SPACE + CMSG_SPACE(sizeof(struct in_pktinfo))];
	} control;
	struct iovec iov = {l->rx, sizeof(l->rx)};
	struct msghdr msg;
	struct rpc_buf record;
	struct call_job *j;
	ssize_t n;

	for (int i = 0; i < 64; i++) {
		msg = (struct msghdr){.msg_name = &peer,
				      .msg_namelen = sizeof(peer),
				      .msg_iov = &iov,
				      .msg_iovlen = 1,
				      .msg_control = control.buf,
				      .msg_controllen = sizeof(control.buf)};
		n = recvmsg(lis->fd, &msg, MSG_TRUNC);
		if (n < 0)
			break;
		rpc_udp_local(&msg, &local);
		if ((size_t)n > sizeof(l->rx))
			continue; /* larger than any call we take: drop */
		if (atomic_load(&l->udp_queued) >= RPC_UDP_MAX_QUEUED)
			continue; /* overloaded: the client will retransmit */
		record = (struct rpc_buf){.data = malloc((size_t)n ? (size_t)n : 1)};
		if (!record.data)
			continue;
		memcpy(record.data, l->rx, (size_t)n);
		record.len = record.cap = (size_t)n;
		j = rpc_call_job_new(l, NULL, lis->fd, &peer, msg.msg_namelen, &local,
				     &record);
		if (!j)
			continue;
		atomic_fetch_add(&l->udp_queued, 1);
		rpc_batch_add(&b, j);
	}
	rpc_pool_submit(l->pool, b.head); /* one lock, at most one wake */
}

/* ---- binding the ports ---- */

static int parse_bind_addr(const char *text, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (!text || !*text)
		text = "0.0.0.0";
	if (inet_pton(AF_INET, text, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		*len = sizeof(*sin);
		return 0;
	}
	if (inet_pton(AF_INET6, text, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		*len = sizeof(*sin6);
		return 0;
	}
	return -EINVAL;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

static uint16_t get_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* A bound (and for TCP listening) nonblocking socket, or -errno. */
static int bound_socket(int type, struct sockaddr_storage *addr, socklen_t alen,
			uint16_t port)
{
	int one = 1, size = UDP_SOCKBUF;
	int fd = socket(addr->ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int err;

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (type == SOCK_DGRAM) {
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
		rpc_udp_want_local(fd, addr->ss_family);
	}
	set_port(addr, port);
	if (bind(fd, (struct sockaddr *)addr, alen) < 0 ||
	    (type == SOCK_STREAM && listen(fd, 1024) < 0)) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* Registers listening socket FD (taken: closed on failure) with epoll. */
static int add_listener(struct rpc_loop *l, int fd, enum src_kind kind,
			const char *service)
{
	struct listener *lis = &l->lis[l->nlis];
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &lis->src};
	int rc = 0;

	assert(l->nlis < sizeof(l->lis) / sizeof(l->lis[0]));
	lis->src.kind = kind;
	lis->fd = fd;
	lis->service = service;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		rc = -errno;
		close(fd);
	} else {
		l->nlis++;
	}
	return rc;
}

/* Binds a TCP and a UDP socket (FDS) to one port: WANT, or when WANT is 0 a
 * port the kernel picks for TCP and that UDP can also have (retried while
 * taken).  On failure *FAILED names the protocol that could not bind. */
static int bind_pair(struct sockaddr_storage *addr, socklen_t alen, uint16_t want,
		     int fds[2], uint16_t *got, const char **failed)
{
	int rc = -EADDRINUSE;

	for (int i = 0; i < BIND_RETRIES && rc == -EADDRINUSE; i++) {
		*failed = "TCP";
		*got = want;
		rc = fds[0] = bound_socket(SOCK_STREAM, addr, alen, want);
		if (rc < 0)
			break;
		*got = get_port(fds[0]);
		*failed = "UDP";
		rc = fds[1] = bound_socket(SOCK_DGRAM, addr, alen, *got);
		if (rc >= 0)
			return 0;
		close(fds[0]);
		if (want != 0)
			break;
	}
	return rc;
}

/* Binds and registers the TCP and UDP listeners of SERVICE; *GOT is the port. */
static int bind_service(struct rpc_loop *l, const char *service, uint16_t want,
			uint16_t *got, char *err, size_t errlen)
{
	struct sockaddr_storage addr;
	socklen_t alen;
	const char *failed;
	int fds[2], rc;

	rc = parse_bind_addr(l->cfg.bind_addr, &addr, &alen);
	if (rc < 0) {
		snprintf(err, errlen, "bind address %s: not an IPv4 or IPv6 address",
			 l->cfg.bind_addr);
		goto out;
	}
	rc = bind_pair(&addr, alen, want, fds, got, &failed);
	if (rc < 0) {
		snprintf(err, errlen, "cannot bind %s %s port %u: %s", service, failed,
			 *got, strerror(-rc));
		goto out;
	}
	rc = add_listener(l, fds[0], SRC_TCP_LISTEN, service); /* takes fds[0] */
	if (rc < 0) {
		close(fds[1]);
		goto out_epoll;
	}
	rc = add_listener(l, fds[1], SRC_UDP, service);
	if (rc < 0)
		goto out_epoll;
	return 0;
out_epoll:
	snprintf(err, errlen, "epoll: %s", strerror(-rc));
out:
	return rc;
}

/* The port an earlier service of L bound that WANT names, or 0. */
static uint16_t bound_before(const struct rpc_loop *l, uint16_t want)
{
	for (size_t i = 0; want != 0 && i < l->svc->nports; i++)
		if (l->svc->ports[i].port == want)
			return want;
	return 0;
}

/* Port 111 for the built-in portmapper (pmap.c), when it is free.  Taken
 * (an rpcbind, or another server's portmapper) or refused (no privilege)
 * is no failure: the server then registers with whoever holds it. */
static void bind_portmapper(struct rpc_loop *l)
{
	char err[256];
	uint16_t got;
	int rc;

	if (!l->cfg.portmapper)
		return;
	rc = bind_service(l, "portmapper", 111, &got, err, sizeof(err));
	if (rc == 0)
		rpc_svc_bound(l->svc, "portmapper", got);
	else if (rc == -EADDRINUSE)
		rpc_log(RPC_LOG_INFO, "port 111 is taken (an rpcbind runs): no built-in "
				      "portmapper, registering with it");
	else if (rc < 0)
		rpc_log(RPC_LOG_WARN, "no built-in portmapper: %s", err);
}

int rpc_listen_bind(struct rpc_loop *l, char *err, size_t errlen)
{
	int rc = 0;

	/* Services may share a port (every listener serves every program). */
	for (size_t i = 0; rc == 0 && i < l->cfg.nservices; i++) {
		const struct rpc_service *sv = &l->cfg.services[i];
		uint16_t got = bound_before(l, sv->port);

		if (!got)
			rc = bind_service(l, sv->name, sv->port, &got, err, errlen);
		if (rc == 0)
			rpc_svc_bound(l->svc, sv->name, got);
	}
	if (rc == 0)
		bind_portmapper(l);
	return rc;
}
