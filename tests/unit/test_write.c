/* SPDX-License-Identifier: Apache-2.0 */
/* test_write.c - attributes and data: SETATTR (mode, owner, times with
 * UTIME_NOW, size) copying up first, WRITE at each stability level with an
 * honest `committed`, COMMIT, the errors, a failure at every step of a
 * truncate, and write/truncate sequences checked against kernel overlayfs. */
#include "test_wr.h"

#include <pthread.h>
#include <sys/syscall.h>

/* Script lines leave trailing fields out on purpose. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static struct un_obj *walk(struct fx *fx, const char *path)
{
	struct un_obj *o = NULL;

	assert_int_equal(t_walk(fx, path, &o), 0);
	return o;
}

static int setattr(struct fx *fx, const char *path, const struct un_sattr *sa)
{
	struct un_obj *o = walk(fx, path);
	int rc = un_setattr(SYNC_CX, fx->ex, o, sa);

	un_obj_put(o);
	return rc;
}

static struct stat upper_stat(struct fx *fx, const char *rel)
{
	struct stat st;

	assert_int_equal(lstat(t_path(fx, rel), &st), 0);
	return st;
}

static void test_setattr_copies_up(void **state)
{
	struct fx *fx = *state;
	struct un_sattr mode = {.set_mode = true, .mode = 0604};
	struct un_sattr own = {.set_uid = true, .uid = 321};
	struct un_sattr grp = {.set_gid = true, .gid = 654};
	struct un_sattr times = {
	    .set_atime = true, .atime = {1000, 5}, .set_mtime = true, .mtime = {2000, 6}};
	struct un_sattr now = {.set_mtime = true, .mtime = {.tv_nsec = UTIME_NOW}};
	struct timespec before;
	struct stat st;
	un_id id;

	t_file(fx, "l2/d/f", "lower data");
	t_file(fx, "l1/d/g", "g");
	w_export(fx);
	id = t_id(fx, "d/f");
	assert_int_equal(setattr(fx, "d/f", &mode), 0);
	assert_int_equal(upper_stat(fx, "u/d/f").st_mode & 07777, 0604);
	assert_int_equal(t_id(fx, "d/f"), id);
	assert_int_equal(setattr(fx, "d/f", &own), 0);
	assert_int_equal(setattr(fx, "d/f", &grp), 0);
	st = upper_stat(fx, "u/d/f");
	assert_int_equal(st.st_uid, 321);
	assert_int_equal(st.st_gid, 654);
	assert_int_equal(setattr(fx, "d/f", &times), 0);
	st = upper_stat(fx, "u/d/f");
	assert_int_equal(st.st_atim.tv_sec, 1000);
	assert_int_equal(st.st_atim.tv_nsec, 5);
	assert_int_equal(st.st_mtim.tv_sec, 2000);
	clock_gettime(CLOCK_REALTIME, &before);
	assert_int_equal(setattr(fx, "d/f", &now), 0);
	st = upper_stat(fx, "u/d/f");
	assert_true(st.st_mtim.tv_sec >= before.tv_sec - 1);
	assert_int_equal(st.st_atim.tv_sec, 1000); /* not asked: kept */
	t_list_eq(fx, "d", "f,g");		   /* the copied-up parent still merges */
	assert_string_equal(w_xattr(fx, "u/d", "trusted.overlay.opaque"), "");
	assert_int_equal(t_id(fx, "d/f"), id);
}

static void test_setattr_size(void **state)
{
	struct fx *fx = *state;
	struct un_sattr down = {.set_size = true, .size = 3};
	struct un_sattr up = {.set_size = true, .size = 1 << 20};
	char buf[16];

	t_file(fx, "l1/f", "0123456789");
	t_mkdir(fx, "l1/dir");
	t_symlink(fx, "f", "l1/ln");
	w_export(fx);
	assert_int_equal(setattr(fx, "f", &down), 0);
	assert_int_equal(t_read(fx, "f", buf, sizeof(buf)), 3);
	assert_string_equal(buf, "012");
	assert_int_equal(setattr(fx, "f", &up), 0);
	assert_int_equal(upper_stat(fx, "u/f").st_size, 1 << 20);
	assert_true(upper_stat(fx, "u/f").st_blocks * 512 < (1 << 20));
	assert_int_equal(setattr(fx, "dir", &down), -EISDIR);
	assert_int_equal(setattr(fx, "ln", &down), -EINVAL);
	assert_false(w_exists(fx, "u/dir")); /* refused before any copy-up */
}

static void test_setattr_nothing_no_copyup(void **state)
{
	struct fx *fx = *state;
	struct un_sattr none = {0};
	struct un_sattr lmode = {.set_mode = true, .mode = 0600};

	t_file(fx, "l1/f", "x");
	t_symlink(fx, "f", "l1/ln");
	t_file(fx, "l2/d/x", "x");
	w_export(fx);
	assert_int_equal(setattr(fx, "f", &none), 0);
	assert_int_equal(w_count(fx, "u"), 0);
	/* a symlink has no mode to set, but the change copies it up */
	assert_int_equal(setattr(fx, "ln", &lmode), 0);
	assert_true(S_ISLNK(upper_stat(fx, "u/ln").st_mode));
	/* a directory: copied up, mode set, still merged */
	assert_int_equal(setattr(fx, "d", &lmode), 0);
	assert_int_equal(upper_stat(fx, "u/d").st_mode & 07777, 0600);
	t_list_eq(fx, "d", "x");
}

static void test_write_stability(void **state)
{
	struct fx *fx = *state;
	enum un_stable c = UN_UNSTABLE;
	struct un_obj *o;
	char buf[32];

	t_file(fx, "l1/f", "abcdef");
	w_export(fx);
	o = walk(fx, "f");
	un_sys_inject_reset();
	assert_int_equal(un_write(fx->ex, o, "XY", 2, 1, UN_UNSTABLE, &c), 2);
	assert_int_equal(c, UN_UNSTABLE);
	/* two syncs: the copy-up's data before its rename (cu_sync), the
	 * parent's entry after it (copyup_locked) */
	assert_int_equal(un_sys_calls(UN_SYS_SYNC), 2);
	assert_int_equal(un_write(fx->ex, o, "XY", 2, 1, UN_UNSTABLE, &c), 2);
	assert_int_equal(un_sys_calls(UN_SYS_SYNC), 2); /* none for the write */
	/* A DATA_SYNC reply promises stable storage too: the data, the table. */
	assert_int_equal(un_write(fx->ex, o, "Z", 1, 6, UN_DATA_SYNC, &c), 1);
	assert_int_equal(c, UN_DATA_SYNC);
	assert_int_equal(un_sys_calls(UN_SYS_SYNC), 4);
	assert_int_equal(un_write(fx->ex, o, "!", 1, 9, UN_FILE_SYNC, &c), 1);
	assert_int_equal(c, UN_FILE_SYNC);
	assert_int_equal(un_sys_calls(UN_SYS_SYNC), 6); /* the file, the table */
	assert_int_equal(t_read(fx, "f", buf, sizeof(buf)), 10);
	assert_memory_equal(buf, "aXYdefZ\0\0!", 10);
	/* A failed sync is no success, and promises nothing. */
	c = UN_UNSTABLE;
	un_sys_inject(UN_SYS_SYNC, 1, EIO);
	assert_int_equal(un_write(fx->ex, o, "?", 1, 0, UN_FILE_SYNC, &c), -EIO);
	assert_int_equal(c, UN_UNSTABLE);
	un_sys_inject(UN_SYS_SYNC, 2, EIO); /* the table's */
	assert_int_equal(un_write(fx->ex, o, "?", 1, 0, UN_DATA_SYNC, &c), -EIO);
	assert_int_equal(c, UN_UNSTABLE);
	un_sys_inject_reset();
	assert_int_equal(un_commit(fx->ex, o), 0);
	assert_int_equal(un_sys_calls(UN_SYS_SYNC), 2);
	un_sys_inject(UN_SYS_SYNC, 1, EIO);
	assert_int_equal(un_commit(fx->ex, o), -EIO);
	un_obj_put(o);
}

static void test_write_errors(void **state)
{
	struct fx *fx = *state;
	enum un_stable c;
	struct un_obj *o;

	t_file(fx, "l1/f", "x");
	t_mkdir(fx, "l1/d");
	assert_int_equal(mkfifo(t_path(fx, "l1/p"), 0644), 0);
	w_export(fx);
	o = walk(fx, "d");
	assert_int_equal(un_write(fx->ex, o, "x", 1, 0, UN_UNSTABLE, &c), -EISDIR);
	un_obj_put(o);
	o = walk(fx, "p");
	assert_int_equal(un_write(fx->ex, o, "x", 1, 0, UN_UNSTABLE, &c), -EINVAL);
	un_obj_put(o);
	o = walk(fx, "f");
	assert_int_equal(un_write(fx->ex, o, "x", 1, INT64_MAX, UN_UNSTABLE, &c), -EFBIG);
	un_obj_put(o);
	assert_int_equal(w_count(fx, "u"), 0);
	t_export(fx, "l1", NULL, NULL);
	o = walk(fx, "f");
	assert_int_equal(un_write(fx->ex, o, "x", 1, 0, UN_UNSTABLE, &c), -EROFS);
	assert_int_equal(
	    un_setattr(SYNC_CX, fx->ex, o, &(struct un_sattr){.set_mode = true}), -EROFS);
	assert_int_equal(un_commit(fx->ex, o), 0);
	un_obj_put(o);
}

struct as_other {
	struct fx *fx;
	int chmod, trunc, times, mnow, now, chown;
};

static void *as_other_main(void *arg)
{
	struct as_other *a = arg;
	struct un_sattr mode = {.set_mode = true, .mode = 0600};
	struct un_sattr size = {.set_size = true, .size = 0};
	struct un_sattr times = {.set_mtime = true, .mtime = {5, 0}};
	struct un_sattr now = {.set_atime = true,
			       .atime = {.tv_nsec = UTIME_NOW},
			       .set_mtime = true,
			       .mtime = {.tv_nsec = UTIME_NOW}};
	struct un_sattr mnow = {.set_mtime = true, .mtime = {.tv_nsec = UTIME_NOW}};
	struct un_sattr own = {.set_uid = true, .uid = 4242};

	syscall(SYS_setfsgid, 4242);
	syscall(SYS_setfsuid, 4242);
	a->chmod = setattr(a->fx, "ro", &mode);
	a->trunc = setattr(a->fx, "ro", &size);
	a->times = setattr(a->fx, "rw", &times);
	a->chown = setattr(a->fx, "rw", &own);
	a->mnow = setattr(a->fx, "rw", &mnow);
	a->now = setattr(a->fx, "rw", &now);
	return NULL;
}

/* Changes the caller may not make are refused before any copy-up. */
static void test_setattr_denied(void **state)
{
	struct fx *fx = *state;
	struct as_other a = {.fx = fx};
	pthread_t th;

	t_file(fx, "l1/ro", "root's");
	t_file(fx, "l1/rw", "everyone's");
	assert_int_equal(chmod(t_path(fx, "l1/rw"), 0666), 0);
	w_export(fx);
	pthread_create(&th, NULL, as_other_main, &a);
	pthread_join(th, NULL);
	assert_int_equal(a.chmod, -EPERM);
	assert_int_equal(a.trunc, -EACCES);
	assert_int_equal(a.times, -EPERM);
	assert_int_equal(a.chown, -EPERM);
	assert_false(w_exists(fx, "u/ro"));
	assert_int_equal(a.mnow, -EPERM); /* only mtime: as explicit times */
	assert_int_equal(a.now, 0);	  /* write permission is enough for a touch */
	assert_true(w_exists(fx, "u/rw"));
}

/* A fresh upper (the node table stays) and the walk to the lower file F. */
static struct un_obj *truncate_setup(struct fx *fx)
{
	struct un_obj *o = NULL;

	w_reset_upper(fx);
	assert_int_equal(t_walk(fx, "a/b/f", &o), 0);
	return o;
}

/* A failure at each step of a truncate of a lower file two levels down: the
 * file is as it was, unless the failure hit the sync that follows the change
 * (un_sync_change, the last SYNCCALLS calls), which reports the error of a
 * change it could not make durable. */
static void test_truncate_faults(void **state)
{
	struct fx *fx = *state;
	struct un_sattr sa = {.set_size = true, .size = 4};
	unsigned long calls, synccalls;
	struct un_obj *o;
	char buf[64];
	int fds, rc;

	t_file(fx, "l2/a/b/f", "0123456789");
	w_export(fx);
	fds = t_nfds();
	/* the calls of one truncate as the loop makes it (the table knows the
	 * names from the first), and of the sync at its end */
	assert_int_equal(setattr(fx, "a/b/f", &sa), 0);
	o = truncate_setup(fx);
	un_sys_inject_reset();
	assert_int_equal(un_setattr(SYNC_CX, fx->ex, o, &sa), 0);
	calls = un_sys_calls(UN_SYS_ANY);
	un_sys_inject_reset();
	assert_int_equal(un_sync_change(fx->ex, &UN_CHANGE(SYNC_CX), o, NULL), 0);
	synccalls = un_sys_calls(UN_SYS_ANY);
	un_obj_put(o);
	for (unsigned long n = 1; n <= calls; n++) {
		o = truncate_setup(fx);
		un_sys_inject_reset();
		un_sys_inject(UN_SYS_ANY, n, EIO);
		rc = un_setattr(SYNC_CX, fx->ex, o, &sa);
		un_sys_inject_reset();
		un_obj_put(o);
		assert_true(rc == 0 || rc == -EIO || rc == -ENOMEM);
		assert_int_equal(t_read(fx, "a/b/f", buf, sizeof(buf)),
				 rc && n <= calls - synccalls ? 10 : 4);
		assert_int_equal(w_count(fx, "w/work"), 0);
		assert_int_equal(t_nfds(), fds);
		assert_int_equal(setattr(fx, "a/b/f", &sa), 0);
		assert_int_equal(t_read(fx, "a/b/f", buf, sizeof(buf)), 4);
	}
}

/* ---- against kernel overlayfs ---- */

static void populate(struct fx *fx, const char *side)
{
	char p[PATH_MAX];

#define P(rel) (snprintf(p, sizeof(p), "%s/%s", side, rel), p)
	t_mkdir(fx, P("u"));
	t_mkdir(fx, P("w"));
	t_file(fx, P("l2/d/x"), "0123456789abcdef");
	t_file(fx, P("l1/d/y"), "y");
	t_file(fx, P("l1/f"), "top");
	t_file(fx, P("l2/f"), "hidden below");
	t_file(fx, P("l2/deep/er/z"), "zzz");
	t_mkdir(fx, P("l1/e"));
#undef P
}

static void test_oracle_data(void **state)
{
	static const struct w_op ops[] = {
	    {'w', "d/x", 0, 4, "WXYZ"},
	    {'w', "d/x", 0, 16, "append"},
	    {'w', "d/x", 0, 100, "gap"},
	    {'t', "d/x", 0, 50},
	    {'t', "d/x", 0, 200},
	    {'t', "d/y", 0, 0},
	    {'w', "d/y", 0, 0, "new y"},
	    {'x', "f", 0, 0600},
	    {'x', "d", 0, 0700},
	    {'x', "deep/er/z", 0, 0640},
	    {'w', "deep/er/z", 0, 1, "Z"},
	    {'t', "deep/er", 0, 0},
	    {'w', "deep", 0, 0, "x"},
	    {'c', "e/n", 0, 0666},
	    {'w', "e/n", 0, 1000, "late"},
	    {'t', "e/n", 0, 10},
	    {'o', "e/n", 0, 1234},
	    {'x', "e", 0, 0751},
	    {'i', "f", 0, 42},
	    {'w', "none", 0, 0, "x"},
	};

	if (!w_oracle(*state, populate, ops, sizeof(ops) / sizeof(ops[0])))
		skip();
}

/* Stable WRITEs of one file in flight together share its fsyncs (write.c
 * rule 4): A's fsync is held while B and C write; B and C must wait for a
 * run begun after their writes, one for both. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int begun, fail_first;
	bool released;
} ws = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

/* Counts the fsyncs of regular files, holding the first until released. */
static int ws_hook(int fd, bool begin)
{
	struct stat st;
	int err = 0;

	if (!begin || fstat(fd, &st) || !S_ISREG(st.st_mode))
		return 0;
	pthread_mutex_lock(&ws.lock);
	if (++ws.begun == 1) {
		pthread_cond_broadcast(&ws.cond);
		while (!ws.released)
			pthread_cond_wait(&ws.cond, &ws.lock);
		err = ws.fail_first;
	}
	pthread_mutex_unlock(&ws.lock);
	return err;
}

struct ws_write {
	struct fx *fx;
	struct un_obj *o;
	uint64_t off;
	ssize_t rc;
};

static void *ws_main(void *arg)
{
	struct ws_write *w = arg;
	enum un_stable c;

	w->rc = un_write(w->fx->ex, w->o, "S", 1, w->off, UN_FILE_SYNC, &c);
	return NULL;
}

static bool ws_others_wait(struct fx *fx)
{
	for (int i = 0; i < 2000; i++) {
		if (un_fsyncs_test_sleepers(fx->st) == 2)
			return true;
		usleep(5000);
	}
	return false;
}

/* A's held fsync (failing with FAIL, if not 0), B and C written meanwhile,
 * then A let go; the file's fsyncs in ws.begun. */
static void ws_scenario(struct fx *fx, int fail, struct ws_write w[3])
{
	pthread_t th[3];

	t_file(fx, "u/f", "abcdef");
	w_export(fx);
	for (int i = 0; i < 3; i++)
		w[i] =
		    (struct ws_write){.fx = fx, .o = walk(fx, "f"), .off = (uint64_t)i};
	ws.begun = 0;
	ws.released = false;
	ws.fail_first = fail;
	un_sys_test_fsync_hook(ws_hook);
	assert_int_equal(pthread_create(&th[0], NULL, ws_main, &w[0]), 0);
	pthread_mutex_lock(&ws.lock);
	while (ws.begun == 0)
		pthread_cond_wait(&ws.cond, &ws.lock);
	pthread_mutex_unlock(&ws.lock);
	assert_int_equal(pthread_create(&th[1], NULL, ws_main, &w[1]), 0);
	assert_int_equal(pthread_create(&th[2], NULL, ws_main, &w[2]), 0);
	assert_true(ws_others_wait(fx));
	pthread_mutex_lock(&ws.lock);
	ws.released = true;
	pthread_cond_broadcast(&ws.cond);
	pthread_mutex_unlock(&ws.lock);
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		un_obj_put(w[i].o);
	}
	un_sys_test_fsync_hook(NULL);
	assert_int_equal(un_fsyncs_test_users(fx->st), 0);
}

static void test_write_stable_shared(void **state)
{
	struct fx *fx = *state;
	struct ws_write w[3];
	char buf[16];

	ws_scenario(fx, 0, w);
	for (int i = 0; i < 3; i++)
		assert_int_equal(w[i].rc, 1);
	assert_int_equal(ws.begun, 2); /* A's, then one for B and C */
	assert_int_equal(t_read(fx, "f", buf, sizeof(buf)), 6);
	assert_memory_equal(buf, "SSSdef", 6);
}

/* A run that fails while a write is under way fails that write too, though
 * the run it waited for succeeded: the failed fsync may have met its page
 * and reported the error only to the descriptor it ran on. */
static void test_write_stable_shared_error(void **state)
{
	struct fx *fx = *state;
	struct ws_write w[3];

	ws_scenario(fx, EIO, w);
	assert_int_equal(w[0].rc, -EIO);
	assert_int_equal(w[1].rc, -EIO);
	assert_int_equal(w[2].rc, -EIO);
	assert_int_equal(ws.begun, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    W_TEST(test_setattr_copies_up),
	    W_TEST(test_setattr_size),
	    W_TEST(test_setattr_nothing_no_copyup),
	    W_TEST(test_write_stability),
	    W_TEST(test_write_stable_shared),
	    W_TEST(test_write_stable_shared_error),
	    W_TEST(test_write_errors),
	    W_TEST(test_setattr_denied),
	    W_TEST(test_truncate_faults),
	    W_TEST(test_oracle_data),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
