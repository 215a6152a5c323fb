/* SPDX-License-Identifier: Apache-2.0 */
/* test_fs.h - file-system helpers every unit test may use, whatever it
 * links (library test_fixtures_fs, fixture_fs.c): nothing of the engine's or
 * the server's.
 */
#ifndef TEST_FS_H
#define TEST_FS_H

/* rm -rf of the absolute DIR, never following a symlink (errors ignored:
 * a test's temp dir is gone or left, the test's verdict stands). */
void t_rm_rf(const char *dir);

#endif
