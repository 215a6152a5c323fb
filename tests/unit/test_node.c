/* SPDX-License-Identifier: Apache-2.0 */
/* test_node.c - the node table: ids stable across restarts, stale ids after
 * removal or replacement, ids unique across exports, hard links, the state
 * dir, injected table failures, concurrent first lookups, and the writer's
 * batches of queued jobs. */
#include "test_un.h"

#include <pthread.h>

static void reopen(struct fx *fx, const char *lowers)
{
	t_export_close(fx);
	un_state_close(fx->st);
	assert_int_equal(un_state_open(t_path(fx, "state"), &fx->st), 0);
	t_export(fx, lowers, NULL, NULL);
}

static void test_ids_stable_across_reopen(void **state)
{
	static const char *const paths[] = {"", "a", "a/b", "a/b/f", "a/g", "top"};
	struct fx *fx = *state;
	un_id ids[6];
	struct un_obj *o;

	t_file(fx, "l1/a/b/f", "1");
	t_file(fx, "l2/a/g", "2");
	t_file(fx, "l2/top", "2");
	t_export(fx, "l1:l2", NULL, NULL);
	for (size_t i = 0; i < 6; i++)
		ids[i] = t_id(fx, paths[i]);
	for (size_t i = 1; i < 6; i++)
		for (size_t j = 0; j < i; j++)
			assert_int_not_equal(ids[i], ids[j]);
	assert_int_equal(un_state_sync(fx->st), 0);

	reopen(fx, "l1:l2");
	/* Resolve first, before any lookup of this run. */
	for (size_t i = 0; i < 6; i++) {
		assert_int_equal(un_resolve(fx->ex, ids[i], &o), 0);
		assert_int_equal(un_obj_id(o), ids[i]);
		un_obj_put(o);
	}
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(t_id(fx, paths[i]), ids[i]);
}

static void test_stale_after_remove(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	un_id f, d, inner;

	t_file(fx, "l1/f", "1");
	t_file(fx, "l1/d/inner", "1");
	t_export(fx, "l1", NULL, NULL);
	f = t_id(fx, "f");
	d = t_id(fx, "d");
	inner = t_id(fx, "d/inner");
	t_rm(fx, "l1/f");
	assert_int_equal(un_resolve(fx->ex, f, &o), -ESTALE);
	t_rm(fx, "l1/d/inner");
	t_rm(fx, "l1/d");
	assert_int_equal(un_resolve(fx->ex, d, &o), -ESTALE);
	assert_int_equal(un_resolve(fx->ex, inner, &o), -ESTALE);
}

static void test_stale_after_replace(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	un_id f, f2, d;

	t_file(fx, "l1/f", "old");
	t_file(fx, "l1/d/x", "1");
	t_export(fx, "l1", NULL, NULL);
	f = t_id(fx, "f");
	d = t_id(fx, "d");

	/* A new inode under the same name: a new node, the old id is stale. */
	t_file(fx, "l1/f.new", "new");
	assert_int_equal(rename(t_path(fx, "l1/f.new"), t_path(fx, "l1/f")), 0);
	assert_int_equal(un_resolve(fx->ex, f, &o), -ESTALE);
	f2 = t_id(fx, "f");
	assert_true(f2 > f);
	assert_int_equal(un_resolve(fx->ex, f2, &o), 0);
	un_obj_put(o);
	assert_int_equal(un_resolve(fx->ex, f, &o), -ESTALE);

	/* A directory replaced by a file of the same name. */
	t_rm(fx, "l1/d/x");
	t_rm(fx, "l1/d");
	t_file(fx, "l1/d", "now a file");
	assert_int_equal(un_resolve(fx->ex, d, &o), -ESTALE);
	assert_int_not_equal(t_id(fx, "d"), d);
}

static void test_dir_keeps_id_when_upper_appears(void **state)
{
	struct fx *fx = *state;
	struct un_obj *o;
	un_id d, f;

	t_mkdir(fx, "u");
	t_mkdir(fx, "w");
	t_file(fx, "l1/d/f", "1");
	t_export(fx, "l1", "u", "w");
	d = t_id(fx, "d");
	f = t_id(fx, "d/f");
	t_mkdir(fx, "u/d"); /* as a copy-up of a child would */
	assert_int_equal(t_id(fx, "d"), d);
	assert_int_equal(un_resolve(fx->ex, f, &o), 0);
	assert_int_equal(o->ninst, 1);
	un_obj_put(o);
	assert_int_equal(un_resolve(fx->ex, d, &o), 0);
	assert_int_equal(o->ninst, 2);
	un_obj_put(o);
}

static void test_root_pinned(void **state)
{
	struct fx *fx = *state;
	un_id root, f;

	t_file(fx, "l1/f", "1");
	t_mkdir(fx, "l0");
	t_export(fx, "l1", NULL, NULL);
	root = t_id(fx, "");
	f = t_id(fx, "f");
	/* Another layer on top changes the root's top-most instance. */
	t_export(fx, "l0:l1", NULL, NULL);
	assert_int_equal(t_id(fx, ""), root);
	assert_int_equal(t_id(fx, "f"), f);
}

static void test_unique_across_exports(void **state)
{
	struct fx *fx = *state;
	const char *low[] = {NULL};
	struct un_export_cfg cfg = {.path = "/second", .lowerdirs = low, .nlower = 1};
	struct un_export *ex2;
	struct un_obj *root2, *f2, *o;
	char err[256];
	un_id f;

	t_file(fx, "l1/f", "1");
	t_export(fx, "l1", NULL, NULL);
	f = t_id(fx, "f");
	low[0] = t_path(fx, "l1");
	assert_int_equal(un_export_open(fx->st, &cfg, &ex2, err, sizeof(err)), 0);
	assert_int_equal(un_root(ex2, &root2), 0);
	assert_int_not_equal(un_obj_id(root2), t_id(fx, ""));
	assert_int_equal(un_lookup(ex2, root2, "f", &f2), 0);
	assert_int_not_equal(un_obj_id(f2), f);
	/* An id of one export is stale in the other. */
	assert_int_equal(un_resolve(ex2, f, &o), -ESTALE);
	assert_int_equal(un_resolve(fx->ex, un_obj_id(f2), &o), -ESTALE);
	assert_int_equal(un_resolve(fx->ex, un_obj_id(root2), &o), -ESTALE);
	un_obj_put(f2);
	un_obj_put(root2);
	un_export_close(ex2);
}

static void test_hard_links(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l1/a/f", "1");
	t_mkdir(fx, "l1/b");
	assert_int_equal(link(t_path(fx, "l1/a/f"), t_path(fx, "l1/b/g")), 0);
	t_export(fx, "l1", NULL, NULL);
	assert_int_equal(t_id(fx, "b/g"), t_id(fx, "a/f"));
	assert_int_equal(t_id(fx, "a/f"), t_id(fx, "b/g"));
}

/* Two exports of one layer with hard links, on one state: each export's
 * names share a node of that export, which resolves there (the links index
 * is per export, so one export never hands out the other's node). */
static void test_hard_links_two_exports(void **state)
{
	struct fx *fx = *state;
	const char *low[] = {NULL};
	struct un_export_cfg cfg = {.path = "/second", .lowerdirs = low, .nlower = 1};
	struct un_obj *root2, *a, *b, *o;
	struct un_export *ex2;
	char err[256];
	un_id f;

	t_file(fx, "l1/a", "1");
	assert_int_equal(link(t_path(fx, "l1/a"), t_path(fx, "l1/b")), 0);
	t_export(fx, "l1", NULL, NULL);
	f = t_id(fx, "a");
	assert_int_equal(t_id(fx, "b"), f);
	low[0] = t_path(fx, "l1");
	assert_int_equal(un_export_open(fx->st, &cfg, &ex2, err, sizeof(err)), 0);
	assert_int_equal(un_root(ex2, &root2), 0);
	assert_int_equal(un_lookup(ex2, root2, "b", &b), 0);
	assert_int_equal(un_lookup(ex2, root2, "a", &a), 0);
	assert_int_not_equal(un_obj_id(a), f);
	assert_int_equal(un_obj_id(b), un_obj_id(a));
	assert_int_equal(un_resolve(ex2, un_obj_id(a), &o), 0);
	un_obj_put(o);
	assert_int_equal(t_id(fx, "b"), f);
	un_obj_put(a);
	un_obj_put(b);
	un_obj_put(root2);
	un_export_close(ex2);
}

/* Rewrites the table format number of state dir DIR behind the engine. */
static void set_format(const char *dir, uint32_t fmt)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k = {6, "format"}, v = {sizeof(fmt), &fmt};

	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
	assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

static void test_state_dir(void **state)
{
	struct fx *fx = *state;
	struct un_state *st;
	struct stat sb;
	int fd;

	assert_int_equal(stat(t_path(fx, "state"), &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0700);
	assert_int_equal(stat(t_path(fx, "state/secret"), &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_int_equal(sb.st_size, 32);
	assert_int_equal(un_state_sync(fx->st), 0);

	/* A damaged secret is refused, not replaced. */
	t_file(fx, "bad/secret", "short");
	assert_int_equal(un_state_open(t_path(fx, "bad"), &st), -EINVAL);
	t_file(fx, "file", "x");
	assert_int_not_equal(un_state_open(t_path(fx, "file/state"), &st), 0);
	/* A table of an unknown format is refused too. */
	fd = open(t_path(fx, "bad/secret"), O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "0123456789abcdef0123456789abcdef", 32), 32);
	close(fd);
	assert_int_equal(un_state_open(t_path(fx, "bad"), &st), 0);
	un_state_close(st);
	set_format(t_path(fx, "bad"), 2);
	assert_int_equal(un_state_open(t_path(fx, "bad"), &st), -EPROTO);
}

/* STATE/roots/<export id>: the root id its link names, 0 when none. */
static un_id root_link(struct fx *fx, uint32_t eid)
{
	char rel[64], buf[32];
	ssize_t n;

	snprintf(rel, sizeof(rel), "state/roots/%08" PRIx32, eid);
	n = readlink(t_path(fx, rel), buf, sizeof(buf) - 1);
	if (n < 0)
		return UN_ID_NONE;
	buf[n] = '\0';
	return strtoull(buf, NULL, 16);
}

/* Makes the table at DIR what a table written before roots.c was: no
 * "roots" mark, and ROOT named "export:<EID>" instead of "root:<ROOT>". */
static void make_legacy(const char *dir, uint32_t eid, un_id root)
{
	char old[32], now[32];
	uint8_t okey[40] = {0}, nkey[40] = {0};
	uint64_t le = htole64(root);
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi meta, names;
	MDB_val mk = {5, "roots"}, v = {sizeof(le), &le};
	MDB_val ok, nk;

	snprintf(old, sizeof(old), UN_ROOT_NAME_FMT, root);
	snprintf(now, sizeof(now), "export:%08" PRIx32, eid);
	memcpy(okey + 8, old, strlen(old));
	memcpy(nkey + 8, now, strlen(now));
	ok = (MDB_val){8 + strlen(old), okey};
	nk = (MDB_val){8 + strlen(now), nkey};
	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
	assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "meta", 0, &meta), 0);
	assert_int_equal(mdb_dbi_open(txn, "names", 0, &names), 0);
	assert_int_equal(mdb_del(txn, meta, &mk, NULL), 0);
	assert_int_equal(mdb_del(txn, names, &ok, NULL), 0);
	assert_int_equal(mdb_put(txn, names, &nk, &v, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

static void state_reopen(struct fx *fx)
{
	t_export_close(fx);
	un_state_close(fx->st);
	assert_int_equal(un_state_open(t_path(fx, "state"), &fx->st), 0);
}

/* An export's root is found through its link (roots.c), and keeps its id
 * and its children theirs across restarts, in a table that named roots
 * after their exports before the links (rule 3), and a new export's root
 * is named by its own id. */
static void test_roots_linked(void **state)
{
	struct fx *fx = *state;
	const char *low[] = {NULL};
	struct un_export_cfg cfg = {.path = "/second", .lowerdirs = low, .nlower = 1};
	struct un_export *ex2;
	char err[256], rel[64];
	uint32_t eid;
	un_id root, f;

	t_file(fx, "l1/f", "1");
	t_export(fx, "l1", NULL, NULL);
	eid = un_export_id(fx->ex);
	root = t_id(fx, "");
	f = t_id(fx, "f");
	assert_int_equal(root_link(fx, eid), root);
	state_reopen(fx);
	t_export(fx, "l1", NULL, NULL);
	assert_int_equal(t_id(fx, ""), root);
	assert_int_equal(t_id(fx, "f"), f);

	t_export_close(fx);
	un_state_close(fx->st);
	snprintf(rel, sizeof(rel), "state/roots/%08" PRIx32, eid);
	assert_int_equal(unlink(t_path(fx, rel)), 0);
	make_legacy(t_path(fx, "state"), eid, root);
	assert_int_equal(un_state_open(t_path(fx, "state"), &fx->st), 0);
	assert_int_equal(root_link(fx, eid), root); /* linked by the open */
	t_export(fx, "l1", NULL, NULL);
	assert_int_equal(t_id(fx, ""), root);
	assert_int_equal(t_id(fx, "f"), f);
	low[0] = t_path(fx, "l1");
	assert_int_equal(un_export_open(fx->st, &cfg, &ex2, err, sizeof(err)), 0);
	assert_true(root_link(fx, un_export_id(ex2)) > f);
	un_export_close(ex2);
}

/* A link that names no root (a state dir restored in parts) is replaced
 * by a new root's (roots.c rule 2). */
static void test_roots_bad_link(void **state)
{
	struct fx *fx = *state;
	char rel[64], target[32];
	uint32_t eid;
	un_id root, f, root2, root3;

	t_file(fx, "l1/f", "1");
	t_export(fx, "l1", NULL, NULL);
	eid = un_export_id(fx->ex);
	root = t_id(fx, "");
	f = t_id(fx, "f");
	snprintf(rel, sizeof(rel), "state/roots/%08" PRIx32, eid);
	snprintf(target, sizeof(target), "%" PRIx64, f);
	state_reopen(fx);
	assert_int_equal(unlink(t_path(fx, rel)), 0);
	assert_int_equal(symlink(target, t_path(fx, rel)), 0);
	t_export(fx, "l1", NULL, NULL);
	root2 = t_id(fx, "");
	assert_true(root2 != root && root2 != f);
	assert_int_equal(root_link(fx, eid), root2);

	state_reopen(fx);
	assert_int_equal(unlink(t_path(fx, rel)), 0);
	assert_int_equal(symlink("not an id", t_path(fx, rel)), 0);
	t_export(fx, "l1", NULL, NULL);
	root3 = t_id(fx, "");
	assert_true(root3 > root2);
	assert_int_equal(root_link(fx, eid), root3);
}

/* The table's commits keep it whole across an OS crash (state.c, design
 * notes): each fdatasyncs its pages before its meta page points at them. */
static void test_table_commits_ordered(void **state)
{
	struct fx *fx = *state;
	unsigned flags;

	assert_int_equal(mdb_env_get_flags(fx->st->env, &flags), 0);
	assert_true(flags & MDB_NOMETASYNC);
	assert_false(flags & (MDB_NOSYNC | MDB_WRITEMAP | MDB_MAPASYNC));
}

/* What un_state_on_error was told last. */
static int told_err;
static char told_what[16], told_dir[256];

static void tell(int err, const char *what, const char *dir)
{
	told_err = err;
	snprintf(told_what, sizeof(told_what), "%s", what);
	snprintf(told_dir, sizeof(told_dir), "%s", dir);
}

/* A table write that fails is told to the server's function (which logs
 * it) as well as answered; one that works tells nothing. */
static void test_table_errors_told(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l1/a", "1");
	t_file(fx, "l1/b", "2");
	t_export(fx, "l1", NULL, NULL);
	un_state_on_error(fx->st, tell);
	told_err = 0;
	t_id(fx, "a");
	assert_int_equal(told_err, 0);
	/* b's lookup: its read, the writer's begin, then the commit fails */
	un_sys_inject_reset();
	un_sys_inject(UN_SYS_MDB, 3, EIO);
	assert_int_equal(t_lookup_rc(fx, "b"), -EIO);
	un_sys_inject_reset();
	assert_int_equal(told_err, -EIO);
	assert_string_equal(told_what, "write");
	assert_string_equal(told_dir, t_path(fx, "state"));
	un_state_on_error(fx->st, NULL);
}

static void test_table_faults(void **state)
{
	static const enum un_sys_op ops[] = {UN_SYS_MDB, UN_SYS_ALLOC};
	struct fx *fx = *state;
	un_id seen[64];
	size_t nseen = 0;
	char name[32];
	int fds;

	t_mkdir(fx, "l1");
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "l1/f%d", i);
		t_file(fx, name, "x");
	}
	t_export(fx, "l1", NULL, NULL);
	fds = t_nfds();
	for (size_t k = 0; k < 2; k++) {
		for (unsigned long n = 1; n <= 3; n++) {
			int i = (int)(k * 3 + n - 1), rc;

			snprintf(name, sizeof(name), "f%d", i);
			un_sys_inject_reset();
			un_sys_inject(ops[k], n, EIO);
			rc = t_lookup_rc(fx, name);
			assert_true(rc == -EIO || rc == -ENOMEM);
			assert_int_equal(t_nfds(), fds);
			un_sys_inject_reset();
			seen[nseen++] = t_id(fx, name); /* works afterwards */
		}
	}
	for (size_t i = 1; i < nseen; i++)
		for (size_t j = 0; j < i; j++)
			assert_int_not_equal(seen[i], seen[j]);
	/* The sync seam too. */
	un_sys_inject(UN_SYS_SYNC, 1, EIO);
	assert_int_equal(un_state_sync(fx->st), -EIO);
	un_sys_inject_reset();
}

static void test_state_open_faults(void **state)
{
	static const enum un_sys_op ops[] = {UN_SYS_MKDIR, UN_SYS_OPEN,	  UN_SYS_WRITE,
					     UN_SYS_SYNC,  UN_SYS_RENAME, UN_SYS_ALLOC};
	struct fx *fx = *state;
	struct un_state *st;
	char dir[64], tmp[80];
	int fds = t_nfds(), seq = 0;

	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
		unsigned long calls;

		snprintf(dir, sizeof(dir), "s%d", seq++);
		un_sys_inject_reset();
		assert_int_equal(un_state_open(t_path(fx, dir), &st), 0);
		calls = un_sys_calls(ops[k]);
		un_state_close(st);
		assert_true(calls > 0);
		for (unsigned long n = 1; n <= calls; n++) {
			snprintf(dir, sizeof(dir), "s%d", seq++);
			un_sys_inject_reset();
			un_sys_inject(ops[k], n, EIO);
			assert_int_equal(un_state_open(t_path(fx, dir), &st),
					 ops[k] == UN_SYS_ALLOC ? -ENOMEM : -EIO);
			assert_int_equal(t_nfds(), fds);
			snprintf(tmp, sizeof(tmp), "%s/secret.tmp", dir);
			assert_int_equal(access(t_path(fx, tmp), F_OK), -1);
		}
	}
	un_sys_inject_reset();
	/* An existing secret is read, not rewritten. */
	assert_int_equal(un_state_open(t_path(fx, "state2"), &st), 0);
	un_state_close(st);
	un_sys_inject_reset();
	assert_int_equal(un_state_open(t_path(fx, "state2"), &st), 0);
	assert_int_equal(un_sys_calls(UN_SYS_WRITE), 0);
	assert_int_equal(un_sys_calls(UN_SYS_READ), 1);
	un_state_close(st);
}

struct racer {
	struct fx *fx;
	un_id ids[32];
	int rc;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	char name[32];

	for (int i = 0; i < 32 && !r->rc; i++) {
		struct un_obj *o;

		snprintf(name, sizeof(name), "d/f%d", i);
		r->rc = t_walk(r->fx, name, &o);
		if (!r->rc) {
			r->ids[i] = un_obj_id(o);
			un_obj_put(o);
		}
	}
	return NULL;
}

static void test_concurrent_first_lookups(void **state)
{
	struct fx *fx = *state;
	struct racer r[4];
	pthread_t th[4];
	char name[32];

	for (int i = 0; i < 32; i++) {
		snprintf(name, sizeof(name), "l1/d/f%d", i);
		t_file(fx, name, "x");
	}
	t_export(fx, "l1", NULL, NULL);
	for (int t = 0; t < 4; t++) {
		r[t] = (struct racer){.fx = fx};
		assert_int_equal(pthread_create(&th[t], NULL, race, &r[t]), 0);
	}
	for (int t = 0; t < 4; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < 4; t++) {
		assert_int_equal(r[t].rc, 0);
		assert_memory_equal(r[t].ids, r[0].ids, sizeof(r[0].ids));
	}
}

/* A job that writes and then fails: its write must not survive. */
static int junk_then_fail(struct un_state *st, MDB_txn *txn, struct un_node_job *j)
{
	MDB_val k = {4, "junk"}, v = {1, "x"};

	(void)j;
	assert_int_equal(mdb_put(txn, st->db_meta, &k, &v, 0), 0);
	return -EIO;
}

static struct un_node_obs file_obs(struct fx *fx, const char *name, struct un_devino *di)
{
	return (struct un_node_obs){.root = fx->ex->root_id,
				    .parent = fx->ex->root_id,
				    .name = name,
				    .namelen = strlen(name),
				    .type = S_IFREG,
				    .inst = di,
				    .ninst = 1};
}

/* Jobs queued together run in one batch (node.c, the writer), each in a
 * transaction of its own: one failing undoes its own writes only, and the
 * others commit; what they assigned is what a later lookup reads. */
static void test_writer_batch(void **state)
{
	struct fx *fx = *state;
	struct un_devino da = {1, 101}, db = {1, 102}, dc = {1, 103};
	struct un_node_obs a, b, c;
	struct un_node_job ja, jb, jc;
	MDB_val k = {4, "junk"}, v;
	MDB_txn *txn;
	un_id id;

	t_mkdir(fx, "l1");
	t_export(fx, "l1", NULL, NULL);
	a = file_obs(fx, "a", &da);
	b = file_obs(fx, "b", &db);
	c = file_obs(fx, "c", &dc);
	un_node_assign_queue(fx->st, &a, &ja);
	un_node_assign_queue(fx->st, &b, &jb);
	jb.fn = junk_then_fail; /* nothing runs until a wait */
	un_node_assign_queue(fx->st, &c, &jc);
	assert_int_equal(un_node_job_wait(fx->st, &ja), 0); /* runs all three */
	assert_int_equal(jb.state, jc.state);
	assert_int_equal(un_node_job_wait(fx->st, &jb), -EIO);
	assert_int_equal(un_node_job_wait(fx->st, &jc), 0);
	assert_true(ja.id != UN_ID_NONE && jc.id != UN_ID_NONE && ja.id != jc.id);
	assert_int_equal(un_node_get_or_create(fx->st, &a, &id), 0);
	assert_int_equal(id, ja.id);
	assert_int_equal(un_node_get_or_create(fx->st, &c, &id), 0);
	assert_int_equal(id, jc.id);
	assert_int_equal(mdb_txn_begin(fx->st->env, NULL, MDB_RDONLY, &txn), 0);
	assert_int_equal(mdb_get(txn, fx->st->db_meta, &k, &v), MDB_NOTFOUND);
	mdb_txn_abort(txn);
}

/* A reset of the upper (reset.c) forgets the nodes of the objects the
 * upper made, below and in a directory of its own, so that their handles
 * are stale even when the same name and inode number come back; the nodes
 * of lower objects stay. */
static void test_forget_upper(void **state)
{
	struct fx *fx = *state;
	un_id own, od, in, low, d, id;
	struct un_devino di;
	struct un_node_obs obs;
	struct un_obj *o;
	struct stat st;
	size_t n;

	t_mkdir(fx, "w");
	t_file(fx, "l1/low", "1");
	t_file(fx, "l1/d/g", "1");
	t_file(fx, "u/own", "x");
	t_file(fx, "u/od/in", "x");
	t_mkdir(fx, "u/d"); /* a merged dir */
	t_export(fx, "l1", "u", "w");
	own = t_id(fx, "own");
	od = t_id(fx, "od");
	in = t_id(fx, "od/in");
	low = t_id(fx, "low");
	d = t_id(fx, "d"); /* first seen with its upper part */
	assert_int_equal(un_export_forget_upper(fx->ex, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(un_resolve(fx->ex, own, &o), -ESTALE);
	assert_int_equal(un_resolve(fx->ex, od, &o), -ESTALE);
	assert_int_equal(un_resolve(fx->ex, in, &o), -ESTALE);
	assert_int_equal(un_resolve(fx->ex, low, &o), 0);
	un_obj_put(o);
	assert_int_equal(t_id(fx, "low"), low);
	t_rm(fx, "u/d"); /* the upper emptied: the lower part alone */
	assert_int_equal(un_resolve(fx->ex, d, &o), 0);
	un_obj_put(o);
	/* the same name over the same inode number: a new node */
	assert_int_equal(stat(t_path(fx, "u/own"), &st), 0);
	di = (struct un_devino){.dev = st.st_dev, .ino = st.st_ino};
	obs = file_obs(fx, "own", &di);
	assert_int_equal(un_node_get_or_create(fx->st, &obs, &id), 0);
	assert_int_not_equal(id, own);
}

/* Threads that create and remove names side by side through the queue:
 * every id handed out is committed (a lookup reads it back), and none is
 * handed out twice. */
struct churn {
	struct fx *fx;
	int t;
	un_id ids[64];
	int rc;
};

static void *churn_run(void *arg)
{
	struct churn *c = arg;
	struct un_devino di = {2, 0};
	char name[32];
	struct un_node_obs o;
	struct un_node_job j;
	uint64_t seq;
	un_id id;

	for (int i = 0; i < 64 && !c->rc; i++) {
		snprintf(name, sizeof(name), "t%d-%d", c->t, i);
		di.ino = 1000u * (unsigned)c->t + (unsigned)i + 1;
		o = file_obs(c->fx, name, &di);
		un_node_assign_queue(c->fx->st, &o, &j);
		c->rc = un_node_job_wait(c->fx->st, &j);
		c->ids[i] = j.id;
		if (!c->rc)
			c->rc = un_node_get_or_create(c->fx->st, &o, &id);
		if (!c->rc && id != j.id)
			c->rc = -EINVAL;
		if (!c->rc && i % 2)
			c->rc = un_node_remove(c->fx->st, c->fx->ex->root_id,
					       &(struct un_node_name){c->fx->ex->root_id,
								      name, strlen(name)},
					       &seq);
	}
	return NULL;
}

static void test_writer_threads(void **state)
{
	struct fx *fx = *state;
	struct churn c[4];
	pthread_t th[4];

	t_mkdir(fx, "l1");
	t_export(fx, "l1", NULL, NULL);
	for (int t = 0; t < 4; t++) {
		c[t] = (struct churn){.fx = fx, .t = t};
		assert_int_equal(pthread_create(&th[t], NULL, churn_run, &c[t]), 0);
	}
	for (int t = 0; t < 4; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < 4; t++) {
		assert_int_equal(c[t].rc, 0);
		for (int u = 0; u < 4; u++)
			for (int i = 0; i < 64; i++)
				for (int k = 0; k < 64; k++)
					assert_true((t == u && i == k) ||
						    c[t].ids[i] != c[u].ids[k]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_ids_stable_across_reopen),
	    T_TEST(test_stale_after_remove),
	    T_TEST(test_stale_after_replace),
	    T_TEST(test_dir_keeps_id_when_upper_appears),
	    T_TEST(test_root_pinned),
	    T_TEST(test_unique_across_exports),
	    T_TEST(test_roots_linked),
	    T_TEST(test_roots_bad_link),
	    T_TEST(test_hard_links),
	    T_TEST(test_hard_links_two_exports),
	    T_TEST(test_state_dir),
	    T_TEST(test_table_commits_ordered),
	    T_TEST(test_table_errors_told),
	    T_TEST(test_table_faults),
	    T_TEST(test_state_open_faults),
	    T_TEST(test_writer_batch),
	    T_TEST(test_writer_threads),
	    T_TEST(test_forget_upper),
	    T_TEST(test_concurrent_first_lookups),
	};

	return cmocka_run_group_tests_name("node", tests, NULL, NULL);
}
