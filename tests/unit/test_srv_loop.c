/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_loop.c - the transport: the record-marking state machine fed from
 * buffers, the worker pool with a stand-in wait, then a live loop on loopback
 * (ephemeral ports) driven over TCP and UDP: fragments, pipelining past the
 * per-connection limit on one and on many connections, MOUNT on the NFS port,
 * an oversize record, a half-closed connection.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "nfs.h"
#include "serve.h"
#include "test_fs.h"

/* ---- record marking from buffers ---- */

static size_t put_frag(uint8_t *p, const void *data, uint32_t len, bool last)
{
	uint32_t w = htonl((last ? 0x80000000u : 0) | len);

	memcpy(p, &w, 4);
	memcpy(p + 4, data, len);
	return 4 + len;
}

/* Feeds all of BUF in pieces of STEP bytes; returns the records seen. */
static int feed_all(struct rpc_rm *r, const uint8_t *buf, size_t len, size_t step,
		    struct rpc_buf *recs, int maxrecs)
{
	enum rpc_rm_status st;
	size_t off = 0, n, used;
	int got = 0;

	while (off < len) {
		n = len - off < step ? len - off : step;
		used = rpc_rm_feed(r, buf + off, n, &st);
		assert_int_not_equal(st, RPC_RM_TOOBIG);
		assert_true(used > 0 || st == RPC_RM_RECORD);
		off += used;
		if (st == RPC_RM_RECORD) {
			assert_true(got < maxrecs);
			rpc_rm_take(r, &recs[got++]);
		}
	}
	return got;
}

static void test_rm_fragments(void **state)
{
	uint8_t stream[256];
	struct rpc_buf recs[4];
	struct rpc_rm r;
	size_t len = 0;
	int got;

	(void)state;
	/* Record 1: "hello" + " " + "world" in three fragments; record 2: "x";
	 * record 3: empty fragments then "yz". */
	len += put_frag(stream + len, "hello", 5, false);
	len += put_frag(stream + len, " ", 1, false);
	len += put_frag(stream + len, "world", 5, true);
	len += put_frag(stream + len, "x", 1, true);
	len += put_frag(stream + len, "", 0, false);
	len += put_frag(stream + len, "yz", 2, true);
	for (size_t step = 1; step <= len; step++) {
		rpc_rm_init(&r, 1024);
		memset(recs, 0, sizeof(recs));
		got = feed_all(&r, stream, len, step, recs, 4);
		assert_int_equal(got, 3);
		assert_int_equal(recs[0].len, 11);
		assert_memory_equal(recs[0].data, "hello world", 11);
		assert_int_equal(recs[1].len, 1);
		assert_memory_equal(recs[1].data, "x", 1);
		assert_int_equal(recs[2].len, 2);
		assert_memory_equal(recs[2].data, "yz", 2);
		for (int i = 0; i < got; i++)
			rpc_buf_free(&recs[i]);
		rpc_rm_free(&r);
	}
}

/* A large fragment read straight into the record (rpc_rm_direct), after
 * its first bytes came through rpc_rm_feed and until its last 16 KiB (those
 * go through the reader's buffer again, with whatever follows them in the
 * same read): the record is the bytes sent,
 * no read may pass the fragment's end, and the buffer is never more than
 * one reader's buffer (64 KiB) ahead of what arrived until 64 KiB have. */
static void test_rm_direct(void **state)
{
	enum { SIZE = 300000, FIRST = 1000, CHUNK = 7000 };
	uint8_t *data = malloc(SIZE), hdr[4];
	uint32_t mark = htonl(0x80000000u | SIZE);
	enum rpc_rm_status st = RPC_RM_MORE;
	struct rpc_buf rec;
	struct rpc_rm r;
	size_t sent = FIRST, room, n;
	uint8_t *dst;

	(void)state;
	assert_non_null(data);
	for (size_t i = 0; i < SIZE; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	memcpy(hdr, &mark, 4);
	rpc_rm_init(&r, RPC_MAX_RECORD);
	assert_int_equal(rpc_rm_feed(&r, hdr, 4, &st), 4);
	assert_int_equal(rpc_rm_feed(&r, data, FIRST, &st), FIRST);
	while (st != RPC_RM_RECORD) {
		dst = rpc_rm_direct(&r, &room);
		if (!dst) { /* the fragment's last bytes: through the reader's buffer */
			assert_true(SIZE - sent < 16384);
			assert_int_equal(rpc_rm_feed(&r, data + sent, SIZE - sent, &st),
					 SIZE - sent);
			sent = SIZE;
			break;
		}
		assert_true(room > 0 && room <= SIZE - sent);
		if (sent < 65536)
			assert_true(r.rec.cap <= 2 * (sent + 65536));
		n = room < CHUNK ? room : CHUNK;
		memcpy(dst, data + sent, n);
		rpc_rm_direct_done(&r, n, &st);
		sent += n;
	}
	assert_int_equal(sent, SIZE);
	/* nothing of a next record is under way: the reader's buffer again */
	assert_null(rpc_rm_direct(&r, &room));
	rpc_rm_take(&r, &rec);
	assert_int_equal(rec.len, SIZE);
	assert_memory_equal(rec.data, data, SIZE);
	rpc_buf_free(&rec);
	/* a small fragment goes through the reader's buffer */
	mark = htonl(0x80000000u | 100);
	memcpy(hdr, &mark, 4);
	assert_int_equal(rpc_rm_feed(&r, hdr, 4, &st), 4);
	assert_null(rpc_rm_direct(&r, &room));
	rpc_rm_free(&r);
	free(data);
}

static void test_rm_oversize(void **state)
{
	uint8_t stream[64], data[40] = {0};
	struct rpc_buf rec;
	enum rpc_rm_status st;
	struct rpc_rm r;
	uint32_t mark;
	size_t len;

	(void)state;
	/* Max 64: 40 + 24 bytes is a record, 40 + 25 is refused at the header. */
	rpc_rm_init(&r, 64);
	len = put_frag(stream, data, 40, false);
	assert_int_equal(rpc_rm_feed(&r, stream, len, &st), len);
	assert_int_equal(st, RPC_RM_MORE);
	len = put_frag(stream, data, 24, true);
	assert_int_equal(rpc_rm_feed(&r, stream, len, &st), len);
	assert_int_equal(st, RPC_RM_RECORD);
	rpc_rm_take(&r, &rec);
	assert_int_equal(rec.len, 64);
	rpc_buf_free(&rec);
	len = put_frag(stream, data, 40, false);
	rpc_rm_feed(&r, stream, len, &st);
	mark = htonl(0x80000000u | 25);
	rpc_rm_feed(&r, (uint8_t *)&mark, 4, &st);
	assert_int_equal(st, RPC_RM_TOOBIG);
	rpc_rm_free(&r);
	/* A header announcing 2^31-1 bytes is refused before any allocation. */
	rpc_rm_init(&r, RPC_MAX_RECORD);
	mark = htonl(0x7fffffffu);
	rpc_rm_feed(&r, (uint8_t *)&mark, 4, &st);
	assert_int_equal(st, RPC_RM_TOOBIG);
	assert_null(r.rec.data);
	rpc_rm_free(&r);
}

/* ---- the worker pool, with a condition variable for its wait ---- */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned wakes; /* asked for by the pool, not yet taken */
	bool gate_open; /* lets slow jobs end */
	unsigned ran;
	unsigned waiting; /* workers in tp_wait */
} tp = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

struct test_job {
	struct rpc_job job;
	bool slow; /* runs until the gate opens */
};

static struct rpc_job *tp_wait(void *arg, void *scratch, bool *woken)
{
	(void)arg;
	(void)scratch;
	pthread_mutex_lock(&tp.lock);
	tp.waiting++;
	pthread_cond_broadcast(&tp.cond);
	while (tp.wakes == 0)
		pthread_cond_wait(&tp.cond, &tp.lock);
	tp.wakes--;
	tp.waiting--;
	*woken = true;
	pthread_mutex_unlock(&tp.lock);
	return NULL;
}

static void tp_wake(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&tp.lock);
	tp.wakes++;
	pthread_cond_broadcast(&tp.cond);
	pthread_mutex_unlock(&tp.lock);
}

static void tp_run(struct rpc_job *job)
{
	struct test_job *j = (struct test_job *)job;

	pthread_mutex_lock(&tp.lock);
	while (j->slow && !tp.gate_open)
		pthread_cond_wait(&tp.cond, &tp.lock);
	tp.ran++;
	pthread_cond_broadcast(&tp.cond);
	pthread_mutex_unlock(&tp.lock);
	free(j);
}

static struct rpc_job *tp_jobs(unsigned n, unsigned nslow)
{
	struct rpc_job *head = NULL, **tail = &head;

	for (unsigned i = 0; i < n; i++) {
		struct test_job *j = calloc(1, sizeof(*j));

		assert_non_null(j);
		j->job.run = tp_run;
		j->slow = i < nslow;
		*tail = &j->job;
		tail = &j->job.next;
	}
	return head;
}

/* Waits up to 5 s for tp.ran to reach N; under tp.lock. */
static bool tp_ran(unsigned n)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	while (tp.ran < n)
		if (pthread_cond_timedwait(&tp.cond, &tp.lock, &until) != 0)
			break;
	return tp.ran >= n;
}

/* Calls queued behind slow ones in one batch (one read) are taken by idle
 * workers while the slow ones run: the pool wakes the next worker whenever
 * one takes a job and jobs remain, not only when jobs are queued. */
static void test_pool_slow_job(void **state)
{
	const struct rpc_pool_ops ops = {.wait = tp_wait, .wake = tp_wake};
	struct rpc_pool *p;
	bool fast_done;

	(void)state;
	tp.wakes = tp.ran = tp.waiting = 0;
	tp.gate_open = false;
	assert_int_equal(rpc_pool_new(4, &ops, &p), 0);
	pthread_mutex_lock(&tp.lock);
	while (tp.waiting < 4) /* all idle: only wakes can bring them */
		pthread_cond_wait(&tp.cond, &tp.lock);
	pthread_mutex_unlock(&tp.lock);
	rpc_pool_submit(p, tp_jobs(12, 2)); /* 2 slow ones first, then 10 */
	pthread_mutex_lock(&tp.lock);
	fast_done = tp_ran(10); /* the slow ones count only once the gate opens */
	tp.gate_open = true;
	pthread_cond_broadcast(&tp.cond);
	pthread_mutex_unlock(&tp.lock);
	assert_true(fast_done);
	rpc_pool_free(p);
	assert_int_equal(tp.ran, 12);
}

/* rpc_pool_free runs every job queued before it, also with workers busy. */
static void test_pool_free_runs_all(void **state)
{
	const struct rpc_pool_ops ops = {.wait = tp_wait, .wake = tp_wake};
	struct rpc_pool *p;

	(void)state;
	tp.wakes = tp.ran = tp.waiting = 0;
	tp.gate_open = true;
	assert_int_equal(rpc_pool_new(3, &ops, &p), 0);
	for (int i = 0; i < 50; i++)
		rpc_pool_submit(p, tp_jobs(4, 0));
	rpc_pool_free(p);
	assert_int_equal(tp.ran, 200);
}

/* ---- a live loop ---- */

static char tmp_root[64], lower[128], state_dir[128];
static struct srv_daemon srv_d;
static struct rpc_loop *loop;
static pthread_t loop_thread;
static uint16_t nfs_port, mount_port;

#define BIG_SIZE (1024 * 1024)

static int make_big_file(void)
{
	char path[160];
	char *data = malloc(BIG_SIZE);
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/big", lower);
	f = fopen(path, "w");
	if (!f || !data) {
		free(data);
		return -1;
	}
	for (size_t i = 0; i < BIG_SIZE; i++)
		data[i] = (char)(i * 13);
	n = fwrite(data, 1, BIG_SIZE, f);
	free(data);
	return fclose(f) == 0 && n == BIG_SIZE ? 0 : -1;
}

static void *run_loop(void *arg)
{
	(void)arg;
	rpc_loop_run(loop);
	return NULL;
}

static int setup(void **state)
{
	char err[512];
	char *lowers[] = {lower};
	/* insecure: the test's sockets are not bound to reserved ports */
	struct srv_export_opts eo = {.path = "/",
				     .lowerdirs = lowers,
				     .nlower = 1,
				     .clients = "127.0.0.1(insecure)"};
	struct srv_opts o = {.state_dir = state_dir, .exports = &eo, .nexports = 1};

	(void)state;
	snprintf(tmp_root, sizeof(tmp_root), "/tmp/test_srv_loop.XXXXXX");
	if (!mkdtemp(tmp_root))
		return -1;
	snprintf(lower, sizeof(lower), "%s/lower", tmp_root);
	snprintf(state_dir, sizeof(state_dir), "%s/state", tmp_root);
	if (mkdir(lower, 0755) < 0 || make_big_file() < 0)
		return -1;
	/* As main.c: a reply spliced to a closed socket must not kill us. */
	signal(SIGPIPE, SIG_IGN);
	o.cfg.bind_addr = "127.0.0.1";
	o.cfg.nthreads = 4;
	rpc_log_level = RPC_LOG_ERR;
	if (srv_daemon_open(&srv_d, &o, err, sizeof(err)) < 0 ||
	    srv_daemon_loop(&srv_d, &o, &loop, err, sizeof(err)) < 0) {
		fprintf(stderr, "setup: %s\n", err);
		return -1;
	}
	nfs_port = rpc_loop_port(loop, "nfs");
	mount_port = rpc_loop_port(loop, "mount");
	if (nfs_port == 0 || mount_port == 0 || nfs_port == mount_port)
		return -1;
	return pthread_create(&loop_thread, NULL, run_loop, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	rpc_loop_stop(loop);
	pthread_join(loop_thread, NULL);
	rpc_loop_free(loop);
	srv_daemon_close(&srv_d);
	t_rm_rf(tmp_root);
	return 0;
}

static int connect_to(int type, uint16_t port)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct timeval tv = {.tv_sec = 10};
	int fd = socket(AF_INET, type, 0);

	assert_true(fd >= 0);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* A call record (no record mark) for PROG/VERS/PROC with AUTH_NONE, with
 * ARGS (already XDR) appended. */
static size_t build_call(uint8_t *buf, uint32_t xid, uint32_t prog, uint32_t vers,
			 uint32_t proc, const void *args, size_t arglen)
{
	uint32_t w[10] = {htonl(xid),  htonl(CALL), htonl(2), htonl(prog), htonl(vers),
			  htonl(proc), 0,	    0,	      0,	   0};

	memcpy(buf, w, sizeof(w));
	if (arglen)
		memcpy(buf + sizeof(w), args, arglen);
	return sizeof(w) + arglen;
}

static void write_all(int fd, const void *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		assert_true(w > 0);
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
}

static bool read_all(int fd, void *p, size_t n)
{
	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r <= 0)
			return false;
		p = (uint8_t *)p + r;
		n -= (size_t)r;
	}
	return true;
}

/* Reads one reply record; checks it is accepted SUCCESS; returns its xid. */
static uint32_t read_reply(int fd, uint8_t *buf, size_t cap, size_t *len)
{
	uint32_t mark, w[6];

	assert_true(read_all(fd, &mark, 4));
	mark = ntohl(mark);
	assert_true(mark & 0x80000000u); /* we send one fragment per reply */
	*len = mark & 0x7fffffffu;
	assert_true(*len >= 24 && *len <= cap);
	assert_true(read_all(fd, buf, *len));
	memcpy(w, buf, sizeof(w));
	assert_int_equal(ntohl(w[1]), REPLY);
	assert_int_equal(ntohl(w[2]), MSG_ACCEPTED);
	assert_int_equal(ntohl(w[5]), SUCCESS);
	return ntohl(w[0]);
}

static void test_tcp_fragments(void **state)
{
	uint8_t call[64], stream[128], reply[256];
	size_t clen = build_call(call, 0xabc, NFS_PROGRAM, NFS_V3, 0, NULL, 0), len = 0;
	int fd = connect_to(SOCK_STREAM, nfs_port);

	(void)state;
	/* The 40-byte call in fragments of 7, 30 and 3 bytes, written in pieces. */
	len += put_frag(stream + len, call, 7, false);
	len += put_frag(stream + len, call + 7, 30, false);
	len += put_frag(stream + len, call + 37, (uint32_t)clen - 37, true);
	for (size_t off = 0; off < len; off += 5) {
		write_all(fd, stream + off, len - off < 5 ? len - off : 5);
		usleep(1000);
	}
	assert_int_equal(read_reply(fd, reply, sizeof(reply), &len), 0xabc);
	assert_int_equal(len, 24);
	close(fd);
}

static void test_tcp_pipelined(void **state)
{
	enum { N = 300 };
	static uint8_t stream[N * 48];
	uint8_t call[64], reply[256];
	bool seen[N] = {false};
	size_t len = 0, clen, rlen;
	uint32_t xid;
	int fd = connect_to(SOCK_STREAM, mount_port);

	(void)state;
	for (uint32_t i = 0; i < N; i++) {
		clen = build_call(call, 1000 + i, i % 2 ? NFS_PROGRAM : MOUNT_PROGRAM, 3,
				  0, NULL, 0);
		len += put_frag(stream + len, call, (uint32_t)clen, true);
	}
	write_all(fd, stream, len);
	for (int i = 0; i < N; i++) {
		xid = read_reply(fd, reply, sizeof(reply), &rlen);
		assert_true(xid >= 1000 && xid < 1000 + N);
		assert_false(seen[xid - 1000]);
		seen[xid - 1000] = true;
	}
	close(fd);
}

/* Many connections at once, each with calls pipelined past the in-flight
 * limit and written in pieces: read turns move between workers (and park
 * at the limit) while replies go out; every call gets its one reply. */
static void test_tcp_many_conns(void **state)
{
	enum { CONNS = 6, N = 200 };
	static uint8_t stream[N * 48];
	uint8_t call[64], reply[256];
	static bool seen[CONNS][N];
	int fd[CONNS];
	size_t len = 0, clen, rlen, off;
	uint32_t xid;

	(void)state;
	memset(seen, 0, sizeof(seen));
	for (uint32_t i = 0; i < N; i++) {
		clen = build_call(call, 5000 + i, NFS_PROGRAM, 3, 0, NULL, 0);
		len += put_frag(stream + len, call, (uint32_t)clen, true);
	}
	for (int c = 0; c < CONNS; c++)
		fd[c] = connect_to(SOCK_STREAM, nfs_port);
	for (off = 0; off < len; off += 1000)
		for (int c = 0; c < CONNS; c++)
			write_all(fd[c], stream + off,
				  len - off < 1000 ? len - off : 1000);
	for (int c = 0; c < CONNS; c++) {
		for (int i = 0; i < N; i++) {
			xid = read_reply(fd[c], reply, sizeof(reply), &rlen);
			assert_true(xid >= 5000 && xid < 5000 + N);
			assert_false(seen[c][xid - 5000]);
			seen[c][xid - 5000] = true;
		}
		close(fd[c]);
	}
}

/* MNT over TCP on the NFS port: MOUNT answers there too. */
static void test_mount_on_nfs_port(void **state)
{
	uint8_t call[128], stream[160], reply[256];
	uint32_t args[2] = {htonl(1), htonl(0x2f000000)}; /* dirpath "/" */
	size_t clen =
	    build_call(call, 77, MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT, args, 8);
	size_t len = put_frag(stream, call, (uint32_t)clen, true);
	int fd = connect_to(SOCK_STREAM, nfs_port);
	uint32_t status;

	(void)state;
	write_all(fd, stream, len);
	assert_int_equal(read_reply(fd, reply, sizeof(reply), &len), 77);
	memcpy(&status, reply + 24, 4);
	assert_int_equal(ntohl(status), MNT3_OK);
	close(fd);
}

static void test_udp(void **state)
{
	uint8_t call[64], reply[256];
	uint16_t ports[2] = {nfs_port, mount_port};
	uint32_t w[6];
	ssize_t n;

	(void)state;
	for (int i = 0; i < 2; i++) {
		int fd = connect_to(SOCK_DGRAM, ports[i]);
		size_t clen =
		    build_call(call, 500 + (uint32_t)i, NFS_PROGRAM, NFS_V3, 0, NULL, 0);

		assert_int_equal(send(fd, call, clen, 0), (ssize_t)clen);
		n = recv(fd, reply, sizeof(reply), 0);
		assert_int_equal(n, 24);
		memcpy(w, reply, sizeof(w));
		assert_int_equal(ntohl(w[0]), 500 + (uint32_t)i);
		assert_int_equal(ntohl(w[5]), SUCCESS);
		close(fd);
	}
}

static void test_tcp_oversize_closes(void **state)
{
	uint32_t mark = htonl(0x80000000u | (RPC_MAX_RECORD + 1));
	uint8_t b;
	int fd = connect_to(SOCK_STREAM, nfs_port);

	(void)state;
	write_all(fd, &mark, 4);
	assert_true(read(fd, &b, 1) <= 0); /* EOF or reset, never a reply */
	close(fd);
}

/* A client that half-closes after its call still gets the reply. */
static void test_tcp_half_close(void **state)
{
	uint8_t call[64], stream[80], reply[256], b;
	size_t clen = build_call(call, 9, NFS_PROGRAM, NFS_V3, 0, NULL, 0);
	size_t len = put_frag(stream, call, (uint32_t)clen, true);
	int fd = connect_to(SOCK_STREAM, nfs_port);

	(void)state;
	write_all(fd, stream, len);
	shutdown(fd, SHUT_WR);
	assert_int_equal(read_reply(fd, reply, sizeof(reply), &len), 9);
	assert_int_equal(read(fd, &b, 1), 0);
	close(fd);
}

/* Many connections that vanish with calls in flight: the server survives. */
static void test_tcp_abandon(void **state)
{
	uint8_t call[64], stream[80], reply[256];
	size_t clen = build_call(call, 1, NFS_PROGRAM, NFS_V3, 0, NULL, 0);
	size_t len = put_frag(stream, call, (uint32_t)clen, true);
	int fd;

	(void)state;
	for (int i = 0; i < 50; i++) {
		fd = connect_to(SOCK_STREAM, nfs_port);
		for (int j = 0; j < 20; j++)
			write_all(fd, stream, len);
		close(fd);
	}
	fd = connect_to(SOCK_STREAM, nfs_port);
	write_all(fd, stream, len);
	assert_int_equal(read_reply(fd, reply, sizeof(reply), &len), 1);
	close(fd);
}

/* A call record with ARGS encoded by PROC, framed as one last fragment. */
static size_t frame_call(uint8_t *buf, size_t cap, uint32_t xid, uint32_t prog,
			 uint32_t proc, xdrproc_t args_proc, void *args)
{
	uint8_t argbuf[512];
	uint32_t mark;
	XDR x;
	size_t alen, clen;

	xdrmem_create(&x, (char *)argbuf, sizeof(argbuf), XDR_ENCODE);
	assert_true(args_proc(&x, args));
	alen = xdr_getpos(&x);
	xdr_destroy(&x);
	assert_true(cap >= 4 + 40 + alen);
	clen = build_call(buf + 4, xid, prog, 3, proc, argbuf, alen);
	mark = htonl(0x80000000u | (uint32_t)clen);
	memcpy(buf, &mark, 4);
	return 4 + clen;
}

/* The handle of /big: MNT, then LOOKUP, over FD. */
static void lookup_big(int fd, uint8_t *fh, u_int *fhlen)
{
	static uint8_t reply[4096];
	uint8_t call[1024];
	char *root = "/";
	mountres3 mres = {0};
	LOOKUP3args la = {0};
	LOOKUP3res lres = {0};
	size_t len;
	XDR x;

	write_all(fd, call,
		  frame_call(call, sizeof(call), 1, MOUNT_PROGRAM, MOUNTPROC3_MNT,
			     (xdrproc_t)xdr_dirpath, &root));
	read_reply(fd, reply, sizeof(reply), &len);
	xdrmem_create(&x, (char *)reply + 24, (u_int)len - 24, XDR_DECODE);
	assert_true(xdr_mountres3(&x, &mres));
	assert_int_equal(mres.fhs_status, MNT3_OK);
	la.what.dir.data.data_len = mres.mountres3_u.mountinfo.fhandle.fhandle3_len;
	la.what.dir.data.data_val = mres.mountres3_u.mountinfo.fhandle.fhandle3_val;
	la.what.name = "big";
	write_all(fd, call,
		  frame_call(call, sizeof(call), 2, NFS_PROGRAM, NFSPROC3_LOOKUP,
			     (xdrproc_t)xdr_LOOKUP3args, &la));
	read_reply(fd, reply, sizeof(reply), &len);
	xdrmem_create(&x, (char *)reply + 24, (u_int)len - 24, XDR_DECODE);
	assert_true(xdr_LOOKUP3res(&x, &lres));
	assert_int_equal(lres.status, NFS3_OK);
	*fhlen = lres.LOOKUP3res_u.resok.object.data.data_len;
	memcpy(fh, lres.LOOKUP3res_u.resok.object.data.data_val, *fhlen);
	xdr_free((xdrproc_t)xdr_mountres3, &mres);
	xdr_free((xdrproc_t)xdr_LOOKUP3res, &lres);
}

/* Checks a READ reply record REC[0..len) (no record mark): NFS3_OK with the
 * bytes of /big at OFF..OFF+COUNT, and exactly the XDR padding after them, so
 * the encoded part and the payload were joined right. */
static void check_read_reply(const uint8_t *rec, size_t len, uint64_t off, uint32_t count)
{
	READ3res res = {0};
	XDR x;

	assert_true(len >= 24);
	xdrmem_create(&x, (char *)rec + 24, (u_int)len - 24, XDR_DECODE);
	assert_true(xdr_READ3res(&x, &res));
	assert_int_equal(res.status, NFS3_OK);
	assert_int_equal(xdr_getpos(&x), len - 24); /* nothing after the padding */
	assert_int_equal(res.READ3res_u.resok.count, count);
	assert_int_equal(res.READ3res_u.resok.data.data_len, count);
	for (uint32_t i = 0; i < count; i++)
		if (res.READ3res_u.resok.data.data_val[i] != (char)((off + i) * 13))
			fail_msg("byte %u of the READ at %llu differs", i,
				 (unsigned long long)off);
	assert_int_equal(res.READ3res_u.resok.eof, off + count >= BIG_SIZE);
	xdr_destroy(&x);
	xdr_free((xdrproc_t)xdr_READ3res, &res);
}

/* READs whose data length is no multiple of 4, over TCP and UDP: the data
 * (sent beside the encoded reply, not copied into it) arrives whole, padded,
 * inside the record or datagram the header announced. */
static void test_read_data(void **state)
{
	static uint8_t reply[BIG_SIZE + 4096];
	const uint32_t counts[] = {1001, 3, 0, 4096, 30002};
	uint8_t fh[64], call[512];
	READ3args ra = {0};
	u_int fhlen;
	size_t len;
	ssize_t n;
	int fd = connect_to(SOCK_STREAM, nfs_port), ufd;

	(void)state;
	lookup_big(fd, fh, &fhlen);
	ra.file.data.data_len = fhlen;
	ra.file.data.data_val = (char *)fh;
	ufd = connect_to(SOCK_DGRAM, nfs_port);
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		ra.offset = 5 + i;
		ra.count = counts[i];
		write_all(fd, call,
			  frame_call(call, sizeof(call), 300, NFS_PROGRAM, NFSPROC3_READ,
				     (xdrproc_t)xdr_READ3args, &ra));
		assert_int_equal(read_reply(fd, reply, sizeof(reply), &len), 300);
		check_read_reply(reply, len, ra.offset, ra.count);
		/* The same as one datagram (the record without its mark). */
		len = frame_call(call, sizeof(call), 301, NFS_PROGRAM, NFSPROC3_READ,
				 (xdrproc_t)xdr_READ3args, &ra);
		assert_int_equal(send(ufd, call + 4, len - 4, 0), (ssize_t)len - 4);
		n = recv(ufd, reply, sizeof(reply), 0);
		assert_true(n > 0);
		check_read_reply(reply, (size_t)n, ra.offset, ra.count);
	}
	/* The end of the file: a short read with eof. */
	ra.offset = BIG_SIZE - 7;
	ra.count = 100;
	write_all(fd, call,
		  frame_call(call, sizeof(call), 302, NFS_PROGRAM, NFSPROC3_READ,
			     (xdrproc_t)xdr_READ3args, &ra));
	assert_int_equal(read_reply(fd, reply, sizeof(reply), &len), 302);
	check_read_reply(reply, len, ra.offset, 7);
	close(ufd);
	close(fd);
}

/* The same over the splice path, which loopback peers do not take unless a
 * test asks (rpc/svc.c, invariant 8). */
static void test_read_data_spliced(void **state)
{
	rpc_test_splice_loopback(true);
	test_read_data(state);
	rpc_test_splice_loopback(false);
}

/* A client that asks for 40 MiB and reads nothing for a while: the replies
 * wait in the out queue (workers never block), reading stops at the
 * in-flight limit, and everything arrives once the client reads. */
static void test_tcp_slow_reader(void **state)
{
	enum { N = 40 };
	static uint8_t reply[BIG_SIZE + 4096];
	uint8_t fh[64], call[512];
	READ3args ra = {0};
	bool seen[N] = {false};
	size_t len;
	u_int fhlen;
	uint32_t xid;
	int fd = connect_to(SOCK_STREAM, nfs_port);

	(void)state;
	lookup_big(fd, fh, &fhlen);
	ra.file.data.data_len = fhlen;
	ra.file.data.data_val = (char *)fh;
	ra.count = BIG_SIZE;
	for (uint32_t i = 0; i < N; i++)
		write_all(fd, call,
			  frame_call(call, sizeof(call), 100 + i, NFS_PROGRAM,
				     NFSPROC3_READ, (xdrproc_t)xdr_READ3args, &ra));
	usleep(300 * 1000);
	for (int i = 0; i < N; i++) {
		xid = read_reply(fd, reply, sizeof(reply), &len);
		assert_true(xid >= 100 && xid < 100 + N);
		assert_false(seen[xid - 100]);
		seen[xid - 100] = true;
		/* Sent in pieces as the socket took them: still the right bytes. */
		check_read_reply(reply, len, 0, BIG_SIZE);
	}
	close(fd);
}

int main(void)
{
	const struct CMUnitTest rm_tests[] = {
	    cmocka_unit_test(test_rm_fragments),
	    cmocka_unit_test(test_rm_oversize),
	    cmocka_unit_test(test_rm_direct),
	    cmocka_unit_test(test_pool_slow_job),
	    cmocka_unit_test(test_pool_free_runs_all),
	};
	const struct CMUnitTest loop_tests[] = {
	    cmocka_unit_test(test_tcp_fragments),
	    cmocka_unit_test(test_tcp_pipelined),
	    cmocka_unit_test(test_tcp_many_conns),
	    cmocka_unit_test(test_mount_on_nfs_port),
	    cmocka_unit_test(test_udp),
	    cmocka_unit_test(test_tcp_oversize_closes),
	    cmocka_unit_test(test_tcp_half_close),
	    cmocka_unit_test(test_tcp_abandon),
	    cmocka_unit_test(test_tcp_slow_reader),
	    cmocka_unit_test(test_read_data),
	    cmocka_unit_test(test_read_data_spliced),
	};
	int fails = cmocka_run_group_tests_name("rpc_rm", rm_tests, NULL, NULL);

	return fails +
	       cmocka_run_group_tests_name("rpc_loop", loop_tests, setup, teardown);
}
