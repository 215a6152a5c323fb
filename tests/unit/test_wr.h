/* SPDX-License-Identifier: Apache-2.0 */
/* test_wr.h - fixtures for the tests of the engine's write side
 * (test_copyup.c, test_dir.c, test_write.c): a writable export, tree dumps
 * of the engine's merged view and of a real directory, and kernel overlayfs
 * as the oracle (mounted over a second copy of the same layers).
 *
 * On top of test_un.h; the bodies live in fixture_wr.c (library
 * test_fixtures).
 */
#ifndef TEST_WR_H
#define TEST_WR_H

#include "test_un.h"

#include <sys/mount.h>
#include <sys/wait.h>

/* t_setup/t_teardown for write tests.  Cached listings are only used for
 * settled directories, as in production (these tests change directories
 * faster than the timestamp tick); umask is 0, as NFS has none.  Teardown
 * detaches the oracle's mounts a failed test left. */
int w_setup(void **state);
int w_teardown(void **state);
/* A cmocka test run between w_setup and w_teardown. */
#define W_TEST(f) cmocka_unit_test_setup_teardown(f, w_setup, w_teardown)

/* The usual writable export: lowers l1 (top) and l2, upper u, work w. */
void w_export(struct fx *fx);
/* Closes the export and opens w_export's layers again over an empty upper:
 * a fresh start on the same lowers, as a fault sweep wants. */
void w_reset_upper(struct fx *fx);
/* Namespace changes through the engine as a `sync` caller (directories
 * and objects named by their paths in the union): 0 or -errno. */
int w_rename(struct fx *fx, const char *fdir, const char *fname, const char *tdir,
	     const char *tname);
int w_link(struct fx *fx, const char *path, const char *dir, const char *name);
int w_remove(struct fx *fx, const char *dir, const char *name, bool isdir);
/* An exclusive create of regular file NAME (mode 0644) in DIR. */
int w_create(struct fx *fx, const char *dir, const char *name);
bool w_exists(struct fx *fx, const char *rel);
/* Entries of the dir REL (without . and ..). */
int w_count(struct fx *fx, const char *rel);
bool w_is_whiteout(struct fx *fx, const char *rel);
/* The value of xattr NAME of REL ("" if absent; a thread-local buffer). */
const char *w_xattr(struct fx *fx, const char *rel, const char *name);

/* ---- tree dumps: one line per object, sorted, no times ---- */

struct w_dump {
	char **lines;
	size_t n, cap;
};

void w_dump_free(struct w_dump *d);
/* "h=<FNV-1a of FD's data from its offset>" into OUT. */
void w_file_hash(int fd, char *out, size_t outlen);
/* The engine's merged view. */
void w_dump_engine(struct fx *fx, struct w_dump *d);
/* A real directory tree (an overlay mount) below ABS. */
void w_dump_real(const char *abs, struct w_dump *d);
/* An upper layer as stored: white-outs and opaque markers besides the
 * usual; an opaque marker only where a lower layer of LOWERS (NULL-ended)
 * has a directory at the same path. */
void w_dump_upper(const char *abs, const char *const *lowers, struct w_dump *d);
/* Fails the test, printing both dumps, unless they are equal. */
void w_dump_eq(const struct w_dump *a, const struct w_dump *b, const char *what);

/* ---- the kernel overlayfs oracle ---- */

/* Mounts overlayfs over LOWERS (a ':' list, base-relative) with UPPER/WORK
 * on MNT; 0 or -errno (a machine without overlayfs skips the oracle). */
int w_mount(struct fx *fx, const char *lowers, const char *upper, const char *work,
	    const char *mnt);
void w_umount(struct fx *fx, const char *mnt);

/* ---- scripted sequences, applied to the engine and to a kernel mount ---- */

/* One operation: OP names it (see w_apply_engine), A and B are paths, N a
 * mode, size, offset or time, DATA what a write writes. */
struct w_op {
	char op;
	const char *a, *b;
	long n;
	const char *data;
};

/* Applies OP through the engine: 0 or -errno. */
int w_apply_engine(struct fx *fx, const struct w_op *op);
/* Applies OP with system calls below the mount MNT: 0 or -errno. */
int w_apply_kernel(const char *mnt, const struct w_op *op);

/* The oracle: POPULATE builds the layers l1, l2 (and an empty u, w) under a
 * side dir ("A" for the engine, "B" for kernel overlayfs); every op must
 * give the same result on both, then the merged trees and the upper layers
 * as stored must match; last, kernel overlayfs mounted over the engine's
 * layers (its upper and work dir as written) must show the tree the
 * engine shows.  Returns false (skipped) where overlayfs cannot be mounted. */
bool w_oracle(struct fx *fx, void (*populate)(struct fx *, const char *),
	      const struct w_op *ops, size_t n);

#endif
