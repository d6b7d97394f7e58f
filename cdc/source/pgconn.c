/* pgconn.c: see pgconn.h. Connecting follows what the daemon has always done; `cdc doctor` asks the
 * same catalog questions through the same functions, so both read the server alike. */
#include "cdc/source/pgconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Session settings of the walsender: output functions then produce the text forms that
 * decoder/event.c parses, whatever the server's defaults. */
#define WALSENDER_OPTIONS                                                                                    \
	"-c datestyle=ISO -c timezone=UTC -c intervalstyle=postgres -c extra_float_digits=3 -c "             \
	"bytea_output=hex"
#define READ_ONLY_OPTIONS "-c default_transaction_read_only=on"

/* Secrets shorter than this are not redacted from messages: replacing every "ab" would garble them. */
#define SECRET_MIN 4
#define SECRET_MASK "********" /* as check-config masks them */

static void add_secret(pg_secrets *s, const char *v)
{
	if (v && strlen(v) >= SECRET_MIN && s->n < PG_MAX_SECRETS)
		s->v[s->n++] = xstrdup(v);
}

/* The password-like values of a connection string, and of a dbname that is one itself. */
static void collect_secrets(pg_secrets *s, const char *dsn, int depth)
{
	PQconninfoOption *opts = PQconninfoParse(dsn, NULL);
	if (!opts)
		return;
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		if (!o->val)
			continue;
		if (strcmp(o->keyword, "password") == 0 || strcmp(o->keyword, "sslpassword") == 0)
			add_secret(s, o->val);
		else if (strcmp(o->keyword, "dbname") == 0 && depth == 0 && strchr(o->val, '='))
			collect_secrets(s, o->val, 1);
		else if (strcmp(o->keyword, "dbname") == 0 && depth == 0 && strstr(o->val, "://"))
			collect_secrets(s, o->val, 1);
	}
	PQconninfoFree(opts);
}

void pg_secrets_init(pg_secrets *s, const char *dsn)
{
	*s = (pg_secrets){0};
	collect_secrets(s, dsn, 0);
	add_secret(s, getenv("PGPASSWORD"));
}

void pg_secrets_add(pg_secrets *s, const char *dsn)
{
	collect_secrets(s, dsn, 0);
}

void pg_secrets_free(pg_secrets *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	*s = (pg_secrets){0};
}

void pg_redact(const pg_secrets *s, char *err, size_t errlen)
{
	for (size_t i = 0; i < s->n; i++) {
		const char *secret = s->v[i], *p = err, *at;
		if (!strstr(err, secret))
			continue;
		/* one pass into a copy: a mask that contains the secret is not searched again */
		buf out = {0};
		while ((at = strstr(p, secret))) {
			buf_append(&out, p, (size_t)(at - p));
			buf_puts(&out, SECRET_MASK);
			p = at + strlen(secret);
		}
		buf_puts(&out, p);
		snprintf(err, errlen, "%s", out.data);
		buf_free(&out);
	}
}

/* What to do about a failed connection, for the failures whose fix is in source.dsn. */
static const char *connect_hint(const char *msg)
{
	if (strstr(msg, "certificate") || strstr(msg, "SSL") || strstr(msg, "ssl"))
		return " (TLS: sslmode, sslrootcert, sslcert and sslkey in source.dsn go to libpq as they "
		       "are; with "
		       "sslmode=verify-ca or verify-full, sslrootcert must name the CA that signed the "
		       "server's "
		       "certificate, and verify-full also needs the host name to match it)";
	if (strstr(msg, "password authentication failed") || strstr(msg, "no password supplied"))
		return " (check the password: source.dsn, PGPASSWORD or ~/.pgpass)";
	return "";
}

/* libpq quotes the part of a connection string it could not parse, or a whole URI, password
 * included: the message comes from the masked string instead. */
static void invalid_dsn_message(const char *dsn, char *err, size_t errlen)
{
	char *perr = NULL;
	char *masked = cfg_mask_dsn(dsn);
	PQconninfoOption *again = PQconninfoParse(masked, &perr);
	errf(err, errlen, "source.dsn is not a valid connection string: %.*s",
	     perr ? (int)strcspn(perr, "\n") : 0, perr ? perr : "");
	if (!perr)
		errf(err, errlen,
		     "source.dsn is not a valid connection string (check the quoting of its password: "
		     "'...' with \\' for a quote in key=value form, %%-escapes in a URI)");
	PQconninfoFree(again);
	PQfreemem(perr);
	free(masked);
}

PGconn *pg_connect(const char *dsn, pg_conn_kind kind, bool *invalid_dsn, char *err, size_t errlen)
{
	*invalid_dsn = false;
	char *perr = NULL;
	PQconninfoOption *opts = PQconninfoParse(dsn, &perr);
	if (!opts) {
		PQfreemem(perr);
		invalid_dsn_message(dsn, err, errlen);
		*invalid_dsn = true;
		return NULL;
	}
	size_t n = 0;
	for (PQconninfoOption *o = opts; o->keyword; o++)
		n++;
	const char **keys = xcalloc(n + 5, sizeof(char *));
	const char **vals = xcalloc(n + 5, sizeof(char *));
	size_t k = 0;
	const char *user_options = getenv("PGOPTIONS");
	bool has_timeout = getenv("PGCONNECT_TIMEOUT") != NULL;
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		if (!o->val)
			continue;
		if (strcmp(o->keyword, "options") == 0) {
			user_options = o->val;
			continue;
		}
		if (strcmp(o->keyword, "replication") == 0)
			continue;
		if (strcmp(o->keyword, "connect_timeout") == 0)
			has_timeout = true;
		keys[k] = o->keyword;
		vals[k++] = o->val;
	}
	buf options = {0};
	if (user_options && *user_options)
		buf_printf(&options, "%s ", user_options);
	if (kind == PG_CONN_REPLICATION)
		buf_puts(&options, WALSENDER_OPTIONS);
	else if (kind == PG_CONN_READ_ONLY)
		buf_puts(&options, READ_ONLY_OPTIONS);
	if (options.len) {
		keys[k] = "options";
		vals[k++] = options.data;
	}
	if (kind == PG_CONN_REPLICATION) {
		keys[k] = "replication";
		vals[k++] = "database";
	}
	if (!has_timeout) {
		keys[k] = "connect_timeout";
		vals[k++] = "10";
	}
	keys[k] = "fallback_application_name";
	vals[k++] = "cdc";
	keys[k] = NULL;
	vals[k] = NULL;
	PGconn *conn = PQconnectdbParams(keys, vals, 0);
	buf_free(&options);
	free(keys);
	free(vals);
	PQconninfoFree(opts);
	if (PQstatus(conn) != CONNECTION_OK) {
		char *msg = PQerrorMessage(conn);
		errf(err, errlen, "cannot connect to PostgreSQL: %.*s%s", (int)strcspn(msg, "\n"), msg,
		     connect_hint(msg));
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

int pg_protocol_for(int v)
{
	return v >= 160000 ? 4 : v >= 150000 ? 3 : v >= 140000 ? 2 : 1;
}

const char *pg_one_line(const char *msg)
{
	static char line[512];
	snprintf(line, sizeof(line), "%.*s", (int)strcspn(msg, "\n"), msg);
	return line;
}

void pg_append_quoted(buf *b, const char *s, char q)
{
	buf_putc(b, q);
	for (; *s; s++) {
		if (*s == q)
			buf_putc(b, q);
		buf_putc(b, *s);
	}
	buf_putc(b, q);
}

void pg_append_ident(buf *b, PGconn *conn, const char *name)
{
	char *q = PQescapeIdentifier(conn, name, strlen(name));
	if (q)
		buf_puts(b, q);
	else
		pg_append_quoted(b, name, '"'); /* not valid in the client encoding: the server will say so */
	PQfreemem(q);
}

/* On a standby the server's position is what it replayed. */
const char pg_slot_sql[] =
    "SELECT coalesce(plugin, ''), slot_type, coalesce(database, ''), coalesce(wal_status, ''), "
    "coalesce(confirmed_flush_lsn::text, '0/0'), coalesce(active_pid, 0), current_database(), "
    "safe_wal_size, pg_catalog.pg_size_bytes(pg_catalog.current_setting('max_slot_wal_keep_size')), "
    "coalesce((CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() "
    "ELSE pg_catalog.pg_current_wal_lsn() END)::text, '0/0'), "
    /* failover and synced exist from PostgreSQL 17 on: read by name, false before */
    "coalesce((pg_catalog.to_jsonb(s) ->> 'failover')::bool, false), "
    "coalesce((pg_catalog.to_jsonb(s) ->> 'synced')::bool, false), "
    "pg_catalog.to_jsonb(s) ? 'invalidation_reason', "
    "coalesce(pg_catalog.to_jsonb(s) ->> 'invalidation_reason', ''), "
    "(EXTRACT(epoch FROM (pg_catalog.to_jsonb(s) ->> 'inactive_since')::pg_catalog.timestamptz) * 1000000)"
    "::bigint, "
    "(SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'idle_replication_slot_timeout') "
    "FROM pg_catalog.pg_replication_slots s WHERE slot_name = $1";

void pg_slot_parse(const PGresult *res, pg_slot_row *row)
{
	memset(row, 0, sizeof(*row));
	row->exists = PQntuples(res) > 0;
	if (!row->exists)
		return;
	snprintf(row->plugin, sizeof(row->plugin), "%s", PQgetvalue(res, 0, 0));
	snprintf(row->type, sizeof(row->type), "%s", PQgetvalue(res, 0, 1));
	snprintf(row->database, sizeof(row->database), "%s", PQgetvalue(res, 0, 2));
	snprintf(row->wal_status, sizeof(row->wal_status), "%s", PQgetvalue(res, 0, 3));
	if (!lsn_parse(PQgetvalue(res, 0, 4), &row->confirmed_flush))
		row->confirmed_flush = 0;
	row->active_pid = atoi(PQgetvalue(res, 0, 5));
	snprintf(row->current_database, sizeof(row->current_database), "%s", PQgetvalue(res, 0, 6));
	row->safe_wal_size_known = !PQgetisnull(res, 0, 7);
	row->safe_wal_size = strtoll(PQgetvalue(res, 0, 7), NULL, 10);
	row->max_keep_size = strtoll(PQgetvalue(res, 0, 8), NULL, 10);
	if (!lsn_parse(PQgetvalue(res, 0, 9), &row->server_lsn))
		row->server_lsn = 0;
	row->lag_bytes = row->confirmed_flush && row->server_lsn > row->confirmed_flush
			     ? (int64_t)(row->server_lsn - row->confirmed_flush)
			     : 0;
	row->failover = PQgetvalue(res, 0, 10)[0] == 't';
	row->synced = PQgetvalue(res, 0, 11)[0] == 't';
	row->has_invalidation = strcmp(PQgetvalue(res, 0, 12), "t") == 0;
	snprintf(row->invalidation_reason, sizeof(row->invalidation_reason), "%s", PQgetvalue(res, 0, 13));
	row->inactive_since_us = strtoll(PQgetvalue(res, 0, 14), NULL, 10);
	row->idle_timeout_s = PQgetisnull(res, 0, 15) ? -1 : strtoll(PQgetvalue(res, 0, 15), NULL, 10);
}

static void strlist_add(cfg_strlist *l, const char *s)
{
	l->v = xrealloc(l->v, (l->n + 1) * sizeof(char *));
	l->v[l->n++] = xstrdup(s);
}

static void strlist_clear(cfg_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	*l = (cfg_strlist){0};
}

/* Adds the items of one publish pattern to p. */
static bool publish_items(PGconn *conn, const char *pattern, pg_publication_plan *p, bool *first, char *err,
			  size_t errlen)
{
	size_t schema_len =
	    strspn(pattern, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
	if (schema_len > 0 && strcmp(pattern + schema_len, ".*") == 0 && PQserverVersion(conn) >= 150000) {
		buf_puts(&p->sql, *first ? " FOR TABLES IN SCHEMA " : ", TABLES IN SCHEMA ");
		char schema[64];
		snprintf(schema, sizeof(schema), "%.*s", (int)schema_len, pattern);
		pg_append_ident(&p->sql, conn, schema);
		strlist_add(&p->schemas, schema);
		*first = false;
		return true;
	}
	PGresult *res =
	    PQexec(conn, "SELECT schemaname, tablename FROM pg_catalog.pg_tables "
			 "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		errf(err, errlen, "listing tables for source.publish failed: %s",
		     pg_one_line(PQerrorMessage(conn)));
		PQclear(res);
		return false;
	}
	int matched = 0;
	for (int i = 0; i < PQntuples(res); i++) {
		const char *schema = PQgetvalue(res, i, 0), *table = PQgetvalue(res, i, 1);
		if (!cfg_table_match(pattern, schema, table))
			continue;
		/* PostgreSQL 14 lists the tables after one TABLE; 15 repeats it per item */
		buf_puts(&p->sql, *first			    ? " FOR TABLE "
				  : PQserverVersion(conn) >= 150000 ? ", TABLE "
								    : ", ");
		pg_append_ident(&p->sql, conn, schema);
		buf_putc(&p->sql, '.');
		pg_append_ident(&p->sql, conn, table);
		strlist_add(&p->tables, schema);
		strlist_add(&p->tables, table);
		*first = false;
		matched++;
	}
	PQclear(res);
	if (!matched)
		strlist_add(&p->no_match, pattern);
	return true;
}

bool pg_publication_plan_make(PGconn *conn, const char *publication, const cfg_strlist *publish,
			      bool generated_columns, pg_publication_plan *p, char *err, size_t errlen)
{
	*p = (pg_publication_plan){0};
	buf_puts(&p->sql, "CREATE PUBLICATION ");
	pg_append_ident(&p->sql, conn, publication);
	bool first = true;
	for (size_t i = 0; i < publish->n; i++) {
		if (strcmp(publish->v[i], "*.*") == 0)
			p->all_tables = true;
		else if (!publish_items(conn, publish->v[i], p, &first, err, errlen))
			return false;
	}
	if (p->all_tables) {
		buf_reset(&p->sql);
		buf_puts(&p->sql, "CREATE PUBLICATION ");
		pg_append_ident(&p->sql, conn, publication);
		buf_puts(&p->sql, " FOR ALL TABLES");
		strlist_clear(&p->schemas);
		strlist_clear(&p->tables);
	}
	if (generated_columns)
		buf_puts(&p->sql, " WITH (publish_generated_columns = stored)");
	return true;
}

void pg_publication_plan_free(pg_publication_plan *p)
{
	buf_free(&p->sql);
	strlist_clear(&p->schemas);
	strlist_clear(&p->tables);
	strlist_clear(&p->no_match);
}
