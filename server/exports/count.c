/* SPDX-License-Identifier: Apache-2.0 */
/* count.c - calls and bytes counted per export and per client address,
 * where the calls are served (srv_call_serve); the operations room reads
 * them (metrics, union-nfsctl clients) and counts nothing itself.
 *
 * Design notes
 *
 *  1. Per export (and per client union), the counters are an array of
 *     slots, one cache line each, made on the export's first counted call:
 *     each worker thread owns one slot (its slot, 1..nthreads, taken on its
 *     first counted call: thread_slot), stored to with a relaxed load and
 *     store (rpc_count_own_add).  A thread beyond the pool's shares slot 0
 *     with atomic adds.  The array is freed with the export; a released client
 *     union takes its series with it, and a reopened one starts again from
 *     zero, which Prometheus reads as a counter reset.  So the series of
 *     client unions are bounded by --max-client-unions.
 *  2. Off (s->counting false), a call costs one test.
 *  3. Per client, the counters are kept by (export, client address): a
 *     record of three counters (a cache line) for each address that made
 *     an NFS call, on the export's table (a client union's calls count on
 *     its template's), added to with relaxed atomic adds: a client's calls
 *     run on any thread.  The table is a hash whose chains only grow and
 *     are read without a lock (a record is published with a release store
 *     of its chain's head); its mutex is taken only to add a record, on a
 *     client's first call.  At most SRV_C_CLIENTS records an export; the
 *     calls of addresses beyond them count on one record, "other".  The
 *     records live as long as the export, so a client that comes back
 *     continues its series, and the memory is bounded by the cap.  They
 *     are allocated SRV_C_SLAB at a time (record_new): one each, made
 *     while clients' unions come and go around them, would each keep a
 *     page of the heap resident once those are freed.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exports.h"

/* One thread's counters of one export: a cache line of its own. */
struct srv_xcount {
	_Alignas(64) _Atomic uint64_t calls, bytes_read, bytes_written;
};

/* One client address's counters on one export (note 3). */
struct srv_mclient {
	_Alignas(64) _Atomic uint64_t calls, bytes_read, bytes_written;
	struct srv_mclient *next; /* in its chain; set before publishing */
	unsigned char addr[16];	  /* IPv6, an IPv4 address mapped */
};

#define SRV_C_CLIENTS	     1024 /* records an export (note 3) */
#define SRV_C_CLIENT_BUCKETS 256
#define SRV_C_SLAB	     32 /* records allocated at once (note 3) */

/* SRV_C_SLAB records, handed out in order (record_new). */
struct srv_mclient_slab {
	struct srv_mclient rec[SRV_C_SLAB];
	struct srv_mclient_slab *next; /* the slab made before */
};

struct srv_mclients {
	struct srv_mclient other;	/* the addresses beyond the cap */
	pthread_mutex_t lock;		/* guards adding, n and the slabs */
	unsigned n;			/* records, other not counted */
	struct srv_mclient_slab *slabs; /* the newest first */
	unsigned slab_used;		/* records of the newest handed out */
	struct srv_mclient *_Atomic chain[SRV_C_CLIENT_BUCKETS];
};

/* The calling thread's slot and whose it is: the start's number, not the
 * server's address, which a later start may get again (a test may run more
 * than one server in a process, one after another). */
static _Thread_local struct {
	unsigned long gen;
	unsigned slot;
} mine;
static atomic_ulong starts;

/* Slots of an export's array: one a worker, and the shared slot 0. */
static unsigned slot_count(const struct srv *s)
{
	return s->cfg.nthreads + 1;
}

/* This thread's slot of S's arrays (note 1). */
static unsigned thread_slot(struct srv *s)
{
	unsigned next;

	if (mine.gen == s->count_gen)
		return mine.slot;
	next = atomic_fetch_add(&s->next_xslot, 1) + 1;
	mine.gen = s->count_gen;
	mine.slot = next < slot_count(s) ? next : 0;
	return mine.slot;
}

void srv_counts_start(struct srv *s)
{
	s->count_gen = atomic_fetch_add(&starts, 1) + 1;
	atomic_store(&s->next_xslot, 0);
	s->counting = true;
}

/* EX's counters, made on its first counted call (one CAS, once). */
static struct srv_xcount *export_counts(unsigned nslots, struct srv_export *ex)
{
	struct srv_xcount *x = atomic_load_explicit(&ex->mcount, memory_order_acquire);
	struct srv_xcount *none = NULL;

	if (x)
		return x;
	x = aligned_alloc(64, nslots * sizeof(*x));
	if (!x)
		return NULL;
	memset(x, 0, nslots * sizeof(*x));
	if (atomic_compare_exchange_strong(&ex->mcount, &none, x))
		return x;
	free(x);
	return none;
}

static void count_export(const struct srv_req *req)
{
	unsigned slot = thread_slot(req->srv);
	struct srv_xcount *x = export_counts(slot_count(req->srv), req->ex);

	if (!x)
		return;
	if (slot == 0) { /* shared (note 2) */
		atomic_fetch_add_explicit(&x->calls, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&x->bytes_read, req->bytes_read,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&x->bytes_written, req->bytes_written,
					  memory_order_relaxed);
		return;
	}
	x += slot;
	rpc_count_own_add(&x->calls, 1);
	if (req->bytes_read)
		rpc_count_own_add(&x->bytes_read, req->bytes_read);
	if (req->bytes_written)
		rpc_count_own_add(&x->bytes_written, req->bytes_written);
}

/* ---- per client (note 3) ---- */

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

/* A zeroed record of T's newest slab, made when that one is used up (note
 * 3); NULL without memory.  Under T's lock. */
static struct srv_mclient *record_new(struct srv_mclients *t)
{
	struct srv_mclient_slab *s = t->slabs;

	if (!s || t->slab_used == SRV_C_SLAB) {
		s = aligned_alloc(64, sizeof(*s));
		if (!s)
			return NULL;
		memset(s, 0, sizeof(*s));
		s->next = t->slabs;
		t->slabs = s;
		t->slab_used = 0;
	}
	return &s->rec[t->slab_used++];
}

/* Adds KEY's record to T, or finds the one another thread added first;
 * "other" beyond the cap or out of memory. */
static struct srv_mclient *client_add(struct srv_mclients *t, const unsigned char key[16])
{
	struct srv_mclient *_Atomic *head = &t->chain[addr_hash(key)];
	struct srv_mclient *c;

	pthread_mutex_lock(&t->lock);
	c = chain_find(head, key);
	if (c || t->n >= SRV_C_CLIENTS)
		goto out;
	c = record_new(t);
	if (!c)
		goto out;
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

	if (!req->rpc->peer || !addr_key(req->rpc->peer, key) ||
	    !(t = clients_table(top)))
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
	v[0] = rpc_count_read(&c->calls);
	v[1] = rpc_count_read(&c->bytes_read);
	v[2] = rpc_count_read(&c->bytes_written);
}

bool srv_counts_client(const struct srv *s, const struct srv_export *ex, const char *host,
		       uint64_t v[3])
{
	struct srv_mclients *t =
	    atomic_load_explicit(&ex->mclients, memory_order_acquire);
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	const struct srv_mclient *c = NULL;
	unsigned char key[16];

	if (!s->counting)
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
	struct srv_mclient_slab *s, *next;

	if (!t)
		return;
	for (s = t->slabs; s; s = next) {
		next = s->next;
		free(s);
	}
	pthread_mutex_destroy(&t->lock);
	free(t);
}

void srv_count_call(const struct srv_req *req)
{
	count_export(req);
	count_client(req);
}

void srv_counts_export_free(struct srv_export *ex)
{
	free(atomic_load(&ex->mcount));
	clients_free(atomic_load(&ex->mclients));
}

size_t srv_counts_export_bytes(const struct srv *s, const struct srv_export *ex)
{
	return atomic_load(&ex->mcount) ? slot_count(s) * sizeof(struct srv_xcount) : 0;
}

bool srv_counts_export(const struct srv *s, const struct srv_export *ex, uint64_t v[3])
{
	const struct srv_xcount *x =
	    atomic_load_explicit(&ex->mcount, memory_order_acquire);

	if (!s->counting)
		return false;
	v[0] = v[1] = v[2] = 0;
	for (unsigned i = 0; x && i < slot_count(s); i++) {
		v[0] += rpc_count_read(&x[i].calls);
		v[1] += rpc_count_read(&x[i].bytes_read);
		v[2] += rpc_count_read(&x[i].bytes_written);
	}
	return true;
}

/* C's address as text, as union-nfsctl and the metrics show it. */
static void client_text(const struct srv_mclient *c, char *buf, size_t len)
{
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0,	   0,
						 0, 0, 0, 0, 0xff, 0xff};
	bool v4 = memcmp(c->addr, mapped, sizeof(mapped)) == 0;

	if (!inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? c->addr + 12 : c->addr, buf,
		       (socklen_t)len))
		snprintf(buf, len, "?");
}

void srv_counts_clients_each(const struct srv_export *ex,
			     void (*fn)(void *arg, const char *client,
					const uint64_t v[3]),
			     void *arg)
{
	const struct srv_mclients *t =
	    atomic_load_explicit(&ex->mclients, memory_order_acquire);
	char addr[INET6_ADDRSTRLEN];
	uint64_t v[3];

	if (!t)
		return;
	for (size_t b = 0; b < SRV_C_CLIENT_BUCKETS; b++)
		for (const struct srv_mclient *c = atomic_load_explicit(
			 &((struct srv_mclients *)t)->chain[b], memory_order_acquire);
		     c; c = c->next) {
			client_text(c, addr, sizeof(addr));
			client_sums(c, v);
			fn(arg, addr, v);
		}
	client_sums(&t->other, v);
	if (v[0])
		fn(arg, "other", v);
}
