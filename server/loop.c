/* loop.c - the transport: TCP and UDP listeners, record marking, reading
 * connections on the workers, and the loop thread for everything else.
 *
 * Design notes
 *
 * Threads.  The workers (pool.c) read TCP connections themselves: each
 * connection is registered in the readers' epoll instance (rdfd) with
 * EPOLLIN | EPOLLONESHOT, and a worker with nothing queued waits there
 * (worker_wait).  The worker the kernel hands a readable connection to holds
 * its read turn: it reads once, cuts records, re-arms the connection (so the
 * next bytes go to another worker while this one is busy), answers the first
 * call itself and queues the rest for the pool, which wakes another worker
 * only when none is on its way (pool.c).  So the common call costs no
 * hand-off between threads and no wake-up paid by the server, and a slow call
 * holds up only its own thread: the connection's next bytes, other
 * connections and the queued calls are taken by other workers.  (Keeping
 * the turn and reading on after the call instead would spare the wake of
 * the worker that takes the next bytes, but a slow call would hold up its
 * connection, and it measured slower for pipelined GETATTRs: 4.7 -> 5.5 us
 * of server CPU per call.)  A worker
 * answers a call and sends the reply itself: UDP with one sendmsg; TCP by
 * appending it to the connection's out queue and, unless another thread is
 * the connection's sender already, becoming the sender (conn_flush): it takes
 * the whole queue, writes it with the lock dropped, one nonblocking sendmsg
 * for up to 21 replies (a READ whose data waits in a pipe goes alone:
 * sendmsg of its head, then a splice from the pipe, outbuf_write), and goes
 * on while others appended meanwhile.  A worker that finds a sender appends
 * and leaves.  So replies finished while a send runs leave together with
 * the next one (pipelined NULLs: 1 -> 0.6 sendmsg per call), and no worker
 * sleeps on the connection's lock while another sends (that lock used to be
 * held across each sendmsg, a loopback send that runs the client's receive
 * path too).
 *
 * The loop thread (srv_loop_run) accepts connections, reads datagrams (each a
 * job for the pool), writes what waits in a connection's out queue on
 * EPOLLOUT, notices hang-ups and closes connections.  Its instance (epfd)
 * holds each connection with no EPOLLIN: the mask is EPOLLOUT while the out
 * queue has bytes, else empty (errors and hang-ups are always reported).
 * What a socket will not take now waits in the out queue, so a slow client
 * never holds a worker.  Replies leave in completion order; xids pair them
 * with calls.
 *
 * A connection's life:
 *
 *     accept_conns --> OPEN --(EOF read)--> DRAINING --(inflight 0)--+
 *                       |                                           |
 *                       +--(error, HUP, oversize record)------------+--> CLOSED
 *                                                     (close_conn)       |
 *                                  last conn_put (any thread) --> freed <+
 *
 * Its read turn (c->turn, under c->lock).  ARMED covers both "in rdfd" and
 * "handed to a worker" (the kernel hands it over without our lock; nobody
 * but the holder can tell, and nobody else needs to):
 *
 *     ARMED in rdfd --(epoll_wait gives it to a worker: read_turn)--> held
 *     held --(release_turn: may read on; re-armed)--> ARMED in rdfd
 *     held --(release_turn: closed, broken, EOF, inflight limit)--> PARKED
 *     PARKED --(update_events: may read again)--> ARMED in rdfd
 *
 * Invariants:
 *  1. Only the loop thread touches the conns list or closes a connection
 *     (close_conn); a worker that finds a connection should close asks the
 *     loop with note_conn.  Only the holder of a connection's read turn reads
 *     its socket or touches conn->rm; EPOLLONESHOT makes the holder unique.
 *  2. A connection holds one reference for the loop (from accept_conns until
 *     reap_dead), one for its read turn unless PARKED (the armed registration
 *     owns it, and passes it to the worker epoll hands it to, who passes it
 *     back by re-arming or drops it by parking), and one per job that names
 *     it.  The fd is closed and the memory freed by whoever drops the last one
 *     (conn_put), never earlier, so a worker may reply after a hang-up: its
 *     write fails harmlessly or is dropped because conn->closed is set.
 *  3. close_conn does not drop the loop's reference: it moves the connection
 *     to l->dead, and reap_dead drops it before the next epoll_wait (the safe
 *     point), so no event of the current batch can name freed memory.
 *     close_conn shuts the socket down, which makes an ARMED read turn fire:
 *     the worker that gets it reads EOF, finds closed and parks, dropping the
 *     turn's reference.  Nobody but the holder changes rdfd's registration
 *     of an ARMED connection (epoll may hand it over at any moment);
 *     update_events arms only a PARKED one.
 *  4. conn->lock guards closed, rd_eof, broken, sending, inflight, the out
 *     queue, the turn and epfd's mask; every EPOLL_CTL_MOD of a connection
 *     happens under it (update_events, release_turn), so the masks in the
 *     kernel are the ones conn->events and conn->turn say.
 *  5. Bytes of one reply are never interleaved with another's: only the
 *     connection's sender (sending set, under the lock) writes its socket,
 *     one reply after another in queue order.  The sender owns the replies
 *     it took off the queue until it takes the lock again and puts back what
 *     the socket did not take, in front; close_conn frees only what is still
 *     queued, and a sender that comes back to a closed connection drops the
 *     rest.  EPOLLOUT is asked for only while replies wait and no thread is
 *     the sender, so the loop thread never spins on a writable socket that a
 *     worker is writing.
 *  6. inflight counts calls read and not yet fully answered (queued, running,
 *     or in the out queue).  At SRV_CONN_MAX_INFLIGHT the read turn parks,
 *     which bounds the memory one client can make us hold; the reply that
 *     brings inflight under the limit arms it again.
 *  7. A record longer than SRV_MAX_RECORD closes the connection (srv_rm_feed
 *     says so before allocating); a UDP datagram is one record.
 *
 * Connection limits.  Any host that reaches the port could otherwise open
 * connections until the process has no descriptor left, and then no client
 * is served and no MNT can open a layer.  So (admit_conn, sweep_idle):
 *  8. A connection from an address that no client rule of any export could
 *     admit is closed as soon as it is accepted (srv_access_admits_conn):
 *     it costs a descriptor for no time at all.  (No port here must answer
 *     everyone: rpcbind is the system's, not ours.)
 *  9. At most l->max_conns connections are open, and at most
 *     l->max_per_addr from one address.  A connection over a cap closes the
 *     least recently active idle one (no call in flight, nothing to send) of
 *     the address, or of all, as knfsd does, so that clients that went away
 *     without a FIN cannot lock out the ones that came back; when none is
 *     idle the new one is refused.  The default cap is the descriptor limit
 *     less a reserve (conn_limits) for what else holds descriptors: the
 *     lookup cache (a quarter of the limit, union/lookup.c), the payload
 *     pipes (an eighth, arena.c), the client unions (an eighth, unions.c),
 *     each worker's open file, the listeners, and the spare descriptor of
 *     shed_conns.
 * 10. A connection idle for idle_timeout seconds is closed by the sweep the
 *     loop thread runs between batches every SWEEP_DIV-th of the timeout.
 *     Activity costs the hot path one relaxed load and store (c->active
 *     from l->now, the loop thread's coarse clock): no system call.
 *     Only the loop thread touches nconns and the address table (as the
 *     conns list, invariant 1).
 */
#define _GNU_SOURCE /* accept4, splice */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "srv.h"

#define SRV_CONN_MAX_INFLIGHT 64    /* calls per connection before we stop reading */
#define SRV_UDP_MAX_QUEUED    1024  /* datagrams waiting for a worker, all listeners */
#define RX_BUF_SIZE	      65536 /* one read(2); also the largest UDP datagram */
#define MAX_EVENTS	      64
#define RM_FIRST_CAP	      512 /* bytes: a record buffer's first size */
#define RM_DIRECT_MIN                                                                    \
	16384 /* fragment bytes to come worth a read straight into the record */
#define BIND_RETRIES	    8 /* tries for a TCP+UDP pair on one ephemeral port */
#define UDP_SOCKBUF	    (4 * 1024 * 1024)
#define CONNS_CEILING	    65536 /* default cap however high the limit */
#define CONNS_FIXED_RESERVE 64	  /* descriptors: listeners, epoll, logs, MNT */
#define PER_ADDR_MIN	    16	  /* default per-address cap, at least */
#define PER_ADDR_PART	    8	  /* ... else an 8th of the global cap */
#define SWEEP_DIV	    8	  /* idle sweeps per timeout */
#define SWEEP_MAX_S	    30	  /* seconds between sweeps, at most */
#define TICK_MS		    1000 /* the loop's clock, l->now, advances at least this often */

enum src_kind { SRC_WAKE, SRC_JOBS, SRC_TCP_LISTEN, SRC_UDP, SRC_CONN };

/* A connection's read turn (design notes). */
enum turn { TURN_ARMED, TURN_PARKED };

/* First member of everything registered with epoll: what data.ptr points to. */
struct ev_source {
	enum src_kind kind;
};

struct listener {
	struct ev_source src;
	int fd;
	const char *service; /* "nfs" or "mount": for log lines */
};

/* A reply waiting in a connection's out queue: record mark, then body (its
 * bytes, then its payload). */
struct outbuf {
	struct outbuf *next;
	uint8_t mark[4];
	struct srv_buf body;
	size_t off; /* bytes of mark + body already sent */
};
#define OUTBUF_IOV  3
#define SEND_IOV    64 /* iovecs of one sendmsg: up to 21 replies */
#define SEND_ROUNDS 8  /* a sender's rounds before the loop thread takes over */

struct srv_conn {
	struct ev_source src;
	atomic_uint refs;
	int fd;
	struct srv_loop *loop;
	struct sockaddr_storage peer;
	socklen_t peerlen;
	struct srv_rm rm;		/* the read turn's holder only */
	atomic_uint turns;		/* read turns ended: orders rm between holders */
	struct srv_conn *prev, *next;	/* l->conns or l->dead; loop thread only */
	struct srv_conn *aprev, *anext; /* l->by_addr chain; loop thread only */
	atomic_uint active;		/* l->now at the last call read or answered */
	struct srv_conn *note_next;	/* l->noted; under l->note_lock */
	bool noted;			/* on l->noted; under l->note_lock */

	pthread_mutex_t lock; /* guards the fields below (invariant 4) */
	bool closed;	      /* close_conn ran: replies are dropped */
	bool rd_eof;	      /* the client sent FIN: close when inflight is 0 */
	bool broken;	      /* a send failed: close */
	bool sending;	      /* a thread writes the socket without the lock */
	unsigned inflight;
	enum turn turn;
	uint32_t events; /* the mask registered in epfd */
	struct outbuf *out_head, *out_tail;
};

struct srv_loop {
	struct srv *srv;
	int epfd; /* the loop thread's */
	int rdfd; /* the readers': connections, jobfd */
	struct ev_source wake_src, jobs_src;
	int wakefd; /* eventfd: srv_loop_stop and note_conn */
	int jobfd;  /* semaphore eventfd in rdfd: the pool's wakes */
	atomic_int stop;
	struct listener lis[4];
	size_t nlis;
	int spare_fd; /* held for shed_conns; -1 while it is lent out */
	uint16_t nfs_port, mount_port;
	struct srv_pool *pool;
	atomic_uint udp_queued;
	struct srv_conn *conns;	   /* open connections */
	unsigned nconns;	   /* on conns */
	struct srv_conn **by_addr; /* hash chains of conns by peer address */
	size_t addr_mask;	   /* chains - 1, a power of 2 less one */
	unsigned max_conns, max_per_addr, idle_timeout; /* invariants 9, 10 */
	atomic_uint now;				/* seconds, CLOCK_MONOTONIC */
	unsigned next_sweep;
	struct srv_conn *dead; /* closed, loop reference not yet dropped */
	pthread_mutex_t note_lock;
	struct srv_conn *noted; /* connections workers want the loop to look at */
	uint8_t rx[RX_BUF_SIZE];
};

/* A call on its way to a worker; owns its record and (TCP) a connection ref. */
struct call_job {
	struct srv_job job;
	struct srv_loop *loop;
	struct srv_conn *conn; /* NULL for UDP */
	int udp_fd;
	struct sockaddr_storage peer;
	socklen_t peerlen;
	struct srv_buf call;
};

/* ---- record marking (RFC 5531 section 11): pure, driven by bytes ---- */

void srv_rm_init(struct srv_rm *r, size_t max)
{
	memset(r, 0, sizeof(*r));
	r->max = max;
}

void srv_rm_free(struct srv_rm *r)
{
	srv_buf_free(&r->rec);
}

void srv_rm_take(struct srv_rm *r, struct srv_buf *out)
{
	*out = r->rec;
	r->rec = (struct srv_buf){0};
	r->in_frag = false;
	r->last = false;
	r->hdr_have = 0;
}

/* Grows the record buffer to hold NEED bytes, doubling so that a client that
 * announces a large fragment costs memory only as its bytes arrive.  The
 * first size fits a metadata call, in a block malloc's per-thread cache
 * serves. */
static bool rm_grow(struct srv_rm *r, size_t need)
{
	size_t cap = r->rec.cap ? r->rec.cap : RM_FIRST_CAP;
	uint8_t *p;

	if (need <= r->rec.cap)
		return true;
	while (cap < need)
		cap *= 2;
	if (cap > r->max)
		cap = need;
	p = realloc(r->rec.data, cap);
	if (!p)
		return false;
	r->rec.data = p;
	r->rec.cap = cap;
	return true;
}

/* Reads a fragment header from P; true when the 4 bytes are complete. */
static bool rm_header(struct srv_rm *r, const uint8_t *p, size_t n, size_t *used)
{
	size_t take = 4 - r->hdr_have;
	uint32_t word;

	if (take > n)
		take = n;
	memcpy(r->hdr + r->hdr_have, p, take);
	r->hdr_have += (uint8_t)take;
	*used = take;
	if (r->hdr_have < 4)
		return false;
	memcpy(&word, r->hdr, 4);
	word = ntohl(word);
	r->hdr_have = 0;
	r->last = (word & 0x80000000u) != 0;
	r->frag_left = word & 0x7fffffffu;
	r->in_frag = true;
	return true;
}

size_t srv_rm_feed(struct srv_rm *r, const uint8_t *p, size_t n, enum srv_rm_status *st)
{
	size_t used = 0, take;

	*st = SRV_RM_MORE;
	while (used < n || (r->in_frag && r->frag_left == 0)) {
		if (!r->in_frag) {
			if (!rm_header(r, p + used, n - used, &take))
				return used + take;
			used += take;
			if (r->frag_left > r->max - r->rec.len) {
				*st = SRV_RM_TOOBIG;
				return used;
			}
		}
		take = n - used < r->frag_left ? n - used : r->frag_left;
		if (take > 0) {
			if (!rm_grow(r, r->rec.len + take)) {
				*st = SRV_RM_TOOBIG;
				return used;
			}
			memcpy(r->rec.data + r->rec.len, p + used, take);
			r->rec.len += take;
		}
		r->frag_left -= (uint32_t)take;
		used += take;
		if (r->frag_left > 0)
			break;
		r->in_frag = false;
		if (r->last) {
			*st = SRV_RM_RECORD;
			break;
		}
	}
	return used;
}

uint8_t *srv_rm_direct(struct srv_rm *r, size_t *room)
{
	size_t step;

	if (!r->in_frag || r->frag_left < RM_DIRECT_MIN)
		return NULL;
	/* The fragment's whole rest once a reader's buffer of the record has
	 * arrived, before that one buffer's worth: a client holds memory only
	 * for bytes it sent, give or take one read (invariant 7 bounds it). */
	step = r->rec.len >= RX_BUF_SIZE ? r->frag_left : RX_BUF_SIZE;
	if (step > r->frag_left)
		step = r->frag_left;
	if (!rm_grow(r, r->rec.len + step))
		return NULL; /* srv_rm_feed meets the ENOMEM and says so */
	*room = r->rec.cap - r->rec.len < r->frag_left ? r->rec.cap - r->rec.len
						       : r->frag_left;
	return r->rec.data + r->rec.len;
}

void srv_rm_direct_done(struct srv_rm *r, size_t n, enum srv_rm_status *st)
{
	r->rec.len += n;
	r->frag_left -= (uint32_t)n;
	*st = SRV_RM_MORE;
	if (r->frag_left > 0)
		return;
	r->in_frag = false;
	if (r->last)
		*st = SRV_RM_RECORD;
}

/* ---- connections: references and the out queue ---- */

static struct srv_conn *conn_get(struct srv_conn *c)
{
	atomic_fetch_add(&c->refs, 1);
	return c;
}

/* Notes that C is in use now (invariant 10): no system call.  Any thread. */
static void conn_touch(struct srv_conn *c)
{
	unsigned now = atomic_load_explicit(&c->loop->now, memory_order_relaxed);

	atomic_store_explicit(&c->active, now, memory_order_relaxed);
}

/* Frees the replies of LIST; returns how many there were. */
static unsigned outbufs_free(struct outbuf *list)
{
	struct outbuf *next;
	unsigned n = 0;

	for (; list; list = next, n++) {
		next = list->next;
		srv_buf_free(&list->body);
		free(list);
	}
	return n;
}

static void outq_free(struct srv_conn *c)
{
	outbufs_free(c->out_head);
	c->out_head = c->out_tail = NULL;
}

/* Drops the queued replies unsent: their calls end.  Under c->lock. */
static void outq_drop(struct srv_conn *c)
{
	c->inflight -= outbufs_free(c->out_head);
	c->out_head = c->out_tail = NULL;
}

/* Drops a reference; the last one closes the fd and frees C (invariant 2).
 * Any thread. */
static void conn_put(struct srv_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	close(c->fd);
	srv_rm_free(&c->rm);
	outq_free(c);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Under c->lock: whether C's read turn may be armed (invariant 6). */
static bool may_read(const struct srv_conn *c)
{
	return !c->closed && !c->broken && !c->rd_eof &&
	       c->inflight < SRV_CONN_MAX_INFLIGHT;
}

static void note_conn(struct srv_conn *c);

/* Arms C's read turn in rdfd: by the holder (HELD) or from PARKED; the caller
 * gives it the turn's reference (invariant 2).  A connection that cannot be
 * armed could never be read again: it is marked broken and the loop asked to
 * close it.  Under c->lock. */
static bool arm_turn(struct srv_conn *c)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = &c->src};

	if (epoll_ctl(c->loop->rdfd, EPOLL_CTL_MOD, c->fd, &ev) == 0) {
		c->turn = TURN_ARMED;
		return true;
	}
	SRV_LOG_LIMITED(SRV_LOG_ERR, "cannot re-arm a connection: %s", strerror(errno));
	c->turn = TURN_PARKED;
	c->broken = true;
	note_conn(c);
	return false;
}

/* Sets epfd's mask from the state, and arms a PARKED read turn that may read
 * again (invariants 3, 4, 6).  Under c->lock; any thread. */
static void update_events(struct srv_conn *c)
{
	uint32_t want = c->out_head && !c->sending ? EPOLLOUT : 0;
	struct epoll_event ev;

	if (c->closed)
		return;
	if (c->turn == TURN_PARKED && may_read(c)) {
		conn_get(c); /* the armed turn's */
		if (!arm_turn(c))
			atomic_fetch_sub(&c->refs,
					 1); /* never the last: the caller has one */
	}
	if (want == c->events)
		return;
	ev.events = want;
	ev.data.ptr = &c->src;
	if (epoll_ctl(c->loop->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
		c->events = want;
}

/* Under c->lock. */
static bool conn_should_close(const struct srv_conn *c)
{
	return !c->closed && (c->broken || (c->rd_eof && c->inflight == 0));
}

/* Asks the loop thread to look at C (invariant 1).  Under c->lock; any thread. */
static void note_conn(struct srv_conn *c)
{
	struct srv_loop *l = c->loop;
	uint64_t one = 1;

	pthread_mutex_lock(&l->note_lock);
	if (!c->noted) {
		c->noted = true;
		c->note_next = l->noted;
		l->noted = conn_get(c);
	}
	pthread_mutex_unlock(&l->note_lock);
	if (write(l->wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		SRV_LOG_LIMITED(SRV_LOG_ERR, "cannot wake the event loop: %s",
				strerror(errno));
}

/* The unsent bytes of OB that are in memory, as iovecs: record mark, reply
 * bytes and payload buffer, so that one sendmsg writes them without joining
 * them.  A payload with bytes in a pipe (sent by outbuf_write) splits them:
 * before the pipe's bytes the iovecs end there and *MORE says more follows;
 * past them only the payload buffer is left. */
static int outbuf_iov(const struct outbuf *ob, struct iovec iov[OUTBUF_IOV], bool *more)
{
	const struct srv_payload *p = ob->body.payload;
	const struct iovec part[OUTBUF_IOV] = {
	    {(void *)ob->mark, 4},
	    {ob->body.data, ob->body.len},
	    {p ? p->data : NULL, p ? p->len : 0},
	};
	size_t skip = ob->off, head = 4 + ob->body.len, piped = p ? p->piped : 0;
	int first = 0, end = OUTBUF_IOV, n = 0;

	*more = false;
	if (piped && skip >= head) {
		skip -= head + piped;
		first = 2;
	} else if (piped) {
		end = 2;
		*more = true;
	}
	for (int i = first; i < end; i++) {
		if (skip >= part[i].iov_len) {
			skip -= part[i].iov_len;
			continue;
		}
		iov[n].iov_base = (uint8_t *)part[i].iov_base + skip;
		iov[n++].iov_len = part[i].iov_len - skip;
		skip = 0;
	}
	return n;
}

/* Writes the next unsent bytes of OB to socket FD: those in memory with one
 * sendmsg, those in the payload's pipe with splice (the socket takes the
 * page references the pipe holds: no copy).  splice has no MSG_NOSIGNAL: the
 * program ignores SIGPIPE (main.c).  Returns the bytes written or -errno. */
static ssize_t outbuf_write(int fd, struct outbuf *ob)
{
	struct srv_payload *p = ob->body.payload;
	size_t head = 4 + ob->body.len;
	struct iovec iov[OUTBUF_IOV];
	struct msghdr msg = {.msg_iov = iov};
	bool more;
	ssize_t n;

	if (p && p->piped && ob->off >= head && ob->off < head + p->piped) {
		n = splice(p->pipe[0], NULL, fd, NULL, p->in_pipe,
			   SPLICE_F_NONBLOCK | (p->len ? SPLICE_F_MORE : 0));
		if (n == 0)
			return -EPIPE; /* the pipe cannot be empty: give up */
		if (n > 0)
			p->in_pipe -= (size_t)n;
		return n < 0 ? -errno : n;
	}
	msg.msg_iovlen = (size_t)outbuf_iov(ob, iov, &more);
	n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT | (more ? MSG_MORE : 0));
	return n < 0 ? -errno : n;
}

/* The iovecs of the replies at the head of LIST that one sendmsg can take:
 * up to SEND_IOV of them, stopping before a reply with a piped payload (that
 * one goes alone through outbuf_write).  Returns the count, 0 when LIST's
 * head is such a reply. */
static int batch_iov(const struct outbuf *list, struct iovec iov[SEND_IOV])
{
	int n = 0;
	bool more;

	for (const struct outbuf *ob = list; ob && n + OUTBUF_IOV <= SEND_IOV;
	     ob = ob->next) {
		if (ob->body.payload && ob->body.payload->piped)
			break;
		n += outbuf_iov(ob, iov + n, &more);
	}
	return n;
}

/* Counts N bytes written against the replies of *LIST, moving those fully
 * written to *DONE (which keeps their order reversed: they are only freed). */
static void batch_consume(struct outbuf **list, size_t n, struct outbuf **done)
{
	struct outbuf *ob;
	size_t left;

	while ((ob = *list) != NULL) {
		left = 4 + srv_buf_wire_len(&ob->body) - ob->off;
		if (n < left) {
			ob->off += n;
			return;
		}
		n -= left;
		*list = ob->next;
		ob->next = *done;
		*done = ob;
	}
}

/* Writes the replies of *LIST (the sender's, off the queue) until all are
 * written or the socket is full: as many as fit with one sendmsg at a time, a
 * reply whose payload waits in a pipe alone (outbuf_write).  Fully written
 * replies move to *DONE; *LIST keeps the rest.  Without c->lock.  Returns 0,
 * or a negative errno when the socket is broken. */
static int send_batch(int fd, struct outbuf **list, struct outbuf **done)
{
	struct iovec iov[SEND_IOV];
	struct msghdr msg = {.msg_iov = iov};
	ssize_t n;

	while (*list) {
		msg.msg_iovlen = (size_t)batch_iov(*list, iov);
		if (msg.msg_iovlen > 0) {
			n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
			n = n < 0 ? -errno : n;
		} else {
			n = outbuf_write(fd, *list);
		}
		if (n < 0)
			return n == -EAGAIN || n == -EINTR ? 0 : (int)n;
		batch_consume(list, (size_t)n, done);
	}
	return 0;
}

/* Puts LIST (unsent replies the sender took) back at the head of the queue,
 * before what others appended meanwhile.  Under c->lock. */
static void outq_requeue(struct srv_conn *c, struct outbuf *list)
{
	struct outbuf *tail = list;

	if (!list)
		return;
	while (tail->next)
		tail = tail->next;
	tail->next = c->out_head;
	if (!c->out_head)
		c->out_tail = tail;
	c->out_head = list;
}

/* Marks C broken after a failed send; its queued replies are dropped.  Under
 * c->lock. */
static void conn_break(struct srv_conn *c, int err)
{
	char peer[INET6_ADDRSTRLEN + 16];

	outq_drop(c);
	if (!c->broken)
		SRV_LOG_LIMITED(SRV_LOG_INFO, "connection from %s: send failed: %s",
				srv_addr_str(&c->peer, true, peer, sizeof(peer)),
				strerror(-err));
	c->broken = true;
}

/* Makes the caller C's sender unless another thread is (invariant 5): takes
 * the whole queue, writes it without the lock, and goes on while others
 * appended meanwhile, up to SEND_ROUNDS times; what the socket would not
 * take, or what is left after the last round, goes out from the loop on
 * EPOLLOUT (update_events).  A worker that finds a sender appends its reply
 * and leaves: it neither waits for the lock across a send nor makes a
 * system call of its own.  Under c->lock, which it drops and takes again. */
static void conn_flush(struct srv_conn *c)
{
	struct outbuf *list, *done;
	unsigned sent;
	int rc = 0;

	if (c->sending)
		return;
	c->sending = true;
	for (int round = 0; round < SEND_ROUNDS && c->out_head && rc == 0; round++) {
		if (c->closed || c->broken)
			break;
		list = c->out_head;
		c->out_head = c->out_tail = NULL;
		pthread_mutex_unlock(&c->lock);
		done = NULL;
		rc = send_batch(c->fd, &list, &done);
		sent = outbufs_free(done);
		pthread_mutex_lock(&c->lock);
		c->inflight -= sent;
		outq_requeue(c, list);
		if (rc < 0)
			conn_break(c, rc);
		if (list)
			break; /* the socket is full */
	}
	if (c->closed)
		outq_drop(c); /* close_conn left what we held */
	c->sending = false;
}

/* Queues REPLY on C (taking it) and writes what the socket takes now; the rest
 * goes out from the loop on EPOLLOUT.  Never blocks.  Any thread; the caller
 * holds a reference to C. */
static void conn_send(struct srv_conn *c, struct srv_buf *reply)
{
	struct outbuf *ob = calloc(1, sizeof(*ob));
	uint32_t mark = htonl(0x80000000u | (uint32_t)srv_buf_wire_len(reply));

	pthread_mutex_lock(&c->lock);
	if (!ob || c->closed || c->broken) {
		free(ob);
		srv_buf_free(reply);
		c->inflight--;
		goto out;
	}
	conn_touch(c);
	memcpy(ob->mark, &mark, 4);
	ob->body = *reply;
	*reply = (struct srv_buf){0};
	if (c->out_tail)
		c->out_tail->next = ob;
	else
		c->out_head = ob;
	c->out_tail = ob;
	conn_flush(c);
out:
	if (conn_should_close(c))
		note_conn(c);
	else
		update_events(c);
	pthread_mutex_unlock(&c->lock);
}

/* A call that gets no reply still ends: inflight drops.  Any thread. */
static void conn_call_done(struct srv_conn *c)
{
	pthread_mutex_lock(&c->lock);
	c->inflight--;
	if (conn_should_close(c))
		note_conn(c);
	else
		update_events(c);
	pthread_mutex_unlock(&c->lock);
}

/* ---- workers: one call each ---- */

/* Sends REPLY (bytes, then payload) as one datagram. */
static void udp_send(struct call_job *j, const struct srv_buf *reply)
{
	char peer[INET6_ADDRSTRLEN + 16];
	struct iovec iov[2] = {
	    {reply->data, reply->len},
	    {reply->payload ? reply->payload->data : NULL,
	     reply->payload ? reply->payload->len : 0},
	};
	struct msghdr msg = {
	    .msg_name = &j->peer,
	    .msg_namelen = j->peerlen,
	    .msg_iov = iov,
	    .msg_iovlen = reply->payload ? 2 : 1,
	};

	if (sendmsg(j->udp_fd, &msg, MSG_DONTWAIT) >= 0)
		return;
	/* A full socket buffer is ordinary on UDP (the client retransmits); a
	 * reply too large for one datagram means a handler ignored
	 * SRV_MAX_UDP_IO, worth a warning. */
	SRV_LOG_LIMITED(
	    errno == EMSGSIZE ? SRV_LOG_WARN : SRV_LOG_DEBUG,
	    "udp reply of %zu bytes to %s dropped: %s", srv_buf_wire_len(reply),
	    srv_addr_str(&j->peer, true, peer, sizeof(peer)), strerror(errno));
}

/* The pool's entry point for a call: answers it and frees the job, dropping
 * its connection reference. */
static void run_call_job(struct srv_job *job)
{
	struct call_job *j = (struct call_job *)job;
	int proto = j->conn ? IPPROTO_TCP : IPPROTO_UDP;
	struct srv_buf reply = {0};
	bool answer;

	answer = srv_rpc_handle(j->loop->srv, j->call.data, j->call.len, &j->peer,
				j->peerlen, proto, &reply);
	if (j->conn) {
		if (answer)
			conn_send(j->conn, &reply);
		else
			conn_call_done(j->conn);
		conn_put(j->conn);
	} else {
		if (answer)
			udp_send(j, &reply);
		atomic_fetch_sub(&j->loop->udp_queued, 1);
	}
	srv_buf_free(&reply);
	srv_buf_free(&j->call);
	free(j);
}

/* Calls cut from one read, or one burst of datagrams, in arrival order. */
struct batch {
	struct srv_job *head, **tailp;
	unsigned n;
};

/* A job for RECORD (taken); NULL (record freed) when out of memory. */
static struct call_job *new_call_job(struct srv_loop *l, struct srv_conn *c, int udp_fd,
				     const struct sockaddr_storage *peer,
				     socklen_t peerlen, struct srv_buf *record)
{
	struct call_job *j = calloc(1, sizeof(*j));

	if (!j) {
		SRV_LOG_LIMITED(SRV_LOG_ERR, "out of memory: call dropped");
		srv_buf_free(record);
		return NULL;
	}
	j->job.run = run_call_job;
	j->loop = l;
	j->conn = c ? conn_get(c) : NULL;
	j->udp_fd = udp_fd;
	memcpy(&j->peer, peer, peerlen);
	j->peerlen = peerlen;
	j->call = *record;
	*record = (struct srv_buf){0};
	return j;
}

static void batch_add(struct batch *b, struct call_job *j)
{
	*b->tailp = &j->job;
	b->tailp = &j->job.next;
	b->n++;
}

/* ---- workers: the read turn ---- */

/* Moves C's complete record into a job on B (dropped, logged, without
 * memory). */
static void queue_record(struct srv_loop *l, struct srv_conn *c, struct batch *b)
{
	struct srv_buf record;
	struct call_job *j;

	srv_rm_take(&c->rm, &record);
	j = new_call_job(l, c, -1, &c->peer, c->peerlen, &record);
	if (j)
		batch_add(b, j);
}

/* Cuts BUF into records, each a job on B; false when C must close. */
static bool feed_conn(struct srv_loop *l, struct srv_conn *c, const uint8_t *buf,
		      size_t n, struct batch *b)
{
	enum srv_rm_status st;
	char peer[INET6_ADDRSTRLEN + 16];
	size_t used;

	while (n > 0) {
		used = srv_rm_feed(&c->rm, buf, n, &st);
		buf += used;
		n -= used;
		if (st == SRV_RM_TOOBIG) {
			SRV_LOG_LIMITED(
			    SRV_LOG_WARN,
			    "closing connection from %s: record over %u bytes",
			    srv_addr_str(&c->peer, true, peer, sizeof(peer)),
			    SRV_MAX_RECORD);
			return false;
		}
		if (st == SRV_RM_RECORD)
			queue_record(l, c, b);
	}
	return true;
}

/* One read(2) of C, its records jobs on B (*OK false when C must close):
 * the rest of a large fragment (a WRITE's data) goes straight into the
 * record, other bytes through RX, from which feed_conn cuts the records. */
static ssize_t read_conn(struct srv_loop *l, struct srv_conn *c, uint8_t *rx,
			 struct batch *b, bool *ok)
{
	enum srv_rm_status st;
	size_t room;
	uint8_t *dst = srv_rm_direct(&c->rm, &room);
	ssize_t n;

	if (!dst) {
		n = read(c->fd, rx, RX_BUF_SIZE);
		if (n > 0)
			*ok = feed_conn(l, c, rx, (size_t)n, b);
		return n;
	}
	n = read(c->fd, dst, room);
	if (n <= 0)
		return n;
	srv_rm_direct_done(&c->rm, (size_t)n, &st);
	if (st == SRV_RM_RECORD)
		queue_record(l, c, b);
	return n;
}

/* Ends the holder's read turn (invariant 3): re-armed when C may read on,
 * else parked.  True when parked: the caller drops the turn's reference once
 * it has unlocked.  Under c->lock. */
static bool release_turn(struct srv_conn *c)
{
	/* The next holder reads this before touching rm (read_turn): epoll
	 * orders the two threads too, but not in a way the C memory model or a
	 * race detector can see. */
	atomic_fetch_add_explicit(&c->turns, 1, memory_order_release);
	if (may_read(c) && arm_turn(c))
		return false;
	c->turn = TURN_PARKED;
	return true;
}

/* The worker that epoll handed C to holds its read turn: reads once, gives
 * the turn back (re-armed, so the next bytes go to another worker, or
 * parked), queues every call read but the first, and returns that one for
 * the worker to answer itself. */
static struct srv_job *read_turn(struct srv_loop *l, struct srv_conn *c, uint8_t *rx)
{
	struct batch b = {.tailp = &b.head};
	struct srv_job *first;
	bool ok = true, parked;
	ssize_t n;

	atomic_load_explicit(&c->turns, memory_order_acquire);
	n = read_conn(l, c, rx, &b, &ok);
	if (n > 0)
		conn_touch(c);
	else if (n < 0 && errno != EAGAIN && errno != EINTR)
		ok = false;
	pthread_mutex_lock(&c->lock);
	c->inflight += b.n;
	if (n == 0)
		c->rd_eof = true; /* answer what was asked, then close */
	if (!ok)
		c->broken = true;
	parked = release_turn(c);
	if (conn_should_close(c))
		note_conn(c);
	pthread_mutex_unlock(&c->lock);
	if (parked)
		conn_put(c); /* the turn's: C may be gone now */
	first = b.head;
	if (first) {
		srv_pool_submit(l->pool, first->next);
		first->next = NULL;
	}
	return first;
}

/* The pool's wake arrived: take it, and arm jobfd again, so a wake still
 * counted (srv_pool_free sends one per worker) goes to the next waiter. */
static void take_wake(struct srv_loop *l)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT,
				 .data.ptr = &l->jobs_src};
	uint64_t one;

	if (read(l->jobfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		SRV_LOG_LIMITED(SRV_LOG_ERR, "worker wake-up: %s", strerror(errno));
	if (epoll_ctl(l->rdfd, EPOLL_CTL_MOD, l->jobfd, &ev) < 0)
		SRV_LOG_LIMITED(SRV_LOG_ERR, "cannot re-arm the worker wake-up: %s",
				strerror(errno));
}

/* srv_pool_ops.wait: one event of rdfd. */
static struct srv_job *worker_wait(void *arg, void *scratch, bool *woken)
{
	struct srv_loop *l = arg;
	struct epoll_event ev;
	struct ev_source *src;

	if (epoll_wait(l->rdfd, &ev, 1, -1) != 1)
		return NULL; /* EINTR: the worker looks at the FIFO and comes back */
	src = ev.data.ptr;
	if (src->kind == SRC_CONN)
		return read_turn(l, (struct srv_conn *)src, scratch);
	take_wake(l);
	*woken = true;
	return NULL;
}

/* srv_pool_ops.wake: one waiter of rdfd returns (jobfd counts wakes). */
static void worker_wake(void *arg)
{
	struct srv_loop *l = arg;
	uint64_t one = 1;

	if (write(l->jobfd, &one, sizeof(one)) < 0)
		SRV_LOG_LIMITED(SRV_LOG_ERR, "cannot wake a worker: %s", strerror(errno));
}

/* ---- the loop thread: connection limits (invariants 8-10) ---- */

static void close_conn(struct srv_loop *l, struct srv_conn *c);

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	const struct sockaddr_in *a4 = (const void *)a, *b4 = (const void *)b;
	const struct sockaddr_in6 *a6 = (const void *)a, *b6 = (const void *)b;

	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return a4->sin_addr.s_addr == b4->sin_addr.s_addr;
	return memcmp(&a6->sin6_addr, &b6->sin6_addr, sizeof(a6->sin6_addr)) == 0;
}

/* PEER's chain in l->by_addr (FNV-1a of the address bytes). */
static struct srv_conn **addr_chain(struct srv_loop *l,
				    const struct sockaddr_storage *peer)
{
	const struct sockaddr_in *p4 = (const void *)peer;
	const struct sockaddr_in6 *p6 = (const void *)peer;
	const uint8_t *b = peer->ss_family == AF_INET ? (const uint8_t *)&p4->sin_addr
						      : (const uint8_t *)&p6->sin6_addr;
	size_t n = peer->ss_family == AF_INET ? 4 : 16;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 16777619u;
	return &l->by_addr[h & l->addr_mask];
}

static void addr_link(struct srv_loop *l, struct srv_conn *c)
{
	struct srv_conn **head = addr_chain(l, &c->peer);

	c->aprev = NULL;
	c->anext = *head;
	if (*head)
		(*head)->aprev = c;
	*head = c;
}

static void addr_unlink(struct srv_loop *l, struct srv_conn *c)
{
	if (c->aprev)
		c->aprev->anext = c->anext;
	else
		*addr_chain(l, &c->peer) = c->anext;
	if (c->anext)
		c->anext->aprev = c->aprev;
	c->aprev = c->anext = NULL;
}

/* Whether C has no call in flight and nothing to send: closing it loses
 * nothing (the client reconnects when it has a call to make). */
static bool conn_idle(struct srv_conn *c)
{
	bool idle;

	pthread_mutex_lock(&c->lock);
	idle = !c->closed && c->inflight == 0 && !c->out_head && !c->sending;
	pthread_mutex_unlock(&c->lock);
	return idle;
}

static unsigned conn_active(const struct srv_conn *c)
{
	return atomic_load_explicit(&c->active, memory_order_relaxed);
}

/* Of BEST (idle, or NULL) and C, the idle one least recently active; on a
 * tie the one further down the list, which was accepted earlier. */
static struct srv_conn *older_idle(struct srv_conn *best, struct srv_conn *c)
{
	if (best && conn_active(c) > conn_active(best))
		return best;
	return conn_idle(c) ? c : best;
}

/* Makes room for a connection from PEER (invariant 9): when PEER's address,
 * or the server, is at its cap, closes the least recently active idle
 * connection there.  False when none is idle: the new one is refused. */
static bool make_room(struct srv_loop *l, const struct sockaddr_storage *peer)
{
	struct srv_conn *c, *victim = NULL;
	char peername[INET6_ADDRSTRLEN + 16];
	unsigned same = 0;
	bool per_addr;

	for (c = *addr_chain(l, peer); c; c = c->anext)
		same += same_addr(&c->peer, peer);
	per_addr = same >= l->max_per_addr;
	if (!per_addr && l->nconns < l->max_conns)
		return true;
	for (c = per_addr ? *addr_chain(l, peer) : l->conns; c;
	     c = per_addr ? c->anext : c->next)
		if (!per_addr || same_addr(&c->peer, peer))
			victim = older_idle(victim, c);
	SRV_LOG_LIMITED(SRV_LOG_WARN, "connection from %s: %u connections%s open: %s",
			srv_addr_str(peer, false, peername, sizeof(peername)),
			per_addr ? l->max_per_addr : l->max_conns,
			per_addr ? " of its address" : "",
			victim ? "closed the least recently used idle one"
			       : "none idle, refused the new one");
	if (victim)
		close_conn(l, victim);
	return victim != NULL;
}

/* Whether a connection just accepted from PEER may stay (invariants 8, 9). */
static bool admit_conn(struct srv_loop *l, const struct sockaddr_storage *peer)
{
	char peername[INET6_ADDRSTRLEN + 16];

	if (srv_access_admits_conn(l->srv, peer))
		return make_room(l, peer);
	SRV_LOG_LIMITED(SRV_LOG_INFO,
			"connection from %s closed: no client rule admits it",
			srv_addr_str(peer, false, peername, sizeof(peername)));
	return false;
}

/* Closes FD with a reset: a refused peer leaves no TIME_WAIT behind. */
static void refuse_conn(int fd)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

/* Closes every connection idle for more than the timeout (invariant 10). */
static void sweep_idle(struct srv_loop *l, unsigned now)
{
	struct srv_conn *c, *next;

	for (c = l->conns; c; c = next) {
		next = c->next; /* close_conn moves C to l->dead */
		if (now - conn_active(c) > l->idle_timeout && conn_idle(c))
			close_conn(l, c);
	}
}

/* Advances l->now and runs the idle sweep when it is due.  Loop thread. */
static void loop_tick(struct srv_loop *l)
{
	struct timespec ts;
	unsigned now, every;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (unsigned)ts.tv_sec;
	atomic_store_explicit(&l->now, now, memory_order_relaxed);
	if (!l->idle_timeout || now < l->next_sweep)
		return;
	sweep_idle(l, now);
	every = l->idle_timeout / SWEEP_DIV;
	every = every < 1 ? 1 : every > SWEEP_MAX_S ? SWEEP_MAX_S : every;
	l->next_sweep = now + every;
}

/* The descriptors connections may have: the limit less what the rest of the
 * server may hold at once (invariant 9), but at least an 8th of it. */
static unsigned long conn_room(const struct srv_config *cfg)
{
	unsigned long fds = 1024, reserve;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		fds =
		    rl.rlim_cur == RLIM_INFINITY ? 1ul << 20 : (unsigned long)rl.rlim_cur;
	reserve = fds / 4 + fds / 8 + fds / SRV_UNIONS_FDS_PART + 2ul * cfg->nthreads +
		  CONNS_FIXED_RESERVE;
	return fds > reserve + fds / 8 ? fds - reserve : fds / 8 + 1;
}

/* Sets the caps and the timeout from the configuration and the descriptor
 * limit, and makes the address table.  -ENOMEM. */
static int conn_limits(struct srv_loop *l, const struct srv_config *cfg)
{
	unsigned long room = conn_room(cfg);
	size_t chains = 64;

	l->max_conns = (unsigned)(room < CONNS_CEILING ? room : CONNS_CEILING);
	if (cfg->max_conns && cfg->max_conns <= room)
		l->max_conns = cfg->max_conns;
	else if (cfg->max_conns)
		srv_log(SRV_LOG_WARN,
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
	srv_log(SRV_LOG_INFO,
		"connections: at most %u, %u per address; idle ones closed after %u s "
		"(0: never)",
		l->max_conns, l->max_per_addr, l->idle_timeout);
	return l->by_addr ? 0 : -ENOMEM;
}

/* ---- the loop thread: connections ---- */

/* Takes C off epoll and the conns list and parks it on l->dead (invariant 3).
 * Loop thread only. */
static void close_conn(struct srv_loop *l, struct srv_conn *c)
{
	char peer[INET6_ADDRSTRLEN + 16];

	pthread_mutex_lock(&c->lock);
	if (c->closed) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	c->closed = true;
	outq_drop(c); /* a sender drops what it holds when it sees closed */
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	/* The client sees the close now, even while workers hold references. */
	shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&c->lock);
	srv_log(SRV_LOG_DEBUG, "connection from %s closed",
		srv_addr_str(&c->peer, true, peer, sizeof(peer)));
	if (c->prev)
		c->prev->next = c->next;
	else
		l->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = NULL;
	c->next = l->dead;
	l->dead = c;
	l->nconns--;
	addr_unlink(l, c);
}

/* The safe point: drops the loop's reference of every closed connection. */
static void reap_dead(struct srv_loop *l)
{
	struct srv_conn *c;

	while ((c = l->dead) != NULL) {
		l->dead = c->next;
		conn_put(c);
	}
}

static void tune_tcp(int fd)
{
	int one = 1;

	/* Replies are whole records: Nagle would only delay them. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

static void add_conn(struct srv_loop *l, int fd, const struct sockaddr_storage *peer,
		     socklen_t peerlen)
{
	struct srv_conn *c = calloc(1, sizeof(*c));
	struct epoll_event ev = {.events = 0};
	char peername[INET6_ADDRSTRLEN + 16];

	if (!c)
		goto fail;
	c->src.kind = SRC_CONN;
	atomic_init(&c->refs, 2); /* the loop's and the armed read turn's */
	c->fd = fd;
	c->loop = l;
	memcpy(&c->peer, peer, peerlen);
	c->peerlen = peerlen;
	srv_rm_init(&c->rm, SRV_MAX_RECORD);
	pthread_mutex_init(&c->lock, NULL);
	c->events = 0;
	c->turn = TURN_ARMED;
	conn_touch(c);
	tune_tcp(fd);
	ev.data.ptr = &c->src;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		goto fail_conn;
	/* Last: from here a worker may read C. */
	ev.events = EPOLLIN | EPOLLONESHOT;
	if (epoll_ctl(l->rdfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		goto fail_epoll;
	c->next = l->conns;
	if (l->conns)
		l->conns->prev = c;
	l->conns = c;
	l->nconns++;
	addr_link(l, c);
	srv_log(SRV_LOG_DEBUG, "connection from %s",
		srv_addr_str(peer, true, peername, sizeof(peername)));
	return;
fail_epoll:
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
fail_conn:
	pthread_mutex_destroy(&c->lock);
	free(c);
fail:
	SRV_LOG_LIMITED(SRV_LOG_ERR, "cannot take a connection: %s", strerror(errno));
	close(fd);
}

/* Out of descriptors (EMFILE, ENFILE): the connections waiting in LIS's
 * backlog keep it readable, and the loop would spin on it, failing to
 * accept.  The spare descriptor, closed, makes room to take each and close
 * it at once (the client sees the connection end, and retries), then is
 * taken back.  When even that finds no room (another thread took the
 * descriptor), the loop thread pauses: 100 tries a second at most. */
static void shed_conns(struct srv_loop *l, struct listener *lis, int err)
{
	static struct srv_log_limit limit;
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
	srv_log_limited(&limit, SRV_LOG_ERR,
			"%s accept: %s: closed %u new connection%s; raise the limit on "
			"open files",
			lis->service, strerror(err), shed, shed == 1 ? "" : "s");
}

static void accept_conns(struct srv_loop *l, struct listener *lis)
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
				SRV_LOG_LIMITED(SRV_LOG_WARN, "%s accept: %s",
						lis->service, strerror(errno));
			return;
		}
		if (admit_conn(l, &peer))
			add_conn(l, fd, &peer, len);
		else
			refuse_conn(fd);
	}
}

static void write_conn(struct srv_loop *l, struct srv_conn *c)
{
	bool close_now;

	pthread_mutex_lock(&c->lock);
	conn_flush(c);
	close_now = conn_should_close(c);
	update_events(c);
	pthread_mutex_unlock(&c->lock);
	if (close_now)
		close_conn(l, c);
}

static void conn_event(struct srv_loop *l, struct srv_conn *c, uint32_t events)
{
	if (events & (EPOLLERR | EPOLLHUP)) {
		close_conn(l, c);
		return;
	}
	if (events & EPOLLOUT)
		write_conn(l, c);
}

/* Looks at every connection a worker noted (note_conn). */
static void take_notes(struct srv_loop *l)
{
	struct srv_conn *c, *next;
	uint64_t count;
	bool close_now;

	if (read(l->wakefd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		SRV_LOG_LIMITED(SRV_LOG_ERR, "event loop wake-up: %s", strerror(errno));
	pthread_mutex_lock(&l->note_lock);
	c = l->noted;
	l->noted = NULL;
	pthread_mutex_unlock(&l->note_lock);
	for (; c; c = next) {
		/* While noted stays set no worker relinks C, so note_next is ours
		 * to read; a note after the reset is a new entry (and reference). */
		pthread_mutex_lock(&l->note_lock);
		next = c->note_next;
		c->noted = false;
		pthread_mutex_unlock(&l->note_lock);
		pthread_mutex_lock(&c->lock);
		close_now = conn_should_close(c);
		pthread_mutex_unlock(&c->lock);
		if (close_now)
			close_conn(l, c);
		conn_put(c);
	}
}

/* ---- the loop thread: UDP ---- */

static void read_udp(struct srv_loop *l, struct listener *lis)
{
	struct batch b = {.tailp = &b.head};
	struct sockaddr_storage peer;
	struct srv_buf record;
	struct call_job *j;
	socklen_t len;
	ssize_t n;

	for (int i = 0; i < 64; i++) {
		len = sizeof(peer);
		n = recvfrom(lis->fd, l->rx, sizeof(l->rx), MSG_TRUNC,
			     (struct sockaddr *)&peer, &len);
		if (n < 0)
			break;
		if ((size_t)n > sizeof(l->rx))
			continue; /* larger than any call we take: drop */
		if (atomic_load(&l->udp_queued) >= SRV_UDP_MAX_QUEUED)
			continue; /* overloaded: the client will retransmit */
		record = (struct srv_buf){.data = malloc((size_t)n ? (size_t)n : 1)};
		if (!record.data)
			continue;
		memcpy(record.data, l->rx, (size_t)n);
		record.len = record.cap = (size_t)n;
		j = new_call_job(l, NULL, lis->fd, &peer, len, &record);
		if (!j)
			continue;
		atomic_fetch_add(&l->udp_queued, 1);
		batch_add(&b, j);
	}
	srv_pool_submit(l->pool, b.head); /* one lock, at most one wake */
}

/* ---- listeners ---- */

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
static int add_listener(struct srv_loop *l, int fd, enum src_kind kind,
			const char *service)
{
	struct listener *lis = &l->lis[l->nlis];
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &lis->src};
	int rc = 0;

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
static int bind_service(struct srv_loop *l, const char *service, uint16_t want,
			uint16_t *got, char *err, size_t errlen)
{
	struct sockaddr_storage addr;
	socklen_t alen;
	const char *failed;
	int fds[2], rc;

	rc = parse_bind_addr(l->srv->cfg.bind_addr, &addr, &alen);
	if (rc < 0) {
		snprintf(err, errlen, "bind address %s: not an IPv4 or IPv6 address",
			 l->srv->cfg.bind_addr);
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

static int bind_listeners(struct srv_loop *l, char *err, size_t errlen)
{
	const struct srv_config *cfg = &l->srv->cfg;
	int rc;

	rc = bind_service(l, "nfs", cfg->nfs_port, &l->nfs_port, err, errlen);
	if (rc < 0)
		return rc;
	/* One fixed port for both: every listener serves every program anyway. */
	if (cfg->mount_port != 0 && cfg->mount_port == cfg->nfs_port) {
		l->mount_port = l->nfs_port;
		return 0;
	}
	return bind_service(l, "mount", cfg->mount_port, &l->mount_port, err, errlen);
}

/* ---- the loop object ---- */

/* The two epoll instances and their wake-up eventfds; srv_loop_free closes
 * them.  jobfd counts wakes (EFD_SEMAPHORE): each waiter takes one. */
static int loop_fds(struct srv_loop *l, char *err, size_t errlen)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->wake_src};
	struct epoll_event jev = {.events = EPOLLIN | EPOLLONESHOT,
				  .data.ptr = &l->jobs_src};
	int rc = 0;

	l->wake_src.kind = SRC_WAKE;
	l->jobs_src.kind = SRC_JOBS;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	l->rdfd = epoll_create1(EPOLL_CLOEXEC);
	l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	l->jobfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC | EFD_SEMAPHORE);
	if (l->epfd < 0 || l->rdfd < 0 || l->wakefd < 0 || l->jobfd < 0 ||
	    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &ev) < 0 ||
	    epoll_ctl(l->rdfd, EPOLL_CTL_ADD, l->jobfd, &jev) < 0) {
		rc = -errno;
		snprintf(err, errlen, "epoll: %s", strerror(-rc));
	}
	return rc;
}

int srv_loop_new(struct srv *s, struct srv_loop **out, char *err, size_t errlen)
{
	struct srv_loop *l = calloc(1, sizeof(*l));
	const struct srv_pool_ops ops = {.wait = worker_wait,
					 .wake = worker_wake,
					 .arg = l,
					 .scratch_size = RX_BUF_SIZE};
	int rc = -ENOMEM;

	if (!l) {
		snprintf(err, errlen, "out of memory");
		return rc;
	}
	l->srv = s;
	l->epfd = l->rdfd = l->wakefd = l->jobfd = -1;
	pthread_mutex_init(&l->note_lock, NULL);
	l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	rc = conn_limits(l, &s->cfg);
	if (rc < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	loop_tick(l); /* l->now for the first connections */
	rc = loop_fds(l, err, errlen);
	if (rc < 0)
		goto fail;
	rc = bind_listeners(l, err, errlen);
	if (rc < 0)
		goto fail;
	rc = srv_pool_new(s->cfg.nthreads, &ops, &l->pool);
	if (rc < 0) {
		snprintf(err, errlen, "cannot start worker threads: %s", strerror(-rc));
		goto fail;
	}
	*out = l;
	return 0;
fail:
	srv_loop_free(l);
	return rc;
}

void srv_loop_ports(const struct srv_loop *l, uint16_t *nfs, uint16_t *mount)
{
	*nfs = l->nfs_port;
	*mount = l->mount_port;
}

static void dispatch(struct srv_loop *l, const struct epoll_event *ev)
{
	struct ev_source *src = ev->data.ptr;

	switch (src->kind) {
	case SRC_WAKE:
		take_notes(l);
		break;
	case SRC_JOBS: /* rdfd's, never epfd's */
		break;
	case SRC_TCP_LISTEN:
		accept_conns(l, (struct listener *)src);
		break;
	case SRC_UDP:
		read_udp(l, (struct listener *)src);
		break;
	case SRC_CONN:
		conn_event(l, (struct srv_conn *)src, ev->events);
		break;
	}
}

int srv_loop_run(struct srv_loop *l)
{
	struct epoll_event ev[MAX_EVENTS];
	int n;

	while (!atomic_load(&l->stop)) {
		reap_dead(l); /* invariant 3: between batches */
		n = epoll_wait(l->epfd, ev, MAX_EVENTS, TICK_MS);
		loop_tick(l);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			srv_log(SRV_LOG_ERR, "epoll_wait: %s", strerror(errno));
			return -errno;
		}
		for (int i = 0; i < n; i++)
			dispatch(l, &ev[i]);
	}
	reap_dead(l);
	return 0;
}

void srv_loop_stop(struct srv_loop *l)
{
	uint64_t one = 1;
	int saved = errno; /* may run in a signal handler */

	atomic_store(&l->stop, 1);
	if (write(l->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is full: the loop is awake anyway */
	}
	errno = saved;
}

/* With no worker left, nobody takes an armed read turn: its reference is
 * dropped here (invariant 2).  Drops the last one for a connection that is
 * closed and reaped, whose turn fired (close_conn's shutdown) too late for a
 * worker to take it. */
static void drop_armed_turn(struct srv_conn *c)
{
	bool armed;

	pthread_mutex_lock(&c->lock);
	armed = c->turn == TURN_ARMED;
	c->turn = TURN_PARKED;
	pthread_mutex_unlock(&c->lock);
	if (armed)
		conn_put(c);
}

/* The turns that fired and no worker took; the ones of open connections that
 * did not fire are dropped through l->conns. */
static void drain_turns(struct srv_loop *l)
{
	struct epoll_event ev[MAX_EVENTS];
	struct ev_source *src;
	int n;

	while ((n = epoll_wait(l->rdfd, ev, MAX_EVENTS, 0)) > 0)
		for (int i = 0; i < n; i++) {
			src = ev[i].data.ptr;
			if (src->kind == SRC_CONN)
				drop_armed_turn((struct srv_conn *)src);
		}
}

/* Order matters: the workers first finish every queued call (their UDP
 * replies need the listener fds, their TCP replies the connections), then the
 * connections close, then the listeners. */
void srv_loop_free(struct srv_loop *l)
{
	if (!l)
		return;
	srv_pool_free(l->pool);
	l->pool = NULL;
	if (l->wakefd >= 0)
		take_notes(l); /* drops the references notes hold */
	if (l->rdfd >= 0)
		drain_turns(l);
	for (struct srv_conn *c = l->conns; c; c = c->next)
		drop_armed_turn(c);
	while (l->conns)
		close_conn(l, l->conns);
	reap_dead(l);
	for (size_t i = 0; i < l->nlis; i++)
		close(l->lis[i].fd);
	if (l->wakefd >= 0)
		close(l->wakefd);
	if (l->jobfd >= 0)
		close(l->jobfd);
	if (l->rdfd >= 0)
		close(l->rdfd);
	if (l->epfd >= 0)
		close(l->epfd);
	if (l->spare_fd >= 0)
		close(l->spare_fd);
	free(l->by_addr);
	pthread_mutex_destroy(&l->note_lock);
	free(l);
}
