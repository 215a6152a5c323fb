/* SPDX-License-Identifier: Apache-2.0 */
/* nfsctl.c - union-nfsctl: the admin command of a running union-nfsd.
 *
 * It sends one request line, "COMMAND [ARG]", to the server's control
 * socket (server/ctl.c says the protocol) and prints the JSON reply: as
 * tables for a person, or as it came with --json.  The server makes every
 * reply; this side only knows, per command, how many arguments it takes
 * and how to lay the reply out (the table `cmds`).  An error is one line
 * "union-nfsctl: PROBLEM" on stderr and a non-zero status: 1 when the
 * server refused or could not be reached, 2 for a bad command line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SOCKET	  "/var/lib/union-nfsd/ctl.sock"
#define REPLY_MAX	  (64u << 20) /* a reply larger than this is not one */
#define REPLY_TIMEOUT_S	  300	      /* `clients` sums every upper's size */
#define EXIT_REFUSED	  1
#define EXIT_USAGE	  2
#define TABLE_MAX_COLUMNS 9

/* ---- tables for people ---- */

/* Rows of cells, printed with each column as wide as its widest cell. */
struct table {
	size_t ncols, nrows;
	char **cells; /* nrows * ncols, owned */
};

static void table_row(struct table *t, ...)
{
	char **cells = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(*cells));
	va_list ap;

	if (!cells)
		return;
	t->cells = cells;
	va_start(ap, t);
	for (size_t c = 0; c < t->ncols; c++) {
		const char *s = va_arg(ap, const char *);

		cells[t->nrows * t->ncols + c] = strdup(s ? s : "-");
	}
	va_end(ap);
	t->nrows++;
}

/* Prints T (its first row the heading) and frees it. */
static void table_print(struct table *t)
{
	size_t w[TABLE_MAX_COLUMNS] = {0};

	for (size_t i = 0; i < t->nrows * t->ncols; i++) {
		size_t n = t->cells[i] ? strlen(t->cells[i]) : 0;

		if (n > w[i % t->ncols])
			w[i % t->ncols] = n;
	}
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * t->ncols + c];

			if (c + 1 < t->ncols)
				printf("%-*s  ", (int)w[c], s ? s : "");
			else
				printf("%s\n", s ? s : "");
		}
	}
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = 0;
}

/* ---- formatting ---- */

static const char *str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static long long num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? (long long)json_number_value(v) : 0;
}

/* N as text into BUF, or "-" when KEY is not in O. */
static const char *num_or_dash(json_t *o, const char *key, char *buf, size_t len)
{
	if (!json_is_number(json_object_get(o, key)))
		return "-";
	snprintf(buf, len, "%lld", num(o, key));
	return buf;
}

static const char *bytes_text(json_t *o, const char *key, char *buf, size_t len)
{
	static const char units[] = "KMGTP";
	double v;
	int u = -1;

	if (!json_is_number(json_object_get(o, key)))
		return "-";
	v = (double)num(o, key);
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%.0f B", v);
	else
		snprintf(buf, len, "%.1f %ciB", v, units[u]);
	return buf;
}

static const char *duration_text(long long s, char *buf, size_t len)
{
	if (s >= 86400)
		snprintf(buf, len, "%lldd %02lldh%02lldm", s / 86400, s % 86400 / 3600,
			 s % 3600 / 60);
	else if (s >= 3600)
		snprintf(buf, len, "%lldh%02lldm%02llds", s / 3600, s % 3600 / 60,
			 s % 60);
	else if (s >= 60)
		snprintf(buf, len, "%lldm%02llds", s / 60, s % 60);
	else
		snprintf(buf, len, "%llds", s);
	return buf;
}

static const char *time_text(long long t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (!localtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%lld", t);
	return buf;
}

/* ---- what each command prints ---- */

static void print_export(json_t *ex)
{
	char mem[32];
	json_t *l;
	size_t i;

	printf("\nexport %s%s\n", str(ex, "path"),
	       json_is_true(json_object_get(ex, "per_client")) ? " (per client)" : "");
	printf("  upper    %s\n", str(ex, "upper") ? str(ex, "upper") : "- (read-only)");
	if (str(ex, "work"))
		printf("  work     %s\n", str(ex, "work"));
	json_array_foreach(json_object_get(ex, "lowers"), i, l)
	    printf("  lower    %s\n", json_string_value(l));
	printf("  clients  %s\n", str(ex, "clients"));
	if (json_object_get(ex, "client_unions"))
		printf("  client unions open  %lld, holding %s\n",
		       num(ex, "client_unions"),
		       bytes_text(ex, "client_unions_memory_bytes", mem, sizeof(mem)));
}

/* The limits of the client unions, when an export has them. */
static void print_union_limits(json_t *r)
{
	json_t *lim = json_object_get(r, "client_union_limits"), *ex;
	char all[32], each[32];
	bool any = false;
	size_t i;

	json_array_foreach(json_object_get(r, "exports"), i, ex)
	{
		any = any || json_is_true(json_object_get(ex, "per_client"));
	}
	if (!any || !lim)
		return;
	printf("\nclient unions: at most %lld open, holding at most %s together, %s "
	       "each\n",
	       num(lim, "max_open"), bytes_text(lim, "memory_bytes", all, sizeof(all)),
	       bytes_text(lim, "union_bytes", each, sizeof(each)));
}

static void print_status(json_t *r)
{
	json_t *ports = json_object_get(r, "ports"), *ex, *l;
	struct table t = {.ncols = 3};
	char up[64], age[64];
	size_t i;

	printf("union-nfsd %s, pid %lld, up %s\n", str(r, "version"), num(r, "pid"),
	       duration_text(num(r, "uptime"), up, sizeof(up)));
	printf(
	    "ports: nfs %lld, mount %lld, nlm %lld, nsm %lld; portmapper %s\n",
	    num(ports, "nfs"), num(ports, "mount"), num(ports, "nlm"), num(ports, "nsm"),
	    json_is_true(json_object_get(ports, "portmapper")) ? "on port 111" : "off");
	json_array_foreach(json_object_get(r, "exports"), i, ex) print_export(ex);
	print_union_limits(r);
	if (!json_array_size(json_object_get(r, "retired")))
		return;
	printf("\nretired layers (union-nfsctl release):\n");
	table_row(&t, "EXPORT", "LAYER", "RETIRED FOR");
	json_array_foreach(json_object_get(r, "retired"), i, l)
	    table_row(&t, str(l, "export"), str(l, "layer"),
		      duration_text(num(l, "age"), age, sizeof(age)));
	table_print(&t);
}

static void print_clients(json_t *r)
{
	struct table t = {.ncols = 6}, u = {.ncols = 9};
	char since[64], idle[64], calls[32], size[32], ents[32], rd[32], wr[32], mem[32];
	json_t *m;
	size_t i;

	table_row(&t, "HOST", "EXPORT", "MOUNTED SINCE", "CALLS", "READ", "WRITTEN");
	json_array_foreach(json_object_get(r, "mounts"), i, m)
	    table_row(&t, str(m, "host"), str(m, "path"),
		      time_text(num(m, "since"), since, sizeof(since)),
		      num_or_dash(m, "calls", calls, sizeof(calls)),
		      bytes_text(m, "read_bytes", rd, sizeof(rd)),
		      bytes_text(m, "written_bytes", wr, sizeof(wr)));
	table_print(&t);
	if (!json_array_size(json_object_get(r, "unions")))
		return;
	printf("\n");
	table_row(&u, "EXPORT", "CLIENT", "STATE", "MOUNTED", "IDLE", "CALLS", "MEMORY",
		  "UPPER", "ENTRIES");
	json_array_foreach(json_object_get(r, "unions"), i, m)
	    table_row(&u, str(m, "export"), str(m, "client"), str(m, "state"),
		      json_is_true(json_object_get(m, "mounted")) ? "yes" : "no",
		      duration_text(num(m, "idle"), idle, sizeof(idle)),
		      num_or_dash(m, "calls", calls, sizeof(calls)),
		      bytes_text(m, "memory_bytes", mem, sizeof(mem)),
		      bytes_text(m, "upper_bytes", size, sizeof(size)),
		      num_or_dash(m, "upper_entries", ents, sizeof(ents)));
	table_print(&u);
}

static void print_message(json_t *r)
{
	if (str(r, "message"))
		printf("%s\n", str(r, "message"));
}

static void print_release(json_t *r)
{
	long long n = num(r, "released");

	printf("released %lld retired layer%s\n", n, n == 1 ? "" : "s");
}

/* The first sample named NAME whose labels LABELS all has; NULL if none. */
static json_t *sample_find(json_t *samples, const char *name, json_t *labels)
{
	const char *k;
	json_t *s, *v;
	size_t i;

	json_array_foreach(samples, i, s)
	{
		bool match = strcmp(str(s, "name"), name) == 0;

		json_object_foreach(labels, k, v) match =
		    match &&
		    json_equal(json_object_get(json_object_get(s, "labels"), k), v);
		if (match)
			return s;
	}
	return NULL;
}

/* Errors of one procedure, summed over the statuses. */
static long long proc_errors(json_t *samples, json_t *labels)
{
	long long n = 0;
	json_t *s;
	size_t i;

	json_array_foreach(samples, i, s)
	{
		json_t *l = json_object_get(s, "labels");

		if (strcmp(str(s, "name"), "union_nfsd_rpc_errors_total") == 0 &&
		    json_equal(json_object_get(l, "program"),
			       json_object_get(labels, "program")) &&
		    json_equal(json_object_get(l, "procedure"),
			       json_object_get(labels, "procedure")))
			n += num(s, "value");
	}
	return n;
}

/* The procedures that were called: calls, errors, mean time. */
static void print_calls(json_t *samples)
{
	struct table t = {.ncols = 5};
	char calls[32], errs[32], mean[32];
	json_t *s;
	size_t i;

	table_row(&t, "PROGRAM", "PROCEDURE", "CALLS", "ERRORS", "MEAN");
	json_array_foreach(samples, i, s)
	{
		json_t *l = json_object_get(s, "labels"), *sum;
		long long n = num(s, "value");

		if (strcmp(str(s, "name"), "union_nfsd_rpc_calls_total") != 0 || n == 0)
			continue;
		sum = sample_find(samples, "union_nfsd_rpc_duration_seconds_sum", l);
		snprintf(calls, sizeof(calls), "%lld", n);
		snprintf(errs, sizeof(errs), "%lld", proc_errors(samples, l));
		snprintf(mean, sizeof(mean), "%.3f ms",
			 sum ? json_number_value(json_object_get(sum, "value")) * 1e3 /
				   (double)n
			     : 0.0);
		table_row(&t, str(l, "program"), str(l, "procedure"), calls, errs, mean);
	}
	if (t.nrows == 1)
		table_row(&t, "-", "(no calls yet)", "0", "0", "-");
	table_print(&t);
}

/* The calls and bytes of the families FAM_calls_total, FAM_read_bytes_total
 * and FAM_written_bytes_total, one row a series; HEAD names the client
 * label's column. */
static void print_traffic(json_t *samples, const char *fam, const char *head)
{
	struct table t = {.ncols = 5};
	char name[128], calls[32], rd[32], wr[32];
	json_t *s, *x;
	size_t i;

	table_row(&t, "EXPORT", head, "CALLS", "READ", "WRITTEN");
	json_array_foreach(samples, i, s)
	{
		json_t *l = json_object_get(s, "labels");

		snprintf(name, sizeof(name), "%s_calls_total", fam);
		if (strcmp(str(s, "name"), name) != 0)
			continue;
		snprintf(name, sizeof(name), "%s_read_bytes_total", fam);
		x = sample_find(samples, name, l);
		bytes_text(x, "value", rd, sizeof(rd));
		snprintf(name, sizeof(name), "%s_written_bytes_total", fam);
		x = sample_find(samples, name, l);
		bytes_text(x, "value", wr, sizeof(wr));
		table_row(&t, str(l, "export"), str(l, "client"),
			  num_or_dash(s, "value", calls, sizeof(calls)), rd, wr);
	}
	table_print(&t);
}

/* Every other unlabelled sample: the engine's and the transport's. */
static void print_others(json_t *samples)
{
	static const char prefix[] = "union_nfsd_";
	struct table t = {.ncols = 2};
	char v[64];
	json_t *s;
	size_t i;

	table_row(&t, "COUNTER", "VALUE");
	json_array_foreach(samples, i, s)
	{
		const char *name = str(s, "name");
		json_t *val = json_object_get(s, "value");

		if (json_object_size(json_object_get(s, "labels")))
			continue;
		if (json_is_integer(val))
			snprintf(v, sizeof(v), "%lld",
				 (long long)json_integer_value(val));
		else
			snprintf(v, sizeof(v), "%.6f", json_number_value(val));
		if (strncmp(name, prefix, sizeof(prefix) - 1) == 0)
			name += sizeof(prefix) - 1;
		table_row(&t, name, v);
	}
	table_print(&t);
}

static void print_stats(json_t *r)
{
	json_t *samples = json_object_get(r, "samples");

	print_calls(samples);
	printf("\n");
	print_traffic(samples, "union_nfsd_export", "CLIENT");
	printf("\n");
	print_traffic(samples, "union_nfsd_client", "CLIENT ADDRESS");
	printf("\n");
	print_others(samples);
}

/* ---- the commands ---- */

enum arg { ARG_NONE, ARG_OPTIONAL, ARG_REQUIRED };
struct cmd {
	const char *name;
	enum arg arg;
	const char *argname; /* "" when it takes none */
	const char *help;
	void (*print)(json_t *reply);
};

/* Each command the server knows (server/ctl.c, ctl_cmds) has its entry. */
static const struct cmd cmds[] = {
    {"status", ARG_NONE, "", "version, uptime, ports, exports, layers", print_status},
    {"clients", ARG_NONE, "",
     "mounts and their calls; client unions, their calls and uppers", print_clients},
    {"reload", ARG_NONE, "", "read the configuration again, as SIGHUP does",
     print_message},
    {"stats", ARG_NONE, "", "the server's counters", print_stats},
    {"reset", ARG_REQUIRED, " CLIENT", "discard a client's upper while serving",
     print_message},
    {"release", ARG_OPTIONAL, " [LAYER]", "release retired lower layers now",
     print_release},
    {"takeover", ARG_REQUIRED, " ADDRESS",
     "serve the locks of an address this host took over (HA)", print_message},
    {"giveup", ARG_REQUIRED, " ADDRESS",
     "free the locks taken through an address this host gives up (HA)", print_message},
    {"check", ARG_NONE, "", "exit 0 while serving: ports, layers, lock records (HA)",
     print_message},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: union-nfsctl [--socket=PATH] [--json] COMMAND [ARG]\n"
		   "\n"
		   "Asks a running union-nfsd (root only).  Commands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char name[32];

		snprintf(name, sizeof(name), "%s%s", cmds[i].name, cmds[i].argname);
		fprintf(f, "  %-16s %s\n", name, cmds[i].help);
	}
	fprintf(f,
		"Options:\n"
		"  -s, --socket=PATH  the server's control socket (default %s)\n"
		"  -j, --json         print the server's reply, JSON, as it is\n"
		"  -h, --help         this text\n"
		"  -V, --version      the version\n"
		"Exit: 0 done, 1 the server refused or cannot be reached, 2 bad usage.\n",
		DEFAULT_SOCKET);
}

static void fail_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_line(const char *fmt, ...)
{
	va_list ap;

	fputs("union-nfsctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const struct cmd *cmd_find(const char *name)
{
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(cmds[i].name, name) == 0)
			return &cmds[i];
	return NULL;
}

/* ---- the socket ---- */

static int ctl_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = REPLY_TIMEOUT_S};
	int fd, e;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		fail_line("socket path too long: %s", path);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		return fd;
	}
	e = errno;
	if (fd >= 0)
		close(fd);
	fail_line("cannot reach the server at %s: %s%s", path, strerror(e),
		  e == EACCES			     ? " (it serves root only)"
		  : e == ENOENT || e == ECONNREFUSED ? " (is union-nfsd running? "
						       "--socket names another socket)"
						     : "");
	return -1;
}

/* Sends REQUEST and reads the reply to its end; NULL (after a line) when
 * there is none. */
static char *ctl_ask(int fd, const char *request)
{
	size_t len = strlen(request), have = 0, cap = 0;
	char *buf = NULL, *nb;
	ssize_t n = 1; /* > 0: the buffer could not grow */

	if (write(fd, request, len) != (ssize_t)len) {
		fail_line("cannot send the request: %s", strerror(errno));
		return NULL;
	}
	shutdown(fd, SHUT_WR);
	for (;;) {
		if (have + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 65536;
			if (cap > REPLY_MAX || !(nb = realloc(buf, cap)))
				break;
			buf = nb;
		}
		n = read(fd, buf + have, cap - have - 1);
		if (n == 0) {
			buf[have] = '\0';
			return buf;
		}
		if (n < 0)
			break;
		have += (size_t)n;
	}
	fail_line("no reply from the server: %s",
		  n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? "timed out"
		  : n < 0					     ? strerror(errno)
								     : "too large");
	free(buf);
	return NULL;
}

/* Prints REPLY for CMD; the exit status. */
static int show(const struct cmd *cmd, const char *text, bool as_json)
{
	json_error_t jerr;
	json_t *r = json_loads(text, 0, &jerr);
	int status = 0;

	if (!json_is_object(r)) {
		fail_line("the server's reply is not JSON: %s", jerr.text);
		json_decref(r);
		return EXIT_REFUSED;
	}
	if (as_json)
		fputs(text, stdout);
	if (!json_is_true(json_object_get(r, "ok"))) {
		fail_line("%s", str(r, "error") ? str(r, "error") : "the server said no");
		status = EXIT_REFUSED;
	} else if (!as_json) {
		cmd->print(r);
	}
	json_decref(r);
	return status;
}

static const struct option long_opts[] = {
    {"socket", required_argument, NULL, 's'},
    {"json", no_argument, NULL, 'j'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

int main(int argc, char **argv)
{
	const char *path = DEFAULT_SOCKET, *arg;
	const struct cmd *cmd;
	bool as_json = false;
	char *request = NULL, *reply;
	int opt, fd, status = EXIT_REFUSED;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "+s:jhV", long_opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			path = optarg;
			break;
		case 'j':
			as_json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("union-nfsctl %s\n", UNION_NFSD_VERSION);
			return 0;
		default:
			fail_line("bad option '%s' (--help says which there are)",
				  argv[optind - 1]);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fail_line("no command (--help lists them)");
		return EXIT_USAGE;
	}
	if (!(cmd = cmd_find(argv[optind]))) {
		fail_line("unknown command '%s' (--help lists them)", argv[optind]);
		return EXIT_USAGE;
	}
	arg = optind + 1 < argc ? argv[optind + 1] : NULL;
	if (optind + 2 < argc || (arg && cmd->arg == ARG_NONE) ||
	    (!arg && cmd->arg == ARG_REQUIRED)) {
		fail_line("usage: union-nfsctl %s%s", cmd->name, cmd->argname);
		return EXIT_USAGE;
	}
	if (arg && strchr(arg, '\n')) {
		fail_line("%s: the argument holds a newline", cmd->name);
		return EXIT_USAGE;
	}
	if (asprintf(&request, "%s%s%s\n", cmd->name, arg ? " " : "", arg ? arg : "") < 0)
		return EXIT_REFUSED;
	if ((fd = ctl_connect(path)) < 0)
		goto out;
	reply = ctl_ask(fd, request);
	close(fd);
	if (reply)
		status = show(cmd, reply, as_json);
	free(reply);
out:
	free(request);
	return status;
}
