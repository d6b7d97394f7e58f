/* See buf.h. */
#include "decoder/base/buf.h"

#include "decoder/base/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_grow(buf *b, size_t extra)
{
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len <= extra)
		cap *= 2;
	b->data = util_xrealloc(b->data, cap);
	b->cap = cap;
}

void buf_append(buf *b, const void *p, size_t n)
{
	buf_reserve(b, n);
	if (n) /* p may be NULL then (an empty buf's data), which memcpy must not get */
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void buf_puts(buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

void buf_printf(buf *b, const char *fmt, ...)
{
	/* Format into the spare room. Only if it does not fit, grow and format again. */
	buf_reserve(b, 64);
	for (;;) {
		size_t room = b->cap - b->len;
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->data + b->len, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->data[b->len] = '\0';
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		buf_reserve(b, (size_t)n);
	}
}

void buf_reset(buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_free(buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}
