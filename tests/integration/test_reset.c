/* SPDX-License-Identifier: Apache-2.0 */
/* test_reset.c - `reset CLIENT` and a client's upper removed while served
 * (issue 21).
 *
 * The server runs in the test process (reset_srv.h) so that the test calls
 * srv_unions_reset itself, as union-nfsctl's `reset` does; clients are
 * libnfs' raw calls from 127.0.0.1, whose per-client upper is
 * TMP/c/127.0.0.1/upper.
 *
 *  - reset: the client holds handles of files and a directory it made, of
 *    a lower file it wrote (copied up) and of lower objects.  After the
 *    reset its own handles answer NFS3ERR_STALE (also once a new file takes
 *    the old name), the lower ones resolve, the written file reads the
 *    lower's bytes, and a new file lands in the (new) upper on disk;
 *  - vanished: rm -rf of the client's upper and work dir while served: one
 *    log line, then CREATE and WRITE succeed and reach the disk; for the
 *    fixed upper of "/static", one log line and NFS3ERR_ROFS;
 *  - in flight: threads hammer READs (of a lower file and of a file of the
 *    client's) while the union is reset again and again: every reply is OK,
 *    or STALE for the client's own file once it was reset (in the ASan
 *    tree, the registry's and the engine's use-after-free check).
 *
 * Runs as root.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "it_util.h"
#include "nfs_raw.h"
#include "reset_srv.h"
#include "start_server.h"

#define ME	     "127.0.0.1"
#define DATA_MAX     256
#define HAMMERS	     3
#define RESETS	     20
#define RESET_GAP_MS 50

static struct {
	char tmp[64];
	char log[128];
	int saved_stderr;
	uint16_t nfs_port, mount_port;
	struct rpc_context *nfs;
} g;

/* ---- calls ---- */

static struct nfs_raw_obj lookup(const struct fh *dir, const char *name)
{
	return nfs_raw_lookup(g.nfs, dir, name);
}

static int getattr_st(const struct fh *fh)
{
	return nfs_raw_getattr(g.nfs, fh).status;
}

static int write_st(const struct fh *fh, const char *text)
{
	return nfs_raw_write(g.nfs, fh, 0, text, (uint32_t)strlen(text));
}

static void keep_create(void *data, void *out)
{
	CREATE3res *r = data;
	struct nfs_raw_obj *o = out;

	o->status = r->status;
	if (r->status == NFS3_OK && r->CREATE3res_u.resok.obj.handle_follows)
		nfs_raw_copy_fh(&o->fh, &r->CREATE3res_u.resok.obj.post_op_fh3_u.handle);
}

static struct nfs_raw_obj create(const struct fh *dir, const char *name)
{
	CREATE3args a = {.where = {.dir = nfs_raw_fh3(dir), .name = (char *)name},
			 .how = {.mode = UNCHECKED}};
	struct nfs_raw_obj o = {0};
	struct call c = {.keep = keep_create, .out = &o};

	a.how.createhow3_u.obj_attributes.mode.set_it = 1;
	a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_create_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	return o;
}

/* CREATE of NAME with TEXT, which must succeed. */
static struct nfs_raw_obj create_ok(const struct fh *dir, const char *name,
				    const char *text)
{
	struct nfs_raw_obj o = create(dir, name);

	if (o.status != NFS3_OK || !o.fh.len)
		fail_msg("CREATE %s: status %d", name, o.status);
	assert_int_equal(write_st(&o.fh, text), NFS3_OK);
	return o;
}

static void keep_mkdir(void *data, void *out)
{
	MKDIR3res *r = data;
	struct nfs_raw_obj *o = out;

	o->status = r->status;
	if (r->status == NFS3_OK && r->MKDIR3res_u.resok.obj.handle_follows)
		nfs_raw_copy_fh(&o->fh, &r->MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
}

static struct nfs_raw_obj mkdir_ok(const struct fh *dir, const char *name)
{
	MKDIR3args a = {.where = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct nfs_raw_obj o = {0};
	struct call c = {.keep = keep_mkdir, .out = &o};

	a.attributes.mode.set_it = 1;
	a.attributes.mode.set_mode3_u.mode = 0755;
	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_mkdir_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	assert_int_equal(o.status, NFS3_OK);
	return o;
}

static struct fh mnt(const char *path)
{
	struct fh root;

	assert_int_equal(nfs_raw_mnt(g.mount_port, path, &root), MNT3_OK);
	return root;
}

/* ---- files ---- */

static void put(const char *rel, const char *text)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", g.tmp, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* The bytes of TMP/REL, "" when it is not there. */
static const char *disk(const char *rel)
{
	static char buf[DATA_MAX + 1];
	char path[256];
	ssize_t n = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", g.tmp, rel);
	fd = open(path, O_RDONLY);
	if (fd >= 0) {
		n = read(fd, buf, DATA_MAX);
		close(fd);
	}
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static bool on_disk(const char *rel)
{
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", g.tmp, rel);
	return lstat(path, &st) == 0;
}

/* Lines of the server's log holding WHAT. */
static int log_lines(const char *what)
{
	FILE *f = fopen(g.log, "r");
	char line[1024];
	int n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

/* ---- the tests ---- */

static void test_reset(void **state)
{
	char msg[512];
	struct fh root = mnt("/");
	struct nfs_raw_obj lf, ld, lg, mine, mdir, x, again;

	(void)state;
	lf = lookup(&root, "f");
	ld = lookup(&root, "d");
	assert_int_equal(lf.status, NFS3_OK);
	assert_int_equal(ld.status, NFS3_OK);
	lg = lookup(&ld.fh, "g");
	assert_int_equal(lg.status, NFS3_OK);
	mine = create_ok(&root, "mine", "my bytes");
	mdir = mkdir_ok(&root, "mdir");
	x = create_ok(&mdir.fh, "x", "deep");
	assert_int_equal(write_st(&lf.fh, "written"), NFS3_OK); /* a copy-up */
	assert_string_equal(disk("c/" ME "/upper/mine"), "my bytes");
	assert_string_equal(disk("c/" ME "/upper/f"), "written");

	assert_int_equal(reset_srv_reset(ME, msg, sizeof(msg)), 1);
	print_message("%s\n", msg);
	assert_int_equal(log_lines("reset: upper and work dir emptied"), 1);

	/* its own objects are gone, the lower ones are served from the lowers */
	assert_int_equal(getattr_st(&mine.fh), NFS3ERR_STALE);
	assert_int_equal(getattr_st(&mdir.fh), NFS3ERR_STALE);
	assert_int_equal(getattr_st(&x.fh), NFS3ERR_STALE);
	assert_int_equal(getattr_st(&root), NFS3_OK);
	assert_int_equal(getattr_st(&ld.fh), NFS3_OK);
	assert_int_equal(getattr_st(&lg.fh), NFS3_OK);
	assert_string_equal(nfs_raw_read_text(g.nfs, &lf.fh).data, "lower f");
	assert_int_equal(lookup(&root, "mine").status, NFS3ERR_NOENT);
	assert_false(on_disk("c/" ME "/upper/mine"));

	/* a new file under the old name is another object, and reaches disk */
	again = create_ok(&root, "mine", "new bytes");
	assert_int_equal(getattr_st(&mine.fh), NFS3ERR_STALE);
	assert_string_equal(nfs_raw_read_text(g.nfs, &again.fh).data, "new bytes");
	assert_string_equal(disk("c/" ME "/upper/mine"), "new bytes");
	assert_int_equal(reset_srv_reset("10.9.9.9", msg, sizeof(msg)), -ENOENT);
	assert_int_equal(reset_srv_reset("../../etc", msg, sizeof(msg)), -EINVAL);
}

static void test_vanished(void **state)
{
	char dir[128];
	struct fh root = mnt("/"), sroot = mnt("/static");
	struct nfs_raw_obj b, s;

	(void)state;
	create_ok(&root, "a", "before");
	create_ok(&sroot, "sa", "before");
	snprintf(dir, sizeof(dir), "%s/c/" ME, g.tmp);
	assert_int_equal(test_tree_remove(dir), 0);

	b = create_ok(&root, "b", "after");
	assert_string_equal(disk("c/" ME "/upper/b"), "after");
	assert_string_equal(nfs_raw_read_text(g.nfs, &b.fh).data, "after");
	create_ok(&root, "b2", "more");
	assert_string_equal(disk("c/" ME "/upper/b2"), "more");
	assert_int_equal(log_lines("vanished while served: made again"), 1);

	/* a fixed upper is the configuration's: refused, not made again */
	snprintf(dir, sizeof(dir), "%s/supper", g.tmp);
	assert_int_equal(test_tree_remove(dir), 0);
	snprintf(dir, sizeof(dir), "%s/swork", g.tmp);
	assert_int_equal(test_tree_remove(dir), 0);
	s = create(&sroot, "sb");
	assert_int_equal(s.status, NFS3ERR_ROFS);
	assert_int_equal(create(&sroot, "sc").status, NFS3ERR_ROFS);
	assert_int_equal(log_lines("changes refused (NFS3ERR_ROFS)"), 1);
}

/* ---- READs in flight across resets ---- */

struct hammer {
	pthread_t t;
	struct fh lower, own;
	atomic_bool *stop;
	long reads, stale, bad;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	struct rpc_context *rpc = nfs_raw_connect(g.nfs_port, NFS_PROG, 3);
	bool own_gone = false;

	if (!rpc) {
		h->bad++;
		return NULL;
	}
	while (!atomic_load(h->stop)) {
		struct nfs_raw_text l = nfs_raw_read_text(rpc, &h->lower),
				    o = nfs_raw_read_text(rpc, &h->own);

		h->reads += 2;
		h->bad += l.status != NFS3_OK || strcmp(l.data, "lower f") != 0;
		if (o.status == NFS3ERR_STALE)
			h->stale++, own_gone = true;
		else /* once reset, stale for good */
			h->bad += own_gone || o.status != NFS3_OK ||
				  strcmp(o.data, "hammered") != 0;
	}
	rpc_destroy_context(rpc);
	return NULL;
}

static void test_in_flight(void **state)
{
	struct hammer h[HAMMERS];
	struct fh root = mnt("/");
	atomic_bool stop = false;
	char msg[512];
	int resets = 0;

	(void)state;
	for (int k = 0; k < HAMMERS; k++) {
		char name[32];

		snprintf(name, sizeof(name), "h%d", k);
		h[k] = (struct hammer){.stop = &stop};
		h[k].lower = lookup(&root, "f").fh;
		h[k].own = create_ok(&root, name, "hammered").fh;
		assert_int_equal(pthread_create(&h[k].t, NULL, hammer_main, &h[k]), 0);
	}
	for (int k = 0; k < RESETS; k++) {
		it_sleep_ms(RESET_GAP_MS);
		resets += reset_srv_reset(ME, msg, sizeof(msg)) == 1;
	}
	atomic_store(&stop, true);
	for (int k = 0; k < HAMMERS; k++) {
		pthread_join(h[k].t, NULL);
		print_message("hammer %d: %ld reads, %ld stale, %ld wrong\n", k,
			      h[k].reads, h[k].stale, h[k].bad);
		assert_int_equal(h[k].bad, 0);
		assert_true(h[k].stale > 0);
	}
	assert_int_equal(resets, RESETS);
}

/* ---- set-up ---- */

static int setup(void **state)
{
	char d[160];
	int fd;

	(void)state;
	if (geteuid() != 0) {
		fprintf(stderr, "test_reset: needs root\n");
		exit(77);
	}
	snprintf(g.tmp, sizeof(g.tmp), "/tmp/test_reset.XXXXXX");
	if (!mkdtemp(g.tmp))
		return -1;
	snprintf(g.log, sizeof(g.log), "%s/log", g.tmp);
	snprintf(d, sizeof(d), "%s/lower", g.tmp);
	mkdir(d, 0755);
	snprintf(d, sizeof(d), "%s/lower/d", g.tmp);
	mkdir(d, 0755);
	for (const char *const *n = (const char *const[]){"supper", "swork", NULL}; *n;
	     n++) {
		snprintf(d, sizeof(d), "%s/%s", g.tmp, *n);
		mkdir(d, 0755);
	}
	put("lower/f", "lower f");
	put("lower/d/g", "lower g");
	/* the server's log, read by the tests */
	fd = open(g.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	g.saved_stderr = dup(STDERR_FILENO);
	if (fd < 0 || g.saved_stderr < 0 || dup2(fd, STDERR_FILENO) < 0)
		return -1;
	close(fd);
	if (reset_srv_start(g.tmp, &g.nfs_port, &g.mount_port) < 0)
		return -1;
	g.nfs = nfs_raw_connect(g.nfs_port, NFS_PROG, 3);
	return g.nfs ? 0 : -1;
}

static int teardown(void **state)
{
	FILE *f;
	char line[1024];

	(void)state;
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	reset_srv_stop();
	dup2(g.saved_stderr, STDERR_FILENO);
	f = fopen(g.log, "r");
	while (f && fgets(line, sizeof(line), f))
		fputs(line, stderr);
	if (f)
		fclose(f);
	test_tmp_remove(g.tmp, "/tmp/test_reset.");
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reset),
	    cmocka_unit_test(test_vanished),
	    cmocka_unit_test(test_in_flight),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
