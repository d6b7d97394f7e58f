/* See fixes.h. Every statement here runs as printed. Names are quoted, values are literals, and
 * nothing stands for a part the reader must fill in. */
#include "cdc/source/fixes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/source/pgconn.h"

void source_fix_free(pg_fix *f)
{
	buf_free(&f->words);
	buf_free(&f->sql);
}

void source_fix_text(const pg_fix *f, buf *out)
{
	buf_printf(out, "fix: %s", f->words.data ? f->words.data : "");
	if (f->sql.len)
		buf_printf(out, "; sql: %s", f->sql.data);
}

bool source_fix_setting(PGconn *conn, const char *name, const char *value, bool restart, pg_fix *f, char *err,
			size_t errlen)
{
	const char *params[] = {name};
	PGresult *res =
	    PQexecParams(conn,
			 "SELECT setting, source, COALESCE(sourcefile, '') FROM pg_catalog.pg_settings "
			 "WHERE name = $1",
			 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		util_errf(err, errlen, "cannot read setting %s: %s", name,
			  source_pg_one_line(PQerrorMessage(conn)));
		PQclear(res);
		return false;
	}
	const char *now = PQgetvalue(res, 0, 0), *source = PQgetvalue(res, 0, 1),
		   *file = PQgetvalue(res, 0, 2);
	/* postgresql.auto.conf, which ALTER SYSTEM writes, is read after the other files and overrides
	 * them. A value given on the command line (postgres -c, pg_ctl -o) overrides it in turn. */
	size_t n = strlen(file);
	bool auto_conf = n >= 20 && strcmp(file + n - 20, "postgresql.auto.conf") == 0;
	if (strcmp(source, "default") == 0 || strcmp(source, "configuration file") == 0 || auto_conf) {
		buf_printf(&f->sql, "ALTER SYSTEM SET %s = ", name);
		source_pg_append_quoted(&f->sql, value, '\'');
		buf_puts(&f->sql, restart ? ";" : "; SELECT pg_catalog.pg_reload_conf();");
		buf_printf(&f->words, "as a superuser%s", restart ? ", then restart PostgreSQL" : "");
	} else {
		buf_printf(
		    &f->words,
		    "%s comes from the server's %s (%s=%s), which ALTER SYSTEM does not override: set %s "
		    "= %s where the server is started (postgres -c, pg_ctl -o, its service's options)%s",
		    name, source, name, now, name, value, restart ? ", then restart PostgreSQL" : "");
	}
	PQclear(res);
	return true;
}

bool source_fix_wal_level(PGconn *conn, pg_fix *f, char *err, size_t errlen)
{
	if (!source_fix_setting(conn, "wal_level", "logical", true, f, err, errlen))
		return false;
	buf_puts(&f->words, " (on a managed service, its logical replication parameter instead, e.g. "
			    "rds.logical_replication = 1)");
	return true;
}

bool source_fix_slots_full(PGconn *conn, bool senders, pg_fix *f, char *err, size_t errlen)
{
	PGresult *res = PQexec(conn, senders ? "SELECT count(*) FROM pg_catalog.pg_stat_replication"
					     : "SELECT count(*) FROM pg_catalog.pg_replication_slots");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		util_errf(err, errlen, "cannot count the %s: %s",
			  senders ? "WAL senders" : "replication slots",
			  source_pg_one_line(PQerrorMessage(conn)));
		PQclear(res);
		return false;
	}
	char more[32];
	snprintf(more, sizeof(more), "%ld", atol(PQgetvalue(res, 0, 0)) + 1);
	PQclear(res);
	if (!source_fix_setting(conn, senders ? "max_wal_senders" : "max_replication_slots", more, true, f,
				err, errlen))
		return false;
	if (!senders)
		buf_puts(&f->words, "; or drop a slot nothing uses (pg_drop_replication_slot)");
	return true;
}

void source_fix_role_replication(const char *role, pg_fix *f)
{
	buf_puts(&f->words, "as a superuser");
	buf_puts(&f->sql, "ALTER ROLE ");
	source_pg_append_quoted(&f->sql, role, '"');
	buf_puts(&f->sql, " REPLICATION;");
}

void source_fix_create_slot(const char *slot, pg_fix *f)
{
	buf_puts(&f->words, "as the role of source.dsn, or set source.create: true");
	buf_puts(&f->sql, "SELECT pg_catalog.pg_create_logical_replication_slot(");
	source_pg_append_quoted(&f->sql, slot, '\'');
	buf_puts(&f->sql, ", 'pgoutput');");
}

void source_fix_create_publication(const char *create_sql, pg_fix *f)
{
	buf_puts(&f->words, "as the tables' owner or a superuser, or set source.create: true");
	buf_printf(&f->sql, "%s;", create_sql);
}

void source_fix_create_on_database(const char *database, const char *role, const char *create_sql, pg_fix *f)
{
	buf_printf(&f->words,
		   "as a superuser or the database's owner; or create the publication beforehand as its "
		   "tables' owner: %s",
		   create_sql);
	buf_puts(&f->sql, "GRANT CREATE ON DATABASE ");
	source_pg_append_quoted(&f->sql, database, '"');
	buf_puts(&f->sql, " TO ");
	source_pg_append_quoted(&f->sql, role, '"');
	buf_puts(&f->sql, ";");
}
