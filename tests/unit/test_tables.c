/* SPDX-License-Identifier: Apache-2.0 */
/* test_tables.c - node tables opened from a main state (state.c rule 5,
 * un_state_open_table): a writable union on each of two tables over the
 * same layers keeps its nodes in its own table, so its handles resolve
 * there after that table alone is closed and opened again, and a counter
 * id of one table is unknown to the other; the tables share the main
 * state's keys (a handle made through one decodes through the other) and,
 * with a key file, a lower object gets one id in every table; closing a
 * table leaves the main state and the other table serving; every table's
 * listings share one inotify instance, and one syncer thread flushes them
 * all. */
#include "test_fs.h"
#include "test_un.h"

#define NEW_FILES 24 /* table A's counter runs this far ahead of B's */

/* The layers: l2 the base, l1 over it, "a" merged from both. */
static void layers(struct fx *fx)
{
	t_file(fx, "l2/a/b/f", "f");
	t_file(fx, "l2/top", "top");
	t_file(fx, "l1/a/g", "g");
}

static void key_write(struct fx *fx, const char *rel)
{
	unsigned char key[32];
	int fd;

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (unsigned char)(i * 5 + 3);
	fd = open(t_path(fx, rel), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, key, sizeof(key)), (ssize_t)sizeof(key));
	close(fd);
}

/* The export "/" on ST over l1:l2, writable into UPPER and WORK when not
 * NULL, asking for a table in WORK when OWN. */
static struct un_export *open_union_own(struct fx *fx, struct un_state *st,
					const char *upper, const char *work, bool own)
{
	char l1[PATH_MAX], l2[PATH_MAX], up[PATH_MAX], wk[PATH_MAX], err[256];
	const char *lv[] = {l1, l2};
	struct un_export_cfg cfg = {
	    .path = "/", .lowerdirs = lv, .nlower = 2, .own_table = own};
	struct un_export *ex;

	snprintf(l1, sizeof(l1), "%s", t_path(fx, "l1"));
	snprintf(l2, sizeof(l2), "%s", t_path(fx, "l2"));
	if (upper) {
		snprintf(up, sizeof(up), "%s", t_path(fx, upper));
		snprintf(wk, sizeof(wk), "%s", t_path(fx, work));
		t_mkdir(fx, upper);
		t_mkdir(fx, work);
		cfg.upperdir = up;
		cfg.workdir = wk;
	}
	if (un_export_open(st, &cfg, &ex, err, sizeof(err)))
		fail_msg("export: %s", err);
	return ex;
}

static struct un_export *open_union(struct fx *fx, struct un_state *st, const char *upper,
				    const char *work)
{
	return open_union_own(fx, st, upper, work, false);
}

static un_id walk_id(struct un_export *ex, const char *path)
{
	char p[PATH_MAX], *save = NULL;
	struct un_obj *cur, *next;
	un_id id;

	assert_int_equal(un_root(ex, &cur), 0);
	snprintf(p, sizeof(p), "%s", path);
	for (char *t = strtok_r(p, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
		assert_int_equal(un_lookup(ex, cur, t, &next), 0);
		un_obj_put(cur);
		cur = next;
	}
	id = un_obj_id(cur);
	un_obj_put(cur);
	return id;
}

/* The errno of looking NAME up in EX's root (0: found). */
static int lookup_rc(struct un_export *ex, const char *name)
{
	struct un_obj *root, *o;
	int rc;

	assert_int_equal(un_root(ex, &root), 0);
	rc = un_lookup(ex, root, name, &o);
	if (!rc)
		un_obj_put(o);
	un_obj_put(root);
	return rc;
}

/* Creates NAME in EX's root; its node id. */
static un_id make_file(struct un_export *ex, const char *name)
{
	struct un_obj *root, *o;
	un_id id;

	assert_int_equal(un_root(ex, &root), 0);
	assert_int_equal(un_create(SYNC_CX, ex, root, name, 0644, true, NULL, &o), 0);
	id = un_obj_id(o);
	un_obj_put(o);
	un_obj_put(root);
	return id;
}

/* The node a handle of EX for ID names, decoded through ST and resolved in
 * EX: 0 with *GOT, or un_resolve's error. */
static int handle_resolve(struct un_state *st, struct un_export *ex, const uint8_t *fh,
			  size_t len, un_id *got)
{
	struct un_obj *o;
	uint32_t eid;
	un_id id;
	int rc = un_handle_decode(st, fh, len, &eid, &id);

	if (rc)
		return rc;
	assert_int_equal(eid, un_export_id(ex));
	rc = un_resolve(ex, id, &o);
	if (!rc) {
		*got = un_obj_id(o);
		un_obj_put(o);
	}
	return rc;
}

static const char *const paths[] = {"", "a", "a/b", "a/b/f", "a/g", "top"};
#define NPATHS (sizeof(paths) / sizeof(paths[0]))

struct side {
	struct un_state *st;
	struct un_export *ex;
	un_id ids[NPATHS], made;
	uint8_t fh[NPATHS + 1][UN_FH_MAX];
	size_t len[NPATHS + 1];
};

static void side_open(struct fx *fx, struct un_state *main, struct side *s,
		      const char *dir, const char *upper, const char *work)
{
	assert_int_equal(un_state_open_table(main, t_path(fx, dir), &s->st), 0);
	s->ex = open_union(fx, s->st, upper, work);
}

static void side_close(struct side *s)
{
	un_export_close(s->ex);
	un_state_close(s->st);
	s->ex = NULL;
	s->st = NULL;
}

/* Whether table ST holds a record of node ID. */
static bool table_knows(struct un_state *st, un_id id)
{
	struct un_node_hop *hops = NULL;
	size_t n = 0;
	int rc = un_node_path(st, id, &hops, &n);

	free(hops);
	assert_true(rc == 0 || rc == -ESTALE);
	return rc == 0;
}

/* Notes S's ids of the paths and their handles, and of its file MADE. */
static void side_note(struct side *s)
{
	for (size_t i = 0; i < NPATHS; i++) {
		s->ids[i] = walk_id(s->ex, paths[i]);
		s->len[i] = un_handle_encode(s->ex, s->ids[i], s->fh[i]);
	}
	s->len[NPATHS] = un_handle_encode(s->ex, s->made, s->fh[NPATHS]);
}

/* Every handle S noted resolves through TABLE to its id in S's export. */
static void side_check(struct side *s, struct un_state *table)
{
	un_id got;

	for (size_t i = 0; i <= NPATHS; i++) {
		assert_int_equal(handle_resolve(table, s->ex, s->fh[i], s->len[i], &got),
				 0);
		assert_int_equal(got, i < NPATHS ? s->ids[i] : s->made);
	}
}

static void run_tables(struct fx *fx, const char *key)
{
	struct side a = {0}, b = {0};
	struct un_state *main;
	struct un_export *mx;
	struct un_obj *o;
	char name[32];
	un_id got, mf;

	layers(fx);
	if (key)
		key_write(fx, key);
	assert_int_equal(
	    un_state_open_keyed(t_path(fx, "main"), key ? t_path(fx, key) : NULL, &main),
	    0);
	mx = open_union(fx, main, NULL, NULL);
	side_open(fx, main, &a, "ta", "ua", "wa");
	side_open(fx, main, &b, "tb", "ub", "wb");

	/* A's counter runs ahead of B's and of the main table's. */
	for (int i = 0; i < NEW_FILES; i++) {
		snprintf(name, sizeof(name), "n%02d", i);
		a.made = make_file(a.ex, name);
	}
	b.made = make_file(b.ex, "onlyb");
	side_note(&a);
	side_note(&b);
	assert_false(un_id_is_lower(a.made));

	/* The tables share the keys: a handle of A decodes through B. */
	assert_int_equal(
	    un_handle_decode(b.st, a.fh[NPATHS], a.len[NPATHS], &(uint32_t){0}, &got), 0);
	assert_int_equal(got, a.made);
	/* A's counter id is no node of B's table, nor of the main one. */
	assert_true(table_knows(a.st, a.made));
	assert_false(table_knows(b.st, a.made));
	assert_false(table_knows(main, a.made));
	assert_int_equal(un_resolve(b.ex, a.made, &o), -ESTALE);
	assert_int_equal(un_resolve(mx, a.made, &o), -ESTALE);
	assert_int_equal(lookup_rc(b.ex, "n00"), -ENOENT);
	assert_int_equal(lookup_rc(a.ex, "onlyb"), -ENOENT);
	mf = walk_id(mx, "a/b/f");

	/* With a key file a lower object has one id in every table. */
	for (size_t i = 1; key && i < NPATHS; i++) {
		assert_true(un_id_is_lower(a.ids[i]));
		assert_int_equal(a.ids[i], b.ids[i]);
		assert_int_equal(a.ids[i], walk_id(mx, paths[i]));
	}

	/* Table A closed and opened again alone: its handles resolve. */
	side_close(&a);
	side_check(&b, b.st);
	assert_int_equal(walk_id(mx, "a/b/f"), mf);
	got = make_file(b.ex, "afterb");
	assert_int_equal(walk_id(b.ex, "afterb"), got);
	side_open(fx, main, &a, "ta", "ua", "wa");
	side_check(&a, a.st);
	side_check(&a, main); /* decoded with the main state's keys */
	assert_int_equal(walk_id(a.ex, "n00") + NEW_FILES - 1, a.made);
	assert_int_equal(lookup_rc(a.ex, "afterb"), -ENOENT);

	/* Each table keeps its own nodes and roots beside it. */
	assert_int_equal(access(t_path(fx, "ta/data.mdb"), F_OK), 0);
	assert_int_equal(access(t_path(fx, "tb/roots"), F_OK), 0);
	assert_int_not_equal(access(t_path(fx, "ta/secret"), F_OK), 0);

	side_close(&a);
	side_close(&b);
	un_export_close(mx);
	un_state_close(main);
}

static void test_tables_own_nodes(void **state)
{
	run_tables(*state, NULL);
}

static void test_tables_keyed(void **state)
{
	run_tables(*state, "key");
}

/* The made names of test_union_table: two files and a dir with a file. */
static const char *const made[] = {"m1", "m2", "d", "d/f"};
#define NMADE (sizeof(made) / sizeof(made[0]))

/* Makes MADE in EX; their ids and handles into IDS and FH/LEN. */
static void made_make(struct un_export *ex, un_id ids[NMADE], uint8_t fh[][UN_FH_MAX],
		      size_t len[])
{
	struct un_obj *root, *d, *o;

	assert_int_equal(un_root(ex, &root), 0);
	ids[0] = make_file(ex, made[0]);
	ids[1] = make_file(ex, made[1]);
	assert_int_equal(un_mkdir(SYNC_CX, ex, root, made[2], 0755, &d), 0);
	ids[2] = un_obj_id(d);
	assert_int_equal(un_create(SYNC_CX, ex, d, "f", 0644, true, NULL, &o), 0);
	ids[3] = un_obj_id(o);
	un_obj_put(o);
	un_obj_put(d);
	un_obj_put(root);
	for (size_t i = 0; i < NMADE; i++)
		len[i] = un_handle_encode(ex, ids[i], fh[i]);
}

/* Every handle of MADE resolves in EX to its id, as does every name. */
static void made_check(struct un_state *main, struct un_export *ex,
		       const un_id ids[NMADE], uint8_t fh[][UN_FH_MAX],
		       const size_t len[])
{
	un_id got;

	for (size_t i = 0; i < NMADE; i++) {
		assert_int_equal(handle_resolve(main, ex, fh[i], len[i], &got), 0);
		assert_int_equal(got, ids[i]);
		assert_int_equal(walk_id(ex, made[i]), ids[i]);
	}
}

/* A union given own_table keeps its nodes in its work dir (workdir.c rule
 * 4): its handles resolve after it is closed and opened again, its table
 * is no other's, one whose root the main table holds stays there, and a
 * table made anew (a reset) hands out none of the old one's ids. */
static void test_union_table(void **state)
{
	struct fx *fx = *state;
	uint8_t fh[NMADE][UN_FH_MAX], fh2[NMADE][UN_FH_MAX];
	size_t len[NMADE], len2[NMADE];
	un_id ids[NMADE], ids2[NMADE];
	struct un_state *main;
	struct un_export *ex;
	struct un_obj *o;

	layers(fx);
	key_write(fx, "key");
	assert_int_equal(
	    un_state_open_keyed(t_path(fx, "main"), t_path(fx, "key"), &main), 0);
	ex = open_union_own(fx, main, "u", "w", true);
	made_make(ex, ids, fh, len);
	assert_int_equal(access(t_path(fx, "w/" UN_WORK_STATE_NAME "/data.mdb"), F_OK),
			 0);
	assert_false(table_knows(main, ids[0]));
	un_export_close(ex);

	/* Opened again, without asking: the work dir's table is used. */
	ex = open_union_own(fx, main, "u", "w", false);
	made_check(main, ex, ids, fh, len);
	un_export_close(ex);

	/* Served from the main table first: it stays there. */
	ex = open_union_own(fx, main, "u2", "w2", false);
	made_make(ex, ids2, fh2, len2);
	un_export_close(ex);
	ex = open_union_own(fx, main, "u2", "w2", true);
	assert_int_not_equal(access(t_path(fx, "w2/" UN_WORK_STATE_NAME), F_OK), 0);
	made_check(main, ex, ids2, fh2, len2);
	un_export_close(ex);

	/* A reset: the upper and the table go; the old ids name nothing in
	 * the new table, also once its names are made again. */
	t_rm_rf(t_path(fx, "u"));
	t_rm_rf(t_path(fx, "w"));
	ex = open_union_own(fx, main, "u", "w", true);
	made_make(ex, ids2, fh2, len2);
	for (size_t i = 0; i < NMADE; i++) {
		assert_int_equal(un_resolve(ex, ids[i], &o), -ESTALE);
		assert_int_not_equal(ids2[i], ids[i]);
	}
	un_export_close(ex);
	un_state_close(main);
}

/* The inotify instances this process holds. */
static unsigned inotify_instances(void)
{
	char path[64], link[64];
	unsigned n = 0;
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");
	ssize_t len;

	assert_non_null(d);
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len > 0) {
			link[len] = '\0';
			n += strcmp(link, "anon_inode:inotify") == 0;
		}
	}
	closedir(d);
	return n;
}

/* Entry NAME of the listing of EX's dir "a": its attributes, through the
 * listing (which remembers them, readdir.c invariant 8). */
static struct un_attr listed_attr(struct un_export *ex, const char *name)
{
	struct un_listing *l = NULL;
	struct un_obj *root, *a;
	struct un_attr at;
	un_id id, fileid;
	size_t i;

	assert_int_equal(un_root(ex, &root), 0);
	assert_int_equal(un_lookup(ex, root, "a", &a), 0);
	assert_int_equal(un_listing_get(ex, a, &l), 0);
	for (i = 0; i < un_listing_count(l); i++)
		if (!strcmp(un_listing_at(l, i)->name, name))
			break;
	assert_true(i < un_listing_count(l));
	assert_int_equal(un_listing_nodes(ex, a, l, i, 1, &id, &fileid), 0);
	assert_int_equal(un_listing_attr(ex, a, l, i, fileid, &at), 0);
	un_listing_put(l);
	un_obj_put(a);
	un_obj_put(root);
	return at;
}

#define NOWN 3

/* The listings of every table share one inotify instance (readdir.c
 * invariant 10): unions on tables of their own open no instance each, and
 * a change in a layer dir they all watch reaches the listings of each. */
static void test_tables_one_inotify(void **state)
{
	struct fx *fx = *state;
	struct un_export *ex[NOWN];
	struct un_state *main;
	unsigned before = inotify_instances();
	char up[16], wk[16];
	FILE *f;

	layers(fx);
	key_write(fx, "key");
	assert_int_equal(
	    un_state_open_keyed(t_path(fx, "main"), t_path(fx, "key"), &main), 0);
	for (int k = 0; k < NOWN; k++) {
		snprintf(up, sizeof(up), "u%d", k);
		snprintf(wk, sizeof(wk), "w%d", k);
		ex[k] = open_union_own(fx, main, up, wk, true);
		assert_int_equal(listed_attr(ex[k], "g").size, 1);
	}
	assert_int_equal(inotify_instances(), before + 1);

	f = fopen(t_path(fx, "l1/a/g"), "a");
	assert_non_null(f);
	fputs("longer", f);
	fclose(f);
	for (int k = 0; k < NOWN; k++)
		assert_int_equal(listed_attr(ex[k], "g").size, 7);
	for (int k = 0; k < NOWN; k++)
		un_export_close(ex[k]);
	un_state_close(main);
	assert_int_equal(inotify_instances(), before);
}

/* A line of /proc/self/status ("Threads"): its number. */
static long self_status(const char *key)
{
	char line[256];
	size_t n = strlen(key);
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			v = atol(line + n + 1);
	fclose(f);
	return v;
}

static uint64_t flushes(struct un_state *st)
{
	struct un_stats s;

	assert_int_equal(un_state_stats(st, &s), 0);
	return s.flushes;
}

/* One syncer thread flushes every table of a server (sync.c rule 5):
 * tables opened from the main state start no thread, an idle table costs
 * no flush a period, and a change of an async union's is flushed within
 * one by the syncer alone. */
static void test_tables_one_syncer(void **state)
{
	struct fx *fx = *state;
	struct un_export *ex[NOWN];
	struct un_state *main;
	struct un_obj *root, *o;
	long threads;
	uint64_t f0;
	char up[16], wk[16];

	layers(fx);
	key_write(fx, "key");
	assert_int_equal(
	    un_state_open_keyed(t_path(fx, "main"), t_path(fx, "key"), &main), 0);
	threads = self_status("Threads");
	for (int k = 0; k < NOWN; k++) {
		snprintf(up, sizeof(up), "u%d", k);
		snprintf(wk, sizeof(wk), "w%d", k);
		ex[k] = open_union_own(fx, main, up, wk, true);
		make_file(ex[k], "f");
	}
	assert_int_equal(self_status("Threads"), threads);

	/* Every table's commits are flushed a period after them: idle now. */
	usleep(2 * UN_SYNC_PERIOD_S * 1000000 + 300000);
	f0 = flushes(main);
	usleep(2 * UN_SYNC_PERIOD_S * 1000000 + 300000);
	assert_int_equal(flushes(main), f0);

	/* An async change waits for no flush: the syncer makes it durable. */
	assert_int_equal(un_root(ex[1], &root), 0);
	assert_int_equal(un_create(ASYNC_CX, ex[1], root, "g", 0644, true, NULL, &o), 0);
	un_obj_put(o);
	un_obj_put(root);
	usleep(2 * UN_SYNC_PERIOD_S * 1000000 + 300000);
	assert_true(flushes(main) > f0);
	for (int k = 0; k < NOWN; k++)
		un_export_close(ex[k]);
	un_state_close(main);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_tables_own_nodes),  T_TEST(test_tables_keyed),
	    T_TEST(test_union_table),	    T_TEST(test_tables_one_inotify),
	    T_TEST(test_tables_one_syncer),
	};

	return cmocka_run_group_tests_name("tables", tests, NULL, NULL);
}
