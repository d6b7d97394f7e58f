/* internal.h: what the files of cdc/backfill share: the backfills' state (bf_set, each backfill
 * and its tables) and the few steps more than one of them takes. backfill.c creates, runs and
 * settles backfills; state_file.c keeps them in state_dir; stream.c closes chunks at their
 * watermarks; progress.c renders their figures. Not for use outside cdc/backfill. */
#ifndef CDC_BACKFILL_INTERNAL_H
#define CDC_BACKFILL_INTERNAL_H

#include "cdc/backfill/backfill.h"

#define BF_FILE_VERSION 1
/* Finished backfills kept for GET /backfills; the `snapshot: true` ones are always kept, since
 * they say the subscription had its snapshot. */
#define BF_KEEP_FINISHED 50

/* The read side of a table: S_LOW, S_CHUNK, S_HIGH read a chunk into w; S_STREAM: its high
 * watermark is written, and it waits for the chunk before it (prev) to close first; S_DRAIN:
 * nothing left to read, the last chunks close and become durable. */
enum step { S_NONE, S_DESCRIBE, S_LOW, S_CHUNK, S_HIGH, S_STREAM, S_DRAIN };

/* A table's rows so far: read by its chunk queries; of those, delivered to the subscription's sink,
 * dropped (a change between the chunk's watermarks: the stream carries the row's newer version) and
 * filtered (the `where`, evaluated by cdc, did not hold). */
typedef struct counters {
	uint64_t read, delivered, dropped, filtered;
} counters;

/* A chunk emitted at its high watermark, finished once the sinks made lsn durable. */
typedef struct pending {
	uint64_t lsn;
	buf cursor;    /* the key of its last row; empty if it read none */
	counters done; /* the table's, with this chunk */
	bool last;
} pending;

typedef struct table {
	struct backfill *bf;
	char *schema, *name, *error, *key_index;
	uint32_t oid; /* known from the checks (not kept in the state file) */
	bf_state state;
	int64_t estimate;
	/* durable, persisted */
	buf cursor_d;
	counters done_d;
	/* live: includes chunks emitted but not yet durable */
	buf cursor;
	counters done;
	uint64_t retries;
	/* the description */
	bfsql_col *cols;
	size_t ncols;
	size_t *keys;
	size_t nkeys;
	char *strings; /* the names the cols point to */
	buf where_sql; /* the `where`s' parts that translate (bfsql_where) */
	/* the run */
	enum step step;
	bool busy;
	bf_stmt_kind kind; /* of the statement in flight */
	uint64_t ticket, due_ms, sent_ms, limit;
	uint64_t run_ms, run_read; /* when this run started, and the rows read before it */
	bool last;		   /* the chunk read into w is the table's last */
	/* Two chunks at most: while the stream closes prev (its high watermark written, prev_open),
	 * the next one is read into w, so the server reads while cdc emits. */
	bf_window *w, *prev;
	bool prev_open, prev_last;
	bool opens_at_prev; /* w's low watermark is prev's high one */
	bool rows_due;	    /* the chunk's result awaits backfill_rows (at rows_ms) */
	uint64_t rows_ms;
	char nonce[BF_ID_SIZE];
	buf sql, wm;
	char **params;
	size_t nparams;
	pending *pend;
	size_t npend;
} table;

typedef struct backfill {
	char id[BF_ID_SIZE];
	char *sub, *sub_where, *where, *error, *role;
	char **sub_pat, **req_pat;
	size_t nsub_pat, nreq_pat;
	bool snapshot, resolved;
	bf_state state;
	int64_t created_ms, finished_ms;
	table *tables;
	size_t ntables;
	/* the checks: CHECK, then TABLES until resolved, then COLUMNS (the request's `where` against the
	 * tables' columns) until vetted; vetted is resolved when there is no such `where` */
	bool checked, vetted, busy;
	bf_stmt_kind kind;
	uint64_t ticket;
	const char *param[1];
	char *oids; /* the tables' oids, "{1,2}", for COLUMNS */
} backfill;

struct bf_set {
	bf_settings s;
	char *publication, *path;
	uint64_t rng, tickets;
	backfill **list;
	size_t n;
	size_t rr;  /* where backfill_next's round starts */
	bool dirty; /* changed since the state file was written */
};

bool bf_save(bf_set *b, char *err, size_t errlen);
void bf_append(bf_set *b, backfill *f);
void bf_free(backfill *f);
void bf_rewind_table(table *t);
bool bf_state_parse(const char *s, bf_state *out);
void bf_trim_history(bf_set *b);
void bf_chunk_again(table *t, uint64_t due_ms);
void bf_chunk_written(bf_set *b, table *t, uint64_t now_ms);
void bf_drop_chunks(table *t);
uint64_t bf_clamp_rows(const bf_set *b, uint64_t n);
void bf_clear_pending(table *t);
backfill *bf_find(const bf_set *b, const char *id);
void bf_settle(backfill *f, bf_now now);
void bf_stop_run(table *t);
bool bf_finished(bf_state s);

#endif
