/* copy.c: COPY's text format, the way the server writes it (CopyAttributeOutText) and reads it
 * (CopyReadAttributesText): a backslash escapes the next character, b f n r t v name control
 * characters, digits and x give a byte in octal or hex, \N alone is NULL. */
#include "cdc/backfill/copy.h"

#include <string.h>

#include "decoder/base/bytes.h"
#include "decoder/base/util.h"

/* The field [p, end) unescaped onto dst, which has room for end - p bytes; returns its length,
 * or -1 for a backslash at the end. */
static long unescape(const char *p, const char *end, char *dst)
{
	char *o = dst;
	while (p < end) {
		const char *bs = memchr(p, '\\', (size_t)(end - p));
		size_t run = bs ? (size_t)(bs - p) : (size_t)(end - p);
		memcpy(o, p, run);
		o += run;
		p += run;
		if (!bs)
			break;
		if (++p == end)
			return -1;
		char c = *p++;
		switch (c) {
		case 'b':
			*o++ = '\b';
			break;
		case 'f':
			*o++ = '\f';
			break;
		case 'n':
			*o++ = '\n';
			break;
		case 'r':
			*o++ = '\r';
			break;
		case 't':
			*o++ = '\t';
			break;
		case 'v':
			*o++ = '\v';
			break;
		case 'x':
			if (p < end && util_hex_digit(*p) >= 0) {
				int v = util_hex_digit(*p++);
				if (p < end && util_hex_digit(*p) >= 0)
					v = v * 16 + util_hex_digit(*p++);
				*o++ = (char)v;
			} else {
				*o++ = 'x';
			}
			break;
		default:
			if (c >= '0' && c <= '7') {
				int v = c - '0';
				for (int i = 0; i < 2 && p < end && *p >= '0' && *p <= '7'; i++)
					v = v * 8 + (*p++ - '0');
				*o++ = (char)v;
			} else {
				*o++ = c;
			}
			break;
		}
	}
	return (long)(o - dst);
}

bool backfill_copy_encode(const char *line, size_t len, size_t n, buf *out, size_t *at, char *err,
			  size_t errlen)
{
	if (len && line[len - 1] == '\n')
		len--;
	if (len > INT32_MAX)
		return util_errf(err, errlen, "a row of %zu bytes is too long", len);
	if (n == 0) { /* a table without columns: its rows are empty lines */
		at[0] = out->len;
		return len == 0 || util_errf(err, errlen, "the row has fields, not 0");
	}
	/* Room for every field's length and the bytes, which unescaping only shortens. */
	buf_reserve(out, 4 * n + len + 1);
	const char *p = line, *end = line + len;
	size_t i = 0;
	for (;;) {
		const char *tab = memchr(p, '\t', (size_t)(end - p)), *stop = tab ? tab : end;
		if (i == n)
			return util_errf(err, errlen, "the row has more than %zu fields", n);
		size_t flen = (size_t)(stop - p);
		uint8_t *head = (uint8_t *)out->data + out->len;
		at[i] = out->len;
		out->len += 4;
		if (!memchr(p, '\\', flen)) {
			put_be32(head, (uint32_t)flen);
			memcpy(out->data + out->len, p, flen);
			out->len += flen;
		} else if (flen == 2 && p[1] == 'N') {
			put_be32(head, UINT32_MAX);
		} else {
			long ulen = unescape(p, stop, out->data + out->len);
			if (ulen < 0)
				return util_errf(err, errlen, "field %zu ends in a lone backslash", i + 1);
			put_be32(head, (uint32_t)ulen);
			out->len += (size_t)ulen;
		}
		i++;
		if (!tab)
			break;
		p = tab + 1;
	}
	out->data[out->len] = '\0';
	at[i] = out->len;
	if (i != n)
		return util_errf(err, errlen, "the row has %zu fields, not %zu", i, n);
	return true;
}
