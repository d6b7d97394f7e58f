/* debezium.h: Kafka records as Debezium's PostgreSQL connector writes them through Kafka Connect's
 * JsonConverter (`format: debezium`): keys, envelope values and transaction metadata records, with
 * or without their schemas. Pure: an event in, bytes out. What is known only once the event's
 * transaction commits (source.ts_ms, the sequence, the transaction block) and the time a record is
 * produced are left as marks in a rendered value, which dbz_complete() fills. */
#ifndef CDC_DEBEZIUM_H
#define CDC_DEBEZIUM_H

#include <stdbool.h>
#include <stdint.h>

#include "cdc/v1/event.pb-c.h"
#include "decoder/base/util.h"

/* Debezium's envelope op codes. */
#define DBZ_CREATE 'c'
#define DBZ_UPDATE 'u'
#define DBZ_DELETE 'd'
#define DBZ_READ 'r'
#define DBZ_TRUNCATE 't'
#define DBZ_MESSAGE 'm'

/* Debezium's unavailable.value.placeholder: what an unchanged TOASTed value becomes. */
#define DBZ_PLACEHOLDER "__debezium_unavailable_value"

typedef struct dbz_options {
	const char *server_name; /* source.name and the key's and rows' schema names (topic.prefix) */
	const char *database;	 /* source.db */
	const char *topic;	 /* the record's topic: the envelope schema is named after it */
	bool schemas;		 /* {"schema":...,"payload":...}, as JsonConverter with schemas.enable */
	bool placeholder;	 /* unchanged TOAST as DBZ_PLACEHOLDER; else the column is left out */
	bool transaction;	 /* the envelope's transaction block is filled in (else null) */
} dbz_options;

/* Memory the renderer reuses: nothing is allocated per row once it has grown. */
typedef struct dbz_scratch {
	uint32_t *limbs; /* a decimal's unscaled value, in base 2^32 */
	size_t cap;
	buf digits, bytes;
	buf elems, spans;    /* an array's elements: their text, where each is */
	struct arena *arena; /* their values, until the next array */
} dbz_scratch;
void dbz_scratch_free(dbz_scratch *s);

/* The key of a row: columns cols[0..n) as an object ({"id":1}); for a logical message (e->op
 * OP_MESSAGE) {"prefix":...}. */
void dbz_key(buf *out, dbz_scratch *s, const dbz_options *o, const Cdc__V1__Event *e,
	     Cdc__V1__Column *const *cols, size_t n);

/* The value of e as Debezium's op (DBZ_*) with rows before and after (NULL: null), marks left for
 * dbz_complete(). A logical message's value is Debezium's MessageValue. */
void dbz_value(buf *out, dbz_scratch *s, const dbz_options *o, const Cdc__V1__Event *e, char op,
	       const Cdc__V1__Row *before, const Cdc__V1__Row *after);

/* What fills a value's marks. */
typedef struct dbz_fill {
	uint64_t commit_lsn;
	int64_t commit_time; /* µs since the epoch; 0 for a non-transactional message: now */
	int64_t now;	     /* µs since the epoch: the envelope's ts_ms, ts_us and ts_ns */
	uint32_t xid;	     /* 0: no transaction block (a non-transactional message, a read) */
	uint64_t total_order, collection_order; /* 1-based, of the record in its transaction */
} dbz_fill;
/* Appends a value dbz_value() rendered (len bytes) with its marks filled. */
void dbz_complete(buf *out, const char *rendered, size_t len, const dbz_fill *f);

/* A transaction's records on the transactions topic: the key ({"id":"XID:LSN"}) and the BEGIN or
 * END value (with the events per table). */
typedef struct dbz_count {
	char *schema, *table;
	uint64_t events;
} dbz_count;
void dbz_txn_key(buf *out, bool schemas, uint32_t xid, uint64_t commit_lsn);
void dbz_txn_value(buf *out, bool schemas, bool end, uint32_t xid, uint64_t commit_lsn, int64_t time_us,
		   uint64_t events, const dbz_count *tables, size_t ntables);

#endif
