/* SPDX-License-Identifier: Apache-2.0 */
/* count.c - every call counted by the thread that runs it: per registered
 * program and procedure, calls, time, a latency histogram and errors by
 * status.  The operations room's metrics read the sums; nothing here knows
 * how they are shown.
 *
 * Design notes
 *
 * Counting must cost a call next to nothing, GETATTR's included, so nothing
 * a call counts is shared between the threads that run calls:
 *  1. Each thread that runs calls has a struct of counters of its own
 *     (struct rpc_cthread), made on its first call and kept until the
 *     counters are freed; it alone stores to it, with a relaxed load and
 *     store (rpc_count_own_add): no read-modify-write, no lock, no cache
 *     line another writer touches.  A reader sums the threads' structs with relaxed
 *     loads; a sum may miss a call that ends meanwhile, as any snapshot
 *     does, but never tears a counter (each is one 64-bit word).
 *  2. Latency is a fixed histogram of RPC_COUNT_BUCKETS bounds (10 us to
 *     1 s), counted per bucket (not cumulated); two clock_gettime calls a
 *     call (the vDSO: no system call).
 *  3. Off (svc->counts NULL), a call costs one test.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "rpc_private.h"

const uint64_t rpc_count_bucket_ns[RPC_COUNT_BUCKETS] = {
    10000,   25000,    50000,	 100000,   250000,    500000,	 1000000,   2500000,
    5000000, 10000000, 25000000, 50000000, 100000000, 250000000, 500000000, 1000000000,
};

struct rpc_cproc {
	_Atomic uint64_t calls, ns;
	_Atomic uint64_t bucket[RPC_COUNT_BUCKETS];
	_Atomic uint64_t errors[RPC_COUNT_STATUSES];
};

struct rpc_cthread {
	struct rpc_cthread *next; /* on rpc_counts.threads, set before publishing */
	_Atomic uint64_t begun, ended, drc_hits;
	struct rpc_cproc proc[RPC_SVC_MAX_PROGRAMS][RPC_COUNT_PROCS];
};

struct rpc_counts {
	unsigned long gen;    /* which start this is (thread_counts) */
	pthread_mutex_t lock; /* guards publishing threads */
	struct rpc_cthread *_Atomic threads;
};

/* The calling thread's counters and whose they are: the start's number,
 * not its address, which a later start may get again (a test may run more
 * than one server in a process, one after another). */
static _Thread_local struct {
	unsigned long gen;
	struct rpc_cthread *t;
} mine;
static atomic_ulong starts;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int rpc_counts_start(struct rpc_svc *svc)
{
	struct rpc_counts *c;

	for (size_t i = 0; i < svc->nregs; i++)
		if (svc->regs[i].prog->nprocs > RPC_COUNT_PROCS)
			return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->gen = atomic_fetch_add(&starts, 1) + 1;
	svc->counts = c;
	return 0;
}

bool rpc_counts_on(const struct rpc_svc *svc)
{
	return svc->counts != NULL;
}

void rpc_counts_free(struct rpc_counts *c)
{
	struct rpc_cthread *t, *next;

	if (!c)
		return;
	for (t = atomic_load(&c->threads); t; t = next) {
		next = t->next;
		free(t);
	}
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* This thread's counters in C, made on its first call; NULL when out of
 * memory (its calls are then not counted). */
static struct rpc_cthread *thread_counts(struct rpc_counts *c)
{
	struct rpc_cthread *t;

	if (mine.gen == c->gen)
		return mine.t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	pthread_mutex_lock(&c->lock);
	t->next = atomic_load(&c->threads);
	atomic_store(&c->threads, t);
	pthread_mutex_unlock(&c->lock);
	mine.gen = c->gen;
	mine.t = t;
	return t;
}

void rpc_count_begin(struct rpc_svc *svc, struct rpc_ccall *cc)
{
	if (!svc->counts)
		return;
	cc->t = thread_counts(svc->counts);
	if (!cc->t)
		return;
	rpc_count_own_add(&cc->t->begun, 1);
	cc->t0 = now_ns();
}

/* The error slot of a call's outcome, or -1 for a success or no status. */
static int status_slot(const struct rpc_program *prog, const struct rpc_proc *p,
		       const void *res, uint32_t accept)
{
	uint32_t code;

	if (accept == GARBAGE_ARGS)
		return RPC_COUNT_ST_GARBAGE;
	if (accept != SUCCESS)
		return RPC_COUNT_ST_SYSERR;
	if (!prog->result_status || !res || !prog->result_status(p, res, &code))
		return -1;
	if (prog->nstatuses && code == prog->statuses[0].code)
		return -1;
	for (size_t i = 1; i < prog->nstatuses && i < RPC_COUNT_ST_NAMED; i++)
		if (prog->statuses[i].code == code)
			return (int)i;
	return RPC_COUNT_ST_OTHER;
}

void rpc_count_end(struct rpc_ccall *cc, size_t pi, const struct rpc_program *prog,
		   const struct rpc_proc *p, const void *res, uint32_t accept)
{
	struct rpc_cthread *t = cc->t;
	struct rpc_cproc *cp;
	uint64_t ns;
	size_t b = 0;
	int st;

	if (!t)
		return;
	ns = now_ns() - cc->t0;
	cp = &t->proc[pi][p - prog->procs];
	rpc_count_own_add(&cp->calls, 1);
	rpc_count_own_add(&cp->ns, ns);
	while (b < RPC_COUNT_BUCKETS && ns > rpc_count_bucket_ns[b])
		b++;
	if (b < RPC_COUNT_BUCKETS)
		rpc_count_own_add(&cp->bucket[b], 1);
	st = status_slot(prog, p, res, accept);
	if (st >= 0)
		rpc_count_own_add(&cp->errors[st], 1);
	rpc_count_own_add(&t->ended, 1);
}

void rpc_count_drc_hit(struct rpc_svc *svc)
{
	struct rpc_cthread *t = svc->counts ? thread_counts(svc->counts) : NULL;

	if (t)
		rpc_count_own_add(&t->drc_hits, 1);
}

void rpc_counts_proc(const struct rpc_svc *svc, size_t pi, size_t proc,
		     struct rpc_proc_sums *out)
{
	*out = (struct rpc_proc_sums){0};
	if (!svc->counts || pi >= RPC_SVC_MAX_PROGRAMS || proc >= RPC_COUNT_PROCS)
		return;
	for (struct rpc_cthread *t = atomic_load(&svc->counts->threads); t; t = t->next) {
		const struct rpc_cproc *cp = &t->proc[pi][proc];

		out->calls += rpc_count_read(&cp->calls);
		out->ns += rpc_count_read(&cp->ns);
		for (size_t b = 0; b < RPC_COUNT_BUCKETS; b++)
			out->bucket[b] += rpc_count_read(&cp->bucket[b]);
		for (size_t e = 0; e < RPC_COUNT_STATUSES; e++)
			out->errors[e] += rpc_count_read(&cp->errors[e]);
	}
}

void rpc_counts_calls(const struct rpc_svc *svc, uint64_t *begun, uint64_t *ended,
		      uint64_t *drc_hits)
{
	*begun = *ended = *drc_hits = 0;
	if (!svc->counts)
		return;
	for (struct rpc_cthread *t = atomic_load(&svc->counts->threads); t; t = t->next) {
		*begun += rpc_count_read(&t->begun);
		*ended += rpc_count_read(&t->ended);
		*drc_hits += rpc_count_read(&t->drc_hits);
	}
}

void rpc_counts_transport(const struct rpc_svc *svc, unsigned *conns, unsigned *threads,
			  unsigned *busy)
{
	struct rpc_pool *p = atomic_load(&svc->pool);

	*conns = atomic_load_explicit(&svc->conns_open, memory_order_relaxed);
	*threads = p ? rpc_pool_threads(p) : 0;
	*busy = p ? rpc_pool_busy(p) : 0;
}
