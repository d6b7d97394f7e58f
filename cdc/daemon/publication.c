/* publication.c: the publication cdc creates and keeps current; see publication.h. */
#include "cdc/daemon/publication.h"

#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/sql.h"

const char pub_tables_sql[] =
    "SELECT n.nspname, c.relname, pg_catalog.pg_has_role(c.relowner, 'USAGE'), pt.tablename IS NOT NULL "
    "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN (SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables WHERE pubname = $1) pt "
    "ON pt.schemaname = n.nspname AND pt.tablename = c.relname "
    "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
    "AND n.nspname NOT LIKE 'pg\\_%' ORDER BY 1, 2";

static bool matched(const cfg_strlist *publish, const pub_row *r)
{
	for (size_t i = 0; i < publish->n; i++)
		if (cfg_table_match(publish->v[i], r->schema, r->name))
			return true;
	return false;
}

static void put_table(buf *b, const pub_row *r)
{
	bfsql_quote_ident(b, r->schema);
	buf_putc(b, '.');
	bfsql_quote_ident(b, r->name);
}

/* "schema.*" with a plain schema name: its schema, else NULL. */
static const char *whole_schema(const char *pattern, size_t *len)
{
	*len = strspn(pattern, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
	return *len > 0 && strcmp(pattern + *len, ".*") == 0 ? pattern : NULL;
}

/* What a superuser creates: the forms that follow new tables by themselves where they exist. */
static void superuser_sql(buf *sql, const char *pub, const cfg_strlist *publish, const pub_row *rows, size_t n,
			  int server_version)
{
	buf_puts(sql, "CREATE PUBLICATION ");
	bfsql_quote_ident(sql, pub);
	for (size_t i = 0; i < publish->n; i++)
		if (strcmp(publish->v[i], "*.*") == 0) {
			buf_puts(sql, " FOR ALL TABLES");
			return;
		}
	bool first = true;
	for (size_t i = 0; i < publish->n; i++) {
		size_t len;
		if (server_version >= 150000 && whole_schema(publish->v[i], &len)) {
			char schema[64];
			snprintf(schema, sizeof(schema), "%.*s", (int)len, publish->v[i]);
			buf_puts(sql, first ? " FOR TABLES IN SCHEMA " : ", TABLES IN SCHEMA ");
			bfsql_quote_ident(sql, schema);
			first = false;
			continue;
		}
		for (size_t k = 0; k < n; k++)
			if (cfg_table_match(publish->v[i], rows[k].schema, rows[k].name)) {
				buf_puts(sql, first ? " FOR TABLE " : ", TABLE ");
				put_table(sql, &rows[k]);
				first = false;
			}
	}
}

/* One warning line: the table the role may not add, and what its owner or a superuser runs. */
static void not_owned(buf *warnings, const char *pub, const pub_row *r)
{
	buf q = {0};
	put_table(&q, r);
	buf_printf(warnings, "table %s matches source.publish, but cdc's role does not own it, so cdc cannot add it "
			     "to publication ", q.data);
	bfsql_quote_ident(warnings, pub);
	buf_printf(warnings, ": its owner or a superuser can run ALTER PUBLICATION ");
	bfsql_quote_ident(warnings, pub);
	buf_printf(warnings, " ADD TABLE %s\n", q.data);
	buf_free(&q);
}

bool pub_create_sql(buf *sql, const char *pub, const cfg_strlist *publish, const pub_row *rows, size_t n,
		    bool superuser, int server_version, buf *warnings, char *err, size_t errlen)
{
	for (size_t i = 0; i < publish->n; i++) {
		bool hit = false;
		for (size_t k = 0; k < n && !hit; k++)
			hit = cfg_table_match(publish->v[i], rows[k].schema, rows[k].name);
		if (!hit)
			buf_printf(warnings,
				   "source.publish pattern %s matches no table yet: cdc adds the tables it matches "
				   "to the publication as they are created\n",
				   publish->v[i]);
	}
	if (superuser) {
		superuser_sql(sql, pub, publish, rows, n, server_version);
		return true;
	}
	size_t matching = 0, owned = 0;
	buf list = {0};
	buf_puts(sql, "CREATE PUBLICATION ");
	bfsql_quote_ident(sql, pub);
	for (size_t k = 0; k < n; k++) {
		if (!matched(publish, &rows[k]))
			continue;
		matching++;
		if (list.len < 400) {
			buf_puts(&list, list.len ? ", " : "");
			put_table(&list, &rows[k]);
		}
		if (!rows[k].owned)
			continue;
		buf_puts(sql, owned++ ? ", TABLE " : " FOR TABLE ");
		put_table(sql, &rows[k]);
	}
	if (matching && !owned) {
		buf su = {0};
		superuser_sql(&su, pub, publish, rows, n, server_version);
		errf(err, errlen,
		     "cdc's role may not create publication %s: FOR TABLES IN SCHEMA and FOR ALL TABLES need a "
		     "superuser, and FOR TABLE the tables' ownership, but the role owns none of the %zu tables "
		     "source.publish matches (%s%s). Ways out: have a superuser run %s; or make cdc's role "
		     "their owner (ALTER TABLE ... OWNER TO ...); or list in source.publish tables the role owns",
		     pub, matching, list.data, list.len >= 400 ? ", ..." : "", su.data);
		buf_free(&su);
		buf_free(&list);
		return false;
	}
	for (size_t k = 0; k < n; k++)
		if (matched(publish, &rows[k]) && !rows[k].owned)
			not_owned(warnings, pub, &rows[k]);
	buf_free(&list);
	return true;
}

static bool listed(const cfg_strlist *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0)
			return true;
	return false;
}

void pub_add_sql(buf *sql, const char *pub, const cfg_strlist *publish, const pub_row *rows, size_t n,
		 cfg_strlist *added, cfg_strlist *warned, buf *warnings)
{
	buf q = {0};
	for (size_t k = 0; k < n; k++) {
		if (rows[k].published || !matched(publish, &rows[k]))
			continue;
		buf_reset(&q);
		put_table(&q, &rows[k]);
		if (!rows[k].owned) {
			if (!listed(warned, q.data)) {
				cfg_strlist_push(warned, q.data);
				not_owned(warnings, pub, &rows[k]);
			}
			continue;
		}
		if (!sql->len) {
			buf_puts(sql, "ALTER PUBLICATION ");
			bfsql_quote_ident(sql, pub);
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
