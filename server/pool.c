/* pool.c - a fixed set of worker threads draining one FIFO of jobs.
 *
 * The event loop must never wait on a handler (a READ of a cold file, an LMDB
 * write), so every decoded call becomes a job here.  One queue, one lock, one
 * condition variable: handlers take microseconds to milliseconds, so a lock per
 * job is not what limits us, and a single FIFO keeps calls roughly in arrival
 * order.  Workers run with every signal blocked, so SIGINT/SIGTERM land on the
 * main thread, whose handler stops the loop.
 */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>

#include "srv.h"

struct srv_pool {
	pthread_mutex_t lock;
	pthread_cond_t ready; /* a job was queued, or stopping was set */
	struct srv_job *head, *tail;
	bool stopping;
	unsigned nthreads; /* started, to be joined */
	pthread_t *threads;
};

/* Takes the next job, waiting for one; NULL once stopping and the queue is
 * empty, so every job queued before srv_pool_free still runs. */
static struct srv_job *next_job(struct srv_pool *p)
{
	struct srv_job *job;

	pthread_mutex_lock(&p->lock);
	while (!p->head && !p->stopping)
		pthread_cond_wait(&p->ready, &p->lock);
	job = p->head;
	if (job) {
		p->head = job->next;
		if (!p->head)
			p->tail = NULL;
		job->next = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	return job;
}

static void *worker_main(void *arg)
{
	struct srv_pool *p = arg;
	struct srv_job *job;

	while ((job = next_job(p)) != NULL)
		job->run(job); /* the job is RUN's now */
	return NULL;
}

/* Starts the workers with all signals blocked (threads inherit the mask). */
static int start_workers(struct srv_pool *p, unsigned n)
{
	sigset_t all, old;
	int rc = 0;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (p->nthreads = 0; p->nthreads < n; p->nthreads++) {
		rc = -pthread_create(&p->threads[p->nthreads], NULL, worker_main, p);
		if (rc < 0)
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

int srv_pool_new(unsigned nthreads, struct srv_pool **out)
{
	struct srv_pool *p;
	int rc = -ENOMEM;

	if (nthreads == 0)
		nthreads = 1;
	p = calloc(1, sizeof(*p));
	if (!p)
		goto out;
	p->threads = calloc(nthreads, sizeof(*p->threads));
	if (!p->threads)
		goto out_pool;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->ready, NULL);
	rc = start_workers(p, nthreads);
	if (rc < 0)
		goto out_workers;
	*out = p;
	return 0;
out_workers:
	srv_pool_free(p); /* joins the ones that started */
	return rc;
out_pool:
	free(p);
out:
	return rc;
}

void srv_pool_submit(struct srv_pool *p, struct srv_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&p->lock);
	assert(!p->stopping); /* nothing submits after srv_pool_free */
	if (p->tail)
		p->tail->next = job;
	else
		p->head = job;
	p->tail = job;
	pthread_cond_signal(&p->ready);
	pthread_mutex_unlock(&p->lock);
}

void srv_pool_free(struct srv_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->ready);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_cond_destroy(&p->ready);
	pthread_mutex_destroy(&p->lock);
	free(p->threads);
	free(p);
}
