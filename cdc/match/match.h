/* What a subscription's rules are made of, apart from `where` (predicate.h): the kinds of change it
 * wants and the "schema.table" patterns of its tables. One implementation here checks and matches them
 * for the configuration, the source, the backfills and cdc doctor. */
#ifndef CDC_MATCH_H
#define CDC_MATCH_H

#include <stdbool.h>
#include <stddef.h>

enum match_op {
	MATCH_OP_INSERT = 1 << 0,
	MATCH_OP_UPDATE = 1 << 1,
	MATCH_OP_DELETE = 1 << 2,
	MATCH_OP_TRUNCATE = 1 << 3,
	MATCH_OP_MESSAGE = 1 << 4,
	MATCH_OP_SCHEMA = 1 << 5, /* schema events before rows (docs/events.md) */
	MATCH_OP_DDL = 1 << 6,	  /* DDL events (source.ddl) */
};
/* The kinds a subscription without `operations` wants, every kind but logical messages. */
#define MATCH_OPS_DEFAULT                                                                                    \
	(MATCH_OP_INSERT | MATCH_OP_UPDATE | MATCH_OP_DELETE | MATCH_OP_TRUNCATE | MATCH_OP_SCHEMA |         \
	 MATCH_OP_DDL)

#define MATCH_NAME_MAX 63 /* PostgreSQL's NAMEDATALEN - 1 */

/* Checks a "schema.table" pattern with * and ? globs. It has exactly one dot outside double quotes.
 * Both parts are non-empty and at most MATCH_NAME_MAX bytes once unquoted. A part is either unquoted,
 * in PostgreSQL's identifier characters plus the globs, or wholly in double quotes ("" for a quote),
 * as in SQL. NULL if text is such a pattern, else why not (static text, or why filled in). */
const char *match_table_problem(const char *text, char *why, size_t whylen);
/* Checks one table's name, a pattern (match_table_problem) without globs. It matches exactly one
 * schema.table. NULL if text is such a name, else why not. */
const char *match_table_name_problem(const char *text, char *why, size_t whylen);
/* Splits a table's name (match_table_name_problem passed) into its two parts, unquoted. False if it
 * is not one. */
bool match_table_split(const char *name, char schema[MATCH_NAME_MAX + 1], char table[MATCH_NAME_MAX + 1]);
/* Whether pattern matches the relation schema.table. An unquoted part is a glob (* and ?). A "quoted"
 * part matches exactly. False for a malformed pattern. */
bool match_table(const char *pattern, const char *schema, const char *table);
/* Whether a well-formed pattern names one table, with no * or ? outside double quotes. */
bool match_table_literal(const char *pattern);

/* The tables closest to a literal pattern that names none. Fed every table there is, it keeps the
 * MATCH_SUGGEST nearest by edit distance (two letters swapped count as one edit). It keeps only those
 * within a quarter of the name's length, and within one edit at least. */
#define MATCH_SUGGEST 3
#define MATCH_QUALIFIED_MAX (2 * (2 * MATCH_NAME_MAX + 2) + 2) /* "schema"."table", quotes doubled */
typedef struct match_suggest {
	char want[2 * MATCH_NAME_MAX + 2]; /* schema.table, unquoted */
	char best[MATCH_SUGGEST][MATCH_QUALIFIED_MAX];
	unsigned dist[MATCH_SUGGEST];
	size_t n;
} match_suggest;
void match_suggest_start(match_suggest *suggest, const char *pattern);
void match_suggest_add(match_suggest *suggest, const char *schema, const char *table);
/* "did you mean public.orders?" (names as patterns write them), or "" when none is close. */
const char *match_suggest_text(const match_suggest *suggest, char *out, size_t outlen);

#endif
