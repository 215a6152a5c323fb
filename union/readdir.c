/* SPDX-License-Identifier: Apache-2.0 */
/* readdir.c - merged directory listings, their cookies, verifiers and cache.
 *
 * Design notes
 * ------------
 * A listing is the merged content of one directory at one version, built in
 * three steps (listing_build):
 *   1. read: every layer dir of the directory's stack is read with getdents64;
 *      each entry becomes a record (name, stack position, white-out?, type,
 *      dev/ino).  In a lower layer ".wh.NAME" becomes a white-out record of
 *      NAME, and every other ".wh." name (".wh..wh..opq" and the like) is
 *      dropped.  A 0:0 char device or an empty file with the overlay.whiteout
 *      xattr is a white-out record (whiteout.c classifies).
 *   2. merge: records are sorted by (name, stack position, real before
 *      white-out) and each name's run is folded with un_merge_step, the rule
 *      lookup.c uses, so a name is listed exactly when un_lookup finds it, and
 *      with the same instances, hence the same node id.
 *   3. order: the survivors get cookie = keyed 63-bit SipHash of the name
 *      (raised to 3 when below), and are sorted by (cookie, name) after "."
 *      (cookie 1) and ".." (cookie 2).
 *
 * The version of a directory is a keyed hash over (layer index, dev, ino,
 * mtime, ctime, size) of every layer dir of its stack, so a change in any
 * layer, or a layer dir appearing or disappearing, is a new version.  With
 * lower ids (lowerid.c rule 1: a key file, shared by gateways), a lower
 * layer dir the layer's index knows counts by its index key and mtime
 * instead, which every gateway's copy of the layer shares (its inode
 * numbers, ctime and, for a directory, size are the copy's own), so that
 * gateways give the same verifiers (version_part).
 *
 * Invariants
 *  1. A listing never changes once listing_build returns it; it is shared by
 *     reference count, and the cache holds one reference (cache_insert,
 *     cache_drop).
 *  2. The cache maps (dir id, version) to a listing built for that version.
 *     The version is taken before the layers are read (un_listing_get), so a
 *     change during a build shows as a new version at the next call.
 *  3. Only settled directories are cached: every layer dir last changed at
 *     least UN_LISTING_SETTLE_NS ago, so no later change can share the
 *     timestamp the version was computed from (dir_version).
 *  4. Entries are sorted by (cookie, name); "." is 1, ".." is 2, every other
 *     cookie is >= 3; names that share a cookie are adjacent.  A cookie
 *     depends on the name and the state secret only, so it means the same
 *     place in every version and after a restart.
 *  5. After every insert the cached listings use at most the cache limit
 *     (cache_evict), except that the most recently used listing stays even
 *     when it alone is larger: a directory too large for the limit would
 *     otherwise be read again from every layer for every page, and its
 *     build needs that memory anyway (so the bound is max(limit, largest
 *     listing)).  Older versions of a directory leave the cache when a new
 *     one enters.
 *  6. A verifier is never 0 and carries a MAC over (dir id, version bits), so
 *     un_listing_verf_valid recognises every verifier issued with this state
 *     dir and no forged one (but a 32-bit MAC: one in 2^32 guesses passes).
 *  7. A cached listing (settled, invariant 3) remembers the node id, fileid
 *     and handle of each entry once a page asked for them (page_nodes; a
 *     listing built for one call remembers nothing), each node tagged with
 *     the node table's epoch read before the table was (node.c invariant
 *     10).  A node
 *     is served from memory only while its tag is the current epoch: the
 *     table gives every (parent, name) of an unchanged directory the same
 *     node until some transaction other than un_node_assign commits, and
 *     each of those moves the epoch.  A changed directory is another version,
 *     hence another listing (invariant 2), so its nodes start unknown.  A
 *     handle is kept with the id it was made for and used only for that id.
 *     This memory is counted in the listing's bytes when it is allocated.
 *  8. A listing remembers the attributes of an entry (un_listing_attrs) only
 *     while nothing can have changed them unseen, and never for more than
 *     ATTR_TTL_NS:
 *       - every layer dir of the listing carries an inotify watch, added
 *         before the first stat (attr_watch); each event about an entry
 *         counts in its watch, and the pending events are counted at every
 *         call before any remembered attribute is used (un_watches_drain,
 *         watch.c), so a change whose syscall returned before the call is
 *         seen;
 *       - an attribute is tagged with the token (node epoch + the listing's
 *         watch counts + events lost) and the clock, both read before its
 *         stat; it serves only while the token is unchanged and it is
 *         younger than ATTR_TTL_NS;
 *       - only entries whose every change passes through their name in
 *         that dir are remembered, no file with several links, and only on
 *         local filesystems (un_fs_local); a directory, whose change inside it
 *         reaches its own watch and not its parent's, only with a watch on
 *         each of its parts (attr_entry_watch: every part on its layer
 *         dir's filesystem, added before its first stat), whose events
 *         about names in it move its entry's own token (entry_token, read
 *         before the stat like the listing's; one about the part itself
 *         reaches the listing's watch of its parent too).  So a
 *         merged directory's times (object.c rule 6) follow a name added
 *         to any part at the next call.  Those watches are bounded by a
 *         quarter of the user's inotify watches (watch.c rule 6), past
 *         which a directory is stat'ed on every call, as before.
 *     What no watch reports: a link made to a remembered file from another
 *     directory (through the union it writes the node table, hence the
 *     node epoch in the token; made in a layer by someone else, it shows
 *     when the attribute ages out) and writes through a shared mapping
 *     (mtime).  Those show within ATTR_TTL_NS.  Without inotify, or when a
 *     watch cannot be added, every call stats.
 *  9. The first page of a whole listing (the one after cookie 0) of a
 *     cached listing asks the table, once per listing (ahead_claim), for
 *     every entry the listing does not know, in one read and at most one
 *     write transaction, in the table's key order (nodes_ahead): a
 *     directory new to the table commits once for all its names, where a
 *     commit per page rewrote, each time, the B-tree pages its scattered
 *     names fell in (1,000,000 names: 39.6 s, bench/README.md).  That page
 *     still costs one commit at most (node.c invariant 6), and every id is
 *     committed before it leaves (node.c).  A failure of it leaves each
 *     page to ask for its own entries, as before.
 * 10. One inotify instance serves every table of a server: a table's cache
 *     borrows the main table's watches (un_listing_cache_new), which the
 *     main state frees after its tables (state.c rule 5).  An instance a
 *     table would cost one of the kernel's max_user_instances (128 by
 *     default, for every process of the server's user): a gateway whose
 *     client unions have tables of their own (docs/gateways.md, part 2)
 *     would run out of them past a hundred unions, leaving those unions'
 *     listings to stat every entry on every call and other programs of the
 *     user without inotify.  A watch names a layer dir, not a table's node,
 *     so a lower dir every union lists takes one watch for all (un_watch_get:
 *     the kernel gives one wd per inode and instance); its events count
 *     once, in the watch, whichever table's listings read them; and a
 *     token (watches_token) adds the table's own node epoch.  An overflow
 *     of the shared queue (ws->lost) makes every table's listings stat
 *     again once, as it did for one table's.
 *
 * Cost: a build is one fstatat per entry per layer (and a getxattr per empty
 * regular file) plus O(n log n); a page is O(log n + page), and reads the
 * node table only for the entries it shows first (or first since the epoch
 * moved), and stats only entries whose remembered attributes are unsure;
 * the first page of a whole listing reads the table for all its entries
 * (invariant 9), with about 120 B per entry of scratch while it does.
 * Memory: a listing that served READDIRPLUS holds 24 B (node) + 40 B
 * (handle) + 144 B (attributes) per entry beyond its names, and 8 B a
 * part for a directory entry's watches (the kernel's: one watch a part).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "un_private.h"
#include "watch.h"

#define DENTS_BUF     (32u << 10)
#define BUCKETS_MIN   256
#define COOKIE_DOT    1
#define COOKIE_DOTDOT 2
#define COOKIE_FIRST  3
/* How long a remembered attribute may serve at most (invariant 8): the
 * bound on what no inotify event reports (a write through a shared mapping,
 * or through a link made elsewhere after the stat). */
#define ATTR_TTL_NS 1000000000ll

static atomic_uint hash_bits = 63;
static _Atomic long long settle_ns = UN_LISTING_SETTLE_NS;

/* One entry of a listing: the public part first (un_listing_at hands it out). */
struct lent {
	struct un_dirent d;
	uint32_t inst_off; /* into un_listing.inst */
	uint16_t ninst;
	uint16_t pos; /* stack position of the top-most instance */
	enum un_links links;
};

/* The node of one entry as the table gave it at node epoch EPOCH (id 0:
 * never asked). */
struct lnode {
	un_id id, fileid;
	uint64_t epoch;
};

/* The handle made for node ID. */
struct lfh {
	un_id id;
	uint8_t fh[UN_FH_LEN];
};

/* The attributes of one entry, from a stat made when the watches of its
 * listing stood at TOKEN and the clock at AT (ns, CLOCK_MONOTONIC); AT 0:
 * none. */
struct lattr {
	struct un_attr a;
	uint64_t token;
	long long at;
	/* a directory's: a watch on each of its parts (ents[].ninst) and their
	 * entry_token read before the stat; NULL when not (yet) watched */
	struct un_watch **ew;
	uint64_t etoken;
	bool unwatched; /* the parts cannot be watched: stat each time */
};

struct un_listing {
	atomic_uint ref;
	un_id dir;
	uint64_t version, verf;
	size_t count, bytes; /* bytes: guarded by the cache lock once shared */
	struct lent *ents;
	struct un_devino *inst; /* raw (dev, ino) */
	struct un_devino *keys; /* their identities, as INST (un_layer_key) */
	uint16_t *ipos;		/* their stack positions, as INST */
	char *names;
	/* what the entries' nodes are (invariant 7), guarded by nlock; allocated
	 * when first asked for */
	pthread_mutex_t nlock;
	struct lnode *nodes;
	struct lfh *fh;
	/* remembered attributes (invariant 8), also guarded by nlock */
	struct lattr *attr;
	struct un_watch **w; /* one per layer dir of the stack, NW of them */
	dev_t *wdev;	     /* the devices of those layer dirs */
	size_t nw;
	struct un_watches *ws; /* whose watches W are */
	int watch_err;	       /* not 0: this listing remembers no attribute */
	bool settled;	       /* cached (invariant 3): worth remembering anything for */
	bool ahead;	       /* its first page asked for every entry (invariant 9) */
	/* cache links, guarded by the cache lock */
	struct un_listing *hnext, *lprev, *lnext;
	bool in_cache;
};

struct un_listing_cache {
	pthread_mutex_t lock;
	struct un_listing **buckets; /* by dir id: all versions of a dir share one */
	size_t nbuckets, count, bytes, limit;
	struct un_listing *lru_head, *lru_tail; /* most recently used first */
	struct un_watches *ws; /* the main table's cache's (invariant 10) */
	bool ws_own;	       /* WS is this cache's, freed with it */
};

/* ---- test hooks ---- */

void un_readdir_test_hash_bits(unsigned bits)
{
	atomic_store(&hash_bits, bits < 1 ? 1 : bits > 63 ? 63 : bits);
}

void un_readdir_test_settle_ns(long long ns)
{
	atomic_store(&settle_ns, ns);
}

/* ---- the cache ---- */

struct un_watches *un_state_watches(const struct un_state *st)
{
	return st->cache ? st->cache->ws : NULL;
}

int un_listing_cache_new(struct un_listing_cache *main, struct un_listing_cache **out)
{
	struct un_listing_cache *c = un_sys_calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->buckets = un_sys_calloc(BUCKETS_MIN, sizeof(*c->buckets));
	c->ws = main ? main->ws : un_watches_new();
	c->ws_own = !main;
	if (!c->buckets || !c->ws) {
		if (c->ws_own && c->ws)
			un_watches_free(c->ws);
		free(c->buckets);
		free(c);
		return -ENOMEM;
	}
	c->nbuckets = BUCKETS_MIN;
	c->limit = UN_LISTING_CACHE_BYTES;
	pthread_mutex_init(&c->lock, NULL);
	*out = c;
	return 0;
}

static void entry_watch_put(struct un_watches *ws, struct un_watch **ew, size_t n);

static void listing_free(struct un_listing *l)
{
	for (size_t i = 0; l->attr && i < l->count; i++)
		entry_watch_put(l->ws, l->attr[i].ew, l->ents[i].ninst);
	free(l->attr);
	free(l->ents);
	free(l->inst);
	free(l->keys);
	free(l->ipos);
	free(l->names);
	free(l->nodes);
	free(l->fh);
	for (size_t i = 0; i < l->nw; i++)
		un_watch_put(l->ws, l->w[i]);
	free(l->w);
	free(l->wdev);
	pthread_mutex_destroy(&l->nlock);
	free(l);
}

void un_listing_put(struct un_listing *l)
{
	if (l && atomic_fetch_sub(&l->ref, 1) == 1)
		listing_free(l);
}

static size_t bucket_of(const struct un_listing_cache *c, un_id dir)
{
	return (size_t)((dir * 0x9e3779b97f4a7c15ull) >> 32) & (c->nbuckets - 1);
}

static void lru_unlink(struct un_listing_cache *c, struct un_listing *l)
{
	if (l->lprev)
		l->lprev->lnext = l->lnext;
	else
		c->lru_head = l->lnext;
	if (l->lnext)
		l->lnext->lprev = l->lprev;
	else
		c->lru_tail = l->lprev;
	l->lprev = l->lnext = NULL;
}

static void lru_push(struct un_listing_cache *c, struct un_listing *l)
{
	l->lprev = NULL;
	l->lnext = c->lru_head;
	if (c->lru_head)
		c->lru_head->lprev = l;
	c->lru_head = l;
	if (!c->lru_tail)
		c->lru_tail = l;
}

/* Removes L from the cache and drops the cache's reference (invariant 1). */
static void cache_drop(struct un_listing_cache *c, struct un_listing *l)
{
	struct un_listing **pp = &c->buckets[bucket_of(c, l->dir)];

	while (*pp != l)
		pp = &(*pp)->hnext;
	*pp = l->hnext;
	l->hnext = NULL;
	lru_unlink(c, l);
	l->in_cache = false;
	c->count--;
	c->bytes -= l->bytes;
	un_listing_put(l);
}

static void cache_evict(struct un_listing_cache *c)
{
	while (c->bytes > c->limit && c->lru_tail && c->lru_tail != c->lru_head)
		cache_drop(c, c->lru_tail);
}

/* Doubles the bucket array when chains grow long; on ENOMEM keeps the old. */
static void cache_grow(struct un_listing_cache *c)
{
	struct un_listing **old = c->buckets, *l, *next;
	size_t oldn = c->nbuckets;

	if (c->count < 2 * c->nbuckets)
		return;
	c->buckets = un_sys_calloc(oldn * 2, sizeof(*c->buckets));
	if (!c->buckets) {
		c->buckets = old;
		return;
	}
	c->nbuckets = oldn * 2;
	for (size_t i = 0; i < oldn; i++)
		for (l = old[i]; l; l = next) {
			next = l->hnext;
			l->hnext = c->buckets[bucket_of(c, l->dir)];
			c->buckets[bucket_of(c, l->dir)] = l;
		}
	free(old);
}

/* A new reference to the cached listing of (DIR, VERSION), or NULL. */
static struct un_listing *cache_find(struct un_listing_cache *c, un_id dir,
				     uint64_t version)
{
	struct un_listing *l;

	pthread_mutex_lock(&c->lock);
	for (l = c->buckets[bucket_of(c, dir)]; l; l = l->hnext)
		if (l->dir == dir && l->version == version)
			break;
	if (l) {
		lru_unlink(c, l);
		lru_push(c, l);
		atomic_fetch_add(&l->ref, 1);
	}
	pthread_mutex_unlock(&c->lock);
	return l;
}

/* Caches L (taking a reference), replacing every other version of its dir. */
static void cache_insert(struct un_listing_cache *c, struct un_listing *l)
{
	struct un_listing *o, *next;

	pthread_mutex_lock(&c->lock);
	for (o = c->buckets[bucket_of(c, l->dir)]; o; o = next) {
		next = o->hnext;
		if (o->dir == l->dir)
			cache_drop(c, o);
	}
	atomic_fetch_add(&l->ref, 1);
	cache_grow(c);
	l->hnext = c->buckets[bucket_of(c, l->dir)];
	c->buckets[bucket_of(c, l->dir)] = l;
	lru_push(c, l);
	l->in_cache = true;
	c->count++;
	c->bytes += l->bytes;
	cache_evict(c);
	pthread_mutex_unlock(&c->lock);
}

/* Adds DELTA bytes to the size of L, and to the cache's while L is in it. */
static void cache_account(struct un_listing_cache *c, struct un_listing *l, size_t delta)
{
	pthread_mutex_lock(&c->lock);
	l->bytes += delta;
	if (l->in_cache) {
		c->bytes += delta;
		cache_evict(c);
	}
	pthread_mutex_unlock(&c->lock);
}

void un_listing_cache_limit(struct un_state *st, size_t bytes)
{
	pthread_mutex_lock(&st->cache->lock);
	st->cache->limit = bytes;
	cache_evict(st->cache);
	pthread_mutex_unlock(&st->cache->lock);
}

void un_listing_cache_free(struct un_listing_cache *c)
{
	while (c->lru_tail)
		cache_drop(c, c->lru_tail);
	pthread_mutex_destroy(&c->lock);
	free(c->buckets);
	if (c->ws_own)
		un_watches_free(c->ws);
	free(c);
}

bool un_listing_cached(const struct un_listing *l)
{
	return l->in_cache; /* tests only: read without the lock */
}

size_t un_listing_bytes(const struct un_listing *l)
{
	return l->bytes;
}

/* ---- versions, cookies and verifiers ---- */

static void put_le64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

static uint64_t siphash(const uint8_t key[16], const void *in, size_t len)
{
	uint8_t h[crypto_shorthash_BYTES];
	uint64_t v;

	_Static_assert(crypto_shorthash_BYTES == 8 && crypto_shorthash_KEYBYTES == 16,
		       "SipHash-2-4");
	crypto_shorthash(h, in, len, key);
	memcpy(&v, h, sizeof(v));
	return le64toh(v);
}

static uint64_t cookie_of(const struct un_state *st, const char *name, size_t len)
{
	unsigned bits = atomic_load(&hash_bits);
	uint64_t c = siphash(st->sh->key_cookie, name, len) & ((1ull << bits) - 1);

	return c < COOKIE_FIRST ? COOKIE_FIRST : c;
}

static long long ts_ns(const struct timespec *t)
{
	return (long long)t->tv_sec * 1000000000ll + t->tv_nsec;
}

/* Writes into REC what layer dir IN (its stat ST) adds to the version (see
 * the notes); returns the bytes written. */
static size_t version_part(struct un_export *ex, const struct un_inst *in,
			   const struct stat *st, uint8_t *rec)
{
	struct un_devino key = {0};
	uint8_t *p = rec;

	put_le64(p, in->layer), p += 8;
	if (ex->st->sh->lower_ids && ex->layers[in->layer].lower &&
	    !un_layer_key(ex, in->layer, st, &key) && un_devino_is_key(key)) {
		put_le64(p, key.dev), p += 8;
		put_le64(p, key.ino), p += 8;
		put_le64(p, (uint64_t)ts_ns(&st->st_mtim)), p += 8;
		return (size_t)(p - rec);
	}
	put_le64(p, st->st_dev), p += 8;
	put_le64(p, st->st_ino), p += 8;
	put_le64(p, (uint64_t)ts_ns(&st->st_mtim)), p += 8;
	put_le64(p, (uint64_t)ts_ns(&st->st_ctim)), p += 8;
	put_le64(p, (uint64_t)st->st_size), p += 8;
	return (size_t)(p - rec);
}

/* The version of DIR's stack (see the notes); *settled tells whether it may
 * be cached (invariant 3). */
static int dir_version(struct un_export *ex, const struct un_obj *dir, uint64_t *version,
		       bool *settled)
{
	uint8_t rec[8 * 8];
	crypto_generichash_state hs;
	uint8_t h[crypto_generichash_BYTES_MIN];
	struct timespec now;
	long long newest = 0;
	struct stat st;
	int err;

	crypto_generichash_init(&hs, ex->st->sh->key_version,
				sizeof(ex->st->sh->key_version), sizeof(h));
	put_le64(rec, atomic_load(&hash_bits)); /* a narrowed hash is another listing */
	crypto_generichash_update(&hs, rec, 8);
	for (size_t i = 0; i < dir->ninst; i++) {
		err = un_sys_fstat(dir->inst[i].fd, &st);
		if (err)
			return err;
		crypto_generichash_update(&hs, rec,
					  version_part(ex, &dir->inst[i], &st, rec));
		if (ts_ns(&st.st_ctim) > newest)
			newest = ts_ns(&st.st_ctim);
	}
	crypto_generichash_final(&hs, h, sizeof(h));
	memcpy(version, h, sizeof(*version));
	clock_gettime(CLOCK_REALTIME, &now);
	*settled = ts_ns(&now) - newest >= atomic_load(&settle_ns);
	return 0;
}

static uint32_t verf_mac(const struct un_state *st, un_id dir, uint32_t v32)
{
	uint8_t in[12];

	put_le64(in, dir);
	v32 = htole32(v32);
	memcpy(in + 8, &v32, sizeof(v32));
	return (uint32_t)siphash(st->sh->key_verf, in, sizeof(in));
}

static uint64_t verf_of(const struct un_state *st, un_id dir, uint64_t version)
{
	uint32_t v32 = (uint32_t)(version >> 32);

	if (v32 == 0)
		v32 = 1; /* the high half is never 0, so neither is the verifier */
	return (uint64_t)v32 << 32 | verf_mac(st, dir, v32);
}

bool un_listing_verf_valid(struct un_export *ex, un_id dir, uint64_t verf)
{
	uint32_t v32 = (uint32_t)(verf >> 32);

	return v32 != 0 && (uint32_t)verf == verf_mac(ex->st, dir, v32);
}

/* ---- building ---- */

/* One name seen in one layer dir of the stack. */
struct rec {
	const char *name; /* set once all layers are read: the pool moves */
	uint32_t off;	  /* into build.pool */
	uint16_t len;
	uint16_t pos; /* position in the directory's stack, 0 = top-most */
	bool whiteout;
	enum un_links links;
	mode_t type;
	struct un_devino di, key;
};

struct build {
	struct un_export *ex;
	const struct un_obj *dir;
	struct rec *recs;
	size_t nrecs, caprecs;
	char *pool;
	size_t poollen, poolcap;
	char *dents;
	/* the survivors, as indexes into recs, and their instances */
	size_t *surv;
	size_t nsurv;
	struct un_devino *inst, *keys;
	uint16_t *ipos;
	uint16_t *ninst;
	size_t ninst_total;
};

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
	size_t ncap = *cap ? *cap : 64;
	void *np;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	np = un_sys_realloc(*p, ncap * size);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

static int rec_add(struct build *b, size_t pos, const char *name, size_t len,
		   bool whiteout, const struct stat *st)
{
	struct rec *r;
	int err;

	err = grow((void **)&b->recs, &b->caprecs, b->nrecs + 1, sizeof(*b->recs));
	if (!err)
		err = grow((void **)&b->pool, &b->poolcap, b->poollen + len + 1, 1);
	if (err)
		return err;
	r = &b->recs[b->nrecs++];
	*r = (struct rec){.off = (uint32_t)b->poollen,
			  .len = (uint16_t)len,
			  .pos = (uint16_t)pos,
			  .whiteout = whiteout};
	if (st) {
		r->type = st->st_mode & S_IFMT;
		r->di = (struct un_devino){.dev = st->st_dev, .ino = st->st_ino};
		err = un_layer_key(b->ex, b->dir->inst[pos].layer, st, &r->key);
		if (err) {
			b->nrecs--;
			return err;
		}
		r->links = un_links_of(b->ex, b->dir->inst[pos].layer, st);
	}
	memcpy(b->pool + b->poollen, name, len);
	b->pool[b->poollen + len] = '\0';
	b->poollen += len + 1;
	return 0;
}

/* Turns entry NAME of layer dir POS into a record (or none). */
static int entry_add(struct build *b, size_t pos, const char *name)
{
	int pfd = b->dir->inst[pos].fd, seen, err;
	bool lower = b->ex->layers[b->dir->inst[pos].layer].lower;
	size_t len = strlen(name);
	struct stat st;

	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return 0;
	if (lower && un_name_private(name, len)) {
		const char *target = name + UN_OCI_WH_LEN;

		/* ".wh.NAME" hides NAME; ".wh..wh.*" are format metadata. */
		if (len == UN_OCI_WH_LEN || un_name_private(target, len - UN_OCI_WH_LEN))
			return 0;
		return rec_add(b, pos, target, len - UN_OCI_WH_LEN, true, NULL);
	}
	err = un_sys_fstatat(pfd, name, &st, 0);
	if (err == -ENOENT)
		return 0; /* removed while we read: the next version shows it */
	if (err)
		return err;
	/* An empty file's xattrs are read after its stat: a name removed in
	 * between is gone, as if getdents had not shown it. */
	seen = un_whiteout_classify(pfd, name, &st);
	if (seen == -ENOENT)
		return 0;
	if (seen < 0)
		return seen;
	return rec_add(b, pos, name, len, seen == UN_SEEN_WHITEOUT, &st);
}

static int layer_read(struct build *b, size_t pos)
{
	struct dirent64 *d;
	ssize_t n;
	int fd, err = 0;

	fd = un_sys_openat(b->dir->inst[pos].fd, ".", O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0)
		return fd;
	while (!err) {
		n = un_sys_getdents(fd, b->dents, DENTS_BUF);
		if (n <= 0) {
			err = (int)n;
			break;
		}
		for (ssize_t off = 0; off < n && !err; off += d->d_reclen) {
			d = (struct dirent64 *)(b->dents + off);
			err = entry_add(b, pos, d->d_name);
		}
	}
	un_sys_close(fd);
	return err;
}

static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	return c ? c : (alen > blen) - (alen < blen);
}

static int rec_cmp(const void *pa, const void *pb)
{
	const struct rec *a = pa, *b = pb;
	int c = name_cmp(a->name, a->len, b->name, b->len);

	if (c)
		return c;
	if (a->pos != b->pos)
		return a->pos < b->pos ? -1 : 1;
	return (int)a->whiteout - (int)b->whiteout; /* real entry first */
}

static bool rec_same_name(const struct rec *a, const struct rec *b)
{
	return a->len == b->len && !memcmp(a->name, b->name, a->len);
}

/* Is the directory of record R opaque to the layers below it? */
static int rec_opaque(struct build *b, const struct rec *r)
{
	int pfd = b->dir->inst[r->pos].fd, fd, op;
	bool lower = b->ex->layers[b->dir->inst[r->pos].layer].lower;

	fd = un_sys_open_beneath(pfd, r->name, O_PATH | O_DIRECTORY);
	if (fd == -ENOENT || fd == -ENOTDIR)
		return 1; /* changed while we read: merge no further */
	if (fd < 0)
		return fd;
	op = un_dir_opaque(fd, pfd, r->name, r->len, lower);
	un_sys_close(fd);
	return op;
}

/* Folds the run RECS[i..j) of one name; records a survivor if any. */
static int run_merge(struct build *b, size_t i, size_t j)
{
	struct un_merge m = {0};
	size_t first = b->ninst_total;
	int op;

	for (size_t k = i; k < j && !m.stop; k++) {
		const struct rec *r = &b->recs[k];
		enum un_seen seen = r->whiteout	       ? UN_SEEN_WHITEOUT
				    : S_ISDIR(r->type) ? UN_SEEN_DIR
						       : UN_SEEN_OTHER;

		if (!un_merge_step(&m, seen))
			continue;
		b->keys[b->ninst_total] = r->key;
		b->ipos[b->ninst_total] = r->pos;
		b->inst[b->ninst_total++] = r->di;
		if (m.nfound == 1)
			b->surv[b->nsurv] = k;
		/* Opaqueness matters only when a directory of this name lies
		 * below (a white-out or a non-directory stops the run anyway). */
		if (seen == UN_SEEN_DIR && k + 1 < j && !b->recs[k + 1].whiteout &&
		    S_ISDIR(b->recs[k + 1].type)) {
			op = rec_opaque(b, r);
			if (op < 0)
				return op;
			m.stop = op;
		}
	}
	if (m.nfound)
		b->ninst[b->nsurv++] = (uint16_t)(b->ninst_total - first);
	return 0;
}

static int merge(struct build *b)
{
	size_t i = 0, j;
	int err = 0;

	for (size_t k = 0; k < b->nrecs; k++)
		b->recs[k].name = b->pool + b->recs[k].off;
	if (b->nrecs) /* an empty directory has no array at all */
		qsort(b->recs, b->nrecs, sizeof(*b->recs), rec_cmp);
	b->surv = un_sys_calloc(b->nrecs + 1, sizeof(*b->surv));
	b->ninst = un_sys_calloc(b->nrecs + 1, sizeof(*b->ninst));
	b->inst = un_sys_calloc(b->nrecs + 1, sizeof(*b->inst));
	b->keys = un_sys_calloc(b->nrecs + 1, sizeof(*b->keys));
	b->ipos = un_sys_calloc(b->nrecs + 1, sizeof(*b->ipos));
	if (!b->surv || !b->ninst || !b->inst || !b->keys || !b->ipos)
		return -ENOMEM;
	while (i < b->nrecs && !err) {
		for (j = i + 1; j < b->nrecs && rec_same_name(&b->recs[i], &b->recs[j]);
		     j++)
			;
		err = run_merge(b, i, j);
		i = j;
	}
	return err;
}

static int lent_cmp(const void *pa, const void *pb)
{
	const struct lent *a = pa, *b = pb;

	if (a->d.cookie != b->d.cookie)
		return a->d.cookie < b->d.cookie ? -1 : 1;
	return name_cmp(a->d.name, a->d.namelen, b->d.name, b->d.namelen);
}

/* Copies the survivors of B into L, with "." and "..", in cookie order. */
static int listing_fill(struct build *b, struct un_listing *l)
{
	size_t poolsize = 0, off = 0, ioff = 0;
	const struct rec *r;
	struct lent *e;

	for (size_t s = 0; s < b->nsurv; s++)
		poolsize += b->recs[b->surv[s]].len + 1u;
	l->count = b->nsurv + 2;
	l->ents = un_sys_calloc(l->count, sizeof(*l->ents));
	l->inst = un_sys_calloc(b->ninst_total + 1, sizeof(*l->inst));
	l->keys = un_sys_calloc(b->ninst_total + 1, sizeof(*l->keys));
	l->ipos = un_sys_calloc(b->ninst_total + 1, sizeof(*l->ipos));
	l->names = un_sys_malloc(poolsize + 1);
	if (!l->ents || !l->inst || !l->keys || !l->ipos || !l->names)
		return -ENOMEM;
	l->ents[0].d = (struct un_dirent){COOKIE_DOT, ".", 1, S_IFDIR};
	l->ents[1].d = (struct un_dirent){COOKIE_DOTDOT, "..", 2, S_IFDIR};
	for (size_t s = 0; s < b->nsurv; s++) {
		r = &b->recs[b->surv[s]];
		e = &l->ents[2 + s];
		memcpy(l->names + off, r->name, r->len + 1u);
		e->d = (struct un_dirent){cookie_of(b->ex->st, r->name, r->len),
					  l->names + off, r->len, r->type};
		e->inst_off = (uint32_t)ioff;
		e->ninst = b->ninst[s];
		e->pos = r->pos;
		e->links = r->links;
		off += r->len + 1u;
		ioff += b->ninst[s];
	}
	memcpy(l->inst, b->inst, b->ninst_total * sizeof(*l->inst));
	memcpy(l->keys, b->keys, b->ninst_total * sizeof(*l->keys));
	memcpy(l->ipos, b->ipos, b->ninst_total * sizeof(*l->ipos));
	qsort(l->ents + 2, b->nsurv, sizeof(*l->ents), lent_cmp);
	l->bytes = sizeof(*l) + l->count * sizeof(*l->ents) +
		   b->ninst_total * (2 * sizeof(*l->inst) + sizeof(*l->ipos)) + poolsize;
	return 0;
}

static void build_free(struct build *b)
{
	free(b->recs);
	free(b->pool);
	free(b->dents);
	free(b->surv);
	free(b->ninst);
	free(b->inst);
	free(b->keys);
	free(b->ipos);
}

/* Builds the listing of DIR: read, merge, order (see the notes). */
static int listing_build(struct un_export *ex, const struct un_obj *dir,
			 struct un_listing **out)
{
	struct build b = {.ex = ex, .dir = dir};
	struct un_listing *l = NULL;
	int err = -ENOMEM;

	b.dents = un_sys_malloc(DENTS_BUF);
	if (!b.dents)
		goto out;
	err = 0;
	for (size_t pos = 0; pos < dir->ninst && !err; pos++)
		err = layer_read(&b, pos);
	if (!err)
		err = merge(&b);
	if (err)
		goto out;
	err = -ENOMEM;
	l = un_sys_calloc(1, sizeof(*l));
	if (!l)
		goto out;
	atomic_init(&l->ref, 1);
	pthread_mutex_init(&l->nlock, NULL);
	err = listing_fill(&b, l);
	if (err)
		goto out;
	*out = l;
	l = NULL;
out:
	if (l)
		listing_free(l);
	build_free(&b);
	return err;
}

/* ---- the API of readdir.c ---- */

int un_listing_get(struct un_export *ex, struct un_obj *dir, struct un_listing **out)
{
	struct un_creds saved;
	struct un_listing *l;
	uint64_t version;
	bool settled;
	int err;

	if (!S_ISDIR(dir->type))
		return -ENOTDIR;
	err = dir_version(ex, dir, &version, &settled);
	if (err)
		return err;
	l = cache_find(ex->st->cache, dir->id, version);
	un_count_listing(l != NULL);
	if (l) {
		*out = l;
		return 0;
	}
	/* Built with the engine's identity, as overlayfs reads its layers: the
	 * caller's right to read DIR is judged on the merged directory by the
	 * server, and the listing is shared by every caller. */
	un_sys_creds_override(&saved);
	err = listing_build(ex, dir, &l);
	un_sys_creds_revert(&saved);
	if (err)
		return err;
	l->dir = dir->id;
	l->version = version;
	l->verf = verf_of(ex->st, dir->id, version);
	l->settled = settled;
	if (settled)
		cache_insert(ex->st->cache, l);
	*out = l;
	return 0;
}

uint64_t un_listing_verf(const struct un_listing *l)
{
	return l->verf;
}

size_t un_listing_count(const struct un_listing *l)
{
	return l->count;
}

size_t un_listing_seek(const struct un_listing *l, uint64_t cookie)
{
	size_t lo = 0, hi = l->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (l->ents[mid].d.cookie <= cookie)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const struct un_dirent *un_listing_at(const struct un_listing *l, size_t i)
{
	return i < l->count ? &l->ents[i].d : NULL;
}

/* What the node table needs of entry E of L (a child of DIR). */
static struct un_node_obs ent_obs(const struct un_export *ex, const struct un_listing *l,
				  const struct lent *e, const struct un_obj *dir)
{
	struct un_node_obs obs = {
	    .root = ex->root_id,
	    .parent = dir->id,
	    .name = e->d.name,
	    .namelen = e->d.namelen,
	    .type = e->d.type,
	    .inst = l->keys + e->inst_off,
	    .raw = l->inst + e->inst_off,
	    .ninst = e->ninst,
	    .links = e->links,
	    .ex = ex,
	};
	const struct un_inst *in = &dir->inst[e->pos];

	if (e->links == UN_LINKS_GROUP && e->pos < dir->ninst) /* lowerid.c rule 7 */
		obs.pathnum = un_layer_pathnum(ex, in->layer, in->fd, e->d.name,
					       e->d.namelen, obs.inst[0]);
	return obs;
}

/* Allocates what L needs to remember nodes, and handles when FH (invariant
 * 7); with L's nlock held. */
static int nodes_alloc(struct un_state *st, struct un_listing *l, bool fh)
{
	size_t add = 0;
	int err = 0;

	un_assert_locked(&l->nlock);
	if (!l->nodes) {
		l->nodes = un_sys_calloc(l->count, sizeof(*l->nodes));
		if (l->nodes)
			add += l->count * sizeof(*l->nodes);
		else
			err = -ENOMEM;
	}
	if (!err && fh && !l->fh) {
		l->fh = un_sys_calloc(l->count, sizeof(*l->fh));
		if (l->fh)
			add += l->count * sizeof(*l->fh);
		else
			err = -ENOMEM;
	}
	if (add)
		cache_account(st->cache, l, add);
	return err;
}

/* A page's request for nodes: entries FROM..FROM+N-1 of L, none of them "."
 * or "..", into IDS, FILEIDS and (when not NULL) FH, UN_FH_MAX bytes apart. */
struct page_req {
	struct un_export *ex;
	struct un_obj *dir;
	struct un_listing *l;
	size_t from, n;
	un_id *ids, *fileids;
	uint8_t *fh;
};

/* Copies the nodes L remembers at EPOCH into R; the entries it does not
 * know go to MISS (their count is returned).  With L's nlock held. */
static size_t nodes_known(const struct page_req *r, uint64_t epoch, size_t *miss)
{
	size_t m = 0;

	un_assert_locked(&r->l->nlock);
	for (size_t k = 0; k < r->n; k++) {
		const struct lnode *nd = r->l->nodes ? &r->l->nodes[r->from + k] : NULL;

		if (nd && nd->id != UN_ID_NONE && nd->epoch == epoch) {
			r->ids[k] = nd->id;
			r->fileids[k] = nd->fileid;
		} else {
			miss[m++] = k;
		}
	}
	return m;
}

/* Asks the table for the M entries MISS of R (one transaction, or two). */
static int nodes_assign(const struct page_req *r, const size_t *miss, size_t m,
			un_id *ids, un_id *fileids)
{
	struct un_node_obs *obs = un_sys_calloc(m, sizeof(*obs));
	int err;

	if (!obs)
		return -ENOMEM;
	for (size_t j = 0; j < m; j++)
		obs[j] = ent_obs(r->ex, r->l, &r->l->ents[r->from + miss[j]], r->dir);
	err = un_node_assign(r->ex->st, obs, m, ids, fileids);
	free(obs);
	return err;
}

/* Stores the answers for the misses, read at EPOCH, into L and R (a node
 * read at a later epoch stays); with L's nlock held. */
static void nodes_store(const struct page_req *r, uint64_t epoch, const size_t *miss,
			size_t m, const un_id *ids, const un_id *fileids)
{
	un_assert_locked(&r->l->nlock);
	for (size_t j = 0; j < m; j++) {
		struct lnode *nd = r->l->nodes ? &r->l->nodes[r->from + miss[j]] : NULL;

		r->ids[miss[j]] = ids[j];
		r->fileids[miss[j]] = fileids[j];
		if (nd && (nd->id == UN_ID_NONE || nd->epoch <= epoch))
			*nd = (struct lnode){ids[j], fileids[j], epoch};
	}
}

/* Fills R's handles from its ids, making those L does not hold yet (all
 * of them when L remembers none); with L's nlock held. */
static void nodes_handles(const struct page_req *r)
{
	un_assert_locked(&r->l->nlock);
	for (size_t k = 0; k < r->n; k++) {
		struct lfh *h = r->l->fh ? &r->l->fh[r->from + k] : NULL;
		uint8_t fh[UN_FH_MAX];

		if (!h) {
			un_handle_encode(r->ex, r->ids[k], r->fh + k * UN_FH_MAX);
			continue;
		}
		if (h->id != r->ids[k]) {
			h->id = r->ids[k];
			un_handle_encode(r->ex, h->id, fh);
			memcpy(h->fh, fh, UN_FH_LEN);
		}
		memcpy(r->fh + k * UN_FH_MAX, h->fh, UN_FH_LEN);
	}
}

/* qsort_r's argument for ahead_cmp: the listing whose entries it orders. */
struct ahead_cmp_ctx {
	const struct un_listing *l;
};

static int ahead_cmp(const void *pa, const void *pb, void *arg)
{
	const struct un_listing *l = ((const struct ahead_cmp_ctx *)arg)->l;
	const struct un_dirent *a = &l->ents[*(const size_t *)pa].d,
			       *b = &l->ents[*(const size_t *)pb].d;

	return name_cmp(a->name, a->namelen, b->name, b->namelen);
}

/* The entries of L (past "." and "..") it does not know at EPOCH, in the
 * table's key order (the names database sorts a directory's names as
 * name_cmp does); their count, or -ENOMEM.  With L's nlock held. */
static ssize_t ahead_misses(const struct un_listing *l, uint64_t epoch, size_t **out)
{
	struct ahead_cmp_ctx ctx = {l};
	size_t *idx = un_sys_calloc(l->count, sizeof(*idx)), m = 0;

	un_assert_locked(&((struct un_listing *)l)->nlock);
	if (!idx)
		return -ENOMEM;
	for (size_t i = 2; i < l->count; i++)
		if (l->nodes[i].id == UN_ID_NONE || l->nodes[i].epoch != epoch)
			idx[m++] = i;
	qsort_r(idx, m, sizeof(*idx), ahead_cmp, &ctx);
	*out = idx;
	return (ssize_t)m;
}

/* Asks the table for every entry of R's listing that it does not know at
 * EPOCH, in one read and at most one write transaction (invariant 9), and
 * remembers the answers. */
static int nodes_ahead(const struct page_req *r, uint64_t epoch)
{
	struct un_listing *l = r->l;
	struct un_node_obs *obs = NULL;
	un_id *ids = NULL;
	size_t *idx = NULL, m;
	ssize_t got;
	int err = -ENOMEM;

	pthread_mutex_lock(&l->nlock);
	got = ahead_misses(l, epoch, &idx);
	pthread_mutex_unlock(&l->nlock);
	if (got < 0)
		goto out;
	m = (size_t)got;
	obs = un_sys_calloc(m ? m : 1, sizeof(*obs));
	ids = un_sys_calloc(m ? 2 * m : 1, sizeof(*ids));
	if (!obs || !ids)
		goto out;
	for (size_t j = 0; j < m; j++)
		obs[j] = ent_obs(r->ex, l, &l->ents[idx[j]], r->dir);
	err = m ? un_node_assign(r->ex->st, obs, m, ids, ids + m) : 0;
	if (err)
		goto out;
	pthread_mutex_lock(&l->nlock);
	for (size_t j = 0; j < m; j++) {
		struct lnode *nd = &l->nodes[idx[j]];

		if (nd->id == UN_ID_NONE || nd->epoch <= epoch)
			*nd = (struct lnode){ids[j], ids[m + j], epoch};
	}
	pthread_mutex_unlock(&l->nlock);
out:
	free(idx);
	free(obs);
	free(ids);
	return err;
}

/* Whether R, a page of a listing that remembers nodes, is the first page
 * of a whole listing that should ask for every entry at once (invariant
 * 9); claims that for R.  With L's nlock held. */
static bool ahead_claim(const struct page_req *r)
{
	un_assert_locked(&r->l->nlock);
	if (!r->l->settled || !r->l->nodes || r->l->ahead || r->from != 2)
		return false;
	r->l->ahead = true;
	return true;
}

/* The nodes of R: what L remembers, the rest from the table (invariant 7).
 * A listing built for one call alone (not settled) remembers nothing. */
static int page_nodes(const struct page_req *r)
{
	struct un_state *st = r->ex->st;
	un_id *ids = un_sys_calloc(2 * r->n, sizeof(*ids)), *fileids = ids + r->n;
	size_t *miss = un_sys_calloc(r->n, sizeof(*miss)), m;
	uint64_t epoch;
	bool ahead;
	int err = -ENOMEM;

	if (!ids || !miss)
		goto out;
	pthread_mutex_lock(&r->l->nlock);
	err = r->l->settled ? nodes_alloc(st, r->l, r->fh != NULL) : 0;
	ahead = !err && ahead_claim(r);
	epoch = atomic_load(&st->node_epoch); /* before the table is read */
	pthread_mutex_unlock(&r->l->nlock);
	/* A failure here leaves the page to ask for its own entries, and to
	 * report what the table says then. */
	if (ahead)
		(void)nodes_ahead(r, epoch);
	pthread_mutex_lock(&r->l->nlock);
	m = err ? 0 : nodes_known(r, epoch, miss);
	pthread_mutex_unlock(&r->l->nlock);
	if (!err && m)
		err = nodes_assign(r, miss, m, ids, fileids);
	if (err)
		goto out;
	pthread_mutex_lock(&r->l->nlock);
	nodes_store(r, epoch, miss, m, ids, fileids);
	if (r->fh)
		nodes_handles(r);
	pthread_mutex_unlock(&r->l->nlock);
out:
	free(ids);
	free(miss);
	return err;
}

/* The node of "." (I 0) or ".." (I 1) of DIR, whatever the table says. */
static void dot_node(struct un_export *ex, struct un_obj *dir, size_t i, un_id *id,
		     un_id *fileid, uint8_t *fh)
{
	*id = *fileid = i == 0 ? dir->id : dir->parent;
	if (fh)
		un_handle_encode(ex, *id, fh);
}

int un_listing_handles(struct un_export *ex, struct un_obj *dir,
		       const struct un_listing *l, size_t from, size_t n, un_id *ids,
		       un_id *fileids, uint8_t *fh)
{
	/* the listing's node cache changes (invariant 7), its entries never */
	struct page_req r = {.ex = ex, .dir = dir, .l = (struct un_listing *)l};
	size_t skip;
	int err = -EINVAL;

	if (l->dir != dir->id || from > l->count || n > l->count - from)
		return err;
	/* "." and ".." are entries 0 and 1 and have no record of their own;
	 * directories report their id as fileid. */
	skip = from < 2 ? (n < 2 - from ? n : 2 - from) : 0;
	r.from = from + skip;
	r.n = n - skip;
	r.ids = ids + skip;
	r.fileids = fileids + skip;
	r.fh = fh ? fh + skip * UN_FH_MAX : NULL;
	err = r.n ? page_nodes(&r) : 0;
	for (size_t i = from; !err && i < from + skip; i++)
		dot_node(ex, dir, i, &ids[i - from], &fileids[i - from],
			 fh ? fh + (i - from) * UN_FH_MAX : NULL);
	return err ? err : fh ? UN_FH_LEN : 0;
}

int un_listing_nodes(struct un_export *ex, struct un_obj *dir, const struct un_listing *l,
		     size_t from, size_t n, un_id *ids, un_id *fileids)
{
	/* Scratch for both: the caller's arrays change only on success. */
	un_id *tmp = un_sys_calloc(n ? 2 * n : 1, sizeof(*tmp));
	int err;

	if (!tmp)
		return -ENOMEM;
	err = un_listing_handles(ex, dir, l, from, n, tmp, tmp + n, NULL);
	if (err >= 0 && ids)
		memcpy(ids, tmp, n * sizeof(*ids));
	if (err >= 0 && fileids)
		memcpy(fileids, tmp + n, n * sizeof(*fileids));
	free(tmp);
	return err < 0 ? err : 0;
}

int un_listing_ids(struct un_export *ex, struct un_obj *dir, const struct un_listing *l,
		   size_t from, size_t n, un_id *ids)
{
	return un_listing_nodes(ex, dir, l, from, n, ids, NULL);
}

/* ---- remembered attributes (invariant 8) ---- */

/* The state of L's watches: it changes whenever one of them reports an
 * event, and is 0 (trusted never) when one is dead.  With WS's lock held. */
static uint64_t watches_token(const struct un_state *st, const struct un_listing *l)
{
	un_assert_locked(&l->ws->lock);
	/* Changes through the union that reach no watch of L (a LINK made in
	 * another directory raises the link count) all write the node table. */
	uint64_t t = atomic_load(&st->node_epoch) + l->ws->lost + 1;

	for (size_t i = 0; i < l->nw; i++) {
		if (l->w[i]->dead)
			return 0;
		t += l->w[i]->gen;
	}
	return t;
}

/* Watches every layer dir of DIR for L, once; with L's nlock held.  On
 * failure L remembers no attribute (L->watch_err). */
static void attr_watch(struct un_state *st, struct un_listing *l,
		       const struct un_obj *dir)
{
	struct un_watches *ws = st->cache->ws;
	struct stat sb;
	long type;
	int err, wd;

	un_assert_locked(&l->nlock);
	if (l->w || l->watch_err)
		return;
	pthread_mutex_lock(&ws->lock);
	err = un_watches_open(ws);
	pthread_mutex_unlock(&ws->lock);
	l->w = err ? NULL : un_sys_calloc(dir->ninst, sizeof(*l->w));
	l->wdev = err ? NULL : un_sys_calloc(dir->ninst, sizeof(*l->wdev));
	if (!err && (!l->w || !l->wdev))
		err = -ENOMEM;
	l->ws = ws;
	for (size_t i = 0; !err && i < dir->ninst; i++) {
		err = un_sys_fstype(dir->inst[i].fd, &type);
		if (!err && !un_fs_local(type))
			err = -EOPNOTSUPP;
		if (!err)
			err = un_sys_fstat(dir->inst[i].fd, &sb);
		if (!err)
			l->wdev[i] = sb.st_dev;
		pthread_mutex_lock(&ws->lock);
		wd = err ? err
			 : un_sys_inotify_watch(ws->fd, dir->inst[i].fd, UN_WATCH_MASK);
		err = wd < 0 ? wd : 0;
		if (!err && !(l->w[l->nw] = un_watch_get(ws, wd)))
			err = -ENOMEM;
		if (!err)
			l->nw++;
		pthread_mutex_unlock(&ws->lock);
	}
	l->watch_err = err;
}

/* Drops the watches EW (N of them, NULL: none) of an entry's parts. */
static void entry_watch_put(struct un_watches *ws, struct un_watch **ew, size_t n)
{
	if (!ew)
		return;
	for (size_t k = 0; k < n; k++)
		un_watch_put(ws, ew[k]);
	pthread_mutex_lock(&ws->lock);
	ws->nentry -= n;
	pthread_mutex_unlock(&ws->lock);
	free(ew);
}

/* The state of the watches EW of an entry's N parts: it changes whenever
 * one of them reports an event about a name in the part (which moves its
 * times), and is 0 (trusted never) when one is dead: a change of the part's
 * own attributes, or its atime, reaches the listing's watch of its parent
 * by its name.  With WS's lock held. */
static uint64_t entry_token(struct un_watches *ws, struct un_watch *const *ew, size_t n)
{
	uint64_t t = ws->lost + 1;

	un_assert_locked(&ws->lock);
	for (size_t k = 0; k < n; k++) {
		if (ew[k]->dead)
			return 0;
		t += ew[k]->gen;
	}
	return t;
}

/* entry_token of LA's watches (E's parts) as they stand now. */
static uint64_t entry_token_now(const struct un_listing *l, const struct lent *e,
				const struct lattr *la)
{
	uint64_t t;

	pthread_mutex_lock(&l->ws->lock);
	t = entry_token(l->ws, la->ew, e->ninst);
	pthread_mutex_unlock(&l->ws->lock);
	return t;
}

/* Puts a watch on each part of directory entry I of L in DIR (invariant
 * 8), before any stat of it, when every part is on its layer dir's
 * (local) filesystem and the server's bound on such watches allows; else
 * LA says it is not watched, and the entry is stat'ed on every call.  With
 * L's nlock held. */
static void attr_entry_watch(struct un_state *st, struct un_listing *l,
			     const struct un_obj *dir, size_t i, struct lattr *la)
{
	const struct lent *e = &l->ents[i];
	struct un_watches *ws = l->ws;
	struct un_watch **ew = un_sys_calloc(e->ninst, sizeof(*ew));
	size_t n = 0, pos;
	int wd;

	un_assert_locked(&l->nlock);
	la->unwatched = true;
	for (size_t k = 0; ew && k < e->ninst; k++) {
		pos = l->ipos[e->inst_off + k];
		if (pos >= l->nw || l->inst[e->inst_off + k].dev != l->wdev[pos])
			goto out; /* a mount inside the layer: maybe not local */
	}
	pthread_mutex_lock(&ws->lock);
	if (ws->nentry + e->ninst <= ws->entry_max)
		for (; n < e->ninst; n++) {
			pos = l->ipos[e->inst_off + n];
			wd = un_sys_inotify_watch_at(ws->fd, dir->inst[pos].fd, e->d.name,
						     UN_WATCH_MASK);
			if (wd < 0 || !(ew[n] = un_watch_get(ws, wd)))
				break;
		}
	ws->nentry += n;
	pthread_mutex_unlock(&ws->lock);
	if (n < e->ninst) {
		entry_watch_put(ws, ew, n);
		return;
	}
	la->ew = ew;
	la->unwatched = false;
	cache_account(st->cache, l, e->ninst * sizeof(*ew));
	return;
out:
	free(ew);
}

static long long mono_ns(void)
{
	return (long long)un_now_ns();
}

/* What un_getattr (object.c) gives for entry E of L, whose fileid is ID,
 * from stat ST of its top-most instance. */
static void attr_of(const struct un_export *ex, const struct lent *e,
		    const struct stat *st, un_id id, struct un_attr *out)
{
	*out = (struct un_attr){
	    .mode = st->st_mode,
	    .nlink = S_ISDIR(st->st_mode) && e->ninst > 1 ? 1 : (uint32_t)st->st_nlink,
	    .uid = st->st_uid,
	    .gid = st->st_gid,
	    .size = (uint64_t)st->st_size,
	    .used = (uint64_t)st->st_blocks * 512,
	    .rdev_major = major(st->st_rdev),
	    .rdev_minor = minor(st->st_rdev),
	    .fsid = ex->id,
	    .fileid = id,
	    .atime = st->st_atim,
	    .mtime = st->st_mtim,
	    .ctime = st->st_ctim,
	};
}

/* Stats instance K (0: the top-most) of entry I of L in DIR: 0 or -ESTALE
 * when the name is no longer the instance the listing saw. */
static int attr_stat(const struct un_listing *l, const struct un_obj *dir, size_t i,
		     size_t k, struct stat *st)
{
	const struct lent *e = &l->ents[i];
	const struct un_devino *di = &l->inst[e->inst_off + k];
	uint16_t pos = l->ipos[e->inst_off + k];
	int err;

	if (pos >= dir->ninst)
		return -EINVAL;
	err = un_sys_fstatat(dir->inst[pos].fd, e->d.name, st, 0);
	if (err)
		return err == -ENOENT ? -ESTALE : err;
	if (st->st_dev != di->dev || st->st_ino != di->ino)
		return -ESTALE; /* the name changed since the build */
	return 0;
}

/* The times of merged directory entry I of L, whose top-most instance's
 * stat is TOP, into OUT, as un_getattr gives them (object.c rule 6). */
static int attr_merged_times(const struct un_listing *l, const struct un_obj *dir,
			     size_t i, const struct stat *top, struct un_attr *out)
{
	struct un_dir_times t = {0};
	struct stat st;
	int err;

	un_dir_times_add_stat(&t, top);
	for (size_t k = 1; k < l->ents[i].ninst; k++) {
		err = attr_stat(l, dir, i, k, &st);
		if (err)
			return err;
		un_dir_times_add_stat(&t, &st);
	}
	un_dir_times_put(&t, out);
	return 0;
}

/* May the attributes of ST be remembered (LA: the entry's; ETOKEN: its
 * parts' watches read before the stat)?  A directory's change inside it
 * reaches its own watchers, not its parent's: only with a watch on each of
 * its parts; a file with several links may change through a name in
 * another directory. */
static bool attr_keepable(const struct stat *st, const struct lattr *la, uint64_t etoken)
{
	if (S_ISDIR(st->st_mode))
		return la->ew && etoken;
	return st->st_nlink == 1;
}

/* Fills entry I of L (fileid ID) into OUT: remembered if its stat was made
 * at TOKEN (not 0) since NOW - ATTR_TTL_NS, else a stat, remembered when
 * that is safe.  With L's nlock held. */
static int attr_one(const struct un_export *ex, struct un_listing *l,
		    const struct un_obj *dir, size_t i, un_id id, uint64_t token,
		    long long now, struct un_attr *out)
{
	struct lattr *la = l->attr ? &l->attr[i] : NULL;
	const struct lent *e = &l->ents[i];
	uint64_t etoken = 0;
	struct stat st;
	int err;

	un_assert_locked(&l->nlock);
	if (la && token && la->token == token && la->at && now - la->at < ATTR_TTL_NS &&
	    (!la->ew || entry_token_now(l, e, la) == la->etoken)) {
		*out = la->a;
		out->fileid = id;
		return 0;
	}
	if (la && token && S_ISDIR(e->d.type) && !la->ew && !la->unwatched)
		attr_entry_watch(ex->st, l, dir, i, la);
	if (la && la->ew) /* before the stats: a change after them moves it */
		etoken = entry_token_now(l, e, la);
	err = attr_stat(l, dir, i, 0, &st);
	if (err)
		return err;
	attr_of(ex, &l->ents[i], &st, id, out);
	if (S_ISDIR(st.st_mode) && l->ents[i].ninst > 1) {
		err = attr_merged_times(l, dir, i, &st, out);
		if (err)
			return err;
	}
	if (la && token && attr_keepable(&st, la, etoken)) {
		la->a = *out;
		la->token = token;
		la->at = now;
		la->etoken = etoken;
	}
	return 0;
}

/* Makes L ready to remember attributes: its watches and its array; with L's
 * nlock held.  False when it will not remember any. */
static bool attr_ready(struct un_export *ex, struct un_listing *l,
		       const struct un_obj *dir)
{
	un_assert_locked(&l->nlock);
	if (!l->settled)
		return false; /* built for this call alone: not worth a watch */
	attr_watch(ex->st, l, dir);
	if (l->watch_err)
		return false;
	if (!l->attr) {
		l->attr = un_sys_calloc(l->count, sizeof(*l->attr));
		if (!l->attr)
			return false;
		cache_account(ex->st->cache, l, l->count * sizeof(*l->attr));
	}
	return true;
}

int un_listing_attrs(struct un_export *ex, struct un_obj *dir,
		     const struct un_listing *cl, size_t from, size_t n,
		     const un_id *fileids, struct un_attr *out, int *errs)
{
	struct un_listing *l = (struct un_listing *)cl; /* its memory changes */
	uint64_t token = 0;
	long long now;

	if (l->dir != dir->id || from < 2 || from > l->count || n > l->count - from)
		return -EINVAL;
	pthread_mutex_lock(&l->nlock);
	if (attr_ready(ex, l, dir)) {
		/* The token and the clock are read before any stat: a change
		 * after them moves the token (or ages the entry) again. */
		pthread_mutex_lock(&l->ws->lock);
		un_watches_drain(l->ws);
		token = watches_token(ex->st, l);
		pthread_mutex_unlock(&l->ws->lock);
	}
	now = mono_ns();
	for (size_t k = 0; k < n; k++)
		errs[k] = attr_one(ex, l, dir, from + k, fileids[k], token, now, &out[k]);
	pthread_mutex_unlock(&l->nlock);
	return 0;
}

/* Must give what un_getattr (object.c) gives for the node: the unit test
 * test_listing_attr compares the two for every entry. */
int un_listing_attr(struct un_export *ex, struct un_obj *dir, const struct un_listing *l,
		    size_t i, un_id id, struct un_attr *out)
{
	struct un_attr a;
	int err, rc;

	if (i < 2)
		return -EINVAL;
	rc = un_listing_attrs(ex, dir, l, i, 1, &id, &a, &err);
	if (!rc && !err)
		*out = a;
	return rc ? rc : err;
}
