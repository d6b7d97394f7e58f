/* What every connection of cdc to PostgreSQL shares, for the daemon's source and `cdc doctor`. That is
 * connecting with source.dsn, keeping its passwords out of messages, quoting names, and the catalog
 * queries about the slot and the publication cdc creates. */
#ifndef CDC_PGCONN_H
#define CDC_PGCONN_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "cdc/config/config.h"
#include "decoder/base/util.h"

#define PG_MAX_SECRETS 8

/* Select items that make a statement which writes a WAL record flush the WAL up to it: an xid and
 * synchronous_commit on for its transaction (whatever the server's setting). A transaction that wrote no WAL
 * before its commit record commits without a flush, so the statement must write one. The backfills' high
 * watermarks and the re-sync take it. */
#define PG_FLUSH_ITEMS "pg_catalog.set_config('synchronous_commit', 'on', true), pg_catalog.txid_current()"

/* The password-like values of source.dsn (password and sslpassword, also inside a dbname that is a
 * connection string) and of PGPASSWORD, when 4 bytes or longer. */
typedef struct pg_secrets {
	char *v[PG_MAX_SECRETS];
	size_t n;
} pg_secrets;
void source_pg_secrets_init(pg_secrets *secrets, const char *dsn);
/* Adds the secrets of another connection string (source.primary_dsn). */
void source_pg_secrets_add(pg_secrets *secrets, const char *dsn);
/* Adds one secret value (source.password). */
void source_pg_secrets_add_value(pg_secrets *secrets, const char *secret);
void source_pg_secrets_free(pg_secrets *secrets);
/* Replaces every secret in err (NUL-terminated, errlen bytes) by "********", cutting the message
 * short if it must. */
void source_pg_redact(const pg_secrets *secrets, char *err, size_t errlen);

typedef enum pg_conn_kind {
	PG_CONN_ORDINARY,
	PG_CONN_REPLICATION, /* replication=database, with the walsender session settings decoding needs */
	/* ordinary, then SET default_transaction_read_only = on. Every transaction of the session is
	 * read only, so no statement can write (cdc doctor). */
	PG_CONN_READ_ONLY,
} pg_conn_kind;

/* Connects with the user's connection string. It adds only what cdc needs: a default connect_timeout,
 * the application name, and what kind asks for. TLS, passwords, PG* variables and .pgpass pass through
 * to libpq untouched. password (source.password, NULL if none) is used when dsn has none. It comes
 * before dsn's keywords, which libpq lets override it. On failure it returns NULL with err saying what
 * to do. *invalid_dsn then tells whether libpq could not even parse dsn, so that no retry will help. */
PGconn *source_pg_connect(const char *dsn, const char *password, pg_conn_kind kind, bool *invalid_dsn,
			  char *err, size_t errlen);

/* The highest pgoutput protocol a server of this version (150008 for 15.8) speaks. That is 1, 2 (14,
 * streamed transactions), 3 (15, two-phase) or 4 (16, parallel streaming). */
int source_pg_protocol_for(int server_version);

/* The first line of a libpq or server message. It is in a static buffer, so use it before the next
 * call. */
const char *source_pg_one_line(const char *msg);
/* text between quote characters quote, each quote inside doubled. With '"' it is an SQL identifier.
 * With '\'' it is an SQL or replication-command string literal, with standard_conforming_strings as
 * walsenders parse them. */
void source_pg_append_quoted(buf *buffer, const char *text, char quote);
/* "schema"."table", each part between double quotes and a quote inside doubled. A statement naming it
 * runs as it is, whatever the names. It is also a pattern match_table takes exactly. */
void source_pg_append_table(buf *buffer, const char *schema, const char *table);
/* An SQL identifier, quoted by libpq for conn's encoding. */
void source_pg_append_ident(buf *buffer, PGconn *conn, const char *name);

/* The key a backfill reads a table by, for a query over pg_class c. k.name is the index (NULL if
 * none), and k.cols its columns' attnums in order. It is the primary key, else the replica identity
 * index, else the unique index with fewest columns (then by name). Only unique indexes that are valid,
 * not partial, without expressions and on NOT NULL columns qualify. */
#define PG_KEY_JOIN                                                                                          \
	"LEFT JOIN LATERAL ("                                                                                \
	"SELECT i.indexrelid::pg_catalog.regclass::pg_catalog.text AS name, "                                \
	"(i.indkey::pg_catalog.int2[])[0:i.indnkeyatts - 1] AS cols "                                        \
	"FROM pg_catalog.pg_index i "                                                                        \
	"WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid AND i.indpred IS NULL "                 \
	"AND i.indexprs IS NULL AND NOT EXISTS (SELECT FROM pg_catalog.pg_attribute ka "                     \
	"WHERE ka.attrelid = c.oid AND ka.attnum = ANY ((i.indkey::pg_catalog.int2[])[0:i.indnkeyatts - "    \
	"1]) "                                                                                               \
	"AND NOT ka.attnotnull) "                                                                            \
	"ORDER BY i.indisprimary DESC, i.indisreplident DESC, i.indnkeyatts, 1 LIMIT 1) k ON true "

/* The replication slot as pg_replication_slots tells it. */
typedef struct pg_slot_row {
	bool exists;
	char plugin[64], type[16], database[128], wal_status[16];
	uint64_t confirmed_flush;
	int active_pid;
	bool safe_wal_size_known;   /* NULL unless max_slot_wal_keep_size is set */
	int64_t safe_wal_size;	    /* bytes that may still be written before the slot risks losing WAL */
	int64_t max_keep_size;	    /* max_slot_wal_keep_size in bytes, -1 for unlimited */
	uint64_t server_lsn;	    /* the server's WAL position (replayed on a standby), 0 if unknown */
	int64_t lag_bytes;	    /* WAL between the server's position and confirmed_flush_lsn */
	bool failover, synced;	    /* a failover slot, a standby's synchronized copy (PostgreSQL 17+) */
	char current_database[128]; /* of the connection that asked */
	/* From PostgreSQL 17 (has_invalidation false before), why the server invalidated the slot (""
	 * while it is valid), and since when no process streams it. That is in µs since the Unix epoch,
	 * 0 while one does. From PostgreSQL 18, idle_replication_slot_timeout in seconds (0 off, -1
	 * before 18). */
	bool has_invalidation;
	char invalidation_reason[32];
	int64_t inactive_since_us;
	int64_t idle_timeout_s;
} pg_slot_row;
/* safe_wal_size under this share of max_slot_wal_keep_size is running low. cdc then warns in the log,
 * /status and cdc doctor. */
#define PG_SAFE_WAL_LOW_PERCENT 20
/* The query behind pg_slot_row. Its parameter $1 is the slot's name. It is the same on every version.
 * The columns 17 added are read through to_jsonb, and 18's setting from pg_settings. */
extern const char pg_slot_sql[];
/* Fills row from res, pg_slot_sql's answer (tuples). */
void source_pg_slot_parse(const PGresult *res, pg_slot_row *row);
/* A logical slot that another session is creating. pg_create_logical_replication_slot() lists it,
 * held by that session (active_pid), before it names the plugin (empty until then). */
bool source_pg_slot_being_created(const pg_slot_row *row);

/* How the publication $1 holds each table, for a query over pg_class c. PG_PUB_WITH_14 or _15 opens
 * the query with its common table expressions (PostgreSQL 15 added TABLES IN SCHEMA). PG_PUB_JOIN
 * gives pub_c.member and pub_c.arrives. member says the publication holds c, itself, through a
 * partition ancestor, its schema or FOR ALL TABLES. Adding c again would then be an error. arrives is
 * the oid whose name c's changes arrive under. It is c's own or, with publish_via_partition_root, its
 * topmost published ancestor's. It is NULL for a table outside. It is NULL too for a partitioned table
 * whose changes arrive under its partitions' names (the publication lacks publish_via_partition_root). */
#define PG_PUB_WITH_(schemas)                                                                                \
	"WITH pub AS (SELECT oid, puballtables FROM pg_catalog.pg_publication WHERE pubname = $1), "         \
	"pub_member AS MATERIALIZED (SELECT pr.prrelid AS relid FROM pg_catalog.pg_publication_rel pr "      \
	"JOIN pub ON pub.oid = pr.prpubid" schemas "), "                                                     \
	"pub_listed AS MATERIALIZED (SELECT lc.oid AS relid FROM pg_catalog.pg_publication_tables pt "       \
	"JOIN pg_catalog.pg_namespace ln ON ln.nspname = pt.schemaname "                                     \
	"JOIN pg_catalog.pg_class lc ON lc.relnamespace = ln.oid AND lc.relname = pt.tablename "             \
	"WHERE pt.pubname = $1) "
#define PG_PUB_WITH_14 PG_PUB_WITH_("")
#define PG_PUB_WITH_15                                                                                       \
	PG_PUB_WITH_(" UNION SELECT sc.oid FROM pg_catalog.pg_class sc "                                     \
		     "JOIN pg_catalog.pg_publication_namespace pn ON pn.pnnspid = sc.relnamespace "          \
		     "JOIN pub ON pub.oid = pn.pnpubid")
#define PG_PUB_JOIN                                                                                          \
	"CROSS JOIN LATERAL (SELECT EXISTS (SELECT FROM pub WHERE pub.puballtables) OR c.oid IN (SELECT "    \
	"relid FROM pub_member) OR (c.relispartition AND EXISTS (SELECT FROM "                               \
	"pg_catalog.pg_partition_ancestors(c.oid) a WHERE a.relid IN (SELECT relid FROM pub_member))) AS "   \
	"member, CASE WHEN NOT c.relispartition THEN CASE WHEN c.oid IN (SELECT relid FROM pub_listed) "     \
	"THEN c.oid END ELSE (SELECT a.relid FROM pg_catalog.pg_partition_ancestors(c.oid) WITH ORDINALITY " \
	"a(relid, depth) WHERE a.relid IN (SELECT relid FROM pub_listed) ORDER BY a.depth DESC LIMIT 1) "    \
	"END AS arrives) pub_c "

/* The tables cdc looks at, for a query over pg_class c and pg_namespace n. They are plain and
 * partitioned, outside the system schemas. */
#define PG_USER_TABLES                                                                                       \
	"c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "                 \
	"AND n.nspname NOT LIKE 'pg\\_%' "

/* The tables a publication could hold. The parameter $1 is the publication. There is one row per
 * table (plain or partitioned, outside the system schemas), with these columns:
 * - schema and table.
 * - whether the role may add it to a publication, because it owns it (is a member of its owner).
 * - whether the publication holds it (pub_c.member).
 * - the schema and name of the partitioned table it is a partition of (NULL when it is none).
 * Rows are sorted by schema, then table, as strcmp orders them. */
const char *source_pg_publication_tables_sql(int server_version);
typedef struct pg_table_row {
	const char *schema, *name;
	bool owned, published;
	const char *parent_schema, *parent_name; /* NULL if not a partition */
} pg_table_row;
/* source_pg_publication_tables_sql's answer as rows pointing into res (the caller frees the array). */
pg_table_row *source_pg_table_rows(const PGresult *res, size_t *count);

/* What a CREATE PUBLICATION for source.publish is. It holds the statement cdc runs with source.create,
 * and what that needs of the role. PostgreSQL lets a superuser create any publication, and others only
 * one FOR TABLE of tables they own.
 *
 * A superuser gets the forms that follow new tables by themselves. A plain "schema.*" becomes TABLES
 * IN SCHEMA (PostgreSQL 15+), and "*.*" becomes FOR ALL TABLES. Other patterns, and "schema.*" on 14,
 * are expanded into FOR TABLE against the tables that exist now.
 *
 * Any other role gets FOR TABLE of the matching tables it owns, and the others are left out. With
 * none matching, it is a publication of no table, filled as they come (source_pg_publication_additions).
 * When tables match but it owns none, the plan is refused (source_pg_publication_refusal says the ways out).
 *
 * A partition whose partitioned ancestor matches is left to that ancestor. Every form publishes via
 * the partition root, so a partitioned table's changes arrive under its own name. generated_columns
 * is source.publish_generated_columns (WITH publish_generated_columns = stored, PostgreSQL 18+). */
typedef struct pg_publication_plan {
	buf sql;
	buf superuser_sql;     /* what a superuser would create (the ways out name it) */
	bool superuser;	       /* of the role that asked */
	bool all_tables;       /* FOR ALL TABLES, superuser only */
	cfg_strlist schemas;   /* TABLES IN SCHEMA, superuser only */
	cfg_strlist tables;    /* FOR TABLE, pairs of schema, table (the role must own each) */
	cfg_strlist not_owned; /* matching tables (pairs) left out because the role does not own them */
	cfg_strlist no_match;  /* patterns with globs that match no table yet */
	cfg_strlist missing;   /* why tables named one by one do not exist, with the closest names */
	bool refused;	       /* tables match, and the role may publish none of them */
} pg_publication_plan;
/* The plan from the tables' rows, the pure part of source_pg_publication_plan_make. */
void source_pg_publication_plan_build(pg_publication_plan *plan, const char *publication,
				      const cfg_strlist *publish, const pg_table_row *rows, size_t count,
				      bool superuser, int server_version, bool generated_columns);
/* Lists the tables and makes the plan for conn's role and server. False with err (the connection's
 * message) if listing the tables failed. */
bool source_pg_publication_plan_make(PGconn *conn, const char *publication, const cfg_strlist *publish,
				     bool generated_columns, pg_publication_plan *plan, char *err,
				     size_t errlen) CDC_MUST_CHECK;
void source_pg_publication_plan_free(pg_publication_plan *plan);
/* Why a refused plan cannot be, and the ways out. They are the exact CREATE PUBLICATION a superuser
 * can run, making the role the tables' owner, or listing in source.publish tables it owns. */
void source_pg_publication_refusal(const pg_publication_plan *plan, const char *publication, char *err,
				   size_t errlen);
/* One line (no newline) naming a table the role may not add and the statement its owner runs. */
void source_pg_publication_not_owned(buf *out, const char *publication, const char *schema,
				     const char *table);
/* ALTER PUBLICATION ... ADD TABLE for the tables publish matches that the publication lacks and the
 * role owns. sql is left empty when there are none. Each is appended to added (schema, then table). A
 * partition whose partitioned ancestor matches is left to that ancestor. A table the role does not own
 * and that is not in warned yet ("schema"."table") goes to warned. It also goes to warnings, as a line
 * of source_pg_publication_not_owned. */
void source_pg_publication_additions(buf *sql, const char *publication, const cfg_strlist *publish,
				     const pg_table_row *rows, size_t count, cfg_strlist *added,
				     cfg_strlist *warned, buf *warnings);

#endif
