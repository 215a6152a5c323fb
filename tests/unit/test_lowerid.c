/* SPDX-License-Identifier: Apache-2.0 */
/* test_lowerid.c - lower ids (union/lowerid.c): two states with their own
 * dirs and one key file, each over its own copy of the same layers, give
 * every lower object the same node id, fileid and directory verifier, and
 * each resolves the other's ids before it looked anything up; a layer
 * added on top keeps them; an id whose path is hidden is stale; without a
 * key file ids come from the counter, unless the export asks for lower
 * ids, whose LOOKUPs then answer before the table commits them and whose
 * handles outlive a crash before that commit; a key file others can read, or of
 * another size, is refused; colliding tags give counter ids, and say so;
 * a lower twice in a stack is refused; the names of a lower inode with
 * several links in a writable union have ids and a fileid of their own
 * paths and leader on every state. */
#include "test_un.h"

#include <sys/wait.h>

static const char *const paths[] = {"",	      "a",     "a/b", "a/b/f", "a/g",
				    "a/link", "a/sym", "top", "only1"};
#define NPATHS (sizeof(paths) / sizeof(paths[0]))

/* The layers: l2 the base, l1 over it; a merged at two levels. */
static void layers(struct fx *fx, const char *base)
{
	char rel[128];

#define AT(p) (snprintf(rel, sizeof(rel), "%s/%s", base, p), rel)
	t_file(fx, AT("l2/a/b/f"), "f");
	t_file(fx, AT("l2/top"), "top");
	t_file(fx, AT("l1/a/g"), "g");
	t_file(fx, AT("l1/only1"), "1");
	t_mkdir(fx, AT("l1/a/b"));
	t_symlink(fx, "b/f", AT("l2/a/sym"));
	assert_int_equal(link(t_path(fx, AT("l2/a/b/f")), t_path(fx, AT("l2/a/link"))),
			 0);
#undef AT
}

/* A copy as another gateway's host holds it: other inodes and ctimes. */
static void copy_tree(struct fx *fx, const char *from, const char *to)
{
	char cmd[3 * PATH_MAX];

	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", t_path(fx, from), t_path(fx, to));
	assert_int_equal(system(cmd), 0);
}

static void key_write(struct fx *fx, const char *rel, size_t len, mode_t mode)
{
	unsigned char key[40];
	int fd;

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (unsigned char)(i * 7 + 1);
	fd = open(t_path(fx, rel), O_WRONLY | O_CREAT | O_TRUNC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, key, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

struct gw {
	struct un_state *st;
	struct un_export *ex;
};

/* The notices of the states open (un_state_on_notice), one a line. */
static char notes[4096];

static void note(const char *line)
{
	size_t n = strlen(notes);

	snprintf(notes + n, sizeof(notes) - n, "%s\n", line);
}

/* The server's own exports ask for lower ids without a key file
 * (un_export_cfg.lower_ids); client unions do not. */
static bool gw_lower_ids;

/* A gateway: state dir STATE (keyed with KEY, or NULL) serving the export
 * PATH over LOWERS, top-most first, relative to the base, and with RW the
 * upper STATE.up and work dir STATE.wk. */
static void gw_open_as(struct fx *fx, struct gw *g, const char *state, const char *key,
		       const char *path, const char *const *lowers, size_t n, bool rw)
{
	char lp[UN_LAYERS_MAX][PATH_MAX], up[PATH_MAX], wk[PATH_MAX], err[256];
	const char *lv[UN_LAYERS_MAX];
	struct un_export_cfg cfg = {
	    .path = path, .lowerdirs = lv, .nlower = n, .lower_ids = gw_lower_ids};
	char keypath[PATH_MAX];

	for (size_t i = 0; i < n; i++) {
		snprintf(lp[i], sizeof(lp[i]), "%s", t_path(fx, lowers[i]));
		lv[i] = lp[i];
	}
	if (key)
		snprintf(keypath, sizeof(keypath), "%s", t_path(fx, key));
	if (rw) {
		snprintf(up, sizeof(up), "%s.up", t_path(fx, state));
		snprintf(wk, sizeof(wk), "%s.wk", t_path(fx, state));
		assert_int_equal(mkdir(up, 0755) && errno != EEXIST, 0);
		assert_int_equal(mkdir(wk, 0755) && errno != EEXIST, 0);
		cfg.upperdir = up;
		cfg.workdir = wk;
	}
	assert_int_equal(
	    un_state_open_keyed(t_path(fx, state), key ? keypath : NULL, &g->st), 0);
	un_state_on_notice(g->st, note);
	if (un_export_open(g->st, &cfg, &g->ex, err, sizeof(err)))
		fail_msg("export: %s", err);
}

static void gw_open(struct fx *fx, struct gw *g, const char *state, const char *key,
		    const char *const *lowers, size_t n)
{
	gw_open_as(fx, g, state, key, "/", lowers, n, false);
}

static void gw_close(struct gw *g)
{
	un_export_close(g->ex);
	un_state_close(g->st);
}

static int gw_walk(struct gw *g, const char *path, struct un_obj **out)
{
	char p[PATH_MAX], *save = NULL;
	struct un_obj *cur, *next;
	int rc = un_root(g->ex, &cur);

	snprintf(p, sizeof(p), "%s", path);
	for (char *t = strtok_r(p, "/", &save); t && !rc;
	     t = strtok_r(NULL, "/", &save)) {
		rc = un_lookup(g->ex, cur, t, &next);
		un_obj_put(cur);
		cur = rc ? NULL : next;
	}
	if (!rc)
		*out = cur;
	return rc;
}

static un_id gw_id(struct gw *g, const char *path, un_id *fileid)
{
	struct un_obj *o;
	struct un_attr a;
	un_id id;

	assert_int_equal(gw_walk(g, path, &o), 0);
	id = un_obj_id(o);
	assert_int_equal(un_getattr(g->ex, o, &a), 0);
	if (fileid)
		*fileid = a.fileid;
	un_obj_put(o);
	return id;
}

static uint64_t gw_verf(struct gw *g, const char *dir)
{
	struct un_listing *l;
	struct un_obj *o;
	uint64_t v;

	assert_int_equal(gw_walk(g, dir, &o), 0);
	assert_int_equal(un_listing_get(g->ex, o, &l), 0);
	v = un_listing_verf(l);
	un_listing_put(l);
	un_obj_put(o);
	return v;
}

static void test_same_ids_across_states(void **state)
{
	static const char *const la[] = {"ga/l1", "ga/l2"}, *const lb[] = {"gb/l1",
									   "gb/l2"};
	struct fx *fx = *state;
	struct gw a, b;
	un_id ids[NPATHS], fids[NPATHS], fid;
	struct un_obj *o;
	struct un_attr at;

	layers(fx, "ga");
	copy_tree(fx, "ga", "gb");
	key_write(fx, "key", 32, 0600);
	gw_open(fx, &a, "sa", "key", la, 2);
	for (size_t i = 0; i < NPATHS; i++) {
		ids[i] = gw_id(&a, paths[i], &fids[i]);
		assert_true(un_id_is_lower(ids[i]) || strcmp(paths[i], "a/link") == 0);
	}
	assert_int_equal(ids[3], ids[5]); /* one node for a read-only inode's names */

	/* B never saw them: each id resolves, by the path its index gives. */
	gw_open(fx, &b, "sb", "key", lb, 2);
	for (size_t i = NPATHS; i-- > 0;) {
		assert_int_equal(un_resolve(b.ex, ids[i], &o), 0);
		assert_int_equal(un_obj_id(o), ids[i]);
		assert_int_equal(un_getattr(b.ex, o, &at), 0);
		assert_int_equal(at.fileid, fids[i]);
		un_obj_put(o);
	}
	for (size_t i = 0; i < NPATHS; i++) {
		assert_int_equal(gw_id(&b, paths[i], &fid), ids[i]);
		assert_int_equal(fid, fids[i]);
	}
	assert_int_equal(gw_verf(&a, "a"), gw_verf(&b, "a"));
	assert_int_equal(gw_verf(&a, ""), gw_verf(&b, ""));
	assert_int_equal(gw_verf(&a, "a/b"), gw_verf(&b, "a/b"));
	gw_close(&b);

	/* A layer added on top: the same ids, and a hidden path's id stale. */
	t_file(fx, "gb/l0/a/new", "n");
	t_chr0(fx, "gb/l0/top");
	{
		static const char *const l3[] = {"gb/l0", "gb/l1", "gb/l2"};

		gw_open(fx, &b, "sb2", "key", l3, 3);
	}
	assert_int_equal(un_resolve(b.ex, ids[7], &o), -ESTALE);
	for (size_t i = 0; i < NPATHS; i++) {
		if (i == 7)
			continue;
		assert_int_equal(un_resolve(b.ex, ids[i], &o), 0);
		assert_int_equal(un_obj_id(o), ids[i]);
		un_obj_put(o);
	}
	/* No layer of the export has that tag; an objnum no index has. */
	assert_int_equal(un_resolve(b.ex, ids[1] ^ (1ull << 50), &o), -ESTALE);
	assert_int_equal(un_resolve(b.ex, (ids[1] & ~((1ull << 39) - 1)) | 999999, &o),
			 -ESTALE);
	gw_close(&b);

	/* After a restart, from the table. */
	gw_close(&a);
	gw_open(fx, &a, "sa", "key", la, 2);
	for (size_t i = 0; i < NPATHS; i++)
		assert_int_equal(gw_id(&a, paths[i], NULL), ids[i]);
	gw_close(&a);
}

/* The fsid key: exports of one id_name share their export id whatever
 * their paths, so gateways that mount one image elsewhere (or a path
 * renamed) keep the handles. */
static void test_id_name(void **state)
{
	struct fx *fx = *state;
	const char *low[] = {NULL};
	struct un_export_cfg a = {.path = "/a",
				  .lowerdirs = low,
				  .nlower = 1,
				  .id_name = "img"},
			     b = a, c = a;
	struct un_export *ea, *eb, *ec;
	char err[256];

	t_file(fx, "l1/f", "1");
	low[0] = t_path(fx, "l1");
	b.path = "/b";
	c.id_name = NULL;
	assert_int_equal(un_export_open(fx->st, &a, &ea, err, sizeof(err)), 0);
	assert_int_equal(un_export_open(fx->st, &b, &eb, err, sizeof(err)), 0);
	assert_int_equal(un_export_open(fx->st, &c, &ec, err, sizeof(err)), 0);
	assert_int_equal(un_export_id(ea), un_export_id(eb));
	assert_int_not_equal(un_export_id(ea), un_export_id(ec));
	assert_int_equal(un_export_id(ec), un_export_id_of("/a"));
	un_export_close(ea);
	un_export_close(eb);
	un_export_close(ec);
}

static void test_no_key_file(void **state)
{
	static const char *const la[] = {"ga/l1", "ga/l2"};
	struct fx *fx = *state;
	struct un_state *st;
	struct gw a;

	layers(fx, "ga");
	gw_open(fx, &a, "sa", NULL, la, 2);
	for (size_t i = 0; i < NPATHS; i++)
		assert_false(un_id_is_lower(gw_id(&a, paths[i], NULL)));
	gw_close(&a);

	key_write(fx, "open", 32, 0640);
	assert_int_equal(un_state_open_keyed(t_path(fx, "s1"), t_path(fx, "open"), &st),
			 -EACCES);
	key_write(fx, "short", 31, 0600);
	assert_int_equal(un_state_open_keyed(t_path(fx, "s2"), t_path(fx, "short"), &st),
			 -EINVAL);
	assert_int_equal(un_state_open_keyed(t_path(fx, "s3"), t_path(fx, "none"), &st),
			 -ENOENT);
}

/* Tags narrowed to 0 bits collide: the higher layer's objects get counter
 * ids and the open says so, on each state that opens such a stack alike,
 * and the lower layer's ids still resolve on a state that never saw them
 * (lowerid.c rule 6). */
static void test_tag_collision(void **state)
{
	static const char *const la[] = {"ga/l1", "ga/l2"}, *const lb[] = {"gb/l1",
									   "gb/l2"};
	struct fx *fx = *state;
	struct gw a, b;
	un_id ids[NPATHS];
	struct un_obj *o;

	layers(fx, "ga");
	copy_tree(fx, "ga", "gb");
	key_write(fx, "key", 32, 0600);
	un_lower_test_tag_bits(0);
	notes[0] = '\0';
	gw_open(fx, &a, "sa", "key", la, 2);
	assert_non_null(strstr(notes, "/ga/l1 has the lower-id tag of lowerdir"));
	assert_non_null(strstr(notes, "/ga/l2 below it"));
	for (size_t i = 0; i < NPATHS; i++) {
		bool l1 = !strcmp(paths[i], "a/g") || !strcmp(paths[i], "only1");

		ids[i] = gw_id(&a, paths[i], NULL);
		assert_int_equal(un_id_is_lower(ids[i]), !l1);
	}
	notes[0] = '\0';
	gw_open(fx, &b, "sb", "key", lb, 2);
	assert_non_null(strstr(notes, "/gb/l1 has the lower-id tag of lowerdir"));
	for (size_t i = 0; i < NPATHS; i++) {
		if (!un_id_is_lower(ids[i]))
			continue;
		assert_int_equal(un_resolve(b.ex, ids[i], &o), 0);
		assert_int_equal(un_obj_id(o), ids[i]);
		un_obj_put(o);
	}
	for (size_t i = 0; i < NPATHS; i++)
		if (un_id_is_lower(ids[i]))
			assert_int_equal(gw_id(&b, paths[i], NULL), ids[i]);
		else
			assert_false(un_id_is_lower(gw_id(&b, paths[i], NULL)));
	gw_close(&b);
	gw_close(&a);
}

/* Two exports whose tags collide meet in the table: the second one's
 * objects get counter ids, said once (node.c, clash_note). */
static void test_exports_collide(void **state)
{
	static const char *const la[] = {"ga/l2"};
	struct fx *fx = *state;
	struct un_export_cfg cfg = {.path = "/y", .nlower = 1};
	const char *lv[1];
	struct un_export *y;
	struct gw a;
	char err[256];
	const char *clash;
	un_id x_top;

	layers(fx, "ga");
	key_write(fx, "key", 32, 0600);
	un_lower_test_tag_bits(0);
	gw_open(fx, &a, "sa", "key", la, 1);
	x_top = gw_id(&a, "top", NULL);
	assert_true(un_id_is_lower(x_top));
	assert_true(un_id_is_lower(gw_id(&a, "a/b/f", NULL)));
	lv[0] = t_path(fx, "ga/l2");
	cfg.lowerdirs = lv;
	assert_int_equal(un_export_open(a.st, &cfg, &y, err, sizeof(err)), 0);
	notes[0] = '\0';
	{
		struct gw gy = {a.st, y};

		assert_false(un_id_is_lower(gw_id(&gy, "top", NULL)));
		assert_false(un_id_is_lower(gw_id(&gy, "a/b/f", NULL)));
	}
	clash = strstr(notes, "the tags of two exports collide");
	assert_non_null(clash);
	assert_null(strstr(clash + 1, "the tags of two exports")); /* once */
	assert_int_equal(gw_id(&a, "top", NULL), x_top);
	un_export_close(y);
	gw_close(&a);
}

/* A directory given twice as a lower of one stack is refused (layer.c
 * rule 3). */
static void test_lower_twice(void **state)
{
	struct fx *fx = *state;
	char err[512], want[512];

	t_file(fx, "l1/f", "1");
	t_file(fx, "l2/g", "2");
	assert_int_equal(t_export_try(fx, "l1:l2:l1", NULL, NULL, err, sizeof(err)),
			 -EINVAL);
	snprintf(want, sizeof(want), "lowerdir %s is the same directory as lowerdir %s",
		 t_path(fx, "l1"), t_path(fx, "l1"));
	assert_string_equal(err, want);
}

/* In a writable union each name of a lower inode with several links is a
 * node of its own: its id comes from its own path, its fileid is the
 * link leader's, whichever name a state saw first, and a state that never
 * saw a name resolves its id (lowerid.c rule 7). */
static void test_linked_names_rw(void **state)
{
	static const char *const la[] = {"ga/l1", "ga/l2"}, *const lb[] = {"gb/l1",
									   "gb/l2"};
	struct fx *fx = *state;
	un_id link_a, f_a, link_fid, f_fid, fid;
	struct un_attr at;
	struct un_obj *o;
	struct gw a, b;

	layers(fx, "ga");
	copy_tree(fx, "ga", "gb");
	key_write(fx, "key", 32, 0600);
	gw_open_as(fx, &a, "sa", "key", "/", la, 2, true);
	link_a = gw_id(&a, "a/link", &link_fid); /* the later name first */
	f_a = gw_id(&a, "a/b/f", &f_fid);
	assert_true(un_id_is_lower(link_a) && un_id_is_lower(f_a));
	assert_int_not_equal(link_a, f_a);
	assert_int_equal(link_fid, f_fid);
	assert_int_equal(f_fid, f_a); /* the leader's */

	gw_open_as(fx, &b, "sb", "key", "/", lb, 2, true);
	assert_int_equal(un_resolve(b.ex, link_a, &o), 0);
	assert_int_equal(un_obj_id(o), link_a);
	assert_int_equal(un_getattr(b.ex, o, &at), 0);
	assert_int_equal(at.fileid, link_fid);
	assert_int_equal(at.nlink, 2);
	un_obj_put(o);
	assert_int_equal(gw_id(&b, "a/b/f", &fid), f_a);
	assert_int_equal(fid, f_fid);
	gw_close(&b);

	gw_close(&a);
	gw_open_as(fx, &a, "sa", "key", "/", la, 2, true);
	assert_int_equal(gw_id(&a, "a/b/f", &fid), f_a);
	assert_int_equal(fid, f_fid);
	assert_int_equal(gw_id(&a, "a/link", &fid), link_a);
	assert_int_equal(fid, f_fid);
	gw_close(&a);
}

/* Whether the table maps the top-level NAME of G's export to a node (a
 * read that commits nothing queued, as un_node_path would). */
static bool in_table(struct gw *g, const char *name)
{
	un_id id;

	return un_node_name_id(g->st,
			       &(struct un_node_name){g->ex->root_id, name, strlen(name)},
			       &id) == 0;
}

/* The server's own export without a key file takes lower ids, and its
 * LOOKUPs answer them before their commit (node.c invariant 16): the table
 * holds none of them yet, and a process that dies before it commits them
 * leaves handles that still resolve, to the same objects, by the index. */
static void test_lookup_ahead(void **state)
{
	static const char *const la[] = {"ga/l1", "ga/l2"};
	struct fx *fx = *state;
	un_id ids[NPATHS];
	int fds[2], status;
	struct un_obj *o;
	struct gw a;
	pid_t pid;

	layers(fx, "ga");
	gw_lower_ids = true;
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* looks every path up, and dies with nothing closed */
		bool ok = true;

		gw_open(fx, &a, "sa", NULL, la, 2);
		for (size_t i = 1; i < NPATHS; i++) {
			ids[i] = gw_id(&a, paths[i], NULL);
			ok = ok && un_id_is_lower(ids[i]);
			if (!strchr(paths[i], '/'))
				ok = ok && !in_table(&a, paths[i]);
		}
		ok = ok && ids[3] == ids[5]; /* one node for a read-only inode's names */
		ok = ok && write(fds[1], ids, sizeof(ids)) == (ssize_t)sizeof(ids);
		_exit(ok ? 0 : 1);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], ids, sizeof(ids)), (ssize_t)sizeof(ids));
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	gw_open(fx, &a, "sa", NULL, la, 2);
	for (size_t i = NPATHS; i-- > 1;) {
		assert_int_equal(un_resolve(a.ex, ids[i], &o), 0);
		assert_int_equal(un_obj_id(o), ids[i]);
		un_obj_put(o);
	}
	for (size_t i = 1; i < NPATHS; i++)
		assert_int_equal(gw_id(&a, paths[i], NULL), ids[i]);
	gw_close(&a); /* commits what was queued ahead */
	gw_open(fx, &a, "sa", NULL, la, 2);
	for (size_t i = 1; i < NPATHS; i++)
		assert_true(strchr(paths[i], '/') || in_table(&a, paths[i]));
	gw_close(&a);
	gw_lower_ids = false;
}

static int tags_teardown(void **state)
{
	un_lower_test_tag_bits(24);
	return t_teardown(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_same_ids_across_states),
	    T_TEST(test_id_name),
	    T_TEST(test_no_key_file),
	    T_TEST(test_lookup_ahead),
	    cmocka_unit_test_setup_teardown(test_tag_collision, t_setup, tags_teardown),
	    cmocka_unit_test_setup_teardown(test_exports_collide, t_setup, tags_teardown),
	    T_TEST(test_lower_twice),
	    T_TEST(test_linked_names_rw),
	};

	return cmocka_run_group_tests_name("lowerid", tests, NULL, NULL);
}
