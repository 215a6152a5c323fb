/* SPDX-License-Identifier: Apache-2.0 */
/* test_metrics - the metrics endpoint of issue 21 counts what clients did.
 *
 *   test_metrics UNION_NFSD
 *
 * Builds a writable union in a temp dir (a lower layer holding data.bin and
 * up.txt), starts UNION_NFSD with --metrics on a free loopback port and,
 * through libnfs' raw NFSv3 calls, runs a workload of known counts between
 * two scrapes of GET /metrics:
 *
 *   N_GETATTR GETATTRs of the root; N_LOOKUP LOOKUPs, N_NOENT of them of a
 *   name that is not there; N_READ READs of READ_LEN bytes of data.bin;
 *   N_WRITE WRITEs of WRITE_LEN bytes to up.txt, a lower file, whose first
 *   copies it up (UP_SIZE bytes).  Then hand-made calls (rawrpc.h) on the
 *   NFS port: N_NLM_NULL NLM4 NULLs, N_NLM_TEST NLM4_TESTs of data.bin, and
 *   N_GARBAGE GETATTRs whose arguments do not decode.  Then a second client,
 *   from 127.0.0.2 (a TCP socket bound to it): N_GETATTR2 GETATTRs and a READ.
 *
 * The differences between the scrapes must be exactly those: calls per
 * procedure, NFS3ERR_NOENT errors of LOOKUP, GARBAGE_ARGS of GETATTR, the
 * NLM4_TESTs' errors by the status they answered (none for NLM4_GRANTED), the export's
 * calls and bytes read and written, each client's (by address), one copy-up of UP_SIZE
 * bytes, no new error of any other procedure.  Both pages must pass `promtool check
 * metrics`, and a path other than /metrics gets 404.  The scrapes are a plain HTTP/1.0
 * GET on a socket (a test client; the server side is libmicrohttpd's).
 *
 * Then addresses 127.0.4.0 and on, a GETATTR each, up to the cap of client
 * records an export and N_OTHER beyond: those count under client="other".
 *
 * A second server, with a per-client export (upper TMP/c/%a/upper), must show
 * its client union's calls under the labels export and client, and no series
 * of the template's own; its client's calls by address are the template's;
 * the gauges of the client unions count it open, holding at least the
 * 16 KiB of its own and its cache's tables.
 *
 * Exits 77 (skipped) when promtool is not installed.  The server is
 * stopped by pid and the temp dir removed also when a check fails.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "nfs_raw.h"
#include "rawrpc.h"
#include "start_server.h"

#define N_GETATTR  7
#define N_LOOKUP   5
#define N_NOENT	   2
#define N_READ	   4
#define READ_LEN   1000
#define N_WRITE	   3
#define WRITE_LEN  512
#define N_NLM_NULL 3
#define N_NLM_TEST 2
#define N_GARBAGE  1	/* GETATTRs whose arguments do not decode */
#define N_GETATTR2 6	/* the second client's (127.0.0.2), and one READ */
#define CLIENT_CAP 1024 /* client records an export (SRV_C_CLIENTS) */
#define N_OTHER	   3	/* addresses beyond them */
#define NLM_PROG   100021
#define DATA_SIZE  10000
#define UP_SIZE	   5000

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	struct test_union un;
	struct test_server srv, csrv; /* csrv: the per-client export's */
	int mport, cport;	      /* their metrics ports */
	struct rpc_context *nfs;
	struct fh root, data, up;
} g;

/* ---- the scrape ---- */

/* The whole HTTP response to GET PATH (malloc'd, NUL-terminated), or NULL. */
static char *http_get(int port, const char *path)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	char req[256], *buf = NULL;
	size_t len = 0, cap = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ssize_t n;

	if (fd < 0)
		return NULL;
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		goto out;
	for (;;) {
		if (cap - len < 65536) {
			char *p = realloc(buf, cap + 262144);
			if (!p)
				goto out;
			buf = p;
			cap += 262144;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	if (buf)
		buf[len] = '\0';
	close(fd);
	return buf;
out:
	free(buf);
	close(fd);
	return NULL;
}

/* The body of GET /metrics from PORT, checked by promtool; fails the test
 * otherwise. */
static char *scrape(int port)
{
	char *page = http_get(port, "/metrics"), *body, file[PATH_MAX + 32],
	     cmd[PATH_MAX + 64];
	FILE *f;

	assert_non_null(page);
	assert_non_null(strstr(page, " 200 "));
	assert_non_null(strstr(page, "text/plain; version=0.0.4"));
	body = strstr(page, "\r\n\r\n");
	assert_non_null(body);
	body += 4;
	snprintf(file, sizeof(file), "%s/metrics.txt", g.tmp);
	f = fopen(file, "w");
	assert_non_null(f);
	fputs(body, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", file);
	if (system(cmd) != 0)
		fail_msg("promtool check metrics rejects the page (%s)", file);
	memmove(page, body, strlen(body) + 1);
	return page;
}

/* The value of the sample SERIES (name and labels, as written) in PAGE; 0
 * when the page has no such line (a series not yet made). */
static double sample(const char *page, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = page; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return 0;
}

/* Checks that SERIES grew by exactly WANT from BEFORE to AFTER. */
static void expect_delta(const char *before, const char *after, const char *series,
			 double want)
{
	double got = sample(after, series) - sample(before, series);

	if (got != want)
		fail_msg("%s: grew by %.0f, want %.0f", series, got, want);
	printf("ok: %s +%.0f\n", series, got);
}

#define ERRORS	      "union_nfsd_rpc_errors_total{"
#define LOOKUP_ERRORS ERRORS "program=\"NFS3\",procedure=\"LOOKUP\","
#define GARBAGE_ERRORS                                                                   \
	ERRORS "program=\"NFS3\",procedure=\"GETATTR\",status=\"GARBAGE_ARGS\""
#define NLM_TEST_ERRORS ERRORS "program=\"NLM4\",procedure=\"NLM4_TEST\","
#define NFS3(proc)	"union_nfsd_rpc_calls_total{program=\"NFS3\",procedure=\"" proc "\"}"
#define CLIENT(what, addr)                                                               \
	"union_nfsd_client_" what "_total{export=\"/\",client=\"" addr "\"}"

/* ---- the calls ---- */

struct res {
	int status;
	struct fh fh;
	uint32_t count;
};

static void keep_lookup(void *data, void *out)
{
	LOOKUP3res *r = data;
	struct res *o = out;

	o->status = r->status;
	if (r->status == NFS3_OK)
		nfs_raw_copy_fh(&o->fh, &r->LOOKUP3res_u.resok.object);
}

static int lookup(const char *name, struct fh *out)
{
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(&g.root), .name = (char *)name}};
	struct res o = {0};
	struct call c = {.keep = keep_lookup, .out = &o};

	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_lookup_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	if (out)
		*out = o.fh;
	return o.status;
}

static void getattr_ok(void)
{
	GETATTR3args a = {.object = nfs_raw_fh3(&g.root)};
	int st = -1;
	struct call c = {.keep = nfs_raw_keep_status, .out = &st};

	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_getattr_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	assert_int_equal(st, NFS3_OK);
}

static void keep_count(void *data, void *out)
{
	READ3res *r = data; /* READ3res and WRITE3res: status, then ... */
	struct res *o = out;

	o->status = r->status;
	if (r->status == NFS3_OK)
		o->count = r->READ3res_u.resok.count;
}

static void keep_write_count(void *data, void *out)
{
	WRITE3res *r = data;
	struct res *o = out;

	o->status = r->status;
	if (r->status == NFS3_OK)
		o->count = r->WRITE3res_u.resok.count;
}

static void read_ok(uint64_t off)
{
	READ3args a = {.file = nfs_raw_fh3(&g.data), .offset = off, .count = READ_LEN};
	struct res o = {0};
	struct call c = {.keep = keep_count, .out = &o};

	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_read_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	assert_int_equal(o.status, NFS3_OK);
	assert_int_equal(o.count, READ_LEN);
}

static void write_ok(uint64_t off)
{
	static char bytes[WRITE_LEN];
	WRITE3args a = {.file = nfs_raw_fh3(&g.up),
			.offset = off,
			.count = WRITE_LEN,
			.stable = FILE_SYNC};
	struct res o = {0};
	struct call c = {.keep = keep_write_count, .out = &o};

	memset(bytes, 'w', sizeof(bytes));
	a.data.data_len = WRITE_LEN;
	a.data.data_val = bytes;
	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_write_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	assert_int_equal(o.status, NFS3_OK);
	assert_int_equal(o.count, WRITE_LEN);
}

/* ---- hand-made calls (rawrpc.h): NLM, and arguments that do not decode ---- */

static const char *const nlm4_names[] = {
    "NLM4_GRANTED",
    "NLM4_DENIED",
    "NLM4_DENIED_NOLOCKS",
    "NLM4_BLOCKED",
    "NLM4_DENIED_GRACE_PERIOD",
    "NLM4_DEADLCK",
    "NLM4_ROFS",
    "NLM4_STALE_FH",
    "NLM4_FBIG",
    "NLM4_FAILED",
};

/* One call of PROG/VERS/PROC with ARGS on FD; the reply into R. */
static void raw_ok(int fd, uint32_t prog, uint32_t proc, const void *args, size_t len,
		   struct raw_reply *r)
{
	static uint32_t xid = 0x6d740000;
	struct raw_call c = {.xid = ++xid,
			     .rpcvers = 2,
			     .prog = prog,
			     .vers = prog == NLM_PROG ? 4 : 3,
			     .proc = proc,
			     .flavor = 1,
			     .args = args,
			     .arglen = len};

	assert_int_equal(raw_call(fd, RAW_TCP, &c, r), 0);
	assert_int_equal(r->reply_stat, RAW_ACCEPTED);
}

/* NLM4_TEST of data.bin (no lock is held): returns the nlm4_stats. */
static uint32_t nlm4_test(int fd)
{
	unsigned char a[512], *p = a;
	struct raw_reply r = {0};
	uint32_t st, cookie_len;

	p += raw_enc_fh(p, "ck", 2);		    /* cookie */
	p += raw_put32(p, 0);			    /* exclusive: no */
	p += raw_enc_string(p, "metrics-test");	    /* caller_name */
	p += raw_enc_fh(p, g.data.d, g.data.len);   /* fh */
	p += raw_enc_fh(p, "owner", 5);		    /* oh */
	p += raw_put32(p, 7);			    /* svid */
	p += raw_put32(p, 0) + raw_put32(p + 4, 0); /* l_offset */
	p += 4;
	p += raw_put32(p, 0) + raw_put32(p + 4, 100); /* l_len */
	p += 4;
	raw_ok(fd, NLM_PROG, 1, a, (size_t)(p - a), &r);
	assert_int_equal(r.accept_stat, RAW_SUCCESS);
	assert_true(r.bodylen >= 8);
	cookie_len = (raw_get32(r.body) + 3) & ~3u;
	assert_true(r.bodylen >= 8 + cookie_len);
	st = raw_get32(r.body + 4 + cookie_len);
	raw_reply_free(&r);
	assert_true(st < sizeof(nlm4_names) / sizeof(nlm4_names[0]));
	return st;
}

/* The hand-made calls; the NLM4_TEST status into *NLM_ST. */
static void raw_calls(uint32_t *nlm_st)
{
	int fd = raw_connect(RAW_TCP, g.srv.nfs_port);
	struct raw_reply r = {0};
	unsigned char junk[2] = {1, 2};

	assert_true(fd >= 0);
	for (int i = 0; i < N_NLM_NULL; i++) {
		raw_ok(fd, NLM_PROG, 0, NULL, 0, &r);
		assert_int_equal(r.accept_stat, RAW_SUCCESS);
		raw_reply_free(&r);
	}
	for (int i = 0; i < N_NLM_TEST; i++)
		*nlm_st = nlm4_test(fd);
	for (int i = 0; i < N_GARBAGE; i++) {
		raw_ok(fd, NFS_PROG, 1, junk, sizeof(junk), &r);
		assert_int_equal(r.accept_stat, RAW_GARBAGE_ARGS);
		raw_reply_free(&r);
	}
	close(fd);
}

/* The second client's calls, from 127.0.0.2: N_GETATTR2 GETATTRs of the
 * root and one READ of READ_LEN bytes of data.bin. */
static void second_client(void)
{
	int fd = raw_connect_from("127.0.0.2", g.srv.nfs_port);
	unsigned char args[96];
	struct raw_reply r = {0};
	size_t n;

	assert_true(fd >= 0);
	for (int i = 0; i < N_GETATTR2; i++)
		assert_int_equal(raw_getattr(fd, RAW_TCP, g.root.d, g.root.len, NULL), 0);
	n = raw_enc_fh(args, g.data.d, g.data.len);
	n += raw_put32(args + n, 0); /* offset, a hyper */
	n += raw_put32(args + n, 0);
	n += raw_put32(args + n, READ_LEN);
	raw_ok(fd, NFS_PROG, 6, args, n, &r);
	assert_int_equal(r.accept_stat, RAW_SUCCESS);
	assert_int_equal(raw_body_status(&r), 0);
	raw_reply_free(&r);
	close(fd);
}

/* ---- set-up ---- */

static int write_file(const char *name, size_t size, char fill)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/lower/%s", g.tmp, name);
	f = fopen(path, "w");
	if (!f)
		return -1;
	for (size_t i = 0; i < size; i++)
		fputc(fill, f);
	return fclose(f);
}

static int setup(void **state)
{
	char opt[64];
	const char *args[6];

	(void)state;
	if (it_tmp_layers(g.tmp, sizeof(g.tmp), "/tmp/un-metrics-XXXXXX") < 0 ||
	    write_file("data.bin", DATA_SIZE, 'd') < 0 ||
	    write_file("up.txt", UP_SIZE, 'u') < 0)
		return -1;
	test_union_init(&g.un, g.tmp, "lower");
	g.mport = it_free_port();
	if (g.mport < 0)
		return -1;
	snprintf(opt, sizeof(opt), "--metrics=127.0.0.1:%d", g.mport);
	args[0] = g.un.args[0];
	args[1] = g.un.args[1];
	args[2] = g.un.args[2];
	args[3] = opt;
	args[4] = NULL;
	if (test_server_start(g.bin, g.un.state, args, &g.srv) < 0)
		return -1;
	if (nfs_raw_mnt(g.srv.mount_port, "/", &g.root) != MNT3_OK)
		return -1;
	g.nfs = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	return g.nfs ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	test_server_stop(&g.srv);
	test_server_stop(&g.csrv);
	test_tmp_remove(g.tmp, "/tmp/un-metrics-");
	return 0;
}

/* ---- the tests ---- */

static void test_counts(void **state)
{
	char *before, *after, series[256];
	uint32_t nlm_st = 0;

	(void)state;
	assert_int_equal(lookup("data.bin", &g.data), NFS3_OK);
	assert_int_equal(lookup("up.txt", &g.up), NFS3_OK);
	before = scrape(g.mport);
	for (int i = 0; i < N_GETATTR; i++)
		getattr_ok();
	for (int i = 0; i < N_LOOKUP - N_NOENT; i++)
		assert_int_equal(lookup("data.bin", NULL), NFS3_OK);
	for (int i = 0; i < N_NOENT; i++)
		assert_int_equal(lookup("not-there", NULL), NFS3ERR_NOENT);
	for (int i = 0; i < N_READ; i++)
		read_ok((uint64_t)i * READ_LEN);
	for (int i = 0; i < N_WRITE; i++)
		write_ok((uint64_t)i * WRITE_LEN);
	raw_calls(&nlm_st);
	second_client();
	after = scrape(g.mport);

	expect_delta(before, after, NFS3("GETATTR"), N_GETATTR + N_GARBAGE + N_GETATTR2);
	expect_delta(before, after,
		     ERRORS
		     "program=\"NFS3\",procedure=\"GETATTR\",status=\"GARBAGE_ARGS\"}",
		     N_GARBAGE);
	expect_delta(
	    before, after,
	    "union_nfsd_rpc_calls_total{program=\"NLM4\",procedure=\"NLM_NULL\"}",
	    N_NLM_NULL);
	expect_delta(
	    before, after,
	    "union_nfsd_rpc_calls_total{program=\"NLM4\",procedure=\"NLM4_TEST\"}",
	    N_NLM_TEST);
	snprintf(series, sizeof(series),
		 ERRORS "program=\"NLM4\",procedure=\"NLM4_TEST\",status=\"%s\"}",
		 nlm4_names[nlm_st]);
	expect_delta(before, after, series, nlm_st ? N_NLM_TEST : 0);
	expect_delta(before, after, NFS3("LOOKUP"), N_LOOKUP);
	expect_delta(before, after, NFS3("READ"), N_READ + 1);
	expect_delta(before, after, NFS3("WRITE"), N_WRITE);
	expect_delta(before, after, NFS3("CREATE"), 0);
	expect_delta(before, after,
		     "union_nfsd_rpc_errors_total{program=\"NFS3\",procedure=\"LOOKUP\","
		     "status=\"NFS3ERR_NOENT\"}",
		     N_NOENT);
	expect_delta(before, after,
		     "union_nfsd_rpc_duration_seconds_count{program=\"NFS3\","
		     "procedure=\"GETATTR\"}",
		     N_GETATTR + N_GARBAGE + N_GETATTR2);
	expect_delta(before, after,
		     "union_nfsd_rpc_duration_seconds_bucket{program=\"NFS3\","
		     "procedure=\"READ\",le=\"+Inf\"}",
		     N_READ + 1);
	expect_delta(before, after, "union_nfsd_export_calls_total{export=\"/\"}",
		     N_GETATTR + N_LOOKUP + N_READ + N_WRITE + N_GETATTR2 + 1);
	expect_delta(before, after, "union_nfsd_export_read_bytes_total{export=\"/\"}",
		     (N_READ + 1) * READ_LEN);
	expect_delta(before, after, CLIENT("calls", "127.0.0.1"),
		     N_GETATTR + N_LOOKUP + N_READ + N_WRITE);
	expect_delta(before, after, CLIENT("read_bytes", "127.0.0.1"), N_READ * READ_LEN);
	expect_delta(before, after, CLIENT("written_bytes", "127.0.0.1"),
		     N_WRITE * WRITE_LEN);
	expect_delta(before, after, CLIENT("calls", "127.0.0.2"), N_GETATTR2 + 1);
	expect_delta(before, after, CLIENT("read_bytes", "127.0.0.2"), READ_LEN);
	expect_delta(before, after, CLIENT("written_bytes", "127.0.0.2"), 0);
	if (!strstr(after, CLIENT("written_bytes", "127.0.0.2") " 0\n"))
		fail_msg("no series of the second client's bytes written");
	if (strstr(after, "client=\"other\""))
		fail_msg("a client counted as other, under the cap");
	expect_delta(before, after, "union_nfsd_export_written_bytes_total{export=\"/\"}",
		     N_WRITE * WRITE_LEN);
	expect_delta(before, after, "union_nfsd_copyups_total", 1);
	expect_delta(before, after, "union_nfsd_copyup_bytes_total", UP_SIZE);
	expect_delta(before, after, "union_nfsd_copyup_seconds_count", 1);
	/* no error but those, in the page after the workload */
	for (const char *p = strstr(after, "\n" ERRORS); p;
	     p = strstr(p + 1, "\n" ERRORS))
		if (strncmp(p + 1, LOOKUP_ERRORS, strlen(LOOKUP_ERRORS)) != 0 &&
		    strncmp(p + 1, GARBAGE_ERRORS, strlen(GARBAGE_ERRORS)) != 0 &&
		    strncmp(p + 1, NLM_TEST_ERRORS, strlen(NLM_TEST_ERRORS)) != 0)
			fail_msg("an unexpected error: %.120s", p + 1);
	assert_true(sample(after, "union_nfsd_connections_open") >= 1);
	assert_true(sample(after, "union_nfsd_worker_threads") >= 1);
	assert_true(sample(after, "union_nfsd_nodes") >= 3); /* root, data.bin, up.txt */
	free(before);
	free(after);
}

/* The client series of export / in PAGE that name an address. */
static int client_series(const char *page)
{
	static const char prefix[] =
	    "\nunion_nfsd_client_calls_total{export=\"/\",client=\"";
	int n = 0;

	for (const char *p = strstr(page, prefix); p; p = strstr(p + 1, prefix))
		n += strncmp(p + strlen(prefix), "other\"", 6) != 0;
	return n;
}

/* One GETATTR of the root from address 127.0.X.Y (I's). */
static void getattr_from(int i)
{
	char addr[32];
	int fd;

	snprintf(addr, sizeof(addr), "127.0.%d.%d", 4 + i / 256, i % 256);
	fd = raw_connect_from(addr, g.srv.nfs_port);
	assert_true(fd >= 0);
	assert_int_equal(raw_getattr(fd, RAW_TCP, g.root.d, g.root.len, NULL), 0);
	close(fd);
}

/* Addresses beyond the cap of records an export (SRV_C_CLIENTS) count
 * under client="other"; those with records go on counting their own. */
static void test_client_cap(void **state)
{
	char *before = scrape(g.mport), *after;
	int have = client_series(before), fill = CLIENT_CAP - have;

	(void)state;
	assert_true(fill >= 0);
	for (int i = 0; i < fill + N_OTHER; i++)
		getattr_from(i);
	getattr_from(0); /* has a record: its own again */
	after = scrape(g.mport);
	if (client_series(after) != CLIENT_CAP)
		fail_msg("%d client series, want %d", client_series(after), CLIENT_CAP);
	expect_delta(before, after, CLIENT("calls", "other"), N_OTHER);
	expect_delta(before, after, CLIENT("calls", "127.0.4.0"), 2);
	expect_delta(before, after, "union_nfsd_export_calls_total{export=\"/\"}",
		     fill + N_OTHER + 1);
	free(before);
	free(after);
}

static void test_not_found(void **state)
{
	char *page = http_get(g.mport, "/other");

	(void)state;
	assert_non_null(page);
	if (!strstr(page, " 404 "))
		fail_msg("GET /other: %.60s", page);
	free(page);
}

/* A per-client export (upper TMP/c/%a/upper): its client union's series
 * carry the client label, the template has none of its own. */
static void test_client_label(void **state)
{
	char up[PATH_MAX + 32], work[PATH_MAX + 32], lower[PATH_MAX + 32],
	    st[PATH_MAX + 32], opt[64], series[2 * PATH_MAX];
	const char *args[] = {lower, up, work, opt, NULL};
	struct rpc_context *nfs;
	struct fh root;
	char *page;

	(void)state;
	snprintf(lower, sizeof(lower), "--lowerdir=%s/lower", g.tmp);
	snprintf(up, sizeof(up), "--upperdir=%s/c/%%a/upper", g.tmp);
	snprintf(work, sizeof(work), "--workdir=%s/c/%%a/work", g.tmp);
	snprintf(st, sizeof(st), "%s/cstate", g.tmp);
	g.cport = it_free_port();
	assert_true(g.cport > 0);
	snprintf(opt, sizeof(opt), "--metrics=127.0.0.1:%d", g.cport);
	assert_int_equal(test_server_start(g.bin, st, args, &g.csrv), 0);
	assert_int_equal(nfs_raw_mnt(g.csrv.mount_port, "/", &root), MNT3_OK);
	nfs = nfs_raw_connect(g.csrv.nfs_port, NFS_PROG, 3);
	assert_non_null(nfs);
	for (int i = 0; i < N_GETATTR; i++) {
		GETATTR3args a = {.object = nfs_raw_fh3(&root)};
		int status = -1;
		struct call c = {.keep = nfs_raw_keep_status, .out = &status};

		assert_int_equal(
		    nfs_raw_finish(nfs, &c,
				   rpc_nfs3_getattr_async(nfs, nfs_raw_on_reply, &a, &c)),
		    0);
		assert_int_equal(status, NFS3_OK);
	}
	rpc_destroy_context(nfs);
	page = scrape(g.cport);
	snprintf(
	    series, sizeof(series),
	    "union_nfsd_export_calls_total{export=\"/\",client=\"%s/c/127.0.0.1/upper\"}",
	    g.tmp);
	if (sample(page, series) != N_GETATTR)
		fail_msg("%s: %.0f, want %d", series, sample(page, series), N_GETATTR);
	if (strstr(page, "union_nfsd_export_calls_total{export=\"/\"}"))
		fail_msg("the per-client template has series of its own");
	/* its clients' series are the template's, by address */
	if (sample(page, CLIENT("calls", "127.0.0.1")) != N_GETATTR)
		fail_msg("%s: %.0f, want %d", CLIENT("calls", "127.0.0.1"),
			 sample(page, CLIENT("calls", "127.0.0.1")), N_GETATTR);
	/* the union open, what it holds by its own count, and the limits */
	assert_true(sample(page, "union_nfsd_client_unions_open") == 1);
	assert_true(sample(page, "union_nfsd_client_unions_memory_bytes") >= 16384);
	assert_true(sample(page, "union_nfsd_client_unions_max") >= 16);
	assert_true(sample(page, "union_nfsd_client_unions_memory_max_bytes") >=
		    sample(page, "union_nfsd_client_unions_memory_bytes"));
	free(page);
	test_server_stop(&g.csrv);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_counts),
	    cmocka_unit_test(test_client_cap),
	    cmocka_unit_test(test_not_found),
	    cmocka_unit_test(test_client_label),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	if (system("command -v promtool >/dev/null 2>&1") != 0) {
		printf("promtool not installed (Debian's prometheus): skipped\n");
		return 77;
	}
	g.bin = argv[1];
	return cmocka_run_group_tests(tests, setup, teardown);
}
