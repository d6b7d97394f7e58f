/* test_json.c: the base JSON writer: numbers at their limits, strings escaped (invalid UTF-8
 * replaced), null for a missing string, and commas only between members. */
#include "decoder/base/json.h"

#include <stdint.h>

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
	test_members();
	return TEST_SUMMARY("test_json");
}
