/* backfill.h: snapshots and backfills while the stream keeps flowing. A backfill reads the tables
 * of one subscription by ranges of blocks known in advance (a partitioned table by its leaves'),
 * each range one COPY between a low and a high watermark written into the WAL (window.h has the
 * rule), several at once on the reader's lanes; what survives of a chunk is emitted at its high
 * watermark's place in the stream as reads into that subscription's sink only. Rows the stream
 * carried incomplete (unchanged TOAST) while a range could have missed them are read again by key.
 * This is the state machine of every backfill of the daemon: it says which statement each lane
 * should run next, takes the results, the watermarks and changes the stream delivers and the
 * position the sinks made durable, keeps progress figures, and persists itself so that a backfill
 * resumes after a crash from its durable chunks and a finished one never runs again. No libpq, no
 * clock: the caller passes the time. */
#ifndef CDC_BACKFILL_H
#define CDC_BACKFILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cdc/backfill/sql.h"
#include "cdc/backfill/window.h"
#include "decoder/base/util.h"

/* Ids and nonces: 16 lower-case hex digits. */
#define BF_ID_SIZE 17

/* The time, both clocks: monotonic for durations and due times, wall for what is shown. */
typedef struct bf_now {
	uint64_t ms;
	int64_t wall_ms;
} bf_now;

typedef enum bf_state { BF_QUEUED, BF_RUNNING, BF_DONE, BF_CANCELLED, BF_FAILED } bf_state;
const char *backfill_state_name(bf_state state);

typedef struct bf_settings {
	uint64_t chunk_ms;	     /* a chunk's COPY should take about this long */
	uint64_t min_rows, max_rows; /* bounds of a chunk's size */
	size_t max_bytes;	     /* a chunk's rows and the keys changed while it is open */
	uint64_t rate;		     /* rows read per second at most, 0: no limit */
	unsigned tables;	     /* tables read at once, over all backfills */
	unsigned parallel;	 /* the reader's lanes that read (connections); fixed when the set is made */
	const char *publication; /* the stream's: a backfill reads only its tables */
} bf_settings;

typedef struct bf_set bf_set;

/* path: the state file to load (backfill_set_load), NULL for none. seed: randomness
 * for ids and chunk nonces; a restarted daemon must use another, so the watermarks it replays
 * from before are foreign. The settings are copied. */
bf_set *backfill_set_new(const bf_settings *settings, const char *path, uint64_t seed);
void backfill_set_free(bf_set *set);
/* Reads the state file, if there is one; backfills that were running resume from their last
 * durable chunk. False with a message naming the file if it cannot be read or parsed. */
bool backfill_set_load(bf_set *set, char *err, size_t errlen) CDC_MUST_CHECK;
void backfill_set_settings(bf_set *set, const bf_settings *settings);

/* What a backfill reads: the publication's tables that sub_tables (the subscription's patterns,
 * "schema.table" with globs) match and, given any, one of tables (the request's); the rows that
 * satisfy sub_where (the subscription's `where`) and where (the request's), either NULL. The parts
 * of the `where`s that translate exactly go into the chunk query (backfill_sql_where); the daemon still
 * evaluates both on every read. */
typedef struct bf_request {
	const char *subscription;
	const char *const *sub_tables;
	size_t nsub_tables;
	const char *const *tables;
	size_t ntables;
	const char *sub_where, *where;
	bool snapshot; /* made by the subscription's `snapshot: true` (see backfill_has_snapshot) */
} bf_request;

/* Queues a backfill; id gets its id. False with a message for a `where` that does not parse.
 * Recorded with the next position (backfill_state). */
bool backfill_add(bf_set *set, const bf_request *req, bf_now now, char id[BF_ID_SIZE], char *err,
		  size_t errlen) CDC_MUST_CHECK;
/* Cancels backfill id of sub. False with a message when there is no such backfill or it has
 * finished already. */
bool backfill_cancel(bf_set *set, const char *sub, const char *id, bf_now now, char *err,
		     size_t errlen) CDC_MUST_CHECK;
/* The subscription is gone: its backfills stop and are forgotten, so one added again later under
 * the same name counts as new. */
void backfill_forget(bf_set *set, const char *sub);
/* Whether sub had its `snapshot: true` backfill already (whatever became of it). */
bool backfill_has_snapshot(const bf_set *set, const char *sub);

/* A backfill's checks, which run before its first table (each as a statement of the reader): the
 * role's privileges, the tables (each one the request names among the subscription's in the
 * publication, each a table the role may read) and the request's `where` against their columns
 * (match_predicate_check_columns). */
typedef enum bf_verdict {
	BF_CHECKING, /* not all done yet */
	BF_PASSED,   /* it runs (or ran) */
	BF_REFUSED,  /* *why says why: it failed before reading anything */
} bf_verdict;
bf_verdict backfill_verdict(const bf_set *set, const char *id, const char **why);
/* Forgets backfill id as if it had never been added (a refused request). */
void backfill_drop(bf_set *set, const char *id);

/* ---- the reader: statements on a connection of its own ---- */

typedef enum bf_stmt_kind {
	BF_STMT_CHECK,	  /* bfsql_privileges */
	BF_STMT_TABLES,	  /* bfsql_tables */
	BF_STMT_COLUMNS,  /* bfsql_columns, for a request's `where` */
	BF_STMT_DESCRIBE, /* bfsql_describe */
	BF_STMT_LEAVES,	  /* bfsql_leaves */
	BF_STMT_LOW,	  /* bfsql_watermark */
	BF_STMT_CHUNK,	  /* backfill_sql_copy: its snapshot and rows come through backfill_copy_* */
	BF_STMT_HIGH,	  /* bfsql_watermark_high, on the writer */
} bf_stmt_kind;

typedef struct bf_stmt {
	bf_stmt_kind kind;
	const char *sql;
	int nparams;
	const char *const *params; /* text; valid until the result is reported */
	uint64_t ticket;	   /* hands the result back */
} bf_stmt;

/* The lanes: connections of the reader, each running one statement at a time: parallel that read, and
 * the writer (the last), which writes the high watermarks (BF_STMT_HIGH) of the chunks they read. */
unsigned backfill_lanes(const bf_set *set);
/* The next statement for lane, if one is due: false if none, with *wake_ms the time one becomes due
 * (0: none until something else happens). Report a statement's result before asking for the lane's
 * next. */
bool backfill_next(bf_set *set, unsigned lane, bf_now now, bf_stmt *out, uint64_t *wake_ms);

/* A statement's rows, text format. */
typedef struct bf_result {
	int nrows, ncols;
	void *ctx;
	const char *(*value)(void *ctx, int row, int col);
	int (*length)(void *ctx, int row, int col);
	bool (*isnull)(void *ctx, int row, int col);
} bf_result;

/* The snapshot a chunk's COPY reads by, pg_current_snapshot() as text. It comes before the rows, on
 * lane, for the statement of ticket. A stale ticket is ignored. */
void backfill_copy_snapshot(bf_set *set, unsigned lane, uint64_t ticket, const char *text, size_t len);
/* One row of a chunk's COPY (a CopyData message, text format) on lane, for the statement of
 * ticket (a stale ticket is ignored). */
void backfill_copy_row(bf_set *set, unsigned lane, uint64_t ticket, const char *data, size_t len);
/* The result of the statement of ticket on lane (a stale ticket is ignored); for a COPY, result has no
 * rows: its rows came before. */
void backfill_result(bf_set *set, unsigned lane, uint64_t ticket, const bf_result *result, bf_now now);
/* The statement of ticket failed. lost: the connection went away (the work is done again on a
 * new one); retry: the table changed under it (sqlstate 42703, 42P01): it is described again;
 * otherwise the table (or, for the checks, the backfill) fails with message. */
void backfill_error(bf_set *set, unsigned lane, uint64_t ticket, const char *message, bool lost, bool retry,
		    bf_now now);

/* ---- the stream ---- */

/* The surviving rows of a chunk, emitted at its high watermark. */
typedef struct bf_batch {
	const char *id, *subscription, *schema, *table;
	const char *where; /* the backfill's own `where` (the request's): the reads must satisfy it */
	const bfsql_col *cols;
	size_t ncols;
	const size_t *keys; /* indexes into cols, key order: the events' key (none for a table the
			     * stream sends no key of either) */
	size_t nkeys;
	uint64_t lsn; /* the high watermark's: the reads' commit_lsn */
	size_t nrows; /* rows to emit */
	const bf_window *w;
} bf_batch;

/* The next row to emit: values gets ncols datums. *pos starts at 0. */
bool backfill_batch_next(const bf_batch *batch, size_t *pos, bf_datum *values);

/* Emits the batch's rows that satisfy the `where`s into the subscription's sink; *delivered gets how
 * many did. */
typedef bool (*bf_emit_fn)(void *ctx, const bf_batch *batch, size_t *delivered, char *err, size_t errlen);

/* A logical message with prefix BFSQL_PREFIX delivered at lsn. At a chunk's high watermark emit
 * gets its surviving rows (not called when none survive); its failure is returned. Watermarks
 * of unknown backfills and other chunks are ignored. */
bool backfill_on_message(bf_set *set, const char *content, size_t len, uint64_t lsn, bf_now now,
			 bf_emit_fn emit, void *ctx, char *err, size_t errlen) CDC_MUST_CHECK;

/* A change as the stream delivers it, at its transaction's commit: the names and values of (at
 * least) the key columns in the old tuple (NULL if none was sent) and the new (NULL for a delete);
 * a value with len BF_ABSENT was not sent. partial: the new row lacks some column's value
 * (unchanged TOAST), so it cannot stand in for a read of the row. */
typedef struct bf_change {
	const char *schema, *table;
	uint32_t xid; /* top-level */
	bool truncate, partial;
	size_t ncols;
	const char *const *names;
	const bf_datum *old_values, *new_values;
	void *owned; /* backfill_change_decode's arrays */
} bf_change;

/* A change as bytes, for a streamed or prepared transaction's spill record (xid not included), and
 * back: out points into p, its arrays are allocated (backfill_change_free). */
void backfill_change_encode(const bf_change *change, buf *out);
bool backfill_change_decode(const void *data, size_t len, bf_change *out) CDC_MUST_CHECK;
void backfill_change_free(bf_change *change);

/* Whether any backfill reads schema.table now (only those changes need reporting). */
bool backfill_watching(const bf_set *set, const char *schema, const char *table);
void backfill_on_change(bf_set *set, const bf_change *change);

/* The sinks made everything up to flushed durable: chunks whose high watermark lies at or before
 * it (a watermark's LSN is the end of its record) are finished (the last one finishes its table). */
void backfill_delivered(bf_set *set, uint64_t flushed, bf_now now);
/* The state file's contents, appended to out, when anything a restart must know changed since it
 * was last asked for (false: nothing to write). It must be on disk before the position that
 * follows is recorded: it holds the keys to read again of the changes before it. */
bool backfill_state(bf_set *set, buf *out);
/* Whether a table waits only for its last chunks to become durable (backfill_delivered finishes
 * it, or starts its next round, and the next table may start). */
bool backfill_draining(const bf_set *set);
/* The stream starts again from its last durable position (a reconnect): chunks not yet durable are
 * read again, since what the stream delivers again would otherwise overtake their reads. */
void backfill_restart(bf_set *set);

/* ---- progress ---- */

/* Rows read = delivered + dropped (a newer change of the row came between the chunk's watermarks)
 * + filtered (the `where`, evaluated by cdc, did not hold: the parts of it that translate to SQL
 * never reach cdc, see backfill_sql_where). */
typedef struct bf_progress {
	uint64_t read, delivered, dropped, filtered, retries;
	uint64_t blocks, blocks_read; /* the relations' blocks to read, and those read */
	int64_t estimate;	      /* rows, -1 unknown */
	const char *estimate_from;    /* "statistics" (reltuples), "size" (rows read per block read), or
				       * NULL: exact (finished, or nothing to read) or unknown */
	double rate;		      /* rows read per second while running */
	int64_t eta_s;		      /* -1 unknown */
} bf_progress;

typedef struct bf_info {
	const char *id, *subscription, *where, *error;
	bf_state state;
	int64_t created_ms, finished_ms; /* wall clock; finished 0 while not */
	size_t ntables;
	bf_progress p;
} bf_info;

typedef struct bf_table_info {
	const char *schema, *table, *key, *error; /* key: the window's index; NULL until known or keyless */
	bf_state state;
	bf_progress p;
} bf_table_info;

size_t backfill_count(const bf_set *set);
/* Whether a backfill is queued or running. */
bool backfill_active(const bf_set *set);
/* Backfill i (oldest first); NULL-safe strings. */
void backfill_info(const bf_set *set, size_t index, bf_now now, bf_info *out);
void backfill_table_info(const bf_set *set, size_t index, size_t count, bf_now now, bf_table_info *out);
/* Index of backfill id, or -1. */
long backfill_find(const bf_set *set, const char *id);
/* The backfills as JSON (GET /backfills): an array, oldest first; only sub's when sub is given. */
void backfill_json(const bf_set *set, buf *out, const char *sub, bf_now now);

#endif
