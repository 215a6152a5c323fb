/* SPDX-License-Identifier: Apache-2.0 */
/* read.c - READ's data: copied into a buffer (un_read) or spliced into a
 * pipe (un_read_pipe).
 *
 * un_read copies a file's bytes into the caller's buffer, which the server
 * then copies again into the socket.  Over TCP the server can do
 * without both copies: splice(2) moves references to the file's page-cache
 * pages into a pipe, and a second splice moves them from the pipe into the
 * socket, so the only copy left is the receiver's.  The pipe is the caller's
 * (it outlives the call while the socket drains it); this file fills it.
 *
 * Decisions:
 *  1. The pipe is never waited on: a splice that finds it full ends the read
 *     short (un_sys_splice_read is non-blocking on the pipe side), which
 *     NFSv3 allows; a client asks again for the rest.  A pipe of SRV_MAX_IO
 *     bytes holds a page-aligned READ of that size whole.
 *  2. eof comes from the size after the read (fstat of the descriptor read),
 *     never from a short count, since a full pipe also makes one.
 *  3. A filesystem without splice support answers -EINVAL before a byte
 *     moved, so the caller can read the plain way; an error after some bytes
 *     moved ends the read short with what is in the pipe.
 *  4. The pipe holds the pages, not a copy of them, until the socket has
 *     taken them: a write to the range in between shows in the reply (as a
 *     READ racing a WRITE may show either), while a truncation does not take
 *     the pages away (Linux 6.18: the bytes go out as they were read).
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <unistd.h>

#include "un_private.h"

/* Splices up to COUNT bytes at OFF of FD into PIPEFD (decisions 1, 3). */
static ssize_t splice_full(int fd, int pipefd, size_t count, uint64_t off)
{
	size_t got = 0;
	ssize_t n;

	while (got < count) {
		n = un_sys_splice_read(fd, (off_t)(off + got), pipefd, count - got);
		if (n == -EINTR)
			continue;
		if (n == -EAGAIN || n == 0)
			break;
		if (n < 0)
			return got ? (ssize_t)got : n;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Opens O's file for a read of *COUNT bytes at OFF, clamping *COUNT to
 * what off_t can address.  Returns the descriptor (the caller closes it) or
 * -errno. */
static int open_for_read(const struct un_obj *o, size_t *count, uint64_t off)
{
	if (S_ISDIR(o->type))
		return -EISDIR;
	if (!S_ISREG(o->type))
		return -EINVAL;
	if (*count > SSIZE_MAX)
		*count = SSIZE_MAX;
	if (off >= (uint64_t)INT64_MAX - *count)
		*count = 0; /* nothing can live past off_t's range */
	/* The O_PATH descriptor pins the inode, so this opens the very file
	 * the lookup found, whatever happened to its name since. */
	return un_sys_reopen(o->inst[0].fd, O_RDONLY | O_NOCTTY);
}

/* Reads up to COUNT bytes at OFF of FD, retrying short reads. */
static ssize_t read_full(int fd, char *buf, size_t count, uint64_t off)
{
	size_t got = 0;
	ssize_t n;

	while (got < count) {
		n = un_sys_pread(fd, buf + got, count - got, (off_t)(off + got));
		if (n == -EINTR)
			continue;
		if (n < 0)
			return n;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Reads up to COUNT bytes of O at OFF into BUF, or, when PIPEFD is not -1,
 * into that pipe; *EOF as un_read says.  A short splice may mean a full
 * pipe, not the end of the file; and bytes already in a pipe must be
 * answered even if the stat after them fails. */
static ssize_t read_to(struct un_obj *o, void *buf, int pipefd, size_t count,
		       uint64_t off, bool *eof)
{
	struct stat st;
	ssize_t n;
	int fd, err;

	fd = open_for_read(o, &count, off);
	if (fd < 0)
		return fd;
	n = pipefd < 0 ? read_full(fd, buf, count, off)
		       : splice_full(fd, pipefd, count, off);
	if (n >= 0) {
		err = un_sys_fstat(fd, &st);
		if (err)
			n = pipefd < 0 || n == 0 ? err : n;
		else
			*eof = (pipefd < 0 && (size_t)n < count) ||
			       off + (uint64_t)n >= (uint64_t)st.st_size;
	}
	un_sys_close(fd);
	return n;
}

ssize_t un_read(struct un_export *ex, struct un_obj *o, void *buf, size_t count,
		uint64_t off, bool *eof)
{
	(void)ex;
	return read_to(o, buf, -1, count, off, eof);
}

ssize_t un_read_pipe(struct un_export *ex, struct un_obj *o, int pipefd, size_t count,
		     uint64_t off, bool *eof)
{
	(void)ex;
	assert(pipefd >= 0);
	return read_to(o, NULL, pipefd, count, off, eof);
}
