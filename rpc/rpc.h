/* SPDX-License-Identifier: Apache-2.0 */
/* rpc.h - the ONC RPC layer (rpc/): what it gives the programs above it.
 *
 * The layer moves records and runs calls; it knows no program.  A program
 * registers itself (rpc_svc_register) with its procedure table, the service
 * whose port the portmapper names for it, and an argument its calls get;
 * rpc_process reads a call's header, authenticates, finds the program and
 * procedure, and hands the call to the program's own dispatcher, which runs
 * it with rpc_call_run inside whatever the program needs around it (as
 * net/sunrpc hands a call to vs_dispatch).  Beside that: request memory
 * (arena.c), byte buffers and addresses (util.c), the log (log.c), the worker
 * pool (pool.c), record marking (record.c), the event loop, connections and
 * listeners (loop.c, conn.c, listen.c; transport.h is their private header),
 * the duplicate request cache (drc.c), the per-procedure counters
 * (count.c), the built-in portmapper (pmap.c) and the
 * registration with a system rpcbind (rpcbind.c).  Grouped by file.
 */
#ifndef RPC_H
#define RPC_H

#include <netinet/in.h>
#include <pthread.h>
#include <rpc/rpc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

/* ---- arena.c: request-scoped memory ----
 * Each call gets an arena; the dispatcher frees it after the reply is encoded,
 * so a handler allocates reply data (READ buffers, entry lists) from it and
 * never frees. */
struct rpc_arena;
struct rpc_arena *rpc_arena_new(void);
void rpc_arena_free(struct rpc_arena *a);
/* Returns zeroed memory aligned for any type, or NULL when out of memory. */
void *rpc_arena_alloc(struct rpc_arena *a, size_t size);
char *rpc_arena_strndup(struct rpc_arena *a, const char *s, size_t n);

/* A reply's bulk data (READ's): bytes the transport sends after the encoded
 * reply without their being copied into it.  The buffers are reused from a
 * free list, so a call costs no fresh mapping, no page faults and no zeroing
 * of a megabyte.  On the wire: PIPED bytes from the pipe (spliced there from
 * a file, so never copied by the server), then DATA[0..LEN).  LEN is set by
 * whoever fills DATA; CAP is at least the size asked for, rounded up to XDR's
 * 4 bytes. */
struct rpc_payload {
	struct rpc_payload *next; /* on the free list */
	size_t len, cap;
	uint8_t *data;
	int pipe[2];	/* read and write end; -1 until rpc_payload_pipe */
	size_t piped;	/* bytes of the payload put into the pipe */
	size_t in_pipe; /* of those, bytes not yet sent out of it */
};
/* A buffer of at least SIZE (<= RPC_MAX_IO) bytes owned by A (given back when
 * A is freed) until rpc_arena_payload_take; NULL when out of memory. */
struct rpc_payload *rpc_arena_payload(struct rpc_arena *a, size_t size);
/* Moves P, one of A's payloads, out to the caller; returns P. */
struct rpc_payload *rpc_arena_payload_take(struct rpc_arena *a, struct rpc_payload *p);
/* The write end of P's empty pipe of RPC_MAX_IO bytes (made on first use,
 * kept with the buffer), or -1 when none can be had. */
int rpc_payload_pipe(struct rpc_payload *p);
/* Gives P (NULL: nothing) back to the free list.  Any thread. */
void rpc_payload_put(struct rpc_payload *p);

/* ---- util.c: byte buffers, addresses as text ---- */

/* A growable byte buffer (transport and reply encoding).  A reply may end in
 * a payload that follows DATA[0..LEN) on the wire, padding included; it is
 * sent from its own buffer or pipe rather than copied in. */
struct rpc_buf {
	uint8_t *data;
	size_t len, cap;
	struct rpc_payload *payload; /* owned; NULL: none */
};
/* Frees the bytes and gives the payload back. */
void rpc_buf_free(struct rpc_buf *b);
/* The bytes B puts on the wire: LEN, and the payload's. */
static inline size_t rpc_buf_wire_len(const struct rpc_buf *b)
{
	return b->len + (b->payload ? b->payload->piped + b->payload->len : 0);
}
/* Writes PEER's address as text into BUF (with ":port", or "[v6]:port", when
 * WITH_PORT); a v4-mapped v6 address is shown as v4.  Returns BUF. */
const char *rpc_addr_str(const struct sockaddr_storage *peer, bool with_port, char *buf,
			 size_t len);
/* Whether TEXT is ADDR:PORT ([V6]:PORT), an IP literal and a port; the
 * address into OUT unless NULL. */
bool rpc_addr_port_parse(const char *text, struct sockaddr_storage *out);
/* Whether A and B are the same address (ports not compared). */
bool rpc_same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

/* ---- log.c ---- */
enum rpc_log_level { RPC_LOG_ERR, RPC_LOG_WARN, RPC_LOG_INFO, RPC_LOG_DEBUG };
/* Set at start and by a reload (main.c) while workers log: atomic. */
extern _Atomic enum rpc_log_level rpc_log_level;
void rpc_log(enum rpc_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

bool rpc_log_level_parse(const char *level, enum rpc_log_level *out);
const char *rpc_log_level_name(enum rpc_log_level level);
/* Whether stderr is the journal's stream named by JOURNAL_STREAM (its
 * "DEV:INO", NULL when unset): then rpc_log_set_journal(true) makes each line
 * start with its syslog priority, "<N>", and leaves time and pid to the
 * journal. */
bool rpc_log_stderr_is_journal(const char *journal_stream);
void rpc_log_set_journal(bool on);
/* A problem that stops the start, whatever the log level: one line
 * "union-nfsd: PROBLEM" on stderr, at priority err in the journal. */
void rpc_log_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One kind of line that a client, or a fault hit by every call, can repeat
 * as fast as calls come: at most RPC_LOG_BURST lines in each window of
 * RPC_LOG_WINDOW_S seconds (an average of one a second), the first line
 * after the ones left out saying how many.  Starts zeroed (static); any
 * thread. */
#define RPC_LOG_WINDOW_S 5
#define RPC_LOG_BURST	 5
struct rpc_log_limit {
	/* (window + 1) << 8 | lines logged in it; window: CLOCK_MONOTONIC
	 * seconds / RPC_LOG_WINDOW_S (+ 1, so that a zeroed limit holds none) */
	_Atomic unsigned long long state;
	atomic_ulong quiet; /* lines left out since the last one logged */
};
/* True when this line may be logged now; *QUIET then holds how many were
 * left out since the last one. */
bool rpc_log_limit_pass(struct rpc_log_limit *lim, unsigned long *quiet);
/* The same at NOW (CLOCK_MONOTONIC seconds): the clock passed in, for tests. */
bool rpc_log_limit_pass_at(struct rpc_log_limit *lim, long long now,
			   unsigned long *quiet);
/* rpc_log under LIM: the line only when rpc_log_limit_pass lets it, with
 * "(and N more since the last such line)" when some were left out. */
void rpc_log_limited(struct rpc_log_limit *lim, enum rpc_log_level lvl, const char *fmt,
		     ...) __attribute__((format(printf, 3, 4)));
/* rpc_log_limited with a limit of its own for this line of the source: for
 * every line that a client can cause (a refusal, a bad record, a peer that
 * went away) or that a fault can repeat per call.  Not for debug lines, which
 * trace every call by design. */
#define RPC_LOG_LIMITED(lvl, ...)                                                        \
	do {                                                                             \
		static struct rpc_log_limit rpc_log_site_;                               \
		rpc_log_limited(&rpc_log_site_, (lvl), __VA_ARGS__);                     \
	} while (0)

/* ---- pool.c: worker threads ---- */

/* A unit of work; the submitter embeds it in its own struct.  RUN owns the
 * job (and frees it) once called. */
struct rpc_job {
	struct rpc_job *next;
	void (*run)(struct rpc_job *job);
};
/* What a worker does when the FIFO is empty (the pool's owner: loop.c). */
struct rpc_pool_ops {
	/* Blocks until there is work and does the part that cannot block;
	 * returns a job for the calling worker to run, or NULL.  SCRATCH is
	 * the worker's own SCRATCH_SIZE bytes.  *WOKEN: what ended the wait was
	 * a WAKE. */
	struct rpc_job *(*wait)(void *arg, void *scratch, bool *woken);
	/* Makes one thread in WAIT return soon; any thread. */
	void (*wake)(void *arg);
	void *arg;
	size_t scratch_size;
};
struct rpc_pool;
/* Starts NTHREADS workers with every signal blocked. */
int rpc_pool_new(unsigned nthreads, const struct rpc_pool_ops *ops,
		 struct rpc_pool **out);
/* Queues the jobs linked from HEAD by next (ownership passes to the pool),
 * waking a worker only when none is on its way.  Never blocks on a worker. */
void rpc_pool_submit(struct rpc_pool *p, struct rpc_job *head);
/* Workers running a job or reading, not waiting; and all of them. */
unsigned rpc_pool_busy(struct rpc_pool *p);
unsigned rpc_pool_threads(const struct rpc_pool *p);
/* Runs every queued job to its end, joins the workers, frees P. */
void rpc_pool_free(struct rpc_pool *p);

/* ---- record.c: TCP record marking ---- */

/* One read(2) of a connection's socket; also the largest UDP datagram. */
#define RPC_RX_BUF_SIZE 65536

/* TCP record marking (RFC 5531 section 11) as a pure state machine, so it can be
 * fed from a socket or from a test buffer. */
struct rpc_rm {
	struct rpc_buf rec; /* the record so far (fragments joined) */
	size_t max;	    /* largest record accepted */
	uint32_t frag_left; /* bytes of the current fragment still to come */
	uint8_t hdr[4];
	uint8_t hdr_have; /* bytes of the next fragment header seen */
	bool in_frag;	  /* between a header and the end of its fragment */
	bool last;	  /* the current fragment is the record's last */
};
enum rpc_rm_status { RPC_RM_MORE, RPC_RM_RECORD, RPC_RM_TOOBIG };
void rpc_rm_init(struct rpc_rm *r, size_t max);
/* Consumes bytes of P[0..n) up to the end of one record; returns how many.
 * *ST: RPC_RM_RECORD when r->rec holds a complete record (the caller takes it
 * with rpc_rm_take), RPC_RM_TOOBIG when the record would exceed r->max (the
 * stream is unusable), else RPC_RM_MORE.  On ENOMEM it also says TOOBIG. */
size_t rpc_rm_feed(struct rpc_rm *r, const uint8_t *p, size_t n, enum rpc_rm_status *st);
/* Where the rest of the current fragment may be read straight into the
 * record (*ROOM bytes there; no more than the fragment holds), or NULL:
 * no fragment of RM_DIRECT_MIN bytes or more under way, or no memory.  The
 * buffer grows as rpc_rm_feed's does: at most one reader's buffer ahead of
 * what arrived until that much has. */
uint8_t *rpc_rm_direct(struct rpc_rm *r, size_t *room);
/* Counts N bytes read at rpc_rm_direct's address; *ST as rpc_rm_feed's. */
void rpc_rm_direct_done(struct rpc_rm *r, size_t n, enum rpc_rm_status *st);
/* Moves the complete record out into *OUT and resets R for the next one. */
void rpc_rm_take(struct rpc_rm *r, struct rpc_buf *out);
void rpc_rm_free(struct rpc_rm *r);

/* ---- svc.c: programs, calls and their dispatch ---- */

/* The caller's identity from AUTH_SYS (AUTH_NONE gets nobody). */
struct rpc_cred {
	uint32_t flavor; /* AUTH_NONE or AUTH_SYS */
	uid_t uid;
	gid_t gid;
	uint32_t ngroups;
	gid_t groups[16];
};

/* What every handler knows of the call it serves.  The program's
 * dispatcher may hang a context of its own on CTX before it runs the call
 * (rpc_call_run); ARG is what the program registered with. */
struct rpc_req {
	struct rpc_cred cred;
	const struct sockaddr_storage *peer;
	socklen_t peerlen;
	/* PEER's address as text, without the port (rpc_addr_str); made once
	 * a connection by the transport.  "-" when PEER is NULL. */
	const char *peer_addr;
	/* The address of ours the call came to (a floating address is one of
	 * several a host has): the connection's getsockname, a datagram's
	 * IP_PKTINFO.  NULL when the transport cannot tell. */
	const struct sockaddr_storage *local;
	int proto; /* IPPROTO_TCP or IPPROTO_UDP */
	uint32_t xid, prog, vers, proc;
	struct rpc_arena *arena;
	/* Set by a handler whose encoder leaves its results' last field, an
	 * opaque, out but for its length (READ): the bytes, in the arena's
	 * payload, that the reply carries after the encoded results. */
	struct rpc_payload *payload;
	/* Set by the dispatcher when the reply's payload may be in a pipe:
	 * a TCP transport (UDP sends from memory) and a call the duplicate
	 * request cache does not keep (it keeps flat bytes). */
	bool payload_pipe;
	/* Set by a handler whose call must get no reply at all (the
	 * portmapper's CALLIT, pmap.c rule 2). */
	bool no_reply;
	void *arg; /* the program's, from rpc_svc_register */
	void *ctx; /* the program's dispatcher's, for this call */
};

/* One procedure of one program: everything rpc_call_run needs to run it.
 * It decodes into a zeroed args struct of args_size bytes, runs the
 * program's admission check on the argument the entry names, calls the
 * handler with a zeroed res struct of res_size bytes, encodes the result,
 * then frees the args with xdr_free and the arena.  A handler cannot fail
 * at the RPC level: it fills an error status.  A NULL decode_args or
 * encode_res means void; a NULL handler does nothing. */
struct rpc_proc {
	const char *name;
	xdrproc_t decode_args;
	size_t args_size;
	xdrproc_t encode_res;
	size_t res_size;
	void (*handler)(struct rpc_req *rq, void *args, void *res);
	/* The argument the program's admission check (rpc_program.admit)
	 * looks at, at FH_OFFSET in the args, when HAS_FH: for NFS, the file
	 * handle the call is about.  Without one a call is not checked. */
	bool has_fh;
	size_t fh_offset;
	/* The duplicate request cache's policy (svc.c, drc_check).  false: a
	 * second execution could answer differently or undo later work
	 * (WRITE: an older WRITE run again after a newer one), so the call
	 * goes through the duplicate request cache (drc.c). */
	bool idempotent;
};

struct rpc_call; /* a call in flight (svc.c) */

struct rpc_program {
	const char *name;
	uint32_t prog;
	uint32_t vers;
	const struct rpc_proc *procs; /* indexed by procedure number */
	size_t nprocs;
	/* Runs P's handler for RQ with what the program puts around it (its
	 * caller's identity, say); false, without running it, when it cannot
	 * (the call is answered SYSTEM_ERR).  NULL: the handler alone. */
	bool (*invoke)(const struct rpc_program *prog, const struct rpc_proc *p,
		       struct rpc_req *rq, void *args, void *res);
	/* For INVOKE: handlers run with the caller's filesystem identity;
	 * false: with the server's (MOUNT, whose work is the server's own). */
	bool caller_identity;
	/* The program's dispatcher: runs CALL with rpc_call_run, inside what
	 * the program needs around it (its locks, RQ->ctx, its counters).
	 * NULL: rpc_call_run alone. */
	void (*dispatch)(struct rpc_call *call, struct rpc_req *rq);
	/* The admission check of a call whose procedure names an argument FH
	 * (rpc_proc.has_fh): false when the caller is refused, RES then
	 * holding the refusal.  NULL: none. */
	bool (*admit)(struct rpc_req *rq, const void *fh, void *res);
	/* Whether the program is served now (ARG as registered); NULL:
	 * always.  One not served is PROG_UNAVAIL. */
	bool (*served)(void *arg);
	/* The status P's results RES carry, into *CODE; false when P's
	 * results have none.  NULL: no procedure's do.  STATUSES names the
	 * codes, success first (the counters' errors by status). */
	bool (*result_status)(const struct rpc_proc *p, const void *res, uint32_t *code);
	const struct rpc_status_name *statuses;
	size_t nstatuses;
};
struct rpc_status_name {
	uint32_t code;
	const char *name;
};

/* The argument P's table entry names in ARGS (P->has_fh). */
static inline const void *rpc_proc_fh(const struct rpc_proc *p, const void *args)
{
	return (const char *)args + p->fh_offset;
}

/* The registry of programs, the duplicate request cache and the counters:
 * what rpc_process serves.  Programs register before the loop starts and
 * stay until rpc_svc_free. */
struct rpc_svc;
#define RPC_SVC_MAX_PROGRAMS 16
/* A registry; with a duplicate request cache of DRC_CAPACITY entries (0:
 * none).  -ENOMEM. */
int rpc_svc_new(size_t drc_capacity, struct rpc_svc **out);
void rpc_svc_free(struct rpc_svc *svc);
/* Serves PROG on the port of SERVICE (a name rpc_loop_new binds), its calls
 * getting ARG as rq->arg.  A program's versions register one by one; the
 * order of registration is the order of look-up.  -ENOSPC past
 * RPC_SVC_MAX_PROGRAMS, -EEXIST for a program and version twice. */
int rpc_svc_register(struct rpc_svc *svc, const struct rpc_program *prog,
		     const char *service, void *arg);
/* How many programs are registered, and the Ith of them (NULL past the
 * end), in order: the counters count by that index. */
size_t rpc_svc_nprograms(const struct rpc_svc *svc);
const struct rpc_program *rpc_svc_program(const struct rpc_svc *svc, size_t i);
/* Records that SERVICE's listeners hold PORT: rpc_loop_new, as it binds
 * them (a test that runs calls without a loop may too). */
void rpc_svc_bound(struct rpc_svc *svc, const char *service, uint16_t port);
/* The port SERVICE's listeners hold; 0: not bound. */
uint16_t rpc_svc_service_port(const struct rpc_svc *svc, const char *service);
/* The port PROG version VERS is served on (0: not registered, or its
 * service not bound); any version when VERS is 0. */
uint16_t rpc_svc_port(const struct rpc_svc *svc, uint32_t prog, uint32_t vers);

/* Turns one RPC call record (without record mark) into its reply record in
 * REPLY (without record mark).  Returns false when no reply must be sent (a
 * record too broken to carry an xid, or an RPC reply sent to us).  Never fails
 * otherwise: errors become RPC or protocol errors in the reply.  Safe to call
 * from any thread. */
bool rpc_process(struct rpc_svc *svc, const uint8_t *call, size_t len,
		 const struct sockaddr_storage *peer, socklen_t peerlen, int proto,
		 struct rpc_buf *reply);
/* Where a call came from, as the transport knows it. */
struct rpc_from {
	const struct sockaddr_storage *peer; /* NULL: unknown */
	socklen_t peerlen;
	int proto;
	const char *addr; /* PEER's address as text (rpc_req.peer_addr) */
	const struct sockaddr_storage *local; /* rpc_req.local; NULL: unknown */
};
/* rpc_process for a transport that keeps FROM's address text (made once a
 * connection). */
bool rpc_process_from(struct rpc_svc *svc, const uint8_t *call, size_t len,
		      const struct rpc_from *from, struct rpc_buf *reply);
/* Runs CALL from the duplicate request cache's check to its encoded reply:
 * decodes the arguments, admits, runs the handler, encodes, counts.  For a
 * program's dispatcher, once. */
void rpc_call_run(struct rpc_call *call);
/* The results of CALL's handler, for its dispatcher after rpc_call_run (NULL
 * when none ran). */
const void *rpc_call_results(const struct rpc_call *call);
/* Test hook: READ data is spliced to loopback peers too (svc.c, invariant 8),
 * so that tests on loopback reach the splice path. */
void rpc_test_splice_loopback(bool on);
/* Whether SS is a loopback address (127/8, ::1, or 127/8 mapped in v6). */
bool rpc_addr_is_loopback(const struct sockaddr_storage *ss);

/* ---- drc.c: the duplicate request cache ---- */

struct rpc_drc;
struct rpc_drc_key {
	uint8_t addr[16];
	uint16_t family, port;
	uint32_t xid, prog, vers, proc;
	uint32_t args_len;
	uint64_t args_hash; /* of the first bytes only (drc.c, invariant 1) */
};

enum rpc_drc_verdict {
	RPC_DRC_NEW,	  /* first sight: run it, then rpc_drc_done */
	RPC_DRC_REPLAY,	  /* a retransmission: the first reply was copied out */
	RPC_DRC_BUSY,	  /* a retransmission of a call still running: drop it */
	RPC_DRC_UNCACHED, /* no room: run it without the cache */
};

/* WRITEs fill the cache too: 16384 entries keep 1.6 s of calls at 10,000
 * small WRITEs a second, in ~300 bytes an entry for a WRITE (its reply is
 * ~160) and under 8 MB for any mix of procedures. */
#define RPC_DRC_CAPACITY 16384

int rpc_drc_new(size_t capacity, struct rpc_drc **out);
void rpc_drc_free(struct rpc_drc *d);
/* Fills K for a call of PEER; ARGS are the call's argument bytes. */
void rpc_drc_key_init(struct rpc_drc *d, struct rpc_drc_key *k,
		      const struct sockaddr_storage *peer, uint32_t xid, uint32_t prog,
		      uint32_t vers, uint32_t proc, const uint8_t *args, size_t len);
enum rpc_drc_verdict rpc_drc_begin(struct rpc_drc *d, const struct rpc_drc_key *k,
				   struct rpc_buf *out);
/* Stores REPLY for K (NULL: no reply was sent; the entry is dropped). */
void rpc_drc_done(struct rpc_drc *d, const struct rpc_drc_key *k,
		  const struct rpc_buf *reply);

/* ---- count.c: calls counted by the thread that runs them ----
 * Per program (by registry index) and procedure: calls, time, a latency
 * histogram and errors by status; retransmissions answered from the cache.
 * Each worker thread counts into a struct of its own (count.c, note 1);
 * the reporting (the operations room's metrics) only reads, with
 * rpc_counts_read.  Off until rpc_counts_start. */
#define RPC_COUNT_PROCS	  32 /* >= any program's nprocs */
#define RPC_COUNT_BUCKETS 16
/* Error slots: the program's statuses (the success first, never counted),
 * then a status it does not name and the RPC-level failures. */
#define RPC_COUNT_ST_NAMED   30
#define RPC_COUNT_ST_OTHER   30
#define RPC_COUNT_ST_GARBAGE 31
#define RPC_COUNT_ST_SYSERR  32
#define RPC_COUNT_STATUSES   33
/* The upper bounds of the latency buckets, in ns (10 us to 1 s). */
extern const uint64_t rpc_count_bucket_ns[RPC_COUNT_BUCKETS];
/* Adds N to a counter only the calling thread stores to: a relaxed load
 * and store, no read-modify-write, no lock (count.c, note 1). */
static inline void rpc_count_own_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}
/* A counter as another thread reads it: never torn, maybe a call behind. */
static inline uint64_t rpc_count_read(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}
/* One procedure's sums over every thread. */
struct rpc_proc_sums {
	uint64_t calls, ns;
	uint64_t bucket[RPC_COUNT_BUCKETS]; /* at most rpc_count_bucket_ns[i] */
	uint64_t errors[RPC_COUNT_STATUSES];
};
/* Starts counting SVC's calls; -EINVAL when a program has more procedures
 * than RPC_COUNT_PROCS. */
int rpc_counts_start(struct rpc_svc *svc);
/* Whether SVC's calls are counted. */
bool rpc_counts_on(const struct rpc_svc *svc);
/* The sums of procedure PROC of registered program PI into *OUT. */
void rpc_counts_proc(const struct rpc_svc *svc, size_t pi, size_t proc,
		     struct rpc_proc_sums *out);
/* Calls begun and ended, and retransmissions answered from the cache. */
void rpc_counts_calls(const struct rpc_svc *svc, uint64_t *begun, uint64_t *ended,
		      uint64_t *drc_hits);
/* The transport's gauges: connections open, worker threads and those busy. */
void rpc_counts_transport(const struct rpc_svc *svc, unsigned *conns, unsigned *threads,
			  unsigned *busy);

/* ---- loop.c, conn.c, listen.c: the event loop and what it serves
 * (transport.h is their shared header) ---- */

/* A service the loop binds a TCP and a UDP port for: NAME (for the log and
 * rpc_svc_register), the port wanted (0: one the kernel picks).  A wanted
 * port an earlier service bound is shared with it.  Every listener serves
 * every program. */
struct rpc_service {
	const char *name;
	uint16_t port;
};
struct rpc_loop_config {
	const char *bind_addr; /* NULL or "0.0.0.0": all */
	unsigned nthreads;     /* worker threads */
	const struct rpc_service *services;
	size_t nservices;
	/* Also port 111 for the built-in portmapper (service "portmapper"),
	 * when it is free (pmap.c). */
	bool portmapper;
	/* TCP connections (listen.c, rules 2, 3): 0 derives the cap from
	 * RLIMIT_NOFILE, less 1/FDS_KEPT_DIVISOR of it that the server keeps
	 * for other uses (0: none); idle_timeout in seconds, 0 never. */
	unsigned max_conns, max_conns_per_addr, idle_timeout;
	unsigned fds_kept_divisor;
	/* Whether any call of PEER could be admitted (listen.c, rule 1): a
	 * connection none could is closed at once.  NULL: all are kept. */
	bool (*admit_conn)(void *arg, const struct sockaddr_storage *peer);
	void *admit_arg;
};
struct rpc_loop;
/* Creates the epoll loop, binds the TCP and UDP listeners of CFG's
 * services, starts the worker pool; calls go to SVC, which outlives the
 * loop.  On failure ERR holds one line and the result is a negative errno. */
int rpc_loop_new(struct rpc_svc *svc, const struct rpc_loop_config *cfg,
		 struct rpc_loop **out, char *err, size_t errlen);
/* The port bound for SERVICE (a configured 0 becomes the kernel's
 * choice); 0 when none is. */
uint16_t rpc_loop_port(const struct rpc_loop *l, const char *service);
/* Serves until rpc_loop_stop; returns 0, or a negative errno if epoll failed. */
int rpc_loop_run(struct rpc_loop *l);
/* Asks rpc_loop_run to return.  Async-signal-safe. */
void rpc_loop_stop(struct rpc_loop *l);
/* Closes listeners, lets the workers finish every queued call, frees L. */
void rpc_loop_free(struct rpc_loop *l);

/* ---- pmap.c: the built-in portmapper, versions 2, 3 and 4 ----
 * It answers from the registry (rpc_svc_port) and is served only while the
 * loop holds port 111. */
extern const struct rpc_program pmap2_program, rpcb3_program, rpcb4_program;
/* Registers its versions on service "portmapper", like any program. */
int rpc_pmap_register(struct rpc_svc *svc);

/* ---- rpcbind.c ---- */

/* Registers every program of SVC but the portmapper's on its port (tcp,
 * udp) when rpcbind answers on this host; returns false (after a log line)
 * when it does not, never blocking long. */
bool rpc_rpcbind_register(const struct rpc_svc *svc);
/* Removes what rpc_rpcbind_register set. */
void rpc_rpcbind_unregister(void);

/* ---- constants the handlers and the transport agree on ---- */
#define RPC_MAX_IO     (1024 * 1024)	    /* rtmax, wtmax */
#define RPC_MAX_RECORD (RPC_MAX_IO + 65536) /* largest call record accepted */
/* rtmax/wtmax/dtpref over UDP: a reply must fit one datagram (64 KiB less the
 * headers); the transport cannot split it. */
#define RPC_MAX_UDP_IO (32 * 1024)

/* The largest READ, WRITE or directory reply of the transport RQ came on. */
static inline size_t rpc_max_io(const struct rpc_req *rq)
{
	return rq->proto == IPPROTO_UDP ? RPC_MAX_UDP_IO : RPC_MAX_IO;
}

#endif
