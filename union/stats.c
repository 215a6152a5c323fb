/* SPDX-License-Identifier: Apache-2.0 */
/* stats.c - what the engine counts, for whoever serves it (struct un_stats).
 *
 * Design notes
 *
 * The engine counts and never formats: un_state_stats copies the counters
 * into a plain struct and the server shows them as it likes.
 *
 * Two kinds of counter, by how often they move:
 *  1. Events that cost a system call or more anyway (a copy-up, a commit of
 *     the node table, a flush, an fsync) are shared counters in the state
 *     (struct un_counters), added to with one relaxed atomic add: nothing
 *     next to an fdatasync.
 *  2. Events on every call (a resolve cache hit, a listing cache look-up)
 *     are counted per thread: each thread writes its own struct, which it
 *     alone stores to (a relaxed load and store, no read-modify-write and
 *     no cache line shared with another writer), and a reader sums the
 *     structs of every thread.  A thread's struct is made on its first
 *     count and kept for the process's life (the server's threads are a
 *     fixed pool), on a list that only grows.  This is the engine's second
 *     thread-local (union.h, rule 5): it carries no request, only counts.
 */
#include <stdlib.h>
#include <time.h>

#include "un_private.h"

struct un_tcounts {
	_Atomic uint64_t rc_hits, rc_misses, ls_hits, ls_misses;
	struct un_tcounts *next; /* on tc_all, set before it is published */
};

static pthread_mutex_t tc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct un_tcounts *_Atomic tc_all;
static _Thread_local struct un_tcounts *tc_mine;

/* This thread's counters, made on first use; NULL when out of memory (the
 * count is then lost, never the call). */
static struct un_tcounts *tc_get(void)
{
	struct un_tcounts *t = tc_mine;

	if (t)
		return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	pthread_mutex_lock(&tc_lock);
	t->next = atomic_load(&tc_all);
	atomic_store(&tc_all, t);
	pthread_mutex_unlock(&tc_lock);
	tc_mine = t;
	return t;
}

/* Adds one to a counter only this thread writes (note 2). */
static void own_inc(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

void un_count_rcache(bool hit)
{
	struct un_tcounts *t = tc_get();

	if (t)
		own_inc(hit ? &t->rc_hits : &t->rc_misses);
}

void un_count_listing(bool hit)
{
	struct un_tcounts *t = tc_get();

	if (t)
		own_inc(hit ? &t->ls_hits : &t->ls_misses);
}

void un_count_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

uint64_t un_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void un_count_timed(_Atomic uint64_t *count, _Atomic uint64_t *ns, uint64_t since)
{
	un_count_add(count, 1);
	un_count_add(ns, un_now_ns() - since);
}

static uint64_t rd(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static void sum_threads(struct un_stats *out)
{
	for (struct un_tcounts *t = atomic_load(&tc_all); t; t = t->next) {
		out->rcache_hits += rd(&t->rc_hits);
		out->rcache_misses += rd(&t->rc_misses);
		out->listing_hits += rd(&t->ls_hits);
		out->listing_misses += rd(&t->ls_misses);
	}
}

/* The records of the node table, from LMDB's own count (no scan). */
static int count_nodes(struct un_state *st, uint64_t *out)
{
	MDB_txn *txn;
	MDB_stat ms;
	int err = un_mdb_err(mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn));

	if (err)
		return err;
	err = un_mdb_err(mdb_stat(txn, st->db_nodes, &ms));
	mdb_txn_abort(txn);
	if (!err)
		*out = ms.ms_entries;
	return err;
}

int un_state_stats(struct un_state *st, struct un_stats *out)
{
	const struct un_counters *c = &st->sh->counters;

	*out = (struct un_stats){
	    .commits = rd(&c->commits),
	    .commit_ns = rd(&c->commit_ns),
	    .flushes = rd(&c->flushes),
	    .flush_ns = rd(&c->flush_ns),
	    .fsyncs = rd(&c->fsyncs),
	    .fsync_ns = rd(&c->fsync_ns),
	    .copyups = rd(&c->copyups),
	    .copyup_bytes = rd(&c->copyup_bytes),
	    .copyup_ns = rd(&c->copyup_ns),
	};
	sum_threads(out);
	return count_nodes(st, &out->nodes);
}
