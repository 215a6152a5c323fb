/* SPDX-License-Identifier: Apache-2.0 */
/* it_util.h - small helpers the integration tests and their tools share
 * (time, file types, a test's temp dir of layers, a failed set-up).  Library it_util; it
 * needs nothing beyond libc, so the libnfs tools link it too.
 */
#ifndef IT_UTIL_H
#define IT_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Sleeps MS milliseconds (an interrupted sleep ends early). */
void it_sleep_ms(long ms);
/* Seconds on CLOCK_MONOTONIC. */
double it_now_s(void);
/* One letter for the file type in MODE (ls -l's, 'f' for a regular file,
 * '?' for none of the seven). */
char it_type_char(uint32_t mode);
/* Makes the temp dir TMP from TEMPLATE (mkdtemp's, ending in XXXXXX; TMP
 * holds LEN bytes) and the empty layer dirs lower, upper and work in it.
 * 0, or -1 with errno set; TMP is "" when even the temp dir failed. */
int it_tmp_layers(char *tmp, size_t len, const char *template);
/* A loopback TCP port free now (bound and released: a server started next
 * binds it), or -1. */
int it_free_port(void);
/* A set-up step failed: prints WHAT, PATH and errno's message, runs
 * CLEANUP (everything made so far goes) and ends the test, as skipped (77)
 * when the machine refused the step (EPERM), else failed. */
_Noreturn void it_setup_failed(const char *what, const char *path, void (*cleanup)(void));

#endif
