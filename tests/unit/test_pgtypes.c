/* test_pgtypes.c: a column's type as format_type() prints it, for every family with its typmods,
 * against what a PostgreSQL 15.18 server printed; types of the database's own from Type messages;
 * numeric's precision and scale. */
#include "decoder/pgoutput.h"
#include "decoder/pgtypes.h"

#include "test.h"

typedef struct want {
	uint32_t oid;
	int32_t typmod;
	const char *text;
} want;

/* The columns of a table of every family with typmods, from the server:
 *   SELECT atttypid, atttypmod, format_type(atttypid, atttypmod) FROM pg_attribute
 *   WHERE attrelid = 'ft'::regclass AND attnum > 0 ORDER BY attnum
 * (numeric(10,2), numeric(3,-2), varchar(20), char(3), "char", time(3), timetz(0), timestamp(6),
 * timestamptz(2), interval of each field list and precision, bit(5), varbit(7), arrays of typmod'd
 * types, and one column of each other common type). */
/* clang-format off */
static const want columns[] = {
	{1700, 655366, "numeric(10,2)"},
	{1700, 327684, "numeric(5,0)"},
	{1700, -1, "numeric"},
	{1700, 198658, "numeric(3,-2)"},
	{1700, 65536004, "numeric(1000,0)"},
	{1700, 262154, "numeric(4,6)"},
	{1043, 24, "character varying(20)"},
	{1043, -1, "character varying"},
	{1042, 7, "character(3)"},
	{1042, 5, "character(1)"},
	{1042, -1, "bpchar"},
	{18, -1, "\"char\""},
	{1083, 3, "time(3) without time zone"},
	{1083, -1, "time without time zone"},
	{1266, 0, "time(0) with time zone"},
	{1114, 6, "timestamp(6) without time zone"},
	{1184, 2, "timestamp(2) with time zone"},
	{1184, -1, "timestamp with time zone"},
	{1114, -1, "timestamp without time zone"},
	{1186, -1, "interval"},
	{1186, 327679, "interval year"},
	{1186, 196607, "interval month"},
	{1186, 589823, "interval day"},
	{1186, 67174399, "interval hour"},
	{1186, 134283263, "interval minute"},
	{1186, 268500991, "interval second"},
	{1186, 458751, "interval year to month"},
	{1186, 67698687, "interval day to hour"},
	{1186, 201916415, "interval day to minute"},
	{1186, 470351871, "interval day to second"},
	{1186, 201392127, "interval hour to minute"},
	{1186, 469827583, "interval hour to second"},
	{1186, 402718719, "interval minute to second"},
	{1186, 2147418115, "interval(3)"},
	{1186, 470286338, "interval day to second(2)"},
	{1186, 268435460, "interval second(4)"},
	{1560, 5, "bit(5)"},
	{1560, 1, "bit(1)"},
	{1562, 7, "bit varying(7)"},
	{1562, -1, "bit varying"},
	{1231, 655366, "numeric(10,2)[]"},
	{1015, 13, "character varying(9)[]"},
	{1007, -1, "integer[]"},
	{1185, 3, "timestamp(3) with time zone[]"},
	{1014, 6, "character(2)[]"},
	{1561, 3, "bit(3)[]"},
	{25, -1, "text"},
	{3802, -1, "jsonb"},
	{2950, -1, "uuid"},
	{17, -1, "bytea"},
	{21, -1, "smallint"},
	{20, -1, "bigint"},
	{700, -1, "real"},
	{701, -1, "double precision"},
	{16, -1, "boolean"},
	{1082, -1, "date"},
	{26, -1, "oid"},
	{19, -1, "name"},
	{142, -1, "xml"},
	{790, -1, "money"},
	{869, -1, "inet"},
	{3614, -1, "tsvector"},
	{3904, -1, "int4range"},
	{600, -1, "point"},
	{22, -1, "int2vector"},
};

/* Every built-in type without a typmod:
 *   SELECT oid, format_type(oid, -1) FROM pg_type WHERE oid < 10000 AND typtype IN ('b','r','m') */
static const want all_types[] = {
	{16, -1, "boolean"},
	{17, -1, "bytea"},
	{18, -1, "\"char\""},
	{19, -1, "name"},
	{20, -1, "bigint"},
	{21, -1, "smallint"},
	{22, -1, "int2vector"},
	{23, -1, "integer"},
	{24, -1, "regproc"},
	{25, -1, "text"},
	{26, -1, "oid"},
	{27, -1, "tid"},
	{28, -1, "xid"},
	{29, -1, "cid"},
	{30, -1, "oidvector"},
	{114, -1, "json"},
	{142, -1, "xml"},
	{143, -1, "xml[]"},
	{194, -1, "pg_node_tree"},
	{199, -1, "json[]"},
	{210, -1, "pg_type[]"},
	{270, -1, "pg_attribute[]"},
	{271, -1, "xid8[]"},
	{272, -1, "pg_proc[]"},
	{273, -1, "pg_class[]"},
	{600, -1, "point"},
	{601, -1, "lseg"},
	{602, -1, "path"},
	{603, -1, "box"},
	{604, -1, "polygon"},
	{628, -1, "line"},
	{629, -1, "line[]"},
	{650, -1, "cidr"},
	{651, -1, "cidr[]"},
	{700, -1, "real"},
	{701, -1, "double precision"},
	{718, -1, "circle"},
	{719, -1, "circle[]"},
	{774, -1, "macaddr8"},
	{775, -1, "macaddr8[]"},
	{790, -1, "money"},
	{791, -1, "money[]"},
	{829, -1, "macaddr"},
	{869, -1, "inet"},
	{1000, -1, "boolean[]"},
	{1001, -1, "bytea[]"},
	{1002, -1, "\"char\"[]"},
	{1003, -1, "name[]"},
	{1005, -1, "smallint[]"},
	{1006, -1, "int2vector[]"},
	{1007, -1, "integer[]"},
	{1008, -1, "regproc[]"},
	{1009, -1, "text[]"},
	{1010, -1, "tid[]"},
	{1011, -1, "xid[]"},
	{1012, -1, "cid[]"},
	{1013, -1, "oidvector[]"},
	{1014, -1, "bpchar[]"},
	{1015, -1, "character varying[]"},
	{1016, -1, "bigint[]"},
	{1017, -1, "point[]"},
	{1018, -1, "lseg[]"},
	{1019, -1, "path[]"},
	{1020, -1, "box[]"},
	{1021, -1, "real[]"},
	{1022, -1, "double precision[]"},
	{1027, -1, "polygon[]"},
	{1028, -1, "oid[]"},
	{1033, -1, "aclitem"},
	{1034, -1, "aclitem[]"},
	{1040, -1, "macaddr[]"},
	{1041, -1, "inet[]"},
	{1042, -1, "bpchar"},
	{1043, -1, "character varying"},
	{1082, -1, "date"},
	{1083, -1, "time without time zone"},
	{1114, -1, "timestamp without time zone"},
	{1115, -1, "timestamp without time zone[]"},
	{1182, -1, "date[]"},
	{1183, -1, "time without time zone[]"},
	{1184, -1, "timestamp with time zone"},
	{1185, -1, "timestamp with time zone[]"},
	{1186, -1, "interval"},
	{1187, -1, "interval[]"},
	{1231, -1, "numeric[]"},
	{1263, -1, "cstring[]"},
	{1266, -1, "time with time zone"},
	{1270, -1, "time with time zone[]"},
	{1560, -1, "\"bit\""},
	{1561, -1, "\"bit\"[]"},
	{1562, -1, "bit varying"},
	{1563, -1, "bit varying[]"},
	{1700, -1, "numeric"},
	{1790, -1, "refcursor"},
	{2201, -1, "refcursor[]"},
	{2202, -1, "regprocedure"},
	{2203, -1, "regoper"},
	{2204, -1, "regoperator"},
	{2205, -1, "regclass"},
	{2206, -1, "regtype"},
	{2207, -1, "regprocedure[]"},
	{2208, -1, "regoper[]"},
	{2209, -1, "regoperator[]"},
	{2210, -1, "regclass[]"},
	{2211, -1, "regtype[]"},
	{2949, -1, "txid_snapshot[]"},
	{2950, -1, "uuid"},
	{2951, -1, "uuid[]"},
	{2970, -1, "txid_snapshot"},
	{3220, -1, "pg_lsn"},
	{3221, -1, "pg_lsn[]"},
	{3361, -1, "pg_ndistinct"},
	{3402, -1, "pg_dependencies"},
	{3614, -1, "tsvector"},
	{3615, -1, "tsquery"},
	{3642, -1, "gtsvector"},
	{3643, -1, "tsvector[]"},
	{3644, -1, "gtsvector[]"},
	{3645, -1, "tsquery[]"},
	{3734, -1, "regconfig"},
	{3735, -1, "regconfig[]"},
	{3769, -1, "regdictionary"},
	{3770, -1, "regdictionary[]"},
	{3802, -1, "jsonb"},
	{3807, -1, "jsonb[]"},
	{3904, -1, "int4range"},
	{3905, -1, "int4range[]"},
	{3906, -1, "numrange"},
	{3907, -1, "numrange[]"},
	{3908, -1, "tsrange"},
	{3909, -1, "tsrange[]"},
	{3910, -1, "tstzrange"},
	{3911, -1, "tstzrange[]"},
	{3912, -1, "daterange"},
	{3913, -1, "daterange[]"},
	{3926, -1, "int8range"},
	{3927, -1, "int8range[]"},
	{4072, -1, "jsonpath"},
	{4073, -1, "jsonpath[]"},
	{4089, -1, "regnamespace"},
	{4090, -1, "regnamespace[]"},
	{4096, -1, "regrole"},
	{4097, -1, "regrole[]"},
	{4191, -1, "regcollation"},
	{4192, -1, "regcollation[]"},
	{4451, -1, "int4multirange"},
	{4532, -1, "nummultirange"},
	{4533, -1, "tsmultirange"},
	{4534, -1, "tstzmultirange"},
	{4535, -1, "datemultirange"},
	{4536, -1, "int8multirange"},
	{4600, -1, "pg_brin_bloom_summary"},
	{4601, -1, "pg_brin_minmax_multi_summary"},
	{5017, -1, "pg_mcv_list"},
	{5038, -1, "pg_snapshot"},
	{5039, -1, "pg_snapshot[]"},
	{5069, -1, "xid8"},
	{6150, -1, "int4multirange[]"},
	{6151, -1, "nummultirange[]"},
	{6152, -1, "tsmultirange[]"},
	{6153, -1, "tstzmultirange[]"},
	{6155, -1, "datemultirange[]"},
	{6157, -1, "int8multirange[]"},
};
/* clang-format on */

static void check_table(const want *w, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		buf b = {0};
		CHECK(pgo_types_format(&b, w[i].oid, w[i].typmod));
		if (!b.data || strcmp(b.data, w[i].text) != 0)
			fprintf(stderr, "oid %u typmod %d\n", w[i].oid, w[i].typmod);
		CHECK_STR(b.data, w[i].text);
		buf_free(&b);
	}
}

static void test_builtin(void)
{
	check_table(columns, sizeof(columns) / sizeof(columns[0]));
	check_table(all_types, sizeof(all_types) / sizeof(all_types[0]));
	buf b = {0};
	CHECK(!pgo_types_format(&b, 16385, -1)); /* not built in: nothing appended */
	CHECK_INT(b.len, 0);
	buf_free(&b);
}

static void test_numeric_typmod(void)
{
	int p = 0, s = 0;
	CHECK(pgo_types_numeric_typmod(655366, &p, &s));
	CHECK_INT(p, 10);
	CHECK_INT(s, 2);
	CHECK(pgo_types_numeric_typmod(198658, &p, &s)); /* numeric(3,-2) */
	CHECK_INT(p, 3);
	CHECK_INT(s, -2);
	CHECK(pgo_types_numeric_typmod(262154, &p, &s)); /* numeric(4,6) */
	CHECK_INT(s, 6);
	CHECK(!pgo_types_numeric_typmod(-1, &p, &s));
}

static void named(const char *nsp, const char *typ, const char *expect)
{
	buf b = {0};
	pgo_types_format_named(&b, nsp, typ);
	CHECK_STR(b.data, expect);
	buf_free(&b);
}

static void test_named(void)
{
	named("public", "mood", "mood");
	named("public", "_mood", "mood[]");
	named("shop", "money_amount", "shop.money_amount");
	named("Shop", "My Type", "\"Shop\".\"My Type\"");
	named("s", "a\"b", "s.\"a\"\"b\"");
	named("s", "1st", "s.\"1st\"");
	named("s", "_", "s._");
	named("pg_catalog", "int4", "integer"); /* a domain over integer: pgoutput sends its base type */
	named("pg_catalog", "_varchar", "character varying[]");
}

/* Through the relation cache: a Type message's type, a built-in one, one nobody announced. */
static void test_relcache(void)
{
	pgo_relcache *rc = pgo_relcache_new();
	pgo_msg t = {.type = PGO_TYPE, .typ = {.oid = 16390, .nspname = "inventory", .typname = "_status"}};
	pgo_relcache_put_type(rc, &t);
	buf b = {0};
	pgo_format_type(rc, 16390, -1, &b);
	CHECK_STR(b.data, "inventory.status[]");
	CHECK_STR(pgo_type_name_of(rc, 16390), "inventory._status");
	buf_reset(&b);
	pgo_format_type(rc, PGT_NUMERIC, 655366, &b);
	CHECK_STR(b.data, "numeric(10,2)");
	buf_reset(&b);
	pgo_format_type(rc, 16391, -1, &b);
	CHECK_STR(b.data, "???");
	buf_free(&b);
	pgo_relcache_free(rc);
}

int main(void)
{
	test_builtin();
	test_numeric_typmod();
	test_named();
	test_relcache();
	return TEST_SUMMARY("test_pgtypes");
}
