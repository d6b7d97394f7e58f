/* fuzz_avro.c: libFuzzer harness for format: avro, checked against Apache Avro's C library
 * (Debian's libavro-dev). The input makes a table (each column: a type, a type modifier, whether
 * it is a key column, its text as the server would send it, or NULL, or unchanged TOAST) and a
 * change of it. cdc's key and envelope schemas must parse in libavro; cdc's key and value records
 * must read in libavro with those schemas, and libavro must write back the very same bytes: what
 * cdc writes is Avro, byte for byte. Names made valid Avro names must parse too. */
#include <avro.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/arena.h"
#include "decoder/event.h"
#include "decoder/pgtypes.h"
#include "sinks/kafka/avro.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint32_t types[] = {PGT_BOOL,
				 PGT_INT2,
				 PGT_INT4,
				 PGT_INT8,
				 PGT_FLOAT4,
				 PGT_FLOAT8,
				 PGT_NUMERIC,
				 PGT_MONEY,
				 PGT_TEXT,
				 PGT_BYTEA,
				 PGT_UUID,
				 PGT_JSONB,
				 PGT_XML,
				 PGT_DATE,
				 PGT_TIME,
				 PGT_TIMESTAMP,
				 PGT_TIMESTAMPTZ,
				 PGT_TIMETZ,
				 PGT_INTERVAL,
				 PGT_BIT,
				 PGT_VARBIT,
				 PGT_POINT,
				 PGT_TSVECTOR,
				 1007 /* _int4 */,
				 1009 /* _text */,
				 1231 /* _numeric */,
				 1185 /* _timestamptz */,
				 1001 /* _bytea */,
				 2951 /* _uuid */,
				 1016 /* _int8 */,
				 1182 /* _date */,
				 1021 /* _float4 */,
				 1561 /* _bit */,
				 869 /* inet: text */};
static const int32_t mods[] = {
    -1, 0, 3, 6, 1, 24, (10 << 16 | 2) + 4, (5 << 16 | (-2 & 0x7ff)) + 4, (38 << 16 | 10) + 4};
static const char *const names[] = {"id", "a b", "9lives", "é", "x.y", "c", "d", "e"};

/* Reads n bytes of the input, or fewer at its end. */
typedef struct input {
	const uint8_t *p, *end;
} input;

static unsigned take(input *in)
{
	return in->p < in->end ? *in->p++ : 0;
}

/* The record (after the wire format's header) read by libavro with schema json must write back
 * identically. */
static void check(const char *json, size_t jlen, const buf *rec)
{
	avro_schema_t schema;
	if (avro_schema_from_json_length(json, jlen, &schema) != 0)
		abort(); /* cdc's schema is not Avro */
	if (!rec) {
		avro_schema_decref(schema);
		return;
	}
	if (rec->len < DBZ_AVRO_HEADER || rec->data[0] != 0)
		abort();
	const char *body = rec->data + DBZ_AVRO_HEADER;
	size_t len = rec->len - DBZ_AVRO_HEADER;
	avro_value_iface_t *iface = avro_generic_class_from_schema(schema);
	avro_value_t v;
	avro_generic_value_new(iface, &v);
	avro_reader_t r = avro_reader_memory(body, (int64_t)len);
	if (avro_value_read(r, &v) != 0)
		abort(); /* not a record of that schema */
	size_t size = 0;
	avro_value_sizeof(&v, &size);
	char *back = malloc(size + 1);
	avro_writer_t w = avro_writer_memory(back, (int64_t)size + 1);
	if (size != len || avro_value_write(w, &v) != 0 || avro_writer_tell(w) != (int64_t)len ||
	    memcmp(back, body, len) != 0)
		abort(); /* libavro writes other bytes, or cdc's has bytes left over */
	free(back);
	avro_writer_free(w);
	avro_reader_free(r);
	avro_value_decref(&v);
	avro_value_iface_decref(iface);
	avro_schema_decref(schema);
}

static Cdc__V1__Column *column(arena *a, const dbz_column *c, input *in)
{
	Cdc__V1__Column *col = arena_alloc(a, sizeof(*col));
	*col = (Cdc__V1__Column)CDC__V1__COLUMN__INIT;
	col->name = (char *)c->name;
	col->type_oid = c->type_oid;
	if (c->typmod >= 0) {
		col->type_modifier_present_case = CDC__V1__COLUMN__TYPE_MODIFIER_PRESENT_TYPE_MODIFIER;
		col->type_modifier = c->typmod;
	}
	unsigned how = take(in), len = take(in);
	if ((size_t)(in->end - in->p) < len)
		len = (unsigned)(in->end - in->p);
	pgo_datum d = how % 8 == 0   ? (pgo_datum){.kind = PGO_NULL}
		      : how % 8 == 1 ? (pgo_datum){.kind = PGO_TOAST}
				     : (pgo_datum){.kind = PGO_TEXT, .len = len, .data = (const char *)in->p};
	in->p += len;
	col->value = pgo_event_value(a, NULL, c->type_oid, &d);
	return col;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static arena *a;
	static dbz_scratch s;
	static dbz_schemas sc;
	if (!a)
		a = arena_new(64 * 1024);
	input in = {data, data + size};
	static const char ops[] = {DBZ_CREATE, DBZ_UPDATE, DBZ_DELETE, DBZ_READ, DBZ_TRUNCATE, DBZ_MESSAGE};
	char op = ops[take(&in) % sizeof(ops)];
	size_t n = take(&in) % 6 + 1;
	dbz_column cols[8];
	Cdc__V1__Column *after[8], *before[8], *key[8];
	size_t nkey = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned t = take(&in), m = take(&in);
		cols[i] = (dbz_column){names[i], types[t % (sizeof(types) / sizeof(*types))],
				       mods[m % (sizeof(mods) / sizeof(*mods))], i == 0 || (t & 0x80)};
	}
	for (size_t i = 0; i < n; i++) {
		after[i] = column(a, &cols[i], &in);
		before[i] = column(a, &cols[i], &in);
		if (cols[i].key)
			key[nkey++] = after[i];
	}
	Cdc__V1__Row new_row = CDC__V1__ROW__INIT, old_row = CDC__V1__ROW__INIT, key_row = CDC__V1__ROW__INIT;
	new_row.columns = after;
	new_row.n_columns = n;
	old_row.columns = before;
	old_row.n_columns = n;
	key_row.columns = key;
	key_row.n_columns = nkey;
	Cdc__V1__Event e = CDC__V1__EVENT__INIT;
	Cdc__V1__LogicalMessage msg = CDC__V1__LOGICAL_MESSAGE__INIT;
	msg.prefix = "p\xc3\xa9";
	msg.content.data = (uint8_t *)data;
	msg.content.len = size;
	e.op = op == DBZ_READ ? CDC__V1__OP__OP_READ : CDC__V1__OP__OP_INSERT;
	e.schema = "public";
	e.table = "t-1";
	e.lsn = 24023120;
	e.xid = take(&in) % 2 ? 555 : 0;
	e.origin = take(&in) % 2 ? "origin" : "";
	e.key = &key_row;
	e.message = &msg;
	dbz_options o = {.server_name = "srv",
			 .database = "postgres",
			 .topic = "srv.public.t-1",
			 .placeholder = true,
			 .transaction = take(&in) % 2};
	dbz_fill f = {.commit_lsn = 24023128,
		      .commit_time = (int64_t)take(&in) << 40,
		      .now = INT64_C(1559033904961654),
		      .xid = e.xid,
		      .total_order = take(&in),
		      .collection_order = 1};
	char err[256];
	buf body = {0}, rec = {0}, json = {0};

	const dbz_schema *ks =
	    sink_debezium_table_schema(&sc, "srv", "public", "t-1", o.topic, cols, n, true);
	kafka_avro_schema(&json, ks);
	if (kafka_avro_key(&body, &s, cols, n, key, nkey, err, sizeof(err))) {
		kafka_avro_header(&rec, 7);
		buf_append(&rec, body.data, body.len);
		check(json.data, json.len, &rec);
	} else {
		check(json.data, json.len, NULL);
	}

	buf_reset(&json);
	buf_reset(&body);
	buf_reset(&rec);
	const dbz_schema *vs = op == DBZ_MESSAGE ? &dbz_message_value_schema
						 : sink_debezium_table_schema(&sc, "srv", "public", "t-1",
									      o.topic, cols, n, false);
	kafka_avro_schema(&json, vs);
	const Cdc__V1__Row *b = op == DBZ_UPDATE || op == DBZ_DELETE ? &old_row : NULL;
	const Cdc__V1__Row *af = op == DBZ_DELETE || op == DBZ_TRUNCATE ? NULL : &new_row;
	if (kafka_avro_value(&body, &s, &o, cols, n, &e, op, b, af, err, sizeof(err))) {
		kafka_avro_complete(&rec, 7, body.data, body.len, &f);
		check(json.data, json.len, &rec);
	} else {
		check(json.data, json.len, NULL);
	}

	/* the fixed records */
	buf_reset(&json);
	buf_reset(&rec);
	kafka_avro_schema(&json, &dbz_txn_value_schema);
	dbz_count tables[2] = {{"public", "t", 3}, {"s\xc3\xa9", "u", 1}};
	kafka_avro_header(&rec, 1);
	kafka_avro_txn_value(&rec, f.total_order % 2, e.xid, f.commit_lsn, f.commit_time, 4, tables,
			     f.total_order % 3);
	check(json.data, json.len, &rec);
	buf_reset(&json);
	buf_reset(&rec);
	kafka_avro_schema(&json, &dbz_txn_key_schema);
	kafka_avro_header(&rec, 1);
	kafka_avro_txn_key(&rec, e.xid, f.commit_lsn);
	check(json.data, json.len, &rec);
	buf_reset(&json);
	buf_reset(&rec);
	kafka_avro_schema(&json, &dbz_message_key_schema);
	kafka_avro_header(&rec, 1);
	kafka_avro_message_key(&rec, msg.prefix);
	check(json.data, json.len, &rec);

	buf_free(&json);
	buf_free(&body);
	buf_free(&rec);
	arena_reset(a);
	return 0;
}
