/* SPDX-License-Identifier: Apache-2.0 */
/* conn.c - a TCP connection: its read turn on the workers, the calls it
 * carries to them, its out queue and the sending of replies, and its close.
 *
 * Design notes
 *
 * Reading.  The workers (pool.c) read TCP connections themselves: each
 * connection is registered in the readers' epoll instance (rdfd, loop.c)
 * with EPOLLIN | EPOLLONESHOT, and a worker with nothing queued waits
 * there.  The worker the kernel hands a readable connection to holds its
 * read turn: it reads once, cuts records (record.c), re-arms the connection
 * (so the next bytes go to another worker while this one is busy), answers
 * the first call itself and queues the rest for the pool, which wakes
 * another worker only when none is on its way (pool.c).  So the common call
 * costs no hand-off between threads, and a slow call holds up only its own
 * thread: the connection's next bytes, other connections and the queued
 * calls are taken by other workers.  (Keeping the turn and reading on after
 * the call would spare one wake, but a slow call would then hold up its
 * connection; bench/README.md has the measurement.)
 *
 * Sending.  A worker answers a call and sends the reply itself: UDP with one
 * sendmsg (udp_send); TCP by appending it to the connection's out queue and,
 * unless another thread is the connection's sender already, becoming the
 * sender (conn_flush): it takes the whole queue, writes it with the lock
 * dropped, one nonblocking sendmsg for up to 21 replies (a READ whose data
 * waits in a pipe goes alone: sendmsg of its head, then a splice from the
 * pipe, outbuf_write), and goes on while others appended meanwhile.  A
 * worker that finds a sender appends and leaves.  So replies finished while
 * a send runs leave together with the next one, and no worker sleeps on the
 * connection's lock while another sends (a loopback send runs the client's
 * receive path too).  What a socket will not take now waits in the out
 * queue and leaves from the loop thread on EPOLLOUT (rpc_conn_event), so a
 * slow client never holds a worker.  Replies leave in completion order;
 * xids pair them with calls.
 *
 * A connection's life:
 *
 *     rpc_conn_add --> OPEN --(EOF read)--> DRAINING --(inflight 0)--+
 *                       |                                           |
 *                       +--(error, HUP, oversize record)------------+--> CLOSED
 *                                                (rpc_conn_close)        |
 *                                  last conn_put (any thread) --> freed <+
 *
 * Its read turn (c->turn, under c->lock).  ARMED covers both "in rdfd" and
 * "handed to a worker" (the kernel hands it over without our lock; nobody
 * but the holder can tell, and nobody else needs to):
 *
 *     ARMED in rdfd --(epoll_wait gives it to a worker: rpc_conn_read_turn)--> held
 *     held --(release_turn: may read on; re-armed)--> ARMED in rdfd
 *     held --(release_turn: closed, broken, EOF, inflight limit)--> PARKED
 *     PARKED --(update_events: may read again)--> ARMED in rdfd
 *
 * Rules:
 *  1. Only the loop thread touches the conns list or closes a connection
 *     (rpc_conn_close); a worker that finds a connection should close asks
 *     the loop with note_conn.  Only the holder of a connection's read turn
 *     reads its socket or touches conn->rm; EPOLLONESHOT makes the holder
 *     unique.
 *  2. A connection holds one reference for the loop (from rpc_conn_add until
 *     rpc_conns_reap), one for its read turn unless PARKED (the armed
 *     registration owns it, and passes it to the worker epoll hands it to,
 *     who passes it back by re-arming or drops it by parking), and one per
 *     job that names it.  The fd is closed and the memory freed by whoever
 *     drops the last one (conn_put), never earlier, so a worker may reply
 *     after a hang-up: its write fails harmlessly or is dropped because
 *     conn->closed is set.
 *  3. rpc_conn_close does not drop the loop's reference: it moves the
 *     connection to l->dead, and rpc_conns_reap drops it before the next
 *     epoll_wait (the safe point, rpc_loop_run), so no event of the current
 *     batch can name freed memory.  rpc_conn_close shuts the socket down,
 *     which makes an ARMED read turn fire: the worker that gets it reads EOF,
 *     finds closed and parks, dropping the turn's reference.  Nobody but the
 *     holder changes rdfd's registration of an ARMED connection (epoll may
 *     hand it over at any moment); update_events arms only a PARKED one.
 *  4. conn->lock guards closed, rd_eof, broken, sending, inflight, the out
 *     queue, the turn and epfd's mask; every EPOLL_CTL_MOD of a connection
 *     happens under it (update_events, release_turn), so the masks in the
 *     kernel are the ones conn->events and conn->turn say.
 *  5. Bytes of one reply are never interleaved with another's: only the
 *     connection's sender (sending set, under the lock; conn_flush) writes
 *     its socket, one reply after another in queue order.  The sender owns
 *     the replies it took off the queue until it takes the lock again and
 *     puts back what the socket did not take, in front; rpc_conn_close frees
 *     only what is still queued, and a sender that comes back to a closed
 *     connection drops the rest.  EPOLLOUT is asked for only while replies
 *     wait and no thread is the sender, so the loop thread never spins on a
 *     writable socket that a worker is writing.
 *  6. inflight counts calls read and not yet fully answered (queued, running,
 *     or in the out queue).  At RPC_CONN_MAX_INFLIGHT the read turn parks
 *     (may_read), which bounds the memory one client can make us hold; the
 *     reply that brings inflight under the limit arms it again.
 *  7. A record longer than RPC_MAX_RECORD closes the connection (feed_conn,
 *     on record.c's RPC_RM_TOOBIG); a UDP datagram is one record (listen.c).
 */
#define _GNU_SOURCE /* splice */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport.h"

/* A reply waiting in a connection's out queue: record mark, then body (its
 * bytes, then its payload). */
struct outbuf {
	struct outbuf *next;
	uint8_t mark[4];
	struct rpc_buf body;
	size_t off; /* bytes of mark + body already sent */
};
#define OUTBUF_IOV  3
#define SEND_IOV    64 /* iovecs of one sendmsg: up to 21 replies */
#define SEND_ROUNDS 8  /* a sender's rounds before the loop thread takes over */

/* A call on its way to a worker; owns its record and (TCP) a connection ref. */
struct call_job {
	struct rpc_job job;
	struct rpc_loop *loop;
	struct rpc_conn *conn; /* NULL for UDP */
	int udp_fd;
	struct sockaddr_storage peer;
	socklen_t peerlen;
	struct sockaddr_storage
	    local; /* UDP: where the datagram came to (family 0: unknown) */
	struct rpc_buf call;
};

/* ---- references and the out queue ---- */

static struct rpc_conn *conn_get(struct rpc_conn *c)
{
	atomic_fetch_add(&c->refs, 1);
	return c;
}

/* Notes that C is in use now (listen.c, rule 3): no system call.  Any thread. */
static void conn_touch(struct rpc_conn *c)
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
		rpc_buf_free(&list->body);
		free(list);
	}
	return n;
}

static void outq_free(struct rpc_conn *c)
{
	outbufs_free(c->out_head);
	c->out_head = c->out_tail = NULL;
}

/* Drops the queued replies unsent: their calls end.  Under c->lock. */
static void outq_drop(struct rpc_conn *c)
{
	c->inflight -= outbufs_free(c->out_head);
	c->out_head = c->out_tail = NULL;
}

/* Drops a reference; the last one closes the fd and frees C (rule 2).
 * Any thread. */
static void conn_put(struct rpc_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	close(c->fd);
	rpc_rm_free(&c->rm);
	outq_free(c);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Under c->lock: whether C's read turn may be armed (rule 6). */
static bool may_read(const struct rpc_conn *c)
{
	return !c->closed && !c->broken && !c->rd_eof &&
	       c->inflight < RPC_CONN_MAX_INFLIGHT;
}

static void note_conn(struct rpc_conn *c);

/* Arms C's read turn in rdfd: by the holder (HELD) or from PARKED; the caller
 * gives it the turn's reference (rule 2).  A connection that cannot be
 * armed could never be read again: it is marked broken and the loop asked to
 * close it.  Under c->lock. */
static bool arm_turn(struct rpc_conn *c)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = &c->src};

	if (epoll_ctl(c->loop->rdfd, EPOLL_CTL_MOD, c->fd, &ev) == 0) {
		c->turn = TURN_ARMED;
		return true;
	}
	RPC_LOG_LIMITED(RPC_LOG_ERR, "cannot re-arm a connection: %s", strerror(errno));
	c->turn = TURN_PARKED;
	c->broken = true;
	note_conn(c);
	return false;
}

/* Sets epfd's mask from the state, and arms a PARKED read turn that may read
 * again (rules 3, 4, 6).  Under c->lock; any thread. */
static void update_events(struct rpc_conn *c)
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
static bool conn_should_close(const struct rpc_conn *c)
{
	return !c->closed && (c->broken || (c->rd_eof && c->inflight == 0));
}

/* Asks the loop thread to look at C (rule 1).  Under c->lock; any thread. */
static void note_conn(struct rpc_conn *c)
{
	struct rpc_loop *l = c->loop;
	uint64_t one = 1;

	pthread_mutex_lock(&l->note_lock);
	if (!c->noted) {
		c->noted = true;
		c->note_next = l->noted;
		l->noted = conn_get(c);
	}
	pthread_mutex_unlock(&l->note_lock);
	if (write(l->wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		RPC_LOG_LIMITED(RPC_LOG_ERR, "cannot wake the event loop: %s",
				strerror(errno));
}

/* The unsent bytes of OB that are in memory, as iovecs: record mark, reply
 * bytes and payload buffer, so that one sendmsg writes them without joining
 * them.  A payload with bytes in a pipe (sent by outbuf_write) splits them:
 * before the pipe's bytes the iovecs end there and *MORE says more follows;
 * past them only the payload buffer is left. */
static int outbuf_iov(const struct outbuf *ob, struct iovec iov[OUTBUF_IOV], bool *more)
{
	const struct rpc_payload *p = ob->body.payload;
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
	struct rpc_payload *p = ob->body.payload;
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
		left = 4 + rpc_buf_wire_len(&ob->body) - ob->off;
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
static void outq_requeue(struct rpc_conn *c, struct outbuf *list)
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
static void conn_break(struct rpc_conn *c, int err)
{
	char peer[INET6_ADDRSTRLEN + 16];

	outq_drop(c);
	if (!c->broken)
		RPC_LOG_LIMITED(RPC_LOG_INFO, "connection from %s: send failed: %s",
				rpc_addr_str(&c->peer, true, peer, sizeof(peer)),
				strerror(-err));
	c->broken = true;
}

/* Makes the caller C's sender unless another thread is (rule 5): takes
 * the whole queue, writes it without the lock, and goes on while others
 * appended meanwhile, up to SEND_ROUNDS times; what the socket would not
 * take, or what is left after the last round, goes out from the loop on
 * EPOLLOUT (update_events).  A worker that finds a sender appends its reply
 * and leaves: it neither waits for the lock across a send nor makes a
 * system call of its own.  Under c->lock, which it drops and takes again. */
static void conn_flush(struct rpc_conn *c)
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
		outq_drop(c); /* rpc_conn_close left what we held */
	c->sending = false;
}

/* Queues REPLY on C (taking it) and writes what the socket takes now; the rest
 * goes out from the loop on EPOLLOUT.  Never blocks.  Any thread; the caller
 * holds a reference to C. */
static void conn_send(struct rpc_conn *c, struct rpc_buf *reply)
{
	struct outbuf *ob = calloc(1, sizeof(*ob));
	uint32_t mark = htonl(0x80000000u | (uint32_t)rpc_buf_wire_len(reply));

	pthread_mutex_lock(&c->lock);
	if (!ob || c->closed || c->broken) {
		free(ob);
		rpc_buf_free(reply);
		c->inflight--;
		goto out;
	}
	conn_touch(c);
	memcpy(ob->mark, &mark, 4);
	ob->body = *reply;
	*reply = (struct rpc_buf){0};
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
static void conn_call_done(struct rpc_conn *c)
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
static void udp_send(struct call_job *j, const struct rpc_buf *reply)
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
	union {
		struct cmsghdr align;
		char buf[RPC_UDP_CMSG_SPACE];
	} control;

	rpc_udp_send_from(&msg, &j->local, control.buf);
	if (sendmsg(j->udp_fd, &msg, MSG_DONTWAIT) >= 0)
		return;
	/* A full socket buffer is ordinary on UDP (the client retransmits); a
	 * reply too large for one datagram means a handler ignored
	 * RPC_MAX_UDP_IO, worth a warning. */
	RPC_LOG_LIMITED(
	    errno == EMSGSIZE ? RPC_LOG_WARN : RPC_LOG_DEBUG,
	    "udp reply of %zu bytes to %s dropped: %s", rpc_buf_wire_len(reply),
	    rpc_addr_str(&j->peer, true, peer, sizeof(peer)), strerror(errno));
}

/* The pool's entry point for a call: answers it and frees the job, dropping
 * its connection reference. */
static void run_call_job(struct rpc_job *job)
{
	struct call_job *j = (struct call_job *)job;
	char addr[INET6_ADDRSTRLEN + 16];
	struct rpc_from from = {&j->peer, j->peerlen, IPPROTO_TCP, addr, NULL};
	struct rpc_buf reply = {0};
	bool answer;

	/* A connection's address text is made once (rpc_conn_add); a
	 * datagram's here. */
	if (j->conn) {
		from.addr = j->conn->peer_addr;
		from.local = &j->conn->local;
	} else {
		from.proto = IPPROTO_UDP;
		from.local = &j->local;
		rpc_addr_str(&j->peer, false, addr, sizeof(addr));
	}
	if (from.local->ss_family == 0)
		from.local = NULL;
	answer = rpc_process_from(j->loop->svc, j->call.data, j->call.len, &from, &reply);
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
	rpc_buf_free(&reply);
	rpc_buf_free(&j->call);
	free(j);
}

struct call_job *rpc_call_job_new(struct rpc_loop *l, struct rpc_conn *c, int udp_fd,
				  const struct sockaddr_storage *peer, socklen_t peerlen,
				  const struct sockaddr_storage *local,
				  struct rpc_buf *record)
{
	struct call_job *j = calloc(1, sizeof(*j));

	if (!j) {
		RPC_LOG_LIMITED(RPC_LOG_ERR, "out of memory: call dropped");
		rpc_buf_free(record);
		return NULL;
	}
	j->job.run = run_call_job;
	j->loop = l;
	j->conn = c ? conn_get(c) : NULL;
	j->udp_fd = udp_fd;
	memcpy(&j->peer, peer, peerlen);
	j->peerlen = peerlen;
	if (local)
		j->local = *local;
	j->call = *record;
	*record = (struct rpc_buf){0};
	return j;
}

void rpc_batch_add(struct batch *b, struct call_job *j)
{
	*b->tailp = &j->job;
	b->tailp = &j->job.next;
	b->n++;
}

/* ---- workers: the read turn ---- */

/* Moves C's complete record into a job on B (dropped, logged, without
 * memory). */
static void queue_record(struct rpc_loop *l, struct rpc_conn *c, struct batch *b)
{
	struct rpc_buf record;
	struct call_job *j;

	rpc_rm_take(&c->rm, &record);
	j = rpc_call_job_new(l, c, -1, &c->peer, c->peerlen, NULL, &record);
	if (j)
		rpc_batch_add(b, j);
}

/* Cuts BUF into records, each a job on B; false when C must close. */
static bool feed_conn(struct rpc_loop *l, struct rpc_conn *c, const uint8_t *buf,
		      size_t n, struct batch *b)
{
	enum rpc_rm_status st;
	char peer[INET6_ADDRSTRLEN + 16];
	size_t used;

	while (n > 0) {
		used = rpc_rm_feed(&c->rm, buf, n, &st);
		buf += used;
		n -= used;
		if (st == RPC_RM_TOOBIG) {
			RPC_LOG_LIMITED(
			    RPC_LOG_WARN,
			    "closing connection from %s: record over %u bytes",
			    rpc_addr_str(&c->peer, true, peer, sizeof(peer)),
			    RPC_MAX_RECORD);
			return false;
		}
		if (st == RPC_RM_RECORD)
			queue_record(l, c, b);
	}
	return true;
}

/* One read(2) of C, its records jobs on B (*OK false when C must close):
 * the rest of a large fragment (a WRITE's data) goes straight into the
 * record, other bytes through RX, from which feed_conn cuts the records. */
static ssize_t read_conn(struct rpc_loop *l, struct rpc_conn *c, uint8_t *rx,
			 struct batch *b, bool *ok)
{
	enum rpc_rm_status st;
	size_t room;
	uint8_t *dst = rpc_rm_direct(&c->rm, &room);
	ssize_t n;

	if (!dst) {
		n = read(c->fd, rx, RPC_RX_BUF_SIZE);
		if (n > 0)
			*ok = feed_conn(l, c, rx, (size_t)n, b);
		return n;
	}
	n = read(c->fd, dst, room);
	if (n <= 0)
		return n;
	rpc_rm_direct_done(&c->rm, (size_t)n, &st);
	if (st == RPC_RM_RECORD)
		queue_record(l, c, b);
	return n;
}

/* Ends the holder's read turn (rule 3): re-armed when C may read on,
 * else parked.  True when parked: the caller drops the turn's reference once
 * it has unlocked.  Under c->lock. */
static bool release_turn(struct rpc_conn *c)
{
	/* The next holder reads this before touching rm (rpc_conn_read_turn): epoll
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
struct rpc_job *rpc_conn_read_turn(struct rpc_loop *l, struct rpc_conn *c, uint8_t *rx)
{
	struct batch b = {.tailp = &b.head};
	struct rpc_job *first;
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
		rpc_pool_submit(l->pool, first->next);
		first->next = NULL;
	}
	return first;
}

/* ---- the loop thread: opening and closing ---- */

/* PEER's chain in l->by_addr (FNV-1a of the address bytes). */
struct rpc_conn **rpc_conn_addr_chain(struct rpc_loop *l,
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

static void addr_link(struct rpc_loop *l, struct rpc_conn *c)
{
	struct rpc_conn **head = rpc_conn_addr_chain(l, &c->peer);

	c->aprev = NULL;
	c->anext = *head;
	if (*head)
		(*head)->aprev = c;
	*head = c;
}

static void addr_unlink(struct rpc_loop *l, struct rpc_conn *c)
{
	if (c->aprev)
		c->aprev->anext = c->anext;
	else
		*rpc_conn_addr_chain(l, &c->peer) = c->anext;
	if (c->anext)
		c->anext->aprev = c->aprev;
	c->aprev = c->anext = NULL;
}

/* Loop thread only (rule 1); the loop's reference stays until rpc_conns_reap
 * (rule 3). */
void rpc_conn_close(struct rpc_loop *l, struct rpc_conn *c)
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
	rpc_log(RPC_LOG_DEBUG, "connection from %s closed",
		rpc_addr_str(&c->peer, true, peer, sizeof(peer)));
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
	atomic_store_explicit(&l->svc->conns_open, l->nconns, memory_order_relaxed);
	addr_unlink(l, c);
}

void rpc_conns_reap(struct rpc_loop *l)
{
	struct rpc_conn *c;

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

/* The address of ours FD's client connected to into OUT (family 0 when the
 * kernel will not say). */
static void conn_local(int fd, struct sockaddr_storage *out)
{
	socklen_t len = sizeof(*out);

	if (getsockname(fd, (struct sockaddr *)out, &len) < 0)
		memset(out, 0, sizeof(*out));
}

void rpc_conn_add(struct rpc_loop *l, int fd, const struct sockaddr_storage *peer,
		  socklen_t peerlen)
{
	struct rpc_conn *c = calloc(1, sizeof(*c));
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
	rpc_addr_str(peer, false, c->peer_addr, sizeof(c->peer_addr));
	conn_local(fd, &c->local);
	rpc_rm_init(&c->rm, RPC_MAX_RECORD);
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
	atomic_store_explicit(&l->svc->conns_open, l->nconns, memory_order_relaxed);
	addr_link(l, c);
	rpc_log(RPC_LOG_DEBUG, "connection from %s",
		rpc_addr_str(peer, true, peername, sizeof(peername)));
	return;
fail_epoll:
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
fail_conn:
	pthread_mutex_destroy(&c->lock);
	free(c);
fail:
	RPC_LOG_LIMITED(RPC_LOG_ERR, "cannot take a connection: %s", strerror(errno));
	close(fd);
}

static void write_conn(struct rpc_loop *l, struct rpc_conn *c)
{
	bool close_now;

	pthread_mutex_lock(&c->lock);
	conn_flush(c);
	close_now = conn_should_close(c);
	update_events(c);
	pthread_mutex_unlock(&c->lock);
	if (close_now)
		rpc_conn_close(l, c);
}

void rpc_conn_event(struct rpc_loop *l, struct rpc_conn *c, uint32_t events)
{
	if (events & (EPOLLERR | EPOLLHUP)) {
		rpc_conn_close(l, c);
		return;
	}
	if (events & EPOLLOUT)
		write_conn(l, c);
}

void rpc_conns_take_notes(struct rpc_loop *l)
{
	struct rpc_conn *c, *next;
	uint64_t count;
	bool close_now;

	if (read(l->wakefd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		RPC_LOG_LIMITED(RPC_LOG_ERR, "event loop wake-up: %s", strerror(errno));
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
			rpc_conn_close(l, c);
		conn_put(c);
	}
}

/* With no worker left, nobody takes an armed read turn: its reference is
 * dropped here (rule 2).  Drops the last one for a connection that is
 * closed and reaped, whose turn fired (rpc_conn_close's shutdown) too late for a
 * worker to take it. */
void rpc_conn_drop_turn(struct rpc_conn *c)
{
	bool armed;

	pthread_mutex_lock(&c->lock);
	armed = c->turn == TURN_ARMED;
	c->turn = TURN_PARKED;
	pthread_mutex_unlock(&c->lock);
	if (armed)
		conn_put(c);
}
