/* fuzz_debezium.c: libFuzzer harness for the Debezium renderer's readers of PostgreSQL's text
 * (timetz, interval, bit, money, point, arrays, decimals) and its writers: the first byte picks a
 * column type, the second a type modifier, the rest is the column's text as the server would send
 * it, converted by the decoder. The record, with and without schemas and with its marks filled,
 * must be one valid JSON object whatever the text. */
#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/arena.h"
#include "decoder/event.h"
#include "decoder/pgtypes.h"
#include "sinks/debezium.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint32_t types[] = {PGT_NUMERIC,
				 PGT_TIMETZ,
				 PGT_INTERVAL,
				 PGT_BIT,
				 PGT_VARBIT,
				 PGT_MONEY,
				 PGT_POINT,
				 PGT_FLOAT4,
				 PGT_FLOAT8,
				 PGT_TIMESTAMPTZ,
				 PGT_TIMESTAMP,
				 PGT_TIME,
				 PGT_DATE,
				 PGT_TEXT,
				 1007 /* _int4 */,
				 1009 /* _text */,
				 1231 /* _numeric */,
				 1185 /* _timestamptz */,
				 1561 /* _bit */,
				 1270 /* _timetz */,
				 1001 /* _bytea */,
				 PGT_BYTEA,
				 PGT_JSONB,
				 PGT_UUID};
static const int32_t mods[] = {
    -1, 0, 3, 6, 1, 24, (10 << 16 | 2) + 4, (5 << 16 | (-2 & 0x7ff)) + 4, (1000 << 16 | 1000) + 4};

static void check_json(const buf *b)
{
	json_tokener *tok = json_tokener_new();
	json_object *o = json_tokener_parse_ex(tok, b->data, (int)b->len);
	bool ok = json_tokener_get_error(tok) == json_tokener_success &&
		  json_object_is_type(o, json_type_object) && json_tokener_get_parse_end(tok) == b->len;
	json_object_put(o);
	json_tokener_free(tok);
	if (!ok || memchr(b->data, '\x01', b->len))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static arena *a;
	static dbz_scratch s;
	if (size < 2)
		return 0;
	if (!a)
		a = arena_new(64 * 1024);
	uint32_t oid = types[data[0] % (sizeof(types) / sizeof(types[0]))];
	int32_t mod = mods[data[1] % (sizeof(mods) / sizeof(mods[0]))];
	pgo_datum d = {.kind = PGO_TEXT, .len = (uint32_t)(size - 2), .data = (const char *)data + 2};

	Cdc__V1__Column c = CDC__V1__COLUMN__INIT, *cols[] = {&c};
	c.name = "c";
	c.type_oid = oid;
	if (mod >= 0) {
		c.type_modifier_present_case = CDC__V1__COLUMN__TYPE_MODIFIER_PRESENT_TYPE_MODIFIER;
		c.type_modifier = mod;
	}
	c.value = pgo_event_value(a, NULL, oid, &d);
	Cdc__V1__Row row = CDC__V1__ROW__INIT;
	row.n_columns = 1;
	row.columns = cols;
	Cdc__V1__Event e = CDC__V1__EVENT__INIT;
	e.op = CDC__V1__OP__OP_INSERT;
	e.schema = "s";
	e.table = "t";
	e.origin = "";
	e.key = &row;
	e.new_row = &row;
	dbz_fill fill = {
	    .commit_lsn = 1, .commit_time = 1, .now = 2, .xid = 3, .total_order = 1, .collection_order = 1};
	for (int schemas = 0; schemas < 2; schemas++) {
		dbz_options o = {.server_name = "srv",
				 .database = "db",
				 .topic = "srv.s.t",
				 .schemas = schemas,
				 .placeholder = true,
				 .transaction = true};
		buf tmpl = {0}, out = {0}, key = {0};
		sink_debezium_value(&tmpl, &s, &o, &e, DBZ_CREATE, NULL, &row);
		sink_debezium_complete(&out, tmpl.data, tmpl.len, &fill);
		check_json(&out);
		sink_debezium_key(&key, &s, &o, &e, cols, 1);
		check_json(&key);
		buf_free(&tmpl);
		buf_free(&out);
		buf_free(&key);
	}
	arena_reset(a);
	return 0;
}
