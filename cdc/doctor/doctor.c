/* The table of checks, running them and the sink modules' checks, and the report in text and JSON. Adding a
 * check is a row here and a function in database.c, failover_checks.c, local.c or access.c. A sink's checks
 * are its module's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/doctor/doctor_internal.h"
#include "cdc/match/match.h"
#include "decoder/base/json.h"

/* What a check needs before it runs. A check whose needs are not met prints nothing (the database's checks
 * after a failed connection). */
enum {
	NEEDS_DB = 1 << 0,	 /* a connection to source.dsn */
	NEEDS_PG18 = 1 << 1,	 /* PostgreSQL 18 or later */
	NEEDS_FAILOVER = 1 << 4, /* source.failover */
	NEEDS_PRIMARY = 1 << 5,	 /* source.dsn is a primary */
	NEEDS_STANDBY = 1 << 6,	 /* source.dsn is a standby (pg_is_in_recovery()) */
	NEEDS_PG17 = 1 << 7,	 /* PostgreSQL 17 or later */
	NEEDS_DDL = 1 << 8,	 /* source.ddl */
	NEEDS_SIGNALS = 1 << 9,	 /* source.signal_table */
};

static const struct {
	const char *name;
	unsigned needs;
	void (*run)(doctor *d);
} checks[] = {
    {"server", 0, doctor_server},
    {"wal_level", NEEDS_DB, doctor_wal_level},
    {"max_replication_slots", NEEDS_DB, doctor_slots_free},
    {"max_wal_senders", NEEDS_DB, doctor_senders_free},
    {"role", NEEDS_DB, doctor_role},
    {"publication", NEEDS_DB, doctor_publication},
    {"tables", NEEDS_DB, doctor_tables},
    {"replica_identity", NEEDS_DB, doctor_identity},
    {"backfill", NEEDS_DB, doctor_backfill},
    {"signal_table", NEEDS_DB | NEEDS_SIGNALS, doctor_signal_table},
    {"pg_logical_emit_message", NEEDS_DB, doctor_emit_message},
    {"ddl_trigger", NEEDS_DB | NEEDS_DDL, doctor_ddl_trigger},
    {"slot", NEEDS_DB, doctor_slot},
    {"max_slot_wal_keep_size", NEEDS_DB, doctor_keep_size},
    {"idle_replication_slot_timeout", NEEDS_DB | NEEDS_PG18, doctor_idle_timeout},
    {"failover", NEEDS_DB | NEEDS_FAILOVER, doctor_failover},
    {"synchronized_standby_slots", NEEDS_DB | NEEDS_FAILOVER | NEEDS_PRIMARY | NEEDS_PG17,
     doctor_standby_slots},
    {"hot_standby_feedback", NEEDS_DB | NEEDS_STANDBY, doctor_hot_standby_feedback},
    {"sync_replication_slots", NEEDS_DB | NEEDS_STANDBY | NEEDS_FAILOVER | NEEDS_PG17, doctor_sync_slots},
    {"primary_slot_name", NEEDS_DB | NEEDS_STANDBY | NEEDS_FAILOVER | NEEDS_PG17, doctor_primary_slot_name},
    {"primary_conninfo", NEEDS_DB | NEEDS_STANDBY | NEEDS_FAILOVER | NEEDS_PG17, doctor_primary_conninfo},
    {"primary_dsn", NEEDS_DB | NEEDS_STANDBY, doctor_primary_dsn},
    {"state_dir", 0, doctor_state_dir},
    {"sockets", 0, doctor_sockets},
    {"secrets", 0, doctor_secrets},
    {"access", 0, doctor_access},
};

static const char *const status_names[] = {
    [DOCTOR_PASS] = "pass", [DOCTOR_WARN] = "warn", [DOCTOR_FAIL] = "fail"};

static void say_v(doctor *d, doctor_status st, const char *fix, const char *fmt, va_list ap)
{
	char detail[2048];
	vsnprintf(detail, sizeof(detail), fmt, ap);
	source_pg_redact(&d->secrets, detail, sizeof(detail));
	doctor_report *r = d->r;
	r->lines = util_xrealloc(r->lines, (r->n + 1) * sizeof(*r->lines));
	r->lines[r->n++] = (doctor_line){.check = d->check,
					 .status = st,
					 .detail = util_xstrdup(detail),
					 .fix = fix ? util_xstrdup(fix) : NULL};
}

void doctor_say(doctor *d, doctor_status st, const char *fix, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say_v(d, st, fix, fmt, ap);
	va_end(ap);
}

void doctor_sql(doctor *d, const char *sql)
{
	doctor_line *l = &d->r->lines[d->r->n - 1];
	free(l->sql);
	l->sql = sql && *sql ? util_xstrdup(sql) : NULL;
}

void doctor_command(doctor *d, const char *command)
{
	doctor_line *l = &d->r->lines[d->r->n - 1];
	buf b = {0};
	if (l->run)
		buf_printf(&b, "%s\n", l->run);
	buf_puts(&b, command);
	free(l->run);
	l->run = b.data;
}

void doctor_fix(doctor *d, doctor_status st, const pg_fix *fix, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say_v(d, st, fix->words.data ? fix->words.data : "", fmt, ap);
	va_end(ap);
	doctor_sql(d, fix->sql.data);
}

size_t doctor_sub_tables(const doctor *d, const cfg_subscription *s,
			 void (*fn)(doctor *d, const cfg_subscription *s, const doctor_table *t, void *arg),
			 void *arg)
{
	size_t n = 0;
	for (size_t i = 0; i < d->ntables; i++)
		for (size_t k = 0; k < s->tables.n; k++)
			if (match_table(s->tables.v[k], d->tables[i].schema, d->tables[i].name)) {
				if (fn)
					fn((doctor *)d, s, &d->tables[i], arg);
				n++;
				break;
			}
	return n;
}

static bool applies(const doctor *d, unsigned needs)
{
	if ((needs & NEEDS_DB) && !d->conn)
		return false;
	if ((needs & NEEDS_PG18) && d->server_version < 180000)
		return false;
	if ((needs & NEEDS_PG17) && d->server_version < 170000)
		return false;
	if ((needs & NEEDS_FAILOVER) && !d->c->source.failover)
		return false;
	if ((needs & NEEDS_PRIMARY) && d->in_recovery)
		return false;
	if ((needs & NEEDS_STANDBY) && !d->in_recovery)
		return false;
	if ((needs & NEEDS_DDL) && !d->c->source.ddl)
		return false;
	if ((needs & NEEDS_SIGNALS) && !d->c->source.signal_table)
		return false;
	return true;
}

static void strlist_clear(cfg_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	*l = (cfg_strlist){0};
}

/* ---- the sink modules' checks ---- */

typedef struct module_run {
	sink_doctor base;
	doctor *d;
} module_run;

static doctor *doctor_of(sink_doctor *dr)
{
	return ((module_run *)dr)->d;
}

static void module_say(sink_doctor *dr, sink_verdict verdict, const char *fix, const char *fmt, ...)
{
	char detail[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	static const doctor_status status_of[] = {
	    [SINK_PASS] = DOCTOR_PASS, [SINK_WARN] = DOCTOR_WARN, [SINK_FAIL] = DOCTOR_FAIL};
	doctor_say(doctor_of(dr), status_of[verdict], fix, "%s", detail);
}

static void module_command(sink_doctor *dr, const char *command)
{
	doctor_command(doctor_of(dr), command);
}

typedef struct table_call {
	void (*fn)(void *arg, const char *schema, const char *table);
	void *arg;
} table_call;

static void call_table(doctor *d, const cfg_subscription *s, const doctor_table *t, void *arg)
{
	(void)d, (void)s;
	const table_call *call = arg;
	call->fn(call->arg, t->schema, t->name);
}

static size_t module_tables(sink_doctor *dr, size_t sub,
			    void (*fn)(void *arg, const char *schema, const char *table), void *arg)
{
	doctor *d = doctor_of(dr);
	table_call call = {fn, arg};
	return doctor_sub_tables(d, &d->c->subs[sub], call_table, &call);
}

/* A table's columns as the stream describes them. Only published columns count. A virtual generated
 * column never is, and a stored one only with source.publish_generated_columns. They are keyed as cdc
 * keys them: the primary key, the replica identity index, or under FULL the primary key or else the
 * whole row. */
static const char columns_sql[] =
    "SELECT a.attname, a.atttypid, a.atttypmod, CASE c.relreplident "
    "WHEN 'd' THEN coalesce(a.attnum = ANY (pk.indkey::pg_catalog.int2[]), false) "
    "WHEN 'i' THEN coalesce(a.attnum = ANY (ri.indkey::pg_catalog.int2[]), false) "
    "WHEN 'f' THEN coalesce(a.attnum = ANY (pk.indkey::pg_catalog.int2[]), pk.indkey IS NULL) ELSE false "
    "END, "
    "a.attgenerated::text "
    "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN pg_catalog.pg_index pk ON pk.indrelid = c.oid AND pk.indisprimary "
    "LEFT JOIN pg_catalog.pg_index ri ON ri.indrelid = c.oid AND ri.indisreplident "
    "WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum";

static bool projected(const cfg_subscription *s, const char *name)
{
	if (!s->columns.n)
		return true;
	for (size_t i = 0; i < s->columns.n; i++)
		if (strcmp(s->columns.v[i], name) == 0)
			return true;
	return false;
}

static size_t module_columns(sink_doctor *dr, size_t sub, const char *schema, const char *table,
			     void (*fn)(void *arg, const char *name, uint32_t type_oid, int32_t typmod,
					bool key),
			     void *arg)
{
	doctor *d = doctor_of(dr);
	if (!d->conn)
		return 0;
	const char *params[] = {schema, table};
	PGresult *res = doctor_ask(d, "a table's columns", columns_sql, 2, params);
	size_t n = 0;
	for (int i = 0; res && i < PQntuples(res); i++) {
		const char *name = PQgetvalue(res, i, 0), *generated = PQgetvalue(res, i, 4);
		bool key = strcmp(PQgetvalue(res, i, 3), "t") == 0;
		if (generated[0] == 'v' || (generated[0] == 's' && !d->c->source.publish_generated_columns))
			continue;
		if (!key && !projected(&d->c->subs[sub], name))
			continue;
		fn(arg, name, (uint32_t)strtoul(PQgetvalue(res, i, 1), NULL, 10),
		   (int32_t)strtol(PQgetvalue(res, i, 2), NULL, 10), key);
		n++;
	}
	PQclear(res);
	return n;
}

static void module_socket_path(sink_doctor *dr, const char *key, const char *path)
{
	doctor_socket_path(doctor_of(dr), key, path);
}

static void module_socket_access(sink_doctor *dr, const char *key, const char *path, mode_t mode)
{
	doctor_socket_access(doctor_of(dr), key, path, mode);
}

/* A module's checks run when the file has its section (one it may leave out) or a subscription
 * uses it. */
static bool module_applies(const doctor *d, size_t m)
{
	if (sink_modules[m]->section_optional && d->c->sink_present[m])
		return true;
	for (size_t i = 0; i < d->c->nsubs; i++)
		if (d->c->subs[i].sink == (int)m)
			return true;
	return false;
}

static void run_modules(doctor *d)
{
	for (size_t m = 0; sink_modules[m]; m++) {
		const sink_module *mod = sink_modules[m];
		if (!mod->checks || !module_applies(d, m))
			continue;
		sink_sub *subs = cfg_sink_subs(d->c, m);
		module_run run = {{.section = d->c->sink_sections[m],
				   .subs = subs,
				   .nsubs = d->c->nsubs,
				   .slot = d->c->source.slot,
				   .timeout_ms = d->r->timeout_ms,
				   .database_read = d->conn != NULL,
				   .tables = module_tables,
				   .columns = module_columns,
				   .say = module_say,
				   .command = module_command,
				   .socket_path = module_socket_path,
				   .socket_access = module_socket_access},
				  d};
		for (const sink_check *k = mod->checks; k->name; k++) {
			if (k->applies && !k->applies(&run.base))
				continue;
			d->check = k->name;
			k->run(&run.base);
		}
		if (mod->doctor_done)
			mod->doctor_done(&run.base);
		free(subs);
	}
}

void doctor_run(const cfg *c, doctor_report *r)
{
	doctor d = {.c = c, .r = r};
	source_pg_secrets_init(&d.secrets, c->source.dsn);
	if (c->source.primary_dsn)
		source_pg_secrets_add(&d.secrets, c->source.primary_dsn);
	source_pg_secrets_add_value(&d.secrets, c->source.password);
	for (size_t i = 0; i < sizeof(checks) / sizeof(*checks); i++) {
		if (!applies(&d, checks[i].needs))
			continue;
		d.check = checks[i].name;
		checks[i].run(&d);
	}
	run_modules(&d);
	PQfinish(d.conn);
	source_pg_secrets_free(&d.secrets);
	for (size_t i = 0; i < d.ntables; i++) {
		free(d.tables[i].schema);
		free(d.tables[i].name);
		free(d.tables[i].parent_schema);
		free(d.tables[i].parent_name);
	}
	free(d.tables);
	strlist_clear(&d.published);
	strlist_clear(&d.unit.dirs);
	source_catalog_free(&d.cat);
}

int doctor_exit_code(const doctor_report *r)
{
	int worst = 0;
	for (size_t i = 0; i < r->n; i++)
		if ((int)r->lines[i].status > worst)
			worst = (int)r->lines[i].status;
	return worst; /* DOCTOR_PASS 0, DOCTOR_WARN 1, DOCTOR_FAIL 2 */
}

static void count(const doctor_report *r, size_t n[3])
{
	n[0] = n[1] = n[2] = 0;
	for (size_t i = 0; i < r->n; i++)
		n[r->lines[i].status]++;
}

void doctor_print_text(const doctor_report *r, FILE *out)
{
	for (size_t i = 0; i < r->n; i++) {
		const doctor_line *l = &r->lines[i];
		fprintf(out, "%s  %s: %s\n", status_names[l->status], l->check, l->detail);
		if (l->fix)
			fprintf(out, "      fix: %s\n", l->fix);
		if (l->sql)
			fprintf(out, "      sql: %s\n", l->sql);
		for (const char *p = l->run; p && *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != '\0'))
			fprintf(out, "      run: %.*s\n", (int)strcspn(p, "\n"), p);
	}
	size_t n[3];
	count(r, n);
	fprintf(out, "doctor: %zu pass, %zu warn, %zu fail (exit %d)\n", n[0], n[1], n[2],
		doctor_exit_code(r));
}

void doctor_print_json(const doctor_report *r, buf *out)
{
	size_t n[3];
	count(r, n);
	int code = doctor_exit_code(r);
	bool first = true, cfirst = true;
	buf_putc(out, '{');
	json_key_str(out, &first, "status", status_names[code]);
	json_key_u64(out, &first, "exit", (uint64_t)code);
	json_key(out, &first, "counts");
	buf_putc(out, '{');
	for (int s = 0; s < 3; s++)
		json_key_u64(out, &cfirst, status_names[s], n[s]);
	buf_putc(out, '}');
	json_key(out, &first, "checks");
	buf_putc(out, '[');
	for (size_t i = 0; i < r->n; i++) {
		const doctor_line *l = &r->lines[i];
		bool lfirst = true;
		if (i)
			buf_putc(out, ',');
		buf_putc(out, '{');
		json_key_str(out, &lfirst, "check", l->check);
		json_key_str(out, &lfirst, "status", status_names[l->status]);
		json_key_str(out, &lfirst, "detail", l->detail);
		json_key_str(out, &lfirst, "fix", l->fix);
		json_key_str(out, &lfirst, "sql", l->sql);
		json_key_str(out, &lfirst, "run", l->run);
		buf_putc(out, '}');
	}
	buf_puts(out, "]}\n");
}

void doctor_report_free(doctor_report *r)
{
	for (size_t i = 0; i < r->n; i++) {
		free(r->lines[i].detail);
		free(r->lines[i].fix);
		free(r->lines[i].sql);
		free(r->lines[i].run);
	}
	free(r->lines);
	r->lines = NULL;
	r->n = 0;
}
