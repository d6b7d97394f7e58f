/* sql.c: the statements of a backfill; see sql.h. */
#include "cdc/backfill/sql.h"

#include <inttypes.h>
#include <string.h>

#include "decoder/pgtypes.h"

/* NAMEDATALEN - 1: PostgreSQL truncates longer names, which would then name something else. */
#define BFSQL_MAX_IDENT 63

/* The text variant of pg_logical_emit_message, whatever its arguments: PostgreSQL 17 added a fourth
 * (flush boolean DEFAULT false), so a signature written out names no function on one side of 17. */
const char bfsql_privileges[] = "SELECT current_user, pg_catalog.has_function_privilege(p.oid, 'EXECUTE'), "
				"p.oid::pg_catalog.regprocedure::pg_catalog.text FROM pg_catalog.pg_proc p "
				"WHERE p.proname = 'pg_logical_emit_message' "
				"AND p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace "
				"AND p.proargtypes[2] = 'pg_catalog.text'::pg_catalog.regtype";

const char bfsql_tables[] = "SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables "
			    "WHERE pubname = $1 ORDER BY 1, 2";

const char bfsql_describe[] =
    "SELECT a.attname, a.atttypid, tn.nspname, t.typname, pg_catalog.array_position(k.cols, a.attnum), "
    "k.name, c.relkind, pg_catalog.has_table_privilege(c.oid, 'SELECT'), c.reltuples, a.atttypmod "
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
    "AND (a.attgenerated = '' OR a.attgenerated = 's' AND (SELECT pg_catalog.to_jsonb(p) ->> 'pubgencols' "
    "FROM pg_catalog.pg_publication p WHERE p.pubname = $3) = 's') "
    "ORDER BY a.attnum";

const char bfsql_watermark[] = "SELECT pg_catalog.pg_logical_emit_message(false, '" BFSQL_PREFIX "', $1)";
/* A non-transactional message is not flushed by itself: the walsender would send it only after the
 * WAL writer's next round (wal_writer_delay, 200 ms), and every chunk would wait that long for its
 * high watermark. An xid makes the statement's commit write a record and, with synchronous_commit
 * on for this transaction (whatever the server's setting), flush the WAL up to it. */
const char bfsql_watermark_high[] = "SELECT pg_catalog.pg_logical_emit_message(false, '" BFSQL_PREFIX
				    "', $1), pg_catalog.set_config('synchronous_commit', 'on', true), "
				    "pg_catalog.txid_current()";

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

void bfsql_no_emit_message(buf *out, const char *role, const char *function)
{
	buf_printf(out,
		   "role %s may not execute pg_logical_emit_message, which writes a backfill's "
		   "watermarks: run GRANT EXECUTE ON FUNCTION pg_catalog.%s TO ",
		   role, function);
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
	/* A subquery: one call per statement (an InitPlan, under the statement's snapshot), not one per
	 * row; computed per row, it cost a quarter of the chunk's time. */
	buf_puts(out, "SELECT (SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text)");
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

/* ---- where ---- */

/* Whether a literal of kind k compares with a column of type oid as pred_eval compares it. */
static bool literal_fits(uint32_t oid, pred_kind k)
{
	switch (oid) {
	case PGT_INT2:
	case PGT_INT4:
	case PGT_INT8:
	case PGT_NUMERIC:
		return k == PRED_NUM || k == PRED_NULL;
	case PGT_TEXT:
	case PGT_VARCHAR:
		return k == PRED_STR || k == PRED_NULL;
	case PGT_BOOL:
		return k == PRED_BOOL || k == PRED_NULL;
	default:
		return false;
	}
}

/* The table's column a new.column node names, or NULL. */
static const bfsql_col *column(const pred_node *n, const bfsql_col *cols, size_t ncols)
{
	if (n->kind != PRED_COL || n->flag)
		return NULL;
	for (size_t i = 0; i < ncols; i++)
		if (strlen(cols[i].name) == n->len && memcmp(cols[i].name, n->s, n->len) == 0)
			return &cols[i];
	return NULL;
}

/* A column in byte order where its type is text. */
static void sql_column(buf *out, const bfsql_col *c)
{
	bfsql_quote_ident(out, c->name);
	if (c->type_oid == PGT_TEXT || c->type_oid == PGT_VARCHAR)
		buf_puts(out, " COLLATE \"C\"");
}

static void sql_literal(buf *out, const pred_node *n)
{
	switch (n->kind) {
	case PRED_NUM:
		buf_printf(out, n->s[0] == '-' ? "(%.*s)" : "%.*s", (int)n->len, n->s);
		break;
	case PRED_STR:
		bfsql_quote_literal(out, n->s, n->len);
		break;
	case PRED_BOOL:
		buf_puts(out, n->flag ? "true" : "false");
		break;
	default:
		buf_puts(out, "NULL");
		break;
	}
}

typedef struct where_ctx {
	const pred *p;
	const bfsql_col *cols;
	size_t ncols;
} where_ctx;

static bool where_node(const where_ctx *x, int32_t i, buf *out);

/* Children of an and/or joined by op. */
static bool where_list(const where_ctx *x, int32_t first, const char *op, buf *out)
{
	buf_putc(out, '(');
	for (int32_t k = first; k >= 0; k = pred_node_at(x->p, k).next) {
		if (k != first)
			buf_puts(out, op);
		if (!where_node(x, k, out))
			return false;
	}
	buf_putc(out, ')');
	return true;
}

static bool where_node(const where_ctx *x, int32_t i, buf *out)
{
	static const char *const ops[] = {" = ", " <> ", " < ", " <= ", " > ", " >= "};
	pred_node n = pred_node_at(x->p, i), l, r;
	const bfsql_col *c;
	switch (n.kind) {
	case PRED_OR:
	case PRED_AND:
		return where_list(x, n.a, n.kind == PRED_OR ? " OR " : " AND ", out);
	case PRED_NOT:
		buf_puts(out, "(NOT ");
		if (!where_node(x, n.a, out))
			return false;
		buf_putc(out, ')');
		return true;
	case PRED_CMP: {
		l = pred_node_at(x->p, n.a);
		r = pred_node_at(x->p, n.b);
		bool col_left = l.kind == PRED_COL;
		c = column(col_left ? &l : &r, x->cols, x->ncols);
		if (!c || !literal_fits(c->type_oid, col_left ? r.kind : l.kind))
			return false;
		buf_putc(out, '(');
		if (col_left)
			sql_column(out, c);
		else
			sql_literal(out, &l);
		buf_puts(out, ops[n.op]);
		if (col_left)
			sql_literal(out, &r);
		else
			sql_column(out, c);
		buf_putc(out, ')');
		return true;
	}
	case PRED_IN:
		l = pred_node_at(x->p, n.a);
		c = column(&l, x->cols, x->ncols);
		if (!c)
			return false;
		buf_putc(out, '(');
		sql_column(out, c);
		buf_puts(out, n.flag ? " NOT IN (" : " IN (");
		for (int32_t k = n.b; k >= 0; k = r.next) {
			r = pred_node_at(x->p, k);
			if (!literal_fits(c->type_oid, r.kind))
				return false;
			buf_puts(out, k == n.b ? "" : ", ");
			sql_literal(out, &r);
		}
		buf_puts(out, "))");
		return true;
	case PRED_ISNULL:
		l = pred_node_at(x->p, n.a);
		c = column(&l, x->cols, x->ncols);
		if (!c)
			return false;
		buf_putc(out, '(');
		bfsql_quote_ident(out, c->name);
		buf_puts(out, n.flag ? " IS NOT NULL)" : " IS NULL)");
		return true;
	default:
		return false;
	}
}

bool bfsql_where(buf *out, const pred *p, const bfsql_col *cols, size_t ncols)
{
	where_ctx x = {p, cols, ncols};
	int32_t root = pred_root(p);
	pred_node n = pred_node_at(p, root);
	/* The top-level conjuncts one by one: those that translate narrow the chunk, cdc checks the
	 * rest. */
	int32_t first = n.kind == PRED_AND ? n.a : root;
	bool all = true, any = false;
	buf one = {0};
	for (int32_t k = first; k >= 0; k = n.kind == PRED_AND ? pred_node_at(p, k).next : -1) {
		buf_reset(&one);
		if (!where_node(&x, k, &one)) {
			all = false;
			continue;
		}
		if (any)
			buf_puts(out, " AND ");
		buf_append(out, one.data, one.len);
		any = true;
	}
	buf_free(&one);
	return all;
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
