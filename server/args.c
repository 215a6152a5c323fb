/* SPDX-License-Identifier: Apache-2.0 */
/* args.c - the command line and the --config file.
 *
 * Flags use overlayfs' own option names (--lowerdir, --upperdir, --workdir).
 * The config file is INI, parsed by inih: a [server] section with the same
 * keys as the server flags, and one [export] section per export with the keys
 * path, lowerdir, upperdir, workdir.  Flags given on the command line override
 * the file's [server] keys, and --lowerdir adds one more export.
 *
 * Every problem is reported as one line (the caller prefixes "union-nfsd: ");
 * problems in the file name the file and line.
 */
#define _GNU_SOURCE /* asprintf */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"

#define DEFAULT_NFS_PORT   2049
#define DEFAULT_MOUNT_PORT 20048
#define DEFAULT_STATE_DIR  "/var/lib/union-nfsd"
#define MAX_THREADS	   1024
#define MAX_CONN_SETTING   (1u << 24) /* connections, or seconds of idleness */

/* ---- values ---- */

static bool parse_uint(const char *text, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (text[0] < '0' || text[0] > '9')
		return false;
	errno = 0;
	v = strtoul(text, &end, 10);
	if (errno || *end || v > max)
		return false;
	*out = v;
	return true;
}

static bool parse_port(const char *text, uint16_t *out)
{
	unsigned long v;

	if (!parse_uint(text, 65535, &v))
		return false;
	*out = (uint16_t)v;
	return true;
}

/* "yes" or "no" (a [server] switch). */
static bool parse_yes_no(const char *text, bool *out)
{
	if (strcmp(text, "yes") != 0 && strcmp(text, "no") != 0)
		return false;
	*out = text[0] == 'y';
	return true;
}

static bool parse_threads(const char *text, unsigned *out)
{
	unsigned long v;

	if (!parse_uint(text, MAX_THREADS, &v) || v == 0)
		return false;
	*out = (unsigned)v;
	return true;
}

/* A connection cap or an idle timeout: 0 means the default (caps) or never
 * (the timeout). */
static bool parse_conn_setting(const char *text, unsigned *out)
{
	unsigned long v;

	if (!parse_uint(text, MAX_CONN_SETTING, &v))
		return false;
	*out = (unsigned)v;
	return true;
}

/* A cap on NLM locks: 0 (none) up to 2^32 - 1. */
static bool parse_size_setting(const char *text, size_t *out)
{
	unsigned long v;

	if (!parse_uint(text, UINT32_MAX, &v))
		return false;
	*out = (size_t)v;
	return true;
}

/* A memory size: bytes, or a number followed by K, M, G or T (powers of
 * 1024); 0 means the default. */
static bool parse_bytes(const char *text, size_t *out)
{
	static const char units[] = "KMGT";
	unsigned long long v;
	const char *u = NULL;
	unsigned shift = 0;
	char *end;

	if (text[0] < '0' || text[0] > '9')
		return false;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (*end && !end[1])
		u = strchr(units, *end);
	if (errno || (*end && !u))
		return false;
	if (u)
		shift = 10 * (unsigned)(u - units + 1);
	if (v > (unsigned long long)SIZE_MAX >> shift)
		return false;
	*out = (size_t)(v << shift);
	return true;
}

/* The listeners bind one address, given as a literal: no resolver at start. */
static bool is_ip_literal(const char *text)
{
	struct in6_addr a;

	return inet_pton(AF_INET, text, &a) == 1 || inet_pton(AF_INET6, text, &a) == 1;
}

/* Replaces *slot with a copy of VALUE. */
static bool set_str(char **slot, const char *value)
{
	char *copy = strdup(value);

	if (!copy)
		return false;
	free(*slot);
	*slot = copy;
	return true;
}

/* Splits an overlayfs lowerdir list ("a:b:c", "\:" for a colon in a name)
 * into E's lowerdirs.  False on an empty component or no memory. */
static bool split_lowerdirs(struct srv_export_opts *e, const char *list)
{
	size_t n = 1, len = strlen(list);
	char *buf = malloc(len + 1), *w = buf;
	char **dirs;

	for (const char *p = list; *p; p++)
		n += (*p == ':' && (p == list || p[-1] != '\\'));
	dirs = calloc(n, sizeof(*dirs));
	if (!buf || !dirs)
		goto fail;
	n = 0;
	for (const char *p = list;; p++) {
		if (*p == '\\' && p[1] == ':') {
			*w++ = *++p;
			continue;
		}
		if (*p && *p != ':') {
			*w++ = *p;
			continue;
		}
		*w = '\0';
		if (w == buf)
			goto fail; /* empty component */
		dirs[n] = strdup(buf);
		if (!dirs[n++])
			goto fail;
		w = buf;
		if (!*p)
			break;
	}
	free(buf);
	e->lowerdirs = dirs;
	e->nlower = n;
	return true;
fail:
	for (size_t i = 0; dirs && i < n; i++)
		free(dirs[i]);
	free(dirs);
	free(buf);
	return false;
}

/* False (with ERR) when DIR has a % other than %a, %h, %%. */
static bool template_check(const char *key, const char *dir, char *err, size_t errlen)
{
	for (const char *p = dir; (p = strchr(p, '%')) != NULL; p += 2) {
		if (p[1] != 'a' && p[1] != 'h' && p[1] != '%') {
			snprintf(err, errlen,
				 "%s '%s': '%%%c' (only %%a, %%h and %%%% are known)",
				 key, dir, p[1] ? p[1] : ' ');
			return false;
		}
	}
	return true;
}

static struct srv_export_opts *add_export(struct srv_opts *o)
{
	struct srv_export_opts *e = realloc(o->exports, (o->nexports + 1) * sizeof(*e));

	if (!e)
		return NULL;
	o->exports = e;
	e = &o->exports[o->nexports++];
	memset(e, 0, sizeof(*e));
	return e;
}

void srv_opts_free(struct srv_opts *o)
{
	for (size_t i = 0; i < o->nexports; i++)
		srv_export_opts_free(&o->exports[i]);
	free(o->exports);
	free(o->bind_addr);
	free(o->state_dir);
	free(o->key_file);
	free(o->nsm_dir);
	free(o->metrics);
	free(o->control_socket);
	free(o->config_path);
	memset(o, 0, sizeof(*o));
}

/* 8 threads per CPU, at least 32: on a sync export a namespace change waits
 * for an fsync, and the changes waiting at once share it (union/sync.c), so
 * the threads, not the CPUs, bound how many calls one fsync serves; a
 * waiting thread costs only its stack (bench/README.md, shared syncs). */
static unsigned default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned t = n > 0 ? 8 * (unsigned)n : 32;

	return t < 32 ? 32 : (t > 128 ? 128 : t);
}

static bool set_defaults(struct srv_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->cfg.nfs_port = DEFAULT_NFS_PORT;
	o->cfg.mount_port = DEFAULT_MOUNT_PORT;
	o->cfg.nthreads = default_threads();
	o->cfg.register_rpcbind = true;
	o->cfg.portmapper = true;
	o->cfg.layer_index = true;
	o->cfg.idle_timeout = SRV_IDLE_TIMEOUT_DEFAULT;
	o->cfg.client_union_idle = SRV_CLIENT_UNION_IDLE_DEFAULT;
	o->cfg.nlm_max_locks_per_host = NLM_MAX_LOCKS_PER_HOST_DEFAULT;
	o->cfg.nlm_max_locks = NLM_MAX_LOCKS_DEFAULT;
	o->cfg.grace_period = NSM_GRACE_PERIOD_DEFAULT;
	o->log_level = RPC_LOG_INFO;
	return set_str(&o->state_dir, DEFAULT_STATE_DIR);
}

/* ---- server keys: shared by flags and [server] ---- */

/* Applies server key KEY = VALUE; false with ERR set. */
static bool set_server_key(struct srv_opts *o, const char *key, const char *value,
			   char *err, size_t errlen)
{
	bool ok = true;

	if (strcmp(key, "nfs-port") == 0)
		ok = parse_port(value, &o->cfg.nfs_port);
	else if (strcmp(key, "mount-port") == 0)
		ok = parse_port(value, &o->cfg.mount_port);
	else if (strcmp(key, "nlm-port") == 0)
		ok = parse_port(value, &o->cfg.nlm_port);
	else if (strcmp(key, "nlm-max-locks-per-host") == 0)
		ok = parse_size_setting(value, &o->cfg.nlm_max_locks_per_host);
	else if (strcmp(key, "nlm-max-locks") == 0)
		ok = parse_size_setting(value, &o->cfg.nlm_max_locks);
	else if (strcmp(key, "nsm-port") == 0)
		ok = parse_port(value, &o->cfg.nsm_port);
	else if (strcmp(key, "grace-period") == 0)
		ok = parse_conn_setting(value, &o->cfg.grace_period);
	else if (strcmp(key, "retire-time") == 0)
		ok = parse_conn_setting(value, &o->cfg.retire_time);
	else if (strcmp(key, "threads") == 0)
		ok = parse_threads(value, &o->cfg.nthreads);
	else if (strcmp(key, "max-connections") == 0)
		ok = parse_conn_setting(value, &o->cfg.max_conns);
	else if (strcmp(key, "max-connections-per-address") == 0)
		ok = parse_conn_setting(value, &o->cfg.max_conns_per_addr);
	else if (strcmp(key, "idle-timeout") == 0)
		ok = parse_conn_setting(value, &o->cfg.idle_timeout);
	else if (strcmp(key, "max-client-unions") == 0)
		ok = parse_conn_setting(value, &o->cfg.max_client_unions);
	else if (strcmp(key, "client-union-idle") == 0)
		ok = parse_conn_setting(value, &o->cfg.client_union_idle);
	else if (strcmp(key, "client-unions-memory") == 0)
		ok = parse_bytes(value, &o->cfg.client_unions_memory);
	else if (strcmp(key, "log-level") == 0)
		ok = rpc_log_level_parse(value, &o->log_level);
	else if (strcmp(key, "portmapper") == 0)
		ok = parse_yes_no(value, &o->cfg.portmapper);
	else if (strcmp(key, "layer-index") == 0)
		ok = parse_yes_no(value, &o->cfg.layer_index);
	else if (strcmp(key, "bind") == 0)
		ok = is_ip_literal(value) && set_str(&o->bind_addr, value);
	else if (strcmp(key, "state-dir") == 0)
		ok = value[0] != '\0' && set_str(&o->state_dir, value);
	else if (strcmp(key, "key-file") == 0)
		ok = value[0] != '\0' && set_str(&o->key_file, value);
	else if (strcmp(key, "nsm-dir") == 0)
		ok = value[0] != '\0' && set_str(&o->nsm_dir, value);
	else if (strcmp(key, "metrics") == 0)
		ok = rpc_addr_port_parse(value, NULL) && set_str(&o->metrics, value);
	else if (strcmp(key, "control-socket") == 0)
		ok = value[0] != '\0' && set_str(&o->control_socket, value);
	else {
		snprintf(err, errlen, "unknown key '%s' in [server]", key);
		return false;
	}
	if (!ok)
		snprintf(err, errlen, "bad %s '%s'", key, value);
	return ok;
}

/* Checks a client rule list as the server will read it. */
static bool check_clients(const char *value, char *err, size_t errlen)
{
	struct srv_clients c;
	char msg[300];

	if (srv_clients_parse(value, &c, msg, sizeof(msg)) < 0) {
		snprintf(err, errlen, "bad clients: %s", msg);
		return false;
	}
	srv_clients_free(&c);
	return true;
}

/* Applies export key KEY = VALUE to E; false with ERR set. */
static bool set_export_key(struct srv_export_opts *e, const char *key, const char *value,
			   char *err, size_t errlen)
{
	char **slot = NULL;

	if (strcmp(key, "lowerdir") == 0) {
		if (e->lowerdirs) {
			snprintf(err, errlen, "lowerdir given twice");
			return false;
		}
		if (!split_lowerdirs(e, value)) {
			snprintf(err, errlen, "bad lowerdir '%s': empty layer name",
				 value);
			return false;
		}
		return true;
	}
	if (strcmp(key, "clients") == 0 && !check_clients(value, err, errlen))
		return false;
	if (strcmp(key, "path") == 0)
		slot = &e->path;
	else if (strcmp(key, "clients") == 0)
		slot = &e->clients;
	else if (strcmp(key, "upperdir") == 0)
		slot = &e->upperdir;
	else if (strcmp(key, "workdir") == 0)
		slot = &e->workdir;
	else if (strcmp(key, "fsid") == 0 && value[0])
		slot = &e->fsid;
	if (!slot && strcmp(key, "fsid") == 0) {
		snprintf(err, errlen, "empty fsid");
		return false;
	}
	if (!slot) {
		snprintf(err, errlen, "unknown key '%s' in [export]", key);
		return false;
	}
	if (*slot) {
		snprintf(err, errlen, "%s given twice", key);
		return false;
	}
	if (!set_str(slot, value)) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	return true;
}

/* Checks the per-client lowers of E: only known %s; a shared upper would
 * be one upper under several clients' unions, and a union with no layer
 * shared by all would be empty for a client without its own. */
static bool check_lowers(const struct srv_export_opts *e, char *err, size_t errlen)
{
	size_t shared = 0;

	for (size_t i = 0; i < e->nlower; i++) {
		if (!template_check("lowerdir", e->lowerdirs[i], err, errlen))
			return false;
		shared += !srv_is_template(e->lowerdirs[i]);
	}
	if (shared == e->nlower)
		return true;
	if (e->upperdir && !srv_is_template(e->upperdir)) {
		snprintf(err, errlen,
			 "a per-client lowerdir (%%a, %%h) needs a per-client upperdir "
			 "and workdir, or none: one upper cannot serve several "
			 "clients' layers");
		return false;
	}
	if (!shared) {
		snprintf(err, errlen,
			 "lowerdir needs a layer shared by all clients besides the "
			 "per-client ones (%%a, %%h)");
		return false;
	}
	return true;
}

/* Checks one export and fills in the default path "/". */
static bool check_export(struct srv_export_opts *e, char *err, size_t errlen)
{
	if (!e->lowerdirs) {
		snprintf(err, errlen, "export needs a lowerdir");
		return false;
	}
	if (e->upperdir && !e->workdir) {
		snprintf(err, errlen, "upperdir needs a workdir");
		return false;
	}
	if (e->workdir && !e->upperdir) {
		snprintf(err, errlen, "workdir without an upperdir");
		return false;
	}
	if (e->upperdir && !template_check("upperdir", e->upperdir, err, errlen))
		return false;
	if (e->workdir && !template_check("workdir", e->workdir, err, errlen))
		return false;
	if (srv_is_template(e->upperdir) != srv_is_template(e->workdir)) {
		snprintf(err, errlen,
			 "upperdir and workdir must both be per client (%%a, %%h) or "
			 "neither: each client's upper needs its own work dir");
		return false;
	}
	if (!check_lowers(e, err, errlen))
		return false;
	if (!e->path && !set_str(&e->path, "/")) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	if (e->path[0] != '/') {
		snprintf(err, errlen, "export path '%s' is not absolute", e->path);
		return false;
	}
	return true;
}

/* ---- the config file ----
 *
 * inih tells the handler neither the line nor where a section starts, and two
 * consecutive [export] sections must become two exports.  So the file is read
 * through our own reader, which counts lines and section headers; the handler
 * compares the section count with the one its current export began in. */

struct cfg_ctx {
	struct srv_opts *o;
	const char *path;
	FILE *f;
	int line;	     /* line of the text last handed to inih */
	bool at_line_start;  /* the last chunk ended its line */
	int section_no;	     /* section headers seen */
	int section_line;    /* line of the last section header */
	int export_section;  /* section_no of o->exports[last] from this file */
	size_t first_export; /* exports before this file's */
	char err[512];
	int err_line; /* 0: no error yet */
};

static char *cfg_reader(char *str, int num, void *stream)
{
	struct cfg_ctx *c = stream;
	const char *p = str;

	if (!fgets(str, num, c->f))
		return NULL;
	if (c->at_line_start) {
		c->line++;
		p += strspn(p, " \t");
		if (*p == '[') {
			c->section_no++;
			c->section_line = c->line;
		}
	}
	c->at_line_start = strchr(str, '\n') != NULL;
	return str;
}

static int cfg_fail(struct cfg_ctx *c, const char *msg)
{
	if (!c->err_line) {
		c->err_line = c->line;
		snprintf(c->err, sizeof(c->err), "%s:%d: %s", c->path, c->line, msg);
	}
	return 0;
}

/* The export that keys of the current [export] section go to. */
static struct srv_export_opts *cfg_export(struct cfg_ctx *c)
{
	struct srv_export_opts *e;

	if (c->export_section == c->section_no)
		return &c->o->exports[c->o->nexports - 1];
	e = add_export(c->o);
	c->export_section = c->section_no;
	if (e)
		e->cfg_line = c->section_line;
	return e;
}

static int cfg_handler(void *user, const char *section, const char *key,
		       const char *value)
{
	struct cfg_ctx *c = user;
	struct srv_export_opts *e;
	char msg[400];

	if (c->err_line)
		return 1; /* report only the first problem */
	if (strcmp(section, "server") == 0) {
		if (!set_server_key(c->o, key, value, msg, sizeof(msg)))
			return cfg_fail(c, msg);
		return 1;
	}
	if (strcmp(section, "export") == 0) {
		e = cfg_export(c);
		if (!e)
			return cfg_fail(c, "out of memory");
		if (!set_export_key(e, key, value, msg, sizeof(msg)))
			return cfg_fail(c, msg);
		return 1;
	}
	snprintf(msg, sizeof(msg),
		 section[0] ? "unknown section [%s]" : "key outside a section", section);
	return cfg_fail(c, msg);
}

/* Checks the exports the file added; an error names the export's header line. */
static int cfg_check_exports(struct cfg_ctx *c, char *err, size_t errlen)
{
	char msg[400];

	for (size_t i = c->first_export; i < c->o->nexports; i++) {
		if (!check_export(&c->o->exports[i], msg, sizeof(msg))) {
			snprintf(err, errlen, "%s:%d: %s", c->path,
				 c->o->exports[i].cfg_line, msg);
			return -1;
		}
	}
	return 0;
}

int srv_config_load(const char *path, struct srv_opts *o, char *err, size_t errlen)
{
	struct cfg_ctx c = {
	    .o = o, .path = path, .at_line_start = true, .export_section = -1};
	int rc;

	c.first_export = o->nexports;
	c.f = fopen(path, "r");
	if (!c.f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	/* Debian's inih exposes its build limits: lift the 200-byte line limit
	 * (lowerdir lists are long) and let indentation mean nothing. */
	ini_use_stack = false;
	ini_allow_realloc = true;
	ini_max_line = 1 << 20;
	ini_allow_multiline = false;
	rc = ini_parse_stream(cfg_reader, &c, cfg_handler, &c);
	fclose(c.f);
	if (c.err_line && (rc <= 0 || rc >= c.err_line)) {
		snprintf(err, errlen, "%s", c.err);
		return -1;
	}
	if (rc > 0) {
		snprintf(err, errlen,
			 "%s:%d: syntax error (expected [section] or key = value)", path,
			 rc);
		return -1;
	}
	if (rc < 0) {
		snprintf(err, errlen, "%s: out of memory", path);
		return -1;
	}
	return cfg_check_exports(&c, err, errlen);
}

/* ---- the command line ---- */

enum {
	OPT_LOWERDIR = 256,
	OPT_UPPERDIR,
	OPT_WORKDIR,
	OPT_EXPORT,
	OPT_CLIENTS,
	OPT_NFS_PORT,
	OPT_MOUNT_PORT,
	OPT_BIND,
	OPT_STATE_DIR,
	OPT_KEY_FILE,
	OPT_NSM_DIR,
	OPT_THREADS,
	OPT_MAX_CONNS,
	OPT_MAX_CONNS_PER_ADDR,
	OPT_IDLE_TIMEOUT,
	OPT_MAX_CLIENT_UNIONS,
	OPT_CLIENT_UNION_IDLE,
	OPT_CLIENT_UNIONS_MEMORY,
	OPT_NLM_PORT,
	OPT_NLM_MAX_LOCKS_PER_HOST,
	OPT_NLM_MAX_LOCKS,
	OPT_NSM_PORT,
	OPT_GRACE_PERIOD,
	OPT_METRICS,
	OPT_RETIRE_TIME,
	OPT_CONTROL_SOCKET,
	OPT_LOG_LEVEL,
	OPT_FOREGROUND,
	OPT_NO_RPCBIND,
	OPT_NO_PORTMAPPER,
	OPT_NO_LAYER_INDEX,
	OPT_CONFIG,
	OPT_HELP,
	OPT_VERSION,
};

static const struct option long_opts[] = {
    {"lowerdir", required_argument, NULL, OPT_LOWERDIR},
    {"upperdir", required_argument, NULL, OPT_UPPERDIR},
    {"workdir", required_argument, NULL, OPT_WORKDIR},
    {"export", required_argument, NULL, OPT_EXPORT},
    {"clients", required_argument, NULL, OPT_CLIENTS},
    {"nfs-port", required_argument, NULL, OPT_NFS_PORT},
    {"mount-port", required_argument, NULL, OPT_MOUNT_PORT},
    {"bind", required_argument, NULL, OPT_BIND},
    {"state-dir", required_argument, NULL, OPT_STATE_DIR},
    {"key-file", required_argument, NULL, OPT_KEY_FILE},
    {"nsm-dir", required_argument, NULL, OPT_NSM_DIR},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"max-connections", required_argument, NULL, OPT_MAX_CONNS},
    {"max-connections-per-address", required_argument, NULL, OPT_MAX_CONNS_PER_ADDR},
    {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
    {"max-client-unions", required_argument, NULL, OPT_MAX_CLIENT_UNIONS},
    {"client-union-idle", required_argument, NULL, OPT_CLIENT_UNION_IDLE},
    {"client-unions-memory", required_argument, NULL, OPT_CLIENT_UNIONS_MEMORY},
    {"nlm-port", required_argument, NULL, OPT_NLM_PORT},
    {"nlm-max-locks-per-host", required_argument, NULL, OPT_NLM_MAX_LOCKS_PER_HOST},
    {"nlm-max-locks", required_argument, NULL, OPT_NLM_MAX_LOCKS},
    {"nsm-port", required_argument, NULL, OPT_NSM_PORT},
    {"grace-period", required_argument, NULL, OPT_GRACE_PERIOD},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"retire-time", required_argument, NULL, OPT_RETIRE_TIME},
    {"control-socket", required_argument, NULL, OPT_CONTROL_SOCKET},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"foreground", no_argument, NULL, OPT_FOREGROUND},
    {"no-rpcbind", no_argument, NULL, OPT_NO_RPCBIND},
    {"no-portmapper", no_argument, NULL, OPT_NO_PORTMAPPER},
    {"no-layer-index", no_argument, NULL, OPT_NO_LAYER_INDEX},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static void print_usage(void)
{
	printf("usage: union-nfsd --lowerdir=L1:L2:... [--upperdir=U --workdir=W]\n"
	       "                  [--export=/PATH] [--clients='SPEC(opts) ...']\n"
	       "                  [--nfs-port=N] [--mount-port=N]\n"
	       "                  [--bind=ADDR] [--state-dir=DIR] [--key-file=FILE]\n"
	       "                  [--nsm-dir=DIR]\n"
	       "                  [--threads=N]\n"
	       "                  [--max-connections=N]\n"
	       "                  [--max-connections-per-address=N]\n"
	       "                  [--idle-timeout=SECONDS]\n"
	       "                  [--max-client-unions=N] [--client-union-idle=SECONDS]\n"
	       "                  [--client-unions-memory=SIZE]\n"
	       "                  [--nlm-port=N] [--nlm-max-locks-per-host=N]\n"
	       "                  [--nlm-max-locks=N] [--nsm-port=N]\n"
	       "                  [--grace-period=SECONDS] [--metrics=ADDR:PORT]\n"
	       "                  [--retire-time=SECONDS] [--control-socket=PATH|off]\n"
	       "                  [--log-level=err|warn|info|debug] [--foreground]\n"
	       "                  [--no-rpcbind] [--no-portmapper] [--no-layer-index]\n"
	       "                  [--config=FILE]\n"
	       "\n"
	       "Serves a union of directory layers over NFSv3 (overlayfs semantics).\n"
	       "  --lowerdir    read-only layers, top-most first, ':'-separated;\n"
	       "                %%a or %%h in one makes it a layer per client, left\n"
	       "                out for a client where it does not exist\n"
	       "  --upperdir    writable layer (with --workdir on the same filesystem);\n"
	       "                %%a (client address) or %%h (host name) in both gives\n"
	       "                each client its own, made on its first mount\n"
	       "  --export      path clients mount (default /)\n"
	       "  --clients     who may mount it, exports(5) style, e.g.\n"
	       "                '10.0.0.0/8(rw,no_root_squash) *(ro)' (default: this\n"
	       "                host only, %s)\n"
	       "  --nfs-port    NFS port (default %d; 0 picks one)\n"
	       "  --mount-port  MOUNT port (default %d; 0 picks one)\n"
	       "  --state-dir   node table and handle key (default %s)\n"
	       "  --key-file    32 bytes, mode 0600, that the handle, cookie and\n"
	       "                verifier keys come from instead of the state dir:\n"
	       "                gateways given the same file serve the same layers\n"
	       "                with the same handles (default: none)\n"
	       "  --nsm-dir     the lock manager's records of client hosts, one per\n"
	       "                address of ours they locked through, on storage\n"
	       "                every gateway reaches, so the gateway that takes\n"
	       "                over an address (union-nfsctl takeover) lets its\n"
	       "                clients reclaim their locks (default: none, one\n"
	       "                record in the state dir)\n"
	       "  --max-connections, --max-connections-per-address\n"
	       "                TCP connections at once (default 0: from the limit on\n"
	       "                open files); at the cap the oldest idle one is closed\n"
	       "  --idle-timeout  seconds before an idle connection is closed\n"
	       "                (default %u; 0: never)\n"
	       "  --max-client-unions  per-client unions open at once (default 0:\n"
	       "                from the limit on open files and the memory); the\n"
	       "                least recently used one is released, and reopens\n"
	       "                on its next call\n"
	       "  --client-union-idle  seconds before an unmounted client's union\n"
	       "                is released (default %u; 0: never)\n"
	       "  --client-unions-memory  memory the open per-client unions may\n"
	       "                hold together, in bytes or with K, M, G, T (default\n"
	       "                0: an eighth of the machine's, or of the cgroup's\n"
	       "                limit); each may hold an equal share of it\n"
	       "  --nlm-port    NLM (lock manager) port of its own (default 0:\n"
	       "                picks one); the NFS and MOUNT ports serve it too\n"
	       "  --nlm-max-locks-per-host, --nlm-max-locks  locks, waiters and\n"
	       "                share reservations per client host and in all\n"
	       "                (default %d, %d; 0: no cap); past them a client\n"
	       "                gets NLM4_DENIED_NOLOCKS\n"
	       "  --nsm-port    NSM (status monitor) port of its own (default 0:\n"
	       "                picks one)\n"
	       "  --grace-period  seconds after a restart in which only locks held\n"
	       "                before it may be reclaimed (default %u; 0: none)\n"
	       "  --metrics     serve Prometheus metrics over HTTP at\n"
	       "                http://ADDR:PORT/metrics (default: off)\n"
	       "  --retire-time  seconds a lower layer a reload replaced or removed\n"
	       "                keeps serving the old handles of its files\n"
	       "                (default 0: until the next restart)\n"
	       "  --control-socket  where union-nfsctl(8) reaches the server, root\n"
	       "                only (default STATE_DIR/ctl.sock; off: none)\n"
	       "  --no-rpcbind  do not register with the host's rpcbind\n"
	       "  --no-portmapper  do not answer the portmapper protocol on port\n"
	       "                111 (default: answer it when 111 is free)\n"
	       "  --no-layer-index  know lower objects by inode number, not by\n"
	       "                the layers' indexes in the state dir (for layers\n"
	       "                rewritten in place; a copied layer then gives\n"
	       "                stale handles)\n"
	       "  --config      INI file with [server] and [export] sections\n"
	       "Prints 'listening nfs=P mount=M' once it serves.\n",
	       SRV_LOOPBACK_CLIENTS, DEFAULT_NFS_PORT, DEFAULT_MOUNT_PORT,
	       DEFAULT_STATE_DIR, SRV_IDLE_TIMEOUT_DEFAULT, SRV_CLIENT_UNION_IDLE_DEFAULT,
	       NLM_MAX_LOCKS_PER_HOST_DEFAULT, NLM_MAX_LOCKS_DEFAULT,
	       NSM_GRACE_PERIOD_DEFAULT);
}

/* What the command line said, before the config file is merged under it. */
struct cli {
	struct srv_opts server; /* only the fields of flags given are meaningful */
	bool given[OPT_LOG_LEVEL - OPT_LOWERDIR + 1]; /* by flag: cli_given */
	struct srv_export_opts ex;		      /* from --lowerdir etc. */
	bool any_export_flag;
	bool no_rpcbind;
	bool no_portmapper;
	bool no_layer_index;
};

/* The entry of CLI->given that says whether flag OPT was given. */
static bool *cli_given(struct cli *cli, int opt)
{
	assert(opt >= OPT_LOWERDIR && opt <= OPT_LOG_LEVEL);
	return &cli->given[opt - OPT_LOWERDIR];
}

static const char *flag_name(int opt)
{
	for (const struct option *lo = long_opts; lo->name; lo++)
		if (lo->val == opt)
			return lo->name;
	return "?";
}

static bool cli_flag(struct cli *cli, int opt, char *err, size_t errlen)
{
	static const char *const keys[] = {
	    [OPT_NFS_PORT - OPT_LOWERDIR] = "nfs-port",
	    [OPT_MOUNT_PORT - OPT_LOWERDIR] = "mount-port",
	    [OPT_BIND - OPT_LOWERDIR] = "bind",
	    [OPT_STATE_DIR - OPT_LOWERDIR] = "state-dir",
	    [OPT_KEY_FILE - OPT_LOWERDIR] = "key-file",
	    [OPT_NSM_DIR - OPT_LOWERDIR] = "nsm-dir",
	    [OPT_THREADS - OPT_LOWERDIR] = "threads",
	    [OPT_MAX_CONNS - OPT_LOWERDIR] = "max-connections",
	    [OPT_MAX_CONNS_PER_ADDR - OPT_LOWERDIR] = "max-connections-per-address",
	    [OPT_IDLE_TIMEOUT - OPT_LOWERDIR] = "idle-timeout",
	    [OPT_MAX_CLIENT_UNIONS - OPT_LOWERDIR] = "max-client-unions",
	    [OPT_CLIENT_UNION_IDLE - OPT_LOWERDIR] = "client-union-idle",
	    [OPT_CLIENT_UNIONS_MEMORY - OPT_LOWERDIR] = "client-unions-memory",
	    [OPT_NLM_PORT - OPT_LOWERDIR] = "nlm-port",
	    [OPT_NLM_MAX_LOCKS_PER_HOST - OPT_LOWERDIR] = "nlm-max-locks-per-host",
	    [OPT_NLM_MAX_LOCKS - OPT_LOWERDIR] = "nlm-max-locks",
	    [OPT_NSM_PORT - OPT_LOWERDIR] = "nsm-port",
	    [OPT_GRACE_PERIOD - OPT_LOWERDIR] = "grace-period",
	    [OPT_METRICS - OPT_LOWERDIR] = "metrics",
	    [OPT_RETIRE_TIME - OPT_LOWERDIR] = "retire-time",
	    [OPT_CONTROL_SOCKET - OPT_LOWERDIR] = "control-socket",
	    [OPT_LOG_LEVEL - OPT_LOWERDIR] = "log-level",
	    [OPT_LOWERDIR - OPT_LOWERDIR] = "lowerdir",
	    [OPT_UPPERDIR - OPT_LOWERDIR] = "upperdir",
	    [OPT_WORKDIR - OPT_LOWERDIR] = "workdir",
	    [OPT_EXPORT - OPT_LOWERDIR] = "path",
	    [OPT_CLIENTS - OPT_LOWERDIR] = "clients",
	};
	const char *key;

	assert(opt >= OPT_LOWERDIR && opt <= OPT_LOG_LEVEL);
	key = keys[opt - OPT_LOWERDIR];

	*cli_given(cli, opt) = true;
	if (opt <= OPT_CLIENTS) { /* the export's flags, OPT_LOWERDIR first */
		cli->any_export_flag = true;
		return set_export_key(&cli->ex, key, optarg, err, errlen);
	}
	if (!set_server_key(&cli->server, key, optarg, err, errlen)) {
		/* name the flag, not the config key */
		snprintf(err, errlen, "bad --%s '%s'", flag_name(opt), optarg);
		return false;
	}
	return true;
}

/* Reads ARGV into CLI.  Returns SRV_ARGS_RUN to go on. */
static enum srv_args_result read_argv(int argc, char **argv, struct cli *cli,
				      struct srv_opts *o, char *err, size_t errlen)
{
	int opt;

	opterr = 0; /* our own one-line messages */
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":", long_opts, NULL)) != -1) {
		switch (opt) {
		case OPT_FOREGROUND:
			o->foreground = true;
			break;
		case OPT_NO_RPCBIND:
			cli->no_rpcbind = true;
			break;
		case OPT_NO_PORTMAPPER:
			cli->no_portmapper = true;
			break;
		case OPT_NO_LAYER_INDEX:
			cli->no_layer_index = true;
			break;
		case OPT_CONFIG:
			if (!set_str(&o->config_path, optarg))
				return snprintf(err, errlen, "out of memory"),
				       SRV_ARGS_ERROR;
			break;
		case OPT_HELP:
			print_usage();
			return SRV_ARGS_EXIT;
		case OPT_VERSION:
			printf("union-nfsd %s\n", UNION_NFSD_VERSION);
			return SRV_ARGS_EXIT;
		case ':':
			snprintf(err, errlen, "option '%s' needs a value",
				 argv[optind - 1]);
			return SRV_ARGS_ERROR;
		case '?':
			snprintf(err, errlen, "unknown option '%s'", argv[optind - 1]);
			return SRV_ARGS_ERROR;
		default:
			if (!cli_flag(cli, opt, err, errlen))
				return SRV_ARGS_ERROR;
		}
	}
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
		return SRV_ARGS_ERROR;
	}
	return SRV_ARGS_RUN;
}

/* Lays the command line over the config file's values. */
static bool merge_cli(struct cli *cli, struct srv_opts *o, char *err, size_t errlen)
{
	struct srv_export_opts *e;

	if (*cli_given(cli, OPT_NFS_PORT))
		o->cfg.nfs_port = cli->server.cfg.nfs_port;
	if (*cli_given(cli, OPT_MOUNT_PORT))
		o->cfg.mount_port = cli->server.cfg.mount_port;
	if (*cli_given(cli, OPT_THREADS))
		o->cfg.nthreads = cli->server.cfg.nthreads;
	if (*cli_given(cli, OPT_MAX_CONNS))
		o->cfg.max_conns = cli->server.cfg.max_conns;
	if (*cli_given(cli, OPT_MAX_CONNS_PER_ADDR))
		o->cfg.max_conns_per_addr = cli->server.cfg.max_conns_per_addr;
	if (*cli_given(cli, OPT_IDLE_TIMEOUT))
		o->cfg.idle_timeout = cli->server.cfg.idle_timeout;
	if (*cli_given(cli, OPT_MAX_CLIENT_UNIONS))
		o->cfg.max_client_unions = cli->server.cfg.max_client_unions;
	if (*cli_given(cli, OPT_CLIENT_UNION_IDLE))
		o->cfg.client_union_idle = cli->server.cfg.client_union_idle;
	if (*cli_given(cli, OPT_CLIENT_UNIONS_MEMORY))
		o->cfg.client_unions_memory = cli->server.cfg.client_unions_memory;
	if (*cli_given(cli, OPT_NLM_PORT))
		o->cfg.nlm_port = cli->server.cfg.nlm_port;
	if (*cli_given(cli, OPT_NLM_MAX_LOCKS_PER_HOST))
		o->cfg.nlm_max_locks_per_host = cli->server.cfg.nlm_max_locks_per_host;
	if (*cli_given(cli, OPT_NLM_MAX_LOCKS))
		o->cfg.nlm_max_locks = cli->server.cfg.nlm_max_locks;
	if (*cli_given(cli, OPT_NSM_PORT))
		o->cfg.nsm_port = cli->server.cfg.nsm_port;
	if (*cli_given(cli, OPT_GRACE_PERIOD))
		o->cfg.grace_period = cli->server.cfg.grace_period;
	if (*cli_given(cli, OPT_RETIRE_TIME))
		o->cfg.retire_time = cli->server.cfg.retire_time;
	if (*cli_given(cli, OPT_LOG_LEVEL))
		o->log_level = cli->server.log_level;
	if (cli->no_rpcbind)
		o->cfg.register_rpcbind = false;
	if (cli->no_portmapper)
		o->cfg.portmapper = false;
	if (cli->no_layer_index)
		o->cfg.layer_index = false;
	if (cli->server.bind_addr) {
		free(o->bind_addr);
		o->bind_addr = cli->server.bind_addr;
		cli->server.bind_addr = NULL;
	}
	if (cli->server.state_dir) {
		free(o->state_dir);
		o->state_dir = cli->server.state_dir;
		cli->server.state_dir = NULL;
	}
	if (cli->server.key_file) {
		free(o->key_file);
		o->key_file = cli->server.key_file;
		cli->server.key_file = NULL;
	}
	if (cli->server.nsm_dir) {
		free(o->nsm_dir);
		o->nsm_dir = cli->server.nsm_dir;
		cli->server.nsm_dir = NULL;
	}
	if (cli->server.metrics) {
		free(o->metrics);
		o->metrics = cli->server.metrics;
		cli->server.metrics = NULL;
	}
	if (cli->server.control_socket) {
		free(o->control_socket);
		o->control_socket = cli->server.control_socket;
		cli->server.control_socket = NULL;
	}
	if (!cli->any_export_flag)
		return true;
	if (!cli->ex.lowerdirs) {
		snprintf(err, errlen,
			 "--upperdir, --workdir, --export and --clients need --lowerdir");
		return false;
	}
	if (!check_export(&cli->ex, err, errlen)) {
		/* phrase it as flags */
		if (cli->ex.upperdir && !cli->ex.workdir)
			snprintf(err, errlen, "--upperdir needs --workdir");
		else if (cli->ex.workdir && !cli->ex.upperdir)
			snprintf(err, errlen, "--workdir needs --upperdir");
		return false;
	}
	e = add_export(o);
	if (!e) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	*e = cli->ex;
	memset(&cli->ex, 0, sizeof(cli->ex));
	return true;
}

/* Makes *P absolute against the working directory: exports are opened again
 * by a reload, per-client uppers while serving, both after the daemon has
 * left the directory it was started in. */
static bool make_absolute(char **p)
{
	char cwd[PATH_MAX], *abs;

	if (!*p || (*p)[0] == '/')
		return true;
	if (!getcwd(cwd, sizeof(cwd)) || asprintf(&abs, "%s/%s", cwd, *p) < 0)
		return false;
	free(*p);
	*p = abs;
	return true;
}

/* The control socket's path: STATE_DIR/ctl.sock unless one was given,
 * none for "off". */
static bool control_socket_path(struct srv_opts *o)
{
	if (o->control_socket && strcmp(o->control_socket, "off") == 0) {
		free(o->control_socket);
		o->control_socket = NULL;
		return true;
	}
	if (o->control_socket)
		return make_absolute(&o->control_socket);
	o->control_socket_default = true;
	return asprintf(&o->control_socket, "%s/ctl.sock", o->state_dir) >= 0 ||
	       (o->control_socket = NULL, false);
}

static bool make_paths_absolute(struct srv_opts *o)
{
	bool ok = make_absolute(&o->state_dir) && make_absolute(&o->key_file) &&
		  make_absolute(&o->nsm_dir) && control_socket_path(o);

	for (size_t i = 0; ok && i < o->nexports; i++) {
		struct srv_export_opts *e = &o->exports[i];

		ok = make_absolute(&e->upperdir) && make_absolute(&e->workdir);
		for (size_t j = 0; ok && j < e->nlower; j++)
			ok = make_absolute(&e->lowerdirs[j]);
	}
	return ok;
}

enum srv_args_result srv_args_parse(int argc, char **argv, struct srv_opts *o, char *err,
				    size_t errlen)
{
	struct cli cli = {0};
	enum srv_args_result res = SRV_ARGS_ERROR;

	if (!set_defaults(o)) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	res = read_argv(argc, argv, &cli, o, err, errlen);
	if (res != SRV_ARGS_RUN)
		goto out;
	res = SRV_ARGS_ERROR;
	if (o->config_path && srv_config_load(o->config_path, o, err, errlen) < 0)
		goto out;
	if (!merge_cli(&cli, o, err, errlen))
		goto out;
	if (o->nexports == 0) {
		snprintf(err, errlen, "missing --lowerdir (or an [export] in --config)");
		goto out;
	}
	if (!make_paths_absolute(o) || !make_absolute(&o->config_path)) {
		snprintf(err, errlen, "cannot make paths absolute: %s", strerror(errno));
		goto out;
	}
	o->cfg.bind_addr = o->bind_addr;
	res = SRV_ARGS_RUN;
out:
	srv_export_opts_free(&cli.ex);
	free(cli.server.bind_addr);
	free(cli.server.state_dir);
	free(cli.server.key_file);
	free(cli.server.nsm_dir);
	free(cli.server.metrics);
	free(cli.server.control_socket);
	return res;
}
