/* See pgconn.h. Connecting follows what the daemon has always done. `cdc doctor` asks the same
 * catalog questions through the same functions, so both read the server alike. */
#include "cdc/source/pgconn.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdc/match/match.h"
#include "decoder/base/net.h"
#include "decoder/base/tls.h"

/* Session settings of the walsender. Output functions then produce the text forms that
 * decoder/event.c parses, whatever the server's defaults. */
#define WALSENDER_OPTIONS                                                                                    \
	"-c datestyle=ISO -c timezone=UTC -c intervalstyle=postgres -c extra_float_digits=3 -c "             \
	"bytea_output=hex"
/* Set once connected, not as a startup option. Otherwise libpq's target_session_attrs=read-write (the
 * multi-host connection string that follows the primary) would find every host read only. */
#define READ_ONLY_SET "SET default_transaction_read_only = on"

/* Secrets shorter than this are not redacted from messages. Replacing every "ab" would garble them. */
#define SECRET_MIN 4
#define SECRET_MASK "********" /* as check-config masks them */

static void add_secret(pg_secrets *s, const char *v)
{
	if (v && strlen(v) >= SECRET_MIN && s->n < PG_MAX_SECRETS)
		s->v[s->n++] = util_xstrdup(v);
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

void source_pg_secrets_init(pg_secrets *s, const char *dsn)
{
	*s = (pg_secrets){0};
	collect_secrets(s, dsn, 0);
	add_secret(s, getenv("PGPASSWORD"));
}

void source_pg_secrets_add(pg_secrets *s, const char *dsn)
{
	collect_secrets(s, dsn, 0);
}

void source_pg_secrets_add_value(pg_secrets *s, const char *secret)
{
	add_secret(s, secret);
}

void source_pg_secrets_free(pg_secrets *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	*s = (pg_secrets){0};
}

void source_pg_redact(const pg_secrets *s, char *err, size_t errlen)
{
	for (size_t i = 0; i < s->n; i++) {
		const char *secret = s->v[i], *p = err, *at;
		if (!strstr(err, secret))
			continue;
		/* one pass into a copy, so a mask that contains the secret is not searched again */
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

/* What to do about a failed connection, for the failures whose fix is in source.dsn or on the server.
 * It is the first hint whose words the message holds (libpq's, the server's, or tls_why's). */
#define TRUST_HINT                                                                                           \
	" (sslrootcert in source.dsn must name the CA that signed the server's certificate, or the root of " \
	"its chain)"
static const struct {
	const char *says, *hint;
} HINTS[] = {
    {"certificate has expired",
     " (the server's certificate has expired: renew it, ssl_cert_file on the server)"},
    {"certificate is not yet valid",
     " (the server's certificate is not valid yet: check the clocks of the server and of this machine)"},
    {"unable to get local issuer certificate", TRUST_HINT},
    {"self-signed certificate", TRUST_HINT},
    {"does not match host name",
     " (sslmode=verify-full checks that the certificate names the host of source.dsn: connect with a name "
     "it holds, or use sslmode=verify-ca)"},
    {"requires a valid client certificate",
     " (the role logs in with a client certificate: give it with sslcert and sslkey in source.dsn)"},
    {"certificate authentication failed",
     " (the client certificate's common name must be the role's name, or be mapped to it in pg_ident.conf)"},
    {"password authentication failed",
     " (check the password: source.password, source.dsn, PGPASSWORD or ~/.pgpass)"},
    {"no password supplied", " (check the password: source.password, source.dsn, PGPASSWORD or ~/.pgpass)"},
    {"certificate", " (TLS: sslmode, sslrootcert, sslcert and sslkey in source.dsn go to libpq as they are)"},
    {"SSL", " (TLS: sslmode, sslrootcert, sslcert and sslkey in source.dsn go to libpq as they are)"},
};

static const char *connect_hint(const char *msg, const char *why)
{
	for (size_t i = 0; i < sizeof HINTS / sizeof *HINTS; i++)
		if (strstr(msg, HINTS[i].says) || strstr(why, HINTS[i].says))
			return HINTS[i].hint;
	return "";
}

/* The CA file libpq trusted, sslrootcert, else ~/.postgresql/root.crt. NULL for "system" (16+). */
static void root_cert(PGconn *conn, char *out, size_t outlen, bool *verify_full)
{
	const char *rootcert = NULL;
	PQconninfoOption *opts = PQconninfo(conn);
	for (PQconninfoOption *o = opts; o && o->keyword; o++) {
		if (strcmp(o->keyword, "sslrootcert") == 0 && o->val && *o->val)
			snprintf(out, outlen, "%s", rootcert = o->val);
		else if (strcmp(o->keyword, "sslmode") == 0)
			*verify_full = o->val && strcmp(o->val, "verify-full") == 0;
	}
	PQconninfoFree(opts);
	if (!rootcert) {
		const char *home = getenv("HOME");
		struct passwd *pw = home ? NULL : getpwuid(geteuid());
		snprintf(out, outlen, "%s/.postgresql/root.crt", home ? home : pw ? pw->pw_dir : "");
	}
}

/* Why the server's certificate failed libpq's check, since libpq 15 says only "certificate verify
 * failed". cdc asks the server itself, as libpq did, with PostgreSQL's SSLRequest, then a TLS handshake
 * trusting the same CA file. It says what OpenSSL finds wrong with the certificate. "" when it cannot
 * tell. */
static void tls_why(PGconn *conn, char *out, size_t outlen)
{
	*out = '\0';
	const char *host = PQhost(conn), *port = PQport(conn), *addr = PQhostaddr(conn);
	if (!host || !*host || host[0] == '/' || !port || !*port)
		return;
	char cafile[4096], err[512];
	bool verify_full = false;
	root_cert(conn, cafile, sizeof cafile, &verify_full);
	int fd = net_tcp_connect_timeout(addr && *addr ? addr : host, port, 5000, err, sizeof err);
	if (fd < 0)
		return;
	static const unsigned char ssl_request[8] = {0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}; /* 80877103 */
	char answer = 0;
	tls_conn *t = NULL;
	if (write(fd, ssl_request, sizeof ssl_request) == (ssize_t)sizeof ssl_request &&
	    read(fd, &answer, 1) == 1 && answer == 'S' &&
	    (t = tls_open(fd, host, strcmp(cafile, "system") ? cafile : NULL, err, sizeof err))) {
		char why[1024];
		if (tls_verdict(t, verify_full, why, sizeof why))
			util_errf(out, outlen, ": %s (checked against %s)", why, cafile);
	}
	tls_close(t);
	close(fd);
}

/* libpq quotes the part of a connection string it could not parse, or a whole URI, password
 * included. So the message comes from the masked string instead. */
static void invalid_dsn_message(const char *dsn, char *err, size_t errlen)
{
	char *perr = NULL;
	char *masked = cfg_mask_dsn(dsn);
	PQconninfoOption *again = PQconninfoParse(masked, &perr);
	util_errf(err, errlen, "source.dsn is not a valid connection string: %.*s",
		  perr ? (int)strcspn(perr, "\n") : 0, perr ? perr : "");
	if (!perr)
		util_errf(err, errlen,
			  "source.dsn is not a valid connection string (check the quoting of its password: "
			  "'...' with \\' for a quote in key=value form, %%-escapes in a URI)");
	PQconninfoFree(again);
	PQfreemem(perr);
	free(masked);
}

PGconn *source_pg_connect(const char *dsn, const char *password, pg_conn_kind kind, bool *invalid_dsn,
			  char *err, size_t errlen)
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
	const char **keys = util_xcalloc(n + 6, sizeof(char *));
	const char **vals = util_xcalloc(n + 6, sizeof(char *));
	size_t k = 0;
	if (password && *password) {
		/* It goes first. The last non-empty value of a keyword wins, so dsn's own password
		 * overrides it. */
		keys[k] = "password";
		vals[k++] = password;
	}
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
		char *msg = PQerrorMessage(conn), why[1200] = "";
		if (strstr(msg, "certificate verify failed"))
			tls_why(conn, why, sizeof why);
		util_errf(err, errlen, "cannot connect to PostgreSQL: %.*s%s%s", (int)strcspn(msg, "\n"), msg,
			  why, connect_hint(msg, why));
		PQfinish(conn);
		return NULL;
	}
	if (kind == PG_CONN_READ_ONLY) {
		PGresult *res = PQexec(conn, READ_ONLY_SET);
		bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
		PQclear(res);
		if (!ok) {
			util_errf(err, errlen, "cannot make the session read only (%s): %s", READ_ONLY_SET,
				  source_pg_one_line(PQerrorMessage(conn)));
			PQfinish(conn);
			return NULL;
		}
	}
	return conn;
}

int source_pg_protocol_for(int v)
{
	return v >= 160000 ? 4 : v >= 150000 ? 3 : v >= 140000 ? 2 : 1;
}

const char *source_pg_one_line(const char *msg)
{
	static char line[512];
	snprintf(line, sizeof(line), "%.*s", (int)strcspn(msg, "\n"), msg);
	return line;
}

void source_pg_append_quoted(buf *b, const char *s, char q)
{
	buf_putc(b, q);
	for (; *s; s++) {
		if (*s == q)
			buf_putc(b, q);
		buf_putc(b, *s);
	}
	buf_putc(b, q);
}

void source_pg_append_ident(buf *b, PGconn *conn, const char *name)
{
	char *q = PQescapeIdentifier(conn, name, strlen(name));
	if (q)
		buf_puts(b, q);
	else
		source_pg_append_quoted(b, name,
					'"'); /* invalid in the client encoding (the server says so) */
	PQfreemem(q);
}

/* On a standby the server's position is what it replayed. */
const char pg_slot_sql[] =
    "SELECT coalesce(plugin, ''), slot_type, coalesce(database, ''), coalesce(wal_status, ''), "
    "coalesce(confirmed_flush_lsn::text, '0/0'), coalesce(active_pid, 0), current_database(), "
    "safe_wal_size, pg_catalog.pg_size_bytes(pg_catalog.current_setting('max_slot_wal_keep_size')), "
    "coalesce((CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() "
    "ELSE pg_catalog.pg_current_wal_lsn() END)::text, '0/0'), "
    /* failover and synced exist from PostgreSQL 17 on, read by name, false before */
    "coalesce((pg_catalog.to_jsonb(s) ->> 'failover')::bool, false), "
    "coalesce((pg_catalog.to_jsonb(s) ->> 'synced')::bool, false), "
    "pg_catalog.to_jsonb(s) ? 'invalidation_reason', "
    "coalesce(pg_catalog.to_jsonb(s) ->> 'invalidation_reason', ''), "
    "(EXTRACT(epoch FROM (pg_catalog.to_jsonb(s) ->> 'inactive_since')::pg_catalog.timestamptz) * 1000000)"
    "::bigint, "
    "(SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'idle_replication_slot_timeout') "
    "FROM pg_catalog.pg_replication_slots s WHERE slot_name = $1";

void source_pg_slot_parse(const PGresult *res, pg_slot_row *row)
{
	memset(row, 0, sizeof(*row));
	row->exists = PQntuples(res) > 0;
	if (!row->exists)
		return;
	snprintf(row->plugin, sizeof(row->plugin), "%s", PQgetvalue(res, 0, 0));
	snprintf(row->type, sizeof(row->type), "%s", PQgetvalue(res, 0, 1));
	snprintf(row->database, sizeof(row->database), "%s", PQgetvalue(res, 0, 2));
	snprintf(row->wal_status, sizeof(row->wal_status), "%s", PQgetvalue(res, 0, 3));
	if (!util_lsn_parse(PQgetvalue(res, 0, 4), &row->confirmed_flush))
		row->confirmed_flush = 0;
	row->active_pid = atoi(PQgetvalue(res, 0, 5));
	snprintf(row->current_database, sizeof(row->current_database), "%s", PQgetvalue(res, 0, 6));
	row->safe_wal_size_known = !PQgetisnull(res, 0, 7);
	row->safe_wal_size = strtoll(PQgetvalue(res, 0, 7), NULL, 10);
	row->max_keep_size = strtoll(PQgetvalue(res, 0, 8), NULL, 10);
	if (!util_lsn_parse(PQgetvalue(res, 0, 9), &row->server_lsn))
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

bool source_pg_slot_being_created(const pg_slot_row *row)
{
	return row->exists && strcmp(row->type, "logical") == 0 && !row->plugin[0] && row->active_pid;
}

void source_pg_append_table(buf *b, const char *schema, const char *table)
{
	source_pg_append_quoted(b, schema, '"');
	buf_putc(b, '.');
	source_pg_append_quoted(b, table, '"');
}

#define PUBLICATION_TABLES                                                                                   \
	"SELECT n.nspname, c.relname, pg_catalog.pg_has_role(c.relowner, 'USAGE'), pub_c.member, "           \
	"pn.nspname, "                                                                                       \
	"p.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "     \
	"LEFT JOIN pg_catalog.pg_inherits i ON c.relispartition AND i.inhrelid = c.oid "                     \
	"LEFT JOIN pg_catalog.pg_class p ON p.oid = i.inhparent "                                            \
	"LEFT JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace " PG_PUB_JOIN                       \
	"WHERE " PG_USER_TABLES "ORDER BY n.nspname COLLATE \"C\", c.relname COLLATE \"C\""

const char *source_pg_publication_tables_sql(int server_version)
{
	static const char sql14[] = PG_PUB_WITH_14 PUBLICATION_TABLES;
	static const char sql15[] = PG_PUB_WITH_15 PUBLICATION_TABLES;
	return server_version >= 150000 ? sql15 : sql14;
}

pg_table_row *source_pg_table_rows(const PGresult *res, size_t *n)
{
	*n = PQnfields(res) == 6 ? (size_t)PQntuples(res) : 0;
	pg_table_row *rows = util_xcalloc(*n + 1, sizeof(*rows));
	for (size_t i = 0; i < *n; i++) {
		int r = (int)i;
		bool partition = !PQgetisnull(res, r, 4) && !PQgetisnull(res, r, 5);
		rows[i] = (pg_table_row){PQgetvalue(res, r, 0),
					 PQgetvalue(res, r, 1),
					 PQgetvalue(res, r, 2)[0] == 't',
					 PQgetvalue(res, r, 3)[0] == 't',
					 partition ? PQgetvalue(res, r, 4) : NULL,
					 partition ? PQgetvalue(res, r, 5) : NULL};
	}
	return rows;
}

static bool matched_name(const cfg_strlist *publish, const char *schema, const char *name)
{
	for (size_t i = 0; i < publish->n; i++)
		if (match_table(publish->v[i], schema, name))
			return true;
	return false;
}

static bool matched(const cfg_strlist *publish, const pg_table_row *r)
{
	return matched_name(publish, r->schema, r->name);
}

/* The row of schema.name. Rows are sorted as strcmp orders schema, then table. */
static const pg_table_row *find_row(const pg_table_row *rows, size_t n, const char *schema, const char *name)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(rows[mid].schema, schema);
		c = c ? c : strcmp(rows[mid].name, name);
		if (!c)
			return &rows[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* A partitioned ancestor of r matches publish, and publishing it publishes r. */
static bool ancestor_matched(const cfg_strlist *publish, const pg_table_row *rows, size_t n,
			     const pg_table_row *r)
{
	for (size_t depth = 0; r && r->parent_name && depth < n; depth++) {
		if (matched_name(publish, r->parent_schema, r->parent_name))
			return true;
		r = find_row(rows, n, r->parent_schema, r->parent_name);
	}
	return false;
}

/* For "schema.*" with a plain schema name, the schema's length, else 0. */
static size_t whole_schema(const char *pattern)
{
	size_t len = strspn(pattern, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
	return len > 0 && strcmp(pattern + len, ".*") == 0 ? len : 0;
}

/* Every publication cdc creates sends a partition's changes under its partitioned table's name. With
 * source.publish_generated_columns (PostgreSQL 18) it also sends stored generated columns. */
#define WITH_VIA_ROOT " WITH (publish_via_partition_root = true)"
#define WITH_VIA_ROOT_GENERATED                                                                              \
	" WITH (publish_via_partition_root = true, publish_generated_columns = stored)"

/* Before a table of FOR TABLE. PostgreSQL 15 repeats TABLE after a comma, since a name alone would
 * go on the list before it, which may be TABLES IN SCHEMA. 14 knows tables only and lists them after
 * one TABLE. */
static const char *table_separator(bool first, int server_version)
{
	return first ? " FOR TABLE " : server_version >= 150000 ? ", TABLE " : ", ";
}

/* What a superuser creates, the forms that follow new tables by themselves where they exist. With
 * holds, what it holds goes into p. */
static void superuser_sql(buf *sql, const char *publication, const cfg_strlist *publish,
			  const pg_table_row *rows, size_t n, int server_version, pg_publication_plan *holds)
{
	buf_puts(sql, "CREATE PUBLICATION ");
	source_pg_append_quoted(sql, publication, '"');
	for (size_t i = 0; i < publish->n; i++)
		if (strcmp(publish->v[i], "*.*") == 0) {
			buf_puts(sql, " FOR ALL TABLES");
			if (holds)
				holds->all_tables = true;
			return;
		}
	bool first = true;
	for (size_t i = 0; i < publish->n; i++) {
		size_t len = whole_schema(publish->v[i]);
		if (server_version >= 150000 && len) {
			char schema[64];
			snprintf(schema, sizeof(schema), "%.*s", (int)len, publish->v[i]);
			buf_puts(sql, first ? " FOR TABLES IN SCHEMA " : ", TABLES IN SCHEMA ");
			source_pg_append_quoted(sql, schema, '"');
			if (holds)
				cfg_strlist_push(&holds->schemas, schema);
			first = false;
			continue;
		}
		for (size_t k = 0; k < n; k++)
			if (match_table(publish->v[i], rows[k].schema, rows[k].name) &&
			    !ancestor_matched(publish, rows, n, &rows[k])) {
				buf_puts(sql, table_separator(first, server_version));
				source_pg_append_table(sql, rows[k].schema, rows[k].name);
				if (holds) {
					cfg_strlist_push(&holds->tables, rows[k].schema);
					cfg_strlist_push(&holds->tables, rows[k].name);
				}
				first = false;
			}
	}
}

/* Why source.publish names a table that does not exist, with the closest names of rows. */
static void missing_table(cfg_strlist *out, const char *pattern, const pg_table_row *rows, size_t n)
{
	match_suggest m;
	match_suggest_start(&m, pattern);
	for (size_t k = 0; k < n; k++)
		match_suggest_add(&m, rows[k].schema, rows[k].name);
	char closest[MATCH_SUGGEST * MATCH_QUALIFIED_MAX + 32];
	buf why = {0};
	buf_printf(&why, "source.publish names table %s, which does not exist%s%s", pattern,
		   m.n ? ": " : " (nor a table of a similar name)",
		   match_suggest_text(&m, closest, sizeof(closest)));
	cfg_strlist_push(out, why.data);
	buf_free(&why);
}

void source_pg_publication_plan_build(pg_publication_plan *p, const char *publication,
				      const cfg_strlist *publish, const pg_table_row *rows, size_t n,
				      bool superuser, int server_version, bool generated_columns)
{
	*p = (pg_publication_plan){.superuser = superuser};
	for (size_t i = 0; i < publish->n; i++) {
		bool hit = false;
		for (size_t k = 0; k < n && !hit; k++)
			hit = match_table(publish->v[i], rows[k].schema, rows[k].name);
		if (!hit && !match_table_literal(publish->v[i]))
			cfg_strlist_push(&p->no_match, publish->v[i]);
		else if (!hit)
			missing_table(&p->missing, publish->v[i], rows, n);
	}
	superuser_sql(&p->superuser_sql, publication, publish, rows, n, server_version, superuser ? p : NULL);
	const char *with = generated_columns ? WITH_VIA_ROOT_GENERATED : WITH_VIA_ROOT;
	buf_puts(&p->superuser_sql, with);
	if (superuser) {
		buf_append(&p->sql, p->superuser_sql.data, p->superuser_sql.len);
		return;
	}
	size_t matching = 0;
	buf_puts(&p->sql, "CREATE PUBLICATION ");
	source_pg_append_quoted(&p->sql, publication, '"');
	for (size_t k = 0; k < n; k++) {
		if (!matched(publish, &rows[k]) || ancestor_matched(publish, rows, n, &rows[k]))
			continue;
		matching++;
		cfg_strlist *to = rows[k].owned ? &p->tables : &p->not_owned;
		if (rows[k].owned) {
			buf_puts(&p->sql, table_separator(!p->tables.n, server_version));
			source_pg_append_table(&p->sql, rows[k].schema, rows[k].name);
		}
		cfg_strlist_push(to, rows[k].schema);
		cfg_strlist_push(to, rows[k].name);
	}
	buf_puts(&p->sql, with);
	p->refused = matching && !p->tables.n;
}

void source_pg_publication_refusal(const pg_publication_plan *p, const char *publication, char *err,
				   size_t errlen)
{
	buf list = {0};
	for (size_t i = 0; i + 1 < p->not_owned.n && list.len < 400; i += 2) {
		buf_puts(&list, i ? ", " : "");
		source_pg_append_table(&list, p->not_owned.v[i], p->not_owned.v[i + 1]);
	}
	util_errf(
	    err, errlen,
	    "cdc's role may not create publication %s: FOR TABLES IN SCHEMA and FOR ALL TABLES need a "
	    "superuser, and FOR TABLE the tables' ownership, but the role owns none of the %zu tables "
	    "source.publish matches (%s%s). Ways out: have a superuser run %s; or make cdc's role their "
	    "owner (ALTER TABLE ... OWNER TO ...); or list in source.publish tables the role owns",
	    publication, p->not_owned.n / 2, list.data ? list.data : "",
	    list.len >= 400 && p->not_owned.n > 2 ? ", ..." : "", p->superuser_sql.data);
	buf_free(&list);
}

void source_pg_publication_not_owned(buf *out, const char *publication, const char *schema, const char *table)
{
	buf q = {0};
	source_pg_append_table(&q, schema, table);
	buf_printf(out,
		   "table %s matches source.publish, but cdc's role does not own it, so cdc cannot add it "
		   "to publication ",
		   q.data);
	source_pg_append_quoted(out, publication, '"');
	buf_puts(out, ": its owner or a superuser can run ALTER PUBLICATION ");
	source_pg_append_quoted(out, publication, '"');
	buf_printf(out, " ADD TABLE %s", q.data);
	buf_free(&q);
}

bool source_pg_publication_plan_make(PGconn *conn, const char *publication, const cfg_strlist *publish,
				     bool generated_columns, pg_publication_plan *p, char *err, size_t errlen)
{
	const char *params[] = {publication};
	*p = (pg_publication_plan){0};
	PGresult *res = PQexecParams(conn, source_pg_publication_tables_sql(PQserverVersion(conn)), 1, NULL,
				     params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		util_errf(err, errlen, "listing tables for source.publish failed: %s",
			  source_pg_one_line(PQerrorMessage(conn)));
		PQclear(res);
		return false;
	}
	const char *su = PQparameterStatus(conn, "is_superuser");
	size_t n;
	pg_table_row *rows = source_pg_table_rows(res, &n);
	source_pg_publication_plan_build(p, publication, publish, rows, n, su && strcmp(su, "on") == 0,
					 PQserverVersion(conn), generated_columns);
	free(rows);
	PQclear(res);
	return true;
}

void source_pg_publication_plan_free(pg_publication_plan *p)
{
	buf_free(&p->sql);
	buf_free(&p->superuser_sql);
	cfg_strlist_free(&p->schemas);
	cfg_strlist_free(&p->tables);
	cfg_strlist_free(&p->not_owned);
	cfg_strlist_free(&p->no_match);
	cfg_strlist_free(&p->missing);
}

void source_pg_publication_additions(buf *sql, const char *publication, const cfg_strlist *publish,
				     const pg_table_row *rows, size_t n, cfg_strlist *added,
				     cfg_strlist *warned, buf *warnings)
{
	buf q = {0};
	for (size_t k = 0; k < n; k++) {
		if (rows[k].published || !matched(publish, &rows[k]) ||
		    ancestor_matched(publish, rows, n, &rows[k]))
			continue;
		buf_reset(&q);
		source_pg_append_table(&q, rows[k].schema, rows[k].name);
		if (!rows[k].owned) {
			bool known = false;
			for (size_t i = 0; i < warned->n && !known; i++)
				known = strcmp(warned->v[i], q.data) == 0;
			if (!known) {
				cfg_strlist_push(warned, q.data);
				source_pg_publication_not_owned(warnings, publication, rows[k].schema,
								rows[k].name);
				buf_putc(warnings, '\n');
			}
			continue;
		}
		if (!sql->len) {
			buf_puts(sql, "ALTER PUBLICATION ");
			source_pg_append_quoted(sql, publication, '"');
			buf_puts(sql, " ADD TABLE ");
		} else {
			buf_puts(sql, ", ");
		}
		buf_append(sql, q.data, q.len);
		cfg_strlist_push(added, rows[k].schema);
		cfg_strlist_push(added, rows[k].name);
	}
	buf_free(&q);
}
