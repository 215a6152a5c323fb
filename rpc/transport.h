/* SPDX-License-Identifier: Apache-2.0 */
/* transport.h - what the transport's files share: the loop object, a
 * connection, a listener, and the functions one of them calls in another.
 *
 * The transport moves call records in and reply records out: record.c cuts
 * a TCP byte stream into records; conn.c owns a connection (its read turn on
 * the workers, its calls, its out queue and sending, its close); listen.c
 * binds the ports, admits connections under the limits and reads
 * datagrams; loop.c runs the loop thread and gives the workers their
 * epoll instance.  svc.c turns each record into a reply (rpc_process).
 * Prototypes are grouped by the file that defines them.
 */
#ifndef RPC_TRANSPORT_H
#define RPC_TRANSPORT_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "rpc_private.h"

#define RPC_CONN_MAX_INFLIGHT 64   /* calls per connection before we stop reading */
#define RPC_UDP_MAX_QUEUED    1024 /* datagrams waiting for a worker, all listeners */

enum src_kind { SRC_WAKE, SRC_JOBS, SRC_TCP_LISTEN, SRC_UDP, SRC_CONN };

/* A connection's read turn (conn.c, design notes). */
enum turn { TURN_ARMED, TURN_PARKED };

/* First member of everything registered with epoll: what data.ptr points to. */
struct ev_source {
	enum src_kind kind;
};

struct listener {
	struct ev_source src;
	int fd;
	const char *service; /* its service's name: for log lines */
};

struct outbuf;

struct rpc_conn {
	struct ev_source src;
	atomic_uint refs;
	int fd;
	struct rpc_loop *loop;
	struct sockaddr_storage peer;
	socklen_t peerlen;
	char peer_addr[INET6_ADDRSTRLEN + 16]; /* PEER as text, no port */
	struct sockaddr_storage local;	/* the address PEER called; family 0: unknown */
	struct rpc_rm rm;		/* the read turn's holder only */
	atomic_uint turns;		/* read turns ended: orders rm between holders */
	struct rpc_conn *prev, *next;	/* l->conns or l->dead; loop thread only */
	struct rpc_conn *aprev, *anext; /* l->by_addr chain; loop thread only */
	atomic_uint active;		/* l->now at the last call read or answered */
	struct rpc_conn *note_next;	/* l->noted; under l->note_lock */
	bool noted;			/* on l->noted; under l->note_lock */

	pthread_mutex_t lock; /* guards the fields below (conn.c, rule 4) */
	bool closed;	      /* rpc_conn_close ran: replies are dropped */
	bool rd_eof;	      /* the client sent FIN: close when inflight is 0 */
	bool broken;	      /* a send failed: close */
	bool sending;	      /* a thread writes the socket without the lock */
	unsigned inflight;
	enum turn turn;
	uint32_t events; /* the mask registered in epfd */
	struct outbuf *out_head, *out_tail;
};

struct rpc_loop {
	struct rpc_svc *svc;
	struct rpc_loop_config cfg; /* services: the caller's, outliving the loop */
	int epfd;		    /* the loop thread's */
	int rdfd;		    /* the readers': connections, jobfd */
	struct ev_source wake_src, jobs_src;
	int wakefd; /* eventfd: rpc_loop_stop and note_conn */
	int jobfd;  /* semaphore eventfd in rdfd: the pool's wakes */
	atomic_int stop;
	struct listener lis[2 * (RPC_SVC_MAX_SERVICES + 1)]; /* tcp, udp; 111 */
	size_t nlis;
	int spare_fd; /* held for shed_conns; -1 while it is lent out */
	struct rpc_pool *pool;
	atomic_uint udp_queued;
	struct rpc_conn *conns;	   /* open connections */
	unsigned nconns;	   /* on conns */
	struct rpc_conn **by_addr; /* hash chains of conns by peer address */
	size_t addr_mask;	   /* chains - 1, a power of 2 less one */
	unsigned max_conns, max_per_addr, idle_timeout; /* listen.c, rules 2, 3 */
	atomic_uint now;				/* seconds, CLOCK_MONOTONIC */
	unsigned next_sweep;
	struct rpc_conn *dead; /* closed, loop reference not yet dropped */
	pthread_mutex_t note_lock;
	struct rpc_conn *noted; /* connections workers want the loop to look at */
	uint8_t rx[RPC_RX_BUF_SIZE];
};

/* Calls cut from one read, or one burst of datagrams, in arrival order. */
struct batch {
	struct rpc_job *head, **tailp;
	unsigned n;
};

/* ---- conn.c: a connection ---- */

/* Takes the accepted socket FD from PEER into L's connections (FD closed
 * when that fails).  Loop thread. */
void rpc_conn_add(struct rpc_loop *l, int fd, const struct sockaddr_storage *peer,
		  socklen_t peerlen);
/* Takes C off epoll and the conns list and parks it on l->dead (rule 3).
 * Loop thread only. */
void rpc_conn_close(struct rpc_loop *l, struct rpc_conn *c);
/* The safe point: drops the loop's reference of every closed connection. */
void rpc_conns_reap(struct rpc_loop *l);
/* What epfd reported for C: a hang-up closes it, EPOLLOUT writes its queue. */
void rpc_conn_event(struct rpc_loop *l, struct rpc_conn *c, uint32_t events);
/* Looks at every connection a worker noted (note_conn). */
void rpc_conns_take_notes(struct rpc_loop *l);
/* The worker epoll handed C to: reads, gives the turn back, returns the
 * first call read for the worker to answer (the rest are queued). */
struct rpc_job *rpc_conn_read_turn(struct rpc_loop *l, struct rpc_conn *c, uint8_t *rx);
/* PEER's chain in l->by_addr, the open connections by address (kept by
 * rpc_conn_add and rpc_conn_close; the loop thread's, like l->conns). */
struct rpc_conn **rpc_conn_addr_chain(struct rpc_loop *l,
				      const struct sockaddr_storage *peer);
/* Drops C's armed read turn's reference when no worker is left to take it. */
void rpc_conn_drop_turn(struct rpc_conn *c);
/* A job for RECORD (taken) from PEER, on connection C (a reference taken) or
 * UDP socket UDP_FD, where it came to LOCAL (a datagram's; NULL: unknown, or
 * C's); NULL (record freed) when out of memory. */
struct call_job *rpc_call_job_new(struct rpc_loop *l, struct rpc_conn *c, int udp_fd,
				  const struct sockaddr_storage *peer, socklen_t peerlen,
				  const struct sockaddr_storage *local,
				  struct rpc_buf *record);
void rpc_batch_add(struct batch *b, struct call_job *j);

/* ---- util.c: a datagram's local address ----
 * A host that holds a floating address beside its own must answer a
 * datagram from the address it came to: the kernel would pick the
 * interface's first address for a socket bound to the wildcard, and the
 * client drops a reply from an address it did not call. */

/* Room for the control message rpc_udp_send_from writes (struct
 * in6_pktinfo: its users define _GNU_SOURCE). */
#define RPC_UDP_CMSG_SPACE CMSG_SPACE(sizeof(struct in6_pktinfo))
/* Asks the kernel for the address each datagram on FD (of FAMILY) came to. */
void rpc_udp_want_local(int fd, int family);
/* The address datagram MSG came to, from its control messages, into OUT
 * (family 0: none). */
void rpc_udp_local(struct msghdr *msg, struct sockaddr_storage *out);
/* Makes MSG leave from LOCAL (NULL or family 0: the kernel's choice), its
 * control message in BUF (RPC_UDP_CMSG_SPACE bytes, aligned for cmsghdr). */
void rpc_udp_send_from(struct msghdr *msg, const struct sockaddr_storage *local,
		       void *buf);

/* ---- listen.c: listeners, admission and limits ---- */

/* Binds and registers the TCP and UDP listeners of every service named
 * (ports an earlier service bound are shared), then port 111 if asked. */
int rpc_listen_bind(struct rpc_loop *l, char *err, size_t errlen);
/* Accepts what waits on LIS, each connection admitted or refused (rules 1, 2). */
void rpc_listen_accept(struct rpc_loop *l, struct listener *lis);
/* Reads the datagrams waiting on LIS into jobs for the pool. */
void rpc_listen_read_udp(struct rpc_loop *l, struct listener *lis);
/* Sets the connection caps and the idle timeout from CFG and the descriptor
 * limit, and makes the address table.  -ENOMEM. */
int rpc_conn_limits(struct rpc_loop *l, const struct rpc_loop_config *cfg);
/* Closes every connection idle for more than the timeout (rule 3). */
void rpc_conns_sweep_idle(struct rpc_loop *l, unsigned now);

#endif
