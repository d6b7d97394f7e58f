/* What the files of cdc/backfill share. Not for use outside cdc/backfill. */
#ifndef CDC_BACKFILL_INTERNAL_H
#define CDC_BACKFILL_INTERNAL_H

#include "cdc/backfill/backfill.h"

/* The shared parts are the backfills' state (bf_set, each backfill, its tables, their leaves, ranges
 * and chunks, the reader's lanes) and the few steps more than one file takes.
 * - backfill.c creates, plans and runs backfills.
 * - state_file.c keeps them in state_dir.
 * - stream.c closes chunks at their watermarks.
 * - backfill_progress.c renders their figures.
 * - read_sets.c keeps the keys to read again. */

#define BF_FILE_VERSION 2
/* Finished backfills kept for GET /backfills. The `snapshot: true` ones are always kept, since they say the
 * subscription had its snapshot. */
#define BF_KEEP_FINISHED 50

/* A table's rows so far.
 * - read counts the rows its chunks read.
 * - delivered counts those of them delivered to the subscription's sink.
 * - dropped counts those a change came for between the chunk's watermarks. The stream carries the
 *   row's newer version.
 * - filtered counts those for which the `where`, evaluated by cdc, did not hold.
 * - blocks counts the blocks its range chunks read. */
typedef struct counters {
	uint64_t read, delivered, dropped, filtered, blocks;
} counters;

/* A set of block ranges [lo, hi), sorted and apart. v holds lo, hi, lo, hi... */
typedef struct rset {
	uint32_t *v;
	size_t n, cap; /* n is the count of numbers in v (twice the ranges) */
} rset;

void backfill_ranges_add(rset *ranges, uint32_t lo, uint32_t hi);
void backfill_ranges_remove(rset *ranges, uint32_t lo, uint32_t hi);
/* The first range from `from` on that neither ranges nor ranges2 covers, below end, at most max blocks long.
 * False if there is none. */
bool backfill_ranges_first_gap(const rset *ranges, const rset *ranges2, uint32_t from, uint32_t end,
			       uint32_t max, uint32_t *lo, uint32_t *hi);
/* Blocks in ranges below end. */
uint64_t backfill_ranges_blocks(const rset *ranges, uint32_t end);
void backfill_ranges_free(rset *ranges);

/* The keys to read again (read_sets.c). They are rows a change left incomplete in the stream (unchanged
 * TOAST) while a chunk of the table could have missed them. A key waits for a chunk, is taken by one, and is
 * done once that chunk is durable. A chunk that fails gives its keys back. */
enum key_state { KEY_WAIT, KEY_TAKEN, KEY_TAKEN_AGAIN };

typedef struct keyent {
	struct keyent *next;
	uint64_t hash;
	uint32_t len;
	uint8_t state;
	uint8_t key[];
} keyent;

typedef struct keyset {
	keyent **slots;
	size_t cap, n, waiting, bytes;
} keyset;

void backfill_keys_add(keyset *keys, const void *key, size_t len);
/* Whether key is in keys, waiting or taken by a chunk. */
bool backfill_keys_has(const keyset *keys, const void *key, size_t len);
/* Takes up to max waiting keys into out (each a 4-byte length, then the key). Returns how many. */
size_t backfill_keys_take(keyset *keys, size_t max, buf *out);
/* Keys that a chunk took (out of backfill_keys_take) go back to waiting, or are done. Done keys are
 * forgotten, unless one came again meanwhile. */
void backfill_keys_give_back(keyset *keys, const buf *taken);
void backfill_keys_done(keyset *keys, const buf *taken);
/* Every key, taken or not, one by one. *pos starts at 0. */
const keyent *backfill_keys_next(const keyset *keys, size_t *pos, const keyent *prev);
void backfill_keys_free(keyset *keys);

/* A relation a table's rows are read from. That is the table itself, or a leaf partition of a partitioned
 * one. */
typedef struct leaf {
	uint32_t oid;
	char *schema, *name;
	uint32_t blocks;       /* its size when it was planned. Rows added later come with the stream. */
	double rows_per_block; /* reltuples / relpages, < 0 if unknown */
	rset done;	       /* durable */
	rset taken;	       /* read now, or read and not yet durable */
	bool gone;	       /* no longer a partition of the table */
} leaf;

/* The read side of a table. It is its description, the list of what to read (PLAN), then chunks. */
enum tstep { T_NONE, T_DESCRIBE, T_PLAN, T_READ };

/* One chunk. It is a block range of a leaf, or the keys to read again. One COPY reads it between its own low
 * and high watermark, on one of the reader's lanes; the writer writes the high watermark once its rows are
 * all read (C_HIGH). */
enum cstep { C_LOW, C_COPY, C_HIGH, C_WRITTEN };

typedef struct chunk {
	struct table *t;
	int leaf; /* index into t->leaves, or -1 for the keys read again (keys) */
	uint32_t lo, hi;
	char nonce[BF_ID_SIZE];
	bf_window *w;
	enum cstep step; /* the statement it waits to send or to finish */
	bool overflow;	 /* its rows passed max_bytes, so read again, smaller */
	uint64_t expect; /* rows it was meant to hold, the rate limit's reservation */
	char *error;	 /* a row that is not what the COPY asked for */
	uint64_t sent_ms;
	uint64_t read_seq; /* the order in which chunks were read, for the writer */
	buf keys;	   /* backfill_keys_take's, for a chunk of keys */
	size_t nkeys;
} chunk;

/* A chunk emitted at its high watermark, finished once the sinks made lsn durable. */
typedef struct pending {
	uint64_t lsn;
	int leaf;
	uint32_t lo, hi;
	buf keys;
	counters delta;
} pending;

typedef struct table {
	struct backfill *bf;
	char *schema, *name, *error, *key_index;
	uint32_t oid;
	bf_state state;
	char relkind;	  /* 'r', or 'p' for a partitioned table (read by its leaves) */
	bool keyless;	  /* the window's key is every column */
	bool full;	  /* REPLICA IDENTITY FULL */
	int64_t estimate; /* pg_class.reltuples as first described, -1 if never counted */
	/* The columns of the window's key, by name. They are known from the state file before the table is
	 * described again, so that the changes the stream replays meanwhile are keyed. */
	char **key_names;
	size_t nkey_names;
	/* durable, persisted */
	counters done_d;
	leaf *leaves;
	size_t nleaves;
	keyset again; /* keys to read again, persisted with the rest */
	/* live, including chunks emitted but not yet durable */
	counters done;
	uint64_t retries;
	/* the description */
	bfsql_col *cols;
	size_t ncols;
	size_t *keys;
	size_t nkeys;
	char *strings; /* the names the cols point to */
	buf where_sql; /* the `where`s' parts that translate (backfill_sql_where) */
	/* the run */
	enum tstep step;
	bool busy;	   /* DESCRIBE or PLAN in flight */
	bool listed_again; /* a partitioned table's leaves listed again after reading all it knew */
	uint64_t due_ms, run_ms, run_read;
	uint64_t limit;	     /* rows per chunk now */
	uint64_t bytes_read; /* bytes of rows read, for the rows a chunk may hold */
	bf_recent recent;
	chunk **chunks;
	size_t nchunks;
	pending *pend;
	size_t npend;
} table;

typedef struct backfill {
	struct bf_set *set;
	char id[BF_ID_SIZE];
	char *sub, *sub_where, *where, *error, *role;
	char **sub_pat, **req_pat;
	size_t nsub_pat, nreq_pat;
	bool snapshot, resolved;
	bf_state state;
	int64_t created_ms, finished_ms;
	table *tables;
	size_t ntables;
	/* The checks. CHECK runs first, then TABLES until resolved, then COLUMNS until vetted. COLUMNS checks
	 * the request's `where` against the tables' columns. vetted is resolved when there is no such
	 * `where`. */
	bool checked, vetted, busy;
	const char *param[1];
	char *oids; /* the tables' oids, "{1,2}", for COLUMNS */
} backfill;

/* One connection of the reader, with the statement in flight and whose it is. The last one, the writer,
 * writes the chunks' high watermarks; the others read. */
typedef struct lane {
	bool busy;
	uint64_t ticket;
	bf_stmt_kind kind;
	backfill *f; /* CHECK, TABLES, COLUMNS */
	table *t;    /* DESCRIBE, PLAN, and with c the chunk's table */
	chunk *c;    /* LOW, CHUNK, HIGH, NULL once the chunk is gone */
	/* The lane's chunks of chain_t in a row. chain_nonce holds the nonces of the last two it read, the
	 * older first. ahead is its next chunk, its window open since the COPY before it went. */
	table *chain_t;
	char chain_nonce[2][BF_ID_SIZE];
	struct chunk *ahead;
	buf sql, wm;
	char **params;
	size_t nparams;
} lane;

struct bf_set {
	bf_settings s;
	char *publication, *path;
	uint64_t rng, tickets, reads;
	backfill **list;
	size_t n;
	size_t rr;  /* where backfill_next's round starts */
	bool dirty; /* changed since the state file was written */
	lane *lanes;
	unsigned nlanes;
	bf_window **spare; /* windows of finished chunks, for the next ones */
	size_t nspare;
	/* a COPY row's scratch, with its encoding, the offsets of its fields and its key */
	buf row, key;
	size_t *at;
	size_t nat;
};

void backfill_append(bf_set *set, backfill *bf);
void backfill_free(backfill *bf);
void backfill_rewind_table(table *tab);
bool backfill_state_parse(const char *text, bf_state *out);
void backfill_trim_history(bf_set *set);
backfill *backfill_lookup(const bf_set *set, const char *id);
void backfill_settle(backfill *bf, bf_now now);
void backfill_stop_run(table *tab);
/* Forgets what is in flight (chunks, ranges taken, keys taken, what waits to be durable) and the lanes' hold
 * on tab. What is durable stays. */
void backfill_drop_run(table *tab);
bool backfill_finished(bf_state state);
/* The chunk is over. Its window goes back to the spare ones, its lane is told, and it is freed. */
void backfill_chunk_free(chunk *ck);
/* The chunk is read again. Its range or keys go back, then backfill_chunk_free runs. With half it is read in
 * two halves, as its rows did not fit or a change without its key keeps hitting it. */
void backfill_chunk_retry(chunk *ck, bool half);
/* Whether some range of tab is not yet closed (read and emitted at its high watermark). A row may still move
 * from such a range into one already read. */
bool backfill_ranges_open(const table *tab);
/* A table whose chunks are all durable is done, or goes another round (keys to read again, a partitioned
 * table's leaves listed again). */
void backfill_table_progress(table *tab, bf_now now);
void backfill_table_set_keys(table *tab, char **names, size_t count);
uint64_t backfill_clamp_rows(const bf_set *set, uint64_t count);

#endif
