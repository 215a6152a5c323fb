/* SPDX-License-Identifier: Apache-2.0 */
/* test_un.h - fixtures for the union engine's unit tests: layers built in a
 * temp dir, a state dir beside them, and small path helpers.
 *
 * The bodies live in fixture_un.c (library test_fixtures).  Paths given to the helpers
 * are relative to the fixture's base dir, e.g. t_file(fx, "l1/a/f", "data").
 */
#ifndef TEST_UN_H
#define TEST_UN_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_fs.h"
#include "un_private.h"

/* The context of a `sync` caller, and of an `async` one (union.h, struct
 * un_ctx): what the engine's changes get in these tests. */
#define SYNC_CX	 (&(const struct un_ctx){.async = false})
#define ASYNC_CX (&(const struct un_ctx){.async = true})

/* Test paths are short; a truncated one would fail the test anyway. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

struct fx {
	char base[PATH_MAX];
	struct un_state *st;
	struct un_export *ex;
};

/* FX->base/REL, in one of four rotating thread-local buffers. */
const char *t_path(struct fx *fx, const char *rel);
/* mkdir -p of REL; fails the test unless it exists after. */
void t_mkdir(struct fx *fx, const char *rel);
/* Makes the parent dirs of REL. */
void t_parent(struct fx *fx, const char *rel);
/* Writes DATA to file REL (made, or truncated). */
void t_file(struct fx *fx, const char *rel, const char *data);
/* An overlayfs white-out: a 0:0 character device. */
void t_chr0(struct fx *fx, const char *rel);
void t_xattr(struct fx *fx, const char *rel, const char *name, const char *val);
void t_symlink(struct fx *fx, const char *target, const char *rel);
void t_rm(struct fx *fx, const char *rel);
/* Open descriptors of this process (to find leaks). */
int t_nfds(void);

/* cmocka setup/teardown: a fresh base dir and state dir, the engine's test
 * switches reset; teardown closes the export and removes the base dir. */
int t_setup(void **state);
int t_teardown(void **state);
/* A cmocka test run between t_setup and t_teardown. */
#define T_TEST(f) cmocka_unit_test_setup_teardown(f, t_setup, t_teardown)

/* Opens the export "/" over LOWERS (a ':'-separated list, top-most first, of
 * paths relative to the base) and UPPER/WORK (NULL: read-only), closing the
 * one open before.  Returns the un_export_open result; ERR gets its message. */
int t_export_try(struct fx *fx, const char *lowers, const char *upper, const char *work,
		 char *err, size_t errlen);
/* The same, failing the test on error. */
void t_export(struct fx *fx, const char *lowers, const char *upper, const char *work);
void t_export_close(struct fx *fx);

/* Looks up the '/'-separated PATH from the root; returns 0 or -errno. */
int t_walk(struct fx *fx, const char *path, struct un_obj **out);
/* The errno of looking PATH up (0 if found). */
int t_lookup_rc(struct fx *fx, const char *path);
/* The id of PATH, which must exist. */
un_id t_id(struct fx *fx, const char *path);
/* Reads all of regular file PATH of the union into BUF (NUL-terminated). */
ssize_t t_read(struct fx *fx, const char *path, char *buf, size_t size);
/* strcmp for qsort of an array of strings. */
int t_strcmp_ptr(const void *a, const void *b);
/* The merged listing of dir PATH as "name,name,..." sorted by name, without
 * "." and ".." (to free). */
char *t_list(struct fx *fx, const char *path);

#define t_list_eq(fx, path, want)                                                        \
	do {                                                                             \
		char *got_ = t_list(fx, path);                                           \
		assert_string_equal(got_, want);                                         \
		free(got_);                                                              \
	} while (0)

#endif
