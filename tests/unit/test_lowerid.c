/* SPDX-License-Identifier: Apache-2.0 */
/* test_lowerid.c - lower ids (union/lowerid.c): two states with their own
 * dirs and one key file, each over its own copy of the same layers, give
 * every lower object the same node id, fileid and directory verifier, and
 * each resolves the other's ids before it looked anything up; a layer
 * added on top keeps them; an id whose path is hidden is stale; without a
 * key file ids come from the counter; a key file others can read, or of
 * another size, is refused. */
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

/* A gateway: state dir STATE (keyed with KEY, or NULL) serving the export
 * "/" over LOWERS, top-most first, relative to the base. */
static void gw_open(struct fx *fx, struct gw *g, const char *state, const char *key,
		    const char *const *lowers, size_t n)
{
	char path[UN_LAYERS_MAX][PATH_MAX], err[256];
	const char *lv[UN_LAYERS_MAX];
	struct un_export_cfg cfg = {.path = "/", .lowerdirs = lv, .nlower = n};
	char keypath[PATH_MAX];

	for (size_t i = 0; i < n; i++) {
		snprintf(path[i], sizeof(path[i]), "%s", t_path(fx, lowers[i]));
		lv[i] = path[i];
	}
	if (key)
		snprintf(keypath, sizeof(keypath), "%s", t_path(fx, key));
	assert_int_equal(
	    un_state_open_keyed(t_path(fx, state), key ? keypath : NULL, &g->st), 0);
	if (un_export_open(g->st, &cfg, &g->ex, err, sizeof(err)))
		fail_msg("export: %s", err);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_same_ids_across_states),
	    T_TEST(test_id_name),
	    T_TEST(test_no_key_file),
	};

	return cmocka_run_group_tests_name("lowerid", tests, NULL, NULL);
}
