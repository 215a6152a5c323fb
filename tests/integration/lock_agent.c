/* SPDX-License-Identifier: Apache-2.0 */
/* lock_agent.c - the lock steps of kvm_locks.sh in a guest of tests/vm (built
 * static by that test).  It reads one command a line on stdin (the host's
 * lines, through the guest's serial port) and answers each with one line on
 * stdout, "<command> <result> [detail]", so that the host runs the steps of
 * two guests in the order it chooses:
 *
 *   lock PATH              fcntl F_SETLK, a write lock of the whole file:
 *                          "lock OK" or "lock EAGAIN" (another owner holds it)
 *   unlock PATH            fcntl F_UNLCK of the whole file
 *   lockw PATH ADDR        fcntl F_SETLKW: prints "lockw WAITING" first; once
 *                          the lock is granted, sends one UDP datagram to
 *                          ADDR:PORT_SIGNAL and prints "lockw OK waited=MS"
 *   unlock-wait PATH       binds PORT_SIGNAL (UDP), unlocks, and waits up to
 *                          30 s for that datagram: "unlock-wait OK latency=MS",
 *                          the time from its unlock to the other guest's
 *                          grant (and one datagram), on this guest's clock
 *   flock PATH             flock LOCK_EX|LOCK_NB: "flock OK" or "flock EAGAIN"
 *   funlock PATH           flock LOCK_UN
 *   sync                   sync(2): what this guest wrote is on its disks,
 *                          before the host resets it
 *   quit                   "quit OK", and the agent exits 0
 *
 * A path is opened (O_RDWR|O_CREAT) at its first use and kept open: closing
 * any descriptor of a file would drop this process's fcntl locks on it.
 * Another failure answers "<command> ERR <errno name>" and the agent goes on.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
	MAX_FILES = 16,
	PORT_SIGNAL = 7411,
	SIGNAL_WAIT_MS = 30000,
};

static struct {
	char path[256];
	int fd;
} files[MAX_FILES];
static int nfiles;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* file_fd: the descriptor of PATH, opened at its first use; -1 (errno set) */
static int file_fd(const char *path)
{
	int i, fd;

	for (i = 0; i < nfiles; i++)
		if (strcmp(files[i].path, path) == 0)
			return files[i].fd;
	if (nfiles == MAX_FILES || strlen(path) >= sizeof(files[0].path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(path, O_RDWR | O_CREAT, 0666);
	if (fd < 0)
		return -1;
	strcpy(files[nfiles].path, path);
	files[nfiles++].fd = fd;
	return fd;
}

static int setlk(const char *path, short type, int cmd)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET};
	int fd = file_fd(path);

	if (fd < 0)
		return -1;
	return fcntl(fd, cmd, &fl);
}

static void answer(const char *cmd, int rc, const char *detail)
{
	if (rc == 0)
		printf("%s OK%s%s\n", cmd, detail ? " " : "", detail ? detail : "");
	else if (errno == EAGAIN || errno == EACCES)
		printf("%s EAGAIN\n", cmd);
	else
		printf("%s ERR %s\n", cmd, strerrorname_np(errno));
	fflush(stdout);
}

static int udp_socket(int bind_port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(bind_port)};
	int s = socket(AF_INET, SOCK_DGRAM, 0);

	if (s >= 0 && bind_port && bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(s);
		return -1;
	}
	return s;
}

/* cmd_lockw: the blocking lock, then the datagram to ADDR that ends the other
 * guest's unlock-wait */
static void cmd_lockw(const char *path, const char *addr)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(PORT_SIGNAL)};
	char detail[64];
	double t0;
	int rc, s;

	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
		errno = EINVAL;
		answer("lockw", -1, NULL);
		return;
	}
	printf("lockw WAITING\n");
	fflush(stdout);
	t0 = now_ms();
	rc = setlk(path, F_WRLCK, F_SETLKW);
	snprintf(detail, sizeof(detail), "waited=%.0f", now_ms() - t0);
	if (rc == 0) {
		s = udp_socket(0);
		if (s < 0 ||
		    sendto(s, "got", 3, 0, (struct sockaddr *)&sa, sizeof(sa)) != 3)
			printf("lockw note: no datagram sent: %s\n", strerror(errno));
		if (s >= 0)
			close(s);
	}
	answer("lockw", rc, detail);
}

/* cmd_unlock_wait: the unlock, timed up to the other guest's datagram */
static void cmd_unlock_wait(const char *path)
{
	struct pollfd p = {.events = POLLIN};
	char detail[64], buf[16];
	double t0;
	int rc;

	p.fd = udp_socket(PORT_SIGNAL);
	if (p.fd < 0) {
		answer("unlock-wait", -1, NULL);
		return;
	}
	t0 = now_ms();
	rc = setlk(path, F_UNLCK, F_SETLK);
	if (rc == 0) {
		int ready = poll(&p, 1, SIGNAL_WAIT_MS);

		rc = ready == 1 && recv(p.fd, buf, sizeof(buf), 0) > 0 ? 0 : -1;
		if (ready == 0)
			errno = ETIMEDOUT;
	}
	snprintf(detail, sizeof(detail), "latency=%.1f", now_ms() - t0);
	close(p.fd);
	answer("unlock-wait", rc, detail);
}

static int do_flock(const char *path, int op)
{
	int fd = file_fd(path);

	return fd < 0 ? -1 : flock(fd, op);
}

/* run: one command line; 1 to quit */
static int run(char *line)
{
	char *cmd = strtok(line, " \r\n"), *a = strtok(NULL, " \r\n"),
	     *b = strtok(NULL, " \r\n");

	if (!cmd)
		return 0;
	if (strcmp(cmd, "quit") == 0) {
		answer(cmd, 0, NULL);
		return 1;
	}
	if (strcmp(cmd, "sync") == 0) {
		sync();
		answer(cmd, 0, NULL);
		return 0;
	}
	if (!a) {
		printf("%s ERR usage\n", cmd);
	} else if (strcmp(cmd, "lock") == 0) {
		answer(cmd, setlk(a, F_WRLCK, F_SETLK), NULL);
	} else if (strcmp(cmd, "unlock") == 0) {
		answer(cmd, setlk(a, F_UNLCK, F_SETLK), NULL);
	} else if (strcmp(cmd, "lockw") == 0 && b) {
		cmd_lockw(a, b);
	} else if (strcmp(cmd, "unlock-wait") == 0) {
		cmd_unlock_wait(a);
	} else if (strcmp(cmd, "flock") == 0) {
		answer(cmd, do_flock(a, LOCK_EX | LOCK_NB), NULL);
	} else if (strcmp(cmd, "funlock") == 0) {
		answer(cmd, do_flock(a, LOCK_UN), NULL);
	} else {
		printf("%s ERR unknown\n", cmd);
	}
	fflush(stdout);
	return 0;
}

int main(void)
{
	char line[512];

	printf("agent READY\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		if (run(line))
			return 0;
	return 0;
}
