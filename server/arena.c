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
 */
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

#define ARENA_CHUNK (16 * 1024)

struct arena_chunk {
	struct arena_chunk *next;
	size_t used, size;
	alignas(max_align_t) unsigned char data[];
};

struct srv_arena {
	struct arena_chunk *head; /* the chunk small allocations come from */
};

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

struct srv_arena *srv_arena_new(void)
{
	return calloc(1, sizeof(struct srv_arena));
}

void srv_arena_free(struct srv_arena *a)
{
	struct arena_chunk *c, *next;

	if (!a)
		return;
	for (c = a->head; c; c = next) {
		next = c->next;
		free(c);
	}
	free(a);
}

static size_t align_up(size_t n)
{
	const size_t al = alignof(max_align_t);

	return (n + al - 1) & ~(al - 1);
}

/* A chunk holding one large block: linked second so the head keeps serving. */
static void *alloc_large(struct srv_arena *a, size_t size)
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

void *srv_arena_alloc(struct srv_arena *a, size_t size)
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

char *srv_arena_strndup(struct srv_arena *a, const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *p = srv_arena_alloc(a, len + 1);

	if (!p)
		return NULL;
	memcpy(p, s, len);
	p[len] = '\0';
	return p;
}
