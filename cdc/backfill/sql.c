/* sql.c: the statements of a backfill; see sql.h. */
#include "cdc/backfill/sql.h"

#include <inttypes.h>
#include <string.h>

#include "cdc/backfill/window.h"
#include "decoder/base/bytes.h"
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

const char bfsql_tables[] =
    "SELECT pt.schemaname, pt.tablename, c.oid, c.relkind, k.name, "
    "pg_catalog.has_table_privilege(c.oid, 'SELECT') "
    "FROM pg_catalog.pg_publication_tables pt "
    "JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname "
    "JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename " PG_KEY_JOIN
    "WHERE pt.pubname = $1 ORDER BY 1, 2";

const char bfsql_columns[] = "SELECT a.attrelid, a.attname, a.atttypid, t.typname "
			     "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
			     "WHERE a.attrelid = ANY ($1::pg_catalog.oid[]) AND a.attnum > 0 AND NOT "
			     "a.attisdropped ORDER BY a.attrelid, a.attnum";

const char bfsql_describe[] =
    "SELECT a.attname, a.atttypid, tn.nspname, t.typname, pg_catalog.array_position(k.cols, a.attnum), "
    "k.name, c.relkind, pg_catalog.has_table_privilege(c.oid, 'SELECT'), c.reltuples, a.atttypmod, "
    "c.relreplident, c.oid "
    "FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
    "JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
    "JOIN pg_catalog.pg_namespace tn ON tn.oid = t.typnamespace " PG_KEY_JOIN
    "WHERE n.nspname = $1 AND c.relname = $2 "
    "AND (a.attgenerated = '' OR a.attgenerated = 's' AND (SELECT pg_catalog.to_jsonb(p) ->> 'pubgencols' "
    "FROM pg_catalog.pg_publication p WHERE p.pubname = $3) = 's') "
    "ORDER BY a.attnum";

const char bfsql_leaves[] =
    "SELECT c.oid, n.nspname, c.relname, pg_catalog.pg_relation_size(c.oid) / "
    "pg_catalog.current_setting('block_size')::pg_catalog.int8, c.relpages, c.reltuples, "
    "pg_catalog.has_table_privilege(c.oid, 'SELECT') "
    "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind = 'r' AND (c.oid = $1::pg_catalog.oid OR c.oid IN (SELECT p.relid FROM "
    "pg_catalog.pg_partition_tree($1::pg_catalog.oid::pg_catalog.regclass) p WHERE p.isleaf)) ORDER BY 1";

const char bfsql_watermark[] = "SELECT pg_catalog.pg_logical_emit_message(false, '" BFSQL_PREFIX "', $1)";
/* A non-transactional message is not flushed by itself: the walsender would send it only after the
 * WAL writer's next round (wal_writer_delay, 200 ms), and every chunk would wait that long for its
 * high watermark. So the statement flushes the WAL up to it (PG_FLUSH_ITEMS). */
const char bfsql_watermark_high[] =
    "SELECT pg_catalog.pg_logical_emit_message(false, '" BFSQL_PREFIX "', $1), " PG_FLUSH_ITEMS;

bool backfill_sql_ident_ok(const char *name, const char *what, char *err, size_t errlen)
{
	size_t len = strlen(name);
	if (len == 0)
		return util_errf(err, errlen, "%s is empty", what);
	if (len > BFSQL_MAX_IDENT)
		return util_errf(err, errlen, "%s '%.64s...' is longer than %d bytes", what, name,
				 BFSQL_MAX_IDENT);
	for (size_t i = 0; i < len;) {
		const unsigned char *p = (const unsigned char *)name + i;
		size_t skip, n = *p < 0x80 ? 1 : util_utf8_seq(p, len - i, &skip);
		if (n == 0)
			return util_errf(err, errlen, "%s is not valid UTF-8", what);
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

void backfill_sql_quote_ident(buf *out, const char *name)
{
	quote(out, '"', name, strlen(name));
}

void backfill_sql_quote_literal(buf *out, const char *s, size_t len)
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
	backfill_sql_quote_ident(out, schema);
	buf_putc(out, '.');
	backfill_sql_quote_ident(out, name);
}

void backfill_sql_no_emit_message(buf *out, const char *role, const char *function)
{
	buf_printf(out,
		   "role %s may not execute pg_logical_emit_message, which writes a backfill's "
		   "watermarks: run GRANT EXECUTE ON FUNCTION pg_catalog.%s TO ",
		   role, function);
	backfill_sql_quote_ident(out, role);
}

void backfill_sql_no_select(buf *out, const char *role, const char *schema, const char *table)
{
	buf_printf(out, "role %s may not read %s.%s: run GRANT SELECT ON ", role, schema, table);
	qualified(out, schema, table);
	buf_puts(out, " TO ");
	backfill_sql_quote_ident(out, role);
}

void backfill_sql_no_table(buf *out, const char *schema, const char *table)
{
	buf_printf(out, "table %s.%s does not exist", schema, table);
}

void backfill_sql_not_table(buf *out, const char *schema, const char *table, char relkind)
{
	buf_printf(out, "%s.%s is not a table (relkind '%c')", schema, table, relkind);
}

void backfill_sql_keyless(buf *out, const char *schema, const char *table)
{
	buf_printf(
	    out,
	    "%s.%s has no key, so a consumer of its backfill can apply its updates and deletes only with "
	    "REPLICA IDENTITY FULL: run ALTER TABLE ",
	    schema, table);
	qualified(out, schema, table);
	buf_puts(out, " REPLICA IDENTITY FULL");
}

/* "a", "b": the key columns. */
static void key_list(buf *out, const bfsql_col *cols, const size_t *keys, size_t nkeys)
{
	for (size_t i = 0; i < nkeys; i++) {
		if (i)
			buf_puts(out, ", ");
		backfill_sql_quote_ident(out, cols[keys[i]].name);
	}
}

/* The rows with one of r's keys: (k1, k2) IN (VALUES ('v1'::t1, 'v2'::t2), ...). */
static bool keys_in(buf *out, const bfsql_read *r)
{
	const uint8_t *p = r->keyvals, *end = p + r->keyvals_len;
	bf_datum d[r->nkeys ? r->nkeys : 1];
	buf_puts(out, r->nkeys > 1 ? "(" : "");
	key_list(out, r->cols, r->keys, r->nkeys);
	buf_puts(out, r->nkeys > 1 ? ") IN (VALUES " : " IN (VALUES ");
	for (size_t i = 0; i < r->nkeyvals; i++) {
		if (end - p < 4 || (size_t)(end - p - 4) < get_be32(p))
			return false;
		uint32_t len = get_be32(p);
		if (!backfill_decode(p + 4, len, d, r->nkeys))
			return false;
		p += 4 + len;
		buf_puts(out, i ? ", (" : "(");
		for (size_t k = 0; k < r->nkeys; k++) {
			if (k)
				buf_puts(out, ", ");
			if (d[k].len < 0)
				buf_puts(out, "NULL");
			else
				backfill_sql_quote_literal(out, d[k].data, (size_t)d[k].len);
			buf_puts(out, "::");
			qualified(out, r->cols[r->keys[k]].type_schema, r->cols[r->keys[k]].type_name);
		}
		buf_putc(out, ')');
	}
	buf_putc(out, ')');
	return p == end && r->nkeyvals > 0;
}

/* Whether leaf is still a partition of root (directly or below another), under the statement's
 * snapshot; one that is being detached no longer counts. */
static void still_partition(buf *out, uint32_t leaf, uint32_t root)
{
	buf_printf(
	    out,
	    " AND EXISTS (WITH RECURSIVE up(rel) AS (SELECT %u::pg_catalog.oid UNION SELECT i.inhparent "
	    "FROM pg_catalog.pg_inherits i JOIN up ON i.inhrelid = up.rel WHERE NOT i.inhdetachpending) "
	    "SELECT FROM up WHERE up.rel = %u::pg_catalog.oid)",
	    leaf, root);
}

bool backfill_sql_copy(buf *out, const bfsql_read *r)
{
	/* Three statements in one query string run in one transaction. Under REPEATABLE READ, the
	 * snapshot that the SELECT shows is the one the COPY reads by. The COPY lists the table's
	 * columns as they are, so the server sends its tuples without a projection. An extra column
	 * or a UNION for the snapshot cost it about 10% more instructions. */
	buf_puts(out, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; "
		      "SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text; COPY (SELECT ");
	for (size_t i = 0; i < r->ncols; i++) {
		if (i)
			buf_puts(out, ", ");
		backfill_sql_quote_ident(out, r->cols[i].name);
	}
	buf_puts(out, " FROM ");
	if (r->keyvals) {
		qualified(out, r->schema, r->table);
		buf_puts(out, " WHERE ");
		if (!keys_in(out, r))
			return false;
	} else {
		/* TID range scans (PostgreSQL 14): the blocks in their physical order, no index. */
		buf_puts(out, "ONLY ");
		qualified(out, r->leaf_schema, r->leaf_name);
		buf_printf(out, " WHERE ctid >= '(%u,0)'::pg_catalog.tid AND ctid < '(%u,0)'::pg_catalog.tid",
			   r->lo, r->hi);
		if (r->root_oid)
			still_partition(out, r->leaf_oid, r->root_oid);
	}
	if (r->where)
		buf_printf(out, " AND (%s)", r->where);
	buf_puts(out, ") TO STDOUT");
	return true;
}

/* ---- where ---- */

/* Whether a literal of kind k compares with a column of type oid as match_predicate_eval compares it. */
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
	backfill_sql_quote_ident(out, c->name);
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
		backfill_sql_quote_literal(out, n->s, n->len);
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
	for (int32_t k = first; k >= 0; k = match_predicate_node_at(x->p, k).next) {
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
	pred_node n = match_predicate_node_at(x->p, i), l, r;
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
		l = match_predicate_node_at(x->p, n.a);
		r = match_predicate_node_at(x->p, n.b);
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
		l = match_predicate_node_at(x->p, n.a);
		c = column(&l, x->cols, x->ncols);
		if (!c)
			return false;
		buf_putc(out, '(');
		sql_column(out, c);
		buf_puts(out, n.flag ? " NOT IN (" : " IN (");
		for (int32_t k = n.b; k >= 0; k = r.next) {
			r = match_predicate_node_at(x->p, k);
			if (!literal_fits(c->type_oid, r.kind))
				return false;
			buf_puts(out, k == n.b ? "" : ", ");
			sql_literal(out, &r);
		}
		buf_puts(out, "))");
		return true;
	case PRED_ISNULL:
		l = match_predicate_node_at(x->p, n.a);
		c = column(&l, x->cols, x->ncols);
		if (!c)
			return false;
		buf_putc(out, '(');
		backfill_sql_quote_ident(out, c->name);
		buf_puts(out, n.flag ? " IS NOT NULL)" : " IS NULL)");
		return true;
	default:
		return false;
	}
}

bool backfill_sql_where(buf *out, const pred *p, const bfsql_col *cols, size_t ncols)
{
	where_ctx x = {p, cols, ncols};
	int32_t root = match_predicate_root(p);
	pred_node n = match_predicate_node_at(p, root);
	/* The top-level conjuncts one by one: those that translate narrow the chunk, cdc checks the
	 * rest. */
	int32_t first = n.kind == PRED_AND ? n.a : root;
	bool all = true, any = false;
	buf one = {0};
	for (int32_t k = first; k >= 0; k = n.kind == PRED_AND ? match_predicate_node_at(p, k).next : -1) {
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

void backfill_sql_watermark_content(buf *out, const char *id, const char *nonce, bool high)
{
	buf_printf(out, "%s:%s:%s", id, nonce, high ? "high" : "low");
}

bool backfill_sql_watermark_parse(const char *content, size_t len, char *id, size_t idlen, char *nonce,
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
