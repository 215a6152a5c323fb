/* SPDX-License-Identifier: Apache-2.0 */
/* unions.c - client unions: opened on demand, pinned by the calls that use
 * them, released when idle or over the cap.
 *
 * A per-client export (its upperdir or a lowerdir holds %a or %h) is a
 * template; each client's union is an instance of it over the upper, work
 * and lower dirs the template gives that client.  An open instance holds 2 * layers + 2
 * descriptors (every layer root, the work dir and its temp dir, the shared
 * root object's copies), so clients that come and go (DHCP churn, a rule
 * that admits a v6 prefix) would use up the process's descriptors if
 * instances lived as long as the server.  The rules:
 *
 *  1. One lock, s->unions.lock, guards every template's instance list, the
 *     LRU list, and each instance's state, pins, mounted flag and last use.
 *     No union is opened or closed under it (instance_open, instance_release
 *     run outside it), so a slow open stalls only its own client.
 *  2. A call uses an instance only while it holds a pin on it (pin_locked,
 *     recorded in req->pins), taken under the lock where it was found and
 *     dropped by srv_unions_unpin once the reply is encoded (rpc_process).
 *     Only an instance without pins is released.
 *  3. One union per upper dir: an instance is in its template's list from
 *     before it opens (OPENING) until after it is closed (CLOSING), and a
 *     caller that meets its key or id in either state waits on
 *     unions.changed.  Two unions over one work dir would empty each other's
 *     temps (un_work_open).
 *  4. A released union reopens with the same export id (client_id_path, the
 *     id is known before the union opens) and so with the same handles: its
 *     node ids live in the main node table, or in the union's own table
 *     in its work dir (rule 14), never in the union's memory.
 *  5. At most unions.cap instances are open, unless every open one is
 *     pinned: a call then opens one more (at most one per worker) and the
 *     reaper trims back to the cap once the pins are gone (reap_once).
 *     The cap leaves the connection limits their descriptors (listen.c,
 *     conn_room, reserves the same eighth of the limit).
 *  6. The reaper also releases an instance its client unmounted (UMNT,
 *     UMNTALL) that served no call for unions.idle seconds.  It holds the
 *     exports read lock while it works, so no reload frees a template under
 *     it; srv_unions_drop_template waits for an instance in transit instead.
 *  7. No dir is made for a client before its MNT: a handle reopens a union
 *     only when its upper dir is there (instance_get, CREATE false), and an
 *     MNT that fails after making the dirs removes them (srv_export_abandon).
 *  8. A lowerdir may be per client too: a read-only layer of the client's
 *     own, placed where it is listed.  Its stack is looked at when its union
 *     opens (client_stack): a per-client lower that is not a directory then
 *     is left out, with one log line, until the union next opens (a
 *     release, or a reload: srv_unions_recheck).  The reload releases the
 *     instances no call pins and marks the others outdated (recheck_take;
 *     one being opened too, which may have looked before the change): an
 *     outdated one is RENEWING, so that a call that comes later waits as
 *     for a reset instead of getting the old stack, and the unpin that
 *     leaves it no pins releases it (unpin_locked, under the call's
 *     exports read lock: rule 6), so that the next call opens it over the
 *     stack there is now.  A call that pins another union already pins an
 *     outdated one as it is instead of waiting (must_wait: two such calls
 *     would wait for each other).  Whether the layer is there never
 *     enters the export id: with a per-client upper the id stays the upper
 *     dir's, and without one it is the export path's and the client's names
 *     that its lowers use ("a=ADDR", "h=NAME": client_key_of), so a new
 *     layer, or a dated one that replaces it, leaves the client's handles
 *     valid.  Released unions without an upper are found on disk by their
 *     per-client lowers (template_read_ids).
 *  9. A reset (srv_unions_reset, `union-nfsctl reset CLIENT`) marks the
 *     client's instance RENEWING (renew_take: out of the LRU, still listed,
 *     so callers wait as for OPENING and CLOSING), waits until no call pins
 *     it, forgets the nodes of the objects the upper made itself
 *     (un_export_forget_upper: their handles go stale, those of lower
 *     objects stay), closes the union, moves the upper into the work dir
 *     and empties that (dirs_empty), makes both dirs again and takes the
 *     instance out: the next call opens it over the lowers (instance_renew).
 *     Only dirs that the templates give that client are emptied, reached
 *     through no symlink below the templates' fixed part and never crossing
 *     into another filesystem (dir_removable, tree_empty).  A call that
 *     already pins an instance never waits for its state (pinned_by): the
 *     reset waits for that call instead.
 * 10. An upper or work dir removed behind the server's back (rm -rf while
 *     serving) leaves the union writing into unlinked dirs.  The first pin
 *     of a client union by a call that may write (srv_req.writes: MNT, and
 *     the NFS procedures that change something) looks at the dirs' link
 *     counts (un_export_vanished, two fstat calls; reads pay nothing: a
 *     vanished upper holds no name to read); a vanished one is logged once
 *     and renewed as by a reset, without emptying (instance_vanished), and
 *     the call opens it afresh.  A fixed export's dirs are the
 *     configuration's: it answers NFS3ERR_ROFS from then on, with one log
 *     line (srv_export_gone).
 * 11. A reload that changes only a template's lowers keeps its open client
 *     unions (srv_unions_restack): each is pinned while its successor opens
 *     over its upper and work dirs (so no release or renewal closes it
 *     meanwhile), and unpinned before the exports write lock is asked for
 *     (a reset waits for pins while it holds the read lock).  Under the
 *     write lock no call runs and every instance is OPEN: one whose union
 *     is still the one its successor was made from (by its open serial,
 *     ux_serial) gets it; any other (opened, renewed or reset meanwhile,
 *     over the old stack) is taken out then and freed after the lock, and
 *     reopens at its next call.  A union that gets its successor has the
 *     layers it left retired there, under the lock (un_stack_retire), and
 *     its stack record written after it (srv_unions_restack_commit): the
 *     commit is taken out of the union, which may be released by then.
 *     The successor of one taken out is closed with its commit undone;
 *     its reopen over the new stack records and retires as any open.
 * 12. Memory: the open instances may hold unions.memory bytes together
 *     (client-unions-memory; default an eighth of the machine's memory,
 *     or of the cgroup's limit when that is lower: machine_memory), so
 *     the cap is at most that over UNION_MEM_MIN as well as what the
 *     descriptors allow, and each union gets an equal share of it
 *     (unions.share, its un_export_cfg.mem_bytes), past which its resolve
 *     cache stops growing (union/rcache.c rule 13).  An open union holds
 *     15 KiB or so to begin with: a mapping of three pages (itself and its
 *     cache's first buckets), its first entries and this registry's record
 *     (srv_union_mem counts them; docs/client-unions.md has the figures).
 *     A union's memory goes back when it is released: its mapping to the
 *     system, the rest to the allocator, and the reaper then hands the
 *     allocator's free pages back to the system (reap_trim: a second
 *     after a release, at most once a second, and woken every TRIM_BATCH
 *     releases): a churn of clients leaves holes in the heaps of the
 *     allocator's arenas that would otherwise stay resident for good.
 * 13. One server at a time serves a writable union (union/workdir.c rule
 *     3: an OFD lock on its work dir): an open that finds it held by
 *     another server (a gateway behind the same floating address, over
 *     shared storage) fails with -EAGAIN, logs the holder once in a while,
 *     and leaves req->union_err so that the call is answered
 *     NFS3ERR_JUKEBOX (the client retries) instead of STALE; the next call
 *     after the holder released the union or died opens it.
 * 14. A client union moves with its dirs (docs/gateways.md, part 2; so does
 *     a fixed upper: table.c's export_cfg gives it own_table alike): on a
 *     server given a key file (and layer indexes, so that lower objects
 *     get the ids every gateway computes), a client union keeps its nodes
 *     in a node table of its own in its work dir (un_export_cfg.own_table,
 *     union/workdir.c rule 4), opened once the union holds its work dir's
 *     lock and closed by un_export_close, so with every release (rules 5,
 *     6, 8, 10) and before the main state (srv_close frees the templates
 *     first); a reset's dirs_empty removes it with the work dir's contents
 *     (rule 9), its new table handing out none of the old one's ids
 *     (union/state.c rule 7).  A handle names its union by export id and
 *     is resolved through that union (srv_export_for_handle), which is
 *     opened on the table that holds its nodes, so no handle of it meets
 *     the main table's ids.  A union served from the main table before
 *     (its root is there: a server given a key file since) stays there,
 *     so its handles keep working; without a key file every union stays
 *     in the main table (a table costs a syncer thread, a map and a
 *     listing cache, and its handles could not move anyway), except one
 *     whose work dir already holds a table.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <malloc.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "exports.h"

#define UNIONS_MIN	     16		  /* default cap, at least */
#define UNION_MEM_MIN	     (256u << 10) /* the least share a default cap gives */
#define MEM_PART	     8	 /* of the machine's memory, by default (rule 12) */
#define TRIM_BATCH	     64	 /* releases that wake the reaper to trim */
#define REAP_PERIOD_MAX_S    15	 /* the reaper looks at least this often */
#define CLIENT_ID_PATH_SLACK 32	 /* " (client upper )" around the dir */
#define RESET_DEPTH_MAX	     512 /* a reset removes no deeper (tree_empty) */

/* Numbers each open of a client union, never twice (rule 11). */
static _Atomic uint64_t ux_serials;

/* ---- what a template gives a client ---- */

/* A client as a template sees it: its names, the key of its union (its upper
 * dir when the upper is per client; else the names its per-client lowers
 * use, "a=ADDR h=NAME", rule 8), and its upper and work dirs ("" when the
 * union has none). */
struct client_dirs {
	char addr[INET6_ADDRSTRLEN];
	char host[NI_MAXHOST];
	bool named; /* host holds its confirmed name */
	char key[PATH_MAX];
	char upper[PATH_MAX];
	char work[PATH_MAX];
};

/* True when one of T's dirs uses %V. */
static bool template_uses(const struct srv_export *t, char v)
{
	const struct srv_export_opts *c = t->conf;

	if (srv_template_uses(c->upperdir, v) || srv_template_uses(c->workdir, v))
		return true;
	for (size_t k = 0; k < c->nlower; k++)
		if (srv_template_uses(c->lowerdirs[k], v))
			return true;
	return false;
}

static bool upper_per_client(const struct srv_export *t)
{
	return srv_is_template(t->conf->upperdir);
}

/* The key of T's union for a client of address ADDR and host name HOST (NULL:
 * none) into KEY; false when a name it needs is missing or it does not fit. */
static bool client_key_of(const struct srv_export *t, const char *addr, const char *host,
			  char *key, size_t len)
{
	bool a = false, h = false;
	int n;

	if (upper_per_client(t))
		return srv_template_expand(t->conf->upperdir, addr, host, key, len);
	for (size_t k = 0; k < t->conf->nlower; k++) {
		a = a || srv_template_uses(t->conf->lowerdirs[k], 'a');
		h = h || srv_template_uses(t->conf->lowerdirs[k], 'h');
	}
	if (h && (!host || !*host))
		return false;
	n = snprintf(key, len, "%s%s%s%s%s", a ? "a=" : "", a ? addr : "",
		     a && h ? " " : "", h ? "h=" : "", h ? host : "");
	return n > 0 && (size_t)n < len;
}

/* The upper and work dirs template T gives the client of D->addr and HOST
 * (NULL: unnamed), into D; none without a per-client upper. */
static bool client_dirs_expand(const struct srv_export *t, const char *host,
			       struct client_dirs *d)
{
	if (!upper_per_client(t))
		return true;
	return srv_template_expand(t->conf->upperdir, d->addr, host, d->upper,
				   sizeof(d->upper)) &&
	       srv_template_expand(t->conf->workdir, d->addr, host, d->work,
				   sizeof(d->work));
}

/* What template T gives the caller of RQ, into D. */
static bool client_dirs(struct srv *s, const struct srv_export *t,
			const struct rpc_req *rq, struct client_dirs *d)
{
	const struct sockaddr_storage *peer = rq->peer;
	const char *host;

	snprintf(d->addr, sizeof(d->addr), "%s", rq->peer_addr ? rq->peer_addr : "-");
	d->named = template_uses(t, 'h') &&
		   srv_peer_name(s->names, peer, d->host, sizeof(d->host));
	host = d->named ? d->host : NULL;
	d->upper[0] = d->work[0] = '\0';
	if (!client_key_of(t, d->addr, host, d->key, sizeof(d->key)))
		return false;
	return client_dirs_expand(t, host, d);
}

/* What the export id of template T's union of KEY hashes: one id per export
 * path and upper dir, so a client's handles name its own union and no other;
 * without a per-client upper, per export path and client names (rule 8). */
static void client_id_path(const struct srv_export *t, const char *key, char *out,
			   size_t len)
{
	snprintf(out, len, "%s (client %s%s)", t->conf->fsid ? t->conf->fsid : t->path,
		 upper_per_client(t) ? "upper " : "", key);
}

static uint32_t client_id(const struct srv_export *t, const char *key)
{
	char id_path[MNTPATHLEN + PATH_MAX + CLIENT_ID_PATH_SLACK];

	client_id_path(t, key, id_path, sizeof(id_path));
	return un_export_id_of(id_path);
}

/* How logs name T's union of KEY: "over upper DIR" or "of client NAMES". */
static const char *key_phrase(const struct srv_export *t)
{
	return upper_per_client(t) ? "over upper" : "of client";
}

/* The layer stack T gives the client of D: the lowers with each per-client
 * one expanded, and left out when it is not a directory (rule 8). */
struct client_stack {
	const char **dirs;
	size_t n;
	char *buf;		/* the expanded dirs, PATH_MAX each */
	char missing[PATH_MAX]; /* the first one left out, for the log */
	size_t nmissing;
};

static void client_stack_free(struct client_stack *cs)
{
	free(cs->dirs);
	free(cs->buf);
	cs->dirs = NULL;
	cs->buf = NULL;
}

/* True when T's per-client lower TL, for D, is a directory, expanded into
 * OUT. */
static bool client_lower(const char *tl, const struct client_dirs *d, char *out)
{
	struct stat st;

	return srv_template_expand(tl, d->addr, d->named ? d->host : NULL, out,
				   PATH_MAX) &&
	       stat(out, &st) == 0 && S_ISDIR(st.st_mode);
}

static int client_stack(const struct srv_export_opts *c, const struct client_dirs *d,
			struct client_stack *cs)
{
	memset(cs, 0, sizeof(*cs));
	cs->dirs = calloc(c->nlower, sizeof(*cs->dirs));
	cs->buf = malloc(c->nlower * (size_t)PATH_MAX);
	if (!cs->dirs || !cs->buf) {
		client_stack_free(cs);
		return -ENOMEM;
	}
	for (size_t k = 0; k < c->nlower; k++) {
		char *dir = cs->buf + k * PATH_MAX;

		if (!srv_is_template(c->lowerdirs[k]))
			cs->dirs[cs->n++] = c->lowerdirs[k];
		else if (client_lower(c->lowerdirs[k], d, dir))
			cs->dirs[cs->n++] = dir;
		else if (cs->nmissing++ == 0)
			snprintf(cs->missing, sizeof(cs->missing), "%s", c->lowerdirs[k]);
	}
	return 0;
}

/* mkdir -p DIR, the last component with MODE; 0 or -errno.  *MADE gets
 * the shallowest dir it created (NULL when none; the caller frees it), for
 * dirs_remove. */
static int mkdir_p(const char *dir, mode_t mode, char **made)
{
	char buf[PATH_MAX];
	size_t n = strlen(dir);

	*made = NULL;
	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, dir, n + 1);
	for (char *p = buf + 1;; p++) {
		bool last = *p == '\0';

		if (!last && *p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, last ? mode : 0755) == 0) {
			if (!*made && !(*made = strdup(buf)))
				return -ENOMEM;
		} else if (errno != EEXIST) {
			return -errno;
		}
		if (last)
			return 0;
		*p = '/';
	}
}

/* Removes DIR and its parents up to and with TOP, each only if empty.  TOP
 * NULL: nothing was made. */
static void dirs_remove(const char *dir, const char *top)
{
	char buf[PATH_MAX];
	size_t ntop = top ? strlen(top) : 0;
	char *slash;

	if (!ntop || snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
		return;
	while (strlen(buf) >= ntop && rmdir(buf) == 0 && strlen(buf) > ntop) {
		slash = strrchr(buf, '/');
		if (!slash || slash == buf)
			return;
		*slash = '\0';
	}
}

/* Creates a client's upper (as the root of TOP, its top lower: the merged
 * root shows the upper's mode and owner, as in overlayfs) and its private
 * work dir; I's made_upper and made_work say what was new. */
static int client_dirs_make(const char *top, struct srv_export *i, const char *upper,
			    const char *work)
{
	struct stat st;
	int rc;

	if (stat(top, &st) < 0)
		return -errno;
	rc = mkdir_p(upper, st.st_mode & 07777, &i->made_upper);
	/* (a server run as a user makes it its own: it can give it no other) */
	if (rc == 0 && i->made_upper && geteuid() == 0 &&
	    lchown(upper, st.st_uid, st.st_gid) < 0)
		rc = -errno;
	if (rc == 0)
		rc = mkdir_p(work, 0700, &i->made_work);
	return rc;
}

/* Removes what client_dirs_make made for I, and what the union makes in
 * the work dir (un_work_open): its temp dir, when empty, and its lock. */
static void client_dirs_unmake(const struct srv_export *i, const char *work)
{
	char sub[PATH_MAX];

	if (i->made_work && snprintf(sub, sizeof(sub), "%s/work", work) < PATH_MAX)
		rmdir(sub);
	if (i->made_work &&
	    snprintf(sub, sizeof(sub), "%s/" UN_WORK_LOCK_NAME, work) < PATH_MAX)
		unlink(sub);
	dirs_remove(work, i->made_work);
	dirs_remove(i->client_key, i->made_upper);
}

/* ---- the registry (rule 1: s->unions.lock held) ---- */

static void lru_unlink(struct srv_unions *u, struct srv_export *i)
{
	if (i->lru_prev)
		i->lru_prev->lru_next = i->lru_next;
	else if (u->lru_head == i)
		u->lru_head = i->lru_next;
	if (i->lru_next)
		i->lru_next->lru_prev = i->lru_prev;
	else if (u->lru_tail == i)
		u->lru_tail = i->lru_prev;
	i->lru_prev = i->lru_next = NULL;
}

/* Makes I the most recently used. */
static void lru_touch(struct srv_unions *u, struct srv_export *i)
{
	if (u->lru_tail == i)
		return;
	lru_unlink(u, i);
	i->lru_prev = u->lru_tail;
	if (u->lru_tail)
		u->lru_tail->lru_next = i;
	else
		u->lru_head = i;
	u->lru_tail = i;
}

/* Unlinks I from the chain at *P (linked through the field at OFF). */
static void chain_unlink(struct srv_export **p, struct srv_export *i, size_t off)
{
	for (; *p; p = (struct srv_export **)((char *)*p + off)) {
		if (*p == i) {
			*p = *(struct srv_export **)((char *)i + off);
			return;
		}
	}
}

static struct srv_export **id_bucket(struct srv_unions *u, uint32_t id)
{
	return &u->by_id[id % SRV_UNIONS_BUCKETS];
}

/* Lists I under its template and its id. */
static void registry_add(struct srv_unions *u, struct srv_export *i)
{
	struct srv_export **b = id_bucket(u, i->id);

	i->next = i->parent->instances;
	i->parent->instances = i;
	i->id_next = *b;
	*b = i;
	u->nopen++;
}

static void registry_del(struct srv_unions *u, struct srv_export *i)
{
	chain_unlink(&i->parent->instances, i, offsetof(struct srv_export, next));
	chain_unlink(id_bucket(u, i->id), i, offsetof(struct srv_export, id_next));
	lru_unlink(u, i);
	u->nopen--;
}

/* ---- the ids of client unions on disk (rule 1's lock held) ---- */

static bool known_has(const struct srv_unions *u, uint32_t id, size_t *at)
{
	size_t lo = 0, hi = u->nknown;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (u->known[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	*at = lo;
	return lo < u->nknown && u->known[lo] == id;
}

/* Adds ID (no memory: it is left out, and found by the next read). */
static void known_add(struct srv_unions *u, uint32_t id)
{
	size_t at, cap;
	uint32_t *k;

	if (known_has(u, id, &at))
		return;
	if (u->nknown == u->capknown) {
		cap = u->capknown ? 2 * u->capknown : 64;
		k = realloc(u->known, cap * sizeof(*k));
		if (!k)
			return;
		u->known = k;
		u->capknown = cap;
	}
	memmove(u->known + at + 1, u->known + at, (u->nknown - at) * sizeof(*u->known));
	u->known[at] = id;
	u->nknown++;
}

static time_t now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return ts.tv_sec;
}

/* Pins I for REQ's call (rule 2): once per call, however often it is found. */
static void pin_locked(struct srv_req *req, struct srv_export *i)
{
	for (unsigned k = 0; k < req->npins; k++)
		if (req->pins[k] == i)
			return;
	if (req->npins == SRV_REQ_PINS) {
		/* no procedure names more unions than that: a bug, not a client */
		rpc_log(RPC_LOG_ERR, "a call pins more than %d client unions",
			SRV_REQ_PINS);
		abort();
	}
	req->pins[req->npins++] = i;
	i->pins++;
	i->last_used = now_s();
	if (i->state == SRV_UNION_OPEN)
		lru_touch(&req->srv->unions, i);
}

/* True when REQ's call holds a pin on I already: it waits for no state of
 * I (it would wait for itself), and I's union cannot change under it. */
static bool pinned_by(const struct srv_req *req, const struct srv_export *i)
{
	for (unsigned k = 0; k < req->npins; k++)
		if (req->pins[k] == i)
			return true;
	return false;
}

/* True when REQ's call must wait for I to settle before it pins I (rules 3,
 * 8, 9): not when I is OPEN or the call pins it already, nor when I is
 * outdated and the call pins another union: two calls that each pin an
 * outdated union and want the other's would wait for good, so it is used
 * as it is and its release waits for this call's pin too. */
static bool must_wait(const struct srv_req *req, const struct srv_export *i)
{
	if (i->state == SRV_UNION_OPEN || pinned_by(req, i))
		return false;
	return !(i->outdated && i->state == SRV_UNION_RENEWING && req->npins);
}

static struct srv_export *find_key(struct srv_export *t, const char *key)
{
	struct srv_export *i;

	for (i = t->instances; i; i = i->next)
		if (strcmp(i->client_key, key) == 0)
			break;
	return i;
}

static struct srv_export *find_id(struct srv_unions *u, uint32_t id)
{
	struct srv_export *i;

	for (i = *id_bucket(u, id); i && i->id != id; i = i->id_next)
		;
	return i;
}

/* True if a union has I's id (I not listed yet): a fixed export's, or
 * another client's (only when two upper dirs hash alike). */
static bool id_taken(struct srv *s, const struct srv_export *i)
{
	for (size_t k = 0; k < s->nexports; k++)
		if (s->exports[k]->ux && s->exports[k]->id == i->id)
			return true;
	return find_id(&s->unions, i->id) != NULL;
}

/* The least recently used instance that may be released, marked CLOSING
 * and out of the LRU; NULL when every open one is pinned. */
static struct srv_export *victim_take(struct srv_unions *u)
{
	struct srv_export *i;

	for (i = u->lru_head; i && i->pins; i = i->lru_next)
		;
	if (i) {
		lru_unlink(u, i);
		i->state = SRV_UNION_CLOSING;
	}
	return i;
}

/* Closes I's union, if it has one open. */
static void instance_union_close(struct srv_export *i)
{
	if (i->ux)
		un_export_close(i->ux);
	i->ux = NULL;
}

static void instance_free(struct srv_export *i)
{
	instance_union_close(i);
	free(i->made_upper);
	free(i->made_work);
	free(i->client_key);
	free(i->client_addr);
	free(i->client_host);
	free(i->path);
	srv_counts_export_free(i);
	free(i);
}

/* The bytes of string S and its NUL; 0 for NULL. */
static size_t str_bytes(const char *s)
{
	return s ? strlen(s) + 1 : 0;
}

size_t srv_union_mem(const struct srv *s, const struct srv_export *i)
{
	if (i->state != SRV_UNION_OPEN || !i->ux)
		return 0;
	return un_export_mem(i->ux) + sizeof(*i) + str_bytes(i->path) +
	       str_bytes(i->client_key) + str_bytes(i->client_addr) +
	       str_bytes(i->client_host) + srv_counts_export_bytes(s, i);
}

/* Closes I (CLOSING, taken out of the LRU under the lock) and takes it out
 * of its template's list. */
static void instance_release(struct srv *s, struct srv_export *i)
{
	instance_union_close(i);
	pthread_mutex_lock(&s->unions.lock);
	registry_del(&s->unions, i);
	pthread_cond_broadcast(&s->unions.changed);
	if (++s->unions.released - s->unions.trimmed == TRIM_BATCH)
		pthread_cond_signal(&s->unions.wake); /* rule 12 */
	pthread_mutex_unlock(&s->unions.lock);
	RPC_LOG_LIMITED(RPC_LOG_INFO, "export %s: union %s %s released", i->path,
			key_phrase(i->parent), i->client_key);
	instance_free(i);
}

static bool instance_vanished(struct srv_req *req, struct srv_export *i);
static bool template_match(const char *t, const char *p, struct client_dirs *d);

/* ---- opening ---- */

/* What each client union may hold in memory (rule 12). */
static size_t union_share(struct srv *s)
{
	size_t share;

	pthread_mutex_lock(&s->unions.lock);
	share = s->unions.share;
	pthread_mutex_unlock(&s->unions.lock);
	return share;
}

/* A new OPENING instance of T for the client D names, or NULL. */
static struct srv_export *instance_new(struct srv_export *t, const struct client_dirs *d)
{
	struct srv_export *i = calloc(1, sizeof(*i));

	if (!i)
		return NULL;
	i->parent = t;
	i->state = SRV_UNION_OPENING;
	i->id = client_id(t, d->key);
	i->path = strdup(t->path);
	i->client_key = strdup(d->key);
	i->client_addr = strdup(d->addr);
	i->client_host = d->named ? strdup(d->host) : NULL;
	if (!i->path || !i->client_key || !i->client_addr ||
	    (d->named && !i->client_host)) {
		instance_free(i);
		return NULL;
	}
	return i;
}

/* Logs what client D's union left out of its stack CS (rule 8). */
static void stack_log(const struct srv_export *t, const struct client_dirs *d,
		      const struct client_stack *cs)
{
	if (!cs->nmissing)
		return;
	RPC_LOG_LIMITED(RPC_LOG_INFO,
			"export %s: client %s: its union %s %s has no layer %s "
			"(not a directory here%s): served without it",
			t->path, d->addr, key_phrase(t), d->key, cs->missing,
			cs->nmissing > 1 ? ", nor another of its per-client lowers" : "");
}

/* Opens I's union over the dirs and layers D gives its client, making the
 * dirs first (outside the lock). */
static int instance_open(struct srv *s, struct srv_export *i, const struct client_dirs *d)
{
	struct srv_export *t = i->parent;
	char id_path[MNTPATHLEN + PATH_MAX + CLIENT_ID_PATH_SLACK], err[PATH_MAX + 512];
	struct client_stack cs;
	struct un_export_cfg cfg = {
	    .path = id_path,
	    .upperdir = d->upper[0] ? d->upper : NULL,
	    .workdir = d->work[0] ? d->work : NULL,
	    .no_layer_index = !s->cfg.layer_index,
	    .index_best_effort = true, /* a client's mount has no old stack */
	    .mem_bytes = union_share(s),
	    .own_table = s->union_tables, /* rule 14 */
	};
	int rc;

	client_id_path(t, i->client_key, id_path, sizeof(id_path));
	rc = client_stack(t->conf, d, &cs);
	if (rc < 0)
		snprintf(err, sizeof(err), "%s", strerror(-rc));
	else if (cfg.upperdir &&
		 (rc = client_dirs_make(cs.dirs[0], i, d->upper, d->work)) < 0)
		snprintf(err, sizeof(err), "%s: %s", d->upper, strerror(-rc));
	if (rc == 0) {
		cfg.lowerdirs = cs.dirs;
		cfg.nlower = cs.n;
		stack_log(t, d, &cs);
		rc = un_export_open(s->state, &cfg, &i->ux, err, sizeof(err));
		i->ux_serial = atomic_fetch_add(&ux_serials, 1) + 1; /* rule 11 */
	}
	client_stack_free(&cs);
	if (rc < 0) {
		client_dirs_unmake(i, d->work);
		RPC_LOG_LIMITED(RPC_LOG_ERR, "export %s: cannot open the union %s %s: %s",
				t->path, key_phrase(t), i->client_key, err);
	}
	return rc;
}

/* Opens the OPENING instance I (pinned for REQ), releasing a victim first
 * when the cap is reached, and settles it: OPEN and in the LRU, or gone.
 * Returns I, or NULL. */
static struct srv_export *instance_settle(struct srv_req *req, struct srv_export *i,
					  struct srv_export *victim,
					  const struct client_dirs *d)
{
	struct srv *s = req->srv;
	int rc;

	if (victim)
		instance_release(s, victim);
	rc = instance_open(s, i, d);
	pthread_mutex_lock(&s->unions.lock);
	if (rc == 0) {
		/* outdated while it opened: it waits for its pins to go (rule 8) */
		i->state = i->outdated ? SRV_UNION_RENEWING : SRV_UNION_OPEN;
		i->last_used = now_s();
		if (!i->outdated)
			lru_touch(&s->unions, i);
		known_add(&s->unions, i->id);
		if (s->unions.nopen > s->unions.cap)
			pthread_cond_signal(&s->unions.wake); /* rule 5 */
	} else {
		registry_del(&s->unions, i);
		req->npins--; /* pinned last, by instance_get */
		req->union_err = rc;
	}
	pthread_cond_broadcast(&s->unions.changed);
	pthread_mutex_unlock(&s->unions.lock);
	if (rc < 0) {
		instance_free(i);
		return NULL;
	}
	return i;
}

/* The client union of template T for REQ's caller, pinned; when none is
 * open, opens it, if CREATE or its upper dir is already there (rule 7). */
static struct srv_export *instance_get(struct srv_req *req, struct srv_export *t,
				       bool create)
{
	struct srv_unions *u = &req->srv->unions;
	struct srv_export *i, *victim = NULL;
	struct client_dirs d;
	struct stat st;
	bool fresh;

	if (!client_dirs(req->srv, t, req->rpc, &d)) {
		RPC_LOG_LIMITED(RPC_LOG_WARN,
				"export %s: client %s: no union (no host name for %%h, "
				"or a path too long)",
				t->path, d.addr);
		return NULL;
	}
	if (!create && d.upper[0] && stat(d.upper, &st) < 0)
		return NULL;
again:
	pthread_mutex_lock(&u->lock);
	while ((i = find_key(t, d.key)) != NULL && must_wait(req, i))
		pthread_cond_wait(&u->changed, &u->lock);
	if (i) {
		fresh = !pinned_by(req, i);
		pin_locked(req, i);
		pthread_mutex_unlock(&u->lock);
		if (fresh && instance_vanished(req, i))
			goto again; /* rule 10: made again, opened afresh */
		return i;
	}
	i = instance_new(t, &d);
	if (i && id_taken(req->srv, i)) {
		RPC_LOG_LIMITED(RPC_LOG_ERR,
				"export %s: the union %s %s: its export id collides "
				"with another's",
				t->path, key_phrase(t), d.key);
		instance_free(i);
		i = NULL;
	}
	if (!i) {
		pthread_mutex_unlock(&u->lock);
		return NULL;
	}
	registry_add(u, i);
	pin_locked(req, i);
	if (u->nopen > u->cap)
		victim = victim_take(u);
	pthread_mutex_unlock(&u->lock);
	i = instance_settle(req, i, victim, &d);
	if (i)
		RPC_LOG_LIMITED(RPC_LOG_INFO, "export %s: client %s: union %s %s",
				t->path, d.addr, key_phrase(t), d.key);
	return i;
}

struct srv_export *srv_export_instance(struct srv_req *req, struct srv_export *ex)
{
	return ex->ux ? ex : instance_get(req, ex, true);
}

/* The open instance with export id ID, pinned for REQ, after waiting out
 * an open or a close of it (rule 3); NULL when none is open. */
static struct srv_export *instance_by_id(struct srv_req *req, uint32_t id)
{
	struct srv_unions *u = &req->srv->unions;
	struct srv_export *i;
	bool fresh = false;

again:
	pthread_mutex_lock(&u->lock);
	while ((i = find_id(u, id)) != NULL && must_wait(req, i))
		pthread_cond_wait(&u->changed, &u->lock);
	if (i) {
		fresh = !pinned_by(req, i);
		pin_locked(req, i);
	}
	pthread_mutex_unlock(&u->lock);
	if (i && fresh && instance_vanished(req, i))
		goto again; /* rule 10: gone now, reopened by the caller */
	return i;
}

struct srv_export *srv_export_for_handle(struct srv_req *req, uint32_t export_id)
{
	struct srv *s = req->srv;
	char host[NI_MAXHOST];
	struct srv_export *ex, *t;
	struct client_dirs d;
	bool named;

	for (size_t k = 0; k < s->nexports; k++)
		if (s->exports[k]->ux && s->exports[k]->id == export_id)
			return s->exports[k];
	ex = instance_by_id(req, export_id);
	/* Released, or not opened since the start: reopened only for its own
	 * client, whose dirs give its id (rule 4). */
	for (size_t k = 0; !ex && req->rpc->peer && k < s->nexports; k++) {
		t = s->exports[k];
		if (t->ux)
			continue;
		named = t->clients.need_name &&
			srv_peer_name(s->names, req->rpc->peer, host, sizeof(host));
		if (srv_clients_match(&t->clients, req->rpc->peer, named ? host : NULL) &&
		    client_dirs(s, t, req->rpc, &d) && client_id(t, d.key) == export_id)
			ex = instance_get(req, t, false);
	}
	return ex;
}

void srv_export_mounted(struct srv_req *req, struct srv_export *i)
{
	if (!i->parent)
		return;
	pthread_mutex_lock(&req->srv->unions.lock);
	i->mounted = true;
	/* its dirs now hold a client's mount: srv_export_abandon keeps them */
	free(i->made_upper);
	free(i->made_work);
	i->made_upper = i->made_work = NULL;
	pthread_mutex_unlock(&req->srv->unions.lock);
}

void srv_export_unmounted(struct srv_req *req, struct srv_export *t)
{
	struct srv *s = req->srv;
	struct client_dirs d;
	struct srv_export *i;

	for (size_t k = 0; req->rpc->peer && k < s->nexports; k++) {
		if (s->exports[k]->ux || (t && s->exports[k] != t) ||
		    !client_dirs(s, s->exports[k], req->rpc, &d))
			continue;
		pthread_mutex_lock(&s->unions.lock);
		i = find_key(s->exports[k], d.key);
		if (i)
			i->mounted = false;
		pthread_mutex_unlock(&s->unions.lock);
	}
}

void srv_export_abandon(struct srv_req *req, struct srv_export *i)
{
	struct srv *s = req->srv;
	struct client_dirs d;
	bool drop;

	if (!i->parent || !client_dirs(s, i->parent, req->rpc, &d))
		return;
	pthread_mutex_lock(&s->unions.lock);
	/* only dirs this open made, when nothing else came to use them */
	drop = i->made_upper && (i->state == SRV_UNION_OPEN || i->outdated) &&
	       i->pins == 1 && !i->mounted;
	if (drop) {
		lru_unlink(&s->unions, i);
		i->state = SRV_UNION_CLOSING;
		i->pins = 0;
		for (unsigned k = 0; k < req->npins; k++)
			if (req->pins[k] == i)
				req->pins[k] = req->pins[--req->npins];
	}
	pthread_mutex_unlock(&s->unions.lock);
	if (!drop)
		return;
	instance_union_close(i);
	client_dirs_unmake(i, d.work);
	pthread_mutex_lock(&s->unions.lock);
	registry_del(&s->unions, i);
	pthread_cond_broadcast(&s->unions.changed);
	pthread_mutex_unlock(&s->unions.lock);
	instance_free(i);
}

/* Drops one pin of I (under the lock).  True when that leaves an outdated I
 * no pins: I is CLOSING then, for the caller to release once the lock is
 * let go (rule 8). */
static bool unpin_locked(struct srv_unions *u, struct srv_export *i)
{
	if (--i->pins > 0 || i->state != SRV_UNION_RENEWING)
		return false;
	pthread_cond_broadcast(&u->changed); /* rule 9 */
	if (!i->outdated)
		return false;
	i->state = SRV_UNION_CLOSING;
	return true;
}

void srv_unions_unpin(struct srv_req *req)
{
	struct srv_unions *u = &req->srv->unions;
	struct srv_export *outdated[SRV_REQ_PINS];
	unsigned n = 0;

	if (!req->npins)
		return;
	pthread_mutex_lock(&u->lock);
	for (unsigned k = 0; k < req->npins; k++)
		if (unpin_locked(u, req->pins[k]))
			outdated[n++] = req->pins[k];
	if (u->nopen > u->cap)
		pthread_cond_signal(&u->wake); /* rule 5 */
	pthread_mutex_unlock(&u->lock);
	req->npins = 0;
	for (unsigned k = 0; k < n; k++)
		instance_release(req->srv, outdated[k]);
}

/* ---- handles of unions not open ---- */

/* The glob(3) pattern of every dir template T can expand to: "%a" and
 * "%h" match any one component's part, "%%" is a '%', and glob's own
 * special characters stand for themselves.  False when it does not fit. */
static bool template_glob(const char *t, char *out, size_t len)
{
	size_t n = 0;

	for (; *t; t++) {
		const char *add = NULL;
		char one[3] = {0};

		if (t[0] == '%' && (t[1] == 'a' || t[1] == 'h'))
			add = "*", t++;
		else if (t[0] == '%' && t[1] == '%')
			add = "%", t++;
		else if (strchr("*?[\\", *t))
			one[0] = '\\', one[1] = *t, add = one;
		else
			one[0] = *t, add = one;
		if (n + strlen(add) >= len)
			return false;
		memcpy(out + n, add, strlen(add));
		n += strlen(add);
	}
	out[n] = '\0';
	return true;
}

/* Binds the names template T (a dir template) gives PATH, a match of its
 * glob, into D->addr and D->host: "%a" and "%h" each stand for a part of
 * one component, the same each time one comes again.  False when PATH is
 * not T's. */
static bool template_match(const char *t, const char *p, struct client_dirs *d)
{
	for (;; t++, p++) {
		bool var = t[0] == '%' && (t[1] == 'a' || t[1] == 'h');
		char *slot = !var ? NULL : t[1] == 'a' ? d->addr : d->host;
		size_t room = var && t[1] == 'a' ? sizeof(d->addr) : sizeof(d->host);

		if (slot && *slot) { /* bound before */
			if (strncmp(p, slot, strlen(slot)) != 0)
				return false;
			t++;
			p += strlen(slot) - 1;
			continue;
		}
		if (slot) {
			for (size_t n = 1; p[n - 1] && p[n - 1] != '/' && n < room; n++) {
				memcpy(slot, p, n);
				slot[n] = '\0';
				if (template_match(t + 2, p + n, d))
					return true;
			}
			*slot = '\0';
			return false;
		}
		if (t[0] == '%' && t[1] == '%')
			t++;
		if (*t != *p)
			return false;
		if (!*t)
			return true;
	}
}

/* Adds to U the id of the union template T gives the client of dir PATH,
 * a match of T's dir template DIR. */
static void known_add_match(struct srv_unions *u, const struct srv_export *t,
			    const char *dir, const char *path)
{
	struct client_dirs d = {0};

	if (!upper_per_client(t) &&
	    (!template_match(dir, path, &d) ||
	     !client_key_of(t, d.addr, d.host, d.key, sizeof(d.key))))
		return; /* a name its lowers use is not in this one */
	pthread_mutex_lock(&u->lock);
	known_add(u, client_id(t, upper_per_client(t) ? path : d.key));
	pthread_mutex_unlock(&u->lock);
}

/* The export ids of the client unions whose dirs template T can give and
 * that exist on disk, into U's known ids: its upper dirs, or without a
 * per-client upper its per-client lowers (rule 8). */
static void template_read_ids(struct srv_unions *u, const struct srv_export *t)
{
	const struct srv_export_opts *c = t->conf;
	char pattern[PATH_MAX * 2];
	glob_t g;

	for (size_t k = 0; k <= c->nlower; k++) {
		const char *dir = k == 0 ? c->upperdir : c->lowerdirs[k - 1];

		if (!srv_is_template(dir) || (k > 0 && upper_per_client(t)) ||
		    !template_glob(dir, pattern, sizeof(pattern)) ||
		    glob(pattern, GLOB_ONLYDIR | GLOB_NOSORT, NULL, &g) != 0)
			continue;
		for (size_t m = 0; m < g.gl_pathc; m++)
			known_add_match(u, t, dir, g.gl_pathv[m]);
		globfree(&g);
	}
}

bool srv_export_id_is_client_union(struct srv *s, uint32_t export_id)
{
	struct srv_unions *u = &s->unions;
	time_t now = now_s();
	bool found, read;
	size_t at;

	pthread_mutex_lock(&u->lock);
	found = known_has(u, export_id, &at);
	read = !found && (!u->known_read || now - u->known_read >= 1);
	if (read)
		u->known_read = now;
	pthread_mutex_unlock(&u->lock);
	if (!read)
		return found;
	for (size_t k = 0; k < s->nexports; k++)
		if (!s->exports[k]->ux)
			template_read_ids(u, s->exports[k]);
	pthread_mutex_lock(&u->lock);
	found = known_has(u, export_id, &at);
	pthread_mutex_unlock(&u->lock);
	return found;
}

bool srv_export_is_callers(struct srv_req *req, const struct srv_export *ex)
{
	char addr[INET6_ADDRSTRLEN + 16];
	struct client_dirs d;

	if (!ex->parent)
		return true;
	if (req->rpc->peer && client_dirs(req->srv, ex->parent, req->rpc, &d) &&
	    strcmp(d.key, ex->client_key) == 0)
		return true;
	RPC_LOG_LIMITED(
	    RPC_LOG_WARN, "NFS call from %s with a handle of the union %s %s: refused",
	    req->rpc->peer ? rpc_addr_str(req->rpc->peer, true, addr, sizeof(addr)) : "-",
	    key_phrase(ex->parent), ex->client_key);
	return false;
}

/* ---- the reaper ---- */

/* Takes one instance to release now (rules 5, 6), or NULL. */
static struct srv_export *reap_pick(struct srv_unions *u, time_t now)
{
	struct srv_export *i;

	if (u->nopen > u->cap)
		return victim_take(u);
	if (!u->idle)
		return NULL;
	for (i = u->lru_head; i; i = i->lru_next) {
		if (now - i->last_used < (time_t)u->idle)
			return NULL; /* the rest were used later */
		if (!i->pins && !i->mounted)
			break;
	}
	if (i) {
		lru_unlink(u, i);
		i->state = SRV_UNION_CLOSING;
	}
	return i;
}

/* Releases what reap_pick gives, one at a time. */
static void reap_once(struct srv *s)
{
	struct srv_unions *u = &s->unions;
	struct srv_export *i;

	srv_exports_read_begin(s); /* rule 6 */
	for (;;) {
		pthread_mutex_lock(&u->lock);
		i = u->idle || u->nopen > u->cap ? reap_pick(u, now_s()) : NULL;
		pthread_mutex_unlock(&u->lock);
		if (!i)
			break;
		instance_release(s, i);
	}
	srv_exports_read_end(s);
}

/* Hands the allocator's free pages back to the system when unions were
 * released since the last time, at most once a second (rule 12): one left
 * pending has the reaper look again in a second.  Under unions.lock, which
 * it drops meanwhile. */
static void reap_trim(struct srv_unions *u)
{
	time_t now = now_s();

	if (u->released == u->trimmed || now == u->trim_at)
		return;
	u->trimmed = u->released;
	u->trim_at = now;
	pthread_mutex_unlock(&u->lock);
	malloc_trim(0);
	pthread_mutex_lock(&u->lock);
}

static void *reaper_main(void *arg)
{
	struct srv *s = arg;
	struct srv_unions *u = &s->unions;
	unsigned period = u->idle / 4;
	struct timespec at;

	period = period < 1 ? 1 : period > REAP_PERIOD_MAX_S ? REAP_PERIOD_MAX_S : period;
	pthread_mutex_lock(&u->lock);
	while (!u->stop) {
		clock_gettime(CLOCK_MONOTONIC, &at);
		at.tv_sec += u->released != u->trimmed ? 1 : period; /* reap_trim */
		pthread_cond_timedwait(&u->wake, &u->lock, &at);
		if (u->stop)
			break;
		pthread_mutex_unlock(&u->lock);
		reap_once(s);
		pthread_mutex_lock(&u->lock);
		reap_trim(u);
	}
	pthread_mutex_unlock(&u->lock);
	return NULL;
}

/* The largest descriptor cost of one client union among S's templates. */
static unsigned long union_fds_max(const struct srv *s)
{
	unsigned long most = 0, fds;

	for (size_t k = 0; k < s->nexports; k++) {
		if (s->exports[k]->ux)
			continue;
		fds = 2ul * (s->exports[k]->conf->nlower + 1) + 2;
		most = fds > most ? fds : most;
	}
	return most;
}

/* The cgroup (v2) of this process: PATH of the line "0::PATH" of
 * /proc/self/cgroup, into OUT; false when there is none. */
static bool own_cgroup(char *out, size_t len)
{
	char line[PATH_MAX + 8];
	FILE *f = fopen("/proc/self/cgroup", "r");
	bool found = false;

	while (f && !found && fgets(line, sizeof(line), f))
		found = strncmp(line, "0::/", 4) == 0;
	if (f)
		fclose(f);
	if (found) {
		line[strcspn(line, "\n")] = '\0';
		found = snprintf(out, len, "%s", line + 3) < (int)len;
	}
	return found;
}

/* The memory.max of the cgroup at PATH (under /sys/fs/cgroup), or 0 when
 * it has none ("max", or no such file: the root). */
static uint64_t cgroup_max_of(const char *path)
{
	char file[PATH_MAX + 32], val[32], *end;
	uint64_t v = 0;
	FILE *f;

	if (snprintf(file, sizeof(file), "/sys/fs/cgroup%s/memory.max", path) >=
	    (int)sizeof(file))
		return 0;
	f = fopen(file, "r");
	if (f && fgets(val, sizeof(val), f)) {
		v = strtoull(val, &end, 10);
		v = *end == '\n' || !*end ? v : 0;
	}
	if (f)
		fclose(f);
	return v;
}

/* The memory this process may have: the machine's, or the lowest
 * memory.max on the path of its cgroup when that is less. */
static uint64_t machine_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t most = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0, v;
	char path[PATH_MAX], *cut;

	if (!own_cgroup(path, sizeof(path)))
		return most;
	for (;;) { /* the cgroup, then each parent up to the root's "" */
		v = cgroup_max_of(path);
		most = v && (!most || v < most) ? v : most;
		cut = strrchr(path, '/');
		if (!cut)
			return most;
		*cut = '\0';
	}
}

/* What the open client unions may hold together (rule 12). */
static size_t unions_memory(const struct srv *s)
{
	uint64_t m = s->cfg.client_unions_memory;

	if (!m)
		m = machine_memory() / MEM_PART;
	return m > SIZE_MAX ? SIZE_MAX : (size_t)m;
}

/* The default cap: an eighth of the limit on open files over the most
 * descriptors a client union holds, and MEMORY over UNION_MEM_MIN; at least
 * UNIONS_MIN.  *BY_FDS and *BY_MEM get the two, for the log. */
static unsigned unions_cap(const struct srv *s, size_t memory, unsigned long *by_fds,
			   unsigned long *by_mem)
{
	unsigned long fds = 1024, per = union_fds_max(s), cap;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		fds =
		    rl.rlim_cur == RLIM_INFINITY ? 1ul << 20 : (unsigned long)rl.rlim_cur;
	*by_fds = per ? fds / SRV_UNIONS_FDS_PART / per : UNIONS_MIN;
	*by_mem = memory / UNION_MEM_MIN;
	cap = *by_fds < *by_mem ? *by_fds : *by_mem;
	cap = cap < UNIONS_MIN ? UNIONS_MIN : cap > UINT_MAX ? UINT_MAX : cap;
	return s->cfg.max_client_unions ? s->cfg.max_client_unions : (unsigned)cap;
}

void srv_unions_limits(struct srv *s)
{
	size_t memory = unions_memory(s);
	unsigned long by_fds, by_mem;
	unsigned cap = unions_cap(s, memory, &by_fds, &by_mem);
	bool changed;

	pthread_mutex_lock(&s->unions.lock);
	changed = cap != s->unions.cap || memory / cap != s->unions.share;
	s->unions.cap = cap;
	s->unions.memory = memory;
	s->unions.share = memory / cap;
	s->unions.idle = s->cfg.client_union_idle;
	s->unions.nknown = 0; /* the templates may have changed: read again */
	s->unions.known_read = 0;
	pthread_cond_signal(&s->unions.wake);
	pthread_mutex_unlock(&s->unions.lock);
	if (changed && union_fds_max(s))
		rpc_log(RPC_LOG_INFO,
			"client unions: at most %u open (the descriptors allow %lu, "
			"the memory %lu), each may hold %zu KiB of %zu MiB",
			cap, by_fds, by_mem, memory / cap >> 10, memory >> 20);
}

void srv_unions_init(struct srv *s)
{
	struct srv_unions *u = &s->unions;
	pthread_condattr_t ca;

	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->changed, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&u->wake, &ca);
	pthread_condattr_destroy(&ca);
	u->ready = true;
}

int srv_unions_start(struct srv *s)
{
	int rc;

	srv_unions_limits(s);
	rc = -pthread_create(&s->unions.reaper, NULL, reaper_main, s);
	s->unions.reaping = rc == 0;
	return rc;
}

void srv_unions_stop(struct srv *s)
{
	struct srv_unions *u = &s->unions;

	if (!u->reaping)
		return;
	pthread_mutex_lock(&u->lock);
	u->stop = true;
	pthread_cond_signal(&u->wake);
	pthread_mutex_unlock(&u->lock);
	pthread_join(u->reaper, NULL);
	u->reaping = false;
}

void srv_unions_fini(struct srv *s)
{
	struct srv_unions *u = &s->unions;

	if (!u->ready)
		return;
	pthread_cond_destroy(&u->wake);
	pthread_cond_destroy(&u->changed);
	pthread_mutex_destroy(&u->lock);
	free(u->known);
	u->known = NULL;
	u->nknown = u->capknown = 0;
	u->ready = false;
}

/* Marks I, which calls pin, outdated (rule 8): an OPEN one goes RENEWING
 * and out of the LRU, one being opened does so as it settles
 * (instance_settle). */
static void recheck_outdate(struct srv_unions *u, struct srv_export *i)
{
	i->outdated = true;
	if (i->state != SRV_UNION_OPEN)
		return;
	lru_unlink(u, i);
	i->state = SRV_UNION_RENEWING;
}

/* An open instance of T that no call uses, marked CLOSING and out of the
 * LRU; NULL when there is none.  Those that calls pin (an opening one is
 * pinned by its opener) are marked outdated on the way (rule 8). */
static struct srv_export *recheck_take(struct srv_unions *u, struct srv_export *t)
{
	struct srv_export *i;

	for (i = t->instances; i; i = i->next) {
		if (i->state == SRV_UNION_OPEN && !i->pins)
			break;
		if (i->pins && !i->outdated &&
		    (i->state == SRV_UNION_OPEN || i->state == SRV_UNION_OPENING))
			recheck_outdate(u, i);
	}
	if (i) {
		lru_unlink(u, i);
		i->state = SRV_UNION_CLOSING;
	}
	return i;
}

void srv_unions_recheck(struct srv *s, struct srv_export *t)
{
	struct srv_unions *u = &s->unions;
	struct srv_export *i;

	if (t->ux || !srv_lowers_per_client(t->conf))
		return;
	srv_exports_read_begin(s); /* rule 6 */
	for (;;) {
		pthread_mutex_lock(&u->lock);
		i = recheck_take(u, t);
		pthread_mutex_unlock(&u->lock);
		if (!i)
			break;
		instance_release(s, i);
	}
	srv_exports_read_end(s);
}

void srv_unions_drop_template(struct srv *s, struct srv_export *t)
{
	struct srv_unions *u = &s->unions;
	struct srv_export *list, *i, *next;
	bool busy;

	if (!t->instances)
		return;
	pthread_mutex_lock(&u->lock);
	do { /* the reaper may be closing one (rule 6) */
		busy = false;
		for (i = t->instances; i && !busy; i = i->next)
			busy = i->state != SRV_UNION_OPEN;
		if (busy)
			pthread_cond_wait(&u->changed, &u->lock);
	} while (busy);
	list = t->instances;
	for (i = list; i; i = next) {
		next = i->next;
		registry_del(u, i);
	}
	pthread_mutex_unlock(&u->lock);
	for (i = list; i; i = next) {
		next = i->next;
		instance_free(i);
	}
}

/* ---- renewing: a reset, a vanished upper (rules 9, 10) ---- */

/* The dirs of the union of T whose key is KEY (its upper dir), into D: the
 * names the upper template binds, and the work dir they give.  Never from
 * a caller's address: any client may present a handle of another's union. */
static bool key_dirs(const struct srv_export *t, const char *key, struct client_dirs *d)
{
	memset(d, 0, sizeof(*d));
	if (!upper_per_client(t) || !template_match(t->conf->upperdir, key, d))
		return false;
	d->named = d->host[0] != '\0';
	return snprintf(d->key, sizeof(d->key), "%s", key) < (int)sizeof(d->key) &&
	       srv_template_expand(t->conf->upperdir, d->addr, d->named ? d->host : NULL,
				   d->upper, sizeof(d->upper)) &&
	       strcmp(d->upper, key) == 0 &&
	       srv_template_expand(t->conf->workdir, d->addr, d->named ? d->host : NULL,
				   d->work, sizeof(d->work));
}

/* The part of dir template T before its first variable's component ("/srv/up"
 * of "/srv/up/%a"), resolved, into OUT: what an expansion must stay under. */
static bool template_base(const char *t, char *out)
{
	char fixed[PATH_MAX];
	const char *pct = strchr(t, '%');
	size_t n = pct ? (size_t)(pct - t) : strlen(t);

	while (n > 0 && t[n - 1] != '/')
		n--;
	if (n == 0 || n >= sizeof(fixed))
		return false;
	memcpy(fixed, t, n);
	fixed[n] = '\0';
	return realpath(fixed, out) != NULL;
}

/* True when DIR, template T's expansion, is a directory under T's fixed
 * part reached through no symlink in the part the client's names gave
 * (so that no name, and no link made in a layer, points a removal
 * elsewhere), and not "/".  WHY gets the reason when false. */
static bool dir_removable(const char *t, const char *dir, char *why, size_t len)
{
	char base[PATH_MAX], real[PATH_MAX], want[2 * PATH_MAX];
	const char *pct = strchr(t, '%');
	size_t fixed = pct ? (size_t)(pct - t) : 0;
	struct stat st;

	while (fixed > 0 && t[fixed - 1] != '/')
		fixed--;
	if (!pct || !template_base(t, base) || !realpath(dir, real) ||
	    lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		snprintf(why, len, "%s: not a directory of its template", dir);
		return false;
	}
	snprintf(want, sizeof(want), "%s%s%s", base, strcmp(base, "/") ? "/" : "",
		 dir + fixed);
	if (strcmp(real, want) != 0 || strcmp(real, "/") == 0 ||
	    strcmp(real, base) == 0) {
		snprintf(why, len, "%s: resolves to %s, not under %s: refused", dir, real,
			 base);
		return false;
	}
	return true;
}

/* Removes everything in directory FD (owned), never following a symlink
 * nor entering another filesystem than DEV; 0 or the first -errno. */
static int tree_empty(int fd, dev_t dev, unsigned depth)
{
	DIR *dir = fdopendir(fd);
	struct dirent *de;
	struct stat st;
	int rc = 0, sub;

	if (!dir) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(dir)) != NULL) {
		const char *n = de->d_name;
		int flags = 0;

		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 ||
		    fstatat(dirfd(dir), n, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			flags = AT_REMOVEDIR;
			sub =
			    st.st_dev != dev || depth >= RESET_DEPTH_MAX
				? -EXDEV
				: openat(dirfd(dir), n,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			sub = sub < 0 ? (sub == -1 ? -errno : sub)
				      : tree_empty(sub, dev, depth + 1);
			rc = rc ? rc : sub;
		}
		if (unlinkat(dirfd(dir), n, flags) < 0 && !rc)
			rc = -errno;
	}
	closedir(dir);
	return rc;
}

/* Empties client D's work dir, having moved its upper into it first (one
 * rename: the union never sees half an upper), or the upper in place when
 * that rename cannot be made. */
static int dirs_empty(const struct srv_export *t, const struct client_dirs *d, char *why,
		      size_t len)
{
	char aside[PATH_MAX];
	struct stat st;
	int rc = 0, fd;

	if (!dir_removable(t->conf->upperdir, d->upper, why, len) ||
	    !dir_removable(t->conf->workdir, d->work, why, len))
		return -EPERM;
	if (snprintf(aside, sizeof(aside), "%s/reset.%ld", d->work, (long)getpid()) >=
		(int)sizeof(aside) ||
	    rename(d->upper, aside) < 0)
		aside[0] = '\0';
	for (int k = 0; k < 2 && rc == 0; k++) {
		const char *dir = k == 0 ? d->work : d->upper;

		if (k == 1 && aside[0])
			break; /* the upper went with the work dir */
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		rc = fd < 0 ? -errno : fstat(fd, &st) < 0 ? -errno : 0;
		if (fd >= 0)
			rc = rc ? (close(fd), rc) : tree_empty(fd, st.st_dev, 0);
	}
	if (rc)
		snprintf(why, len, "%s: %s", d->work, strerror(-rc));
	return rc;
}

/* Closes I (RENEWING, or CLOSING when outdated; no pins), empties its dirs
 * when EMPTY (a reset), makes them again as its client's first MNT does
 * (when D names them), and takes I out of the registry: its client's next
 * call opens it afresh (rule 9). */
static int instance_renew(struct srv *s, struct srv_export *i,
			  const struct client_dirs *d, bool empty, char *why, size_t len)
{
	struct srv_export *t = i->parent;
	struct client_stack cs;
	int rc = 0;

	instance_union_close(i);
	if (empty)
		rc = dirs_empty(t, d, why, len);
	if (rc == 0 && d->work[0] && (rc = client_stack(t->conf, d, &cs)) == 0) {
		rc = cs.n ? client_dirs_make(cs.dirs[0], i, d->upper, d->work) : -ENOENT;
		client_stack_free(&cs);
		if (rc)
			snprintf(why, len, "%s: %s", d->upper, strerror(-rc));
	}
	pthread_mutex_lock(&s->unions.lock);
	registry_del(&s->unions, i);
	pthread_cond_broadcast(&s->unions.changed);
	pthread_mutex_unlock(&s->unions.lock);
	instance_free(i);
	return rc;
}

/* Marks I, found OPEN, RENEWING and waits out the calls that pin it. */
static void renew_take(struct srv_unions *u, struct srv_export *i)
{
	lru_unlink(u, i);
	i->state = SRV_UNION_RENEWING;
	while (i->pins)
		pthread_cond_wait(&u->changed, &u->lock);
}

/* Drops REQ's pin of I (under the lock); true as unpin_locked. */
static bool unpin_one(struct srv_req *req, struct srv_export *i)
{
	for (unsigned k = 0; k < req->npins; k++)
		if (req->pins[k] == i)
			req->pins[k] = req->pins[--req->npins];
	return unpin_locked(&req->srv->unions, i);
}

static bool instance_vanished(struct srv_req *req, struct srv_export *i)
{
	struct srv_unions *u = &req->srv->unions;
	char why[PATH_MAX + 64] = "";
	struct client_dirs d;
	bool renew;

	if (!i->ux || !req->writes || !un_export_vanished(i->ux))
		return false;
	pthread_mutex_lock(&u->lock);
	renew = unpin_one(req, i); /* outdated, now CLOSING: renewed all the same */
	if (!renew && i->state == SRV_UNION_OPEN) { /* else another call renews it */
		renew_take(u, i);
		renew = true;
	}
	pthread_mutex_unlock(&u->lock);
	if (!renew)
		return true;
	if (!key_dirs(i->parent, i->client_key, &d)) {
		snprintf(d.upper, sizeof(d.upper), "%s", i->client_key);
		d.work[0] = '\0';
	}
	rpc_log(RPC_LOG_WARN,
		"export %s: the upper %s or its work dir %s vanished while served: "
		"made again, the union reopened over the lowers",
		i->path, d.upper, d.work[0] ? d.work : "-");
	if (instance_renew(req->srv, i, &d, false, why, sizeof(why)) < 0)
		RPC_LOG_LIMITED(RPC_LOG_ERR, "export %s: cannot make the dirs again: %s",
				i->path, why);
	return true;
}

bool srv_export_gone(struct srv_export *ex)
{
	if (!un_export_vanished(ex->ux))
		return false;
	if (!ex->parent && !atomic_exchange(&ex->gone_logged, true))
		rpc_log(RPC_LOG_ERR,
			"export %s: its upper or work dir vanished while served: "
			"changes refused (NFS3ERR_ROFS) until the dirs are back and "
			"the server restarts",
			ex->path);
	return true;
}

/* What template T gives CLIENT (an address as %a expands it, a host name
 * as %h does, or an upper dir), into D; false when T has no upper of
 * CLIENT's (no per-client upper, or one that needs a name CLIENT is not). */
static bool reset_dirs(const struct srv_export *t, const char *client,
		       struct client_dirs *d)
{
	unsigned char bin[sizeof(struct in6_addr)];
	char addr[INET6_ADDRSTRLEN], key[PATH_MAX];
	bool v4 = inet_pton(AF_INET, client, bin) == 1;
	bool v6 = !v4 && inet_pton(AF_INET6, client, bin) == 1;

	if (!upper_per_client(t))
		return false;
	if (client[0] == '/')
		return key_dirs(t, client, d);
	if ((v4 || v6) && !inet_ntop(v4 ? AF_INET : AF_INET6, bin, addr, sizeof(addr)))
		return false;
	return srv_template_expand(t->conf->upperdir, v4 || v6 ? addr : NULL,
				   v4 || v6 ? NULL : client, key, sizeof(key)) &&
	       key_dirs(t, key, d);
}

/* Resets the union of template T over D's dirs, open or not (rule 9):
 * 1 when done, 0 when the client has no upper here, or -errno (WHY). */
static int reset_one(struct srv *s, struct srv_export *t, const struct client_dirs *d,
		     size_t *forgot, char *why, size_t len)
{
	struct srv_unions *u = &s->unions;
	struct srv_export *i;
	struct stat st;
	int rc = 0;

	*forgot = 0;
	if (lstat(d->upper, &st) < 0)
		return 0;
	pthread_mutex_lock(&u->lock);
	while ((i = find_key(t, d->key)) != NULL && i->state != SRV_UNION_OPEN)
		pthread_cond_wait(&u->changed, &u->lock);
	if (i) {
		renew_take(u, i);
	} else if ((i = instance_new(t, d)) != NULL) {
		i->state = SRV_UNION_RENEWING; /* no call opens it meanwhile */
		registry_add(u, i);
	}
	pthread_mutex_unlock(&u->lock);
	if (!i)
		return -ENOMEM;
	/* its nodes are forgotten through the union (rule 9) */
	if (!i->ux && (rc = instance_open(s, i, d)) < 0)
		snprintf(why, len, "cannot open the union over %s", d->upper);
	if (rc == 0 && (rc = un_export_forget_upper(i->ux, forgot)) < 0)
		snprintf(why, len, "the node table: %s", strerror(-rc));
	/* a union whose nodes could not be forgotten keeps its upper */
	rc = rc ? (instance_renew(s, i, d, false, why, len), rc)
		: instance_renew(s, i, d, true, why, len);
	return rc < 0 ? rc : 1;
}

/* True when CLIENT can name a client: an upper dir, or a name with no '/'
 * that is not "." or ".." (it becomes a path component). */
static bool client_arg_ok(const char *client)
{
	if (client[0] == '/')
		return true;
	return *client && !strchr(client, '/') && strcmp(client, ".") != 0 &&
	       strcmp(client, "..") != 0;
}

int srv_unions_reset(struct srv *s, const char *client, char *msg, size_t msglen)
{
	char why[2 * PATH_MAX + 128] = "";
	size_t n = 0, forgot, total = 0;
	struct client_dirs d;
	int rc = 0, one;

	if (!client_arg_ok(client)) {
		snprintf(msg, msglen,
			 "reset %s: not an address, a host name or an upper dir", client);
		return -EINVAL;
	}
	srv_exports_read_begin(s); /* rule 6 */
	for (size_t k = 0; k < s->nexports; k++) {
		struct srv_export *t = s->exports[k];

		if (t->ux || !reset_dirs(t, client, &d))
			continue;
		one = reset_one(s, t, &d, &forgot, why, sizeof(why));
		rc = rc ? rc : one < 0 ? one : 0;
		if (one <= 0)
			continue;
		n++;
		total += forgot;
		rpc_log(RPC_LOG_INFO,
			"export %s: union over upper %s reset: upper and work dir "
			"emptied, %zu handles of its own objects made stale",
			t->path, d.upper, forgot);
	}
	srv_exports_read_end(s);
	if (rc < 0)
		snprintf(msg, msglen, "reset %s: %s", client, why);
	else if (!n)
		snprintf(msg, msglen, "reset %s: no union of that client", client);
	else
		snprintf(msg, msglen,
			 "reset %s: %zu union%s reset, %zu handles made stale", client, n,
			 n == 1 ? "" : "s", total);
	return rc < 0 ? rc : n ? (int)n : -ENOENT;
}

/* ---- a new lower stack (srv_reload) ---- */

struct srv_restack {
	struct srv_export *t;
	size_t n, nswapped;
	struct restack_one {
		struct srv_export *i; /* pinned while its successor opens */
		uint64_t serial;      /* i->ux_serial then */
		struct un_export *ux; /* its successor; once swapped, its old union */
		struct un_stack_commit *commit; /* once swapped, its successor's */
	} * v;
	struct srv_export *dropped; /* opened over the old stack meanwhile */
};

/* What T gave the client of instance I when it opened, into D. */
static bool instance_dirs(const struct srv_export *t, const struct srv_export *i,
			  struct client_dirs *d)
{
	const char *host = i->client_host;

	memset(d, 0, sizeof(*d));
	snprintf(d->addr, sizeof(d->addr), "%s", i->client_addr);
	d->named = host != NULL;
	if (host)
		snprintf(d->host, sizeof(d->host), "%s", host);
	snprintf(d->key, sizeof(d->key), "%s", i->client_key);
	return client_dirs_expand(t, host, d);
}

/* Opens the successor of R's entry ONE over the stack CONF gives its client
 * (rule 8: its per-client lowers expanded and looked at again). */
static int restack_one(struct srv *s, const struct srv_restack *r,
		       struct restack_one *one, const struct srv_export_opts *conf,
		       char *err, size_t errlen)
{
	char id_path[MNTPATHLEN + PATH_MAX + CLIENT_ID_PATH_SLACK], msg[PATH_MAX + 256];
	struct client_dirs d;
	struct client_stack cs;
	struct un_export_cfg cfg = {
	    .path = id_path,
	    .no_layer_index = !s->cfg.layer_index,
	    .mem_bytes = union_share(s),
	};
	int rc;

	if (!instance_dirs(r->t, one->i, &d)) {
		snprintf(err, errlen, "export %s: union %s %s: a path too long",
			 r->t->path, key_phrase(r->t), one->i->client_key);
		return -ENAMETOOLONG;
	}
	cfg.upperdir = d.upper[0] ? d.upper : NULL;
	cfg.workdir = d.work[0] ? d.work : NULL;
	client_id_path(r->t, one->i->client_key, id_path, sizeof(id_path));
	rc = client_stack(conf, &d, &cs);
	if (rc < 0) {
		snprintf(err, errlen, "out of memory");
		return rc;
	}
	cfg.lowerdirs = cs.dirs;
	cfg.nlower = cs.n;
	stack_log(r->t, &d, &cs);
	rc = un_export_restack(one->i->ux, &cfg, &one->ux, msg, sizeof(msg));
	client_stack_free(&cs);
	if (rc < 0)
		snprintf(err, errlen, "export %s: union %s %s: %s", r->t->path,
			 key_phrase(r->t), one->i->client_key, msg);
	return rc;
}

/* Pins every open instance of R->t into R->v (rule 2: none is released
 * or renewed while the reload opens its successor). */
static int restack_pin(struct srv_unions *u, struct srv_restack *r)
{
	size_t n = 0;
	struct srv_export *i;

	pthread_mutex_lock(&u->lock);
	for (i = r->t->instances; i; i = i->next)
		n += i->state == SRV_UNION_OPEN;
	r->v = calloc(n ? n : 1, sizeof(*r->v));
	for (i = r->t->instances; i && r->v; i = i->next) {
		if (i->state != SRV_UNION_OPEN)
			continue;
		i->pins++;
		r->v[r->n].i = i;
		r->v[r->n++].serial = i->ux_serial;
	}
	pthread_mutex_unlock(&u->lock);
	return r->v ? 0 : -ENOMEM;
}

/* Drops restack_pin's pins, before the write lock (rule 11): R->v's
 * instances may go from now on, and are only compared, never used. */
static void restack_unpin(struct srv_unions *u, struct srv_restack *r)
{
	pthread_mutex_lock(&u->lock);
	for (size_t k = 0; k < r->n; k++) {
		/* pinned OPEN, so not outdated: no recheck runs before the
		 * swap (srv_reload) */
		assert(!r->v[k].i->outdated);
		r->v[k].i->pins--;
	}
	pthread_cond_broadcast(&u->changed); /* a renewal waits for pins */
	pthread_mutex_unlock(&u->lock);
}

int srv_unions_restack(struct srv *s, struct srv_export *t,
		       const struct srv_export_opts *conf, struct srv_restack **out,
		       char *err, size_t errlen)
{
	struct srv_restack *r = calloc(1, sizeof(*r));
	int rc = -ENOMEM;

	*out = r;
	if (!r || (r->t = t, restack_pin(&s->unions, r)) < 0) {
		snprintf(err, errlen, "out of memory");
		return rc;
	}
	rc = 0;
	for (size_t k = 0; k < r->n && rc == 0; k++)
		rc = restack_one(s, r, &r->v[k], conf, err, errlen);
	restack_unpin(&s->unions, r);
	return rc;
}

/* The entry of R whose successor was made from I's union as it is now. */
static struct restack_one *restack_find(struct srv_restack *r, const struct srv_export *i)
{
	for (size_t k = 0; k < r->n; k++)
		if (r->v[k].i == i && r->v[k].serial == i->ux_serial)
			return &r->v[k];
	return NULL;
}

void srv_unions_restack_swap(struct srv *s, struct srv_restack *r)
{
	struct srv_unions *u = &s->unions;
	struct srv_export *i, *next;
	struct restack_one *one;

	pthread_mutex_lock(&u->lock);
	/* No call runs (the write lock): every instance is OPEN. */
	for (i = r->t->instances; i; i = next) {
		struct un_export *ux = i->ux;

		next = i->next;
		assert(i->state == SRV_UNION_OPEN && !i->pins);
		one = restack_find(r, i);
		if (one) {
			i->ux = one->ux;
			one->ux = ux;
			/* the union may be released once the lock is let go */
			one->commit = un_export_commit_take(i->ux);
			un_stack_retire(one->commit); /* before a call uses it */
			r->nswapped++;
			continue;
		}
		registry_del(u, i);
		i->next = r->dropped;
		r->dropped = i;
	}
	pthread_mutex_unlock(&u->lock);
}

void srv_unions_restack_commit(struct srv_restack *r)
{
	char msg[PATH_MAX + 256];

	for (size_t k = 0; k < r->n; k++) {
		if (r->v[k].commit &&
		    un_stack_commit(r->v[k].commit, msg, sizeof(msg)) < 0)
			RPC_LOG_LIMITED(RPC_LOG_ERR,
					"reload: export %s: %s; the next reload pairs "
					"its layers with the older record",
					r->t->path, msg);
		r->v[k].commit = NULL;
	}
}

size_t srv_unions_restack_end(struct srv_restack *r)
{
	struct srv_export *i;
	size_t n;

	if (!r)
		return 0;
	for (size_t k = 0; k < r->n; k++) {
		un_export_close(r->v[k].ux);
		un_stack_commit_drop(r->v[k].commit);
	}
	while ((i = r->dropped) != NULL) {
		r->dropped = i->next;
		RPC_LOG_LIMITED(RPC_LOG_INFO,
				"export %s: union %s %s released (opened over the old "
				"layers during a reload)",
				i->path, key_phrase(i->parent), i->client_key);
		instance_free(i);
	}
	n = r->nswapped;
	free(r->v);
	free(r);
	return n;
}
