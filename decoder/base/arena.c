/* A chunked bump allocator (see arena.h). */
#include "decoder/base/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/util.h"

typedef struct chunk {
	struct chunk *next;
	size_t size, used;
	max_align_t data[];
} chunk;

struct arena {
	chunk *head;
	size_t chunk_size;
};

static chunk *chunk_new(size_t size)
{
	chunk *c = util_xmalloc(sizeof(chunk) + size);
	c->next = NULL;
	c->size = size;
	c->used = 0;
	return c;
}

arena *arena_new(size_t chunk_size)
{
	arena *a = util_xmalloc(sizeof(*a));
	a->chunk_size = chunk_size;
	a->head = chunk_new(chunk_size);
	return a;
}

void arena_free(arena *a)
{
	if (!a)
		return;
	for (chunk *c = a->head, *next; c; c = next) {
		next = c->next;
		free(c);
	}
	free(a);
}

void *arena_alloc_raw(arena *a, size_t size)
{
	size_t align = _Alignof(max_align_t);
	size = (size + align - 1) & ~(align - 1);
	chunk *c = a->head;
	if (c->size - c->used < size) {
		/* Oversized requests get a chunk of their own behind the current one. */
		c = chunk_new(size > a->chunk_size ? size : a->chunk_size);
		c->next = a->head;
		a->head = c;
	}
	void *p = (char *)c->data + c->used;
	c->used += size;
	return p;
}

void *arena_alloc(arena *a, size_t size)
{
	return memset(arena_alloc_raw(a, size), 0, size);
}

char *arena_strndup(arena *a, const char *s, size_t len)
{
	char *p = arena_alloc_raw(a, len + 1);
	memcpy(p, s, len);
	p[len] = '\0';
	return p;
}

void arena_reset(arena *a)
{
	/* Keep the oldest chunk (the tail), since it has the configured size. */
	chunk *c = a->head;
	while (c->next) {
		chunk *next = c->next;
		free(c);
		c = next;
	}
	c->used = 0;
	a->head = c;
}
