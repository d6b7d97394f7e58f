/* The contract's event JSON (one object per line), used by the stdout sink and cdc tail. */
#ifndef CDC_EVENT_JSON_H
#define CDC_EVENT_JSON_H

#include "cdc/v1/event.pb-c.h"
#include "cdc/v1/subscriber.pb-c.h"
#include "decoder/base/json.h"

/* Appends the event as one JSON object and a newline. The commit fields (commit_lsn, tx_index,
 * commit_time) come last, so that sink_json_event_head() can render an event before its transaction
 * commits and sink_json_event_tail() complete it cheaply once it has. */
void sink_json_event(buf *out, const Cdc__V1__Event *event);

/* What a sink's renderer keeps from one event to the next: names (of the schema, the table and the
 * columns), the schema id, the LSN and the xid as JSON, and the date of the last timestamp. Escaping a name
 * costs more than finding it here: a backfill's row has seven. Starts zeroed; holds no memory of its own.
 *
 * A name is known by its address and the event's schema_id. That holds for the events the pipeline builds,
 * whose names are their relation's own (decoder/event.h), and the schema id covers every name. It does not
 * hold for events from elsewhere (cdc tail's, unpacked from the wire), which are rendered without one. */
#define JSON_NAME_SETS 16
#define JSON_NAME_WAYS 4
typedef struct json_name {
	uint64_t schema_id;
	const char *name;
	uint32_t len;
	char text[44]; /* quoted; a longer name is not kept */
} json_name;
typedef struct json_cache {
	json_name names[JSON_NAME_SETS][JSON_NAME_WAYS];
	uint32_t evict;		 /* the way a miss takes when every way of its set has its schema id */
	uint64_t schema_id;	 /* the id in schema_id_text */
	char schema_id_text[18]; /* "0123456789abcdef" */
	/* put_head_cached()'s: the head of the last event without offset and tag, for its schema id, op and
	 * subscription (head_len 0: none) */
	char head[192];
	uint32_t head_len;
	Cdc__V1__Op head_op;
	uint64_t head_schema_id;
	char head_subscription[64];
	/* ,"lsn":"...","xid":N of the last event (lsn_len 0: none): every read of a backfill's chunk has its
	 * LSN */
	uint64_t lsn, xid;
	uint32_t lsn_len;
	char lsn_text[56];
	/* the date of the last timestamp (day_len 0: none) */
	int64_t day;
	uint32_t day_len;
	char day_text[24]; /* YYYY-MM-DD, or an expanded year's longer form */
} json_cache;

/* Everything but the commit fields and the closing brace. cache is NULL for an event that does not borrow its
 * relation's names. */
void sink_json_event_head(buf *out, json_cache *cache, const Cdc__V1__Event *event);
/* A transaction's commit fields as JSON, rendered once for all its events by sink_json_event_tail(). */
typedef struct json_commit {
	uint64_t lsn;
	int64_t time;
	bool valid;
	buf lsn_part;  /* ,"commit_lsn":"...","tx_index": */
	buf time_part; /* ,"commit_time":"..."}\n */
} json_commit;
void sink_json_commit_free(json_commit *commit);
/* Completes sink_json_event_head()'s output with commit_lsn, tx_index, commit_time and "}\n". commit keeps
 * the commit's fields rendered while they stay the same. */
void sink_json_event_tail(buf *out, json_commit *commit, uint64_t commit_lsn, uint32_t tx_index,
			  int64_t commit_time);
/* A dead letter's history, between sink_json_event_head() and sink_json_event_tail(). Its shape is
 * ,"dead_letter":{"original_offset":N,"deliveries":N,"reason":"...","dead_time":"RFC 3339"}. Each member is
 * null when unknown, as in a dead letter from before cdc kept its history. */
void sink_json_dead_letter(buf *out, const Cdc__V1__DeadLetter *DeadLetter);

/* A row as the event's "key", "new" and "old" have it, {"name":value,...} (null for NULL). It leaves out
 * unchanged TOAST columns (the event lists those in "unchanged_toast"). */
void sink_json_row(buf *out, const Cdc__V1__Row *row);

/* A timestamp of microseconds since the epoch as its RFC 3339 string. It ends in "Z" when with_zone. It has
 * the microseconds when they are not zero, or always with always_frac. PostgreSQL's infinities are "infinity"
 * and "-infinity". */
void sink_json_timestamp(buf *out, int64_t us, bool with_zone, bool always_frac);

/* A uuid's 16 bytes as its canonical string ("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"). Other lengths (which
 * cannot come from the server) are written as base64. */
void sink_json_uuid(buf *out, const ProtobufCBinaryData *uuid);

/* "YYYY-MM-DD" of a day count since 1970-01-01, without quotes. Years are ISO 8601 astronomical years, as
 * Java's ISO formats print them too. So 1 BC is 0000 and 44 BC is -0043. Years past 9999 take the expanded
 * form's sign (+10000), as RFC 3339's four digits cannot hold them. */
void sink_json_ymd(buf *out, int64_t days);

#endif
