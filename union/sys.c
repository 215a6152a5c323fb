/* SPDX-License-Identifier: Apache-2.0 */
/* sys.c - the syscall seam of the union engine.
 *
 * Every kernel call and allocation of union/ goes through one of these
 * wrappers, for two reasons: one place to see what the engine asks of the
 * kernel, and one place where tests make a chosen call fail (ENOMEM, EIO,
 * ENOSPC...) to check that every failure path returns an error, frees what it
 * took and leaves the layers and the table consistent.
 *
 * Injection is global and meant for single-threaded tests: un_sys_inject arms
 * "the Nth call of this kind from now fails once with this errno";
 * UN_SYS_ANY counts the calls of every kind, so a test can fail each step of
 * an operation in turn.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "un_private.h"

/* LeakSanitizer looks for pointers in the heap, globals, stacks and the
 * regions it is told of.  An export lives in a mapping of its own
 * (rcache.c) and points at heap blocks: untold, it would call those
 * leaked while the export is open (libFuzzer checks for leaks after each
 * input, with the fuzz target's export open). */
#if defined(__SANITIZE_ADDRESS__)
#define UN_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UN_LSAN 1
#endif
#endif
#ifdef UN_LSAN
#include <sanitizer/lsan_interface.h>
#endif

/* "/proc/self/fd/" + an int + "/" + a name + NUL */
#define PROC_FD_PATH_MAX (sizeof("/proc/self/fd/") + 12 + UN_NAME_MAX + 2)

struct inject {
	atomic_ulong calls;  /* calls since the last reset */
	atomic_ulong target; /* the failing call's number; 0: none */
	atomic_int err;
};

static struct inject injects[UN_SYS_NOPS];

/* Set by the first un_sys_inject or un_sys_inject_reset (tests only): until
 * then the seam neither counts nor checks, so a server's system calls do not
 * all bounce the same counters' cache lines between CPUs. */
static atomic_bool seam_used;

/* openat2 is tried first; once it is refused as unknown we stop asking. */
static atomic_bool no_openat2;

void un_sys_test_no_openat2(bool on)
{
	atomic_store(&no_openat2, on);
}

/* un_state_test_no_sync's switch: a test switch, kept with the seam's. */
static atomic_bool no_sync;

void un_state_test_no_sync(bool on)
{
	atomic_store(&no_sync, on);
}

bool un_sys_test_no_sync_on(void)
{
	return atomic_load_explicit(&no_sync, memory_order_relaxed);
}

void un_sys_inject(enum un_sys_op op, unsigned long nth, int err)
{
	struct inject *in = &injects[op];

	atomic_store(&seam_used, true);
	atomic_store(&in->err, err);
	atomic_store(&in->target, nth ? atomic_load(&in->calls) + nth : 0);
}

void un_sys_inject_reset(void)
{
	atomic_store(&seam_used, true);
	for (int i = 0; i < UN_SYS_NOPS; i++) {
		atomic_store(&injects[i].target, 0);
		atomic_store(&injects[i].calls, 0);
	}
}

unsigned long un_sys_calls(enum un_sys_op op)
{
	return atomic_load(&injects[op].calls);
}

/* Counts one call on IN: its errno if this is the armed call, else 0. */
static int fault_one(struct inject *in)
{
	unsigned long n = atomic_fetch_add(&in->calls, 1) + 1;
	unsigned long target = n;

	/* Compare-and-clear, so that of two threads at most one fails. */
	if (!atomic_compare_exchange_strong(&in->target, &target, 0))
		return 0;
	return atomic_load(&in->err);
}

int un_sys_fault(enum un_sys_op op)
{
	int err;

	if (!atomic_load_explicit(&seam_used, memory_order_relaxed))
		return 0;
	err = fault_one(&injects[UN_SYS_ANY]);
	if (!err)
		err = fault_one(&injects[op]);
	if (err == UN_SYS_KILL)
		kill(getpid(), SIGKILL); /* a crash before this call */
	return err;
}

/* Returns RC, or -errno when RC is -1. */
static long ret(long rc)
{
	return rc == -1 ? -errno : rc;
}

int un_sys_openat(int dirfd, const char *name, int flags, mode_t mode)
{
	int err = un_sys_fault(UN_SYS_OPEN);

	if (err)
		return -err;
	return (int)ret(openat(dirfd, name, flags | O_CLOEXEC, mode));
}

static int open_beneath2(int dirfd, const char *name, int flags)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};

	return (int)ret(syscall(SYS_openat2, dirfd, name, &how, sizeof(how)));
}

int un_sys_open_beneath(int dirfd, const char *name, int flags)
{
	int err = un_sys_fault(UN_SYS_OPEN);
	int fd;

	if (err)
		return -err;
	if (!atomic_load(&no_openat2)) {
		fd = open_beneath2(dirfd, name, flags);
		/* ENOSYS: an old kernel; EPERM: a seccomp filter (older container
		 * runtimes) that does not know the call. */
		if (fd != -ENOSYS && fd != -EPERM)
			return fd;
		atomic_store(&no_openat2, true);
	}
	/* Callers pass one validated component (no '/', not ".."), so O_NOFOLLOW
	 * alone keeps the open inside DIRFD. */
	return (int)ret(openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC));
}

static void proc_fd_path(char *buf, int fd, const char *name)
{
	if (name[0])
		snprintf(buf, PROC_FD_PATH_MAX, "/proc/self/fd/%d/%s", fd, name);
	else
		snprintf(buf, PROC_FD_PATH_MAX, "/proc/self/fd/%d", fd);
}

/* The seam's part of a call made through FD's /proc path: -errno when a
 * test made OP fail, else 0 with the path in BUF. */
static int proc_fd_call(enum un_sys_op op, int fd, char buf[PROC_FD_PATH_MAX])
{
	int err = un_sys_fault(op);

	if (err)
		return -err;
	proc_fd_path(buf, fd, "");
	return 0;
}

int un_sys_reopen(int fd, int flags)
{
	char path[PROC_FD_PATH_MAX];
	int err = proc_fd_call(UN_SYS_OPEN, fd, path);

	if (err)
		return err;
	return (int)ret(open(path, flags | O_CLOEXEC));
}

int un_sys_dup(int fd)
{
	int err = un_sys_fault(UN_SYS_OPEN);

	if (err)
		return -err;
	return (int)ret(fcntl(fd, F_DUPFD_CLOEXEC, 0));
}

void un_sys_close(int fd)
{
	if (fd >= 0)
		close(fd);
}

int un_sys_fstatat(int dirfd, const char *name, struct stat *st, int flags)
{
	int err = un_sys_fault(UN_SYS_STAT);

	if (err)
		return -err;
	if (!name[0])
		flags |= AT_EMPTY_PATH;
	return (int)ret(fstatat(dirfd, name, st, flags | AT_SYMLINK_NOFOLLOW));
}

int un_sys_fstat(int fd, struct stat *st)
{
	return un_sys_fstatat(fd, "", st, 0);
}

/* getxattrat(2) (Linux 6.13): not in older headers; its number is the same
 * on every architecture with the unified table. */
#ifndef SYS_getxattrat
#define SYS_getxattrat 464
#endif

struct sys_xattr_args {
	uint64_t value;
	uint32_t size;
	uint32_t flags;
};

/* getxattrat is tried first; once it is refused as unknown we stop asking. */
static atomic_bool no_getxattrat;

void un_sys_test_no_getxattrat(bool on)
{
	atomic_store(&no_getxattrat, on);
}

/* getxattrat of NAME in DIRFD (no symlink followed), or of DIRFD itself
 * when NAME is "." (a directory); -errno, -ENOSYS when the kernel has no
 * getxattrat. */
static ssize_t getxattrat_name(int dirfd, const char *name, const char *attr, void *buf,
			       size_t size)
{
	struct sys_xattr_args a = {.value = (uint64_t)(uintptr_t)buf,
				   .size = (uint32_t)size};
	ssize_t n;

	if (atomic_load(&no_getxattrat) || size > UINT32_MAX)
		return -ENOSYS;
	n = ret(syscall(SYS_getxattrat, dirfd, name, AT_SYMLINK_NOFOLLOW, attr, &a,
			sizeof(a)));
	if (n == -ENOSYS)
		atomic_store(&no_getxattrat, true);
	return n;
}

/* Whether getxattrat's answer N is the one the path through /proc would
 * give.  For a NAME: unless the call is unknown, or refused as a sandbox
 * refuses unknown calls (EPERM, which for user.* on a special file is also
 * a real answer: /proc then gives it again).  For DIRFD's own "." only when
 * the lookup of "." found the directory, so that the answer is about the
 * descriptor's inode: not a directory, no search permission on it, say
 * nothing of the xattr.  (fgetxattr refuses O_PATH descriptors, and
 * getxattrat refuses them with AT_EMPTY_PATH.) */
static bool xattr_answered(ssize_t n, bool dot)
{
	if (!dot)
		return n != -ENOSYS && n != -EPERM;
	return n >= 0 || n == -ENODATA || n == -ERANGE || n == -ENOTSUP;
}

ssize_t un_sys_getxattrat(int dirfd, const char *name, const char *attr, void *buf,
			  size_t size)
{
	char path[PROC_FD_PATH_MAX];
	int err = un_sys_fault(UN_SYS_XATTR);
	ssize_t n;

	if (err)
		return -err;
	if (strlen(name) > UN_NAME_MAX)
		return -ENAMETOOLONG;
	/* One component below DIRFD, not followed: what lgetxattr of
	 * /proc/self/fd/DIRFD/NAME reads, without walking /proc (a third of
	 * the cost). */
	n = getxattrat_name(dirfd, name[0] ? name : ".", attr, buf, size);
	if (xattr_answered(n, !name[0]))
		return n;
	proc_fd_path(path, dirfd, name);
	/* The magic link of DIRFD itself must be followed (getxattr), a NAME
	 * below it must not be (lgetxattr). */
	if (!name[0])
		return ret(getxattr(path, attr, buf, size));
	return ret(lgetxattr(path, attr, buf, size));
}

ssize_t un_sys_getdents(int fd, void *buf, size_t size)
{
	int err = un_sys_fault(UN_SYS_GETDENTS);

	if (err)
		return -err;
	return ret(syscall(SYS_getdents64, fd, buf, size));
}

ssize_t un_sys_pread(int fd, void *buf, size_t n, off_t off)
{
	int err = un_sys_fault(UN_SYS_READ);

	if (err)
		return -err;
	return ret(pread(fd, buf, n, off));
}

ssize_t un_sys_splice_read(int fd, off_t off, int pipefd, size_t n)
{
	loff_t from = off;
	int err = un_sys_fault(UN_SYS_READ);

	if (err)
		return -err;
	return ret(splice(fd, &from, pipefd, NULL, n, SPLICE_F_NONBLOCK));
}

ssize_t un_sys_readlinkat(int dirfd, const char *name, char *buf, size_t size)
{
	int err = un_sys_fault(UN_SYS_READLINK);

	if (err)
		return -err;
	return ret(readlinkat(dirfd, name, buf, size));
}

int un_sys_fstatvfs(int fd, struct statvfs *out)
{
	int err = un_sys_fault(UN_SYS_STATFS);

	if (err)
		return -err;
	return (int)ret(fstatvfs(fd, out));
}

int un_sys_fstype(int fd, long *type)
{
	struct statfs sf;
	int err = un_sys_fault(UN_SYS_STATFS);

	if (err)
		return -err;
	if (fstatfs(fd, &sf))
		return -errno;
	*type = (long)sf.f_type;
	return 0;
}

int un_sys_inotify_init(void)
{
	int err = un_sys_fault(UN_SYS_WATCH);

	if (err)
		return -err;
	return (int)ret(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
}

int un_sys_inotify_watch(int ifd, int fd, uint32_t mask)
{
	char path[PROC_FD_PATH_MAX];
	int err = proc_fd_call(UN_SYS_WATCH, fd, path);

	if (err)
		return err;
	return (int)ret(inotify_add_watch(ifd, path, mask | IN_ONLYDIR));
}

int un_sys_inotify_watch_at(int ifd, int dirfd, const char *name, uint32_t mask)
{
	char path[PROC_FD_PATH_MAX];
	int err = un_sys_fault(UN_SYS_WATCH);

	if (err)
		return -err;
	proc_fd_path(path, dirfd, name);
	return (int)ret(inotify_add_watch(ifd, path, mask | IN_ONLYDIR | IN_DONT_FOLLOW));
}

void un_sys_inotify_unwatch(int ifd, int wd)
{
	inotify_rm_watch(ifd, wd);
}

ssize_t un_sys_inotify_read(int ifd, void *buf, size_t n)
{
	int err = un_sys_fault(UN_SYS_WATCH);

	if (err)
		return -err;
	return ret(read(ifd, buf, n));
}

ssize_t un_sys_read(int fd, void *buf, size_t n)
{
	int err = un_sys_fault(UN_SYS_READ);

	if (err)
		return -err;
	return ret(read(fd, buf, n));
}

int un_sys_mkdirat(int dirfd, const char *name, mode_t mode)
{
	int err = un_sys_fault(UN_SYS_MKDIR);

	if (err)
		return -err;
	return (int)ret(mkdirat(dirfd, name, mode));
}

/* Writes all N bytes of BUF to FD, at *AT (pwrite) or, when AT is NULL,
 * at FD's offset (write), retrying short writes. */
static ssize_t write_all(int fd, const void *buf, size_t n, const off_t *at)
{
	const char *p = buf;
	size_t done = 0;
	int err = un_sys_fault(UN_SYS_WRITE);

	if (err)
		return -err;
	while (done < n) {
		ssize_t w = at ? pwrite(fd, p + done, n - done, *at + (off_t)done)
			       : write(fd, p + done, n - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		done += (size_t)w;
	}
	return (ssize_t)done;
}

ssize_t un_sys_write(int fd, const void *buf, size_t n)
{
	return write_all(fd, buf, n, NULL);
}

/* No test hook: a syncfs is no fsync of one inode that a test could hold. */
int un_sys_syncfs(int fd)
{
	int err = un_sys_fault(UN_SYS_SYNC);

	return err ? -err : (int)ret(syncfs(fd));
}

static _Atomic(int (*)(int, bool)) fsync_hook;

void un_sys_test_fsync_hook(int (*fn)(int fd, bool begin))
{
	atomic_store(&fsync_hook, fn);
}

int un_sys_fsync(int fd)
{
	int (*hook)(int, bool) = atomic_load_explicit(&fsync_hook, memory_order_relaxed);
	int err = un_sys_fault(UN_SYS_SYNC);

	if (!err && hook)
		err = hook(fd, true);
	if (err)
		return -err;
	err = (int)ret(fsync(fd));
	if (hook)
		hook(fd, false);
	return err;
}

int un_sys_renameat2(int odir, const char *oname, int ndir, const char *nname,
		     unsigned flags)
{
	int err = un_sys_fault(UN_SYS_RENAME);

	if (err)
		return -err;
	return (int)ret(renameat2(odir, oname, ndir, nname, flags));
}

bool un_sys_disk_full(const char *path)
{
	struct statvfs vfs;

	return statvfs(path, &vfs) == 0 &&
	       (geteuid() == 0 ? vfs.f_bfree : vfs.f_bavail) == 0;
}

int un_sys_unlinkat(int dirfd, const char *name, int flags)
{
	int err = un_sys_fault(UN_SYS_UNLINK);

	if (err)
		return -err;
	return (int)ret(unlinkat(dirfd, name, flags));
}

int un_sys_fdatasync(int fd)
{
	int err = un_sys_fault(UN_SYS_SYNC);

	if (err)
		return -err;
	return (int)ret(fdatasync(fd));
}

ssize_t un_sys_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	return write_all(fd, buf, n, &off);
}

int un_sys_ftruncate(int fd, off_t len)
{
	int err = un_sys_fault(UN_SYS_TRUNCATE);

	if (err)
		return -err;
	return (int)ret(ftruncate(fd, len));
}

int un_sys_ofd_trylock(int fd)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	int err = un_sys_fault(UN_SYS_LOCK);

	if (err)
		return -err;
	err = (int)ret(fcntl(fd, F_OFD_SETLK, &fl));
	return err == -EACCES ? -EAGAIN : err;
}

off_t un_sys_lseek(int fd, off_t off, int whence)
{
	int err = un_sys_fault(UN_SYS_SEEK);

	if (err)
		return -err;
	return (off_t)ret(lseek(fd, off, whence));
}

int un_sys_clone(int dst, int src)
{
	int err = un_sys_fault(UN_SYS_CLONE);

	if (err)
		return -err;
	return (int)ret(ioctl(dst, FICLONE, src));
}

ssize_t un_sys_copy_range(int src, off_t *src_off, int dst, off_t *dst_off, size_t n)
{
	int err = un_sys_fault(UN_SYS_COPY);

	if (err)
		return -err;
	return ret(copy_file_range(src, src_off, dst, dst_off, n, 0));
}

int un_sys_mknodat(int dirfd, const char *name, mode_t mode, dev_t dev)
{
	int err = un_sys_fault(UN_SYS_MKNOD);

	if (err)
		return -err;
	return (int)ret(mknodat(dirfd, name, mode, dev));
}

int un_sys_symlinkat(const char *target, int dirfd, const char *name)
{
	int err = un_sys_fault(UN_SYS_SYMLINK);

	if (err)
		return -err;
	return (int)ret(symlinkat(target, dirfd, name));
}

int un_sys_link_fd(int fd, int dirfd, const char *name)
{
	char path[PROC_FD_PATH_MAX];
	int err = proc_fd_call(UN_SYS_LINK, fd, path);

	if (err)
		return err;
	/* AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH; the magic link of an
	 * O_PATH descriptor, followed, is the object itself (a symlink too). */
	return (int)ret(linkat(AT_FDCWD, path, dirfd, name, AT_SYMLINK_FOLLOW));
}

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif

int un_sys_chmod_fd(int fd, mode_t mode)
{
	char path[PROC_FD_PATH_MAX];
	struct stat st;
	long rc;
	int err = un_sys_fault(UN_SYS_SETATTR);

	if (err)
		return -err;
	rc = ret(syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH));
	if (rc != -ENOSYS && rc != -EPERM && rc != -EINVAL)
		return (int)rc;
	/* Before Linux 6.6 (or under a seccomp filter that does not know the
	 * call): through /proc, which would follow a symlink. */
	if (fstatat(fd, "", &st, AT_EMPTY_PATH) < 0)
		return -errno;
	if (S_ISLNK(st.st_mode))
		return -EOPNOTSUPP;
	proc_fd_path(path, fd, "");
	return (int)ret(chmod(path, mode));
}

int un_sys_chown_fd(int fd, uid_t uid, gid_t gid)
{
	int err = un_sys_fault(UN_SYS_SETATTR);

	if (err)
		return -err;
	return (int)ret(fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW));
}

int un_sys_utimens_fd(int fd, const struct timespec ts[2])
{
	int err = un_sys_fault(UN_SYS_SETATTR);

	if (err)
		return -err;
	return (int)ret(utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW));
}

/* The xattr calls below take an O_PATH descriptor, which the f*xattr calls
 * refuse: its magic link, followed, is the object itself, even a symlink. */

int un_sys_fsetxattr_fd(int fd, const char *attr, const void *val, size_t size, int flags)
{
	char path[PROC_FD_PATH_MAX];
	int err = proc_fd_call(UN_SYS_SETXATTR, fd, path);

	if (err)
		return err;
	return (int)ret(setxattr(path, attr, val, size, flags));
}

ssize_t un_sys_listxattr_fd(int fd, char *buf, size_t size)
{
	char path[PROC_FD_PATH_MAX];
	int err = proc_fd_call(UN_SYS_LISTXATTR, fd, path);

	if (err)
		return err;
	return ret(listxattr(path, buf, size));
}

ssize_t un_sys_getxattr_fd(int fd, const char *attr, void *buf, size_t size)
{
	return un_sys_getxattrat(fd, "", attr, buf, size);
}

/* ---- credentials ----
 *
 * Design notes: the identity record
 *
 * A thread's filesystem identity (fsuid, fsgid, supplementary groups) is
 * per thread in the kernel and changes per request: the server gives each
 * call its caller's (server/cred.c), the engine takes the server's for its
 * own steps (un_sys_creds_override).  Asking the kernel what the thread
 * holds costs a system call per id, several per NFS call, so each thread
 * keeps a record of what it holds and reads that instead.
 *
 * Invariants:
 *  1. The record is thread-local and starts unknown: a new thread inherits
 *     its creator's identity, whatever that is at the clone, so it reads
 *     the kernel once at its first use (ident_get).  fork keeps the calling
 *     thread's record and its credentials alike; exec starts afresh.
 *  2. Only ident_set_groups and ident_set_fsid change a thread's
 *     identity, by raw per-thread calls, and each updates the
 *     record with the call.  Every other way to change it is outside the
 *     record's knowledge: glibc's set*id and setgroups, which broadcast to
 *     every thread, and which the server never calls (main.c and args.c
 *     change no ids; the engine's read-once effective ids rest on the same
 *     fact); or raw calls of a test's own, which must come before the
 *     thread's first use or be followed by un_ident_forget.
 *  3. A change to an id the record already shows makes no call (the kernel
 *     would still build a new credential for it).
 *  4. A switch that may fail is read back: a caller's ids
 *     (un_ident_take).  setgroups says whether it took; setfsuid and
 *     setfsgid return the previous id either way, so the record takes what
 *     setfsuid(-1) and setfsgid(-1) then read.  The other switches cannot
 *     fail and are recorded as made: the process's own effective ids are
 *     always allowed, and an id the thread held before is allowed again,
 *     since whoever could leave it kept CAP_SETUID/CAP_SETGID (fsuid
 *     changes drop only the filesystem capabilities) or never left it.
 *  5. Each call that changes an id returns the id it replaced; in a build
 *     with assertions that must be what the record showed, so any path
 *     that leaves the record stale shows up at the thread's next change.
 */

/* On 32-bit targets the 32-bit-id calls have their own numbers. */
#ifdef SYS_setgroups32
#define SYS_ID_SETGROUPS SYS_setgroups32
#define SYS_ID_GETGROUPS SYS_getgroups32
#define SYS_ID_SETFSUID	 SYS_setfsuid32
#define SYS_ID_SETFSGID	 SYS_setfsgid32
#else
#define SYS_ID_SETGROUPS SYS_setgroups
#define SYS_ID_GETGROUPS SYS_getgroups
#define SYS_ID_SETFSUID	 SYS_setfsuid
#define SYS_ID_SETFSGID	 SYS_setfsgid
#endif

struct ident_rec {
	bool known; /* false: read the kernel at the next use (invariant 1) */
	struct un_ident id;
};

/* A thread-local that carries no request: a cache of what the kernel keeps
 * per thread (the thread's ids), true whichever call reads it
 * (include/union.h, the request context's rule 5). */
static _Thread_local struct ident_rec ident;

/* uid_t and gid_t are both unsigned int, so that one function serves
 * both fs ids: NR is SYS_ID_SETFSUID or SYS_ID_SETFSGID. */
_Static_assert(sizeof(uid_t) == sizeof(unsigned) && sizeof(gid_t) == sizeof(unsigned),
	       "fs ids are unsigned int");

/* setfsuid and setfsgid return the current id whether or not they change
 * it; an invalid id (-1) changes nothing, so it only reads. */
static unsigned fsid_read(long nr)
{
	return (unsigned)syscall(nr, (unsigned)-1);
}

/* Sorts LIST of N ids in place: a few ids, insertion sort. */
static void gids_sort(gid_t *list, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		gid_t g = list[i];
		size_t j = i;

		for (; j > 0 && list[j - 1] > g; j--)
			list[j] = list[j - 1];
		list[j] = g;
	}
}

static struct un_ident *ident_get(void)
{
	if (!ident.known) {
		ident.id.fsuid = fsid_read(SYS_ID_SETFSUID);
		ident.id.fsgid = fsid_read(SYS_ID_SETFSGID);
		/* -1 (EINVAL) when the thread has more groups than we keep */
		ident.id.ngroups =
		    (int)syscall(SYS_ID_GETGROUPS, UN_IDENT_GROUPS_MAX, ident.id.groups);
		if (ident.id.ngroups > 0)
			gids_sort(ident.id.groups, (size_t)ident.id.ngroups);
		ident.known = true;
	}
	return &ident.id;
}

const struct un_ident *un_ident_now(void)
{
	return ident_get();
}

void un_ident_forget(void)
{
	ident.known = false;
}

/* Whether the thread's groups as ID records them are the multiset LIST of N
 * ids, in any order. */
static bool ident_groups_same(const struct un_ident *id, const gid_t *list, size_t n)
{
	gid_t sorted[UN_IDENT_GROUPS_MAX];

	if (id->ngroups < 0 || (size_t)id->ngroups != n || n > UN_IDENT_GROUPS_MAX)
		return false;
	memcpy(sorted, list, n * sizeof(*list));
	gids_sort(sorted, n);
	return !memcmp(sorted, id->groups, n * sizeof(*list));
}

/* Gives the thread groups LIST of N ids unless it has them (invariant 3);
 * true if it has them afterwards.  setgroups changes nothing when it fails,
 * so the record is kept then. */
static bool ident_set_groups(const gid_t *list, size_t n)
{
	struct un_ident *id = ident_get();

	if (ident_groups_same(id, list, n))
		return true;
	if (syscall(SYS_ID_SETGROUPS, n, list) != 0)
		return false;
	if (n > UN_IDENT_GROUPS_MAX) {
		id->ngroups = -1;
		return true;
	}
	memcpy(id->groups, list, n * sizeof(*list));
	gids_sort(id->groups, n);
	id->ngroups = (int)n;
	return true;
}

/* Gives the thread fs id WANT by call NR (SYS_ID_SETFSUID or
 * SYS_ID_SETFSGID) unless *HELD, its record, shows it (invariant 3), and
 * records it as held (invariant 4); true if a call was made. */
static bool ident_set_fsid(long nr, unsigned *held, unsigned want)
{
	unsigned old;

	if (*held == want)
		return false;
	old = (unsigned)syscall(nr, want);
	assert(old == *held); /* invariant 5 */
	(void)old;
	*held = want;
	return true;
}

/* ident_set_fsid of a switch that may fail, read back (invariant 4): true
 * if the thread holds WANT now. */
static bool ident_take_fsid(long nr, unsigned *held, unsigned want)
{
	if (ident_set_fsid(nr, held, want))
		*held = fsid_read(nr);
	return *held == want;
}

bool un_ident_take(uid_t uid, gid_t gid, size_t ngroups, const gid_t *groups)
{
	bool ok = ident_set_groups(groups, ngroups);
	struct un_ident *id = ident_get();

	/* groups and fsgid before fsuid: a thread whose fsuid is no longer 0
	 * has lost the capabilities a later step might need; each runs
	 * whatever the one before gave */
	ok = ident_take_fsid(SYS_ID_SETFSGID, &id->fsgid, gid) && ok;
	ok = ident_take_fsid(SYS_ID_SETFSUID, &id->fsuid, uid) && ok;
	return ok;
}

void un_ident_resume(uid_t uid, gid_t gid, int ngroups, const gid_t *groups)
{
	struct un_ident *id = ident_get();

	/* fsuid first: back to 0 gives the filesystem capabilities back */
	ident_set_fsid(SYS_ID_SETFSUID, &id->fsuid, uid);
	ident_set_fsid(SYS_ID_SETFSGID, &id->fsgid, gid);
	/* -1: the groups were not known, so they are not restored */
	if (ngroups >= 0)
		ident_set_groups(groups, (size_t)ngroups);
}

/* The engine's identity is the process's effective ids, which the server
 * never changes: read once (two system calls less per switch). */
static pthread_once_t engine_ids_once = PTHREAD_ONCE_INIT;
static uid_t engine_uid;
static gid_t engine_gid;

static void engine_ids_read(void)
{
	engine_uid = geteuid();
	engine_gid = getegid();
}

void un_sys_creds_override(struct un_creds *saved)
{
	pthread_once(&engine_ids_once, engine_ids_read);
	un_sys_creds_current(saved);
	un_ident_resume(engine_uid, engine_gid, -1, NULL);
}

void un_sys_creds_revert(const struct un_creds *saved)
{
	un_ident_resume(saved->fsuid, saved->fsgid, -1, NULL);
}

void un_sys_creds_current(struct un_creds *out)
{
	const struct un_ident *id = ident_get();

	out->fsuid = id->fsuid;
	out->fsgid = id->fsgid;
}

/* Whether GID is among the thread's groups when it has more than the record
 * keeps: read from the kernel (a thread of a server never has so many). */
static bool in_many_groups(gid_t gid)
{
	long n = syscall(SYS_ID_GETGROUPS, 0, NULL);
	gid_t *list = n > 0 ? un_sys_calloc((size_t)n, sizeof(*list)) : NULL;
	bool in = false;

	if (list)
		n = syscall(SYS_ID_GETGROUPS, n, list);
	for (long i = 0; list && i < n; i++)
		in = in || list[i] == gid;
	free(list);
	return in;
}

bool un_sys_in_group(gid_t gid)
{
	const struct un_ident *id = ident_get();

	if (id->fsgid == gid)
		return true;
	if (id->ngroups < 0)
		return in_many_groups(gid);
	for (int i = 0; i < id->ngroups; i++)
		if (id->groups[i] == gid)
			return true;
	return false;
}

void *un_sys_malloc(size_t n)
{
	if (un_sys_fault(UN_SYS_ALLOC))
		return NULL;
	return malloc(n);
}

void *un_sys_map_reserve(size_t n)
{
	void *p;

	if (un_sys_fault(UN_SYS_ALLOC))
		return NULL;
	p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
#ifdef UN_LSAN
	__lsan_register_root_region(p, n); /* its readable part is scanned */
#endif
	return p;
}

int un_sys_map_use(void *p, size_t n)
{
	if (un_sys_fault(UN_SYS_ALLOC))
		return -ENOMEM;
	return mprotect(p, n, PROT_READ | PROT_WRITE) < 0 ? -errno : 0;
}

void un_sys_unmap(void *p, size_t n)
{
	if (!p)
		return;
#ifdef UN_LSAN
	__lsan_unregister_root_region(p, n);
#endif
	munmap(p, n);
}

void *un_sys_calloc(size_t n, size_t size)
{
	if (un_sys_fault(UN_SYS_ALLOC))
		return NULL;
	return calloc(n, size);
}

void *un_sys_realloc(void *p, size_t n)
{
	if (un_sys_fault(UN_SYS_ALLOC))
		return NULL;
	return realloc(p, n);
}

char *un_sys_strdup(const char *s)
{
	if (un_sys_fault(UN_SYS_ALLOC))
		return NULL;
	return strdup(s);
}
