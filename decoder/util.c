/* util.c: see util.h. */
#include "util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *oom(size_t n)
{
	fprintf(stderr, "cdc: out of memory allocating %zu bytes\n", n);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	return p ? p : oom(n);
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	return p ? p : oom(n * size);
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	return q ? q : oom(n);
}

char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xmalloc(n), s, n);
}

void buf_reserve(buf *b, size_t extra)
{
	if (b->cap - b->len > extra)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len <= extra)
		cap *= 2;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

void buf_append(buf *b, const void *p, size_t n)
{
	buf_reserve(b, n);
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void buf_puts(buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

void buf_putc(buf *b, char c)
{
	buf_reserve(b, 1);
	b->data[b->len++] = c;
	b->data[b->len] = '\0';
}

void buf_printf(buf *b, const char *fmt, ...)
{
	/* Format into the spare room; only if it does not fit, grow and format again. */
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

void lsn_format(uint64_t lsn, char out[LSN_STRLEN])
{
	snprintf(out, LSN_STRLEN, "%" PRIX32 "/%" PRIX32, (uint32_t)(lsn >> 32), (uint32_t)lsn);
}

bool lsn_parse(const char *s, uint64_t *lsn)
{
	unsigned int hi, lo;
	int n = 0;
	if (sscanf(s, "%8X/%8X%n", &hi, &lo, &n) != 2 || s[n] != '\0')
		return false;
	*lsn = ((uint64_t)hi << 32) | lo;
	return true;
}

bool errf(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return false;
}
