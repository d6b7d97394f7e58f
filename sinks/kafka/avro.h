/* Debezium's records as Debezium writes them through Confluent's AvroConverter (`format: avro`). The
 * functions are pure, with schemas and events in and bytes out. What is known only at the commit is
 * filled in by kafka_avro_complete(), as sink_debezium_complete() does for JSON. */
#ifndef CDC_AVRO_H
#define CDC_AVRO_H

#include "sinks/debezium.h"

/* Each Kafka Connect schema is written as AvroConverter registers it. Each record is in the Confluent
 * wire format: a zero byte, the schema's id in the registry as 4 bytes big-endian, the Avro binary. */

/* The wire format's header, the magic byte and the schema id. */
#define DBZ_AVRO_HEADER 5

/* schema as Avro schema JSON, as Confluent's AvroData writes a Connect schema (connect.meta.data on).
 * Connect's names are split into namespace and name and made valid Avro names. Named types are
 * written once and named after. */
void kafka_avro_schema(buf *out, const dbz_schema *schema);
/* A Connect name as a valid Avro full name (Debezium's schema.name.adjustment.mode=avro). A byte
 * outside [A-Za-z0-9_] (or a digit opening a part) becomes '_'. A character outside ASCII becomes one
 * '_' per UTF-16 unit, as Java counts it. */
void kafka_avro_fullname(buf *out, const char *name);

/* A key record, the key columns of cols[0..count) (the table's schema), valued from vals[0..nvals) by
 * name. False with err when a column has no value, since Avro's record needs every field. */
bool kafka_avro_key(buf *out, dbz_scratch *scratch, const dbz_column *cols, size_t count,
		    Cdc__V1__Column *const *vals, size_t nvals, char *err, size_t errlen);
/* An envelope (or, for op DBZ_MESSAGE, Debezium's MessageValue) of table shape cols[0..count), without
 * the fields kafka_avro_complete() fills. An unchanged TOASTed value is the old row's, else Debezium's
 * placeholder. False with err when a required field has no value. */
bool kafka_avro_value(buf *out, dbz_scratch *scratch, const dbz_options *opts, const dbz_column *cols,
		      size_t count, const Cdc__V1__Event *event, char op, const Cdc__V1__Row *before,
		      const Cdc__V1__Row *after, char *err, size_t errlen);
/* Appends the record kafka_avro_value() rendered (len bytes) in the wire format with schema id, its
 * commit fields filled from fill. */
void kafka_avro_complete(buf *out, uint32_t id, const char *rendered, size_t len, const dbz_fill *fill);
/* The wire format's header before a record of schema id. */
void kafka_avro_header(buf *out, uint32_t id);

/* The transaction metadata records (sink_debezium_txn_key and sink_debezium_txn_value in Avro), without the
 * header. */
void kafka_avro_txn_key(buf *out, uint32_t xid, uint64_t commit_lsn);
void kafka_avro_txn_value(buf *out, bool end, uint32_t xid, uint64_t commit_lsn, int64_t time_us,
			  uint64_t events, const dbz_count *tables, size_t ntables);
/* A logical message's key ({prefix}), without the header. */
void kafka_avro_message_key(buf *out, const char *prefix);

#endif
