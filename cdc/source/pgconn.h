/* pgconn.h: what every connection of cdc to PostgreSQL shares (the daemon's source and `cdc doctor`):
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

/* The password-like values of source.dsn (password and sslpassword, also inside a dbname that is a
 * connection string) and of PGPASSWORD, when 4 bytes or longer. */
typedef struct pg_secrets {
	char *v[PG_MAX_SECRETS];
	size_t n;
} pg_secrets;
void pg_secrets_init(pg_secrets *s, const char *dsn);
/* Adds the secrets of another connection string (source.primary_dsn). */
void pg_secrets_add(pg_secrets *s, const char *dsn);
void pg_secrets_free(pg_secrets *s);
/* Replaces every secret in err (NUL-terminated, errlen bytes) by "********", cutting the message
 * short if it must. */
void pg_redact(const pg_secrets *s, char *err, size_t errlen);

typedef enum pg_conn_kind {
	PG_CONN_ORDINARY,
	PG_CONN_REPLICATION, /* replication=database, with the walsender session settings decoding needs */
	/* ordinary, with default_transaction_read_only=on: every transaction of the session is read
	 * only, so no statement can write (cdc doctor) */
	PG_CONN_READ_ONLY,
} pg_conn_kind;

/* Connects with the user's connection string, adding only what cdc needs (a default connect_timeout,
 * the application name, and what kind asks for); TLS, passwords, PG* variables and .pgpass pass
 * through to libpq untouched. NULL with err saying what to do; *invalid_dsn then tells whether libpq
 * could not even parse dsn (no retry will help). */
PGconn *pg_connect(const char *dsn, pg_conn_kind kind, bool *invalid_dsn, char *err, size_t errlen);

/* The highest pgoutput protocol a server of this version (150008 for 15.8) speaks: 1, 2 (14:
 * streamed transactions), 3 (15: two-phase), 4 (16: parallel streaming). */
int pg_protocol_for(int server_version);

/* The first line of a libpq or server message (in a static buffer: use it before the next call). */
const char *pg_one_line(const char *msg);
/* s between quote characters q, each q inside doubled: an SQL identifier ('"'), an SQL or
 * replication-command string literal ('\'', standard_conforming_strings as walsenders parse them). */
void pg_append_quoted(buf *b, const char *s, char q);
/* An SQL identifier, quoted by libpq for conn's encoding. */
void pg_append_ident(buf *b, PGconn *conn, const char *name);

/* The replication slot as pg_replication_slots tells it. */
typedef struct pg_slot_row {
	bool exists;
	char plugin[64], type[16], database[128], wal_status[16];
	uint64_t confirmed_flush;
	int active_pid;
	bool safe_wal_size_known;   /* NULL unless max_slot_wal_keep_size is set */
	int64_t safe_wal_size;	    /* bytes that may still be written before the slot risks losing WAL */
	int64_t max_keep_size;	    /* max_slot_wal_keep_size in bytes; -1: unlimited */
	uint64_t server_lsn;	    /* the server's WAL position (on a standby: replayed); 0 unknown */
	int64_t lag_bytes;	    /* WAL between the server's position and confirmed_flush_lsn */
	bool failover, synced;	    /* PostgreSQL 17+: a failover slot; a standby's synchronized copy */
	char current_database[128]; /* of the connection that asked */
	/* PostgreSQL 17+ (has_invalidation false before): why the server invalidated the slot ("" while
	 * it is valid), and since when no process streams it (µs since the Unix epoch; 0 while one
	 * does). PostgreSQL 18+: idle_replication_slot_timeout in seconds (0 off; -1 before 18). */
	bool has_invalidation;
	char invalidation_reason[32];
	int64_t inactive_since_us;
	int64_t idle_timeout_s;
} pg_slot_row;
/* safe_wal_size under this share of max_slot_wal_keep_size is running low: cdc warns (the log,
 * /status, cdc doctor). */
#define PG_SAFE_WAL_LOW_PERCENT 20
/* The query behind pg_slot_row: parameter $1 the slot's name. The same on every version: the
 * columns 17 added are read through to_jsonb, 18's setting from pg_settings. */
extern const char pg_slot_sql[];
/* res: pg_slot_sql's answer (tuples). */
void pg_slot_parse(const PGresult *res, pg_slot_row *row);

/* What a CREATE PUBLICATION for source.publish is: the statement cdc runs with source.create, and
 * what it needs of the role. A plain "schema.*" becomes TABLES IN SCHEMA (PostgreSQL 15+), so tables
 * created later are published too; "*.*" FOR ALL TABLES; other patterns (and every one on 14) are
 * expanded against the tables that exist now into FOR TABLE. generated_columns:
 * source.publish_generated_columns (WITH publish_generated_columns = stored, PostgreSQL 18+). */
typedef struct pg_publication_plan {
	buf sql;
	bool all_tables;      /* FOR ALL TABLES: superuser only */
	cfg_strlist schemas;  /* TABLES IN SCHEMA: superuser only */
	cfg_strlist tables;   /* FOR TABLE: pairs of schema, table; the role must own each */
	cfg_strlist no_match; /* patterns that match no table yet */
} pg_publication_plan;
/* False with err (the connection's message) if listing the tables failed. */
bool pg_publication_plan_make(PGconn *conn, const char *publication, const cfg_strlist *publish,
			      bool generated_columns, pg_publication_plan *p, char *err,
			      size_t errlen) CDC_MUST_CHECK;
void pg_publication_plan_free(pg_publication_plan *p);

#endif
