/* SPDX-License-Identifier: Apache-2.0 */
/* ctl.c - the control socket: what union-nfsctl(8) asks a running server.
 *
 * Design notes
 *
 *  1. A unix stream socket (--control-socket; by default ctl.sock in the
 *     state dir), mode 0600.  A connection carries one request, a line
 *     "COMMAND [ARG]\n" of at most CTL_LINE_MAX bytes, and gets one reply,
 *     a JSON object and a newline, after which the server closes it:
 *     {"ok": true, ...what the command says} or {"ok": false, "error":
 *     "one line"}.  The replies are made here, with a JSON library, so the
 *     client only prints them.
 *  2. Only uid 0 is served.  The file's mode keeps others out, and each
 *     connection's peer is checked again (SO_PEERCRED), whatever the mode
 *     became: a refusal is a reply and a log line (rate-limited).
 *  3. One thread of its own serves the connections one at a time: requests
 *     are an admin's and rare.  A peer that stalls has CTL_TIMEOUT_S for
 *     each read and write (SO_RCVTIMEO, SO_SNDTIMEO), so it never holds the
 *     thread for long.  The thread polls the listener and a pipe that
 *     srv_ctl_stop writes; it runs with every signal blocked, as workers do.
 *  4. The commands are one table, ctl_cmds: a name, whether it takes an
 *     argument, and a function that fills the reply or names the problem.
 *     They read what the metrics and the MOUNT program read, under the same
 *     locks, and never walk a directory under a lock (the clients' upper
 *     sizes are summed after the registry's lock is dropped).
 *  5. takeover, giveup and check are what an HA manager calls (keepalived's
 *     notify script, a Pacemaker resource agent, a CTDB event script:
 *     docs/gateways.md part 3).  check stats the layers, which may be on
 *     shared storage that hangs: an HA manager times its check out, which
 *     is the answer it needs then.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <fts.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lockd.h"
#include "ops.h"

#define CTL_LINE_MAX  4096
#define CTL_TIMEOUT_S 5
#define CTL_ERR_MAX   512

struct srv_ctl {
	struct srv *srv;
	const struct rpc_svc *svc;
	struct srv_metrics *metrics; /* NULL: counting off */
	struct srv_nlm *nlm;
	struct srv_ctl_hooks hooks;
	char *path;
	dev_t dev; /* the socket file bound, so that stop removes only it */
	ino_t ino;
	int fd;
	int stop[2];
	pthread_t thread;
	time_t started; /* CLOCK_MONOTONIC seconds */
};

static time_t mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

/* ---- status ---- */

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* Client unions of template T open now, and the bytes they hold, into O;
 * under unions.lock. */
static void open_instances(const struct srv *s, const struct srv_export *t, json_t *o)
{
	json_int_t n = 0, bytes = 0;

	for (const struct srv_export *in = t->instances; in; in = in->next) {
		n += in->state == SRV_UNION_OPEN;
		bytes += (json_int_t)srv_union_mem(s, in);
	}
	json_object_set_new(o, "client_unions", json_integer(n));
	json_object_set_new(o, "client_unions_memory_bytes", json_integer(bytes));
}

/* The limits of the client unions: how many may be open, and the memory
 * they may hold together and each (unions.c, rules 5 and 12). */
static json_t *union_limits_json(struct srv *s)
{
	json_t *o;

	pthread_mutex_lock(&s->unions.lock);
	o = json_pack("{s:I, s:I, s:I}", "max_open", (json_int_t)s->unions.cap,
		      "memory_bytes", (json_int_t)s->unions.memory, "union_bytes",
		      (json_int_t)s->unions.share);
	pthread_mutex_unlock(&s->unions.lock);
	return o;
}

static json_t *export_json(struct srv *s, const struct srv_export *ex)
{
	const struct srv_export_opts *e = ex->conf;
	json_t *lowers = json_array(), *o;

	for (size_t i = 0; i < e->nlower; i++)
		json_array_append_new(lowers, json_string(e->lowerdirs[i]));
	o = json_pack("{s:s, s:o, s:o, s:o, s:s, s:b}", "path", ex->path, "upper",
		      str_or_null(e->upperdir), "work", str_or_null(e->workdir), "lowers",
		      lowers, "clients", e->clients ? e->clients : SRV_LOOPBACK_CLIENTS,
		      "per_client", !ex->ux);
	if (o && !ex->ux) {
		pthread_mutex_lock(&s->unions.lock);
		open_instances(s, ex, o);
		pthread_mutex_unlock(&s->unions.lock);
	}
	return o;
}

static void retired_add(const struct un_retired_info *r, void *arg)
{
	json_array_append_new(arg,
			      json_pack("{s:s, s:s, s:I}", "export", r->export_path,
					"layer", r->layer, "age", (json_int_t)r->age_s));
}

static int cmd_status(struct srv_ctl *c, const char *arg, json_t *out, char *err,
		      size_t errlen)
{
	struct srv *s = c->srv;
	json_t *list = json_array(), *retired = json_array();

	(void)arg;
	(void)err;
	(void)errlen;
	srv_exports_read_begin(s);
	for (size_t i = 0; i < s->nexports; i++)
		json_array_append_new(list, export_json(s, s->exports[i]));
	srv_exports_read_end(s);
	un_state_retired_list(s->state, retired_add, retired);
	json_object_set_new(out, "version", json_string(UNION_NFSD_VERSION));
	json_object_set_new(out, "pid", json_integer(getpid()));
	json_object_set_new(out, "uptime", json_integer(mono_s() - c->started));
	json_object_set_new(out, "ports",
			    json_pack("{s:i, s:i, s:i, s:i, s:b}", "nfs",
				      rpc_svc_service_port(c->svc, "nfs"), "mount",
				      rpc_svc_service_port(c->svc, "mount"), "nlm",
				      rpc_svc_service_port(c->svc, "nlm"), "nsm",
				      rpc_svc_service_port(c->svc, "nsm"), "portmapper",
				      rpc_svc_service_port(c->svc, "portmapper") != 0));
	json_object_set_new(out, "exports", list);
	json_object_set_new(out, "client_union_limits", union_limits_json(s));
	json_object_set_new(out, "retired", retired);
	return 0;
}

/* ---- clients ---- */

/* Bytes allocated to, and entries of, the tree at PATH, as du counts them
 * (on its filesystem, links not followed; a hard link counts each time). */
static void tree_usage(const char *path, json_t *o)
{
	char *argv[] = {(char *)path, NULL};
	FTS *f = fts_open(argv, FTS_PHYSICAL | FTS_XDEV | FTS_NOCHDIR, NULL);
	uint64_t bytes = 0, files = 0;
	FTSENT *e;

	if (!f)
		return;
	while ((e = fts_read(f))) {
		if (e->fts_info == FTS_DP || e->fts_info == FTS_NS ||
		    e->fts_info == FTS_ERR || e->fts_info == FTS_DNR)
			continue;
		bytes += (uint64_t)e->fts_statp->st_blocks * 512;
		files++;
	}
	fts_close(f);
	json_object_set_new(o, "upper_bytes", json_integer((json_int_t)bytes));
	json_object_set_new(o, "upper_entries", json_integer((json_int_t)files));
}

/* Mount M's calls and bytes, by its client's address on the export that
 * holds its path; nothing when counting is off.  Under the exports' lock. */
static void mount_sums(struct srv *s, const struct srv_mount_entry *m, json_t *o)
{
	char rest[MNTPATHLEN + 1];
	struct srv_export *ex = srv_export_containing(s, m->path, rest, sizeof(rest));
	uint64_t v[3];

	if (!ex || !srv_counts_client(s, ex, m->host, v))
		return;
	json_object_set_new(o, "calls", json_integer((json_int_t)v[0]));
	json_object_set_new(o, "read_bytes", json_integer((json_int_t)v[1]));
	json_object_set_new(o, "written_bytes", json_integer((json_int_t)v[2]));
}

static json_t *mounts_json(struct srv *s)
{
	json_t *a = json_array(), *o;

	srv_exports_read_begin(s);
	pthread_mutex_lock(&s->mounts_lock);
	for (size_t i = 0; i < s->nmounts; i++) {
		o = json_pack("{s:s, s:s, s:I}", "host", s->mounts[i].host, "path",
			      s->mounts[i].path, "since", (json_int_t)s->mounts[i].since);
		if (o)
			mount_sums(s, &s->mounts[i], o);
		json_array_append_new(a, o);
	}
	pthread_mutex_unlock(&s->mounts_lock);
	srv_exports_read_end(s);
	return a;
}

static const char *const union_state_names[] = {
    [SRV_UNION_OPENING] = "opening",
    [SRV_UNION_OPEN] = "open",
    [SRV_UNION_CLOSING] = "closing",
    [SRV_UNION_RENEWING] = "renewing",
};

/* Instance IN of template T; under unions.lock.  Its "upper" is the dir
 * its key names when the template's upper is per client. */
static json_t *instance_json(struct srv *s, const struct srv_export *t,
			     const struct srv_export *in, time_t now)
{
	bool own_upper = t->conf->upperdir && srv_is_template(t->conf->upperdir);
	uint64_t v[3];
	json_t *o;

	o = json_pack("{s:s, s:s, s:o, s:s, s:b, s:I}", "export", t->path, "client",
		      in->client_key, "upper",
		      own_upper ? json_string(in->client_key) : json_null(), "state",
		      union_state_names[in->state], "mounted", in->mounted, "idle",
		      (json_int_t)(now - in->last_used));
	if (o && in->state == SRV_UNION_OPEN)
		json_object_set_new(o, "memory_bytes",
				    json_integer((json_int_t)srv_union_mem(s, in)));
	if (o && srv_counts_export(s, in, v)) {
		json_object_set_new(o, "calls", json_integer((json_int_t)v[0]));
		json_object_set_new(o, "read_bytes", json_integer((json_int_t)v[1]));
		json_object_set_new(o, "written_bytes", json_integer((json_int_t)v[2]));
	}
	return o;
}

static json_t *unions_json(struct srv *s)
{
	json_t *a = json_array();
	time_t now = mono_s();

	srv_exports_read_begin(s);
	pthread_mutex_lock(&s->unions.lock);
	for (size_t i = 0; i < s->nexports; i++)
		for (const struct srv_export *in = s->exports[i]->instances; in;
		     in = in->next)
			json_array_append_new(a,
					      instance_json(s, s->exports[i], in, now));
	pthread_mutex_unlock(&s->unions.lock);
	srv_exports_read_end(s);
	return a;
}

static int cmd_clients(struct srv_ctl *c, const char *arg, json_t *out, char *err,
		       size_t errlen)
{
	json_t *unions = unions_json(c->srv), *u;
	size_t i;

	(void)arg;
	(void)err;
	(void)errlen;
	/* the sizes without a lock held (note 4) */
	json_array_foreach(unions, i, u)
	{
		const char *upper = json_string_value(json_object_get(u, "upper"));

		if (upper)
			tree_usage(upper, u);
	}
	json_object_set_new(out, "mounts", mounts_json(c->srv));
	json_object_set_new(out, "unions", unions);
	return 0;
}

/* ---- reload ---- */

static int cmd_reload(struct srv_ctl *c, const char *arg, json_t *out, char *err,
		      size_t errlen)
{
	char msg[CTL_ERR_MAX];

	(void)arg;
	if (!c->hooks.reload) {
		snprintf(err, errlen, "this server cannot reload");
		return -1;
	}
	if (c->hooks.reload(c->hooks.arg, msg, sizeof(msg)) < 0) {
		snprintf(err, errlen, "reload failed, the running exports stay: %s", msg);
		return -1;
	}
	json_object_set_new(out, "message", json_string(msg));
	return 0;
}

/* ---- stats: the metrics' page, as samples ---- */

/* Reads a label value "...", text-format escapes undone in place, from *P
 * (just past the opening quote); NULL when it does not end. */
static char *label_value(char **p)
{
	char *r = *p, *w = *p, *start = *p;

	while (*r && *r != '"') {
		if (*r == '\\' && r[1]) {
			r++;
			*w++ = *r == 'n' ? '\n' : *r;
			r++;
		} else {
			*w++ = *r++;
		}
	}
	if (*r != '"')
		return NULL;
	*p = r + 1;
	*w = '\0';
	return start;
}

/* The labels "{K="V",...}" at *P into an object; NULL when malformed. */
static json_t *labels_parse(char **p)
{
	json_t *labels = json_object();
	char *s = *p + 1, *eq, *v;

	while (labels && *s && *s != '}') {
		eq = strchr(s, '=');
		if (!eq || eq[1] != '"')
			goto bad;
		*eq = '\0';
		v = eq + 2;
		if (!(v = label_value(&v)))
			goto bad;
		json_object_set_new(labels, s, json_string(v));
		s = v + strlen(v) + 1; /* past the closing quote */
		if (*s == ',')
			s++;
	}
	if (*s != '}')
		goto bad;
	*p = s + 1;
	return labels;
bad:
	json_decref(labels);
	return NULL;
}

/* One sample line, "NAME{LABELS} VALUE"; NULL when it is none. */
static json_t *sample_parse(char *line)
{
	char *p = line + strcspn(line, "{ "), *name_end = p, *end;
	json_t *labels;
	double v;

	if (p == line)
		return NULL;
	labels = *p == '{' ? labels_parse(&p) : json_object();
	if (!labels)
		return NULL;
	v = strtod(p, &end);
	if (end == p) {
		json_decref(labels);
		return NULL;
	}
	*name_end = '\0';
	return json_pack("{s:s, s:o, s:o}", "name", line, "labels", labels, "value",
			 v == floor(v) && fabs(v) < 9e15 ? json_integer((json_int_t)v)
							 : json_real(v));
}

static int cmd_stats(struct srv_ctl *c, const char *arg, json_t *out, char *err,
		     size_t errlen)
{
	size_t len = 0;
	char *text = srv_metrics_text(c->metrics, &len), *line, *save = NULL;
	json_t *samples = json_array(), *one;

	(void)arg;
	if (!text) {
		json_decref(samples);
		snprintf(err, errlen, "no counters: counting is off or out of memory");
		return -1;
	}
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (line[0] != '#' && (one = sample_parse(line)))
			json_array_append_new(samples, one);
	free(text);
	json_object_set_new(out, "samples", samples);
	return 0;
}

/* ---- release [LAYER] ---- */

static int cmd_release(struct srv_ctl *c, const char *arg, json_t *out, char *err,
		       size_t errlen)
{
	size_t n = un_state_retire_release(c->srv->state, arg);

	if (arg && n == 0) {
		snprintf(err, errlen, "no retired layer %s", arg);
		return -1;
	}
	rpc_log(RPC_LOG_INFO, "control: released %zu retired layer%s", n,
		n == 1 ? "" : "s");
	srv_sweep_indexes(c->srv);
	json_object_set_new(out, "released", json_integer((json_int_t)n));
	return 0;
}

/* ---- reset CLIENT ---- */

static int cmd_reset(struct srv_ctl *c, const char *arg, json_t *out, char *err,
		     size_t errlen)
{
	char msg[512];
	int n = srv_unions_reset(c->srv, arg, msg, sizeof(msg));

	if (n < 0) {
		snprintf(err, errlen, "%s", msg);
		return -1;
	}
	json_object_set_new(out, "message", json_string(msg));
	json_object_set_new(out, "reset", json_integer(n));
	return 0;
}

/* ---- an HA manager's verbs: takeover ADDRESS, giveup ADDRESS, check ---- */

static int cmd_takeover(struct srv_ctl *c, const char *arg, json_t *out, char *err,
			size_t errlen)
{
	char msg[CTL_ERR_MAX];

	if (srv_nlm_takeover(c->nlm, arg, msg, sizeof(msg)) < 0) {
		snprintf(err, errlen, "%s", msg);
		return -1;
	}
	rpc_log(RPC_LOG_INFO, "union-nfsctl takeover: %s", msg);
	json_object_set_new(out, "message", json_string(msg));
	return 0;
}

static int cmd_giveup(struct srv_ctl *c, const char *arg, json_t *out, char *err,
		      size_t errlen)
{
	char msg[CTL_ERR_MAX];

	if (srv_nlm_giveup(c->nlm, arg, msg, sizeof(msg)) < 0) {
		snprintf(err, errlen, "%s", msg);
		return -1;
	}
	json_object_set_new(out, "message", json_string(msg));
	return 0;
}

/* Appends to PROBLEMS the failure of PATH (a layer of export EX), if any:
 * a layer the gateway cannot reach serves no client. */
static void check_dir(json_t *problems, const struct srv_export *ex, const char *what,
		      const char *path)
{
	struct stat st;
	char line[CTL_ERR_MAX];
	const char *why = "not a directory";

	if (!path || strchr(path, '%')) /* a client's, made at its mount */
		return;
	if (stat(path, &st) < 0)
		why = strerror(errno);
	else if (S_ISDIR(st.st_mode))
		return;
	snprintf(line, sizeof(line), "export %s: %s %s: %s", ex->path, what, path, why);
	json_array_append_new(problems, json_string(line));
}

/* Whether the gateway serves: its ports, every export's layers reachable,
 * the lock records' dir writable; the failed parts named (note 5). */
static int cmd_check(struct srv_ctl *c, const char *arg, json_t *out, char *err,
		     size_t errlen)
{
	struct srv *s = c->srv;
	json_t *problems = json_array();
	char msg[CTL_ERR_MAX];

	(void)arg;
	if (!rpc_svc_service_port(c->svc, "nfs") ||
	    !rpc_svc_service_port(c->svc, "mount"))
		json_array_append_new(problems,
				      json_string("NFS or MOUNT not registered"));
	srv_exports_read_begin(s);
	for (size_t i = 0; i < s->nexports; i++) {
		const struct srv_export *ex = s->exports[i];

		for (size_t k = 0; k < ex->conf->nlower; k++)
			check_dir(problems, ex, "lower", ex->conf->lowerdirs[k]);
		check_dir(problems, ex, "upper", ex->conf->upperdir);
	}
	srv_exports_read_end(s);
	if (srv_nlm_check(c->nlm, msg, sizeof(msg)) < 0)
		json_array_append_new(problems, json_string(msg));
	if (json_array_size(problems) > 0) {
		snprintf(err, errlen, "%zu problem%s: %s", json_array_size(problems),
			 json_array_size(problems) == 1 ? "" : "s",
			 json_string_value(json_array_get(problems, 0)));
		json_decref(problems);
		return -1;
	}
	json_decref(problems);
	json_object_set_new(out, "message", json_string("serving"));
	return 0;
}

/* ---- the table (note 4) ---- */

enum ctl_arg { CTL_ARG_NONE, CTL_ARG_OPTIONAL, CTL_ARG_REQUIRED };
struct ctl_cmd {
	const char *name;
	enum ctl_arg arg;
	/* Fills OUT; 0, or -1 with one line in ERR. */
	int (*run)(struct srv_ctl *c, const char *arg, json_t *out, char *err,
		   size_t errlen);
};

static const struct ctl_cmd ctl_cmds[] = {
    {"status", CTL_ARG_NONE, cmd_status},
    {"clients", CTL_ARG_NONE, cmd_clients},
    {"reload", CTL_ARG_NONE, cmd_reload},
    {"stats", CTL_ARG_NONE, cmd_stats},
    {"release", CTL_ARG_OPTIONAL, cmd_release},
    {"reset", CTL_ARG_REQUIRED, cmd_reset},
    {"takeover", CTL_ARG_REQUIRED, cmd_takeover},
    {"giveup", CTL_ARG_REQUIRED, cmd_giveup},
    {"check", CTL_ARG_NONE, cmd_check},
};

/* Runs request LINE into OUT; 0, or -1 with ERR. */
static int ctl_run(struct srv_ctl *c, char *line, json_t *out, char *err, size_t errlen)
{
	char *arg = strchr(line, ' ');

	if (arg)
		*arg++ = '\0';
	if (arg && !*arg)
		arg = NULL;
	for (size_t i = 0; i < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); i++) {
		const struct ctl_cmd *cmd = &ctl_cmds[i];

		if (strcmp(cmd->name, line) != 0)
			continue;
		if (arg && cmd->arg == CTL_ARG_NONE) {
			snprintf(err, errlen, "%s takes no argument", cmd->name);
			return -1;
		}
		if (!arg && cmd->arg == CTL_ARG_REQUIRED) {
			snprintf(err, errlen, "%s needs an argument", cmd->name);
			return -1;
		}
		return cmd->run(c, arg, out, err, errlen);
	}
	snprintf(err, errlen, "unknown command '%.64s'", line);
	return -1;
}

/* ---- connections ---- */

/* Reads one request line into BUF (LEN bytes with its NUL); -1 when the
 * peer sent none, or one too long or with a NUL in it. */
static int read_line(int fd, char *buf, size_t len)
{
	size_t have = 0;
	ssize_t n;
	char *nl;

	while (have + 1 < len) {
		n = read(fd, buf + have, len - 1 - have);
		if (n <= 0)
			return -1;
		if (memchr(buf + have, '\0', (size_t)n))
			return -1;
		have += (size_t)n;
		buf[have] = '\0';
		if ((nl = strchr(buf, '\n'))) {
			*nl = '\0';
			return 0;
		}
	}
	return -1;
}

static void write_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n > 0 && (w = write(fd, p, n)) > 0) {
		p += w;
		n -= (size_t)w;
	}
}

/* Reads what the peer sent past its request, without waiting, so that the
 * close does not reset the connection under the reply. */
static void drain(int fd)
{
	char buf[4096];

	shutdown(fd, SHUT_WR);
	for (int i = 0; i < 64 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; i++)
		;
}

/* Sends REPLY, or {"ok": false, "error": ERR} when ERR holds a line. */
static void ctl_reply(int fd, json_t *reply, const char *err)
{
	char *text;

	if (*err) {
		json_object_clear(reply);
		json_object_set_new(reply, "error", json_string(err));
	}
	json_object_set_new(reply, "ok", json_boolean(!*err));
	text = json_dumps(reply, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (!text) {
		static const char oom[] =
		    "{\"ok\": false, \"error\": \"out of memory\"}\n";

		write_all(fd, oom, sizeof(oom) - 1);
		return;
	}
	write_all(fd, text, strlen(text));
	write_all(fd, "\n", 1);
	free(text);
}

/* True when FD's peer is root (note 2); logs a refusal. */
static bool peer_is_root(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.uid == 0)
		return true;
	RPC_LOG_LIMITED(RPC_LOG_WARN,
			"control socket: refused uid %ld (pid %ld): it serves root only",
			len == sizeof(cr) ? (long)cr.uid : -1L,
			len == sizeof(cr) ? (long)cr.pid : -1L);
	return false;
}

static void ctl_serve(struct srv_ctl *c, int fd)
{
	struct timeval tv = {.tv_sec = CTL_TIMEOUT_S};
	char line[CTL_LINE_MAX + 1], err[CTL_ERR_MAX] = "";
	json_t *reply = json_object();
	bool have_line;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (!reply)
		return;
	/* read before answering, a refused caller too: a close with bytes
	 * unread would reset the connection before the reply is read */
	have_line = read_line(fd, line, sizeof(line)) == 0;
	if (!peer_is_root(fd))
		snprintf(err, sizeof(err),
			 "permission denied: the control socket serves root only");
	else if (!have_line)
		snprintf(err, sizeof(err),
			 "bad request: want one line 'COMMAND [ARG]' of at most %d bytes",
			 CTL_LINE_MAX);
	else if (ctl_run(c, line, reply, err, sizeof(err)) < 0 && !*err)
		snprintf(err, sizeof(err), "%.64s failed", line);
	ctl_reply(fd, reply, err);
	json_decref(reply);
	drain(fd);
}

static void *ctl_main(void *arg)
{
	struct srv_ctl *c = arg;
	struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN},
			      {.fd = c->stop[0], .events = POLLIN}};
	int fd;

	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			rpc_log(RPC_LOG_ERR, "control socket: poll: %s", strerror(errno));
			break;
		}
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		ctl_serve(c, fd);
		close(fd);
	}
	return NULL;
}

/* ---- the socket ---- */

/* Makes room for the socket at SA: nothing there, or a socket no server
 * answers on (one a killed server left), which is removed. */
static int clear_stale(const struct sockaddr_un *sa, char *err, size_t errlen)
{
	struct stat st;
	int probe, r;

	if (lstat(sa->sun_path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "control socket %s: %s", sa->sun_path,
			 strerror(errno));
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen,
			 "control socket %s: there is a file that is no socket",
			 sa->sun_path);
		return -EEXIST;
	}
	probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	r = probe >= 0 ? connect(probe, (const struct sockaddr *)sa, sizeof(*sa)) : -1;
	if (probe >= 0)
		close(probe);
	if (r == 0) {
		snprintf(err, errlen, "control socket %s: another server answers there",
			 sa->sun_path);
		return -EADDRINUSE;
	}
	unlink(sa->sun_path);
	return 0;
}

/* Binds and listens on PATH, mode 0600 (note 2); the fd, or a negative
 * errno with ERR. */
static int ctl_listen(struct srv_ctl *c, char *err, size_t errlen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, r;

	if (strlen(c->path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "control socket %s: path longer than %zu bytes",
			 c->path, sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
	if ((r = clear_stale(&sa, err, errlen)) < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(c->path, 0600) < 0 || lstat(c->path, &st) < 0 || listen(fd, 8) < 0) {
		r = -errno;
		snprintf(err, errlen, "control socket %s: %s", c->path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return r;
	}
	c->dev = st.st_dev;
	c->ino = st.st_ino;
	return fd;
}

static int ctl_thread_start(struct srv_ctl *c)
{
	sigset_t all, old;
	int r;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&c->thread, NULL, ctl_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -r;
}

int srv_ctl_start(const struct srv_ctl_view *v, const char *path,
		  const struct srv_ctl_hooks *hooks, struct srv_ctl **out, char *err,
		  size_t errlen)
{
	struct srv_ctl *c = calloc(1, sizeof(*c));
	int r = -ENOMEM;

	*out = NULL;
	if (!c || !(c->path = strdup(path))) {
		snprintf(err, errlen, "control socket: out of memory");
		goto fail;
	}
	c->srv = v->srv;
	c->svc = v->svc;
	c->metrics = v->metrics;
	c->nlm = v->nlm;
	c->hooks = *hooks;
	c->started = mono_s();
	c->stop[0] = c->stop[1] = -1;
	if ((r = ctl_listen(c, err, errlen)) < 0)
		goto fail;
	c->fd = r;
	if (pipe2(c->stop, O_CLOEXEC) < 0 || (r = ctl_thread_start(c)) < 0) {
		r = r < 0 ? r : -errno;
		snprintf(err, errlen, "control socket: %s", strerror(-r));
		goto fail_fd;
	}
	rpc_log(RPC_LOG_INFO, "control socket %s (union-nfsctl)", path);
	*out = c;
	return 0;
fail_fd:
	close(c->fd);
	unlink(c->path);
	if (c->stop[0] >= 0) {
		close(c->stop[0]);
		close(c->stop[1]);
	}
fail:
	if (c)
		free(c->path);
	free(c);
	return r;
}

void srv_ctl_stop(struct srv_ctl *c)
{
	struct stat st;

	if (!c)
		return;
	write_all(c->stop[1], "x", 1);
	pthread_join(c->thread, NULL);
	close(c->fd);
	close(c->stop[0]);
	close(c->stop[1]);
	/* only the socket this server made: another may have taken the path */
	if (lstat(c->path, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino)
		unlink(c->path);
	free(c->path);
	free(c);
}
