/* test_backfill_sql.c: the statements of a backfill (cdc/backfill/sql.c), text exactly: quoting,
 * identifier checks, the chunk query with and without a cursor and a `where`, the messages that
 * say what to grant, and the watermarks' content. */
#include <string.h>

#include "cdc/backfill/sql.h"
#include "cdc/backfill/window.h"
#include "test.h"

static void test_quoting(void)
{
	static const struct {
		const char *in, *ident, *literal;
	} cases[] = {
	    {"orders", "\"orders\"", "'orders'"},
	    {"Odd \"Col", "\"Odd \"\"Col\"", "'Odd \"Col'"},
	    {"it's", "\"it's\"", "'it''s'"},
	    {"a\\b'c", "\"a\\b'c\"", "E'a\\\\b''c'"},
	    {"", "\"\"", "''"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		buf b = {0};
		backfill_sql_quote_ident(&b, cases[i].in);
		CHECK_STR(b.data, cases[i].ident);
		buf_reset(&b);
		backfill_sql_quote_literal(&b, cases[i].in, strlen(cases[i].in));
		CHECK_STR(b.data, cases[i].literal);
		buf_free(&b);
	}
	static const struct {
		const char *name, *err;
	} idents[] = {
	    {"orders", NULL},
	    {"Zürich", NULL},
	    {"", "table name is empty"},
	    {"a123456789012345678901234567890123456789012345678901234567890ab", NULL},
	    {"a123456789012345678901234567890123456789012345678901234567890abc",
	     "table name 'a123456789012345678901234567890123456789012345678901234567890abc...' is "
	     "longer than 63 bytes"},
	    {"bad\xff", "table name is not valid UTF-8"},
	};
	for (size_t i = 0; i < sizeof(idents) / sizeof(idents[0]); i++) {
		char err[256] = "";
		bool ok = backfill_sql_ident_ok(idents[i].name, "table name", err, sizeof(err));
		CHECK_INT(ok, idents[i].err == NULL);
		if (idents[i].err)
			CHECK_STR(err, idents[i].err);
	}
}

/* A chunk's COPY: by block range (of a table, or of a leaf while it is a partition), or by key. */
static void test_copy(void)
{
	bfsql_col cols[] = {
	    {"id", 23, "pg_catalog", "int4"},
	    {"Odd \"Col", 1043, "pg_catalog", "varchar"},
	    {"region", 25, "pg_catalog", "text"},
	    {"kind", 16500, "app", "Kind"},
	};
	static const char head[] =
	    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SELECT "
	    "pg_catalog.pg_current_snapshot()::pg_catalog.text; COPY (SELECT \"id\", \"Odd \"\"Col\", "
	    "\"region\", \"kind\" FROM ";
	static const char tail[] = ") TO STDOUT";
	buf b = {0}, want = {0};
	bfsql_read r = {.schema = "public",
			.table = "Orders",
			.cols = cols,
			.ncols = 4,
			.leaf_schema = "public",
			.leaf_name = "Orders",
			.leaf_oid = 16384,
			.lo = 128,
			.hi = 256};
	CHECK(backfill_sql_copy(&b, &r));
	buf_printf(&want,
		   "%sONLY \"public\".\"Orders\" WHERE ctid >= '(128,0)'::pg_catalog.tid AND ctid < "
		   "'(256,0)'::pg_catalog.tid%s",
		   head, tail);
	CHECK_STR(b.data, want.data);

	/* a leaf of a partitioned table, with a where */
	r.leaf_schema = "part";
	r.leaf_name = "Orders 2026";
	r.root_oid = 16380;
	r.where = "\"region\" = 'eu'";
	buf_reset(&b);
	buf_reset(&want);
	CHECK(backfill_sql_copy(&b, &r));
	buf_printf(
	    &want,
	    "%sONLY \"part\".\"Orders 2026\" WHERE ctid >= '(128,0)'::pg_catalog.tid AND ctid < "
	    "'(256,0)'::pg_catalog.tid AND EXISTS (WITH RECURSIVE up(rel) AS (SELECT 16384::pg_catalog.oid "
	    "UNION SELECT i.inhparent FROM pg_catalog.pg_inherits i JOIN up ON i.inhrelid = up.rel WHERE NOT "
	    "i.inhdetachpending) SELECT FROM up WHERE up.rel = 16380::pg_catalog.oid) AND (\"region\" = "
	    "'eu')%s",
	    head, tail);
	CHECK_STR(b.data, want.data);

	/* by key: two of two columns, a quote and a backslash in them */
	static const size_t two[] = {2, 3};
	bf_datum k1[] = {{"eu", 2}, {"a'b", 3}}, k2[] = {{"us", 2}, {"c\\d", 3}};
	buf keys = {0}, one = {0};
	for (int i = 0; i < 2; i++) {
		buf_reset(&one);
		backfill_encode(&one, i ? k2 : k1, 2);
		uint8_t len[4] = {0, 0, 0, (uint8_t)one.len};
		buf_append(&keys, len, 4);
		buf_append(&keys, one.data, one.len);
	}
	r = (bfsql_read){.schema = "public",
			 .table = "Orders",
			 .cols = cols,
			 .ncols = 4,
			 .keys = two,
			 .nkeys = 2,
			 .keyvals = keys.data,
			 .keyvals_len = keys.len,
			 .nkeyvals = 2};
	buf_reset(&b);
	buf_reset(&want);
	CHECK(backfill_sql_copy(&b, &r));
	buf_printf(
	    &want,
	    "%s\"public\".\"Orders\" WHERE (\"region\", \"kind\") IN (VALUES ('eu'::\"pg_catalog\".\"text\", "
	    "'a''b'::\"app\".\"Kind\"), ('us'::\"pg_catalog\".\"text\", E'c\\\\d'::\"app\".\"Kind\"))%s",
	    head, tail);
	CHECK_STR(b.data, want.data);
	/* keys that do not hold what they say are refused */
	r.nkeyvals = 3;
	buf_reset(&b);
	CHECK(!backfill_sql_copy(&b, &r));
	r.nkeyvals = 2;
	r.keyvals_len--;
	buf_reset(&b);
	CHECK(!backfill_sql_copy(&b, &r));
	buf_free(&keys);
	buf_free(&one);
	buf_free(&b);
	buf_free(&want);
}

static void test_messages(void)
{
	buf b = {0};
	backfill_sql_no_emit_message(&b, "cdc", "pg_logical_emit_message(boolean,text,text,boolean)");
	CHECK_STR(b.data, "role cdc may not execute pg_logical_emit_message, which writes a backfill's "
			  "watermarks: run GRANT EXECUTE ON FUNCTION "
			  "pg_catalog.pg_logical_emit_message(boolean,text,text,boolean) TO \"cdc\"");
	buf_reset(&b);
	backfill_sql_no_select(&b, "cdc", "public", "Orders");
	CHECK_STR(
	    b.data,
	    "role cdc may not read public.Orders: run GRANT SELECT ON \"public\".\"Orders\" TO \"cdc\"");
	buf_reset(&b);
	backfill_sql_keyless(&b, "public", "events");
	CHECK_STR(
	    b.data,
	    "public.events has no key, so a consumer of its backfill can apply its updates and deletes "
	    "only with REPLICA IDENTITY FULL: run ALTER TABLE \"public\".\"events\" REPLICA IDENTITY FULL");
	buf_reset(&b);
	backfill_sql_not_table(&b, "public", "v", 'v');
	CHECK_STR(b.data, "public.v is not a table (relkind 'v')");
	buf_reset(&b);
	backfill_sql_no_table(&b, "public", "gone");
	CHECK_STR(b.data, "table public.gone does not exist");
	buf_free(&b);
	CHECK_STR(bfsql_watermark, "SELECT pg_catalog.pg_logical_emit_message(false, 'cdc.backfill', $1)");
	CHECK(strstr(bfsql_watermark_high, "pg_logical_emit_message(false, 'cdc.backfill', $1), ") != NULL);
}

static void test_watermarks(void)
{
	buf b = {0};
	backfill_sql_watermark_content(&b, "4f2a", "9c1e-7", true);
	CHECK_STR(b.data, "4f2a:9c1e-7:high");
	buf_reset(&b);
	backfill_sql_watermark_content(&b, "4f2a", "9c1e-7", false);
	CHECK_STR(b.data, "4f2a:9c1e-7:low");
	buf_free(&b);
	static const struct {
		const char *content;
		bool ok;
		const char *id, *nonce;
		bool high;
	} cases[] = {
	    {"4f2a:9c1e-7:high", true, "4f2a", "9c1e-7", true},
	    {"4f2a:9c1e-7:low", true, "4f2a", "9c1e-7", false},
	    {"4f2a:9c1e-7:middle", false},
	    {"4f2a:9c1e-7:", false},
	    {":n:low", false},
	    {"id::low", false},
	    {"id:n", false},
	    {"id:n:low:x", false},
	    {"0123456789abcdef0123:n:low", false}, /* the id does not fit */
	    {"", false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char id[17], nonce[17];
		bool high = false;
		bool ok = backfill_sql_watermark_parse(cases[i].content, strlen(cases[i].content), id,
						       sizeof(id), nonce, sizeof(nonce), &high);
		CHECK_INT(ok, cases[i].ok);
		if (ok && cases[i].ok) {
			CHECK_STR(id, cases[i].id);
			CHECK_STR(nonce, cases[i].nonce);
			CHECK_INT(high, cases[i].high);
		}
	}
}

static void test_where(void)
{
	bfsql_col cols[] = {
	    {"id", 23, "pg_catalog", "int4"},	       {"status", 25, "pg_catalog", "text"},
	    {"amount", 1700, "pg_catalog", "numeric"}, {"paid", 16, "pg_catalog", "bool"},
	    {"doc", 3802, "pg_catalog", "jsonb"},      {"ratio", 701, "pg_catalog", "float8"},
	    {"Code", 1043, "pg_catalog", "varchar"},
	};
	static const struct {
		const char *where, *sql;
		bool all;
	} cases[] = {
	    {"new.id = 7", "(\"id\" = 7)", true},
	    {"new.status = 'paid' and new.amount >= 100",
	     "(\"status\" COLLATE \"C\" = 'paid') AND (\"amount\" >= 100)", true},
	    {"new.amount > -1.5e2", "(\"amount\" > (-1.5e2))", true},
	    {"100 <= new.amount", "(100 <= \"amount\")", true},
	    {"new.status < 'it''s'", "(\"status\" COLLATE \"C\" < 'it''s')", true},
	    {"new.\"Code\" <> 'a\\b'", "(\"Code\" COLLATE \"C\" <> E'a\\\\b')", true},
	    {"new.paid = true or not new.id != 3", "((\"paid\" = true) OR (NOT (\"id\" <> 3)))", true},
	    {"new.id in (1, 2, null)", "(\"id\" IN (1, 2, NULL))", true},
	    {"new.status not in ('a', 'b')", "(\"status\" COLLATE \"C\" NOT IN ('a', 'b'))", true},
	    {"new.doc is null and new.ratio is not null", "(\"doc\" IS NULL) AND (\"ratio\" IS NOT NULL)",
	     true},
	    {"new.id = null", "(\"id\" = NULL)", true},
	    /* conjuncts that do not translate are left to cdc */
	    {"new.id > 5 and old.id < 5", "(\"id\" > 5)", false},
	    {"new.ratio > 0.1 and new.id = 1", "(\"id\" = 1)", false},
	    {"new.id = '5'", "", false},    /* a string for an integer: match_predicate_eval says unknown */
	    {"new.status = 5", "", false},  /* a number for text */
	    {"new.paid = 't'", "", false},  /* a string for a boolean */
	    {"new.doc = null", "", false},  /* jsonb has no = */
	    {"new.missing = 1", "", false}, /* no such column */
	    {"new.id = new.amount", "", false},	  /* column to column */
	    {"1 = 1", "", false},		  /* literals only */
	    {"new.id in (1, new.id)", "", false}, /* a column in the list */
	    {"new.id = 1 or new.ratio = 2", "", false},
	    {"old.id is null", "", false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[256];
		pred *p = match_predicate_parse(cases[i].where, err, sizeof(err));
		CHECK(p != NULL);
		if (!p)
			continue;
		buf b = {0};
		bool all = backfill_sql_where(&b, p, cols, sizeof(cols) / sizeof(cols[0]));
		CHECK_STR(b.data ? b.data : "", cases[i].sql);
		CHECK_INT(all, cases[i].all);
		buf_free(&b);
		match_predicate_free(p);
	}
}

int main(void)
{
	test_where();
	test_quoting();
	test_copy();
	test_messages();
	test_watermarks();
	return TEST_SUMMARY("test_backfill_sql");
}
