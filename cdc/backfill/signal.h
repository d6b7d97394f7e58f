/* A backfill asked for from SQL. */
#ifndef CDC_BACKFILL_SIGNAL_H
#define CDC_BACKFILL_SIGNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "decoder/base/util.h"

/* A row inserted into source.signal_table, in the shape of Debezium's signals (id, type, data), is read
 * from the WAL. Its id, type and data (a JSON object) are parsed and checked here. They are untrusted
 * bytes, written by anyone who may insert into the table. So every length is checked before it is
 * used, and a refusal says what is wrong. */

#define BF_SIGNAL_MAX_ID 128	   /* bytes of a signal's id */
#define BF_SIGNAL_MAX_DATA 65536   /* bytes of its data */
#define BF_SIGNAL_MAX_TABLES 1024  /* tables one signal names */
#define BF_SIGNAL_MAX_SUBS 256	   /* subscriptions one signal names */
#define BF_SIGNAL_MAX_SUB_NAME 128 /* bytes of a subscription's name in it */

typedef enum bf_signal_kind {
	BF_SIGNAL_EXECUTE, /* execute-snapshot, which backfills the tables */
	BF_SIGNAL_STOP,	   /* stop-snapshot, which cancels what signals started */
} bf_signal_kind;

/* One table of a signal and its condition. */
typedef struct bf_signal_table {
	char *name;  /* "schema.table" as the signal wrote it, one table (match_table_name_problem) */
	char *where; /* its additional condition, in cdc's where language, NULL if none */
} bf_signal_table;

typedef struct bf_signal {
	char *id;
	bf_signal_kind kind;
	bf_signal_table *tables; /* at least one for execute. For stop, none stops every one. */
	size_t ntables;
	char **subscriptions; /* cdc's own key, only these. With none, each subscription that has a table. */
	size_t nsubscriptions;
} bf_signal;

/* The columns of one signal row as text. data may be NULL for SQL NULL, and so may id and type. False
 * with a message in err ("data: data-collections[1]: ..."), and out is then empty. The shapes read are
 * these.
 *   execute-snapshot  {"data-collections": ["s.t", ...], "type": "incremental",
 *                      "additional-conditions": [{"data-collection": "s.t", "filter": "..."}],
 *                      "subscriptions": ["name", ...]}
 *   stop-snapshot     {"data-collections": [...], "type": "incremental", "subscriptions": [...]}
 * "additional-condition" (one string for every table, Debezium 2.0 and 2.1) is read too. A filter is
 * cdc's where language (new.color = 'blue'). SQL is never passed to the database. */
bool backfill_signal_parse(const char *id, size_t id_len, const char *type, size_t type_len, const char *data,
			   size_t data_len, bf_signal *out, char *err, size_t errlen) CDC_MUST_CHECK;
void backfill_signal_free(bf_signal *signal);
/* The type's name as a signal writes it. */
const char *backfill_signal_type(bf_signal_kind kind);
/* The signal's data as JSON, the form backfill_signal_parse reads. */
void backfill_signal_json(const bf_signal *signal, buf *out);

#endif
