/* SPDX-License-Identifier: Apache-2.0 */
/* lock.c - the byte-range lock table: locks, waiters and what an unlock lets
 * through, with the semantics of POSIX locks as Linux fcntl keeps them.
 *
 * Rules
 *  1. One mutex per table guards all of it.  Every public function takes it
 *     and drops it before returning; nothing of the caller runs under it
 *     (granted waiters come back as a list, not through a callback).
 *  2. A range is inclusive [first, last]; last UINT64_MAX runs to the end of
 *     the file.  NLM's length 0, and an offset + length past 2^64, both mean
 *     that (span_of).
 *  3. A file's locks are one tree in order of first byte (ties: older
 *     first), each node holding the highest last byte below it, so the locks
 *     that overlap a range are found in O(log n) plus those passed over
 *     (tr_find), in order: the first conflict found has the lowest first
 *     byte.  A lock's bytes change only while it is out of the tree
 *     (lock_unlink, lock_link).
 *  4. One owner's locks on a file never overlap, and two of one type never
 *     touch: cut() removes the owner's hold on a range, splitting a lock that
 *     covers it; insert() merges the new lock with same-type neighbours.  So
 *     the same bytes held always give the same list.
 *  5. Locks of two owners conflict when they overlap and one is exclusive;
 *     an owner never conflicts with itself: its new lock replaces what it
 *     held on the range (upgrade, downgrade).
 *  6. A call applies whole or changes nothing: plan() counts the entries it
 *     adds before anything changes, room() checks the caps, and the records
 *     it may need are allocated first (struct spares).
 *  7. The caps count locks, waiters and share reservations, per host and
 *     in all.
 *  8. Owners, hosts and files exist only while they hold a lock, a waiter or
 *     a share reservation (owner_tidy, file_tidy); the hash tables shrink
 *     with their content.
 *  9. Waiters are tried in order of arrival, in passes until a pass grants
 *     none (wake), after every call that can free a range; a pass costs one
 *     conflict search per waiter of the file, so the caps bound it.  A
 *     granted waiter is a lock at once, so nothing takes the range before
 *     GRANTED is sent.
 * 10. Owners and hosts are interned: equal host name, svid and oh bytes are
 *     one struct, so owner identity is pointer equality.  A share
 *     reservation's owner has svid 0 (share_owner): NLM names none.
 * 11. Share reservations are apart from byte-range locks: neither blocks
 *     the other, as in Linux lockd.  One per owner per file.
 */
#include <assert.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "lock.h"

/* ---- a chained hash table of intrusive nodes, keyed by SipHash ---- */

#define HT_MIN 16

struct hnode {
	struct hnode *next;
	uint64_t hash;
};

struct htab {
	struct hnode **b;
	size_t nb, count;
};

static int ht_init(struct htab *h)
{
	h->b = calloc(HT_MIN, sizeof(*h->b));
	h->nb = HT_MIN;
	h->count = 0;
	return h->b ? 0 : -1;
}

/* A failed resize keeps the old buckets: chains grow longer, nothing lost. */
static void ht_resize(struct htab *h, size_t nb)
{
	struct hnode **b = calloc(nb, sizeof(*b));

	if (!b)
		return;
	for (size_t i = 0; i < h->nb; i++) {
		struct hnode *n, *next;

		for (n = h->b[i]; n; n = next) {
			next = n->next;
			n->next = b[n->hash % nb];
			b[n->hash % nb] = n;
		}
	}
	free(h->b);
	h->b = b;
	h->nb = nb;
}

static void ht_add(struct htab *h, struct hnode *n)
{
	struct hnode **head = &h->b[n->hash % h->nb];

	n->next = *head;
	*head = n;
	if (++h->count > h->nb)
		ht_resize(h, h->nb * 2);
}

static void ht_del(struct htab *h, struct hnode *n)
{
	struct hnode **pp = &h->b[n->hash % h->nb];

	while (*pp != n)
		pp = &(*pp)->next;
	*pp = n->next;
	if (--h->count < h->nb / 4 && h->nb > HT_MIN)
		ht_resize(h, h->nb / 2);
}

static struct hnode *ht_chain(const struct htab *h, uint64_t hash)
{
	return h->b[hash % h->nb];
}

/* ---- the table ---- */

struct lk_host {
	struct hnode hn; /* first: a host is its node */
	LIST_HEAD(, lk_owner) owners;
	size_t count; /* locks + waiters of its owners (rule 7) */
	size_t name_len;
	char name[];
};

struct lk_owner {
	struct hnode hn;
	LIST_ENTRY(lk_owner) in_host;
	struct lk_host *host;
	LIST_HEAD(, lk_lock) locks;
	LIST_HEAD(, lk_waiter) waiters;
	LIST_HEAD(, lk_share) shares;
	int32_t svid;
	size_t oh_len;
	uint8_t oh[];
};

struct lk_file {
	struct hnode hn;
	struct lock_file key;
	struct lk_lock *root;		 /* the locks' tree (rule 3) */
	TAILQ_HEAD(, lk_waiter) waiters; /* in order of arrival */
	LIST_HEAD(, lk_share) shares;
	struct lk_file *dirty_next; /* lock_free_host's list of files to wake */
	bool dirty;
};

struct lk_lock {
	struct lk_lock *left, *right; /* in the file's tree */
	uint64_t max_last;	      /* the highest last in this subtree */
	uint64_t seq;		      /* ties of first: older first */
	uint32_t prio;		      /* a treap's: above its children's */
	LIST_ENTRY(lk_lock) in_owner;
	struct lk_owner *owner;
	struct lk_file *file;
	uint64_t first, last;
	enum lock_type type;
};

struct lk_waiter {
	TAILQ_ENTRY(lk_waiter) in_file;
	LIST_ENTRY(lk_waiter) in_owner;
	struct lk_owner *owner;
	struct lk_file *file;
	uint64_t first, last;
	enum lock_type type;
	size_t cookie_len;
	uint8_t cookie[];
};

struct lk_share {
	LIST_ENTRY(lk_share) in_file;
	LIST_ENTRY(lk_share) in_owner;
	struct lk_owner *owner;
	struct lk_file *file;
	unsigned access, deny;
};

struct lock_table {
	pthread_mutex_t mu;
	uint8_t key[crypto_shorthash_KEYBYTES];
	struct lock_limits lim;
	struct htab files, hosts, owners;
	size_t locks, waiters, shares;
	uint64_t seq, prio_state;
};

/* The records one change may need (rule 6): a split-off piece and the new
 * lock; what is left unused is freed by spares_put. */
struct spares {
	struct lk_lock *l[2];
};

static uint64_t hash_bytes(const struct lock_table *t, const void *p, size_t n)
{
	unsigned char out[crypto_shorthash_BYTES];
	uint64_t h;

	crypto_shorthash(out, p, n, t->key);
	memcpy(&h, out, sizeof(h));
	return h;
}

static void span_of(const struct lock_range *r, uint64_t *first, uint64_t *last)
{
	*first = r->off;
	if (r->len == 0 || r->len - 1 > UINT64_MAX - r->off)
		*last = UINT64_MAX;
	else
		*last = r->off + r->len - 1;
}

static struct lock_range range_of(uint64_t first, uint64_t last)
{
	struct lock_range r = {first, last == UINT64_MAX ? 0 : last - first + 1};

	return r;
}

static bool overlaps(uint64_t a1, uint64_t a2, uint64_t b1, uint64_t b2)
{
	return a1 <= b2 && b1 <= a2;
}

/* ---- hosts, owners, files: found or made, and freed when empty ---- */

static struct lk_host *host_find(struct lock_table *t, const char *name, bool make)
{
	size_t len = strlen(name);
	uint64_t hash = hash_bytes(t, name, len);
	struct lk_host *h;

	for (struct hnode *n = ht_chain(&t->hosts, hash); n; n = n->next) {
		h = (struct lk_host *)n;
		if (n->hash == hash && h->name_len == len &&
		    (!len || !memcmp(h->name, name, len)))
			return h;
	}
	if (!make || !(h = calloc(1, sizeof(*h) + len + 1)))
		return NULL;
	h->hn.hash = hash;
	LIST_INIT(&h->owners);
	h->name_len = len;
	memcpy(h->name, name, len);
	ht_add(&t->hosts, &h->hn);
	return h;
}

static uint64_t owner_hash(struct lock_table *t, const struct lk_host *h,
			   const struct lock_owner *o)
{
	uint8_t buf[sizeof(h) + sizeof(o->svid) + LOCK_MAX_OH];

	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), &o->svid, sizeof(o->svid));
	lock_copy_bytes(buf + sizeof(h) + sizeof(o->svid), o->oh, o->oh_len);
	return hash_bytes(t, buf, sizeof(h) + sizeof(o->svid) + o->oh_len);
}

static void host_tidy(struct lock_table *t, struct lk_host *h)
{
	if (!LIST_EMPTY(&h->owners))
		return;
	assert(h->count == 0);
	ht_del(&t->hosts, &h->hn);
	free(h);
}

/* OWNER's struct; made (with its host) when MAKE, else NULL when unknown. */
static struct lk_owner *owner_find(struct lock_table *t, const struct lock_owner *id,
				   bool make)
{
	struct lk_host *h;
	struct lk_owner *o;
	uint64_t hash;

	assert(id->host && strlen(id->host) <= LOCK_MAX_HOST &&
	       id->oh_len <= LOCK_MAX_OH);
	if (!(h = host_find(t, id->host, make)))
		return NULL;
	hash = owner_hash(t, h, id);
	for (struct hnode *n = ht_chain(&t->owners, hash); n; n = n->next) {
		o = (struct lk_owner *)n;
		if (n->hash == hash && o->host == h && o->svid == id->svid &&
		    o->oh_len == id->oh_len &&
		    (!id->oh_len || !memcmp(o->oh, id->oh, id->oh_len)))
			return o;
	}
	if (!make || !(o = calloc(1, sizeof(*o) + id->oh_len))) {
		host_tidy(t, h);
		return NULL;
	}
	o->hn.hash = hash;
	o->host = h;
	LIST_INIT(&o->locks);
	LIST_INIT(&o->waiters);
	LIST_INIT(&o->shares);
	o->svid = id->svid;
	o->oh_len = id->oh_len;
	lock_copy_bytes(o->oh, id->oh, id->oh_len);
	LIST_INSERT_HEAD(&h->owners, o, in_host);
	ht_add(&t->owners, &o->hn);
	return o;
}

static void owner_tidy(struct lock_table *t, struct lk_owner *o)
{
	struct lk_host *h;

	if (!o || !LIST_EMPTY(&o->locks) || !LIST_EMPTY(&o->waiters) ||
	    !LIST_EMPTY(&o->shares))
		return;
	h = o->host;
	LIST_REMOVE(o, in_host);
	ht_del(&t->owners, &o->hn);
	free(o);
	host_tidy(t, h);
}

static struct lk_file *file_find(struct lock_table *t, const struct lock_file *key,
				 bool make)
{
	uint64_t hash = hash_bytes(t, key, sizeof(*key));
	struct lk_file *f;

	for (struct hnode *n = ht_chain(&t->files, hash); n; n = n->next) {
		f = (struct lk_file *)n;
		if (n->hash == hash && f->key.export_id == key->export_id &&
		    f->key.node_id == key->node_id)
			return f;
	}
	if (!make || !(f = calloc(1, sizeof(*f))))
		return NULL;
	f->hn.hash = hash;
	f->key = *key;
	TAILQ_INIT(&f->waiters);
	LIST_INIT(&f->shares);
	ht_add(&t->files, &f->hn);
	return f;
}

static void file_tidy(struct lock_table *t, struct lk_file *f)
{
	if (!f || f->dirty || f->root || !TAILQ_EMPTY(&f->waiters) ||
	    !LIST_EMPTY(&f->shares))
		return;
	ht_del(&t->files, &f->hn);
	free(f);
}

/* ---- locks and waiters: linking keeps the counts of rule 7 ---- */

/* ---- a file's locks: a treap by (first, seq), augmented by max_last ---- */

static bool tr_before(const struct lk_lock *a, const struct lk_lock *b)
{
	return a->first < b->first || (a->first == b->first && a->seq < b->seq);
}

static void tr_fix(struct lk_lock *n)
{
	n->max_last = n->last;
	if (n->left && n->left->max_last > n->max_last)
		n->max_last = n->left->max_last;
	if (n->right && n->right->max_last > n->max_last)
		n->max_last = n->right->max_last;
}

static struct lk_lock *tr_rotate_right(struct lk_lock *x)
{
	struct lk_lock *y = x->left;

	x->left = y->right;
	y->right = x;
	tr_fix(x);
	tr_fix(y);
	return y;
}

static struct lk_lock *tr_rotate_left(struct lk_lock *x)
{
	struct lk_lock *y = x->right;

	x->right = y->left;
	y->left = x;
	tr_fix(x);
	tr_fix(y);
	return y;
}

/* The subtree ROOT with N added; returns its new root. */
static struct lk_lock *tr_insert(struct lk_lock *root, struct lk_lock *n)
{
	if (!root) {
		n->left = n->right = NULL;
		tr_fix(n);
		return n;
	}
	if (tr_before(n, root)) {
		root->left = tr_insert(root->left, n);
		if (root->left->prio > root->prio)
			return tr_rotate_right(root);
	} else {
		root->right = tr_insert(root->right, n);
		if (root->right->prio > root->prio)
			return tr_rotate_left(root);
	}
	tr_fix(root);
	return root;
}

/* Joins A and B, every key of A before every key of B. */
static struct lk_lock *tr_join(struct lk_lock *a, struct lk_lock *b)
{
	if (!a || !b)
		return a ? a : b;
	if (a->prio > b->prio) {
		a->right = tr_join(a->right, b);
		tr_fix(a);
		return a;
	}
	b->left = tr_join(a, b->left);
	tr_fix(b);
	return b;
}

/* The subtree ROOT without N, which is in it; returns its new root. */
static struct lk_lock *tr_remove(struct lk_lock *root, struct lk_lock *n)
{
	if (root == n)
		return tr_join(n->left, n->right);
	if (tr_before(n, root))
		root->left = tr_remove(root->left, n);
	else
		root->right = tr_remove(root->right, n);
	tr_fix(root);
	return root;
}

typedef bool tr_match_fn(const struct lk_lock *l, void *arg);

/* The first lock of subtree N, in order, that overlaps [FIRST, LAST] and
 * that MATCH accepts, or NULL. */
static struct lk_lock *tr_find(struct lk_lock *n, uint64_t first, uint64_t last,
			       tr_match_fn *match, void *arg)
{
	struct lk_lock *x;

	if (!n || n->max_last < first)
		return NULL;
	if ((x = tr_find(n->left, first, last, match, arg)))
		return x;
	if (n->first > last)
		return NULL; /* and all of the right subtree */
	if (n->last >= first && match(n, arg))
		return n;
	return tr_find(n->right, first, last, match, arg);
}

/* ---- locks and waiters: linking keeps the counts of rule 7 ---- */

static void lock_link(struct lock_table *t, struct lk_file *f, struct lk_lock *l)
{
	/* xorshift: priorities need only be independent of the keys */
	t->prio_state ^= t->prio_state << 13;
	t->prio_state ^= t->prio_state >> 7;
	t->prio_state ^= t->prio_state << 17;
	l->prio = (uint32_t)(t->prio_state >> 32);
	l->seq = t->seq++;
	l->file = f;
	f->root = tr_insert(f->root, l);
	LIST_INSERT_HEAD(&l->owner->locks, l, in_owner);
	l->owner->host->count++;
	t->locks++;
}

static void lock_unlink(struct lock_table *t, struct lk_file *f, struct lk_lock *l)
{
	f->root = tr_remove(f->root, l);
	LIST_REMOVE(l, in_owner);
	l->owner->host->count--;
	t->locks--;
}

static void waiter_unlink(struct lock_table *t, struct lk_file *f, struct lk_waiter *w)
{
	TAILQ_REMOVE(&f->waiters, w, in_file);
	LIST_REMOVE(w, in_owner);
	w->owner->host->count--;
	t->waiters--;
	free(w);
}

/* Whether H may hold DELTA more entries (rule 7). */
static bool room(const struct lock_table *t, const struct lk_host *h, long delta)
{
	if (delta <= 0)
		return true;
	if (t->lim.per_host && h->count + (size_t)delta > t->lim.per_host)
		return false;
	return !t->lim.total ||
	       t->locks + t->waiters + t->shares + (size_t)delta <= t->lim.total;
}

struct want {
	const struct lk_owner *owner;
	enum lock_type type;
};

static bool conflicts(const struct lk_lock *l, void *arg)
{
	const struct want *w = arg;

	return l->owner != w->owner &&
	       (w->type == LOCK_EXCLUSIVE || l->type == LOCK_EXCLUSIVE);
}

static struct lk_lock *first_conflict(struct lk_file *f, const struct lk_owner *o,
				      enum lock_type type, uint64_t first, uint64_t last)
{
	struct want w = {o, type};

	return tr_find(f->root, first, last, conflicts, &w);
}

/* Whether L is the owner's of W (and of its type). */
static bool owners(const struct lk_lock *l, void *arg)
{
	const struct want *w = arg;

	return l->owner == w->owner;
}

static bool owners_of_type(const struct lk_lock *l, void *arg)
{
	const struct want *w = arg;

	return l->owner == w->owner && l->type == w->type;
}

struct plan {
	const struct lk_owner *owner;
	uint64_t first, last;
	bool insert;
	enum lock_type type;
	long delta;
};

/* Counts what L adds to the plan at ARG; never stops the walk. */
static bool plan_one(const struct lk_lock *l, void *arg)
{
	struct plan *p = arg;

	if (l->owner != p->owner)
		return false;
	if (overlaps(l->first, l->last, p->first, p->last))
		p->delta += l->first < p->first && l->last > p->last	 ? 1
			    : l->first >= p->first && l->last <= p->last ? -1
									 : 0;
	if (!p->insert || l->type != p->type)
		return false;
	/* a same-type neighbour once the range is cut: merged away */
	if (p->first > 0 && l->first < p->first && l->last >= p->first - 1)
		p->delta--;
	if (p->last < UINT64_MAX && l->last > p->last && l->first <= p->last + 1)
		p->delta--;
	return false;
}

/* How many entries O's locks on F gain when [FIRST, LAST] is cut out and,
 * when INSERT, a TYPE lock put there (rule 6). */
static long plan(struct lk_file *f, const struct lk_owner *o, uint64_t first,
		 uint64_t last, bool insert, enum lock_type type)
{
	struct plan p = {o, first, last, insert, type, insert ? 1 : 0};

	tr_find(f->root, first > 0 ? first - 1 : 0, last < UINT64_MAX ? last + 1 : last,
		plan_one, &p);
	return p.delta;
}

static int spares_get(struct spares *s)
{
	s->l[0] = malloc(sizeof(struct lk_lock));
	s->l[1] = malloc(sizeof(struct lk_lock));
	return s->l[0] && s->l[1] ? 0 : -1;
}

static struct lk_lock *spares_take(struct spares *s)
{
	struct lk_lock *l = s->l[0] ? s->l[0] : s->l[1];

	assert(l);
	if (l == s->l[0])
		s->l[0] = NULL;
	else
		s->l[1] = NULL;
	return l;
}

static void spares_put(struct spares *s)
{
	free(s->l[0]);
	free(s->l[1]);
}

/* Removes O's hold on [FIRST, LAST] of F (rule 4).  Each lock found is
 * left not overlapping the range, so the loop ends. */
static void cut(struct lock_table *t, struct lk_file *f, struct lk_owner *o,
		uint64_t first, uint64_t last, struct spares *s)
{
	struct want w = {o, LOCK_SHARED};
	struct lk_lock *l, *piece;

	while ((l = tr_find(f->root, first, last, owners, &w))) {
		lock_unlink(t, f, l);
		if (l->first < first && l->last > last) {
			piece = spares_take(s);
			*piece = *l;
			piece->first = last + 1;
			lock_link(t, f, piece);
			l->last = first - 1;
		} else if (l->first < first) {
			l->last = first - 1;
		} else if (l->last > last) {
			l->first = last + 1;
		} else {
			free(l);
			continue;
		}
		lock_link(t, f, l);
	}
}

/* O's lock of TYPE that holds byte AT, taken out of F's tree, or NULL. */
static struct lk_lock *take_neighbour(struct lock_table *t, struct lk_file *f,
				      struct lk_owner *o, enum lock_type type,
				      uint64_t at)
{
	struct want w = {o, type};
	struct lk_lock *l = tr_find(f->root, at, at, owners_of_type, &w);

	if (l)
		lock_unlink(t, f, l);
	return l;
}

/* Puts a TYPE lock of O on [FIRST, LAST] of F, where O holds nothing,
 * merged with O's same-type neighbours (rule 4). */
static void insert(struct lock_table *t, struct lk_file *f, struct lk_owner *o,
		   enum lock_type type, uint64_t first, uint64_t last, struct spares *s)
{
	struct lk_lock *n = spares_take(s), *l;

	*n = (struct lk_lock){.owner = o, .first = first, .last = last, .type = type};
	if (first > 0 && (l = take_neighbour(t, f, o, type, first - 1))) {
		n->first = l->first;
		free(l);
	}
	if (last < UINT64_MAX && (l = take_neighbour(t, f, o, type, last + 1))) {
		n->last = l->last;
		free(l);
	}
	lock_link(t, f, n);
}

static void holder_fill(struct lock_holder *h, const struct lk_owner *o,
			enum lock_type type, uint64_t first, uint64_t last)
{
	memcpy(h->host, o->host->name, o->host->name_len + 1);
	h->svid = o->svid;
	h->oh_len = o->oh_len;
	lock_copy_bytes(h->oh, o->oh, o->oh_len);
	h->type = type;
	h->range = range_of(first, last);
}

/* O takes TYPE on [FIRST, LAST] of F, where nothing conflicts: OK or
 * NOLOCKS, when over a cap or out of memory (nothing changed).  SLACK
 * entries of O's host are about to go (a waiter becoming this lock). */
static enum lock_result apply(struct lock_table *t, struct lk_file *f, struct lk_owner *o,
			      enum lock_type type, uint64_t first, uint64_t last,
			      long slack)
{
	struct spares s = {{NULL, NULL}};
	enum lock_result res = LOCK_NOLOCKS;

	if (!room(t, o->host, plan(f, o, first, last, true, type) - slack) ||
	    spares_get(&s) < 0)
		goto out;
	cut(t, f, o, first, last, &s);
	insert(t, f, o, type, first, last, &s);
	res = LOCK_OK;
out:
	spares_put(&s);
	return res;
}

/* One pass over F's waiters in order of arrival (rule 9); whether it
 * granted any.  Grants go to the end of the list at *TAIL. */
static bool wake_pass(struct lock_table *t, struct lk_file *f, struct lock_grant ***tail)
{
	struct lk_waiter *w, *next;
	struct lock_grant *g;
	bool any = false;

	for (w = TAILQ_FIRST(&f->waiters); w; w = next) {
		next = TAILQ_NEXT(w, in_file);
		if (first_conflict(f, w->owner, w->type, w->first, w->last))
			continue;
		if (!(g = calloc(1, sizeof(*g))))
			continue;
		if (apply(t, f, w->owner, w->type, w->first, w->last, 1) != LOCK_OK) {
			free(g);
			continue;
		}
		g->file = f->key;
		holder_fill(&g->lock, w->owner, w->type, w->first, w->last);
		g->cookie_len = w->cookie_len;
		lock_copy_bytes(g->cookie, w->cookie, w->cookie_len);
		**tail = g;
		*tail = &g->next;
		waiter_unlink(t, f, w);
		any = true;
	}
	return any;
}

static void wake(struct lock_table *t, struct lk_file *f, struct lock_grant **grants)
{
	struct lock_grant **tail = grants;

	if (!grants)
		return;
	while (*tail)
		tail = &(*tail)->next;
	while (wake_pass(t, f, &tail))
		;
}

/* ---- the public calls ---- */

struct lock_table *lock_table_new(const struct lock_limits *lim)
{
	struct lock_table *t = calloc(1, sizeof(*t));

	if (!t || sodium_init() < 0)
		goto fail;
	if (ht_init(&t->files) < 0 || ht_init(&t->hosts) < 0 || ht_init(&t->owners) < 0)
		goto fail;
	randombytes_buf(t->key, sizeof(t->key));
	t->prio_state = randombytes_random() | 1ull << 40; /* never 0 */
	t->lim = *lim;
	pthread_mutex_init(&t->mu, NULL);
	return t;
fail:
	if (t) {
		free(t->files.b);
		free(t->hosts.b);
		free(t->owners.b);
	}
	free(t);
	return NULL;
}

void lock_table_free(struct lock_table *t)
{
	if (!t)
		return;
	while (t->hosts.count)
		for (size_t i = 0; i < t->hosts.nb; i++)
			if (t->hosts.b[i]) {
				lock_free_host(t, ((struct lk_host *)t->hosts.b[i])->name,
					       NULL);
				break;
			}
	assert(t->files.count == 0 && t->owners.count == 0);
	free(t->files.b);
	free(t->hosts.b);
	free(t->owners.b);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

void lock_set_limits(struct lock_table *t, const struct lock_limits *lim)
{
	pthread_mutex_lock(&t->mu);
	t->lim = *lim;
	pthread_mutex_unlock(&t->mu);
}

enum lock_result lock_test(struct lock_table *t, const struct lock_file *fk,
			   const struct lock_owner *owner, enum lock_type type,
			   const struct lock_range *r, struct lock_holder *conflict)
{
	enum lock_result res = LOCK_OK;
	struct lk_file *f;
	struct lk_lock *l;
	uint64_t first, last;

	span_of(r, &first, &last);
	pthread_mutex_lock(&t->mu);
	f = file_find(t, fk, false);
	l = f ? first_conflict(f, owner_find(t, owner, false), type, first, last) : NULL;
	if (l) {
		res = LOCK_DENIED;
		if (conflict)
			holder_fill(conflict, l->owner, l->type, l->first, l->last);
	}
	pthread_mutex_unlock(&t->mu);
	return res;
}

/* lock_acquire and lock_block: on a conflict, a waiter with COOKIE when
 * BLOCK, else DENIED.  Called with the mutex held. */
static enum lock_result acquire(struct lock_table *t, const struct lock_file *fk,
				const struct lock_owner *id, enum lock_type type,
				const struct lock_range *r, bool block,
				const void *cookie, size_t cookie_len,
				struct lock_grant **grants)
{
	enum lock_result res = LOCK_NOLOCKS;
	struct lk_owner *o = owner_find(t, id, true);
	struct lk_file *f = file_find(t, fk, true);
	struct lk_waiter *w;
	uint64_t first, last;

	span_of(r, &first, &last);
	if (!o || !f)
		goto out;
	if (!first_conflict(f, o, type, first, last)) {
		res = apply(t, f, o, type, first, last, 0);
		if (res == LOCK_OK)
			wake(t, f, grants);
		goto out;
	}
	res = LOCK_DENIED;
	if (!block)
		goto out;
	res = LOCK_BLOCKED;
	LIST_FOREACH(w, &o->waiters, in_owner)
	{
		if (w->file == f && w->type == type && w->first == first &&
		    w->last == last)
			goto out;
	}
	res = LOCK_NOLOCKS;
	assert(cookie_len <= LOCK_MAX_COOKIE);
	if (!room(t, o->host, 1) || !(w = malloc(sizeof(*w) + cookie_len)))
		goto out;
	*w = (struct lk_waiter){.owner = o,
				.file = f,
				.first = first,
				.last = last,
				.type = type,
				.cookie_len = cookie_len};
	lock_copy_bytes(w->cookie, cookie, cookie_len);
	TAILQ_INSERT_TAIL(&f->waiters, w, in_file);
	LIST_INSERT_HEAD(&o->waiters, w, in_owner);
	o->host->count++;
	t->waiters++;
	res = LOCK_BLOCKED;
out:
	file_tidy(t, f);
	owner_tidy(t, o);
	return res;
}

enum lock_result lock_acquire(struct lock_table *t, const struct lock_file *f,
			      const struct lock_owner *owner, enum lock_type type,
			      const struct lock_range *r, struct lock_grant **grants)
{
	enum lock_result res;

	pthread_mutex_lock(&t->mu);
	res = acquire(t, f, owner, type, r, false, NULL, 0, grants);
	pthread_mutex_unlock(&t->mu);
	return res;
}

enum lock_result lock_block(struct lock_table *t, const struct lock_file *f,
			    const struct lock_owner *owner, enum lock_type type,
			    const struct lock_range *r, const void *cookie,
			    size_t cookie_len, struct lock_grant **grants)
{
	enum lock_result res;

	pthread_mutex_lock(&t->mu);
	res = acquire(t, f, owner, type, r, true, cookie, cookie_len, grants);
	pthread_mutex_unlock(&t->mu);
	return res;
}

/* The known owner and file of a call that adds nothing (t->mu held);
 * false when either is unknown, so there is nothing to find. */
static bool held_find(struct lock_table *t, const struct lock_owner *owner,
		      const struct lock_file *fk, struct lk_owner **o, struct lk_file **f)
{
	*o = owner_find(t, owner, false);
	*f = file_find(t, fk, false);
	return *o && *f;
}

enum lock_result lock_cancel(struct lock_table *t, const struct lock_file *fk,
			     const struct lock_owner *owner, enum lock_type type,
			     const struct lock_range *r)
{
	enum lock_result res = LOCK_DENIED;
	struct lk_owner *o;
	struct lk_file *f;
	struct lk_waiter *w;
	uint64_t first, last;

	span_of(r, &first, &last);
	pthread_mutex_lock(&t->mu);
	if (!held_find(t, owner, fk, &o, &f))
		goto out;
	TAILQ_FOREACH(w, &f->waiters, in_file)
	{
		if (w->owner == o && w->type == type && w->first == first &&
		    w->last == last) {
			waiter_unlink(t, f, w);
			res = LOCK_OK;
			break;
		}
	}
	file_tidy(t, f);
	owner_tidy(t, o);
out:
	pthread_mutex_unlock(&t->mu);
	return res;
}

enum lock_result lock_release(struct lock_table *t, const struct lock_file *fk,
			      const struct lock_owner *owner, const struct lock_range *r,
			      struct lock_grant **grants)
{
	struct spares s = {{NULL, NULL}};
	enum lock_result res = LOCK_OK;
	struct lk_owner *o;
	struct lk_file *f;
	uint64_t first, last;

	span_of(r, &first, &last);
	pthread_mutex_lock(&t->mu);
	if (!held_find(t, owner, fk, &o, &f))
		goto out;
	res = LOCK_NOLOCKS;
	if (!room(t, o->host, plan(f, o, first, last, false, LOCK_SHARED)) ||
	    spares_get(&s) < 0)
		goto out;
	cut(t, f, o, first, last, &s);
	wake(t, f, grants);
	res = LOCK_OK;
out:
	spares_put(&s);
	if (f)
		file_tidy(t, f);
	owner_tidy(t, o);
	pthread_mutex_unlock(&t->mu);
	return res;
}

static void share_unlink(struct lock_table *t, struct lk_share *sh)
{
	LIST_REMOVE(sh, in_file);
	LIST_REMOVE(sh, in_owner);
	sh->owner->host->count--;
	t->shares--;
	free(sh);
}

/* A share reservation's owner: host and oh (rule 10). */
static struct lk_owner *share_owner(struct lock_table *t, const struct lock_owner *id,
				    bool make)
{
	struct lock_owner o = *id;

	o.svid = 0;
	return owner_find(t, &o, make);
}

/* OWNER's reservation on F, or NULL. */
static struct lk_share *share_find(struct lk_file *f, const struct lk_owner *o)
{
	struct lk_share *sh;

	LIST_FOREACH(sh, &f->shares, in_file)
	{
		if (sh->owner == o)
			return sh;
	}
	return NULL;
}

static bool share_conflicts(struct lk_file *f, const struct lk_owner *o, unsigned access,
			    unsigned deny)
{
	struct lk_share *sh;

	LIST_FOREACH(sh, &f->shares, in_file)
	{
		if (sh->owner != o && ((sh->deny & access) || (sh->access & deny)))
			return true;
	}
	return false;
}

enum lock_result lock_share(struct lock_table *t, const struct lock_file *fk,
			    const struct lock_owner *owner, unsigned access,
			    unsigned deny)
{
	enum lock_result res = LOCK_NOLOCKS;
	struct lk_owner *o;
	struct lk_file *f;
	struct lk_share *sh;

	pthread_mutex_lock(&t->mu);
	o = share_owner(t, owner, true);
	f = file_find(t, fk, true);
	if (!o || !f)
		goto out;
	res = LOCK_DENIED;
	if (share_conflicts(f, o, access, deny))
		goto out;
	res = LOCK_NOLOCKS;
	if (!(sh = share_find(f, o))) {
		if (!room(t, o->host, 1) || !(sh = calloc(1, sizeof(*sh))))
			goto out;
		sh->owner = o;
		sh->file = f;
		LIST_INSERT_HEAD(&f->shares, sh, in_file);
		LIST_INSERT_HEAD(&o->shares, sh, in_owner);
		o->host->count++;
		t->shares++;
	}
	sh->access = access;
	sh->deny = deny;
	res = LOCK_OK;
out:
	file_tidy(t, f);
	owner_tidy(t, o);
	pthread_mutex_unlock(&t->mu);
	return res;
}

void lock_unshare(struct lock_table *t, const struct lock_file *fk,
		  const struct lock_owner *owner)
{
	struct lk_owner *o;
	struct lk_file *f;
	struct lk_share *sh;

	pthread_mutex_lock(&t->mu);
	o = share_owner(t, owner, false);
	f = file_find(t, fk, false);
	if (o && f && (sh = share_find(f, o)))
		share_unlink(t, sh);
	if (f)
		file_tidy(t, f);
	owner_tidy(t, o);
	pthread_mutex_unlock(&t->mu);
}

static void mark_dirty(struct lk_file *f, struct lk_file **dirty)
{
	if (f->dirty)
		return;
	f->dirty = true;
	f->dirty_next = *dirty;
	*dirty = f;
}

/* Drops O's locks and waiters, their files put on the list at *DIRTY. */
static void owner_drop(struct lock_table *t, struct lk_owner *o, struct lk_file **dirty)
{
	struct lk_lock *l;
	struct lk_waiter *w;
	struct lk_share *sh;

	while ((sh = LIST_FIRST(&o->shares))) {
		mark_dirty(sh->file, dirty);
		share_unlink(t, sh);
	}
	while ((w = LIST_FIRST(&o->waiters))) {
		mark_dirty(w->file, dirty);
		waiter_unlink(t, w->file, w);
	}
	while ((l = LIST_FIRST(&o->locks))) {
		mark_dirty(l->file, dirty);
		lock_unlink(t, l->file, l);
		free(l);
	}
}

void lock_free_host(struct lock_table *t, const char *host, struct lock_grant **grants)
{
	struct lk_file *dirty = NULL, *f;
	struct lk_owner *o;
	struct lk_host *h;
	bool last;

	pthread_mutex_lock(&t->mu);
	if (!(h = host_find(t, host, false)))
		goto out;
	LIST_FOREACH(o, &h->owners, in_host)
	owner_drop(t, o, &dirty);
	/* the last owner's tidy frees the host */
	do {
		o = LIST_FIRST(&h->owners);
		last = !LIST_NEXT(o, in_host);
		owner_tidy(t, o);
	} while (!last);
	while ((f = dirty)) {
		dirty = f->dirty_next;
		f->dirty = false;
		wake(t, f, grants);
		file_tidy(t, f);
	}
out:
	pthread_mutex_unlock(&t->mu);
}

void lock_grants_free(struct lock_grant *g)
{
	struct lock_grant *next;

	for (; g; g = next) {
		next = g->next;
		free(g);
	}
}

struct listing {
	const struct lk_owner *owner;
	struct lock_span *out;
	size_t max, n;
};

/* Adds L to the listing at ARG when it is the owner's; never stops the walk. */
static bool list_one(const struct lk_lock *l, void *arg)
{
	struct listing *ls = arg;

	if (l->owner != ls->owner)
		return false;
	if (ls->n < ls->max)
		ls->out[ls->n] = (struct lock_span){l->first, l->last, l->type};
	ls->n++;
	return false;
}

size_t lock_list(struct lock_table *t, const struct lock_file *fk,
		 const struct lock_owner *owner, struct lock_span *out, size_t max)
{
	struct lk_owner *o;
	struct lk_file *f;
	size_t n = 0;

	pthread_mutex_lock(&t->mu);
	if (held_find(t, owner, fk, &o, &f)) {
		struct listing ls = {o, out, max, 0};

		tr_find(f->root, 0, UINT64_MAX, list_one, &ls);
		n = ls.n;
	}
	pthread_mutex_unlock(&t->mu);
	return n;
}

void lock_get_stats(struct lock_table *t, struct lock_stats *st)
{
	pthread_mutex_lock(&t->mu);
	st->locks = t->locks;
	st->waiters = t->waiters;
	st->shares = t->shares;
	st->files = t->files.count;
	st->owners = t->owners.count;
	st->hosts = t->hosts.count;
	pthread_mutex_unlock(&t->mu);
}

/* ---- lock_check: the rules as code, for tests ---- */

struct check {
	const struct lk_lock *prev; /* in order, for rule 3's order */
	size_t locks;
	const char *bad;
};

/* Another lock of L's owner that overlaps L or touches it with L's type. */
static bool touches_own(const struct lk_lock *x, void *arg)
{
	const struct lk_lock *l = arg;

	return x != l && x->owner == l->owner &&
	       (overlaps(x->first, x->last, l->first, l->last) || x->type == l->type);
}

static void check_tree(struct lk_file *f, const struct lk_lock *n, struct check *c)
{
	uint64_t max;

	if (!n || c->bad)
		return;
	check_tree(f, n->left, c);
	max = n->last;
	for (int i = 0; i < 2; i++) {
		const struct lk_lock *k = i ? n->right : n->left;

		if (k && k->prio > n->prio)
			c->bad = "a child above its parent";
		if (k && k->max_last > max)
			max = k->max_last;
	}
	if (n->max_last != max)
		c->bad = "max_last stale";
	if (n->first > n->last)
		c->bad = "first after last";
	if (c->prev && !tr_before(c->prev, n))
		c->bad = "out of order";
	if (n->file != f)
		c->bad = "in another file's tree";
	if (tr_find(f->root, n->first > 0 ? n->first - 1 : 0,
		    n->last < UINT64_MAX ? n->last + 1 : n->last, touches_own, (void *)n))
		c->bad = "an owner's locks overlap or touch";
	c->prev = n;
	c->locks++;
	check_tree(f, n->right, c);
}

static const char *check_file(struct lk_file *f, size_t *locks)
{
	struct check c = {NULL, 0, NULL};

	check_tree(f, f->root, &c);
	*locks += c.locks;
	if (!c.bad && !f->root && TAILQ_EMPTY(&f->waiters) && LIST_EMPTY(&f->shares))
		c.bad = "an empty file kept";
	return c.bad;
}

static const char *check_host(struct lk_host *h)
{
	struct lk_owner *o;
	size_t n = 0;

	LIST_FOREACH(o, &h->owners, in_host)
	{
		struct lk_lock *l;
		struct lk_waiter *w;
		struct lk_share *sh;

		if (LIST_EMPTY(&o->locks) && LIST_EMPTY(&o->waiters) &&
		    LIST_EMPTY(&o->shares))
			return "an empty owner kept";
		LIST_FOREACH(l, &o->locks, in_owner) n++;
		LIST_FOREACH(w, &o->waiters, in_owner) n++;
		LIST_FOREACH(sh, &o->shares, in_owner) n++;
	}
	if (LIST_EMPTY(&h->owners))
		return "an empty host kept";
	return n == h->count ? NULL : "a host's count is wrong";
}

int lock_check(struct lock_table *t, char *why, size_t why_len)
{
	const char *bad = NULL;
	size_t locks = 0;

	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; !bad && i < t->files.nb; i++)
		for (struct hnode *n = t->files.b[i]; !bad && n; n = n->next)
			bad = check_file((struct lk_file *)n, &locks);
	for (size_t i = 0; !bad && i < t->hosts.nb; i++)
		for (struct hnode *n = t->hosts.b[i]; !bad && n; n = n->next)
			bad = check_host((struct lk_host *)n);
	if (!bad && locks != t->locks)
		bad = "the table's count is wrong";
	pthread_mutex_unlock(&t->mu);
	if (bad)
		snprintf(why, why_len, "%s", bad);
	return bad ? -1 : 0;
}
