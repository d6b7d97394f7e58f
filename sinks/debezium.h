/* Debezium's records, as its PostgreSQL connector writes them through Kafka Connect's JsonConverter. Kafka's
 * `format: debezium` and `avro` write them, and so does NATS's `format: debezium`. */
#ifndef CDC_DEBEZIUM_H
#define CDC_DEBEZIUM_H

#include <stdbool.h>
#include <stdint.h>

#include "cdc/v1/event.pb-c.h"
#include "decoder/base/util.h"

/* ---- a subscription's settings, the same keys on every sink that writes these records ---- */

/* What an unchanged TOASTed value becomes. That is Debezium's placeholder, or nothing (left out). */
typedef enum dbz_toast { DBZ_TOAST_PLACEHOLDER, DBZ_TOAST_OMIT } dbz_toast;
extern const char *const dbz_toast_names[]; /* NULL-terminated */
typedef struct dbz_sub_conf {
	bool schemas;	      /* {schema, payload} records */
	char *server_name;    /* source.name and the schemas' names, default "cdc" */
	int unchanged_toast;  /* a dbz_toast, default placeholder */
	bool context_headers; /* default on */
} dbz_sub_conf;
/* Checks a server name against what Debezium allows in topic.prefix. NULL if fine. */
const char *sink_debezium_server_name_problem(const char *value, char *why, size_t whylen);
/* The rows of a sink module's subscription keys (sinks/module.h) that fill the dbz_sub_conf
 * member of the module's struct type. */
/* clang-format off */
#define DBZ_SUB_KEYS(type, member)                                                                           \
	{"schemas", SINK_KEY_BOOL, offsetof(type, member.schemas),                                           \
	 .doc = "`format: debezium` only: records as `{\"schema\": ..., \"payload\": ...}`, as "             \
		"JsonConverter writes them with `schemas.enable=true`."},                                    \
	{"server_name", SINK_KEY_STRING, offsetof(type, member.server_name), .def_text = "cdc",              \
	 .check = sink_debezium_server_name_problem, .noun = "name", .value_type = "server name",                     \
	 .value_doc = "Debezium's `topic.prefix`: `[a-zA-Z0-9._-]`, 1 to 249 characters",                   \
	 .doc = "Debezium's records (`format: debezium`, and Kafka's `avro`): Debezium's `topic.prefix` "    \
		"(the logical server name). It is `source.name` and the prefix of the key's and rows' "     \
		"schema names. The default matches the default templates' `cdc.`."},                        \
	{"unchanged_toast", SINK_KEY_ENUM, offsetof(type, member.unchanged_toast), dbz_toast_names,         \
	 .def_number = DBZ_TOAST_PLACEHOLDER,                                                               \
	 .doc = "Debezium's records: a TOASTed value an update left unchanged (the server does not "        \
		"send it). `placeholder`: Debezium's `__debezium_unavailable_value` (its bytes, or lists "  \
		"of it, by type). `omit` (not with Kafka's `avro`): the column is left out of the row."},   \
	{"context_headers", SINK_KEY_BOOL, offsetof(type, member.context_headers), .def_number = 1,         \
	 .doc = "Debezium's records: Debezium's `__debezium.context.*` headers on each data change "        \
		"record (Debezium's `extended.headers.enabled`). See "                                      \
		"[kafka-formats.md](kafka-formats.md#headers)."}
/* clang-format on */

/* Debezium's envelope op codes. */
#define DBZ_CREATE 'c'
#define DBZ_UPDATE 'u'
#define DBZ_DELETE 'd'
#define DBZ_READ 'r'
#define DBZ_TRUNCATE 't'
#define DBZ_MESSAGE 'm'

/* Debezium's unavailable.value.placeholder, what an unchanged TOASTed value becomes. */
#define DBZ_PLACEHOLDER "__debezium_unavailable_value"

typedef struct dbz_options {
	const char *server_name; /* source.name and the key's and rows' schema names (topic.prefix) */
	const char *database;	 /* source.db */
	const char *topic;	 /* the record's topic, after which the envelope schema is named */
	bool schemas;		 /* {"schema":...,"payload":...}, as JsonConverter with schemas.enable */
	bool placeholder;	 /* unchanged TOAST as DBZ_PLACEHOLDER, else the column is left out */
	bool transaction;	 /* the envelope's transaction block is filled in (else null) */
} dbz_options;

/* Debezium's types. A dbz_type is a column's Kafka Connect schema in Debezium's default modes (the type table
 * of docs/kafka-formats.md). a and b are a Decimal's scale and precision, Bits' length, or a ZonedTimestamp's
 * fractional digits. An array's element is (elem, mod). */
typedef enum dbz_kind {
	DK_BOOLEAN,
	DK_INT16,
	DK_INT32,
	DK_INT64,
	DK_FLOAT,
	DK_DOUBLE,
	DK_STRING,
	DK_BYTES,
	DK_DECIMAL,
	DK_VARIABLE_DECIMAL,
	DK_MONEY,
	DK_UUID,
	DK_JSON,
	DK_XML,
	DK_DATE,
	DK_TIME,
	DK_MICRO_TIME,
	DK_TIMESTAMP,
	DK_MICRO_TIMESTAMP,
	DK_ZONED_TIMESTAMP,
	DK_ZONED_TIME,
	DK_DURATION,
	DK_BIT,
	DK_BITS,
	DK_POINT,
	DK_TSVECTOR,
	DK_ARRAY,
} dbz_kind;
typedef struct dbz_type {
	dbz_kind k;
	int a, b;
	uint32_t elem;
	int32_t mod;
} dbz_type;
dbz_type sink_debezium_type_of(uint32_t oid, int32_t typmod);

/* A Kafka Connect schema, as data. debezium.c writes it as JsonConverter does (sink_debezium_schema_json).
 * avro.c writes it as Confluent's AvroConverter registers it. */
typedef struct dbz_schema dbz_schema;
typedef struct dbz_field {
	const char *name;
	const dbz_schema *schema;
} dbz_field;
struct dbz_schema {
	const char *type; /* Connect's type, e.g. "int32", "string", "struct", "array" */
	bool optional;
	const char *name; /* the semantic type's or the struct's (NULL if none) */
	int version;	  /* 0 if none */
	const char *doc;
	const char *parameters;	 /* a JSON object's members, all strings ("\"scale\":\"2\""), NULL if none */
	const char *def;	 /* the default, as JSON text, NULL if none */
	int scale, precision;	 /* a Decimal's (precision 0 when not given) */
	const dbz_field *fields; /* a struct's */
	size_t nfields;
	const dbz_schema *items; /* an array's */
};
/* The schemas of Debezium's fixed records. They are the transaction metadata's key and value, and a
 * logical message's key and value. */
extern const dbz_schema dbz_txn_key_schema, dbz_txn_value_schema, dbz_message_key_schema,
    dbz_message_value_schema;
/* A column as a schema knows it. */
typedef struct dbz_column {
	const char *name;
	uint32_t type_oid;
	int32_t typmod; /* -1 for none */
	bool key;
} dbz_column;
/* Where a built schema lives. It is reused, and nothing is allocated once it has grown. */
typedef struct dbz_schemas {
	buf names;	   /* the schemas' names and parameters, NUL-terminated */
	dbz_schema *nodes; /* a row's struct, its columns' schemas, their arrays' items */
	dbz_field *fields; /* the row's fields, then the envelope's */
	size_t cap;
} dbz_schemas;
void sink_debezium_schemas_free(dbz_schemas *sc);
/* The schema of a table's key or of its envelope, in sc until its next use.
 * - With key true, the schema of the key columns, "<server>.<schema>.<table>.Key".
 * - Else the envelope's, "<topic>.Envelope", with before and after "<server>.<schema>.<table>.Value".
 *   cols[0..count) are the columns. The key columns are required, the others optional. */
const dbz_schema *sink_debezium_table_schema(dbz_schemas *sc, const char *server, const char *schema,
					     const char *table, const char *topic, const dbz_column *cols,
					     size_t count, bool key);
/* Writes schema as JsonConverter does, e.g. {"type":...,"optional":...}. It has "field" when field is not
 * NULL (a struct's field). */
void sink_debezium_schema_json(buf *out, const dbz_schema *schema, const char *field);

/* Memory the renderer reuses. Nothing is allocated per row once it has grown. */
typedef struct dbz_scratch {
	uint32_t *limbs; /* a decimal's unscaled value, in base 2^32 */
	size_t cap;
	buf digits, bytes, text;
	uint8_t wkb[21];     /* a point's */
	buf elems, spans;    /* an array's elements, their text and where each is */
	struct arena *arena; /* their values, until the next array */
	dbz_schemas schemas; /* a record's, with schemas */
	dbz_column *cols;    /* its columns, for them */
	size_t capcols;
	Cdc__V1__Column **key_after; /* for sink_debezium_records(), the key's columns after an update */
	size_t capkey;
	buf new_key, old_key; /* for sink_debezium_records(), the keys' payloads, to compare and name */
} dbz_scratch;
void sink_debezium_scratch_free(dbz_scratch *scratch);

/* A value as Debezium holds it, in Kafka Connect's terms. It is what the JSON and the Avro writers write.
 * Text and bytes point into the scratch (or the event) until the next conversion. */
typedef enum dbz_datum_kind {
	DD_NULL,
	DD_BOOL,     /* i */
	DD_INT,	     /* i, an int16, int32 or int64 */
	DD_REAL,     /* x, a float when single */
	DD_STRING,   /* p, len */
	DD_BYTES,    /* p, len */
	DD_VDECIMAL, /* VariableScaleDecimal, i the scale, p and len the unscaled value */
	DD_POINT,    /* x, y, and p and len the WKB */
	DD_ARRAY,    /* n elements, read with sink_debezium_element() */
} dbz_datum_kind;
typedef struct dbz_datum {
	dbz_datum_kind kind;
	bool single;
	int64_t i;
	double x, y;
	const char *p;
	size_t len, n;
	int source;	  /* for DD_ARRAY, where its elements are */
	dbz_type element; /* for DD_ARRAY, their type, and its OID */
	uint32_t oid;
} dbz_datum;
/* A column's value val (NULL for null) of type type. A value that does not convert (NaN in a Decimal, text
 * that does not read) is DD_NULL. */
void sink_debezium_convert(dbz_scratch *scratch, dbz_type type, const Cdc__V1__Value *val, dbz_datum *out);
/* What Debezium writes for an unchanged TOASTed value of type type. */
void sink_debezium_placeholder(dbz_type type, dbz_datum *out);
/* Element index of an array, converted (the previous element's text and bytes are gone). */
void sink_debezium_element(dbz_scratch *scratch, const dbz_datum *array, size_t index, dbz_datum *out);
/* An unchanged TOASTed column (its value is not in the row). */
bool sink_debezium_unchanged(const Cdc__V1__Column *column);

/* A tombstone, a record with a null value (a dbz_record's op). */
#define DBZ_TOMBSTONE '\0'
/* The most records one event becomes. Those are a key change's delete, its tombstone and the create. */
#define DBZ_RECORDS_MAX 3

/* One of the records Debezium writes for an event. */
typedef struct dbz_record {
	char op;			    /* DBZ_*, or DBZ_TOMBSTONE */
	const Cdc__V1__Row *before, *after; /* its value's rows (NULL for null) */
	bool has_key;			    /* false for a null key */
	Cdc__V1__Column *const *key; /* the key's columns (a message has none, see sink_debezium_key) */
	size_t nkey;
	/* A key change names the other key in a header. That is "__debezium.newkey" on the delete and its
	 * tombstone, and "__debezium.oldkey" on the create. NULL if there is no such header. */
	const char *key_header;
	const buf *key_header_value; /* the other key's payload, as JSON */
} dbz_record;

/* The records of an event, in order. Returns how many. An update that changed the key is a
 * delete under the old key and a create under the new one. With tombstones, a tombstone follows
 * each delete. The records point into the event and the scratch until the next call. */
size_t sink_debezium_records(dbz_scratch *scratch, const Cdc__V1__Event *event, bool tombstones,
			     dbz_record out[DBZ_RECORDS_MAX]);

/* A header of a record. */
typedef struct dbz_header {
	const char *name, *value;
} dbz_header;
/* How many of Debezium's context headers a record has at most. */
#define DBZ_CONTEXT_HEADERS 4
/* The context headers of a record of event (Debezium's extended.headers.enabled, 3.3 and later).
 * Data change records and their tombstones have them. Logical messages have none. Returns how
 * many. */
size_t sink_debezium_context_headers(const Cdc__V1__Event *event, const char *server_name,
				     dbz_header out[DBZ_CONTEXT_HEADERS]);
/* Debezium's runId, a random (version 4) UUID made once for the life of the process. Debezium makes one each
 * time its task starts. */
const char *sink_debezium_run_id(void);

/* The key of a row, columns cols[0..count) as an object ({"id":1}). For a logical message (event->op
 * OP_MESSAGE) it is {"prefix":...}. */
void sink_debezium_key(buf *out, dbz_scratch *scratch, const dbz_options *opts, const Cdc__V1__Event *event,
		       Cdc__V1__Column *const *cols, size_t count);

/* The value of event as Debezium's op (DBZ_*) with rows before and after (NULL for null). Marks are left for
 * sink_debezium_complete(). A logical message's value is Debezium's MessageValue. */
void sink_debezium_value(buf *out, dbz_scratch *scratch, const dbz_options *opts, const Cdc__V1__Event *event,
			 char op, const Cdc__V1__Row *before, const Cdc__V1__Row *after);

/* What fills a value's marks. */
typedef struct dbz_fill {
	uint64_t commit_lsn;
	int64_t commit_time; /* µs since the epoch. 0 for a non-transactional message, which takes now. */
	int64_t now;	     /* µs since the epoch, for the envelope's ts_ms, ts_us and ts_ns */
	uint32_t xid;	     /* 0 for no transaction block (a non-transactional message, a read) */
	uint64_t total_order, collection_order; /* 1-based, of the record in its transaction */
} dbz_fill;
/* Appends a value sink_debezium_value() rendered (len bytes) with its marks filled. */
void sink_debezium_complete(buf *out, const char *rendered, size_t len, const dbz_fill *fill);

/* A transaction's records on the transactions topic. They are the key ({"id":"XID:LSN"}) and the BEGIN or END
 * value (with the events per table). */
typedef struct dbz_count {
	char *schema, *table;
	uint64_t events;
} dbz_count;
void sink_debezium_txn_key(buf *out, bool schemas, uint32_t xid, uint64_t commit_lsn);
void sink_debezium_txn_value(buf *out, bool schemas, bool end, uint32_t xid, uint64_t commit_lsn,
			     int64_t time_us, uint64_t events, const dbz_count *tables, size_t ntables);

#endif
