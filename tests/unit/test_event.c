/* test_event.c: unit tests for typed values (decoder/event.c), their JSON (sinks/event_json.c) and the
 * built-in type names (decoder/pgtypes.c): one table row per type and text form, then whole
 * events built from hand-made relations and messages, checked as exact JSON lines and protobuf. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/ddl.h"
#include "decoder/event.h"
#include "decoder/pgtypes.h"
#include "decoder/schema.h"
#include "sinks/event_json.h"
#include "test.h"

static arena *A;
static pgo_relcache *RC;

#define MOOD_OID 16390 /* an enum type announced by a Type message */

/* Lower-case hex of bytes, for comparing binary values in the tables. */
static const char *hex(const ProtobufCBinaryData *d)
{
	static char out[1024];
	static const char digits[] = "0123456789abcdef";
	size_t n = d->len < sizeof(out) / 2 ? d->len : sizeof(out) / 2 - 1;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[d->data[i] >> 4];
		out[2 * i + 1] = digits[d->data[i] & 15];
	}
	out[2 * n] = '\0';
	return out;
}

/* The JSON of one value: the event JSON of a row with the single column "v", cut down to what
 * follows "v":, or "(omitted)" when the column is left out of the row (unchanged TOAST). */
static const char *value_json(const Cdc__V1__Value *v)
{
	static buf b;
	static char out[4096];
	Cdc__V1__Column c = CDC__V1__COLUMN__INIT, *cp = &c;
	c.name = "v";
	c.value = (Cdc__V1__Value *)v;
	Cdc__V1__Row r = CDC__V1__ROW__INIT;
	r.n_columns = 1;
	r.columns = &cp;
	Cdc__V1__Event e = CDC__V1__EVENT__INIT;
	e.new_row = &r;
	buf_reset(&b);
	sink_json_event(&b, &e);
	const char *start = strstr(b.data, ",\"new\":{"), *end = strstr(b.data, "},\"old\":null");
	if (!start || !end)
		return "(no new row)";
	start += strlen(",\"new\":{");
	if (start == end)
		return "(omitted)";
	if (strncmp(start, "\"v\":", 4) != 0)
		return "(bad column)";
	start += 4;
	size_t n = (size_t)(end - start) < sizeof(out) - 1 ? (size_t)(end - start) : sizeof(out) - 1;
	memcpy(out, start, n);
	out[n] = '\0';
	return out;
}

typedef struct vcase {
	int line;
	uint32_t oid;
	char datum;	/* 't', 'n', 'u' or 'b' */
	const char *in; /* the datum's bytes */
	int inlen;	/* -1: strlen(in) */
	Cdc__V1__Value__KindCase kind;
	int64_t i;	  /* int, bool, date, time, timestamp micros */
	double f;	  /* float */
	const char *s;	  /* numeric, text, json, other text; bytes, uuid, binary as hex */
	const char *type; /* other: type_name */
	bool zone;	  /* timestamp: with_zone */
	const char *json; /* the value in the event JSON */
} vcase;

/* clang-format off */
#define D(o, kind_char, bytes, n, k, ...) \
	{.line = __LINE__, .oid = (o), .datum = (kind_char), .in = (bytes), .inlen = (n), \
	 .kind = CDC__V1__VALUE__KIND_##k, __VA_ARGS__}
/* A text datum */
#define V(o, text, k, ...) D(o, 't', text, -1, k, __VA_ARGS__)
/* clang-format on */
#define BAD(o, text, tname, js) V(o, text, OTHER_VALUE, .s = (text), .type = (tname), .json = (js))

#define TSTZ_2026 INT64_C(1795341600123456) /* 2026-11-22 10:00:00.123456 UTC */
#define BC44 INT64_C(-63517787999500000)    /* 0044-03-15 10:00:00.5 BC */

/* clang-format off */
static const vcase cases[] = {
	/* integers */
	V(PGT_INT2, "-32768", INT_VALUE, .i = -32768, .json = "-32768"),
	V(PGT_INT2, "0", INT_VALUE, .i = 0, .json = "0"),
	V(PGT_INT4, "2147483647", INT_VALUE, .i = 2147483647, .json = "2147483647"),
	V(PGT_INT8, "-9223372036854775808", INT_VALUE, .i = INT64_MIN, .json = "-9223372036854775808"),
	V(PGT_INT8, "9223372036854775807", INT_VALUE, .i = INT64_MAX, .json = "9223372036854775807"),
	V(PGT_OID, "4294967295", INT_VALUE, .i = 4294967295, .json = "4294967295"),
	BAD(PGT_INT8, "9223372036854775808", "int8", "\"9223372036854775808\""),
	BAD(PGT_INT8, "-9223372036854775809", "int8", "\"-9223372036854775809\""),
	BAD(PGT_INT4, "12a", "int4", "\"12a\""),
	BAD(PGT_INT4, "", "int4", "\"\""),
	BAD(PGT_INT4, "-", "int4", "\"-\""),
	/* floats: JSON has the shortest of 15-17 significant digits that reads back the same */
	V(PGT_FLOAT8, "1.1", FLOAT_VALUE, .f = 1.1, .json = "1.1"),
	V(PGT_FLOAT4, "1.1", FLOAT_VALUE, .f = 1.1, .json = "1.1"),
	V(PGT_FLOAT8, "-120.05", FLOAT_VALUE, .f = -120.05, .json = "-120.05"),
	V(PGT_FLOAT8, "0.30000000000000004", FLOAT_VALUE, .f = 0.1 + 0.2, .json = "0.30000000000000004"),
	V(PGT_FLOAT8, "-0", FLOAT_VALUE, .f = -0.0, .json = "-0"),
	V(PGT_FLOAT8, "NaN", FLOAT_VALUE, .f = NAN, .json = "\"NaN\""),
	V(PGT_FLOAT8, "Infinity", FLOAT_VALUE, .f = INFINITY, .json = "\"Infinity\""),
	V(PGT_FLOAT4, "-Infinity", FLOAT_VALUE, .f = -INFINITY, .json = "\"-Infinity\""),
	V(PGT_FLOAT8, "1e+100", FLOAT_VALUE, .f = 1e100, .json = "1e+100"),
	V(PGT_FLOAT8, "1.5e-07", FLOAT_VALUE, .f = 1.5e-7, .json = "1.5e-07"),
	V(PGT_FLOAT8, "5e-324", FLOAT_VALUE, .f = 5e-324, .json = "4.94065645841247e-324"),
	V(PGT_FLOAT4, "3.4028235e+38", FLOAT_VALUE, .f = 3.4028235e+38, .json = "3.4028235e+38"),
	V(PGT_FLOAT8, "1.7976931348623157e+308", FLOAT_VALUE, .f = 1.7976931348623157e308, .json = "1.7976931348623157e+308"),
	V(PGT_FLOAT8, "123456789012345680", FLOAT_VALUE, .f = 123456789012345680.0, .json = "1.2345678901234568e+17"),
	BAD(PGT_FLOAT8, "1e+400", "float8", "\"1e+400\""),
	BAD(PGT_FLOAT8, "nan", "float8", "\"nan\""),
	BAD(PGT_FLOAT8, "0x10", "float8", "\"0x10\""),
	/* bool */
	V(PGT_BOOL, "t", BOOL_VALUE, .i = 1, .json = "true"),
	V(PGT_BOOL, "f", BOOL_VALUE, .i = 0, .json = "false"),
	BAD(PGT_BOOL, "true", "bool", "\"true\""),
	/* numeric: exact text */
	V(PGT_NUMERIC, "-12.3400", NUMERIC_VALUE, .s = "-12.3400", .json = "\"-12.3400\""),
	V(PGT_NUMERIC, "NaN", NUMERIC_VALUE, .s = "NaN", .json = "\"NaN\""),
	V(PGT_NUMERIC, "-Infinity", NUMERIC_VALUE, .s = "-Infinity", .json = "\"-Infinity\""),
	V(PGT_NUMERIC, "123456789012345678901234567890.000000000000000000001", NUMERIC_VALUE,
	  .s = "123456789012345678901234567890.000000000000000000001",
	  .json = "\"123456789012345678901234567890.000000000000000000001\""),
	/* text types */
	V(PGT_TEXT, "", TEXT_VALUE, .s = "", .json = "\"\""),
	V(PGT_TEXT, "say \"hi\" \\ back/", TEXT_VALUE, .s = "say \"hi\" \\ back/", .json = "\"say \\\"hi\\\" \\\\ back/\""),
	V(PGT_TEXT, "\x01\b\t\n\f\r\x1f\x7f", TEXT_VALUE, .s = "\x01\b\t\n\f\r\x1f\x7f",
	  .json = "\"\\u0001\\b\\t\\n\\f\\r\\u001f\x7f\""),
	V(PGT_TEXT, "a\xff!", TEXT_VALUE, .s = "a\xff!", .json = "\"a\xEF\xBF\xBD!\""),
	V(PGT_TEXT, "\xF0\x9F\x98\x80 caf\xC3\xA9 \xE2\x82\xAC", TEXT_VALUE, .s = "\xF0\x9F\x98\x80 caf\xC3\xA9 \xE2\x82\xAC",
	  .json = "\"\xF0\x9F\x98\x80 caf\xC3\xA9 \xE2\x82\xAC\""),
	/* a surrogate, an overlong '/', a code point past U+10FFFF, a truncated emoji: one U+FFFD per
	 * maximal ill-formed subpart, as Unicode recommends */
	V(PGT_TEXT, "\xED\xA0\x80|\xC0\xAF|\xF4\x90\x80\x80|\xF0\x9F\x98", TEXT_VALUE,
	  .s = "\xED\xA0\x80|\xC0\xAF|\xF4\x90\x80\x80|\xF0\x9F\x98",
	  .json = "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD|"
		  "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\""),
	V(PGT_VARCHAR, "v", TEXT_VALUE, .s = "v", .json = "\"v\""),
	V(PGT_BPCHAR, "ab  ", TEXT_VALUE, .s = "ab  ", .json = "\"ab  \""),
	V(PGT_NAME, "pg_class", TEXT_VALUE, .s = "pg_class", .json = "\"pg_class\""),
	V(PGT_CHAR, "\"", TEXT_VALUE, .s = "\"", .json = "\"\\\"\""),
	/* bytea */
	V(PGT_BYTEA, "\\x", BYTES_VALUE, .s = "", .json = "\"\""),
	V(PGT_BYTEA, "\\xDEADbeef", BYTES_VALUE, .s = "deadbeef", .json = "\"3q2+7w==\""),
	V(PGT_BYTEA, "\\x00ff00", BYTES_VALUE, .s = "00ff00", .json = "\"AP8A\""),
	V(PGT_BYTEA, "\\x61", BYTES_VALUE, .s = "61", .json = "\"YQ==\""),
	V(PGT_BYTEA, "\\x6162", BYTES_VALUE, .s = "6162", .json = "\"YWI=\""),
	BAD(PGT_BYTEA, "\\x0", "bytea", "\"\\\\x0\""),
	BAD(PGT_BYTEA, "\\xzz", "bytea", "\"\\\\xzz\""),
	BAD(PGT_BYTEA, "\\001", "bytea", "\"\\\\001\""),
	/* uuid */
	V(PGT_UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", UUID_VALUE, .s = "a0eebc999c0b4ef8bb6d6bb9bd380a11",
	  .json = "\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\""),
	V(PGT_UUID, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", UUID_VALUE, .s = "a0eebc999c0b4ef8bb6d6bb9bd380a11",
	  .json = "\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\""),
	BAD(PGT_UUID, "a0eebc999c0b4ef8bb6d6bb9bd380a11", "uuid", "\"a0eebc999c0b4ef8bb6d6bb9bd380a11\""),
	BAD(PGT_UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g", "uuid", "\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g\""),
	/* date: days since 1970-01-01; astronomical years in JSON (1 BC is 0000) */
	V(PGT_DATE, "1970-01-01", DATE_VALUE, .i = 0, .json = "\"1970-01-01\""),
	V(PGT_DATE, "1969-12-31", DATE_VALUE, .i = -1, .json = "\"1969-12-31\""),
	V(PGT_DATE, "2024-02-29", DATE_VALUE, .i = 19782, .json = "\"2024-02-29\""),
	V(PGT_DATE, "2000-02-29", DATE_VALUE, .i = 11016, .json = "\"2000-02-29\""),
	V(PGT_DATE, "0044-03-15 BC", DATE_VALUE, .i = -735160, .json = "\"-0043-03-15\""),
	V(PGT_DATE, "0001-01-01 BC", DATE_VALUE, .i = -719528, .json = "\"0000-01-01\""),
	V(PGT_DATE, "0001-02-29 BC", DATE_VALUE, .i = -719528 + 59, .json = "\"0000-02-29\""), /* 1 BC is leap */
	V(PGT_DATE, "4714-11-24 BC", DATE_VALUE, .i = -2440588, .json = "\"-4713-11-24\""),
	V(PGT_DATE, "5874897-12-31", DATE_VALUE, .i = 2145042905, .json = "\"+5874897-12-31\""),
	V(PGT_DATE, "infinity", DATE_VALUE, .i = INT32_MAX, .json = "\"infinity\""),
	V(PGT_DATE, "-infinity", DATE_VALUE, .i = INT32_MIN, .json = "\"-infinity\""),
	BAD(PGT_DATE, "1900-02-29", "date", "\"1900-02-29\""),
	BAD(PGT_DATE, "0002-02-29 BC", "date", "\"0002-02-29 BC\""),
	BAD(PGT_DATE, "2023-04-31", "date", "\"2023-04-31\""),
	BAD(PGT_DATE, "2023-13-01", "date", "\"2023-13-01\""),
	BAD(PGT_DATE, "2023-01-01 AD", "date", "\"2023-01-01 AD\""),
	/* time */
	V(PGT_TIME, "00:00:00", TIME_VALUE, .i = 0, .json = "\"00:00:00\""),
	V(PGT_TIME, "12:34:56.5", TIME_VALUE, .i = INT64_C(45296500000), .json = "\"12:34:56.500000\""),
	V(PGT_TIME, "23:59:59.999999", TIME_VALUE, .i = INT64_C(86399999999), .json = "\"23:59:59.999999\""),
	V(PGT_TIME, "24:00:00", TIME_VALUE, .i = INT64_C(86400000000), .json = "\"24:00:00\""),
	BAD(PGT_TIME, "24:00:01", "time", "\"24:00:01\""),
	BAD(PGT_TIME, "12:34:56.1234567", "time", "\"12:34:56.1234567\""),
	BAD(PGT_TIME, "12:34", "time", "\"12:34\""),
	/* timestamptz: an instant in UTC */
	V(PGT_TIMESTAMPTZ, "2026-11-22 10:00:00.123456+00", TIMESTAMP_VALUE, .i = TSTZ_2026, .zone = true,
	  .json = "\"2026-11-22T10:00:00.123456Z\""),
	V(PGT_TIMESTAMPTZ, "2026-11-22 15:30:00.123456+05:30", TIMESTAMP_VALUE, .i = TSTZ_2026, .zone = true,
	  .json = "\"2026-11-22T10:00:00.123456Z\""),
	V(PGT_TIMESTAMPTZ, "2026-11-22 02:00:00.123456-08", TIMESTAMP_VALUE, .i = TSTZ_2026, .zone = true,
	  .json = "\"2026-11-22T10:00:00.123456Z\""),
	V(PGT_TIMESTAMPTZ, "1850-01-01 05:53:28+05:53:28", TIMESTAMP_VALUE, .i = INT64_C(-3786825600000000), .zone = true,
	  .json = "\"1850-01-01T00:00:00Z\""),
	V(PGT_TIMESTAMPTZ, "0044-03-15 10:00:00.5+00 BC", TIMESTAMP_VALUE, .i = BC44, .zone = true,
	  .json = "\"-0043-03-15T10:00:00.500000Z\""),
	V(PGT_TIMESTAMPTZ, "0001-01-01 00:00:00+00", TIMESTAMP_VALUE, .i = INT64_C(-62135596800000000), .zone = true,
	  .json = "\"0001-01-01T00:00:00Z\""),
	V(PGT_TIMESTAMPTZ, "infinity", TIMESTAMP_VALUE, .i = INT64_MAX, .zone = true, .json = "\"infinity\""),
	V(PGT_TIMESTAMPTZ, "-infinity", TIMESTAMP_VALUE, .i = INT64_MIN, .zone = true, .json = "\"-infinity\""),
	BAD(PGT_TIMESTAMPTZ, "2026-11-22 10:00:00", "timestamptz", "\"2026-11-22 10:00:00\""),
	BAD(PGT_TIMESTAMPTZ, "2026-11-22 10:00:00+5", "timestamptz", "\"2026-11-22 10:00:00+5\""),
	/* timestamp: wall-clock time, no zone */
	V(PGT_TIMESTAMP, "2026-11-22 10:00:00.123456", TIMESTAMP_VALUE, .i = TSTZ_2026, .json = "\"2026-11-22T10:00:00.123456\""),
	V(PGT_TIMESTAMP, "2026-11-22 10:00:00", TIMESTAMP_VALUE, .i = TSTZ_2026 - 123456, .json = "\"2026-11-22T10:00:00\""),
	V(PGT_TIMESTAMP, "0044-03-15 10:00:00.5 BC", TIMESTAMP_VALUE, .i = BC44, .json = "\"-0043-03-15T10:00:00.500000\""),
	V(PGT_TIMESTAMP, "10000-01-01 00:00:00", TIMESTAMP_VALUE, .i = INT64_C(253402300800000000),
	  .json = "\"+10000-01-01T00:00:00\""),
	BAD(PGT_TIMESTAMP, "2026-11-22 10:00:00+00", "timestamp", "\"2026-11-22 10:00:00+00\""),
	/* the fixed layout's edges (read at fixed places) and what it leaves to the general parser */
	V(PGT_TIMESTAMP, "2026-11-22 24:00:00", TIMESTAMP_VALUE, .i = TSTZ_2026 - 123456 + INT64_C(50400000000),
	  .json = "\"2026-11-23T00:00:00\""),
	V(PGT_TIMESTAMP, "2024-02-29 23:59:59.999999", TIMESTAMP_VALUE, .i = INT64_C(1709251199999999),
	  .json = "\"2024-02-29T23:59:59.999999\""),
	V(PGT_TIMESTAMP, "0999-12-31 00:00:00", TIMESTAMP_VALUE, .i = INT64_C(-30610310400000000),
	  .json = "\"0999-12-31T00:00:00\""),
	BAD(PGT_TIMESTAMP, "2026-11-22 24:00:00.000001", "timestamp", "\"2026-11-22 24:00:00.000001\""),
	BAD(PGT_TIMESTAMP, "2026-11-22 25:00:00", "timestamp", "\"2026-11-22 25:00:00\""),
	BAD(PGT_TIMESTAMP, "2026-11-22 10:60:00", "timestamp", "\"2026-11-22 10:60:00\""),
	BAD(PGT_TIMESTAMP, "2026-11-22 10:00:60", "timestamp", "\"2026-11-22 10:00:60\""),
	BAD(PGT_TIMESTAMP, "2023-02-29 00:00:00", "timestamp", "\"2023-02-29 00:00:00\""),
	BAD(PGT_TIMESTAMP, "2026-11-31 00:00:00", "timestamp", "\"2026-11-31 00:00:00\""),
	BAD(PGT_TIMESTAMP, "2026-00-22 00:00:00", "timestamp", "\"2026-00-22 00:00:00\""),
	BAD(PGT_TIMESTAMP, "0000-01-01 00:00:00", "timestamp", "\"0000-01-01 00:00:00\""),
	BAD(PGT_TIMESTAMP, "2026-11-22 1a:00:00", "timestamp", "\"2026-11-22 1a:00:00\""),
	BAD(PGT_TIMESTAMP, "2026-11-22 10:00:00.", "timestamp", "\"2026-11-22 10:00:00.\""),
	BAD(PGT_TIMESTAMP, "2026-11-22T10:00:00", "timestamp", "\"2026-11-22T10:00:00\""),
	BAD(PGT_TIMESTAMP, "2026-11-22 10:00:001", "timestamp", "\"2026-11-22 10:00:001\""),
	/* past 294247 AD the Unix-epoch microseconds overflow an int64: kept as text */
	BAD(PGT_TIMESTAMP, "294276-12-31 23:59:59.999999", "timestamp", "\"294276-12-31 23:59:59.999999\""),
	/* json, jsonb: embedded */
	V(PGT_JSONB, "{\"a\": [1, 2.5e3, null, true], \"c\": \"x\\\"y\"}", JSON_VALUE,
	  .s = "{\"a\": [1, 2.5e3, null, true], \"c\": \"x\\\"y\"}", .json = "{\"a\": [1, 2.5e3, null, true], \"c\": \"x\\\"y\"}"),
	V(PGT_JSON, "{\n\"a\" :\r\n 1}", JSON_VALUE, .s = "{\n\"a\" :\r\n 1}", .json = "{ \"a\" :   1}"),
	V(PGT_JSON, "\"str\"", JSON_VALUE, .s = "\"str\"", .json = "\"str\""),
	V(PGT_JSON, "[[], {}, [{\"\": -0.5E-3}]]", JSON_VALUE, .s = "[[], {}, [{\"\": -0.5E-3}]]",
	  .json = "[[], {}, [{\"\": -0.5E-3}]]"),
	/* not JSON (the server would not send it): a string, so the event stays valid */
	V(PGT_JSON, "{\"a\": 1", JSON_VALUE, .s = "{\"a\": 1", .json = "\"{\\\"a\\\": 1\""),
	V(PGT_JSON, "[1, 2]]", JSON_VALUE, .s = "[1, 2]]", .json = "\"[1, 2]]\""),
	V(PGT_JSON, "[1}", JSON_VALUE, .s = "[1}", .json = "\"[1}\""),
	V(PGT_JSON, "01", JSON_VALUE, .s = "01", .json = "\"01\""),
	V(PGT_JSON, "\"\xff\"", JSON_VALUE, .s = "\"\xff\"", .json = "\"\\\"\xEF\xBF\xBD\\\"\""),
	/* other types: text and the type's name */
	V(PGT_INTERVAL, "1 day 02:00:00", OTHER_VALUE, .s = "1 day 02:00:00", .type = "interval", .json = "\"1 day 02:00:00\""),
	V(PGT_TIMETZ, "10:00:00+02", OTHER_VALUE, .s = "10:00:00+02", .type = "timetz", .json = "\"10:00:00+02\""),
	V(1007, "{1,2,3}", OTHER_VALUE, .s = "{1,2,3}", .type = "_int4", .json = "\"{1,2,3}\""),
	V(PGT_XML, "<a x=\"1\"/>", OTHER_VALUE, .s = "<a x=\"1\"/>", .type = "xml", .json = "\"<a x=\\\"1\\\"/>\""),
	V(MOOD_OID, "happy", OTHER_VALUE, .s = "happy", .type = "public.mood", .json = "\"happy\""),
	V(16999, "x", OTHER_VALUE, .s = "x", .type = "oid:16999", .json = "\"x\""),
	/* null, unchanged TOAST, binary */
	D(PGT_TEXT, 'n', NULL, 0, NULL_VALUE, .json = "null"),
	D(PGT_INT4, 'n', NULL, 0, NULL_VALUE, .json = "null"),
	D(PGT_TEXT, 'u', NULL, 0, UNCHANGED_TOAST, .json = "(omitted)"),
	D(PGT_INT4, 'b', "\x00\x01\xff", 3, BINARY_VALUE, .s = "0001ff", .json = "\"AAH/\""),
};
/* clang-format on */

static pgo_datum datum_of(const vcase *c)
{
	pgo_datum d = {.kind = (pgo_datum_kind)c->datum};
	if (c->in) {
		d.len = c->inlen < 0 ? (uint32_t)strlen(c->in) : (uint32_t)c->inlen;
		/* Data is not NUL-terminated in a real message: copy it before a byte that must not count. */
		char *p = arena_alloc(A, d.len + 1);
		memcpy(p, c->in, d.len);
		p[d.len] = '9';
		d.data = p;
	}
	return d;
}

static bool same_double(double a, double b)
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return a == b && signbit(a) == signbit(b);
}

static bool check_typed(const vcase *c, const Cdc__V1__Value *v)
{
	if (v->kind_case != c->kind)
		return false;
	switch (v->kind_case) {
	case CDC__V1__VALUE__KIND_NULL_VALUE:
		return v->null_value;
	case CDC__V1__VALUE__KIND_UNCHANGED_TOAST:
		return v->unchanged_toast;
	case CDC__V1__VALUE__KIND_INT_VALUE:
		return v->int_value == c->i;
	case CDC__V1__VALUE__KIND_BOOL_VALUE:
		return v->bool_value == (c->i != 0);
	case CDC__V1__VALUE__KIND_DATE_VALUE:
		return v->date_value == c->i;
	case CDC__V1__VALUE__KIND_TIME_VALUE:
		return v->time_value == c->i;
	case CDC__V1__VALUE__KIND_FLOAT_VALUE:
		return same_double(v->float_value, c->f);
	case CDC__V1__VALUE__KIND_NUMERIC_VALUE:
		return strcmp(v->numeric_value, c->s) == 0;
	case CDC__V1__VALUE__KIND_TEXT_VALUE:
		return strcmp(v->text_value, c->s) == 0;
	case CDC__V1__VALUE__KIND_JSON_VALUE:
		return strcmp(v->json_value, c->s) == 0;
	case CDC__V1__VALUE__KIND_BYTES_VALUE:
		return strcmp(hex(&v->bytes_value), c->s) == 0;
	case CDC__V1__VALUE__KIND_UUID_VALUE:
		return v->uuid_value.len == 16 && strcmp(hex(&v->uuid_value), c->s) == 0;
	case CDC__V1__VALUE__KIND_BINARY_VALUE:
		return strcmp(hex(&v->binary_value), c->s) == 0;
	case CDC__V1__VALUE__KIND_TIMESTAMP_VALUE:
		return v->timestamp_value->micros == c->i && v->timestamp_value->with_zone == c->zone;
	case CDC__V1__VALUE__KIND_OTHER_VALUE:
		return strcmp(v->other_value->type_name, c->type) == 0 &&
		       strcmp(v->other_value->text, c->s) == 0;
	default:
		return false;
	}
}

static void test_values(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const vcase *c = &cases[i];
		pgo_datum d = datum_of(c);
		Cdc__V1__Value *v = pgo_event_value(A, RC, c->oid, &d);
		/* pgo_event_type_kind says what a value of the type becomes when its text parses */
		if (v->kind_case != CDC__V1__VALUE__KIND_OTHER_VALUE &&
		    v->kind_case != CDC__V1__VALUE__KIND_NULL_VALUE &&
		    v->kind_case != CDC__V1__VALUE__KIND_UNCHANGED_TOAST &&
		    v->kind_case != CDC__V1__VALUE__KIND_BINARY_VALUE)
			CHECK_INT(pgo_event_type_kind(c->oid), v->kind_case);
		if (check_typed(c, v)) {
			test_passed++;
		} else {
			test_failed++;
			fprintf(stderr, "%s:%d: typed value of oid %u \"%s\": kind %d\n", __FILE__, c->line,
				c->oid, c->in ? c->in : "", v->kind_case);
		}
		const char *got = value_json(v);
		if (strcmp(got, c->json) == 0) {
			test_passed++;
		} else {
			test_failed++;
			fprintf(stderr, "%s:%d: JSON of oid %u \"%s\"\n  got:  %s\n  want: %s\n", __FILE__,
				c->line, c->oid, c->in ? c->in : "", got, c->json);
		}
		arena_reset(A);
	}
}

/* bytea with every byte value, both hex cases. */
static void test_bytea_all_bytes(void)
{
	static const char b64[] =
	    "\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+"
	    "P0BBQkNERUZH"
	    "SElKS0xNTk9QUVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6P"
	    "kJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX"
	    "2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v8PHy8/T19vf4+fr7/P3+/w==\"";
	for (int upper = 0; upper < 2; upper++) {
		char text[2 + 512];
		const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
		text[0] = '\\';
		text[1] = 'x';
		for (int i = 0; i < 256; i++) {
			text[2 + 2 * i] = digits[i >> 4];
			text[3 + 2 * i] = digits[i & 15];
		}
		pgo_datum d = {.kind = PGO_TEXT, .len = sizeof(text), .data = text};
		Cdc__V1__Value *v = pgo_event_value(A, RC, PGT_BYTEA, &d);
		CHECK_INT(v->kind_case, CDC__V1__VALUE__KIND_BYTES_VALUE);
		CHECK_INT(v->bytes_value.len, 256);
		bool all = v->bytes_value.len == 256;
		for (int i = 0; all && i < 256; i++)
			all = v->bytes_value.data[i] == i;
		CHECK(all);
		CHECK_STR(value_json(v), b64);
		arena_reset(A);
	}
}

/* Any bytes as text give a JSON string of valid UTF-8 without raw control characters. */
static bool valid_utf8_no_controls(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	while (p < end) {
		unsigned c = *p;
		size_t len = c < 0x80		  ? 1
			     : (c & 0xE0) == 0xC0 ? 2
			     : (c & 0xF0) == 0xE0 ? 3
			     : (c & 0xF8) == 0xF0 ? 4
						  : 0;
		if (c < 0x20 || !len || (size_t)(end - p) < len)
			return false;
		uint32_t cp = len == 1 ? c : c & (0x7F >> len);
		for (size_t i = 1; i < len; i++) {
			if ((p[i] & 0xC0) != 0x80)
				return false;
			cp = cp << 6 | (p[i] & 0x3F);
		}
		static const uint32_t minimum[] = {0, 0, 0x80, 0x800, 0x10000};
		if (cp < minimum[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		p += len;
	}
	return true;
}

static void test_json_string_any_bytes(void)
{
	buf b = {0};
	uint32_t seed = 12345;
	int bad = 0;
	for (int round = 0; round < 2000; round++) {
		char in[64];
		size_t n = (size_t)(round % 64);
		for (size_t i = 0; i < n; i++) {
			seed = seed * 1103515245 + 12345;
			in[i] = (char)(seed >> 16);
		}
		buf_reset(&b);
		json_string(&b, in, n);
		if (b.len < 2 || b.data[0] != '"' || b.data[b.len - 1] != '"' || b.data[b.len] != '\0' ||
		    !valid_utf8_no_controls(b.data, b.len))
			bad++;
	}
	CHECK_INT(bad, 0);
	buf_free(&b);
}

/* json nested deeper than the embedding limit is written as a string. */
static void test_json_deep(void)
{
	size_t depth = 5000;
	char *s = malloc(2 * depth + 1);
	memset(s, '[', depth);
	memset(s + depth, ']', depth);
	s[2 * depth] = '\0';
	pgo_datum d = {.kind = PGO_TEXT, .len = (uint32_t)(2 * depth), .data = s};
	Cdc__V1__Value *v = pgo_event_value(A, RC, PGT_JSON, &d);
	const char *js = value_json(v);
	CHECK(js[0] == '"' && js[1] == '[');
	d.len = 2 * 4000;
	memmove(s + 4000, s + depth, 4000); /* 4000 deep: embedded */
	v = pgo_event_value(A, RC, PGT_JSON, &d);
	CHECK(value_json(v)[0] == '[');
	free(s);
	arena_reset(A);
}

static void test_builtin_names(void)
{
	static const struct {
		uint32_t oid;
		const char *name;
	} names[] = {
	    {16, "bool"},
	    {17, "bytea"},
	    {18, "char"},
	    {20, "int8"},
	    {23, "int4"},
	    {25, "text"},
	    {114, "json"},
	    {1007, "_int4"},
	    {1009, "_text"},
	    {1043, "varchar"},
	    {1184, "timestamptz"},
	    {1700, "numeric"},
	    {2950, "uuid"},
	    {3802, "jsonb"},
	    {3904, "int4range"},
	    {4451, "int4multirange"},
	    {6157, "_int8multirange"},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		CHECK_STR(pgo_types_builtin_name(names[i].oid), names[i].name);
	CHECK(pgo_types_builtin_name(0) == NULL);
	CHECK(pgo_types_builtin_name(2249) == NULL); /* record: a pseudo type */
	CHECK(pgo_types_builtin_name(9999) == NULL);
	CHECK(pgo_types_builtin_name(MOOD_OID) == NULL);
	CHECK(pgo_types_builtin_name(UINT32_MAX) == NULL);
	/* Every row of the table is found, so it is sorted: 163 types on PostgreSQL 15. */
	int found = 0;
	for (uint32_t oid = 0; oid < 10000; oid++)
		found += pgo_types_builtin_name(oid) != NULL;
	CHECK_INT(found, 163);
}

/* Whole events --------------------------------------------------------------------------------- */

static char nsp[] = "public", relname[] = "orders";
static pgo_relcol ocols[] = {
    {1, "id", PGT_INT4, -1},   {0, "status", PGT_TEXT, -1},	    {0, "amount", PGT_NUMERIC, -1},
    {0, "note", PGT_TEXT, -1}, {0, "paid_at", PGT_TIMESTAMPTZ, -1},
};
static pgo_rel orders = {.relid = 16384,
			 .nspname = nsp,
			 .relname = relname,
			 .replident = 'd',
			 .ncols = 5,
			 .cols = ocols,
			 .nkeys = 1,
			 .version = 1};

static const char TOAST[] = "(toast)"; /* marks an unchanged TOAST column in set_tuple() */
static pgo_msg M;

/* NULL: SQL NULL; TOAST: unchanged TOAST; else text. */
static void set_tuple(pgo_tuple *t, const char *const *vals, uint16_t n)
{
	t->ncols = n;
	for (uint16_t i = 0; i < n; i++) {
		if (!vals[i])
			t->cols[i] = (pgo_datum){.kind = PGO_NULL};
		else if (vals[i] == TOAST)
			t->cols[i] = (pgo_datum){.kind = PGO_TOAST};
		else
			t->cols[i] =
			    (pgo_datum){.kind = PGO_TEXT, .len = (uint32_t)strlen(vals[i]), .data = vals[i]};
	}
}

static void change(pgo_type type, char old_kind, const char *const *oldv, const char *const *newv)
{
	memset(&M, 0, sizeof(M));
	M.type = type;
	M.change.relid = orders.relid;
	M.change.old_kind = old_kind;
	if (oldv)
		set_tuple(&M.change.old, oldv, 5);
	if (newv)
		set_tuple(&M.change.new, newv, 5);
}

/* The transaction and subscription fields the caller fills in. */
static void stamp(Cdc__V1__Event *e, bool first_delivery)
{
	e->subscription = "paid_orders";
	e->lsn = 0x1A2B3C8;
	e->commit_lsn = 0x1A2B400;
	e->xid = 750;
	e->tx_index = 3;
	e->commit_time = TSTZ_2026;
	if (first_delivery) {
		e->offset_present_case = CDC__V1__EVENT__OFFSET_PRESENT_OFFSET;
		e->offset = 42;
		e->tag_present_case = CDC__V1__EVENT__TAG_PRESENT_TAG;
		e->tag = "send_email";
		e->delivery_count = 1;
	}
}

#define HEAD_FULL "{\"subscription\":\"paid_orders\",\"offset\":42,\"tag\":\"send_email\",\"op\":"
#define HEAD_BARE "{\"subscription\":\"paid_orders\",\"offset\":null,\"tag\":null,\"op\":"
#define TX "\"schema\":\"public\",\"table\":\"orders\",\"lsn\":\"0/1A2B3C8\",\"xid\":750,"
#define TAIL ",\"commit_lsn\":\"0/1A2B400\",\"tx_index\":3,\"commit_time\":\"2026-11-22T10:00:00.123456Z\"}\n"

/* Packs e, unpacks it, and checks the copy renders the same JSON and packs to the same bytes. */
static void check_roundtrip(const Cdc__V1__Event *e, const char *json)
{
	size_t n = cdc__v1__event__get_packed_size(e);
	uint8_t *packed = malloc(n ? n : 1);
	CHECK_INT(cdc__v1__event__pack(e, packed), n);
	Cdc__V1__Event *u = cdc__v1__event__unpack(NULL, n, packed);
	CHECK(u != NULL);
	if (u) {
		buf b = {0};
		sink_json_event(&b, u);
		CHECK_STR(b.data, json);
		CHECK_INT(u->relation_id, e->relation_id);
		CHECK_INT(u->op, e->op);
		size_t n2 = cdc__v1__event__get_packed_size(u);
		uint8_t *again = malloc(n2 ? n2 : 1);
		cdc__v1__event__pack(u, again);
		CHECK(n2 == n && memcmp(again, packed, n) == 0);
		free(again);
		buf_free(&b);
		cdc__v1__event__free_unpacked(u, NULL);
	}
	free(packed);
}

static void check_event(int line, const Cdc__V1__Event *e, const char *want)
{
	buf b = {0};
	sink_json_event(&b, e);
	if (strcmp(b.data, want) == 0) {
		test_passed++;
	} else {
		test_failed++;
		fprintf(stderr, "%s:%d: event JSON\n  got:  %s  want: %s", __FILE__, line, b.data, want);
	}
	check_roundtrip(e, want);
	buf_free(&b);
}

static Cdc__V1__Event *build(int line)
{
	Cdc__V1__Event *e = NULL;
	char err[256] = "";
	if (!pgo_event_from_change(A, RC, &orders, &M, &e, err, sizeof(err)) || !e) {
		test_failed++;
		fprintf(stderr, "%s:%d: evt_from_change: %s\n", __FILE__, line, err);
		return NULL;
	}
	CHECK_INT(e->relation_id, 16384);
	return e;
}

static void test_events(void)
{
	Cdc__V1__Event *e;

	/* insert */
	change(PGO_INSERT, 0, NULL, (const char *const[]){"7", "new", "120.00", "first \"order\"", NULL});
	if ((e = build(__LINE__))) {
		stamp(e, true);
		CHECK_INT(e->op, CDC__V1__OP__OP_INSERT);
		CHECK(e->old_row == NULL && e->key && e->key->n_columns == 1);
		check_event(__LINE__, e,
			    HEAD_FULL
			    "\"insert\"," TX "\"key\":{\"id\":7},"
			    "\"new\":{\"id\":7,\"status\":\"new\",\"amount\":\"120.00\",\"note\":\"first "
			    "\\\"order\\\"\",\"paid_at\":null},"
			    "\"old\":null,\"unchanged_toast\":[],\"delivery_count\":1" TAIL);
	}
	arena_reset(A);

	/* update that changed the key: 'K' old key; the key is the old one */
	change(PGO_UPDATE, 'K', (const char *const[]){"6", NULL, NULL, NULL, NULL},
	       (const char *const[]){"7", "paid", "120.00", "n", "2026-11-22 10:00:00.5+00"});
	if ((e = build(__LINE__))) {
		stamp(e, false);
		CHECK(e->old_row && e->old_row->n_columns == 1);
		check_event(__LINE__, e,
			    HEAD_BARE
			    "\"update\"," TX "\"key\":{\"id\":6},"
			    "\"new\":{\"id\":7,\"status\":\"paid\",\"amount\":\"120.00\",\"note\":\"n\","
			    "\"paid_at\":\"2026-11-22T10:00:00.500000Z\"},"
			    "\"old\":{\"id\":6},\"unchanged_toast\":[],\"delivery_count\":null" TAIL);
	}
	arena_reset(A);

	/* update with the whole old row ('O') and an unchanged TOAST column in the new one */
	change(PGO_UPDATE, 'O', (const char *const[]){"7", "new", "120.00", "long note", NULL},
	       (const char *const[]){"7", "paid", "120.00", TOAST, "2026-11-22 15:30:00+05:30"});
	if ((e = build(__LINE__))) {
		stamp(e, true);
		CHECK(e->new_row->n_columns == 5 && e->new_row->columns[3]->value->unchanged_toast);
		check_event(
		    __LINE__, e,
		    HEAD_FULL
		    "\"update\"," TX "\"key\":{\"id\":7},"
		    "\"new\":{\"id\":7,\"status\":\"paid\",\"amount\":\"120.00\","
		    "\"paid_at\":\"2026-11-22T10:00:00Z\"},"
		    "\"old\":{\"id\":7,\"status\":\"new\",\"amount\":\"120.00\",\"note\":\"long note\","
		    "\"paid_at\":null},\"unchanged_toast\":[\"note\"],\"delivery_count\":1" TAIL);
	}
	arena_reset(A);

	/* update without old tuple: the key did not change, it comes from the new row */
	change(PGO_UPDATE, 0, NULL, (const char *const[]){"7", "shipped", "120.00", TOAST, NULL});
	if ((e = build(__LINE__))) {
		stamp(e, false);
		check_event(
		    __LINE__, e,
		    HEAD_BARE
		    "\"update\"," TX "\"key\":{\"id\":7},"
		    "\"new\":{\"id\":7,\"status\":\"shipped\",\"amount\":\"120.00\",\"paid_at\":null},"
		    "\"old\":null,\"unchanged_toast\":[\"note\"],\"delivery_count\":null" TAIL);
	}
	arena_reset(A);

	/* a key column sent as unchanged TOAST in the old row is taken from the new row */
	change(PGO_UPDATE, 'O', (const char *const[]){TOAST, "a", NULL, TOAST, NULL},
	       (const char *const[]){"9", "b", NULL, TOAST, NULL});
	if ((e = build(__LINE__))) {
		stamp(e, false);
		check_event(__LINE__, e,
			    HEAD_BARE "\"update\"," TX "\"key\":{\"id\":9},"
				      "\"new\":{\"id\":9,\"status\":\"b\",\"amount\":null,\"paid_at\":null},"
				      "\"old\":{\"status\":\"a\",\"amount\":null,\"paid_at\":null},"
				      "\"unchanged_toast\":[\"note\",\"id\"],\"delivery_count\":null" TAIL);
	}
	arena_reset(A);

	/* delete with the key ('K') */
	change(PGO_DELETE, 'K', (const char *const[]){"7", NULL, NULL, NULL, NULL}, NULL);
	if ((e = build(__LINE__))) {
		stamp(e, true);
		CHECK(e->new_row == NULL);
		check_event(__LINE__, e,
			    HEAD_FULL "\"delete\"," TX "\"key\":{\"id\":7},\"new\":null,\"old\":{\"id\":7},"
				      "\"unchanged_toast\":[],\"delivery_count\":1" TAIL);
	}
	arena_reset(A);

	/* delete with the whole old row ('O', REPLICA IDENTITY FULL) */
	change(PGO_DELETE, 'O', (const char *const[]){"7", "paid", "1e3", "x", "infinity"}, NULL);
	if ((e = build(__LINE__))) {
		stamp(e, true);
		check_event(__LINE__, e,
			    HEAD_FULL
			    "\"delete\"," TX "\"key\":{\"id\":7},\"new\":null,"
			    "\"old\":{\"id\":7,\"status\":\"paid\",\"amount\":\"1e3\",\"note\":\"x\","
			    "\"paid_at\":\"infinity\"},\"unchanged_toast\":[],\"delivery_count\":1" TAIL);
	}
	arena_reset(A);

	/* truncate */
	e = pgo_event_from_truncate(A, &orders, 1);
	stamp(e, false);
	e->delivery_count = 2;
	CHECK_INT(e->relation_id, 16384);
	check_event(__LINE__, e,
		    HEAD_BARE
		    "\"truncate\"," TX "\"key\":null,\"new\":null,\"old\":null,\"unchanged_toast\":[],"
		    "\"delivery_count\":2,\"truncate\":{\"cascade\":true,\"restart_identity\":false}" TAIL);
	e = pgo_event_from_truncate(A, &orders, 2);
	CHECK(!e->truncate->cascade && e->truncate->restart_identity);
	arena_reset(A);

	/* message: binary content as base64 */
	memset(&M, 0, sizeof(M));
	M.type = PGO_MESSAGE;
	M.message.flags = 1;
	M.message.lsn = 0x1A2B3C8;
	M.message.prefix = "app";
	M.message.content = "hello\0world";
	M.message.len = 11;
	e = pgo_event_from_message(A, &M);
	stamp(e, true);
	CHECK_INT(e->lsn, 0x1A2B3C8);
	check_event(
	    __LINE__, e,
	    HEAD_FULL
	    "\"message\",\"schema\":\"\",\"table\":\"\",\"lsn\":\"0/1A2B3C8\",\"xid\":750,"
	    "\"key\":null,\"new\":null,\"old\":null,\"unchanged_toast\":[],\"delivery_count\":1,"
	    "\"message\":{\"prefix\":\"app\",\"content\":\"aGVsbG8Ad29ybGQ=\",\"transactional\":true}" TAIL);
	/* a non-transactional, empty message */
	M.message.flags = 0;
	M.message.len = 0;
	M.message.content = NULL;
	e = pgo_event_from_message(A, &M);
	buf b = {0};
	sink_json_event(&b, e);
	CHECK(
	    strstr(
		b.data,
		"\"message\":{\"prefix\":\"app\",\"content\":\"\",\"transactional\":false},\"commit_lsn\"") !=
	    NULL);
	buf_free(&b);
	arena_reset(A);
}

/* Schema and DDL events, and a row naming its schema event, as JSON. */
static void test_schema_events(void)
{
	Cdc__V1__Event *e = pgo_schema_event(A, RC, &orders, NULL);
	stamp(e, false);
	e->schema_id = pgo_schema_id(e);
	e->table_schema->columns[1]->renamed_from = "state";
	e->table_schema->columns[2]->nullable_present_case =
	    CDC__V1__SCHEMA__COLUMN__NULLABLE_PRESENT_NULLABLE;
	e->table_schema->columns[3]->nullable_present_case =
	    CDC__V1__SCHEMA__COLUMN__NULLABLE_PRESENT_NULLABLE;
	e->table_schema->columns[3]->nullable = true;
	char id[32];
	snprintf(id, sizeof(id), "\"%016llx\"", (unsigned long long)e->schema_id);
	buf want = {0};
	buf_printf(&want,
		   HEAD_BARE
		   "\"schema\"," TX "\"key\":null,\"new\":null,\"old\":null,\"unchanged_toast\":[],"
		   "\"delivery_count\":null,\"schema_id\":%s,\"table_schema\":{\"columns\":["
		   "{\"name\":\"id\",\"type\":\"integer\",\"type_oid\":23,\"typmod\":-1,\"key\":true,"
		   "\"nullable\":null,\"renamed_from\":null},"
		   "{\"name\":\"status\",\"type\":\"text\",\"type_oid\":25,\"typmod\":-1,\"key\":false,"
		   "\"nullable\":null,\"renamed_from\":\"state\"},"
		   "{\"name\":\"amount\",\"type\":\"numeric\",\"type_oid\":1700,\"typmod\":-1,"
		   "\"key\":false,\"nullable\":false,\"renamed_from\":null},"
		   "{\"name\":\"note\",\"type\":\"text\",\"type_oid\":25,\"typmod\":-1,\"key\":false,"
		   "\"nullable\":true,\"renamed_from\":null},"
		   "{\"name\":\"paid_at\",\"type\":\"timestamp with time zone\",\"type_oid\":1184,"
		   "\"typmod\":-1,\"key\":false,\"nullable\":null,\"renamed_from\":null}],"
		   "\"replica_identity\":\"default\"}" TAIL,
		   id);
	check_event(__LINE__, e, want.data);
	uint64_t schema_id = e->schema_id;

	/* a row names its schema event */
	change(PGO_INSERT, 0, NULL, (const char *const[]){"7", "new", "1", NULL, NULL});
	if ((e = build(__LINE__))) {
		stamp(e, false);
		e->schema_id = schema_id;
		buf_reset(&want);
		buf_printf(&want,
			   HEAD_BARE "\"insert\"," TX
				     "\"key\":{\"id\":7},\"new\":{\"id\":7,\"status\":\"new\","
				     "\"amount\":\"1\",\"note\":null,\"paid_at\":null},\"old\":null,"
				     "\"unchanged_toast\":[],\"delivery_count\":null,\"schema_id\":%s" TAIL,
			   id);
		check_event(__LINE__, e, want.data);
	}

	ddl_column cols[] = {{1, "id", "integer", 23, -1, true}, {2, "status", "text", 25, -1, false}};
	ddl_msg m = {.event = "ddl_command_end",
		     .tag = "ALTER TABLE",
		     .object_type = "table column",
		     .identity = "public.orders.status",
		     .schema = "public",
		     .table = "orders",
		     .relid = 16384,
		     .subid = 2,
		     .statement = "ALTER TABLE orders RENAME state TO \"status\"",
		     .has_columns = true,
		     .ncols = 2,
		     .cols = cols};
	e = pgo_ddl_event(A, &m);
	stamp(e, false);
	check_event(__LINE__, e,
		    HEAD_BARE
		    "\"ddl\"," TX "\"key\":null,\"new\":null,\"old\":null,\"unchanged_toast\":[],"
		    "\"delivery_count\":null,\"ddl\":{\"event\":\"ddl_command_end\",\"command_tag\":"
		    "\"ALTER TABLE\",\"object_type\":\"table column\",\"object_identity\":"
		    "\"public.orders.status\",\"statement\":\"ALTER TABLE orders RENAME state TO "
		    "\\\"status\\\"\",\"columns\":[{\"attnum\":1,\"name\":\"id\",\"type\":\"integer\","
		    "\"type_oid\":23,\"typmod\":-1,\"not_null\":true},{\"attnum\":2,\"name\":\"status\","
		    "\"type\":\"text\",\"type_oid\":25,\"typmod\":-1,\"not_null\":false}]}" TAIL);
	buf_free(&want);
	arena_reset(A);
}

/* Every kind of value survives pack/unpack, including defaults inside the oneof (0, false, ""). */
static void test_roundtrip_all_kinds(void)
{
	static char n2[] = "public", r2[] = "all_types";
	static pgo_relcol cols[] = {
	    {1, "k", PGT_INT8, -1},	{0, "zero", PGT_INT4, -1},   {0, "f", PGT_FLOAT8, -1},
	    {0, "nan", PGT_FLOAT4, -1}, {0, "no", PGT_BOOL, -1},     {0, "num", PGT_NUMERIC, -1},
	    {0, "empty", PGT_TEXT, -1}, {0, "bytes", PGT_BYTEA, -1}, {0, "u", PGT_UUID, -1},
	    {0, "epoch", PGT_DATE, -1}, {0, "t", PGT_TIME, -1},	     {0, "ts", PGT_TIMESTAMP, -1},
	    {0, "j", PGT_JSONB, -1},	{0, "iv", PGT_INTERVAL, -1}, {0, "null", PGT_TEXT, -1},
	    {0, "toast", PGT_TEXT, -1}, {0, "bin", PGT_INT4, -1},
	};
	static pgo_rel rel = {
	    .relid = 99, .nspname = n2, .relname = r2, .replident = 'd', .ncols = 17, .cols = cols};
	const char *vals[] = {"-1",
			      "0",
			      "2.5",
			      "NaN",
			      "f",
			      "0.0",
			      "",
			      "\\x00",
			      "00000000-0000-0000-0000-000000000000",
			      "1970-01-01",
			      "00:00:00",
			      "1970-01-01 00:00:00",
			      "{\"a\": []}",
			      "00:00:00",
			      NULL,
			      TOAST,
			      NULL};
	memset(&M, 0, sizeof(M));
	M.type = PGO_INSERT;
	set_tuple(&M.change.new, vals, 17);
	M.change.new.cols[16] = (pgo_datum){.kind = PGO_BINARY, .len = 4, .data = "\0\0\0\1"};
	Cdc__V1__Event *e = NULL;
	char err[128];
	CHECK(pgo_event_from_change(A, RC, &rel, &M, &e, err, sizeof(err)));
	if (e) {
		e->origin = "origin_1";
		buf b = {0};
		sink_json_event(&b, e);
		CHECK_STR(
		    b.data,
		    "{\"subscription\":\"\",\"offset\":null,\"tag\":null,\"op\":\"insert\","
		    "\"schema\":\"public\",\"table\":\"all_types\",\"lsn\":\"0/0\",\"xid\":0,"
		    "\"key\":{\"k\":-1},\"new\":{\"k\":-1,\"zero\":0,\"f\":2.5,\"nan\":\"NaN\",\"no\":false,"
		    "\"num\":\"0.0\",\"empty\":\"\",\"bytes\":\"AA==\","
		    "\"u\":\"00000000-0000-0000-0000-000000000000\",\"epoch\":\"1970-01-01\",\"t\":\"00:00:"
		    "00\","
		    "\"ts\":\"1970-01-01T00:00:00\",\"j\":{\"a\": []},\"iv\":\"00:00:00\",\"null\":null,"
		    "\"bin\":\"AAAAAQ==\"},\"old\":null,\"unchanged_toast\":[\"toast\"],\"delivery_count\":"
		    "null,\"commit_lsn\":\"0/"
		    "0\",\"tx_index\":0,\"commit_time\":\"1970-01-01T00:00:00.000000Z\"}\n");
		check_roundtrip(e, b.data);
		/* the oneof survives with its default value */
		size_t n = cdc__v1__event__get_packed_size(e);
		uint8_t *p = malloc(n);
		cdc__v1__event__pack(e, p);
		Cdc__V1__Event *u = cdc__v1__event__unpack(NULL, n, p);
		CHECK(u && u->new_row && u->new_row->n_columns == 17);
		if (u && u->new_row && u->new_row->n_columns == 17) {
			CHECK_INT(u->new_row->columns[1]->value->kind_case, CDC__V1__VALUE__KIND_INT_VALUE);
			CHECK_INT(u->new_row->columns[4]->value->kind_case, CDC__V1__VALUE__KIND_BOOL_VALUE);
			CHECK_INT(u->new_row->columns[6]->value->kind_case, CDC__V1__VALUE__KIND_TEXT_VALUE);
			CHECK_INT(u->new_row->columns[9]->value->kind_case, CDC__V1__VALUE__KIND_DATE_VALUE);
			CHECK_INT(u->new_row->columns[14]->value->kind_case, CDC__V1__VALUE__KIND_NULL_VALUE);
			CHECK_INT(u->new_row->columns[15]->value->kind_case,
				  CDC__V1__VALUE__KIND_UNCHANGED_TOAST);
			CHECK_STR(u->new_row->columns[13]->value->other_value->type_name, "interval");
			CHECK_INT(u->new_row->columns[8]->value->uuid_value.len, 16);
			CHECK_STR(u->origin, "origin_1");
		}
		if (u)
			cdc__v1__event__free_unpacked(u, NULL);
		free(p);
		buf_free(&b);
	}
	arena_reset(A);
}

static void test_errors(void)
{
	Cdc__V1__Event *e = NULL;
	char err[256] = "";
	/* the tuple does not match the relation */
	change(PGO_INSERT, 0, NULL, (const char *const[]){"7", "new", "1", "n", NULL});
	M.change.new.ncols = 4;
	CHECK(!pgo_event_from_change(A, RC, &orders, &M, &e, err, sizeof(err)));
	CHECK_STR(err, "Insert for public.orders: new tuple has 4 columns, relation has 5");
	change(PGO_UPDATE, 'O', (const char *const[]){"7", "new", "1", "n", NULL},
	       (const char *const[]){"7", "new", "1", "n", NULL});
	M.change.old.ncols = 6;
	CHECK(!pgo_event_from_change(A, RC, &orders, &M, &e, err, sizeof(err)));
	CHECK(strstr(err, "old tuple has 6 columns") != NULL);
	/* not a change */
	memset(&M, 0, sizeof(M));
	M.type = PGO_BEGIN;
	CHECK(!pgo_event_from_change(A, RC, &orders, &M, &e, err, sizeof(err)));
	CHECK(strstr(err, "Begin") != NULL);
	arena_reset(A);
}

/* Oddities a hand-made Event may hold still render as valid JSON. */
static void test_json_odd_events(void)
{
	Cdc__V1__Event e = CDC__V1__EVENT__INIT;
	e.subscription = NULL;
	e.op = 77;
	e.commit_time = INT64_C(-62135596800000001); /* 1 us before 0001-01-01 */
	buf b = {0};
	sink_json_event(&b, &e);
	CHECK_STR(b.data,
		  "{\"subscription\":\"\",\"offset\":null,\"tag\":null,\"op\":null,\"schema\":\"\","
		  "\"table\":\"\",\"lsn\":\"0/0\",\"xid\":0,\"key\":null,\"new\":null,\"old\":null,"
		  "\"unchanged_toast\":[],\"delivery_count\":null,\"commit_lsn\":\"0/0\",\"tx_index\":0,"
		  "\"commit_time\":\"0000-12-31T23:59:59.999999Z\"}\n");
	/* truncate and message without their sub-messages */
	buf_reset(&b);
	e.op = CDC__V1__OP__OP_TRUNCATE;
	sink_json_event(&b, &e);
	CHECK(strstr(b.data, "\"truncate\":{\"cascade\":false,\"restart_identity\":false},\"commit_lsn\"") !=
	      NULL);
	buf_free(&b);
}

/* sink_json_event_tail with one json_commit over several transactions: rendered anew when the commit
 * changes, tx_index always the event's. */
static void test_commit_tail(void)
{
	json_commit c = {0};
	buf b = {0};
	sink_json_event_tail(&b, &c, 0x1A2B400, 0, TSTZ_2026);
	sink_json_event_tail(&b, &c, 0x1A2B400, 1, TSTZ_2026);
	sink_json_event_tail(&b, &c, 0x1A2B500, 0, TSTZ_2026);
	sink_json_event_tail(&b, &c, 0x1A2B500, 1, 0);
	CHECK_STR(
	    b.data,
	    ",\"commit_lsn\":\"0/1A2B400\",\"tx_index\":0,\"commit_time\":\"2026-11-22T10:00:00.123456Z\"}\n"
	    ",\"commit_lsn\":\"0/1A2B400\",\"tx_index\":1,\"commit_time\":\"2026-11-22T10:00:00.123456Z\"}\n"
	    ",\"commit_lsn\":\"0/1A2B500\",\"tx_index\":0,\"commit_time\":\"2026-11-22T10:00:00.123456Z\"}\n"
	    ",\"commit_lsn\":\"0/"
	    "1A2B500\",\"tx_index\":1,\"commit_time\":\"1970-01-01T00:00:00.000000Z\"}\n");
	sink_json_commit_free(&c);
	buf_free(&b);
}

/* One event as rendered with the cache and as rendered without: the same bytes. */
static void check_cached(json_cache *cache, const Cdc__V1__Event *e)
{
	buf with = {0}, without = {0};
	sink_json_event_head(&with, cache, e);
	sink_json_event_head(&without, NULL, e);
	CHECK_STR(with.data, without.data);
	buf_free(&with);
	buf_free(&without);
}

/* json_cache knows a name by its address and the event's schema id, and a head by the schema id, the op and
 * the subscription's name: names rewritten in place under a new schema id (as a relation freed and another
 * allocated where it was), another subscription, an offset or a tag, names too long to keep, another LSN or
 * xid, and the day of a timestamp changing all render as without the cache. */
static void test_json_cache(void)
{
	char schema[8] = "public", table[8] = "t", id[8] = "id", name[8] = "name", sub[80] = "s";
	char longname[64];
	memset(longname, 'c', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	Cdc__V1__Timestamp ts = CDC__V1__TIMESTAMP__INIT;
	ts.micros = TSTZ_2026;
	ts.with_zone = true;
	Cdc__V1__Value v_id = CDC__V1__VALUE__INIT, v_name = CDC__V1__VALUE__INIT,
		       v_at = CDC__V1__VALUE__INIT;
	v_id.kind_case = CDC__V1__VALUE__KIND_INT_VALUE;
	v_id.int_value = 7;
	v_name.kind_case = CDC__V1__VALUE__KIND_TEXT_VALUE;
	v_name.text_value = "x\"y";
	v_at.kind_case = CDC__V1__VALUE__KIND_TIMESTAMP_VALUE;
	v_at.timestamp_value = &ts;
	Cdc__V1__Column c_id = CDC__V1__COLUMN__INIT, c_name = CDC__V1__COLUMN__INIT,
			c_at = CDC__V1__COLUMN__INIT;
	c_id.name = id;
	c_id.value = &v_id;
	c_name.name = name;
	c_name.value = &v_name;
	c_at.name = "at";
	c_at.value = &v_at;
	Cdc__V1__Column *new_cols[] = {&c_id, &c_name, &c_at}, *key_cols[] = {&c_id};
	Cdc__V1__Row new_row = CDC__V1__ROW__INIT, key = CDC__V1__ROW__INIT;
	new_row.columns = new_cols;
	new_row.n_columns = 3;
	key.columns = key_cols;
	key.n_columns = 1;
	Cdc__V1__Event e = CDC__V1__EVENT__INIT;
	e.subscription = sub;
	e.op = CDC__V1__OP__OP_INSERT;
	e.schema = schema;
	e.table = table;
	e.schema_id = 1;
	e.key = &key;
	e.new_row = &new_row;
	json_cache *cache = calloc(1, sizeof(*cache));

	check_cached(cache, &e);
	v_id.int_value = 8;
	ts.micros += INT64_C(86400000000); /* the next day */
	check_cached(cache, &e);
	e.lsn = UINT64_C(0x16B3748);
	check_cached(cache, &e);
	e.xid = 741;
	check_cached(cache, &e);
	/* the same addresses, other names, another schema id */
	strcpy(table, "u");
	strcpy(name, "nom");
	strcpy(id, "key");
	e.schema_id = 2;
	check_cached(cache, &e);
	e.op = CDC__V1__OP__OP_UPDATE;
	check_cached(cache, &e);
	strcpy(sub, "s2");
	check_cached(cache, &e);
	e.offset_present_case = CDC__V1__EVENT__OFFSET_PRESENT_OFFSET;
	e.offset = 42;
	check_cached(cache, &e);
	e.offset_present_case = CDC__V1__EVENT__OFFSET_PRESENT__NOT_SET;
	e.tag_present_case = CDC__V1__EVENT__TAG_PRESENT_TAG;
	e.tag = "tagged";
	check_cached(cache, &e);
	e.tag_present_case = CDC__V1__EVENT__TAG_PRESENT__NOT_SET;
	c_name.name = longname;
	memset(sub, 'S', sizeof(sub) - 1);
	sub[sizeof(sub) - 1] = '\0';
	check_cached(cache, &e);
	check_cached(cache, &e);
	/* the first names again, at their first addresses, under the first schema id */
	strcpy(table, "t");
	strcpy(name, "name");
	strcpy(id, "id");
	strcpy(sub, "s");
	c_name.name = name;
	e.schema_id = 1;
	e.op = CDC__V1__OP__OP_INSERT;
	ts.micros = TSTZ_2026;
	check_cached(cache, &e);
	check_cached(cache, &e);
	free(cache);
}

int main(void)
{
	A = arena_new(64 * 1024);
	RC = pgo_relcache_new();
	pgo_msg t = {.type = PGO_TYPE};
	t.typ.oid = MOOD_OID;
	t.typ.nspname = "public";
	t.typ.typname = "mood";
	pgo_relcache_put_type(RC, &t);

	test_values();
	test_bytea_all_bytes();
	test_json_string_any_bytes();
	test_json_deep();
	test_builtin_names();
	test_schema_events();
	test_events();
	test_roundtrip_all_kinds();
	test_errors();
	test_json_odd_events();
	test_commit_tail();
	test_json_cache();

	pgo_relcache_free(RC);
	arena_free(A);
	return TEST_SUMMARY("test_event");
}
