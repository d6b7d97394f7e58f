/* `cdc doctor` checks the database, the sinks and the local setup against a configuration, before
 * cdc's first start or after a change. It changes nothing. Each finding is one line (passed, warned or
 * failed) with the exact fix: the SQL to run, the setting to change, the cdc key. */
#ifndef CDC_DOCTOR_H
#define CDC_DOCTOR_H

#include <stdio.h>

#include "cdc/config/config.h"

typedef enum doctor_status { DOCTOR_PASS, DOCTOR_WARN, DOCTOR_FAIL } doctor_status;

typedef struct doctor_line {
	const char *check; /* the check's name, from the table of checks */
	doctor_status status;
	char *detail; /* what was found */
	char *fix;    /* what to do, NULL for a pass */
	char *sql;    /* statements that run as printed in psql (as fix says whom), or NULL */
	char *run;    /* shell commands that run as printed, one a line, or NULL */
} doctor_line;

typedef struct doctor_report {
	doctor_line *lines;
	size_t n;
	int timeout_ms; /* how long a sink's servers get to answer, set before doctor_run */
} doctor_report;

/* Runs every check that applies to conf, in order, and appends its lines to rep. The checks are the
 * table in doctor.c, then each sink module's. */
void doctor_run(const cfg *conf, doctor_report *rep);
/* 0 when every line passed, 1 with warnings only, 2 with a failure. */
int doctor_exit_code(const doctor_report *rep);
/* Prints one line per finding, then a summary line. A finding reads "pass  check: detail" or
 * "fail  check: detail", then "      fix: ...", "      sql: ..." and a "      run: ..." per command. */
void doctor_print_text(const doctor_report *rep, FILE *out);
/* Prints {"status":"fail","exit":2,"counts":{"pass":N,"warn":N,"fail":N},
 *  "checks":[{"check":"...","status":"pass|warn|fail","detail":"...","fix":"..." or null,
 *             "sql":"..." or null,"run":"..." or null},...]} */
void doctor_print_json(const doctor_report *rep, buf *out);
void doctor_report_free(doctor_report *rep);

#endif
