/* See json.h. This is the one JSON writer. The event renderer, the status documents and the JSON log lines
 * all write their text through it. */
#include "decoder/base/json.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static inline void reserve(buf *b, size_t n)
{
	if (b->cap - b->len <= n)
		buf_reserve(b, n);
}

/* Bytes that go into a JSON string as they are, the printable ASCII ones and DEL but '"' and '\\'.
 * A table costs one load per byte where three compares were. */
static const uint8_t plain_byte[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

static inline bool plain(unsigned char c)
{
	return plain_byte[c];
}

/* Whether none of the 8 bytes of v needs escaping. That is no byte below 0x20 or from 0x80 on, no '"' and no
 * '\\'. Each term has a byte's high bit set if the byte hits (exact for any byte at all). */
static inline bool plain8(uint64_t v)
{
	const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
	uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
	uint64_t below = (v - ones * 0x20) & ~v, quote = (q - ones) & ~q, slash = (b - ones) & ~b;
	return !((below | quote | slash | v) & highs);
}

void json_escape(buf *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s, *end = p + len;
	/* The invariant is room for the rest of the input unescaped, a closing quote and the NUL. */
	reserve(out, len + 2);
	while (p < end) {
		/* Plain bytes are copied as they are checked, eight at a time, then one by one. */
		char *o = out->data + out->len;
		while (end - p >= 8) {
			uint64_t v;
			memcpy(&v, p, 8);
			if (!plain8(v))
				break;
			memcpy(o, &v, 8);
			o += 8;
			p += 8;
		}
		while (p < end && plain(*p))
			*o++ = (char)*p++;
		out->len = (size_t)(o - out->data);
		if (p == end)
			break;
		/* Every byte below writes at most 6 bytes per byte it consumes, and at most 6 at once. */
		reserve(out, 6 + (size_t)(end - p) + 1);
		char *w = out->data + out->len;
		unsigned c = *p;
		if (c == '"' || c == '\\') {
			w[0] = '\\';
			w[1] = (char)c;
			out->len += 2;
			p++;
		} else if (c < 0x20) {
			char esc = c == '\n'   ? 'n'
				   : c == '\r' ? 'r'
				   : c == '\t' ? 't'
				   : c == '\b' ? 'b'
				   : c == '\f' ? 'f'
					       : 0;
			w[0] = '\\';
			if (esc) {
				w[1] = esc;
				out->len += 2;
			} else {
				memcpy(w + 1, "u00", 3);
				w[4] = hex[c >> 4];
				w[5] = hex[c & 15];
				out->len += 6;
			}
			p++;
		} else {
			size_t skip, n = util_utf8_seq(p, (size_t)(end - p), &skip);
			if (n) {
				memcpy(w, p, n);
				out->len += n;
				p += n;
			} else {
				memcpy(w, "\xEF\xBF\xBD", 3); /* U+FFFD */
				out->len += 3;
				p += skip;
			}
		}
	}
	out->data[out->len] = '\0';
}

void json_string(buf *out, const char *s, size_t len)
{
	reserve(out, len + 3);
	out->data[out->len++] = '"';
	json_escape(out, s, len); /* leaves room for the closing quote and the NUL */
	out->data[out->len++] = '"';
	out->data[out->len] = '\0';
}

/* json_str escapes this many bytes of a string while it scans them, before it asks for the length.
 * Names and most values are shorter. A strlen and a call per string cost more than the copy. */
#define JSON_SCAN_FIRST 24

void json_str(buf *out, const char *s)
{
	if (!s) {
		json_null(out);
		return;
	}
	reserve(out, JSON_SCAN_FIRST + 3);
	char *o = out->data + out->len;
	const unsigned char *p = (const unsigned char *)s, *stop = p + JSON_SCAN_FIRST;
	*o++ = '"';
	/* The NUL is not plain: the loop stops at it. */
	while (plain(*p)) {
		*o++ = (char)*p++;
		if (p == stop)
			break;
	}
	out->len = (size_t)(o - out->data);
	if (*p)
		json_escape(out, (const char *)p, strlen((const char *)p));
	out->data[out->len++] = '"';
	out->data[out->len] = '\0';
}

const char json_digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

void json_u64(buf *out, uint64_t v)
{
	/* Digits backwards into a scratch, two at a time, with no printf on the event renderer's path.
	 * Then 20 bytes are copied whatever the count, since a copy of known size is a few moves. */
	char tmp[40], *end = tmp + 20, *p = end;
	while (v >= 100) {
		p -= 2;
		memcpy(p, json_digit_pairs + 2 * (v % 100), 2);
		v /= 100;
	}
	if (v >= 10) {
		p -= 2;
		memcpy(p, json_digit_pairs + 2 * v, 2);
	} else {
		*--p = (char)('0' + v);
	}
	reserve(out, 20);
	memcpy(out->data + out->len, p, 20);
	out->len += (size_t)(end - p);
	out->data[out->len] = '\0';
}

void json_i64(buf *out, int64_t v)
{
	if (v < 0) {
		buf_putc(out, '-');
		json_u64(out, (uint64_t)0 - (uint64_t)v);
	} else {
		json_u64(out, (uint64_t)v);
	}
}

void json_base64(buf *b, const uint8_t *d, size_t n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	reserve(b, (n + 2) / 3 * 4 + 2);
	char *w = b->data + b->len;
	*w++ = '"';
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
		w[0] = tab[v >> 18];
		w[1] = tab[(v >> 12) & 63];
		w[2] = tab[(v >> 6) & 63];
		w[3] = tab[v & 63];
		w += 4;
	}
	if (i < n) {
		uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0);
		w[0] = tab[v >> 18];
		w[1] = tab[(v >> 12) & 63];
		w[2] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		w[3] = '=';
		w += 4;
	}
	*w++ = '"';
	b->len = (size_t)(w - b->data);
	b->data[b->len] = '\0';
}

bool json_nonfinite(buf *out, double v)
{
	if (isnan(v))
		buf_puts(out, "\"NaN\"");
	else if (isinf(v))
		buf_puts(out, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
	else
		return false;
	return true;
}

void json_boolean(buf *out, bool v)
{
	buf_puts(out, v ? "true" : "false");
}

void json_null(buf *out)
{
	reserve(out, 4);
	memcpy(out->data + out->len, "null", 4);
	out->len += 4;
	out->data[out->len] = '\0';
}

void json_sep(buf *out, bool *first)
{
	if (!*first)
		buf_putc(out, ',');
	*first = false;
}

void json_key(buf *out, bool *first, const char *key)
{
	json_sep(out, first);
	json_string(out, key, strlen(key));
	buf_putc(out, ':');
}

void json_key_str(buf *out, bool *first, const char *key, const char *v)
{
	json_key(out, first, key);
	json_str(out, v);
}

void json_key_u64(buf *out, bool *first, const char *key, uint64_t v)
{
	json_key(out, first, key);
	json_u64(out, v);
}

void json_key_i64(buf *out, bool *first, const char *key, int64_t v)
{
	json_key(out, first, key);
	json_i64(out, v);
}

void json_key_boolean(buf *out, bool *first, const char *key, bool v)
{
	json_key(out, first, key);
	json_boolean(out, v);
}

struct json_object *json_parse(const char *text, size_t len, int depth, char *err, size_t errlen)
{
	if (len > INT_MAX) {
		util_errf(err, errlen, "not JSON (too large)");
		return NULL;
	}
	json_tokener *tok = json_tokener_new_ex(depth);
	json_object *root = json_tokener_parse_ex(tok, text, (int)len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t end = root ? json_tokener_get_parse_end(tok) : 0;
	while (end < len && (text[end] == ' ' || text[end] == '\t' || text[end] == '\r' || text[end] == '\n'))
		end++;
	if (!root || jerr != json_tokener_success || end != len) {
		util_errf(err, errlen, "not JSON (%s)",
			  root				  ? "bytes after the object"
			  : jerr == json_tokener_continue ? "unexpected end of data"
							  : json_tokener_error_desc(jerr));
		json_object_put(root);
		root = NULL;
	}
	json_tokener_free(tok);
	return root;
}

void json_key_lsn(buf *out, bool *first, const char *key, uint64_t lsn)
{
	char s[LSN_STRLEN];
	if (!lsn) {
		json_key_str(out, first, key, NULL);
		return;
	}
	util_lsn_format(lsn, s);
	json_key_str(out, first, key, s);
}

void json_key_time(buf *out, bool *first, const char *key, int64_t us)
{
	json_key(out, first, key);
	int64_t secs = us / 1000000, frac = us % 1000000;
	if (frac < 0) {
		secs--;
		frac += 1000000;
	}
	time_t t = (time_t)secs;
	struct tm tm;
	char ts[64];
	if (!us || !gmtime_r(&t, &tm) || !strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm)) {
		json_null(out);
		return;
	}
	buf_printf(out, "\"%s.%06" PRId64 "Z\"", ts, frac);
}

const char *json_field_text(struct json_object *o, const char *key, char *out, size_t n)
{
	json_object *v = NULL;
	snprintf(out, n, "-");
	if (!o || !json_object_object_get_ex(o, key, &v) || !v)
		return out;
	switch (json_object_get_type(v)) {
	case json_type_string:
		snprintf(out, n, "%s", json_object_get_string(v));
		break;
	case json_type_int:
		snprintf(out, n, "%" PRId64, json_object_get_int64(v));
		break;
	case json_type_double:
		snprintf(out, n, "%.1f", json_object_get_double(v));
		break;
	case json_type_boolean:
		snprintf(out, n, "%s", json_object_get_boolean(v) ? "yes" : "no");
		break;
	default:
		break;
	}
	for (char *p = out; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return out;
}

void json_key_fixed3(buf *out, bool *first, const char *key, bool known, double v)
{
	json_key(out, first, key);
	if (known && isfinite(v))
		buf_printf(out, "%.3f", v);
	else
		json_null(out);
}

void json_key_hist_ms(buf *out, bool *first, const char *key, const hist *h)
{
	json_key(out, first, key);
	bool f = true;
	buf_putc(out, '{');
	json_key_u64(out, &f, "count", h->count);
	json_key_fixed3(out, &f, "p50", h->count > 0, (double)hist_quantile(h, 0.5) / 1000);
	json_key_fixed3(out, &f, "p99", h->count > 0, (double)hist_quantile(h, 0.99) / 1000);
	json_key_fixed3(out, &f, "p999", h->count > 0, (double)hist_quantile(h, 0.999) / 1000);
	json_key_fixed3(out, &f, "max", h->count > 0, (double)h->max / 1000);
	buf_putc(out, '}');
}
