/* SPDX-License-Identifier: Apache-2.0 */
/* fixture_un.c - the union engine's test fixture (test_un.h). */
#include "test_un.h"

const char *t_path(struct fx *fx, const char *rel)
{
	static __thread char buf[4][PATH_MAX];
	static __thread int next;
	char *p = buf[next++ & 3];

	snprintf(p, PATH_MAX, "%s/%s", fx->base, rel);
	return p;
}

void t_mkdir(struct fx *fx, const char *rel)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s", t_path(fx, rel));
	for (char *s = p + strlen(fx->base) + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		mkdir(p, 0755);
		*s = '/';
	}
	if (mkdir(p, 0755) && errno != EEXIST)
		fail_msg("mkdir %s: %s", p, strerror(errno));
}

/* Makes the parent dirs of REL. */
void t_parent(struct fx *fx, const char *rel)
{
	char p[PATH_MAX], *slash;

	snprintf(p, sizeof(p), "%s", rel);
	slash = strrchr(p, '/');
	if (slash) {
		*slash = '\0';
		t_mkdir(fx, p);
	}
}

void t_file(struct fx *fx, const char *rel, const char *data)
{
	int fd;

	t_parent(fx, rel);
	fd = open(t_path(fx, rel), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	close(fd);
}

/* An overlayfs white-out: a 0:0 character device. */
void t_chr0(struct fx *fx, const char *rel)
{
	t_parent(fx, rel);
	assert_int_equal(mknod(t_path(fx, rel), S_IFCHR | 0, makedev(0, 0)), 0);
}

void t_xattr(struct fx *fx, const char *rel, const char *name, const char *val)
{
	if (lsetxattr(t_path(fx, rel), name, val, strlen(val), 0))
		fail_msg("setxattr %s %s: %s", rel, name, strerror(errno));
}

void t_symlink(struct fx *fx, const char *target, const char *rel)
{
	t_parent(fx, rel);
	assert_int_equal(symlink(target, t_path(fx, rel)), 0);
}

void t_rm(struct fx *fx, const char *rel)
{
	if (remove(t_path(fx, rel)))
		fail_msg("remove %s: %s", rel, strerror(errno));
}

/* Open descriptors of this process (to find leaks). */
int t_nfds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

int t_setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	snprintf(fx->base, sizeof(fx->base), "/tmp/un-test-XXXXXX");
	assert_non_null(mkdtemp(fx->base));
	assert_int_equal(un_state_open(t_path(fx, "state"), &fx->st), 0);
	un_readdir_test_settle_ns(0); /* test dirs are always fresh */
	un_readdir_test_hash_bits(63);
	/* No opaque memo (opaque.c): counts of xattr calls stay the same
	 * however long a test runs; test_lookup turns it on where it checks it. */
	un_lookup_test_settle_ns(LLONG_MAX);
	un_sys_inject_reset();
	un_sys_test_no_openat2(false);
	un_sys_test_no_getxattrat(false);
	*state = fx;
	return 0;
}

void t_export_close(struct fx *fx)
{
	un_export_close(fx->ex);
	fx->ex = NULL;
}

int t_teardown(void **state)
{
	struct fx *fx = *state;

	un_sys_inject_reset();
	t_export_close(fx);
	un_state_close(fx->st);
	t_rm_rf(fx->base);
	free(fx);
	return 0;
}

/* Opens the export "/" over LOWERS (a ':'-separated list, top-most first, of
 * paths relative to the base) and UPPER/WORK (NULL: read-only).  Returns the
 * un_export_open result; ERR gets its message. */
int t_export_try(struct fx *fx, const char *lowers, const char *upper, const char *work,
		 char *err, size_t errlen)
{
	char list[PATH_MAX], up[PATH_MAX], wk[PATH_MAX], *lv[UN_LAYERS_MAX], *save = NULL;
	const char *clv[UN_LAYERS_MAX];
	size_t n = 0;
	struct un_export_cfg cfg = {.path = "/"};

	snprintf(list, sizeof(list), "%s", lowers);
	for (char *t = strtok_r(list, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
		lv[n] = strdup(t_path(fx, t));
		clv[n] = lv[n];
		n++;
	}
	cfg.lowerdirs = clv;
	cfg.nlower = n;
	if (upper) {
		snprintf(up, sizeof(up), "%s", t_path(fx, upper));
		cfg.upperdir = up;
	}
	if (work) {
		snprintf(wk, sizeof(wk), "%s", t_path(fx, work));
		cfg.workdir = wk;
	}
	t_export_close(fx);
	int rc = un_export_open(fx->st, &cfg, &fx->ex, err, errlen);
	for (size_t i = 0; i < n; i++)
		free(lv[i]);
	return rc;
}

void t_export(struct fx *fx, const char *lowers, const char *upper, const char *work)
{
	char err[256] = "";
	int rc = t_export_try(fx, lowers, upper, work, err, sizeof(err));

	if (rc)
		fail_msg("un_export_open: %d %s", rc, err);
}

/* Looks up the '/'-separated PATH from the root; returns 0 or -errno. */
int t_walk(struct fx *fx, const char *path, struct un_obj **out)
{
	char p[PATH_MAX], *save = NULL;
	struct un_obj *cur, *next;
	int rc;

	rc = un_root(fx->ex, &cur);
	if (rc)
		return rc;
	snprintf(p, sizeof(p), "%s", path);
	for (char *t = strtok_r(p, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
		rc = un_lookup(fx->ex, cur, t, &next);
		un_obj_put(cur);
		if (rc)
			return rc;
		cur = next;
	}
	*out = cur;
	return 0;
}

/* The errno of looking PATH up (0 if found). */
int t_lookup_rc(struct fx *fx, const char *path)
{
	struct un_obj *o = NULL;
	int rc = t_walk(fx, path, &o);

	if (!rc)
		un_obj_put(o);
	return rc;
}

un_id t_id(struct fx *fx, const char *path)
{
	struct un_obj *o = NULL;
	un_id id;

	assert_int_equal(t_walk(fx, path, &o), 0);
	id = un_obj_id(o);
	un_obj_put(o);
	return id;
}

/* Reads all of regular file PATH of the union into BUF (NUL-terminated). */
ssize_t t_read(struct fx *fx, const char *path, char *buf, size_t size)
{
	struct un_obj *o = NULL;
	bool eof = false;
	ssize_t n;

	n = t_walk(fx, path, &o);
	if (n)
		return n;
	n = un_read(fx->ex, o, buf, size - 1, 0, &eof);
	un_obj_put(o);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

int t_strcmp_ptr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The merged listing of dir PATH as "name,name,..." sorted by name, without
 * "." and "..". */
char *t_list(struct fx *fx, const char *path)
{
	struct un_listing *l;
	struct un_obj *o = NULL;
	size_t n, len = 0;
	const char **names;
	char *out;

	assert_int_equal(t_walk(fx, path, &o), 0);
	assert_int_equal(un_listing_get(fx->ex, o, &l), 0);
	n = un_listing_count(l);
	names = calloc(n + 1, sizeof(*names));
	for (size_t i = 2; i < n; i++) {
		names[i - 2] = un_listing_at(l, i)->name;
		len += strlen(names[i - 2]) + 1;
	}
	qsort(names, n - 2, sizeof(*names), t_strcmp_ptr);
	out = calloc(1, len + 1);
	for (size_t i = 0; i + 2 < n; i++) {
		if (i)
			strcat(out, ",");
		strcat(out, names[i]);
	}
	free(names);
	un_listing_put(l);
	un_obj_put(o);
	return out;
}
