/* SPDX-License-Identifier: Apache-2.0 */
/* test_stable - the stable-storage test of issue 3.
 *
 *   test_stable UNION_NFSD
 *
 * Builds a writable union in a temp dir (two lower layers, an upper and a work
 * dir), starts UNION_NFSD on it and, through libnfs' raw NFSv3 calls:
 *
 *   1. writes a new file (in a directory that exists only in a lower layer) with
 *      UNSTABLE WRITEs, leaving a hole, and modifies a lower file (copy-up) the
 *      same way; every reply's `committed` is a valid stable_how and all replies
 *      carry one write verifier; COMMIT returns that verifier;
 *   2. a FILE_SYNC WRITE answers committed FILE_SYNC, a DATA_SYNC one DATA_SYNC or
 *      better;
 *   3. SIGKILLs the server (no chance to flush or close anything) and restarts it
 *      on the same state dir and layers: the handles from before the kill still
 *      resolve, READ through them and by path (MNT + LOOKUP) returns the committed
 *      bytes, the fileids are unchanged, the upper layer on disk holds the data,
 *      and a WRITE now carries a different verifier (a client must resend what it
 *      had not committed);
 *   4. SIGTERM ends the restarted server with status 0.
 *
 * The server is stopped by pid and the temp dir removed also when a test fails
 * (group teardown; the server has PR_SET_PDEATHSIG should this process die).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nfs_raw.h"
#include "start_server.h"

#define CHUNK 65536
/* new.bin: data in [0, HOLE_AT) and [HOLE_END, NEW_SIZE), a hole between */
#define HOLE_AT	  (256 * 1024)
#define HOLE_END  (640 * 1024)
#define NEW_SIZE  (1024 * 1024 + 4321)
#define LOWER_TXT "0123456789abcdef\n"
#define LOWER_REP 4096 /* lower.txt is LOWER_REP copies of LOWER_TXT */
#define PATCH_OFF 40000
#define PATCH	  "patched by an UNSTABLE write"

/* One file of the test: its handle, fileid and the bytes it must hold. */
struct file {
	struct fh fh;
	uint64_t fileid;
	unsigned char *want;
	size_t size;
};

static struct {
	const char *bin;
	char tmp[PATH_MAX];
	struct test_union un; /* its options and state dir */
	struct test_server srv;
	struct rpc_context *nfs;
	struct fh root;
	struct file newf, lowerf, syncf;
	char verf[NFS3_WRITEVERFSIZE]; /* the verifier of the first server */
	bool have_verf;
} g;

/* ---- calls (nfs_raw.h makes them synchronous) ---- */

static void mnt_root(void)
{
	assert_int_equal(nfs_raw_mnt(g.srv.mount_port, "/", &g.root), MNT3_OK);
	assert_true(g.root.len > 0);
}

/* a result's status and the post-op attributes/handle the tests look at */
struct res {
	int status;
	struct fh fh;
	uint64_t fileid;
	uint64_t size;
	uint32_t count;
	int committed;
	char verf[NFS3_WRITEVERFSIZE];
	bool eof;
	unsigned char *data; /* READ: malloc'd copy */
	uint32_t datalen;
};

static void keep_lookup(void *data, void *out)
{
	LOOKUP3res *r = data;
	struct res *o = out;
	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	nfs_raw_copy_fh(&o->fh, &r->LOOKUP3res_u.resok.object);
	if (r->LOOKUP3res_u.resok.obj_attributes.attributes_follow)
		o->fileid =
		    r->LOOKUP3res_u.resok.obj_attributes.post_op_attr_u.attributes.fileid;
}

static void lookup_ok(const struct fh *dir, const char *name, struct res *o)
{
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct call c = {.keep = keep_lookup, .out = o};
	memset(o, 0, sizeof(*o));
	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_lookup_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	if (o->status != NFS3_OK)
		fail_msg("LOOKUP %s: status %d", name, o->status);
}

static void keep_create(void *data, void *out)
{
	CREATE3res *r = data;
	struct res *o = out;
	o->status = r->status;
	if (r->status != NFS3_OK || !r->CREATE3res_u.resok.obj.handle_follows)
		return;
	nfs_raw_copy_fh(&o->fh, &r->CREATE3res_u.resok.obj.post_op_fh3_u.handle);
	if (r->CREATE3res_u.resok.obj_attributes.attributes_follow)
		o->fileid =
		    r->CREATE3res_u.resok.obj_attributes.post_op_attr_u.attributes.fileid;
}

/* CREATE (UNCHECKED, mode 0644) of DIR/NAME into F (handle, fileid). */
static void create_ok(const struct fh *dir, const char *name, struct file *f)
{
	CREATE3args a;
	struct res o = {0};
	struct call c = {.keep = keep_create, .out = &o};
	memset(&a, 0, sizeof(a));
	a.where.dir = nfs_raw_fh3(dir);
	a.where.name = (char *)name;
	a.how.mode = UNCHECKED;
	a.how.createhow3_u.obj_attributes.mode.set_it = 1;
	a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_create_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	if (o.status != NFS3_OK)
		fail_msg("CREATE %s: status %d", name, o.status);
	assert_true(o.fh.len > 0);
	f->fh = o.fh;
	f->fileid = o.fileid;
}

static void keep_write(void *data, void *out)
{
	WRITE3res *r = data;
	struct res *o = out;
	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	o->count = r->WRITE3res_u.resok.count;
	o->committed = r->WRITE3res_u.resok.committed;
	memcpy(o->verf, r->WRITE3res_u.resok.verf, NFS3_WRITEVERFSIZE);
	if (r->WRITE3res_u.resok.file_wcc.after.attributes_follow)
		o->size =
		    r->WRITE3res_u.resok.file_wcc.after.post_op_attr_u.attributes.size;
}

/* WRITE of LEN bytes of F's wanted content at OFF; checks status, count and that
 * committed is a stable_how at least as strong as asked.  Returns the reply. */
static struct res write_ok(struct file *f, uint64_t off, size_t len, stable_how how)
{
	WRITE3args a = {.file = nfs_raw_fh3(&f->fh),
			.offset = off,
			.count = (count3)len,
			.stable = how};
	struct res o = {0};
	struct call c = {.keep = keep_write, .out = &o};
	a.data.data_len = (u_int)len;
	a.data.data_val = (char *)f->want + off;
	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_write_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	if (o.status != NFS3_OK)
		fail_msg("WRITE %zu at %llu: status %d", len, (unsigned long long)off,
			 o.status);
	assert_int_equal(o.count, len);
	if (o.committed < (int)how || o.committed > FILE_SYNC)
		fail_msg("WRITE stable=%d answered committed=%d", how, o.committed);
	return o;
}

static void keep_commit(void *data, void *out)
{
	COMMIT3res *r = data;
	struct res *o = out;
	o->status = r->status;
	if (r->status == NFS3_OK)
		memcpy(o->verf, r->COMMIT3res_u.resok.verf, NFS3_WRITEVERFSIZE);
}

/* COMMIT of the whole file F; returns its verifier in VERF. */
static void commit_ok(const struct file *f, char *verf)
{
	COMMIT3args a = {.file = nfs_raw_fh3(&f->fh), .offset = 0, .count = 0};
	struct res o = {0};
	struct call c = {.keep = keep_commit, .out = &o};
	assert_int_equal(
	    nfs_raw_finish(g.nfs, &c,
			   rpc_nfs3_commit_async(g.nfs, nfs_raw_on_reply, &a, &c)),
	    0);
	if (o.status != NFS3_OK)
		fail_msg("COMMIT: status %d", o.status);
	memcpy(verf, o.verf, NFS3_WRITEVERFSIZE);
}

static void keep_read(void *data, void *out)
{
	READ3res *r = data;
	struct res *o = out;
	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	o->count = r->READ3res_u.resok.count;
	o->eof = r->READ3res_u.resok.eof;
	o->datalen = r->READ3res_u.resok.data.data_len;
	o->data = malloc(o->datalen + 1);
	if (o->data)
		memcpy(o->data, r->READ3res_u.resok.data.data_val, o->datalen);
}

/* READs all of the file behind FH (until eof) and compares it with F's wanted
 * bytes; WHAT names the way the handle was obtained. */
static void read_back(const struct fh *fh, const struct file *f, const char *what)
{
	uint64_t off = 0;
	for (;;) {
		READ3args a = {.file = nfs_raw_fh3(fh), .offset = off, .count = CHUNK};
		struct res o = {0};
		struct call c = {.keep = keep_read, .out = &o};
		assert_int_equal(
		    nfs_raw_finish(g.nfs, &c,
				   rpc_nfs3_read_async(g.nfs, nfs_raw_on_reply, &a, &c)),
		    0);
		if (o.status != NFS3_OK)
			fail_msg("READ (%s) at %llu: status %d", what,
				 (unsigned long long)off, o.status);
		assert_non_null(o.data);
		assert_int_equal(o.datalen, o.count);
		if (off + o.count > f->size ||
		    memcmp(o.data, f->want + off, o.count) != 0) {
			free(o.data);
			fail_msg("READ (%s): bytes at %llu..+%u differ from what was "
				 "written",
				 what, (unsigned long long)off, o.count);
		}
		free(o.data);
		off += o.count;
		if (o.eof || o.count == 0)
			break;
	}
	if (off != f->size)
		fail_msg("READ (%s): %llu bytes, want %zu", what, (unsigned long long)off,
			 f->size);
}

/* The file at PATH in the upper layer holds F's wanted bytes. */
static void check_upper(const char *rel, const struct file *f)
{
	char path[PATH_MAX + 64];
	unsigned char *buf = malloc(f->size + 1);
	ssize_t n;
	int fd;
	assert_non_null(buf);
	snprintf(path, sizeof(path), "%s/upper/%s", g.tmp, rel);
	fd = open(path, O_RDONLY);
	if (fd < 0) {
		free(buf);
		fail_msg("%s: %s", path, strerror(errno));
	}
	n = read(fd, buf, f->size + 1);
	close(fd);
	if (n != (ssize_t)f->size || memcmp(buf, f->want, f->size) != 0) {
		free(buf);
		fail_msg("%s: %zd bytes or content differ from what was committed", path,
			 n);
	}
	free(buf);
}

/* ---- the union ---- */

static void put(const char *rel, const void *data, size_t len)
{
	char p[PATH_MAX + 64];
	int fd;
	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len || close(fd)) {
		perror(p);
		exit(1);
	}
}

static void mkdir_rel(const char *rel)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/%s", g.tmp, rel);
	if (mkdir(p, 0755)) {
		perror(p);
		exit(1);
	}
}

static unsigned char pattern(uint64_t off)
{
	return (unsigned char)((off * 131 + (off >> 11) * 7 + 3) & 0xff);
}

/* The layers, and the bytes each file must hold at the end. */
static void make_union(void)
{
	snprintf(g.tmp, sizeof(g.tmp), "/tmp/union-nfsd-stable.XXXXXX");
	if (!mkdtemp(g.tmp)) {
		perror("mkdtemp");
		exit(1);
	}
	mkdir_rel("l1");
	mkdir_rel("l2");
	mkdir_rel("l2/sub");
	mkdir_rel("upper");
	mkdir_rel("work");
	g.lowerf.size = strlen(LOWER_TXT) * LOWER_REP;
	g.lowerf.want = malloc(g.lowerf.size);
	for (size_t i = 0; i < LOWER_REP; i++)
		memcpy(g.lowerf.want + i * strlen(LOWER_TXT), LOWER_TXT,
		       strlen(LOWER_TXT));
	put("l1/lower.txt", g.lowerf.want, g.lowerf.size);
	put("l2/sub/old.txt", "an old file\n", 12);
	memcpy(g.lowerf.want + PATCH_OFF, PATCH, strlen(PATCH));

	g.newf.size = NEW_SIZE;
	g.newf.want = calloc(1, NEW_SIZE);
	for (size_t i = 0; i < NEW_SIZE; i++)
		if (i < HOLE_AT || i >= HOLE_END)
			g.newf.want[i] = pattern(i);
	g.syncf.size = 3 * CHUNK;
	g.syncf.want = malloc(g.syncf.size);
	for (size_t i = 0; i < g.syncf.size; i++)
		g.syncf.want[i] = pattern(i + 99);

	test_union_init(&g.un, g.tmp, "l1:l2");
}

static int start(void)
{
	if (test_server_start(g.bin, g.un.state, g.un.args, &g.srv))
		return -1;
	g.nfs = nfs_raw_connect(g.srv.nfs_port, NFS_PROG, 3);
	return g.nfs ? 0 : -1;
}

static void disconnect(void)
{
	if (g.nfs)
		rpc_destroy_context(g.nfs);
	g.nfs = NULL;
}

static int group_setup(void **state)
{
	(void)state;
	make_union();
	if (start())
		return -1;
	mnt_root();
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	disconnect();
	test_server_stop(&g.srv);
	test_tmp_remove(g.tmp, "/tmp/union-nfsd-stable.");
	free(g.newf.want);
	free(g.lowerf.want);
	free(g.syncf.want);
	return 0;
}

/* ---- the tests ---- */

/* All replies of one server carry one verifier; the first one seen is kept. */
static void same_verf(const char *verf, const char *what)
{
	if (!g.have_verf) {
		memcpy(g.verf, verf, NFS3_WRITEVERFSIZE);
		g.have_verf = true;
	}
	if (memcmp(verf, g.verf, NFS3_WRITEVERFSIZE) != 0)
		fail_msg("%s: write verifier differs from the first reply's", what);
}

static void test_unstable_then_commit(void **state)
{
	struct res sub, low;
	char verf[NFS3_WRITEVERFSIZE];
	(void)state;
	/* sub/ exists only in a lower layer: the create copies it up first */
	lookup_ok(&g.root, "sub", &sub);
	create_ok(&sub.fh, "new.bin", &g.newf);
	/* out of order, with a hole that is never written */
	for (uint64_t off = HOLE_END; off < NEW_SIZE; off += CHUNK) {
		size_t len = NEW_SIZE - off < CHUNK ? NEW_SIZE - off : CHUNK;
		struct res w = write_ok(&g.newf, off, len, UNSTABLE);
		same_verf(w.verf, "WRITE UNSTABLE");
	}
	for (uint64_t off = 0; off < HOLE_AT; off += CHUNK) {
		struct res w = write_ok(&g.newf, off, CHUNK, UNSTABLE);
		same_verf(w.verf, "WRITE UNSTABLE");
	}
	/* a lower file: the first write copies it up */
	lookup_ok(&g.root, "lower.txt", &low);
	g.lowerf.fh = low.fh;
	g.lowerf.fileid = low.fileid;
	struct res w = write_ok(&g.lowerf, PATCH_OFF, strlen(PATCH), UNSTABLE);
	same_verf(w.verf, "WRITE UNSTABLE (copy-up)");
	assert_int_equal(w.size, g.lowerf.size);

	commit_ok(&g.newf, verf);
	same_verf(verf, "COMMIT");
	commit_ok(&g.lowerf, verf);
	same_verf(verf, "COMMIT (copied-up file)");
	read_back(&g.newf.fh, &g.newf, "before the kill");
	read_back(&g.lowerf.fh, &g.lowerf, "copied-up file, before the kill");
}

static void test_file_sync(void **state)
{
	struct res w;
	(void)state;
	create_ok(&g.root, "sync.bin", &g.syncf);
	w = write_ok(&g.syncf, 0, CHUNK, FILE_SYNC);
	if (w.committed != FILE_SYNC)
		fail_msg("WRITE FILE_SYNC answered committed=%d", w.committed);
	same_verf(w.verf, "WRITE FILE_SYNC");
	w = write_ok(&g.syncf, CHUNK, CHUNK, DATA_SYNC);
	same_verf(w.verf, "WRITE DATA_SYNC");
	w = write_ok(&g.syncf, 2 * CHUNK, CHUNK, FILE_SYNC);
	assert_int_equal(w.committed, FILE_SYNC);
	assert_int_equal(w.size, g.syncf.size);
}

static void test_sigkill_restart(void **state)
{
	struct res sub, byname, w;
	char verf[NFS3_WRITEVERFSIZE];
	int st;
	(void)state;
	assert_true(g.have_verf);
	disconnect();
	/* no SIGTERM: nothing gets a chance to flush or close */
	assert_int_equal(kill(g.srv.pid, SIGKILL), 0);
	assert_int_equal(waitpid(g.srv.pid, &st, 0), g.srv.pid);
	g.srv.pid = -1;
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	assert_int_equal(start(), 0);

	/* the old handles, with no MNT and no LOOKUP */
	read_back(&g.newf.fh, &g.newf, "handle from before the kill");
	read_back(&g.lowerf.fh, &g.lowerf, "copied-up file, handle from before the kill");
	read_back(&g.syncf.fh, &g.syncf, "FILE_SYNC file, handle from before the kill");

	/* and by path */
	mnt_root();
	lookup_ok(&g.root, "sub", &sub);
	lookup_ok(&sub.fh, "new.bin", &byname);
	assert_int_equal(byname.fileid, g.newf.fileid);
	read_back(&byname.fh, &g.newf, "sub/new.bin by path after the restart");
	lookup_ok(&g.root, "lower.txt", &byname);
	assert_int_equal(byname.fileid, g.lowerf.fileid);
	read_back(&byname.fh, &g.lowerf, "lower.txt by path after the restart");

	/* what kernel overlayfs would find in the upper layer */
	check_upper("sub/new.bin", &g.newf);
	check_upper("lower.txt", &g.lowerf);
	check_upper("sync.bin", &g.syncf);

	/* a new server instance: a new verifier, the same in WRITE and COMMIT */
	w = write_ok(&g.newf, 0, CHUNK, UNSTABLE);
	if (memcmp(w.verf, g.verf, NFS3_WRITEVERFSIZE) == 0)
		fail_msg("the write verifier did not change across a restart");
	commit_ok(&g.newf, verf);
	assert_memory_equal(verf, w.verf, NFS3_WRITEVERFSIZE);
	w = write_ok(&g.syncf, 0, CHUNK, FILE_SYNC);
	assert_int_equal(w.committed, FILE_SYNC);
	assert_memory_equal(verf, w.verf, NFS3_WRITEVERFSIZE);
}

/* SIGTERM ends the server with status 0 (under ASan: no leak, no error report). */
static void test_clean_exit(void **state)
{
	int st;
	(void)state;
	disconnect();
	st = test_server_stop(&g.srv);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("union-nfsd ended with wait status 0x%x on SIGTERM, want exit 0",
			 st);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_unstable_then_commit),
	    cmocka_unit_test(test_file_sync),
	    cmocka_unit_test(test_sigkill_restart),
	    cmocka_unit_test(test_clean_exit),
	};
	signal(SIGPIPE, SIG_IGN);
	if (argc != 2) {
		fprintf(stderr, "usage: test_stable UNION_NFSD\n");
		return 2;
	}
	g.bin = argv[1];
	return cmocka_run_group_tests_name("integration/stable_storage", tests,
					   group_setup, group_teardown);
}
