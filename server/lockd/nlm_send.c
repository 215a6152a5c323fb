/* SPDX-License-Identifier: Apache-2.0 */
/* nlm_send.c - calls from the lock manager to clients' lock managers: the
 * _RES answers of _MSG calls and GRANTED for waiters the table granted.
 *
 * Design notes
 *
 * A client's lock manager is found through its portmapper (libtirpc's
 * clnt_create_timed asks it), which can take seconds when the client is
 * gone; so no worker ever calls out.  Workers queue jobs; one thread sends
 * them in order of arrival.
 *
 * Rules:
 *  1. A job's arguments are encoded when it is queued (the call's arguments
 *     are freed with its arena), so the thread sends bytes (xdr_bytes_raw).
 *  2. An _RES is a one-way message: sent once over UDP, lost if the
 *     network loses it, as a client's own _MSG may be.  A client's lock
 *     manager answers it with an empty reply, which is waited for
 *     MSG_WAIT_MS at most (libtirpc sends nothing at all when told to wait
 *     for no time), so a client that never answers costs the thread that
 *     long per message.
 *  3. A GRANTED waits for the client's answer.  NLM4_GRANTED ends the job;
 *     NLM4_DENIED_GRACE_PERIOD or no answer is tried again, GRANT_TRIES
 *     times in all, GRANT_RETRY_S apart; any other answer, or none after
 *     the last try, releases the lock, and the waiters that lets through
 *     are queued in their turn (grant_fail).
 *  4. At most QUEUE_MAX jobs wait: past it an _RES is dropped and a grant
 *     released (the client's retransmitted LOCK finds the lock free).
 *  5. Clients are cached per (address, program, version) for the thread's
 *     own use (CLIENT_CACHE entries, least recently used replaced), so a
 *     burst of answers to one host asks its portmapper once.  An IPv4 host's
 *     port is asked with PMAPPROC_GETPORT (client_v4): libtirpc's rpcbind
 *     look-up (clnt_create_timed) leaks 16 bytes a call (uaddr2taddr), and a
 *     host that calls back often would grow the server; IPv6 needs it.
 *  6. An SM_NOTIFY (nsm.c) goes to the host's status monitor (program
 *     100024) and waits for its empty answer; no answer is tried again,
 *     NOTIFY_TRIES times in all, NOTIFY_RETRY_S apart, then given up (the
 *     host's locks stay until it reclaims them or notifies us).
 *  7. A call leaves from the address of ours the client called (job->from:
 *     the LOCK's, the _MSG's, the address taken over), its socket bound to
 *     it: Linux's lockd takes a GRANTED only from the address it locked
 *     through, and a client's statd matches SM_NOTIFY to the server it
 *     monitors.  A floating address is one of several a host has, and not
 *     the one the kernel would choose.  An address this host no longer
 *     holds cannot be bound: the call leaves from the kernel's choice.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nlm.h"
#include "nsm_prot.h"	   /* SM_PROG, SM_VERS, SM_NOTIFY */
#include <rpc/pmap_prot.h> /* after rpc.h: it needs XDR */

#define QUEUE_MAX	  4096
#define GRANT_TRIES	  3
#define GRANT_RETRY_S	  2
#define CALL_TIMEOUT_S	  5
#define CONNECT_TIMEOUT_S 3
#define CLIENT_CACHE	  8
#define MSG_WAIT_MS	  20
#define NOTIFY_TRIES	  5
#define NOTIFY_RETRY_S	  3

enum job_kind {
	JOB_MSG,    /* an _RES (rule 2) */
	JOB_GRANT,  /* GRANTED (rule 3) */
	JOB_NOTIFY, /* SM_NOTIFY (rule 6) */
};

struct nlm_job {
	struct nlm_job *next;
	struct sockaddr_storage to;
	struct sockaddr_storage from; /* rule 7; family 0: any */
	enum job_kind kind;
	uint32_t prog, vers, proc;
	uint8_t *args; /* encoded (rule 1) */
	u_int len;
	struct lock_grant *grant; /* JOB_GRANT: the waiter granted */
	unsigned tries;
	time_t due; /* CLOCK_MONOTONIC seconds */
};

struct cached_client {
	CLIENT *cl;
	struct sockaddr_storage to, from;
	uint32_t prog, vers;
	unsigned long used;
};

struct nlm_sender {
	struct srv_nlm *nlm;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct nlm_job *head, **tailp; /* in order of queueing */
	size_t n;
	bool stop;
	/* the thread's own: */
	struct cached_client cache[CLIENT_CACHE];
	unsigned long clock;
};

static time_t now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

static void job_free(struct nlm_job *j)
{
	if (!j)
		return;
	lock_grants_free(j->grant);
	free(j->args);
	free(j);
}

/* ---- encoding (rule 1) ---- */

static bool_t xdr_bytes_raw(XDR *x, void *arg)
{
	const struct nlm_job *j = arg;

	return xdr_opaque(x, (char *)j->args, j->len);
}

static bool job_encode(struct nlm_job *j, xdrproc_t enc, const void *args)
{
	unsigned long size = xdr_sizeof(enc, (void *)args);
	XDR x;
	bool ok;

	j->args = malloc(size ? size : 4);
	if (!j->args)
		return false;
	xdrmem_create(&x, (char *)j->args, (u_int)size, XDR_ENCODE);
	ok = enc(&x, (void *)args);
	j->len = xdr_getpos(&x);
	xdr_destroy(&x);
	return ok;
}

/* ---- the queue ---- */

/* Queues J (ownership passes); false (J still the caller's) when full. */
static bool enqueue(struct nlm_sender *tx, struct nlm_job *j)
{
	bool ok = false;

	pthread_mutex_lock(&tx->lock);
	if (tx->n < QUEUE_MAX && !tx->stop) {
		j->next = NULL;
		*tx->tailp = j;
		tx->tailp = &j->next;
		tx->n++;
		ok = true;
		pthread_cond_signal(&tx->wake);
	}
	pthread_mutex_unlock(&tx->lock);
	return ok;
}

/* Takes the first job that is due, waiting for one; NULL when stopping. */
static struct nlm_job *dequeue(struct nlm_sender *tx)
{
	struct nlm_job **pp, *j = NULL;
	struct timespec until;

	pthread_mutex_lock(&tx->lock);
	while (!tx->stop) {
		for (pp = &tx->head; *pp && (*pp)->due > now_s(); pp = &(*pp)->next)
			;
		if (*pp) {
			j = *pp;
			*pp = j->next;
			if (!*pp)
				tx->tailp = pp;
			tx->n--;
			break;
		}
		nlm_grace_report(&tx->nlm->grace);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1; /* retries come due: look again each second */
		pthread_cond_timedwait(&tx->wake, &tx->lock, &until);
	}
	pthread_mutex_unlock(&tx->lock);
	return j;
}

/* Queues a call of KIND to PROG, VERS, PROC at TO, ARGS encoded now with
 * ENC: false when it is dropped (out of memory or the queue full). */
static bool queue_call(struct srv_nlm *n, const struct sockaddr_storage *to,
		       const struct sockaddr_storage *from, enum job_kind kind,
		       uint32_t prog, uint32_t vers, uint32_t proc, xdrproc_t enc,
		       const void *args)
{
	struct nlm_job *j = calloc(1, sizeof(*j));

	if (!j || !job_encode(j, enc, args)) {
		job_free(j);
		return false;
	}
	j->to = *to;
	if (from)
		j->from = *from;
	j->kind = kind;
	j->prog = prog;
	j->vers = vers;
	j->proc = proc;
	if (enqueue(n->tx, j))
		return true;
	job_free(j);
	return false;
}

void nlm_send_msg(struct srv_nlm *n, const struct sockaddr_storage *to,
		  const struct sockaddr_storage *from, uint32_t vers, uint32_t proc,
		  xdrproc_t enc, const void *args)
{
	if (!queue_call(n, to, from, JOB_MSG, NLM_PROG, vers, proc, enc, args))
		RPC_LOG_LIMITED(RPC_LOG_WARN,
				"NLM: answer %u to a _MSG call dropped (queue full or "
				"out of memory)",
				proc);
}

void nlm_send_notify(struct srv_nlm *n, const struct sockaddr_storage *to,
		     const struct sockaddr_storage *from, xdrproc_t enc, const void *args)
{
	if (!queue_call(n, to, from, JOB_NOTIFY, SM_PROG, SM_VERS, SM_NOTIFY, enc, args))
		RPC_LOG_LIMITED(RPC_LOG_WARN,
				"NSM: SM_NOTIFY dropped (queue full or out of memory)");
}

/* ---- GRANTED ---- */

bool nlm_wait_parse(const struct lock_grant *g, struct nlm_wait *w,
		    const uint8_t **cookie, size_t *cookie_len)
{
	if (g->cookie_len < sizeof(*w))
		return false;
	memcpy(w, g->cookie, sizeof(*w));
	if (w->fh_len > sizeof(w->fh))
		return false;
	*cookie = g->cookie + sizeof(*w);
	*cookie_len = g->cookie_len - sizeof(*w);
	return true;
}

/* The caller_name part of the table's host "NAME@ADDR" (nlm_proc.c, rule
 * 2), in BUF. */
static char *grant_caller(const struct lock_grant *g, char *buf, size_t len)
{
	const char *at = strrchr(g->lock.host, '@');
	size_t n = at ? (size_t)(at - g->lock.host) : strlen(g->lock.host);

	if (n >= len)
		n = len - 1;
	memcpy(buf, g->lock.host, n);
	buf[n] = '\0';
	return buf;
}

/* Encodes GRANTED's arguments for waiter G in the version it asked in. */
static bool grant_encode(struct nlm_job *j, struct lock_grant *g,
			 const struct nlm_wait *w, const uint8_t *cookie,
			 size_t cookie_len)
{
	char caller[LOCK_MAX_HOST + 1];
	nlm_obj ck = {(u_int)cookie_len, (char *)cookie};
	nlm_obj fh = {w->fh_len, (char *)w->fh};
	nlm_obj oh = {(u_int)g->lock.oh_len, (char *)g->lock.oh};
	bool excl = g->lock.type == LOCK_EXCLUSIVE;
	nlm4_testargs a4 = {ck,
			    excl,
			    {grant_caller(g, caller, sizeof(caller)), fh, oh,
			     g->lock.svid, g->lock.range.off, g->lock.range.len}};
	nlm_testargs a1 = {ck,
			   excl,
			   {caller, fh, oh, g->lock.svid, (u_int)g->lock.range.off,
			    (u_int)g->lock.range.len}};

	if (w->vers == NLM4_VERS)
		return job_encode(j, (xdrproc_t)xdr_nlm4_testargs, &a4);
	return job_encode(j, (xdrproc_t)xdr_nlm_testargs, &a1);
}

/* The client never took the lock (rule 3): released, and what that lets
 * through granted in turn. */
static void grant_fail(struct srv_nlm *n, struct lock_grant *g, const char *why)
{
	struct lock_owner owner = {.host = g->lock.host,
				   .svid = g->lock.svid,
				   .oh = g->lock.oh,
				   .oh_len = g->lock.oh_len};
	struct lock_grant *more = NULL;

	RPC_LOG_LIMITED(RPC_LOG_INFO, "NLM: lock of %s svid %d released: GRANTED %s",
			g->lock.host, g->lock.svid, why);
	lock_release(n->locks, &g->file, &owner, &g->lock.range, &more);
	if (more)
		nlm_send_grants(n, more);
}

void nlm_send_grants(struct srv_nlm *n, struct lock_grant *g)
{
	struct lock_grant *next;
	const uint8_t *cookie;
	struct nlm_wait w;
	size_t clen;

	for (; g; g = next) {
		struct nlm_job *j = calloc(1, sizeof(*j));

		next = g->next;
		g->next = NULL;
		if (!j || !nlm_wait_parse(g, &w, &cookie, &clen) ||
		    !grant_encode(j, g, &w, cookie, clen)) {
			job_free(j);
			grant_fail(n, g, "could not be built");
			lock_grants_free(g);
			continue;
		}
		j->to = w.peer;
		j->from = w.local;
		j->kind = JOB_GRANT;
		j->prog = NLM_PROG;
		j->vers = w.vers;
		j->proc = NLMPROC4_GRANTED; /* 5 in every version */
		j->grant = g;
		if (!enqueue(n->tx, j)) {
			j->grant = NULL;
			job_free(j);
			grant_fail(n, g, "not sent: queue full");
			lock_grants_free(g);
		}
	}
}

/* ---- the thread ---- */

static bool same_dest(const struct cached_client *c, const struct nlm_job *j)
{
	return c->cl && c->prog == j->prog && c->vers == j->vers &&
	       rpc_same_addr(&c->to, &j->to) && c->from.ss_family == j->from.ss_family &&
	       (!j->from.ss_family || rpc_same_addr(&c->from, &j->from));
}

/* A UDP socket bound to J's source address (rule 7), on a reserved port as
 * libtirpc's own would be; RPC_ANYSOCK (libtirpc makes one) when J has none
 * or it cannot be bound. */
static int source_socket(const struct nlm_job *j)
{
	struct sockaddr_in sin;
	int fd;

	if (j->from.ss_family != AF_INET)
		return RPC_ANYSOCK;
	memcpy(&sin, &j->from, sizeof(sin));
	sin.sin_port = 0;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return RPC_ANYSOCK;
	if (bindresvport(fd, &sin) < 0) {
		sin.sin_port = 0;
		if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
			close(fd);
			return RPC_ANYSOCK;
		}
	}
	return fd;
}

/* J's destination as IPv4 into SIN (port 0), v4-mapped v6 too; false when
 * it is IPv6. */
static bool dest_v4(const struct nlm_job *j, struct sockaddr_in *sin)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&j->to;

	*sin = (struct sockaddr_in){.sin_family = AF_INET};
	if (j->to.ss_family == AF_INET)
		sin->sin_addr = ((const struct sockaddr_in *)&j->to)->sin_addr;
	else if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
		memcpy(&sin->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
	else
		return false;
	return true;
}

/* A UDP client of J's program and version at IPv4 address SIN, its port
 * from the host's portmapper (version 2, GETPORT: rule 5); NULL when none. */
static CLIENT *client_v4(const struct nlm_job *j, struct sockaddr_in sin)
{
	struct timeval tv = {CONNECT_TIMEOUT_S, 0}, retry = {1, 0};
	struct pmap want = {j->prog, j->vers, IPPROTO_UDP, 0};
	unsigned short port = 0;
	int sock = RPC_ANYSOCK;
	CLIENT *pm, *cl;

	sin.sin_port = htons(PMAPPORT);
	pm = clntudp_create(&sin, PMAPPROG, PMAPVERS, retry, &sock);
	if (!pm)
		return NULL;
	if (clnt_call(pm, PMAPPROC_GETPORT, (xdrproc_t)xdr_pmap, (char *)&want,
		      (xdrproc_t)xdr_u_short, (char *)&port, tv) != RPC_SUCCESS)
		port = 0;
	clnt_destroy(pm);
	if (!port)
		return NULL;
	sin.sin_port = htons(port);
	sock = source_socket(j);
	cl = clntudp_create(&sin, j->prog, j->vers, retry, &sock);
	if (cl)
		clnt_control(cl, CLSET_FD_CLOSE, NULL); /* a socket of ours too */
	else if (sock != RPC_ANYSOCK)
		close(sock);
	return cl;
}

/* A client of J's program and version at J's address, from the cache
 * (rule 5); NULL when its portmapper does not name one. */
static CLIENT *client_for(struct nlm_sender *tx, const struct nlm_job *j)
{
	struct timeval tv = {CONNECT_TIMEOUT_S, 0};
	struct cached_client *victim = &tx->cache[0];
	char host[INET6_ADDRSTRLEN];
	struct sockaddr_in sin;
	CLIENT *cl;

	for (size_t i = 0; i < CLIENT_CACHE; i++) {
		if (same_dest(&tx->cache[i], j)) {
			tx->cache[i].used = ++tx->clock;
			return tx->cache[i].cl;
		}
		if (tx->cache[i].used < victim->used)
			victim = &tx->cache[i];
	}
	rpc_addr_str(&j->to, false, host, sizeof(host));
	cl = dest_v4(j, &sin) ? client_v4(j, sin)
			      : clnt_create_timed(host, j->prog, j->vers, "udp", &tv);
	if (!cl) {
		RPC_LOG_LIMITED(RPC_LOG_INFO, "NLM: no program %u v%u at %s: %s", j->prog,
				j->vers, host, clnt_spcreateerror("portmapper"));
		return NULL;
	}
	if (victim->cl)
		clnt_destroy(victim->cl);
	*victim =
	    (struct cached_client){cl, j->to, j->from, j->prog, j->vers, ++tx->clock};
	return cl;
}

/* Forgets the cached client CL (a call on it failed: the client's lock
 * manager may have moved to another port). */
static void client_drop(struct nlm_sender *tx, CLIENT *cl)
{
	for (size_t i = 0; i < CLIENT_CACHE; i++) {
		if (tx->cache[i].cl == cl) {
			clnt_destroy(cl);
			tx->cache[i] = (struct cached_client){0};
		}
	}
}

/* Sends GRANTED job J: true when it is done with, false to try again. */
static bool send_grant(struct nlm_sender *tx, struct nlm_job *j)
{
	struct timeval tv = {CALL_TIMEOUT_S, 0};
	CLIENT *cl = client_for(tx, j);
	nlm4_res res = {0};
	enum clnt_stat st;
	bool done = true;

	if (!cl)
		return false;
	st = clnt_call(cl, j->proc, (xdrproc_t)xdr_bytes_raw, (char *)j,
		       (xdrproc_t)xdr_nlm4_res, (char *)&res, tv);
	if (st != RPC_SUCCESS) {
		client_drop(tx, cl);
		return false;
	}
	if (res.stat.stat == NLM4_DENIED_GRACE_PERIOD)
		done = false;
	else if (res.stat.stat != NLM4_GRANTED)
		grant_fail(tx->nlm, j->grant, "refused by the client");
	xdr_free((xdrproc_t)xdr_nlm4_res, (char *)&res);
	return done;
}

static void send_msg(struct nlm_sender *tx, struct nlm_job *j)
{
	struct timeval wait = {0, MSG_WAIT_MS * 1000};
	CLIENT *cl = client_for(tx, j);

	/* Sent once; the reply, if any, is not awaited long (rule 2). */
	if (cl)
		clnt_call(cl, j->proc, (xdrproc_t)xdr_bytes_raw, (char *)j,
			  (xdrproc_t)(void (*)(void))xdr_void, NULL, wait);
}

/* Sends SM_NOTIFY job J: true when the host answered (rule 6). */
static bool send_notify(struct nlm_sender *tx, struct nlm_job *j)
{
	struct timeval tv = {CALL_TIMEOUT_S, 0};
	CLIENT *cl = client_for(tx, j);
	char host[INET6_ADDRSTRLEN];

	if (cl && clnt_call(cl, j->proc, (xdrproc_t)xdr_bytes_raw, (char *)j,
			    (xdrproc_t)(void (*)(void))xdr_void, NULL, tv) == RPC_SUCCESS)
		return true;
	if (cl)
		client_drop(tx, cl);
	if (j->tries + 1 >= NOTIFY_TRIES)
		rpc_log(RPC_LOG_WARN, "NSM: SM_NOTIFY to %s not answered: given up",
			rpc_addr_str(&j->to, false, host, sizeof(host)));
	return false;
}

/* Queues J again after DELAY_S seconds; false (J still the caller's) when
 * it cannot be. */
static bool requeue(struct nlm_sender *tx, struct nlm_job *j, unsigned tries,
		    unsigned delay_s)
{
	if (++j->tries >= tries)
		return false;
	j->due = now_s() + delay_s;
	return enqueue(tx, j);
}

static void run_job(struct nlm_sender *tx, struct nlm_job *j)
{
	if (j->kind == JOB_MSG) {
		send_msg(tx, j);
		job_free(j);
		return;
	}
	if (j->kind == JOB_NOTIFY) {
		if (send_notify(tx, j) || !requeue(tx, j, NOTIFY_TRIES, NOTIFY_RETRY_S))
			job_free(j);
		return;
	}
	if (send_grant(tx, j)) {
		job_free(j);
		return;
	}
	if (++j->tries >= GRANT_TRIES) {
		grant_fail(tx->nlm, j->grant, "not acknowledged");
		job_free(j);
		return;
	}
	j->due = now_s() + GRANT_RETRY_S;
	if (!enqueue(tx, j)) {
		grant_fail(tx->nlm, j->grant, "not sent: queue full");
		job_free(j);
	}
}

static void *sender_main(void *arg)
{
	struct nlm_sender *tx = arg;
	struct nlm_job *j;

	while ((j = dequeue(tx)))
		run_job(tx, j);
	for (size_t i = 0; i < CLIENT_CACHE; i++)
		if (tx->cache[i].cl)
			clnt_destroy(tx->cache[i].cl);
	return NULL;
}

int nlm_sender_new(struct srv_nlm *n, struct nlm_sender **out)
{
	struct nlm_sender *tx = calloc(1, sizeof(*tx));
	sigset_t all, old;
	int rc;

	if (!tx)
		return -ENOMEM;
	tx->nlm = n;
	tx->tailp = &tx->head;
	pthread_mutex_init(&tx->lock, NULL);
	pthread_cond_init(&tx->wake, NULL);
	/* Signals go to the main thread, as for the workers. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = -pthread_create(&tx->thread, NULL, sender_main, tx);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc < 0) {
		pthread_cond_destroy(&tx->wake);
		pthread_mutex_destroy(&tx->lock);
		free(tx);
		return rc;
	}
	*out = tx;
	return 0;
}

void nlm_sender_free(struct nlm_sender *tx)
{
	struct nlm_job *j, *next;

	if (!tx)
		return;
	pthread_mutex_lock(&tx->lock);
	tx->stop = true;
	pthread_cond_signal(&tx->wake);
	pthread_mutex_unlock(&tx->lock);
	pthread_join(tx->thread, NULL);
	for (j = tx->head; j; j = next) {
		next = j->next;
		job_free(j);
	}
	pthread_cond_destroy(&tx->wake);
	pthread_mutex_destroy(&tx->lock);
	free(tx);
}
