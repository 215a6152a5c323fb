/* SPDX-License-Identifier: Apache-2.0 */
/* report.c - what the engine tells its owner as it runs: a failure of the
 * node table (un_state_failed) and notices for the log (un_notice), each
 * to the function the server set (un_state_on_error, un_state_on_notice).
 *
 * The engine has no log (union.h); these two calls are its only voice.
 * They call nothing of the engine but the syscall seam, so the table's
 * code (node.c, sync.c) and the layers' (layerid.c, retire.c) report from
 * wherever they stand without calling back up into the state.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>

#include "un_private.h"

void un_state_on_error(struct un_state *st, un_state_error_fn *fn)
{
	atomic_store(&st->sh->on_error, fn);
}

void un_state_on_notice(struct un_state *st, un_state_notice_fn *fn)
{
	atomic_store(&st->sh->on_notice, fn);
}

void un_state_failed(struct un_state *st, int err, const char *what)
{
	un_state_error_fn *fn = atomic_load(&st->sh->on_error);

	if (!fn)
		return;
	if (err == -EIO && un_sys_disk_full(st->dir))
		err = -ENOSPC;
	fn(err, what, st->dir);
}

void un_notice(struct un_state *st, const char *fmt, ...)
{
	un_state_notice_fn *fn = atomic_load(&st->sh->on_notice);
	char line[2 * PATH_MAX + 256];
	va_list ap;

	if (!fn)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fn(line);
}
