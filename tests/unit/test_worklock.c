/* SPDX-License-Identifier: Apache-2.0 */
/* test_worklock.c - one server at a time writes an upper (union/workdir.c
 * rule 3): a second open of a writable union whose work dir is locked is
 * refused with -EAGAIN and the holder named, touching neither the work dir
 * nor the upper; it opens once the holder closed; a reload's successor
 * shares the holder's lock. */
#include "test_un.h"

static int open_second(struct fx *fx, struct un_export **out, char *err, size_t errlen)
{
	char low[PATH_MAX], up[PATH_MAX], wk[PATH_MAX];
	const char *lv[] = {low};
	struct un_export_cfg cfg = {.path = "/second",
				    .lowerdirs = lv,
				    .nlower = 1,
				    .upperdir = up,
				    .workdir = wk};

	snprintf(low, sizeof(low), "%s", t_path(fx, "l1"));
	snprintf(up, sizeof(up), "%s", t_path(fx, "u"));
	snprintf(wk, sizeof(wk), "%s", t_path(fx, "w"));
	return un_export_open(fx->st, &cfg, out, err, errlen);
}

static void test_second_server_refused(void **state)
{
	struct fx *fx = *state;
	struct un_export *second = NULL;
	char err[512] = "", pid[32], who[128] = "", *list;
	struct stat sb;
	FILE *f;

	t_file(fx, "l1/f", "1");
	t_mkdir(fx, "u");
	t_mkdir(fx, "w");
	t_export(fx, "l1", "u", "w");
	t_file(fx, "w/work/#un-temp", "a copy-up under way"); /* the holder's */
	t_file(fx, "u/mine", "m");

	assert_int_equal(open_second(fx, &second, err, sizeof(err)), -EAGAIN);
	snprintf(pid, sizeof(pid), "pid %ld host ", (long)getpid());
	assert_non_null(strstr(err, "served by another server"));
	assert_non_null(strstr(err, pid));
	assert_int_equal(stat(t_path(fx, "w/work/#un-temp"), &sb), 0);
	list = t_list(fx, ""); /* the holder's view, unchanged */
	assert_string_equal(list, "f,mine");
	free(list);

	t_export_close(fx); /* the holder goes: the lock with it */
	assert_int_equal(open_second(fx, &second, err, sizeof(err)), 0);
	assert_int_equal(stat(t_path(fx, "w/work/#un-temp"), &sb), -1); /* emptied now */
	f = fopen(t_path(fx, "w/union-nfsd.lock"), "r");
	assert_non_null(f);
	assert_non_null(fgets(who, sizeof(who), f));
	fclose(f);
	assert_int_equal(strncmp(who, pid, strlen(pid)), 0);
	un_export_close(second);
}

static void test_lock_failure(void **state)
{
	struct fx *fx = *state;
	char err[512] = "";

	t_file(fx, "l1/f", "1");
	t_mkdir(fx, "u");
	t_mkdir(fx, "w");
	un_sys_inject(UN_SYS_LOCK, 1, EIO);
	assert_int_equal(t_export_try(fx, "l1", "u", "w", err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "union-nfsd.lock"));
	un_sys_inject_reset();
	t_export(fx, "l1", "u", "w");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_second_server_refused),
	    T_TEST(test_lock_failure),
	};

	return cmocka_run_group_tests_name("worklock", tests, NULL, NULL);
}
