/* SPDX-License-Identifier: Apache-2.0 */
/* test_readdir.c - merged listings: merge rules, "." and "..", cookie order,
 * seek and paging, forced cookie collisions, the cache and its bound,
 * verifiers, node ids of entries, and injected failures. */
#include "test_un.h"
#include "test_wr.h"

#include <linux/magic.h>
#include <pthread.h>
#include <sys/statfs.h>

static void pause_tick(void)
{
	/* Lets a directory timestamp move even where timestamps are coarse. */
	struct timespec ts = {0, 20 * 1000 * 1000};

	nanosleep(&ts, NULL);
}

static struct un_obj *obj(struct fx *fx, const char *path)
{
	struct un_obj *o = NULL;

	assert_int_equal(t_walk(fx, path, &o), 0);
	return o;
}

static struct un_listing *listing(struct fx *fx, struct un_obj *dir)
{
	struct un_listing *l = NULL;

	assert_int_equal(un_listing_get(fx->ex, dir, &l), 0);
	return l;
}

static void test_merge(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l1/a", "1");
	t_file(fx, "l1/b/x", "1");
	t_file(fx, "l1/.wh.c", "");
	t_chr0(fx, "l1/w1");
	t_file(fx, "l2/a", "2");
	t_file(fx, "l2/b/y", "2");
	t_file(fx, "l2/c", "2");
	t_file(fx, "l2/d", "2");
	t_file(fx, "l2/w1", "2");
	t_file(fx, "l2/.wh..wh..opq", "");
	t_file(fx, "l3/d", "3");
	t_file(fx, "l3/e", "3");
	t_file(fx, "l3/b/z", "3");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	t_list_eq(fx, "", "a,b,d,e");
	t_list_eq(fx, "b", "x,y,z");
}

static void test_dots_and_order(void **state)
{
	struct fx *fx = *state;
	const struct un_dirent *e;
	struct un_listing *l;
	struct un_obj *d;
	char name[32];

	for (int i = 0; i < 50; i++) {
		snprintf(name, sizeof(name), "l%d/f%02d", 1 + i % 3, i);
		t_file(fx, name, "x");
	}
	t_export(fx, "l1:l2:l3", NULL, NULL);
	d = obj(fx, "");
	l = listing(fx, d);
	assert_int_equal(un_listing_count(l), 52);
	e = un_listing_at(l, 0);
	assert_string_equal(e->name, ".");
	assert_int_equal(e->cookie, 1);
	assert_int_equal(e->namelen, 1);
	assert_int_equal(e->type, S_IFDIR);
	e = un_listing_at(l, 1);
	assert_string_equal(e->name, "..");
	assert_int_equal(e->cookie, 2);
	for (size_t i = 2; i < un_listing_count(l); i++) {
		e = un_listing_at(l, i);
		assert_true(e->cookie >= 3 && e->cookie < (1ull << 63));
		assert_true(e->cookie > un_listing_at(l, i - 1)->cookie);
		assert_int_equal(e->type, S_IFREG);
		assert_int_equal(e->namelen, strlen(e->name));
	}
	assert_null(un_listing_at(l, 52));
	un_listing_put(l);
	un_obj_put(d);
}

/* Reads L in pages of PAGE entries the way a READDIR client does; checks
 * that every entry comes exactly once. */
static void page_through(struct un_listing *l, size_t page)
{
	size_t n = un_listing_count(l), seen = 0, i = un_listing_seek(l, 0);
	uint64_t cookie;

	while (i < n) {
		size_t end = i + page < n ? i + page : n;

		/* never end a page inside a run of equal cookies */
		while (end < n &&
		       un_listing_at(l, end)->cookie == un_listing_at(l, end - 1)->cookie)
			end++;
		seen += end - i;
		cookie = un_listing_at(l, end - 1)->cookie;
		i = un_listing_seek(l, cookie);
		assert_int_equal(i, end);
	}
	assert_int_equal(seen, n);
}

static void test_seek(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_obj *d;
	char name[32];
	size_t n;

	for (int i = 0; i < 30; i++) {
		snprintf(name, sizeof(name), "l1/n%d", i);
		t_file(fx, name, "x");
	}
	t_export(fx, "l1", NULL, NULL);
	d = obj(fx, "");
	l = listing(fx, d);
	n = un_listing_count(l);
	assert_int_equal(un_listing_seek(l, 0), 0);
	assert_int_equal(un_listing_seek(l, 1), 1);
	assert_int_equal(un_listing_seek(l, 2), 2);
	assert_int_equal(un_listing_seek(l, UINT64_MAX), n);
	for (size_t i = 0; i < n; i++) {
		uint64_t c = un_listing_at(l, i)->cookie;

		assert_int_equal(un_listing_seek(l, c), i + 1);
		assert_int_equal(un_listing_seek(l, c - 1), i);
	}
	page_through(l, 1);
	page_through(l, 7);
	un_listing_put(l);
	un_obj_put(d);
}

static void collisions(struct fx *fx, unsigned bits)
{
	struct un_listing *l;
	struct un_obj *d;
	char want[1024] = "";

	un_readdir_test_hash_bits(bits);
	d = obj(fx, "");
	l = listing(fx, d);
	assert_int_equal(un_listing_count(l), 42);
	for (size_t i = 3; i < un_listing_count(l); i++) {
		const struct un_dirent *a = un_listing_at(l, i - 1),
				       *b = un_listing_at(l, i);

		assert_true(a->cookie < b->cookie ||
			    (a->cookie == b->cookie && strcmp(a->name, b->name) < 0));
	}
	page_through(l, 3);
	un_listing_put(l);
	un_obj_put(d);
	for (int i = 0; i < 40; i++)
		snprintf(want + strlen(want), sizeof(want) - strlen(want), "%sc%02d",
			 i ? "," : "", i);
	t_list_eq(fx, "", want);
}

static void test_forced_collisions(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_obj *d;
	char name[32];

	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "l%d/c%02d", 1 + i % 2, i);
		t_file(fx, name, "x");
	}
	t_export(fx, "l1:l2", NULL, NULL);
	collisions(fx, 4); /* 13 possible cookies for 40 names */
	collisions(fx, 1); /* every name has cookie 3 */
	d = obj(fx, "");
	l = listing(fx, d);
	assert_int_equal(un_listing_at(l, 2)->cookie, 3);
	assert_int_equal(un_listing_at(l, 41)->cookie, 3);
	assert_int_equal(un_listing_seek(l, 2), 2);
	assert_int_equal(un_listing_seek(l, 3), 42);
	un_listing_put(l);
	un_obj_put(d);
}

static void test_cache_and_versions(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l1, *l2, *l3;
	struct un_obj *d;
	uint64_t v1;

	t_mkdir(fx, "w");
	t_mkdir(fx, "u");
	t_file(fx, "l1/d/a", "1");
	t_file(fx, "l2/d/b", "2");
	t_export(fx, "l1:l2", "u", "w");
	d = obj(fx, "d");
	l1 = listing(fx, d);
	l2 = listing(fx, d);
	assert_ptr_equal(l1, l2);
	assert_true(un_listing_cached(l1));
	v1 = un_listing_verf(l1);
	un_listing_put(l2);

	/* A change in a lower layer: a new version, a new verifier. */
	pause_tick();
	t_file(fx, "l2/d/c", "2");
	l2 = listing(fx, d);
	assert_ptr_not_equal(l1, l2);
	assert_int_not_equal(un_listing_verf(l2), v1);
	assert_int_equal(un_listing_count(l2), 5);
	assert_false(un_listing_cached(l1)); /* the old version left the cache */
	un_listing_put(l1);

	/* A layer dir appearing (in the upper) is a new version too. */
	pause_tick();
	t_mkdir(fx, "u/d");
	un_obj_put(d);
	d = obj(fx, "d");
	assert_int_equal(d->ninst, 3);
	l3 = listing(fx, d);
	assert_ptr_not_equal(l2, l3);
	assert_int_not_equal(un_listing_verf(l3), un_listing_verf(l2));
	un_listing_put(l2);
	un_listing_put(l3);

	/* A version that is not settled is built each time, never cached. */
	un_readdir_test_settle_ns(3600ll * 1000000000ll);
	pause_tick();
	t_file(fx, "l1/d/new", "1");
	l1 = listing(fx, d);
	l2 = listing(fx, d);
	assert_ptr_not_equal(l1, l2);
	assert_false(un_listing_cached(l1));
	assert_int_equal(un_listing_verf(l1), un_listing_verf(l2));
	un_listing_put(l1);
	un_listing_put(l2);
	un_obj_put(d);
}

static void test_cache_bound(void **state)
{
	struct fx *fx = *state;
	struct un_listing *a, *b, *c, *a2, *b2;
	struct un_obj *da, *db, *dc;
	size_t one;

	t_file(fx, "l1/a/x", "1");
	t_file(fx, "l1/b/x", "1");
	t_file(fx, "l1/c/x", "1");
	t_export(fx, "l1", NULL, NULL);
	da = obj(fx, "a");
	db = obj(fx, "b");
	dc = obj(fx, "c");
	a = listing(fx, da);
	one = un_listing_bytes(a);
	un_listing_cache_limit(fx->st, 2 * one); /* room for two */
	assert_true(un_listing_cached(a));
	b = listing(fx, db);
	c = listing(fx, dc);
	assert_false(un_listing_cached(a)); /* least recently used goes */
	assert_true(un_listing_cached(b));
	assert_true(un_listing_cached(c));
	a2 = listing(fx, da);
	assert_ptr_not_equal(a, a2);
	assert_false(un_listing_cached(b));
	un_listing_cache_limit(fx->st, one - 1); /* nothing fits */
	assert_false(un_listing_cached(c));
	/* but the most recently used listing stays, alone (invariant 5) */
	assert_true(un_listing_cached(a2));
	b2 = listing(fx, db);
	assert_true(un_listing_cached(b2));
	assert_false(un_listing_cached(a2));
	un_listing_put(a);
	un_listing_put(b);
	un_listing_put(c);
	un_listing_put(a2);
	un_listing_put(b2);
	un_obj_put(da);
	un_obj_put(db);
	un_obj_put(dc);
}

static void test_verifier(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_obj *d;
	uint64_t verf;
	un_id id;

	t_file(fx, "l1/d/a", "1");
	t_export(fx, "l1", NULL, NULL);
	d = obj(fx, "d");
	id = un_obj_id(d);
	l = listing(fx, d);
	verf = un_listing_verf(l);
	assert_int_not_equal(verf, 0);
	assert_true(un_listing_verf_valid(fx->ex, id, verf));
	assert_false(un_listing_verf_valid(fx->ex, id + 1, verf));
	assert_false(un_listing_verf_valid(fx->ex, id, 0));
	for (int bit = 0; bit < 64; bit++)
		assert_false(un_listing_verf_valid(fx->ex, id, verf ^ (1ull << bit)));
	un_listing_put(l);
	un_obj_put(d);

	/* The same version after a restart has the same, still valid, verifier. */
	t_export_close(fx);
	un_state_close(fx->st);
	assert_int_equal(un_state_open(t_path(fx, "state"), &fx->st), 0);
	t_export(fx, "l1", NULL, NULL);
	d = obj(fx, "d");
	assert_int_equal(un_obj_id(d), id);
	assert_true(un_listing_verf_valid(fx->ex, id, verf));
	l = listing(fx, d);
	assert_int_equal(un_listing_verf(l), verf);
	un_listing_put(l);
	un_obj_put(d);
}

static void test_entry_ids(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_obj *d;
	un_id ids[16], again[16];
	unsigned long mdb;
	size_t n;

	t_file(fx, "l1/d/file", "1");
	t_file(fx, "l1/d/sub/x", "1");
	t_file(fx, "l2/d/sub/y", "2");
	t_file(fx, "l2/d/lower", "2");
	t_symlink(fx, "file", "l2/d/ln");
	assert_int_equal(link(t_path(fx, "l1/d/file"), t_path(fx, "l1/d/hard")), 0);
	t_export(fx, "l1:l2", NULL, NULL);
	d = obj(fx, "d");
	l = listing(fx, d);
	n = un_listing_count(l);
	assert_int_equal(n, 7);

	/* Listing first: ids assigned in one write transaction. */
	un_sys_inject_reset();
	assert_int_equal(un_listing_ids(fx->ex, d, l, 0, n, ids), 0);
	mdb = un_sys_calls(UN_SYS_MDB);
	assert_int_equal(mdb, 3); /* read txn, write txn, commit */
	assert_int_equal(ids[0], un_obj_id(d));
	assert_int_equal(ids[1], un_obj_parent_id(d));
	for (size_t i = 2; i < n; i++) {
		char path[64];

		snprintf(path, sizeof(path), "d/%s", un_listing_at(l, i)->name);
		assert_int_equal(ids[i], t_id(fx, path)); /* lookup agrees */
	}
	assert_int_equal(t_id(fx, "d/file"), t_id(fx, "d/hard"));

	/* Known ids come from the listing, without the table, in any window. */
	un_sys_inject_reset();
	assert_int_equal(un_listing_ids(fx->ex, d, l, 1, n - 1, again), 0);
	assert_int_equal(un_sys_calls(UN_SYS_MDB), 0);
	assert_memory_equal(again, ids + 1, (n - 1) * sizeof(un_id));
	assert_int_equal(un_listing_ids(fx->ex, d, l, n, 0, again), 0);
	assert_int_equal(un_listing_ids(fx->ex, d, l, n, 1, again), -EINVAL);
	assert_int_equal(un_listing_ids(fx->ex, d, l, n + 1, 0, again), -EINVAL);
	un_listing_put(l);
	un_obj_put(d);
}

static void reopen(struct fx *fx, const char *lowers)
{
	t_export_close(fx);
	un_state_close(fx->st);
	assert_int_equal(un_state_open(t_path(fx, "state"), &fx->st), 0);
	t_export(fx, lowers, NULL, NULL);
}

/* Asks for the ids of entries FROM..FROM+N-1 of L into IDS; the number of
 * node table calls it made (read and write transactions, commits). */
static unsigned long ids_calls(struct fx *fx, struct un_obj *d, struct un_listing *l,
			       size_t from, size_t n, un_id *ids)
{
	un_sys_inject_reset();
	assert_int_equal(un_listing_ids(fx->ex, d, l, from, n, ids), 0);
	return un_sys_calls(UN_SYS_MDB);
}

/* The first page of a whole listing gives every entry its node in one
 * write transaction (readdir.c invariant 9): later pages read no table, a
 * page asked before it only its own entries, the ids are those lookups
 * give, and they survive a restart, found again with one read. */
static void test_listing_ahead(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_obj *d;
	un_id *ids, *again;
	char path[64];
	size_t n;

	for (int i = 0; i < 110; i++) {
		snprintf(path, sizeof(path), "l%d/d/f%03d", i < 100 ? 1 : 2, i);
		t_file(fx, path, "x");
	}
	for (int i = 90; i < 200; i++) {
		snprintf(path, sizeof(path), "l2/d/f%03d", i);
		t_file(fx, path, "y");
	}
	t_export(fx, "l1:l2", NULL, NULL);
	d = obj(fx, "d");
	l = listing(fx, d);
	n = un_listing_count(l);
	assert_int_equal(n, 202);
	ids = calloc(n, sizeof(*ids));
	again = calloc(n, sizeof(*again));
	assert_non_null(ids);
	assert_non_null(again);

	assert_int_equal(ids_calls(fx, d, l, 50, 10, ids + 50), 3); /* its own */
	assert_int_equal(ids_calls(fx, d, l, 0, 16, ids), 3);	    /* every other */
	assert_int_equal(ids_calls(fx, d, l, 0, n, again), 0);
	assert_memory_equal(again, ids, 16 * sizeof(*ids));
	assert_memory_equal(again + 50, ids + 50, 10 * sizeof(*ids));
	for (size_t i = 2; i < n; i++) {
		snprintf(path, sizeof(path), "d/%s", un_listing_at(l, i)->name);
		assert_int_equal(again[i], t_id(fx, path));
		for (size_t j = 2; j < i; j++)
			assert_int_not_equal(again[i], again[j]);
	}
	un_listing_put(l);
	un_obj_put(d);

	reopen(fx, "l1:l2");
	d = obj(fx, "d");
	l = listing(fx, d);
	assert_int_equal(ids_calls(fx, d, l, 0, 16, ids), 1); /* one read */
	assert_int_equal(ids_calls(fx, d, l, 16, n - 16, ids + 16), 0);
	assert_memory_equal(ids + 2, again + 2, (n - 2) * sizeof(*ids));
	un_listing_put(l);
	un_obj_put(d);
	free(ids);
	free(again);
}

/* A first page whose ask for the whole listing fails still gets its own
 * entries, as a page did before (readdir.c invariant 9); the listing does
 * not ask again, and later pages ask for their own. */
static void test_listing_ahead_fails(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_obj *d;
	un_id ids[42];
	char path[64];

	for (int i = 0; i < 40; i++) {
		snprintf(path, sizeof(path), "l%d/d/f%02d", 1 + i % 2, i);
		t_file(fx, path, "x");
	}
	t_export(fx, "l1:l2", NULL, NULL);
	d = obj(fx, "d");
	l = listing(fx, d);
	assert_int_equal(un_listing_count(l), 42);
	un_sys_inject_reset();
	un_sys_inject(UN_SYS_MDB, 1, EIO); /* the whole listing's read */
	assert_int_equal(un_listing_ids(fx->ex, d, l, 0, 10, ids), 0);
	assert_int_equal(un_sys_calls(UN_SYS_MDB), 4); /* and the page's 3 */
	assert_int_equal(ids_calls(fx, d, l, 10, 32, ids + 10), 3);
	assert_int_equal(ids_calls(fx, d, l, 0, 42, ids), 0);
	for (size_t i = 2; i < 42; i++) {
		snprintf(path, sizeof(path), "d/%s", un_listing_at(l, i)->name);
		assert_int_equal(ids[i], t_id(fx, path));
	}
	un_listing_put(l);
	un_obj_put(d);
}

/* The index of NAME in L. */
static size_t index_of(const struct un_listing *l, const char *name)
{
	for (size_t i = 0; i < un_listing_count(l); i++)
		if (!strcmp(un_listing_at(l, i)->name, name))
			return i;
	fail_msg("%s is not listed", name);
	return 0;
}

/* The nodes a listing remembers follow the table: a copy-up through another
 * name of a lower file parts the group, which changes the node of a name in
 * a directory that did not change; the listing of that directory, asked
 * again, gives the node a lookup gives now, and its handle. */
static void test_entry_ids_follow_table(void **state)
{
	struct fx *fx = *state;
	uint8_t fh[2][UN_FH_MAX], want[UN_FH_MAX];
	un_id id[2], fileid[2];
	struct un_listing *l;
	struct un_obj *d, *o;
	enum un_stable c;
	size_t i;

	t_file(fx, "l2/d/h1", "shared");
	assert_int_equal(link(t_path(fx, "l2/d/h1"), t_path(fx, "l2/h2")), 0);
	w_export(fx);
	d = obj(fx, "d");
	l = listing(fx, d);
	i = index_of(l, "h1");
	assert_int_equal(
	    un_listing_handles(fx->ex, d, l, i, 1, &id[0], &fileid[0], fh[0]),
	    un_handle_encode(fx->ex, id[0], want));
	assert_int_equal(id[0], t_id(fx, "d/h1"));
	assert_memory_equal(fh[0], want, un_handle_encode(fx->ex, id[0], want));

	assert_int_equal(t_walk(fx, "h2", &o), 0);
	assert_int_equal(un_write(fx->ex, o, "SH", 2, 0, UN_UNSTABLE, &c), 2);
	un_obj_put(o);
	assert_int_equal(
	    un_listing_handles(fx->ex, d, l, i, 1, &id[1], &fileid[1], fh[1]),
	    un_handle_encode(fx->ex, id[1], want));
	assert_int_equal(id[1], t_id(fx, "d/h1"));
	assert_int_not_equal(id[1], id[0]);
	assert_int_not_equal(fileid[1], fileid[0]);
	assert_memory_equal(fh[1], want, un_handle_encode(fx->ex, id[1], want));
	un_listing_put(l);
	un_obj_put(d);
}

/* Is PATH on a filesystem where readdir.c remembers attributes (fs_local)? */
static bool local_fs(const char *path)
{
	static const long types[] = {EXT4_SUPER_MAGIC,	XFS_SUPER_MAGIC,
				     BTRFS_SUPER_MAGIC, TMPFS_MAGIC,
				     F2FS_SUPER_MAGIC,	OVERLAYFS_SUPER_MAGIC};
	struct statfs sf;

	assert_int_equal(statfs(path, &sf), 0);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if ((long)sf.f_type == types[i])
			return true;
	return false;
}

/* Attributes of entry NAME of listing L of D, through the listing. */
static struct un_attr entry_attr(struct fx *fx, struct un_obj *d, struct un_listing *l,
				 const char *name)
{
	size_t i = index_of(l, name);
	struct un_attr a;
	un_id id, fileid;

	assert_int_equal(un_listing_nodes(fx->ex, d, l, i, 1, &id, &fileid), 0);
	assert_int_equal(un_listing_attr(fx->ex, d, l, i, fileid, &a), 0);
	return a;
}

/* A listing remembers the attributes of its entries (a second look makes no
 * stat), and every change made in the layer shows at the next look: data,
 * mode, times, a new link (which also ends the remembering of that file),
 * as each one would through a lookup and un_getattr. */
static void test_listing_attr_follows_layers(void **state)
{
	struct fx *fx = *state;
	struct timespec ts[2] = {{.tv_sec = 1000}, {.tv_sec = 2000}};
	struct un_listing *l;
	struct un_obj *d, *o;
	struct un_attr a, b;
	int fd;

	t_file(fx, "l1/d/f", "1");
	t_file(fx, "l1/d/g", "1");
	t_export(fx, "l1", NULL, NULL);
	d = obj(fx, "d");
	l = listing(fx, d);
	a = entry_attr(fx, d, l, "f");
	assert_int_equal(a.size, 1);
	un_sys_inject_reset();
	a = entry_attr(fx, d, l, "f");
	if (local_fs(t_path(fx, "l1")))
		assert_int_equal(un_sys_calls(UN_SYS_STAT), 0); /* remembered */
	else
		print_message("not a local filesystem: nothing is remembered\n");

	fd = open(t_path(fx, "l1/d/f"), O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "2345", 4), 4);
	assert_int_equal(entry_attr(fx, d, l, "f").size, 5);
	assert_int_equal(fchmod(fd, 0600), 0);
	assert_int_equal(entry_attr(fx, d, l, "f").mode & 07777, 0600);
	close(fd);
	assert_int_equal(utimensat(AT_FDCWD, t_path(fx, "l1/d/f"), ts, 0), 0);
	a = entry_attr(fx, d, l, "f");
	assert_int_equal(a.mtime.tv_sec, 2000);
	/* A link made in another directory of the layer reaches no watch of
	 * d: it shows once the remembered attributes are a second old. */
	assert_int_equal(entry_attr(fx, d, l, "g").nlink, 1);
	assert_int_equal(link(t_path(fx, "l1/d/g"), t_path(fx, "l1/g2")), 0);
	usleep(1050 * 1000);
	assert_int_equal(entry_attr(fx, d, l, "g").nlink, 2);

	/* what the listing says is what a lookup says */
	assert_int_equal(un_lookup(fx->ex, d, "f", &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, &b), 0);
	un_obj_put(o);
	assert_memory_equal(&a, &b, sizeof(a));
	un_listing_put(l);
	un_obj_put(d);
}

/* Entry NAME of listing L of D gives, through the listing, what a lookup
 * and un_getattr give; its attributes to *OUT. */
static void entry_attr_eq(struct fx *fx, struct un_obj *d, struct un_listing *l,
			  const char *name, struct un_attr *out)
{
	struct un_attr b;
	struct un_obj *o;

	*out = entry_attr(fx, d, l, name);
	assert_int_equal(un_lookup(fx->ex, d, name, &o), 0);
	assert_int_equal(un_getattr(fx->ex, o, &b), 0);
	un_obj_put(o);
	assert_memory_equal(out, &b, sizeof(b));
}

/* A directory's attributes are remembered with a watch on each of its
 * parts (invariant 8): a second look at a directory merged from the upper
 * and both lowers makes no stat, and each change of a part shows at the
 * next look as un_getattr gives it: a name added to a lower part and one
 * removed from the upper part, which reach no watch of d's own (the ctime,
 * object.c rule 6), and the upper part's mode. */
static void test_listing_attr_merged_dirs(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_attr a, b;
	struct un_obj *d;

	t_file(fx, "u/d/sub/x", "1");
	t_file(fx, "l1/d/sub/y", "1");
	t_file(fx, "l2/d/sub/z", "1");
	t_mkdir(fx, "w");
	t_export(fx, "l1:l2", "u", "w");
	d = obj(fx, "d");
	l = listing(fx, d);
	entry_attr_eq(fx, d, l, "sub", &a);
	assert_int_equal(a.nlink, 1);
	un_sys_inject_reset();
	b = entry_attr(fx, d, l, "sub");
	assert_memory_equal(&a, &b, sizeof(a));
	if (local_fs(t_path(fx, "l1")))
		assert_int_equal(un_sys_calls(UN_SYS_STAT), 0); /* remembered */
	else
		print_message("not a local filesystem: nothing is remembered\n");

	pause_tick();
	t_file(fx, "l2/d/sub/n", "n");
	entry_attr_eq(fx, d, l, "sub", &b);
	assert_false(a.ctime.tv_sec == b.ctime.tv_sec &&
		     a.ctime.tv_nsec == b.ctime.tv_nsec);
	pause_tick();
	t_rm(fx, "u/d/sub/x");
	entry_attr_eq(fx, d, l, "sub", &a);
	assert_false(a.ctime.tv_sec == b.ctime.tv_sec &&
		     a.ctime.tv_nsec == b.ctime.tv_nsec);
	assert_int_equal(chmod(t_path(fx, "u/d/sub"), 0700), 0);
	entry_attr_eq(fx, d, l, "sub", &a);
	assert_int_equal(a.mode & 07777, 0700);
	un_listing_put(l);
	un_obj_put(d);
}

/* The verifier of D's listing now. */
static uint64_t verf_now(struct fx *fx, struct un_obj *d)
{
	struct un_listing *l = listing(fx, d);
	uint64_t v = un_listing_verf(l);

	un_listing_put(l);
	return v;
}

/* Through the union, a link made in another directory shows at once. */
static void test_listing_attr_follows_union(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_obj *d, *e, *o;

	t_file(fx, "u/d/f", "1"); /* upper files: the link changes no dir of d */
	t_file(fx, "u/e/x", "1");
	w_export(fx);
	d = obj(fx, "d");
	e = obj(fx, "e");
	l = listing(fx, d);
	assert_int_equal(entry_attr(fx, d, l, "f").nlink, 1);
	assert_int_equal(entry_attr(fx, d, l, "f").nlink, 1);
	assert_int_equal(un_lookup(fx->ex, d, "f", &o), 0);
	assert_int_equal(un_link(SYNC_CX, fx->ex, o, e, "f2"), 0);
	un_obj_put(o);
	assert_true(un_listing_verf(l) == verf_now(fx, d)); /* d did not change */
	assert_int_equal(entry_attr(fx, d, l, "f").nlink, 2);
	un_listing_put(l);
	un_obj_put(e);
	un_obj_put(d);
}

static void test_not_a_dir(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_obj *f;

	t_file(fx, "l1/f", "1");
	t_export(fx, "l1", NULL, NULL);
	f = obj(fx, "f");
	assert_int_equal(un_listing_get(fx->ex, f, &l), -ENOTDIR);
	un_obj_put(f);
}

static int list_and_ids(struct fx *fx)
{
	struct un_listing *l;
	struct un_obj *d;
	un_id ids[16];
	int rc;

	rc = t_walk(fx, "d", &d);
	if (rc)
		return rc;
	rc = un_listing_get(fx->ex, d, &l);
	if (!rc) {
		rc = un_listing_ids(fx->ex, d, l, 0, un_listing_count(l), ids);
		un_listing_put(l);
	}
	un_obj_put(d);
	return rc;
}

static void test_injected_failures(void **state)
{
	static const enum un_sys_op ops[] = {UN_SYS_OPEN,     UN_SYS_STAT,  UN_SYS_XATTR,
					     UN_SYS_GETDENTS, UN_SYS_ALLOC, UN_SYS_MDB};
	struct fx *fx = *state;
	char name[32];
	int fds, rc;

	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "l%d/d/f%d", 1 + i % 2, i);
		t_file(fx, name, i % 3 ? "x" : "");
	}
	t_file(fx, "l1/d/sub/a", "x");
	t_file(fx, "l2/d/sub/b", "x");
	t_file(fx, "l1/d/.wh.gone", "");
	t_file(fx, "l2/d/gone", "x");
	t_export(fx, "l1:l2", NULL, NULL);
	un_readdir_test_settle_ns(3600ll * 1000000000ll); /* no cache: build each time */
	assert_int_equal(list_and_ids(fx), 0);
	fds = t_nfds();
	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
		unsigned long calls;

		un_sys_inject_reset();
		assert_int_equal(list_and_ids(fx), 0);
		calls = un_sys_calls(ops[k]);
		assert_true(calls > 0);
		for (unsigned long n = 1; n <= calls; n++) {
			un_sys_inject_reset();
			un_sys_inject(ops[k], n, ENOMEM);
			rc = list_and_ids(fx);
			if (rc != -ENOMEM)
				fail_msg("op %zu call %lu: rc %d", k, n, rc);
			assert_int_equal(t_nfds(), fds);
		}
	}
	un_sys_inject_reset();
	assert_int_equal(list_and_ids(fx), 0);
}

/* A name removed between its stat and the read of its xattrs (an empty
 * file: white-out or not?) is gone: the listing leaves it out and fails
 * for nothing.  The xattr read is made to say ENOENT, as it does then. */
static void test_vanished_entry(void **state)
{
	struct fx *fx = *state;
	struct un_listing *l;
	struct un_obj *d;
	unsigned long calls;
	un_id ids[8];

	t_file(fx, "l1/d/e0", "");
	t_file(fx, "l1/d/full", "x");
	t_file(fx, "l2/d/e1", "");
	t_file(fx, "l2/d/e2", "");
	t_export(fx, "l1:l2", NULL, NULL);
	un_readdir_test_settle_ns(3600ll * 1000000000ll); /* no cache: build each time */
	d = obj(fx, "d");
	un_sys_inject_reset();
	l = listing(fx, d);
	assert_int_equal(un_listing_count(l), 6);
	un_listing_put(l);
	calls = un_sys_calls(UN_SYS_XATTR);
	assert_true(calls >= 3);
	for (unsigned long n = 1; n <= calls; n++) {
		un_sys_inject_reset();
		un_sys_inject(UN_SYS_XATTR, n, ENOENT);
		assert_int_equal(un_listing_get(fx->ex, d, &l), 0);
		assert_int_equal(un_listing_count(l), 5); /* one empty file less */
		assert_int_equal(un_listing_ids(fx->ex, d, l, 0, 5, ids), 0);
		un_listing_put(l);
	}
	un_sys_inject_reset();
	l = listing(fx, d);
	assert_int_equal(un_listing_count(l), 6);
	un_listing_put(l);
	un_obj_put(d);
}

struct reader {
	struct fx *fx;
	struct un_obj *dirs[3];
	int rc;
};

static void *read_lists(void *arg)
{
	struct reader *r = arg;

	for (int i = 0; i < 300 && !r->rc; i++) {
		struct un_listing *l;

		r->rc = un_listing_get(r->fx->ex, r->dirs[i % 3], &l);
		if (r->rc)
			break;
		if (un_listing_count(l) != 4)
			r->rc = -EBADMSG;
		un_listing_put(l);
	}
	return NULL;
}

/* Threads sharing a cache that holds one listing: evictions race with use. */
static void test_concurrent_listings(void **state)
{
	struct fx *fx = *state;
	struct reader r[4];
	pthread_t th[4];
	struct un_obj *dirs[3];
	struct un_listing *l;

	t_file(fx, "l1/a/x", "1");
	t_file(fx, "l2/a/y", "1");
	t_file(fx, "l1/b/x", "1");
	t_file(fx, "l2/b/y", "1");
	t_file(fx, "l1/c/x", "1");
	t_file(fx, "l2/c/y", "1");
	t_export(fx, "l1:l2", NULL, NULL);
	dirs[0] = obj(fx, "a");
	dirs[1] = obj(fx, "b");
	dirs[2] = obj(fx, "c");
	l = listing(fx, dirs[0]);
	un_listing_cache_limit(fx->st, un_listing_bytes(l) + 8);
	un_listing_put(l);
	for (int t = 0; t < 4; t++) {
		r[t] = (struct reader){.fx = fx, .dirs = {dirs[0], dirs[1], dirs[2]}};
		assert_int_equal(pthread_create(&th[t], NULL, read_lists, &r[t]), 0);
	}
	for (int t = 0; t < 4; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(r[t].rc, 0);
	}
	for (int i = 0; i < 3; i++)
		un_obj_put(dirs[i]);
}

/* un_listing_attr gives what a lookup and un_getattr give, for every entry of a
 * merged directory: files of either layer, a shadowed name, a directory merged
 * from two layers (link count 1), a symlink, a hard link; -ESTALE once a name
 * is another file than the listing saw. */
static void test_listing_attr(void **state)
{
	struct fx *fx = *state;
	struct un_obj *d, *o;
	struct un_listing *l;
	struct un_attr a, b;
	un_id *ids;
	size_t n;

	t_file(fx, "l1/d/top", "1");
	t_file(fx, "l1/d/both", "12");
	t_file(fx, "l2/d/both", "123");
	t_file(fx, "l2/d/low", "1234");
	t_file(fx, "l1/d/sub/x", "1");
	t_file(fx, "l2/d/sub/y", "1");
	t_symlink(fx, "top", "l2/d/ln");
	assert_int_equal(link(t_path(fx, "l2/d/low"), t_path(fx, "l2/d/hard")), 0);
	t_export(fx, "l1:l2", NULL, NULL);
	d = obj(fx, "d");
	l = listing(fx, d);
	n = un_listing_count(l);
	assert_int_equal(n, 2 + 6);
	ids = calloc(n, sizeof(*ids));
	assert_non_null(ids);
	assert_int_equal(un_listing_ids(fx->ex, d, l, 0, n, ids), 0);
	assert_int_equal(un_listing_attr(fx->ex, d, l, 0, ids[0], &a), -EINVAL);
	for (size_t i = 2; i < n; i++) {
		memset(&a, 0, sizeof(a));
		memset(&b, 0, sizeof(b));
		assert_int_equal(un_listing_attr(fx->ex, d, l, i, ids[i], &a), 0);
		assert_int_equal(un_lookup(fx->ex, d, un_listing_at(l, i)->name, &o), 0);
		assert_int_equal(un_getattr(fx->ex, o, &b), 0);
		assert_int_equal(un_obj_id(o), ids[i]);
		un_obj_put(o);
		assert_memory_equal(&a, &b, sizeof(a));
	}
	/* a name replaced by another file after the build */
	for (size_t i = 2; i < n; i++)
		if (!strcmp(un_listing_at(l, i)->name, "top")) {
			/* made before the old one goes: never its inode */
			t_file(fx, "l1/new", "new");
			assert_int_equal(
			    rename(t_path(fx, "l1/new"), t_path(fx, "l1/d/top")), 0);
			assert_int_equal(un_listing_attr(fx->ex, d, l, i, ids[i], &a),
					 -ESTALE);
		}
	free(ids);
	un_listing_put(l);
	un_obj_put(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_merge),
	    T_TEST(test_entry_ids_follow_table),
	    T_TEST(test_listing_attr_follows_layers),
	    T_TEST(test_listing_attr_follows_union),
	    T_TEST(test_listing_attr_merged_dirs),
	    T_TEST(test_dots_and_order),
	    T_TEST(test_seek),
	    T_TEST(test_forced_collisions),
	    T_TEST(test_cache_and_versions),
	    T_TEST(test_cache_bound),
	    T_TEST(test_verifier),
	    T_TEST(test_entry_ids),
	    T_TEST(test_listing_ahead),
	    T_TEST(test_listing_ahead_fails),
	    T_TEST(test_not_a_dir),
	    T_TEST(test_listing_attr),
	    T_TEST(test_injected_failures),
	    T_TEST(test_vanished_entry),
	    T_TEST(test_concurrent_listings),
	};

	return cmocka_run_group_tests_name("readdir", tests, NULL, NULL);
}
