/* SPDX-License-Identifier: Apache-2.0 */
/* fixture_fs.c - file-system helpers of the unit tests (test_fs.h). */
#define _GNU_SOURCE
#include "test_fs.h"

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

void t_rm_rf(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
