/* test_debezium.c: the Debezium renderer, pure: events in (their values converted from
 * PostgreSQL's text by the decoder, as on the stream), bytes out, compared byte for byte: every
 * type's value and schema, the envelope of each op with and without schemas, keys, the TOAST
 * placeholders, the marks' filling and the transaction records. Expected values that Debezium's
 * own tests assert are marked with where (AbstractRecordsProducerTest, Debezium 3.6). */
#include "sinks/debezium.h"

#include <stdlib.h>

#include "decoder/base/arena.h"
#include "decoder/event.h"
#include "decoder/pgtypes.h"
#include "test.h"
#include "tests/unit/rows.h"

static dbz_scratch S;

static Cdc__V1__Event *event(Cdc__V1__Op op, Cdc__V1__Row *key, Cdc__V1__Row *new_row, Cdc__V1__Row *old_row)
{
	Cdc__V1__Event *e = arena_alloc(A, sizeof(*e));
	*e = (Cdc__V1__Event)CDC__V1__EVENT__INIT;
	e->op = op;
	e->schema = "public";
	e->table = "t";
	e->lsn = 24023120;
	e->xid = 555;
	e->origin = "";
	e->key = key;
	e->new_row = new_row;
	e->old_row = old_row;
	return e;
}

static const dbz_fill FILL = {.commit_lsn = 24023128,
			      .commit_time = INT64_C(1559033904863123),
			      .now = INT64_C(1559033904961654),
			      .xid = 555,
			      .total_order = 3,
			      .collection_order = 2};

static dbz_options OPTS = {
    .server_name = "srv", .database = "postgres", .topic = "srv.public.t", .placeholder = true};

/* sink_debezium_value() then sink_debezium_complete() with FILL. */
static const char *render(const dbz_options *o, const Cdc__V1__Event *e, char op, const Cdc__V1__Row *before,
			  const Cdc__V1__Row *after)
{
	static buf out;
	buf tmpl = {0};
	sink_debezium_value(&tmpl, &S, o, e, op, before, after);
	buf_reset(&out);
	sink_debezium_complete(&out, tmpl.data, tmpl.len, &FILL);
	buf_free(&tmpl);
	return out.data;
}

#define SOURCE                                                                                               \
	"{\"version\":\"cdc-" CDC_VERSION "\",\"connector\":\"postgresql\",\"name\":\"srv\","                \
	"\"ts_ms\":1559033904863,\"snapshot\":\"false\",\"db\":\"postgres\","                                \
	"\"sequence\":\"[\\\"24023128\\\",\\\"24023120\\\"]\",\"ts_us\":1559033904863123,"                   \
	"\"ts_ns\":1559033904863123000,\"schema\":\"public\",\"table\":\"t\",\"txId\":555,"                  \
	"\"lsn\":24023120,\"xmin\":null,\"origin\":null,\"origin_lsn\":null}"
#define NOW "\"ts_ms\":1559033904961,\"ts_us\":1559033904961654,\"ts_ns\":1559033904961654000}"

/* Each type's value, in the after of an insert (the whole value compared), and its field schema. */
static void test_types(void)
{
	static const struct {
		uint32_t oid;
		int32_t typmod;
		const char *text, *value, *schema;
	} cases[] = {
	    {PGT_BOOL, -1, "t", "true", "{\"type\":\"boolean\",\"optional\":true"},
	    {PGT_INT2, -1, "-32768", "-32768", "{\"type\":\"int16\",\"optional\":true"},
	    {PGT_INT4, -1, "2147483647", "2147483647", "{\"type\":\"int32\",\"optional\":true"},
	    {PGT_INT8, -1, "-9223372036854775808", "-9223372036854775808",
	     "{\"type\":\"int64\",\"optional\":true"},
	    {PGT_OID, -1, "4294967295", "4294967295", "{\"type\":\"int64\",\"optional\":true"},
	    /* Jackson writes Java's Float/Double.toString */
	    {PGT_FLOAT4, -1, "0.1", "0.1", "{\"type\":\"float\",\"optional\":true"},
	    {PGT_FLOAT4, -1, "3.4028235e+38", "3.4028235E38", NULL},
	    {PGT_FLOAT4, -1, "3.4028580e+38", "\"Infinity\"", NULL}, /* past float's range: as Java's float */
	    {PGT_FLOAT8, -1, "1e+10", "1.0E10", "{\"type\":\"double\",\"optional\":true"},
	    {PGT_FLOAT8, -1, "100", "100.0", NULL},
	    {PGT_FLOAT8, -1, "1234567.5", "1234567.5", NULL},
	    {PGT_FLOAT8, -1, "12345678", "1.2345678E7", NULL},
	    {PGT_FLOAT8, -1, "0.001", "0.001", NULL},
	    {PGT_FLOAT8, -1, "0.0001", "1.0E-4", NULL},
	    {PGT_FLOAT8, -1, "-0", "-0.0", NULL},
	    {PGT_FLOAT8, -1, "0.30000000000000004", "0.30000000000000004", NULL},
	    {PGT_FLOAT8, -1, "NaN", "\"NaN\"", NULL},
	    {PGT_FLOAT8, -1, "-Infinity", "\"-Infinity\"", NULL},
	    /* numeric(10,2): Decimal, the unscaled value's two's complement in base64 */
	    {PGT_NUMERIC, (10 << 16 | 2) + 4, "12.50", "\"BOI=\"",
	     "{\"type\":\"bytes\",\"optional\":true,\"name\":\"org.apache.kafka.connect.data.Decimal\","
	     "\"version\":1,\"parameters\":{\"scale\":\"2\",\"connect.decimal.precision\":\"10\"}"},
	    {PGT_NUMERIC, (10 << 16 | 2) + 4, "-0.01", "\"/w==\"", NULL},
	    {PGT_NUMERIC, (10 << 16 | 2) + 4, "1.28", "\"AIA=\"", NULL},
	    {PGT_NUMERIC, (10 << 16 | 2) + 4, "-1.28", "\"gA==\"", NULL},
	    {PGT_NUMERIC, (10 << 16 | 2) + 4, "-1.29", "\"/38=\"", NULL},
	    {PGT_NUMERIC, (30 << 16 | 0) + 4, "18446744073709551616", "\"AQAAAAAAAAAA\"", NULL},
	    {PGT_NUMERIC, (30 << 16 | 0) + 4, "-9223372036854775808", "\"gAAAAAAAAAA=\"", NULL},
	    {PGT_NUMERIC, (5 << 16 | (-2 & 0x7ff)) + 4, "12300", "\"ew==\"", NULL}, /* PostgreSQL 15+ */
	    {PGT_NUMERIC, (10 << 16 | 2) + 4, "NaN", "null", NULL},
	    /* numeric: VariableScaleDecimal, trailing zeros dropped */
	    {PGT_NUMERIC, -1, "123.4500", "{\"scale\":2,\"value\":\"MDk=\"}",
	     "{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\",\"optional\":false,\"field\":\"scale\"},"
	     "{\"type\":\"bytes\",\"optional\":false,\"field\":\"value\"}],\"optional\":true,"
	     "\"name\":\"io.debezium.data.VariableScaleDecimal\",\"version\":1,\"doc\":\"Variable scaled "
	     "decimal\""},
	    {PGT_NUMERIC, -1, "100", "{\"scale\":0,\"value\":\"ZA==\"}", NULL},
	    {PGT_NUMERIC, -1, "0.000", "{\"scale\":0,\"value\":\"AA==\"}", NULL},
	    {PGT_NUMERIC, -1, "-0.0100", "{\"scale\":2,\"value\":\"/w==\"}", NULL},
	    {PGT_NUMERIC, -1, "Infinity", "null", NULL},
	    {PGT_MONEY, -1, "$1,234.11", "\"AeIT\"",
	     "{\"type\":\"bytes\",\"optional\":true,\"name\":\"org.apache.kafka.connect.data.Decimal\","
	     "\"version\":1,\"parameters\":{\"scale\":\"2\"}"},
	    {PGT_MONEY, -1, "-$1,234.11", "\"/h3t\"", NULL},
	    /* other locales' text: null (German: a comma for the point, the sign after) */
	    {PGT_MONEY, -1, "1.234,56 \xe2\x82\xac", "null", NULL},
	    {PGT_TEXT, -1, "a\"b\n", "\"a\\\"b\\n\"", "{\"type\":\"string\",\"optional\":true"},
	    {PGT_VARCHAR, 24, "x", "\"x\"", "{\"type\":\"string\",\"optional\":true"},
	    {PGT_BPCHAR, 8, "ab  ", "\"ab  \"", "{\"type\":\"string\",\"optional\":true"},
	    {PGT_BYTEA, -1, "\\x0102ff", "\"AQL/\"", "{\"type\":\"bytes\",\"optional\":true"},
	    {PGT_UUID, -1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\"",
	     "{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Uuid\",\"version\":1"},
	    {PGT_JSONB, -1, "{\"a\": [1, 2]}", "\"{\\\"a\\\": [1, 2]}\"",
	     "{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Json\",\"version\":1"},
	    {PGT_XML, -1, "<a>1</a>", "\"<a>1</a>\"",
	     "{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Xml\",\"version\":1"},
	    /* date: days since the epoch; Debezium reads infinity as -5877611-06-21 */
	    {PGT_DATE, -1, "2016-11-04", "17109",
	     "{\"type\":\"int32\",\"optional\":true,\"name\":\"io.debezium.time.Date\",\"version\":1"},
	    {PGT_DATE, -1, "infinity", "-2147472693", NULL},
	    {PGT_DATE, -1, "-infinity", "-2147472692", NULL},
	    /* time: adaptive, milliseconds up to time(3) (tip), else microseconds (ti, ttf) */
	    {PGT_TIME, -1, "13:51:30", "49890000000",
	     "{\"type\":\"int64\",\"optional\":true,\"name\":\"io.debezium.time.MicroTime\",\"version\":1"},
	    {PGT_TIME, 3, "13:51:30.123", "49890123",
	     "{\"type\":\"int32\",\"optional\":true,\"name\":\"io.debezium.time.Time\",\"version\":1"},
	    {PGT_TIME, -1, "24:00:00", "86400000000", NULL},
	    /* timestamp: ts, ts_ms, tsneg, ts_pinf, ts_ninf */
	    {PGT_TIMESTAMP, -1, "2016-11-04 13:51:30.123456", "1478267490123456",
	     "{\"type\":\"int64\",\"optional\":true,\"name\":\"io.debezium.time.MicroTimestamp\",\"version\":"
	     "1"},
	    {PGT_TIMESTAMP, 3, "2016-11-04 13:51:30.123", "1478267490123",
	     "{\"type\":\"int64\",\"optional\":true,\"name\":\"io.debezium.time.Timestamp\",\"version\":1"},
	    {PGT_TIMESTAMP, -1, "1936-10-25 22:10:12.608", "-1047174587392000", NULL},
	    {PGT_TIMESTAMP, -1, "infinity", "9223372036825200000", NULL},
	    {PGT_TIMESTAMP, -1, "-infinity", "-9223372036832400000", NULL},
	    /* timestamptz: tz, tz_zero, tz_min, tz_pinf; the column's digits */
	    {PGT_TIMESTAMPTZ, -1, "2016-11-04 11:51:30.123456+00", "\"2016-11-04T11:51:30.123456Z\"",
	     "{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.time.ZonedTimestamp\","
	     "\"version\":1"},
	    {PGT_TIMESTAMPTZ, -1, "21016-11-04 06:51:30+00", "\"+21016-11-04T06:51:30.000000Z\"", NULL},
	    {PGT_TIMESTAMPTZ, -1, "4714-12-31 23:59:59.999999+00 BC", "\"-4713-12-31T23:59:59.999999Z\"",
	     NULL},
	    {PGT_TIMESTAMPTZ, -1, "infinity", "\"infinity\"", NULL},
	    {PGT_TIMESTAMPTZ, 3, "2024-01-02 03:04:05.5+00", "\"2024-01-02T03:04:05.500Z\"", NULL},
	    {PGT_TIMESTAMPTZ, 0, "2024-01-02 03:04:05+00", "\"2024-01-02T03:04:05Z\"", NULL},
	    /* timetz: ttz, tptz */
	    {PGT_TIMETZ, -1, "13:51:30.123789+02", "\"11:51:30.123789Z\"",
	     "{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.time.ZonedTime\",\"version\":1"},
	    {PGT_TIMETZ, -1, "13:51:30.123+02", "\"11:51:30.123Z\"", NULL},
	    {PGT_TIMETZ, -1, "00:30:00+05:30", "\"19:00:00Z\"", NULL},
	    /* interval: it, MicroDuration.durationMicros(1, 2, 3, 4, 5, 6.78, 365.25 / 12) */
	    {PGT_INTERVAL, -1, "1 year 2 mons 3 days 04:05:06.78", "37091106780000",
	     "{\"type\":\"int64\",\"optional\":true,\"name\":\"io.debezium.time.MicroDuration\",\"version\":"
	     "1"},
	    {PGT_INTERVAL, -1, "-1 days +02:03:00", "-79020000000", NULL},
	    {PGT_INTERVAL, -1, "00:00:00", "0", NULL},
	    /* bit(1) a boolean, wider bits little-endian bytes: bol2, bv2 ({1, 2, 3}), bvunlimited1 and
	     * bvunlimited2 ({1, 2, 35, -38, 1}) */
	    {PGT_BIT, 1, "1", "true", "{\"type\":\"boolean\",\"optional\":true"},
	    {PGT_BIT, 24, "000000110000001000000001", "\"AQID\"",
	     "{\"type\":\"bytes\",\"optional\":true,\"name\":\"io.debezium.data.Bits\",\"version\":1,"
	     "\"parameters\":{\"length\":\"24\"}"},
	    {PGT_VARBIT, -1, "101", "\"BQ==\"",
	     "{\"type\":\"bytes\",\"optional\":true,\"name\":\"io.debezium.data.Bits\",\"version\":1,"
	     "\"parameters\":{\"length\":\"2147483647\"}"},
	    {PGT_VARBIT, -1, "111011010001000110000001000000001", "\"AQIj2gE=\"", NULL},
	    {PGT_BIT, 2, "00", "\"\"", NULL},
	    {PGT_POINT, -1, "(1,1)",
	     "{\"x\":1.0,\"y\":1.0,\"wkb\":\"AQEAAAAAAAAAAADwPwAAAAAAAPA/\",\"srid\":null}",
	     "{\"type\":\"struct\",\"fields\":[{\"type\":\"double\",\"optional\":false,\"field\":\"x\"},"
	     "{\"type\":\"double\",\"optional\":false,\"field\":\"y\"},{\"type\":\"bytes\",\"optional\":true,"
	     "\"field\":\"wkb\"},{\"type\":\"int32\",\"optional\":true,\"field\":\"srid\"}],\"optional\":"
	     "true,"
	     "\"name\":\"io.debezium.data.geometry.Point\",\"version\":1,\"doc\":\"Geometry (POINT)\""},
	    {869 /* inet */, -1, "192.168.1.0/24", "\"192.168.1.0/24\"",
	     "{\"type\":\"string\",\"optional\":true"},
	    {3904 /* int4range */, -1, "[1,5)", "\"[1,5)\"", NULL},
	    {PGT_TSVECTOR, -1, "'a' 'b'", "\"'a' 'b'\"",
	     "{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Tsvector\",\"version\":1"},
	    {99999 /* an extension's type */, -1, "x y", "\"x y\"", "{\"type\":\"string\",\"optional\":true"},
	    /* arrays, their elements as the element type */
	    {1007 /* _int4 */, -1, "{1,2,NULL}", "[1,2,null]",
	     "{\"type\":\"array\",\"items\":{\"type\":\"int32\",\"optional\":true},\"optional\":true"},
	    {1009 /* _text */, -1, "{a,\"b c\",\"d\\\"e\",NULL,\"NULL\"}",
	     "[\"a\",\"b c\",\"d\\\"e\",null,\"NULL\"]",
	     "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"optional\":true},\"optional\":true"},
	    {1231 /* _numeric */, (10 << 16 | 2) + 4, "{1.50}", "[\"AJY=\"]",
	     "{\"type\":\"array\",\"items\":{\"type\":\"bytes\",\"optional\":true,"
	     "\"name\":\"org.apache.kafka.connect.data.Decimal\",\"version\":1,"
	     "\"parameters\":{\"scale\":\"2\",\"connect.decimal.precision\":\"10\"}},\"optional\":true"},
	    {1182 /* _date */, -1, "{2016-11-04}", "[17109]", NULL},
	    {1185 /* _timestamptz: timestamptza */, -1, "{\"2020-04-01 11:51:02+00\"}",
	     "[\"2020-04-01T11:51:02.000000Z\"]", NULL},
	    {1000 /* _bool */, -1, "[0:1]={t,f}", "[true,false]", NULL},
	    {1007, -1, "{}", "[]", NULL},
	    {1007, -1, "{{1,2},{3,4}}", "null", NULL},
	    {1187 /* _interval: Debezium has no type for it */, -1, "{\"1 day\"}", "\"{\\\"1 day\\\"}\"",
	     "{\"type\":\"string\",\"optional\":true"},
	};
	dbz_options schemas = OPTS;
	schemas.schemas = true;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		Cdc__V1__Column *id = col("id", PGT_INT4, -1, "1");
		Cdc__V1__Row *r = row(2, id, col("c", cases[i].oid, cases[i].typmod, cases[i].text));
		Cdc__V1__Event *e = event(CDC__V1__OP__OP_INSERT, row(1, id), r, NULL);
		buf want = {0};
		buf_printf(&want,
			   "{\"before\":null,\"after\":{\"id\":1,\"c\":%s},\"source\":" SOURCE
			   ",\"transaction\":null,\"op\":\"c\"," NOW,
			   cases[i].value);
		const char *got = render(&OPTS, e, DBZ_CREATE, NULL, r);
		if (strcmp(got, want.data) != 0)
			fprintf(stderr, "case %zu (oid %u, %s)\n", i, cases[i].oid, cases[i].text);
		CHECK_STR(got, want.data);
		if (cases[i].schema) {
			buf field = {0};
			buf_printf(&field, "%s,\"field\":\"c\"}", cases[i].schema);
			got = render(&schemas, e, DBZ_CREATE, NULL, r);
			if (!strstr(got, field.data))
				fprintf(stderr, "case %zu: no %s in\n%s\n", i, field.data, got);
			CHECK(strstr(got, field.data) != NULL);
			buf_free(&field);
		}
		buf_free(&want);
		arena_reset(A);
	}
}

/* The whole record of an update with schemas, byte for byte: the shape Debezium's PostgreSQL
 * documentation shows for create events (the envelope's fields in the order of TableSchemaBuilder
 * and Envelope.defineSchema(): before, after, source, transaction, op, ts_ms, ts_us, ts_ns). */
static void test_envelope_with_schemas(void)
{
	Cdc__V1__Column *id = col("id", PGT_INT4, -1, "1"), *oid = col("id", PGT_INT4, -1, "1");
	Cdc__V1__Row *after = row(2, id, col("name", PGT_TEXT, -1, "Anne"));
	Cdc__V1__Row *before = row(2, oid, col("name", PGT_TEXT, -1, "Ann"));
	Cdc__V1__Event *e = event(CDC__V1__OP__OP_UPDATE, row(1, oid), after, before);
	dbz_options o = OPTS;
	o.schemas = true;
	o.transaction = true;
	const char *row_schema =
	    "{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\",\"optional\":false,\"field\":\"id\"},"
	    "{\"type\":\"string\",\"optional\":true,\"field\":\"name\"}],\"optional\":true,"
	    "\"name\":\"srv.public.t.Value\",\"field\":\"%s\"}";
	buf want = {0};
	buf_puts(&want, "{\"schema\":{\"type\":\"struct\",\"fields\":[");
	buf_printf(&want, row_schema, "before");
	buf_putc(&want, ',');
	buf_printf(&want, row_schema, "after");
	buf_puts(
	    &want,
	    ",{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":false,\"field\":\"version\"}"
	    ","
	    "{\"type\":\"string\",\"optional\":false,\"field\":\"connector\"},"
	    "{\"type\":\"string\",\"optional\":false,\"field\":\"name\"},"
	    "{\"type\":\"int64\",\"optional\":false,\"field\":\"ts_ms\"},"
	    "{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Enum\",\"version\":1,"
	    "\"parameters\":{\"allowed\":\"true,first,first_in_data_collection,last_in_data_collection,last,"
	    "false,incremental\"},\"default\":\"false\",\"field\":\"snapshot\"},"
	    "{\"type\":\"string\",\"optional\":false,\"field\":\"db\"},"
	    "{\"type\":\"string\",\"optional\":true,\"field\":\"sequence\"},"
	    "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_us\"},"
	    "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_ns\"},"
	    "{\"type\":\"string\",\"optional\":false,\"field\":\"schema\"},"
	    "{\"type\":\"string\",\"optional\":false,\"field\":\"table\"},"
	    "{\"type\":\"int64\",\"optional\":true,\"field\":\"txId\"},"
	    "{\"type\":\"int64\",\"optional\":true,\"field\":\"lsn\"},"
	    "{\"type\":\"int64\",\"optional\":true,\"field\":\"xmin\"},"
	    "{\"type\":\"string\",\"optional\":true,\"field\":\"origin\"},"
	    "{\"type\":\"int64\",\"optional\":true,\"field\":\"origin_lsn\"}],\"optional\":false,"
	    "\"name\":\"io.debezium.connector.postgresql.Source\",\"version\":1,\"field\":\"source\"},"
	    "{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":false,\"field\":\"id\"},"
	    "{\"type\":\"int64\",\"optional\":false,\"field\":\"total_order\"},"
	    "{\"type\":\"int64\",\"optional\":false,\"field\":\"data_collection_order\"}],\"optional\":true,"
	    "\"name\":\"event.block\",\"version\":1,\"field\":\"transaction\"},"
	    "{\"type\":\"string\",\"optional\":false,\"field\":\"op\"},"
	    "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_ms\"},"
	    "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_us\"},"
	    "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_ns\"}],\"optional\":false,"
	    "\"name\":\"srv.public.t.Envelope\",\"version\":2},"
	    "\"payload\":{\"before\":{\"id\":1,\"name\":\"Ann\"},\"after\":{\"id\":1,\"name\":\"Anne\"},"
	    "\"source\":" SOURCE ",\"transaction\":{\"id\":\"555:24023128\",\"total_order\":3,"
	    "\"data_collection_order\":2},\"op\":\"u\"," NOW "}");
	CHECK_STR(render(&o, e, DBZ_UPDATE, before, after), want.data);
	buf_free(&want);

	/* the key: Key schema, the key columns required */
	buf k = {0};
	sink_debezium_key(&k, &S, &o, e, e->key->columns, e->key->n_columns);
	CHECK_STR(k.data,
		  "{\"schema\":{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\",\"optional\":false,"
		  "\"field\":\"id\"}],\"optional\":false,\"name\":\"srv.public.t.Key\"},"
		  "\"payload\":{\"id\":1}}");
	buf_reset(&k);
	sink_debezium_key(&k, &S, &OPTS, e, e->key->columns, e->key->n_columns);
	CHECK_STR(k.data, "{\"id\":1}");
	buf_free(&k);
	arena_reset(A);
}

/* Names that need escaping, in schema names and payloads. */
static void test_names_escaped(void)
{
	Cdc__V1__Column *id = col("a\"b", PGT_INT4, -1, "1");
	Cdc__V1__Event *e = event(CDC__V1__OP__OP_INSERT, row(1, id), row(1, id), NULL);
	e->schema = "s\\x";
	dbz_options o = OPTS;
	o.schemas = true;
	buf k = {0};
	sink_debezium_key(&k, &S, &o, e, e->key->columns, 1);
	CHECK_STR(k.data,
		  "{\"schema\":{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\",\"optional\":false,"
		  "\"field\":\"a\\\"b\"}],\"optional\":false,\"name\":\"srv.s\\\\x.t.Key\"},"
		  "\"payload\":{\"a\\\"b\":1}}");
	buf_free(&k);
	arena_reset(A);
}

/* Every op's payload without schemas. */
static void test_ops(void)
{
	Cdc__V1__Column *id = col("id", PGT_INT4, -1, "7"), *v = col("v", PGT_TEXT, -1, "x");
	Cdc__V1__Row *key = row(1, id), *full = row(2, id, v);

	/* delete under REPLICA IDENTITY DEFAULT: the key columns the server sent */
	Cdc__V1__Event *e = event(CDC__V1__OP__OP_DELETE, key, NULL, key);
	CHECK_STR(render(&OPTS, e, DBZ_DELETE, key, NULL),
		  "{\"before\":{\"id\":7},\"after\":null,\"source\":" SOURCE
		  ",\"transaction\":null,\"op\":\"d\"," NOW);
	/* update without an old row (the key did not change, identity DEFAULT): before null */
	e = event(CDC__V1__OP__OP_UPDATE, key, full, NULL);
	CHECK_STR(render(&OPTS, e, DBZ_UPDATE, NULL, full),
		  "{\"before\":null,\"after\":{\"id\":7,\"v\":\"x\"},\"source\":" SOURCE
		  ",\"transaction\":null,\"op\":\"u\"," NOW);

	/* truncate: no rows */
	e = event(CDC__V1__OP__OP_TRUNCATE, NULL, NULL, NULL);
	CHECK_STR(render(&OPTS, e, DBZ_TRUNCATE, NULL, NULL),
		  "{\"before\":null,\"after\":null,\"source\":" SOURCE
		  ",\"transaction\":null,\"op\":\"t\"," NOW);

	/* a backfill's read: Debezium's incremental snapshot marks it, without txId and lsn */
	e = event(CDC__V1__OP__OP_READ, key, full, NULL);
	e->xid = 0;
	CHECK_STR(
	    render(&OPTS, e, DBZ_READ, NULL, full),
	    "{\"before\":null,\"after\":{\"id\":7,\"v\":\"x\"},\"source\":{\"version\":\"cdc-" CDC_VERSION
	    "\",\"connector\":\"postgresql\",\"name\":\"srv\",\"ts_ms\":1559033904863,"
	    "\"snapshot\":\"incremental\",\"db\":\"postgres\","
	    "\"sequence\":\"[\\\"24023128\\\",\\\"24023120\\\"]\",\"ts_us\":1559033904863123,"
	    "\"ts_ns\":1559033904863123000,\"schema\":\"public\",\"table\":\"t\",\"txId\":null,"
	    "\"lsn\":null,\"xmin\":null,\"origin\":null,\"origin_lsn\":null},\"transaction\":null,"
	    "\"op\":\"r\"," NOW);

	/* a logical message (MessageValue); a non-transactional one has no txId, and its source time is
	 * now (commit_time 0) */
	e = event(CDC__V1__OP__OP_MESSAGE, NULL, NULL, NULL);
	e->schema = e->table = "";
	Cdc__V1__LogicalMessage lm = CDC__V1__LOGICAL_MESSAGE__INIT;
	lm.prefix = "foo";
	lm.content = (ProtobufCBinaryData){3, (uint8_t *)"bar"};
	e->message = &lm;
	e->xid = 0;
	e->origin = "replica1";
	buf tmpl = {0}, out = {0};
	sink_debezium_value(&tmpl, &S, &OPTS, e, DBZ_MESSAGE, NULL, NULL);
	dbz_fill f = FILL;
	f.commit_time = 0;
	f.xid = 0;
	sink_debezium_complete(&out, tmpl.data, tmpl.len, &f);
	CHECK_STR(out.data, "{\"op\":\"m\",\"ts_ms\":1559033904961,\"source\":{\"version\":\"cdc-" CDC_VERSION
			    "\",\"connector\":\"postgresql\",\"name\":\"srv\",\"ts_ms\":1559033904961,"
			    "\"snapshot\":\"false\",\"db\":\"postgres\","
			    "\"sequence\":\"[\\\"24023128\\\",\\\"24023120\\\"]\",\"ts_us\":1559033904961654,"
			    "\"ts_ns\":1559033904961654000,\"schema\":\"\",\"table\":\"\",\"txId\":null,"
			    "\"lsn\":24023120,\"xmin\":null,\"origin\":\"replica1\",\"origin_lsn\":null},"
			    "\"transaction\":null,\"message\":{\"prefix\":\"foo\",\"content\":\"YmFy\"}}");
	buf k = {0};
	sink_debezium_key(&k, &S, &OPTS, e, NULL, 0);
	CHECK_STR(k.data, "{\"prefix\":\"foo\"}");
	buf_free(&k);
	buf_free(&tmpl);
	buf_free(&out);
	arena_reset(A);
}

/* Unchanged TOAST: Debezium's placeholder by type, the old row's value under FULL, or left out. */
static void test_toast(void)
{
	Cdc__V1__Column *id = col("id", PGT_INT4, -1, "1");
	Cdc__V1__Row *after =
	    row(6, id, col("t", PGT_TEXT, -1, TOAST), col("b", PGT_BYTEA, -1, TOAST),
		col("a", 1007, -1, TOAST), col("j", PGT_JSONB, -1, TOAST), col("n", PGT_NUMERIC, -1, TOAST));
	Cdc__V1__Event *e = event(CDC__V1__OP__OP_UPDATE, row(1, id), after, NULL);
	CHECK_STR(
	    render(&OPTS, e, DBZ_UPDATE, NULL, after),
	    "{\"before\":null,\"after\":{\"id\":1,\"t\":\"__debezium_unavailable_value\","
	    "\"b\":\"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==\",\"a\":[95,95,100,101,98,101,122,105,117,"
	    "109,95,117,110,97,118,97,105,108,97,98,108,101,95,118,97,108,117,101],"
	    "\"j\":\"__debezium_unavailable_value\",\"n\":null},\"source\":" SOURCE
	    ",\"transaction\":null,\"op\":\"u\"," NOW);
	dbz_options omit = OPTS;
	omit.placeholder = false;
	CHECK_STR(render(&omit, e, DBZ_UPDATE, NULL, after),
		  "{\"before\":null,\"after\":{\"id\":1},\"source\":" SOURCE
		  ",\"transaction\":null,\"op\":\"u\"," NOW);
	/* REPLICA IDENTITY FULL: the old row has the value */
	Cdc__V1__Row *before = row(2, id, col("t", PGT_TEXT, -1, "long text"));
	Cdc__V1__Row *after2 = row(2, id, col("t", PGT_TEXT, -1, TOAST));
	e = event(CDC__V1__OP__OP_UPDATE, row(1, id), after2, before);
	CHECK_STR(render(&omit, e, DBZ_UPDATE, before, after2),
		  "{\"before\":{\"id\":1,\"t\":\"long text\"},\"after\":{\"id\":1,\"t\":\"long text\"},"
		  "\"source\":" SOURCE ",\"transaction\":null,\"op\":\"u\"," NOW);
	arena_reset(A);
}

/* Which records an event becomes (sink_debezium_records), and the headers they carry: the plan both
 * Kafka's records and NATS's messages follow. */
static void test_records(void)
{
	Cdc__V1__Column *id7 = col("id", PGT_INT4, -1, "7"), *id8 = col("id", PGT_INT4, -1, "8");
	Cdc__V1__Column *v = col("v", PGT_TEXT, -1, "x");
	Cdc__V1__Row *key7 = row(1, id7), *full7 = row(2, id7, v), *full8 = row(2, id8, v);
	dbz_record r[DBZ_RECORDS_MAX];

	/* an insert: a create under its key */
	Cdc__V1__Event *e = event(CDC__V1__OP__OP_INSERT, key7, full7, NULL);
	CHECK_INT(sink_debezium_records(&S, e, true, r), 1);
	CHECK(r[0].op == DBZ_CREATE && r[0].has_key && r[0].nkey == 1 && r[0].key[0] == id7);
	CHECK(r[0].before == NULL && r[0].after == full7 && r[0].key_header == NULL);

	/* an update under REPLICA IDENTITY FULL that kept the key: one update */
	e = event(CDC__V1__OP__OP_UPDATE, key7, full7, full7);
	CHECK_INT(sink_debezium_records(&S, e, true, r), 1);
	CHECK(r[0].op == DBZ_UPDATE && r[0].before == full7 && r[0].after == full7 &&
	      r[0].key_header == NULL);
	CHECK(r[0].key[0] == id7);

	/* an update that moved the row from key 7 to 8: delete, tombstone, create */
	e = event(CDC__V1__OP__OP_UPDATE, key7, full8, key7);
	CHECK_INT(sink_debezium_records(&S, e, true, r), 3);
	CHECK(r[0].op == DBZ_DELETE && r[0].before == key7 && r[0].after == NULL && r[0].key[0] == id7);
	CHECK_STR(r[0].key_header, "__debezium.newkey");
	CHECK_STR(r[0].key_header_value->data, "{\"id\":8}");
	CHECK(r[1].op == DBZ_TOMBSTONE && r[1].key[0] == id7);
	CHECK_STR(r[1].key_header, "__debezium.newkey");
	CHECK(r[2].op == DBZ_CREATE && r[2].before == NULL && r[2].after == full8 && r[2].key[0] == id8);
	CHECK_STR(r[2].key_header, "__debezium.oldkey");
	CHECK_STR(r[2].key_header_value->data, "{\"id\":7}");
	/* ... and without tombstones (NATS): delete and create */
	CHECK_INT(sink_debezium_records(&S, e, false, r), 2);
	CHECK(r[0].op == DBZ_DELETE && r[1].op == DBZ_CREATE && r[1].key[0] == id8);

	/* a delete: its tombstone only when asked, and only with a key */
	e = event(CDC__V1__OP__OP_DELETE, key7, NULL, key7);
	CHECK_INT(sink_debezium_records(&S, e, true, r), 2);
	CHECK(r[0].op == DBZ_DELETE && r[1].op == DBZ_TOMBSTONE && r[1].has_key);
	CHECK_INT(sink_debezium_records(&S, e, false, r), 1);
	e = event(CDC__V1__OP__OP_DELETE, NULL, NULL, full7);
	CHECK_INT(sink_debezium_records(&S, e, true, r), 1);
	CHECK(r[0].op == DBZ_DELETE && !r[0].has_key);

	/* a truncate has a null key; a message is keyed by its prefix (sink_debezium_key) */
	e = event(CDC__V1__OP__OP_TRUNCATE, NULL, NULL, NULL);
	CHECK_INT(sink_debezium_records(&S, e, true, r), 1);
	CHECK(r[0].op == DBZ_TRUNCATE && !r[0].has_key);
	e = event(CDC__V1__OP__OP_MESSAGE, NULL, NULL, NULL);
	CHECK_INT(sink_debezium_records(&S, e, true, r), 1);
	CHECK(r[0].op == DBZ_MESSAGE && r[0].has_key && r[0].nkey == 0);

	/* Debezium's context headers: on data changes, none on a message */
	dbz_header h[DBZ_CONTEXT_HEADERS];
	CHECK_INT(sink_debezium_context_headers(e, "srv", h), 0);
	e = event(CDC__V1__OP__OP_INSERT, key7, full7, NULL);
	CHECK_INT(sink_debezium_context_headers(e, "srv", h), 4);
	CHECK(strcmp(h[0].name, "__debezium.context.connectorLogicalName") == 0 &&
	      strcmp(h[0].value, "srv") == 0);
	CHECK(strcmp(h[1].name, "__debezium.context.taskId") == 0 && strcmp(h[1].value, "0") == 0);
	CHECK(strcmp(h[2].name, "__debezium.context.connectorName") == 0 &&
	      strcmp(h[2].value, "postgresql") == 0);
	CHECK(strcmp(h[3].name, "__debezium.context.runId") == 0 && h[3].value == sink_debezium_run_id());

	/* the run id: a version 4 UUID, the same for the whole process */
	const char *id = sink_debezium_run_id();
	CHECK(strlen(id) == 36 && id[8] == '-' && id[14] == '4' && strchr("89ab", id[19]) &&
	      id == sink_debezium_run_id());
	arena_reset(A);
}

/* BEGIN and END on the transactions topic (Debezium's transaction metadata). */
static void test_transaction_records(void)
{
	buf b = {0};
	sink_debezium_txn_key(&b, false, 571, 53195832);
	CHECK_STR(b.data, "{\"id\":\"571:53195832\"}");
	buf_reset(&b);
	sink_debezium_txn_value(&b, false, false, 571, 53195832, INT64_C(1486500577125000), 0, NULL, 0);
	CHECK_STR(b.data, "{\"status\":\"BEGIN\",\"id\":\"571:53195832\",\"event_count\":null,"
			  "\"data_collections\":null,\"ts_ms\":1486500577125}");
	buf_reset(&b);
	dbz_count counts[] = {{"s1", "a", 1}, {"s2", "a", 1}};
	sink_debezium_txn_value(&b, false, true, 571, 53195832, INT64_C(1486500577691000), 2, counts, 2);
	CHECK_STR(b.data, "{\"status\":\"END\",\"id\":\"571:53195832\",\"event_count\":2,"
			  "\"data_collections\":[{\"data_collection\":\"s1.a\",\"event_count\":1},"
			  "{\"data_collection\":\"s2.a\",\"event_count\":1}],\"ts_ms\":1486500577691}");
	buf_reset(&b);
	sink_debezium_txn_key(&b, true, 571, 53195832);
	CHECK_STR(b.data,
		  "{\"schema\":{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":false,"
		  "\"field\":\"id\"}],\"optional\":false,"
		  "\"name\":\"io.debezium.connector.common.TransactionMetadataKey\",\"version\":1},"
		  "\"payload\":{\"id\":\"571:53195832\"}}");
	buf_free(&b);
}

int main(void)
{
	A = arena_new(64 * 1024);
	test_types();
	test_envelope_with_schemas();
	test_names_escaped();
	test_ops();
	test_toast();
	test_records();
	test_transaction_records();
	sink_debezium_scratch_free(&S);
	arena_free(A);
	return TEST_SUMMARY("test_debezium");
}
