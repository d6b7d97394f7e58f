/* sql.h: the SQL a backfill runs: the requirement checks, the description of a table (columns,
 * key, estimate), the list of relations to read (the table, or a partitioned table's leaves) with
 * their sizes, a chunk's COPY of a block range (or of rows by key) with the pushed-down `where`, and
 * the watermarks. Identifiers are validated and always quoted; values travel as parameters, and a
 * COPY's literals (which cannot be parameters) are quoted. Text only: the statements run elsewhere
 * (libpq). */
#ifndef CDC_BACKFILL_SQL_H
#define CDC_BACKFILL_SQL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cdc/match/predicate.h"
#include "cdc/source/pgconn.h"
#include "decoder/base/util.h"

/* The prefix of the logical messages that carry watermarks. */
#define BFSQL_PREFIX "cdc.backfill"

/* A column of a table being backfilled, as the description reports it. */
typedef struct bfsql_col {
	const char *name;
	uint32_t type_oid;
	const char *type_schema, *type_name; /* for the cursor's casts */
	int32_t typmod;			     /* atttypmod: -1 when the type has none */
} bfsql_col;

/* A name PostgreSQL would keep as given: 1 to 63 bytes of valid UTF-8. err names what is wrong
 * ("... is longer than 63 bytes"), with what (e.g. "table name") in front. */
bool backfill_sql_ident_ok(const char *name, const char *what, char *err, size_t errlen) CDC_MUST_CHECK;
/* "name" with every " doubled. */
void backfill_sql_quote_ident(buf *out, const char *name);
/* 'text' with every ' doubled; E'...' with backslashes doubled if it holds one, so the literal
 * means the same whatever standard_conforming_strings is. */
void backfill_sql_quote_literal(buf *out, const char *text, size_t len);

/* Requirements of the role, no parameters; one row: current_user, whether it may execute
 * pg_logical_emit_message with a text message, and that function's signature as the server names
 * it ("pg_logical_emit_message(boolean,text,text,boolean)" on PostgreSQL 17 and later). */
extern const char bfsql_privileges[];
/* The publication's tables, parameter $1 the publication; rows, by schema and table: schema, table,
 * oid, relkind, the key's index (NULL: none, see PG_KEY_JOIN), whether the role may SELECT. A
 * partitioned table is listed when the publication publishes through its root. */
extern const char bfsql_tables[];
/* The columns of tables, parameter $1 their oids as an array ("{16384,16390}"); rows, by table and
 * column order: table oid, column name, type oid, type name. */
extern const char bfsql_columns[];
/* A table's description, parameters $1 schema, $2 table and $3 the publication; one row per column
 * the publication publishes (generated ones only when it says publish_generated_columns = stored,
 * PostgreSQL 18's pg_publication.pubgencols, read through to_jsonb so that the statement is the
 * same on every version), in column order:
 *   0 name, 1 type oid, 2 type schema, 3 type name, 4 position in the key (1-based; NULL when
 *   not a key column), 5 the key's index (NULL: no usable key, see PG_KEY_JOIN), 6 relkind, 7
 *   whether the role may SELECT from it, 8 reltuples (-1: never counted), 9 the type modifier
 *   (atttypmod), 10 relreplident, 11 the table's oid. No rows: no such table. */
extern const char bfsql_describe[];
/* The relations that hold a table's rows, parameter $1 its oid: the table itself, or the leaves of
 * a partitioned one (foreign ones cannot be read by block); rows by oid: 0 oid, 1 schema, 2 name, 3
 * blocks now, 4 relpages and 5 reltuples (statistics: relpages 0 or reltuples -1 when none), 6
 * whether the role may SELECT from it. */
extern const char bfsql_leaves[];
/* A watermark: parameter $1 the content (backfill_sql_watermark_content); non-transactional, so the
 * stream delivers it at its place in the WAL at once. Returns its LSN. */
extern const char bfsql_watermark[];
/* The same for a high watermark, which a chunk waits for: its statement also flushes the WAL. */
extern const char bfsql_watermark_high[];

/* The message that names what is missing, and the statement that grants it: for the role that
 * lacks EXECUTE on pg_logical_emit_message (function: its signature, from bfsql_privileges), the
 * table it may not read, the table without a key, a relation that is not a plain table, one that
 * does not exist. */
void backfill_sql_no_emit_message(buf *out, const char *role, const char *function);
void backfill_sql_no_select(buf *out, const char *role, const char *schema, const char *table);
void backfill_sql_no_table(buf *out, const char *schema, const char *table);
void backfill_sql_not_table(buf *out, const char *schema, const char *table, char relkind);
/* A table with neither a key nor REPLICA IDENTITY FULL: what a backfill of it can promise, with the
 * statement that makes it exact (docs/backfills.md). */
void backfill_sql_keyless(buf *out, const char *schema, const char *table);

/* What a chunk's COPY reads: the table's columns (cols, in their order), the rows that satisfy
 * where (SQL, NULL for none), either in blocks [lo, hi) of relation leaf (of the partitioned table
 * root_oid when that is not 0: the rows only while leaf is still one of its partitions under the
 * COPY's snapshot), or those whose key (columns keys, in key order) is one of keyvals (backfill_keys_take's
 * format: a 4-byte length, then backfill_encode's bytes, nkeyvals of them). */
typedef struct bfsql_read {
	const char *schema, *table; /* the table: its rows by key are read through it */
	const bfsql_col *cols;
	size_t ncols;
	const char *where;
	const char *leaf_schema, *leaf_name;
	uint32_t leaf_oid, root_oid, lo, hi;
	const size_t *keys;
	size_t nkeys;
	const void *keyvals;
	size_t keyvals_len, nkeyvals;
} bfsql_read;

/* One transaction in REPEATABLE READ. A row of one column comes first, pg_current_snapshot() as
 * text. Then COPY (...) TO STDOUT sends cols in text format under that snapshot. It reads by block
 * range, or by key when r->keyvals is given. False when keyvals does not hold nkeyvals keys of nkeys values.
 */
bool backfill_sql_copy(buf *out, const bfsql_read *read) CDC_MUST_CHECK;

/* The `where` predicate as SQL for a table of columns cols, for the chunk query: the conjuncts of predicate
 * (its top-level `and`s) that translate exactly, joined by AND, appended to out (nothing if none does).
 * Exactly means the SQL is true for a row exactly when match_predicate_eval is true for the row's read:
 * comparisons of a new.column with a literal of a kind its type compares alike in both (integers
 * and numeric with numbers, text and varchar with strings in byte order, boolean with true and
 * false), null literals, `in` lists of those, `is [not] null`, and/or/not of translatable parts.
 * old.columns (a read has no old row), columns the table lacks, column-to-column comparisons and
 * other types do not translate. Returns whether all of predicate did; if not, cdc evaluates predicate itself.
 */
bool backfill_sql_where(buf *out, const pred *predicate, const bfsql_col *cols, size_t ncols);

/* Watermark contents: "<backfill id>:<chunk nonce>:low" or ":high". Neither id nor nonce holds a
 * ':'. */
void backfill_sql_watermark_content(buf *out, const char *id, const char *nonce, bool high);
/* Splits a watermark's content; false if it is not one. id and nonce are copied into buffers of
 * idlen and noncelen bytes (false if they do not fit). */
bool backfill_sql_watermark_parse(const char *content, size_t len, char *id, size_t idlen, char *nonce,
				  size_t noncelen, bool *high) CDC_MUST_CHECK;

#endif
