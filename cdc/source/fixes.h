/* What fixes a problem of the database, written once for cdc doctor and cdc run alike. That is the SQL
 * to run as printed, and the words around it (whom to run it as, what must follow). doctor prints them
 * as its "fix" and "sql" lines, and cdc run's error ends with the same text. */
#ifndef CDC_FIXES_H
#define CDC_FIXES_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "decoder/base/util.h"

typedef struct pg_fix {
	buf words; /* what to do, in words */
	buf sql;   /* statements that run as printed, each ending with ';' (empty if none) */
} pg_fix;

void source_fix_free(pg_fix *fix);
/* "fix: WORDS; sql: SQL", as cdc doctor's lines say them. cdc run's errors end with it. */
void source_fix_text(const pg_fix *fix, buf *out);

/* A server setting to change to value. The fix is ALTER SYSTEM, then a reload, or a restart with
 * restart, when that takes effect. pg_settings may say the value comes from the server's command line
 * (or another place ALTER SYSTEM does not override). The fix then says where to change it instead, and
 * has no SQL. False with err when the setting cannot be read. */
bool source_fix_setting(PGconn *conn, const char *name, const char *value, bool restart, pg_fix *fix,
			char *err, size_t errlen) CDC_MUST_CHECK;
/* wal_level is not logical. The fix is source_fix_setting's, and what a managed service has instead. */
bool source_fix_wal_level(PGconn *conn, pg_fix *fix, char *err, size_t errlen) CDC_MUST_CHECK;
/* Every replication slot is in use (or every WAL sender, with senders). The fix is one more, or a
 * slot freed. */
bool source_fix_slots_full(PGconn *conn, bool senders, pg_fix *fix, char *err, size_t errlen) CDC_MUST_CHECK;
/* The role lacks REPLICATION. The fix is ALTER ROLE, as a superuser. */
void source_fix_role_replication(const char *role, pg_fix *fix);
/* The slot does not exist and cdc may not create it. */
void source_fix_create_slot(const char *slot, pg_fix *fix);
/* The publication does not exist and cdc may not create it. create_sql is the statement for the
 * role (pg_publication_plan's). */
void source_fix_create_publication(const char *create_sql, pg_fix *fix);
/* The role may not CREATE in the database, which a publication needs. The fix is to GRANT it, or to
 * have the tables' owner create the publication (create_sql) beforehand. */
void source_fix_create_on_database(const char *database, const char *role, const char *create_sql,
				   pg_fix *fix);

#endif
