/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - one line per event on stderr: UTC timestamp, level, message; and
 * the limits that keep a client from deciding how much the log grows.
 * When stderr is the journal's stream (the service's case), a line starts
 * with its syslog priority instead, "<3>err: ...", as sd-daemon(3) asks,
 * and the journal adds the time and the pid itself.
 *
 * Rules:
 *  1. Lines from concurrent workers never interleave: each is formatted into
 *     a local buffer and written with a single write(2) (log_line).
 *  2. A line that a client can cause, or that a fault can repeat on every
 *     call, goes through a limit of its own (rpc_log_limited,
 *     RPC_LOG_LIMITED in rpc.h): a few lines per window of seconds, then
 *     silence counted (rpc_log_limit_pass_at), and the first line of a later
 *     window carries the count.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rpc.h"

_Atomic enum rpc_log_level rpc_log_level = RPC_LOG_INFO;

static const char *const level_names[] = {
    [RPC_LOG_ERR] = "err",
    [RPC_LOG_WARN] = "warn",
    [RPC_LOG_INFO] = "info",
    [RPC_LOG_DEBUG] = "debug",
};

/* syslog(3)'s priorities of our levels: LOG_ERR, LOG_WARNING, LOG_INFO,
 * LOG_DEBUG. */
static const int level_prio[] = {
    [RPC_LOG_ERR] = 3,
    [RPC_LOG_WARN] = 4,
    [RPC_LOG_INFO] = 6,
    [RPC_LOG_DEBUG] = 7,
};

/* Set once at start (main.c), before any thread logs. */
static atomic_bool log_journal;

void rpc_log_set_journal(bool on)
{
	atomic_store(&log_journal, on);
}

/* systemd passes "DEV:INO" of the stream it connected stderr to; stderr is
 * still that stream only when both match (a redirect by a wrapper makes it
 * something else). */
bool rpc_log_stderr_is_journal(const char *journal_stream)
{
	unsigned long long dev, ino;
	struct stat st;
	char tail;

	if (!journal_stream ||
	    sscanf(journal_stream, "%llu:%llu%c", &dev, &ino, &tail) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

bool rpc_log_level_parse(const char *level, enum rpc_log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcasecmp(level, level_names[i]) == 0) {
			*out = (enum rpc_log_level)i;
			return true;
		}
	}
	return false;
}

const char *rpc_log_level_name(enum rpc_log_level level)
{
	return level_names[level];
}

/* The window and the count of lines in it share one word, so that one
 * compare-and-swap takes a line's place: no lock on a path that a flood
 * runs through. */
bool rpc_log_limit_pass_at(struct rpc_log_limit *lim, long long now, unsigned long *quiet)
{
	unsigned long long win = (unsigned long long)(now / RPC_LOG_WINDOW_S) + 1;
	unsigned long long prev = atomic_load(&lim->state), next;

	do {
		if (prev >> 8 != win)
			next = win << 8 | 1;
		else if ((prev & 0xff) < RPC_LOG_BURST)
			next = prev + 1;
		else {
			atomic_fetch_add(&lim->quiet, 1);
			return false;
		}
	} while (!atomic_compare_exchange_weak(&lim->state, &prev, next));
	*quiet = atomic_exchange(&lim->quiet, 0);
	return true;
}

bool rpc_log_limit_pass(struct rpc_log_limit *lim, unsigned long *quiet)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return rpc_log_limit_pass_at(lim, (long long)now.tv_sec, quiet);
}

static size_t format_stamp(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	n += (size_t)snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
	return n < len ? n : len - 1;
}

static bool level_on(enum rpc_log_level lvl)
{
	return lvl <= atomic_load_explicit(&rpc_log_level, memory_order_relaxed);
}

/* Writes one line: stamp, level, FMT with AP, then TAIL (ours, not
 * sanitised). */
static void log_line(enum rpc_log_level lvl, const char *tail, const char *fmt,
		     va_list ap)
{
	char line[1024];
	size_t n;
	int m;

	if (atomic_load_explicit(&log_journal, memory_order_relaxed)) {
		n = 0;
		m = snprintf(line, sizeof(line), "<%d>%s: ", level_prio[lvl],
			     level_names[lvl]);
	} else {
		n = format_stamp(line, sizeof(line));
		m = snprintf(line + n, sizeof(line) - n,
			     " union-nfsd[%d] %s: ", (int)getpid(), level_names[lvl]);
	}
	n += (size_t)m;
	m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (m < 0)
		m = 0;
	if ((size_t)m > sizeof(line) - n - 1)
		m = (int)(sizeof(line) - n - 1);
	/* Client bytes (paths, names) may reach a message: keep it one line. */
	for (size_t i = n; i < n + (size_t)m; i++)
		if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
			line[i] = '?';
	n += (size_t)m;
	n += (size_t)snprintf(line + n, sizeof(line) - n, "%s", tail);
	if (n > sizeof(line) - 2) /* truncated: keep the line a line */
		n = sizeof(line) - 2;
	line[n++] = '\n';
	/* Nothing useful to do if stderr is gone. */
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}

void rpc_log(enum rpc_log_level lvl, const char *fmt, ...)
{
	va_list ap;

	if (!level_on(lvl))
		return;
	va_start(ap, fmt);
	log_line(lvl, "", fmt, ap);
	va_end(ap);
}

void rpc_log_limited(struct rpc_log_limit *lim, enum rpc_log_level lvl, const char *fmt,
		     ...)
{
	char tail[64] = "";
	unsigned long quiet;
	va_list ap;

	if (!level_on(lvl) || !rpc_log_limit_pass(lim, &quiet))
		return;
	if (quiet)
		snprintf(tail, sizeof(tail), " (and %lu more since the last such line)",
			 quiet);
	va_start(ap, fmt);
	log_line(lvl, tail, fmt, ap);
	va_end(ap);
}

void rpc_log_fail(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line),
		     "%sunion-nfsd: ", atomic_load(&log_journal) ? "<3>" : "");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}
