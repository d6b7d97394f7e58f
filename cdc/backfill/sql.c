/* sql.c: the statements of a backfill; see sql.h. */
#include "cdc/backfill/sql.h"

#include <inttypes.h>
#include <string.h>

/* NAMEDATALEN - 1: PostgreSQL truncates longer names, which would then name something else. */
#define BFSQL_MAX_IDENT 63

const char bfsql_privileges[] = "SELECT current_user, pg_catalog.has_function_privilege("
				"'pg_catalog.pg_logical_emit_message(boolean, text, text)', 'EXECUTE')";

const char bfsql_tables[] = "SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables "
			    "WHERE pubname = $1 ORDER BY 1, 2";

const char bfsql_describe[] =
    "SELECT a.attname, a.atttypid, tn.nspname, t.typname, pg_catalog.array_position(k.cols, a.attnum), "
    "k.name, c.relkind, pg_catalog.has_table_privilege(c.oid, 'SELECT'), c.reltuples "
    "FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
    "JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
    "JOIN pg_catalog.pg_namespace tn ON tn.oid = t.typnamespace "
    "LEFT JOIN LATERAL ("
    "SELECT i.indexrelid::pg_catalog.regclass::pg_catalog.text AS name, "
    "(i.indkey::pg_catalog.int2[])[0:i.indnkeyatts - 1] AS cols "
    "FROM pg_catalog.pg_index i "
    "WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid AND i.indpred IS NULL "
    "AND i.indexprs IS NULL AND NOT EXISTS (SELECT FROM pg_catalog.pg_attribute ka "
    "WHERE ka.attrelid = c.oid AND ka.attnum = ANY ((i.indkey::pg_catalog.int2[])[0:i.indnkeyatts - 1]) "
    "AND NOT ka.attnotnull) "
    "ORDER BY i.indisprimary DESC, i.indisreplident DESC, i.indnkeyatts, 1 LIMIT 1) k ON true "
    "WHERE n.nspname = $1 AND c.relname = $2 "
    "ORDER BY a.attnum";

const char bfsql_watermark[] = "SELECT pg_catalog.pg_logical_emit_message(false, '" BFSQL_PREFIX "', $1)";

bool bfsql_ident_ok(const char *name, const char *what, char *err, size_t errlen)
{
	size_t len = strlen(name);
	if (len == 0)
		return errf(err, errlen, "%s is empty", what);
	if (len > BFSQL_MAX_IDENT)
		return errf(err, errlen, "%s '%.64s...' is longer than %d bytes", what, name,
			    BFSQL_MAX_IDENT);
	for (size_t i = 0; i < len;) {
		const unsigned char *p = (const unsigned char *)name + i;
		size_t skip, n = *p < 0x80 ? 1 : utf8_seq(p, len - i, &skip);
		if (n == 0)
			return errf(err, errlen, "%s is not valid UTF-8", what);
		i += n;
	}
	return true;
}

/* s between quote characters q, each q inside doubled. */
static void quote(buf *out, char q, const char *s, size_t len)
{
	buf_putc(out, q);
	for (const char *p = s, *end = s + len; p < end;) {
		const char *next = memchr(p, q, (size_t)(end - p));
		size_t n = next ? (size_t)(next - p) + 1 : (size_t)(end - p);
		buf_append(out, p, n);
		if (next)
			buf_putc(out, q);
		p += n;
	}
	buf_putc(out, q);
}

void bfsql_quote_ident(buf *out, const char *name)
{
	quote(out, '"', name, strlen(name));
}

void bfsql_quote_literal(buf *out, const char *s, size_t len)
{
	if (!memchr(s, '\\', len)) {
		quote(out, '\'', s, len);
		return;
	}
	buf_putc(out, 'E');
	buf b = {0};
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '\\')
			buf_putc(&b, '\\');
		buf_putc(&b, s[i]);
	}
	quote(out, '\'', b.data, b.len);
	buf_free(&b);
}

static void qualified(buf *out, const char *schema, const char *name)
{
	bfsql_quote_ident(out, schema);
	buf_putc(out, '.');
	bfsql_quote_ident(out, name);
}

void bfsql_no_emit_message(buf *out, const char *role)
{
	buf_printf(
	    out,
	    "role %s may not execute pg_logical_emit_message, which writes a backfill's watermarks: run ",
	    role);
	buf_puts(out,
		 "GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text) TO ");
	bfsql_quote_ident(out, role);
}

void bfsql_no_select(buf *out, const char *role, const char *schema, const char *table)
{
	buf_printf(out, "role %s may not read %s.%s: run GRANT SELECT ON ", role, schema, table);
	qualified(out, schema, table);
	buf_puts(out, " TO ");
	bfsql_quote_ident(out, role);
}

void bfsql_no_key(buf *out, const char *schema, const char *table)
{
	buf_printf(out,
		   "%s.%s has neither a primary key nor a unique index on NOT NULL columns, and a backfill "
		   "reads a table in key order: add one (ALTER TABLE ",
		   schema, table);
	qualified(out, schema, table);
	buf_puts(out, " ADD PRIMARY KEY (...))");
}

void bfsql_not_table(buf *out, const char *schema, const char *table, char relkind)
{
	if (relkind == 'p')
		buf_printf(out, "%s.%s is a partitioned table: backfill its partitions", schema, table);
	else
		buf_printf(out, "%s.%s is not a table (relkind '%c')", schema, table, relkind);
}

void bfsql_no_table(buf *out, const char *schema, const char *table)
{
	buf_printf(out, "table %s.%s does not exist", schema, table);
}

/* "a", "b": the key columns. */
static void key_list(buf *out, const bfsql_col *cols, const size_t *keys, size_t nkeys)
{
	for (size_t i = 0; i < nkeys; i++) {
		if (i)
			buf_puts(out, ", ");
		bfsql_quote_ident(out, cols[keys[i]].name);
	}
}

void bfsql_chunk(buf *out, const char *schema, const char *table, const bfsql_col *cols, size_t ncols,
		 const size_t *keys, size_t nkeys, bool has_cursor, const char *where, uint64_t limit)
{
	buf_puts(out, "SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text");
	for (size_t i = 0; i < ncols; i++) {
		buf_puts(out, ", ");
		bfsql_quote_ident(out, cols[i].name);
	}
	buf_puts(out, " FROM ");
	qualified(out, schema, table);
	if (has_cursor || where)
		buf_puts(out, " WHERE ");
	if (has_cursor) {
		/* A row comparison, which a btree index on the key serves as a range. */
		buf_puts(out, nkeys > 1 ? "(" : "");
		key_list(out, cols, keys, nkeys);
		buf_puts(out, nkeys > 1 ? ") > (" : " > ");
		for (size_t i = 0; i < nkeys; i++) {
			buf_printf(out, "%s$%zu::", i ? ", " : "", i + 1);
			qualified(out, cols[keys[i]].type_schema, cols[keys[i]].type_name);
		}
		buf_puts(out, nkeys > 1 ? ")" : "");
	}
	if (where)
		buf_printf(out, "%s(%s)", has_cursor ? " AND " : "", where);
	buf_puts(out, " ORDER BY ");
	key_list(out, cols, keys, nkeys);
	buf_printf(out, " LIMIT %" PRIu64, limit);
}

void bfsql_watermark_content(buf *out, const char *id, const char *nonce, bool high)
{
	buf_printf(out, "%s:%s:%s", id, nonce, high ? "high" : "low");
}

bool bfsql_watermark_parse(const char *content, size_t len, char *id, size_t idlen, char *nonce,
			   size_t noncelen, bool *high)
{
	const char *end = content + len, *c1 = memchr(content, ':', len);
	const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
	if (!c2 || c1 == content || c2 == c1 + 1)
		return false;
	size_t rest = (size_t)(end - c2 - 1), ni = (size_t)(c1 - content), nn = (size_t)(c2 - c1 - 1);
	if (rest == 4 && memcmp(c2 + 1, "high", 4) == 0)
		*high = true;
	else if (rest == 3 && memcmp(c2 + 1, "low", 3) == 0)
		*high = false;
	else
		return false;
	if (ni >= idlen || nn >= noncelen)
		return false;
	memcpy(id, content, ni);
	id[ni] = '\0';
	memcpy(nonce, c1 + 1, nn);
	nonce[nn] = '\0';
	return true;
}
