/* SPDX-License-Identifier: Apache-2.0 */
/* table.c - the server object: state dir, export table, write verifier,
 * mounts.
 *
 * Design notes
 *
 * struct srv is built once at start-up (srv_open) and torn down once at exit
 * (srv_close).  In between, SIGHUP may replace its export table (srv_reload),
 * a per-client export opens and releases its clients' unions (unions.c),
 * and the mount list changes under mounts_lock (mnt3_proc.c).
 *
 * Invariants:
 *  1. A call finds exports only while it holds exports_lock for reading
 *     (srv_exports_read_begin, taken by srv_call_serve for the whole call), so
 *     every export, rule and instance it found stays open until its reply is
 *     encoded.  srv_reload opens every new export before taking the lock for
 *     writing, swaps the table and the rules of kept exports under it, and
 *     closes what it dropped after releasing it (reload_swap): calls wait at
 *     most for the swap, never for layers to open, and no call ever sees a
 *     half-built table.  The lock prefers writers, so a steady stream of calls
 *     cannot keep a reload out.
 *  2. A reload that fails anywhere before the swap changes nothing
 *     (srv_reload, reload_free): the old table keeps serving, and no
 *     stack record is written nor layer retired (union/layerid.c rule 5):
 *     the unions it opened defer both (defer_commit, un_export_restack)
 *     to the swap, which retires the layers they left under the write
 *     lock (un_stack_retire: an old handle finds its layer served or
 *     retired), and reload_commit, which then writes the records.
 *  3. An export whose path, layers and dirs did not change is kept as it is
 *     (same union, same handles, same client unions); only its rules are
 *     replaced (reload_one).  One whose lower stack alone changed (same
 *     path, upper and work dirs or templates) is kept too, with its
 *     counters and its client unions: its union, or each open client
 *     union of a template (its per-client lowers expanded again), gets a
 *     successor over the new lowers that takes over the upper and work
 *     dirs (un_export_restack), opened before the write lock and swapped
 *     under it (reload_restack, reload_entry_swap), so each call sees the
 *     old stack or the new one; a client union opened meanwhile over the
 *     old stack is released at the swap (srv_unions_restack_swap).  One
 *     whose upper or work dir changed is a new union under the same path
 *     (logged "reopened"), so the same export id, and its clients' handles
 *     stay valid.
 *  4. A client's union of a per-client export is named by the export path
 *     and the upper dir the template gives that client, or without one by
 *     the client's names its per-client lowers use (unions.c): its
 *     export id, and so its handles, are its own.  A handle of one client's
 *     union is refused to every caller whose template expansion differs
 *     (srv_export_is_callers), even one the export's rules admit.
 *  5. Client unions open and close while serving, under the rules of
 *     unions.c: a call pins each one it uses until its reply is encoded,
 *     and a template frees its client unions when it is freed itself.
 */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exports.h"

/* Copies PATH into OUT with runs of '/' collapsed and no trailing '/' (except
 * for "/" itself).  False when it does not fit or is not absolute. */
static bool normalise_path(const char *path, char *out, size_t len)
{
	size_t n = 0;

	if (path[0] != '/')
		return false;
	for (const char *p = path; *p; p++) {
		if (*p == '/' && n > 0 && out[n - 1] == '/')
			continue;
		if (n + 1 >= len)
			return false;
		out[n++] = *p;
	}
	if (n > 1 && out[n - 1] == '/')
		n--;
	out[n] = '\0';
	return true;
}

struct srv_export *srv_export_by_path(struct srv *s, const char *path)
{
	char norm[MNTPATHLEN + 1];

	if (!normalise_path(path, norm, sizeof(norm)))
		return NULL;
	for (size_t i = 0; i < s->nexports; i++)
		if (strcmp(s->exports[i]->path, norm) == 0)
			return s->exports[i];
	return NULL;
}

/* True if export path EP is PATH or a leading part of it; *rest gets the part
 * of PATH below EP, without its leading slashes. */
static bool export_covers(const char *ep, const char *path, const char **rest)
{
	size_t n = strlen(ep);

	if (strcmp(ep, "/") == 0)
		n = 0;
	else if (strncmp(ep, path, n) != 0 || (path[n] != '/' && path[n] != '\0'))
		return false;
	while (path[n] == '/')
		n++;
	*rest = path + n;
	return true;
}

struct srv_export *srv_export_containing(struct srv *s, const char *path, char *rest,
					 size_t restlen)
{
	char norm[MNTPATHLEN + 1];
	struct srv_export *best = NULL;
	const char *best_rest = NULL, *r;

	if (!normalise_path(path, norm, sizeof(norm)))
		return NULL;
	for (size_t i = 0; i < s->nexports; i++) {
		if (!export_covers(s->exports[i]->path, norm, &r))
			continue;
		if (!best || strlen(s->exports[i]->path) > strlen(best->path)) {
			best = s->exports[i];
			best_rest = r;
		}
	}
	if (best && (size_t)snprintf(rest, restlen, "%s", best_rest) >= restlen)
		return NULL;
	return best;
}

/* ---- opening and closing exports ---- */

/* Frees export EX of S (a template with its client unions). */
static void export_free(struct srv *s, struct srv_export *ex)
{
	if (!ex)
		return;
	srv_unions_drop_template(s, ex);
	if (ex->ux)
		un_export_close(ex->ux);
	srv_clients_free(&ex->clients);
	if (ex->conf)
		srv_export_opts_free(ex->conf);
	free(ex->conf);
	free(ex->path);
	srv_counts_export_free(ex);
	free(ex);
}

/* Parses EO's client rules (the loopback default when it has none). */
static int export_clients(const struct srv_export_opts *eo, struct srv_clients *out,
			  char *err, size_t errlen)
{
	char msg[300];

	if (srv_clients_parse(eo->clients ? eo->clients : SRV_LOOPBACK_CLIENTS, out, msg,
			      sizeof(msg)) < 0) {
		snprintf(err, errlen, "export %s: clients: %s", eo->path, msg);
		return -EINVAL;
	}
	return 0;
}

/* A per-client export opens no union before its first client, but its shared
 * lower layers must be there now: a typo must stop the start, not the first
 * MNT.  A per-client lower may be missing (unions.c, client_stack). */
static int template_check(const struct srv_export_opts *eo, char *err, size_t errlen)
{
	struct stat st;

	for (size_t i = 0; i < eo->nlower; i++) {
		const char *why = NULL;

		if (srv_is_template(eo->lowerdirs[i]))
			continue;
		if (stat(eo->lowerdirs[i], &st) < 0)
			why = strerror(errno);
		else if (!S_ISDIR(st.st_mode))
			why = "not a directory";
		if (why) {
			snprintf(err, errlen, "export %s: lowerdir %s: %s", eo->path,
				 eo->lowerdirs[i], why);
			return -ENOTDIR;
		}
	}
	return 0;
}

/* Opens export EO into *OUT: its union, or for a per-client export only its
 * template (instances open on demand).  RELOAD: a layer index that cannot
 * be had fails the open (the reload changes nothing); at start it leaves
 * the export known by inode numbers (un_export_cfg.index_best_effort). */
/* The union EO configures, served at PATH (its normalised path). */
static struct un_export_cfg export_cfg(const struct srv *s,
				       const struct srv_export_opts *eo, const char *path)
{
	return (struct un_export_cfg){
	    .path = path,
	    .upperdir = eo->upperdir,
	    .workdir = eo->workdir,
	    .lowerdirs = (const char *const *)eo->lowerdirs,
	    .nlower = eo->nlower,
	    .no_layer_index = !s->cfg.layer_index,
	    .id_name = eo->fsid,
	    /* A fixed upper moves between gateways as a client's does
	     * (unions.c rule 14): its nodes go with its work dir, or a handle
	     * of a file made through one gateway would name another's on the
	     * next, whose counter hands out the same ids. */
	    .own_table = s->union_tables,
	    .lower_ids = true, /* lowerid.c rule 1 */
	};
}

static int export_open(struct srv *s, const struct srv_export_opts *eo, bool reload,
		       struct srv_export **out, char *err, size_t errlen)
{
	struct srv_export *ex = calloc(1, sizeof(*ex));
	char norm[MNTPATHLEN + 1];
	struct un_export_cfg cfg = export_cfg(s, eo, norm);
	int rc = -ENOMEM;

	cfg.index_best_effort = !reload;
	cfg.defer_commit = reload; /* reload_commit, once it serves */
	if (!ex)
		goto fail_msg;
	ex->conf = calloc(1, sizeof(*ex->conf));
	if (!ex->conf || srv_export_opts_copy(ex->conf, eo) < 0)
		goto fail_msg;
	rc = -EINVAL;
	if (!normalise_path(eo->path, norm, sizeof(norm))) {
		snprintf(err, errlen, "export path %s: not an absolute path", eo->path);
		goto fail;
	}
	rc = -ENOMEM;
	ex->path = strdup(norm);
	if (!ex->path)
		goto fail_msg;
	rc = export_clients(eo, &ex->clients, err, errlen);
	if (rc < 0)
		goto fail;
	if (srv_export_per_client(eo))
		rc = template_check(eo, err, errlen);
	else if ((rc = un_export_open(s->state, &cfg, &ex->ux, err, errlen)) == 0)
		ex->id = un_export_id(ex->ux);
	if (rc < 0)
		goto fail;
	*out = ex;
	return 0;
fail_msg:
	snprintf(err, errlen, "out of memory");
fail:
	export_free(s, ex);
	return rc;
}

/* False (with ERR) when two exports of TAB share a path or an export id. */
static bool table_check(struct srv_export *const *tab, size_t n, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < i; j++) {
			if (strcmp(tab[i]->path, tab[j]->path) == 0) {
				snprintf(err, errlen, "export path %s: exported twice",
					 tab[i]->path);
				return false;
			}
			if (tab[i]->ux && tab[j]->ux &&
			    un_export_id(tab[i]->ux) == un_export_id(tab[j]->ux)) {
				snprintf(err, errlen,
					 "export path %s: its id collides with %s's",
					 tab[i]->path, tab[j]->path);
				return false;
			}
		}
	}
	return true;
}

/* ---- the server ---- */

/* The node table's failures (un_state_on_error), logged under a limit:
 * a full disk under the state dir fails the LOOKUP of every name
 * not seen before, and a line for each would bury the log. */
static void log_table_error(int err, const char *what, const char *dir)
{
	static struct rpc_log_limit limit;
	char buf[128];

	rpc_log_limited(
	    &limit, RPC_LOG_ERR,
	    "node table in %s: %s failed: %s; calls that need a new node fail", dir, what,
	    strerror_r(-err, buf, sizeof(buf)));
}

/* What the engine tells an admin (un_state_on_notice): a layer index
 * built, with its time. */
static void log_notice(const char *line)
{
	rpc_log(RPC_LOG_INFO, "%s", line);
}

/* Writers first: a reload waiting for the lock must not wait for a lull in a
 * stream of calls that never comes. */
static void exports_lock_init(pthread_rwlock_t *l)
{
	pthread_rwlockattr_t a;

	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(l, &a);
	pthread_rwlockattr_destroy(&a);
}

/* The indexes of layers that left every stack go (layerid.c rule 9);
 * with --no-layer-index no stack is recorded, so all are kept for when
 * it is turned on again. */
void srv_sweep_indexes(struct srv *s)
{
	if (s->cfg.layer_index)
		un_state_sweep_indexes(s->state);
}

/* Opens the state dir with the key file, if any; ERR names which of the
 * two failed. */
static int state_open(struct srv *s, const struct srv_opts *o, char *err, size_t errlen)
{
	int rc = un_state_open_keyed(o->state_dir, o->key_file, &s->state);
	struct stat sb;

	/* unions.c rule 14: only then can a client union's handles move */
	s->union_tables = o->key_file && o->cfg.layer_index;
	if (rc >= 0)
		return rc;
	if (o->key_file && (rc == -EACCES || rc == -EINVAL))
		snprintf(err, errlen,
			 "key file %s: must be a file of 32 bytes, mode 0600",
			 o->key_file);
	else if (o->key_file && stat(o->key_file, &sb))
		snprintf(err, errlen, "key file %s: %s", o->key_file, strerror(errno));
	else
		snprintf(err, errlen, "state dir %s: %s", o->state_dir, strerror(-rc));
	return rc;
}

int srv_open(struct srv *s, const struct srv_opts *o, char *err, size_t errlen)
{
	int rc;

	s->cfg = o->cfg;
	srv_unions_init(s);
	pthread_mutex_init(&s->mounts_lock, NULL);
	exports_lock_init(&s->exports_lock);
	/* Random per start, so a client that sees it change resends unstable writes. */
	rc = -EIO;
	if (getrandom(s->write_verf, sizeof(s->write_verf), 0) != sizeof(s->write_verf)) {
		snprintf(err, errlen, "cannot draw the write verifier: %s",
			 strerror(errno));
		goto fail;
	}
	rc = srv_names_new(&s->names);
	if (rc < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	rc = state_open(s, o, err, errlen);
	if (rc < 0)
		goto fail;
	un_state_on_error(s->state, log_table_error);
	un_state_on_notice(s->state, log_notice);
	un_state_retire_time(s->state, o->cfg.retire_time);
	rc = -ENOMEM;
	s->exports = calloc(o->nexports ? o->nexports : 1, sizeof(*s->exports));
	if (!s->exports) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < o->nexports; i++) {
		rc = export_open(s, &o->exports[i], false, &s->exports[i], err, errlen);
		if (rc < 0)
			goto fail;
		s->nexports++;
		rc = -EEXIST;
		if (!table_check(s->exports, s->nexports, err, errlen))
			goto fail;
	}
	rc = srv_unions_start(s);
	if (rc < 0) {
		snprintf(err, errlen, "cannot start the client union reaper: %s",
			 strerror(-rc));
		goto fail;
	}
	srv_sweep_indexes(s);
	return 0;
fail:
	srv_close(s);
	return rc;
}

void srv_close(struct srv *s)
{
	srv_unions_stop(s);
	for (size_t i = 0; i < s->nexports; i++)
		export_free(s, s->exports[i]);
	free(s->exports);
	if (s->state)
		un_state_close(s->state);
	free(s->mounts);
	pthread_mutex_destroy(&s->mounts_lock);
	pthread_rwlock_destroy(&s->exports_lock);
	srv_names_free(s->names);
	srv_unions_fini(s);
	memset(s, 0, sizeof(*s));
}

/* ---- reload ---- */

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Which of a client's names (%a: 1, %h: 2) DIR (NULL: none) uses. */
static unsigned dir_names(const char *dir)
{
	return (srv_template_uses(dir, 'a') ? 1u : 0u) |
	       (srv_template_uses(dir, 'h') ? 2u : 0u);
}

/* Which of a client's names the dirs of C use: they make the key, and so
 * the export id, of a client union without a per-client upper (unions.c,
 * rule 8), and the names a client union keeps for a new stack. */
static unsigned client_names(const struct srv_export_opts *c)
{
	unsigned m = dir_names(c->upperdir);

	for (size_t i = 0; i < c->nlower; i++)
		m |= dir_names(c->lowerdirs[i]);
	return m;
}

/* True when OLD is export EO (path NORM) with the same upper and work dirs,
 * and its client unions the same keys: a new lower stack is then put under
 * it in place (reload_restack). */
static bool same_dirs(const struct srv_export *old, const struct srv_export_opts *eo,
		      const char *norm)
{
	const struct srv_export_opts *c = old->conf;

	return strcmp(old->path, norm) == 0 && same_str(c->upperdir, eo->upperdir) &&
	       same_str(c->workdir, eo->workdir) && same_str(c->fsid, eo->fsid) &&
	       srv_export_per_client(c) == srv_export_per_client(eo) &&
	       client_names(c) == client_names(eo);
}

/* True when OLD can go on serving as EO says: same path, layers and dirs. */
static bool same_union(const struct srv_export *old, const struct srv_export_opts *eo,
		       const char *norm)
{
	const struct srv_export_opts *c = old->conf;

	if (!same_dirs(old, eo, norm) || c->nlower != eo->nlower)
		return false;
	for (size_t i = 0; i < c->nlower; i++)
		if (strcmp(c->lowerdirs[i], eo->lowerdirs[i]) != 0)
			return false;
	return true;
}

static void warn_restart_settings(const struct srv *s, const struct srv_opts *o)
{
	const struct srv_config *a = &s->cfg, *b = &o->cfg;

	if (a->nfs_port != b->nfs_port || a->mount_port != b->mount_port ||
	    a->nthreads != b->nthreads || !same_str(a->bind_addr, b->bind_addr) ||
	    a->max_conns != b->max_conns ||
	    a->max_conns_per_addr != b->max_conns_per_addr ||
	    a->idle_timeout != b->idle_timeout ||
	    a->max_client_unions != b->max_client_unions ||
	    a->client_union_idle != b->client_union_idle ||
	    a->client_unions_memory != b->client_unions_memory ||
	    a->layer_index != b->layer_index)
		rpc_log(RPC_LOG_WARN,
			"reload: ports, bind address, threads, connection "
			"and client union limits, layer-index change only with a "
			"restart; the running ones stay");
}

/* A reload's retire-time: applied at once, which releases the retired
 * layers already older than a shorter one (union/retire.c). */
static void retire_time_reload(struct srv *s, unsigned seconds)
{
	if (seconds != s->cfg.retire_time)
		rpc_log(RPC_LOG_INFO, "reload: retire-time %u s (was %u s)", seconds,
			s->cfg.retire_time);
	s->cfg.retire_time = seconds;
	un_state_retire_time(s->state, seconds);
}

/* What a reload prepares before it swaps, for each new export: an old one
 * kept (with its new rules and conf, and when only its lowers changed their
 * successor unions), or a new one. */
struct reload_entry {
	bool kept;			/* tab[i] is an old export */
	struct srv_clients clients;	/* kept: its new rules */
	struct srv_export_opts *conf;	/* kept: its new conf */
	bool restacked;			/* kept over a new lower stack */
	struct un_export *ux;		/* restacked: the successor union, and
					 * after the swap the old one */
	struct srv_restack *insts;	/* restacked template: its client unions */
	struct un_stack_commit *commit; /* its new union's, once swapped in
					 * (reload_commit) */
};
struct reload {
	struct srv_export **tab; /* the new table */
	struct reload_entry *e;
	size_t n;
};

static void reload_free(struct srv *s, struct reload *r, bool swapped)
{
	for (size_t i = 0; i < r->n; i++) {
		struct reload_entry *e = &r->e[i];

		if (!e->kept && !swapped)
			export_free(s, r->tab[i]);
		srv_clients_free(&e->clients);
		if (e->conf)
			srv_export_opts_free(e->conf);
		free(e->conf);
		if (e->ux)
			un_export_close(e->ux);
		un_stack_commit_drop(e->commit);
		srv_unions_restack_end(e->insts);
	}
	free(r->tab);
	free(r->e);
}

/* Prepares E, an old export kept, with the rules and conf of EO. */
static int reload_keep(struct reload_entry *e, const struct srv_export_opts *eo,
		       char *err, size_t errlen)
{
	int rc;

	e->conf = calloc(1, sizeof(*e->conf));
	rc = e->conf ? srv_export_opts_copy(e->conf, eo) : -ENOMEM;
	if (rc < 0) {
		free(e->conf);
		e->conf = NULL;
		snprintf(err, errlen, "out of memory");
		return rc;
	}
	return export_clients(eo, &e->clients, err, errlen);
}

/* Prepares E to serve OLD over the lowers of EO: the successor of its union,
 * or of each client union of a template (invariant 3). */
static int reload_restack(struct srv *s, struct reload_entry *e, struct srv_export *old,
			  const struct srv_export_opts *eo, char *err, size_t errlen)
{
	char msg[PATH_MAX + 256];
	struct un_export_cfg cfg = export_cfg(s, eo, old->path);
	int rc;

	e->restacked = true;
	if (!old->ux) {
		rc = template_check(eo, err, errlen);
		return rc ? rc : srv_unions_restack(s, old, eo, &e->insts, err, errlen);
	}
	rc = un_export_restack(old->ux, &cfg, &e->ux, msg, sizeof(msg));
	if (rc < 0)
		snprintf(err, errlen, "export %s: %s", old->path, msg);
	return rc;
}

/* Prepares export EO of the new configuration as R's entry N. */
static int reload_one(struct srv *s, struct reload *r, const struct srv_export_opts *eo,
		      char *err, size_t errlen)
{
	char norm[MNTPATHLEN + 1];
	struct reload_entry *e = &r->e[r->n];
	int rc;

	if (!normalise_path(eo->path, norm, sizeof(norm))) {
		snprintf(err, errlen, "export path %s: not an absolute path", eo->path);
		return -EINVAL;
	}
	for (size_t i = 0; i < s->nexports; i++) {
		struct srv_export *old = s->exports[i];

		if (!same_dirs(old, eo, norm))
			continue;
		r->tab[r->n++] = old;
		e->kept = true; /* before a failure: reload_free must not free it */
		rc = reload_keep(e, eo, err, errlen);
		if (rc == 0 && !same_union(old, eo, norm))
			rc = reload_restack(s, e, old, eo, err, errlen);
		return rc;
	}
	rc = export_open(s, eo, true, &r->tab[r->n], err, errlen);
	if (rc == 0)
		r->n++;
	return rc;
}

/* Puts E's new rules, conf and unions in place in EX (the write lock held);
 * E gets the old ones. */
static void reload_entry_swap(struct srv *s, struct srv_export *ex,
			      struct reload_entry *e)
{
	struct srv_clients c = ex->clients;
	struct srv_export_opts *conf = ex->conf;
	struct un_export *ux = ex->ux;

	ex->clients = e->clients;
	e->clients = c;
	ex->conf = e->conf;
	e->conf = conf;
	if (e->ux) {
		ex->ux = e->ux;
		ex->id = un_export_id(ex->ux);
		e->ux = ux;
		e->commit = un_export_commit_take(ex->ux);
		un_stack_retire(e->commit); /* before any call uses it */
	}
	if (e->insts)
		srv_unions_restack_swap(s, e->insts);
}

/* One line for export EX that reload entry E restacked (E->conf: the old
 * conf, after the swap). */
static void restack_log(struct srv_export *ex, struct reload_entry *e)
{
	size_t was = e->conf->nlower, now = ex->conf->nlower, n;
	const char *layers = now == 1 ? "layer" : "layers";

	if (!e->insts) {
		rpc_log(RPC_LOG_INFO,
			"reload: export %s lower layers updated in place (%zu -> %zu %s)",
			ex->path, was, now, layers);
		return;
	}
	n = srv_unions_restack_end(e->insts);
	e->insts = NULL;
	rpc_log(RPC_LOG_INFO,
		"reload: export %s lower layers updated in place (%zu -> %zu %s, %zu "
		"client union%s)",
		ex->path, was, now, layers, n, n == 1 ? "" : "s");
}

/* Logs a commit that failed: the new stack serves, but its record is not
 * written, and the layers it left are not retired. */
static void commit_log(const char *path, struct un_stack_commit *c)
{
	char msg[PATH_MAX + 256];

	if (un_stack_commit(c, msg, sizeof(msg)) < 0)
		rpc_log(RPC_LOG_ERR,
			"reload: export %s: %s; the layers it left are not retired", path,
			msg);
}

/* Records the new stacks of R's exports (un_stack_commit), once they
 * serve; the layers they left were retired under the write lock
 * (reload_swap), so that no call finds an old handle's layer neither
 * served nor retired.  A reload that fails before the swap has changed
 * neither (invariant 2). */
static void reload_commit(struct reload *r)
{
	for (size_t i = 0; i < r->n; i++) {
		struct reload_entry *e = &r->e[i];

		commit_log(r->tab[i]->path, e->commit);
		e->commit = NULL;
		if (e->insts)
			srv_unions_restack_commit(e->insts);
	}
}

/* Swaps R into S under the write lock; the old table goes back into R. */
static void reload_swap(struct srv *s, struct reload *r)
{
	struct srv_export **old = s->exports;
	size_t nold = s->nexports;

	pthread_rwlock_wrlock(&s->exports_lock);
	for (size_t i = 0; i < r->n; i++) {
		if (r->e[i].kept) {
			reload_entry_swap(s, r->tab[i], &r->e[i]);
		} else if (r->tab[i]->ux) { /* new, or reopened: retire as it serves */
			r->e[i].commit = un_export_commit_take(r->tab[i]->ux);
			un_stack_retire(r->e[i].commit);
		}
	}
	s->exports = r->tab;
	s->nexports = r->n;
	pthread_rwlock_unlock(&s->exports_lock);
	reload_commit(r);
	for (size_t i = 0; i < r->n; i++)
		if (r->e[i].restacked)
			restack_log(r->tab[i], &r->e[i]);
	/* Out of the lock: the exports no longer in the table, and the old
	 * table itself.  No call can hold them: each took the lock. */
	for (size_t i = 0; i < nold; i++) {
		bool still = false, replaced = false;

		for (size_t j = 0; j < r->n && !still; j++) {
			still = r->tab[j] == old[i];
			replaced = replaced || strcmp(r->tab[j]->path, old[i]->path) == 0;
		}
		if (!still) {
			rpc_log(RPC_LOG_INFO, "reload: export %s %s", old[i]->path,
				replaced ? "reopened (its upper or work dir, or "
					   "whether it is per client, changed)"
					 : "removed");
			export_free(s, old[i]);
		}
	}
	r->tab = old;
}

int srv_reload(struct srv *s, const struct srv_opts *o, char *err, size_t errlen)
{
	struct reload r = {0};
	size_t cap = o->nexports ? o->nexports : 1;
	int rc = -ENOMEM;

	warn_restart_settings(s, o);
	r.tab = calloc(cap, sizeof(*r.tab));
	r.e = calloc(cap, sizeof(*r.e));
	if (!r.tab || !r.e) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < o->nexports; i++) {
		rc = reload_one(s, &r, &o->exports[i], err, errlen);
		if (rc < 0)
			goto fail;
	}
	rc = -EEXIST;
	if (!table_check(r.tab, r.n, err, errlen))
		goto fail;
	reload_swap(s, &r);
	retire_time_reload(s, o->cfg.retire_time);
	for (size_t i = 0; i < r.n; i++) /* r.tab is the old table now */
		if (r.e[i].kept && !r.e[i].restacked)
			srv_unions_recheck(s, s->exports[i]);
	reload_free(s, &r, true);
	srv_unions_limits(s);
	srv_sweep_indexes(s);
	return 0;
fail:
	reload_free(s, &r, false);
	return rc;
}
