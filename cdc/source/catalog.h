/* catalog.h: what the database's tables must offer a subscription, checked before it applies: a
 * `changed` or an old.column in its `where` needs the old row (REPLICA IDENTITY FULL), `snapshot:
 * true` a key on every published table it reads. The catalog is read by one query (catalog_sql) on
 * the source's ordinary connection, at every connect and before a reload or PUT applies; the checks
 * are pure. */
#ifndef CDC_CATALOG_H
#define CDC_CATALOG_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "cdc/config/config.h"

/* The query for a server of this version: parameter $1 the publication; one row per table (plain
 * or partitioned, outside the system schemas), CATALOG_COLS text columns: schema, table, relkind,
 * relreplident, whether the publication holds it (pub_c.member), the columns an old row carries
 * without REPLICA IDENTITY FULL (the primary key's or the identity index's) as a JSON array, NULL
 * for none, and the schema and name its changes arrive under (pub_c.arrives; NULL, NULL for none). */
const char *catalog_sql(int server_version);
#define CATALOG_COLS 8

typedef struct catalog_table {
	char *schema, *name;
	char relkind, replident; /* pg_class's: 'r' or 'p'; 'd', 'f', 'i' or 'n' */
	bool published;		 /* the publication holds it */
	cfg_strlist identity;
	/* The table whose name its changes arrive under: itself, or the partitioned table the
	 * publication sends them as (publish_via_partition_root). NULL for a table outside the
	 * publication, and for a partitioned table whose changes arrive under its partitions' names. */
	char *as_schema, *as_name;
} catalog_table;

typedef struct catalog {
	catalog_table *t;
	size_t n;
} catalog;

/* Adds one row of catalog_sql's result, its cells as text (NULL for SQL NULL). False if a cell is
 * malformed. */
bool catalog_add(catalog *cat, const char *const cells[CATALOG_COLS]) CDC_MUST_CHECK;
void catalog_free(catalog *cat);
/* Every row of res, catalog_sql's answer (tuples); false if one is malformed. */
bool catalog_add_result(catalog *cat, const PGresult *res) CDC_MUST_CHECK;

/* The part of catalog_check about the old row: `changed` and old.columns against the replica
 * identities of the tables whose changes arrive under a name sub matches (a partitioned table's and
 * each of its partitions', when they arrive under its name); one line per problem, each "...: ALTER
 * TABLE "sub"."t" REPLICA IDENTITY FULL". True if none. */
bool catalog_check_identity(const catalog *cat, const cfg_subscription *sub, buf *problems);
/* The tables subscription sub names one by one (a pattern without globs) that do not exist: one line
 * each in problems, with the closest names cat has ("subscription orders names table public.ordres,
 * which does not exist: did you mean public.orders?"). True if none. A start and a new
 * subscription fail on it; a reconnect only warns (the table may have been dropped meanwhile). */
bool catalog_check_exists(const catalog *cat, const cfg_subscription *sub, buf *problems);
/* The warnings about partitioned tables, one line each: sub matches a partitioned table whose changes
 * arrive under its partitions' names, or partitions whose changes arrive under the name of a
 * partitioned table sub does not match. With fixes, each line's way out goes to fixes (a line each,
 * in the same order); without, it ends the line after ": ". */
void catalog_check_partitions(const catalog *cat, const cfg_subscription *sub, const char *publication,
			      buf *warnings, buf *fixes);
/* What keeps subscription sub from working against cat: one line per problem appended to problems,
 * each naming the table and the statement that fixes it (catalog_check_identity's); one line per
 * warning (a table pattern that no table of the publication matches: nothing of it is streamed; a
 * matched table whose changes arrive under another name, with the way out). True if no problem.
 * Its `snapshot: true` reads any table the publication has (a backfill that cannot fails as one). */
bool catalog_check(const catalog *cat, const cfg_subscription *sub, const char *publication, buf *problems,
		   buf *warnings);

#endif
