/* A bump allocator for per-change and per-transaction memory. Everything built for one change
 * (protobuf structs, converted values) is allocated here and released at once by arena_reset(). So
 * the hot path does no malloc/free per row. */
#ifndef CDC_ARENA_H
#define CDC_ARENA_H

#include <stddef.h>

typedef struct arena arena;

arena *arena_new(size_t chunk_size);
void arena_free(arena *ar);
/* Returns zeroed memory aligned for any type. Aborts on out-of-memory like the rest of cdc. */
void *arena_alloc(arena *ar, size_t size);
/* The same, not zeroed, for memory the caller writes whole at once (a copy, a struct assigned). */
void *arena_alloc_raw(arena *ar, size_t size);
char *arena_strndup(arena *ar, const char *text, size_t len);
/* Releases everything. Keeps the first chunk for reuse. */
void arena_reset(arena *ar);

#endif
