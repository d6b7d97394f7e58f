/* test_avro.c: format: avro's writer, pure, byte for byte: the schemas as AvroConverter registers
 * them (names, namespaces, unions, defaults, connect.* properties, decimals, named types written
 * once), names made valid Avro names, and records in the Confluent wire format with their bytes
 * worked out by hand from the Avro specification. fuzz_avro checks every record against libavro. */
#include "sinks/kafka/avro.h"

#include <stdlib.h>

#include "decoder/base/arena.h"
#include "decoder/event.h"
#include "decoder/pgtypes.h"
#include "test.h"
#include "tests/unit/rows.h"

static dbz_scratch S;
static dbz_schemas SC;

#define NUMERIC_10_2 ((10 << 16 | 2) + 4)
static const dbz_column COLS[] = {
    {"id", PGT_INT4, -1, true}, {"name", PGT_TEXT, -1, false}, {"amount", PGT_NUMERIC, NUMERIC_10_2, false}};

static const char *schema_of(const dbz_schema *s)
{
	static buf b;
	buf_reset(&b);
	kafka_avro_schema(&b, s);
	buf_putc(&b, '\0');
	return b.data;
}

static void test_schemas(void)
{
	CHECK_STR(
	    schema_of(sink_debezium_table_schema(&SC, "srv", "public", "t", "srv.public.t", COLS, 3, true)),
	    "{\"type\":\"record\",\"name\":\"Key\",\"namespace\":\"srv.public.t\",\"fields\":["
	    "{\"name\":\"id\",\"type\":\"int\"}],\"connect.name\":\"srv.public.t.Key\"}");
	const char *v =
	    schema_of(sink_debezium_table_schema(&SC, "srv", "public", "t", "srv.public.t", COLS, 3, false));
	static const char *parts[] = {
	    /* the envelope, named after the topic; before defines Value, after names it */
	    "{\"type\":\"record\",\"name\":\"Envelope\",\"namespace\":\"srv.public.t\",\"fields\":["
	    "{\"name\":\"before\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"Value\","
	    "\"namespace\":\"srv.public.t\",\"fields\":[{\"name\":\"id\",\"type\":\"int\"},"
	    "{\"name\":\"name\",\"type\":[\"null\",\"string\"],\"default\":null},"
	    /* Connect's Decimal: Avro's decimal logical type and Connect's parameters */
	    "{\"name\":\"amount\",\"type\":[\"null\",{\"type\":\"bytes\",\"scale\":2,\"precision\":10,"
	    "\"connect.version\":1,\"connect.parameters\":{\"scale\":\"2\",\"connect.decimal.precision\":"
	    "\"10\"},"
	    "\"connect.name\":\"org.apache.kafka.connect.data.Decimal\",\"logicalType\":\"decimal\"}],"
	    "\"default\":null}],\"connect.name\":\"srv.public.t.Value\"}],\"default\":null},"
	    "{\"name\":\"after\",\"type\":[\"null\",\"srv.public.t.Value\"],\"default\":null},",
	    /* source.snapshot has a default: its type comes first in the union */
	    "{\"name\":\"snapshot\",\"type\":[{\"type\":\"string\",\"connect.version\":1,\"connect."
	    "parameters\":"
	    "{\"allowed\":\"true,first,first_in_data_collection,last_in_data_collection,last,false,"
	    "incremental\"},"
	    "\"connect.default\":\"false\",\"connect.name\":\"io.debezium.data.Enum\"},\"null\"],\"default\":"
	    "\"false\"}",
	    "\"connect.version\":1,\"connect.name\":\"io.debezium.connector.postgresql.Source\"}},"
	    "{\"name\":\"transaction\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"block\","
	    "\"namespace\":"
	    "\"event\",\"fields\":[{\"name\":\"id\",\"type\":\"string\"},{\"name\":\"total_order\",\"type\":"
	    "\"long\"},{\"name\":\"data_collection_order\",\"type\":\"long\"}],\"connect.version\":1,"
	    "\"connect.name\":\"event.block\"}],\"default\":null},{\"name\":\"op\",\"type\":\"string\"},",
	    "{\"name\":\"ts_ns\",\"type\":[\"null\",\"long\"],\"default\":null}],\"connect.version\":2,"
	    "\"connect.name\":\"srv.public.t.Envelope\"}"};
	for (size_t i = 0; i < sizeof(parts) / sizeof(*parts); i++)
		CHECK(strstr(v, parts[i]) != NULL);
	CHECK(strncmp(v, parts[0], strlen(parts[0])) == 0);

	/* a named type a second time: its full name; int16 keeps its Connect type */
	static const dbz_column two[] = {
	    {"id", PGT_INT2, -1, true}, {"a", PGT_NUMERIC, -1, false}, {"b", PGT_NUMERIC, -1, false}};
	v = schema_of(sink_debezium_table_schema(&SC, "srv", "public", "t", "srv.public.t", two, 3, false));
	CHECK(strstr(v, "{\"name\":\"id\",\"type\":{\"type\":\"int\",\"connect.type\":\"int16\"}}") != NULL);
	CHECK(strstr(
		  v,
		  "{\"name\":\"a\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"VariableScaleDecimal\","
		  "\"namespace\":\"io.debezium.data\",\"fields\":[{\"name\":\"scale\",\"type\":\"int\"},"
		  "{\"name\":\"value\",\"type\":\"bytes\"}],\"connect.doc\":\"Variable scaled decimal\","
		  "\"connect.version\":1,\"connect.name\":\"io.debezium.data.VariableScaleDecimal\"}],"
		  "\"default\":null}") != NULL);
	CHECK(strstr(v, "{\"name\":\"b\",\"type\":[\"null\",\"io.debezium.data.VariableScaleDecimal\"],"
			"\"default\":null}") != NULL);
	/* money: Decimal at scale 2 without a precision (AvroData's default, 64) */
	static const dbz_column money[] = {{"m", PGT_MONEY, -1, true}};
	CHECK_STR(
	    schema_of(sink_debezium_table_schema(&SC, "srv", "public", "t", "srv.public.t", money, 1, true)),
	    "{\"type\":\"record\",\"name\":\"Key\",\"namespace\":\"srv.public.t\",\"fields\":[{"
	    "\"name\":\"m\","
	    "\"type\":{\"type\":\"bytes\",\"scale\":2,\"precision\":64,\"connect.version\":1,"
	    "\"connect.parameters\":{\"scale\":\"2\"},\"connect.name\":\"org.apache.kafka.connect.data."
	    "Decimal\","
	    "\"logicalType\":\"decimal\"}}],\"connect.name\":\"srv.public.t.Key\"}");
}

/* Connect names as Avro names (Debezium's avro adjustment), and field names. */
static void test_names(void)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
	    {"srv.public.t.Value", "srv.public.t.Value"},
	    {"srv.public.order-items.Value", "srv.public.order_items.Value"},
	    {"srv.public.9lives.Key", "srv.public._9lives.Key"}, /* a digit may not open a name */
	    {"srv.s\xc3\xa9.t.Key", "srv.s_.t.Key"},		 /* é: one UTF-16 unit */
	    {"srv.s\xf0\x9f\x98\x80.t.Key", "srv.s__.t.Key"},	 /* an emoji: two */
	    {"a b.c$d", "a_b.c_d"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		buf b = {0};
		kafka_avro_fullname(&b, cases[i].in);
		buf_putc(&b, '\0');
		CHECK_STR(b.data, cases[i].out);
		buf_free(&b);
	}
	static const dbz_column odd[] = {{"a.b", PGT_INT4, -1, true}, {"9x", PGT_INT4, -1, true}};
	CHECK_STR(
	    schema_of(sink_debezium_table_schema(&SC, "srv", "public", "t", "srv.public.t", odd, 2, true)),
	    "{\"type\":\"record\",\"name\":\"Key\",\"namespace\":\"srv.public.t\",\"fields\":["
	    "{\"name\":\"a_b\",\"type\":\"int\"},{\"name\":\"_9x\",\"type\":\"int\"}],"
	    "\"connect.name\":\"srv.public.t.Key\"}");
}

/* got is want[0..n); else both in hex. */
static void check_bytes(const buf *got, const uint8_t *want, size_t n, const char *what)
{
	bool same = got->len == n && memcmp(got->data, want, n) == 0;
	CHECK(same);
	if (same)
		return;
	fprintf(stderr, "%s:\n  got: ", what);
	for (size_t i = 0; i < got->len; i++)
		fprintf(stderr, " %02x", (uint8_t)got->data[i]);
	fprintf(stderr, "\n  want:");
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %02x", want[i]);
	fprintf(stderr, "\n");
}

static void test_records(void)
{
	char err[256];
	buf b = {0};
	Cdc__V1__Column *id = col("id", PGT_INT4, -1, "1");
	Cdc__V1__Row *after =
	    row(3, id, col("name", PGT_TEXT, -1, "Anne"), col("amount", PGT_NUMERIC, NUMERIC_10_2, "12.50"));
	/* the key: magic byte, id 7 big-endian, id 1 as a zigzag varint */
	kafka_avro_header(&b, 7);
	CHECK(kafka_avro_key(&b, &S, COLS, 3, after->columns, 3, err, sizeof(err)));
	check_bytes(&b, (const uint8_t[]){0, 0, 0, 0, 7, 2}, 6, "key");

	Cdc__V1__Event e = CDC__V1__EVENT__INIT;
	e.op = CDC__V1__OP__OP_INSERT;
	e.schema = "public";
	e.table = "t";
	e.lsn = 100;
	e.xid = 5;
	e.origin = "";
	e.key = row(1, id);
	dbz_options o = {
	    .server_name = "srv", .database = "db", .topic = "srv.public.t", .placeholder = true};
	buf r = {0};
	CHECK(kafka_avro_value(&r, &S, &o, COLS, 3, &e, DBZ_CREATE, NULL, after, err, sizeof(err)));
	buf_reset(&b);
	dbz_fill f = {.commit_lsn = 200, .commit_time = 3000000, .now = 5000000, .xid = 5};
	kafka_avro_complete(&b, 0x01020304, r.data, r.len, &f);
	static const char version[] = "cdc-" CDC_VERSION;
	buf want = {0};
	buf_append(&want, "\0\x01\x02\x03\x04", 5);
	/* before null; after: id 1; name "Anne"; amount 12.50 at scale 2: 1250 = 0x04e2 */
	buf_append(&want,
		   "\x00\x02\x02\x02\x08"
		   "Anne"
		   "\x02\x04\x04\xe2",
		   13);
	/* source: version, connector, name, ts_ms 3000 */
	buf_putc(&want, (char)(2 * (sizeof(version) - 1)));
	buf_append(&want, version, sizeof(version) - 1);
	buf_append(&want, "\x14postgresql\x06srv\xf0\x2e", 17);
	/* snapshot (branch 0) "false", db, sequence ["200","100"], ts_us 3000000, ts_ns 3000000000 */
	buf_append(&want,
		   "\x00\x0a"
		   "false"
		   "\x04"
		   "db",
		   10);
	buf_append(&want, "\x02\x1a[\"200\",\"100\"]", 15);
	buf_append(&want, "\x02\x80\x9b\xee\x02", 5);
	buf_append(&want, "\x02\x80\xf8\x82\xad\x16", 6);
	/* schema, table, txId 5, lsn 100, xmin null, origin null, origin_lsn null; transaction null */
	buf_append(&want, "\x0cpublic\x02t\x02\x0a\x02\xc8\x01\x00\x00\x00\x00", 18);
	/* op "c", ts_ms 5000, ts_us 5000000, ts_ns 5000000000 */
	buf_append(&want,
		   "\x02"
		   "c"
		   "\x02\x90\x4e\x02\x80\xad\xe2\x04\x02\x80\xc8\xaf\xa0\x25",
		   16);
	check_bytes(&b, (const uint8_t *)want.data, want.len, "insert");

	/* a key column without a value cannot be written: the field is required */
	buf_reset(&b);
	Cdc__V1__Row *nokey = row(1, col("name", PGT_TEXT, -1, "x"));
	CHECK(!kafka_avro_key(&b, &S, COLS, 3, nokey->columns, 1, err, sizeof(err)));
	CHECK_STR(err, "column id has no value in the key, but its Avro field is required");

	/* the transaction metadata: END with its collections */
	buf_reset(&b);
	dbz_count tables[] = {{"public", "t", 2}};
	kafka_avro_txn_value(&b, true, 5, 200, 3000000, 2, tables, 1);
	check_bytes(&b,
		    (const uint8_t *)"\x06"
				     "END"
				     "\x0a"
				     "5:200"
				     "\x02\x04\x02\x02\x02\x10"
				     "public.t"
				     "\x04\x00\xf0\x2e",
		    28, "END");
	buf_free(&b);
	buf_free(&r);
	buf_free(&want);
	arena_reset(A);
}

int main(void)
{
	A = arena_new(64 * 1024);
	test_schemas();
	test_names();
	test_records();
	sink_debezium_scratch_free(&S);
	sink_debezium_schemas_free(&SC);
	arena_free(A);
	return TEST_SUMMARY("test_avro");
}
