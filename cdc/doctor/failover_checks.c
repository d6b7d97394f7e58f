/* The checks of source.failover and of a standby in source.dsn. For the primary, they check its failover slot
 * and its synchronized_standby_slots, judged by cdc/source/failover.c as the daemon judges them. For a
 * standby, they check decoding there, or keeping a copy of the slot for a promotion. */
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/sql.h"
#include "cdc/doctor/doctor_internal.h"
#include "cdc/source/failover.h"

#define PG_FAILOVER_SLOTS 170000 /* failover slots, sync_replication_slots */

/* "host:port" of a connection, for the lines. */
static void server_name(PGconn *conn, char *out, size_t size)
{
	snprintf(out, size, "%s:%s", PQhost(conn), PQport(conn));
}

void doctor_failover(doctor *d)
{
	int v = d->server_version;
	if (v < PG_FAILOVER_SLOTS) {
		doctor_say(d, DOCTOR_FAIL,
			   "remove source.failover (before 17 a promotion loses the slot, and "
			   "source.on_slot_lost says what cdc does then), or upgrade to PostgreSQL 17",
			   "source.failover needs PostgreSQL 17 or later (failover slots), and the server is "
			   "%d.%d: cdc refuses to start",
			   v / 10000, v % 10000);
		return;
	}
	if (d->in_recovery) {
		char host[256];
		server_name(d->conn, host, sizeof(host));
		doctor_say(
		    d, DOCTOR_FAIL,
		    "point source.dsn at the primary (with several hosts, add "
		    "target_session_attrs=read-write); the lines that follow check this standby as the "
		    "target of a promotion",
		    "%s is a standby, and source.failover needs the primary (a failover slot is made on "
		    "the primary and synchronized to its standbys): cdc waits here until it is promoted",
		    host);
		return;
	}
	const char *slot = d->c->source.slot;
	const char *params[] = {slot};
	PGresult *res = doctor_ask(
	    d, "the replication slot",
	    "SELECT failover FROM pg_catalog.pg_replication_slots WHERE slot_name = $1", 1, params);
	if (!res)
		return;
	if (PQntuples(res) == 0)
		doctor_say(d, DOCTOR_PASS, NULL, "%s does not exist yet; %s", slot,
			   d->c->source.create ? "cdc creates it as a failover slot"
					       : "cdc turns failover on when it first streams it");
	else if (PQgetvalue(res, 0, 0)[0] == 't')
		doctor_say(d, DOCTOR_PASS, NULL,
			   "%s is a failover slot: a standby with sync_replication_slots = on keeps a copy",
			   slot);
	else
		doctor_say(d, DOCTOR_PASS, NULL,
			   "%s is not a failover slot yet: cdc turns failover on at its next start "
			   "(ALTER_REPLICATION_SLOT %s (FAILOVER true))",
			   slot, slot);
	PQclear(res);
}

/* The primary's synchronized_standby_slots, judged by source_failover_judge() as `cdc run` judges it every
 * few seconds. The slot's own failover flag is the failover line's, and cdc creates it or turns it on. */
void doctor_standby_slots(doctor *d)
{
	PGresult *res = doctor_ask(
	    d, "synchronized_standby_slots",
	    "SELECT pg_catalog.current_setting('synchronized_standby_slots'), s.slot_name, s.slot_type, "
	    "s.active, coalesce(s.wal_status, '') FROM (SELECT 1) one LEFT JOIN "
	    "pg_catalog.pg_replication_slots s ON true ORDER BY s.slot_name",
	    0, NULL);
	if (!res)
		return;
	int n = PQntuples(res);
	failover_slot *slots = util_xcalloc((size_t)n, sizeof(*slots));
	size_t k = 0;
	buf usable = {0}; /* the physical slots standbys stream from now, which the setting should name */
	for (int i = 0; i < n; i++) {
		if (PQgetisnull(res, i, 1))
			continue;
		failover_slot *s = &slots[k++];
		*s = (failover_slot){PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), PQgetvalue(res, i, 4),
				     PQgetvalue(res, i, 3)[0] == 't'};
		if (strcmp(s->type, "physical") == 0 && s->active && strcmp(s->wal_status, "lost") != 0)
			buf_printf(&usable, "%s%s", usable.len ? ", " : "", s->name);
	}
	const char *setting = PQgetvalue(res, 0, 0);
	char why[1024];
	failover_reason r =
	    source_failover_judge(d->c->source.slot, true, setting, slots, k, why, sizeof(why));
	pg_fix f = {0};
	char err[512];
	/* When the setting is empty, cdc streams (a promotion may hand consumers phantoms). Otherwise its
	 * stream waits. */
	doctor_status st = r == FAILOVER_UNSET ? DOCTOR_WARN : DOCTOR_FAIL;
	if (r == FAILOVER_READY)
		doctor_say(d, DOCTOR_PASS, NULL,
			   "%s: active physical slots, so cdc receives only what those standbys have (a "
			   "promotion of one loses nothing)",
			   setting);
	else if (!usable.len)
		doctor_say(d, st,
			   "create a physical slot for each standby that may be promoted (SELECT "
			   "pg_create_physical_replication_slot('standby_slot'), and primary_slot_name = "
			   "'standby_slot' on that standby), then ALTER SYSTEM SET "
			   "synchronized_standby_slots = 'standby_slot'; SELECT pg_reload_conf()",
			   "%s (%s)", why, source_failover_reason_name(r));
	else if (!source_fix_setting(d->conn, "synchronized_standby_slots", usable.data, false, &f, err,
				     sizeof(err)))
		doctor_fix_failed(d, err);
	else {
		buf_puts(&f.words,
			 " (the physical slots standbys stream from now: name those of the standbys "
			 "that may be promoted)");
		doctor_fix(d, st, &f, "%s (%s)", why, source_failover_reason_name(r));
	}
	source_fix_free(&f);
	buf_free(&usable);
	free(slots);
	PQclear(res);
}

/* Whether this standby is only the target of a promotion (source.failover) rather than where cdc
 * decodes. */
static bool failover_target(const doctor *d)
{
	return d->c->source.failover && d->server_version >= PG_FAILOVER_SLOTS;
}

void doctor_hot_standby_feedback(doctor *d)
{
	bool target = failover_target(d);
	doctor_expect_setting(
	    d, "hot_standby_feedback", "on", "on", target ? DOCTOR_FAIL : DOCTOR_WARN,
	    ", on this standby (which should stream from a physical slot: primary_slot_name)",
	    target ? ", and slot synchronization does not run without it: this standby keeps no copy of "
		     "cdc's slot, and a promotion of it loses the slot"
		   : ", so the primary may remove catalog rows the slot here needs: the slot is then "
		     "invalidated (source.on_slot_lost applies)");
}

void doctor_sync_slots(doctor *d)
{
	doctor_expect_setting(
	    d, "sync_replication_slots", "on",
	    "on: this standby keeps copies of the "
	    "primary's failover slots",
	    DOCTOR_FAIL, ", on this standby",
	    ", so this standby keeps no copy of the primary's failover slots: a promotion of "
	    "it loses cdc's slot");
}

/* A setting of the standby, or NULL (after a line) when this role may not read it. pg_settings shows
 * primary_conninfo (it may hold a password) only to superusers and pg_read_all_settings. */
static PGresult *standby_setting(doctor *d, const char *name)
{
	const char *params[] = {name};
	PGresult *res =
	    doctor_ask(d, name, "SELECT setting FROM pg_catalog.pg_settings WHERE name = $1", 1, params);
	if (res && PQntuples(res) != 1) {
		buf fix = {0};
		buf_puts(&fix, "GRANT pg_read_all_settings TO ");
		backfill_sql_quote_ident(&fix, d->role);
		buf_putc(&fix, ';');
		doctor_say(d, DOCTOR_WARN,
			   "as a superuser (on the primary); or read it on this standby as a superuser",
			   "role %s may not read it (a superuser or pg_read_all_settings may)", d->role);
		doctor_sql(d, fix.data);
		buf_free(&fix);
		PQclear(res);
		return NULL;
	}
	return res;
}

void doctor_primary_slot_name(doctor *d)
{
	PGresult *res = standby_setting(d, "primary_slot_name");
	if (!res)
		return;
	const char *v = PQgetvalue(res, 0, 0);
	if (v[0])
		doctor_say(d, DOCTOR_PASS, NULL,
			   "%s: the physical slot this standby streams from (the primary's "
			   "synchronized_standby_slots should name it)",
			   v);
	else
		doctor_say(
		    d, DOCTOR_FAIL,
		    "on the primary: SELECT pg_create_physical_replication_slot('standby_slot'), and "
		    "name it in synchronized_standby_slots; here: ALTER SYSTEM SET primary_slot_name = "
		    "'standby_slot'; SELECT pg_reload_conf()",
		    "is empty, and slot synchronization needs the physical slot this standby streams "
		    "from: this standby keeps no copy of cdc's slot");
	PQclear(res);
}

/* primary_conninfo may hold a password. So the lines say only whether it names a database. */
void doctor_primary_conninfo(doctor *d)
{
	PGresult *res = standby_setting(d, "primary_conninfo");
	if (!res)
		return;
	PQconninfoOption *opts = PQconninfoParse(PQgetvalue(res, 0, 0), NULL);
	bool dbname = false;
	for (PQconninfoOption *o = opts; o && o->keyword; o++)
		if (strcmp(o->keyword, "dbname") == 0 && o->val && o->val[0])
			dbname = true;
	char fix[512];
	snprintf(fix, sizeof(fix),
		 "add dbname=%s (a database of the primary) to primary_conninfo on this standby (ALTER "
		 "SYSTEM SET primary_conninfo to its connection string with dbname=%s, then SELECT "
		 "pg_reload_conf())",
		 PQdb(d->conn), PQdb(d->conn));
	if (!opts)
		doctor_say(d, DOCTOR_FAIL, fix, "is not a valid connection string");
	else if (!PQgetvalue(res, 0, 0)[0])
		doctor_say(
		    d, DOCTOR_FAIL, fix,
		    "is empty: this standby does not stream from a primary, and keeps no copy of cdc's "
		    "slot");
	else if (!dbname)
		doctor_say(d, DOCTOR_FAIL, fix,
			   "has no dbname, and slot synchronization connects to a database of the primary: "
			   "this standby keeps no copy of cdc's slot");
	else
		doctor_say(d, DOCTOR_PASS, NULL,
			   "has a dbname: slot synchronization connects to the primary's database");
	PQconninfoFree(opts);
	PQclear(res);
}

/* What cdc is configured to write into the WAL, which a standby cannot take. Heartbeats and backfills (their
 * watermarks) go to source.primary_dsn. */
static void writers(const doctor *d, buf *b)
{
	if (d->c->source.heartbeat_ms > 0)
		buf_puts(b, "source.heartbeat");
	for (size_t i = 0; i < d->c->nsubs; i++)
		if (doctor_backfilled(d, &d->c->subs[i]))
			buf_printf(b, "%ssubscription %s's backfills (%s)", b->len ? ", " : "",
				   d->c->subs[i].name, d->c->subs[i].snapshot ? "snapshot: true" : "re-sync");
}

void doctor_primary_dsn(doctor *d)
{
	const char *dsn = d->c->source.primary_dsn;
	buf need = {0};
	writers(d, &need);
	if (!dsn) {
		if (!need.len)
			doctor_say(
			    d, DOCTOR_PASS, NULL,
			    "unset: nothing configured writes into the WAL (source.heartbeat, snapshot: "
			    "true, re-sync); an on-demand cdc backfill would need it");
		else
			doctor_say(d, DOCTOR_FAIL,
				   "set source.primary_dsn to the primary's connection string (cdc writes "
				   "heartbeats, the re-sync marker and backfills' watermarks there)",
				   "unset, and this server is a standby, which cannot be written to: %s %s",
				   need.data,
				   d->c->source.heartbeat_ms > 0 ? "(cdc refuses to start)" : "would fail");
		buf_free(&need);
		return;
	}
	buf_free(&need);
	char err[1024], host[256];
	bool invalid;
	PGconn *primary =
	    source_pg_connect(dsn, d->c->source.password, PG_CONN_READ_ONLY, &invalid, err, sizeof(err));
	if (!primary && invalid)
		doctor_say(d, DOCTOR_FAIL,
			   "correct source.primary_dsn (libpq's key=value form or a "
			   "postgresql:// URI)",
			   "source.primary_dsn is not a valid connection string");
	if (!primary && !invalid)
		doctor_say(d, DOCTOR_FAIL,
			   "check source.primary_dsn (host, port, dbname, user, password) and the primary's "
			   "pg_hba.conf",
			   "source.primary_dsn: %s", err);
	if (!primary)
		return;
	server_name(primary, host, sizeof(host));
	PGresult *res = PQexec(primary, "SELECT pg_catalog.pg_is_in_recovery()");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		doctor_say(d, DOCTOR_WARN, "run cdc doctor as the role of source.primary_dsn",
			   "cannot ask %s whether it is a standby: %s", host,
			   source_pg_one_line(PQerrorMessage(primary)));
	else if (PQgetvalue(res, 0, 0)[0] == 't')
		doctor_say(d, DOCTOR_FAIL,
			   "point source.primary_dsn at the primary (with several hosts, add "
			   "target_session_attrs=read-write)",
			   "reaches %s, a standby too: heartbeats and backfills cannot write there", host);
	else
		doctor_say(d, DOCTOR_PASS, NULL,
			   "reaches %s, a primary: heartbeats and backfills write there", host);
	PQclear(res);
	PQfinish(primary);
}
