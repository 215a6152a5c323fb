/* SPDX-License-Identifier: Apache-2.0 */
/* pool.c - worker threads, and the FIFO of calls they share.
 *
 * Design notes
 *
 * A worker has two sources of work: the FIFO of jobs (calls that a thread cut
 * from a connection or a datagram and did not run itself), and its owner's
 * wait function (loop.c: epoll_wait on the readers' instance), which blocks
 * until a connection is readable or the pool wakes the thread, does what
 * cannot block, and may hand back one job for the worker to run itself.  So
 * the thread that read a call usually answers it: no hand-off, no wake.
 *
 * A worker looks at the FIFO before every wait, so a job queued while
 * workers run is taken by the first that finishes.  A wake costs a system
 * call here and a context switch in the woken thread, so one is spent only
 * when a sleeping worker is needed and none is already on its way.
 *
 * Invariants:
 *  1. When the FIFO holds a job and a worker is idle (in its wait), a wake is
 *     pending (wake_pending): submit and take ask for one whenever they leave
 *     jobs behind, so no job waits on a thread that sleeps while another could
 *     run it.  A worker counts itself idle under the lock in the same step
 *     that finds the FIFO empty (take), so a job queued after that step sees
 *     it idle and wakes it.
 *  2. At most one wake is pending.  The woken thread clears it (take) and, once it has
 * taken a job, wakes the next if jobs remain, so N queued jobs wake at most N threads,
 * one after another, and fewer when running workers come back to the FIFO first.  A slow
 * job delays the jobs behind it by at most one wake, never until it ends.
 *  3. A worker leaves only when stopping is set and the FIFO is empty, and it
 *     looks at the FIFO after every job: every job queued runs, also one a
 *     worker queues while the pool stops.
 *
 * Workers run with every signal blocked, so SIGINT/SIGTERM land on the main
 * thread, whose handler stops the loop.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "rpc.h"

struct worker {
	struct rpc_pool *pool;
	pthread_t thread;
	void *scratch; /* ops.scratch_size bytes for ops.wait */
};

struct rpc_pool {
	struct rpc_pool_ops ops;
	pthread_mutex_t lock; /* guards the fields up to stopping */
	struct rpc_job *head, *tail;
	bool wake_pending; /* invariant 2 */
	bool stopping;
	atomic_uint idle;  /* workers in ops.wait; raised under lock (invariant 1) */
	unsigned nthreads; /* started, to be joined */
	struct worker *workers;
};

/* Under p->lock: true when a wake must be sent now (invariant 1). */
static bool need_wake(struct rpc_pool *p)
{
	if (!p->head || p->wake_pending || atomic_load(&p->idle) == 0)
		return false;
	p->wake_pending = true;
	return true;
}

/* Takes the next job.  With none left the caller counts as idle from here
 * (until it returns from its wait) and gets NULL.  WOKEN: the caller's wait
 * ended with the pending wake (invariant 2). */
static struct rpc_job *take(struct rpc_pool *p, bool woken, bool *stop)
{
	struct rpc_job *job;
	bool wake;

	pthread_mutex_lock(&p->lock);
	if (woken)
		p->wake_pending = false;
	job = p->head;
	if (job) {
		p->head = job->next;
		if (!p->head)
			p->tail = NULL;
		job->next = NULL;
	} else {
		atomic_fetch_add(&p->idle, 1);
	}
	wake = need_wake(p);
	*stop = p->stopping;
	pthread_mutex_unlock(&p->lock);
	if (wake)
		p->ops.wake(p->ops.arg);
	return job;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct rpc_pool *p = w->pool;
	struct rpc_job *job;
	bool stop, woken = false;

	for (;;) {
		job = take(p, woken, &stop);
		woken = false;
		if (!job) {
			if (stop)
				break;
			job = p->ops.wait(p->ops.arg, w->scratch, &woken);
			atomic_fetch_sub(&p->idle, 1);
		}
		if (job)
			job->run(job); /* the job is RUN's now */
	}
	atomic_fetch_sub(&p->idle, 1);
	return NULL;
}

/* Starts the workers with all signals blocked (threads inherit the mask). */
static int start_workers(struct rpc_pool *p, unsigned n)
{
	sigset_t all, old;
	int rc = 0;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (p->nthreads = 0; p->nthreads < n; p->nthreads++) {
		struct worker *w = &p->workers[p->nthreads];

		w->pool = p;
		w->scratch = malloc(p->ops.scratch_size ? p->ops.scratch_size : 1);
		if (!w->scratch) {
			rc = -ENOMEM;
			break;
		}
		rc = -pthread_create(&w->thread, NULL, worker_main, w);
		if (rc < 0) {
			free(w->scratch);
			break;
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

int rpc_pool_new(unsigned nthreads, const struct rpc_pool_ops *ops, struct rpc_pool **out)
{
	struct rpc_pool *p;
	int rc = -ENOMEM;

	if (nthreads == 0)
		nthreads = 1;
	p = calloc(1, sizeof(*p));
	if (!p)
		goto out;
	p->workers = calloc(nthreads, sizeof(*p->workers));
	if (!p->workers)
		goto out_pool;
	p->ops = *ops;
	pthread_mutex_init(&p->lock, NULL);
	atomic_init(&p->idle, 0);
	rc = start_workers(p, nthreads);
	if (rc < 0)
		goto out_workers;
	*out = p;
	return 0;
out_workers:
	rpc_pool_free(p); /* joins the ones that started */
	return rc;
out_pool:
	free(p);
out:
	return rc;
}

void rpc_pool_submit(struct rpc_pool *p, struct rpc_job *head)
{
	struct rpc_job *tail = head;
	bool wake;

	if (!head)
		return;
	while (tail->next)
		tail = tail->next;
	pthread_mutex_lock(&p->lock);
	if (p->tail)
		p->tail->next = head;
	else
		p->head = head;
	p->tail = tail;
	wake = need_wake(p);
	pthread_mutex_unlock(&p->lock);
	if (wake)
		p->ops.wake(p->ops.arg);
}

unsigned rpc_pool_busy(struct rpc_pool *p)
{
	unsigned idle = atomic_load_explicit(&p->idle, memory_order_relaxed);

	return idle < p->nthreads ? p->nthreads - idle : 0;
}

unsigned rpc_pool_threads(const struct rpc_pool *p)
{
	return p->nthreads;
}

/* Every worker in its wait gets a wake of its own: each returns, finds
 * stopping set and, once the FIFO is empty, leaves (invariant 3). */
void rpc_pool_free(struct rpc_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nthreads; i++)
		p->ops.wake(p->ops.arg);
	for (unsigned i = 0; i < p->nthreads; i++) {
		pthread_join(p->workers[i].thread, NULL);
		free(p->workers[i].scratch);
	}
	pthread_mutex_destroy(&p->lock);
	free(p->workers);
	free(p);
}
