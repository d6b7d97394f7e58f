/* See ring.h. */
#include "decoder/base/ring.h"

#include <stdlib.h>
#include <string.h>

#include "decoder/base/util.h"

void *ring_push(ring *r)
{
	if (r->len == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		unsigned char *v = util_xmalloc(cap * r->size);
		for (size_t i = 0; i < r->len; i++)
			memcpy(v + i * r->size, ring_at(r, i), r->size);
		free(r->v);
		r->v = v;
		r->cap = cap;
		r->head = 0;
	}
	void *e = ring_at(r, r->len++);
	memset(e, 0, r->size);
	return e;
}

void ring_pop(ring *r, size_t n)
{
	r->head = (r->head + n) & (r->cap - 1);
	r->len -= n;
}

void ring_clear(ring *r)
{
	r->head = r->len = 0;
}

void ring_free(ring *r)
{
	free(r->v);
	*r = (ring){.size = r->size};
}
