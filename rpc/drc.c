/* SPDX-License-Identifier: Apache-2.0 */
/* drc.c - the duplicate request cache for non-idempotent procedures.
 *
 * A client that gets no reply in time sends the call again with the same xid.
 * For CREATE, REMOVE, RENAME, MKDIR, RMDIR, LINK, SYMLINK, MKNOD and SETATTR a
 * second execution would answer differently (EEXIST, NOENT) or undo later work,
 * so the reply of the first execution is kept and sent again.  WRITE too: a
 * WRITE run again after a later WRITE to the same range (the client lost the
 * first reply, then wrote again) would bring the older data back, as knfsd
 * knows (RC_REPLBUFF).
 *
 * Design notes
 *  1. A call is the same call when client address and port, xid, program,
 *     version, procedure, the length of the argument bytes and a keyed hash of
 *     their first DRC_ARGS_HASHED bytes all match (the hash guards against an
 *     xid reused by a rebooted client).  Only a prefix is hashed, as knfsd
 *     does: it holds a WRITE's handle, offset, count and the start of its
 *     data, and hashing a 1 MiB WRITE whole would cost 0.4 ms (SipHash at
 *     ~2.5 GB/s), about the server's whole CPU time for a MB written.
 *  2. An entry is made IN_PROGRESS before the handler runs (rpc_drc_begin), so
 *     a retransmission that arrives while the first is still executing is
 *     dropped, never executed twice; rpc_drc_done stores the reply.
 *  3. The cache holds at most CAPACITY entries; a new entry evicts the least
 *     recently used DONE entry.  When every entry is in progress (more workers
 *     than capacity cannot happen with sane settings) the call runs uncached.
 *  4. One mutex guards the table; it is never held across a handler.
 */
#include <errno.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

/* How much of a call's arguments the key's hash covers (invariant 1): every
 * argument of the procedures with one name, and a WRITE's header. */
#define DRC_ARGS_HASHED 512

enum drc_state { DRC_IN_PROGRESS, DRC_DONE };

struct drc_entry {
	struct rpc_drc_key key;
	uint64_t hash;
	enum drc_state state;
	struct rpc_buf reply;
	struct drc_entry *chain;	 /* next in the bucket */
	struct drc_entry *newer, *older; /* LRU list */
};

struct rpc_drc {
	pthread_mutex_t lock;
	uint8_t key[crypto_shorthash_KEYBYTES];
	size_t capacity, count, nbuckets;
	struct drc_entry **buckets;
	struct drc_entry *newest, *oldest;
};

int rpc_drc_new(size_t capacity, struct rpc_drc **out)
{
	struct rpc_drc *d = calloc(1, sizeof(*d));
	int err = -ENOMEM;

	if (!d || sodium_init() < 0)
		goto fail;
	d->capacity = capacity;
	d->nbuckets = capacity * 2 + 1;
	d->buckets = calloc(d->nbuckets, sizeof(*d->buckets));
	if (!d->buckets)
		goto fail;
	randombytes_buf(d->key, sizeof(d->key));
	pthread_mutex_init(&d->lock, NULL);
	*out = d;
	return 0;
fail:
	free(d);
	return err;
}

void rpc_drc_free(struct rpc_drc *d)
{
	struct drc_entry *e, *next;

	if (!d)
		return;
	for (e = d->newest; e; e = next) {
		next = e->older;
		rpc_buf_free(&e->reply);
		free(e);
	}
	free(d->buckets);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

void rpc_drc_key_init(struct rpc_drc *d, struct rpc_drc_key *k,
		      const struct sockaddr_storage *peer, uint32_t xid, uint32_t prog,
		      uint32_t vers, uint32_t proc, const uint8_t *args, size_t len)
{
	uint8_t h[crypto_shorthash_BYTES];

	memset(k, 0, sizeof(*k)); /* padding too: keys are hashed as bytes */
	k->family = peer->ss_family;
	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)peer;
		memcpy(k->addr, &sin->sin_addr, sizeof(sin->sin_addr));
		k->port = sin->sin_port;
	} else if (peer->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)peer;
		memcpy(k->addr, &sin6->sin6_addr, sizeof(sin6->sin6_addr));
		k->port = sin6->sin6_port;
	}
	k->xid = xid;
	k->prog = prog;
	k->vers = vers;
	k->proc = proc;
	k->args_len = (uint32_t)len;
	crypto_shorthash(h, args, len < DRC_ARGS_HASHED ? len : DRC_ARGS_HASHED, d->key);
	memcpy(&k->args_hash, h, sizeof(k->args_hash));
}

static uint64_t key_hash(const struct rpc_drc *d, const struct rpc_drc_key *k)
{
	uint8_t h[crypto_shorthash_BYTES];
	uint64_t v;

	crypto_shorthash(h, (const uint8_t *)k, sizeof(*k), d->key);
	memcpy(&v, h, sizeof(v));
	return v;
}

static struct drc_entry **bucket_of(struct rpc_drc *d, uint64_t hash)
{
	return &d->buckets[hash % d->nbuckets];
}

static struct drc_entry *find(struct rpc_drc *d, const struct rpc_drc_key *k,
			      uint64_t hash)
{
	for (struct drc_entry *e = *bucket_of(d, hash); e; e = e->chain)
		if (e->hash == hash && memcmp(&e->key, k, sizeof(*k)) == 0)
			return e;
	return NULL;
}

static void lru_unlink(struct rpc_drc *d, struct drc_entry *e)
{
	if (e->newer)
		e->newer->older = e->older;
	else
		d->newest = e->older;
	if (e->older)
		e->older->newer = e->newer;
	else
		d->oldest = e->newer;
	e->newer = e->older = NULL;
}

static void lru_push(struct rpc_drc *d, struct drc_entry *e)
{
	e->older = d->newest;
	e->newer = NULL;
	if (d->newest)
		d->newest->newer = e;
	d->newest = e;
	if (!d->oldest)
		d->oldest = e;
}

static void remove_entry(struct rpc_drc *d, struct drc_entry *e)
{
	struct drc_entry **p = bucket_of(d, e->hash);

	while (*p != e)
		p = &(*p)->chain;
	*p = e->chain;
	lru_unlink(d, e);
	rpc_buf_free(&e->reply);
	free(e);
	d->count--;
}

/* Makes room for one entry (invariant 3); false when none can be evicted. */
static bool make_room(struct rpc_drc *d)
{
	struct drc_entry *e = d->oldest;

	if (d->count < d->capacity)
		return true;
	while (e && e->state != DRC_DONE)
		e = e->newer;
	if (!e)
		return false;
	remove_entry(d, e);
	return true;
}

static bool copy_reply(struct rpc_buf *out, const struct rpc_buf *in)
{
	if (out->cap < in->len) {
		uint8_t *p = realloc(out->data, in->len);

		if (!p)
			return false;
		out->data = p;
		out->cap = in->len;
	}
	memcpy(out->data, in->data, in->len);
	out->len = in->len;
	return true;
}

/* Looks K up (invariants 1, 2). */
static enum rpc_drc_verdict begin_locked(struct rpc_drc *d, const struct rpc_drc_key *k,
					 struct rpc_buf *out)
{
	uint64_t hash = key_hash(d, k);
	struct drc_entry *e = find(d, k, hash);

	if (e && e->state == DRC_IN_PROGRESS)
		return RPC_DRC_BUSY;
	if (e) {
		lru_unlink(d, e);
		lru_push(d, e);
		return copy_reply(out, &e->reply) ? RPC_DRC_REPLAY : RPC_DRC_BUSY;
	}
	if (!make_room(d))
		return RPC_DRC_UNCACHED;
	e = calloc(1, sizeof(*e));
	if (!e)
		return RPC_DRC_UNCACHED;
	e->key = *k;
	e->hash = hash;
	e->state = DRC_IN_PROGRESS;
	e->chain = *bucket_of(d, hash);
	*bucket_of(d, hash) = e;
	lru_push(d, e);
	d->count++;
	return RPC_DRC_NEW;
}

enum rpc_drc_verdict rpc_drc_begin(struct rpc_drc *d, const struct rpc_drc_key *k,
				   struct rpc_buf *out)
{
	enum rpc_drc_verdict v;

	pthread_mutex_lock(&d->lock);
	v = begin_locked(d, k, out);
	pthread_mutex_unlock(&d->lock);
	return v;
}

void rpc_drc_done(struct rpc_drc *d, const struct rpc_drc_key *k,
		  const struct rpc_buf *reply)
{
	struct drc_entry *e;

	pthread_mutex_lock(&d->lock);
	e = find(d, k, key_hash(d, k));
	/* No reply to keep (or no memory for it): forget the call, so that a
	 * retransmission runs again rather than being dropped forever. */
	if (e && (!reply || !copy_reply(&e->reply, reply)))
		remove_entry(d, e);
	else if (e)
		e->state = DRC_DONE;
	pthread_mutex_unlock(&d->lock);
}
