/* The PostgreSQL connections (see source.h). The replication loop follows pg_recvlogical, with 'w'
 * XLogData and 'k' keepalive in, and 'r' standby status updates out. */
#include "cdc/source/source.h"
#include "decoder/base/bytes.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "cdc/source/ddl_trigger.h"
#include "cdc/source/fixes.h"
#include "cdc/source/pgconn.h"
#include "decoder/base/fsutil.h"
#include "decoder/base/log.h"

/* What an ordinary connection's query in flight is. */
enum admin_kind {
	ADMIN_IDLE,
	ADMIN_HEARTBEAT,
	ADMIN_HEALTH,
	ADMIN_SERVER,
	ADMIN_CATALOG,
	ADMIN_PUB_LIST,
	ADMIN_PUB_ADD
};

struct source {
	char *dsn, *slot, *publication;
	char *password;		  /* source.password, NULL if none */
	char *primary_dsn;	  /* source.primary_dsn, for writes on a standby, "" if none */
	bool primary_dsn_invalid; /* libpq cannot parse it */
	/* Passwords in source.dsn (and PGPASSWORD). They are never in a message, whatever libpq or the
	 * server quotes back. */
	pg_secrets secrets;
	bool dsn_invalid; /* libpq cannot parse source.dsn, so no retry will help */
	bool create;
	bool failover;		/* source.failover, the slot is a failover slot (17+) */
	bool heartbeat;		/* source.heartbeat is set, and a standby needs primary_dsn for it */
	bool generated_columns; /* source.publish_generated_columns */
	bool ddl;		/* source.ddl, cdc's DDL event trigger must be there */
	char *state_dir;	/* where the trigger's statements go when cdc cannot create it */
	cfg_strlist publish;
	PGconn *repl; /* replication=database, streaming */
	/* ordinary, for setup queries, then heartbeats, slot health, the server, the catalog and the
	 * publication's tables, one at a time */
	PGconn *admin;
	int admin_busy; /* the kind of query in flight (admin_kind) */
	/* to source.primary_dsn while the server is a standby, for heartbeats (one at a time, like admin) */
	PGconn *primary;
	int primary_busy;
	source_server server;		/* what the last start found */
	source_failover failover_state; /* the last answer about synchronized_standby_slots */
	/* The timeline of the last stream, and the newest position it sent. A start on a newer
	 * timeline checks that the promoted server's history passed through it. */
	uint32_t stream_tli;
	uint64_t stream_max;
	char heartbeat_error[512]; /* the last heartbeat's failure, not reported yet */
	catalog *catalog;	   /* source_read_catalog's answer, once in */
	uint64_t catalog_sent_ms;  /* when its query went out */
	char catalog_error[512];   /* its failure, not reported yet */
	/* for keeping the publication current (source_keep_publication), the ALTER to send, the tables
	 * it adds and those added (schema, table pairs), the tables warned about */
	buf pub_sql;
	bool pub_due; /* the tables are to be listed when the connection is free */
	cfg_strlist pub_adding, pub_added, pub_warned;
	char pub_error[512];
	source_slot_health health;
	pgo_options proto;
	char system_id[32];
	source_gap_kind gap; /* why the last SOURCE_GAP came */
	int holder;	     /* who held the slot at the last SOURCE_BUSY */
	bool after_standby;  /* another process streamed the slot, which may be ahead of the record */
	bool batching;	     /* source_batch */
	bool skipped;	     /* the server skipped changes for want of the publication (repl_notice) */
};

static void repl_notice(void *arg, const PGresult *res);

void source_redact(const source *s, char *err, size_t errlen)
{
	source_pg_redact(&s->secrets, err, errlen);
}

source *source_new(const source_settings *set)
{
	source *s = util_xcalloc(1, sizeof(*s));
	s->dsn = util_xstrdup(set->dsn);
	s->slot = util_xstrdup(set->slot);
	s->publication = util_xstrdup(set->publication);
	s->create = set->create;
	s->failover = set->failover;
	s->heartbeat = set->heartbeat;
	s->primary_dsn = util_xstrdup(set->primary_dsn ? set->primary_dsn : "");
	source_set_password(s, set->password); /* and the secrets to redact */
	PQconninfoOption *opts = s->primary_dsn[0] ? PQconninfoParse(s->primary_dsn, NULL) : NULL;
	s->primary_dsn_invalid = s->primary_dsn[0] && !opts;
	PQconninfoFree(opts);
	s->ddl = set->ddl;
	s->state_dir = util_xstrdup(set->state_dir ? set->state_dir : ".");
	s->generated_columns = set->generated_columns;
	for (size_t i = 0; i < set->npublish; i++)
		cfg_strlist_push(&s->publish, set->publish[i]);
	if (set->signal_table) /* a pattern of one table, published like those of publish */
		cfg_strlist_push(&s->publish, set->signal_table);
	return s;
}

void source_disconnect(source *s)
{
	PQfinish(s->repl);
	PQfinish(s->admin);
	PQfinish(s->primary);
	s->repl = s->admin = s->primary = NULL;
	s->batching = s->skipped = false;
	s->admin_busy = ADMIN_IDLE;
	s->primary_busy = ADMIN_IDLE;
	s->health = (source_slot_health){0};
	source_catalog_free(s->catalog);
	free(s->catalog);
	s->catalog = NULL;
	buf_reset(&s->pub_sql);
	cfg_strlist_free(&s->pub_adding);
}

void source_free(source *s)
{
	if (!s)
		return;
	source_disconnect(s);
	for (size_t i = 0; i < s->publish.n; i++)
		free(s->publish.v[i]);
	free(s->publish.v);
	buf_free(&s->pub_sql);
	cfg_strlist_free(&s->pub_adding);
	cfg_strlist_free(&s->pub_added);
	cfg_strlist_free(&s->pub_warned);
	source_set_password(s, NULL);
	source_pg_secrets_free(&s->secrets);
	free(s->dsn);
	free(s->primary_dsn);
	free(s->slot);
	free(s->publication);
	free(s->state_dir);
	free(s);
}

void source_set_password(source *s, const char *password)
{
	if (s->password)
		explicit_bzero(s->password, strlen(s->password));
	free(s->password);
	s->password = password ? util_xstrdup(password) : NULL;
	source_pg_secrets_free(&s->secrets);
	source_pg_secrets_init(&s->secrets, s->dsn);
	source_pg_secrets_add(&s->secrets, s->primary_dsn);
	source_pg_secrets_add_value(&s->secrets, password);
}

/* A notice or warning the server sends (a failover slot's walsender waiting for a standby, say). It
 * goes into cdc's log as one line, not onto stderr as libpq's default would. */
static void on_notice(void *arg, const PGresult *res)
{
	(void)arg;
	const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
	log_at(sev && strcmp(sev, "WARNING") == 0 ? LOG_LEVEL_WARN : LOG_LEVEL_INFO, "the server says",
	       "severity=%s message=\"%s\" detail=\"%s\" hint=\"%s\"", sev ? sev : "-", msg ? msg : "",
	       detail ? detail : "", hint ? hint : "");
}

/* An ordinary or a replication connection with source.dsn. */
static PGconn *connect_db(source *s, bool replication, char *err, size_t errlen)
{
	bool invalid = false;
	PGconn *conn = source_pg_connect(
	    s->dsn, s->password, replication ? PG_CONN_REPLICATION : PG_CONN_ORDINARY, &invalid, err, errlen);
	s->dsn_invalid |= invalid;
	if (conn)
		PQsetNoticeReceiver(conn, on_notice, NULL);
	return conn;
}

/* err, then the fix of the database's problem, worded as cdc doctor words it. The log says what
 * doctor says. */
static void add_fix(char *err, size_t errlen, pg_fix *f)
{
	buf b = {0};
	source_fix_text(f, &b);
	size_t n = strlen(err);
	snprintf(err + n, errlen > n ? errlen - n : 0, ". %s", b.data);
	buf_free(&b);
	source_fix_free(f);
}

/* The replication connection was refused. The role lacks REPLICATION, or every WAL sender is taken. */
static void repl_refused(source *s, char *err, size_t errlen)
{
	pg_fix f = {0};
	char why[256];
	if (strstr(err, "replication role") || strstr(err, "permission denied to start WAL sender")) {
		source_fix_role_replication(PQuser(s->admin), &f);
		add_fix(err, errlen, &f);
	} else if (strstr(err, "max_wal_senders") &&
		   source_fix_slots_full(s->admin, true, &f, why, sizeof(why)))
		add_fix(err, errlen, &f);
	else
		source_fix_free(&f);
}

/* A failed query, transient if the connection is gone or the object is busy, else fatal. */
static source_result query_failed(PGconn *conn, PGresult *res, const char *what, char *err, size_t errlen)
{
	const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	bool busy = sqlstate && strcmp(sqlstate, "55006") == 0; /* sqlstate is res's (before PQclear) */
	util_errf(err, errlen, "%s failed: %s", what, source_pg_one_line(PQerrorMessage(conn)));
	PQclear(res);
	return PQstatus(conn) != CONNECTION_OK || busy ? SOURCE_RETRY : SOURCE_FATAL;
}

/* Checked before anything is created. Logical decoding needs wal_level logical, and a slot or
 * publication made before that fails would be left behind. */
static source_result check_wal_level(source *s, char *err, size_t errlen)
{
	PGresult *res = PQexec(s->admin, "SELECT pg_catalog.current_setting('wal_level')");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return query_failed(s->admin, res, "reading wal_level", err, errlen);
	char level[64];
	snprintf(level, sizeof(level), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	if (strcmp(level, "logical") == 0)
		return SOURCE_OK;
	pg_fix f = {0};
	char why[256];
	util_errf(err, errlen, "wal_level is %s, and logical decoding needs logical", level);
	if (source_fix_wal_level(s->admin, &f, why, sizeof(why)))
		add_fix(err, errlen, &f);
	else
		source_fix_free(&f);
	return SOURCE_FATAL;
}

static void promotion_note(const source *s, buf *b);

static PGresult *exec_params(PGconn *conn, const char *sql, int n, const char *const *params)
{
	return PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
}

/* A CREATE failed because another process created the object between our look and our CREATE. That
 * is a second cdc on the same slot (a standby replica) starting at the same moment. The slot's
 * creation checks under a lock (duplicate_object). CREATE PUBLICATION fails with duplicate_object if
 * the other one committed first, else on the catalog's unique index (unique_violation). */
static bool created_meanwhile(const PGresult *res)
{
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	return sqlstate && (strcmp(sqlstate, "42710") == 0 || strcmp(sqlstate, "23505") == 0);
}

/* source.publish_generated_columns. PostgreSQL 18 publishes stored generated columns when the
 * publication says so. Earlier servers never do, so the setting is refused there. A publication that
 * exists already is the user's, so a difference is only pointed out. */
static source_result generated_columns(source *s, const char *pubgencols, char *err, size_t errlen)
{
	int v = PQserverVersion(s->admin);
	if (s->generated_columns && v < 180000) {
		util_errf(
		    err, errlen,
		    "source.publish_generated_columns: PostgreSQL %d.%d never publishes generated columns "
		    "(18 is the first that can): remove the setting, or have consumers compute the column "
		    "from the others",
		    v / 10000, v % 10000);
		return SOURCE_FATAL;
	}
	if (s->generated_columns && pubgencols && strcmp(pubgencols, "n") == 0) {
		buf q = {0};
		source_pg_append_quoted(&q, s->publication, '"');
		log_warn(
		    "the publication does not publish generated columns, though "
		    "source.publish_generated_columns is true: events carry none",
		    "publication=%s fix=\"ALTER PUBLICATION %s SET (publish_generated_columns = stored)\"",
		    s->publication, q.data);
		buf_free(&q);
	}
	return SOURCE_OK;
}

static source_result ensure_publication(source *s, char *err, size_t errlen)
{
	const char *params[] = {s->publication};
	PGresult *res = exec_params(s->admin,
				    PQserverVersion(s->admin) >= 180000
					? "SELECT pubgencols::pg_catalog.text FROM pg_catalog.pg_publication "
					  "WHERE pubname = $1"
					: "SELECT NULL FROM pg_catalog.pg_publication WHERE pubname = $1",
				    1, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return query_failed(s->admin, res, "looking up the publication", err, errlen);
	bool exists = PQntuples(res) > 0;
	source_result r = generated_columns(
	    s, exists && !PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 0) : NULL, err, errlen);
	PQclear(res);
	if (exists || r != SOURCE_OK)
		return r;
	pg_publication_plan plan;
	if (!source_pg_publication_plan_make(s->admin, s->publication, &s->publish, s->generated_columns,
					     &plan, err, errlen)) {
		source_pg_publication_plan_free(&plan);
		return PQstatus(s->admin) != CONNECTION_OK ? SOURCE_RETRY : SOURCE_FATAL;
	}
	if (!s->create) {
		pg_fix f = {0};
		source_fix_create_publication(plan.refused ? plan.superuser_sql.data : plan.sql.data, &f);
		buf q = {0};
		source_pg_append_quoted(&q, s->publication, '"');
		util_errf(err, errlen, "publication %s does not exist%s", q.data,
			  s->server.in_recovery ? " (create it on the primary: this server is a standby)"
						: "");
		add_fix(err, errlen, &f);
		buf_free(&q);
		source_pg_publication_plan_free(&plan);
		return SOURCE_FATAL;
	}
	if (s->server.in_recovery) {
		/* The catalog is the primary's. A standby cannot create it, and shows it once made. */
		util_errf(
		    err, errlen,
		    "publication %s does not exist, and this server (%s) is a standby: create it on the "
		    "primary (%s); source.create makes only the slot on a standby",
		    s->publication, s->server.host, plan.sql.data);
		source_pg_publication_plan_free(&plan);
		return SOURCE_FATAL;
	}
	if (plan.refused) {
		source_pg_publication_refusal(&plan, s->publication, err, errlen);
		source_pg_publication_plan_free(&plan);
		return SOURCE_FATAL;
	}
	if (plan.missing.n) { /* a misspelt name, under which nothing would ever arrive */
		util_errf(err, errlen, "%s: correct it, or create the table first", plan.missing.v[0]);
		source_pg_publication_plan_free(&plan);
		return SOURCE_FATAL;
	}
	for (size_t i = 0; i < plan.no_match.n; i++)
		log_warn(
		    "source.publish pattern matches no table yet; cdc adds the tables it matches as they "
		    "are created",
		    "pattern=%s", plan.no_match.v[i]);
	/* the tables left out, once. Keeping the publication current warns about the others. */
	for (size_t i = 0; i + 1 < plan.not_owned.n; i += 2) {
		buf w = {0}, q = {0};
		source_pg_publication_not_owned(&w, s->publication, plan.not_owned.v[i],
						plan.not_owned.v[i + 1]);
		log_warn("publication", "warning=\"%s\"", w.data);
		source_pg_append_table(&q, plan.not_owned.v[i], plan.not_owned.v[i + 1]);
		cfg_strlist_push(&s->pub_warned, q.data);
		buf_free(&w);
		buf_free(&q);
	}
	res = PQexec(s->admin, plan.sql.data);
	if (PQresultStatus(res) != PGRES_COMMAND_OK && created_meanwhile(res)) {
		PQclear(res);
		log_info("publication created by another process meanwhile; using it", "publication=%s",
			 s->publication);
	} else if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		bool denied =
		    sqlstate && strcmp(sqlstate, "42501") == 0 && !plan.superuser; /* CREATE on it */
		r = query_failed(s->admin, res, "creating the publication", err, errlen);
		pg_fix f = {0};
		source_fix_create_on_database(PQdb(s->admin), PQuser(s->admin), plan.sql.data, &f);
		if (denied)
			add_fix(err, errlen, &f);
		else
			source_fix_free(&f);
	} else {
		PQclear(res);
		log_info("created publication", "publication=%s sql=\"%s\"", s->publication, plan.sql.data);
	}
	source_pg_publication_plan_free(&plan);
	return r;
}

/* What the subscriptions need of the tables, read now (at a start, blocking like the rest of it). */
static source_result read_catalog(source *s, catalog *c, char *err, size_t errlen)
{
	const char *params[] = {s->publication};
	PGresult *res = exec_params(s->admin, source_catalog_sql(PQserverVersion(s->admin)), 1, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return query_failed(s->admin, res, "reading the tables' replica identities and keys", err,
				    errlen);
	bool ok = source_catalog_add_result(c, res);
	PQclear(res);
	if (!ok)
		return util_errf(err, errlen,
				 "reading the tables' replica identities and keys: an unexpected result"),
		       SOURCE_FATAL;
	return SOURCE_OK;
}

/* source.ddl. cdc's event trigger is there, or is created. Else a message says exactly what a
 * superuser must run (the statements go to state_dir/ddl-trigger.sql), and cdc stops. It does not run
 * without the DDL events it was told to deliver. */
static source_result ensure_ddl_trigger(source *s, char *err, size_t errlen)
{
	ddl_trigger_state st = source_ddl_trigger_check(s->admin, err, errlen);
	char why[512] = "";
	if (st == DDL_TRIGGER_MISSING && s->create) {
		PGresult *res = PQexec(s->admin, ddl_trigger_sql);
		bool done = PQresultStatus(res) == PGRES_COMMAND_OK;
		const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
		bool denied = sqlstate && strcmp(sqlstate, "42501") == 0;
		bool meanwhile = !done && created_meanwhile(res); /* another cdc of the database */
		if (!done)
			snprintf(why, sizeof(why), "%s", source_pg_one_line(PQerrorMessage(s->admin)));
		PQclear(res);
		if (done)
			log_info("created cdc's DDL event trigger",
				 "function=cdc.capture_ddl triggers=cdc_ddl_command_end,cdc_sql_drop");
		if (!done)
			PQclear(PQexec(s->admin, "ROLLBACK"));
		if (done || meanwhile)
			st = source_ddl_trigger_check(s->admin, err, errlen);
		else if (!denied)
			st = DDL_TRIGGER_FAILED,
			util_errf(err, errlen, "creating cdc's DDL event trigger failed: %s", why);
	}
	if (st == DDL_TRIGGER_OK)
		return SOURCE_OK;
	if (st != DDL_TRIGGER_MISSING)
		return st == DDL_TRIGGER_FAILED && PQstatus(s->admin) != CONNECTION_OK ? SOURCE_RETRY
										       : SOURCE_FATAL;
	buf path = {0}, file = {0};
	buf_printf(&path, "%s/ddl-trigger.sql", s->state_dir);
	buf_printf(&file, "-- cdc's DDL event trigger (source.ddl): run as a superuser in database %s\n%s",
		   PQdb(s->admin), ddl_trigger_sql);
	char ferr[256];
	bool written = fsutil_replace(path.data, file.data, file.len, 0644, ferr, sizeof(ferr));
	util_errf(err, errlen,
		  "source.ddl: cdc's DDL event trigger is not in database %s%s%s, and only a superuser can "
		  "create an event trigger: have one run `psql -d %s -f %s` (%s%s), then start cdc again, or "
		  "set source.ddl: false",
		  PQdb(s->admin), s->create ? " and cdc could not create it: " : " (source.create is off)",
		  s->create ? why : "", PQdb(s->admin), written ? path.data : "FILE",
		  written ? "the statements, written just now"
			  : "FILE: the statements in README \"DDL events\"; ",
		  written ? "" : ferr);
	buf_free(&path);
	buf_free(&file);
	return SOURCE_FATAL;
}

/* The primary keys of the publication's REPLICA IDENTITY FULL tables, for the relation cache. The
 * server marks all their columns as identity, but a row's key is its primary key. */
static source_result load_primary_keys(source *s, pgo_relcache *rc, char *err, size_t errlen)
{
	const char *params[] = {s->publication};
	PGresult *res =
	    exec_params(s->admin,
			"SELECT c.oid, a.attname FROM pg_catalog.pg_publication_tables pt "
			"JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname "
			"JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename "
			"JOIN pg_catalog.pg_index i ON i.indrelid = c.oid AND i.indisprimary "
			"JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey) "
			"WHERE pt.pubname = $1 AND c.relreplident = 'f' ORDER BY c.oid",
			1, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return query_failed(s->admin, res, "looking up primary keys", err, errlen);
	int n = PQntuples(res);
	const char **names = util_xcalloc((size_t)n + 1, sizeof(char *));
	for (int i = 0, first = 0; i < n; i++) {
		names[i - first] = PQgetvalue(res, i, 1);
		if (i + 1 == n || strcmp(PQgetvalue(res, i + 1, 0), PQgetvalue(res, i, 0)) != 0) {
			pgo_relcache_set_primary_key(rc, (uint32_t)strtoul(PQgetvalue(res, i, 0), NULL, 10),
						     names, (size_t)(i + 1 - first));
			first = i + 1;
		}
	}
	free(names);
	PQclear(res);
	return SOURCE_OK;
}

typedef pg_slot_row slot_row;

static source_result read_slot(source *s, slot_row *row, char *err, size_t errlen)
{
	const char *params[] = {s->slot};
	PGresult *res = exec_params(s->admin, pg_slot_sql, 1, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return query_failed(s->admin, res, "looking up the replication slot", err, errlen);
	source_pg_slot_parse(res, row);
	PQclear(res);
	if (row->exists && strcmp(row->database, row->current_database) != 0 &&
	    strcmp(row->type, "logical") == 0) {
		util_errf(err, errlen,
			  "replication slot %s belongs to database %s, but source.dsn connects to %s",
			  s->slot, row->database, row->current_database);
		return SOURCE_FATAL;
	}
	return SOURCE_OK;
}

/* The ordinary connection for what a standby cannot do. It is the primary's (source.primary_dsn)
 * while the server is a standby, else the admin one. NULL with err when there is none. */
static PGconn *writer(source *s, char *err, size_t errlen)
{
	if (!s->server.in_recovery)
		return s->admin;
	if (!s->primary_dsn[0]) {
		util_errf(
		    err, errlen,
		    "the server is a standby, which cannot be written to: set source.primary_dsn to its "
		    "primary");
		return NULL;
	}
	if (s->primary && PQstatus(s->primary) != CONNECTION_OK) {
		PQfinish(s->primary);
		s->primary = NULL;
		s->primary_busy = ADMIN_IDLE;
	}
	if (s->primary_dsn_invalid) {
		util_errf(err, errlen, "source.primary_dsn is not a valid connection string");
		return NULL;
	}
	bool invalid;
	if (!s->primary && (s->primary = source_pg_connect(s->primary_dsn, s->password, PG_CONN_ORDINARY,
							   &invalid, err, errlen)))
		PQsetNoticeReceiver(s->primary, on_notice, NULL);
	if (!s->primary)
		snprintf(err + strlen(err), errlen - strlen(err), " (source.primary_dsn)");
	return s->primary;
}

/* A slot made on a standby waits until the primary logs the transactions running, in a
 * running-transactions record, every 15 s while the primary writes. pg_log_standby_snapshot() on the
 * primary writes one now. */
#define STANDBY_SNAPSHOT_WAIT_MS 8000 /* under /healthz's 10 s, since the loop waits meanwhile */

static PGresult *create_on_standby(source *s, const char *sql, int n, const char *const *params, char *err,
				   size_t errlen)
{
	log_info("creating the slot on a standby: PostgreSQL waits for a running-transactions record "
		 "from the primary (written every 15 s while it has writes; "
		 "SELECT pg_log_standby_snapshot() on the primary writes one at once)",
		 "slot=%s primary_dsn=%s", s->slot, s->primary_dsn[0] ? "set (cdc asks it)" : "unset");
	if (!PQsendQueryParams(s->admin, sql, n, NULL, params, NULL, NULL, 0)) {
		util_errf(err, errlen, "%s", source_pg_one_line(PQerrorMessage(s->admin)));
		return NULL;
	}
	char why[512];
	for (uint64_t until = util_now_ms() + STANDBY_SNAPSHOT_WAIT_MS;;) {
		if (s->primary_dsn[0]) {
			PGconn *p = writer(s, why, sizeof(why));
			PGresult *r = p ? PQexec(p, "SELECT pg_catalog.pg_log_standby_snapshot()") : NULL;
			if (!p || PQresultStatus(r) != PGRES_TUPLES_OK)
				log_warn("cannot ask the primary for a running-transactions record",
					 "error=\"%s\"", p ? source_pg_one_line(PQerrorMessage(p)) : why);
			PQclear(r);
		}
		struct pollfd pfd = {.fd = PQsocket(s->admin), .events = POLLIN};
		if (poll(&pfd, 1, 1000) < 0 || !PQconsumeInput(s->admin)) {
			util_errf(err, errlen, "%s", source_pg_one_line(PQerrorMessage(s->admin)));
			return NULL;
		}
		if (!PQisBusy(s->admin))
			break;
		if (util_now_ms() >= until) {
			PGcancel *c = PQgetCancel(s->admin);
			PQcancel(c, why, sizeof(why));
			PQfreeCancel(c);
			PGresult *r;
			while ((r = PQgetResult(s->admin)))
				PQclear(r);
			util_errf(
			    err, errlen,
			    "creating replication slot %s on the standby waited %d s for a "
			    "running-transactions "
			    "record from the primary: run SELECT pg_log_standby_snapshot() on the primary, "
			    "or set "
			    "source.primary_dsn so that cdc asks it",
			    s->slot, STANDBY_SNAPSHOT_WAIT_MS / 1000);
			return NULL;
		}
	}
	PGresult *res = PQgetResult(s->admin), *more;
	while ((more = PQgetResult(s->admin)))
		PQclear(more);
	return res;
}

/* With exists_ok, a slot another process created meanwhile will do. That is at a start. A re-sync
 * must create its own. */
static source_result create_slot(source *s, bool exists_ok, char *err, size_t errlen)
{
	/* Two-phase decoding needs protocol 3 (PostgreSQL 15). Failover slots need 17, on a primary. */
	int v = PQserverVersion(s->admin);
	const char *params[] = {s->slot, v >= 150000 ? "true" : "false",
				s->failover && !s->server.in_recovery ? "true" : "false"};
	const char *sql =
	    v >= 170000
		? "SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput', "
		  "false, $2::bool, $3::bool)"
	    : v >= 140000
		? "SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput', "
		  "false, $2::bool)"
		: "SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')";
	int n = v >= 170000 ? 3 : v >= 140000 ? 2 : 1;
	PGresult *res = s->server.in_recovery ? create_on_standby(s, sql, n, params, err, errlen)
					      : exec_params(s->admin, sql, n, params);
	if (!res)
		return SOURCE_RETRY;
	if (PQresultStatus(res) != PGRES_TUPLES_OK && exists_ok && created_meanwhile(res)) {
		PQclear(res);
		log_info("replication slot created by another process meanwhile; using it", "slot=%s",
			 s->slot);
		return SOURCE_OK;
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		bool full = sqlstate && strcmp(sqlstate, "53400") == 0; /* configuration_limit_exceeded */
		source_result r = query_failed(s->admin, res, "creating the replication slot", err, errlen);
		pg_fix f = {0};
		char why[256];
		if (full && source_fix_slots_full(s->admin, false, &f, why, sizeof(why)))
			add_fix(err, errlen, &f);
		else
			source_fix_free(&f);
		return r;
	}
	log_info("created replication slot", "slot=%s plugin=pgoutput lsn=%s failover=%s on=%s", s->slot,
		 PQgetvalue(res, 0, 0), params[2], s->server.in_recovery ? "standby" : "primary");
	PQclear(res);
	return SOURCE_OK;
}

/* PostgreSQL lets one connection stream a slot. Whoever holds it is active, and this cdc a standby. */
static source_result slot_busy(source *s, int pid, char *err, size_t errlen)
{
	util_errf(err, errlen, "replication slot %s is streamed by another process (walsender PID %d)",
		  s->slot, pid);
	s->holder = pid;
	return SOURCE_BUSY;
}

/* What PostgreSQL 17's pg_replication_slots.invalidation_reason means. */
static const char *invalidation_why(const char *reason)
{
	if (strcmp(reason, "wal_removed") == 0)
		return ": the server removed WAL past max_slot_wal_keep_size";
	if (strcmp(reason, "idle_timeout") == 0)
		return ": no process streamed it for longer than idle_replication_slot_timeout";
	if (strcmp(reason, "rows_removed") == 0)
		return ": the primary removed rows its catalog still needed (hot_standby_feedback)";
	if (strcmp(reason, "wal_level_insufficient") == 0)
		return ": wal_level on the primary is below logical";
	return "";
}

/* Every way the slot can be unusable, each with what to do about it. */
static source_result check_slot(source *s, const slot_row *row, const state *st, bool have_st, char *err,
				size_t errlen)
{
	char rec[LSN_STRLEN], cur[LSN_STRLEN];
	util_lsn_format(have_st ? st->flushed_lsn : 0, rec);
	util_lsn_format(row->confirmed_flush, cur);
	/* Another process (a cdc started at the same moment) is creating it, since PostgreSQL lists the
	 * slot before its plugin. Wait as a standby and look again, as for a slot another process
	 * streams. */
	if (source_pg_slot_being_created(row)) {
		log_info("replication slot being created by another process; waiting for it",
			 "slot=%s pid=%d", s->slot, row->active_pid);
		return slot_busy(s, row->active_pid, err, errlen);
	}
	if (strcmp(row->type, "logical") != 0 || strcmp(row->plugin, "pgoutput") != 0) {
		util_errf(
		    err, errlen,
		    "replication slot %s uses plugin %s (%s slot), but cdc needs a logical slot with plugin "
		    "pgoutput: "
		    "choose another source.slot, or drop this one if nothing else uses it",
		    s->slot, row->plugin[0] ? row->plugin : "none", row->type);
		return SOURCE_FATAL;
	}
	if (strcmp(row->wal_status, "lost") == 0) {
		util_errf(
		    err, errlen,
		    "replication slot %s has lost WAL it needed (wal_status = lost%s%s%s): changes after %s "
		    "are gone from the server. Set source.on_slot_lost: resync to have cdc recreate the slot "
		    "and backfill every subscription, or drop the slot (SELECT "
		    "pg_drop_replication_slot('%s')), resynchronise consumers from the tables, and start "
		    "again",
		    s->slot, row->invalidation_reason[0] ? ", invalidation_reason = " : "",
		    row->invalidation_reason, invalidation_why(row->invalidation_reason), cur, s->slot);
		s->gap = SOURCE_GAP_SLOT_LOST;
		return SOURCE_GAP;
	}
	if (s->server.in_recovery && row->synced) {
		/* retried, since the standby may be promoted, or the next connection reach the primary */
		util_errf(
		    err, errlen,
		    "replication slot %s on %s, a standby, is a copy synchronized from the primary, which "
		    "only a promotion makes usable: point source.dsn at the primary; with several hosts, add "
		    "target_session_attrs=read-write",
		    s->slot, s->server.host);
		return SOURCE_RETRY;
	}
	/* Before the position. A standby's record is behind a slot that another cdc streams. */
	if (row->active_pid)
		return slot_busy(s, row->active_pid, err, errlen);
	if (have_st && row->confirmed_flush > st->flushed_lsn && !s->after_standby) {
		buf note = {0};
		promotion_note(s, &note);
		util_errf(
		    err, errlen,
		    "replication slot %s is at %s, ahead of the position cdc recorded in state_dir (%s): "
		    "something else consumed or advanced the slot, or it was dropped and recreated, so "
		    "changes in between may never have been delivered.%s Set source.on_slot_lost: resync to "
		    "have cdc recreate the slot and backfill every subscription, or resynchronise "
		    "consumers, then remove %s to accept the slot's position",
		    s->slot, cur, rec, note.len ? note.data : "", "state_dir/position");
		buf_free(&note);
		s->gap = SOURCE_GAP_SLOT_LOST; /* as good as lost, since what it skipped is gone */
		return SOURCE_GAP;
	}
	return SOURCE_OK;
}

/* source.failover on a slot that is not yet a failover slot (made by hand, or by a cdc without it).
 * It is turned on, on the replication connection, before the slot is streamed. */
static source_result turn_on_failover(source *s, const slot_row *row, char *err, size_t errlen)
{
	if (!s->failover || row->failover || s->server.in_recovery)
		return SOURCE_OK;
	buf sql = {0};
	buf_puts(&sql, "ALTER_REPLICATION_SLOT ");
	source_pg_append_quoted(&sql, s->slot, '"');
	buf_puts(&sql, " ( FAILOVER true )");
	PGresult *res = PQexec(s->repl, sql.data);
	buf_free(&sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return query_failed(s->repl, res, "turning on failover for the replication slot", err,
				    errlen);
	PQclear(res);
	log_info("turned failover on for the replication slot (source.failover)", "slot=%s", s->slot);
	return SOURCE_OK;
}

static source_result identify(source *s, state *st, bool have_st, char *err, size_t errlen)
{
	PGresult *res = PQexec(s->repl, "IDENTIFY_SYSTEM");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQnfields(res) < 2 || PQntuples(res) != 1)
		return query_failed(s->repl, res, "IDENTIFY_SYSTEM", err, errlen);
	snprintf(s->system_id, sizeof(s->system_id), "%s", PQgetvalue(res, 0, 0));
	s->server.timeline = (uint32_t)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
	PQclear(res);
	if (have_st && strcmp(st->system_id, s->system_id) != 0) {
		util_errf(
		    err, errlen,
		    "state_dir belongs to database system %s, but the server is system %s: give this server "
		    "its "
		    "own state_dir",
		    st->system_id, s->system_id);
		return SOURCE_FATAL;
	}
	if (have_st && strcmp(st->slot, s->slot) != 0) {
		util_errf(
		    err, errlen,
		    "state_dir records the position of slot %s, but source.slot is %s: use another state_dir",
		    st->slot, s->slot);
		return SOURCE_FATAL;
	}
	return SOURCE_OK;
}

/* Which server the connections reached, and whether it is a standby. With several hosts in
 * source.dsn each connection picks its own. Both must be on the same server. */
static source_result server_role(source *s, char *err, size_t errlen)
{
	source_server *v = &s->server;
	char admin_host[sizeof(v->host)];
	snprintf(v->host, sizeof(v->host), "%s:%s", PQhost(s->repl), PQport(s->repl));
	snprintf(admin_host, sizeof(admin_host), "%s:%s", PQhost(s->admin), PQport(s->admin));
	if (strcmp(v->host, admin_host) != 0) {
		util_errf(err, errlen,
			  "the replication connection reached %s, the ordinary one %s: with several hosts in "
			  "source.dsn, add target_session_attrs=read-write (or primary)",
			  v->host, admin_host);
		return SOURCE_RETRY;
	}
	PGresult *res = PQexec(s->admin, "SELECT pg_catalog.pg_is_in_recovery()");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		return query_failed(s->admin, res, "asking whether the server is a standby", err, errlen);
	v->in_recovery = PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	int ver = PQserverVersion(s->admin);
	if (s->failover && ver < 170000) {
		util_errf(
		    err, errlen,
		    "source.failover needs PostgreSQL 17 or later (failover slots), and the server is %d.%d: "
		    "remove it; before 17 a promotion loses the slot, and source.on_slot_lost says what cdc "
		    "does then",
		    ver / 10000, ver % 10000);
		return SOURCE_FATAL;
	}
	if (!v->in_recovery)
		return SOURCE_OK;
	/* A standby is retried. It may be promoted, or the next connection may reach the primary. */
	if (s->failover) {
		util_errf(
		    err, errlen,
		    "%s is a standby, and source.failover needs the primary (a failover slot is made on "
		    "the primary and synchronized to its standbys): point source.dsn at the primary; with "
		    "several hosts, add target_session_attrs=read-write",
		    v->host);
		return SOURCE_RETRY;
	}
	if (ver < 160000) {
		util_errf(
		    err, errlen,
		    "%s is a standby, and PostgreSQL %d cannot decode on a standby (16 can): point "
		    "source.dsn at the primary; with several hosts, add target_session_attrs=read-write",
		    v->host, ver / 10000);
		return SOURCE_RETRY;
	}
	if (s->heartbeat && !s->primary_dsn[0]) {
		util_errf(
		    err, errlen,
		    "source.heartbeat writes a message into the WAL, which a standby cannot (%s is one): set "
		    "source.primary_dsn to its primary, where cdc then writes it, or remove source.heartbeat",
		    v->host);
		return SOURCE_FATAL;
	}
	return SOURCE_OK;
}

/* Why a promotion left the slot missing, for the messages that follow one. */
static void promotion_note(const source *s, buf *b)
{
	const source_server *v = &s->server;
	if (!v->promoted_from)
		return;
	buf_printf(b, " The server (%s) was promoted since cdc's position (timeline %u -> %u", v->host,
		   v->promoted_from, v->timeline);
	if (v->previous_host[0] && strcmp(v->previous_host, v->host) != 0)
		buf_printf(b, ", cdc streamed from %s before", v->previous_host);
	buf_puts(b, "): ");
	if (PQserverVersion(s->admin) < 170000)
		buf_puts(b, "before PostgreSQL 17 a logical slot does not survive a promotion.");
	else if (!s->failover)
		buf_puts(b,
			 "the slot was no failover slot (source.failover: true makes it one, and a standby "
			 "with sync_replication_slots keeps a copy).");
	else
		buf_puts(b,
			 "its synchronized copy was not on the standby yet (check source.failover.ready in "
			 "cdc status before a switchover).");
}

/* The timeline moved on since the position cdc recorded (st) or the last stream. That means a
 * promotion of a standby (or a point-in-time recovery). It is fine while the server's history left the
 * old timeline after every position cdc had. Else changes cdc may have delivered never happened here,
 * and positions repeat, which is a gap (sinks and consumers tell changes apart by commit LSN). It is
 * also fine when the slot here (confirmed at slot_lsn) moved past where the old timeline ended. Only
 * cdc moves it, so cdc streamed this very server after its promotion. That was a standby promoted under
 * it, whose new timeline a crash kept out of the record. A synchronized copy is never past that point. */
static source_result check_timeline(source *s, const state *st, bool have_st, uint64_t slot_lsn, char *err,
				    size_t errlen)
{
	source_server *v = &s->server;
	struct {
		uint32_t tli;
		uint64_t lsn;
	} seen[2] = {{have_st ? st->timeline : 0, have_st ? st->flushed_lsn : 0},
		     {s->stream_tli, s->stream_max}};
	v->promoted_from = 0;
	PGresult *history = NULL;
	source_result r = SOURCE_OK;
	for (int i = 0; i < 2 && r == SOURCE_OK; i++) {
		if (!seen[i].tli || seen[i].tli == v->timeline)
			continue;
		uint64_t end = 0;
		bool known = false;
		if (seen[i].tli < v->timeline) {
			if (v->promoted_from < seen[i].tli)
				v->promoted_from = seen[i].tli;
			if (!history) {
				char cmd[64];
				snprintf(cmd, sizeof(cmd), "TIMELINE_HISTORY %u", v->timeline);
				history = PQexec(s->repl, cmd);
				if (PQresultStatus(history) != PGRES_TUPLES_OK || PQntuples(history) != 1 ||
				    PQnfields(history) < 2)
					return query_failed(s->repl, history, "TIMELINE_HISTORY", err,
							    errlen);
			}
			known = source_failover_switch_point(
			    PQgetvalue(history, 0, 1), (size_t)PQgetlength(history, 0, 1), seen[i].tli, &end);
		}
		if (known && (seen[i].lsn <= end || slot_lsn > end))
			continue;
		char at[LSN_STRLEN], left[LSN_STRLEN];
		util_lsn_format(seen[i].lsn, at);
		util_lsn_format(end, left);
		if (known)
			util_errf(
			    err, errlen,
			    "the server (%s) was promoted (timeline %u -> %u), and its history left "
			    "timeline %u "
			    "at %s, before position %s that cdc had read: what cdc delivered after %s never "
			    "happened on this server, and its own changes from there would be skipped (the "
			    "primary had sent cdc changes its standby did not have; on PostgreSQL 17, "
			    "source.failover with synchronized_standby_slots on the primary prevents this). "
			    "Set "
			    "source.on_slot_lost: resync to have cdc recreate the slot and backfill every "
			    "subscription (consumers replace what they hold: see the re-sync marker), or "
			    "resynchronise consumers, then remove state_dir/position",
			    v->host, seen[i].tli, v->timeline, seen[i].tli, left, at, left);
		else
			util_errf(
			    err, errlen,
			    "the server (%s) is on timeline %u, whose history does not pass through timeline "
			    "%u "
			    "where cdc read up to %s (not a promoted standby of the server cdc streamed "
			    "from): "
			    "changes cdc delivered may never have happened here. Set source.on_slot_lost: "
			    "resync "
			    "to have cdc recreate the slot and backfill every subscription, or resynchronise "
			    "consumers, then remove state_dir/position",
			    v->host, v->timeline, seen[i].tli, at);
		s->gap = SOURCE_GAP_SLOT_LOST;
		r = SOURCE_GAP;
	}
	PQclear(history);
	return r;
}

static source_result start_replication(source *s, uint64_t start, char *err, size_t errlen)
{
	int v = PQserverVersion(s->repl);
	s->proto.proto_version = source_pg_protocol_for(v);
	s->proto.stream_abort_info = s->proto.proto_version >= 4;
	char lsn[LSN_STRLEN];
	util_lsn_format(start, lsn);
	/* The slot is a quoted identifier of the replication grammar. publication_names is a string
	 * literal holding a list of identifiers that pgoutput splits at commas. So the publication is
	 * quoted twice, as an identifier ("" for a quote), then as a literal ('' for a quote). */
	buf pubs = {0}, sql = {0};
	source_pg_append_quoted(&pubs, s->publication, '"');
	buf_puts(&sql, "START_REPLICATION SLOT ");
	source_pg_append_quoted(&sql, s->slot, '"');
	buf_printf(&sql, " LOGICAL %s (proto_version '%d', publication_names ", lsn, s->proto.proto_version);
	source_pg_append_quoted(&sql, pubs.data, '\'');
	buf_free(&pubs);
	if (s->proto.proto_version >= 2)
		buf_printf(&sql, ", messages 'true', streaming '%s'",
			   s->proto.proto_version >= 4 ? "parallel" : "on");
	if (s->proto.proto_version >= 3)
		buf_puts(&sql, ", two_phase 'on'");
	buf_putc(&sql, ')');
	PGresult *res = PQexec(s->repl, sql.data);
	buf_free(&sql);
	if (PQresultStatus(res) != PGRES_COPY_BOTH)
		return query_failed(s->repl, res, "START_REPLICATION", err, errlen);
	PQclear(res);
	if (PQsetnonblocking(s->repl, 1) != 0) {
		util_errf(err, errlen, "cannot make the replication connection non-blocking");
		return SOURCE_RETRY;
	}
	log_info("streaming", "slot=%s publication=%s from=%s protocol=%d server=%d", s->slot, s->publication,
		 lsn, s->proto.proto_version, v);
	return SOURCE_OK;
}

source_result source_start(source *s, state *st, bool have_st, pgo_relcache *rc, catalog *cat, char *err,
			   size_t errlen)
{
	source_disconnect(s);
	source_result r = SOURCE_RETRY;
	slot_row row;
	if (!(s->admin = connect_db(s, false, err, errlen))) {
		if (s->dsn_invalid)
			r = SOURCE_FATAL;
		goto out;
	}
	if (!(s->repl = connect_db(s, true, err, errlen))) {
		repl_refused(s, err, errlen);
		goto out;
	}
	PQsetNoticeReceiver(s->repl, repl_notice, s);
	if ((r = identify(s, st, have_st, err, errlen)) != SOURCE_OK ||
	    (r = server_role(s, err, errlen)) != SOURCE_OK ||
	    (r = check_wal_level(s, err, errlen)) != SOURCE_OK ||
	    (r = ensure_publication(s, err, errlen)) != SOURCE_OK ||
	    (r = read_catalog(s, cat, err, errlen)) != SOURCE_OK ||
	    (s->ddl && (r = ensure_ddl_trigger(s, err, errlen)) != SOURCE_OK) ||
	    (r = load_primary_keys(s, rc, err, errlen)) != SOURCE_OK ||
	    (r = read_slot(s, &row, err, errlen)) != SOURCE_OK ||
	    (r = check_timeline(s, st, have_st, row.exists ? row.confirmed_flush : 0, err, errlen)) !=
		SOURCE_OK)
		goto out;
	if (!row.exists) {
		if (have_st) {
			char rec[LSN_STRLEN];
			util_lsn_format(st->flushed_lsn, rec);
			buf note = {0};
			promotion_note(s, &note);
			util_errf(
			    err, errlen,
			    "replication slot %s does not exist, but cdc recorded position %s in it: the "
			    "slot was dropped and changes after %s are lost.%s cdc does not recreate it "
			    "silently: set source.on_slot_lost: resync to have it recreate the slot and "
			    "backfill every subscription, or resynchronise consumers, then remove "
			    "state_dir/position to start from a new slot",
			    s->slot, rec, rec, note.len ? note.data : "");
			buf_free(&note);
			s->gap = SOURCE_GAP_SLOT_LOST;
			r = SOURCE_GAP;
			goto out;
		}
		if (!s->create) {
			pg_fix f = {0};
			source_fix_create_slot(s->slot, &f);
			util_errf(err, errlen, "replication slot %s does not exist", s->slot);
			add_fix(err, errlen, &f);
			r = SOURCE_FATAL;
			goto out;
		}
		if ((r = create_slot(s, true, err, errlen)) != SOURCE_OK ||
		    (r = read_slot(s, &row, err, errlen)) != SOURCE_OK)
			goto out;
	}
	if ((r = check_slot(s, &row, st, have_st, err, errlen)) != SOURCE_OK ||
	    (r = turn_on_failover(s, &row, err, errlen)) != SOURCE_OK)
		goto out;
	if (have_st && row.confirmed_flush < st->flushed_lsn) {
		char rec[LSN_STRLEN], cur[LSN_STRLEN];
		util_lsn_format(st->flushed_lsn, rec);
		util_lsn_format(row.confirmed_flush, cur);
		/* The server saves confirmed positions lazily. After its crash the slot can be behind.
		 * A failover slot's copy on a standby is synchronized every few seconds. */
		log_info(
		    s->server.promoted_from
			? "slot is behind the recorded position (its synchronized copy on the promoted "
			  "server lags); resuming from the recorded one"
			: "slot is behind the recorded position (the server restarted without saving it); "
			  "resuming from the recorded one",
		    "slot=%s slot_lsn=%s recorded=%s", s->slot, cur, rec);
	}
	if (!have_st || row.confirmed_flush > st->flushed_lsn)
		st->flushed_lsn = row.confirmed_flush;
	snprintf(st->system_id, sizeof(st->system_id), "%s", s->system_id);
	snprintf(st->slot, sizeof(st->slot), "%s", s->slot);
	st->timeline = s->server.timeline;
	if ((r = start_replication(s, st->flushed_lsn, err, errlen)) != SOURCE_OK)
		goto out;
	if (s->server.promoted_from)
		log_warn("following a promotion: the server is on a newer timeline than cdc's position; "
			 "resuming from the slot there",
			 "slot=%s timeline=%u previous_timeline=%u server=%s previous_server=%s", s->slot,
			 s->server.timeline, s->server.promoted_from, s->server.host,
			 s->server.previous_host[0] ? s->server.previous_host : "-");
	s->stream_tli = s->server.timeline;
	s->stream_max = st->flushed_lsn;
	snprintf(s->server.previous_host, sizeof(s->server.previous_host), "%s", s->server.host);
out:
	if (r != SOURCE_OK) {
		source_disconnect(s);
		source_redact(s, err, errlen);
	}
	return r;
}

int source_fd(const source *s)
{
	return s->repl ? PQsocket(s->repl) : -1;
}

bool source_connected(const source *s)
{
	struct pollfd p = {.fd = source_fd(s), .events = POLLRDHUP};
	return p.fd >= 0 && poll(&p, 1, 0) >= 0 && !(p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

int source_server_version(const source *s)
{
	return s->repl ? PQserverVersion(s->repl) : 0;
}

const char *source_database(const source *s)
{
	return s->repl ? PQdb(s->repl) : NULL;
}

const pgo_options *source_protocol(const source *s)
{
	return &s->proto;
}

/* The walsender decodes each change with the catalog as of that change. A publication created after
 * the slot's position does not exist there yet, and every start fails the same way. Up to PostgreSQL
 * 17 the stream ends with an error (publication_newer). 18 skips the changes with a warning instead
 * (repl_notice). cdc treats that the same, rather than lose them without a word. */
static bool publication_gap(source *s, const char *msg, char *err, size_t errlen)
{
	util_errf(err, errlen,
		  "the server cannot decode the slot's changes: %s. The publication was created after the "
		  "position of replication slot %s, and the server reads the slot's WAL with the catalog as "
		  "it was then, so every start fails the same way. Ways out: set "
		  "source.on_publication_newer: resync to have cdc move the slot to the current WAL position "
		  "and backfill every subscription (the changes in between arrive as reads of the rows as "
		  "they are now); or drop the slot and remove state_dir/position to start afresh; or, if "
		  "nothing else needs them, move the slot yourself past the publication's creation",
		  source_pg_one_line(msg), s->slot);
	source_redact(s, err, errlen);
	s->gap = SOURCE_GAP_PUBLICATION_NEWER;
	return true;
}

static bool publication_newer(source *s, const PGresult *res, char *err, size_t errlen)
{
	const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	if (!sqlstate || !msg || strcmp(sqlstate, "42704") != 0 || strncmp(msg, "publication ", 12) != 0)
		return false;
	return publication_gap(s, msg, err, errlen);
}

static source_result publication_skipped(source *s, char *err, size_t errlen)
{
	buf msg = {0};
	buf_puts(&msg, "publication ");
	source_pg_append_quoted(&msg, s->publication, '"');
	buf_puts(&msg, " does not exist at this point in the WAL (the server skips the changes with the "
		       "warning \"skipped loading publication\"; cdc stops rather than lose them)");
	publication_gap(s, msg.data, err, errlen);
	buf_free(&msg);
	return SOURCE_GAP;
}

/* Notices on the replication connection. The walsender sends PostgreSQL 18's "skipped loading
 * publication" warning ahead of every message that follows the skipped changes. So source_read looks
 * at s->skipped after each message it takes, before handling it. Others go to the log. */
static void repl_notice(void *arg, const PGresult *res)
{
	source *s = arg;
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	/* object_not_in_prerequisite_state, naming the publication (the words may be translated) */
	if (sqlstate && msg && strcmp(sqlstate, "55000") == 0 && strstr(msg, s->publication))
		s->skipped = true;
	else
		on_notice(NULL, res);
}

static source_result lost(source *s, const char *what, char *err, size_t errlen)
{
	util_errf(err, errlen, "replication connection lost (%s): %s", what,
		  source_pg_one_line(PQerrorMessage(s->repl)));
	source_redact(s, err, errlen);
	return SOURCE_RETRY;
}

void source_batch(source *s, bool on)
{
	int lowat = on ? SOURCE_BATCH_BYTES : 1;
	if (s->repl && setsockopt(PQsocket(s->repl), SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)) != 0)
		log_debug("cannot set SO_RCVLOWAT on the replication socket", "error=\"%s\"",
			  strerror(errno));
	s->batching = on;
}

bool source_unix_socket(const source *s)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	return s->repl && getsockname(PQsocket(s->repl), (struct sockaddr *)&sa, &len) == 0 &&
	       sa.ss_family == AF_UNIX;
}

source_result source_read(source *s, const source_handler *h, char *err, size_t errlen)
{
	if (!PQconsumeInput(s->repl))
		return lost(s, "read", err, errlen);
	/* libpq reads one buffer (16 kB or so) at a time. While batching, read on while that brings
	 * messages, up to SOURCE_BATCH_READS buffers. So the event loop (sinks, timers, the status
	 * socket) has its turn however fast the server sends. */
	int more = s->batching ? SOURCE_BATCH_READS : 0;
	for (bool got = false;;) {
		char *msg = NULL;
		int n = PQgetCopyData(s->repl, &msg, 1);
		if (s->skipped) {
			PQfreemem(msg);
			return publication_skipped(s, err, errlen);
		}
		if (n == 0 && got && more-- > 0) {
			got = false;
			if (!PQconsumeInput(s->repl))
				return lost(s, "read", err, errlen);
			continue;
		}
		if (n == 0)
			return SOURCE_OK;
		got = true;
		if (n == -2)
			return lost(s, "read", err, errlen);
		if (n == -1) {
			PGresult *res = PQgetResult(s->repl);
			source_result r = publication_newer(s, res, err, errlen)
					      ? SOURCE_GAP
					      : lost(s, "the server ended the stream", err, errlen);
			PQclear(res);
			return r;
		}
		const uint8_t *p = (const uint8_t *)msg;
		bool ok;
		if (p[0] == 'w' && n >= 25) {
			ok = h->xlogdata(h->ctx, p + 25, (size_t)n - 25, get_be64(p + 1), err, errlen);
		} else if (p[0] == 'k' && n >= 18) {
			ok = h->keepalive(h->ctx, get_be64(p + 1), p[17] != 0, err, errlen);
		} else {
			ok = util_errf(err, errlen,
				       "unexpected replication message '%c' of %d bytes from the server",
				       p[0] >= 0x20 && p[0] < 0x7f ? p[0] : '?', n);
		}
		PQfreemem(msg);
		if (!ok)
			return SOURCE_FATAL;
	}
}

source_result source_send_status(source *s, uint64_t write_lsn, uint64_t flush_lsn, bool reply, char *err,
				 size_t errlen)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	int64_t now = (int64_t)tv.tv_sec * 1000000 + tv.tv_usec - PGO_EPOCH_OFFSET_US;
	uint8_t m[34];
	m[0] = 'r';
	put_be64(m + 1, write_lsn);	 /* received and written */
	put_be64(m + 9, flush_lsn);	 /* delivered to every sink that wants it (the slot may move here) */
	put_be64(m + 17, flush_lsn);	 /* applied, as flushed (cdc applies nothing itself) */
	put_be64(m + 25, (uint64_t)now); /* client clock, microseconds since 2000-01-01 */
	m[33] = reply ? 1 : 0;		 /* ask for an immediate keepalive back */
	if (PQputCopyData(s->repl, (const char *)m, sizeof(m)) != 1 || PQflush(s->repl) < 0)
		return lost(s, "write", err, errlen);
	return SOURCE_OK;
}

bool source_output_pending(source *s)
{
	return s->repl && PQflush(s->repl) == 1;
}

/* The answer of source_poll_server's query (SERVER_SQL). It says whether the server is a standby, and
 * its timeline while a primary (the first 8 hex digits of a WAL file's name). With source.failover, it
 * gives synchronized_standby_slots, the slot's failover flag and one row per slot (or one of NULLs).
 * A standby promoted while cdc streams from it shows here, since its walsenders go on. */
static void server_result(source *s, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) < 1)
		return; /* the connection failed, so it is asked again */
	source_server *v = &s->server;
	v->in_recovery = PQgetvalue(res, 0, 0)[0] == 't';
	char hex[9];
	if (!v->in_recovery && sscanf(PQgetvalue(res, 0, 1), "%8[0-9A-F]", hex) == 1 && strlen(hex) == 8) {
		uint32_t tli = (uint32_t)strtoul(hex, NULL, 16);
		if (tli && tli != v->timeline)
			v->timeline = s->stream_tli = tli;
	}
	if (PQnfields(res) < 8)
		return;
	source_failover *f = &s->failover_state;
	int n = PQntuples(res);
	failover_slot *slots = util_xcalloc((size_t)n, sizeof(*slots));
	size_t k = 0;
	for (int i = 0; i < n; i++)
		if (!PQgetisnull(res, i, 4))
			slots[k++] = (failover_slot){PQgetvalue(res, i, 4), PQgetvalue(res, i, 5),
						     PQgetvalue(res, i, 7), PQgetvalue(res, i, 6)[0] == 't'};
	f->known = true;
	f->slot_failover = PQgetvalue(res, 0, 3)[0] == 't';
	snprintf(f->setting, sizeof(f->setting), "%s", PQgetvalue(res, 0, 2));
	f->reason =
	    source_failover_judge(s->slot, f->slot_failover, f->setting, slots, k, f->why, sizeof(f->why));
	free(slots);
}

/* The tables the publication lacks, and the statement that adds those the role owns, for the next
 * turn. */
static void pub_listed(source *s, PGresult *res)
{
	size_t n;
	pg_table_row *rows = source_pg_table_rows(res, &n);
	buf warnings = {0};
	cfg_strlist_free(&s->pub_adding);
	buf_reset(&s->pub_sql);
	source_pg_publication_additions(&s->pub_sql, s->publication, &s->publish, rows, n, &s->pub_adding,
					&s->pub_warned, &warnings);
	for (const char *p = warnings.data; p && *p; p += strcspn(p, "\n") + 1)
		log_warn("publication", "warning=\"%.*s\"", (int)strcspn(p, "\n"), p);
	buf_free(&warnings);
	free(rows);
}

/* Takes the result of a heartbeat, slot health, server, catalog or publication query. */
static void admin_result(source *s, int kind, PGresult *res)
{
	bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (kind == ADMIN_CATALOG) {
		catalog *c = util_xcalloc(1, sizeof(*c));
		if (ok && source_catalog_add_result(c, res)) {
			s->catalog = c;
			return;
		}
		util_errf(s->catalog_error, sizeof(s->catalog_error),
			  "reading the tables' replica identities and keys: %s",
			  ok ? "an unexpected result" : source_pg_one_line(PQresultErrorMessage(res)));
		source_catalog_free(c);
		free(c);
		return;
	}
	if (kind == ADMIN_PUB_LIST || kind == ADMIN_PUB_ADD) {
		bool done = ok || PQresultStatus(res) == PGRES_COMMAND_OK;
		if (!done)
			util_errf(s->pub_error, sizeof(s->pub_error), "%s the publication: %s",
				  kind == ADMIN_PUB_LIST ? "listing the tables for" : "adding tables to",
				  source_pg_one_line(PQresultErrorMessage(res)));
		else if (kind == ADMIN_PUB_LIST)
			pub_listed(s, res);
		else
			for (size_t i = 0; i < s->pub_adding.n; i++)
				cfg_strlist_push(&s->pub_added, s->pub_adding.v[i]);
		if (kind == ADMIN_PUB_ADD)
			cfg_strlist_free(&s->pub_adding);
		return;
	}
	if (kind == ADMIN_SERVER) {
		server_result(s, res);
		return;
	}
	if (kind == ADMIN_HEARTBEAT) {
		/* PostgreSQL 17 added the function's fourth argument (flush boolean DEFAULT false) */
		if (!ok)
			util_errf(s->heartbeat_error, sizeof(s->heartbeat_error),
				  "heartbeat failed: %s (the role needs GRANT EXECUTE ON FUNCTION "
				  "pg_catalog.pg_logical_emit_message(boolean, text, text%s))",
				  source_pg_one_line(PQresultErrorMessage(res)),
				  PQserverVersion(s->admin) >= 170000 ? ", boolean" : "");
		return;
	}
	s->health = (source_slot_health){0};
	if (!ok)
		return;
	pg_slot_row row;
	source_pg_slot_parse(res, &row);
	if (!row.exists)
		return; /* no such slot any more, and streaming will say so */
	s->health.known = true;
	snprintf(s->health.wal_status, sizeof(s->health.wal_status), "%s", row.wal_status);
	s->health.safe_wal_size_known = row.safe_wal_size_known;
	s->health.safe_wal_size = row.safe_wal_size;
	s->health.max_keep_size = row.max_keep_size;
	s->health.server_lsn = row.server_lsn;
	s->health.has_invalidation = row.has_invalidation;
	snprintf(s->health.invalidation_reason, sizeof(s->health.invalidation_reason), "%s",
		 row.invalidation_reason);
	s->health.inactive_since_us = row.inactive_since_us;
	s->health.idle_timeout_s = row.idle_timeout_s;
}

/* Collects the answer of the query in flight on an ordinary connection (the admin one, or the
 * primary's while the server is a standby), without waiting. False (err set) if the connection
 * failed. *idle says whether it can take the next query. */
static bool admin_collect(source *s, PGconn *conn, int *busy, bool *idle, char *err, size_t errlen)
{
	*idle = *busy == ADMIN_IDLE;
	if (*idle)
		return true;
	if (!PQconsumeInput(conn))
		return util_errf(err, errlen, "%s", source_pg_one_line(PQerrorMessage(conn)));
	if (PQisBusy(conn))
		return true; /* still running, so do not pile up */
	PGresult *res;
	while ((res = PQgetResult(conn))) {
		admin_result(s, *busy, res);
		PQclear(res);
	}
	*busy = ADMIN_IDLE;
	*idle = true;
	return true;
}

/* Sends a query without waiting, after collecting the answer of the previous one. It goes on the
 * admin connection, or with to_writer on writer()'s. False (err set) if the connection failed. *sent
 * is false while the previous one runs. */
static bool admin_send(source *s, bool to_writer, int kind, const char *sql, int nparams,
		       const char *const *params, bool *sent, char *err, size_t errlen)
{
	*sent = false;
	if (!s->admin || PQstatus(s->admin) != CONNECTION_OK) {
		PQfinish(s->admin);
		s->admin_busy = ADMIN_IDLE;
		if (!(s->admin = connect_db(s, false, err, errlen)))
			return false;
	}
	PGconn *conn = to_writer ? writer(s, err, errlen) : s->admin;
	if (!conn)
		return false;
	int *busy = conn == s->admin ? &s->admin_busy : &s->primary_busy;
	bool idle;
	if (!admin_collect(s, conn, busy, &idle, err, errlen))
		return false;
	if (!idle)
		return true;
	if (!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))
		return util_errf(err, errlen, "%s", source_pg_one_line(PQerrorMessage(conn)));
	*busy = kind;
	*sent = true;
	return true;
}

bool source_heartbeat(source *s, char *err, size_t errlen)
{
	bool sent;
	char why[512];
	if (!admin_send(s, true, ADMIN_HEARTBEAT,
			"SELECT pg_catalog.pg_logical_emit_message(true, '" SOURCE_HEARTBEAT_PREFIX "', '')",
			0, NULL, &sent, why, sizeof(why))) {
		util_errf(err, errlen, "heartbeat: %s", why);
		source_redact(s, err, errlen);
		return false;
	}
	if (!s->heartbeat_error[0])
		return true;
	util_errf(err, errlen, "%s", s->heartbeat_error);
	s->heartbeat_error[0] = '\0';
	source_redact(s, err, errlen);
	return false;
}

bool source_poll_slot_health(source *s, source_slot_health *h, char *err, size_t errlen)
{
	bool sent;
	const char *params[] = {s->slot};
	bool ok = admin_send(s, false, ADMIN_HEALTH, pg_slot_sql, 1, params, &sent, err, errlen);
	*h = s->health;
	if (!ok)
		source_redact(s, err, errlen);
	return ok;
}

bool source_keep_publication(source *s, bool due, cfg_strlist *added, char *err, size_t errlen)
{
	bool idle, sent = true;
	const char *params[] = {s->publication};
	/* on a standby the publication is the primary's to keep (source.create makes only the slot) */
	if (!s->create || !s->admin || s->server.in_recovery)
		return true;
	s->pub_due |= due;
	bool ok = admin_collect(s, s->admin, &s->admin_busy, &idle, err, errlen);
	if (ok && idle && s->pub_sql.len) {
		ok = admin_send(s, false, ADMIN_PUB_ADD, s->pub_sql.data, 0, NULL, &sent, err, errlen);
		if (ok && sent)
			buf_reset(&s->pub_sql);
	} else if (ok && idle && s->pub_due) {
		ok = admin_send(s, false, ADMIN_PUB_LIST,
				source_pg_publication_tables_sql(PQserverVersion(s->admin)), 1, params, &sent,
				err, errlen);
		s->pub_due = !(ok && sent);
	}
	for (size_t i = 0; i < s->pub_added.n; i++)
		cfg_strlist_push(added, s->pub_added.v[i]);
	cfg_strlist_free(&s->pub_added);
	if (ok && s->pub_error[0])
		ok = util_errf(err, errlen, "%s", s->pub_error);
	s->pub_error[0] = '\0';
	if (!ok)
		source_redact(s, err, errlen);
	return ok;
}

bool source_read_catalog(source *s, uint64_t asked_ms, catalog **out, char *err, size_t errlen)
{
	bool sent;
	const char *params[] = {s->publication};
	*out = NULL;
	if (s->catalog && s->catalog_sent_ms < asked_ms) { /* an older one, left over */
		source_catalog_free(s->catalog);
		free(s->catalog);
		s->catalog = NULL;
	}
	bool ok = s->admin_busy == ADMIN_CATALOG || s->catalog
		      ? admin_collect(s, s->admin, &s->admin_busy, &sent, err, errlen)
		      : admin_send(s, false, ADMIN_CATALOG, source_catalog_sql(PQserverVersion(s->admin)), 1,
				   params, &sent, err, errlen);
	if (ok && sent && s->admin_busy == ADMIN_CATALOG)
		s->catalog_sent_ms = util_now_ms();
	if (ok && s->catalog_error[0])
		ok = util_errf(err, errlen, "%s", s->catalog_error);
	s->catalog_error[0] = '\0';
	if (!ok) {
		source_redact(s, err, errlen);
		return false;
	}
	if (s->catalog && s->catalog_sent_ms >= asked_ms) {
		*out = s->catalog;
		s->catalog = NULL;
	}
	return true;
}

#define SERVER_SQL                                                                                           \
	"SELECT pg_catalog.pg_is_in_recovery(), CASE WHEN pg_catalog.pg_is_in_recovery() THEN '' ELSE "      \
	"pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()) END"
#define FAILOVER_SQL                                                                                         \
	SERVER_SQL ", pg_catalog.current_setting('synchronized_standby_slots'), "                            \
		   "coalesce((SELECT failover FROM pg_catalog.pg_replication_slots WHERE slot_name = $1), "  \
		   "false), s.slot_name, s.slot_type, s.active, coalesce(s.wal_status, '') "                 \
		   "FROM (SELECT 1) one LEFT JOIN pg_catalog.pg_replication_slots s ON true"

bool source_poll_server(source *s, bool *ask, source_failover *f, char *err, size_t errlen)
{
	bool ok = true, idle;
	const char *params[] = {s->slot};
	if (!s->admin)
		*ask = false;
	bool fo = *ask && s->failover && PQserverVersion(s->admin) >= 170000;
	if (*ask)
		ok = admin_send(s, false, ADMIN_SERVER, fo ? FAILOVER_SQL : SERVER_SQL, fo ? 1 : 0,
				fo ? params : NULL, ask, err, errlen);
	else if (s->admin && PQstatus(s->admin) == CONNECTION_OK)
		ok = admin_collect(s, s->admin, &s->admin_busy, &idle, err, errlen);
	*f = s->failover_state;
	if (!ok)
		source_redact(s, err, errlen);
	return ok;
}

const source_server *source_server_info(const source *s)
{
	return &s->server;
}

source_gap_kind source_gap(const source *s)
{
	return s->gap;
}

/* Writes the WAL up past `past` with non-transactional heartbeat messages, which no cdc delivers.
 * So a slot made next starts after every position cdc may have handed out. After a promotion whose
 * history left cdc's timeline before them, positions would otherwise repeat. */
#define PAD_MAX_BYTES (16u << 20)

static source_result pad_wal_past(source *s, uint64_t past, char *err, size_t errlen)
{
	for (bool logged = false;;) {
		PGresult *res = PQexec(s->admin, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text");
		uint64_t at;
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
		    !util_lsn_parse(PQgetvalue(res, 0, 0), &at))
			return query_failed(s->admin, res, "reading the WAL position", err, errlen);
		PQclear(res);
		if (at > past)
			return SOURCE_OK;
		char len[32], from[LSN_STRLEN], to[LSN_STRLEN];
		snprintf(len, sizeof(len), "%llu",
			 (unsigned long long)(past - at + 1 < PAD_MAX_BYTES ? past - at + 1 : PAD_MAX_BYTES));
		if (!logged) {
			util_lsn_format(at, from);
			util_lsn_format(past, to);
			log_warn(
			    "the promoted server's WAL is behind positions cdc read before the promotion: "
			    "cdc writes it up past them first, so that no position repeats",
			    "wal=%s past=%s bytes=%llu", from, to, (unsigned long long)(past - at + 1));
			logged = true;
		}
		const char *params[] = {len};
		res = exec_params(s->admin,
				  "SELECT pg_catalog.pg_logical_emit_message(false, '" SOURCE_HEARTBEAT_PREFIX
				  "', pg_catalog.repeat(' ', $1::int))",
				  1, params);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			return query_failed(s->admin, res, "writing the WAL past cdc's positions", err,
					    errlen);
		PQclear(res);
	}
}

/* A lost slot is dropped (an invalidated one still exists) and made again. A slot older than the
 * publication moves to the current WAL position. That is a fast-forward with no output plugin, so the
 * missing publication does not matter. */
source_result source_resync(source *s, source_gap_kind gap, state *st, uint64_t *lsn, char *err,
			    size_t errlen)
{
	source_disconnect(s);
	source_result r = SOURCE_RETRY;
	slot_row row;
	const char *params[] = {s->slot};
	PGresult *res = NULL;
	if (!(s->admin = connect_db(s, false, err, errlen)) ||
	    (r = read_slot(s, &row, err, errlen)) != SOURCE_OK)
		goto out;
	if (row.active_pid) {
		r = slot_busy(s, row.active_pid, err, errlen);
		goto out;
	}
	if (gap == SOURCE_GAP_SLOT_LOST && row.exists) {
		res = exec_params(s->admin, "SELECT pg_catalog.pg_drop_replication_slot($1)", 1, params);
		if (PQresultStatus(res) != PGRES_TUPLES_OK) {
			r = query_failed(s->admin, res, "dropping the lost replication slot", err, errlen);
			res = NULL;
			goto out;
		}
	}
	uint64_t past = st->flushed_lsn > s->stream_max ? st->flushed_lsn : s->stream_max;
	if (gap == SOURCE_GAP_SLOT_LOST && !s->server.in_recovery &&
	    (r = pad_wal_past(s, past, err, errlen)) != SOURCE_OK)
		goto out;
	if (gap == SOURCE_GAP_SLOT_LOST)
		r = create_slot(s, false, err, errlen);
	else {
		/* pg_replication_slot_advance stops at the flushed WAL. With synchronous_commit off the
		 * changes that failed, or the publication's creation, may not be flushed yet. The slot would
		 * stop before them, and the next start would fail the same way: a second re-sync and marker
		 * (seen on PostgreSQL 14 and 16). So the WAL is flushed first. */
		if (!s->server.in_recovery) {
			res = PQexec(
			    s->admin,
			    "SELECT pg_catalog.pg_logical_emit_message(false, '" SOURCE_HEARTBEAT_PREFIX
			    "', ''), " PG_FLUSH_ITEMS);
			if (PQresultStatus(res) != PGRES_TUPLES_OK) {
				r = query_failed(s->admin, res, "flushing the WAL", err, errlen);
				res = NULL;
				goto out;
			}
			PQclear(res);
		}
		res = exec_params(s->admin,
				  "SELECT end_lsn FROM pg_catalog.pg_replication_slot_advance($1, "
				  "pg_catalog.pg_current_wal_lsn())",
				  1, params);
		r = PQresultStatus(res) == PGRES_TUPLES_OK
			? SOURCE_OK
			: query_failed(s->admin, res, "moving the replication slot", err, errlen);
		if (r != SOURCE_OK)
			res = NULL;
	}
	if (r == SOURCE_OK && (r = read_slot(s, &row, err, errlen)) == SOURCE_OK) {
		*lsn = row.confirmed_flush;
		/* the new slot starts past every position cdc had, so nothing to check at the next start */
		st->timeline = s->stream_tli = s->server.timeline;
		s->stream_max = row.confirmed_flush;
	}
out:
	PQclear(res);
	if (r != SOURCE_OK) {
		source_disconnect(s);
		source_redact(s, err, errlen);
	}
	return r;
}

source_result source_resync_marker(source *s, const char *json, char *err, size_t errlen)
{
	const char *params[] = {json};
	PGconn *w = writer(s, err, errlen);
	PGresult *res =
	    w ? exec_params(w,
			    "SELECT pg_catalog.pg_logical_emit_message(false, '" SOURCE_RESYNC_PREFIX
			    "', $1), " PG_FLUSH_ITEMS,
			    1, params)
	      : NULL;
	source_result r = !w ? SOURCE_RETRY
			  : PQresultStatus(res) == PGRES_TUPLES_OK
			      ? SOURCE_OK
			      : query_failed(w, res, "writing the re-sync marker", err, errlen);
	if (r == SOURCE_OK)
		PQclear(res);
	source_disconnect(s);
	source_redact(s, err, errlen);
	return r;
}

int source_holder(const source *s)
{
	return s->holder;
}

void source_after_standby(source *s, bool yes)
{
	s->after_standby = yes;
}
