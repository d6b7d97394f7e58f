/* What the files of cdc/doctor/ share: the state of one run, the signature of the table of checks, and
 * how a check reports. Other folders use doctor.h instead. */
#ifndef CDC_DOCTOR_INTERNAL_H
#define CDC_DOCTOR_INTERNAL_H

#include <libpq-fe.h>

#include "cdc/doctor/doctor.h"
#include "cdc/source/catalog.h"
#include "cdc/source/fixes.h"
#include "cdc/source/pgconn.h"
#include "sinks/modules.h"

/* A table of the database, as the checks look at it. */
typedef struct doctor_table {
	char *schema, *name;
	char replident;			   /* pg_class.relreplident, one of d, n, f, i */
	char *parent_schema, *parent_name; /* the partitioned table it is a partition of, or NULL */
} doctor_table;

typedef struct doctor {
	const cfg *c;
	doctor_report *r;
	const char *check; /* the check running, whose name its lines carry */
	/* the database, NULL when the connection failed (the checks that need it are skipped) */
	PGconn *conn;
	pg_secrets secrets;
	int server_version;
	bool in_recovery, superuser;
	char role[128];
	doctor_table *tables; /* every user table, by schema and name */
	size_t ntables;
	bool publication_exists;
	cfg_strlist published; /* pairs of schema, table the publication has (or cdc's would have) */
	/* the systemd unit that runs this file (unit.c), looked for when a directory is missing */
	struct {
		bool looked;
		char name[128];	  /* "cdc.service", "cdc@main.service", empty if none runs it */
		cfg_strlist dirs; /* pairs of a directory systemd makes when it starts and the directive */
	} unit;
	catalog cat; /* what cdc run checks subscriptions against (source_catalog_sql) */
	bool cat_read;
} doctor;

/* Appends a line for the running check, with fix NULL for a pass. The detail passes through the
 * DSN's secrets redaction. */
void doctor_say(doctor *doc, doctor_status st, const char *fix, const char *fmt, ...) CDC_PRINTF(4, 5);

/* What the last line's fix runs, exactly as printed. doctor_sql gives SQL statements (its "sql" line).
 * doctor_command gives a shell command (a "run" line each). */
void doctor_sql(doctor *doc, const char *sql);
void doctor_command(doctor *doc, const char *command);
/* A fix could not be made, because what it reads was unreadable. Adds a warning saying so. */
void doctor_fix_failed(doctor *doc, const char *err);
/* doctor_say with a fix written once for cdc doctor and cdc run (cdc/source/fixes.c). */
void doctor_fix(doctor *doc, doctor_status st, const pg_fix *fix, const char *fmt, ...) CDC_PRINTF(4, 5);

/* A query's answer, or NULL after a warning naming what could not be asked. */
PGresult *doctor_ask(doctor *doc, const char *what, const char *sql, int count, const char *const *params);

/* Checks a setting that should have one value (a reload applies it). It passes saying pass_detail.
 * Otherwise it reports st with the detail "is VALUE" followed by why. The fix is source_fix_setting's, with
 * more (NULL for nothing) after its words. */
void doctor_expect_setting(doctor *doc, const char *name, const char *want, const char *pass_detail,
			   doctor_status st, const char *more, const char *why);

/* The tables sub reads. Calls fn, if not NULL, for each of doc->tables that one of sub's patterns
 * matches. Returns how many, so it also says whether sub reads a table. */
size_t doctor_sub_tables(const doctor *doc, const cfg_subscription *sub,
			 void (*fn)(doctor *doc, const cfg_subscription *sub, const doctor_table *table,
				    void *arg),
			 void *arg);

/* Whether a backfill reads sub's tables without being asked, by `snapshot: true` or a re-sync. */
bool doctor_backfilled(const doctor *doc, const cfg_subscription *sub);

/* The directive of the unit that runs this configuration file ("RuntimeDirectory=cdc" of
 * cdc.service) that makes directory dir when the unit starts, or NULL (unit.c). */
const char *doctor_unit_makes(doctor *doc, const char *dir);

/* The verdict on a path where cdc binds a Unix socket, under the key that sets it (local.c). */
void doctor_socket_path(doctor *doc, const char *key, const char *path);

/* The checks, one function each (database.c, failover_checks.c, local.c). The sink modules' follow. */
void doctor_server(doctor *doc);
void doctor_wal_level(doctor *doc);
void doctor_slots_free(doctor *doc);
void doctor_senders_free(doctor *doc);
void doctor_role(doctor *doc);
void doctor_publication(doctor *doc);
void doctor_tables(doctor *doc);
void doctor_identity(doctor *doc);
void doctor_backfill(doctor *doc);
void doctor_signal_table(doctor *doc);
void doctor_emit_message(doctor *doc);
void doctor_ddl_trigger(doctor *doc);
void doctor_slot(doctor *doc);
void doctor_keep_size(doctor *doc);
void doctor_idle_timeout(doctor *doc);
void doctor_failover(doctor *doc);
void doctor_standby_slots(doctor *doc);
void doctor_hot_standby_feedback(doctor *doc);
void doctor_sync_slots(doctor *doc);
void doctor_primary_slot_name(doctor *doc);
void doctor_primary_conninfo(doctor *doc);
void doctor_primary_dsn(doctor *doc);
void doctor_secrets(doctor *doc);
void doctor_access(doctor *doc);
/* Who may connect to the socket at path, which setting key names. It checks the mode and owner, or
 * those cdc gives it before it exists. */
void doctor_socket_access(doctor *doc, const char *key, const char *path, mode_t mode);
void doctor_state_dir(doctor *doc);
void doctor_sockets(doctor *doc);

#endif
