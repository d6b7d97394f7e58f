/* test_json.c: the base JSON writer: numbers at their limits, strings escaped (invalid UTF-8
 * replaced; eight plain bytes at a time, checked against a byte-by-byte escape on random strings,
 * as json_str's scan of a string's first bytes is), integers against printf, null for a missing
 * string, and commas only between members. */
#include "decoder/base/json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static void test_scalars(void)
{
	buf b = {0};
	json_u64(&b, 0);
	buf_putc(&b, ' ');
	json_u64(&b, UINT64_MAX);
	buf_putc(&b, ' ');
	json_i64(&b, INT64_MIN);
	buf_putc(&b, ' ');
	json_i64(&b, -7);
	buf_putc(&b, ' ');
	json_boolean(&b, true);
	buf_putc(&b, ' ');
	json_boolean(&b, false);
	buf_putc(&b, ' ');
	json_null(&b);
	buf_putc(&b, ' ');
	json_str(&b, NULL);
	buf_putc(&b, ' ');
	json_str(&b, "a\"b\\c\n\x01\xff");
	CHECK_STR(b.data, "0 18446744073709551615 -9223372036854775808 -7 true false null null "
			  "\"a\\\"b\\\\c\\n\\u0001\xEF\xBF\xBD\"");
	buf_free(&b);
}

/* json_escape one byte at a time, as it was before its fast path. */
static void escape_slowly(buf *out, const unsigned char *p, size_t len)
{
	const unsigned char *end = p + len;
	while (p < end) {
		unsigned c = *p;
		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
			buf_putc(out, (char)c);
			p++;
		} else if (c == '"' || c == '\\') {
			buf_putc(out, '\\');
			buf_putc(out, (char)c);
			p++;
		} else if (c < 0x20) {
			const char *named = c == '\n'	? "\\n"
					    : c == '\r' ? "\\r"
					    : c == '\t' ? "\\t"
					    : c == '\b' ? "\\b"
					    : c == '\f' ? "\\f"
							: NULL;
			if (named)
				buf_puts(out, named);
			else
				buf_printf(out, "\\u%04x", c);
			p++;
		} else {
			size_t skip, n = util_utf8_seq(p, (size_t)(end - p), &skip);
			if (n) {
				buf_append(out, p, n);
				p += n;
			} else {
				buf_puts(out, "\xEF\xBF\xBD");
				p += skip;
			}
		}
	}
}

static void test_escape_fast_path(void)
{
	/* bytes that need escaping, and plain ones, mixed at every length and position */
	static const unsigned char alphabet[] = {'a',  'Z',  '0',  ' ',	 '~',  '"',  '\\', '\n', 0x01, 0x1f,
						 0x7f, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xff, 0x80, 0x20, 0x21};
	unsigned seed = 12345;
	int mismatches = 0;
	for (int round = 0; round < 20000; round++) {
		unsigned char s[64];
		size_t len = (size_t)(round % 41);
		for (size_t i = 0; i < len; i++) {
			seed = seed * 1103515245u + 12345u;
			/* mostly plain runs, so that the eight-byte path is taken */
			s[i] = (seed >> 16) % 4 ? (unsigned char)('a' + (seed >> 20) % 26)
						: alphabet[(seed >> 20) % sizeof(alphabet)];
		}
		buf fast = {0}, slow = {0}, str = {0};
		json_escape(&fast, (const char *)s, len);
		escape_slowly(&slow, s, len);
		if (fast.len != slow.len || (fast.len && memcmp(fast.data, slow.data, fast.len) != 0))
			mismatches++;
		/* json_str scans its first bytes before it knows the length: the same literal */
		s[len] = '\0';
		json_str(&str, (const char *)s);
		if (str.len != slow.len + 2 || str.data[0] != '"' || str.data[str.len - 1] != '"' ||
		    (slow.len && memcmp(str.data + 1, slow.data, slow.len) != 0) || str.data[str.len] != '\0')
			mismatches++;
		buf_free(&fast);
		buf_free(&slow);
		buf_free(&str);
	}
	CHECK_INT(mismatches, 0);
}

/* Integers two digits at a time: every count of digits, against printf. */
static void test_integers(void)
{
	int mismatches = 0;
	uint64_t v = 1;
	for (int digits = 1; digits <= 20; digits++, v *= 10) {
		uint64_t cases[] = {v - 1, v, v + 1, v * 3 + 7, digits == 20 ? UINT64_MAX : v * 10 - 1};
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			char want[64];
			buf b = {0};
			buf_puts(&b, "x");
			json_u64(&b, cases[i]);
			json_i64(&b, -(int64_t)(cases[i] >> 1));
			snprintf(want, sizeof(want), "x%llu-%llu", (unsigned long long)cases[i],
				 (unsigned long long)(cases[i] >> 1));
			if (cases[i] >> 1 == 0)
				snprintf(want, sizeof(want), "x%llu0", (unsigned long long)cases[i]);
			mismatches += strcmp(b.data, want) != 0 || b.len != strlen(want);
			buf_free(&b);
		}
	}
	CHECK_INT(mismatches, 0);
}

static void test_members(void)
{
	buf b = {0};
	bool f = true, fa = true;
	buf_putc(&b, '{');
	json_key_str(&b, &f, "s", "x");
	json_key_u64(&b, &f, "n", 42);
	json_key_boolean(&b, &f, "ok", true);
	json_key(&b, &f, "a");
	buf_putc(&b, '[');
	for (int i = 0; i < 3; i++) {
		json_sep(&b, &fa);
		json_i64(&b, i);
	}
	buf_putc(&b, ']');
	json_key_str(&b, &f, "none", NULL);
	buf_putc(&b, '}');
	CHECK_STR(b.data, "{\"s\":\"x\",\"n\":42,\"ok\":true,\"a\":[0,1,2],\"none\":null}");
	buf_free(&b);
}

int main(void)
{
	test_scalars();
	test_escape_fast_path();
	test_integers();
	test_members();
	return TEST_SUMMARY("test_json");
}
