/* unions.c - client unions: opened on demand, pinned by the calls that use
 * them, released when idle or over the cap.
 *
 * A per-client export (its upperdir holds %a or %h) is a template; each
 * client's union is an instance of it over the upper and work dirs the
 * template gives that client.  An open instance holds 2 * layers + 2
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
 *     dropped by srv_unions_unpin once the reply is encoded (srv_rpc_handle).
 *     Only an OPEN instance without pins is released.
 *  3. One union per upper dir: an instance is in its template's list from
 *     before it opens (OPENING) until after it is closed (CLOSING), and a
 *     caller that meets its key or id in either state waits on
 *     unions.changed.  Two unions over one work dir would empty each other's
 *     temps (un_work_open).
 *  4. A released union reopens with the same export id (client_id_path, the
 *     id is known before the union opens) and so with the same handles: its
 *     node ids live in the shared node table, not in the union.
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
 */
#define _GNU_SOURCE
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "srv.h"

#define UNIONS_MIN	     16 /* default cap, at least */
#define REAP_PERIOD_MAX_S    15 /* the reaper looks at least this often */
#define CLIENT_ID_PATH_SLACK 32 /* " (client upper )" around the dir */

/* ---- the dirs a template gives a client ---- */

/* The upper and work dirs template T gives PEER, into UPPER and WORK. */
static bool client_dirs(struct srv *s, const struct srv_export *t,
			const struct sockaddr_storage *peer, char *upper, char *work,
			size_t len)
{
	char addr[INET6_ADDRSTRLEN], host[NI_MAXHOST];
	bool named = false;

	srv_addr_str(peer, false, addr, sizeof(addr));
	if (strstr(t->conf->upperdir, "%h") || strstr(t->conf->workdir, "%h"))
		named = srv_peer_name(s->names, peer, host, sizeof(host));
	return srv_template_expand(t->conf->upperdir, addr, named ? host : NULL, upper,
				   len) &&
	       srv_template_expand(t->conf->workdir, addr, named ? host : NULL, work,
				   len);
}

/* What the export id of template T's union over UPPER hashes: one id per
 * export path and upper dir, so a client's handles name its own union and
 * no other. */
static void client_id_path(const struct srv_export *t, const char *upper, char *out,
			   size_t len)
{
	snprintf(out, len, "%s (client upper %s)", t->path, upper);
}

static uint32_t client_id(const struct srv_export *t, const char *upper)
{
	char id_path[MNTPATHLEN + PATH_MAX + CLIENT_ID_PATH_SLACK];

	client_id_path(t, upper, id_path, sizeof(id_path));
	return un_export_id_of(id_path);
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

/* Creates a client's upper (as the top lower's root: the merged root shows
 * the upper's mode and owner, as in overlayfs) and its private work dir;
 * I's made_upper and made_work say what was new. */
static int client_dirs_make(const struct srv_export *t, struct srv_export *i,
			    const char *upper, const char *work)
{
	struct stat st;
	int rc;

	if (stat(t->conf->lowerdirs[0], &st) < 0)
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

/* Removes what client_dirs_make made for I, and the temp dir the union
 * makes in the work dir (un_work_open), when empty. */
static void client_dirs_unmake(const struct srv_export *i, const char *work)
{
	char sub[PATH_MAX];

	if (i->made_work && snprintf(sub, sizeof(sub), "%s/work", work) < PATH_MAX)
		rmdir(sub);
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
		srv_log(SRV_LOG_ERR, "a call pins more than %d client unions",
			SRV_REQ_PINS);
		abort();
	}
	req->pins[req->npins++] = i;
	i->pins++;
	i->last_used = now_s();
	if (i->state == SRV_UNION_OPEN)
		lru_touch(&req->srv->unions, i);
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
		if (s->exports[k]->ux && un_export_id(s->exports[k]->ux) == i->id)
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

static void instance_free(struct srv_export *i)
{
	if (i->ux)
		un_export_close(i->ux);
	free(i->made_upper);
	free(i->made_work);
	free(i->client_key);
	free(i->path);
	free(i);
}

/* Closes I (CLOSING, taken out of the LRU under the lock) and takes it out
 * of its template's list. */
static void instance_release(struct srv *s, struct srv_export *i)
{
	un_export_close(i->ux);
	i->ux = NULL;
	pthread_mutex_lock(&s->unions.lock);
	registry_del(&s->unions, i);
	pthread_cond_broadcast(&s->unions.changed);
	pthread_mutex_unlock(&s->unions.lock);
	SRV_LOG_LIMITED(SRV_LOG_INFO, "export %s: union over upper %s released", i->path,
			i->client_key);
	instance_free(i);
}

/* ---- opening ---- */

/* A new OPENING instance of T over UPPER, or NULL. */
static struct srv_export *instance_new(struct srv_export *t, const char *upper)
{
	struct srv_export *i = calloc(1, sizeof(*i));

	if (!i)
		return NULL;
	i->parent = t;
	i->state = SRV_UNION_OPENING;
	i->id = client_id(t, upper);
	i->path = strdup(t->path);
	i->client_key = strdup(upper);
	if (!i->path || !i->client_key) {
		instance_free(i);
		return NULL;
	}
	return i;
}

/* Opens I's union over WORK, making the dirs first (outside the lock). */
static int instance_open(struct srv *s, struct srv_export *i, const char *work)
{
	struct srv_export *t = i->parent;
	char id_path[MNTPATHLEN + PATH_MAX + CLIENT_ID_PATH_SLACK], err[PATH_MAX + 512];
	struct un_export_cfg cfg = {
	    .path = id_path,
	    .upperdir = i->client_key,
	    .workdir = work,
	    .lowerdirs = (const char *const *)t->conf->lowerdirs,
	    .nlower = t->conf->nlower,
	};
	int rc;

	client_id_path(t, i->client_key, id_path, sizeof(id_path));
	rc = client_dirs_make(t, i, i->client_key, work);
	if (rc < 0)
		snprintf(err, sizeof(err), "%s: %s", i->client_key, strerror(-rc));
	else
		rc = un_export_open(s->state, &cfg, &i->ux, err, sizeof(err));
	if (rc < 0) {
		client_dirs_unmake(i, work);
		SRV_LOG_LIMITED(SRV_LOG_ERR,
				"export %s: cannot open the union of client upper %s: %s",
				t->path, i->client_key, err);
	}
	return rc;
}

/* Opens the OPENING instance I (pinned for REQ), releasing a victim first
 * when the cap is reached, and settles it: OPEN and in the LRU, or gone.
 * Returns I, or NULL. */
static struct srv_export *instance_settle(struct srv_req *req, struct srv_export *i,
					  struct srv_export *victim, const char *work)
{
	struct srv *s = req->srv;
	int rc;

	if (victim)
		instance_release(s, victim);
	rc = instance_open(s, i, work);
	pthread_mutex_lock(&s->unions.lock);
	if (rc == 0) {
		i->state = SRV_UNION_OPEN;
		i->last_used = now_s();
		lru_touch(&s->unions, i);
		known_add(&s->unions, i->id);
		if (s->unions.nopen > s->unions.cap)
			pthread_cond_signal(&s->unions.wake); /* rule 5 */
	} else {
		registry_del(&s->unions, i);
		req->npins--; /* pinned last, by instance_get */
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
	char upper[PATH_MAX], work[PATH_MAX], addr[INET6_ADDRSTRLEN];
	struct srv_unions *u = &req->srv->unions;
	struct srv_export *i, *victim = NULL;
	struct stat st;

	if (!client_dirs(req->srv, t, req->peer, upper, work, sizeof(upper))) {
		SRV_LOG_LIMITED(
		    SRV_LOG_WARN,
		    "export %s: client %s: no upper dir (no host name for %%h, "
		    "or a path too long)",
		    t->path, srv_addr_str(req->peer, false, addr, sizeof(addr)));
		return NULL;
	}
	if (!create && stat(upper, &st) < 0)
		return NULL;
	pthread_mutex_lock(&u->lock);
	while ((i = find_key(t, upper)) != NULL && i->state != SRV_UNION_OPEN)
		pthread_cond_wait(&u->changed, &u->lock);
	if (i) {
		pin_locked(req, i);
		pthread_mutex_unlock(&u->lock);
		return i;
	}
	i = instance_new(t, upper);
	if (i && id_taken(req->srv, i)) {
		SRV_LOG_LIMITED(SRV_LOG_ERR,
				"export %s: the union of client upper %s: its export id "
				"collides with another's",
				t->path, upper);
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
	i = instance_settle(req, i, victim, work);
	if (i)
		SRV_LOG_LIMITED(
		    SRV_LOG_INFO, "export %s: client %s: union over upper %s", t->path,
		    srv_addr_str(req->peer, false, addr, sizeof(addr)), upper);
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

	pthread_mutex_lock(&u->lock);
	while ((i = find_id(u, id)) != NULL && i->state != SRV_UNION_OPEN)
		pthread_cond_wait(&u->changed, &u->lock);
	if (i)
		pin_locked(req, i);
	pthread_mutex_unlock(&u->lock);
	return i;
}

struct srv_export *srv_export_for_handle(struct srv_req *req, uint32_t export_id)
{
	struct srv *s = req->srv;
	char upper[PATH_MAX], work[PATH_MAX], host[NI_MAXHOST];
	struct srv_export *ex, *t;
	bool named;

	for (size_t k = 0; k < s->nexports; k++)
		if (s->exports[k]->ux && un_export_id(s->exports[k]->ux) == export_id)
			return s->exports[k];
	ex = instance_by_id(req, export_id);
	/* Released, or not opened since the start: reopened only for its own
	 * client, whose dirs give its id (rule 4). */
	for (size_t k = 0; !ex && req->peer && k < s->nexports; k++) {
		t = s->exports[k];
		if (t->ux)
			continue;
		named = t->clients.need_name &&
			srv_peer_name(s->names, req->peer, host, sizeof(host));
		if (srv_clients_match(&t->clients, req->peer, named ? host : NULL) &&
		    client_dirs(s, t, req->peer, upper, work, sizeof(upper)) &&
		    client_id(t, upper) == export_id)
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
	char upper[PATH_MAX], work[PATH_MAX];
	struct srv_export *i;

	for (size_t k = 0; req->peer && k < s->nexports; k++) {
		if (s->exports[k]->ux || (t && s->exports[k] != t) ||
		    !client_dirs(s, s->exports[k], req->peer, upper, work, sizeof(upper)))
			continue;
		pthread_mutex_lock(&s->unions.lock);
		i = find_key(s->exports[k], upper);
		if (i)
			i->mounted = false;
		pthread_mutex_unlock(&s->unions.lock);
	}
}

void srv_export_abandon(struct srv_req *req, struct srv_export *i)
{
	struct srv *s = req->srv;
	char work[PATH_MAX], upper[PATH_MAX];
	bool drop;

	if (!i->parent ||
	    !client_dirs(s, i->parent, req->peer, upper, work, sizeof(work)))
		return;
	pthread_mutex_lock(&s->unions.lock);
	/* only dirs this open made, when nothing else came to use them */
	drop = i->made_upper && i->state == SRV_UNION_OPEN && i->pins == 1 && !i->mounted;
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
	un_export_close(i->ux);
	i->ux = NULL;
	client_dirs_unmake(i, work);
	pthread_mutex_lock(&s->unions.lock);
	registry_del(&s->unions, i);
	pthread_cond_broadcast(&s->unions.changed);
	pthread_mutex_unlock(&s->unions.lock);
	instance_free(i);
}

void srv_unions_unpin(struct srv_req *req)
{
	struct srv_unions *u = &req->srv->unions;

	if (!req->npins)
		return;
	pthread_mutex_lock(&u->lock);
	for (unsigned k = 0; k < req->npins; k++)
		req->pins[k]->pins--;
	if (u->nopen > u->cap)
		pthread_cond_signal(&u->wake); /* rule 5 */
	pthread_mutex_unlock(&u->lock);
	req->npins = 0;
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

/* The export ids of the client unions whose upper dirs template T can give
 * and that exist on disk, into U's known ids. */
static void template_read_ids(struct srv_unions *u, const struct srv_export *t)
{
	char pattern[PATH_MAX * 2];
	glob_t g;

	if (!template_glob(t->conf->upperdir, pattern, sizeof(pattern)) ||
	    glob(pattern, GLOB_ONLYDIR | GLOB_NOSORT, NULL, &g) != 0)
		return;
	for (size_t k = 0; k < g.gl_pathc; k++) {
		uint32_t id = client_id(t, g.gl_pathv[k]);

		pthread_mutex_lock(&u->lock);
		known_add(u, id);
		pthread_mutex_unlock(&u->lock);
	}
	globfree(&g);
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
	char upper[PATH_MAX], work[PATH_MAX], addr[INET6_ADDRSTRLEN + 16];

	if (!ex->parent)
		return true;
	if (req->peer &&
	    client_dirs(req->srv, ex->parent, req->peer, upper, work, sizeof(upper)) &&
	    strcmp(upper, ex->client_key) == 0)
		return true;
	SRV_LOG_LIMITED(
	    SRV_LOG_WARN, "NFS call from %s with a handle of the union of %s: refused",
	    req->peer ? srv_addr_str(req->peer, true, addr, sizeof(addr)) : "-",
	    ex->client_key);
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
		at.tv_sec += period;
		pthread_cond_timedwait(&u->wake, &u->lock, &at);
		if (u->stop)
			break;
		pthread_mutex_unlock(&u->lock);
		reap_once(s);
		pthread_mutex_lock(&u->lock);
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

void srv_unions_limits(struct srv *s)
{
	unsigned long fds = 1024, per = union_fds_max(s), cap;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		fds =
		    rl.rlim_cur == RLIM_INFINITY ? 1ul << 20 : (unsigned long)rl.rlim_cur;
	cap = per ? fds / SRV_UNIONS_FDS_PART / per : UNIONS_MIN;
	cap = cap < UNIONS_MIN ? UNIONS_MIN : cap;
	pthread_mutex_lock(&s->unions.lock);
	s->unions.cap =
	    s->cfg.max_client_unions ? s->cfg.max_client_unions : (unsigned)cap;
	s->unions.idle = s->cfg.client_union_idle;
	s->unions.nknown = 0; /* the templates may have changed: read again */
	s->unions.known_read = 0;
	pthread_cond_signal(&s->unions.wake);
	pthread_mutex_unlock(&s->unions.lock);
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
