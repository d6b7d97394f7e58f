/* event.h: builds cdc.v1.Event messages from decoded changes, converting each column from
 * PostgreSQL's text form to a typed value (see proto/cdc/v1/event.proto).
 * Everything is allocated in the caller's arena; nothing here outlives arena_reset(). An event
 * borrows its relation's names (schema, table, columns), so the relation must outlive it. */
#ifndef CDC_EVENT_H
#define CDC_EVENT_H

#include "cdc/v1/event.pb-c.h"
#include "decoder/base/arena.h"
#include "decoder/pgoutput.h"

/* An event of op in the arena, with rel's schema, table and relation_id (rel may be NULL). */
Cdc__V1__Event *pgo_event_alloc(arena *ar, Cdc__V1__Op op, const pgo_rel *rel);

/* Builds the event of a PGO_INSERT, PGO_UPDATE or PGO_DELETE message for relation rel: schema,
 * table, relation_id, op, key, new_row, old_row.
 * key holds the replica identity columns (flags & 1) as they identified the row *before* the
 * change, so a consumer can find the row it already has: from the new row for insert; for update
 * from the old tuple when the server sent one ('K' when the key changed, 'O' with REPLICA IDENTITY
 * FULL), else from the new row (the key did not change); from the old tuple for delete. A key
 * column that is unchanged TOAST in the old tuple is taken from the new row. key is unset when
 * the relation has no identity columns. Its Column structs are shared with new_row/old_row.
 * old_row: with 'K' only the key columns (the server sends the others as NULLs that are not
 * values); with 'O' the whole old row; unset when the server sent no old tuple.
 * Transaction fields (lsn, commit_lsn, xid, tx_index, commit_time, origin) and subscription
 * fields are left for the caller. Fails if the tuple's column count does not match rel. */
bool pgo_event_from_change(arena *ar, const pgo_relcache *rc, const pgo_rel *rel, const pgo_msg *msg,
			   Cdc__V1__Event **out, char *err, size_t errlen) CDC_MUST_CHECK;

/* One event for one relation of a PGO_TRUNCATE message. */
Cdc__V1__Event *pgo_event_from_truncate(arena *ar, const pgo_rel *rel, uint8_t flags);

/* An operation's name as events spell it in JSON and Kafka headers ("insert", "read"...); NULL for
 * a value the schema does not have. */
const char *pgo_event_op_name(Cdc__V1__Op op);

/* The key columns of an event as its new row has them, into cols (room for the key's columns).
 * An update may change the key. A key column the new row lacks, or holds as unchanged TOAST, keeps
 * its old value. Returns cols. */
Cdc__V1__Column **pgo_event_new_key(const Cdc__V1__Event *event, Cdc__V1__Column **cols);

/* The event of a PGO_MESSAGE message (schema and table empty, lsn the message's own). */
Cdc__V1__Event *pgo_event_from_message(arena *ar, const pgo_msg *msg);

/* Converts one column sent by the server into a typed value. */
Cdc__V1__Value *pgo_event_value(arena *ar, const pgo_relcache *rc, uint32_t type_oid, const pgo_datum *datum);
/* The kind pgo_event_value gives a column of type type_oid whose text parses (other_value for the types it
 * has no kind of its own for, and for text that does not parse as its type). */
Cdc__V1__Value__KindCase pgo_event_type_kind(uint32_t type_oid);

#endif
