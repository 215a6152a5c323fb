/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.c - the server's counters, and the HTTP endpoint that shows them
 * in Prometheus' text format (--metrics=ADDR:PORT).
 *
 * Design notes
 *
 * Counting must cost a call next to nothing, GETATTR's included, so nothing
 * a call counts is shared between the threads that run calls:
 *  1. Each thread that runs calls has a struct of counters of its own
 *     (struct srv_mthread), made on its first call and kept until the
 *     metrics stop; it alone stores to it, with a relaxed load and store
 *     (own_inc): no read-modify-write, no lock, no cache line another
 *     writer touches.  The scrape sums the threads' structs with relaxed
 *     loads; a sum may miss a call that ends meanwhile, as any snapshot
 *     does, but never tears a counter (each is one 64-bit word).
 *  2. Per export (and per client union), the counters are an array of
 *     slots, one cache line each, made on the export's first counted call:
 *     each worker thread owns one slot (its xslot, 1..nthreads).  A thread
 *     beyond the pool's (none runs calls today) shares slot 0 with atomic
 *     adds.  The array is freed with the export; a released client union
 *     takes its series with it, and a reopened one starts again from zero,
 *     which Prometheus reads as a counter reset.  So the series of client
 *     unions are bounded by --max-client-unions.
 *  3. Latency is a fixed histogram of SRV_M_BUCKETS bounds (10 us to 1 s),
 *     counted per bucket (not cumulated) and cumulated at the scrape; two
 *     clock_gettime calls a call (the vDSO: no system call).
 *  4. The engine's counters (union.h, struct un_stats) are read at the
 *     scrape; the engine knows nothing of this format.
 *  5. With --metrics off srv->metrics is NULL and a call costs one test.
 *  6. Per client, the counters are kept by (export, client address): a
 *     record of three counters (a cache line) for each address that made
 *     an NFS call, on the export's table (a client union's calls count on
 *     its template's), added to with relaxed atomic adds: a client's calls
 *     run on any thread.  The table is a hash whose chains only grow and
 *     are read without a lock (a record is published with a release store
 *     of its chain's head); its mutex is taken only to add a record, on a
 *     client's first call.  At most SRV_M_CLIENTS records an export; the
 *     calls of addresses beyond them count on one record, "other".  The
 *     records live as long as the export, so a client that comes back
 *     continues its series, and the memory is bounded by the cap.
 *
 * Counting is on with --metrics or the control socket (ctl.c, whose
 * `stats` reads the same page through srv_metrics_text); the HTTP side
 * runs only with --metrics.
 *
 * The HTTP side is libmicrohttpd's, on its own thread: GET /metrics gets
 * the text, anything else 404.  The scrape takes the export table's read
 * lock and the client union registry's lock while it walks the exports,
 * never a lock a call holds while it runs its procedure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "srv.h"

#define SRV_M_PROGS   12 /* >= the dispatcher's programs (checked at start) */
#define SRV_M_PROCS   32 /* >= any program's nprocs (checked at start) */
#define SRV_M_BUCKETS 16
/* Error slots: the program's statuses (the success first, never counted),
 * then a status it does not name and the RPC-level failures. */
#define SRV_M_ST_NAMED	 30
#define SRV_M_ST_OTHER	 30
#define SRV_M_ST_GARBAGE 31
#define SRV_M_ST_SYSERR	 32
#define SRV_M_STATUSES	 33

static const uint64_t bucket_ns[SRV_M_BUCKETS] = {
    10000,   25000,    50000,	 100000,   250000,    500000,	 1000000,   2500000,
    5000000, 10000000, 25000000, 50000000, 100000000, 250000000, 500000000, 1000000000,
};

struct srv_mproc {
	_Atomic uint64_t calls, ns;
	_Atomic uint64_t bucket[SRV_M_BUCKETS]; /* at most bucket_ns[i] */
	_Atomic uint64_t errors[SRV_M_STATUSES];
};

struct srv_mthread {
	struct srv_mthread *next; /* on srv_metrics.threads, set before publishing */
	unsigned xslot;		  /* its slot of every export's counters (note 2) */
	_Atomic uint64_t begun, ended, drc_hits;
	struct srv_mproc proc[SRV_M_PROGS][SRV_M_PROCS];
};

/* One thread's counters of one export: a cache line of its own. */
struct srv_xcount {
	_Alignas(64) _Atomic uint64_t calls, bytes_read, bytes_written;
};

/* One client address's counters on one export (note 6). */
struct srv_mclient {
	_Alignas(64) _Atomic uint64_t calls, bytes_read, bytes_written;
	struct srv_mclient *next; /* in its chain; set before publishing */
	unsigned char addr[16];	  /* IPv6, an IPv4 address mapped */
};

#define SRV_M_CLIENTS	     1024 /* records an export (note 6) */
#define SRV_M_CLIENT_BUCKETS 256

struct srv_mclients {
	struct srv_mclient other; /* the addresses beyond the cap */
	pthread_mutex_t lock;	  /* guards adding, and n */
	unsigned n;		  /* records, other not counted */
	struct srv_mclient *_Atomic chain[SRV_M_CLIENT_BUCKETS];
};

struct srv_metrics {
	struct srv *srv;
	char *addr;	   /* as --metrics gave it */
	unsigned long gen; /* which start this is (thread_counts) */
	struct MHD_Daemon *httpd;
	pthread_mutex_t lock; /* guards next_xslot and publishing threads */
	struct srv_mthread *_Atomic threads;
	unsigned nxslots, next_xslot;
	const struct srv_program *const *progs;
	size_t nprogs;
};

/* The calling thread's counters and whose they are: the start's number,
 * not its address, which a later start may get again (a test may run more
 * than one server in a process, one after another). */
static _Thread_local struct {
	unsigned long gen;
	struct srv_mthread *t;
} mine;
static atomic_ulong starts;

/* ---- counting ---- */

/* Adds N to a counter only this thread stores to (note 1). */
static void own_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

static uint64_t rd(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* This thread's counters in M, made on its first call; NULL when out of
 * memory (its calls are then not counted). */
static struct srv_mthread *thread_counts(struct srv_metrics *m)
{
	struct srv_mthread *t;

	if (mine.gen == m->gen)
		return mine.t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	pthread_mutex_lock(&m->lock);
	t->xslot = m->next_xslot < m->nxslots ? m->next_xslot++ : 0;
	t->next = atomic_load(&m->threads);
	atomic_store(&m->threads, t);
	pthread_mutex_unlock(&m->lock);
	mine.gen = m->gen;
	mine.t = t;
	return t;
}

void srv_metrics_begin(struct srv *s, struct srv_mcall *mc)
{
	if (!s->metrics)
		return;
	mc->t = thread_counts(s->metrics);
	if (!mc->t)
		return;
	own_add(&mc->t->begun, 1);
	mc->t0 = now_ns();
}

/* The error slot of a call's outcome, or -1 for a success or no status. */
static int status_slot(const struct srv_program *prog, const struct srv_proc *p,
		       const void *res, uint32_t accept)
{
	uint32_t code;

	if (accept == GARBAGE_ARGS)
		return SRV_M_ST_GARBAGE;
	if (accept != SUCCESS)
		return SRV_M_ST_SYSERR;
	if (!prog->result_status || !res || !prog->result_status(p, res, &code))
		return -1;
	if (prog->nstatuses && code == prog->statuses[0].code)
		return -1;
	for (size_t i = 1; i < prog->nstatuses && i < SRV_M_ST_NAMED; i++)
		if (prog->statuses[i].code == code)
			return (int)i;
	return SRV_M_ST_OTHER;
}

/* EX's counters, made on its first counted call (one CAS, once). */
static struct srv_xcount *export_counts(struct srv_metrics *m, struct srv_export *ex)
{
	struct srv_xcount *x = atomic_load_explicit(&ex->mcount, memory_order_acquire);
	struct srv_xcount *none = NULL;

	if (x)
		return x;
	x = aligned_alloc(64, m->nxslots * sizeof(*x));
	if (!x)
		return NULL;
	memset(x, 0, m->nxslots * sizeof(*x));
	if (atomic_compare_exchange_strong(&ex->mcount, &none, x))
		return x;
	free(x);
	return none;
}

static void count_export(struct srv_mthread *t, const struct srv_req *req)
{
	struct srv_xcount *x = export_counts(req->srv->metrics, req->ex);

	if (!x)
		return;
	if (t->xslot == 0) { /* shared (note 2) */
		atomic_fetch_add_explicit(&x->calls, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&x->bytes_read, req->bytes_read,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&x->bytes_written, req->bytes_written,
					  memory_order_relaxed);
		return;
	}
	x += t->xslot;
	own_add(&x->calls, 1);
	if (req->bytes_read)
		own_add(&x->bytes_read, req->bytes_read);
	if (req->bytes_written)
		own_add(&x->bytes_written, req->bytes_written);
}

/* ---- per client (note 6) ---- */

/* The key of PEER's address: 16 bytes, an IPv4 address mapped; false for
 * another family. */
static bool addr_key(const struct sockaddr_storage *peer, unsigned char key[16])
{
	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)peer;

		memset(key, 0, 10);
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &a->sin_addr, 4);
		return true;
	}
	if (peer->ss_family == AF_INET6) {
		memcpy(key, &((const struct sockaddr_in6 *)peer)->sin6_addr, 16);
		return true;
	}
	return false;
}

static unsigned addr_hash(const unsigned char key[16])
{
	uint32_t w[4];

	memcpy(w, key, sizeof(w));
	return ((w[0] ^ w[1] ^ w[2] ^ w[3]) * 2654435761u) >> 24; /* 0..255 */
}

/* KEY's record in chain HEAD, or NULL; without a lock (note 6). */
static struct srv_mclient *chain_find(struct srv_mclient *_Atomic *head,
				      const unsigned char key[16])
{
	struct srv_mclient *c = atomic_load_explicit(head, memory_order_acquire);

	while (c && memcmp(c->addr, key, 16) != 0)
		c = c->next;
	return c;
}

/* EX's table of clients, made on its first counted call (one CAS, once). */
static struct srv_mclients *clients_table(struct srv_export *ex)
{
	struct srv_mclients *t =
	    atomic_load_explicit(&ex->mclients, memory_order_acquire);
	struct srv_mclients *none = NULL;

	if (t)
		return t;
	t = aligned_alloc(64, sizeof(*t));
	if (!t)
		return NULL;
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	if (atomic_compare_exchange_strong(&ex->mclients, &none, t))
		return t;
	pthread_mutex_destroy(&t->lock);
	free(t);
	return none;
}

/* Adds KEY's record to T, or finds the one another thread added first;
 * "other" beyond the cap or out of memory. */
static struct srv_mclient *client_add(struct srv_mclients *t, const unsigned char key[16])
{
	struct srv_mclient *_Atomic *head = &t->chain[addr_hash(key)];
	struct srv_mclient *c;

	pthread_mutex_lock(&t->lock);
	c = chain_find(head, key);
	if (c || t->n >= SRV_M_CLIENTS)
		goto out;
	c = aligned_alloc(64, sizeof(*c));
	if (!c)
		goto out;
	memset(c, 0, sizeof(*c));
	memcpy(c->addr, key, 16);
	c->next = atomic_load_explicit(head, memory_order_relaxed);
	atomic_store_explicit(head, c, memory_order_release);
	t->n++;
out:
	pthread_mutex_unlock(&t->lock);
	return c ? c : &t->other;
}

static void count_client(const struct srv_req *req)
{
	struct srv_export *top = req->ex->parent ? req->ex->parent : req->ex;
	struct srv_mclients *t;
	struct srv_mclient *c;
	unsigned char key[16];

	if (!req->peer || !addr_key(req->peer, key) || !(t = clients_table(top)))
		return;
	c = chain_find(&t->chain[addr_hash(key)], key);
	if (!c)
		c = client_add(t, key);
	atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
	if (req->bytes_read)
		atomic_fetch_add_explicit(&c->bytes_read, req->bytes_read,
					  memory_order_relaxed);
	if (req->bytes_written)
		atomic_fetch_add_explicit(&c->bytes_written, req->bytes_written,
					  memory_order_relaxed);
}

static void client_sums(const struct srv_mclient *c, uint64_t v[3])
{
	v[0] = rd(&c->calls);
	v[1] = rd(&c->bytes_read);
	v[2] = rd(&c->bytes_written);
}

bool srv_metrics_client_sums(const struct srv *s, const struct srv_export *ex,
			     const char *host, uint64_t v[3])
{
	struct srv_mclients *t =
	    atomic_load_explicit(&ex->mclients, memory_order_acquire);
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	const struct srv_mclient *c = NULL;
	unsigned char key[16];

	if (!s->metrics)
		return false;
	v[0] = v[1] = v[2] = 0;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1)
		ss.ss_family = AF_INET;
	else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1)
		ss.ss_family = AF_INET6;
	if (t && addr_key(&ss, key))
		c = chain_find(&t->chain[addr_hash(key)], key);
	if (c)
		client_sums(c, v);
	return true;
}

static void clients_free(struct srv_mclients *t)
{
	struct srv_mclient *c, *next;

	if (!t)
		return;
	for (size_t b = 0; b < SRV_M_CLIENT_BUCKETS; b++)
		for (c = atomic_load(&t->chain[b]); c; c = next) {
			next = c->next;
			free(c);
		}
	pthread_mutex_destroy(&t->lock);
	free(t);
}

void srv_metrics_end(struct srv_mcall *mc, size_t prog_index,
		     const struct srv_program *prog, const struct srv_proc *p,
		     const struct srv_req *req, const void *res, uint32_t accept)
{
	struct srv_mthread *t = mc->t;
	struct srv_mproc *mp;
	uint64_t ns;
	size_t b = 0;
	int st;

	if (!t)
		return;
	ns = now_ns() - mc->t0;
	mp = &t->proc[prog_index][p - prog->procs];
	own_add(&mp->calls, 1);
	own_add(&mp->ns, ns);
	while (b < SRV_M_BUCKETS && ns > bucket_ns[b])
		b++;
	if (b < SRV_M_BUCKETS)
		own_add(&mp->bucket[b], 1);
	st = status_slot(prog, p, res, accept);
	if (st >= 0)
		own_add(&mp->errors[st], 1);
	if (req->ex) {
		count_export(t, req);
		count_client(req);
	}
	own_add(&t->ended, 1);
}

void srv_metrics_drc_hit(struct srv *s)
{
	struct srv_mthread *t = s->metrics ? thread_counts(s->metrics) : NULL;

	if (t)
		own_add(&t->drc_hits, 1);
}

void srv_metrics_export_free(struct srv_export *ex)
{
	free(atomic_load(&ex->mcount));
	clients_free(atomic_load(&ex->mclients));
}

/* ---- the text format ---- */

static void family(FILE *f, const char *fam, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fam, help, fam, type);
}

/* Writes S as a label value: backslash, double quote and newline escaped. */
static void label_value(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f);
		if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

/* The program label is the table's name in capitals and its version
 * ("NFS3", "MOUNT3", "NLM4", "NLM1", "PORTMAP2"). */
static void proc_labels(FILE *f, const struct srv_program *pg, const struct srv_proc *p)
{
	fputs("program=\"", f);
	for (const char *c = pg->name; *c; c++)
		fputc(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c, f);
	fprintf(f, "%u\",procedure=\"%s\"", pg->vers, p->name);
}

/* The sum over the threads of one procedure's counters. */
static void proc_sum(const struct srv_metrics *m, size_t pi, size_t qi, uint64_t *calls,
		     uint64_t *ns, uint64_t bucket[SRV_M_BUCKETS],
		     uint64_t errors[SRV_M_STATUSES])
{
	*calls = *ns = 0;
	memset(bucket, 0, SRV_M_BUCKETS * sizeof(bucket[0]));
	memset(errors, 0, SRV_M_STATUSES * sizeof(errors[0]));
	for (const struct srv_mthread *t = atomic_load(&m->threads); t; t = t->next) {
		const struct srv_mproc *mp = &t->proc[pi][qi];

		*calls += rd(&mp->calls);
		*ns += rd(&mp->ns);
		for (size_t b = 0; b < SRV_M_BUCKETS; b++)
			bucket[b] += rd(&mp->bucket[b]);
		for (size_t e = 0; e < SRV_M_STATUSES; e++)
			errors[e] += rd(&mp->errors[e]);
	}
}

static const char *status_name(const struct srv_program *pg, size_t e)
{
	if (e == SRV_M_ST_GARBAGE)
		return "GARBAGE_ARGS";
	if (e == SRV_M_ST_SYSERR)
		return "SYSTEM_ERR";
	if (e == SRV_M_ST_OTHER || e >= pg->nstatuses)
		return "OTHER";
	return pg->statuses[e].name;
}

/* A named procedure of program PI (a hole in a table has no name). */
static const struct srv_proc *named_proc(const struct srv_metrics *m, size_t pi,
					 size_t qi)
{
	const struct srv_program *pg = m->progs[pi];

	return qi < pg->nprocs && pg->procs[qi].name ? &pg->procs[qi] : NULL;
}

/* One procedure's lines of the three call families, into three streams
 * (a family's lines must be together). */
static void proc_lines(const struct srv_metrics *m, size_t pi, size_t qi, FILE *calls_f,
		       FILE *err_f, FILE *lat_f)
{
	const struct srv_program *pg = m->progs[pi];
	const struct srv_proc *p = named_proc(m, pi, qi);
	uint64_t calls, ns, bucket[SRV_M_BUCKETS], errors[SRV_M_STATUSES], cum = 0;

	proc_sum(m, pi, qi, &calls, &ns, bucket, errors);
	fputs("union_nfsd_rpc_calls_total{", calls_f);
	proc_labels(calls_f, pg, p);
	fprintf(calls_f, "} %llu\n", (unsigned long long)calls);
	for (size_t e = 0; e < SRV_M_STATUSES; e++) {
		if (!errors[e])
			continue;
		fputs("union_nfsd_rpc_errors_total{", err_f);
		proc_labels(err_f, pg, p);
		fprintf(err_f, ",status=\"%s\"} %llu\n", status_name(pg, e),
			(unsigned long long)errors[e]);
	}
	if (!calls)
		return; /* a histogram from the first call on: pages stay small */
	for (size_t b = 0; b < SRV_M_BUCKETS; b++) {
		cum += bucket[b];
		fputs("union_nfsd_rpc_duration_seconds_bucket{", lat_f);
		proc_labels(lat_f, pg, p);
		fprintf(lat_f, ",le=\"%g\"} %llu\n", (double)bucket_ns[b] / 1e9,
			(unsigned long long)cum);
	}
	fputs("union_nfsd_rpc_duration_seconds_bucket{", lat_f);
	proc_labels(lat_f, pg, p);
	fprintf(lat_f, ",le=\"+Inf\"} %llu\n", (unsigned long long)calls);
	fputs("union_nfsd_rpc_duration_seconds_sum{", lat_f);
	proc_labels(lat_f, pg, p);
	fprintf(lat_f, "} %.9f\n", (double)ns / 1e9);
	fputs("union_nfsd_rpc_duration_seconds_count{", lat_f);
	proc_labels(lat_f, pg, p);
	fprintf(lat_f, "} %llu\n", (unsigned long long)calls);
}

/* Closes memory stream TMP (of *BUF, *LEN) and appends what it held to F. */
static void splice_stream(FILE *f, FILE *tmp, char **buf, size_t *len)
{
	fclose(tmp); /* sets *BUF and *LEN */
	fwrite(*buf, 1, *len, f);
	free(*buf);
	*buf = NULL;
}

static void write_calls(FILE *f, const struct srv_metrics *m)
{
	char *cb = NULL, *eb = NULL, *lb = NULL;
	size_t cl = 0, el = 0, ll = 0;
	FILE *cf = open_memstream(&cb, &cl), *ef = open_memstream(&eb, &el),
	     *lf = open_memstream(&lb, &ll);

	if (!cf || !ef || !lf)
		goto out;
	for (size_t pi = 0; pi < m->nprogs; pi++)
		for (size_t qi = 0; qi < SRV_M_PROCS; qi++)
			if (named_proc(m, pi, qi))
				proc_lines(m, pi, qi, cf, ef, lf);
	family(f, "union_nfsd_rpc_calls_total", "counter",
	       "Calls run, by program (name and version) and procedure.");
	splice_stream(f, cf, &cb, &cl);
	family(f, "union_nfsd_rpc_errors_total", "counter",
	       "Calls whose result was not a success, by the status the "
	       "procedure's result names (GARBAGE_ARGS, SYSTEM_ERR: the RPC's).");
	splice_stream(f, ef, &eb, &el);
	family(f, "union_nfsd_rpc_duration_seconds", "histogram",
	       "Time from a call's procedure being known to its reply encoded.");
	splice_stream(f, lf, &lb, &ll);
	return;
out:
	if (cf)
		fclose(cf);
	if (ef)
		fclose(ef);
	if (lf)
		fclose(lf);
	free(cb);
	free(eb);
	free(lb);
}

static void export_line(FILE *f, const char *fam, const struct srv_export *ex, uint64_t v)
{
	fprintf(f, "%s{export=\"", fam);
	label_value(f, ex->path);
	if (ex->parent) {
		fputs("\",client=\"", f);
		label_value(f, ex->client_key);
	}
	fprintf(f, "\"} %llu\n", (unsigned long long)v);
}

/* EX's calls, bytes read and bytes written, summed over the threads. */
static void export_sums(const struct srv_metrics *m, const struct srv_export *ex,
			uint64_t v[3])
{
	const struct srv_xcount *x = atomic_load(&ex->mcount);

	v[0] = v[1] = v[2] = 0;
	for (unsigned i = 0; x && i < m->nxslots; i++) {
		v[0] += rd(&x[i].calls);
		v[1] += rd(&x[i].bytes_read);
		v[2] += rd(&x[i].bytes_written);
	}
}

bool srv_metrics_export_sums(const struct srv *s, const struct srv_export *ex,
			     uint64_t v[3])
{
	if (!s->metrics)
		return false;
	export_sums(s->metrics, ex, v);
	return true;
}

/* One export's (or client union's) three sums, into one stream each. */
static void export_lines(const struct srv_metrics *m, const struct srv_export *ex,
			 FILE *out[3])
{
	static const char *const fam[3] = {"union_nfsd_export_calls_total",
					   "union_nfsd_export_read_bytes_total",
					   "union_nfsd_export_written_bytes_total"};
	uint64_t v[3];

	export_sums(m, ex, v);
	for (int k = 0; k < 3; k++)
		export_line(out[k], fam[k], ex, v[k]);
}

/* C's address as text: an IPv4 address mapped as IPv4. */
static void client_text(const struct srv_mclient *c, char *buf, size_t len)
{
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0,	   0,
						 0, 0, 0, 0, 0xff, 0xff};
	bool v4 = memcmp(c->addr, mapped, sizeof(mapped)) == 0;

	if (!inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? c->addr + 12 : c->addr, buf,
		       (socklen_t)len))
		snprintf(buf, len, "?");
}

static void client_line(FILE *f, const char *fam, const struct srv_export *ex,
			const char *client, uint64_t v)
{
	fprintf(f, "%s{export=\"", fam);
	label_value(f, ex->path);
	fprintf(f, "\",client=\"%s\"} %llu\n", client, (unsigned long long)v);
}

/* Template or export EX's clients (note 6), into OUT[0..2]; "other" once
 * it counted a call. */
static void client_lines(const struct srv_export *ex, FILE *out[3])
{
	static const char *const fam[3] = {"union_nfsd_client_calls_total",
					   "union_nfsd_client_read_bytes_total",
					   "union_nfsd_client_written_bytes_total"};
	const struct srv_mclients *t = atomic_load(&ex->mclients);
	char addr[INET6_ADDRSTRLEN];
	uint64_t v[3];

	if (!t)
		return;
	for (size_t b = 0; b < SRV_M_CLIENT_BUCKETS; b++)
		for (const struct srv_mclient *c = atomic_load(&t->chain[b]); c;
		     c = c->next) {
			client_text(c, addr, sizeof(addr));
			client_sums(c, v);
			for (int k = 0; k < 3; k++)
				client_line(out[k], fam[k], ex, addr, v[k]);
		}
	client_sums(&t->other, v);
	for (int k = 0; v[0] && k < 3; k++)
		client_line(out[k], fam[k], ex, "other", v[k]);
}

/* Every export, and every open client union of a per-client one, into
 * OUT[0..2]; their clients into OUT[3..5]. */
static void export_walk(const struct srv_metrics *m, FILE *out[6])
{
	struct srv *s = m->srv;

	srv_exports_read_begin(s);
	pthread_mutex_lock(&s->unions.lock);
	for (size_t i = 0; i < s->nexports; i++) {
		const struct srv_export *t = s->exports[i];

		if (t->ux)
			export_lines(m, t, out);
		for (const struct srv_export *in = t->instances; in; in = in->next)
			if (in->state == SRV_UNION_OPEN)
				export_lines(m, in, out);
		client_lines(t, out + 3);
	}
	pthread_mutex_unlock(&s->unions.lock);
	srv_exports_read_end(s);
}

static void write_exports(FILE *f, const struct srv_metrics *m)
{
	static const char *const fam[6][2] = {
	    {"union_nfsd_export_calls_total",
	     "NFS calls admitted to an export, or to one client's union of it."},
	    {"union_nfsd_export_read_bytes_total", "File bytes READ returned."},
	    {"union_nfsd_export_written_bytes_total", "File bytes WRITE took."},
	    {"union_nfsd_client_calls_total",
	     "NFS calls admitted to an export (its client unions' included), by "
	     "client address; \"other\": addresses beyond the cap."},
	    {"union_nfsd_client_read_bytes_total",
	     "File bytes READ returned, by export and client address."},
	    {"union_nfsd_client_written_bytes_total",
	     "File bytes WRITE took, by export and client address."},
	};
	char *buf[6] = {NULL};
	size_t len[6] = {0};
	FILE *out[6];
	int k;

	for (k = 0; k < 6; k++) {
		out[k] = open_memstream(&buf[k], &len[k]);
		if (!out[k])
			break;
	}
	if (k == 6)
		export_walk(m, out);
	for (int j = 0; j < k; j++) {
		family(f, fam[j][0], "counter", fam[j][1]);
		splice_stream(f, out[j], &buf[j], &len[j]);
	}
}

static void one(FILE *f, const char *fam, const char *type, const char *help, double v)
{
	family(f, fam, type, help);
	fprintf(f, "%s %.17g\n", fam, v);
}

/* A time summed with its count: a summary without quantiles. */
static void timed(FILE *f, const char *fam, const char *help, uint64_t count, uint64_t ns)
{
	family(f, fam, "summary", help);
	fprintf(f, "%s_sum %.9f\n%s_count %llu\n", fam, (double)ns / 1e9, fam,
		(unsigned long long)count);
}

static void write_engine(FILE *f, const struct srv_metrics *m)
{
	struct un_stats u;

	if (un_state_stats(m->srv->state, &u) < 0)
		return;
	one(f, "union_nfsd_nodes", "gauge", "Records in the node table.",
	    (double)u.nodes);
	timed(f, "union_nfsd_node_commit_seconds",
	      "Write transactions of the node table (a batch each) and their time.",
	      u.commits, u.commit_ns);
	timed(f, "union_nfsd_node_flush_seconds",
	      "Flushes of the node table to disk (an fdatasync each) and their time.",
	      u.flushes, u.flush_ns);
	timed(f, "union_nfsd_upper_fsync_seconds",
	      "Fsyncs of upper-layer inodes (changes made durable) and their time.",
	      u.fsyncs, u.fsync_ns);
	one(f, "union_nfsd_copyups_total", "counter", "Copy-ups done.",
	    (double)u.copyups);
	one(f, "union_nfsd_copyup_bytes_total", "counter",
	    "File bytes copied up from lower layers.", (double)u.copyup_bytes);
	timed(f, "union_nfsd_copyup_seconds", "Copy-ups and the time they took.",
	      u.copyups, u.copyup_ns);
	one(f, "union_nfsd_resolve_cache_hits_total", "counter",
	    "Handles and names served from the resolve cache.", (double)u.rcache_hits);
	one(f, "union_nfsd_resolve_cache_misses_total", "counter",
	    "Look-ups the resolve cache could not serve.", (double)u.rcache_misses);
	one(f, "union_nfsd_listing_cache_hits_total", "counter",
	    "Directory listings served from the listing cache.", (double)u.listing_hits);
	one(f, "union_nfsd_listing_cache_misses_total", "counter",
	    "Directory listings built anew.", (double)u.listing_misses);
}

static void write_transport(FILE *f, const struct srv_metrics *m)
{
	struct srv *s = m->srv;
	struct srv_pool *pool = atomic_load(&s->pool);
	uint64_t begun = 0, ended = 0, drc = 0;

	for (const struct srv_mthread *t = atomic_load(&m->threads); t; t = t->next) {
		begun += rd(&t->begun);
		ended += rd(&t->ended);
		drc += rd(&t->drc_hits);
	}
	one(f, "union_nfsd_connections_open", "gauge", "TCP connections open.",
	    (double)atomic_load_explicit(&s->conns_open, memory_order_relaxed));
	one(f, "union_nfsd_drc_hits_total", "counter",
	    "Retransmissions answered from the duplicate request cache.", (double)drc);
	one(f, "union_nfsd_calls_in_flight", "gauge",
	    "Calls whose procedure runs or whose reply is being encoded.",
	    (double)(begun > ended ? begun - ended : 0));
	one(f, "union_nfsd_worker_threads", "gauge", "Worker threads.",
	    (double)(pool ? srv_pool_threads(pool) : 0));
	one(f, "union_nfsd_worker_threads_busy", "gauge",
	    "Worker threads not waiting for work (reading, running or answering).",
	    (double)(pool ? srv_pool_busy(pool) : 0));
}

/* The whole page; NULL when out of memory. */
static char *render(const struct srv_metrics *m, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		return NULL;
	write_calls(f, m);
	write_exports(f, m);
	write_engine(f, m);
	write_transport(f, m);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

char *srv_metrics_text(struct srv *s, size_t *len)
{
	return s->metrics ? render(s->metrics, len) : NULL;
}

/* ---- HTTP (libmicrohttpd) ---- */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, char *body,
			     size_t len, const char *type)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **req_cls)
{
	const struct srv_metrics *m = cls;
	size_t len = 0;
	char *body;

	(void)version;
	(void)upload;
	(void)upload_size;
	(void)req_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 || strcmp(url, "/metrics") != 0) {
		body = strdup("not found\n");
		return body ? reply(conn, MHD_HTTP_NOT_FOUND, body, strlen(body),
				    "text/plain")
			    : MHD_NO;
	}
	body = render(m, &len);
	if (!body)
		return MHD_NO;
	return reply(conn, MHD_HTTP_OK, body, len,
		     "text/plain; version=0.0.4; charset=utf-8");
}

bool srv_metrics_addr_parse(const char *text, struct sockaddr_storage *out)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	const char *colon = strrchr(text, ':');
	char host[INET6_ADDRSTRLEN + 2], *end;
	size_t hl;
	unsigned long port;

	if (!colon || colon == text)
		return false;
	hl = (size_t)(colon - text);
	if (hl >= sizeof(host))
		return false;
	memcpy(host, text, hl);
	host[hl] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || port > 65535)
		return false;
	if (host[0] == '[' && host[hl - 1] == ']') {
		host[hl - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
			return false;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
	} else {
		return false;
	}
	if (out)
		*out = ss;
	return true;
}

/* Starts the HTTP thread with every signal blocked, as the workers. */
static struct MHD_Daemon *httpd_start(struct srv_metrics *m,
				      const struct sockaddr_storage *ss)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
	sigset_t all, old;
	struct MHD_Daemon *d;

	if (ss->ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	d = MHD_start_daemon(flags, 0, NULL, NULL, answer, m, MHD_OPTION_SOCK_ADDR,
			     (const struct sockaddr *)ss, MHD_OPTION_CONNECTION_LIMIT,
			     (unsigned)16, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
			     MHD_OPTION_END);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return d;
}

int srv_metrics_start(struct srv *s, const char *addr, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	struct srv_metrics *m;

	if (addr && !srv_metrics_addr_parse(addr, &ss)) {
		snprintf(err, errlen, "bad --metrics '%s' (ADDR:PORT)", addr);
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	m->srv = s;
	m->addr = addr ? strdup(addr) : NULL;
	m->gen = atomic_fetch_add(&starts, 1) + 1; /* 0: no thread's yet */
	m->progs = srv_rpc_programs(&m->nprogs);
	m->nxslots = s->cfg.nthreads + 1;
	m->next_xslot = 1;
	pthread_mutex_init(&m->lock, NULL);
	for (size_t i = 0; i < m->nprogs; i++)
		if (m->nprogs > SRV_M_PROGS || m->progs[i]->nprocs > SRV_M_PROCS) {
			snprintf(err, errlen, "metrics: more procedures than counted");
			goto fail;
		}
	s->metrics = m; /* before the workers start: they read it unlocked */
	if (!addr)
		return 0; /* counting only: the control socket shows them */
	m->httpd = httpd_start(m, &ss);
	if (m->httpd && m->addr)
		return 0;
	if (m->httpd)
		MHD_stop_daemon(m->httpd);
	snprintf(err, errlen, "metrics: cannot serve HTTP on %s", addr);
	s->metrics = NULL;
fail:
	pthread_mutex_destroy(&m->lock);
	free(m->addr);
	free(m);
	return -EADDRNOTAVAIL;
}

void srv_metrics_stop(struct srv *s)
{
	if (s->metrics && s->metrics->httpd) {
		MHD_stop_daemon(s->metrics->httpd);
		s->metrics->httpd = NULL;
	}
}

void srv_metrics_free(struct srv *s)
{
	struct srv_metrics *m = s->metrics;
	struct srv_mthread *t, *next;

	if (!m)
		return;
	srv_metrics_stop(s);
	s->metrics = NULL;
	for (t = atomic_load(&m->threads); t; t = next) {
		next = t->next;
		free(t);
	}
	pthread_mutex_destroy(&m->lock);
	free(m->addr);
	free(m);
}

bool srv_metrics_serves(const struct srv *s, const char *addr)
{
	const char *have = s->metrics ? s->metrics->addr : NULL;

	if (!have || !addr)
		return !have && !addr;
	return strcmp(have, addr) == 0;
}
