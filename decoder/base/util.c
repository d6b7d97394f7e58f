/* See util.h. */
#include "decoder/base/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *oom(size_t n)
{
	fprintf(stderr, "cdc: out of memory allocating %zu bytes\n", n);
	abort();
}

void *util_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	return p ? p : oom(n);
}

void *util_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	return p ? p : oom(n * size);
}

void *util_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	return q ? q : oom(n);
}

char *util_xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(util_xmalloc(n), s, n);
}

bool util_id_list_has(const id_list *l, uint32_t id)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i] == id)
			return true;
	return false;
}

void util_id_list_copy(id_list *dst, const id_list *src)
{
	dst->n = src->n;
	dst->v = src->n ? util_xcalloc(src->n, sizeof *dst->v) : NULL;
	if (src->n)
		memcpy(dst->v, src->v, src->n * sizeof *dst->v);
}

bool util_id_list_same(const id_list *a, const id_list *b)
{
	return a->n == b->n && (!a->n || memcmp(a->v, b->v, a->n * sizeof *a->v) == 0);
}

void util_id_list_free(id_list *l)
{
	free(l->v);
	*l = (id_list){0};
}

/* v in upper-case hex without leading zeros at p. Returns the end. */
static char *hex32(char *p, uint32_t v)
{
	/* the highest nibble that is not zero (the lowest when v is zero) */
	int shift = v ? (31 - __builtin_clz(v)) & ~3 : 0;
	for (; shift >= 0; shift -= 4)
		*p++ = "0123456789ABCDEF"[(v >> shift) & 0xF];
	return p;
}

/* By hand, not snprintf. Every event's JSON carries two LSNs, and printf cost 7% of a backfill. */
size_t util_lsn_format(uint64_t lsn, char out[LSN_STRLEN])
{
	char *p = hex32(out, (uint32_t)(lsn >> 32));
	*p++ = '/';
	p = hex32(p, (uint32_t)lsn);
	*p = '\0';
	return (size_t)(p - out);
}

void util_hex64(uint64_t v, char out[17])
{
	/* by hand, since snprintf was 5% of the Kafka sink's thread (callgrind), once per record */
	for (int i = 15; i >= 0; i--, v >>= 4)
		out[i] = "0123456789abcdef"[v & 15];
	out[16] = '\0';
}

/* One half of an LSN: 1 to 8 hex digits, then stop. NULL if there are none or more than 8. */
static const char *hex_half(const char *s, char stop, uint32_t *v)
{
	uint32_t x = 0;
	int n = 0;
	for (; *s != stop; s++, n++) {
		int d = util_hex_digit(*s);
		if (d < 0 || n == 8)
			return NULL;
		x = x << 4 | (uint32_t)d;
	}
	*v = x;
	return n ? s : NULL;
}

/* As PostgreSQL's pg_lsn reads it: no sign, space or 0x, which sscanf's %X took. */
bool util_lsn_parse(const char *s, uint64_t *lsn)
{
	uint32_t hi, lo;
	const char *slash = hex_half(s, '/', &hi);
	if (!slash || !hex_half(slash + 1, '\0', &lo))
		return false;
	*lsn = (uint64_t)hi << 32 | lo;
	return true;
}

uint64_t util_now_ms(void)
{
	return util_now_us() / 1000;
}

uint64_t util_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

int64_t util_wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t util_floor_div(int64_t a, int64_t d)
{
	int64_t q = a / d;
	return (a % d < 0) ? q - 1 : q;
}

int64_t util_wall_ms(void)
{
	return util_wall_us() / 1000;
}

bool util_errf(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return false;
}

/* Length of the well-formed UTF-8 sequence at p, or 0 with *skip set. Well-formed follows Unicode table 3-7,
 * so no overlongs, surrogates or code points past U+10FFFF. *skip gets the bytes of the maximal ill-formed
 * prefix (at least 1), which is what one U+FFFD replaces. p[0] >= 0x80. */
size_t util_utf8_seq(const unsigned char *p, size_t avail, size_t *skip)
{
	unsigned c = p[0], lo = 0x80, hi = 0xBF;
	size_t need;
	if (c >= 0xC2 && c <= 0xDF) {
		need = 1;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		*skip = 1;
		return 0;
	}
	for (size_t i = 1; i <= need; i++) {
		if (i >= avail || p[i] < lo || p[i] > hi) {
			*skip = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need + 1;
}

bool util_utf8_valid(const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		size_t skip, n = (unsigned char)s[i] < 0x80
				     ? (s[i] != '\0')
				     : util_utf8_seq((const unsigned char *)s + i, len - i, &skip);
		if (n == 0)
			return false;
		i += n;
	}
	return true;
}

uint32_t util_utf8_codepoint(const unsigned char *p, size_t n)
{
	uint32_t cp = p[0] & (0x7Fu >> n);
	for (size_t i = 1; i < n; i++)
		cp = cp << 6 | (p[i] & 0x3Fu);
	return cp;
}

void util_efd_signal(int fd)
{
	uint64_t one = 1;
	if (write(fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		abort();
}
