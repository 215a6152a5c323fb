/* SPDX-License-Identifier: Apache-2.0 */
/* arena.c - request-scoped memory.
 *
 * A call's reply data (READ buffers, directory entries, handles) lives exactly
 * as long as the call: it is allocated while the handler runs and dropped after
 * the dispatcher has encoded the reply.  An arena makes that lifetime one free
 * instead of a free per field, and lets a handler build linked lists without an
 * error path for each node.
 *
 * The arena is a list of chunks.  Small allocations are cut from the newest
 * chunk; an allocation larger than a quarter of a chunk gets a chunk of its own
 * (linked behind the current one) so that it does not waste the rest of it.
 *
 * A READ's data is no arena block but a payload: a buffer of RPC_MAX_IO
 * bytes from a free list, since a fresh megabyte per call costs an mmap,
 * page faults on every page and a memset.
 *
 * Rules:
 *  1. Everything a call allocates dies with the call: rpc_arena_free frees
 *     its chunks, keeping one for the thread's next call (a pthread key,
 *     whose destructor frees it when the thread ends), and puts back every
 *     payload the arena still owns.
 *  2. A payload outlives the call only when taken: the arena owns it until
 *     the dispatcher moves it into the reply (rpc_arena_payload_take), and
 *     the transport gives it back after sending (rpc_payload_put), since a
 *     reply may wait in a connection's out queue after the arena is freed.
 *  3. The free list keeps at most PAYLOAD_KEEP buffers (rpc_payload_put);
 *     more in use at once are allocated and freed as needed.
 *  4. A payload's pipe (data spliced from a file) is made on first use and
 *     kept with its buffer, unless it still holds bytes of a reply dropped
 *     half sent: then it is closed (rpc_payload_put).  At most PIPES_MAX
 *     pipes are open, no more descriptors than an 8th of RLIMIT_NOFILE
 *     (rpc_payload_pipe); past that a READ is read into memory, as over UDP.
 */
#define _GNU_SOURCE /* pipe2, F_SETPIPE_SZ */
#include <fcntl.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rpc.h"

#define ARENA_CHUNK   (16 * 1024)
#define PAYLOAD_KEEP  32	 /* free payload buffers kept for reuse */
#define PAYLOAD_SIZE  RPC_MAX_IO /* a multiple of 4: room for XDR padding */
#define PAGE_ALIGN    4096
#define PIPES_MAX     1024 /* payload pipes open at once, at most */
#define PIPES_FD_PART 8	   /* and their descriptors 1/8 of RLIMIT_NOFILE */

struct arena_chunk {
	struct arena_chunk *next;
	size_t used, size;
	alignas(max_align_t) unsigned char data[];
};

struct rpc_arena {
	struct arena_chunk *head;     /* the chunk small allocations come from */
	struct rpc_payload *payloads; /* owned until rpc_arena_payload_take */
};

static struct {
	pthread_mutex_t lock;
	struct rpc_payload *free;
	size_t nfree;
} payloads = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct arena_chunk *chunk_new(size_t size)
{
	struct arena_chunk *c = malloc(sizeof(*c) + size);

	if (!c)
		return NULL;
	c->next = NULL;
	c->used = 0;
	c->size = size;
	return c;
}

/* Frees A's chunks but KEEP (NULL: all); A itself stays. */
static void free_chunks(struct rpc_arena *a, struct arena_chunk *keep)
{
	struct arena_chunk *c, *next;

	for (c = a->head; c; c = next) {
		next = c->next;
		if (c != keep)
			free(c);
	}
	a->head = keep;
	if (keep) {
		keep->next = NULL;
		keep->used = 0;
	}
}

static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static bool spare_ok; /* the key exists: threads keep a spare arena */

static void spare_destroy(void *p)
{
	free_chunks(p, NULL);
	free(p);
}

static void spare_init(void)
{
	spare_ok = pthread_key_create(&spare_key, spare_destroy) == 0;
}

struct rpc_arena *rpc_arena_new(void)
{
	struct rpc_arena *a = NULL;

	pthread_once(&spare_once, spare_init);
	if (spare_ok)
		a = pthread_getspecific(spare_key);
	if (!a)
		return calloc(1, sizeof(struct rpc_arena));
	pthread_setspecific(spare_key, NULL);
	return a;
}

void rpc_arena_free(struct rpc_arena *a)
{
	struct arena_chunk *keep = NULL;

	if (!a)
		return;
	while (a->payloads)
		rpc_payload_put(rpc_arena_payload_take(a, a->payloads));
	for (struct arena_chunk *c = a->head; c && !keep; c = c->next)
		if (c->size == ARENA_CHUNK)
			keep = c;
	free_chunks(a, keep);
	pthread_once(&spare_once, spare_init);
	if (spare_ok && !pthread_getspecific(spare_key) &&
	    pthread_setspecific(spare_key, a) == 0)
		return;
	spare_destroy(a);
}

static size_t align_up(size_t n)
{
	const size_t al = alignof(max_align_t);

	return (n + al - 1) & ~(al - 1);
}

/* A chunk holding one large block: linked second so the head keeps serving. */
static void *alloc_large(struct rpc_arena *a, size_t size)
{
	struct arena_chunk *c = chunk_new(size);

	if (!c)
		return NULL;
	c->used = size;
	if (a->head) {
		c->next = a->head->next;
		a->head->next = c;
	} else {
		a->head = c;
	}
	memset(c->data, 0, size);
	return c->data;
}

void *rpc_arena_alloc(struct rpc_arena *a, size_t size)
{
	struct arena_chunk *c;
	void *p;

	if (size == 0)
		size = 1;
	if (size > SIZE_MAX / 2)
		return NULL;
	size = align_up(size);
	if (size > ARENA_CHUNK / 4)
		return alloc_large(a, size);
	c = a->head;
	if (!c || c->size - c->used < size) {
		c = chunk_new(ARENA_CHUNK);
		if (!c)
			return NULL;
		c->next = a->head;
		a->head = c;
	}
	p = c->data + c->used;
	c->used += size;
	memset(p, 0, size);
	return p;
}

char *rpc_arena_strndup(struct rpc_arena *a, const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *p = rpc_arena_alloc(a, len + 1);

	if (!p)
		return NULL;
	memcpy(p, s, len);
	p[len] = '\0';
	return p;
}

/* ---- payloads ---- */

static struct rpc_payload *payload_new(void)
{
	struct rpc_payload *p = malloc(sizeof(*p));

	if (!p)
		return NULL;
	/* Page-aligned: the copies into and out of it run on whole pages. */
	p->data = aligned_alloc(PAGE_ALIGN, PAYLOAD_SIZE);
	if (!p->data) {
		free(p);
		return NULL;
	}
	p->cap = PAYLOAD_SIZE;
	p->pipe[0] = p->pipe[1] = -1;
	return p;
}

/* The most pipes open at once (two descriptors each): replies waiting for
 * slow clients must not take the descriptors the engine opens files with. */
static unsigned pipes_max;
static atomic_uint pipes_open;
static pthread_once_t pipes_once = PTHREAD_ONCE_INIT;

static void pipes_limit(void)
{
	struct rlimit rl;
	rlim_t fds = 1024; /* the usual soft limit, when it cannot be read */

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		fds = rl.rlim_cur;
	fds /= PIPES_FD_PART * 2;
	pipes_max = fds < PIPES_MAX ? (unsigned)fds : PIPES_MAX;
}

static void payload_pipe_close(struct rpc_payload *p)
{
	if (p->pipe[0] < 0)
		return;
	close(p->pipe[0]);
	close(p->pipe[1]);
	p->pipe[0] = p->pipe[1] = -1;
	atomic_fetch_sub(&pipes_open, 1);
}

int rpc_payload_pipe(struct rpc_payload *p)
{
	if (p->pipe[1] >= 0)
		return p->pipe[1];
	pthread_once(&pipes_once, pipes_limit);
	if (atomic_fetch_add(&pipes_open, 1) >= pipes_max ||
	    pipe2(p->pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
		atomic_fetch_sub(&pipes_open, 1);
		p->pipe[0] = p->pipe[1] = -1;
		return -1;
	}
	/* The default 64 KiB would split a READ into many short ones. */
	if (fcntl(p->pipe[1], F_SETPIPE_SZ, PAYLOAD_SIZE) < PAYLOAD_SIZE) {
		payload_pipe_close(p);
		return -1;
	}
	return p->pipe[1];
}

struct rpc_payload *rpc_arena_payload(struct rpc_arena *a, size_t size)
{
	struct rpc_payload *p;

	if (size > PAYLOAD_SIZE)
		return NULL;
	pthread_mutex_lock(&payloads.lock);
	p = payloads.free;
	if (p) {
		payloads.free = p->next;
		payloads.nfree--;
	}
	pthread_mutex_unlock(&payloads.lock);
	if (!p)
		p = payload_new();
	if (!p)
		return NULL;
	p->len = p->piped = p->in_pipe = 0;
	p->next = a->payloads;
	a->payloads = p;
	return p;
}

struct rpc_payload *rpc_arena_payload_take(struct rpc_arena *a, struct rpc_payload *p)
{
	struct rpc_payload **pp = &a->payloads;

	while (*pp != p)
		pp = &(*pp)->next; /* P is A's: the loop ends */
	*pp = p->next;
	p->next = NULL;
	return p;
}

void rpc_payload_put(struct rpc_payload *p)
{
	if (!p)
		return;
	/* A pipe holding bytes of a reply never sent is of no use again. */
	if (p->in_pipe)
		payload_pipe_close(p);
	pthread_mutex_lock(&payloads.lock);
	if (payloads.nfree < PAYLOAD_KEEP) {
		p->next = payloads.free;
		payloads.free = p;
		payloads.nfree++;
		p = NULL;
	}
	pthread_mutex_unlock(&payloads.lock);
	if (p) {
		payload_pipe_close(p);
		free(p->data);
		free(p);
	}
}
