/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_unions.c - client unions (server/exports/unions.c) driven without
 * a socket: a call is a request that pins its union as a handler does, so
 * that a test holds a pin across a reload at the moment it chooses.
 *
 * The export is read only over TMP/hosts/%a (each client's own layer) and
 * TMP/lower; the file "name" reads "mine" in 127.0.0.1's layer and
 * "shared" in the shared one.
 *
 *  - a reload (srv_reload, as SIGHUP runs it) after 127.0.0.1's layer went
 *    away, while a call pins its union: that call goes on over the stack it
 *    began with, a call that comes after the reload waits until the pin is
 *    dropped and then reads the shared file (rule 8);
 *  - a call that pins one union already and asks for another that a reload
 *    outdated while a second call pinned it gets it without waiting: two such
 *    calls would otherwise wait for each other for good.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "exports.h"
#include "test_fs.h"

#define WAIT_MS 200 /* long enough for a call that does not wait to end */

static char tmp[64], hosts[128], lower[128], state_dir[128];
static char *lowers[2] = {hosts, lower};
static struct srv_export_opts export_opts = {
    .path = "/", .lowerdirs = lowers, .nlower = 2};
static struct srv_opts opts = {
    .state_dir = state_dir, .exports = &export_opts, .nexports = 1};
static struct srv srv;

/* ---- fixture ---- */

static int file_at(const char *rel, const char *text)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", tmp, rel);
	f = fopen(p, "w");
	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static int dir_at(const char *rel)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", tmp, rel);
	return mkdir(p, 0755);
}

static int setup(void **state)
{
	char err[512];

	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/test_srv_unions.XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(hosts, sizeof(hosts), "%s/hosts/%%a", tmp);
	snprintf(lower, sizeof(lower), "%s/lower", tmp);
	snprintf(state_dir, sizeof(state_dir), "%s/state", tmp);
	if (dir_at("lower") || dir_at("hosts") || dir_at("hosts/127.0.0.1") ||
	    file_at("lower/name", "shared\n") ||
	    file_at("hosts/127.0.0.1/name", "mine\n"))
		return -1;
	rpc_log_level = RPC_LOG_ERR; /* each open and release logs at info */
	memset(&srv, 0, sizeof(srv));
	if (srv_open(&srv, &opts, err, sizeof(err)) < 0) {
		fprintf(stderr, "srv_open: %s\n", err);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	srv_close(&srv);
	t_rm_rf(tmp);
	return 0;
}

/* ---- calls ---- */

struct call {
	struct sockaddr_storage peer;
	struct rpc_req rq;
	struct srv_req req;
};

/* A call from ADDR, which pins nothing yet. */
static void call_init(struct call *c, const char *addr)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&c->peer;

	memset(c, 0, sizeof(*c));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(700);
	inet_pton(AF_INET, addr, &sin->sin_addr);
	c->rq.peer = &c->peer;
	c->rq.peerlen = sizeof(*sin);
	c->rq.peer_addr = addr;
	c->req.rpc = &c->rq;
	c->req.srv = &srv;
}

/* The end of C, as srv_call_serve ends it: its pins dropped under the
 * exports read lock. */
static void call_end(struct call *c)
{
	srv_exports_read_begin(&srv);
	srv_unions_unpin(&c->req);
	srv_exports_read_end(&srv);
}

/* The text of "name" in client union I (pinned), into BUF; 0 or -errno. */
static int read_name(struct srv_export *i, char *buf, size_t len)
{
	struct un_obj *root, *f = NULL;
	ssize_t n = -1;
	bool eof;
	int rc;

	buf[0] = '\0';
	rc = un_root(i->ux, &root);
	if (rc == 0) {
		rc = un_lookup(i->ux, root, "name", &f);
		un_obj_put(root);
	}
	if (rc == 0) {
		n = un_read(i->ux, f, buf, len - 1, 0, &eof);
		un_obj_put(f);
	}
	if (n >= 0)
		buf[n] = '\0';
	return rc ? rc : n < 0 ? (int)n : 0;
}

/* A call run on a thread of its own: what it read, and when it ended. */
struct later {
	struct call c;
	const char *addr;
	char buf[32];
	int rc;
	atomic_bool done;
};

/* 127.0.0.1's union, as a READ after the reload finds it. */
static void *later_read(void *arg)
{
	struct later *l = arg;
	struct srv_export *i;

	call_init(&l->c, l->addr);
	srv_exports_read_begin(&srv);
	i = srv_export_instance(&l->c.req, srv.exports[0]);
	l->rc = i ? read_name(i, l->buf, sizeof(l->buf)) : -1;
	srv_unions_unpin(&l->c.req);
	srv_exports_read_end(&srv);
	atomic_store(&l->done, true);
	return NULL;
}

/* True once *DONE is set, within MS milliseconds. */
static bool ends_within(atomic_bool *done, int ms)
{
	for (int k = 0; k < ms && !atomic_load(done); k++)
		usleep(1000);
	return atomic_load(done);
}

static void reload(void)
{
	char err[512];

	assert_int_equal(srv_reload(&srv, &opts, err, sizeof(err)), 0);
}

/* ---- tests ---- */

static void test_recheck_pinned(void **state)
{
	struct later b = {.addr = "127.0.0.1"};
	struct srv_export *i;
	struct call a;
	char buf[32], from[256], to[256];
	bool ended;
	pthread_t t;

	(void)state;
	call_init(&a, "127.0.0.1");
	i = srv_export_instance(&a.req, srv.exports[0]);
	assert_non_null(i);
	assert_int_equal(read_name(i, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "mine\n");
	snprintf(from, sizeof(from), "%s/hosts/127.0.0.1", tmp);
	snprintf(to, sizeof(to), "%s/hosts/old-127.0.0.1", tmp);
	assert_int_equal(rename(from, to), 0);
	/* a's pin stands for a call that pinned the union after the reload's
	 * swap (it holds no exports read lock here, so that the reload runs) */
	reload();
	assert_int_equal(read_name(i, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "mine\n");
	assert_int_equal(pthread_create(&t, NULL, later_read, &b), 0);
	ended = ends_within(&b.done, WAIT_MS);
	call_end(&a); /* before any verdict: a union left pinned stops srv_close */
	assert_int_equal(pthread_join(t, NULL), 0);
	/* a call that comes after the reload is not served the old stack */
	assert_false(ended);
	assert_int_equal(b.rc, 0);
	assert_string_equal(b.buf, "shared\n");
}

/* C asks, while it pins 127.0.0.1's union, for 127.0.0.2's by its id (a
 * RENAME with one handle of each). */
struct crossing {
	struct call *c;
	uint32_t id;
	struct srv_export *got;
	atomic_bool done;
};

static void *crossing_get(void *arg)
{
	struct crossing *x = arg;

	x->got = srv_export_for_handle(&x->c->req, x->id);
	atomic_store(&x->done, true);
	return NULL;
}

static void test_outdated_no_wait_when_pinning(void **state)
{
	struct crossing x = {0};
	struct srv_export *mine, *other;
	struct call c, d;
	bool ended, got;
	pthread_t t;

	(void)state;
	call_init(&c, "127.0.0.1");
	call_init(&d, "127.0.0.2");
	mine = srv_export_instance(&c.req, srv.exports[0]);
	other = srv_export_instance(&d.req, srv.exports[0]);
	assert_non_null(mine);
	assert_non_null(other);
	reload(); /* both pinned: both outdated */
	x.c = &c;
	x.id = other->id;
	assert_int_equal(pthread_create(&t, NULL, crossing_get, &x), 0);
	ended = ends_within(&x.done, WAIT_MS);
	call_end(&d); /* lets a C that waited go (it then finds no union) */
	assert_int_equal(pthread_join(t, NULL), 0);
	got = x.got && x.got->id == x.id; /* C's pin keeps it */
	call_end(&c);			  /* the last pin of each: both released */
	assert_true(ended);
	assert_true(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_recheck_pinned, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_outdated_no_wait_when_pinning, setup,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
