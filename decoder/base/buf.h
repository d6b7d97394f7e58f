/* A growable byte buffer, which every writer of JSON, protobuf and text appends to. */
#ifndef CDC_BUF_H
#define CDC_BUF_H

#include <stddef.h>

/* A growable byte buffer. data is always NUL-terminated (not counted in len). */
typedef struct buf {
	char *data;
	size_t len, cap;
} buf;

/* Room for extra more bytes (and the NUL). The check is inline. The writers call it for every few
 * bytes, and the call alone was 9% of the Kafka sink's thread (callgrind). */
void buf_grow(buf *buffer, size_t extra);
static inline void buf_reserve(buf *buffer, size_t extra)
{
	if (buffer->cap - buffer->len <= extra)
		buf_grow(buffer, extra);
}
void buf_append(buf *buffer, const void *data, size_t count);
void buf_puts(buf *buffer, const char *text);
static inline void buf_putc(buf *buffer, char ch)
{
	buf_reserve(buffer, 1);
	buffer->data[buffer->len++] = ch;
	buffer->data[buffer->len] = '\0';
}
void buf_printf(buf *buffer, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_reset(buf *buffer);
void buf_free(buf *buffer);

#endif
