/* See ddl_trigger.h. The function is SECURITY DEFINER with a fixed search_path. It never makes a
 * command fail, since an error inside it becomes a WARNING. */
#include "cdc/source/ddl_trigger.h"

#include <stdlib.h>
#include <string.h>

#include "cdc/source/source.h"
#include "decoder/base/util.h"
#include "decoder/ddl.h"

/* The function's owner, the superuser who created it, writes the message, so the role running the
 * DDL needs no grant. Each message is followed by an empty non-transactional heartbeat message, which
 * cdc skips. The server decodes a transactional message at the end of its WAL record. The function
 * runs in a subtransaction (its EXCEPTION block). Without a record after it, the message and the next
 * change of the transaction (an INSERT right after an ALTER TABLE ... ADD COLUMN) had the same
 * position, in two subtransactions. They were then sent in either order. */

#define STR_(x) #x
#define STR(x) STR_(x)
/* Raised with every change of the function's body. A body of another revision is replaced. */
#define REVISION 2
/* In the function's body, so that cdc can tell its revision. */
#define VERSION_MARK "cdc ddl capture v" STR(DDL_VERSION) " r" STR(REVISION)

/* clang-format off */
const char ddl_trigger_sql[] =
    "BEGIN;\n"
    "CREATE SCHEMA IF NOT EXISTS cdc;\n"
    "CREATE OR REPLACE FUNCTION cdc.capture_ddl() RETURNS event_trigger\n"
    "LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $cdc$\n"
    "-- " VERSION_MARK ": a '" DDL_PREFIX "' logical message per command on a table\n"
    "DECLARE\n"
    "  r record;\n"
    "  stmt text := left(coalesce(current_query(), ''), " STR(DDL_MAX_STATEMENT_CHARS) ");\n"
    "BEGIN\n"
    "  IF current_setting('wal_level') <> 'logical' THEN\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  IF TG_EVENT = 'sql_drop' THEN\n"
    "    FOR r IN SELECT * FROM pg_event_trigger_dropped_objects()\n"
    "             WHERE object_type = 'table' AND NOT is_temporary LOOP\n"
    "      PERFORM pg_logical_emit_message(true, '" DDL_PREFIX "', json_build_object(\n"
    "        'v', " STR(DDL_VERSION) ", 'event', TG_EVENT, 'tag', TG_TAG,\n"
    "        'object_type', r.object_type, 'identity', r.object_identity,\n"
    "        'schema', r.schema_name, 'table', r.object_name, 'relid', r.objid::bigint,\n"
    "        'subid', r.objsubid, 'statement', stmt)::text);\n"
    "      PERFORM pg_logical_emit_message(false, '" SOURCE_HEARTBEAT_PREFIX "', '');\n"
    "    END LOOP;\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  FOR r IN SELECT e.*, c.relname, n.nspname FROM pg_event_trigger_ddl_commands() e\n"
    "           JOIN pg_class c ON c.oid = e.objid JOIN pg_namespace n ON n.oid = c.relnamespace\n"
    "           WHERE e.classid = 'pg_class'::regclass AND c.relkind IN ('r', 'p')\n"
    "             AND c.relpersistence = 'p' LOOP\n"
    "    PERFORM pg_logical_emit_message(true, '" DDL_PREFIX "', json_build_object(\n"
    "      'v', " STR(DDL_VERSION) ", 'event', TG_EVENT, 'tag', r.command_tag,\n"
    "      'object_type', r.object_type, 'identity', r.object_identity,\n"
    "      'schema', r.nspname, 'table', r.relname, 'relid', r.objid::bigint,\n"
    "      'subid', r.objsubid, 'statement', stmt,\n"
    "      'columns', (SELECT coalesce(json_agg(json_build_object(\n"
    "                    'attnum', a.attnum, 'name', a.attname,\n"
    "                    'type', format_type(a.atttypid, a.atttypmod),\n"
    "                    'type_oid', a.atttypid::bigint, 'typmod', a.atttypmod,\n"
    "                    'not_null', a.attnotnull) ORDER BY a.attnum), '[]')\n"
    "                  FROM pg_attribute a WHERE a.attrelid = r.objid AND a.attnum > 0\n"
    "                    AND NOT a.attisdropped AND a.attgenerated = ''))::text);\n"
    "    PERFORM pg_logical_emit_message(false, '" SOURCE_HEARTBEAT_PREFIX "', '');\n"
    "  END LOOP;\n"
    "EXCEPTION WHEN OTHERS THEN\n"
    "  RAISE WARNING 'cdc could not record this DDL command (its events will lack it): %', SQLERRM;\n"
    "END\n"
    "$cdc$;\n"
    "DO $cdc$ BEGIN\n"
    "  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'cdc_ddl_command_end') THEN\n"
    "    CREATE EVENT TRIGGER cdc_ddl_command_end ON ddl_command_end\n"
    "      EXECUTE FUNCTION cdc.capture_ddl();\n"
    "  END IF;\n"
    "  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'cdc_sql_drop') THEN\n"
    "    CREATE EVENT TRIGGER cdc_sql_drop ON sql_drop EXECUTE FUNCTION cdc.capture_ddl();\n"
    "  END IF;\n"
    "END $cdc$;\n"
    "COMMIT;\n";
/* clang-format on */

/* Per trigger, whether cdc's function is there in this version, and the trigger's name (NULL if it
 * is not there). Then whether it is enabled ('D' when disabled) and whether it calls cdc's function. */
static const char check_sql[] =
    "WITH f AS (SELECT p.oid, p.prosrc LIKE '%" VERSION_MARK ":%' AS current FROM pg_catalog.pg_proc p "
    "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
    "WHERE n.nspname = 'cdc' AND p.proname = 'capture_ddl' AND p.pronargs = 0) "
    "SELECT coalesce((SELECT current FROM f), false), v.name, e.evtname IS NOT NULL, e.evtenabled, "
    "e.evtfoid IS NOT DISTINCT FROM (SELECT oid FROM f) "
    "FROM (VALUES ('cdc_ddl_command_end'), ('cdc_sql_drop')) v(name) "
    "LEFT JOIN pg_catalog.pg_event_trigger e ON e.evtname = v.name ORDER BY 2";

ddl_trigger_state source_ddl_trigger_check(PGconn *conn, char *err, size_t errlen)
{
	PGresult *res = PQexec(conn, check_sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 2) {
		util_errf(err, errlen, "looking for cdc's DDL event trigger failed: %s",
			  PQerrorMessage(conn));
		PQclear(res);
		return DDL_TRIGGER_FAILED;
	}
	ddl_trigger_state st = DDL_TRIGGER_OK;
	for (int i = 0; i < 2 && st == DDL_TRIGGER_OK; i++) {
		const char *name = PQgetvalue(res, i, 1);
		if (strcmp(PQgetvalue(res, i, 0), "t") != 0 || strcmp(PQgetvalue(res, i, 2), "t") != 0) {
			st = DDL_TRIGGER_MISSING;
		} else if (strcmp(PQgetvalue(res, i, 4), "t") != 0) {
			util_errf(err, errlen,
				  "event trigger %s does not call cdc.capture_ddl(): it is not cdc's; rename "
				  "or drop it (DROP EVENT TRIGGER %s) so that cdc can create its own",
				  name, name);
			st = DDL_TRIGGER_WRONG;
		} else if (strcmp(PQgetvalue(res, i, 3), "D") == 0) {
			util_errf(err, errlen,
				  "cdc's event trigger %s is disabled, and source.ddl needs it: ALTER "
				  "EVENT TRIGGER %s ENABLE (or set source.ddl: false)",
				  name, name);
			st = DDL_TRIGGER_WRONG;
		}
	}
	PQclear(res);
	return st;
}
