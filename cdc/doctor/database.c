/* The checks of the PostgreSQL side. The connection is opened with default_transaction_read_only = on
 * (PG_CONN_READ_ONLY), so every statement runs in a read-only transaction. The statements are SELECTs of
 * catalog views, settings and privilege functions. Nothing here can write, create or drop. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/sql.h"
#include "cdc/doctor/doctor_internal.h"
#include "cdc/match/match.h"
#include "cdc/match/predicate.h"
#include "cdc/source/catalog.h"
#include "cdc/source/ddl_trigger.h"

PGresult *doctor_ask(doctor *d, const char *what, const char *sql, int n, const char *const *params)
{
	PGresult *res = PQexecParams(d->conn, sql, n, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		return res;
	doctor_say(d, DOCTOR_WARN, "run cdc doctor as the role of source.dsn on a reachable server",
		   "cannot read %s: %s", what, source_pg_one_line(PQerrorMessage(d->conn)));
	PQclear(res);
	return NULL;
}

static void add_pair(cfg_strlist *l, const char *a, const char *b)
{
	l->v = util_xrealloc(l->v, (l->n + 2) * sizeof(char *));
	l->v[l->n++] = util_xstrdup(a);
	l->v[l->n++] = util_xstrdup(b);
}

static const doctor_table *find_table(const doctor *d, const char *schema, const char *name)
{
	for (size_t i = 0; i < d->ntables; i++)
		if (strcmp(d->tables[i].schema, schema) == 0 && strcmp(d->tables[i].name, name) == 0)
			return &d->tables[i];
	return NULL;
}

/* The publication has t, or a partitioned table t is a partition of. */
static bool published(const doctor *d, const doctor_table *t)
{
	for (size_t depth = 0; t && depth <= d->ntables; depth++) {
		for (size_t i = 0; i + 1 < d->published.n; i += 2)
			if (strcmp(d->published.v[i], t->schema) == 0 &&
			    strcmp(d->published.v[i + 1], t->name) == 0)
				return true;
		t = t->parent_name ? find_table(d, t->parent_schema, t->parent_name) : NULL;
	}
	return false;
}

/* "schema"."table", quoted so that a fix can be run as it is whatever the names. */
static void qualified(buf *b, const char *schema, const char *table)
{
	backfill_sql_quote_ident(b, schema);
	buf_putc(b, '.');
	backfill_sql_quote_ident(b, table);
}

static void load_tables(doctor *d)
{
	PGresult *res =
	    doctor_ask(d, "the tables",
		       "SELECT n.nspname, c.relname, c.relreplident, pn.nspname, p.relname "
		       "FROM pg_catalog.pg_class c "
		       "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
		       "LEFT JOIN pg_catalog.pg_inherits i ON c.relispartition AND i.inhrelid = c.oid "
		       "LEFT JOIN pg_catalog.pg_class p ON p.oid = i.inhparent "
		       "LEFT JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace "
		       "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', "
		       "'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%' ORDER BY 1, 2",
		       0, NULL);
	if (!res)
		return;
	d->ntables = (size_t)PQntuples(res);
	d->tables = util_xcalloc(d->ntables ? d->ntables : 1, sizeof(*d->tables));
	for (size_t i = 0; i < d->ntables; i++) {
		int r = (int)i;
		bool partition = !PQgetisnull(res, r, 3) && !PQgetisnull(res, r, 4);
		d->tables[i] =
		    (doctor_table){.schema = util_xstrdup(PQgetvalue(res, r, 0)),
				   .name = util_xstrdup(PQgetvalue(res, r, 1)),
				   .replident = PQgetvalue(res, r, 2)[0],
				   .parent_schema = partition ? util_xstrdup(PQgetvalue(res, r, 3)) : NULL,
				   .parent_name = partition ? util_xstrdup(PQgetvalue(res, r, 4)) : NULL};
	}
	PQclear(res);
}

void doctor_server(doctor *d)
{
	char err[1024];
	bool invalid;
	d->conn = source_pg_connect(d->c->source.dsn, d->c->source.password, PG_CONN_READ_ONLY, &invalid, err,
				    sizeof(err));
	if (!d->conn) {
		doctor_say(
		    d, DOCTOR_FAIL,
		    invalid ? "correct source.dsn (libpq's key=value form or a postgresql:// URI)"
			    : "check source.dsn (host, port, dbname, user, password or PGPASSWORD/.pgpass, "
			      "TLS options) and that the server accepts this client in pg_hba.conf",
		    "%s", err);
		return;
	}
	d->server_version = PQserverVersion(d->conn);
	PGresult *res =
	    doctor_ask(d, "the server's version",
		       "SELECT pg_catalog.current_setting('server_version'), pg_catalog.pg_is_in_recovery(), "
		       "r.rolname, r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
		       0, NULL);
	if (!res)
		return;
	const char *version = PQgetvalue(res, 0, 0);
	d->in_recovery = PQgetvalue(res, 0, 1)[0] == 't';
	snprintf(d->role, sizeof(d->role), "%s", PQgetvalue(res, 0, 2));
	d->superuser = PQgetvalue(res, 0, 3)[0] == 't';
	int v = d->server_version;
	if (d->in_recovery && v < 160000)
		doctor_say(d, DOCTOR_FAIL,
			   "point source.dsn at the primary (or upgrade to PostgreSQL 16, which decodes on a "
			   "standby)",
			   "PostgreSQL %s is a standby, and logical decoding on a standby needs 16 or later",
			   version);
	else
		doctor_say(
		    d, DOCTOR_PASS, NULL,
		    "PostgreSQL %s%s: pgoutput protocol %d; failover slots %s; decoding on a standby %s; "
		    "generated columns in events %s",
		    version, d->in_recovery ? " (a standby)" : "", source_pg_protocol_for(v),
		    v >= 170000 ? "yes" : "no (17+)", v >= 160000 ? "yes" : "no (16+)",
		    v >= 180000 ? "yes" : "no (18+)");
	PQclear(res);
	load_tables(d);
}

void doctor_fix_failed(doctor *d, const char *err)
{
	doctor_say(d, DOCTOR_WARN, "run cdc doctor as the role of source.dsn on a reachable server", "%s",
		   err);
}

void doctor_expect_setting(doctor *d, const char *name, const char *want, const char *pass_detail,
			   doctor_status st, const char *more, const char *why)
{
	const char *params[] = {name};
	PGresult *res = doctor_ask(d, name, "SELECT pg_catalog.current_setting($1)", 1, params);
	if (!res)
		return;
	const char *v = PQgetvalue(res, 0, 0);
	char err[512];
	pg_fix f = {0};
	if (strcmp(v, want) == 0)
		doctor_say(d, DOCTOR_PASS, NULL, "%s", pass_detail);
	else if (!source_fix_setting(d->conn, name, want, false, &f, err, sizeof(err)))
		doctor_fix_failed(d, err);
	else {
		buf_puts(&f.words, more ? more : "");
		doctor_fix(d, st, &f, "is %s%s", v, why);
	}
	source_fix_free(&f);
	PQclear(res);
}

void doctor_wal_level(doctor *d)
{
	PGresult *res = doctor_ask(d, "wal_level", "SELECT pg_catalog.current_setting('wal_level')", 0, NULL);
	if (!res)
		return;
	char err[512];
	pg_fix f = {0};
	if (strcmp(PQgetvalue(res, 0, 0), "logical") == 0)
		doctor_say(d, DOCTOR_PASS, NULL, "logical");
	else if (!source_fix_wal_level(d->conn, &f, err, sizeof(err)))
		doctor_fix_failed(d, err);
	else
		doctor_fix(d, DOCTOR_FAIL, &f, "is %s, and logical decoding needs logical",
			   PQgetvalue(res, 0, 0));
	source_fix_free(&f);
	PQclear(res);
}

void doctor_slots_free(doctor *d)
{
	const char *params[] = {d->c->source.slot};
	PGresult *res =
	    doctor_ask(d, "max_replication_slots",
		       "SELECT pg_catalog.current_setting('max_replication_slots')::int, "
		       "(SELECT count(*) FROM pg_catalog.pg_replication_slots), "
		       "EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)",
		       1, params);
	if (!res)
		return;
	long max = atol(PQgetvalue(res, 0, 0)), used = atol(PQgetvalue(res, 0, 1));
	bool mine = PQgetvalue(res, 0, 2)[0] == 't';
	char err[512];
	pg_fix f = {0};
	if (mine)
		doctor_say(d, DOCTOR_PASS, NULL, "%ld of %ld in use, slot %s among them", used, max,
			   d->c->source.slot);
	else if (used < max)
		doctor_say(d, DOCTOR_PASS, NULL, "%ld of %ld in use: room for slot %s", used, max,
			   d->c->source.slot);
	else if (!source_fix_slots_full(d->conn, false, &f, err, sizeof(err)))
		doctor_fix_failed(d, err);
	else
		doctor_fix(d, DOCTOR_FAIL, &f, "all %ld in use: no room for slot %s", max, d->c->source.slot);
	source_fix_free(&f);
	PQclear(res);
}

void doctor_senders_free(doctor *d)
{
	PGresult *res = doctor_ask(d, "max_wal_senders",
				   "SELECT pg_catalog.current_setting('max_wal_senders')::int, "
				   "(SELECT count(*) FROM pg_catalog.pg_stat_replication)",
				   0, NULL);
	if (!res)
		return;
	long max = atol(PQgetvalue(res, 0, 0)), used = atol(PQgetvalue(res, 0, 1));
	char err[512];
	pg_fix f = {0};
	if (used < max)
		doctor_say(d, DOCTOR_PASS, NULL, "%ld of %ld in use", used, max);
	else if (!source_fix_slots_full(d->conn, true, &f, err, sizeof(err)))
		doctor_fix_failed(d, err);
	else
		doctor_fix(d, DOCTOR_FAIL, &f,
			   "all %ld in use: cdc's replication connection would be refused", max);
	source_fix_free(&f);
	PQclear(res);
}

void doctor_role(doctor *d)
{
	PGresult *res =
	    doctor_ask(d, "the role's attributes",
		       "SELECT rolreplication, rolcanlogin FROM pg_catalog.pg_roles WHERE rolname = "
		       "session_user",
		       0, NULL);
	if (!res)
		return;
	bool replication = PQgetvalue(res, 0, 0)[0] == 't', login = PQgetvalue(res, 0, 1)[0] == 't';
	PQclear(res);
	pg_fix f = {0};
	source_fix_role_replication(d->role, &f);
	if (replication || d->superuser)
		doctor_say(d, DOCTOR_PASS, NULL, "role %s: %s%s", d->role, login ? "LOGIN " : "",
			   d->superuser ? "SUPERUSER" : "REPLICATION");
	else
		doctor_fix(d, DOCTOR_FAIL, &f,
			   "role %s lacks REPLICATION: the replication connection (and creating the slot) "
			   "would be refused",
			   d->role);
	source_fix_free(&f);
}

/* Publishing FOR TABLE needs the role to own each table and CREATE on the database. */
static void check_ownership(doctor *d, const pg_publication_plan *p)
{
	const char *role[] = {d->role};
	PGresult *res = doctor_ask(
	    d, "the database's privileges",
	    "SELECT pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE')", 0, NULL);
	if (!res)
		return;
	bool create = PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	buf fix = {0};
	if (!create && !d->superuser) {
		PGresult *db = doctor_ask(d, "the database", "SELECT pg_catalog.current_database()", 0, NULL);
		if (!db)
			goto out;
		pg_fix f = {0};
		source_fix_create_on_database(PQgetvalue(db, 0, 0), role[0], p->sql.data, &f);
		PQclear(db);
		doctor_fix(d, DOCTOR_FAIL, &f, "cdc would run %s, and role %s lacks CREATE on the database",
			   p->sql.data, d->role);
		source_fix_free(&f);
		goto out;
	}
	size_t bad = 0;
	for (size_t i = 0; i + 1 < p->tables.n; i += 2) {
		const char *params[] = {p->tables.v[i], p->tables.v[i + 1]};
		res = doctor_ask(
		    d, "a table's owner",
		    "SELECT pg_catalog.pg_get_userbyid(c.relowner), pg_catalog.pg_has_role(c.relowner, "
		    "'USAGE') FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = "
		    "c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
		    2, params);
		if (!res || PQntuples(res) != 1 || PQgetvalue(res, 0, 1)[0] == 't' || d->superuser) {
			PQclear(res);
			continue;
		}
		buf_reset(&fix);
		buf_puts(&fix, "ALTER TABLE ");
		qualified(&fix, params[0], params[1]);
		buf_puts(&fix, " OWNER TO ");
		backfill_sql_quote_ident(&fix, d->role);
		buf_putc(&fix, ';');
		char words[2048];
		snprintf(words, sizeof(words),
			 "as a superuser; or create the publication beforehand as the owner: %s",
			 p->sql.data);
		doctor_say(d, DOCTOR_FAIL, words,
			   "cdc would publish %s.%s FOR TABLE, which needs its owner (%s), not role %s",
			   params[0], params[1], PQgetvalue(res, 0, 0), d->role);
		doctor_sql(d, fix.data);
		PQclear(res);
		bad++;
	}
	if (!bad)
		doctor_say(d, DOCTOR_PASS, NULL, "does not exist; cdc will create it at its first start: %s",
			   p->sql.data);
out:
	buf_free(&fix);
}

/* The publication cdc would create. It says whether this role may create it, and which tables it would
 * hold. */
static void plan_publication(doctor *d)
{
	char err[512];
	pg_publication_plan p;
	if (!source_pg_publication_plan_make(d->conn, d->c->source.publication, &d->c->source.publish,
					     d->c->source.publish_generated_columns, &p, err, sizeof(err))) {
		doctor_say(d, DOCTOR_WARN, "run cdc doctor as the role of source.dsn", "%s", err);
		source_pg_publication_plan_free(&p);
		return;
	}
	for (size_t i = 0; i < p.no_match.n; i++)
		doctor_say(d, DOCTOR_WARN, "create the tables, or correct source.publish",
			   "source.publish pattern %s matches no table yet", p.no_match.v[i]);
	for (size_t i = 0; i < p.missing.n; i++) /* cdc run stops on it */
		doctor_say(d, DOCTOR_FAIL, "correct the name in source.publish, or create the table first",
			   "%s", p.missing.v[i]);
	for (size_t i = 0; i < d->ntables; i++) {
		const doctor_table *t = &d->tables[i];
		bool in = p.all_tables;
		for (size_t k = 0; !in && k < p.schemas.n; k++)
			in = strcmp(p.schemas.v[k], t->schema) == 0;
		for (size_t k = 0; !in && k + 1 < p.tables.n; k += 2)
			in = strcmp(p.tables.v[k], t->schema) == 0 && strcmp(p.tables.v[k + 1], t->name) == 0;
		if (in)
			add_pair(&d->published, t->schema, t->name);
	}
	if (p.refused) {
		char why[1024];
		buf fix = {0};
		source_pg_publication_refusal(&p, d->c->source.publication, why, sizeof(why));
		buf_printf(&fix, "create it beforehand, as a superuser; or make role %s the tables' owner",
			   d->role);
		doctor_say(d, DOCTOR_FAIL, fix.data, "does not exist, and cdc would stop: %s", why);
		buf_reset(&fix);
		buf_printf(&fix, "%s;", p.superuser_sql.data);
		doctor_sql(d, fix.data);
		buf_free(&fix);
		source_pg_publication_plan_free(&p);
		return;
	}
	for (size_t i = 0; i + 1 < p.not_owned.n; i += 2) {
		buf line = {0};
		source_pg_publication_not_owned(&line, d->c->source.publication, p.not_owned.v[i],
						p.not_owned.v[i + 1]);
		doctor_say(d, DOCTOR_WARN,
			   "have the table's owner or a superuser add it, or make it role's own", "%s",
			   line.data);
		buf_free(&line);
	}
	check_ownership(d, &p);
	source_pg_publication_plan_free(&p);
}

/* No publication, and cdc may not create it. The fix is the statement for this role and source.publish. */
static void missing_publication(doctor *d)
{
	char err[512];
	pg_publication_plan p;
	if (!source_pg_publication_plan_make(d->conn, d->c->source.publication, &d->c->source.publish,
					     d->c->source.publish_generated_columns, &p, err, sizeof(err))) {
		doctor_fix_failed(d, err);
	} else {
		pg_fix f = {0};
		source_fix_create_publication(p.refused ? p.superuser_sql.data : p.sql.data, &f);
		doctor_fix(d, DOCTOR_FAIL, &f, "%s does not exist", d->c->source.publication);
		source_fix_free(&f);
	}
	source_pg_publication_plan_free(&p);
}

/* The catalog cdc run checks subscriptions against, read once. False after a warning. */
static bool read_catalog(doctor *d)
{
	const char *params[] = {d->c->source.publication};
	if (d->cat_read)
		return true;
	PGresult *res =
	    doctor_ask(d, "the tables and the publication", source_catalog_sql(d->server_version), 1, params);
	if (!res)
		return false;
	d->cat_read = source_catalog_add_result(&d->cat, res);
	PQclear(res);
	if (!d->cat_read)
		doctor_say(d, DOCTOR_WARN, "see cdc's source (cdc/source/catalog.c)",
			   "the tables and the publication: an unexpected answer");
	return d->cat_read;
}

void doctor_publication(doctor *d)
{
	const char *params[] = {d->c->source.publication};
	PGresult *exists = doctor_ask(
	    d, "the publication",
	    "SELECT puballtables, pubviaroot FROM pg_catalog.pg_publication WHERE pubname = $1", 1, params);
	if (!exists || !read_catalog(d)) {
		PQclear(exists);
		return;
	}
	d->publication_exists = PQntuples(exists) == 1;
	for (size_t i = 0; i < d->cat.n; i++)
		if (d->cat.t[i].published)
			add_pair(&d->published, d->cat.t[i].schema, d->cat.t[i].name);
	if (d->publication_exists)
		doctor_say(d, DOCTOR_PASS, NULL, "%s exists (%s%zu tables; publish_via_partition_root %s)",
			   d->c->source.publication,
			   PQgetvalue(exists, 0, 0)[0] == 't' ? "FOR ALL TABLES, " : "", d->published.n / 2,
			   PQgetvalue(exists, 0, 1)[0] == 't' ? "on" : "off");
	else if (d->c->source.create)
		plan_publication(d);
	else
		missing_publication(d);
	PQclear(exists);
}

typedef struct table_tally {
	size_t missing;
	buf names;
} table_tally;

static void not_published(doctor *d, const cfg_subscription *s, const doctor_table *t, void *arg)
{
	(void)s;
	table_tally *tt = arg;
	if (published(d, t))
		return;
	if (tt->missing++)
		buf_puts(&tt->names, ", ");
	qualified(&tt->names, t->schema, t->name);
}

/* The tables a subscription names one by one that do not exist. This is cdc run's check, with its message. */
static bool named_tables_exist(doctor *d, const cfg_subscription *s)
{
	buf missing = {0};
	bool ok = !read_catalog(d) || source_catalog_check_exists(&d->cat, s, &missing);
	for (char *line = missing.data; line && *line;) {
		char *end = strchr(line, '\n');
		*end = '\0';
		doctor_say(d, DOCTOR_FAIL,
			   "correct the name in the subscription's tables, or create the table first",
			   "%s: cdc refuses it", line);
		line = end + 1;
	}
	buf_free(&missing);
	return ok;
}

/* One warning per line of w, its fix the same line of f. Then w and f are freed. */
static void say_pairs(doctor *d, buf *w, buf *f)
{
	for (char *line = w->data, *fix = f->data; line && *line && fix && *fix;) {
		char *end = strchr(line, '\n'), *fend = strchr(fix, '\n');
		*end = *fend = '\0';
		doctor_say(d, DOCTOR_WARN, fix, "%s", line);
		line = end + 1;
		fix = fend + 1;
	}
	buf_free(w);
	buf_free(f);
}

void doctor_tables(doctor *d)
{
	for (size_t i = 0; i < d->c->nsubs; i++) {
		const cfg_subscription *s = &d->c->subs[i];
		table_tally tt = {0};
		bool named = named_tables_exist(d, s);
		size_t n = doctor_sub_tables(d, s, not_published, &tt);
		/* Partitioned tables, and whether their changes arrive under the names s matches. cdc run
		 * logs the same warnings at its start. */
		buf w = {0}, f = {0};
		if (d->publication_exists)
			source_catalog_check_partitions(&d->cat, s, d->c->source.publication, &w, &f);
		if (!n && named) /* (when a name is wrong, its failure says enough) */
			doctor_say(d, DOCTOR_WARN,
				   "create the tables, or correct the subscription's tables: key",
				   "subscription %s: its tables match no table yet", s->name);
		else if (n && tt.missing) {
			buf fix = {0};
			buf_puts(&fix, "ALTER PUBLICATION ");
			backfill_sql_quote_ident(&fix, d->c->source.publication);
			buf_printf(&fix, " ADD TABLE %s;", tt.names.data);
			doctor_say(
			    d, DOCTOR_WARN, "as the publication's and the tables' owner, or a superuser",
			    "subscription %s: %zu of its %zu tables are not in publication %s, so their "
			    "changes never reach cdc: %s",
			    s->name, tt.missing, n, d->c->source.publication, tt.names.data);
			doctor_sql(d, fix.data);
			buf_free(&fix);
		} else if (n && !w.len)
			doctor_say(d, DOCTOR_PASS, NULL, "subscription %s: %zu table%s, all published",
				   s->name, n, n == 1 ? "" : "s");
		buf_free(&tt.names);
		say_pairs(d, &w, &f);
	}
}

static void count_table(doctor *d, const cfg_subscription *s, const doctor_table *t, void *arg)
{
	(void)d, (void)s, (void)t;
	(*(size_t *)arg)++;
}

/* `changed` needs the old row of updates. So does an old.column in `where` that is not an identity column.
 * cdc refuses a subscription that could never match. source_catalog_check_identity makes the same check, with
 * the same messages. */
void doctor_identity(doctor *d)
{
	for (size_t i = 0; i < d->c->nsubs; i++) {
		const cfg_subscription *s = &d->c->subs[i];
		pred *p = s->where ? match_predicate_parse(s->where, NULL, 0) : NULL;
		bool old = p && match_predicate_reads_old(p);
		match_predicate_free(p);
		if (!s->changed.n && !old)
			continue;
		if (!read_catalog(d))
			return;
		buf problems = {0};
		size_t n = 0;
		if (source_catalog_check_identity(&d->cat, s, &problems)) {
			doctor_sub_tables(d, s, count_table, &n);
			doctor_say(d, DOCTOR_PASS, NULL,
				   "subscription %s uses %s: its %zu tables send the old row it reads",
				   s->name, s->changed.n ? "changed:" : "old. in where", n);
		}
		/* "what is wrong: ALTER TABLE ... REPLICA IDENTITY FULL", one finding each */
		for (char *line = problems.data; line && *line;) {
			char *end = strchr(line, '\n'), *fix = strstr(line, ": ALTER TABLE ");
			*end = '\0';
			if (fix && fix < end)
				*fix = '\0';
			doctor_say(d, DOCTOR_FAIL, fix ? "as the table's owner" : "see the message",
				   "%s: cdc refuses it", line);
			if (fix) {
				char sql[1024];
				snprintf(sql, sizeof(sql), "%s;", fix + 2);
				doctor_sql(d, sql);
			}
			line = end + 1;
		}
		buf_free(&problems);
	}
}

/* Splits one of backfill/sql.h's messages ("what is wrong: run FIX") into a line. */
static void say_bfsql(doctor *d, doctor_status status, buf *msg)
{
	char *at = strstr(msg->data, ": run ");
	if (!at) {
		doctor_say(d, status, "see the message", "%s", msg->data);
		return;
	}
	*at = '\0'; /* what follows is a statement that runs as it is */
	doctor_say(d, status, "as a superuser", "%s", msg->data);
	char sql[1024];
	snprintf(sql, sizeof(sql), "%s;", at + 6);
	doctor_sql(d, sql);
}

typedef struct backfill_tally {
	size_t bad, n;
} backfill_tally;

/* A table a backfill reads, which needs SELECT. One without a key is read too. But only REPLICA IDENTITY FULL
 * lets a consumer apply its updates and deletes (docs/backfills.md). */
static void readable(doctor *d, const cfg_subscription *s, const doctor_table *t, void *arg)
{
	(void)s;
	backfill_tally *bt = arg;
	const char *params[] = {t->schema, t->name, d->c->source.publication};
	PGresult *res = doctor_ask(d, "a table's key", bfsql_describe, 3, params);
	if (!res)
		return;
	bt->n++;
	buf msg = {0};
	if (PQntuples(res) > 0 && PQgetisnull(res, 0, 5) && PQgetvalue(res, 0, 10)[0] != 'f') {
		backfill_sql_keyless(&msg, t->schema, t->name);
		say_bfsql(d, DOCTOR_WARN, &msg);
		bt->bad++;
	}
	if (PQntuples(res) > 0 && PQgetvalue(res, 0, 7)[0] != 't') {
		buf_reset(&msg);
		backfill_sql_no_select(&msg, d->role, t->schema, t->name);
		say_bfsql(d, DOCTOR_FAIL, &msg);
		bt->bad++;
	}
	buf_free(&msg);
	PQclear(res);
}

bool doctor_backfilled(const doctor *d, const cfg_subscription *s)
{
	return s->snapshot || d->c->source.on_slot_lost == CFG_GAP_RESYNC ||
	       d->c->source.on_publication_newer == CFG_GAP_RESYNC;
}

void doctor_backfill(doctor *d)
{
	for (size_t i = 0; i < d->c->nsubs; i++) {
		const cfg_subscription *s = &d->c->subs[i];
		if (!doctor_backfilled(d, s))
			continue;
		backfill_tally bt = {0};
		doctor_sub_tables(d, s, readable, &bt);
		if (!bt.bad)
			doctor_say(d, DOCTOR_PASS, NULL,
				   "subscription %s (%s): role %s may read its %zu tables", s->name,
				   s->snapshot ? "snapshot: true" : "re-sync", d->role, bt.n);
	}
}

/* source.signal_table. It checks the table and its columns, and that the publication holds it (or cdc adds
 * it). It also says who may insert signals. */
void doctor_signal_table(doctor *d)
{
	char schema[MATCH_NAME_MAX + 1], table[MATCH_NAME_MAX + 1];
	const char *name = d->c->source.signal_table;
	if (!match_table_split(name, schema, table))
		return; /* the configuration refused it */
	const char *params[] = {schema, table};
	PGresult *res = doctor_ask(
	    d, "the signal table",
	    "SELECT pg_catalog.pg_get_userbyid(c.relowner), pg_catalog.pg_has_role(c.relowner, 'USAGE'), "
	    "(SELECT pg_catalog.string_agg(a.attname, ' ') FROM pg_catalog.pg_attribute a WHERE a.attrelid = "
	    "c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attname IN ('id', 'type', 'data')), "
	    "(SELECT pg_catalog.string_agg(DISTINCT CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE "
	    "pg_catalog.pg_get_userbyid(x.grantee) END, ', ') FROM pg_catalog.aclexplode(c.relacl) x WHERE "
	    "x.privilege_type = 'INSERT' AND x.grantee <> c.relowner), EXISTS (SELECT FROM "
	    "pg_catalog.aclexplode(c.relacl) x WHERE "
	    "x.privilege_type = 'INSERT' AND x.grantee = 0) "
	    "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
	    "WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
	    2, params);
	buf q = {0}, fix = {0};
	if (!res)
		return;
	qualified(&q, schema, table);
	if (PQntuples(res) != 1) {
		buf_printf(&fix, "CREATE TABLE %s (id text PRIMARY KEY, type text NOT NULL, data text)",
			   q.data);
		doctor_say(d, DOCTOR_FAIL, fix.data, "%s does not exist, so no signal reaches cdc", q.data);
		goto out;
	}
	const char *owner = PQgetvalue(res, 0, 0), *cols = PQgetvalue(res, 0, 2),
		   *who = PQgetvalue(res, 0, 3);
	bool owned = PQgetvalue(res, 0, 1)[0] == 't', everyone = PQgetvalue(res, 0, 4)[0] == 't';
	static const char *const need[] = {"id", "type", "data"};
	for (int i = 0; i < 3; i++) {
		size_t len = strlen(need[i]);
		const char *at = strstr(cols, need[i]);
		if (at && (at == cols || at[-1] == ' ') && (at[len] == ' ' || !at[len]))
			continue;
		buf_printf(&fix, "ALTER TABLE %s ADD COLUMN %s text", q.data, need[i]);
		doctor_say(d, DOCTOR_FAIL, fix.data, "%s has no column %s: every signal would be refused",
			   q.data, need[i]);
		goto out;
	}
	const doctor_table *t = find_table(d, schema, table);
	bool held = t && published(d, t), adds = d->c->source.create && (owned || d->superuser);
	if (!held && !adds) {
		buf_puts(&fix, "ALTER PUBLICATION ");
		backfill_sql_quote_ident(&fix, d->c->source.publication);
		buf_printf(&fix, " ADD TABLE %s (as its owner %s or a superuser)", q.data, owner);
		doctor_say(d, DOCTOR_FAIL, fix.data,
			   "%s is not in publication %s and cdc cannot add it, so no signal reaches cdc",
			   q.data, d->c->source.publication);
		goto out;
	}
	if (everyone) {
		buf_printf(&fix, "REVOKE INSERT ON %s FROM PUBLIC; GRANT INSERT ON %s TO the roles that may",
			   q.data, q.data);
		doctor_say(d, DOCTOR_WARN, fix.data,
			   "%s: every role may insert into it, so anyone who can connect may start backfills",
			   q.data);
		goto out;
	}
	doctor_say(d, DOCTOR_PASS, NULL,
		   "%s: columns id, type and data; %s publication %s; who may insert signals: %s%s%s", q.data,
		   held ? "in" : "cdc adds it to", d->c->source.publication, owner, *who ? ", " : "", who);
out:
	buf_free(&q);
	buf_free(&fix);
	PQclear(res);
}

void doctor_emit_message(doctor *d)
{
	bool needed = d->c->source.heartbeat_ms > 0;
	for (size_t i = 0; i < d->c->nsubs; i++)
		needed |= doctor_backfilled(d, &d->c->subs[i]);
	PGresult *res = doctor_ask(d, "the role's privileges", bfsql_privileges, 0, NULL);
	if (!res)
		return;
	bool may = PQntuples(res) == 1 && PQgetvalue(res, 0, 1)[0] == 't';
	char function[128];
	snprintf(function, sizeof(function), "%s", PQntuples(res) == 1 ? PQgetvalue(res, 0, 2) : "");
	PQclear(res);
	if (may)
		doctor_say(d, DOCTOR_PASS, NULL, "role %s may execute it (heartbeats, backfills' watermarks)",
			   d->role);
	else if (!needed)
		doctor_say(d, DOCTOR_PASS, NULL,
			   "role %s may not execute it; only source.heartbeat and backfills (cdc backfill, "
			   "snapshot: true) need it",
			   d->role);
	else {
		buf msg = {0};
		backfill_sql_no_emit_message(&msg, d->role, function);
		say_bfsql(d, DOCTOR_FAIL, &msg);
		buf_free(&msg);
	}
}

/* source.ddl, cdc's event trigger (only a superuser can create it). */
void doctor_ddl_trigger(doctor *d)
{
	char err[512];
	switch (source_ddl_trigger_check(d->conn, err, sizeof(err))) {
	case DDL_TRIGGER_OK:
		doctor_say(d, DOCTOR_PASS, NULL, "cdc.capture_ddl() and its event triggers are there");
		break;
	case DDL_TRIGGER_MISSING: {
		bool creates = d->superuser && d->c->source.create;
		doctor_say(d, creates ? DOCTOR_PASS : DOCTOR_FAIL,
			   creates
			       ? NULL
			       : "have a superuser run the statements of docs/events.md#ddl-events (cdc run "
				 "writes them to state_dir/ddl-trigger.sql)",
			   "cdc's DDL event trigger is missing or older than this cdc; %s",
			   creates	  ? "cdc run creates it (source.create, a superuser role)"
			   : d->superuser ? "source.create is off"
					  : "only a superuser can create it");
		break;
	}
	case DDL_TRIGGER_WRONG:
		doctor_say(d, DOCTOR_FAIL, NULL, "%s", err);
		break;
	case DDL_TRIGGER_FAILED:
		doctor_say(d, DOCTOR_WARN, "run cdc doctor as the role of source.dsn on a reachable server",
			   "%s", err);
		break;
	}
}

void doctor_slot(doctor *d)
{
	const char *slot = d->c->source.slot;
	const char *params[] = {slot};
	PGresult *res = doctor_ask(d, "the replication slot", pg_slot_sql, 1, params);
	if (!res)
		return;
	pg_slot_row row;
	source_pg_slot_parse(res, &row);
	PQclear(res);
	char fix[512];
	if (!row.exists) {
		pg_fix f = {0};
		source_fix_create_slot(slot, &f);
		if (d->c->source.create)
			doctor_say(d, DOCTOR_PASS, NULL,
				   "%s does not exist; cdc will create it (plugin pgoutput)", slot);
		else
			doctor_fix(d, DOCTOR_FAIL, &f, "%s does not exist", slot);
		source_fix_free(&f);
		return;
	}
	char drop[256]; /* slot names are [a-z0-9_], with nothing to escape */
	snprintf(drop, sizeof(drop), "SELECT pg_catalog.pg_drop_replication_slot('%s');", slot);
	snprintf(fix, sizeof(fix), "choose another source.slot, or drop this one if nothing else uses it");
	if (source_pg_slot_being_created(&row)) {
		doctor_say(d, DOCTOR_WARN, "run cdc doctor again once it is created",
			   "%s is being created by another session (PID %d)", slot, row.active_pid);
		return;
	}
	if (strcmp(row.type, "logical") != 0 || strcmp(row.plugin, "pgoutput") != 0) {
		doctor_say(d, DOCTOR_FAIL, fix,
			   "%s is a %s slot with plugin %s, and cdc needs plugin pgoutput", slot, row.type,
			   row.plugin[0] ? row.plugin : "none");
		doctor_sql(d, drop);
		return;
	}
	if (strcmp(row.database, row.current_database) != 0) {
		doctor_say(d, DOCTOR_FAIL, fix, "%s belongs to database %s, but source.dsn connects to %s",
			   slot, row.database, row.current_database);
		doctor_sql(d, drop);
		return;
	}
	char state[256];
	snprintf(state, sizeof(state), "wal_status %s, %" PRId64 " bytes behind the server%s", row.wal_status,
		 row.lag_bytes, row.active_pid ? ", streamed now by a walsender" : "");
	if (strcmp(row.wal_status, "lost") == 0) {
		doctor_say(d, DOCTOR_FAIL,
			   "set source.on_slot_lost: resync (cdc recreates the slot and backfills), or drop "
			   "it and resynchronise consumers",
			   "%s has lost WAL it needed (%s)", slot, state);
		doctor_sql(d, drop);
	} else if (strcmp(row.wal_status, "reserved") != 0)
		doctor_say(d, DOCTOR_WARN,
			   "let cdc catch up (find what holds it back: cdc status), and raise "
			   "max_slot_wal_keep_size if the disk allows",
			   "%s keeps more WAL than max_wal_size (%s)%s", slot, state,
			   strcmp(row.wal_status, "unreserved") == 0 ? ": it is lost at the next checkpoint"
								     : "");
	else if (row.safe_wal_size_known && row.max_keep_size > 0 &&
		 row.safe_wal_size < row.max_keep_size / 100 * PG_SAFE_WAL_LOW_PERCENT)
		doctor_say(d, DOCTOR_WARN, "let cdc catch up (cdc status), or raise max_slot_wal_keep_size",
			   "%s: safe_wal_size %" PRId64 " of max_slot_wal_keep_size %" PRId64
			   " bytes left before it loses WAL (%s)",
			   slot, row.safe_wal_size, row.max_keep_size, state);
	else
		doctor_say(d, DOCTOR_PASS, NULL, "%s: pgoutput, %s", slot, state);
}

void doctor_keep_size(doctor *d)
{
	PGresult *res =
	    doctor_ask(d, "max_slot_wal_keep_size",
		       "SELECT pg_catalog.current_setting('max_slot_wal_keep_size'), "
		       "pg_catalog.pg_size_bytes(pg_catalog.current_setting('max_slot_wal_keep_size'))",
		       0, NULL);
	if (!res)
		return;
	char err[512];
	pg_fix f = {0};
	if (atoll(PQgetvalue(res, 0, 1)) >= 0)
		doctor_say(d, DOCTOR_PASS, NULL, "%s: the server keeps at most this much WAL for the slot",
			   PQgetvalue(res, 0, 0));
	else if (!source_fix_setting(d->conn, "max_slot_wal_keep_size", "50GB", false, &f, err, sizeof(err)))
		doctor_fix_failed(d, err);
	else {
		buf_puts(&f.words,
			 " (50GB: what the disk can spare), and alert on cdc_source_safe_wal_size_bytes "
			 "(deploy/monitoring)");
		doctor_fix(
		    d, DOCTOR_WARN, &f,
		    "is -1 (unlimited): a cdc that stops consuming makes the server keep WAL until its "
		    "disk is full");
	}
	source_fix_free(&f);
	PQclear(res);
}

void doctor_idle_timeout(doctor *d)
{
	doctor_expect_setting(d, "idle_replication_slot_timeout", "0", "0 (off)", DOCTOR_WARN,
			      "; or set source.on_slot_lost: resync",
			      ": the server invalidates a slot nobody streamed that long, so a cdc stopped "
			      "longer loses its slot");
}
