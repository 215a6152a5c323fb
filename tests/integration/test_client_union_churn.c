/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_union_churn.c - the memory of client unions is bounded per
 * client and given back (issue 29, part 3).
 *
 * One per-client export (upper TMP/c/%a/upper, work TMP/c/%a/work) over a
 * lower layer with a file "f" and a dir "d", the server's limit on open
 * files at 20,000 (as the measurement), 8 threads.  Loopback lets a
 * socket bound to any 127/8 address before connect() be another client.
 *
 *  - churn: 20,000 addresses each connect, MNT, GETATTR the root, LOOKUP
 *    and GETATTR "f", LOOKUP "d", UMNT and close, CHURN_THREADS of them at
 *    a time.  Every 1,000 addresses the server's memory is sampled
 *    (/proc/PID/status) and its control socket asked how many unions are
 *    open, what they hold by their own count and what the cap is.  Every
 *    call must succeed, the cap must be reached, and the server's RSS
 *    (VmRSS) and its anonymous memory (RssAnon: its heap, stacks and the
 *    unions' caches) must each grow by less than 5% over the last 10,000
 *    addresses: by the least-squares line through their 11 samples, each
 *    taken 1.5 s after its thousand's last call, once the reaper has given
 *    the heap's free pages back (a sample taken in the churn moves by a
 *    few percent with when the reaper last trimmed).
 *    VmRSS also holds the node table's file pages (RssFile): the table
 *    grows (every client's handles are recorded for good, about 0.4 KiB
 *    an address here), the server lets its pages go from its mapping once
 *    a second while it grows (state.c rule 4), and what stays is the pages
 *    read since, which must not be spread over the whole table (roots.c:
 *    a new client's root is found without a lookup of a random key): over
 *    the last 10,000 addresses RssFile must grow by less than half what
 *    the table's file (data.mdb) did.  In an
 *    ASan build the allocator's quarantine and shadow make RSS say nothing of the
 *    server's: the churn runs and is checked, the memory is only printed;
 *  - reclaim: --client-union-idle=1; RECLAIM addresses mount and stay
 *    mounted (their unions stay open), then unmount, and their unions are
 *    released: what serving costs the server before the unions do (its
 *    threads' stacks and buffers, the allocator's arenas warmed up, one a
 *    thread).  Then RECLAIM other addresses the same way; once every
 *    union is released for idleness (the control socket says none is
 *    open), the anonymous memory they took must be given back, but for
 *    RECLAIM_KEEP of it;
 *  - cap from memory: --client-unions-memory=8M makes the cap 32 (8 MiB
 *    over 256 KiB, below what the descriptors allow) and each union's
 *    share 256 KiB; 64 addresses mount and stay mounted, and at most 32
 *    unions are open.
 *
 * Runs as root (the server's limit on open files, source addresses).
 * Prints the samples, the time and the memory per open union.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "rawrpc.h"
#include "start_server.h"

#define SERVER_NOFILE 20000
#define CHURN	      20000
#define SAMPLE_EVERY  1000
#define NSAMPLES      (CHURN / SAMPLE_EVERY)
#define TAIL	      10000 /* the addresses whose growth is bounded */
/* A sample waits this long after its thousand's last call: the reaper hands
 * the heap's free pages back at most once a second after releases, and a
 * sample taken just before or just after that differs by a few percent. */
#define SAMPLE_QUIET_MS 1500
#define GROWTH_MAX	0.05
#define FILE_SLACK_KB	256 /* RssFile beyond the table's growth: libraries' pages */
#define CHURN_THREADS	4
#define RECLAIM		400  /* addresses a round: fewer than the cap, 416 */
#define RECLAIM_KEEP	0.25 /* of what the open unions took */
#define RELEASE_WAIT	60   /* seconds, for the reaper on a busy machine */
#define MEM_CAP_BYTES	"8M"
#define MEM_CAP		32 /* 8 MiB over 256 KiB */
#define MEM_CAP_SHARE	(256 << 10)
#define MEM_CAP_CLIENTS 64

#ifdef __SANITIZE_ADDRESS__
#define RSS_MEANINGFUL false
#else
#define RSS_MEANINGFUL true
#endif

static const char *server_bin;
static struct test_server server = {.pid = -1};
static char tmp[64];
static bool private_ns; /* the test's own mount namespace (clients_tmpfs) */

/* ---- the server ---- */

static void start(const char *extra)
{
	char lower[128], path[160], low_arg[160], up_arg[160], work_arg[160];
	const char *args[] = {
	    low_arg,	   up_arg,
	    work_arg,	   "--clients=127.0.0.0/8(rw,no_root_squash,insecure)",
	    "--threads=8", "--log-level=warn",
	    extra,	   NULL};
	FILE *f;

	snprintf(lower, sizeof(lower), "%s/lower", tmp);
	snprintf(low_arg, sizeof(low_arg), "--lowerdir=%s", lower);
	snprintf(up_arg, sizeof(up_arg), "--upperdir=%s/c/%%a/upper", tmp);
	snprintf(work_arg, sizeof(work_arg), "--workdir=%s/c/%%a/work", tmp);
	assert_int_equal(mkdir(lower, 0755), 0);
	snprintf(path, sizeof(path), "%s/d", lower);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/f", lower);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("lower\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/state", tmp);
	assert_int_equal(test_server_start_nofile(server_bin, path, args, false,
						  SERVER_NOFILE, &server),
			 0);
}

/* TMP/c, where the clients' dirs go, into OUT. */
static void clients_dir(char *out, size_t len)
{
	snprintf(out, len, "%s/c", tmp);
}

/* The clients' dirs on a tmpfs, in a mount namespace of the test's own
 * (the server, forked later, shares it; it goes with the process): 20,000
 * clients make and leave 80,000 dirs, which an ext4 /tmp takes most of a
 * minute to remove.  Without the namespace they go to /tmp, slower. */
static void clients_tmpfs(void)
{
	char c[96];

	clients_dir(c, sizeof(c));
	if (!private_ns)
		private_ns = unshare(CLONE_NEWNS) == 0 &&
			     mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
	if (mkdir(c, 0755) < 0 ||
	    (private_ns && mount("tmpfs", c, "tmpfs", 0, "mode=0755") < 0))
		printf("clients' dirs on %s itself: %s\n", tmp,
		       private_ns ? strerror(errno) : "no mount namespace of our own");
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/test_client_union_churn.XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	clients_tmpfs();
	return 0;
}

static int teardown(void **state)
{
	char c[96];

	(void)state;
	test_server_stop(&server);
	clients_dir(c, sizeof(c));
	if (private_ns)
		umount2(c, MNT_DETACH);
	test_tmp_remove(tmp, "/tmp/test_client_union_churn.");
	return 0;
}

/* KEY's value in kB in the server's /proc/PID/status (VmRSS, RssAnon,
 * RssFile), or -1. */
static long status_kb(const char *key)
{
	char path[64], line[256];
	size_t n = strlen(key);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)server.pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, key, n) == 0 && line[n] == ':')
			v = atol(line + n + 1);
	if (f)
		fclose(f);
	return v;
}

/* The server's reply to the control socket's COMMAND (json_decref it), or
 * NULL. */
static json_t *ctl(const char *command)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	char buf[1 << 16];
	size_t n = 0;
	ssize_t got;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	json_t *r = NULL;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s/state/ctl.sock", tmp);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    write(fd, command, strlen(command)) != (ssize_t)strlen(command) ||
	    write(fd, "\n", 1) != 1)
		goto out;
	while (n < sizeof(buf) - 1 && (got = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)got;
	buf[n] = '\0';
	r = json_loads(buf, 0, NULL);
out:
	if (fd >= 0)
		close(fd);
	return r;
}

/* What `status` says of the client unions. */
struct unions_now {
	long long open, bytes, max_open, union_bytes;
};

static bool unions_now(struct unions_now *u)
{
	json_t *r = ctl("status"), *ex, *lim;

	ex = json_array_get(json_object_get(r, "exports"), 0);
	lim = json_object_get(r, "client_union_limits");
	u->open = json_integer_value(json_object_get(ex, "client_unions"));
	u->bytes = json_integer_value(json_object_get(ex, "client_unions_memory_bytes"));
	u->max_open = json_integer_value(json_object_get(lim, "max_open"));
	u->union_bytes = json_integer_value(json_object_get(lim, "union_bytes"));
	json_decref(r);
	return ex && lim;
}

/* ---- clients ---- */

/* Address I of the churn: 127.3.0.1 and on, 250 a /24. */
static void addr_of(unsigned i, char *out, size_t len)
{
	snprintf(out, len, "127.3.%u.%u", i / 250, 1 + i % 250);
}

/* What a client does on its visit. */
enum visit {
	VISIT_CALLS = 1, /* MNT, GETATTR the root, LOOKUP and GETATTR "f", LOOKUP "d" */
	VISIT_UMNT = 2,	 /* UMNT */
	VISIT_ALL = VISIT_CALLS | VISIT_UMNT,
};

static bool visit_calls(int fd)
{
	unsigned char root[64], fh[64];
	uint32_t rootlen = 0, fhlen = 0;
	uint64_t fileid;

	return raw_mnt(fd, RAW_TCP, "/", root, &rootlen) == 0 &&
	       raw_getattr(fd, RAW_TCP, root, rootlen, &fileid) == 0 &&
	       raw_lookup(fd, RAW_TCP, root, rootlen, "f", fh, &fhlen) == 0 &&
	       raw_getattr(fd, RAW_TCP, fh, fhlen, &fileid) == 0 &&
	       raw_lookup(fd, RAW_TCP, root, rootlen, "d", fh, &fhlen) == 0;
}

/* One client's visit from ADDR on a connection of its own; false if a
 * call failed. */
static bool visit(const char *addr, enum visit what)
{
	int fd = raw_connect_from(addr, server.nfs_port);
	bool ok = fd >= 0 && (!(what & VISIT_CALLS) || visit_calls(fd)) &&
		  (!(what & VISIT_UMNT) || raw_umnt(fd, RAW_TCP, "/") == 0);

	if (fd >= 0)
		close(fd);
	return ok;
}

/* A thread's part of addresses FIRST .. FIRST + N - 1: every STEP-th from
 * FIRST + OFF. */
struct part {
	pthread_t t;
	unsigned first, n, off, step, failed;
	enum visit what;
};

static void *part_run(void *arg)
{
	struct part *p = arg;
	char addr[32];

	for (unsigned i = p->off; i < p->n; i += p->step) {
		addr_of(p->first + i, addr, sizeof(addr));
		p->failed += !visit(addr, p->what);
	}
	return NULL;
}

/* Addresses FIRST .. FIRST + N - 1 visit, CHURN_THREADS at a time; the
 * number of visits that failed. */
static unsigned visit_range(unsigned first, unsigned n, enum visit what)
{
	struct part p[CHURN_THREADS];
	unsigned failed = 0;

	for (unsigned k = 0; k < CHURN_THREADS; k++) {
		p[k] = (struct part){.first = first,
				     .n = n,
				     .off = k,
				     .step = CHURN_THREADS,
				     .what = what};
		assert_int_equal(pthread_create(&p[k].t, NULL, part_run, &p[k]), 0);
	}
	for (unsigned k = 0; k < CHURN_THREADS; k++) {
		pthread_join(p[k].t, NULL);
		failed += p[k].failed;
	}
	return failed;
}

/* ---- the tests ---- */

struct sample {
	unsigned addrs;
	long rss, anon, file, table; /* table: data.mdb's size, kB */
	unsigned fds;
	struct unions_now u;
	double t;
};

/* The size of the node table's file in kB, or -1. */
static long table_kb(void)
{
	char path[96];
	struct stat st;

	snprintf(path, sizeof(path), "%s/state/data.mdb", tmp);
	return stat(path, &st) == 0 ? (long)(st.st_size >> 10) : -1;
}

static struct sample take(unsigned addrs, double t0)
{
	struct sample s = {.addrs = addrs,
			   .rss = status_kb("VmRSS"),
			   .anon = status_kb("RssAnon"),
			   .file = status_kb("RssFile"),
			   .table = table_kb(),
			   .fds = test_server_fds(&server),
			   .t = it_now_s() - t0};

	assert_true(unions_now(&s.u));
	return s;
}

static void print_sample(const struct sample *s)
{
	printf("%6u %8.1f %8ld %8ld %8ld %8ld %6u %5lld %8.1f %9.1f\n", s->addrs, s->t,
	       s->rss, s->anon, s->file, s->table, s->fds, s->u.open,
	       s->u.open ? (double)s->u.bytes / (double)s->u.open / 1024 : 0.0,
	       (double)s->u.bytes / 1024);
}

/* The growth of FIELD (a member of struct sample, by its offset) over the
 * samples S[FIRST..LAST], relative to its start: by the least-squares line
 * through them. */
static double trend(const struct sample *s, unsigned first, unsigned last, size_t field)
{
	double n = last - first + 1, sx = 0, sy = 0, sxx = 0, sxy = 0, slope, at0;

	for (unsigned k = first; k <= last; k++) {
		double y = (double)*(const long *)((const char *)&s[k] + field);

		sx += k;
		sy += y;
		sxx += (double)k * k;
		sxy += k * y;
	}
	slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
	at0 = (sy - slope * sx) / n + slope * first;
	return slope * (last - first) / at0;
}

static void churn(void **state)
{
	const unsigned mid = (CHURN - TAIL) / SAMPLE_EVERY;
	struct sample s[NSAMPLES + 1];
	const struct sample *end = &s[NSAMPLES];
	unsigned failed = 0, at_cap = 0;
	double t0 = it_now_s(), growth, rss_growth;
	long file_grew, table_grew;

	(void)state;
	start(NULL);
	s[0] = take(0, t0);
	printf("churn: %u addresses, %u at a time; memory in kB (RssAnon: heap, "
	       "stacks, caches; RssFile: mostly the node table's pages; TABLEKB: its "
	       "file)\n"
	       "ADDRS     TIME    VmRSS  RssAnon  RssFile  TABLEKB    FDS  OPEN KB/UNION "
	       "UNIONS_KB\n",
	       CHURN, CHURN_THREADS);
	print_sample(&s[0]);
	for (unsigned k = 1; k <= NSAMPLES; k++) {
		failed += visit_range((k - 1) * SAMPLE_EVERY, SAMPLE_EVERY, VISIT_ALL);
		it_sleep_ms(SAMPLE_QUIET_MS);
		s[k] = take(k * SAMPLE_EVERY, t0);
		at_cap += s[k].u.open >= s[k].u.max_open;
		print_sample(&s[k]);
	}
	growth = trend(s, mid, NSAMPLES, offsetof(struct sample, anon));
	rss_growth = trend(s, mid, NSAMPLES, offsetof(struct sample, rss));
	file_grew = end->file - s[mid].file;
	table_grew = end->table - s[mid].table;
	printf("churn: %u failed in %.1f s; cap %lld unions of %lld KiB each, reached "
	       "at %u of %u samples; over the last %u addresses RssAnon %+.1f%% "
	       "(%+.1f%% from sample to sample), VmRSS %+.1f%% (RssFile %+ld kB, the "
	       "node table's file %+ld kB); open unions hold %.1f KiB each by their "
	       "count, (RssAnon - start) / open: %.1f KiB\n",
	       failed, end->t, end->u.max_open, end->u.union_bytes >> 10, at_cap,
	       NSAMPLES, TAIL, 100 * growth,
	       100.0 * (double)(end->anon - s[mid].anon) / (double)s[mid].anon,
	       100 * rss_growth, file_grew, table_grew,
	       end->u.open ? (double)end->u.bytes / (double)end->u.open / 1024 : 0.0,
	       end->u.open ? (double)(end->anon - s[0].anon) / (double)end->u.open : 0.0);
	assert_int_equal(failed, 0);
	assert_true(at_cap > 0);
	assert_true(test_server_alive(&server));
	assert_true(file_grew <= table_grew / 2 + FILE_SLACK_KB);
	if (!RSS_MEANINGFUL) {
		printf("churn: ASan build: its allocator makes RSS say nothing of the "
		       "server's; the growth is not checked\n");
		return;
	}
	assert_true(growth < GROWTH_MAX);
	assert_true(rss_growth < GROWTH_MAX);
}

/* Waits up to RELEASE_WAIT seconds for no client union to be open and the
 * reaper to have handed back the memory (its trim follows a release within
 * a second or so); true when none is open. */
static bool wait_all_released(void)
{
	double end = it_now_s() + RELEASE_WAIT;
	struct unions_now u = {.open = -1};

	while (it_now_s() < end && (!unions_now(&u) || u.open != 0))
		it_sleep_ms(250);
	it_sleep_ms(3000);
	return u.open == 0;
}

/* RECLAIM addresses from FIRST mount and stay, then unmount; *PEAK gets
 * the server's RssAnon and U what `status` says while all are mounted.
 * The number of visits that failed. */
static unsigned reclaim_round(unsigned first, long *peak, struct unions_now *u)
{
	unsigned failed = visit_range(first, RECLAIM, VISIT_CALLS);

	assert_true(unions_now(u));
	*peak = status_kb("RssAnon");
	return failed + visit_range(first, RECLAIM, VISIT_UMNT);
}

static void reclaim(void **state)
{
	long start_anon, peak_anon, after_anon;
	struct unions_now u;
	unsigned failed;

	(void)state;
	start("--client-union-idle=1");
	/* what serving costs the server before the unions do */
	failed = reclaim_round(RECLAIM, &peak_anon, &u);
	assert_true(wait_all_released());
	start_anon = status_kb("RssAnon");
	failed += reclaim_round(0, &peak_anon, &u);
	assert_true(wait_all_released());
	after_anon = status_kb("RssAnon");
	printf("reclaim: %u addresses (%u failed), %lld unions open, RssAnon %ld kB "
	       "at the start, %ld kB with them, %ld kB once all were released "
	       "(kept %.0f%% of what they took; %u descriptors)\n",
	       RECLAIM, failed, u.open, start_anon, peak_anon, after_anon,
	       100.0 * (double)(after_anon - start_anon) /
		   (double)(peak_anon - start_anon),
	       test_server_fds(&server));
	assert_int_equal(failed, 0);
	assert_int_equal(u.open, RECLAIM);
	if (!RSS_MEANINGFUL) {
		printf("reclaim: ASan build: RSS not checked\n");
		return;
	}
	assert_true(after_anon - start_anon <
		    (long)(RECLAIM_KEEP * (double)(peak_anon - start_anon)));
}

static void cap_from_memory(void **state)
{
	struct unions_now u;
	unsigned failed;

	(void)state;
	start("--client-unions-memory=" MEM_CAP_BYTES);
	assert_true(unions_now(&u));
	assert_int_equal(u.max_open, MEM_CAP);
	assert_int_equal(u.union_bytes, MEM_CAP_SHARE);
	failed = visit_range(0, MEM_CAP_CLIENTS, VISIT_CALLS);
	/* over the cap only while every open one is in use, and the reaper
	 * trims back once they are free: none is now */
	for (int i = 0; i < 100 && unions_now(&u) && u.open > MEM_CAP; i++)
		it_sleep_ms(100);
	printf("cap from memory: %d clients mounted, %lld unions open (cap %lld, "
	       "%lld KiB each), holding %lld KiB\n",
	       MEM_CAP_CLIENTS, u.open, u.max_open, u.union_bytes >> 10, u.bytes >> 10);
	assert_int_equal(failed, 0);
	assert_true(u.open <= MEM_CAP);
	assert_true(u.bytes <= (long long)MEM_CAP * MEM_CAP_SHARE);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(cap_from_memory, setup, teardown),
	    cmocka_unit_test_setup_teardown(reclaim, setup, teardown),
	    cmocka_unit_test_setup_teardown(churn, setup, teardown),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s UNION_NFSD\n", argv[0]);
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "test_client_union_churn: needs root\n");
		return 77;
	}
	server_bin = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
