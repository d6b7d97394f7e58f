/* What the database's tables must offer a subscription, checked before it applies. One query
 * (source_catalog_sql) reads the catalog on the source's ordinary connection, at every connect and before a
 * reload or PUT applies. The checks are pure. */
#ifndef CDC_CATALOG_H
#define CDC_CATALOG_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "cdc/config/config.h"

/* A `changed` or an old.column in a subscription's `where` needs the old row (REPLICA IDENTITY FULL).
 * `snapshot: true` needs a key on every published table it reads. */

/* The query for a server of this version. Its parameter $1 is the publication. It gives one row per
 * table (plain or partitioned, outside the system schemas), with CATALOG_COLS text columns:
 * - schema, table, relkind and relreplident.
 * - whether the publication holds it (pub_c.member).
 * - the columns an old row carries without REPLICA IDENTITY FULL (the primary key's or the identity
 *   index's) as a JSON array, NULL for none.
 * - the schema and name its changes arrive under (pub_c.arrives), NULL and NULL for none. */
const char *source_catalog_sql(int server_version);
#define CATALOG_COLS 8

typedef struct catalog_table {
	char *schema, *name;
	char relkind, replident; /* pg_class's, 'r' or 'p', and 'd', 'f', 'i' or 'n' */
	bool published;		 /* the publication holds it */
	cfg_strlist identity;
	/* The table whose name its changes arrive under. It is itself, or the partitioned table the
	 * publication sends them as (publish_via_partition_root). NULL for a table outside the
	 * publication, and for a partitioned table whose changes arrive under its partitions' names. */
	char *as_schema, *as_name;
} catalog_table;

typedef struct catalog {
	catalog_table *t;
	size_t n;
} catalog;

/* Adds one row of source_catalog_sql's result, its cells as text (NULL for SQL NULL). False if a cell is
 * malformed. */
bool source_catalog_add(catalog *cat, const char *const cells[CATALOG_COLS]) CDC_MUST_CHECK;
void source_catalog_free(catalog *cat);
/* Adds every row of res, source_catalog_sql's answer (tuples). False if one is malformed. */
bool source_catalog_add_result(catalog *cat, const PGresult *res) CDC_MUST_CHECK;

/* The part of source_catalog_check about the old row. It checks `changed` and old.columns against the
 * replica identities of the tables whose changes arrive under a name sub matches. These are a
 * partitioned table and each of its partitions, when they arrive under its name. It appends one line
 * per problem, each "...: ALTER TABLE "sub"."t" REPLICA IDENTITY FULL". True if none. */
bool source_catalog_check_identity(const catalog *cat, const cfg_subscription *sub, buf *problems);
/* The tables subscription sub names one by one (a pattern without globs) that do not exist. Each gets
 * one line in problems, with the closest names cat has, as in "subscription orders names table
 * public.ordres, which does not exist: did you mean public.orders?". True if none. A start and a new
 * subscription fail on it. A reconnect only warns, since the table may have been dropped meanwhile. */
bool source_catalog_check_exists(const catalog *cat, const cfg_subscription *sub, buf *problems);
/* The warnings about partitioned tables, one line each. sub may match a partitioned table whose
 * changes arrive under its partitions' names. Or it may match partitions whose changes arrive under
 * the name of a partitioned table sub does not match. With fixes, each line's way out goes to fixes,
 * a line each in the same order. Without fixes, the way out ends the line after ": ". */
void source_catalog_check_partitions(const catalog *cat, const cfg_subscription *sub, const char *publication,
				     buf *warnings, buf *fixes);
/* What keeps subscription sub from working against cat. Each problem appends one line to problems,
 * naming the table and the statement that fixes it (source_catalog_check_identity's). Each warning appends
 * one line to warnings. A warning is a table pattern that no table of the publication matches, so
 * nothing of it is streamed. Or it is a matched table whose changes arrive under another name, with
 * the way out. True if no problem. Its `snapshot: true` reads any table the publication has. A
 * backfill that cannot read one fails as one. */
bool source_catalog_check(const catalog *cat, const cfg_subscription *sub, const char *publication,
			  buf *problems, buf *warnings);

#endif
