/* A FIFO of fixed-size elements in one growable circular array, for queues pushed at the back and
 * drained from the front in order (transactions awaiting delivery). It grows by doubling and never
 * shrinks until freed. */
#ifndef CDC_RING_H
#define CDC_RING_H

#include <stddef.h>

typedef struct ring {
	unsigned char *v;
	size_t size;	       /* of one element */
	size_t head, len, cap; /* cap is 0 or a power of two */
} ring;

#define RING_INIT(type) ((ring){.size = sizeof(type)})

/* The index-th element from the front (index < len). */
static inline void *ring_at(const ring *rg, size_t index)
{
	return rg->v + ((rg->head + index) & (rg->cap - 1)) * rg->size;
}
/* Appends one element at the back and returns it, zeroed. */
void *ring_push(ring *rg);
/* Drops count elements (count <= len) from the front. */
void ring_pop(ring *rg, size_t count);
/* Empties the ring, keeping its array. */
void ring_clear(ring *rg);
void ring_free(ring *rg);

#endif
