/* SPDX-License-Identifier: Apache-2.0 */
/* test_restack - a reload that changes only the lower stack of an export
 * updates it in place (exports/table.c invariant 3), through libnfs' raw NFSv3
 * calls.
 *
 *   test_restack UNION_NFSD
 *
 * Two exports over lower L1 (files f, g, h): "/" with an upper of its own,
 * and "/pc" per client (lowerdir TMP/hosts/%a:L1, upper and work TMP/c/%a/),
 * whose client 127.0.0.1 has a per-client lower holding "mine".  The client
 * copies h up in /pc (new bytes) and removes g there (a white-out), and
 * takes handles; the server's log (its stderr) goes to TMP/log and
 * --metrics serves the counters.  Then:
 *
 *   add      L2 (new, g, h of its own) put between the per-client lower and
 *            L1 of both exports by SIGHUP: the log says "lower layers
 *            updated in place" for each, with the layer counts and the one
 *            client union, and neither "replaced", "reopened" nor a second
 *            open or a release of the client's union; the export counters
 *            of "/" and of the client's union go on from where they were;
 *            old handles answer with their fileids; /pc shows L2's new
 *            file, the client's per-client lower, its copy of h (not L2's)
 *            and no g (its white-out hides L2's g too);
 *   fail     a reload over a lower that does not exist, and one that
 *            prepared the new stacks but exports "/" twice, change nothing;
 *   remove   L2 taken out again by SIGHUP: "new" is gone, the rest stands;
 *            the server then exits with 0 and no sanitizer report.
 *
 * The server is stopped by pid and the temp dir removed also when a test
 * fails (group teardown; the server has PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "nfs_raw.h"
#include "start_server.h"

#define TMP_PREFIX "/tmp/union-nfsd-restack."
#define WAIT_S	   60
#define N_CALLS	   5
#define CLIENTS	   "127.0.0.0/8(rw,no_root_squash,insecure)"
#define COPIED	   "the client's own h\n"

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	char conf[PATH_MAX + 16], config_arg[PATH_MAX + 32], state[PATH_MAX + 16];
	char log[PATH_MAX + 32]; /* STATE/stderr */
	int mport;
	struct test_server srv;
	struct rpc_context *nfs;
	struct fh root, pc_root, f, pc_f, pc_h;
	uint64_t f_id, pc_f_id, pc_root_id;
} g;

/* ---- files ---- */

static void put(const char *rel, const char *text)
{
	char p[PATH_MAX + 64];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	f = fopen(p, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		fail_msg("%s: %s", p, strerror(errno));
}

static void mkdirs(const char *rel)
{
	char cmd[PATH_MAX + 64];

	snprintf(cmd, sizeof(cmd), "mkdir -p %s/%s", g.tmp, rel);
	if (system(cmd) != 0)
		fail_msg("%s failed", cmd);
}

/* The config: both exports over LOWERS (':'-separated names below the temp
 * dir), /pc with the per-client lower on top; TWICE: "/" exported twice,
 * which fails a reload after it prepared the others. */
static void write_config(const char *lowers, bool twice)
{
	char low[2 * PATH_MAX], *p = low;
	const char *l = lowers;
	FILE *f;

	while (*l) { /* each name as TMP/NAME */
		size_t n = strcspn(l, ":");

		p += sprintf(p, "%s%s/%.*s", p == low ? "" : ":", g.tmp, (int)n, l);
		l += n + (l[n] == ':');
	}
	f = fopen(g.conf, "w");
	if (!f)
		fail_msg("%s: %s", g.conf, strerror(errno));
	fprintf(f,
		"[server]\nmetrics = 127.0.0.1:%d\n\n"
		"[export]\npath = /\nlowerdir = %s\nupperdir = %s/upper\n"
		"workdir = %s/work\nclients = " CLIENTS "\n\n"
		"[export]\npath = /pc\nlowerdir = %s/hosts/%%a:%s\n"
		"upperdir = %s/c/%%a/upper\nworkdir = %s/c/%%a/work\nclients = " CLIENTS
		"\n",
		g.mport, low, g.tmp, g.tmp, g.tmp, low, g.tmp, g.tmp);
	if (twice)
		fprintf(f, "\n[export]\npath = /\nlowerdir = %s/L1\n", g.tmp);
	fclose(f);
}

/* ---- the log and the metrics ---- */

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0;

	if (!f)
		return strdup("");
	if (getdelim(&buf, &len, '\0', f) < 0) {
		free(buf);
		buf = strdup("");
	}
	fclose(f);
	return buf;
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* Waits until the log holds LINE N times. */
static void wait_log(const char *line, int n)
{
	double t0 = it_now_s();

	for (;;) {
		char *log = slurp(g.log);
		int have = count_of(log, line);

		free(log);
		if (have >= n)
			return;
		if (it_now_s() - t0 > WAIT_S)
			fail_msg("the log never said \"%s\" (%d times)", line, n);
		it_sleep_ms(20);
	}
}

static void log_lacks(const char *what)
{
	char *log = slurp(g.log);
	const char *p = strstr(log, what);

	if (p)
		fail_msg("the log says: %.160s", p);
	free(log);
}

/* The value of the sample SERIES in GET /metrics; -1 when it is absent. */
static double metric(const char *series)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)g.mport),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	static char buf[1 << 20];
	const char *req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
	char line[PATH_MAX + 256];
	size_t len = 0;
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	const char *p;

	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		fail_msg("metrics: %s", strerror(errno));
	while (len < sizeof(buf) - 1 &&
	       (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	snprintf(line, sizeof(line), "\n%s ", series);
	p = strstr(buf, line);
	return p ? strtod(p + strlen(line), NULL) : -1;
}

static const char *client_series(void)
{
	static char s[PATH_MAX + 128];

	snprintf(s, sizeof(s),
		 "union_nfsd_export_calls_total{export=\"/pc\",client=\"%s/c/127.0.0.1/"
		 "upper\"}",
		 g.tmp);
	return s;
}

#define ROOT_SERIES "union_nfsd_export_calls_total{export=\"/\"}"

/* ---- calls ---- */

struct reply {
	int status;
	struct fh fh;
	uint64_t fileid;
	char data[256];
};

static void keep_lookup(void *data, void *out)
{
	LOOKUP3res *r = data;
	struct reply *o = out;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	nfs_raw_copy_fh(&o->fh, &r->LOOKUP3res_u.resok.object);
	if (r->LOOKUP3res_u.resok.obj_attributes.attributes_follow)
		o->fileid =
		    r->LOOKUP3res_u.resok.obj_attributes.post_op_attr_u.attributes.fileid;
}

static struct reply lookup(const struct fh *dir, const char *name)
{
	struct reply o = {.status = -1};
	struct call c = {.keep = keep_lookup, .out = &o};
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};

	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_lookup_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	return o;
}

static void keep_getattr(void *data, void *out)
{
	GETATTR3res *r = data;
	struct reply *o = out;

	o->status = r->status;
	if (r->status == NFS3_OK)
		o->fileid = r->GETATTR3res_u.resok.obj_attributes.fileid;
}

static struct reply getattr(const struct fh *fh)
{
	struct reply o = {.status = -1};
	struct call c = {.keep = keep_getattr, .out = &o};
	GETATTR3args a = {.object = nfs_raw_fh3(fh)};

	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_getattr_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	return o;
}

static void keep_read(void *data, void *out)
{
	READ3res *r = data;
	struct reply *o = out;
	size_t n;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	n = r->READ3res_u.resok.data.data_len;
	n = n < sizeof(o->data) - 1 ? n : sizeof(o->data) - 1;
	memcpy(o->data, r->READ3res_u.resok.data.data_val, n);
	o->data[n] = '\0';
}

static struct reply read_text(const struct fh *fh)
{
	struct reply o = {.status = -1};
	struct call c = {.keep = keep_read, .out = &o};
	READ3args a = {.file = nfs_raw_fh3(fh), .count = sizeof(o.data) - 1};

	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_read_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	return o;
}

/* Overwrites the start of FH with TEXT (a copy-up of a lower file). */
static void write_text(const struct fh *fh, const char *text)
{
	int status = -1;
	struct call c = {.keep = nfs_raw_keep_status, .out = &status};
	WRITE3args a = {
	    .file = nfs_raw_fh3(fh),
	    .count = (count3)strlen(text),
	    .stable = FILE_SYNC,
	    .data = {.data_len = (u_int)strlen(text), .data_val = (char *)text}};

	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_write_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	assert_int_equal(status, NFS3_OK);
}

/* ---- set-up ---- */

/* Starts the server with its stderr in g.log. */
static int start(void)
{
	const char *args[] = {g.config_arg, NULL};
	int rc = test_server_start_logged(g.bin, g.state, args, &g.srv);

	if (rc < 0)
		return -1;
	g.nfs = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	return g.nfs ? 0 : -1;
}

static int setup(void **state)
{
	(void)state;
	snprintf(g.tmp, sizeof(g.tmp), TMP_PREFIX "XXXXXX");
	if (!mkdtemp(g.tmp))
		return -1;
	snprintf(g.conf, sizeof(g.conf), "%s/conf", g.tmp);
	snprintf(g.config_arg, sizeof(g.config_arg), "--config=%s", g.conf);
	snprintf(g.state, sizeof(g.state), "%s/state", g.tmp);
	snprintf(g.log, sizeof(g.log), "%s/stderr", g.state);
	mkdirs("L1");
	mkdirs("L2");
	mkdirs("upper");
	mkdirs("work");
	mkdirs("hosts/127.0.0.1");
	put("L1/f", "f of L1\n");
	put("L1/g", "g of L1\n");
	put("L1/h", "h of L1\n");
	put("L2/new", "new in L2\n");
	put("L2/g", "g of L2\n");
	put("L2/h", "h of L2\n");
	put("hosts/127.0.0.1/mine", "the client's own layer\n");
	g.mport = it_free_port();
	if (g.mport < 0)
		return -1;
	write_config("L1", false);
	return start();
}

static int teardown(void **state)
{
	(void)state;
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	test_server_stop(&g.srv);
	test_tmp_remove(g.tmp, TMP_PREFIX);
	return 0;
}

/* ---- checks ---- */

/* Handles, a copy-up and a white-out in /pc, handles in /. */
static void before(void)
{
	struct reply r;

	assert_int_equal(nfs_raw_mnt(g.srv.mount_port, "/", &g.root), MNT3_OK);
	assert_int_equal(nfs_raw_mnt(g.srv.mount_port, "/pc", &g.pc_root), MNT3_OK);
	r = lookup(&g.root, "f");
	assert_int_equal(r.status, NFS3_OK);
	g.f = r.fh;
	g.f_id = r.fileid;
	r = lookup(&g.pc_root, "f");
	assert_int_equal(r.status, NFS3_OK);
	g.pc_f = r.fh;
	g.pc_f_id = r.fileid;
	g.pc_root_id = getattr(&g.pc_root).fileid;
	r = lookup(&g.pc_root, "h");
	assert_int_equal(r.status, NFS3_OK);
	g.pc_h = r.fh;
	write_text(&g.pc_h, COPIED "          ");
	assert_int_equal(nfs_raw_create_or_remove(g.nfs, &g.pc_root, "g", false),
			 NFS3_OK);
	assert_int_equal(lookup(&g.pc_root, "mine").status, NFS3_OK);
	assert_int_equal(lookup(&g.pc_root, "new").status, NFS3ERR_NOENT);
}

/* What stands whatever the stack: handles, the client's copy-up, white-out
 * and per-client lower. */
static void kept(const char *when)
{
	struct reply r;

	r = getattr(&g.f);
	if (r.status != NFS3_OK || r.fileid != g.f_id)
		fail_msg("%s: / f: status %d fileid %ju", when, r.status,
			 (uintmax_t)r.fileid);
	r = getattr(&g.pc_f);
	if (r.status != NFS3_OK || r.fileid != g.pc_f_id)
		fail_msg("%s: /pc f: status %d fileid %ju", when, r.status,
			 (uintmax_t)r.fileid);
	r = getattr(&g.pc_root);
	if (r.status != NFS3_OK || r.fileid != g.pc_root_id)
		fail_msg("%s: /pc root: status %d", when, r.status);
	r = read_text(&g.pc_h);
	if (r.status != NFS3_OK || strncmp(r.data, COPIED, strlen(COPIED)) != 0)
		fail_msg("%s: /pc h: status %d, \"%.40s\"", when, r.status, r.data);
	r = lookup(&g.pc_root, "h");
	if (r.status != NFS3_OK || memcmp(&r.fh, &g.pc_h, sizeof(r.fh)) != 0)
		fail_msg("%s: /pc h by name: status %d, another handle", when, r.status);
	if ((r = lookup(&g.pc_root, "g")).status != NFS3ERR_NOENT)
		fail_msg("%s: /pc g: status %d, the white-out is not in force", when,
			 r.status);
	assert_int_equal(lookup(&g.pc_root, "mine").status, NFS3_OK);
}

static void sighup(const char *lowers, bool twice)
{
	write_config(lowers, twice);
	assert_int_equal(kill(g.srv.pid, SIGHUP), 0);
}

/* ---- tests ---- */

static void test_add(void **state)
{
	double root0, pc0, root1, pc1;

	(void)state;
	before();
	kept("before");
	root0 = metric(ROOT_SERIES);
	pc0 = metric(client_series());
	assert_true(root0 > 0 && pc0 > 0);
	sighup("L2:L1", false);
	wait_log("reload: export / lower layers updated in place (1 -> 2 layers)", 1);
	wait_log("reload: export /pc lower layers updated in place (2 -> 3 layers, 1 "
		 "client union)",
		 1);
	/* no call in between: the counters stand where they were */
	root1 = metric(ROOT_SERIES);
	pc1 = metric(client_series());
	if (root1 != root0 || pc1 != pc0)
		fail_msg(
		    "counters across the reload: / %.0f -> %.0f, client %.0f -> %.0f",
		    root0, root1, pc0, pc1);
	for (int i = 0; i < N_CALLS; i++) {
		assert_int_equal(getattr(&g.root).status, NFS3_OK);
		assert_int_equal(getattr(&g.pc_root).status, NFS3_OK);
	}
	if (metric(ROOT_SERIES) != root0 + N_CALLS ||
	    metric(client_series()) != pc0 + N_CALLS)
		fail_msg(
		    "counters after the reload: / %.0f, client %.0f (were %.0f, %.0f)",
		    metric(ROOT_SERIES), metric(client_series()), root0, pc0);
	kept("after adding L2");
	assert_int_equal(lookup(&g.root, "new").status, NFS3_OK);
	assert_int_equal(lookup(&g.pc_root, "new").status, NFS3_OK);
	log_lacks("replaced (");
	log_lacks("reopened");
	log_lacks(" released");
	{
		char *log = slurp(g.log);
		int opens =
		    count_of(log, "export /pc: client 127.0.0.1: union over upper");

		free(log);
		if (opens != 1)
			fail_msg("the client's union opened %d times", opens);
	}
}

static void test_fail(void **state)
{
	(void)state;
	sighup("L2:gone:L1", false);
	wait_log("reload failed", 1);
	/* each export's new stack prepared, the client union's too, then
	 * the table refused */
	sighup("L1", true);
	wait_log("reload failed", 2);
	kept("after a failed reload");
	assert_int_equal(lookup(&g.root, "new").status, NFS3_OK);
	assert_int_equal(lookup(&g.pc_root, "new").status, NFS3_OK);
}

static void test_remove(void **state)
{
	(void)state;
	sighup("L1", false);
	wait_log("reload: export / lower layers updated in place (2 -> 1 layer)", 1);
	wait_log("reload: export /pc lower layers updated in place (3 -> 2 layers, 1 "
		 "client union)",
		 1);
	assert_int_equal(lookup(&g.root, "new").status, NFS3ERR_NOENT);
	assert_int_equal(lookup(&g.pc_root, "new").status, NFS3ERR_NOENT);
	kept("after removing L2");
	log_lacks("replaced (");
	log_lacks(" released");
	/* a clean exit: in the sanitizer tree, no leak of a swapped union */
	rpc_destroy_context(g.nfs);
	g.nfs = NULL;
	assert_int_equal(test_server_stop(&g.srv), 0);
	log_lacks("Sanitizer");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_add),
	    cmocka_unit_test(test_fail),
	    cmocka_unit_test(test_remove),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	g.bin = argv[1];
	return cmocka_run_group_tests(tests, setup, teardown);
}
