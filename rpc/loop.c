/* SPDX-License-Identifier: Apache-2.0 */
/* loop.c - the event loop: two epoll instances, the loop thread that serves
 * one and the workers that wait in the other, and the loop object's life.
 *
 * The loop thread (rpc_loop_run) waits in epfd: it accepts connections and
 * reads datagrams (listen.c), writes what waits in a connection's out queue
 * on EPOLLOUT, notices hang-ups and closes connections (conn.c), and looks
 * at the connections workers noted (wakefd).  epfd holds each connection
 * with no EPOLLIN: the mask is EPOLLOUT while the out queue has bytes, else
 * empty (errors and hang-ups are always reported).  The workers (pool.c)
 * wait in rdfd (worker_wait), where each connection's read turn is armed
 * one-shot (conn.c) and jobfd counts the pool's wakes.
 *
 * Rules:
 *  1. The loop thread's batch is a safe point: rpc_loop_run reaps closed
 *     connections (rpc_conns_reap) before each epoll_wait, never while a
 *     batch's events may still name them (conn.c, rule 3).
 *  2. l->now, the coarse clock connections are stamped with, advances at
 *     least every TICK_MS (loop_tick, after each epoll_wait) and is read
 *     relaxed by any thread.
 *  3. A wake of the pool is one count on jobfd (EFD_SEMAPHORE) and reaches
 *     one waiter: take_wake takes it and re-arms jobfd, so a wake still
 *     counted goes to the next one.
 *  4. rpc_loop_free stops the workers first (their replies need the
 *     listeners and the connections), then drops the read turns no worker
 *     took (drain_turns), then closes connections, then listeners.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "transport.h"

#define MAX_EVENTS  64
#define SWEEP_DIV   8	 /* idle sweeps per timeout */
#define SWEEP_MAX_S 30	 /* seconds between sweeps, at most */
#define TICK_MS	    1000 /* the loop's clock, l->now, advances at least this often */

/* ---- the workers' side: rdfd ---- */

/* The pool's wake arrived: take it, and arm jobfd again, so a wake still
 * counted (rpc_pool_free sends one per worker) goes to the next waiter. */
static void take_wake(struct rpc_loop *l)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT,
				 .data.ptr = &l->jobs_src};
	uint64_t one;

	if (read(l->jobfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		RPC_LOG_LIMITED(RPC_LOG_ERR, "worker wake-up: %s", strerror(errno));
	if (epoll_ctl(l->rdfd, EPOLL_CTL_MOD, l->jobfd, &ev) < 0)
		RPC_LOG_LIMITED(RPC_LOG_ERR, "cannot re-arm the worker wake-up: %s",
				strerror(errno));
}

/* rpc_pool_ops.wait: one event of rdfd. */
static struct rpc_job *worker_wait(void *arg, void *scratch, bool *woken)
{
	struct rpc_loop *l = arg;
	struct epoll_event ev;
	struct ev_source *src;

	if (epoll_wait(l->rdfd, &ev, 1, -1) != 1)
		return NULL; /* EINTR: the worker looks at the FIFO and comes back */
	src = ev.data.ptr;
	if (src->kind == SRC_CONN)
		return rpc_conn_read_turn(l, (struct rpc_conn *)src, scratch);
	take_wake(l);
	*woken = true;
	return NULL;
}

/* rpc_pool_ops.wake: one waiter of rdfd returns (jobfd counts wakes). */
static void worker_wake(void *arg)
{
	struct rpc_loop *l = arg;
	uint64_t one = 1;

	if (write(l->jobfd, &one, sizeof(one)) < 0)
		RPC_LOG_LIMITED(RPC_LOG_ERR, "cannot wake a worker: %s", strerror(errno));
}

/* Advances l->now and runs the idle sweep when it is due (rule 2; listen.c,
 * rule 3).  Loop thread. */
static void loop_tick(struct rpc_loop *l)
{
	struct timespec ts;
	unsigned now, every;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (unsigned)ts.tv_sec;
	atomic_store_explicit(&l->now, now, memory_order_relaxed);
	if (!l->idle_timeout || now < l->next_sweep)
		return;
	rpc_conns_sweep_idle(l, now);
	every = l->idle_timeout / SWEEP_DIV;
	every = every < 1 ? 1 : every > SWEEP_MAX_S ? SWEEP_MAX_S : every;
	l->next_sweep = now + every;
}

/* ---- the loop object ---- */

/* The two epoll instances and their wake-up eventfds; rpc_loop_free closes
 * them.  jobfd counts wakes (EFD_SEMAPHORE): each waiter takes one. */
static int loop_fds(struct rpc_loop *l, char *err, size_t errlen)
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

int rpc_loop_new(struct rpc_svc *svc, const struct rpc_loop_config *cfg,
		 struct rpc_loop **out, char *err, size_t errlen)
{
	struct rpc_loop *l = calloc(1, sizeof(*l));
	const struct rpc_pool_ops ops = {.wait = worker_wait,
					 .wake = worker_wake,
					 .arg = l,
					 .scratch_size = RPC_RX_BUF_SIZE};
	int rc = -ENOMEM;

	if (!l) {
		snprintf(err, errlen, "out of memory");
		return rc;
	}
	l->svc = svc;
	l->cfg = *cfg;
	svc->bind_addr = cfg->bind_addr;
	l->epfd = l->rdfd = l->wakefd = l->jobfd = -1;
	pthread_mutex_init(&l->note_lock, NULL);
	l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	rc = rpc_conn_limits(l, cfg);
	if (rc < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	loop_tick(l); /* l->now for the first connections */
	rc = loop_fds(l, err, errlen);
	if (rc < 0)
		goto fail;
	rc = rpc_listen_bind(l, err, errlen);
	if (rc < 0)
		goto fail;
	rc = rpc_pool_new(cfg->nthreads, &ops, &l->pool);
	if (rc < 0) {
		snprintf(err, errlen, "cannot start worker threads: %s", strerror(-rc));
		goto fail;
	}
	atomic_store(&svc->pool, l->pool);
	*out = l;
	return 0;
fail:
	rpc_loop_free(l);
	return rc;
}

uint16_t rpc_loop_port(const struct rpc_loop *l, const char *service)
{
	return rpc_svc_service_port(l->svc, service);
}

static void dispatch(struct rpc_loop *l, const struct epoll_event *ev)
{
	struct ev_source *src = ev->data.ptr;

	switch (src->kind) {
	case SRC_WAKE:
		rpc_conns_take_notes(l);
		break;
	case SRC_JOBS: /* rdfd's, never epfd's */
		break;
	case SRC_TCP_LISTEN:
		rpc_listen_accept(l, (struct listener *)src);
		break;
	case SRC_UDP:
		rpc_listen_read_udp(l, (struct listener *)src);
		break;
	case SRC_CONN:
		rpc_conn_event(l, (struct rpc_conn *)src, ev->events);
		break;
	}
}

int rpc_loop_run(struct rpc_loop *l)
{
	struct epoll_event ev[MAX_EVENTS];
	int n;

	while (!atomic_load(&l->stop)) {
		rpc_conns_reap(l); /* conn.c rule 3: between batches */
		n = epoll_wait(l->epfd, ev, MAX_EVENTS, TICK_MS);
		loop_tick(l);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rpc_log(RPC_LOG_ERR, "epoll_wait: %s", strerror(errno));
			return -errno;
		}
		for (int i = 0; i < n; i++)
			dispatch(l, &ev[i]);
	}
	rpc_conns_reap(l);
	return 0;
}

void rpc_loop_stop(struct rpc_loop *l)
{
	uint64_t one = 1;
	int saved = errno; /* may run in a signal handler */

	atomic_store(&l->stop, 1);
	if (write(l->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is full: the loop is awake anyway */
	}
	errno = saved;
}

/* The turns that fired and no worker took; the ones of open connections that
 * did not fire are dropped through l->conns. */
static void drain_turns(struct rpc_loop *l)
{
	struct epoll_event ev[MAX_EVENTS];
	struct ev_source *src;
	int n;

	while ((n = epoll_wait(l->rdfd, ev, MAX_EVENTS, 0)) > 0)
		for (int i = 0; i < n; i++) {
			src = ev[i].data.ptr;
			if (src->kind == SRC_CONN)
				rpc_conn_drop_turn((struct rpc_conn *)src);
		}
}

/* Order matters: the workers first finish every queued call (their UDP
 * replies need the listener fds, their TCP replies the connections), then the
 * connections close, then the listeners. */
void rpc_loop_free(struct rpc_loop *l)
{
	if (!l)
		return;
	atomic_store(&l->svc->pool, NULL);
	rpc_pool_free(l->pool);
	l->pool = NULL;
	if (l->wakefd >= 0)
		rpc_conns_take_notes(l); /* drops the references notes hold */
	if (l->rdfd >= 0)
		drain_turns(l);
	for (struct rpc_conn *c = l->conns; c; c = c->next)
		rpc_conn_drop_turn(c);
	while (l->conns)
		rpc_conn_close(l, l->conns);
	rpc_conns_reap(l);
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
