/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.c - the server's counters in Prometheus' text format, and the
 * HTTP endpoint that shows them (--metrics=ADDR:PORT).
 *
 * Design notes
 *
 * This file counts nothing: it reads what the counted code keeps, as
 * fs/nfsd/stats.c reads what nfsd counts.
 *  1. Calls by program and procedure (calls, time, a latency histogram
 *     cumulated here at the scrape, errors by status) and the transport's
 *     gauges: the RPC layer's (rpc/count.c, rpc_counts_proc and
 *     rpc_counts_transport), by the registry's order of programs.
 *  2. Calls and bytes per export, client union and client address: the
 *     exports' (server/exports/count.c, srv_counts_export and
 *     srv_counts_clients_each).
 *  3. The engine's counters (union.h, struct un_stats), which know nothing
 *     of this format.
 *  4. The client unions open, the bytes they hold by their own count
 *     (srv_union_mem) and their limits (server/exports/unions.c, rules 5
 *     and 12).
 *
 * Counting is switched on (srv_metrics_start) with --metrics or the control
 * socket (ctl.c, whose `stats` reads the same page through
 * srv_metrics_text); the HTTP side runs only with --metrics.  Off, a call
 * costs one test in each counting place.
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

#include "ops.h"

struct srv_metrics {
	struct srv *srv;
	struct rpc_svc *svc;
	char *addr; /* as --metrics gave it; NULL: counting only */
	struct MHD_Daemon *httpd;
};

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
static void proc_labels(FILE *f, const struct rpc_program *pg, const struct rpc_proc *p)
{
	fputs("program=\"", f);
	for (const char *c = pg->name; *c; c++)
		fputc(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c, f);
	fprintf(f, "%u\",procedure=\"%s\"", pg->vers, p->name);
}

static const char *status_name(const struct rpc_program *pg, size_t e)
{
	if (e == RPC_COUNT_ST_GARBAGE)
		return "GARBAGE_ARGS";
	if (e == RPC_COUNT_ST_SYSERR)
		return "SYSTEM_ERR";
	if (e == RPC_COUNT_ST_OTHER || e >= pg->nstatuses)
		return "OTHER";
	return pg->statuses[e].name;
}

/* A named procedure of program PI (a hole in a table has no name). */
static const struct rpc_proc *named_proc(const struct srv_metrics *m, size_t pi,
					 size_t qi)
{
	const struct rpc_program *pg = rpc_svc_program(m->svc, pi);

	return qi < pg->nprocs && pg->procs[qi].name ? &pg->procs[qi] : NULL;
}

/* One procedure's lines of the three call families, into three streams
 * (a family's lines must be together). */
static void proc_lines(const struct srv_metrics *m, size_t pi, size_t qi, FILE *calls_f,
		       FILE *err_f, FILE *lat_f)
{
	const struct rpc_program *pg = rpc_svc_program(m->svc, pi);
	const struct rpc_proc *p = named_proc(m, pi, qi);
	struct rpc_proc_sums sum;
	uint64_t calls, ns, *bucket = sum.bucket, *errors = sum.errors, cum = 0;

	rpc_counts_proc(m->svc, pi, qi, &sum);
	calls = sum.calls;
	ns = sum.ns;
	fputs("union_nfsd_rpc_calls_total{", calls_f);
	proc_labels(calls_f, pg, p);
	fprintf(calls_f, "} %llu\n", (unsigned long long)calls);
	for (size_t e = 0; e < RPC_COUNT_STATUSES; e++) {
		if (!errors[e])
			continue;
		fputs("union_nfsd_rpc_errors_total{", err_f);
		proc_labels(err_f, pg, p);
		fprintf(err_f, ",status=\"%s\"} %llu\n", status_name(pg, e),
			(unsigned long long)errors[e]);
	}
	if (!calls)
		return; /* a histogram from the first call on: pages stay small */
	for (size_t b = 0; b < RPC_COUNT_BUCKETS; b++) {
		cum += bucket[b];
		fputs("union_nfsd_rpc_duration_seconds_bucket{", lat_f);
		proc_labels(lat_f, pg, p);
		fprintf(lat_f, ",le=\"%g\"} %llu\n", (double)rpc_count_bucket_ns[b] / 1e9,
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
	for (size_t pi = 0; pi < rpc_svc_nprograms(m->svc); pi++)
		for (size_t qi = 0; qi < RPC_COUNT_PROCS; qi++)
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

/* One export's (or client union's) three sums, into one stream each. */
static void export_lines(const struct srv_metrics *m, const struct srv_export *ex,
			 FILE *out[3])
{
	static const char *const fam[3] = {"union_nfsd_export_calls_total",
					   "union_nfsd_export_read_bytes_total",
					   "union_nfsd_export_written_bytes_total"};
	uint64_t v[3] = {0};

	srv_counts_export(m->srv, ex, v);
	for (int k = 0; k < 3; k++)
		export_line(out[k], fam[k], ex, v[k]);
}

static void client_line(FILE *f, const char *fam, const struct srv_export *ex,
			const char *client, uint64_t v)
{
	fprintf(f, "%s{export=\"", fam);
	label_value(f, ex->path);
	fprintf(f, "\",client=\"%s\"} %llu\n", client, (unsigned long long)v);
}

/* One client record's lines (srv_counts_clients_each): ARG is
 * {export, streams}. */
struct client_lines_arg {
	const struct srv_export *ex;
	FILE **out;
};

static void client_lines_one(void *arg, const char *client, const uint64_t v[3])
{
	static const char *const fam[3] = {"union_nfsd_client_calls_total",
					   "union_nfsd_client_read_bytes_total",
					   "union_nfsd_client_written_bytes_total"};
	const struct client_lines_arg *a = arg;

	for (int k = 0; k < 3; k++)
		client_line(a->out[k], fam[k], a->ex, client, v[k]);
}

/* Template or export EX's clients, into OUT[0..2]; "other" once it counted
 * a call. */
static void client_lines(const struct srv_export *ex, FILE *out[3])
{
	struct client_lines_arg a = {ex, out};

	srv_counts_clients_each(ex, client_lines_one, &a);
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

/* Note 4: under the exports' read lock and the registry's lock. */
static void write_unions(FILE *f, const struct srv_metrics *m)
{
	struct srv *s = m->srv;
	size_t open = 0, bytes = 0, memory;
	unsigned cap;

	srv_exports_read_begin(s);
	pthread_mutex_lock(&s->unions.lock);
	for (size_t i = 0; i < s->nexports; i++)
		for (const struct srv_export *in = s->exports[i]->instances; in;
		     in = in->next) {
			open += in->state == SRV_UNION_OPEN;
			bytes += srv_union_mem(s, in);
		}
	cap = s->unions.cap;
	memory = s->unions.memory;
	pthread_mutex_unlock(&s->unions.lock);
	srv_exports_read_end(s);
	one(f, "union_nfsd_client_unions_open", "gauge", "Client unions open.",
	    (double)open);
	one(f, "union_nfsd_client_unions_max", "gauge",
	    "Client unions that may be open at once.", (double)cap);
	one(f, "union_nfsd_client_unions_memory_bytes", "gauge",
	    "Bytes the open client unions hold, as they count them (their resolve "
	    "caches and records).",
	    (double)bytes);
	one(f, "union_nfsd_client_unions_memory_max_bytes", "gauge",
	    "Bytes the open client unions may hold together.", (double)memory);
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
	uint64_t begun, ended, drc;
	unsigned conns, threads, busy;

	rpc_counts_calls(m->svc, &begun, &ended, &drc);
	rpc_counts_transport(m->svc, &conns, &threads, &busy);
	one(f, "union_nfsd_connections_open", "gauge", "TCP connections open.",
	    (double)conns);
	one(f, "union_nfsd_drc_hits_total", "counter",
	    "Retransmissions answered from the duplicate request cache.", (double)drc);
	one(f, "union_nfsd_calls_in_flight", "gauge",
	    "Calls whose procedure runs or whose reply is being encoded.",
	    (double)(begun > ended ? begun - ended : 0));
	one(f, "union_nfsd_worker_threads", "gauge", "Worker threads.", (double)threads);
	one(f, "union_nfsd_worker_threads_busy", "gauge",
	    "Worker threads not waiting for work (reading, running or answering).",
	    (double)busy);
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
	write_unions(f, m);
	write_engine(f, m);
	write_transport(f, m);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

char *srv_metrics_text(struct srv_metrics *m, size_t *len)
{
	return m ? render(m, len) : NULL;
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

/* Starts the HTTP thread with every signal blocked, as the workers.  It
 * polls with poll(2), not select: a server with many clients (a gateway's
 * client unions and connections) holds descriptors past FD_SETSIZE, and
 * select refuses every connection accepted on one of those. */
static struct MHD_Daemon *httpd_start(struct srv_metrics *m,
				      const struct sockaddr_storage *ss)
{
	unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
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

int srv_metrics_start(struct srv *s, struct rpc_svc *svc, const char *addr,
		      struct srv_metrics **out, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	struct srv_metrics *m;
	int rc;

	*out = NULL;
	if (addr && !rpc_addr_port_parse(addr, &ss)) {
		snprintf(err, errlen, "bad --metrics '%s' (ADDR:PORT)", addr);
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	m->srv = s;
	m->svc = svc;
	m->addr = addr ? strdup(addr) : NULL;
	rc = -EADDRNOTAVAIL;
	if (addr) {
		m->httpd = httpd_start(m, &ss);
		if (!m->httpd || !m->addr) {
			snprintf(err, errlen, "metrics: cannot serve HTTP on %s", addr);
			goto fail;
		}
	}
	/* before the workers start: they read the switches unlocked */
	rc = rpc_counts_start(svc);
	if (rc < 0) {
		snprintf(err, errlen, "metrics: more procedures than counted");
		goto fail;
	}
	srv_counts_start(s);
	*out = m;
	return 0;
fail:
	if (m->httpd)
		MHD_stop_daemon(m->httpd);
	free(m->addr);
	free(m);
	return rc;
}

void srv_metrics_stop(struct srv_metrics *m)
{
	if (m && m->httpd) {
		MHD_stop_daemon(m->httpd);
		m->httpd = NULL;
	}
}

void srv_metrics_free(struct srv_metrics *m)
{
	if (!m)
		return;
	srv_metrics_stop(m);
	free(m->addr);
	free(m);
}

bool srv_metrics_serves(const struct srv_metrics *m, const char *addr)
{
	const char *have = m ? m->addr : NULL;

	if (!have || !addr)
		return !have && !addr;
	return strcmp(have, addr) == 0;
}
