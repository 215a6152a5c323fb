/* SPDX-License-Identifier: Apache-2.0 */
/* test_lindex.c - the layer identity index: a fresh build read back, the
 * same numbering for the same tree (a rebuild, a copy), a new version that
 * inherits the numbers of unchanged paths, damaged files, failed builds,
 * and concurrent readers. */
#include "test_un.h"

#include <pthread.h>
#include <sodium.h>

#include "lindex.h"

/* ---- helpers ---- */

static void set_mtime(struct fx *fx, const char *rel, time_t sec, long nsec)
{
	struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};

	assert_int_equal(utimensat(AT_FDCWD, t_path(fx, rel), ts, AT_SYMLINK_NOFOLLOW),
			 0);
}

static void copy_tree(struct fx *fx, const char *from, const char *to)
{
	char cmd[2 * PATH_MAX + 32];

	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", t_path(fx, from), t_path(fx, to));
	assert_int_equal(system(cmd), 0);
}

static int build_try(struct fx *fx, const char *tree, struct un_lx *from, const char *out,
		     unsigned flags, char *err, size_t errlen)
{
	int fd = open(t_path(fx, tree), O_RDONLY | O_DIRECTORY);
	int rc;

	assert_true(fd >= 0);
	rc = un_lx_build(fd, from, t_path(fx, out), flags, err, errlen);
	close(fd);
	return rc;
}

/* Builds TREE into OUT (FROM: NULL or the index of that name) and opens it. */
static struct un_lx *build(struct fx *fx, const char *tree, const char *from,
			   const char *out, unsigned flags)
{
	struct un_lx *old = NULL, *lx;
	char err[256] = "";

	if (from)
		assert_int_equal(un_lx_open(t_path(fx, from), &old), 0);
	if (build_try(fx, tree, old, out, flags, err, sizeof(err)))
		fail_msg("build %s: %s", tree, err);
	un_lx_close(old);
	assert_int_equal(un_lx_open(t_path(fx, out), &lx), 0);
	return lx;
}

/* The entry of the '/'-separated PATH ("" the root); -errno of the walk. */
static int entry_of(struct un_lx *lx, const char *path, struct un_lx_entry *e)
{
	char buf[PATH_MAX], *save = NULL;
	int err = un_lx_get(lx, UN_LX_ROOT, e);

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *c = strtok_r(buf, "/", &save); c && !err;
	     c = strtok_r(NULL, "/", &save))
		err = un_lx_lookup(lx, e->objnum, c, e);
	return err;
}

static uint64_t objnum(struct un_lx *lx, const char *path)
{
	struct un_lx_entry e;

	if (entry_of(lx, path, &e))
		fail_msg("no %s in the index", path);
	return e.objnum;
}

static struct un_lx_info info_of(struct un_lx *lx)
{
	struct un_lx_info i;

	un_lx_info(lx, &i);
	return i;
}

static void assert_entry_equal(const struct un_lx_entry *a, const struct un_lx_entry *b)
{
	assert_int_equal(a->objnum, b->objnum);
	assert_int_equal(a->parent, b->parent);
	assert_int_equal(a->leader, b->leader);
	assert_int_equal(a->type, b->type);
	assert_int_equal(a->size, b->size);
	assert_int_equal(a->mtime_sec, b->mtime_sec);
	assert_int_equal(a->mtime_nsec, b->mtime_nsec);
	assert_int_equal(a->rdev, b->rdev);
	assert_memory_equal(a->digest, b->digest, sizeof(a->digest));
	assert_int_equal(a->namelen, b->namelen);
	assert_string_equal(a->name, b->name);
}

/* Every objnum of A names the same (parent, name, type, leader) in B. */
static void assert_same_numbering(struct un_lx *a, struct un_lx *b)
{
	struct un_lx_info ia = info_of(a), ib = info_of(b);
	struct un_lx_entry ea, eb;

	assert_int_equal(ia.count, ib.count);
	assert_int_equal(ia.max_objnum, ib.max_objnum);
	for (uint64_t n = 1; n <= ia.max_objnum; n++) {
		int ra = un_lx_get(a, n, &ea), rb = un_lx_get(b, n, &eb);

		assert_int_equal(ra, rb);
		if (ra)
			continue;
		assert_int_equal(ea.parent, eb.parent);
		assert_string_equal(ea.name, eb.name);
		assert_int_equal(ea.type, eb.type);
		assert_int_equal(ea.leader, eb.leader);
	}
}

/* A small tree of every type:  c (char 1,3)  d/  d/f  d/h2 (= h1)  h1  p
 * (fifo)  s -> d/f  w (white-out 0/0). */
static void every_type(struct fx *fx, const char *tree)
{
	char rel[PATH_MAX], rel2[PATH_MAX];

	snprintf(rel, sizeof(rel), "%s/d/f", tree);
	t_file(fx, rel, "abc");
	snprintf(rel, sizeof(rel), "%s/h1", tree);
	t_file(fx, rel, "linked");
	snprintf(rel2, sizeof(rel2), "%s/d/h2", tree);
	assert_int_equal(link(t_path(fx, rel), t_path(fx, rel2)), 0);
	snprintf(rel, sizeof(rel), "%s/s", tree);
	t_symlink(fx, "d/f", rel);
	snprintf(rel, sizeof(rel), "%s/p", tree);
	assert_int_equal(mkfifo(t_path(fx, rel), 0644), 0);
	snprintf(rel, sizeof(rel), "%s/c", tree);
	assert_int_equal(mknod(t_path(fx, rel), S_IFCHR | 0600, makedev(1, 3)), 0);
	snprintf(rel, sizeof(rel), "%s/w", tree);
	t_chr0(fx, rel);
}

/* ---- a fresh build ---- */

static void test_fresh_round_trip(void **state)
{
	static const struct {
		const char *path;
		uint64_t objnum;
		uint32_t type;
	} want[] = {
	    {"", 1, S_IFDIR},	 {"c", 2, S_IFCHR},    {"d", 3, S_IFDIR},
	    {"d/f", 4, S_IFREG}, {"d/h2", 5, S_IFREG}, {"h1", 6, S_IFREG},
	    {"p", 7, S_IFIFO},	 {"s", 8, S_IFLNK},    {"w", 9, S_IFCHR},
	};
	struct fx *fx = *state;
	struct un_lx_entry e, g;
	struct un_lx_info i;
	uint8_t digest[UN_LX_DIGEST_BYTES];
	struct un_lx *lx;

	every_type(fx, "t");
	lx = build(fx, "t", NULL, "idx", 0);
	i = info_of(lx);
	assert_int_equal(i.generation, 1);
	assert_int_equal(i.from_generation, 0);
	assert_int_equal(i.count, 9);
	assert_int_equal(i.max_objnum, 9);
	assert_false(i.digests);
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		assert_int_equal(entry_of(lx, want[k].path, &e), 0);
		assert_int_equal(e.objnum, want[k].objnum);
		assert_int_equal(e.type, want[k].type);
		/* get gives back the (parent, name) lookup came through */
		assert_int_equal(un_lx_get(lx, e.objnum, &g), 0);
		assert_entry_equal(&e, &g);
		if (e.objnum != UN_LX_ROOT) {
			assert_int_equal(un_lx_lookup(lx, g.parent, g.name, &g), 0);
			assert_int_equal(g.objnum, e.objnum);
		}
	}
	assert_int_equal(entry_of(lx, "d/f", &e), 0);
	assert_int_equal(e.parent, 3);
	assert_int_equal(e.size, 3);
	assert_int_equal(entry_of(lx, "c", &e), 0);
	assert_int_equal(e.rdev, makedev(1, 3));
	assert_int_equal(entry_of(lx, "w", &e), 0);
	assert_int_equal(e.rdev, 0);
	/* the first name of the linked inode in walk order leads */
	assert_int_equal(entry_of(lx, "h1", &e), 0);
	assert_int_equal(e.leader, 5);
	assert_int_equal(entry_of(lx, "d/h2", &e), 0);
	assert_int_equal(e.leader, 5);
	assert_int_equal(entry_of(lx, "d/f", &e), 0);
	assert_int_equal(e.leader, 4);
	/* a symlink's target digest is always there */
	crypto_generichash(digest, sizeof(digest), (const uint8_t *)"d/f", 3, NULL, 0);
	assert_int_equal(entry_of(lx, "s", &e), 0);
	assert_memory_equal(e.digest, digest, sizeof(digest));
	assert_int_equal(un_lx_lookup(lx, 1, "nothere", &e), -ENOENT);
	assert_int_equal(un_lx_lookup(lx, 99, "d", &e), -ENOENT);
	assert_int_equal(un_lx_get(lx, 0, &e), -ENOENT);
	assert_int_equal(un_lx_get(lx, 10, &e), -ENOENT);
	un_lx_close(lx);
}

static void test_fresh_digests(void **state)
{
	struct fx *fx = *state;
	uint8_t digest[UN_LX_DIGEST_BYTES];
	struct un_lx_entry e;
	struct un_lx *lx, *plain;

	every_type(fx, "t");
	lx = build(fx, "t", NULL, "idx", UN_LX_DIGESTS);
	plain = build(fx, "t", NULL, "plain", 0);
	assert_true(info_of(lx).digests);
	crypto_generichash(digest, sizeof(digest), (const uint8_t *)"abc", 3, NULL, 0);
	assert_int_equal(entry_of(lx, "d/f", &e), 0);
	assert_memory_equal(e.digest, digest, sizeof(digest));
	/* the lineage does not depend on the flag */
	assert_int_equal(info_of(lx).lineage, info_of(plain).lineage);
	un_lx_close(plain);
	un_lx_close(lx);
}

/* ---- determinism ---- */

static void test_deterministic(void **state)
{
	struct fx *fx = *state;
	struct un_lx *a, *b, *copy, *other;

	every_type(fx, "t");
	t_file(fx, "t/d/e/deep", "x");
	t_file(fx, "t/B", "upper case sorts first");
	a = build(fx, "t", NULL, "a", 0);
	b = build(fx, "t", NULL, "b", 0);
	assert_int_equal(info_of(a).lineage, info_of(b).lineage);
	assert_same_numbering(a, b);

	copy_tree(fx, "t", "copy");
	copy = build(fx, "copy", NULL, "c", 0);
	assert_int_equal(info_of(a).lineage, info_of(copy).lineage);
	assert_memory_equal(info_of(a).listing, info_of(copy).listing,
			    UN_LX_DIGEST_BYTES);
	assert_same_numbering(a, copy);

	copy_tree(fx, "t", "other");
	t_file(fx, "other/d/f", "abcd");
	other = build(fx, "other", NULL, "o", 0);
	assert_int_not_equal(info_of(a).lineage, info_of(other).lineage);
	un_lx_close(other);
	un_lx_close(copy);
	un_lx_close(b);
	un_lx_close(a);
}

/* ---- inheritance ---- */

/* Version 1 of a layer, every file's mtime fixed. */
static void version1(struct fx *fx)
{
	static const char *const files[] = {"v1/keep", "v1/grow",   "v1/touch", "v1/gone",
					    "v1/d/x",  "v1/turn",   "v1/l1",	"v1/same",
					    "v1/diff", "v1/z/below"};

	for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
		t_file(fx, files[k], "content");
		set_mtime(fx, files[k], 1700000000, 5);
	}
	assert_int_equal(link(t_path(fx, "v1/l1"), t_path(fx, "v1/l2")), 0);
	t_symlink(fx, "keep", "v1/sl");
	t_symlink(fx, "keep", "v1/sl2");
}

/* Version 2: a copy of version 1 (new inodes), then changed. */
static void version2(struct fx *fx)
{
	copy_tree(fx, "v1", "v2");
	t_file(fx, "v2/grow", "content, longer");
	set_mtime(fx, "v2/touch", 1700000001, 0); /* same bytes, new mtime */
	t_file(fx, "v2/same", "content");	  /* rewritten, same bytes */
	set_mtime(fx, "v2/same", 1700000002, 0);
	t_file(fx, "v2/diff", "CONTENT"); /* same size, other bytes */
	set_mtime(fx, "v2/diff", 1700000002, 0);
	t_rm(fx, "v2/gone");
	t_rm(fx, "v2/turn");
	t_file(fx, "v2/turn/y", "a file became a dir");
	t_rm(fx, "v2/sl");
	t_symlink(fx, "grow", "v2/sl");
	t_file(fx, "v2/added", "new");
}

static void test_inherit_unchanged_and_changed(void **state)
{
	static const char *const kept[] = {"",	 "keep", "d", "d/x",	"l1",
					   "l2", "sl2",	 "z", "z/below"};
	static const char *const renumbered[] = {"grow", "touch",  "same", "diff",
						 "turn", "turn/y", "sl",   "added"};
	struct fx *fx = *state;
	struct un_lx *old, *now, *again;
	struct un_lx_info io, in;
	struct un_lx_entry e;

	version1(fx);
	old = build(fx, "v1", NULL, "i1", 0);
	version2(fx);
	now = build(fx, "v2", "i1", "i2", 0);
	io = info_of(old);
	in = info_of(now);
	assert_int_equal(in.lineage, io.lineage);
	assert_int_equal(in.generation, 2);
	assert_int_equal(in.from_lineage, io.lineage);
	assert_int_equal(in.from_generation, 1);
	for (size_t k = 0; k < sizeof(kept) / sizeof(kept[0]); k++)
		if (objnum(now, kept[k]) != objnum(old, kept[k]))
			fail_msg("%s: %ju, was %ju", kept[k],
				 (uintmax_t)objnum(now, kept[k]),
				 (uintmax_t)objnum(old, kept[k]));
	for (size_t k = 0; k < sizeof(renumbered) / sizeof(renumbered[0]); k++)
		if (objnum(now, renumbered[k]) <= io.max_objnum)
			fail_msg("%s kept an old objnum", renumbered[k]);
	assert_int_equal(entry_of(now, "gone", &e), -ENOENT);
	assert_int_equal(entry_of(now, "turn", &e), 0);
	assert_int_equal(e.type, S_IFDIR);
	/* the link group kept its leader */
	assert_int_equal(entry_of(now, "l2", &e), 0);
	assert_int_equal(e.leader, objnum(old, "l1"));
	/* new numbers come after the old max, in walk order, none lost */
	assert_int_equal(objnum(now, "added"), io.max_objnum + 1);
	assert_int_equal(in.max_objnum, io.max_objnum + 8);
	assert_int_equal(in.count, io.count + 1); /* - gone + turn/y + added */
	/* the old objnum of a removed path is gone for good */
	assert_int_equal(un_lx_get(now, objnum(old, "gone"), &e), -ENOENT);
	/* an inherited build is as deterministic as a fresh one */
	again = build(fx, "v2", "i1", "i2b", 0);
	assert_same_numbering(now, again);
	/* and its listing hash is a fresh build's of the same tree */
	un_lx_close(again);
	again = build(fx, "v2", NULL, "fresh2", 0);
	assert_memory_equal(info_of(again).listing, in.listing, UN_LX_DIGEST_BYTES);
	assert_int_not_equal(info_of(again).lineage, in.lineage);
	un_lx_close(again);
	un_lx_close(now);
	un_lx_close(old);
}

static void test_inherit_with_digests(void **state)
{
	struct fx *fx = *state;
	struct un_lx *old, *now, *half;

	version1(fx);
	old = build(fx, "v1", NULL, "i1", UN_LX_DIGESTS);
	version2(fx);
	now = build(fx, "v2", "i1", "i2", UN_LX_DIGESTS);
	/* equal bytes keep their number whatever the mtime */
	assert_int_equal(objnum(now, "touch"), objnum(old, "touch"));
	assert_int_equal(objnum(now, "same"), objnum(old, "same"));
	assert_int_equal(objnum(now, "keep"), objnum(old, "keep"));
	/* other bytes of the same size do not */
	assert_true(objnum(now, "diff") > info_of(old).max_objnum);
	assert_true(objnum(now, "grow") > info_of(old).max_objnum);
	/* digests in the new index only: mtimes decide */
	half = build(fx, "v2", "i1", "i3", 0);
	assert_true(objnum(half, "touch") > info_of(old).max_objnum);
	un_lx_close(half);
	un_lx_close(now);
	un_lx_close(old);
}

static void test_inherit_generations(void **state)
{
	struct fx *fx = *state;
	struct un_lx *g1, *g2, *g3, *fork;

	t_file(fx, "a/f", "1");
	t_file(fx, "a/g", "1");
	g1 = build(fx, "a", NULL, "g1", 0);
	t_rm(fx, "a/g");
	g2 = build(fx, "a", "g1", "g2", 0);
	t_file(fx, "a/g", "2"); /* back, but a new object */
	g3 = build(fx, "a", "g2", "g3", 0);
	assert_int_equal(info_of(g3).generation, 3);
	assert_int_equal(info_of(g2).max_objnum, info_of(g1).max_objnum);
	/* no objnum is handed out twice in a lineage */
	assert_int_equal(objnum(g3, "g"), info_of(g1).max_objnum + 1);
	assert_int_equal(objnum(g3, "f"), objnum(g1, "f"));
	/* each index names the one it descends from */
	assert_memory_equal(info_of(g1).id, info_of(g1).listing, UN_LX_DIGEST_BYTES);
	assert_memory_equal(info_of(g2).from_id, info_of(g1).id, UN_LX_DIGEST_BYTES);
	assert_memory_equal(info_of(g3).from_id, info_of(g2).id, UN_LX_DIGEST_BYTES);
	/* a fork: another version 2, of the same lineage, with its own id */
	fork = build(fx, "a", "g1", "fork", 0);
	assert_int_equal(info_of(fork).lineage, info_of(g2).lineage);
	assert_int_equal(info_of(fork).generation, info_of(g2).generation);
	assert_memory_equal(info_of(fork).from_id, info_of(g1).id, UN_LX_DIGEST_BYTES);
	assert_memory_not_equal(info_of(fork).id, info_of(g2).id, UN_LX_DIGEST_BYTES);
	un_lx_close(fork);
	un_lx_close(g3);
	un_lx_close(g2);
	un_lx_close(g1);
}

/* ---- damaged files ---- */

static void write_bytes(struct fx *fx, const char *rel, const void *buf, size_t n)
{
	int fd = open(t_path(fx, rel), O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, n), (ssize_t)n);
	close(fd);
}

static void assert_open_fails(struct fx *fx, const char *rel, int want)
{
	struct un_lx *lx = (struct un_lx *)fx;

	assert_int_equal(un_lx_open(t_path(fx, rel), &lx), want);
	assert_null(lx);
}

/* Puts VAL under KEY in database DB of index REL, bypassing the builder. */
static void poke(struct fx *fx, const char *rel, const char *db, MDB_val *key,
		 MDB_val *val)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;

	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 4), 0);
	assert_int_equal(mdb_env_open(env, t_path(fx, rel), MDB_NOSUBDIR | MDB_NOLOCK, 0),
			 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, db, 0, &dbi), 0);
	assert_int_equal(mdb_put(txn, dbi, key, val, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

static void test_damaged_files(void **state)
{
	struct fx *fx = *state;
	uint8_t junk[16384], key[8] = {0, 0, 0, 0, 0, 0, 0, 2}, rec[80] = {9};
	uint32_t format = 1; /* the format before the inode table */
	MDB_val k = {6, "format"}, v = {sizeof(format), &format};
	struct un_lx_entry e;
	struct un_lx *lx;
	struct stat st;
	char *data;
	int fd;

	every_type(fx, "t");
	un_lx_close(build(fx, "t", NULL, "idx", 0));
	assert_open_fails(fx, "absent", -ENOENT);
	write_bytes(fx, "empty", "", 0);
	assert_open_fails(fx, "empty", -EPROTO);
	randombytes_buf(junk, sizeof(junk));
	write_bytes(fx, "junk", junk, sizeof(junk));
	assert_open_fails(fx, "junk", -EPROTO);

	/* truncated: every length short of the whole */
	fd = open(t_path(fx, "idx"), O_RDONLY);
	assert_int_equal(fstat(fd, &st), 0);
	data = malloc((size_t)st.st_size);
	assert_int_equal(read(fd, data, (size_t)st.st_size), st.st_size);
	close(fd);
	for (off_t len = 1; len < st.st_size; len += len < 8192 ? 1023 : 4096) {
		write_bytes(fx, "short", data, (size_t)len);
		assert_open_fails(fx, "short", -EPROTO);
	}
	write_bytes(fx, "short", data, (size_t)st.st_size - 1);
	assert_open_fails(fx, "short", -EPROTO);
	free(data);

	/* an unknown format, and a record of an unknown version */
	copy_tree(fx, "idx", "fmt");
	poke(fx, "fmt", "meta", &k, &v);
	assert_open_fails(fx, "fmt", -EPROTO);
	k = (MDB_val){sizeof(key), key};
	v = (MDB_val){sizeof(rec), rec};
	poke(fx, "idx", "objs", &k, &v);
	assert_int_equal(un_lx_open(t_path(fx, "idx"), &lx), 0);
	assert_int_equal(un_lx_get(lx, 2, &e), -EPROTO);
	assert_int_equal(un_lx_lookup(lx, 1, "c", &e), -EPROTO);
	assert_int_equal(un_lx_get(lx, 3, &e), 0);
	un_lx_close(lx);
}

/* ---- the inode table ---- */

/* The inode of REL in the fixture: what un_lx_ino answers for it. */
static int ino_of(struct fx *fx, struct un_lx *lx, const char *rel, uint64_t *objnum,
		  uint32_t *type)
{
	struct stat st;

	assert_int_equal(lstat(t_path(fx, rel), &st), 0);
	return un_lx_ino(lx, st.st_ino, objnum, type);
}

static void assert_ino(struct fx *fx, struct un_lx *lx, const char *rel, uint64_t want,
		       uint32_t type)
{
	uint64_t n = 0;
	uint32_t t = 0;

	assert_int_equal(ino_of(fx, lx, rel, &n, &t), 0);
	assert_int_equal(n, want);
	assert_int_equal(t, type);
}

static void test_inode_table(void **state)
{
	static const struct {
		const char *rel;
		uint32_t type;
	} paths[] = {{"t/c", S_IFCHR}, {"t/d", S_IFDIR}, {"t/d/f", S_IFREG},
		     {"t/p", S_IFIFO}, {"t/s", S_IFLNK}, {"t/w", S_IFCHR}};
	struct fx *fx = *state;
	struct un_lx *lx, *copy;
	struct stat st;
	uint64_t n;
	uint32_t t;
	char rel[64];

	every_type(fx, "t");
	lx = build(fx, "t", NULL, "idx", 0);
	assert_int_equal(stat(t_path(fx, "t"), &st), 0);
	assert_int_equal(info_of(lx).root_ino, st.st_ino);
	assert_ino(fx, lx, "t", UN_LX_ROOT, S_IFDIR);
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		assert_ino(fx, lx, paths[i].rel, objnum(lx, paths[i].rel + 2),
			   paths[i].type);
	/* both links give the first path in walk order: d/h2 before h1 */
	assert_ino(fx, lx, "t/h1", objnum(lx, "d/h2"), S_IFREG);
	assert_ino(fx, lx, "t/d/h2", objnum(lx, "d/h2"), S_IFREG);
	/* an inode added since the build is unknown */
	t_file(fx, "t/new", "x");
	assert_int_equal(ino_of(fx, lx, "t/new", &n, &t), -ENOENT);

	/* a copy: other inodes, the same objnums through its own table */
	copy_tree(fx, "t", "u");
	copy = build(fx, "u", "idx", "idx2", 0);
	assert_int_equal(stat(t_path(fx, "u"), &st), 0);
	assert_int_equal(info_of(copy).root_ino, st.st_ino);
	assert_true(info_of(copy).root_ino != info_of(lx).root_ino);
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		snprintf(rel, sizeof(rel), "u%s", paths[i].rel + 1);
		assert_ino(fx, copy, rel, objnum(lx, paths[i].rel + 2), paths[i].type);
	}
	assert_ino(fx, copy, "u/h1", objnum(lx, "d/h2"), S_IFREG);
	un_lx_close(copy);
	un_lx_close(lx);
}

/* ---- failed builds ---- */

/* The names in the fixture's base that start with PREFIX. */
static int count_prefixed(struct fx *fx, const char *prefix)
{
	DIR *d = opendir(fx->base);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

static void test_failed_build_leaves_nothing(void **state)
{
	struct fx *fx = *state;
	char err[256] = "";
	struct un_lx *lx;
	uint64_t lineage;
	int fd;

	every_type(fx, "t");
	t_file(fx, "t/d/e/deep", "x");
	/* the third directory read fails: "d/e" */
	un_sys_inject(UN_SYS_GETDENTS, 3, EIO);
	assert_int_equal(build_try(fx, "t", NULL, "idx", 0, err, sizeof(err)), -EIO);
	un_sys_inject_reset();
	assert_non_null(strstr(err, "/d"));
	assert_non_null(strstr(err, "Input/output error"));
	assert_int_equal(count_prefixed(fx, "idx"), 0);

	/* a directory that cannot be opened (root may open any: injected) */
	un_sys_inject(UN_SYS_OPEN, 1, EACCES);
	assert_int_equal(build_try(fx, "t", NULL, "idx", 0, err, sizeof(err)), -EACCES);
	un_sys_inject_reset();
	assert_non_null(strstr(err, "/d: open: Permission denied"));
	assert_int_equal(count_prefixed(fx, "idx"), 0);

	/* the final commit fails (a full disk): the index before stays */
	lx = build(fx, "t", NULL, "idx", 0);
	lineage = info_of(lx).lineage;
	un_lx_close(lx);
	t_file(fx, "t/more", "changes the lineage");
	un_sys_inject(UN_SYS_MDB, 2, ENOSPC);
	assert_int_equal(build_try(fx, "t", NULL, "idx", 0, err, sizeof(err)), -ENOSPC);
	un_sys_inject_reset();
	assert_non_null(strstr(err, "No space left on device"));
	assert_int_equal(count_prefixed(fx, "idx"), 1);
	assert_int_equal(un_lx_open(t_path(fx, "idx"), &lx), 0);
	assert_int_equal(info_of(lx).lineage, lineage);
	un_lx_close(lx);

	/* a layer root that is not a directory */
	fd = open(t_path(fx, "t/d/f"), O_RDONLY);

	assert_int_equal(un_lx_build(fd, NULL, t_path(fx, "idx2"), 0, err, sizeof(err)),
			 -ENOTDIR);
	close(fd);
	assert_int_equal(count_prefixed(fx, "idx2"), 0);
}

/* ---- concurrent readers ---- */

struct reader {
	struct un_lx *lx;
	uint64_t max;
	int bad;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	struct un_lx_entry e, p;

	for (int k = 0; k < 20000; k++) {
		uint64_t n = 1 + (uint64_t)k % r->max;

		if (un_lx_get(r->lx, n, &e)) {
			r->bad++;
			continue;
		}
		if (n != UN_LX_ROOT &&
		    (un_lx_lookup(r->lx, e.parent, e.name, &p) || p.objnum != n))
			r->bad++;
	}
	return NULL;
}

static void test_concurrent_readers(void **state)
{
	struct fx *fx = *state;
	struct reader r[4];
	pthread_t th[4];
	struct un_lx *lx;
	char rel[64];

	for (int k = 0; k < 200; k++) {
		snprintf(rel, sizeof(rel), "t/d%d/f%d", k % 7, k);
		t_file(fx, rel, "x");
	}
	lx = build(fx, "t", NULL, "idx", 0);
	for (int k = 0; k < 4; k++) {
		r[k] = (struct reader){lx, info_of(lx).max_objnum, 0};
		assert_int_equal(pthread_create(&th[k], NULL, reader_main, &r[k]), 0);
	}
	for (int k = 0; k < 4; k++) {
		pthread_join(th[k], NULL);
		assert_int_equal(r[k].bad, 0);
	}
	un_lx_close(lx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_fresh_round_trip),     T_TEST(test_fresh_digests),
	    T_TEST(test_deterministic),	       T_TEST(test_inherit_unchanged_and_changed),
	    T_TEST(test_inherit_with_digests), T_TEST(test_inherit_generations),
	    T_TEST(test_damaged_files),	       T_TEST(test_failed_build_leaves_nothing),
	    T_TEST(test_concurrent_readers),   T_TEST(test_inode_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
